/* tests/test-dense-sasrec.c - dense-sasrec (one SASRec self-attention block, Kang &
 * McAuley 2018): named parameters in one block, Xavier init, blas vs ref on jagged
 * batches with dropout, gradients against central differences of the training forward
 * (dropout on: the masks are a pure function of (seed, step, index)), causality, sequence
 * independence, offsets NULL, eval == train without dropout, deterministic dropout, flops,
 * every user-reachable error, and the PyTorch fixture of tests/ref/sasrec.py (forward and
 * every gradient for six configurations, both implementations), each for style = sasrec
 * and style = bert (the S3-Rec code's post-norm block). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense-checks.h"
#include "harness.h"
#include "tap.h"

static const grm_plugin_info *info;
static const grm_dense_ops *ops;

/* A config from a space-separated "key=value ..." spec; bails out when the host refuses. */
static const void *config(const char *spec)
{
    char buf[1024];
    const char *kvs[GRM_PARAM_LIST_MAX];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *tok = strtok(buf, " "); tok != NULL && n < GRM_PARAM_LIST_MAX;
         tok = strtok(NULL, " "))
        kvs[n++] = tok;
    const void *cfg = NULL;
    if (harness_config_try(info, &cfg, kvs, n) != GRM_OK) {
        printf("Bail out! dense-sasrec config '%s': %s\n", spec, grm_last_error());
        exit(1);
    }
    return cfg;
}

static void *make(const char *spec, int64_t D, uint64_t seed)
{
    void *inst = NULL;
    if (ops->create(config(spec), D, seed, &inst) != GRM_OK) {
        printf("Bail out! dense-sasrec create '%s': %s\n", spec, grm_last_error());
        exit(1);
    }
    return inst;
}

/* Random parameters that make every term matter: matrices U(-0.5, 0.5), biases and
 * LayerNorm betas U(-0.2, 0.2), gammas 1 + U(-0.3, 0.3). */
static void randomize(void *inst, uint64_t *s)
{
    grm_named_tensor v;
    grm_tensor g;
    for (int i = 0; ops->params(inst, i, &v, &g) == GRM_OK; i++) {
        float *p = v.tensor.data;
        const int64_t n = dc_numel(&v.tensor);
        const int gamma = strstr(v.name, "norm.weight") != NULL;
        dc_fill(p, n, s, v.tensor.ndim == 2 ? 0.5f : gamma ? 0.3f : 0.2f);
        if (gamma)
            for (int64_t j = 0; j < n; j++)
                p[j] += 1.0f;
    }
}

static grm_dense_ctx ctx_of(const int64_t *off, int64_t nseq, int training, int64_t step)
{
    grm_dense_ctx c = { .struct_size = sizeof c, .training = training, .step = step,
                        .offsets = off, .nseq = nseq };
    return c;
}

/* ---- parameters, init ---- */

static void test_params(void)
{
    void *inst = make("num_heads=2 ffn_dim=12 pos_emb=true max_len=6 final_norm=true", 8, 7);
    static const char *names[] = {
        "pos_emb.weight", "attn_norm.weight", "attn_norm.bias", "attn.in_proj_weight",
        "attn.in_proj_bias", "attn.out_proj.weight", "attn.out_proj.bias",
        "ffn_norm.weight", "ffn_norm.bias", "ffn.linear1.weight", "ffn.linear1.bias",
        "ffn.linear2.weight", "ffn.linear2.bias", "final_norm.weight", "final_norm.bias"
    };
    static const int64_t shapes[15][2] = {
        { 6, 8 }, { 8, 0 }, { 8, 0 }, { 24, 8 }, { 24, 0 }, { 8, 8 }, { 8, 0 }, { 8, 0 },
        { 8, 0 }, { 12, 8 }, { 12, 0 }, { 8, 12 }, { 8, 0 }, { 8, 0 }, { 8, 0 }
    };
    int one_block = 0;
    const int good = dc_check_params(ops, inst, 15, names, shapes, &one_block);
    tap_ok(good, "params() lists pos_emb.weight [6,8], attn_norm.*, attn.in_proj_weight "
           "[24,8], ..., final_norm.bias [8] with grads of the same shapes");
    grm_named_tensor v;
    grm_tensor g;
    tap_ok(ops->params(inst, 15, &v, &g) == GRM_ENOTFOUND,
           "params(15) past the last is GRM_ENOTFOUND");
    tap_ok(one_block, "parameters are one contiguous block, gradients follow it (STYLE.md §8)");
    tap_ok(ops->out_dim(inst) == 8, "out_dim is the model dim");
    ops->destroy(inst);

    inst = make("num_heads=1", 6, 7);
    int n = 0;
    while (ops->params(inst, n, &v, &g) == GRM_OK)
        n++;
    ops->params(inst, 0, &v, &g);
    tap_ok(n == 12 && strcmp(v.name, "attn_norm.weight") == 0 && dc_param_floats(ops, inst)
           == 2 * 6 + 18 * 6 + 18 + 36 + 6 + 2 * 6 + 36 + 6 + 36 + 6,
           "without pos_emb and final_norm: 12 parameters, ffn_dim defaults to D (got %d)", n);
    ops->destroy(inst);

    // style = bert: each LayerNorm after its sub-layer, an embedding LayerNorm, FFN 4D
    inst = make("style=bert num_heads=2 pos_emb=true max_len=6", 8, 7);
    static const char *bnames[] = {
        "pos_emb.weight", "emb_norm.weight", "emb_norm.bias", "attn.in_proj_weight",
        "attn.in_proj_bias", "attn.out_proj.weight", "attn.out_proj.bias",
        "attn_norm.weight", "attn_norm.bias", "ffn.linear1.weight", "ffn.linear1.bias",
        "ffn.linear2.weight", "ffn.linear2.bias", "ffn_norm.weight", "ffn_norm.bias"
    };
    static const int64_t bshapes[15][2] = {
        { 6, 8 }, { 8, 0 }, { 8, 0 }, { 24, 8 }, { 24, 0 }, { 8, 8 }, { 8, 0 }, { 8, 0 },
        { 8, 0 }, { 32, 8 }, { 32, 0 }, { 8, 32 }, { 8, 0 }, { 8, 0 }, { 8, 0 }
    };
    tap_ok(dc_check_params(ops, inst, 15, bnames, bshapes, &one_block) && one_block
           && ops->params(inst, 15, &v, &g) == GRM_ENOTFOUND,
           "style=bert: pos_emb.weight, emb_norm.*, attn.*, attn_norm.*, ffn.* [32,8].., "
           "ffn_norm.*: 15 parameters in one block, ffn_dim defaults to 4D");
    ops->destroy(inst);
}

static void test_init(void)
{
    enum { D = 64 };
    const char *spec = "num_heads=4 pos_emb=true max_len=32";
    void *a = make(spec, D, 1), *b = make(spec, D, 1), *c = make(spec, D, 2);
    const int64_t n = dc_param_floats(ops, a);
    float *pa = malloc((size_t)n * sizeof *pa), *pb = malloc((size_t)n * sizeof *pb);
    float *pc = malloc((size_t)n * sizeof *pc);
    dc_gather(ops, a, 0, pa);
    dc_gather(ops, b, 0, pb);
    dc_gather(ops, c, 0, pc);
    tap_ok(memcmp(pa, pb, (size_t)n * sizeof *pa) == 0, "same seed, same initial parameters");
    tap_ok(memcmp(pa, pc, (size_t)n * sizeof *pa) != 0, "another seed, other parameters");

    // attn.in_proj_weight [3D, D] ~ N(0, 2 / (D + 3D)) as xavier_normal_ on the whole matrix
    grm_named_tensor v;
    grm_tensor g;
    ops->params(a, 3, &v, &g);
    const float *w = v.tensor.data;
    const int64_t m = dc_numel(&v.tensor);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < m; i++)
        mean += w[i];
    mean /= (double)m;
    for (int64_t i = 0; i < m; i++)
        var += (w[i] - mean) * (w[i] - mean);
    var /= (double)(m - 1);
    const double want = 2.0 / (4 * D);
    tap_ok(strcmp(v.name, "attn.in_proj_weight") == 0 && fabs(mean) < 0.005
           && fabs(var / want - 1) < 0.05,
           "in_proj_weight is Xavier-normal over [3D, D]: mean %.4f, var/(2/(4D)) %.3f", mean,
           var / want);
    int zeros = 1, norms = 1;
    for (int i = 0; ops->params(a, i, &v, &g) == GRM_OK; i++) {
        const float *p = v.tensor.data;
        const int gamma = strstr(v.name, "norm.weight") != NULL;
        if (v.tensor.ndim == 1)
            for (int64_t j = 0; j < dc_numel(&v.tensor); j++) {
                if (gamma)
                    norms &= p[j] == 1.0f;
                else
                    zeros &= p[j] == 0.0f;
            }
    }
    tap_ok(zeros && norms, "biases and LayerNorm betas start at 0, gammas at 1");
    ops->destroy(a);
    ops->destroy(b);
    ops->destroy(c);

    // xavier_uniform: ffn.linear1.weight [D, D] in (-a, a), a = sqrt(6 / 2D), var a^2 / 3
    a = make("num_heads=4 init=xavier_uniform", D, 3);
    ops->params(a, 8, &v, &g);
    w = v.tensor.data;
    const double bound = sqrt(6.0 / (2 * D));
    int inside = 1;
    mean = var = 0;
    for (int64_t i = 0; i < D * D; i++) {
        inside &= fabs(w[i]) <= bound;
        mean += w[i];
    }
    mean /= D * D;
    for (int64_t i = 0; i < D * D; i++)
        var += (w[i] - mean) * (w[i] - mean);
    var /= D * D - 1;
    tap_ok(strcmp(v.name, "ffn.linear1.weight") == 0 && inside
           && fabs(var / (bound * bound / 3) - 1) < 0.1,
           "init=xavier_uniform: |w| <= %.4f, var/(a^2/3) %.3f", bound,
           var / (bound * bound / 3));
    ops->destroy(a);

    // init=normal: N(0, init_std^2) for every matrix, whatever its shape (S3-Rec code)
    a = make("style=bert num_heads=4 init=normal init_std=0.05", D, 3);
    int normal = 1;
    for (int i = 0; ops->params(a, i, &v, &g) == GRM_OK; i++) {
        if (v.tensor.ndim != 2)
            continue;
        const int64_t m2 = dc_numel(&v.tensor);
        w = v.tensor.data;
        mean = var = 0;
        for (int64_t j = 0; j < m2; j++)
            mean += w[j];
        mean /= (double)m2;
        for (int64_t j = 0; j < m2; j++)
            var += (w[j] - mean) * (w[j] - mean);
        var /= (double)(m2 - 1);
        normal &= fabs(mean) < 0.005 && fabs(sqrt(var) / 0.05 - 1) < 0.05;
        if (!normal)
            tap_diag("%s: mean %.4f std %.4f", v.name, mean, sqrt(var));
    }
    tap_ok(normal, "init=normal init_std=0.05: every matrix has mean ~0 and std ~0.05");
    ops->destroy(a);
    free(pa);
    free(pb);
    free(pc);
}

/* ---- blas vs ref ---- */

static void test_impls(const char *base)
{
    static const int64_t off[] = { 0, 1, 18, 21, 61, 62 };   // lengths 1, 17, 3, 40, 1
    const int64_t N = 62, nseq = 5, D = 12;
    char sf[256], sr[256];
    snprintf(sf, sizeof sf, "%s impl=blas", base);
    snprintf(sr, sizeof sr, "%s impl=ref", base);
    void *fast = make(sf, D, 5), *ref = make(sr, D, 5);
    const int64_t np = dc_param_floats(ops, fast);
    uint64_t s = 99;
    float *theta = malloc((size_t)np * 4), *g1 = malloc((size_t)np * 4);
    float *g2 = malloc((size_t)np * 4);
    float *x = malloc((size_t)(N * D) * 4), *dy = malloc((size_t)(N * D) * 4);
    float *y1 = calloc((size_t)(N * D), 4), *y2 = calloc((size_t)(N * D), 4);
    float *dx1 = calloc((size_t)(N * D), 4), *dx2 = calloc((size_t)(N * D), 4);
    randomize(fast, &s);
    dc_gather(ops, fast, 0, theta);
    dc_scatter(ops, ref, 0, theta);
    dc_fill(x, N * D, &s, 1.0f);
    dc_fill(dy, N * D, &s, 1.0f);
    grm_tensor tx = dc_mat(x, N, D), tdy = dc_mat(dy, N, D);
    grm_tensor ty1 = dc_mat(y1, N, D), ty2 = dc_mat(y2, N, D);
    grm_tensor tdx1 = dc_mat(dx1, N, D), tdx2 = dc_mat(dx2, N, D);
    grm_dense_ctx ctx = ctx_of(off, nseq, 1, 3);
    grm_status st = ops->forward(fast, &ty1, &tx, &ctx);
    st |= ops->forward(ref, &ty2, &tx, &ctx);
    dc_zero_grads(ops, fast);
    dc_zero_grads(ops, ref);
    st |= ops->backward(fast, &tdx1, &tdy, &ctx);
    st |= ops->backward(ref, &tdx2, &tdy, &ctx);
    dc_gather(ops, fast, 1, g1);
    dc_gather(ops, ref, 1, g2);
    tap_ok(st == GRM_OK, "%s, lengths 1,17,3,40,1: blas and ref forward and backward "
           "succeed", base);
    tap_close_f32(y1, y2, N * D, 1e-4, 1e-5, "blas y vs ref y (training, dropout on)");
    tap_close_f32(dx1, dx2, N * D, 1e-4, 1e-5, "blas dx vs ref dx");
    tap_close_f32(g1, g2, np, 1e-4, 1e-5, "blas parameter grads vs ref");
    ops->destroy(fast);
    ops->destroy(ref);
    free(theta);
    free(g1);
    free(g2);
    free(x);
    free(dy);
    free(y1);
    free(y2);
    free(dx1);
    free(dx2);
}

/* ---- gradients against central differences ---- */

/* sum(dy * y) in double of one training forward at `step` (the same dropout masks). */
static double loss_at(void *inst, const float *x, const float *dy, const int64_t *off,
                      int64_t nseq, int64_t N, int64_t D, float *y)
{
    grm_tensor tx = dc_mat((float *)x, N, D), ty = dc_mat(y, N, D);
    grm_dense_ctx ctx = ctx_of(off, nseq, 1, 11);
    if (ops->forward(inst, &ty, &tx, &ctx) != GRM_OK)
        return NAN;
    double L = 0;
    for (int64_t i = 0; i < N * D; i++)
        L += (double)dy[i] * y[i];
    return L;
}

/* loss_at of fixed arguments, as a dc_loss_fn for the finite differences. */
typedef struct loss_args {
    void *inst;
    const float *x, *dy;
    const int64_t *off;
    int64_t nseq, N, D;
    float *y;
} loss_args;

static double loss_of(void *ctx)
{
    const loss_args *a = ctx;
    return loss_at(a->inst, a->x, a->dy, a->off, a->nseq, a->N, a->D, a->y);
}

static void test_gradcheck(const char *spec, int64_t D)
{
    static const int64_t off[] = { 0, 1, 5, 8 };   // lengths 1, 4, 3
    enum { N = 8, NSEQ = 3, PER = 3 };
    void *inst = make(spec, D, 21);
    uint64_t s = 4242;
    randomize(inst, &s);
    float x[N * 16], dy[N * 16], y[N * 16], dx[N * 16];
    dc_fill(x, N * D, &s, 1.0f);
    dc_fill(dy, N * D, &s, 1.0f);
    grm_tensor tx = dc_mat(x, N, D), ty = dc_mat(y, N, D), tdy = dc_mat(dy, N, D);
    grm_tensor tdx = dc_mat(dx, N, D);
    grm_dense_ctx ctx = ctx_of(off, NSEQ, 1, 11);
    dc_zero_grads(ops, inst);
    grm_status st = ops->forward(inst, &ty, &tx, &ctx);
    st |= ops->backward(inst, &tdx, &tdy, &ctx);

    // PER entries of every parameter, and 2 PER of x. h = 1e-3: larger steps cross ReLU
    // kinks of the FFN (1e-2 did, errors up to 0.08); the float rounding of the
    // double-summed loss (~1e-7 relative) stays under the tolerance after dividing by 2h
    const double h = 1e-3;
    loss_args at = { inst, x, dy, off, NSEQ, N, D, y };
    float got[64 * PER], want[64 * PER];
    int n = 0;
    grm_named_tensor v;
    grm_tensor g;
    for (int i = 0; ops->params(inst, i, &v, &g) == GRM_OK && n + PER <= 64 * PER; i++) {
        float *p = v.tensor.data;
        const float *gp = g.data;
        const int64_t m = dc_numel(&v.tensor);
        for (int k = 0; k < PER; k++) {
            const int64_t j = (int64_t)(harness_rand(&s) % (uint64_t)m);
            want[n] = (float)dc_central_f32(&p[j], h, loss_of, &at);
            got[n++] = gp[j];
        }
    }
    for (int k = 0; k < 2 * PER; k++) {
        const int64_t j = (int64_t)(harness_rand(&s) % (uint64_t)(N * D));
        want[n] = (float)dc_central_f32(&x[j], h, loss_of, &at);
        got[n++] = dx[j];
    }
    char what[256];
    tap_ok(st == GRM_OK, "%s: training forward and backward succeed", spec);
    snprintf(what, sizeof what, "%s: %d sampled parameter and input grads vs central "
             "differences", spec, n);
    tap_close_f32(got, want, n, 2e-2, 2e-3, what);

    // backward accumulates: a second backward doubles every gradient
    const int64_t np = dc_param_floats(ops, inst);
    float *once = malloc((size_t)np * 4), *twice = malloc((size_t)np * 4);
    ops->forward(inst, &ty, &tx, &ctx);
    dc_zero_grads(ops, inst);
    ops->backward(inst, &tdx, &tdy, &ctx);
    dc_gather(ops, inst, 1, once);
    st = ops->backward(inst, &tdx, &tdy, &ctx);
    dc_gather(ops, inst, 1, twice);
    for (int64_t i = 0; i < np; i++)
        once[i] *= 2;
    snprintf(what, sizeof what, "%s: a second backward adds (grads doubled)", spec);
    tap_close_f32(twice, once, np, 1e-6, 1e-7, what);
    free(once);
    free(twice);
    ops->destroy(inst);
}

/* ---- causality, sequence independence, offsets NULL ---- */

static void test_structure(void)
{
    enum { D = 8, N = 12 };
    static const int64_t off[] = { 0, 5, 12 };   // lengths 5, 7
    const char *spec = "num_heads=2 pos_emb=true max_len=8 final_norm=true dropout=0";
    void *inst = make(spec, D, 9);
    uint64_t s = 17;
    randomize(inst, &s);
    float x[N * D], x2[N * D], y[N * D], y2[N * D], y3[N * D];
    dc_fill(x, N * D, &s, 1.0f);
    grm_tensor tx = dc_mat(x, N, D), ty = dc_mat(y, N, D);
    grm_dense_ctx eval = ctx_of(off, 2, 0, 0);
    grm_status st = ops->forward(inst, &ty, &tx, &eval);

    // change token 3 of the second sequence (row 8): rows 5..7 and the first sequence stay
    memcpy(x2, x, sizeof x);
    for (int c = 0; c < D; c++)
        x2[8 * D + c] += 0.5f;
    grm_tensor tx2 = dc_mat(x2, N, D), ty2 = dc_mat(y2, N, D);
    st |= ops->forward(inst, &ty2, &tx2, &eval);
    int before_same = memcmp(y, y2, 8 * D * sizeof(float)) == 0, after_changed = 1;
    for (int r = 8; r < N; r++) {
        int changed = 0;
        for (int c = 0; c < D; c++)
            changed |= y[r * D + c] != y2[r * D + c];
        after_changed &= changed;
    }
    tap_ok(st == GRM_OK && before_same && after_changed,
           "causal: changing token 3 of a sequence leaves earlier tokens and the other "
           "sequence bit-identical and changes token 3 onwards");

    // the second sequence alone gives the same outputs as inside the batch
    static const int64_t off1[] = { 0, 7 };
    grm_tensor tx1 = dc_mat(x + 5 * D, 7, D), ty3 = dc_mat(y3, 7, D);
    grm_dense_ctx one = ctx_of(off1, 1, 0, 0);
    st = ops->forward(inst, &ty3, &tx1, &one);
    tap_ok(st == GRM_OK, "the second sequence alone runs");
    // not bit-identical: OpenBLAS may take another kernel path for another row count
    tap_close_f32(y3, y + 5 * D, 7 * D, 1e-5, 1e-6,
                  "sequence alone vs inside the batch (no attention across sequences)");
    ops->destroy(inst);

    // offsets NULL: every row its own length-1 sequence, the same as offsets 0, 1, ..., N
    inst = make("num_heads=2 pos_emb=true max_len=3 dropout=0", D, 9);
    randomize(inst, &s);
    int64_t ones[N + 1];
    for (int i = 0; i <= N; i++)
        ones[i] = i;
    grm_dense_ctx null_ctx = ctx_of(NULL, 0, 0, 0), ones_ctx = ctx_of(ones, N, 0, 0);
    st = ops->forward(inst, &ty, &tx, &null_ctx);
    st |= ops->forward(inst, &ty2, &tx, &ones_ctx);
    tap_ok(st == GRM_OK && memcmp(y, y2, sizeof y) == 0,
           "ctx->offsets NULL equals offsets 0,1,...,N (length-1 sequences)");
    st = ops->forward(inst, &ty2, &tx, NULL);
    tap_ok(st == GRM_OK && memcmp(y, y2, sizeof y) == 0,
           "a NULL ctx is an eval forward on length-1 sequences");
    ops->destroy(inst);
}

/* ---- eval vs training, dropout ---- */

static void test_dropout(void)
{
    enum { D = 8, N = 20 };
    static const int64_t off[] = { 0, 6, 20 };
    uint64_t s = 31;
    float x[N * D], y1[N * D], y2[N * D], y3[N * D], y4[N * D];
    dc_fill(x, N * D, &s, 1.0f);
    grm_tensor tx = dc_mat(x, N, D), t1 = dc_mat(y1, N, D), t2 = dc_mat(y2, N, D);
    grm_tensor t3 = dc_mat(y3, N, D), t4 = dc_mat(y4, N, D);
    grm_dense_ctx eval = ctx_of(off, 2, 0, 5), train5 = ctx_of(off, 2, 1, 5);
    grm_dense_ctx train6 = ctx_of(off, 2, 1, 6);

    void *inst = make("num_heads=2 pos_emb=true max_len=16 dropout=0", D, 4);
    grm_status st = ops->forward(inst, &t1, &tx, &eval);
    st |= ops->forward(inst, &t2, &tx, &train5);
    tap_ok(st == GRM_OK && memcmp(y1, y2, sizeof y1) == 0,
           "dropout = 0: a training forward equals the eval forward");
    ops->destroy(inst);

    const char *spec = "num_heads=2 pos_emb=true max_len=16 dropout=0.3";
    void *a = make(spec, D, 4), *b = make(spec, D, 4);
    st = ops->forward(a, &t1, &tx, &eval);
    st |= ops->forward(a, &t2, &tx, &eval);
    tap_ok(st == GRM_OK && memcmp(y1, y2, sizeof y1) == 0, "eval forward is deterministic");
    st = ops->forward(a, &t2, &tx, &train5);
    tap_ok(st == GRM_OK && memcmp(y1, y2, sizeof y1) != 0,
           "dropout = 0.3: the training forward differs from eval");
    st = ops->forward(b, &t3, &tx, &train5);
    tap_ok(st == GRM_OK && memcmp(y2, y3, sizeof y2) == 0,
           "same seed and step, same masks (another instance)");
    st = ops->forward(a, &t4, &tx, &train6);
    tap_ok(st == GRM_OK && memcmp(y2, y4, sizeof y2) != 0, "another step, other masks");
    ops->destroy(a);
    ops->destroy(b);
}

/* ---- flops ---- */

static void test_flops(void)
{
    enum { D = 8, F = 12, N = 9 };
    static const int64_t off[] = { 0, 1, 5, 9 };    // lengths 1, 4, 4: 1 + 10 + 10 pairs
    void *inst = make("num_heads=2 ffn_dim=12 dropout=0", D, 1);
    float x[N * D] = { 0 }, y[N * D];
    grm_tensor tx = dc_mat(x, N, D), ty = dc_mat(y, N, D);
    grm_dense_ctx eval = ctx_of(off, 3, 0, 0);
    const double before = ops->flops(inst, N, 0);
    ops->forward(inst, &ty, &tx, &eval);
    const double gemm = 2.0 * N * (4 * D * D + 2 * D * F);
    const double f0 = ops->flops(inst, N, 0), f1 = ops->flops(inst, N, 1);
    tap_ok(before == gemm + 4.0 * D * N && f0 == gemm + 4.0 * D * 21
           && f1 == 2 * gemm + 10.0 * D * 21,
           "flops: GEMMs 2N(4D^2+2DF) + attention 4D per causal pair forward (%g), "
           "2x GEMMs + 10D per pair backward (%g)", f0, f1);
    ops->destroy(inst);
}

/* ---- errors ---- */

static void test_errors(void)
{
    void *inst = NULL;
    dc_expect(ops->create(config("num_heads=3"), 8, 1, &inst), GRM_EINVAL, "does not divide",
              "num_heads 3 with D 8 is refused");
    tap_ok(inst == NULL, "a failed create returns no instance");
    dc_expect(ops->create(config("num_heads=1"), 0, 1, &inst), GRM_EINVAL, "in_dim",
              "create with in_dim 0 is refused");
    const void *c = NULL;
    const char *zero_heads[] = { "num_heads=0" };
    dc_expect(harness_config_try(info, &c, zero_heads, 1), GRM_EINVAL, "num_heads",
              "the host refuses num_heads=0 from the param table");
    const char *one_drop[] = { "dropout=1" };
    dc_expect(harness_config_try(info, &c, one_drop, 1), GRM_EINVAL, "dropout",
              "the host refuses dropout=1 from the param table");
    const char *bad_align[] = { "pos_align=middle" };
    dc_expect(harness_config_try(info, &c, bad_align, 1), GRM_EINVAL, "pos_align",
              "the host refuses pos_align=middle");
    dc_expect(ops->create(config("style=bert final_norm=true"), 8, 1, &inst), GRM_EINVAL,
              "drop final_norm", "style=bert with final_norm is refused (it ends in one)");

    enum { D = 4 };
    inst = make("num_heads=2 pos_emb=true max_len=3", D, 1);
    float x[6 * D] = { 0 }, y[6 * D] = { 0 };
    grm_tensor tx = dc_mat(x, 6, 3), ty = dc_mat(y, 6, D);
    grm_dense_ctx eval = ctx_of(NULL, 0, 0, 0);
    dc_expect(ops->forward(inst, &ty, &tx, &eval), GRM_EINVAL, "x has 3 columns, expected 4",
              "forward with x of the wrong width");
    tx = dc_mat(x, 6, D);
    ty = dc_mat(y, 5, D);
    dc_expect(ops->forward(inst, &ty, &tx, &eval), GRM_EINVAL, "y has 5 rows, expected 6",
              "forward with y of the wrong height");
    ty = dc_mat(y, 6, D);
    grm_tensor bad = dc_mat(x, 6, D);
    bad.dtype = GRM_DTYPE_BF16;
    dc_expect(ops->forward(inst, &ty, &bad, &eval), GRM_ENOTSUP, "f32",
              "forward with a bf16 x is GRM_ENOTSUP");
    static const int64_t short_off[] = { 0, 2, 5 };
    grm_dense_ctx c1 = ctx_of(short_off, 2, 1, 0);
    dc_expect(ops->forward(inst, &ty, &tx, &c1), GRM_EINVAL, "expected 0 to the 6 rows",
              "offsets that end before the last row are refused");
    static const int64_t down_off[] = { 0, 4, 2, 6 };
    grm_dense_ctx c2 = ctx_of(down_off, 3, 1, 0);
    dc_expect(ops->forward(inst, &ty, &tx, &c2), GRM_EINVAL, "decrease at sequence 1",
              "decreasing offsets are refused");
    static const int64_t long_off[] = { 0, 2, 6 };
    grm_dense_ctx c3 = ctx_of(long_off, 2, 1, 0);
    dc_expect(ops->forward(inst, &ty, &tx, &c3), GRM_EINVAL, "more than max_len 3",
              "a sequence longer than max_len is refused with pos_emb");
    grm_dense_ctx c4 = ctx_of(long_off, -1, 1, 0);
    dc_expect(ops->forward(inst, &ty, &tx, &c4), GRM_EINVAL, "negative",
              "a negative ctx->nseq is refused");
    dc_expect(ops->backward(inst, &tx, &ty, &eval), GRM_EINVAL, "no training forward",
              "backward after a failed forward");
    static const int64_t ok_off[] = { 0, 3, 6 };
    grm_dense_ctx c5 = ctx_of(ok_off, 2, 0, 0);
    ops->forward(inst, &ty, &tx, &c5);
    dc_expect(ops->backward(inst, &tx, &ty, &c5), GRM_EINVAL, "no training forward",
              "backward after an eval forward (nothing cached)");
    grm_dense_ctx c6 = ctx_of(ok_off, 2, 1, 0);
    ops->forward(inst, &ty, &tx, &c6);
    grm_tensor dy1 = dc_mat(y, 1, D), dx1 = dc_mat(x, 1, D);
    dc_expect(ops->backward(inst, &dx1, &dy1, &c6), GRM_EINVAL, "dy has 1 rows",
              "backward with another row count than the forward");
    grm_named_tensor v;
    dc_expect(ops->params(inst, -1, &v, NULL), GRM_ENOTFOUND, "no parameter -1",
              "params(-1) is GRM_ENOTFOUND");
    // the same buffer for dy and dx is allowed
    float buf[6 * D];
    for (int i = 0; i < 6 * D; i++)
        buf[i] = 1.0f;
    grm_tensor tb = dc_mat(buf, 6, D);
    tap_ok(ops->backward(inst, &tb, &tb, &c6) == GRM_OK, "backward with dx aliasing dy");
    ops->destroy(inst);
    ops->destroy(NULL);
}

/* ---- the PyTorch fixture ---- */

#define FIX_MAGIC 0x46534153u   /* "SASF" little-endian */
#define FIX_VERSION 2u
#define FIX_CASES 6
#define FIX_PER_CASE 8          /* 2 implementations x (run, y, dx, grads) */

static void fixture_case(FILE *f, int k)
{
    int64_t hdr[11];
    double eps = 0;
    int ok = fread(hdr, sizeof hdr, 1, f) == 1 && fread(&eps, sizeof eps, 1, f) == 1;
    const int64_t D = hdr[0], H = hdr[1], F = hdr[2], max_len = hdr[3], pos = hdr[4];
    const int64_t fin = hdr[5], align = hdr[6], style = hdr[7], act = hdr[8];
    const int64_t N = hdr[9], nseq = hdr[10];
    ok = ok && D > 0 && D <= 64 && H > 0 && N >= 0 && N <= 4096 && nseq >= 0 && nseq <= N;
    int64_t *off = malloc((size_t)(ok ? nseq + 1 : 1) * sizeof *off), np = 0;
    ok = ok && fread(off, sizeof *off, (size_t)(nseq + 1), f) == (size_t)(nseq + 1)
         && fread(&np, sizeof np, 1, f) == 1 && np > 0 && np < (1 << 20);
    float *x = NULL, *theta = NULL, *dy = NULL, *y = NULL, *dx = NULL, *dtheta = NULL;
    ok = ok && dc_read_f32(f, &x, N * D) && dc_read_f32(f, &theta, np) && dc_read_f32(f, &dy, N * D)
         && dc_read_f32(f, &y, N * D) && dc_read_f32(f, &dx, N * D) && dc_read_f32(f, &dtheta, np);
    if (!ok) {
        for (int i = 0; i < FIX_PER_CASE; i++)
            tap_ok(0, "case %d: fixture record unreadable", k);
        goto out;
    }
    static const char *impls[] = { "blas", "ref" };
    for (int m = 0; m < 2; m++) {
        char spec[512];
        snprintf(spec, sizeof spec, "style=%s activation=%s num_heads=%lld ffn_dim=%lld "
                 "pos_emb=%s max_len=%lld final_norm=%s pos_align=%s ln_eps=%.17g dropout=0 "
                 "impl=%s", style ? "bert" : "sasrec", act == 2 ? "gelu" : "relu",
                 (long long)H, (long long)F, pos ? "true" : "false", (long long)max_len,
                 fin ? "true" : "false", align ? "left" : "right", eps, impls[m]);
        void *inst = make(spec, D, 1);
        const int64_t have = dc_param_floats(ops, inst);
        float *gy = calloc((size_t)(N * D + 1), 4), *gdx = calloc((size_t)(N * D + 1), 4);
        float *gth = calloc((size_t)have + 1, 4);
        grm_status st = have == np ? GRM_OK : GRM_EINTERNAL;
        if (st == GRM_OK) {
            dc_scatter(ops, inst, 0, theta);
            dc_zero_grads(ops, inst);
            grm_tensor tx = dc_mat(x, N, D), ty = dc_mat(gy, N, D), tdy = dc_mat(dy, N, D);
            grm_tensor tdx = dc_mat(gdx, N, D);
            grm_dense_ctx ctx = ctx_of(off, nseq, 1, 0);
            st = ops->forward(inst, &ty, &tx, &ctx);
            if (st == GRM_OK)
                st = ops->backward(inst, &tdx, &tdy, &ctx);
            dc_gather(ops, inst, 1, gth);
        }
        char what[640];
        tap_ok(st == GRM_OK, "case %d (%s): D %lld H %lld F %lld pos_emb %lld final_norm "
               "%lld, %lld rows in %lld sequences: runs (%lld params, fixture %lld)", k, spec,
               (long long)D, (long long)H, (long long)F, (long long)pos, (long long)fin,
               (long long)N, (long long)nseq, (long long)have, (long long)np);
        snprintf(what, sizeof what, "case %d %s: y vs torch", k, impls[m]);
        tap_close_f32(gy, y, N * D, 1e-4, 1e-5, what);
        snprintf(what, sizeof what, "case %d %s: dx vs torch", k, impls[m]);
        tap_close_f32(gdx, dx, N * D, 1e-4, 1e-5, what);
        // one point for all parameter gradients, with a line per parameter
        int64_t bad = 0, at = 0;
        grm_named_tensor v;
        grm_tensor g;
        for (int i = 0; st == GRM_OK && ops->params(inst, i, &v, &g) == GRM_OK; i++) {
            const int64_t n = dc_numel(&v.tensor);
            double max_rel = 0;
            const int64_t b = dc_close_count(gth + at, dtheta + at, n, 1e-4, 1e-5, &max_rel);
            tap_diag("case %d %s: d %s: %lld of %lld outside, max rel err %.3g", k,
                     impls[m], v.name, (long long)b, (long long)n, max_rel);
            bad += b;
            at += n;
        }
        tap_ok(st == GRM_OK && bad == 0, "case %d %s: every parameter gradient vs torch "
               "(rtol 1e-4, atol 1e-5; %lld outside)", k, impls[m], (long long)bad);
        free(gy);
        free(gdx);
        free(gth);
        ops->destroy(inst);
    }
out:
    free(off);
    free(x);
    free(theta);
    free(dy);
    free(y);
    free(dx);
    free(dtheta);
}

static void test_torch(void)
{
    const char *py = dc_torch_python();
    char cmd[8192], path[4096];
    if (py == NULL) {
        tap_skip("no torch", "tests/ref/sasrec.py fixture");
        for (int i = 0; i < FIX_CASES * FIX_PER_CASE; i++)
            tap_skip("no torch", "PyTorch fixture check %d of %d", i + 1,
                     FIX_CASES * FIX_PER_CASE);
        return;
    }
    const char *src = harness_srcdir() != NULL ? harness_srcdir() : ".";
    snprintf(path, sizeof path, "%s/fixture.bin", harness_tmpdir("dense-sasrec"));
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/sasrec.py' '%s'", py, src, path);
    const int rc = system(cmd);
    FILE *f = rc == 0 ? fopen(path, "rb") : NULL;
    uint32_t hdr[3] = { 0 };
    const int ok = f != NULL && fread(hdr, sizeof hdr, 1, f) == 1 && hdr[0] == FIX_MAGIC
                   && hdr[1] == FIX_VERSION && hdr[2] == FIX_CASES;
    if (!tap_ok(ok, "tests/ref/sasrec.py wrote a readable fixture (exit %d, %u cases)", rc,
                hdr[2])) {
        for (int i = 0; i < FIX_CASES * FIX_PER_CASE; i++)
            tap_ok(0, "PyTorch fixture check %d of %d (no fixture)", i + 1,
                   FIX_CASES * FIX_PER_CASE);
    } else {
        for (int k = 0; k < FIX_CASES; k++)
            fixture_case(f, k);
    }
    if (f != NULL)
        fclose(f);
    remove(path);
}

int main(void)
{
    // kind, params, init, 2 impls, 4 gradchecks, structure, dropout, flops, errors, torch
    tap_plan(1 + 6 + 6 + 2 * 4 + 4 * 3 + 5 + 5 + 1 + 19 + 1 + FIX_CASES * FIX_PER_CASE);
    info = harness_plugin("dense-sasrec");
    ops = info->ops;
    tap_ok(info->kind == GRM_KIND_DENSE && ops->loss == NULL,
           "dense-sasrec is a dense block, not a head");
    test_params();
    test_init();
    test_impls("num_heads=3 ffn_dim=20 pos_emb=true max_len=40 final_norm=true dropout=0.3");
    test_impls("style=bert num_heads=3 ffn_dim=20 pos_emb=true max_len=40 dropout=0.3");
    test_gradcheck("num_heads=2 ffn_dim=10 pos_emb=true max_len=5 final_norm=true "
                   "dropout=0.2 impl=ref", 6);
    test_gradcheck("num_heads=1 dropout=0.1 impl=blas", 4);
    test_gradcheck("style=bert num_heads=2 ffn_dim=10 pos_emb=true max_len=5 dropout=0.2 "
                   "impl=ref", 6);
    test_gradcheck("style=bert activation=relu num_heads=1 dropout=0.1 impl=blas", 4);
    test_structure();
    test_dropout();
    test_flops();
    test_errors();
    test_torch();
    return tap_done();
}
