// PyTorch's precision flags, read the way cuDNN's convolutions read them.
#pragma once

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>

namespace convops {

// fp32 convolutions may run on TF32 tensor cores exactly when torch.backends.cudnn.allow_tf32 (in torch >= 2.9
// also spelled torch.backends.cudnn.conv.fp32_precision = "tf32") allows it; other dtypes never do.
inline bool conv_allows_tf32(const at::Tensor& input) {
  return input.is_cuda() && input.scalar_type() == at::kFloat &&
         at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
}

// Whether cuBLAS, as ATen's matmul calls it for this dtype under the current flags, computes a 1x1 convolution the
// way cuDNN's convolution does (fp32 accumulation, no TF32 or bf16 operands for fp32): bf16 always; fp16 unless
// matmuls may accumulate in fp16 (torch.backends.cuda.matmul.allow_fp16_accumulation); fp32 when neither
// convolutions nor matmuls may use TF32 (or bf16, float32 matmul precision "medium"). Read through
// float32Precision: allowTF32CuBLAS and float32MatmulPrecision throw when the old flags and the fp32_precision ones
// disagree (torch >= 2.9). ATen's matmul may also reduce split-K partial sums in 16 bits where
// torch.backends.cuda.matmul.allow_{fp16,bf16}_reduced_precision_reduction allow it (their default), as Inductor's
// lowering of 1x1 convolutions to matmuls does.
inline bool cublas_gemm_matches_convolution(at::ScalarType dtype) {
  auto& context = at::globalContext();
  if (dtype == at::kBFloat16) return true;
  if (dtype == at::kHalf) return !context.allowFP16AccumulationCuBLAS();
  if (dtype != at::kFloat || context.allowTF32CuDNN(at::Float32Op::CONV)) return false;
  const at::Float32Precision matmul = context.float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL);
  return matmul != at::Float32Precision::TF32 && matmul != at::Float32Precision::BF16;
}

}  // namespace convops
