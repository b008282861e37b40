// Host-side facts about the current CUDA device, read once per device: kernels' launch planning asks on every call,
// and a driver query per call is measurable on launch-bound (batch-1) layers.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>

namespace convops {
namespace cuda {

// Number of SMs of the current device.
inline int multiprocessor_count() {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cached{};  // 0: not read yet
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= 0 && device < kMaxDevices) {
    if (const int count = cached[device].load(std::memory_order_relaxed); count > 0) return count;
  }
  int count = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  if (device >= 0 && device < kMaxDevices) cached[device].store(count, std::memory_order_relaxed);
  return count;
}

}  // namespace cuda
}  // namespace convops
