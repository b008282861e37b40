"""A numpy mirror of the few-pixel 1x1's indexing (csrc/cuda/depthwise_separable_conv2d_pointwise.cu), to check a
change to it on a machine without a GPU: the host's split plan, each stage's copies into a ring slot refilled with NaN
before every load (a read of a stale or unwritten element shows as NaN), the mma.sync m16n8k8 fragments as the PTX
ISA lays them out, the stores of the outputs or of the partial sums and their sum in split order. Checked against a
plain product on NCHW, NHWC and strided intermediates. Keep the two in step.

    python tools/probe/few_pixel_pointwise_emulation.py
"""
from __future__ import annotations

import numpy as np

WARPS_M, WARPS_N = 4, 2
THREADS = 32 * WARPS_M * WARPS_N
COUT_TILE, PIXEL_TILE, CHUNK, STAGES, CTAS_PER_SM = 32 * WARPS_M, 32 * WARPS_N, 32, 3, 2
ROW_PITCH, PIXEL_PITCH = CHUNK + 4, PIXEL_TILE + 8
WEIGHT_STAGE = COUT_TILE * ROW_PITCH
STAGE_FLOATS = WEIGHT_STAGE + max(PIXEL_TILE * ROW_PITCH, CHUNK * PIXEL_PITCH)


def cdiv(a, b):
    return -(-a // b)


def split_plan(channels, out_channels, pixels, sms=132):
    chunks = cdiv(channels, CHUNK)
    tiles = cdiv(out_channels, COUT_TILE) * cdiv(pixels, PIXEL_TILE)
    wanted = min(max(CTAS_PER_SM * sms // tiles, 1), chunks)
    per_split = cdiv(chunks, wanted)
    return per_split, cdiv(chunks, per_split)


def mma(acc, a, b):
    """acc[lane] += the lane's share of A (16x8) @ B (8x8), from the lanes' fragments."""
    A, B = np.full((16, 8), np.nan), np.full((8, 8), np.nan)
    for lane in range(32):
        g, t = divmod(lane, 4)
        A[g, t], A[g + 8, t], A[g, t + 4], A[g + 8, t + 4] = a[lane]
        B[t, g], B[t + 4, g] = b[lane]
    D = A @ B
    for lane in range(32):
        g, t = divmod(lane, 4)
        acc[lane] += [D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]]


def load_stage(smem, slot, p, pixel_at, cout0, k0, pixel_rows):
    base = slot * STAGE_FLOATS
    smem[base:base + STAGE_FLOATS] = np.nan
    pieces = CHUNK // 4
    for piece in range(COUT_TILE * pieces):  # every thread's pieces, tid + i * THREADS, in any order
        row, k = divmod(piece, pieces)
        k *= 4
        co = cout0 + row
        valid = co < p["out_channels"] and k0 + k < p["channels"]
        src = co * p["channels"] + k0 + k
        assert not valid or src % 4 == 0
        dst = base + row * ROW_PITCH + k
        smem[dst:dst + 4] = p["weight"][src:src + 4] if valid else 0.0
    input_base = base + WEIGHT_STAGE
    if pixel_rows:
        for piece in range(PIXEL_TILE * pieces):
            pixel, k = divmod(piece, pieces)
            k *= 4
            at = pixel_at[pixel]
            valid = at >= 0 and k0 + k < p["channels"]
            assert not valid or (at + k0 + k) % 4 == 0
            dst = input_base + pixel * ROW_PITCH + k
            smem[dst:dst + 4] = p["input"][at + k0 + k:at + k0 + k + 4] if valid else 0.0
    else:
        for element in range(CHUNK * PIXEL_TILE):
            k, pixel = divmod(element, PIXEL_TILE)
            at = pixel_at[pixel]
            valid = at >= 0 and k0 + k < p["channels"]
            smem[input_base + k * PIXEL_PITCH + pixel] = p["input"][at + (k0 + k) * p["in_stride"][1]] if valid else 0.0


def sum_partials(partial, out_channels, pixels, pixels_innermost, tile=32, warps=8):
    """The sum kernel: tiles of 32 couts x 32 pixels, splits added in order, through a [pixel][cout] tile of shared
    memory (NaN-filled: a slot read unwritten shows) where the output's pixels are innermost."""
    out = np.full((out_channels, pixels), np.nan)
    splits = partial.shape[0]
    for bx in range(cdiv(out_channels, tile)):
        for by in range(cdiv(pixels, tile)):
            cout0, pixel0 = bx * tile, by * tile
            sums = np.full((tile, tile + 1), np.nan)
            for warp in range(warps):
                for j in range(warp, tile, warps):
                    for lane in range(32):
                        co, pixel = cout0 + lane, pixel0 + j
                        if co >= out_channels or pixel >= pixels:
                            continue
                        total = partial[0, pixel, co]
                        for s in range(1, splits):
                            total += partial[s, pixel, co]
                        if pixels_innermost:
                            sums[j, lane] = total
                        else:
                            out[co, pixel] = total
            if pixels_innermost:
                for warp in range(warps):
                    for j in range(warp, tile, warps):
                        for lane in range(32):
                            co, pixel = cout0 + j, pixel0 + lane
                            if co < out_channels and pixel < pixels:
                                out[co, pixel] = sums[lane, j]
    return out


def run(n, channels, h, w, out_channels, layout, rng):
    pixels = n * h * w
    x = rng.standard_normal((n, channels, h, w))
    weight = rng.standard_normal((out_channels, channels))
    if layout == "nhwc":
        flat, stride = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).ravel(), (h * w * channels, 1, w * channels, channels)
    elif layout == "nchw":
        flat, stride = x.ravel().copy(), (channels * h * w, h * w, w, 1)
    else:  # a channel slice of a tensor with every other column
        big = np.zeros((n, channels + 1, h, 2 * w))
        big[:, 1:, :, ::2] = x
        flat, stride = big.ravel()[h * 2 * w:], ((channels + 1) * h * 2 * w, h * 2 * w, 2 * w, 2)
    p = dict(input=flat, weight=weight.ravel(), channels=channels, out_channels=out_channels, in_stride=stride)
    per_split, splits = split_plan(channels, out_channels, pixels)
    pixel_rows = stride[1] == 1 and channels > 1 and all(s % 4 == 0 for s in (stride[0], stride[2], stride[3]))
    out = np.full((out_channels, pixels), np.nan)
    partial = np.full((splits, pixels, out_channels), np.nan)
    total_chunks = cdiv(channels, CHUNK)
    for bx in range(cdiv(out_channels, COUT_TILE)):
        for by in range(cdiv(pixels, PIXEL_TILE)):
            for bz in range(splits):
                cout0, pixel0, first = bx * COUT_TILE, by * PIXEL_TILE, bz * per_split
                chunks = min(per_split, total_chunks - first)
                pixel_at = []
                for tid in range(PIXEL_TILE):
                    pixel = pixel0 + tid
                    if pixel < pixels:
                        img, hw = divmod(pixel, h * w)
                        yy, xx = divmod(hw, w)
                        pixel_at.append(img * stride[0] + yy * stride[2] + xx * stride[3])
                    else:
                        pixel_at.append(-1)
                smem = np.full(STAGES * STAGE_FLOATS, np.nan)
                acc = np.zeros((WARPS_M * WARPS_N, 2, 4, 32, 4))
                for s in range(STAGES - 1):
                    if s < chunks:
                        load_stage(smem, s, p, pixel_at, cout0, (first + s) * CHUNK, pixel_rows)
                for c in range(chunks):
                    nxt = c + STAGES - 1
                    if nxt < chunks:  # refills the slot read at step c - 1, after the barrier
                        load_stage(smem, nxt % STAGES, p, pixel_at, cout0, (first + nxt) * CHUNK, pixel_rows)
                    weight_tile = (c % STAGES) * STAGE_FLOATS
                    input_tile = weight_tile + WEIGHT_STAGE
                    for warp in range(WARPS_M * WARPS_N):
                        wm, wn = warp % WARPS_M, warp // WARPS_M
                        n_blocks = min(4, max(0, int((min(PIXEL_TILE, pixels - pixel0) - 32 * wn + 7) / 8)))
                        for k8 in range(0, CHUNK, 8):
                            a = [[], []]
                            for m in range(2):
                                for lane in range(32):
                                    g, t = divmod(lane, 4)
                                    r = weight_tile + (32 * wm + 16 * m + g) * ROW_PITCH + k8 + t
                                    a[m].append([smem[r], smem[r + 8 * ROW_PITCH], smem[r + 4],
                                                 smem[r + 8 * ROW_PITCH + 4]])
                            for nb in range(n_blocks):
                                b = []
                                for lane in range(32):
                                    g, t = divmod(lane, 4)
                                    pixel = 32 * wn + 8 * nb + g
                                    if pixel_rows:
                                        r, step = input_tile + pixel * ROW_PITCH + k8 + t, 4
                                    else:
                                        r, step = input_tile + (k8 + t) * PIXEL_PITCH + pixel, 4 * PIXEL_PITCH
                                    b.append([smem[r], smem[r + step]])
                                mma(acc[warp, 0, nb], a[0], b)
                                mma(acc[warp, 1, nb], a[1], b)
                for warp in range(WARPS_M * WARPS_N):
                    wm, wn = warp % WARPS_M, warp // WARPS_M
                    for m in range(2):
                        for nb in range(4):
                            for lane in range(32):
                                g, t = divmod(lane, 4)
                                for e in range(4):
                                    co = cout0 + 32 * wm + 16 * m + g + 8 * (e // 2)
                                    pixel = pixel0 + 32 * wn + 8 * nb + 2 * t + e % 2
                                    if co >= out_channels or pixel >= pixels:
                                        continue
                                    if splits == 1:
                                        out[co, pixel] = acc[warp, m, nb, lane, e]
                                    else:
                                        partial[bz, pixel, co] = acc[warp, m, nb, lane, e]
    if splits > 1:
        out = sum_partials(partial, out_channels, pixels, pixels_innermost=layout != "nhwc")
    reference = weight @ x.transpose(1, 0, 2, 3).reshape(channels, pixels)
    return per_split, splits, pixel_rows, float(np.abs(out - reference).max())


def main():
    rng = np.random.default_rng(0)
    # (N, C, H, W, C_out): the tests' FEW_PIXEL_CASES and smaller ragged ones
    for case in [(1, 768, 7, 7, 3072), (3, 524, 5, 6, 257), (1, 516, 1, 49, 256), (1, 32, 16, 16, 300),
                 (1, 32, 5, 5, 130), (2, 36, 3, 5, 129), (1, 8, 1, 1, 128)]:
        for layout in ("nchw", "nhwc", "strided"):
            per_split, splits, pixel_rows, error = run(*case, layout, rng)
            print(f"{case} {layout}: {splits} splits of {per_split} stages, "
                  f"{'[pixel][channel]' if pixel_rows else '[channel][pixel]'}, max error {error:.1e}")
            assert error < 1e-9, error


if __name__ == "__main__":
    main()
