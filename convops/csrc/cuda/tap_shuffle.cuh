// The second half of a transposed convolution whose kernel equals its stride (conv_transpose_gemm.cuh): moves the
// GEMM's per-tap product planes to their interleaved output pixels and adds the bias, in one pass.
//
// products (N, C_out, k_d, k_h, k_w, D, H, W), contiguous -> output (N, C_out, D k_d, H k_h, W k_w), contiguous
// (2-D: k_d = D = 1). An output row (n, c, d k_d + a, h k_h + b) takes element w k_w + t from plane (n, c, a, b, t) at
// (d, h, w): k_w source rows of W elements interleave into one output row of W k_w.
//
// Why not a TensorIterator copy of the permuted view (the first version): its strided loop spends its time on the
// six-dimensional index math, not on memory. H200, 2026-11-27 11:28 UTC, UNet c128->64 at 128x128, batch 8: 136 us
// for a pass that a plain copy of the same bytes does in 36, the same in bf16 and fp32, and four times the GEMM's
// 32 us in bf16. Here a thread loads V consecutive w of each of the k_w planes (vector loads, coalesced across the
// warp) and stores the V k_w output elements they make, also as vectors; the index math is once per V k_w outputs.
// The sum is ATen's add: in fp32 (double for double), rounded once to the output's dtype.
//
// Pixel-major products (N, D, H, W, C_out, k_d, k_h, k_w), the GEMM's other orientation (fp32 only: the layout
// conv_transpose_gemm.cuh picks for narrow TF32 GEMMs): the pass is a transpose, through shared memory. A block
// loads a tile of 32 consecutive pixels' product rows, each a run of whole channels' taps (coalesced along the
// row), and writes, for each (channel, a, b) of the tile, the 32 pixels' k_w interleaved outputs (coalesced along
// the output row).
#pragma once

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>

#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace tap_shuffle {

// The widest kernel extent along the last dimension a thread interleaves from registers; wider ones keep the
// implicit-GEMM kernel (conv_transpose_gemm_applies).
constexpr int kMaxLastTaps = 8;
constexpr int kThreads = 256;

struct Shape {
  int64_t rows;        // N C_out D k_d H k_h: the output's rows
  int64_t out_depth;   // D k_d
  int64_t out_height;  // H k_h
  int64_t height;      // H
  int64_t width;       // W
  int64_t plane;       // D H W: one tap's product plane
  int k_d, k_h, k_w;
  int channels;     // C_out
  int row_vectors;  // W / V: the thread items of a row
};

// Thread item (row, i) makes output elements [i V k_w, (i + 1) V k_w) of `row` from elements [i V, (i + 1) V) of
// its k_w source rows. The block is row_threads x (kThreads / row_threads): short rows share a block, long ones
// loop. KW: k_w when known at compile time, so that output vectors gather from registers by constant indices and
// store whole; 0: s.k_w (at most kMaxLastTaps), stored an element at a time.
template <typename scalar_t, int V, int KW>
__global__ void __launch_bounds__(kThreads) tap_shuffle_kernel(const scalar_t* __restrict__ products,
                                                               const scalar_t* __restrict__ bias,
                                                               scalar_t* __restrict__ out, Shape s, int row_threads) {
  using acc_t = at::opmath_type<scalar_t>;
  using Vec = AlignedVector<scalar_t, V>;
  constexpr int kTaps = KW > 0 ? KW : kMaxLastTaps;
  const int k_w = KW > 0 ? KW : s.k_w;
  const int lane = threadIdx.x % row_threads;
  const int64_t rows_per_block = kThreads / row_threads;
  for (int64_t row = blockIdx.x * rows_per_block + threadIdx.x / row_threads; row < s.rows;
       row += int64_t{gridDim.x} * rows_per_block) {
    const int64_t od_image = row / s.out_height, oh = row - od_image * s.out_height;
    const int64_t image = od_image / s.out_depth, od = od_image - image * s.out_depth;  // image: n C_out + c
    const int64_t d = od / s.k_d, h = oh / s.k_h;
    const int64_t a = od - d * s.k_d, b = oh - h * s.k_h;
    // Tap t's source row: plane (n, c, a, b, t) at (d, h).
    const scalar_t* source = products + ((image * s.k_d + a) * s.k_h + b) * k_w * s.plane + (d * s.height + h) * s.width;
    scalar_t* target = out + row * s.width * k_w;
    const acc_t bias_c = bias == nullptr ? acc_t(0) : static_cast<acc_t>(bias[image % s.channels]);
    // 64-bit: with single elements and k_w = 1 a row's W may come within a block of 2^31.
    for (int64_t i = lane; i < s.row_vectors; i += row_threads) {
      Vec in[kTaps];
#pragma unroll
      for (int t = 0; t < kTaps; ++t) {
        if (t < k_w) in[t] = reinterpret_cast<const Vec*>(source + t * s.plane)[i];
      }
      if constexpr (KW > 0) {
        // Output vector q holds elements j = q V + e: tap j % KW, source element j / KW.
        Vec* target_vectors = reinterpret_cast<Vec*>(target) + i * KW;
#pragma unroll
        for (int q = 0; q < KW; ++q) {
          Vec o;
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const int j = q * V + e;
            o.v[e] = static_cast<scalar_t>(static_cast<acc_t>(in[j % KW].v[j / KW]) + bias_c);
          }
          target_vectors[q] = o;
        }
      } else {
        scalar_t* target_item = target + i * V * k_w;
#pragma unroll
        for (int t = 0; t < kTaps; ++t) {
          if (t >= k_w) continue;
#pragma unroll
          for (int e = 0; e < V; ++e) {
            target_item[e * k_w + t] = static_cast<scalar_t>(static_cast<acc_t>(in[t].v[e]) + bias_c);
          }
        }
      }
    }
  }
}

template <typename scalar_t, int V, int KW>
void launch(const at::Tensor& products, const std::optional<at::Tensor>& bias, const at::Tensor& output, Shape s) {
  s.row_vectors = static_cast<int>(s.width / V);
  int row_threads = 1;  // a power of two: rows pack whole into the block
  while (row_threads < s.row_vectors && row_threads < kThreads) row_threads *= 2;
  const int64_t rows_per_block = kThreads / row_threads;
  const int64_t blocks = std::min<int64_t>((s.rows + rows_per_block - 1) / rows_per_block,
                                           int64_t{multiprocessor_count()} * 32);
  tap_shuffle_kernel<scalar_t, V, KW><<<static_cast<unsigned>(blocks), kThreads, 0,
                                        c10::cuda::getCurrentCUDAStream()>>>(
      products.const_data_ptr<scalar_t>(), bias.has_value() ? bias->const_data_ptr<scalar_t>() : nullptr,
      output.mutable_data_ptr<scalar_t>(), s, row_threads);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// 16-byte vectors where every source row starts 16-byte aligned (W a multiple of the vector; the tensors' bases
// are), single elements otherwise; k_w = 2 (UNet's and the VAE's 2x upsampling) compiled in.
template <typename scalar_t>
void launch_for_dtype(const at::Tensor& products, const std::optional<at::Tensor>& bias, const at::Tensor& output,
                      const Shape& s) {
  constexpr int kWide = 16 / static_cast<int>(sizeof(scalar_t));
  const bool aligned = reinterpret_cast<uintptr_t>(products.const_data_ptr()) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(output.const_data_ptr()) % 16 == 0;
  if (aligned && s.width % kWide == 0) {
    return s.k_w == 2 ? launch<scalar_t, kWide, 2>(products, bias, output, s)
                      : launch<scalar_t, kWide, 0>(products, bias, output, s);
  }
  return s.k_w == 2 ? launch<scalar_t, 1, 2>(products, bias, output, s) : launch<scalar_t, 1, 0>(products, bias, output, s);
}

// The pixel-major pass (header comment). A tile: 32 pixels x kTileColumns / taps channels of one image.
constexpr int kTilePixels = 32;
constexpr int kTileColumns = 64;  // the most products a pixel row of the tile holds: whole channels' taps
constexpr int kMaxPixelMajorTaps = kTileColumns;

struct PixelMajorShape {
  int64_t pixels;            // D H W
  int64_t out_plane;         // D k_d H k_h W k_w
  int64_t out_height_width;  // H k_h W k_w
  int64_t out_width;         // W k_w
  int64_t height, width;     // H, W
  int k_d, k_h, k_w, taps;
  int channels;       // C_out
  int tile_channels;  // kTileColumns / taps
  // Tiles: images x pixel_tiles x channel_tiles, at most 2^31 - 1 (one block each).
  unsigned pixel_tiles, channel_tiles;
};

// One tile a block. A first version spent about 50 instructions an output element and lane (64-bit tile
// arithmetic, a run-time division by k_w, scalar stores) and moved the 34 MB of UNet c1024-512 at 1.2 TB/s
// (28.4 us, H200, 2026-11-27 13:33 UTC); a persistent grid keeping loads in flight changed nothing (28.9 us), so
// issue, not latency, was its limit. Here: 32-bit tile arithmetic, and for KW = 2 (compiled in) a lane per pixel
// storing its two taps as one 8-byte vector. KW = 0: s.k_w at run time, an element a lane.
// A template so that the header may be included by more than one .cu file; fp32 its one dtype.
template <typename scalar_t, int KW>
__global__ void __launch_bounds__(kThreads) pixel_major_tap_shuffle_kernel(const scalar_t* __restrict__ products,
                                                                           const scalar_t* __restrict__ bias,
                                                                           scalar_t* __restrict__ out,
                                                                           PixelMajorShape s) {
  // Row pitch == k_w (mod 32 words): a warp's outputs of one (channel, a, b) row read tile words px * pitch + t, and
  // px * k_w + t runs over 32 consecutive words (for KW = 2, 16 lanes' 8-byte reads a phase, 32 distinct banks).
  static_assert(kMaxLastTaps < 32, "the pitch below is kTileColumns + k_w");
  constexpr int kMaxPitch = kTileColumns + kMaxLastTaps;
  constexpr int kLoads = kTilePixels * kTileColumns / kThreads;  // a thread's elements of a tile
  __shared__ alignas(16) scalar_t tile[kTilePixels * kMaxPitch];
  __shared__ int64_t pixel_offset[kTilePixels];  // a tile pixel's output element for channel 0, tap (0, 0, 0)
  const int k_w = KW > 0 ? KW : s.k_w;
  const int pitch = kTileColumns + k_w % 32;
  const unsigned channel_tile = blockIdx.x % s.channel_tiles, image_pixels = blockIdx.x / s.channel_tiles;
  const unsigned n = image_pixels / s.pixel_tiles, pixel_tile = image_pixels - n * s.pixel_tiles;
  const int64_t p0 = int64_t{pixel_tile} * kTilePixels, c0 = int64_t{channel_tile} * s.tile_channels;
  const int tile_pixels = static_cast<int>(std::min<int64_t>(kTilePixels, s.pixels - p0));
  const int tile_channels = static_cast<int>(std::min<int64_t>(s.tile_channels, s.channels - c0));
  const int tile_columns = tile_channels * s.taps;
  const int64_t columns = int64_t{s.channels} * s.taps;

  if (threadIdx.x < tile_pixels) {
    const int64_t p = p0 + threadIdx.x, dh = p / s.width, w = p - dh * s.width;
    const int64_t d = dh / s.height, h = dh - d * s.height;
    pixel_offset[threadIdx.x] = d * s.k_d * s.out_height_width + h * s.k_h * s.out_width + w * k_w;
  }
  // Element j of a thread's share: tile row i / kTileColumns, column i % kTileColumns, i = threadIdx.x + j kThreads;
  // all of a thread's loads go out before any is stored.
  const scalar_t* source = products + (int64_t{n} * s.pixels + p0) * columns + c0 * s.taps;
  scalar_t loaded[kLoads];
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int i = threadIdx.x + j * kThreads, px = i / kTileColumns, column = i % kTileColumns;
    if (px < tile_pixels && column < tile_columns) loaded[j] = source[px * columns + column];
  }
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int i = threadIdx.x + j * kThreads, px = i / kTileColumns, column = i % kTileColumns;
    if (px < tile_pixels && column < tile_columns) tile[px * pitch + column] = loaded[j];
  }
  __syncthreads();

  // Output row pieces (channel, a, b) of the tile, a warp each: tile_pixels k_w elements.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pieces = tile_channels * s.k_d * s.k_h;
  scalar_t* const image_out = out + (int64_t{n} * s.channels + c0) * s.out_plane;
  for (int piece = warp; piece < pieces; piece += kThreads / 32) {
    const int channel = piece / (s.k_d * s.k_h), ab = piece - channel * s.k_d * s.k_h;
    const int a = ab / s.k_h, b = ab - a * s.k_h;
    scalar_t* target = image_out + channel * s.out_plane + a * s.out_height_width + b * s.out_width;
    const scalar_t bias_c = bias == nullptr ? scalar_t(0) : bias[c0 + channel];
    if constexpr (KW == 2) {
      // Lane = pixel: its two taps are adjacent in the tile row and in the output row (an even element: W k_w,
      // the planes and w k_w are even, the base 8-byte aligned, which the launch checks).
      using Pair = AlignedVector<scalar_t, 2>;
      if (lane < tile_pixels) {
        Pair v = *reinterpret_cast<const Pair*>(&tile[lane * pitch + piece * 2]);
        v.v[0] += bias_c;
        v.v[1] += bias_c;
        *reinterpret_cast<Pair*>(target + pixel_offset[lane]) = v;
      }
    } else {
      for (int e = lane; e < tile_pixels * k_w; e += 32) {
        const int px = e / k_w, tap = e - px * k_w;
        target[pixel_offset[px] + tap] = tile[px * pitch + piece * k_w + tap] + bias_c;
      }
    }
  }
}

// The pixel-major shuffle's tiles along the pixels and along the channels of an image.
struct PixelMajorTiles {
  int64_t pixel_tiles, channel_tiles;
};

inline PixelMajorTiles pixel_major_tiles(int64_t pixels, int64_t channels, int64_t taps) {
  return {ceil_div<int64_t>(pixels, kTilePixels), ceil_div<int64_t>(channels, kTileColumns / taps)};
}

// A bias as the shuffles read it: contiguous, or none.
inline std::optional<at::Tensor> contiguous_bias(const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? std::optional<at::Tensor>(bias->contiguous()) : std::nullopt;
}

}  // namespace tap_shuffle

// output (N, C_out, D k_d, H k_h, W k_w) = products (N, C_out, k_d, k_h, k_w, D, H, W) interleaved, plus bias (C_out)
// per channel; both dense and of one dtype, `kernel` = (k_d, k_h, k_w) with k_w <= tap_shuffle::kMaxLastTaps, 2-D
// as k_d = D = 1. The caller checks the extents: C_out and W k_w below 2^31.
inline void shuffle_taps_add_bias(const at::Tensor& products, const std::optional<at::Tensor>& bias,
                                  const at::Tensor& output, std::array<int64_t, 3> kernel,
                                  std::array<int64_t, 3> in_size) {
  TORCH_INTERNAL_ASSERT(products.is_contiguous() && output.is_contiguous() &&
                        products.scalar_type() == output.scalar_type());
  tap_shuffle::Shape s{};
  s.k_d = static_cast<int>(kernel[0]);
  s.k_h = static_cast<int>(kernel[1]);
  s.k_w = static_cast<int>(kernel[2]);
  s.channels = static_cast<int>(output.size(1));
  s.out_depth = in_size[0] * kernel[0];
  s.out_height = in_size[1] * kernel[1];
  s.height = in_size[1];
  s.width = in_size[2];
  s.plane = in_size[0] * in_size[1] * in_size[2];
  s.rows = output.size(0) * output.size(1) * s.out_depth * s.out_height;
  if (s.rows == 0 || s.width == 0) return;
  const std::optional<at::Tensor> bias_c = tap_shuffle::contiguous_bias(bias);
  switch (output.scalar_type()) {
    case at::kFloat: return tap_shuffle::launch_for_dtype<float>(products, bias_c, output, s);
    case at::kDouble: return tap_shuffle::launch_for_dtype<double>(products, bias_c, output, s);
    case at::kHalf: return tap_shuffle::launch_for_dtype<at::Half>(products, bias_c, output, s);
    case at::kBFloat16: return tap_shuffle::launch_for_dtype<at::BFloat16>(products, bias_c, output, s);
    default: TORCH_CHECK(false, "convops: tap shuffle: unsupported dtype ", output.scalar_type());
  }
}

// The pixel-major shuffle's blocks (one a tile) for N images of `pixels` pixels and C_out `channels` of `taps` taps:
// at most INT_MAX for it to run (conv_transpose_gemm.cuh checks).
inline int64_t pixel_major_shuffle_tiles(int64_t images, int64_t pixels, int64_t channels, int64_t taps) {
  const tap_shuffle::PixelMajorTiles t = tap_shuffle::pixel_major_tiles(pixels, channels, taps);
  return images * t.pixel_tiles * t.channel_tiles;
}

// output (N, C_out, D k_d, H k_h, W k_w) from pixel-major products (N, D, H, W, C_out, k_d, k_h, k_w) plus bias
// (C_out); fp32, dense; prod(kernel) <= tap_shuffle::kMaxPixelMajorTaps and k_w <= tap_shuffle::kMaxLastTaps, 2-D
// as k_d = D = 1.
inline void shuffle_pixel_major_taps_add_bias(const at::Tensor& products, const std::optional<at::Tensor>& bias,
                                              const at::Tensor& output, std::array<int64_t, 3> kernel,
                                              std::array<int64_t, 3> in_size) {
  TORCH_INTERNAL_ASSERT(products.is_contiguous() && output.is_contiguous() && output.scalar_type() == at::kFloat &&
                        products.scalar_type() == at::kFloat);
  tap_shuffle::PixelMajorShape s{};
  s.k_d = static_cast<int>(kernel[0]);
  s.k_h = static_cast<int>(kernel[1]);
  s.k_w = static_cast<int>(kernel[2]);
  s.taps = s.k_d * s.k_h * s.k_w;
  TORCH_INTERNAL_ASSERT(s.taps <= tap_shuffle::kMaxPixelMajorTaps && s.k_w <= tap_shuffle::kMaxLastTaps);
  s.tile_channels = tap_shuffle::kTileColumns / s.taps;
  s.channels = static_cast<int>(output.size(1));
  s.height = in_size[1];
  s.width = in_size[2];
  s.pixels = in_size[0] * in_size[1] * in_size[2];
  s.out_width = in_size[2] * kernel[2];
  s.out_height_width = in_size[1] * kernel[1] * s.out_width;
  s.out_plane = in_size[0] * kernel[0] * s.out_height_width;
  if (output.numel() == 0) return;
  const tap_shuffle::PixelMajorTiles t = tap_shuffle::pixel_major_tiles(s.pixels, s.channels, s.taps);
  const int64_t tiles = output.size(0) * t.pixel_tiles * t.channel_tiles;  // pixel_major_shuffle_tiles
  TORCH_INTERNAL_ASSERT(tiles <= std::numeric_limits<int>::max());
  s.pixel_tiles = static_cast<unsigned>(t.pixel_tiles);
  s.channel_tiles = static_cast<unsigned>(t.channel_tiles);
  const std::optional<at::Tensor> bias_c = tap_shuffle::contiguous_bias(bias);
  const auto kernel_for = s.k_w == 2 && reinterpret_cast<uintptr_t>(output.const_data_ptr()) % 8 == 0
                              ? tap_shuffle::pixel_major_tap_shuffle_kernel<float, 2>
                              : tap_shuffle::pixel_major_tap_shuffle_kernel<float, 0>;
  kernel_for<<<static_cast<unsigned>(tiles), tap_shuffle::kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      products.const_data_ptr<float>(), bias_c.has_value() ? bias_c->const_data_ptr<float>() : nullptr,
      output.mutable_data_ptr<float>(), s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace convops
