// Autograd of convops::depthwise_conv2d: ATen's own grouped-convolution backward (groups = C_in), so gradients
// match F.conv2d's.
#include "autograd/autograd_common.h"

namespace convops::autograd {
namespace {

using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, at::IntArrayRef,
                             at::IntArrayRef, at::IntArrayRef);

at::Tensor depthwise_conv2d_below_autograd(const at::Tensor& input, const at::Tensor& weight,
                                           const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                           at::IntArrayRef padding, at::IntArrayRef dilation) {
  static const auto op = typed_op<Signature>("convops::depthwise_conv2d");
  return call_below_autograd(op, input, weight, bias, stride, padding, dilation);
}

class DepthwiseConv2dFunction : public torch::autograd::Function<DepthwiseConv2dFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef dilation) {
    // The kernel runs first: it validates the arguments, so what is saved below exists.
    auto output = depthwise_conv2d_below_autograd(input, weight, bias, stride, padding, dilation);
    const auto need = needs_input_grad<3>(ctx, {true, true, given(bias)});
    ConvParams::save(ctx, stride, padding, dilation);
    ctx->saved_data["input_shape"] = input.sym_sizes();
    ctx->saved_data["weight_shape"] = weight.sym_sizes();
    ctx->saved_data["bias_sizes"] = bias_sizes_of(bias);
    ctx->saved_data["groups"] = input.sym_size(1);
    ctx->save_for_backward({need[1] ? input : at::Tensor(), need[0] ? weight : at::Tensor()});
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& grad = grads[0];
    const auto saved = ctx->get_saved_variables();
    const auto bias_sizes = saved_bias_sizes(ctx, "bias_sizes");
    const auto [need_input, need_weight, need_bias] = needs_input_grad<3>(ctx, {true, true, bias_sizes.has_value()});
    const auto input = placeholder(saved[0], grad, saved_sizes(ctx, "input_shape"));
    const auto weight = placeholder(saved[1], grad, saved_sizes(ctx, "weight_shape"));
    const auto params = ConvParams::saved(ctx);
    auto [grad_input, grad_weight, grad_bias] = at::convolution_backward_symint(
        grad, input, weight, as_optional_ref(bias_sizes), params.stride, params.padding, params.dilation, false,
        sym({0, 0}), ctx->saved_data.at("groups").toSymInt(), {need_input, need_weight, need_bias});
    return {grad_input, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor depthwise_conv2d_autograd(const at::Tensor& input, const at::Tensor& weight,
                                     const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                     at::IntArrayRef padding, at::IntArrayRef dilation) {
  if (!grad_wanted(input, weight, bias)) {
    return depthwise_conv2d_below_autograd(input, weight, bias, stride, padding, dilation);
  }
  return DepthwiseConv2dFunction::apply(input, weight, bias, stride, padding, dilation);
}

}  // namespace
}  // namespace convops::autograd

TORCH_LIBRARY_IMPL(convops, Autograd, m) {
  m.impl("depthwise_conv2d", &convops::autograd::depthwise_conv2d_autograd);
}
