#!/usr/bin/env python3
"""tests/ref/mmoe.py - PyTorch (CPU, float64) reference for dense-mmoe followed by head-bce,
written from the papers: MTGRBoost §2 eq. 4 (y = sum over the top-k experts of
g_i(H) Expert_i(H)) and Ma et al. 2018 (one softmax gate and one tower per task).

  expert_e(x): Linear -> act -> Linear -> act ... (act after every layer)
  gate_t(x)  : q = W_t x + b_t; keep the k largest q (ties: lower expert index), softmax
               over them, exactly 0 elsewhere
  mixed_t    : sum_e g_te expert_e(x)
  tower_t    : Linear -> act ... -> Linear(., 1) (no act on the last layer) -> y[:, t]
  loss       : BCE with logits, summed over tasks, mean over rows

Checked by tests/test-dense-mmoe.c.

Usage: mmoe.py FIXTURE TOP_K ACT    (ACT: relu or silu; TOP_K 0 = all experts)

Fixture layout (little-endian):
  uint32 magic 0x454F4D4D ("MMOE"), uint32 version 1,
  int64 B, I, E, T, K, act (0 relu, 1 silu), nE, nT, expert_dims [nE], tower_dims [nT],
  float32 params (in dense-mmoe's params() order: expert e layer l weight, bias ...; gate t
          weight, bias; tower t layer l weight, bias ...), x [B, I], labels [B, T],
  float64 loss,
  float32 y [B, T], dy [B, T], dx [B, I], dparams (same order as params)
"""
import struct
import sys

import torch

MAGIC = 0x454F4D4D
VERSION = 1


def f32(t):
    flat = t.detach().to(torch.float32).reshape(-1).tolist()
    return struct.pack("<%df" % len(flat), *flat)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: mmoe.py FIXTURE TOP_K ACT")
    path, K, act_name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    g = torch.Generator().manual_seed(4242 + K)
    B, I, E, T = 7, 6, 4, 3
    expert_dims, tower_dims = [8, 5], [4, 1]
    k = K if K > 0 else E
    act = torch.relu if act_name == "relu" else torch.nn.functional.silu

    def rnd(*shape, scale=1.0):
        return ((torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) * scale).float()

    # parameters, in params() order
    params = []

    def linear(i, o):
        w, b = rnd(o, i, scale=0.8), rnd(o, scale=0.3)
        params.extend([w, b])

    for _ in range(E):
        prev = I
        for d in expert_dims:
            linear(prev, d)
            prev = d
    for _ in range(T):
        # gate weights a bit larger, so the gate logits are well separated
        params.extend([rnd(E, I, scale=2.0), rnd(E, scale=0.5)])
    He = expert_dims[-1]
    for _ in range(T):
        prev = He
        for d in tower_dims:
            linear(prev, d)
            prev = d
    x = rnd(B, I)
    labels = (torch.rand(B, T, generator=g) < 0.5).float()

    leaves = [p.double().requires_grad_() for p in params]
    xd = x.double().requires_grad_()
    it = iter(leaves)

    def mlp(inp, n, last_act):
        h = inp
        for layer in range(n):
            w, b = next(it), next(it)
            h = h @ w.T + b
            if layer < n - 1 or last_act:
                h = act(h)
        return h

    experts = [mlp(xd, len(expert_dims), True) for _ in range(E)]     # E x [B, He]
    stacked = torch.stack(experts, dim=1)                                # [B, E, He]
    gates = []
    for _ in range(T):
        w, b = next(it), next(it)
        q = xd @ w.T + b                                                 # [B, E]
        keep = torch.zeros(B, E, dtype=torch.bool)
        for r in range(B):
            order = sorted(range(E), key=lambda e: (-q[r, e].item(), e))
            for e in order[:k]:
                keep[r, e] = True
        gates.append(torch.softmax(q.masked_fill(~keep, float("-inf")), dim=1))
    cols = []
    for t in range(T):
        mixed = (gates[t][:, :, None] * stacked).sum(1)                  # [B, He]
        cols.append(mlp(mixed, len(tower_dims), False))                  # [B, 1]
    y = torch.cat(cols, dim=1)                                           # [B, T]
    y.retain_grad()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(
        y, labels.double(), reduction="sum") / B
    loss.backward()

    with open(path, "wb") as f:
        f.write(struct.pack("<II", MAGIC, VERSION))
        f.write(struct.pack("<8q", B, I, E, T, K, 0 if act_name == "relu" else 1,
                            len(expert_dims), len(tower_dims)))
        f.write(struct.pack("<%dq" % len(expert_dims), *expert_dims))
        f.write(struct.pack("<%dq" % len(tower_dims), *tower_dims))
        for p in params:
            f.write(f32(p))
        f.write(f32(x))
        f.write(f32(labels))
        f.write(struct.pack("<d", loss.item()))
        f.write(f32(y))
        f.write(f32(y.grad))
        f.write(f32(xd.grad))
        for p in leaves:
            f.write(f32(p.grad))


if __name__ == "__main__":
    main()
