/* plugins/dense-hstu/plugin.c - glue of dense-hstu.so: the entry point, the descriptor,
 * the parameter and ops tables, and the argument checks of every op. The layer is in
 * hstu.c; the kernels in hstu_ref.c and hstu_cpu.c. */
#include <stddef.h>

#include <grm/grm.h>

#include "hstu.h"

static const grm_host_api *hstu_host;   /* the only mutable global */

/* t is a CPU f32 [rows, cols] tensor (rows < 0: any), with data unless empty. */
static grm_status check_matrix(const char *who, const char *what, const grm_tensor *t,
                               int64_t rows, int64_t cols)
{
    if (t == NULL)
        return hstu_host->errorf(GRM_EINVAL, "%s: %s is NULL", who, what);
    if (t->dtype != GRM_DTYPE_F32 || t->device.type != GRM_DEVICE_CPU || t->ndim != 2)
        return hstu_host->errorf(GRM_ENOTSUP, "%s: %s must be a 2-d f32 CPU tensor, got "
                                 "dtype %d, device %d, %d dims", who, what, (int)t->dtype,
                                 (int)t->device.type, (int)t->ndim);
    if (t->shape[1] != cols)
        return hstu_host->errorf(GRM_EINVAL, "%s: %s has %lld columns, expected %lld", who,
                                 what, (long long)t->shape[1], (long long)cols);
    if (t->shape[0] < 0 || t->shape[0] > INT32_MAX)
        return hstu_host->errorf(GRM_EINVAL, "%s: %s has %lld rows, out of range 0..%d", who,
                                 what, (long long)t->shape[0], INT32_MAX);
    if (rows >= 0 && t->shape[0] != rows)
        return hstu_host->errorf(GRM_EINVAL, "%s: %s has %lld rows, expected %lld", who, what,
                                 (long long)t->shape[0], (long long)rows);
    if (t->shape[0] > 0 && t->data == NULL)
        return hstu_host->errorf(GRM_EINVAL, "%s: %s has %lld rows but no data", who, what,
                                 (long long)t->shape[0]);
    return GRM_OK;
}

static const grm_param_decl hstu_params_decl[] = {
    GRM_PARAM_DECL_INT(hstu_config, num_heads, "2", GRM_PARAM_RANGE(1, HSTU_DIM_MAX),
                       "attention heads H"),
    GRM_PARAM_DECL_INT(hstu_config, dqk, "32", GRM_PARAM_RANGE(1, HSTU_DIM_MAX),
                       "query/key features per head"),
    GRM_PARAM_DECL_INT(hstu_config, dv, "32", GRM_PARAM_RANGE(1, HSTU_DIM_MAX),
                       "value (and U) features per head"),
    GRM_PARAM_DECL_BOOL(hstu_config, rab_pos, "true",
                        "learned bias per relative position min(i - j, max_len - 1), per head"),
    GRM_PARAM_DECL_BOOL(hstu_config, rab_time, "true",
                        "learned bias per time bucket floor(ln max(|t_i - t_j|, 1) / 0.301), per "
                        "head (absent when the data has no timestamps)"),
    GRM_PARAM_DECL_INT(hstu_config, max_len, "256", GRM_PARAM_RANGE(1, HSTU_DIM_MAX),
                       "position buckets; attention is scaled by 1 / max_len with "
                       "attn_norm = max_len"),
    GRM_PARAM_DECL_INT(hstu_config, time_buckets, "32", GRM_PARAM_RANGE(1, HSTU_TIME_BUCKETS_MAX),
                       "time-difference buckets"),
    GRM_PARAM_DECL_DOUBLE(hstu_config, dropout, "0", GRM_PARAM_RANGE(0, 0.99),
                          "inverted dropout rate on the f2 input (training)"),
    GRM_PARAM_DECL_DOUBLE(hstu_config, input_dropout, "0", GRM_PARAM_RANGE(0, 0.99),
                          "inverted dropout rate on the block input x, residual included (the "
                          "reference's embedding dropout; training)"),
    GRM_PARAM_DECL_BOOL(hstu_config, input_norm, "true",
                        "layer norm (no affine) on the input before f1"),
    GRM_PARAM_DECL_ENUM(hstu_config, attn_norm, "max_len", "max_len|length",
                        "scale SiLU attention by 1 / max_len or by 1 / the sequence's length"),
    GRM_PARAM_DECL_BOOL(hstu_config, pos_emb, "false",
                        "learned absolute positions: the block input becomes x sqrt(D) + "
                        "P[t], P [max_len, D] (the reference's input preprocessor; one "
                        "block, usually the first)"),
    GRM_PARAM_DECL_ENUM(hstu_config, init, "xavier_uniform", "xavier_uniform|normal",
                        "initializer of f1, the U, V, Q, K projection (normal: N(0, "
                        "init_std^2), the reference's _uvqk); f2 is Xavier uniform either way"),
    GRM_PARAM_DECL_DOUBLE(hstu_config, init_std, "0.02", GRM_PARAM_RANGE(1e-6, 10),
                          "standard deviation of init = normal"),
    GRM_PARAM_DECL_ENUM(hstu_config, impl, "auto", "cpu|ref|auto",
                        "kernels: tiled OpenBLAS on the thread pool, or plain loops"
                        " (auto: ref on [pipeline] device = ref, else the fast path)"),
    GRM_PARAM_DECL_END
};

static grm_status hstu_op_create(const void *config, int64_t in_dim, uint64_t seed,
                                 void **inst)
{
    if (config == NULL || inst == NULL)
        return hstu_host->errorf(GRM_EINVAL, "dense-hstu: create: config and inst must not "
                                 "be NULL");
    return hstu_create(hstu_host, config, in_dim, seed, (hstu **)inst);
}

static void hstu_op_destroy(void *inst)
{
    hstu_destroy(inst);
}

static int64_t hstu_op_out_dim(void *inst)
{
    return hstu_dim(inst);
}

static grm_status hstu_op_forward(void *inst, grm_tensor *y, const grm_tensor *x,
                                  const grm_dense_ctx *ctx)
{
    hstu *m = inst;
    grm_status st = check_matrix("dense-hstu: forward", "x", x, -1, hstu_dim(m));
    if (st == GRM_OK)
        st = check_matrix("dense-hstu: forward", "y", y, x->shape[0], hstu_dim(m));
    if (st != GRM_OK)
        return st;
    return hstu_forward(m, y->data, x->data, x->shape[0], ctx);
}

static grm_status hstu_op_backward(void *inst, grm_tensor *dx, const grm_tensor *dy,
                                   const grm_dense_ctx *ctx)
{
    (void)ctx;      // the layout is the last forward's (kept with its cache)
    hstu *m = inst;
    grm_status st = check_matrix("dense-hstu: backward", "dy", dy, -1, hstu_dim(m));
    if (st == GRM_OK && dx != NULL)
        st = check_matrix("dense-hstu: backward", "dx", dx, dy->shape[0], hstu_dim(m));
    if (st != GRM_OK)
        return st;
    return hstu_backward(m, dx != NULL ? dx->data : NULL, dy->data, dy->shape[0]);
}

static grm_status hstu_op_params(void *inst, int32_t index, grm_named_tensor *value,
                                 grm_tensor *grad)
{
    return hstu_params(inst, index, value, grad);
}

static double hstu_op_flops(void *inst, int64_t rows, int32_t backward)
{
    return hstu_flops(inst, rows, backward);
}

static const grm_dense_ops hstu_ops = {
    .struct_size = sizeof(grm_dense_ops),
    .create = hstu_op_create,
    .destroy = hstu_op_destroy,
    .out_dim = hstu_op_out_dim,
    .forward = hstu_op_forward,
    .backward = hstu_op_backward,
    .params = hstu_op_params,
    .flops = hstu_op_flops,
};

static const grm_plugin_info hstu_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_DENSE,
    .name = "dense-hstu",
    .version = "1.0.0",
    .description = "HSTU layer on jagged sequences: pointwise SiLU causal attention with "
                   "relative position and time bias (MTGRBoost §2, eq. 1-3; TurboGR §4.1.1)",
    .ops = &hstu_ops,
    .params = hstu_params_decl,
    .config_size = sizeof(hstu_config),
};

GRM_PLUGIN_DEFINE(hstu_host, &hstu_info);
