"""Build convops._C: a CUDA extension when CUDA is usable (or FORCE_CUDA=1), otherwise CPU only.

Environment:
  FORCE_CUDA=1      build the CUDA kernels even where no GPU is visible (CUDA toolkit required)
  FORCE_CPU=1       build the CPU kernels only, even where CUDA is usable
  CONVOPS_OPS=a,b   build only the op families whose files start with these names (for quick kernel work on the
                    GPU machine; a normal build takes every op)
  DEBUG=1           -O0 -g instead of release flags
  TORCH_CUDA_ARCH_LIST, MAX_JOBS   respected as by torch.utils.cpp_extension, except that compute capability 9.0
                    is built for sm_90a (see _hopper_as_sm90a)
"""
import glob
import os

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("convops", "csrc")


def _flag(name: str) -> bool:
    return os.getenv(name, "0") == "1"


def _use_cuda() -> bool:
    if _flag("FORCE_CPU"):
        return False
    if _flag("FORCE_CUDA"):
        return True
    return torch.cuda.is_available() and CUDA_HOME is not None


# Sources every build takes: the module itself, the path choice every op's CUDA entry consults, the bulk-copy host
# helpers (tensor maps), the convolution GEMM (conv_transpose's kernel == stride path and the separable mixed path).
_SHARED_SOURCES = ("convops.cpp", "path_choice.cpp", "path_choice.cu", "bulk_copy.cu", "convolution_gemm.cu")


# Families whose files need another family's (by file-name prefix): the separable op runs the depthwise kernels as
# its first stage, and both depthwise CPU kernels share the direct loop in cpu/depthwise_direct.cpp.
_FAMILY_DEPENDENCIES = {"depthwise_separable_conv2d": ("depthwise_conv2d",), "depthwise_conv2d": ("depthwise_direct",)}


def _selected(paths):
    only = [p for p in os.getenv("CONVOPS_OPS", "").split(",") if p]
    if not only:
        return paths
    for family in only:  # grows while it is walked: dependencies of dependencies
        only += [d for d in _FAMILY_DEPENDENCIES.get(family, ()) if d not in only]
    return [p for p in paths if os.path.basename(p) in _SHARED_SOURCES or os.path.basename(p).startswith(tuple(only))]


def _hopper_as_sm90a():
    """The nvcc target flags, with compute capability 9.0 built as the arch-specific target sm_90a: its machine code
    runs on every 9.0 GPU (H100, H200, GH200) and has wgmma, which the fused separable kernel uses (plain sm_90 code
    would carry only mma.sync). Where 9.0 asks for PTX too (`9.0+PTX`, `Hopper`), the portable compute_90 PTX is
    kept. Returns the complete list of target flags: torch adds none of its own once any nvcc flag names an arch,
    so the PTX flag could not simply be added to torch's. [] (torch's own choice) where no list is given and no GPU
    is visible."""
    from torch.utils.cpp_extension import _get_cuda_arch_flags
    requested = os.getenv("TORCH_CUDA_ARCH_LIST")
    if requested is None:  # torch would take the visible GPUs' capabilities: do so here, to rewrite them
        if not torch.cuda.is_available():
            return []
        capabilities = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
        requested = ";".join(f"{major}.{minor}" for major, minor in capabilities)
    arches, ptx = [], []
    for arch in requested.replace(" ", ";").split(";"):
        if arch in ("9.0", "9.0+PTX", "Hopper"):  # (torch reads "Hopper" as 9.0+PTX)
            arches.append("9.0a")
            if arch != "9.0":
                ptx = ["-gencode=arch=compute_90,code=compute_90"]
        elif arch:
            arches.append(arch)
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(arches)
    # Host code learns from this macro that the 9.0 machine code has wgmma (the row-streaming separable kernel).
    sm90a = ["-DCONVOPS_SM90A_CODE"] if "9.0a" in arches else []
    return _get_cuda_arch_flags() + ptx + sm90a


def _extension():
    debug = _flag("DEBUG")
    opt = ["-O0", "-g"] if debug else ["-O3", "-DNDEBUG"]
    cxx = opt
    sources = _selected(sorted(glob.glob(os.path.join(CSRC, "*.cpp")) + glob.glob(os.path.join(CSRC, "cpu", "*.cpp"))
                               + glob.glob(os.path.join(CSRC, "autograd", "*.cpp"))))
    if not _use_cuda():
        return CppExtension("convops._C", sources, include_dirs=[os.path.join(ROOT, CSRC)],
                            extra_compile_args={"cxx": cxx})
    sources += _selected(sorted(glob.glob(os.path.join(CSRC, "cuda", "*.cu"))))
    nvcc = opt + ["--expt-relaxed-constexpr", "-lineinfo", "-Xptxas=-warn-spills"] + _hopper_as_sm90a()
    nvcc += [f for f in os.getenv("NVCC_FLAGS", "").split() if f]
    return CUDAExtension("convops._C", sources, include_dirs=[os.path.join(ROOT, CSRC)],
                         define_macros=[("CONVOPS_WITH_CUDA", None)],
                         extra_compile_args={"cxx": cxx + ["-DCONVOPS_WITH_CUDA"], "nvcc": nvcc})


setup(
    name="convops",
    version="0.1.0",
    description="Fast convolution custom ops for PyTorch and a torch.compile backend that uses them",
    packages=find_packages(include=["convops", "convops.*"]),
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.10",
    install_requires=["torch>=2.11"],
    entry_points={"torch_dynamo_backends": ["convops = convops.backend:convops_backend"]},
)
