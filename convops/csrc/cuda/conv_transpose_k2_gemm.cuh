// convops::conv_transpose2d with a k_h x 2 kernel equal to its stride (UNet's 2x2 stride-2 upsampling), fp32 under
// TF32, as one kernel: a tensor-core GEMM (mma.sync m16n8k8, TF32 operands rounded to nearest as cuDNN rounds them)
// whose epilogue writes each product to its output pixel with the bias added. The path of conv_transpose_gemm.cuh
// (a cuBLAS GEMM into a products buffer, then a tap shuffle) moves the products through memory twice and rounds the
// input in a pass of its own: on UNet c128 -> 64 at 128x128 that is 134 MB written and read again plus 67 MB read
// and written, where the output itself is 134 MB (H200, 2026-11-27: 0.178 ms against a 0.048 ms memory floor).
//
// The GEMM: C (M' x P) = W' (M' x K) X_n (K x P) per image n, K = C_in, P = H W. W' holds the weight's rows
// reordered so that a thread's accumulators land on adjacent outputs: in each group of 16 rows, row r is the output
// row family q = 8 * group + r % 8 (q = c_out k_h + a, the output row h k_h + a of channel c_out) with the tap b = r / 8
// along w. An m16n8 accumulator fragment gives lane (g, t) rows g and g + 8 (b = 0 and 1 of one q) at columns
// 2t and 2t + 1 (pixels w and w + 1 of one input row, W even): outputs 2w .. 2w + 3 of one output row, one 16-byte
// store. W' is prepared per call (rounded, reordered, zero rows up to a whole tile: C_in x M' words; at most 256
// x 512 words = 0.5 MB on the UNet layers this kernel takes, 1.7-2.2 us of the profile. To try if it matters: the
// block's W' tile is the contiguous slice of the weight's row of its 64 families, which the kernel could copy and
// round as it does the input, with a 64-bit load for a lane's two taps).
//
// Tiles: 128 rows of W' x 128 pixels x 32 of K a stage, a ring of stages filled by cp.async; 8 warps of 64 x 32
// (4 x 4 m16n8 tiles). Both shared tiles are [k][row or pixel] with a pitch of 136 words (8 mod 32), so the
// fragment loads (lanes t along k, g along rows) fall on 32 distinct banks. The input fragments are rounded to TF32
// in registers as they are loaded: shared memory bandwidth is what bounds this loop (a k8 step of a warp loads 24
// wavefronts for 16 mma), and rounding the stage in place in shared memory had added a read and a write of it.
//
// Where it pays: the kernel's mma.sync GEMM runs at about a third of cuBLAS's TF32 rate, and what it saves is the
// products' round trip, which grows with the output and not with C_in. On UNet's k2 s2 layers at batch 8 (H200,
// 2026-11-27 14:48 UTC, the profiler's sums: this kernel and the weight's preparation against cuBLAS's GEMM, the
// roundings and the tap shuffle): C_in 1024 79 against 61 us, 512 77 against 65; at 14:40, op times, 256 89 against
// 106 and 128 109 against 177. So it takes C_in up to kMaxInChannels.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "conv_transpose.h"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace k2_gemm {

constexpr int kRows = 128;    // rows of W' a block
constexpr int kPixels = 128;  // pixels a block
constexpr int kDepth = 32;    // K a stage
constexpr int kThreads = 256;
constexpr int kPitch = 136;  // words a shared tile row (both tiles): 8 mod 32
constexpr int kTileWords = kDepth * kPitch;
// Three stages measured as fast as two (H200, 2026-11-27 14:48 UTC: 69.5 against 69.0 us on UNet c1024, 102.3
// against 101.9 on c128): the loop is not waiting on its copies. Two spilled 8 bytes at the 128-register bound.
constexpr int kStages = 3;
constexpr int kSharedBytes = kStages * 2 * kTileWords * 4;  // 104 KB: two blocks an SM
constexpr int kMaxInChannels = 256;  // see "Where it pays" above
constexpr int kChunksPerRow = kRows / 4;                        // 16-byte copies a tile row (kRows == kPixels)
constexpr int kChunksPerThread = kDepth * kChunksPerRow / kThreads;  // of each tile, a stage
static_assert(kRows == kPixels && kDepth * kChunksPerRow % kThreads == 0, "one copy plan serves both tiles");

// W's rows: 16 a group of 8 families (the two taps of each), whole 128-row tiles (no row bounds in the kernel).
inline int64_t weight_rows(int64_t families) {
  return ceil_div<int64_t>(ceil_div<int64_t>(families, 8) * 16, kRows) * kRows;
}

struct Params {
  const float* weight;  // W' (K x m_rows), row-major: rounded, reordered, zero-padded
  const float* input;   // (N, K, P)
  const float* bias;    // (C_out) or null
  float* out;           // (N, C_out, H k_h, 2 W)
  int64_t k, m_rows, pixels;
  int64_t width, out_width, out_plane;  // W, 2 W, H k_h 2 W
  int k_h, channels, families;          // families: C_out k_h (the output row families q)
};

// W' (K x m_rows) from the weight (K x C_out k_h 2, contiguous): rounded to TF32, rows reordered, zero past the
// families.
// (Templates, fp32 their one instance, so that the header may be included by more than one .cu file.)
template <typename T>
__global__ void __launch_bounds__(kThreads) prepare_weight_kernel(const T* __restrict__ weight,
                                                                  T* __restrict__ prepared, int64_t k,
                                                                  int64_t m_rows, int64_t families) {
  const int64_t total = k * m_rows;
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    const int64_t kk = i / m_rows, row = i - kk * m_rows;
    const int64_t q = row / 16 * 8 + row % 8;
    const int b = static_cast<int>(row % 16 / 8);
    prepared[i] = q < families ? round_tf32(weight[kk * families * 2 + q * 2 + b]) : T(0);
  }
}

template <typename T>  // float
__global__ void __launch_bounds__(kThreads, 2) conv_transpose_k2_gemm_kernel(Params p) {  // 2 blocks an SM
  static_assert(sizeof(T) == 4, "TF32 operands");
  extern __shared__ __align__(16) float smem[];
  const int64_t m0 = int64_t{blockIdx.y} * kRows, p0 = int64_t{blockIdx.x} * kPixels, n = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int warp_m = warp % 2 * 64, warp_n = warp / 2 * 32;
  const float* const x = p.input + n * p.k * p.pixels;
  const auto w_tile = [&](int stage) { return smem + stage * 2 * kTileWords; };
  const auto x_tile = [&](int stage) { return smem + (stage * 2 + 1) * kTileWords; };

  // Chunk c of a stage: tile row c / kChunksPerRow (a k), words 4 (c % kChunksPerRow) on (rows or pixels).
  const auto load_stage = [&](int stage, int64_t k0) {
#pragma unroll
    for (int i = 0; i < kChunksPerThread; ++i) {
      const int c = threadIdx.x + i * kThreads, row = c / kChunksPerRow, col = c % kChunksPerRow * 4;
      const bool k_in = k0 + row < p.k;
      cp_async_zfill<16>(w_tile(stage) + row * kPitch + col, p.weight + (k_in ? (k0 + row) * p.m_rows + m0 + col : 0),
                         k_in);
      const bool x_in = k_in && p0 + col < p.pixels;  // P % 4 == 0: a chunk is all in or all out
      cp_async_zfill<16>(x_tile(stage) + row * kPitch + col, x + (x_in ? (k0 + row) * p.pixels + p0 + col : 0), x_in);
    }
  };
  float acc[4][4][4] = {};  // [m16 tile][n8 tile][fragment]
  const int64_t k_stages = ceil_div<int64_t>(p.k, kDepth);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_stages) load_stage(s, int64_t{s} * kDepth);
    cp_async_commit();  // possibly empty: the waits count groups
  }
  for (int64_t s = 0; s < k_stages; ++s) {
    const int stage = static_cast<int>(s % kStages);
    cp_async_wait<kStages - 2>();  // this thread's copies of stage s have landed
    __syncthreads();  // everyone's have, and everyone is done reading stage s - 1, refilled next
    const int64_t next = s + kStages - 1;
    if (next < k_stages) load_stage(static_cast<int>(next % kStages), next * kDepth);
    cp_async_commit();
    const uint32_t* wt = reinterpret_cast<const uint32_t*>(w_tile(stage));
    const uint32_t* xt = reinterpret_cast<const uint32_t*>(x_tile(stage));
#pragma unroll
    for (int kk = 0; kk < kDepth; kk += 8) {
      uint32_t a[4][4], b[4][2];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        const int r = warp_m + mt * 16 + g;
        a[mt][0] = wt[(kk + t) * kPitch + r];
        a[mt][1] = wt[(kk + t) * kPitch + r + 8];
        a[mt][2] = wt[(kk + t + 4) * kPitch + r];
        a[mt][3] = wt[(kk + t + 4) * kPitch + r + 8];
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int c = warp_n + nt * 8 + g;
        b[nt][0] = __float_as_uint(round_tf32(__uint_as_float(xt[(kk + t) * kPitch + c])));
        b[nt][1] = __float_as_uint(round_tf32(__uint_as_float(xt[(kk + t + 4) * kPitch + c])));
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_m16n8k8_tf32(acc[mt][nt], a[mt], b[nt]);
      }
    }
  }

  // Epilogue: fragment (g, 2t .. 2t + 1) and (g + 8, ...) of tile (mt, nt) = family q, taps b = 0 / 1, pixels
  // w, w + 1: output elements 2w .. 2w + 3 of row (channel, h k_h + a), plus the bias, as ATen adds it.
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    const int64_t q = (m0 + warp_m + mt * 16) / 16 * 8 + g;
    if (q >= p.families) continue;
    const int64_t channel = q / p.k_h, a = q - channel * p.k_h;
    const float bias = p.bias == nullptr ? 0.0f : p.bias[channel];
    float* const plane = p.out + (n * p.channels + channel) * p.out_plane;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int64_t pixel = p0 + warp_n + nt * 8 + 2 * t;
      if (pixel >= p.pixels) continue;
      const int64_t h = pixel / p.width, w = pixel - h * p.width;
      const float* d = acc[mt][nt];
      *reinterpret_cast<float4*>(plane + (h * p.k_h + a) * p.out_width + 2 * w) =
          make_float4(d[0] + bias, d[2] + bias, d[1] + bias, d[3] + bias);
    }
  }
}

}  // namespace k2_gemm

// For A/B timing, read once: CONVOPS_K2_GEMM=0 turns this kernel off (the cuBLAS GEMM and tap shuffle run
// instead), CONVOPS_K2_GEMM=all lifts its C_in bound.
enum class K2GemmSetting { kOff, kOn, kAnyInChannels };
inline K2GemmSetting conv_transpose_k2_gemm_setting() {
  static const K2GemmSetting setting = [] {
    const char* env = std::getenv("CONVOPS_K2_GEMM");
    const std::string value = env == nullptr ? "" : env;
    return value == "0" ? K2GemmSetting::kOff : value == "all" ? K2GemmSetting::kAnyInChannels : K2GemmSetting::kOn;
  }();
  return setting;
}


// Whether conv_transpose_k2_gemm serves this problem (conv_transpose_gemm_applies holds for it): 2-D, fp32 with
// TF32 allowed, a k_h x 2 kernel, C_in up to kMaxInChannels, W even and H W a multiple of 4 (whole 16-byte copies and pixel pairs in one row),
// 16-byte aligned input and output, grid extents within CUDA's.
inline bool conv_transpose_k2_gemm_applies(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output,
                                           const ConvTransposeArgs& args, bool tf32) {
  const K2GemmSetting setting = conv_transpose_k2_gemm_setting();
  if (setting == K2GemmSetting::kOff || !tf32 || args.spatial_dims != 2 || input.scalar_type() != at::kFloat ||
      weight.size(-1) != 2 || (input.size(1) > k2_gemm::kMaxInChannels && setting != K2GemmSetting::kAnyInChannels)) {
    return false;
  }
  const int64_t w = input.size(3), pixels = input.size(2) * w;
  const int64_t m_blocks = k2_gemm::weight_rows(weight.size(1) * weight.size(2)) / k2_gemm::kRows;
  const int64_t p_blocks = ceil_div<int64_t>(pixels, k2_gemm::kPixels);
  return w % 2 == 0 && pixels % 4 == 0 && reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(output.const_data_ptr()) % 16 == 0 && input.size(0) <= 65535 &&
         m_blocks <= 65535 && p_blocks <= std::numeric_limits<int>::max();
}

// The kernel into `output` (dense NCHW, the op's sizes; conv_transpose_k2_gemm_applies holds).
inline void conv_transpose_k2_gemm(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, at::Tensor& output) {
  k2_gemm::Params p{};
  p.k = input.size(1);
  p.width = input.size(3);
  p.pixels = input.size(2) * p.width;
  p.k_h = static_cast<int>(weight.size(2));
  p.channels = static_cast<int>(weight.size(1));
  p.families = p.channels * p.k_h;
  p.m_rows = k2_gemm::weight_rows(p.families);
  p.out_width = 2 * p.width;
  p.out_plane = input.size(2) * p.k_h * p.out_width;
  if (output.numel() == 0) return;
  if (p.k == 0) {  // no products: the bias alone
    output.zero_();
    if (bias.has_value() && bias->defined()) output.add_(bias->view({1, -1, 1, 1}));
    return;
  }
  const at::Tensor w = weight.contiguous();
  at::Tensor prepared = at::empty({p.k, p.m_rows}, w.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t prep_blocks =
      std::min<int64_t>(ceil_div<int64_t>(prepared.numel(), k2_gemm::kThreads), multiprocessor_count() * 8);
  k2_gemm::prepare_weight_kernel<float><<<static_cast<unsigned>(prep_blocks), k2_gemm::kThreads, 0, stream>>>(
      w.const_data_ptr<float>(), prepared.mutable_data_ptr<float>(), p.k, p.m_rows, p.families);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor bias_c = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();
  p.weight = prepared.const_data_ptr<float>();
  p.input = input.const_data_ptr<float>();
  p.bias = bias_c.defined() ? bias_c.const_data_ptr<float>() : nullptr;
  p.out = output.mutable_data_ptr<float>();
  const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(p.pixels, k2_gemm::kPixels)),
                  static_cast<unsigned>(p.m_rows / k2_gemm::kRows), static_cast<unsigned>(input.size(0)));
  const auto kernel = k2_gemm::conv_transpose_k2_gemm_kernel<float>;
  allow_dynamic_shared_memory(kernel, k2_gemm::kSharedBytes);
  kernel<<<grid, k2_gemm::kThreads, k2_gemm::kSharedBytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace convops
