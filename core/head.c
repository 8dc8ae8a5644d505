/* core/head.c - the trainer's head (core/head.h): a head plugin of ABI 1.5 (grm/head.h) is
 * called as it is; a dense-kind head of ABI 1.0-1.4 (grm/dense.h loss, loss_kind, negatives)
 * gets what the trainer used to do for it: its forward before the loss and its backward
 * after, and the targets' and negatives' rows gathered from the batch's unique item rows and
 * their gradients summed back, through the run's backend. */
#include "head.h"

#include <stdlib.h>
#include <string.h>

#define HOST ((grm_device){ GRM_DEVICE_CPU, 0 })

grm_status grm__head_create(grm__head *h, const grm__stage *stage, int64_t in_dim,
                            uint64_t seed)
{
    memset(h, 0, sizeof *h);
    h->stage = stage;
    grm_status st;
    if (stage->plugin->info->kind == GRM_KIND_HEAD) {
        h->ops = stage->plugin->info->ops;
        st = h->ops->create(stage->config.data, in_dim, seed, &h->inst);
    } else {
        h->legacy = stage->plugin->info->ops;
        st = h->legacy->create(stage->config.data, in_dim, seed, &h->inst);
        if (st == GRM_OK) h->out_dim = h->legacy->out_dim(h->inst);
    }
    if (st != GRM_OK) grm_error_prefix("[head] %s: ", stage->plugin->info->name);
    return st;
}

grm_status grm__head_reserve(grm__head *h, int64_t rows, int64_t nneg, int64_t D)
{
    if (!h->legacy) return GRM_OK;
    if (rows < 1) rows = 1;
    if (nneg < 1) nneg = 1;
    h->cap = rows;
    h->ncap = nneg;
    h->y = grm__alloc(HOST, (size_t)(rows * h->out_dim) * sizeof(float), 64);
    h->dy = grm__alloc(HOST, (size_t)(rows * h->out_dim) * sizeof(float), 64);
    h->pos = grm__alloc(HOST, (size_t)(rows * D + 1) * sizeof(float), 64);
    h->dpos = grm__alloc(HOST, (size_t)(rows * D + 1) * sizeof(float), 64);
    h->neg = grm__alloc(HOST, (size_t)(nneg * D + 1) * sizeof(float), 64);
    h->dneg = grm__alloc(HOST, (size_t)(nneg * D + 1) * sizeof(float), 64);
    if (!h->y || !h->dy || !h->pos || !h->dpos || !h->neg || !h->dneg)
        return grm_errorf(GRM_ENOMEM, "[head]: out of memory");
    return GRM_OK;
}

void grm__head_destroy(grm__head *h)
{
    if (h->inst) {
        if (h->ops) h->ops->destroy(h->inst);
        else h->legacy->destroy(h->inst);
    }
    float *bufs[] = { h->y, h->dy, h->pos, h->dpos, h->neg, h->dneg };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) grm__free(HOST, bufs[i]);
    memset(h, 0, sizeof *h);
}

int32_t grm__head_task(const grm__head *h)
{
    return h->ops ? h->ops->task(h->inst) : h->legacy->loss_kind(h->inst);
}

grm_status grm__head_negatives(grm__head *h, int64_t *ids, int64_t *n, int64_t max,
                               const grm_catalog *catalog, uint64_t seed)
{
    grm_status st = h->ops ? h->ops->negatives(h->inst, ids, n, max, catalog, seed)
                           : h->legacy->negatives(h->inst, ids, n, max, catalog, seed);
    if (st != GRM_OK) grm_error_prefix("[head] %s negatives: ", h->stage->plugin->info->name);
    return st;
}

grm_status grm__head_params(grm__head *h, int32_t index, grm_named_tensor *value,
                            grm_tensor *grad)
{
    if (h->legacy) return h->legacy->params(h->inst, index, value, grad);
    if (!GRM_HAS_OP(grm_head_ops, h->ops, params)) return GRM_ENOTFOUND;
    return h->ops->params(h->inst, index, value, grad);
}

static void scale(float *v, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++) v[i] *= s;
}

/* A dense-kind head: forward, gathered rows, the loss, scaled gradients, backward, and the
 * rows' gradients summed into the item rows. */
static grm_status legacy_loss(grm__head *h, grm_loss_io *io, const grm_backend *be, void *work)
{
    const grm_dense_ops *ops = h->legacy;
    const int64_t rows = io->rows, in_dim = io->dim, D = h->out_dim, R = io->nneg;
    const float s = grm_loss_io_grad_scale(io);
    if (rows > h->cap || (io->item_rows && R > h->ncap))
        return grm_errorf(GRM_EINTERNAL, "[head]: %lld rows and %lld negatives exceed the "
                          "reserved %lld and %lld", (long long)rows, (long long)R,
                          (long long)h->cap, (long long)h->ncap);
    grm_dense_ctx ctx = { .struct_size = sizeof ctx, .training = io->d_pred != NULL,
                          .step = io->step, .batch = io->batch };
    grm_tensor x = { .data = (void *)io->pred, .dtype = GRM_DTYPE_F32, .ndim = 2,
                     .shape = { rows, in_dim, 1, 1 }, .device = HOST };
    grm_tensor y = { .data = h->y, .dtype = GRM_DTYPE_F32, .ndim = 2,
                     .shape = { rows, h->out_dim, 1, 1 }, .device = HOST };
    grm_status st = ops->forward(h->inst, &y, &x, &ctx);
    if (st != GRM_OK) return st;
    grm_loss_io in = *io;
    in.item_rows = NULL;   /* a 1.4 head reads the gathered rows below */
    in.d_item_rows = NULL;
    in.grad_scale = 1.0f;
    in.pred = h->y;
    in.dim = h->out_dim;
    in.d_pred = io->d_pred ? h->dy : NULL;
    if (in.d_pred) memset(h->dy, 0, (size_t)(rows * h->out_dim) * sizeof(float));
    if (io->item_rows) {   /* the rows a 1.4 head expects gathered */
        const int64_t n = io->nitems;
        if ((st = be->iface->gather(be->context, h->pos, io->item_rows, io->pos_slots, rows, n,
                                    D, NULL)) != GRM_OK
            || (st = be->iface->gather(be->context, h->neg, io->item_rows, io->neg_slots, R, n,
                                       D, NULL)) != GRM_OK)
            return st;
        memset(h->dpos, 0, (size_t)(rows * D) * sizeof(float));
        memset(h->dneg, 0, (size_t)((R ? R : 1) * D) * sizeof(float));
        in.pos = h->pos;
        in.neg = h->neg;
        in.d_pos = io->d_pred ? h->dpos : NULL;
        in.d_neg = io->d_pred ? h->dneg : NULL;
    }
    if ((st = ops->loss(h->inst, &in)) != GRM_OK) return st;
    io->loss = in.loss;
    if (!io->d_pred) return GRM_OK;
    if (s != 1.0f) {
        scale(h->dy, rows * h->out_dim, s);
        if (io->item_rows) {
            scale(h->dpos, rows * D, s);
            scale(h->dneg, R * D, s);
        }
    }
    grm_tensor dx = { .data = io->d_pred, .dtype = GRM_DTYPE_F32, .ndim = 2,
                      .shape = { rows, in_dim, 1, 1 }, .device = HOST };
    grm_tensor dy = { .data = h->dy, .dtype = GRM_DTYPE_F32, .ndim = 2,
                      .shape = { rows, h->out_dim, 1, 1 }, .device = HOST };
    if ((st = ops->backward(h->inst, &dx, &dy, &ctx)) != GRM_OK) return st;
    if (!io->item_rows) return GRM_OK;
    st = be->iface->scatter_add(be->context, io->d_item_rows, h->dpos, io->pos_slots, rows,
                                io->nitems, D, work, NULL);
    if (st == GRM_OK)
        st = be->iface->scatter_add(be->context, io->d_item_rows, h->dneg, io->neg_slots, R,
                                    io->nitems, D, work, NULL);
    return st;
}

double grm__head_flops(const grm__head *h, int64_t rows, int64_t nneg)
{
    if (h->ops && GRM_HAS_OP(grm_head_ops, h->ops, flops))
        return h->ops->flops(h->inst, rows, nneg, 0) + h->ops->flops(h->inst, rows, nneg, 1);
    if (h->legacy)
        return h->legacy->flops(h->inst, rows, 0) + h->legacy->flops(h->inst, rows, 1);
    return 0;
}

grm_status grm__head_score_rows(grm__head *h, float *rows, int64_t n, int64_t dim)
{
    if (!h->ops || !GRM_HAS_OP(grm_head_ops, h->ops, score_rows) || !h->ops->score_rows)
        return GRM_OK;
    grm_status st = h->ops->score_rows(h->inst, rows, n, dim);
    if (st != GRM_OK) grm_error_prefix("[head] %s score_rows: ", h->stage->plugin->info->name);
    return st;
}

grm_status grm__head_loss(grm__head *h, grm_loss_io *io, const grm_backend *be, void *work)
{
    grm_status st = h->ops ? h->ops->loss(h->inst, io) : legacy_loss(h, io, be, work);
    if (st != GRM_OK) grm_error_prefix("[head] %s loss: ", h->stage->plugin->info->name);
    return st;
}

grm_status grm__head_check(const grm__pipeline *p, const grm__stage *stage, int ranking,
                           int32_t got)
{
    const grm_plugin_info *info = stage->plugin->info;
    const char *want = ranking ? "ranking" : "retrieval";
    const char *use = ranking ? "head-bce" : "head-sampled-softmax";
    int ok;
    if (info->kind == GRM_KIND_HEAD) {
        ok = ranking || GRM_HAS_OP(grm_head_ops, (const grm_head_ops *)info->ops, negatives);
    } else {   /* a head of ABI 1.0-1.4: a dense block with the loss ops */
        const grm_dense_ops *d = info->ops;
        ok = GRM_HAS_OP(grm_dense_ops, d, loss) && GRM_HAS_OP(grm_dense_ops, d, loss_kind)
             && (ranking || GRM_HAS_OP(grm_dense_ops, d, negatives));
    }
    if (!ok)
        return grm_errorf(GRM_EINVAL, "%s: [head] plugin = %s is not a %s head (it lacks the "
                          "%s op); use %s", p->cfg->path, info->name, want,
                          info->kind == GRM_KIND_HEAD ? "negatives"
                          : ranking ? "loss or loss_kind" : "loss, loss_kind or negatives",
                          use);
    if (got >= 0 && got != (ranking ? GRM_LOSS_BCE : GRM_LOSS_RETRIEVAL))
        return grm_errorf(GRM_EINVAL, "%s: [head] %s is not a %s head; use %s", p->cfg->path,
                          info->name, want, use);
    return GRM_OK;
}
