// convops::conv_transpose2d / conv_transpose3d with stride 1, dilation 1 and one group (the KernelBench L1-65 and
// L1-70 seeds) on Hopper's warpgroup MMA, TF32 (operands rounded to nearest, as cuDNN rounds them), bf16 or fp16.
//
// With stride 1 a transposed convolution is a correlation with the flipped kernel over the input padded by
// K - 1 - padding: out[o] = sum_j in[o - shift + j] W[K - 1 - j] per dimension (shift = K - 1 - padding). A block
// computes a tile of one output plane d: tile_h rows x tile_w columns, for N output channels. It brings the input
// brick that tile needs (K_d planes x brick_h rows x brick_w columns, zero outside the input) into shared memory
// once per k-step of channels, and every tap then reads that brick at a constant offset:
//
//   The brick is K-major for wgmma without swizzling: [channel group][pixel][16 bytes of channels] (4 fp32 or 8
//   16-bit channels a group; two groups make one k-step of 32 bytes a pixel). Pixels are numbered flat over the
//   brick, (z * brick_h + y) * brick_w + x, and the tile's outputs too: output (row r, column c) is GEMM row
//   m = r * brick_w + c. Output m and tap (j_d, j_h, j_w) then read brick pixel m + (j_d * brick_h + j_h) * brick_w
//   + j_w: the same shift for all rows, so the tap's A operand is the brick itself, its descriptor's start address
//   moved by 16 bytes a pixel. Rows whose column c is tile_w or more (the last K_w - 1 of each brick row) and rows
//   past the tile compute values nobody stores: the price of one copy of the brick serving all taps.
//
// (kernels-research.md section 2 derives this design: with N = C_out = 24 an im2col GEMM would move 39 GB from L2.)
//
// Where the time goes (L1-70 seed, batch 8, H200, 2026-11-27 19:01 UTC, bench/PERF_NOTES.md): TF32 3.85 ms, bf16
// 1.94. The MMAs alone would take ~1.9 ms in TF32: an m64n24k8 reads (64 + 24) x 32 bytes of shared memory for 12
// cycles of tensor work, so it runs at ~22 cycles (a microbenchmark: 54% of the TF32 rate; N = 64 reaches 99%). The
// brick's stores share that shared-memory port: the 16-bit units in quartets (UnitPlace), free of bank conflicts,
// took bf16 from 2.08 to 1.93 ms. The rest is the brick's loads, each step's barrier and each tile's epilogue,
// which the MMAs do not cover (bench/PERF_NOTES.md: the kernel with each part switched off).
//
// Pipeline: two shared-memory stages. A k-step's brick is loaded into registers as vectors of 4 columns of one
// channel (load_units: the input is NCHW, so a pixel's 16-byte row of channels gathers 4 or 8 planes), transposed,
// rounded to TF32 where it applies and stored into its stage while the previous k-step's MMAs run; the weights come
// by cp.async. Blocks are persistent and walk their tiles' k-steps as one stream, so the next tile's first loads
// overlap this tile's last MMAs; the accumulators leave through a shared-memory slice a warp, bias added
// (store_tile), past the two stages. Channel tiles of 64 whose stage fits three times take the warp-specialized form
// instead (conv_transpose_shift_gemm_ws.cuh: a producer warpgroup, couts as wgmma's M, three or four stages).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "cuda/conv_transpose_math.cuh"
#include "cuda/conv_transpose_params.cuh"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"
#include "cuda/wgmma.cuh"

namespace convops {
namespace cuda {
namespace shift_gemm {

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kStepBytes = 32;   // a pixel's channels of one k-step: two 16-byte groups
constexpr int kGroupBytes = 16;  // a core matrix row
constexpr int kMaxTileRows = 16;

struct Params {
  const void* input;   // (N, C_in, D, H, W) (2-D calls come with D = 1), strides as vectors_fit says
  const void* weight;  // prepared: (co_blocks, k_steps, taps, N / 8, 2, 8, 16 bytes), see prepare_shift_weight
  const void* bias;    // (C_out) or null
  void* output;        // (N, C_out, OD, OH, OW), any strides
  int64_t in_stride[5], out_stride[5];
  int in_size[3], out_size[3], kernel[3];
  int shift[3];  // kernel - 1 - padding: input coordinate = output coordinate - shift + tap
  int cin, cout;
  int k_steps;
  int tile_h, tile_w;
  int brick_h, brick_w;   // brick rows and columns (the first `skew` columns before the first one the tile reads)
  int skew;               // (-shift[2]) mod 4: the brick starts at a multiple of 4 (load_units)
  int ragged_rows;        // the input width is not a multiple of 4 (load_units)
  int brick_pixels;       // pixels of one channel group's plane, past the brick where the tile's rows read further
  int units;              // load_units' units of a k-step: 2 groups x K_d brick_h rows x column blocks
  int rows_in_group;      // K_d brick_h
  int blocks;             // column blocks of 4 a brick row
  FastDivmod blocks_div;   // column blocks of 4 a brick row
  FastDivmod pairs_div;    // pairs of column blocks a brick row (unit quartets)
  FastDivmod brick_h_div;
  int weight_step_bytes;  // the weights of one k-step: taps x N x 32 bytes
  int stage_bytes;        // brick + weights of one k-step
  int pair_stores;        // the output takes store_tile's 2-element stores (epilogue_pairs_fit)
  int total_tiles;
  FastDivmod co_blocks_div, tiles_w_div, tiles_h_div, out_d_div;  // tile index -> (n, od, h tile, w tile, block)
  FastDivmod brick_w_div;  // GEMM row -> (tile row, column)
  int stages;              // the warp-specialized kernel's stages (conv_transpose_shift_gemm_ws.cuh)
  int producer_halves;     // ... and the halves of a k-step's unit indices its producer takes (1 or 2)
};

// A tile: output plane od of image n, rows oh0 .., columns ow0 .., channels co_block * N ...
struct Tile {
  int n, od, oh0, ow0, co_block;
};

__device__ __forceinline__ Tile tile_at(const Params& p, int tile_index) {
  Tile t;
  int rest;
  t.co_block = p.co_blocks_div.divmod(tile_index, rest);
  t.ow0 = p.tiles_w_div.divmod(rest, rest) * p.tile_w;
  t.oh0 = p.tiles_h_div.divmod(rest, rest) * p.tile_h;
  t.od = p.out_d_div.divmod(rest, t.n);
  return t;
}

// Where a block's stream of (tile, k-step) stands: tiles blockIdx.x, + gridDim.x, ..., their k-steps in order. Moved
// on once a step: a tile is decoded once, not at every step (decoding with 64-bit divisions at every step cost
// ~1.6 us a step, as much as the step's MMAs, H200 2026-11-27).
struct Cursor {
  int tile_index, k;
  Tile tile;
};

__device__ __forceinline__ Cursor first_step(const Params& p) {
  const int first = static_cast<int>(blockIdx.x);
  return {first, 0, first < p.total_tiles ? tile_at(p, first) : Tile{}};
}

__device__ __forceinline__ Cursor next_step(const Params& p, Cursor c) {
  if (++c.k == p.k_steps) {
    c.k = 0;
    c.tile_index += static_cast<int>(gridDim.x);
    if (c.tile_index < p.total_tiles) c.tile = tile_at(p, c.tile_index);
  }
  return c;
}

// A thread's share of one k-step's brick, loaded into registers while the previous k-step's MMAs run and stored
// into the brick's K-major layout after them. A unit is 4 brick columns x one 16-byte channel group of one brick row:
// TF32 loads 4 channels x 16 bytes (4 columns each), 16-bit 8 channels x 8 bytes; it stores 4 pixels x 16 bytes (the
// 4 x 4 / 8 x 4 transpose happens in registers; TF32 rounds to nearest on the way). Bricks start at an input column
// that is a multiple of 4 (the vector loads' alignment), `skew` columns before the first one the tile reads.
// Units a thread: 16 registers each, next to the accumulators (N / 2 x MB registers: 48 at N = 24, up to 96 at 64).
__host__ __device__ constexpr int max_units(int n_tile) { return n_tile == 24 ? 5 : 3; }

template <int kUnits>
struct Units {
  uint32_t word[kUnits][16];  // TF32: [channel][column]; 16-bit: [channel][column pair]
};

// Unit u: channel group, brick row (z, y) and column block, in one of two orders:
// - rows: consecutive units take consecutive column blocks of a row (the loads of a warp: one or two rows);
// - quartets (16-bit bricks whose rows are 2 pixels mod 4 long, Plan::quartets): a quarter warp takes 4 consecutive
//   rows x 2 consecutive column blocks, the second block's threads storing their columns in the order 1, 0, 3, 2 (for
//   16-bit words only a PRMT selector). Its eight 16-byte stores then meet eight distinct bank groups (the rows start
//   2 pixels apart mod 8) where rows order has four threads on each of two (ncu, L1-70 bf16, H200 2026-11-27 18:51
//   UTC: 17.4 M of the 23.9 M shared-store wavefronts were conflicts; quartets 0.6 M of 7.4 M, the kernel 7% faster).
//   TF32 measured no faster in quartets: the flip costs it a PRMT a word, and its 16-byte loads lose more coalescing.
struct UnitPlace {
  int group, z, y, column;
  int row;     // z brick_h + y
  bool valid;  // a unit of the brick (the indices past it pad the last row quartet or block pair)
  int flip;    // 1: stores its columns in the order 1, 0, 3, 2
};

template <bool kQuartets>
__device__ __forceinline__ UnitPlace unit_place(const Params& p, int u) {
  UnitPlace at;
  int row;
  if constexpr (kQuartets) {
    const int lane8 = u & 7, block_in_pair = lane8 >> 2;
    int quartet;
    const int block = 2 * p.pairs_div.divmod(u >> 3, quartet) + block_in_pair;
    row = 4 * quartet + (lane8 & 3);
    at.column = 4 * block;
    at.valid = block < p.blocks && row < 2 * p.rows_in_group;
    at.flip = block_in_pair;
  } else {
    at.column = 4 * p.blocks_div.divmod(u, row);
    at.valid = u < p.units;
    at.flip = 0;
  }
  at.group = row >= p.rows_in_group;
  at.row = row - at.group * p.rows_in_group;
  at.y = p.brick_h_div.divmod(at.row, at.z);
  return at;
}

// The brick's first input column: a multiple of 4 (tile widths are multiples of 4, so the skew is the problem's).
__device__ __forceinline__ int brick_column0(const Params& p, const Tile& t) { return t.ow0 - p.shift[2] - p.skew; }

// Units first, first + stride, ...: the shift kernel's 256 threads take u = thread + 256 i, the warp-specialized
// kernel's producer warpgroup u = thread + 128 i.
template <class Math, bool kQuartets, int kUnits>
__device__ __forceinline__ void load_units(const Params& p, const Tile& t, int step, Units<kUnits>& units, int first,
                                           int stride) {
  using Input = typename Math::Input;
  constexpr int kChannels = 4 * Math::kChannelsPerWord;  // a 16-byte group
  const Input* in = static_cast<const Input*>(p.input);
  const int column0 = brick_column0(p, t);
#pragma unroll
  for (int i = 0; i < kUnits; ++i) {
    const int u = first + i * stride;
    const UnitPlace at = unit_place<kQuartets>(p, u);
    const int id = t.od - p.shift[0] + at.z, ih = t.oh0 - p.shift[1] + at.y, iw = column0 + at.column;
    const bool row = at.valid && id >= 0 && id < p.in_size[0] && ih >= 0 && ih < p.in_size[1] && iw >= 0 &&
                     iw < p.in_size[2];
    const bool whole = iw + 4 <= p.in_size[2];  // else the row's last columns: element by element
    const int c0 = step * 2 * kChannels + at.group * kChannels;
    const Input* src = in + static_cast<int64_t>(t.n) * p.in_stride[0] + static_cast<int64_t>(c0) * p.in_stride[1] +
                       (row ? static_cast<int64_t>(id) * p.in_stride[2] + static_cast<int64_t>(ih) * p.in_stride[3] + iw
                            : 0);
    // Straight-line predicated loads: all of a thread's loads go out before the first result is needed.
#pragma unroll
    for (int c = 0; c < kChannels; ++c) {
      const bool ok = row && whole && c0 + c < p.cin;
      const Input* at_c = src + c * p.in_stride[1];
      if constexpr (Math::kChannelsPerWord == 1) {
        const uint4 v = load_or_zero<uint4>(ok, at_c);
        units.word[i][4 * c] = v.x, units.word[i][4 * c + 1] = v.y;
        units.word[i][4 * c + 2] = v.z, units.word[i][4 * c + 3] = v.w;
      } else {
        const uint2 v = load_or_zero<uint2>(ok, at_c);
        units.word[i][2 * c] = v.x, units.word[i][2 * c + 1] = v.y;
      }
    }
    // Rows whose width is not a multiple of 4 (a wider allocation's: vectors_fit) end in 1-3 columns loaded element
    // by element. A branch the whole grid takes alike: issued for every unit, even predicated off, these loads were
    // half of the 16-bit kernel's load instructions (ncu, H200, 2026-11-27 17:4x UTC).
    if (p.ragged_rows) {
      const bool edge = row && !whole;
#pragma unroll
      for (int c = 0; c < kChannels; ++c) {
        const bool ok = edge && c0 + c < p.cin;
        const Input* at_c = src + c * p.in_stride[1];
        if constexpr (Math::kChannelsPerWord == 1) {
          units.word[i][4 * c] |= load_or_zero<uint32_t>(ok, at_c);
          units.word[i][4 * c + 1] |= load_or_zero<uint32_t>(ok && iw + 1 < p.in_size[2], at_c + 1);
          units.word[i][4 * c + 2] |= load_or_zero<uint32_t>(ok && iw + 2 < p.in_size[2], at_c + 2);
        } else {
          units.word[i][2 * c] |=
              load_or_zero<uint16_t>(ok, at_c) |
              static_cast<uint32_t>(load_or_zero<uint16_t>(ok && iw + 1 < p.in_size[2], at_c + 1)) << 16;
          units.word[i][2 * c + 1] |= load_or_zero<uint16_t>(ok && iw + 2 < p.in_size[2], at_c + 2);
        }
      }
    }
  }
}

// The units' pixels leave in column order: the 8 threads of a quarter warp then meet 4 at a time on a 16-byte bank
// group (ncu, H200, 2026-11-27: 14.5-way conflicts, 73% of the store wavefronts), yet storing them in a rotated order,
// conflict-free, measured no faster for the selects it costs (17:36 UTC: L1-70 TF32 4.19 against 4.27 ms, bf16 2.51
// against 2.43, L1-65 TF32 1.86 against 1.82).
template <class Math, bool kQuartets, int kUnits>
__device__ __forceinline__ void store_units(const Params& p, const Units<kUnits>& units, unsigned char* stage, int first,
                                            int stride) {
  static_assert(!kQuartets || Math::kChannelsPerWord == 2, "quartets flip 16-bit columns only");
#pragma unroll
  for (int i = 0; i < kUnits; ++i) {
    const int u = first + i * stride;
    const UnitPlace at = unit_place<kQuartets>(p, u);
    unsigned char* dst = stage + at.group * p.brick_pixels * kGroupBytes + (at.row * p.brick_w + at.column) * kGroupBytes;
    // Iteration j stores column j ^ flip: the even iterations at dst_even, the odd ones at dst_odd (+ 2 columns).
    unsigned char* dst_even = dst + at.flip * kGroupBytes;
    unsigned char* dst_odd = dst + (1 - at.flip) * kGroupBytes;
    const uint32_t* w = units.word[i];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint4 v;
      if constexpr (Math::kChannelsPerWord == 1) {
        v = make_uint4(tf32_bits(__uint_as_float(w[j])), tf32_bits(__uint_as_float(w[4 + j])),
                       tf32_bits(__uint_as_float(w[8 + j])), tf32_bits(__uint_as_float(w[12 + j])));
      } else {  // word k: channels 2k, 2k + 1 at column pair k; column j ^ flip is that pair's half (j ^ flip) % 2
        constexpr uint32_t kLow = 0x5410, kHigh = 0x7632;
        const uint32_t selector = (j % 2) ^ at.flip ? kHigh : kLow;
        v = make_uint4(__byte_perm(w[j / 2], w[2 + j / 2], selector), __byte_perm(w[4 + j / 2], w[6 + j / 2], selector),
                       __byte_perm(w[8 + j / 2], w[10 + j / 2], selector),
                       __byte_perm(w[12 + j / 2], w[14 + j / 2], selector));
      }
      // The row's last block may pass brick_w: those columns belong to the next row, written by its own unit.
      unsigned char* to = (j % 2 ? dst_odd : dst_even) + (j / 2) * 2 * kGroupBytes;
      if (at.valid && at.column + (j ^ at.flip) < p.brick_w) *reinterpret_cast<uint4*>(to) = v;
    }
  }
}

// The weights of k-step `step` of the tile's channel block: contiguous in the prepared weight, in wgmma's layout.
__device__ __forceinline__ const unsigned char* weights_of(const Params& p, const Tile& t, int step) {
  return static_cast<const unsigned char*>(p.weight) +
         (static_cast<int64_t>(t.co_block) * p.k_steps + step) * p.weight_step_bytes;
}

// ... copied by the shift kernel's threads, 16-byte cp.async each.
__device__ __forceinline__ void copy_weights(const Params& p, const Tile& t, int step, unsigned char* dst) {
  const unsigned char* src = weights_of(p, t, step);
  for (int v = threadIdx.x; v < p.weight_step_bytes / 16; v += kThreads) cp_async_zfill<16>(dst + 16 * v, src + 16 * v, true);
}

// acc (64 x N) (+)= A (64 pixels x one k-step) * B (one k-step x N), both in shared memory.
template <class Math, int N>
__device__ __forceinline__ void mma(float (&acc)[N / 2], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (std::is_base_of_v<Tf32Mma, Math>) {
    if constexpr (N == 24) wgmma::mma_m64n24k8_tf32(acc, a, b, accumulate);
    else wgmma::mma_m64n64k8_tf32(acc, a, b, accumulate);
  } else {
    constexpr bool kBf16 = std::is_same_v<Math, Bf16Mma>;
    if constexpr (N == 24) wgmma::mma_m64n24k16<kBf16>(acc, a, b, accumulate);
    else wgmma::mma_m64n64k16<kBf16>(acc, a, b, accumulate);
  }
}

// Warpgroup wg's MMAs of one k-step: every tap, for its MB blocks of 64 GEMM rows. The descriptors are plain 64-bit
// sums of warp-uniform values (start addresses in 16-byte units stay far below the field's 2^14, so nothing carries
// out of it), which the compiler keeps in uniform registers: built per thread, each wgmma had cost ~8 instructions
// of address arithmetic and register moves (ncu SASS, H200 2026-11-27: 25 instructions an HGMMA in all).
template <class Math, int N, int MB>
__device__ __forceinline__ void multiply_step(const Params& p, const unsigned char* stage, int column_skew,
                                              bool first_step, int wg, float (&acc)[MB][N / 2]) {
  constexpr uint64_t kTapUnits = N * kStepBytes / 16, kBlockUnits = 64;  // a tap's weights, a row block: 16-byte units
  const uint64_t a_first = wgmma::descriptor(stage, p.brick_pixels * kGroupBytes, wgmma::kCoreBytes) +
                           static_cast<uint64_t>(wg * MB * 64 + column_skew);
  uint64_t b = wgmma::descriptor(stage + 2 * p.brick_pixels * kGroupBytes, wgmma::kCoreBytes, 2 * wgmma::kCoreBytes);
  bool accumulate = !first_step;
  for (int jd = 0; jd < p.kernel[0]; ++jd) {
    for (int jh = 0; jh < p.kernel[1]; ++jh) {
      uint64_t a = a_first + static_cast<uint64_t>((jd * p.brick_h + jh) * p.brick_w);
      for (int jw = 0; jw < p.kernel[2]; ++jw, ++a, b += kTapUnits) {
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) mma<Math, N>(acc[mb], a + mb * kBlockUnits, b, accumulate);
        accumulate = true;
      }
    }
  }
}

// Couts as wgmma's M (the warp-specialized kernel, channel tiles of 64): A = the k-step's weights of a tap (64 couts x
// 32 bytes, the layout that serves as B above: K-major, 8-row blocks 256 bytes apart), B = the brick at the tap's
// shift (the A operand above, K-major alike), one m64n<64 MB> instruction a tap for the warpgroup's MB blocks of 64
// GEMM rows. An m64n64 instruction reads (64 + 64) x 32 bytes of shared memory for 32 tensor-core cycles (TF32), 128
// bytes a cycle; m64n192 reads (64 + 192) x 32 bytes for 96 cycles. Alone, in the shift kernel, it measured no faster
// (H200, 2026-11-27 20:5x UTC: L1-65 TF32 1.555 against 1.547 ms, bf16 0.915 against 0.885); what it gives the
// warp-specialized kernel is an epilogue whose shared memory is 8 couts x 64 rows a warp (store_tile_cout_rows,
// 18 KB in TF32 against the other orientation's 40), hence a third stage.
// acc[mb] holds the transpose of the other orientation's block: lane (g, q) of warp w has couts 16 w + g (+ 8) and
// GEMM rows 64 mb + 8 j + 2 q (+ 1) of the warpgroup's.
template <class Math, int MB>
__device__ __forceinline__ void mma_cout_rows(float (&acc)[MB][32], uint64_t a, uint64_t b, bool accumulate) {
  // The MB blocks are the instruction's 32 MB accumulators in order (the m64nN fragment: 8 columns per 4 registers).
  auto& flat = reinterpret_cast<float(&)[MB * 32]>(acc);
  if constexpr (std::is_base_of_v<Tf32Mma, Math>) {
    if constexpr (MB == 1) wgmma::mma_m64n64k8_tf32(flat, a, b, accumulate);
    else if constexpr (MB == 2) wgmma::mma_m64n128k8_tf32(flat, a, b, accumulate);
    else wgmma::mma_m64n192k8_tf32(flat, a, b, accumulate);
  } else {
    constexpr bool kBf16 = std::is_same_v<Math, Bf16Mma>;
    if constexpr (MB == 1) wgmma::mma_m64n64k16<kBf16>(flat, a, b, accumulate);
    else if constexpr (MB == 2) wgmma::mma_m64n128k16<kBf16>(flat, a, b, accumulate);
    else wgmma::mma_m64n192k16<kBf16>(flat, a, b, accumulate);
  }
}

template <class Math, int MB>
__device__ __forceinline__ void multiply_step_cout_rows(const Params& p, const unsigned char* stage, int column_skew,
                                                        bool first_step, int wg, float (&acc)[MB][32]) {
  static_assert(MB >= 1 && MB <= 3, "m64n64, m64n128 or m64n192");
  constexpr uint64_t kTapUnits = 64 * kStepBytes / 16;  // a tap's weights in 16-byte units
  uint64_t a = wgmma::descriptor(stage + 2 * p.brick_pixels * kGroupBytes, wgmma::kCoreBytes, 2 * wgmma::kCoreBytes);
  const uint64_t b_first = wgmma::descriptor(stage, p.brick_pixels * kGroupBytes, wgmma::kCoreBytes) +
                           static_cast<uint64_t>(wg * MB * 64 + column_skew);
  bool accumulate = !first_step;
  for (int jd = 0; jd < p.kernel[0]; ++jd) {
    for (int jh = 0; jh < p.kernel[1]; ++jh) {
      uint64_t b = b_first + static_cast<uint64_t>((jd * p.brick_h + jh) * p.brick_w);
      for (int jw = 0; jw < p.kernel[2]; ++jw, ++b, a += kTapUnits) {
        mma_cout_rows<Math, MB>(acc, a, b, accumulate);
        accumulate = true;
      }
    }
  }
}

// The bias of the channels lane (g, q) holds, 8 j + 2 q (+ 1) of the tile's block (0 past C_out or without one).
template <class Math, int N>
__device__ __forceinline__ void load_bias(const Params& p, int co0, int q, float (&bias_of)[N / 4]) {
  using Input = typename Math::Input;
  const Input* bias = static_cast<const Input*>(p.bias);
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int co = co0 + 8 * j + 2 * q + e;
      bias_of[2 * j + e] = bias != nullptr && co < p.cout ? Math::to_acc(bias[co]) : 0.f;
    }
  }
}

// GEMM row m of tile t -> the address of its output element in channel 0 (`image`: the output's tile image and
// plane), and whether the tile stores it (rows past the tile and the brick's extra columns do not).
template <class Input>
__device__ __forceinline__ Input* output_of(const Params& p, const Tile& t, Input* image, int m, bool& inside) {
  int r;
  const int c = p.brick_w_div.divmod(m, r);
  const int oh = t.oh0 + r, ow = t.ow0 + c;
  inside = r < p.tile_h && c < p.tile_w && oh < p.out_size[1] && ow < p.out_size[2];
  return image + static_cast<int64_t>(inside ? oh : 0) * p.out_stride[3] +
         static_cast<int64_t>(inside ? ow : 0) * p.out_stride[4];
}

// Two elements of adjacent pixels as one word (8 bytes in fp32, 4 in 16-bit).
template <class Input>
using PixelPair = std::conditional_t<sizeof(Input) == 4, uint2, uint32_t>;

// Pixels m and m + 1 of one channel (`both`: their two elements) at at0 and at1: one vector store where `together`
// (pair_stores, both inside), else each pixel that is inside, alone. Predicated, no branches.
template <class Input, class Pair>
__device__ __forceinline__ void store_pixel_pair(bool channel, bool together, bool first, bool second, Input* at0,
                                                 Input* at1, Pair both) {
  static_assert(sizeof(Pair) == 2 * sizeof(Input), "a pair of elements");
  Input v[2];
  memcpy(v, &both, sizeof(Pair));
  store_if(channel && together, reinterpret_cast<Pair*>(at0), both);
  store_if(channel && first && !together, at0, v[0]);
  store_if(channel && second && !together, at1, v[1]);
}

// The tile's outputs, through shared memory. Lane (g, q) of warp w holds GEMM rows 16 w + g (+ 8) of each block
// and channels 8 j + 2 q (+ 1); each warp writes its 16 rows x N channels (bias added, converted) into its own
// slice, [channel][16 pixels + pad], and stores them back as pairs of adjacent pixels: one store instruction writes
// 16 whole pixels of 4 channels. The epilogue sits on the critical path between a tile's last MMA and the next
// tile's first (18% of L1-65 bf16, 7-14% of L1-70: the kernel without it, H200 2026-11-27 19:07 UTC). Against
// store_tile_direct (H200, same builds): L1-65 TF32 1.530 against 1.575 ms, bf16 0.875 / 0.903, L1-70 TF32 3.80 /
// 3.85 (19:14-19:19 UTC), but L1-70 bf16 (16-bit, N = 24) 1.99 against 1.93, its kernel's registers 248 against
// 198: that kernel keeps the direct stores (staged_epilogue).
__host__ __device__ constexpr int epilogue_pitch(int element_bytes) {  // a channel row: 16 pixels, padded for the banks
  return element_bytes == 4 ? 20 : 40;
}
__host__ __device__ constexpr bool staged_epilogue(int n_tile, int element_bytes) {
  return !(n_tile == 24 && element_bytes == 2);
}
__host__ __device__ constexpr int epilogue_bytes(int n_tile, int element_bytes) {  // past the two stages
  return staged_epilogue(n_tile, element_bytes) ? (kThreads / 32) * n_tile * epilogue_pitch(element_bytes) * element_bytes
                                                : 0;
}

template <class Math, int N, int MB>
__device__ __forceinline__ void store_tile_staged(const Params& p, const Tile& t, int wg, const float (&acc)[MB][N / 2],
                                                  unsigned char* scratch) {
  using Input = typename Math::Input;
  constexpr int kPitch = epilogue_pitch(sizeof(Input));
  Input* out = static_cast<Input*>(p.output);
  const int warp_in_wg = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  Input* slice = reinterpret_cast<Input*>(scratch) + (threadIdx.x / 32) * N * kPitch;
  const int64_t image = static_cast<int64_t>(t.n) * p.out_stride[0] + static_cast<int64_t>(t.od) * p.out_stride[2];
  const int co0 = t.co_block * N;
  float bias_of[N / 4];
  load_bias<Math, N>(p, co0, q, bias_of);
  const int pair = lane % 8;  // the read-back: channel rows lane / 8 + 4 i, pixels 2 pair and 2 pair + 1
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) {
    // Every accumulator goes to shared memory unconditionally (no divergent read of the wgmma registers: C7520).
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          slice[(8 * j + 2 * q + e) * kPitch + g + 8 * half] =
              Math::from_acc(acc[mb][4 * j + 2 * half + e] + bias_of[2 * j + e]);
        }
      }
    }
    __syncwarp();
    const int m = (wg * MB + mb) * 64 + 16 * warp_in_wg + 2 * pair;
    bool first, second;
    Input* at0 = output_of<Input>(p, t, out + image, m, first);
    Input* at1 = output_of<Input>(p, t, out + image, m + 1, second);
    // pair_stores: the two pixels are adjacent in one output row and the pair's address is aligned to it.
    const bool together = p.pair_stores && first && second;
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const int ch = lane / 8 + 4 * i, co = co0 + ch;
      const bool channel = co < p.cout;
      const int64_t offset = static_cast<int64_t>(channel ? co : 0) * p.out_stride[1];
      store_pixel_pair(channel, together, first, second, at0 + offset, at1 + offset,
                       *reinterpret_cast<const PixelPair<Input>*>(slice + ch * kPitch + 2 * pair));
    }
    __syncwarp();  // the slice is read before the next block overwrites it
  }
}

// The tile's outputs straight from the accumulators, bias added: a store instruction writes 8 consecutive pixels of
// 4 channels (store_tile_staged's layout of the accumulators). Where store_tile_staged is not measured faster.
template <class Math, int N, int MB>
__device__ __forceinline__ void store_tile_direct(const Params& p, const Tile& t, int wg, const float (&acc)[MB][N / 2]) {
  using Input = typename Math::Input;
  Input* out = static_cast<Input*>(p.output);
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int64_t image = static_cast<int64_t>(t.n) * p.out_stride[0] + static_cast<int64_t>(t.od) * p.out_stride[2];
  const int co0 = t.co_block * N;
  float bias_of[N / 4];
  load_bias<Math, N>(p, co0, q, bias_of);
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      bool inside;
      Input* dst = output_of<Input>(p, t, out + image, (wg * MB + mb) * 64 + 16 * warp + g + 8 * half, inside);
      // Predicated stores, no branches: see store_if.
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int co = co0 + 8 * j + 2 * q + e;
          store_if(inside && co < p.cout, dst + static_cast<int64_t>(co < p.cout ? co : 0) * p.out_stride[1],
                   Math::from_acc(acc[mb][4 * j + 2 * half + e] + bias_of[2 * j + e]));
        }
      }
    }
  }
}

// The cout-rows orientation's outputs (the warp-specialized kernel's), through shared memory. Lane (g, q) of warp w
// holds couts 16 w + g (+ 8) of GEMM rows 8 j + 2 q (+ 1) of each block; each warp writes a half's 8 couts x 64 rows
// (bias added, converted) into its slice, [cout][64 rows + pad], and reads them back a cout at a time, so that a store
// instruction writes 64 consecutive pixels of one cout as pixel pairs (256 bytes in TF32, 128 in 16-bit) where the
// accumulators' own layout gives it 8 pixels of each of 8 couts (8 lines). The epilogue holds the tensor cores up
// (L1-65, H200 2026-11-27 22:16 UTC, the kernel without its stores: TF32 1.08-1.14 ms against 1.31-1.37, bf16 0.60
// against 0.80-0.82), and the global stores' L1 wavefronts compete with wgmma's shared-memory reads, so a warpgroup a
// k-step behind the other, whose epilogues then overlap the other's MMAs, measured no faster. Through shared memory
// (22:32 UTC, against the stores straight from the accumulators at 22:16): TF32 1.24-1.31 ms, bf16 0.74-0.76.
constexpr int kCoutRowsPitch = 72;  // elements: the 8 rows start 32 (TF32) or 16 bytes (16-bit) apart mod 128 bytes
__host__ __device__ constexpr int cout_rows_epilogue_bytes(int element_bytes) {  // past the warp-specialized stages
  return (kThreads / 32) * 8 * kCoutRowsPitch * element_bytes;
}

template <class Math, int MB>
__device__ __forceinline__ void store_tile_cout_rows(const Params& p, const Tile& t, int wg, const float (&acc)[MB][32],
                                                     int thread, unsigned char* scratch) {
  using Input = typename Math::Input;
  using Pair = PixelPair<Input>;
  const Input* bias = static_cast<const Input*>(p.bias);
  Input* out = static_cast<Input*>(p.output);
  const int warp = thread / 32 % 4, lane = thread % 32, g = lane / 4, q = lane % 4;
  Input* slice = reinterpret_cast<Input*>(scratch) + (thread / 32) * 8 * kCoutRowsPitch;
  Input* const image = out + static_cast<int64_t>(t.n) * p.out_stride[0] + static_cast<int64_t>(t.od) * p.out_stride[2];
  float bias_of[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int co = t.co_block * 64 + 16 * warp + g + 8 * half;
    bias_of[half] = bias != nullptr && co < p.cout ? Math::to_acc(bias[co]) : 0.f;
  }
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) {
    // The read-back's pixels, the same for each cout: GEMM rows m and m + 1 of the block.
    const int m = (wg * MB + mb) * 64 + 2 * lane;
    bool first, second;
    Input* const at0 = output_of<Input>(p, t, image, m, first);
    Input* const at1 = output_of<Input>(p, t, image, m + 1, second);
    // pair_stores: the two pixels are adjacent in one output row and the pair's address is aligned to it.
    const bool together = p.pair_stores && first && second;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // Every accumulator goes to shared memory unconditionally (no divergent read of the wgmma registers: C7520),
      // as whole pairs: a memcpy straight into the slice compiled to byte stores, and its 16-bit results were wrong
      // (H200, 2026-11-27 22:27 UTC; TF32 right; cause not found).
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const Input v[2] = {Math::from_acc(acc[mb][4 * j + 2 * half] + bias_of[half]),
                            Math::from_acc(acc[mb][4 * j + 2 * half + 1] + bias_of[half])};
        Pair both;
        memcpy(&both, v, sizeof(Pair));
        *reinterpret_cast<Pair*>(slice + g * kCoutRowsPitch + 8 * j + 2 * q) = both;
      }
      __syncwarp();
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int co = t.co_block * 64 + 16 * warp + 8 * half + i;
        const bool channel = co < p.cout;
        const int64_t offset = static_cast<int64_t>(channel ? co : 0) * p.out_stride[1];
        store_pixel_pair(channel, together, first, second, at0 + offset, at1 + offset,
                         *reinterpret_cast<const Pair*>(slice + i * kCoutRowsPitch + 2 * lane));
      }
      __syncwarp();  // the slice is read before the next half overwrites it
    }
  }
}

// The kernel's epilogue (see store_tile_staged).
template <class Math, int N, int MB>
__device__ __forceinline__ void store_tile(const Params& p, const Tile& t, int wg, const float (&acc)[MB][N / 2],
                                           unsigned char* smem) {
  if constexpr (staged_epilogue(N, sizeof(typename Math::Input))) store_tile_staged<Math, N, MB>(p, t, wg, acc, smem + 2 * p.stage_bytes);
  else store_tile_direct<Math, N, MB>(p, t, wg, acc);
}

// Whether the epilogue may store pixel pairs (2 pair, 2 pair + 1) as one vector: they are adjacent in one output
// row (brick rows and tiles of even widths, so a pair never straddles a row or a tile's edge) and every pair's
// address is aligned to the pair (contiguous rows, the other strides and the data's address even).
inline bool epilogue_pairs_fit(const ConvTransposeParams& p, int brick_w, int tile_w, int element_bytes) {
  if (brick_w % 2 != 0 || tile_w % 2 != 0 || p.out_stride[4] != 1) return false;
  if (reinterpret_cast<uintptr_t>(p.output) % (2 * element_bytes) != 0) return false;
  for (int i = 0; i < 4; ++i) {
    if (p.out_stride[i] % 2 != 0) return false;
  }
  return true;
}

template <class Math, int N, int MB, bool kQuartets>
__global__ void __launch_bounds__(kThreads, 1) conv_transpose_shift_gemm_kernel(const __grid_constant__ Params p) {
#if CONVOPS_HAS_WGMMA
  extern __shared__ __align__(128) unsigned char smem[];
  // The warpgroup, as a value the compiler knows is the same across the warp (uniform registers for the descriptors).
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  float acc[MB][N / 2];
  // Math::kRoundedSums (conv_transpose_math.cuh): each k-step's MMAs write sums of their own, which the next step
  // adds to acc in fp32 once they are done (after its wait); step_first: that k-step was its tile's first.
  float step_sums[MB][N / 2];
  bool step_first = false;
  const auto fold_step_sums = [&] {
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) {
      wgmma::pin(step_sums[mb]);
#pragma unroll
      for (int r = 0; r < N / 2; ++r) acc[mb][r] = (step_first ? 0.f : acc[mb][r]) + step_sums[mb][r];
    }
  };
  const auto stage_of = [&](int s) { return smem + (s & 1) * p.stage_bytes; };
  // Step s + 1's brick is loaded into registers and its weights copied while step s's MMAs run.
  Units<max_units(N)> units;
  const auto issue_loads = [&](const Cursor& c, int s) {
    load_units<Math, kQuartets>(p, c.tile, c.k, units, threadIdx.x, kThreads);
    copy_weights(p, c.tile, c.k, stage_of(s) + 2 * p.brick_pixels * kGroupBytes);
    cp_async_commit();
  };

  Cursor at = first_step(p);
  if (at.tile_index < p.total_tiles) issue_loads(at, 0);
  Tile multiplied{};  // the tile of the last step multiplied: its accumulators are stored when the next tile starts
  bool pending = false;
  for (int s = 0; at.tile_index < p.total_tiles; ++s) {
    const Cursor next = next_step(p, at);
    // Stage s was last read by step s - 2's MMAs, done before the previous iteration's barrier.
    store_units<Math, kQuartets>(p, units, stage_of(s), threadIdx.x, kThreads);
    cp_async_wait<0>();  // the weights, then the fence: both the stores and the copies reach wgmma's proxy
    wgmma::publish_stores();
    wgmma::wait<0>();  // step s - 1's MMAs are done: its stage may be refilled, its accumulators read
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) wgmma::pin(acc[mb]);  // ... and only now (the compiler cannot see the wait)
    if constexpr (Math::kRoundedSums) {
      if (pending) fold_step_sums();
    }
    if (at.k == 0 && pending) store_tile<Math, N, MB>(p, multiplied, wg, acc, smem);
    __syncthreads();  // every thread's part of stage s is in; no warpgroup reads stage s - 1 any more
    // The next step's loads go out before this step's MMAs are issued: 5.00 against 5.90 ms after them (L1-70 TF32,
    // H200, 2026-11-27 17:02 UTC), as their latency then overlaps the MMA issue too; with the MMA issue made cheap
    // (multiply_step) still 4.27 against 4.81 (17:36). Step s - 1's MMAs drain here
    // each step: keeping them in flight across the step (two barriers a step, three weight slots) measured no faster
    // (4.40 against 4.39 ms, 17:23 UTC).
    if (next.tile_index < p.total_tiles) issue_loads(next, s + 1);
    wgmma::fence();
    if constexpr (Math::kRoundedSums) {
      multiply_step<Math, N, MB>(p, stage_of(s), p.skew, /*first_step=*/true, wg, step_sums);
      step_first = at.k == 0;
    } else {
      multiply_step<Math, N, MB>(p, stage_of(s), p.skew, at.k == 0, wg, acc);
    }
    wgmma::commit();
    multiplied = at.tile;
    pending = true;
    at = next;
  }
  wgmma::wait<0>();
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) wgmma::pin(acc[mb]);
  if constexpr (Math::kRoundedSums) {
    if (pending) fold_step_sums();
  }
  if (pending) store_tile<Math, N, MB>(p, multiplied, wg, acc, smem);
#else
  __trap();  // launch() runs this kernel only where its machine code is sm_90a
#endif
}

// ---------------------------------------------------------------------------------------------------------------------
// Host side: which problems it serves and how they are tiled.
// ---------------------------------------------------------------------------------------------------------------------

// Output channels a block: 24 (the L1-70 seed's C_out) or 64 (L1-65's); wider layers take several blocks.
inline int channel_tile(int cout) { return cout <= 24 ? 24 : 64; }

// Blocks of 64 GEMM rows a warpgroup may take, per channel tile: up to 96 accumulator registers a thread.
constexpr int kRowBlocks24[] = {2, 4, 6};
constexpr int kRowBlocks64[] = {1, 2, 3};

struct Plan {
  int row_blocks = 0;  // MB: 0 where no tile fits shared memory
  int tile_h = 0, tile_w = 0, brick_h = 0, brick_w = 0, skew = 0, brick_pixels = 0, stage_bytes = 0, units = 0;
  int unit_indices = 0;  // units, or in quartets the indices that pad them (unit_place)
  bool quartets = false;  // the brick's units in quartets (unit_place)
  int k_steps = 0;        // 32-byte channel steps of C_in
  int tiles_h = 0, tiles_w = 0;
};

// For A/B timing, read once: CONVOPS_SHIFT_QUARTETS=0 keeps every brick in rows order (UnitPlace).
inline bool quartets_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("CONVOPS_SHIFT_QUARTETS");
    return env == nullptr || std::string(env) != "0";
  }();
  return on;
}

// The most row blocks of a kernel with rounded sums (Math::kRoundedSums: a second set of accumulators), by channel
// tile: 4 for 24, 2 for 64; 6 / 3 spill hundreds of bytes (ptxas, 2026-11-28).
constexpr int rounded_sums_row_blocks(int n_tile) { return n_tile == 24 ? 4 : 2; }

// The tile with the fewest estimated cycles: a k-step costs the longer of its MMAs (their shared-memory operand
// reads, 128 bytes a cycle, or the tensor cores' rate) and its loads (~64 bytes a cycle from L2), plus ~200 cycles
// of barrier and waits; tiles are spread over one block an SM. Rows past the tile and the last K_w - 1 + skew columns
// of each row cost MMAs, so tile widths are balanced and tile_h rows of brick_w fill the warpgroups' rows closely.
// Tile widths are multiples of 4 (or the whole output row), so that every tile's brick starts `skew` columns early.
// rounded_sums: the kernel holds a second set of accumulators (Math::kRoundedSums), so at most
// rounded_sums_row_blocks(n_tile) row blocks.
inline Plan choose_plan(const ConvTransposeParams& p, int n_tile, int element_bytes, int shared_limit, int sms,
                        bool rounded_sums = false) {
  const int k_steps = ceil_div(p.cin_g * element_bytes, kStepBytes);
  const int kd = p.kernel[0], kh = p.kernel[1], kw = p.kernel[2], taps = kd * kh * kw;
  const int skew = ((p.padding[2] - (kw - 1)) % 4 + 4) % 4;  // (-shift) mod 4
  const int co_blocks = ceil_div(p.cout_g, n_tile);
  const double mma_per_block = taps * std::max(n_tile / 2.0, (64.0 + n_tile) / 4.0);
  Plan best;
  double best_cost = std::numeric_limits<double>::infinity();
  const auto consider = [&](int mb) {
    if (rounded_sums && mb > rounded_sums_row_blocks(n_tile)) return;
    const int rows = kWarpgroups * mb * 64;
    for (int tile_h = 1; tile_h <= std::min(kMaxTileRows, p.out_size[1]); ++tile_h) {
      const int tile_w_cap = rows / tile_h - (kw - 1) - skew;
      if (tile_w_cap < 1) break;
      Plan t;
      t.row_blocks = mb;
      t.tile_h = tile_h;
      t.skew = skew;
      if (p.out_size[2] <= tile_w_cap) {
        t.tiles_w = 1;
        t.tile_w = p.out_size[2];
      } else {
        if (tile_w_cap < 4) continue;
        t.tiles_w = ceil_div(p.out_size[2], tile_w_cap / 4 * 4);
        t.tile_w = ceil_div(ceil_div(p.out_size[2], t.tiles_w), 4) * 4;
      }
      t.brick_w = skew + t.tile_w + kw - 1;
      t.brick_h = tile_h + kh - 1;
      t.tiles_h = ceil_div(p.out_size[1], tile_h);
      // 64-bit until bounded: huge kernels make huge bricks.
      // (brick_rows, not rows: the GEMM rows of the tile enter the read reach below.)
      const int64_t brick_rows = 2 * int64_t{kd} * t.brick_h, blocks = ceil_div(t.brick_w, 4);
      const int64_t units = brick_rows * blocks;
      t.quartets = element_bytes == 2 && t.brick_w % 4 == 2 && quartets_enabled();
      // Unit indices a k-step: quartets pad the rows to a multiple of 4 and the blocks to a multiple of 2.
      const int64_t indices =
          t.quartets ? ceil_div(brick_rows, int64_t{4}) * 4 * ceil_div(blocks, int64_t{2}) * 2 : units;
      if (indices > int64_t{max_units(n_tile)} * kThreads) continue;
      const int64_t brick = int64_t{kd} * t.brick_h * t.brick_w;
      const int64_t reach = (int64_t{kd - 1} * t.brick_h + kh - 1) * t.brick_w + kw - 1 + skew + rows;
      const int64_t pixels = (std::max(brick, reach) + 7) / 8 * 8;
      const int64_t stage = 2 * kGroupBytes * pixels + int64_t{taps} * n_tile * kStepBytes;
      // The epilogue's slices (epilogue_bytes) follow the two stages.
      if (2 * stage + epilogue_bytes(n_tile, element_bytes) > shared_limit) continue;
      t.units = static_cast<int>(units);
      t.unit_indices = static_cast<int>(indices);
      t.brick_pixels = static_cast<int>(pixels);
      t.stage_bytes = static_cast<int>(stage);
      const double tiles = static_cast<double>(p.batch) * p.out_size[0] * t.tiles_h * t.tiles_w * co_blocks;
      const double copy = (kStepBytes * static_cast<double>(brick) + taps * n_tile * kStepBytes) / 64.0;
      const double per_tile = k_steps * (std::max(kWarpgroups * mb * mma_per_block, copy) + 200.0) + mb * n_tile;
      const double cost = std::ceil(tiles / sms) * per_tile;
      if (cost < best_cost) {
        best_cost = cost;
        best = t;
      }
    }
  };
  if (n_tile == 24) {
    for (const int mb : kRowBlocks24) consider(mb);
  } else {
    for (const int mb : kRowBlocks64) consider(mb);
  }
  best.k_steps = k_steps;
  return best;
}

inline int64_t total_tiles(const ConvTransposeParams& p, const Plan& plan, int n_tile) {
  return int64_t{p.batch} * p.out_size[0] * plan.tiles_h * plan.tiles_w * ceil_div(p.cout_g, n_tile);
}

// For A/B timing, read once: CONVOPS_SHIFT_GEMM=0 turns this kernel off (the mma.sync implicit GEMM runs instead).
inline bool enabled() {
  static const bool on = [] {
    const char* env = std::getenv("CONVOPS_SHIFT_GEMM");
    return env == nullptr || std::string(env) != "0";
  }();
  return on;
}

// load_units reads 4 columns of a channel as one vector (16 bytes TF32, 8 bytes 16-bit) from columns that are
// multiples of 4: rows must be contiguous, and every other stride (of a dimension longer than 1) a multiple of 4
// elements, the data's address a multiple of the vector.
inline bool vectors_fit(const ConvTransposeParams& p, const void* data, int element_bytes, const int64_t (&sizes)[5]) {
  if (p.in_stride[4] != 1 && sizes[4] > 1) return false;
  if (reinterpret_cast<uintptr_t>(data) % (4 * element_bytes) != 0) return false;
  for (int i = 0; i < 4; ++i) {
    if (sizes[i] > 1 && p.in_stride[i] % 4 != 0) return false;
  }
  return true;
}

// Whether the kernel serves the problem of p (filled by conv_transpose_kernel_path): stride 1, dilation 1, one group,
// TF32 / bf16 / fp16 (the caller's tensor-core precision policies), inputs whose rows load as vectors, wgmma on this
// device, a tile that fits shared memory and the registers of load_units.
inline std::optional<Plan> applies(const ConvTransposeParams& p, int element_bytes, const int64_t (&in_sizes)[5],
                                   bool rounded_sums = false) {
  if (!enabled() || p.groups != 1 || p.cin_g < 1) return std::nullopt;
  for (int d = 0; d < 3; ++d) {
    if (p.stride[d] != 1 || p.dilation[d] != 1) return std::nullopt;
  }
  if (!vectors_fit(p, p.input, element_bytes, in_sizes) || !wgmma::runs_here()) return std::nullopt;
  const int n_tile = channel_tile(p.cout_g);
  const Plan plan =
      choose_plan(p, n_tile, element_bytes, max_shared_memory_per_block(), multiprocessor_count(), rounded_sums);
  // Tile indices (and the grid's stride over them) are ints.
  if (plan.row_blocks == 0 || total_tiles(p, plan, n_tile) > std::numeric_limits<int>::max() / 2) return std::nullopt;
  return plan;
}

}  // namespace shift_gemm
}  // namespace cuda
}  // namespace convops
