"""Python side of the convops custom ops: typed wrappers over torch.ops.convops.* and their fake (meta)
implementations (autograd lives in C++, csrc/autograd/). One module per op family; importing this package registers
them."""
from .conv2d_group_norm_scale_max_pool_clamp import conv2d_group_norm_scale_max_pool_clamp
from .conv_transpose import conv_transpose2d, conv_transpose3d
from .depthwise_conv2d import depthwise_conv2d
from .depthwise_separable_conv2d import depthwise_separable_conv2d

__all__ = [
    "conv2d_group_norm_scale_max_pool_clamp",
    "conv_transpose2d",
    "conv_transpose3d",
    "depthwise_conv2d",
    "depthwise_separable_conv2d",
]
