// Register-blocked depthwise kernel: the path of convops::depthwise_conv2d for contiguous NCHW tensors with stride 1,
// dilation 1 and a square 3x3, 5x5 or 7x7 filter whose rows are too narrow for the row-streaming kernels and whose
// outputs are at least 28 wide (blocked_pays): the MobileNetV2, EfficientNet-B0 and ConvNeXt-T layers of 28x28 to
// 112x112 planes, and the separable op's mixed path on them. Forced (CONVOPS_DEPTHWISE_KERNEL=blocked), it takes
// any plane size.
//
// Why (issue #5 sweep): the plane-block kernel (depthwise_conv2d_planes.cuh) gives a thread a column of outputs, so
// every output costs KW shared-memory loads per input row, every tap is predicated on the image's columns and the
// weights are reloaded per column; at 7x7 it is issue-bound at about 10% of the copy floor (ConvNeXt c96 56x56,
// batch 32: ncu 0.71 instructions issued a scheduler cycle at 11.7% DRAM). Here a thread computes a block of
// kRows x kCols outputs: each staged input row it touches is read once, as a few aligned vectors, and feeds up to
// kRows x kCols x K taps from registers, where the weights are too; the stage holds the convolution's padding as
// zeros, so no tap is predicated.
//
// Stage: per input plane, kRows-rounded band rows + K - 1 rows of `pitch` elements; staged column c is input column
// c - lead, with lead = pad_w (+1 in 16-bit where pad_w is odd, so that the 4-byte copies of column pairs are
// aligned at both ends; the tap windows then start one column later, kShift). Copies are 4-byte cp.async with zero
// fill, one per element pair (16-bit) or element (fp32), so a block's whole stage is in flight at once.
//
// Rounding: each output is the bias (or 0) plus one fmaf per tap in (ky, kx) order, as ATen's native depthwise kernel,
// so fp32 results are bitwise PyTorch's; taps over the padding add w * 0 (for a non-finite weight that is NaN at the
// border, as with cuDNN and the bulk-copy kernel).
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "common/checks.h"
#include "cuda/depthwise_conv2d_launch.cuh"
#include "cuda/depthwise_conv2d_rows.cuh"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"
#include "depthwise_conv2d.h"

namespace convops {
namespace cuda {
namespace depthwise {
namespace blocked {

constexpr int kThreads = 128;
constexpr int kRows = 4;                   // outputs of a thread's block: kRows rows x kCols columns
constexpr int kCols = 4;
constexpr int kTargetItems = 2 * kThreads;  // output blocks a CTA aims at
constexpr int kBlocksPerSm = 6;            // the register cap: 85 a thread
constexpr size_t kSmemBudget = 36 * 1024;   // so that kBlocksPerSm CTAs fit an SM's 227 KB

// 4-element vectors a thread reads from a staged row: its kCols outputs' windows span kCols + K - 1 columns starting
// kShift columns into the first vector.
__host__ __device__ constexpr int window_vectors(int k, int shift) {
  return (shift + kCols + k - 1 + 3) / 4;
}

template <typename scalar_t>
struct BlockedParams {
  const scalar_t* __restrict__ input;
  const scalar_t* __restrict__ weight;
  const scalar_t* __restrict__ bias;  // nullptr: no bias
  scalar_t* __restrict__ output;
  int in_h, in_w, out_h, out_w, pad_h;
  int lead;              // staged column of input column 0
  int pitch;             // staged row pitch in elements (a multiple of 4)
  int staged_rows;       // rows staged per input plane
  int planes_per_block;  // P output planes (whole planes) or 1 (bands)
  int band_rows;         // output rows of a block
  int bands;
  int multiplier, out_channels;
  int64_t total_planes;  // batch * out_channels
  int copy_lane_shift;   // log2 of the lanes that copy one staged row
  FastDivmod col_groups, row_groups, staged_rows_div, multiplier_div, out_channels_div;
};

// Four consecutive staged elements (one 16-byte vector in fp32, 8 bytes in 16-bit), widened to fp32.
template <typename scalar_t>
__device__ __forceinline__ void load4(const scalar_t* p, float* x) {
  using E = rows::Element<scalar_t>;
  constexpr int kWords = 4 / E::kPerWord;
  using Vector = std::conditional_t<kWords == 4, uint4, uint2>;
  const Vector v = *reinterpret_cast<const Vector*>(p);
  const uint32_t* words = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) x[i] = E::to_float(words[i / E::kPerWord], i % E::kPerWord);
}

template <typename scalar_t, int K, int kShift>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) depthwise_blocked_kernel(const BlockedParams<scalar_t> p) {
  constexpr int kElementsPerCopy = 4 / sizeof(scalar_t);
  constexpr int kVectors = window_vectors(K, kShift);
  extern __shared__ __align__(16) unsigned char smem_raw[];

  const int band = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.bands));
  const int64_t p0 = static_cast<int64_t>(blockIdx.x / static_cast<unsigned>(p.bands)) * p.planes_per_block;
  const int64_t left = p.total_planes - p0;
  const int planes = left < p.planes_per_block ? static_cast<int>(left) : p.planes_per_block;
  const int oy0 = band * p.band_rows;
  const int rows = min(p.band_rows, p.out_h - oy0);

  // Output plane p0 + j reads input plane (p0 + j) / multiplier = q0 + (r0 + j) / multiplier.
  const int64_t q0 = p0 / p.multiplier;
  const int r0 = static_cast<int>(p0 - q0 * p.multiplier);
  const int nq = p.multiplier_div.div(r0 + planes - 1) + 1;
  const int c0 = static_cast<int>(p0 % p.out_channels);

  scalar_t* stage = reinterpret_cast<scalar_t*>(smem_raw);

  // The stage: every 4-byte piece of it by cp.async, zeros where it is outside the image. Pieces [first, end) of a
  // staged row hold input columns; lanes of a team copy a row's pieces, teams take rows.
  {
    const int lanes = 1 << p.copy_lane_shift;
    const int lane = threadIdx.x & (lanes - 1);
    const int pieces = p.pitch / kElementsPerCopy;
    const int first = p.lead / kElementsPerCopy, end = (p.lead + p.in_w) / kElementsPerCopy;
    const int64_t in_plane = int64_t{p.in_h} * p.in_w;
    for (int row = threadIdx.x >> p.copy_lane_shift; row < nq * p.staged_rows; row += kThreads >> p.copy_lane_shift) {
      int plane;
      const int sr = p.staged_rows_div.divmod(row, plane);
      const int iy = oy0 - p.pad_h + sr;
      const bool row_inside = static_cast<unsigned>(iy) < static_cast<unsigned>(p.in_h);
      // Piece k of the row is input element src[k * kElementsPerCopy] (only formed where it is inside).
      const scalar_t* src = p.input + (q0 + plane) * in_plane + int64_t{row_inside ? iy : 0} * p.in_w - p.lead;
      scalar_t* dst = stage + row * p.pitch;
      for (int piece = lane; piece < pieces; piece += lanes) {
        const bool inside = row_inside && piece >= first && piece < end;
        cp_async_zfill<4>(dst + piece * kElementsPerCopy, inside ? src + piece * kElementsPerCopy : p.input, inside);
      }
    }
    cp_async_commit();
  }
  cp_async_wait<0>();
  __syncthreads();

  const int items = planes * static_cast<int>(p.row_groups.divisor) * static_cast<int>(p.col_groups.divisor);
  const int64_t out_plane = int64_t{p.out_h} * p.out_w;
  for (int item = threadIdx.x; item < items; item += kThreads) {
    int rest, j;
    const int cg = p.col_groups.divmod(item, rest);
    const int rg = p.row_groups.divmod(rest, j);
    if (rg * kRows >= rows) continue;  // a row group past the last band's end
    const int jq = p.multiplier_div.div(r0 + j);

    // The plane's weights and bias, straight from global memory: the loads are independent, so one round trip
    // (a loop filling a shared-memory table first took a round trip per element, and was no faster).
    int wraps;
    const int co = p.out_channels_div.divmod(c0 + j, wraps);
    float w[K][K];
    rows::load_filter<scalar_t, K, K>(p.weight, co, w);
    const float bias = p.bias != nullptr ? static_cast<float>(p.bias[co]) : 0.0f;
    float acc[kRows][kCols];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[i][c] = bias;
    }

    // Staged row rg * kRows + s feeds output row i of the block through filter row ky = s - i: it is read once.
    const scalar_t* window = stage + (jq * p.staged_rows + rg * kRows) * p.pitch + cg * kCols;
#pragma unroll
    for (int s = 0; s < kRows + K - 1; ++s) {
      float x[4 * kVectors];
#pragma unroll
      for (int v = 0; v < kVectors; ++v) load4(window + s * p.pitch + 4 * v, x + 4 * v);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int ky = s - i;
        if (ky < 0 || ky >= K) continue;
#pragma unroll
        for (int kx = 0; kx < K; ++kx) {
#pragma unroll
          for (int c = 0; c < kCols; ++c) acc[i][c] = fmaf(w[ky][kx], x[kShift + c + kx], acc[i][c]);
        }
      }
    }

    // Plain stores: the streaming hint's effect here is not measured (it cost the separable kernel's fp32 rows).
    scalar_t* out = p.output + (p0 + j) * out_plane + int64_t{oy0 + rg * kRows} * p.out_w;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (rg * kRows + i < rows) {
        rows::store_outputs<scalar_t, kCols, /*kStreaming=*/false>(out + int64_t{i} * p.out_w, cg * kCols, p.out_w,
                                                                   acc[i]);
      }
    }
  }
}

// Bytes of shared memory of a block of `planes` output planes and `row_groups` groups of kRows output rows.
inline int64_t blocked_smem_bytes(const DepthwiseGeometry& d, int64_t planes, int64_t row_groups, int64_t pitch,
                                  int64_t element_size) {
  const int64_t input_planes = input_planes_read(d, planes);
  const int64_t staged_rows = row_groups * kRows + d.kernel_h - 1;
  return input_planes * staged_rows * pitch * element_size;
}

// A launch of the kernel: its parameters (pointers filled in by the caller), the tap windows' column shift (a
// template parameter), the grid and the shared memory.
template <typename scalar_t>
struct BlockedPlan {
  BlockedParams<scalar_t> params;
  int shift;
  unsigned blocks;
  size_t smem_bytes;
};

// The block shape for problem d, or nullopt where the kernel does not take it. Whole planes, several a block, where
// one fits; else bands of rows of one plane. Blocks aim at kTargetItems output blocks within kSmemBudget, with
// enough blocks to fill the device.
template <typename scalar_t>
std::optional<BlockedPlan<scalar_t>> plan_blocked(const DepthwiseGeometry& d, int sm_count) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  constexpr bool kSixteenBit = sizeof(scalar_t) == 2;
  const int64_t k = d.kernel_h;
  if (d.kernel_w != k || (k != 3 && k != 5 && k != 7) || d.stride_h != 1 || d.stride_w != 1 || d.dilation_h != 1 ||
      d.dilation_w != 1 || (kSixteenBit && d.in_w % 2 != 0)) {
    return std::nullopt;
  }
  for (const int64_t v : {d.in_h, d.in_w, d.out_h, d.out_w, d.pad_h, d.pad_w, d.out_channels}) {
    if (v >= kIntMax / 8) return std::nullopt;
  }
  const int64_t shift = kSixteenBit ? d.pad_w % 2 : 0;
  const int64_t lead = d.pad_w + shift;
  const int64_t col_groups = ceil_div<int64_t>(d.out_w, kCols);
  const int64_t pitch =
      ceil_div<int64_t>(std::max(lead + d.in_w, kCols * (col_groups - 1) + 4 * window_vectors(k, shift)), 4) * 4;
  const int64_t plane_row_groups = ceil_div<int64_t>(d.out_h, kRows);
  const int64_t total_planes = d.batch * d.out_channels;
  const int64_t min_blocks = 2 * int64_t{sm_count};
  const auto fits = [&](int64_t planes, int64_t row_groups) {
    return blocked_smem_bytes(d, planes, row_groups, pitch, sizeof(scalar_t)) <= int64_t{kSmemBudget};
  };

  // Whole planes where one fits and there are enough of them; else bands, short enough for min_blocks blocks.
  int64_t planes = 1, row_groups = plane_row_groups;
  if (fits(1, plane_row_groups) && (total_planes >= min_blocks || plane_row_groups == 1)) {
    planes = ceil_div<int64_t>(kTargetItems, plane_row_groups * col_groups);
    planes = std::min(planes, std::max<int64_t>(1, total_planes / min_blocks));
    while (planes > 1 && !fits(planes, row_groups)) --planes;
  } else {
    row_groups = std::min(plane_row_groups, ceil_div<int64_t>(kTargetItems, col_groups));
    while (row_groups > 1 && total_planes * ceil_div(plane_row_groups, row_groups) < min_blocks) --row_groups;
    while (row_groups > 0 && !fits(1, row_groups)) --row_groups;
    if (row_groups == 0) return std::nullopt;
  }
  const int64_t band_rows = std::min(d.out_h, row_groups * kRows);
  const int64_t bands = ceil_div(d.out_h, band_rows);
  const int64_t blocks = ceil_div(total_planes, planes) * bands;
  if (blocks >= (int64_t{1} << 31) || planes * row_groups * col_groups >= kIntMax) return std::nullopt;

  BlockedPlan<scalar_t> plan{};
  plan.shift = static_cast<int>(shift);
  plan.blocks = static_cast<unsigned>(blocks);
  plan.smem_bytes = static_cast<size_t>(blocked_smem_bytes(d, planes, row_groups, pitch, sizeof(scalar_t)));
  BlockedParams<scalar_t>& p = plan.params;
  p.in_h = static_cast<int>(d.in_h);
  p.in_w = static_cast<int>(d.in_w);
  p.out_h = static_cast<int>(d.out_h);
  p.out_w = static_cast<int>(d.out_w);
  p.pad_h = static_cast<int>(d.pad_h);
  p.lead = static_cast<int>(lead);
  p.pitch = static_cast<int>(pitch);
  p.staged_rows = static_cast<int>(row_groups * kRows + k - 1);
  p.planes_per_block = static_cast<int>(planes);
  p.band_rows = static_cast<int>(band_rows);
  p.bands = static_cast<int>(bands);
  p.multiplier = static_cast<int>(d.multiplier);
  p.out_channels = static_cast<int>(d.out_channels);
  p.total_planes = total_planes;
  const int64_t pieces = pitch * int64_t{sizeof(scalar_t)} / 4;
  // Teams of lanes a power of two, about two pieces a lane.
  while ((int64_t{1} << p.copy_lane_shift) < std::min<int64_t>(32, ceil_div<int64_t>(pieces, 2))) ++p.copy_lane_shift;
  p.col_groups = FastDivmod(static_cast<int>(col_groups));
  p.row_groups = FastDivmod(static_cast<int>(row_groups));
  p.staged_rows_div = FastDivmod(p.staged_rows);
  p.multiplier_div = FastDivmod(p.multiplier);
  p.out_channels_div = FastDivmod(p.out_channels);
  return plan;
}

// Where the dispatch takes this kernel rather than the plane-block one: outputs at least 28 wide. Measured on an H200
// (2026-11-26 22:28 UTC, the sweep's stride-1 layers at batch 32, each kernel forced as tools/dev_depthwise_planes.py
// bench does; us, this / plane-block, fp32 then bf16): 112x112 3x3 39 / 49 and 31 / 51; 28x28 5x5 30 / 41 and
// 26 / 42; 56x56 7x7 51 / 83 and 47 / 88; 28x28 7x7 45 / 53 and 34 / 56; but 14x14 3x3 28 / 17 and 22 / 17, 14x14
// 7x7 32 / 31 and 26 / 34, 7x7 3x3 25 / 15, 7x7 7x7 25 / 19: on small planes the stage (rows rounded up to kRows,
// columns to kCols, the padding, a copy per 4 bytes) outweighs the blocking. With 8-row blocks (116 registers, 4
// CTAs an SM) every layer was slower: 56x56 7x7 53 and 52, 14x14 3x3 44 and 31.
// Also taken: 7x7 filters on outputs 14 to 27 wide (at batch 32 above: 32 / 31 and 26 / 34), and small problems
// (is_small_problem: batch-1 layers), where it is at least as fast as the plane-block kernel with its short runs
// (H200, 2026-11-27 00:54 and 00:59 UTC, batch 1, do_bench us, this / plane-block, TF32 then bf16): 14x14 3x3 (c480)
// 6.3 / 7.0 and 6.5 / 7.3; 7x7 3x3 6.6 / 7.4 (16-bit odd widths are not taken); 7x7 7x7 7.0 / 7.1; 14x14 7x7 7.5 /
// 7.3 and 7.2 / 7.4; and against the plane-block kernel's long runs (00:47) 14x14 7x7 7.6 / 10.9 and 6.7 / 12.5.
// Of the small problems, the small-problem kernel (depthwise_conv2d_small.cuh, small_kernel_pays) takes most first.
inline bool blocked_pays(const DepthwiseGeometry& d) {
  return d.out_w >= 28 || (d.kernel_w == 7 && d.out_w >= 14) || is_small_problem(d);
}

template <typename scalar_t, int K, int kShift>
void launch_blocked_kernel(const BlockedPlan<scalar_t>& plan, cudaStream_t stream) {
  depthwise_blocked_kernel<scalar_t, K, kShift><<<plan.blocks, kThreads, plan.smem_bytes, stream>>>(plan.params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, int K>
void launch_blocked_kernel(const BlockedPlan<scalar_t>& plan, cudaStream_t stream) {
  if constexpr (sizeof(scalar_t) == 2) {
    if (plan.shift == 1) return launch_blocked_kernel<scalar_t, K, 1>(plan, stream);
  }
  launch_blocked_kernel<scalar_t, K, 0>(plan, stream);
}

}  // namespace blocked

// Runs depthwise_conv2d on the register-blocked kernel and returns true, or returns false without doing anything
// where the problem is not one it takes (see plan_blocked; also non-contiguous tensors, fp64, 16-bit input not
// 4-byte aligned). weight and bias must be contiguous; output must be non-empty.
template <typename scalar_t>
bool launch_depthwise_blocked(const at::Tensor& input, const at::Tensor& weight,
                              const std::optional<at::Tensor>& bias, at::Tensor& output, const DepthwiseGeometry& d,
                              cudaStream_t stream) {
  if constexpr (std::is_same_v<scalar_t, double>) {
    return false;
  } else {
    if (!input.is_contiguous() || !output.is_contiguous() || output.numel() == 0 ||
        reinterpret_cast<uintptr_t>(input.const_data_ptr()) % 4 != 0) {
      return false;
    }
    auto plan = blocked::plan_blocked<scalar_t>(d, multiprocessor_count());
    if (!plan) return false;
    blocked::BlockedParams<scalar_t>& p = plan->params;
    p.input = input.const_data_ptr<scalar_t>();
    p.weight = weight.const_data_ptr<scalar_t>();
    p.bias = optional_data<scalar_t>(bias);
    p.output = output.mutable_data_ptr<scalar_t>();
    switch (d.kernel_h) {
      case 3: blocked::launch_blocked_kernel<scalar_t, 3>(*plan, stream); break;
      case 5: blocked::launch_blocked_kernel<scalar_t, 5>(*plan, stream); break;
      default: blocked::launch_blocked_kernel<scalar_t, 7>(*plan, stream); break;
    }
    return true;
  }
}

}  // namespace depthwise
}  // namespace cuda
}  // namespace convops
