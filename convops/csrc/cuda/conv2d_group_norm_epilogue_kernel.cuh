// The mixed path of convops::conv2d_group_norm_scale_max_pool_clamp: ATen's convolution (eager's own, so its values
// are eager's in every precision mode), then this kernel in place of the fused kernels' first one. One read of the
// convolution output gives each pool window's extremum, encoded as the fused kernels encode it, and each group's
// moments per band of rows: the inputs of finalize_kernel, which writes the output. Where the fused kernels do not pay
// (more input channels than their tiles serve well; cuDNN's TF32 convolution where TF32 is allowed), this replaces
// the ATen composition's GroupNorm, scale, pooling and clamp passes over the convolution output by one pass and a
// small second kernel.
//
// Work split: a CTA per (image, channel tile of kTileN channels, band of pool-window rows); the last band also takes
// the rows no window holds, which count in the statistics. Within a CTA the channels go one after the other, the
// threads spread over the band's windows (adjacent threads, adjacent windows: the loads of a window row coalesce),
// each thread keeping one summary of the group's values it met; at the end of a group the CTA merges the summaries
// and writes the group's (count, mean, M2) for its (image, channel tile, band) slot, the layout finalize_kernel reads.
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
  const bool last_band = band == p.spatial_tiles - 1;
  const int64_t bottom_cells = last_band ? static_cast<int64_t>(p.conv_h - pooled_rows) * p.conv_w : 0;
  const int window_cells = p.pool_h * p.pool_w;
  const float window_count = static_cast<float>(window_cells);
  const int64_t plane = static_cast<int64_t>(p.conv_h) * p.conv_w;

  const int c_first = ct * kTileN, c_end = min(c_first + kTileN, p.out_channels);
  const int cpg = p.channels_per_group;
  Moments mom{0.f, 0.f, 0.f};
  for (int c = c_first; c < c_end; ++c) {
    const T* y = conv + (static_cast<int64_t>(n) * p.out_channels + c) * plane;
    const float sign = affine_sign<T>(p, c);
    const float fold = sign_fold(sign);
    uint32_t* ext = p.extremum + (static_cast<int64_t>(n) * p.out_channels + c) * p.pooled_h * p.ext_w;
    for (int i = tid; i < windows; i += kThreads) {
      int row_in_band;
      const int wc = p.pooled_w_div.divmod(i, row_in_band);
      const int wr = first_window_row + row_in_band;
      const T* win = y + static_cast<int64_t>(wr) * p.pool_h * p.conv_w + static_cast<int64_t>(wc) * p.pool_w;
      // The window's moments about its first value (stable: every value of the window is near it relative to the
      // window's own spread), merged into the thread's summary; its extremum as the fused kernels encode it.
      const float first = static_cast<float>(win[0]);
      float sum = 0.f, squares = 0.f;
      uint32_t code = 0u;
      for (int r = 0; r < p.pool_h; ++r) {
        for (int q = 0; q < p.pool_w; ++q) {
          const float x = static_cast<float>(win[static_cast<int64_t>(r) * p.conv_w + q]);
          const float d = x - first;
          sum += d;
          squares = fmaf(d, d, squares);
          code = sign != 0.f ? max(code, encode_ordered(fold * x)) : code | sign_classes(x);
        }
      }
      // A rounding-negative M2 becomes 0; a NaN one stays NaN (as finalize_kernel's variance does).
      const float m2 = squares - sum * sum / window_count;
      mom.merge(window_count, first + sum / window_count, m2 < 0.f ? 0.f : m2);
      ext[static_cast<int64_t>(wr) * p.ext_w + wc] = code;
    }
    for (int i = tid; i < tail_cells; i += kThreads) {
      const int r = first_window_row * p.pool_h + i / tail_cols, q = pooled_cols + i % tail_cols;
      mom.merge(1.f, static_cast<float>(y[static_cast<int64_t>(r) * p.conv_w + q]), 0.f);
    }
    for (int64_t i = tid; i < bottom_cells; i += kThreads) {
      mom.merge(1.f, static_cast<float>(y[static_cast<int64_t>(pooled_rows) * p.conv_w + i]), 0.f);
    }
    if ((c + 1) % cpg == 0 || c + 1 == c_end) {  // the group ends in this tile (uniform across the CTA)
      const Moments total = merge_block(mom, scratch);
      if (tid == 0) {
        const int local_group = c / cpg - c_first / cpg;
        p.partials[((static_cast<int64_t>(n) * p.channel_tiles + ct) * p.spatial_tiles + band) * p.local_groups +
                   local_group] = make_float4(total.count, total.mean, total.m2, 0.f);
      }
      mom = Moments{0.f, 0.f, 0.f};
    }
  }
}

}  // namespace epilogue
}  // namespace gn_pool
}  // namespace cuda
}  // namespace convops
