#include "cuda/path_choice.cuh"

#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/device_info.h"

namespace convops {
namespace cuda {
namespace {

constexpr int kTimedRuns = 5;  // odd: the median is one run's time
// Where every path is launch-bound (its median under kLaunchBoundMs: batch-1 layers of 5-15 us), kMoreRuns more runs of
// each follow, and the median is over all 15: there a convops kernel's lead is a few tenths of a microsecond, near the
// 3% margin below and within the spread of five runs. The small-problem depthwise kernel, which do_bench times 4-9%
// ahead of cuDNN's on the 14x14 3x3 layers, lost its decision to ATen on some of them (H200 / H100, 2026-11-28 00:10 /
// 00:24 UTC, bench/RESULTS.md). Fifteen runs of such paths cost about 4 ms a path, once a problem.
constexpr int kMoreRuns = 10;  // even: two blocks of five, and the total stays odd
constexpr double kLaunchBoundMs = 0.05;
static_assert(kTimedRuns % 2 == 1 && kMoreRuns % 2 == 0 && kMoreRuns / 2 == kTimedRuns,
              "odd totals, and the launch-bound runs in two blocks of kTimedRuns");
// A convops path must be at least 3% faster than ATen's to be taken. In a near tie ATen's path runs the eager
// composition's own kernels, so it does eager's work and no more: the decision's five runs and the benchmarks' do_bench
// time batch-1 layers differently by a few percent (EfficientNet-B0's c480 14x14 separable layer, TF32: 13.92 against
// 13.70 us in the decision, which the ATen-favouring margin before gave to convops; do_bench then timed 15.4 against
// eager's 12.6 us, H200, 2026-11-27 07:23 UTC).
constexpr double kConvopsMargin = 0.97;
// A mixed path (two or three launches and an intermediate in memory) must be 3% faster than the op's fused kernel
// (one launch) to be taken. The decision times GPU work behind a spin, so it does not see the launches the fused
// kernel saves; where the host is the limit, as for batch-1 layers in eager mode, those are what counts, and a near
// tie taken by the mixed path lost: MobileNetV2's c32 112x112 batch-1 separable layer ran the mixed path at 30.8 us
// against the fused kernel's 11.8 (H200, 2026-11-27 07:23 UTC) and at 26.9-33.7 us a round against 10.24 (H200,
// 2026-11-28 05:56 UTC, bench/RESULTS.md), where the full run between them had decided the fused kernel (10.69 us).
constexpr double kMixedMargin = 0.97;
// A GPU spin before each timed run, in clock cycles: about 200 us at 2 GHz (longer at lower clocks), more than any
// path's host time between its start event and its last launch.
constexpr int64_t kHostLeadCycles = 400'000;

// KeyWriter's tags: each argument starts with one, so that arguments of different kinds never read alike.
constexpr char kTensorTag = 'T', kListTag = 'L', kIntTag = 'I', kDoubleTag = 'D', kNoneTag = '-',
               kSwitchTag = 'S';

// The decision from the paths' times (mixed_ms < 0: no mixed path). The convops side's best is the mixed path where
// it leads the fused kernel by kMixedMargin, else the fused kernel, and it is taken where it leads ATen by
// kConvopsMargin. Where the fused kernel does not lead ATen so, the mixed path still may: against ATen, which launches
// as often, the launches the fused kernel saves are not in question (fused 9.8, mixed 9.6, ATen 10 us: mixed).
Path choose_path(double convops_ms, double aten_ms, double mixed_ms) {
  const bool has_mixed = mixed_ms >= 0.0;
  const bool mixed_leads_fused = has_mixed && mixed_ms < kMixedMargin * convops_ms;
  const double side_ms = mixed_leads_fused ? mixed_ms : convops_ms;
  if (side_ms < kConvopsMargin * aten_ms) return mixed_leads_fused ? Path::kMixed : Path::kConvops;
  if (has_mixed && mixed_ms < kConvopsMargin * aten_ms) return Path::kMixed;
  return Path::kAten;
}

bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// A scratch buffer whose zeroing evicts whatever a path's inputs left in L2: 256 MB, as triton.testing.do_bench's (the
// benchmarks' timing), or twice the L2 where that is more, so that the decision and the benchmarks start their runs
// alike. Undefined where the device has no room for it: the op must not fail for want of memory it does not need, so
// the paths are then timed as they come (L2 warm); run_auto_path also times them without it when a path runs out of
// memory beside it.
at::Tensor l2_flush_buffer(const at::Device& device) {
  constexpr int64_t kDoBenchFlushBytes = int64_t{256} << 20;
  const int64_t bytes =
      std::max(kDoBenchFlushBytes, 2 * static_cast<int64_t>(device_attribute<cudaDevAttrL2CacheSize>()));
  try {
    return at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  } catch (const c10::OutOfMemoryError&) {
    return at::Tensor();
  }
}

// A CUDA event that is destroyed with its owner, also when a timed path throws.
struct Event {
  cudaEvent_t event = nullptr;
  Event() { C10_CUDA_CHECK(cudaEventCreate(&event)); }
  ~Event() { (void)cudaEventDestroy(event); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// One candidate under timing: the path, where its last timed run's output goes and where its time goes.
struct TimedPath {
  PathFn run;
  at::Tensor* output;
  double* ms;
};

// Appends `runs` timed runs of each path to its times (ms): each path's runs back to back, as do_bench times them,
// the paths one after another (last to first where `reverse`).
void time_blocks(c10::ArrayRef<TimedPath> paths, cudaStream_t stream, const at::Tensor& flush, int runs, bool reverse,
                 std::vector<std::vector<float>>& times) {
  struct Run {
    Event start, end;
  };
  std::vector<std::vector<Run>> events(paths.size());
  for (auto& path_events : events) path_events = std::vector<Run>(runs);
  for (size_t k = 0; k < paths.size(); ++k) {
    const size_t p = reverse ? paths.size() - 1 - k : k;
    for (int i = 0; i < runs; ++i) {
      at::cuda::sleep(kHostLeadCycles);  // on the current stream, which is `stream`
      if (flush.defined()) C10_CUDA_CHECK(cudaMemsetAsync(flush.data_ptr(), 0, flush.nbytes(), stream));
      C10_CUDA_CHECK(cudaEventRecord(events[p][i].start.event, stream));
      *paths[p].output = paths[p].run();
      C10_CUDA_CHECK(cudaEventRecord(events[p][i].end.event, stream));
    }
  }
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t p = 0; p < paths.size(); ++p) {
    for (int i = 0; i < runs; ++i) {
      float ms = 0.f;
      C10_CUDA_CHECK(cudaEventElapsedTime(&ms, events[p][i].start.event, events[p][i].end.event));
      times[p].push_back(ms);
    }
  }
}

// The middle one of an odd number of times.
float median(std::vector<float> times) {
  const auto middle = times.begin() + times.size() / 2;
  std::nth_element(times.begin(), middle, times.end());
  return *middle;
}

// The GPU milliseconds of one run of each path, the median of kTimedRuns timed runs (kTimedRuns + kMoreRuns where every
// path is launch-bound) after a warm-up run (cuDNN's algorithm search, first allocations): a single slow run (a clock
// ramp, a host hiccup between a start event and the path's launches) must not decide, as it could in a mean of three (a
// convops kernel at 0.0177 ms lost to ATen's 0.027 ms). Each path's runs go back to back, in blocks, as do_bench runs
// them: taking turns, one run each per round, the times of 5-us paths flipped by 0.3-0.6 us from one process to the
// next (MobileNetV2's c384 14x14 bf16 depthwise layer, convops / ATen: 5.41 / 5.44 us in one, 5.28 / 6.02 in the next;
// back to back 5.12 / 5.70 and 5.09 / 5.57; do_bench 5.14 / 5.57 and 5.41 / 5.92; H200, 2026-11-28 11:00 / 11:05 UTC,
// tools/probe/decision_order.py), which handed batch-1 layers that the convops kernel leads by 7-10% to ATen. Where
// more runs follow, their blocks go in reverse order and then forward again, so that a drift over the decision (clocks
// settling) falls on every path about alike; a slow stretch shorter than a block is what the median absorbs. Each run
// starts with a cold L2, as triton.testing.do_bench times: on batch-1 layers (5-20 us) which path wins depends on it
// (the convops kernels won with the inputs L2-resident and lost by 0.5-2 us from DRAM on 33 of the bench sweep's rows,
// 2026-11-26), and the cold condition is the one the benchmarks measure. Every run computes a full output; each path's
// last timed one is kept in its output.
// The events must time the GPU's work, not the host's launches: if the GPU waits for the host between a start event
// and a path's last kernel, the path's host time is what gets timed. That happened on batch-1 layers, whose paths
// take 5-15 us of GPU time and up to tens of us of host time (cuDNN's set-up, two ops where the mixed path has them)
// against about 25 us for the flush (then of twice the L2): "auto" took ATen for EfficientNet-B0's c240 28x28
// separable layer in bf16, whose convops kernel do_bench times 1.25x faster (H200, 2026-11-27 00:47 UTC). So the
// GPU spins before each run (kHostLeadCycles) while the host queues the run whole, as in a network's forward pass,
// where the host runs ahead of the GPU.
// The flush buffer (where flush_l2 asks for it and the device has room) is allocated after the warm-up runs: a path's
// own decisions (the separable op's mixed path decides its layout and its 1x1) are made there, each with a buffer of
// its own, so that at most one is held at a time, and cuDNN picks its algorithms and workspaces without it.
void time_paths(c10::ArrayRef<TimedPath> paths, cudaStream_t stream, bool flush_l2) {
  for (const TimedPath& path : paths) path.run();
  const at::Tensor flush =
      flush_l2 ? l2_flush_buffer(at::Device(at::kCUDA, c10::cuda::current_device())) : at::Tensor();
  std::vector<std::vector<float>> times(paths.size());
  time_blocks(paths, stream, flush, kTimedRuns, /*reverse=*/false, times);
  const bool launch_bound = std::all_of(times.begin(), times.end(),
                                        [](const std::vector<float>& t) { return median(t) < kLaunchBoundMs; });
  if (launch_bound) {
    time_blocks(paths, stream, flush, kMoreRuns / 2, /*reverse=*/true, times);
    time_blocks(paths, stream, flush, kMoreRuns / 2, /*reverse=*/false, times);
  }
  for (size_t p = 0; p < paths.size(); ++p) *paths[p].ms = median(times[p]);
}

}  // namespace

// The key: the op's name, device and TF32 flag, then per argument its tag and its raw fields (sizes and strides as
// int64 arrays). A double goes in as the text TextWriter prints for it (6 significant digits), so that keys and
// texts tell the same problems apart.
void KeyWriter::header(const char* op, const at::Tensor& input) {
  bytes_.append(op, std::strlen(op) + 1);
  put(static_cast<int64_t>(input.get_device()));
  put(conv_allows_tf32(input));
}

void KeyWriter::add(const at::Tensor& t) {
  if (!t.defined()) return add_none();
  put(kTensorTag);
  put(t.scalar_type());
  put(static_cast<int64_t>(t.dim()));
  bytes_.append(reinterpret_cast<const char*>(t.sizes().data()), t.dim() * sizeof(int64_t));
  bytes_.append(reinterpret_cast<const char*>(t.strides().data()), t.dim() * sizeof(int64_t));
  put(aligned16(t));
}

void KeyWriter::add(at::IntArrayRef values) {
  put(kListTag);
  put(static_cast<int64_t>(values.size()));
  bytes_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
}

void KeyWriter::add(int64_t value) {
  put(kIntTag);
  put(value);
}

void KeyWriter::add(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof(text), value, std::chars_format::general, 6).ptr;
  put(kDoubleTag);
  bytes_.append(text, end - text);
  bytes_.push_back('\0');
}

void KeyWriter::add(const EnvSwitch& set) {
  put(kSwitchTag);
  bytes_.append(set.name, std::strlen(set.name) + 1);
  bytes_.append(set.value, std::strlen(set.value) + 1);
}

void KeyWriter::add_none() {
  put(kNoneTag);
}

// The text: what convops.path_choices() shows, and what tests and the bench parse.
void TextWriter::header(const char* op, const at::Tensor& input) {
  out_ << op << " cuda:" << static_cast<int>(input.get_device()) << (conv_allows_tf32(input) ? " tf32" : "");
}

void TextWriter::add(const at::Tensor& t) {
  if (!t.defined()) return add_none();
  out_ << ' ' << t.scalar_type() << t.sizes() << t.strides() << (aligned16(t) ? "" : "u");
}

void TextWriter::add(at::IntArrayRef values) {
  out_ << ' ' << values;
}

void TextWriter::add(int64_t value) {
  out_ << ' ' << value;
}

void TextWriter::add(double value) {
  out_ << ' ' << value;
}

void TextWriter::add(const EnvSwitch& set) {
  out_ << ' ' << set.name << '=' << set.value;
}

void TextWriter::add_none() {
  out_ << " -";
}

std::string& key_buffer() {
  thread_local std::string buffer;
  return buffer;
}

at::Tensor run_auto_path(const std::string& key, c10::function_ref<std::string()> describe, PathFn convops_path,
                         PathFn aten_path, const PathFn* mixed_path) {
  Path path;
  if (cached_path(key, &path)) {
    at::Tensor output;
    switch (path) {
      case Path::kConvops: output = convops_path(); break;
      case Path::kAten: output = aten_path(); break;
      case Path::kMixed: output = mixed_path != nullptr ? (*mixed_path)() : convops_path(); break;
    }
    note_auto_path(path);  // after the path, whose own convops calls note theirs
    return output;
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (capturing(stream)) return convops_path();
  const std::string own_key = key;  // the paths may call convops ops, which refill this thread's key buffer
  at::Tensor convops_output, aten_output, mixed_output;
  double convops_ms = 0.0, aten_ms = 0.0, mixed_ms = -1.0;
  std::vector<TimedPath> paths = {{convops_path, &convops_output, &convops_ms}, {aten_path, &aten_output, &aten_ms}};
  if (mixed_path != nullptr) paths.push_back({*mixed_path, &mixed_output, &mixed_ms});
  try {
    time_paths(paths, stream, /*flush_l2=*/true);
  } catch (const c10::OutOfMemoryError&) {
    // The paths need the room more than the timing needs a cold L2; a path that runs out of memory without the flush
    // buffer as well throws from here.
    convops_output = aten_output = mixed_output = at::Tensor();
    time_paths(paths, stream, /*flush_l2=*/false);
  }
  path = choose_path(convops_ms, aten_ms, mixed_path != nullptr ? mixed_ms : -1.0);
  record_path(own_key, describe(), path, convops_ms, aten_ms, mixed_ms);
  note_auto_path(path);
  switch (path) {
    case Path::kConvops: return convops_output;
    case Path::kAten: return aten_output;
    default: return mixed_output;
  }
}

Layout layout_for(const at::Tensor& input, const char* switch_name) {
  int64_t positions = 1;
  for (int64_t i = 2; i < input.dim(); ++i) positions *= input.size(i);
  const bool round_trip_applies = (input.dim() == 4 || input.dim() == 5) && input.scalar_type() != at::kDouble &&
                                  input.suggest_memory_format() == at::MemoryFormat::Contiguous &&
                                  input.size(1) > 1 && positions > 1;
  if (!round_trip_applies) return Layout::kInput;
  const char* forced = std::getenv(switch_name);
  if (forced != nullptr && std::strcmp(forced, "input") == 0) return Layout::kInput;
  if (forced != nullptr && std::strcmp(forced, "channels_last") == 0) return Layout::kChannelsLast;
  return path_policy() == PathPolicy::kAuto ? Layout::kDecide : Layout::kInput;
}

}  // namespace cuda
}  // namespace convops
