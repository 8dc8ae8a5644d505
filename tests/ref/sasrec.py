#!/usr/bin/env python3
"""tests/ref/sasrec.py - PyTorch (CPU, float64) reference for dense-sasrec: one SASRec
self-attention block (Kang & McAuley, "Self-Attentive Sequential Recommendation", ICDM
2018, Sec. III) written the way pmixer/SASRec.pytorch (model.py, SASRec.log2feats) writes
it, with torch.nn.MultiheadAttention and torch.nn.functional.layer_norm, applied to each
jagged sequence on its own (no padding). Dropout is 0 (torch's generator cannot match the
plugin's counter-based masks; the C test checks dropout by finite differences).
Checked by tests/test-dense-sasrec.c.

  (pos_emb)    h0 = x * sqrt(D) + P[pos]      pos = max_len - L + t (right) or t (left)
               q  = LN1(h0)
               r1 = q + MHA(q, h0, h0, causal mask)
               u  = LN2(r1)
               r2 = u + W2 relu(W1 u + b1) + b2
  (final_norm) y  = LN3(r2)

style = bert, the post-norm block of the S3-Rec/ICLRec code (modules.py), act GELU
(erf form) or ReLU:

  (pos_emb)    h0 = LN0(x + P[pos])
               u  = LN1(h0 + MHA(h0, h0, h0, causal mask))
               y  = LN2(u + W2 act(W1 u + b1) + b2)

Usage: sasrec.py FIXTURE

Fixture layout (little-endian):
  uint32 magic 0x46534153 ("SASF"), uint32 version 2, uint32 ncases, then per case:
  int64 D, H, F, max_len, pos_emb, final_norm, pos_align (0 right, 1 left), style
  (0 sasrec, 1 bert), activation (1 relu, 2 gelu), N, nseq,
  float64 ln_eps, int64 offsets [nseq+1], int64 P (parameter floats),
  float32 x [N, D], params [P] (in the plugin's params() order, concatenated),
          dy [N, D], y [N, D], d_x [N, D], d_params [P]
with loss = sum(y * dy).
"""
import math
import struct
import sys

import torch
import torch.nn.functional as Fn

MAGIC = 0x46534153
VERSION = 2
SASREC, BERT = 0, 1
RELU, GELU = 1, 2

# D, H, F, max_len, pos_emb, final_norm, pos_align, style, activation, eps, lengths
CASES = [
    (8, 2, 12, 7, 1, 1, 0, SASREC, RELU, 1e-8, [1, 5, 3, 7, 1]),
    (6, 3, 6, 50, 0, 0, 0, SASREC, RELU, 1e-8, [1, 1, 9, 16]),
    (8, 1, 16, 10, 1, 0, 1, SASREC, GELU, 1e-5, [10, 2, 1]),
    (4, 2, 4, 50, 0, 1, 0, SASREC, RELU, 1e-8, [1, 1, 1, 1]),
    (8, 2, 32, 7, 1, 0, 0, BERT, GELU, 1e-12, [1, 5, 3, 7, 1]),
    (6, 3, 10, 50, 0, 0, 1, BERT, RELU, 1e-5, [1, 1, 9, 16]),
]


def f32(t):
    """float32 bytes of a tensor, row-major."""
    flat = t.detach().to(torch.float32).reshape(-1).tolist()
    return struct.pack("<%df" % len(flat), *flat)


def param_shapes(D, H, F, max_len, pos_emb, final_norm, style):
    """(name, shape) in dense-sasrec's params() order: each LayerNorm where the forward
    uses it, before its sub-layer (sasrec) or after it (bert)."""
    shapes = []
    if pos_emb:
        shapes.append(("pos_emb.weight", (max_len, D)))
    attn_norm = [("attn_norm.weight", (D,)), ("attn_norm.bias", (D,))]
    ffn_norm = [("ffn_norm.weight", (D,)), ("ffn_norm.bias", (D,))]
    attn = [("attn.in_proj_weight", (3 * D, D)), ("attn.in_proj_bias", (3 * D,)),
            ("attn.out_proj.weight", (D, D)), ("attn.out_proj.bias", (D,))]
    ffn = [("ffn.linear1.weight", (F, D)), ("ffn.linear1.bias", (F,)),
           ("ffn.linear2.weight", (D, F)), ("ffn.linear2.bias", (D,))]
    if style == BERT:
        if pos_emb:
            shapes += [("emb_norm.weight", (D,)), ("emb_norm.bias", (D,))]
        shapes += attn + attn_norm + ffn + ffn_norm
    else:
        shapes += attn_norm + attn + ffn_norm + ffn
    if final_norm:
        shapes += [("final_norm.weight", (D,)), ("final_norm.bias", (D,))]
    return shapes


def run_case(f, g, case):
    D, H, F, max_len, pos_emb, final_norm, align, style, act, eps, lengths = case
    N, nseq = sum(lengths), len(lengths)
    offsets = [0]
    for L in lengths:
        offsets.append(offsets[-1] + L)

    def rnd(*shape, scale=1.0):
        # float32 values, so the C side sees exactly what torch computes with
        return ((torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) * scale).float()

    shapes = param_shapes(D, H, F, max_len, pos_emb, final_norm, style)
    params = {}
    for name, shape in shapes:
        if name.endswith("norm.weight"):
            params[name] = 1 + rnd(*shape, scale=0.3)
        elif len(shape) == 2:
            params[name] = rnd(*shape, scale=0.5)
        else:
            params[name] = rnd(*shape, scale=0.2)
    x = rnd(N, D)
    dy = rnd(N, D)

    leaves = {k: v.double().requires_grad_() for k, v in params.items()}
    xd = x.double().requires_grad_()

    mha = torch.nn.MultiheadAttention(D, H, dropout=0.0, bias=True, batch_first=True,
                                      dtype=torch.float64)
    # the module's own parameters are replaced by the fixture's leaves
    del mha.in_proj_weight, mha.in_proj_bias
    mha.in_proj_weight = leaves["attn.in_proj_weight"]
    mha.in_proj_bias = leaves["attn.in_proj_bias"]
    del mha.out_proj.weight, mha.out_proj.bias
    mha.out_proj.weight = leaves["attn.out_proj.weight"]
    mha.out_proj.bias = leaves["attn.out_proj.bias"]

    def ln(t, prefix):
        return Fn.layer_norm(t, (D,), leaves[prefix + ".weight"], leaves[prefix + ".bias"],
                             eps)

    def ffn(u):
        z = u @ leaves["ffn.linear1.weight"].T + leaves["ffn.linear1.bias"]
        hid = Fn.gelu(z) if act == GELU else torch.relu(z)     # gelu: the exact erf form
        return hid @ leaves["ffn.linear2.weight"].T + leaves["ffn.linear2.bias"]

    outs = []
    for s in range(nseq):
        a, b = offsets[s], offsets[s + 1]
        L = b - a
        seq = xd[a:b]                                            # [L, D]
        pos = [(max_len - L + t) if align == 0 else t for t in range(L)]
        # True above the diagonal: query t may not see keys after t (reference:
        # attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool)))
        mask = ~torch.tril(torch.ones((L, L), dtype=torch.bool))
        if style == BERT:
            if pos_emb:
                seq = ln(seq + leaves["pos_emb.weight"][pos], "emb_norm")
            att, _ = mha(seq[None], seq[None], seq[None], attn_mask=mask,
                         need_weights=False)
            u = ln(seq + att[0], "attn_norm")
            outs.append(ln(u + ffn(u), "ffn_norm"))
            continue
        if pos_emb:
            seq = seq * math.sqrt(D) + leaves["pos_emb.weight"][pos]
        q = ln(seq, "attn_norm")
        att, _ = mha(q[None], seq[None], seq[None], attn_mask=mask, need_weights=False)
        r1 = q + att[0]
        u = ln(r1, "ffn_norm")
        r2 = u + ffn(u)
        outs.append(ln(r2, "final_norm") if final_norm else r2)
    y = torch.cat(outs, 0) if outs else torch.zeros(0, D, dtype=torch.float64)
    loss = (y * dy.double()).sum()
    loss.backward()

    P = sum(math.prod(shape) for _, shape in shapes)
    f.write(struct.pack("<11q", D, H, F, max_len, pos_emb, final_norm, align, style, act, N,
                        nseq))
    f.write(struct.pack("<d", eps))
    f.write(struct.pack("<%dq" % (nseq + 1), *offsets))
    f.write(struct.pack("<q", P))
    f.write(f32(x))
    for name, _ in shapes:
        f.write(f32(params[name]))
    f.write(f32(dy))
    f.write(f32(y))
    f.write(f32(xd.grad))
    for name, _ in shapes:
        grad = leaves[name].grad
        f.write(f32(grad if grad is not None else torch.zeros_like(leaves[name])))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: sasrec.py FIXTURE")
    g = torch.Generator().manual_seed(20181117)
    with open(sys.argv[1], "wb") as f:
        f.write(struct.pack("<III", MAGIC, VERSION, len(CASES)))
        for case in CASES:
            run_case(f, g, case)


if __name__ == "__main__":
    main()
