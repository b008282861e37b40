// CPU kernels of convops::conv_transpose2d / conv_transpose3d: ATen's transposed convolution, fp16/bf16 computed
// in fp32 (rounded once at the end, as the CUDA kernels do), output in the documented layout.
#include <torch/library.h>

#include "common/checks.h"
#include "conv_transpose.h"

namespace convops {
namespace {

at::Tensor conv_transpose_cpu(const char* op, const at::Tensor& input, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias, const ConvTransposeArgs& args) {
  std::vector<int64_t> sizes{input.size(0), weight.size(1) * args.groups};
  sizes.insert(sizes.end(), args.output_size.begin(), args.output_size.end());
  at::Tensor output = empty_output(input, sizes);
  if (output.numel() == 0) return output;

  const bool low_precision = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
  const auto compute = [&](const at::Tensor& t) { return low_precision ? t.to(at::kFloat) : t; };
  std::optional<at::Tensor> compute_bias;
  if (bias.has_value() && bias->defined()) compute_bias = compute(*bias);
  const at::Tensor result =
      at::convolution(compute(input), compute(weight), compute_bias, args.stride, args.padding, args.dilation,
                      /*transposed=*/true, args.output_padding, args.groups);
  output.copy_(result);
  return output;
}

}  // namespace

TORCH_LIBRARY_IMPL(convops, CPU, m) {
  m.impl("conv_transpose2d", conv_transpose_entry<conv_transpose_cpu, 2>);
  m.impl("conv_transpose3d", conv_transpose_entry<conv_transpose_cpu, 3>);
}

}  // namespace convops
