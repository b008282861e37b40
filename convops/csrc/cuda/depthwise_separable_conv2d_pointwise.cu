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

constexpr int kWarpsM = 4;                     // warps along the couts: 32 couts (two m16 blocks) each
constexpr int kWarpsN = 2;                     // warps along the pixels: 32 pixels (four n8 blocks) each
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kCoutTile = 32 * kWarpsM;        // 128 couts a CTA
constexpr int kPixelTile = 32 * kWarpsN;       // 64 pixels a CTA
constexpr int kChunk = 32;                     // input channels a pipeline stage
constexpr int kStages = 3;
constexpr int kCtasPerSm = 2;                  // at kSmemBytes (81.5 KiB) and kThreads: what the split plan aims at
// Row pitches in floats. Rows of kChunk + 4 (the weight's couts, and the input's pixels where its channels are
// innermost): a fragment's reads (rows g, columns t) fall in banks 4 g + t, all 32 distinct; rows 16-byte aligned for
// the vector copies. Rows of kPixelTile + 8 (the input's channels where its pixels are innermost): a B fragment's
// reads (rows t, columns g) fall in banks 8 t + g.
constexpr int kRowPitch = kChunk + 4;
constexpr int kPixelPitch = kPixelTile + 8;
constexpr int kWeightStage = kCoutTile * kRowPitch;
constexpr int kInputStage = std::max(kPixelTile * kRowPitch, kChunk * kPixelPitch);  // either input layout
constexpr int kStageFloats = kWeightStage + kInputStage;
constexpr int kSmemBytes = kStages * kStageFloats * 4 + kPixelTile * 8;  // and the pixels' offsets
static_assert(kCoutTile * (kChunk / 4) % kThreads == 0 && kPixelTile * (kChunk / 4) % kThreads == 0 &&
                  kChunk * kPixelTile % kThreads == 0,
              "load_stage: every thread issues the same number of copies");
constexpr int64_t kMaxPixels = 256;
constexpr int64_t kMinWeightElements = int64_t{1} << 17;

struct Params {
  const float* input;
  const float* weight;  // (out_channels, channels), contiguous, 16-byte aligned
  const float* bias;    // (out_channels) or null
  float* output;
  float* partial;       // (splits, pixels, out_channels) where splits > 1
  int64_t in_stride[4];   // (n, c, h, w)
  int64_t out_stride[4];  // (n, c, h, w)
  int pixels, plane, width;  // N H W, H W, W
  int channels, out_channels;
  int chunks_per_split;      // stages of kChunk channels a split (the last split may have fewer)
};

__device__ __forceinline__ int64_t pixel_offset(const int64_t (&stride)[4], int pixel, int plane, int width) {
  const int n = pixel / plane, hw = pixel - n * plane, h = hw / width, w = hw - h * width;
  return n * stride[0] + h * stride[2] + w * stride[3];
}

__device__ __forceinline__ void store_output(const Params& p, int co, int pixel, float sum) {
  const float value = p.bias != nullptr ? sum + p.bias[co] : sum;
  p.output[pixel_offset(p.out_stride, pixel, p.plane, p.width) + co * p.out_stride[1]] = value;
}

// Issues the copies of one stage: the weight's kCoutTile x kChunk block in 16-byte pieces (channels a multiple of 4,
// so a piece lies wholly inside or outside the channels), and the input's kChunk channels of the tile's pixels, in
// 16-byte pieces held [pixel][channel] (PixelRows: channels innermost, every pixel's channels 16-byte aligned) or 4
// bytes at a time held [channel][pixel]. Couts, channels and pixels past the end are copied as zeros, so that the
// products of a stage's padding are zeros, never a NaN of memory outside the tensors.
template <bool PixelRows>
__device__ __forceinline__ void load_stage(const Params& p, float* stage, const int64_t* pixel_at, int cout0, int k0,
                                           int tid) {
  float* const weight_tile = stage;
  float* const input_tile = stage + kWeightStage;
  constexpr int kPieces = kChunk / 4;  // 16-byte pieces a row
#pragma unroll
  for (int i = 0; i < kCoutTile * kPieces / kThreads; ++i) {
    const int piece = tid + i * kThreads, row = piece / kPieces, k = piece % kPieces * 4;
    const int co = cout0 + row;
    const bool valid = co < p.out_channels && k0 + k < p.channels;
    cp_async_zfill<16>(weight_tile + row * kRowPitch + k,
                       valid ? p.weight + static_cast<int64_t>(co) * p.channels + k0 + k : p.weight, valid);
  }
  if constexpr (PixelRows) {
#pragma unroll
    for (int i = 0; i < kPixelTile * kPieces / kThreads; ++i) {
      const int piece = tid + i * kThreads, pixel = piece / kPieces, k = piece % kPieces * 4;
      const int64_t at = pixel_at[pixel];
      const bool valid = at >= 0 && k0 + k < p.channels;
      cp_async_zfill<16>(input_tile + pixel * kRowPitch + k, valid ? p.input + at + k0 + k : p.input, valid);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kChunk * kPixelTile / kThreads; ++i) {
      const int element = tid + i * kThreads, k = element / kPixelTile, pixel = element % kPixelTile;
      const int64_t at = pixel_at[pixel];
      const bool valid = at >= 0 && k0 + k < p.channels;
      cp_async_zfill<4>(input_tile + k * kPixelPitch + pixel,
                        valid ? p.input + at + static_cast<int64_t>(k0 + k) * p.in_stride[1] : p.input, valid);
    }
  }
}

// CTA (cout tile, pixel tile, split): the products of its 128 couts and up to 64 pixels over the split's channels,
// streamed through a ring of kStages stages of kChunk channels; stores the outputs (one split) or its partial sums.
template <bool PixelRows>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) pointwise_few_pixels_kernel(const Params p) {
  extern __shared__ __align__(16) float smem[];
  int64_t* const pixel_at = reinterpret_cast<int64_t*>(smem + kStages * kStageFloats);  // -1 past the last pixel
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int cout0 = blockIdx.x * kCoutTile, pixel0 = blockIdx.y * kPixelTile;
  const int first_chunk = blockIdx.z * p.chunks_per_split;
  const int chunks = min(p.chunks_per_split, (p.channels + kChunk - 1) / kChunk - first_chunk);
  if (tid < kPixelTile) {
    const int pixel = pixel0 + tid;
    pixel_at[tid] = pixel < p.pixels ? pixel_offset(p.in_stride, pixel, p.plane, p.width) : -1;
  }
  __syncthreads();

  // The ring: kStages - 1 stages in flight before the first is read; each step waits for its own stage, then refills
  // the slot the step before read (every warp is past it after the barrier). A group is committed every step, empty
  // or not, so that cp_async_wait<kStages - 2> always means "this step's stage has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) load_stage<PixelRows>(p, smem + s * kStageFloats, pixel_at, cout0, (first_chunk + s) * kChunk, tid);
    cp_async_commit();
  }

  // Warp (wm, wn): couts 32 wm .. 32 wm + 31 (two m16 blocks of A, the weight) x pixels 32 wn .. 32 wn + 31 (four n8
  // blocks of B), of which n_blocks hold pixels (none where the tile's pixels end before the warp's: the division
  // truncates toward zero, and max clamps what is left).
  const int wm = warp % kWarpsM, wn = warp / kWarpsM, g = lane / 4, t = lane % 4;
  const int n_blocks = min(4, max(0, (min(kPixelTile, p.pixels - pixel0) - 32 * wn + 7) / 8));
  float acc[2][4][4] = {};
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = c + kStages - 1;
    if (next < chunks) {
      load_stage<PixelRows>(p, smem + next % kStages * kStageFloats, pixel_at, cout0, (first_chunk + next) * kChunk,
                            tid);
    }
    cp_async_commit();
    const float* const weight_tile = smem + c % kStages * kStageFloats;
    const float* const input_tile = weight_tile + kWeightStage;
#pragma unroll
    for (int k8 = 0; k8 < kChunk; k8 += 8) {
      uint32_t a[2][4];
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const float* const r = weight_tile + (32 * wm + 16 * m + g) * kRowPitch + k8 + t;
        a[m][0] = tf32_bits(r[0]);
        a[m][1] = tf32_bits(r[8 * kRowPitch]);
        a[m][2] = tf32_bits(r[4]);
        a[m][3] = tf32_bits(r[8 * kRowPitch + 4]);
      }
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        if (n >= n_blocks) continue;
        // B (k, pixel) = (k8 + t, 32 wn + 8 n + g) and (k8 + t + 4, the same pixel).
        const int pixel = 32 * wn + 8 * n + g;
        const float* const r = PixelRows ? input_tile + pixel * kRowPitch + k8 + t
                                         : input_tile + (k8 + t) * kPixelPitch + pixel;
        const uint32_t b[2] = {tf32_bits(r[0]), tf32_bits(r[PixelRows ? 4 : 4 * kPixelPitch])};
        mma_m16n8k8_tf32(acc[0][n], a[0], b);
        mma_m16n8k8_tf32(acc[1][n], a[1], b);
      }
    }
  }

  // acc[m][n]: (cout g, pixels 2t, 2t + 1) and (cout g + 8, the same pixels) of block (m, n). Partial sums are held
  // [split][pixel][cout], so that a warp's store is four runs of eight consecutive couts.
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int co = cout0 + 32 * wm + 16 * m + g + 8 * (e / 2);
        const int pixel = pixel0 + 32 * wn + 8 * n + 2 * t + e % 2;
        if (co >= p.out_channels || pixel >= p.pixels) continue;
        if (gridDim.z == 1) {
          store_output(p, co, pixel, acc[m][n][e]);
        } else {
          p.partial[(static_cast<int64_t>(blockIdx.z) * p.pixels + pixel) * p.out_channels + co] = acc[m][n][e];
        }
      }
    }
  }
}

// The sum kernel's tile: 32 couts x 32 pixels, a CTA of 8 warps.
constexpr int kSumTile = 32;
constexpr int kSumWarps = 8;

// Adds the splits' partial sums of a tile of outputs in split order (four loads in flight at a time), each warp
// reading rows of 32 consecutive couts. Where the output's pixels are innermost (NCHW) the sums go through shared
// memory, so that a warp's stores are 32 consecutive pixels rather than 32 pixels apart.
__global__ void __launch_bounds__(32 * kSumWarps) pointwise_few_pixels_sum_kernel(const Params p, int splits,
                                                                                   bool pixels_innermost) {
  __shared__ float sums[kSumTile][kSumTile + 1];  // [pixel][cout]; the pitch of 33 keeps both passes conflict-free
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int cout0 = blockIdx.x * kSumTile, pixel0 = blockIdx.y * kSumTile;
  const int64_t split_stride = static_cast<int64_t>(p.pixels) * p.out_channels;
  for (int j = warp; j < kSumTile; j += kSumWarps) {
    const int co = cout0 + lane, pixel = pixel0 + j;
    if (co >= p.out_channels || pixel >= p.pixels) continue;
    const float* const column = p.partial + static_cast<int64_t>(pixel) * p.out_channels + co;  // split s: + s stride
    float sum = column[0];
    int s = 1;
    for (; s + 3 < splits; s += 4) {
      const float v0 = column[s * split_stride], v1 = column[(s + 1) * split_stride],
                  v2 = column[(s + 2) * split_stride], v3 = column[(s + 3) * split_stride];
      sum += v0;
      sum += v1;
      sum += v2;
      sum += v3;
    }
    for (; s < splits; ++s) sum += column[s * split_stride];
    if (pixels_innermost) {
      sums[j][lane] = sum;
    } else {
      store_output(p, co, pixel, sum);
    }
  }
  if (!pixels_innermost) return;  // the same for the whole CTA
  __syncthreads();
  for (int j = warp; j < kSumTile; j += kSumWarps) {
    const int co = cout0 + j, pixel = pixel0 + lane;
    if (co < p.out_channels && pixel < p.pixels) store_output(p, co, pixel, sums[lane][j]);
  }
}

}  // namespace

bool pointwise_few_pixels_applies(const at::Tensor& mid, const at::Tensor& weight) {
  if (mid.scalar_type() != at::kFloat || !conv_allows_tf32(mid)) return false;
  const int64_t pixels = mid.size(0) * mid.size(2) * mid.size(3);
  const int64_t channels = weight.size(1), out_channels = weight.size(0);
  // 16-byte weight copies: channels a multiple of 4. The kernel's channel, cout and pixel indices are int; its grid's
  // z extent (the splits, at most one a stage) is 16 bits.
  return pixels > 0 && pixels <= kMaxPixels && out_channels * channels >= kMinWeightElements && channels % 4 == 0 &&
         ceil_div<int64_t>(channels, kChunk) <= 65535 && out_channels * kMaxPixels < std::numeric_limits<int>::max() &&
         max_shared_memory_per_block() >= kSmemBytes;
}

at::Tensor pointwise_few_pixels(const at::Tensor& mid, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                at::MemoryFormat memory_format) {
  const int64_t n = mid.size(0), channels = mid.size(1), h = mid.size(2), w = mid.size(3);
  const int64_t out_channels = weight.size(0), pixels = n * h * w;
  at::Tensor output = at::empty({n, out_channels, h, w}, mid.options().memory_format(memory_format));
  at::Tensor dense_weight = weight.contiguous();
  if (reinterpret_cast<uintptr_t>(dense_weight.const_data_ptr()) % 16 != 0) dense_weight = dense_weight.clone();
  const at::Tensor dense_bias = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();

  // Splits of whole stages, as many as give the grid kCtasPerSm CTAs an SM (one wave), each split's stages streamed
  // through the ring; more splits would only add partial sums.
  const int64_t chunks = ceil_div<int64_t>(channels, kChunk);
  const int64_t tiles = ceil_div<int64_t>(out_channels, kCoutTile) * ceil_div<int64_t>(pixels, kPixelTile);
  const int64_t wanted = std::clamp<int64_t>(int64_t{kCtasPerSm} * multiprocessor_count() / tiles, 1, chunks);
  const int64_t chunks_per_split = ceil_div(chunks, wanted);
  const int64_t splits = ceil_div(chunks, chunks_per_split);
  at::Tensor partial;
  if (splits > 1) partial = at::empty({splits, pixels, out_channels}, mid.options());

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
  p.chunks_per_split = static_cast<int>(chunks_per_split);
  // 16-byte input copies: channels innermost and every pixel's run of channels 16-byte aligned.
  const bool pixel_rows = mid.stride(1) == 1 && reinterpret_cast<uintptr_t>(p.input) % 16 == 0 &&
                          mid.stride(0) % 4 == 0 && mid.stride(2) % 4 == 0 && mid.stride(3) % 4 == 0;

  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const auto kernel = pixel_rows ? pointwise_few_pixels_kernel<true> : pointwise_few_pixels_kernel<false>;
  allow_dynamic_shared_memory(kernel, kSmemBytes);
  const dim3 grid(static_cast<unsigned>(ceil_div<int64_t>(out_channels, kCoutTile)),
                  static_cast<unsigned>(ceil_div<int64_t>(pixels, kPixelTile)), static_cast<unsigned>(splits));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (splits > 1) {
    const dim3 sum_grid(static_cast<unsigned>(ceil_div<int64_t>(out_channels, kSumTile)),
                        static_cast<unsigned>(ceil_div<int64_t>(pixels, kSumTile)));
    pointwise_few_pixels_sum_kernel<<<sum_grid, 32 * kSumWarps, 0, stream>>>(
        p, static_cast<int>(splits), memory_format != at::MemoryFormat::ChannelsLast);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return output;
}

}  // namespace cuda
}  // namespace convops
