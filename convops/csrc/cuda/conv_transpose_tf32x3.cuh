// Strict fp32 conv_transpose on the TF32 tensor cores, as 3xTF32: x * w = xh * wh + xh * wl + xl * wh + xl * wl,
// where xh = x rounded to TF32 and xl = x - xh (exact in fp32), and likewise for w; the dropped xl * wl is below
// 2^-22 of the product, what fp32's own rounding loses. The three products are one convolution with three times the
// input channels, each group's channels in three blocks, which one TF32 kernel sums in one pass (the shift kernel
// where it applies, else the mma.sync one; conv_transpose_kernel.cu, launch_tf32x3):
//
//   input  per group [xh | xh' | xl]     (xh' = xh where x is finite, else 0)
//   weight per group [wh | wl  | wh']    (wl, wh' = 0 where w is non-finite)
//
// Non-finite values are block 0's alone (xh * wh keeps exactly the NaN/Inf pattern of x * w there), so the TF32
// path's handling of non-finite inputs and weights (conv_transpose_nonfinite.cuh) serves this one unchanged, and
// blocks 1 and 2 never make an Inf * 0. The kernel adds each k-step's products in fp32 with rounding to nearest
// (Tf32RoundedSumsMma): summed by the tensor cores alone, which truncate, 3xTF32 missed fp32's tolerance over
// reductions of a few thousand terms. Two cases differ from fp32 in kind: a value below about 2^-137 in magnitude
// rounds to 0 in TF32, so Inf times it is NaN where fp32 has +-Inf; and a product past FLT_MAX in magnitude (|x w|
// above about 2^11 FLT_MAX) overflows in xh * wh while xh * wl or xl * wh may overflow with the other sign, NaN where
// fp32 has +-Inf; and since xh and wh are rounded to nearest, |xh wh| can exceed |x w| by about 2^-11 of it, so a
// finite product within about that of FLT_MAX can come out Inf.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/tuning.h"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace tf32x3 {

// The split copy of the input is three times its size: batches are split so that one copy stays within 1 GiB (the
// L1-70 seed: 4 chunks of 2 images), or CONVOPS_TF32X3_SCRATCH_MB (read once; for tests).
inline int64_t scratch_bytes() {
  static const int64_t bytes = tuning_value("CONVOPS_TF32X3_SCRATCH_MB", 1024) << 20;
  return bytes;
}

// x = hi + lo, hi rounded to nearest TF32 (as the kernels round their operands), or toward zero where that would
// overflow past FLT_MAX; non-finite x is all hi.
__device__ __forceinline__ void split(float x, float& hi, float& lo) {
  if (!isfinite(x)) {
    hi = x;
    lo = 0.f;
    return;
  }
  uint32_t h = tf32_bits(x);
  if (isinf(__uint_as_float(h))) h = __float_as_uint(x) & ~0x1fffu;
  hi = __uint_as_float(h);
  lo = x - hi;
}

// The order of a group's three channel blocks: the input's [xh | xh' | xl], the weight's [wh | wl | wh'].
enum class Blocks { kInput, kWeight };

struct SplitParams {
  const float* source;  // dense in its memory format: (N, C, inner) channels-first or (N, inner, C) channels-last
  float* split;         // the same with 3 * C channels, in the same memory format
  int vectors;          // V-element vectors of the source
  int channels, cin_g, inner;  // inner: the spatial size (channels-first) or 1 (channels-last)
  FastDivmod by_inner, by_channels, by_cin_g;
};

// One thread a vector of V source elements that share a channel (channels-first) or a group's run of channels
// (channels-last), written to its three blocks, cin_g * inner apart.
template <int V, bool kChannelsLast, Blocks kBlocks>
__global__ void split_kernel(const SplitParams p) {
  using Vec = AlignedVector<float, V>;
  const int block_stride = p.cin_g * p.inner;
  for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < p.vectors; v += gridDim.x * blockDim.x) {
    const int i = v * V;
    int outer, c, s = 0;
    if constexpr (kChannelsLast) {
      c = p.by_channels.divmod(i, outer);  // i = outer * C + c
    } else {
      int row;
      s = p.by_inner.divmod(i, row);  // i = row * inner + s, row = outer * C + c
      c = p.by_channels.divmod(row, outer);
    }
    int g;
    const int ci = p.by_cin_g.divmod(c, g);
    float* const out = p.split + (outer * 3 * p.channels + g * 3 * p.cin_g + ci) * p.inner + s;
    const Vec x = *reinterpret_cast<const Vec*>(p.source + i);
    Vec hi, hi_finite, lo;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      split(x.v[e], hi.v[e], lo.v[e]);
      hi_finite.v[e] = isfinite(x.v[e]) ? hi.v[e] : 0.f;
    }
    *reinterpret_cast<Vec*>(out) = hi;
    *reinterpret_cast<Vec*>(out + block_stride) = kBlocks == Blocks::kInput ? hi_finite : lo;
    *reinterpret_cast<Vec*>(out + 2 * block_stride) = kBlocks == Blocks::kInput ? lo : hi_finite;
  }
}

// Whether `images` images of `input` (any rank; a weight is one image) can be split: the split copy indexed in int.
inline bool fits(const at::Tensor& input, int64_t images) {
  return 3 * images * (input.numel() / input.size(0)) < std::numeric_limits<int>::max();
}

// Images per split: as many as keep the split copy within scratch_bytes() and int indexing (at least one, which
// needs fits(input, 1)), in chunks of equal size.
inline int64_t chunk_batch(const at::Tensor& input) {
  const int64_t n = input.size(0), image = input.numel() / n, image_bytes = 3 * image * int64_t{sizeof(float)};
  const int64_t most = std::max<int64_t>(
      1, std::min(scratch_bytes() / image_bytes, (int64_t{std::numeric_limits<int>::max()} - 1) / (3 * image)));
  const int64_t chunks = (n + most - 1) / most;
  return (n + chunks - 1) / chunks;
}

// t (N, G * cin_g, *rest), fp32, any strides, split into (N, G * 3 * cin_g, *rest) in `format`, each group's
// channels in the three blocks `kBlocks` orders. One launch, no host synchronisation. Needs fits(t, N).
template <Blocks kBlocks>
at::Tensor split_channels(const at::Tensor& t, int64_t groups, at::MemoryFormat format) {
  TORCH_INTERNAL_ASSERT(t.size(0) == 0 || fits(t, t.size(0)), "tf32x3::split_channels: past int indexing");
  const at::Tensor x = t.contiguous(format);
  std::vector<int64_t> sizes = x.sizes().vec();
  const int64_t channels = sizes[1], cin_g = channels / groups, inner = x.numel() / (sizes[0] * channels);
  sizes[1] = 3 * channels;
  at::Tensor out = at::empty(sizes, x.options().memory_format(format));
  if (x.numel() == 0) return out;
  const bool channels_last = format != at::MemoryFormat::Contiguous;
  // A vector stays in one channel (channels-first) or in one group's run of channels (channels-last).
  const int64_t run = channels_last ? cin_g : inner;
  const bool aligned = reinterpret_cast<uintptr_t>(x.const_data_ptr()) % 16 == 0;
  const int v = aligned && run % 4 == 0 ? 4 : 1;
  SplitParams p{};
  p.source = x.const_data_ptr<float>();
  p.split = out.mutable_data_ptr<float>();
  p.vectors = static_cast<int>(x.numel() / v);
  p.channels = static_cast<int>(channels);
  p.cin_g = static_cast<int>(cin_g);
  p.inner = channels_last ? 1 : static_cast<int>(inner);
  p.by_inner = FastDivmod(p.inner);
  p.by_channels = FastDivmod(p.channels);
  p.by_cin_g = FastDivmod(p.cin_g);
  constexpr int kThreads = 256;  // a grid-stride loop over at most 8 blocks an SM: enough to keep the copy saturated
  const int blocks = static_cast<int>(
      std::min<int64_t>((p.vectors + kThreads - 1) / kThreads, int64_t{8} * multiprocessor_count()));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const auto launch = [&](auto kernel) { kernel<<<blocks, kThreads, 0, stream>>>(p); };
  if (v == 4 && channels_last) {
    launch(split_kernel<4, true, kBlocks>);
  } else if (v == 4) {
    launch(split_kernel<4, false, kBlocks>);
  } else if (channels_last) {
    launch(split_kernel<1, true, kBlocks>);
  } else {
    launch(split_kernel<1, false, kBlocks>);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// The split input (N, G * 3 * cin_g, *spatial) of a conv_transpose input, in the input's suggested memory format.
inline at::Tensor split_input(const at::Tensor& input, int64_t groups) {
  return split_channels<Blocks::kInput>(input, groups, input.suggest_memory_format());
}

// The split weight (G * 3 * cin_g, cout_g, *taps) of a conv_transpose weight (G * cin_g, cout_g, *taps), contiguous.
inline at::Tensor split_weight(const at::Tensor& weight, int64_t groups) {
  const at::Tensor as_image = weight.contiguous().view({1, weight.size(0), -1});  // the weight's channels are dim 0
  std::vector<int64_t> sizes = weight.sizes().vec();
  sizes[0] *= 3;
  return split_channels<Blocks::kWeight>(as_image, groups, at::MemoryFormat::Contiguous).view(sizes);
}

}  // namespace tf32x3
}  // namespace cuda
}  // namespace convops
