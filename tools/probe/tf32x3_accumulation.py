"""Would 3xTF32 (hi*hi + hi*lo + lo*hi on the tensor cores) hold strict fp32's tolerance at conv_transpose's
reduction lengths? The seeds reduce over K = 1344 (L1-65: 64 channels x 21 taps) and 1296 (L1-70: 48 x 27), where
the GroupNorm and separable kernels' 3xTF32 reduce over 72 and 64; tensor cores add in fp32 with truncation, so the
error grows with K (tests/test_conv_transpose.py, tf32_accumulation_tolerance). The GEMMs here are cuBLAS's TF32
ones on operands rounded to nearest first (as the kernels round them), so each pass sums on the tensor cores, and
the three passes are added in fp32; eager's strict fp32 (cuBLAS FFMA) is the yardstick. Prints, per K, the largest
error against float64 relative to the largest |result|, and whether every element is within the op tests' fp32
tolerance (atol = rtol = 5e-5) and the bench's (1e-4).

    python tools/probe/tf32x3_accumulation.py      # needs a GPU

Found (H200, 2026-11-28 04:22 UTC), error relative to the largest |result| (all within both tolerances but TF32):
K = 1344: fp32 5.9e-7, 3xTF32 4.2e-6, 3xTF32 blocks 3.0e-7, TF32 2.9e-4; K = 4096: 8.7e-7, 1.0e-5, 3.9e-7, 3.1e-4.
On conv_transpose the one-pass form (the three products as one convolution of 3 x cin channels, summed by the
tensor cores alone) missed the op tests' fp32 tolerance (bench/PERF_NOTES.md, "conv_transpose in strict fp32").
"""
import torch
from tabulate import tabulate


def round_tf32(t: torch.Tensor) -> torch.Tensor:
    """To nearest TF32, ties to even (device_utils.cuh's tf32_bits)."""
    b = t.contiguous().view(torch.int32)
    lsb = torch.bitwise_and(torch.bitwise_right_shift(b, 13), 1)
    return torch.bitwise_and(b + 0xFFF + lsb, ~0x1FFF).view(torch.float32).view_as(t)


def split(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    hi = round_tf32(t)
    return hi, round_tf32(t - hi)


def within(actual: torch.Tensor, expected: torch.Tensor, tol: float) -> bool:
    return bool(((actual.double() - expected).abs() <= tol + tol * expected.abs()).all())


def main() -> None:
    torch.manual_seed(0)
    rows = []
    for k in (64, 72, 576, 1296, 1344, 4096):
        a = torch.randn(512, k, device="cuda")
        b = torch.randn(k, 2048, device="cuda") / k ** 0.5  # outputs of about unit size, as a conv's are
        ref = a.double() @ b.double()
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32 = a @ b
        torch.backends.cuda.matmul.allow_tf32 = True
        (ah, al), (bh, bl) = split(a), split(b)
        x3 = (ah @ bh) + ((ah @ bl) + (al @ bh))  # the small passes first, as a kernel would add them
        x1 = ah @ bh
        # The same with each 64-channel k-block's three passes summed on the tensor cores and the blocks added in
        # fp32 (round to nearest): what a kernel could do with a second accumulator set a stage.
        xb = torch.zeros_like(fp32)
        for k0 in range(0, k, 64):
            sl = slice(k0, k0 + 64)
            xb += (ah[:, sl] @ bh[sl]) + ((ah[:, sl] @ bl[sl]) + (al[:, sl] @ bh[sl]))
        torch.backends.cuda.matmul.allow_tf32 = False
        scale = ref.abs().max().item()
        row = [k]
        for y in (fp32, x3, xb, x1):
            row += [f"{(y.double() - ref).abs().max().item() / scale:.1e}", within(y, ref, 5e-5), within(y, ref, 1e-4)]
        rows.append(row)
    print("card:", torch.cuda.get_device_name())
    print(tabulate(rows, headers=["K", "fp32 err", "5e-5", "1e-4", "3xTF32 err", "5e-5", "1e-4", "3xTF32 blocks",
                                  "5e-5", "1e-4", "TF32 err", "5e-5", "1e-4"]))


if __name__ == "__main__":
    main()
