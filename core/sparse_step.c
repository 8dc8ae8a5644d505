/* core/sparse_step.c - the sparse side of a step: the store lookup of each physical
 * table's unique keys (through core/dist.c's two-stage exchange with several ranks), pooling
 * into the dense input and its backward, and the row updates: at once, one step late on the
 * sparse thread (TurboGR §4.2.2 semi-async sparse), or aggregated over the batches of an
 * accumulated step. Only touched rows are updated (DESIGN.md §5). */
#include "train.h"

#include <stdlib.h>
#include <string.h>

/* The distributed lookup of table T's ids [n] (n_raw before dedup) into its working rows;
 * with pf.ahead it also sends the keys of batch next (NULL: none) to their owners and
 * queues those the other ranks sent, for this rank's data thread to prefetch. */
static grm_status dist_lookup(grm__trainer *t, int32_t T, const grm__batch_tab *w, int64_t n,
                              int64_t n_raw, uint32_t flags, const grm__batch *next)
{
    const int64_t *got = NULL;
    int64_t ngot = 0;
    grm_status st = grm__dist_lookup_ahead(t->sp.dist, T, w ? w->keys : NULL,
                                           w ? w->ufeat : NULL, n, n_raw, t->sp.ws[T].rows,
                                           flags, next ? next->tab[T].keys : NULL,
                                           next ? next->tab[T].nu : 0, &got, &ngot);
    if (st == GRM_OK && t->pf.ahead) st = grm__prefetch_ahead_got(t, T, got, ngot);
    return st;
}

/* The rows of the batch's keys from the store (every rank's, with several), once per
 * physical table. */
static grm_status lookup_batch(grm__trainer *t, grm__batch *bt, int training)
{
    grm__pipeline *p = t->p;
    grm_status st;
    for (int32_t T = 0; T < p->nphys; T++) {
        const grm__batch_tab *w = &bt->tab[T];
        if (t->sp.dist) {   /* collective: every rank, every table, even with no ids */
            const grm__batch *nx = training && t->pf.ahead
                                   ? grm__prefetch_peek(t, bt->g + 1) : NULL;
            st = dist_lookup(t, T, w, w->nu, w->n + (T == t->item_phys ? bt->nneg : 0),
                             training ? GRM_EMB_INSERT : 0, nx);
            if (st != GRM_OK) return st;
        } else if (w->nu > 0) {
            st = t->sp.eops->lookup(p->emb.inst, t->sp.ws[T].rows, T, w->keys, w->nu,
                                 training ? GRM_EMB_INSERT : 0);
            if (st != GRM_OK) {
                grm_error_prefix("[embedding] %s: ", p->emb.plugin->info->name);
                return st;
            }
        }
    }
    return GRM_OK;
}

/* With pf.ahead, the keys of batch g, the run's first, go to their owners before its
 * lookup, as each lookup sends the next batch's (collective: every rank, every table, a
 * lookup of no ids), so that no batch's rows are left to the owners' lookups. */
grm_status grm__sparse_announce(grm__trainer *t, int64_t g)
{
    if (!t->sp.dist || !t->pf.ahead) return GRM_OK;
    const grm__batch *bt = grm__prefetch_peek(t, g);
    grm_status st = GRM_OK;
    for (int32_t T = 0; T < t->p->nphys && st == GRM_OK; T++)
        st = dist_lookup(t, T, NULL, 0, 0, 0, bt);
    return st;
}

/* The dense input x [rows, din]: a sequence model's token rows as they are, otherwise each
 * feature pooled (sum, mean) or tiled (RecIS Table 1) into its columns. */
static grm_status pool_forward(grm__trainer *t, const grm__batch *bt)
{
    grm__pipeline *p = t->p;
    grm_status st;
    const int64_t b = bt->b;
    if (t->seqmode || t->seqrank) {   /* the token rows as they are */
        int32_t T = phys_of(p, p->seq_feature);
        st = be_gather(t, t->dn.acts[0], t->sp.ws[T].rows, fslots(t, bt, p->seq_feature),
                                bt->foff[p->seq_feature][b], bt->tab[T].nu, t->sp.ws[T].dim);
        if (st != GRM_OK || t->seqmode) return st;
    }
    /* pooled features: the columns of x, or with seqrank those of block S's input after
     * the last token's tok_dim */
    float *x = t->dn.acts[t->dn.S];
    const int64_t stride = t->dn.dims[t->dn.S];
    int64_t col = t->dn.tok_dim;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const grm__feature *f = &p->features[i];
        int32_t T = phys_of(p, i);
        const grm__table_ws *w = &t->sp.ws[T];
        if (t->seqrank && i == p->seq_feature) continue;
        if (f->pooling == GRM__POOL_TILE)
            st = grm__sparse_tile(t->sp.ptmp, w->rows, fslots(t, bt, i), bt->foff[i], b, f->window,
                                  bt->tab[T].nu, f->dim, GRM_SPARSE_TILE_LAST);
        else
            st = be_segment_reduce(t, t->sp.ptmp, w->rows, fslots(t, bt, i), bt->foff[i], b,
                                            bt->tab[T].nu, f->dim,
                                            f->pooling == GRM__POOL_MEAN ? GRM_POOL_MEAN
                                                                         : GRM_POOL_SUM);
        if (st != GRM_OK) return st;
        for (int64_t k = 0; k < b; k++)
            memcpy(x + k * stride + col, t->sp.ptmp + k * f->width,
                   (size_t)f->width * sizeof(float));
        col += f->width;
    }
    return GRM_OK;
}

/* Backward of pool_forward: dx [rows, din] into the summed row gradients of the tables. */
grm_status grm__pool_backward(grm__trainer *t, const grm__batch *bt)
{
    grm__pipeline *p = t->p;
    grm_status st;
    const int64_t b = bt->b;
    if (t->seqmode || t->seqrank) {   /* token n's input gradient goes to its row, unscaled */
        int32_t T = phys_of(p, p->seq_feature);
        st = be_scatter_add(t, t->sp.ws[T].grads, t->dn.dacts[0], fslots(t, bt, p->seq_feature),
                                     bt->foff[p->seq_feature][b], bt->tab[T].nu, t->sp.ws[T].dim,
                                     t->sp.work);
        if (st != GRM_OK || t->seqmode) return st;
    }
    const float *dx = t->dn.dacts[t->dn.S];
    const int64_t stride = t->dn.dims[t->dn.S];
    int64_t col = t->dn.tok_dim;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const grm__feature *f = &p->features[i];
        int32_t T = phys_of(p, i);
        if (t->seqrank && i == p->seq_feature) continue;
        for (int64_t k = 0; k < b; k++)
            memcpy(t->sp.ptmp + k * f->width, dx + k * stride + col,
                   (size_t)f->width * sizeof(float));
        col += f->width;
        if (f->pooling == GRM__POOL_TILE)
            st = grm__sparse_tile_bwd(t->sp.gin, t->sp.ptmp, bt->foff[i], b, f->window, f->dim,
                                      GRM_SPARSE_TILE_LAST);
        else
            st = be_segment_reduce_bwd(t, t->sp.gin, t->sp.ptmp, bt->foff[i], b, f->dim,
                                                f->pooling == GRM__POOL_MEAN
                                                    ? GRM_POOL_MEAN
                                                    : GRM_POOL_SUM);
        if (st != GRM_OK) return st;
        st = be_scatter_add(t, t->sp.ws[T].grads, t->sp.gin, fslots(t, bt, i), bt->foff[i][b],
                                     bt->tab[T].nu, f->dim, t->sp.work);
        if (st != GRM_OK) return st;
    }
    return GRM_OK;
}

/* Lookup and the dense input of an assembled batch. */
grm_status grm__embed_batch(grm__trainer *t, grm__batch *bt, int training)
{
    double t0 = now_s();
    grm_status st = lookup_batch(t, bt, training);
    if (st == GRM_OK) st = pool_forward(t, bt);
    if (training) t->rep.t_lookup += now_s() - t0;   /* evaluation has a row of its own */
    return st;
}

/* Forward and backward of batch bt (this rank's samples of global batch bt->g): negatives
 * drawn and merged, rows looked up, dense gradients added into the parameters' grads, the
 * batch's row gradients summed per unique key into each table's working set. Gradients are
 * weighted by `weight`, the batch's share of the step's rows, so a step of several batches
 * averages over its samples, not over its batches (MTGRBoost §5.1). */
/* The row optimizer on n keys of physical table T with their summed gradients [n, dim]:
 * the store's update on one rank, the exchange to the owners with several. `routed`: the
 * keys are those of T's last lookup, whose routing the exchange reuses (only gradients
 * travel). */
grm_status grm__update_table(grm__trainer *t, int32_t T, const int64_t *keys, const float *grads,
                               int64_t n, int64_t step, int routed)
{
    grm__pipeline *p = t->p;
    grm_status st = t->sp.dist
                        ? grm__dist_update(t->sp.dist, T, routed ? NULL : keys, grads, n, step)
                            : t->sp.eops->update(p->emb.inst, T, keys, grads, n, step);
    if (st != GRM_OK) grm_error_prefix("[embedding] %s update: ", p->emb.plugin->info->name);
    return st;
}

/* ---- semi-async sparse (TurboGR §4.2.2) ---- */

/* Apply the pending row gradients: the exchange to the owners and the row optimizer,
 * collective with several ranks. */
static grm_status apply_pending(grm__trainer *t)
{
    grm_status st = GRM_OK;
    for (int32_t i = 0; i < t->p->nphys && st == GRM_OK; i++) {
        const struct grm__pending *q = &t->sp.pend[i];
        st = grm__update_table(t, i, q->keys, q->grads, q->n, t->sp.pend_step, 0);
    }
    if (st == GRM_OK) grm__prefetch_applied(t, t->sp.pend_step);
    t->sp.pend_step = 0;
    return st;
}

static void *async_main(void *arg)
{
    grm__trainer *t = arg;
    grm__pool_inline_thread();   /* the pool belongs to the trainer thread */
    t->sp.sst = apply_pending(t);
    if (t->sp.sst != GRM_OK) snprintf(t->sp.serr, sizeof t->sp.serr, "%s", grm_last_error());
    return NULL;
}

/* After the lookup of step i + 1: step i's update starts on the sparse thread. The grm__trainer
 * makes no collective call until async_join, so the two threads' calls never interleave
 * (comm-mpi asks for MPI_THREAD_MULTIPLE and needs at least MPI_THREAD_SERIALIZED). */
grm_status grm__async_start(grm__trainer *t)
{
    if (!t->sp.async || !t->sp.pend_step) return GRM_OK;
    if (pthread_create(&t->sp.sthread, NULL, async_main, t) != 0)
        return grm_errorf(GRM_EINTERNAL, "cannot start the sparse update thread");
    t->sp.srunning = 1;
    return GRM_OK;
}

/* Wait for the sparse thread; its failure becomes the trainer's. */
grm_status grm__async_join(grm__trainer *t)
{
    if (!t->sp.srunning) return GRM_OK;
    double t0 = now_s();
    pthread_join(t->sp.sthread, NULL);
    t->sp.srunning = 0;
    t->rep.t_async += now_s() - t0;
    if (t->sp.sst != GRM_OK) return grm_errorf(t->sp.sst, "%s", t->sp.serr);
    return GRM_OK;
}

/* Everything pending applied now (before evaluation, checkpoints and the end of the run, at
 * the same steps on every rank). */
grm_status grm__async_flush(grm__trainer *t)
{
    grm_status st = grm__async_join(t);
    if (st == GRM_OK && t->sp.async && t->sp.pend_step) st = apply_pending(t);
    return st;
}

/* Keep the row gradients of the batch just run for the step's one update. */
void grm__stash_rows(grm__trainer *t, const grm__batch *bt)
{
    for (int32_t i = 0; i < t->p->nphys; i++) {
        grm__table_ws *w = &t->sp.ws[i];
        const grm__batch_tab *bw = &bt->tab[i];
        memcpy(w->akeys + w->an, bw->keys, (size_t)bw->nu * sizeof *bw->keys);
        memcpy(w->agrads + w->an * w->dim, w->grads, (size_t)(bw->nu * w->dim) * sizeof(float));
        w->an += bw->nu;
    }
}

/* Sparse gradient accumulation: the stashed (key, gradient) pairs of the step's batches
 * aggregated by key (segment unique with one segment, then a scatter-add), so each touched
 * row sees one update with its summed gradient. */
static grm_status update_accumulated(grm__trainer *t, int64_t step)
{
    grm__pipeline *p = t->p;
    grm_status st;
    for (int32_t T = 0; T < p->nphys; T++) {
        grm__table_ws *w = &t->sp.ws[T];
        int64_t off[2] = { 0, w->an }, nu = 0;
        st = be_segment_unique(t, w->ukeys, NULL, NULL, w->ainv, &nu, w->akeys, off,
                                        w->an, 1, t->sp.work);
        if (st != GRM_OK) return st;
        memset(w->ugrads, 0, (size_t)(nu * w->dim) * sizeof(float));
        st = be_scatter_add(t, w->ugrads, w->agrads, w->ainv, w->an, nu, w->dim,
                                     t->sp.work);
        if (st != GRM_OK) return st;
        w->an = 0;
        if ((st = grm__update_table(t, T, w->ukeys, w->ugrads, nu, step, 0)) != GRM_OK) return st;
    }
    return GRM_OK;
}

/* The store over the physical tables (fixed-capacity tables sized from the data unless
 * given; a merged table holds the sum of its id spaces), and with several ranks the
 * sharding of its rows by a hash of the key (core/dist.c). */
grm_status grm__sparse_setup(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    grm__dataset *ds = t->ds;
    grm_status st;
    const grm__settings *s = &p->set;
    /* table sizes for fixed-capacity stores come from the data unless given */
    for (int32_t i = 0; i < p->nfeatures; i++) {
        grm__feature *f = &p->features[i];
        grm_emb_table_spec *ts = &p->tables[f->table_idx];
        const int64_t top = t->ranking ? ds->fmax[i] : f->is_sequence ? ds->max_item
                                                                      : ds->max_user;
        const int64_t most = p->plan->tables[p->plan->slots[f->table_idx].table].max_id;
        /* a store of row indices sizes its table from the largest id: refuse one it cannot
         * key here (top + 1 overflowed for INT64_MAX: "rows = 0", issue 25 item 14); a
         * hash store meets it in the batch that holds it, naming the id */
        if (top > most && !(grm__emb_flags(p) & GRM_EMB_ANY_ID))
            return grm_errorf(GRM_EINVAL, "[feature.%s]: the data holds id %lld, above %lld, "
                              "the largest id table '%s' can key; remap the ids (transform-"
                              "basic mod or hash)", f->name, (long long)top, (long long)most,
                              f->table);
        const int64_t need = top < INT64_MAX ? top + 1 : INT64_MAX;
        if (f->rows == 0 && ts->rows < need) ts->rows = need;
        if (f->rows > ts->rows) ts->rows = f->rows;
    }
    for (int32_t i = 0; i < p->ntables; i++)
        if (strcmp(p->tables[i].name, s->item_table) == 0) t->item_table = i;
    t->item_phys = p->plan->slots[t->item_table].table;
    for (int32_t j = 0; j < p->plan->tables[t->item_phys].nfeatures; j++)
        if (p->plan->tables[t->item_phys].features[j] == t->item_table) t->item_seg = j;
    /* a merged table's capacity: the sum of its id spaces' */
    for (int32_t T = 0; T < p->nphys; T++) p->phys[T].rows = 0;
    for (int32_t i = 0; i < p->ntables; i++)
        p->phys[p->plan->slots[i].table].rows += p->tables[i].rows;
    if ((st = t->be.iface->work_create(t->be.context, &t->sp.work)) != GRM_OK) return st;
    t->sp.eops = p->emb.plugin->info->ops;
    if ((st = t->sp.eops->create(p->emb.config.data, p->phys, p->nphys, &p->sparse_opt,
                              &p->emb.inst)) != GRM_OK) {
        grm_error_prefix("[embedding] %s: ", p->emb.plugin->info->name);
        return st;
    }
    if (t->nranks > 1) {   /* rows sharded over the ranks by a hash of the key */
        int32_t *dims = calloc((size_t)p->nphys, sizeof *dims);
        if (!dims) return grm_errorf(GRM_ENOMEM, "out of memory");
        grm__dist_opts o = grm__dist_opts_default();
        o.dedup1 = 0;   /* the trainer's segment unique is stage 1 */
        o.group_size = (int32_t)s->sparse_group;
        o.table_names = (const char *const *)p->phys_names;
        o.ahead = grm__prefetch_ahead_wanted(t);
        for (int32_t T = 0; T < p->nphys; T++) {
            dims[T] = p->phys[T].dim;
            if (p->plan->tables[T].nfeatures > o.nfeatures)
                o.nfeatures = p->plan->tables[T].nfeatures;
        }
        st = grm__dist_create(&p->comm_handle, t->sp.eops, p->emb.inst, p->nphys, dims, &o,
                              &t->sp.dist);
        free(dims);
        if (st != GRM_OK) return st;
    }
    return GRM_OK;
}

/* The step's working sets, one per physical table: the ids of a batch (the item table's
 * also the targets and the negatives), their rows and gradients, the accumulation and
 * semi-async buffers. */
grm_status grm__sparse_buffers(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    const grm__settings *s = &p->set;
    t->sp.ws = calloc((size_t)p->nphys, sizeof *t->sp.ws);
    if (!t->sp.ws) return grm_errorf(GRM_ENOMEM, "out of memory");
    int64_t wmax = 1, gmax = 1;
    for (int32_t i = 0; i < p->nfeatures; i++) {
        grm__feature *f = &p->features[i];
        int64_t nid = grm__batch_ids_cap(t, i);
        t->sp.ws[phys_of(p, i)].cap += nid;
        if (f->width > wmax) wmax = f->width;
        if (nid * f->dim > gmax) gmax = nid * f->dim;
    }
    t->sp.ptmp = xalloc((size_t)(t->B * wmax) * sizeof(float));
    t->sp.gin = xalloc((size_t)gmax * sizeof(float));
    if (!t->sp.ptmp || !t->sp.gin) return GRM_ENOMEM;
    if (!t->ranking) t->sp.ws[t->item_phys].cap += t->RB + t->R;
    for (int32_t T = 0; T < p->nphys; T++) {
        grm__table_ws *w = &t->sp.ws[T];
        w->dim = p->phys[T].dim;
        w->nspace = p->plan->tables[T].nfeatures;
        if (w->cap < 1) w->cap = 1;
        w->rows = xalloc((size_t)(w->cap * w->dim) * sizeof(float));
        w->grads = xalloc((size_t)(w->cap * w->dim) * sizeof(float));
        if (!w->rows || !w->grads) return grm_errorf(GRM_ENOMEM, "out of memory");
        if (s->accumulate > 1) {
            w->acap = w->cap * s->accumulate;
            w->akeys = xalloc((size_t)w->acap * sizeof *w->akeys);
            w->ainv = xalloc((size_t)w->acap * sizeof *w->ainv);
            w->ukeys = xalloc((size_t)w->acap * sizeof *w->ukeys);
            w->agrads = xalloc((size_t)(w->acap * w->dim) * sizeof(float));
            w->ugrads = xalloc((size_t)(w->acap * w->dim) * sizeof(float));
            if (!w->akeys || !w->ainv || !w->ukeys || !w->agrads || !w->ugrads)
                return grm_errorf(GRM_ENOMEM, "out of memory");
        }
    }
    t->sp.async = (int)s->sparse_async;
    if (t->sp.async) {
        t->sp.pend = calloc((size_t)p->nphys, sizeof *t->sp.pend);
        if (!t->sp.pend) return grm_errorf(GRM_ENOMEM, "out of memory");
        for (int32_t T = 0; T < p->nphys; T++) {
            t->sp.pend[T].keys = xalloc((size_t)t->sp.ws[T].cap * sizeof(int64_t));
            t->sp.pend[T].grads =
                xalloc((size_t)(t->sp.ws[T].cap * t->sp.ws[T].dim) * sizeof(float));
            if (!t->sp.pend[T].keys || !t->sp.pend[T].grads) return GRM_ENOMEM;
        }
    }
    return GRM_OK;
}

void grm__sparse_teardown(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    grm__async_join(t);   /* the sparse thread may still be updating the store */
    if (p->emb.inst) t->sp.eops->destroy(p->emb.inst);
    p->emb.inst = NULL;
    if (t->sp.ws) {
        for (int32_t T = 0; T < p->nphys; T++) {
            grm__table_ws *w = &t->sp.ws[T];
            void *wb[] = { w->rows, w->grads, w->akeys, w->agrads, w->ainv, w->ukeys,
                           w->ugrads };
            for (size_t i = 0; i < sizeof wb / sizeof *wb; i++) grm__free(CPU, wb[i]);
        }
    }
    for (int32_t T = 0; t->sp.pend && T < p->nphys; T++) {
        grm__free(CPU, t->sp.pend[T].keys);
        grm__free(CPU, t->sp.pend[T].grads);
    }
    free(t->sp.pend);
    free(t->sp.ws);
    if (t->sp.work) t->be.iface->work_destroy(t->be.context, t->sp.work);
    t->sp.work = NULL;
    grm__dist_destroy(t->sp.dist);
    grm__free(CPU, t->sp.ptmp);
    grm__free(CPU, t->sp.gin);
    t->sp.pend = NULL;
    t->sp.ws = NULL;
    t->sp.dist = NULL;
}

/* The step's row updates, after its dense step: with accumulate > 1 the stashed gradients
 * of its batches aggregated by key; with sparse_async the batch's gradients kept for the
 * sparse thread, which applies them during the next step's dense work; otherwise each
 * table's update now, reusing the routing of its lookup. */
grm_status grm__sparse_apply(grm__trainer *t, const grm__batch *bt, int64_t step)
{
    grm__pipeline *p = t->p;
    grm_status st = GRM_OK;
    if (p->set.accumulate > 1) {
        if ((st = update_accumulated(t, step)) == GRM_OK) grm__prefetch_applied(t, step);
        return st;
    }
    if (t->sp.async) {   /* the update waits for the next step's lookup */
        for (int32_t i = 0; i < p->nphys; i++) {
            struct grm__pending *q = &t->sp.pend[i];
            q->n = bt->tab[i].nu;
            memcpy(q->keys, bt->tab[i].keys, (size_t)q->n * sizeof *q->keys);
            memcpy(q->grads, t->sp.ws[i].grads,
                   (size_t)(q->n * t->sp.ws[i].dim) * sizeof(float));
        }
        t->sp.pend_step = step;
        return GRM_OK;
    }
    for (int32_t i = 0; i < p->nphys && st == GRM_OK; i++)
        st = grm__update_table(t, i, bt->tab[i].keys, t->sp.ws[i].grads, bt->tab[i].nu, step, 1);
    if (st == GRM_OK) grm__prefetch_applied(t, step);
    return st;
}
