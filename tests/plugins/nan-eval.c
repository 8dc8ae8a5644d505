/* tests/plugins/nan-eval.c - a dense block that passes its rows through in training and
 * writes NaN in evaluation: a model that diverged between its last step and its scoring.
 * tests/test-train-errors.sh trains with it after an MLP and expects HR@K = 0 (every target
 * ranked last, with a warning), where NaN scores once ranked every target first. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <grm/grm.h>

static const grm_host_api *ne_host;   /* the only mutable global */

typedef struct ne {
    int64_t dim;
} ne;

static grm_status ne_create(const void *config, int64_t in_dim, uint64_t seed, void **inst)
{
    (void)config;
    (void)seed;
    ne *n = malloc(sizeof *n);
    if (!n) return ne_host->errorf(GRM_ENOMEM, "dense-nan-eval: out of memory");
    n->dim = in_dim;
    *inst = n;
    return GRM_OK;
}

static void ne_destroy(void *inst)
{
    free(inst);
}

static int64_t ne_out_dim(void *inst)
{
    return ((ne *)inst)->dim;
}

static grm_status ne_forward(void *inst, grm_tensor *y, const grm_tensor *x,
                             const grm_dense_ctx *ctx)
{
    const int64_t n = x->shape[0] * ((ne *)inst)->dim;
    float *out = y->data;
    if (ctx && ctx->training) memcpy(out, x->data, (size_t)n * sizeof(float));
    else for (int64_t i = 0; i < n; i++) out[i] = NAN;
    return GRM_OK;
}

static grm_status ne_backward(void *inst, grm_tensor *dx, const grm_tensor *dy,
                              const grm_dense_ctx *ctx)
{
    (void)ctx;
    if (dx)
        memcpy(dx->data, dy->data, (size_t)(dy->shape[0] * ((ne *)inst)->dim) * sizeof(float));
    return GRM_OK;
}

static grm_status ne_params(void *inst, int32_t index, grm_named_tensor *value,
                            grm_tensor *grad)
{
    (void)inst;
    (void)index;
    (void)value;
    (void)grad;
    return GRM_ENOTFOUND;
}

static double ne_flops(void *inst, int64_t rows, int32_t backward)
{
    (void)inst;
    (void)rows;
    (void)backward;
    return 0;
}

static const grm_dense_ops ne_ops = {
    .struct_size = sizeof(grm_dense_ops),
    .create = ne_create,
    .destroy = ne_destroy,
    .out_dim = ne_out_dim,
    .forward = ne_forward,
    .backward = ne_backward,
    .params = ne_params,
    .flops = ne_flops,
};

static const grm_param_decl ne_params_decl[] = { GRM_PARAM_DECL_END };

static const grm_plugin_info ne_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_DENSE,
    .name = "dense-nan-eval",
    .version = "1.0.0",
    .description = "test fixture: identity in training, NaN in evaluation",
    .ops = &ne_ops,
    .params = ne_params_decl,
    .config_size = 0,
};

GRM_PLUGIN_DEFINE(ne_host, &ne_info);
