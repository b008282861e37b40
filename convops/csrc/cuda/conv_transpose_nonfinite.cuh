// NaN and Inf weights in conv_transpose, as ATen has them (issue #8).
//
// The reference multiplies each weight tap only by real input elements (gemm + col2im): out = bias + the sum of
// x * w over the valid (input element, tap) pairs. The implicit GEMM also multiplies every tap by the zeros around
// the input (its bricks are zero-filled): harmless for a finite tap, NaN for a non-finite one. So:
//
//  1. The main kernel runs on weights whose non-finite entries are made finite (conv_transpose_kernel.cu,
//     transform_weight): +-Inf -> +-tiny, NaN -> 0. Outputs that no non-finite tap reaches are then exactly as
//     before, and the zeros around the input meet only finite taps.
//  2. conv_transpose_nonfinite_weight_kernel then adds x * w (the ORIGINAL w) into the output for every valid pair
//     whose w is non-finite.
//
// Why NaN/+Inf/-Inf land exactly where the reference has them: an output that a non-finite tap reaches is
// non-finite in the reference, and whether it is NaN, +Inf or -Inf depends only on which of those its terms (bias
// included) are, not on their order or how often each occurs. At such an output we add, to the main kernel's value,
// every term x * w with a non-finite w; the main kernel's own non-finite terms are terms of the reference too
// (x * w with a finite w; +-Inf * +-tiny is the infinity +-Inf * +-Inf gives, and a NaN tap is NaN anyway), and its
// other terms are finite and no longer matter. The tiny replacement keeps them small: x * tiny cannot overflow.
// (Replacing +-Inf by 0 would not do: an infinite input times that 0 is NaN where the reference has +-Inf.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/conv_transpose_math.cuh"
#include "cuda/conv_transpose_params.cuh"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {

constexpr int kNonfiniteWeightThreads = 256;

// The weight as the op received it: (G * cin_g, cout_g, KD, KH, KW) with any strides (2-D: KD = 1).
struct RawWeight {
  const void* data;
  int64_t stride[5];
  int64_t numel;
};

__device__ __forceinline__ void atomic_add_to(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_to(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_to(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_to(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }

// Weight entry e of the logical (ci, co, kd, kh, kw) order.
struct WeightTap {
  int64_t in_channel;  // global; its group is in_channel / cin_g
  int64_t out_channel;  // within the group
  int k[3];
  int64_t offset;  // in the weight's storage
};

__device__ __forceinline__ WeightTap weight_tap(int64_t e, const ConvTransposeParams& p, const RawWeight& w) {
  WeightTap t;
  t.offset = 0;
  for (int d = 2; d >= 0; --d) {
    t.k[d] = static_cast<int>(e % p.kernel[d]);
    e /= p.kernel[d];
    t.offset += t.k[d] * w.stride[2 + d];
  }
  t.out_channel = e % p.cout_g;
  t.in_channel = e / p.cout_g;
  t.offset += t.out_channel * w.stride[1] + t.in_channel * w.stride[0];
  return t;
}

// One thread per weight entry, in blocks that return at once when all their entries are finite (the usual case:
// one short launch). A block that holds non-finite entries takes them one by one, its threads splitting the input
// positions of the entry's input channel (all batch items) and adding x * w at the output each one reaches.
template <class Math>
__global__ void __launch_bounds__(kNonfiniteWeightThreads)
    conv_transpose_nonfinite_weight_kernel(const ConvTransposeParams p, const RawWeight w) {
  using Input = typename Math::Input;
  const Input* weight = static_cast<const Input*>(w.data);
  // An operand as the main kernel multiplies it, in the accumulation type: TF32 rounding can take a tiny denormal
  // input to 0 (then 0 * Inf = NaN) and a weight near FLT_MAX to Inf, as in the TF32 reference.
  const auto operand = [](Input v) {
    if constexpr (std::is_base_of_v<Tf32Mma, Math>) {
      return round_tf32(v);
    } else {
      return Math::to_acc(v);
    }
  };
  __shared__ int64_t entries[kNonfiniteWeightThreads];
  __shared__ int count;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kNonfiniteWeightThreads + threadIdx.x;
  if (e < w.numel && !isfinite(operand(weight[weight_tap(e, p, w).offset]))) {
    entries[atomicAdd(&count, 1)] = e;
  }
  __syncthreads();
  const int found = count;
  if (found == 0) return;

  const Input* input = static_cast<const Input*>(p.input);
  Input* output = static_cast<Input*>(p.output);
  const int64_t plane = static_cast<int64_t>(p.in_size[0]) * p.in_size[1] * p.in_size[2];
  const int64_t positions = static_cast<int64_t>(p.batch) * plane;
  for (int f = 0; f < found; ++f) {
    const WeightTap t = weight_tap(entries[f], p, w);
    const auto value = operand(weight[t.offset]);
    const int64_t out_channel = t.in_channel / p.cin_g * p.cout_g + t.out_channel;
    for (int64_t pos = threadIdx.x; pos < positions; pos += kNonfiniteWeightThreads) {
      const int64_t n = pos / plane;
      int64_t in_offset = n * p.in_stride[0] + t.in_channel * p.in_stride[1];
      int64_t out_offset = n * p.out_stride[0] + out_channel * p.out_stride[1];
      int64_t spatial = pos - n * plane;
      bool inside = true;
      for (int d = 2; d >= 0; --d) {
        const int64_t i = spatial % p.in_size[d];
        spatial /= p.in_size[d];
        // o + padding = i * stride + k * dilation: the pairs ATen's col2im adds, and no others
        const int64_t o = i * p.stride[d] - p.padding[d] + static_cast<int64_t>(t.k[d]) * p.dilation[d];
        inside = inside && o >= 0 && o < p.out_size[d];
        in_offset += i * p.in_stride[2 + d];
        out_offset += o * p.out_stride[2 + d];
      }
      if (inside) atomic_add_to(output + out_offset, Math::from_acc(operand(input[in_offset]) * value));
    }
  }
}

}  // namespace cuda
}  // namespace convops
