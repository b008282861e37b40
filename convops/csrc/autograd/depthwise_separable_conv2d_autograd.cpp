// Autograd of convops::depthwise_separable_conv2d: ATen's convolution backward of the pointwise stage, then of the
// depthwise stage, so gradients match the eager F.conv2d pair's.
#include "autograd/autograd_common.h"

namespace convops::autograd {
namespace {

using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                             const std::optional<at::Tensor>&, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef);

at::Tensor depthwise_separable_conv2d_below_autograd(const at::Tensor& input, const at::Tensor& dw_weight,
                                                     const std::optional<at::Tensor>& dw_bias,
                                                     const at::Tensor& pw_weight,
                                                     const std::optional<at::Tensor>& pw_bias, at::IntArrayRef stride,
                                                     at::IntArrayRef padding, at::IntArrayRef dilation) {
  static const auto op = typed_op<Signature>("convops::depthwise_separable_conv2d");
  return call_below_autograd(op, input, dw_weight, dw_bias, pw_weight, pw_bias, stride, padding, dilation);
}

class DepthwiseSeparableConv2dFunction : public torch::autograd::Function<DepthwiseSeparableConv2dFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& dw_weight,
                            const std::optional<at::Tensor>& dw_bias, const at::Tensor& pw_weight,
                            const std::optional<at::Tensor>& pw_bias, at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef dilation) {
    // The kernel runs first: it validates the arguments, so what is saved below exists.
    auto output = depthwise_separable_conv2d_below_autograd(input, dw_weight, dw_bias, pw_weight, pw_bias, stride,
                                                            padding, dilation);
    const auto need = needs_input_grad<5>(ctx, {true, true, given(dw_bias), true, given(pw_bias)});
    const bool need_depthwise_grad = need[0] || need[1] || need[2];
    ConvParams::save(ctx, stride, padding, dilation);
    ctx->saved_data["groups"] = input.sym_size(1);
    ctx->saved_data["input_shape"] = input.sym_sizes();
    ctx->saved_data["dw_shape"] = dw_weight.sym_sizes();
    ctx->saved_data["pw_shape"] = pw_weight.sym_sizes();
    ctx->saved_data["dw_bias_sizes"] = bias_sizes_of(dw_bias);
    ctx->saved_data["pw_bias_sizes"] = bias_sizes_of(pw_bias);
    // The depthwise intermediate is recomputed (never kept from the fused forward) only for the pointwise weight's
    // gradient; the input feeds that and the depthwise weight's gradient, the depthwise weight that and the input's.
    ctx->save_for_backward({
        need[3] || need[1] ? input : at::Tensor(),
        need[3] || need[0] ? dw_weight : at::Tensor(),
        need[3] ? dw_bias.value_or(at::Tensor()) : at::Tensor(),
        need_depthwise_grad ? pw_weight : at::Tensor(),
    });
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& grad = grads[0];
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &dw_weight = saved[1], &dw_bias = saved[2], &pw_weight = saved[3];
    const auto dw_bias_sizes = saved_bias_sizes(ctx, "dw_bias_sizes");
    const auto pw_bias_sizes = saved_bias_sizes(ctx, "pw_bias_sizes");
    const auto need =
        needs_input_grad<5>(ctx, {true, true, dw_bias_sizes.has_value(), true, pw_bias_sizes.has_value()});
    const auto [stride, padding, dilation] = ConvParams::saved(ctx);
    const auto groups = ctx->saved_data.at("groups").toSymInt();
    const auto dw_shape = saved_sizes(ctx, "dw_shape");
    const bool need_mid = need[0] || need[1] || need[2];

    // The intermediate's values feed only the pointwise weight's gradient; otherwise its shape stands in.
    const auto mid = need[3] ? at::convolution_symint(input, dw_weight, optional_tensor(dw_bias), stride, padding,
                                                      dilation, false, sym({0, 0}), groups)
                             : placeholder(at::Tensor(), grad,
                                           {grad.sym_size(0), dw_shape[0], grad.sym_size(2), grad.sym_size(3)});
    auto [grad_mid, grad_pw_weight, grad_pw_bias] = at::convolution_backward_symint(
        grad, mid, placeholder(pw_weight, grad, saved_sizes(ctx, "pw_shape")), as_optional_ref(pw_bias_sizes),
        sym({1, 1}), sym({0, 0}), sym({1, 1}), false, sym({0, 0}), 1, {need_mid, need[3], need[4]});

    at::Tensor grad_input, grad_dw_weight, grad_dw_bias;
    if (need_mid) {
      std::tie(grad_input, grad_dw_weight, grad_dw_bias) = at::convolution_backward_symint(
          grad_mid, placeholder(input, grad, saved_sizes(ctx, "input_shape")), placeholder(dw_weight, grad, dw_shape),
          as_optional_ref(dw_bias_sizes), stride, padding, dilation, false, sym({0, 0}), groups,
          {need[0], need[1], need[2]});
    }
    return {grad_input, grad_dw_weight, grad_dw_bias, grad_pw_weight, grad_pw_bias, at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

at::Tensor depthwise_separable_conv2d_autograd(const at::Tensor& input, const at::Tensor& dw_weight,
                                               const std::optional<at::Tensor>& dw_bias, const at::Tensor& pw_weight,
                                               const std::optional<at::Tensor>& pw_bias, at::IntArrayRef stride,
                                               at::IntArrayRef padding, at::IntArrayRef dilation) {
  if (!grad_wanted(input, dw_weight, dw_bias, pw_weight, pw_bias)) {
    return depthwise_separable_conv2d_below_autograd(input, dw_weight, dw_bias, pw_weight, pw_bias, stride, padding,
                                                     dilation);
  }
  return DepthwiseSeparableConv2dFunction::apply(input, dw_weight, dw_bias, pw_weight, pw_bias, stride, padding,
                                                 dilation);
}

}  // namespace
}  // namespace convops::autograd

TORCH_LIBRARY_IMPL(convops, Autograd, m) {
  m.impl("depthwise_separable_conv2d", &convops::autograd::depthwise_separable_conv2d_autograd);
}
