// CUDA kernels of convops::conv_transpose2d / conv_transpose3d: the host side. It transforms the weight once per
// call into the layout the kernel reads, picks the precision policy and the tiling, and launches
// conv_transpose_kernel (conv_transpose_implicit_gemm.cuh), then the correction for non-finite weight taps
// (conv_transpose_nonfinite.cuh). 2-D calls run as 3-D with depth 1. Problems whose kernel equals their stride run
// as one GEMM and a pixel shuffle instead (conv_transpose_gemm.cuh). Strict fp32 runs as 3xTF32 on the tensor cores
// (conv_transpose_tf32x3.cuh, launch_tf32x3), or on FFMA where its split copy would pass int indexing.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "common/checks.h"
#include "common/precision.h"
#include "conv_transpose.h"
#include "cuda/conv_transpose_gemm.cuh"
#include "cuda/conv_transpose_implicit_gemm.cuh"
#include "cuda/conv_transpose_nonfinite.cuh"
#include "cuda/conv_transpose_shift_gemm.cuh"
#include "cuda/conv_transpose_shift_gemm_ws.cuh"
#include "cuda/conv_transpose_tf32x3.cuh"
#include "cuda/device_info.h"
#include "cuda/layout_transpose.cuh"
#include "cuda/path_choice.cuh"

namespace convops {
namespace {

using cuda::ConvTransposeParams;

// Shared memory one block may use for its two stages of brick and weights: two blocks fit an SM's 227 KB.
constexpr int64_t kSharedBudget = 112 * 1024;

int log2_exact(int64_t v) {
  int l = 0;
  while ((int64_t{1} << l) < v) ++l;
  return l;
}

// A prepared weight (contiguous) as the kernels multiply it. TF32: RN-rounded here once. Non-finite entries become
// finite (+-Inf -> +-tiny, NaN -> 0): the zeros around the input must not turn them into NaN, and
// conv_transpose_nonfinite_weight_kernel adds their real terms afterwards (conv_transpose_nonfinite.cuh).
at::Tensor finite_operands(at::Tensor w, bool tf32) {
  if (tf32) {
    // cuda::tf32_bits on the bits: round to nearest, ties to even. What is or rounds to non-finite (|w| near
    // FLT_MAX; a NaN of low payload comes out as Inf) is made finite by nan_to_num below; the correction kernel
    // rounds the original entries with tf32_bits itself and so adds those very taps.
    const at::Tensor bits = w.view(at::kInt);
    const at::Tensor half_ulp = at::bitwise_and(at::bitwise_right_shift(bits, 13), 1) + 0xFFF;
    w = at::bitwise_and(bits + half_ulp, ~0x1FFF).view(at::kFloat);
  }
  // The smallest normal number of the dtype (exact in TF32 too): x * tiny of a finite x stays far from overflow,
  // and +-Inf * +-tiny is the infinity +-Inf * +-Inf would give.
  const double tiny = w.scalar_type() == at::kHalf ? 0x1p-14 : static_cast<double>(std::numeric_limits<float>::min());
  return at::nan_to_num(w, 0.0, tiny, -tiny);
}

// (G, KD, KH, KW, cin_words, cout_pad) words: per group and tap, a [channel word][output channel] matrix, zero
// padded to whole chunks and channel blocks, so the kernel copies whole 16-byte rows without bounds checks; for the
// tensor cores, (G, KD, KH, KW, cin_words / 8, cout_pad, 8): rows of 8 channel words, each output channel's 8 words
// together in B-fragment order (conv_transpose_weight_row_words in conv_transpose_implicit_gemm.cuh).
// bf16/fp16: two consecutive input channels per 32-bit word. Then finite_operands.
at::Tensor transform_weight(const at::Tensor& weight5d, int64_t groups, int64_t channels_per_word, int64_t cin_words,
                            int64_t cout_pad, bool tensor_core, bool tf32) {
  const int64_t cin_g = weight5d.size(0) / groups, cout_g = weight5d.size(1);
  at::Tensor w = weight5d.reshape({groups, cin_g, cout_g, weight5d.size(2), weight5d.size(3), weight5d.size(4)})
                     .permute({0, 3, 4, 5, 1, 2});
  w = at::constant_pad_nd(w, {0, cout_pad - cout_g, 0, cin_words * channels_per_word - cin_g});
  if (channels_per_word == 2) {
    const auto s = w.sizes();
    w = w.reshape({s[0], s[1], s[2], s[3], cin_words, 2, cout_pad}).transpose(5, 6);
  }
  if (tensor_core) {
    // Word k = 4 h + t of a row of 8 goes to position 2 t + h, so that a lane's fragment words t and t + 4 are
    // adjacent: (.., cin_words, cout_pad[, 2]) -> (.., cin_words / 8, 2, 4, cout_pad[, 2]) -> (.., cin_words / 8,
    // cout_pad, 4, 2[, 2]). Views and one copy only: no index tensor, which would be a host copy (CUDA graphs).
    std::vector<int64_t> sizes = w.sizes().vec();
    sizes.erase(sizes.begin() + 4);
    sizes.insert(sizes.begin() + 4, {cin_words / 8, 2, 4});
    std::vector<int64_t> order{0, 1, 2, 3, 4, 7, 6, 5};
    if (channels_per_word == 2) order.push_back(8);
    w = w.reshape(sizes).permute(order);
  }
  return finite_operands(w.contiguous(), tf32);
}

struct Tiling {
  int tile_log2[3];
  int lane_axis;
  int group_taps[3];
  int brick[3];
  int brick_plane;
  int chunk;
  int stage_words;
  int64_t shared_bytes;
};

// Half-fragment loads of one warp for `taps` taps along w: windows of up to `window` taps one pixel apart share
// U + n - 1 loads; taps further apart load U each (MmaTile::taps).
int half_fragment_loads(int taps, int offset_step, int halves, int window) {
  if (offset_step != 1) return taps * halves;
  int loads = 0;
  for (int left = taps; left > 0; left -= window) loads += halves + std::min(left, window) - 1;
  return loads;
}

// Chooses the output tile (a power-of-two box of BM pixels in phase coordinates) and, for the tensor-core tile, the
// lane axis of its warps by an estimate of the instructions a call issues: per tile and k-step, the MMAs and
// B-fragment loads (the same for every tile), the A-fragment loads (fewer where taps along w share them) and the
// brick copy (a few instructions a word). Then the channel chunk and the taps per brick that fit the shared-memory
// budget. `halves` is MmaTile's U; 0 for the CUDA-core tile, which weighs MACs against brick words.
Tiling choose_tiling(const ConvTransposeParams& p, int bm, int bn, int halves, int window, int word_bytes,
                     int acc_bytes, int cin_words_min) {
  int max_taps[3], phase_extent[3];
  for (int d = 0; d < 3; ++d) {
    max_taps[d] = (p.kernel[d] + p.tap_step[d] - 1) / p.tap_step[d];
    phase_extent[d] = (p.out_size[d] + p.stride[d] - 1) / p.stride[d];
  }
  const int taps = max_taps[0] * max_taps[1] * max_taps[2];
  Tiling t{};
  const auto halo = [&](int d, int log2) { return (1 << log2) + (max_taps[d] - 1) * p.offset_step[d]; };
  const int bm_log2 = log2_exact(bm);
  double best = std::numeric_limits<double>::infinity();
  for (int ld = 0; ld <= bm_log2; ++ld) {
    for (int lh = 0; ld + lh <= bm_log2; ++lh) {
      const int lg[3] = {ld, lh, bm_log2 - ld - lh};
      double tiles = 1;
      for (int d = 0; d < 3; ++d) tiles *= std::ceil(static_cast<double>(phase_extent[d]) / (1 << lg[d]));
      if (halves == 0) {
        if (lg[2] < 3) continue;  // rows of 8 consecutive pixels keep the loads conflict-free
        const double brick = static_cast<double>(halo(0, lg[0])) * halo(1, lg[1]) * halo(2, lg[2]);
        const double cost = tiles * (bm + 2 * brick);  // MACs per channel word vs brick words loaded
        if (cost < best) {
          best = cost;
          std::copy(lg, lg + 3, t.tile_log2);
        }
        continue;
      }
      if ((1 << lg[2]) < halves) continue;
      for (int lane = 0; lane < 2; ++lane) {
        if ((1 << lg[lane]) < 8) continue;
        const int w_extent = halo(2, lg[2]) | 1, h_extent = lane == 0 ? halo(1, lg[1]) | 1 : halo(1, lg[1]);
        const double brick = static_cast<double>(halo(0, lg[0])) * h_extent * w_extent;
        const int nt = bn / 8, mt = halves / 2, warps = cuda::kConvTransposeWarps;
        const double fixed = static_cast<double>(warps) * taps * (mt * nt + 2 * nt);
        const double a_loads = 2.0 * warps * taps / max_taps[2] *
                               half_fragment_loads(max_taps[2], p.offset_step[2], halves, window);
        const double cost = tiles * (fixed + a_loads + brick);
        if (cost < best) {
          best = cost;
          std::copy(lg, lg + 3, t.tile_log2);
          t.lane_axis = lane;
        }
      }
    }
  }
  std::copy(max_taps, max_taps + 3, t.group_taps);
  t.chunk = cin_words_min >= 16 ? 16 : 8;
  const int pitch = cuda::conv_transpose_weight_words(bn, halves > 0);
  const auto plan = [&] {
    // 64-bit (and saturated) until the budget holds: with huge dilations the first candidate bricks exceed int (the
    // loop below then splits the taps until one brick is a tile), and a wrapped size could pass for a small one.
    constexpr int64_t kFarOverBudget = int64_t{1} << 32;
    int64_t volume = 1;
    for (int d = 0; d < 3; ++d) {
      t.brick[d] = (1 << t.tile_log2[d]) + (t.group_taps[d] - 1) * p.offset_step[d];
      if (halves > 0 && d > t.lane_axis) t.brick[d] |= 1;  // an odd lane step
      volume = std::min(volume * t.brick[d], kFarOverBudget);
    }
    const int64_t brick_plane = (volume + 31) / 32 * 32 + 8;  // fragment rows of 4 channel words: 4 bank octets
    const int64_t taps = static_cast<int64_t>(t.group_taps[0]) * t.group_taps[1] * t.group_taps[2];
    const int64_t stage_words = t.chunk * brick_plane + taps * t.chunk * pitch;
    t.brick_plane = static_cast<int>(std::min<int64_t>(brick_plane, std::numeric_limits<int>::max()));
    t.stage_words = static_cast<int>(std::min<int64_t>(stage_words, std::numeric_limits<int>::max()));
    return int64_t{2} * stage_words * word_bytes;  // two stages: one multiplied while the next is copied in
  };
  while (plan() > kSharedBudget) {
    if (t.chunk > 8) {
      t.chunk = 8;
      continue;
    }
    // Split the taps of the dimension whose halo costs the most into groups that each load their own brick.
    int widest = -1;
    for (int d = 0; d < 3; ++d) {
      if (t.group_taps[d] > 1 && (widest < 0 || (t.group_taps[d] - 1) * p.offset_step[d] >
                                                    (t.group_taps[widest] - 1) * p.offset_step[widest])) {
        widest = d;
      }
    }
    if (widest < 0) break;  // one tap per brick always fits: BM pixels x 8 words
    t.group_taps[widest] = (t.group_taps[widest] + 1) / 2;
  }
  const int64_t staging = static_cast<int64_t>(bn) * cuda::conv_transpose_stage_pitch(bm) * acc_bytes;
  t.shared_bytes = std::max(plan(), staging);
  return t;
}

// Adds the terms of the non-finite taps of `weight5d` (the weight as received, 5-D) to the main kernel's output.
// One short launch when every tap is finite; no host synchronisation (CUDA graphs capture it).
template <class Math>
void launch_nonfinite_weight_correction(const ConvTransposeParams& p, const at::Tensor& weight5d) {
  cuda::RawWeight w{weight5d.data_ptr(), {}, weight5d.numel()};
  for (int i = 0; i < 5; ++i) w.stride[i] = weight5d.stride(i);
  const int64_t blocks = (w.numel + cuda::kNonfiniteWeightThreads - 1) / cuda::kNonfiniteWeightThreads;
  cuda::conv_transpose_nonfinite_weight_kernel<Math><<<static_cast<unsigned>(blocks), cuda::kNonfiniteWeightThreads,
                                                        0, c10::cuda::getCurrentCUDAStream()>>>(p, w);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class Math, int BM, int BN>
void launch(ConvTransposeParams p, const at::Tensor& weight5d, bool tf32) {
  using Word = typename Math::Word;
  constexpr int kCpw = Math::kChannelsPerWord;
  const int cin_words_min = (p.cin_g + kCpw - 1) / kCpw;
  using Tile = cuda::ConvTransposeTile<Math, BM, BN>;
  int halves = 0;  // the CUDA-core tile has no half-fragments
  if constexpr (Math::kTensorCore) halves = Tile::U;
  const Tiling t = choose_tiling(p, BM, BN, halves, Tile::kWindow, sizeof(Word), sizeof(typename Math::Acc),
                                 cin_words_min);
  p.chunk = t.chunk;
  p.cin_words = (cin_words_min + t.chunk - 1) / t.chunk * t.chunk;
  p.co_blocks = (p.cout_g + BN - 1) / BN;
  p.cout_pad = p.co_blocks * BN;
  p.brick_plane = t.brick_plane;
  p.stage_words = t.stage_words;
  p.lane_axis = t.lane_axis;
  for (int d = 0; d < 3; ++d) {
    p.tile_log2[d] = t.tile_log2[d];
    p.group_taps[d] = t.group_taps[d];
    p.brick[d] = t.brick[d];
    const int phase_extent = (p.out_size[d] + p.stride[d] - 1) / p.stride[d];
    p.tiles[d] = (phase_extent + (1 << t.tile_log2[d]) - 1) >> t.tile_log2[d];
  }
  p.total_tiles = static_cast<int64_t>(p.batch) * p.groups * p.stride[0] * p.stride[1] * p.stride[2] * p.tiles[0] *
                  p.tiles[1] * p.tiles[2] * p.co_blocks;

  const at::Tensor weight =
      transform_weight(weight5d, p.groups, kCpw, p.cin_words, p.cout_pad, Math::kTensorCore, tf32);
  p.weight = weight.data_ptr();

  const auto kernel = cuda::conv_transpose_kernel<Math, BM, BN>;
  cuda::allow_dynamic_shared_memory(kernel, static_cast<int>(t.shared_bytes));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(p.total_tiles, int64_t{1} << 30));
  kernel<<<grid, cuda::kConvTransposeThreads, t.shared_bytes, c10::cuda::getCurrentCUDAStream()>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_nonfinite_weight_correction<Math>(p, weight5d);
}

// Tensor cores: channel blocks of BN <= 32 (wider groups take several blocks); narrow blocks get taller tiles so each
// B fragment serves more pixels. Every choice keeps the accumulators at <= 48 registers, so two blocks of 256
// threads share an SM without spilling.
template <class Math>
void launch_tensor_core(const ConvTransposeParams& p, const at::Tensor& weight5d, bool tf32) {
  if (p.cout_g <= 8) return launch<Math, 512, 8>(p, weight5d, tf32);
  if (p.cout_g <= 16) return launch<Math, 512, 16>(p, weight5d, tf32);
  // Rounded sums hold a second set of accumulators, with which 512 x 24 spills (ptxas, 2026-11-28).
  if (p.cout_g <= 24) return launch<Math, Math::kRoundedSums ? 256 : 512, 24>(p, weight5d, tf32);
  return launch<Math, 256, 32>(p, weight5d, tf32);
}

// The shift kernel's weight (conv_transpose_shift_gemm.cuh): per channel block and k-step, the taps flipped
// (tap j multiplies kernel entry K - 1 - j), each a wgmma B operand of n_tile rows x 32 bytes: (co_blocks, k_steps,
// taps, n_tile / 8, 2 channel groups, 8 rows, channels of a group), zero past C_in and C_out.
at::Tensor prepare_shift_weight(const at::Tensor& weight5d, int n_tile, int co_blocks, int k_steps, bool tf32) {
  const int64_t group = cuda::shift_gemm::kGroupBytes / weight5d.element_size();  // channels a 16-byte group
  const int64_t cin = weight5d.size(0), cout = weight5d.size(1);
  const int64_t taps = weight5d.size(2) * weight5d.size(3) * weight5d.size(4);
  at::Tensor w = at::constant_pad_nd(weight5d.flip({2, 3, 4}),
                                     {0, 0, 0, 0, 0, 0, 0, co_blocks * n_tile - cout, 0, k_steps * 2 * group - cin});
  w = w.reshape({k_steps, 2, group, co_blocks, n_tile / 8, 8, taps}).permute({3, 0, 6, 4, 1, 5, 2});
  return finite_operands(w.contiguous(), tf32);
}

// The shift kernel on the plan shift_gemm::applies chose.
template <class Math>
void launch_shift_gemm(const ConvTransposeParams& cp, const at::Tensor& weight5d, bool tf32,
                       const cuda::shift_gemm::Plan& plan) {
  namespace sg = cuda::shift_gemm;
  constexpr int kElementBytes = sizeof(typename Math::Input);
  const int n_tile = sg::channel_tile(cp.cout_g);
  const int k_steps = plan.k_steps;
  const int sms = cuda::multiprocessor_count();
  TORCH_INTERNAL_ASSERT(plan.row_blocks > 0, "shift_gemm: no plan");
  sg::Params p{};
  p.input = cp.input;
  p.bias = cp.bias;
  p.output = cp.output;
  for (int i = 0; i < 5; ++i) {
    p.in_stride[i] = cp.in_stride[i];
    p.out_stride[i] = cp.out_stride[i];
  }
  for (int d = 0; d < 3; ++d) {
    p.in_size[d] = cp.in_size[d];
    p.out_size[d] = cp.out_size[d];
    p.kernel[d] = cp.kernel[d];
    p.shift[d] = cp.kernel[d] - 1 - cp.padding[d];
  }
  p.cin = cp.cin_g;
  p.cout = cp.cout_g;
  p.k_steps = k_steps;
  const int taps = cp.kernel[0] * cp.kernel[1] * cp.kernel[2];
  p.tile_h = plan.tile_h;
  p.tile_w = plan.tile_w;
  p.brick_h = plan.brick_h;
  p.brick_w = plan.brick_w;
  p.skew = plan.skew;
  p.ragged_rows = cp.in_size[2] % 4 != 0;
  p.brick_pixels = plan.brick_pixels;
  p.units = plan.units;
  p.blocks = cuda::ceil_div(plan.brick_w, 4);
  p.blocks_div = cuda::FastDivmod(p.blocks);
  p.pairs_div = cuda::FastDivmod(cuda::ceil_div(p.blocks, 2));
  p.rows_in_group = cp.kernel[0] * plan.brick_h;
  p.brick_h_div = cuda::FastDivmod(plan.brick_h);
  p.weight_step_bytes = taps * n_tile * sg::kStepBytes;
  p.stage_bytes = plan.stage_bytes;
  p.pair_stores = sg::epilogue_pairs_fit(cp, plan.brick_w, plan.tile_w, kElementBytes);
  const int co_blocks = cuda::ceil_div(cp.cout_g, n_tile);
  p.total_tiles = static_cast<int>(sg::total_tiles(cp, plan, n_tile));  // within int: shift_gemm::applies
  p.co_blocks_div = cuda::FastDivmod(co_blocks);
  p.tiles_w_div = cuda::FastDivmod(plan.tiles_w);
  p.tiles_h_div = cuda::FastDivmod(plan.tiles_h);
  p.out_d_div = cuda::FastDivmod(cp.out_size[0]);
  p.brick_w_div = cuda::FastDivmod(plan.brick_w);
  const at::Tensor weight = prepare_shift_weight(weight5d, n_tile, co_blocks, k_steps, tf32);
  p.weight = weight.data_ptr();

  // Channel tiles of 64 take the warp-specialized kernel where three stages fit (conv_transpose_shift_gemm_ws.cuh).
  // (Not with rounded sums: its MMA warpgroups have no registers for a second set of accumulators.)
  p.stages = Math::kRoundedSums ? 0 : sg::ws_stages(plan, n_tile, kElementBytes, cuda::max_shared_memory_per_block());
  const bool ws = p.stages > 0;
  p.producer_halves = sg::ws_producer_halves(plan);
  const int shared = ws ? sg::ws_epilogue_offset(p) + sg::cout_rows_epilogue_bytes(kElementBytes)
                        : 2 * p.stage_bytes + sg::epilogue_bytes(n_tile, kElementBytes);
  const auto run = [&](auto kernel, int threads) {
    cuda::allow_dynamic_shared_memory(kernel, shared);
    const unsigned grid = static_cast<unsigned>(std::min(p.total_tiles, sms));
    kernel<<<grid, threads, shared, c10::cuda::getCurrentCUDAStream()>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  // Quartets are 16-bit only (shift_gemm::UnitPlace): TF32 compiles the rows order alone.
  const auto by_order = [&](auto n, auto mb) {
    constexpr int kN = decltype(n)::value, kMB = decltype(mb)::value;
    const auto with = [&](auto quartets) {
      if constexpr (Math::kRoundedSums && kMB > sg::rounded_sums_row_blocks(kN)) {  // choose_plan never picks them
        TORCH_INTERNAL_ASSERT(false, "shift_gemm: no rounded-sums kernel with ", kMB, " row blocks");
      } else {
        constexpr bool kQuartets = decltype(quartets)::value;
        if constexpr (kN == 64 && !Math::kRoundedSums) {
          if (ws) return run(sg::conv_transpose_shift_gemm_ws_kernel<Math, kMB, kQuartets>, sg::kWsThreads);
        }
        run(sg::conv_transpose_shift_gemm_kernel<Math, kN, kMB, kQuartets>, sg::kThreads);
      }
    };
    if constexpr (Math::kChannelsPerWord == 2) {
      if (plan.quartets) return with(std::true_type{});
    }
    with(std::false_type{});
  };
  const int mb = plan.row_blocks;
  if (n_tile == 24) {
    if (mb == 2) by_order(std::integral_constant<int, 24>{}, std::integral_constant<int, 2>{});
    else if (mb == 4) by_order(std::integral_constant<int, 24>{}, std::integral_constant<int, 4>{});
    else by_order(std::integral_constant<int, 24>{}, std::integral_constant<int, 6>{});
  } else {
    if (mb == 1) by_order(std::integral_constant<int, 64>{}, std::integral_constant<int, 1>{});
    else if (mb == 2) by_order(std::integral_constant<int, 64>{}, std::integral_constant<int, 2>{});
    else by_order(std::integral_constant<int, 64>{}, std::integral_constant<int, 3>{});
  }
  launch_nonfinite_weight_correction<Math>(cp, weight5d);
}

// Tensor cores: the wgmma shift kernel where it applies (stride 1, dilation 1, one group), else the mma.sync
// implicit GEMM.
template <class Math>
void launch_tensor_core_path(const ConvTransposeParams& p, const at::Tensor& input5d, const at::Tensor& weight5d,
                             bool tf32) {
  int64_t sizes[5];
  for (int i = 0; i < 5; ++i) sizes[i] = input5d.size(i);
  if (const auto plan =
          cuda::shift_gemm::applies(p, static_cast<int>(sizeof(typename Math::Input)), sizes, Math::kRoundedSums)) {
    return launch_shift_gemm<Math>(p, weight5d, tf32, *plan);
  }
  launch_tensor_core<Math>(p, weight5d, tf32);
}

// The kernel parameters of one call on 5-D views (2-D calls with depth 1) of its operands; the tiling and the
// prepared weight are the launchers' to fill in.
ConvTransposeParams make_params(const char* op, const at::Tensor& input5d, const at::Tensor& weight5d,
                                const at::Tensor& bias, const at::Tensor& output5d, const ConvTransposeArgs& args) {
  const int64_t sd = args.spatial_dims;
  ConvTransposeParams p{};
  p.input = input5d.data_ptr();
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.output = output5d.data_ptr();
  const auto to_int = [op](int64_t v, const char* what) {
    CONVOPS_CHECK(op, v <= std::numeric_limits<int>::max() / 4, what, " ", v, " is too large for the CUDA kernel");
    return static_cast<int>(v);
  };
  p.batch = to_int(input5d.size(0), "batch");
  p.groups = to_int(args.groups, "groups");
  p.cin_g = to_int(input5d.size(1) / args.groups, "input channels");
  p.cout_g = to_int(weight5d.size(1), "output channels");
  for (int d = 0; d < 3; ++d) {
    const int64_t a = d - (3 - sd);  // index into the per-dimension args; < 0 is the depth of a 2-D call
    p.in_size[d] = to_int(input5d.size(2 + d), "input size");
    p.out_size[d] = to_int(output5d.size(2 + d), "output size");
    p.kernel[d] = to_int(weight5d.size(2 + d), "kernel size");
    p.stride[d] = a < 0 ? 1 : to_int(args.stride[a], "stride");
    p.padding[d] = a < 0 ? 0 : to_int(args.padding[a], "padding");
    p.dilation[d] = a < 0 ? 1 : to_int(args.dilation[a], "dilation");
    const int g = std::gcd(p.stride[d], p.dilation[d]);
    p.tap_step[d] = p.stride[d] / g;
    p.offset_step[d] = p.dilation[d] / g;
  }
  for (int i = 0; i < 5; ++i) {
    p.in_stride[i] = input5d.stride(i);
    p.out_stride[i] = output5d.stride(i);
  }
  // 16-bit inputs whose rows are contiguous, with every other stride even and the data 4-byte aligned: an element at
  // an even column and its right neighbour are one aligned 4-byte copy (load_brick's paired bricks).
  bool paired = input5d.element_size() == 2 && p.in_stride[4] == 1 &&
                reinterpret_cast<uintptr_t>(input5d.data_ptr()) % 4 == 0;
  for (int i = 0; i < 4; ++i) paired &= input5d.size(i) == 1 || p.in_stride[i] % 2 == 0;
  p.paired_brick = paired;
  return p;
}

// Strict fp32 as 3xTF32 on the tensor cores (conv_transpose_tf32x3.cuh), a chunk of images at a time, each chunk's
// input split into a scratch copy. False (nothing run) where one image's copy or the weight's would pass int
// indexing, or the tripled channels the kernels' parameters (make_params).
bool launch_tf32x3(const char* op, const at::Tensor& input, const at::Tensor& weight5d, const at::Tensor& bias,
                   const at::Tensor& output5d, const ConvTransposeArgs& args) {
  namespace x3 = cuda::tf32x3;
  const int64_t weight_numel = weight5d.numel();
  if (!x3::fits(input, 1) || 3 * weight_numel >= std::numeric_limits<int>::max() ||
      3 * (input.size(1) / args.groups) > std::numeric_limits<int>::max() / 4) {
    return false;
  }
  const at::Tensor weight3 = x3::split_weight(weight5d, args.groups);
  const int64_t batch = input.size(0), chunk = x3::chunk_batch(input);
  for (int64_t n0 = 0; n0 < batch; n0 += chunk) {
    const int64_t images = std::min(chunk, batch - n0);
    const at::Tensor split = x3::split_input(input.narrow(0, n0, images), args.groups);
    const at::Tensor split5d = args.spatial_dims == 2 ? split.unsqueeze(2) : split;
    const at::Tensor out5d = output5d.narrow(0, n0, images);
    const ConvTransposeParams p = make_params(op, split5d, weight3, bias, out5d, args);
    // The reduction is 3 x cin_g x taps long, so each k-step's products are added in fp32 (Tf32RoundedSumsMma): on
    // the shift kernel where it applies (the split copy is dense: every stride-1 problem of one group whose input is
    // NCHW with rows of a multiple of 4 columns), else on the mma.sync kernel. Measured against the variants without
    // the fp32 sums or on the mma.sync kernel alone (H200, 2026-11-28, bench/PERF_NOTES.md: L1-65 5.97 ms and 1.2e-6
    // from eager, against 4.11 ms and 2.5e-5 past fp32's tolerance without the sums, 14.05 ms on the mma.sync
    // kernel). Each chunk prepares the split weight for its kernel anew (4 times on the L1-70 seed; not measured).
    launch_tensor_core_path<cuda::Tf32RoundedSumsMma>(p, split5d, weight3, /*tf32=*/true);
  }
  return true;
}

at::Tensor conv_transpose_kernel_path(const char* op, const at::Tensor& input, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias, const ConvTransposeArgs& args) {
  at::Tensor output = empty_conv_transpose_output(input, weight, args);
  if (output.numel() == 0) return output;
  if (cuda::conv_transpose_gemm_applies(input, weight, args)) {
    cuda::conv_transpose_as_gemm(input, weight, bias, args, output);
    return output;
  }

  // 2-D is 3-D with depth 1.
  const bool two_d = args.spatial_dims == 2;
  const at::Tensor input5d = two_d ? input.unsqueeze(2) : input;
  const at::Tensor weight5d = two_d ? weight.unsqueeze(2) : weight;
  const at::Tensor output5d = two_d ? output.unsqueeze(2) : output;
  const at::Tensor bias_c = bias.has_value() && bias->defined() ? bias->contiguous() : at::Tensor();
  const ConvTransposeParams p = make_params(op, input5d, weight5d, bias_c, output5d, args);

  switch (input.scalar_type()) {
    case at::kFloat:
      if (conv_allows_tf32(input)) {
        launch_tensor_core_path<cuda::Tf32Mma>(p, input5d, weight5d, /*tf32=*/true);
      } else if (!launch_tf32x3(op, input, weight5d, bias_c, output5d, args)) {
        launch<cuda::Fma<float>, 256, 32>(p, weight5d, false);
      }
      break;
    case at::kDouble:
      launch<cuda::Fma<double>, 128, 32>(p, weight5d, false);
      break;
    case at::kBFloat16:
      launch_tensor_core_path<cuda::Bf16Mma>(p, input5d, weight5d, false);
      break;
    case at::kHalf:
      launch_tensor_core_path<cuda::F16Mma>(p, input5d, weight5d, false);
      break;
    default:
      CONVOPS_CHECK(op, false, "unsupported dtype ", input.scalar_type());
  }
  return output;
}

// ATen's transposed convolution of `x` (the input or a channels-last copy of it), in the layout cuDNN gives it.
at::Tensor aten_conv_transpose(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                               const ConvTransposeArgs& args) {
  return at::convolution(x, weight, bias, args.stride, args.padding, args.dilation, /*transposed=*/true,
                         args.output_padding, args.groups);
}

// The convops path, or ATen's transposed convolution where that is faster (cuda/path_choice.cuh). ATen's runs in the
// input's layout or on a channels-last copy (path_choice.cuh, layout_for; CONVOPS_CONV_TRANSPOSE_LAYOUT=input|
// channels_last), decided under "auto" as "<op>.aten_layout": through channels-last (convops' transposes both ways,
// cuDNN's NHWC kernel between) the op ran UNet's k3 stride-2 layers 1.12-1.16x faster than in NCHW in TF32 and bf16,
// though still at 0.53-0.80x of Inductor's graph (H200, 2026-11-28 08:35 UTC; bench/RESULTS.md).
at::Tensor conv_transpose_cuda(const char* op, const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, const ConvTransposeArgs& args) {
  const c10::cuda::CUDAGuard guard(input.device());
  if (input.numel() == 0) return conv_transpose_kernel_path(op, input, weight, bias, args);  // nothing to time
  // Whether the convops path is the GEMM depends on a flag outside the key's tensors (deterministic algorithms): it
  // is part of the problem, so that a decision timed with one implementation is not reused for the other.
  const bool gemm = cuda::conv_transpose_gemm_applies(input, weight, args);
  const auto aten_in_input_layout = [&] {
    return aten_conv_transpose(input, weight, bias, args).contiguous(input.suggest_memory_format());
  };
  // cuDNN's NHWC kernels on a channels-last copy; the bias goes in with the copy back (layout_transpose.cuh), as
  // ATen adds it after cuDNN's kernel: the same rounding, one pass over the output fewer.
  const auto aten_through_channels_last = [&] {
    const at::Tensor y = aten_conv_transpose(cuda::channels_last_copy(input), weight, std::nullopt, args);
    return cuda::channels_first_copy(y, contiguous_or_none(bias));  // a strided bias would miss the fast copy
  };
  const auto aten_path = [&] {
    // The op's name (conv_transpose_entry's) with the stage's suffix, as a literal: nothing to build per call.
    const char* layout_op =
        args.spatial_dims == 2 ? "convops::conv_transpose2d.aten_layout" : "convops::conv_transpose3d.aten_layout";
    return cuda::run_in_chosen_layout(
        cuda::problem_key(layout_op, input, weight, bias, at::IntArrayRef(args.stride), at::IntArrayRef(args.padding),
                          at::IntArrayRef(args.output_padding), args.groups, at::IntArrayRef(args.dilation)),
        "CONVOPS_CONV_TRANSPOSE_LAYOUT", aten_through_channels_last, aten_in_input_layout);
  };
  return cuda::run_chosen_path(
      cuda::problem_key(op, input, weight, bias, at::IntArrayRef(args.stride), at::IntArrayRef(args.padding),
                        at::IntArrayRef(args.output_padding), args.groups, at::IntArrayRef(args.dilation), gemm),
      [&] { return conv_transpose_kernel_path(op, input, weight, bias, args); }, aten_path);
}

}  // namespace

TORCH_LIBRARY_IMPL(convops, CUDA, m) {
  m.impl("conv_transpose2d", conv_transpose_entry<conv_transpose_cuda, 2>);
  m.impl("conv_transpose3d", conv_transpose_entry<conv_transpose_cuda, 3>);
}

}  // namespace convops
