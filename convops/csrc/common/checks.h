// Argument validation and shape arithmetic shared by every convops op, on every device.
//
// Every user-facing error starts with the op's qualified name ("convops::depthwise_conv2d: ...") so a user
// who sees it inside a compiled model knows which substitution it came from.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/irange.h>
#include <c10/util/safe_numerics.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

namespace convops {

#define CONVOPS_CHECK(op, cond, ...) TORCH_CHECK((cond), op, ": ", __VA_ARGS__)

// A strided, dense, floating tensor that kernels can read through data_ptr and strides.
inline void check_float_tensor(const char* op, const char* name, const at::Tensor& t) {
  CONVOPS_CHECK(op, t.defined(), name, " is undefined");
  CONVOPS_CHECK(op, t.layout() == at::kStrided, name, " must be a dense (strided) tensor, got layout ", t.layout());
  CONVOPS_CHECK(op, !t.is_complex() && at::isFloatingType(t.scalar_type()),
                name, " must be float64, float32, float16 or bfloat16, got ", t.scalar_type());
  CONVOPS_CHECK(op, t.scalar_type() == at::kDouble || t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf ||
                    t.scalar_type() == at::kBFloat16,
                name, " must be float64, float32, float16 or bfloat16, got ", t.scalar_type());
}

inline void check_rank(const char* op, const char* name, const at::Tensor& t, int64_t rank, const char* layout) {
  CONVOPS_CHECK(op, t.dim() == rank, "expected ", name, " to be ", rank, "-D ", layout, ", got a ", t.dim(),
                "-D tensor of shape ", t.sizes());
}

// `other` must live on input's device and have input's dtype (ATen's convolutions require the same).
inline void check_like_input(const char* op, const char* name, const at::Tensor& other, const at::Tensor& input) {
  check_float_tensor(op, name, other);
  CONVOPS_CHECK(op, other.device() == input.device(), name, " is on ", other.device(), " but input is on ",
                input.device());
  CONVOPS_CHECK(op, other.scalar_type() == input.scalar_type(), name, " has dtype ", other.scalar_type(),
                " but input has dtype ", input.scalar_type());
}

inline void check_optional_like_input(const char* op, const char* name, const std::optional<at::Tensor>& other,
                                      const at::Tensor& input, int64_t expected_numel) {
  if (!other.has_value() || !other->defined()) return;
  check_like_input(op, name, *other, input);
  CONVOPS_CHECK(op, other->dim() == 1 && other->size(0) == expected_numel, "expected ", name, " of shape (",
                expected_numel, "), got ", other->sizes());
}

// One value per spatial dimension, each >= min_value.
inline void check_param(const char* op, const char* name, at::IntArrayRef values, int64_t spatial_dims,
                        int64_t min_value) {
  CONVOPS_CHECK(op, static_cast<int64_t>(values.size()) == spatial_dims, name, " must have ", spatial_dims,
                " values, got ", values);
  for (const auto v : values) {
    CONVOPS_CHECK(op, v >= min_value, name, " must be ", min_value == 0 ? "non-negative" : "positive", ", got ",
                  values);
  }
}

// Output extent of a convolution along one dimension.
inline int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

// Output extent of a transposed convolution along one dimension, (in - 1) stride - 2 padding + dilation (kernel - 1)
// + output_padding + 1, or nullopt where a step leaves int64 (validated arguments: in, kernel, stride and dilation
// >= 1, paddings >= 0). An absurd stride would otherwise wrap around: to a non-positive size, or to a small positive
// one that passes every check and fails later in the kernel without the op's name. The fake
// (ops/_shapes.py, conv_transpose_output_size) checks the same steps on Python ints.
inline std::optional<int64_t> conv_transpose_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                                                         int64_t output_padding, int64_t dilation) {
  int64_t strided = 0, padded = 0, span = 0, size = 0;
  if (c10::mul_overflows(in - 1, stride, &strided) || c10::mul_overflows(padding, int64_t{2}, &padded) ||
      c10::mul_overflows(dilation, kernel - 1, &span) || c10::add_overflows(strided - padded, span, &size) ||
      c10::add_overflows(size, output_padding, &size) || c10::add_overflows(size, int64_t{1}, &size)) {
    return std::nullopt;
  }
  return size;
}

// As in ATen: a non-empty batch has non-empty images (dimensions 2 on); an empty batch may have empty images, which
// padding makes valid ones, as F.conv2d / F.conv_transpose accept.
inline void check_images_nonempty(const char* op, const at::Tensor& input) {
  if (input.size(0) == 0) return;
  for (const auto d : c10::irange(int64_t{2}, input.dim())) {
    CONVOPS_CHECK(op, input.size(d) > 0, "only an empty batch may be empty, got input of shape ", input.sizes());
  }
}

// Whether in + 2 padding and dilation (kernel - 1) + 1, the extents conv_output_sizes compares, fit in int64 (an
// absurd dilation would otherwise wrap around and pass the comparison, where the Python fake's ints do not).
inline bool extents_fit_int64(int64_t in, int64_t kernel, int64_t padding, int64_t dilation) {
  int64_t padded = 0, span = 0;
  return !c10::mul_overflows(padding, int64_t{2}, &padded) && !c10::add_overflows(in, padded, &padded) &&
         !c10::mul_overflows(dilation, kernel - 1, &span) && !c10::add_overflows(span, int64_t{1}, &span);
}

// The floor division (in + 2p - d(k-1) - 1) / s must not go below zero: C++ rounds toward zero, so a window
// larger than the padded input would otherwise report one output element.
inline std::vector<int64_t> conv_output_sizes(const char* op, at::IntArrayRef in, at::IntArrayRef kernel,
                                              at::IntArrayRef stride, at::IntArrayRef padding,
                                              at::IntArrayRef dilation) {
  std::vector<int64_t> out(in.size());
  for (const auto i : c10::irange(in.size())) {
    CONVOPS_CHECK(op, extents_fit_int64(in[i], kernel[i], padding[i], dilation[i]),
                  "the padding ", padding, " and dilation ", dilation, " with kernel ", kernel,
                  " take the convolution's extents past 64 bits");
    const int64_t span = dilation[i] * (kernel[i] - 1) + 1;
    CONVOPS_CHECK(op, in[i] + 2 * padding[i] >= span, "the padded input (", in, " + 2 * ", padding,
                  ") is smaller than the dilated kernel (", kernel, ", dilation ", dilation, ")");
    out[i] = conv_output_size(in[i], kernel[i], stride[i], padding[i], dilation[i]);
  }
  return out;
}

// Outputs come back dense in the input's memory format: channels_last(_3d) inputs give channels_last(_3d)
// outputs, anything else gives a contiguous output. The fake implementations in convops/ops/ say the same.
inline at::Tensor empty_output(const at::Tensor& input, at::IntArrayRef sizes) {
  return at::empty(sizes, input.options().memory_format(input.suggest_memory_format()));
}

// An optional operand (a bias) made contiguous for a kernel's flat indexing, or none where none was passed.
inline std::optional<at::Tensor> contiguous_or_none(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? std::optional<at::Tensor>(t->contiguous()) : std::nullopt;
}

// The data of an optional operand (a bias) for a kernel's parameters, or nullptr where none was passed.
template <typename scalar_t>
const scalar_t* optional_data(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->const_data_ptr<scalar_t>() : nullptr;
}

// A sparse operand sends a call to a Sparse* dispatch key, where no convops kernel lives, and PyTorch would answer
// with its generic "Could not run ... with arguments from the 'SparseCPU' backend" (a NotImplementedError). This one
// boxed kernel serves every op on those keys and names the offending operand, as check_float_tensor does.
inline void reject_non_strided(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  for (const auto i : c10::irange(arguments.size())) {
    const c10::IValue& value = (*stack)[first + i];
    if (value.isTensor() && value.toTensor().defined()) {
      const auto layout = value.toTensor().layout();
      TORCH_CHECK(layout == at::kStrided, op.schema().name(), ": ", arguments[i].name(),
                  " must be a dense (strided) tensor, got layout ", layout);
    }
  }
  TORCH_CHECK(false, op.schema().name(), ": every tensor must be a dense (strided) tensor");
}

// Registers reject_non_strided for op `name` on every sparse dispatch key (call inside the op's
// TORCH_LIBRARY_FRAGMENT, after m.def).
inline void register_non_strided_rejection(torch::Library& m, const char* name) {
  using c10::DispatchKey;
  for (const auto key : {DispatchKey::SparseCPU, DispatchKey::SparseCUDA, DispatchKey::SparseMeta,
                         DispatchKey::SparseCsrCPU, DispatchKey::SparseCsrCUDA, DispatchKey::SparseCsrMeta}) {
    m.impl(name, torch::dispatch(key, torch::CppFunction::makeFromBoxedFunction<&reject_non_strided>()));
  }
}

// Autocast leaves convops ops alone (they compute in their inputs' dtype; cast the inputs to change it), but with no
// kernel of its own on the Autocast keys an op falls through with the region still active, and autocast then
// reaches the ATen calls inside its kernels: at::matmul returns fp16/bf16 products, a cuDNN fallback another dtype
// than the op's fake implementation promises. This boxed kernel serves every op on those keys: it runs the op with
// autocast excluded for the whole call, as torchvision's autocast kernels run theirs.
inline void run_without_autocast(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  op.callBoxed(stack);
}

// Registers run_without_autocast for op `name` on the CPU and CUDA autocast keys (call inside the op's
// TORCH_LIBRARY_FRAGMENT, after m.def).
inline void register_autocast_passthrough(torch::Library& m, const char* name) {
  for (const auto key : {c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA}) {
    m.impl(name, torch::dispatch(key, torch::CppFunction::makeFromBoxedFunction<&run_without_autocast>()));
  }
}

}  // namespace convops
