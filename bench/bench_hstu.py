#!/usr/bin/env python3
"""bench/bench_hstu.py - the dense-hstu layer (MTGRBoost §2, §5.2) against PyTorch peers.

Cases, each timed as forward + backward, same machine, same thread count
(torch.set_num_threads and grm's pool):
  layer        the whole HSTU layer on 32 jagged sequences with long-tailed lengths up to
               1024 (d = 256, 4 heads of 64, both relative attention biases, timestamps);
               grm: dense-hstu through its ops table (bench/bench-hstu --layer).
  layer_l200   the same with lengths up to 200 (the research HSTU's max_seq_len on
               MovieLens).
  layer_b128   issue 24's shape: 128 sequences all of length 50, d = 64, 2 heads of 32
               (dqk = dv = 32), the size of ml100k-hstu's layer.
               Two peers for each layer case:
               peer=meta-hstu-jagged  Meta's published HSTU research layer
                   (meta-recsys/generative-recommenders,
                   generative_recommenders/research/modeling/sequential/hstu.py:
                   SequentialTransductionUnitJagged in HSTUJagged.jagged_forward, jagged
                   input, fbgemm's jagged_to_padded_dense / dense_to_jagged), imported at run
                   time from --ref DIR (or $GRM_HSTU_REF), a checkout of that repository;
                   never copied into grm. Without it the line says skipped=1 reason=no-ref.
                   Needs fbgemm_gpu's CPU ops (bench/setup-venv.sh --hstu-ref).
               peer=torch-padded  the layer written for this bench in PyTorch, padded to the
                   longest sequence with a causal mask, fp32 autograd.
               attn_share: grm's attention kernels alone (bench-hstu --attn on the same
               lengths) over grm's layer time; peer_attn_share: the reference's own
               attention function (_hstu_attention_maybe_from_cache, with its relative
               bias module) forward + backward alone over its layer time.
  proj         the layer's two projections alone (f1: d -> 4d, f2: d -> d), forward and
               backward on the same tokens, through the functions dense-hstu calls
               (bench/bench-hstu --proj); peer: the same two torch linear layers on the
               same unpadded rows. Its mfu is the GEMM part of the layer.
  attn_*       the attention alone on batches with the same sum of L^2/2 but different
               B * Lmax^2: grm's tiled jagged kernels should follow sum L^2/2, the padded
               peer B * Lmax^2.
Rounds alternate grm and the peers (--rounds; each grm round is bench-hstu's median of
--reps calls, each peer round timing.median_ms over --reps calls); the median round is
printed with the spread (max - min) / median of the rounds. mfu is the model flops
(dense-hstu's flops op: projections + causal pairs) over the time, against the SGEMM peak
measured in the same run (bench/bench-hstu --sgemm); peer_mfu is the same model flops over
the peer's time. Prints `bench=hstu case=... grm_ms=.. peer=... peer_ms=.. ratio=..
mfu=..` (ratio = peer_ms / grm_ms, > 1 means grm is faster), then a table.

Settings of the reference layer, matched to what bench-hstu's grm layer computes:
embedding_dim 256, num_heads 4, attention_dim (dqk) 64, linear_hidden_dim (dv) 64,
linear_config uvqk, linear_activation silu, normalization rel_bias (SiLU(QK^T + rab) / n,
no softmax), concat_ua off, dropout 0 (train mode), eps 1e-6, relative bias
RelativeBucketedTimeAndPositionBasedBias(max_seq_len = Lmax, num_buckets = 31, the
bucketization of their HSTU class: log(|dt| clamped to >= 1) / 0.301), so its time table
has 32 entries as grm's time_buckets = 32. What still differs is listed by REF_DIFFS and
printed with the results.
"""
import argparse
import math
import os
import random
import re
import subprocess
import sys

from timing import median_ms

PEER_REF = "meta-hstu-jagged"
PEER_PAD = "torch-padded"
NB = 32          # grm's time_buckets in bench-hstu; the reference gets num_buckets = NB - 1
GRM_MAX_LEN = 1024   # bench-hstu's max_len (position buckets and the 1/n of attn_norm)

REF_DIFFS = [
    "ref pads q,k,v to [B, Lmax] and computes all B*H*Lmax^2 scores (grm: causal tiles of "
    "the jagged rows only)",
    "ref attention scale 1/Lmax (its padded length), grm 1/max_len = %d (same for lmax 1024)"
    % GRM_MAX_LEN,
    "ref relative bias: one [2n-1] position table and one [32] time table shared by the "
    "heads, bias tensor [B, n, n] materialised; grm: per-head tables, bias computed per tile",
    "ref time delta ts(next item) - ts(current) (its RelativeBucketedTimeAndPositionBased"
    "Bias), grm t_i - t_j",
    "ref uvqk projection has no bias, grm f1 has one (b1)",
    "ref position bias indexed by j - i over [-(n-1), n-1], grm by min(i - j, max_len - 1)",
]


def long_tail_lengths(n, cap, seed):
    rng = random.Random(seed)
    out = [min(cap, max(1, int(rng.paretovariate(1.1) * 24))) for _ in range(n)]
    out[0] = cap                                    # the tail is always there
    return out


def driver(build, args):
    exe = os.path.join(build, "bench", "bench-hstu")
    env = dict(os.environ, GRM_TOP_BUILDDIR=build, OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    out = subprocess.run([exe] + args, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit("bench-hstu failed: " + out.stderr)
    return dict(re.findall(r"(\w+)=([^\s]+)", out.stdout))


def med_spread(ts):
    m = sorted(ts)[len(ts) // 2]
    return m, (max(ts) - min(ts)) / m


# ---- the padded PyTorch layer written for this bench ----

def torch_layer(torch, lengths, D, H, attn_only):
    """A step function: forward + backward of the padded torch layer (or its attention)."""
    dk = D // H
    B, Lmax = len(lengths), max(lengths)
    ml, nb = GRM_MAX_LEN, NB
    g = torch.Generator().manual_seed(1)
    valid = torch.zeros(B, Lmax, dtype=torch.bool)
    for b, L in enumerate(lengths):
        valid[b, :L] = True
    times = torch.arange(Lmax).view(1, Lmax).expand(B, Lmax) * 60
    i = torch.arange(Lmax).view(Lmax, 1)
    j = torch.arange(Lmax).view(1, Lmax)
    causal = (j <= i).view(1, 1, Lmax, Lmax) & valid.view(B, 1, 1, Lmax)
    pos_idx = (i - j).clamp(0, ml - 1)
    rab_pos = (torch.randn(H, ml, generator=g) * 0.02).requires_grad_(True)
    rab_time = (torch.randn(H, nb, generator=g) * 0.02).requires_grad_(True)
    P, HV = H * 4 * dk, H * dk
    W1 = (torch.randn(P, D, generator=g) / math.sqrt(D)).requires_grad_(True)
    b1 = torch.zeros(P, requires_grad=True)
    W2 = (torch.randn(D, HV, generator=g) / math.sqrt(HV)).requires_grad_(True)
    b2 = torch.zeros(D, requires_grad=True)
    x = torch.randn(B, Lmax, D, generator=g).requires_grad_(True)
    qkv = [torch.randn(B, H, Lmax, dk, generator=g).requires_grad_(True) for _ in range(3)]
    dy = torch.randn(B, Lmax, D, generator=g)
    dO = torch.randn(B, H, Lmax, dk, generator=g)
    F = torch.nn.functional

    def attention(q, k, v):
        S = q @ k.transpose(-1, -2) + rab_pos[:, pos_idx].unsqueeze(0)
        dt = (times.unsqueeze(2) - times.unsqueeze(1)).abs().clamp(min=1)
        tb = (torch.log(dt.double()) / 0.301).floor().long().clamp(max=nb - 1)
        S = S + rab_time[:, tb].permute(1, 0, 2, 3)
        A = F.silu(S) / ml * causal
        return A @ v

    def step():
        if attn_only:
            attention(*qkv).backward(dO)
            return
        xn = F.layer_norm(x, (D,), eps=1e-6)
        h = F.silu(xn @ W1.T + b1)
        u, v, q, k = torch.split(h, [HV, HV, HV, HV], dim=-1)
        sh = lambda t: t.reshape(B, Lmax, H, dk).transpose(1, 2)
        O = attention(sh(q), sh(k), sh(v)).transpose(1, 2).reshape(B, Lmax, HV)
        y = x + (F.layer_norm(O, (HV,), eps=1e-6) * u) @ W2.T + b2
        y.backward(dy)

    return step


def torch_proj(torch, N, D):
    g = torch.Generator().manual_seed(2)
    f1, f2 = torch.nn.Linear(D, 4 * D), torch.nn.Linear(D, D)
    x = torch.randn(N, D, generator=g).requires_grad_(True)
    u = torch.randn(N, D, generator=g).requires_grad_(True)
    d1, d2 = torch.randn(N, 4 * D, generator=g), torch.randn(N, D, generator=g)

    def step():
        f1(x).backward(d1)
        f2(u).backward(d2)

    return step


# ---- Meta's HSTU research layer, imported from --ref ----

def load_ref(torch, ref_dir):
    """(module, description) or (None, reason)."""
    if not ref_dir:
        return None, "no-ref"
    mod_path = os.path.join(ref_dir, "generative_recommenders", "research", "modeling",
                            "sequential", "hstu.py")
    if not os.path.isfile(mod_path):
        return None, "ref-dir-has-no-research-hstu.py"
    try:
        import fbgemm_gpu  # noqa: F401  registers torch.ops.fbgemm (CPU ops)
        fb = getattr(fbgemm_gpu, "__version__", "?")
        for op in ("jagged_to_padded_dense", "dense_to_jagged",
                   "asynchronous_complete_cumsum"):
            getattr(torch.ops.fbgemm, op)
    except Exception as e:  # ImportError, OSError (built for another torch), AttributeError
        return None, "no-fbgemm(%s)" % type(e).__name__
    sys.path.insert(0, os.path.abspath(ref_dir))
    try:
        from generative_recommenders.research.modeling.sequential import hstu
    except Exception as e:
        return None, "ref-import-failed(%s:%s)" % (type(e).__name__, e)
    finally:
        sys.path.pop(0)
    try:
        commit = subprocess.run(["git", "-C", ref_dir, "rev-parse", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    return hstu, dict(fbgemm=fb, commit=commit, path=os.path.abspath(hstu.__file__))


def ref_layer(torch, hstu, lengths, D, H, attn_only):
    """A step function: forward + backward of Meta's jagged HSTU layer (or its attention)
    on jagged rows, padded length n = Lmax as their HSTU pads to max_seq_len."""
    dk = D // H
    B, n = len(lengths), max(lengths)
    torch.manual_seed(3)                 # their parameters initialise from the global RNG
    g = torch.Generator().manual_seed(3)
    x_offsets = torch.ops.fbgemm.asynchronous_complete_cumsum(
        torch.tensor(lengths, dtype=torch.int64))
    N = int(x_offsets[-1])
    ts = torch.zeros(B, n, dtype=torch.int64)   # their batches pad timestamps with 0
    for b, L in enumerate(lengths):
        ts[b, :L] = 1700000000 + 60 * torch.arange(L) + torch.randint(0, 60, (L,),
                                                                       generator=g)
    # as HSTU.generate_user_embeddings: 1 - triu(ones(n, n), 1)
    mask = 1.0 - torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1).float()
    rab = hstu.RelativeBucketedTimeAndPositionBasedBias(
        max_seq_len=n, num_buckets=NB - 1,
        bucketization_fn=lambda d: (torch.log(torch.abs(d).clamp(min=1)) / 0.301).long())
    if attn_only:
        q, k, v = [torch.randn(N, H * dk, generator=g).requires_grad_(True) for _ in range(3)]
        dO = torch.randn(N, H * dk, generator=g)

        def step():
            rab.zero_grad(set_to_none=True)
            for t in (q, k, v):
                t.grad = None
            out, _, _ = hstu._hstu_attention_maybe_from_cache(
                num_heads=H, attention_dim=dk, linear_dim=dk, q=q, k=k, v=v,
                cached_q=None, cached_k=None, delta_x_offsets=None, x_offsets=x_offsets,
                all_timestamps=ts, invalid_attn_mask=mask, rel_attn_bias=rab)
            out.backward(dO)
        return step

    layer = hstu.SequentialTransductionUnitJagged(
        embedding_dim=D, linear_hidden_dim=dk, attention_dim=dk, dropout_ratio=0.0,
        attn_dropout_ratio=0.0, num_heads=H, linear_activation="silu",
        relative_attention_bias_module=rab, normalization="rel_bias", linear_config="uvqk",
        concat_ua=False, epsilon=1e-6)
    model = hstu.HSTUJagged(modules=[layer], autocast_dtype=None)
    model.train()
    x = torch.randn(N, D, generator=g).requires_grad_(True)
    dy = torch.randn(N, D, generator=g)

    def step():
        model.zero_grad(set_to_none=True)
        x.grad = None
        y, _ = model.jagged_forward(x=x, x_offsets=x_offsets, all_timestamps=ts,
                                    invalid_attn_mask=mask)
        y.backward(dy)
    return step


def layer_case(args, torch, ref, peak, name, lengths, D=256, H=4):
    T, R = str(args.threads), str(args.reps)
    lens = ",".join(map(str, lengths))
    common = ["--threads", T, "--reps", R, "--dim", str(D), "--heads", str(H),
              "--lengths", lens]
    pad_step = torch_layer(torch, lengths, D, H, False)
    ref_step = ref_attn = None
    if ref is not None:
        ref_step = ref_layer(torch, ref, lengths, D, H, False)
        ref_attn = ref_layer(torch, ref, lengths, D, H, True)
    g, ga, gf, gb, p, m, ma = [], [], [], [], [], [], []
    r = {}
    for _ in range(args.rounds):         # alternated: grm, padded, ref, grm attn, ref attn
        r = driver(args.build, ["--layer"] + common)
        g.append(float(r["total_ms"]))
        gf.append(float(r["fwd_ms"]))
        gb.append(float(r["bwd_ms"]))
        p.append(median_ms(pad_step, args.reps))
        if ref_step is not None:
            m.append(median_ms(ref_step, args.reps))
        ga.append(float(driver(args.build, ["--attn"] + common)["total_ms"]))
        if ref_attn is not None:
            ma.append(median_ms(ref_attn, args.reps))
    flops = float(r["flops"])
    gm, gs = med_spread(g)
    gam, _ = med_spread(ga)
    mfu = flops / (gm * 1e6) / peak
    head = (f"bench=hstu case={name} seqs={len(lengths)} tokens={r['tokens']} "
            f"lmax={max(lengths)} d={D} heads={H} threads={args.threads} "
            f"fwd_ms={sorted(gf)[len(gf) // 2]:.2f} bwd_ms={sorted(gb)[len(gb) // 2]:.2f} "
            f"grm_ms={gm:.2f} grm_spread={gs:.2f}")
    tail = f"mfu={mfu:.3f} attn_share={gam / gm:.2f}"
    sl2 = sum(L * (L + 1) / 2 for L in lengths)
    bl2 = len(lengths) * max(lengths) ** 2
    rows = []
    if m:
        mm, ms = med_spread(m)
        mam, _ = med_spread(ma)
        print(f"{head} peer={PEER_REF} peer_ms={mm:.2f} peer_spread={ms:.2f} "
              f"ratio={mm / gm:.2f} {tail} peer_mfu={flops / (mm * 1e6) / peak:.3f} "
              f"peer_attn_share={mam / mm:.2f} torch={torch.__version__} "
              f"fbgemm_gpu={args.ref_info['fbgemm']} ref_commit={args.ref_info['commit']}",
              flush=True)
        rows.append((name, PEER_REF, gm, mm, mfu, sl2, bl2))
    else:
        print(f"{head} peer={PEER_REF} skipped=1 reason={args.ref_reason} {tail}", flush=True)
    pm, ps = med_spread(p)
    print(f"{head} peer={PEER_PAD} peer_ms={pm:.2f} peer_spread={ps:.2f} "
          f"ratio={pm / gm:.2f} {tail} peer_mfu={flops / (pm * 1e6) / peak:.3f} "
          f"torch={torch.__version__}", flush=True)
    rows.append((name, PEER_PAD, gm, pm, mfu, sl2, bl2))
    return rows


def simple_case(args, torch, peak, name, mode, lengths, step, label):
    """grm driver mode against one torch step function, alternated rounds."""
    T, R = str(args.threads), str(args.reps)
    g, p, r = [], [], {}
    for _ in range(args.rounds):
        r = driver(args.build, [mode, "--threads", T, "--reps", R, "--dim", "256",
                                "--heads", "4", "--lengths", ",".join(map(str, lengths))])
        g.append(float(r["total_ms"]))
        p.append(median_ms(step, args.reps))
    gm, gs = med_spread(g)
    pm, ps = med_spread(p)
    mfu = float(r["flops"]) / (gm * 1e6) / peak
    sl2 = sum(L * (L + 1) / 2 for L in lengths)
    bl2 = len(lengths) * max(lengths) ** 2
    extra = (f"sum_l2_half={sl2:.0f} b_lmax2={bl2} " if mode == "--attn" else "d=256 ")
    print(f"bench=hstu case={name} seqs={len(lengths)} tokens={r['tokens']} {extra}"
          f"grm_ms={gm:.2f} grm_spread={gs:.2f} peer={label} peer_ms={pm:.2f} "
          f"peer_spread={ps:.2f} ratio={pm / gm:.2f} mfu={mfu:.3f} torch={torch.__version__}",
          flush=True)
    return [(name, label, gm, pm, mfu, sl2, bl2)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grmhost")
    ap.add_argument("--build", default=os.environ.get("GRM_TOP_BUILDDIR", "."))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ref", default=os.environ.get("GRM_HSTU_REF"),
                    help="checkout of meta-recsys/generative-recommenders (or $GRM_HSTU_REF)")
    ap.add_argument("--cases", default="layer,layer_l200,layer_b128,proj,attn",
                    help="comma list of layer, layer_l200, layer_b128, proj, attn")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    import torch
    torch.set_num_threads(args.threads)
    ref, info = load_ref(torch, args.ref)
    args.ref_reason, args.ref_info = (info, {}) if ref is None else ("", info)
    T = str(args.threads)
    peak = float(driver(args.build, ["--sgemm", "--threads", T])["sgemm_gflops"])
    print(f"# threads={args.threads} sgemm_peak_gflops={peak:.1f} torch={torch.__version__} "
          f"rounds={args.rounds} reps={args.reps}")
    if ref is None:
        print(f"# reference: not given or not loadable ({info}); peer={PEER_REF} is skipped. "
              "Give --ref DIR (or GRM_HSTU_REF), a checkout of meta-recsys/"
              "generative-recommenders, with fbgemm_gpu's CPU ops installed "
              "(bench/setup-venv.sh --hstu-ref)")
    else:
        print(f"# reference: {info['path']} commit={info['commit']} "
              f"fbgemm_gpu={info['fbgemm']}")
        for d in REF_DIFFS:
            print(f"# differs: {d}")
    rows = []

    lengths = long_tail_lengths(32, 1024, 7)
    if "layer" in cases:
        rows += layer_case(args, torch, ref, peak, "layer", lengths)
    if "layer_l200" in cases:
        rows += layer_case(args, torch, ref, peak, "layer_l200", long_tail_lengths(32, 200, 7))
    if "layer_b128" in cases:
        rows += layer_case(args, torch, ref, peak, "layer_b128", [50] * 128, D=64, H=2)
    if "proj" in cases:
        N = sum(lengths)
        rows += simple_case(args, torch, peak, "proj", "--proj", lengths,
                            torch_proj(torch, N, 256), "torch")

    # equal sum L^2 / 2 (about 2^17), B * Lmax^2 from 1x to 12x
    batches = {
        "attn_1x512": [512],
        "attn_4x256": [256] * 4,
        "attn_16x128": [128] * 16,
        "attn_64x64": [64] * 64,
        "attn_1x500+12x32": [500] + [32] * 12,
    }
    if "attn" in cases:
        for name, ls in batches.items():
            rows += simple_case(args, torch, peak, name, "--attn", ls,
                                torch_layer(torch, ls, 256, 4, True), PEER_PAD)

    print()
    print(f"{'case':<18} {'peer':<17} {'sum L^2/2':>10} {'B*Lmax^2':>10} {'grm ms':>9} "
          f"{'peer ms':>10} {'ratio':>6} {'mfu':>6}")
    for name, peer, g, p, m, sl2, bl2 in rows:
        print(f"{name:<18} {peer:<17} {sl2:>10.0f} {bl2:>10} {g:>9.2f} {p:>10.2f} "
              f"{p / g:>6.2f} {m:>6.3f}")


if __name__ == "__main__":
    main()
