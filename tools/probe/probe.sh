#!/usr/bin/env bash
# Which host compiler builds extensions on this machine, which libstdc++ the process loads, and whether a
# TORCH_CHECK that formats an integer survives with each compiler.
set -u
cd "$(dirname "$0")"
echo "== compilers"; for c in c++ g++ gcc cc /usr/bin/g++ /opt/gcc/bin/g++; do printf '%s -> ' "$c"; (command -v "$c" && "$c" --version | head -1) 2>&1 | tr '\n' ' '; echo; done
echo "CC=${CC:-} CXX=${CXX:-} PATH=$PATH"
python3 -c "import torch; print(torch.__config__.show())" | grep -iE "gcc|compiler|abi|cxx" | head
python3 - <<'PY'
import torch, re
print("torch cxx11 abi:", torch._C._GLIBCXX_USE_CXX11_ABI)
for line in open("/proc/self/maps"):
    if "stdc++" in line: print(line.split()[-1]); break
PY
for cxx in "" /usr/bin/g++; do
  rm -rf build_$RANDOM; d=$(mktemp -d)
  echo "== build with CXX='${cxx:-default}'"
  CXX=${cxx:-${CXX:-c++}} python3 - "$d" <<'PY' 2>&1 | tail -5
import sys, os, subprocess
from torch.utils.cpp_extension import load
d = sys.argv[1]
m = load(name="probe_ext", sources=["probe_ext.cpp"], build_directory=d, verbose=False, is_python_module=False)
import torch
r = subprocess.run([sys.executable, "-c", f"import torch; torch.ops.load_library('{d}/probe_ext.so'); import torch as t\ntry:\n  t.ops.probe.fail(t.ones(2), -3)\nexcept RuntimeError as e: print('OK error:', str(e).splitlines()[0])"], capture_output=True, text=True)
print("rc", r.returncode, r.stdout.strip(), r.stderr.strip()[-300:])
PY
done
