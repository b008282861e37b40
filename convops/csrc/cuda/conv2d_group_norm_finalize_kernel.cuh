// Kernel 2 of convops::conv2d_group_norm_scale_max_pool_clamp: a row of CTAs per (image, group), each CTA merging the
// group's per-tile moments (Chan), then turning its share of each channel's pooled windows (the plane split over
// gridDim.y) into the output clamp((a v + b) * s, lo, hi), GroupNorm's affine in ATen's form (a = rstd * gamma,
// b = -a * mean + beta), v = sign_c * decoded max of sign_c * conv. The kernel is bound by the latency of its loads
// (a few MB on the sweep's blocks): the channels' parameters are read into shared memory while the moments merge,
// and the windows go kUnroll at a time, every code loaded before any output is written (a channel at a time, each
// window waiting for its parameters and then its code, took 7.9 us on an 8-image block; H200, 2026-11-28).
#pragma once

#include "cuda/conv2d_group_norm_common.cuh"

namespace convops {
namespace cuda {
namespace gn_pool {

// This thread's merge of group grp of image n's partials slots (every channel tile holding part of the group, every
// band), slots first, first + step, ...
__device__ __forceinline__ Moments group_partials(const ConvPoolParams& p, int n, int grp, int first, int step) {
  const int cpg = p.channels_per_group;
  const int tile_lo = grp * cpg / kTileN, tile_hi = ((grp + 1) * cpg - 1) / kTileN;
  const int slots = (tile_hi - tile_lo + 1) * p.spatial_tiles;  // < channel_tiles * spatial_tiles < 2^30 (fits_int32)
  Moments mom{0.f, 0.f, 0.f};
  for (int i = first; i < slots; i += step) {
    const int ct = tile_lo + i / p.spatial_tiles, st = i % p.spatial_tiles;
    const int lg = grp - ct * kTileN / cpg;
    // Past L1 (ld.global.cg): the direct kernel's one pass reads slots that other CTAs wrote in the same launch.
    const float4 part =
        __ldcg(&p.partials[((static_cast<int64_t>(n) * p.channel_tiles + ct) * p.spatial_tiles + st) * p.local_groups +
                           lg]);
    mom.merge(part.x, part.y, part.z);
  }
  return mom;
}

// A group's (mean, rstd) from its moments. A rounding-negative variance becomes 0; a NaN one (Inf or NaN among the
// conv outputs) must stay NaN, as in ATen, which fmaxf would turn into 0.
__device__ __forceinline__ float2 mean_rstd(const Moments& total, float eps) {
  const float var = total.m2 / total.count;
  return make_float2(total.mean, rsqrtf((var < 0.f ? 0.f : var) + eps));
}

// The output of a window whose extremum is `code` (channel parameters gamma, beta, s; its group's mean and rstd):
// clamp((a v + b) * s, lo, hi).
__device__ __forceinline__ float pooled_output(const ConvPoolParams& p, uint32_t code, float mean, float rstd,
                                               float gamma, float beta, float s) {
  const float a = rstd * gamma, b = -a * mean + beta;
  const float sign = affine_sign(gamma, s);
  float z;
  if (sign != 0.f) {
    // (v - mean) * a + beta is a v + b, with the same NaN / +-Inf for finite a, without cancelling a v against a
    // mean (|a mean| 2^-24 in fp32, ~1e-5 |gamma s| for a mean 500x the spread).
    const float v = sign * decode_ordered(code);
    z = ((v - mean) * a + beta) * s;
  } else {
    // Infinite gamma: a window is b * s where all its elements have the sign of a * b, NaN otherwise.
    const uint32_t spoilers = a * b > 0.f ? kNotPositive : kNotNegative;
    z = (code & spoilers) ? __uint_as_float(0x7fffffffu) : b * s;
  }
  if (p.has_lo) z = z < p.lo ? p.lo : z;
  if (p.has_hi) z = z > p.hi ? p.hi : z;
  return z;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) finalize_kernel(const ConvPoolParams p) {
  constexpr int kUnroll = 4;
  __shared__ float s_count[kThreads / 32], s_mean[kThreads / 32], s_m2[kThreads / 32];  // a warp's
  __shared__ float s_gamma[kThreads], s_beta[kThreads], s_scale[kThreads];  // of a chunk of the group's channels
  __shared__ float s_stats[2];
  const int tid = threadIdx.x;
  const int64_t item = blockIdx.x;
  const int n = static_cast<int>(item / p.num_groups), grp = static_cast<int>(item % p.num_groups);
  const int cpg = p.channels_per_group, c_begin = grp * cpg;

  // The parameters of channels c_begin + chunk ... + kThreads - 1 (those of the group).
  const auto load_parameters = [&](int chunk) {
    const int c = c_begin + chunk + tid;
    if (chunk + tid < cpg) {
      s_gamma[tid] = norm_weight<T>(p, c);
      s_beta[tid] = norm_bias<T>(p, c);
      s_scale[tid] = channel_scale<T>(p, c);
    }
  };
  load_parameters(0);

  Moments mom = group_partials(p, n, grp, tid, kThreads);
  // The CTA's merge: each warp's by shuffles, then the warps' by warp 0 (two barriers; a shared-memory tree took
  // nine, and barrier stalls were 1.7 of the 9.2 cycles between a warp's instructions; ncu, H200, 2026-11-28).
  constexpr int kWarps = kThreads / 32;
  const int warp = tid / 32, lane = tid % 32;
  mom = merge_warp(mom);
  if (lane == 0) s_count[warp] = mom.count, s_mean[warp] = mom.mean, s_m2[warp] = mom.m2;
  __syncthreads();
  if (warp == 0) {
    const Moments total =
        merge_warp(lane < kWarps ? Moments{s_count[lane], s_mean[lane], s_m2[lane]} : Moments{0.f, 0.f, 0.f});
    if (lane == 0) {
      const float2 stats = mean_rstd(total, p.eps);
      s_stats[0] = stats.x;
      s_stats[1] = stats.y;
    }
  }
  __syncthreads();
  const float mean = s_stats[0], rstd = s_stats[1];

  // The thread's windows: of each channel of a chunk in turn, plane positions first, first + step, ... A walk, not a
  // division of a running index a window: the seed has 7.9 M windows, and with the division its bf16 op measured
  // 3-6% slower than before this loop (0.262 against 0.248-0.255 ms, H200, 2026-11-28).
  const int plane = p.pooled_h * p.pooled_w;
  const int first = tid + static_cast<int>(blockIdx.y) * kThreads, step = kThreads * static_cast<int>(gridDim.y);
  T* out = static_cast<T*>(p.output);
  for (int chunk = 0; chunk < cpg; chunk += kThreads) {
    if (chunk > 0) {
      __syncthreads();  // the last chunk's parameters are read
      load_parameters(chunk);
      __syncthreads();
    }
    const int channels = min(kThreads, cpg - chunk);
    int local = first < plane ? 0 : channels, at = first;  // the walk: channel `local` of the chunk, position `at`
    while (local < channels) {
      int lc[kUnroll], row[kUnroll], col[kUnroll];
      uint32_t code[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        lc[u] = local;
        if (local < channels) {
          col[u] = p.pooled_w_div.divmod(at, row[u]);
          const int64_t c = c_begin + chunk + local;
          code[u] = p.extremum[(n * int64_t{p.out_channels} + c) * p.pooled_h * p.ext_w + row[u] * p.ext_w + col[u]];
          at += step;
          if (at >= plane) at = first, ++local;
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (lc[u] >= channels) break;
        const float z = pooled_output(p, code[u], mean, rstd, s_gamma[lc[u]], s_beta[lc[u]], s_scale[lc[u]]);
        const int64_t c = c_begin + chunk + lc[u];
        out[n * p.out_stride[0] + c * p.out_stride[1] + row[u] * p.out_stride[2] + col[u] * p.out_stride[3]] =
            static_cast<T>(z);
      }
    }
  }
}

}  // namespace gn_pool
}  // namespace cuda
}  // namespace convops
