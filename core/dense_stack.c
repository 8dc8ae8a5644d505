/* core/dense_stack.c - the dense blocks ([dense.N] in order) and the head (core/head.c):
 * their creation from the input width, the activations between them, forward and backward over samples or
 * jagged tokens (a sequence model; the first sequence_blocks of a ranking token list), their
 * named parameters with the dense optimizer's state, and the data-parallel allreduce of the
 * gradients (MTGRBoost §3). */
#include "train.h"

#include <grm/rng.h>
#include <stdlib.h>
#include <string.h>

/* Does block i run on the jagged tokens? */
static int on_tokens(const grm__trainer *t, int32_t i)
{
    return t->seqmode || (t->seqrank && i < t->dn.S);
}

/* What block i learns about the batch: the step, and on tokens their jagged layout. */
static grm_dense_ctx dense_ctx(const grm__trainer *t, const grm__batch *bt, int32_t i, int training,
                               int64_t step)
{
    grm_dense_ctx ctx = { .struct_size = sizeof ctx, .training = training, .step = step,
                          .batch = &bt->view };
    if (on_tokens(t, i)) {
        ctx.offsets = bt->foff[t->p->seq_feature];   /* [nseq + 1] token rows */
        ctx.nseq = bt->b;
        ctx.times = t->has_times ? bt->tok_times : NULL;
    }
    return ctx;
}

/* Block i's input x and output y as the stack lays them out: [rows, dims] on tokens or
 * samples; with seqrank block S - 1 writes the token buffer tacts instead of block S's
 * input, which holds one row per sample (pool_forward filled its pooled columns). */
static void block_io(const grm__trainer *t, const grm__batch *bt, int32_t i, int grad,
                     grm_tensor *x,
                     grm_tensor *y)
{
    const int64_t rows = on_tokens(t, i) ? bt->foff[t->p->seq_feature][bt->b] : bt->rows;
    float *const *a = grad ? t->dn.dacts : t->dn.acts;
    const int last_tok = t->seqrank && i == t->dn.S - 1;
    *x = (grm_tensor){ .data = a[i], .dtype = GRM_DTYPE_F32, .ndim = 2,
                       .shape = { rows, t->dn.dims[i], 1, 1 }, .device = CPU };
    *y = (grm_tensor){ .data = last_tok ? (grad ? t->dn.dtacts : t->dn.tacts) : a[i + 1],
                       .dtype = GRM_DTYPE_F32, .ndim = 2,
                       .shape = { rows, last_tok ? t->dn.tok_dim : t->dn.dims[i + 1], 1, 1 },
                       .device = CPU };
}

/* seqrank: each row's last token output into the first tok_dim columns of block S's input
 * (backward: the gradient of those columns to the last tokens, zero for the others). A row
 * with no tokens gets zeros. */
static void last_tokens(grm__trainer *t, const grm__batch *bt, int backward)
{
    const int64_t *off = bt->foff[t->p->seq_feature], dt = t->dn.tok_dim, ds = t->dn.dims[t->dn.S];
    float *x = backward ? t->dn.dacts[t->dn.S] : t->dn.acts[t->dn.S];
    if (backward) memset(t->dn.dtacts, 0, (size_t)(off[bt->b] * dt) * sizeof(float));
    for (int64_t k = 0; k < bt->b; k++) {
        float *tok = (backward ? t->dn.dtacts : t->dn.tacts) + (off[k + 1] - 1) * dt;
        if (off[k + 1] == off[k]) {
            if (!backward) memset(x + k * ds, 0, (size_t)dt * sizeof(float));
        } else if (backward) {
            memcpy(tok, x + k * ds, (size_t)dt * sizeof(float));
        } else {
            memcpy(x + k * ds, tok, (size_t)dt * sizeof(float));
        }
    }
}

/* The stack's forward on the batch: acts[ndense] is what the head reads. */
grm_status grm__dense_forward(grm__trainer *t, const grm__batch *bt, int training, int64_t step)
{
    grm__pipeline *p = t->p;
    for (int32_t i = 0; i < p->ndense; i++) {
        grm__stage *stg = &p->dense[i];
        const grm_dense_ops *ops = stg->plugin->info->ops;
        grm_dense_ctx ctx = dense_ctx(t, bt, i, training, step);
        grm_tensor x, y;
        block_io(t, bt, i, 0, &x, &y);
        grm_status st = ops->forward(stg->inst, &y, &x, &ctx);
        if (st != GRM_OK) {
            grm_error_prefix("[%s] %s forward: ", stg->label, stg->plugin->info->name);
            return st;
        }
        if (training)   /* right after the forward: a block may count what it just saw */
            t->rep.flops_dense += ops->flops(stg->inst, x.shape[0], 0)
                                  + ops->flops(stg->inst, x.shape[0], 1);
        if (t->seqrank && i == t->dn.S - 1) last_tokens(t, bt, 0);
    }
    return GRM_OK;
}

/* Data-parallel dense side (MTGRBoost §3): the weighted dense gradients of all ranks summed
 * in one allreduce, so every rank applies the same update; the step's loss, samples and
 * tokens summed alike. */
grm_status grm__dense_allreduce(grm__trainer *t, double *loss, int64_t *samples, int64_t *tokens)
{
    const grm_comm_handle *c = &t->p->comm_handle;
    grm_status st;
    int64_t at = 0;
    for (int32_t i = 0; i < t->dn.nparams; i++) {
        memcpy(t->dn.gbuf + at, t->dn.params[i].grad,
               (size_t)t->dn.params[i].numel * sizeof(float));
        at += t->dn.params[i].numel;
    }
    t->dn.gbuf[at] = (float)*loss;   /* the weighted loss travels with the gradients */
    if ((st = c->ops->allreduce(c->inst, t->dn.gbuf, at + 1, GRM_DTYPE_F32, GRM_REDUCE_SUM))
        != GRM_OK)
        return st;
    double l = t->dn.gbuf[at];
    at = 0;
    for (int32_t i = 0; i < t->dn.nparams; i++) {
        memcpy(t->dn.params[i].grad, t->dn.gbuf + at,
               (size_t)t->dn.params[i].numel * sizeof(float));
        at += t->dn.params[i].numel;
    }
    int64_t n[2] = { *samples, *tokens };
    if ((st = c->ops->allreduce(c->inst, n, 2, GRM_DTYPE_I64, GRM_REDUCE_SUM)) != GRM_OK)
        return st;
    *loss = l;
    *samples = n[0];
    *tokens = n[1];
    return GRM_OK;
}

/* Data parallelism keeps the dense parameters identical on every rank; a hash of their
 * bits, compared at each logged step (max and min over the ranks), proves it. */
grm_status grm__dense_check_replicas(grm__trainer *t)
{
    if (t->nranks < 2) return GRM_OK;
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int32_t i = 0; i < t->dn.nparams; i++) {
        const uint32_t *v = (const uint32_t *)t->dn.params[i].value;
        for (int64_t k = 0; k < t->dn.params[i].numel; k++) h = grm_mix64(h ^ v[k]);
    }
    int64_t mm[2] = { (int64_t)(h >> 1), -(int64_t)(h >> 1) };
    const grm_comm_handle *c = &t->p->comm_handle;
    grm_status st = c->ops->allreduce(c->inst, mm, 2, GRM_DTYPE_I64, GRM_REDUCE_MAX);
    if (st != GRM_OK) return st;
    if (mm[0] != -mm[1])
        return grm_errorf(GRM_EINTERNAL, "step %lld: the dense parameters differ across ranks "
                          "(data-parallel replicas diverged)", (long long)t->step);
    return GRM_OK;
}

/* The blocks in [dense.N] order, each created for its input width, the stack's output
 * checked against D (the item table's dim, or the number of tasks), then the head, checked
 * against the task: what `grmhost check` runs too (grm__check). */
grm_status grm__dense_wire(grm__trainer *t, int32_t D)
{
    grm__pipeline *p = t->p;
    grm_status st;
    const grm__settings *s = &p->set;
    t->dn.dims = calloc((size_t)p->ndense + 1, sizeof *t->dn.dims);
    t->dn.acts = calloc((size_t)p->ndense + 1, sizeof *t->dn.acts);
    t->dn.dacts = calloc((size_t)p->ndense + 1, sizeof *t->dn.dacts);
    if (!t->dn.dims || !t->dn.acts || !t->dn.dacts) return grm_errorf(GRM_ENOMEM, "out of memory");
    for (int32_t i = 0; i < p->nfeatures; i++)
        if (!t->seqrank || i != p->seq_feature) t->dn.din += p->features[i].width;
    t->dn.dims[0] = t->seqrank ? p->features[p->seq_feature].dim : t->dn.din;
    for (int32_t i = 0; i < p->ndense; i++) {
        const grm_dense_ops *ops = p->dense[i].plugin->info->ops;
        uint64_t seed = grm_mix64((uint64_t)s->seed ^ grm_mix64(0xd5e0 + (uint64_t)i));
        if ((st = ops->create(p->dense[i].config.data, t->dn.dims[i], seed, &p->dense[i].inst))
            != GRM_OK) {
            grm_error_prefix("[%s] %s: ", p->dense[i].label, p->dense[i].plugin->info->name);
            return st;
        }
        t->dn.dims[i + 1] = ops->out_dim(p->dense[i].inst);
        if (t->seqrank && i + 1 == t->dn.S) {   /* the last token's output beside the pooled */
            t->dn.tok_dim = t->dn.dims[i + 1];
            t->dn.dims[i + 1] += t->dn.din;
        }
    }
    /* retrieval: queries live in the item table's space; ranking: one logit per task */
    const int64_t out = t->dn.dims[p->ndense];
    if (out != D) {   /* named at the last block's section, beside what fixes D */
        const grm__stage *last = p->ndense ? &p->dense[p->ndense - 1] : NULL;
        const grm__section *ls = last ? last->section : NULL;
        const char *lfile = ls ? ls->file : p->cfg->path;
        int lline = ls ? ls->line : 0;
        const char *lname = last ? last->label : "head";
        if (t->ranking)
            return grm_errorf(GRM_EINVAL, "%s:%d: [%s]: the dense stack ends in %lld features "
                              "but [train] label_columns names %d tasks; make the last "
                              "[dense.N] output %d", lfile, lline, lname, (long long)out, D, D);
        const grm__feature *f = NULL;
        for (int32_t i = 0; i < p->nfeatures && !f; i++)
            if (strcmp(p->features[i].table, s->item_table) == 0) f = &p->features[i];
        return grm_errorf(GRM_EINVAL, "%s:%d: [%s]: the dense stack ends in %lld features but "
                          "item table '%s' has dim %d (%s:%d: [feature.%s] dim); make the last "
                          "[dense.N] output %d", lfile, lline, lname, (long long)out,
                          s->item_table, D, f ? f->file : p->cfg->path, f ? f->line : 0,
                          f ? f->name : s->item_table, D);
    }
    t->dn.head_in = out;
    if ((st = grm__head_create(&t->dn.head, &p->head, out, (uint64_t)s->seed)) != GRM_OK)
        return st;
    return grm__head_check(p, &p->head, t->ranking, grm__head_task(&t->dn.head));
}

/* grm__dense_wire, then the activation buffers between the blocks; how many negatives a
 * step of the head draws (one draw with a generous bound); the head's row buffers; the named
 * parameters with the dense optimizer's state, and with several ranks the buffer their
 * gradients are summed in. */
grm_status grm__dense_setup(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    grm__dataset *ds = t->ds;
    grm_status st;
    int32_t D = t->ranking ? (int32_t)ds->ntasks : p->tables[t->item_table].dim;
    if ((st = grm__dense_wire(t, D)) != GRM_OK) return st;
    for (int32_t i = 0; i <= p->ndense; i++) {
        t->dn.acts[i] = xalloc((size_t)(t->RB * t->dn.dims[i]) * sizeof(float));
        t->dn.dacts[i] = xalloc((size_t)(t->RB * t->dn.dims[i]) * sizeof(float));
        if (!t->dn.acts[i] || !t->dn.dacts[i]) return GRM_ENOMEM;
    }
    if (t->seqrank) {
        t->dn.tacts = xalloc((size_t)(t->RB * t->dn.tok_dim) * sizeof(float));
        t->dn.dtacts = xalloc((size_t)(t->RB * t->dn.tok_dim) * sizeof(float));
        if (!t->dn.tacts || !t->dn.dtacts) return GRM_ENOMEM;
    }

    /* negatives: the head draws as many as its configuration asks for; one draw with a
     * generous bound tells how many buffers must hold */
    if (!t->ranking) {
        int64_t cap = 1 << 20, n = 0;
        int64_t *tmp = xalloc((size_t)cap * sizeof *tmp);
        grm_catalog cat = { ds->ncatalog, ds->catalog_ids, ds->catalog_counts };
        if (!tmp) return GRM_ENOMEM;
        st = grm__head_negatives(&t->dn.head, tmp, &n, cap, &cat, 1);
        grm__free(CPU, tmp);
        if (st != GRM_OK) return st;
        t->R = n;
    }
    if ((st = grm__head_reserve(&t->dn.head, t->RB, t->R, D)) != GRM_OK) return st;
    /* dense parameters and their optimizer state */
    t->dn.state_floats = t->dn.dops->state_floats(t->dn.dopt);
    for (int32_t pass = 0; pass < 2; pass++) {
        int32_t n = 0;
        for (int32_t i = 0; i <= p->ndense; i++) {   /* the blocks, then the head */
            grm__stage *stg = i < p->ndense ? &p->dense[i] : &p->head;
            const grm_dense_ops *ops = stg->plugin->info->ops;
            for (int32_t k = 0;; k++) {
                grm_named_tensor v;
                grm_tensor g;
                st = i < p->ndense ? ops->params(stg->inst, k, &v, &g)
                                   : grm__head_params(&t->dn.head, k, &v, &g);
                if (st == GRM_ENOTFOUND) break;
                if (st != GRM_OK) return st;
                if (pass == 1) {
                    grm__dparam *dp = &t->dn.params[n];
                    char name[256];
                    snprintf(name, sizeof name, "%s.%s", stg->label, v.name);
                    dp->name = strdup(name);
                    dp->value = v.tensor.data;
                    dp->grad = g.data;
                    dp->shape = v.tensor;
                    dp->numel = 1;
                    for (int32_t d = 0; d < v.tensor.ndim; d++) dp->numel *= v.tensor.shape[d];
                    dp->state = calloc((size_t)(t->dn.state_floats * dp->numel) + 1, sizeof(float));
                    if (!dp->name || !dp->state) return grm_errorf(GRM_ENOMEM, "out of memory");
                }
                n++;
            }
        }
        if (pass == 0) {
            t->dn.nparams = n;
            t->dn.params = calloc((size_t)n + 1, sizeof *t->dn.params);
            if (!t->dn.params) return grm_errorf(GRM_ENOMEM, "out of memory");
        }
    }
    if (t->nranks > 1) {
        for (int32_t i = 0; i < t->dn.nparams; i++) t->dn.gnumel += t->dn.params[i].numel;
        t->dn.gbuf = xalloc((size_t)(t->dn.gnumel + 1) * sizeof(float));
        if (!t->dn.gbuf) return GRM_ENOMEM;
    }
    return GRM_OK;
}

void grm__dense_teardown(grm__trainer *t)
{
    grm__pipeline *p = t->p;
    grm__dense_stack *dn = &t->dn;
    for (int32_t i = 0; i < p->ndense; i++) {
        const grm_dense_ops *ops = p->dense[i].plugin->info->ops;
        if (p->dense[i].inst) ops->destroy(p->dense[i].inst);
        p->dense[i].inst = NULL;
    }
    grm__head_destroy(&dn->head);
    for (int32_t i = 0; dn->acts && i <= p->ndense; i++) {
        grm__free(CPU, dn->acts[i]);
        grm__free(CPU, dn->dacts[i]);
    }
    free(dn->acts);
    free(dn->dacts);
    free(dn->dims);
    void *bufs[] = { dn->gbuf, dn->tacts, dn->dtacts };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) grm__free(CPU, bufs[i]);
    for (int32_t i = 0; dn->params && i < dn->nparams; i++) {
        free(dn->params[i].name);
        free(dn->params[i].state);
    }
    free(dn->params);
    dn->acts = dn->dacts = NULL;
    dn->dims = NULL;
    dn->params = NULL;
    dn->nparams = 0;
}

/* Backward through the stack from dacts[ndense], the head's d_pred (parameter gradients
 * accumulate in the blocks). */
grm_status grm__dense_backward(grm__trainer *t, const grm__batch *bt)
{
    grm__pipeline *p = t->p;
    for (int32_t i = p->ndense - 1; i >= 0; i--) {
        grm__stage *stg = &p->dense[i];
        const grm_dense_ops *ops = stg->plugin->info->ops;
        grm_dense_ctx ctx = dense_ctx(t, bt, i, 1, bt->g);
        grm_tensor dx, dy;
        if (t->seqrank && i == t->dn.S - 1) last_tokens(t, bt, 1);
        block_io(t, bt, i, 1, &dx, &dy);
        grm_status st = ops->backward(stg->inst, &dx, &dy, &ctx);
        if (st != GRM_OK) {
            grm_error_prefix("[%s] %s backward: ", stg->label, stg->plugin->info->name);
            return st;
        }
    }
    return GRM_OK;
}

void grm__dense_zero_grads(grm__trainer *t)
{
    for (int32_t i = 0; i < t->dn.nparams; i++)
        memset(t->dn.params[i].grad, 0, (size_t)t->dn.params[i].numel * sizeof(float));
}

/* The dense optimizer on every parameter, each with its own step count. */
grm_status grm__dense_step(grm__trainer *t)
{
    for (int32_t i = 0; i < t->dn.nparams; i++) {
        grm__dparam *dp = &t->dn.params[i];
        dp->steps++;
        grm_status st = t->dn.dops->step(t->dn.dopt, dp->value, dp->state, dp->grad, dp->numel,
                                         dp->steps);
        if (st != GRM_OK) return st;
    }
    return GRM_OK;
}
