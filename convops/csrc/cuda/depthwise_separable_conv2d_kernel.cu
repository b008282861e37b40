// CUDA implementation of convops::depthwise_separable_conv2d. Under the path choice (cuda/path_choice.cuh) the op
// runs one of:
//   - the fused kernel (depthwise_separable_conv2d_pipelined.cuh: the depthwise intermediate stays in shared memory,
//     the 1x1 runs on tensor cores), for the problems it covers; elsewhere the "convops" path is the mixed one;
//   - "mixed": the convops depthwise kernel, then ATen's 1x1 convolution;
//   - "aten": ATen's two convolutions.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/precision.h"
#include "cuda/depthwise_conv2d_launch.cuh"
#include "cuda/depthwise_separable_conv2d_pipelined.cuh"
#include "cuda/device_utils.cuh"
#include "cuda/path_choice.cuh"
#include "depthwise_separable_conv2d.h"

#include <limits>
#include <optional>

namespace convops {
namespace cuda {
namespace depthwise {
namespace {

constexpr const char* kOp = "convops::depthwise_separable_conv2d";

// The problem's tensors as the fused kernel takes them (contiguous parameters).
struct Operands {
  at::Tensor input, dw_weight, pw_weight;
  std::optional<at::Tensor> dw_bias, pw_bias;
};

// Runs (or with dry_run only asks about) the fused kernel; false where the problem is outside its scope.
bool fused_kernel(const Operands& o, const at::Tensor& output, const DepthwiseGeometry& d, bool dry_run) {
  if (o.input.scalar_type() == at::kDouble) return false;
  bool ran = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, o.input.scalar_type(), "convops_depthwise_separable", [&] {
    ran = launch_separable_pipelined<scalar_t>(o.input, o.dw_weight, o.dw_bias, o.pw_weight, o.pw_bias, output, d,
                                               conv_allows_tf32(o.input), c10::cuda::getCurrentCUDAStream(),
                                               dry_run);
  });
  return ran;
}

// ATen's 1x1 convolution of the depthwise intermediate, the second stage of the mixed and the ATen paths, its output
// dense in the input's memory format.
at::Tensor aten_pointwise(const at::Tensor& mid, const at::Tensor& input, const at::Tensor& pointwise_weight,
                          const std::optional<at::Tensor>& pointwise_bias) {
  return at::convolution(mid, pointwise_weight, pointwise_bias, {1, 1}, {0, 0}, {1, 1}, false, {0, 0}, 1)
      .contiguous(input.suggest_memory_format());
}

at::Tensor depthwise_separable_conv2d_cuda(const at::Tensor& input, const at::Tensor& depthwise_weight,
                                           const std::optional<at::Tensor>& depthwise_bias,
                                           const at::Tensor& pointwise_weight,
                                           const std::optional<at::Tensor>& pointwise_bias, at::IntArrayRef stride,
                                           at::IntArrayRef padding, at::IntArrayRef dilation) {
  const auto d = check_depthwise_separable_conv2d(kOp, input, depthwise_weight, depthwise_bias, pointwise_weight,
                                                  pointwise_bias, stride, padding, dilation);
  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t out_channels = pointwise_weight.size(0);
  if (d.batch == 0) return empty_output(input, {0, out_channels, d.out_h, d.out_w});
  const int64_t int_max = std::numeric_limits<int>::max();
  CONVOPS_CHECK(kOp, d.in_h * d.in_w < int_max && d.out_h * d.out_w < int_max && out_channels < int_max,
                "one channel plane must have fewer than 2^31 elements, got input ", input.sizes());
  check_coordinates_fit_int(kOp, d);

  const Operands o{input, depthwise_weight.contiguous(), pointwise_weight.contiguous(),
                   contiguous_or_none(depthwise_bias), contiguous_or_none(pointwise_bias)};
  // The mixed path: the convops depthwise kernel into an intermediate in the input's dtype (exactly as the ATen pair
  // stores it), then ATen's 1x1.
  const auto mixed = [&] {
    auto mid = empty_output(input, {d.batch, d.out_channels, d.out_h, d.out_w});
    depthwise_conv2d_into(input, depthwise_weight, depthwise_bias, mid, d, kOp);
    return aten_pointwise(mid, input, pointwise_weight, pointwise_bias);
  };
  // The convops path: the fused kernel where it applies, the mixed path elsewhere (channels-last inputs, strides,
  // dilations, other paddings and filters, channel counts whose weights do not fit next to its pipeline, fp64).
  const bool fused = fused_kernel(o, at::Tensor(), d, /*dry_run=*/true);
  const auto convops_path = [&] {
    if (fused) {
      auto output = empty_output(input, {d.batch, out_channels, d.out_h, d.out_w});
      if (fused_kernel(o, output, d, /*dry_run=*/false)) return output;
    }
    return mixed();
  };
  const auto aten_path = [&] {
    const auto mid = at::convolution(input, depthwise_weight, depthwise_bias, stride, padding, dilation, false,
                                     {0, 0}, d.in_channels);
    return aten_pointwise(mid, input, pointwise_weight, pointwise_bias);
  };
  // Where the fused kernel applies, "auto" times the mixed path against it too (cuda/path_choice.cuh).
  const PathFn mixed_fn = mixed;
  return run_chosen_path(problem_key(kOp, input, depthwise_weight, depthwise_bias, pointwise_weight, pointwise_bias,
                                     stride, padding, dilation),
                         convops_path, aten_path, fused ? &mixed_fn : nullptr);
}

}  // namespace
}  // namespace depthwise
}  // namespace cuda

TORCH_LIBRARY_IMPL(convops, CUDA, m) {
  m.impl("depthwise_separable_conv2d", &cuda::depthwise::depthwise_separable_conv2d_cuda);
}

}  // namespace convops
