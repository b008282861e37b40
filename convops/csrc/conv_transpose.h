// convops::conv_transpose2d / conv_transpose3d: F.conv_transpose2d/3d over their whole parameter space.
//
// The validation and the (un)batching live here, shared by the CPU and CUDA kernels, so both devices accept and
// reject exactly the same arguments, with the same messages.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <vector>

namespace convops {

// Validated arguments of one call, each per-dimension list `spatial_dims` long.
struct ConvTransposeArgs {
  int64_t spatial_dims;
  std::vector<int64_t> stride, padding, output_padding, dilation;
  int64_t groups;
  std::vector<int64_t> output_size;  // spatial extents of the output
};

// Checks everything ATen checks for a transposed convolution (ranks, channels vs groups, bias shape, dtypes and
// devices, parameter signs, output_padding < stride or dilation, output size > 0), naming `op` in each error.
// `input` is batched here: (N, C_in, *spatial).
ConvTransposeArgs check_conv_transpose_args(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef output_padding, int64_t groups,
                                            at::IntArrayRef dilation, int64_t spatial_dims);

// The output of one call, uninitialised: (N, groups * C_out/group, *output_size), dense in
// input.suggest_memory_format() (empty_output), as every device kernel returns it.
at::Tensor empty_conv_transpose_output(const at::Tensor& input, const at::Tensor& weight,
                                       const ConvTransposeArgs& args);

// Signature of a device kernel: batched input, validated args -> output dense in input.suggest_memory_format().
using ConvTransposeKernel = at::Tensor (*)(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                           const std::optional<at::Tensor>& bias, const ConvTransposeArgs& args);

// Validates, accepts an unbatched input (C_in, *spatial) as F.conv_transpose does, and runs `kernel`.
at::Tensor run_conv_transpose(const char* op, ConvTransposeKernel kernel, const at::Tensor& input,
                              const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                              at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef output_padding,
                              int64_t groups, at::IntArrayRef dilation, int64_t spatial_dims);

// The dispatcher entry of convops::conv_transpose2d / conv_transpose3d for one device's kernel: the two ops differ
// only in their name and rank, and both devices share the validation above.
template <ConvTransposeKernel kernel, int64_t spatial_dims>
at::Tensor conv_transpose_entry(const at::Tensor& input, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef output_padding, int64_t groups, at::IntArrayRef dilation) {
  static_assert(spatial_dims == 2 || spatial_dims == 3, "conv_transpose is 2-D or 3-D");
  return run_conv_transpose(spatial_dims == 2 ? "convops::conv_transpose2d" : "convops::conv_transpose3d", kernel,
                            input, weight, bias, stride, padding, output_padding, groups, dilation, spatial_dims);
}

}  // namespace convops
