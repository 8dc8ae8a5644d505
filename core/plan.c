/* core/plan.c - the epoch order and the batch plan: a seeded permutation per epoch, batches
 * of batch_size samples or cut to a token budget (MTGRBoost §5.1, Algorithm 1), each rank's
 * slice of a global batch (contiguous, or TurboGR §4.1.3 global token reallocation), and the
 * rows of a step that weight its gradients. A pure function of (seed, step), so a resumed run
 * plans exactly the batches the uninterrupted run would have. */
#include "train.h"

#include <grm/rng.h>
#include <stdlib.h>
#include <string.h>

/* ---- training step ---- */

/* Tokens of training sample e: the ids it looks up from the sequence (a sequence model's
 * token rows, or a pooled history plus the target); a ranking row counts one. */
int64_t grm__plan_sample_tokens(const grm__trainer *t, int64_t e)
{
    const grm__dataset *ds = t->ds;
    int64_t w = t->p->set.max_seq_len, n;
    if (t->seqrank) {   /* the row's token list, its most recent `window` */
        const int32_t f = t->p->seq_feature;
        const int64_t r = ds->split_rows[0][e];
        n = ds->fofs[f][r + 1] - ds->fofs[f][r];
        w = t->p->features[f].window;
        return n < w ? n : w;
    }
    if (t->ranking) return 1;
    if (t->seqmode) {
        int64_t u = t->plan.seq_users[e];
        w = t->p->features[t->p->seq_feature].window;
        n = grm__fit_end(ds, u) - 1 - ds->offsets[u];
    } else {
        n = ds->ex_pos[e] - ds->offsets[ds->ex_user[e]] + 1;
    }
    return n < w ? n : w;
}

static void ensure_perm(grm__trainer *t, int64_t epoch)
{
    if (t->plan.perm_epoch == epoch) return;
    double t0 = now_s();
    int64_t n = t->plan.nex;
    uint64_t s = grm_mix64((uint64_t)t->p->set.seed ^ grm_mix64(0xe90c + (uint64_t)epoch));
    for (int64_t i = 0; i < n; i++) t->plan.perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        s = grm_mix64(s + 0x9e3779b97f4a7c15ULL);
        int64_t j = (int64_t)(s % (uint64_t)(i + 1));
        int64_t tmp = t->plan.perm[i];
        t->plan.perm[i] = t->plan.perm[j];
        t->plan.perm[j] = tmp;
    }
    t->plan.perm_epoch = epoch;

    /* the epoch's batches, cut by the running token sums of the shuffled samples */
    const grm__settings *st = &t->p->set;
    int64_t *S = t->plan.tok_cum;
    S[0] = 0;
    for (int64_t i = 0; i < n; i++) S[i + 1] = S[i] + grm__plan_sample_tokens(t, t->plan.perm[i]);
    t->plan.nb = 0;
    t->plan.bstart[0] = 0;
    if (st->batching == GRM__BATCH_FIXED) {
        t->plan.nb = (n + t->plan.bsz - 1) / t->plan.bsz;
        for (int64_t i = 0; i <= t->plan.nb; i++)
            t->plan.bstart[i] = i * t->plan.bsz < n ? i * t->plan.bsz : n;
        t->rep.t_plan += now_s() - t0;
        return;
    }
    /* MTGRBoost §5.1, Algorithm 1: a buffer Q (here perm[q0, qn)) takes whole input
     * chunks of batch_size samples while it holds fewer than N tokens; the cut is the k
     * whose cumulative token count is closest to N (binary search over the running sums);
     * the first k samples are the batch and the rest carry over. A batch is also cut when
     * all of Q is closest but holds N or more, and the last chunk's leftovers are flushed. */
    int64_t N = t->plan.target_tokens;
    int64_t q0 = 0, qn = 0;
    while (q0 < n) {
        while (S[qn] - S[q0] < N && qn < n) qn = qn + t->plan.bsz < n ? qn + t->plan.bsz : n;
        /* first j in (q0, qn] with S[j] - S[q0] >= N, or qn */
        int64_t lo = q0 + 1, hi = qn;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (S[mid] - S[q0] >= N) hi = mid;
            else lo = mid + 1;
        }
        int64_t k = lo;
        if (k > q0 + 1 && N - (S[k - 1] - S[q0]) <= (S[k] - S[q0]) - N) k--;
        if (k - q0 > t->B) k = q0 + t->B;   /* buffer capacity: one token per sample at least */
        if (k < qn || S[qn] - S[q0] >= N || qn == n) {
            q0 = k;
            t->plan.bstart[++t->plan.nb] = q0;
        }
    }
    t->rep.t_plan += now_s() - t0;
}

/* Batches before epoch e (extending the table of epochs as needed): the step numbers of
 * epoch e are (*first, first + batches of e]. */
static grm_status epoch_start(grm__trainer *t, int64_t e, int64_t *first)
{
    while (t->plan.nep <= e) {
        int64_t *nc = realloc(t->plan.ep_cum, (size_t)(t->plan.nep + 2) * sizeof *nc);
        if (!nc) return grm_errorf(GRM_ENOMEM, "out of memory");
        t->plan.ep_cum = nc;
        if (t->plan.nep == 0) t->plan.ep_cum[0] = 0;
        int64_t nb;
        if (t->p->set.batching == GRM__BATCH_FIXED) {   /* every epoch: ceil(nex / batch) */
            nb = (t->plan.nex + t->plan.bsz - 1) / t->plan.bsz;
        } else {                                      /* cuts depend on the epoch's order */
            ensure_perm(t, t->plan.nep);
            nb = t->plan.nb;
        }
        t->plan.ep_cum[t->plan.nep + 1] = t->plan.ep_cum[t->plan.nep] + nb;
        t->plan.nep++;
    }
    *first = t->plan.ep_cum[e];
    return GRM_OK;
}

/* The epoch and batch of global step `step` (1-based). */
static grm_status locate(grm__trainer *t, int64_t step, int64_t *epoch, int64_t *bi)
{
    grm_status st;
    int64_t e = 0, first;
    /* epochs hold about the same number of batches: start from the nominal guess */
    if (t->plan.mb_local > 0) e = (step - 1) / t->plan.mb_local;
    for (;;) {
        if ((st = epoch_start(t, e, &first)) != GRM_OK) return st;
        if (first >= step && e > 0) { e--; continue; }
        int64_t next;
        if ((st = epoch_start(t, e + 1, &next)) != GRM_OK) return st;
        if (step > next) { e++; continue; }
        break;
    }
    *epoch = e;
    *bi = step - 1 - first;
    ensure_perm(t, e);
    return GRM_OK;
}

/* Samples and rows (tokens for a sequence model) of batch g (1-based, counted across
 * epochs); *pos and perm then locate it. */
static grm_status batch_size_of(grm__trainer *t, int64_t g, int64_t *pos, int64_t *b, int64_t *rows)
{
    int64_t epoch, bi;
    grm_status st = locate(t, g, &epoch, &bi);
    if (st != GRM_OK) return st;
    *pos = t->plan.bstart[bi];
    *b = t->plan.bstart[bi + 1] - *pos;
    *rows = t->seqmode ? t->plan.tok_cum[*pos + *b] - t->plan.tok_cum[*pos] : *b;
    return GRM_OK;
}

typedef struct split_item {
    int64_t tokens, at;
} split_item;

static int by_tokens_desc(const void *x, const void *y)
{
    const split_item *a = x, *b = y;
    if (a->tokens != b->tokens) return a->tokens > b->tokens ? -1 : 1;
    return (a->at > b->at) - (a->at < b->at);
}

/* This rank's samples of global batch g into bt (ex, b, tokens). contiguous: the r-th of
 * nranks contiguous parts of the batch (sizes differ by at most one sample). tokens: global
 * token reallocation (TurboGR §4.1.3): the batch's samples sorted by token count, longest
 * first, each given to the rank with the fewest tokens so far (ties: the lower rank), so
 * the ranks' token counts, not their sample counts, come out level; a rank keeps its
 * samples in batch order. Every rank computes the same assignment from the same order. */
grm_status grm__plan_slice(grm__trainer *t, int64_t g, grm__batch *bt)
{
    int64_t gpos, gb, grows;
    grm_status st = batch_size_of(t, g, &gpos, &gb, &grows);
    if (st != GRM_OK) return st;
    bt->g = g;
    bt->b = 0;
    bt->tokens = 0;
    if (t->sharded || t->nranks == 1 || t->p->set.rank_split == GRM__SPLIT_CONTIGUOUS) {
        /* sharded: the batch is this rank's own, whole */
        const int64_t parts = t->sharded ? 1 : t->nranks, me = t->sharded ? 0 : t->rank;
        int64_t lo = gpos + gb * me / parts, hi = gpos + gb * (me + 1) / parts;
        for (int64_t i = lo; i < hi; i++) bt->ex[bt->b++] = t->plan.perm[i];
        bt->tokens = t->plan.tok_cum[hi] - t->plan.tok_cum[lo];
        return GRM_OK;
    }
    split_item *it = malloc((size_t)(gb ? gb : 1) * sizeof *it);
    int64_t *load = calloc((size_t)t->nranks, sizeof *load);
    int32_t *owner = malloc((size_t)(gb ? gb : 1) * sizeof *owner);
    if (!it || !load || !owner) {
        free(it);
        free(load);
        free(owner);
        return grm_errorf(GRM_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < gb; i++)
        it[i] = (split_item){ t->plan.tok_cum[gpos + i + 1] - t->plan.tok_cum[gpos + i], i };
    qsort(it, (size_t)gb, sizeof *it, by_tokens_desc);
    for (int64_t i = 0; i < gb; i++) {
        int32_t r = 0;
        for (int32_t q = 1; q < t->nranks; q++)
            if (load[q] < load[r]) r = q;
        load[r] += it[i].tokens;
        owner[it[i].at] = r;
    }
    for (int64_t i = 0; i < gb; i++)
        if (owner[i] == t->rank) {
            bt->ex[bt->b++] = t->plan.perm[gpos + i];
            bt->tokens += t->plan.tok_cum[gpos + i + 1] - t->plan.tok_cum[gpos + i];
        }
    free(it);
    free(load);
    free(owner);
    return GRM_OK;
}

grm_status grm__plan_slice_all(grm__trainer *t, int64_t g, grm__batch *bt)
{
    int64_t gpos, gb, grows;
    grm_status st = batch_size_of(t, g, &gpos, &gb, &grows);
    if (st != GRM_OK) return st;
    GRM_ASSERT(!t->sharded && gb <= t->B);
    bt->g = g;
    bt->b = 0;
    for (int64_t i = gpos; i < gpos + gb; i++) bt->ex[bt->b++] = t->plan.perm[i];
    bt->tokens = t->plan.tok_cum[gpos + gb] - t->plan.tok_cum[gpos];
    return GRM_OK;
}

/* Rows of every rank's slices of every batch of the step holding batch g: the denominator
 * of the batch weights. Sharded: this rank's batches only; the trainer sums the ranks'. */
grm_status grm__plan_step_rows(grm__trainer *t, int64_t g, double *out)
{
    const int64_t N = t->p->set.accumulate, step = (g - 1) / N + 1;
    if (t->plan.cached_step == step) {
        *out = t->plan.step_rows;
        return GRM_OK;
    }
    int64_t g0 = (step - 1) * N, nb = N;
    if (t->plan.total_mb && g0 + nb > t->plan.total_mb) nb = t->plan.total_mb - g0;
    double total = 0;
    for (int64_t j = 0; j < nb; j++) {
        int64_t pos, b, rows;
        grm_status st = batch_size_of(t, g0 + j + 1, &pos, &b, &rows);
        if (st != GRM_OK) return st;
        total += (double)rows;
    }
    t->plan.cached_step = step;
    t->plan.step_rows = total;
    *out = total;
    return GRM_OK;
}

/* The rows of the whole step on every rank: the batch's own count, or with input = sharded
 * (each rank's plan its own) the ranks' counts summed (MTGRBoost §5.1: the sample count
 * travels with the batch, so the gradient is a mean over the step's samples). */
grm_status grm__plan_step_rows_all(grm__trainer *t, double mine, double *out)
{
    *out = mine;
    if (!t->sharded) return GRM_OK;
    const grm_comm_handle *c = &t->p->comm_handle;
    int64_t n = (int64_t)mine;
    grm_status st = c->ops->allreduce(c->inst, &n, 1, GRM_DTYPE_I64, GRM_REDUCE_SUM);
    if (st != GRM_OK) grm_error_prefix("summing the step's rows over the ranks: ");
    *out = (double)n;
    return st;
}

/* Sizes the plan before the stores exist: the training samples (a sequence model's users
 * with at least two training items), this rank's batch size, the token budget of batching =
 * tokens, and from them the trainer's buffer capacities B and RB. */
grm_status grm__plan_setup(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    grm__dataset *ds = t->ds;
    const grm__settings *s = &p->set;

    t->B = s->batch_size > s->eval_batch ? s->batch_size : s->eval_batch;
    t->plan.nex = t->src.stream ? t->src.n : ds->nexamples;
    /* sharded: rank r plans batches of its share of batch_size from its own samples */
    t->plan.bsz = t->sharded ? rank_share(s->batch_size, t->rank, t->nranks) : s->batch_size;
    if (t->sharded && s->rank_split == GRM__SPLIT_TOKENS && t->rank == 0)
        grm__log(GRM_LOG_WARN, "grmhost", "%s: [train] rank_split = tokens splits a global "
                 "batch, and input = sharded has none: each rank cuts its own batches "
                 "(batching = tokens levels their tokens)", p->cfg->path);
    if (t->sharded && s->batch_size < t->nranks)   /* the same verdict on every rank */
        return grm_errorf(GRM_EINVAL, "%s: [train] input = %s with batch_size = %lld on %d "
                          "ranks leaves a rank no sample per batch; use batch_size >= %d",
                          p->cfg->path, t->src.stream ? "stream" : "sharded",
                          (long long)s->batch_size, t->nranks, t->nranks);
    if (t->seqmode) {
        t->plan.seq_users = xalloc((size_t)(ds->nusers ? ds->nusers : 1) * sizeof(int64_t));
        if (!t->plan.seq_users) return GRM_ENOMEM;
        t->plan.nex = 0;
        for (int64_t u = 0; u < ds->nusers; u++)
            if (grm__fit_end(ds, u) - ds->offsets[u] >= 2) t->plan.seq_users[t->plan.nex++] = u;
    }
    if (!t->ranking && s->batching == GRM__BATCH_TOKENS) {
        /* N of Algorithm 1; a batch holds at most N + one sample's tokens, and at least one
         * token per sample */
        int64_t tot = 0;
        for (int64_t e = 0; e < t->plan.nex; e++) tot += grm__plan_sample_tokens(t, e);
        int64_t nex = t->plan.nex ? t->plan.nex : 1;
        int64_t given = t->sharded ? rank_share(s->batch_tokens, t->rank, t->nranks)
                                   : s->batch_tokens;
        t->plan.target_tokens = s->batch_tokens ? given : (tot * t->plan.bsz + nex - 1) / nex;
        if (t->plan.target_tokens < 1) t->plan.target_tokens = 1;
        if (t->B < t->plan.target_tokens) t->B = t->plan.target_tokens;
    }
    t->RB = t->B;
    if (t->seqrank) t->RB = grm__batch_ids_cap(t, p->seq_feature);   /* B * tokens per row */
    if (t->seqmode) {
        int64_t w = p->features[p->seq_feature].window;
        t->RB = (s->batch_size > s->eval_batch ? s->batch_size : s->eval_batch) * w;
        if (t->plan.target_tokens && t->RB < t->plan.target_tokens + w)
            t->RB = t->plan.target_tokens + w;
    }
    return GRM_OK;
}

/* The order buffers, then the run's length: steps are optimizer steps of `accumulate`
 * batches each, and batches run on across epochs (input = stream: until every rank's input
 * is used up, or [train] steps). */
grm_status grm__plan_steps(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    const grm__settings *s = &p->set;
    grm_status st;
    t->plan.perm = xalloc((size_t)(t->plan.nex ? t->plan.nex : 1) * sizeof(int64_t));
    t->plan.bstart = xalloc((size_t)(t->plan.nex + 1) * sizeof(int64_t));
    t->plan.tok_cum = xalloc((size_t)(t->plan.nex + 1) * sizeof(int64_t));
    if (!t->plan.perm || !t->plan.bstart || !t->plan.tok_cum) return GRM_ENOMEM;
    t->plan.perm_epoch = -1;
    if (t->src.stream) {   /* steps: until every rank's input is used up, or [train] steps */
        t->total_steps = s->steps;
        return GRM_OK;
    }
    if (t->plan.nex == 0)
        return grm_errorf(GRM_EINVAL, "%s: no training samples (every user has fewer than two "
                          "training items)", p->cfg->path);
    int64_t N = s->accumulate;
    if ((st = epoch_start(t, 1, &t->plan.mb_local)) != GRM_OK) return st;   /* epoch 0 */
    t->plan.mb_per_epoch = t->plan.mb_local;
    if (!s->steps && (st = epoch_start(t, s->epochs, &t->plan.total_mb)) != GRM_OK) return st;
    t->plan.nex_all = t->plan.nex;
    if (t->sharded) {
        /* every rank runs the longest rank's count of batches: a rank whose share is used
         * up goes on into its next epoch, so no step lacks a rank (a step is collective) */
        const grm_comm_handle *c = &p->comm_handle;
        int64_t mx[2] = { t->plan.mb_per_epoch, t->plan.total_mb };
        if ((st = c->ops->allreduce(c->inst, mx, 2, GRM_DTYPE_I64, GRM_REDUCE_MAX)) != GRM_OK
            || (st = c->ops->allreduce(c->inst, &t->plan.nex_all, 1, GRM_DTYPE_I64,
                                       GRM_REDUCE_SUM)) != GRM_OK)
            return st;
        t->plan.mb_per_epoch = mx[0];
        t->plan.total_mb = mx[1];
    }
    t->steps_per_epoch = (t->plan.mb_per_epoch + N - 1) / N;
    t->total_steps = s->steps ? s->steps : (t->plan.total_mb + N - 1) / N;
    if (s->batching == GRM__BATCH_FIXED && s->batch_size > t->plan.nex_all && t->rank == 0) {
        /* legal, but rarely meant: every step is the whole (shuffled) data set */
        const grm__section *ts = grm__config_section(p->cfg, "train");
        const grm__kv *kv = ts ? grm__section_kv(ts, "batch_size") : NULL;
        grm__log(GRM_LOG_WARN, "grmhost", "%s:%d: [train] batch_size = %lld is larger than "
                 "the %lld training samples: every batch is the whole data set, one step an "
                 "epoch; lower batch_size (or check [reader] path reads the data you meant)",
                 grm__kv_file(kv, p->cfg->path), kv ? kv->line : 0,
                 (long long)s->batch_size, (long long)t->plan.nex_all);
    }
    return GRM_OK;
}

void grm__plan_fini(grm__plan *pl)
{
    void *bufs[] = { pl->perm, pl->seq_users, pl->bstart, pl->tok_cum };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) grm__free(CPU, bufs[i]);
    free(pl->ep_cum);
    memset(pl, 0, sizeof *pl);
}
