// CUDA implementation of convops::conv2d_group_norm_scale_max_pool_clamp.
//
// The full convolution output never reaches global memory. GroupNorm's affine times scale is, per channel,
// z = (a_c * conv + b_c) * s_c (ATen's form: a_c = rstd * gamma_c, b_c = beta_c - a_c * mean) and for finite gamma the
// sign of a_c * s_c is that of gamma_c * s_c (rstd > 0), so the max pool of z is z of the window max of conv
// (a_c s_c >= 0) or of its min (a_c s_c < 0), and the clamp is monotone too. (An infinite gamma makes z NaN or +-Inf
// element by element; those channels pool the signs of conv instead, see affine_sign.) Hence two launches:
//   1. conv_pool_stats_kernel: conv tiles on tensor cores -> per-window max of sign_c * conv, and per-tile group
//      moments over the whole conv output (rows/cols the pool drops included);
//   2. finalize_kernel: merges the moments per (image, group) and writes affine + clamp of each window's value.
// Signs are read on the device, so nothing waits on the host. Under the path choice (cuda/path_choice.cuh) the op
// runs one of:
//   - "convops": those two kernels where they apply (the direct kernel for convolutions of few taps but where a
//     16-bit problem fills the window kernel's tiles, else the window kernel, else the tile kernel), else the mixed
//     path;
//   - "mixed": ATen's convolution (eager's own, without its bias, which the stats kernels add), then
//     pool_stats_from_conv_kernel or its NHWC twin (conv2d_group_norm_epilogue_kernel.cuh) in place of kernel 1: one
//     read of the convolution output, and the same finalize_kernel;
//   - "aten": the ATen chain (composite), also what float64 and problems past the kernels' index limits run.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "common/checks.h"
#include "conv2d_group_norm_scale_max_pool_clamp.h"
#include "cuda/conv2d_group_norm_direct_kernel.cuh"
#include "cuda/conv2d_group_norm_epilogue_kernel.cuh"
#include "cuda/conv2d_group_norm_finalize_kernel.cuh"
#include "cuda/conv2d_group_norm_tile_kernel.cuh"
#include "cuda/conv2d_group_norm_window_kernel.cuh"
#include "cuda/device_info.h"
#include "cuda/layout_transpose.cuh"
#include "cuda/path_choice.cuh"

namespace convops {
namespace {

using cuda::gn_pool::ConvPoolParams;
using cuda::gn_pool::kEpilogueLd;
using cuda::gn_pool::kThreads;
using cuda::gn_pool::kTileM;
using cuda::gn_pool::kTileN;
using cuda::gn_pool::MmaMode;

constexpr int kMaxSmemBytes = 200 * 1024;     // stay clear of the 227 KB opt-in limit
constexpr int kTargetSmemBytes = 64 * 1024;   // three CTAs per SM (the register budget of __launch_bounds__)

// The same chain through ATen ops, for what the fused kernel does not cover (float64, or patches too large for
// shared memory, e.g. huge dilations).
at::Tensor composite(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                     at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t num_groups,
                     const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias, double eps,
                     const at::Tensor& scale, at::IntArrayRef pool_kernel, std::optional<double> clamp_min,
                     std::optional<double> clamp_max, const ConvGnPoolGeometry& g) {
  at::Tensor y = at::convolution(input, weight, bias, stride, padding, dilation, false, {0, 0}, 1);
  y = at::group_norm(y, num_groups, gn_weight, gn_bias, eps);
  y = y * (g.scale_per_channel ? scale.reshape({1, -1, 1, 1}) : scale.reshape({1, 1, 1, 1}));
  y = at::max_pool2d(y, pool_kernel, pool_kernel);
  if (clamp_min.has_value() || clamp_max.has_value()) {
    y = at::clamp(y, clamp_min.has_value() ? std::optional<at::Scalar>(*clamp_min) : std::nullopt,
                  clamp_max.has_value() ? std::optional<at::Scalar>(*clamp_max) : std::nullopt);
  }
  return y.contiguous(input.suggest_memory_format());
}

// The groups a channel tile of kTileN channels meets at most (a group straddles a tile's edge on either side):
// the entries a tile has in the partials buffer, which every kernel 1 writes and finalize_kernel reads.
int local_groups(const ConvGnPoolGeometry& g) {
  return static_cast<int>(std::min<int64_t>(g.num_groups, (kTileN - 1) / g.channels_per_group + 2));
}

// Tile of the conv output per CTA: whole pool windows when they fit (then every window is finished by one CTA),
// tile_w <= 32 (the statistics give each column of the tile one lane) and no wider than the image, so narrow
// images waste few of the 128 pixel slots.
void choose_tile(const ConvGnPoolGeometry& g, ConvPoolParams& p) {
  const int width_cap = static_cast<int>(std::min<int64_t>(32, g.conv_w));
  p.tile_w = g.pool_w <= width_cap ? static_cast<int>(g.pool_w * (width_cap / g.pool_w)) : width_cap;
  const int height_cap = static_cast<int>(std::min<int64_t>(kTileM / p.tile_w, g.conv_h));
  p.tile_h = g.pool_h <= height_cap ? static_cast<int>(g.pool_h * (height_cap / g.pool_h)) : height_cap;
  p.atomic_pool = p.tile_w % g.pool_w != 0 || p.tile_h % g.pool_h != 0;
  p.tiles_w = static_cast<int>((g.conv_w + p.tile_w - 1) / p.tile_w);
  // Saturated rather than wrapped: fits_int32 then sends a problem with too many tiles to the composite path.
  const int64_t spatial_tiles = (g.conv_h + p.tile_h - 1) / p.tile_h * p.tiles_w;
  p.spatial_tiles = static_cast<int>(std::min<int64_t>(spatial_tiles, INT32_MAX));
  p.channel_tiles = static_cast<int>((g.out_channels + kTileN - 1) / kTileN);
  p.local_groups = local_groups(g);
}

// Shared-memory layout for chunk_channels input channels per main-loop step; returns the bytes it needs.
int layout_smem(const ConvGnPoolGeometry& g, int chunk_channels, int k_step, ConvPoolParams& p) {
  p.chunk_channels = chunk_channels;
  // In 64 bits until the size check: a huge dilation or stride must not wrap into a small patch.
  const int64_t patch_h = (p.tile_h - 1) * g.stride_h + (g.kernel_h - 1) * g.dilation_h + 1;
  const int64_t patch_w = (p.tile_w - 1) * g.stride_w + (g.kernel_w - 1) * g.dilation_w + 1;
  if (patch_h > kMaxSmemBytes / 4 || patch_w > kMaxSmemBytes / 4) return INT32_MAX;
  // chunk_channels planes of input and one plane of zeros for the K padding (see the kernel's setup).
  const int64_t patch = ((static_cast<int64_t>(chunk_channels) + 1) * patch_h * patch_w + 3) / 4 * 4;
  if (patch * 4 > kMaxSmemBytes) return INT32_MAX;
  p.patch_h = static_cast<int>(patch_h);
  p.patch_w = static_cast<int>(patch_w);
  p.k_chunk = static_cast<int>(chunk_channels * g.kernel_h * g.kernel_w);
  p.k_chunk_padded = (p.k_chunk + k_step - 1) / k_step * k_step;
  p.weight_ld = p.k_chunk_padded + 4;  // = 4 mod 8 floats: B-fragment loads hit 32 distinct banks
  p.smem_koff = kTileN * p.weight_ld;
  p.smem_patch = (p.smem_koff + p.k_chunk_padded + 3) / 4 * 4;
  p.smem_small = p.smem_patch + std::max(static_cast<int>(patch), kTileN * kEpilogueLd);
  const int64_t bytes = (static_cast<int64_t>(p.smem_small) + cuda::gn_pool::kSmallFloats) * 4;
  return static_cast<int>(std::min<int64_t>(bytes, INT32_MAX));
}

// The largest channel chunk under the target size (at least one channel); 0 when even one does not fit.
int choose_chunk(const ConvGnPoolGeometry& g, int k_step, ConvPoolParams& p) {
  int chunk = static_cast<int>(std::min<int64_t>(g.in_channels, 256));
  while (chunk > 1 && layout_smem(g, chunk, k_step, p) > kTargetSmemBytes) chunk = (chunk + 1) / 2;
  const int bytes = layout_smem(g, chunk, k_step, p);
  return bytes <= std::min(kMaxSmemBytes, cuda::max_shared_memory_per_block()) ? bytes : 0;
}

// The divisors of the tile kernel's index arithmetic (ConvPoolParams), once the tile and the chunk are chosen.
void set_divisors(ConvPoolParams& p) {
  using cuda::FastDivmod;
  p.patch_h_div = FastDivmod(p.patch_h);
  p.chunk_channels_div = FastDivmod(p.chunk_channels);
  p.patch_w_div = FastDivmod(p.patch_w);
  p.k_chunk_div = FastDivmod(p.k_chunk);
  p.taps_div = FastDivmod(p.kernel_h * p.kernel_w);
  p.kernel_w_div = FastDivmod(p.kernel_w);
  // A tile of tile_h rows meets tile_h / pool_h windows of a column when windows do not straddle tiles, and at most
  // (tile_h - 1) / pool_h + 2 when they do (also when a window is taller than the tile); the same across.
  const auto windows_met = [&](int tile, int pool, int pooled) {
    return std::min(p.atomic_pool ? (tile - 1) / pool + 2 : tile / pool, pooled);
  };
  const int windows_h = windows_met(p.tile_h, p.pool_h, p.pooled_h);
  const int windows_w = windows_met(p.tile_w, p.pool_w, p.pooled_w);
  p.tile_windows_w_div = FastDivmod(std::max(windows_w, 1));
  p.tile_windows_div = FastDivmod(std::max(windows_h * windows_w, 1));
  p.pooled_w_div = FastDivmod(std::max(p.pooled_w, 1));
  p.tile_w_div = FastDivmod(p.tile_w);
}

// Which fused kernels may run (CONVOPS_GN_KERNEL, read each call and part of the problem's key; for tests and for
// timing the kernels and paths against each other). Normally the direct kernel where it applies (see
// window_preferred), else the window kernel, else the tile kernel; =mma leaves the direct kernel out (the tensor-core
// kernels), =tile the window kernel too, =none all three, so that the convops path is the mixed one.
constexpr const char* kFusedSwitch = "CONVOPS_GN_KERNEL";
// The mixed path's convolution layout, forced (path_choice.cuh, layout_for): input or channels_last.
constexpr const char* kMixedLayoutSwitch = "CONVOPS_GN_MIXED_LAYOUT";
enum class FusedChoice { kAny, kMma, kTile, kNone };

FusedChoice fused_choice(const char* env) {
  if (env == nullptr) return FusedChoice::kAny;
  if (std::strcmp(env, "mma") == 0) return FusedChoice::kMma;
  if (std::strcmp(env, "tile") == 0) return FusedChoice::kTile;
  if (std::strcmp(env, "none") == 0) return FusedChoice::kNone;
  return FusedChoice::kAny;
}

// The window kernel (conv2d_group_norm_window_kernel.cuh) where it applies: stride 1, dilation 1, a 3x3 filter,
// square 2x2 or 4x4 pools, and its weights, patch and moments in at most kWindowSmemBytes (one or two CTAs an SM).
// Sets its tiling (16 x 16 tiles, whole pool windows) and returns its shared-memory bytes, or returns 0.
constexpr int kWindowSmemBytes = 200 * 1024;

template <MmaMode kMode, int kPool>
int window_smem_bytes(int64_t in_channels) {
  return cuda::gn_pool::window::Layout<kMode, 3, 3, kPool>(static_cast<int>(in_channels)).total;
}

int plan_window_kernel(const ConvGnPoolGeometry& g, MmaMode mode, FusedChoice choice, ConvPoolParams& p) {
  if (choice != FusedChoice::kAny && choice != FusedChoice::kMma) return 0;
  if (g.stride_h != 1 || g.stride_w != 1 || g.dilation_h != 1 || g.dilation_w != 1) return 0;
  if (g.kernel_h != 3 || g.kernel_w != 3 || g.pool_h != g.pool_w || (g.pool_h != 2 && g.pool_h != 4)) return 0;
  if (g.in_channels > 256) return 0;  // (before Layout's int arithmetic; the size check below is far tighter)
  const bool half = mode != MmaMode::kTf32x3;
  const int bytes = g.pool_h == 4 ? (half ? window_smem_bytes<MmaMode::kBf16, 4>(g.in_channels)
                                          : window_smem_bytes<MmaMode::kTf32x3, 4>(g.in_channels))
                                  : (half ? window_smem_bytes<MmaMode::kBf16, 2>(g.in_channels)
                                          : window_smem_bytes<MmaMode::kTf32x3, 2>(g.in_channels));
  // The device's opt-in limit too: 227 KB on sm_90, 163 KB on sm_80, 99 KB on sm_86 / sm_89, where a larger request
  // would fail at launch instead of falling back to the tile kernel.
  if (bytes > std::min(kWindowSmemBytes, cuda::max_shared_memory_per_block())) return 0;
  using cuda::gn_pool::window::kTile;
  p.tile_h = p.tile_w = kTile;
  p.atomic_pool = false;
  p.tiles_w = static_cast<int>((g.conv_w + kTile - 1) / kTile);
  const int64_t spatial_tiles = (g.conv_h + kTile - 1) / kTile * p.tiles_w;
  p.spatial_tiles = static_cast<int>(std::min<int64_t>(spatial_tiles, INT32_MAX));
  p.channel_tiles = static_cast<int>((g.out_channels + kTileN - 1) / kTileN);
  p.local_groups = local_groups(g);
  return bytes;
}

// The kernels index in int where a value is bounded by these (64-bit only where offsets reach tensors): image
// coordinates (ih = oh * stride - pad + r), channel counts and loop bounds with a CTA's stride added to them. Larger
// problems take the composite path.
constexpr int64_t kIntLimit = int64_t{1} << 30;  // leaves headroom for a loop's last increment

// The convolution's extents, which set_conv_params narrows to int (also for the direct kernel).
bool conv_fits_int32(const ConvGnPoolGeometry& g) {
  return g.in_h + 2 * g.pad_h < kIntLimit && g.in_w + 2 * g.pad_w < kIntLimit && g.stride_h < kIntLimit &&
         g.stride_w < kIntLimit && g.dilation_h < kIntLimit && g.dilation_w < kIntLimit &&
         g.in_channels < kIntLimit && g.out_channels < kIntLimit && g.batch < kIntLimit;
}

bool fits_int32(const ConvGnPoolGeometry& g, const ConvPoolParams& p) {
  constexpr int64_t kLimit = kIntLimit;
  // Factors first, so that no product below overflows int64.
  return conv_fits_int32(g) && g.batch * g.num_groups < kLimit &&
         g.batch * p.spatial_tiles < kLimit && int64_t{p.channel_tiles} * p.spatial_tiles < kLimit &&
         g.pooled_h * g.pooled_w < kLimit &&
         g.out_channels * (g.pooled_h * g.pooled_w) < kLimit &&
         p.channel_tiles <= 65535;  // the tile kernel's gridDim.y
}

// Persistent grid: as many CTAs as fit on the device at once (per channel tile), each looping over (image, spatial
// tile) items.
template <typename Kernel>
dim3 persistent_grid(Kernel kernel, int threads, const ConvPoolParams& p, int64_t batch, int smem_bytes) {
  const int per_sm = cuda::blocks_per_sm(kernel, threads, smem_bytes);
  const int64_t items = batch * p.spatial_tiles;
  const int64_t resident =
      std::max<int64_t>(1, static_cast<int64_t>(cuda::multiprocessor_count()) * std::max(per_sm, 1) /
                               p.channel_tiles);
  return dim3(static_cast<unsigned>(std::min(items, resident)), p.channel_tiles);
}

// The finalize kernel: a CTA row per (image, group), split along the pooled plane into as many CTAs as give about
// four an SM where images x groups are few (each merges the group's moments itself: a float4 per slot of the
// group's channel tiles and bands, a few KB where the fused tile kernel leaves hundreds of bands). One CTA a
// group took 12 us on 8 images of 8 groups of 8 x 32 x 32 windows, 64 CTAs on 132 SMs, each walking its channels in
// turn (H200, 2026-11-28 16:3x UTC, tools/probe/column_kernels.py).
template <typename T>
void launch_finalize(const ConvPoolParams& p, const ConvGnPoolGeometry& g, cudaStream_t stream) {
  const int64_t rows = g.batch * g.num_groups;
  const int64_t most = cuda::ceil_div<int64_t>(g.pooled_h * g.pooled_w, kThreads);  // every CTA has windows
  const int64_t wanted = cuda::ceil_div<int64_t>(4 * cuda::multiprocessor_count(), rows);
  const auto splits = static_cast<unsigned>(std::clamp<int64_t>(wanted, 1, std::min<int64_t>(most, 65535)));
  cuda::gn_pool::finalize_kernel<T><<<dim3(static_cast<unsigned>(rows), splits), kThreads, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, MmaMode kMode>
void launch(ConvPoolParams& p, const ConvGnPoolGeometry& g, bool window, int smem_bytes, cudaStream_t stream) {
  if (window) {
    auto* kernel = g.pool_h == 4 ? cuda::gn_pool::window::conv_pool_window_kernel<T, kMode, 3, 3, 4>
                                 : cuda::gn_pool::window::conv_pool_window_kernel<T, kMode, 3, 3, 2>;
    cuda::allow_dynamic_shared_memory(kernel, smem_bytes);
    constexpr int threads = cuda::gn_pool::window::Warps<kMode>::kThreads;
    kernel<<<persistent_grid(kernel, threads, p, g.batch, smem_bytes), threads, smem_bytes, stream>>>(p);
  } else {
    auto* kernel = cuda::gn_pool::conv_pool_stats_kernel<T, kMode>;
    cuda::allow_dynamic_shared_memory(kernel, smem_bytes);
    kernel<<<persistent_grid(kernel, kThreads, p, g.batch, smem_bytes), kThreads, smem_bytes, stream>>>(p);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_finalize<T>(p, g, stream);
}

// The per-channel vectors as dense 1-D tensors (tiny; no host synchronization), alive while the kernels are queued.
struct ChannelVectors {
  at::Tensor bias, gamma, beta, scale;
};

ChannelVectors channel_vectors(const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& gn_weight,
                               const std::optional<at::Tensor>& gn_bias, const at::Tensor& scale) {
  const auto flat = [](const std::optional<at::Tensor>& t) {
    return t.has_value() && t->defined() ? t->reshape({-1}).contiguous() : at::Tensor();
  };
  return {flat(bias), flat(gn_weight), flat(gn_bias), flat(scale)};
}

const void* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr() : nullptr;
}

// What both paths' kernels read of the problem beyond the convolution's input and weight (the conv bias: the fused
// kernels' epilogue adds it, the mixed path's stats kernels too), and all that finalize_kernel reads besides the
// extremum and partials buffers (and the tiling: channel_tiles, spatial_tiles, local_groups, ext_w).
void set_pool_norm_params(ConvPoolParams& p, const ConvGnPoolGeometry& g, const ChannelVectors& v, double eps,
                          std::optional<double> clamp_min, std::optional<double> clamp_max, at::Tensor& out) {
  p.bias = data_or_null(v.bias);
  p.gamma = data_or_null(v.gamma);
  p.beta = data_or_null(v.beta);
  p.scale = v.scale.const_data_ptr();
  for (int d = 0; d < 4; ++d) p.out_stride[d] = out.stride(d);
  p.batch = static_cast<int>(g.batch);
  p.out_channels = static_cast<int>(g.out_channels);
  p.conv_h = static_cast<int>(g.conv_h);
  p.conv_w = static_cast<int>(g.conv_w);
  p.pool_h = static_cast<int>(g.pool_h);
  p.pool_w = static_cast<int>(g.pool_w);
  p.pooled_h = static_cast<int>(g.pooled_h);
  p.pooled_w = static_cast<int>(g.pooled_w);
  p.pooled_w_div = cuda::FastDivmod(std::max(p.pooled_w, 1));
  p.channels_per_group = static_cast<int>(g.channels_per_group);
  p.num_groups = static_cast<int>(g.num_groups);
  p.scale_per_channel = g.scale_per_channel;
  p.output = out.data_ptr();
  p.eps = static_cast<float>(eps);
  p.has_lo = clamp_min.has_value();
  p.has_hi = clamp_max.has_value();
  p.lo = p.has_lo ? static_cast<float>(*clamp_min) : 0.f;
  p.hi = p.has_hi ? static_cast<float>(*clamp_max) : 0.f;
}

// The buffers between kernel 1 and finalize_kernel for p's tiling and ext_w, their pointers set in p (the tensors
// stay alive while the kernels are queued).
struct Intermediates {
  at::Tensor extremum, partials;
};

Intermediates make_intermediates(ConvPoolParams& p, const ConvGnPoolGeometry& g, const at::TensorOptions& options) {
  Intermediates t{
      at::empty({g.batch, g.out_channels, g.pooled_h, p.ext_w}, options.dtype(at::kInt)),
      at::empty({g.batch * p.channel_tiles * p.spatial_tiles * p.local_groups * 4}, options.dtype(at::kFloat))};
  p.extremum = reinterpret_cast<uint32_t*>(t.extremum.data_ptr<int32_t>());
  p.partials = reinterpret_cast<float4*>(t.partials.data_ptr<float>());
  return t;
}

// The convolution's operands and geometry, for the kernels that compute it (the fused ones).
void set_conv_params(ConvPoolParams& p, const ConvGnPoolGeometry& g, const at::Tensor& input,
                     const at::Tensor& weight) {
  p.input = input.const_data_ptr();
  p.weight = weight.const_data_ptr();
  for (int d = 0; d < 4; ++d) {
    p.in_stride[d] = input.stride(d);
    p.w_stride[d] = weight.stride(d);
  }
  p.in_channels = static_cast<int>(g.in_channels);
  p.in_h = static_cast<int>(g.in_h);
  p.in_w = static_cast<int>(g.in_w);
  p.kernel_h = static_cast<int>(g.kernel_h);
  p.kernel_w = static_cast<int>(g.kernel_w);
  p.stride_h = static_cast<int>(g.stride_h);
  p.stride_w = static_cast<int>(g.stride_w);
  p.pad_h = static_cast<int>(g.pad_h);
  p.pad_w = static_cast<int>(g.pad_w);
  p.dilation_h = static_cast<int>(g.dilation_h);
  p.dilation_w = static_cast<int>(g.dilation_w);
}

// The two fused kernels (conv tile -> pooled extrema + group partials; merge -> affine -> clamp) into `out`.
void run_fused(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
               const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias, double eps,
               const at::Tensor& scale, std::optional<double> clamp_min, std::optional<double> clamp_max,
               const ConvGnPoolGeometry& g, ConvPoolParams p, bool window, int smem_bytes, MmaMode mode,
               at::Tensor& out) {
  const ChannelVectors v = channel_vectors(bias, gn_weight, gn_bias, scale);
  set_pool_norm_params(p, g, v, eps, clamp_min, clamp_max, out);
  // The window kernel stores a lane's windows of a row as one 8- or 16-byte vector: rows of a multiple of 4 codes.
  p.ext_w = static_cast<int>(window ? (g.pooled_w + 3) / 4 * 4 : g.pooled_w);
  const Intermediates buffers = make_intermediates(p, g, input.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  if (p.atomic_pool) {
    C10_CUDA_CHECK(cudaMemsetAsync(p.extremum, 0, buffers.extremum.numel() * sizeof(uint32_t), stream));
  }
  set_conv_params(p, g, input, weight);
  p.channels_fastest = input.stride(1) == 1 && p.chunk_channels > 1;
  if (!window) set_divisors(p);

  if (mode == MmaMode::kTf32x3) {
    launch<float, MmaMode::kTf32x3>(p, g, window, smem_bytes, stream);
  } else if (mode == MmaMode::kBf16) {
    launch<c10::BFloat16, MmaMode::kBf16>(p, g, window, smem_bytes, stream);
  } else {
    launch<c10::Half, MmaMode::kFp16>(p, g, window, smem_bytes, stream);
  }
}

// The split of the convolution output that the mixed path's stats kernels and the direct kernel share: kTileN-channel
// tiles, and bands of whole pool-window rows, as many as fill the SMs once with the kernel's CTAs (ctas_per_sm: a
// split sized for 4 CTAs an SM of a kernel that runs 2 ran two waves of shorter CTAs, 15.2 against 12.9 us on a
// 32-image block, H200 2026-11-28), but none so thin that a CTA's threads run out of windows: `sharing` threads share a
// window (a lane each), so a band holds at least kThreads / sharing windows.
struct BandTiling {
  int64_t channel_tiles, bands, band_windows;
};

// one_wave: at most as many CTAs as fit at once where the images and channel tiles alone do not exceed that (for the
// direct kernel's one pass), rather than at least as many.
BandTiling band_tiling(const ConvGnPoolGeometry& g, int64_t sharing, int ctas_per_sm, bool one_wave = false) {
  const int64_t channel_tiles = cuda::ceil_div<int64_t>(g.out_channels, kTileN);
  if (g.pooled_h == 0 || g.pooled_w == 0) return {channel_tiles, 1, g.pooled_h};  // (not reached: pool <= conv)
  const int64_t slots = int64_t{ctas_per_sm} * cuda::multiprocessor_count(), images = g.batch * channel_tiles;
  const int64_t wanted = one_wave ? slots / images : cuda::ceil_div<int64_t>(slots, images);
  const int64_t for_grid = cuda::ceil_div<int64_t>(g.pooled_h, std::clamp<int64_t>(wanted, 1, g.pooled_h));
  const int64_t windows_a_lane = cuda::ceil_div<int64_t>(kThreads, sharing);
  const int64_t for_threads = cuda::ceil_div<int64_t>(windows_a_lane, g.pooled_w);
  const int64_t band_windows = std::min(std::max(for_grid, for_threads), g.pooled_h);
  return {channel_tiles, cuda::ceil_div<int64_t>(g.pooled_h, band_windows), band_windows};
}

// The stats kernels' split: in NCHW a group's channels of a tile share the threads; in NHWC a tile's channels,
// `vector` a thread (kCtasPerSm an SM, kVectorCtasPerSm for the NHWC kernel in vectors of 4).
BandTiling mixed_tiling(const ConvGnPoolGeometry& g, bool nhwc, int vector) {
  using namespace cuda::gn_pool::epilogue;
  const int64_t sharing = std::min<int64_t>(nhwc ? g.out_channels : g.channels_per_group, kTileN) / vector;
  return band_tiling(g, sharing, vector > 1 ? kVectorCtasPerSm : kCtasPerSm);
}

// f(std::integral_constant<int, P>) for square P x P windows of the sides whose kernels have their loads unrolled
// (P = 2, 3, 4), f(std::integral_constant<int, 0>) for the rest, which read the extents at run time.
template <typename F>
void with_pool_side(const ConvGnPoolGeometry& g, const F& f) {
  switch (g.pool_h == g.pool_w ? g.pool_h : 0) {
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    default: f(std::integral_constant<int, 0>{}); break;
  }
}

// The mixed path's kernels index in int where these bound a value (64 bits where offsets reach tensors); larger
// problems take the ATen chain.
bool mixed_fits(const ConvGnPoolGeometry& g) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  // A group's (channel, cell) pairs of a band, at most kTileN channels: its windows, the cells right of them, and
  // (the last band) the rows below every window; computed only once the extents are bounded (no int64 overflow).
  const auto per_channel = [&] {
    return kTileN * std::max({g.pooled_h * g.pooled_w, g.conv_h * std::min(g.pool_w, g.conv_w),
                              std::min(g.pool_h, g.conv_h) * g.conv_w});
  };
  const int64_t most_bands = std::max<int64_t>(g.pooled_h, 1);
  // In this order: each product's factors are bounded by the checks before it (no int64 overflow).
  return g.batch < kLimit && g.out_channels < kLimit && g.conv_h < kLimit && g.conv_w < kLimit &&
         g.pool_h * g.pool_w < kLimit && g.pooled_h * g.pooled_w < kLimit / kTileN && per_channel() < kLimit &&
         g.batch * g.num_groups < kLimit &&
         most_bands < kLimit / (g.batch * cuda::ceil_div<int64_t>(g.out_channels, kTileN));  // the grid
}

// The mixed path into `out`: ATen's convolution without its bias (as the ATen chain and eager run it), then
// pool_stats_from_conv_kernel (NCHW) or pool_stats_from_nhwc_conv_kernel (channels-last, as ATen's convolution
// returns it for a channels-last input), which add the bias to each value they read, and finalize_kernel.
template <typename T>
void run_mixed(const at::Tensor& conv_output, const std::optional<at::Tensor>& bias,
               const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias, double eps,
               const at::Tensor& scale, std::optional<double> clamp_min, std::optional<double> clamp_max,
               const ConvGnPoolGeometry& g, at::Tensor& out) {
  const bool nhwc = !conv_output.is_contiguous() && conv_output.is_contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor conv = nhwc ? conv_output : conv_output.contiguous();
  // NHWC: 4 channels a thread where every pixel's channels are whole aligned vectors of 4.
  constexpr int kVector = 4;
  const bool vectors = nhwc && g.out_channels % kVector == 0 &&
                       reinterpret_cast<uintptr_t>(conv.const_data_ptr()) % (kVector * sizeof(T)) == 0;
  const BandTiling t = mixed_tiling(g, nhwc, vectors ? kVector : 1);
  const ChannelVectors v = channel_vectors(bias, gn_weight, gn_bias, scale);
  ConvPoolParams p{};
  set_pool_norm_params(p, g, v, eps, clamp_min, clamp_max, out);
  p.channel_tiles = static_cast<int>(t.channel_tiles);
  p.spatial_tiles = static_cast<int>(t.bands);
  p.local_groups = local_groups(g);
  p.ext_w = static_cast<int>(g.pooled_w);
  const Intermediates buffers = make_intermediates(p, g, conv.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const auto grid = static_cast<unsigned>(g.batch * t.channel_tiles * t.bands);
  const auto* data = static_cast<const T*>(conv.const_data_ptr());
  const auto launch_stats = [&](auto pool) {
    constexpr int kPool = decltype(pool)::value;
    if (vectors) {
      cuda::gn_pool::epilogue::pool_stats_from_nhwc_conv_kernel<T, kPool, kVector><<<grid, kThreads, 0, stream>>>(
          p, data, static_cast<int>(t.band_windows));
    } else if (nhwc) {
      cuda::gn_pool::epilogue::pool_stats_from_nhwc_conv_kernel<T, kPool, 1><<<grid, kThreads, 0, stream>>>(
          p, data, static_cast<int>(t.band_windows));
    } else {
      cuda::gn_pool::epilogue::pool_stats_from_conv_kernel<T, kPool><<<grid, kThreads, 0, stream>>>(
          p, data, static_cast<int>(t.band_windows));
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  with_pool_side(g, launch_stats);
  launch_finalize<T>(p, g, stream);
}

// The direct kernel (conv2d_group_norm_direct_kernel.cuh) for convolutions of at most kMaxTaps taps: the NHWC stats
// kernel's split (4 channels a thread where the output channels are whole vectors of 4, else 1) in at most one wave
// of CTAs where the images allow (then one pass: run_direct), its bands thinned until their staged input rows fit
// kDirectSmemBytes (images a few thousand pixels wide), under the mixed path's index limits. smem_bytes == 0: it does
// not apply.
constexpr int64_t kDirectSmemBytes = 96 * 1024;  // two CTAs an SM (its launch bounds), with their static summaries

struct DirectPlan {
  int smem_bytes = 0;
  int vector = 1;
  BandTiling tiling{};
  int patch_h = 0, patch_w = 0;  // the staged input rows' extent (the largest band's)
};

DirectPlan plan_direct_kernel(const ConvGnPoolGeometry& g, FusedChoice choice) {
  namespace direct = cuda::gn_pool::direct;
  DirectPlan plan;
  if (choice != FusedChoice::kAny || g.in_channels * g.kernel_h * g.kernel_w > direct::kMaxTaps ||
      !conv_fits_int32(g) || !mixed_fits(g)) {
    return plan;
  }
  // 8 channels a thread on 2 x 2 windows (16 values; a 4 x 4 window of 8 would not fit the registers): a staged value
  // feeds 8 FMAs instead of 4.
  plan.vector = g.pool_h == 2 && g.pool_w == 2 && g.out_channels % 8 == 0 ? 8 : g.out_channels % 4 == 0 ? 4 : 1;
  BandTiling t = band_tiling(g, std::min<int64_t>(g.out_channels, kTileN) / plan.vector, direct::kCtasPerSm, true);
  // At most the padded input's extents (conv_w = (in_w + 2 pad - span) / stride + 1), so below 2^30 (conv_fits_int32),
  // and their product is formed only for extents under the byte limit's (no int64 overflow).
  const int64_t patch_w = (g.conv_w - 1) * g.stride_w + (g.kernel_w - 1) * g.dilation_w + 1;
  const auto patch_h = [&](int64_t band_windows) {  // the last band also holds the rows below every window
    const int64_t conv_rows = std::min(band_windows * g.pool_h + g.conv_h - g.pooled_h * g.pool_h, g.conv_h);
    return (conv_rows - 1) * g.stride_h + (g.kernel_h - 1) * g.dilation_h + 1;
  };
  // The kernel's static arrays: its summaries and the one pass's groups' (mean, rstd), rounded up to 16 bytes as ptxas
  // lays them out (12,816 bytes for 4 channels a thread, 3,600 for 1).
  const int64_t static_bytes = (int64_t{kThreads} * plan.vector * 3 * 4 + (kTileN + 1) * 8 + 15) / 16 * 16;
  const int64_t limit = std::min(kDirectSmemBytes, cuda::max_shared_memory_per_block() - static_bytes);
  const auto bytes = [&](int64_t band_windows) {
    const int64_t rows = patch_h(band_windows);
    return rows > limit || patch_w > limit ? INT64_MAX : direct::smem_bytes(g.in_channels, rows, patch_w);
  };
  while (t.band_windows > 1 && bytes(t.band_windows) > limit) t.band_windows = (t.band_windows + 1) / 2;
  if (bytes(t.band_windows) > limit) return plan;
  t.bands = cuda::ceil_div<int64_t>(g.pooled_h, t.band_windows);
  plan.smem_bytes = static_cast<int>(bytes(t.band_windows));
  plan.tiling = t;
  plan.patch_h = static_cast<int>(patch_h(t.band_windows));
  plan.patch_w = static_cast<int>(patch_w);
  return plan;
}

// The direct kernel into `out`: in one pass where its grid fits on the device at once (a cooperative launch), else
// followed by finalize_kernel.
template <typename T>
void run_direct(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                const std::optional<at::Tensor>& gn_weight, const std::optional<at::Tensor>& gn_bias, double eps,
                const at::Tensor& scale, std::optional<double> clamp_min, std::optional<double> clamp_max,
                const ConvGnPoolGeometry& g, const DirectPlan& plan, at::Tensor& out) {
  const ChannelVectors v = channel_vectors(bias, gn_weight, gn_bias, scale);
  ConvPoolParams p{};
  set_pool_norm_params(p, g, v, eps, clamp_min, clamp_max, out);
  set_conv_params(p, g, input, weight);
  p.channel_tiles = static_cast<int>(plan.tiling.channel_tiles);
  p.spatial_tiles = static_cast<int>(plan.tiling.bands);
  p.local_groups = local_groups(g);
  p.ext_w = static_cast<int>(g.pooled_w);
  p.patch_h = plan.patch_h;
  p.patch_w = plan.patch_w;
  p.patch_h_div = cuda::FastDivmod(p.patch_h);
  p.patch_w_div = cuda::FastDivmod(p.patch_w);
  const Intermediates buffers = make_intermediates(p, g, input.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t grid = g.batch * plan.tiling.channel_tiles * plan.tiling.bands;
  int band_windows = static_cast<int>(plan.tiling.band_windows);
  bool one_pass = false;
  with_pool_side(g, [&](auto pool) {
    using cuda::gn_pool::direct::conv_pool_direct_kernel;
    constexpr int kPool = decltype(pool)::value;
    // The kernel for plan.vector channels a thread, in one pass or not.
    const auto pick = [&](auto one_pass) {
      constexpr bool kOnePass = decltype(one_pass)::value;
      if constexpr (kPool == 2) {
        if (plan.vector == 8) return conv_pool_direct_kernel<T, kPool, 8, kOnePass>;
      }
      return plan.vector == 4 ? conv_pool_direct_kernel<T, kPool, 4, kOnePass>
                              : conv_pool_direct_kernel<T, kPool, 1, kOnePass>;
    };
    auto* single = pick(std::true_type{});
    cuda::allow_dynamic_shared_memory(single, plan.smem_bytes);
    // A cooperative launch: every CTA of the grid resident at once, so that its grid barrier cannot wait forever.
    const bool cooperative = cuda::device_attribute<cudaDevAttrCooperativeLaunch>() != 0;
    one_pass = cooperative &&
               grid <= int64_t{cuda::blocks_per_sm(single, kThreads, plan.smem_bytes)} * cuda::multiprocessor_count();
    if (one_pass) {
      void* args[] = {&p, &band_windows};
      const cudaError_t launched = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(single), dim3(grid),
                                                               dim3(kThreads), args, plan.smem_bytes, stream);
      if (launched != cudaErrorCooperativeLaunchTooLarge) {
        C10_CUDA_CHECK(launched);
        return;
      }
      // Fewer SMs than the occupancy query assumed (a partitioned device): two passes instead.
      (void)cudaGetLastError();
      one_pass = false;
    }
    auto* first = pick(std::false_type{});
    cuda::allow_dynamic_shared_memory(first, plan.smem_bytes);
    first<<<static_cast<unsigned>(grid), kThreads, plan.smem_bytes, stream>>>(p, band_windows);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  if (!one_pass) launch_finalize<T>(p, g, stream);
}

at::Tensor conv2d_group_norm_scale_max_pool_clamp_cuda(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
    const std::optional<at::Tensor>& gn_bias, double eps, const at::Tensor& scale, at::IntArrayRef pool_kernel,
    std::optional<double> clamp_min, std::optional<double> clamp_max) {
  const auto g = check_conv2d_group_norm_scale_max_pool_clamp(input, weight, bias, stride, padding, dilation,
                                                              num_groups, gn_weight, gn_bias, eps, scale, pool_kernel);
  c10::cuda::CUDAGuard guard(input.device());
  if (g.batch == 0) return empty_output(input, {0, g.out_channels, g.pooled_h, g.pooled_w});

  const auto dtype = input.scalar_type();
  // fp32 runs 3xTF32 in both precision modes (see MmaMode): eager's conv here is fp32-accurate even with TF32 allowed.
  const MmaMode mode = dtype == at::kHalf       ? MmaMode::kFp16
                       : dtype == at::kBFloat16 ? MmaMode::kBf16
                                                : MmaMode::kTf32x3;
  const int k_step = mode == MmaMode::kTf32x3 ? 8 : 16;
  const cuda::EnvSwitch fused_switch = cuda::env_switch(kFusedSwitch);
  const FusedChoice choice = dtype == at::kDouble ? FusedChoice::kNone : fused_choice(fused_switch.value);
  ConvPoolParams p{};
  const int window_bytes = choice != FusedChoice::kNone ? plan_window_kernel(g, mode, choice, p) : 0;
  // 16-bit problems that the window kernel takes in whole 64-channel tiles, on 3 or more input channels (the K it
  // pads to 8 channels) and 4 x 4 windows, keep it over the direct kernel: its MMAs then waste little (3 channels in,
  // 64 out in bf16: 0.0516 against 0.0640 ms; with 16 outputs the direct kernel led 0.0332 against 0.0528; H200,
  // 2026-11-28, tools/probe/gn_direct_kernel.py). Only where measured: fewer input channels, 2 x 2 windows and other
  // channel counts are not, and stay on the direct kernel.
  const bool window_preferred = window_bytes > 0 && mode != MmaMode::kTf32x3 && g.out_channels % kTileN == 0 &&
                                g.in_channels >= 3 && g.pool_h == 4;
  const DirectPlan direct = window_preferred ? DirectPlan{} : plan_direct_kernel(g, choice);
  const bool any_mma = direct.smem_bytes == 0 && choice != FusedChoice::kNone;
  const bool window = any_mma && window_bytes > 0;
  if (!window) choose_tile(g, p);
  const int smem_bytes = window ? window_bytes : any_mma ? choose_chunk(g, k_step, p) : 0;
  const bool fused_applies = direct.smem_bytes != 0 || (smem_bytes != 0 && fits_int32(g, p));
  const bool mixed_applies = dtype != at::kDouble && mixed_fits(g);

  const auto aten = [&] {
    return composite(input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps, scale,
                     pool_kernel, clamp_min, clamp_max, g);
  };
  const auto fused = [&] {
    at::Tensor out = empty_output(input, {g.batch, g.out_channels, g.pooled_h, g.pooled_w});
    if (direct.smem_bytes == 0) {
      run_fused(input, weight, bias, gn_weight, gn_bias, eps, scale, clamp_min, clamp_max, g, p, window, smem_bytes,
                mode, out);
    } else if (dtype == at::kBFloat16) {
      run_direct<c10::BFloat16>(input, weight, bias, gn_weight, gn_bias, eps, scale, clamp_min, clamp_max, g, direct,
                                out);
    } else if (dtype == at::kHalf) {
      run_direct<c10::Half>(input, weight, bias, gn_weight, gn_bias, eps, scale, clamp_min, clamp_max, g, direct, out);
    } else {
      run_direct<float>(input, weight, bias, gn_weight, gn_bias, eps, scale, clamp_min, clamp_max, g, direct, out);
    }
    return out;
  };
  // The mixed path with ATen's convolution of `x`: the input, or a channels-last copy of it, on which cuDNN runs its
  // NHWC kernels without the NCHW -> NHWC and NHWC -> NCHW copies it makes around them for an NCHW input (the larger
  // one, of the convolution's output, is what Inductor's channels-last graph saves), and the NHWC stats kernel reads
  // the output where it lies. The output is written in the input's layout either way. The conv bias goes to the stats
  // kernels (run_mixed), not to ATen, which would add it in a pass of its own over the convolution output.
  const auto mixed_on = [&](const at::Tensor& x) {
    at::Tensor out = empty_output(input, {g.batch, g.out_channels, g.pooled_h, g.pooled_w});
    const at::Tensor conv = at::convolution(x, weight, std::nullopt, stride, padding, dilation, false, {0, 0}, 1);
    if (dtype == at::kBFloat16) {
      run_mixed<c10::BFloat16>(conv, bias, gn_weight, gn_bias, eps, scale, clamp_min, clamp_max, g, out);
    } else if (dtype == at::kHalf) {
      run_mixed<c10::Half>(conv, bias, gn_weight, gn_bias, eps, scale, clamp_min, clamp_max, g, out);
    } else {
      run_mixed<float>(conv, bias, gn_weight, gn_bias, eps, scale, clamp_min, clamp_max, g, out);
    }
    return out;
  };
  // The switches that restrict the kernels are part of the key: a decision made without them is not reused with them.
  const cuda::EnvSwitch layout_switch = cuda::env_switch(kMixedLayoutSwitch);
  const auto problem_args = [&](const char* name) {
    return cuda::problem_key(name, input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps,
                             scale, pool_kernel, clamp_min, clamp_max, fused_switch, layout_switch);
  };
  // Which layout the mixed path's convolution runs in: a problem of its own under "auto" (path_choice.cuh,
  // run_in_chosen_layout; CONVOPS_GN_MIXED_LAYOUT=input|channels_last forces one).
  const auto mixed = [&] {
    return cuda::run_in_chosen_layout(
        problem_args("convops::conv2d_group_norm_scale_max_pool_clamp.mixed_layout"), kMixedLayoutSwitch,
        [&] { return mixed_on(cuda::channels_last_copy(input)); }, [&] { return mixed_on(input); });
  };
  const auto problem = problem_args("convops::conv2d_group_norm_scale_max_pool_clamp");
  // The fused kernels where they apply, with the mixed path as "auto"'s third candidate; else the mixed path in the
  // convops path's place; the ATen chain where neither applies.
  if (!fused_applies) return mixed_applies ? cuda::run_chosen_path(problem, mixed, aten) : aten();
  const cuda::PathFn mixed_fn = mixed;
  return cuda::run_chosen_path(problem, fused, aten, mixed_applies ? &mixed_fn : nullptr);
}

}  // namespace

TORCH_LIBRARY_IMPL(convops, CUDA, m) {
  m.impl("conv2d_group_norm_scale_max_pool_clamp",
         conv2d_group_norm_scale_max_pool_clamp_entry<conv2d_group_norm_scale_max_pool_clamp_cuda>);
}

}  // namespace convops
