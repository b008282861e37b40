// Row-streaming fused kernel of convops::depthwise_separable_conv2d for Hopper (sm_90a): the depthwise intermediate
// lives only in shared memory, one output row of a 128-column strip at a time, and the pointwise 1x1 runs on wgmma.
//
// Scope: what the seed problem is made of. Contiguous NCHW, channel multiplier 1, stride 1, dilation 1, a 3x3
// filter with "same" padding along W (any along H), rows of a multiple of 16 bytes, at most kMaxChannels input
// channels and kMinCouts to kCoutTile output channels, TF32 (fp32 with TF32 allowed) or fp16/bf16, machine code for
// sm_90a on a compute capability 9.0 GPU. Everything else goes to the tile kernel
// (depthwise_separable_conv2d_pipelined.cuh).
//
// Why (issue #5, bench/PERF_NOTES.md): the tile kernel stages a 32 x 4 tile's input with its halo, 2.06x the tile's
// bytes, and two 8-warp CTAs an SM are left with too few warps to hide the latency of what they stage. Here a CTA
// walks down the rows of a strip: each input row of all channels is copied once (one bulk-copy box) into a ring of
// row slots, and each output row is computed from the KH newest rows (the halo columns, and KH - 1 rows where a
// CTA's share starts or enters an image, are all the input staged twice). The copies and the 1x1 run asynchronously.
//
// One CTA an SM, in groups of one CTA a strip; each group takes an equal contiguous share of the images' rows
// (Share):
//   - a producer thread issues one box copy an input row (kSlotCols columns x the input channels, zero-filled
//     outside the image: the padding) into the ring, and waits for a slot to be released before refilling it;
//   - four consumer warpgroups, in two teams of a strip's pixel half each, compute per output row the depthwise
//     outputs of all channels (fp32 FMA, bias then taps in (ky, kx) order as ATen does), store them into D rounded as
//     the unfused pair would see them (TF32 ties-to-even, or the input dtype), in wgmma's K-major layout, and
//     multiply: each warpgroup the m64n64 product of 64 couts x its team's 64 pixels over the channels. The product
//     runs while the team computes the next row's depthwise outputs (16-bit: with the pointwise bias as one more
//     channel); the row is stored after that (fp32: adding the pointwise bias), staged through shared memory in whole
//     128-byte lines (store_row_boxes, store_row_vectors).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <type_traits>

#include "common/checks.h"
#include "common/tuning.h"
#include "cuda/bulk_copy.cuh"
#include "cuda/depthwise_separable_conv2d_pipelined.cuh"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"
#include "cuda/wgmma.cuh"

namespace convops {
namespace cuda {
namespace depthwise {
namespace streaming {

using pipelined::Math;
using pipelined::operand_t;

// Four consumer warpgroups (so that four warps a scheduler hide the depthwise stage's shared-memory latency: with
// two, 72% of the cycles had no eligible warp, short-scoreboard stalls the largest part), each multiplying one
// quarter of a row's 128 couts x 128 pixels: 64 couts x 64 pixels.
constexpr int kWarpgroups = 4;
constexpr int kConsumerThreads = kWarpgroups * 128;
constexpr int kThreads = kConsumerThreads + 32;        // and the producer's warp
constexpr int kStripCols = 128;                        // output columns a strip
constexpr int kCoutTile = 128;                         // couts of the CTA: all of the problem's
constexpr int kWarpgroupCouts = 64, kWarpgroupPixels = 64;  // a warpgroup's m64n64 product
constexpr int kAccumulators = kWarpgroupCouts * kWarpgroupPixels / 128;
constexpr int kMaxChannels = 64;                       // the 1x1's K
constexpr int kMinCouts = 64;                          // fewer go to the tile kernel (launch_separable_streaming)
// Each warp stages its part of an output row in its own scratch: 16-bit rows leave as one box of the warp's 16 couts
// x 128 bytes that the bulk-copy engine stores (store_row_boxes); fp32 rows as the warps' own 16-byte stores,
// through a scratch of 1 KB (store_row_vectors; shared memory is full).
constexpr int kBoxRowBytes = 128;
constexpr int kSwizzleBytes = 8 * kBoxRowBytes;  // the 128-byte swizzle's period: 8 rows of 128 bytes
constexpr int kBoxCouts = 16;                    // 16-bit output box: the warp's 16 couts x 64 pixels
template <typename scalar_t>
constexpr bool kStoresBoxes = sizeof(scalar_t) == 2;
template <typename scalar_t>
constexpr int kScratchBytes = kStoresBoxes<scalar_t> ? kBoxCouts * kBoxRowBytes : kSwizzleBytes;  // a warp's
constexpr int kRunLength = 8;                          // consecutive depthwise outputs a thread computes
// Two teams of two warpgroups, one a half of the strip's pixels (the warpgroups' quarters of the product share
// their pixels): each team computes its half of the depthwise outputs, hands it over at its own named barrier and
// multiplies it, so the teams drift apart and their phases (shared-memory loads, FMA, stores) overlap.
constexpr int kTeams = 2;
constexpr int kTeamThreads = kConsumerThreads / kTeams;
constexpr int kTeamRuns = kWarpgroupPixels / kRunLength;  // 8 runs of a channel's row a team
constexpr int kChannelsPerPass = kTeamThreads / kTeamRuns;
constexpr int kPasses = kMaxChannels / kChannelsPerPass;  // runs a thread computes per output row
constexpr int kFirstTeamBarrier = 1;                   // named barriers of the teams (0 is __syncthreads)

// An input row in a ring slot: [channel][column], the box's dense layout. Column 0 is input column x0 - kVec of the
// strip starting at x0 (box starts must be 16-byte aligned), so output column x0 + j reads slot columns
// kVec - kPad + j + kx.
template <typename scalar_t, int KW>
struct RowLayout {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(scalar_t));
  static constexpr int kPad = (KW - 1) / 2;
  static_assert(kPad <= kVec, "the left halo fits one vector");
  // The vectors a slot row needs, rounded up so that a quarter-warp's 16-byte loads (4 runs x 2 channels, see
  // RunPlace) fall in distinct banks: channel rows an odd number of vectors apart in fp32 (a run's loads step by 2
  // vectors); in 16-bit the quarter-warp's channels are 2 apart, so 2 rows are 4 mod 8 vectors apart (by 1).
  static constexpr int kNeeded = (kVec + kStripCols + kPad + kVec - 1) / kVec;
  static constexpr int kSlotVectors = sizeof(scalar_t) == 4 ? kNeeded | 1 : kNeeded + (6 - kNeeded % 4) % 4;
  static constexpr int kSlotCols = kSlotVectors * kVec;
  static constexpr int kSlotBytes = kMaxChannels * kSlotCols * static_cast<int>(sizeof(scalar_t));
  static_assert(kSlotBytes % 128 == 0, "box destinations are 128-byte aligned");
};

// D (pixels x channels) and the pointwise weights (couts x channels) as wgmma's K-major operands (wgmma.cuh): 8-row
// groups kStride bytes apart, k-steps of 32 bytes of each row kStepBytes apart.
//
// With 16-bit operands the pointwise bias is one more channel of the product: channel kMaxChannels is 1 in every
// pixel of D (written once) and the bias in W, and the rest of that k-step zero. The bias, a 16-bit value, times 1 is
// exact in the fp32 sums, and the row's stores then add nothing (32 additions a thread a row fewer; the 16-bit kernel
// is bound by its instruction issue). A TF32 bias would lose bits, and fp32 has no shared memory for the k-step.
template <typename op_t>
struct OperandLayout {
  static constexpr int kStepChannels = wgmma::kStepBytes / static_cast<int>(sizeof(op_t));
  static constexpr bool kBiasChannel = sizeof(op_t) == 2;
  static constexpr int kSteps = kMaxChannels / kStepChannels + (kBiasChannel ? 1 : 0);
  static constexpr int kChannels = kSteps * kStepChannels;  // K of the product
  // 16 bytes past a multiple of 128 between 8-pixel groups: a warp's depthwise stores (8 runs x 4 channels, each
  // run one group) then fall in distinct banks.
  using D = wgmma::KMajor<kStripCols, 256 + 16>;
  using W = wgmma::KMajor<kCoutTile, 256>;
  static constexpr int kBytesD = kSteps * D::kStepStride;
  static constexpr int kBytesW = kSteps * W::kStepStride;
};

template <typename scalar_t>
struct Params {
  const scalar_t* __restrict__ dw_weight;
  const scalar_t* __restrict__ dw_bias;  // nullptr: none
  const scalar_t* __restrict__ pw_weight;
  const scalar_t* __restrict__ pw_bias;  // nullptr: none
  scalar_t* __restrict__ output;
  int channels, out_channels;
  int in_h, out_h, out_w, pad_h;
  int strips;                              // of kStripCols output columns
  int64_t rows;                            // output rows of a strip: batch x out_h
  int slots;                               // ring slots (at least KH + 1)
  uint32_t row_bytes;                      // bytes of one input row's box
  CUtensorMap input_map;                   // the input as (W, H, N * C), boxes of kSlotCols x 1 x C
  CUtensorMap output_map;                  // 16-bit: the output as (W, H, C, N), swizzled boxes of 128 B x 1 x 16
};

// A channel's depthwise filter and bias in shared memory, padded to whole 16-byte vectors: a thread loads them with
// three 16-byte loads (3x3) instead of ten 4-byte ones.
template <int KH, int KW>
struct alignas(16) FilterRecord {
  static constexpr int kFloats = (KH * KW + 1 + 3) / 4 * 4;
  float taps[kFloats];  // KH x KW weights in (ky, kx) order, then the bias, then zeros
  __device__ __forceinline__ float weight(int ky, int kx) const { return taps[ky * KW + kx]; }
  __device__ __forceinline__ float bias() const { return taps[KH * KW]; }
};

template <typename scalar_t, int KH, int KW, Math kMath>
struct Smem {
  using op_t = operand_t<scalar_t, kMath>;
  size_t ring, d, w, scratch, filters, pw_b, full, empty, total;
  __host__ __device__ explicit Smem(int slots) {
    ring = 0;
    d = ring + size_t(slots) * RowLayout<scalar_t, KW>::kSlotBytes;
    w = d + OperandLayout<op_t>::kBytesD;
    scratch = align_to(w + OperandLayout<op_t>::kBytesW, kSwizzleBytes);  // the boxes' swizzle repeats every 1 KB
    filters = scratch + kConsumerThreads / 32 * kScratchBytes<scalar_t>;
    pw_b = filters + kMaxChannels * sizeof(FilterRecord<KH, KW>);
    // The pointwise bias table, fp32 only: 16-bit adds the bias in the product (OperandLayout::kBiasChannel).
    full = pw_b + (OperandLayout<op_t>::kBiasChannel ? 0 : align(kCoutTile * sizeof(float)));
    empty = full + align(slots * sizeof(uint64_t));
    total = empty + align(slots * sizeof(uint64_t));
  }
  __host__ __device__ static size_t align_to(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }
  __host__ __device__ static size_t align(size_t bytes) { return align_to(bytes, 16); }
};

// The CTA's share of the work: output rows [begin, end) of all images, numbered image after image (image n, row y:
// n out_h + y), in strip x0 / kStripCols. The grid is groups of one CTA a strip, and each group has an equal
// contiguous share of the rows (which balances the grid to a row; bands of 16 to 128 rows dealt out round-robin,
// measured first, left CTAs up to a band apart). A group's CTAs then read and write the same rows at about the same
// time, each 1/strips of them, and the halo columns that neighbouring strips both read come from L2. Numbered strip
// after strip instead (each CTA walking its own part of one strip), the rows of one moment lay far apart in memory,
// each written as 256-byte (bf16) pieces of its planes: the seed took 0.589 ms in bf16 and 1.022 in TF32 that way,
// 0.518 and 0.947 this way (H200, same-session runs of 2026-11-27 04:35 / 04:44 UTC; DRAM locality was the limit,
// not instruction issue: the stmatrix stores below cut a warp's row step by ~55 instructions and changed nothing).
// An L2 evict-first policy on the output boxes and 256-byte L2 promotion of the input boxes measured within noise.
struct Share {
  int64_t begin, end;
  int x0;
  __device__ __forceinline__ Share(int64_t rows, int strips) {
    const int groups = gridDim.x / strips, group = blockIdx.x / strips;
    begin = rows * group / groups;
    end = rows * (group + 1) / groups;
    x0 = (blockIdx.x - group * strips) * kStripCols;
  }
};

// A band: the part of a share within one image: image n, output rows [y0, y0 + rows), columns [x0, x0 + kStripCols).
struct Band {
  int64_t n;
  int y0, rows, x0;
};

// The band of the share that starts at row `at` (begin <= at < end).
template <typename scalar_t>
__device__ __forceinline__ Band band_at(const Params<scalar_t>& p, const Share& share, int64_t at) {
  const int64_t n = at / p.out_h;
  const int y0 = static_cast<int>(at - n * p.out_h);
  const int rows = static_cast<int>(min(int64_t{p.out_h - y0}, share.end - at));
  return Band{n, y0, rows, share.x0};
}

// The team's named barrier (ids 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void team_barrier(int team) {
  asm volatile("bar.sync %0, %1;" ::"r"(kFirstTeamBarrier + team), "n"(kTeamThreads) : "memory");
}

// The runs a consumer thread computes: columns 8 run ... 8 run + 7 of the strip, in pass q of channel(q). A warp
// covers 8 runs x 4 channels a pass, a quarter-warp (one wavefront of 16-byte accesses) 4 runs x 2 channels: its
// window loads then fall in distinct banks (RowLayout), and its D stores (8 runs x 4 channels a warp) too
// (OperandLayout). In 16-bit a thread's two passes are the channels 2 base and 2 base + 1, so that one 4-byte store
// puts both outputs of a pixel into D (store_operands); in fp32 they are base and base + kChannelsPerPass.
template <typename scalar_t>
struct RunPlace {
  static constexpr bool kPairs = sizeof(scalar_t) == 2;
  static_assert(!kPairs || kPasses == 2, "a channel pair a thread");
  int run, base;
  __device__ __forceinline__ RunPlace() {
    const int team = threadIdx.x / kTeamThreads, warp = threadIdx.x % kTeamThreads / 32, lane = threadIdx.x % 32;
    run = team * kTeamRuns + lane % 4 + lane / 8 % 2 * 4;
    base = warp * 4 + lane / 4 % 2 + lane / 16 * 2;
  }
  __device__ __forceinline__ int channel(int q) const { return kPairs ? 2 * base + q : q * kChannelsPerPass + base; }
};

// Ring row r (the r-th input row a CTA copies) lives in slot r % slots and is that slot's fill r / slots. The
// producer and the consumers walk the ring in order, so they keep (slot, parity) and step it, without dividing.
struct RingCursor {
  int slot = 0;
  uint32_t parity = 0;  // of the slot's fill
  // The cursor `rows` ring rows on, for rows <= slots (at most KH: the ring has at least KH + 1 slots).
  __device__ __forceinline__ RingCursor plus(int rows, int slots) const {
    RingCursor next{slot + rows, parity};
    if (next.slot >= slots) next.slot -= slots, next.parity ^= 1;
    return next;
  }
};

// The producer: one box copy an input row, band after band, in the order the consumers take the rows. Ring row r
// goes into slot r % slots once the row before it there has been released.
template <typename scalar_t, int KH, int KW>
struct Producer {
  Share share;
  int64_t at;      // the band's first output row
  Band band;
  int j = 0;       // input row of the band's window
  int r = 0;       // ring rows copied
  RingCursor row;  // of ring row r
  __device__ __forceinline__ explicit Producer(const Params<scalar_t>& p)
      : share(p.rows, p.strips), at(share.begin), band{} {
    if (at < share.end) band = band_at(p, share, at);
  }
  __device__ __forceinline__ bool done() const { return at >= share.end; }
  // Copies the next row once its slot is free (`wait`), or copies nothing and returns false where it is not.
  __device__ __forceinline__ bool copy_row(const Params<scalar_t>& p, unsigned char* ring, uint64_t* full,
                                           uint64_t* empty, bool wait) {
    using RL = RowLayout<scalar_t, KW>;
    if (r >= p.slots) {
      if (!wait) return false;
      bulk::wait(&empty[row.slot], row.parity ^ 1);
    }
    bulk::arrive_expect_bytes(&full[row.slot], p.row_bytes);
    bulk::copy_box_to_shared(ring + size_t(row.slot) * RL::kSlotBytes, &p.input_map, band.x0 - RL::kVec,
                             band.y0 - p.pad_h + j, static_cast<int>(band.n * p.channels), &full[row.slot]);
    ++r;
    row = row.plus(1, p.slots);
    if (++j == band.rows + KH - 1) {
      j = 0;
      at += band.rows;
      if (at < share.end) band = band_at(p, share, at);
    }
    return true;
  }
};

// The thread's depthwise outputs of one output row (RunPlace). rows[ky]: the slot holding input row ky of the window.
template <typename scalar_t, int KH, int KW>
__device__ __forceinline__ void depthwise_row(float (&out)[kPasses][kRunLength], const scalar_t* const (&rows)[KH],
                                              const FilterRecord<KH, KW>* __restrict__ filters, int channels) {
  using RL = RowLayout<scalar_t, KW>;
  constexpr int V = RL::kVec, kPerWord = 4 / static_cast<int>(sizeof(scalar_t));
  constexpr int kFirst = V - RL::kPad;       // slot column of the first run's window
  constexpr int kSkip = kFirst % V;          // window start within its vector
  constexpr int kWindow = kRunLength + KW - 1;
  constexpr int kVectors = (kSkip + kWindow + V - 1) / V;
  const RunPlace<scalar_t> place;
  const int column = place.run * kRunLength + kFirst / V * V;
#pragma unroll
  for (int q = 0; q < kPasses; ++q) {
    const int k = place.channel(q);
    if (k >= channels) {
#pragma unroll
      for (int i = 0; i < kRunLength; ++i) out[q][i] = 0.0f;  // channels past the end add nothing to the 1x1
      continue;
    }
    const FilterRecord<KH, KW> filter = filters[k];
#pragma unroll
    for (int i = 0; i < kRunLength; ++i) out[q][i] = filter.bias();
#pragma unroll
    for (int ky = 0; ky < KH; ++ky) {
      const scalar_t* src = rows[ky] + k * RL::kSlotCols + column;
      float values[kVectors * V];
#pragma unroll
      for (int v = 0; v < kVectors; ++v) {
        const uint4 u = *reinterpret_cast<const uint4*>(src + v * V);
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) pipelined::unpack_word<scalar_t>(words[e], values + v * V + e * kPerWord);
      }
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) {
        const float wv = filter.weight(ky, kx);
#pragma unroll
        for (int i = 0; i < kRunLength; ++i) out[q][i] = fmaf(wv, values[kSkip + i + kx], out[q][i]);
      }
    }
  }
}

// Stores the row's depthwise outputs into D as the 1x1's operand: a run's 8 pixels are one core-matrix row group,
// 16 bytes apart, at the channel's place within the rows (16-bit: the channel pair's, one 4-byte word a pixel).
template <typename scalar_t, Math kMath, typename op_t>
__device__ __forceinline__ void store_operands(unsigned char* d, const float (&out)[kPasses][kRunLength]) {
  using OL = OperandLayout<op_t>;
  const RunPlace<scalar_t> place;
  if constexpr (RunPlace<scalar_t>::kPairs) {
    unsigned char* dst = d + OL::D::at(place.run * kRunLength, place.channel(0), static_cast<int>(sizeof(op_t)));
#pragma unroll
    for (int i = 0; i < kRunLength; ++i) {
      *reinterpret_cast<uint32_t*>(dst + i * 16) = pipelined::pack_pair(pipelined::to_operand<kMath, op_t>(out[0][i]),
                                                                        pipelined::to_operand<kMath, op_t>(out[1][i]));
    }
  } else {
#pragma unroll
    for (int q = 0; q < kPasses; ++q) {
      unsigned char* dst = d + OL::D::at(place.run * kRunLength, place.channel(q), static_cast<int>(sizeof(op_t)));
#pragma unroll
      for (int i = 0; i < kRunLength; ++i) {
        *reinterpret_cast<op_t*>(dst + i * 16) = pipelined::to_operand<kMath, op_t>(out[q][i]);
      }
    }
  }
}

// Where warpgroup wg's product lies in the row: couts [first_cout, + 64) x pixels [first_pixel, + 64).
struct Quarter {
  int first_cout, first_pixel;
  __device__ __forceinline__ explicit Quarter(int wg)
      : first_cout(wg % 2 * kWarpgroupCouts), first_pixel(wg / 2 * kWarpgroupPixels) {}
};

// The descriptors of warpgroup wg's operands at k-step 0 (wgmma.cuh), built once: the pointwise weights' rows of its
// couts and D's rows of its pixels.
struct ProductOperands {
  uint64_t weights, depthwise;
};

template <typename op_t>
__device__ __forceinline__ ProductOperands product_operands(const unsigned char* w, const unsigned char* d,
                                                           const Quarter& quarter) {
  using OL = OperandLayout<op_t>;
  return {OL::W::rows_descriptor(w, quarter.first_cout), OL::D::rows_descriptor(d, quarter.first_pixel)};
}

// Warpgroup wg's product, summed over all kMaxChannels channels (those past the input's are zero in D and W), one
// m64n64 instruction a k-step; issued and committed, not waited for.
template <typename scalar_t, Math kMath>
__device__ __forceinline__ void issue_product(float (&acc)[kAccumulators], const ProductOperands& operands) {
  using OL = OperandLayout<operand_t<scalar_t, kMath>>;
  wgmma::fence();  // orders the previous row's stores (which read the accumulators) before the new sums
#pragma unroll
  for (int s = 0; s < OL::kSteps; ++s) {
    const uint64_t a = OL::W::step(operands.weights, s);
    const uint64_t b = OL::D::step(operands.depthwise, s);
    if constexpr (kMath == Math::kHalf) {
      wgmma::mma_m64n64k16<std::is_same_v<scalar_t, at::BFloat16>>(acc, a, b, s > 0);
    } else {
      wgmma::mma_m64n64k8_tf32(acc, a, b, s > 0);
    }
  }
  wgmma::commit();
}

// An output row of a strip: image n, row y, columns [x0, x0 + kStripCols).
struct OutputRow {
  int64_t n;
  int y, x0;
};

// Stores warpgroup wg's products (the m64n64 fragment: acc[4 j + e] is cout 16 (warp % 4) + lane / 4 (+ 8 for
// e >= 2) of its quarter, pixel 8 j + 2 (lane % 4) (+ 1 for odd e)) with the pointwise bias (in 16-bit the product
// has added it: OperandLayout).
//
// The fragment gives a lane pixel pairs of two couts: stored from registers as they are, each warp instruction
// writes 8 couts' rows 32 bytes (fp32) or 16 bytes (16-bit: half sectors) apart, and those stores, not the bytes,
// limited the kernel (seed, H200: 1.08 ms in TF32 and 1.07 in bf16 with them, 0.69 / 0.56 without). So each warp
// passes its rows through its scratch in shared memory, and they leave in whole 128-byte lines:
//   - 16-bit (store_row_boxes): in a box of the warp's 16 couts x 64 pixels that the bulk-copy engine stores (as
//     two boxes of 8 couts, 0.644 ms in bf16 against 0.756 for the vectors below, H200);
//   - fp32 (store_row_vectors): as 16-byte vectors of the warp's own stores. fp32's scratch holds one box (shared
//     memory is full), and boxes stored one after another through it took TF32 from 1.035 to 1.052 ms.
struct Fragment {
  int warp, lane, g, t, warp_cout;
  __device__ __forceinline__ explicit Fragment(const Quarter& quarter)
      : warp(threadIdx.x / 32 % 4), lane(threadIdx.x % 32), g(lane / 4), t(lane % 4),
        warp_cout(quarter.first_cout + warp * 16) {}  // the warp's 16 couts
};

// stmatrix (sm_90): four 8 x 8 matrices of 16-bit values from the MMA fragment layout (lane 4 g + t holds row g,
// columns 2 t and 2 t + 1 of each matrix, as registers r0..r3) into shared memory, one 16-byte row a lane address:
// lanes 8 m ... 8 m + 7 give the rows of matrix m.
__device__ __forceinline__ void store_matrices_x4(uint32_t row_address, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_address), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// 16-bit: the box of the warp's 16 couts x 64 pixels in its scratch, a 128-byte row a cout, laid out as the output
// map's 128-byte swizzle says: 16-byte chunk c of row r at chunk c ^ (address bits 7-9 of the row: r % 8, the
// scratch being 1 KB aligned), so that the rows of a matrix fall in distinct banks. The fragment is 16 matrices of
// 8 couts x 8 pixels (cout half, pixel chunk j: acc[4 j + 2 half] and the next), so four stmatrix instructions write
// the box (16 4-byte stores and their addresses took about 100 instructions a warp and row, now about 45), and one
// bulk store sends it (two boxes of 8 couts each, as first written, timed about 2% slower in an alternating A/B on
// the bf16 seed, though a bench run then showed no difference: H200, 2026-11-28, bench/PERF_NOTES.md).
template <typename scalar_t>
__device__ __forceinline__ void store_row_boxes(const Params<scalar_t>& p, const OutputRow& row,
                                                const float (&acc)[kAccumulators], const Quarter& quarter,
                                                unsigned char* __restrict__ scratch) {
  static_assert(kStoresBoxes<scalar_t> && kScratchBytes<scalar_t> == 2 * kSwizzleBytes, "two swizzle periods a box");
  static_assert(kWarpgroupPixels / 8 == 8, "a box row is 8 chunks: two stmatrix.x4 of 4 chunks each");
  const Fragment f(quarter);
  // The lane's row address of chunks 0-3 (matrix m = lane / 8 of the instruction, row r = lane % 8) and of chunks
  // 4-7 (chunk ^ 4: bit 6 of the address); the rows of couts 8-15 lie kSwizzleBytes on.
  const uint32_t row_address = shared_address(scratch) + f.lane % 8 * kBoxRowBytes;
  const uint32_t swizzle = (row_address >> 7) & 7;
  const uint32_t low_chunks = row_address + ((f.lane / 8 ^ swizzle) << 4), high_chunks = low_chunks ^ (4u << 4);
  // The previous row's boxes have been read out of the scratch.
  if (f.lane == 0) bulk::wait_stores_read<0>();
  __syncwarp();
  static_assert(OperandLayout<scalar_t>::kBiasChannel, "the product has added the pointwise bias");
  const auto pair = [&acc](int j, int half) {
    return pipelined::pack_pair(static_cast<scalar_t>(acc[4 * j + 2 * half]),
                                static_cast<scalar_t>(acc[4 * j + 2 * half + 1]));
  };
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint32_t rows = half * kSwizzleBytes;
    store_matrices_x4(low_chunks + rows, pair(0, half), pair(1, half), pair(2, half), pair(3, half));
    store_matrices_x4(high_chunks + rows, pair(4, half), pair(5, half), pair(6, half), pair(7, half));
  }
  publish_shared_stores_to_async_proxy();
  __syncwarp();
  if (f.lane == 0) {  // couts past the problem's and columns past the row's are clipped by the map
    bulk::store_box_from_shared(&p.output_map, row.x0 + quarter.first_pixel, row.y, f.warp_cout,
                                static_cast<int>(row.n), scratch);
    bulk::commit_stores();
  }
}

// fp32: the warp's 16 couts x 64 pixels leave in four rounds (half, quad) of 4 couts x 64 pixels (couts
// 8 half + 4 quad ... + 3), one 1 KB scratch-full each. The fragment's lanes of those couts write their pixel pairs
// (8-pixel group j of row r at j ^ r, so that the writes, 4 rows x 4 lanes a group, fall in distinct banks); then
// every lane stores two 16-byte vectors, a half-warp one cout row's 256 bytes. Rounds of 8 couts x 32 pixels, in which
// every lane writes, were slower (seed, H200: 1.056 against 1.028 ms): a row's two 128-byte halves then leave in
// different rounds. The code keeps to few instructions a row (about 290 a warp in SASS, among them 32 shared stores
// and 32 bias additions; 470 as first written, most of them 64-bit addresses, branches and predicates): one store
// pointer stepped by two rows, the read addresses built once, the bounds checks as one predicated store
// (store_vector_if).
template <typename scalar_t>
__device__ __forceinline__ void store_row_vectors(const Params<scalar_t>& p, const OutputRow& row,
                                                  const float (&acc)[kAccumulators], const float* __restrict__ pw_b,
                                                  const Quarter& quarter, unsigned char* __restrict__ scratch) {
  static_assert(!kStoresBoxes<scalar_t> && std::is_same_v<scalar_t, float>, "fp32 rows");
  constexpr int kScratchRows = kScratchBytes<scalar_t> / (kWarpgroupPixels * 4);  // 4
  constexpr int kRowVectors = kWarpgroupPixels / 4;                 // 16-byte vectors a row: 16
  constexpr int kRowsPerRead = 32 / kRowVectors;                    // rows a warp instruction stores: 2
  static_assert(kScratchRows == 2 * kRowsPerRead, "two reads a round");
  const Fragment f(quarter);
  const int x = row.x0 + quarter.first_pixel;  // the warp's 64 columns
  const int64_t plane = int64_t{p.out_h} * p.out_w;
  // Lane: vector c of rows r and r + 2 of each round; the bounds as the couts and columns left from there (a vector
  // is wholly inside or outside a row: out_w % 4 == 0).
  const int r = f.lane / kRowVectors, c = f.lane % kRowVectors;
  const int couts_left = p.out_channels - (f.warp_cout + r);
  const bool column_inside = x + 4 * c < p.out_w;
  float* dst = p.output + (row.n * p.out_channels + f.warp_cout + r) * plane + int64_t{row.y} * p.out_w + x + 4 * c;
  float* const slots = reinterpret_cast<float*>(scratch);
  const float* read[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int rk = r + kRowsPerRead * k;
    read[k] = slots + rk * kWarpgroupPixels + (c / 2 ^ rk) * 8 + c % 2 * 4;
  }
  // The pointwise bias is added to the vectors read back, each of one cout row: every lane adds (32 additions a row),
  // where in the fragment only a round's lanes would (64 warp instructions).
  const float* const bias = pw_b + f.warp_cout + r;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int quad = 0; quad < 2; ++quad) {
      if (f.g / 4 == quad) {
        const int rw = f.g % 4;
#pragma unroll
        for (int j = 0; j < kWarpgroupPixels / 8; ++j) {
          float* at = slots + rw * kWarpgroupPixels + (j ^ rw) * 8 + 2 * f.t;
          *reinterpret_cast<float2*>(at) = make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
        }
      }
      __syncwarp();
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float b = bias[8 * half + 4 * quad + kRowsPerRead * k];
        float4 v = *reinterpret_cast<const float4*>(read[k]);
        v.x += b, v.y += b, v.z += b, v.w += b;
        const uint4 value = make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z),
                                       __float_as_uint(v.w));
        store_vector_if(column_inside && 8 * half + 4 * quad + kRowsPerRead * k < couts_left,
                        reinterpret_cast<uint4*>(dst), value);
        dst += kRowsPerRead * plane;
      }
      __syncwarp();
    }
  }
}

// Calls store(i, load(i)) for the thread's indices i = threadIdx.x + kThreads j below kCount, all of its loads issued
// before the first store. As a loop that waited for each load in turn, staging the pointwise weights took ~19 DRAM
// round trips before the first row, 11% of the kernel's stall samples at batch 2 (ncu, bf16, H200); staged at once,
// and with the first input copies started before it, the bf16 seed took 0.505 ms instead of 0.519 (TF32 0.924 either
// way; H200, 2026-11-28).
template <int kCount, class Load, class Store>
__device__ __forceinline__ void stage_at_once(Load&& load, Store&& store) {
  constexpr int kPerThread = (kCount + kThreads - 1) / kThreads;
  float values[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    values[j] = i < kCount ? load(i) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i < kCount) store(i, values[j]);
  }
}

template <typename scalar_t, int KH, int KW, Math kMath>
__global__ void __launch_bounds__(kThreads, 1) separable_streaming_kernel(const __grid_constant__ Params<scalar_t> p) {
#if CONVOPS_HAS_WGMMA
  using op_t = operand_t<scalar_t, kMath>;
  using RL = RowLayout<scalar_t, KW>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const Smem<scalar_t, KH, KW, kMath> s(p.slots);
  unsigned char* ring = smem_raw + s.ring;
  unsigned char* d = smem_raw + s.d;
  unsigned char* w = smem_raw + s.w;
  unsigned char* scratch = smem_raw + s.scratch + threadIdx.x / 32 * kScratchBytes<scalar_t>;  // the warp's
  auto* filters = reinterpret_cast<FilterRecord<KH, KW>*>(smem_raw + s.filters);
  float* pw_b = reinterpret_cast<float*>(smem_raw + s.pw_b);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem_raw + s.full);    // slot i holds its row
  uint64_t* empty = reinterpret_cast<uint64_t*>(smem_raw + s.empty);  // slot i's row is released

  // The producer's thread sets up the ring and starts its first copies, which then overlap the staging of the
  // parameters below.
  const bool producer_thread = threadIdx.x == kConsumerThreads;
  Producer<scalar_t, KH, KW> producer(p);
  if (producer_thread) {
    for (int i = 0; i < p.slots; ++i) {
      bulk::barrier_init(&full[i], 1);
      bulk::barrier_init(&empty[i], kTeams);
    }
    bulk::fence_for_async_proxy();
    while (!producer.done() && producer.copy_row(p, ring, full, empty, false)) {
    }
  }
  // The parameters, rounded as the MMA takes them; zeros past the problem's channels and couts.
  using OL = OperandLayout<op_t>;
  stage_at_once<kCoutTile * OL::kChannels>(
      [&](int i) {
        const int cl = i / OL::kChannels, k = i % OL::kChannels;
        if (cl < p.out_channels && k < p.channels) return static_cast<float>(p.pw_weight[int64_t{cl} * p.channels + k]);
        if (OL::kBiasChannel && cl < p.out_channels && k == kMaxChannels && p.pw_bias != nullptr) {
          return static_cast<float>(p.pw_bias[cl]);
        }
        return 0.0f;
      },
      [&](int i, float v) {
        const int cl = i / OL::kChannels, k = i % OL::kChannels;
        op_t* at = reinterpret_cast<op_t*>(w + OL::W::at(cl, k, static_cast<int>(sizeof(op_t))));
        *at = pipelined::to_operand<kMath, op_t>(v);
      });
  if constexpr (OL::kBiasChannel) {  // D's bias k-step: 1 in channel kMaxChannels, which no row rewrites
    for (int i = threadIdx.x; i < kStripCols * OL::kStepChannels; i += kThreads) {
      const int pixel = i / OL::kStepChannels, k = kMaxChannels + i % OL::kStepChannels;
      op_t* at = reinterpret_cast<op_t*>(d + OL::D::at(pixel, k, static_cast<int>(sizeof(op_t))));
      *at = pipelined::to_operand<kMath, op_t>(k == kMaxChannels ? 1.0f : 0.0f);
    }
  }
  wgmma::publish_stores();  // the weights (and D's bias k-step) are read by wgmma
  using Filter = FilterRecord<KH, KW>;
  stage_at_once<kMaxChannels * Filter::kFloats>(
      [&](int i) {
        const int k = i / Filter::kFloats, e = i % Filter::kFloats;
        if (k >= p.channels) return 0.0f;
        if (e < KH * KW) return static_cast<float>(p.dw_weight[k * KH * KW + e]);
        if (e == KH * KW && p.dw_bias != nullptr) return static_cast<float>(p.dw_bias[k]);
        return 0.0f;
      },
      [&](int i, float v) { filters[i / Filter::kFloats].taps[i % Filter::kFloats] = v; });
  if constexpr (!OL::kBiasChannel) {
    for (int i = threadIdx.x; i < kCoutTile; i += kThreads) {
      pw_b[i] = p.pw_bias != nullptr && i < p.out_channels ? static_cast<float>(p.pw_bias[i]) : 0.0f;
    }
  }
  __syncthreads();

  if (threadIdx.x >= kConsumerThreads) {
    if (producer_thread) {
      while (!producer.done()) producer.copy_row(p, ring, full, empty, true);
    }
    return;
  }

  const Quarter quarter(threadIdx.x / 128);
  const ProductOperands operands = product_operands<op_t>(w, d, quarter);
  const int team = threadIdx.x / kTeamThreads;
  static_assert(kWarpgroupPixels * kTeams == kStripCols, "warpgroup wg's pixels are team wg / 2's");
  float acc[kAccumulators];
  // Step through the CTA's bands row by row. Each iteration computes a row's depthwise outputs, stores the previous
  // row (its product is complete), hands D over and issues this row's product. wgmma is issued and waited for on
  // every iteration, the last too (on a D not written again, its result dropped): ptxas serializes wgmma whose issue
  // or wait lies on a conditional path.
  const Share share(p.rows, p.strips);
  int64_t at = share.begin;  // the band's first row
  Band band = band_at(p, share, at);
  int i = 0;            // the row within the band
  RingCursor window;    // ring row of the window's first input row
  OutputRow previous{0, 0, 0};
  bool stored = true;  // the previous row is stored (none yet)
  for (;;) {
    const bool active = at < share.end;
    // Input rows that leave the window after this row, released to the producer: the oldest, or at a band's end all
    // KH (the next band's window starts after this one's last input row).
    const int leaving = i + 1 == band.rows ? KH : 1;
    float out[kPasses][kRunLength];
    if (active) {
      // Within a band the window's rows but the newest were waited for by the rows before.
      const scalar_t* rows[KH];
#pragma unroll
      for (int ky = 0; ky < KH; ++ky) {
        const RingCursor row = window.plus(ky, p.slots);
        if (i == 0 || ky == KH - 1) bulk::wait(&full[row.slot], row.parity);
        rows[ky] = reinterpret_cast<const scalar_t*>(ring + size_t(row.slot) * RL::kSlotBytes);
      }
      depthwise_row<scalar_t, KH, KW>(out, rows, filters, p.channels);
    }
    wgmma::wait<0>();
    wgmma::pin(acc);
    if (!stored) {
      if constexpr (kStoresBoxes<scalar_t>) {
        store_row_boxes(p, previous, acc, quarter, scratch);
      } else {
        store_row_vectors(p, previous, acc, pw_b, quarter, scratch);
      }
    }
    // The team's products of the previous row have completed (its half of D is free) and its threads have read this
    // row's window: the oldest row, or at a band's end all of its rows, go back to the producer once both teams
    // release them.
    if (active) bulk::fence_reads_before_async_writes();
    team_barrier(team);
    if (active) {
      if (threadIdx.x % kTeamThreads == 0) {
        for (int r = 0; r < leaving; ++r) bulk::arrive(&empty[window.plus(r, p.slots).slot]);
      }
      store_operands<scalar_t, kMath, op_t>(d, out);
      wgmma::publish_stores();
    }
    team_barrier(team);
    issue_product<scalar_t, kMath>(acc, operands);
    wgmma::pin(acc);
    if (!active) break;
    previous = OutputRow{band.n, band.y0 + i, band.x0};
    stored = false;
    window = window.plus(leaving, p.slots);
    if (++i == band.rows) {
      i = 0;
      at += band.rows;
      if (at < share.end) band = band_at(p, share, at);
    }
  }
  wgmma::wait<0>();
  if constexpr (kStoresBoxes<scalar_t>) {  // the scratch stays until the copy engine has read the last boxes
    if (threadIdx.x % 32 == 0) bulk::wait_stores_read<0>();
  }
#else
  __trap();  // launch() runs this kernel only where its machine code is sm_90a
#endif
}

template <typename scalar_t, int KH, int KW, Math kMath>
bool launch(Params<scalar_t>& p, const scalar_t* input, int64_t batch, int in_w, cudaStream_t stream, bool dry_run) {
  using RL = RowLayout<scalar_t, KW>;
  // As many slots as fit next to D and the weights, up to 8 (3x3: 4 in fp32, 8 in 16-bit); CONVOPS_STREAM_SLOTS
  // (read once) caps them, as CONVOPS_STREAM_CTAS caps the grid below, for tests and tuning.
  static const int64_t max_slots = tuning_value("CONVOPS_STREAM_SLOTS", 8);
  const size_t max_smem = max_shared_memory_per_block();
  int slots = KH + 1;
  if (Smem<scalar_t, KH, KW, kMath>(slots).total > max_smem) return false;
  while (slots < max_slots && Smem<scalar_t, KH, KW, kMath>(slots + 1).total <= max_smem) ++slots;
  p.slots = slots;
  p.strips = (p.out_w + kStripCols - 1) / kStripCols;
  p.rows = batch * p.out_h;
  if (dry_run) return true;

  const uint64_t row = uint64_t(in_w) * sizeof(scalar_t);
  p.row_bytes = static_cast<uint32_t>(RL::kSlotCols * p.channels * sizeof(scalar_t));
  if (!bulk::encode_tensor_map_3d(&p.input_map, bulk::tensor_map_type<scalar_t>(), input,
                                  {uint64_t(in_w), uint64_t(p.in_h), uint64_t(batch) * uint64_t(p.channels)},
                                  {row, row * uint64_t(p.in_h)},
                                  {static_cast<uint32_t>(RL::kSlotCols), 1u, static_cast<uint32_t>(p.channels)})) {
    return false;
  }
  if constexpr (kStoresBoxes<scalar_t>) {  // store_row_boxes' map
    const uint64_t out_row = uint64_t(p.out_w) * sizeof(scalar_t), out_plane = out_row * uint64_t(p.out_h);
    const uint64_t out_dims[4] = {uint64_t(p.out_w), uint64_t(p.out_h), uint64_t(p.out_channels), uint64_t(batch)};
    const uint64_t out_strides[3] = {out_row, out_plane, out_plane * uint64_t(p.out_channels)};
    const uint32_t out_box[4] = {uint32_t(kBoxRowBytes / sizeof(scalar_t)), 1u, uint32_t(kBoxCouts), 1u};
    if (!bulk::encode_tensor_map(&p.output_map, bulk::tensor_map_type<scalar_t>(), p.output, 4, out_dims,
                                 out_strides, out_box, CU_TENSOR_MAP_SWIZZLE_128B)) {
      return false;
    }
  }
  const auto kernel = separable_streaming_kernel<scalar_t, KH, KW, kMath>;
  const size_t smem = Smem<scalar_t, KH, KW, kMath>(p.slots).total;
  allow_dynamic_shared_memory(kernel, static_cast<int>(smem));
  static const int64_t max_ctas = tuning_value("CONVOPS_STREAM_CTAS", std::numeric_limits<int>::max());
  // Groups of one CTA a strip (Share), as many as fill the SMs (a group at least).
  const int64_t sms = std::min<int64_t>(multiprocessor_count(), max_ctas);
  const int64_t groups = std::min<int64_t>(p.rows, std::max<int64_t>(1, sms / p.strips));
  const int64_t ctas = groups * p.strips;
  kernel<<<static_cast<unsigned>(ctas), kThreads, smem, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace streaming

// Runs the row-streaming fused kernel and returns true, or returns false without doing anything when the problem is
// outside its scope (see the top of this file). The arguments are launch_separable_pipelined's.
template <typename scalar_t>
bool launch_separable_streaming(const at::Tensor& input, const at::Tensor& dw_weight,
                                const std::optional<at::Tensor>& dw_bias, const at::Tensor& pw_weight,
                                const std::optional<at::Tensor>& pw_bias, const at::Tensor& output,
                                const DepthwiseGeometry& d, bool tf32, cudaStream_t stream, bool dry_run) {
  using namespace streaming;
  if constexpr (std::is_same_v<scalar_t, double>) {
    return false;
  } else {
    if (!wgmma::runs_here()) return false;
    if (!fused_kernel_applies<scalar_t>(input, output, d, pw_weight.size(0), dry_run)) return false;
    // 16-byte vectors (fp32) and the output's tensor map (16-bit) need a 16-byte aligned base.
    if (!dry_run && reinterpret_cast<uintptr_t>(output.const_data_ptr()) % 16 != 0) return false;
    if (std::is_same_v<scalar_t, float> && !tf32) return false;  // strict fp32: the tile kernel's 3xTF32
    // (fused_kernel_applies has checked stride 1, dilation 1 and "same" padding along W: out_w == in_w.)
    if (d.multiplier != 1 || d.kernel_h != 3 || d.kernel_w != 3) return false;
    if (d.in_channels > kMaxChannels || pw_weight.size(0) > kCoutTile) return false;
    // A row costs the 1x1 of kCoutTile couts whatever the problem's: with few couts the tile kernel is faster (H200,
    // bench sweep, MobileNetV2 32 -> 16 channels at 112 x 112, batch 32, TF32: 0.099 ms against 0.061).
    if (pw_weight.size(0) < kMinCouts) return false;
    // Box coordinates (channel n * C, rows) are ints.
    if (d.batch * d.in_channels >= std::numeric_limits<int>::max()) return false;
    Params<scalar_t> p{};
    p.dw_weight = dw_weight.const_data_ptr<scalar_t>();
    p.dw_bias = optional_data<scalar_t>(dw_bias);
    p.pw_weight = pw_weight.const_data_ptr<scalar_t>();
    p.pw_bias = optional_data<scalar_t>(pw_bias);
    p.output = dry_run ? nullptr : output.mutable_data_ptr<scalar_t>();
    p.channels = static_cast<int>(d.in_channels);
    p.out_channels = static_cast<int>(pw_weight.size(0));
    p.in_h = static_cast<int>(d.in_h);
    p.out_h = static_cast<int>(d.out_h);
    p.out_w = static_cast<int>(d.out_w);
    p.pad_h = static_cast<int>(d.pad_h);
    const scalar_t* in = input.const_data_ptr<scalar_t>();
    constexpr Math kMath = std::is_same_v<scalar_t, float> ? Math::kTf32 : Math::kHalf;
    return launch<scalar_t, 3, 3, kMath>(p, in, d.batch, static_cast<int>(d.in_w), stream, dry_run);
  }
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
