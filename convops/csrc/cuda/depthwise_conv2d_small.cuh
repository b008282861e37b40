// Small-problem depthwise kernel: a path of convops::depthwise_conv2d for contiguous NCHW problems with a square 3x3
// or 5x5 filter, stride 1 or 2 and dilation 1. One thread computes one output straight from global memory. The
// dispatch gives it the latency-bound problems where it is the fastest convops kernel (small_kernel_pays).
//
// Why (issue #5 sweep, batch-1 rows where the op had to take cuDNN's kernel): a problem of at most 2^18 outputs
// (is_small_problem: the sweep's batch-1 layers) runs for a few microseconds, nearly all of it latency, not
// bandwidth. H200, 2026-11-27 23:59 UTC, do_bench medians with an L2 flush, fp32 / bf16 (us): an empty kernel 3.6; a
// clone of the input 4.5 / 4.4 (14x14 x 384 channels) to 5.6 / 5.0 (56x56 x 144); cuDNN's depthwise kernel 5.7 /
// 5.6 to 6.8 / 6.4; the convops kernels then taken (register-blocked, plane-block) 6.3 / 6.0 to 7.9 / 7.6. Those
// copy their planes into shared memory, wait for the copy, meet at a barrier and only then compute: dependent steps
// before the first store, and long per-block chains in the few blocks a small problem has. Here every load a thread
// needs (the filter, the bias and the input taps) is independent of the others, so a thread waits for about one
// round trip to memory, as the clone does, then adds its taps and stores; a window's neighbouring taps share cache
// lines, which L1 serves.
//
// Rounding: the bias (or 0) plus one fmaf per tap in (ky, kx) order, taps outside the image skipped, as the other
// depthwise kernels (depthwise_stencil.cuh, tap_sum), so fp32 results are bitwise theirs.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "common/checks.h"
#include "cuda/depthwise_conv2d_launch.cuh"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {
namespace small {

// Small blocks: a 2^18-output problem is 2,048 of them, and a batch-1 layer of 38K outputs still spreads over 297.
constexpr int kThreads = 128;

template <typename scalar_t>
struct SmallParams {
  const scalar_t* __restrict__ input;
  const scalar_t* __restrict__ weight;
  const scalar_t* __restrict__ bias;  // nullptr: no bias
  scalar_t* __restrict__ output;
  int in_h, in_w, out_h, out_w, pad_h, pad_w;
  int out_channels, multiplier;
  int outputs;  // batch * out_channels * out_h * out_w
};

// One depthwise output straight from global memory: `bias` plus one fmaf per tap of the K x K window whose top-left
// tap is (iy0, ix0) in the plane `src`, taps outside the plane skipped. Every load is issued before the sum starts,
// each independent of the others. Also the depthwise stage of the small-problem separable kernel
// (depthwise_separable_conv2d_small.cuh).
template <typename scalar_t, int K>
__device__ __forceinline__ float window_sum(const scalar_t* __restrict__ src, const scalar_t* __restrict__ filter,
                                            float bias, int iy0, int ix0, int in_h, int in_w) {
  float w[K][K], x[K][K];
  bool inside[K][K];
#pragma unroll
  for (int ky = 0; ky < K; ++ky) {
#pragma unroll
    for (int kx = 0; kx < K; ++kx) {
      const int iy = iy0 + ky, ix = ix0 + kx;
      inside[ky][kx] = static_cast<unsigned>(iy) < static_cast<unsigned>(in_h) &&
                       static_cast<unsigned>(ix) < static_cast<unsigned>(in_w);
      w[ky][kx] = static_cast<float>(filter[ky * K + kx]);
      x[ky][kx] = inside[ky][kx] ? static_cast<float>(src[iy * in_w + ix]) : 0.0f;
    }
  }
  float sum = bias;
#pragma unroll
  for (int ky = 0; ky < K; ++ky) {
#pragma unroll
    for (int kx = 0; kx < K; ++kx) {
      if (inside[ky][kx]) sum = fmaf(w[ky][kx], x[ky][kx], sum);
    }
  }
  return sum;
}

template <typename scalar_t, int K, int S>
__global__ void __launch_bounds__(kThreads) depthwise_small_kernel(const SmallParams<scalar_t> p) {
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= p.outputs) return;
  const int ox = i % p.out_w;
  const int rows = i / p.out_w;  // (plane, oy) flattened
  const int oy = rows % p.out_h;
  const int plane = rows / p.out_h;  // n * C_out + co
  const int co = plane % p.out_channels;
  // Output plane n * C_out + co reads input plane n * C_in + co / multiplier = plane / multiplier (C_out = m C_in).
  const scalar_t* __restrict__ src = p.input + int64_t{plane / p.multiplier} * p.in_h * p.in_w;
  const float bias = p.bias != nullptr ? static_cast<float>(p.bias[co]) : 0.0f;
  p.output[i] = static_cast<scalar_t>(
      window_sum<scalar_t, K>(src, p.weight + co * K * K, bias, oy * S - p.pad_h, ox * S - p.pad_w, p.in_h, p.in_w));
}

template <typename scalar_t, int K>
void launch_small_kernel(const SmallParams<scalar_t>& p, int stride, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((p.outputs + kThreads - 1) / kThreads);
  if (stride == 1) {
    depthwise_small_kernel<scalar_t, K, 1><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    depthwise_small_kernel<scalar_t, K, 2><<<blocks, kThreads, 0, stream>>>(p);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace small

// Where the dispatch takes this kernel: small problems (is_small_problem) with 3x3 or 5x5 filters, but not stride-1
// outputs 28 or more wide, where the register-blocked kernel (depthwise_conv2d_blocked.cuh) is faster. H200, batch
// 1, do_bench us, fp32 / bf16: this kernel forced (2026-11-28 00:09 UTC), the kernel the dispatch took before it (the
// full run of 2026-11-27 22:45 / 22:51 UTC: register-blocked for stride 1, plane-block for stride 2 and odd 16-bit
// widths) and cuDNN (00:09): 14x14 3x3 (c384) 5.2 / 5.0, 6.3 / 5.9, 5.5 / 5.3; 7x7 3x3 (c960) 4.9 / 4.9, 6.4 / 6.9,
// 5.6 / 5.8; 56x56 3x3 stride 2 (c144) 6.0 / 5.9, 7.9 / 7.6, 6.6 / 6.2; 7x7 5x5 (c1152) 6.1 / 5.5, 6.8 / 7.0, 6.7 /
// 6.6. But 28x28 5x5 (c240) 7.5 / 7.5 against the register-blocked kernel's 6.9 / 6.6. 7x7 filters are not taken:
// 28x28 9.1 / 8.1 against 8.2 / 7.4, 14x14 8.3 / 7.5 against 6.6 / 6.9, since ptxas interleaves a thread's 49 taps'
// loads with the sum (a few loads, then their adds), so their round trips to L1 queue one after another.
inline bool small_kernel_pays(const DepthwiseGeometry& d) {
  return is_small_problem(d) && (d.kernel_w == 3 || d.kernel_w == 5) && !(d.stride_w == 1 && d.out_w >= 28);
}

// Runs depthwise_conv2d on the small-problem kernel and returns true, or returns false without doing anything when
// the problem is not one it takes: fp64, non-contiguous tensors, a filter other than 3x3 / 5x5, stride other
// than 1 or 2 (the same along H and W), dilation, or 2^31 outputs or more (it indexes them with int). It takes
// problems of any size; the dispatch gives it the small ones. weight and bias must be contiguous; output non-empty.
template <typename scalar_t>
bool launch_depthwise_small(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            at::Tensor& output, const DepthwiseGeometry& d, cudaStream_t stream) {
  if constexpr (std::is_same_v<scalar_t, double>) {
    return false;
  } else {
    if (!input.is_contiguous() || !output.is_contiguous() || output.numel() == 0) return false;
    const int64_t k = d.kernel_h, s = d.stride_h;
    if (d.kernel_w != k || (k != 3 && k != 5) || d.stride_w != s || (s != 1 && s != 2)) return false;
    if (d.dilation_h != 1 || d.dilation_w != 1) return false;
    constexpr int64_t kIntMax = std::numeric_limits<int>::max();
    // Outputs, and the input offsets within a plane (iy * in_w + ix, padding included), in int.
    if (output.numel() >= kIntMax || (d.in_h + 2 * d.pad_h + k) * (d.in_w + 2 * d.pad_w + k) >= kIntMax) {
      return false;
    }
    small::SmallParams<scalar_t> p{};
    p.input = input.const_data_ptr<scalar_t>();
    p.weight = weight.const_data_ptr<scalar_t>();
    p.bias = optional_data<scalar_t>(bias);
    p.output = output.mutable_data_ptr<scalar_t>();
    p.in_h = static_cast<int>(d.in_h);
    p.in_w = static_cast<int>(d.in_w);
    p.out_h = static_cast<int>(d.out_h);
    p.out_w = static_cast<int>(d.out_w);
    p.pad_h = static_cast<int>(d.pad_h);
    p.pad_w = static_cast<int>(d.pad_w);
    p.out_channels = static_cast<int>(d.out_channels);
    p.multiplier = static_cast<int>(d.multiplier);
    p.outputs = static_cast<int>(output.numel());
    const int stride = static_cast<int>(s);
    if (k == 3) small::launch_small_kernel<scalar_t, 3>(p, stride, stream);
    else small::launch_small_kernel<scalar_t, 5>(p, stride, stream);
    return true;
  }
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
