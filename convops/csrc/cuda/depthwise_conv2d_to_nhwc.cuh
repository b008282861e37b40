// Depthwise kernel from an NCHW input to a channels-last (NHWC) output, for small planes: the first stage of the
// separable op's mixed path through channels-last (depthwise_separable_conv2d_kernel.cu), whose 1x1 is then one GEMM
// over every pixel and whose output is transposed back to NCHW with the 1x1's bias (layout_transpose.cuh).
//
// Why (issue #5 sweep): on 7x7 and 14x14 planes of many channels at batch 32, Inductor beat every NCHW path of the op
// by laying the pair out channels-last: a Triton NCHW->NHWC copy (3-4 us), cuDNN's NHWC depthwise (5.7-35 us), one
// NHWC GEMM, a Triton copy back that adds the bias (H200, 2026-11-28 08:17 UTC, tools/probe/column_kernels.py).
// This kernel is that copy and that depthwise in one pass: the input is read once, in NCHW, and the intermediate is
// written once, in NHWC.
//
// Shape: a CTA takes kChannels consecutive output channels of one image, one per lane, and a block of output rows
// (all of them, unless the grid is short of CTAs: below). The input planes those channels read are one contiguous
// range of the NCHW input, staged into shared memory by one flat cp.async copy (planes::stage_range). The block's
// rows are cut into runs of kRun outputs, dealt to the warps in turn; each lane computes its channel's run from one
// read of the input row segments the run shares, and stores it at consecutive channels: a warp's stores of one pixel
// are one contiguous run of the NHWC output.
//
// Row blocks: a batch-1 layer has few CTAs (768 channels: 24 on 132 SMs), each of whose lanes computed 1-2 rows of
// the plane in turn, so the kernel was the latency of one lane's work: 6.7 us on ConvNeXt-T's c768 7x7 layer, 18.5
// on its c384 14x14 one, where the convops NCHW depthwise kernel takes 3.6-3.7 (profiler, H200, 2026-11-28 13:24
// UTC). Where the grid holds fewer than kCtasPerSm CTAs an SM, the rows are split into that many more blocks; each
// CTA stages the same planes (a few KB from L2) and computes only its rows.
//
// Rounding: every output is the bias (or 0) plus one fmaf per tap in (ky, kx) order, taps outside the image skipped
// (not added as zeros: a non-finite weight there must not reach the output), exactly as ATen's
// conv_depthwise2d_forward_kernel and the convops NCHW kernels, so fp32 intermediates are bitwise theirs.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "common/checks.h"
#include "cuda/depthwise_conv2d_launch.cuh"
#include "cuda/depthwise_conv2d_planes.cuh"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {
namespace to_nhwc {

constexpr int kChannels = 32;  // output channels a CTA: one a lane
constexpr int kWarps = 8;      // the block's runs of kRun outputs are dealt to them in turn
constexpr int kThreads = kChannels * kWarps;
static_assert(kThreads == planes::kThreads, "stage_range strides by the plane-block kernel's block size");
constexpr int kRun = 4;        // outputs of a row a lane computes together, sharing their input row segments
constexpr int kCtasPerSm = 2;  // the least the grid is given by splitting the rows, where the channels give fewer
constexpr int64_t kMaxSmem = 100 * 1024;  // 32 fp32 planes of 28x28 fit; larger planes go elsewhere

template <typename scalar_t>
struct Params {
  const scalar_t* __restrict__ input;   // (N, C_in, H, W) contiguous
  const scalar_t* __restrict__ weight;  // (C_out, 1, kh, kw) contiguous
  const scalar_t* __restrict__ bias;    // (C_out) or nullptr
  scalar_t* __restrict__ output;        // (N, C_out, OH, OW) channels-last, dense
  int in_channels, out_channels, multiplier;
  int in_h, in_w, out_h, out_w;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int channel_blocks;    // ceil(out_channels / kChannels)
  int row_blocks;        // blocks of output rows an image and channel block: ceil(out_h / rows_per_block)
  int rows_per_block;
};

// KH, KW, SH, SW > 0: that filter and stride with dilation 1, loops unrolled and taps in registers; 0: any, read from
// the parameters.
template <typename scalar_t, int KH, int KW, int SH, int SW>
__global__ void __launch_bounds__(kThreads) depthwise_to_nhwc_kernel(const Params<scalar_t> p) {
  constexpr bool kFixed = KH > 0;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  scalar_t* staged = reinterpret_cast<scalar_t*>(smem_raw);
  const int blocks_per_image = p.channel_blocks * p.row_blocks;
  const int64_t n = blockIdx.x / blocks_per_image;
  const int in_image = static_cast<int>(blockIdx.x % blocks_per_image);
  const int co0 = in_image / p.row_blocks * kChannels;
  const int oy_begin = in_image % p.row_blocks * p.rows_per_block;
  const int rows = min(p.rows_per_block, p.out_h - oy_begin);
  const int co_count = min(kChannels, p.out_channels - co0);
  const int ci0 = co0 / p.multiplier;
  const int ci_count = (co0 + co_count - 1) / p.multiplier - ci0 + 1;
  const int lane = threadIdx.x % kChannels, warp = threadIdx.x / kChannels;
  const int co = co0 + lane;
  const bool active = lane < co_count;

  // The CTA's input planes are one contiguous range of the NCHW input: one flat cp.async copy, every CTA's loads in
  // flight at once without holding registers (a register-staged copy made the kernel 3x slower than cuDNN's NHWC one).
  const int in_plane = p.in_h * p.in_w;
  const int off = planes::stage_range(staged, p.input, (n * p.in_channels + ci0) * int64_t{in_plane},
                                      ci_count * in_plane);
  // The lane's filter and bias load while the stage is in flight.
  float taps[kFixed ? KH : 1][kFixed ? KW : 1];
  float acc0 = 0.0f;
  if (active) {
    acc0 = p.bias != nullptr ? static_cast<float>(p.bias[co]) : 0.0f;
    if constexpr (kFixed) {
#pragma unroll
      for (int ky = 0; ky < KH; ++ky) {
#pragma unroll
        for (int kx = 0; kx < KW; ++kx) taps[ky][kx] = static_cast<float>(p.weight[(int64_t{co} * KH + ky) * KW + kx]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  if (!active) return;

  const scalar_t* __restrict__ plane = staged + off + (co / p.multiplier - ci0) * in_plane;
  scalar_t* __restrict__ out = p.output + n * int64_t{p.out_h} * p.out_w * p.out_channels + co;
  if constexpr (kFixed) {
    // kRun outputs of a row at a time: each input row segment they share is read from shared memory once.
    constexpr int kSpan = (kRun - 1) * SW + KW;
    const int runs = (p.out_w + kRun - 1) / kRun;
    for (int item = warp; item < rows * runs; item += kWarps) {
      const int oy = oy_begin + item / runs, ox0 = item % runs * kRun;
      const int iy0 = oy * SH - p.pad_h;  // the window's first input row
      const int ix0 = ox0 * SW - p.pad_w;
      bool col_ok[kSpan];
#pragma unroll
      for (int s = 0; s < kSpan; ++s) col_ok[s] = static_cast<unsigned>(ix0 + s) < static_cast<unsigned>(p.in_w);
      float acc[kRun];
#pragma unroll
      for (int i = 0; i < kRun; ++i) acc[i] = acc0;
#pragma unroll
      for (int ky = 0; ky < KH; ++ky) {
        const int iy = iy0 + ky;
        if (static_cast<unsigned>(iy) >= static_cast<unsigned>(p.in_h)) continue;
        const int row = iy * p.in_w + ix0;  // an offset, not a pointer: ix0 may be negative (padding)
        float x[kSpan];
#pragma unroll
        for (int s = 0; s < kSpan; ++s) x[s] = col_ok[s] ? static_cast<float>(plane[row + s]) : 0.0f;
#pragma unroll
        for (int i = 0; i < kRun; ++i) {
#pragma unroll
          for (int kx = 0; kx < KW; ++kx) {
            if (col_ok[i * SW + kx]) acc[i] = fmaf(taps[ky][kx], x[i * SW + kx], acc[i]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kRun; ++i) {
        if (ox0 + i < p.out_w) out[(int64_t{oy} * p.out_w + ox0 + i) * p.out_channels] = static_cast<scalar_t>(acc[i]);
      }
    }
  } else {
    const scalar_t* __restrict__ w = p.weight + int64_t{co} * p.kernel_h * p.kernel_w;
    for (int item = warp; item < rows * p.out_w; item += kWarps) {
      const int oy = oy_begin + item / p.out_w, ox = item % p.out_w;
      const int iy0 = oy * p.stride_h - p.pad_h, ix0 = ox * p.stride_w - p.pad_w;
      float acc = acc0;
      for (int ky = 0; ky < p.kernel_h; ++ky) {
        const int iy = iy0 + ky * p.dilation_h;
        if (static_cast<unsigned>(iy) >= static_cast<unsigned>(p.in_h)) continue;
        for (int kx = 0; kx < p.kernel_w; ++kx) {
          const int ix = ix0 + kx * p.dilation_w;
          if (static_cast<unsigned>(ix) >= static_cast<unsigned>(p.in_w)) continue;
          acc = fmaf(static_cast<float>(w[ky * p.kernel_w + kx]), static_cast<float>(plane[iy * p.in_w + ix]), acc);
        }
      }
      out[(int64_t{oy} * p.out_w + ox) * p.out_channels] = static_cast<scalar_t>(acc);
    }
  }
}

// Bytes of one CTA's stage: the input planes its kChannels output channels read, in the input dtype, plus the
// 16-byte alignment slack of stage_range.
inline int64_t smem_bytes(const DepthwiseGeometry& d, int64_t element_size) {
  return (input_planes_read(d, kChannels) * d.in_h * d.in_w + 16) * element_size;
}

}  // namespace to_nhwc

// Whether depthwise_to_nhwc takes the problem: a contiguous NCHW input of fp32 / fp16 / bf16 whose staged planes fit
// the kernel's shared memory (planes up to about 28x28), with extents in int. The host sets the rest.
inline bool depthwise_to_nhwc_applies(const at::Tensor& input, const DepthwiseGeometry& d) {
  const auto dtype = input.scalar_type();
  if (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) return false;
  if (input.dim() != 4 || !input.is_contiguous() || d.batch == 0 || d.out_h == 0 || d.out_w == 0) return false;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  const int64_t blocks = d.batch * ((d.out_channels + to_nhwc::kChannels - 1) / to_nhwc::kChannels);
  const int64_t smem = to_nhwc::smem_bytes(d, input.element_size());
  return smem <= to_nhwc::kMaxSmem && smem <= max_shared_memory_per_block() && blocks < kIntMax &&
         d.out_channels * d.out_h * d.out_w < kIntMax && d.in_channels * d.in_h * d.in_w < kIntMax;
}

// depthwise_conv2d(input, weight, bias) with geometry d as a channels-last (N, C_out, OH, OW) tensor, where
// depthwise_to_nhwc_applies. weight and bias contiguous.
inline at::Tensor depthwise_to_nhwc(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, const DepthwiseGeometry& d,
                                    cudaStream_t stream) {
  at::Tensor output = at::empty({d.batch, d.out_channels, d.out_h, d.out_w},
                                input.options().memory_format(at::MemoryFormat::ChannelsLast));
  const auto run = [&](auto element) {
    using scalar_t = decltype(element);
    to_nhwc::Params<scalar_t> p{};
    p.input = input.const_data_ptr<scalar_t>();
    p.weight = weight.const_data_ptr<scalar_t>();
    p.bias = optional_data<scalar_t>(bias);
    p.output = output.mutable_data_ptr<scalar_t>();
    p.in_channels = static_cast<int>(d.in_channels);
    p.out_channels = static_cast<int>(d.out_channels);
    p.multiplier = static_cast<int>(d.multiplier);
    p.in_h = static_cast<int>(d.in_h), p.in_w = static_cast<int>(d.in_w);
    p.out_h = static_cast<int>(d.out_h), p.out_w = static_cast<int>(d.out_w);
    p.kernel_h = static_cast<int>(d.kernel_h), p.kernel_w = static_cast<int>(d.kernel_w);
    p.stride_h = static_cast<int>(d.stride_h), p.stride_w = static_cast<int>(d.stride_w);
    p.pad_h = static_cast<int>(d.pad_h), p.pad_w = static_cast<int>(d.pad_w);
    p.dilation_h = static_cast<int>(d.dilation_h), p.dilation_w = static_cast<int>(d.dilation_w);
    p.channel_blocks = static_cast<int>((d.out_channels + to_nhwc::kChannels - 1) / to_nhwc::kChannels);
    const int64_t channel_ctas = d.batch * p.channel_blocks;
    const int64_t wanted = int64_t{to_nhwc::kCtasPerSm} * multiprocessor_count();
    const int64_t row_blocks = channel_ctas >= wanted ? 1 : std::min(d.out_h, ceil_div(wanted, channel_ctas));
    p.rows_per_block = static_cast<int>(ceil_div(d.out_h, row_blocks));
    p.row_blocks = static_cast<int>(ceil_div<int64_t>(d.out_h, p.rows_per_block));  // none left empty
    const auto blocks = static_cast<unsigned>(channel_ctas * p.row_blocks);
    const int smem = static_cast<int>(to_nhwc::smem_bytes(d, sizeof(scalar_t)));
    const auto launch = [&](auto kernel) {
      if (smem > 48 * 1024) allow_dynamic_shared_memory(kernel, smem);  // beyond the default: a driver call, once
      kernel<<<blocks, to_nhwc::kThreads, smem, stream>>>(p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    const bool unit_dilation = d.dilation_h == 1 && d.dilation_w == 1;
    const auto is = [&](int k, int s) {
      return unit_dilation && d.kernel_h == k && d.kernel_w == k && d.stride_h == s && d.stride_w == s;
    };
    if (is(3, 1)) {
      launch(to_nhwc::depthwise_to_nhwc_kernel<scalar_t, 3, 3, 1, 1>);
    } else if (is(3, 2)) {
      launch(to_nhwc::depthwise_to_nhwc_kernel<scalar_t, 3, 3, 2, 2>);
    } else if (is(5, 1)) {
      launch(to_nhwc::depthwise_to_nhwc_kernel<scalar_t, 5, 5, 1, 1>);
    } else if (is(5, 2)) {
      launch(to_nhwc::depthwise_to_nhwc_kernel<scalar_t, 5, 5, 2, 2>);
    } else if (is(7, 1)) {
      launch(to_nhwc::depthwise_to_nhwc_kernel<scalar_t, 7, 7, 1, 1>);
    } else {
      launch(to_nhwc::depthwise_to_nhwc_kernel<scalar_t, 0, 0, 0, 0>);
    }
  };
  switch (input.scalar_type()) {  // the dtypes depthwise_to_nhwc_applies admits
    case at::kFloat: run(float{}); break;
    case at::kHalf: run(at::Half{}); break;
    case at::kBFloat16: run(at::BFloat16{}); break;
    default: TORCH_INTERNAL_ASSERT(false, "depthwise_to_nhwc: unsupported dtype ", input.scalar_type());
  }
  return output;
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
