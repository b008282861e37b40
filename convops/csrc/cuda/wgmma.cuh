// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): the few PTX instructions a kernel needs to multiply two
// shared-memory operands into a warpgroup's registers.
//
// wgmma exists only in code compiled for the arch-specific target sm_90a (setup.py builds that target wherever
// TORCH_CUDA_ARCH_LIST asks for compute capability 9.0). CONVOPS_HAS_WGMMA says, in device code, whether this pass
// compiles for it; a kernel chooses its MMA at compile time from it, so the machine code the driver loads always
// matches the shared-memory layouts the same code writes.
//
// Operands are in the canonical K-major layout without swizzling: a "core matrix" is 8 rows of 16 contiguous bytes
// (128 bytes); the descriptor gives the byte distance between core matrices adjacent along K (leading) and along
// M or N (stride). One instruction consumes K = 32 bytes of each row (8 TF32 or 16 half values): two core matrices.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CONVOPS_HAS_WGMMA 1
#else
#define CONVOPS_HAS_WGMMA 0
#endif

namespace convops {
namespace cuda {
namespace wgmma {

// Whether the machine code this extension loads on the current device has wgmma (host code; a kernel that needs it
// runs only where this holds): setup.py defines CONVOPS_SM90A_CODE where it builds sm_90a, whose code the driver
// loads on compute capability 9.0 only.
inline bool runs_here() {
#if defined(CONVOPS_SM90A_CODE)
  return device_attribute<cudaDevAttrComputeCapabilityMajor>() == 9 &&
         device_attribute<cudaDevAttrComputeCapabilityMinor>() == 0;
#else
  return false;
#endif
}

constexpr int kCoreRows = 8, kCoreBytes = 128, kStepBytes = 32;  // a core matrix; K bytes a row an instruction takes

// Byte offset of element (row, k) of a K-major operand whose 8-row groups lie `stride` bytes apart and whose k-steps
// (kStepBytes of each row) lie step_bytes apart.
__host__ __device__ constexpr int offset(int row, int k_bytes, int stride, int step_bytes) {
  return k_bytes / kStepBytes * step_bytes + row / kCoreRows * stride + k_bytes % kStepBytes / 16 * kCoreBytes +
         row % kCoreRows * 16 + k_bytes % 16;
}

// Shared-memory matrix descriptor: start address, leading (K) and stride (M/N) byte offsets, no swizzle.
__device__ __forceinline__ uint64_t descriptor(const void* start, uint32_t leading, uint32_t stride) {
  const uint32_t address = shared_address(start);
  return uint64_t{(address & 0x3ffff) >> 4} | uint64_t{(leading & 0x3ffff) >> 4} << 16 |
         uint64_t{(stride & 0x3ffff) >> 4} << 32;
}

// The descriptor of the operand `bytes` (a multiple of 16) further on: the start address is the low field, in units
// of 16 bytes, and shared-memory addresses stay below 2^18, so the addition never carries out of it.
// (A 32-bit addition to the low word: the high word, the stride, stays the constant it was built from.)
__device__ __forceinline__ uint64_t advance(uint64_t descriptor, uint32_t bytes) {
  const uint32_t low = static_cast<uint32_t>(descriptor) + (bytes >> 4);
  return (descriptor & 0xffffffff00000000ull) | low;
}

// A K-major operand of kRows rows (its M or N extent) laid out as `offset` says: 8-row groups kGroupStride bytes
// apart, the rows' k-steps kStepStride bytes apart. Where it is placed and how wgmma reads it, in one place.
template <int kRows, int kGroupStride>
struct KMajor {
  static constexpr int kStepStride = kRows / kCoreRows * kGroupStride;
  // Byte offset of element (row, k) of elements of element_bytes bytes.
  __host__ __device__ static constexpr int at(int row, int k, int element_bytes) {
    return offset(row, k * element_bytes, kGroupStride, kStepStride);
  }
  // The descriptor of k-step 0 of the rows from first_row on (a multiple of 8), the operand at `base`; step() moves
  // it to another k-step. A kernel that multiplies the same rows again and again builds it once: built anew, each
  // descriptor costs the masks and shifts of descriptor() (about 14 instructions a k-step for two operands, in the
  // row-streaming separable kernel's SASS).
  __device__ __forceinline__ static uint64_t rows_descriptor(const void* base, int first_row) {
    return descriptor(static_cast<const unsigned char*>(base) + first_row / kCoreRows * kGroupStride, kCoreBytes,
                      kGroupStride);
  }
  __device__ __forceinline__ static uint64_t step(uint64_t rows, int k_step) {
    return advance(rows, k_step * kStepStride);
  }
  __device__ __forceinline__ static uint64_t step_descriptor(const void* base, int k_step, int first_row) {
    return step(rows_descriptor(base, first_row), k_step);
  }
};

// Orders this thread's earlier accesses of the registers a wgmma uses (its accumulators) before the warpgroup's next
// wgmma. (Shared-memory operands written by ordinary stores need publish_stores.)
__device__ __forceinline__ void fence() {
#if CONVOPS_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void commit() {
#if CONVOPS_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

// Waits until at most `kPending` committed groups of this warpgroup are still running.
template <int kPending>
__device__ __forceinline__ void wait() {
#if CONVOPS_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
#endif
}

// Makes this thread's ordinary shared-memory stores visible to wgmma (device_utils.cuh): every writing thread calls
// it before the barrier that hands the operands over.
__device__ __forceinline__ void publish_stores() { publish_shared_stores_to_async_proxy(); }

// Keeps the compiler from moving accesses of the accumulators across this point: wgmma reads and writes them
// asynchronously between its issue and the wait, which the compiler cannot see.
template <int N>
__device__ __forceinline__ void pin(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

// The accumulator operands of the instructions below and their registers, written once in pieces (a[0..11],
// a[12..31], a[32..63], a[64..95]) that the lists of 12, 32, 64 and 96 (m64n24 to m64n192) are made of.
#define CONVOPS_WGMMA_ACC_0_11(a) "+f"(a[0]), "+f"(a[1]), "+f"(a[2]), "+f"(a[3]), "+f"(a[4]), "+f"(a[5]), "+f"(a[6]), \
    "+f"(a[7]), "+f"(a[8]), "+f"(a[9]), "+f"(a[10]), "+f"(a[11])
#define CONVOPS_WGMMA_REGS_0_11 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11"
#define CONVOPS_WGMMA_ACC_12_31(a) "+f"(a[12]), "+f"(a[13]), "+f"(a[14]), "+f"(a[15]), "+f"(a[16]), "+f"(a[17]), \
    "+f"(a[18]), "+f"(a[19]), "+f"(a[20]), "+f"(a[21]), "+f"(a[22]), "+f"(a[23]), "+f"(a[24]), "+f"(a[25]),      \
    "+f"(a[26]), "+f"(a[27]), "+f"(a[28]), "+f"(a[29]), "+f"(a[30]), "+f"(a[31])
#define CONVOPS_WGMMA_REGS_12_31 \
  "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define CONVOPS_WGMMA_ACC_32_63(a) "+f"(a[32]), "+f"(a[33]), "+f"(a[34]), "+f"(a[35]), "+f"(a[36]), "+f"(a[37]), \
    "+f"(a[38]), "+f"(a[39]), "+f"(a[40]), "+f"(a[41]), "+f"(a[42]), "+f"(a[43]), "+f"(a[44]), "+f"(a[45]),      \
    "+f"(a[46]), "+f"(a[47]), "+f"(a[48]), "+f"(a[49]), "+f"(a[50]), "+f"(a[51]), "+f"(a[52]), "+f"(a[53]),      \
    "+f"(a[54]), "+f"(a[55]), "+f"(a[56]), "+f"(a[57]), "+f"(a[58]), "+f"(a[59]), "+f"(a[60]), "+f"(a[61]),      \
    "+f"(a[62]), "+f"(a[63])
#define CONVOPS_WGMMA_REGS_32_63 \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, " \
  "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define CONVOPS_WGMMA_ACC_64_95(a) "+f"(a[64]), "+f"(a[65]), "+f"(a[66]), "+f"(a[67]), "+f"(a[68]), "+f"(a[69]), \
    "+f"(a[70]), "+f"(a[71]), "+f"(a[72]), "+f"(a[73]), "+f"(a[74]), "+f"(a[75]), "+f"(a[76]), "+f"(a[77]),      \
    "+f"(a[78]), "+f"(a[79]), "+f"(a[80]), "+f"(a[81]), "+f"(a[82]), "+f"(a[83]), "+f"(a[84]), "+f"(a[85]),      \
    "+f"(a[86]), "+f"(a[87]), "+f"(a[88]), "+f"(a[89]), "+f"(a[90]), "+f"(a[91]), "+f"(a[92]), "+f"(a[93]),      \
    "+f"(a[94]), "+f"(a[95])
#define CONVOPS_WGMMA_REGS_64_95 \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, " \
  "%86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define CONVOPS_WGMMA_ACC12(a) CONVOPS_WGMMA_ACC_0_11(a)
#define CONVOPS_WGMMA_ACC32(a) CONVOPS_WGMMA_ACC12(a), CONVOPS_WGMMA_ACC_12_31(a)
#define CONVOPS_WGMMA_ACC64(a) CONVOPS_WGMMA_ACC32(a), CONVOPS_WGMMA_ACC_32_63(a)
#define CONVOPS_WGMMA_ACC96(a) CONVOPS_WGMMA_ACC64(a), CONVOPS_WGMMA_ACC_64_95(a)
#define CONVOPS_WGMMA_D12 "{" CONVOPS_WGMMA_REGS_0_11 "}"
#define CONVOPS_WGMMA_D32 "{" CONVOPS_WGMMA_REGS_0_11 ", " CONVOPS_WGMMA_REGS_12_31 "}"
#define CONVOPS_WGMMA_D64 "{" CONVOPS_WGMMA_REGS_0_11 ", " CONVOPS_WGMMA_REGS_12_31 ", " CONVOPS_WGMMA_REGS_32_63 "}"
#define CONVOPS_WGMMA_D96                                                                                \
  "{" CONVOPS_WGMMA_REGS_0_11 ", " CONVOPS_WGMMA_REGS_12_31 ", " CONVOPS_WGMMA_REGS_32_63 ", " \
      CONVOPS_WGMMA_REGS_64_95 "}"

// One wgmma instruction, SHAPE_TYPES ("m64n64k8.f32.tf32.tf32", ...) with accumulators ACC(acc) listed as D, the
// operand numbers of the descriptors a and b and of the accumulate flag (A, B, P) and the instruction's immediates
// (IMM: the scales, and for 16-bit operands the transposes, none).
#if CONVOPS_HAS_WGMMA
#define CONVOPS_WGMMA(SHAPE_TYPES, ACC, D, A, B, P, IMM)                                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\n"                                                   \
               "wgmma.mma_async.sync.aligned." SHAPE_TYPES " " D ", %" A ", %" B ", p" IMM ";\n}\n"              \
               : ACC(acc)                                                                                         \
               : "l"(a), "l"(b), "r"(static_cast<int>(accumulate))                                                \
               : "memory")
#else
#define CONVOPS_WGMMA(SHAPE_TYPES, ACC, D, A, B, P, IMM) ((void)acc, (void)a, (void)b, (void)accumulate)
#endif

// For N output columns (R = N / 2 accumulators a thread): mma_m64n<N>k8_tf32, acc (64 x N, f32, the m64nNk8
// fragment order) = A (64 x 8, TF32) * B (8 x N, TF32) + (accumulate ? acc : 0), both operands K-major in shared
// memory; and mma_m64n<N>k16<kBf16>, the same for 16-bit operands (K = 16), bf16 or fp16 as kBf16 says.
// Asynchronous: the accumulators are the warpgroup's only after commit() and wait(). Starting a sum with
// accumulate = false, rather than writing the accumulators first, keeps ordinary instructions from defining them
// while wgmma may be in flight (ptxas would then serialize the wgmma).
#define CONVOPS_WGMMA_SHAPE(N, R, ACC, D, A, B, P)                                                                 \
  __device__ __forceinline__ void mma_m64n##N##k8_tf32(float (&acc)[R], uint64_t a, uint64_t b, bool accumulate) { \
    CONVOPS_WGMMA("m64n" #N "k8.f32.tf32.tf32", ACC, D, A, B, P, ", 1, 1");                                         \
  }                                                                                                                \
  template <bool kBf16>                                                                                            \
  __device__ __forceinline__ void mma_m64n##N##k16(float (&acc)[R], uint64_t a, uint64_t b, bool accumulate) {     \
    if constexpr (kBf16) {                                                                                         \
      CONVOPS_WGMMA("m64n" #N "k16.f32.bf16.bf16", ACC, D, A, B, P, ", 1, 1, 0, 0");                                \
    } else {                                                                                                       \
      CONVOPS_WGMMA("m64n" #N "k16.f32.f16.f16", ACC, D, A, B, P, ", 1, 1, 0, 0");                                  \
    }                                                                                                              \
  }

CONVOPS_WGMMA_SHAPE(192, 96, CONVOPS_WGMMA_ACC96, CONVOPS_WGMMA_D96, "96", "97", "98")
CONVOPS_WGMMA_SHAPE(128, 64, CONVOPS_WGMMA_ACC64, CONVOPS_WGMMA_D64, "64", "65", "66")
CONVOPS_WGMMA_SHAPE(64, 32, CONVOPS_WGMMA_ACC32, CONVOPS_WGMMA_D32, "32", "33", "34")
CONVOPS_WGMMA_SHAPE(24, 12, CONVOPS_WGMMA_ACC12, CONVOPS_WGMMA_D12, "12", "13", "14")

#undef CONVOPS_WGMMA_SHAPE
#undef CONVOPS_WGMMA
#undef CONVOPS_WGMMA_D12
#undef CONVOPS_WGMMA_ACC12

#undef CONVOPS_WGMMA_D32
#undef CONVOPS_WGMMA_ACC32
#undef CONVOPS_WGMMA_D64
#undef CONVOPS_WGMMA_ACC64
#undef CONVOPS_WGMMA_D96
#undef CONVOPS_WGMMA_ACC96
#undef CONVOPS_WGMMA_ACC_0_11
#undef CONVOPS_WGMMA_REGS_0_11
#undef CONVOPS_WGMMA_ACC_12_31
#undef CONVOPS_WGMMA_REGS_12_31
#undef CONVOPS_WGMMA_ACC_32_63
#undef CONVOPS_WGMMA_REGS_32_63
#undef CONVOPS_WGMMA_ACC_64_95
#undef CONVOPS_WGMMA_REGS_64_95

}  // namespace wgmma
}  // namespace cuda
}  // namespace convops
