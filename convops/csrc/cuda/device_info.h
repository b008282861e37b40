// Host-side facts about the current CUDA device, read once per device: kernels' launch planning asks on every call,
// and a driver query per call is measurable on launch-bound (batch-1) layers.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

namespace convops {
namespace cuda {

// Attribute `Attr` (a count or a version: not negative) of the current device, read once per device.
template <cudaDeviceAttr Attr>
int device_attribute() {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cached{};  // the value + 1; 0: not read yet (values may be 0)
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= 0 && device < kMaxDevices) {
    if (const int stored = cached[device].load(std::memory_order_relaxed); stored > 0) return stored - 1;
  }
  int value = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, Attr, device));
  if (device >= 0 && device < kMaxDevices && value >= 0) cached[device].store(value + 1, std::memory_order_relaxed);
  return value;
}

// Number of SMs of the current device.
inline int multiprocessor_count() {
  return device_attribute<cudaDevAttrMultiProcessorCount>();
}

// The most dynamic shared memory one block may opt in to (227 KB on Hopper, 99 KB on sm_86 / sm_89).
inline int max_shared_memory_per_block() {
  return device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
}

// Lets `kernel` launch with up to `bytes` of dynamic shared memory on the current device. The attribute holds for the
// process and setting it is a driver call of microseconds, so it is set only when a kernel first needs more on a
// device than it was allowed.
template <typename Kernel>
void allow_dynamic_shared_memory(Kernel kernel, int bytes) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int> allowed;  // (kernel, device) -> bytes
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  int& current = allowed[{reinterpret_cast<const void*>(kernel), device}];
  if (bytes > current) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    current = bytes;
  }
}

// How many blocks of `threads` threads and `smem_bytes` of dynamic shared memory of `kernel` fit on one SM of the
// current device, asked of the occupancy calculator once per (kernel, device, block shape).
template <typename Kernel>
int blocks_per_sm(Kernel kernel, int threads, int smem_bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int, int>, int> known;  // (kernel, device, threads, bytes) -> blocks
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, threads, smem_bytes);
  if (const auto found = known.find(key); found != known.end()) return found->second;
  int blocks = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes));
  known.emplace(key, blocks);
  return blocks;
}

}  // namespace cuda
}  // namespace convops
