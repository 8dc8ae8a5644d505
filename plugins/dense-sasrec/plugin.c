/* plugins/dense-sasrec/plugin.c - glue of dense-sasrec.so: the entry point, the
 * descriptor, the parameter and ops tables, and the argument checks of every op. The
 * block (Kang & McAuley 2018, SASRec) is in sasrec.c; see README.md. */
#include <stddef.h>
#include <string.h>

#include <grm/grm.h>

#include "sasrec.h"

static const grm_host_api *sasrec_host;   /* the only mutable global */

/* t is a CPU f32 [rows, cols] tensor (rows < 0: any), with data unless empty. */
static grm_status check_matrix(const char *who, const char *what, const grm_tensor *t,
                               int64_t rows, int64_t cols)
{
    if (t == NULL)
        return sasrec_host->errorf(GRM_EINVAL, "%s: %s is NULL", who, what);
    if (t->dtype != GRM_DTYPE_F32 || t->device.type != GRM_DEVICE_CPU || t->ndim != 2)
        return sasrec_host->errorf(GRM_ENOTSUP, "%s: %s must be a 2-d f32 CPU tensor, got "
                                   "dtype %d, device %d, %d dims", who, what, (int)t->dtype,
                                   (int)t->device.type, (int)t->ndim);
    if (t->shape[1] != cols)
        return sasrec_host->errorf(GRM_EINVAL, "%s: %s has %lld columns, expected %lld", who,
                                   what, (long long)t->shape[1], (long long)cols);
    if (t->shape[0] < 0 || t->shape[0] > INT32_MAX / 4)
        return sasrec_host->errorf(GRM_EINVAL, "%s: %s has %lld rows, out of range 0..%d",
                                   who, what, (long long)t->shape[0], INT32_MAX / 4);
    if (rows >= 0 && t->shape[0] != rows)
        return sasrec_host->errorf(GRM_EINVAL, "%s: %s has %lld rows, expected %lld", who,
                                   what, (long long)t->shape[0], (long long)rows);
    if (t->shape[0] > 0 && t->data == NULL)
        return sasrec_host->errorf(GRM_EINVAL, "%s: %s has %lld rows but no data", who, what,
                                   (long long)t->shape[0]);
    return GRM_OK;
}

static const grm_param_decl sasrec_params_decl[] = {
    GRM_PARAM_DECL_ENUM(sasrec_config, style, "sasrec", "sasrec|bert",
                        "sasrec: Kang & McAuley's block (LayerNorm before each sub-layer); bert: "
                        "the post-norm block of the S3-Rec/ICLRec code behind the published "
                        "full-ranking SASRec tables"),
    GRM_PARAM_DECL_INT(sasrec_config, num_heads, "1", GRM_PARAM_RANGE(1, 1 << 16),
                       "attention heads; must divide the model dim (head dim = D / num_heads)"),
    GRM_PARAM_DECL_INT(sasrec_config, ffn_dim, "0", GRM_PARAM_RANGE(0, 1 << 24),
                       "hidden size of the feed-forward network; 0: D (sasrec) or 4 D (bert)"),
    GRM_PARAM_DECL_ENUM(sasrec_config, activation, "auto", "auto|relu|gelu",
                        "FFN activation; auto: relu for style sasrec, gelu (erf form) for style "
                        "bert"),
    GRM_PARAM_DECL_DOUBLE(sasrec_config, dropout, "0.2", GRM_PARAM_RANGE(0, 0.99),
                          "dropout rate of every site (embedding, attention probabilities, "
                          "attention output (bert), after each FFN layer (sasrec) or the second "
                          "(bert)), training only"),
    GRM_PARAM_DECL_BOOL(sasrec_config, pos_emb, "false",
                        "first block: learned position embedding added to "
                        "x * sqrt(D) (sasrec) or to x and LayerNorm-ed (bert), then embedding "
                        "dropout"),
    GRM_PARAM_DECL_INT(sasrec_config, max_len, "50", GRM_PARAM_RANGE(1, 1 << 24),
                       "positions of the position embedding (longest sequence with pos_emb)"),
    GRM_PARAM_DECL_ENUM(sasrec_config, pos_align, "right", "right|left",
                        "right: newest token at position max_len-1 (reference); left: oldest at 0"),
    GRM_PARAM_DECL_BOOL(sasrec_config, final_norm, "false",
                        "last block of style sasrec: a LayerNorm on the output (reference "
                        "last_layernorm)"),
    GRM_PARAM_DECL_DOUBLE(sasrec_config, ln_eps, "1e-8", GRM_PARAM_RANGE(1e-12, 1),
                          "LayerNorm epsilon (pmixer reference: 1e-8; S3-Rec code: 1e-12)"),
    GRM_PARAM_DECL_ENUM(sasrec_config, init, "xavier_normal", "xavier_normal|xavier_uniform|normal",
                        "initializer of every weight matrix and the position embedding (normal: "
                        "N(0, init_std^2), the S3-Rec code's)"),
    GRM_PARAM_DECL_DOUBLE(sasrec_config, init_std, "0.02", GRM_PARAM_RANGE(1e-6, 10),
                          "standard deviation of init = normal"),
    GRM_PARAM_DECL_ENUM(sasrec_config, impl, "auto", "blas|ref|auto",
                        "implementation: OpenBLAS + thread pool, or plain loops"
                        " (auto: ref on [pipeline] device = ref, else the fast path)"),
    GRM_PARAM_DECL_END
};

static grm_status sasrec_op_create(const void *config, int64_t in_dim, uint64_t seed,
                                   void **inst)
{
    if (config == NULL || inst == NULL)
        return sasrec_host->errorf(GRM_EINVAL, "dense-sasrec: create: config and inst must "
                                   "not be NULL");
    return sasrec_create(sasrec_host, config, in_dim, seed, (sasrec **)inst);
}

static void sasrec_op_destroy(void *inst)
{
    sasrec_destroy(inst);
}

static int64_t sasrec_op_out_dim(void *inst)
{
    return sasrec_dim(inst);
}

static grm_status sasrec_op_forward(void *inst, grm_tensor *y, const grm_tensor *x,
                                    const grm_dense_ctx *ctx)
{
    sasrec *s = inst;
    grm_status st = check_matrix("dense-sasrec: forward", "x", x, -1, sasrec_dim(s));
    if (st == GRM_OK)
        st = check_matrix("dense-sasrec: forward", "y", y, x->shape[0], sasrec_dim(s));
    if (st != GRM_OK)
        return st;
    const int32_t training = ctx != NULL && ctx->training;
    const int64_t *offsets = ctx != NULL ? ctx->offsets : NULL;
    return sasrec_forward(s, y->data, x->data, x->shape[0], offsets,
                          offsets != NULL ? ctx->nseq : 0, training,
                          ctx != NULL ? ctx->step : 0);
}

static grm_status sasrec_op_backward(void *inst, grm_tensor *dx, const grm_tensor *dy,
                                     const grm_dense_ctx *ctx)
{
    (void)ctx;      // the layout and step of the last training forward are kept
    sasrec *s = inst;
    grm_status st = check_matrix("dense-sasrec: backward", "dy", dy, -1, sasrec_dim(s));
    if (st == GRM_OK && dx != NULL)
        st = check_matrix("dense-sasrec: backward", "dx", dx, dy->shape[0], sasrec_dim(s));
    if (st != GRM_OK)
        return st;
    return sasrec_backward(s, dx != NULL ? dx->data : NULL, dy->data, dy->shape[0]);
}

static grm_status sasrec_op_params(void *inst, int32_t index, grm_named_tensor *value,
                                   grm_tensor *grad)
{
    return sasrec_params(inst, index, value, grad);
}

static double sasrec_op_flops(void *inst, int64_t rows, int32_t backward)
{
    return sasrec_flops(inst, rows, backward);
}

static const grm_dense_ops sasrec_ops = {
    .struct_size = sizeof(grm_dense_ops),
    .create = sasrec_op_create,
    .destroy = sasrec_op_destroy,
    .out_dim = sasrec_op_out_dim,
    .forward = sasrec_op_forward,
    .backward = sasrec_op_backward,
    .params = sasrec_op_params,
    .flops = sasrec_op_flops,
};

static const grm_plugin_info sasrec_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_DENSE,
    .name = "dense-sasrec",
    .version = "1.0.0",
    .description = "SASRec self-attention block on jagged sequences: causal multi-head "
                   "attention + point-wise FFN with LayerNorm (Kang & McAuley 2018), pre-norm "
                   "or the S3-Rec code's post-norm style",
    .ops = &sasrec_ops,
    .params = sasrec_params_decl,
    .config_size = sizeof(sasrec_config),
};

GRM_PLUGIN_DEFINE(sasrec_host, &sasrec_info);
