# Sourced by the build scripts: pick a host compiler that builds working extensions.
# The GPU machine's image sets CXX=/opt/gcc/bin/g++, a wrapper around GCC 13.3 whose extension builds segfault on the
# first TORCH_CHECK message that formats an integer (seen 2026-11-26 with tools/probe/probe.sh: rc -11 with that
# wrapper, the expected RuntimeError with /usr/bin/g++, the same GCC 13.3 that torch 2.11 was built with).
if [ "${CXX:-}" = "/opt/gcc/bin/g++" ] && [ -x /usr/bin/g++ ] && [ -x /usr/bin/gcc ]; then
  export CXX=/usr/bin/g++ CC=/usr/bin/gcc
fi
