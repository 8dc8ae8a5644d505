/* plugins/head-sampled-softmax/plugin.c - glue of head-sampled-softmax.so (a head plugin,
 * ABI 1.5, grm/head.h): the retrieval loss over sampled and in-batch negatives with optional
 * logQ correction (Yi et al. 2019), intra-batch logit sharing (TurboGR §4.3.3 eq. 2), FP16
 * negatives (TurboGR §4.3.2) or SASRec's sampled binary cross-entropy (loss = bce). The loss
 * gathers the targets' and negatives' rows from the batch's unique item rows and sums their
 * gradients back (head_rows.c); the numerics are heads.c, heads_ref.c and heads_cpu.c. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <grm/grm.h>

#include "heads.h"

static const grm_host_api *ssm_host;   /* the only mutable global */


/* The instance: the loss's state and the scratch of the row gradients' scatter-add. */
typedef struct ssm_inst {
    ssm_head *h;
    head_rows_work rows;
} ssm_inst;

static grm_status ssm_op_create(const void *config, int64_t in_dim, uint64_t seed, void **inst)
{
    if (config == NULL || inst == NULL)
        return ssm_host->errorf(GRM_EINVAL, "head-sampled-softmax: create: config and inst "
                                "must not be NULL");
    ssm_inst *s = calloc(1, sizeof *s);
    if (!s) return ssm_host->errorf(GRM_ENOMEM, "head-sampled-softmax: out of memory");
    grm_status st = ssm_create(ssm_host, config, in_dim, seed, &s->h);
    if (st != GRM_OK) {
        free(s);
        return st;
    }
    *inst = s;
    return GRM_OK;
}

static void ssm_op_destroy(void *inst)
{
    ssm_inst *s = inst;
    if (!s) return;
    head_rows_work_fini(&s->rows);
    ssm_destroy(s->h);
    free(s);
}

static int32_t ssm_op_task(void *inst)
{
    (void)inst;
    return GRM_LOSS_RETRIEVAL;
}


/* The rows the host gathered (pos, neg: tests, and hosts before 1.5), or the item rows
 * gathered here into step scratch and their gradients summed back after the loss. */
static grm_status ssm_op_loss(void *vinst, grm_loss_io *io)
{
    ssm_inst *si = vinst;
    ssm_head *inst = si->h;
    if (!GRM_HAS_FIELD(grm_loss_io, io, grad_scale) || io->item_rows == NULL) {
        grm_status st = ssm_loss(inst, io);
        if (st == GRM_OK) {
            const float s = grm_loss_io_grad_scale(io);
            head_scale(io->d_pred, io->rows * io->dim, s);
            head_scale(io->d_pos, io->rows * io->dim, s);
            head_scale(io->d_neg, io->nneg * io->dim, s);
        }
        return st;
    }
    if (ssm_rows_in_place(inst))   /* per-token negatives: read in place, nothing gathered */
        return ssm_loss_in_place(inst, io);
    const int64_t D = ssm_dim(inst), B = io->rows, R = io->nneg;
    const int train = io->d_pred != NULL;
    if (io->pos_slots == NULL || (R > 0 && io->neg_slots == NULL)
        || (train && io->d_item_rows == NULL))
        return ssm_host->errorf(GRM_EINVAL, "head-sampled-softmax: loss: item_rows needs "
                                "pos_slots, neg_slots%s", train ? " and d_item_rows" : "");
    const size_t pb = (size_t)((B ? B : 1) * D) * sizeof(float);
    const size_t nb = (size_t)((R ? R : 1) * D) * sizeof(float);
    float *pos = ssm_host->scratch(pb, 64), *neg = ssm_host->scratch(nb, 64);
    float *dpos = train ? ssm_host->scratch(pb, 64) : NULL;
    float *dneg = train ? ssm_host->scratch(nb, 64) : NULL;
    if (!pos || !neg || (train && (!dpos || !dneg)))
        return ssm_host->errorf(GRM_ENOMEM, "head-sampled-softmax: loss: out of scratch "
                                "memory for %lld rows and %lld negatives", (long long)B,
                                (long long)R);
    grm_status st = head_rows_gather(ssm_host, io, pos, neg, D);
    if (st != GRM_OK) return st;
    if (train) {
        memset(dpos, 0, pb);
        memset(dneg, 0, nb);
    }
    grm_loss_io in = *io;
    in.pos = pos;
    in.neg = neg;
    in.d_pos = dpos;
    in.d_neg = dneg;
    if ((st = ssm_loss(inst, &in)) != GRM_OK) return st;
    io->loss = in.loss;
    if (!train) return GRM_OK;
    const float s = grm_loss_io_grad_scale(io);
    head_scale(io->d_pred, B * D, s);
    head_scale(dpos, B * D, s);
    head_scale(dneg, R * D, s);
    return head_rows_scatter(ssm_host, &si->rows, io, dpos, dneg, D);
}

static grm_status ssm_op_negatives(void *inst, int64_t *ids, int64_t *n, int64_t max,
                                   const grm_catalog *catalog, uint64_t seed)
{
    return ssm_negatives(((ssm_inst *)inst)->h, ids, n, max, catalog, seed);
}

static double ssm_op_flops(void *inst, int64_t rows, int64_t nneg, int32_t backward)
{
    (void)nneg;   /* the last call's negatives (per row, shared, in-batch or catalog) */
    return ssm_flops(((ssm_inst *)inst)->h, rows, backward);
}

static grm_status ssm_op_score_rows(void *inst, float *rows, int64_t n, int64_t dim)
{
    return ssm_score_rows(((ssm_inst *)inst)->h, rows, n, dim);
}

static const grm_head_ops ssm_ops = {
    .struct_size = sizeof(grm_head_ops),
    .create = ssm_op_create,
    .destroy = ssm_op_destroy,
    .task = ssm_op_task,
    .loss = ssm_op_loss,
    .negatives = ssm_op_negatives,
    .flops = ssm_op_flops,
    .score_rows = ssm_op_score_rows,
};

static const grm_plugin_info ssm_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_HEAD,
    .name = "head-sampled-softmax",
    .version = "2.0.0",
    .description = "retrieval head: sampled softmax over sampled and in-batch negatives "
                   "with optional logQ correction (Yi et al. 2019), or SASRec's sampled "
                   "binary cross-entropy (loss = bce)",
    .ops = &ssm_ops,
    .params = ssm_params_decl,
    .config_size = sizeof(ssm_config),
};

GRM_PLUGIN_DEFINE(ssm_host, &ssm_info);
