/* plugins/head-bce/plugin.c - glue of head-bce.so (a head plugin, ABI 1.5, grm/head.h):
 * multi-task binary cross-entropy on logits, the weighted mean over samples of the sum over
 * tasks, with the predicted probabilities as evaluation scores. Its numerics are shared with
 * head-sampled-softmax (plugins/head-sampled-softmax/heads.c, heads_ref.c), which this .so
 * compiles. */
#include <stddef.h>

#include <grm/grm.h>

#include "heads.h"

static const grm_host_api *bce_host;   /* the only mutable global */

static const grm_param_decl bce_params_decl[] = {
    GRM_PARAM_DECL_END
};

static grm_status bce_op_create(const void *config, int64_t in_dim, uint64_t seed, void **inst)
{
    (void)config;
    (void)seed;
    if (inst == NULL)
        return bce_host->errorf(GRM_EINVAL, "head-bce: create: inst must not be NULL");
    return bce_create(bce_host, in_dim, (bce_head **)inst);
}

static void bce_op_destroy(void *inst)
{
    bce_destroy(inst);
}

static int32_t bce_op_task(void *inst)
{
    (void)inst;
    return GRM_LOSS_BCE;
}

static grm_status bce_op_loss(void *inst, grm_loss_io *io)
{
    grm_status st = bce_loss(inst, io);
    if (st == GRM_OK) head_scale(io->d_pred, io->rows * io->dim, grm_loss_io_grad_scale(io));
    return st;
}

static const grm_head_ops bce_ops = {
    .struct_size = sizeof(grm_head_ops),
    .create = bce_op_create,
    .destroy = bce_op_destroy,
    .task = bce_op_task,
    .loss = bce_op_loss,
};

static const grm_plugin_info bce_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_HEAD,
    .name = "head-bce",
    .version = "2.0.0",
    .description = "multi-task binary cross-entropy head on logits (weighted mean over "
                   "samples, sum over tasks)",
    .ops = &bce_ops,
    .params = bce_params_decl,
    .config_size = 0,
};

GRM_PLUGIN_DEFINE(bce_host, &bce_info);
