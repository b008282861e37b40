// Device-side building blocks shared by the convops CUDA kernels: TF32 rounding, warp-level tensor-core MMA,
// and small integer helpers. Kernels include this instead of writing their own inline PTX.
#pragma once

#include <cuda_runtime.h>
#include <cstdint>
#include <type_traits>

namespace convops {
namespace cuda {

template <typename T>
__host__ __device__ __forceinline__ T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

// V elements of scalar_t as one aligned unit, so that a load or store of it is one vector instruction (16 bytes at
// most: V * sizeof(scalar_t) <= 16).
template <typename scalar_t, int V>
struct alignas(sizeof(scalar_t) * V) AlignedVector {
  scalar_t v[V];
};

// Division of non-negative ints (< 2^31) by a divisor fixed at launch, as a multiply-high, an add and a shift
// instead of the ~20-instruction integer division (Granlund & Montgomery, "Division by invariant integers using
// multiplication", 1994): for d >= 1, shift = ceil(log2 d) and multiplier = floor(2^32 (2^shift - d) / d) + 1 give
// n / d = (umulhi(n, multiplier) + n) >> shift; the sum stays below 2^32 because n < 2^31. Built on the host and
// passed in kernel parameters; index arithmetic in loops that run per tile uses it. tools/probe/fast_divmod_check.py
// checks it against integer division (~10^8 pairs, no GPU needed).
struct FastDivmod {
  uint32_t divisor = 1, multiplier = 1, shift = 0;

  FastDivmod() = default;
  __host__ explicit FastDivmod(int d) : divisor(static_cast<uint32_t>(d)) {
    while ((uint64_t{1} << shift) < divisor) ++shift;
    multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
  }
  __host__ __device__ __forceinline__ int div(int n) const {
#ifdef __CUDA_ARCH__
    const uint32_t high = __umulhi(static_cast<uint32_t>(n), multiplier);
#else
    const uint32_t high = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(n)} * multiplier) >> 32);
#endif
    return static_cast<int>((high + static_cast<uint32_t>(n)) >> shift);
  }
  // quotient = n / divisor, returns n % divisor.
  __host__ __device__ __forceinline__ int divmod(int n, int& quotient) const {
    quotient = div(n);
    return n - quotient * static_cast<int>(divisor);
  }
};

// The multi-index of the flat indices start, start + stride, start + 2 stride, ... of a row-major box (last dimension
// fastest), advanced with adds and one carry per dimension instead of divisions at every step. The outermost index
// is not wrapped: the caller stops at the box's volume.
template <int N>
struct BoxWalk {
  int index[N];   // the current multi-index
  int step[N];    // the stride as a multi-index
  int extent[N];

  __device__ BoxWalk(const int (&extents)[N], int start, int stride) {
    // Unsigned: the division sequence is shorter than the signed one, and nothing here is negative.
    unsigned s = start, t = stride;
#pragma unroll
    for (int d = N - 1; d >= 0; --d) {
      extent[d] = extents[d];
      const unsigned e = extents[d];
      index[d] = d > 0 ? s % e : s;
      step[d] = d > 0 ? t % e : t;
      s /= e;
      t /= e;
    }
  }

  __device__ __forceinline__ void advance() {
    int carry = 0;
#pragma unroll
    for (int d = N - 1; d > 0; --d) {
      index[d] += step[d] + carry;  // < 2 extent: one wrap at most
      carry = index[d] >= extent[d];
      if (carry) index[d] -= extent[d];
    }
    index[0] += step[0] + carry;
  }
};

// Calls f(index, flat) for the flat indices start, start + stride, ... below the volume of a row-major box, with
// their multi-index (BoxWalk): a thread's share of the box when start is its index and stride the thread count.
template <int N, class F>
__device__ __forceinline__ void for_each_in_box(const int (&extents)[N], int start, int stride, F&& f) {
  int volume = 1;
#pragma unroll
  for (int d = 0; d < N; ++d) volume *= extents[d];
  if (start >= volume) return;  // before BoxWalk's divisions
  BoxWalk<N> at(extents, start, stride);
  for (int flat = start; flat < volume; flat += stride, at.advance()) f(at.index, flat);
}

// fp32 -> tf32, rounded to nearest with ties to even, as the GEMM kernels behind PyTorch's TF32 convolutions round
// their operands on Hopper (cuBLAS for 1x1 convolutions, cuDNN's sm90 dgrad kernels for transposed ones; measured
// with tools/probe/tf32_single_product.py and tf32_ties.py). One fp32 value in 8192 is a tie, so the rule shows at
// 1e-4 on seed-sized outputs. The result is an fp32 bit pattern whose low 13 mantissa bits are zero, usable both as
// an MMA operand and in ordinary fp32 arithmetic.
__device__ __forceinline__ uint32_t tf32_bits(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900  // cvt.rn.tf32 needs sm_90: the same rule in integer arithmetic
  const uint32_t b = __float_as_uint(x);
  if ((b & 0x7f800000u) == 0x7f800000u) return (b & ~0x1fffu) | ((b & 0x1fffu) ? 0x400000u : 0u);  // Inf; NaN stays NaN
  return (b + 0xfffu + ((b >> 13) & 1u)) & ~0x1fffu;
#else
  uint32_t r;
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
#endif
}

__device__ __forceinline__ float round_tf32(float x) {
  return __uint_as_float(tf32_bits(x));
}

// x = hi + lo in two TF32 parts, for 3xTF32 products (hi*hi + hi*lo + lo*hi) that keep fp32 accuracy: x - hi is
// exact in fp32, and its own rounding to TF32 loses only what lies below fp32's precision. Round to nearest even:
// on sm_90 cvt.rn.tf32 is one instruction (F2FP.TF32), while cvt.rna.tf32 is emulated in four (nvdisasm of sm_90a
// code, 2026-11-26); with it the splits were most of the GroupNorm block's 3xTF32 GEMM loop.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32_bits(x);
  lo = tf32_bits(x - __uint_as_float(hi));
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Makes this thread's ordinary shared-memory stores visible to the async proxy (wgmma operands, bulk stores), which
// reads shared memory on its own path: every writing thread calls it before the barrier that hands the data over.
__device__ __forceinline__ void publish_shared_stores_to_async_proxy() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Asynchronous global -> shared copy of Bytes (4, 8 or 16; 16 bypasses L1); valid == false writes zeros and reads
// nothing. Group the copies with cp_async_commit and wait for all but the Pending youngest groups with
// cp_async_wait<Pending>, then __syncthreads before other threads read what they brought in. The "memory" clobbers
// keep the compiler from moving shared-memory accesses across these instructions.
template <int Bytes>
__device__ __forceinline__ void cp_async_zfill(void* dst, const void* src, bool valid) {
  const int src_bytes = valid ? Bytes : 0;
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(shared_address(dst)), "l"(src), "n"(Bytes),
                 "r"(src_bytes)
                 : "memory");
  }
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// *dst = value where `store` holds, as one predicated instruction. Written as a branch, the compiler moves the
// computation of `value` (a shared-memory load and its address) into it, and at a kernel's register cap rebuilds the
// address there every time. A plain (write-back) store: the streaming hint (st.global.cs, __stcs) made the
// row-streaming separable kernel's fp32 rows slower (seed, H200: 1.0265 against 1.0191 ms).
__device__ __forceinline__ void store_vector_if(bool store, uint4* dst, const uint4& value) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p st.global.v4.b32 [%1], {%2, %3, %4, %5};\n}\n" ::"r"(
          static_cast<int>(store)),
      "l"(dst), "r"(value.x), "r"(value.y), "r"(value.z), "r"(value.w)
      : "memory");
}

// *dst = value where `store` holds, for one 8-, 4- or 2-byte value, as one predicated instruction: a kernel whose
// epilogue reads wgmma accumulators must not read them on a divergent path (ptxas then serializes its wgmma, warning
// C7520), and a branch around each store is one.
template <typename T>
__device__ __forceinline__ void store_if(bool store, T* dst, T value) {
  static_assert(sizeof(T) == 8 || sizeof(T) == 4 || sizeof(T) == 2, "8-, 4- or 2-byte elements");
  if constexpr (sizeof(T) == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(&value);
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p st.global.v2.b32 [%1], {%2, %3};\n}\n" ::"r"(
                     static_cast<int>(store)),
                 "l"(dst), "r"(v.x), "r"(v.y)
                 : "memory");
  } else if constexpr (sizeof(T) == 4) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p st.global.b32 [%1], %2;\n}\n" ::"r"(
                     static_cast<int>(store)),
                 "l"(dst), "r"(*reinterpret_cast<const uint32_t*>(&value))
                 : "memory");
  } else {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %0, 0;\n @p st.global.b16 [%1], %2;\n}\n" ::"r"(
                     static_cast<int>(store)),
                 "l"(dst), "h"(*reinterpret_cast<const unsigned short*>(&value))
                 : "memory");
  }
}

// *src (read-only data, through the non-coherent path) where `load` holds, else 0, as one predicated instruction:
// written with branches around them, a thread's loads need not all be in flight before the first result is used.
template <typename T>
__device__ __forceinline__ T load_or_zero(bool load, const void* src) {
  if constexpr (std::is_same_v<T, uint4>) {
    uint4 v;
    asm("{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n"
        " mov.b32 %3, 0;\n @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%5];\n}\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "r"(static_cast<int>(load)), "l"(src));
    return v;
  } else if constexpr (std::is_same_v<T, uint2>) {
    uint2 v;
    asm("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n"
        " @p ld.global.nc.v2.u32 {%0, %1}, [%3];\n}\n"
        : "=r"(v.x), "=r"(v.y)
        : "r"(static_cast<int>(load)), "l"(src));
    return v;
  } else if constexpr (std::is_same_v<T, uint32_t>) {
    uint32_t v;
    asm("{\n .reg .pred p;\n setp.ne.b32 p, %1, 0;\n mov.b32 %0, 0;\n @p ld.global.nc.u32 %0, [%2];\n}\n"
        : "=r"(v)
        : "r"(static_cast<int>(load)), "l"(src));
    return v;
  } else {
    static_assert(std::is_same_v<T, uint16_t>, "a 16-, 8-, 4- or 2-byte load");
    unsigned short v;
    asm("{\n .reg .pred p;\n setp.ne.b32 p, %1, 0;\n mov.b16 %0, 0;\n @p ld.global.nc.u16 %0, [%2];\n}\n"
        : "=h"(v)
        : "r"(static_cast<int>(load)), "l"(src));
    return v;
  }
}

// D += A * B on one warp, m16n8k8, TF32 operands, fp32 accumulators (PTX ISA "mma.sync ... .tf32").
// Fragment layouts (g = lane / 4, t = lane % 4):
//   a[0]=(g, t) a[1]=(g+8, t) a[2]=(g, t+4) a[3]=(g+8, t+4)   -- A is 16x8, row-major (row, k)
//   b[0]=(k=t, n=g) b[1]=(k=t+4, n=g)                          -- B is 8x8 (k, n)
//   d[0]=(g, 2t) d[1]=(g, 2t+1) d[2]=(g+8, 2t) d[3]=(g+8, 2t+1)
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// D += A * B on one warp, m16n8k16, bf16 or fp16 operands packed two per register, fp32 accumulators.
// Fragment layouts (g = lane / 4, t = lane % 4), each register holding two consecutive k:
//   a[0]=(g, 2t..2t+1) a[1]=(g+8, 2t..) a[2]=(g, 2t+8..) a[3]=(g+8, 2t+8..)
//   b[0]=(k=2t..2t+1, n=g) b[1]=(k=2t+8.., n=g)
//   d as for m16n8k8.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace cuda
}  // namespace convops
