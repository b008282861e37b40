// Kernel 1 of convops::conv2d_group_norm_scale_max_pool_clamp for its common shape (stride 1, dilation 1, 3x3
// filters (the code takes any KH x KW; only 3x3 is instantiated), 2x2 or 4x4 pools, few input channels): the "window"
// kernel. It produces what the general tile kernel (conv2d_group_norm_tile_kernel.cuh) produces, the pooled extrema
// and group moments that finalize_kernel turns into the output (here one set of moments per image a CTA's item range
// meets, at its last item there, where the tile kernel writes one a tile), with the work per output a fraction of the
// tile kernel's:
//   - pixels in pool-window order: each MMA block of 16 rows is a 4 x 4 square of the conv output (one 4 x 4 window,
//     or four 2 x 2 windows) laid out so that a window's pixels sit in one thread's two fragment rows and in lanes a
//     power of two apart. A window's max is then one register max and a shuffle butterfly (pool_windows), where the
//     tile kernel wrote the whole tile to shared memory and read it back window by window;
//   - the channel sign folded into the weights and the conv bias (y = sign_c * conv, exact), so pooling is a max
//     only; the moments of conv are those of y with the mean's sign flipped back;
//   - the group moments as each thread's running (count, mean, M2) per channel over the CTA's tiles of an image (a
//     tile's eight values a channel merged in by Chan's formula), reduced across the CTA once per image instead of
//     once per tile;
//   - the input patch in shared memory in HWC order, 8 channels a pixel, so that a fragment register is one aligned
//     load (two channels of one pixel), and the weights rounded / split once per CTA.
#pragma once

#include "cuda/conv2d_group_norm_common.cuh"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace gn_pool {
namespace window {

constexpr int kTile = 16;                // a CTA tile: 16 x 16 conv output pixels
constexpr int kChannelWarps = 2;         // warp_n: couts 32 warp_n ... + 31 of the 64-channel tile
constexpr int kWarpCouts = kTileN / kChannelWarps;  // 32: four n8 blocks
constexpr int kChunk = 8;                // input channels a patch pixel record holds
constexpr int kRunFloats = 16;           // a thread's running moments in shared memory: 8 channels x (mean, M2)

// How a CTA's warps split a tile, per MMA mode: warp (warp_m, warp_n) has kBlocks m16 blocks side by side, 4 rows x
// 4 kBlocks columns of the tile, times 32 couts (16 kBlocks accumulators a thread). Measured on the seed (H200,
// 2026-11-27, before the last instruction cuts; bench/PERF_NOTES.md):
//   16-bit: 8 warps of 4 blocks, two CTAs an SM (0.289 ms in bf16; one CTA of 16 warps of 2 blocks, without the
//     first's few spills: 0.324, as one CTA's patch loads no longer overlap the other's MMAs);
//   3xTF32: 16 warps of 2 blocks, one CTA an SM (0.511 ms; 8 warps of 4 blocks spilled ~100 bytes a thread at the
//     128-register cap: 0.520).
template <MmaMode kMode>
struct Warps {
  static constexpr int kBlocks = kMode != MmaMode::kTf32x3 ? 4 : 2;
  static constexpr int kPixelWarps = kTile * kTile / (16 * kBlocks);
  static constexpr int kAcross = 4 / kBlocks;  // warps side by side in a band of 4 tile rows
  static constexpr int kThreads = kPixelWarps * kChannelWarps * 32;
  static constexpr int kCtasPerSm = kBlocks == 4 ? 2 : 1;  // 128 registers a thread either way
  static_assert(kAcross * kBlocks == 4 && kPixelWarps * kBlocks * 16 == kTile * kTile, "the tile's pixels");
};

// The operands of each MMA mode: the patch and the weights in shared memory.
//   bf16 / fp16: a pixel record is 8 16-bit channels (16 bytes); a k16 step covers two taps of a channel chunk, so
//     taps are padded to an even count (the pad tap's weights are zero and its A registers are set to zero).
//   3xTF32: a pixel record is 8 fp32 channels stored in the order 0 4 1 5 2 6 3 7, so that the fragment's channels
//     t and t + 4 are one 8-byte load; the weights are split into TF32 high and low parts once, in the same order.
template <MmaMode kMode>
struct Operands {
  static constexpr bool kHalf = kMode != MmaMode::kTf32x3;
  static constexpr int kRecordBytes = kHalf ? 16 : 32;
  static constexpr int kTapsPerStep = kHalf ? 2 : 1;
};

// Patch geometry for a KH x KW filter: (16 + KH - 1) rows of (16 + KW - 1) pixels, the row pitch padded so that a
// warp's 4-byte fragment loads of 16-byte records fall in distinct banks: its two halves read rows 1 (4 x 4 windows)
// or 2 (2 x 2) apart, which a pitch of 4 mod 8 or 2 mod 4 pixels puts 64 bytes apart modulo 128. (fp32 records are
// read 8 bytes at a time, a half-warp 4 whole records of one row: any pitch.)
template <MmaMode kMode, int KH, int KW, int kPool>
struct Patch {
  static constexpr int kRows = kTile + KH - 1;
  static constexpr int kCols = kTile + KW - 1;
  static constexpr int kPitch = !Operands<kMode>::kHalf ? kCols
                                : kPool == 4            ? kCols + (12 - kCols % 8) % 8
                                                        : kCols + (6 - kCols % 4) % 4;
  static constexpr int kPixels = kRows * kPitch;  // of one channel chunk
  static constexpr int kTaps = KH * KW;
  static constexpr int kStepTaps = (kTaps + Operands<kMode>::kTapsPerStep - 1) / Operands<kMode>::kTapsPerStep *
                                   Operands<kMode>::kTapsPerStep;  // taps a chunk spans in K (16-bit: even)
  static constexpr int kChunkK = kStepTaps * kChunk;               // K of one channel chunk
  // 16-bit with an odd tap count: the pad tap of chunk 0 carries the conv bias (A = 1 in its channel 0, B = the
  // bias), so the accumulators start at zero instead of 64 moves a tile; a 16-bit bias times 1 is exact in fp32.
  static constexpr bool kBiasInPadTap = Operands<kMode>::kHalf && kTaps % 2 == 1;
};

// Layout of the dynamic shared memory, in bytes (host and device agree).
template <MmaMode kMode, int KH, int KW, int kPool>
struct Layout {
  using P = Patch<kMode, KH, KW, kPool>;
  int chunks;        // channel chunks of the input (in_channels rounded up to 8)
  int weight_pitch;  // 32-bit words between two couts' weight rows
  int weights, patch, bias, sign, flush, run, total;
  __host__ __device__ explicit Layout(int in_channels) {
    chunks = (in_channels + kChunk - 1) / kChunk;
    const int k = chunks * P::kChunkK;
    if constexpr (Operands<kMode>::kHalf) {
      weight_pitch = k / 2 + 4;  // k / 2 is a multiple of 8: rows 4 mod 8 words apart, b-fragment loads conflict-free
    } else {
      weight_pitch = k + ((8 - k % 32) + 32) % 32;  // 8 mod 32: the 8-byte loads of a half-warp conflict-free
    }
    const int weight_words = kTileN * weight_pitch * (Operands<kMode>::kHalf ? 1 : 2);  // 3xTF32: high, then low
    weights = 0;
    patch = weights + weight_words * 4;
    bias = patch + chunks * P::kPixels * Operands<kMode>::kRecordBytes;
    sign = bias + kTileN * 4;
    flush = sign + kTileN * 4;
    run = flush + 3 * Warps<kMode>::kPixelWarps * kTileN * 4;
    total = run + kRunFloats * Warps<kMode>::kThreads * 4;
  }
};

// The pixel of fragment row (h, g) of an m16 block, a 4 x 4 square: column g % 4, and row 2 h + g / 4 for a 4 x 4
// window (all 16 rows one window: reduced over h in the thread and over g in lanes 4, 8, 16 apart) or 2 (g / 4) + h
// for 2 x 2 windows (window (g / 4, g / 2 % 2): reduced over h and over g % 2, lanes 4 apart).
template <int kPool>
__device__ __forceinline__ int block_row(int h, int g) {
  return kPool == 4 ? 2 * h + g / 4 : 2 * (g / 4) + h;
}

// One exchange step of the butterfly: of the value pairs (v[j], v[j + half]), the lane whose `bit` is set keeps the
// upper one and the other lane the lower one, each taking the max with its partner's: after the step a lane holds
// `half` values, of indices (bit set ? half : 0) + j.
template <int kHalfCount>
__device__ __forceinline__ void exchange_max(float* v, int lane, int bit) {
  const bool upper = lane & bit;
#pragma unroll
  for (int j = 0; j < kHalfCount; ++j) {
    const float send = upper ? v[j] : v[j + kHalfCount];
    const float keep = upper ? v[j + kHalfCount] : v[j];
    v[j] = max_nan(keep, __shfl_xor_sync(0xffffffffu, send, bit));
  }
}

// The window maxima of one m16 block, from its accumulators acc[ni][r] (n8 block ni, fragment register r: row
// h = r / 2, channel 8 ni + 2 t + r % 2 of the warp's 32), negated first where `negate`. Value index i = 2 ni + q
// (q = channel parity) after the in-thread max over h. Returns the count of values left in v:
//   4 x 4: one, the window's max of value index g (channel 8 (g / 2) + 2 t + g % 2);
//   2 x 2: four, value indices 4 (g % 2) + j of window (g / 4, g / 2 % 2).
template <int kPool>
__device__ __forceinline__ void pool_block(float (&v)[8], const float (&acc)[4][4], bool negate, int lane) {
#pragma unroll
  for (int ni = 0; ni < 4; ++ni)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const float a = acc[ni][q], b = acc[ni][q + 2];
      v[2 * ni + q] = negate ? max_nan(-a, -b) : max_nan(a, b);
    }
  exchange_max<4>(v, lane, 4 * (kPool == 4 ? 4 : 1));  // 4 x 4: g bit 2 (lane 16); 2 x 2: g bit 0 (lane 4)
  if constexpr (kPool == 4) {
    exchange_max<2>(v, lane, 8);
    exchange_max<1>(v, lane, 4);
  }
}

// The channel (of the warp's 32) of value index i.
__device__ __forceinline__ int value_channel(int i, int t) {
  return 8 * (i / 2) + 2 * t + i % 2;
}

// What the extremum buffer holds for a window of channel value `y` (max of sign * conv; for sign-0 channels max of
// conv) and `neg` (max of -conv, read for sign-0 channels only): see affine_sign and sign_classes.
__device__ __forceinline__ uint32_t window_code(float y, float neg, bool sign0) {
  if (!sign0) return encode_ordered(y);
  // Some element <= 0 or NaN <=> max(-x) >= 0 or NaN; some element >= 0 or NaN <=> max(x) >= 0 or NaN.
  return (!(neg < 0.f) ? kNotPositive : 0u) | (!(y < 0.f) ? kNotNegative : 0u);
}

// A thread's running moments of its channels (n8 block ni, parity q) over the tiles of one image: the count of
// pixels it has seen (the same for all its channels) in a register, the mean and M2 of y per channel in shared
// memory (column tid of rows 2 (2 ni + q) and 2 (2 ni + q) + 1: conflict-free), where they cost no registers across
// the main loop (the 3xTF32 loop spilled with them in registers).
template <int kThreads>
struct RunningMoments {
  float count;
  float* column;  // s_run + tid
  __device__ __forceinline__ float& mean(int ni, int q) const { return column[(4 * ni + 2 * q) * kThreads]; }
  __device__ __forceinline__ float& m2(int ni, int q) const { return column[(4 * ni + 2 * q + 1) * kThreads]; }
};

// Merges the tile's values of the thread (acc[mb][ni][q + 2 h], where valid[mb][h]) into the running moments: per
// channel the tile's exact mean and M2 of deviations from it, then Chan's merge.
template <bool kEdge, int kBlocks, typename Run>
__device__ __forceinline__ void add_tile_moments(Run& run, const float (&acc)[kBlocks][4][4],
                                                 const bool (&valid)[kBlocks][2]) {
  float n = 2.f * kBlocks;
  if constexpr (kEdge) {
    n = 0.f;
#pragma unroll
    for (int mb = 0; mb < kBlocks; ++mb) n += (valid[mb][0] ? 1.f : 0.f) + (valid[mb][1] ? 1.f : 0.f);
    if (n == 0.f) return;
  }
  // Reciprocals rather than IEEE divisions, whose slow-path call made ptxas keep a stack frame and spill around it
  // on every tile (ncu: 2.3 M local-memory requests on the bf16 seed); a last-bit error in a weight of the mean
  // merge is far below what the fp32 sums carry anyway.
  const float inv_n = kEdge ? __frcp_rn(n) : 1.f / (2.f * kBlocks);
  const float total = run.count + n;
  const float w = n * __frcp_rn(total);  // the tile's weight in the merged mean
  const float cross = run.count * w;  // n_a n_b / (n_a + n_b)
  const bool first = run.count == 0.f;
#pragma unroll
  for (int ni = 0; ni < 4; ++ni)
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      float sum = 0.f;
#pragma unroll
      for (int mb = 0; mb < kBlocks; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) sum += (!kEdge || valid[mb][h]) ? acc[mb][ni][q + 2 * h] : 0.f;
      const float mean = sum * inv_n;
      float m2 = 0.f;
#pragma unroll
      for (int mb = 0; mb < kBlocks; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float d = acc[mb][ni][q + 2 * h] - mean;
          m2 += (!kEdge || valid[mb][h]) ? d * d : 0.f;
        }
      // The first tile's moments are taken as they are (the general formula would square a mean of up to ~1e38
      // against whatever the shared memory held): selected, not branched on, so that the loads and the arithmetic
      // of all channels interleave.
      const float run_mean = run.mean(ni, q), run_m2 = run.m2(ni, q);
      const float delta = mean - run_mean;
      run.mean(ni, q) = first ? mean : run_mean + delta * w;
      run.m2(ni, q) = first ? m2 : run_m2 + m2 + delta * delta * cross;
    }
  run.count = total;
}

// Chan's merge of a lane's (count, mean, M2) with the lane `mask` apart.
__device__ __forceinline__ void merge_with_lane(float& count, float& mean, float& m2, int mask) {
  Moments mom{count, mean, m2};
  mom.merge(__shfl_xor_sync(0xffffffffu, count, mask), __shfl_xor_sync(0xffffffffu, mean, mask),
            __shfl_xor_sync(0xffffffffu, m2, mask));
  count = mom.count, mean = mom.mean, m2 = mom.m2;
}

// The patch of one tile: input rows iy0 ... + kRows - 1, columns ix0 ... + kCols - 1 of image n, every channel chunk,
// zero outside the image and past the input's channels, as pixel records (Operands).
template <MmaMode kMode>
__device__ __forceinline__ void store_record(unsigned char* dst, const float (&v)[kChunk]) {
  if constexpr (Operands<kMode>::kHalf) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(pack_half2<kMode>(v[0], v[1]), pack_half2<kMode>(v[2], v[3]),
                                                pack_half2<kMode>(v[4], v[5]), pack_half2<kMode>(v[6], v[7]));
  } else {
    reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[4], v[1], v[5]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(v[2], v[6], v[3], v[7]);
  }
}

template <typename T, MmaMode kMode, int KH, int KW, int kPool>
__device__ __forceinline__ void load_patch(const ConvPoolParams& p, unsigned char* patch, int chunks, int64_t n,
                                           int iy0, int ix0) {
  using P = Patch<kMode, KH, KW, kPool>;
  constexpr int kThreads = Warps<kMode>::kThreads, kGrid = P::kRows * P::kCols;
  const T* input = static_cast<const T*>(p.input);
  const int64_t sc = p.in_stride[1];
  if (chunks == 1) {
    // One chunk (at most 8 channels: the seed's): a thread's pixels are tid + r kThreads of the grid, their channels
    // one pointer step apart; only the tile's origin changes from tile to tile (the general loop below spent ~170
    // instructions a pixel on 64-bit index arithmetic, SASS of the bf16 kernel).
    const T* image = input + n * p.in_stride[0];
    const int channels = min(p.in_channels, kChunk);
#pragma unroll
    for (int r = 0; r < (kGrid + kThreads - 1) / kThreads; ++r) {
      const int pixel = threadIdx.x + r * kThreads;
      if (kGrid % kThreads != 0 && pixel >= kGrid) break;
      const int py = pixel / P::kCols, px = pixel % P::kCols, iy = iy0 + py, ix = ix0 + px;
      const bool inside = iy >= 0 && iy < p.in_h && ix >= 0 && ix < p.in_w;
      const T* src = image + int64_t{iy} * p.in_stride[2] + int64_t{ix} * p.in_stride[3];
      float v[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        v[j] = inside && j < channels ? static_cast<float>(*src) : 0.f;
        src += sc;
      }
      store_record<kMode>(patch + (py * P::kPitch + px) * Operands<kMode>::kRecordBytes, v);
    }
    return;
  }
  const int count = chunks * P::kRows * P::kCols;
  for (int i = threadIdx.x; i < count; i += Warps<kMode>::kThreads) {
    const int chunk = i / (P::kRows * P::kCols), pixel = i % (P::kRows * P::kCols);
    const int py = pixel / P::kCols, px = pixel % P::kCols;
    const int iy = iy0 + py, ix = ix0 + px, c0 = chunk * kChunk;
    const bool inside = iy >= 0 && iy < p.in_h && ix >= 0 && ix < p.in_w;
    const T* src = input + n * p.in_stride[0] + int64_t{iy} * p.in_stride[2] + int64_t{ix} * p.in_stride[3] +
                   c0 * sc;
    float v[kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      v[j] = inside && c0 + j < p.in_channels ? static_cast<float>(src[j * sc]) : 0.f;
    }
    unsigned char* dst =
        patch + (size_t(chunk) * P::kPixels + py * P::kPitch + px) * Operands<kMode>::kRecordBytes;
    store_record<kMode>(dst, v);
  }
}

// The 64-channel tile's weights times the channel folds (sign, +1 for sign 0), as the B operand (Operands), once per
// CTA: one 32-bit word a thread at a time, zeros past the problem's couts and channels, and in the pad tap zeros or
// the folded conv bias (Patch::kBiasInPadTap).
template <typename T, MmaMode kMode, int KH, int KW, int kPool>
__device__ __forceinline__ void load_weights(const ConvPoolParams& p, uint32_t* words, const float* sign,
                                             const Layout<kMode, KH, KW, kPool>& L, int co0) {
  using P = Patch<kMode, KH, KW, kPool>;
  const int k_total = L.chunks * P::kChunkK;
  const auto weight = [&](int nn, int k) {  // B(k, cout co0 + nn)
    const int chunk = k / P::kChunkK, tap = k % P::kChunkK / kChunk, c = chunk * kChunk + k % kChunk;
    const int co = co0 + nn;
    const float fold = sign_fold(sign[nn]);
    if (co >= p.out_channels) return 0.f;
    if (tap >= P::kTaps) {  // the pad tap: zero, or the bias (Patch::kBiasInPadTap)
      return P::kBiasInPadTap && c == 0 ? fold * conv_bias<T>(p, co) : 0.f;
    }
    if (c >= p.in_channels) return 0.f;
    return fold * load_float<T>(p.weight, co * p.w_stride[0] + c * p.w_stride[1] + (tap / KW) * p.w_stride[2] +
                                              (tap % KW) * p.w_stride[3]);
  };
  if constexpr (Operands<kMode>::kHalf) {
    const int pairs = k_total / 2;
    for (int i = threadIdx.x; i < kTileN * pairs; i += Warps<kMode>::kThreads) {
      const int nn = i / pairs, kp = i % pairs;
      words[nn * L.weight_pitch + kp] = pack_half2<kMode>(weight(nn, 2 * kp), weight(nn, 2 * kp + 1));
    }
  } else {
    for (int i = threadIdx.x; i < kTileN * k_total; i += Warps<kMode>::kThreads) {
      const int nn = i / k_total, k = i % k_total;
      // Channels t and t + 4 of a tap side by side (0 4 1 5 2 6 3 7): slot 2 (c % 4) + c / 4 of the tap's 8.
      const int cc = k % kChunk, slot = k - cc + 2 * (cc % 4) + cc / 4;
      uint32_t hi, lo;
      split_tf32(weight(nn, k), hi, lo);
      words[nn * L.weight_pitch + slot] = hi;
      words[(kTileN + nn) * L.weight_pitch + slot] = lo;
    }
  }
}

// One channel chunk's MMAs: acc[mb][ni] += A(block mb's 16 pixels, the chunk's K) B(K, couts of n8 block ni).
// patch_at[h]: the byte offset of the thread's pixel (h, g) of block 0 (tap (0, 0)) in the chunk's patch; b_row: the
// word offset of the thread's weight row (cout 8 ni + g of the warp's 32 is b_row + 8 ni pitch).
template <MmaMode kMode, int KH, int KW, int kPool>
__device__ __forceinline__ void chunk_mma(float (&acc)[Warps<kMode>::kBlocks][4][4], const unsigned char* patch,
                                          const uint32_t* weights, int weight_pitch, int k_base,
                                          const int (&patch_at)[2], int b_row, int t) {
  using P = Patch<kMode, KH, KW, kPool>;
  constexpr int kRecord = Operands<kMode>::kRecordBytes, kBlocks = Warps<kMode>::kBlocks;
  // Byte offset of tap `tap` in block mb (compile-time where the tap loop is unrolled), added to the row's base.
  const auto at = [](int mb, int tap) { return (4 * mb + (tap / KW) * P::kPitch + tap % KW) * kRecord; };
  if constexpr (Operands<kMode>::kHalf) {
    // The pad tap's A: 1 in channel 0 of chunk 0 where it carries the bias (fragment k = 8 is lane t = 0's low half
    // in registers 2 and 3), zero elsewhere.
    const uint32_t pad_a = P::kBiasInPadTap && k_base == 0 && t == 0 ? pack_half2<kMode>(1.f, 0.f) : 0u;
    // Rolled, as the 3xTF32 loop below: unrolled, ptxas hoisted the next steps' loads and spilled.
#pragma unroll 1
    for (int s = 0; s < P::kStepTaps / 2; ++s) {
      const int tap0 = 2 * s, tap1 = 2 * s + 1;
      uint32_t b[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const uint32_t* row = weights + b_row + 8 * ni * weight_pitch + (k_base + 16 * s) / 2 + t;
        b[ni][0] = row[0];
        b[ni][1] = row[4];
      }
#pragma unroll
      for (int mb = 0; mb < kBlocks; ++mb) {
        uint32_t a[4];
        a[0] = *reinterpret_cast<const uint32_t*>(patch + patch_at[0] + at(mb, tap0) + 4 * t);
        a[1] = *reinterpret_cast<const uint32_t*>(patch + patch_at[1] + at(mb, tap0) + 4 * t);
        if (tap1 < P::kTaps) {
          a[2] = *reinterpret_cast<const uint32_t*>(patch + patch_at[0] + at(mb, tap1) + 4 * t);
          a[3] = *reinterpret_cast<const uint32_t*>(patch + patch_at[1] + at(mb, tap1) + 4 * t);
        } else {
          a[2] = a[3] = pad_a;  // the pad tap: no input (a zero A keeps Inf / NaN inputs out of it), or the bias's 1
        }
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          if constexpr (kMode == MmaMode::kBf16) {
            mma_m16n8k16_bf16(acc[mb][ni], a, b[ni]);
          } else {
            mma_m16n8k16_f16(acc[mb][ni], a, b[ni]);
          }
        }
      }
    }
  } else {
    const uint32_t* lo_weights = weights + kTileN * weight_pitch;
    // One filter row an iteration: unrolled over all taps, ptxas hoisted the next taps' loads and spilled at the
    // 128-register cap of 512 threads.
#pragma unroll 1
    for (int ky = 0; ky < KH; ++ky) {
      const unsigned char* const row = patch + ky * P::kPitch * kRecord;
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) {
        const int tap = ky * KW + kx;
        uint32_t bh[4][2], bl[4][2];
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const int word = b_row + 8 * ni * weight_pitch + k_base + 8 * tap + 2 * t;
          const uint2 h = *reinterpret_cast<const uint2*>(weights + word);
          const uint2 l = *reinterpret_cast<const uint2*>(lo_weights + word);
          bh[ni][0] = h.x, bh[ni][1] = h.y, bl[ni][0] = l.x, bl[ni][1] = l.y;
        }
#pragma unroll
        for (int mb = 0; mb < kBlocks; ++mb) {
          const float2 x0 = *reinterpret_cast<const float2*>(row + patch_at[0] + at(mb, kx) + 8 * t);
          const float2 x1 = *reinterpret_cast<const float2*>(row + patch_at[1] + at(mb, kx) + 8 * t);
          uint32_t ah[4], al[4];
          split_tf32(x0.x, ah[0], al[0]);  // (g, channel t)
          split_tf32(x1.x, ah[1], al[1]);  // (g + 8, t)
          split_tf32(x0.y, ah[2], al[2]);  // (g, t + 4)
          split_tf32(x1.y, ah[3], al[3]);  // (g + 8, t + 4)
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) {
            mma_m16n8k8_tf32(acc[mb][ni], al, bh[ni]);
            mma_m16n8k8_tf32(acc[mb][ni], ah, bl[ni]);
            mma_m16n8k8_tf32(acc[mb][ni], ah, bh[ni]);
          }
        }
      }
    }
  }
}

// The CTA's share of the (image, spatial tile) items: a contiguous range, so that its tiles of one image come one
// after the other and its running moments are reduced once per image it meets.
__device__ __forceinline__ void item_range(int items, int& begin, int& end) {
  begin = static_cast<int>(int64_t{items} * blockIdx.x / gridDim.x);
  end = static_cast<int>(int64_t{items} * (blockIdx.x + 1) / gridDim.x);
}

// Persistent: CTA (x, y), Warps::kThreads threads, handles channel tile y of its range of (image, spatial tile)
// items. Spatial tiles are 16 x 16 (p.tile_h = p.tile_w = 16, whole pool windows); partials gets an entry for every item (count 0 but for the last
// item of each image in the range, which holds the range's moments of that image).
template <typename T, MmaMode kMode, int KH, int KW, int kPool>
__global__ void __launch_bounds__(Warps<kMode>::kThreads, Warps<kMode>::kCtasPerSm)
    conv_pool_window_kernel(const ConvPoolParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  using P = Patch<kMode, KH, KW, kPool>;
  constexpr int kBlocks = Warps<kMode>::kBlocks, kPixelWarps = Warps<kMode>::kPixelWarps;
  constexpr int kThreads = Warps<kMode>::kThreads;
  const Layout<kMode, KH, KW, kPool> L(p.in_channels);
  uint32_t* weights = reinterpret_cast<uint32_t*>(smem + L.weights);
  unsigned char* patch = smem + L.patch;
  float* s_bias = reinterpret_cast<float*>(smem + L.bias);
  float* s_sign = reinterpret_cast<float*>(smem + L.sign);
  float* s_flush = reinterpret_cast<float*>(smem + L.flush);  // [3][kPixelWarps][kTileN]: count, mean, M2

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_m = warp % kPixelWarps, warp_n = warp / kPixelWarps;
  const int channel_tile = blockIdx.y, co0 = channel_tile * kTileN;
  const int channels = min(kTileN, p.out_channels - co0);

  // Setup: the channel signs (affine_sign), the conv bias times the fold (unless the pad tap carries it), the
  // folded weights.
  for (int i = tid; i < kTileN; i += kThreads) {
    const int co = co0 + i;
    const float sign = co < p.out_channels ? affine_sign<T>(p, co) : 1.f;
    s_sign[i] = sign;
    if constexpr (!P::kBiasInPadTap) {
      s_bias[i] = co < p.out_channels ? sign_fold(sign) * conv_bias<T>(p, co) : 0.f;
    }
  }
  __syncthreads();
  // Channels with an infinite GroupNorm weight also pool max(-conv), for their sign classes (rare: a branch).
  bool any_sign0 = false;
  for (int i = 0; i < channels; ++i) any_sign0 |= s_sign[i] == 0.f;
  load_weights<T, kMode, KH, KW, kPool>(p, weights, s_sign, L, co0);

  // The thread's fragment rows: pixel (row h, column) of tile block mb is (pixel_row(h), warp_col + 4 mb + g % 4);
  // patch_at[h] is the byte offset of block 0's in the patch (block mb's is 4 mb records further).
  constexpr int kAcross = Warps<kMode>::kAcross;
  const int warp_col = 4 * kBlocks * (warp_m % kAcross);  // the warp's first tile column
  const auto pixel_row = [&](int h) { return 4 * (warp_m / kAcross) + block_row<kPool>(h, g); };
  int patch_at[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    patch_at[h] = (pixel_row(h) * P::kPitch + warp_col + g % 4) * Operands<kMode>::kRecordBytes;
  }
  const int b_row = (warp_n * kWarpCouts + g) * L.weight_pitch;

  const int tiles_w = p.tiles_w, spatial_tiles = p.spatial_tiles;
  int begin, end;
  item_range(p.batch * spatial_tiles, begin, end);
  RunningMoments<kThreads> run{0.f, reinterpret_cast<float*>(smem + L.run) + tid};
  const int ext_plane = p.pooled_h * p.ext_w;

  for (int item = begin; item < end; ++item) {
    const int n = item / spatial_tiles, spatial_tile = item % spatial_tiles;
    const int y0 = spatial_tile / tiles_w * kTile, x0 = spatial_tile % tiles_w * kTile;
    __syncthreads();  // the previous tile's MMAs are done with the patch (and the weights are stored)
    load_patch<T, kMode, KH, KW, kPool>(p, patch, L.chunks, n, y0 - p.pad_h, x0 - p.pad_w);
    __syncthreads();

    float acc[kBlocks][4][4];
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float b = P::kBiasInPadTap ? 0.f : s_bias[warp_n * kWarpCouts + 8 * ni + 2 * t + r % 2];
#pragma unroll
        for (int mb = 0; mb < kBlocks; ++mb) acc[mb][ni][r] = b;
      }
    for (int chunk = 0; chunk < L.chunks; ++chunk) {
      chunk_mma<kMode, KH, KW, kPool>(acc, patch + size_t(chunk) * P::kPixels * Operands<kMode>::kRecordBytes, weights,
                               L.weight_pitch, chunk * P::kChunkK, patch_at, b_row, t);
    }

    // Moments over every conv output pixel of the tile (also those the pool drops).
    const bool interior = y0 + kTile <= p.conv_h && x0 + kTile <= p.conv_w;
    if (interior) {
      const bool all[kBlocks][2] = {};
      add_tile_moments<false>(run, acc, all);
    } else {
      bool valid[kBlocks][2];
#pragma unroll
      for (int mb = 0; mb < kBlocks; ++mb)
#pragma unroll
        for (int h = 0; h < 2; ++h) valid[mb][h] = y0 + pixel_row(h) < p.conv_h && x0 + warp_col + 4 * mb + g % 4 < p.conv_w;
      add_tile_moments<true>(run, acc, valid);
    }

    // Window maxima -> the extremum buffer (rows of ext_w codes a channel plane).
    uint32_t* ext = p.extremum + (int64_t{n} * p.out_channels + co0 + warp_n * kWarpCouts) * ext_plane;
    if constexpr (kPool == 4) {
      // Lane: channel value_channel(g, t) of the warp's windows (row pr, columns pc0 ... pc0 + kBlocks - 1): one 8- or
      // 16-byte store (ext_w is a multiple of 4 and pc0 a multiple of kBlocks below pooled_w, so the row holds them
      // all; those past pooled_w are unused).
      const int pr = y0 / 4 + warp_m / kAcross, pc0 = (x0 + warp_col) / 4, ch = value_channel(g, t);
      uint32_t code[kBlocks];
#pragma unroll
      for (int mb = 0; mb < kBlocks; ++mb) {
        float v[8];
        pool_block<4>(v, acc[mb], false, lane);
        float neg = 0.f;
        if (any_sign0) {
          float u[8];
          pool_block<4>(u, acc[mb], true, lane);
          neg = u[0];
        }
        code[mb] = window_code(v[0], neg, s_sign[warp_n * kWarpCouts + ch] == 0.f);
      }
      if (pr < p.pooled_h && pc0 < p.pooled_w && warp_n * kWarpCouts + ch < channels) {
        uint32_t* const at = ext + int64_t{ch} * ext_plane + pr * p.ext_w + pc0;
        if constexpr (kBlocks == 4) {
          *reinterpret_cast<uint4*>(at) = make_uint4(code[0], code[1], code[2], code[3]);
        } else {
          *reinterpret_cast<uint2*>(at) = make_uint2(code[0], code[1]);
        }
      }
    } else {
      // Lane: channels value_channel(4 (g % 2) + j, t), j < 4, of window (pr, pc) of each block.
      const int pr = y0 / 2 + 2 * (warp_m / kAcross) + g / 4;
      const bool row_inside = pr < p.pooled_h;
      const auto store = [&](int mb, int j, uint32_t code) {
        const int pc = (x0 + warp_col) / 2 + 2 * mb + g / 2 % 2, ch = value_channel(4 * (g % 2) + j, t);
        if (row_inside && pc < p.pooled_w && warp_n * kWarpCouts + ch < channels) {
          ext[int64_t{ch} * ext_plane + pr * p.ext_w + pc] = code;
        }
      };
      if (!any_sign0) {
#pragma unroll
        for (int mb = 0; mb < kBlocks; ++mb) {
          float v[8];
          pool_block<2>(v, acc[mb], false, lane);
#pragma unroll
          for (int j = 0; j < 4; ++j) store(mb, j, encode_ordered(v[j]));
        }
      } else {
#pragma unroll
        for (int mb = 0; mb < kBlocks; ++mb) {
          float v[8], u[8];
          pool_block<2>(v, acc[mb], false, lane);
          pool_block<2>(u, acc[mb], true, lane);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            store(mb, j, window_code(v[j], u[j], s_sign[warp_n * kWarpCouts + value_channel(4 * (g % 2) + j, t)] == 0.f));
          }
        }
      }
    }

    // The item's entries of partials: the image's moments at its last item in the range, count 0 otherwise.
    const int group_first = co0 / p.channels_per_group;
    const int group_count = (co0 + channels - 1) / p.channels_per_group - group_first + 1;
    float4* slot = p.partials + ((int64_t{n} * p.channel_tiles + channel_tile) * spatial_tiles + spatial_tile) *
                                    p.local_groups;
    const bool flush = item + 1 == end || (item + 1) / spatial_tiles != n;
    if (!flush) {
      for (int lg = tid; lg < group_count; lg += kThreads) slot[lg] = make_float4(0.f, 0.f, 0.f, 0.f);
      continue;
    }
    // Reduce the running moments: over the 8 lanes of a channel (g), then over the pixel warps in shared memory,
    // with the mean of conv = sign * mean of y (the fold is +1 for sign 0).
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        float count = run.count, mean = run.mean(ni, q), m2 = run.m2(ni, q);
        merge_with_lane(count, mean, m2, 4);
        merge_with_lane(count, mean, m2, 8);
        merge_with_lane(count, mean, m2, 16);
        if (g == 0) {
          const int ch = warp_n * kWarpCouts + 8 * ni + 2 * t + q;
          s_flush[(0 * kPixelWarps + warp_m) * kTileN + ch] = count;
          s_flush[(1 * kPixelWarps + warp_m) * kTileN + ch] = sign_fold(s_sign[ch]) * mean;
          s_flush[(2 * kPixelWarps + warp_m) * kTileN + ch] = m2;
        }
      }
    run.count = 0.f;
    __syncthreads();
    // Per channel, its pixel warps merged; then per group (equal counts per channel: closed form, as the tile
    // kernel's group step).
    for (int lg = tid; lg < group_count; lg += kThreads) {
      const int grp = group_first + lg;
      const int ch_lo = max(co0, grp * p.channels_per_group) - co0;
      const int ch_hi = min(co0 + channels, (grp + 1) * p.channels_per_group) - co0;
      const auto channel_moments = [&](int ch) {
        Moments mom{0.f, 0.f, 0.f};
#pragma unroll
        for (int w = 0; w < kPixelWarps; ++w) {
          mom.merge(s_flush[(0 * kPixelWarps + w) * kTileN + ch], s_flush[(1 * kPixelWarps + w) * kTileN + ch],
                    s_flush[(2 * kPixelWarps + w) * kTileN + ch]);
        }
        return mom;
      };
      float pixels = 0.f, mean = 0.f;
      for (int ch = ch_lo; ch < ch_hi; ++ch) {
        const Moments mom = channel_moments(ch);
        pixels = mom.count;
        mean += mom.mean;
      }
      const float k = static_cast<float>(ch_hi - ch_lo);
      mean /= k;
      float m2 = 0.f, spread = 0.f;
      for (int ch = ch_lo; ch < ch_hi; ++ch) {
        const Moments mom = channel_moments(ch);
        const float d = mom.mean - mean;
        m2 += mom.m2;
        spread += d * d;
      }
      slot[lg] = make_float4(pixels * k, mean, m2 + pixels * spread, 0.f);
    }
    __syncthreads();  // s_flush is read before the next flush overwrites it
  }
}

}  // namespace window
}  // namespace gn_pool
}  // namespace cuda
}  // namespace convops
