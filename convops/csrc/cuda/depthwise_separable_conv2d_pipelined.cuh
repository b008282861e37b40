// Persistent, pipelined fused kernel of convops::depthwise_separable_conv2d: the depthwise intermediate lives only in
// shared memory and the pointwise 1x1 runs on tensor cores.
//
// Scope: contiguous NCHW input and output, stride 1, dilation 1, a KH x KW filter with KH, KW in {3, 5, 7}, rows whose
// length is a multiple of 16 bytes, small left/right padding, and a pointwise weight that fits in shared memory next
// to the pipeline. Other problems take the unfused path (the convops depthwise kernel, then ATen's 1x1 convolution).
//
// Design (issue #5; kernels-research.md §1, §7b). The op is memory-bound: the 1x1's FLOPs take a fifth of the time
// its bytes do on Hopper, so the kernel is built around keeping DRAM busy.
//   - A CTA stays resident (a grid of two CTAs per SM) and walks over pixel tiles of kTileRows x kTileCols outputs
//     for one tile of up to kCoutTile output channels, whose pointwise weights it loads into shared memory once,
//     already rounded for the MMA.
//   - The work is a stream of jobs (pixel tile, chunk of kChunk depthwise channels). A job's input rectangle
//     (halo rows, and 16-byte aligned column vectors around the tile) is copied kStages - 1 jobs ahead of its use,
//     zero-filled outside the image, so the copies of the next jobs are in flight while this one computes: on sm_90
//     with a channel multiplier of 1 as one box of the bulk-copy engine (one instruction of one thread, completing
//     on the stage's mbarrier), elsewhere as 16-byte cp.async of every thread (Stager).
//   - Per job, each thread computes a run of 8 depthwise outputs of one channel from shared memory (fp32, bias then
//     taps in (ky, kx) order as ATen does, so fp32 results are bitwise eager's) and stores them as the MMA's B
//     operand [channel][pixel] in one of two D buffers, rounded as the unfused ATen pair would see them (TF32
//     ties-to-even, or the input dtype).
//   - The pointwise GEMM C[cout][pixel] += W[cout][channel] * D[channel][pixel] accumulates in registers over the
//     chunks. Where the machine code is sm_90a (setup.py builds compute capability 9.0 so), 16-bit runs it on
//     wgmma (runs_wgmma): each warpgroup multiplies 64 couts by the tile's 128 pixels with both operands read from
//     shared memory in wgmma's K-major layout (WarpgroupLayout), asynchronously beside the depthwise stage; the
//     pointwise bias is added as the tile is stored. TF32 can too, but is faster on mma.sync on the H200 (its
//     kernel is bound by the depthwise stage, not by the 1x1). Elsewhere, and for strict fp32, mma.sync, the sums
//     starting from the bias: m16n8k8 TF32, three TF32 products per term (strict fp32: hi*hi + hi*lo + lo*hi keeps
//     fp32 accuracy on tensor cores), or m16n8k16 fp16/bf16, the weights in fragment order (one 16-byte load per A
//     fragment).
//   - One barrier a job: in the same phase the CTA computes job j's depthwise outputs into one D buffer and runs
//     job j - 1's MMA from the other, so FFMA and MMA work interleave.
//   - With couts as the MMA's M dimension, a thread's accumulators are pairs of adjacent pixels of one channel, so
//     the epilogue writes 8-byte (fp32) or 4-byte (16-bit) pairs; four lanes cover 32 contiguous bytes.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "common/checks.h"
#include "cuda/bulk_copy.cuh"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"
#include "cuda/wgmma.cuh"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {
namespace pipelined {

constexpr int kThreads = 256;
constexpr int kTileRows = 4, kTileCols = 32, kPixels = kTileRows * kTileCols;
constexpr int kCoutTile = 128;
constexpr int kChunk = 16;   // depthwise channels a job: two TF32 k8 steps or one 16-bit k16 step
constexpr int kStages = 3;   // staged jobs: one computing, two in flight
constexpr int kDBuffers = 2;  // depthwise outputs: one being written (job j), one read by the MMA (job j - 1)
constexpr int kRunLength = 8;  // depthwise outputs a thread computes per job (kChunk * kPixels / kThreads)
static_assert(kChunk * kPixels == kThreads * kRunLength, "one run of depthwise outputs per thread and job");

enum class Math { kTf32, kTf32x3, kHalf };

// Element layout of the staged input and of the two MMA operands.
template <typename scalar_t, int KH>
struct Layout {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(scalar_t));      // elements of one 16-byte copy
  static constexpr int kStagedCols = kTileCols + 2 * kVec;                   // one vector of halo each side
  static constexpr int kVectorsPerRow = kStagedCols / kVec;
  static constexpr int kStagedPitch = kStagedCols + kVec;                    // spreads rows over the banks
  static constexpr int kStagedRows = kTileRows + KH - 1;
  static constexpr int kStageElems = kChunk * kStagedRows * kStagedPitch;
  // D [channel][tile row][column], rows padded so that the depthwise stage's 16-byte stores and the MMA's B-fragment
  // reads are (nearly) free of bank conflicts.
  static constexpr int kRowPitchD = kTileCols + (sizeof(scalar_t) == 4 ? 4 : 8);
  static constexpr int kPitchD = kTileRows * kRowPitchD + 8;
};

template <typename scalar_t, Math kMath>
using operand_t = std::conditional_t<kMath == Math::kHalf, scalar_t, float>;

// D and the pointwise weights as the K-major operands of wgmma (sm_90a; TF32 and 16-bit, not 3xTF32, whose hi and lo
// parts would not fit two CTAs an SM): D's rows are the tile's pixels, W's the CTA's couts, and each row holds the
// chunk's channels in k-steps of 32 bytes (wgmma.cuh).
template <typename op_t>
struct WarpgroupLayout {
  static constexpr int kStepChannels = wgmma::kStepBytes / static_cast<int>(sizeof(op_t));
  static constexpr int kStepsPerChunk = kChunk / kStepChannels;
  // 16 bytes past a multiple of 128 between 8-pixel groups: the depthwise stage's stores (a warp: 16 runs of two
  // channels) then fall 2 to a bank instead of 16.
  using D = wgmma::KMajor<kPixels, 256 + 16>;
  using W = wgmma::KMajor<kCoutTile, 256>;
  static constexpr int kBytesD = kStepsPerChunk * D::kStepStride;
  static_assert(kChunk % kStepChannels == 0, "a chunk is whole k-steps");
};

template <typename scalar_t>
struct Params {
  const scalar_t* __restrict__ input;
  const scalar_t* __restrict__ dw_weight;
  const scalar_t* __restrict__ dw_bias;  // nullptr: none
  const scalar_t* __restrict__ pw_weight;
  const scalar_t* __restrict__ pw_bias;  // nullptr: none
  scalar_t* __restrict__ output;
  int in_channels, multiplier, mid_channels, out_channels;
  int in_h, in_w, out_h, out_w, pad_h;  // pad_w is (KW - 1) / 2 (launch_separable_pipelined takes no other)
  int tiles_x, tiles_y;
  int64_t tiles;   // pixel tiles over the whole batch
  int chunks;      // ceil(mid_channels / kChunk)
  CUtensorMap input_map;  // the input as (W, H, N * C_in), boxes of one stage: the kernel's box copies only
};

// Shared-memory carve-up, identical on host (launch size) and device.
template <typename scalar_t, int KH, int KW, Math kMath>
struct Smem {
  using L = Layout<scalar_t, KH>;
  using op_t = operand_t<scalar_t, kMath>;
  // One D buffer, in the mma.sync or the wgmma layout (whichever the loaded machine code uses: size for both).
  static constexpr size_t kDBufferBytes =
      std::max<size_t>(size_t(kChunk) * L::kPitchD * sizeof(op_t), WarpgroupLayout<op_t>::kBytesD);
  size_t stages, d, w, dw_w, dw_b, pw_b, full, total;
  __host__ __device__ explicit Smem(int chunks) {
    const size_t k_padded = size_t(chunks) * kChunk;
    stages = 0;
    d = stages + align(size_t(kStages) * L::kStageElems * sizeof(scalar_t));
    w = d + align(kDBuffers * kDBufferBytes);
    dw_w = w + align(size_t(kCoutTile) * k_padded * sizeof(op_t));
    dw_b = dw_w + align(k_padded * KH * KW * sizeof(float));
    pw_b = dw_b + align(k_padded * sizeof(float));
    full = pw_b + align(kCoutTile * sizeof(float));  // the stages' mbarriers (box copies)
    total = full + align(kStages * sizeof(uint64_t));
  }
  __host__ __device__ static size_t align(size_t bytes) { return (bytes + 15) / 16 * 16; }
};

// A pixel tile: image n, output rows [oy0, oy0 + kTileRows), columns [ox0, ox0 + kTileCols).
struct Tile {
  int64_t n;
  int oy0, ox0;
};

// A job's place in a CTA's stream, followed without dividing: its chunk of channels, its tile (the how-manieth of
// the CTA's tiles) and the stage buffer that holds its input.
struct JobCursor {
  int chunk = 0, tile = 0, stage = 0;
  __device__ __forceinline__ void advance(int chunks) {
    if (++chunk == chunks) {
      chunk = 0;
      ++tile;
    }
    if (++stage == kStages) stage = 0;
  }
};

template <typename scalar_t>
__device__ __forceinline__ Tile tile_at(const Params<scalar_t>& p, int64_t t) {
  const int64_t per_image = int64_t{p.tiles_x} * p.tiles_y;
  const int64_t n = t / per_image;
  const int r = static_cast<int>(t - n * per_image);
  return Tile{n, (r / p.tiles_x) * kTileRows, (r % p.tiles_x) * kTileCols};
}

// The copies of a job's input rectangle: kChunk channels x kStagedRows rows x kStagedCols columns starting at
// (oy0 - pad_h, ox0 - kVec) of the tile, in 16-byte vectors. Thread t copies vector position t % kPerChannel of
// channels t / kPerChannel + kGroups * s (slot s), so its copies differ only by whole channel planes: where they
// land and where they are read from is one offset computed once per kernel plus multiples of constants; whether the
// position lies inside the image is one test per tile; a job adds only its channels' offset. (An earlier version
// gave a thread vectors at unrelated positions and recomputed them on every job: a fifth of the kernel's
// instructions under ncu, and the registers that made it spill.) A vector lies wholly inside or outside the image
// (W is a multiple of kVec and so is ox0); outside it is zero-filled, which is the convolution's padding.
template <typename scalar_t, int KH>
struct Stager {
  using L = Layout<scalar_t, KH>;
  static constexpr int kPerChannel = L::kStagedRows * L::kVectorsPerRow;
  static_assert(kPerChannel <= kThreads, "one channel's vectors fit the block");
  static constexpr int kGroups = kThreads / kPerChannel;  // channels copied side by side
  static constexpr int kSlots = (kChunk + kGroups - 1) / kGroups;
  static constexpr int kStageChannelStride = L::kStagedRows * L::kStagedPitch;

  int group;        // the thread's first channel within a chunk; kGroups or more: the thread copies nothing
  int dst;          // element offset of the thread's first vector within a stage
  int src;          // element offset of that vector from the job's corner
  bool inside;      // the thread's position lies inside the image (this tile)
  int64_t corner;   // element offset of (n, channel 0, oy0 - pad_h, ox0 - kVec)

  __device__ __forceinline__ explicit Stager(const Params<scalar_t>& p) : inside(false), corner(0) {
    const int position = threadIdx.x % kPerChannel, row = position / L::kVectorsPerRow;
    const int col = position % L::kVectorsPerRow * L::kVec;
    // Threads past the last whole group copy nothing: their first channel is past every chunk's end.
    group = threadIdx.x < kGroups * kPerChannel ? threadIdx.x / kPerChannel : kChunk;
    dst = (group * L::kStagedRows + row) * L::kStagedPitch + col;
    src = group * p.in_h * p.in_w + row * p.in_w + col;  // launch_separable_pipelined checks that this fits an int
  }

  __device__ __forceinline__ void set_tile(const Params<scalar_t>& p, const Tile& tile) {
    const int iy0 = tile.oy0 - p.pad_h, ix0 = tile.ox0 - L::kVec;
    corner = (tile.n * p.in_channels * p.in_h + iy0) * int64_t{p.in_w} + ix0;
    const int position = threadIdx.x % kPerChannel;
    inside = static_cast<unsigned>(iy0 + position / L::kVectorsPerRow) < static_cast<unsigned>(p.in_h) &&
             static_cast<unsigned>(ix0 + position % L::kVectorsPerRow * L::kVec) < static_cast<unsigned>(p.in_w);
  }

  __device__ __forceinline__ void issue(scalar_t* __restrict__ stage, const Params<scalar_t>& p, int chunk) const {
    const int plane = p.in_h * p.in_w;
    // Slot s copies channel group + kGroups * s of the chunk, if it is one of the chunk's existing channels.
    const int channels = min(kChunk, p.mid_channels - chunk * kChunk) - group;
    if (p.multiplier == 1) {
      const scalar_t* base = p.input + (corner + int64_t{chunk} * kChunk * plane) + src;
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (kGroups * s >= channels) break;
        copy(stage, s, inside ? base + kGroups * s * plane : p.input);
      }
    } else {  // channel c of the intermediate reads input channel c / multiplier
      const scalar_t* base = p.input + corner + (src - group * plane);
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (kGroups * s >= channels) break;
        const int c = chunk * kChunk + group + kGroups * s;
        copy(stage, s, inside ? base + int64_t{c / p.multiplier} * plane : p.input);
      }
    }
  }

  __device__ __forceinline__ void copy(scalar_t* __restrict__ stage, int s, const scalar_t* from) const {
    cp_async_zfill<16>(stage + dst + kGroups * s * kStageChannelStride, from, inside);
  }
};

template <Math kMath, typename op_t>
__device__ __forceinline__ op_t to_operand(float v) {
  if constexpr (kMath == Math::kTf32) {
    return round_tf32(v);  // ties to even, as cuBLAS rounds the 1x1 convolution's operands
  } else if constexpr (kMath == Math::kTf32x3) {
    return v;  // split into TF32 hi + lo when the fragments are loaded
  } else {
    return static_cast<op_t>(v);
  }
}

// The kPerWord elements of a 32-bit word of staged input, widened to fp32 exactly.
template <typename scalar_t>
__device__ __forceinline__ void unpack_word(uint32_t word, float* out) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    out[0] = __uint_as_float(word);
  } else if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
    out[0] = __uint_as_float(word << 16);
    out[1] = __uint_as_float(word & 0xffff0000u);
  } else {
    out[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(word & 0xffffu)));
    out[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(word >> 16)));
  }
}

// One run of kRunLength depthwise outputs (channel k of the job, tile row r, columns 8 * run ...) into D, in the
// layout of mma.sync ([channel][row][column]) or of wgmma (kWgmma: K-major, [pixel][channel]). The filter is
// KH x KW with "same" padding (KW - 1) / 2 along W, so the window's position within the 16-byte vectors is a
// compile-time constant and the window is read with aligned 16-byte loads.
template <typename scalar_t, int KH, int KW, Math kMath, bool kWgmma>
__device__ __forceinline__ void depthwise_run(operand_t<scalar_t, kMath>* __restrict__ d,
                                              const scalar_t* __restrict__ staged, const float* __restrict__ dw_w,
                                              const float* __restrict__ dw_b, int chunk, int mid_channels) {
  using L = Layout<scalar_t, KH>;
  using op_t = operand_t<scalar_t, kMath>;
  constexpr int V = L::kVec, kPerWord = 4 / static_cast<int>(sizeof(scalar_t));
  constexpr int kPad = (KW - 1) / 2;
  // Staged column 0 is input column ox0 - V; output column ox0 + j reads input columns ox0 + j - kPad + kx, i.e.
  // staged columns kFirst + j + kx.
  constexpr int kFirst = V - kPad;
  constexpr int kSkip = kFirst % V;                                       // window start within its vector
  constexpr int kWindow = kRunLength + KW - 1;
  constexpr int kVectors = (kSkip + kWindow + V - 1) / V;
  const int k = threadIdx.x / 16, r = threadIdx.x / 4 % 4, run = threadIdx.x % 4;
  const int c = chunk * kChunk + k;
  float acc[kRunLength];
  if (c < mid_channels) {
    const float* w = dw_w + c * KH * KW;
    const float b = dw_b[c];
#pragma unroll
    for (int i = 0; i < kRunLength; ++i) acc[i] = b;
    const scalar_t* src =
        staged + (k * L::kStagedRows + r) * L::kStagedPitch + run * kRunLength + kFirst / V * V;
#pragma unroll 1  // one row's window live at a time (unrolled, the compiler shuffles windows: 9% more instructions)
    for (int ky = 0; ky < KH; ++ky) {
      float values[kVectors * V];
#pragma unroll
      for (int q = 0; q < kVectors; ++q) {
        const uint4 u = *reinterpret_cast<const uint4*>(src + ky * L::kStagedPitch + q * V);
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) unpack_word<scalar_t>(words[e], values + q * V + e * kPerWord);
      }
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) {
        const float wv = w[ky * KW + kx];
#pragma unroll
        for (int i = 0; i < kRunLength; ++i) acc[i] = fmaf(wv, values[kSkip + i + kx], acc[i]);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kRunLength; ++i) acc[i] = 0.0f;  // channels past the end add nothing
  }
  alignas(16) op_t out[kRunLength];
#pragma unroll
  for (int i = 0; i < kRunLength; ++i) out[i] = to_operand<kMath, op_t>(acc[i]);
  if constexpr (kWgmma) {
    // The run's 8 pixels are one core-matrix row group: 16 bytes apart, at the channel's place within the rows.
    using WL = WarpgroupLayout<op_t>;
    unsigned char* dst = reinterpret_cast<unsigned char*>(d) +
                         WL::D::at(r * kTileCols + run * kRunLength, k, static_cast<int>(sizeof(op_t)));
#pragma unroll
    for (int i = 0; i < kRunLength; ++i) *reinterpret_cast<op_t*>(dst + i * 16) = out[i];
  } else {
    // Eight consecutive operands: 32 bytes (fp32) or 16 bytes (16-bit), stored as 16-byte vectors.
    op_t* dst = d + k * L::kPitchD + r * L::kRowPitchD + run * kRunLength;
#pragma unroll
    for (int q = 0; q < kRunLength * static_cast<int>(sizeof(op_t)) / 16; ++q) {
      reinterpret_cast<uint4*>(dst)[q] = reinterpret_cast<const uint4*>(out)[q];
    }
  }
}

template <typename half_t>
__device__ __forceinline__ uint32_t pack_pair(half_t lo, half_t hi) {
  return static_cast<uint32_t>(lo.x) | (static_cast<uint32_t>(hi.x) << 16);
}

// Place of pointwise weight (cout cl, channel k) in shared memory: in the order of the MMA's A fragments, so that a
// lane loads its whole fragment (a0..a3) with one 16-byte load. Per k-step (8 TF32 or 16 half channels) and block of
// 16 couts, lane 4g + t holds (cout g, k-half 0), (g + 8, 0), (g, 1), (g + 8, 1); a k-half is channel t (+ 4) for
// TF32, channels 2t, 2t + 1 (+ 8) for 16-bit.
template <Math kMath>
__host__ __device__ __forceinline__ int weight_index(int cl, int k) {
  constexpr int kStep = kMath == Math::kHalf ? 16 : 8;  // channels a k-step
  constexpr int kPerWord = kMath == Math::kHalf ? 2 : 1;
  const int j = k % kStep, half = j / (kStep / 2), t = j % (kStep / 2) / kPerWord;
  const int g = cl % 8, e = cl % 16 / 8 + 2 * half;
  const int fragment = (k / kStep * (kCoutTile / 16) + cl / 16) * 32 + g * 4 + t;
  return (fragment * 4 + e) * kPerWord + j % kPerWord;
}

// Place of pointwise weight (cout cl, channel k) for wgmma: row cl of the K-major A operand (WarpgroupLayout).
template <typename op_t>
__device__ __forceinline__ int warpgroup_weight_index(int cl, int k) {
  return WarpgroupLayout<op_t>::W::at(cl, k, static_cast<int>(sizeof(op_t))) / static_cast<int>(sizeof(op_t));
}

// The lane's A fragment of k-step `step` and cout block (16 couts) `block`, in the order of weight_index.
template <typename op_t>
__device__ __forceinline__ uint4 a_fragment(const op_t* __restrict__ w, int step, int block, int lane) {
  constexpr int kPerWord = 4 / static_cast<int>(sizeof(op_t));
  return *reinterpret_cast<const uint4*>(w + ((step * (kCoutTile / 16) + block) * 32 + lane) * 4 * kPerWord);
}

// The job's GEMM: warp (wm, wn) owns couts [64 wm, 64 wm + 64) x pixels [32 wn, 32 wn + 32) (tile row wn), as
// 4 x 4 m16n8 tiles; chunk is the job's chunk of channels.
template <typename scalar_t, Math kMath>
__device__ __forceinline__ void mma_job(float (&acc)[4][4][4], const operand_t<scalar_t, kMath>* __restrict__ w,
                                        const operand_t<scalar_t, kMath>* __restrict__ d, int chunk, int wm, int wn,
                                        int lane, int pitch_d, int row_pitch_d) {
  const int g = lane / 4, t = lane % 4;
  if constexpr (kMath == Math::kHalf) {
    uint32_t a[4][4], b[4][2];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
      const uint4 f = a_fragment(w, chunk, wm * 4 + mt, lane);  // one k16 step a chunk
      a[mt][0] = f.x;
      a[mt][1] = f.y;
      a[mt][2] = f.z;
      a[mt][3] = f.w;
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const scalar_t* col = d + 2 * t * pitch_d + wn * row_pitch_d + nt * 8 + g;
      b[nt][0] = pack_pair(col[0], col[pitch_d]);
      b[nt][1] = pack_pair(col[8 * pitch_d], col[9 * pitch_d]);
    }
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
          mma_m16n8k16_bf16(acc[mt][nt], a[mt], b[nt]);
        } else {
          mma_m16n8k16_f16(acc[mt][nt], a[mt], b[nt]);
        }
      }
    }
  } else {
#pragma unroll 1  // one k-step's fragments live at a time (registers: the accumulators take 64)
    for (int ks = 0; ks < kChunk; ks += 8) {
      float a[4][4], b[4][2];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        const uint4 f = a_fragment(w, chunk * 2 + ks / 8, wm * 4 + mt, lane);  // two k8 steps a chunk
        a[mt][0] = __uint_as_float(f.x);
        a[mt][1] = __uint_as_float(f.y);
        a[mt][2] = __uint_as_float(f.z);
        a[mt][3] = __uint_as_float(f.w);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const float* col = d + (ks + t) * pitch_d + wn * row_pitch_d + nt * 8 + g;
        b[nt][0] = col[0];
        b[nt][1] = col[4 * pitch_d];
      }
      if constexpr (kMath == Math::kTf32) {
        // Operands were rounded to TF32 when stored; the bit patterns feed the MMA as they are.
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          const uint32_t af[4] = {__float_as_uint(a[mt][0]), __float_as_uint(a[mt][1]), __float_as_uint(a[mt][2]),
                                  __float_as_uint(a[mt][3])};
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            const uint32_t bf[2] = {__float_as_uint(b[nt][0]), __float_as_uint(b[nt][1])};
            mma_m16n8k8_tf32(acc[mt][nt], af, bf);
          }
        }
      } else {
        uint32_t b_hi[4][2], b_lo[4][2];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
          for (int i = 0; i < 2; ++i) split_tf32(b[nt][i], b_hi[nt][i], b_lo[nt][i]);
        }
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          uint32_t a_hi[4], a_lo[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) split_tf32(a[mt][i], a_hi[i], a_lo[i]);
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            // Small terms first, so they are not lost against the large one.
            mma_m16n8k8_tf32(acc[mt][nt], a_lo, b_hi[nt]);
            mma_m16n8k8_tf32(acc[mt][nt], a_hi, b_lo[nt]);
            mma_m16n8k8_tf32(acc[mt][nt], a_hi, b_hi[nt]);
          }
        }
      }
    }
  }
}

// The job's GEMM on wgmma, issued and committed but not waited for: warpgroup wg owns couts [64 wg, 64 wg + 64) x
// the tile's 128 pixels, one m64n128 instruction a k-step (two TF32 k8 steps or one 16-bit k16 step a chunk). The
// tile's first chunk starts the sums (the pointwise bias is added when they are stored).
template <typename scalar_t, Math kMath>
__device__ __forceinline__ void issue_warpgroup_mma_job(float (&acc)[64], const operand_t<scalar_t, kMath>* w,
                                                        const operand_t<scalar_t, kMath>* d, int chunk, int wg) {
  using WL = WarpgroupLayout<operand_t<scalar_t, kMath>>;
  wgmma::fence();  // orders the previous tile's stores (which read the accumulators) before the new sums
#pragma unroll
  for (int s = 0; s < WL::kStepsPerChunk; ++s) {
    const uint64_t a = WL::W::step_descriptor(w, chunk * WL::kStepsPerChunk + s, wg * 64);
    const uint64_t b = WL::D::step_descriptor(d, s, 0);
    const bool accumulate = chunk > 0 || s > 0;
    if constexpr (kMath == Math::kHalf) {
      wgmma::mma_m64n128k16<std::is_same_v<scalar_t, at::BFloat16>>(acc, a, b, accumulate);
    } else {
      wgmma::mma_m64n128k8_tf32(acc, a, b, accumulate);
    }
  }
  wgmma::commit();
}

template <typename scalar_t>
__device__ __forceinline__ void store_pair(scalar_t* dst, float v0, float v1) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    __stcs(reinterpret_cast<float2*>(dst), make_float2(v0, v1));
  } else {
    __stcs(reinterpret_cast<unsigned int*>(dst), pack_pair(static_cast<scalar_t>(v0), static_cast<scalar_t>(v1)));
  }
}

// Where a thread's accumulators lie in the tile: acc[f][nt][e] (f, nt < 4) is the output of cout
// cout[f] + lane / 4 (+ 8 for e >= 2) at tile row row[f], column nt * 8 + 2 (lane % 4) (+ 1 for odd e). Both MMAs
// give this shape: mma.sync m16n8 tiles (f: a warp's 16-cout block, one tile row a warp) and the wgmma m64n128
// fragment (f: the tile row, one 16-cout block a warp).
struct Fragments {
  int cout[4], row[4];
};

__device__ __forceinline__ Fragments sync_fragments(int wm, int wn) {
  return Fragments{{wm * 64, wm * 64 + 16, wm * 64 + 32, wm * 64 + 48}, {wn, wn, wn, wn}};
}

__device__ __forceinline__ Fragments warpgroup_fragments(int warp) {
  const int cout = warp / 4 * 64 + warp % 4 * 16;
  return Fragments{{cout, cout, cout, cout}, {0, 1, 2, 3}};
}

// The accumulators of a new tile start at the pointwise bias (pw_b: the CTA's couts), so that the epilogue only
// stores.
__device__ __forceinline__ void start_accumulators(float (&acc)[4][4][4], const float* __restrict__ pw_b,
                                                   const Fragments& f, int lane) {
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    const float b0 = pw_b[f.cout[mt] + lane / 4], b1 = pw_b[f.cout[mt] + lane / 4 + 8];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      acc[mt][nt][0] = acc[mt][nt][1] = b0;
      acc[mt][nt][2] = acc[mt][nt][3] = b1;
    }
  }
}

// The tile's outputs (the accumulators with the pointwise bias), couts co0 + ..., written as pixel pairs.
// kAddBias: the accumulators hold the products only (wgmma), so the pointwise bias (pw_b) is added here.
// (The sums go to new registers: ordinary instructions that define wgmma's accumulators make ptxas serialize it.)
template <bool kAddBias, typename scalar_t>
__device__ __forceinline__ void store_tile(const Params<scalar_t>& p, const Tile& tile, int co0,
                                           const float (&sums)[4][4][4], const float* __restrict__ pw_b,
                                           const Fragments& f, int lane) {
  const int g = lane / 4, t = lane % 4;
  float acc[4][4][4];
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    const float b[2] = {kAddBias ? pw_b[f.cout[mt] + g] : 0.0f, kAddBias ? pw_b[f.cout[mt] + g + 8] : 0.0f};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = kAddBias ? sums[mt][nt][e] + b[e / 2] : sums[mt][nt][e];
    }
  }
  const int64_t plane = int64_t{p.out_h} * p.out_w;
  // The lane's first pixel and cout within the tile; fragment mt adds (f.cout[mt] - f.cout[0]) couts and
  // (f.row[mt] - f.row[0]) rows.
  scalar_t* const first = p.output + (tile.n * p.out_channels + co0 + f.cout[0] + g) * plane +
                          (tile.oy0 + f.row[0]) * int64_t{p.out_w} + tile.ox0 + 2 * t;
  const auto fragment = [&](int mt) {
    return first + (f.cout[mt] - f.cout[0]) * plane + (f.row[mt] - f.row[0]) * int64_t{p.out_w};
  };
  int last_cout = f.cout[0], last_row = f.row[0];
#pragma unroll
  for (int mt = 1; mt < 4; ++mt) {
    last_cout = max(last_cout, f.cout[mt]);
    last_row = max(last_row, f.row[mt]);
  }
  // Nearly every tile lies wholly inside the output: then each store is at a fixed offset from the lane's first
  // pixel and needs no test. (Testing every pair took a third of the kernel's instructions under ncu.)
  if (tile.ox0 + kTileCols <= p.out_w && tile.oy0 + last_row < p.out_h && co0 + last_cout + 16 <= p.out_channels &&
      p.out_w % 2 == 0) {
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        scalar_t* row = fragment(mt) + 8 * half * plane;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) store_pair(row + nt * 8, acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
      }
    }
    return;
  }
  const bool aligned = p.out_w % 2 == 0;  // pairs start at even columns
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    if (tile.oy0 + f.row[mt] >= p.out_h) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int cl = f.cout[mt] + g + 8 * half;  // cout within the tile
      if (co0 + cl >= p.out_channels) continue;
      scalar_t* row = fragment(mt) + 8 * half * plane;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int ox = tile.ox0 + nt * 8 + 2 * t;
        if (ox >= p.out_w) continue;
        const float v0 = acc[mt][nt][2 * half], v1 = acc[mt][nt][2 * half + 1];
        if (ox + 1 < p.out_w && aligned) {
          store_pair(row + nt * 8, v0, v1);
        } else {
          row[nt * 8] = static_cast<scalar_t>(v0);
          if (ox + 1 < p.out_w) row[nt * 8 + 1] = static_cast<scalar_t>(v1);
        }
      }
    }
  }
}

// kBoxCopies: stage each job's input as one box of the bulk-copy engine (p.input_map; sm_90, multiplier 1) rather
// than by every thread's cp.async. kWarpgroupMma: run the 1x1 on wgmma where this machine code has it (sm_90a; TF32
// and 16-bit), otherwise on mma.sync; false: on mma.sync always (runs_wgmma decides).
template <typename scalar_t, int KH, int KW, Math kMath, bool kBoxCopies, bool kWarpgroupMma>
__global__ void __launch_bounds__(kThreads, 2) separable_pipelined_kernel(const __grid_constant__ Params<scalar_t> p) {
  using L = Layout<scalar_t, KH>;
  using op_t = operand_t<scalar_t, kMath>;
  constexpr bool kWgmma = kWarpgroupMma && kMath != Math::kTf32x3 && CONVOPS_HAS_WGMMA;
  extern __shared__ __align__(128) unsigned char smem_raw[];  // box copies land at 128-byte aligned stages
  const Smem<scalar_t, KH, KW, kMath> s(p.chunks);
  scalar_t* stages = reinterpret_cast<scalar_t*>(smem_raw + s.stages);
  const auto d_buffer = [&](int j) { return reinterpret_cast<op_t*>(smem_raw + s.d + j % kDBuffers * s.kDBufferBytes); };
  op_t* w = reinterpret_cast<op_t*>(smem_raw + s.w);
  float* dw_w = reinterpret_cast<float*>(smem_raw + s.dw_w);
  float* dw_b = reinterpret_cast<float*>(smem_raw + s.dw_b);
  float* pw_b = reinterpret_cast<float*>(smem_raw + s.pw_b);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem_raw + s.full);  // stage i holds its job's box (box copies)

  const int co0 = blockIdx.y * kCoutTile;
  const int64_t first_tile = blockIdx.x, tile_step = gridDim.x;
  if (first_tile >= p.tiles) return;
  const int jobs = static_cast<int>((p.tiles - first_tile + tile_step - 1) / tile_step) * p.chunks;
  const auto tile_of = [&](const JobCursor& job) { return tile_at(p, first_tile + job.tile * tile_step); };

  // Start the first jobs' copies, then load the parameters while they fly. stager follows the job being copied,
  // kStages - 1 ahead of the one being computed.
  Stager<scalar_t, KH> stager(p);
  JobCursor copying, computing;
  const auto copy_next = [&] {
    if constexpr (kBoxCopies) {
      if (threadIdx.x == 0) {
        const Tile tile = tile_of(copying);
        uint64_t* barrier = &full[copying.stage];
        bulk::arrive_expect_bytes(barrier, L::kStageElems * sizeof(scalar_t));
        bulk::copy_box_to_shared(stages + copying.stage * L::kStageElems, &p.input_map, tile.ox0 - L::kVec,
                                 tile.oy0 - p.pad_h, static_cast<int>(tile.n * p.in_channels) + copying.chunk * kChunk,
                                 barrier);
      }
    } else {
      if (copying.chunk == 0) stager.set_tile(p, tile_of(copying));
      stager.issue(stages + copying.stage * L::kStageElems, p, copying.chunk);
    }
    copying.advance(p.chunks);
  };
  if (kBoxCopies && threadIdx.x == 0) {  // the other threads first wait on them after the loop's first barrier
    for (int i = 0; i < kStages; ++i) bulk::barrier_init(&full[i], 1);
    bulk::fence_for_async_proxy();
  }
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < jobs) copy_next();
    if constexpr (!kBoxCopies) cp_async_commit();
  }
  const int k_padded = p.chunks * kChunk;
  for (int i = threadIdx.x; i < kCoutTile * k_padded; i += kThreads) {
    const int cl = i / k_padded, k = i % k_padded, co = co0 + cl;
    const float v = co < p.out_channels && k < p.mid_channels
                        ? static_cast<float>(p.pw_weight[int64_t{co} * p.mid_channels + k])
                        : 0.0f;
    w[kWgmma ? warpgroup_weight_index<op_t>(cl, k) : weight_index<kMath>(cl, k)] = to_operand<kMath, op_t>(v);
  }
  if constexpr (kWgmma) wgmma::publish_stores();  // the weights are read by wgmma
  for (int i = threadIdx.x; i < p.mid_channels * KH * KW; i += kThreads) dw_w[i] = static_cast<float>(p.dw_weight[i]);
  for (int i = threadIdx.x; i < p.mid_channels; i += kThreads) {
    dw_b[i] = p.dw_bias != nullptr ? static_cast<float>(p.dw_bias[i]) : 0.0f;
  }
  for (int i = threadIdx.x; i < kCoutTile; i += kThreads) {
    pw_b[i] = p.pw_bias != nullptr && co0 + i < p.out_channels ? static_cast<float>(p.pw_bias[co0 + i]) : 0.0f;
  }

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // mma.sync: warp (wm, wn) owns 64 couts x tile row wn; wgmma: warpgroup wm owns 64 couts x the whole tile.
  const int wm = kWgmma ? warp / 4 : warp % 2, wn = warp / 2;
  const Fragments fragments = kWgmma ? warpgroup_fragments(warp) : sync_fragments(wm, wn);
  // (wgmma: a warpgroup past the last cout multiplies zero weights rather than branch around its wgmma, which ptxas
  // would then serialize; it stores nothing.)
  const bool warp_has_couts = co0 + wm * 64 < p.out_channels;
  // Iteration j computes job j's depthwise outputs into one D buffer while the MMA consumes job j - 1's from the
  // other, so the CUDA cores and the tensor cores have work in the same phase and one barrier a job suffices. With
  // wgmma the MMA is issued first and runs asynchronously beside the depthwise stage; it is waited for before the
  // next barrier, after which its D buffer is written again.
  float acc[4][4][4];
  float(&acc_flat)[64] = reinterpret_cast<float(&)[64]>(acc);  // the wgmma fragment: acc[row][nt][e]
  JobCursor multiplying;  // the job whose MMA runs: one behind computing
  for (int j = 0; j <= jobs; ++j) {
    // Job j's copies are complete (cp.async: at most kStages - 2 younger groups pending; box copies: below); every
    // thread is done with the stage the next copy overwrites (job j - 1's), has written D for job j - 1, and is
    // done reading job j - 2's (and its MMA has completed).
    if constexpr (!kBoxCopies) cp_async_wait<kStages - 2>();
    __syncthreads();
    if (j + kStages - 1 < jobs) copy_next();
    if constexpr (!kBoxCopies) cp_async_commit();  // possibly empty, so that the group count stays uniform
    // wgmma is issued and waited for on every iteration, the first too (on a D buffer not written yet, whose result
    // is dropped: job 0's chunk starts its sums anew): ptxas serializes wgmma whose issue or wait lies on a
    // conditional path.
    if constexpr (kWgmma) {
      static_assert(kDBuffers == 2, "d_buffer(j + 1) is job j - 1's buffer (without a negative j - 1 at j = 0)");
      issue_warpgroup_mma_job<scalar_t, kMath>(acc_flat, w, d_buffer(j + 1), multiplying.chunk, wm);  // job j - 1's
      wgmma::pin(acc_flat);
    }
    if (j < jobs) {
      // Job j's box is fill j / kStages of its stage.
      if constexpr (kBoxCopies) bulk::wait(&full[computing.stage], (j / kStages) & 1);
      depthwise_run<scalar_t, KH, KW, kMath, kWgmma>(d_buffer(j), stages + computing.stage * L::kStageElems, dw_w,
                                                     dw_b, computing.chunk, p.mid_channels);
      if constexpr (kWgmma) wgmma::publish_stores();  // job j's D is read by wgmma after the next barrier
      // This thread's reads of the stage, before the box copy that refills it after the next barrier (with wgmma the
      // fence above covers them).
      if constexpr (kBoxCopies && !kWgmma) bulk::fence_reads_before_async_writes();
      computing.advance(p.chunks);
    }
    if constexpr (kWgmma) {
      wgmma::wait<0>();
      wgmma::pin(acc_flat);
    }
    if (j == 0) continue;
    if (warp_has_couts) {
      if constexpr (!kWgmma) {
        if (multiplying.chunk == 0) start_accumulators(acc, pw_b, fragments, lane);
        mma_job<scalar_t, kMath>(acc, w, d_buffer(j - 1), multiplying.chunk, wm, wn, lane, L::kPitchD,
                                 L::kRowPitchD);
      }
      if (multiplying.chunk == p.chunks - 1) {
        store_tile<kWgmma>(p, tile_of(multiplying), co0, acc, pw_b, fragments, lane);
      }
    }
    multiplying.advance(p.chunks);
  }
  if constexpr (!kBoxCopies) cp_async_wait<0>();  // (every box was waited for)
}

// The input as a tensor map of boxes of one stage (kStagedPitch x kStagedRows x kChunk, at (ox0 - kVec, oy0 - pad_h,
// n * C_in + first channel)), for the box copies.
template <typename scalar_t, int KH>
bool encode_input_map(Params<scalar_t>& p) {
  using L = Layout<scalar_t, KH>;
  const uint64_t w = p.in_w, h = p.in_h, planes = static_cast<uint64_t>(p.tiles / (int64_t{p.tiles_x} * p.tiles_y)) *
                                                 static_cast<uint64_t>(p.in_channels);
  const uint64_t row = w * sizeof(scalar_t);
  if (planes + kChunk >= static_cast<uint64_t>(std::numeric_limits<int>::max())) return false;  // int box coordinates
  return bulk::encode_tensor_map_3d(&p.input_map, bulk::tensor_map_type<scalar_t>(), p.input, {w, h, planes},
                                    {row, row * h},
                                    {static_cast<uint32_t>(L::kStagedPitch), static_cast<uint32_t>(L::kStagedRows),
                                     static_cast<uint32_t>(kChunk)});
}

// Whether the 1x1 may run on wgmma (where the machine code has it). By default 16-bit does and TF32 does not: on
// the H200 the seed took 1.011-1.017 ms in bf16 on wgmma against 1.140-1.142 on mma.sync, but 1.276-1.283 in TF32
// against 1.243-1.247 (tools/dev_separable.py, 2026-11-26; on an H100 TF32 timed the same either way).
// CONVOPS_SEPARABLE_MMA=wgmma or =sync picks one for every mode, for comparisons. (3xTF32 runs on mma.sync only.)
template <Math kMath>
bool runs_wgmma() {
  static const int forced = [] {  // 1: wgmma, 0: mma.sync, -1: the default
    const char* env = std::getenv("CONVOPS_SEPARABLE_MMA");
    if (env == nullptr) return -1;
    return std::string(env) == "wgmma" ? 1 : std::string(env) == "sync" ? 0 : -1;
  }();
  if (kMath == Math::kTf32x3) return false;
  return forced >= 0 ? forced == 1 : kMath == Math::kHalf;
}

template <typename scalar_t, int KH, int KW, Math kMath>
bool launch(Params<scalar_t>& p, cudaStream_t stream, bool dry_run) {
  const Smem<scalar_t, KH, KW, kMath> s(p.chunks);
  // Two CTAs an SM on Hopper; on GPUs with less shared memory a block, whatever the device allows.
  const size_t max_smem = std::min<size_t>(110 * 1024, max_shared_memory_per_block());
  const int cout_tiles = (p.out_channels + kCoutTile - 1) / kCoutTile;
  if (s.total > max_smem || cout_tiles > 65535) return false;  // 65535: the grid's y limit
  if (dry_run) return true;
  constexpr bool kWg = kMath != Math::kTf32x3;  // (3xTF32 has one MMA: do not instantiate it twice)
  // Box copies where the bulk-copy engine runs and a box is a run of input channels (multiplier 1).
  const bool boxes = p.multiplier == 1 &&
                     bulk::runs_bulk_copies(separable_pipelined_kernel<scalar_t, KH, KW, kMath, true, kWg>) &&
                     encode_input_map<scalar_t, KH>(p);
  const bool warpgroup = runs_wgmma<kMath>();
  using Kernel = void (*)(const Params<scalar_t>);
  const Kernel kernels[2][2] = {
      {separable_pipelined_kernel<scalar_t, KH, KW, kMath, false, false>,
       separable_pipelined_kernel<scalar_t, KH, KW, kMath, false, kWg>},
      {separable_pipelined_kernel<scalar_t, KH, KW, kMath, true, false>,
       separable_pipelined_kernel<scalar_t, KH, KW, kMath, true, kWg>}};
  const Kernel kernel = kernels[boxes][warpgroup];
  allow_dynamic_shared_memory(kernel, static_cast<int>(max_smem));
  const int64_t ctas = std::max<int64_t>(1, 2 * int64_t{multiprocessor_count()} / cout_tiles);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.tiles, ctas)), static_cast<unsigned>(cout_tiles));
  kernel<<<grid, kThreads, s.total, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

template <typename scalar_t, Math kMath>
bool launch_for_filter(Params<scalar_t>& p, const DepthwiseGeometry& d, cudaStream_t stream, bool dry_run) {
  if (d.kernel_h == 3 && d.kernel_w == 3) return launch<scalar_t, 3, 3, kMath>(p, stream, dry_run);
  if (d.kernel_h == 5 && d.kernel_w == 5) return launch<scalar_t, 5, 5, kMath>(p, stream, dry_run);
  if (d.kernel_h == 7 && d.kernel_w == 7) return launch<scalar_t, 7, 7, kMath>(p, stream, dry_run);
  return false;
}

}  // namespace pipelined

// The conditions both fused kernels (this one and depthwise_separable_conv2d_streaming.cuh) share: stride 1,
// dilation 1, a square 3x3, 5x5 or 7x7 filter with "same" padding along W (the window's place in the staged vectors
// is then fixed; any padding along H), a contiguous input whose rows are whole 16-byte vectors (box copies), a
// contiguous output aligned for pixel pairs (the tile kernel's epilogue stores pairs; the streaming kernel checks
// the 16-byte alignment of its vector stores itself), and extents that fit an int.
template <typename scalar_t>
bool fused_kernel_applies(const at::Tensor& input, const at::Tensor& output, const DepthwiseGeometry& d,
                          int64_t out_channels, bool dry_run) {
  constexpr int kVec = 16 / sizeof(scalar_t);
  if (d.stride_h != 1 || d.stride_w != 1 || d.dilation_h != 1 || d.dilation_w != 1) return false;
  if (d.kernel_h != d.kernel_w || (d.kernel_h != 3 && d.kernel_h != 5 && d.kernel_h != 7)) return false;
  if (d.pad_w != (d.kernel_w - 1) / 2) return false;
  if (d.in_w % kVec != 0 || reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 16 != 0) return false;
  if (!input.is_contiguous() || d.batch == 0) return false;
  if (!dry_run && (!output.is_contiguous() ||
                   reinterpret_cast<uintptr_t>(output.const_data_ptr()) % (2 * sizeof(scalar_t)) != 0)) {
    return false;
  }
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  for (const int64_t v : {d.in_h, d.in_w, d.out_h, d.out_w, d.out_channels, out_channels}) {
    if (v >= kIntMax / 8) return false;
  }
  return true;
}

// Runs the pipelined fused kernel and returns true, or returns false without doing anything when the problem is
// outside its scope (see the top of this file). Tensors: input and output contiguous NCHW, weights and biases
// contiguous. tf32: whether fp32 may use TF32 (conv_allows_tf32). dry_run: only say whether it would run (the
// tensors' data is not touched; output may be undefined).
template <typename scalar_t>
bool launch_separable_pipelined(const at::Tensor& input, const at::Tensor& dw_weight,
                                const std::optional<at::Tensor>& dw_bias, const at::Tensor& pw_weight,
                                const std::optional<at::Tensor>& pw_bias, const at::Tensor& output,
                                const DepthwiseGeometry& d, bool tf32, cudaStream_t stream, bool dry_run = false) {
  using namespace pipelined;
  if constexpr (std::is_same_v<scalar_t, double>) {
    return false;
  } else {
    constexpr int kVec = 16 / sizeof(scalar_t);
    if (!fused_kernel_applies<scalar_t>(input, output, d, pw_weight.size(0), dry_run)) return false;
    // The stager's offsets (channel * H * W + row * W + column within a job's rectangle) are ints.
    constexpr int64_t kIntMax = std::numeric_limits<int>::max();
    if ((kChunk + 1) * d.in_h * d.in_w + 2 * kVec >= kIntMax) return false;
    Params<scalar_t> p{};
    p.input = input.const_data_ptr<scalar_t>();
    p.dw_weight = dw_weight.const_data_ptr<scalar_t>();
    p.dw_bias = optional_data<scalar_t>(dw_bias);
    p.pw_weight = pw_weight.const_data_ptr<scalar_t>();
    p.pw_bias = optional_data<scalar_t>(pw_bias);
    p.output = dry_run ? nullptr : output.mutable_data_ptr<scalar_t>();
    p.in_channels = static_cast<int>(d.in_channels);
    p.multiplier = static_cast<int>(d.multiplier);
    p.mid_channels = static_cast<int>(d.out_channels);
    p.out_channels = static_cast<int>(pw_weight.size(0));
    p.in_h = static_cast<int>(d.in_h);
    p.in_w = static_cast<int>(d.in_w);
    p.out_h = static_cast<int>(d.out_h);
    p.out_w = static_cast<int>(d.out_w);
    p.pad_h = static_cast<int>(d.pad_h);
    p.tiles_x = static_cast<int>((d.out_w + kTileCols - 1) / kTileCols);
    p.tiles_y = static_cast<int>((d.out_h + kTileRows - 1) / kTileRows);
    p.tiles = d.batch * p.tiles_x * p.tiles_y;
    p.chunks = static_cast<int>((d.out_channels + kChunk - 1) / kChunk);
    if (p.tiles * p.chunks >= kIntMax) return false;  // a CTA's job counter is an int
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (tf32) {
        return launch_for_filter<scalar_t, Math::kTf32>(p, d, stream, dry_run);
      }
      return launch_for_filter<scalar_t, Math::kTf32x3>(p, d, stream, dry_run);
    } else {
      return launch_for_filter<scalar_t, Math::kHalf>(p, d, stream, dry_run);
    }
  }
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
