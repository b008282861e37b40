"""convops: fast convolution custom ops for PyTorch (torch.ops.convops.*) and the torch.compile backend
"convops" that substitutes them into user models."""
from ._extension import has_cuda_kernels, has_ops, require_ops
from .backend import convops_backend, explain
from .path_choice import PathChoice, clear_path_choices, forced_path, path_choices, path_policy, set_path_policy
from .ops import (
    conv2d_group_norm_scale_max_pool_clamp,
    conv_transpose2d,
    conv_transpose3d,
    depthwise_conv2d,
    depthwise_separable_conv2d,
)

__version__ = "0.1.0"

__all__ = [
    "PathChoice",
    "conv2d_group_norm_scale_max_pool_clamp",
    "conv_transpose2d",
    "conv_transpose3d",
    "convops_backend",
    "depthwise_conv2d",
    "depthwise_separable_conv2d",
    "clear_path_choices",
    "explain",
    "forced_path",
    "has_cuda_kernels",
    "has_ops",
    "path_choices",
    "path_policy",
    "require_ops",
    "set_path_policy",
]
