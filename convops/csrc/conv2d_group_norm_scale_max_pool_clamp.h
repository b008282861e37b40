// convops::conv2d_group_norm_scale_max_pool_clamp: argument validation and problem geometry, shared by the CPU and
// CUDA kernels.
//
// The op is clamp(max_pool2d(group_norm(conv2d(x)) * scale, k, stride=k), lo, hi) with groups = 1 convolution,
// per-channel (or uniform) scale of any sign, and either clamp bound optional.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <optional>

namespace convops {

struct ConvGnPoolGeometry {
  int64_t batch, in_channels, out_channels, in_h, in_w;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t conv_h, conv_w;            // full convolution output: group statistics cover all of it
  int64_t num_groups, channels_per_group;
  int64_t pool_h, pool_w;            // pool kernel = pool stride
  int64_t pooled_h, pooled_w;        // floor(conv / pool): trailing rows/cols are never pooled
  bool scale_per_channel;            // false: scale holds one value for every channel
};

// Validates every argument, raising "convops::conv2d_group_norm_scale_max_pool_clamp: ..." errors.
ConvGnPoolGeometry check_conv2d_group_norm_scale_max_pool_clamp(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
    const std::optional<at::Tensor>& gn_bias, double eps, const at::Tensor& scale, at::IntArrayRef pool_kernel);

// The elementwise tail, identical on every device: z = (a v + b) s with ATen's group-norm coefficients
// a = rstd * gamma, b = beta - a * mean (evaluated as (v - mean) a + beta while a is finite), then clamp as
// torch.clamp does it (a NaN value stays NaN; with lo > hi every value becomes hi). NaN bounds never reach it:
// conv2d_group_norm_scale_max_pool_clamp_entry.
template <typename acc_t>
inline acc_t clamp_like_torch(acc_t z, bool has_lo, acc_t lo, bool has_hi, acc_t hi) {
  if (has_lo) z = z < lo ? lo : z;
  if (has_hi) z = z > hi ? hi : z;
  return z;
}

// Signature of a device kernel: the op's arguments -> the op's output.
using ConvGnPoolKernel = at::Tensor (*)(const at::Tensor& input, const at::Tensor& weight,
                                        const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                        at::IntArrayRef padding, at::IntArrayRef dilation, int64_t num_groups,
                                        const std::optional<at::Tensor>& gn_weight,
                                        const std::optional<at::Tensor>& gn_bias, double eps, const at::Tensor& scale,
                                        at::IntArrayRef pool_kernel, std::optional<double> clamp_min,
                                        std::optional<double> clamp_max);

// The dispatcher entry of the op for one device's kernel. torch.clamp's answer for a NaN bound depends on where it
// runs: on CUDA a NaN bound of a two-bound clamp makes every value NaN while a lone one is ignored (clamp_min /
// clamp_max compare with fmax / fmin); on CPU the answer for a lone one has changed between releases (torch 2.13:
// every value NaN; 2.11: ignored). So with a NaN bound the kernel runs without the bounds and ATen clamps its
// output, as eager does; the kernels never see a NaN bound.
template <ConvGnPoolKernel kernel>
at::Tensor conv2d_group_norm_scale_max_pool_clamp_entry(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
    const std::optional<at::Tensor>& gn_bias, double eps, const at::Tensor& scale, at::IntArrayRef pool_kernel,
    std::optional<double> clamp_min, std::optional<double> clamp_max) {
  const bool nan_bound = (clamp_min.has_value() && std::isnan(*clamp_min)) ||
                         (clamp_max.has_value() && std::isnan(*clamp_max));
  if (!nan_bound) {
    return kernel(input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps, scale,
                  pool_kernel, clamp_min, clamp_max);
  }
  const auto scalar = [](std::optional<double> v) { return v ? std::optional<at::Scalar>(*v) : std::nullopt; };
  return kernel(input, weight, bias, stride, padding, dilation, num_groups, gn_weight, gn_bias, eps, scale,
                pool_kernel, std::nullopt, std::nullopt)
      .clamp_(scalar(clamp_min), scalar(clamp_max));
}

}  // namespace convops
