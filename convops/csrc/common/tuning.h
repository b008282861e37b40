// Tuning switches: environment variables that override a kernel's launch choice, for tests and for timing the
// choices against each other. Each call site says whether it reads its switch once or at every launch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>

namespace convops {

// The positive integer the environment variable `name` holds, at most INT_MAX (so that the launchers' arithmetic on
// it cannot overflow: atoll saturates a longer number to LLONG_MAX), else `fallback` (unset, empty, zero, negative or
// not a number all leave the choice to the kernel).
inline int64_t tuning_value(const char* name, int64_t fallback) {
  const char* env = std::getenv(name);
  const long long asked = env != nullptr ? std::atoll(env) : 0;
  return asked > 0 ? std::min<long long>(asked, std::numeric_limits<int>::max()) : fallback;
}

}  // namespace convops
