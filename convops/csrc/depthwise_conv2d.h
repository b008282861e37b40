// convops::depthwise_conv2d: argument validation and problem geometry, shared by the CPU and CUDA kernels and by
// convops::depthwise_separable_conv2d (whose first stage is exactly this op).
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace convops {

// Everything a depthwise kernel needs to know besides the data pointers. Output channel co reads input channel
// co / multiplier (PyTorch's grouped-convolution order for weight (multiplier * C_in, 1, kh, kw)).
struct DepthwiseGeometry {
  int64_t batch, in_channels, multiplier, out_channels;
  int64_t in_h, in_w, out_h, out_w;
  int64_t kernel_h, kernel_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};

// Validates input (N, C_in, H, W), weight (m * C_in, 1, kh, kw), optional bias (m * C_in) and the convolution
// parameters, raising "<op>: ..." errors that call the operands weight_name and bias_name; returns the geometry of
// the depthwise stage.
DepthwiseGeometry check_depthwise_conv2d(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                         at::IntArrayRef padding, at::IntArrayRef dilation,
                                         const char* weight_name = "weight", const char* bias_name = "bias");

}  // namespace convops
