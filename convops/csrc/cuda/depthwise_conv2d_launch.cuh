// Host entry of the depthwise CUDA kernels, shared with the depthwise-separable op (its mixed path) and the
// plane-block kernel's planner (make_geometry).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "cuda/depthwise_stencil.cuh"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {

Geometry make_geometry(const DepthwiseGeometry& d);

// Input planes that `planes` consecutive output planes read, at most (output plane n * C_out + co reads input plane
// (n * C_out + co) / multiplier; a run of them can start in the middle of one input plane's multiplier outputs).
inline int64_t input_planes_read(const DepthwiseGeometry& d, int64_t planes) {
  return std::min(planes, (planes - 1) / d.multiplier + 2);
}

// A problem of at most this many outputs (a batch-1 layer: 38K-460K outputs in the bench sweep's MobileNetV2 /
// EfficientNet-B0 / ConvNeXt-T stages past the first) is latency-bound: a few microseconds of GPU time, most of it
// DRAM round trips and dependent instruction chains rather than bandwidth. The kernels' planners give such problems
// shorter per-thread work (depthwise_conv2d_planes.cuh, depthwise_conv2d_blocked.cuh).
inline bool is_small_problem(const DepthwiseGeometry& d) {
  return d.batch * d.out_channels * d.out_h * d.out_w <= (int64_t{1} << 18);
}

// Raises "<op>: ..." unless every plane coordinate the depthwise kernels form (with the stride, padding and dilation
// of d, tiles up to 128 outputs wide rounded past the last output) fits in int. Tensor offsets are 64-bit anyway.
void check_coordinates_fit_int(const char* op, const DepthwiseGeometry& d);

// Writes depthwise_conv2d(input, weight, bias) with geometry d into output (dense, any layout; non-empty). Errors
// name `op` (the separable op passes its own name when it runs this as its mixed path).
void depthwise_conv2d_into(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::Tensor& output, const DepthwiseGeometry& d,
                           const char* op = "convops::depthwise_conv2d");

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
