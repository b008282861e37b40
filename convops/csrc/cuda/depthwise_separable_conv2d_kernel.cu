// CUDA implementation of convops::depthwise_separable_conv2d. Under the path choice (cuda/path_choice.cuh) the op
// runs one of:
//   - a fused kernel (the depthwise intermediate stays in shared memory), for the problems it covers: the
//     small-problem kernel for latency-bound ones (depthwise_separable_conv2d_small.cuh, the 1x1 on FFMA), the
//     row-streaming kernel (depthwise_separable_conv2d_streaming.cuh, Hopper, the seed's kind of problem) or the
//     tile kernel (depthwise_separable_conv2d_pipelined.cuh), both with the 1x1 on tensor cores; elsewhere the
//     "convops" path is the mixed one;
//   - "mixed": the convops depthwise kernel, then the 1x1 as a cuBLAS GEMM or as ATen's 1x1 convolution, whichever
//     "auto" timed faster for that intermediate (pointwise_stage); for an NCHW input of small planes "auto" also
//     times it against the pair through channels-last (the convops depthwise kernel from NCHW into NHWC, the same
//     1x1 stage in NHWC, the output copied back to NCHW with the bias);
//   - "aten": ATen's two convolutions.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/precision.h"
#include "cuda/channel_bias.cuh"
#include "cuda/convolution_gemm.cuh"
#include "cuda/depthwise_conv2d_launch.cuh"
#include "cuda/depthwise_conv2d_to_nhwc.cuh"
#include "cuda/depthwise_separable_conv2d_pointwise.cuh"
#include "cuda/depthwise_separable_conv2d_pipelined.cuh"
#include "cuda/depthwise_separable_conv2d_small.cuh"
#include "cuda/depthwise_separable_conv2d_streaming.cuh"
#include "cuda/device_utils.cuh"
#include "cuda/layout_transpose.cuh"
#include "cuda/path_choice.cuh"
#include "depthwise_separable_conv2d.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

namespace convops {
namespace cuda {
namespace depthwise {
namespace {

constexpr const char* kOp = "convops::depthwise_separable_conv2d";

// The problem's tensors as the fused kernel takes them (contiguous parameters).
struct Operands {
  at::Tensor input, dw_weight, pw_weight;
  std::optional<at::Tensor> dw_bias, pw_bias;
};

// Which fused kernels may run (read each call). Normally any: the dispatch picks. CONVOPS_SEPARABLE_KERNEL=small
// takes the small-problem kernel wherever it applies, not only where it pays; =streaming leaves the small-problem
// kernel out; =tile leaves out both it and the row-streaming kernel; =none leaves out every fused kernel, so that the
// convops path is the mixed one. For tests and for timing the kernels and paths against each other; a kernel that
// does not take the problem falls through to the next.
enum class FusedChoice { kAny, kSmall, kStreaming, kTile, kNone };

FusedChoice fused_choice() {
  const char* env = std::getenv("CONVOPS_SEPARABLE_KERNEL");
  if (env == nullptr) return FusedChoice::kAny;
  if (std::strcmp(env, "small") == 0) return FusedChoice::kSmall;
  if (std::strcmp(env, "streaming") == 0) return FusedChoice::kStreaming;
  if (std::strcmp(env, "tile") == 0) return FusedChoice::kTile;
  if (std::strcmp(env, "none") == 0) return FusedChoice::kNone;
  return FusedChoice::kAny;
}

// Runs (or with dry_run only asks about) a fused kernel: the small-problem one for the latency-bound problems where
// it pays, else the row-streaming one where it applies, else the tile one; false where the problem is outside every
// scope.
bool fused_kernel(const Operands& o, const at::Tensor& output, const DepthwiseGeometry& d, bool dry_run) {
  const FusedChoice choice = fused_choice();
  if (o.input.scalar_type() == at::kDouble || choice == FusedChoice::kNone) return false;
  const bool small = choice == FusedChoice::kSmall ||
                     (choice == FusedChoice::kAny && small_separable_pays(d, o.pw_weight.size(0)));
  const bool streaming = choice != FusedChoice::kTile;
  bool ran = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, o.input.scalar_type(), "convops_depthwise_separable", [&] {
    const bool tf32 = conv_allows_tf32(o.input);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    ran = (small && launch_separable_small<scalar_t>(o.input, o.dw_weight, o.dw_bias, o.pw_weight, o.pw_bias,
                                                     output, d, tf32, stream, dry_run)) ||
          (streaming && launch_separable_streaming<scalar_t>(o.input, o.dw_weight, o.dw_bias, o.pw_weight,
                                                             o.pw_bias, output, d, tf32, stream, dry_run)) ||
          launch_separable_pipelined<scalar_t>(o.input, o.dw_weight, o.dw_bias, o.pw_weight, o.pw_bias, output, d,
                                               tf32, stream, dry_run);
  });
  return ran;
}

// ATen's 1x1 convolution of the depthwise intermediate, the second stage of the ATen path, its output dense in the
// input's memory format.
at::Tensor aten_pointwise(const at::Tensor& mid, const at::Tensor& input, const at::Tensor& pointwise_weight,
                          const std::optional<at::Tensor>& pointwise_bias) {
  return at::convolution(mid, pointwise_weight, pointwise_bias, {1, 1}, {0, 0}, {1, 1}, false, {0, 0}, 1)
      .contiguous(input.suggest_memory_format());
}

// The layouts the 1x1 can run in as a GEMM: the intermediate dense in NCHW, or in NHWC for a channels-last input.
// The layout decides, not contiguity alone: with one channel a channels-last tensor is NCHW-contiguous too, and the
// output must be channels-last all the same.
enum class GemmLayout { kNone, kNchw, kNhwc };

// The layout in which the 1x1 of `mid` can be a cuBLAS GEMM computed as ATen's 1x1 convolution, or kNone: fp64,
// other layouts, where convolution_gemm_applies does not hold (extents past int, deterministic algorithms), and in
// NHWC where ATen's mm would compute otherwise (cublas_gemm_matches_convolution). NCHW takes
// batched_convolution_gemm, which keeps the convolution's precision in every mode, TF32 included.
GemmLayout pointwise_gemm_layout(const at::Tensor& mid, const at::Tensor& input, const at::Tensor& pointwise_weight) {
  const bool nhwc = input.suggest_memory_format() == at::MemoryFormat::ChannelsLast &&
                    mid.is_contiguous(at::MemoryFormat::ChannelsLast);
  const bool nchw = !nhwc && mid.is_contiguous();
  const int64_t n = mid.size(0), c = mid.size(1), pixels = mid.size(2) * mid.size(3);
  if (mid.scalar_type() == at::kDouble) return GemmLayout::kNone;
  if (nchw && convolution_gemm_applies(n, pointwise_weight.size(0), c, pixels)) return GemmLayout::kNchw;
  // NHWC: one (N HW x C) @ (C x C_out), a single "image" of N HW pixels.
  if (nhwc && cublas_gemm_matches_convolution(mid.scalar_type()) &&
      convolution_gemm_applies(1, pointwise_weight.size(0), c, n * pixels)) {
    return GemmLayout::kNhwc;
  }
  return GemmLayout::kNone;
}

// The 1x1 as a GEMM (layout from pointwise_gemm_layout): per image W (C_out x C) times the C x HW intermediate in
// NCHW, or one (N HW x C) times W^T in channels-last. The bias goes in as ATen adds it after cuDNN's convolution: a
// separate add on the rounded product (cuBLASLt's bias epilogue would round once, not twice), in NCHW by convops' own
// add (channel_bias.cuh: ATen's broadcast add was the mixed path's largest cost).
at::Tensor pointwise_as_gemm(const at::Tensor& mid, GemmLayout layout, const at::Tensor& pointwise_weight,
                             const std::optional<at::Tensor>& pointwise_bias) {
  const int64_t n = mid.size(0), c = mid.size(1), h = mid.size(2), w = mid.size(3);
  const int64_t c_out = pointwise_weight.size(0);
  const bool nchw = layout == GemmLayout::kNchw;
  const int64_t rows = n * h * w;
  const at::Tensor weight = pointwise_weight.reshape({c_out, c});
  const bool has_bias = pointwise_bias.has_value() && pointwise_bias->defined();
  if (nchw) {
    at::Tensor out =  // (N, C_out, HW): NCHW
        batched_convolution_gemm(weight.contiguous(), mid.view({n, c, h * w}), conv_allows_tf32(mid)).contiguous();
    if (has_bias && !add_channel_bias_(out, *pointwise_bias)) out.add_(pointwise_bias->view({1, c_out, 1}));
    return out.view({n, c_out, h, w});
  }
  at::Tensor out = at::mm(mid.permute({0, 2, 3, 1}).reshape({rows, c}), weight.t());  // (N HW, C_out): NHWC
  if (has_bias) out.add_(pointwise_bias->view({1, c_out}));
  return out.view({n, h, w, c_out}).permute({0, 3, 1, 2});  // channels-last
}

constexpr const char* kPointwiseOp = "convops::depthwise_separable_conv2d.pointwise";

// The 1x1 of the mixed path. Neither implementation wins everywhere, so "auto" decides it per intermediate, as a
// problem of its own (kPointwiseOp in convops.path_choices(): "convops" is the GEMM, "aten" ATen's convolution).
// cuBLAS runs the seed's GEMM well where cuDNN's 1x1 does not (H200, 16x64x512x512 -> 128, 2026-11-26: bf16 0.446 ms
// against 1.845, floor 0.380; strict fp32 1.98 against 2.45), with outputs equal to cuDNN's to the bit in every probed
// shape; but for many images of small planes it runs the NCHW batched GEMM with slow kernels (EfficientNet-B0
// 1152 -> 192 at 7x7, batch 32, bf16: 40 us against 15 for cuDNN's 1x1; ConvNeXt-T 768 -> 3072: 160 us, H200,
// 2026-11-27 07:00 UTC, tools/probe/separable_paths.py). Under a fixed policy the GEMM runs where it applies.
// Under TF32 for few pixels and a large weight (the batch-1 late layers of ConvNeXt-T) "convops" is the few-pixel
// kernel (depthwise_separable_conv2d_pointwise.cuh): the NCHW GEMM there runs cuBLAS's kernels for many pixels, and
// in NHWC there is no GEMM that rounds as cuDNN does.
at::Tensor pointwise_stage(const at::Tensor& mid, const at::Tensor& input, const at::Tensor& pointwise_weight,
                           const std::optional<at::Tensor>& pointwise_bias) {
  if (pointwise_few_pixels_applies(mid, pointwise_weight)) {
    return run_chosen_path(
        problem_key(kPointwiseOp, mid, pointwise_weight, pointwise_bias),
        [&] {
          return pointwise_few_pixels(mid, pointwise_weight, pointwise_bias, input.suggest_memory_format());
        },
        [&] { return aten_pointwise(mid, input, pointwise_weight, pointwise_bias); });
  }
  const GemmLayout layout = pointwise_gemm_layout(mid, input, pointwise_weight);
  if (layout == GemmLayout::kNone) return aten_pointwise(mid, input, pointwise_weight, pointwise_bias);
  return run_chosen_path(
      problem_key(kPointwiseOp, mid, pointwise_weight, pointwise_bias),
      [&] { return pointwise_as_gemm(mid, layout, pointwise_weight, pointwise_bias); },
      [&] { return aten_pointwise(mid, input, pointwise_weight, pointwise_bias); });
}

// The layout the mixed path runs in (path_choice.cuh, layout_for; CONVOPS_SEPARABLE_MIXED=input|channels_last):
// the input's, or the round trip through channels-last, decided under "auto" as kMixedLayoutOp. Why the round trip:
// on small planes of many channels (7x7 and 14x14 layers at batch 32) the NCHW depthwise kernels reach a fifth of
// the floor and the NCHW 1x1 is a GEMM per 49-pixel image, while in NHWC the depthwise runs across channels and the
// 1x1 is one GEMM over every pixel: Inductor, which lays these graphs out so, ran them 8-27% faster than every NCHW
// path of the op (H200, 2026-11-28 07:08 UTC, bench/RESULTS.md). The round trip is offered where the NCHW->NHWC
// depthwise kernel takes the problem (planes up to about 28x28); not through ATen's NHWC depthwise, whose cuDNN
// kernels missed the op's fp16 / bf16 tolerance by up to 3x on the tests' problems (H200, 2026-11-28 08:12 UTC). In
// CUDA graph capture an undecided problem takes the round trip (the "convops" side: nothing can be timed).
constexpr const char* kMixedLayoutOp = "convops::depthwise_separable_conv2d.mixed_layout";

at::Tensor depthwise_separable_conv2d_cuda(const at::Tensor& input, const at::Tensor& depthwise_weight,
                                           const std::optional<at::Tensor>& depthwise_bias,
                                           const at::Tensor& pointwise_weight,
                                           const std::optional<at::Tensor>& pointwise_bias, at::IntArrayRef stride,
                                           at::IntArrayRef padding, at::IntArrayRef dilation) {
  const auto d = check_depthwise_separable_conv2d(kOp, input, depthwise_weight, depthwise_bias, pointwise_weight,
                                                  pointwise_bias, stride, padding, dilation);
  const c10::cuda::CUDAGuard guard(input.device());
  const int64_t out_channels = pointwise_weight.size(0);
  if (d.batch == 0) return empty_output(input, {0, out_channels, d.out_h, d.out_w});
  const int64_t int_max = std::numeric_limits<int>::max();
  CONVOPS_CHECK(kOp, d.in_h * d.in_w < int_max && d.out_h * d.out_w < int_max && out_channels < int_max,
                "one channel plane must have fewer than 2^31 elements, got input ", input.sizes());
  check_coordinates_fit_int(kOp, d);

  const Operands o{input, depthwise_weight.contiguous(), pointwise_weight.contiguous(),
                   contiguous_or_none(depthwise_bias), contiguous_or_none(pointwise_bias)};
  // The mixed path in the input's layout: the convops depthwise kernel into an intermediate in the input's dtype
  // (exactly as the ATen pair stores it), then the 1x1.
  const auto mixed_in_input_layout = [&] {
    auto mid = empty_output(input, {d.batch, d.out_channels, d.out_h, d.out_w});
    depthwise_conv2d_into(input, depthwise_weight, depthwise_bias, mid, d, kOp);
    return pointwise_stage(mid, input, pointwise_weight, pointwise_bias);
  };
  // Through channels-last, as Inductor runs the pair, in three passes where its graph takes four: the convops
  // depthwise kernel from the NCHW input straight into an NHWC intermediate (depthwise_conv2d_to_nhwc.cuh), the 1x1
  // stage on it without the bias (one GEMM over every pixel; its own GEMM-or-cuDNN decision), and the copy back to
  // NCHW adding the bias as ATen adds it after cuDNN's 1x1 (layout_transpose.cuh).
  const auto mixed_through_channels_last = [&] {
    const at::Tensor mid = depthwise_to_nhwc(input, o.dw_weight, o.dw_bias, d, c10::cuda::getCurrentCUDAStream());
    return channels_first_copy(pointwise_stage(mid, mid, o.pw_weight, std::nullopt), o.pw_bias);
  };
  const auto mixed = [&] {
    if (!depthwise_to_nhwc_applies(input, d)) return mixed_in_input_layout();
    return run_in_chosen_layout(problem_key(kMixedLayoutOp, input, depthwise_weight, depthwise_bias, pointwise_weight,
                                            pointwise_bias, stride, padding, dilation),
                                "CONVOPS_SEPARABLE_MIXED", mixed_through_channels_last, mixed_in_input_layout);
  };
  // The convops path: the fused kernel where it applies, the mixed path elsewhere (channels-last inputs, strides,
  // dilations, other paddings and filters, channel counts whose weights do not fit next to its pipeline, fp64).
  const bool fused = fused_kernel(o, at::Tensor(), d, /*dry_run=*/true);
  const auto convops_path = [&] {
    if (fused) {
      auto output = empty_output(input, {d.batch, out_channels, d.out_h, d.out_w});
      if (fused_kernel(o, output, d, /*dry_run=*/false)) return output;
    }
    return mixed();
  };
  const auto aten_path = [&] {
    const auto mid = at::convolution(input, depthwise_weight, depthwise_bias, stride, padding, dilation, false,
                                     {0, 0}, d.in_channels);
    return aten_pointwise(mid, input, pointwise_weight, pointwise_bias);
  };
  // Where the fused kernel applies, "auto" times the mixed path against it too (cuda/path_choice.cuh).
  const PathFn mixed_fn = mixed;
  return run_chosen_path(problem_key(kOp, input, depthwise_weight, depthwise_bias, pointwise_weight, pointwise_bias,
                                     stride, padding, dilation),
                         convops_path, aten_path, fused ? &mixed_fn : nullptr);
}

}  // namespace
}  // namespace depthwise
}  // namespace cuda

TORCH_LIBRARY_IMPL(convops, CUDA, m) {
  m.impl("depthwise_separable_conv2d", &cuda::depthwise::depthwise_separable_conv2d_cuda);
}

}  // namespace convops
