/* tests/plugins/legacy-ssm.c - a head as ABI 1.0-1.4 wrote them, for the host's
 * compatibility path (core/head.c): head-sampled-softmax's numerics behind a dense-kind
 * descriptor built for ABI 1.4, with the pass-through forward and backward and the loss,
 * loss_kind and negatives ops of grm/dense.h, as dense-mlp.so's dense-sampled-softmax was.
 * tests/test-train-heads.sh trains with it and with head-sampled-softmax and expects the
 * same bits. */
#include <stddef.h>
#include <string.h>

#include <grm/grm.h>

#include "heads.h"

static const grm_host_api *lg_host;   /* the only mutable global */


static grm_status lg_create(const void *config, int64_t in_dim, uint64_t seed, void **inst)
{
    return ssm_create(lg_host, config, in_dim, seed, (ssm_head **)inst);
}

static void lg_destroy(void *inst)
{
    ssm_destroy(inst);
}

static int64_t lg_out_dim(void *inst)
{
    return ssm_dim(inst);
}

/* y = x (a 1.x head kept the rows as they are) */
static grm_status lg_copy(grm_tensor *dst, const grm_tensor *src, int64_t dim)
{
    if (!dst || !src || src->shape[1] != dim || dst->shape[0] != src->shape[0])
        return lg_host->errorf(GRM_EINVAL, "legacy-ssm: shapes differ");
    if (src->shape[0] > 0 && dst->data != src->data)
        memmove(dst->data, src->data, (size_t)(src->shape[0] * dim) * sizeof(float));
    return GRM_OK;
}

static grm_status lg_forward(void *inst, grm_tensor *y, const grm_tensor *x,
                             const grm_dense_ctx *ctx)
{
    (void)ctx;
    return lg_copy(y, x, ssm_dim(inst));
}

static grm_status lg_backward(void *inst, grm_tensor *dx, const grm_tensor *dy,
                              const grm_dense_ctx *ctx)
{
    (void)ctx;
    return dx ? lg_copy(dx, dy, ssm_dim(inst)) : GRM_OK;
}

static grm_status lg_params(void *inst, int32_t index, grm_named_tensor *value, grm_tensor *grad)
{
    (void)inst;
    (void)index;
    (void)value;
    (void)grad;
    return GRM_ENOTFOUND;
}

static double lg_flops(void *inst, int64_t rows, int32_t backward)
{
    (void)inst;
    (void)rows;
    (void)backward;
    return 0;
}

static int32_t lg_loss_kind(void *inst)
{
    (void)inst;
    return GRM_LOSS_RETRIEVAL;
}

static grm_status lg_loss(void *inst, grm_loss_io *io)
{
    return ssm_loss(inst, io);
}

static grm_status lg_negatives(void *inst, int64_t *ids, int64_t *n, int64_t max,
                               const grm_catalog *catalog, uint64_t seed)
{
    return ssm_negatives(inst, ids, n, max, catalog, seed);
}

static const grm_dense_ops lg_ops = {
    .struct_size = sizeof(grm_dense_ops),
    .create = lg_create,
    .destroy = lg_destroy,
    .out_dim = lg_out_dim,
    .forward = lg_forward,
    .backward = lg_backward,
    .params = lg_params,
    .flops = lg_flops,
    .loss_kind = lg_loss_kind,
    .loss = lg_loss,
    .negatives = lg_negatives,
};

static const grm_plugin_info lg_info = {
    .abi_major = 1,
    .abi_minor = 4,   /* built for the ABI before heads were a kind */
    .struct_size = sizeof(grm_plugin_info),
    .kind = GRM_KIND_DENSE,
    .name = "dense-legacy-ssm",
    .version = "1.0.0",
    .description = "test fixture: a retrieval head of ABI 1.4 (a dense block with a loss)",
    .ops = &lg_ops,
    .params = ssm_params_decl,
    .config_size = sizeof(ssm_config),
};

GRM_PLUGIN_DEFINE(lg_host, &lg_info);
