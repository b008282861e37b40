// Kernel 2 of convops::conv2d_group_norm_scale_max_pool_clamp: a row of CTAs per (image, group), each CTA merging the
// group's per-tile moments (Chan), then turning its share of each channel's pooled windows (the plane split over
// gridDim.y) into the output clamp((a v + b) * s, lo, hi), GroupNorm's affine in ATen's form (a = rstd * gamma,
// b = -a * mean + beta), v = sign_c * decoded max of sign_c * conv.
#pragma once

#include "cuda/conv2d_group_norm_common.cuh"

namespace convops {
namespace cuda {
namespace gn_pool {

template <typename T>
__global__ void __launch_bounds__(kThreads) finalize_kernel(const ConvPoolParams p) {
  __shared__ float s_count[kThreads], s_mean[kThreads], s_m2[kThreads];
  __shared__ float s_stats[2];
  const int tid = threadIdx.x;
  const int64_t item = blockIdx.x;
  const int n = static_cast<int>(item / p.num_groups), grp = static_cast<int>(item % p.num_groups);
  const int cpg = p.channels_per_group;

  // The channel tiles holding part of this group, and the group's slot in each.
  const int tile_lo = grp * cpg / kTileN, tile_hi = ((grp + 1) * cpg - 1) / kTileN;
  const int slots = (tile_hi - tile_lo + 1) * p.spatial_tiles;  // < channel_tiles * spatial_tiles < 2^30 (fits_int32)
  Moments mom{0.f, 0.f, 0.f};
  for (int i = tid; i < slots; i += kThreads) {
    const int ct = tile_lo + i / p.spatial_tiles, st = i % p.spatial_tiles;
    const int lg = grp - ct * kTileN / cpg;
    const float4 part =
        p.partials[((static_cast<int64_t>(n) * p.channel_tiles + ct) * p.spatial_tiles + st) * p.local_groups + lg];
    mom.merge(part.x, part.y, part.z);
  }
  s_count[tid] = mom.count;
  s_mean[tid] = mom.mean;
  s_m2[tid] = mom.m2;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (tid < half) {
      Moments a{s_count[tid], s_mean[tid], s_m2[tid]};
      a.merge(s_count[tid + half], s_mean[tid + half], s_m2[tid + half]);
      s_count[tid] = a.count;
      s_mean[tid] = a.mean;
      s_m2[tid] = a.m2;
    }
    __syncthreads();
  }
  if (tid == 0) {
    s_stats[0] = s_mean[0];
    // A rounding-negative variance becomes 0; a NaN one (Inf or NaN among the conv outputs) must stay NaN, as in
    // ATen, which fmaxf would turn into 0.
    const float var = s_m2[0] / s_count[0];
    s_stats[1] = rsqrtf((var < 0.f ? 0.f : var) + p.eps);
  }
  __syncthreads();
  const float mean = s_stats[0], rstd = s_stats[1];

  // Channel by channel, so the per-channel parameters are uniform across the CTA.
  const int plane = p.pooled_h * p.pooled_w;
  T* out = static_cast<T*>(p.output);
  for (int c = grp * cpg; c < (grp + 1) * cpg; ++c) {
    const float gamma = p.gamma ? load_float<T>(p.gamma, c) : 1.f;
    const float beta = p.beta ? load_float<T>(p.beta, c) : 0.f;
    const float s = load_float<T>(p.scale, p.scale_per_channel ? c : 0);
    const float a = rstd * gamma, b = -a * mean + beta;
    const float sign = affine_sign(gamma, s);
    // Infinite gamma: a window is b * s where all its elements have the sign of a * b, NaN otherwise.
    const uint32_t spoilers = a * b > 0.f ? kNotPositive : kNotNegative;
    const uint32_t* ext = p.extremum + (static_cast<int64_t>(n) * p.out_channels + c) * p.pooled_h * p.ext_w;
    T* out_c = out + n * p.out_stride[0] + c * p.out_stride[1];
    const int first = tid + static_cast<int>(blockIdx.y) * kThreads, step = kThreads * static_cast<int>(gridDim.y);
    for (int i = first; i < plane; i += step) {
      int row;
      const int col = p.pooled_w_div.divmod(i, row);
      const uint32_t code = ext[row * p.ext_w + col];
      float z;
      if (sign != 0.f) {
        // (v - mean) * a + beta is a v + b, with the same NaN / +-Inf for finite a, without cancelling a v against
        // a mean (|a mean| 2^-24 in fp32, ~1e-5 |gamma s| for a mean 500x the spread).
        const float v = sign * decode_ordered(code);
        z = ((v - mean) * a + beta) * s;
      } else {
        z = (code & spoilers) ? __uint_as_float(0x7fffffffu) : b * s;
      }
      if (p.has_lo) z = z < p.lo ? p.lo : z;
      if (p.has_hi) z = z > p.hi ? p.hi : z;
      out_c[row * p.out_stride[2] + col * p.out_stride[3]] = static_cast<T>(z);
    }
  }
}

}  // namespace gn_pool
}  // namespace cuda
}  // namespace convops
