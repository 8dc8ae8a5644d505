/* tests/test-heads.c - the head plugins (ABI 1.5, grm/head.h). head-bce: loss, gradient and
 * scores against the textbook formula in double (large |z| included, sample weights).
 * head-sampled-softmax: a hand-computed case, loss and all three gradients against
 * central differences of a double reimplementation written here (in_batch on and off,
 * masked negatives, logQ), and the negative sampler: determinism, range, counts and
 * popularity frequencies (chi-square). Errors with status and message. The TurboGR options:
 * l2norm, share_k (intra-batch logit sharing, eq. 2) and neg_fp16 against the PyTorch
 * reference tests/ref/heads.py (loss and every gradient, l2norm on/off, temperature,
 * in-batch, logQ of sampled and, mixed, in-batch negatives), central differences through the normalization, share_k = 1 and
 * share_k >= B against per-row and whole-batch losses computed without any grouping, blas
 * vs ref for share_k, and fp16 negatives against fp32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense-checks.h"
#include "harness.h"
#include "tap.h"

static grm_loss_io new_io(void)
{
    grm_loss_io io;
    memset(&io, 0, sizeof io);
    io.struct_size = sizeof io;
    return io;
}

/* ---- head-bce ---- */

/* The textbook BCE of one logit, naive but exact in double for |z| <= 700. */
static double bce_naive(double z, double y)
{
    return y * log(1 + exp(-z)) + (1 - y) * log(1 + exp(z));
}

static void test_bce(void)
{
    const grm_plugin_info *info = harness_plugin("head-bce");
    const grm_head_ops *ops = info->ops;
    tap_ok(info->kind == GRM_KIND_HEAD && ops->task != NULL && ops->loss != NULL,
           "head-bce is a head plugin with task and loss");
    void *h = dc_make(info, harness_config(info, NULL), 2, 1);
    tap_ok(ops->task(h) == GRM_LOSS_BCE, "head-bce: task BCE");
    tap_ok(ops->params == NULL && ops->negatives == NULL,
           "head-bce has no parameters and draws no negatives (params, negatives NULL)");
    // grad_scale multiplies d_pred: 0.25 gives a quarter of the unscaled gradient
    {
        const float z4[4] = { 0.5f, -1.0f, 2.0f, 0.0f }, y4[4] = { 1, 0, 0, 1 };
        float d1[4], dq[4];
        grm_loss_io io = new_io();
        io.ntasks = 2;
        io.rows = 2;
        io.dim = 2;
        io.pred = z4;
        io.labels = y4;
        io.d_pred = d1;
        grm_status st = ops->loss(h, &io);
        io.d_pred = dq;
        io.grad_scale = 0.25f;
        st |= ops->loss(h, &io);
        int same = st == GRM_OK;
        for (int i = 0; i < 4; i++) same &= dq[i] == d1[i] * 0.25f;
        tap_ok(same, "head-bce: grad_scale 0.25 scales d_pred exactly");
    }
    grm_status st;

    // B = 3, T = 2, weights and large logits
    const float z[6] = { 0.0f, 2.0f, -3.0f, 100.0f, -100.0f, 0.5f };
    const float lab[6] = { 1.0f, 0.0f, 0.3f, 0.0f, 1.0f, 1.0f };
    const float w[3] = { 1.0f, 2.0f, 0.5f };
    float d[6], sc[6], want_d[6], want_sc[6];
    double want = 0, wsum = 0;
    for (int b = 0; b < 3; b++) {
        for (int t = 0; t < 2; t++) {
            const int i = b * 2 + t;
            want += w[b] * bce_naive(z[i], lab[i]);
            want_sc[i] = (float)(1 / (1 + exp(-(double)z[i])));
        }
        wsum += w[b];
    }
    want /= wsum;
    for (int i = 0; i < 6; i++)
        want_d[i] = (float)(w[i / 2] * (1 / (1 + exp(-(double)z[i])) - lab[i]) / wsum);
    grm_loss_io io = new_io();
    io.ntasks = 2;
    io.rows = 3;
    io.dim = 2;
    io.pred = z;
    io.labels = lab;
    io.weights = w;
    io.d_pred = d;
    io.scores = sc;
    st = ops->loss(h, &io);
    const float got_l = (float)io.loss, want_l = (float)want;
    tap_ok(st == GRM_OK, "head-bce loss on a weighted batch with |z| = 100 succeeds");
    tap_close_f32(&got_l, &want_l, 1, 1e-6, 0, "bce: weighted loss (sum over tasks, weighted "
                  "mean over rows)");
    tap_close_f32(d, want_d, 6, 1e-6, 1e-9, "bce: d_pred = w (sigmoid(z) - y) / sum(w)");
    tap_close_f32(sc, want_sc, 6, 1e-6, 1e-9, "bce: scores = sigmoid(z)");

    // z = 0, y = 1 alone: ln 2; no weights
    void *h1 = dc_make(info, NULL, 1, 1);
    const float z0 = 0.0f, y1 = 1.0f;
    float d0 = 0;
    io = new_io();
    io.ntasks = 1;
    io.rows = 1;
    io.dim = 1;
    io.pred = &z0;
    io.labels = &y1;
    io.d_pred = &d0;
    st = ops->loss(h1, &io);
    tap_ok(st == GRM_OK && fabs(io.loss - 0.6931471805599453) < 1e-12 && d0 == -0.5f,
           "bce of z = 0, y = 1 is ln 2 = %.16f with gradient -1/2 (got %.16f, %g)",
           0.6931471805599453, io.loss, (double)d0);

    // |z| = 1000: the naive form overflows, the stable one must not
    const float zb[4] = { 1000.0f, -1000.0f, 1000.0f, -1000.0f };
    const float yb[4] = { 0.0f, 1.0f, 1.0f, 0.0f };
    float db[4];
    io = new_io();
    io.ntasks = 1;
    io.rows = 4;
    io.dim = 1;
    io.pred = zb;
    io.labels = yb;
    io.d_pred = db;
    st = ops->loss(h1, &io);
    tap_ok(st == GRM_OK && fabs(io.loss - 500.0) < 1e-9 && db[0] == 0.25f && db[1] == -0.25f
           && db[2] == 0.0f && db[3] == 0.0f,
           "bce at |z| = 1000 is finite: loss (1000 + 1000 + 0 + 0) / 4 = %g, grads "
           "[%g %g %g %g]", io.loss, (double)db[0], (double)db[1], (double)db[2],
           (double)db[3]);

    // errors
    const float w0[3] = { 0, 0, 0 };
    io = new_io();
    io.ntasks = 2;
    io.rows = 3;
    io.dim = 2;
    io.pred = z;
    io.labels = lab;
    io.weights = w0;
    dc_expect(ops->loss(h, &io), GRM_EINVAL, "sum to 0", "bce with all weights 0");
    io.weights = NULL;
    io.labels = NULL;
    dc_expect(ops->loss(h, &io), GRM_EINVAL, "labels", "bce without labels");
    io.labels = lab;
    io.ntasks = 1;
    dc_expect(ops->loss(h, &io), GRM_EINVAL, "ntasks", "bce with dim != ntasks");
    io.ntasks = 2;
    io.struct_size = 8;
    dc_expect(ops->loss(h, &io), GRM_EINVAL, "struct_size", "bce with a too small io");
    ops->destroy(h);
    ops->destroy(h1);
    ops->destroy(NULL);
}

/* ---- sampled softmax: an independent double reimplementation ---- */

typedef struct ssm_case {
    int B, R, D;
    double T;
    int in_batch;
    const int64_t *pid, *nid;
    const double *w, *logq;   /* NULL: 1, 0 */
} ssm_case;

static double dotd(const double *a, const double *b, int D)
{
    double s = 0;
    for (int j = 0; j < D; j++)
        s += a[j] * b[j];
    return s;
}

/* Mean over rows (weighted) of -log softmax(logits)[positive], masked logits left out. */
static double ssm_d(const ssm_case *c, const double *u, const double *pos, const double *neg)
{
    double total = 0, wsum = 0;
    for (int b = 0; b < c->B; b++) {
        double l[256];
        int m = 0;
        l[m++] = dotd(u + b * c->D, pos + b * c->D, c->D) / c->T;
        for (int j = 0; j < c->R; j++)
            if (c->nid[j] != c->pid[b])
                l[m++] = dotd(u + b * c->D, neg + j * c->D, c->D) / c->T
                         - (c->logq ? c->logq[j] : 0);
        for (int k = 0; c->in_batch && k < c->B; k++)
            if (k != b && c->pid[k] != c->pid[b])
                l[m++] = dotd(u + b * c->D, pos + k * c->D, c->D) / c->T;
        double z = 0;
        for (int i = 0; i < m; i++)
            z += exp(l[i]);
        const double w = c->w ? c->w[b] : 1;
        total += w * (log(z) - l[0]);
        wsum += w;
    }
    return total / wsum;
}

/* ssm_d of fixed arguments, as a dc_loss_fn for the finite differences. */
typedef struct ssm_at {
    const ssm_case *c;
    const double *u, *pos, *neg;
} ssm_at;

static double ssm_d_at(void *ctx)
{
    const ssm_at *a = ctx;
    return ssm_d(a->c, a->u, a->pos, a->neg);
}

/* Run the plugin on c with random inputs and compare loss and gradients to ssm_d. */
static void check_ssm(const grm_plugin_info *info, void *head, const ssm_case *c,
                      const char *what)
{
    const grm_head_ops *ops = info->ops;
    enum { MAXN = 256 };
    float u[MAXN], pos[MAXN], neg[MAXN], w[16], du[MAXN], dpos[MAXN], dneg[MAXN];
    double ud[MAXN], posd[MAXN], negd[MAXN], wd[16];
    float fu[MAXN], fpos[MAXN], fneg[MAXN];
    uint64_t s = 31337;
    for (int i = 0; i < c->B * c->D; i++) {
        ud[i] = u[i] = harness_randf(&s);
        posd[i] = pos[i] = harness_randf(&s);
    }
    for (int i = 0; i < c->R * c->D; i++)
        negd[i] = neg[i] = harness_randf(&s);
    for (int b = 0; b < c->B; b++)
        w[b] = (float)(c->w ? c->w[b] : 1.0);
    for (int b = 0; b < c->B && c->w; b++)
        wd[b] = w[b];
    ssm_case cd = *c;
    cd.w = c->w ? wd : NULL;
    // garbage in the gradient buffers: the head must overwrite, not add to, them
    for (int i = 0; i < MAXN; i++)
        du[i] = dpos[i] = dneg[i] = 7.0f;
    grm_loss_io io = new_io();
    io.rows = c->B;
    io.dim = c->D;
    io.pred = u;
    io.d_pred = du;
    io.weights = c->w ? w : NULL;
    io.pos = pos;
    io.d_pos = dpos;
    io.pos_ids = c->pid;
    io.neg = neg;
    io.d_neg = dneg;
    io.neg_ids = c->nid;
    io.nneg = c->R;
    const grm_status st = ops->loss(head, &io);
    const double want = ssm_d(&cd, ud, posd, negd);
    ssm_at at = { &cd, ud, posd, negd };
    dc_central_grad(fu, ud, c->B * c->D, 1e-6, ssm_d_at, &at);
    dc_central_grad(fpos, posd, c->B * c->D, 1e-6, ssm_d_at, &at);
    dc_central_grad(fneg, negd, c->R * c->D, 1e-6, ssm_d_at, &at);
    char buf[160];
    tap_ok(st == GRM_OK && fabs(io.loss - want) <= 1e-6 * fabs(want),
           "%s: loss %.9f matches the double reimplementation %.9f", what, io.loss, want);
    snprintf(buf, sizeof buf, "%s: d_pred vs central differences", what);
    tap_close_f32(du, fu, c->B * c->D, 1e-4, 1e-6, buf);
    snprintf(buf, sizeof buf, "%s: d_pos vs central differences", what);
    tap_close_f32(dpos, fpos, c->B * c->D, 1e-4, 1e-6, buf);
    snprintf(buf, sizeof buf, "%s: d_neg vs central differences", what);
    tap_close_f32(dneg, fneg, c->R * c->D, 1e-4, 1e-6, buf);
}

static double ssm_loss_of(const grm_head_ops *ops, void *head, const float *u,
                          const float *pos, const int64_t *pid, const float *neg,
                          const int64_t *nid, int64_t B, int64_t R, int64_t D, float *dneg)
{
    grm_loss_io io = new_io();
    io.rows = B;
    io.dim = D;
    io.pred = u;
    io.pos = pos;
    io.pos_ids = pid;
    io.neg = neg;
    io.neg_ids = nid;
    io.nneg = R;
    io.d_neg = dneg;
    if (ops->loss(head, &io) != GRM_OK)
        return NAN;
    return io.loss;
}

static void test_ssm_loss(void)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    const grm_head_ops *ops = info->ops;
    tap_ok(info->kind == GRM_KIND_HEAD && ops->loss != NULL && ops->negatives != NULL,
           "head-sampled-softmax is a head plugin with loss and negatives");
    void *h1 = dc_make(info, harness_config(info, "in_batch=false", NULL), 1, 1);
    tap_ok(ops->task(h1) == GRM_LOSS_RETRIEVAL && ops->params == NULL,
           "task RETRIEVAL, no parameters");

    // hand case: D = 1, u = 1, pos = 2, neg = 1: logits [2, 1],
    // loss = log(e^2 + e^1) - 2 = log(1 + e^-1); p_neg = sigmoid(-1)
    {
        const float u = 1, pos = 2, neg = 1;
        const int64_t pid = 5, nid = 6;
        float du = 0, dpos = 0, dneg = 0;
        grm_loss_io io = new_io();
        io.rows = 1;
        io.dim = 1;
        io.pred = &u;
        io.d_pred = &du;
        io.pos = &pos;
        io.d_pos = &dpos;
        io.pos_ids = &pid;
        io.neg = &neg;
        io.d_neg = &dneg;
        io.neg_ids = &nid;
        io.nneg = 1;
        grm_status st = ops->loss(h1, &io);
        const double pn = 0.2689414213699951;      // sigmoid(-1)
        // the exponentials are float (ssm_exp_f, relative error ~2e-7): log(z) is off by
        // at most that much
        tap_ok(st == GRM_OK && fabs(io.loss - 0.31326168751822286) < 4e-7,
               "hand case: loss log(1 + e^-1) = 0.3132616875 (got %.10f)", io.loss);
        // d/du = (p_pos - 1) pos + p_neg neg = -2 pn + pn; d/dpos = -pn u; d/dneg = pn u
        tap_ok(fabs(du + pn) < 1e-7 && fabs(dpos + pn) < 1e-7 && fabs(dneg - pn) < 1e-7,
               "hand case: d_pred = d_pos = -sigmoid(-1), d_neg = sigmoid(-1) (got %g %g %g)",
               (double)du, (double)dpos, (double)dneg);
    }

    // central differences: B = 5, D = 4, R = 6, duplicates among positives (rows 0 and
    // 3), negatives equal to positives (ids 12 and 15), weights, temperature 0.7
    const int64_t pid[5] = { 11, 12, 13, 11, 15 };
    const int64_t nid[6] = { 20, 12, 21, 22, 15, 23 };
    const double w[5] = { 1.0, 0.5, 2.0, 1.0, 1.5 };
    ssm_case c = { 5, 6, 4, 0.7, 1, pid, nid, w, NULL };
    void *hb = dc_make(info, harness_config(info, "temperature=0.7", "in_batch=true", NULL), 4, 1);
    check_ssm(info, hb, &c, "in_batch on, weighted");
    void *hn = dc_make(info, harness_config(info, "temperature=0.7", "in_batch=false", NULL), 4, 1);
    c.in_batch = 0;
    c.w = NULL;
    check_ssm(info, hn, &c, "in_batch off, unweighted");

    // two-dimensional heads, temperature 1, for the cases below
    void *h2n = dc_make(info, harness_config(info, "in_batch=false", NULL), 2, 1);
    void *h2b = dc_make(info, harness_config(info, "in_batch=true", NULL), 2, 1);

    // masking: a negative equal to the positive changes nothing and gets no gradient
    {
        const float u[2] = { 0.3f, -0.7f }, pos[2] = { 0.9f, 0.1f };
        const float neg[4] = { 0.2f, 0.4f, -0.5f, 0.8f };
        const int64_t p = 42, n2[2] = { 42, 43 };
        float dneg[4] = { 9, 9, 9, 9 }, dneg1[2];
        const double both = ssm_loss_of(ops, h2n, u, pos, &p, neg, n2, 1, 2, 2, dneg);
        const double only = ssm_loss_of(ops, h2n, u, pos, &p, neg + 2, n2 + 1, 1, 1, 2, dneg1);
        tap_ok(both == only && dneg[0] == 0 && dneg[1] == 0 && dneg[2] == dneg1[0]
               && dneg[3] == dneg1[1],
               "a negative equal to the row's positive is masked (loss %.9f = %.9f, no "
               "gradient)", both, only);
    }

    // in_batch: with no sampled negatives, off gives loss 0; on equals, per row, the
    // loss with the other row's positive as the one sampled negative
    {
        const float u[4] = { 0.5f, -0.2f, 0.1f, 0.9f }, pos[4] = { 0.3f, 0.6f, -0.4f, 0.2f };
        const int64_t pid2[2] = { 1, 2 };
        const double off = ssm_loss_of(ops, h2n, u, pos, pid2, NULL, NULL, 2, 0, 2, NULL);
        const double on = ssm_loss_of(ops, h2b, u, pos, pid2, NULL, NULL, 2, 0, 2, NULL);
        const double r0 = ssm_loss_of(ops, h2n, u, pos, pid2, pos + 2, pid2 + 1, 1, 1, 2, NULL);
        const double r1 = ssm_loss_of(ops, h2n, u + 2, pos + 2, pid2 + 1, pos, pid2, 1, 1, 2,
                                      NULL);
        tap_ok(off == 0.0, "in_batch off with no negatives: loss 0 (got %g)", off);
        tap_ok(fabs(on - (r0 + r1) / 2) < 1e-6 * fabs(on),
               "in_batch on: other rows' positives act as negatives (%.12f vs %.12f)", on,
               (r0 + r1) / 2);
        const int64_t same[2] = { 7, 7 };
        const double dup = ssm_loss_of(ops, h2b, u, pos, same, NULL, NULL, 2, 0, 2, NULL);
        tap_ok(dup == 0.0, "in_batch: a row sharing the positive id is masked (loss %g)", dup);
    }

    // errors of loss
    {
        const float u[3] = { 0 };
        grm_loss_io io = new_io();
        io.rows = 1;
        io.dim = 3;
        io.pred = u;
        io.pos = u;
        dc_expect(ops->loss(hb, &io), GRM_EINVAL, "3 columns", "loss with dim != in_dim");
        io.dim = 4;
        io.pos = NULL;
        dc_expect(ops->loss(hb, &io), GRM_EINVAL, "pos", "loss without positives");
        const float u4[4] = { 0 }, w0 = 0;
        io.pred = u4;
        io.pos = u4;
        io.weights = &w0;
        dc_expect(ops->loss(hb, &io), GRM_EINVAL, "sum to 0", "loss with weights summing to 0");
    }
    const void *cfg = NULL;
    const char *t0[] = { "temperature=0" };
    dc_expect(harness_config_try(info, &cfg, t0, 1), GRM_EINVAL, "temperature",
              "temperature=0 is refused");
    ops->destroy(h1);
    ops->destroy(hb);
    ops->destroy(hn);
    ops->destroy(h2b);
    ops->destroy(h2n);
}

/* ---- negatives ---- */

static void test_negatives(void)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    const grm_head_ops *ops = info->ops;
    int64_t ids[10], counts[10];
    for (int i = 0; i < 10; i++) {
        ids[i] = 1000 + 7 * i;
        counts[i] = i + 1;
    }
    const grm_catalog cat = { 10, ids, counts };
    void *h = dc_make(info, harness_config(info, "negatives=128", NULL), 4, 1);
    int64_t a[256], b[256], c[256], n = -1, nb = -1, nc = -1;
    grm_status st = ops->negatives(h, a, &n, 256, &cat, 17);
    st |= ops->negatives(h, b, &nb, 256, &cat, 17);
    st |= ops->negatives(h, c, &nc, 256, &cat, 18);
    tap_ok(st == GRM_OK && n == 128 && nb == 128 && memcmp(a, b, 128 * sizeof *a) == 0,
           "negatives: 128 drawn, the same for the same seed");
    tap_ok(nc == 128 && memcmp(a, c, 128 * sizeof *a) != 0, "negatives: another seed, "
           "another draw");
    int inside = 1;
    for (int i = 0; i < 128; i++)
        inside &= a[i] >= 1000 && a[i] <= 1063 && (a[i] - 1000) % 7 == 0;
    tap_ok(inside, "negatives: every id comes from the catalog");
    st = ops->negatives(h, a, &n, 50, &cat, 17);
    tap_ok(st == GRM_OK && n == 50, "negatives: at most max (50) are drawn (got %lld)",
           (long long)n);
    ops->destroy(h);

    // frequencies: chi-square over the catalog with many draws
    enum { DRAWS = 200000 };
    int64_t *draw = malloc(DRAWS * sizeof *draw);
    int64_t pop_ids[6] = { 1, 2, 3, 4, 5, 6 }, pop_counts[6] = { 1, 2, 3, 4, 0, 10 };
    int64_t alt_counts[6] = { 10, 0, 0, 0, 5, 5 };
    const grm_catalog pop = { 6, pop_ids, pop_counts }, alt = { 6, pop_ids, alt_counts };
    const struct {
        const char *sampler, *alpha;
        const grm_catalog *cat;
        double p[6];
    } cases[] = {
        { "sampler=uniform", "alpha=1", &pop, { 1, 1, 1, 1, 1, 1 } },
        { "sampler=popularity", "alpha=1", &pop, { 1, 2, 3, 4, 0, 10 } },
        { "sampler=popularity", "alpha=0.5", &pop,
          { 1, 1.4142135623730951, 1.7320508075688772, 2, 0, 3.1622776601683795 } },
        { "sampler=popularity", "alpha=1", &alt, { 10, 0, 0, 0, 5, 5 } },
    };
    // one instance for the popularity cases: the cached table must follow the catalog
    void *hp = dc_make(info, harness_config(info, "negatives=200000", "sampler=popularity",
                                            NULL), 4, 1);
    for (int k = 0; k < 4; k++) {
        void *hk = hp;
        if (k == 0 || k == 2)
            hk = dc_make(info, harness_config(info, "negatives=200000", cases[k].sampler,
                                              cases[k].alpha, NULL), 4, 1);
        st = ops->negatives(hk, draw, &n, DRAWS, cases[k].cat, 1234 + (uint64_t)k);
        double obs[6] = { 0 }, psum = 0, chi2 = 0;
        int outside = 0, df = -1;
        for (int64_t i = 0; i < n; i++) {
            if (draw[i] < 1 || draw[i] > 6)
                outside++;
            else
                obs[draw[i] - 1]++;
        }
        for (int i = 0; i < 6; i++)
            psum += cases[k].p[i];
        int zero_drawn = 0;
        for (int i = 0; i < 6; i++) {
            const double e = (double)n * cases[k].p[i] / psum;
            if (e == 0) {
                zero_drawn += obs[i] != 0;
                continue;
            }
            chi2 += (obs[i] - e) * (obs[i] - e) / e;
            df++;
        }
        // the 0.9999 quantile of chi-square is below 21 for df <= 5
        tap_ok(st == GRM_OK && n == DRAWS && outside == 0 && zero_drawn == 0 && chi2 < 21,
               "%s %s%s: %d draws match the expected frequencies (chi2 %.2f, df %d), "
               "count-0 items never drawn", cases[k].sampler, cases[k].alpha,
               k == 3 ? " (a second catalog)" : "", DRAWS, chi2, df);
        if (hk != hp)
            ops->destroy(hk);
    }
    ops->destroy(hp);

    // logQ: loss with the drawn negatives subtracts log(R p) from their logits
    {
        void *hq = dc_make(info, harness_config(info, "negatives=4", "logq=true",
                                                "in_batch=false", NULL), 2, 1);
        const grm_catalog uni = { 6, pop_ids, NULL };
        int64_t nid[4];
        st = ops->negatives(hq, nid, &n, 4, &uni, 99);
        // u, pos, neg rows: positive id 100 never collides with the catalog
        const float u[2] = { 0.6f, -0.3f }, pos[2] = { 0.2f, 0.9f };
        const float neg[8] = { 0.1f, 0.2f, -0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f };
        const int64_t pid = 100;
        const double got = ssm_loss_of(ops, hq, u, pos, &pid, neg, nid, 1, 4, 2, NULL);
        double ud[2] = { u[0], u[1] }, posd[2] = { pos[0], pos[1] }, negd[8];
        for (int i = 0; i < 8; i++)
            negd[i] = neg[i];
        const double lq = log(4.0 / 6.0);
        const double logq[4] = { lq, lq, lq, lq };
        const ssm_case cq = { 1, 4, 2, 1.0, 0, &pid, nid, NULL, logq };
        const double want = ssm_d(&cq, ud, posd, negd);
        tap_ok(st == GRM_OK && n == 4 && fabs(got - want) <= 1e-6 * fabs(want),
               "logq: sampled logits are corrected by log(R / n) (loss %.9f vs %.9f)", got,
               want);
        int64_t other[4];
        memcpy(other, nid, sizeof other);
        other[0] = nid[0] == 1 ? 2 : 1;     // one id differs from the draw
        grm_loss_io io = new_io();
        io.rows = 1;
        io.dim = 2;
        io.pred = u;
        io.pos = pos;
        io.pos_ids = &pid;
        io.neg = neg;
        io.neg_ids = other;
        io.nneg = 4;
        dc_expect(ops->loss(hq, &io), GRM_EINVAL, "logq", "logq with negatives not drawn by "
                  "the head");
        ops->destroy(hq);
    }

    // errors of negatives
    h = dc_make(info, harness_config(info, "sampler=popularity", NULL), 4, 1);
    const grm_catalog nocounts = { 6, pop_ids, NULL }, empty = { 0, pop_ids, NULL };
    const int64_t zeros[6] = { 0 };
    const grm_catalog allzero = { 6, pop_ids, zeros };
    dc_expect(ops->negatives(h, a, &n, 8, &nocounts, 1), GRM_EINVAL, "counts",
              "popularity sampler without counts");
    dc_expect(ops->negatives(h, a, &n, 8, &empty, 1), GRM_EINVAL, "empty",
              "negatives from an empty catalog");
    dc_expect(ops->negatives(h, a, &n, 8, &allzero, 1), GRM_EINVAL, "sum to 0",
              "popularity sampler with all counts 0");
    ops->destroy(h);
    free(draw);
}

/* The BLAS path (heads_cpu.c) against the plain-loop reference on the same random
 * inputs: loss and all three gradients, over shapes with masked negatives, duplicate
 * positives, weights, in-batch on and off, R = 0 and B = 1. */
static void test_ssm_blas_vs_ref(void)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    const grm_head_ops *ops = info->ops;
    static const int64_t shapes[][3] = { { 1, 0, 8 }, { 1, 5, 3 }, { 7, 13, 5 },
                                         { 64, 128, 32 }, { 33, 0, 16 } };
    int bad = 0;
    double max_rel = 0;
    for (int in_batch = 0; in_batch < 2; in_batch++) {
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const int64_t B = shapes[si][0], R = shapes[si][1], D = shapes[si][2];
            void *hb = dc_make(info, harness_config(info, "impl=blas", in_batch ? "in_batch=true"
                                                    : "in_batch=false", NULL), D, 1);
            void *hr = dc_make(info, harness_config(info, "impl=ref", in_batch ? "in_batch=true"
                                                    : "in_batch=false", NULL), D, 1);
            float *pred = malloc((size_t)(B * D) * sizeof *pred);
            float *pos = malloc((size_t)(B * D) * sizeof *pos);
            float *neg = malloc((size_t)(R * D + 1) * sizeof *neg);
            float *w = malloc((size_t)B * sizeof *w);
            int64_t *pid = malloc((size_t)B * sizeof *pid), *nid = malloc((size_t)(R + 1) * 8);
            float *g[2][3];
            double loss[2];
            uint64_t rs = 11 + si;
            for (int64_t i = 0; i < B * D; i++) pred[i] = harness_randf(&rs);
            for (int64_t i = 0; i < B * D; i++) pos[i] = harness_randf(&rs);
            for (int64_t i = 0; i < R * D; i++) neg[i] = harness_randf(&rs);
            for (int64_t b = 0; b < B; b++) {
                w[b] = 0.5f + (float)(harness_rand(&rs) % 3);
                pid[b] = (int64_t)(harness_rand(&rs) % 9);    /* duplicates on purpose */
            }
            for (int64_t j = 0; j < R; j++) nid[j] = (int64_t)(harness_rand(&rs) % 9);
            for (int k = 0; k < 2; k++) {
                g[k][0] = calloc((size_t)(B * D), sizeof(float));
                g[k][1] = calloc((size_t)(B * D), sizeof(float));
                g[k][2] = calloc((size_t)(R * D + 1), sizeof(float));
                grm_loss_io io = { .struct_size = sizeof io, .rows = B, .dim = D, .pred = pred,
                                   .d_pred = g[k][0], .weights = w, .pos = pos,
                                   .d_pos = g[k][1], .pos_ids = pid, .neg = neg,
                                   .d_neg = g[k][2], .neg_ids = nid, .nneg = R };
                if (ops->loss(k ? hr : hb, &io) != GRM_OK) bad++;
                loss[k] = io.loss;
            }
            if (fabs(loss[0] - loss[1]) > 1e-5 * fabs(loss[1]) + 1e-6) {
                bad++;
                tap_diag("B %lld R %lld D %lld in_batch %d: loss blas %.9g ref %.9g",
                         (long long)B, (long long)R, (long long)D, in_batch, loss[0], loss[1]);
            }
            const int64_t len[3] = { B * D, B * D, R * D };
            for (int t = 0; t < 3; t++)
                for (int64_t i = 0; i < len[t]; i++) {
                    double d = fabs((double)g[0][t][i] - g[1][t][i]);
                    double r = d / (fabs((double)g[1][t][i]) + 1e-12);
                    if (fabs((double)g[1][t][i]) > 1e-5 && r > max_rel) max_rel = r;
                    if (!(d <= 1e-6 + 1e-4 * fabs((double)g[1][t][i]))) {
                        if (bad++ < 5)
                            tap_diag("B %lld R %lld gradient %d index %lld: blas %.9g ref %.9g",
                                     (long long)B, (long long)R, t, (long long)i,
                                     (double)g[0][t][i], (double)g[1][t][i]);
                    }
                }
            for (int k = 0; k < 2; k++)
                for (int t = 0; t < 3; t++) free(g[k][t]);
            ops->destroy(hb);
            ops->destroy(hr);
            free(pred);
            free(pos);
            free(neg);
            free(w);
            free(pid);
            free(nid);
        }
    }
    tap_diag("blas vs ref: max rel gradient error %.3g", max_rel);
    tap_ok(bad == 0, "sampled softmax: BLAS path equals the reference (loss and d_pred, d_pos, "
           "d_neg; rtol 1e-4, atol 1e-6) over 10 shapes with masks, duplicates and weights");
}


/* ---- TurboGR options: l2norm, share_k (eq. 2), neg_fp16 ---- */

typedef struct opt_case {
    const char *name;
    int64_t B, R, D;
    int l2norm, in_batch, share_k, logq;    /* logq: negatives drawn by the head */
    double temperature;
    const char *impl;
} opt_case;

/* Inputs of a case: a random item table of 12 ids; positives and negatives are its rows. */
typedef struct opt_data {
    float pred[64 * 8], pos[64 * 8], neg[256 * 8], w[64], table[12 * 8];
    int64_t pid[64], nid[256], cat_ids[12], cat_counts[12];
} opt_data;

static void *opt_head(const opt_case *c, const char *extra, const char *extra2)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    char t[64], l[32], ib[32], k[32], lq[32], n[32], im[32];
    snprintf(t, sizeof t, "temperature=%.17g", c->temperature);
    snprintf(l, sizeof l, "l2norm=%s", c->l2norm ? "true" : "false");
    snprintf(ib, sizeof ib, "in_batch=%s", c->in_batch ? "true" : "false");
    snprintf(k, sizeof k, "share_k=%d", c->share_k);
    snprintf(lq, sizeof lq, "logq=%s", c->logq ? "true" : "false");
    snprintf(n, sizeof n, "negatives=%lld", (long long)c->R);
    snprintf(im, sizeof im, "impl=%s", c->impl);
    const char *kvs[10] = { t, l, ib, k, lq, n, im, "sampler=popularity", "alpha=0.75", NULL };
    int nk = 9;
    if (extra != NULL) kvs[nk++] = extra;
    const void *cfg = NULL;
    if (harness_config_try(info, &cfg, kvs, nk) != GRM_OK) {
        printf("Bail out! config: %s\n", grm_last_error());
        exit(1);
    }
    (void)extra2;
    void *inst = NULL;
    if (((const grm_head_ops *)info->ops)->create(cfg, c->D, 77, &inst) != GRM_OK) {
        printf("Bail out! create: %s\n", grm_last_error());
        exit(1);
    }
    return inst;
}

static void opt_fill(const opt_case *c, opt_data *d, void *head, uint64_t seed)
{
    const grm_head_ops *ops = harness_plugin("head-sampled-softmax")->ops;
    uint64_t s = seed;
    for (int i = 0; i < 12 * 8; i++) d->table[i] = harness_randf(&s);
    for (int i = 0; i < 12; i++) {
        d->cat_ids[i] = 100 + i;
        d->cat_counts[i] = 1 + (i * 7) % 5;
    }
    for (int64_t i = 0; i < c->B * c->D; i++) d->pred[i] = harness_randf(&s) * 1.5f;
    for (int64_t b = 0; b < c->B; b++) {
        d->pid[b] = 100 + (int64_t)(harness_rand(&s) % 12);
        d->w[b] = 0.5f + (float)(harness_rand(&s) % 4) * 0.5f;
    }
    if (c->logq) {
        grm_catalog cat = { 12, d->cat_ids, d->cat_counts };
        int64_t got = 0;
        ops->negatives(head, d->nid, &got, c->R, &cat, seed);
    } else {
        for (int64_t j = 0; j < c->R; j++) d->nid[j] = 100 + (int64_t)(harness_rand(&s) % 12);
    }
    // item rows from the table by id, so equal ids are equal rows
    for (int64_t b = 0; b < c->B; b++)
        memcpy(d->pos + b * c->D, d->table + (d->pid[b] - 100) * 8, (size_t)c->D * 4);
    for (int64_t j = 0; j < c->R; j++)
        memcpy(d->neg + j * c->D, d->table + (d->nid[j] - 100) * 8, (size_t)c->D * 4);
}

static grm_status opt_loss(void *head, const opt_case *c, const opt_data *d, double *loss,
                           float *dp, float *dpos, float *dneg)
{
    const grm_head_ops *ops = harness_plugin("head-sampled-softmax")->ops;
    grm_loss_io io = new_io();
    io.rows = c->B;
    io.dim = c->D;
    io.pred = d->pred;
    io.d_pred = dp;
    io.weights = d->w;
    io.pos = d->pos;
    io.d_pos = dpos;
    io.pos_ids = d->pid;
    io.neg = d->neg;
    io.d_neg = dneg;
    io.neg_ids = d->nid;
    io.nneg = c->R;
    grm_status st = ops->loss(head, &io);
    *loss = io.loss;
    return st;
}

/* The loss of a case's inputs d as a dc_loss_fn for the finite differences (gradients into
 * scratch); statuses accumulate into st. */
typedef struct opt_at {
    void *head;
    const opt_case *c;
    const opt_data *d;
    grm_status st;
} opt_at;

static double opt_loss_at(void *ctx)
{
    opt_at *a = ctx;
    static float t1[64 * 8], t2[64 * 8], t3[256 * 8];
    double loss = 0;
    a->st |= opt_loss(a->head, a->c, a->d, &loss, t1, t2, t3);
    return loss;
}

/* The inputs differentiated: v = 0 pred [B, D], 1 pos [B, D], 2 neg [R, D]; their floats. */
static float *opt_var(opt_data *d, int v)
{
    return v == 0 ? d->pred : v == 1 ? d->pos : d->neg;
}

static int64_t opt_len(const opt_case *c, int v)
{
    return (v == 2 ? c->R : c->B) * c->D;
}

/* Run tests/ref/SCRIPT IN OUT with python py and read what it wrote: float64 loss, float32
 * d_pred [B, D], d_pos [B, D], d_neg [R, D]. 1: it ran and the file was complete. */
static int run_torch_ref(const char *py, const char *script, const char *in, const char *out,
                         int64_t B, int64_t R, int64_t D, double *loss, float *dp,
                         float *dpos, float *dneg)
{
    char cmd[9000];
    const char *src = harness_srcdir() != NULL ? harness_srcdir() : ".";
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/%s' '%s' '%s'", py, src, script, in, out);
    if (system(cmd) != 0)
        return 0;
    FILE *f = fopen(out, "rb");
    const int ok = f != NULL && fread(loss, 8, 1, f) == 1
                   && fread(dp, 4, (size_t)(B * D), f) == (size_t)(B * D)
                   && fread(dpos, 4, (size_t)(B * D), f) == (size_t)(B * D)
                   && fread(dneg, 4, (size_t)(R * D), f) == (size_t)(R * D);
    if (f != NULL) fclose(f);
    return ok;
}

/* 5 checks: run, loss, d_pred, d_pos, d_neg against tests/ref/heads.py. */
static void test_opt_torch(const opt_case *c)
{
    const char *py = dc_torch_python();
    if (py == NULL) {
        for (int i = 0; i < 5; i++)
            tap_skip("no torch", "PyTorch heads.py %s check %d of 5", c->name, i + 1);
        return;
    }
    void *head = opt_head(c, NULL, NULL);
    static opt_data d;
    opt_fill(c, &d, head, 1234 + (uint64_t)c->B);
    const int64_t B = c->B, R = c->R, D = c->D;
    float dp[64 * 8], dpos[64 * 8], dneg[256 * 8];
    double loss = 0;
    grm_status st = opt_loss(head, c, &d, &loss, dp, dpos, dneg);
    char in[4200], out[4200];
    const char *dir = harness_tmpdir("dense-heads");
    snprintf(in, sizeof in, "%s/in.bin", dir);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    FILE *f = fopen(in, "wb");
    const uint32_t hdr[2] = { 0x49444847u, 1u };
    const int64_t hd[8] = { B, R, D, c->l2norm, c->in_batch, c->share_k, c->logq, 12 };
    const double dd[2] = { c->temperature, 0.75 };
    const uint64_t seed = 77;
    int ok = f != NULL && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(hd, sizeof hd, 1, f) == 1
             && fwrite(dd, sizeof dd, 1, f) == 1 && fwrite(&seed, 8, 1, f) == 1
             && fwrite(d.pred, 4, (size_t)(B * D), f) == (size_t)(B * D)
             && fwrite(d.pos, 4, (size_t)(B * D), f) == (size_t)(B * D)
             && fwrite(d.neg, 4, (size_t)(R * D), f) == (size_t)(R * D)
             && fwrite(d.pid, 8, (size_t)B, f) == (size_t)B
             && fwrite(d.nid, 8, (size_t)R, f) == (size_t)R
             && fwrite(d.w, 4, (size_t)B, f) == (size_t)B
             && fwrite(d.cat_ids, 8, 12, f) == 12 && fwrite(d.cat_counts, 8, 12, f) == 12;
    if (f != NULL) fclose(f);
    static float wdp[64 * 8], wdpos[64 * 8], wdneg[256 * 8];
    double wloss = 0;
    ok = ok && run_torch_ref(py, "heads.py", in, out, B, R, D, &wloss, wdp, wdpos, wdneg);
    tap_ok(ok && st == GRM_OK, "%s: head and tests/ref/heads.py ran (%s)", c->name,
           st == GRM_OK ? "ok" : grm_last_error());
    char what[160];
    const float gl = (float)loss, wl = (float)wloss;
    snprintf(what, sizeof what, "torch %s: loss", c->name);
    tap_close_f32(&gl, &wl, 1, 1e-4, 1e-6, what);
    snprintf(what, sizeof what, "torch %s: d_pred", c->name);
    tap_close_f32(dp, wdp, B * D, 1e-4, 1e-5, what);
    snprintf(what, sizeof what, "torch %s: d_pos", c->name);
    tap_close_f32(dpos, wdpos, B * D, 1e-4, 1e-5, what);
    snprintf(what, sizeof what, "torch %s: d_neg", c->name);
    tap_close_f32(dneg, wdneg, R * D, 1e-4, 1e-5, what);
    ((const grm_head_ops *)harness_plugin("head-sampled-softmax")->ops)->destroy(head);
}

/* Central differences of the ref implementation's loss (double dots of float inputs) with
 * respect to every input float; the step actually taken is the float difference. */
static void test_opt_fd(const opt_case *c)
{
    void *head = opt_head(c, NULL, NULL);
    static opt_data d;
    opt_fill(c, &d, head, 99);
    float dp[64 * 8], dpos[64 * 8], dneg[256 * 8];
    double loss = 0;
    grm_status st = opt_loss(head, c, &d, &loss, dp, dpos, dneg);
    const float *ana[3] = { dp, dpos, dneg };
    // Richardson extrapolation of two central differences (steps 4e-3 and 2e-3) cancels
    // the h^2 term, which is large where a short row is normalized; the normalized rows are
    // rounded to float: ~1e-7 of noise in the loss
    opt_at at = { head, c, &d, GRM_OK };
    dc_fd_tally t = { .floor = 2e-3, .tol = 5e-3 };
    for (int v = 0; v < 3; v++)
        for (int64_t i = 0; i < opt_len(c, v); i++) {
            const double num = dc_richardson_f32(opt_var(&d, v) + i, 4e-3f, 2e-3f, opt_loss_at,
                                                 &at);
            if (dc_fd_note(&t, num, ana[v][i]))
                tap_diag("%s: input %d index %lld: numeric %.8g, analytic %.8g", c->name, v,
                         (long long)i, num, (double)ana[v][i]);
        }
    st |= at.st;
    tap_ok(st == GRM_OK && t.bad == 0, "%s: d_pred, d_pos, d_neg vs central differences "
           "(worst rel err %.2g)", c->name, t.worst);
    ((const grm_head_ops *)harness_plugin("head-sampled-softmax")->ops)->destroy(head);
}

/* share_k = 1 is the per-row loss with the row's own r negatives, and share_k >= B the loss
 * with all B r negatives shared by the batch: both computed here from heads with share_k = 0,
 * without any grouping or shuffle. */
static void test_share_limits(void)
{
    const opt_case c1 = { "share_k=1", 6, 12, 5, 1, 0, 1, 0, 0.2, "blas" };
    const opt_case call = { "share_k=8>=B", 6, 12, 5, 1, 0, 8, 0, 0.2, "ref" };
    const opt_case c0 = { "shared", 6, 12, 5, 1, 0, 0, 0, 0.2, "ref" };
    void *h1 = opt_head(&c1, NULL, NULL), *hall = opt_head(&call, NULL, NULL);
    void *h0 = opt_head(&c0, NULL, NULL);
    static opt_data d;
    opt_fill(&c1, &d, h1, 5);
    double l1 = 0, lall = 0, l0 = 0;
    float dp1[48], dpos1[48], dneg1[96], dpa[48], dposa[48], dnega[96];
    float dp0[48], dpos0[48], dneg0[96];
    grm_status st = opt_loss(h1, &c1, &d, &l1, dp1, dpos1, dneg1);
    st |= opt_loss(hall, &call, &d, &lall, dpa, dposa, dnega);
    st |= opt_loss(h0, &c0, &d, &l0, dp0, dpos0, dneg0);
    // per row: a one-row batch with its own 2 negatives (weights: the row's weight)
    double num = 0, den = 0;
    float dprow[48], dposrow[48], dnegrow[96];
    for (int64_t b = 0; b < 6; b++) {
        static opt_data one;
        one = d;
        memcpy(one.pred, d.pred + b * 5, 20);
        memcpy(one.pos, d.pos + b * 5, 20);
        memcpy(one.neg, d.neg + b * 10, 40);
        one.pid[0] = d.pid[b];
        one.nid[0] = d.nid[2 * b];
        one.nid[1] = d.nid[2 * b + 1];
        one.w[0] = 1;
        const opt_case cr = { "row", 1, 2, 5, 1, 0, 0, 0, 0.2, "ref" };
        double lr = 0;
        st |= opt_loss(h0, &cr, &one, &lr, dprow + b * 5, dposrow + b * 5, dnegrow + b * 10);
        num += d.w[b] * lr;
        den += d.w[b];
    }
    // the per-row gradients scale by w_b / sum w
    for (int64_t b = 0; b < 6; b++) {
        const float sc = (float)(d.w[b] / den);
        for (int i = 0; i < 5; i++) {
            dprow[b * 5 + i] *= sc;
            dposrow[b * 5 + i] *= sc;
        }
        for (int i = 0; i < 10; i++) dnegrow[b * 10 + i] *= sc;
    }
    const float g1 = (float)l1, w1 = (float)(num / den), ga = (float)lall, wa = (float)l0;
    tap_ok(st == GRM_OK, "share_k limits: heads run");
    tap_close_f32(&g1, &w1, 1, 1e-5, 1e-7, "share_k = 1: loss = weighted mean of per-row "
                  "losses over own negatives");
    tap_close_f32(dp1, dprow, 30, 1e-4, 1e-6, "share_k = 1: d_pred per row");
    tap_close_f32(dneg1, dnegrow, 60, 1e-4, 1e-6, "share_k = 1: d_neg per row");
    tap_close_f32(&ga, &wa, 1, 1e-6, 1e-7, "share_k >= B: loss = all negatives shared "
                  "(share_k = 0, in_batch off)");
    tap_close_f32(dpa, dp0, 30, 1e-5, 1e-7, "share_k >= B: d_pred");
    tap_close_f32(dnega, dneg0, 60, 1e-5, 1e-7, "share_k >= B: d_neg");
    const grm_head_ops *ops = harness_plugin("head-sampled-softmax")->ops;
    ops->destroy(h1);
    ops->destroy(hall);
    ops->destroy(h0);
}

/* share_k: blas equals ref on a larger case (several chunks, a partial last group). */
static void test_share_impls(void)
{
    const opt_case cb = { "share blas", 61, 61 * 4, 8, 1, 0, 3, 0, 0.1, "blas" };
    const opt_case cr = { "share ref", 61, 61 * 4, 8, 1, 0, 3, 0, 0.1, "ref" };
    void *hb = opt_head(&cb, NULL, NULL), *hr = opt_head(&cr, NULL, NULL);
    static opt_data d;
    opt_fill(&cb, &d, hb, 8);
    static float a[3][256 * 8], b[3][256 * 8];
    double la = 0, lb = 0;
    grm_status st = opt_loss(hb, &cb, &d, &la, a[0], a[1], a[2]);
    st |= opt_loss(hr, &cr, &d, &lb, b[0], b[1], b[2]);
    const float fa = (float)la, fb = (float)lb;
    tap_ok(st == GRM_OK && fabs(fa - fb) <= 1e-4 * fabs(fb), "share_k = 3: blas loss %.7g = "
           "ref %.7g", fa, fb);
    tap_close_f32(a[0], b[0], 61 * 8, 1e-4, 1e-5, "share_k = 3 blas vs ref: d_pred");
    tap_close_f32(a[2], b[2], 61 * 4 * 8, 1e-4, 1e-5, "share_k = 3 blas vs ref: d_neg");
    const grm_head_ops *ops = harness_plugin("head-sampled-softmax")->ops;
    ops->destroy(hb);
    ops->destroy(hr);
}

/* neg_fp16: negatives exactly representable in FP16 give bit-identical results; others stay
 * within the fp16 tolerance of STYLE.md §9 (rtol 1e-2, atol 1e-3). */
static void test_fp16(void)
{
    const opt_case c = { "fp32", 9, 20, 8, 1, 1, 0, 0, 0.1, "blas" };
    void *h32 = opt_head(&c, NULL, NULL), *h16 = opt_head(&c, "neg_fp16=true", NULL);
    static opt_data d;
    opt_fill(&c, &d, h32, 3);
    static float a[3][256 * 8], b[3][256 * 8];
    double l32 = 0, l16 = 0;
    grm_status st = opt_loss(h32, &c, &d, &l32, a[0], a[1], a[2]);
    st |= opt_loss(h16, &c, &d, &l16, b[0], b[1], b[2]);
    const float f32v = (float)l32, f16v = (float)l16;
    tap_ok(st == GRM_OK && l16 != l32, "neg_fp16 changes the loss of generic negatives "
           "(%.9g vs %.9g)", l16, l32);
    tap_close_f32(&f16v, &f32v, 1, 1e-2, 1e-3, "neg_fp16 loss within fp16 tolerance of fp32");
    tap_close_f32(b[0], a[0], 9 * 8, 1e-2, 1e-3, "neg_fp16 d_pred within fp16 tolerance");
    tap_close_f32(b[2], a[2], 20 * 8, 1e-2, 1e-3, "neg_fp16 d_neg within fp16 tolerance");
    // round every negative to a multiple of 2^-8 in [-1, 1]: exact in FP16
    for (int64_t i = 0; i < 20 * 8; i++) d.neg[i] = roundf(d.neg[i] * 256.0f) / 256.0f;
    d.neg[0] = 0x1.0p-20f;                      // an FP16 subnormal, exact too
    st = opt_loss(h32, &c, &d, &l32, a[0], a[1], a[2]);
    st |= opt_loss(h16, &c, &d, &l16, b[0], b[1], b[2]);
    tap_ok(st == GRM_OK && l16 == l32 && memcmp(a[0], b[0], 9 * 8 * 4) == 0
           && memcmp(a[2], b[2], 20 * 8 * 4) == 0,
           "neg_fp16 on FP16-exact negatives (subnormal included) is bit-identical to fp32");
    const grm_head_ops *ops = harness_plugin("head-sampled-softmax")->ops;
    ops->destroy(h32);
    ops->destroy(h16);
}

static void test_opt_errors(void)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    const grm_head_ops *ops = info->ops;
    const void *cfg = NULL;
    void *inst = NULL;
    const char *ib[] = { "share_k=2" };
    grm_status st = harness_config_try(info, &cfg, ib, 1);
    if (st == GRM_OK) st = ops->create(cfg, 4, 1, &inst);
    dc_expect(st, GRM_EINVAL, "set in_batch = false", "share_k with in_batch on is refused");
    const char *neg[] = { "share_k=-1", "in_batch=false" };
    dc_expect(harness_config_try(info, &cfg, neg, 2), GRM_EINVAL, "share_k",
              "share_k = -1 is refused");
    const opt_case c = { "bad", 3, 7, 4, 0, 0, 2, 0, 1.0, "blas" };
    void *h = opt_head(&c, NULL, NULL);
    static opt_data d;
    opt_fill(&c, &d, h, 1);
    double l = 0;
    float t1[64], t2[64], t3[64];
    dc_expect(opt_loss(h, &c, &d, &l, t1, t2, t3), GRM_EINVAL, "io->nneg 7 is not a multiple "
              "of io->rows 3", "share_k with nneg not a multiple of rows");
    ops->destroy(h);
    // mixed negatives weigh the in-batch ones by popularity: no counts, no correction
    const char *mix[] = { "logq=true", "in_batch=true", "negatives=4" };
    inst = NULL;
    st = harness_config_try(info, &cfg, mix, 3);
    if (st == GRM_OK) st = ops->create(cfg, 4, 1, &inst);
    int64_t ids[4], n = 0, cids[3] = { 1, 2, 3 };
    const grm_catalog nocounts = { 3, cids, NULL };
    if (st == GRM_OK) st = ops->negatives(inst, ids, &n, 4, &nocounts, 1);
    dc_expect(st, GRM_EINVAL, "catalog->counts is NULL; set logq = false or in_batch = false",
              "logq with in_batch on a catalog without counts");
    ops->destroy(inst);
}

static void test_ssm_options(void)
{
    // name, B, R, D, l2norm, in_batch, share_k, logq, temperature, impl
    const opt_case torch_cases[] = {
        { "plain T=0.5 in-batch", 6, 5, 4, 0, 1, 0, 0, 0.5, "blas" },
        { "l2norm T=0.05 in-batch logQ", 7, 6, 5, 1, 1, 0, 1, 0.05, "blas" },
        { "l2norm T=0.2 no in-batch ref", 5, 4, 3, 1, 0, 0, 0, 0.2, "ref" },
        { "share_k=3 l2norm T=0.1", 7, 14, 4, 1, 0, 3, 0, 0.1, "blas" },
        { "share_k=2 logQ ref", 6, 18, 3, 0, 0, 2, 1, 0.5, "ref" },
    };
    for (size_t i = 0; i < sizeof torch_cases / sizeof *torch_cases; i++)
        test_opt_torch(&torch_cases[i]);
    const opt_case fd_cases[] = {
        { "fd l2norm in-batch", 4, 3, 3, 1, 1, 0, 0, 0.3, "ref" },
        { "fd share_k=2 l2norm", 5, 10, 3, 1, 0, 2, 0, 0.3, "ref" },
    };
    for (size_t i = 0; i < sizeof fd_cases / sizeof *fd_cases; i++)
        test_opt_fd(&fd_cases[i]);
    test_share_limits();
    test_share_impls();
    test_fp16();
    test_opt_errors();
}

/* ---- loss = bce: SASRec's sampled binary cross-entropy ---- */

typedef struct bce_case {
    const char *name;
    int64_t B, R, D;
    int l2norm, share_k;
    int64_t rown;                               /* row_negatives */
    double temperature;
    const char *impl;
} bce_case;

/* A head-sampled-softmax head with loss = bce (or `loss`) and the case's options. */
static void *bce_head(const bce_case *c, const char *loss)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    char t[64], l[32], k[32], rn[48], n[48], im[32], ls[32];
    snprintf(t, sizeof t, "temperature=%.17g", c->temperature);
    snprintf(l, sizeof l, "l2norm=%s", c->l2norm ? "true" : "false");
    snprintf(k, sizeof k, "share_k=%d", c->share_k);
    snprintf(rn, sizeof rn, "row_negatives=%lld", (long long)c->rown);
    snprintf(n, sizeof n, "negatives=%lld", (long long)c->R);
    snprintf(im, sizeof im, "impl=%s", c->impl);
    snprintf(ls, sizeof ls, "loss=%s", loss);
    const char *kvs[] = { t, l, k, rn, n, im, ls, "in_batch=false" };
    const void *cfg = NULL;
    void *inst = NULL;
    if (harness_config_try(info, &cfg, kvs, 8) != GRM_OK
        || ((const grm_head_ops *)info->ops)->create(cfg, c->D, 77, &inst) != GRM_OK) {
        printf("Bail out! bce head %s: %s\n", c->name, grm_last_error());
        exit(1);
    }
    return inst;
}

/* The opt_case that opt_fill and opt_loss take for the same shapes. */
static opt_case bce_as_opt(const bce_case *c)
{
    const opt_case o = { c->name, c->B, c->R, c->D, c->l2norm, 0, c->share_k, 0,
                         c->temperature, c->impl };
    return o;
}

/* Negatives each row owns for tests/ref/heads_bce.py: 0 (shared) or r. */
static int64_t bce_r(const bce_case *c)
{
    return c->share_k == 0 ? 0 : c->rown > 0 ? c->rown : c->R / c->B;
}

static void bce_destroy(void *h)
{
    ((const grm_head_ops *)harness_plugin("head-sampled-softmax")->ops)->destroy(h);
}

/* A case worked by hand: B = R = 1, D = 2, u = (1, 0.5), pos = (2, -1), neg = (-1, 2):
 * s+ = 1.5, s- = 0, loss = log(1 + e^-1.5) + log 2, d_pred = (sig(1.5) - 1) pos + neg / 2,
 * d_pos = (sig(1.5) - 1) u, d_neg = u / 2; with the negative's id equal to the positive's,
 * only the positive term remains. 3 checks. */
static void test_bce_hand(void)
{
    float u[2] = { 1.0f, 0.5f }, pos[2] = { 2.0f, -1.0f }, neg[2] = { -1.0f, 2.0f };
    int64_t pid[1] = { 5 }, nid[1] = { 6 };
    const double gp = 1.0 / (1.0 + exp(-1.5)) - 1.0;
    const float want_dp[2] = { (float)(gp * 2 - 0.5), (float)(gp * -1 + 1.0) };
    const float want_dpos[2] = { (float)gp, (float)(gp * 0.5) };
    const float want_dneg[2] = { 0.5f, 0.25f };
    const double want = log1p(exp(-1.5)) + log(2.0);
    const char *impls[2] = { "ref", "blas" };
    for (int i = 0; i < 2; i++) {
        const bce_case c = { "hand", 1, 1, 2, 0, 1, 0, 1.0, impls[i] };
        void *h = bce_head(&c, "bce");
        grm_loss_io io = new_io();
        float dp[2], dpos[2], dneg[2];
        io.rows = 1;
        io.dim = 2;
        io.pred = u;
        io.d_pred = dp;
        io.pos = pos;
        io.d_pos = dpos;
        io.pos_ids = pid;
        io.neg = neg;
        io.d_neg = dneg;
        io.neg_ids = nid;
        io.nneg = 1;
        grm_status st = ((const grm_head_ops *)harness_plugin("head-sampled-softmax")->ops)
                            ->loss(h, &io);
        int ok = st == GRM_OK && fabs(io.loss - want) < 1e-6;
        for (int d = 0; d < 2; d++)
            ok = ok && fabsf(dp[d] - want_dp[d]) < 1e-6f && fabsf(dpos[d] - want_dpos[d]) < 1e-6f
                 && fabsf(dneg[d] - want_dneg[d]) < 1e-6f;
        tap_ok(ok, "bce by hand (%s): loss %.9g = log(1+e^-1.5) + log 2 = %.9g, d_pred, d_pos, "
               "d_neg", impls[i], io.loss, want);
        if (i == 1) {
            nid[0] = 5;                         // the negative is the positive: masked
            st = ((const grm_head_ops *)harness_plugin("head-sampled-softmax")->ops)
                     ->loss(h, &io);
            tap_ok(st == GRM_OK && fabs(io.loss - log1p(exp(-1.5))) < 1e-6 && dneg[0] == 0.0f
                   && dneg[1] == 0.0f && fabsf(dp[0] - (float)(gp * 2)) < 1e-6f,
                   "bce: a negative equal to the row's positive is left out (loss %.9g, "
                   "d_neg 0)", io.loss);
        }
        bce_destroy(h);
    }
}

/* 5 checks: run, loss, d_pred, d_pos, d_neg against tests/ref/heads_bce.py. */
static void test_bce_torch(const bce_case *c)
{
    const char *py = dc_torch_python();
    if (py == NULL) {
        for (int i = 0; i < 5; i++)
            tap_skip("no torch", "PyTorch heads_bce.py %s check %d of 5", c->name, i + 1);
        return;
    }
    void *head = bce_head(c, "bce");
    const opt_case o = bce_as_opt(c);
    static opt_data d;
    opt_fill(&o, &d, head, 4321 + (uint64_t)c->B);
    const int64_t B = c->B, R = c->R, D = c->D;
    static float dp[64 * 8], dpos[64 * 8], dneg[256 * 8];
    double loss = 0;
    grm_status st = opt_loss(head, &o, &d, &loss, dp, dpos, dneg);
    char in[4200], out[4200];
    const char *dir = harness_tmpdir("dense-heads-bce");
    snprintf(in, sizeof in, "%s/in.bin", dir);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    FILE *f = fopen(in, "wb");
    const uint32_t hdr[2] = { 0x45434248u, 1u };
    const int64_t hd[5] = { B, R, D, c->l2norm, bce_r(c) };
    int ok = f != NULL && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(hd, sizeof hd, 1, f) == 1
             && fwrite(&c->temperature, 8, 1, f) == 1
             && fwrite(d.pred, 4, (size_t)(B * D), f) == (size_t)(B * D)
             && fwrite(d.pos, 4, (size_t)(B * D), f) == (size_t)(B * D)
             && fwrite(d.neg, 4, (size_t)(R * D), f) == (size_t)(R * D)
             && fwrite(d.pid, 8, (size_t)B, f) == (size_t)B
             && fwrite(d.nid, 8, (size_t)R, f) == (size_t)R
             && fwrite(d.w, 4, (size_t)B, f) == (size_t)B;
    if (f != NULL) fclose(f);
    static float wdp[64 * 8], wdpos[64 * 8], wdneg[256 * 8];
    double wloss = 0;
    ok = ok && run_torch_ref(py, "heads_bce.py", in, out, B, R, D, &wloss, wdp, wdpos, wdneg);
    tap_ok(ok && st == GRM_OK, "%s: head and tests/ref/heads_bce.py ran (%s)", c->name,
           st == GRM_OK ? "ok" : grm_last_error());
    char what[160];
    const float gl = (float)loss, wl = (float)wloss;
    snprintf(what, sizeof what, "torch %s: loss", c->name);
    tap_close_f32(&gl, &wl, 1, 1e-5, 1e-7, what);
    snprintf(what, sizeof what, "torch %s: d_pred", c->name);
    tap_close_f32(dp, wdp, B * D, 1e-4, 1e-6, what);
    snprintf(what, sizeof what, "torch %s: d_pos", c->name);
    tap_close_f32(dpos, wdpos, B * D, 1e-4, 1e-6, what);
    snprintf(what, sizeof what, "torch %s: d_neg (unused slots 0)", c->name);
    tap_close_f32(dneg, wdneg, R * D, 1e-4, 1e-6, what);
    bce_destroy(head);
}

/* Central differences (Richardson) of the ref loss against the analytic gradients. 1 check. */
static void test_bce_fd(const bce_case *c)
{
    void *head = bce_head(c, "bce");
    const opt_case o = bce_as_opt(c);
    static opt_data d;
    opt_fill(&o, &d, head, 17);
    static float dp[64 * 8], dpos[64 * 8], dneg[256 * 8];
    double loss = 0;
    grm_status st = opt_loss(head, &o, &d, &loss, dp, dpos, dneg);
    const float *ana[3] = { dp, dpos, dneg };
    opt_at at = { head, &o, &d, GRM_OK };
    dc_fd_tally t = { .floor = 2e-3, .tol = 5e-3 };
    for (int v = 0; v < 3; v++)
        for (int64_t i = 0; i < opt_len(&o, v); i++) {
            const double num = dc_richardson_f32(opt_var(&d, v) + i, 4e-3f, 2e-3f, opt_loss_at,
                                                 &at);
            if (dc_fd_note(&t, num, ana[v][i]))
                tap_diag("%s: input %d index %lld: numeric %.8g, analytic %.8g", c->name, v,
                         (long long)i, num, (double)ana[v][i]);
        }
    st |= at.st;
    tap_ok(st == GRM_OK && t.bad == 0, "%s: d_pred, d_pos, d_neg vs central differences "
           "(worst rel err %.2g)", c->name, t.worst);
    bce_destroy(head);
}

/* blas equals ref (several row chunks, masks, duplicates, weights). 4 checks per case. */
static void test_bce_impls(int64_t B, int64_t R, int share_k, int64_t rown)
{
    const bce_case cb = { "bce blas", B, R, 8, 0, share_k, rown, 0.7, "blas" };
    const bce_case cr = { "bce ref", B, R, 8, 0, share_k, rown, 0.7, "ref" };
    void *hb = bce_head(&cb, "bce"), *hr = bce_head(&cr, "bce");
    const opt_case o = bce_as_opt(&cb);
    static opt_data d;
    opt_fill(&o, &d, hb, 8);
    static float a[3][256 * 8], b[3][256 * 8];
    double la = 0, lb = 0;
    grm_status st = opt_loss(hb, &o, &d, &la, a[0], a[1], a[2]);
    st |= opt_loss(hr, &o, &d, &lb, b[0], b[1], b[2]);
    char what[160];
    const char *mode = share_k == 0 ? "shared" : "own";
    tap_ok(st == GRM_OK && fabs(la - lb) <= 1e-5 * fabs(lb), "bce %s B %lld R %lld: blas loss "
           "%.9g = ref %.9g", mode, (long long)B, (long long)R, la, lb);
    snprintf(what, sizeof what, "bce %s blas vs ref: d_pred", mode);
    tap_close_f32(a[0], b[0], B * 8, 1e-4, 1e-6, what);
    snprintf(what, sizeof what, "bce %s blas vs ref: d_pos", mode);
    tap_close_f32(a[1], b[1], B * 8, 1e-4, 1e-6, what);
    snprintf(what, sizeof what, "bce %s blas vs ref: d_neg", mode);
    tap_close_f32(a[2], b[2], R * 8, 1e-4, 1e-6, what);
    bce_destroy(hb);
    bce_destroy(hr);
}

/* The trainer's situation: negatives = 6400 (batch 128 x 50 tokens) drawn before the
 * step's rows are known, rows varying per step. With row_negatives = 1 row i uses slot i
 * and the other slots get a zero gradient; blas equals ref at every size, and a step with
 * more rows than negatives is refused. 4 checks. */
static void test_bce_varying_rows(void)
{
    const int64_t R = 6400, D = 8;
    const bce_case cb = { "vary blas", 1, R, D, 0, 1, 1, 1.0, "blas" };
    const bce_case cr = { "vary ref", 1, R, D, 0, 1, 1, 1.0, "ref" };
    void *hb = bce_head(&cb, "bce"), *hr = bce_head(&cr, "bce");
    const grm_head_ops *ops = harness_plugin("head-sampled-softmax")->ops;
    const int64_t cap = R + 1;
    float *pred = malloc((size_t)(cap * D) * 4), *pos = malloc((size_t)(cap * D) * 4);
    float *neg = malloc((size_t)(R * D) * 4), *g[2][3];
    int64_t *pid = malloc((size_t)cap * 8), *nid = malloc((size_t)R * 8);
    int64_t cat_ids[500];
    for (int i = 0; i < 500; i++) cat_ids[i] = 1000 + i;
    for (int k = 0; k < 2; k++) {
        g[k][0] = malloc((size_t)(cap * D) * 4);
        g[k][1] = malloc((size_t)(cap * D) * 4);
        g[k][2] = malloc((size_t)(R * D) * 4);
    }
    if (!pred || !pos || !neg || !pid || !nid || !g[0][0] || !g[0][1] || !g[0][2] || !g[1][0]
        || !g[1][1] || !g[1][2]) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    // the head's own draw, as the trainer does it: 6400 ids from a 500-item catalog
    grm_catalog cat = { 500, cat_ids, NULL };
    int64_t got = 0;
    grm_status st = ops->negatives(hb, nid, &got, 1 << 20, &cat, 3);
    uint64_t s = 91;
    for (int64_t i = 0; i < R * D; i++) neg[i] = harness_randf(&s);
    for (int64_t i = 0; i < cap * D; i++) {
        pred[i] = harness_randf(&s);
        pos[i] = harness_randf(&s);
    }
    for (int64_t i = 0; i < cap; i++) pid[i] = 1000 + (int64_t)(harness_rand(&s) % 500);
    const int64_t sizes[3] = { 1, 937, 6400 };
    int ok = st == GRM_OK && got == R;
    double worst = 0;
    for (int q = 0; q < 3; q++) {
        double l[2] = { 0, 0 };
        for (int k = 0; k < 2; k++) {
            for (int64_t i = 0; i < R * D; i++) g[k][2][i] = 1.0f;   // must be overwritten
            grm_loss_io io = new_io();
            io.rows = sizes[q];
            io.dim = D;
            io.pred = pred;
            io.d_pred = g[k][0];
            io.pos = pos;
            io.d_pos = g[k][1];
            io.pos_ids = pid;
            io.neg = neg;
            io.d_neg = g[k][2];
            io.neg_ids = nid;
            io.nneg = R;
            st = ops->loss(k == 0 ? hb : hr, &io);
            ok = ok && st == GRM_OK;
            l[k] = io.loss;
        }
        const int64_t B = sizes[q];
        ok = ok && fabs(l[0] - l[1]) <= 1e-5 * fabs(l[1]);
        for (int64_t i = 0; i < B * D; i++) {
            const double e0 = fabs(g[0][0][i] - g[1][0][i]) / (1e-6 + fabs(g[1][0][i]));
            const double e2 = fabs(g[0][2][i] - g[1][2][i]) / (1e-6 + fabs(g[1][2][i]));
            worst = fmax(worst, fmax(e0, e2));
        }
        for (int k = 0; k < 2; k++)
            for (int64_t i = B * D; i < R * D; i++) ok = ok && g[k][2][i] == 0.0f;
    }
    tap_ok(ok && worst < 1e-3, "bce, negatives = 6400, rows 1 / 937 / 6400: blas = ref "
           "(worst rel %.2g), slots past rows get d_neg = 0", worst);
    // row i's loss uses slot i only: the loss of 937 rows is the mean of 937 one-row losses
    // against their own slot
    double num = 0;
    for (int64_t b = 0; b < 937; b++) {
        double sp = 0, sn = 0;
        for (int64_t d = 0; d < D; d++) {
            sp += (double)pred[b * D + d] * pos[b * D + d];
            sn += (double)pred[b * D + d] * neg[b * D + d];
        }
        num += log1p(exp(-sp)) + (nid[b] == pid[b] ? 0.0 : log1p(exp(sn)));
    }
    grm_loss_io io = new_io();
    io.rows = 937;
    io.dim = D;
    io.pred = pred;
    io.pos = pos;
    io.pos_ids = pid;
    io.neg = neg;
    io.neg_ids = nid;
    io.nneg = R;
    st = ops->loss(hb, &io);
    tap_ok(st == GRM_OK && fabs(io.loss - num / 937) < 1e-5 * (num / 937), "bce, 937 rows of "
           "6400 negatives: loss %.9g = mean over rows of softplus(-s+) + softplus(s- of slot "
           "i) %.9g", io.loss, num / 937);
    io.rows = cap;
    dc_expect(ops->loss(hb, &io), GRM_EINVAL, "io->nneg 6400 is less than io->rows 6401 x "
              "row_negatives 1", "bce: a step with more rows than negatives is refused");
    // a softmax head with row_negatives behaves the same way (share_k = 1, r = 1)
    const opt_case so = { "softmax rown", 5, 13, 4, 0, 0, 1, 0, 0.5, "blas" };
    void *hs = opt_head(&so, "row_negatives=2", NULL);
    const opt_case s10 = { "softmax r=2", 5, 10, 4, 0, 0, 1, 0, 0.5, "ref" };
    void *h10 = opt_head(&s10, NULL, NULL);
    static opt_data d;
    opt_fill(&so, &d, hs, 21);
    static float a[3][256 * 8], b[3][256 * 8];
    double la = 0, lb = 0;
    for (int64_t i = 0; i < 13 * 4; i++) a[2][i] = 1.0f;
    st = opt_loss(hs, &so, &d, &la, a[0], a[1], a[2]);
    st |= opt_loss(h10, &s10, &d, &lb, b[0], b[1], b[2]);
    ok = st == GRM_OK && fabs(la - lb) <= 1e-5 * fabs(lb);
    for (int64_t i = 0; i < 10 * 4; i++)
        ok = ok && fabsf(a[2][i] - b[2][i]) <= 1e-4f * fabsf(b[2][i]) + 1e-6f;
    for (int64_t i = 10 * 4; i < 13 * 4; i++) ok = ok && a[2][i] == 0.0f;
    tap_ok(ok, "softmax, share_k = 1, row_negatives = 2, 5 rows of 13 negatives: loss %.9g = "
           "share_k = 1 on the first 10 (%.9g), d_neg equal there and 0 past them", la, lb);
    ops->destroy(hs);
    ops->destroy(h10);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++) free(g[k][j]);
    free(pred);
    free(pos);
    free(neg);
    free(pid);
    free(nid);
    bce_destroy(hb);
    bce_destroy(hr);
}

/* Refused combinations and counts: status and message. 7 checks. */
static void test_bce_errors(void)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    const grm_head_ops *ops = info->ops;
    const struct {
        const char *kv[3];
        const char *sub, *what;
    } bad[] = {
        { { "loss=bce", "in_batch=true", NULL }, "loss = bce: in-batch negatives are a "
          "softmax term; set in_batch = false", "bce with in_batch is refused" },
        { { "loss=bce", "in_batch=false", "logq=true" }, "set logq = false",
          "bce with logq is refused" },
        { { "loss=bce", "in_batch=false", "share_k=2" }, "use share_k = 1 (own negatives) "
          "or 0", "bce with share_k = 2 is refused" },
        { { "row_negatives=1", "in_batch=false", NULL }, "per-row negatives need share_k >= 1",
          "row_negatives with share_k = 0 is refused" },
        { { "row_negatives=-1", NULL, NULL }, "row_negatives", "row_negatives = -1 is "
          "refused" },
        { { "loss=hinge", NULL, NULL }, "loss", "loss = hinge is refused" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const void *cfg = NULL;
        void *inst = NULL;
        int n = 0;
        while (n < 3 && bad[i].kv[n] != NULL) n++;
        grm_status st = harness_config_try(info, &cfg, bad[i].kv, n);
        if (st == GRM_OK) st = ops->create(cfg, 4, 1, &inst);
        dc_expect(st, GRM_EINVAL, bad[i].sub, bad[i].what);
        ops->destroy(inst);
    }
    // without row_negatives, per-row negatives must divide evenly, as for softmax
    const bce_case c = { "bce divide", 3, 7, 4, 0, 1, 0, 1.0, "blas" };
    void *h = bce_head(&c, "bce");
    const opt_case o = bce_as_opt(&c);
    static opt_data d;
    opt_fill(&o, &d, h, 1);
    double l = 0;
    float t1[64], t2[64], t3[64];
    dc_expect(opt_loss(h, &o, &d, &l, t1, t2, t3), GRM_EINVAL, "io->nneg 7 is not a multiple "
              "of io->rows 3", "bce, share_k = 1, row_negatives = 0: nneg not a multiple of rows");
    bce_destroy(h);
}

static void test_bce_loss(void)
{
    test_bce_hand();
    // name, B, R, D, l2norm, share_k, row_negatives, temperature, impl
    const bce_case torch_cases[] = {
        { "bce own r=1", 7, 7, 5, 0, 1, 0, 1.0, "blas" },
        { "bce own row_negatives=1 of 10", 6, 10, 4, 0, 1, 1, 1.0, "blas" },
        { "bce own row_negatives=2 l2norm T=0.2 ref", 5, 13, 3, 1, 1, 2, 0.2, "ref" },
        { "bce shared T=0.5", 6, 5, 4, 0, 0, 0, 0.5, "blas" },
        { "bce shared l2norm ref", 5, 4, 3, 1, 0, 0, 1.0, "ref" },
    };
    for (size_t i = 0; i < sizeof torch_cases / sizeof *torch_cases; i++)
        test_bce_torch(&torch_cases[i]);
    const bce_case fd_cases[] = {
        { "fd bce own r=2", 5, 10, 3, 0, 1, 0, 0.7, "ref" },
        { "fd bce shared l2norm", 4, 5, 3, 1, 0, 0, 0.5, "ref" },
    };
    for (size_t i = 0; i < sizeof fd_cases / sizeof *fd_cases; i++)
        test_bce_fd(&fd_cases[i]);
    test_bce_impls(61, 61 * 3 + 5, 1, 3);
    test_bce_impls(61, 150, 0, 0);
    test_bce_varying_rows();
    test_bce_errors();
}

/* ABI 1.5: a retrieval head handed the item table's unique rows and the slots of the targets
 * and negatives (grm_loss_io.item_rows) gathers them and sums their gradients back itself.
 * Against the same loss on rows gathered here and gradients summed here, in the host's old
 * order (targets, then negatives, each in increasing order): equal bit for bit, with
 * duplicate slots, a negative that is also a target, and grad_scale. */
static void test_ssm_item_rows(void)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    const grm_head_ops *ops = info->ops;
    enum { B = 4, D = 3, R = 3, N = 5 };
    void *h = dc_make(info, harness_config(info, "in_batch=true", "temperature=0.5", NULL), D,
                      1);
    uint64_t rs = 7;
    float items[N * D], pred[B * D];
    for (int i = 0; i < N * D; i++) items[i] = harness_randf(&rs);
    for (int i = 0; i < B * D; i++) pred[i] = harness_randf(&rs);
    const int64_t pslot[B] = { 2, 0, 2, 4 }, nslot[R] = { 1, 4, 3 };
    const int64_t pid[B] = { 102, 100, 102, 104 }, nid[R] = { 101, 104, 103 };
    float pos[B * D], neg[R * D], dpos[B * D] = { 0 }, dneg[R * D] = { 0 };
    for (int b = 0; b < B; b++) memcpy(pos + b * D, items + pslot[b] * D, sizeof(float) * D);
    for (int j = 0; j < R; j++) memcpy(neg + j * D, items + nslot[j] * D, sizeof(float) * D);
    float da[B * D] = { 0 }, db[B * D] = { 0 }, wa[N * D] = { 0 }, wb[N * D] = { 0 };
    grm_loss_io io = new_io();
    io.rows = B;
    io.dim = D;
    io.pred = pred;
    io.d_pred = da;
    io.pos = pos;
    io.d_pos = dpos;
    io.pos_ids = pid;
    io.neg = neg;
    io.d_neg = dneg;
    io.neg_ids = nid;
    io.nneg = R;
    io.grad_scale = 0.5f;
    grm_status st = ops->loss(h, &io);
    const double la = io.loss;
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++) wa[pslot[b] * D + d] += dpos[b * D + d];
    for (int j = 0; j < R; j++)
        for (int d = 0; d < D; d++) wa[nslot[j] * D + d] += dneg[j * D + d];
    io = new_io();
    io.rows = B;
    io.dim = D;
    io.pred = pred;
    io.d_pred = db;
    io.pos_ids = pid;
    io.neg_ids = nid;
    io.nneg = R;
    io.grad_scale = 0.5f;
    io.item_rows = items;
    io.d_item_rows = wb;
    io.nitems = N;
    io.pos_slots = pslot;
    io.neg_slots = nslot;
    st |= ops->loss(h, &io);
    tap_ok(st == GRM_OK && io.loss == la && memcmp(da, db, sizeof da) == 0
               && memcmp(wa, wb, sizeof wa) == 0,
           "item_rows: loss, d_pred and the summed item-row gradients equal the gathered "
           "path bit for bit (loss %.9f)", la);
    const int64_t bad[B] = { 2, 0, 5, 4 };
    io.pos_slots = bad;
    dc_expect(ops->loss(h, &io), GRM_EINVAL, "outside", "item_rows with a slot past nitems");
    ops->destroy(h);
}

/* score_rows (ABI 1.8): a cosine head (l2norm) normalises the rows it is given, so a dot
 * product with any query ranks as its logits do; a dot-product head leaves them alone. */
static void test_ssm_score_rows(void)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    const grm_head_ops *ops = info->ops;
    enum { N = 6, D = 5 };
    void *cos = dc_make(info, harness_config(info, "l2norm=true", NULL), D, 1);
    void *dot = dc_make(info, harness_config(info, NULL), D, 1);
    uint64_t rs = 11;
    float raw[N * D], a[N * D], b[N * D];
    for (int i = 0; i < N * D; i++) raw[i] = 3.0f * harness_randf(&rs);
    memcpy(a, raw, sizeof a);
    memcpy(b, raw, sizeof b);
    grm_status st = GRM_HAS_OP(grm_head_ops, ops, score_rows) && ops->score_rows
                        ? ops->score_rows(cos, a, N, D) : GRM_ENOTSUP;
    double worst = 0;
    for (int r = 0; r < N; r++) {
        double n = 0;
        for (int d = 0; d < D; d++) n += (double)raw[r * D + d] * raw[r * D + d];
        for (int d = 0; d < D; d++)
            worst = fmax(worst, fabs(a[r * D + d] - raw[r * D + d] / sqrt(n)));
    }
    tap_ok(st == GRM_OK && worst < 1e-6, "score_rows with l2norm: every row divided by its "
           "norm (worst error %.2g)", worst);
    st = ops->score_rows(dot, b, N, D);
    tap_ok(st == GRM_OK && memcmp(b, raw, sizeof b) == 0,
           "score_rows without l2norm leaves the rows as they are");
    dc_expect(ops->score_rows(cos, a, N, D + 1), GRM_EINVAL, "created for 5",
              "score_rows with rows of another width");
    ops->destroy(cos);
    ops->destroy(dot);
}

int main(void)
{
    tap_plan(48 + 5 * 5 + 2 + 7 + 3 + 5 + 3 + 3 + 5 * 5 + 2 + 2 * 4 + 4 + 7 + 2 + 1 + 3);
    test_bce();
    test_ssm_loss();
    test_negatives();
    test_ssm_blas_vs_ref();
    test_ssm_options();
    test_bce_loss();
    test_ssm_item_rows();
    test_ssm_score_rows();
    return tap_done();
}
