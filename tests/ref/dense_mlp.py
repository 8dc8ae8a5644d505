#!/usr/bin/env python3
"""tests/ref/dense_mlp.py - PyTorch (CPU, float64) reference for dense-mlp (2 linear
layers, relu between, no final activation) followed by head-sampled-softmax (fixed
shared negatives, in-batch negatives on, temperature, sample weights, masking of
negatives equal to a row's positive). Checked by tests/test-dense-mlp.c.

Usage: dense_mlp.py FIXTURE

Fixture layout (little-endian):
  uint32 magic 0x58464D47 ("GMFX"), uint32 version 1,
  int64 B, I, H, D, R, float64 temperature,
  float32 x [B, I], layer0.weight [H, I], layer0.bias [H], layer1.weight [D, H],
          layer1.bias [D], pos [B, D], neg [R, D],
  int64 pos_ids [B], neg_ids [R], float32 weights [B],
  float64 loss,
  float32 y [B, D], d_pred [B, D], d_x [B, I], d_layer0.weight, d_layer0.bias,
          d_layer1.weight, d_layer1.bias, d_pos [B, D], d_neg [R, D]
"""
import struct
import sys

import torch

MAGIC = 0x58464D47
VERSION = 1


def f32(t):
    """float32 bytes of a tensor, row-major."""
    flat = t.detach().to(torch.float32).reshape(-1).tolist()
    return struct.pack("<%df" % len(flat), *flat)


def i64(t):
    flat = t.reshape(-1).tolist()
    return struct.pack("<%dq" % len(flat), *flat)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: dense_mlp.py FIXTURE")
    g = torch.Generator().manual_seed(20240607)
    B, I, H, D, R = 6, 10, 16, 8, 5
    temperature = 0.5

    def rnd(*shape, scale=1.0):
        # float32 values, so the C side sees exactly what torch computes with
        return ((torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) * scale).float()

    x = rnd(B, I)
    w0, b0 = rnd(H, I, scale=0.6), rnd(H, scale=0.2)
    w1, b1 = rnd(D, H, scale=0.6), rnd(D, scale=0.2)
    pos, neg = rnd(B, D), rnd(R, D)
    pos_ids = torch.tensor([11, 12, 13, 11, 14, 15], dtype=torch.int64)   # rows 0, 3 share
    neg_ids = torch.tensor([20, 12, 21, 22, 15], dtype=torch.int64)       # 12, 15 are positives
    weights = torch.tensor([1.0, 0.5, 2.0, 1.0, 1.5, 0.25], dtype=torch.float32)

    leaves = [t.double().requires_grad_() for t in (x, w0, b0, w1, b1, pos, neg)]
    xd, w0d, b0d, w1d, b1d, posd, negd = leaves
    wd = weights.double()

    h = torch.relu(xd @ w0d.T + b0d)                  # [B, H]
    y = h @ w1d.T + b1d                               # [B, D]
    y.retain_grad()

    ninf = float("-inf")
    s_pos = (y * posd).sum(1, keepdim=True) / temperature            # [B, 1]
    s_neg = (y @ negd.T / temperature).masked_fill(
        neg_ids[None, :] == pos_ids[:, None], ninf)                  # [B, R]
    s_inb = (y @ posd.T / temperature).masked_fill(
        pos_ids[None, :] == pos_ids[:, None], ninf)                  # [B, B], diagonal too
    logits = torch.cat([s_pos, s_neg, s_inb], dim=1)
    per_row = -torch.log_softmax(logits, dim=1)[:, 0]
    loss = (wd * per_row).sum() / wd.sum()
    loss.backward()

    with open(sys.argv[1], "wb") as f:
        f.write(struct.pack("<II", MAGIC, VERSION))
        f.write(struct.pack("<qqqqqd", B, I, H, D, R, temperature))
        for t in (x, w0, b0, w1, b1, pos, neg):
            f.write(f32(t))
        f.write(i64(pos_ids))
        f.write(i64(neg_ids))
        f.write(f32(weights))
        f.write(struct.pack("<d", loss.item()))
        f.write(f32(y))
        f.write(f32(y.grad))
        f.write(f32(xd.grad))
        for t in (w0d, b0d, w1d, b1d):
            f.write(f32(t.grad))
        f.write(f32(posd.grad))
        f.write(f32(negd.grad))


if __name__ == "__main__":
    main()
