/* tests/dense-checks.c - the helpers of tests/dense-checks.h shared by the dense-block
 * tests: tensor views, fills, flat parameter copies, the torch probe, quiet comparisons and
 * central finite differences. No TAP test points here (tap.h's counter is per test), only
 * diagnostics. */
#include <math.h>
#include <stdlib.h>

#include "dense-checks.h"

/* ---- tensors ---- */

grm_tensor dc_mat(float *data, int64_t rows, int64_t cols)
{
    grm_tensor t = { 0 };
    t.data = data;
    t.dtype = GRM_DTYPE_F32;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.shape[2] = t.shape[3] = 1;
    t.device.type = GRM_DEVICE_CPU;
    return t;
}

int64_t dc_numel(const grm_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

void dc_fill(float *v, int64_t n, uint64_t *s, float scale)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = harness_randf(s) * scale;
}

void *dc_make(const grm_plugin_info *info, const void *cfg, int64_t in_dim, uint64_t seed)
{
    void *inst = NULL;
    grm_status st = info->kind == GRM_KIND_HEAD
                        ? ((const grm_head_ops *)info->ops)->create(cfg, in_dim, seed, &inst)
                        : ((const grm_dense_ops *)info->ops)->create(cfg, in_dim, seed, &inst);
    if (st != GRM_OK) {
        printf("Bail out! %s create: %s\n", info->name, grm_last_error());
        exit(1);
    }
    return inst;
}

/* ---- parameters ---- */

int64_t dc_param_count(const grm_dense_ops *ops, void *inst)
{
    grm_named_tensor v;
    grm_tensor g;
    int64_t i = 0;
    while (ops->params(inst, (int32_t)i, &v, &g) == GRM_OK)
        i++;
    return i;
}

int64_t dc_param_floats(const grm_dense_ops *ops, void *inst)
{
    grm_named_tensor v;
    grm_tensor g;
    int64_t n = 0;
    for (int i = 0; ops->params(inst, i, &v, &g) == GRM_OK; i++)
        n += dc_numel(&v.tensor);
    return n;
}

void dc_zero_grads(const grm_dense_ops *ops, void *inst)
{
    grm_named_tensor v;
    grm_tensor g;
    for (int i = 0; ops->params(inst, i, &v, &g) == GRM_OK; i++)
        memset(g.data, 0, (size_t)dc_numel(&g) * sizeof(float));
}

int64_t dc_gather(const grm_dense_ops *ops, void *inst, int grad, float *out)
{
    grm_named_tensor v;
    grm_tensor g;
    int64_t k = 0;
    for (int i = 0; ops->params(inst, i, &v, &g) == GRM_OK; i++) {
        const grm_tensor *t = grad ? &g : &v.tensor;
        memcpy(out + k, t->data, (size_t)dc_numel(t) * sizeof(float));
        k += dc_numel(t);
    }
    return k;
}

int64_t dc_scatter(const grm_dense_ops *ops, void *inst, int grad, const float *in)
{
    grm_named_tensor v;
    grm_tensor g;
    int64_t k = 0;
    for (int i = 0; ops->params(inst, i, &v, &g) == GRM_OK; i++) {
        const grm_tensor *t = grad ? &g : &v.tensor;
        memcpy(t->data, in + k, (size_t)dc_numel(t) * sizeof(float));
        k += dc_numel(t);
    }
    return k;
}

int dc_check_params(const grm_dense_ops *ops, void *inst, int n, const char *const *names,
                    const int64_t (*shapes)[2], int *one_block)
{
    int good = 1, contiguous = 1;
    float *next = NULL, *first_grad = NULL;
    for (int i = 0; i < n; i++) {
        grm_named_tensor v;
        grm_tensor g;
        if (ops->params(inst, i, &v, &g) != GRM_OK) {
            good = 0;
            break;
        }
        const int nd = shapes[i][1] ? 2 : 1;
        const int ok = strcmp(v.name, names[i]) == 0 && v.tensor.ndim == nd && g.ndim == nd
                       && v.tensor.shape[0] == shapes[i][0] && g.shape[0] == shapes[i][0]
                       && (nd == 1 || (v.tensor.shape[1] == shapes[i][1]
                                       && g.shape[1] == shapes[i][1]))
                       && v.tensor.dtype == GRM_DTYPE_F32 && g.dtype == GRM_DTYPE_F32;
        if (!ok)
            tap_diag("parameter %d: %s [%lld, %lld]", i, v.name, (long long)v.tensor.shape[0],
                     (long long)v.tensor.shape[1]);
        good &= ok;
        if (next != NULL && (float *)v.tensor.data != next)
            contiguous = 0;
        next = (float *)v.tensor.data + dc_numel(&v.tensor);
        if (i == 0)
            first_grad = g.data;
    }
    *one_block = contiguous && first_grad == next;
    return good;
}

float *dc_param(const grm_dense_ops *ops, void *inst, const char *name, int grad)
{
    grm_named_tensor v;
    grm_tensor g;
    for (int i = 0; ops->params(inst, i, &v, &g) == GRM_OK; i++)
        if (strcmp(v.name, name) == 0)
            return grad ? g.data : v.tensor.data;
    printf("Bail out! no parameter %s\n", name);
    exit(1);
}

/* ---- PyTorch fixtures ---- */

const char *dc_torch_python(void)
{
    const char *py = getenv("PYTHON3");
    if (py == NULL || *py == '\0')
        py = "/usr/bin/python3";
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", py);
    return system(cmd) == 0 ? py : NULL;
}

int dc_read_f32(FILE *f, float **out, int64_t n)
{
    *out = malloc((size_t)(n > 0 ? n : 1) * sizeof **out);
    return *out != NULL && fread(*out, sizeof **out, (size_t)n, f) == (size_t)n;
}

/* ---- comparisons ---- */

int64_t dc_close_count(const float *got, const float *want, int64_t n, double rtol,
                       double atol, double *max_rel)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (fabs(want[i]) > atol && d / fabs(want[i]) > *max_rel)
            *max_rel = d / fabs(want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            bad++;
    }
    return bad;
}

int dc_fd_note(dc_fd_tally *t, double num, double ana)
{
    const double err = fabs(num - ana) / (t->floor + fabs(num));
    if (err > t->worst)
        t->worst = err;
    return err > t->tol && t->bad++ < 5;
}

/* ---- central finite differences ---- */

double dc_central(double *v, double h, dc_loss_fn loss, void *ctx)
{
    const double keep = *v;
    *v = keep + h;
    const double lp = loss(ctx);
    *v = keep - h;
    const double lm = loss(ctx);
    *v = keep;
    return (lp - lm) / (2 * h);
}

void dc_central_grad(float *grad, double *v, int64_t n, double h, dc_loss_fn loss, void *ctx)
{
    for (int64_t i = 0; i < n; i++)
        grad[i] = (float)dc_central(&v[i], h, loss, ctx);
}

double dc_central_f32(float *v, double h, dc_loss_fn loss, void *ctx)
{
    const float keep = *v;
    *v = keep + (float)h;
    const double lp = loss(ctx);
    *v = keep - (float)h;
    const double lm = loss(ctx);
    *v = keep;
    return (lp - lm) / (2 * h);
}

double dc_richardson_f32(float *v, float h1, float h2, dc_loss_fn loss, void *ctx)
{
    const float keep = *v;
    double cd[2];
    for (int k = 0; k < 2; k++) {
        const float hi = keep + (k ? h2 : h1), lo = keep - (k ? h2 : h1);
        *v = hi;
        const double lp = loss(ctx);
        *v = lo;
        const double lm = loss(ctx);
        cd[k] = (lp - lm) / ((double)hi - (double)lo);
    }
    *v = keep;
    return (4 * cd[1] - cd[0]) / 3;
}
