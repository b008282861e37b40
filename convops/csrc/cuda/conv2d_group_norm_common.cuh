// Pieces shared by the two CUDA kernels of convops::conv2d_group_norm_scale_max_pool_clamp: the launch parameters,
// the order-preserving float <-> uint32 encoding of pooled extrema, and how each channel pools (affine_sign).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace gn_pool {

// The conv tile of one CTA: kTileM output pixels (a tile_h x tile_w block, tile_h * tile_w <= kTileM) by kTileN
// output channels, computed by 8 warps as a 4 x 2 grid of 32 x 32 warp tiles.
constexpr int kThreads = 256;
constexpr int kTileM = 128;
constexpr int kTileN = 64;
constexpr int kWarpM = 32, kWarpN = 32;
constexpr int kEpilogueLd = kTileM + 4;  // row pitch (floats) of the [channel][pixel] epilogue tile: conflict-free
constexpr int kPixelWarps = kTileM / kWarpM;  // warps that share a channel, each with 32 of the tile's pixels
// Floats of the per-channel vectors after the epilogue tile: sign, conv bias, tile mean, tile M2, and per pixel
// warp a mean and an M2 per channel plus its pixel count.
constexpr int kSmallFloats = 4 * kTileN + 2 * kPixelWarps * kTileN + kPixelWarps;

// How the convolution multiplies: 3xTF32 (each fp32 operand split into a TF32 high part and a TF32 remainder:
// fp32-level accuracy on tensor cores), or bf16 / fp16 tensor cores for half-precision inputs. Accumulation is fp32
// throughout. fp32 inputs take 3xTF32 whatever the TF32 flag says: for this block cuDNN picks FP32 kernels even where
// TF32 is allowed (eager's result equals the fp64 one to ~1e-6 on the seed shape), and a single TF32 pass misses it
// by ~4e-3 once GroupNorm divides by the spread, far outside the 1e-4 agreement we promise.
enum class MmaMode { kTf32x3, kBf16, kFp16 };

// Two values as one 32-bit MMA operand register of the 16-bit modes (lo in the low half), rounded to nearest.
template <MmaMode kMode>
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  if constexpr (kMode == MmaMode::kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

struct ConvPoolParams {
  const void* input;
  const void* weight;
  const void* bias;      // (C_out) contiguous, or null
  const void* gamma;     // (C_out) contiguous, or null (= 1)
  const void* beta;      // (C_out) contiguous, or null (= 0)
  const void* scale;     // (C_out) contiguous, or a single value
  int64_t in_stride[4];  // N, C, H, W of input, in elements
  int64_t w_stride[4];   // C_out, C_in, kh, kw of weight
  int batch, in_channels, in_h, in_w, out_channels;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int conv_h, conv_w, pool_h, pool_w, pooled_h, pooled_w;
  int channels_per_group, num_groups;
  bool scale_per_channel;
  // Tiling over the convolution output (every output pixel belongs to exactly one tile).
  int tile_h, tile_w, tiles_w, spatial_tiles, channel_tiles, local_groups;
  // Main-loop shared memory: the input patch of chunk_channels channels, its k -> patch offset table, the weights.
  int chunk_channels, patch_h, patch_w, k_chunk, k_chunk_padded, weight_ld;
  int smem_koff, smem_patch, smem_small;  // offsets in floats (weights at 0; the epilogue tile reuses the patch)
  bool channels_fastest;  // input is channels_last: load the patch with the channel index varying fastest
  bool atomic_pool;       // pool windows straddle tiles: combine window pieces with atomicMax
  // Divisors of the per-tile index arithmetic (see FastDivmod): patch rows, chunk channels, patch columns; the
  // weight chunk's k, taps, filter columns; the pool-window grid a tile meets (at most tile_windows_h x
  // tile_windows_w windows), and its width.
  FastDivmod patch_h_div, chunk_channels_div, patch_w_div;
  FastDivmod k_chunk_div, taps_div, kernel_w_div;
  FastDivmod tile_windows_div, tile_windows_w_div;
  FastDivmod tile_w_div;    // tile pixel -> (row, column)
  FastDivmod pooled_w_div;  // kernel 2: output columns
  // Outputs of kernel 1.
  uint32_t* extremum;     // (N, C_out, pooled_h, ext_w): encoded max over the window of sign_c * conv, or its
                          // sign classes where sign_c = 0; rows padded to ext_w >= pooled_w codes (the window
                          // kernel's rows are whole 16-byte vectors)
  int ext_w;
  float4* partials;       // (N, channel_tiles, spatial_tiles, local_groups): (count, mean, M2, unused)
  // Kernel 2.
  void* output;
  int64_t out_stride[4];
  float eps;
  bool has_lo, has_hi;
  float lo, hi;
};

template <typename T>
__device__ __forceinline__ float load_float(const void* p, int64_t i) {
  return static_cast<float>(static_cast<const T*>(p)[i]);
}

// How kernel 1 pools channel c. GroupNorm's affine is y = a x + b with a = rstd * gamma, b = -a * mean + beta (ATen's
// form); rstd > 0, so the sign of a * s is that of gamma * s, known before any statistics exist.
//   +1: finite gamma, gamma * s >= 0: (a x + b) * s grows with x, the window's max of x decides it;
//   -1: finite gamma, gamma * s < 0 (or NaN, which makes every output NaN anyway): the max of -x decides it;
//    0: gamma = +-Inf: a x + b is b (+-Inf) where x has the sign of a * b and NaN elsewhere, and that sign depends on
//       the mean, so the window records which signs it holds (sign_classes) instead of a value.
__device__ __forceinline__ float affine_sign(float gamma, float s) {
  return isinf(gamma) ? 0.f : gamma * s >= 0.f ? 1.f : -1.f;
}

// Channel c's GroupNorm weight (1 without one), GroupNorm bias (0 without one) and scale.
template <typename T>
__device__ __forceinline__ float norm_weight(const ConvPoolParams& p, int c) {
  return p.gamma ? load_float<T>(p.gamma, c) : 1.f;
}

template <typename T>
__device__ __forceinline__ float norm_bias(const ConvPoolParams& p, int c) {
  return p.beta ? load_float<T>(p.beta, c) : 0.f;
}

template <typename T>
__device__ __forceinline__ float channel_scale(const ConvPoolParams& p, int c) {
  return load_float<T>(p.scale, p.scale_per_channel ? c : 0);
}

template <typename T>
__device__ __forceinline__ float affine_sign(const ConvPoolParams& p, int c) {
  return affine_sign(norm_weight<T>(p, c), channel_scale<T>(p, c));
}

// Channel c's conv bias (0 without one).
template <typename T>
__device__ __forceinline__ float conv_bias(const ConvPoolParams& p, int c) {
  return p.bias ? load_float<T>(p.bias, c) : 0.f;
}

// The factor a kernel multiplies channel c's conv values by so that its pooling is a max: the sign, and +1 for sign
// 0 (whose windows record sign classes, sign_classes, of the unfolded values).
__device__ __forceinline__ float sign_fold(float sign) {
  return sign == 0.f ? 1.f : sign;
}

// Sign classes of a window for sign-0 channels, OR-ed over its elements (atomicOr across tile pieces; 0 = none yet):
// kNotPositive when some element is <= 0 or NaN, kNotNegative when some element is >= 0 or NaN.
constexpr uint32_t kNotPositive = 1u, kNotNegative = 2u;

__device__ __forceinline__ uint32_t sign_classes(float x) {
  return (x > 0.f ? 0u : kNotPositive) | (x < 0.f ? 0u : kNotNegative);
}

// Monotone map float -> uint32 (unsigned order = float order), so that atomicMax on the codes is a float max and a
// zero-filled buffer means "nothing yet". NaN is made the largest code: a NaN in a window wins, as in max_pool2d.
__device__ __forceinline__ uint32_t encode_ordered(float f) {
  if (f != f) return 0xffffffffu;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float decode_ordered(uint32_t e) {
  if (e == 0xffffffffu) return __uint_as_float(0x7fffffffu);
  return __uint_as_float((e & 0x80000000u) ? (e & 0x7fffffffu) : ~e);
}

// NaN-propagating max (max_pool2d's rule: a NaN in the window wins): max.NaN is one instruction from sm_80 on.
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
}

// Chan et al.'s merge of (count, mean, M2) summaries: stable where the mean dwarfs the spread.
struct Moments {
  float count, mean, m2;
  __device__ __forceinline__ void merge(float n, float m, float s) {
    if (n == 0.f) return;
    if (count == 0.f) {  // taken as is: the general formula would square the mean (Inf past 1.8e19, then 0 x Inf)
      count = n, mean = m, m2 = s;
      return;
    }
    const float total = count + n, delta = m - mean, w = n / total;
    mean += delta * w;
    m2 += s + delta * delta * count * w;
    count = total;
  }
};

// A thread's values of one channel (or of one group's slice) as sums of their differences from a shift, the first
// value it meets: the shifted-data variance (Chan, Golub & LeVeque, "Algorithms for computing the sample variance",
// 1983), three instructions a value where a Chan merge a window cost a division. With the shift a sample of the
// same values, S2 - S1^2 / n cancels only as much as the spread of the values about the shift exceeds their own
// spread, not by the mean's size (a mean 100x the spread costs nothing).
struct ShiftedSums {
  float shift = 0.f, count = 0.f, s1 = 0.f, s2 = 0.f;
  __device__ __forceinline__ void begin(float x) {  // the shift, before the thread's first value
    if (count == 0.f) shift = x;
  }
  __device__ __forceinline__ void add(float x) {  // after begin; count is added by the caller (add_count)
    const float d = x - shift;
    s1 += d;
    s2 = fmaf(d, d, s2);
  }
  __device__ __forceinline__ void add_count(float n) { count += n; }
  // (count, mean, M2); a rounding-negative M2 becomes 0, a NaN one stays NaN (as finalize_kernel's variance does).
  __device__ __forceinline__ Moments moments() const {
    if (count == 0.f) return Moments{0.f, 0.f, 0.f};
    const float mean = s1 / count, m2 = s2 - s1 * mean;
    return Moments{count, shift + mean, m2 < 0.f ? 0.f : m2};
  }
};

constexpr unsigned kFullMask = 0xffffffffu;

// A warp's merge of its lanes' summaries, in a fixed order (deterministic): lane 0 returns the total.
__device__ __forceinline__ Moments merge_warp(Moments m) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float count = __shfl_down_sync(kFullMask, m.count, offset);
    const float mean = __shfl_down_sync(kFullMask, m.mean, offset);
    const float m2 = __shfl_down_sync(kFullMask, m.m2, offset);
    m.merge(count, mean, m2);
  }
  return m;
}

}  // namespace gn_pool
}  // namespace cuda
}  // namespace convops
