// Autograd of convops::conv2d_group_norm_scale_max_pool_clamp: the backward recomputes the chain with ATen ops and
// runs their own backward formulas in reverse, so gradients match the eager chain's
// clamp(max_pool2d(group_norm(conv2d(x)) * scale)).
#include "autograd/autograd_common.h"

namespace convops::autograd {
namespace {

using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, at::IntArrayRef,
                             at::IntArrayRef, at::IntArrayRef, int64_t, const std::optional<at::Tensor>&,
                             const std::optional<at::Tensor>&, double, const at::Tensor&, at::IntArrayRef,
                             std::optional<double>, std::optional<double>);

constexpr int64_t kNumArguments = 14;

at::Tensor conv2d_group_norm_scale_max_pool_clamp_below_autograd(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
    const std::optional<at::Tensor>& gn_bias, double eps, const at::Tensor& scale, at::IntArrayRef pool_kernel,
    std::optional<double> clamp_min, std::optional<double> clamp_max) {
  static const auto op = typed_op<Signature>("convops::conv2d_group_norm_scale_max_pool_clamp");
  return call_below_autograd(op, input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps,
                             scale, pool_kernel, clamp_min, clamp_max);
}

// scale as a (1, C, 1, 1) or (1, 1, 1, 1) tensor: (C,) means one factor per channel here, not per column.
at::Tensor channel_scale(const at::Tensor& scale) {
  return scale.sym_numel() != 1 ? scale.reshape({1, -1, 1, 1}) : scale.reshape({1, 1, 1, 1});
}

// clamp's backward (ATen): the gradient passes where clamp_min <= pooled <= clamp_max.
at::Tensor clamp_backward(const at::Tensor& grad, const at::Tensor& pooled, std::optional<double> clamp_min,
                          std::optional<double> clamp_max) {
  if (!clamp_min && !clamp_max) return grad;
  auto keep = at::ones_like(pooled, pooled.options().dtype(at::kBool));
  if (clamp_min) keep = keep & (pooled >= *clamp_min);
  if (clamp_max) keep = keep & (pooled <= *clamp_max);
  return at::where(keep, grad, at::zeros_like(grad));
}

class Conv2dGroupNormScaleMaxPoolClampFunction
    : public torch::autograd::Function<Conv2dGroupNormScaleMaxPoolClampFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                            at::IntArrayRef dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
                            const std::optional<at::Tensor>& gn_bias, double eps, const at::Tensor& scale,
                            at::IntArrayRef pool_kernel, std::optional<double> clamp_min,
                            std::optional<double> clamp_max) {
    auto output = conv2d_group_norm_scale_max_pool_clamp_below_autograd(
        input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps, scale, pool_kernel,
        clamp_min, clamp_max);
    // The backward recomputes the forward chain with ATen ops, which needs every tensor whatever is differentiated.
    ctx->save_for_backward({input, weight, bias.value_or(at::Tensor()), gn_weight.value_or(at::Tensor()),
                            gn_bias.value_or(at::Tensor()), scale});
    ConvParams::save(ctx, stride, padding, dilation);
    ctx->saved_data["num_groups"] = num_groups;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["pool_kernel"] = pool_kernel;
    ctx->saved_data["clamp_min"] = clamp_min;
    ctx->saved_data["clamp_max"] = clamp_max;
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor grad = grads[0];
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1], &bias = saved[2], &gn_weight = saved[3],
                     &gn_bias = saved[4], &scale = saved[5];
    const auto& data = ctx->saved_data;
    const auto pool_kernel = data.at("pool_kernel").toIntVector();
    const int64_t num_groups = data.at("num_groups").toInt();
    // Tensor arguments in order: input, weight, bias, gn_weight, gn_bias, scale.
    const auto [need_input, need_weight, need_bias, need_gamma, need_beta, need_scale] = needs_input_grad<6>(
        ctx, {true, true, bias.defined(), gn_weight.defined(), gn_bias.defined(), true});

    // native_group_norm and its backward read gamma and beta as dense vectors (at::group_norm makes them so first).
    const at::Tensor gamma = gn_weight.defined() ? gn_weight.contiguous() : gn_weight;
    const at::Tensor beta = gn_bias.defined() ? gn_bias.contiguous() : gn_bias;
    const auto params = ConvParams::saved(ctx);
    const auto conv = at::convolution_symint(input, weight, optional_tensor(bias), params.stride, params.padding,
                                             params.dilation, false, sym({0, 0}), 1);
    const auto n = conv.sym_size(0), c = conv.sym_size(1), hw = conv.sym_size(2) * conv.sym_size(3);
    const auto [gn_out, mean, rstd] = at::native_group_norm_symint(
        conv, optional_tensor(gamma), optional_tensor(beta), n, c, hw, num_groups, data.at("eps").toDouble());
    const auto s = channel_scale(scale);
    const auto z = gn_out * s;
    const auto [pooled, indices] = at::max_pool2d_with_indices(z, pool_kernel, pool_kernel, {0, 0}, {1, 1}, false);

    grad = clamp_backward(grad, pooled, data.at("clamp_min").toOptional<double>(),
                          data.at("clamp_max").toOptional<double>());
    const auto grad_z =
        at::max_pool2d_with_indices_backward(grad, z, pool_kernel, pool_kernel, {0, 0}, {1, 1}, false, indices);

    variable_list grads_in(kNumArguments);
    if (need_scale) {
      const auto product = grad_z * gn_out;
      grads_in[10] = (scale.sym_numel() != 1 ? product.sum({0, 2, 3}) : product.sum()).reshape_symint(
          scale.sym_sizes());
    }
    const bool need_conv = need_input || need_weight || need_bias;
    if (need_conv || need_gamma || need_beta) {
      auto [grad_conv, grad_gamma, grad_beta] = at::native_group_norm_backward_symint(
          grad_z * s, conv, mean, rstd, optional_tensor(gamma), n, c, hw, num_groups,
          {need_conv, need_gamma, need_beta});
      grads_in[7] = grad_gamma;
      grads_in[8] = grad_beta;
      if (need_conv) {
        const std::vector<c10::SymInt> bias_sizes{c};
        std::tie(grads_in[0], grads_in[1], grads_in[2]) = at::convolution_backward_symint(
            grad_conv, input, weight, bias.defined() ? at::OptionalSymIntArrayRef(bias_sizes) : std::nullopt,
            params.stride, params.padding, params.dilation, false, sym({0, 0}), 1,
            {need_input, need_weight, need_bias});
      }
    }
    return grads_in;
  }
};

at::Tensor conv2d_group_norm_scale_max_pool_clamp_autograd(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
    const std::optional<at::Tensor>& gn_bias, double eps, const at::Tensor& scale, at::IntArrayRef pool_kernel,
    std::optional<double> clamp_min, std::optional<double> clamp_max) {
  if (!grad_wanted(input, weight, bias, gn_weight, gn_bias, scale)) {
    return conv2d_group_norm_scale_max_pool_clamp_below_autograd(input, weight, bias, stride, padding, dilation,
                                                                 num_groups, gn_weight, gn_bias, eps, scale,
                                                                 pool_kernel, clamp_min, clamp_max);
  }
  return Conv2dGroupNormScaleMaxPoolClampFunction::apply(input, weight, bias, stride, padding, dilation, num_groups,
                                                         gn_weight, gn_bias, eps, scale, pool_kernel, clamp_min,
                                                         clamp_max);
}

}  // namespace
}  // namespace convops::autograd

TORCH_LIBRARY_IMPL(convops, Autograd, m) {
  m.impl("conv2d_group_norm_scale_max_pool_clamp",
         &convops::autograd::conv2d_group_norm_scale_max_pool_clamp_autograd);
}
