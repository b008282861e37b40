"""A numpy mirror of the GroupNorm block's mixed path after ATen's convolution (csrc/cuda/
conv2d_group_norm_epilogue_kernel.cuh: pool_stats_from_conv_kernel for NCHW, pool_stats_from_nhwc_conv_kernel for
NHWC; then finalize_kernel, conv2d_group_norm_finalize_kernel.cuh; the host's tiling and finalize split,
mixed_tiling and launch_finalize in conv2d_group_norm_scale_max_pool_clamp_kernel.cu), to check their indexing on a
machine without a GPU: the grid's (image, channel tile, band) decode, the windows each thread takes (NCHW: a group's
(channel, window) pairs; NHWC: V channels a thread, rows of threads over the windows), the cells right of the windows
and the rows below them, the partial-moment slots the kernels write and the ones finalize_kernel reads (both buffers
start as NaN, so a slot read but never written shows), the windows each finalize CTA of a split writes, kUnroll at a
time (each once), and the output against clamp(max_pool(group_norm(conv + bias) * scale)) in float64, the conv
bias added by the stats kernels to each value they read, by the channel they decode for it. Each thread's values
as sums about its first value (ShiftedSums), then Chan merges, as the kernels do them; merge orders differ
(rounding, not indexing). Keep the two in step.

    python tools/probe/gn_mixed_path_emulation.py
"""
from __future__ import annotations

import numpy as np

TILE_N = 64  # kTileN: channels a channel tile


def cdiv(a, b):
    return -(-a // b)


THREADS = 256


CTAS_PER_SM, VECTOR_CTAS_PER_SM = 4, 2  # the stats kernels' (kCtasPerSm, kVectorCtasPerSm)


FINALIZE_UNROLL = 4  # finalize_kernel's kUnroll


def mixed_tiling(batch, out_channels, cpg, pooled_h, pooled_w, nhwc, sms=132, vector=1):
    channel_tiles = cdiv(out_channels, TILE_N)
    if pooled_h == 0 or pooled_w == 0:
        return channel_tiles, 1, pooled_h
    wanted = cdiv((VECTOR_CTAS_PER_SM if vector > 1 else CTAS_PER_SM) * sms, batch * channel_tiles)
    for_grid = cdiv(pooled_h, min(max(wanted, 1), pooled_h))
    windows_a_channel = cdiv(THREADS, min(out_channels if nhwc else cpg, TILE_N) // vector)
    for_threads = cdiv(windows_a_channel, pooled_w)
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


class ShiftedSums:
    """A thread's values of a channel (NHWC) or of a group's slice (NCHW) as ShiftedSums keeps them: sums of their
    differences from the first value it meets."""

    def __init__(self):
        self.shift, self.count, self.s1, self.s2 = 0.0, 0, 0.0, 0.0

    def add(self, values):
        if self.count == 0:
            self.shift = values[0]
        d = np.asarray(values, dtype=float) - self.shift
        self.count += d.size
        self.s1 += d.sum()
        self.s2 += (d * d).sum()

    def moments(self):
        if self.count == 0:
            return 0, 0.0, 0.0
        mean = self.s1 / self.count
        return self.count, self.shift + mean, max(self.s2 - self.s1 * mean, 0.0)


def window_summary(win, sign, sums):
    """A window's values into the thread's `sums`, and its code as window_summaries computes it (the folded max, or
    the sign classes)."""
    sums.add(win)
    fold = 1.0 if sign == 0 else sign
    return (fold * win).max() if sign != 0 else (1 if (win <= 0).any() else 0) | (2 if (win >= 0).any() else 0)


class Band:
    """A CTA's share, decoded from its block index as the kernels' Band does."""

    def __init__(self, block, shape, pool, tiling, band_windows):
        n_img, channels, conv_h, conv_w = shape
        (pool_h, pool_w), (channel_tiles, bands) = pool, tiling
        pooled_h, pooled_w = conv_h // pool_h, conv_w // pool_w
        self.band = block % bands
        image_tile = block // bands
        self.ct, self.n = image_tile % channel_tiles, image_tile // channel_tiles
        self.c_first, self.c_end = self.ct * TILE_N, min(self.ct * TILE_N + TILE_N, channels)
        self.first_window_row = self.band * band_windows
        self.window_rows = min(band_windows, pooled_h - self.first_window_row)
        self.windows = self.window_rows * pooled_w
        self.first_row = self.first_window_row * pool_h
        self.pooled_cols, self.pooled_rows = pooled_w * pool_w, pooled_h * pool_h
        self.tail_cols = conv_w - self.pooled_cols
        self.tail_cells = self.window_rows * pool_h * self.tail_cols
        self.bottom_cells = (conv_h - self.pooled_rows) * conv_w if self.band == bands - 1 else 0

    def tail_cell(self, cell):
        return self.first_row + cell // self.tail_cols, self.pooled_cols + cell % self.tail_cols


class Launch:
    """What both kernels' launches share: the tiling, the buffers (NaN: unwritten) and the slots' write counts."""

    def __init__(self, conv, groups, pool, sms, nhwc, vector=1):
        n_img, channels, conv_h, conv_w = conv.shape
        self.shape, self.pool = conv.shape, pool
        self.pooled_h, self.pooled_w = conv_h // pool[0], conv_w // pool[1]
        self.cpg = channels // groups
        self.channel_tiles, self.bands, self.band_windows = mixed_tiling(
            n_img, channels, self.cpg, self.pooled_h, self.pooled_w, nhwc, sms, vector)
        self.local_groups = min(groups, (TILE_N - 1) // self.cpg + 2)
        self.extremum = np.full((n_img, channels, self.pooled_h, self.pooled_w), np.nan)
        self.partials = np.full((n_img * self.channel_tiles * self.bands * self.local_groups, 3), np.nan)
        self.written = np.zeros(len(self.partials), dtype=int)

    def blocks(self):
        for block in range(self.shape[0] * self.channel_tiles * self.bands):
            yield Band(block, self.shape, self.pool, (self.channel_tiles, self.bands), self.band_windows)

    def write_window(self, b, c, wr, wc, code):
        assert np.isnan(self.extremum[b.n, c, wr, wc]), "a window written twice"
        self.extremum[b.n, c, wr, wc] = code

    def write_partial(self, b, local_group, mom):
        slot = ((b.n * self.channel_tiles + b.ct) * self.bands + b.band) * self.local_groups + local_group
        self.partials[slot] = mom
        self.written[slot] += 1

    def result(self):
        assert self.written.max() <= 1, "a partial slot written twice"
        return self.extremum, self.partials, (self.channel_tiles, self.bands, self.local_groups)


def pool_stats_from_conv(conv, bias, groups, gamma, scale, pool, sms=132, nhwc=False):
    """pool_stats_from_conv_kernel (or, with nhwc, its NHWC twin): a group's channels of the tile at a time, its
    (channel, window) pairs decoded as the kernel does, then the cells right of the windows and the rows below."""
    if nhwc:
        return pool_stats_from_nhwc_conv(conv, bias, groups, gamma, scale, pool, sms)
    launch = Launch(conv, groups, pool, sms, False)
    pool_h, pool_w, pooled_w, cpg = *pool, launch.pooled_w, launch.cpg
    for b in launch.blocks():
        g_first = b.c_first
        while g_first < b.c_end:
            g_end = min((g_first // cpg + 1) * cpg, b.c_end)
            slice_ = g_end - g_first
            sums = [ShiftedSums() for _ in range(THREADS)]  # thread tid takes pairs tid, tid + THREADS, ...
            for i in range(slice_ * b.windows):
                q, wc = divmod(i, pooled_w)
                c, wr = g_first + q // b.window_rows, b.first_window_row + q % b.window_rows
                win = conv[b.n, c, wr * pool_h:(wr + 1) * pool_h, wc * pool_w:(wc + 1) * pool_w].ravel() + bias[c]
                assert win.size == pool_h * pool_w
                code = window_summary(win, affine_sign(gamma[c], scale[c]), sums[i % THREADS])
                launch.write_window(b, c, wr, wc, code)
            for i in range(slice_ * b.tail_cells):
                channel, cell = divmod(i, b.tail_cells)
                sums[i % THREADS].add([conv[b.n, g_first + channel][b.tail_cell(cell)] + bias[g_first + channel]])
            for i in range(slice_ * b.bottom_cells):
                channel, cell = divmod(i, b.bottom_cells)
                value = conv[b.n, g_first + channel].ravel()[b.pooled_rows * conv.shape[3] + cell]
                sums[i % THREADS].add([value + bias[g_first + channel]])
            mom = (0, 0.0, 0.0)
            for t in sums:
                mom = merge(mom, t.moments())
            local = g_first // cpg - b.c_first // cpg
            assert local < TILE_N + 1, "past the NCHW kernel's warp_moments array"
            launch.write_partial(b, local, mom)
            g_first = g_end
    return launch.result()


def pool_stats_from_nhwc_conv(conv, bias, groups, gamma, scale, pool, sms):
    """pool_stats_from_nhwc_conv_kernel: with tc the tile's channels and V channels a thread (4 where the channels
    are whole vectors of 4, the host's choice; else 1), thread t takes channels c_first + V (t % (tc / V)) ... + V - 1
    and every rows-th window from t // (tc / V) (rows = THREADS // (tc / V); threads past them idle); then the warp
    of group lg merges the group's (channel, row) summaries: entry e is row e // width of channel lo + e % width."""
    vector = 4 if conv.shape[1] % 4 == 0 else 1
    launch = Launch(conv, groups, pool, sms, True, vector)
    _, channels, conv_h, conv_w = conv.shape
    pool_h, pool_w, pooled_w, cpg = *pool, launch.pooled_w, launch.cpg
    nhwc = conv.transpose(0, 2, 3, 1).ravel()  # the dense NHWC buffer, read by flat offsets as the kernel does
    row_stride, pixel_stride = conv_w * channels, channels
    for b in launch.blocks():
        summaries = {}
        tile_channels = b.c_end - b.c_first
        lanes = tile_channels // vector
        rows = THREADS // lanes
        for tid, v in ((tid, v) for tid in range(THREADS) for v in range(vector)):
            lane, row = tid % lanes, tid // lanes
            c = b.c_first + lane * vector + v
            sums = ShiftedSums()
            if row < rows:
                image = b.n * conv_h * row_stride + c
                for i in range(row, b.windows, rows):
                    q, wc = divmod(i, pooled_w)
                    wr = b.first_window_row + q
                    first = image + wr * pool_h * row_stride + wc * pool_w * pixel_stride
                    win = np.array([nhwc[first + r * row_stride + k * pixel_stride]
                                    for r in range(pool_h) for k in range(pool_w)]) + bias[c]
                    code = window_summary(win, affine_sign(gamma[c], scale[c]), sums)
                    launch.write_window(b, c, wr, wc, code)
                for i in range(row, b.tail_cells, rows):
                    r, col = b.tail_cell(i)
                    sums.add([nhwc[image + r * row_stride + col * pixel_stride] + bias[c]])
                for i in range(row, b.bottom_cells, rows):
                    sums.add([nhwc[image + b.pooled_rows * row_stride + i * pixel_stride] + bias[c]])
            index = row * tile_channels + lane * vector + v
            assert index < THREADS * vector, "past the kernel's summaries array"
            summaries[index] = sums.moments()
        first_group = b.c_first // cpg
        for tid in range((b.c_end - 1) // cpg - first_group + 1):
            grp = first_group + tid
            lo = max(grp * cpg, b.c_first) - b.c_first
            width = min((grp + 1) * cpg, b.c_end) - b.c_first - lo
            total = (0, 0.0, 0.0)
            for e in range(width * rows):
                total = merge(total, summaries[(e // width) * tile_channels + lo + e % width])
            launch.write_partial(b, tid, total)
    return launch.result()


def finalize_splits(n_img, groups, pooled_h, pooled_w, sms):
    """The host's split of the finalize kernel along the pooled plane (launch_finalize): CTAs a (image, group)."""
    wanted = cdiv(4 * sms, n_img * groups)
    return max(1, min(wanted, cdiv(pooled_h * pooled_w, THREADS), 65535))


def finalize(extremum, partials, tiling, groups, gamma, beta, scale, eps, lo, hi, sms):
    n_img, channels, pooled_h, pooled_w = extremum.shape
    channel_tiles, bands, local_groups = tiling
    cpg = channels // groups
    splits = finalize_splits(n_img, groups, pooled_h, pooled_w, sms)
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
            z = {}
            for c in range(grp * cpg, (grp + 1) * cpg):
                a, s = rstd * gamma[c], scale[c]
                sign = affine_sign(gamma[c], s)
                assert sign != 0, "the mirror covers finite gamma only"
                v = sign * extremum[n, c]
                assert not np.isnan(v).any(), f"an unwritten window: image {n} channel {c}"
                z[c] = np.clip(((v - mean) * a + beta[c]) * s, lo, hi).reshape(-1)
            plane = pooled_h * pooled_w
            for y in range(splits):  # each CTA's share: per thread, windows from tid + y * THREADS by THREADS * splits
                for tid in range(THREADS):
                    first, step = tid + y * THREADS, THREADS * splits
                    for chunk in range(0, cpg, THREADS):  # channels whose parameters fit in shared memory
                        channels = min(THREADS, cpg - chunk)
                        # The kernel's walk: channel `local` of the chunk at position `at`, FINALIZE_UNROLL at a time.
                        local, at = (0 if first < plane else channels), first
                        while local < channels:
                            batch = []
                            for _ in range(FINALIZE_UNROLL):
                                if local < channels:
                                    batch.append((local, at))
                                    at += step
                                    if at >= plane:
                                        at, local = first, local + 1
                            for lc, i in batch:
                                c = grp * cpg + chunk + lc
                                row, col = divmod(i, pooled_w)
                                assert np.isnan(out[n, c, row, col]), f"a window written twice: image {n} channel {c}"
                                out[n, c, row, col] = z[c][i]
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
    (2, 20, 5, 21, 23, (3, 3), 132),     # NHWC in vectors of 4 with a tile of 20 channels: 5 lanes, 51 rows
    (1, 300, 1, 6, 7, (2, 2), 132),      # a group of 300 channels: finalize's parameters in two chunks
]


def main():
    rng = np.random.default_rng(0)
    for n_img, channels, groups, conv_h, conv_w, pool, sms in PROBLEMS:
        conv = rng.normal(3.0, 2.0, (n_img, channels, conv_h, conv_w))
        bias = rng.normal(0, 5, channels)  # channel means apart, as a conv bias makes them
        gamma, beta = rng.normal(0, 1, channels), rng.normal(0, 1, channels)
        scale = rng.uniform(-2, 2, channels)
        ref = reference(conv + bias[:, None, None], groups, gamma, beta, scale, 1e-5, pool, -0.7, 0.9)
        for nhwc in (False, True):
            extremum, partials, tiling = pool_stats_from_conv(conv, bias, groups, gamma, scale, pool, sms, nhwc)
            out = finalize(extremum, partials, tiling, groups, gamma, beta, scale, 1e-5, -0.7, 0.9, sms)
            err = np.abs(out - ref).max()  # NaN where a window was never written
            splits = finalize_splits(n_img, groups, *extremum.shape[2:], sms)
            print(f"{'NHWC' if nhwc else 'NCHW'} {n_img}x{channels}x{conv_h}x{conv_w} groups {groups} pool {pool} "
                  f"sms {sms}: tiles x bands {tiling[0]} x {tiling[1]}, finalize splits {splits}, "
                  f"max |out - ref| {err:.1e}")
            assert err < 1e-9, err


if __name__ == "__main__":
    main()
