/* core/stream.c - [train] input = stream: the trainer's side of the streamed input, a
 * shuffle buffer over the pieces core/data.c reads, transforms and splits one reader chunk at
 * a time on the data thread (MTGRBoost §3: input read beside training; core/train.h has the
 * full description). */
#include "route.h"
#include "train.h"

#include <grm/rng.h>
#include <stdlib.h>
#include <string.h>

/* ---- input = stream ---- */

/* Read pieces until the buffer holds `want` rows or the last pass is read. */
static grm_status stream_fill(grm__trainer *t)
{
    grm__stream_src *sc = &t->src;
    while (!sc->ended && sc->n < sc->want) {
        grm__dataset *ds = NULL;
        int64_t pass = 0;
        double t0 = now_s();
        grm_status st = grm__stream_next(t->src.stream, &ds, &pass);
        sc->read_s += now_s() - t0;
        if (st != GRM_OK) return st;
        if (!ds) {
            sc->ended = 1;
            break;
        }
        const int64_t m = ds->nsplit[0];
        grm__piece *pc = malloc(sizeof *pc);
        if (sc->n + m > sc->cap) {
            int64_t cap = sc->cap ? sc->cap : 1024;
            while (cap < sc->n + m) cap *= 2;
            struct grm__srow *nb = realloc(sc->buf, (size_t)cap * sizeof *nb);
            if (nb) {
                sc->buf = nb;
                sc->cap = cap;
            }
        }
        if (!pc || sc->n + m > sc->cap) {
            free(pc);
            grm__dataset_destroy(ds);
            return grm_errorf(GRM_ENOMEM, "input = stream: out of memory for the shuffle "
                              "buffer; lower [train] shuffle_buffer");
        }
        *pc = (grm__piece){ ds, m };
        for (int64_t k = 0; k < m; k++)
            sc->buf[sc->n++] = (struct grm__srow){ pc, ds->split_rows[0][k] };
        sc->pass = pass;
    }
    return GRM_OK;
}

/* The piece's row is drawn (and, when assembled, copied into its batch). */
static void piece_release(grm__piece *pc)
{
    if (--pc->left > 0) return;
    grm__dataset_destroy(pc->ds);
    free(pc);
}

/* Draw the next batch's samples from the shuffle buffer into bt and, when `assemble`, its
 * ids and keys; every batch of a step has bsz samples while the input lasts, so the step's
 * rows are known at its first batch (the buffer holds at least accumulate * bsz rows). */
static grm_status stream_draw(grm__trainer *t, grm__batch *bt, int assemble)
{
    grm__stream_src *sc = &t->src;
    const int32_t T = (int32_t)t->p->set.label_columns.n;
    const int64_t N = t->p->set.accumulate;
    grm_status st = stream_fill(t);
    if (st != GRM_OK) return st;
    if (sc->drawn % N == 0) sc->step_rows = sc->n < N * t->plan.bsz ? sc->n : N * t->plan.bsz;
    const int64_t b = sc->n < t->plan.bsz ? sc->n : t->plan.bsz;
    bt->b = b;
    bt->streamed = 1;
    bt->done = b == 0;
    bt->pass = sc->pass;
    bt->step_rows = (double)sc->step_rows;
    bt->tokens = 0;
    for (int64_t k = 0; k < b; k++) {
        sc->rng = grm_mix64(sc->rng + 0x9e3779b97f4a7c15ULL);
        const int64_t j = (int64_t)(sc->rng % (uint64_t)sc->n);
        const struct grm__srow r = sc->buf[j];
        sc->buf[j] = sc->buf[--sc->n];
        bt->src[k] = r.pc;
        bt->users[k] = r.row;
        memcpy(bt->labels + k * T, r.pc->ds->labels + r.row * T, (size_t)T * sizeof(float));
        int64_t tok = 1;
        if (t->seqrank) {   /* the row's token list, its most recent `window` */
            const int32_t f = t->p->seq_feature;
            const int64_t w = t->p->features[f].window;
            tok = r.pc->ds->fofs[f][r.row + 1] - r.pc->ds->fofs[f][r.row];
            if (tok > w) tok = w;
        }
        bt->tokens += tok;
    }
    sc->drawn++;
    if (assemble) st = grm__batch_assemble_ids(t, bt, 0);
    for (int64_t k = 0; k < b; k++) piece_release(bt->src[k]);
    return st;
}

/* Batch g of the stream: the batches before it drawn (and dropped) first when resuming. */
grm_status grm__stream_batch(grm__trainer *t, grm__batch *bt, int64_t g)
{
    grm_status st = GRM_OK;
    while (st == GRM_OK && t->src.drawn < g - 1) st = stream_draw(t, bt, 0);
    if (st != GRM_OK) return st;
    if (t->src.drawn != g - 1)
        return grm_errorf(GRM_EINTERNAL, "input = stream: batch %lld asked for after batch "
                          "%lld was drawn", (long long)g, (long long)t->src.drawn);
    bt->g = g;
    return stream_draw(t, bt, 1);
}

/* The rows still in the buffer give their pieces back (teardown). */
void grm__stream_free(grm__trainer *t)
{
    grm__stream_src *sc = &t->src;
    for (int64_t k = 0; k < sc->n; k++) piece_release(sc->buf[k].pc);
    free(sc->buf);
    grm__stream_close(sc->stream);   /* before the memset: the stream lives in src */
    memset(sc, 0, sizeof *sc);
}

/* t->ds afresh from the stream: the held-out rows of pass 0 read so far on this rank, the
 * training positive rate over every rank's rows so far (collective with several ranks). */
grm_status grm__stream_snapshot(grm__trainer *t)
{
    const int32_t T = (int32_t)t->p->set.label_columns.n;
    grm__dataset *ds = NULL;
    double *pos = calloc((size_t)T + 1, sizeof *pos);   /* [T] positives, [T] rows */
    int64_t ntrain = 0, done = 0;
    int mine = 0;
    if (!pos) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm_status st = grm__stream_eval(t->src.stream, &ds, pos, &ntrain, &mine);
    pos[T] = (double)ntrain;
    done = mine;
    if (st == GRM_OK && t->nranks > 1) {   /* the same prior on every rank */
        const grm_comm_handle *c = &t->p->comm_handle;
        st = grm__sum_ranks(c, pos, T + 1);
        if (st == GRM_OK) st = c->ops->allreduce(c->inst, &done, 1, GRM_DTYPE_I64, GRM_REDUCE_MIN);
    }
    if (st == GRM_OK) {
        for (int32_t k = 0; k < T; k++) ds->prior[k] = pos[T] > 0 ? pos[k] / pos[T] : 0.0;
        ds->sharded = t->nranks > 1;
        grm__dataset_destroy(t->ds);
        t->ds = ds;
        t->src.full = (int)done;
        ds = NULL;
    }
    free(pos);
    grm__dataset_destroy(ds);
    if (st != GRM_OK) grm_error_prefix("input = stream: the held-out rows: ");
    return st;
}

/* input = stream: the step's rows summed over the ranks as step_rows_all sums them, and
 * whether the run is over (every rank's input used up: t->src.all_ended) and the step's pass (the
 * most of any rank's, t->src.step_pass). `failed`: this rank could not take its batch; every rank
 * then stops, the others with an error naming it. */
grm_status grm__stream_step(grm__trainer *t, const grm__batch *bt, int failed, double *rows)
{
    int64_t v[3] = { failed ? 0 : (int64_t)bt->step_rows, failed ? 0 : bt->done, failed },
            pass = failed ? 0 : bt->pass;
    grm_status st = GRM_OK;
    if (t->nranks > 1) {
        const grm_comm_handle *c = &t->p->comm_handle;
        st = c->ops->allreduce(c->inst, v, 3, GRM_DTYPE_I64, GRM_REDUCE_SUM);
        if (st == GRM_OK) st = c->ops->allreduce(c->inst, &pass, 1, GRM_DTYPE_I64, GRM_REDUCE_MAX);
        if (st != GRM_OK) {
            grm_error_prefix("input = stream: agreeing on the step: ");
            return st;
        }
    }
    if (v[2] && !failed)
        return grm_errorf(GRM_EIO, "input = stream: another rank failed reading its input "
                          "(its own message says why)");
    *rows = (double)v[0];
    t->src.all_ended = v[1] == t->nranks;
    t->src.step_pass = pass;
    return GRM_OK;
}

/* input = stream: open this rank's stream and, to train, fill the shuffle buffer (all
 * that is read before step 1); to evaluate, read one pass for its held-out rows. Then the
 * first t->ds (stream_snapshot). Collective with several ranks. */
grm_status grm__stream_start(grm__trainer *t, int training)
{
    grm__pipeline *p = t->p;
    const grm__settings *s = &p->set;
    grm_status st = grm__stream_open(p, training ? s->epochs : 1, &t->src.stream);
    if (st == GRM_OK) {
        const int64_t bsz = t->nranks > 1 ? rank_share(s->batch_size, t->rank, t->nranks)
                                          : s->batch_size;
        grm__stream_src *sc = &t->src;
        sc->want = s->shuffle_buffer ? s->shuffle_buffer : 64 * bsz;
        if (sc->want < s->accumulate * bsz) sc->want = s->accumulate * bsz;
        sc->rng = grm_mix64((uint64_t)s->seed ^ grm_mix64(0x57e4 + (uint64_t)t->rank));
        if (training) {
            st = stream_fill(t);
            if (st == GRM_OK && t->src.n == 0 && t->nranks == 1)
                st = grm_errorf(GRM_EFORMAT, "%s: input = stream: the data yields no training "
                                "rows; check the reader's path and the split fractions",
                                p->cfg->path);
        } else {
            for (grm__dataset *ds = NULL; st == GRM_OK; grm__dataset_destroy(ds)) {
                int64_t pass;
                st = grm__stream_next(t->src.stream, &ds, &pass);
                if (!ds) break;
            }
        }
    }
    if (t->nranks > 1)   /* the others learn before they go on */
        st = grm__agree(p, st, "input = stream: another rank failed reading its input");
    return st == GRM_OK ? grm__stream_snapshot(t) : st;
}
