/* tests/test-reshard-rows.c - core/reshard.c's grm__reshard_load_owned_rows: a checkpoint
 * handed over a piece at a time (a format's load_rows, here a fake one that cuts every
 * tensor into pieces of 7 rows) reaches rank r of M as the rows it owns: a keyed table's
 * ids in one piece, its other row tensors filtered piece by piece, back to back, with the
 * kept rows in file order; an indexed table (no ids) and the other tensors unchanged.
 * Interleaved (the fake's load_rows_interleaved hands a piece of the ids and one of the
 * weight in turn): the same rows, the ids in pieces too, alternating with the weight's,
 * after a first read through load_rows that stops once the ids and the indexed table are
 * known (it never reaches the dense tensor).
 * The expected rows are filtered here with grm__dist_owner_of, the ownership of core/dist.h.
 * A keyed table whose ids come after its rows is refused, in both orders; and, in the
 * second read, a weight piece that skips rows or a weight of more rows than its ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grm/ckpt.h>

#include "dist.h"
#include "harness.h"
#include "pipeline.h"
#include "reshard.h"
#include "tap.h"

#define N 50        /* rows of the keyed table */
#define S 10        /* rows of the indexed table */
#define PIECE 7

static int64_t ids[N];
static float w[N * 3];
static int64_t counters[5] = { 9, 8, 7, 6, 5 };
static float st[S * 2];
static int ids_last;        /* the fake file puts the ids after the weight */
static int handed;          /* pieces the fake's load_rows handed over */
static int reached_dense;   /* ... and whether it got to dense.w */
static int forge;           /* interleaved: 1 skips the weight's second piece, 2 gives the
                             * weight one row more than the ids */

static grm_named_tensor mk(const char *name, void *data, int32_t dtype, int32_t ndim,
                           int64_t d0, int64_t d1)
{
    grm_named_tensor t = { name, { data, dtype, ndim, { d0, d1, 1, 1 }, { GRM_DEVICE_CPU, 0 } } };
    return t;
}

/* The fake format: every tensor in pieces of PIECE rows; interleaved, a piece of the ids
 * and one of the weight in turn (ids_last: the weight's first). */
static grm_status fake_pieces(grm_ckpt_piece_fn visit, void *user, int interleaved)
{
    grm_named_tensor t[5] = {
        mk("emb.item.ids", ids, GRM_DTYPE_I64, 1, N, 1),
        mk("emb.item.weight", w, GRM_DTYPE_F32, 2, N, 3),
        mk("emb.item.counters", counters, GRM_DTYPE_I64, 1, 5, 1),
        mk("emb.stat.weight", st, GRM_DTYPE_F32, 2, S, 2),
        mk("dense.w", st, GRM_DTYPE_F32, 2, 5, 4),
    };
    if (ids_last) {
        grm_named_tensor x = t[0];
        t[0] = t[1];
        t[1] = x;
    }
    for (int i = 0; i < 5; i++) {
        // interleaved: tensors 0 and 1 (as many rows) a piece of each in turn
        const int last = interleaved && i == 0 ? 1 : i;
        const int64_t rows = t[i].tensor.shape[0];
        for (int64_t r0 = 0; r0 < rows; r0 += PIECE) {
            for (int k = i; k <= last; k++) {
                const size_t rb = grm_dtype_size(t[k].tensor.dtype)
                                  * (size_t)t[k].tensor.shape[1];
                grm_named_tensor p = t[k];
                p.tensor.shape[0] = rows - r0 < PIECE ? rows - r0 : PIECE;
                p.tensor.data = (char *)t[k].tensor.data + (size_t)r0 * rb;
                handed += !interleaved;
                reached_dense |= !interleaved && k == 4;
                if (interleaved && k == 1 && forge == 1 && r0 == PIECE) continue;
                grm_status s = visit(user, &p, r0,
                                     interleaved && k == 1 && forge == 2 ? rows + 1 : rows);
                if (s != GRM_OK) return s;
            }
        }
        i = last;
    }
    return GRM_OK;
}

static grm_status fake_load_rows(void *inst, const char *path, grm_ckpt_piece_fn visit,
                                 void *user)
{
    (void)inst;
    (void)path;
    return fake_pieces(visit, user, 0);
}

static grm_status fake_load_rows_interleaved(void *inst, const char *path,
                                             grm_ckpt_piece_fn visit, void *user)
{
    (void)inst;
    (void)path;
    return fake_pieces(visit, user, 1);
}

/* What the rank received: each tensor put back together, pieces checked to be in order. */
typedef struct got {
    int64_t ids[N], nids, ids_pieces, ids_total;
    int64_t turns;              /* pieces of the ids and of the weight that followed the
                                 * other's */
    char last;                  /* 'i' or 'w': the last piece of the two */
    float w[N * 3];
    int64_t wrows, wtotal, w_pieces;
    int64_t stat_rows, dense_rows, counters_ok;
    int bad;
} got;

static grm_status rank_visit(void *user, const grm_named_tensor *t, int64_t row0, int64_t rows)
{
    got *g = user;
    const int64_t m = t->tensor.shape[0];
    if (strcmp(t->name, "emb.item.ids") == 0) {
        g->ids_pieces++;
        g->turns += g->last == 'w';
        g->last = 'i';
        g->bad += row0 != g->nids || row0 + m > rows || rows > N;
        if (g->bad == 0) memcpy(g->ids + row0, t->tensor.data, (size_t)m * sizeof(int64_t));
        g->nids += m;
        g->ids_total = rows;
    } else if (strcmp(t->name, "emb.item.weight") == 0) {
        g->turns += g->last == 'i';
        g->last = 'w';
        g->w_pieces++;
        g->bad += row0 != g->wrows || t->tensor.shape[1] != 3;
        memcpy(g->w + 3 * row0, t->tensor.data, (size_t)m * 3 * sizeof(float));
        g->wrows += m;
        g->wtotal = rows;
    } else if (strcmp(t->name, "emb.item.counters") == 0) {
        g->counters_ok = m == 5 && memcmp(t->tensor.data, counters, sizeof counters) == 0;
    } else if (strcmp(t->name, "emb.stat.weight") == 0) {
        g->bad += row0 != g->stat_rows || rows != S
                  || memcmp(t->tensor.data, st + 2 * row0, (size_t)m * 2 * sizeof(float)) != 0;
        g->stat_rows += m;
    } else {
        g->dense_rows += m;
    }
    return GRM_OK;
}

/* Rank r of M reads the fake file into a cleared *g. */
static grm_status load_as(const grm__pipeline *p, const grm_ckpt_ops *kops, int32_t r,
                          int32_t M, int interleaved, got *g, int64_t *kept, int64_t *dropped)
{
    memset(g, 0, sizeof *g);
    *kept = *dropped = 0;
    return grm__reshard_load_owned_rows(p, kops, NULL, "fake.grm", r, M, interleaved,
                                        rank_visit, g, kept, dropped);
}

/* Ranks 0 and 1 of 2 each read the fake file (interleaved: in both orders); 3 checks. */
static void two_ranks(const grm__pipeline *p, const grm_ckpt_ops *kops, int interleaved)
{
    const char *how = interleaved ? "interleaved" : "a tensor at a time";
    int64_t all = 0;
    for (int32_t r = 0; r < 2; r++) {
        got g;
        int64_t kept, dropped;
        handed = reached_dense = 0;
        grm_status s = load_as(p, kops, r, 2, interleaved, &g, &kept, &dropped);
        // the rows rank r owns, in file order
        int64_t want[N], nw = 0;
        int same = 1;
        for (int i = 0; i < N; i++)
            if (grm__dist_owner_of(ids[i], 0, 2) == r) want[nw++] = i;
        same = g.nids == nw && g.ids_total == nw && g.wrows == nw && g.wtotal == nw;
        for (int64_t k = 0; same && k < nw; k++)
            same = g.ids[k] == ids[want[k]]
                   && memcmp(g.w + 3 * k, w + 3 * want[k], 3 * sizeof(float)) == 0;
        // a tensor at a time: the ids whole, then the weight; interleaved: a piece of each in
        // turn (pieces that keep nothing are dropped, so fewer than the file's 8 each), after
        // a first read that stopped at the indexed table's first piece: the ids and the
        // weight's 8 pieces each, the counters, one piece of emb.stat.weight
        const int order = interleaved ? g.ids_pieces > 1 && g.turns >= 3 && handed == 18
                                        && !reached_dense
                                      : g.ids_pieces == 1 && g.turns == 1;
        char first[64] = "";
        if (interleaved)
            snprintf(first, sizeof first, "; the first read handed over %d pieces", handed);
        tap_ok(s == GRM_OK && same && g.bad == 0 && order && kept == nw && dropped == N - nw,
               "%s: rank %d of 2: the %lld ids it owns in %lld piece%s, their weight rows in "
               "%lld pieces back to back (%lld turns), in file order (%lld kept, %lld "
               "dropped%s)", how, r, (long long)nw, (long long)g.ids_pieces,
               g.ids_pieces > 1 ? "s" : "", (long long)g.w_pieces, (long long)g.turns,
               (long long)kept, (long long)dropped, first);
        tap_ok(g.counters_ok && g.stat_rows == S && g.dense_rows == 5,
               "%s: rank %d: the counters, the indexed table's %d rows and the dense tensor "
               "pass unchanged", how, r, S);
        all += nw;
    }
    tap_ok(all == N, "%s: the two ranks' rows partition the table (%lld of %d)", how,
           (long long)all, N);
}

int main(void)
{
    tap_plan(16);
    for (int i = 0; i < N; i++) {
        ids[i] = 1000 + 37 * i;
        for (int d = 0; d < 3; d++) w[3 * i + d] = (float)(i * 10 + d);
    }
    for (int i = 0; i < S * 2; i++) st[i] = (float)i / 4;
    grm__pipeline p;
    memset(&p, 0, sizeof p);
    char *names[2] = { "item", "stat" };
    p.phys_names = names;
    p.nphys = 2;
    grm_ckpt_ops kops;
    memset(&kops, 0, sizeof kops);
    kops.struct_size = sizeof kops;
    kops.load_rows = fake_load_rows;
    kops.load_rows_interleaved = fake_load_rows_interleaved;

    two_ranks(&p, &kops, 0);
    two_ranks(&p, &kops, 1);

    for (int il = 0; il < 2; il++) {
        got g;
        int64_t kept, dropped;
        grm_status s = load_as(&p, &kops, 0, 1, il, &g, &kept, &dropped);
        tap_ok(s == GRM_OK && g.nids == N && g.wrows == N && kept == N && dropped == 0
               && memcmp(g.w, w, sizeof w) == 0 && memcmp(g.ids, ids, sizeof ids) == 0,
               "%s: one rank of 1 keeps every row", il ? "interleaved" : "a tensor at a time");
    }

    ids_last = 1;
    for (int il = 0; il < 2; il++) {
        got g;
        int64_t kept, dropped;
        grm_status s = load_as(&p, &kops, 0, 2, il, &g, &kept, &dropped);
        tap_ok(s == GRM_EFORMAT && harness_error_has("come after its rows")
               && harness_error_has("grmhost reshard"),
               "%s: ids after their table's rows: GRM_EFORMAT pointing at grmhost reshard",
               il ? "interleaved" : "a tensor at a time");
    }
    ids_last = 0;
    static const char *const forged[3] = { "", "rows from 14 arrive out of order",
                                           "holds 51 rows and its table's ids 50" };
    for (forge = 1; forge <= 2; forge++) {
        got g;
        int64_t kept, dropped;
        grm_status s = load_as(&p, &kops, 0, 1, 1, &g, &kept, &dropped);
        tap_ok(s == GRM_EFORMAT && harness_error_has(forged[forge])
                   && harness_error_has("fake.grm"),
               "interleaved, forged: a weight %s: GRM_EFORMAT naming the file ('%s')",
               forge == 1 ? "piece that skips 7 rows" : "of one row more than its ids",
               forged[forge]);
    }
    return tap_done();
}
