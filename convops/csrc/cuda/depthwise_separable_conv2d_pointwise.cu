// The separable op's 1x1 under TF32 for few pixels and a large weight: why and how in
// depthwise_separable_conv2d_pointwise.cuh.
#include "cuda/depthwise_separable_conv2d_pointwise.cuh"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/precision.h"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace {

constexpr int kWarps = 4;                  // 16 couts each
constexpr int kThreads = 32 * kWarps;
constexpr int kCoutTile = 16 * kWarps;     // couts a CTA
constexpr int kPixelTile = 64;             // pixels a CTA: up to 8 n-tiles of mma.sync m16n8k8
constexpr int kMaxSlice = 128;             // input channels a CTA at most
// Row pitches in floats, rows 16-byte aligned for the vector copies. Rows of 132 (the weight's couts, and the input's
// pixels where its channels are innermost): an A fragment's reads (rows g, columns t: bank 4 g + t) fall in 32
// banks, as do a B fragment's from such pixel rows (rows g, columns t). Rows of 72 (the input's channels where its
// pixels are innermost): a B fragment's reads (rows t, columns g) fall in banks 8 t + g.
constexpr int kChannelPitch = kMaxSlice + 4;
constexpr int kPixelPitch = kPixelTile + 8;
constexpr int kWeightFloats = kCoutTile * kChannelPitch;
constexpr int kInputFloats = std::max(kPixelTile * kChannelPitch, kMaxSlice * kPixelPitch);  // either layout
constexpr int kSmemBytes = (kWeightFloats + kInputFloats) * 4 + kPixelTile * 8;  // and the pixels' offsets
constexpr int kCtasPerSm = 3;  // resident at kSmemBytes (70 KB) on Hopper's 227 KB: one wave's worth aimed at
constexpr int64_t kMaxPixels = 256;
constexpr int64_t kMinWeightElements = int64_t{1} << 17;

struct Params {
  const float* input;
  const float* weight;  // (out_channels, channels), contiguous
  const float* bias;    // (out_channels) or null
  float* output;
  float* partial;       // (splits, out_channels, pixels) where splits > 1
  int64_t in_stride[4];   // (n, c, h, w)
  int64_t out_stride[4];  // (n, c, h, w)
  int pixels, plane, width;  // N H W, H W, W
  int channels, out_channels;
  int slice;            // input channels a split: a multiple of 8, at most kMaxSlice
  bool weight_vectors;  // 16-byte weight copies: channels a multiple of 4 and the weight 16-byte aligned
  bool input_vectors;   // 16-byte input copies (channels innermost): every pixel's channels 16-byte aligned
};

__device__ __forceinline__ int64_t pixel_offset(const int64_t (&stride)[4], int pixel, int plane, int width) {
  const int n = pixel / plane, hw = pixel - n * plane, h = hw / width, w = hw - h * width;
  return n * stride[0] + h * stride[2] + w * stride[3];
}

__device__ __forceinline__ void store_output(const Params& p, int co, int pixel, float sum) {
  const float value = p.bias != nullptr ? sum + p.bias[co] : sum;
  p.output[pixel_offset(p.out_stride, pixel, p.plane, p.width) + co * p.out_stride[1]] = value;
}

// Copies `count` floats from src (zeros where !valid) to dst in 16-byte pieces (Vectors: count a multiple of 4,
// both 16-byte aligned) or 4-byte ones, lanes taking consecutive pieces.
template <bool Vectors>
__device__ __forceinline__ void copy_row(float* dst, const float* src, int count, bool valid, int lane) {
  if constexpr (Vectors) {
    for (int k = 4 * lane; k < count; k += 4 * 32) cp_async_zfill<16>(dst + k, valid ? src + k : src, valid);
  } else {
    for (int k = lane; k < count; k += 32) cp_async_zfill<4>(dst + k, valid ? src + k : src, valid);
  }
}

// CTA (cout tile, pixel tile, split): the products of its 64 couts and up to 64 pixels over the split's channels;
// stores the outputs (one split) or its partial sums. ChannelsInnermost: the input's channel stride is 1 (NHWC), and
// its tile is held [pixel][channel], else [channel][pixel]; either way a warp's copies read consecutive addresses.
template <bool ChannelsInnermost>
__global__ void __launch_bounds__(kThreads) pointwise_few_pixels_kernel(const Params p) {
  extern __shared__ __align__(16) float smem[];
  float* const weight_tile = smem;                     // [cout][channel]
  float* const input_tile = smem + kWeightFloats;      // [pixel][channel] or [channel][pixel]
  int64_t* const pixel_at = reinterpret_cast<int64_t*>(input_tile + kInputFloats);  // -1 past the last pixel
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int cout0 = blockIdx.x * kCoutTile, pixel0 = blockIdx.y * kPixelTile;
  const int k_begin = blockIdx.z * p.slice, k_count = min(p.slice, p.channels - k_begin);
  // What the mma reads: channels up to a multiple of 8, pixels up to a multiple of 8; copies past k_count and the
  // last pixel write zeros.
  const int k_rows = 8 * ((k_count + 7) / 8);
  const int n_tiles = (min(kPixelTile, p.pixels - pixel0) + 7) / 8;
  if (tid < kPixelTile) {
    const int pixel = pixel0 + tid;
    pixel_at[tid] = pixel < p.pixels ? pixel_offset(p.in_stride, pixel, p.plane, p.width) : -1;
  }
  __syncthreads();

  // Everything the CTA reads, in flight at once.
  for (int row = warp; row < kCoutTile; row += kWarps) {
    const int co = cout0 + row;
    const float* const src = p.weight + static_cast<int64_t>(min(co, p.out_channels - 1)) * p.channels + k_begin;
    float* const dst = weight_tile + row * kChannelPitch;
    // Two copies: the slice's channels, then zeros up to k_rows (k_count is a multiple of 4 where vectors run).
    if (p.weight_vectors) {
      copy_row<true>(dst, src, k_count, co < p.out_channels, lane);
    } else {
      copy_row<false>(dst, src, k_count, co < p.out_channels, lane);
    }
    copy_row<false>(dst + k_count, src, k_rows - k_count, false, lane);
  }
  if constexpr (ChannelsInnermost) {
    for (int pixel = warp; pixel < 8 * n_tiles; pixel += kWarps) {
      const int64_t at = pixel_at[pixel];
      const float* const src = p.input + (at < 0 ? 0 : at) + k_begin;
      float* const dst = input_tile + pixel * kChannelPitch;
      if (p.input_vectors) {
        copy_row<true>(dst, src, k_count, at >= 0, lane);
      } else {
        copy_row<false>(dst, src, k_count, at >= 0, lane);
      }
      copy_row<false>(dst + k_count, src, k_rows - k_count, false, lane);
    }
  } else {
    const int64_t at[2] = {pixel_at[lane], pixel_at[lane + 32]};
    for (int k = warp; k < k_rows; k += kWarps) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int pixel = lane + 32 * half;
        if (pixel >= 8 * n_tiles) continue;
        const bool valid = at[half] >= 0 && k < k_count;
        cp_async_zfill<4>(input_tile + k * kPixelPitch + pixel,
                          valid ? p.input + at[half] + static_cast<int64_t>(k_begin + k) * p.in_stride[1] : p.input,
                          valid);
      }
    }
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // Warp w: couts 16 w .. 16 w + 15 (A: the weight rows) x the tile's pixels (B: n-tiles of 8).
  const int g = lane / 4, t = lane % 4;
  float acc[kPixelTile / 8][4] = {};
  const float* const a_rows = weight_tile + (16 * warp + g) * kChannelPitch + t;
  for (int k0 = 0; k0 < k_rows; k0 += 8) {
    const float* const a = a_rows + k0;
    const uint32_t a_frag[4] = {tf32_bits(a[0]), tf32_bits(a[8 * kChannelPitch]), tf32_bits(a[4]),
                                tf32_bits(a[8 * kChannelPitch + 4])};
#pragma unroll
    for (int n = 0; n < kPixelTile / 8; ++n) {
      if (n >= n_tiles) break;
      // B (k, pixel) = (k0 + t, 8 n + g) and (k0 + t + 4, 8 n + g).
      const float* const b = ChannelsInnermost ? input_tile + (8 * n + g) * kChannelPitch + k0 + t
                                               : input_tile + (k0 + t) * kPixelPitch + 8 * n + g;
      const int step = ChannelsInnermost ? 4 : 4 * kPixelPitch;
      const uint32_t b_frag[2] = {tf32_bits(b[0]), tf32_bits(b[step])};
      mma_m16n8k8_tf32(acc[n], a_frag, b_frag);
    }
  }

  // acc[n]: (cout g, pixels 2t, 2t + 1) and (cout g + 8, the same pixels) of n-tile n.
#pragma unroll
  for (int n = 0; n < kPixelTile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int co = cout0 + 16 * warp + g + 8 * (e / 2), pixel = pixel0 + 8 * n + 2 * t + e % 2;
      if (co >= p.out_channels || pixel >= p.pixels) continue;
      if (gridDim.z == 1) {
        store_output(p, co, pixel, acc[n][e]);
      } else {
        p.partial[(static_cast<int64_t>(blockIdx.z) * p.out_channels + co) * p.pixels + pixel] = acc[n][e];
      }
    }
  }
}

// Adds the splits' partial sums of each output in split order and stores it.
__global__ void __launch_bounds__(256) pointwise_few_pixels_sum_kernel(const Params p, int splits) {
  const int64_t outputs = static_cast<int64_t>(p.out_channels) * p.pixels;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (i >= outputs) return;
  float sum = p.partial[i];
  for (int s = 1; s < splits; ++s) sum += p.partial[s * outputs + i];
  store_output(p, static_cast<int>(i / p.pixels), static_cast<int>(i % p.pixels), sum);
}

}  // namespace

bool pointwise_few_pixels_applies(const at::Tensor& mid, const at::Tensor& weight) {
  if (mid.scalar_type() != at::kFloat || !conv_allows_tf32(mid)) return false;
  const int64_t pixels = mid.size(0) * mid.size(2) * mid.size(3);
  const int64_t channels = weight.size(1), out_channels = weight.size(0);
  // The kernel's channel, cout and pixel indices are int; its grid's z extent (the splits) is 16 bits.
  return pixels > 0 && pixels <= kMaxPixels && out_channels * channels >= kMinWeightElements &&
         ceil_div<int64_t>(channels, 8) <= 65535 && out_channels * kMaxPixels < std::numeric_limits<int>::max() &&
         max_shared_memory_per_block() >= kSmemBytes;
}

at::Tensor pointwise_few_pixels(const at::Tensor& mid, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                at::MemoryFormat memory_format) {
  const int64_t n = mid.size(0), channels = mid.size(1), h = mid.size(2), w = mid.size(3);
  const int64_t out_channels = weight.size(0), pixels = n * h * w;
  at::Tensor output = at::empty({n, out_channels, h, w}, mid.options().memory_format(memory_format));
  const at::Tensor dense_weight = weight.contiguous();
  const at::Tensor dense_bias = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();

  // As many splits as one wave of kCtasPerSm CTAs an SM holds, at least enough for slices of kMaxSlice channels and
  // at most one a 32 (a thinner slice is mostly the round trip); slices a multiple of the mma's 8 channels.
  const int64_t tiles = ceil_div<int64_t>(out_channels, kCoutTile) * ceil_div<int64_t>(pixels, kPixelTile);
  const int64_t one_wave = int64_t{kCtasPerSm} * multiprocessor_count() / tiles;
  const int64_t wanted = std::max(ceil_div<int64_t>(channels, kMaxSlice),
                                  std::min(one_wave, ceil_div<int64_t>(channels, 32)));
  const int64_t slice = ceil_div<int64_t>(ceil_div(channels, wanted), 8) * 8;
  const int64_t splits = ceil_div(channels, slice);
  at::Tensor partial;
  if (splits > 1) partial = at::empty({splits, out_channels, pixels}, mid.options());

  Params p{};
  p.input = mid.const_data_ptr<float>();
  p.weight = dense_weight.const_data_ptr<float>();
  p.bias = dense_bias.defined() ? dense_bias.const_data_ptr<float>() : nullptr;
  p.output = output.mutable_data_ptr<float>();
  p.partial = splits > 1 ? partial.mutable_data_ptr<float>() : nullptr;
  for (int d = 0; d < 4; ++d) {
    p.in_stride[d] = mid.stride(d);
    p.out_stride[d] = output.stride(d);
  }
  p.pixels = static_cast<int>(pixels);
  p.plane = static_cast<int>(h * w);
  p.width = static_cast<int>(w);
  p.channels = static_cast<int>(channels);
  p.out_channels = static_cast<int>(out_channels);
  p.slice = static_cast<int>(slice);
  p.weight_vectors = channels % 4 == 0 && reinterpret_cast<uintptr_t>(p.weight) % 16 == 0;
  const bool channels_innermost = mid.stride(1) == 1 && channels > 1;
  p.input_vectors = channels_innermost && reinterpret_cast<uintptr_t>(p.input) % 16 == 0 && channels % 4 == 0 &&
                    mid.stride(0) % 4 == 0 && mid.stride(2) % 4 == 0 && mid.stride(3) % 4 == 0;

  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const auto kernel = channels_innermost ? pointwise_few_pixels_kernel<true> : pointwise_few_pixels_kernel<false>;
  allow_dynamic_shared_memory(kernel, kSmemBytes);
  const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(out_channels, kCoutTile)),
                  static_cast<unsigned>(ceil_div<int64_t>(pixels, kPixelTile)), static_cast<unsigned>(splits));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (splits > 1) {
    pointwise_few_pixels_sum_kernel<<<static_cast<unsigned>(ceil_div<int64_t>(out_channels * pixels, 256)), 256, 0,
                                      stream>>>(p, static_cast<int>(splits));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return output;
}

}  // namespace cuda
}  // namespace convops
