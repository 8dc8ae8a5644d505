#!/usr/bin/env python3
"""tests/ref/hstu.py - PyTorch reference of the HSTU layer for tests/test-dense-hstu.c.

Written from the papers, independently of the C code: MTGRBoost §2 eq. 1-3 (Zhai et al.
2024's HSTU layer) with the relative attention bias of TurboGR §4.1.1 / App. A, as
documented in plugins/dense-hstu/README.md:

    xn         = LN(x)                  (layer norm without affine, eps 1e-6; optional)
    U, V, Q, K = split(SiLU(xn W1^T + b1))
    s_ij       = q_i . k_j + rab_pos[h, min(i - j, max_len - 1)]
                 + rab_time[h, min(floor(ln(max(|t_i - t_j|, 1)) / 0.301), buckets - 1)]
    O_i        = sum_{j <= i} SiLU(s_ij) / n v_j      (n = max_len, or the length L)
    y          = x + (LN(O) * U) W2^T + b2

Everything in float64 on padded per-sequence tensors (no tiling, no jagged tricks);
gradients by autograd of loss = sum(y * dy). Writes one binary fixture:

    u32 magic 0x55545348 ("HSTU"), u32 version 1, i64 ncases, then per case
    i64[16] header: D H dqk dv rab_pos rab_time max_len buckets input_norm attn_norm
                    nseq N has_times nparams 0 0   (attn_norm: 0 max_len, 1 length)
    i64 offsets[nseq+1], i64 times[N] (if has_times),
    f32 x[N*D], theta[nparams], dy[N*D], y[N*D], dx[N*D], dtheta[nparams]

theta is the parameters in the block's params() order: f1.weight [P, D], f1.bias [P],
f2.weight [D, H*dv], f2.bias [D], rab_pos [H, max_len] (if on), rab_time [H, buckets]
(if on). Usage: hstu.py OUTPUT
"""
import math
import struct
import sys

import torch

MAGIC = 0x55545348
VERSION = 1
EPS = 1e-6
LOG_STEP = 0.301


def time_bucket(dt, buckets):
    # math.log is the C library's log, as the plugin's: equal buckets at the edges
    b = math.floor(math.log(max(abs(dt), 1)) / LOG_STEP)
    return min(b, buckets - 1)


def layer_norm(t):
    return torch.nn.functional.layer_norm(t, (t.shape[-1],), eps=EPS)


def hstu(x, theta, cfg, offsets, times):
    D, H, dqk, dv = cfg["D"], cfg["H"], cfg["dqk"], cfg["dv"]
    HV = H * dv
    W1, b1, W2, b2 = theta["f1.weight"], theta["f1.bias"], theta["f2.weight"], theta["f2.bias"]
    xn = layer_norm(x) if cfg["input_norm"] else x
    h = torch.nn.functional.silu(xn @ W1.T + b1)                      # eq. 1
    u, v, q, k = torch.split(h, [HV, HV, H * dqk, H * dqk], dim=1)
    outs = []
    for s in range(len(offsets) - 1):                                  # eq. 2, per sequence
        o, e = offsets[s], offsets[s + 1]
        L = e - o
        if L == 0:
            continue
        qs = q[o:e].reshape(L, H, dqk).transpose(0, 1)                # [H, L, dqk]
        ks = k[o:e].reshape(L, H, dqk).transpose(0, 1)
        vs = v[o:e].reshape(L, H, dv).transpose(0, 1)                 # [H, L, dv]
        S = qs @ ks.transpose(1, 2)                                   # [H, L, L]
        i = torch.arange(L).view(L, 1)
        j = torch.arange(L).view(1, L)
        if cfg["rab_pos"]:
            S = S + theta["rab_pos"][:, (i - j).clamp(0, cfg["max_len"] - 1)]
        if cfg["rab_time"] and times is not None:
            ts = times[o:e]
            idx = torch.tensor([[time_bucket(ts[a] - ts[b], cfg["buckets"]) for b in range(L)]
                                for a in range(L)], dtype=torch.long)
            S = S + theta["rab_time"][:, idx]
        n = cfg["max_len"] if cfg["attn_norm"] == 0 else L
        A = torch.nn.functional.silu(S) / n * (j <= i).to(S.dtype)
        outs.append((A @ vs).transpose(0, 1).reshape(L, HV))
    O = torch.cat(outs, 0)
    return x + (layer_norm(O) * u) @ W2.T + b2                        # eq. 3 + residual


def make_case(gen, cfg, lengths, with_times):
    D, H, dqk, dv = cfg["D"], cfg["H"], cfg["dqk"], cfg["dv"]
    P, HV = H * (2 * dv + 2 * dqk), H * dv
    offsets = [0]
    for L in lengths:
        offsets.append(offsets[-1] + L)
    N = offsets[-1]
    times = None
    if with_times:
        times = []
        for L in lengths:
            t = 1_700_000_000 + int(torch.randint(0, 10**6, (1,), generator=gen))
            for _ in range(L):
                times.append(t)
                # gaps spread over decades: 0 s to about a day
                t += int(math.exp(float(torch.rand(1, generator=gen)) * 11.5)) - 1
    shapes = [("f1.weight", (P, D), 1 / math.sqrt(D)), ("f1.bias", (P,), 0.1),
              ("f2.weight", (D, HV), 1 / math.sqrt(HV)), ("f2.bias", (D,), 0.1)]
    if cfg["rab_pos"]:
        shapes.append(("rab_pos", (H, cfg["max_len"]), 1.0))
    if cfg["rab_time"]:
        shapes.append(("rab_time", (H, cfg["buckets"]), 1.0))
    theta = {}
    for name, shape, scale in shapes:
        theta[name] = (torch.randn(shape, generator=gen) * scale).float().double()
        theta[name].requires_grad_(True)
    x = torch.randn((N, D), generator=gen).float().double().requires_grad_(True)
    dy = torch.randn((N, D), generator=gen).float().double()
    y = hstu(x, theta, cfg, offsets, times)
    (y * dy).sum().backward()
    flat = torch.cat([theta[n].detach().reshape(-1) for n, _, _ in shapes])
    # a table that took no part (rab_time without timestamps) has a zero gradient
    dflat = torch.cat([(theta[n].grad if theta[n].grad is not None
                        else torch.zeros_like(theta[n])).reshape(-1) for n, _, _ in shapes])
    return dict(cfg=cfg, offsets=offsets, times=times, x=x.detach(), theta=flat, dy=dy,
                y=y.detach(), dx=x.grad, dtheta=dflat)


def f32(t):
    return t.reshape(-1).float().numpy().tobytes()


def main():
    out = sys.argv[1]
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20240607)

    def cfg(**kw):
        base = dict(D=16, H=2, dqk=8, dv=6, rab_pos=1, rab_time=1, max_len=64, buckets=8,
                    input_norm=1, attn_norm=0)
        base.update(kw)
        return base

    cases = [
        make_case(gen, cfg(), [1, 300, 5, 17, 1, 64], True),
        make_case(gen, cfg(rab_pos=0, rab_time=0, input_norm=0, attn_norm=1), [3, 1, 100],
                  False),
        make_case(gen, cfg(rab_time=0, H=3, dqk=4, dv=5), [300, 2], False),
        make_case(gen, cfg(rab_pos=0, buckets=12, attn_norm=1), [1, 40, 130], True),
        make_case(gen, cfg(max_len=16), [20, 7], False),   # rab_time on, no timestamps
    ]
    with open(out, "wb") as f:
        f.write(struct.pack("<IIq", MAGIC, VERSION, len(cases)))
        for c in cases:
            g = c["cfg"]
            N = c["offsets"][-1]
            hdr = [g["D"], g["H"], g["dqk"], g["dv"], g["rab_pos"], g["rab_time"],
                   g["max_len"], g["buckets"], g["input_norm"], g["attn_norm"],
                   len(c["offsets"]) - 1, N, 1 if c["times"] is not None else 0,
                   c["theta"].numel(), 0, 0]
            f.write(struct.pack("<16q", *hdr))
            f.write(struct.pack("<%dq" % len(c["offsets"]), *c["offsets"]))
            if c["times"] is not None:
                f.write(struct.pack("<%dq" % N, *c["times"]))
            for key in ("x", "theta", "dy", "y", "dx", "dtheta"):
                f.write(f32(c[key]))


if __name__ == "__main__":
    main()
