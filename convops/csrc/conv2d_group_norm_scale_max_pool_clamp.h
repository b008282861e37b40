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
// has_nan_bound.
template <typename acc_t>
inline acc_t clamp_like_torch(acc_t z, bool has_lo, acc_t lo, bool has_hi, acc_t hi) {
  if (has_lo) z = z < lo ? lo : z;
  if (has_hi) z = z > hi ? hi : z;
  return z;
}

// torch.clamp's answer for a NaN bound depends on where it runs. On CUDA a NaN bound of a two-bound clamp makes every
// value NaN, while a lone one is ignored (clamp_min / clamp_max compare with fmax / fmin); on CPU the answer for a lone
// one has changed between releases (torch 2.13: every value NaN; 2.11: ignored). So a kernel given a NaN bound computes
// without the bounds and lets ATen clamp its output (clamp_with_aten), as eager does.
inline bool has_nan_bound(std::optional<double> lo, std::optional<double> hi) {
  return (lo.has_value() && std::isnan(*lo)) || (hi.has_value() && std::isnan(*hi));
}

inline at::Tensor clamp_with_aten(at::Tensor out, std::optional<double> lo, std::optional<double> hi) {
  const auto scalar = [](std::optional<double> v) { return v ? std::optional<at::Scalar>(*v) : std::nullopt; };
  return out.clamp_(scalar(lo), scalar(hi));
}

}  // namespace convops
