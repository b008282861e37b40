// The conv_transpose kernel: an implicit GEMM over one output phase (see conv_transpose_params.cuh), written once
// for 2-D and 3-D (2-D is 3-D with depth 1).
//
// One block computes a tile of BM output pixels (a power-of-two box in phase coordinates) x BN output channels
// of one (batch, group, phase). GEMM view: M = pixels, N = output channels, K = input channels x taps. For each
// chunk of input channels the block loads the input brick the tile needs *with its halo* into shared memory once,
// plus the weights of those taps, and every tap then reads the brick at a constant offset: the input is fetched
// from L2 once per chunk, not once per tap. Accumulators go through shared memory so the stores are coalesced.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/conv_transpose_math.cuh"
#include "cuda/conv_transpose_params.cuh"

namespace convops {
namespace cuda {

constexpr int kConvTransposeThreads = 256;
constexpr int kConvTransposeWarps = kConvTransposeThreads / 32;

// Weight rows in shared memory are padded so that the 4 k-rows x 8 columns one B fragment reads hit 32 banks.
__host__ __device__ constexpr int conv_transpose_weight_pitch(int bn) {
  return (bn % 32 == 8 || bn % 32 == 24) ? bn : bn + 8;
}

// The weights of one pass in shared memory, per tap of the group, as rows of conv_transpose_weight_row_words channel
// words x BN output channels, in the transformed global weight's own layout (conv_transpose_kernel.cu), so that a
// row is one contiguous copy:
//   tensor cores: rows of 8 words stored [channel][8 words] in B-fragment order (word t, then word t + 4): one
//     8-byte load gives a lane both words of its fragment;
//   CUDA cores: rows of one word, [channel] padded to conv_transpose_weight_pitch (conflict-free float4 loads).
__host__ __device__ constexpr int conv_transpose_weight_row_words(bool tensor_core) { return tensor_core ? 8 : 1; }
// Shared-memory words of the weights per channel word and tap.
__host__ __device__ constexpr int conv_transpose_weight_words(int bn, bool tensor_core) {
  return tensor_core ? bn : conv_transpose_weight_pitch(bn);
}

// Accumulators are staged as [channel][pixel] with this pitch: the 4 channel pairs x 8 rows a warp writes at once
// then hit distinct banks.
__host__ __device__ constexpr int conv_transpose_stage_pitch(int bm) { return bm + 4; }

// Offset of tile pixel m (d, h, w fastest) in a brick with allocated extents (.., bh, bw).
__device__ __forceinline__ int brick_offset(int m, const int (&tile_log2)[3], int bh, int bw) {
  const int mw = m & ((1 << tile_log2[2]) - 1);
  const int mh = (m >> tile_log2[2]) & ((1 << tile_log2[1]) - 1);
  const int md = m >> (tile_log2[2] + tile_log2[1]);
  return (md * bh + mh) * bw + mw;
}

// Tensor-core tile. Warp w owns a box of 8 x U pixels (U = BM / 64): 8 along the lane axis (d or h: fragment row g)
// and U consecutive along w, where half-fragment u holds rows g (u even) or g + 8 (u odd) of m-tile u / 2. Taps that
// follow each other along w shift the brick by one pixel, so half-fragment u of tap s + 1 is half-fragment u + 1 of
// tap s: a window of n such taps loads U + n - 1 half-fragments instead of n U, at constant offsets.
template <class Math, int BM, int BN>
struct MmaTile {
  static constexpr int kWarpM = BM / kConvTransposeWarps;
  static constexpr int MT = kWarpM / 16;
  static constexpr int NT = BN / 8;
  static constexpr int U = 2 * MT;
  static constexpr int kWindow = 3;  // taps per window: 10 half-fragment loads instead of 24 at U = 8
  static_assert(kWarpM % 16 == 0 && BN % 8 == 0, "tile must be made of m16n8 fragments");

  float acc[MT][NT][4];
  int a_lane;          // brick offset of this lane's pixel in half-fragment 0 (half-fragment u: + u)
  int m_lane;          // its tile pixel index (half-fragment u: + u)
  int g, t;

  __device__ MmaTile(int tid, const ConvTransposeParams& p) {
    const int warp = tid / 32, lane = tid % 32;
    g = lane / 4;
    t = lane % 4;
    const int size[3] = {1 << p.tile_log2[0], 1 << p.tile_log2[1], 1 << p.tile_log2[2]};
    // Warp boxes w fastest, then along the lane axis, then along the other one of d and h.
    const int boxes_w = size[2] / U, boxes_l = (p.lane_axis == 0 ? size[0] : size[1]) / 8;
    const int w = warp % boxes_w * U, l = warp / boxes_w % boxes_l * 8 + g, o = warp / (boxes_w * boxes_l);
    const int d = p.lane_axis == 0 ? l : o, h = p.lane_axis == 0 ? o : l;
    a_lane = (d * p.brick[1] + h) * p.brick[2] + w;
    m_lane = (d * size[1] + h) * size[2] + w;
  }

  template <int M, int N>
  __device__ static void zero_sums(float (&sums)[M][N][4]) {
#pragma unroll
    for (int mt = 0; mt < M; ++mt)
#pragma unroll
      for (int nt = 0; nt < N; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) sums[mt][nt][i] = 0.f;
  }

  __device__ void zero() { zero_sums(acc); }

  // A window of n <= kWindow taps along w: tap s reads the brick at offset + s, with the weights at
  // weights + s * weight_step (words). acc += brick(shifted)[pixels][chunk words] x weights[words][BN].
  __device__ void taps(const uint32_t* brick, int plane, const uint32_t* weights, int weight_step, int chunk,
                       int offset, int n) {
    // Full windows (the common case) without the predicates on loads and taps.
    if (n == kWindow) return taps_of<kWindow>(brick, plane, weights, weight_step, chunk, offset, n);
    taps_of<0>(brick, plane, weights, weight_step, chunk, offset, n);
  }

  // kN taps, or n <= kWindow where kN is 0.
  template <int kN>
  __device__ void taps_of(const uint32_t* brick, int plane, const uint32_t* weights, int weight_step, int chunk,
                          int offset, int n) {
    if constexpr (kN > 0) n = kN;
    const uint32_t* a_rows = brick + t * plane + offset + a_lane;
    const uint32_t* b_rows = weights + g * 8 + 2 * t;  // channel g, words t and t + 4
#pragma unroll 1  // one k-step already holds n x MT x NT independent mma; unrolling more only adds registers
    for (int k = 0; k < chunk; k += 8) {
      // Math::kRoundedSums: this k-step's products go to sums of their own (conv_transpose_math.cuh).
      float step[MT][NT][4];
      if constexpr (Math::kRoundedSums) zero_sums(step);
      float(&sums)[MT][NT][4] = Math::kRoundedSums ? step : acc;
      // The window's half-fragments first (all loads in flight together), then one B fragment at a time.
      const uint32_t* a_lo = a_rows + k * plane;
      const uint32_t* a_hi = a_lo + 4 * plane;
      uint32_t h[U + kWindow - 1][2];
#pragma unroll
      for (int v = 0; v < U + kWindow - 1; ++v) {
        if (v < U + n - 1) {
          h[v][0] = a_lo[v];
          h[v][1] = a_hi[v];
        }
      }
#pragma unroll
      for (int s = 0; s < kWindow; ++s) {
        if (s >= n) break;
        const uint32_t* b_tap = b_rows + s * weight_step + k * BN;  // row k / 8 of the tap
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint2 pair = *reinterpret_cast<const uint2*>(b_tap + nt * 64);
          const uint32_t b[2] = {pair.x, pair.y};
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint32_t a[4] = {h[2 * mt + s][0], h[2 * mt + 1 + s][0], h[2 * mt + s][1], h[2 * mt + 1 + s][1]};
            Math::mma(sums[mt][nt], a, b);
          }
        }
      }
      if constexpr (Math::kRoundedSums) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nt][i] += step[mt][nt][i];
      }
    }
  }

  __device__ void stage(float* out) const {
    constexpr int SP = conv_transpose_stage_pitch(BM);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int m = m_lane + 2 * mt, m8 = m + 1, co = nt * 8 + 2 * t;
        out[co * SP + m] = acc[mt][nt][0];
        out[(co + 1) * SP + m] = acc[mt][nt][1];
        out[co * SP + m8] = acc[mt][nt][2];
        out[(co + 1) * SP + m8] = acc[mt][nt][3];
      }
    }
  }
};

// CUDA-core tile for strict fp32 and fp64: thread (tm, tn) owns pixels tm + 64 i (i < PI) x channels 8 tn .. 8 tn + 7.
template <class Math, int BM, int BN>
struct FmaTile {
  using T = typename Math::Acc;
  static constexpr int PI = BM / 64;
  static constexpr int kPitch = conv_transpose_weight_pitch(BN);
  static_assert(BM % 64 == 0 && BN == 32, "the CUDA-core tile is 64 PI pixels x 32 channels");

  T acc[PI][8];
  int row[PI];
  int tm, tn;

  static constexpr int kWindow = 1;  // no reuse across taps: every thread's pixels are loaded tap by tap

  __device__ FmaTile(int tid, const ConvTransposeParams& p) {
    tn = tid & 3;
    tm = tid >> 2;
#pragma unroll
    for (int i = 0; i < PI; ++i) row[i] = brick_offset(tm + 64 * i, p.tile_log2, p.brick[1], p.brick[2]);
  }

  __device__ void zero() {
#pragma unroll
    for (int i = 0; i < PI; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = T(0);
  }

  // One tap (a window of one, see MmaTile::taps).
  __device__ void taps(const T* brick, int plane, const T* weights, int /*weight_step*/, int chunk, int tap_offset,
                       int /*n*/) {
    const T* a_rows = brick + tap_offset;
    const T* b_rows = weights + tn * 8;
#pragma unroll 2
    for (int c = 0; c < chunk; ++c) {
      T a[PI];
#pragma unroll
      for (int i = 0; i < PI; ++i) a[i] = a_rows[c * plane + row[i]];
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // four weights at a time keeps fp64 within 128 registers
        T b[4];
        load_row4(b, b_rows + c * kPitch + 4 * half);
#pragma unroll
        for (int i = 0; i < PI; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][4 * half + j] = fma(a[i], b[j], acc[i][4 * half + j]);
      }
    }
  }

  __device__ void stage(T* out) const {
    constexpr int SP = conv_transpose_stage_pitch(BM);
#pragma unroll
    for (int i = 0; i < PI; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) out[(tn * 8 + j) * SP + tm + 64 * i] = acc[i][j];
  }

 private:
  // Four consecutive, 16-byte aligned values in one or two vector loads.
  __device__ static void load_row4(float (&b)[4], const float* src) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    b[0] = v.x, b[1] = v.y, b[2] = v.z, b[3] = v.w;
  }
  __device__ static void load_row4(double (&b)[4], const double* src) {
    const double2 lo = reinterpret_cast<const double2*>(src)[0], hi = reinterpret_cast<const double2*>(src)[1];
    b[0] = lo.x, b[1] = lo.y, b[2] = hi.x, b[3] = hi.y;
  }
};

// The taps of one (tile, chunk) pass: [j0, j1) per dimension, all reading one brick.
struct TapGroup {
  int j0[3], j1[3];
  int origin[3];  // input coordinate of brick element 0 per dimension
  int extent[3];  // brick extent this group needs (<= the allocated one)
};

// Brick position (z, y, x): its offset in a brick plane, its input offset (in the group's first channel) and whether
// it lies inside the input (else it holds zeros).
struct BrickPosition {
  int dst;
  int64_t src;
  bool inside;
};

__device__ __forceinline__ BrickPosition brick_position(const ConvTransposeParams& p, const TapGroup& tg, int z, int y,
                                                        int x) {
  const int id = tg.origin[0] + z, ih = tg.origin[1] + y, iw = tg.origin[2] + x;
  const bool inside = id >= 0 && id < p.in_size[0] && ih >= 0 && ih < p.in_size[1] && iw >= 0 && iw < p.in_size[2];
  const int64_t src = inside ? id * p.in_stride[2] + ih * p.in_stride[3] + iw * p.in_stride[4] : 0;
  return {(z * p.brick[1] + y) * p.brick[2] + x, src, inside};
}

// Calls f(position) for the brick positions this thread loads: the same positions in load_brick and round_brick,
// so each thread rounds exactly the words its own copies wrote.
template <class F>
__device__ __forceinline__ void for_each_brick_position(const ConvTransposeParams& p, const TapGroup& tg, F&& f) {
  for_each_in_box(tg.extent, threadIdx.x, kConvTransposeThreads,
                  [&](const int (&at)[3], int) { f(brick_position(p, tg, at[0], at[1], at[2])); });
}

// Paired bricks (16-bit inputs, p.paired_brick): each brick row in units of two columns x, x + 1 whose input column
// is even, so that one channel's two elements are one aligned 4-byte copy. Calls f(z, y, x) with the unit's first
// brick column x (-1 where the row's first column is odd in the input: the unit then holds column 0 alone), for
// the units this thread loads: the same in load_brick and pack_brick.
template <class F>
__device__ __forceinline__ void for_each_brick_pair(const ConvTransposeParams& p, const TapGroup& tg, F&& f) {
  const int odd = tg.origin[2] & 1;  // the parity of the brick's first input column
  const int extents[3] = {tg.extent[0], tg.extent[1], (tg.extent[2] + odd + 1) / 2};
  for_each_in_box(extents, threadIdx.x, kConvTransposeThreads,
                  [&](const int (&at)[3], int) { f(at[0], at[1], 2 * at[2] - odd); });
}

// A pair unit whose two columns are both in the brick and in the input: copied as pairs, then packed.
__device__ __forceinline__ bool whole_pair(const ConvTransposeParams& p, const TapGroup& tg, const BrickPosition& first,
                                           int x) {
  return x >= 0 && x + 1 < tg.extent[2] && first.inside && tg.origin[2] + x + 1 < p.in_size[2];
}

// brick[cw][z][y][x] = input[n, group channels c0 + cw .., origin + (z, y, x)], zero outside the input.
// One-channel words are copied asynchronously (cp.async, zero-filled). Two-channel words: in paired bricks, the two
// elements of channel c at columns x, x + 1 go to word (x) and those of channel c + 1 to word (x + 1), both by 4-byte
// cp.async, and pack_brick swaps their halves into (c, c + 1) words; elsewhere they are packed in registers.
template <class Math>
__device__ void load_brick(const ConvTransposeParams& p, typename Math::Word* brick, int n, int grp, int c0,
                           const TapGroup& tg) {
  using Input = typename Math::Input;
  using Word = typename Math::Word;
  constexpr int kCpw = Math::kChannelsPerWord;
  const Input* in = static_cast<const Input*>(p.input) + n * p.in_stride[0] +
                    static_cast<int64_t>(grp) * p.cin_g * p.in_stride[1];
  const auto words_in_registers = [&](const BrickPosition& at) {
    Word* dst = brick + at.dst;
    const Input* src = in + at.src;
#pragma unroll 4
    for (int cw = 0; cw < p.chunk; ++cw) {
      const int c = (c0 + cw) * kCpw;
      const Input* lo = at.inside && c < p.cin_g ? src + c * p.in_stride[1] : nullptr;
      const Input* hi = kCpw == 2 && at.inside && c + 1 < p.cin_g ? src + (c + 1) * p.in_stride[1] : nullptr;
      dst[cw * p.brick_plane] = Math::word(lo, hi);
    }
  };
  if constexpr (Math::kAsyncBrick) {
    for_each_brick_position(p, tg, [&](const BrickPosition& at) {
      Word* dst = brick + at.dst;
      const Input* src = in + at.src;
      const int channels = at.inside ? min(p.chunk, p.cin_g - c0) : 0;
#pragma unroll 8
      for (int cw = 0; cw < p.chunk; ++cw) {
        const bool valid = cw < channels;
        cp_async_zfill<sizeof(Word)>(dst + cw * p.brick_plane, valid ? src + (c0 + cw) * p.in_stride[1] : in, valid);
      }
    });
  } else if (Math::kChannelsPerWord == 2 && p.paired_brick) {
    for_each_brick_pair(p, tg, [&](int z, int y, int x) {
      const BrickPosition first = brick_position(p, tg, z, y, x);
      if (!whole_pair(p, tg, first, x)) {
        if (x >= 0) words_in_registers(first);
        if (x + 1 < tg.extent[2]) words_in_registers(brick_position(p, tg, z, y, x + 1));
        return;
      }
      Word* dst = brick + first.dst;
      const Input* src = in + first.src;
#pragma unroll 4
      for (int cw = 0; cw < p.chunk; ++cw) {
        const int c = (c0 + cw) * 2;
        const bool lo = c < p.cin_g, hi = c + 1 < p.cin_g;
        cp_async_zfill<4>(dst + cw * p.brick_plane, lo ? src + c * p.in_stride[1] : in, lo);
        cp_async_zfill<4>(dst + cw * p.brick_plane + 1, hi ? src + (c + 1) * p.in_stride[1] : in, hi);
      }
    });
  } else {
    for_each_brick_position(p, tg, words_in_registers);
  }
}

// Paired bricks: turn this thread's pair copies (word x = channel c at x, x + 1; word x + 1 = channel c + 1 at x,
// x + 1) into channel-pair words (word x = c, c + 1 at x; word x + 1 the same at x + 1), after its wait.
template <class Math>
__device__ void pack_brick(const ConvTransposeParams& p, typename Math::Word* brick, const TapGroup& tg) {
  for_each_brick_pair(p, tg, [&](int z, int y, int x) {
    const BrickPosition first = brick_position(p, tg, z, y, x);
    if (!whole_pair(p, tg, first, x)) return;
    uint32_t* dst = brick + first.dst;
#pragma unroll 4
    for (int cw = 0; cw < p.chunk; ++cw) {
      const uint32_t a = dst[cw * p.brick_plane], b = dst[cw * p.brick_plane + 1];
      dst[cw * p.brick_plane] = __byte_perm(a, b, 0x5410);      // low halves: (c, c + 1) at x
      dst[cw * p.brick_plane + 1] = __byte_perm(a, b, 0x7632);  // high halves: at x + 1
    }
  });
}

// TF32: RN-round the words this thread's own cp.async copies brought in (they are visible to it after the wait).
template <class Math>
__device__ void round_brick(const ConvTransposeParams& p, typename Math::Word* brick, const TapGroup& tg) {
  for_each_brick_position(p, tg, [&](const BrickPosition& at) {
    uint32_t* dst = brick + at.dst;
#pragma unroll 8
    for (int cw = 0; cw < p.chunk; ++cw) dst[cw * p.brick_plane] = tf32_bits(__uint_as_float(dst[cw * p.brick_plane]));
  });
}

// The weights of a pass (conv_transpose_weight_row_words): transformed weight[grp, tap, rows of c0 .., channels
// co_block * BN ..] for each tap of the group, 16-byte cp.async.
template <class Math, int BN>
__device__ void load_weights(const ConvTransposeParams& p, typename Math::Word* weights, int grp, int co_block,
                             int c0, const PhaseDim (&ph)[3], const TapGroup& tg) {
  using Word = typename Math::Word;
  constexpr int kRowK = conv_transpose_weight_row_words(Math::kTensorCore);
  constexpr int kRowWords = kRowK * conv_transpose_weight_words(BN, Math::kTensorCore);  // a row in shared memory
  constexpr int kVectors = BN * kRowK * static_cast<int>(sizeof(Word)) / 16;          // a row's 16-byte copies
  static_assert(BN * sizeof(Word) % 16 == 0, "weight rows must be whole 16-byte vectors");
  const int extents[5] = {tg.j1[0] - tg.j0[0], tg.j1[1] - tg.j0[1], tg.j1[2] - tg.j0[2], p.chunk / kRowK, kVectors};
  const int64_t global_rows = p.cin_words / kRowK;  // rows per tap in the transformed weight
  const Word* w = static_cast<const Word*>(p.weight) +
                  (static_cast<int64_t>(grp) * p.kernel[0] * p.kernel[1] * p.kernel[2] * global_rows * p.cout_pad +
                   co_block * BN) * kRowK;
  // Vector v of the pass: (tap jd, jh, jw of the group, row, 16-byte column).
  for_each_in_box(extents, threadIdx.x, kConvTransposeThreads, [&](const int (&at)[5], int v) {
    const int kd = ph[0].k0 + (tg.j0[0] + at[0]) * p.tap_step[0];
    const int kh = ph[1].k0 + (tg.j0[1] + at[1]) * p.tap_step[1];
    const int kw = ph[2].k0 + (tg.j0[2] + at[2]) * p.tap_step[2];
    const int row = v / kVectors;  // (tap of the group, row): the row in shared memory
    const int64_t src =
        (static_cast<int64_t>((kd * p.kernel[1] + kh) * p.kernel[2] + kw) * global_rows + c0 / kRowK + at[3]) *
        p.cout_pad * kRowK;
    cp_async_zfill<16>(reinterpret_cast<uint4*>(weights + row * kRowWords) + at[4],
                       reinterpret_cast<const uint4*>(w + src) + at[4], true);
  });
}

// output[n, channels, o = q * s + r] = staged accumulators + bias, for the pixels and channels that exist.
template <class Math, int BM, int BN>
__device__ void store_tile(const ConvTransposeParams& p, const typename Math::Acc* stage, int n, int grp,
                           int co_block, const int (&r)[3], const int (&q0)[3], const PhaseDim (&ph)[3]) {
  using Input = typename Math::Input;
  using Acc = typename Math::Acc;
  constexpr int SP = conv_transpose_stage_pitch(BM);
  const Input* bias = static_cast<const Input*>(p.bias);
  Input* out = static_cast<Input*>(p.output) + n * p.out_stride[0];
  const int co_base = grp * p.cout_g + co_block * BN;
  const int co_count = min(BN, p.cout_g - co_block * BN);
  const auto output_offset = [&](int m, int64_t& offset) {  // false where pixel m of the tile is outside
    const int qw = q0[2] + (m & ((1 << p.tile_log2[2]) - 1));
    const int qh = q0[1] + ((m >> p.tile_log2[2]) & ((1 << p.tile_log2[1]) - 1));
    const int qd = q0[0] + (m >> (p.tile_log2[2] + p.tile_log2[1]));
    const int64_t od = qd * p.stride[0] + r[0], oh = qh * p.stride[1] + r[1], ow = qw * p.stride[2] + r[2];
    offset = od * p.out_stride[2] + oh * p.out_stride[3] + ow * p.out_stride[4];
    return qd < ph[0].q_count && qh < ph[1].q_count && qw < ph[2].q_count;
  };
  if (p.out_stride[1] == 1) {  // channels_last: consecutive threads, consecutive channels
    for (int e = threadIdx.x; e < BM * BN; e += kConvTransposeThreads) {
      const int co = e % BN, m = e / BN;
      int64_t offset;
      if (co >= co_count || !output_offset(m, offset)) continue;
      Acc value = stage[co * SP + m];
      if (bias) value += Math::to_acc(bias[co_base + co]);
      out[co_base + co + offset] = Math::from_acc(value);
    }
    return;
  }
  // Otherwise consecutive threads, consecutive pixels: each thread's pixels are the same for every channel, so
  // their offsets are computed once.
  for (int m = threadIdx.x; m < BM; m += kConvTransposeThreads) {
    int64_t offset;
    if (!output_offset(m, offset)) continue;
    Input* dst = out + co_base * p.out_stride[1] + offset;
    for (int co = 0; co < co_count; ++co, dst += p.out_stride[1]) {
      Acc value = stage[co * SP + m];
      if (bias) value += Math::to_acc(bias[co_base + co]);
      *dst = Math::from_acc(value);
    }
  }
}

// The tile of a precision policy: tensor cores or CUDA cores.
template <class Math, int BM, int BN>
using ConvTransposeTile = std::conditional_t<Math::kTensorCore, MmaTile<Math, BM, BN>, FmaTile<Math, BM, BN>>;

template <class Math, int BM, int BN>
__global__ void __launch_bounds__(kConvTransposeThreads, 2)  // two blocks an SM: one computes while one loads
    conv_transpose_kernel(const ConvTransposeParams p) {
  using Word = typename Math::Word;
  using Tile = ConvTransposeTile<Math, BM, BN>;
  constexpr int kWeightWords = conv_transpose_weight_words(BN, Math::kTensorCore);  // a tap's, per channel word
  extern __shared__ __align__(16) unsigned char smem[];
  Word* smem_words = reinterpret_cast<Word*>(smem);
  auto* stage = reinterpret_cast<typename Math::Acc*>(smem);

  Tile tile(threadIdx.x, p);
  // Windows of taps along w where consecutive taps are one pixel apart (MmaTile::taps).
  const int window = p.offset_step[2] == 1 ? Tile::kWindow : 1;
  for (int64_t index = blockIdx.x; index < p.total_tiles; index += gridDim.x) {
    // Decode (n, group, phase, tile, channel block), channel block fastest so that blocks sharing a brick run
    // together and find it in L2.
    int64_t rest = index;
    const int co_block = static_cast<int>(rest % p.co_blocks);
    rest /= p.co_blocks;
    int tile_index[3], r[3];
    for (int d = 2; d >= 0; --d) {
      tile_index[d] = static_cast<int>(rest % p.tiles[d]);
      rest /= p.tiles[d];
    }
    for (int d = 2; d >= 0; --d) {
      r[d] = static_cast<int>(rest % p.stride[d]);
      rest /= p.stride[d];
    }
    const int grp = static_cast<int>(rest % p.groups);
    const int n = static_cast<int>(rest / p.groups);

    PhaseDim ph[3];
    int q0[3];
    bool empty = false, has_taps = true;
    for (int d = 0; d < 3; ++d) {
      ph[d] = phase_dim(r[d], p.out_size[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d], p.tap_step[d]);
      q0[d] = tile_index[d] << p.tile_log2[d];
      empty |= q0[d] >= ph[d].q_count;
      has_taps &= ph[d].taps > 0;
    }
    if (empty) continue;  // the same for every thread of the block

    // The passes over shared memory: every (input-channel chunk, tap group). Pass i + 1 is copied in while pass i
    // is multiplied, in two alternating stages.
    int group_count[3];
    for (int d = 0; d < 3; ++d) group_count[d] = (ph[d].taps + p.group_taps[d] - 1) / p.group_taps[d];
    const int groups_per_chunk = group_count[0] * group_count[1] * group_count[2];
    const int passes = has_taps ? p.cin_words / p.chunk * groups_per_chunk : 0;
    const auto pass = [&](int i, int& c0, TapGroup& tg) {
      // One tap group a chunk (the common case) needs no division.
      int g = 0;
      c0 = i * p.chunk;
      if (groups_per_chunk > 1) {
        c0 = i / groups_per_chunk * p.chunk;
        g = i % groups_per_chunk;
      }
      for (int d = 2; d >= 0; --d) {
        tg.j0[d] = 0;
        if (group_count[d] > 1) {
          tg.j0[d] = g % group_count[d] * p.group_taps[d];
          g /= group_count[d];
        }
        tg.j1[d] = min(tg.j0[d] + p.group_taps[d], ph[d].taps);
        tg.origin[d] = q0[d] + ph[d].off0 - (tg.j1[d] - 1) * p.offset_step[d];
        tg.extent[d] = (1 << p.tile_log2[d]) + (tg.j1[d] - 1 - tg.j0[d]) * p.offset_step[d];
      }
    };
    const auto issue = [&](int i) {
      int c0;
      TapGroup tg;
      pass(i, c0, tg);
      Word* stage_brick = smem_words + (i & 1) * p.stage_words;
      load_brick<Math>(p, stage_brick, n, grp, c0, tg);
      load_weights<Math, BN>(p, stage_brick + p.chunk * p.brick_plane, grp, co_block, c0, ph, tg);
      cp_async_commit();
    };

    tile.zero();
    __syncthreads();  // the previous tile's epilogue is done with shared memory
    if (passes > 0) issue(0);
    for (int i = 0; i < passes; ++i) {
      if (i + 1 < passes) {
        issue(i + 1);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      int c0;
      TapGroup tg;
      pass(i, c0, tg);
      Word* brick = smem_words + (i & 1) * p.stage_words;
      const Word* weights = brick + p.chunk * p.brick_plane;
      if constexpr (Math::kRoundBrick) round_brick<Math>(p, brick, tg);
      if constexpr (Math::kChannelsPerWord == 2) {
        if (p.paired_brick) pack_brick<Math>(p, brick, tg);
      }
      __syncthreads();
      // Tap j of a dimension reads the brick (j1 - 1 - j) * offset_step further along it. Along w the taps go in
      // windows of up to `window`, last tap first: tap s of a window is s pixels further along.
      const int gw = tg.j1[2] - tg.j0[2];
      int tap = 0;
      for (int jd = tg.j0[0]; jd < tg.j1[0]; ++jd) {
        for (int jh = tg.j0[1]; jh < tg.j1[1]; ++jh, tap += gw) {
          const int offset_dh =
              ((tg.j1[0] - 1 - jd) * p.offset_step[0] * p.brick[1] + (tg.j1[1] - 1 - jh) * p.offset_step[1]) *
              p.brick[2];
          for (int end = tg.j1[2]; end > tg.j0[2]; end -= window) {
            tile.taps(brick, p.brick_plane, weights + (tap + end - 1 - tg.j0[2]) * p.chunk * kWeightWords,
                      -p.chunk * kWeightWords, p.chunk, offset_dh + (tg.j1[2] - end) * p.offset_step[2],
                      min(window, end - tg.j0[2]));
          }
        }
      }
      __syncthreads();  // every warp is done with this stage: the next iteration's issue refills it
    }
    tile.stage(stage);  // the barriers above: nobody reads the stages or the previous staging any more
    __syncthreads();
    store_tile<Math, BM, BN>(p, stage, n, grp, co_block, r, q0, ph);
  }
}

}  // namespace cuda
}  // namespace convops
