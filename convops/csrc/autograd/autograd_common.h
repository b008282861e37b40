// What the autograd kernels of every convops op share (csrc/autograd/<op>_autograd.cpp).
//
// Each op's autograd is a torch::autograd::Function registered on the Autograd key, as torchvision does, rather than
// torch.library.register_autograd: that one puts a Python kernel in front of every call, gradients wanted or not,
// which cost about 10 us of host time per call, more than a launch-bound op takes on the GPU. The forward reaches
// the backend kernel through the dispatcher below autograd, so the CPU/CUDA kernels (and a tracer's fake kernel) see
// exactly the call they would without autograd. Shapes go through sym_sizes and the _symint ATen entry points, so
// the formulas also trace under dynamic shapes (AOTAutograd).
#pragma once

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <vector>

namespace convops::autograd {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

inline bool requires_grad(const at::Tensor& t) {
  return t.defined() && t.requires_grad();
}

inline bool requires_grad(const std::optional<at::Tensor>& t) {
  return t.has_value() && requires_grad(*t);
}

// Whether a call records a backward node: the test torch::autograd::Function::apply makes. When it fails (no_grad,
// or no input requiring grad) the autograd kernel calls the backend directly and builds no node at all.
template <typename... Tensors>
bool grad_wanted(const Tensors&... tensors) {
  return at::GradMode::is_enabled() && (requires_grad(tensors) || ...);
}

// Whether a Tensor? argument was passed: only then does it have an autograd edge.
inline bool given(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

// The op's schema, found once: the handle the forward calls below autograd.
template <typename Signature>
c10::TypedOperatorHandle<Signature> typed_op(const char* qualified_name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(qualified_name, "").typed<Signature>();
}

// The backend kernel of `op` (CPU, CUDA, or whatever mode traces the call), skipping Autograd and ADInplaceOrView.
template <typename Signature, typename... Args>
at::Tensor call_below_autograd(const c10::TypedOperatorHandle<Signature>& op, Args&&... args) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.call(std::forward<Args>(args)...);
}

// ctx->needs_input_grad by position among the op's tensor arguments. The context counts only the tensors a call
// passed (an absent Tensor? has no autograd edge), so `present` says which of the N were given. Only valid where a
// backward node exists: in backward, or in a forward that grad_wanted sent through Function::apply.
template <size_t N>
std::array<bool, N> needs_input_grad(const AutogradContext* ctx, const std::array<bool, N>& present) {
  std::array<bool, N> needs{};
  size_t edge = 0;
  for (size_t i = 0; i < N; ++i) {
    if (present[i]) needs[i] = ctx->needs_input_grad(edge++);
  }
  return needs;
}

// Sizes kept in ctx->saved_data: the saved tensors are dropped when their gradient partner is not wanted, but
// convolution_backward still needs both operands' shapes.
inline std::vector<c10::SymInt> saved_sizes(const AutogradContext* ctx, const char* key) {
  return ctx->saved_data.at(key).toSymIntVector();
}

// The stride, padding and dilation of an op's convolution, which its backward passes on to ATen.
struct ConvParams {
  std::vector<c10::SymInt> stride, padding, dilation;

  static void save(AutogradContext* ctx, at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["dilation"] = dilation;
  }

  static ConvParams saved(const AutogradContext* ctx) {
    return {saved_sizes(ctx, "stride"), saved_sizes(ctx, "padding"), saved_sizes(ctx, "dilation")};
  }
};

// A bias's sizes (or None), the bias_sizes argument of convolution_backward.
inline c10::IValue bias_sizes_of(const std::optional<at::Tensor>& bias) {
  return given(bias) ? c10::IValue(bias->sym_sizes()) : c10::IValue();
}

inline std::optional<std::vector<c10::SymInt>> saved_bias_sizes(const AutogradContext* ctx, const char* key) {
  const c10::IValue& sizes = ctx->saved_data.at(key);
  if (sizes.isNone()) return std::nullopt;
  return sizes.toSymIntVector();
}

inline at::OptionalSymIntArrayRef as_optional_ref(const std::optional<std::vector<c10::SymInt>>& sizes) {
  return sizes ? at::OptionalSymIntArrayRef(*sizes) : at::OptionalSymIntArrayRef(std::nullopt);
}

// An int[] argument as the SymInt[] the _symint ATen entry points take.
inline c10::SymIntArrayRef sym(at::IntArrayRef values) {
  return c10::fromIntArrayRefSlow(values);
}

// A saved tensor back as the Tensor? an ATen op takes (an undefined one is None).
inline std::optional<at::Tensor> optional_tensor(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// convolution_backward takes both operands even when one gradient is not wanted; it reads only the shape of the
// operand whose gradient partner is not requested, so a zero-stride stand-in of that shape (no allocation) takes the
// place of what was not saved.
inline at::Tensor placeholder(const at::Tensor& saved, const at::Tensor& like, c10::SymIntArrayRef shape) {
  return saved.defined() ? saved : like.new_zeros(at::IntArrayRef{}).expand_symint(shape);
}

}  // namespace convops::autograd
