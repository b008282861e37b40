// CPU implementation of convops::depthwise_conv2d: validates, handles the empty batch and runs the direct loop
// (cpu/depthwise_direct.h says why not ATen's grouped convolution) into the documented output layout.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "common/checks.h"
#include "cpu/depthwise_direct.h"
#include "depthwise_conv2d.h"

namespace convops {
namespace {

constexpr const char* kOp = "convops::depthwise_conv2d";

at::Tensor depthwise_conv2d_cpu(const at::Tensor& input, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                at::IntArrayRef padding, at::IntArrayRef dilation) {
  const auto g = check_depthwise_conv2d(kOp, input, weight, bias, stride, padding, dilation);
  if (g.batch == 0) return empty_output(input, {0, g.out_channels, g.out_h, g.out_w});
  return depthwise_conv2d_direct(input, weight, bias, g, input.suggest_memory_format());
}

}  // namespace

TORCH_LIBRARY_IMPL(convops, CPU, m) {
  m.impl("depthwise_conv2d", &depthwise_conv2d_cpu);
}

}  // namespace convops
