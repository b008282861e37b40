// CPU implementation of convops::depthwise_separable_conv2d: the direct depthwise loop, then the pointwise step as a
// batched matrix product. The intermediate is an ordinary tensor of the input's dtype here, which is the rounding
// ATen's two convolutions apply and the CUDA kernel reproduces on chip.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include "common/checks.h"
#include "cpu/depthwise_direct.h"
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
  const int64_t out_channels = pointwise_weight.size(0);
  if (g.batch == 0) return empty_output(input, {0, out_channels, g.out_h, g.out_w});
  const auto depthwise =
      depthwise_conv2d_direct(input, depthwise_weight, depthwise_bias, g, at::MemoryFormat::Contiguous);
  // (C_out, C_mid) x (N, C_mid, H*W) in the accumulation type, as ATen's CPU 1x1 convolution accumulates, without
  // oneDNN's half-precision convolution paths (see cpu/depthwise_direct.h).
  const auto acc = at::toOpMathType(input.scalar_type());
  auto out = at::matmul(pointwise_weight.reshape({out_channels, g.out_channels}).to(acc),
                        depthwise.view({g.batch, g.out_channels, g.out_h * g.out_w}).to(acc));
  if (pointwise_bias.has_value() && pointwise_bias->defined()) out.add_(pointwise_bias->to(acc).view({out_channels, 1}));
  return out.view({g.batch, out_channels, g.out_h, g.out_w})
      .to(input.scalar_type())
      .contiguous(input.suggest_memory_format());
}

}  // namespace

TORCH_LIBRARY_IMPL(convops, CPU, m) {
  m.impl("depthwise_separable_conv2d", &depthwise_separable_conv2d_cpu);
}

}  // namespace convops
