#include "cpu/depthwise_direct.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "common/checks.h"

namespace convops {
namespace {

// The taps k in [first, last) of one kernel axis whose input coordinate o * stride - pad + k * dilation is in
// [0, size).
struct TapRange {
  int64_t first, last;
};

TapRange in_bounds_taps(int64_t o, int64_t stride, int64_t pad, int64_t dilation, int64_t kernel, int64_t size) {
  const int64_t origin = o * stride - pad;
  const int64_t first = origin >= 0 ? 0 : (-origin + dilation - 1) / dilation;
  const int64_t last = origin >= size ? 0 : std::min(kernel, (size - 1 - origin) / dilation + 1);
  return {first, std::max(first, last)};
}

template <typename scalar_t>
void depthwise_direct_kernel(const at::Tensor& input, const at::Tensor& weight, const at::Tensor* bias,
                             at::Tensor& out, const DepthwiseGeometry& g) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* x = input.const_data_ptr<scalar_t>();
  const scalar_t* w = weight.const_data_ptr<scalar_t>();        // contiguous (C_out, 1, kh, kw)
  const scalar_t* b = bias ? bias->const_data_ptr<scalar_t>() : nullptr;
  scalar_t* y = out.mutable_data_ptr<scalar_t>();
  const auto xs = input.strides();
  const auto ys = out.strides();
  const int64_t taps = g.kernel_h * g.kernel_w;
  // One (image, output channel) plane per task: a plane reads one input plane and one filter.
  at::parallel_for(0, g.batch * g.out_channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / g.out_channels, co = plane % g.out_channels, ci = co / g.multiplier;
      const scalar_t* xp = x + n * xs[0] + ci * xs[1];
      const scalar_t* wp = w + co * taps;
      scalar_t* yp = y + n * ys[0] + co * ys[1];
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        const auto rows = in_bounds_taps(oh, g.stride_h, g.pad_h, g.dilation_h, g.kernel_h, g.in_h);
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const auto cols = in_bounds_taps(ow, g.stride_w, g.pad_w, g.dilation_w, g.kernel_w, g.in_w);
          acc_t acc = b ? static_cast<acc_t>(b[co]) : acc_t(0);
          for (int64_t kh = rows.first; kh < rows.last; ++kh) {
            const scalar_t* xrow = xp + (oh * g.stride_h - g.pad_h + kh * g.dilation_h) * xs[2];
            const int64_t iw0 = ow * g.stride_w - g.pad_w;
            for (int64_t kw = cols.first; kw < cols.last; ++kw) {
              acc += static_cast<acc_t>(wp[kh * g.kernel_w + kw]) *
                     static_cast<acc_t>(xrow[(iw0 + kw * g.dilation_w) * xs[3]]);
            }
          }
          yp[oh * ys[2] + ow * ys[3]] = static_cast<scalar_t>(acc);
        }
      }
    }
  });
}

}  // namespace

at::Tensor depthwise_conv2d_direct(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, const DepthwiseGeometry& g,
                                   at::MemoryFormat format) {
  auto out = at::empty({g.batch, g.out_channels, g.out_h, g.out_w}, input.options().memory_format(format));
  const auto w = weight.contiguous();
  const auto b = contiguous_or_none(bias);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "depthwise_conv2d_direct", [&] {
    depthwise_direct_kernel<scalar_t>(input, w, b ? &*b : nullptr, out, g);
  });
  return out;
}

}  // namespace convops
