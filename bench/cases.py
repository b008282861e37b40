"""The benchmark cases: the five seed problems at their seed shapes, and a sweep of real-world layers.

Every case is an nn.Module from convops.demo (the model a user writes, and what torch.compile sees) plus an input
shape. Names are `group/description`, so --cases can pick them by substring or regex.

Real-world layer configurations (224x224 images for the classifiers):
- MobileNetV2 (torchvision): inverted residuals; depthwise 3x3 on the expanded channels (6x, 1x in the first block),
  then the 1x1 projection; strides 2 at the first block of a stage.
- EfficientNet-B0 (torchvision): MBConv with 3x3 and 5x5 depthwise kernels, padding (k-1)/2, projection 1x1.
- ConvNeXt-T: 7x7 depthwise (padding 3, bias) then the first pointwise layer, dim -> 4*dim (an nn.Linear in the
  reference code: the same 1x1 conv), stages of 96/192/384/768 channels at 56/28/14/7.
- UNet decoder (the usual PyTorch UNet, base 64, 256x256 input): ConvTranspose2d(k=2, s=2) up-samplings from the
  1024-channel bottleneck, and the k=3, s=2, padding 1, output_padding 1 form.
- 3-D VAE decoder (volumetric, 64^3 output as in 3D-GAN/VAE): ConvTranspose3d(k=4, s=2, p=1) up-samplings, and a
  video-VAE spatial up-sampling, k=3, stride (1,2,2), output_padding (0,1,1).
- conv -> GroupNorm -> scale -> max-pool -> clamp blocks with other channel counts (16-256), group counts (4-32),
  pool sizes (2/3/4), 3x3 and 5x5 kernels, padding and stride, negative and mixed-sign scales, one-sided clamps.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from convops.demo import (ConvGroupNormScaleMaxPoolClamp, ConvTranspose, DepthwiseConv2d, DepthwiseSeparableConv2d,
                          seed_problems)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    input_dist: str = "randn"     # "rand" (KernelBench's torch.rand, for the seeds) or "randn"
    quick: bool = False           # part of --quick

    @property
    def group(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def op(self) -> str:
        """The convops op that replaces the model (built on the meta device: no memory, no random numbers)."""
        with torch.device("meta"):
            return self.make().op

    @property
    def is_seed(self) -> bool:
        return self.group == "seed"


def _seed_cases() -> list[Case]:
    tags = ["L1-82_depthwise", "L1-86_depthwise_separable", "L1-65_conv_transpose2d", "L1-70_conv_transpose3d",
            "L2-85_conv_gn_scale_pool_clamp"]
    return [Case(f"seed/{tag}", p.make, p.input_shape, input_dist="rand", quick=True)
            for tag, p in zip(tags, seed_problems(reduced=False))]


# (in channels, spatial size, kernel, stride, pointwise out channels, bias), one per stage/resolution and stride.
MOBILENET_V2 = [(32, 112, 3, 1, 16, False), (144, 56, 3, 2, 32, False), (384, 14, 3, 1, 64, False),
                (960, 7, 3, 1, 160, False)]
EFFICIENTNET_B0 = [(144, 56, 5, 2, 40, False), (240, 28, 5, 1, 40, False), (480, 14, 3, 1, 80, False),
                   (1152, 7, 5, 1, 192, False)]
CONVNEXT_T = [(96, 56, 7, 1, 384, True), (192, 28, 7, 1, 768, True), (384, 14, 7, 1, 1536, True),
              (768, 7, 7, 1, 3072, True)]


def _depthwise_cases() -> list[Case]:
    cases = []
    for net, layers in (("mobilenet_v2", MOBILENET_V2), ("efficientnet_b0", EFFICIENTNET_B0),
                        ("convnext_t", CONVNEXT_T)):
        for c, hw, k, s, c_out, bias in layers:
            pad = (k - 1) // 2
            for batch in (1, 32):
                tag = f"b{batch}_c{c}_h{hw}_k{k}_s{s}"
                cases.append(Case(f"{net}/dw_{tag}", lambda c=c, k=k, s=s, p=pad, b=bias: DepthwiseConv2d(
                    c, k, s, p, bias=b), (batch, c, hw, hw)))
                cases.append(Case(f"{net}/dws_{tag}_o{c_out}",
                                  lambda c=c, o=c_out, k=k, s=s, p=pad, b=bias: DepthwiseSeparableConv2d(
                                      c, o, k, s, p, bias=b), (batch, c, hw, hw)))
    return cases


def _transpose_cases() -> list[Case]:
    cases = []
    for c_in, hw in ((1024, 16), (512, 32), (256, 64), (128, 128)):
        cases.append(Case(f"unet/convT2d_b8_c{c_in}-{c_in // 2}_h{hw}_k2_s2",
                          lambda c=c_in: ConvTranspose(2, c, c // 2, 2, 2, bias=True), (8, c_in, hw, hw)))
    for c_in, hw in ((256, 64), (128, 128)):
        cases.append(Case(f"unet/convT2d_b8_c{c_in}-{c_in // 2}_h{hw}_k3_s2_p1_op1",
                          lambda c=c_in: ConvTranspose(2, c, c // 2, 3, 2, 1, 1, bias=True), (8, c_in, hw, hw)))
    for c_in, c_out, d in ((512, 256, 4), (256, 128, 8), (128, 64, 16), (64, 32, 32)):
        cases.append(Case(f"vae3d/convT3d_b8_c{c_in}-{c_out}_d{d}_k4_s2_p1",
                          lambda i=c_in, o=c_out: ConvTranspose(3, i, o, 4, 2, 1), (8, c_in, d, d, d)))
    cases.append(Case("vae3d/convT3d_b4_c128-128_t8_h32_k3_s122_p1_op011",
                      lambda: ConvTranspose(3, 128, 128, 3, (1, 2, 2), 1, (0, 1, 1), bias=True), (4, 128, 8, 32, 32)))
    return cases


# (in, out, kernel, stride, padding, groups, pool, clamp_min, clamp_max, scale sign, batch, spatial)
GN_BLOCKS = [
    (3, 16, 3, 1, 1, 4, 2, 0.0, 1.0, "positive", 64, 64),
    (32, 64, 5, 1, 2, 8, 3, 0.0, None, "negative", 32, 56),
    (64, 128, 3, 1, 1, 32, 2, None, 1.0, "mixed", 32, 32),
    (128, 256, 3, 1, 0, 16, 4, -0.5, 0.5, "negative", 16, 28),
    (16, 32, 5, 1, 0, 4, 3, None, 0.75, "positive", 16, 100),
    (64, 64, 3, 2, 1, 8, 2, -0.25, None, "mixed", 8, 128),
]


def _gn_cases() -> list[Case]:
    cases = []
    for cin, cout, k, s, p, g, pool, lo, hi, sign, batch, hw in GN_BLOCKS:
        clamp = f"{'' if lo is None else f'{lo:g}'}..{'' if hi is None else f'{hi:g}'}"  # "0..", "..1": one bound
        name = f"gn_block/b{batch}_c{cin}-{cout}_h{hw}_k{k}_s{s}_p{p}_g{g}_pool{pool}_scale-{sign}_clamp{clamp}"
        cases.append(Case(name, lambda cin=cin, cout=cout, k=k, s=s, p=p, g=g, pool=pool, lo=lo, hi=hi, sign=sign:
                          ConvGroupNormScaleMaxPoolClamp(cin, cout, k, g, pool, lo, hi, stride=s, padding=p,
                                                         scale_init=sign),
                          (batch, cin, hw, hw)))
    return cases


# --quick: the seeds and one sweep case per op family (batch 32 for the classifiers' layers).
QUICK_SWEEP = {
    "mobilenet_v2/dws_b32_c144_h56_k3_s2_o32",
    "efficientnet_b0/dw_b32_c240_h28_k5_s1",
    "convnext_t/dws_b32_c96_h56_k7_s1_o384",
    "unet/convT2d_b8_c256-128_h64_k2_s2",
    "vae3d/convT3d_b8_c128-64_d16_k4_s2_p1",
    "gn_block/b32_c64-128_h32_k3_s1_p1_g32_pool2_scale-mixed_clamp..1",
}


def all_cases() -> list[Case]:
    cases = _seed_cases() + _depthwise_cases() + _transpose_cases() + _gn_cases()
    return [replace(c, quick=True) if c.name in QUICK_SWEEP else c for c in cases]


def select(cases: Iterable[Case], pattern: str | None = None, quick: bool = False) -> list[Case]:
    """Cases whose name matches `pattern` (re.search: a substring works), restricted to the quick set if asked."""
    regex = re.compile(pattern) if pattern else None
    return [c for c in cases if (not quick or c.quick) and (regex is None or regex.search(c.name))]
