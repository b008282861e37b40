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
//     (halo rows, and 16-byte aligned column vectors around the tile) is copied by 16-byte cp.async, zero-filled
//     outside the image, kStages - 1 jobs ahead of its use, so the copies of the next jobs are in flight while this
//     one computes.
//   - Per job, each thread computes a run of 8 depthwise outputs of one channel from shared memory (fp32, bias then
//     taps in (ky, kx) order as ATen does, so fp32 results are bitwise eager's) and stores them as the MMA's B
//     operand [channel][pixel], rounded as the unfused ATen pair would see them (TF32 ties-to-even, or the input
//     dtype).
//   - The pointwise GEMM C[cout][pixel] += W[cout][channel] * D[channel][pixel] accumulates in registers over the
//     chunks: mma.sync m16n8k8 TF32 (TF32 allowed), three TF32 products per term (strict fp32: hi*hi + hi*lo +
//     lo*hi keeps fp32 accuracy on tensor cores), or m16n8k16 fp16/bf16.
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
#include <limits>
#include <optional>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"
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
  int pitch_w;     // row pitch of the pointwise weights in shared memory (elements)
};

// Shared-memory carve-up, identical on host (launch size) and device.
template <typename scalar_t, int KH, int KW, Math kMath>
struct Smem {
  using L = Layout<scalar_t, KH>;
  using op_t = operand_t<scalar_t, kMath>;
  size_t stages, d, w, dw_w, dw_b, pw_b, total;
  __host__ __device__ Smem(int chunks, int pitch_w) {
    const size_t k_padded = size_t(chunks) * kChunk;
    stages = 0;
    d = stages + align(size_t(kStages) * L::kStageElems * sizeof(scalar_t));
    w = d + align(size_t(kChunk) * L::kPitchD * sizeof(op_t));
    dw_w = w + align(size_t(kCoutTile) * pitch_w * sizeof(op_t));
    dw_b = dw_w + align(k_padded * KH * KW * sizeof(float));
    pw_b = dw_b + align(k_padded * sizeof(float));
    total = pw_b + align(kCoutTile * sizeof(float));
  }
  __host__ __device__ static size_t align(size_t bytes) { return (bytes + 15) / 16 * 16; }
};

// A pixel tile: image n, output rows [oy0, oy0 + kTileRows), columns [ox0, ox0 + kTileCols).
struct Tile {
  int64_t n;
  int oy0, ox0;
};

template <typename scalar_t>
__device__ __forceinline__ Tile tile_at(const Params<scalar_t>& p, int64_t t) {
  const int64_t per_image = int64_t{p.tiles_x} * p.tiles_y;
  const int64_t n = t / per_image;
  const int r = static_cast<int>(t - n * per_image);
  return Tile{n, (r / p.tiles_x) * kTileRows, (r % p.tiles_x) * kTileCols};
}

// The copies of a job's input rectangle: kChunk channels x kStagedRows rows x kStagedCols columns starting at
// (oy0 - pad_h, ox0 - kVec) of the tile. Vector v of the rectangle is copied by thread v % kThreads (its slot
// v / kThreads), so a thread's slots sit at the same place of every job's rectangle: their offsets from the
// rectangle's corner are computed once, which rows and columns lie inside the image once per tile, and a job adds
// only its channels. A vector lies wholly inside or outside the image (W is a multiple of kVec and so is ox0);
// outside it is zero-filled, which is the convolution's padding.
template <typename scalar_t, int KH>
struct Stager {
  using L = Layout<scalar_t, KH>;
  static constexpr int kPerChannel = L::kStagedRows * L::kVectorsPerRow;
  static constexpr int kVectors = kChunk * kPerChannel;
  static constexpr int kSlots = (kVectors + kThreads - 1) / kThreads;

  int offset[kSlots];  // element offset of the slot's vector within a channel plane, from the corner
  int64_t corner;      // element offset of (n, channel 0, oy0 - pad_h, ox0 - kVec)
  uint32_t inside;     // bit s: slot s's row and column lie inside the image

  __device__ __forceinline__ static int vector_of(int slot) { return threadIdx.x + slot * kThreads; }
  __device__ __forceinline__ static int row_of(int v) { return v % kPerChannel / L::kVectorsPerRow; }
  __device__ __forceinline__ static int col_of(int v) { return v % kPerChannel % L::kVectorsPerRow * L::kVec; }

  __device__ __forceinline__ explicit Stager(const Params<scalar_t>& p) : corner(0), inside(0) {
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int v = vector_of(s);
      offset[s] = row_of(v) * p.in_w + col_of(v);
    }
  }

  __device__ __forceinline__ void set_tile(const Params<scalar_t>& p, const Tile& tile) {
    const int iy0 = tile.oy0 - p.pad_h, ix0 = tile.ox0 - L::kVec;
    corner = (tile.n * p.in_channels * p.in_h + iy0) * int64_t{p.in_w} + ix0;
    inside = 0;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int v = vector_of(s);
      const bool ok = static_cast<unsigned>(iy0 + row_of(v)) < static_cast<unsigned>(p.in_h) &&
                      static_cast<unsigned>(ix0 + col_of(v)) < static_cast<unsigned>(p.in_w);
      inside |= static_cast<uint32_t>(ok) << s;
    }
  }

  __device__ __forceinline__ void issue(scalar_t* __restrict__ dst, const Params<scalar_t>& p, int chunk) const {
    const int64_t plane = int64_t{p.in_h} * p.in_w;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int v = vector_of(s);
      if (kVectors % kThreads != 0 && v >= kVectors) break;
      const int k = v / kPerChannel, c = chunk * kChunk + k;
      const bool valid = ((inside >> s) & 1u) != 0 && c < p.mid_channels;
      const int ci = p.multiplier == 1 ? c : c / p.multiplier;
      const scalar_t* src = valid ? p.input + corner + ci * plane + offset[s] : p.input;
      cp_async_zfill<16>(dst + (k * L::kStagedRows + row_of(v)) * L::kStagedPitch + col_of(v), src, valid);
    }
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

// One run of kRunLength depthwise outputs (channel k of the job, tile row r, columns 8 * run ...) into D. The filter
// is KH x KW with "same" padding (KW - 1) / 2 along W, so the window's position within the 16-byte vectors is a
// compile-time constant and the window is read with aligned 16-byte loads.
template <typename scalar_t, int KH, int KW, Math kMath>
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
#pragma unroll 1  // one row's window live at a time (registers: the MMA accumulators take 64)
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
  // Eight consecutive operands: 32 bytes (fp32) or 16 bytes (16-bit), stored as 16-byte vectors.
  op_t* dst = d + k * L::kPitchD + r * L::kRowPitchD + run * kRunLength;
  alignas(16) op_t out[kRunLength];
#pragma unroll
  for (int i = 0; i < kRunLength; ++i) out[i] = to_operand<kMath, op_t>(acc[i]);
#pragma unroll
  for (int q = 0; q < kRunLength * static_cast<int>(sizeof(op_t)) / 16; ++q) {
    reinterpret_cast<uint4*>(dst)[q] = reinterpret_cast<const uint4*>(out)[q];
  }
}

template <typename half_t>
__device__ __forceinline__ uint32_t pack_pair(half_t lo, half_t hi) {
  return static_cast<uint32_t>(lo.x) | (static_cast<uint32_t>(hi.x) << 16);
}

// The job's GEMM: warp (wm, wn) owns couts [64 wm, 64 wm + 64) x pixels [32 wn, 32 wn + 32) (tile row wn), as
// 4 x 4 m16n8 tiles; k0 is the job's first channel within the weight rows.
template <typename scalar_t, Math kMath>
__device__ __forceinline__ void mma_job(float (&acc)[4][4][4], const operand_t<scalar_t, kMath>* __restrict__ w,
                                        const operand_t<scalar_t, kMath>* __restrict__ d, int pitch_w, int k0,
                                        int wm, int wn, int lane, int pitch_d, int row_pitch_d) {
  const int g = lane / 4, t = lane % 4;
  if constexpr (kMath == Math::kHalf) {
    uint32_t a[4][4], b[4][2];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
      const scalar_t* row = w + (wm * 64 + mt * 16 + g) * pitch_w + k0 + 2 * t;
      a[mt][0] = *reinterpret_cast<const uint32_t*>(row);
      a[mt][1] = *reinterpret_cast<const uint32_t*>(row + 8 * pitch_w);
      a[mt][2] = *reinterpret_cast<const uint32_t*>(row + 8);
      a[mt][3] = *reinterpret_cast<const uint32_t*>(row + 8 * pitch_w + 8);
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
        const float* row = w + (wm * 64 + mt * 16 + g) * pitch_w + k0 + ks + t;
        a[mt][0] = row[0];
        a[mt][1] = row[8 * pitch_w];
        a[mt][2] = row[4];
        a[mt][3] = row[8 * pitch_w + 4];
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

template <typename scalar_t>
__device__ __forceinline__ void store_pair(scalar_t* dst, float v0, float v1, bool both, bool aligned) {
  if (both && aligned) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      __stcs(reinterpret_cast<float2*>(dst), make_float2(v0, v1));
    } else {
      const scalar_t h0 = static_cast<scalar_t>(v0), h1 = static_cast<scalar_t>(v1);
      __stcs(reinterpret_cast<unsigned int*>(dst), pack_pair(h0, h1));
    }
    return;
  }
  dst[0] = static_cast<scalar_t>(v0);
  if (both) dst[1] = static_cast<scalar_t>(v1);
}

// The tile's outputs: acc + pointwise bias, couts co0 + ..., written as pixel pairs.
template <typename scalar_t>
__device__ __forceinline__ void store_tile(const Params<scalar_t>& p, const Tile& tile, int co0,
                                           const float (&acc)[4][4][4], const float* __restrict__ pw_b, int wm,
                                           int wn, int lane) {
  const int g = lane / 4, t = lane % 4;
  const int oy = tile.oy0 + wn;
  if (oy >= p.out_h) return;
  const bool aligned = p.out_w % 2 == 0;  // pairs start at even columns
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int cl = wm * 64 + mt * 16 + g + 8 * half;  // cout within the tile
      const int co = co0 + cl;
      if (co >= p.out_channels) continue;
      const float b = pw_b[cl];
      scalar_t* row = p.output + ((tile.n * p.out_channels + co) * p.out_h + oy) * int64_t{p.out_w};
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int ox = tile.ox0 + nt * 8 + 2 * t;
        if (ox >= p.out_w) continue;
        store_pair(row + ox, acc[mt][nt][2 * half] + b, acc[mt][nt][2 * half + 1] + b, ox + 1 < p.out_w, aligned);
      }
    }
  }
}

template <typename scalar_t, int KH, int KW, Math kMath>
__global__ void __launch_bounds__(kThreads, 2) separable_pipelined_kernel(const Params<scalar_t> p) {
  using L = Layout<scalar_t, KH>;
  using op_t = operand_t<scalar_t, kMath>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const Smem<scalar_t, KH, KW, kMath> s(p.chunks, p.pitch_w);
  scalar_t* stages = reinterpret_cast<scalar_t*>(smem_raw + s.stages);
  op_t* d = reinterpret_cast<op_t*>(smem_raw + s.d);
  op_t* w = reinterpret_cast<op_t*>(smem_raw + s.w);
  float* dw_w = reinterpret_cast<float*>(smem_raw + s.dw_w);
  float* dw_b = reinterpret_cast<float*>(smem_raw + s.dw_b);
  float* pw_b = reinterpret_cast<float*>(smem_raw + s.pw_b);

  const int co0 = blockIdx.y * kCoutTile;
  const int64_t first_tile = blockIdx.x, tile_step = gridDim.x;
  if (first_tile >= p.tiles) return;
  const int jobs = static_cast<int>((p.tiles - first_tile + tile_step - 1) / tile_step) * p.chunks;
  const auto tile_of_job = [&](int j) { return tile_at(p, first_tile + (j / p.chunks) * tile_step); };

  // Start the first jobs' copies, then load the parameters while they fly. stager follows the job being copied,
  // kStages - 1 ahead of the one being computed.
  Stager<scalar_t, KH> stager(p);
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < jobs) {
      if (j % p.chunks == 0) stager.set_tile(p, tile_of_job(j));
      stager.issue(stages + j * L::kStageElems, p, j % p.chunks);
    }
    cp_async_commit();
  }
  const int k_padded = p.chunks * kChunk;
  for (int i = threadIdx.x; i < kCoutTile * k_padded; i += kThreads) {
    const int cl = i / k_padded, k = i % k_padded, co = co0 + cl;
    const float v = co < p.out_channels && k < p.mid_channels
                        ? static_cast<float>(p.pw_weight[int64_t{co} * p.mid_channels + k])
                        : 0.0f;
    w[cl * p.pitch_w + k] = to_operand<kMath, op_t>(v);
  }
  for (int i = threadIdx.x; i < p.mid_channels * KH * KW; i += kThreads) dw_w[i] = static_cast<float>(p.dw_weight[i]);
  for (int i = threadIdx.x; i < p.mid_channels; i += kThreads) {
    dw_b[i] = p.dw_bias != nullptr ? static_cast<float>(p.dw_bias[i]) : 0.0f;
  }
  for (int i = threadIdx.x; i < kCoutTile; i += kThreads) {
    pw_b[i] = p.pw_bias != nullptr && co0 + i < p.out_channels ? static_cast<float>(p.pw_bias[co0 + i]) : 0.0f;
  }

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp % 2, wn = warp / 2;
  const bool warp_has_couts = co0 + wm * 64 < p.out_channels;
  float acc[4][4][4] = {};
  for (int j = 0; j < jobs; ++j) {
    // Job j's copies are complete (at most kStages - 2 younger groups pending), and every thread is done with the
    // buffer the next copy overwrites (job j - 1's) and with D (job j - 1's MMA).
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int ahead = j + kStages - 1;
    if (ahead < jobs) {
      const int ahead_chunk = ahead % p.chunks;
      if (ahead_chunk == 0) stager.set_tile(p, tile_of_job(ahead));
      stager.issue(stages + ahead % kStages * L::kStageElems, p, ahead_chunk);
    }
    cp_async_commit();  // possibly empty, so that the group count stays uniform
    const int chunk = j % p.chunks;
    depthwise_run<scalar_t, KH, KW, kMath>(d, stages + j % kStages * L::kStageElems, dw_w, dw_b, chunk,
                                           p.mid_channels);
    __syncthreads();
    if (warp_has_couts) {
      mma_job<scalar_t, kMath>(acc, w, d, p.pitch_w, chunk * kChunk, wm, wn, lane, L::kPitchD, L::kRowPitchD);
    }
    if (chunk == p.chunks - 1) {
      if (warp_has_couts) store_tile(p, tile_of_job(j), co0, acc, pw_b, wm, wn, lane);
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
        }
      }
    }
  }
  cp_async_wait<0>();
}

// Row pitch of the pointwise weights in shared memory: the MMA's A-fragment reads then hit distinct banks.
template <Math kMath>
int weight_pitch(int chunks) {
  return chunks * kChunk + (kMath == Math::kHalf ? 8 : 4);
}

template <typename scalar_t, int KH, int KW, Math kMath>
bool launch(const Params<scalar_t>& p, cudaStream_t stream, bool dry_run) {
  const Smem<scalar_t, KH, KW, kMath> s(p.chunks, p.pitch_w);
  // Two CTAs an SM on Hopper; on GPUs with less shared memory a block, whatever the device allows.
  const size_t max_smem = std::min<size_t>(110 * 1024, max_shared_memory_per_block());
  const int cout_tiles = (p.out_channels + kCoutTile - 1) / kCoutTile;
  if (s.total > max_smem || cout_tiles > 65535) return false;  // 65535: the grid's y limit
  if (dry_run) return true;
  auto kernel = separable_pipelined_kernel<scalar_t, KH, KW, kMath>;
  // The attribute is per device and holds for the process: set it once per device and instantiation (a driver
  // call on every launch costs microseconds on launch-bound layers).
  static std::atomic<uint64_t> configured{0};
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if ((configured.load(std::memory_order_relaxed) & bit) == 0 || bit == 0) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(max_smem)));
    configured.fetch_or(bit, std::memory_order_relaxed);
  }
  const int64_t ctas = std::max<int64_t>(1, 2 * int64_t{multiprocessor_count()} / cout_tiles);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.tiles, ctas)), static_cast<unsigned>(cout_tiles));
  kernel<<<grid, kThreads, s.total, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

template <typename scalar_t, Math kMath>
bool launch_for_filter(const Params<scalar_t>& p, const DepthwiseGeometry& d, cudaStream_t stream, bool dry_run) {
  if (d.kernel_h == 3 && d.kernel_w == 3) return launch<scalar_t, 3, 3, kMath>(p, stream, dry_run);
  if (d.kernel_h == 5 && d.kernel_w == 5) return launch<scalar_t, 5, 5, kMath>(p, stream, dry_run);
  if (d.kernel_h == 7 && d.kernel_w == 7) return launch<scalar_t, 7, 7, kMath>(p, stream, dry_run);
  return false;
}

}  // namespace pipelined

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
    if (d.stride_h != 1 || d.stride_w != 1 || d.dilation_h != 1 || d.dilation_w != 1) return false;
    if (d.kernel_h != d.kernel_w || (d.kernel_h != 3 && d.kernel_h != 5 && d.kernel_h != 7)) return false;
    // "Same" padding along W (the window's place in the staged vectors is then fixed); any padding along H.
    if (d.pad_w != (d.kernel_w - 1) / 2) return false;
    if (d.in_w % kVec != 0 || reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 16 != 0) return false;
    if (!input.is_contiguous() || d.batch == 0) return false;
    // The epilogue stores pixel pairs: the output must be contiguous and pair-aligned.
    if (!dry_run && (!output.is_contiguous() ||
                     reinterpret_cast<uintptr_t>(output.const_data_ptr()) % (2 * sizeof(scalar_t)) != 0)) {
      return false;
    }
    constexpr int64_t kIntMax = std::numeric_limits<int>::max();
    for (const int64_t v : {d.in_h, d.in_w, d.out_h, d.out_w, d.out_channels, pw_weight.size(0)}) {
      if (v >= kIntMax / 8) return false;
    }
    // The stager's per-slot offsets (row * W + column within a staged rectangle) are ints.
    if ((d.kernel_h + kTileRows) * d.in_w + kTileCols + 2 * kVec >= kIntMax) return false;
    Params<scalar_t> p{};
    p.input = input.const_data_ptr<scalar_t>();
    p.dw_weight = dw_weight.const_data_ptr<scalar_t>();
    p.dw_bias = dw_bias.has_value() && dw_bias->defined() ? dw_bias->const_data_ptr<scalar_t>() : nullptr;
    p.pw_weight = pw_weight.const_data_ptr<scalar_t>();
    p.pw_bias = pw_bias.has_value() && pw_bias->defined() ? pw_bias->const_data_ptr<scalar_t>() : nullptr;
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
        p.pitch_w = weight_pitch<Math::kTf32>(p.chunks);
        return launch_for_filter<scalar_t, Math::kTf32>(p, d, stream, dry_run);
      }
      p.pitch_w = weight_pitch<Math::kTf32x3>(p.chunks);
      return launch_for_filter<scalar_t, Math::kTf32x3>(p, d, stream, dry_run);
    } else {
      p.pitch_w = weight_pitch<Math::kHalf>(p.chunks);
      return launch_for_filter<scalar_t, Math::kHalf>(p, d, stream, dry_run);
    }
  }
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
