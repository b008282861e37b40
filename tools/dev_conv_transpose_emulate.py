"""CPU emulation of the conv_transpose CUDA kernel's index arithmetic (phases, bricks, tap offsets, tiling),
checked against F.conv_transpose3d in float64. Catches indexing mistakes without a GPU.

    python tools/dev_conv_transpose_emulate.py
"""
import itertools
import math
import random

import torch
import torch.nn.functional as F


def phase_dim(r, out, kernel, s, p, d, tap_step):
    if r >= out:
        return 0, 0, 0, 0
    q_count = (out - r + s - 1) // s
    for k in range(min(kernel, tap_step)):
        a = r + p - k * d
        if int(math.fmod(a, s)) == 0:  # C++ % semantics
            return q_count, k, (kernel - 1 - k) // tap_step + 1, int(a / s)
    return q_count, 0, 0, 0


def emulate(x, w, b, stride, padding, output_padding, groups, dilation, tile_log2, group_taps):
    n_, cin, *ins = x.shape
    cout_g, ks = w.shape[1], w.shape[2:]
    cin_g = cin // groups
    outs = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
            for i, k, s, p, op, d in zip(ins, ks, stride, padding, output_padding, dilation)]
    y = torch.full((n_, cout_g * groups, *outs), float("nan"), dtype=torch.float64)
    tap_step = [s // math.gcd(s, d) for s, d in zip(stride, dilation)]
    off_step = [d // math.gcd(s, d) for s, d in zip(stride, dilation)]
    tile = [1 << l for l in tile_log2]
    tiles = [-(-((o + s - 1) // s) // t) for o, s, t in zip(outs, stride, tile)]
    for n, g, *rt in itertools.product(range(n_), range(groups), *[range(s) for s in stride],
                                       *[range(t) for t in tiles]):
        r, ti = rt[:3], rt[3:]
        ph = [phase_dim(r[d], outs[d], ks[d], stride[d], padding[d], dilation[d], tap_step[d]) for d in range(3)]
        q0 = [ti[d] * tile[d] for d in range(3)]
        if any(q0[d] >= ph[d][0] for d in range(3)):
            continue
        acc = torch.zeros(cout_g, *tile, dtype=torch.float64)
        if all(ph[d][2] > 0 for d in range(3)):
            ranges = [range(0, ph[d][2], group_taps[d]) for d in range(3)]
            for j0 in itertools.product(*ranges):
                j1 = [min(j0[d] + group_taps[d], ph[d][2]) for d in range(3)]
                origin = [q0[d] + ph[d][3] - (j1[d] - 1) * off_step[d] for d in range(3)]
                extent = [tile[d] + (j1[d] - 1 - j0[d]) * off_step[d] for d in range(3)]
                brick = torch.zeros(cin_g, *extent, dtype=torch.float64)
                for z, yy, xx in itertools.product(*[range(e) for e in extent]):
                    i = [origin[0] + z, origin[1] + yy, origin[2] + xx]
                    if all(0 <= i[d] < ins[d] for d in range(3)):
                        brick[:, z, yy, xx] = x[n, g * cin_g:(g + 1) * cin_g, i[0], i[1], i[2]]
                for j in itertools.product(*[range(j0[d], j1[d]) for d in range(3)]):
                    off = [(j1[d] - 1 - j[d]) * off_step[d] for d in range(3)]
                    k = [ph[d][1] + j[d] * tap_step[d] for d in range(3)]
                    a = brick[:, off[0]:off[0] + tile[0], off[1]:off[1] + tile[1], off[2]:off[2] + tile[2]]
                    wt = w[g * cin_g:(g + 1) * cin_g, :, k[0], k[1], k[2]]  # (cin_g, cout_g)
                    acc += torch.einsum("cdhw,co->odhw", a, wt)
        for m in itertools.product(*[range(t) for t in tile]):
            q = [q0[d] + m[d] for d in range(3)]
            if any(q[d] >= ph[d][0] for d in range(3)):
                continue
            o = [q[d] * stride[d] + r[d] for d in range(3)]
            v = acc[:, m[0], m[1], m[2]]
            if b is not None:
                v = v + b[g * cout_g:(g + 1) * cout_g]
            y[n, g * cout_g:(g + 1) * cout_g, o[0], o[1], o[2]] = v
    return y


def main():
    rng = random.Random(0)
    worst = 0.0
    for trial in range(60):
        dims = 3
        ks = [rng.randint(1, 4) for _ in range(dims)]
        s = [rng.choice([1, 2, 3]) for _ in range(dims)]
        d = [rng.choice([1, 2, 3]) for _ in range(dims)]
        ins = [rng.randint(1, 5) for _ in range(dims)]
        if trial % 3 == 0:
            ins[0], ks[0], s[0], d[0] = 1, 1, 1, 1  # a 2-D call
        op = [rng.randint(0, max(a, c) - 1) for a, c in zip(s, d)]
        p = [min(rng.randint(0, 3), ((i - 1) * a + c * (k - 1) + o) // 2) for i, a, k, c, o in zip(ins, s, ks, d, op)]
        groups = rng.choice([1, 2])
        x = torch.randn(rng.randint(1, 2), 2 * groups, *ins, dtype=torch.float64)
        w = torch.randn(2 * groups, 3, *ks, dtype=torch.float64)
        b = torch.randn(3 * groups, dtype=torch.float64)
        tile_log2 = [rng.randint(0, 2) for _ in range(3)]
        group_taps = [rng.randint(1, 3) for _ in range(3)]
        got = emulate(x, w, b, s, p, op, groups, d, tile_log2, group_taps)
        want = F.conv_transpose3d(x, w, b, s, p, op, groups, d)
        err = (got - want).abs().max().item()
        worst = max(worst, err)
        assert err < 1e-9, (trial, ks, s, p, op, d, groups, tile_log2, group_taps, err)
    print(f"emulation matches F.conv_transpose3d on 60 random cases (max error {worst:.2e})")


if __name__ == "__main__":
    main()
