// The CUDA side of the path choice (path_choice.h): run the op's own kernel or the ATen composition it replaces,
// under the policy; under "auto", time both once per problem and keep the faster.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <sstream>
#include <string>

#include "common/precision.h"
#include "path_choice.h"

namespace convops {
namespace cuda {

using PathFn = std::function<at::Tensor()>;

// Runs one path and returns its output. "auto" times both paths the first time a key is seen (one warm-up and
// three timed runs each, CUDA events on the current stream) and records the faster; the ATen path must be at least
// 3% faster to be taken, so that timing noise does not flip a near tie between runs. While the stream is being
// captured into a CUDA graph nothing can be timed: an unrecorded key then runs the convops kernel.
at::Tensor run_chosen_path(const std::string& key, const PathFn& convops_path, const PathFn& aten_path);

// Everything that can change which path is faster: the op, each tensor's dtype, sizes, strides and 16-byte
// alignment, every scalar argument, and whether TF32 is allowed.
class ProblemKey {
 public:
  ProblemKey(const char* op, const at::Tensor& input) {
    out_ << op << " cuda:" << static_cast<int>(input.get_device()) << (conv_allows_tf32(input) ? " tf32" : "");
  }
  ProblemKey& add(const at::Tensor& t) {
    out_ << ' ' << t.scalar_type() << t.sizes() << t.strides()
         << (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? "" : "u");
    return *this;
  }
  ProblemKey& add(const std::optional<at::Tensor>& t) {
    return t.has_value() && t->defined() ? add(*t) : (out_ << " -", *this);
  }
  template <typename T>
  ProblemKey& add(const T& value) {
    out_ << ' ' << value;
    return *this;
  }
  template <typename T>
  ProblemKey& add(const std::optional<T>& value) {
    return value.has_value() ? add(*value) : (out_ << " -", *this);
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

template <typename... Args>
std::string problem_key(const char* op, const at::Tensor& input, const Args&... args) {
  ProblemKey key(op, input);
  key.add(input);
  (key.add(args), ...);
  return key.str();
}

}  // namespace cuda
}  // namespace convops
