// Kernel 1 of convops::conv2d_group_norm_scale_max_pool_clamp for convolutions of few taps (C_in x KH x KW <=
// kMaxTaps: a network's first convolution, on 3 input channels): the "direct" kernel. The tensor-core kernels pad K to
// chunks of 8 input channels and N to tiles of 64 output channels, so on 3 channels in and 16 out (the bench's
// b64 c3 -> 16 block) about a tenth of their MMA work is useful. Here each convolution value is its K fused
// multiply-adds on the CUDA cores, in fp32 in every precision mode (eager's cuDNN convolution is fp32-accurate on
// such shapes even where TF32 is allowed), computed where the mixed path's NHWC stats kernel would have read it:
//   - the same work split (a CTA per image, channel tile of kTileN and band of pool-window rows; a thread V adjacent
//     channels of a window, rows of threads over the band's windows, adjacent lanes on adjacent channels), the same
//     window summaries and group partials (conv2d_group_norm_epilogue_kernel.cuh), then the same finalize_kernel;
//   - the band's input rows staged in shared memory once, as floats, zero where the convolution pads, with every tap's
//     offset in a table, so that a tap is one vector of V weights (the same for a lane's whole window) and one staged
//     value a conv pixel, without bounds checks;
//   - a square window's kPool x kPool pixels in registers, each tap's weights loaded once for them all;
//   - kOnePass (where the grid fits on the device at once: a cooperative launch): after the partials, a grid-wide
//     barrier, then each CTA turns its own windows into the output (finalize_kernel's arithmetic), their codes read
//     back from L2 where this CTA wrote them, so that no second kernel reads them again from DRAM.
#pragma once

#include <cooperative_groups.h>

#include "cuda/conv2d_group_norm_epilogue_kernel.cuh"
#include "cuda/conv2d_group_norm_finalize_kernel.cuh"

namespace convops {
namespace cuda {
namespace gn_pool {
namespace direct {

constexpr int kMaxTaps = 32;     // C_in x KH x KW
constexpr int kCtasPerSm = 2;    // launch bounds: 128 registers (a 4 x 4 window of 4 channels holds 64 values)
constexpr int kWeightFloats = kMaxTaps * kTileN;           // [tap][channel of the tile]
constexpr int kInputOffset = kWeightFloats + kMaxTaps;     // floats before the staged input: weights, tap table

// Dynamic shared-memory bytes for staged input planes of in_rows x in_cols floats (host and device agree).
__host__ __device__ inline int64_t smem_bytes(int64_t in_channels, int64_t in_rows, int64_t in_cols) {
  return (kInputOffset + in_channels * in_rows * in_cols) * 4;
}

// V channels' convolution values at a kRows x kCols block of conv pixels whose first one reads staged input row
// `row`, column `col` (tap (0, 0, 0)); the block's rows and columns are stride_h / stride_w input pixels apart.
// A pixel's shared-memory address and the tap table's offsets are in bytes, and the address is hidden from the
// compiler's strength reduction (an empty asm), so that a staged value is one add and one load: with element indices
// nvcc kept the index and spent an add and a shift-add a value, 31 instructions a tap on a 2 x 2 window of 4 channels
// against 27 (SASS, 2026-11-28).
__device__ __forceinline__ float load_shared(uint32_t address) {
  float x;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(x) : "r"(address));
  return x;
}

template <int kRows, int kCols, int V>
__device__ __forceinline__ void conv_block(const ConvPoolParams& p, const float* input, const int* tap_bytes,
                                           const float* weights, int taps, int row, int col,
                                           AlignedVector<float, V> (&values)[kRows][kCols]) {
  const auto staged = static_cast<uint32_t>(__cvta_generic_to_shared(input));
  uint32_t at[kRows][kCols];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      at[r][c] = staged + ((row + r * p.stride_h) * p.patch_w + col + c * p.stride_w) * static_cast<int>(sizeof(float));
      if constexpr (kRows * kCols <= 9) asm("" : "+r"(at[r][c]));  // 4 x 4: 16 more live registers spilled
#pragma unroll
      for (int v = 0; v < V; ++v) values[r][c].v[v] = 0.f;
    }
  for (int tap = 0; tap < taps; ++tap) {
    const auto w = *reinterpret_cast<const AlignedVector<float, V>*>(weights + tap * kTileN);
    const int offset = tap_bytes[tap];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const float x = load_shared(at[r][c] + offset);
#pragma unroll
        for (int v = 0; v < V; ++v) values[r][c].v[v] = fmaf(x, w.v[v], values[r][c].v[v]);
      }
  }
}

// The band's input rows into shared memory (`staged`: [channel][p.patch_h][p.patch_w] floats), zero outside the image:
// every row of the largest band's extent (a shorter band stages rows it does not read), kBatch loads a thread in
// flight before their stores (a warp a row, each load waited for in turn, took ~7 us a CTA on 3 x 18 rows of 66).
template <typename T>
__device__ __forceinline__ void stage_input(const ConvPoolParams& p, const epilogue::Band& b, float* staged) {
  constexpr int kBatch = 8;
  const int total = p.in_channels * p.patch_h * p.patch_w;
  const int in_row0 = b.first_row * p.stride_h - p.pad_h;
  const T* image = static_cast<const T*>(p.input) + b.n * p.in_stride[0];
  for (int first = threadIdx.x; first < total; first += kThreads * kBatch) {
    float value[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = first + u * kThreads;
      value[u] = 0.f;
      if (i < total) {
        int channel_row, ci;
        const int col = p.patch_w_div.divmod(i, channel_row);
        const int ih = in_row0 + p.patch_h_div.divmod(channel_row, ci), iw = col - p.pad_w;
        if (ih >= 0 && ih < p.in_h && iw >= 0 && iw < p.in_w) {
          value[u] = static_cast<float>(
              image[ci * p.in_stride[1] + static_cast<int64_t>(ih) * p.in_stride[2] + iw * p.in_stride[3]]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (first + u * kThreads < total) staged[first + u * kThreads] = value[u];
    }
  }
}

// One CTA: image b.n, channels [b.c_first, b.c_end), band b.band of band_windows pool-window rows (the last band also
// the rows below every window). Shared memory (dynamic, smem_bytes(C_in, p.patch_h, p.patch_w)): the tile's weights
// as floats [tap][kTileN] (a lane's V channels one aligned vector), each tap's byte offset in the staged input, then
// the band's input rows [channel][p.patch_h][p.patch_w] from input row first_row * stride_h - pad_h and column
// -pad_w.
// kOnePass: launched cooperatively (every CTA resident at once), it also writes the output (see the top).
template <typename T, int kPool, int V, bool kOnePass>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    conv_pool_direct_kernel(const ConvPoolParams p, int band_windows) {
  extern __shared__ __align__(32) float smem[];  // 8 channels' weights are one 32-byte vector
  __shared__ float summaries[kThreads * V][3];
  float* s_weight = smem;
  int* s_tap = reinterpret_cast<int*>(smem + kWeightFloats);
  float* s_input = smem + kInputOffset;
  const int tid = threadIdx.x;
  const epilogue::Band b(p, band_windows);
  const int tile_channels = b.c_end - b.c_first, lanes = tile_channels / V, rows = kThreads / lanes;
  const int lane = tid % lanes, row = tid / lanes;  // row == rows: idle
  const int c = b.c_first + lane * V;               // the thread's first channel
  const int kernel_taps = p.kernel_h * p.kernel_w, taps = p.in_channels * kernel_taps;

  // Weights and the tap table, tap = (ci * KH + kh) * KW + kw.
  for (int i = tid; i < taps * tile_channels; i += kThreads) {
    const int tap = i / tile_channels, channel = i % tile_channels;
    const int ci = tap / kernel_taps, kh = tap % kernel_taps / p.kernel_w, kw = tap % p.kernel_w;
    s_weight[tap * kTileN + channel] =
        load_float<T>(p.weight, (b.c_first + channel) * p.w_stride[0] + ci * p.w_stride[1] + kh * p.w_stride[2] +
                                    kw * p.w_stride[3]);
  }
  for (int tap = tid; tap < taps; tap += kThreads) {
    const int ci = tap / kernel_taps, kh = tap % kernel_taps / p.kernel_w, kw = tap % p.kernel_w;
    s_tap[tap] = (ci * p.patch_h * p.patch_w + kh * p.dilation_h * p.patch_w + kw * p.dilation_w) *
                 static_cast<int>(sizeof(float));
  }
  stage_input<T>(p, b, s_input);
  __syncthreads();

  ShiftedSums sums[V];
  if (row < rows) {
    float sign[V], bias[V];
#pragma unroll
    for (int v = 0; v < V; ++v) sign[v] = affine_sign<T>(p, c + v), bias[v] = conv_bias<T>(p, c + v);
    const float* weights = s_weight + lane * V;
    // The V values of conv pixel (oh, ow) of the band.
    const auto pixel = [&](int oh, int ow) {
      AlignedVector<float, V> value[1][1];
      conv_block<1, 1, V>(p, s_input, s_tap, weights, taps, (oh - b.first_row) * p.stride_h, ow * p.stride_w, value);
      return value[0][0];
    };
    for (int i = row; i < b.windows; i += rows) {
      int wr;
      const int wc = b.window(p, i, wr), oh = wr * p.pool_h, ow = wc * p.pool_w;
      uint32_t code[V];
      if constexpr (kPool > 0) {
        AlignedVector<float, V> values[kPool][kPool];
        conv_block<kPool, kPool, V>(p, s_input, s_tap, weights, taps, (oh - b.first_row) * p.stride_h,
                                    ow * p.stride_w, values);
        epilogue::window_summaries<kPool, V>(
            p, [&](int r, int col) { return values[r][col]; }, sign, bias, sums, code);
      } else {
        epilogue::window_summaries<0, V>(
            p, [&](int r, int col) { return pixel(oh + r, ow + col); }, sign, bias, sums, code);
      }
#pragma unroll
      for (int v = 0; v < V; ++v) *epilogue::extremum_at(p, b.n, c + v, wr, wc) = code[v];
    }
    for (int i = row; i < b.tail_cells; i += rows) {
      epilogue::add_cell(sums, bias, pixel(b.first_row + i / b.tail_cols, b.pooled_cols + i % b.tail_cols));
    }
    for (int i = row; i < b.bottom_cells; i += rows) {
      epilogue::add_cell(sums, bias, pixel(b.pooled_rows + i / p.conv_w, i % p.conv_w));
    }
  }
  epilogue::write_group_partials(p, b, sums, summaries, row, rows, lane);
  if constexpr (kOnePass) {
    __threadfence();
    cooperative_groups::this_grid().sync();
    // The (mean, rstd) of the tile's groups, a warp a group, from every CTA's partials of the image; then this CTA's
    // windows, each code read back where this thread wrote it.
    __shared__ float2 group_stats[kTileN + 1];  // a tile meets at most kTileN + 1 groups
    const int cpg = p.channels_per_group, first_group = b.c_first / cpg;
    const int groups = (b.c_end - 1) / cpg - first_group + 1, warp = tid / 32, warp_lane = tid % 32;
    for (int local = warp; local < groups; local += kThreads / 32) {
      const Moments total = merge_warp(group_partials(p, b.n, first_group + local, warp_lane, 32));
      if (warp_lane == 0) group_stats[local] = mean_rstd(total, p.eps);
    }
    __syncthreads();
    if (row < rows) {
      float gamma[V], beta[V], scale[V];
      float2 stats[V];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        gamma[v] = norm_weight<T>(p, c + v);
        beta[v] = norm_bias<T>(p, c + v);
        scale[v] = channel_scale<T>(p, c + v);
        stats[v] = group_stats[(c + v) / cpg - first_group];
      }
      T* out = static_cast<T*>(p.output);
      for (int i = row; i < b.windows; i += rows) {
        int wr;
        const int wc = b.window(p, i, wr);
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const uint32_t code = *epilogue::extremum_at(p, b.n, c + v, wr, wc);
          out[b.n * p.out_stride[0] + (c + v) * p.out_stride[1] + wr * p.out_stride[2] + wc * p.out_stride[3]] =
              static_cast<T>(pooled_output(p, code, stats[v].x, stats[v].y, gamma[v], beta[v], scale[v]));
        }
      }
    }
  }
}

}  // namespace direct
}  // namespace gn_pool
}  // namespace cuda
}  // namespace convops
