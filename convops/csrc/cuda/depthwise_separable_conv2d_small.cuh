// Small-problem fused kernel of convops::depthwise_separable_conv2d: the depthwise stage and the 1x1 in one launch
// for the latency-bound problems (the batch-1 layers of MobileNetV2 and EfficientNet-B0), the intermediate only in
// shared memory.
//
// Why (issue #5 sweep): at batch 1 the ATen pair is two launches of a few microseconds each, nearly all of it
// latency (an empty kernel takes 3.6 us under do_bench's L2 flush on the H200); the convops depthwise kernel then a
// GEMM is two launches as well, and the row-streaming and tile kernels are built for bandwidth (a persistent grid,
// deep copy pipelines, 128-pixel tiles), which a 7x7 plane cannot fill. One launch whose loads are independent of
// one another is the way under the pair's time.
//
// Design. The grid is (channel slices, pixel tiles, images). A CTA owns `tile` consecutive output pixels of one
// image (row-major over the output plane, so a tile may span rows) and one slice of the depthwise (mid) channels:
//   1. it stages everything it reads in shared memory with cp.async, all of it in flight at once, so that it waits
//      for one round trip to memory: its slice of the pointwise weight W[:, slice], the slice's depthwise filters
//      and biases, the pointwise bias, and the input rows its outputs' windows reach. (A first version read the
//      weights and the input taps with ordinary loads, a few in flight a thread: 12-40 us on these layers, H200,
//      2026-11-28 01:31 UTC, against eager's 12-15, since after do_bench's L2 flush each round trip goes to DRAM.)
//   2. it computes the slice's depthwise outputs for its pixels from the staged rows (window_sum of the
//      small-problem depthwise kernel) into D[channel][pixel];
//   3. each thread sums W[co][k] * D[k][8 pixels] over a share of the slice's channels for one cout and a group of 8
//      pixels (parts: the slice split further where couts x groups leave threads idle), the shares' partial sums
//      added in a fixed order;
//   4. the CTAs of one pixel tile form a thread block cluster (sm_90; up to 16 CTAs), one CTA a slice: after the
//      cluster's barrier each reads its share of the outputs' partial sums from every CTA's shared memory (in rank
//      order, so the result does not depend on timing), adds the pointwise bias and stores the output.
// Splitting the mid channels over a cluster rather than the couts over CTAs computes every depthwise output once and
// reads every weight once per tile, and gives a 7x7 plane (49 pixels) enough CTAs to spread over the SMs.
//
// Rounding, as the unfused ATen pair: the depthwise output is the bias plus the taps in (ky, kx) order in fp32 (as
// eager's depthwise kernel), stored in the input dtype; the 1x1's operands are then rounded to TF32 (nearest, ties to
// even, as cuDNN does) when TF32 is allowed, so each product is exact in fp32 and only the order of the fp32 sums
// differs from a tensor-core GEMM; strict fp32 multiplies the fp32 values. The pointwise bias is added to the
// product after its rounding to the output dtype, as ATen adds it after cuDNN's convolution.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <type_traits>

#include "common/checks.h"
#include "common/tuning.h"
#include "cuda/depthwise_conv2d_launch.cuh"
#include "cuda/depthwise_conv2d_small.cuh"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"
#include "cuda/wgmma.cuh"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {
namespace separable_small {

constexpr int kThreads = 512;        // 16 warps: the phases are latency chains, which more warps hide
constexpr int kGroup = 8;            // pixels a thread's 1x1 sums cover: one D row segment, two float4 reads
constexpr int kPortableRanks = 8;    // CTAs a cluster that every sm_90 launch supports
constexpr int kMaxRanks = 16;        // CTAs a cluster at most: Hopper's non-portable size (cluster_fits)
constexpr int kMinSlice = 16;        // mid channels a CTA at least: fewer leave the cluster's reduction the main cost
constexpr int kMinPartChannels = 4;  // mid channels a thread's share at least

// How the 1x1's operands (the stored depthwise outputs and the pointwise weights) are rounded.
enum class Rounding {
  kNone,     // strict fp32
  kTf32,     // fp32 with TF32 allowed: to TF32, nearest, ties to even
  kStorage,  // 16-bit: to the input dtype (the weights are in it already)
};

template <typename scalar_t>
struct Params {
  const scalar_t* __restrict__ input;
  const scalar_t* __restrict__ dw_weight;
  const scalar_t* __restrict__ dw_bias;  // nullptr: no bias
  const scalar_t* __restrict__ pw_weight;
  const scalar_t* __restrict__ pw_bias;  // nullptr: no bias
  scalar_t* __restrict__ output;
  int in_h, in_w, out_w, pad_h, pad_w;
  int in_channels, multiplier, mid_channels, out_channels;
  int pixels;       // out_h * out_w
  int tile;         // output pixels a CTA
  int d_pitch;      // D's row: tile rounded up to kGroup
  int slice;        // mid channels a CTA (the last CTA of a cluster may have fewer)
  int parts;        // shares of a slice's channels
  // The dynamic shared memory, in 4-byte words from its start (laid out by launch_separable_small): the pointwise
  // weights' rows, the depthwise filters, the two biases, the input rows a channel at a time, D, the partial sums.
  int w_pitch, dw_filter, dw_bias_at, pw_bias_at, patch, patch_pitch, d_at, y_at;
  // Dividers for the per-element index arithmetic (by w_pitch, patch_pitch, d_pitch, out_w, multiplier).
  FastDivmod by_w_pitch, by_patch_pitch, by_d_pitch, by_out_w, by_multiplier;
};

// Where a run of elements starting at `src` begins within the 4-byte word that holds its first element: 0, or 1 for
// a 16-bit element in the upper half of its word. Spans are staged as whole words (cp.async copies 4, 8 or 16
// bytes), so a 16-bit span whose first element sits at an odd position is read back from there.
template <typename scalar_t>
__device__ __forceinline__ int word_shift(const scalar_t* src) {
  return static_cast<int>(reinterpret_cast<uintptr_t>(src) % 4) / static_cast<int>(sizeof(scalar_t));
}

// Starts the asynchronous copy of elements [src, src + count) into shared memory at dst as whole 4-byte words, the
// word that holds src first (so that the span is read back from word_shift(src) on), shared by `lanes` threads of
// which this is `lane`. With 16-bit elements the first and last words may hold one element outside the span, within
// the same aligned word of the allocation (CUDA allocations are whole words). An empty span copies nothing: a tile
// whose windows lie wholly in the padding below the image stages no rows, and its span starts past the plane.
template <typename scalar_t>
__device__ __forceinline__ void stage_words(uint32_t* dst, const scalar_t* src, int count, int lane, int lanes) {
  const int shift = word_shift(src);
  const auto* first = reinterpret_cast<const uint32_t*>(src - shift);
  const int words = count > 0 ? ((shift + count) * static_cast<int>(sizeof(scalar_t)) + 3) / 4 : 0;
  for (int i = lane; i < words; i += lanes) cp_async_zfill<4>(dst + i, first + i, true);
}

// stage_words for `spans` spans of `count` elements, span r from src(r) to dst + r * pitch words (by_pitch divides
// by pitch), the words of all spans spread over the CTA's threads: a warp a span would leave lanes idle on short
// spans (a 7x7 plane's rows).
template <typename scalar_t, typename Source>
__device__ __forceinline__ void stage_spans(uint32_t* dst, int spans, const FastDivmod& by_pitch, int count,
                                            Source src) {
  const int total = spans * static_cast<int>(by_pitch.divisor);
  for (int i = threadIdx.x; i < total; i += kThreads) {
    int r;
    const int w = by_pitch.divmod(i, r);
    const scalar_t* span = src(r);
    const int shift = word_shift(span);
    if (count > 0 && w * 4 < (shift + count) * static_cast<int>(sizeof(scalar_t))) {
      cp_async_zfill<4>(dst + i, reinterpret_cast<const uint32_t*>(span - shift) + w, true);
    }
  }
}

// Element `at` of a span staged by stage_words from src into dst.
template <typename scalar_t>
__device__ __forceinline__ float staged(const uint32_t* dst, const scalar_t* src, int at) {
  return static_cast<float>(reinterpret_cast<const scalar_t*>(dst)[word_shift(src) + at]);
}

template <Rounding R, typename scalar_t>
__device__ __forceinline__ float round_operand(float x) {
  if constexpr (R == Rounding::kTf32) {
    return round_tf32(x);
  } else if constexpr (R == Rounding::kStorage) {
    return static_cast<float>(static_cast<scalar_t>(x));
  } else {
    return x;
  }
}

// The output from its fp32 sum and, where has_bias, the bias: rounded to the output dtype, then the bias added and
// rounded again (ATen's add after the convolution; for fp32 both roundings are the one fp32 addition).
template <typename scalar_t>
__device__ __forceinline__ scalar_t finish_output(float sum, bool has_bias, float bias) {
  const scalar_t product = static_cast<scalar_t>(sum);
  if (!has_bias) return product;
  return static_cast<scalar_t>(static_cast<float>(product) + bias);
}

template <typename scalar_t, int K, int S, Rounding R>
__global__ void __launch_bounds__(kThreads) separable_small_kernel(const Params<scalar_t> p) {
  extern __shared__ uint4 smem_vectors[];
  uint32_t* const smem = reinterpret_cast<uint32_t*>(smem_vectors);
  float* const d_s = reinterpret_cast<float*>(smem + p.d_at);  // [slice][d_pitch]
  float* const y_s = reinterpret_cast<float*>(smem + p.y_at);  // [parts][out_channels][d_pitch]
  const int rank = blockIdx.x, ranks = gridDim.x;  // a cluster spans gridDim.x: one CTA a slice
  const int first = blockIdx.y * p.tile;           // the tile's first output pixel
  const int count = min(p.tile, p.pixels - first);
  const int n = blockIdx.z;
  const int c0 = rank * p.slice;
  const int channels = max(0, min(p.slice, p.mid_channels - c0));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // 1. Everything the CTA reads, staged at once so that it waits for one round trip to memory: the slice's
  // pointwise weights (a row a cout), depthwise filters and biases, the pointwise bias, and the input rows its
  // outputs' windows reach (those inside the image; a span an input channel).
  const scalar_t* __restrict__ dw_filter = p.dw_weight + c0 * K * K;
  const scalar_t* __restrict__ dw_bias = p.dw_bias != nullptr ? p.dw_bias + c0 : nullptr;
  const int oy_first = p.by_out_w.div(first), oy_last = p.by_out_w.div(first + count - 1);
  const int row0 = max(0, oy_first * S - p.pad_h);
  const int rows = max(0, min(p.in_h, oy_last * S - p.pad_h + K) - row0);
  const int ic0 = p.by_multiplier.div(c0);  // the slice's first input channel
  const int in_slice = channels > 0 ? p.by_multiplier.div(c0 + channels - 1) - ic0 + 1 : 0;
  const scalar_t* __restrict__ in_rows =
      p.input + (int64_t{n} * p.in_channels + ic0) * p.in_h * p.in_w + int64_t{row0} * p.in_w;
  const int64_t plane = int64_t{p.in_h} * p.in_w;
  stage_spans<scalar_t>(smem, p.out_channels, p.by_w_pitch, channels,
                        [&](int co) { return p.pw_weight + int64_t{co} * p.mid_channels + c0; });
  stage_spans<scalar_t>(smem + p.patch, in_slice, p.by_patch_pitch, rows * p.in_w,
                        [&](int ic) { return in_rows + ic * plane; });
  if (warp == 0) stage_words(smem + p.dw_filter, dw_filter, channels * K * K, lane, 32);
  if (warp == 1 && dw_bias != nullptr) stage_words(smem + p.dw_bias_at, dw_bias, channels, lane, 32);
  if (warp == 2 && p.pw_bias != nullptr) stage_words(smem + p.pw_bias_at, p.pw_bias, p.out_channels, lane, 32);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // 2. The slice's depthwise outputs from the staged rows, rounded as the 1x1's operands; pixels past the tile's end
  // read as 0.
  const auto* filters = reinterpret_cast<const scalar_t*>(smem + p.dw_filter) + word_shift(dw_filter);
  for (int i = threadIdx.x; i < channels * p.d_pitch; i += kThreads) {
    int k, oy;
    const int j = p.by_d_pitch.divmod(i, k);
    float value = 0.0f;
    if (j < count) {
      const int ox = p.by_out_w.divmod(first + j, oy);
      const int ic = p.by_multiplier.div(c0 + k) - ic0;
      const scalar_t* src = in_rows + ic * plane;
      const auto* window = reinterpret_cast<const scalar_t*>(smem + p.patch + ic * p.patch_pitch) + word_shift(src);
      const float bias = dw_bias != nullptr ? staged(smem + p.dw_bias_at, dw_bias, k) : 0.0f;
      value = round_operand<R, scalar_t>(small::window_sum<scalar_t, K>(
          window, filters + k * K * K, bias, oy * S - p.pad_h - row0, ox * S - p.pad_w, rows, p.in_w));
    }
    d_s[i] = value;
  }
  __syncthreads();

  // 3. Partial 1x1 sums: task (part, group of 8 pixels, cout), couts fastest so that a warp's weight reads fall in
  // distinct banks and its D reads are one broadcast.
  const int groups = p.d_pitch / kGroup;
  const int tasks = p.out_channels * groups;
  const int share = (channels + p.parts - 1) / p.parts;
  for (int t = threadIdx.x; t < tasks * p.parts; t += kThreads) {
    const int part = t / tasks, task = t - part * tasks;
    const int g = task / p.out_channels, co = task - g * p.out_channels;
    const int k_end = min(channels, (part + 1) * share);
    const auto* w_row = reinterpret_cast<const scalar_t*>(smem + co * p.w_pitch) +
                        word_shift(p.pw_weight + int64_t{co} * p.mid_channels + c0);
    const float* __restrict__ d_col = d_s + g * kGroup;
    float acc[kGroup] = {};
#pragma unroll 4
    for (int k = part * share; k < k_end; ++k) {
      const float w = round_operand<R, scalar_t>(static_cast<float>(w_row[k]));
      const float4 lo = *reinterpret_cast<const float4*>(d_col + k * p.d_pitch);
      const float4 hi = *reinterpret_cast<const float4*>(d_col + k * p.d_pitch + 4);
      acc[0] = fmaf(w, lo.x, acc[0]);
      acc[1] = fmaf(w, lo.y, acc[1]);
      acc[2] = fmaf(w, lo.z, acc[2]);
      acc[3] = fmaf(w, lo.w, acc[3]);
      acc[4] = fmaf(w, hi.x, acc[4]);
      acc[5] = fmaf(w, hi.y, acc[5]);
      acc[6] = fmaf(w, hi.z, acc[6]);
      acc[7] = fmaf(w, hi.w, acc[7]);
    }
    float4* y = reinterpret_cast<float4*>(y_s + (part * p.out_channels + co) * p.d_pitch + g * kGroup);
    y[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    y[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  }
  __syncthreads();
  if (p.parts > 1) {  // the shares' sums into part 0, in part order
    const int sums = p.out_channels * p.d_pitch;
    for (int i = threadIdx.x; i < sums; i += kThreads) {
      float sum = y_s[i];
      for (int part = 1; part < p.parts; ++part) sum += y_s[part * sums + i];
      y_s[i] = sum;
    }
  }

  // 4. The cluster's slices added (rank order), the bias, the store: CTA `rank` takes every ranks-th run of
  // kThreads outputs, consecutive threads consecutive pixels of one cout.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  if (ranks > 1) cg::this_cluster().sync();  // every CTA's sums complete and visible to the cluster
  else __syncthreads();
#else
  __syncthreads();  // the launcher forms clusters only where the machine code is sm_90a (ranks == 1 here)
#endif
  const int outputs = p.out_channels * count;
  scalar_t* __restrict__ out = p.output + int64_t{n} * p.out_channels * p.pixels + first;
  for (int o = rank * kThreads + threadIdx.x; o < outputs; o += ranks * kThreads) {
    const int co = o / count, j = o - co * count;
    const int at = co * p.d_pitch + j;
    float sum = y_s[at];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (ranks > 1) {
      const cg::cluster_group cluster = cg::this_cluster();
      sum = *cluster.map_shared_rank(y_s + at, 0);
#pragma unroll
      for (int r = 1; r < kMaxRanks; ++r) {
        if (r < ranks) sum += *cluster.map_shared_rank(y_s + at, r);
      }
    }
#endif
    const bool has_bias = p.pw_bias != nullptr;
    const float bias = has_bias ? staged(smem + p.pw_bias_at, p.pw_bias, co) : 0.0f;
    out[int64_t{co} * p.pixels + j] = finish_output<scalar_t>(sum, has_bias, bias);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (ranks > 1) cg::this_cluster().sync();  // no CTA leaves while another still reads its shared memory
#endif
}

// Whether this build's machine code can form thread block clusters here: the sm_90a code setup.py builds for compute
// capability 9.0. Elsewhere the kernel runs with one CTA a tile (ranks 1), which needs no cluster.
inline bool clusters_run_here() {
  return wgmma::runs_here();
}

template <typename scalar_t>
using Kernel = void (*)(Params<scalar_t>);

template <typename scalar_t, Rounding R>
Kernel<scalar_t> kernel_for(int64_t k, int64_t stride) {
  const auto with_stride = [&](auto filter) -> Kernel<scalar_t> {
    constexpr int kK = decltype(filter)::value;
    if (stride == 1) return separable_small_kernel<scalar_t, kK, 1, R>;
    return separable_small_kernel<scalar_t, kK, 2, R>;
  };
  if (k == 3) return with_stride(std::integral_constant<int, 3>{});
  if (k == 5) return with_stride(std::integral_constant<int, 5>{});
  return with_stride(std::integral_constant<int, 7>{});
}

inline cudaLaunchConfig_t cluster_config(dim3 grid, size_t smem, cudaStream_t stream, cudaLaunchAttribute& cluster) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cluster = cudaLaunchAttribute{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = grid.x;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return config;
}

// Whether clusters of `ranks` CTAs of `kernel` with `smem` bytes each can be resident on the current device (asked
// once per kernel, size and device). Clusters of more than kPortableRanks need the kernel's non-portable attribute
// and CTAs that fit a GPC's SMs, which the driver's occupancy query answers.
template <typename scalar_t>
bool cluster_fits(Kernel<scalar_t> kernel, int ranks, size_t smem) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, size_t, int>, bool> known;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  // A CTA over the shared memory a block may have forms no cluster (and raising the kernel's allowance to it would
  // fail): the launcher then plans narrower clusters, or declines the problem.
  if (smem > static_cast<size_t>(max_shared_memory_per_block())) return false;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), ranks, smem, device);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  bool fits = false;
  // The shared-memory allowance goes through allow_dynamic_shared_memory, which only ever raises it: setting it here
  // directly could lower it under what that function has recorded for a larger problem's later launch.
  allow_dynamic_shared_memory(kernel, static_cast<int>(smem));
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) {
    cudaLaunchAttribute cluster;
    const cudaLaunchConfig_t config = cluster_config(dim3(ranks), smem, nullptr, cluster);
    int clusters = 0;
    fits = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess && clusters > 0;
  }
  (void)cudaGetLastError();  // a refused attribute or query is an answer here, not an error of a later launch
  return known[key] = fits;
}

template <typename scalar_t>
void launch(Kernel<scalar_t> kernel, const Params<scalar_t>& p, dim3 grid, size_t smem, cudaStream_t stream) {
  allow_dynamic_shared_memory(kernel, static_cast<int>(smem));
  if (grid.x == 1) {
    kernel<<<grid, kThreads, smem, stream>>>(p);
  } else {
    cudaLaunchAttribute cluster;
    const cudaLaunchConfig_t config = cluster_config(grid, smem, stream, cluster);
    C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The tiling of a problem and its shared-memory layout (Params' fields of the same names).
struct Plan {
  int64_t tile, tiles, ranks, slice, d_pitch, parts;
  int64_t w_pitch, dw_filter, dw_bias_at, pw_bias_at, patch, patch_pitch, d_at, y_at;
  int64_t smem;  // bytes
};

// The most pixels a CTA (CONVOPS_SMALL_SEPARABLE_TILE, read each call, overrides it): 16 on planes of up to 256
// where tiles of 16 and the widest clusters still give every SM a CTA (a 14x14 plane: 13 tiles of 16), else 8 (a 7x7
// plane: 7 tiles of 7); 32 on larger planes. A CTA stages its slice of the pointwise weights whatever its tile, so
// fewer, larger tiles read them fewer times: H200, 2026-11-28, do_bench with its L2 flush, the 14x14 layers of
// EfficientNet-B0 480 -> 80 and MobileNetV2 384 -> 64 in TF32 took 11.97 and 10.98 us in tiles of 16 against 13.92
// and 12.16 in tiles of 8 (bf16 11.65 and 11.33 against 12.80 and 11.39), while the 7x7 layers were 13-20% slower in
// tiles of 13 than of 7 (tools/probe/separable_knobs.py).
inline int64_t max_tile_pixels(const DepthwiseGeometry& d, int64_t max_ranks) {
  const int64_t pixels = d.out_h * d.out_w;
  const int64_t widest = std::max<int64_t>(1, std::min(max_ranks, d.out_channels / kMinSlice));
  const bool wide_tiles_fill = d.batch * ceil_div(pixels, int64_t{2 * kGroup}) * widest >= multiprocessor_count();
  const int64_t fallback = pixels > 256 ? 4 * kGroup : wide_tiles_fill ? 2 * kGroup : kGroup;
  return tuning_value("CONVOPS_SMALL_SEPARABLE_TILE", fallback);
}

// Tiles of at most max_tile_pixels, of even size; as many slices of the mid channels (one CTA each, a cluster of up
// to max_ranks) as bring the CTAs to about two per SM (CONVOPS_SMALL_SEPARABLE_CTAS, read each call, overrides the
// count aimed at), each of at least kMinSlice channels. (About one per SM, as first written, gave the 14x14 layers'
// 13 tiles clusters of 11 CTAs, 3-10% slower than of 16 in the same measurements.)
template <typename scalar_t>
Plan plan(const DepthwiseGeometry& d, int64_t out_channels, int64_t max_ranks) {
  Plan t{};
  const int64_t pixels = d.out_h * d.out_w, k = d.kernel_h, s = d.stride_h;
  t.tile = ceil_div(pixels, ceil_div(pixels, max_tile_pixels(d, max_ranks)));  // tiles of even size
  t.tiles = ceil_div(pixels, t.tile);                                           // every one with pixels
  const int64_t ctas = tuning_value("CONVOPS_SMALL_SEPARABLE_CTAS", 2 * multiprocessor_count());
  t.ranks = std::clamp<int64_t>(ceil_div<int64_t>(ctas, d.batch * t.tiles), 1, max_ranks);
  t.ranks = std::max<int64_t>(1, std::min(t.ranks, d.out_channels / kMinSlice));
  t.slice = ceil_div(d.out_channels, t.ranks);
  t.ranks = ceil_div(d.out_channels, t.slice);  // no CTA without channels
  t.d_pitch = ceil_div(t.tile, int64_t{kGroup}) * kGroup;
  const int64_t tasks = out_channels * (t.d_pitch / kGroup);
  t.parts = std::max<int64_t>(1, std::min(kThreads / tasks, t.slice / kMinPartChannels));
  // Shared memory in 4-byte words (the kernel's step 1 stages spans as whole words, a 16-bit one from either half of
  // its first word). The input rows a tile reaches: a tile spans at most ceil((tile - 1) / out_w) + 1 output rows;
  // a slice of mid channels reads at most (slice - 1) / multiplier + 2 input channels.
  const int64_t shift = sizeof(scalar_t) == 2 ? 1 : 0;
  const auto words = [&](int64_t elements) {
    return ceil_div((elements + shift) * int64_t{sizeof(scalar_t)}, int64_t{4});
  };
  const int64_t spanned = std::min(d.out_h, ceil_div(t.tile - 1, d.out_w) + 1);
  const int64_t rows = std::min(d.in_h, (spanned - 1) * s + k);
  const int64_t in_slice = std::min(d.in_channels, (t.slice - 1) / d.multiplier + 2);
  t.w_pitch = words(t.slice) | 1;  // odd: a warp's 32 couts read 32 banks
  t.dw_filter = out_channels * t.w_pitch;
  t.dw_bias_at = t.dw_filter + words(t.slice * k * k);
  t.pw_bias_at = t.dw_bias_at + words(t.slice);
  t.patch = t.pw_bias_at + words(out_channels);
  t.patch_pitch = words(rows * d.in_w);
  t.d_at = ceil_div(t.patch + in_slice * t.patch_pitch, int64_t{4}) * 4;  // float4 reads
  t.y_at = t.d_at + t.slice * t.d_pitch;
  t.smem = (t.y_at + t.parts * out_channels * t.d_pitch) * 4;
  return t;
}

// Most CTAs a cluster: CONVOPS_SMALL_SEPARABLE_RANKS (read each call, for tuning) or kMaxRanks.
inline int64_t max_ranks_asked() {
  return std::min<int64_t>(tuning_value("CONVOPS_SMALL_SEPARABLE_RANKS", kMaxRanks), kMaxRanks);
}

}  // namespace separable_small

// Where the dispatch takes this kernel: problems of at most 2^18 depthwise outputs (is_small_problem: the sweep's
// batch-1 layers) on output planes of at most 256 pixels, whose 1x1 is at most 2^24 multiply-adds (FFMA spread over
// the SMs; ConvNeXt-T's batch-1 layers, 2^26.8 each, keep the tensor-core paths). Measured (H100, 2026-11-28 02:00
// UTC, do_bench us with its L2 flush, TF32 / bf16, against the eager pair): the 7x7 and 14x14 planes of MobileNetV2
// and EfficientNet-B0 11.9 / 11.4 against 14.3 / 14.0 (960 -> 160), 14.0 / 12.8 against 15.8 / 15.9 (1152 -> 192),
// 12.4 / 11.4 against 13.1 / 12.5 (384 -> 64), 13.9 / 12.7 against 13.3 / 13.6 (480 -> 80); but the 28x28 planes
// (tiles of 32 pixels) 14.5-16.8 against 10.8-14.9, slower than the mixed path there too.
inline bool small_separable_pays(const DepthwiseGeometry& d, int64_t out_channels) {
  return is_small_problem(d) && d.out_h * d.out_w <= 256 &&
         d.batch * d.out_h * d.out_w * d.out_channels * out_channels <= (int64_t{1} << 24);
}

// Runs depthwise_separable_conv2d on the small-problem fused kernel and returns true, or returns false without doing
// anything when the problem is outside its scope: fp64, non-contiguous input or output, a filter other than 3x3,
// 5x5 or 7x7, stride other than 1 or 2 (the same along H and W), dilation, plane offsets past int, or weights and
// sums that do not fit in shared memory. With dry_run it only answers. It takes problems of any size; the dispatch
// gives it the small ones (small_separable_pays). The arguments are launch_separable_pipelined's.
template <typename scalar_t>
bool launch_separable_small(const at::Tensor& input, const at::Tensor& dw_weight,
                            const std::optional<at::Tensor>& dw_bias, const at::Tensor& pw_weight,
                            const std::optional<at::Tensor>& pw_bias, const at::Tensor& output,
                            const DepthwiseGeometry& d, bool tf32, cudaStream_t stream, bool dry_run) {
  using namespace separable_small;
  if constexpr (std::is_same_v<scalar_t, double>) {
    return false;
  } else {
    if (!input.is_contiguous() || (!dry_run && !output.is_contiguous())) return false;
    const int64_t k = d.kernel_h, s = d.stride_h;
    if (d.kernel_w != k || (k != 3 && k != 5 && k != 7) || d.stride_w != s || (s != 1 && s != 2)) return false;
    if (d.dilation_h != 1 || d.dilation_w != 1) return false;
    constexpr int64_t kIntMax = std::numeric_limits<int>::max();
    // Plane offsets (padding taps included), pixel indices and weight offsets in int; the grid's y and z extents.
    const int64_t pixels = d.out_h * d.out_w, out_channels = pw_weight.size(0);
    if ((d.in_h + 2 * d.pad_h + k) * (d.in_w + 2 * d.pad_w + k) >= kIntMax || pixels >= kIntMax ||
        d.out_channels * k * k >= kIntMax || out_channels * pixels >= kIntMax || d.batch > 65535) {
      return false;
    }
    Kernel<scalar_t> kernel;
    if constexpr (std::is_same_v<scalar_t, float>) {
      kernel = tf32 ? kernel_for<scalar_t, Rounding::kTf32>(k, s) : kernel_for<scalar_t, Rounding::kNone>(k, s);
    } else {
      kernel = kernel_for<scalar_t, Rounding::kStorage>(k, s);
    }
    Plan t = plan<scalar_t>(d, out_channels, clusters_run_here() ? max_ranks_asked() : 1);
    if (t.ranks > kPortableRanks && !cluster_fits(kernel, static_cast<int>(t.ranks), t.smem)) {
      t = plan<scalar_t>(d, out_channels, kPortableRanks);
    }
    if (t.tiles > 65535 || t.smem > max_shared_memory_per_block()) return false;
    if (dry_run) return true;

    Params<scalar_t> p{};
    p.input = input.const_data_ptr<scalar_t>();
    p.dw_weight = dw_weight.const_data_ptr<scalar_t>();
    p.dw_bias = optional_data<scalar_t>(dw_bias);
    p.pw_weight = pw_weight.const_data_ptr<scalar_t>();
    p.pw_bias = optional_data<scalar_t>(pw_bias);
    p.output = output.mutable_data_ptr<scalar_t>();
    p.in_h = static_cast<int>(d.in_h);
    p.in_w = static_cast<int>(d.in_w);
    p.out_w = static_cast<int>(d.out_w);
    p.pad_h = static_cast<int>(d.pad_h);
    p.pad_w = static_cast<int>(d.pad_w);
    p.in_channels = static_cast<int>(d.in_channels);
    p.multiplier = static_cast<int>(d.multiplier);
    p.mid_channels = static_cast<int>(d.out_channels);
    p.out_channels = static_cast<int>(out_channels);
    p.pixels = static_cast<int>(pixels);
    p.tile = static_cast<int>(t.tile);
    p.d_pitch = static_cast<int>(t.d_pitch);
    p.slice = static_cast<int>(t.slice);
    p.parts = static_cast<int>(t.parts);
    p.w_pitch = static_cast<int>(t.w_pitch);
    p.dw_filter = static_cast<int>(t.dw_filter);
    p.dw_bias_at = static_cast<int>(t.dw_bias_at);
    p.pw_bias_at = static_cast<int>(t.pw_bias_at);
    p.patch = static_cast<int>(t.patch);
    p.patch_pitch = static_cast<int>(t.patch_pitch);
    p.d_at = static_cast<int>(t.d_at);
    p.y_at = static_cast<int>(t.y_at);
    p.by_w_pitch = FastDivmod(p.w_pitch);
    p.by_patch_pitch = FastDivmod(p.patch_pitch);
    p.by_d_pitch = FastDivmod(p.d_pitch);
    p.by_out_w = FastDivmod(p.out_w);
    p.by_multiplier = FastDivmod(p.multiplier);
    const dim3 grid(static_cast<unsigned>(t.ranks), static_cast<unsigned>(t.tiles), static_cast<unsigned>(d.batch));
    launch(kernel, p, grid, static_cast<size_t>(t.smem), stream);
    return true;
  }
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
