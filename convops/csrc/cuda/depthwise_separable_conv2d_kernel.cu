// CUDA implementation of convops::depthwise_separable_conv2d: one fused kernel; the depthwise intermediate never
// reaches global memory.
//
// Design (kernels-research.md §1, §7b). A CTA owns kPixels = kTileRows x kTileCols output pixels of one image and
// kCoutTile output channels. It walks over the depthwise channels in chunks of kChunk:
//   1. stage the chunk's input rectangles (halo and zero padding included) in shared memory
//      (depthwise_stencil.cuh, the same staging and stencil as convops::depthwise_conv2d); for fp32 this is
//      double-buffered with cp.async, the next chunk's copy in flight while this chunk computes;
//   2. compute the chunk's depthwise outputs for all kPixels pixels in fp32 and store them in shared memory
//      as the pointwise GEMM's A operand [channel][pixel], rounded the way the unfused ATen pair would see them;
//   3. accumulate the pointwise 1x1 convolution, a kPixels x kCoutTile x kChunk GEMM, in registers:
//        - fp32 with TF32 allowed (conv_allows_tf32): mma.sync m16n8k8 TF32, both operands RN-rounded to TF32 (as
//          cuDNN rounds the fp32 intermediate tensor and the weights);
//        - fp16 / bf16: mma.sync m16n8k16, intermediate rounded to the input dtype (as ATen stores it);
//        - strict fp32: FFMA on the CUDA cores (fp64 runs the two stages unfused).
// The epilogue adds the pointwise bias and writes the output tile (any dense layout) straight from registers.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/precision.h"
#include "cuda/depthwise_conv2d_launch.cuh"
#include "cuda/depthwise_stencil.cuh"
#include "cuda/device_utils.cuh"
#include "cuda/path_choice.cuh"
#include "depthwise_separable_conv2d.h"

#include <type_traits>

namespace convops {
namespace cuda {
namespace depthwise {
namespace {

constexpr const char* kOp = "convops::depthwise_separable_conv2d";

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 4, kTileCols = 32;
constexpr int kPixels = kTileRows * kTileCols;  // GEMM M
constexpr int kCoutTile = 128;                  // GEMM N
constexpr int kChunk = 16;                      // GEMM K per step: two TF32 k8 steps, one half-precision k16 step
constexpr int kStageBudgetBytes = 64 * 1024;    // input rectangles staged at once (two CTAs per SM)

enum class PointwiseMath { kCudaCores, kTf32, kHalf };

// Element type of the pointwise GEMM operands in shared memory.
template <typename scalar_t, typename acc_t, PointwiseMath kMath>
using operand_t = std::conditional_t<kMath == PointwiseMath::kHalf, scalar_t, acc_t>;

// Pitches chosen so that the MMA fragment reads below are free of bank conflicts:
// A [channel][pixel]: (k = t, m = g) reads hit bank 8t + g; B [cout][channel]: (n = g, k = t) reads hit 20g + t
// (TF32) or, as packed halves, 12g + t. The CUDA-core path keeps B as [channel][cout] for broadcast reads.
constexpr int kPitchA = kPixels + 8;
template <PointwiseMath kMath>
constexpr int kPitchB = kMath == PointwiseMath::kTf32 ? kChunk + 4 : kMath == PointwiseMath::kHalf ? kChunk + 8
                                                                                                  : kCoutTile;

struct Args {
  Geometry g;
  int mid_channels, out_channels;
  int tiles_x, tiles_per_image, cout_tiles;
  int stage_channels;  // channels of a chunk whose input rectangles are staged at once
  int tile_buffers;    // 2: fp32 double-buffered asynchronous staging of whole chunks; 1: synchronous
  int tile_rows, tile_cols, tile_pitch;
  Strides4d in_strides, out_strides;
};

__host__ __device__ inline size_t align16(size_t bytes) {
  return (bytes + 15) / 16 * 16;
}

// Shared-memory carve-up, computed identically on the host (for the launch size) and on the device.
struct SmemLayout {
  size_t tiles, dw_weights, dw_bias, a, b, total;
  __host__ __device__ SmemLayout(const Args& args, size_t acc_size, size_t operand_size, int pitch_b) {
    const int taps = args.g.kernel_h * args.g.kernel_w;
    tiles = 0;
    dw_weights = tiles + align16(size_t(args.tile_buffers) * args.stage_channels * args.tile_rows *
                                 args.tile_pitch * acc_size);
    dw_bias = dw_weights + align16(size_t(kChunk) * taps * acc_size);
    a = dw_bias + align16(kChunk * acc_size);
    b = a + align16(size_t(kChunk) * kPitchA * operand_size);
    const size_t b_rows = pitch_b == kCoutTile ? kChunk : kCoutTile;
    total = b + align16(b_rows * pitch_b * operand_size);
  }
};

template <PointwiseMath kMath, typename operand_t>
__device__ __forceinline__ operand_t to_operand(float v) {
  if constexpr (kMath == PointwiseMath::kTf32) {
    return round_tf32(v);
  } else {
    return static_cast<operand_t>(v);
  }
}

template <typename half_t>
__device__ __forceinline__ uint32_t pack_halves(half_t lo, half_t hi) {
  return static_cast<uint32_t>(lo.x) | (static_cast<uint32_t>(hi.x) << 16);
}

// The pointwise GEMM of one chunk on tensor cores: warp (wm, wn) owns pixels [64 wm, 64 wm + 64) x couts
// [32 wn, 32 wn + 32), as 4 x 4 m16n8 tiles.
template <PointwiseMath kMath, typename operand_t>
__device__ __forceinline__ void mma_chunk(float (&acc)[4][4][4], const operand_t* __restrict__ a_smem,
                                          const operand_t* __restrict__ b_smem, int wm, int wn, int lane) {
  constexpr int kPitch = kPitchB<kMath>;
  const int g = lane / 4, t = lane % 4;
  if constexpr (kMath == PointwiseMath::kTf32) {
#pragma unroll
    for (int k0 = 0; k0 < kChunk; k0 += 8) {
      uint32_t af[4][4], bf[4][2];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        const float* col = a_smem + wm * 64 + mt * 16 + g;
        af[mt][0] = __float_as_uint(col[(k0 + t) * kPitchA]);
        af[mt][1] = __float_as_uint(col[(k0 + t) * kPitchA + 8]);
        af[mt][2] = __float_as_uint(col[(k0 + t + 4) * kPitchA]);
        af[mt][3] = __float_as_uint(col[(k0 + t + 4) * kPitchA + 8]);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const float* row = b_smem + (wn * 32 + nt * 8 + g) * kPitch + k0 + t;
        bf[nt][0] = __float_as_uint(row[0]);
        bf[nt][1] = __float_as_uint(row[4]);
      }
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_m16n8k8_tf32(acc[mt][nt], af[mt], bf[nt]);
      }
    }
  } else {
    static_assert(kChunk == 16, "one m16n8k16 step per chunk");
    uint32_t af[4][4], bf[4][2];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
      const operand_t* col = a_smem + wm * 64 + mt * 16 + g;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int k = 2 * t + (i / 2) * 8, m = (i % 2) * 8;
        af[mt][i] = pack_halves(col[k * kPitchA + m], col[(k + 1) * kPitchA + m]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const operand_t* row = b_smem + (wn * 32 + nt * 8 + g) * kPitch + 2 * t;
      bf[nt][0] = *reinterpret_cast<const uint32_t*>(row);
      bf[nt][1] = *reinterpret_cast<const uint32_t*>(row + 8);
    }
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        if constexpr (std::is_same_v<operand_t, at::BFloat16>) {
          mma_m16n8k16_bf16(acc[mt][nt], af[mt], bf[nt]);
        } else {
          mma_m16n8k16_f16(acc[mt][nt], af[mt], bf[nt]);
        }
      }
    }
  }
}

// Pixel p of the CTA's tile: row p / kTileCols, column p % kTileCols.
__device__ __forceinline__ bool pixel_offset(const Args& a, int oy0, int ox0, int p, int64_t* offset) {
  const int oy = oy0 + p / kTileCols, ox = ox0 + p % kTileCols;
  *offset = oy * a.out_strides.h + ox * a.out_strides.w;
  return oy < a.g.out_h && ox < a.g.out_w;
}

template <typename scalar_t, PointwiseMath kMath, int KH, int KW>
__global__ void __launch_bounds__(kThreads, 2)
    depthwise_separable_conv2d_kernel(const scalar_t* __restrict__ input, const scalar_t* __restrict__ dw_weight,
                                      const scalar_t* __restrict__ dw_bias, const scalar_t* __restrict__ pw_weight,
                                      const scalar_t* __restrict__ pw_bias, scalar_t* __restrict__ output, Args a) {
  using acc_t = float;  // the depthwise stage and every accumulator are fp32
  using op_t = operand_t<scalar_t, acc_t, kMath>;
  using T = Taps<KH, KW>;
  constexpr int kPitch = kPitchB<kMath>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const SmemLayout layout(a, sizeof(acc_t), sizeof(op_t), kPitch);
  acc_t* tiles = reinterpret_cast<acc_t*>(smem_raw + layout.tiles);
  acc_t* dw_w_smem = reinterpret_cast<acc_t*>(smem_raw + layout.dw_weights);
  acc_t* dw_b_smem = reinterpret_cast<acc_t*>(smem_raw + layout.dw_bias);
  op_t* a_smem = reinterpret_cast<op_t*>(smem_raw + layout.a);
  op_t* b_smem = reinterpret_cast<op_t*>(smem_raw + layout.b);

  const Geometry& g = a.g;
  // Block -> (image, pixel tile, cout tile); cout tiles of one pixel tile are neighbours so they share L2 reads.
  const int cout_tile = blockIdx.x % a.cout_tiles;
  const int64_t pixel_block = blockIdx.x / a.cout_tiles;
  const int64_t n = pixel_block / a.tiles_per_image;
  const int tile = static_cast<int>(pixel_block - n * a.tiles_per_image);
  const int tile_y = tile / a.tiles_x, tile_x = tile - tile_y * a.tiles_x;
  const int oy0 = tile_y * kTileRows, ox0 = tile_x * kTileCols, cout0 = cout_tile * kCoutTile;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int kh = T::kernel_h(g), kw = T::kernel_w(g), taps = kh * kw;
  const int sh = T::stride_h(g), sw = T::stride_w(g);
  const int tile_elems = a.tile_rows * a.tile_pitch;
  const scalar_t* image = input + n * a.in_strides.n;

  constexpr bool kTensorCores = kMath != PointwiseMath::kCudaCores;
  // Tensor cores: warp tile 64 pixels x 32 couts. CUDA cores: thread (tx, ty) owns pixels tx + 16 i, couts ty + 16 j.
  const int wm = warp % 2, wn = warp / 2;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const bool warp_has_couts = cout0 + wn * 32 < a.out_channels;
  float mma_acc[kTensorCores ? 4 : 1][4][4] = {};
  acc_t fma_acc[kTensorCores ? 1 : 8][8] = {};

  const int iy0 = oy0 * sh - g.pad_h, ix0 = ox0 * sw - g.pad_w;
  // Input channel of depthwise channel cm (the staging asks per element; multiplier 1 is the common case).
  const auto input_channel = [&](int cm) { return g.multiplier == 1 ? cm : cm / g.multiplier; };

  // Depthwise outputs of `count` staged channels (chunk channels stage0...) for every pixel, as GEMM operand A.
  const auto depthwise_to_a = [&](const acc_t* staged, int chunk0, int stage0, int count) {
    for (int i = threadIdx.x; i < count * kPixels; i += kThreads) {
      const int k = i / kPixels, p = i % kPixels;
      const int kc = stage0 + k;  // channel within the chunk
      acc_t v = 0;
      if (chunk0 + kc < a.mid_channels) {
        const acc_t* origin = staged + k * tile_elems + (p / kTileCols) * sh * a.tile_pitch + (p % kTileCols) * sw;
        v = tap_sum<KH, KW>(dw_b_smem[kc], origin, a.tile_pitch, dw_w_smem + kc * taps, g);
      }
      a_smem[kc * kPitchA + p] = to_operand<kMath, op_t>(v);
    }
  };

  // fp32 with a whole chunk in shared memory: double-buffered asynchronous staging (cp.async).
  const bool pipelined = std::is_same_v<scalar_t, float> && a.tile_buffers == 2;
  const int buffer_elems = a.stage_channels * tile_elems;
  int buffer = 0;
  const auto stage_chunk_async = [&](int chunk, int into) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      stage_planes_async(
          tiles + into * buffer_elems, tile_elems, a.tile_pitch, kChunk,
          [&](int k) -> const float* {
            const int cm = chunk + k;
            return cm < a.mid_channels ? image + input_channel(cm) * a.in_strides.c : nullptr;
          },
          a.in_strides.h, a.in_strides.w, g.in_h, g.in_w, iy0, ix0, a.tile_rows, a.tile_cols, threadIdx.x,
          kThreads);
    }
  };
  if (pipelined) stage_chunk_async(0, 0);

  for (int chunk0 = 0; chunk0 < a.mid_channels; chunk0 += kChunk) {
    // This chunk's depthwise filters and biases, and its slice of the pointwise weight (zeros past the ends).
    for (int i = threadIdx.x; i < kChunk * taps; i += kThreads) {
      const int cm = chunk0 + i / taps;
      dw_w_smem[i] = cm < a.mid_channels ? static_cast<acc_t>(dw_weight[int64_t{chunk0} * taps + i]) : acc_t(0);
    }
    if (threadIdx.x < kChunk) {
      const int cm = chunk0 + threadIdx.x;
      dw_b_smem[threadIdx.x] =
          dw_bias != nullptr && cm < a.mid_channels ? static_cast<acc_t>(dw_bias[cm]) : acc_t(0);
    }
    for (int i = threadIdx.x; i < kCoutTile * kChunk; i += kThreads) {
      const int nn = i / kChunk, k = i % kChunk;
      const int co = cout0 + nn, cm = chunk0 + k;
      const acc_t w = co < a.out_channels && cm < a.mid_channels
                          ? static_cast<acc_t>(pw_weight[int64_t{co} * a.mid_channels + cm])
                          : acc_t(0);
      b_smem[kTensorCores ? nn * kPitch + k : k * kPitch + nn] = to_operand<kMath, op_t>(w);
    }

    if (pipelined) {
      // The chunk's rectangles were requested during the previous chunk; request the next chunk's into the other
      // buffer before computing on this one, so that its DRAM latency hides behind the depthwise stage and the MMA.
      cp_async_wait_all();
      __syncthreads();
      if (chunk0 + kChunk < a.mid_channels) stage_chunk_async(chunk0 + kChunk, buffer ^ 1);
      depthwise_to_a(tiles + buffer * buffer_elems, chunk0, 0, kChunk);
      buffer ^= 1;
      __syncthreads();
    } else {
      for (int stage0 = 0; stage0 < kChunk; stage0 += a.stage_channels) {
        const int count = min(a.stage_channels, kChunk - stage0);
        const int first = chunk0 + stage0;
        stage_planes<scalar_t>(
            tiles, tile_elems, a.tile_pitch, count,
            [&](int k) -> const scalar_t* {
              const int cm = first + k;
              return cm < a.mid_channels ? image + input_channel(cm) * a.in_strides.c : nullptr;
            },
            a.in_strides.h, a.in_strides.w, g.in_h, g.in_w, iy0, ix0, a.tile_rows, a.tile_cols, threadIdx.x,
            kThreads);
        __syncthreads();
        depthwise_to_a(tiles, chunk0, stage0, count);
        __syncthreads();
      }
    }

    if constexpr (kTensorCores) {
      if (warp_has_couts) mma_chunk<kMath>(mma_acc, a_smem, b_smem, wm, wn, lane);
    } else {
#pragma unroll 4
      for (int k = 0; k < kChunk; ++k) {
        acc_t av[8], bv[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) av[i] = a_smem[k * kPitchA + tx + 16 * i];
#pragma unroll
        for (int j = 0; j < 8; ++j) bv[j] = b_smem[k * kPitch + ty + 16 * j];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
          for (int j = 0; j < 8; ++j) fma_acc[i][j] += av[i] * bv[j];
        }
      }
    }
    __syncthreads();  // the next chunk overwrites A, B and the filters
  }

  scalar_t* out_image = output + n * a.out_strides.n;
  if constexpr (kTensorCores) {
    if (!warp_has_couts) return;
    const int gq = lane / 4, t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int64_t offset;
        if (!pixel_offset(a, oy0, ox0, wm * 64 + mt * 16 + gq + 8 * half, &offset)) continue;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int co = cout0 + wn * 32 + nt * 8 + 2 * t + e;
            if (co >= a.out_channels) continue;
            const float b = pw_bias != nullptr ? static_cast<float>(pw_bias[co]) : 0.f;
            out_image[offset + co * a.out_strides.c] = static_cast<scalar_t>(mma_acc[mt][nt][half * 2 + e] + b);
          }
        }
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      int64_t offset;
      if (!pixel_offset(a, oy0, ox0, tx + 16 * i, &offset)) continue;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int co = cout0 + ty + 16 * j;
        if (co >= a.out_channels) continue;
        const acc_t b = pw_bias != nullptr ? static_cast<acc_t>(pw_bias[co]) : acc_t(0);
        out_image[offset + co * a.out_strides.c] = static_cast<scalar_t>(fma_acc[i][j] + b);
      }
    }
  }
}

template <typename scalar_t, PointwiseMath kMath, int KH, int KW>
void launch_fused(const at::Tensor& input, const at::Tensor& dw_weight, const std::optional<at::Tensor>& dw_bias,
                  const at::Tensor& pw_weight, const std::optional<at::Tensor>& pw_bias, at::Tensor& output,
                  const Args& a) {
  using acc_t = float;  // the depthwise stage and every accumulator are fp32
  using op_t = operand_t<scalar_t, acc_t, kMath>;
  const SmemLayout layout(a, sizeof(acc_t), sizeof(op_t), kPitchB<kMath>);
  auto kernel = depthwise_separable_conv2d_kernel<scalar_t, kMath, KH, KW>;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(layout.total)));
  const int64_t blocks = output.size(0) * int64_t{a.tiles_per_image} * a.cout_tiles;
  CONVOPS_CHECK(kOp, blocks < (int64_t{1} << 31), "the output has too many tiles for one launch: ", output.sizes());
  const auto optional_ptr = [](const std::optional<at::Tensor>& t) {
    return t.has_value() && t->defined() ? t->const_data_ptr<scalar_t>() : nullptr;
  };
  kernel<<<static_cast<unsigned>(blocks), kThreads, layout.total, c10::cuda::getCurrentCUDAStream()>>>(
      input.const_data_ptr<scalar_t>(), dw_weight.const_data_ptr<scalar_t>(), optional_ptr(dw_bias),
      pw_weight.const_data_ptr<scalar_t>(), optional_ptr(pw_bias), output.mutable_data_ptr<scalar_t>(), a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, PointwiseMath kMath>
void launch_fused_taps(const at::Tensor& input, const at::Tensor& dw_weight, const std::optional<at::Tensor>& dw_bias,
                       const at::Tensor& pw_weight, const std::optional<at::Tensor>& pw_bias, at::Tensor& output,
                       const Args& a) {
  const Geometry& g = a.g;
  const bool unit = g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1;
  if (unit && g.kernel_h == 3 && g.kernel_w == 3) {
    launch_fused<scalar_t, kMath, 3, 3>(input, dw_weight, dw_bias, pw_weight, pw_bias, output, a);
  } else {
    launch_fused<scalar_t, kMath, 0, 0>(input, dw_weight, dw_bias, pw_weight, pw_bias, output, a);
  }
}

// The fused kernel (or, where it does not apply, the convops depthwise kernel then ATen's 1x1 convolution).
at::Tensor kernel_path(const at::Tensor& input, const at::Tensor& depthwise_weight,
                       const std::optional<at::Tensor>& depthwise_bias, const at::Tensor& pointwise_weight,
                       const std::optional<at::Tensor>& pointwise_bias, const DepthwiseGeometry& d) {
  const int64_t out_channels = pointwise_weight.size(0);
  auto output = empty_output(input, {d.batch, out_channels, d.out_h, d.out_w});
  const int64_t int_max = std::numeric_limits<int>::max();
  CONVOPS_CHECK(kOp, d.in_h * d.in_w < int_max && d.out_h * d.out_w < int_max && out_channels < int_max,
                "one channel plane must have fewer than 2^31 elements, got input ", input.sizes());
  check_coordinates_fit_int(kOp, d);

  Args a{};
  a.g = make_geometry(d);
  a.mid_channels = static_cast<int>(d.out_channels);
  a.out_channels = static_cast<int>(out_channels);
  a.tiles_x = static_cast<int>(ceil_div<int64_t>(d.out_w, kTileCols));
  a.tiles_per_image = a.tiles_x * static_cast<int>(ceil_div<int64_t>(d.out_h, kTileRows));
  a.cout_tiles = static_cast<int>(ceil_div<int64_t>(out_channels, kCoutTile));
  a.tile_rows = input_span(kTileRows, a.g.kernel_h, a.g.stride_h, a.g.dilation_h);
  a.tile_cols = input_span(kTileCols, a.g.kernel_w, a.g.stride_w, a.g.dilation_w);
  a.tile_pitch = a.tile_cols;
  a.stage_channels = static_cast<int>(std::min<int64_t>(
      kChunk, kStageBudgetBytes / (int64_t{a.tile_rows} * a.tile_pitch * int64_t{sizeof(float)})));
  const int64_t chunk_bytes = kChunk * int64_t{a.tile_rows} * a.tile_pitch * int64_t{sizeof(float)};
  a.tile_buffers = input.scalar_type() == at::kFloat && 2 * chunk_bytes <= kStageBudgetBytes ? 2 : 1;
  a.in_strides = strides_of(input);
  a.out_strides = strides_of(output);

  constexpr size_t kMaxSmemBytes = 200 * 1024;
  const bool fits =
      a.stage_channels > 0 && SmemLayout(a, sizeof(float), sizeof(float), kCoutTile).total <= kMaxSmemBytes;
  const bool channels_last = input.stride(1) == 1 && input.size(1) > 1;
  if (!fits || channels_last || input.scalar_type() == at::kDouble) {
    // Unfused, with the intermediate in the input's dtype exactly as the ATen pair stores it, for: rectangles or
    // filters too large for shared memory (huge dilated kernels); channels-last inputs, which the depthwise kernel
    // reads channel-contiguously and cuDNN's NHWC 1x1 convolution serves well (the fused kernel stages NCHW row
    // pieces); fp64, which has no tensor-core path to gain from fusion.
    auto mid = empty_output(input, {d.batch, d.out_channels, d.out_h, d.out_w});
    depthwise_conv2d_into(input, depthwise_weight, depthwise_bias, mid, d, kOp);
    output.copy_(at::convolution(mid, pointwise_weight, pointwise_bias, {1, 1}, {0, 0}, {1, 1}, false, {0, 0}, 1));
    return output;
  }

  const auto dw_weight_c = depthwise_weight.contiguous();
  const auto pw_weight_c = pointwise_weight.contiguous();
  const auto contiguous_or_none = [](const std::optional<at::Tensor>& t) {
    return t.has_value() && t->defined() ? std::optional<at::Tensor>(t->contiguous()) : std::optional<at::Tensor>();
  };
  const auto dw_bias_c = contiguous_or_none(depthwise_bias);
  const auto pw_bias_c = contiguous_or_none(pointwise_bias);
  const bool tf32 = conv_allows_tf32(input);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "convops_depthwise_separable", [&] {
    if constexpr (std::is_same_v<scalar_t, at::Half> || std::is_same_v<scalar_t, at::BFloat16>) {
      launch_fused_taps<scalar_t, PointwiseMath::kHalf>(input, dw_weight_c, dw_bias_c, pw_weight_c, pw_bias_c,
                                                        output, a);
    } else if constexpr (std::is_same_v<scalar_t, float>) {
      if (tf32) {
        launch_fused_taps<scalar_t, PointwiseMath::kTf32>(input, dw_weight_c, dw_bias_c, pw_weight_c, pw_bias_c,
                                                          output, a);
      } else {
        launch_fused_taps<scalar_t, PointwiseMath::kCudaCores>(input, dw_weight_c, dw_bias_c, pw_weight_c,
                                                               pw_bias_c, output, a);
      }
    }
  });
  return output;
}

at::Tensor depthwise_separable_conv2d_cuda(const at::Tensor& input, const at::Tensor& depthwise_weight,
                                           const std::optional<at::Tensor>& depthwise_bias,
                                           const at::Tensor& pointwise_weight,
                                           const std::optional<at::Tensor>& pointwise_bias, at::IntArrayRef stride,
                                           at::IntArrayRef padding, at::IntArrayRef dilation) {
  const auto d = check_depthwise_separable_conv2d(kOp, input, depthwise_weight, depthwise_bias, pointwise_weight,
                                                  pointwise_bias, stride, padding, dilation);
  const c10::cuda::CUDAGuard guard(input.device());
  if (d.batch == 0) return empty_output(input, {0, pointwise_weight.size(0), d.out_h, d.out_w});
  // The convops kernel, or ATen's two convolutions where they are faster (cuda/path_choice.cuh).
  return run_chosen_path(
      problem_key(kOp, input, depthwise_weight, depthwise_bias, pointwise_weight, pointwise_bias, stride, padding,
                  dilation),
      [&] { return kernel_path(input, depthwise_weight, depthwise_bias, pointwise_weight, pointwise_bias, d); },
      [&] {
        const auto mid = at::convolution(input, depthwise_weight, depthwise_bias, stride, padding, dilation, false,
                                         {0, 0}, d.in_channels);
        return at::convolution(mid, pointwise_weight, pointwise_bias, {1, 1}, {0, 0}, {1, 1}, false, {0, 0}, 1)
            .contiguous(input.suggest_memory_format());
      });
}

}  // namespace
}  // namespace depthwise
}  // namespace cuda

TORCH_LIBRARY_IMPL(convops, CUDA, m) {
  m.impl("depthwise_separable_conv2d", &cuda::depthwise::depthwise_separable_conv2d_cuda);
}

}  // namespace convops
