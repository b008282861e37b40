// The separable op's 1x1 under TF32 for few pixels and a large weight: the batch-1 late layers of ConvNeXt-T
// (768 -> 3072 at 7x7, 384 -> 1536 at 14x14), where the 1x1 is a product of 49-196 pixels by a weight of up to
// 9.4 MB and every library call runs it at several times the time of reading that weight once: cuDNN's 1x1 of c768
// 7x7 -> 3072 took 20.2 us in NCHW and 14.1 in NHWC under TF32 against 2.8 for the bytes over the copy bandwidth
// (H200, 2026-11-28 12:10 UTC, tools/probe/batch1_pointwise.py). The ConvNeXt-T row was the sweep's one TF32 row
// under 1.0x in that day's full run (0.988x against torch.compile, bench/RESULTS.md).
//
// Design (depthwise_separable_conv2d_pointwise.cu), a skinny GEMM streamed from memory: the grid is (tiles of 128
// couts, tiles of 64 pixels, splits of the input channels), with as many splits as give two CTAs an SM in one wave,
// so that the weight is read once, by every SM at a time. Each CTA streams its split's channels through a ring of
// three stages of 32 channels (the weight's 128 x 32 block and the input's 32 channels of the tile's pixels, copied
// with cp.async, 27 KB a stage), and its 8 warps (4 along the couts x 2 along the pixels, each 32 couts x 32 pixels)
// multiply each stage on the tensor cores (mma.sync m16n8k8) while the next two land. The input tile is held
// [pixel][channel] for an NHWC intermediate (16-byte copies) and [channel][pixel] otherwise (4-byte copies), so that
// the copies read consecutive addresses and the fragment reads fall in distinct banks in both. With several splits
// a second kernel adds the splits' partial sums in split order (the result does not depend on timing), adds the
// bias and stores the output, through shared memory where the output is NCHW.
//
// History (H200, 2026-11-28): a first version on the CUDA cores (FFMA, 2 couts x 4 pixels a thread) was 2.5-4x
// slower than cuDNN under TF32 (41-45 us on c768 7x7 -> 3072, 12:26 UTC), shared-memory bound. A second on the tensor
// cores copied each CTA's whole share (64 couts x 96 channels) at once, waited, multiplied and stored, 3 CTAs of 4
// warps an SM all in step: 25-30 us in the decisions against cuDNN's 9.5-22; ncu (13:24 UTC): 22.8 us, DRAM 8.8%,
// 8.3 cycles between a warp's instructions, the same time at a quarter of the weight. This version overlaps the
// copies with the products and gives each warp 8 MMAs per fragment set instead of 7 per A fragment.
//
// Rounding, as cuDNN's TF32 1x1: both operands rounded to TF32 to nearest, ties to even (device_utils.cuh,
// tf32_bits), products summed in fp32 on the tensor cores; the bias added to the output in fp32, as ATen adds it
// after cuDNN's convolution.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace convops {
namespace cuda {

// Whether pointwise_few_pixels takes the 1x1 of `mid` (N, C, H, W; any strides) by `weight` (C_out, C, 1, 1): fp32
// under TF32 (conv_allows_tf32), at most 256 pixels (N H W) and a weight of at least 2^17 elements (a smaller one
// is a few microseconds of latency in every implementation) whose channels are a multiple of 4 (16-byte weight
// copies), on a device with 81.5 KiB of shared memory a block.
bool pointwise_few_pixels_applies(const at::Tensor& mid, const at::Tensor& weight);

// The 1x1 convolution of `mid` by `weight` plus `bias` (C_out), dense in `memory_format` (NCHW or channels-last), on
// the current stream. Within pointwise_few_pixels_applies.
at::Tensor pointwise_few_pixels(const at::Tensor& mid, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                at::MemoryFormat memory_format);

}  // namespace cuda
}  // namespace convops
