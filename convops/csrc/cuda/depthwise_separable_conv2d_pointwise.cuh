// The separable op's 1x1 for few pixels and a large weight: the batch-1 late layers of ConvNeXt-T (768 -> 3072 at
// 7x7, 384 -> 1536 at 14x14), where the 1x1 is a product of 49-196 pixels by a weight of up to 9.4 MB (fp32) and
// every library call runs it at 3-10x the time of reading that weight once: cuDNN's 1x1 of c768 7x7 -> 3072 took
// 20.2 us in NCHW and 14.1 in NHWC under TF32, cuBLAS's mm of the same in strict fp32 29.0, against 2.8 for the
// bytes over the copy bandwidth (H200, 2026-11-28 12:10 UTC, tools/probe/batch1_pointwise.py). Their kernels tile
// for many pixels, so a product of few pixels runs on a few CTAs that each read a long slice of the weight.
//
// Design (depthwise_separable_conv2d_pointwise.cu): the grid is (tiles of 32 couts, tiles of 64 pixels, splits of
// the input channels), sized to about four CTAs an SM, so that the weight is read once, by many CTAs at a time, each
// staging 32 channels a step with the next step's loads in flight. Each thread sums 2 couts x 4 pixels in fp32 on
// the CUDA cores; with several splits a second kernel adds the splits' partial sums in split order (the result does
// not depend on timing) and stores the output.
//
// Rounding, as ATen's 1x1 convolution: fp32 accumulation; under TF32 (conv_allows_tf32) both operands rounded to
// TF32 to nearest, ties to even, as cuDNN rounds them (device_utils.cuh, round_tf32), so each product is exact in
// fp32 and only the order of the fp32 sums differs from cuDNN's; the bias added to the product after its rounding to
// the output dtype, as ATen adds it after cuDNN's convolution.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace convops {
namespace cuda {

// Whether pointwise_few_pixels takes the 1x1 of `mid` (N, C, H, W; any strides) by `weight` (C_out, C, 1, 1): fp32,
// fp16 or bf16, at most 256 pixels (N H W) and a weight of at least 2^17 elements (a smaller one is a few
// microseconds of latency in every implementation).
bool pointwise_few_pixels_applies(const at::Tensor& mid, const at::Tensor& weight);

// The 1x1 convolution of `mid` by `weight` plus `bias` (C_out), dense in `memory_format` (NCHW or channels-last), on
// the current stream; tf32: the caller's conv_allows_tf32. Within pointwise_few_pixels_applies.
at::Tensor pointwise_few_pixels(const at::Tensor& mid, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                at::MemoryFormat memory_format, bool tf32);

}  // namespace cuda
}  // namespace convops
