// The CUDA side of the path choice (path_choice.h): run the op's own kernel or the ATen composition it replaces (or,
// where an op offers one, its mixed path), under the policy; under "auto", time each once per problem and keep the
// fastest.
//
//   return run_chosen_path(problem_key(kOp, input, weight, bias, stride, padding, dilation),
//                          [&] { return kernel(...); }, [&] { return aten(...); });
#pragma once

#include <ATen/ATen.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>

#include "common/precision.h"
#include "path_choice.h"

namespace convops {
namespace cuda {

using PathFn = c10::function_ref<at::Tensor()>;

// An environment switch that restricts which kernels a path may run (read each call, for tests and timing): part of
// a problem's key while it is set, so that a decision timed without it is not reused with it, or the other way round;
// nothing in the key while it is unset.
struct EnvSwitch {
  const char* name;
  const char* value;  // getenv's, or null
};

inline EnvSwitch env_switch(const char* name) {
  return {name, std::getenv(name)};
}

// Everything that can change which path is faster: the op, each tensor's dtype, sizes, strides and 16-byte
// alignment, every scalar argument, and whether TF32 is allowed. Two writers see a problem the same way: KeyWriter
// packs it into the bytes that every call looks up (built into a reused buffer: no stream, no allocation), and
// TextWriter spells it out for the record ("convops::depthwise_conv2d cuda:0 tf32 Float[1, 32, 112, 112][...] ...")
// once, when a decision is made. Two problems have the same key exactly when they have the same text.
class KeyWriter {
 public:
  explicit KeyWriter(std::string* bytes) : bytes_(*bytes) { bytes_.clear(); }
  void header(const char* op, const at::Tensor& input);
  void add(const at::Tensor& t);
  void add(at::IntArrayRef values);
  void add(int64_t value);
  void add(double value);
  void add(const EnvSwitch& set);  // a set switch
  void add_none();

 private:
  template <typename T>
  void put(const T& value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  std::string& bytes_;
};

class TextWriter {
 public:
  void header(const char* op, const at::Tensor& input);
  void add(const at::Tensor& t);
  void add(at::IntArrayRef values);
  void add(int64_t value);
  void add(double value);
  void add(const EnvSwitch& set);
  void add_none();
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

template <typename Writer, typename T>
void write_arg(Writer& w, const T& value) {
  if constexpr (std::is_integral_v<T>) {
    w.add(static_cast<int64_t>(value));
  } else {
    w.add(value);
  }
}

template <typename Writer>
void write_arg(Writer& w, const EnvSwitch& value) {
  if (value.value != nullptr) w.add(value);
}

template <typename Writer, typename T>
void write_arg(Writer& w, const std::optional<T>& value) {
  if (value.has_value()) {
    write_arg(w, *value);
  } else {
    w.add_none();
  }
}

// A problem: the op's name and arguments, held by reference (it lives only as long as the run_chosen_path call it
// is passed to), written out only where the policy asks for it.
template <typename... Args>
class Problem {
 public:
  Problem(const char* op, const at::Tensor& input, const Args&... args) : op_(op), input_(input), args_(args...) {}

  const at::Tensor& input() const { return input_; }

  template <typename Writer>
  void write(Writer& w) const {
    w.header(op_, input_);
    w.add(input_);
    std::apply([&w](const auto&... arg) { (write_arg(w, arg), ...); }, args_);
  }

 private:
  const char* op_;
  const at::Tensor& input_;
  std::tuple<const Args&...> args_;
};

template <typename... Args>
Problem<Args...> problem_key(const char* op, const at::Tensor& input, const Args&... args) {
  return Problem<Args...>(op, input, args...);
}

// The calling thread's key buffer, reused call after call.
std::string& key_buffer();

// "auto" for a problem whose key is in `key`: the recorded path, or, the first time the key is seen, one warm-up run of
// each path and then five timed runs of each, back to back (fifteen where every path is launch-bound; CUDA events on
// the current stream), the path with the lowest median recorded and the output of its last timed run returned. A
// convops path must be at least 3% faster than ATen's to be taken: a near tie goes to the ATen composition, eager's own
// kernels, and timing noise does not flip it between runs. While the stream is being captured into a CUDA graph nothing
// can be timed: an unrecorded key then runs the convops kernel.
// mixed_path (may be null): a third candidate, convops' kernel for part of the op and ATen for the rest; it must be
// 3% faster than the convops path (a fused kernel, fewer launches) to be taken in its place, and 3% faster than ATen's
// (path_choice.cu, choose_path).
at::Tensor run_auto_path(const std::string& key, c10::function_ref<std::string()> describe, PathFn convops_path,
                         PathFn aten_path, const PathFn* mixed_path = nullptr);

// The layout a path runs in. Many convolutions run faster in NHWC than in NCHW (cuDNN's kernels; Inductor lays
// convolution graphs out channels-last in inference for that reason), so a path may run on a channels-last copy of an
// NCHW input, or write an NHWC intermediate from it, and copy its output back (layout_transpose.cuh): a round trip,
// which "auto" times against the input's layout as a problem of its own (the op's name with a suffix; "convops" the
// round trip, taken where it leads by the same 3% as a convops kernel, since its two copies and extra launches cost
// more where the host is the limit than the timing shows; "aten" the input's layout). The round trip applies to an
// input whose channels-last copy would be other bytes (dense NCHW / NCDHW or a strided view, more than one channel and
// position), not fp64 (no fast NHWC kernels to gain); kInput elsewhere and under a fixed policy. `switch_name` names an
// environment variable, read each call: "input" or "channels_last" forces one wherever the round trip applies, for
// tests and timing.
enum class Layout { kDecide, kInput, kChannelsLast };
Layout layout_for(const at::Tensor& input, const char* switch_name);

// Runs one path under the policy and returns its output. The "convops" policy runs convops_path, "aten" aten_path;
// mixed_path runs only where "auto" finds it the fastest.
template <typename... Args>
at::Tensor run_chosen_path(const Problem<Args...>& problem, PathFn convops_path, PathFn aten_path,
                           const PathFn* mixed_path = nullptr) {
  switch (path_policy()) {
    case PathPolicy::kConvops: return convops_path();
    case PathPolicy::kAten: return aten_path();
    case PathPolicy::kAuto: break;
  }
  std::string& key = key_buffer();
  KeyWriter writer(&key);
  problem.write(writer);
  const auto describe = [&problem] {
    TextWriter text;
    problem.write(text);
    return text.str();
  };
  return run_auto_path(key, describe, convops_path, aten_path, mixed_path);
}

// Runs a path in the layout layout_for gives the problem's input: the input's (input_layout_path), the round trip
// through channels-last (channels_last_path), or under "auto" the faster of the two, decided as `problem` (the op's
// name with its stage suffix; the round trip is the "convops" side).
template <typename... Args>
at::Tensor run_in_chosen_layout(const Problem<Args...>& problem, const char* switch_name, PathFn channels_last_path,
                                PathFn input_layout_path) {
  switch (layout_for(problem.input(), switch_name)) {
    case Layout::kInput: return input_layout_path();
    case Layout::kChannelsLast: return channels_last_path();
    case Layout::kDecide: break;
  }
  return run_chosen_path(problem, channels_last_path, input_layout_path);
}

}  // namespace cuda
}  // namespace convops
