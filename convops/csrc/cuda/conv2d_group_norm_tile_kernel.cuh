// Kernel 1 of convops::conv2d_group_norm_scale_max_pool_clamp: a CTA computes 128-pixel x 64-channel tiles of the
// convolution on tensor cores (implicit GEMM from an input patch in shared memory), then, without ever writing the
// tile to global memory, reduces it to
//   - per pooling window: max of sign_c * conv (the only value the pooled output needs, see affine_sign), or for a
//     channel with an infinite GroupNorm weight the signs its conv values take, and
//   - per group in the tile: (count, mean, M2) over ALL its valid pixels, also those the pool drops,
//     computed two-pass from shared memory (exact mean first, then squared deviations).
#pragma once

#include "cuda/conv2d_group_norm_common.cuh"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace gn_pool {

// Operands sit in shared memory as fp32: 3xTF32 splits them at fragment load, and half-precision values are exact
// in fp32.
template <MmaMode kMode>
struct MmaTraits {
  static constexpr int kStep = kMode == MmaMode::kTf32x3 ? 8 : 16;
};

// One k-step of the warp's 32 x 32 tile: acc[mi][ni] += A(pixels, k0..) * B(k0.., channels).
// A element (pixel m, k) is patch[pixel_offset(m) + koff[k]]: the im2col matrix is never materialized.
template <MmaMode kMode>
__device__ __forceinline__ void mma_k_step(float (&acc)[2][4][4], const float* patch, const int* koff,
                                           const float* wts, int weight_ld, const int (&poff)[2][2], int n_base,
                                           int k0, int g, int t) {
  if constexpr (kMode == MmaMode::kTf32x3) {
    const int ka = koff[k0 + t], kb = koff[k0 + t + 4];
    float a[2][4], b[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      a[mi][0] = patch[poff[mi][0] + ka];
      a[mi][1] = patch[poff[mi][1] + ka];
      a[mi][2] = patch[poff[mi][0] + kb];
      a[mi][3] = patch[poff[mi][1] + kb];
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const float* w = wts + (n_base + ni * 8 + g) * weight_ld + k0 + t;
      b[ni][0] = w[0];
      b[ni][1] = w[4];
    }
    // x = hi + lo with both TF32; x*y ~ hi*hi + hi*lo + lo*hi (the lo*lo term is below fp32 rounding).
    uint32_t ah[2][4], al[2][4], bh[4][2], bl[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int r = 0; r < 4; ++r) split_tf32(a[mi][r], ah[mi][r], al[mi][r]);
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 2; ++r) split_tf32(b[ni][r], bh[ni][r], bl[ni][r]);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        mma_m16n8k8_tf32(acc[mi][ni], al[mi], bh[ni]);
        mma_m16n8k8_tf32(acc[mi][ni], ah[mi], bl[ni]);
        mma_m16n8k8_tf32(acc[mi][ni], ah[mi], bh[ni]);
      }
  } else {
    const int k_lo = k0 + 2 * t, k_hi = k_lo + 8;
    const int ka0 = koff[k_lo], ka1 = koff[k_lo + 1], kb0 = koff[k_hi], kb1 = koff[k_hi + 1];
    uint32_t a[2][4], b[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      a[mi][0] = pack_half2<kMode>(patch[poff[mi][0] + ka0], patch[poff[mi][0] + ka1]);
      a[mi][1] = pack_half2<kMode>(patch[poff[mi][1] + ka0], patch[poff[mi][1] + ka1]);
      a[mi][2] = pack_half2<kMode>(patch[poff[mi][0] + kb0], patch[poff[mi][0] + kb1]);
      a[mi][3] = pack_half2<kMode>(patch[poff[mi][1] + kb0], patch[poff[mi][1] + kb1]);
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const float* w = wts + (n_base + ni * 8 + g) * weight_ld;
      const float2 lo = *reinterpret_cast<const float2*>(w + k_lo);
      const float2 hi = *reinterpret_cast<const float2*>(w + k_hi);
      b[ni][0] = pack_half2<kMode>(lo.x, lo.y);
      b[ni][1] = pack_half2<kMode>(hi.x, hi.y);
    }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        if constexpr (kMode == MmaMode::kBf16) {
          mma_m16n8k16_bf16(acc[mi][ni], a[mi], b[ni]);
        } else {
          mma_m16n8k16_f16(acc[mi][ni], a[mi], b[ni]);
        }
      }
  }
}

// Global -> shared copy of one main-loop chunk of the input patch (channels c0.., rows ih0.., cols iw0.., zero
// outside the image), over the flat index of its elements: NCHW-like inputs with the column varying fastest (lanes
// along input rows, coalesced, and no lane idles on a row's last few columns), channels_last inputs with the
// channel fastest, which is their contiguous order. Eight loads are issued before any store (the stores to shared
// memory would otherwise order every load after the previous store).
template <typename T, bool kChannelsFastest>
__device__ __forceinline__ void load_patch(const ConvPoolParams& p, float* patch, int64_t in_base, int c0, int ih0,
                                           int iw0, int tid) {
  const int plane = p.patch_h * p.patch_w, size = p.chunk_channels * plane;
  constexpr int kBatch = 8;
  for (int base = tid; base < size; base += kBatch * kThreads) {
    float v[kBatch];
    int dst[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kThreads;
      int ci, r, c;
      if constexpr (kChannelsFastest) {
        int rc;
        ci = p.chunk_channels_div.divmod(i, rc);
        c = p.patch_w_div.divmod(rc, r);
        dst[j] = ci * plane + rc;
      } else {
        int rest;
        c = p.patch_w_div.divmod(i, rest);
        r = p.patch_h_div.divmod(rest, ci);
        dst[j] = i;
      }
      const int ih = ih0 + r, iw = iw0 + c, cg = c0 + ci;
      v[j] = 0.f;
      if (i < size && cg < p.in_channels && ih >= 0 && ih < p.in_h && iw >= 0 && iw < p.in_w) {
        v[j] = load_float<T>(p.input, in_base + cg * p.in_stride[1] + ih * p.in_stride[2] + iw * p.in_stride[3]);
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (base + j * kThreads < size) patch[dst[j]] = v[j];
  }
}

// Weights of output channels co0.. and input channels c0.. as the [channel][k] B operand.
template <typename T>
__device__ __forceinline__ void load_weights(const ConvPoolParams& p, float* wts, int co0, int c0, int tid) {
  for (int i = tid; i < kTileN * p.k_chunk; i += kThreads) {
    int nn, ck, ky;
    const int k = p.k_chunk_div.divmod(i, nn);
    const int r = p.taps_div.divmod(k, ck);
    const int kx = p.kernel_w_div.divmod(r, ky);
    const int co = co0 + nn, cg = c0 + ck;
    float v = 0.f;
    if (co < p.out_channels && cg < p.in_channels) {
      v = load_float<T>(p.weight, co * p.w_stride[0] + cg * p.w_stride[1] + ky * p.w_stride[2] + kx * p.w_stride[3]);
    }
    wts[nn * p.weight_ld + k] = v;
  }
}

// Persistent: CTA (x, y) handles channel tile y of the (image, spatial tile) items x, x + gridDim.x, ... When the
// input channels fit one chunk, the weights are loaded once per CTA and stay in shared memory.
template <typename T, MmaMode kMode>
__global__ void __launch_bounds__(kThreads, 3) conv_pool_stats_kernel(const ConvPoolParams p) {
  extern __shared__ __align__(16) float smem[];
  float* wts = smem;
  int* koff = reinterpret_cast<int*>(smem + p.smem_koff);
  float* patch = smem + p.smem_patch;
  float* tile = patch;  // the epilogue's [channel][pixel] tile reuses the patch buffer
  float* s_sign = smem + p.smem_small;
  float* s_bias = s_sign + kTileN;
  float* s_mean = s_bias + kTileN;
  float* s_m2 = s_mean + kTileN;
  float* s_warp_mean = s_m2 + kTileN;                         // [kPixelWarps][kTileN]
  float* s_warp_m2 = s_warp_mean + kPixelWarps * kTileN;      // [kPixelWarps][kTileN]
  float* s_warp_count = s_warp_m2 + kPixelWarps * kTileN;     // [kPixelWarps]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int channel_tile = blockIdx.y, co0 = channel_tile * kTileN;
  const int channels = min(kTileN, p.out_channels - co0);
  const int patch_plane = p.patch_h * p.patch_w, patch_size = p.chunk_channels * patch_plane;
  const int taps = p.kernel_h * p.kernel_w;
  const bool single_chunk = p.chunk_channels >= p.in_channels;

  // Setup: the k -> patch offset table, per-channel sign and conv bias, and zeros in the weight rows' k padding.
  // Padding k (K rounded up to the MMA step) point at a plane of zeros after the patch: an A element is
  // patch[pixel offset + koff[k]] with pixel offsets anywhere in [0, patch_plane), so one zero slot would not do,
  // and 0 * (stale shared memory, possibly NaN) would poison the accumulators.
  for (int k = tid; k < p.k_chunk_padded; k += kThreads) {
    int off = patch_size;
    if (k < p.k_chunk) {
      const int ci = k / taps, r = k % taps;
      off = ci * patch_plane + (r / p.kernel_w) * p.dilation_h * p.patch_w + (r % p.kernel_w) * p.dilation_w;
    }
    koff[k] = off;
  }
  for (int i = tid; i < kTileN; i += kThreads) {
    const int co = co0 + i;
    s_sign[i] = co < p.out_channels ? affine_sign<T>(p, co) : 1.f;
    s_bias[i] = co < p.out_channels ? conv_bias<T>(p, co) : 0.f;
  }
  const int k_pad = p.k_chunk_padded - p.k_chunk;
  for (int i = tid; i < kTileN * k_pad; i += kThreads) wts[(i / k_pad) * p.weight_ld + p.k_chunk + i % k_pad] = 0.f;
  if (single_chunk) load_weights<T>(p, wts, co0, 0, tid);

  // This thread's four A-fragment rows (pixels): their offsets into the patch.
  const int warp_m = warp % (kTileM / kWarpM), warp_n = warp / (kTileM / kWarpM);
  const int tile_pixels = p.tile_h * p.tile_w;
  int poff[2][2];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = warp_m * kWarpM + mi * 16 + h * 8 + g;
      poff[mi][h] = m < tile_pixels ? (m / p.tile_w) * p.stride_h * p.patch_w + (m % p.tile_w) * p.stride_w : 0;
    }

  const int items = p.batch * p.spatial_tiles;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int n = item / p.spatial_tiles, spatial_tile = item % p.spatial_tiles;
    const int oh0 = (spatial_tile / p.tiles_w) * p.tile_h, ow0 = (spatial_tile % p.tiles_w) * p.tile_w;
    const int ih0 = oh0 * p.stride_h - p.pad_h, iw0 = ow0 * p.stride_w - p.pad_w;
    const int64_t in_base = static_cast<int64_t>(n) * p.in_stride[0];

    float acc[2][4][4] = {};
    for (int c0 = 0; c0 < p.in_channels; c0 += p.chunk_channels) {
      __syncthreads();  // the previous chunk's MMAs (or the previous item's epilogue) are done with the buffers
      if (p.channels_fastest) {
        load_patch<T, true>(p, patch, in_base, c0, ih0, iw0, tid);
      } else {
        load_patch<T, false>(p, patch, in_base, c0, ih0, iw0, tid);
      }
      if (p.k_chunk_padded > p.k_chunk) {  // the zero plane (the epilogue tile overwrote it)
        for (int i = tid; i < patch_plane; i += kThreads) patch[patch_size + i] = 0.f;
      }
      if (!single_chunk) load_weights<T>(p, wts, co0, c0, tid);
      __syncthreads();
#pragma unroll 2
      for (int k0 = 0; k0 < p.k_chunk_padded; k0 += MmaTraits<kMode>::kStep) {
        mma_k_step<kMode>(acc, patch, koff, wts, p.weight_ld, poff, warp_n * kWarpN, k0, g, t);
      }
    }
    __syncthreads();  // all warps are done reading the patch before the tile overwrites it

    const int rows = min(p.tile_h, p.conv_h - oh0), cols = min(p.tile_w, p.conv_w - ow0);
    const int pixels = rows * cols;

    // Conv bias into the accumulators. Fragment: d[0]=(g,2t) d[1]=(g,2t+1) d[2]=(g+8,2t) d[3]=(g+8,2t+1).
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const float b = s_bias[warp_n * kWarpN + ni * 8 + 2 * t + q];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          acc[mi][ni][q] += b;
          acc[mi][ni][q + 2] += b;
        }
      }

    // Per-channel moments of this warp's 32 pixels, from the registers: which of this thread's four pixels lie in
    // the conv output (edge tiles hold some that do not), then two passes (the exact mean first, so a mean far
    // larger than the spread costs no precision), each reduced over the 8 lanes (g) that share a channel. The
    // tile's four pixel warps are merged below (Chan).
    bool inside[2][2];
    int warp_pixels = 0;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = warp_m * kWarpM + mi * 16 + h * 8 + g;
        int r;
        const int c = p.tile_w_div.divmod(m, r);
        inside[mi][h] = m < tile_pixels && r < rows && c < cols;
        warp_pixels += __popc(__ballot_sync(0xffffffffu, inside[mi][h]));
      }
    warp_pixels /= 4;  // each pixel sits in the four lanes t = 0..3
    // One division a tile; the mean's last-bit rounding does not reach the M2 of deviations from it.
    const float inv_pixels = warp_pixels > 0 ? 1.f / static_cast<float>(warp_pixels) : 0.f;
    const auto reduce_over_g = [](float v) {
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      return v + __shfl_xor_sync(0xffffffffu, v, 16);
    };
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        float sum = 0.f;
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) sum += inside[mi][h] ? acc[mi][ni][2 * h + q] : 0.f;
        const float mean = reduce_over_g(sum) * inv_pixels;
        float m2 = 0.f;
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float d = acc[mi][ni][2 * h + q] - mean;
            m2 += inside[mi][h] ? d * d : 0.f;
          }
        m2 = reduce_over_g(m2);
        if (g == 0) {
          const int ch = warp_n * kWarpN + ni * 8 + 2 * t + q;
          s_warp_mean[warp_m * kTileN + ch] = mean;
          s_warp_m2[warp_m * kTileN + ch] = m2;
        }
      }
    if (lane == 0 && warp_n == 0) s_warp_count[warp_m] = static_cast<float>(warp_pixels);

    // Accumulators to the [channel][pixel] tile, for the pooling.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int m = warp_m * kWarpM + mi * 16 + g + (r >> 1) * 8;
          const int ch = warp_n * kWarpN + ni * 8 + 2 * t + (r & 1);
          tile[ch * kEpilogueLd + m] = acc[mi][ni][r];
        }
    __syncthreads();

    // The tile's moments per channel: its pixel warps' merged (read by the group step after the next barrier).
    for (int ch = tid; ch < channels; ch += kThreads) {
      Moments mom{0.f, 0.f, 0.f};
#pragma unroll
      for (int w = 0; w < kPixelWarps; ++w) {
        mom.merge(s_warp_count[w], s_warp_mean[w * kTileN + ch], s_warp_m2[w * kTileN + ch]);
      }
      s_mean[ch] = mom.mean;
      s_m2[ch] = mom.m2;
    }

    // Pool windows (or, when windows straddle tiles, window pieces) that intersect this tile.
    const int pr0 = oh0 / p.pool_h, pr1 = min((oh0 + rows - 1) / p.pool_h, p.pooled_h - 1);
    const int pc0 = ow0 / p.pool_w, pc1 = min((ow0 + cols - 1) / p.pool_w, p.pooled_w - 1);
    if (pr0 <= pr1 && pc0 <= pc1) {
      // Items (channel, window) over the largest window grid a tile can meet; edge tiles skip what they lack.
      const int windows = static_cast<int>(p.tile_windows_div.divisor);
      for (int i = tid; i < channels * windows; i += kThreads) {
        int ch, wr;
        const int wc = p.tile_windows_w_div.divmod(p.tile_windows_div.divmod(i, ch), wr);
        const int pr = pr0 + wr, pc = pc0 + wc;
        if (pr > pr1 || pc > pc1) continue;
        const int r_lo = max(pr * p.pool_h, oh0) - oh0, r_hi = min((pr + 1) * p.pool_h, oh0 + rows) - oh0;
        const int c_lo = max(pc * p.pool_w, ow0) - ow0, c_hi = min((pc + 1) * p.pool_w, ow0 + cols) - ow0;
        const float sign = s_sign[ch];
        const float* plane = tile + ch * kEpilogueLd;
        uint32_t code = 0;
        if (sign != 0.f) {
          // max of sign * x is max x or -(min x); a NaN anywhere in the window wins, as in max_pool2d. Three
          // instructions an element (min, max, NaN test) where the sign-multiply-compare-select took five.
          float hi = -INFINITY, lo = INFINITY;
          bool nan = false;
          for (int r = r_lo; r < r_hi; ++r)
            for (int c = c_lo; c < c_hi; ++c) {
              const float v = plane[r * p.tile_w + c];
              hi = fmaxf(hi, v);
              lo = fminf(lo, v);
              nan |= v != v;
            }
          code = nan ? encode_ordered(NAN) : encode_ordered(sign > 0.f ? hi : -lo);
        } else {  // infinite gamma (see affine_sign)
          for (int r = r_lo; r < r_hi; ++r)
            for (int c = c_lo; c < c_hi; ++c) code |= sign_classes(plane[r * p.tile_w + c]);
        }
        const int64_t out =
            ((static_cast<int64_t>(n) * p.out_channels + co0 + ch) * p.pooled_h + pr) * p.ext_w + pc;
        if (!p.atomic_pool) {
          p.extremum[out] = code;
        } else if (sign != 0.f) {
          atomicMax(p.extremum + out, code);
        } else {
          atomicOr(p.extremum + out, code);
        }
      }
    }
    __syncthreads();

    // Group moments of this tile: channels of one group have equal counts, so the merge is exact in closed form.
    const int group_first = co0 / p.channels_per_group;
    const int group_count = (co0 + channels - 1) / p.channels_per_group - group_first + 1;
    for (int lg = tid; lg < group_count; lg += kThreads) {
      const int grp = group_first + lg;
      const int ch_lo = max(co0, grp * p.channels_per_group) - co0;
      const int ch_hi = min(co0 + channels, (grp + 1) * p.channels_per_group) - co0;
      const float k = static_cast<float>(ch_hi - ch_lo);
      float mean = 0.f;
      for (int ch = ch_lo; ch < ch_hi; ++ch) mean += s_mean[ch];
      mean /= k;
      float m2 = 0.f, spread = 0.f;
      for (int ch = ch_lo; ch < ch_hi; ++ch) {
        const float d = s_mean[ch] - mean;
        m2 += s_m2[ch];
        spread += d * d;
      }
      m2 += static_cast<float>(pixels) * spread;
      const int64_t slot =
          ((static_cast<int64_t>(n) * p.channel_tiles + channel_tile) * p.spatial_tiles + spatial_tile) *
              p.local_groups + lg;
      p.partials[slot] = make_float4(static_cast<float>(pixels) * k, mean, m2, 0.f);
    }
  }
}

}  // namespace gn_pool
}  // namespace cuda
}  // namespace convops
