/* core/eval.c - evaluation. Retrieval: leave-one-out, every evaluated user's held-out item
 * ranked against the whole catalog (history excluded, ties by id), HR@K, NDCG@K and MRR
 * beside the most-popular baseline. Ranking: AUC, GAUC (MTGRBoost §6.1) and logloss per task
 * beside the constant prior. Sharded over the ranks; the lookups are collective. */
#include "route.h"
#include "train.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- evaluation: leave-one-out, full ranking over the catalog ---- */

typedef struct rank_ctx {
    grm__trainer *t;
    int want_ts, want_rank;    /* take the targets' scores; count the items above them */
    const int64_t *users, *hist_end;   /* [b] the batch's users and their history ends */
    /* [b] where each user's history and then target start in hci, the catalog indices of
     * the share's histories and targets (-1: not in the catalog) */
    const int64_t *hs;
    const int32_t *hci;
    int64_t c0, cc;            /* the catalog chunk [c0, c0 + cc) the scores hold */
    float *ts;                 /* [b] the targets' scores */
    int64_t *ranks;            /* [b] items ranked above each target so far */
    /* several chunks in one pass (see evaluate): before the target's chunk, a user's items
     * are counted against the band [lo, hi] its target's exact score lies in; those inside
     * it are kept, up to EVAL_BAND a user, and counted once the score is known. NULL lo:
     * every chunk against the exact score, which is then known. */
    const float *lo, *hi;      /* [b] */
    float *bs;                 /* [b, EVAL_BAND] the kept items' scores */
    int32_t *bn;               /* [b] items kept; -1: counted again in a second pass */
    const float *q;            /* [b, D] queries score_rank_range multiplies; NULL: scored */
} rank_ctx;

/* Users one product scores, which rank_range then counts while their scores are in the
 * cache. OpenBLAS packs the chunk's rows once a product, so fewer users a product pay more
 * packing (blocks of 4 took 17-19 s a split below, of 16 4.1-4.5 s), and more spill their
 * scores out of the cache (64 users of 46,138 items are 11.8 MB). Each thread makes its
 * own products: one product of the whole batch on one thread, then ranked on all, left the
 * other cores idle through it (50,000 users, 46,138 items, dim 16, 2 threads: 5.1-6.4 s a
 * split before, 3.4-4.4 s now, three alternated pairs; on one thread the two take the
 * same time; bench/README.md, 2026-11-29). */
#define EVAL_BLOCK 64

/* Items a user keeps inside its band. The band is about 2^-17 of the scores' scale wide at
 * dim 128, a few items of a catalog of 10^5-10^6 at most; a user with more (a model whose
 * scores tie) takes a second pass over the catalog instead. */
#define EVAL_BAND 16

/* User k of c: its history's catalog indices, *nh of them, then its target's (*h)[*nh]. */
static const int32_t *user_items(const rank_ctx *c, int64_t k, int64_t *nh)
{
    *nh = c->hist_end[k] - c->t->ds->offsets[c->users[k]];
    return c->hci + c->hs[k];
}

int64_t grm__eval_catalog_index(const grm__dataset *ds, int64_t id)
{
    int64_t lo = 0, hi = ds->ncatalog - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (ds->catalog_ids[mid] == id) return mid;
        if (ds->catalog_ids[mid] < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* The counts below run over every item of the catalog for every user: at -O2 (without
 * GRM__HOT_LOOP) they ran scalar, a compare and a setcc an item, 55% of an evaluation's
 * time at dim 64 against the product's 34%. */

/* Items of sc [n] scoring above x. */
static GRM__HOT_LOOP int64_t count_above(const float *sc, int64_t n, float x)
{
    int64_t r = 0;
    for (int64_t j = 0; j < n; j++) r += sc[j] > x;
    return r;
}

/* Items of sc [n] scoring x or more. */
static GRM__HOT_LOOP int64_t count_from(const float *sc, int64_t n, float x)
{
    int64_t r = 0;
    for (int64_t j = 0; j < n; j++) r += sc[j] >= x;
    return r;
}

/* Items of sc [n] scoring above hi; *from_lo gets those scoring lo or more. */
static GRM__HOT_LOOP int64_t count_band(const float *sc, int64_t n, float lo, float hi,
                                   int64_t *from_lo)
{
    int64_t above = 0, from = 0;
    for (int64_t j = 0; j < n; j++) {
        above += sc[j] > hi;
        from += sc[j] >= lo;
    }
    *from_lo = from;
    return above;
}

/* User k's chunk scores sc [cc] before its target's chunk: the items above the band (so
 * above the target's score) counted, those inside it kept. */
static int64_t rank_band(rank_ctx *c, int64_t k, const float *sc)
{
    const float lo = c->lo[k], hi = c->hi[k];
    const int64_t cc = c->cc;
    int64_t from_lo;
    const int64_t above = count_band(sc, cc, lo, hi, &from_lo);
    if (from_lo == above || c->bn[k] < 0) return above;
    int32_t m = c->bn[k];
    for (int64_t j = 0; j < cc && m >= 0; j++) {
        if (!(sc[j] >= lo && sc[j] <= hi)) continue;
        if (m == EVAL_BAND) {
            m = -1;
            break;
        }
        c->bs[k * EVAL_BAND + m++] = sc[j];
    }
    c->bn[k] = m;
    return above;
}

/* Users [lo, hi) of a batch against the catalog chunk in t->ev.scores: the target's score
 * when the target is in the chunk (want_ts), then (want_rank) the chunk's items that rank
 * above it, history excluded, ties by id. A rank is the sum over the chunks. */
static grm_status rank_range(void *vctx, int64_t lo, int64_t hi)
{
    rank_ctx *c = vctx;
    grm__trainer *t = c->t;
    const int64_t c0 = c->c0, cc = c->cc;
    for (int64_t k = lo; k < hi; k++) {
        int64_t nh;
        const int32_t *h = user_items(c, k, &nh);
        const int64_t ti = h[nh];
        float *sc = t->ev.scores + k * cc;
        if (c->want_ts && ti >= c0 && ti < c0 + cc) {
            c->ts[k] = sc[ti - c0];
            /* the band must hold the exact score, or the counts before were not exact */
            if (c->lo && isfinite(c->ts[k]) && !(c->ts[k] >= c->lo[k] && c->ts[k] <= c->hi[k]))
                c->bn[k] = -1;
        }
        if (!c->want_rank) continue;
        /* items already in the user's history are not candidates */
        for (int64_t j = 0; j < nh; j++)
            if (h[j] >= c0 && h[j] < c0 + cc && h[j] != ti) sc[h[j] - c0] = -FLT_MAX;
        if (c->lo && ti >= c0 + cc) {       /* the target's chunk comes later */
            c->ranks[k] += rank_band(c, k, sc);
            continue;
        }
        const float ts = c->ts[k];
        /* a non-finite score (a diverged model) ranks last, C (set by the caller): a miss at
         * every K, never a hit because no comparison with NaN holds; NaN candidates likewise
         * never outrank. Ties rank the lower catalog index first. */
        if (!isfinite(ts)) continue;
        if (c0 + cc <= ti) c->ranks[k] += count_from(sc, cc, ts);
        else if (c0 > ti) c->ranks[k] += count_above(sc, cc, ts);
        else c->ranks[k] += count_from(sc, ti - c0, ts)
                            + count_above(sc + (ti - c0) + 1, c0 + cc - ti - 1, ts);
    }
    return GRM_OK;
}

/* Users [lo, hi) of a batch: their scores against the chunk, EVAL_BLOCK users' queries a
 * product (on the CPU backends: a thread's own; otherwise the batch's were made already),
 * each block ranked while its scores are still in the cache (rank_range). */
static grm_status score_rank_range(void *vctx, int64_t lo, int64_t hi)
{
    rank_ctx *c = vctx;
    grm__trainer *t = c->t;
    const int64_t cc = c->cc;
    const int32_t D = t->p->tables[t->item_table].dim;
    for (int64_t k0 = lo; k0 < hi; k0 += EVAL_BLOCK) {
        const int64_t m = hi - k0 < EVAL_BLOCK ? hi - k0 : EVAL_BLOCK;
        grm_status st = GRM_OK;
        if (c->q)
            st = t->be.iface->gemm(t->be.context, 0, 1, m, cc, D, 1.0f, c->q + k0 * D, D,
                                   t->ev.cat_rows, D, 0.0f, t->ev.scores + k0 * cc, cc, NULL);
        if (st == GRM_OK) st = rank_range(c, k0, k0 + m);
        if (st != GRM_OK) return st;
    }
    return GRM_OK;
}

typedef struct pop_key {
    float count;
    int64_t item;              /* catalog index */
} pop_key;

static int by_popularity(const void *a, const void *b)
{
    const pop_key *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return (x->item > y->item) - (x->item < y->item);
}

/* The most-popular baseline's ranks of users [0, n) (histories and targets as rank_ctx's
 * hs, hci): every user scores an item by its training count, the same for all, so the
 * catalog is sorted once (count descending, ties by catalog index, as the model's ranks
 * break them) and a target's rank is its place in that order less the distinct items of
 * its history placed before it. It scored every item of every chunk for every user, as the
 * model's ranks do. */
static grm_status rank_popular(grm__trainer *t, const rank_ctx *rc, int64_t n, int64_t *ranks)
{
    const grm__dataset *ds = t->ds;
    const int64_t C = ds->ncatalog;
    pop_key *order = xalloc((size_t)(C + 1) * sizeof *order);
    int64_t *pos = xalloc((size_t)(C + 1) * sizeof *pos);
    int64_t most = 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t nh;
        user_items(rc, i, &nh);
        if (nh > most) most = nh;
    }
    int64_t *before = xalloc((size_t)most * sizeof *before);
    if (!order || !pos || !before) {
        grm__free(CPU, order);
        grm__free(CPU, pos);
        grm__free(CPU, before);
        return GRM_ENOMEM;
    }
    for (int64_t j = 0; j < C; j++) order[j] = (pop_key){ (float)ds->catalog_counts[j], j };
    qsort(order, (size_t)C, sizeof *order, by_popularity);
    for (int64_t r = 0; r < C; r++) pos[order[r].item] = r;
    for (int64_t i = 0; i < n; i++) {
        int64_t nh;
        const int32_t *h = user_items(rc, i, &nh);
        const int64_t ti = h[nh];
        if (ti < 0) {
            ranks[i] = C;
            continue;
        }
        int64_t m = 0;
        for (int64_t j = 0; j < nh; j++)
            if (h[j] >= 0 && h[j] != ti && pos[h[j]] < pos[ti]) before[m++] = pos[h[j]];
        qsort(before, (size_t)m, sizeof *before, grm__cmp_i64);
        int64_t distinct = m > 0;
        for (int64_t j = 1; j < m; j++) distinct += before[j] != before[j - 1];
        ranks[i] = pos[ti] - distinct;
    }
    grm__free(CPU, order);
    grm__free(CPU, pos);
    grm__free(CPU, before);
    return GRM_OK;
}

/* Evaluation is sharded over the ranks: rank r scores its contiguous share [*lo, *hi) of
 * n items (users or rows) in *nb batches of at most EB, the same *nb on every rank because
 * the lookups are collective (a rank past its share looks up nothing). With input =
 * sharded, n counts this rank's own items, all of them its share, and *nb is the most
 * any rank needs. */
static grm_status eval_share(const grm__trainer *t, int64_t n, int64_t EB, int64_t *lo, int64_t *hi,
                             int64_t *nb)
{
    if (t->sharded) {
        const grm_comm_handle *c = &t->p->comm_handle;
        *lo = 0;
        *hi = n;
        *nb = (n + EB - 1) / EB;
        grm_status st = c->ops->allreduce(c->inst, nb, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX);
        if (st != GRM_OK) grm_error_prefix("evaluation: agreeing on the batches: ");
        return st;
    }
    const int64_t N = t->nranks, per = (n + N - 1) / N;
    *lo = n * t->rank / N;
    *hi = n * (t->rank + 1) / N;
    *nb = (per + EB - 1) / EB;
    return GRM_OK;
}

/* Every rank's `bytes` bytes at `mine`, in rank order, into all [nranks * bytes]. */
static grm_status gather_bytes(grm__trainer *t, void *all, const void *mine, size_t bytes)
{
    grm_status st = grm__gather_bytes(&t->p->comm_handle, all, mine, bytes);
    if (st != GRM_OK) grm_error_prefix("evaluation: gathering the ranks' results: ");
    return st;
}

/* The ranks' accumulators summed in rank order, on every rank. */
static grm_status merge_accs(grm__trainer *t, grm__rank_acc *acc)
{
    if (t->nranks == 1) return GRM_OK;
    grm__rank_acc *all = calloc((size_t)t->nranks, sizeof *all);
    if (!all) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm_status st = gather_bytes(t, all, acc, sizeof *acc);
    if (st == GRM_OK) {
        grm__rank_acc sum = all[0];
        for (int32_t r = 1; r < t->nranks; r++) grm__rank_acc_merge(&sum, &all[r]);
        *acc = sum;
    }
    free(all);
    return st;
}

/* Rows of the n items ids into rows [n, D] through keys [n] (collective with several
 * ranks), in the head's form: ranked by a dot product with the query, so evaluation ranks
 * as the head's logits do (a cosine head's rows normalised). */
static grm_status item_rows(grm__trainer *t, const int64_t *ids, int64_t n, int64_t *keys,
                            float *rows)
{
    grm__pipeline *p = t->p;
    grm_status st = grm__sparse_plan_encode(p->plan, t->item_table, keys, ids, n);
    if (st == GRM_OK && t->sp.dist)
        st = grm__dist_lookup(t->sp.dist, t->item_phys, keys, NULL, n, 0, rows, 0);
    else if (st == GRM_OK)
        st = t->sp.eops->lookup(p->emb.inst, rows, t->item_phys, keys, n, 0);
    if (st == GRM_OK)
        st = grm__head_score_rows(&t->dn.head, rows, n, p->tables[t->item_table].dim);
    return st;
}

/* Catalog items [c0, c0 + n) into t->ev.cat_rows [n, D]. */
static grm_status catalog_rows(grm__trainer *t, int64_t c0, int64_t n)
{
    return item_rows(t, t->ds->catalog_ids + c0, n, t->ev.cat_keys, t->ev.cat_rows);
}

/* The buffers of the catalog and the scores for chunks of cc items. */
static grm_status eval_buffers(grm__trainer *t, int64_t cc)
{
    const grm__pipeline *p = t->p;
    const grm__dataset *ds = t->ds;
    const int32_t D = t->ranking ? (int32_t)ds->ntasks : p->tables[t->item_table].dim;
    void *bufs[] = { t->ev.cat_keys, t->ev.cat_rows, t->ev.scores };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) grm__free(CPU, bufs[i]);
    t->ev.cat_keys = xalloc((size_t)(cc ? cc : 1) * sizeof(int64_t));
    t->ev.cat_rows = xalloc((size_t)(cc * D) * sizeof(float));
    t->ev.scores = xalloc((size_t)(p->set.eval_batch * cc) * sizeof(float));
    t->ev.chunk = cc;
    if (!t->ev.cat_keys || !t->ev.cat_rows || !t->ev.scores) return GRM_ENOMEM;
    return GRM_OK;
}

grm_status grm__eval_catalog_rows(grm__trainer *t, int64_t c0, int64_t n)
{
    GRM_ASSERT(n <= t->ev.chunk && c0 >= 0 && c0 + n <= t->ds->ncatalog);
    return catalog_rows(t, c0, n);
}

grm_status grm__eval_catalog(grm__trainer *t)
{
    const int64_t C = t->ds->ncatalog;
    grm_status st = t->ev.chunk < C ? eval_buffers(t, C) : GRM_OK;
    return st == GRM_OK ? catalog_rows(t, 0, C) : st;
}

grm_status grm__eval_queries(grm__trainer *t, const float **q)
{
    grm__pipeline *p = t->p;
    const int64_t b = t->eb.b;
    const int32_t D = p->tables[t->item_table].dim, L = p->ndense;
    grm_status st;
    *q = NULL;
    if ((st = grm__batch_assemble_ids(t, &t->eb, 0)) != GRM_OK
        || (st = grm__embed_batch(t, &t->eb, 0)) != GRM_OK)
        return st;
    if (b == 0) return GRM_OK;
    if ((st = grm__dense_forward(t, &t->eb, 0, t->step)) != GRM_OK) return st;
    *q = t->dn.acts[L];
    if (t->seqmode) {   /* a sequence's query is its last token's output */
        const int64_t *off = t->eb.foff[p->seq_feature];
        for (int64_t k = 0; k < b; k++) {
            if (off[k + 1] > off[k])
                memcpy(t->ev.queries + k * D, t->dn.acts[L] + (off[k + 1] - 1) * D,
                       (size_t)D * sizeof(float));
            else
                memset(t->ev.queries + k * D, 0, (size_t)D * sizeof(float));
        }
        *q = t->ev.queries;
    }
    return GRM_OK;
}

/* The queries of rc's users [i0, i0 + b) into *q [b, D] (collective: every rank calls, b
 * possibly 0). */
static grm_status batch_queries(grm__trainer *t, const rank_ctx *rc, int64_t i0, int64_t b,
                                const float **q)
{
    memcpy(t->eb.users, rc->users + i0, (size_t)b * sizeof *rc->users);
    memcpy(t->eb.hist_end, rc->hist_end + i0, (size_t)b * sizeof *rc->hist_end);
    t->eb.b = b;
    return grm__eval_queries(t, q);
}

/* The queries of users [0, n) of rc (this rank's share) into Q [n, D], in nb batches of
 * eval_batch, and the band rc->lo/hi its target's exact score lies in: the score the chunk's
 * product will give is sum_d q_d r_d in float, in an order the backend's gemm chooses, so it
 * is within (D + 2) u sum_d |q_d r_d| of the exact sum (u = 2^-24; Higham, "Accuracy and
 * Stability of Numerical Algorithms", 2nd ed., §3.1, for any order of summation), which is
 * computed here in double from the target's own row. The bound is checked when the exact
 * score is seen (rank_range), so a backend that rounds more only costs a second pass. */
static grm_status share_queries(grm__trainer *t, rank_ctx *rc, int64_t n, int64_t nb, float *Q,
                                float *lo, float *hi)
{
    const grm__dataset *ds = t->ds;
    const int64_t EB = t->p->set.eval_batch;
    const int32_t D = t->p->tables[t->item_table].dim;
    int64_t *ids = xalloc((size_t)EB * sizeof *ids), *keys = xalloc((size_t)EB * sizeof *keys);
    float *rows = xalloc((size_t)(EB * D) * sizeof *rows);
    grm_status st = ids && keys && rows ? GRM_OK : GRM_ENOMEM;
    const double rel = (D + 2) * 0x1p-24 / (1 - (D + 2) * 0x1p-24) * (1 + 0x1p-20);
    for (int64_t ib = 0; ib < nb && st == GRM_OK; ib++) {
        if ((st = grm__poll_stop(t)) != GRM_OK) break;
        const int64_t i0 = ib * EB < n ? ib * EB : n;
        const int64_t b = n - i0 < EB ? n - i0 : EB;
        const float *q;
        if ((st = batch_queries(t, rc, i0, b, &q)) != GRM_OK) break;
        if (b > 0) memcpy(Q + i0 * D, q, (size_t)(b * D) * sizeof *q);
        /* the targets' rows (a target outside the catalog is ranked last: any row will do) */
        for (int64_t k = 0; k < b; k++) {
            int64_t nh;
            const int64_t ti = user_items(rc, i0 + k, &nh)[nh];
            ids[k] = ds->catalog_ids[ti >= 0 ? ti : 0];
        }
        if ((st = item_rows(t, ids, b, keys, rows)) != GRM_OK) break;   /* collective */
        for (int64_t k = 0; k < b; k++) {
            const float *qk = Q + (i0 + k) * D, *r = rows + k * D;
            double s = 0, a = 0;
            for (int32_t d = 0; d < D; d++) {
                s += (double)qk[d] * (double)r[d];
                a += fabs((double)qk[d] * (double)r[d]);
            }
            const double e = rel * a + (D + 2) * 0x1p-149;     /* and the underflows */
            lo[i0 + k] = nextafterf((float)(s - e), -INFINITY);
            hi[i0 + k] = nextafterf((float)(s + e), INFINITY);
        }
        grm__scratch_reset();
    }
    grm__free(CPU, ids);
    grm__free(CPU, keys);
    grm__free(CPU, rows);
    return st;
}

/* One pass of users [0, n) of rc over the catalog's chunks: each chunk looked up, then each
 * batch of users scored against it (their queries Q, or with one chunk made here) and
 * ranked (rank_range, in rc's mode). */
static grm_status rank_chunks(grm__trainer *t, const rank_ctx *rc, int64_t n, int64_t nb,
                              const float *Q)
{
    const int64_t C = t->ds->ncatalog, EB = t->p->set.eval_batch, CC = t->ev.chunk;
    const int32_t D = t->p->tables[t->item_table].dim;
    grm_status st = GRM_OK;
    for (int64_t c0 = 0; c0 < C && st == GRM_OK; c0 += CC) {
        const int64_t cc = C - c0 < CC ? C - c0 : CC;
        if ((st = catalog_rows(t, c0, cc)) != GRM_OK) break;
        for (int64_t ib = 0; ib < nb; ib++) {
            if ((st = grm__poll_stop(t)) != GRM_OK) break;
            const int64_t i0 = ib * EB < n ? ib * EB : n;
            const int64_t b = n - i0 < EB ? n - i0 : EB;
            const float *q = Q ? Q + i0 * D : NULL;   /* [b, D] queries */
            if (!Q && (st = batch_queries(t, rc, i0, b, &q)) != GRM_OK) break;
            if (b == 0) {   /* past this rank's share: lookups only */
                grm__scratch_reset();
                continue;
            }
            /* on a device backend, one product for the batch; on the host, a block of
             * users a thread (score_rank_range) */
            const int host = grm__backend_on_host(&t->be);
            if (!host && (st = t->be.iface->gemm(t->be.context, 0, 1, b, cc, D, 1.0f, q, D,
                                                  t->ev.cat_rows, D, 0.0f, t->ev.scores, cc,
                                                  NULL)) != GRM_OK)
                break;
            rank_ctx r = *rc;
            r.q = host ? q : NULL;
            r.users += i0;
            r.hist_end += i0;
            r.hs += i0;
            r.ts += i0;
            r.ranks += i0;
            r.c0 = c0;
            r.cc = cc;
            if (r.lo) {
                r.lo += i0;
                r.hi += i0;
                r.bs += i0 * EVAL_BAND;
                r.bn += i0;
            }
            const int64_t nt = grm__num_threads(), per = (b + nt - 1) / nt;
            if ((st = grm__parallel_for(b, per < EVAL_BLOCK ? per : EVAL_BLOCK,
                                        score_rank_range, &r)) != GRM_OK)
                break;
            grm__scratch_reset();
        }
    }
    return st;
}

/* After a banded pass: the kept items counted against the exact scores. The users whose band
 * was too narrow or too full are ranked again, every rank's at once: one more pass over the
 * chunks (collective lookups) whose products take only their queries. */
static grm_status settle_bands(grm__trainer *t, rank_ctx *rc, int64_t n, const float *Q)
{
    const int64_t EB = t->p->set.eval_batch;
    const int32_t D = t->p->tables[t->item_table].dim;
    int64_t again = 0, most;
    for (int64_t i = 0; i < n; i++) {
        if (rc->bn[i] < 0) {
            again++;
            continue;
        }
        /* a kept item comes before the target in the catalog: a tie ranks it above */
        for (int32_t e = 0; e < rc->bn[i]; e++)
            rc->ranks[i] += rc->bs[i * EVAL_BAND + e] >= rc->ts[i];
    }
    most = again;
    if (t->nranks > 1) {
        const grm_comm_handle *c = &t->p->comm_handle;
        grm_status st = c->ops->allreduce(c->inst, &most, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX);
        if (st != GRM_OK) {
            grm_error_prefix("evaluation: agreeing on a second pass: ");
            return st;
        }
    }
    if (most == 0) return GRM_OK;
    grm__log(GRM_LOG_DEBUG, "grmhost", "evaluation: %lld users' targets score among more than "
             "%d items within rounding; ranking them against the catalog a second time",
             (long long)again, EVAL_BAND);
    const int64_t a1 = again + 1;
    int64_t *users = xalloc((size_t)a1 * sizeof *users), *hend = xalloc((size_t)a1 * sizeof *hend);
    int64_t *hs = xalloc((size_t)a1 * sizeof *hs), *at = xalloc((size_t)a1 * sizeof *at);
    int64_t *ranks = xalloc((size_t)a1 * sizeof *ranks);
    float *ts = xalloc((size_t)a1 * sizeof *ts), *q = xalloc((size_t)(a1 * D) * sizeof *q);
    grm_status st = users && hend && hs && ranks && at && ts && q ? GRM_OK : GRM_ENOMEM;
    for (int64_t i = 0, m = 0; st == GRM_OK && i < n; i++) {
        if (rc->bn[i] >= 0) continue;
        at[m] = i;
        users[m] = rc->users[i];
        hend[m] = rc->hist_end[i];
        hs[m] = rc->hs[i];
        ts[m] = rc->ts[i];
        ranks[m] = 0;
        memcpy(q + m++ * D, Q + i * D, (size_t)D * sizeof *q);
    }
    if (st == GRM_OK) {
        rank_ctx exact = { .t = t, .want_rank = 1, .users = users, .hist_end = hend,
                           .hs = hs, .hci = rc->hci, .ts = ts, .ranks = ranks };
        st = rank_chunks(t, &exact, again, (again + EB - 1) / EB, q);
    }
    for (int64_t m = 0; st == GRM_OK && m < again; m++) rc->ranks[at[m]] = ranks[m];
    void *bufs[] = { users, hend, hs, ranks, at, ts, q };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) grm__free(CPU, bufs[i]);
    return st;
}

/* Rank the split's targets for the evaluated users (this rank's share); the results of all
 * ranks into acc (and pop). The catalog is scored a chunk at a time (t->ev.chunk items,
 * [train] eval_memory_mb of rows and scores): a user's rank is the sum over the chunks of
 * the items above its target, so a catalog larger than memory (a tiered table) is ranked
 * without holding its rows. A catalog of one chunk is looked up once and each batch's
 * queries meet it once. With several, the share's queries are made first, with the band
 * around each target's score (share_queries); then one pass over the chunks counts, before
 * a target's chunk, the items above its band and keeps those inside it, and from that chunk
 * on, with the exact score known, the items above it (rank_range); the kept items are
 * counted last (settle_bands). Each chunk is looked up and multiplied once, where it was
 * twice (a pass for the targets' scores, then one to count above them): `grmhost eval` of
 * synthetic-tiered-large's step 100 (40,000 users, 298,577 items in 14 chunks, both splits)
 * took 3:17 before and 2:08 after on 2 cores, every metric bitwise the same; 225 of the
 * 40,000 users of its barely trained model took the second pass. */
static grm_status evaluate(grm__trainer *t, int split, grm__rank_acc *acc, grm__rank_acc *pop)
{
    grm__pipeline *p = t->p;
    grm__dataset *ds = t->ds;
    grm_status st;
    const int64_t C = ds->ncatalog, EB = p->set.eval_batch, CC = t->ev.chunk;
    const int32_t D = p->tables[t->item_table].dim;
    const int64_t nch = CC > 0 ? (C + CC - 1) / CC : 0;
    grm__rank_acc_init(acc, &p->set.topk);
    if (pop) grm__rank_acc_init(pop, &p->set.topk);
    int64_t ne = 0, lo, hi, nb;
    for (int64_t u = 0; u < ds->nusers; u++) ne += ds->has_eval[u];
    if ((st = eval_share(t, ne, EB, &lo, &hi, &nb)) != GRM_OK) return st;
    /* this rank's share of the evaluated users, in order, their targets' scores and ranks;
     * with several chunks, their queries and bands */
    const int64_t n = hi - lo, n1 = n + 1;
    const int banded = nch > 1;
    int64_t *users = xalloc((size_t)n1 * sizeof *users);
    int64_t *hend = xalloc((size_t)n1 * sizeof *hend);
    int64_t *hs = xalloc((size_t)n1 * sizeof *hs);
    int32_t *hci = NULL;
    int64_t *ranks = xalloc((size_t)n1 * sizeof *ranks);
    float *ts = xalloc((size_t)n1 * sizeof *ts);
    float *Q = banded ? xalloc((size_t)(n * D + 1) * sizeof *Q) : NULL;
    float *blo = banded ? xalloc((size_t)n1 * sizeof *blo) : NULL;
    float *bhi = banded ? xalloc((size_t)n1 * sizeof *bhi) : NULL;
    float *bs = banded ? xalloc((size_t)(n1 * EVAL_BAND) * sizeof *bs) : NULL;
    int32_t *bn = banded ? xalloc((size_t)n1 * sizeof *bn) : NULL;
    if (!users || !hend || !hs || !ranks || !ts || (banded && (!Q || !blo || !bhi || !bs || !bn))) {
        st = GRM_ENOMEM;
        goto out;
    }
    int64_t nci = 0;
    for (int64_t u = 0, seen = 0, i = 0; u < ds->nusers && seen < hi; u++) {
        if (!ds->has_eval[u] || seen++ < lo) continue;
        users[i] = u;
        hs[i] = nci;
        hend[i] = ds->train_end[u] + split;
        nci += hend[i++] - ds->offsets[u] + 1;
    }
    /* the catalog indices of their histories and targets, looked up once, not per chunk */
    if (C > INT32_MAX) {
        st = grm_errorf(GRM_ENOTSUP, "evaluation: a catalog of %lld items; at most %d are "
                        "ranked", (long long)C, INT32_MAX);
        goto out;
    }
    if (!(hci = xalloc((size_t)(nci + 1) * sizeof *hci))) {
        st = GRM_ENOMEM;
        goto out;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = ds->offsets[users[i]], m = hs[i]; j <= hend[i]; j++)
            hci[m++] = (int32_t)grm__eval_catalog_index(ds, ds->items[j]);
    memset(ranks, 0, (size_t)n * sizeof *ranks);
    for (int64_t i = 0; i < n; i++) ts[i] = NAN;
    rank_ctx rc = { .t = t, .want_ts = 1, .want_rank = 1, .users = users, .hist_end = hend,
                    .hs = hs, .hci = hci, .ts = ts, .ranks = ranks };
    if (banded) {
        memset(bn, 0, (size_t)n * sizeof *bn);
        rc.lo = blo;
        rc.hi = bhi;
        rc.bs = bs;
        rc.bn = bn;
        st = share_queries(t, &rc, n, nb, Q, blo, bhi);
    }
    if (st == GRM_OK && nch > 0) st = rank_chunks(t, &rc, n, nb, Q);
    if (st == GRM_OK && banded) st = settle_bands(t, &rc, n, Q);
    int64_t nonfinite = 0;      /* users whose target scored NaN or inf */
    for (int64_t i = 0; st == GRM_OK && i < n; i++) {
        if (!isfinite(ts[i])) ranks[i] = C;
        grm__rank_acc_add(acc, ranks[i]);
        nonfinite += ranks[i] >= C;
    }
    /* the most-popular baseline: the same ranking by training counts, no rows */
    if (st == GRM_OK && pop && (st = rank_popular(t, &rc, n, ranks)) == GRM_OK)
        for (int64_t i = 0; i < n; i++) grm__rank_acc_add(pop, ranks[i]);
    if (nonfinite)
        grm__log(GRM_LOG_WARN, "grmhost", "step %lld: %lld of the evaluated users' targets "
                 "scored NaN or inf and were ranked last; the model has diverged (lower the "
                 "learning rates, or check the checkpoint)", (long long)t->step,
                 (long long)nonfinite);
    if (st == GRM_OK) st = merge_accs(t, acc);
    if (st == GRM_OK && pop) st = merge_accs(t, pop);
out:
    grm__free(CPU, users);
    grm__free(CPU, hend);
    grm__free(CPU, hs);
    grm__free(CPU, hci);
    grm__free(CPU, ranks);
    grm__free(CPU, ts);
    grm__free(CPU, Q);
    grm__free(CPU, blo);
    grm__free(CPU, bhi);
    grm__free(CPU, bs);
    grm__free(CPU, bn);
    return st;
}

static void emit_ranks(grm__trainer *t, const char *split, const char *prefix,
                       const grm__rank_acc *a)
{
    char name[64];
    double n = a->n ? (double)a->n : 1.0;
    for (int32_t i = 0; i < a->nk; i++) {
        snprintf(name, sizeof name, "%shr@%lld", prefix, (long long)a->k[i]);
        grm__metrics_emit(t->rep.metrics, t->step, split, name, a->hr[i] / n);
        snprintf(name, sizeof name, "%sndcg@%lld", prefix, (long long)a->k[i]);
        grm__metrics_emit(t->rep.metrics, t->step, split, name, a->ndcg[i] / n);
    }
    snprintf(name, sizeof name, "%smrr", prefix);
    grm__metrics_emit(t->rep.metrics, t->step, split, name, a->mrr / n);
    if (!prefix[0]) grm__metrics_emit(t->rep.metrics, t->step, split, "users", (double)a->n);
}

static int64_t pick_k(const grm__rank_acc *a, int64_t want, int32_t *idx)
{
    for (int32_t i = 0; i < a->nk; i++)
        if (a->k[i] == want) {
            *idx = i;
            return want;
        }
    *idx = a->nk - 1;
    return a->k[a->nk - 1];
}

/* Replace *n rows of scores and labels [*n, T] and groups [*n] with every rank's rows, in
 * rank order (input = sharded: each rank scored its own rows). */
static grm_status gather_rows(grm__trainer *t, int64_t *n, float **scores, float **labels,
                              int64_t **groups, int32_t T)
{
    const grm_comm_handle *c = &t->p->comm_handle;
    void *s2 = NULL, *l2 = NULL, *g2 = NULL;
    int64_t total = 0;
    grm_status st = grm__gatherv(c, *scores, *n * T, sizeof(float), &s2, &total);
    if (st == GRM_OK) st = grm__gatherv(c, *labels, *n * T, sizeof(float), &l2, &total);
    if (st == GRM_OK) st = grm__gatherv(c, *groups, *n, sizeof(int64_t), &g2, &total);
    if (st != GRM_OK) {
        free(s2);
        free(l2);
        free(g2);
        grm_error_prefix("evaluation: gathering the ranks' rows: ");
        return st;
    }
    grm__free(CPU, *scores);
    grm__free(CPU, *labels);
    grm__free(CPU, *groups);
    *scores = s2;
    *labels = l2;
    *groups = g2;
    *n = total;
    return GRM_OK;
}

/* Ranking evaluation of split (1 valid, 2 test): AUC, GAUC (grouped by user_column,
 * MTGRBoost §6.1) and logloss per task, beside the logloss of predicting the training
 * positive rate for every row (the constant baseline; its AUC is 0.5). */
static grm_status run_eval_ranking(grm__trainer *t, int split, double *score)
{
    grm__pipeline *p = t->p;
    grm__dataset *ds = t->ds;
    const char *name = split == 1 ? "valid" : "test";
    int32_t T = ds->ntasks, L = p->ndense;
    int64_t n = ds->nsplit[split], EB = p->set.eval_batch;
    const int64_t *rows = ds->split_rows[split];
    grm_status st = GRM_OK;
    if (n == 0 && !t->sharded) return GRM_OK;   /* sharded: the others may have rows */
    const int64_t n1 = n ? n : 1;
    float *scores = xalloc((size_t)(n1 * T) * sizeof(float));
    float *labels = xalloc((size_t)(n1 * T) * sizeof(float));
    float *col_s = NULL, *col_y = NULL;
    int64_t *groups = xalloc((size_t)n1 * sizeof(int64_t));
    if (!scores || !labels || !groups) {
        st = GRM_ENOMEM;
        goto out;
    }
    double logloss = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rows[i];
        memcpy(labels + i * T, ds->labels + r * T, (size_t)T * sizeof(float));
        groups[i] = ds->groups ? ds->groups[r] : 0;
    }
    memset(scores, 0, (size_t)(n * T) * sizeof(float));
    int64_t lo, hi, nb;
    if ((st = eval_share(t, n, EB, &lo, &hi, &nb)) != GRM_OK) goto out;
    for (int64_t ib = 0; ib < nb; ib++) {   /* this rank's share of the rows */
        int64_t r0 = lo + ib * EB, b = hi - r0 < EB ? hi - r0 : EB;
        if ((st = grm__poll_stop(t)) != GRM_OK) goto out;
        if (b < 0) b = 0;
        for (int64_t k = 0; k < b; k++) t->eb.users[k] = rows[r0 + k];
        t->eb.b = b;
        t->eb.streamed = 0;
        if ((st = grm__batch_assemble_ids(t, &t->eb, 0)) != GRM_OK
            || (st = grm__embed_batch(t, &t->eb, 0)) != GRM_OK)
            goto out;
        if (b == 0) continue;   /* the collective lookup only */
        if ((st = grm__dense_forward(t, &t->eb, 0, t->step)) != GRM_OK) goto out;
        grm_loss_io io = { .struct_size = sizeof io, .ntasks = T, .rows = b, .dim = T,
                           .pred = t->dn.acts[L], .labels = labels + r0 * T,
                           .scores = scores + r0 * T, .batch = &t->eb.view, .step = t->step };
        if ((st = grm__head_loss(&t->dn.head, &io, &t->be, t->sp.work)) != GRM_OK) goto out;
        logloss += io.loss * (double)b;
        grm__scratch_reset();
    }
    if (t->nranks > 1) {
        const grm_comm_handle *c = &p->comm_handle;
        double *lls = calloc((size_t)t->nranks, sizeof *lls);
        if (!lls) {
            st = grm_errorf(GRM_ENOMEM, "out of memory");
            goto out;
        }
        if (t->sharded)   /* every rank's own rows, in rank order */
            st = gather_rows(t, &n, &scores, &labels, &groups, T);
        else              /* every rank's scores (zeros elsewhere: the sum is exact) */
            st = c->ops->allreduce(c->inst, scores, n * T, GRM_DTYPE_F32, GRM_REDUCE_SUM);
        if (st == GRM_OK) st = gather_bytes(t, lls, &logloss, sizeof logloss);
        logloss = 0;
        for (int32_t r = 0; r < t->nranks; r++) logloss += lls[r];
        free(lls);
        if (st != GRM_OK) goto out;
    }
    if (n == 0) goto out;
    col_s = xalloc((size_t)n * sizeof(float));
    col_y = xalloc((size_t)n * sizeof(float));
    if (!col_s || !col_y) {
        st = GRM_ENOMEM;
        goto out;
    }
    for (int32_t k = 0; k < T; k++) {
        char metric[128];
        const char *task = p->set.label_columns.v[k];
        const char *sep = T > 1 ? "." : "";
        double prior = ds->prior[k], pl = 0;
        for (int64_t i = 0; i < n; i++) {
            col_s[i] = scores[i * T + k];
            col_y[i] = labels[i * T + k];
            double y = col_y[i], q = prior < 1e-7 ? 1e-7 : prior > 1 - 1e-7 ? 1 - 1e-7 : prior;
            pl -= y * log(q) + (1 - y) * log(1 - q);
        }
        double auc = grm__auc(col_s, col_y, n);
        if (k == 0 && score) *score = auc;
        snprintf(metric, sizeof metric, "auc%s%s", sep, T > 1 ? task : "");
        grm__metrics_emit(t->rep.metrics, t->step, name, metric, auc);
        double gauc = NAN;
        if (ds->groups) {
            gauc = grm__gauc(col_s, col_y, groups, n);
            snprintf(metric, sizeof metric, "gauc%s%s", sep, T > 1 ? task : "");
            grm__metrics_emit(t->rep.metrics, t->step, name, metric, gauc);
        }
        snprintf(metric, sizeof metric, "prior_logloss%s%s", sep, T > 1 ? task : "");
        grm__metrics_emit(t->rep.metrics, t->step, name, metric, pl / (double)n);
        if (!t->opts->quiet)
            grm__log(GRM_LOG_INFO, "grmhost", "step %lld %s%s%s: auc %.4f gauc %.4f over %lld "
                     "rows; constant-prior logloss %.4f", (long long)t->step, name,
                     T > 1 ? " " : "", T > 1 ? task : "", auc, gauc, (long long)n,
                     pl / (double)n);
    }
    /* the head reports the loss summed over tasks and averaged over rows */
    grm__metrics_emit(t->rep.metrics, t->step, name, "logloss", logloss / (double)n);
    grm__metrics_emit(t->rep.metrics, t->step, name, "rows", (double)n);
    if (!t->opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "step %lld %s: logloss %.4f (summed over %d tasks)",
                 (long long)t->step, name, logloss / (double)n, T);
out:
    grm__free(CPU, scores);
    grm__free(CPU, labels);
    grm__free(CPU, col_s);
    grm__free(CPU, col_y);
    grm__free(CPU, groups);
    return st;
}

static grm_status run_eval_timed(grm__trainer *t, int split, int with_pop, double *score)
{
    if (t->ranking) return run_eval_ranking(t, split + 1, score);
    grm__rank_acc acc, pop;
    const char *name = split ? "test" : "valid";
    const double t0 = now_s();
    grm_status st = evaluate(t, split, &acc, with_pop ? &pop : NULL);
    if (st != GRM_OK) return st;
    const double took = now_s() - t0;
    emit_ranks(t, name, "", &acc);
    if (with_pop) emit_ranks(t, name, "mostpop_", &pop);
    int32_t ki;
    int64_t k = pick_k(&acc, t->p->set.select_k, &ki);
    double n = acc.n ? (double)acc.n : 1.0;
    if (score) *score = acc.ndcg[ki] / n;
    if (!t->opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "step %lld %s: hr@%lld %.4f ndcg@%lld %.4f over %lld "
                 "users (%.2f s)", (long long)t->step, name, (long long)k, acc.hr[ki] / n,
                 (long long)k, acc.ndcg[ki] / n, (long long)acc.n, took);
    if (with_pop && !t->opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "step %lld %s: most-popular baseline hr@%lld %.4f "
                 "ndcg@%lld %.4f", (long long)t->step, name, (long long)k, pop.hr[ki] / n,
                 (long long)k, pop.ndcg[ki] / n);
    return GRM_OK;
}

grm_status grm__run_eval(grm__trainer *t, int split, int with_pop, double *score)
{
    double t0 = now_s();
    grm_status st = grm__async_flush(t);
    if (st == GRM_OK && t->src.stream && !t->src.full) {   /* the held-out rows read so far */
        if ((st = grm__stream_snapshot(t)) == GRM_OK && !t->src.full && !t->opts->quiet)
            grm__log(GRM_LOG_INFO, "grmhost", "step %lld: input = stream: the first pass is "
                     "not read through, so validation and test cover the held-out rows read "
                     "so far", (long long)t->step);
    }
    if (st == GRM_OK) st = run_eval_timed(t, split, with_pop, score);
    t->rep.t_eval += now_s() - t0;
    return st;
}

/* The catalog's keys and rows, the scores of an evaluation batch, a sequence model's
 * last-token queries. */
grm_status grm__eval_setup(grm__trainer *t)
{
    const grm__pipeline *p = t->p;
    const grm__dataset *ds = t->ds;
    const grm__settings *s = &p->set;
    const int32_t D = t->ranking ? (int32_t)ds->ntasks : p->tables[t->item_table].dim;
    const int64_t C = ds->ncatalog;
    const int64_t per = ((int64_t)D + s->eval_batch) * (int64_t)sizeof(float) + 8;
    const int64_t budget = s->eval_memory_mb << 20;
    const int64_t cc = C * per <= budget ? C : budget / per;
    t->ev.queries = xalloc((size_t)(t->B * D) * sizeof(float));
    if (!t->ev.queries) return GRM_ENOMEM;
    if (cc < C && !t->ranking)
        grm__log(GRM_LOG_INFO, "grmhost", "evaluation: the catalog's %lld items are ranked in "
                 "%lld chunks of %lld items ([train] eval_memory_mb = %lld)", (long long)C,
                 (long long)((C + cc - 1) / (cc > 0 ? cc : 1)), (long long)(cc > 0 ? cc : 1),
                 (long long)s->eval_memory_mb);
    return eval_buffers(t, cc > 0 ? cc : 1);
}

void grm__eval_teardown(grm__trainer *t)
{
    void *bufs[] = { t->ev.cat_keys, t->ev.cat_rows, t->ev.scores, t->ev.queries };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) grm__free(CPU, bufs[i]);
    memset(&t->ev, 0, sizeof t->ev);
}
