// Host entry of the depthwise CUDA kernels, for the depthwise-separable op's unfused fallback.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "cuda/depthwise_stencil.cuh"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {

Geometry make_geometry(const DepthwiseGeometry& d);
Strides4d strides_of(const at::Tensor& t);

// Writes depthwise_conv2d(input, weight, bias) with geometry d into output (dense, any layout; non-empty).
void depthwise_conv2d_into(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::Tensor& output, const DepthwiseGeometry& d);

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
