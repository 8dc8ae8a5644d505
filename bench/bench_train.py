#!/usr/bin/env python3
"""bench/bench_train.py - end-to-end training throughput of grmhost against PyTorch.

Both sides train the quick-start model on the same generated data (grmhost generate
--seed 1): two mean-pooled views of the item history (last 50 and last 3 items) from one
64-d item table -> MLP 128-256-64 -> sampled softmax over 512 uniform negatives plus
in-batch negatives; batch 256; Adam on dense parameters, sparse Adam on embedding rows;
the same number of threads. PyTorch uses EmbeddingBag(mode='mean', sparse=True) with
SparseAdam, the idiomatic sparse peer. Throughput is samples/s over the same steps after
a warm-up; evaluation is excluded on both sides, and the PyTorch batches are built before
its timer starts (grm's figure includes its batch building).

Prints one key=value line per case (DESIGN.md §8), then a small table.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def grm_run(grmhost, data, steps, threads, tmp):
    ini = os.path.join(tmp, "bench.ini")
    with open(ini, "w") as f:
        f.write(f"""[pipeline]
name = bench
threads = {threads}
[reader]
plugin = reader-text
path = {data}
header = true
columns = user:i64,item:i64,ts:i64
[transform.seq]
plugin = transform-basic
sequence_by = user
sequence_order = ts
sequence_columns = item
[feature.history]
source = item
table = item
dim = 64
window = 50
[feature.recent]
source = item
table = item
dim = 64
window = 3
[dense.0]
plugin = dense-mlp
dims = 256,64
[head]
plugin = head-sampled-softmax
negatives = 512
in_batch = true
[train]
batch_size = 256
steps = {steps}
log_every = {steps}
eval_every = 1000000000
eval_batch = 64
""")
    metrics = os.path.join(tmp, "m.jsonl")
    out = subprocess.run([grmhost, "train", "--fresh", "--metrics-out", metrics, ini],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("grmhost failed:\n" + out.stderr)
    sps = None
    with open(metrics) as f:
        for line in f:
            m = json.loads(line)
            if m["split"] == "train" and m["name"] == "samples_per_s":
                sps = m["value"]
    return sps


def torch_run(data, steps, threads, warmup):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    seqs = {}
    with open(data) as f:
        next(f)
        for line in f:
            u, i, t = line.split("\t")
            seqs.setdefault(int(u), []).append((int(t), int(i)))
    examples = []   # (history list, target) with leave-one-out: train on items[:-2]
    n_items = 0
    for u in sorted(seqs):
        items = [i for _, i in sorted(seqs[u], key=lambda x: x[0])]
        n_items = max(n_items, max(items))
        train = items[:-2] if len(items) >= 3 else items
        for t in range(1, len(train)):
            examples.append((train[max(0, t - 50):t], train[t]))
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(len(examples), generator=g).tolist()
    D, R, B = 64, 512, 256
    emb = torch.nn.EmbeddingBag(n_items + 1, D, mode="mean", sparse=True)
    torch.nn.init.normal_(emb.weight, 0, 0.05)
    mlp = torch.nn.Sequential(torch.nn.Linear(2 * D, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, D))
    opt_s = torch.optim.SparseAdam(list(emb.parameters()), lr=1e-3)
    opt_d = torch.optim.Adam(mlp.parameters(), lr=1e-3)
    tgt_emb = emb.weight   # tied item table, as in grm

    def batch(k):
        idx = [perm[(k * B + j) % len(perm)] for j in range(B)]
        long_ids, long_off, short_ids, short_off, pos = [], [], [], [], []
        for e in idx:
            h, tg = examples[e]
            long_off.append(len(long_ids))
            long_ids.extend(h)
            short_off.append(len(short_ids))
            short_ids.extend(h[-3:])
            pos.append(tg)
        return (torch.tensor(long_ids), torch.tensor(long_off), torch.tensor(short_ids),
                torch.tensor(short_off), torch.tensor(pos))

    # batches are built before timing: the peer is timed on model work alone, while grm's
    # figure includes its own batch building (a conservative comparison for grm)
    batches = [batch(k) for k in range(warmup + steps)]

    def step(k):
        li, lo, si, so, pos = batches[k]
        u = mlp(torch.cat([emb(li, lo), emb(si, so)], 1))
        neg = torch.randint(1, n_items + 1, (R,))
        cand = torch.cat([pos, neg])
        rows = torch.nn.functional.embedding(cand, tgt_emb, sparse=True)
        logits = u @ rows.t()                             # [B, B + R]: in-batch + sampled
        same = cand.unsqueeze(0) == pos.unsqueeze(1)
        same[torch.arange(B), torch.arange(B)] = False    # keep each row's own positive
        logits = logits.masked_fill(same, float("-inf"))
        loss = torch.nn.functional.cross_entropy(logits, torch.arange(B))
        opt_s.zero_grad()
        opt_d.zero_grad()
        loss.backward()
        opt_s.step()
        opt_d.step()
        return loss.item()

    for k in range(warmup):
        step(k)
    t0 = time.perf_counter()
    for k in range(warmup, warmup + steps):
        step(k)
    return steps * B / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grmhost", default="./grmhost")
    ap.add_argument("--build", default=".", help="build directory (unused here)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.tsv")
        subprocess.run([args.grmhost, "generate", "--seed", "1", "--out", data], check=True)
        grm = grm_run(args.grmhost, data, args.steps, args.threads, tmp)
        try:
            peer = torch_run(data, args.steps, args.threads, warmup=10)
        except ImportError:
            print(f"bench=train case=quickstart grm_samples_per_s={grm:.0f} peer=torch "
                  "peer_samples_per_s=nan ratio=nan # torch not available")
            return
    print(f"bench=train case=quickstart threads={args.threads} steps={args.steps} "
          f"grm_samples_per_s={grm:.0f} peer=torch peer_samples_per_s={peer:.0f} "
          f"ratio={grm / peer:.2f}")
    print(f"\n  {'':10} {'samples/s':>10}\n  {'grm':10} {grm:10.0f}\n  {'torch':10} {peer:10.0f}")


if __name__ == "__main__":
    main()
