/* tests/test-dense-mmoe.c - dense-mmoe (MTGRBoost §2 eq. 4): named parameters and their
 * shapes, seeded Xavier init, a hand-computed tiny case (k = E, k = 1, a tie broken by the
 * lower expert index, no gradient to an unselected expert), central finite differences of
 * every parameter and input gradient (k = E and k < E), blas vs ref, flops, empty batch,
 * errors with status and message, and the PyTorch fixture of tests/ref/mmoe.py (block +
 * head-bce: loss, y, dx and every parameter gradient, k = E and k < E). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense-checks.h"
#include "harness.h"
#include "tap.h"

static const grm_plugin_info *info;
static const grm_dense_ops *ops;

static const grm_dense_ctx train_ctx = { .struct_size = sizeof(grm_dense_ctx), .training = 1,
                                         .step = 1 };

static grm_status fwd(void *inst, float *y, const float *x, int64_t rows, int64_t in,
                      int64_t T)
{
    grm_tensor tx = dc_mat((float *)x, rows, in), ty = dc_mat(y, rows, T);
    return ops->forward(inst, &ty, &tx, &train_ctx);
}

static grm_status bwd(void *inst, float *dx, const float *dy, int64_t rows, int64_t in,
                      int64_t T)
{
    grm_tensor tdy = dc_mat((float *)dy, rows, T), tdx = dc_mat(dx, rows, in);
    return ops->backward(inst, dx != NULL ? &tdx : NULL, &tdy, &train_ctx);
}

/* ---- parameters and init ---- */

static void test_params(void)
{
    // E = 3 experts of 5,4; 2 tasks, towers 3,1 -> 3 x 2 x 2 + 2 x 2 + 2 x 2 x 2 = 24
    void *m = dc_make(info, harness_config(info, "experts=3", "tasks=2", "expert_dims=5,4",
                                           "tower_dims=3,1", NULL), 6, 7);
    grm_named_tensor v;
    grm_tensor g;
    int ok = dc_param_count(ops, m) == 24;
    ok = ok && ops->params(m, 0, &v, &g) == GRM_OK
         && strcmp(v.name, "expert0.layer0.weight") == 0 && v.tensor.shape[0] == 5
         && v.tensor.shape[1] == 6 && g.shape[0] == 5 && g.data != v.tensor.data;
    ok = ok && ops->params(m, 5, &v, &g) == GRM_OK
         && strcmp(v.name, "expert1.layer0.bias") == 0 && v.tensor.ndim == 1;
    ok = ok && ops->params(m, 12, &v, &g) == GRM_OK && strcmp(v.name, "gate0.weight") == 0
         && v.tensor.shape[0] == 3 && v.tensor.shape[1] == 6;
    ok = ok && ops->params(m, 23, &v, &g) == GRM_OK
         && strcmp(v.name, "tower1.layer1.bias") == 0 && v.tensor.shape[0] == 1;
    tap_ok(ok, "params() lists 24 tensors: experts, gates, towers, with names and shapes");
    dc_expect(ops->params(m, 24, &v, &g), GRM_ENOTFOUND, "no parameter 24",
              "params past the last");
    tap_ok(ops->out_dim(m) == 2, "out_dim is the task count");

    // Xavier: |w| <= sqrt(6 / (in + out)), biases 0, same seed same values
    double a0 = sqrt(6.0 / (6 + 5)), maxw = 0;
    const float *w0 = dc_param(ops, m, "expert0.layer0.weight", 0);
    for (int i = 0; i < 30; i++)
        maxw = fmax(maxw, fabs(w0[i]));
    const float *b = dc_param(ops, m, "tower1.layer0.bias", 0);
    void *m2 = dc_make(info, harness_config(info, "experts=3", "tasks=2", "expert_dims=5,4",
                                            "tower_dims=3,1", NULL), 6, 7);
    void *m3 = dc_make(info, harness_config(info, "experts=3", "tasks=2", "expert_dims=5,4",
                                            "tower_dims=3,1", NULL), 6, 8);
    const int64_t np = dc_param_floats(ops, m);
    float *p1 = malloc((size_t)np * 4), *p2 = malloc((size_t)np * 4), *p3 = malloc((size_t)np * 4);
    dc_gather(ops, m, 0, p1);
    dc_gather(ops, m2, 0, p2);
    dc_gather(ops, m3, 0, p3);
    tap_ok(maxw <= a0 && maxw > 0.5 * a0 && b[0] == 0 && b[2] == 0,
           "Xavier-uniform weights within sqrt(6/(in+out)) = %.3f (max %.3f), zero biases", a0,
           maxw);
    tap_ok(memcmp(p1, p2, (size_t)np * 4) == 0 && memcmp(p1, p3, (size_t)np * 4) != 0,
           "init is a function of the seed (%lld floats)", (long long)np);
    tap_ok(ops->flops(m, 10, 0) == 2.0 * 10 * (3 * (6 * 5 + 5 * 4) + 2 * 6 * 3
                                              + 2 * (4 * 3 + 3 * 1) + 2 * 3 * 4)
           && ops->flops(m, 10, 1) == 2 * ops->flops(m, 10, 0),
           "flops: 2 N (sum in*out + T E He) forward, twice that backward");
    free(p1);
    free(p2);
    free(p3);
    ops->destroy(m);
    ops->destroy(m2);
    ops->destroy(m3);
}

/* ---- a hand-computed case ---- */

/* in = 1, E = 2 experts of one unit, T = 1, tower of one layer, relu:
 * h0 = relu(2x), h1 = relu(1 - x), q = (x, -x), y = 3 mixed + 0.5. */
static void *hand_block(const char *topk)
{
    void *m = dc_make(info, harness_config(info, "experts=2", "tasks=1", "expert_dims=1",
                                           "tower_dims=1", topk, "activation=relu", NULL), 1, 1);
    dc_param(ops, m, "expert0.layer0.weight", 0)[0] = 2;
    dc_param(ops, m, "expert0.layer0.bias", 0)[0] = 0;
    dc_param(ops, m, "expert1.layer0.weight", 0)[0] = -1;
    dc_param(ops, m, "expert1.layer0.bias", 0)[0] = 1;
    dc_param(ops, m, "gate0.weight", 0)[0] = 1;
    dc_param(ops, m, "gate0.weight", 0)[1] = -1;
    dc_param(ops, m, "tower0.layer0.weight", 0)[0] = 3;
    dc_param(ops, m, "tower0.layer0.bias", 0)[0] = 0.5f;
    dc_zero_grads(ops, m);
    return m;
}

static void test_hand(void)
{
    // x = 1: h = (2, 0), q = (1, -1), g = (1, e^-2) / (1 + e^-2)
    void *m = hand_block("top_k=0");
    float x = 1, y = 0, dy = 1, dx = 0;
    grm_status st = fwd(m, &y, &x, 1, 1, 1);
    const double g0 = 1 / (1 + exp(-2.0));
    const float want = (float)(3 * 2 * g0 + 0.5);
    tap_close_f32(&y, &want, 1, 1e-6, 1e-6, "hand: k = E, y = 3 (2 g0) + 0.5");
    // dy = 1: dmixed = 3, dg = (6, 0), dq0 = g0 (6 - 6 g0), dq1 = -dq0
    st |= bwd(m, &dx, &dy, 1, 1, 1);
    const double dq0 = g0 * (6 - 6 * g0);
    const float want_g[4] = { (float)dq0, (float)-dq0, (float)(2 * g0), (float)(3 * g0) };
    const float got_g[4] = { dc_param(ops, m, "gate0.weight", 1)[0],
                             dc_param(ops, m, "gate0.weight", 1)[1],
                             dc_param(ops, m, "tower0.layer0.weight", 1)[0],
                             dc_param(ops, m, "expert0.layer0.weight", 1)[0] };
    // tower dw = mixed = 2 g0; expert0: dh0 = 3 g0, dz = dh0 (relu on), dw = dz x = 3 g0;
    // dx = expert0 (2 * 3 g0) + gate (dq0 * 1 + dq1 * -1) + expert1 (0: relu(1-1) is off)
    const float want_dx = (float)(6 * g0 + 2 * dq0);
    tap_ok(st == GRM_OK, "hand: forward and backward run");
    tap_close_f32(got_g, want_g, 4, 1e-5, 1e-6, "hand: k = E gate, tower, expert gradients");
    tap_close_f32(&dx, &want_dx, 1, 1e-5, 1e-6, "hand: k = E dx");
    ops->destroy(m);

    // top_k = 1: g = (1, 0), y = 3 * 2 + 0.5; the gate gets no gradient (dq0 = 1 (6 - 6))
    // and expert 1 none at all
    m = hand_block("top_k=1");
    x = 1;
    st = fwd(m, &y, &x, 1, 1, 1);
    st |= bwd(m, &dx, &dy, 1, 1, 1);
    tap_ok(st == GRM_OK && y == 6.5f && dx == 6.0f
           && dc_param(ops, m, "expert0.layer0.weight", 1)[0] == 3
           && dc_param(ops, m, "expert0.layer0.bias", 1)[0] == 3
           && dc_param(ops, m, "gate0.weight", 1)[0] == 0
           && dc_param(ops, m, "gate0.weight", 1)[1] == 0
           && dc_param(ops, m, "expert1.layer0.weight", 1)[0] == 0
           && dc_param(ops, m, "expert1.layer0.bias", 1)[0] == 0,
           "hand: k = 1 keeps expert 0 only: y = 6.5 (got %g), dx = 6 (got %g), unselected "
           "expert and gate get exactly 0 gradient", y, dx);
    // x = 0.5: h = (1, 0.5), q = (0.5, -0.5) -> k = 1 picks expert 0: y = 3.5
    // x = 0: q = (0, 0), a tie: the lower index wins, h0 = 0 -> y = 0.5 (expert 1: 3.5)
    float xs[2] = { 0.5f, 0.0f }, ys[2];
    dc_zero_grads(ops, m);
    st = fwd(m, ys, xs, 2, 1, 1);
    tap_ok(st == GRM_OK && ys[0] == 3.5f && ys[1] == 0.5f,
           "hand: k = 1 on a tie of gate logits takes the lower expert index (y %g, %g)",
           ys[0], ys[1]);
    ops->destroy(m);
}

/* ---- finite differences ---- */

/* L = sum_rt c_rt y_rt in double, on the block's own forward. */
static double objective(void *m, const float *x, const float *c, float *y, int64_t B,
                        int64_t I, int64_t T)
{
    if (fwd(m, y, x, B, I, T) != GRM_OK) {
        printf("Bail out! forward: %s\n", grm_last_error());
        exit(1);
    }
    double L = 0;
    for (int64_t i = 0; i < B * T; i++)
        L += (double)c[i] * y[i];
    return L;
}

/* objective() of the parameters theta (scattered into m first) and inputs x, as a
 * dc_loss_fn for the finite differences. */
typedef struct objective_at {
    void *m;
    const float *theta, *x, *c;
    float *y;
    int64_t B, I, T;
} objective_at;

static double objective_of(void *ctx)
{
    const objective_at *a = ctx;
    dc_scatter(ops, a->m, 0, a->theta);
    return objective(a->m, a->x, a->c, a->y, a->B, a->I, a->T);
}

static void test_gradcheck(const char *topk, const char *act, const char *impl)
{
    const int64_t B = 5, I = 4, T = 2;
    void *m = dc_make(info, harness_config(info, "experts=3", "tasks=2", "expert_dims=5,3",
                                           "tower_dims=3,1", topk, act, impl, NULL), I, 11);
    uint64_t s = 99;
    float x[20], c[10], y[10], dx[20];
    dc_fill(x, B * I, &s, 1.0f);
    dc_fill(c, B * T, &s, 1.0f);
    // gate weights larger than Xavier so the top-k choice is far from a tie
    float *gw0 = dc_param(ops, m, "gate0.weight", 0), *gw1 = dc_param(ops, m, "gate1.weight", 0);
    for (int i = 0; i < 12; i++) {
        gw0[i] *= 3;
        gw1[i] *= 3;
    }
    const int64_t np = dc_param_floats(ops, m);
    float *theta = malloc((size_t)np * 4), *grad = malloc((size_t)np * 4);
    dc_gather(ops, m, 0, theta);
    dc_zero_grads(ops, m);
    objective(m, x, c, y, B, I, T);
    grm_status st = bwd(m, dx, c, B, I, T);
    dc_gather(ops, m, 1, grad);
    const double eps = 1e-3;
    dc_fd_tally t = { .floor = 1e-2, .tol = 2e-2 };
    objective_at at = { m, theta, x, c, y, B, I, T };
    for (int64_t i = 0; i < np + B * I; i++) {
        float *p = i < np ? &theta[i] : &x[i - np];
        const double num = dc_central_f32(p, eps, objective_of, &at);
        const double ana = i < np ? grad[i] : dx[i - np];
        if (dc_fd_note(&t, num, ana))
            tap_diag("%s %s: %s %lld: numeric %.6g, analytic %.6g", topk, act,
                     i < np ? "param" : "x", (long long)(i < np ? i : i - np), num, ana);
    }
    tap_ok(st == GRM_OK && t.bad == 0, "finite differences (%s, %s, %s): %lld parameter and "
           "%lld input gradients, worst rel err %.2g", topk, act, impl, (long long)np,
           (long long)(B * I), t.worst);
    free(theta);
    free(grad);
    ops->destroy(m);
}

/* ---- blas vs ref ---- */

static void test_impls(void)
{
    const int64_t B = 70, I = 9, T = 3;     // B over one 64-row chunk
    const char *common[] = { "experts=5", "tasks=3", "expert_dims=16,8", "tower_dims=6,1",
                             "top_k=3", "activation=silu" };
    void *a = dc_make(info, harness_config(info, common[0], common[1], common[2], common[3],
                                           common[4], common[5], "impl=blas", NULL), I, 5);
    void *r = dc_make(info, harness_config(info, common[0], common[1], common[2], common[3],
                                           common[4], common[5], "impl=ref", NULL), I, 5);
    uint64_t s = 5;
    float *x = malloc(B * I * 4), *dy = malloc(B * T * 4), *ya = malloc(B * T * 4);
    float *yr = malloc(B * T * 4), *dxa = malloc(B * I * 4), *dxr = malloc(B * I * 4);
    dc_fill(x, B * I, &s, 1.0f);
    dc_fill(dy, B * T, &s, 1.0f);
    dc_zero_grads(ops, a);
    dc_zero_grads(ops, r);
    grm_status st = fwd(a, ya, x, B, I, T) | fwd(r, yr, x, B, I, T);
    st |= bwd(a, dxa, dy, B, I, T) | bwd(r, dxr, dy, B, I, T);
    const int64_t np = dc_param_floats(ops, a);
    float *ga = malloc((size_t)np * 4), *gr = malloc((size_t)np * 4);
    dc_gather(ops, a, 1, ga);
    dc_gather(ops, r, 1, gr);
    tap_ok(st == GRM_OK, "blas and ref run on 70 rows");
    tap_close_f32(ya, yr, B * T, 1e-4, 1e-5, "blas vs ref: y");
    tap_close_f32(dxa, dxr, B * I, 1e-4, 1e-5, "blas vs ref: dx");
    tap_close_f32(ga, gr, np, 1e-4, 1e-5, "blas vs ref: every parameter gradient");
    // an empty batch
    st = fwd(a, ya, x, 0, I, T);
    st |= bwd(a, dxa, dy, 0, I, T);
    tap_ok(st == GRM_OK, "an empty batch runs forward and backward");
    free(x);
    free(dy);
    free(ya);
    free(yr);
    free(dxa);
    free(dxr);
    free(ga);
    free(gr);
    ops->destroy(a);
    ops->destroy(r);
}

/* ---- errors ---- */

static void test_errors(void)
{
    const void *cfg = NULL;
    void *inst = NULL;
    const char *k5[] = { "experts=4", "expert_dims=8", "top_k=5" };
    grm_status st = harness_config_try(info, &cfg, k5, 3);
    if (st == GRM_OK)
        st = ops->create(cfg, 4, 1, &inst);
    dc_expect(st, GRM_EINVAL, "top_k: 5 exceeds experts = 4", "top_k = 5 > experts = 4");
    tap_ok(inst == NULL, "a failed create leaves no instance");
    const char *tw[] = { "expert_dims=8", "tower_dims=8,2" };
    st = harness_config_try(info, &cfg, tw, 2);
    if (st == GRM_OK)
        st = ops->create(cfg, 4, 1, &inst);
    dc_expect(st, GRM_EINVAL, "a tower ends in one logit", "tower_dims ending in 2");
    const char *none[] = { "experts=2" };
    dc_expect(harness_config_try(info, &cfg, none, 1), GRM_EINVAL, "expert_dims",
              "expert_dims is required");
    const char *e0[] = { "experts=0", "expert_dims=8" };
    dc_expect(harness_config_try(info, &cfg, e0, 2), GRM_EINVAL, "experts",
              "experts = 0 is refused");
    const char *act[] = { "expert_dims=8", "activation=tanh" };
    dc_expect(harness_config_try(info, &cfg, act, 2), GRM_EINVAL, "activation",
              "activation = tanh is refused");
    const void *good = harness_config(info, "expert_dims=8", NULL);
    dc_expect(ops->create(good, 0, 1, &inst), GRM_EINVAL, "in_dim 0", "in_dim 0 is refused");
    const int64_t live0 = grm__alloc_live();
    void *m = dc_make(info, good, 4, 1);
    float x[8] = { 0 }, y[4], dy[4] = { 0 }, dx[8];
    dc_expect(bwd(m, dx, dy, 2, 4, 2), GRM_EINVAL, "no training forward",
              "backward before a training forward");
    grm_tensor tx = dc_mat(x, 2, 3), ty = dc_mat(y, 2, 2);
    dc_expect(ops->forward(m, &ty, &tx, &train_ctx), GRM_EINVAL, "x has 3 columns, expected 4",
              "x with the wrong width");
    tx = dc_mat(x, 2, 4);
    ty = dc_mat(y, 2, 3);
    dc_expect(ops->forward(m, &ty, &tx, &train_ctx), GRM_EINVAL, "y has 3 columns, expected 2",
              "y with the wrong width");
    fwd(m, y, x, 2, 4, 2);
    dc_expect(bwd(m, dx, dy, 1, 4, 2), GRM_EINVAL, "dy has 1 rows, the last forward had 2",
              "dy rows differ from the forward");
    grm_dense_ctx eval = train_ctx;
    eval.training = 0;
    tx = dc_mat(x, 2, 4);
    ty = dc_mat(y, 2, 2);
    ops->forward(m, &ty, &tx, &eval);
    dc_expect(bwd(m, dx, dy, 2, 4, 2), GRM_EINVAL, "no training forward",
              "backward after an inference forward");
    const int64_t held = grm__alloc_live() - live0;
    ops->destroy(m);
    ops->destroy(NULL);
    tap_ok(held > 0 && grm__alloc_live() == live0,
           "destroy frees the %lld host allocations of the block; destroy(NULL) is accepted",
           (long long)held);
}

/* ---- the PyTorch fixture ---- */

#define FIX_MAGIC 0x454F4D4Du   /* "MMOE" little-endian */
#define FIX_VERSION 1u
/* per fixture: readable, run, loss, y, dx, and one check per parameter (34) */
#define FIX_NPARAM 34
#define FIX_POINTS (5 + FIX_NPARAM)

static void test_torch(int topk, const char *act)
{
    const char *py = dc_torch_python();
    char cmd[8192], path[4096];
    if (py == NULL) {
        for (int i = 0; i < FIX_POINTS; i++)
            tap_skip("no torch", "PyTorch fixture (top_k %d) check %d of %d", topk, i + 1,
                     FIX_POINTS);
        return;
    }
    const char *src = harness_srcdir() != NULL ? harness_srcdir() : ".";
    snprintf(path, sizeof path, "%s/fixture.bin", harness_tmpdir("dense-mmoe"));
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/mmoe.py' '%s' %d %s", py, src, path, topk,
             act);
    const int rc = system(cmd);
    FILE *f = rc == 0 ? fopen(path, "rb") : NULL;
    uint32_t hdr[2] = { 0 };
    int64_t d[8] = { 0 }, edims[8] = { 0 }, tdims[8] = { 0 };
    double loss = 0;
    int ok = f != NULL && fread(hdr, sizeof hdr, 1, f) == 1 && hdr[0] == FIX_MAGIC
             && hdr[1] == FIX_VERSION && fread(d, sizeof d, 1, f) == 1;
    const int64_t B = d[0], I = d[1], E = d[2], T = d[3], nE = d[6], nT = d[7];
    ok = ok && B > 0 && B <= 64 && I > 0 && I <= 64 && E > 0 && E <= 8 && T > 0 && T <= 8
         && nE > 0 && nE <= 8 && nT > 0 && nT <= 8
         && fread(edims, sizeof *edims, (size_t)nE, f) == (size_t)nE
         && fread(tdims, sizeof *tdims, (size_t)nT, f) == (size_t)nT;
    char ce[64] = "expert_dims=", ct[64] = "tower_dims=", cE[32], cT[32], cK[32], cA[32];
    for (int64_t i = 0; ok && i < nE; i++)
        snprintf(ce + strlen(ce), sizeof ce - strlen(ce), "%s%lld", i ? "," : "",
                 (long long)edims[i]);
    for (int64_t i = 0; ok && i < nT; i++)
        snprintf(ct + strlen(ct), sizeof ct - strlen(ct), "%s%lld", i ? "," : "",
                 (long long)tdims[i]);
    snprintf(cE, sizeof cE, "experts=%lld", (long long)E);
    snprintf(cT, sizeof cT, "tasks=%lld", (long long)T);
    snprintf(cK, sizeof cK, "top_k=%d", topk);
    snprintf(cA, sizeof cA, "activation=%s", act);
    void *m = ok ? dc_make(info, harness_config(info, cE, cT, ce, ct, cK, cA, NULL), I, 1) : NULL;
    const int64_t np = m != NULL ? dc_param_floats(ops, m) : 0;
    float *theta = NULL, *x = NULL, *labels = NULL, *y = NULL, *dy = NULL, *dx = NULL;
    float *dtheta = NULL;
    ok = ok && m != NULL && dc_param_count(ops, m) == FIX_NPARAM && dc_read_f32(f, &theta, np)
         && dc_read_f32(f, &x, B * I) && dc_read_f32(f, &labels, B * T)
         && fread(&loss, sizeof loss, 1, f) == 1 && dc_read_f32(f, &y, B * T)
         && dc_read_f32(f, &dy, B * T) && dc_read_f32(f, &dx, B * I) && dc_read_f32(f, &dtheta, np);
    if (f != NULL)
        fclose(f);
    if (!tap_ok(ok, "tests/ref/mmoe.py (top_k %d, %s) wrote a readable fixture (exit %d, "
                "B %lld, in %lld, E %lld, T %lld)", topk, act, rc, (long long)B, (long long)I,
                (long long)E, (long long)T)) {
        for (int i = 1; i < FIX_POINTS; i++)
            tap_ok(0, "PyTorch fixture check %d of %d (no fixture)", i + 1, FIX_POINTS);
        return;
    }
    dc_scatter(ops, m, 0, theta);
    dc_zero_grads(ops, m);
    float *got_y = calloc((size_t)(B * T), 4), *got_dy = calloc((size_t)(B * T), 4);
    float *got_dx = calloc((size_t)(B * I), 4), *got_dt = calloc((size_t)np, 4);
    grm_status st = fwd(m, got_y, x, B, I, T);
    // the head: head-bce turns y into the loss and dy
    const grm_plugin_info *binfo = harness_plugin("head-bce");
    const grm_head_ops *bops = binfo->ops;
    void *head = NULL;
    st |= bops->create(NULL, T, 1, &head);
    grm_loss_io io;
    memset(&io, 0, sizeof io);
    io.struct_size = sizeof io;
    io.ntasks = (int32_t)T;
    io.rows = B;
    io.dim = T;
    io.pred = got_y;
    io.d_pred = got_dy;
    io.labels = labels;
    st |= bops->loss(head, &io);
    st |= bwd(m, got_dx, got_dy, B, I, T);
    dc_gather(ops, m, 1, got_dt);
    tap_ok(st == GRM_OK, "dense-mmoe + head-bce run on the fixture (%s)",
           st == GRM_OK ? "ok" : grm_last_error());
    const float want_loss = (float)loss, got_loss = (float)io.loss;
    char what[160];
    snprintf(what, sizeof what, "torch top_k %d %s: BCE loss", topk, act);
    tap_close_f32(&got_loss, &want_loss, 1, 1e-4, 1e-6, what);
    snprintf(what, sizeof what, "torch top_k %d %s: y", topk, act);
    tap_close_f32(got_y, y, B * T, 1e-4, 1e-5, what);
    snprintf(what, sizeof what, "torch top_k %d %s: dx", topk, act);
    tap_close_f32(got_dx, dx, B * I, 1e-4, 1e-5, what);
    grm_named_tensor v;
    grm_tensor g;
    int64_t off = 0;
    for (int i = 0; ops->params(m, i, &v, &g) == GRM_OK; i++) {
        snprintf(what, sizeof what, "torch top_k %d %s: d %s", topk, act, v.name);
        tap_close_f32(got_dt + off, dtheta + off, dc_numel(&g), 1e-4, 1e-5, what);
        off += dc_numel(&g);
    }
    bops->destroy(head);
    ops->destroy(m);
    free(theta);
    free(x);
    free(labels);
    free(y);
    free(dy);
    free(dx);
    free(dtheta);
    free(got_y);
    free(got_dy);
    free(got_dx);
    free(got_dt);
}

int main(void)
{
    tap_plan(1 + 6 + 6 + 3 + 5 + 13 + 2 * FIX_POINTS);
    info = harness_plugin("dense-mmoe");
    ops = info->ops;
    tap_ok(info->kind == GRM_KIND_DENSE && ops->loss == NULL && info->params != NULL,
           "dense-mmoe is a dense block with declared parameters, not a head");
    test_params();
    test_hand();
    test_gradcheck("top_k=0", "activation=silu", "impl=ref");
    test_gradcheck("top_k=2", "activation=silu", "impl=blas");
    test_gradcheck("top_k=1", "activation=relu", "impl=blas");
    test_impls();
    test_errors();
    test_torch(0, "relu");
    test_torch(2, "silu");
    return tap_done();
}
