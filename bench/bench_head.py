#!/usr/bin/env python3
"""bench/bench_head.py - head-sampled-softmax's loss (training: loss, the queries' and the
item rows' gradients) against the same loss in PyTorch, same machine, same thread count.

Cases (shapes of a real step):
  tok    per-token negatives (share_k = 1): ml100k-hstu's step, B = 1364 tokens, each
         against its own r = 128 of N = 1682 items, D = 50, L2-normalized rows, T = 0.05.
         grm: the rows read in place (plugins/head-sampled-softmax/heads_tok.c); peer: the
         way the reference HSTU code computes it, the negatives' rows gathered per token
         into [B, r, D], bmm against the queries, logsumexp, autograd.
  tok4   the same with TurboGR's logit sharing, share_k = 4 (eq. 2): each token against the
         4 r = 512 negatives of its group (a token-level shuffle; the peer groups tokens in
         order, the same work). grm: one tile of the group's rows, three sgemm.
  full   catalog = all: a Beauty SASRec step, B = 717 tokens against all N = 12101 items,
         D = 64. grm: blocks of items with a running log-sum-exp (heads_full.c); peer:
         logits = U E^T and torch.nn.functional.cross_entropy, autograd.
Rounds alternate grm and the peer (--rounds, each the median of --reps calls); the median
round is printed with the spread (max - min) / median of the rounds. mfu = useful flops
(tok: 6 B k r D; full: 6 B N D) / time / the SGEMM peak measured in the same run
(bench/bench-hstu --sgemm). Prints `bench=head case=... grm_ms=.. peer=torch peer_ms=..
ratio=.. mfu=..` (ratio = peer_ms / grm_ms, > 1: grm is faster).
"""
import argparse
import os
import re
import subprocess
import sys

from timing import median_ms

CASES = {
    "tok": dict(rows=1364, items=1682, dim=50, r=128, k=1),
    "tok4": dict(rows=1364, items=1682, dim=50, r=128, k=4),
    "full": dict(rows=717, items=12101, dim=64, r=0, k=1),
}


def run(exe, args, build):
    env = dict(os.environ, GRM_TOP_BUILDDIR=build, OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    out = subprocess.run([exe] + args, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit("%s failed: %s" % (exe, out.stderr))
    return dict(re.findall(r"(\w+)=([^\s]+)", out.stdout))


def torch_step(torch, case, c):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(3)
    B, N, D, r, k = c["rows"], c["items"], c["dim"], c["r"], c["k"]
    u = torch.randn(B, D, generator=g).requires_grad_()
    table = (torch.randn(N, D, generator=g) * 0.1).requires_grad_()
    tgt = torch.randint(0, N, (B,), generator=g)
    if case.startswith("tok"):
        # token b's negatives: those of its group of k tokens (in order), [B, k r]
        own = torch.randint(0, N, (B, r), generator=g)
        assert B % k == 0, "rows must be a multiple of k"
        neg = own.view(B // k, k * r).repeat_interleave(k, dim=0)
        mask = neg == tgt[:, None]

        def step():
            u.grad = None
            table.grad = None
            un = F.normalize(u, dim=1)
            tn = F.normalize(table, dim=1)
            pos = (un * tn[tgt]).sum(1) / 0.05
            nl = torch.bmm(tn[neg], un.unsqueeze(2)).squeeze(2) / 0.05
            nl = nl.masked_fill(mask, float("-inf"))
            loss = (torch.logsumexp(torch.cat([pos[:, None], nl], 1), 1) - pos).mean()
            loss.backward()
        return step

    def step():
        u.grad = None
        table.grad = None
        F.cross_entropy(u @ table.T, tgt).backward()
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--grmhost", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("bench=head skipped=1 reason=no-torch")
        return 0
    torch.set_num_threads(args.threads)
    drv = os.path.join(args.build, "bench", "bench-head")
    peak = float(run(os.path.join(args.build, "bench", "bench-hstu"),
                     ["--sgemm", "--threads", str(args.threads)], args.build)["sgemm_gflops"])
    rows = []
    for case, c in CASES.items():
        step = torch_step(torch, case, c)
        gt, pt, flops = [], [], 0.0
        for _ in range(args.rounds):
            o = run(drv, ["--" + case.rstrip("0123456789"), "--threads", str(args.threads),
                          "--rows", str(c["rows"]), "--items", str(c["items"]), "--dim", str(c["dim"]),
                          "--r", str(max(c["r"], 1)), "--k", str(c["k"]), "--reps",
                          str(args.reps)], args.build)
            gt.append(float(o["grm_ms"]))
            flops = float(o["flops"])
            pt.append(median_ms(step, args.reps))
        gm, pm = sorted(gt)[len(gt) // 2], sorted(pt)[len(pt) // 2]
        gs, ps = (max(gt) - min(gt)) / gm, (max(pt) - min(pt)) / pm
        mfu = flops / (gm * 1e6) / peak
        print("bench=head case=%s rows=%d items=%d dim=%d r=%d k=%d threads=%d grm_ms=%.2f "
              "grm_spread=%.2f peer=torch-%s peer_ms=%.2f peer_spread=%.2f ratio=%.2f "
              "mfu=%.3f sgemm_gflops=%.1f" % (case, c["rows"], c["items"], c["dim"], c["r"],
                                               c["k"], args.threads, gm, gs,
                                               torch.__version__, pm, ps, pm / gm, mfu, peak))
        rows.append((case, gm, pm, pm / gm, mfu))
    print("# %-5s %9s %9s %6s %5s" % ("case", "grm ms", "torch ms", "ratio", "mfu"))
    for case, gm, pm, ratio, mfu in rows:
        print("# %-5s %9.2f %9.2f %6.2f %5.3f" % (case, gm, pm, ratio, mfu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
