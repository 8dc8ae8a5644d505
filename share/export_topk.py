#!/usr/bin/env python3
"""share/export_topk.py - top-K items for users of a `grmhost export` directory, computed
with the `safetensors` package (PyPI) and torch alone: no grm. It follows the scoring rule
manifest.json states, the one `grmhost recommend` applies:

    score(user, item) = user.state[user] . item.weight[item]
    items in the user's history excluded; ties to the lower item id

usage: export_topk.py EXPORT_DIR [--users FILE] [--k 10] [--keep-history]
Prints `user<TAB>rank<TAB>item<TAB>score` lines, as `grmhost recommend --format tsv`.
--users FILE lists user ids, one per line ('#' comments); default: every exported user.
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file


def load_export(path):
    """The manifest and the item and user tensors of an export directory."""
    with open(os.path.join(path, "manifest.json")) as f:
        manifest = json.load(f)
    items = load_file(os.path.join(path, manifest["files"]["items"]))
    users = load_file(os.path.join(path, manifest["files"]["users"]))
    return manifest, items, users


def top_k(items, users, user_rows, k, keep_history=False):
    """[(user id, [(item id, score), ...]), ...] for the given rows of user.state."""
    weight = items["item.weight"].float()          # [C, D], fp16/bf16 exports widened
    item_ids = items["item.ids"]                   # [C] sorted
    state = users["user.state"].float()            # [U, D]
    offsets, history = users["user.history_offsets"], users["user.history"]
    out = []
    for u in user_rows:
        scores = weight @ state[u]                 # [C]
        if not keep_history:
            seen = history[offsets[u]:offsets[u + 1]]
            pos = torch.searchsorted(item_ids, seen)
            hit = pos < len(item_ids)
            hit[hit.clone()] &= item_ids[pos[hit]] == seen[hit]
            scores[pos[hit]] = float("-inf")
        # a stable sort of the negated scores keeps the lower index (lower id) first on ties
        order = torch.sort(-scores, stable=True).indices
        best = [int(j) for j in order[:k] if torch.isfinite(scores[j])]
        out.append((int(users["user.ids"][u]),
                    [(int(item_ids[j]), float(scores[j])) for j in best]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("export_dir")
    ap.add_argument("--users")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--keep-history", action="store_true")
    a = ap.parse_args()
    manifest, items, users = load_export(a.export_dir)
    row_of = {int(u): i for i, u in enumerate(users["user.ids"].tolist())}
    if a.users:
        with open(a.users) as f:
            ids = [int(x) for x in (l.strip() for l in f) if x and not x.startswith("#")]
        missing = [u for u in ids if u not in row_of]
        if missing:
            sys.exit(f"export_topk.py: {a.users}: user {missing[0]} is not in the export")
        rows = [row_of[u] for u in ids]
    else:
        rows = range(len(row_of))
    for uid, recs in top_k(items, users, rows, a.k, a.keep_history):
        for r, (item, score) in enumerate(recs, 1):
            print(f"{uid}\t{r}\t{item}\t{score:.9g}")


if __name__ == "__main__":
    main()
