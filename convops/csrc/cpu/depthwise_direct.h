// The CPU depthwise convolution shared by convops::depthwise_conv2d and the first stage of
// convops::depthwise_separable_conv2d.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "depthwise_conv2d.h"

namespace convops {

// A direct loop over output pixels and in-bounds taps, accumulating in float (double for float64) and rounding once
// to the input's dtype. Output dense in `format`.
//
// Why not at::convolution: on AVX-512 machines oneDNN's depthwise path crashes on some float16 channels_last
// geometries (eager F.conv2d segfaults the same way; 1x1 kernel, stride (1, 3), dilation (1, 3), padding (1, 2),
// found by tests/test_fuzz.py on the GPU machine's Xeon) and multiplies padded zeros by non-finite weights. A tap
// that falls on padding is skipped here, as in the mathematical definition.
at::Tensor depthwise_conv2d_direct(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, const DepthwiseGeometry& g,
                                   at::MemoryFormat format);

}  // namespace convops
