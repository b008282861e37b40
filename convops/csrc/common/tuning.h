// Tuning switches: environment variables that override a kernel's launch choice, for tests and for timing the
// choices against each other. Each call site says whether it reads its switch once or at every launch.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace convops {

// The positive integer the environment variable `name` holds, else `fallback` (unset, empty, zero, negative or not a
// number all leave the choice to the kernel).
inline int64_t tuning_value(const char* name, int64_t fallback) {
  const char* env = std::getenv(name);
  const long long asked = env != nullptr ? std::atoll(env) : 0;
  return asked > 0 ? asked : fallback;
}

}  // namespace convops
