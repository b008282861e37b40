// Bulk-copy depthwise kernel: the row-streaming kernel (depthwise_conv2d_rows.cuh) with its rows in flight held in
// a shared-memory ring that Hopper's bulk-copy engine fills, instead of in registers. For contiguous NCHW inputs with
// stride 1, dilation 1, a 3x3, 5x5 or 7x7 filter and rows of a multiple of 16 bytes, on sm_90.
//
// Why (issue #5): the register ring holds two rows a lane (24 KB in flight an SM at 6 CTAs), too few bytes to cover
// the H200's memory latency: the rows kernel reaches 86% of the copy-bandwidth floor in fp32 and 78% in bf16 there,
// and more rows in registers spill (bench/PERF_NOTES.md). Here one producer thread a block copies whole row segments
// (one instruction a row, no registers held) into `stages` slots, so the bytes in flight grow with the ring, not with
// the registers; per-lane cp.async rings were measured before and lost to the register ring (their copies cost as
// many instructions as the loads they replace).
//
// Block: `warps` consumer warps, one a strip of 32 x VEC output columns of one band of one plane (as in the rows
// kernel), and one producer warp. A ring slot holds the input columns of all the block's strips plus the halo
// vectors either side; slots' columns outside the image stay zero from the start (the copies never write them).
// Consumer lanes read their own 16-byte vectors (one, or two where a lane has 32 bytes of columns) and the
// neighbouring ones from the slot (16-byte loads, no shuffles), then walk down the band exactly as the rows kernel
// does (convolve_band), so the results are bitwise the rows kernel's.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <type_traits>

#include "common/checks.h"
#include "cuda/bulk_copy.cuh"
#include "cuda/depthwise_conv2d_rows.cuh"
#include "cuda/device_info.h"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {
namespace bulk_rows {

using rows::Band;
using rows::RowsParams;
using rows::Window;

constexpr int kMaxConsumerWarps = 4;
constexpr int kMaxThreads = (kMaxConsumerWarps + 1) * 32;

template <typename scalar_t>
struct BulkParams {
  RowsParams<scalar_t> rows;  // the problem as the rows kernel sees it (its `units` unused)
  int warps;                  // consumer warps a block: the strips of one column group
  int groups;                 // column groups a row
  int stage_shift;            // the ring has 1 << stage_shift slots
  int pitch;                  // 16-byte vectors a slot: the strips' lanes' vectors plus the halo vectors either side
};

// Per-filter choices. Vectors are 16 bytes; kMinBlocks caps the registers (the partial sums of KH rows of VEC
// outputs and the KH x KW taps live in registers).
// kStageShift, kBandRows: ring slots (log2) and output rows a block. Seed shape 16 x 64 x 512 x 512 on the H200
// (tools/dev_depthwise_rows.py shapes, 2026-11-26; fp32 / bf16 ms, 3x3 unpadded): 8 slots of bands of 32 rows
// 0.5785 / 0.3058, of 16 rows 0.5603 / 0.2906, 16 slots of 16 rows 0.5505 / 0.2931, 4 slots of 16 rows
// 0.5710 / 0.2957; bands of 8 rows lose in bf16 (0.34) and 5x5 (0.74 fp32). Short bands keep more blocks in
// the grid's last wave at the cost of re-reading KH - 1 halo rows a band (from L2), so 5x5 and 7x7 keep 32.
//
// kLaneBytes: the columns a lane computes, 16 bytes or, for 16-bit 3x3 rows of at least 512 columns (a multiple of
// 16), 32. The 16-bit rows are issue-bound (bench/PERF_NOTES.md): a row's ~60 instructions besides the FMAs (its
// slot's wait and release, the store's address and alignment tests) are shared by 16 outputs instead of 8. The
// wider lane holds 48 partial sums, so 4 blocks an SM cap its registers instead of 6.
template <typename scalar_t, int KH, int KW, int kLaneBytes = 16>
struct BulkConfig {
  static constexpr int kVec = kLaneBytes / static_cast<int>(sizeof(scalar_t));
  static constexpr int kMinBlocks = kLaneBytes == 32 ? 4 : (KH == 3 ? 6 : (KH == 5 ? 3 : 2));
  static constexpr int kStageShift = sizeof(scalar_t) == 4 && KH == 3 ? 4 : 3;
  static constexpr int kBandRows = KH == 3 ? 16 : 32;
  // 16-bit 7x7 (16-byte vectors: 56 partial sums and 49 taps a lane) is issue-bound and lost to the rows kernel's
  // 8-byte vectors on the seed shape (H200: 1.18 against 1.04 ms, tools/dev_depthwise_rows.py bench).
  static constexpr bool kTakes = kLaneBytes == 16 ? sizeof(scalar_t) == 4 || KH < 7 : sizeof(scalar_t) == 2 && KH == 3;
};

// A lane's window in the ring's 16-byte vectors: its VEC columns are kLaneVecs ring vectors, and its window words
// (Window::kWordLo .. kWordHi) lie in ring vectors kVecLo .. kVecHi counted from its first; a slot holds kExtraLeft /
// kExtraRight ring vectors beyond the strips' columns on either side.
template <typename scalar_t, int KW, int P0, int VEC>
struct Ring {
  using Win = Window<scalar_t, KW, P0, VEC>;
  static_assert(Win::NW % 4 == 0, "a lane's columns are whole 16-byte ring vectors");
  static constexpr int kElems = 16 / static_cast<int>(sizeof(scalar_t));
  static constexpr int kLaneVecs = Win::NW / 4;
  static constexpr int kVecLo = rows::floor_div(Win::kWordLo, 4);
  static constexpr int kVecHi = rows::floor_div(Win::kWordHi, 4);
  static constexpr int kExtraLeft = kVecLo < 0 ? -kVecLo : 0;
  static constexpr int kExtraRight = kVecHi >= kLaneVecs ? kVecHi - kLaneVecs + 1 : 0;
};

template <typename scalar_t, int KH, int KW, int P0, int VEC, int kMinBlocks>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks) depthwise_bulk_kernel(const BulkParams<scalar_t> bp) {
  using Win = Window<scalar_t, KW, P0, VEC>;
  using R = Ring<scalar_t, KW, P0, VEC>;
  constexpr int kVecLo = R::kVecLo, kVecHi = R::kVecHi;  // ring vectors a lane reads, from its first
  const RowsParams<scalar_t>& p = bp.rows;

  extern __shared__ __align__(16) unsigned char smem[];
  const int stages = 1 << bp.stage_shift;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + stages;
  uint4* ring = reinterpret_cast<uint4*>(smem + 16 * stages);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t block = blockIdx.x;
  const int group = static_cast<int>(block % bp.groups);
  const int64_t plane_band = block / bp.groups;
  const int64_t plane = plane_band / p.bands;  // n * out_channels + co
  const Band band(static_cast<int>(plane_band - plane * p.bands), p.band_rows, p.out_h, p.in_h, p.pad_h, KH);
  const int64_t n = plane / p.out_channels;
  const int co = static_cast<int>(plane - n * p.out_channels);
  const scalar_t* __restrict__ in_plane =
      p.input + (n * p.in_channels + co / p.multiplier) * (static_cast<int64_t>(p.in_h) * p.in_w);

  for (int i = threadIdx.x; i < stages * bp.pitch; i += blockDim.x) ring[i] = make_uint4(0u, 0u, 0u, 0u);
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      bulk::barrier_init(&full[s], 1);
      bulk::barrier_init(&empty[s], bp.warps * 32);
    }
  }
  bulk::fence_for_async_proxy();
  __syncthreads();

  // The slot's columns: input columns [seg0, seg0 + pitch * R::kElems), of which [lo, hi) lie inside the image.
  const int x0 = p.x_start + group * bp.warps * 32 * VEC;
  const int seg0 = x0 - R::kExtraLeft * R::kElems;

  if (warp == bp.warps) {  // the producer
    if (lane == 0) {
      const int lo = max(seg0, 0), hi = min(seg0 + bp.pitch * R::kElems, p.in_w);
      const uint32_t bytes = hi > lo ? static_cast<uint32_t>(hi - lo) * sizeof(scalar_t) : 0u;
      const scalar_t* src = in_plane + static_cast<int64_t>(band.iy0 + band.t_lo) * p.in_w + lo;
      uint4* dst = ring + (lo - seg0) / R::kElems;
      for (int i = 0; i < band.t_hi - band.t_lo; ++i, src += p.in_w) {
        const int s = i & (stages - 1);
        if (i >= stages) bulk::wait(&empty[s], ((i >> bp.stage_shift) - 1) & 1);
        if (bytes > 0) {
          bulk::arrive_expect_bytes(&full[s], bytes);
          bulk::copy_to_shared(dst + s * bp.pitch, src, bytes, &full[s]);
        } else {
          bulk::arrive(&full[s]);  // a strip wholly outside the image reads the zeros already there
        }
      }
    }
    return;
  }

  float w[KH][KW];
  rows::load_filter<scalar_t, KH, KW>(p.weight, co, w);
  const float bias = p.bias != nullptr ? static_cast<float>(p.bias[co]) : 0.0f;
  scalar_t* __restrict__ out_plane = p.output + plane * (static_cast<int64_t>(p.out_h) * p.out_w);
  const int own = warp * 32 + lane;  // this lane's columns in the block's strips
  const uint4* own_vector = ring + R::kExtraLeft + own * R::kLaneVecs;  // its first ring vector in slot 0

  rows::convolve_band<scalar_t, KH, KW, P0, VEC, KH>(
      band, w, bias, out_plane, p.out_w, x0 + own * VEC + p.shift_w, [](int, int) {},
      [&](int t, int, uint32_t(&words)[Win::kWords]) {
        const int i = t - band.t_lo;
        const int s = i & (stages - 1);
        bulk::wait(&full[s], (i >> bp.stage_shift) & 1);
        uint4 v[kVecHi - kVecLo + 1];
#pragma unroll
        for (int d = kVecLo; d <= kVecHi; ++d) v[d - kVecLo] = own_vector[s * bp.pitch + d];
        bulk::fence_reads_before_async_writes();  // this lane's reads of the slot, before the refill
        bulk::arrive(&empty[s]);
#pragma unroll
        for (int k = 0; k < Win::kWords; ++k) {
          const int wo = Win::kWordLo + k;
          const int d = rows::floor_div(wo, 4);
          const uint4& u = v[d - kVecLo];
          const int e = wo - 4 * d;
          words[k] = e == 0 ? u.x : (e == 1 ? u.y : (e == 2 ? u.z : u.w));
        }
      });
}

// CONVOPS_DEPTHWISE_BULK="stages,band_rows" overrides BulkConfig's ring slots (a power of two, 2-32) and band
// height (0: BulkConfig's), for measuring them (tools/dev_depthwise_rows.py shapes). Read once.
struct BulkShape {
  int stage_shift = 0;  // 0: BulkConfig's
  int band_rows = 0;
};

inline BulkShape bulk_shape_override() {
  static const BulkShape shape = [] {
    BulkShape s;
    if (const char* env = std::getenv("CONVOPS_DEPTHWISE_BULK")) {
      int stages = 0, band_rows = 0;
      if (std::sscanf(env, "%d,%d", &stages, &band_rows) >= 1 && stages >= 2 && stages <= 32) {
        while ((2 << s.stage_shift) <= stages) ++s.stage_shift;
        s.band_rows = std::max(0, band_rows);
      }
    }
    return s;
  }();
  return shape;
}

// CONVOPS_DEPTHWISE_BULK_LANES=16: 16-byte lanes only (BulkConfig's kLaneBytes), for measuring the 32-byte ones
// against; other values change nothing. Read once.
inline bool narrow_lanes_forced() {
  static const bool forced = [] {
    const char* env = std::getenv("CONVOPS_DEPTHWISE_BULK_LANES");
    return env != nullptr && std::atoi(env) == 16;
  }();
  return forced;
}

template <typename scalar_t, int KH, int KW, int P0, int kLaneBytes>
bool launch_bulk_kernel(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        at::Tensor& output, const DepthwiseGeometry& d, cudaStream_t stream) {
  using C = BulkConfig<scalar_t, KH, KW, kLaneBytes>;
  using R = Ring<scalar_t, KW, P0, C::kVec>;
  const auto kernel = depthwise_bulk_kernel<scalar_t, KH, KW, P0, C::kVec, C::kMinBlocks>;
  if (!C::kTakes || !bulk::runs_bulk_copies(kernel)) return false;
  if (d.in_w < 32 * C::kVec) return false;  // a row narrower than one strip would leave lanes idle
  if (reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 16 != 0) return false;
  std::optional<rows::RowsPlan<scalar_t>> plan = rows::plan_rows<scalar_t, KW, P0, C::kVec>(d, multiprocessor_count());
  if (!plan) return false;  // rows not a whole number of vectors, or coordinates past int
  const BulkShape override = bulk_shape_override();
  BulkParams<scalar_t> bp{};
  bp.rows = plan->params;
  // Bands no taller than the rows kernel's (which shortens them for small problems) nor than BulkConfig's.
  const int band_rows = override.band_rows > 0 ? override.band_rows : std::min(C::kBandRows, bp.rows.band_rows);
  bp.rows.band_rows = static_cast<int>(std::min<int64_t>(band_rows, d.out_h));
  bp.rows.bands = static_cast<int>((d.out_h + bp.rows.band_rows - 1) / bp.rows.band_rows);
  bp.warps = std::min(kMaxConsumerWarps, bp.rows.strips);
  bp.groups = (bp.rows.strips + bp.warps - 1) / bp.warps;
  bp.stage_shift = override.stage_shift > 0 ? override.stage_shift : C::kStageShift;
  bp.pitch = bp.warps * 32 * R::kLaneVecs + R::kExtraLeft + R::kExtraRight;
  const int64_t blocks = d.batch * d.out_channels * bp.rows.bands * bp.groups;
  const size_t smem = (size_t{16} + size_t{16} * bp.pitch) << bp.stage_shift;
  if (blocks >= (int64_t{1} << 31) || smem > 48 * 1024) return false;
  bp.rows.input = input.const_data_ptr<scalar_t>();
  bp.rows.weight = weight.const_data_ptr<scalar_t>();
  bp.rows.bias = optional_data<scalar_t>(bias);
  bp.rows.output = output.mutable_data_ptr<scalar_t>();
  kernel<<<static_cast<unsigned>(blocks), (bp.warps + 1) * 32, smem, stream>>>(bp);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace bulk_rows

// Runs depthwise_conv2d on the bulk-copy kernel and returns true, or returns false without doing anything when the
// problem or the device is not one it handles (the caller then tries the register-ring rows kernel). Same contract
// as launch_depthwise_rows.
template <typename scalar_t>
bool launch_depthwise_bulk(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           at::Tensor& output, const DepthwiseGeometry& d, cudaStream_t stream) {
  return rows::launch_streaming<scalar_t>(input, weight, bias, output, d, [&](auto k, auto p0) {
    constexpr int K = decltype(k)::value, P0 = decltype(p0)::value;
    if constexpr (bulk_rows::BulkConfig<scalar_t, K, K, 32>::kTakes) {
      if (!bulk_rows::narrow_lanes_forced() &&
          bulk_rows::launch_bulk_kernel<scalar_t, K, K, P0, 32>(input, weight, bias, output, d, stream)) {
        return true;
      }
    }
    return bulk_rows::launch_bulk_kernel<scalar_t, K, K, P0, 16>(input, weight, bias, output, d, stream);
  });
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
