/* plugins/dense-mlp/plugin.c - glue of dense-mlp.so: the entry point, three descriptors
 * (dense-mlp, dense-bce, dense-sampled-softmax), their parameter and ops tables, and the
 * argument checks of every op. The work is done in mlp.c and heads.c. */
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
    GRM_PARAM_DECL_ENUM(mlp_config, impl, "blas", "blas|ref",
                        "linear-layer implementation: OpenBLAS or plain loops"),
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

/* ---- heads: shared pass-through forward and backward ---- */

/* The heads keep the rows as they are: y = x, dx = dy. */
static grm_status pass_through(const char *who, int64_t dim, grm_tensor *dst,
                               const char *dst_name, const grm_tensor *src,
                               const char *src_name)
{
    grm_status st = check_matrix(who, src_name, src, -1, dim);
    if (st == GRM_OK)
        st = check_matrix(who, dst_name, dst, src->shape[0], dim);
    if (st != GRM_OK)
        return st;
    if (src->shape[0] > 0 && dst->data != src->data)
        memmove(dst->data, src->data, (size_t)(src->shape[0] * dim) * sizeof(float));
    return GRM_OK;
}

static grm_status head_no_params(const char *who, int32_t index)
{
    return mlp_host->errorf(GRM_ENOTFOUND, "%s: params: no parameter %d; the head has none",
                            who, (int)index);
}

static double head_flops(void *inst, int64_t rows, int32_t backward)
{
    (void)inst;
    (void)rows;
    (void)backward;
    return 0.0;
}

/* ---- dense-bce ---- */

static const grm_param_decl bce_params_decl[] = {
    GRM_PARAM_DECL_END
};

static grm_status bce_op_create(const void *config, int64_t in_dim, uint64_t seed,
                                void **inst)
{
    (void)config;
    (void)seed;
    if (inst == NULL)
        return mlp_host->errorf(GRM_EINVAL, "dense-bce: create: inst must not be NULL");
    return bce_create(mlp_host, in_dim, (bce_head **)inst);
}

static void bce_op_destroy(void *inst)
{
    bce_destroy(inst);
}

static int64_t bce_op_out_dim(void *inst)
{
    return bce_dim(inst);
}

static grm_status bce_op_forward(void *inst, grm_tensor *y, const grm_tensor *x,
                                 const grm_dense_ctx *ctx)
{
    (void)ctx;
    return pass_through("dense-bce: forward", bce_dim(inst), y, "y", x, "x");
}

static grm_status bce_op_backward(void *inst, grm_tensor *dx, const grm_tensor *dy,
                                  const grm_dense_ctx *ctx)
{
    (void)ctx;
    if (dx == NULL)
        return GRM_OK;
    return pass_through("dense-bce: backward", bce_dim(inst), dx, "dx", dy, "dy");
}

static grm_status bce_op_params(void *inst, int32_t index, grm_named_tensor *value,
                                grm_tensor *grad)
{
    (void)inst;
    (void)value;
    (void)grad;
    return head_no_params("dense-bce", index);
}

static int32_t bce_op_loss_kind(void *inst)
{
    (void)inst;
    return GRM_LOSS_BCE;
}

static grm_status bce_op_loss(void *inst, grm_loss_io *io)
{
    return bce_loss(inst, io);
}

static const grm_dense_ops bce_ops = {
    .struct_size = sizeof(grm_dense_ops),
    .create = bce_op_create,
    .destroy = bce_op_destroy,
    .out_dim = bce_op_out_dim,
    .forward = bce_op_forward,
    .backward = bce_op_backward,
    .params = bce_op_params,
    .flops = head_flops,
    .loss_kind = bce_op_loss_kind,
    .loss = bce_op_loss,
};

static const grm_plugin_info bce_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_DENSE,
    .name = "dense-bce",
    .version = "1.0.0",
    .description = "multi-task binary cross-entropy head on logits (weighted mean over "
                   "samples, sum over tasks)",
    .ops = &bce_ops,
    .params = bce_params_decl,
    .config_size = 0,
};

/* ---- dense-sampled-softmax ---- */

static const grm_param_decl ssm_params_decl[] = {
    GRM_PARAM_DECL_INT(ssm_config, negatives, "128", GRM_PARAM_RANGE(0, 1 << 20),
                       "sampled negatives per step, shared by the batch"),
    GRM_PARAM_DECL_ENUM(ssm_config, sampler, "uniform", "uniform|popularity",
                        "draw items uniformly or with probability proportional to count^alpha"),
    GRM_PARAM_DECL_DOUBLE(ssm_config, alpha, "1.0", GRM_PARAM_RANGE(0, 2),
                          "popularity exponent of the popularity sampler"),
    GRM_PARAM_DECL_DOUBLE(ssm_config, temperature, "1.0", GRM_PARAM_RANGE(1e-6, 1e6),
                          "logits are divided by the temperature"),
    GRM_PARAM_DECL_BOOL(ssm_config, in_batch, "true", "other rows' positives are negatives too"),
    GRM_PARAM_DECL_BOOL(ssm_config, logq, "false",
                        "subtract log Q (expected count) from sampled-negative logits"),
    GRM_PARAM_DECL_ENUM(ssm_config, impl, "blas", "blas|ref",
                        "loss implementation: OpenBLAS GEMMs or plain loops"),
    GRM_PARAM_DECL_BOOL(ssm_config, l2norm, "false",
                        "L2-normalize query and item rows (cosine logits; use a small "
                        "temperature such as 0.05)"),
    GRM_PARAM_DECL_INT(ssm_config, share_k, "0", GRM_PARAM_RANGE(0, 1 << 16),
                       "0: negatives shared by the batch; k >= 1: each row owns nneg/rows "
                       "negatives, shared in shuffled groups of k (TurboGR eq. 2)"),
    GRM_PARAM_DECL_BOOL(ssm_config, neg_fp16, "false",
                        "store negatives in FP16 and read them back as fp32 (TurboGR §4.3.2)"),
    GRM_PARAM_DECL_ENUM(ssm_config, loss, "softmax", "softmax|bce",
                        "softmax: cross-entropy of the positive against the negatives; bce: -log "
                        "sigmoid(s+) - sum log sigmoid(-s-) per row (SASRec, Kang & McAuley 2018 "
                        "§III-E); bce needs in_batch = false, logq = false, share_k 0 or 1"),
    GRM_PARAM_DECL_INT(ssm_config, row_negatives, "0", GRM_PARAM_RANGE(0, 1 << 20),
                       "with share_k >= 1: 0: each row owns nneg/rows negatives (must divide); "
                       "r >= 1: each row owns r, nneg >= rows r, the rest unused (set "
                       "negatives = batch_size x max_seq_len x r for token rows)"),
    GRM_PARAM_DECL_END
};

static grm_status ssm_op_create(const void *config, int64_t in_dim, uint64_t seed,
                                void **inst)
{
    if (config == NULL || inst == NULL)
        return mlp_host->errorf(GRM_EINVAL, "dense-sampled-softmax: create: config and inst "
                                "must not be NULL");
    return ssm_create(mlp_host, config, in_dim, seed, (ssm_head **)inst);
}

static void ssm_op_destroy(void *inst)
{
    ssm_destroy(inst);
}

static int64_t ssm_op_out_dim(void *inst)
{
    return ssm_dim(inst);
}

static grm_status ssm_op_forward(void *inst, grm_tensor *y, const grm_tensor *x,
                                 const grm_dense_ctx *ctx)
{
    (void)ctx;
    return pass_through("dense-sampled-softmax: forward", ssm_dim(inst), y, "y", x, "x");
}

static grm_status ssm_op_backward(void *inst, grm_tensor *dx, const grm_tensor *dy,
                                  const grm_dense_ctx *ctx)
{
    (void)ctx;
    if (dx == NULL)
        return GRM_OK;
    return pass_through("dense-sampled-softmax: backward", ssm_dim(inst), dx, "dx", dy, "dy");
}

static grm_status ssm_op_params(void *inst, int32_t index, grm_named_tensor *value,
                                grm_tensor *grad)
{
    (void)inst;
    (void)value;
    (void)grad;
    return head_no_params("dense-sampled-softmax", index);
}

static int32_t ssm_op_loss_kind(void *inst)
{
    (void)inst;
    return GRM_LOSS_RETRIEVAL;
}

static grm_status ssm_op_loss(void *inst, grm_loss_io *io)
{
    return ssm_loss(inst, io);
}

static grm_status ssm_op_negatives(void *inst, int64_t *ids, int64_t *n, int64_t max,
                                   const grm_catalog *catalog, uint64_t seed)
{
    return ssm_negatives(inst, ids, n, max, catalog, seed);
}

static const grm_dense_ops ssm_ops = {
    .struct_size = sizeof(grm_dense_ops),
    .create = ssm_op_create,
    .destroy = ssm_op_destroy,
    .out_dim = ssm_op_out_dim,
    .forward = ssm_op_forward,
    .backward = ssm_op_backward,
    .params = ssm_op_params,
    .flops = head_flops,
    .loss_kind = ssm_op_loss_kind,
    .loss = ssm_op_loss,
    .negatives = ssm_op_negatives,
};

static const grm_plugin_info ssm_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_DENSE,
    .name = "dense-sampled-softmax",
    .version = "1.0.0",
    .description = "retrieval head: sampled softmax over sampled and in-batch negatives "
                   "with optional logQ correction (Yi et al. 2019), or SASRec's sampled "
                   "binary cross-entropy (loss = bce)",
    .ops = &ssm_ops,
    .params = ssm_params_decl,
    .config_size = sizeof(ssm_config),
};

GRM_PLUGIN_DEFINE(mlp_host, &mlp_info, &bce_info, &ssm_info);
