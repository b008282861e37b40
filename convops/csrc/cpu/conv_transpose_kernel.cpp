// CPU kernels of convops::conv_transpose2d / conv_transpose3d: ATen's native transposed convolution (gemm + col2im)
// one group at a time, fp16/bf16 computed in fp32 (rounded once at the end, as the CUDA kernels do), output in the
// documented layout.
//
// Why not at::convolution: on the CPU it hands fp32/fp16/bf16 to oneDNN's deconvolution, which multiplies weight taps
// by implicit zeros, so a NaN/Inf weight tap that meets only padding poisons outputs that ATen's float64 path (and
// the mathematical definition) leaves finite (tests/test_fuzz.py, *_transposed_weights).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "common/checks.h"
#include "conv_transpose.h"

namespace convops {
namespace {

at::Tensor conv_transpose_cpu(const char* op, const at::Tensor& input, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias, const ConvTransposeArgs& args) {
  at::Tensor output = empty_conv_transpose_output(input, weight, args);
  if (output.numel() == 0) return output;

  const bool low_precision = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
  const auto compute = [&](const at::Tensor& t) { return low_precision ? t.to(at::kFloat) : t; };
  std::optional<at::Tensor> compute_bias;
  if (bias.has_value() && bias->defined()) compute_bias = compute(*bias);
  const at::Tensor x = compute(input), w = compute(weight);
  const std::vector<int64_t> kernel(weight.sizes().begin() + 2, weight.sizes().end());
  const int64_t cin_g = input.size(1) / args.groups, cout_g = weight.size(1);
  std::vector<at::Tensor> groups;
  for (int64_t g = 0; g < args.groups; ++g) {
    const at::Tensor xg = x.narrow(1, g * cin_g, cin_g), wg = w.narrow(0, g * cin_g, cin_g);
    std::optional<at::Tensor> bg;
    if (compute_bias) bg = compute_bias->narrow(0, g * cout_g, cout_g);
    groups.push_back(args.spatial_dims == 2
                         ? at::slow_conv_transpose2d(xg, wg, kernel, bg, args.stride, args.padding,
                                                     args.output_padding, args.dilation)
                         : at::slow_conv_transpose3d(xg, wg, kernel, bg, args.stride, args.padding,
                                                     args.output_padding, args.dilation));
  }
  output.copy_(args.groups == 1 ? groups[0] : at::cat(groups, 1));
  return output;
}

}  // namespace

TORCH_LIBRARY_IMPL(convops, CPU, m) {
  m.impl("conv_transpose2d", conv_transpose_entry<conv_transpose_cpu, 2>);
  m.impl("conv_transpose3d", conv_transpose_entry<conv_transpose_cpu, 3>);
}

}  // namespace convops
