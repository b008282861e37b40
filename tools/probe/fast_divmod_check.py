"""Checks convops::cuda::FastDivmod (convops/csrc/cuda/device_utils.cuh) against integer division on the host,
without a GPU: the struct's host path is the same multiply-high arithmetic as the device's __umulhi.

    python tools/probe/fast_divmod_check.py     # builds with nvcc, ~10^8 (n, d) pairs, prints "bad 0"

Divisors 1..4999 against every n < 20000 and random n, then random divisors up to 2^31 - 1, each with n = d - 1,
d, 2^31 - 1 and random n.
"""
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = r"""
#include <cstdio>
#include <random>
#include "cuda/device_utils.cuh"

int main() {
  std::mt19937_64 rng(1);
  long checks = 0, bad = 0;
  const auto check = [&](const convops::cuda::FastDivmod& f, int n, int d) {
    int q;
    const int r = f.divmod(n, q);
    ++checks;
    if (q != n / d || r != n % d) ++bad;
  };
  for (int d = 1; d < 5000; ++d) {
    const convops::cuda::FastDivmod f(d);
    for (int n = 0; n < 20000; ++n) check(f, n, d);
    for (int i = 0; i < 2000; ++i) check(f, static_cast<int>(rng() & 0x7fffffff), d);
    check(f, 0x7fffffff, d);
  }
  for (int i = 0; i < 200000; ++i) {
    const int d = static_cast<int>(rng() % 0x7fffffff) + 1;
    const convops::cuda::FastDivmod f(d);
    for (int j = 0; j < 20; ++j) check(f, static_cast<int>(rng() & 0x7fffffff), d);
    check(f, 0x7fffffff, d);
    check(f, d, d);
    check(f, d - 1, d);
  }
  std::printf("checks %ld bad %ld\n", checks, bad);
  return bad == 0 ? 0 : 1;
}
"""


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "fast_divmod.cu"), os.path.join(tmp, "fast_divmod")
        with open(src, "w") as f:
            f.write(PROGRAM)
        subprocess.check_call(["nvcc", "-std=c++17", "-O2", f"-I{os.path.join(ROOT, 'convops', 'csrc')}", src,
                               "-o", exe])
        return subprocess.call([exe])


if __name__ == "__main__":
    raise SystemExit(main())
