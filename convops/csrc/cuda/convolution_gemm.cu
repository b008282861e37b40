// batched_convolution_gemm (convolution_gemm.cuh says what it computes and why), compiled once here: its
// rounding kernel is not a template, so a definition in the header would be defined in every .cu including it.

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/precision.h"
#include "cuda/convolution_gemm.cuh"
#include "cuda/device_info.h"
#include "cuda/device_utils.cuh"

namespace convops {
namespace cuda {
namespace convolution_gemm {
namespace {

constexpr int kThreads = 256;

// out[i] = x[i] rounded to TF32 (an fp32 bit pattern with the low 13 mantissa bits zero); float4 where both bases
// are 16-byte aligned.
__global__ void __launch_bounds__(kThreads) round_to_tf32_kernel(const float* __restrict__ x, float* __restrict__ out,
                                                                 int64_t n, bool vectorize) {
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  const int64_t vectors = vectorize ? n / 4 : 0;
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < vectors; i += stride) {
    float4 v = reinterpret_cast<const float4*>(x)[i];
    v = make_float4(round_tf32(v.x), round_tf32(v.y), round_tf32(v.z), round_tf32(v.w));
    reinterpret_cast<float4*>(out)[i] = v;
  }
  for (int64_t i = vectors * 4 + int64_t{blockIdx.x} * kThreads + threadIdx.x; i < n; i += stride) {
    out[i] = round_tf32(x[i]);
  }
}

// A contiguous copy of `x` (contiguous fp32) rounded to TF32.
at::Tensor rounded_to_tf32(const at::Tensor& x) {
  TORCH_INTERNAL_ASSERT(x.is_contiguous() && x.scalar_type() == at::kFloat);
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(n / 4, kThreads) + 1, int64_t{multiprocessor_count()} * 16);
  const bool vectorize = reinterpret_cast<uintptr_t>(x.const_data_ptr()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(out.const_data_ptr()) % 16 == 0;
  round_to_tf32_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.const_data_ptr<float>(), out.mutable_data_ptr<float>(), n, vectorize);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// out (M x K, contiguous) = a rounded to TF32, where a is the transpose of the contiguous (K x M) matrix `a_t`:
// 32 x 32 tiles through shared memory, so that the reads (along M) and the writes (along K) are both coalesced.
// ATen's copy of the transposed weight took 17.6 us for the 8 MB of UNet c1024-512 (H200, 2026-11-27 13:28 UTC).
constexpr int kTransposeTile = 32, kTransposeRows = 8;

__global__ void __launch_bounds__(kTransposeTile* kTransposeRows)
    round_to_tf32_transposed_kernel(const float* __restrict__ a_t, float* __restrict__ out, int64_t k, int64_t m) {
  __shared__ float tile[kTransposeTile][kTransposeTile + 1];
  const int64_t m0 = int64_t{blockIdx.x} * kTransposeTile, k0 = int64_t{blockIdx.y} * kTransposeTile;
  for (int r = threadIdx.y; r < kTransposeTile; r += kTransposeRows) {
    if (k0 + r < k && m0 + threadIdx.x < m) tile[r][threadIdx.x] = round_tf32(a_t[(k0 + r) * m + m0 + threadIdx.x]);
  }
  __syncthreads();
  for (int r = threadIdx.y; r < kTransposeTile; r += kTransposeRows) {
    if (m0 + r < m && k0 + threadIdx.x < k) out[(m0 + r) * k + k0 + threadIdx.x] = tile[threadIdx.x][r];
  }
}

// A contiguous (M x K) copy of `a` rounded to TF32, `a` (M x K, fp32) contiguous or the transpose of a contiguous
// matrix.
at::Tensor rounded_to_tf32_row_major(const at::Tensor& a) {
  if (a.is_contiguous()) return rounded_to_tf32(a);
  TORCH_INTERNAL_ASSERT(a.dim() == 2 && a.t().is_contiguous() && a.scalar_type() == at::kFloat);
  const int64_t m = a.size(0), k = a.size(1);
  const int64_t k_tiles = ceil_div<int64_t>(k, kTransposeTile), m_tiles = ceil_div<int64_t>(m, kTransposeTile);
  if (k_tiles > 65535) return rounded_to_tf32(a.contiguous());  // past the grid's y extent
  at::Tensor out = at::empty({m, k}, a.options());
  if (out.numel() == 0) return out;
  round_to_tf32_transposed_kernel<<<dim3(static_cast<unsigned>(m_tiles), static_cast<unsigned>(k_tiles)),
                                    dim3(kTransposeTile, kTransposeRows), 0, c10::cuda::getCurrentCUDAStream()>>>(
      a.const_data_ptr<float>(), out.mutable_data_ptr<float>(), k, m);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// Restores the handle's math mode on scope exit: ATen sets it on every handle fetch, but other users of the
// handle on this thread need not.
class MathModeGuard {
 public:
  MathModeGuard(cublasHandle_t handle, cublasMath_t mode) : handle_(handle) {
    TORCH_CUDABLAS_CHECK(cublasGetMathMode(handle_, &previous_));
    TORCH_CUDABLAS_CHECK(cublasSetMathMode(handle_, mode));
  }
  ~MathModeGuard() { cublasSetMathMode(handle_, previous_); }
  MathModeGuard(const MathModeGuard&) = delete;
  MathModeGuard& operator=(const MathModeGuard&) = delete;

 private:
  cublasHandle_t handle_;
  cublasMath_t previous_;
};

}  // namespace
}  // namespace convolution_gemm

at::Tensor batched_convolution_gemm(const at::Tensor& a, const at::Tensor& b, bool tf32, ProductLayout layout) {
  TORCH_INTERNAL_ASSERT(a.dim() == 2 && b.dim() == 3 && (a.is_contiguous() || a.t().is_contiguous()) &&
                        b.is_contiguous() && a.scalar_type() == b.scalar_type() &&
                        (!tf32 || a.scalar_type() == at::kFloat));
  const int64_t batch = b.size(0), m = a.size(0), k = a.size(1), p = b.size(2);
  TORCH_INTERNAL_ASSERT(convolution_gemm_applies(batch, m, k, p) && b.size(1) == k);
  const bool pixel_major = layout == ProductLayout::kPixelMajor;
  TORCH_INTERNAL_ASSERT(!pixel_major || tf32, "convops: convolution GEMM: pixel-major products are TF32's");
  if (!tf32 && (a.scalar_type() == at::kDouble || cublas_gemm_matches_convolution(a.scalar_type()))) {
    return at::matmul(a, b);  // a transposed `a` reaches cuBLAS as a transpose flag
  }
  at::Tensor c = pixel_major ? at::empty({batch, p, m}, b.options()) : at::empty({batch, m, p}, b.options());
  if (c.numel() == 0) return c;
  if (k == 0) return c.zero_();
  // TF32 copies `a` to round it, and makes the copy row-major (M x K): with the transposed operand as a flag,
  // cuBLAS's TF32 kernels ran the UNet layers 12-20% slower (H200, 2026-11-27 13:20 UTC).
  const at::Tensor a_op = tf32 ? convolution_gemm::rounded_to_tf32_row_major(a) : a;
  const bool a_op_transposed = !a_op.is_contiguous();
  const at::Tensor b_op = tf32 ? convolution_gemm::rounded_to_tf32(b) : b;

  // fp32 compute (float alpha and beta) for every dtype that gets here: fp64 always takes ATen's matmul.
  cudaDataType_t data_type;
  cublasComputeType_t compute_type = CUBLAS_COMPUTE_32F;
  const float alpha = 1.0f, beta = 0.0f;
  switch (a.scalar_type()) {
    case at::kFloat:
      data_type = CUDA_R_32F;
      if (tf32) compute_type = CUBLAS_COMPUTE_32F_FAST_TF32;
      break;
    case at::kHalf: data_type = CUDA_R_16F; break;
    case at::kBFloat16: data_type = CUDA_R_16BF; break;
    default: TORCH_CHECK(false, "convops: convolution GEMM: unsupported dtype ", a.scalar_type());
  }
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();  // on the current stream, with ATen's workspace
  // Default math: no TF32 for CUBLAS_COMPUTE_32F on fp32 data (the compute type asks for it where allowed), and
  // no 16-bit reduction of partial sums.
  const convolution_gemm::MathModeGuard math(
      handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  // cuBLAS is column-major: a row-major (R x C) matrix is its column-major (C x R) transpose. So b[i] is b[i]^T
  // (P x K, leading dimension P), and a is a^T (K x M, leading dimension K), or where transposed a itself
  // (M x K, leading dimension M). a is shared by the batch: stride 0.
  const int mi = static_cast<int>(m), ki = static_cast<int>(k), pi = static_cast<int>(p);
  if (pixel_major) {
    // c[i] (M x P, leading dimension M) = a (M x K) b[i] (K x P); a_op is TF32's row-major copy.
    TORCH_INTERNAL_ASSERT(!a_op_transposed);
    TORCH_CUDABLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, CUBLAS_OP_T, CUBLAS_OP_T, mi, pi, ki, &alpha, a_op.const_data_ptr(), data_type, ki, 0LL,
        b_op.const_data_ptr(), data_type, pi, static_cast<long long>(k * p), &beta, c.mutable_data_ptr(), data_type,
        mi, static_cast<long long>(m * p), static_cast<int>(batch), compute_type, CUBLAS_GEMM_DEFAULT));
  } else {
    // c[i]^T (P x M, leading dimension P) = b[i]^T (P x K) a^T (K x M).
    TORCH_CUDABLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, CUBLAS_OP_N, a_op_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, pi, mi, ki, &alpha, b_op.const_data_ptr(),
        data_type, pi, static_cast<long long>(k * p), a_op.const_data_ptr(), data_type, a_op_transposed ? mi : ki,
        0LL, &beta, c.mutable_data_ptr(), data_type, pi, static_cast<long long>(m * p), static_cast<int>(batch),
        compute_type, CUBLAS_GEMM_DEFAULT));
  }
  return c;
}

}  // namespace cuda
}  // namespace convops
