// Hopper's bulk-copy engine (cp.async.bulk, sm_90) and the shared-memory mbarriers that its copies complete on: the
// few PTX instructions a producer/consumer ring of shared-memory stages needs.
//
// A "full" barrier per stage counts the bytes a copy brings (the producer's arrive.expect_tx sets them, the copy's
// completion pays them); an "empty" barrier per stage counts the consumers that are done reading it. Waits name the
// phase parity they wait for: fill i of a ring of S stages completes phase i / S of its stage's barrier.
#pragma once

#include <cstdint>

namespace convops {
namespace cuda {
namespace bulk {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrier_init(uint64_t* barrier, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
#endif
}

// Makes barrier initialisation and ordinary shared-memory stores (zero fill) visible to the copy engine, which
// works in the async proxy. Every thread that wrote calls it before the block-wide barrier that publishes the data.
__device__ __forceinline__ void fence_for_async_proxy() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
#endif
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

}  // namespace bulk
}  // namespace cuda
}  // namespace convops
