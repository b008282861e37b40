// Plane-block depthwise kernel: the path of convops::depthwise_conv2d for contiguous NCHW tensors whose rows are too
// narrow for the row-streaming kernel (depthwise_conv2d_rows.cuh gives each warp a strip of 32 vectors, so a 14- or
// 56-wide row leaves most lanes idle) where the register-blocked kernel (depthwise_conv2d_blocked.cuh) does not pay
// or does not apply: outputs under 28 wide, stride 2 at any width, other filters, odd 16-bit widths.
//
// Why this shape of kernel (issue #5 sweep: MobileNetV2 / EfficientNet / ConvNeXt layers of 7x7 to 56x56 planes,
// where the tiled kernel reached 1-15% of the copy floor): in a contiguous NCHW tensor, whole planes of consecutive
// channels, or a band of full rows of one plane, are one contiguous range of memory. A CTA therefore stages
//   - P consecutive output planes' input planes (small planes), or
//   - the input rows of a band of R output rows of one plane (large planes)
// with a flat 16-byte cp.async copy and no index arithmetic per element, then computes from shared memory and writes
// its outputs straight to global memory. Threads take consecutive output columns, so both the shared-memory reads
// (a tap of 32 neighbouring outputs) and the global stores are contiguous across a warp. A thread computes a column
// run of kRun outputs, reading each input row of its window once and adding it into every output of the run that
// it feeds (vertical register reuse).
//
// Rounding: every output is the bias (or 0) plus one fmaf per tap in (ky, kx) order, taps outside the image skipped,
// exactly as ATen's conv_depthwise2d_forward_kernel, so fp32 results are bitwise PyTorch's.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "common/checks.h"
#include "cuda/depthwise_conv2d_launch.cuh"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {
namespace planes {

constexpr int kThreads = 256;
// Outputs of one column per thread: kLongRun, or kShortRun for small problems (is_small_problem: batch-1 layers)
// on planes under 28 outputs wide, which are latency-bound: there a run of 8 is a chain of ~300 dependent
// instructions for a few threads a block. H200, 2026-11-27 00:54 UTC, batch 1, do_bench us, run of 2 / run of 8,
// TF32 then bf16: 14x14 7x7 7.3 / 10.9 and 7.4 / 12.5; 7x7 7x7 7.1 / 10.6 and 7.7 / 11.7; 14x14 3x3 6.1 / 6.5 and
// 6.9 / 7.1; 7x7 3x3 7.4 / 7.7 and 6.3 / 7.2; but 28-wide outputs lost (28x28 5x5 9.8 / 7.6, 56x56 5x5 stride 2
// 9.3 / 8.7).
constexpr int kLongRun = 8;
constexpr int kShortRun = 2;
constexpr size_t kSmemBudget = 48 * 1024;     // no opt-in needed; leaves room for 4 CTAs an SM

template <typename scalar_t>
struct PlanesParams {
  const scalar_t* __restrict__ input;
  const scalar_t* __restrict__ weight;
  const scalar_t* __restrict__ bias;  // nullptr: no bias
  scalar_t* __restrict__ output;
  Geometry g;
  int out_channels;
  int run;               // outputs of a column per thread: kLongRun or kShortRun
  int planes_per_block;  // P
  int band_rows;         // R (out_h when a block takes whole planes)
  int bands;
  int64_t total_planes;  // batch * out_channels
};

// Copies elements [start, start + len) of src into dst[off + 0 .. off + len), where off = start's offset within its
// 16-byte word, so that 16-byte pieces of global memory land on 16-byte aligned shared memory. The aligned middle
// goes by cp.async (bypassing L1), the ragged ends element by element. Complete with cp_async_wait<0> + barrier.
template <typename scalar_t>
__device__ __forceinline__ int stage_range(scalar_t* __restrict__ dst, const scalar_t* __restrict__ src,
                                           int64_t start, int len) {
  constexpr int V = 16 / sizeof(scalar_t);
  const auto addr = reinterpret_cast<uintptr_t>(src + start);
  const int off = static_cast<int>(addr % 16 / sizeof(scalar_t));
  const int head = min(len, (V - off) % V);              // elements before the first aligned word
  const int vectors = (len - head) / V;
  const int tail_begin = head + vectors * V;
  const scalar_t* base = src + start;
  for (int i = threadIdx.x; i < head; i += kThreads) dst[off + i] = base[i];
  for (int i = tail_begin + threadIdx.x; i < len; i += kThreads) dst[off + i] = base[i];
  for (int v = threadIdx.x; v < vectors; v += kThreads) {
    const int e = head + v * V;
    cp_async_zfill<16>(dst + off + e, base + e, /*valid=*/true);
  }
  cp_async_commit();
  return off;
}

// Output channel co's bias, and with a fixed filter (KH > 0) its taps, as floats.
template <int KH, int KW, typename scalar_t>
__device__ __forceinline__ void load_filter(const PlanesParams<scalar_t>& p, int co,
                                            float (&wr)[KH > 0 ? KH : 1][KW > 0 ? KW : 1], float& bias) {
  bias = p.bias != nullptr ? static_cast<float>(p.bias[co]) : 0.0f;
  if constexpr (KH > 0) {
    const scalar_t* __restrict__ w = p.weight + int64_t{co} * KH * KW;
#pragma unroll
    for (int ky = 0; ky < KH; ++ky) {
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) wr[ky][kx] = static_cast<float>(w[ky * KW + kx]);
    }
  }
}

// KH, KW, SH, SW > 0: that filter and stride with dilation 1, all loops unrolled. KH = 0: any filter, stride and
// dilation, read from the parameters. kRun = p.run.
template <typename scalar_t, int KH, int KW, int SH, int SW, int kRun>
__global__ void __launch_bounds__(kThreads) depthwise_planes_kernel(const PlanesParams<scalar_t> p) {
  constexpr bool kFixed = KH > 0;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  scalar_t* staged = reinterpret_cast<scalar_t*>(smem_raw);

  const int band = static_cast<int>(blockIdx.x % p.bands);
  const int64_t p0 = static_cast<int64_t>(blockIdx.x / p.bands) * p.planes_per_block;
  const int64_t left = p.total_planes - p0;
  const int planes = left < p.planes_per_block ? static_cast<int>(left) : p.planes_per_block;
  const int oy0 = band * p.band_rows;
  const int rows = min(p.band_rows, p.g.out_h - oy0);

  const int kh = kFixed ? KH : p.g.kernel_h, kw = kFixed ? KW : p.g.kernel_w;
  const int sh = kFixed ? SH : p.g.stride_h, sw = kFixed ? SW : p.g.stride_w;
  const int dh = kFixed ? 1 : p.g.dilation_h, dw = kFixed ? 1 : p.g.dilation_w;

  // Input planes q0 .. q0 + nq - 1 feed output planes p0 .. p0 + planes - 1 (output plane n * C_out + co reads
  // input plane (n * C_out + co) / multiplier, since C_out = multiplier * C_in).
  const int64_t q0 = p0 / p.g.multiplier;
  const int nq = static_cast<int>((p0 + planes - 1) / p.g.multiplier - q0 + 1);
  // Input rows [iy_lo, iy_hi) of each staged plane: all of them when the block spans planes (so that the staged
  // range is contiguous), else those the band's outputs read.
  int iy_lo = 0, iy_hi = p.g.in_h;
  if (nq == 1) {
    iy_lo = max(0, oy0 * sh - p.g.pad_h);
    iy_hi = min(p.g.in_h, (oy0 + rows - 1) * sh - p.g.pad_h + (kh - 1) * dh + 1);
  }
  const int staged_rows = max(0, iy_hi - iy_lo);
  const int64_t in_plane = int64_t{p.g.in_h} * p.g.in_w;
  const int off = stage_range(staged, p.input, q0 * in_plane + int64_t{iy_lo} * p.g.in_w,
                              nq * staged_rows * p.g.in_w);

  const int row_groups = (rows + kRun - 1) / kRun;
  const int items = planes * row_groups * p.g.out_w;
  // The filter taps (kFixed) and the bias of the thread's current output channel, in registers. Those of its first
  // item load while the stage is in flight: in a small problem (batch-1 layers: one item a thread, 3-5 us kernels)
  // they would otherwise be a second DRAM round trip after the wait.
  float wr[kFixed ? KH : 1][kFixed ? KW : 1];
  float bias = 0.0f;
  int filter_co = -1;
  if constexpr (kFixed) {
    if (threadIdx.x < items) {
      filter_co = static_cast<int>((p0 + threadIdx.x / p.g.out_w / row_groups) % p.out_channels);
      load_filter<KH, KW>(p, filter_co, wr, bias);
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  for (int item = threadIdx.x; item < items; item += kThreads) {
    const int ox = item % p.g.out_w;
    const int rest = item / p.g.out_w;
    const int group = rest % row_groups;
    const int64_t plane = p0 + rest / row_groups;  // output plane n * C_out + co
    const int co = static_cast<int>(plane % p.out_channels);
    const int j = static_cast<int>(plane / p.g.multiplier - q0);
    const int oy_first = oy0 + group * kRun;
    const int count = min(kRun, oy0 + rows - oy_first);
    const scalar_t* __restrict__ in_rows = staged + off + (j * staged_rows - iy_lo) * p.g.in_w;  // indexed by iy
    if (co != filter_co) {
      filter_co = co;
      load_filter<KH, KW>(p, co, wr, bias);
    }

    float acc[kRun];
#pragma unroll
    for (int i = 0; i < kRun; ++i) acc[i] = bias;
    const int ix0 = ox * sw - p.g.pad_w;
    const int iy_first = oy_first * sh - p.g.pad_h;

    if constexpr (kFixed) {
      bool col_ok[KW];
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) col_ok[kx] = static_cast<unsigned>(ix0 + kx) < static_cast<unsigned>(p.g.in_w);
      // Input row iy_first + s feeds output i of the run through tap row ky = s - i * SH; it is read once. Outputs
      // past `count` take harmless sums and are not stored; rows outside the staged ones are padding (or belong
      // only to such outputs) and are skipped.
#pragma unroll
      for (int s = 0; s < (kRun - 1) * SH + KH; ++s) {
        const int iy = iy_first + s;
        if (iy < iy_lo || iy >= iy_hi) continue;
        const scalar_t* __restrict__ row = in_rows + iy * p.g.in_w + ix0;
        float x[KW];
#pragma unroll
        for (int kx = 0; kx < KW; ++kx) x[kx] = col_ok[kx] ? static_cast<float>(row[kx]) : 0.0f;
#pragma unroll
        for (int i = 0; i < kRun; ++i) {
          const int ky = s - i * SH;
          if (ky < 0 || ky >= KH) continue;
#pragma unroll
          for (int kx = 0; kx < KW; ++kx) {
            if (col_ok[kx]) acc[i] = fmaf(wr[ky][kx], x[kx], acc[i]);
          }
        }
      }
    } else {
      const scalar_t* __restrict__ w = p.weight + int64_t{co} * kh * kw;
#pragma unroll
      for (int i = 0; i < kRun; ++i) {
        if (i >= count) break;
        const int iy_base = iy_first + i * sh;
        for (int ky = 0; ky < kh; ++ky) {
          const int iy = iy_base + ky * dh;
          if (iy < iy_lo || iy >= iy_hi) continue;
          const scalar_t* __restrict__ row = in_rows + iy * p.g.in_w;
          for (int kx = 0; kx < kw; ++kx) {
            const int ix = ix0 + kx * dw;
            if (static_cast<unsigned>(ix) < static_cast<unsigned>(p.g.in_w)) {
              acc[i] = fmaf(static_cast<float>(w[ky * kw + kx]), static_cast<float>(row[ix]), acc[i]);
            }
          }
        }
      }
    }

    scalar_t* __restrict__ out = p.output + plane * (int64_t{p.g.out_h} * p.g.out_w) + int64_t{oy_first} * p.g.out_w + ox;
#pragma unroll
    for (int i = 0; i < kRun; ++i) {
      if (i < count) out[i * p.g.out_w] = static_cast<scalar_t>(acc[i]);
    }
  }
}

// Staged elements (plus the alignment slack) of a block of `planes` output planes and `band_rows` output rows.
inline int64_t staged_elements(const DepthwiseGeometry& d, int64_t planes, int64_t band_rows) {
  const int64_t in_planes = input_planes_read(d, planes);
  const int64_t rows = in_planes > 1 || band_rows == d.out_h
                           ? d.in_h
                           : std::min(d.in_h, (band_rows - 1) * d.stride_h + (d.kernel_h - 1) * d.dilation_h + 1);
  return in_planes * rows * d.in_w + 16;
}

// Block shape for problem d: whole planes, several a block, when a plane is small; else bands of rows of one plane.
// Blocks aim at 2 x kThreads runs of outputs within kSmemBudget, with enough blocks to fill the device. nullopt when
// even a band of one row does not fit, or coordinates leave int.
template <typename scalar_t>
std::optional<PlanesParams<scalar_t>> plan_planes(const DepthwiseGeometry& d, int sm_count) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  for (const int64_t v : {d.in_h, d.in_w, d.out_h, d.out_w, d.pad_h, d.pad_w, d.out_channels}) {
    if (v >= kIntMax / 8) return std::nullopt;
  }
  const int64_t out_plane = d.out_h * d.out_w;
  const int64_t total_planes = d.batch * d.out_channels;
  const auto fits = [&](int64_t planes, int64_t band_rows) {
    const int64_t elems = staged_elements(d, planes, band_rows);
    return elems * int64_t{sizeof(scalar_t)} <= int64_t{kSmemBudget} && elems < kIntMax / 4;
  };
  const int64_t min_blocks = 2 * int64_t{sm_count};
  const int run = is_small_problem(d) && d.out_w < 28 ? kShortRun : kLongRun;
  const int64_t target_outputs = int64_t{kThreads} * run * 2;

  int64_t planes = 1, band_rows = d.out_h;
  // Whole planes a block, unless there are too few planes to fill the device: then bands of rows, so that a small
  // problem (a batch-1 layer of 144 planes of 28 x 28 outputs) runs on more, shorter blocks.
  if (out_plane <= target_outputs && fits(1, d.out_h) && (total_planes >= min_blocks || d.out_h <= run)) {
    planes = std::max<int64_t>(1, target_outputs / out_plane);
    planes = std::min(planes, std::max<int64_t>(1, total_planes / min_blocks));
    while (planes > 1 && !fits(planes, d.out_h)) --planes;
  } else {
    band_rows = std::max<int64_t>(run, target_outputs / std::max<int64_t>(1, d.out_w) / run * run);
    band_rows = std::min(band_rows, d.out_h);
    while (band_rows > run && total_planes * ((d.out_h + band_rows - 1) / band_rows) < min_blocks) {
      band_rows -= run;
    }
    while (band_rows > 1 && !fits(1, band_rows)) band_rows = band_rows > run ? band_rows - run : band_rows - 1;
    if (!fits(1, band_rows)) return std::nullopt;
  }
  const int64_t bands = (d.out_h + band_rows - 1) / band_rows;
  const int64_t blocks = (total_planes + planes - 1) / planes * bands;
  if (blocks >= (int64_t{1} << 31) || planes * bands * out_plane >= kIntMax) return std::nullopt;

  PlanesParams<scalar_t> p{};
  p.g = make_geometry(d);
  p.out_channels = static_cast<int>(d.out_channels);
  p.run = run;
  p.planes_per_block = static_cast<int>(planes);
  p.band_rows = static_cast<int>(band_rows);
  p.bands = static_cast<int>(bands);
  p.total_planes = total_planes;
  return p;
}

template <typename scalar_t, int KH, int KW, int SH, int SW>
void launch_planes_kernel(const PlanesParams<scalar_t>& p, size_t smem_bytes, unsigned blocks, cudaStream_t stream) {
  if (p.run == kShortRun) {
    depthwise_planes_kernel<scalar_t, KH, KW, SH, SW, kShortRun><<<blocks, kThreads, smem_bytes, stream>>>(p);
  } else {
    depthwise_planes_kernel<scalar_t, KH, KW, SH, SW, kLongRun><<<blocks, kThreads, smem_bytes, stream>>>(p);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace planes

// Runs depthwise_conv2d on the plane-block kernel and returns true, or returns false without doing anything when the
// problem is not one it takes (non-contiguous tensors, fp64, shared memory or int range exceeded). weight and bias
// must be contiguous; output must be non-empty.
template <typename scalar_t>
bool launch_depthwise_planes(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                             at::Tensor& output, const DepthwiseGeometry& d, cudaStream_t stream) {
  if constexpr (std::is_same_v<scalar_t, double>) {
    return false;
  } else {
    if (!input.is_contiguous() || !output.is_contiguous() || output.numel() == 0) return false;
    auto plan = planes::plan_planes<scalar_t>(d, multiprocessor_count());
    if (!plan) return false;
    planes::PlanesParams<scalar_t>& p = *plan;
    p.input = input.const_data_ptr<scalar_t>();
    p.weight = weight.const_data_ptr<scalar_t>();
    p.bias = optional_data<scalar_t>(bias);
    p.output = output.mutable_data_ptr<scalar_t>();
    const size_t smem = static_cast<size_t>(planes::staged_elements(d, p.planes_per_block, p.band_rows)) *
                        sizeof(scalar_t);
    const auto blocks = static_cast<unsigned>((p.total_planes + p.planes_per_block - 1) / p.planes_per_block *
                                              p.bands);
    const bool unit_dilation = d.dilation_h == 1 && d.dilation_w == 1;
    const auto is = [&](int k, int s) {
      return unit_dilation && d.kernel_h == k && d.kernel_w == k && d.stride_h == s && d.stride_w == s;
    };
    if (is(3, 1)) {
      planes::launch_planes_kernel<scalar_t, 3, 3, 1, 1>(p, smem, blocks, stream);
    } else if (is(3, 2)) {
      planes::launch_planes_kernel<scalar_t, 3, 3, 2, 2>(p, smem, blocks, stream);
    } else if (is(5, 1)) {
      planes::launch_planes_kernel<scalar_t, 5, 5, 1, 1>(p, smem, blocks, stream);
    } else if (is(5, 2)) {
      planes::launch_planes_kernel<scalar_t, 5, 5, 2, 2>(p, smem, blocks, stream);
    } else if (is(7, 1)) {
      planes::launch_planes_kernel<scalar_t, 7, 7, 1, 1>(p, smem, blocks, stream);
    } else {
      planes::launch_planes_kernel<scalar_t, 0, 0, 0, 0>(p, smem, blocks, stream);
    }
    return true;
  }
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
