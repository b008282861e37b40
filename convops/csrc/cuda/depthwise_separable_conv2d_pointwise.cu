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
constexpr int kPixelTile = 64;             // pixels a CTA: 8 n-tiles of mma.sync m16n8k8
constexpr int kMaxSlice = 128;             // input channels a CTA at most
// Row pitches in floats. Weight rows (a cout's channels): 16-byte aligned for the vector copies, and 4 banks apart
// so that an A fragment's 32 reads (rows g, columns t: bank 4 g + t) fall in 32 banks. Input rows (a channel's
// pixels): 8 banks apart, so that a B fragment's reads (rows t, columns g: bank 8 t + g) do too.
constexpr int kWeightPitch = kMaxSlice + 4;
constexpr int kInputPitch = kPixelTile + 8;
constexpr int kWeightFloats = kCoutTile * kWeightPitch;
constexpr int kInputFloats = kMaxSlice * kInputPitch;
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
  int slice;                // input channels a split: a multiple of 8, at most kMaxSlice
  bool weight_vectors;      // 16-byte weight copies: channels a multiple of 4 and the weight 16-byte aligned
  bool channels_innermost;  // in_stride[1] == 1: the input copied pixel by pixel, else channel by channel
};

__device__ __forceinline__ int64_t pixel_offset(const int64_t (&stride)[4], int pixel, int plane, int width) {
  const int n = pixel / plane, hw = pixel - n * plane, h = hw / width, w = hw - h * width;
  return n * stride[0] + h * stride[2] + w * stride[3];
}

__device__ __forceinline__ void store_output(const Params& p, int co, int pixel, float sum) {
  const float value = p.bias != nullptr ? sum + p.bias[co] : sum;
  p.output[pixel_offset(p.out_stride, pixel, p.plane, p.width) + co * p.out_stride[1]] = value;
}

// CTA (cout tile, pixel tile, split): the products of its 64 couts and 64 pixels over the split's channels; stores
// the outputs (one split) or its partial sums.
__global__ void __launch_bounds__(kThreads) pointwise_few_pixels_kernel(const Params p) {
  extern __shared__ __align__(16) float smem[];
  float* const weight_tile = smem;                     // [cout][channel]
  float* const input_tile = smem + kWeightFloats;      // [channel][pixel]
  int64_t* const pixel_at = reinterpret_cast<int64_t*>(input_tile + kInputFloats);  // -1 past the last pixel
  const int tid = threadIdx.x;
  const int cout0 = blockIdx.x * kCoutTile, pixel0 = blockIdx.y * kPixelTile;
  const int k_begin = blockIdx.z * p.slice, k_count = min(p.slice, p.channels - k_begin);
  if (tid < kPixelTile) {
    const int pixel = pixel0 + tid;
    pixel_at[tid] = pixel < p.pixels ? pixel_offset(p.in_stride, pixel, p.plane, p.width) : -1;
  }
  __syncthreads();

  // Everything the CTA reads, in flight at once; zeros past the couts, the pixels and the split's channels.
  if (p.weight_vectors) {
    constexpr int kVectors = kMaxSlice / 4;
    for (int i = tid; i < kCoutTile * kVectors; i += kThreads) {
      const int row = i / kVectors, k = 4 * (i % kVectors), co = cout0 + row;
      const bool valid = co < p.out_channels && k < k_count;
      cp_async_zfill<16>(weight_tile + row * kWeightPitch + k,
                         valid ? p.weight + static_cast<int64_t>(co) * p.channels + k_begin + k : p.weight, valid);
    }
  } else {
    for (int i = tid; i < kCoutTile * kMaxSlice; i += kThreads) {
      const int row = i / kMaxSlice, k = i % kMaxSlice, co = cout0 + row;
      const bool valid = co < p.out_channels && k < k_count;
      cp_async_zfill<4>(weight_tile + row * kWeightPitch + k,
                        valid ? p.weight + static_cast<int64_t>(co) * p.channels + k_begin + k : p.weight, valid);
    }
  }
  // A warp's copies: 32 consecutive pixels of one channel (NCHW), or 32 consecutive channels of one pixel (NHWC).
  for (int i = tid; i < kMaxSlice * kPixelTile; i += kThreads) {
    const int k = p.channels_innermost ? i % kMaxSlice : i / kPixelTile;
    const int pixel = p.channels_innermost ? i / kMaxSlice : i % kPixelTile;
    const int64_t at = pixel_at[pixel];
    const bool valid = at >= 0 && k < k_count;
    cp_async_zfill<4>(input_tile + k * kInputPitch + pixel,
                      valid ? p.input + at + static_cast<int64_t>(k_begin + k) * p.in_stride[1] : p.input, valid);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // Warp w: couts 16 w .. 16 w + 15 (A: the weight rows) x the 64 pixels (B: 8 n-tiles of the input rows).
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  float acc[kPixelTile / 8][4] = {};
  const float* const a_rows = weight_tile + (16 * warp + g) * kWeightPitch + t;
  const int k_steps = (k_count + 7) / 8;
  for (int s = 0; s < k_steps; ++s) {
    const float* const a = a_rows + 8 * s;
    const uint32_t a_frag[4] = {tf32_bits(a[0]), tf32_bits(a[8 * kWeightPitch]), tf32_bits(a[4]),
                                tf32_bits(a[8 * kWeightPitch + 4])};
    const float* const b = input_tile + (8 * s + t) * kInputPitch + g;
#pragma unroll
    for (int n = 0; n < kPixelTile / 8; ++n) {
      const uint32_t b_frag[2] = {tf32_bits(b[8 * n]), tf32_bits(b[4 * kInputPitch + 8 * n])};
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
  p.channels_innermost = mid.stride(1) == 1 && channels > 1;

  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  allow_dynamic_shared_memory(pointwise_few_pixels_kernel, kSmemBytes);
  const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(out_channels, kCoutTile)),
                  static_cast<unsigned>(ceil_div<int64_t>(pixels, kPixelTile)), static_cast<unsigned>(splits));
  pointwise_few_pixels_kernel<<<grid, kThreads, kSmemBytes, stream>>>(p);
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
