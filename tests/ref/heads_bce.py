#!/usr/bin/env python3
"""tests/ref/heads_bce.py - PyTorch (CPU, float64) reference for head-sampled-softmax with
loss = bce: SASRec's sampled binary cross-entropy (Kang & McAuley 2018, §III-E), written from
the paper and the README, with torch.nn.functional.binary_cross_entropy_with_logits doing
the arithmetic. For row b with query u_b the logits are u_b . pos_b / T (label 1) and
u_b . neg_j / T (label 0) for every negative j of the row: all R (r = 0, shared) or
j in [b r, (b+1) r) (r >= 1, own; slots past B r belong to no row). A negative whose id is
the row's positive id is left out. loss_b is the sum of the row's BCE terms, the loss their
mean weighted by the sample weights. Optional L2 normalization of query and item rows.
Checked by tests/test-heads.c.

Usage: heads_bce.py INPUT OUTPUT

INPUT (little-endian): uint32 magic 0x45434248 ("HBCE"), uint32 version 1,
  int64 B, R, D, l2norm, r, float64 temperature,
  float32 pred [B, D], pos [B, D], neg [R, D], int64 pos_ids [B], neg_ids [R],
  float32 weights [B]
OUTPUT: float64 loss, float32 d_pred [B, D], d_pos [B, D], d_neg [R, D]
"""
import struct
import sys

import torch
import torch.nn.functional as F

from heads import read, tensor_f32   # tests/ref/heads.py, beside this file


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: heads_bce.py INPUT OUTPUT")
    with open(sys.argv[1], "rb") as f:
        magic, version = read(f, "<II")
        assert magic == 0x45434248 and version == 1
        B, R, D, l2norm, r = read(f, "<5q")
        (temperature,) = read(f, "<d")
        pred = tensor_f32(f, B * D, (B, D))
        pos = tensor_f32(f, B * D, (B, D))
        neg = tensor_f32(f, R * D, (R, D))
        pos_ids = list(read(f, "<%dq" % B))
        neg_ids = list(read(f, "<%dq" % R))
        weights = torch.tensor(read(f, "<%df" % B), dtype=torch.float64)
    assert r == 0 or R >= B * r

    leaves = [t.clone().requires_grad_() for t in (pred, pos, neg)]
    u, p, n = leaves
    if l2norm:
        u = F.normalize(u, dim=1, eps=1e-12)
        p = F.normalize(p, dim=1, eps=1e-12)
        n = F.normalize(n, dim=1, eps=1e-12)
    per_row = []
    for b in range(B):
        own = range(R) if r == 0 else range(b * r, (b + 1) * r)
        js = [j for j in own if neg_ids[j] != pos_ids[b]]
        logits = [(u[b] * p[b]).sum() / temperature]
        logits += [(u[b] * n[j]).sum() / temperature for j in js]
        labels = torch.zeros(len(logits), dtype=torch.float64)
        labels[0] = 1.0
        per_row.append(F.binary_cross_entropy_with_logits(torch.stack(logits), labels,
                                                          reduction="sum"))
    losses = torch.stack(per_row)
    loss = (weights * losses).sum() / weights.sum()
    loss.backward()

    def f32(t):
        flat = t.detach().to(torch.float32).reshape(-1).tolist()
        return struct.pack("<%df" % len(flat), *flat)

    def grad(leaf):
        return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)

    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<d", loss.item()))
        f.write(f32(grad(leaves[0])))
        f.write(f32(grad(leaves[1])))
        f.write(f32(grad(leaves[2])))


if __name__ == "__main__":
    main()
