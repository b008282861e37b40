// Schemas of convops::conv_transpose2d / conv_transpose3d and the argument validation both devices share.
#include "conv_transpose.h"

#include <torch/library.h>

#include "common/checks.h"

namespace convops {

ConvTransposeArgs check_conv_transpose_args(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                                            at::IntArrayRef dilation, int64_t spatial_dims) {
  const char* layout = spatial_dims == 2 ? "(N, C_in, H, W)" : "(N, C_in, D, H, W)";
  check_float_tensor(op, "input", input);
  check_rank(op, "input", input, spatial_dims + 2, layout);
  check_like_input(op, "weight", weight, input);
  check_rank(op, "weight", weight, spatial_dims + 2,
             spatial_dims == 2 ? "(C_in, C_out / groups, kH, kW)" : "(C_in, C_out / groups, kD, kH, kW)");

  check_param(op, "stride", stride, spatial_dims, 1);
  check_param(op, "padding", padding, spatial_dims, 0);
  check_param(op, "output_padding", output_padding, spatial_dims, 0);
  check_param(op, "dilation", dilation, spatial_dims, 1);
  CONVOPS_CHECK(op, groups > 0, "groups must be positive, got ", groups);

  const int64_t in_channels = input.size(1);
  CONVOPS_CHECK(op, weight.size(0) >= groups, "expected weight to have at least groups=", groups,
                " entries in dimension 0, got weight of shape ", weight.sizes());
  CONVOPS_CHECK(op, weight.size(0) % groups == 0, "weight dimension 0 (", weight.size(0),
                ") must be divisible by groups=", groups);
  CONVOPS_CHECK(op, in_channels == weight.size(0), "input has ", in_channels, " channels but weight of shape ",
                weight.sizes(), " expects ", weight.size(0));
  for (const auto i : c10::irange(spatial_dims)) {
    CONVOPS_CHECK(op, weight.size(2 + i) > 0, "kernel size must be positive, got weight of shape ", weight.sizes());
    CONVOPS_CHECK(op, output_padding[i] < stride[i] || output_padding[i] < dilation[i],
                  "output_padding must be smaller than either stride or dilation, got output_padding ",
                  output_padding, ", stride ", stride, ", dilation ", dilation);
  }
  check_optional_like_input(op, "bias", bias, input, weight.size(1) * groups);

  check_images_nonempty(op, input);

  ConvTransposeArgs args{spatial_dims, stride.vec(), padding.vec(), output_padding.vec(), dilation.vec(), groups, {}};
  for (const auto i : c10::irange(spatial_dims)) {
    const auto fitting = conv_transpose_output_size(input.size(2 + i), weight.size(2 + i), stride[i], padding[i],
                                                    output_padding[i], dilation[i]);
    CONVOPS_CHECK(op, fitting.has_value(), "the stride ", stride, ", padding ", padding, ", output_padding ",
                  output_padding, " and dilation ", dilation, " with input of shape ", input.sizes(),
                  " and weight of shape ", weight.sizes(), " take the output size past 64 bits");
    const int64_t size = *fitting;
    CONVOPS_CHECK(op, size > 0, "input of shape ", input.sizes(), " and weight of shape ", weight.sizes(),
                  " with stride ", stride, ", padding ", padding, ", output_padding ", output_padding,
                  " and dilation ", dilation, " give a non-positive output size in dimension ", 2 + i);
    args.output_size.push_back(size);
  }
  return args;
}

at::Tensor empty_conv_transpose_output(const at::Tensor& input, const at::Tensor& weight,
                                       const ConvTransposeArgs& args) {
  std::vector<int64_t> sizes{input.size(0), weight.size(1) * args.groups};
  sizes.insert(sizes.end(), args.output_size.begin(), args.output_size.end());
  return empty_output(input, sizes);
}

at::Tensor run_conv_transpose(const char* op, ConvTransposeKernel kernel, const at::Tensor& input,
                              const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                              at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
                              int64_t groups, at::IntArrayRef dilation, int64_t spatial_dims) {
  // An unbatched input (C_in, *spatial) is a batch of one; its output comes back unbatched and contiguous.
  const bool unbatched = input.defined() && input.dim() == spatial_dims + 1;
  const at::Tensor batched = unbatched ? input.unsqueeze(0) : input;
  const auto args =
      check_conv_transpose_args(op, batched, weight, bias, stride, padding, output_padding, groups, dilation,
                                spatial_dims);
  at::Tensor output = kernel(op, batched, weight, bias, args);
  return unbatched ? output.squeeze(0).contiguous() : output;
}

TORCH_LIBRARY_FRAGMENT(convops, m) {
  m.def(
      "conv_transpose2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
      "int[2] output_padding=0, int groups=1, int[2] dilation=1) -> Tensor");
  m.def(
      "conv_transpose3d(Tensor input, Tensor weight, Tensor? bias=None, int[3] stride=1, int[3] padding=0, "
      "int[3] output_padding=0, int groups=1, int[3] dilation=1) -> Tensor");
  register_non_strided_rejection(m, "conv_transpose2d");
  register_autocast_passthrough(m, "conv_transpose2d");
  register_non_strided_rejection(m, "conv_transpose3d");
  register_autocast_passthrough(m, "conv_transpose3d");
}

}  // namespace convops
