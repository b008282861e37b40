// Schema and argument validation of convops::depthwise_separable_conv2d:
// F.conv2d(F.conv2d(x, dw_w, dw_b, stride, padding, dilation, groups=C_in), pw_w, pw_b).
#include "depthwise_separable_conv2d.h"

#include <torch/library.h>

#include "common/checks.h"

namespace convops {

DepthwiseGeometry check_depthwise_separable_conv2d(const char* op, const at::Tensor& input,
                                                   const at::Tensor& depthwise_weight,
                                                   const std::optional<at::Tensor>& depthwise_bias,
                                                   const at::Tensor& pointwise_weight,
                                                   const std::optional<at::Tensor>& pointwise_bias,
                                                   at::IntArrayRef stride, at::IntArrayRef padding,
                                                   at::IntArrayRef dilation) {
  const auto g = check_depthwise_conv2d(op, input, depthwise_weight, depthwise_bias, stride, padding, dilation,
                                        "depthwise_weight", "depthwise_bias");
  check_like_input(op, "pointwise_weight", pointwise_weight, input);
  CONVOPS_CHECK(op, pointwise_weight.dim() == 4 && pointwise_weight.size(0) > 0 &&
                    pointwise_weight.size(1) == g.out_channels && pointwise_weight.size(2) == 1 &&
                    pointwise_weight.size(3) == 1,
                "expected pointwise_weight of shape (C_out, ", g.out_channels, ", 1, 1) with C_out > 0, got ",
                pointwise_weight.sizes());
  check_optional_like_input(op, "pointwise_bias", pointwise_bias, input, pointwise_weight.size(0));
  return g;
}

}  // namespace convops

TORCH_LIBRARY_FRAGMENT(convops, m) {
  m.def(
      "depthwise_separable_conv2d(Tensor input, Tensor depthwise_weight, Tensor? depthwise_bias, "
      "Tensor pointwise_weight, Tensor? pointwise_bias=None, int[2] stride=1, int[2] padding=0, "
      "int[2] dilation=1) -> Tensor");
  convops::register_non_strided_rejection(m, "depthwise_separable_conv2d");
  convops::register_autocast_passthrough(m, "depthwise_separable_conv2d");
}
