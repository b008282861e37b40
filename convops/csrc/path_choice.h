// Which implementation a convops op runs on CUDA: its own kernel, or the ATen composition it replaces. Each op's
// CUDA entry asks choose_path(); the policy comes from CONVOPS_PATH (auto | convops | aten, default auto) or
// convops.set_path_policy(), and every choice made under "auto" is recorded with its timings for
// convops.path_choices().
#pragma once

#include <string>
#include <vector>

namespace convops {

enum class PathPolicy { kAuto, kConvops, kAten };

PathPolicy path_policy();
void set_path_policy(PathPolicy policy);

// The cached decision of "auto" for a problem key, if one was made.
enum class Path { kConvops, kAten };
bool cached_path(const std::string& key, Path* path);
void record_path(const std::string& key, Path path, double convops_ms, double aten_ms);

}  // namespace convops
