#!/usr/bin/env python3
"""bench/bench_sparse.py - the RecIS Table 1 operator set (RecIS §3.1) of core/sparse.c on CPU
against PyTorch CPU, same data, same thread count.

bench/bench-sparse (the C driver) measures the memory bandwidth with a STREAM triad, times
grm's operators and writes the input streams it used; this script times PyTorch on those
streams and prints, per case,
  bench=sparse case=gather dist=zipf dim=64 grm_ms=.. peer=torch peer_ms=.. ratio=.. mbu=..
ratio = peer_ms / grm_ms (> 1: grm faster); mbu = useful bytes / grm time / triad bandwidth,
peer_mbu the same for PyTorch. Useful bytes count each access once, as RecIS's MBU does:
gather = ids + rows read + output written (8 + 2 * 4D bytes per id); scatter = ids + src read
+ the row read and written back (8 + 3 * 4D). The bandwidth is the best STREAM triad of the
run with cached and with streaming stores (bench-sparse.c says why). Repeated (Zipf-hot) rows
are counted on every access though they come from cache, so Zipf MBU can pass 100%: read the
uniform stream beside it for the DRAM-bound figure.

PyTorch peers: gather = index_select; scatter = index_add_; unique = torch.unique(
return_inverse=True); ids partition = unique + destination rank (the same MurmurHash3
fmix64 % ranks, computed with int64 torch ops) + stable argsort + bincount; reduce =
F.embedding_bag(mode sum/mean) with offsets (fused gather + reduce, as grm); sequence tile =
the index arithmetic + gather + padding mask torch needs (no tile operator); bucketize =
torch.bucketize(right=True); mod = torch.remainder.

The reduce cases also run against fbgemm_gpu's table-batched embedding (TBE,
SplitTableBatchedEmbeddingBagsCodegen on the CPU, the kernel TorchRec's fused
EmbeddingBagCollection calls) when fbgemm_gpu imports (bench/setup-venv.sh --hstu-ref), with
the same table, ids and offsets: a second line per case with peer=fbgemm-tbe; its output is
checked against F.embedding_bag's first.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

from timing import median_ms

ROWS = 1 << 20
RANKS = 8


def fmix64(x, torch):
    """MurmurHash3 fmix64 on int64 tensors (two's complement wrap-around = uint64 math)."""
    def srl(v, k):  # logical shift right
        return (v >> k) & ((1 << (64 - k)) - 1)
    c1 = -49064778989728563     # 0xff51afd7ed558ccd as int64
    c2 = -4265267296055464877   # 0xc4ceb9fe1a85ec53 as int64
    x = x ^ srl(x, 33)
    x = x * c1
    x = x ^ srl(x, 33)
    x = x * c2
    x = x ^ srl(x, 33)
    return x


def tbe_peer(torch):
    """A constructor of fbgemm_gpu TBE modules on the CPU (rows, dim, 'sum'|'mean'), or None
    when fbgemm_gpu does not import."""
    try:
        import fbgemm_gpu  # noqa: F401
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
            EmbeddingLocation, PoolingMode)
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen)
    except Exception as e:  # ImportError, or an op library built for another torch
        print(f"# bench_sparse: no fbgemm TBE peer ({type(e).__name__}: {e})")
        return None
    print(f"# bench_sparse: fbgemm_gpu {getattr(fbgemm_gpu, '__version__', '?')} TBE peer, "
          f"torch {torch.__version__}")

    def make(rows, dim, mode):
        pm = PoolingMode.SUM if mode == "sum" else PoolingMode.MEAN
        return SplitTableBatchedEmbeddingBagsCodegen(
            [(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)], pooling_mode=pm)
    return make


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grmhost", default=None)
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    driver = os.path.join(args.build, "bench", "bench-sparse")
    if not os.path.exists(driver):
        sys.exit(f"bench_sparse: {driver} not built; run `make bench` (or make bench/bench-sparse)")
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"# bench_sparse: SKIP, no torch/numpy for {sys.executable}: {e}")
        return 0
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="grm-bench-sparse-") as tmp:
        out = subprocess.run([driver, "--dir", tmp, "--threads", str(args.threads),
                              "--reps", str(args.reps)], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("bench-sparse failed:\n" + out.stderr)
        triad = None
        cases = []
        for line in out.stdout.splitlines():
            if line.startswith("#"):
                print(line)
                continue
            kv = dict(re.findall(r"(\w+)=(\S+)", line))
            if "triad_gbs" in kv:   # measured first and last: keep the best
                triad = max(triad or 0.0, float(kv["triad_gbs"]))
            elif "case" in kv:
                cases.append(kv)

        def load(name, dtype):
            return torch.from_numpy(np.fromfile(os.path.join(tmp, name + ".bin"), dtype=dtype))

        ids = {d: load("ids_" + d, np.int64) for d in ("zipf", "uniform", "distinct")}
        offs = {k: load("off_" + k, np.int64) for k in ("easy", "hard")}
        bvals, bnds = load("bucket_values", np.float32), load("bucket_bounds", np.float64)

        tables = {}

        def table(dim):
            if dim not in tables:
                tables.clear()
                tables[dim] = torch.rand(ROWS, dim)
            return tables[dim]

        def peer(c):
            name, dist, dim = c["case"], c["dist"], int(c["dim"])
            x = ids.get(dist)
            if name == "gather":
                t = table(dim)
                return median_ms(lambda: torch.index_select(t, 0, x), args.reps)
            if name == "scatter":
                t = table(dim)
                src = torch.full((x.numel(), dim), 1e-3)
                return median_ms(lambda: t.index_add_(0, x, src), args.reps)
            if name == "unique":
                return median_ms(lambda: torch.unique(x, return_inverse=True), args.reps)
            if name == "ids_partition":
                def run():
                    u, inv = torch.unique(x, return_inverse=True)
                    r = torch.remainder(fmix64(u, torch), RANKS)
                    order = torch.sort(r, stable=True).indices
                    return u[order], inv, torch.bincount(r, minlength=RANKS)
                return median_ms(run, args.reps)
            if name.startswith("reduce_"):
                _, mode, kind = name.split("_")
                t, o = table(dim), offs[kind][:-1]
                return median_ms(lambda: F.embedding_bag(x, t, o, mode=mode), args.reps)
            if name == "sequence_tile":
                t, o, L = table(dim), offs["hard"], 50
                def run():
                    lens = o[1:] - o[:-1]
                    take = torch.clamp(lens, max=L)
                    first = o[1:] - take
                    s = torch.arange(L)
                    pos = first[:, None] + s[None, :]
                    mask = s[None, :] < take[:, None]
                    rows = torch.where(mask, x[torch.clamp(pos, max=x.numel() - 1)], 0)
                    return t[rows] * mask[:, :, None]
                return median_ms(run, args.reps)
            if name == "bucketize":
                # grm's rule: a value on a boundary goes up (grm/transform.h)
                bnd32 = bnds.float()
                return median_ms(lambda: torch.bucketize(bvals, bnd32, right=True), args.reps)
            if name == "mod":
                return median_ms(lambda: torch.remainder(x, 1000003), args.reps)
            raise SystemExit(f"bench_sparse: no peer for case {name}")

        tbe = tbe_peer(torch)
        tbes = {}

        def tbe_ms(c):
            """fbgemm TBE forward on the reduce case c, or None without fbgemm_gpu."""
            if tbe is None or not c["case"].startswith("reduce_"):
                return None
            _, mode, kind = c["case"].split("_")
            dim, x, o = int(c["dim"]), ids.get(c["dist"]), offs[kind]
            key = (dim, mode)
            if key not in tbes:
                tbes.clear()
                m = tbe(ROWS, dim, mode)
                m.split_embedding_weights()[0].copy_(table(dim))
                tbes[key] = m
            m = tbes[key]
            with torch.no_grad():
                want = F.embedding_bag(x, table(dim), o[:-1], mode=mode)
                got = m(x, o)
                if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
                    sys.exit(f"bench_sparse: fbgemm TBE and embedding_bag differ on {c['case']}")
                return median_ms(lambda: m(x, o), args.reps)

        rows = []

        def report(c, peer_name, tag, grm_ms, peer_ms, nbytes):
            """One bench line and one table row of case c against one peer."""
            mbu = nbytes / (grm_ms * 1e6) / triad
            peer_mbu = nbytes / (peer_ms * 1e6) / triad
            print(f"bench=sparse case={c['case']} dist={c['dist']} dim={c['dim']} "
                  f"threads={args.threads} grm_ms={grm_ms:.3f} peer={peer_name} "
                  f"peer_ms={peer_ms:.3f} ratio={peer_ms / grm_ms:.2f} mbu={mbu * 100:.1f}% "
                  f"peer_mbu={peer_mbu * 100:.1f}% triad_gbs={triad:.2f}", flush=True)
            rows.append((c["case"] + tag, c["dist"], c["dim"], grm_ms, peer_ms, mbu, peer_mbu))

        for c in cases:
            grm_ms, nbytes = float(c["grm_ms"]), float(c["bytes"])
            report(c, "torch", "", grm_ms, peer(c), nbytes)
            t_ms = tbe_ms(c)
            if t_ms is not None:
                report(c, "fbgemm-tbe", "/tbe", grm_ms, t_ms, nbytes)

    print(f"\n{'case':<22}{'dist':<10}{'dim':>4}{'grm ms':>10}{'peer ms':>10}"
          f"{'speedup':>9}{'MBU':>8}{'peer MBU':>10}")
    for name, dist, dim, g, p, m, pm in rows:
        print(f"{name:<22}{dist:<10}{dim:>4}{g:>10.2f}{p:>10.2f}{p / g:>8.2f}x"
              f"{m * 100:>7.1f}%{pm * 100:>9.1f}%")
    print(f"(triad bandwidth {triad:.2f} GB/s, {args.threads} threads; MBU = useful bytes / "
          f"time / triad bandwidth; peer: torch, or fbgemm's TBE on the /tbe lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
