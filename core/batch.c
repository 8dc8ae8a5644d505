/* core/batch.c - one batch's input, assembled ahead of its compute (core/train.h explains
 * the layout): samples, every feature's ids, the targets, one segment unique per physical
 * table over its id spaces (FusedRec §3, Fig. 5), the merged keys (MTGRBoost §4.2 eq. 8),
 * the negatives merged into the item table's keys, and the grm_batch view plugins read.
 * Everything here touches only the batch and read-only data, so it runs on the data thread. */
#include "train.h"

#include <grm/rng.h>
#include <stdlib.h>
#include <string.h>

void grm__batch_fini(const grm__trainer *t, grm__batch *bt)
{
    const grm__pipeline *p = t->p;
    for (int32_t i = 0; bt->fids && i < p->nfeatures; i++) grm__free(CPU, bt->fids[i]);
    for (int32_t i = 0; bt->foff && i < p->nfeatures; i++) grm__free(CPU, bt->foff[i]);
    for (int32_t T = 0; bt->tab && T < p->nphys; T++) {
        grm__batch_tab *w = &bt->tab[T];
        void *wb[] = { w->ids, w->segoff, w->counts, w->inv, w->keys, w->ufeat };
        for (size_t i = 0; i < sizeof wb / sizeof *wb; i++) grm__free(CPU, wb[i]);
        free(w->pfkeys);
    }
    void *bufs[] = { bt->ex, bt->users, bt->gids, bt->hist_end, bt->labels, bt->pos_ids,
                     bt->tok_src,
                     bt->tok_times, bt->neg_ids, bt->neg_slot, bt->imap };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) grm__free(CPU, bufs[i]);
    grm__free(CPU, bt->kjt_off);
    grm__free(CPU, bt->kjt_ids);
    free(bt->keys);
    free(bt->src);
    free(bt->fids);
    free(bt->foff);
    free(bt->fbase);
    free(bt->tab);
    if (bt->work) t->be.iface->work_destroy(t->be.context, bt->work);
    memset(bt, 0, sizeof *bt);
}

/* The buffers of one batch, sized by setup's capacities (t->sp.ws[].cap, B, RB, R). */
grm_status grm__batch_init(grm__trainer *t, grm__batch *bt)
{
    const grm__pipeline *p = t->p;
    int64_t T = t->ranking ? t->ds->ntasks : 1, R = t->R ? t->R : 1;
    memset(bt, 0, sizeof *bt);
    bt->fids = calloc((size_t)p->nfeatures, sizeof *bt->fids);
    bt->foff = calloc((size_t)p->nfeatures, sizeof *bt->foff);
    bt->fbase = calloc((size_t)p->nfeatures, sizeof *bt->fbase);
    bt->tab = calloc((size_t)p->nphys, sizeof *bt->tab);
    bt->keys = calloc((size_t)p->nfeatures + 1, sizeof *bt->keys);
    if (!bt->fids || !bt->foff || !bt->fbase || !bt->tab || !bt->keys) goto oom;
    int64_t nids = 0;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        bt->keys[i] = p->features[i].name;
        nids += grm__batch_ids_cap(t, i);
        bt->fids[i] = xalloc((size_t)grm__batch_ids_cap(t, i) * sizeof(int64_t));
        bt->foff[i] = xalloc((size_t)(t->B + 1) * sizeof(int64_t));
        if (!bt->fids[i] || !bt->foff[i]) goto oom;
    }
    for (int32_t k = 0; k < p->nphys; k++) {
        grm__batch_tab *w = &bt->tab[k];
        int64_t cap = t->sp.ws[k].cap, ns = p->plan->tables[k].nfeatures;
        w->ids = xalloc((size_t)cap * sizeof *w->ids);
        w->segoff = xalloc((size_t)(ns + 1) * sizeof *w->segoff);
        w->counts = xalloc((size_t)(ns ? ns : 1) * sizeof *w->counts);
        w->inv = xalloc((size_t)cap * sizeof *w->inv);
        w->keys = xalloc((size_t)cap * sizeof *w->keys);
        w->ufeat = xalloc((size_t)cap * sizeof *w->ufeat);
        if (!w->ids || !w->segoff || !w->counts || !w->inv || !w->keys || !w->ufeat) goto oom;
    }
    if (t->be.iface->work_create(t->be.context, &bt->work) != GRM_OK) goto oom;
    bt->kjt_off = xalloc((size_t)(p->nfeatures * t->B + 1) * sizeof(int64_t));
    bt->kjt_ids = xalloc((size_t)nids * sizeof(int64_t));
    if (!bt->kjt_off || !bt->kjt_ids) goto oom;
    bt->ex = xalloc((size_t)t->B * sizeof(int64_t));
    bt->src = calloc((size_t)t->B, sizeof *bt->src);
    bt->users = xalloc((size_t)t->B * sizeof(int64_t));
    bt->gids = xalloc((size_t)t->B * sizeof(int64_t));
    bt->hist_end = xalloc((size_t)t->B * sizeof(int64_t));
    bt->labels = xalloc((size_t)(t->B * T) * sizeof(float));
    bt->pos_ids = xalloc((size_t)t->RB * sizeof(int64_t));
    bt->tok_src = xalloc((size_t)t->RB * sizeof(int64_t));
    bt->tok_times = xalloc((size_t)t->RB * sizeof(int64_t));
    bt->neg_ids = xalloc((size_t)R * sizeof(int64_t));
    bt->neg_slot = xalloc((size_t)R * sizeof(int64_t));
    if (!t->ranking) {   /* the item table's key map: load factor at most one half */
        bt->mcap = 64;
        while (bt->mcap < 2 * t->sp.ws[t->item_phys].cap) bt->mcap *= 2;
        bt->imap = xalloc((size_t)bt->mcap * sizeof(int64_t));
        if (!bt->imap) goto oom;
    }
    if (!bt->ex || !bt->src || !bt->users || !bt->gids || !bt->hist_end || !bt->labels
        || !bt->pos_ids
        || !bt->tok_src || !bt->tok_times || !bt->neg_ids || !bt->neg_slot)
        goto oom;
    return GRM_OK;
oom:
    grm__batch_fini(t, bt);
    return grm_errorf(GRM_ENOMEM, "out of memory allocating a batch");
}

/* Most ids feature i gathers for one batch. */
int64_t grm__batch_ids_cap(const grm__trainer *t, int32_t i)
{
    const grm__feature *f = &t->p->features[i];
    int64_t per = f->is_sequence ? f->window : 1;
    if (t->ranking) per = t->ds->fmaxlen[i] < f->window ? t->ds->fmaxlen[i] : f->window;
    if (per < 1) per = 1;
    return t->seqmode ? t->RB : t->B * per;
}

/* Feature i's ids of the batch's samples into bt->fids[i], segment k being
 * fids[i][foff[i][k] .. foff[i][k+1]); a sequence model's token sources and times too. */
static void gather_feature(const grm__trainer *t, grm__batch *bt, int32_t i)
{
    const grm__feature *f = &t->p->features[i];
    const grm__dataset *ds = bt->streamed ? NULL : t->ds;   /* the trainer may swap t->ds */
    int64_t *out = bt->fids[i], n = 0;
    bt->foff[i][0] = 0;
    for (int64_t k = 0; k < bt->b; k++) {
        int64_t u = bt->users[k];
        if (t->ranking) {
            if (bt->streamed) ds = bt->src[k]->ds;
            /* the row's ids of this feature, the most recent `window` of a list */
            int64_t end = ds->fofs[i][u + 1], beg = end - f->window;
            if (beg < ds->fofs[i][u]) beg = ds->fofs[i][u];
            if (t->seqrank && i == t->p->seq_feature && ds->times)
                memcpy(bt->tok_times + n, ds->times + beg, (size_t)(end - beg) * sizeof(int64_t));
            for (int64_t j = beg; j < end; j++) out[n++] = ds->fids[i][j];
        } else if (f->is_sequence) {
            int64_t end = bt->hist_end[k], beg = end - f->window;
            if (beg < ds->offsets[u]) beg = ds->offsets[u];
            for (int64_t j = beg; j < end; j++) {
                if (t->seqmode) {
                    bt->tok_src[n] = j;
                    bt->tok_times[n] = ds->times ? ds->times[j] : 0;
                }
                out[n++] = ds->items[j];
            }
        } else {
            out[n++] = ds->users[u];
        }
        bt->foff[i][k + 1] = n;
    }
}

static grm_status ws_overflow(const grm__pipeline *p, int32_t T, int64_t cap)
{
    return grm_errorf(GRM_EINTERNAL, "table %s: step working set overflow (more than %lld "
                      "ids)", p->phys[T].name, (long long)cap);
}

static uint64_t imap_hash(int64_t key)
{
    return grm_mix64((uint64_t)key);
}

/* The item table's unique keys into bt->imap (key -> index + 1), for merging negatives. */
static void imap_build(grm__batch *bt, const grm__batch_tab *w)
{
    const uint64_t mask = (uint64_t)bt->mcap - 1;
    memset(bt->imap, 0, (size_t)bt->mcap * sizeof *bt->imap);
    for (int64_t u = 0; u < w->nu; u++) {
        uint64_t h = imap_hash(w->keys[u]) & mask;
        while (bt->imap[h]) h = (h + 1) & mask;
        bt->imap[h] = u + 1;
    }
}

/* The data side of a batch whose samples (users, hist_end, labels) are set: every feature's
 * ids, the targets (when `targets`: a sequence model's next item per token, or the samples'
 * pos_ids set by the caller), then per physical table one segment unique over the segments
 * of its id spaces (FusedRec §3, Fig. 5) and the keys (MTGRBoost §4.2 eq. 8). Touches only
 * the batch and read-only data, so it runs on the data thread. */
grm_status grm__batch_assemble_ids(const grm__trainer *t, grm__batch *bt, int targets)
{
    const grm__pipeline *p = t->p;
    grm_status st;
    for (int32_t i = 0; i < p->nfeatures; i++) gather_feature(t, bt, i);
    bt->rows = t->seqmode ? bt->foff[p->seq_feature][bt->b] : bt->b;
    if (targets && t->seqmode)
        for (int64_t n = 0; n < bt->rows; n++) bt->pos_ids[n] = t->ds->items[bt->tok_src[n] + 1];
    bt->nneg = 0;
    for (int32_t T = 0; T < p->nphys; T++) {
        const grm__sparse_table *tb = &p->plan->tables[T];
        grm__batch_tab *w = &bt->tab[T];
        const int64_t cap = t->sp.ws[T].cap;
        int64_t n = 0;
        for (int32_t j = 0; j < tb->nfeatures; j++) {
            int32_t space = tb->features[j];
            w->segoff[j] = n;
            for (int32_t i = 0; i < p->nfeatures; i++) {
                if (p->features[i].table_idx != space) continue;
                int64_t m = bt->foff[i][bt->b];
                if (n + m > cap) return ws_overflow(p, T, cap);
                memcpy(w->ids + n, bt->fids[i], (size_t)m * sizeof *w->ids);
                bt->fbase[i] = n;
                n += m;
            }
            if (space == t->item_table && targets) {
                if (n + bt->rows + t->R > cap) return ws_overflow(p, T, cap);
                memcpy(w->ids + n, bt->pos_ids, (size_t)bt->rows * sizeof *w->ids);
                bt->pos_base = n;
                n += bt->rows;
            }
        }
        w->segoff[tb->nfeatures] = n;
        w->n = n;
        st = be_segment_unique(t, w->keys, w->ufeat, w->counts, w->inv, &w->nu, w->ids, w->segoff,
                               n, tb->nfeatures, bt->work);
        if (st != GRM_OK) return st;
        /* unique ids come out segment by segment: encode each run with its id space */
        int64_t at = 0;
        for (int32_t j = 0; j < tb->nfeatures; j++) {
            st = grm__sparse_plan_encode(p->plan, tb->features[j], w->keys + at, w->keys + at,
                                         w->counts[j]);
            if (st != GRM_OK) {
                grm_error_prefix("[embedding] table %s: ", p->phys[T].name);
                return st;
            }
            at += w->counts[j];
        }
    }
    if (!t->ranking) imap_build(bt, &bt->tab[t->item_phys]);
    grm__batch_view(t, bt);
    return GRM_OK;
}

/* Negatives ids [nneg] of the item id space into the batch: each finds its unique row in
 * the item table through imap, or becomes a new unique key; bt->neg_slot names the rows. */
grm_status grm__batch_merge_negatives(const grm__trainer *t, grm__batch *bt, const int64_t *ids,
                                      int64_t nneg)
{
    const grm__pipeline *p = t->p;
    grm__batch_tab *w = &bt->tab[t->item_phys];
    const uint64_t mask = (uint64_t)bt->mcap - 1;
    if (w->n + nneg > t->sp.ws[t->item_phys].cap)
        return ws_overflow(p, t->item_phys, t->sp.ws[t->item_phys].cap);
    grm_status st = grm__sparse_plan_encode(p->plan, t->item_table, bt->neg_slot, ids, nneg);
    if (st != GRM_OK) {
        grm_error_prefix("[embedding] table %s: ", p->phys[t->item_phys].name);
        return st;
    }
    for (int64_t j = 0; j < nneg; j++) {
        const int64_t key = bt->neg_slot[j];
        uint64_t h = imap_hash(key) & mask;
        while (bt->imap[h] && w->keys[bt->imap[h] - 1] != key) h = (h + 1) & mask;
        if (!bt->imap[h]) {
            w->keys[w->nu] = key;
            w->ufeat[w->nu] = t->item_seg;
            bt->imap[h] = ++w->nu;
        }
        bt->neg_slot[j] = bt->imap[h] - 1;
    }
    if (ids != bt->neg_ids) memcpy(bt->neg_ids, ids, (size_t)nneg * sizeof *ids);
    bt->nneg = nneg;
    return GRM_OK;
}

/* Everything of training batch g that comes from the data (this rank's samples, or with
 * global every rank's, their ids, targets, keys), into bt. Runs on the data thread when
 * prefetch > 0: it alone then touches the epoch order (perm, bstart, tok_cum, ep_cum). */
static grm_status assemble(grm__trainer *t, grm__batch *bt, int64_t g, int global)
{
    const grm__dataset *ds = t->ds;
    const int32_t T = ds->ntasks;
    bt->streamed = 0;
    grm_status st = global ? grm__plan_slice_all(t, g, bt) : grm__plan_slice(t, g, bt);
    if (st == GRM_OK && !global) st = grm__plan_step_rows(t, g, &bt->step_rows);
    if (st != GRM_OK) return st;
    for (int64_t k = 0; k < bt->b; k++) {
        int64_t e = bt->ex[k];
        if (t->ranking) {
            int64_t r = ds->split_rows[0][e];
            bt->users[k] = r;
            memcpy(bt->labels + k * T, ds->labels + r * T, (size_t)T * sizeof(float));
        } else if (t->seqmode) {
            /* the user's training items: tokens items[beg, end - 1), each predicting the
             * next */
            int64_t u = t->plan.seq_users[e];
            bt->users[k] = u;
            bt->hist_end[k] = grm__fit_end(ds, u) - 1;
        } else {
            bt->users[k] = ds->ex_user[e];
            bt->hist_end[k] = ds->ex_pos[e];
            bt->pos_ids[k] = ds->items[ds->ex_pos[e]];
        }
    }
    return grm__batch_assemble_ids(t, bt, !t->ranking);
}

grm_status grm__batch_assemble_train(grm__trainer *t, grm__batch *bt, int64_t g)
{
    if (t->src.stream) return grm__stream_batch(t, bt, g);
    return assemble(t, bt, g, 0);
}

grm_status grm__batch_assemble_global(grm__trainer *t, grm__batch *bt, int64_t g)
{
    return assemble(t, bt, g, 1);
}

/* The batch as plugins see it (grm/tensor.h, DESIGN.md §2): every feature's ids as one
 * keyed jagged tensor (key i, sample k: ids[offsets[i * B + k] .. offsets[i * B + k + 1]),
 * in [feature.*] order), the labels (ranking) or the targets of each row of the dense stack
 * (retrieval: one per sample, or per token of a sequence model), the user of each sample
 * (GAUC's groups) and the sample and token counts. The ids are copied once per batch, on the
 * data thread, into buffers the batch owns. */
void grm__batch_view(const grm__trainer *t, grm__batch *bt)
{
    const grm__pipeline *p = t->p;
    const int64_t B = bt->b;
    int64_t n = 0;
    bt->kjt_off[0] = 0;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const int64_t *off = bt->foff[i];
        for (int64_t k = 0; k < B; k++) bt->kjt_off[i * B + k + 1] = n + off[k + 1];
        memcpy(bt->kjt_ids + n, bt->fids[i], (size_t)off[B] * sizeof(int64_t));
        n += off[B];
    }
    for (int64_t k = 0; k < B; k++) {   /* the user (ranking: the row's group) of each sample */
        const grm__dataset *ds = bt->streamed ? bt->src[k]->ds : t->ds;
        const int64_t u = bt->users[k];
        bt->gids[k] = !t->ranking ? ds->users[u] : ds->groups ? ds->groups[u] : u;
    }
    bt->kjt = (grm_kjt){ .nkeys = p->nfeatures, .keys = bt->keys, .batch = B,
                         .offsets = bt->kjt_off, .ids = bt->kjt_ids };
    bt->view = (grm_batch){
        .struct_size = sizeof(grm_batch),
        .ntasks = t->ranking ? t->ds->ntasks : 0,
        .samples = B,
        .tokens = t->seqmode ? bt->rows : bt->tokens,
        .group_ids = bt->gids,
        .sparse = &bt->kjt,
        .labels = t->ranking ? bt->labels : NULL,
        .targets = t->ranking ? NULL : bt->pos_ids,
    };
}
