// A batched GEMM that computes as cuDNN computes a convolution, whatever PyTorch's matmul flags say about TF32 and
// fp16 accumulation: fp32 accumulation (double for double), and TF32 exactly when the convolution flags allow it
// for fp32, with both operands rounded to nearest (ties to even) first, as cuDNN's Hopper kernels round theirs
// (../shared/notes/kernels-research.md §6; device_utils.cuh's tf32_bits). The exception: where ATen's matmul runs
// it (below), fp16/bf16 split-K partial sums may be added in 16 bits, as the reduced-precision-reduction flags
// allow by default.
//
// ATen's matmul runs it where it computes that way under the current flags (cublas_gemm_matches_convolution: bf16,
// fp16 without fp16 accumulation, fp32 with neither library allowed TF32, fp64): its cuBLAS calls were the faster
// on the UNet layers (H200, 2026-11-27 11:35 and 11:47 UTC, kernel == stride conv_transpose2d, batch 8: bf16 c1024
// -> 512 at 16x16 25.6 us through at::matmul against 40.7 through the direct call below, fp32 c1024 -> 512 184.9
// against 206.5; ATen may add fp16/bf16 split-K partial sums in 16 bits where
// torch.backends.cuda.matmul.allow_{fp16,bf16}_reduced_precision_reduction allow it, their default, as the README
// says). Elsewhere one direct cuBLAS call with an explicit compute type and math mode: ATen's own TF32 is
// cuBLAS's conversion, which does not round as cuDNN does (1e-3 off eager's TF32 convolution against its 1e-4),
// while cuBLAS's conversion leaves operands already rounded to TF32 as they are.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <limits>

namespace convops {
namespace cuda {

// Whether batched_convolution_gemm may run on these extents: cuBLAS's int dimensions and batch count, and not under
// torch.use_deterministic_algorithms, where PyTorch vouches for cuBLAS's run-to-run reproducibility only with
// CUBLAS_WORKSPACE_CONFIG set (ATen's own cuBLAS calls raise otherwise, while eager's convolution runs).
inline bool convolution_gemm_applies(int64_t batch, int64_t m, int64_t k, int64_t p) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  return !at::globalContext().deterministicAlgorithms() && batch < kIntMax && m < kIntMax && k < kIntMax &&
         p < kIntMax;
}

// How batched_convolution_gemm lays out each product matrix c[i] = a @ b[i] (M x P): channel-major, c (N, M, P), or
// pixel-major, c (N, P, M) holding each c[i] transposed. The two are one GEMM with the operands' roles swapped, and
// cuBLAS's heuristics pick kernels of different speeds for them (conv_transpose_gemm.cuh: the narrow UNet layer).
enum class ProductLayout { kChannelMajor, kPixelMajor };

// Returns c (N x M x P), c[i] = a (M x K) @ b[i] (K x P) for each i < N, all row-major (or, pixel-major, c (N x P x
// M) holding c[i]^T, TF32 only: the one mode where it was measured to pay); b contiguous, a contiguous or the
// transpose of a contiguous (K x M) matrix (passed to cuBLAS as a transpose flag, except under TF32, which rounds a
// row-major copy), of one dtype (fp32, fp64, fp16, bf16), on the current stream; tf32: the caller's
// conv_allows_tf32. Extents within convolution_gemm_applies.
at::Tensor batched_convolution_gemm(const at::Tensor& a, const at::Tensor& b, bool tf32,
                                    ProductLayout layout = ProductLayout::kChannelMajor);

}  // namespace cuda
}  // namespace convops
