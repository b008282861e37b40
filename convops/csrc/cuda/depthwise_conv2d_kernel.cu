// CUDA implementation of convops::depthwise_conv2d.
//
// Design (kernels-research.md §1): a CTA owns an output tile of kTileRows x kTileCols outputs of one (n, c_out)
// plane. It stages the input rectangle that the tile reads into shared memory once (depthwise_stencil.cuh), then
// each thread produces kRows x kVec outputs: kVec adjacent columns of kRows consecutive rows. In the specialised
// stride-1 kernels (3x3, 5x5) a thread walks down the input rows, reads each one from shared memory once as
// 16-byte vectors, and adds it into every output row it touches (a register sliding window); the general kernel
// takes any kernel size, stride and dilation and sums the taps from shared memory. Tiles whose input rectangle
// would not fit in shared memory (huge dilated kernels) fall back to a direct kernel that reads global memory.
// Channels-last inputs take their own kernel (channels across the warp, taps through L1), since staging NCHW rows
// of a channels-last tensor would read one element per 32-byte sector.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/checks.h"
#include "cuda/depthwise_conv2d_blocked.cuh"
#include "cuda/depthwise_conv2d_bulk.cuh"
#include "cuda/depthwise_conv2d_launch.cuh"
#include "cuda/depthwise_conv2d_planes.cuh"
#include "cuda/depthwise_conv2d_rows.cuh"
#include "cuda/depthwise_conv2d_small.cuh"
#include "cuda/depthwise_stencil.cuh"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"
#include "cuda/path_choice.cuh"
#include "depthwise_conv2d.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace convops {
namespace cuda {
namespace depthwise {
namespace {

constexpr const char* kOp = "convops::depthwise_conv2d";

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVec = 4;                 // adjacent outputs of a row per thread
constexpr int kTileCols = 32 * kVec;    // a warp spans the tile's width
constexpr int kMaxSmemBytes = 160 * 1024;

struct Args {
  Geometry g;
  int64_t out_channels;
  int tiles_x, tiles_per_plane;
  Strides4d in_strides, out_strides;
};

// Output element (n, c, y, x) of a dense (NCHW or NHWC) output, written as wide as alignment allows.
template <typename scalar_t>
__device__ __forceinline__ void store_run(scalar_t* __restrict__ dst, int64_t stride_w, int count,
                                          const float (&v)[kVec]) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    if (stride_w == 1 && count == kVec && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
      *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
      return;
    }
    if (stride_w == 1 && count == kVec && reinterpret_cast<uintptr_t>(dst) % 8 == 0) {
      reinterpret_cast<float2*>(dst)[0] = make_float2(v[0], v[1]);
      reinterpret_cast<float2*>(dst)[1] = make_float2(v[2], v[3]);
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    if (i < count) dst[i * stride_w] = static_cast<scalar_t>(v[i]);
  }
}

template <typename scalar_t>
__device__ __forceinline__ void store_run(scalar_t* __restrict__ dst, int64_t stride_w, int count,
                                          const double (&v)[kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    if (i < count) dst[i * stride_w] = static_cast<scalar_t>(v[i]);
  }
}

// N consecutive values of a staged row starting at a 16-byte aligned position, read as float4 where possible so
// that a warp's reads (lane stride kVec floats) are free of bank conflicts.
template <int N, typename acc_t>
__device__ __forceinline__ void read_row(const acc_t* __restrict__ src, acc_t (&v)[N]) {
  if constexpr (std::is_same_v<acc_t, float>) {
    constexpr int kQuads = (N + 3) / 4;
#pragma unroll
    for (int q = 0; q < kQuads; ++q) {
      const float4 f = reinterpret_cast<const float4*>(src)[q];
      const float quad[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (q * 4 + i < N) v[q * 4 + i] = quad[i];
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = src[i];
  }
}

// Row pitch of the staged tile: 16-byte aligned rows, with room for the last lane's vector reads past the tile.
__host__ __device__ inline int tile_pitch(int cols) {
  return (cols + 3) / 4 * 4 + 8;
}

// KH, KW > 0: specialised stride-1, dilation-1 kernel of that size. KH = KW = 0: any kernel, stride, dilation.
// kRows: output rows per thread (the tile has kWarps * kRows rows).
template <typename scalar_t, typename acc_t, int KH, int KW, int kRows>
__global__ void __launch_bounds__(kThreads)
    depthwise_conv2d_tile_kernel(const scalar_t* __restrict__ input, const scalar_t* __restrict__ weight,
                                 const scalar_t* __restrict__ bias, scalar_t* __restrict__ output, Args a) {
  using T = Taps<KH, KW>;
  constexpr int kTileRows = kWarps * kRows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const Geometry& g = a.g;

  // Block -> (plane, tile): one division per CTA, never per output.
  const int64_t plane = blockIdx.x / a.tiles_per_plane;
  const int tile = static_cast<int>(blockIdx.x - plane * a.tiles_per_plane);
  const int tile_y = tile / a.tiles_x, tile_x = tile - tile_y * a.tiles_x;
  const int64_t n = plane / a.out_channels;
  const int co = static_cast<int>(plane - n * a.out_channels);
  const int ci = co / g.multiplier;
  const int oy0 = tile_y * kTileRows, ox0 = tile_x * kTileCols;

  const int kh = T::kernel_h(g), kw = T::kernel_w(g);
  const int sh = T::stride_h(g), sw = T::stride_w(g);
  const int rows = input_span(kTileRows, kh, sh, T::dilation_h(g));
  const int cols = input_span(kTileCols, kw, sw, T::dilation_w(g));
  const int pitch = tile_pitch(cols);
  acc_t* tile_smem = reinterpret_cast<acc_t*>(smem_raw);
  acc_t* weight_smem = tile_smem + rows * pitch;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int i = threadIdx.x; i < kh * kw; i += kThreads) {
    weight_smem[i] = static_cast<acc_t>(weight[static_cast<int64_t>(co) * kh * kw + i]);
  }
  stage_rows(tile_smem, pitch, input + n * a.in_strides.n + ci * a.in_strides.c, a.in_strides.h, a.in_strides.w,
             g.in_h, g.in_w, oy0 * sh - g.pad_h, ox0 * sw - g.pad_w, rows, cols, warp, kWarps, lane);
  __syncthreads();

  const acc_t b = bias != nullptr ? static_cast<acc_t>(bias[co]) : acc_t(0);
  acc_t out[kRows][kVec];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int v = 0; v < kVec; ++v) out[r][v] = b;
  }
  const int row0 = warp * kRows;   // first output row of this thread within the tile
  const int col0 = lane * kVec;    // first output column

  if constexpr (T::kFixed) {
    // Sliding window: input row row0 + rr feeds output rows row0 + rr - ky for every tap row ky. Each output
    // still receives its taps in ATen's order (ky, then kx), as tap_sum does.
    acc_t w[KH][KW];
#pragma unroll
    for (int ky = 0; ky < KH; ++ky) {
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) w[ky][kx] = weight_smem[ky * KW + kx];
    }
#pragma unroll
    for (int rr = 0; rr < kRows + KH - 1; ++rr) {
      acc_t window[kVec + KW - 1];
      read_row(tile_smem + (row0 + rr) * pitch + col0, window);
#pragma unroll
      for (int ky = 0; ky < KH; ++ky) {
        const int r = rr - ky;
        if (r < 0 || r >= kRows) continue;
#pragma unroll
        for (int kx = 0; kx < KW; ++kx) {
#pragma unroll
          for (int v = 0; v < kVec; ++v) out[r][v] = fma(w[ky][kx], window[v + kx], out[r][v]);
        }
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        out[r][v] = tap_sum<KH, KW>(out[r][v], tile_smem + (row0 + r) * sh * pitch + (col0 + v) * sw, pitch,
                                    weight_smem, g);
      }
    }
  }

  const int ox = ox0 + col0;
  if (ox >= g.out_w) return;
  const int count = min(kVec, g.out_w - ox);
  scalar_t* out_plane = output + n * a.out_strides.n + co * a.out_strides.c;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int oy = oy0 + row0 + r;
    if (oy < g.out_h) {
      store_run(out_plane + oy * a.out_strides.h + ox * a.out_strides.w, a.out_strides.w, count, out[r]);
    }
  }
}

// Fallback for input rectangles too large for shared memory (very large dilated kernels): one thread per output,
// taps read straight from global memory. Correct for every parameter; the tiled kernels cover practical shapes.
template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    depthwise_conv2d_direct_kernel(const scalar_t* __restrict__ input, const scalar_t* __restrict__ weight,
                                   const scalar_t* __restrict__ bias, scalar_t* __restrict__ output, Args a,
                                   int64_t total) {
  const Geometry& g = a.g;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int ox = static_cast<int>(i % g.out_w);
    const int oy = static_cast<int>(i / g.out_w % g.out_h);
    const int64_t plane = i / (static_cast<int64_t>(g.out_w) * g.out_h);
    const int64_t n = plane / a.out_channels;
    const int co = static_cast<int>(plane - n * a.out_channels);
    const scalar_t* src = input + n * a.in_strides.n + (co / g.multiplier) * a.in_strides.c;
    acc_t sum = bias != nullptr ? static_cast<acc_t>(bias[co]) : acc_t(0);
    for (int ky = 0; ky < g.kernel_h; ++ky) {
      const int iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
      if (iy < 0 || iy >= g.in_h) continue;
      for (int kx = 0; kx < g.kernel_w; ++kx) {
        const int ix = ox * g.stride_w - g.pad_w + kx * g.dilation_w;
        if (ix < 0 || ix >= g.in_w) continue;
        sum = fma(static_cast<acc_t>(weight[(static_cast<int64_t>(co) * g.kernel_h + ky) * g.kernel_w + kx]),
                  static_cast<acc_t>(src[iy * a.in_strides.h + ix * a.in_strides.w]), sum);
      }
    }
    output[n * a.out_strides.n + co * a.out_strides.c + oy * a.out_strides.h + ox * a.out_strides.w] =
        static_cast<scalar_t>(sum);
  }
}

// Channels-last inputs: channels are the contiguous dimension, so consecutive threads take consecutive output
// channels and every tap is a coalesced read across the warp (no shared-memory staging: the taps' reuse is in L1).
// A thread computes a run of kRun consecutive pixels of one output row for its channel, so the pixel index is
// decomposed once per run. The filter comes transposed to (kh, kw, C_out) so its reads are coalesced too.
constexpr int kRun = 8;

template <typename scalar_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    depthwise_conv2d_channels_last_kernel(const scalar_t* __restrict__ input,
                                          const scalar_t* __restrict__ weight_hwc,
                                          const scalar_t* __restrict__ bias, scalar_t* __restrict__ output, Args a,
                                          int64_t runs, int channel_lanes) {
  // The block is (kThreads / channel_lanes) runs x channel_lanes channels; channel_lanes is a power of two.
  const Geometry& g = a.g;
  const int channels = static_cast<int>(a.out_channels);
  const int channel_blocks = (channels + channel_lanes - 1) / channel_lanes;
  const int runs_per_block = kThreads / channel_lanes;
  const int co = (blockIdx.x % channel_blocks) * channel_lanes + threadIdx.x % channel_lanes;
  if (co >= channels) return;
  const int ci = co / g.multiplier;
  const acc_t b = bias != nullptr ? static_cast<acc_t>(bias[co]) : acc_t(0);
  const int runs_per_row = (g.out_w + kRun - 1) / kRun;
  const int64_t run_step = int64_t{gridDim.x / channel_blocks} * runs_per_block;
  for (int64_t run = int64_t{blockIdx.x / channel_blocks} * runs_per_block + threadIdx.x / channel_lanes; run < runs;
       run += run_step) {
    const int64_t row = run / runs_per_row;
    const int ox0 = static_cast<int>(run - row * runs_per_row) * kRun;
    const int64_t n = row / g.out_h;
    const int oy = static_cast<int>(row - n * g.out_h);
    const scalar_t* src = input + n * a.in_strides.n + ci * a.in_strides.c;
    scalar_t* dst = output + n * a.out_strides.n + co * a.out_strides.c + oy * a.out_strides.h;
#pragma unroll 2
    for (int ox = ox0; ox < min(ox0 + kRun, g.out_w); ++ox) {
      acc_t sum = b;
      for (int ky = 0; ky < g.kernel_h; ++ky) {
        const int iy = oy * g.stride_h - g.pad_h + ky * g.dilation_h;
        if (iy < 0 || iy >= g.in_h) continue;
        for (int kx = 0; kx < g.kernel_w; ++kx) {
          const int ix = ox * g.stride_w - g.pad_w + kx * g.dilation_w;
          if (ix < 0 || ix >= g.in_w) continue;
          sum = fma(static_cast<acc_t>(weight_hwc[(ky * g.kernel_w + kx) * int64_t{channels} + co]),
                    static_cast<acc_t>(src[iy * a.in_strides.h + ix * a.in_strides.w]), sum);
        }
      }
      dst[ox * a.out_strides.w] = static_cast<scalar_t>(sum);
    }
  }
}

template <typename scalar_t, typename acc_t, int KH, int KW, int kRows>
void launch_tiled(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                  at::Tensor& output, Args a, size_t smem_bytes, cudaStream_t stream) {
  auto kernel = depthwise_conv2d_tile_kernel<scalar_t, acc_t, KH, KW, kRows>;
  allow_dynamic_shared_memory(kernel, static_cast<int>(smem_bytes));
  constexpr int kTileRows = kWarps * kRows;
  const int tiles_y = ceil_div(a.g.out_h, kTileRows);
  a.tiles_x = ceil_div(a.g.out_w, kTileCols);
  a.tiles_per_plane = a.tiles_x * tiles_y;
  const int64_t blocks = output.size(0) * a.out_channels * a.tiles_per_plane;
  CONVOPS_CHECK(kOp, blocks < (int64_t{1} << 31), "the output has too many tiles for one launch: ", output.sizes());
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem_bytes, stream>>>(
      input.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(),
      optional_data<scalar_t>(bias),
      output.mutable_data_ptr<scalar_t>(), a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Shared memory for a tile of kWarps * kRows output rows under geometry g (input rectangle plus the filter).
size_t tiled_smem_bytes(const Geometry& g, int rows_per_thread, bool fixed, size_t acc_size) {
  const int stride_h = fixed ? 1 : g.stride_h, stride_w = fixed ? 1 : g.stride_w;
  const int dil_h = fixed ? 1 : g.dilation_h, dil_w = fixed ? 1 : g.dilation_w;
  const int64_t rows = input_span(kWarps * rows_per_thread, g.kernel_h, stride_h, dil_h);
  const int64_t cols = input_span(kTileCols, g.kernel_w, stride_w, dil_w);
  return static_cast<size_t>(rows * tile_pitch(static_cast<int>(cols)) + g.kernel_h * g.kernel_w) * acc_size;
}

template <typename scalar_t>
void depthwise_conv2d_dispatch(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, at::Tensor& output, const Args& a) {
  using acc_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const Geometry& g = a.g;
  if (a.in_strides.c == 1 && a.out_strides.c == 1 && a.out_channels > 1) {
    const auto weight_hwc = weight.permute({2, 3, 0, 1}).contiguous();  // (kh, kw, C_out, 1)
    const int64_t runs = output.size(0) * a.g.out_h * ceil_div<int64_t>(a.g.out_w, kRun);
    int channel_lanes = 32;  // a power of two, so that it divides kThreads
    while (channel_lanes < a.out_channels && channel_lanes < kThreads) channel_lanes *= 2;
    const int64_t channel_blocks = ceil_div<int64_t>(a.out_channels, channel_lanes);
    const int64_t run_blocks = std::clamp<int64_t>(multiprocessor_count() * 32 / channel_blocks, 1,
                                                   ceil_div<int64_t>(runs, kThreads / channel_lanes));
    depthwise_conv2d_channels_last_kernel<scalar_t, acc_t>
        <<<static_cast<unsigned>(run_blocks * channel_blocks), kThreads, 0, stream>>>(
            input.const_data_ptr<scalar_t>(), weight_hwc.const_data_ptr<scalar_t>(),
            optional_data<scalar_t>(bias),
            output.mutable_data_ptr<scalar_t>(), a, runs, channel_lanes);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const bool unit = g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1;
  if (unit && g.kernel_h == 3 && g.kernel_w == 3) {
    return launch_tiled<scalar_t, acc_t, 3, 3, 4>(input, weight, bias, output, a,
                                                   tiled_smem_bytes(g, 4, true, sizeof(acc_t)), stream);
  }
  if (unit && g.kernel_h == 5 && g.kernel_w == 5) {
    return launch_tiled<scalar_t, acc_t, 5, 5, 4>(input, weight, bias, output, a,
                                                   tiled_smem_bytes(g, 4, true, sizeof(acc_t)), stream);
  }
  if (const size_t bytes = tiled_smem_bytes(g, 4, false, sizeof(acc_t)); bytes <= 48 * 1024) {
    return launch_tiled<scalar_t, acc_t, 0, 0, 4>(input, weight, bias, output, a, bytes, stream);
  }
  if (const size_t bytes = tiled_smem_bytes(g, 1, false, sizeof(acc_t)); bytes <= kMaxSmemBytes) {
    return launch_tiled<scalar_t, acc_t, 0, 0, 1>(input, weight, bias, output, a, bytes, stream);
  }
  const int64_t total = output.numel();
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(total, kThreads), int64_t{multiprocessor_count()} * 16);
  depthwise_conv2d_direct_kernel<scalar_t, acc_t><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      input.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(),
      optional_data<scalar_t>(bias),
      output.mutable_data_ptr<scalar_t>(), a, total);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

Strides4d strides_of(const at::Tensor& t) {
  return Strides4d{t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

}  // namespace

Geometry make_geometry(const DepthwiseGeometry& d) {
  const auto as_int = [](int64_t v) { return static_cast<int>(v); };
  return Geometry{as_int(d.in_h),       as_int(d.in_w),      as_int(d.out_h),      as_int(d.out_w),
                  as_int(d.kernel_h),   as_int(d.kernel_w),  as_int(d.stride_h),   as_int(d.stride_w),
                  as_int(d.pad_h),      as_int(d.pad_w),     as_int(d.dilation_h), as_int(d.dilation_w),
                  as_int(d.multiplier)};
}

void check_coordinates_fit_int(const char* op, const DepthwiseGeometry& d) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  // Along one dimension the kernels form coordinates between -pad and (out + kTileCols) * stride + (kernel - 1) *
  // dilation; each factor is bounded first so that the products cannot overflow int64 either.
  const auto fits = [&](int64_t out, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
    for (const int64_t v : {out, kernel, stride, pad, dilation}) {
      if (v >= kIntMax) return false;
    }
    return (out + kTileCols) * stride + pad + (kernel - 1) * dilation < kIntMax;
  };
  CONVOPS_CHECK(op,
                fits(d.out_h, d.kernel_h, d.stride_h, d.pad_h, d.dilation_h) &&
                    fits(d.out_w, d.kernel_w, d.stride_w, d.pad_w, d.dilation_w) && d.out_channels < kIntMax,
                "kernel (", d.kernel_h, ", ", d.kernel_w, "), stride (", d.stride_h, ", ", d.stride_w, "), padding (",
                d.pad_h, ", ", d.pad_w, ") and dilation (", d.dilation_h, ", ", d.dilation_w,
                ") reach plane coordinates past the CUDA kernels' 32-bit range");
}

// Which NCHW kernel may run. Normally any (the dispatch below picks); CONVOPS_DEPTHWISE_KERNEL=small|bulk|rows|
// blocked|planes|tiled restricts it, for measuring the kernels against each other (tools/dev_depthwise_planes.py).
// A kernel that does not take the problem still falls through to the general ones.
enum class KernelChoice { kAny, kSmall, kBulk, kRows, kBlocked, kPlanes, kTiled };

KernelChoice kernel_choice() {
  const char* env = std::getenv("CONVOPS_DEPTHWISE_KERNEL");
  if (env == nullptr) return KernelChoice::kAny;
  if (std::strcmp(env, "small") == 0) return KernelChoice::kSmall;
  if (std::strcmp(env, "bulk") == 0) return KernelChoice::kBulk;
  if (std::strcmp(env, "rows") == 0) return KernelChoice::kRows;
  if (std::strcmp(env, "blocked") == 0) return KernelChoice::kBlocked;
  if (std::strcmp(env, "planes") == 0) return KernelChoice::kPlanes;
  if (std::strcmp(env, "tiled") == 0) return KernelChoice::kTiled;
  return KernelChoice::kAny;
}

// Writes depthwise_conv2d(input, weight, bias) into output (any dense layout). Also the unfused fallback of the
// separable op, which is why it is not static.
void depthwise_conv2d_into(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::Tensor& output, const DepthwiseGeometry& d, const char* op) {
  const int64_t int_max = std::numeric_limits<int>::max();
  CONVOPS_CHECK(op, d.in_h * d.in_w < int_max && d.kernel_h * d.kernel_w < int_max && d.out_h * d.out_w < int_max,
                "one channel plane must have fewer than 2^31 elements, got input ", input.sizes());
  check_coordinates_fit_int(op, d);
  Args a{make_geometry(d), d.out_channels, 0, 0, strides_of(input), strides_of(output)};
  const auto weight_c = weight.contiguous();
  const auto bias_c = contiguous_or_none(bias);
  const KernelChoice choice = kernel_choice();
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "convops_depthwise_conv2d", [&] {
    // Contiguous NCHW: the small-problem kernel for the latency-bound problems where it pays
    // (depthwise_conv2d_small.cuh); the row-streaming kernel for stride 1, 3x3 / 5x5 / 7x7 and rows that fill its
    // warps, fed from registers (depthwise_conv2d_rows.cuh); for narrower rows the register-blocked kernel
    // (depthwise_conv2d_blocked.cuh: stride 1, 3x3 / 5x5 / 7x7) or the plane-block kernel
    // (depthwise_conv2d_planes.cuh) for the rest; then the general ones.
    // On sm_90 the bulk-copy variant of the row kernel (depthwise_conv2d_bulk.cuh) takes the row kernel's shapes:
    // 6% faster in fp32, 10% in bf16 on the seed (H200). Its ring fences each consumer's shared-memory reads
    // against the async-proxy refill before releasing a slot; without that fence one call in ~150 on the seed
    // wrote 24 wrong outputs (tools/probe/determinism.py --kernel bulk finds it).
    if ((choice == KernelChoice::kSmall || (choice == KernelChoice::kAny && small_kernel_pays(d))) &&
        launch_depthwise_small<scalar_t>(input, weight_c, bias_c, output, d, stream)) {
      return;
    }
    const bool wide_rows = d.in_w >= rows_strip_columns<scalar_t>(d);
    if ((choice == KernelChoice::kBulk || (choice == KernelChoice::kAny && wide_rows)) &&
        launch_depthwise_bulk<scalar_t>(input, weight_c, bias_c, output, d, stream)) {
      return;
    }
    if ((choice == KernelChoice::kRows || (choice == KernelChoice::kAny && wide_rows)) &&
        launch_depthwise_rows<scalar_t>(input, weight_c, bias_c, output, d, stream)) {
      return;
    }
    const bool blocked_pays = !wide_rows && blocked::blocked_pays(d);
    if ((choice == KernelChoice::kBlocked || (choice == KernelChoice::kAny && blocked_pays)) &&
        launch_depthwise_blocked<scalar_t>(input, weight_c, bias_c, output, d, stream)) {
      return;
    }
    if ((choice == KernelChoice::kPlanes || choice == KernelChoice::kAny) &&
        launch_depthwise_planes<scalar_t>(input, weight_c, bias_c, output, d, stream)) {
      return;
    }
    depthwise_conv2d_dispatch<scalar_t>(input, weight_c, bias_c, output, a);
  });
}

namespace {

at::Tensor depthwise_conv2d_cuda(const at::Tensor& input, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef dilation) {
  const auto d = check_depthwise_conv2d(kOp, input, weight, bias, stride, padding, dilation);
  const c10::cuda::CUDAGuard guard(input.device());
  const auto kernel_path = [&] {
    auto output = empty_output(input, {d.batch, d.out_channels, d.out_h, d.out_w});
    if (output.numel() > 0) depthwise_conv2d_into(input, weight, bias, output, d, kOp);
    return output;
  };
  if (d.batch == 0) return kernel_path();
  // The convops kernels, or ATen's grouped convolution where it is faster (cuda/path_choice.cuh).
  return run_chosen_path(problem_key(kOp, input, weight, bias, stride, padding, dilation), kernel_path, [&] {
    return at::convolution(input, weight, bias, stride, padding, dilation, false, {0, 0}, d.in_channels)
        .contiguous(input.suggest_memory_format());
  });
}

}  // namespace
}  // namespace depthwise
}  // namespace cuda

TORCH_LIBRARY_IMPL(convops, CUDA, m) {
  m.impl("depthwise_conv2d", &cuda::depthwise::depthwise_conv2d_cuda);
}

}  // namespace convops
