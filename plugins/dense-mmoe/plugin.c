/* plugins/dense-mmoe/plugin.c - glue of dense-mmoe.so: the entry point, the descriptor,
 * the parameter and ops tables, and the argument checks of every op. The work is done in
 * mmoe.c (MTGRBoost §2, eq. 4). */
#include <stddef.h>

#include <grm/grm.h>

#include "mmoe.h"

static const grm_host_api *mmoe_host;   /* the only mutable global */

/* t is a CPU f32 [rows, cols] tensor (rows < 0: any), with data unless empty. */
static grm_status check_matrix(const char *who, const char *what, const grm_tensor *t,
                               int64_t rows, int64_t cols)
{
    if (t == NULL)
        return mmoe_host->errorf(GRM_EINVAL, "%s: %s is NULL", who, what);
    if (t->dtype != GRM_DTYPE_F32 || t->device.type != GRM_DEVICE_CPU || t->ndim != 2)
        return mmoe_host->errorf(GRM_ENOTSUP, "%s: %s must be a 2-d f32 CPU tensor, got "
                                 "dtype %d, device %d, %d dims", who, what, (int)t->dtype,
                                 (int)t->device.type, (int)t->ndim);
    if (t->shape[1] != cols)
        return mmoe_host->errorf(GRM_EINVAL, "%s: %s has %lld columns, expected %lld", who,
                                 what, (long long)t->shape[1], (long long)cols);
    if (t->shape[0] < 0 || t->shape[0] > INT32_MAX)
        return mmoe_host->errorf(GRM_EINVAL, "%s: %s has %lld rows, out of range 0..%d", who,
                                 what, (long long)t->shape[0], INT32_MAX);
    if (rows >= 0 && t->shape[0] != rows)
        return mmoe_host->errorf(GRM_EINVAL, "%s: %s has %lld rows, expected %lld", who,
                                 what, (long long)t->shape[0], (long long)rows);
    if (t->shape[0] > 0 && t->data == NULL)
        return mmoe_host->errorf(GRM_EINVAL, "%s: %s has %lld rows but no data", who, what,
                                 (long long)t->shape[0]);
    return GRM_OK;
}

static const grm_param_decl mmoe_params_decl[] = {
    GRM_PARAM_DECL_INT(mmoe_config, experts, "4", GRM_PARAM_RANGE(1, MMOE_MAX_EXPERTS),
                       "number of expert MLPs E"),
    GRM_PARAM_DECL_INT(mmoe_config, tasks, "2", GRM_PARAM_RANGE(1, MMOE_MAX_TASKS),
                       "number of tasks T: one gate and one tower each, y is [N, T] logits"),
    GRM_PARAM_DECL_INT_LIST(mmoe_config, expert_dims, GRM_PARAM_REQUIRED,
                            GRM_PARAM_RANGE(1, 1 << 24),
                            "output size of each expert layer, e.g. 64,32"),
    GRM_PARAM_DECL_INT_LIST(mmoe_config, tower_dims, "16,1", GRM_PARAM_RANGE(1, 1 << 24),
                            "output size of each task-tower layer; the last must be 1 (the task "
                            "logit)"),
    GRM_PARAM_DECL_INT(mmoe_config, top_k, "0", GRM_PARAM_RANGE(0, MMOE_MAX_EXPERTS),
                       "experts each gate mixes (largest gate logits, ties to the lower index); "
                       "0 = all"),
    GRM_PARAM_DECL_ENUM(mmoe_config, activation, "relu", "relu|silu",
                        "after every expert layer and every tower layer but the last"),
    GRM_PARAM_DECL_ENUM(mmoe_config, impl, "auto", "blas|ref|auto",
                        "linear-layer implementation: OpenBLAS or plain loops"
                        " (auto: ref on [pipeline] device = ref, else the fast path)"),
    GRM_PARAM_DECL_END
};

static grm_status mmoe_op_create(const void *config, int64_t in_dim, uint64_t seed,
                                 void **inst)
{
    if (config == NULL || inst == NULL)
        return mmoe_host->errorf(GRM_EINVAL, "dense-mmoe: create: config and inst must not "
                                 "be NULL");
    return mmoe_create(mmoe_host, config, in_dim, seed, (mmoe **)inst);
}

static void mmoe_op_destroy(void *inst)
{
    mmoe_destroy(inst);
}

static int64_t mmoe_op_out_dim(void *inst)
{
    return mmoe_out_dim(inst);
}

static grm_status mmoe_op_forward(void *inst, grm_tensor *y, const grm_tensor *x,
                                  const grm_dense_ctx *ctx)
{
    mmoe *m = inst;
    grm_status st = check_matrix("dense-mmoe: forward", "x", x, -1, mmoe_in_dim(m));
    if (st == GRM_OK)
        st = check_matrix("dense-mmoe: forward", "y", y, x->shape[0], mmoe_out_dim(m));
    if (st != GRM_OK)
        return st;
    return mmoe_forward(m, y->data, x->data, x->shape[0], ctx != NULL && ctx->training);
}

static grm_status mmoe_op_backward(void *inst, grm_tensor *dx, const grm_tensor *dy,
                                   const grm_dense_ctx *ctx)
{
    (void)ctx;
    mmoe *m = inst;
    grm_status st = check_matrix("dense-mmoe: backward", "dy", dy, -1, mmoe_out_dim(m));
    if (st == GRM_OK && dx != NULL)
        st = check_matrix("dense-mmoe: backward", "dx", dx, dy->shape[0], mmoe_in_dim(m));
    if (st != GRM_OK)
        return st;
    return mmoe_backward(m, dx != NULL ? dx->data : NULL, dy->data, dy->shape[0]);
}

static grm_status mmoe_op_params(void *inst, int32_t index, grm_named_tensor *value,
                                 grm_tensor *grad)
{
    return mmoe_params(inst, index, value, grad);
}

static double mmoe_op_flops(void *inst, int64_t rows, int32_t backward)
{
    return mmoe_flops(inst, rows, backward);
}

static const grm_dense_ops mmoe_ops = {
    .struct_size = sizeof(grm_dense_ops),
    .create = mmoe_op_create,
    .destroy = mmoe_op_destroy,
    .out_dim = mmoe_op_out_dim,
    .forward = mmoe_op_forward,
    .backward = mmoe_op_backward,
    .params = mmoe_op_params,
    .flops = mmoe_op_flops,
};

static const grm_plugin_info mmoe_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_DENSE,
    .name = "dense-mmoe",
    .version = "1.0.0",
    .description = "multi-gate mixture of experts with top-k gates and per-task towers "
                   "(MTGRBoost §2 eq. 4; Ma et al. 2018); y [N, tasks] logits for head-bce",
    .ops = &mmoe_ops,
    .params = mmoe_params_decl,
    .config_size = sizeof(mmoe_config),
};

GRM_PLUGIN_DEFINE(mmoe_host, &mmoe_info);
