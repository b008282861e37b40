// convops::conv_transpose2d / conv_transpose3d where the kernel equals the stride, as one GEMM and a pixel shuffle:
// the CUDA op's convops path for those problems, in place of the implicit-GEMM kernel (conv_transpose_kernel.cu),
// which spends its tap machinery on taps that never overlap. The GEMM is cuBLAS's, called with the convolution's
// precision (convolution_gemm.cuh); the shuffle is convops' (tap_shuffle.cuh).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>

#include "common/precision.h"
#include "conv_transpose.h"
#include "cuda/conv_transpose_k2_gemm.cuh"
#include "cuda/convolution_gemm.cuh"
#include "cuda/tap_shuffle.cuh"

namespace convops {
namespace cuda {

// A transposed convolution whose kernel equals its stride (no padding or output padding, dilation 1, one group: the
// 2x2 stride-2 upsampling of UNet decoders) gives each input pixel an output patch of its own, so it is a 1x1
// convolution to C_out * prod(kernel) channels followed by a pixel shuffle: one batched GEMM, W' (the weight's dims
// reordered to C_out, taps, C_in) times each image's C_in x pixels, then one pass that moves each product to its
// output pixel and adds the bias, as ATen adds it after cuDNN's convolution (a separate add of the rounded product).
// No taps overlap and no zeros are inserted, so every output is the same sum of products as eager's, non-finite
// values included, in another order, with eager's precision (TF32 as the convolution flags say). Applies to dense
// NCHW / NCDHW inputs, GEMM extents within cuBLAS's ints, at most tap_shuffle::kMaxLastTaps taps along the last
// dimension, and where convolution_gemm_applies (not under torch.use_deterministic_algorithms: there the
// implicit-GEMM kernel, which is deterministic, runs).
inline bool conv_transpose_gemm_applies(const at::Tensor& input, const at::Tensor& weight,
                                        const ConvTransposeArgs& args) {
  if (args.groups != 1 || !input.is_contiguous() ||
      input.suggest_memory_format() != at::MemoryFormat::Contiguous) {
    return false;
  }
  int64_t taps = 1, pixels = 1;
  for (int64_t d = 0; d < args.spatial_dims; ++d) {
    if (weight.size(2 + d) != args.stride[d] || args.padding[d] != 0 || args.output_padding[d] != 0 ||
        args.dilation[d] != 1) {
      return false;
    }
    taps *= weight.size(2 + d);
    pixels *= input.size(2 + d);
  }
  const int64_t last_taps = weight.size(-1);
  return last_taps <= tap_shuffle::kMaxLastTaps && input.size(-1) * last_taps < std::numeric_limits<int>::max() &&
         convolution_gemm_applies(input.size(0), weight.size(1) * taps, input.size(1), pixels);
}

// The GEMM and the shuffle into `output` (dense NCHW / NCDHW, the op's sizes; conv_transpose_gemm_applies holds).
inline void conv_transpose_as_gemm(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, const ConvTransposeArgs& args,
                                   at::Tensor& output) {
  const int64_t sd = args.spatial_dims, n = input.size(0), c_in = input.size(1), c_out = weight.size(1);
  const at::IntArrayRef in_size = input.sizes().slice(2), kernel = weight.sizes().slice(2);
  const int64_t taps = c10::multiply_integers(kernel), pixels = c10::multiply_integers(in_size);
  const bool tf32 = conv_allows_tf32(input);
  if (conv_transpose_k2_gemm_applies(input, weight, output, args, tf32)) {
    return conv_transpose_k2_gemm(input, weight, bias, output);  // one kernel, products never stored
  }
  // W'[(co, taps), ci] = weight[ci, co, taps]: the transpose of the (contiguous) weight viewed as C_in x (C_out
  // taps), which the GEMM passes to cuBLAS as a transpose flag (TF32 rounds a row-major copy of it instead).
  const at::Tensor w = weight.contiguous().view({c_in, c_out * taps}).t();
  // cuBLAS's TF32 GEMM in the channel-major orientation ran at half speed where an image has fewer pixels than
  // product channels (UNet c1024 -> 512 at 16x16, 256 pixels against 2048 products a pixel: 60.4 us against 33.1
  // for the pixel-major one, H200, 2026-11-27 13:03 UTC, .ab/orient_probe.py), and within 8% either way on the
  // wider UNet layers; strict fp32 pixel-major was 4-20% slower on all four, bf16 the same either way. So TF32 takes
  // the pixel-major products there, and the transposing shuffle.
  const bool pixel_major = tf32 && pixels < c_out * taps && taps <= tap_shuffle::kMaxPixelMajorTaps &&
                           pixel_major_shuffle_tiles(n, pixels, c_out, taps) <= std::numeric_limits<int>::max();
  const at::Tensor products =  // (N, C_out taps, pixels), or pixel-major (N, pixels, C_out taps)
      batched_convolution_gemm(w, input.view({n, c_in, pixels}), tf32,
                               pixel_major ? ProductLayout::kPixelMajor : ProductLayout::kChannelMajor)
          .contiguous();

  // 2-D as 3-D with k_d = D = 1.
  std::array<int64_t, 3> kernel3{1, 1, 1}, in_size3{1, 1, 1};
  std::copy(kernel.begin(), kernel.end(), kernel3.end() - sd);
  std::copy(in_size.begin(), in_size.end(), in_size3.end() - sd);
  if (pixel_major) {
    shuffle_pixel_major_taps_add_bias(products, bias, output, kernel3, in_size3);
  } else {
    shuffle_taps_add_bias(products, bias, output, kernel3, in_size3);
  }
}

}  // namespace cuda
}  // namespace convops
