// Copies between NCHW (NCDHW) and channels-last, and the channels-last round trips of the ops' paths
// (path_choice.cuh, layout_for), which copy an input to channels-last and an output back.
//
// Why convops' own: ATen's `contiguous(memory_format)` runs these permutations as an elementwise copy at about half
// the bandwidth of a tiled transpose (H200, 2026-11-28 08:17 UTC: 7.3 us for 6 MB in fp32 where Inductor's Triton
// transpose took 3.9; 15 us against about 4 for 14 MB), and a conv's bias added after cuDNN's NHWC kernel is one
// more pass over the output (14 us for 19 MB) that the copy back can fold in.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace convops {
namespace cuda {

// The input copied to channels-last (channels_last_3d for a 5-D input). Dense NCHW / NCDHW fp32, fp16 and bf16
// inputs take the tiled transpose; others ATen's copy.
at::Tensor channels_last_copy(const at::Tensor& input);

// A dense channels-last (N, C, ...) tensor copied to dense NCHW / NCDHW, adding bias[c] (C values of its dtype) to
// every element of channel c where given, rounded once as ATen's add rounds a convolution's output plus its bias.
// Inputs of other layouts or dtypes take ATen's copy and add (an NCHW-dense input without a bias comes back as it
// is; the input is never written).
at::Tensor channels_first_copy(const at::Tensor& input, const std::optional<at::Tensor>& bias = std::nullopt);

}  // namespace cuda
}  // namespace convops
