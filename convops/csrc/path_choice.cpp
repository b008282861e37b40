// The path policy and the record of "auto" decisions, and the ops that expose them to Python
// (convops/path_choice.py): convops::_set_path_policy, _path_policy, _path_choices, _clear_path_choices.
#include "path_choice.h"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

namespace convops {
namespace {

const char* name_of(PathPolicy policy) {
  switch (policy) {
    case PathPolicy::kConvops: return "convops";
    case PathPolicy::kAten: return "aten";
    default: return "auto";
  }
}

PathPolicy parse(const std::string& name, const char* where) {
  if (name == "auto") return PathPolicy::kAuto;
  if (name == "convops") return PathPolicy::kConvops;
  if (name == "aten") return PathPolicy::kAten;
  TORCH_CHECK(false, "convops: ", where, " must be 'auto', 'convops' or 'aten', got '", name, "'");
}

std::atomic<PathPolicy>& policy_slot() {
  static std::atomic<PathPolicy> policy{[] {
    const char* env = std::getenv("CONVOPS_PATH");
    return env && *env ? parse(env, "CONVOPS_PATH") : PathPolicy::kAuto;
  }()};
  return policy;
}

struct Decision {
  Path path;
  double convops_ms, aten_ms, mixed_ms;  // mixed_ms < 0: no mixed path
  std::string description;
};

const char* name_of(Path path) {
  switch (path) {
    case Path::kConvops: return "convops";
    case Path::kAten: return "aten";
    default: return "mixed";
  }
}

// Every op call under "auto" looks its key up here, so readers share the lock; a decision is written once.
struct Record {
  std::shared_mutex mutex;
  std::unordered_map<std::string, Decision> decisions;
};

Record& record() {
  static Record r;
  return r;
}

std::string& last_auto_path() {  // "" until an "auto" call notes one
  thread_local std::string path;
  return path;
}

}  // namespace

void note_auto_path(Path path) {
  last_auto_path() = name_of(path);
}

PathPolicy path_policy() {
  return policy_slot().load();
}

void set_path_policy(PathPolicy policy) {
  policy_slot().store(policy);
}

bool cached_path(const std::string& key, Path* path) {
  auto& r = record();
  const std::shared_lock<std::shared_mutex> lock(r.mutex);
  const auto it = r.decisions.find(key);
  if (it == r.decisions.end()) return false;
  *path = it->second.path;
  return true;
}

void record_path(const std::string& key, std::string description, Path path, double convops_ms, double aten_ms,
                 double mixed_ms) {
  auto& r = record();
  const std::unique_lock<std::shared_mutex> lock(r.mutex);
  r.decisions[key] = Decision{path, convops_ms, aten_ms, mixed_ms, std::move(description)};
}

namespace {

void set_policy_op(c10::string_view name) {
  set_path_policy(parse(std::string(name), "the path policy"));
}

std::string policy_op() {
  return name_of(path_policy());
}

// One line per decision, sorted by problem; convops/path_choice.py parses them.
std::vector<std::string> choices_op() {
  auto& r = record();
  const std::shared_lock<std::shared_mutex> lock(r.mutex);
  std::vector<const Decision*> sorted;
  sorted.reserve(r.decisions.size());
  for (const auto& entry : r.decisions) sorted.push_back(&entry.second);
  std::sort(sorted.begin(), sorted.end(),
            [](const Decision* a, const Decision* b) { return a->description < b->description; });
  std::vector<std::string> lines;
  lines.reserve(sorted.size());
  for (const Decision* d : sorted) {
    lines.push_back(c10::str(d->description, " -> ", name_of(d->path), " (convops ", d->convops_ms, " ms, aten ",
                             d->aten_ms, " ms", d->mixed_ms >= 0 ? c10::str(", mixed ", d->mixed_ms, " ms") : "",
                             ")"));
  }
  return lines;
}

// The path the calling thread's latest "auto" call ran, then forgotten ("" if none since the last take).
std::string take_auto_path_op() {
  std::string path = std::move(last_auto_path());
  last_auto_path().clear();
  return path;
}

void clear_choices_op() {
  auto& r = record();
  const std::unique_lock<std::shared_mutex> lock(r.mutex);
  r.decisions.clear();
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(convops, m) {
  m.def("_set_path_policy(str policy) -> ()", &set_policy_op);
  m.def("_path_policy() -> str", &policy_op);
  m.def("_path_choices() -> str[]", &choices_op);
  m.def("_clear_path_choices() -> ()", &clear_choices_op);
  m.def("_take_auto_path() -> str", &take_auto_path_op);
}

}  // namespace convops
