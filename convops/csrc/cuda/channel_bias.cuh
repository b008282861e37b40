// Adds a per-channel bias in place to a contiguous (N, C, inner) tensor: the pointwise bias of the separable op's
// mixed path, after its 1x1 GEMM (depthwise_separable_conv2d_kernel.cu).
//
// Why not `out.add_(bias.view({1, C, 1}))`: TensorIterator takes its strided, unvectorized loop for a broadcast
// operand, and on the ConvNeXt-T batch-32 bf16 layers that add was the mixed path's largest cost (H200, 2026-11-26
// 23:50 UTC, torch 2.11: 122 us for the 77 MB output of c96 56x56 -> 384, where reading and writing it once takes
// about 37; 55 us for c192 28x28 -> 768). Here a warp walks one (n, c) plane with vectors as wide as the plane's
// length allows, so the bias is one load a plane and the indexing one division a plane. The sum is ATen's: in fp32
// (double for double), rounded once to the output's dtype, so results are bitwise those of add_.
#pragma once

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace channel_bias {

constexpr int kThreads = 256;
constexpr int kUnroll = 2;  // vectors a lane has in flight

// Warp w handles planes w, w + warps, ...; plane p = n C + c gets bias[c]. `vectors`: a plane's length / V.
template <typename scalar_t, int V>
__global__ void __launch_bounds__(kThreads) add_channel_bias_kernel(scalar_t* __restrict__ out,
                                                                    const scalar_t* __restrict__ bias, int64_t planes,
                                                                    int channels, int vectors) {
  using acc_t = at::opmath_type<scalar_t>;
  using Vec = AlignedVector<scalar_t, V>;
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t plane = (int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32; plane < planes; plane += warps) {
    const acc_t b = static_cast<acc_t>(bias[plane % channels]);
    Vec* row = reinterpret_cast<Vec*>(out) + plane * vectors;
    for (int i0 = lane; i0 < vectors; i0 += 32 * kUnroll) {
      Vec x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + 32 * u;
        if (i < vectors) x[u] = row[i];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + 32 * u;
        if (i >= vectors) continue;
#pragma unroll
        for (int e = 0; e < V; ++e) x[u].v[e] = static_cast<scalar_t>(static_cast<acc_t>(x[u].v[e]) + b);
        row[i] = x[u];
      }
    }
  }
}

template <typename scalar_t, int V>
void launch(const at::Tensor& out, const at::Tensor& bias, int64_t planes, int channels, int64_t inner) {
  constexpr int kWarpsPerBlock = kThreads / 32;  // a warp per plane, at most 8 blocks an SM (the rest loop)
  const int64_t blocks = std::min<int64_t>((planes + kWarpsPerBlock - 1) / kWarpsPerBlock,
                                           int64_t{multiprocessor_count()} * 8);
  add_channel_bias_kernel<scalar_t, V><<<static_cast<unsigned>(blocks), kThreads, 0,
                                         c10::cuda::getCurrentCUDAStream()>>>(
      out.mutable_data_ptr<scalar_t>(), bias.const_data_ptr<scalar_t>(), planes, channels,
      static_cast<int>(inner / V));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The widest vector, from 16 bytes down, whose length divides a plane (the base is 16-byte aligned).
template <typename scalar_t, int V = 16 / static_cast<int>(sizeof(scalar_t))>
void launch_widest(const at::Tensor& out, const at::Tensor& bias, int64_t planes, int channels, int64_t inner) {
  if constexpr (V > 1) {
    if (inner % V != 0) return launch_widest<scalar_t, V / 2>(out, bias, planes, channels, inner);
  }
  launch<scalar_t, V>(out, bias, planes, channels, inner);
}

}  // namespace channel_bias

// out (N, C, inner...) += bias (C) broadcast over the rest, in place. Returns false without doing anything where
// this kernel does not apply (out not contiguous or not 16-byte aligned, dtypes differ, fp64, a plane of 2^31
// elements or more), so that the caller adds with ATen.
inline bool add_channel_bias_(const at::Tensor& out, const at::Tensor& bias) {
  if (out.dim() < 2 || !out.is_contiguous() || !bias.is_contiguous() || bias.dim() != 1 ||
      bias.size(0) != out.size(1) || bias.scalar_type() != out.scalar_type() ||
      reinterpret_cast<uintptr_t>(out.const_data_ptr()) % 16 != 0 || out.numel() == 0) {
    return false;
  }
  const int64_t channels = out.size(1), planes = out.size(0) * channels, inner = out.numel() / planes;
  if (inner >= std::numeric_limits<int>::max() || channels >= std::numeric_limits<int>::max()) return false;
  const int c = static_cast<int>(channels);
  switch (out.scalar_type()) {
    case at::kFloat: channel_bias::launch_widest<float>(out, bias, planes, c, inner); break;
    case at::kHalf: channel_bias::launch_widest<at::Half>(out, bias, planes, c, inner); break;
    case at::kBFloat16: channel_bias::launch_widest<at::BFloat16>(out, bias, planes, c, inner); break;
    default: return false;  // fp64: the mixed path never runs its 1x1 as a GEMM there
  }
  return true;
}

}  // namespace cuda
}  // namespace convops
