// Autograd of convops::conv_transpose2d and conv_transpose3d: ATen's own transposed-convolution backward, so
// gradients match F.conv_transpose2d/3d's (unbatched inputs included).
#include "autograd/autograd_common.h"

namespace convops::autograd {
namespace {

using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, at::IntArrayRef,
                             at::IntArrayRef, at::IntArrayRef, int64_t, at::IntArrayRef);

template <int64_t SpatialDims>
at::Tensor conv_transpose_below_autograd(const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                         at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                                         at::IntArrayRef dilation) {
  static const auto op =
      typed_op<Signature>(SpatialDims == 2 ? "convops::conv_transpose2d" : "convops::conv_transpose3d");
  return call_below_autograd(op, input, weight, bias, stride, padding, output_padding, groups, dilation);
}

template <int64_t SpatialDims>
class ConvTransposeFunction : public torch::autograd::Function<ConvTransposeFunction<SpatialDims>> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef output_padding, int64_t groups, at::IntArrayRef dilation) {
    // The kernel runs first: it validates the arguments, so what is saved below exists.
    auto output = conv_transpose_below_autograd<SpatialDims>(input, weight, bias, stride, padding, output_padding,
                                                             groups, dilation);
    const auto need = needs_input_grad<3>(ctx, {true, true, given(bias)});
    // grad_input reads only the weight and grad_weight only the input: keep the other one's shape alone.
    ctx->save_for_backward({need[0] ? weight : at::Tensor(), need[1] ? input : at::Tensor()});
    ctx->saved_data["input_shape"] = input.sym_sizes();
    ctx->saved_data["weight_shape"] = weight.sym_sizes();
    ctx->saved_data["unbatched"] = input.dim() == weight.dim() - 1;
    ctx->saved_data["bias_sizes"] = bias_sizes_of(bias);
    ConvParams::save(ctx, stride, padding, dilation);
    ctx->saved_data["output_padding"] = output_padding;
    ctx->saved_data["groups"] = groups;
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor grad_output = grads[0];
    const auto saved = ctx->get_saved_variables();
    const auto bias_sizes = saved_bias_sizes(ctx, "bias_sizes");
    const auto [needs_input, needs_weight, needs_bias] =
        needs_input_grad<3>(ctx, {true, true, bias_sizes.has_value()});
    variable_list grads_in(8);
    if (!(needs_input || needs_weight || needs_bias)) return grads_in;
    at::Tensor weight = placeholder(saved[0], grad_output, saved_sizes(ctx, "weight_shape"));
    at::Tensor input = placeholder(saved[1], grad_output, saved_sizes(ctx, "input_shape"));
    const bool unbatched = ctx->saved_data.at("unbatched").toBool();
    if (unbatched) {
      grad_output = grad_output.unsqueeze(0);
      input = input.unsqueeze(0);
    }
    const auto params = ConvParams::saved(ctx);
    auto [grad_input, grad_weight, grad_bias] = at::convolution_backward_symint(
        grad_output, input, weight, as_optional_ref(bias_sizes), params.stride, params.padding, params.dilation, true,
        saved_sizes(ctx, "output_padding"), ctx->saved_data.at("groups").toSymInt(),
        {needs_input, needs_weight, needs_bias});
    if (unbatched && grad_input.defined()) grad_input = grad_input.squeeze(0);
    grads_in[0] = grad_input;
    grads_in[1] = grad_weight;
    grads_in[2] = grad_bias;
    return grads_in;
  }
};

template <int64_t SpatialDims>
at::Tensor conv_transpose_autograd(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                   at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                                   at::IntArrayRef dilation) {
  if (!grad_wanted(input, weight, bias)) {
    return conv_transpose_below_autograd<SpatialDims>(input, weight, bias, stride, padding, output_padding, groups,
                                                      dilation);
  }
  return ConvTransposeFunction<SpatialDims>::apply(input, weight, bias, stride, padding, output_padding, groups,
                                                   dilation);
}

}  // namespace
}  // namespace convops::autograd

TORCH_LIBRARY_IMPL(convops, Autograd, m) {
  m.impl("conv_transpose2d", &convops::autograd::conv_transpose_autograd<2>);
  m.impl("conv_transpose3d", &convops::autograd::conv_transpose_autograd<3>);
}
