// Row-streaming depthwise kernel: the fast path of convops::depthwise_conv2d for contiguous NCHW inputs with stride 1,
// dilation 1 and a 3x3, 5x5 or 7x7 filter (the kernel template takes any KH x KW).
//
// Why (issue #5): the shared-memory tiled kernel spends most of its instructions staging the input element by
// element and re-reading it from shared memory, and tops out at 61% of the copy bandwidth on the seed shape. Here
// each warp owns a strip of 32 * VEC output columns of one (n, c_out) plane over a band of rows and walks down the
// input rows. A lane loads VEC adjacent input elements of each row once (16 bytes; 8 for 16-bit 7x7, to bound its
// registers), kDepth rows ahead of their use so that enough bytes are in flight without shared memory. The KW - 1
// halo columns its outputs also read come from its neighbours by __shfl_sync; the lanes at the warp's edges also
// load the vector just beyond the strip and hand it to the lanes at the other edge. A lane adds each input row into
// the KH output rows it touches, whose partial sums stay in registers, and stores each output row as soon as its
// last input row has been added. (Shared-memory rings fed by cp.async, 16 or 32 bytes a lane, were measured too:
// 59-79% of the copy-bandwidth floor on H200 against 84.5% for this one in fp32, 58-70% against 73% in bf16.)
//
// Rounding: every output is the bias (or 0), then one fmaf per tap in (ky, kx) order, exactly as ATen's
// conv_depthwise2d_forward_kernel and depthwise_stencil.cuh's tap_sum do, so fp32 results are bitwise PyTorch's
// (the separable op relies on this to round the same depthwise intermediate to TF32 as eager). Rows above and
// below the image are skipped, as ATen skips them; columns outside it enter as zeros, as in the tiled kernel.
//
// launch_depthwise_rows returns false when the problem is not of this kind (the caller then runs the general
// kernels): other strides, dilations or filter sizes, non-contiguous tensors, W not a multiple of VEC, a misaligned
// input pointer, coordinates past int, fp64.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <type_traits>

#include "common/checks.h"
#include "cuda/device_info.h"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {
namespace rows {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

__host__ __device__ constexpr int floor_div(int a, int b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// Storage of one element type as 32-bit words: fp32 one element a word, fp16/bf16 two (low half first).
template <typename scalar_t>
struct Element {
  static constexpr int kPerWord = 4 / static_cast<int>(sizeof(scalar_t));

  // Element `part` (0 or 1) of a word, widened to fp32 exactly.
  __device__ __forceinline__ static float to_float(uint32_t word, int part) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      return __uint_as_float(word);
    } else if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
      return __uint_as_float(part == 0 ? word << 16 : word & 0xffff0000u);
    } else {
      return __half2float(__ushort_as_half(static_cast<unsigned short>(part == 0 ? word : word >> 16)));
    }
  }

  // fp32 -> storage bits, rounded to nearest even (what static_cast<scalar_t>(float) does in ATen).
  __device__ __forceinline__ static uint32_t bits(float x) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      return __float_as_uint(x);
    } else if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
      return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    } else {
      return __half_as_ushort(__float2half_rn(x));
    }
  }
};

// NW consecutive 32-bit words: one lane's VEC elements of a row.
template <int NW>
struct Words {
  uint32_t w[NW];
};

// Read-only (non-coherent) loads of NW words from a min(16, 4 * NW)-byte aligned address: 16-byte loads for
// NW = 4 or 8, one 8-byte or 4-byte load for NW = 2 or 1.
template <int NW>
__device__ __forceinline__ Words<NW> load_words(const void* p) {
  Words<NW> r;
  if constexpr (NW % 4 == 0) {
#pragma unroll
    for (int q = 0; q < NW / 4; ++q) {
      const uint4 u = __ldg(static_cast<const uint4*>(p) + q);
      r.w[4 * q] = u.x, r.w[4 * q + 1] = u.y, r.w[4 * q + 2] = u.z, r.w[4 * q + 3] = u.w;
    }
  } else if constexpr (NW == 2) {
    const uint2 u = __ldg(static_cast<const uint2*>(p));
    r.w[0] = u.x, r.w[1] = u.y;
  } else {
    static_assert(NW == 1, "a lane loads 4, 8, 16 or 32 bytes of a row");
    r.w[0] = __ldg(static_cast<const unsigned int*>(p));
  }
  return r;
}

template <int NW>
__device__ __forceinline__ Words<NW> zero_words() {
  Words<NW> r;
#pragma unroll
  for (int i = 0; i < NW; ++i) r.w[i] = 0u;
  return r;
}

template <typename scalar_t>
struct RowsParams {
  const scalar_t* __restrict__ input;
  const scalar_t* __restrict__ weight;
  const scalar_t* __restrict__ bias;  // nullptr: no bias
  scalar_t* __restrict__ output;
  int in_channels, out_channels, multiplier;
  int in_h, in_w, out_h, out_w;
  int pad_h;
  int shift_w;   // output column of a lane's first element minus its first input column (pad_w - P0)
  int x_start;   // first input column of strip 0 (a multiple of VEC, <= -shift_w)
  int band_rows, bands, strips;
  int64_t units;  // planes * bands * strips; one warp each
};

// A store of one value: streaming (st.global.cs, the row kernels' outputs are not read again soon) or plain.
template <bool kStreaming, typename T>
__device__ __forceinline__ void store_value(T* dst, const T& value) {
  if constexpr (kStreaming) {
    __stcs(dst, value);
  } else {
    *dst = value;
  }
}

// Writes VEC outputs (ox0 .. ox0 + VEC - 1 of row `row`, those inside [0, out_w)) with stores as wide as the address
// allows, streaming ones (st.global.cs) or plain ones as kStreaming says. The address's alignment is the
// same for every lane of the warp, so the branches are uniform except at the image's left and right edges.
template <typename scalar_t, int VEC, bool kStreaming>
__device__ __forceinline__ void store_outputs(scalar_t* __restrict__ row, int ox0, int out_w, const float (&v)[VEC]) {
  using E = Element<scalar_t>;
  constexpr int kPerWord = E::kPerWord;
  constexpr int NW = VEC / kPerWord;
  scalar_t* dst = row + ox0;
  const auto addr = reinterpret_cast<uintptr_t>(dst);
  if (ox0 >= 0 && ox0 + VEC <= out_w && addr % 4 == 0) {
    uint32_t w[NW];
#pragma unroll
    for (int i = 0; i < NW; ++i) {
      if constexpr (kPerWord == 1) {
        w[i] = E::bits(v[i]);
      } else {
        w[i] = E::bits(v[2 * i]) | (E::bits(v[2 * i + 1]) << 16);
      }
    }
    if constexpr (NW % 4 == 0) {
      if (addr % 16 == 0) {
#pragma unroll
        for (int i = 0; i < NW; i += 4) {
          store_value<kStreaming>(reinterpret_cast<uint4*>(dst) + i / 4,
                                  make_uint4(w[i], w[i + 1], w[i + 2], w[i + 3]));
        }
        return;
      }
    }
    if constexpr (NW % 2 == 0) {
      if (addr % 8 == 0) {
#pragma unroll
        for (int i = 0; i < NW; i += 2) {
          store_value<kStreaming>(reinterpret_cast<uint2*>(dst) + i / 2, make_uint2(w[i], w[i + 1]));
        }
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < NW; ++i) store_value<kStreaming>(reinterpret_cast<unsigned int*>(dst) + i, w[i]);
    return;
  }
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const int ox = ox0 + i;
    if (ox < 0 || ox >= out_w) continue;
    if constexpr (kPerWord == 1) {
      store_value<kStreaming>(reinterpret_cast<unsigned int*>(dst) + i, E::bits(v[i]));
    } else {
      store_value<kStreaming>(reinterpret_cast<unsigned short*>(dst) + i,
                              static_cast<unsigned short>(E::bits(v[i])));
    }
  }
}

// The halo geometry of a lane's window, in 32-bit words relative to the lane's own words.
template <typename scalar_t, int KW, int P0, int VEC>
struct Window {
  static constexpr int kPerWord = Element<scalar_t>::kPerWord;
  static constexpr int NW = VEC / kPerWord;                               // words a lane loads per row
  static constexpr int kColumns = VEC + KW - 1;                           // input columns a lane's outputs read
  static constexpr int kWordLo = floor_div(-P0, kPerWord);                // first window word
  static constexpr int kWordHi = floor_div(VEC - 1 - P0 + KW - 1, kPerWord);
  static constexpr int kWords = kWordHi - kWordLo + 1;
  static constexpr int kExtraLeft = -floor_div(kWordLo, NW);              // vectors needed left of the strip
  static constexpr int kExtraRight = floor_div(kWordHi, NW);              // ... and right of it
  static_assert(VEC % kPerWord == 0, "a lane loads whole words");
  static_assert(kExtraLeft + kExtraRight < 32, "halo wider than a warp");
};

// The rows of one band of output rows: outputs oy0 .. oy0 + rows - 1 read input rows iy0 + t for steps t in
// [0, steps); the steps in [t_lo, t_hi) read rows inside the image (none for a band that sees only padding).
struct Band {
  int oy0, rows, steps, iy0, t_lo, t_hi;

  __device__ __forceinline__ Band(int band, int band_rows, int out_h, int in_h, int pad_h, int kernel_h) {
    oy0 = band * band_rows;
    rows = min(band_rows, out_h - oy0);
    steps = rows + kernel_h - 1;
    iy0 = oy0 - pad_h;
    t_lo = max(0, -iy0);
    t_hi = max(t_lo, min(steps, in_h - iy0));
  }

  __device__ __forceinline__ bool inside(int t) const {
    return static_cast<unsigned>(t - t_lo) < static_cast<unsigned>(t_hi - t_lo);
  }
};

// The KH x KW taps of output channel co, widened to fp32.
template <typename scalar_t, int KH, int KW>
__device__ __forceinline__ void load_filter(const scalar_t* __restrict__ weight, int co, float (&w)[KH][KW]) {
#pragma unroll
  for (int ky = 0; ky < KH; ++ky) {
#pragma unroll
    for (int kx = 0; kx < KW; ++kx) {
      w[ky][kx] = static_cast<float>(weight[(static_cast<int64_t>(co) * KH + ky) * KW + kx]);
    }
  }
}

// One lane's walk down a band, shared by the kernels that stream rows (this one from registers,
// depthwise_conv2d_bulk.cuh from shared memory). Each step t first runs before_step(t, j), then, for rows inside
// the image, read_words(t, j, words) gives the lane's window words of input row t (Window::kWordLo .. kWordHi
// around its own); j = t % kUnroll is a compile-time constant once the loop is unrolled, so that callers may index
// register arrays with it. The lane adds the row into the KH output rows it feeds and stores each output row (VEC
// columns from ox0) after its last input row.
template <typename scalar_t, int KH, int KW, int P0, int VEC, int kUnroll, typename BeforeStep, typename ReadWords>
__device__ __forceinline__ void convolve_band(const Band& band, const float (&w)[KH][KW], float bias,
                                              scalar_t* __restrict__ out_plane, int out_w, int ox0,
                                              BeforeStep&& before_step, ReadWords&& read_words) {
  using E = Element<scalar_t>;
  using Win = Window<scalar_t, KW, P0, VEC>;
  static_assert(kUnroll % KH == 0, "t % KH must be a compile-time constant in the unrolled loop");
  // acc[s]: partial sums of the band's output row r with r % KH == s.
  float acc[KH][VEC];
#pragma unroll
  for (int s = 0; s < KH; ++s) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[s][v] = 0.0f;
  }
  // The loop runs whole groups of kUnroll steps; the steps past the band's end add and store nothing.
  for (int t0 = 0; t0 < band.steps; t0 += kUnroll) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const int t = t0 + j;
      before_step(t, j);
      // Output row t starts here: its first input row (ky = 0) is row t. Its sums start from the bias, in the first
      // product's FMA where row t is inside the image (a register copy a sum fewer for the issue-bound 16-bit rows).
      float(&fresh)[VEC] = acc[j % KH];
      if (band.inside(t)) {
        // Warp-uniform: rows of padding add nothing (ATen skips them), and neither do steps past the band.
        uint32_t words[Win::kWords];
        read_words(t, j, words);
        float window[Win::kColumns];
#pragma unroll
        for (int i = 0; i < Win::kColumns; ++i) {
          const int o = i - P0;
          const int wo = floor_div(o, Win::kPerWord);
          window[i] = E::to_float(words[wo - Win::kWordLo], o - wo * Win::kPerWord);
        }
        // Input row t feeds output row t - ky through tap row ky; each output gets its rows in ky order, its
        // columns in kx order. Slots of rows outside the band take harmless extra sums and are never stored.
#pragma unroll
        for (int ky = 0; ky < KH; ++ky) {
          float(&sum)[VEC] = acc[(j - ky + KH * kUnroll) % KH];
#pragma unroll
          for (int kx = 0; kx < KW; ++kx) {
#pragma unroll
            for (int v = 0; v < VEC; ++v) sum[v] = fmaf(w[ky][kx], window[v + kx], ky + kx == 0 ? bias : sum[v]);
          }
        }
      } else {
#pragma unroll
        for (int v = 0; v < VEC; ++v) fresh[v] = bias;
      }
      // Input row t was the last one output row r = t - (KH - 1) reads.
      const int r = t - (KH - 1);
      // fp32 rows leave as plain stores, 16-bit ones as streaming stores: what each measured faster on the seed
      // (bulk-copy kernel, H200, two rounds a call: fp32 0.5421 / 0.5418 ms plain against 0.5508 / 0.5500
      // streaming; bf16 0.2909 / 0.2912 streaming against 0.2927 / 0.2921 plain; 2026-11-26 23:45 UTC, the two
      // builds alternated: fp32 0.5446 / 0.5448 against 0.5543 / 0.5548).
      // The row's offset in int: plan_rows bounds a plane below 2^31 elements (a 64-bit product cost 6 instructions a
      // row more).
      if (static_cast<unsigned>(r) < static_cast<unsigned>(band.rows)) {
        constexpr bool kStreaming = sizeof(scalar_t) != 4;
        store_outputs<scalar_t, VEC, kStreaming>(out_plane + (band.oy0 + r) * out_w, ox0, out_w, acc[(j + 1) % KH]);
      }
    }
  }
}

// KH x KW filter; VEC elements per lane; P0: how many window columns lie left of a lane's first loaded column (the
// padding that makes output columns line up with input columns, so 0 or (KW - 1) / 2); rows are loaded kDepth
// steps ahead of their use.
template <typename scalar_t, int KH, int KW, int P0, int VEC, int kDepth, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) depthwise_rows_kernel(const RowsParams<scalar_t> p) {
  using Win = Window<scalar_t, KW, P0, VEC>;
  constexpr int NW = Win::NW;
  constexpr int kWordLo = Win::kWordLo, kWords = Win::kWords;
  constexpr int kExtraLeft = Win::kExtraLeft, kExtraRight = Win::kExtraRight;

  const int lane = threadIdx.x % 32;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (unit >= p.units) return;  // whole warps only: the shuffles below need every lane
  const int strip = static_cast<int>(unit % p.strips);
  const int64_t plane_band = unit / p.strips;
  const int64_t plane = plane_band / p.bands;  // n * out_channels + co
  const Band band(static_cast<int>(plane_band - plane * p.bands), p.band_rows, p.out_h, p.in_h, p.pad_h, KH);
  const int64_t n = plane / p.out_channels;
  const int co = static_cast<int>(plane - n * p.out_channels);
  const int ci = co / p.multiplier;

  const scalar_t* __restrict__ in_plane =
      p.input + (n * p.in_channels + ci) * (static_cast<int64_t>(p.in_h) * p.in_w);
  scalar_t* __restrict__ out_plane = p.output + plane * (static_cast<int64_t>(p.out_h) * p.out_w);

  float w[KH][KW];
  load_filter<scalar_t, KH, KW>(p.weight, co, w);
  const float bias = p.bias != nullptr ? static_cast<float>(p.bias[co]) : 0.0f;

  // Columns: this lane loads input columns [col, col + VEC) and produces outputs [col + shift_w, ... + VEC). The
  // warp's edge lanes also load the vector kExtraRight / kExtraLeft vectors beyond the strip and send it to the
  // lanes on the other edge (a shuffle by d lanes wraps around the warp there).
  const int x0 = p.x_start + strip * 32 * VEC;
  const int col = x0 + lane * VEC;
  const bool col_inside = col >= 0 && col < p.in_w;
  const bool has_extra = lane < kExtraRight || lane >= 32 - kExtraLeft;
  const int extra_col = x0 + (lane < kExtraRight ? 32 + lane : lane - 32) * VEC;
  const bool extra_inside = has_extra && extra_col >= 0 && extra_col < p.in_w;

  // Offsets inside the plane fit in int (plan_rows checks that a plane has fewer than 2^31 elements).
  const scalar_t* __restrict__ own_src = in_plane + (col_inside ? col : 0);
  const scalar_t* __restrict__ extra_src = in_plane + (extra_inside ? extra_col : 0);
  const auto load_row = [&](int t, Words<NW>& own, Words<NW>& extra) {
    const bool inside = band.inside(t);
    const int offset = inside ? (band.iy0 + t) * p.in_w : 0;
    own = inside && col_inside ? load_words<NW>(own_src + offset) : zero_words<NW>();
    if constexpr (kExtraLeft + kExtraRight > 0) {
      extra = inside && extra_inside ? load_words<NW>(extra_src + offset) : zero_words<NW>();
    }
  };

  // ring[t % kDepth] holds input row t from step t - kDepth, which loads it, to step t, which uses it.
  Words<NW> ring[kDepth], ring_extra[kDepth];
#pragma unroll
  for (int i = 0; i < kDepth; ++i) load_row(i, ring[i], ring_extra[i]);
  Words<NW> own, extra;

  // kUnroll: a multiple of KH and of kDepth, so that t % kDepth is a compile-time constant too.
  constexpr int kUnroll = KH % kDepth == 0 ? KH : KH * kDepth;
  convolve_band<scalar_t, KH, KW, P0, VEC, kUnroll>(
      band, w, bias, out_plane, p.out_w, col + p.shift_w,
      [&](int t, int j) {
        own = ring[j % kDepth], extra = ring_extra[j % kDepth];
        load_row(t + kDepth, ring[j % kDepth], ring_extra[j % kDepth]);
      },
      [&](int, int, uint32_t(&words)[kWords]) {
        // A word d vectors away comes from lane lane + d, or, past the warp's edge, from the extra vector of the
        // lane the shuffle wraps around to.
#pragma unroll
        for (int k = 0; k < kWords; ++k) {
          const int wo = kWordLo + k;
          const int d = floor_div(wo, NW);
          const int e = wo - d * NW;
          if (d == 0) {
            words[k] = own.w[e];
          } else {
            const bool send_extra = d > 0 ? lane < d : lane >= 32 + d;
            words[k] = __shfl_sync(kFullMask, send_extra ? extra.w[e] : own.w[e], (lane + d) & 31);
          }
        }
      });
}

// Per-filter choices. kVec: elements a lane loads per row, 16 bytes (8 for 16-bit 7x7, to bound the registers that
// its 7 rows of partial sums take).
// kDepth: rows in flight per lane (fewer for big filters, whose arithmetic covers more of the latency).
// kMinBlocks: CTAs an SM must hold (caps the registers). For 3x3, two rows in flight and 6 CTAs an SM (80 registers,
// no spills) beat three rows at 4 CTAs: seed shape on H200, fp32 0.5944 -> 0.5899 ms, bf16 0.3419 -> 0.3234 ms
// (tools/dev_depthwise_planes.py, 2026-11-26; 5 and 7 CTAs, one row, 8-byte loads all measured slower).
template <typename scalar_t, int KH, int KW>
struct RowsConfig {
  static constexpr int kVec = (sizeof(scalar_t) == 4 || KH * KW > 25) ? 4 : 8;
  static constexpr int kDepth = KH <= 2 ? 4 : (KH == 3 ? 2 : (KH == 4 ? KH : (KH == 6 ? 3 : 2)));
  static constexpr int kMinBlocks = KH == 3 ? 6 : 1;
};

// A launch of depthwise_rows_kernel: its parameters (data pointers aside) and grid size.
template <typename scalar_t>
struct RowsPlan {
  RowsParams<scalar_t> params;
  unsigned blocks;
};

// The launch for problem d on a device of sm_count SMs, or nullopt when the kernel does not take it (W not a
// multiple of VEC, coordinates past int, too many blocks). Host-only and free of CUDA calls.
template <typename scalar_t, int KW, int P0, int VEC>
std::optional<RowsPlan<scalar_t>> plan_rows(const DepthwiseGeometry& d, int sm_count) {
  constexpr int kStripCols = 32 * VEC;
  if (d.in_w % VEC != 0) return std::nullopt;
  // Coordinates stay in int: a plane has fewer than 2^31 elements; columns reach one strip plus the halo vectors
  // past the last strip, rows the band's end plus the filter.
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  for (const int64_t v : {d.in_h, d.in_w, d.out_h, d.out_w, d.pad_h, d.pad_w, d.in_channels, d.out_channels}) {
    if (v >= kIntMax / 8) return std::nullopt;
  }
  if (d.in_h * d.in_w >= kIntMax || d.out_h * d.out_w >= kIntMax) return std::nullopt;
  const int64_t shift_w = d.pad_w - P0;
  const int64_t x_start = int64_t{floor_div(static_cast<int>(-shift_w), VEC)} * VEC;
  const int64_t strips = (d.out_w - (x_start + shift_w) + kStripCols - 1) / kStripCols;
  if (std::abs(x_start) + (strips + 2) * kStripCols + std::abs(shift_w) >= kIntMax / 2) return std::nullopt;

  // Band height: tall bands re-read fewer halo rows, short ones give small problems enough warps. 32 rows (64
  // timed the same on the seed shape), halved while the grid would not give every SM at least 64 warps.
  const int64_t planes = d.batch * d.out_channels;
  int64_t band_rows = 32;
  while (band_rows > 4 && planes * ((d.out_h + band_rows - 1) / band_rows) * strips < int64_t{sm_count} * 64) {
    band_rows /= 2;
  }
  band_rows = std::min(band_rows, d.out_h);
  const int64_t bands = (d.out_h + band_rows - 1) / band_rows;
  const int64_t units = planes * bands * strips;
  const int64_t blocks = (units + kWarps - 1) / kWarps;
  if (blocks >= (int64_t{1} << 31)) return std::nullopt;

  RowsPlan<scalar_t> plan{};
  RowsParams<scalar_t>& p = plan.params;
  p.in_channels = static_cast<int>(d.in_channels);
  p.out_channels = static_cast<int>(d.out_channels);
  p.multiplier = static_cast<int>(d.multiplier);
  p.in_h = static_cast<int>(d.in_h);
  p.in_w = static_cast<int>(d.in_w);
  p.out_h = static_cast<int>(d.out_h);
  p.out_w = static_cast<int>(d.out_w);
  p.pad_h = static_cast<int>(d.pad_h);
  p.shift_w = static_cast<int>(shift_w);
  p.x_start = static_cast<int>(x_start);
  p.band_rows = static_cast<int>(band_rows);
  p.bands = static_cast<int>(bands);
  p.strips = static_cast<int>(strips);
  p.units = units;
  plan.blocks = static_cast<unsigned>(blocks);
  return plan;
}

template <typename scalar_t, int KH, int KW, int P0>
bool launch_rows_kernel(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        at::Tensor& output, const DepthwiseGeometry& d, cudaStream_t stream) {
  using C = RowsConfig<scalar_t, KH, KW>;
  constexpr size_t kAlign = std::min<size_t>(16, C::kVec * sizeof(scalar_t));  // the widest single load
  if (reinterpret_cast<uintptr_t>(input.const_data_ptr()) % kAlign != 0) return false;
  std::optional<RowsPlan<scalar_t>> plan = plan_rows<scalar_t, KW, P0, C::kVec>(d, multiprocessor_count());
  if (!plan) return false;
  RowsParams<scalar_t>& p = plan->params;
  p.input = input.const_data_ptr<scalar_t>();
  p.weight = weight.const_data_ptr<scalar_t>();
  p.bias = optional_data<scalar_t>(bias);
  p.output = output.mutable_data_ptr<scalar_t>();
  depthwise_rows_kernel<scalar_t, KH, KW, P0, C::kVec, C::kDepth, C::kMinBlocks>
      <<<plan->blocks, kThreads, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace rows

// Input columns a warp of the row-streaming kernel covers for problem d's filter (32 lanes of one vector each); rows
// narrower than that leave lanes idle, and the dispatch prefers the plane-block kernel for them.
template <typename scalar_t>
int64_t rows_strip_columns(const DepthwiseGeometry& d) {
  const auto columns = [](auto config) { return int64_t{32} * decltype(config)::kVec; };
  if (d.kernel_h == 7) return columns(rows::RowsConfig<scalar_t, 7, 7>{});
  if (d.kernel_h == 5) return columns(rows::RowsConfig<scalar_t, 5, 5>{});
  return columns(rows::RowsConfig<scalar_t, 3, 3>{});
}

namespace rows {

// Whether problem d is of the kind the row-streaming kernels take (this one and depthwise_conv2d_bulk.cuh): stride
// 1, dilation 1, a 3x3, 5x5 or 7x7 filter, contiguous NCHW tensors, a non-empty output.
inline bool streams_rows(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                         const at::Tensor& output, const DepthwiseGeometry& d) {
  if (d.stride_h != 1 || d.stride_w != 1 || d.dilation_h != 1 || d.dilation_w != 1) return false;
  if (d.kernel_h != d.kernel_w || (d.kernel_h != 3 && d.kernel_h != 5 && d.kernel_h != 7)) return false;
  if (!input.is_contiguous() || !output.is_contiguous() || !weight.is_contiguous() ||
      (bias.has_value() && bias->defined() && !bias->is_contiguous())) {
    return false;
  }
  return output.numel() > 0 && d.out_h > 0 && d.out_w > 0;
}

// Calls launch(K, P0) (std::integral_constant values) and returns its answer where problem d is of the kind the
// row-streaming kernels take (streams_rows, and fp32 / fp16 / bf16), or returns false. K x K is d's filter; P0 = 0
// for unpadded ("valid") convolutions and (K - 1) / 2 otherwise, so that the two common cases store outputs at the
// alignment of the input loads (other paddings are handled too, with narrower stores).
template <typename scalar_t, typename Launch>
bool launch_streaming(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                      const at::Tensor& output, const DepthwiseGeometry& d, Launch&& launch) {
  if constexpr (!std::is_same_v<scalar_t, float> && !std::is_same_v<scalar_t, at::Half> &&
                !std::is_same_v<scalar_t, at::BFloat16>) {
    return false;
  } else {
    if (!streams_rows(input, weight, bias, output, d)) return false;
    const auto for_size = [&](auto k) {
      constexpr int K = decltype(k)::value;
      if (d.pad_w == 0) return launch(k, std::integral_constant<int, 0>{});
      return launch(k, std::integral_constant<int, (K - 1) / 2>{});
    };
    if (d.kernel_h == 3) return for_size(std::integral_constant<int, 3>{});
    if (d.kernel_h == 5) return for_size(std::integral_constant<int, 5>{});
    return for_size(std::integral_constant<int, 7>{});
  }
}

}  // namespace rows

// Runs depthwise_conv2d on the row-streaming kernel and returns true, or returns false without doing anything when
// the problem is not one it handles. weight and bias must be contiguous (as depthwise_conv2d_into makes them);
// output must be non-empty.
template <typename scalar_t>
bool launch_depthwise_rows(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::Tensor& output, const DepthwiseGeometry& d, cudaStream_t stream) {
  return rows::launch_streaming<scalar_t>(input, weight, bias, output, d, [&](auto k, auto p0) {
    constexpr int K = decltype(k)::value;
    return rows::launch_rows_kernel<scalar_t, K, K, decltype(p0)::value>(input, weight, bias, output, d, stream);
  });
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
