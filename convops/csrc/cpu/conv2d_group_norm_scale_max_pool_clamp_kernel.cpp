// CPU implementation of convops::conv2d_group_norm_scale_max_pool_clamp.
//
// ATen computes the convolution (in fp32 for half-precision inputs); everything after it is one fused pass per
// (image, group): numerically stable group statistics (each row's mean and M2 in double, merged with Chan's formula,
// so a conv output whose mean is far larger than its spread loses nothing to E[x^2] - E[x]^2 cancellation), then the
// GroupNorm affine in ATen's form y = a x + b (a = rstd gamma, b = beta - a mean) times scale, max-pooled and clamped.
// With a finite, (a x + b) s is monotone in x with the sign of a s, so each pooling window needs only the max or only
// the min of its raw conv values, and the affine + clamp runs on that one value (see pool_finite_affine).
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "common/checks.h"
#include "conv2d_group_norm_scale_max_pool_clamp.h"

namespace convops {
namespace {

// Count, mean and sum of squared deviations of a set of values; merge() is Chan et al.'s parallel update.
struct Moments {
  double count = 0, mean = 0, m2 = 0;
  void merge(double n, double m, double s) {
    if (n == 0) return;
    const double total = count + n, delta = m - mean;
    mean += delta * (n / total);
    m2 += s + delta * delta * (count * n / total);
    count = total;
  }
};

// One channel's GroupNorm affine as ATen forms it (aten/src/ATen/native/cpu/group_norm_kernel.cpp and
// cuda/group_norm_kernel.cu, in opmath precision): y = a x + b, a = rstd * gamma, b = -a * mean + beta. Its NaN / Inf
// behaviour is the contract: an infinite gamma makes a and b infinite, and a x + b is then NaN wherever the two
// infinities cancel.
template <typename acc_t>
struct GroupNormAffine {
  acc_t mean, beta, a, b;
  GroupNormAffine(acc_t mean_, acc_t rstd, acc_t gamma, acc_t beta_)
      : mean(mean_), beta(beta_), a(rstd * gamma), b(-a * mean_ + beta_) {}
};

// max over a pooling window of (a x + b) s for finite a: the affine of the window's max (a s >= 0) or min (a s < 0).
// It is evaluated as (v - mean) a + beta, the same real number as a v + b with the same NaN / +-Inf outcome for any
// finite a, mean and v, without the cancellation of a v against a mean (|a mean| 2^-24 in fp32, which a mean 500x
// the spread would make ~1e-5 |gamma s|).
template <typename acc_t>
acc_t pool_finite_affine(const acc_t* window, const GroupNormAffine<acc_t>& affine, acc_t s,
                         const ConvGnPoolGeometry& g, int64_t xs_h, int64_t xs_w) {
  const bool take_max = affine.a * s >= acc_t(0);
  acc_t v = window[0];
  for (int64_t i = 0; i < g.pool_h; ++i) {
    for (int64_t j = 0; j < g.pool_w; ++j) {
      const acc_t e = window[i * xs_h + j * xs_w];
      // A NaN anywhere in the window wins, as in max_pool2d.
      if (std::isnan(e) || (take_max ? e > v : e < v)) v = e;
    }
  }
  return ((v - affine.mean) * affine.a + affine.beta) * s;
}

// max over a pooling window of (a x + b) s for a = +-Inf, element by element as ATen evaluates it: a x + b is b
// where a x is the infinity b is (x of the sign of a b, not 0) and NaN elsewhere, so one element decides nothing.
template <typename acc_t>
acc_t pool_each_element(const acc_t* window, const GroupNormAffine<acc_t>& affine, acc_t s,
                        const ConvGnPoolGeometry& g, int64_t xs_h, int64_t xs_w) {
  acc_t best = -std::numeric_limits<acc_t>::infinity();
  for (int64_t i = 0; i < g.pool_h; ++i) {
    for (int64_t j = 0; j < g.pool_w; ++j) {
      const acc_t z = (affine.a * window[i * xs_h + j * xs_w] + affine.b) * s;
      if (std::isnan(z) || z > best) best = z;
    }
  }
  return best;
}

template <typename scalar_t>
void group_norm_scale_pool_clamp(const at::Tensor& conv, const std::optional<at::Tensor>& gn_weight,
                                 const std::optional<at::Tensor>& gn_bias, const at::Tensor& scale, double eps,
                                 std::optional<double> clamp_min, std::optional<double> clamp_max,
                                 const ConvGnPoolGeometry& g, at::Tensor& out) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t* x = conv.const_data_ptr<acc_t>();
  scalar_t* y = out.data_ptr<scalar_t>();
  const int64_t xs_n = conv.stride(0), xs_c = conv.stride(1), xs_h = conv.stride(2), xs_w = conv.stride(3);
  const int64_t ys_n = out.stride(0), ys_c = out.stride(1), ys_h = out.stride(2), ys_w = out.stride(3);
  // Small per-channel parameter vectors, read once as dense acc_t (a strided or expanded view, which reshape and a
  // same-dtype .to() hand back as it is, is read through a raw pointer below).
  const auto to_acc = [](const at::Tensor& t) {
    return t.reshape(-1).to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
  };
  const at::Tensor gamma = gn_weight.has_value() && gn_weight->defined() ? to_acc(*gn_weight) : at::Tensor();
  const at::Tensor beta = gn_bias.has_value() && gn_bias->defined() ? to_acc(*gn_bias) : at::Tensor();
  const at::Tensor s = to_acc(scale);
  const acc_t* gamma_p = gamma.defined() ? gamma.const_data_ptr<acc_t>() : nullptr;
  const acc_t* beta_p = beta.defined() ? beta.const_data_ptr<acc_t>() : nullptr;
  const acc_t* s_p = s.const_data_ptr<acc_t>();
  const bool has_lo = clamp_min.has_value(), has_hi = clamp_max.has_value();
  const acc_t lo = has_lo ? static_cast<acc_t>(*clamp_min) : acc_t(0);
  const acc_t hi = has_hi ? static_cast<acc_t>(*clamp_max) : acc_t(0);
  const int64_t cpg = g.channels_per_group;

  at::parallel_for(0, g.batch * g.num_groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / g.num_groups, grp = item % g.num_groups;
      Moments moments;
      for (int64_t c = grp * cpg; c < (grp + 1) * cpg; ++c) {
        for (int64_t h = 0; h < g.conv_h; ++h) {
          const acc_t* row = x + n * xs_n + c * xs_c + h * xs_h;
          double sum = 0;
          for (int64_t w = 0; w < g.conv_w; ++w) sum += static_cast<double>(row[w * xs_w]);
          const double mean = sum / static_cast<double>(g.conv_w);
          double m2 = 0;
          for (int64_t w = 0; w < g.conv_w; ++w) {
            const double d = static_cast<double>(row[w * xs_w]) - mean;
            m2 += d * d;
          }
          moments.merge(static_cast<double>(g.conv_w), mean, m2);
        }
      }
      const acc_t mean = static_cast<acc_t>(moments.mean);
      const acc_t rstd = static_cast<acc_t>(1.0 / std::sqrt(moments.m2 / moments.count + eps));

      for (int64_t c = grp * cpg; c < (grp + 1) * cpg; ++c) {
        const acc_t gm = gamma_p ? gamma_p[c] : acc_t(1);
        const GroupNormAffine<acc_t> affine(mean, rstd, gm, beta_p ? beta_p[c] : acc_t(0));
        const acc_t sc = s_p[g.scale_per_channel ? c : 0];
        const acc_t* plane = x + n * xs_n + c * xs_c;
        for (int64_t ph = 0; ph < g.pooled_h; ++ph) {
          for (int64_t pw = 0; pw < g.pooled_w; ++pw) {
            const acc_t* window = plane + ph * g.pool_h * xs_h + pw * g.pool_w * xs_w;
            const acc_t z = std::isinf(affine.a) ? pool_each_element(window, affine, sc, g, xs_h, xs_w)
                                                 : pool_finite_affine(window, affine, sc, g, xs_h, xs_w);
            y[n * ys_n + c * ys_c + ph * ys_h + pw * ys_w] =
                static_cast<scalar_t>(clamp_like_torch(z, has_lo, lo, has_hi, hi));
          }
        }
      }
    }
  });
}

at::Tensor conv2d_group_norm_scale_max_pool_clamp_cpu(
    const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t num_groups, const std::optional<at::Tensor>& gn_weight,
    const std::optional<at::Tensor>& gn_bias, double eps, const at::Tensor& scale, at::IntArrayRef pool_kernel,
    std::optional<double> clamp_min, std::optional<double> clamp_max) {
  const auto g = check_conv2d_group_norm_scale_max_pool_clamp(input, weight, bias, stride, padding, dilation,
                                                              num_groups, gn_weight, gn_bias, eps, scale, pool_kernel);
  at::Tensor out = empty_output(input, {g.batch, g.out_channels, g.pooled_h, g.pooled_w});
  if (g.batch == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "conv2d_group_norm_cpu", [&] {
    // Half-precision inputs convolve in fp32 (exact products of their values): the output is rounded once, at the end.
    const auto acc = c10::CppTypeToScalarType<at::opmath_type<scalar_t>>::value;
    const auto as_acc = [&](const std::optional<at::Tensor>& t) -> std::optional<at::Tensor> {
      return t.has_value() && t->defined() ? std::optional<at::Tensor>(t->to(acc)) : std::nullopt;
    };
    const at::Tensor conv = at::convolution(input.to(acc), weight.to(acc), as_acc(bias), stride, padding, dilation,
                                            /*transposed=*/false, /*output_padding=*/{0, 0}, /*groups=*/1);
    group_norm_scale_pool_clamp<scalar_t>(conv, gn_weight, gn_bias, scale, eps, clamp_min, clamp_max, g, out);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(convops, CPU, m) {
  m.impl("conv2d_group_norm_scale_max_pool_clamp",
         conv2d_group_norm_scale_max_pool_clamp_entry<conv2d_group_norm_scale_max_pool_clamp_cpu>);
}

}  // namespace convops
