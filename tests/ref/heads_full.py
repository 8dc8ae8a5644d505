#!/usr/bin/env python3
"""tests/ref/heads_full.py - PyTorch (CPU, float64) reference for head-sampled-softmax's
catalog = all: torch.nn.functional.cross_entropy over every catalog item, with label
smoothing, sample weights, temperature and optional L2 normalization of query and item
rows. Checked by tests/test-heads-full.c.

Usage: heads_full.py INPUT OUTPUT

INPUT (little-endian): uint32 magic 0x46444847 ("GHDF"), uint32 version 1,
  int64 B, C, D, l2norm, float64 temperature, label_smoothing,
  float32 pred [B, D], cat [C, D], int64 target [B] (catalog index), float32 weights [B]
OUTPUT: float64 loss, float32 d_pred [B, D], d_cat [C, D]
"""
import struct
import sys

import torch
import torch.nn.functional as F


def read(f, fmt):
    return struct.unpack(fmt, f.read(struct.calcsize(fmt)))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: heads_full.py INPUT OUTPUT")
    with open(sys.argv[1], "rb") as f:
        magic, version = read(f, "<II")
        assert magic == 0x46444847 and version == 1
        B, C, D, l2norm = read(f, "<4q")
        temperature, eps = read(f, "<dd")
        pred = torch.tensor(read(f, "<%df" % (B * D)), dtype=torch.float64).reshape(B, D)
        cat = torch.tensor(read(f, "<%df" % (C * D)), dtype=torch.float64).reshape(C, D)
        target = torch.tensor(read(f, "<%dq" % B), dtype=torch.int64)
        weights = torch.tensor(read(f, "<%df" % B), dtype=torch.float64)
    u0 = pred.clone().requires_grad_()
    n0 = cat.clone().requires_grad_()
    u, n = u0, n0
    if l2norm:
        u = F.normalize(u, dim=1, eps=1e-12)
        n = F.normalize(n, dim=1, eps=1e-12)
    logits = u @ n.T / temperature
    per_row = F.cross_entropy(logits, target, reduction="none", label_smoothing=eps)
    loss = (weights * per_row).sum() / weights.sum()
    loss.backward()

    def f32(t):
        flat = t.detach().to(torch.float32).reshape(-1).tolist()
        return struct.pack("<%df" % len(flat), *flat)

    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<d", loss.item()))
        f.write(f32(u0.grad))
        f.write(f32(n0.grad))


if __name__ == "__main__":
    main()
