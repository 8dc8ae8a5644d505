#!/usr/bin/env python3
"""bench/bench_ref_train.py - grm's HSTU trainer against Meta's HSTU research trainer on the
same ML-100K split: quality (issue 23) and training throughput (issue 24) in one run.

Both sides train the same model for the same epochs on the same sequences and are scored
by the same code, grm's protocol (every user's last item ranked against the whole catalog,
the user's whole history excluded, ties to the lower item id; HR@K and NDCG@K):
  grm   share/pipelines/ml100k-hstu-ref.ini: 2 HSTU layers, 1 head, d = 50, dropout 0.2,
        the learned position table, 128 time buckets, 128 negatives per token, L2-normalised
        logits at temperature 0.05, AdamW 1e-3 (betas 0.9/0.98) stepping the whole item
        table, batch 32, each user's second-to-last item trained too, 15 epochs, the last
        model tested (grmhost train --metrics-out, test split).
  ref   Meta's research trainer (meta-recsys/generative-recommenders,
        generative_recommenders/research/, imported at run time from --ref DIR or
        $GRM_HSTU_REF; grm contains none of its code), configured as its
        configs/ml-1m/hstu-sampled-softmax-n128-final.gin with grm's sizes (d 50, 2 blocks,
        1 head, dqk = dv = 50, dropout 0.2, 128 local negatives, temperature 0.05, item L2
        norm, AdamW 1e-3 betas 0.9/0.98, no weight decay, batch 32, max_sequence_length 50).
        Its own classes do the work: DatasetV2 (the per-user CSV its preprocessor writes,
        made here from the same u.data), movielens_seq_features_from_row, the HSTU encoder
        from get_sequential_encoder, SampledSoftmaxLoss with LocalNegativesSampler. The
        loop is train.py's train_fn step for step, on the CPU, without DDP, without its
        per-step tensorboard writes and without torch.autograd.set_detect_anomaly (a
        debugging switch train_fn leaves on; it would slow the peer several-fold); data
        loading in the main process (num_workers 0), so its DatasetV2 cache holds across
        epochs. It has no validation split: it trains on all but the last item, like grm
        with train_on_valid. Its user representation for scoring is model.encode (the last
        position), the candidates its normalize_embeddings of every item, as in its
        get_eval_state; only the ranking rule is grm's (its own eval excludes only the
        50 items in the window).

Throughput is sequences/s of the training loop alone (no evaluation, no checkpoint inside
it): grm's final samples_per_s with eval and checkpoints moved past the last step, the
reference's users x epochs over the time of its epoch loops. Both on --threads threads.

Rounds alternate grm and the reference, one seed each (--seeds): one line per seed and
side, then a summary line per side with mean and sd of the test metrics, and the
throughput ratio (grm / ref, > 1: grm trains faster) as the median over the seeds with
its spread (max - min) / median.

Usage: bench_ref_train.py --build BUILD --ref DIR [--data DIR] [--seeds 42,7,1234]
       [--epochs 15] [--threads 2] [--only grm|ref]   (make bench BENCH=ref_train, with
       GRM_HSTU_REF=DIR)
Needs torch, fbgemm_gpu's CPU ops, gin-config and pandas for the reference
(bench/setup-venv.sh --hstu-ref); without --ref the ref lines say skipped=1 reason=no-ref.
"""
import argparse
import csv
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

KS = (10, 20)


# ---- the data: one chronological sequence per user, as grm's transform-basic builds it ----

def read_ml100k(data_dir):
    """{user: [(item, ts), ...]} in time order; equal timestamps keep the file's order
    (transform-basic's sequence_order: ties keep input order)."""
    path = os.path.join(data_dir, "ml-100k", "u.data.zst")
    raw = subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout
    seqs = {}
    for n, line in enumerate(raw.decode().splitlines()):
        u, i, r, t = line.split("\t")
        seqs.setdefault(int(u), []).append((int(t), n, int(i), int(float(r))))
    out = {}
    for u, ev in seqs.items():
        ev.sort()
        out[u] = [(i, t, r) for t, _, i, r in ev]
    return out


def rank_metrics(ranks):
    """HR@K and NDCG@K (one relevant item) from 0-based ranks."""
    n = len(ranks)
    m = {}
    for k in KS:
        m["hr@%d" % k] = sum(1 for r in ranks if r < k) / n
        m["ndcg@%d" % k] = sum(1 / math.log2(r + 2) for r in ranks if r < k) / n
    return m


# ---- grm ----

def grm_run(args, seed, tmp):
    ini = os.path.join(args.src, "share", "pipelines", "ml100k-hstu-ref.ini")
    metrics = os.path.join(tmp, "grm-%d.jsonl" % seed)
    big = "1000000000"
    cmd = [args.grmhost or os.path.join(args.build, "grmhost"), "train", "--fresh", "--metrics-out", metrics,
           "--set", "pipeline.threads=%d" % args.threads, "--set", "train.seed=%d" % seed,
           "--set", "train.epochs=%d" % args.epochs, "--set", "train.eval_every=" + big,
           "--set", "checkpoint.every=" + big,
           "--set", "checkpoint.dir=" + os.path.join(tmp, "ck-%d" % seed), ini]
    env = dict(os.environ, GRM_DATA_DIR=args.data)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit("grmhost failed:\n" + out.stderr[-4000:])
    res = {"wall_s": wall}
    with open(metrics) as f:
        for line in f:
            m = json.loads(line)
            if m["split"] == "train" and m["name"] == "samples_per_s":
                res["seq_per_s"] = m["value"]
            if m["split"] == "test" and m["name"] in ("hr@10", "ndcg@10", "hr@20", "ndcg@20"):
                res[m["name"]] = m["value"]
    return res


# ---- the reference ----

def load_ref(ref_dir):
    """(modules, info) or (None, reason)."""
    if not ref_dir:
        return None, "no-ref"
    if not os.path.isdir(os.path.join(ref_dir, "generative_recommenders", "research")):
        return None, "ref-dir-has-no-research-code"
    try:
        import torch
        import fbgemm_gpu  # noqa: F401  registers torch.ops.fbgemm's CPU ops
        import gin  # noqa: F401
        import pandas  # noqa: F401
    except Exception as e:
        return None, "missing-module(%s:%s)" % (type(e).__name__, e)
    sys.path.insert(0, os.path.abspath(ref_dir))
    try:
        from generative_recommenders.research.data import dataset as ds_mod
        from generative_recommenders.research.modeling.sequential import (
            autoregressive_losses, embedding_modules, encoder_utils, features,
            input_features_preprocessors, output_postprocessors)
        from generative_recommenders.research.modeling.sequential.losses import sampled_softmax
        from generative_recommenders.research.modeling import similarity_utils
    except Exception as e:
        return None, "ref-import-failed(%s:%s)" % (type(e).__name__, e)
    mods = dict(ds=ds_mod, losses=autoregressive_losses, emb=embedding_modules,
                enc=encoder_utils, feat=features, pre=input_features_preprocessors,
                post=output_postprocessors, ssl=sampled_softmax, sim=similarity_utils)
    commit = subprocess.run(["git", "-C", ref_dir, "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    return mods, dict(commit=commit, torch=torch.__version__,
                      fbgemm=getattr(fbgemm_gpu, "__version__", "?"))


def write_ref_csv(seqs, path):
    """The per-user CSV the reference's preprocessor writes (sasrec_format.csv): lists of
    item ids, ratings and timestamps in time order, read back by its DatasetV2."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "user_id", "sequence_item_ids", "sequence_ratings",
                    "sequence_timestamps"])
        for n, u in enumerate(sorted(seqs)):
            ev = seqs[u]
            w.writerow([n, u, ",".join(str(i) for i, _, _ in ev),
                        ",".join(str(r) for _, _, r in ev),
                        ",".join(str(t) for _, t, _ in ev)])


def ref_run(args, mods, seqs, seed, tmp):
    import torch
    torch.set_num_threads(args.threads)
    random.seed(seed)
    torch.manual_seed(seed)
    # max_sequence_length (ml100k-hstu-ref.ini's max_seq_len), d, gr_output_length
    L, D, OUT = 50, 50, 10
    csv_path = os.path.join(tmp, "ml-100k-sasrec_format.csv")
    if not os.path.exists(csv_path):
        write_ref_csv(seqs, csv_path)
    # get_reco_dataset's ml-1m branch: train ignores the last item, eval keeps it
    train_ds = mods["ds"].DatasetV2(ratings_file=csv_path, padding_length=L + 1,
                                    ignore_last_n=1, chronological=True)
    eval_ds = mods["ds"].DatasetV2(ratings_file=csv_path, padding_length=L + 1,
                                   ignore_last_n=0, chronological=True)
    items = sorted({i for ev in seqs.values() for i, _, _ in ev})
    max_item = max(items)
    # create_data_loader: a DistributedSampler (seed 0) shuffles; one replica here
    sampler = torch.utils.data.distributed.DistributedSampler(
        train_ds, num_replicas=1, rank=0, shuffle=True, seed=0, drop_last=False)
    loader = torch.utils.data.DataLoader(train_ds, batch_size=32, sampler=sampler,
                                         num_workers=0)
    # train_fn's model, loss and sampler with the hstu-sampled-softmax-n128 gin values
    emb = mods["emb"].LocalEmbeddingModule(num_items=max_item, item_embedding_dim=D)
    sim, _ = mods["sim"].get_similarity_function(module_type="DotProduct",
                                                 query_embedding_dim=D, item_embedding_dim=D)
    post = mods["post"].L2NormEmbeddingPostprocessor(embedding_dim=D, eps=1e-6)
    pre = mods["pre"].LearnablePositionalEmbeddingInputFeaturesPreprocessor(
        max_sequence_len=L + OUT + 1, embedding_dim=D, dropout_rate=0.2)
    model = mods["enc"].hstu_encoder(
        max_sequence_length=L, max_output_length=OUT + 1, embedding_module=emb,
        similarity_module=sim, input_preproc_module=pre, output_postproc_module=post,
        activation_checkpoint=False, verbose=False, num_blocks=2, num_heads=1, dqk=D, dv=D,
        linear_dropout_rate=0.2)
    ar_loss = mods["ssl"].SampledSoftmaxLoss(num_to_sample=128, softmax_temperature=0.05,
                                             model=model)
    neg = mods["losses"].LocalNegativesSampler(
        num_items=max_item, item_emb=model._embedding_module._item_emb,
        all_item_ids=items, l2_norm=True, l2_norm_eps=1e-6)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0)
    train_s = 0.0
    nseq = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        t0 = time.perf_counter()
        for row in loader:
            f, target_ids, _ = mods["feat"].movielens_seq_features_from_row(
                row, device="cpu", max_output_length=OUT + 1)
            f.past_ids.scatter_(dim=1, index=f.past_lengths.view(-1, 1),
                                src=target_ids.view(-1, 1))
            opt.zero_grad()
            x = model.get_item_embeddings(f.past_ids)
            y = model(past_lengths=f.past_lengths, past_ids=f.past_ids, past_embeddings=x,
                      past_payloads=f.past_payloads)
            sup = f.past_ids
            neg._item_emb = model._embedding_module._item_emb
            loss, _ = ar_loss(lengths=f.past_lengths, output_embeddings=y[:, :-1, :],
                              supervision_ids=sup[:, 1:], supervision_embeddings=x[:, 1:, :],
                              supervision_weights=(sup[:, 1:] != 0).float(),
                              negatives_sampler=neg, **f.past_payloads)
            loss.backward()
            opt.step()
            nseq += int(f.past_lengths.numel())
        train_s += time.perf_counter() - t0
    # scoring: grm's protocol on the reference's own user and item representations
    model.eval()
    ranks = []
    with torch.inference_mode():
        cand = neg.normalize_embeddings(model.get_item_embeddings(torch.tensor(items)))
        col = {i: n for n, i in enumerate(items)}
        users = sorted(seqs)
        for lo in range(0, len(users), 128):
            rows = [eval_ds[n] for n in range(lo, min(lo + 128, len(users)))]
            batch = torch.utils.data.default_collate(rows)
            f, target_ids, _ = mods["feat"].movielens_seq_features_from_row(
                batch, device="cpu", max_output_length=OUT + 1)
            q = model.encode(past_lengths=f.past_lengths, past_ids=f.past_ids,
                             past_embeddings=model.get_item_embeddings(f.past_ids),
                             past_payloads=f.past_payloads)
            sc = (q @ cand.T).tolist()
            for k, u in enumerate(users[lo:lo + len(rows)]):
                ev = seqs[u]
                target = ev[-1][0]
                assert int(target_ids[k, 0]) == target
                s = sc[k]
                for i, _, _ in ev[:-1]:
                    if i != target:
                        s[col[i]] = -math.inf
                ti = col[target]
                ts = s[ti]
                ranks.append(sum(1 for j, v in enumerate(s) if v > ts or (v == ts and j < ti)))
    res = rank_metrics(ranks)
    res["seq_per_s"] = nseq / train_s
    res["wall_s"] = train_s
    return res


def mean_sd(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=".")
    ap.add_argument("--grmhost", default=None, help="default: BUILD/grmhost")
    ap.add_argument("--src", default=os.environ.get("GRM_TOP_SRCDIR"),
                    help="source tree, for share/pipelines (default: --build)")
    ap.add_argument("--ref", default=os.environ.get("GRM_HSTU_REF"))
    ap.add_argument("--data", default=os.environ.get("GRM_DATA_DIR", "../shared/data"))
    ap.add_argument("--seeds", default="42,7,1234")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=("grm", "ref"))
    args = ap.parse_args()
    args.src = args.src or args.build
    seeds = [int(s) for s in args.seeds.split(",")]
    if not os.path.exists(os.path.join(args.data, "ml-100k", "u.data.zst")):
        print("bench=ref_train case=ml100k-hstu skipped=1 reason=no-data "
              "# ML-100K not under --data / $GRM_DATA_DIR")
        return
    seqs = read_ml100k(args.data)
    mods, info = (None, "not-asked") if args.only == "grm" else load_ref(args.ref)
    if mods is None and args.only != "grm":
        print("bench=ref_train case=ml100k-hstu side=ref skipped=1 reason=%s" % info)
    if mods:
        print("# ref: commit %s, torch %s, fbgemm_gpu %s" % (info["commit"], info["torch"],
                                                             info["fbgemm"]))
    print("# differs: grm's tokens are the last 50 of a user's training items (49 "
          "predictions), the reference's 50 history items plus the target (50 predictions)")
    print("# differs: the reference's time bias uses the next token's timestamp "
          "(ts[i+1] - ts[j]), grm's ts[i] - ts[j]; its uvqk projection has no bias")
    res = {"grm": [], "ref": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n, seed in enumerate(seeds):
            order = ["grm", "ref"] if n % 2 == 0 else ["ref", "grm"]
            for side in order:
                if side == "grm" and args.only != "ref":
                    r = grm_run(args, seed, tmp)
                elif side == "ref" and mods:
                    r = ref_run(args, mods, seqs, seed, tmp)
                else:
                    continue
                res[side].append(r)
                print("bench=ref_train case=ml100k-hstu side=%s seed=%d epochs=%d threads=%d "
                      "%s seq_per_s=%.1f train_s=%.1f" %
                      (side, seed, args.epochs, args.threads,
                       " ".join("%s=%.4f" % (k, r[k]) for k in
                                ("hr@10", "ndcg@10", "hr@20", "ndcg@20")),
                       r["seq_per_s"], r["wall_s"]), flush=True)
    for side in ("grm", "ref"):
        if not res[side]:
            continue
        parts = []
        for k in ("hr@10", "ndcg@10", "hr@20", "ndcg@20"):
            m, s = mean_sd([r[k] for r in res[side]])
            parts.append("%s=%.4f %s_sd=%.4f" % (k, m, k, s))
        print("bench=ref_train case=ml100k-hstu side=%s seeds=%d %s" %
              (side, len(res[side]), " ".join(parts)))
    if res["grm"] and res["ref"] and len(res["grm"]) == len(res["ref"]):
        ratios = sorted(g["seq_per_s"] / r["seq_per_s"] for g, r in zip(res["grm"], res["ref"]))
        med = statistics.median(ratios)
        g = statistics.median(r["seq_per_s"] for r in res["grm"])
        p = statistics.median(r["seq_per_s"] for r in res["ref"])
        print("bench=ref_train case=ml100k-hstu-throughput threads=%d grm_seq_per_s=%.1f "
              "peer=meta-hstu-trainer peer_seq_per_s=%.1f ratio=%.2f spread=%.2f" %
              (args.threads, g, p, med, (ratios[-1] - ratios[0]) / med))
        print("\n  %-5s %8s %8s %8s %8s %10s" % ("", "HR@10", "NDCG@10", "HR@20", "NDCG@20",
                                               "seq/s"))
        for side in ("grm", "ref"):
            print("  %-5s %8.4f %8.4f %8.4f %8.4f %10.1f" % (
                side, *(statistics.mean(r[k] for r in res[side]) for k in
                        ("hr@10", "ndcg@10", "hr@20", "ndcg@20")),
                statistics.median(r["seq_per_s"] for r in res[side])))


if __name__ == "__main__":
    main()
