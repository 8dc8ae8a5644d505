/* plugins/dense-mlp/plugin.c - glue of dense-mlp.so: the entry point, the dense-mlp
 * descriptor, its parameter and ops tables, and the argument checks of every op. The work is
 * done in mlp.c. (The heads that lived here are their own kind since ABI 1.5:
 * plugins/head-bce, plugins/head-sampled-softmax.) */
#include <stddef.h>
#include <string.h>

#include <grm/grm.h>

#include "mlp.h"

static const grm_host_api *mlp_host;   /* the only mutable global */

/* x is a CPU f32 [rows, cols] tensor (rows < 0: any), with data unless empty. */
static grm_status check_matrix(const char *who, const char *what, const grm_tensor *t,
                               int64_t rows, int64_t cols)
{
    if (t == NULL)
        return mlp_host->errorf(GRM_EINVAL, "%s: %s is NULL", who, what);
    if (t->dtype != GRM_DTYPE_F32 || t->device.type != GRM_DEVICE_CPU || t->ndim != 2)
        return mlp_host->errorf(GRM_ENOTSUP, "%s: %s must be a 2-d f32 CPU tensor, got "
                                "dtype %d, device %d, %d dims", who, what, (int)t->dtype,
                                (int)t->device.type, (int)t->ndim);
    if (t->shape[1] != cols)
        return mlp_host->errorf(GRM_EINVAL, "%s: %s has %lld columns, expected %lld", who,
                                what, (long long)t->shape[1], (long long)cols);
    if (t->shape[0] < 0 || t->shape[0] > INT32_MAX)
        return mlp_host->errorf(GRM_EINVAL, "%s: %s has %lld rows, out of range 0..%d", who,
                                what, (long long)t->shape[0], INT32_MAX);
    if (rows >= 0 && t->shape[0] != rows)
        return mlp_host->errorf(GRM_EINVAL, "%s: %s has %lld rows, expected %lld", who, what,
                                (long long)t->shape[0], (long long)rows);
    if (t->shape[0] > 0 && t->data == NULL)
        return mlp_host->errorf(GRM_EINVAL, "%s: %s has %lld rows but no data", who, what,
                                (long long)t->shape[0]);
    return GRM_OK;
}

/* ---- dense-mlp ---- */

static const grm_param_decl mlp_params_decl[] = {
    GRM_PARAM_DECL_INT_LIST(mlp_config, dims, GRM_PARAM_REQUIRED, GRM_PARAM_RANGE(1, 1 << 24),
                            "output size of each layer, e.g. 256,64"),
    GRM_PARAM_DECL_ENUM(mlp_config, activation, "relu", "relu|silu|tanh|none",
                        "activation after every layer but the last"),
    GRM_PARAM_DECL_ENUM(mlp_config, final_activation, "none", "relu|silu|tanh|none",
                        "activation after the last layer"),
    GRM_PARAM_DECL_DOUBLE(mlp_config, dropout, "0", GRM_PARAM_RANGE(0, 0.99),
                          "inverted dropout rate on hidden activations (training)"),
    GRM_PARAM_DECL_BOOL(mlp_config, l2norm, "false", "L2-normalize each output row"),
    GRM_PARAM_DECL_ENUM(mlp_config, impl, "auto", "blas|ref|auto",
                        "linear-layer implementation: OpenBLAS or plain loops"
                        " (auto: ref on [pipeline] device = ref, else the fast path)"),
    GRM_PARAM_DECL_END
};

static grm_status mlp_op_create(const void *config, int64_t in_dim, uint64_t seed,
                                void **inst)
{
    if (config == NULL || inst == NULL)
        return mlp_host->errorf(GRM_EINVAL, "dense-mlp: create: config and inst must not be "
                                "NULL");
    return mlp_create(mlp_host, config, in_dim, seed, (mlp **)inst);
}

static void mlp_op_destroy(void *inst)
{
    mlp_destroy(inst);
}

static int64_t mlp_op_out_dim(void *inst)
{
    return mlp_out_dim(inst);
}

static grm_status mlp_op_forward(void *inst, grm_tensor *y, const grm_tensor *x,
                                 const grm_dense_ctx *ctx)
{
    mlp *m = inst;
    grm_status st = check_matrix("dense-mlp: forward", "x", x, -1, mlp_in_dim(m));
    if (st == GRM_OK)
        st = check_matrix("dense-mlp: forward", "y", y, x->shape[0], mlp_out_dim(m));
    if (st != GRM_OK)
        return st;
    const int32_t training = ctx != NULL && ctx->training;
    return mlp_forward(m, y->data, x->data, x->shape[0], training, ctx != NULL ? ctx->step : 0);
}

static grm_status mlp_op_backward(void *inst, grm_tensor *dx, const grm_tensor *dy,
                                  const grm_dense_ctx *ctx)
{
    (void)ctx;
    mlp *m = inst;
    grm_status st = check_matrix("dense-mlp: backward", "dy", dy, -1, mlp_out_dim(m));
    if (st == GRM_OK && dx != NULL)
        st = check_matrix("dense-mlp: backward", "dx", dx, dy->shape[0], mlp_in_dim(m));
    if (st != GRM_OK)
        return st;
    return mlp_backward(m, dx != NULL ? dx->data : NULL, dy->data, dy->shape[0]);
}

static grm_status mlp_op_params(void *inst, int32_t index, grm_named_tensor *value,
                                grm_tensor *grad)
{
    return mlp_params(inst, index, value, grad);
}

static double mlp_op_flops(void *inst, int64_t rows, int32_t backward)
{
    return mlp_flops(inst, rows, backward);
}

static const grm_dense_ops mlp_ops = {
    .struct_size = sizeof(grm_dense_ops),
    .create = mlp_op_create,
    .destroy = mlp_op_destroy,
    .out_dim = mlp_op_out_dim,
    .forward = mlp_op_forward,
    .backward = mlp_op_backward,
    .params = mlp_op_params,
    .flops = mlp_op_flops,
};

static const grm_plugin_info mlp_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_DENSE,
    .name = "dense-mlp",
    .version = "1.0.0",
    .description = "multi-layer perceptron: linear layers with activation, dropout, "
                   "optional L2-normalized output",
    .ops = &mlp_ops,
    .params = mlp_params_decl,
    .config_size = sizeof(mlp_config),
};

GRM_PLUGIN_DEFINE(mlp_host, &mlp_info);
