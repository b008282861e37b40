// Schema and argument validation of convops::depthwise_conv2d, a groups = C_in convolution with any channel
// multiplier, kernel size, stride, padding and dilation (F.conv2d(x, w, b, stride, padding, dilation, groups=C_in)).
#include "depthwise_conv2d.h"

#include <torch/library.h>

#include "common/checks.h"

namespace convops {

DepthwiseGeometry check_depthwise_conv2d(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                         at::IntArrayRef padding, at::IntArrayRef dilation, const char* weight_name,
                                         const char* bias_name) {
  check_float_tensor(op, "input", input);
  check_rank(op, "input", input, 4, "(N, C_in, H, W)");
  check_like_input(op, weight_name, weight, input);
  check_rank(op, weight_name, weight, 4, "(multiplier * C_in, 1, kh, kw)");
  check_param(op, "stride", stride, 2, 1);
  check_param(op, "padding", padding, 2, 0);
  check_param(op, "dilation", dilation, 2, 1);

  const int64_t in_channels = input.size(1);
  CONVOPS_CHECK(op, in_channels > 0, "input must have at least one channel, got shape ", input.sizes());
  check_images_nonempty(op, input);
  CONVOPS_CHECK(op, weight.size(1) == 1, "a depthwise weight has one input channel per group: expected shape (",
                "multiplier * ", in_channels, ", 1, kh, kw), got ", weight.sizes());
  CONVOPS_CHECK(op, weight.size(0) > 0 && weight.size(0) % in_channels == 0,
                weight_name, ".size(0) must be a positive multiple of C_in = ", in_channels, " (groups = C_in), got ",
                weight_name, " ", weight.sizes());
  CONVOPS_CHECK(op, weight.size(2) > 0 && weight.size(3) > 0, "empty kernel: ", weight_name, " ", weight.sizes());
  check_optional_like_input(op, bias_name, bias, input, weight.size(0));

  const auto out = conv_output_sizes(op, input.sizes().slice(2), weight.sizes().slice(2), stride, padding, dilation);
  CONVOPS_CHECK(op, out[0] > 0 && out[1] > 0, "output size ", at::IntArrayRef(out), " is not positive");
  return DepthwiseGeometry{
      input.size(0), in_channels, weight.size(0) / in_channels, weight.size(0),
      input.size(2), input.size(3), out[0], out[1],
      weight.size(2), weight.size(3),
      stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1],
  };
}

}  // namespace convops

TORCH_LIBRARY_FRAGMENT(convops, m) {
  m.def(
      "depthwise_conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
      "int[2] dilation=1) -> Tensor");
  convops::register_non_strided_rejection(m, "depthwise_conv2d");
  convops::register_autocast_passthrough(m, "depthwise_conv2d");
}
