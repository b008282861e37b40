// CPU implementation of convops::depthwise_separable_conv2d: two ATen convolutions. The intermediate is an
// ordinary tensor of the input's dtype here, which is the rounding the CUDA kernel reproduces on chip.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "common/checks.h"
#include "depthwise_separable_conv2d.h"

namespace convops {
namespace {

constexpr const char* kOp = "convops::depthwise_separable_conv2d";

at::Tensor depthwise_separable_conv2d_cpu(const at::Tensor& input, const at::Tensor& depthwise_weight,
                                          const std::optional<at::Tensor>& depthwise_bias,
                                          const at::Tensor& pointwise_weight,
                                          const std::optional<at::Tensor>& pointwise_bias, at::IntArrayRef stride,
                                          at::IntArrayRef padding, at::IntArrayRef dilation) {
  const auto g = check_depthwise_separable_conv2d(kOp, input, depthwise_weight, depthwise_bias, pointwise_weight,
                                                  pointwise_bias, stride, padding, dilation);
  if (g.batch == 0) return empty_output(input, {0, pointwise_weight.size(0), g.out_h, g.out_w});
  const auto depthwise = at::convolution(input, depthwise_weight, depthwise_bias, stride, padding, dilation,
                                         /*transposed=*/false, /*output_padding=*/{0, 0}, g.in_channels);
  const auto out = at::convolution(depthwise, pointwise_weight, pointwise_bias, /*stride=*/{1, 1},
                                   /*padding=*/{0, 0}, /*dilation=*/{1, 1}, /*transposed=*/false,
                                   /*output_padding=*/{0, 0}, /*groups=*/1);
  return out.contiguous(input.suggest_memory_format());
}

}  // namespace

TORCH_LIBRARY_IMPL(convops, CPU, m) {
  m.impl("depthwise_separable_conv2d", &depthwise_separable_conv2d_cpu);
}

}  // namespace convops
