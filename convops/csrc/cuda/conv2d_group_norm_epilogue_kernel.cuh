// The mixed path of convops::conv2d_group_norm_scale_max_pool_clamp: ATen's convolution (eager's own, so its values
// are eager's in every precision mode), then this kernel in place of the fused kernels' first one. One read of the
// convolution output gives each pool window's extremum, encoded as the fused kernels encode it, and each group's
// moments per band of rows: the inputs of finalize_kernel, which writes the output. Where the fused kernels do not pay
// (more input channels than their tiles serve well; cuDNN's TF32 convolution where TF32 is allowed), this replaces
// the ATen composition's GroupNorm, scale, pooling and clamp passes over the convolution output by one pass and a
// small second kernel.
//
// Work split: a CTA per (image, channel tile of kTileN channels, band of pool-window rows); the last band also takes
// the rows no window holds, which count in the statistics. Within a CTA the groups of the tile go one after the
// other, the threads spread over the group's (channel, window) pairs (adjacent threads, adjacent windows of a channel:
// the loads of a window row coalesce), each keeping one summary of the values it met; at the end of a group the CTA
// merges the summaries and writes the group's (count, mean, M2) for its (image, channel tile, band) slot, the layout
// finalize_kernel reads.
#pragma once

#include "cuda/conv2d_group_norm_common.cuh"

namespace convops {
namespace cuda {
namespace gn_pool {
namespace epilogue {

constexpr unsigned kFullMask = 0xffffffffu;

// The CTA's merge of its threads' summaries, in a fixed order (deterministic). `scratch` holds a summary a warp.
__device__ __forceinline__ Moments merge_block(Moments m, float (*scratch)[3]) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float count = __shfl_down_sync(kFullMask, m.count, offset);
    const float mean = __shfl_down_sync(kFullMask, m.mean, offset);
    const float m2 = __shfl_down_sync(kFullMask, m.m2, offset);
    m.merge(count, mean, m2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    scratch[warp][0] = m.count;
    scratch[warp][1] = m.mean;
    scratch[warp][2] = m.m2;
  }
  __syncthreads();
  Moments total{0.f, 0.f, 0.f};
  if (threadIdx.x == 0) {
    for (int w = 0; w < kThreads / 32; ++w) total.merge(scratch[w][0], scratch[w][1], scratch[w][2]);
  }
  __syncthreads();  // scratch is reused by the next group
  return total;
}

// conv: the convolution output, dense NCHW. p: the finalize kernel's parameters (extremum with ext_w = pooled_w,
// partials, spatial_tiles = the number of bands) plus conv_h / conv_w. band_windows: pool-window rows a band.
template <typename T>
__global__ void __launch_bounds__(kThreads) pool_stats_from_conv_kernel(const ConvPoolParams p,
                                                                        const T* __restrict__ conv,
                                                                        int band_windows) {
  __shared__ float scratch[kThreads / 32][3];
  __shared__ float tile_sign[kTileN];
  const int tid = threadIdx.x;
  const int band = static_cast<int>(blockIdx.x % p.spatial_tiles);
  const int64_t image_tile = blockIdx.x / p.spatial_tiles;
  const int ct = static_cast<int>(image_tile % p.channel_tiles);
  const int n = static_cast<int>(image_tile / p.channel_tiles);

  const int first_window_row = band * band_windows;
  const int window_rows = min(band_windows, p.pooled_h - first_window_row);
  const int windows = window_rows * p.pooled_w;
  const int pooled_cols = p.pooled_w * p.pool_w;
  const int tail_cols = p.conv_w - pooled_cols;  // right of every window: statistics only
  const int tail_cells = window_rows * p.pool_h * tail_cols;
  const int pooled_rows = p.pooled_h * p.pool_h;
  const int bottom_cells = band == p.spatial_tiles - 1 ? (p.conv_h - pooled_rows) * p.conv_w : 0;  // last band
  const float window_count = static_cast<float>(p.pool_h * p.pool_w);
  const int64_t plane = static_cast<int64_t>(p.conv_h) * p.conv_w;

  const int c_first = ct * kTileN, c_end = min(c_first + kTileN, p.out_channels);
  if (tid < c_end - c_first) tile_sign[tid] = affine_sign<T>(p, c_first + tid);
  __syncthreads();
  const int cpg = p.channels_per_group;
  // A group's channels of this tile at a time, the threads spread over (channel, window) with the windows of a
  // channel adjacent (coalesced window rows), so that a band of few windows still keeps every thread busy.
  for (int g_first = c_first; g_first < c_end;) {
    const int g_end = min((g_first / cpg + 1) * cpg, c_end);
    const int slice = g_end - g_first;
    const T* group_planes = conv + (static_cast<int64_t>(n) * p.out_channels + g_first) * plane;
    Moments mom{0.f, 0.f, 0.f};
    for (int i = tid; i < slice * windows; i += kThreads) {
      int q;
      const int wc = p.pooled_w_div.divmod(i, q);
      const int channel = q / window_rows, wr = first_window_row + q % window_rows;
      const float sign = tile_sign[g_first - c_first + channel], fold = sign_fold(sign);
      const T* win = group_planes + channel * plane + static_cast<int64_t>(wr) * p.pool_h * p.conv_w +
                     static_cast<int64_t>(wc) * p.pool_w;
      // The window's moments about its first value (stable: every value of the window is near it relative to the
      // window's own spread), merged into the thread's summary; its extremum as the fused kernels encode it.
      const float first = static_cast<float>(win[0]);
      float sum = 0.f, squares = 0.f;
      uint32_t code = 0u;
      for (int r = 0; r < p.pool_h; ++r) {
        for (int c = 0; c < p.pool_w; ++c) {
          const float x = static_cast<float>(win[static_cast<int64_t>(r) * p.conv_w + c]);
          const float d = x - first;
          sum += d;
          squares = fmaf(d, d, squares);
          code = sign != 0.f ? max(code, encode_ordered(fold * x)) : code | sign_classes(x);
        }
      }
      // A rounding-negative M2 becomes 0; a NaN one stays NaN (as finalize_kernel's variance does).
      const float m2 = squares - sum * sum / window_count;
      mom.merge(window_count, first + sum / window_count, m2 < 0.f ? 0.f : m2);
      p.extremum[((static_cast<int64_t>(n) * p.out_channels + g_first + channel) * p.pooled_h + wr) * p.ext_w + wc] =
          code;
    }
    for (int i = tid; i < slice * tail_cells; i += kThreads) {
      const int channel = i / tail_cells, cell = i % tail_cells;
      const int r = first_window_row * p.pool_h + cell / tail_cols, c = pooled_cols + cell % tail_cols;
      mom.merge(1.f, static_cast<float>(group_planes[channel * plane + static_cast<int64_t>(r) * p.conv_w + c]), 0.f);
    }
    for (int i = tid; i < slice * bottom_cells; i += kThreads) {
      const int channel = i / bottom_cells, cell = i % bottom_cells;
      mom.merge(1.f, static_cast<float>(group_planes[channel * plane + static_cast<int64_t>(pooled_rows) * p.conv_w +
                                                     cell]), 0.f);
    }
    const Moments total = merge_block(mom, scratch);
    if (tid == 0) {
      const int local_group = g_first / cpg - c_first / cpg;
      p.partials[((static_cast<int64_t>(n) * p.channel_tiles + ct) * p.spatial_tiles + band) * p.local_groups +
                 local_group] = make_float4(total.count, total.mean, total.m2, 0.f);
    }
    g_first = g_end;
  }
}

}  // namespace epilogue
}  // namespace gn_pool
}  // namespace cuda
}  // namespace convops
