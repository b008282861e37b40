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

}  // namespace convops
