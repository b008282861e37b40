// The mixed path of convops::conv2d_group_norm_scale_max_pool_clamp: ATen's convolution without its bias (eager's own
// in the input's layout, so its values are eager's in every precision mode; on a channels-last copy, cuDNN's NHWC
// algorithms, within the op's tolerances rather than bitwise eager's), then this kernel in place of the fused
// kernels' first one. One read of the convolution output gives each pool window's extremum, encoded as the fused
// kernels encode it, and each group's moments per band of rows: the inputs of finalize_kernel, which writes the
// output. Where the fused kernels do not pay (more input channels than their tiles serve well; cuDNN's TF32
// convolution where TF32 is allowed), this replaces the ATen composition's GroupNorm, scale, pooling and clamp passes
// over the convolution output by one pass and a small second kernel.
//
// The conv bias: this kernel adds it to each value as it reads it, in fp32. After cuDNN, ATen adds a bias in a pass of
// its own over the convolution output (10-17 us of the mixed path's 60-110 on the bench's blocks, H200 2026-11-28),
// rounding the sum to the output's dtype: in fp32 the sums here are eager's bit for bit; in 16-bit they are not
// rounded to 16 bits (closer to exact; an fp16 sum past 65504, Inf in eager, stays finite here).
//
// Work split: a CTA per (image, channel tile of kTileN channels, band of pool-window rows); the last band also takes
// the rows no window holds, which count in the statistics. Each CTA writes every group's (count, mean, M2) for its
// (image, channel tile, band) slot, the layout finalize_kernel reads. Two kernels, one a layout of the convolution
// output, so that neither copies it:
//   - NCHW (pool_stats_from_conv_kernel): the tile's groups one after the other, the threads spread over the group's
//     (channel, window) pairs, adjacent threads on adjacent windows of a channel (the loads of a window row
//     coalesce), each keeping one summary, merged by the CTA at the end of the group;
//   - NHWC (pool_stats_from_nhwc_conv_kernel, ATen's output for a channels-last input): a thread a channel, adjacent
//     threads on adjacent channels of a pixel, in rows of threads over the band's windows; a warp a group merges.
#pragma once

#include "cuda/conv2d_group_norm_common.cuh"

namespace convops {
namespace cuda {
namespace gn_pool {
namespace epilogue {

// CTAs an SM of the stats kernels (their launch bounds), which the host's band split aims at (mixed_tiling): the NCHW
// kernel and the NHWC one a channel a thread, and the NHWC one in vectors of 4 channels.
constexpr int kCtasPerSm = 4, kVectorCtasPerSm = 2;

// What a CTA covers: image n, channel tile ct (channels [c_first, c_end)), and band `band` of pool-window rows
// ([first_window_row, + window_rows)); the cells right of its windows and, in the last band, the rows below every
// window count in the statistics only.
struct Band {
  int n, ct, band, c_first, c_end;
  int first_window_row, window_rows, windows, first_row;
  int pooled_cols, tail_cols, tail_cells, pooled_rows, bottom_cells;

  __device__ __forceinline__ Band(const ConvPoolParams& p, int band_windows) {
    band = static_cast<int>(blockIdx.x % p.spatial_tiles);
    const int64_t image_tile = blockIdx.x / p.spatial_tiles;
    ct = static_cast<int>(image_tile % p.channel_tiles);
    n = static_cast<int>(image_tile / p.channel_tiles);
    c_first = ct * kTileN;
    c_end = min(c_first + kTileN, p.out_channels);
    first_window_row = band * band_windows;
    window_rows = min(band_windows, p.pooled_h - first_window_row);
    windows = window_rows * p.pooled_w;
    first_row = first_window_row * p.pool_h;
    pooled_cols = p.pooled_w * p.pool_w;
    tail_cols = p.conv_w - pooled_cols;
    tail_cells = window_rows * p.pool_h * tail_cols;
    pooled_rows = p.pooled_h * p.pool_h;
    bottom_cells = band == p.spatial_tiles - 1 ? (p.conv_h - pooled_rows) * p.conv_w : 0;
  }

  // The band's window number i (< windows), row-major: returns its column and sets wr to its row.
  __device__ __forceinline__ int window(const ConvPoolParams& p, int i, int& wr) const {
    int q;
    const int wc = p.pooled_w_div.divmod(i, q);
    wr = first_window_row + q;
    return wc;
  }

  // The offset (in rows of `row` elements and columns of `col`) of the cell right of the band's windows numbered
  // `cell` (< tail_cells).
  __device__ __forceinline__ int64_t tail_cell(int cell, int64_t row, int64_t col) const {
    return (first_row + cell / tail_cols) * row + (pooled_cols + cell % tail_cols) * col;
  }
};

// One pool window of V adjacent channels (V = 1 in NCHW; 4 from a channels-last output whose channels are whole
// vectors): per channel, its values (each plus the channel's conv bias) added to the thread's shifted sums, and its
// extremum as the fused kernels encode it: the encoded max of sign * x (a max.NaN a value, one encoding a window), or
// for sign 0 the window's sign classes. load(r, c) returns the V channels' values at row r, column c of the window
// (an AlignedVector of any element type: loads of the convolution output here, registers in the direct kernel).
// kPool > 0: a kPool x kPool window whose loads are issued before the arithmetic, in batches of whole rows
// (kBatchRows): with the extents read from p, each load waited for in turn (the NHWC kernel read 8.4 MB in 16 us,
// 0.5 TB/s, on an 8-image block; H200, 2026-11-28); 0: the extents in p, a load at a time.
template <int kPool, int V, typename Load>
__device__ __forceinline__ void window_summaries(const ConvPoolParams& p, const Load& load, const float (&sign)[V],
                                                 const float (&bias)[V], ShiftedSums (&sums)[V], uint32_t (&code)[V]) {
  using Vec = decltype(load(0, 0));
  float fold[V], top[V];
  uint32_t classes[V];
  bool any_sign0 = false;
#pragma unroll
  for (int v = 0; v < V; ++v) fold[v] = sign_fold(sign[v]), any_sign0 |= sign[v] == 0.f;
  const auto start = [&](const Vec& x) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float value = static_cast<float>(x.v[v]) + bias[v];
      sums[v].begin(value);
      top[v] = fold[v] * value;
      classes[v] = 0u;
    }
  };
  // Every element through `add`, the first one after `start`.
  const auto walk = [&](const auto& add) {
    if constexpr (kPool > 0) {
      // Window rows a batch: all of them for V = 1, for vectors at most 8 vectors' worth.
      constexpr int kBatchRows = V == 1 ? kPool : kPool >= 8 ? 1 : 8 / kPool;
#pragma unroll
      for (int r0 = 0; r0 < kPool; r0 += kBatchRows) {
        Vec x[kBatchRows][kPool];
#pragma unroll
        for (int r = 0; r < kBatchRows; ++r)
#pragma unroll
          for (int c = 0; c < kPool; ++c)
            if (r0 + r < kPool) x[r][c] = load(r0 + r, c);
        if (r0 == 0) start(x[0][0]);
#pragma unroll
        for (int r = 0; r < kBatchRows; ++r)
#pragma unroll
          for (int c = 0; c < kPool; ++c)
            if (r0 + r < kPool) add(x[r][c]);
      }
    } else {
      start(load(0, 0));
      for (int r = 0; r < p.pool_h; ++r) {
        for (int c = 0; c < p.pool_w; ++c) add(load(r, c));
      }
    }
  };
  const auto add_value = [&](const Vec& x, int v) {
    const float value = static_cast<float>(x.v[v]) + bias[v];
    sums[v].add(value);
    top[v] = max_nan(top[v], fold[v] * value);
    return value;
  };
  if (!any_sign0) {
    walk([&](const Vec& x) {
#pragma unroll
      for (int v = 0; v < V; ++v) add_value(x, v);
    });
  } else {  // an infinite GroupNorm weight (rare): the sign classes too
    walk([&](const Vec& x) {
#pragma unroll
      for (int v = 0; v < V; ++v) classes[v] |= sign_classes(add_value(x, v));
    });
  }
  const float count = static_cast<float>(p.pool_h * p.pool_w);
#pragma unroll
  for (int v = 0; v < V; ++v) {
    sums[v].add_count(count);
    code[v] = sign[v] != 0.f ? encode_ordered(top[v]) : classes[v];
  }
}

// load(r, c) for window_summaries over the convolution output in memory: V channels from `win`, the window's first
// element, with `row` and `col` the element strides between its rows and columns.
template <typename T, int V>
__device__ __forceinline__ auto window_in_memory(const T* win, int64_t row, int64_t col) {
  return [=](int r, int c) { return *reinterpret_cast<const AlignedVector<T, V>*>(win + r * row + c * col); };
}

// A cell outside every window (right of them, or in the rows below): its value (plus the conv bias) counts in the
// moments only.
template <int V, typename Vec>
__device__ __forceinline__ void add_cell(ShiftedSums (&sums)[V], const float (&bias)[V], const Vec& x) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const float value = static_cast<float>(x.v[v]) + bias[v];
    sums[v].begin(value);
    sums[v].add(value);
    sums[v].add_count(1.f);
  }
}

__device__ __forceinline__ float4* partial_slot(const ConvPoolParams& p, const Band& b, int local_group) {
  return p.partials + ((static_cast<int64_t>(b.n) * p.channel_tiles + b.ct) * p.spatial_tiles + b.band) *
                          p.local_groups + local_group;
}

__device__ __forceinline__ uint32_t* extremum_at(const ConvPoolParams& p, int n, int c, int wr, int wc) {
  return p.extremum + ((static_cast<int64_t>(n) * p.out_channels + c) * p.pooled_h + wr) * p.ext_w + wc;
}

// conv: the convolution output, dense NCHW. p: the finalize kernel's parameters (extremum with ext_w = pooled_w,
// partials, spatial_tiles = the number of bands) plus conv_h / conv_w. band_windows: pool-window rows a band.
// 4 CTAs an SM (64 registers): at 5 (48) both the unrolled windows and the run-time ones spilled.
// A warp's summary of a group goes to shared memory without a barrier, so that warps run on into the next group's
// loads; one barrier at the end, then a warp a group merges the warps' summaries (a merge of the whole CTA a group,
// two barriers each, kept the loads of one group in flight at a time).
template <typename T, int kPool>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    pool_stats_from_conv_kernel(const ConvPoolParams p, const T* __restrict__ conv, int band_windows) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float warp_moments[kTileN + 1][kWarps][3];  // [local group][warp]: a tile meets <= kTileN + 1 groups
  __shared__ float tile_sign[kTileN], tile_bias[kTileN];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const Band b(p, band_windows);
  const int64_t plane = static_cast<int64_t>(p.conv_h) * p.conv_w;
  if (tid < b.c_end - b.c_first) {
    tile_sign[tid] = affine_sign<T>(p, b.c_first + tid);
    tile_bias[tid] = conv_bias<T>(p, b.c_first + tid);
  }
  __syncthreads();
  const int cpg = p.channels_per_group;
  // A group's channels of this tile at a time, the threads spread over (channel, window) with the windows of a
  // channel adjacent (coalesced window rows), so that a band of few windows still keeps every thread busy.
  int local = 0;  // the tile's group
  for (int g_first = b.c_first; g_first < b.c_end; ++local) {
    const int g_end = min((g_first / cpg + 1) * cpg, b.c_end);
    const int slice = g_end - g_first;
    const T* group_planes = conv + (static_cast<int64_t>(b.n) * p.out_channels + g_first) * plane;
    const float* group_sign = tile_sign + (g_first - b.c_first);
    const float* group_bias = tile_bias + (g_first - b.c_first);
    ShiftedSums sums[1];
    for (int i = tid; i < slice * b.windows; i += kThreads) {
      int q;
      const int wc = p.pooled_w_div.divmod(i, q);
      const int channel = q / b.window_rows, wr = b.first_window_row + q % b.window_rows;
      const T* win = group_planes + channel * plane + static_cast<int64_t>(wr) * p.pool_h * p.conv_w +
                     static_cast<int64_t>(wc) * p.pool_w;
      const float sign[1] = {group_sign[channel]};
      const float bias[1] = {group_bias[channel]};
      uint32_t code[1];
      window_summaries<kPool, 1>(p, window_in_memory<T, 1>(win, p.conv_w, 1), sign, bias, sums, code);
      *extremum_at(p, b.n, g_first + channel, wr, wc) = code[0];
    }
    using One = AlignedVector<T, 1>;
    for (int i = tid; i < slice * b.tail_cells; i += kThreads) {
      const int channel = i / b.tail_cells;
      const float bias[1] = {group_bias[channel]};
      add_cell(sums, bias, One{{group_planes[channel * plane + b.tail_cell(i % b.tail_cells, p.conv_w, 1)]}});
    }
    for (int i = tid; i < slice * b.bottom_cells; i += kThreads) {
      const int channel = i / b.bottom_cells;
      const float bias[1] = {group_bias[channel]};
      add_cell(sums, bias,
               One{{group_planes[channel * plane + static_cast<int64_t>(b.pooled_rows) * p.conv_w +
                                 i % b.bottom_cells]}});
    }
    const Moments warp_total = merge_warp(sums[0].moments());
    if (lane == 0) {
      warp_moments[local][warp][0] = warp_total.count;
      warp_moments[local][warp][1] = warp_total.mean;
      warp_moments[local][warp][2] = warp_total.m2;
    }
    g_first = g_end;
  }
  __syncthreads();
  for (int lg = warp; lg < local; lg += kWarps) {
    const float* w = warp_moments[lg][lane % kWarps];
    const Moments total = merge_warp(lane < kWarps ? Moments{w[0], w[1], w[2]} : Moments{0.f, 0.f, 0.f});
    if (lane == 0) *partial_slot(p, b, lg) = make_float4(total.count, total.mean, total.m2, 0.f);
  }
}

// The CTA's partials slots from its threads' sums, where thread (row, lane) holds the tile's channels lane * V ...
// + V - 1 and the CTA has `rows` rows of such threads (row == rows: idle, its sums empty): each thread's summaries to
// shared memory (`summaries`: kThreads * V slots), then a warp a group of the tile merges the group's (channel, row)
// summaries, adjacent lanes on adjacent channels, and the warp the lanes' (a fixed order). Every thread of the CTA
// calls it (a barrier inside).
template <int V>
__device__ __forceinline__ void write_group_partials(const ConvPoolParams& p, const Band& b,
                                                     const ShiftedSums (&sums)[V], float (*summaries)[3], int row,
                                                     int rows, int lane) {
  const int tile_channels = b.c_end - b.c_first;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const Moments mom = sums[v].moments();
    float* s = summaries[row * tile_channels + lane * V + v];  // row == rows: past the read rows, within the array
    s[0] = mom.count;
    s[1] = mom.mean;
    s[2] = mom.m2;
  }
  __syncthreads();
  const int cpg = p.channels_per_group, warp = threadIdx.x / 32, warp_lane = threadIdx.x % 32;
  const int first_group = b.c_first / cpg, groups = (b.c_end - 1) / cpg - first_group + 1;
  for (int local = warp; local < groups; local += kThreads / 32) {
    const int grp = first_group + local;
    const int lo = max(grp * cpg, b.c_first) - b.c_first, width = min((grp + 1) * cpg, b.c_end) - b.c_first - lo;
    Moments part{0.f, 0.f, 0.f};
    for (int e = warp_lane; e < width * rows; e += 32) {
      const float* s = summaries[(e / width) * tile_channels + lo + e % width];
      part.merge(s[0], s[1], s[2]);
    }
    const Moments total = merge_warp(part);
    if (warp_lane == 0) *partial_slot(p, b, local) = make_float4(total.count, total.mean, total.m2, 0.f);
  }
}

// The same from a dense NHWC (channels-last) convolution output, without a copy to NCHW: a thread V adjacent
// channels of the tile (V = 4 where the channels are whole vectors of 4, one 16- or 8-byte load a window element;
// else 1), adjacent threads on adjacent channels of a pixel (coalesced), in as many rows of threads as the tile's
// channels leave, each row taking every rows-th window of the band; then a warp a group merges its channels'
// summaries (write_group_partials). The vector loads keep 4x the bytes in flight a thread: the kernel is bound by their
// latency (ncu, H200, 2026-11-28, V = 1 on an 8-image block: 15.9 us for 8.4 MB, half a wave of CTAs, 9.2 cycles
// between a warp's instructions, 42% of them waiting on L1TEX).
// Vectors take 2 CTAs an SM (128 registers): at 3 (80) ptxas spilled the fp32 3 x 3 and the run-time windows.
template <typename T, int kPool, int V>
__global__ void __launch_bounds__(kThreads, V > 1 ? kVectorCtasPerSm : kCtasPerSm)
    pool_stats_from_nhwc_conv_kernel(const ConvPoolParams p, const T* __restrict__ conv, int band_windows) {
  __shared__ float summaries[kThreads * V][3];  // channel c of thread row r at r * tile_channels + c (pitch 3 floats)
  const int tid = threadIdx.x;
  const Band b(p, band_windows);
  const int tile_channels = b.c_end - b.c_first, lanes = tile_channels / V, rows = kThreads / lanes;
  const int lane = tid % lanes, row = tid / lanes;  // row == rows: idle
  const int c = b.c_first + lane * V;               // the thread's first channel
  const int64_t pixel_stride = p.out_channels, row_stride = static_cast<int64_t>(p.conv_w) * p.out_channels;
  using Vec = AlignedVector<T, V>;
  ShiftedSums sums[V];
  if (row < rows) {
    const T* image = conv + static_cast<int64_t>(b.n) * p.conv_h * row_stride + c;
    float sign[V], bias[V];
#pragma unroll
    for (int v = 0; v < V; ++v) sign[v] = affine_sign<T>(p, c + v), bias[v] = conv_bias<T>(p, c + v);
    for (int i = row; i < b.windows; i += rows) {
      int wr;
      const int wc = b.window(p, i, wr);
      const T* win = image + static_cast<int64_t>(wr) * p.pool_h * row_stride +
                     static_cast<int64_t>(wc) * p.pool_w * pixel_stride;
      uint32_t code[V];
      const auto window = window_in_memory<T, V>(win, row_stride, pixel_stride);
      window_summaries<kPool, V>(p, window, sign, bias, sums, code);
#pragma unroll
      for (int v = 0; v < V; ++v) *extremum_at(p, b.n, c + v, wr, wc) = code[v];
    }
    const auto cell = [&](int64_t offset) { return *reinterpret_cast<const Vec*>(image + offset); };
    for (int i = row; i < b.tail_cells; i += rows) {
      add_cell(sums, bias, cell(b.tail_cell(i, row_stride, pixel_stride)));
    }
    for (int i = row; i < b.bottom_cells; i += rows) {
      add_cell(sums, bias, cell(b.pooled_rows * row_stride + i * pixel_stride));
    }
  }
  write_group_partials(p, b, sums, summaries, row, rows, lane);
}

}  // namespace epilogue
}  // namespace gn_pool
}  // namespace cuda
}  // namespace convops
