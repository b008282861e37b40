// Hopper's bulk-copy engine (cp.async.bulk and its tensor form, sm_90) and the shared-memory mbarriers that its copies
// complete on: the few PTX instructions a ring of shared-memory stages needs, and the host side (whether a kernel
// may use them here, tensor maps).
//
// A "full" barrier per stage counts the bytes a copy brings (the producer's arrive.expect_tx sets them, the copy's
// completion pays them); an "empty" barrier per stage counts the consumers that are done reading it. Waits name the
// phase parity they wait for: fill i of a ring of S stages completes phase i / S of its stage's barrier.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace bulk {

__device__ __forceinline__ void barrier_init(uint64_t* barrier, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
#endif
}

// Makes barrier initialisation and ordinary shared-memory stores (zero fill) visible to the copy engine, which
// works in the async proxy. Every thread that wrote calls it before the block-wide barrier that publishes the data.
__device__ __forceinline__ void fence_for_async_proxy() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  publish_shared_stores_to_async_proxy();
#endif
}

// Orders this thread's ordinary reads of a ring slot before the copy engine's next write to it: the refill is an
// async-proxy write, which the mbarrier arrive's release does not order against generic-proxy loads (without it, an
// LDS issued before the arrive could still be pending when the refill lands; the depthwise bulk kernel then read a
// vector half of the next row, about one call in 150 on the fp32 seed, H200). Every reading thread calls it before
// its arrive, or before the barrier after which one thread arrives for the others.
__device__ __forceinline__ void fence_reads_before_async_writes() {
  publish_shared_stores_to_async_proxy();  // the same fence: it orders all of the thread's generic accesses
}

__device__ __forceinline__ void arrive(uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
#endif
}

// One arrival that also announces `bytes` still to come from copies completing on this barrier.
__device__ __forceinline__ void arrive_expect_bytes(uint64_t* barrier, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)),
               "r"(bytes)
               : "memory");
#endif
}

// Announces `bytes` still to come from copies completing on this barrier, without arriving: a producer starts its
// copy early and arrives with its other threads once their stores are done.
__device__ __forceinline__ void expect_bytes(uint64_t* barrier, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
#endif
}

// Blocks until the barrier's phase of the given parity has completed (acquire: the stage's data is then visible).
__device__ __forceinline__ void wait(uint64_t* barrier, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t address = shared_address(barrier);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (done == 0);
#endif
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory; completion pays
// `bytes` to `barrier`.
__device__ __forceinline__ void copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(barrier))
      : "memory");
#endif
}

// Copies the box of `tensor_map` at coordinates (x, y, z) (innermost first; parts outside the tensor read as zeros)
// to shared memory (128-byte aligned); completion pays the box's bytes to `barrier`. tensor_map: the address of a
// CUtensorMap in kernel-parameter (__grid_constant__), constant or global memory.
__device__ __forceinline__ void copy_box_to_shared(void* dst, const CUtensorMap* tensor_map, int x, int y, int z,
                                                   uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(x), "r"(y), "r"(z), "r"(shared_address(barrier))
      : "memory");
#endif
}

// Stores the box of `tensor_map` at coordinates (x, y, z, w) (innermost first; parts outside the tensor are not
// written) from shared memory, laid out as the map's swizzle says, into the issuing thread's open bulk group. The
// threads that wrote the box call publish_shared_stores_to_async_proxy before the barrier after which one issues it.
__device__ __forceinline__ void store_box_from_shared(const CUtensorMap* tensor_map, int x, int y, int z, int w,
                                                      const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];" ::"l"(
          reinterpret_cast<uint64_t>(tensor_map)),
      "r"(x), "r"(y), "r"(z), "r"(w), "r"(shared_address(src))
      : "memory");
#endif
}

// Closes the issuing thread's bulk group of stores.
__device__ __forceinline__ void commit_stores() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}

// Blocks until at most kPending of the issuing thread's youngest store groups have not yet read their shared-memory
// sources (which may then be written again). The global writes themselves complete on their own.
template <int kPending>
__device__ __forceinline__ void wait_stores_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
#endif
}

// Whether `kernel` may use bulk copies here: it was built for sm_90 or later and the current device runs it (a build
// for older targets leaves a kernel's copies out, so it must not run), unless CONVOPS_BULK_COPIES=0 turns them off
// (read once; for measuring the bulk-copy kernels against the ones they replace). The build check is made once per
// kernel signature (the first kernel of that type asked about answers for all): every kernel of the extension is
// compiled for the same TORCH_CUDA_ARCH_LIST, so kernels of one signature share the answer.
template <typename Kernel>
bool runs_bulk_copies(Kernel kernel) {
  static const bool built = [kernel] {
    const char* env = std::getenv("CONVOPS_BULK_COPIES");
    if (env != nullptr && env[0] == '0') return false;
    cudaFuncAttributes attributes{};
    return cudaFuncGetAttributes(&attributes, kernel) == cudaSuccess && attributes.ptxVersion >= 90 &&
           attributes.binaryVersion >= 90;
  }();
  return built && device_attribute<cudaDevAttrComputeCapabilityMajor>() >= 9;
}

// The tensor-map element type of scalar_t (fp32, fp16 or bf16).
template <typename scalar_t>
constexpr CUtensorMapDataType tensor_map_type() {
  static_assert(std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, c10::Half> ||
                    std::is_same_v<scalar_t, c10::BFloat16>,
                "tensor maps of fp32, fp16 or bf16");
  return std::is_same_v<scalar_t, float>       ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
         : std::is_same_v<scalar_t, c10::Half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                               : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// Encodes a tensor map of `rank` (1 to 5) dims over `data`: dims and box innermost first, byte strides of dims 1 and
// up, zero fill outside (loads; stores leave what lies outside unwritten), boxes laid out in shared memory as
// `swizzle` says. False where the driver lacks the entry point or rejects the map (the caller then copies some other
// way).
bool encode_tensor_map(CUtensorMap* map, CUtensorMapDataType type, const void* data, int rank, const uint64_t* dims,
                       const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle);

// A 3-D map with dense boxes (no swizzle).
inline bool encode_tensor_map_3d(CUtensorMap* map, CUtensorMapDataType type, const void* data,
                                 const uint64_t (&dims)[3], const uint64_t (&strides)[2], const uint32_t (&box)[3]) {
  return encode_tensor_map(map, type, data, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace bulk
}  // namespace cuda
}  // namespace convops
