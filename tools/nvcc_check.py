"""Compile CUDA sources to sm_90a objects on a machine without a GPU, to catch compile errors and read the
register/spill report (-Xptxas -v) before spending device time.

    python tools/nvcc_check.py convops/csrc/cuda/depthwise_conv2d_kernel.cu [--verbose]
"""
import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile

from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--verbose", action="store_true", help="print ptxas resource usage")
    parser.add_argument("--arch", default="90a", help="90a as setup.py builds compute capability 9.0; 90 for the plain target")
    args = parser.parse_args()
    includes = cpp_extension.include_paths() + [os.path.join(ROOT, "convops", "csrc"), sysconfig.get_paths()["include"],
                                                  os.path.join(ROOT, "tools", "nvcc_shim")]
    status = 0
    for src in args.sources:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = ["nvcc", "-c", src, "-o", os.path.join(tmp, "out.o"), "-std=c++20", "-O3", "-DNDEBUG",
                   "--expt-relaxed-constexpr", "-DCONVOPS_WITH_CUDA", "-Xptxas=-warn-spills",
                   f"-gencode=arch=compute_{args.arch},code=sm_{args.arch}", "-Xcompiler", "-fPIC"]
            cmd += [f"-I{p}" for p in includes] + cpp_extension.COMMON_NVCC_FLAGS
            cmd += ["-DTORCH_EXTENSION_NAME=_C", "-D_GLIBCXX_USE_CXX11_ABI=1"]
            if args.verbose:
                cmd.append("-Xptxas=-v")
            print("nvcc", src, flush=True)
            status |= subprocess.call(cmd)
    return status


if __name__ == "__main__":
    sys.exit(main())
