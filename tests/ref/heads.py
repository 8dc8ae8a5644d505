#!/usr/bin/env python3
"""tests/ref/heads.py - PyTorch (CPU, float64) reference for head-sampled-softmax, written
from the papers and the README: sampled softmax with shared negatives (Jean et al. 2015),
logQ correction log(R p_j) (Yi et al. 2019), in-batch negatives (with logQ: mixed negative
sampling, Yang et al. 2020, log((B - 1) p_data + R p_j) on both kinds), optional L2 normalization
of query and item rows (HSTU's cosine logits), and TurboGR §4.3.3 eq. 2 intra-batch logit
sharing (each row owns r = R / B negatives; after a token-level shuffle, rows at shuffled
positions [g k, (g+1) k) share their negatives). Checked by tests/test-heads.c.

Usage: heads.py INPUT OUTPUT

INPUT (little-endian): uint32 magic 0x49444847 ("GHDI"), uint32 version 1,
  int64 B, R, D, l2norm, in_batch, share_k, logq (0 none, 1 popularity catalog), ncat,
  float64 temperature, alpha, uint64 seed,
  float32 pred [B, D], pos [B, D], neg [R, D], int64 pos_ids [B], neg_ids [R],
  float32 weights [B], int64 cat_ids [ncat], cat_counts [ncat]
OUTPUT: float64 loss, float32 d_pred [B, D], d_pos [B, D], d_neg [R, D]

The shuffle (README): key = mix(seed ^ 0x9b05688c2b3e6c1f); key = mix(key ^ id) for each
negative id in order; key = mix(key ^ B); Fisher-Yates over 0..B-1 for i = B-1 .. 1 with
j = splitmix64(state) % (i + 1), state starting at key. mix = MurmurHash3 fmix64.
"""
import math
import struct
import sys

import torch

M64 = (1 << 64) - 1


def fmix64(x):
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M64
    x ^= x >> 33
    return x


class SplitMix:
    def __init__(self, state):
        self.state = state

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def shuffle(B, seed, neg_ids):
    key = fmix64(seed ^ 0x9B05688C2B3E6C1F)
    for i in neg_ids:
        key = fmix64(key ^ (i & M64))
    key = fmix64(key ^ B)
    perm = list(range(B))
    rng = SplitMix(key)
    for i in range(B - 1, 0, -1):
        j = rng.next() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def read(f, fmt):
    size = struct.calcsize(fmt)
    return struct.unpack(fmt, f.read(size))


def tensor_f32(f, n, shape):
    return torch.tensor(read(f, "<%df" % n), dtype=torch.float32).double().reshape(shape)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: heads.py INPUT OUTPUT")
    with open(sys.argv[1], "rb") as f:
        magic, version = read(f, "<II")
        assert magic == 0x49444847 and version == 1
        B, R, D, l2norm, in_batch, share_k, logq_mode, ncat = read(f, "<8q")
        temperature, alpha = read(f, "<dd")
        (seed,) = read(f, "<Q")
        pred = tensor_f32(f, B * D, (B, D))
        pos = tensor_f32(f, B * D, (B, D))
        neg = tensor_f32(f, R * D, (R, D))
        pos_ids = list(read(f, "<%dq" % B))
        neg_ids = list(read(f, "<%dq" % R))
        weights = torch.tensor(read(f, "<%df" % B), dtype=torch.float64)
        cat_ids = list(read(f, "<%dq" % ncat))
        cat_counts = list(read(f, "<%dq" % ncat))

    logq = torch.zeros(R, dtype=torch.float64)
    logq_ib = torch.zeros(B, dtype=torch.float64)
    if logq_mode == 1:
        # expected count of each slot in R draws with replacement: log(R p); with in-batch
        # negatives (mixed negative sampling) the expected count among a row's B - 1
        # in-batch positives (data popularity) and R draws: log((B - 1) p_data + R p)
        w = {i: c ** alpha for i, c in zip(cat_ids, cat_counts)}
        total = sum(w.values())
        ctot = sum(cat_counts)
        pd = {i: c / ctot for i, c in zip(cat_ids, cat_counts)}

        def q(i):
            if not in_batch:
                return R * w[i] / total
            return (B - 1) * pd.get(i, 1.0 / ctot) + R * w.get(i, 0.0) / total
        logq = torch.tensor([math.log(q(i)) for i in neg_ids], dtype=torch.float64)
        if in_batch:
            logq_ib = torch.tensor([math.log(q(i)) for i in pos_ids], dtype=torch.float64)

    leaves = [t.clone().requires_grad_() for t in (pred, pos, neg)]
    u, p, n = leaves
    if l2norm:
        u = torch.nn.functional.normalize(u, dim=1, eps=1e-12)
        p = torch.nn.functional.normalize(p, dim=1, eps=1e-12)
        n = torch.nn.functional.normalize(n, dim=1, eps=1e-12)
    tau = temperature
    per_row = []
    if share_k == 0:
        for b in range(B):
            row = [(u[b] * p[b]).sum() / tau]
            for j in range(R):
                if neg_ids[j] == pos_ids[b]:
                    continue
                row.append((u[b] * n[j]).sum() / tau - logq[j])
            if in_batch:
                for k in range(B):
                    if k != b and pos_ids[k] != pos_ids[b]:
                        row.append((u[b] * p[k]).sum() / tau - logq_ib[k])
            s = torch.stack(row)
            per_row.append(torch.logsumexp(s, 0) - s[0])
    else:
        r = R // B
        perm = shuffle(B, seed, neg_ids)
        group_of = {}
        for q, i in enumerate(perm):
            group_of[i] = q // share_k
        for i in range(B):
            g = group_of[i]
            members = perm[g * share_k:(g + 1) * share_k]
            row = [(u[i] * p[i]).sum() / tau]
            for m in members:                    # own negatives and the Delta of eq. 2
                for j in range(m * r, (m + 1) * r):
                    if neg_ids[j] == pos_ids[i]:
                        continue
                    row.append((u[i] * n[j]).sum() / tau - logq[j])
            s = torch.stack(row)
            per_row.append(torch.logsumexp(s, 0) - s[0])
    losses = torch.stack(per_row)
    loss = (weights * losses).sum() / weights.sum()
    loss.backward()

    def f32(t):
        flat = t.detach().to(torch.float32).reshape(-1).tolist()
        return struct.pack("<%df" % len(flat), *flat)

    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<d", loss.item()))
        f.write(f32(leaves[0].grad))
        f.write(f32(leaves[1].grad))
        f.write(f32(leaves[2].grad if R > 0 else torch.zeros(0)))


if __name__ == "__main__":
    main()
