/* tests/test-dense-hstu.c - dense-hstu (the HSTU layer, MTGRBoost §2 eq. 1-3, with the
 * relative attention bias of TurboGR §4.1.1 / App. A): named parameters in one block,
 * forward and every gradient against central differences of a double-precision layer
 * written here (both RAB tables, dropout, both norms), cpu vs ref implementations on tile
 * edges, causality, independence of sequences, eval vs train, rows without offsets, the
 * O(L) memory of the attention (documented size functions, and the kernels run in exactly
 * that workspace), config and argument errors, and the PyTorch fixture of tests/ref/hstu.py.
 * Links hstu.c, hstu_ref.c and hstu_cpu.c to reach the kernels and size functions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dense-checks.h"
#include "harness.h"
#include "hstu.h"
#include "tap.h"

static const grm_plugin_info *info;
static const grm_dense_ops *ops;

static grm_dense_ctx make_ctx(int training, int64_t step, const int64_t *offsets,
                              int64_t nseq, const int64_t *times)
{
    grm_dense_ctx c = { 0 };
    c.struct_size = sizeof c;
    c.training = training;
    c.step = step;
    c.offsets = offsets;
    c.nseq = nseq;
    c.times = times;
    return c;
}

/* Training forward and backward of inst (grads zeroed first); y, dx, grads out. */
static grm_status run_fb(void *inst, const float *x, const float *dy, int64_t N, int64_t D,
                         const grm_dense_ctx *ctx, float *y, float *dx, float *grads)
{
    grm_tensor tx = dc_mat((float *)x, N, D), ty = dc_mat(y, N, D);
    grm_tensor tdy = dc_mat((float *)dy, N, D), tdx = dc_mat(dx, N, D);
    dc_zero_grads(ops, inst);
    grm_status st = ops->forward(inst, &ty, &tx, ctx);
    if (st == GRM_OK)
        st = ops->backward(inst, dx != NULL ? &tdx : NULL, &tdy, ctx);
    if (st == GRM_OK && grads != NULL)
        dc_gather(ops, inst, 1, grads);
    return st;
}

static const char *cfgstr(char *buf, size_t n, const char *key, int64_t v)
{
    snprintf(buf, n, "%s=%lld", key, (long long)v);
    return buf;
}

/* ---- a double-precision HSTU layer, written from the paper independently of hstu.c ---- */

typedef struct lay_d {
    int64_t D, H, dqk, dv, max_len, nb;
    int rab_pos, rab_time, input_norm, norm_len;
    double p;                   /* dropout rate; 0: off */
    uint64_t key;               /* dropout key (hstu_dropout_keep's documented formula) */
    int pos_emb;                /* x sqrt(D) + P[t] first, P [max_len, D] the last params */
} lay_d;

static int64_t lay_nparams(const lay_d *l)
{
    const int64_t P = l->H * (2 * l->dv + 2 * l->dqk), HV = l->H * l->dv;
    return P * l->D + P + l->D * HV + l->D + (l->rab_pos ? l->H * l->max_len : 0)
           + (l->rab_time ? l->H * l->nb : 0) + (l->pos_emb ? l->max_len * l->D : 0);
}

static double silu_d(double z)
{
    return z / (1 + exp(-z));
}

/* LN without affine, eps 1e-6, of x [n] into y [n]. */
static void ln_d(double *y, const double *x, int64_t n)
{
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; i++)
        m += x[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++)
        v += (x[i] - m) * (x[i] - m);
    v /= (double)n;
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] - m) / sqrt(v + 1e-6);
}

static int64_t tbucket_d(int64_t dt, int64_t nb)
{
    const double a = fabs((double)dt) < 1 ? 1 : fabs((double)dt);
    const int64_t b = (int64_t)floor(log(a) / 0.301);
    return b < nb - 1 ? b : nb - 1;
}

/* y [N, D] of the layer with parameters theta (params() order). */
static void lay_forward(const lay_d *l, const double *theta, const double *x, int64_t N,
                        const int64_t *offs, int64_t nseq, const int64_t *times, double *y)
{
    const int64_t D = l->D, H = l->H, dqk = l->dqk, dv = l->dv;
    const int64_t HV = H * dv, P = H * (2 * dv + 2 * dqk);
    const double *W1 = theta, *b1 = W1 + P * D, *W2 = b1 + P, *b2 = W2 + D * HV;
    const double *rp = b2 + D, *rt = rp + (l->rab_pos ? H * l->max_len : 0);
    const double *pe = rt + (l->rab_time ? H * l->nb : 0);
    double *xn = malloc((size_t)(N * D) * sizeof *xn), *h = malloc((size_t)(N * P) * 8);
    double *O = calloc((size_t)(N * HV), 8), *g = malloc((size_t)(N * HV) * 8);
    double *xe = malloc((size_t)(N * D) * sizeof *xe);
    // the reference's input preprocessor: x sqrt(D) + P[position from the sequence start]
    for (int64_t s = 0; s < nseq; s++)
        for (int64_t i = offs[s]; i < offs[s + 1]; i++)
            for (int64_t c = 0; c < D; c++)
                xe[i * D + c] = l->pos_emb ? x[i * D + c] * sqrt((double)D)
                                                 + pe[(i - offs[s]) * D + c]
                                           : x[i * D + c];
    x = xe;
    for (int64_t r = 0; r < N; r++) {
        if (l->input_norm)
            ln_d(xn + r * D, x + r * D, D);
        else
            memcpy(xn + r * D, x + r * D, (size_t)D * 8);
        for (int64_t o = 0; o < P; o++) {
            double z = b1[o];
            for (int64_t i = 0; i < D; i++)
                z += W1[o * D + i] * xn[r * D + i];
            h[r * P + o] = silu_d(z);
        }
    }
    for (int64_t s = 0; s < nseq; s++) {
        const int64_t o = offs[s], e = offs[s + 1];
        const double n = l->norm_len ? (double)(e - o) : (double)l->max_len;
        for (int64_t hd = 0; hd < H; hd++)
            for (int64_t i = o; i < e; i++)
                for (int64_t j = o; j <= i; j++) {
                    double sc = 0;
                    for (int64_t d = 0; d < dqk; d++)
                        sc += h[i * P + 2 * HV + hd * dqk + d]
                              * h[j * P + 2 * HV + H * dqk + hd * dqk + d];
                    if (l->rab_pos)
                        sc += rp[hd * l->max_len + (i - j < l->max_len ? i - j : l->max_len - 1)];
                    if (l->rab_time && times != NULL)
                        sc += rt[hd * l->nb + tbucket_d(times[i] - times[j], l->nb)];
                    for (int64_t d = 0; d < dv; d++)
                        O[i * HV + hd * dv + d] += silu_d(sc) / n * h[j * P + HV + hd * dv + d];
                }
    }
    for (int64_t r = 0; r < N; r++) {
        ln_d(g + r * HV, O + r * HV, HV);
        for (int64_t c = 0; c < HV; c++) {
            g[r * HV + c] *= h[r * P + c];
            if (l->p > 0)
                g[r * HV + c] *= hstu_dropout_keep(l->key, r * HV + c, l->p) ? 1 / (1 - l->p)
                                                                              : 0;
        }
        for (int64_t o = 0; o < D; o++) {
            double z = b2[o];
            for (int64_t c = 0; c < HV; c++)
                z += W2[o * HV + c] * g[r * HV + c];
            y[r * D + o] = x[r * D + o] + z;
        }
    }
    free(xe);
    free(xn);
    free(h);
    free(O);
    free(g);
}

static double lay_loss(const lay_d *l, const double *theta, const double *x, int64_t N,
                       const int64_t *offs, int64_t nseq, const int64_t *times,
                       const double *dy)
{
    double *y = malloc((size_t)(N * l->D) * sizeof *y), L = 0;
    lay_forward(l, theta, x, N, offs, nseq, times, y);
    for (int64_t i = 0; i < N * l->D; i++)
        L += y[i] * dy[i];
    free(y);
    return L;
}

/* ---- parameters, flops ---- */

static void test_params(void)
{
    void *inst = dc_make(info, harness_config(info, "num_heads=2", "dqk=3", "dv=4", "max_len=7",
                                              "time_buckets=5", NULL), 6, 1);
    static const char *names[] = { "f1.weight", "f1.bias", "f2.weight", "f2.bias", "rab_pos",
                                   "rab_time" };
    // P = 2 * (2*4 + 2*3) = 28, HV = 8
    static const int64_t shapes[6][2] = { { 28, 6 }, { 28, 0 }, { 6, 8 }, { 6, 0 },
                                          { 2, 7 }, { 2, 5 } };
    int one_block = 0;
    const int good = dc_check_params(ops, inst, 6, names, shapes, &one_block);
    tap_ok(good, "params() lists f1.weight [28,6], f1.bias [28], f2.weight [6,8], f2.bias [6], "
           "rab_pos [2,7], rab_time [2,5]");
    tap_ok(one_block, "parameters are one contiguous block, gradients follow it (STYLE.md §8)");
    grm_named_tensor v;
    grm_tensor g;
    grm_status st = ops->params(inst, 6, &v, &g);
    tap_ok(st == GRM_ENOTFOUND && strstr(grm_last_error(), "no parameter 6") != NULL,
           "params(6) past the last is GRM_ENOTFOUND (%s)", grm_last_error());
    tap_ok(ops->out_dim(inst) == 6, "out_dim is in_dim (residual)");
    // flops: projections 2 N D (P + HV); attention pairs H 2 (dqk + dv), pairs = sum L(L+1)/2
    float x[10 * 6] = { 0 }, y[10 * 6];
    uint64_t s = 5;
    dc_fill(x, 60, &s, 1);
    const int64_t offs[3] = { 0, 4, 10 };   // pairs 10 + 21 = 31
    grm_dense_ctx ctx = make_ctx(0, 0, offs, 2, NULL);
    grm_tensor tx = dc_mat(x, 10, 6), ty = dc_mat(y, 10, 6);
    st = ops->forward(inst, &ty, &tx, &ctx);
    const double proj = 2.0 * 10 * 6 * (28 + 8), attn = 31.0 * 2 * 2 * (3 + 4);
    const double f0 = ops->flops(inst, 10, 0), f1 = ops->flops(inst, 10, 1);
    tap_ok(st == GRM_OK && f0 == proj + attn && f1 == 2 * f0,
           "flops: projections + causal pairs of the last forward (%g = %g), backward twice "
           "(%g)", f0, proj + attn, f1);
    ops->destroy(inst);

    inst = dc_make(info, harness_config(info, "rab_pos=false", "rab_time=false", NULL), 6, 1);
    tap_ok(ops->params(inst, 3, &v, &g) == GRM_OK && strcmp(v.name, "f2.bias") == 0
           && ops->params(inst, 4, &v, &g) == GRM_ENOTFOUND,
           "without rab_pos and rab_time the block has 4 parameters");
    ops->destroy(inst);
}

/* ---- gradients against central differences of the double layer ---- */

/* lay_loss of fixed arguments, as a dc_loss_fn for the finite differences. */
typedef struct lay_at {
    const lay_d *l;
    const double *theta, *x;
    int64_t N;
    const int64_t *offsets;
    int64_t nseq;
    const int64_t *times;
    const double *dy;
} lay_at;

static double lay_loss_at(void *ctx)
{
    const lay_at *a = ctx;
    return lay_loss(a->l, a->theta, a->x, a->N, a->offsets, a->nseq, a->times, a->dy);
}

static void test_gradcheck(const char *what, const lay_d *l, const char *const *kv, int nkv,
                           int with_times_in_ctx)
{
    enum { N = 10, NSEQ = 3 };
    static const int64_t offs[NSEQ + 1] = { 0, 1, 4, 10 };
    // time gaps that land in several buckets, including clamped ones
    static const int64_t times[N] = { 50, 1000, 1000, 1003, 7, 8, 30, 200, 5000, 400000 };
    const int64_t D = l->D, np = lay_nparams(l);
    const void *cfg = NULL;
    grm_status st = harness_config_try(info, &cfg, kv, nkv);
    void *inst = st == GRM_OK ? dc_make(info, cfg, D, 3) : NULL;
    if (!tap_ok(inst != NULL && dc_param_floats(ops, inst) == np,
                "%s: the block has the %lld parameters of the double layer", what,
                (long long)np)) {
        if (inst == NULL) tap_diag("config: %s", grm_last_error());
        for (int i = 0; i < 4; i++)
            tap_ok(0, "%s: not run", what);
        return;
    }
    uint64_t s = 77;
    float *theta = malloc((size_t)np * 4), *grads = malloc((size_t)np * 4);
    float *want_g = malloc((size_t)np * 4);
    double *thd = malloc((size_t)np * 8);
    float x[N * 8], dy[N * 8], y[N * 8], dx[N * 8], want_y[N * 8], want_dx[N * 8];
    double xd[N * 8], dyd[N * 8], yd[N * 8];
    dc_fill(theta, np, &s, 0.7f);
    dc_fill(x, N * D, &s, 1.0f);
    dc_fill(dy, N * D, &s, 1.0f);
    dc_scatter(ops, inst, 0, theta);
    for (int64_t i = 0; i < np; i++)
        thd[i] = theta[i];
    for (int64_t i = 0; i < N * D; i++) {
        xd[i] = x[i];
        dyd[i] = dy[i];
    }
    const int64_t *tms = with_times_in_ctx ? times : NULL;
    lay_d ld = *l;
    ld.key = hstu_dropout_key(3, 9);    // the documented key of seed 3, step 9
    grm_dense_ctx ctx = make_ctx(1, 9, offs, NSEQ, tms);
    st = run_fb(inst, x, dy, N, D, &ctx, y, dx, grads);

    lay_forward(&ld, thd, xd, N, offs, NSEQ, tms, yd);
    for (int64_t i = 0; i < N * D; i++)
        want_y[i] = (float)yd[i];
    const double h = 1e-6;
    lay_at at = { &ld, thd, xd, N, offs, NSEQ, tms, dyd };
    dc_central_grad(want_g, thd, np, h, lay_loss_at, &at);
    dc_central_grad(want_dx, xd, N * D, h, lay_loss_at, &at);
    char buf[160];
    snprintf(buf, sizeof buf, "%s: forward vs the double layer", what);
    if (st != GRM_OK)
        tap_diag("run: %s", grm_last_error());
    tap_close_f32(y, want_y, N * D, 1e-4, 1e-5, buf);
    snprintf(buf, sizeof buf, "%s: every parameter gradient vs central differences", what);
    tap_close_f32(grads, want_g, np, 1e-3, 2e-5, buf);
    snprintf(buf, sizeof buf, "%s: dx vs central differences", what);
    tap_close_f32(dx, want_dx, N * D, 1e-3, 2e-5, buf);
    // the RAB tables are the tail of theta; report them on their own (a case without
    // them has one check fewer)
    const int64_t nrab = (l->rab_pos ? l->H * l->max_len : 0) + (l->rab_time ? l->H * l->nb : 0);
    const int64_t npos = l->pos_emb ? l->max_len * D : 0;
    if (nrab > 0) {
        snprintf(buf, sizeof buf, "%s: RAB table gradients vs central differences", what);
        tap_close_f32(grads + np - npos - nrab, want_g + np - npos - nrab, nrab, 1e-3, 2e-5,
                      buf);
    }
    if (npos > 0) {   // rows past the longest sequence (6) get no gradient: 0 both sides
        snprintf(buf, sizeof buf, "%s: position table gradients vs central differences", what);
        tap_close_f32(grads + np - npos, want_g + np - npos, npos, 1e-3, 2e-5, buf);
    }
    free(theta);
    free(grads);
    free(want_g);
    free(thd);
    ops->destroy(inst);
}

/* pos_emb: the table's init (the reference's truncated normal), its gradient when the
 * caller asks for no dx, and a sequence longer than its positions refused. */
static void test_pos_emb(void)
{
    enum { D = 16, L = 50 };
    void *inst = dc_make(info, harness_config(info, "num_heads=1", "dqk=4", "dv=4",
                                              "max_len=50", "pos_emb=true", NULL), D, 11);
    grm_named_tensor v = { 0 };
    grm_tensor g;
    const int n = inst != NULL ? dc_param_count(ops, inst) : 0;
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        found = ops->params(inst, i, &v, &g) == GRM_OK && strcmp(v.name, "pos_emb.weight") == 0;
    double sum = 0, sq = 0, worst = 0;
    if (found)
        for (int64_t e = 0; e < L * D; e++) {
            const double w = ((const float *)v.tensor.data)[e];
            sum += w;
            sq += w * w;
            if (fabs(w) > worst)
                worst = fabs(w);
        }
    const double sd = sqrt(sq / (L * D) - (sum / (L * D)) * (sum / (L * D)));
    // a normal truncated to (-2, 2) has sd 0.880 of the untruncated one's
    tap_ok(found && v.tensor.shape[0] == L && v.tensor.shape[1] == D
           && worst < 2 * sqrt(1.0 / D) && fabs(sd / (0.880 * sqrt(1.0 / D)) - 1) < 0.06,
           "pos_emb.weight [50, 16]: truncated N(0, 1/D) as the reference (sd %.4f, expected "
           "%.4f; largest |w| %.4f < 2 sqrt(1/D) = %.4f)", sd, 0.880 * sqrt(1.0 / D), worst,
           2 * sqrt(1.0 / D));

    enum { N = 7 };
    const int64_t offs[3] = { 0, 3, 7 };
    float x[N * D], dy[N * D], y[N * D], dx[N * D];
    uint64_t s = 3;
    dc_fill(x, N * D, &s, 1.0f);
    dc_fill(dy, N * D, &s, 1.0f);
    const int64_t np = dc_param_floats(ops, inst);
    float *ga = malloc((size_t)np * sizeof *ga), *gb = malloc((size_t)np * sizeof *gb);
    grm_dense_ctx ctx = make_ctx(1, 4, offs, 2, NULL);
    grm_status st = run_fb(inst, x, dy, N, D, &ctx, y, dx, ga);
    if (st == GRM_OK)
        st = run_fb(inst, x, dy, N, D, &ctx, y, NULL, gb);
    int same = st == GRM_OK, nonzero = 0;
    for (int64_t i = 0; same && i < np; i++) {
        same = ga[i] == gb[i];
        nonzero += ga[i] != 0;
    }
    tap_ok(same && nonzero > 0, "pos_emb: backward without dx gives the same gradients, the "
           "position table's included (%s)", st == GRM_OK ? "ok" : grm_last_error());
    free(ga);
    free(gb);
    ops->destroy(inst);

    inst = dc_make(info, harness_config(info, "num_heads=1", "dqk=4", "dv=4", "max_len=3",
                                        "pos_emb=true", NULL), D, 11);
    grm_tensor tx = dc_mat(x, N, D), ty = dc_mat(y, N, D);
    st = ops->forward(inst, &ty, &tx, &ctx);
    tap_ok(st == GRM_EINVAL && strstr(grm_last_error(), "sequence 1 has 4 rows, more than the "
                                      "max_len = 3 positions of pos_emb") != NULL,
           "pos_emb: a sequence longer than max_len is refused, naming both (%s)",
           grm_last_error());
    ops->destroy(inst);
}

static double sample_sd(const float *w, int64_t n)
{
    double sum = 0, sq = 0;
    for (int64_t e = 0; e < n; e++) {
        sum += w[e];
        sq += (double)w[e] * w[e];
    }
    return n > 0 ? sqrt(sq / (double)n - (sum / (double)n) * (sum / (double)n)) : 0;
}

/* init: f1 from N(0, init_std^2) (the reference's _uvqk) with init = normal, Xavier uniform
 * by default; f2 is Xavier uniform and the same draw either way. */
static void test_init(void)
{
    enum { D = 50 };   /* ml100k-hstu-ref's block: P = 200 */
    void *xa = dc_make(info, harness_config(info, "num_heads=1", "dqk=50", "dv=50", NULL), D,
                       5);
    void *no = dc_make(info, harness_config(info, "num_heads=1", "dqk=50", "dv=50",
                                            "init=normal", NULL), D, 5);
    void *n3 = dc_make(info, harness_config(info, "num_heads=1", "dqk=50", "dv=50",
                                            "init=normal", "init_std=0.3", NULL), D, 5);
    // f1 [200, 50] and f2 [50, 50] (dc_param bails out when one is missing); every block
    // holds the same 13,038 floats: W1, b1, W2, b2, rab_pos [256], rab_time [32]
    enum { N1 = 200 * D, N2 = D * D, NP = N1 + 200 + N2 + D + 256 + 32 };
    const float *w1x = dc_param(ops, xa, "f1.weight", 0), *w1n = dc_param(ops, no, "f1.weight", 0);
    const float *w13 = dc_param(ops, n3, "f1.weight", 0);
    const float *w2x = dc_param(ops, xa, "f2.weight", 0), *w2n = dc_param(ops, no, "f2.weight", 0);
    const int sized = dc_param_floats(ops, xa) == NP && dc_param_floats(ops, no) == NP
                      && dc_param_floats(ops, n3) == NP;
    const double xav = sqrt(6.0 / (D + 200)) / sqrt(3.0);   /* sd of U(-a, a) */
    const double sx = sample_sd(w1x, N1), sn = sample_sd(w1n, N1), s3 = sample_sd(w13, N1);
    tap_ok(sized && fabs(sx / xav - 1) < 0.03,
           "init = xavier_uniform (default): f1.weight [200, 50] has sd %.4f, expected %.4f",
           sx, xav);
    tap_ok(sized && fabs(sn / 0.02 - 1) < 0.03 && fabs(s3 / 0.3 - 1) < 0.03,
           "init = normal: f1.weight has sd %.4f (init_std 0.02) and %.4f (0.3)", sn, s3);
    int same = 1;
    for (int64_t e = 0; same && e < N2; e++)
        same = w2x[e] == w2n[e];
    tap_ok(same, "init = normal: f2.weight is the same Xavier draw as with the default");
    ops->destroy(xa);
    ops->destroy(no);
    ops->destroy(n3);
}

/* offs [ns + 1] from the sequence lengths; returns N random timestamps in [0, span)
 * (unordered: only |dt| matters), malloc'd, drawn from the stream *s. */
static int64_t *jagged_times(const int64_t *lens, int ns, int64_t *offs, uint64_t *s,
                             int64_t span)
{
    offs[0] = 0;
    for (int i = 0; i < ns; i++)
        offs[i + 1] = offs[i] + lens[i];
    int64_t *times = malloc((size_t)offs[ns] * sizeof *times);
    for (int64_t i = 0; i < offs[ns]; i++)
        times[i] = (int64_t)(harness_rand(s) % (uint64_t)span);
    return times;
}

/* ---- cpu vs ref ---- */

static void test_impls(void)
{
    // lengths on both sides of the tile edges (HSTU_TILE = 64)
    static const int64_t lens[] = { 1, 63, 64, 65, 130, 7 };
    enum { NS = 6, D = 12 };
    int64_t offs[NS + 1];
    uint64_t s = 31;
    int64_t *times = jagged_times(lens, NS, offs, &s, 100000);
    const int64_t N = offs[NS];
    const char *common[] = { "num_heads=3", "dqk=5", "dv=4", "max_len=50", "time_buckets=12",
                             "dropout=0.2" };
    const void *cfg_cpu = harness_config(info, common[0], common[1], common[2], common[3],
                                         common[4], common[5], "impl=cpu", NULL);
    const void *cfg_ref = harness_config(info, common[0], common[1], common[2], common[3],
                                         common[4], common[5], "impl=ref", NULL);
    void *a = dc_make(info, cfg_cpu, D, 9), *b = dc_make(info, cfg_ref, D, 9);
    const int64_t np = dc_param_floats(ops, a);
    float *theta = malloc((size_t)np * 4), *ga = malloc((size_t)np * 4);
    float *gb = malloc((size_t)np * 4);
    float *x = malloc((size_t)(N * D) * 4), *dy = malloc((size_t)(N * D) * 4);
    float *ya = malloc((size_t)(N * D) * 4), *yb = malloc((size_t)(N * D) * 4);
    float *dxa = malloc((size_t)(N * D) * 4), *dxb = malloc((size_t)(N * D) * 4);
    dc_fill(theta, np, &s, 0.5f);
    dc_fill(x, N * D, &s, 1.0f);
    dc_fill(dy, N * D, &s, 1.0f);
    dc_scatter(ops, a, 0, theta);
    dc_scatter(ops, b, 0, theta);
    grm_dense_ctx ctx = make_ctx(1, 4, offs, NS, times);
    grm_status st = run_fb(a, x, dy, N, D, &ctx, ya, dxa, ga);
    st |= run_fb(b, x, dy, N, D, &ctx, yb, dxb, gb);
    tap_ok(st == GRM_OK, "cpu and ref run lengths 1, 63, 64, 65, 130, 7 with times and "
           "dropout");
    tap_close_f32(ya, yb, N * D, 1e-4, 1e-5, "cpu y vs ref y");
    tap_close_f32(dxa, dxb, N * D, 1e-4, 1e-5, "cpu dx vs ref dx");
    tap_close_f32(ga, gb, np, 1e-4, 1e-5, "cpu parameter gradients vs ref");
    // the same problem through the attention kernels alone, on their ws contract
    free(theta);
    free(ga);
    free(gb);
    free(x);
    free(dy);
    free(ya);
    free(yb);
    free(dxa);
    free(dxb);
    free(times);
    ops->destroy(a);
    ops->destroy(b);
}

/* ---- a backend with an attention op (ABI 1.7) ---- */

static int fake_tag, fake_fwd_calls, fake_bwd_calls, fake_ws_calls, fake_ctx_ok = 1;

static size_t fake_ws(void *ctx, int64_t rows, int64_t nseq, int64_t H, int64_t nrab)
{
    fake_ws_calls++;
    fake_ctx_ok &= ctx == &fake_tag;
    return hstu_attn_ws_bytes(rows, nseq, H, nrab);
}

static grm_status fake_fwd(void *ctx, float *out, const grm_hstu_attn_args *a, void *ws)
{
    fake_fwd_calls++;
    fake_ctx_ok &= ctx == &fake_tag;
    return hstu_attn_fwd_ref(NULL, out, a, ws);
}

static grm_status fake_bwd(void *ctx, float *dq, float *dk, float *dv, float *d_rab_pos,
                           float *d_rab_time, const float *dout, const grm_hstu_attn_args *a,
                           void *ws)
{
    fake_bwd_calls++;
    fake_ctx_ok &= ctx == &fake_tag;
    return hstu_attn_bwd_ref(NULL, dq, dk, dv, d_rab_pos, d_rab_time, dout, a, ws);
}

/* The block runs its attention on the backend's op when the backend has one (as the cuda
 * backend does, kernels/hstu_attn.cu), with the backend's context and workspace size, and
 * keeps its own kernels for impl = ref and on a backend without one. The fake backend is
 * the cpu one with the reference attention as its op. */
static void test_backend_attention(void)
{
    static const int64_t lens[] = { 70, 3, 1 };
    enum { NS = 3, D = 8 };
    int64_t offs[NS + 1];
    uint64_t s = 77;
    int64_t *times = jagged_times(lens, NS, offs, &s, 5000);
    const int64_t N = offs[NS];
    const void *cfg_cpu = harness_config(info, "num_heads=2", "dqk=4", "dv=3", "max_len=40",
                                         "time_buckets=9", "impl=cpu", NULL);
    const void *cfg_ref = harness_config(info, "num_heads=2", "dqk=4", "dv=3", "max_len=40",
                                         "time_buckets=9", "impl=ref", NULL);
    grm_backend_iface iface = grm__backend_cpu_iface;
    iface.hstu_attn_ws_bytes = fake_ws;
    iface.hstu_attn_fwd = fake_fwd;
    iface.hstu_attn_bwd = fake_bwd;
    const grm_backend be = { &iface, &fake_tag, { GRM_DEVICE_CPU, 0 } };
    grm__host_set_backend(&be);
    void *on_be = dc_make(info, cfg_cpu, D, 3), *own_ref = dc_make(info, cfg_ref, D, 3);
    grm__host_set_backend(NULL);
    void *own_cpu = dc_make(info, cfg_cpu, D, 3);
    const int64_t np = dc_param_floats(ops, on_be);
    float *theta = malloc((size_t)np * 4), *g[3], *y[3], *dx[3];
    float *x = malloc((size_t)(N * D) * 4), *dy = malloc((size_t)(N * D) * 4);
    dc_fill(theta, np, &s, 0.5f);
    dc_fill(x, N * D, &s, 1.0f);
    dc_fill(dy, N * D, &s, 1.0f);
    void *inst[3] = { on_be, own_ref, own_cpu };
    grm_dense_ctx ctx = make_ctx(1, 2, offs, NS, times);
    grm_status st = GRM_OK;
    int calls_ok = 1;
    for (int i = 0; i < 3; i++) {
        g[i] = malloc((size_t)np * 4);
        y[i] = malloc((size_t)(N * D) * 4);
        dx[i] = malloc((size_t)(N * D) * 4);
        dc_scatter(ops, inst[i], 0, theta);
        st |= run_fb(inst[i], x, dy, N, D, &ctx, y[i], dx[i], g[i]);
        if (i == 0)
            calls_ok = fake_fwd_calls == 1 && fake_bwd_calls == 1 && fake_ws_calls >= 1;
    }
    tap_ok(st == GRM_OK && calls_ok && fake_ctx_ok && fake_fwd_calls == 1
               && fake_bwd_calls == 1,
           "a backend's attention op runs the block's attention with the backend's context "
           "(fwd %d, bwd %d, ws %d calls); impl = ref and a backend without one keep the "
           "block's kernels", fake_fwd_calls, fake_bwd_calls, fake_ws_calls);
    tap_close_f32(y[0], y[1], N * D, 1e-4, 1e-5, "attention on the backend: y vs impl = ref");
    tap_close_f32(g[0], g[2], np, 1e-4, 1e-5,
                  "attention on the backend: parameter gradients vs the block's cpu kernels");
    tap_close_f32(dx[0], dx[2], N * D, 1e-4, 1e-5,
                  "attention on the backend: dx vs the block's cpu kernels");
    for (int i = 0; i < 3; i++) {
        free(g[i]);
        free(y[i]);
        free(dx[i]);
        ops->destroy(inst[i]);
    }
    free(theta);
    free(x);
    free(dy);
    free(times);
}

/* ---- causality, independence, eval, no offsets ---- */

static void test_structure(void)
{
    enum { D = 8 };
    static const int64_t offs[4] = { 0, 5, 75, 78 };   // 5, 70 (two tiles), 3
    const int64_t N = 78;
    void *inst = dc_make(info, harness_config(info, "num_heads=2", "dqk=4", "dv=4", "max_len=32",
                                              "time_buckets=8", NULL), D, 2);
    int64_t times[78];
    for (int64_t i = 0; i < N; i++)
        times[i] = 1000 + 37 * i;
    uint64_t s = 8;
    float x[78 * D], x2[78 * D], y[78 * D], y2[78 * D];
    dc_fill(x, N * D, &s, 1.0f);
    memcpy(x2, x, sizeof x);
    const int64_t j = 5 + 40;               // token 40 of sequence 1
    for (int c = 0; c < D; c++)     // not a constant shift, which the input norm removes
        x2[j * D + c] += c % 2 ? 0.5f : -0.25f * (float)c;
    grm_dense_ctx ctx = make_ctx(0, 0, offs, 3, times);
    grm_tensor tx = dc_mat(x, N, D), tx2 = dc_mat(x2, N, D);
    grm_tensor ty = dc_mat(y, N, D), ty2 = dc_mat(y2, N, D);
    grm_status st = ops->forward(inst, &ty, &tx, &ctx);
    st |= ops->forward(inst, &ty2, &tx2, &ctx);
    int before = 1, after = 1, others = 1;
    for (int64_t r = 0; r < N; r++)
        for (int c = 0; c < D; c++) {
            const int same = y[r * D + c] == y2[r * D + c];
            if (r >= 5 && r < j)
                before &= same;
            else if (r >= j && r < 75)
                after &= !same || c > 0;    // each later row changes (checked on column 0)
            else
                others &= same;
        }
    tap_ok(st == GRM_OK && before, "causal: changing token 40 leaves tokens 0..39 of its "
           "sequence bit-identical");
    tap_ok(after, "causal: tokens 40..69 of that sequence change");
    tap_ok(others, "sequences are independent: the other sequences are bit-identical");

    // each sequence alone gives the rows it gives in the batch
    float alone[78 * D];
    int ok = 1;
    for (int q = 0; q < 3; q++) {
        const int64_t o = offs[q], L = offs[q + 1] - offs[q];
        const int64_t one[2] = { 0, L };
        grm_dense_ctx c1 = make_ctx(0, 0, one, 1, times + o);
        grm_tensor a = dc_mat(x + o * D, L, D), b = dc_mat(alone + o * D, L, D);
        ok &= ops->forward(inst, &b, &a, &c1) == GRM_OK;
    }
    tap_ok(ok, "each sequence runs alone");
    tap_close_f32(alone, y, N * D, 1e-5, 1e-6, "a sequence alone vs in the batch");

    // no offsets: every row is its own length-1 sequence
    int64_t unit[79];
    for (int64_t i = 0; i <= N; i++)
        unit[i] = i;
    grm_dense_ctx cu = make_ctx(0, 0, unit, N, times), cn = make_ctx(0, 0, NULL, 0, times);
    st = ops->forward(inst, &ty, &tx, &cu);
    st |= ops->forward(inst, &ty2, &tx, &cn);
    tap_ok(st == GRM_OK && memcmp(y, y2, sizeof y) == 0,
           "ctx->offsets NULL: each row is a length-1 sequence");
    st = ops->forward(inst, &ty2, &tx, NULL);
    tap_ok(st == GRM_OK, "ctx NULL: forward runs (rows as length-1 sequences, eval)");

    // a 1.1 host's ctx (no times field): the time bias is absent, as with times NULL
    grm_dense_ctx old = make_ctx(0, 0, offs, 3, times), none = make_ctx(0, 0, offs, 3, NULL);
    old.struct_size = offsetof(grm_dense_ctx, times);
    st = ops->forward(inst, &ty, &tx, &old);
    st |= ops->forward(inst, &ty2, &tx, &none);
    tap_ok(st == GRM_OK && memcmp(y, y2, sizeof y) == 0,
           "a ctx without the times field (struct_size of 1.1) works as times NULL");
    ops->destroy(inst);
}

static void test_eval_dropout(void)
{
    enum { D = 8, N = 20 };
    static const int64_t offs[3] = { 0, 12, 20 };
    void *drop = dc_make(info, harness_config(info, "dropout=0.5", "num_heads=2", "dqk=4", "dv=4",
                                              NULL), D, 4);
    void *nodrop = dc_make(info, harness_config(info, "dropout=0", "num_heads=2", "dqk=4", "dv=4",
                                                NULL), D, 4);
    uint64_t s = 19;
    float x[N * D], ye[N * D], yt[N * D], y0[N * D], y1[N * D], y2[N * D];
    dc_fill(x, N * D, &s, 1.0f);
    grm_tensor tx = dc_mat(x, N, D);
    grm_tensor te = dc_mat(ye, N, D), tt = dc_mat(yt, N, D), t0 = dc_mat(y0, N, D);
    grm_tensor t1 = dc_mat(y1, N, D), t2 = dc_mat(y2, N, D);
    grm_dense_ctx ev = make_ctx(0, 3, offs, 2, NULL), tr = make_ctx(1, 3, offs, 2, NULL);
    grm_dense_ctx tr4 = make_ctx(1, 4, offs, 2, NULL);
    grm_status st = ops->forward(drop, &te, &tx, &ev);
    st |= ops->forward(nodrop, &t0, &tx, &tr);
    tap_ok(st == GRM_OK && memcmp(ye, y0, sizeof ye) == 0,
           "eval forward with dropout 0.5 equals the train forward without dropout");
    float dy[N * D];
    dc_fill(dy, N * D, &s, 1.0f);
    grm_tensor tdy = dc_mat(dy, N, D);
    st = ops->backward(drop, NULL, &tdy, &ev);
    tap_ok(st == GRM_EINVAL && strstr(grm_last_error(), "no training forward") != NULL,
           "backward after an eval forward is refused (%s)", grm_last_error());
    st = ops->forward(drop, &tt, &tx, &tr);
    st |= ops->forward(drop, &t1, &tx, &tr);
    st |= ops->forward(drop, &t2, &tx, &tr4);
    tap_ok(st == GRM_OK && memcmp(yt, ye, sizeof yt) != 0 && memcmp(yt, y1, sizeof yt) == 0
           && memcmp(yt, y2, sizeof yt) != 0,
           "train dropout: differs from eval, same step gives the same mask, another step "
           "another");
    ops->destroy(drop);
    ops->destroy(nodrop);
}

/* input_dropout: off in evaluation; in training a fixed mask per step, so dx matches
 * central differences of sum(y * dy), and masked inputs get exactly zero gradient. */
static void test_input_dropout(void)
{
    enum { D = 8, N = 12 };
    static const int64_t offs[3] = { 0, 7, 12 };
    void *a = dc_make(info, harness_config(info, "input_dropout=0.4", "num_heads=2", "dqk=4",
                                           "dv=4", NULL), D, 9);
    void *b = dc_make(info, harness_config(info, "num_heads=2", "dqk=4", "dv=4", NULL), D, 9);
    uint64_t s = 23;
    float x[N * D], dy[N * D], ya[N * D], yb[N * D], dx[N * D], yp[N * D], ym[N * D];
    dc_fill(x, N * D, &s, 1.0f);
    dc_fill(dy, N * D, &s, 1.0f);
    grm_tensor tx = dc_mat(x, N, D), ta = dc_mat(ya, N, D), tb = dc_mat(yb, N, D);
    grm_dense_ctx ev = make_ctx(0, 5, offs, 2, NULL), tr = make_ctx(1, 5, offs, 2, NULL);
    grm_status st = ops->forward(a, &ta, &tx, &ev);
    st |= ops->forward(b, &tb, &tx, &ev);
    tap_ok(st == GRM_OK && memcmp(ya, yb, sizeof ya) == 0,
           "input_dropout is off in evaluation (same output as input_dropout = 0)");
    st = run_fb(a, x, dy, N, D, &tr, ya, dx, NULL);
    int zeros = 0, bad = 0;
    double worst = 0;
    for (int64_t e = 0; e < N * D; e++) {
        const float keep = x[e];
        double f[2];
        for (int k = 0; k < 2; k++) {
            x[e] = keep + (k ? -1e-2f : 1e-2f);
            grm_tensor ty = dc_mat(k ? ym : yp, N, D);
            st |= ops->forward(a, &ty, &tx, &tr);
            f[k] = 0;
            for (int64_t i = 0; i < N * D; i++) f[k] += (double)(k ? ym : yp)[i] * dy[i];
        }
        x[e] = keep;
        const double fd = (f[0] - f[1]) / 2e-2;
        zeros += dx[e] == 0.0f;
        const double err = fabs(fd - dx[e]) / (fabs(fd) + fabs(dx[e]) + 1e-2);
        if (err > worst) worst = err;
        bad += err > 2e-2;
    }
    tap_ok(st == GRM_OK && bad == 0 && zeros > 10 && zeros < N * D / 2 + 20,
           "input_dropout 0.4: dx matches central differences (worst %.2g), %d of %d inputs "
           "dropped with zero gradient", worst, zeros, N * D);
    ops->destroy(a);
    ops->destroy(b);
}

/* ---- memory: O(L), never O(L^2) ---- */

static void test_memory(void)
{
    const hstu_config *cfg = harness_config(info, "num_heads=2", "dqk=16", "dv=16",
                                            "max_len=4096", "time_buckets=32", NULL);
    const int64_t D = 32;
    const size_t b256 = hstu_cache_bytes(cfg, D, 256, 1);
    const size_t b512 = hstu_cache_bytes(cfg, D, 512, 1);
    const size_t b4096 = hstu_cache_bytes(cfg, D, 4096, 1);
    const size_t fixed = hstu_cache_bytes(cfg, D, 0, 1);
    tap_diag("layer bytes: L=256 %zu, L=512 %zu, L=4096 %zu (fixed part %zu)", b256, b512,
             b4096, fixed);
    const double ratio = (double)b4096 / (double)b256;
    const double ratio_l = (double)(b4096 - fixed) / (double)(b256 - fixed);
    tap_ok(ratio <= 16.5 && ratio_l > 15.5 && ratio_l < 16.5,
           "layer memory grows as L: L=4096 / L=256 = %.2f in all (%.2f for the L-dependent "
           "part; an L x L buffer would give ~256)", ratio, ratio_l);

    // the cpu attention kernels, forward and backward, in exactly the documented
    // workspace (ASan builds catch any write past it) for one sequence of L = 4096
    const int64_t H = 1, dqk = 8, dv = 8, ld = 2 * dqk + dv, nb = 16, ml = 512;
    size_t ws_bytes[2];
    int ok = 1;
    for (int k = 0; k < 2; k++) {
        const int64_t L = k == 0 ? 256 : 4096;
        const int64_t offs[2] = { 0, L };
        ws_bytes[k] = hstu_attn_ws_bytes(L, 1, H, ml + nb);
        float *qkv = malloc((size_t)(L * ld) * 4), *d = calloc((size_t)(L * ld), 4);
        float *out = malloc((size_t)(L * H * dv) * 4), *rab = malloc((size_t)(ml + nb) * 4);
        float *drab = calloc((size_t)(ml + nb), 4);
        int64_t *times = malloc((size_t)L * 8), thr[16];
        void *ws = malloc(ws_bytes[k]);
        uint64_t s = 3;
        dc_fill(qkv, L * ld, &s, 1.0f);
        dc_fill(rab, ml + nb, &s, 1.0f);
        for (int64_t i = 0; i < L; i++)
            times[i] = 10 * i;
        hstu_time_thresholds(thr, nb);
        grm_hstu_attn_args a = { .host = harness_host(), .nseq = 1, .offsets = offs,
                             .times = times, .H = H, .dqk = dqk, .dv = dv, .ld = ld,
                             .q = qkv, .k = qkv + dqk, .v = qkv + 2 * dqk, .rab_pos = rab,
                             .rab_time = rab + ml, .max_len = ml, .nbuckets = nb,
                             .time_thr = thr, .norm = HSTU_NORM_LENGTH };
        ok &= hstu_attn_fwd_cpu(NULL, out, &a, ws) == GRM_OK;
        ok &= hstu_attn_bwd_cpu(NULL, d, d + dqk, d + 2 * dqk, drab, drab + ml, out, &a, ws)
              == GRM_OK;
        for (int64_t i = 0; i < L * ld; i++)
            ok &= isfinite(d[i]);
        free(qkv);
        free(d);
        free(out);
        free(rab);
        free(drab);
        free(times);
        free(ws);
    }
    tap_ok(ok, "cpu attention forward and backward of L = 256 and 4096 run in the documented "
           "workspace");
    tap_ok(ws_bytes[1] < ws_bytes[0] + 2 * (4096 / HSTU_TILE) * sizeof(hstu_item),
           "attention workspace: %zu bytes at L=256, %zu at L=4096 (item lists only grow; "
           "an L x L score matrix would be %zu bytes)", ws_bytes[0], ws_bytes[1],
           (size_t)4096 * 4096 * 4);
}

/* ---- errors ---- */

static int err_has(grm_status st, grm_status want, const char *sub)
{
    return st == want && strstr(grm_last_error(), sub) != NULL;
}

static void test_errors(void)
{
    const void *cfg = NULL;
    const char *kv0[] = { "num_heads=0" };
    grm_status st = harness_config_try(info, &cfg, kv0, 1);
    tap_ok(st != GRM_OK && strstr(grm_last_error(), "num_heads") != NULL,
           "config num_heads=0 is refused (%s)", grm_last_error());
    const char *kv1[] = { "time_buckets=1000" };
    st = harness_config_try(info, &cfg, kv1, 1);
    tap_ok(st != GRM_OK && strstr(grm_last_error(), "time_buckets") != NULL,
           "config time_buckets=1000 is refused (%s)", grm_last_error());
    const char *kv2[] = { "attn_norm=sqrt" };
    st = harness_config_try(info, &cfg, kv2, 1);
    tap_ok(st != GRM_OK && strstr(grm_last_error(), "attn_norm") != NULL,
           "config attn_norm=sqrt is refused (%s)", grm_last_error());

    // the plugin's own checks, for a config struct that bypassed the host's
    hstu_config c = *(const hstu_config *)harness_config(info, NULL);
    void *inst = NULL;
    c.num_heads = 0;
    st = ops->create(&c, 8, 1, &inst);
    tap_ok(err_has(st, GRM_EINVAL, "dense-hstu: num_heads: 0 out of range") && inst == NULL,
           "create refuses num_heads 0 (%s)", grm_last_error());
    c = *(const hstu_config *)harness_config(info, NULL);
    c.dv = 40000;
    c.dqk = 40000;
    st = ops->create(&c, 8, 1, &inst);
    tap_ok(err_has(st, GRM_EINVAL, "too large"), "create refuses a projection too wide (%s)",
           grm_last_error());
    c = *(const hstu_config *)harness_config(info, NULL);
    st = ops->create(&c, 0, 1, &inst);
    tap_ok(err_has(st, GRM_EINVAL, "in_dim 0 out of range"), "create refuses in_dim 0 (%s)",
           grm_last_error());
    st = ops->create(NULL, 8, 1, &inst);
    tap_ok(err_has(st, GRM_EINVAL, "config and inst"), "create refuses a NULL config");

    const int64_t live0 = grm__alloc_live();
    inst = dc_make(info, &c, 8, 1);
    float x[4 * 8] = { 0 }, y[4 * 8], dy[4 * 8] = { 0 };
    grm_tensor tx = dc_mat(x, 4, 7), ty = dc_mat(y, 4, 8);
    const int64_t offs[3] = { 0, 2, 4 }, bad_end[3] = { 0, 2, 3 }, bad_start[3] = { 1, 2, 4 };
    const int64_t down[3] = { 0, 3, 2 };
    grm_dense_ctx ctx = make_ctx(1, 0, offs, 2, NULL);
    st = ops->forward(inst, &ty, &tx, &ctx);
    tap_ok(err_has(st, GRM_EINVAL, "x has 7 columns, expected 8"),
           "forward refuses x with in_dim 7 for an 8-feature block (%s)", grm_last_error());
    tx = dc_mat(x, 4, 8);
    grm_tensor ty3 = dc_mat(y, 3, 8);
    st = ops->forward(inst, &ty3, &tx, &ctx);
    tap_ok(err_has(st, GRM_EINVAL, "y has 3 rows, expected 4"), "forward refuses y of 3 rows");
    ctx.offsets = bad_end;
    st = ops->forward(inst, &ty, &tx, &ctx);
    tap_ok(err_has(st, GRM_EINVAL, "ctx->offsets[2] = 3, expected the 4 rows"),
           "forward refuses offsets that do not end at N (%s)", grm_last_error());
    ctx.offsets = bad_start;
    st = ops->forward(inst, &ty, &tx, &ctx);
    tap_ok(err_has(st, GRM_EINVAL, "must start at 0"), "forward refuses offsets[0] = 1");
    ctx.offsets = down;
    st = ops->forward(inst, &ty, &tx, &ctx);
    tap_ok(err_has(st, GRM_EINVAL, "not decrease"), "forward refuses decreasing offsets");
    ctx.offsets = offs;
    ctx.nseq = -1;
    st = ops->forward(inst, &ty, &tx, &ctx);
    tap_ok(err_has(st, GRM_EINVAL, "nseq -1 is negative"), "forward refuses nseq -1");
    ctx.nseq = 2;
    grm_tensor tdy = dc_mat(dy, 4, 8);
    st = ops->backward(inst, NULL, &tdy, &ctx);
    tap_ok(err_has(st, GRM_EINVAL, "no training forward"),
           "backward after a failed forward is refused");
    st = ops->forward(inst, &ty, &tx, &ctx);
    grm_tensor tdy3 = dc_mat(dy, 3, 8);
    st |= ops->backward(inst, NULL, &tdy3, &ctx);
    tap_ok(err_has(st, GRM_EINVAL, "dy has 3 rows, the last forward had 4"),
           "backward refuses dy of another row count (%s)", grm_last_error());
    grm_tensor bad = tx;
    bad.dtype = GRM_DTYPE_F16;
    st = ops->forward(inst, &ty, &bad, &ctx);
    tap_ok(err_has(st, GRM_ENOTSUP, "2-d f32 CPU tensor"), "forward refuses an f16 x");
    const int64_t held = grm__alloc_live() - live0;
    ops->destroy(inst);
    ops->destroy(NULL);
    tap_ok(held > 0 && grm__alloc_live() == live0,
           "destroy frees the %lld host allocations of the block; destroy(NULL) is a no-op",
           (long long)held);
}

/* ---- PyTorch fixture ---- */

enum { FIX_MAGIC = 0x55545348, FIX_VERSION = 1, FIX_CASES = 5, FIX_POINTS_PER = 10 };

static void torch_case(FILE *f, int idx)
{
    int64_t hdr[16];
    int ok = fread(hdr, sizeof hdr, 1, f) == 1;
    const int64_t D = hdr[0], H = hdr[1], dqk = hdr[2], dv = hdr[3], nseq = hdr[10];
    const int64_t N = hdr[11], has_times = hdr[12], np = hdr[13];
    ok = ok && D > 0 && D <= 64 && nseq > 0 && nseq < 100 && N > 0 && N < 10000 && np > 0;
    int64_t *offs = NULL, *times = NULL;
    float *x = NULL, *theta = NULL, *dy = NULL, *y = NULL, *dx = NULL, *dtheta = NULL;
    if (ok) {
        offs = malloc((size_t)(nseq + 1) * 8);
        ok = fread(offs, 8, (size_t)(nseq + 1), f) == (size_t)(nseq + 1);
        if (ok && has_times) {
            times = malloc((size_t)N * 8);
            ok = fread(times, 8, (size_t)N, f) == (size_t)N;
        }
        ok = ok && dc_read_f32(f, &x, N * D) && dc_read_f32(f, &theta, np)
             && dc_read_f32(f, &dy, N * D) && dc_read_f32(f, &y, N * D)
             && dc_read_f32(f, &dx, N * D) && dc_read_f32(f, &dtheta, np);
    }
    char desc[200];
    snprintf(desc, sizeof desc, "torch case %d (D %lld, H %lld, dqk %lld, dv %lld, rab_pos %lld, "
             "rab_time %lld, times %lld, attn_norm %lld, %lld seqs, N %lld)", idx,
             (long long)D, (long long)H, (long long)dqk, (long long)dv, (long long)hdr[4],
             (long long)hdr[5], (long long)has_times, (long long)hdr[9], (long long)nseq,
             (long long)N);
    if (!tap_ok(ok, "%s: fixture readable", desc)) {
        for (int i = 1; i < FIX_POINTS_PER; i++)
            tap_ok(0, "%s: not run", desc);
        goto done;
    }
    char b[11][48];
    for (int impl = 0; impl < 2; impl++) {
        const void *cfg = harness_config(info, cfgstr(b[0], 48, "num_heads", H),
                                         cfgstr(b[1], 48, "dqk", dqk), cfgstr(b[2], 48, "dv", dv),
                                         hdr[4] ? "rab_pos=true" : "rab_pos=false",
                                         hdr[5] ? "rab_time=true" : "rab_time=false",
                                         cfgstr(b[3], 48, "max_len", hdr[6]),
                                         cfgstr(b[4], 48, "time_buckets", hdr[7]),
                                         hdr[8] ? "input_norm=true" : "input_norm=false",
                                         hdr[9] ? "attn_norm=length" : "attn_norm=max_len",
                                         impl == 0 ? "impl=cpu" : "impl=ref", NULL);
        void *inst = dc_make(info, cfg, D, 1);
        const int np_ok = dc_param_floats(ops, inst) == np;
        if (np_ok)
            dc_scatter(ops, inst, 0, theta);
        float *gy = malloc((size_t)(N * D) * 4), *gdx = malloc((size_t)(N * D) * 4);
        float *gth = malloc((size_t)np * 4);
        grm_dense_ctx ctx = make_ctx(1, 1, offs, nseq, times);
        grm_status st = np_ok ? run_fb(inst, x, dy, N, D, &ctx, gy, gdx, gth) : GRM_EINVAL;
        const char *iname = impl == 0 ? "cpu" : "ref";
        char w[260];
        if (impl == 0) {
            tap_ok(st == GRM_OK, "%s: %s runs (%s)", desc, iname,
                   st == GRM_OK ? "ok" : grm_last_error());
        } else if (st != GRM_OK) {
            tap_diag("ref failed: %s", grm_last_error());
        }
        if (impl == 0) {
            snprintf(w, sizeof w, "torch %d %s: y", idx, iname);
            tap_close_f32(gy, y, N * D, 1e-4, 1e-5, w);
            snprintf(w, sizeof w, "torch %d %s: dx", idx, iname);
            tap_close_f32(gdx, dx, N * D, 1e-4, 1e-5, w);
            // projections, then the RAB tables, each relative to its own scale
            const int64_t P = H * (2 * dv + 2 * dqk), nproj = P * D + P + D * H * dv + D;
            snprintf(w, sizeof w, "torch %d %s: f1/f2 weight and bias gradients", idx, iname);
            tap_close_f32(gth, dtheta, nproj, 1e-4, 1e-5, w);
            snprintf(w, sizeof w, "torch %d %s: RAB table gradients", idx, iname);
            if (np > nproj)
                tap_close_f32(gth + nproj, dtheta + nproj, np - nproj, 1e-4, 1e-5, w);
            else
                tap_ok(np_ok && np == nproj && !hdr[4] && !hdr[5],
                       "%s: none, the case has no RAB table and the block the %lld "
                       "projection parameters alone", w, (long long)nproj);
        } else {
            snprintf(w, sizeof w, "torch %d %s: y", idx, iname);
            tap_close_f32(gy, y, N * D, 1e-4, 1e-5, w);
            snprintf(w, sizeof w, "torch %d %s: dx", idx, iname);
            tap_close_f32(gdx, dx, N * D, 1e-4, 1e-5, w);
            snprintf(w, sizeof w, "torch %d %s: every parameter gradient", idx, iname);
            tap_close_f32(gth, dtheta, np, 1e-4, 1e-5, w);
            tap_ok(st == GRM_OK, "%s: ref runs", desc);
        }
        free(gy);
        free(gdx);
        free(gth);
        ops->destroy(inst);
    }
done:
    free(offs);
    free(times);
    free(x);
    free(theta);
    free(dy);
    free(y);
    free(dx);
    free(dtheta);
}

static void test_torch(void)
{
    const int points = 1 + FIX_CASES * FIX_POINTS_PER;
    const char *py = dc_torch_python();
    char cmd[8192], path[4096];
    if (py == NULL) {
        for (int i = 0; i < points; i++)
            tap_skip("no torch", "PyTorch fixture check %d of %d", i + 1, points);
        return;
    }
    const char *src = harness_srcdir() != NULL ? harness_srcdir() : ".";
    snprintf(path, sizeof path, "%s/hstu.bin", harness_tmpdir("dense-hstu"));
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/hstu.py' '%s'", py, src, path);
    const int rc = system(cmd);
    FILE *f = rc == 0 ? fopen(path, "rb") : NULL;
    uint32_t hdr[2] = { 0 };
    int64_t ncases = 0;
    const int ok = f != NULL && fread(hdr, sizeof hdr, 1, f) == 1 && hdr[0] == FIX_MAGIC
                   && hdr[1] == FIX_VERSION && fread(&ncases, sizeof ncases, 1, f) == 1
                   && ncases == FIX_CASES;
    if (!tap_ok(ok, "tests/ref/hstu.py wrote a fixture of %d cases (exit %d)", FIX_CASES, rc)) {
        for (int i = 1; i < points; i++)
            tap_ok(0, "PyTorch fixture check %d of %d (no fixture)", i + 1, points);
        if (f != NULL)
            fclose(f);
        return;
    }
    for (int c = 0; c < FIX_CASES; c++)
        torch_case(f, c);
    fclose(f);
}

int main(void)
{
    info = harness_plugin("dense-hstu");
    ops = info->ops;
    tap_plan(137);
    tap_ok(info->kind == GRM_KIND_DENSE && ops->loss == NULL,
           "dense-hstu is a dense block, not a head");
    test_params();

    const lay_d both = { 6, 2, 3, 2, 4, 5, 1, 1, 1, 0, 0, 0, 0 };
    const char *kv_both_ref[] = { "num_heads=2", "dqk=3", "dv=2", "max_len=4",
                                  "time_buckets=5", "impl=ref" };
    test_gradcheck("ref, both RABs, input norm, 1/max_len", &both, kv_both_ref, 6, 1);
    const char *kv_both_cpu[] = { "num_heads=2", "dqk=3", "dv=2", "max_len=4",
                                  "time_buckets=5", "impl=cpu" };
    test_gradcheck("cpu, both RABs, input norm, 1/max_len", &both, kv_both_cpu, 6, 1);
    const lay_d drop = { 5, 2, 2, 3, 3, 6, 1, 1, 0, 1, 0.3, 0, 0 };
    const char *kv_drop[] = { "num_heads=2", "dqk=2", "dv=3", "max_len=3", "time_buckets=6",
                              "input_norm=false", "attn_norm=length", "dropout=0.3" };
    test_gradcheck("cpu, dropout 0.3, no input norm, 1/L", &drop, kv_drop, 8, 1);
    const lay_d notime = { 6, 1, 3, 3, 8, 4, 1, 1, 1, 0, 0, 0, 0 };
    const char *kv_notime[] = { "num_heads=1", "dqk=3", "dv=3", "max_len=8",
                                "time_buckets=4" };
    test_gradcheck("cpu, rab_time on but no timestamps", &notime, kv_notime, 5, 0);
    const lay_d pos = { 5, 1, 3, 2, 8, 4, 1, 1, 1, 0, 0, 0, 1 };
    const char *kv_pos[] = { "num_heads=1", "dqk=3", "dv=2", "max_len=8", "time_buckets=4",
                             "pos_emb=true" };
    test_gradcheck("cpu, pos_emb (x sqrt(D) + P[t]), both RABs", &pos, kv_pos, 6, 1);
    const char *kv_pos_ref[] = { "num_heads=1", "dqk=3", "dv=2", "max_len=8",
                                 "time_buckets=4", "pos_emb=true", "impl=ref" };
    test_gradcheck("ref, pos_emb, both RABs", &pos, kv_pos_ref, 7, 1);

    test_pos_emb();
    test_init();
    test_impls();
    test_backend_attention();
    test_structure();
    test_eval_dropout();
    test_input_dropout();
    test_memory();
    test_errors();
    test_torch();
    return tap_done();
}
