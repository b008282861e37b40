// The arithmetic of the conv_transpose kernel, one policy per precision mode. The kernel stages the input brick and
// the weights in shared memory as 32-bit (or, for fp64, 64-bit) "words"; a policy says what a word holds, how an
// input element becomes one, and how a block of words is multiplied.
//   Tf32Mma   fp32 input, TF32 tensor cores (operands RN-rounded as cuDNN does), word = one tf32 value
//   Tf32RoundedSumsMma   the same, each k-step's products summed apart and added in fp32 (strict fp32's 3xTF32)
//   Bf16Mma / F16Mma   bf16/fp16 input, m16n8k16 tensor cores, word = two consecutive input channels
//   Fma<T>    strict fp32 (T = float) and fp64 (T = double) on the CUDA cores, word = one value
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {

struct Tf32Mma {
  using Input = float;
  using Word = uint32_t;
  using Acc = float;
  static constexpr bool kTensorCore = true;
  static constexpr int kChannelsPerWord = 1;
  static constexpr bool kAsyncBrick = true;  // copied as raw fp32 with cp.async, then RN-rounded in place
  static constexpr bool kRoundBrick = true;
  static constexpr bool kRoundedSums = false;
  __device__ static Word word(const Input* lo, const Input* /*hi*/) { return lo ? tf32_bits(__ldg(lo)) : 0u; }
  __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    mma_m16n8k8_tf32(d, a, b);
  }
  __device__ static Acc to_acc(Input x) { return x; }
  __device__ static Input from_acc(Acc x) { return x; }
};

// The tensor cores add into their fp32 accumulator with truncation, so over a long reduction their sums drift by
// about an ulp of the running sum a k-step: 7e-5 at outputs of about 5 for 3xTF32 over 3 x 980 terms (H200,
// 2026-11-28), past strict fp32's 5e-5. Here each k-step's MMAs (8 channels, a window of taps) start from zero in
// registers of their own, which are then added to the accumulators in fp32 with rounding to nearest, as FFMA would.
struct Tf32RoundedSumsMma : Tf32Mma {
  static constexpr bool kRoundedSums = true;
};

template <typename Half>
struct HalfMmaBase {
  using Input = Half;
  using Word = uint32_t;
  using Acc = float;
  static constexpr bool kTensorCore = true;
  static constexpr int kChannelsPerWord = 2;
  // A word pairs two channels that are a channel stride apart in memory: built in registers, not copied.
  static constexpr bool kAsyncBrick = false;
  static constexpr bool kRoundBrick = false;
  static constexpr bool kRoundedSums = false;
  // The lower channel goes to the low half, as the m16n8k16 fragments expect.
  __device__ static Word word(const Input* lo, const Input* hi) {
    const uint32_t l = lo ? *reinterpret_cast<const unsigned short*>(lo) : 0u;
    const uint32_t h = hi ? *reinterpret_cast<const unsigned short*>(hi) : 0u;
    return l | (h << 16);
  }
};

struct Bf16Mma : HalfMmaBase<__nv_bfloat16> {
  __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    mma_m16n8k16_bf16(d, a, b);
  }
  __device__ static Acc to_acc(Input x) { return __bfloat162float(x); }
  __device__ static Input from_acc(Acc x) { return __float2bfloat16_rn(x); }
};

struct F16Mma : HalfMmaBase<__half> {
  __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    mma_m16n8k16_f16(d, a, b);
  }
  __device__ static Acc to_acc(Input x) { return __half2float(x); }
  __device__ static Input from_acc(Acc x) { return __float2half_rn(x); }
};

template <typename T>
struct Fma {
  using Input = T;
  using Word = T;
  using Acc = T;
  static constexpr bool kTensorCore = false;
  static constexpr int kChannelsPerWord = 1;
  static constexpr bool kAsyncBrick = true;
  static constexpr bool kRoundBrick = false;
  __device__ static Word word(const Input* lo, const Input* /*hi*/) { return lo ? __ldg(lo) : T(0); }
  __device__ static Acc to_acc(Input x) { return x; }
  __device__ static Input from_acc(Acc x) { return x; }
};

}  // namespace cuda
}  // namespace convops
