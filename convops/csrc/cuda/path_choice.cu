#include "cuda/path_choice.cuh"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>

namespace convops {
namespace cuda {
namespace {

constexpr int kTimedRuns = 3;
constexpr double kAtenMargin = 0.97;

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Mean milliseconds of one run of `path` after a warm-up run (cuDNN's algorithm search, first allocations).
double time_ms(const PathFn& path, cudaStream_t stream) {
  path();
  cudaEvent_t start, stop;
  C10_CUDA_CHECK(cudaEventCreate(&start));
  C10_CUDA_CHECK(cudaEventCreate(&stop));
  C10_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < kTimedRuns; ++i) path();
  C10_CUDA_CHECK(cudaEventRecord(stop, stream));
  C10_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.f;
  C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  C10_CUDA_CHECK(cudaEventDestroy(start));
  C10_CUDA_CHECK(cudaEventDestroy(stop));
  return ms / kTimedRuns;
}

}  // namespace

at::Tensor run_chosen_path(const std::string& key, const PathFn& convops_path, const PathFn& aten_path) {
  switch (path_policy()) {
    case PathPolicy::kConvops: return convops_path();
    case PathPolicy::kAten: return aten_path();
    case PathPolicy::kAuto: break;
  }
  Path path;
  if (cached_path(key, &path)) return path == Path::kConvops ? convops_path() : aten_path();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (capturing(stream)) return convops_path();
  const double convops_ms = time_ms(convops_path, stream);
  const double aten_ms = time_ms(aten_path, stream);
  path = aten_ms < kAtenMargin * convops_ms ? Path::kAten : Path::kConvops;
  record_path(key, path, convops_ms, aten_ms);
  return path == Path::kConvops ? convops_path() : aten_path();
}

}  // namespace cuda
}  // namespace convops
