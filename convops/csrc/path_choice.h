// Which implementation a convops op runs on CUDA: its own kernel, or the ATen composition it replaces. Each op's
// CUDA entry asks run_chosen_path() (cuda/path_choice.cuh); the policy comes from CONVOPS_PATH (auto | convops |
// aten, default auto) or convops.set_path_policy(), and every choice made under "auto" is recorded with its timings
// for convops.path_choices().
#pragma once

#include <string>
#include <vector>

namespace convops {

enum class PathPolicy { kAuto, kConvops, kAten };

PathPolicy path_policy();
void set_path_policy(PathPolicy policy);

// The decisions of "auto", one per problem. `key` is the problem's compact binary summary (cuda/path_choice.cuh),
// compared byte for byte on every call; `description` is the same problem written out for convops.path_choices().
// Both are safe to call from several threads.
// kMixed: an op's convops kernel for part of its work and ATen for the rest (the separable op's convops depthwise
// kernel with ATen's 1x1), for ops that offer it besides their fully convops path.
enum class Path { kConvops, kAten, kMixed };
bool cached_path(const std::string& key, Path* path);
// mixed_ms < 0: the op has no mixed path.
void record_path(const std::string& key, std::string description, Path path, double convops_ms, double aten_ms,
                 double mixed_ms = -1.0);
// Notes the path the calling thread's latest "auto" call ran (decided or looked up), for convops::_take_auto_path:
// the compile-time passes ask it what the op would run (convops/path_choice.py, auto_path).
void note_auto_path(Path path);

}  // namespace convops
