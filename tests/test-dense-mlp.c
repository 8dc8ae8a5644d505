/* tests/test-dense-mlp.c - dense-mlp: named parameters and their single block, Xavier
 * init, a hand-computed forward, blas vs ref implementations, gradients against central
 * differences of a double-precision reimplementation written here (with and without
 * l2norm), deterministic dropout, flops, errors, and the PyTorch fixture of
 * tests/ref/dense_mlp.py (MLP + sampled softmax head, every gradient). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense-checks.h"
#include "harness.h"
#include "tap.h"

static const grm_plugin_info *info;
static const grm_dense_ops *ops;

/* ---- a double-precision MLP, written independently of the plugin ---- */

enum { ACT_RELU, ACT_SILU, ACT_TANH, ACT_NONE };

typedef struct net_d {
    int L;
    int64_t in, dims[4];
    int act, fact, l2;
} net_d;

static double act_d(double z, int a)
{
    switch (a) {
    case ACT_RELU: return z > 0 ? z : 0;
    case ACT_SILU: return z / (1 + exp(-z));
    case ACT_TANH: return tanh(z);
    default: return z;
    }
}

/* y [rows, dims[L-1]] from x [rows, in] and params theta (layer0.weight, layer0.bias, ...
 * concatenated, the params() order). */
static void net_forward_d(const net_d *n, const double *theta, const double *x,
                          int64_t rows, double *y)
{
    double a[64 * 64], b[64 * 64];
    memcpy(a, x, (size_t)(rows * n->in) * sizeof *a);
    int64_t in = n->in;
    const double *p = theta;
    for (int l = 0; l < n->L; l++) {
        const int64_t out = n->dims[l];
        const double *w = p, *bias = p + in * out;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < out; o++) {
                double z = bias[o];
                for (int64_t i = 0; i < in; i++)
                    z += a[r * in + i] * w[o * in + i];
                b[r * out + o] = act_d(z, l < n->L - 1 ? n->act : n->fact);
            }
        memcpy(a, b, (size_t)(rows * out) * sizeof *a);
        p += in * out + out;
        in = out;
    }
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t j = 0; j < in; j++)
            ss += a[r * in + j] * a[r * in + j];
        const double s = n->l2 ? 1 / fmax(sqrt(ss), 1e-12) : 1;
        for (int64_t j = 0; j < in; j++)
            y[r * in + j] = a[r * in + j] * s;
    }
}

/* L = sum(dy * y) of the double net. */
static double net_loss_d(const net_d *n, const double *theta, const double *x, int64_t rows,
                         const double *dy)
{
    double y[64 * 64], L = 0;
    net_forward_d(n, theta, x, rows, y);
    for (int64_t i = 0; i < rows * n->dims[n->L - 1]; i++)
        L += dy[i] * y[i];
    return L;
}

/* net_loss_d at fixed arguments, as a dc_loss_fn for the finite differences. */
typedef struct net_at {
    const net_d *net;
    const double *theta, *x;
    int64_t rows;
    const double *dy;
} net_at;

static double net_loss_at(void *ctx)
{
    const net_at *a = ctx;
    return net_loss_d(a->net, a->theta, a->x, a->rows, a->dy);
}

/* ---- parameters, init, flops ---- */

static void test_params(void)
{
    void *inst = dc_make(info, harness_config(info, "dims=8,5,3", NULL), 4, 7);
    static const char *names[] = { "layer0.weight", "layer0.bias", "layer1.weight",
                                   "layer1.bias", "layer2.weight", "layer2.bias" };
    static const int64_t shapes[6][2] = { { 8, 4 }, { 8, 0 }, { 5, 8 }, { 5, 0 }, { 3, 5 },
                                          { 3, 0 } };
    int one_block = 0;
    const int good = dc_check_params(ops, inst, 6, names, shapes, &one_block);
    tap_ok(good, "params() lists layer0.weight [8,4], layer0.bias [8], ... layer2.bias [3] "
           "with grads of the same shapes");
    grm_named_tensor v;
    grm_tensor g;
    grm_status st = ops->params(inst, 6, &v, &g);
    tap_ok(st == GRM_ENOTFOUND, "params(6) past the last is GRM_ENOTFOUND");
    tap_ok(one_block, "parameters are one contiguous block, gradients follow it (STYLE.md §8)");
    tap_ok(ops->out_dim(inst) == 3, "out_dim is the last of dims");
    const double f0 = ops->flops(inst, 10, 0), f1 = ops->flops(inst, 10, 1);
    tap_ok(f0 == 2.0 * 10 * (4 * 8 + 8 * 5 + 5 * 3) && f1 == 2 * f0,
           "flops: 2 rows in out per layer forward (%g), twice that backward (%g)", f0, f1);
    ops->destroy(inst);
}

static void test_init(void)
{
    const void *cfg = harness_config(info, "dims=64,3", NULL);
    void *a = dc_make(info, cfg, 64, 1), *b = dc_make(info, cfg, 64, 1);
    void *c = dc_make(info, cfg, 64, 2);
    const int64_t n = 64 * 64 + 64 + 3 * 64 + 3;
    float *pa = malloc((size_t)n * sizeof *pa), *pb = malloc((size_t)n * sizeof *pb);
    float *pc = malloc((size_t)n * sizeof *pc);
    dc_gather(ops, a, 0, pa);
    dc_gather(ops, b, 0, pb);
    dc_gather(ops, c, 0, pc);
    tap_ok(memcmp(pa, pb, (size_t)n * sizeof *pa) == 0, "same seed, same initial parameters");
    tap_ok(memcmp(pa, pc, (size_t)n * sizeof *pa) != 0, "another seed, other parameters");
    // layer0.weight [64, 64] ~ U(-a, a), a = sqrt(6 / 128): mean 0, variance a^2 / 3
    const double bound = sqrt(6.0 / 128);
    double mean = 0, var = 0;
    int inside = 1, zero_bias = 1;
    for (int i = 0; i < 64 * 64; i++) {
        inside &= fabs(pa[i]) <= bound;
        mean += pa[i];
    }
    mean /= 64 * 64;
    for (int i = 0; i < 64 * 64; i++)
        var += (pa[i] - mean) * (pa[i] - mean);
    var /= 64 * 64 - 1;
    for (int i = 0; i < 64; i++)
        zero_bias &= pa[64 * 64 + i] == 0.0f;
    for (int i = 0; i < 3; i++)
        zero_bias &= pa[n - 3 + i] == 0.0f;
    tap_ok(inside && fabs(mean) < 0.01 && fabs(var / (bound * bound / 3) - 1) < 0.1,
           "layer0.weight is Xavier-uniform: |w| <= %.4f, mean %.4f, var/(a^2/3) %.3f",
           bound, mean, var / (bound * bound / 3));
    tap_ok(zero_bias, "biases start at zero");
    free(pa);
    free(pb);
    free(pc);
    ops->destroy(a);
    ops->destroy(b);
    ops->destroy(c);
}

/* ---- hand-computed forward ---- */

static void test_hand(void)
{
    // W0 = [[1, 2], [3, -4]], b0 = [0.5, -1], W1 = [[2, -1]], b1 = [0.25]
    // x0 = [1, 1]:  z0 = [3.5, -2] -> relu [3.5, 0]  -> y = 7 + 0.25     =  7.25
    // x1 = [2, -1]: z0 = [0.5, 9]  -> relu [0.5, 9]  -> y = 1 - 9 + 0.25 = -7.75
    static const char *impls[] = { "impl=blas", "impl=ref" };
    for (int k = 0; k < 2; k++) {
        void *inst = dc_make(info, harness_config(info, "dims=2,1", impls[k], NULL), 2, 3);
        const float theta[] = { 1, 2, 3, -4, 0.5f, -1, 2, -1, 0.25f };
        dc_scatter(ops, inst, 0, theta);
        float x[] = { 1, 1, 2, -1 }, y[2] = { 0 };
        grm_tensor tx = dc_mat(x, 2, 2), ty = dc_mat(y, 2, 1);
        grm_dense_ctx ctx = { .struct_size = sizeof ctx, .training = 0, .step = 0 };
        grm_status st = ops->forward(inst, &ty, &tx, &ctx);
        tap_ok(st == GRM_OK && y[0] == 7.25f && y[1] == -7.75f,
               "%s: 2-layer relu forward gives the hand-computed [7.25, -7.75] (got %g, %g)",
               impls[k], (double)y[0], (double)y[1]);
        ops->destroy(inst);
    }
}

/* ---- blas vs ref ---- */

static void test_impls(void)
{
    const int64_t rows_list[] = { 1, 7, 64 };
    const int64_t in = 13, d0 = 29, d1 = 6;
    const int64_t np = in * d0 + d0 + d0 * d1 + d1;
    uint64_t s = 99;
    for (int k = 0; k < 3; k++) {
        const int64_t rows = rows_list[k];
        void *fast = dc_make(info, harness_config(info, "dims=29,6", "activation=silu",
                                                  "final_activation=tanh", "impl=blas", NULL),
                             in, 5);
        void *ref = dc_make(info, harness_config(info, "dims=29,6", "activation=silu",
                                                 "final_activation=tanh", "impl=ref", NULL),
                            in, 5);
        float *theta = malloc((size_t)np * sizeof *theta);
        dc_fill(theta, np, &s, 0.5f);      // nonzero biases too
        dc_scatter(ops, fast, 0, theta);
        dc_scatter(ops, ref, 0, theta);
        float *x = malloc((size_t)(rows * in) * sizeof *x), *dy = malloc((size_t)(rows * d1) * 4);
        float *y1 = calloc((size_t)(rows * d1), 4), *y2 = calloc((size_t)(rows * d1), 4);
        float *dx1 = calloc((size_t)(rows * in), 4), *dx2 = calloc((size_t)(rows * in), 4);
        float *g1 = malloc((size_t)np * 4), *g2 = malloc((size_t)np * 4);
        dc_fill(x, rows * in, &s, 1.0f);
        dc_fill(dy, rows * d1, &s, 1.0f);
        grm_tensor tx = dc_mat(x, rows, in), tdy = dc_mat(dy, rows, d1);
        grm_tensor ty1 = dc_mat(y1, rows, d1), ty2 = dc_mat(y2, rows, d1);
        grm_tensor tdx1 = dc_mat(dx1, rows, in), tdx2 = dc_mat(dx2, rows, in);
        grm_dense_ctx ctx = { .struct_size = sizeof ctx, .training = 1, .step = 3 };
        grm_status st = ops->forward(fast, &ty1, &tx, &ctx);
        st |= ops->forward(ref, &ty2, &tx, &ctx);
        st |= ops->backward(fast, &tdx1, &tdy, &ctx);
        st |= ops->backward(ref, &tdx2, &tdy, &ctx);
        dc_gather(ops, fast, 1, g1);
        dc_gather(ops, ref, 1, g2);
        char what[96];
        tap_ok(st == GRM_OK, "rows %lld: blas and ref forward and backward succeed",
               (long long)rows);
        snprintf(what, sizeof what, "rows %lld: blas y vs ref y", (long long)rows);
        tap_close_f32(y1, y2, rows * d1, 1e-4, 1e-5, what);
        snprintf(what, sizeof what, "rows %lld: blas dx vs ref dx", (long long)rows);
        tap_close_f32(dx1, dx2, rows * in, 1e-4, 1e-5, what);
        snprintf(what, sizeof what, "rows %lld: blas param grads vs ref", (long long)rows);
        tap_close_f32(g1, g2, np, 1e-4, 1e-5, what);
        free(theta);
        free(x);
        free(dy);
        free(y1);
        free(y2);
        free(dx1);
        free(dx2);
        free(g1);
        free(g2);
        ops->destroy(fast);
        ops->destroy(ref);
    }
}

/* ---- gradients against central differences of the double net ---- */

static void test_gradcheck(const char *act, const char *fact, int l2, const char *impl,
                           const net_d *net)
{
    enum { ROWS = 3 };
    const int64_t in = net->in, out = net->dims[net->L - 1];
    int64_t np = 0, prev = in;
    for (int l = 0; l < net->L; l++) {
        np += prev * net->dims[l] + net->dims[l];
        prev = net->dims[l];
    }
    char a[32], f[40], d[64];
    snprintf(a, sizeof a, "activation=%s", act);
    snprintf(f, sizeof f, "final_activation=%s", fact);
    snprintf(d, sizeof d, "dims=%lld,%lld", (long long)net->dims[0], (long long)net->dims[1]);
    void *inst = dc_make(info, harness_config(info, d, a, f,
                                              l2 ? "l2norm=true" : "l2norm=false", impl, NULL),
                         in, 11);
    uint64_t s = 2024;
    float theta[256], x[ROWS * 8], dy[ROWS * 8], y[ROWS * 8], dx[ROWS * 8], grads[256];
    double thd[256], xd[ROWS * 8], dyd[ROWS * 8], yd[ROWS * 8];
    float want_y[ROWS * 8], want_g[256], want_dx[ROWS * 8];
    dc_fill(theta, np, &s, 0.8f);
    dc_fill(x, ROWS * in, &s, 1.0f);
    dc_fill(dy, ROWS * out, &s, 1.0f);
    dc_scatter(ops, inst, 0, theta);
    for (int64_t i = 0; i < np; i++)
        thd[i] = theta[i];
    for (int64_t i = 0; i < ROWS * in; i++)
        xd[i] = x[i];
    for (int64_t i = 0; i < ROWS * out; i++)
        dyd[i] = dy[i];

    grm_tensor tx = dc_mat(x, ROWS, in), ty = dc_mat(y, ROWS, out);
    grm_tensor tdy = dc_mat(dy, ROWS, out), tdx = dc_mat(dx, ROWS, in);
    grm_dense_ctx ctx = { .struct_size = sizeof ctx, .training = 1, .step = 1 };
    dc_zero_grads(ops, inst);
    grm_status st = ops->forward(inst, &ty, &tx, &ctx);
    st |= ops->backward(inst, &tdx, &tdy, &ctx);
    dc_gather(ops, inst, 1, grads);

    net_forward_d(net, thd, xd, ROWS, yd);
    for (int64_t i = 0; i < ROWS * out; i++)
        want_y[i] = (float)yd[i];
    const double h = 1e-6;   // central differences in double: error ~h^2, rounding ~1e-10
    net_at at = { net, thd, xd, ROWS, dyd };
    dc_central_grad(want_g, thd, np, h, net_loss_at, &at);
    dc_central_grad(want_dx, xd, ROWS * in, h, net_loss_at, &at);
    char what[128];
    snprintf(what, sizeof what, "%s/%s%s %s: forward vs double reimplementation", act, fact,
             l2 ? " l2norm" : "", impl);
    tap_ok(st == GRM_OK, "%s/%s%s %s: training forward and backward succeed", act, fact,
           l2 ? " l2norm" : "", impl);
    tap_close_f32(y, want_y, ROWS * out, 1e-5, 1e-6, what);
    snprintf(what, sizeof what, "%s/%s%s %s: weight and bias grads vs central differences",
             act, fact, l2 ? " l2norm" : "", impl);
    tap_close_f32(grads, want_g, np, 1e-3, 1e-5, what);
    snprintf(what, sizeof what, "%s/%s%s %s: dx vs central differences", act, fact,
             l2 ? " l2norm" : "", impl);
    tap_close_f32(dx, want_dx, ROWS * in, 1e-3, 1e-5, what);

    // backward accumulates: a second backward doubles every gradient
    float twice[256];
    st = ops->backward(inst, &tdx, &tdy, &ctx);
    dc_gather(ops, inst, 1, twice);
    for (int64_t i = 0; i < np; i++)
        grads[i] *= 2;
    snprintf(what, sizeof what, "%s/%s%s %s: a second backward adds (grads doubled)", act,
             fact, l2 ? " l2norm" : "", impl);
    tap_close_f32(twice, grads, np, 1e-6, 1e-7, what);
    ops->destroy(inst);
}

/* ---- dropout ---- */

static void test_dropout(void)
{
    // identity weights and no activation: y = dropout(x), so the mask is visible in y
    enum { ROWS = 64, D = 8 };
    const void *cfg = harness_config(info, "dims=8,8", "activation=none", "dropout=0.25",
                                     NULL);
    void *a = dc_make(info, cfg, D, 77), *b = dc_make(info, cfg, D, 77);
    float theta[2 * (D * D + D)] = { 0 };
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < D; i++)
            theta[l * (D * D + D) + i * D + i] = 1.0f;
    dc_scatter(ops, a, 0, theta);
    dc_scatter(ops, b, 0, theta);
    float x[ROWS * D], y1[ROWS * D], y2[ROWS * D], y3[ROWS * D], y4[ROWS * D];
    float dy[ROWS * D], dx[ROWS * D];
    uint64_t s = 5;
    for (int i = 0; i < ROWS * D; i++) {
        x[i] = 0.5f + 0.5f * (harness_randf(&s) + 1.0f);   // in [0.5, 1.5): never 0
        dy[i] = 1.0f;
    }
    grm_tensor tx = dc_mat(x, ROWS, D), tdy = dc_mat(dy, ROWS, D), tdx = dc_mat(dx, ROWS, D);
    grm_tensor t1 = dc_mat(y1, ROWS, D), t2 = dc_mat(y2, ROWS, D), t3 = dc_mat(y3, ROWS, D);
    grm_tensor t4 = dc_mat(y4, ROWS, D);
    grm_dense_ctx train5 = { .struct_size = sizeof train5, .training = 1, .step = 5 };
    grm_dense_ctx train6 = { .struct_size = sizeof train6, .training = 1, .step = 6 };
    grm_dense_ctx eval = { .struct_size = sizeof eval, .training = 0, .step = 5 };

    grm_status st = ops->forward(a, &t1, &tx, &eval);
    tap_ok(st == GRM_OK && memcmp(y1, x, sizeof x) == 0, "dropout is the identity in eval");
    st = ops->forward(a, &t1, &tx, &train5);
    int zeros = 0, scaled = 1;
    for (int i = 0; i < ROWS * D; i++) {
        if (y1[i] == 0.0f)
            zeros++;
        else
            scaled &= fabsf(y1[i] - x[i] / 0.75f) <= 1e-6f * fabsf(x[i]);
    }
    // 512 Bernoulli(0.25) draws: mean 128, sd 9.8; the bound is about 4 sd
    tap_ok(st == GRM_OK && scaled && zeros > 88 && zeros < 168,
           "training drops %d of 512 (p = 0.25) and scales the rest by 1/(1-p)", zeros);
    st = ops->forward(b, &t2, &tx, &train5);
    tap_ok(st == GRM_OK && memcmp(y1, y2, sizeof y1) == 0,
           "same seed and step, same mask (another instance)");
    st = ops->forward(a, &t3, &tx, &train6);
    tap_ok(st == GRM_OK && memcmp(y1, y3, sizeof y1) != 0, "another step, another mask");
    st = ops->forward(a, &t4, &tx, &train5);
    tap_ok(st == GRM_OK && memcmp(y1, y4, sizeof y1) == 0, "step 5 again replays its mask");
    st = ops->backward(a, &tdx, &tdy, &train5);
    int agree = 1;
    for (int i = 0; i < ROWS * D; i++)
        agree &= dx[i] == (y4[i] == 0.0f ? 0.0f : 1.0f / 0.75f);
    tap_ok(st == GRM_OK && agree, "backward applies the forward's mask (dx = mask for dy = 1)");
    ops->destroy(a);
    ops->destroy(b);
}

/* ---- errors ---- */

/* Fill a config with dims=4,4 and patch its dims list through the declared offset. */
static void *patched_dims(int64_t n, int64_t second)
{
    const void *base = harness_config(info, "dims=4,4", NULL);
    void *cfg = malloc(info->config_size);
    memcpy(cfg, base, info->config_size);
    for (const grm_param_decl *p = info->params; p->name != NULL; p++) {
        if (strcmp(p->name, "dims") == 0) {
            grm_int_list *l = (grm_int_list *)((char *)cfg + p->offset);
            l->n = n;
            l->v[1] = second;
        }
    }
    return cfg;
}

static void test_errors(void)
{
    void *inst = NULL;
    void *cfg = patched_dims(0, 4);
    dc_expect(ops->create(cfg, 4, 1, &inst), GRM_EINVAL, "dims: empty",
              "create with an empty dims list is refused");
    tap_ok(inst == NULL, "a failed create returns no instance");
    free(cfg);
    cfg = patched_dims(2, 0);
    dc_expect(ops->create(cfg, 4, 1, &inst), GRM_EINVAL, "dims[1]",
              "create with a zero layer size is refused");
    free(cfg);
    const void *c = NULL;
    const char *zero[] = { "dims=4,0" };
    dc_expect(harness_config_try(info, &c, zero, 1), GRM_EINVAL, "dims",
              "the host refuses dims=4,0 from the param table");
    dc_expect(harness_config_try(info, &c, NULL, 0), GRM_EINVAL, "dims",
              "the host refuses a missing dims (required)");
    dc_expect(ops->create(harness_config(info, "dims=3", NULL), 0, 1, &inst), GRM_EINVAL,
              "in_dim", "create with in_dim 0 is refused");

    inst = dc_make(info, harness_config(info, "dims=3", NULL), 4, 1);
    float x[8] = { 0 }, y[6] = { 0 };
    grm_tensor tx = dc_mat(x, 2, 3), ty = dc_mat(y, 2, 3);
    grm_dense_ctx eval = { .struct_size = sizeof eval, .training = 0, .step = 0 };
    dc_expect(ops->forward(inst, &ty, &tx, &eval), GRM_EINVAL, "x has 3 columns, expected 4",
              "forward with x of the wrong width");
    tx = dc_mat(x, 2, 4);
    ty = dc_mat(y, 1, 3);
    dc_expect(ops->forward(inst, &ty, &tx, &eval), GRM_EINVAL, "y has 1 rows, expected 2",
              "forward with y of the wrong height");
    ty = dc_mat(y, 2, 3);
    ops->forward(inst, &ty, &tx, &eval);
    dc_expect(ops->backward(inst, &tx, &ty, &eval), GRM_EINVAL, "no training forward",
              "backward after an eval forward");
    grm_dense_ctx train = { .struct_size = sizeof train, .training = 1, .step = 0 };
    ops->forward(inst, &ty, &tx, &train);
    grm_tensor dy1 = dc_mat(y, 1, 3), dx1 = dc_mat(x, 1, 4);
    dc_expect(ops->backward(inst, &dx1, &dy1, &train), GRM_EINVAL, "dy has 1 rows",
              "backward with another row count than the forward");
    grm_tensor bad = dc_mat(x, 2, 4);
    bad.dtype = GRM_DTYPE_BF16;
    dc_expect(ops->forward(inst, &ty, &bad, &train), GRM_ENOTSUP, "f32",
              "forward with a bf16 x is GRM_ENOTSUP");
    ops->destroy(inst);
    ops->destroy(NULL);
}

/* ---- the PyTorch fixture ---- */

#define FIX_MAGIC 0x58464D47u   /* "GMFX" little-endian */
#define FIX_VERSION 1u
#define FIX_POINTS 12

static void test_torch(void)
{
    const char *py = dc_torch_python();
    char cmd[8192], path[4096];
    if (py == NULL) {
        for (int i = 0; i < FIX_POINTS; i++)
            tap_skip("torch not available", "PyTorch fixture check %d of %d", i + 1,
                     FIX_POINTS);
        return;
    }
    const char *src = harness_srcdir() != NULL ? harness_srcdir() : ".";
    snprintf(path, sizeof path, "%s/fixture.bin", harness_tmpdir("dense-mlp"));
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/dense_mlp.py' '%s'", py, src, path);
    const int rc = system(cmd);
    FILE *f = rc == 0 ? fopen(path, "rb") : NULL;
    uint32_t hdr[2] = { 0 };
    int64_t dims[5] = { 0 };
    double temperature = 0, loss = 0;
    int ok = f != NULL && fread(hdr, sizeof hdr, 1, f) == 1 && hdr[0] == FIX_MAGIC
             && hdr[1] == FIX_VERSION && fread(dims, sizeof dims, 1, f) == 1
             && fread(&temperature, sizeof temperature, 1, f) == 1;
    const int64_t B = dims[0], I = dims[1], H = dims[2], D = dims[3], R = dims[4];
    ok = ok && B > 0 && B <= 64 && I > 0 && I <= 64 && H > 0 && H <= 64 && D > 0 && D <= 64
         && R >= 0 && R <= 64;
    float *x = NULL, *theta = NULL, *pos = NULL, *neg = NULL, *w = NULL, *y = NULL;
    float *dx = NULL, *dtheta = NULL, *dpos = NULL, *dneg = NULL, *dpred = NULL;
    int64_t pos_ids[64], neg_ids[64];
    const int64_t np = I * H + H + H * D + D;
    ok = ok && dc_read_f32(f, &x, B * I) && dc_read_f32(f, &theta, np)
         && dc_read_f32(f, &pos, B * D) && dc_read_f32(f, &neg, R * D)
         && fread(pos_ids, sizeof *pos_ids, (size_t)B, f) == (size_t)B
         && fread(neg_ids, sizeof *neg_ids, (size_t)R, f) == (size_t)R
         && dc_read_f32(f, &w, B) && fread(&loss, sizeof loss, 1, f) == 1
         && dc_read_f32(f, &y, B * D) && dc_read_f32(f, &dpred, B * D)
         && dc_read_f32(f, &dx, B * I) && dc_read_f32(f, &dtheta, np)
         && dc_read_f32(f, &dpos, B * D) && dc_read_f32(f, &dneg, R * D);
    if (f != NULL)
        fclose(f);
    if (!tap_ok(ok, "tests/ref/dense_mlp.py wrote a readable fixture (exit %d, %lld x %lld "
                "-> %lld -> %lld, %lld negatives)", rc, (long long)B, (long long)I,
                (long long)H, (long long)D, (long long)R)) {
        for (int i = 1; i < FIX_POINTS; i++)
            tap_ok(0, "PyTorch fixture check %d of %d (no fixture)", i + 1, FIX_POINTS);
        return;
    }

    // the block: dense-mlp with the fixture's weights
    char d[64], t[64], r[64];
    snprintf(d, sizeof d, "dims=%lld,%lld", (long long)H, (long long)D);
    void *mlp = dc_make(info, harness_config(info, d, "activation=relu", NULL), I, 1);
    dc_scatter(ops, mlp, 0, theta);
    dc_zero_grads(ops, mlp);
    float *got_y = calloc((size_t)(B * D), 4), *got_dx = calloc((size_t)(B * I), 4);
    float *got_pred = calloc((size_t)(B * D), 4), *got_dpred = calloc((size_t)(B * D), 4);
    float *got_dpos = calloc((size_t)(B * D), 4), *got_dneg = calloc((size_t)(R * D + 1), 4);
    float *got_dtheta = calloc((size_t)np, 4);
    grm_tensor tx = dc_mat(x, B, I), ty = dc_mat(got_y, B, D);
    grm_tensor tdp = dc_mat(got_dpred, B, D), tdx = dc_mat(got_dx, B, I);
    grm_dense_ctx ctx = { .struct_size = sizeof ctx, .training = 1, .step = 1 };
    grm_status st = ops->forward(mlp, &ty, &tx, &ctx);

    // the head: head-sampled-softmax with the fixture's fixed negatives
    const grm_plugin_info *hinfo = harness_plugin("head-sampled-softmax");
    const grm_head_ops *hops = hinfo->ops;
    snprintf(t, sizeof t, "temperature=%.17g", temperature);
    snprintf(r, sizeof r, "negatives=%lld", (long long)R);
    void *head = NULL;
    st |= hops->create(harness_config(hinfo, t, r, "in_batch=true", NULL), D, 1, &head);
    memcpy(got_pred, got_y, (size_t)(B * D) * sizeof(float));   /* the head reads y */
    grm_loss_io io = { 0 };
    io.struct_size = sizeof io;
    io.rows = B;
    io.dim = D;
    io.pred = got_pred;
    io.d_pred = got_dpred;
    io.weights = w;
    io.pos = pos;
    io.d_pos = got_dpos;
    io.pos_ids = pos_ids;
    io.neg = neg;
    io.d_neg = got_dneg;
    io.neg_ids = neg_ids;
    io.nneg = R;
    st |= hops->loss(head, &io);
    st |= ops->backward(mlp, &tdx, &tdp, &ctx);
    dc_gather(ops, mlp, 1, got_dtheta);
    tap_ok(st == GRM_OK, "dense-mlp + head-sampled-softmax run on the fixture (%s)",
           st == GRM_OK ? "ok" : grm_last_error());
    const float want_loss = (float)loss, got_loss = (float)io.loss;
    tap_close_f32(&got_loss, &want_loss, 1, 1e-4, 1e-6, "torch: sampled softmax loss");
    tap_close_f32(got_y, y, B * D, 1e-4, 1e-5, "torch: mlp output y");
    tap_close_f32(got_dpred, dpred, B * D, 1e-4, 1e-5, "torch: d loss / d pred");
    tap_close_f32(got_dpos, dpos, B * D, 1e-4, 1e-5, "torch: d loss / d pos");
    tap_close_f32(got_dneg, dneg, R * D, 1e-4, 1e-5, "torch: d loss / d neg");
    tap_close_f32(got_dx, dx, B * I, 1e-4, 1e-5, "torch: d loss / d x");
    const int64_t off[4] = { 0, I * H, I * H + H, I * H + H + H * D };
    const int64_t len[4] = { I * H, H, H * D, D };
    static const char *names[4] = { "torch: d loss / d layer0.weight",
                                     "torch: d loss / d layer0.bias",
                                     "torch: d loss / d layer1.weight",
                                     "torch: d loss / d layer1.bias" };
    for (int i = 0; i < 4; i++)
        tap_close_f32(got_dtheta + off[i], dtheta + off[i], len[i], 1e-4, 1e-5, names[i]);
    hops->destroy(head);
    ops->destroy(mlp);
    free(x);
    free(theta);
    free(pos);
    free(neg);
    free(w);
    free(y);
    free(dx);
    free(dtheta);
    free(dpos);
    free(dneg);
    free(dpred);
    free(got_y);
    free(got_dx);
    free(got_pred);
    free(got_dpred);
    free(got_dpos);
    free(got_dneg);
    free(got_dtheta);
}

int main(void)
{
    tap_plan(68);
    info = harness_plugin("dense-mlp");
    ops = info->ops;
    tap_ok(info->kind == GRM_KIND_DENSE && ops->loss == NULL,
           "dense-mlp is a dense block, not a head");
    test_params();
    test_init();
    test_hand();
    test_impls();
    const net_d tanh_net = { 2, 5, { 4, 3 }, ACT_TANH, ACT_NONE, 0 };
    test_gradcheck("tanh", "none", 0, "impl=ref", &tanh_net);
    const net_d silu_net = { 2, 5, { 6, 4 }, ACT_SILU, ACT_TANH, 1 };
    test_gradcheck("silu", "tanh", 1, "impl=blas", &silu_net);
    const net_d silu_l2 = { 2, 4, { 5, 3 }, ACT_SILU, ACT_NONE, 1 };
    test_gradcheck("silu", "none", 1, "impl=ref", &silu_l2);
    test_dropout();
    test_errors();
    test_torch();
    return tap_done();
}
