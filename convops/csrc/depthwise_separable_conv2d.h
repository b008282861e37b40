// convops::depthwise_separable_conv2d: argument validation shared by the CPU and CUDA kernels.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "depthwise_conv2d.h"

namespace convops {

// Validates the depthwise stage (as convops::depthwise_conv2d does) and the pointwise stage: pointwise_weight
// (C_out, multiplier * C_in, 1, 1) and optional pointwise_bias (C_out). Returns the depthwise geometry; C_out is
// pointwise_weight.size(0).
DepthwiseGeometry check_depthwise_separable_conv2d(const char* op, const at::Tensor& input,
                                                   const at::Tensor& depthwise_weight,
                                                   const std::optional<at::Tensor>& depthwise_bias,
                                                   const at::Tensor& pointwise_weight,
                                                   const std::optional<at::Tensor>& pointwise_bias,
                                                   at::IntArrayRef stride, at::IntArrayRef padding,
                                                   at::IntArrayRef dilation);

}  // namespace convops
