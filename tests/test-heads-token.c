/* tests/test-heads-token.c - head-sampled-softmax with per-token negatives (share_k = 1, and
 * TurboGR's groups share_k = 3 with a partial last group) on the batch's item rows read in
 * place (plugins/head-sampled-softmax/heads_tok.c and its
 * reference ssm_tok_ref): loss, d_pred and the summed item-row gradients against the
 * gathered path (the rows copied out, ssm_share_loss_ref, which tests/test-heads.c holds to
 * torch) with l2norm, logQ, masked negatives, unused slots (row_negatives), weights and
 * grad_scale; blas against ref; a slot out of range refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense-checks.h"
#include "harness.h"
#include "tap.h"

enum { B = 37, r = 6, N = 20, D = 8, R = B * r + 5 };

static const grm_head_ops *ops(void)
{
    return harness_plugin("head-sampled-softmax")->ops;
}

static void *tok_head(const char *impl, int l2norm, int logq, int k)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    char im[32], l[32], lq[32], n[32], sk[32];
    snprintf(sk, sizeof sk, "share_k=%d", k);
    snprintf(im, sizeof im, "impl=%s", impl);
    snprintf(l, sizeof l, "l2norm=%s", l2norm ? "true" : "false");
    snprintf(lq, sizeof lq, "logq=%s", logq ? "true" : "false");
    snprintf(n, sizeof n, "negatives=%d", R);
    const char *kvs[] = { sk, "row_negatives=6", "in_batch=false", "temperature=0.1",
                          im, l, lq, n };
    const void *cfg = NULL;
    void *inst = NULL;
    if (harness_config_try(info, &cfg, kvs, 8) != GRM_OK || ops()->create(cfg, D, 3, &inst)) {
        printf("Bail out! token head: %s\n", grm_last_error());
        exit(1);
    }
    return inst;
}

typedef struct tok_data {
    float items[N * D], pred[B * D], w[B];
    int64_t ids[N], counts[N], pslot[B], pid[B], nslot[R], nid[R];
} tok_data;

/* Unique rows with ids 500 + slot; targets random; negatives drawn by the head (its logQ)
 * and mapped to slots by id. */
static void tok_fill(tok_data *d, void *head, uint64_t seed)
{
    uint64_t s = seed;
    for (int i = 0; i < N * D; i++) d->items[i] = harness_randf(&s);
    for (int i = 0; i < B * D; i++) d->pred[i] = harness_randf(&s) * 1.5f;
    for (int i = 0; i < N; i++) {
        d->ids[i] = 500 + i;
        d->counts[i] = 1 + i % 4;
    }
    for (int b = 0; b < B; b++) {
        d->pslot[b] = (int64_t)(harness_rand(&s) % N);
        d->pid[b] = d->ids[d->pslot[b]];
        d->w[b] = 0.5f + (float)(harness_rand(&s) % 3) * 0.5f;
    }
    const grm_catalog cat = { N, d->ids, d->counts };
    int64_t got = 0;
    if (ops()->negatives(head, d->nid, &got, R, &cat, seed) != GRM_OK || got != R) {
        printf("Bail out! negatives: %s\n", grm_last_error());
        exit(1);
    }
    for (int j = 0; j < R; j++) d->nslot[j] = d->nid[j] - 500;
}

/* The rows gathered (io->pos, io->neg; the host path of ABI 1.4) and their gradients summed
 * by slot here, times grad_scale. */
static grm_status gathered(void *h, const tok_data *d, float gs, double *loss, float *dp,
                           float *drows)
{
    static float pos[B * D], neg[R * D], dpos[B * D], dneg[R * D];
    for (int b = 0; b < B; b++) memcpy(pos + b * D, d->items + d->pslot[b] * D, D * 4);
    for (int j = 0; j < R; j++) memcpy(neg + j * D, d->items + d->nslot[j] * D, D * 4);
    grm_loss_io io;
    memset(&io, 0, sizeof io);
    io.struct_size = sizeof io;
    io.rows = B;
    io.dim = D;
    io.pred = d->pred;
    io.d_pred = dp;
    io.weights = d->w;
    io.pos = pos;
    io.d_pos = dpos;
    io.pos_ids = d->pid;
    io.neg = neg;
    io.d_neg = dneg;
    io.neg_ids = d->nid;
    io.nneg = R;
    io.grad_scale = gs;
    grm_status st = ops()->loss(h, &io);
    *loss = io.loss;
    memset(drows, 0, N * D * 4);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < D; k++) drows[d->pslot[b] * D + k] += dpos[b * D + k];
    for (int j = 0; j < R; j++)
        for (int k = 0; k < D; k++) drows[d->nslot[j] * D + k] += dneg[j * D + k];
    return st;
}

/* The rows in place (io->item_rows); d_item_rows starts at 1 so the add is checked too. */
static grm_status in_place(void *h, const tok_data *d, float gs, double *loss, float *dp,
                           float *drows)
{
    grm_loss_io io;
    memset(&io, 0, sizeof io);
    io.struct_size = sizeof io;
    io.rows = B;
    io.dim = D;
    io.pred = d->pred;
    io.d_pred = dp;
    io.weights = d->w;
    io.pos_ids = d->pid;
    io.neg_ids = d->nid;
    io.nneg = R;
    io.grad_scale = gs;
    io.item_rows = d->items;
    io.d_item_rows = drows;
    io.nitems = N;
    io.pos_slots = d->pslot;
    io.neg_slots = d->nslot;
    for (int i = 0; i < N * D; i++) drows[i] = 1.0f;
    grm_status st = ops()->loss(h, &io);
    for (int i = 0; i < N * D; i++) drows[i] -= 1.0f;
    *loss = io.loss;
    return st;
}

/* 4 checks: the in-place path of impl against the gathered reference path. */
static void test_case(const char *impl, int l2norm, int logq, int k)
{
    void *hg = tok_head("ref", l2norm, logq, k), *hp = tok_head(impl, l2norm, logq, k);
    static tok_data d;
    tok_fill(&d, hg, 17 + (uint64_t)l2norm);
    int64_t again = 0;   // the same draw for the second head (its logQ state)
    const grm_catalog cat = { N, d.ids, d.counts };
    ops()->negatives(hp, d.nid, &again, R, &cat, 17 + (uint64_t)l2norm);
    static float dpg[B * D], dpp[B * D], drg[N * D], drp[N * D];
    double lg = 0, lp = 0;
    grm_status st = gathered(hg, &d, 0.5f, &lg, dpg, drg);
    grm_status st2 = in_place(hp, &d, 0.5f, &lp, dpp, drp);
    char name[96];
    snprintf(name, sizeof name, "share_k = %d in place (%s, l2norm %d, logq %d)", k, impl,
             l2norm, logq);
    tap_ok(st == GRM_OK && st2 == GRM_OK && fabs(lg - lp) <= 1e-5 * fabs(lg),
           "%s: loss %.9g = gathered %.9g (%s)", name, lp, lg,
           st2 == GRM_OK ? "ok" : grm_last_error());
    char what[160];
    snprintf(what, sizeof what, "%s: d_pred x grad_scale", name);
    tap_close_f32(dpp, dpg, B * D, 1e-4, 1e-5, what);
    snprintf(what, sizeof what, "%s: item-row gradients summed by slot, added", name);
    tap_close_f32(drp, drg, N * D, 1e-4, 1e-5, what);
    int nz = 0;
    for (int i = 0; i < N * D; i++) nz += drp[i] != 0.0f;
    tap_ok(nz > N * D / 2, "%s: the rows' gradients are not empty (%d of %d nonzero)", name, nz,
           N * D);
    ops()->destroy(hg);
    ops()->destroy(hp);
}

static void test_bad_slot(void)
{
    void *h = tok_head("blas", 0, 0, 1);
    static tok_data d;
    tok_fill(&d, h, 5);
    d.nslot[40] = N;
    static float dp[B * D], dr[N * D];
    double l = 0;
    dc_expect(in_place(h, &d, 1.0f, &l, dp, dr), GRM_EINVAL, "outside [0, 20)",
              "share_k = 1 in place: a negative's slot past nitems");
    ops()->destroy(h);
}

int main(void)
{
    tap_plan(6 * 4 + 1);
    test_case("blas", 1, 1, 1);
    test_case("ref", 1, 1, 1);
    test_case("blas", 0, 0, 1);
    test_case("ref", 0, 1, 1);
    test_case("blas", 1, 1, 3);
    test_case("ref", 0, 1, 3);
    test_bad_slot();
    return tap_done();
}
