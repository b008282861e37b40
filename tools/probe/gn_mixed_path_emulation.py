"""A numpy mirror of the GroupNorm block's mixed path after ATen's convolution (csrc/cuda/
conv2d_group_norm_epilogue_kernel.cuh, pool_stats_from_conv_kernel, then finalize_kernel in
conv2d_group_norm_finalize_kernel.cuh; the host's tiling in conv2d_group_norm_scale_max_pool_clamp_kernel.cu,
mixed_tiling), to check its indexing on a machine without a GPU: the grid's (image, channel tile, band) decode, each
group's (channel, window) pairs of a band, the cells right of the windows and the rows below them, the partial-moment slots the kernel writes and
the ones finalize_kernel reads (both buffers start as NaN, so a slot read but never written shows), and the output
against clamp(max_pool(group_norm(conv) * scale)) in float64. Per-window moments about the window's first value and
Chan merges as the kernel does them; the merge order within a CTA differs (it changes rounding, not indexing).
Keep the two in step.

    python tools/probe/gn_mixed_path_emulation.py
"""
from __future__ import annotations

import numpy as np

TILE_N = 64  # kTileN: channels a channel tile


def cdiv(a, b):
    return -(-a // b)


THREADS = 256


def mixed_tiling(batch, out_channels, cpg, pooled_h, pooled_w, sms=132):
    channel_tiles = cdiv(out_channels, TILE_N)
    if pooled_h == 0 or pooled_w == 0:
        return channel_tiles, 1, pooled_h
    wanted = cdiv(4 * sms, batch * channel_tiles)
    for_grid = cdiv(pooled_h, min(max(wanted, 1), pooled_h))
    for_threads = cdiv(cdiv(THREADS, min(cpg, TILE_N)), pooled_w)
    band_windows = min(max(for_grid, for_threads), pooled_h)
    return channel_tiles, cdiv(pooled_h, band_windows), band_windows


def merge(a, b):
    """Chan's merge of (count, mean, M2) summaries, as Moments::merge."""
    (n, mean, m2), (n2, mean2, m22) = a, b
    if n2 == 0:
        return a
    if n == 0:
        return b
    total = n + n2
    delta, w = mean2 - mean, n2 / total
    return total, mean + delta * w, m2 + m22 + delta * delta * n * w


def affine_sign(gamma, s):
    return 0.0 if np.isinf(gamma) else (1.0 if gamma * s >= 0 else -1.0)


def pool_stats_from_conv(conv, groups, gamma, scale, pool, sms=132):
    n_img, channels, conv_h, conv_w = conv.shape
    pool_h, pool_w = pool
    pooled_h, pooled_w = conv_h // pool_h, conv_w // pool_w
    cpg = channels // groups
    channel_tiles, bands, band_windows = mixed_tiling(n_img, channels, cpg, pooled_h, pooled_w, sms)
    local_groups = min(groups, (TILE_N - 1) // cpg + 2)
    extremum = np.full((n_img, channels, pooled_h, pooled_w), np.nan)
    partials = np.full((n_img * channel_tiles * bands * local_groups, 3), np.nan)
    written = np.zeros(len(partials), dtype=int)
    for block in range(n_img * channel_tiles * bands):
        band = block % bands
        image_tile = block // bands
        ct, n = image_tile % channel_tiles, image_tile // channel_tiles
        first_window_row = band * band_windows
        window_rows = min(band_windows, pooled_h - first_window_row)
        windows = window_rows * pooled_w
        pooled_cols, pooled_rows = pooled_w * pool_w, pooled_h * pool_h
        tail_cols = conv_w - pooled_cols
        tail_cells = window_rows * pool_h * tail_cols
        bottom_cells = (conv_h - pooled_rows) * conv_w if band == bands - 1 else 0
        c_first, c_end = ct * TILE_N, min(ct * TILE_N + TILE_N, channels)
        sign_of = {c: affine_sign(gamma[c], scale[c]) for c in range(c_first, c_end)}
        g_first = c_first
        while g_first < c_end:  # a group's channels of the tile, the (channel, window) pairs decoded as the kernel does
            g_end = min((g_first // cpg + 1) * cpg, c_end)
            slice_ = g_end - g_first
            mom = (0, 0.0, 0.0)
            for i in range(slice_ * windows):
                q, wc = divmod(i, pooled_w)
                channel, wr = q // window_rows, first_window_row + q % window_rows
                c = g_first + channel
                sign = sign_of[c]
                fold = 1.0 if sign == 0 else sign
                win = conv[n, c, wr * pool_h:(wr + 1) * pool_h, wc * pool_w:(wc + 1) * pool_w].ravel()
                assert win.size == pool_h * pool_w
                d = win - win[0]
                count = win.size
                m2 = max((d * d).sum() - d.sum() ** 2 / count, 0.0)
                mom = merge(mom, (count, win[0] + d.sum() / count, m2))
                assert np.isnan(extremum[n, c, wr, wc]), "a window written twice"
                if sign != 0:
                    extremum[n, c, wr, wc] = (fold * win).max()
                else:  # sign classes: 1 = some value <= 0, 2 = some value >= 0
                    extremum[n, c, wr, wc] = (1 if (win <= 0).any() else 0) | (2 if (win >= 0).any() else 0)
            for i in range(slice_ * tail_cells):
                channel, cell = divmod(i, tail_cells)
                r, q = first_window_row * pool_h + cell // tail_cols, pooled_cols + cell % tail_cols
                mom = merge(mom, (1, conv[n, g_first + channel, r, q], 0.0))
            for i in range(slice_ * bottom_cells):
                channel, cell = divmod(i, bottom_cells)
                mom = merge(mom, (1, conv[n, g_first + channel].ravel()[pooled_rows * conv_w + cell], 0.0))
            local_group = g_first // cpg - c_first // cpg
            slot = ((n * channel_tiles + ct) * bands + band) * local_groups + local_group
            partials[slot] = mom
            written[slot] += 1
            g_first = g_end
    assert written.max() <= 1, "a partial slot written twice"
    return extremum, partials, (channel_tiles, bands, local_groups)


def finalize(extremum, partials, tiling, groups, gamma, beta, scale, eps, lo, hi):
    n_img, channels, pooled_h, pooled_w = extremum.shape
    channel_tiles, bands, local_groups = tiling
    cpg = channels // groups
    out = np.full(extremum.shape, np.nan)
    for n in range(n_img):
        for grp in range(groups):
            tile_lo, tile_hi = grp * cpg // TILE_N, ((grp + 1) * cpg - 1) // TILE_N
            mom = (0, 0.0, 0.0)
            for i in range((tile_hi - tile_lo + 1) * bands):
                ct, st = tile_lo + i // bands, i % bands
                lg = grp - ct * TILE_N // cpg
                part = partials[((n * channel_tiles + ct) * bands + st) * local_groups + lg]
                assert not np.isnan(part).any(), f"finalize reads an unwritten slot: image {n} group {grp} tile {ct}"
                mom = merge(mom, tuple(part))
            mean, rstd = mom[1], 1.0 / np.sqrt(max(mom[2] / mom[0], 0.0) + eps)
            for c in range(grp * cpg, (grp + 1) * cpg):
                a, s = rstd * gamma[c], scale[c]
                sign = affine_sign(gamma[c], s)
                assert sign != 0, "the mirror covers finite gamma only"
                v = sign * extremum[n, c]
                assert not np.isnan(v).any(), f"an unwritten window: image {n} channel {c}"
                out[n, c] = np.clip(((v - mean) * a + beta[c]) * s, lo, hi)
    return out


def reference(conv, groups, gamma, beta, scale, eps, pool, lo, hi):
    n_img, channels, conv_h, conv_w = conv.shape
    g = conv.reshape(n_img, groups, -1)
    mean, var = g.mean(-1, keepdims=True), g.var(-1, keepdims=True)
    z = ((g - mean) / np.sqrt(var + eps)).reshape(conv.shape)
    z = (z * gamma[None, :, None, None] + beta[None, :, None, None]) * scale[None, :, None, None]
    ph, pw = pool
    oh, ow = conv_h // ph, conv_w // pw
    z = z[:, :, :oh * ph, :ow * pw].reshape(n_img, channels, oh, ph, ow, pw).max(axis=(3, 5))
    return np.clip(z, lo, hi)


PROBLEMS = [  # (images, channels, groups, conv_h, conv_w, pool, sms): channel tiles, groups across tiles, bands, tails
    (2, 8, 4, 18, 19, (2, 2), 132),
    (3, 12, 12, 20, 17, (4, 4), 132),    # a channel a group
    (1, 96, 2, 21, 35, (4, 4), 132),     # two channel tiles, each group 48 channels: group 1 straddles the tiles
    (2, 72, 8, 19, 37, (2, 2), 132),     # 9 channels a group: group 7 straddles channels 63 / 64
    (1, 130, 2, 9, 11, (2, 3), 132),     # 65 channels a group: three tiles, the last of 2 channels
    (1, 6, 3, 9, 11, (4, 10), 132),      # one window a plane
    (2, 16, 4, 33, 30, (3, 3), 4),       # few SMs: bands of 7 and 4 window rows (and the rows below)
    (1, 8, 2, 7, 40, (3, 35), 132),      # wide windows
    (4, 64, 16, 126, 126, (4, 4), 132),  # the seed's plane, 4 images: 11 bands, the last of one window row
]


def main():
    rng = np.random.default_rng(0)
    for n_img, channels, groups, conv_h, conv_w, pool, sms in PROBLEMS:
        conv = rng.normal(3.0, 2.0, (n_img, channels, conv_h, conv_w)) + rng.normal(0, 5, (1, channels, 1, 1))
        gamma, beta = rng.normal(0, 1, channels), rng.normal(0, 1, channels)
        scale = rng.uniform(-2, 2, channels)
        extremum, partials, tiling = pool_stats_from_conv(conv, groups, gamma, scale, pool, sms)
        out = finalize(extremum, partials, tiling, groups, gamma, beta, scale, 1e-5, -0.7, 0.9)
        ref = reference(conv, groups, gamma, beta, scale, 1e-5, pool, -0.7, 0.9)
        err = np.abs(out - ref).max()
        print(f"{n_img}x{channels}x{conv_h}x{conv_w} groups {groups} pool {pool} sms {sms}: tiles x bands "
              f"{tiling[0]} x {tiling[1]}, max |out - ref| {err:.1e}")
        assert err < 1e-9, err


if __name__ == "__main__":
    main()
