// The separable op's 1x1 for few pixels and a large weight: why and how in depthwise_separable_conv2d_pointwise.cuh.
#include "cuda/depthwise_separable_conv2d_pointwise.cuh"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kCoutTile = 32;                                // couts a CTA: 16 thread rows of 2
constexpr int kPixelTile = 64;                               // pixels a CTA: 16 thread columns of 4
constexpr int kChunk = 32;                                   // input channels a CTA stages a step
constexpr int kWeightLoads = kCoutTile * kChunk / kThreads;  // a thread's weight loads a step
constexpr int kInputLoads = kPixelTile * kChunk / kThreads;  // a thread's input loads a step
// The staged tiles' row pitches, in floats: rows of a multiple of 8 bytes (float2 reads) and of 16 (float4 reads),
// off a multiple of 32 banks, so that the transposing stores conflict at most 2-way (weights) and 4-way (a
// channels-innermost input).
constexpr int kWeightPitch = kCoutTile + 2;
constexpr int kInputPitch = kPixelTile + 4;
constexpr int64_t kMaxPixels = 256;
constexpr int64_t kMinWeightElements = int64_t{1} << 17;
constexpr int kCtasPerSm = 4;  // CTAs an SM the splits aim at (13.5 KB of shared memory a CTA: more would fit)

struct Params {
  const void* input;
  const void* weight;  // (out_channels, channels), contiguous
  const void* bias;    // (out_channels) or null
  void* output;
  float* partial;      // (splits, out_channels, pixels) where splits > 1
  int64_t in_stride[4];   // (n, c, h, w)
  int64_t out_stride[4];  // (n, c, h, w)
  int pixels, plane, width;  // N H W, H W, W
  int channels, out_channels;
  int slice;  // input channels a split: a multiple of kChunk
  bool channels_innermost;  // in_stride[1] == 1: the input is loaded pixel by pixel, else channel by channel
};

__device__ __forceinline__ int64_t pixel_offset(const int64_t (&stride)[4], int pixel, int plane, int width) {
  const int n = pixel / plane, hw = pixel - n * plane, h = hw / width, w = hw - h * width;
  return n * stride[0] + h * stride[2] + w * stride[3];
}

template <typename scalar_t, bool kTf32>
__device__ __forceinline__ float operand(scalar_t value) {
  const float x = static_cast<float>(value);
  return kTf32 ? round_tf32(x) : x;
}

// The output element (co, pixel) from its fp32 sum: rounded to the output dtype, then the bias added and rounded
// again, as ATen adds the bias to cuDNN's output.
template <typename scalar_t>
__device__ __forceinline__ void store_output(const Params& p, int co, int pixel, float sum) {
  scalar_t value = static_cast<scalar_t>(sum);
  if (p.bias != nullptr) {
    value = static_cast<scalar_t>(static_cast<float>(value) +
                                  static_cast<float>(static_cast<const scalar_t*>(p.bias)[co]));
  }
  static_cast<scalar_t*>(p.output)[pixel_offset(p.out_stride, pixel, p.plane, p.width) + co * p.out_stride[1]] = value;
}

// CTA (cout tile, pixel tile, split): sums W[co][k] x[k][pixel] over the split's channels k for its 32 couts and 64
// pixels, k ascending; stores the outputs (one split) or its partial sums.
template <typename scalar_t, bool kTf32>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) pointwise_few_pixels_kernel(const Params p) {
  __shared__ __align__(16) float weight_tile[kChunk][kWeightPitch];  // [k][cout]
  __shared__ __align__(16) float input_tile[kChunk][kInputPitch];    // [k][pixel]
  __shared__ int64_t pixel_at[kPixelTile];                           // the tile's pixels' input offsets, -1 past the end
  const scalar_t* __restrict__ input = static_cast<const scalar_t*>(p.input);
  const scalar_t* __restrict__ weight = static_cast<const scalar_t*>(p.weight);
  const int tid = threadIdx.x;
  const int cout0 = blockIdx.x * kCoutTile, pixel0 = blockIdx.y * kPixelTile;
  const int k_begin = blockIdx.z * p.slice, k_end = min(p.channels, k_begin + p.slice);
  if (tid < kPixelTile) {
    const int pixel = pixel0 + tid;
    pixel_at[tid] = pixel < p.pixels ? pixel_offset(p.in_stride, pixel, p.plane, p.width) : -1;
  }
  __syncthreads();

  // A step's loads: weight (cout wc + 8 r, channel wk), a warp reading 32 consecutive channels of one cout's row;
  // input (channel, pixel) with a warp reading 32 consecutive pixels of one channel, or, where the channels are
  // innermost (NHWC), 32 consecutive channels of one pixel.
  const int wk = tid % kChunk, wc = tid / kChunk;
  const auto input_slot = [&](int r, int& k, int& pixel) {
    if (p.channels_innermost) {
      k = tid % kChunk;
      pixel = tid / kChunk + r * (kThreads / kChunk);
    } else {
      pixel = tid % kPixelTile;
      k = tid / kPixelTile + r * (kThreads / kPixelTile);
    }
  };
  float weight_next[kWeightLoads], input_next[kInputLoads];
  const auto load = [&](int k0) {
#pragma unroll
    for (int r = 0; r < kWeightLoads; ++r) {
      const int co = cout0 + wc + r * (kThreads / kChunk), k = k0 + wk;
      weight_next[r] = co < p.out_channels && k < k_end
                           ? operand<scalar_t, kTf32>(weight[static_cast<int64_t>(co) * p.channels + k])
                           : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kInputLoads; ++r) {
      int k, pixel;
      input_slot(r, k, pixel);
      const int64_t at = pixel_at[pixel];
      input_next[r] = at >= 0 && k0 + k < k_end
                          ? operand<scalar_t, kTf32>(input[at + static_cast<int64_t>(k0 + k) * p.in_stride[1]])
                          : 0.0f;
    }
  };
  const auto stage = [&] {
#pragma unroll
    for (int r = 0; r < kWeightLoads; ++r) weight_tile[wk][wc + r * (kThreads / kChunk)] = weight_next[r];
#pragma unroll
    for (int r = 0; r < kInputLoads; ++r) {
      int k, pixel;
      input_slot(r, k, pixel);
      input_tile[k][pixel] = input_next[r];
    }
  };

  // Thread (ty, tx) sums couts 2 ty, 2 ty + 1 and pixels 4 tx .. 4 tx + 3 of the tile.
  const int tx = tid % 16, ty = tid / 16;
  float sum[2][4] = {};
  load(k_begin);
  for (int k0 = k_begin; k0 < k_end; k0 += kChunk) {
    stage();
    __syncthreads();
    if (k0 + kChunk < k_end) load(k0 + kChunk);  // in flight while this step computes
#pragma unroll 8
    for (int k = 0; k < kChunk; ++k) {
      const float2 w = *reinterpret_cast<const float2*>(&weight_tile[k][2 * ty]);
      const float4 x = *reinterpret_cast<const float4*>(&input_tile[k][4 * tx]);
      const float ws[2] = {w.x, w.y}, xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) sum[i][j] = fmaf(ws[i], xs[j], sum[i][j]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int co = cout0 + 2 * ty + i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int pixel = pixel0 + 4 * tx + j;
      if (co >= p.out_channels || pixel >= p.pixels) continue;
      if (gridDim.z == 1) {
        store_output<scalar_t>(p, co, pixel, sum[i][j]);
      } else {
        p.partial[(static_cast<int64_t>(blockIdx.z) * p.out_channels + co) * p.pixels + pixel] = sum[i][j];
      }
    }
  }
}

// Adds the splits' partial sums of each output in split order and stores it.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads) pointwise_few_pixels_sum_kernel(const Params p, int splits) {
  const int64_t outputs = static_cast<int64_t>(p.out_channels) * p.pixels;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= outputs) return;
  float sum = p.partial[i];
  for (int s = 1; s < splits; ++s) sum += p.partial[s * outputs + i];
  store_output<scalar_t>(p, static_cast<int>(i / p.pixels), static_cast<int>(i % p.pixels), sum);
}

template <typename scalar_t, bool kTf32>
void launch(const Params& p, dim3 grid, cudaStream_t stream) {
  pointwise_few_pixels_kernel<scalar_t, kTf32><<<grid, kThreads, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (grid.z > 1) {
    const int64_t outputs = static_cast<int64_t>(p.out_channels) * p.pixels;
    pointwise_few_pixels_sum_kernel<scalar_t>
        <<<static_cast<unsigned>(ceil_div<int64_t>(outputs, kThreads)), kThreads, 0, stream>>>(
            p, static_cast<int>(grid.z));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace

bool pointwise_few_pixels_applies(const at::Tensor& mid, const at::Tensor& weight) {
  const at::ScalarType dtype = mid.scalar_type();
  if (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) return false;
  const int64_t pixels = mid.size(0) * mid.size(2) * mid.size(3);
  const int64_t channels = weight.size(1), out_channels = weight.size(0);
  // The kernel's channel and cout indices are int; its grid's z extent (the splits, at most one a chunk) is 16 bits.
  return pixels > 0 && pixels <= kMaxPixels && out_channels * channels >= kMinWeightElements &&
         channels <= int64_t{65535} * kChunk && out_channels * kMaxPixels < std::numeric_limits<int>::max();
}

at::Tensor pointwise_few_pixels(const at::Tensor& mid, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                at::MemoryFormat memory_format, bool tf32) {
  const int64_t n = mid.size(0), channels = mid.size(1), h = mid.size(2), w = mid.size(3);
  const int64_t out_channels = weight.size(0), pixels = n * h * w;
  at::Tensor output = at::empty({n, out_channels, h, w}, mid.options().memory_format(memory_format));
  const at::Tensor dense_weight = weight.contiguous();
  const at::Tensor dense_bias = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();

  // Splits enough for about kCtasPerSm CTAs an SM, each of whole chunks.
  const int64_t tiles = ceil_div<int64_t>(out_channels, kCoutTile) * ceil_div<int64_t>(pixels, kPixelTile);
  const int64_t chunks = ceil_div<int64_t>(channels, kChunk);
  const int64_t wanted = ceil_div<int64_t>(int64_t{kCtasPerSm} * multiprocessor_count(), tiles);
  const int64_t slice = ceil_div(chunks, std::clamp<int64_t>(wanted, 1, chunks)) * kChunk;
  const int64_t splits = ceil_div(channels, slice);
  at::Tensor partial;
  if (splits > 1) partial = at::empty({splits, out_channels, pixels}, mid.options().dtype(at::kFloat));

  Params p{};
  p.input = mid.const_data_ptr();
  p.weight = dense_weight.const_data_ptr();
  p.bias = dense_bias.defined() ? dense_bias.const_data_ptr() : nullptr;
  p.output = output.mutable_data_ptr();
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
  p.channels_innermost = mid.stride(1) == 1 && channels > 1;
  const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(out_channels, kCoutTile)),
                  static_cast<unsigned>(ceil_div<int64_t>(pixels, kPixelTile)), static_cast<unsigned>(splits));
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  switch (mid.scalar_type()) {
    case at::kFloat:
      if (tf32) {
        launch<float, true>(p, grid, stream);
      } else {
        launch<float, false>(p, grid, stream);
      }
      break;
    case at::kHalf: launch<c10::Half, false>(p, grid, stream); break;
    default: launch<c10::BFloat16, false>(p, grid, stream); break;
  }
  return output;
}

}  // namespace cuda
}  // namespace convops
