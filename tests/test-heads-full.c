/* tests/test-heads-full.c - head-sampled-softmax with catalog = all: the full-catalog
 * cross-entropy (plugins/head-sampled-softmax/heads_full.c and its reference in heads_ref.c).
 * Loss and gradients against torch's cross_entropy (tests/ref/heads_full.py; label
 * smoothing, L2 normalization, temperature, weights), the blocked path against the plain
 * loops on a catalog of several blocks with duplicate ids and a positive missing from the
 * catalog, label smoothing 0 against the sampled softmax over the same rows, central
 * differences of every input, the negatives op (the whole catalog) and the refused
 * combinations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense-checks.h"
#include "harness.h"
#include "tap.h"

#define MAXB 160
#define MAXC 720
#define MAXD 16

static const grm_head_ops *ops(void)
{
    return harness_plugin("head-sampled-softmax")->ops;
}

/* A catalog = all head (in_batch off) with the given options; extra: one more key or NULL. */
static void *full_head(const char *impl, int l2norm, double T, double eps, int64_t D,
                       const char *extra)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    char t[64], l[32], e[64], im[32];
    snprintf(t, sizeof t, "temperature=%.17g", T);
    snprintf(l, sizeof l, "l2norm=%s", l2norm ? "true" : "false");
    snprintf(e, sizeof e, "label_smoothing=%.17g", eps);
    snprintf(im, sizeof im, "impl=%s", impl);
    const char *kvs[7] = { "catalog=all", "in_batch=false", t, l, e, im, extra };
    const void *cfg = NULL;
    void *inst = NULL;
    if (harness_config_try(info, &cfg, kvs, extra != NULL ? 7 : 6) != GRM_OK
        || ops()->create(cfg, D, 7, &inst) != GRM_OK) {
        printf("Bail out! full head: %s\n", grm_last_error());
        exit(1);
    }
    return inst;
}

typedef struct full_data {
    int64_t B, C, D;
    float pred[MAXB * MAXD], pos[MAXB * MAXD], cat[MAXC * MAXD], w[MAXB];
    int64_t tgt[MAXB], pid[MAXB], cid[MAXC];
} full_data;

/* Random rows; row b's positive is catalog row tgt[b] (its id and its values). */
static void full_fill(full_data *d, int64_t B, int64_t C, int64_t D, uint64_t seed)
{
    uint64_t s = seed;
    d->B = B;
    d->C = C;
    d->D = D;
    for (int64_t i = 0; i < B * D; i++) d->pred[i] = harness_randf(&s) * 1.5f;
    for (int64_t i = 0; i < C * D; i++) d->cat[i] = harness_randf(&s);
    for (int64_t j = 0; j < C; j++) d->cid[j] = 1000 + j;
    for (int64_t b = 0; b < B; b++) {
        d->tgt[b] = (int64_t)(harness_rand(&s) % (uint64_t)C);
        d->pid[b] = d->cid[d->tgt[b]];
        d->w[b] = 0.5f + (float)(harness_rand(&s) % 4) * 0.5f;
        memcpy(d->pos + b * D, d->cat + d->tgt[b] * D, (size_t)D * sizeof(float));
    }
}

static grm_status full_loss(void *h, const full_data *d, double *loss, float *dp, float *dpos,
                            float *dcat)
{
    grm_loss_io io;
    memset(&io, 0, sizeof io);
    io.struct_size = sizeof io;
    io.rows = d->B;
    io.dim = d->D;
    io.pred = d->pred;
    io.d_pred = dp;
    io.weights = d->w;
    io.pos = d->pos;
    io.d_pos = dpos;
    io.pos_ids = d->pid;
    io.neg = d->cat;
    io.d_neg = dcat;
    io.neg_ids = d->cid;
    io.nneg = d->C;
    grm_status st = ops()->loss(h, &io);
    *loss = io.loss;
    return st;
}

/* 4 checks: ran, loss, d_pred, and d_cat (the head's d_neg plus d_pos summed into each
 * target's catalog row, which is where torch puts the target's gradient). */
static void test_torch(const char *impl, int64_t B, int64_t C, int64_t D, int l2norm,
                       double T, double eps)
{
    char name[128];
    snprintf(name, sizeof name, "%s B=%lld C=%lld D=%lld l2norm=%d T=%g eps=%g", impl,
             (long long)B, (long long)C, (long long)D, l2norm, T, eps);
    const char *py = dc_torch_python();
    if (py == NULL) {
        for (int i = 0; i < 4; i++) tap_skip("no torch", "torch %s check %d of 4", name, i + 1);
        return;
    }
    static full_data d;
    full_fill(&d, B, C, D, 4321 + (uint64_t)C);
    void *h = full_head(impl, l2norm, T, eps, D, NULL);
    static float dp[MAXB * MAXD], dpos[MAXB * MAXD], dcat[MAXC * MAXD];
    double loss = 0;
    grm_status st = full_loss(h, &d, &loss, dp, dpos, dcat);
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < D; k++) dcat[d.tgt[b] * D + k] += dpos[b * D + k];
    char in[4200], out[4200], cmd[9000];
    const char *dir = harness_tmpdir("heads-full");
    snprintf(in, sizeof in, "%s/in.bin", dir);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    FILE *f = fopen(in, "wb");
    const uint32_t hdr[2] = { 0x46444847u, 1u };
    const int64_t hd[4] = { B, C, D, l2norm };
    const double dd[2] = { T, eps };
    int ok = f != NULL && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(hd, sizeof hd, 1, f) == 1
             && fwrite(dd, sizeof dd, 1, f) == 1
             && fwrite(d.pred, 4, (size_t)(B * D), f) == (size_t)(B * D)
             && fwrite(d.cat, 4, (size_t)(C * D), f) == (size_t)(C * D)
             && fwrite(d.tgt, 8, (size_t)B, f) == (size_t)B
             && fwrite(d.w, 4, (size_t)B, f) == (size_t)B;
    if (f != NULL) fclose(f);
    const char *src = harness_srcdir() != NULL ? harness_srcdir() : ".";
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/heads_full.py' '%s' '%s'", py, src, in, out);
    ok = ok && system(cmd) == 0;
    static float wdp[MAXB * MAXD], wdcat[MAXC * MAXD];
    double wloss = 0;
    f = ok ? fopen(out, "rb") : NULL;
    ok = f != NULL && fread(&wloss, 8, 1, f) == 1
         && fread(wdp, 4, (size_t)(B * D), f) == (size_t)(B * D)
         && fread(wdcat, 4, (size_t)(C * D), f) == (size_t)(C * D);
    if (f != NULL) fclose(f);
    tap_ok(ok && st == GRM_OK, "%s: head and tests/ref/heads_full.py ran (%s)", name,
           st == GRM_OK ? "ok" : grm_last_error());
    char what[200];
    const float gl = (float)loss, wl = (float)wloss;
    snprintf(what, sizeof what, "torch cross_entropy %s: loss", name);
    tap_close_f32(&gl, &wl, 1, 1e-4, 1e-6, what);
    snprintf(what, sizeof what, "torch cross_entropy %s: d_pred", name);
    tap_close_f32(dp, wdp, B * D, 1e-4, 1e-5, what);
    snprintf(what, sizeof what, "torch cross_entropy %s: d_cat", name);
    tap_close_f32(dcat, wdcat, C * D, 1e-4, 1e-5, what);
    ops()->destroy(h);
}

/* The blocked path against the plain loops: 150 rows (tiles of 64 and a partial one), 700
 * items (two full blocks of 256 and a partial one), a duplicated id (two masked columns for
 * its rows) and a positive missing from the catalog (an extra class). 4 checks. */
static void test_blas_vs_ref(void)
{
    static full_data d;
    full_fill(&d, 150, 700, 16, 11);
    d.cid[301] = d.cid[300];
    d.tgt[3] = 300;
    d.pid[3] = d.cid[300];
    memcpy(d.pos + 3 * 16, d.cat + 300 * 16, 16 * sizeof(float));
    d.pid[7] = 99999;                           // not in the catalog; pos row stays its own
    for (int k = 0; k < 16; k++) d.pos[7 * 16 + k] = 0.25f * (float)(k % 5) - 0.5f;
    void *hb = full_head("blas", 0, 0.3, 0.1, 16, NULL), *hr = full_head("ref", 0, 0.3, 0.1, 16,
                                                                         NULL);
    static float a[3][MAXC * MAXD], r[3][MAXC * MAXD];
    double la = 0, lr = 0;
    grm_status st = full_loss(hb, &d, &la, a[0], a[1], a[2]);
    st |= full_loss(hr, &d, &lr, r[0], r[1], r[2]);
    const float fa = (float)la, fr = (float)lr;
    tap_ok(st == GRM_OK && fabs(la - lr) <= 1e-5 * fabs(lr), "catalog = all blas loss %.9g = "
           "ref %.9g (150 rows, 700 items, duplicate id, positive outside the catalog)", fa, fr);
    tap_close_f32(a[0], r[0], 150 * 16, 1e-4, 1e-5, "catalog = all blas vs ref: d_pred");
    tap_close_f32(a[1], r[1], 150 * 16, 1e-4, 1e-5, "catalog = all blas vs ref: d_pos");
    tap_close_f32(a[2], r[2], 700 * 16, 1e-4, 1e-5, "catalog = all blas vs ref: d_cat");
    ops()->destroy(hb);
    ops()->destroy(hr);
}

/* label_smoothing 0: the sampled softmax whose negatives are the whole catalog (in_batch off,
 * the positive's copy masked) is the same loss. 3 checks. */
static void test_equals_sampled(void)
{
    static full_data d;
    full_fill(&d, 9, 40, 6, 5);
    void *hf = full_head("blas", 1, 0.1, 0.0, 6, NULL);
    const void *cfg = NULL;
    void *hs = NULL;
    const char *kvs[] = { "negatives=40", "in_batch=false", "l2norm=true", "temperature=0.1",
                          "impl=ref" };
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    if (harness_config_try(info, &cfg, kvs, 5) != GRM_OK || ops()->create(cfg, 6, 7, &hs)) {
        printf("Bail out! sampled head: %s\n", grm_last_error());
        exit(1);
    }
    static float a[3][MAXC * MAXD], s[3][MAXC * MAXD];
    double lf = 0, ls = 0;
    grm_status st = full_loss(hf, &d, &lf, a[0], a[1], a[2]);
    st |= full_loss(hs, &d, &ls, s[0], s[1], s[2]);
    tap_ok(st == GRM_OK && fabs(lf - ls) <= 1e-5 * fabs(ls), "catalog = all loss %.9g = "
           "sampled softmax over the whole catalog %.9g", lf, ls);
    tap_close_f32(a[0], s[0], 9 * 6, 1e-4, 1e-5, "catalog = all vs sampled over the catalog: "
                  "d_pred");
    tap_close_f32(a[2], s[2], 40 * 6, 1e-4, 1e-5, "catalog = all vs sampled over the catalog: "
                  "d_neg");
    ops()->destroy(hf);
    ops()->destroy(hs);
}

typedef struct fd_at {
    void *h;
    const full_data *d;
    grm_status st;
} fd_at;

static double fd_loss(void *ctx)
{
    fd_at *a = ctx;
    static float t1[MAXB * MAXD], t2[MAXB * MAXD], t3[MAXC * MAXD];
    double loss = 0;
    a->st |= full_loss(a->h, a->d, &loss, t1, t2, t3);
    return loss;
}

/* Central differences (Richardson) of the blocked path's loss with respect to every input:
 * pred, pos and the catalog rows, with smoothing, normalization, a duplicate id and a
 * positive outside the catalog. 1 check. */
static void test_fd(void)
{
    static full_data d;
    full_fill(&d, 5, 11, 3, 21);
    d.cid[4] = d.cid[3];
    d.pid[2] = 77777;
    void *h = full_head("blas", 1, 0.3, 0.15, 3, NULL);
    static float dp[MAXB * MAXD], dpos[MAXB * MAXD], dcat[MAXC * MAXD];
    double loss = 0;
    grm_status st = full_loss(h, &d, &loss, dp, dpos, dcat);
    float *vars[3] = { d.pred, d.pos, d.cat };
    const float *ana[3] = { dp, dpos, dcat };
    const int64_t len[3] = { 5 * 3, 5 * 3, 11 * 3 };
    fd_at at = { h, &d, GRM_OK };
    dc_fd_tally t = { .floor = 2e-3, .tol = 5e-3 };
    for (int v = 0; v < 3; v++)
        for (int64_t i = 0; i < len[v]; i++) {
            const double num = dc_richardson_f32(vars[v] + i, 4e-3f, 2e-3f, fd_loss, &at);
            if (dc_fd_note(&t, num, ana[v][i]))
                tap_diag("fd: input %d index %lld: numeric %.8g, analytic %.8g", v,
                         (long long)i, num, (double)ana[v][i]);
        }
    st |= at.st;
    tap_ok(st == GRM_OK && t.bad == 0, "catalog = all: d_pred, d_pos, d_cat vs central "
           "differences with label smoothing 0.15 and l2norm (worst rel err %.2g)", t.worst);
    ops()->destroy(h);
}

/* The negatives op hands back the whole catalog; a catalog larger than max is refused. */
static void test_negatives(void)
{
    void *h = full_head("blas", 0, 1.0, 0.0, 4, NULL);
    int64_t ids[8] = { 0 }, counts[5] = { 1, 2, 3, 4, 5 }, cat[5] = { 9, 3, 7, 1, 5 }, n = -1;
    const grm_catalog c = { 5, cat, counts };
    grm_status st = ops()->negatives(h, ids, &n, 8, &c, 3);
    tap_ok(st == GRM_OK && n == 5 && memcmp(ids, cat, sizeof cat) == 0,
           "catalog = all: negatives are the catalog's 5 ids in its order (n %lld)",
           (long long)n);
    dc_expect(ops()->negatives(h, ids, &n, 4, &c, 3), GRM_EINVAL, "exceed the 4 negatives",
              "catalog = all with a catalog larger than max");
    ops()->destroy(h);
}

static void test_errors(void)
{
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    const void *cfg = NULL;
    void *inst = NULL;
    const char *ib[] = { "catalog=all" };
    grm_status st = harness_config_try(info, &cfg, ib, 1);
    if (st == GRM_OK) st = ops()->create(cfg, 4, 1, &inst);
    dc_expect(st, GRM_EINVAL, "set in_batch = false", "catalog = all with in_batch on");
    const char *lq[] = { "catalog=all", "in_batch=false", "logq=true" };
    st = harness_config_try(info, &cfg, lq, 3);
    if (st == GRM_OK) st = ops()->create(cfg, 4, 1, &inst);
    dc_expect(st, GRM_EINVAL, "set logq = false", "catalog = all with logq");
    const char *ls[] = { "label_smoothing=0.1" };
    st = harness_config_try(info, &cfg, ls, 1);
    if (st == GRM_OK) st = ops()->create(cfg, 4, 1, &inst);
    dc_expect(st, GRM_EINVAL, "needs catalog = all", "label_smoothing with sampled negatives");
}

int main(void)
{
    tap_plan(3 * 4 + 4 + 3 + 1 + 2 + 3);
    test_torch("blas", 7, 300, 5, 0, 0.5, 0.0);
    test_torch("blas", 70, 600, 8, 1, 0.05, 0.1);
    test_torch("ref", 5, 9, 3, 1, 0.2, 0.2);
    test_blas_vs_ref();
    test_equals_sampled();
    test_fd();
    test_negatives();
    test_errors();
    return tap_done();
}
