// Schema and argument validation of convops::conv2d_group_norm_scale_max_pool_clamp:
// clamp(max_pool2d(group_norm(conv2d(x, w, b, stride, padding, dilation), G, gamma, beta, eps) * scale, k), lo, hi).
#include "conv2d_group_norm_scale_max_pool_clamp.h"

#include <torch/library.h>

#include <cmath>

#include "common/checks.h"

namespace convops {

namespace {
constexpr const char* kOp = "convops::conv2d_group_norm_scale_max_pool_clamp";

// (C,1,1), (1,C,1,1), (C,) mean one factor per channel; any tensor of one element means one factor for all.
bool check_scale_shape(const at::Tensor& scale, int64_t channels) {
  if (scale.numel() == 1) return false;
  const auto s = scale.sizes();
  const bool per_channel = (s.size() == 1 && s[0] == channels) ||
                           (s.size() == 3 && s[0] == channels && s[1] == 1 && s[2] == 1) ||
                           (s.size() == 4 && s[0] == 1 && s[1] == channels && s[2] == 1 && s[3] == 1);
  CONVOPS_CHECK(kOp, per_channel, "scale must have shape (C,1,1), (1,C,1,1), (C,) or hold a single value, with C = ",
                channels, ", got ", s);
  return true;
}
}  // namespace

ConvGnPoolGeometry check_conv2d_group_norm_scale_max_pool_clamp(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
    const std::optional<at::Tensor>& gn_bias, double eps, const at::Tensor& scale, at::IntArrayRef pool_kernel) {
  check_float_tensor(kOp, "input", input);
  check_rank(kOp, "input", input, 4, "(N, C_in, H, W)");
  check_like_input(kOp, "weight", weight, input);
  check_rank(kOp, "weight", weight, 4, "(C_out, C_in, kh, kw)");
  check_param(kOp, "stride", stride, 2, 1);
  check_param(kOp, "padding", padding, 2, 0);
  check_param(kOp, "dilation", dilation, 2, 1);
  check_param(kOp, "pool_kernel", pool_kernel, 2, 1);

  const int64_t in_channels = input.size(1);
  const int64_t out_channels = weight.size(0);
  CONVOPS_CHECK(kOp, in_channels > 0, "input must have at least one channel, got shape ", input.sizes());
  check_images_nonempty(kOp, input);
  CONVOPS_CHECK(kOp, weight.size(1) == in_channels, "weight must have shape (C_out, C_in = ", in_channels,
                ", kh, kw) (the convolution has groups = 1), got ", weight.sizes());
  CONVOPS_CHECK(kOp, out_channels > 0 && weight.size(2) > 0 && weight.size(3) > 0, "empty weight ", weight.sizes());
  check_optional_like_input(kOp, "bias", bias, input, out_channels);

  CONVOPS_CHECK(kOp, num_groups > 0 && out_channels % num_groups == 0, "num_groups must be positive and divide C_out = ",
                out_channels, ", got ", num_groups);
  check_optional_like_input(kOp, "gn_weight", gn_weight, input, out_channels);
  check_optional_like_input(kOp, "gn_bias", gn_bias, input, out_channels);
  CONVOPS_CHECK(kOp, eps >= 0 && std::isfinite(eps), "eps must be finite and non-negative, got ", eps);

  check_like_input(kOp, "scale", scale, input);
  const bool scale_per_channel = check_scale_shape(scale, out_channels);

  const auto conv = conv_output_sizes(kOp, input.sizes().slice(2), weight.sizes().slice(2), stride, padding, dilation);
  CONVOPS_CHECK(kOp, conv[0] > 0 && conv[1] > 0, "convolution output size ", at::IntArrayRef(conv),
                " is not positive");
  CONVOPS_CHECK(kOp, pool_kernel[0] <= conv[0] && pool_kernel[1] <= conv[1], "pool_kernel ", pool_kernel,
                " is larger than the convolution output ", at::IntArrayRef(conv));

  return ConvGnPoolGeometry{
      input.size(0), in_channels, out_channels, input.size(2), input.size(3),
      weight.size(2), weight.size(3), stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1],
      conv[0], conv[1],
      num_groups, out_channels / num_groups,
      pool_kernel[0], pool_kernel[1], conv[0] / pool_kernel[0], conv[1] / pool_kernel[1],
      scale_per_channel,
  };
}

}  // namespace convops

TORCH_LIBRARY_FRAGMENT(convops, m) {
  m.def(
      "conv2d_group_norm_scale_max_pool_clamp(Tensor input, Tensor weight, Tensor? bias, int[2] stride, "
      "int[2] padding, int[2] dilation, int num_groups, Tensor? gn_weight, Tensor? gn_bias, float eps, Tensor scale, "
      "int[2] pool_kernel, float? clamp_min=None, float? clamp_max=None) -> Tensor");
  convops::register_non_strided_rejection(m, "conv2d_group_norm_scale_max_pool_clamp");
  convops::register_autocast_passthrough(m, "conv2d_group_norm_scale_max_pool_clamp");
}
