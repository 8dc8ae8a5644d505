/* tests/test-opt-adagrad.c - opt-adagrad (torch.optim.Adagrad semantics; Duchi, Hazan &
 * Singer 2011): hand-derived two-step values, dense step() against sparse row_step() and
 * against the update written out here in double, per-row step counts (lr_decay and the
 * initial accumulator follow the row's own count), multi-step trajectories against
 * torch.optim.Adagrad (tests/ref/opt_adagrad.py), and every config and argument error. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "tap.h"

#define N 37
#define T_STEPS 6
#define TORCH_CASES 5
#define TORCH_POINTS (1 + 3 * TORCH_CASES)

static const grm_plugin_info *info;
static const grm_opt_ops *ops;

/* ---- independent double-precision reference ---- */

typedef struct adagrad_hp {
    double lr, lr_decay, wd, init, eps;
} adagrad_hp;

/* One Adagrad update at step t (1-based), torch.optim.Adagrad written out: the sum starts
 * at init (sum holds it before the first call), clr = lr / (1 + (t-1) lr_decay). */
static void adagrad_d(double *p, double *sum, const double *g, int n, int t,
                      const adagrad_hp *h)
{
    const double clr = h->lr / (1 + (t - 1) * h->lr_decay);
    for (int i = 0; i < n; i++) {
        const double gi = g[i] + h->wd * p[i];
        sum[i] += gi * gi;
        p[i] -= clr * gi / (sqrt(sum[i]) + h->eps);
    }
}

/* ---- fixtures and helpers ---- */

static float p0[N], grads[T_STEPS][N];

static void make_inputs(void)
{
    uint64_t s = 7;
    for (int i = 0; i < N; i++)
        p0[i] = harness_randf(&s) * 2.0f;
    for (int t = 0; t < T_STEPS; t++)
        for (int i = 0; i < N; i++)
            grads[t][i] = harness_randf(&s) * (t + 1) * 0.5f;
    grads[1][3] = 0.0f;     // a zero gradient in the middle of the run
    for (int t = 0; t < T_STEPS; t++)
        grads[t][5] = 0.0f; // an element that never sees a gradient
}

static void to_float(float *dst, const double *src, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

static void to_double(double *dst, const float *src, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = src[i];
}

static void *create_opt(const void *cfg)
{
    void *inst = NULL;
    if (ops->create(cfg, &inst) != GRM_OK) {
        printf("Bail out! opt-adagrad create: %s\n", grm_last_error());
        exit(1);
    }
    return inst;
}

/* A config from "key=value" strings built with printf formats (for the torch cases). */
static const void *config_of(const adagrad_hp *h)
{
    static char kv[5][64];
    snprintf(kv[0], sizeof kv[0], "lr=%.17g", h->lr);
    snprintf(kv[1], sizeof kv[1], "lr_decay=%.17g", h->lr_decay);
    snprintf(kv[2], sizeof kv[2], "weight_decay=%.17g", h->wd);
    snprintf(kv[3], sizeof kv[3], "initial_accumulator_value=%.17g", h->init);
    snprintf(kv[4], sizeof kv[4], "eps=%.17g", h->eps);
    return harness_config(info, kv[0], kv[1], kv[2], kv[3], kv[4], NULL);
}

/* ---- hand-derived values ---- */

static void test_hand(void)
{
    // lr 0.1, lr_decay 0.5, no wd, init 0. Element 0: g = 3 then 4, so sum = 9 then 25 and
    // p = 1 - 0.1 * 3/3 = 0.9, then 0.9 - (0.1/1.5) * 4/5. Element 1: g = 0.6 then -0.8,
    // sum = 0.36 then 1, p = -2 - 0.1 = -2.1, then -2.1 + (0.1/1.5) * 0.8.
    void *inst = create_opt(harness_config(info, "lr=0.1", "lr_decay=0.5", NULL));
    float p[2] = { 1.0f, -2.0f }, s[2] = { 0 };
    const float g1[2] = { 3.0f, 0.6f }, g2[2] = { 4.0f, -0.8f };
    grm_status st = ops->step(inst, p, s, g1, 2, 1);
    const float want1[2] = { 0.9f, -2.1f }, sum1[2] = { 9.0f, 0.36f };
    tap_close_f32(p, want1, 2, 1e-6, 1e-7, "lr 0.1: step 1 gives p = 1 - 0.1, -2 - 0.1");
    tap_close_f32(s, sum1, 2, 1e-6, 0, "  and the sums g^2 = 9, 0.36");
    st |= ops->step(inst, p, s, g2, 2, 2);
    const float want2[2] = { (float)(0.9 - 0.1 / 1.5 * 0.8), (float)(-2.1 + 0.1 / 1.5 * 0.8) };
    const float sum2[2] = { 25.0f, 1.0f };
    tap_close_f32(p, want2, 2, 1e-6, 1e-7, "lr_decay 0.5: step 2 uses clr = 0.1 / 1.5");
    tap_close_f32(s, sum2, 2, 1e-6, 0, "  and the sums 25, 1");
    tap_ok(st == GRM_OK, "both hand-checked steps return GRM_OK");
    ops->destroy(inst);

    // lr 0.5, weight_decay 0.5, init 5: p = 2, grad 1 -> g = 1 + 0.5 * 2 = 2, sum = 5 + 4
    // = 9, p = 2 - 0.5 * 2/3 = 5/3. grad 0.5 -> g = 0.5 + 5/6 = 4/3, sum = 9 + 16/9,
    // p = 5/3 - 0.5 * (4/3) / sqrt(97/9). The state holds garbage before the row's first
    // update, which must not matter: step 1 starts the sum at init.
    inst = create_opt(harness_config(info, "lr=0.5", "weight_decay=0.5",
                                     "initial_accumulator_value=5", NULL));
    float r[1] = { 2.0f }, rs[1] = { 100.0f };
    const float h1[1] = { 1.0f }, h2[1] = { 0.5f };
    st = ops->row_step(inst, r, rs, h1, 1, 1);
    const float w1 = (float)(5.0 / 3.0), ws1 = 9.0f;
    tap_close_f32(r, &w1, 1, 1e-6, 1e-7, "wd 0.5, init 5: row step 1 gives p = 5/3");
    tap_close_f32(rs, &ws1, 1, 1e-6, 0, "  and sum = init + g^2 = 9, overwriting the "
                  "garbage state");
    st |= ops->row_step(inst, r, rs, h2, 1, 2);
    const float w2 = (float)(5.0 / 3.0 - 0.5 * (4.0 / 3.0) / sqrt(97.0 / 9.0));
    const float ws2 = (float)(97.0 / 9.0);
    tap_close_f32(r, &w2, 1, 1e-6, 1e-7, "  row step 2 gives p = 5/3 - 0.5 (4/3) / "
                  "sqrt(97/9)");
    tap_close_f32(rs, &ws2, 1, 1e-6, 0, "  and sum = 9 + 16/9 (init counted once)");
    tap_ok(st == GRM_OK, "both hand-checked row steps return GRM_OK");
    ops->destroy(inst);
}

/* ---- dense step vs row_step vs the double reference ---- */

static void test_dense_vs_rows(void)
{
    const adagrad_hp h = { 0.3, 0.05, 0.02, 0.1, 1e-6 };
    void *inst = create_opt(config_of(&h));
    tap_ok(ops->state_floats(inst) == 1, "adagrad keeps 1 state float per element (the sum)");
    float pd[N], sd[N] = { 0 }, pr[N], sr[N] = { 0 }, want[N], wsum[N];
    double ref[N], sum[N], gd[N];
    memcpy(pd, p0, sizeof pd);
    memcpy(pr, p0, sizeof pr);
    to_double(ref, p0, N);
    for (int i = 0; i < N; i++)
        sum[i] = h.init;
    grm_status st = GRM_OK;
    for (int t = 1; t <= T_STEPS; t++) {
        st |= ops->step(inst, pd, sd, grads[t - 1], N, t);
        // the same tensor as 4 rows of up to 10 elements, each row at the same count
        for (int b = 0; b < N; b += 10) {
            const int32_t dim = N - b < 10 ? N - b : 10;
            st |= ops->row_step(inst, pr + b, sr + b, grads[t - 1] + b, dim, t);
        }
        to_double(gd, grads[t - 1], N);
        adagrad_d(ref, sum, gd, N, t, &h);
    }
    tap_ok(st == GRM_OK, "%d dense steps and %d row steps return GRM_OK", T_STEPS,
           4 * T_STEPS);
    tap_ok(memcmp(pd, pr, sizeof pd) == 0 && memcmp(sd, sr, sizeof sd) == 0,
           "step over the tensor and row_step over its rows give identical params and sums");
    to_float(want, ref, N);
    to_float(wsum, sum, N);
    tap_close_f32(pd, want, N, 1e-5, 1e-6, "all options (lr 0.3, lr_decay 0.05, wd 0.02, "
                  "init 0.1, eps 1e-6): params after 6 steps vs the double reference");
    tap_close_f32(sd, wsum, N, 1e-5, 1e-6, "  and the sums");
    ops->destroy(inst);

    // defaults: lr 0.01, lr_decay 0, wd 0, init 0, eps 1e-10
    const adagrad_hp d = { 0.01, 0, 0, 0, 1e-10 };
    inst = create_opt(harness_config(info, NULL));
    memcpy(pd, p0, sizeof pd);
    memset(sd, 0, sizeof sd);
    to_double(ref, p0, N);
    memset(sum, 0, sizeof sum);
    for (int t = 1; t <= 3; t++) {
        ops->step(inst, pd, sd, grads[t - 1], N, t);
        to_double(gd, grads[t - 1], N);
        adagrad_d(ref, sum, gd, N, t, &d);
    }
    to_float(want, ref, N);
    tap_close_f32(pd, want, N, 1e-5, 1e-7, "defaults (lr 0.01, eps 1e-10): params after 3 "
                  "steps; the never-updated element stays put");
    ops->destroy(inst);
}

/* ---- per-row step counts ---- */

static void test_row_counts(void)
{
    // row B is updated at global iterations 1..12, row A only at 10..12: A's updates are
    // its steps 1, 2, 3, so its clr has no decay on the first and its sum starts at init
    const adagrad_hp h = { 0.2, 0.1, 0.0, 0.3, 1e-10 };
    void *inst = create_opt(config_of(&h));
    enum { D = 8 };
    float ra[D], rb[D], sa[D] = { 0 }, sb[D] = { 0 }, wa[D], wb[D];
    double pa[D], pb[D], suma[D], sumb[D], gd[D];
    memcpy(ra, p0, sizeof ra);
    memcpy(rb, p0 + D, sizeof rb);
    to_double(pa, ra, D);
    to_double(pb, rb, D);
    for (int j = 0; j < D; j++)
        suma[j] = sumb[j] = h.init;
    grm_status st = GRM_OK;
    int64_t ta = 0, tb = 0;
    for (int it = 1; it <= 12; it++) {
        const float *g = grads[it % T_STEPS];
        if (it >= 10) {
            ta++;
            st |= ops->row_step(inst, ra, sa, g, D, ta);
            to_double(gd, g, D);
            adagrad_d(pa, suma, gd, D, (int)ta, &h);
        }
        tb++;
        st |= ops->row_step(inst, rb, sb, g + D, D, tb);
        to_double(gd, g + D, D);
        adagrad_d(pb, sumb, gd, D, (int)tb, &h);
    }
    to_float(wa, pa, D);
    to_float(wb, pb, D);
    tap_ok(st == GRM_OK, "row_step with per-row counts returns GRM_OK");
    tap_close_f32(ra, wa, D, 1e-5, 1e-6, "row first touched at global step 10 (its steps "
                  "1..3, lr_decay 0.1, init 0.3)");
    tap_close_f32(rb, wb, D, 1e-5, 1e-6, "row touched at every global step (its steps 1..12)");
    // the same row stepped with the global counts 10..12 would differ: a decayed clr and
    // no initial accumulator
    float rg[D], sg[D] = { 0 };
    memcpy(rg, p0, sizeof rg);
    for (int it = 10; it <= 12; it++)
        ops->row_step(inst, rg, sg, grads[it % T_STEPS], D, it);
    tap_ok(fabsf(rg[0] - ra[0]) > 1e-4f, "the per-row count matters: global steps 10..12 "
           "give another row (%g vs %g)", (double)rg[0], (double)ra[0]);
    ops->destroy(inst);
}

/* ---- torch.optim.Adagrad trajectories ---- */

static int read_f32(FILE *f, float **out, int64_t n)
{
    *out = malloc((size_t)(n > 0 ? n : 1) * sizeof **out);
    return *out != NULL && fread(*out, sizeof **out, (size_t)n, f) == (size_t)n;
}

static void torch_case(FILE *f, int k)
{
    double hp[5];
    int64_t dims[2] = { 0 };
    float *p0t = NULL, *g = NULL, *traj = NULL, *sum = NULL;
    float *pd = NULL, *sd = NULL, *pr = NULL, *sr = NULL, *got_d = NULL, *got_r = NULL;
    int ok = fread(hp, sizeof hp, 1, f) == 1 && fread(dims, sizeof dims, 1, f) == 1;
    const int64_t n = dims[0], T = dims[1];
    ok = ok && n > 0 && n <= 4096 && T > 0 && T <= 1000 && read_f32(f, &p0t, n)
         && read_f32(f, &g, T * n) && read_f32(f, &traj, T * n) && read_f32(f, &sum, n);
    if (!ok) {
        for (int i = 0; i < 3; i++)
            tap_ok(0, "torch case %d: check %d of 3 (truncated fixture)", k, i + 1);
        goto done;
    }
    const adagrad_hp h = { hp[0], hp[1], hp[2], hp[3], hp[4] };
    void *inst = create_opt(config_of(&h));
    pd = malloc((size_t)n * 4);
    pr = malloc((size_t)n * 4);
    sd = calloc((size_t)n, 4);
    sr = calloc((size_t)n, 4);
    got_d = malloc((size_t)(T * n) * 4);
    got_r = malloc((size_t)(T * n) * 4);
    memcpy(pd, p0t, (size_t)n * 4);
    memcpy(pr, p0t, (size_t)n * 4);
    grm_status st = GRM_OK;
    for (int64_t t = 0; t < T; t++) {
        st |= ops->step(inst, pd, sd, g + t * n, n, t + 1);
        st |= ops->row_step(inst, pr, sr, g + t * n, (int32_t)n, t + 1);
        memcpy(got_d + t * n, pd, (size_t)n * 4);
        memcpy(got_r + t * n, pr, (size_t)n * 4);
    }
    ops->destroy(inst);
    char what[256];
    snprintf(what, sizeof what, "torch case %d (lr %g, lr_decay %g, wd %g, init %g, eps %g): "
             "step params at all %lld steps vs torch.optim.Adagrad", k, h.lr, h.lr_decay,
             h.wd, h.init, h.eps, (long long)T);
    tap_close_f32(got_d, traj, T * n, 1e-5, 1e-6, what);
    snprintf(what, sizeof what, "torch case %d: row_step params at all %lld steps", k,
             (long long)T);
    if (st != GRM_OK)
        tap_diag("torch case %d: a step failed: %s", k, harness_host()->last_error());
    tap_close_f32(got_r, traj, T * n, 1e-5, 1e-6, what);
    snprintf(what, sizeof what, "torch case %d: final sum vs torch's state['sum']", k);
    tap_close_f32(sd, sum, n, 1e-5, 1e-6, what);
done:
    free(p0t), free(g), free(traj), free(sum);
    free(pd), free(sd), free(pr), free(sr), free(got_d), free(got_r);
}

static void test_torch(void)
{
    const char *py = getenv("PYTHON3");
    if (py == NULL || *py == '\0')
        py = "/usr/bin/python3";
    char cmd[8192], path[4096];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", py);
    if (system(cmd) != 0) {
        for (int i = 0; i < TORCH_POINTS; i++)
            tap_skip("no torch", "torch.optim.Adagrad check %d of %d", i + 1, TORCH_POINTS);
        return;
    }
    const char *src = harness_srcdir() != NULL ? harness_srcdir() : ".";
    snprintf(path, sizeof path, "%s/fixture.bin", harness_tmpdir("opt-adagrad"));
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/opt_adagrad.py' '%s'", py, src, path);
    const int rc = system(cmd);
    FILE *f = rc == 0 ? fopen(path, "rb") : NULL;
    uint32_t hdr[2] = { 0 };
    int64_t ncases = 0;
    const int ok = f != NULL && fread(hdr, sizeof hdr, 1, f) == 1 && hdr[0] == 0x41474D47u
                   && hdr[1] == 1 && fread(&ncases, sizeof ncases, 1, f) == 1
                   && ncases == TORCH_CASES;
    if (!tap_ok(ok, "tests/ref/opt_adagrad.py wrote a readable fixture (exit %d, %lld cases)",
                rc, (long long)ncases)) {
        for (int i = 1; i < TORCH_POINTS; i++)
            tap_ok(0, "torch.optim.Adagrad check %d of %d (no fixture)", i + 1, TORCH_POINTS);
    } else {
        for (int k = 0; k < TORCH_CASES; k++)
            torch_case(f, k);
    }
    if (f != NULL)
        fclose(f);
    remove(path);
}

/* ---- errors ---- */

/* The INI value kv must be refused, by the host's range check or by create, with
 * GRM_EINVAL and a message containing sub. */
static void check_ini_fails(const char *kv, const char *sub)
{
    const void *cfg = NULL;
    const char *kvs[1] = { kv };
    grm_status st = harness_config_try(info, &cfg, kvs, 1);
    const char *msg = harness_host()->last_error();
    void *inst = NULL;
    if (st == GRM_OK) {
        st = ops->create(cfg, &inst);
        msg = harness_host()->last_error();
    }
    tap_ok(st == GRM_EINVAL && inst == NULL && strstr(msg, sub) != NULL,
           "INI %s is refused with GRM_EINVAL naming '%s' (got %d: %s)", kv, sub, (int)st,
           msg);
    ops->destroy(inst);
}

/* create on a config struct whose double `name` is v (the host's range check bypassed, as
 * a caller filling the struct itself would) must fail with GRM_EINVAL naming sub. */
static void check_create_fails(const char *name, double v, const char *name2, double v2,
                               const char *sub)
{
    void *cfg = malloc(info->config_size);
    memcpy(cfg, harness_config(info, NULL), info->config_size);
    for (const grm_param_decl *d = info->params; d->name != NULL; d++) {
        if (strcmp(d->name, name) == 0)
            memcpy((char *)cfg + d->offset, &v, sizeof v);
        if (name2 != NULL && strcmp(d->name, name2) == 0)
            memcpy((char *)cfg + d->offset, &v2, sizeof v2);
    }
    void *inst = (void *)&inst;     // create must reset it
    const grm_status st = ops->create(cfg, &inst);
    const char *msg = harness_host()->last_error();
    tap_ok(st == GRM_EINVAL && inst == NULL && strstr(msg, sub) != NULL,
           "create refuses %s = %g%s with GRM_EINVAL naming '%s' (got %d: %s)", name, v,
           name2 != NULL ? " (with the second field set)" : "", sub, (int)st, msg);
    free(cfg);
}

static void check_call_fails(grm_status st, const char *sub, const char *what)
{
    const char *msg = harness_host()->last_error();
    tap_ok(st == GRM_EINVAL && strstr(msg, sub) != NULL, "%s is GRM_EINVAL naming '%s' (%s)",
           what, sub, msg);
}

static void test_errors(void)
{
    // the host's range checks, from the INI
    check_ini_fails("lr=-0.1", "lr");
    check_ini_fails("lr_decay=-1", "lr_decay");
    check_ini_fails("weight_decay=-0.5", "weight_decay");
    check_ini_fails("initial_accumulator_value=-1", "initial_accumulator_value");
    check_ini_fails("eps=-1e-9", "eps");
    check_ini_fails("eps=2", "eps");
    check_ini_fails("lr=fast", "not a number");
    check_ini_fails("momentum=0.9", "momentum");
    // the plugin's own checks, reachable from the INI
    check_ini_fails("lr=0", "opt-adagrad: lr: 0 must be a finite number > 0");
    check_ini_fails("eps=0", "opt-adagrad: eps: 0 together with initial_accumulator_value 0");
    const void *cfg = harness_config(info, "eps=0", "initial_accumulator_value=0.1", NULL);
    void *inst = NULL;
    tap_ok(ops->create(cfg, &inst) == GRM_OK && inst != NULL,
           "eps 0 is accepted when initial_accumulator_value > 0");
    ops->destroy(inst);

    // create on config structs filled by hand
    check_create_fails("lr", -1, NULL, 0, "opt-adagrad: lr: -1 must be");
    check_create_fails("lr", INFINITY, NULL, 0, "opt-adagrad: lr: inf");
    check_create_fails("lr_decay", -0.5, NULL, 0, "opt-adagrad: lr_decay: -0.5 must be");
    check_create_fails("weight_decay", -2, NULL, 0, "opt-adagrad: weight_decay: -2 must be");
    check_create_fails("initial_accumulator_value", -1, NULL, 0,
                       "opt-adagrad: initial_accumulator_value: -1 must be");
    check_create_fails("eps", -1e-3, NULL, 0, "opt-adagrad: eps: -0.001 must be");
    check_create_fails("eps", NAN, NULL, 0, "opt-adagrad: eps: nan");
    check_create_fails("eps", 0, "initial_accumulator_value", 0, "set eps > 0");
    inst = (void *)&inst;
    grm_status st = ops->create(NULL, &inst);
    check_call_fails(st, "must not be NULL", "create with a NULL config");

    // arguments of step and row_step
    inst = create_opt(harness_config(info, NULL));
    float p[4] = { 1, 2, 3, 4 }, s[4] = { 0 }, g[4] = { 1, 1, 1, 1 };
    check_call_fails(ops->step(inst, p, s, g, 4, 0), "step 0 must be >= 1", "step at step 0");
    check_call_fails(ops->row_step(inst, p, s, g, 4, -3), "row_step: step -3",
                     "row_step at step -3");
    check_call_fails(ops->step(inst, p, s, g, -1, 1), "-1 elements is negative",
                     "step of -1 elements");
    check_call_fails(ops->row_step(inst, p, s, g, -2, 1), "-2 elements is negative",
                     "row_step of dim -2");
    check_call_fails(ops->step(inst, p, NULL, g, 4, 1), "must not be NULL",
                     "step with a NULL state");
    check_call_fails(ops->row_step(inst, p, s, NULL, 4, 1), "must not be NULL",
                     "row_step with a NULL grad");
    check_call_fails(ops->row_step(inst, NULL, s, g, 4, 1), "must not be NULL",
                     "row_step with a NULL row");
    const float before[4] = { 1, 2, 3, 4 };
    tap_ok(memcmp(p, before, sizeof p) == 0, "failed calls leave the parameters untouched");
    tap_ok(ops->step(inst, NULL, NULL, NULL, 0, 1) == GRM_OK
           && ops->row_step(inst, NULL, NULL, NULL, 0, 1) == GRM_OK,
           "empty step and row_step (0 elements, NULL pointers) are no-ops");
    ops->destroy(inst);
    ops->destroy(NULL);
}

int main(void)
{
    tap_plan(66);
    make_inputs();
    info = harness_plugin("opt-adagrad");
    ops = info->ops;
    tap_ok(info->kind == GRM_KIND_OPT && strcmp(info->name, "opt-adagrad") == 0,
           "opt-adagrad is an optimizer plugin");
    test_hand();
    test_dense_vs_rows();
    test_row_counts();
    test_torch();
    test_errors();
    return tap_done();
}
