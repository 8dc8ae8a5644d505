/* tests/test-opt.c - opt-adam (Adam, AdamW) and opt-sgd (plain, momentum, Nesterov):
 * dense step() and sparse row_step() against the update rules written out here in
 * double (Kingma & Ba 2015 Alg. 1; Loshchilov & Hutter 2019 Alg. 2; torch.optim.SGD),
 * per-row step counts, state_floats, defaults, and every config and argument error. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "tap.h"

#define N 37

/* ---- independent double-precision references ---- */

typedef struct adam_hp {
    double lr, b1, b2, eps, wd;
    int adamw;
} adam_hp;

/* One Adam(W) update at step t (1-based) in the textbook form with m_hat and v_hat. */
static void adam_d(double *p, double *m, double *v, const double *g, int n, int t,
                   const adam_hp *h)
{
    for (int i = 0; i < n; i++) {
        const double gi = g[i] + (h->adamw ? 0.0 : h->wd * p[i]);
        m[i] = h->b1 * m[i] + (1 - h->b1) * gi;
        v[i] = h->b2 * v[i] + (1 - h->b2) * gi * gi;
        const double mh = m[i] / (1 - pow(h->b1, t));
        const double vh = v[i] / (1 - pow(h->b2, t));
        const double decayed = h->adamw ? p[i] - h->lr * h->wd * p[i] : p[i];
        p[i] = decayed - h->lr * mh / (sqrt(vh) + h->eps);
    }
}

typedef struct sgd_hp {
    double lr, mu, wd;
    int nesterov;
} sgd_hp;

/* One SGD update at step t (PyTorch: the buffer starts at g on the first step). */
static void sgd_d(double *p, double *buf, const double *g, int n, int t, const sgd_hp *h)
{
    for (int i = 0; i < n; i++) {
        double gi = g[i] + h->wd * p[i];
        if (h->mu > 0) {
            buf[i] = t == 1 ? gi : h->mu * buf[i] + gi;
            gi = h->nesterov ? gi + h->mu * buf[i] : buf[i];
        }
        p[i] -= h->lr * gi;
    }
}

/* ---- fixtures ---- */

static float p0[N], grads[6][N];

static void make_inputs(void)
{
    uint64_t s = 42;
    for (int i = 0; i < N; i++)
        p0[i] = harness_randf(&s) * 2.0f;
    for (int t = 0; t < 6; t++)
        for (int i = 0; i < N; i++)
            grads[t][i] = harness_randf(&s) * (t + 1) * 0.5f;
    grads[1][3] = 0.0f;     // a zero gradient in the middle of the run
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

static void *create_opt(const grm_plugin_info *info, const void *cfg)
{
    const grm_opt_ops *ops = info->ops;
    void *inst = NULL;
    if (ops->create(cfg, &inst) != GRM_OK) {
        printf("Bail out! %s create: %s\n", info->name, grm_last_error());
        exit(1);
    }
    return inst;
}

/* Run 3 dense steps of the plugin and of the reference; compare the parameters. */
static void check_adam_steps(const grm_plugin_info *info, const void *cfg, const adam_hp *h,
                             int row, const char *what)
{
    const grm_opt_ops *ops = info->ops;
    void *inst = create_opt(info, cfg);
    float p[N], state[2 * N] = { 0 }, want[N];
    double pd[N], m[N] = { 0 }, v[N] = { 0 }, gd[N];
    memcpy(p, p0, sizeof p);
    to_double(pd, p0, N);
    grm_status st = GRM_OK;
    for (int t = 1; t <= 3 && st == GRM_OK; t++) {
        st = row ? ops->row_step(inst, p, state, grads[t - 1], N, t)
                 : ops->step(inst, p, state, grads[t - 1], N, t);
        to_double(gd, grads[t - 1], N);
        adam_d(pd, m, v, gd, N, t, h);
    }
    to_float(want, pd, N);
    tap_ok(st == GRM_OK, "%s: all 3 calls return GRM_OK", what);
    tap_close_f32(p, want, N, 1e-5, 1e-6, what);
    float wm[N], wv[N];
    to_float(wm, m, N);
    to_float(wv, v, N);
    tap_close_f32(state, wm, N, 1e-5, 1e-7, "  its first moments (state[0:n])");
    tap_close_f32(state + N, wv, N, 1e-5, 1e-7, "  its second moments (state[n:2n])");
    ops->destroy(inst);
}

static void check_sgd_steps(const grm_plugin_info *info, const void *cfg, const sgd_hp *h,
                            int row, const char *what)
{
    const grm_opt_ops *ops = info->ops;
    void *inst = create_opt(info, cfg);
    float p[N], state[N] = { 0 }, want[N];
    double pd[N], buf[N] = { 0 }, gd[N];
    memcpy(p, p0, sizeof p);
    to_double(pd, p0, N);
    grm_status st = GRM_OK;
    for (int t = 1; t <= 3 && st == GRM_OK; t++) {
        st = row ? ops->row_step(inst, p, state, grads[t - 1], N, t)
                 : ops->step(inst, p, state, grads[t - 1], N, t);
        to_double(gd, grads[t - 1], N);
        sgd_d(pd, buf, gd, N, t, h);
    }
    to_float(want, pd, N);
    tap_ok(st == GRM_OK, "%s: all 3 calls return GRM_OK", what);
    tap_close_f32(p, want, N, 1e-5, 1e-6, what);
    ops->destroy(inst);
}

/* Status and message of a create that must fail. */
static void check_create_fails(const grm_plugin_info *info, const char *kv, const char *sub)
{
    const void *cfg = NULL;
    const char *kvs[1] = { kv };
    grm_status st = harness_config_try(info, &cfg, kvs, 1);
    const char *msg = "";
    void *inst = NULL;
    if (st == GRM_OK) {
        st = ((const grm_opt_ops *)info->ops)->create(cfg, &inst);
        msg = harness_host()->last_error();
    }
    tap_ok(st == GRM_EINVAL && inst == NULL && strstr(msg, sub) != NULL,
           "%s refuses %s with GRM_EINVAL naming '%s' (got %d: %s)", info->name, kv, sub,
           (int)st, msg);
}

/* Updates of `info` at lr 0.02 scaled by 0.5 are bitwise those of lr 0.01; scale 1 gives
 * lr 0.02 back; a negative or NaN scale is refused. kv1, kv2: the rest of the config. */
static void check_lr_scale(const grm_plugin_info *info, const char *what, const char *kv1,
                           const char *kv2)
{
    const grm_opt_ops *ops = info->ops;
    void *a = create_opt(info, harness_config(info, "lr=0.02", kv1, kv2, NULL));
    void *half = create_opt(info, harness_config(info, "lr=0.01", kv1, kv2, NULL));
    void *full = create_opt(info, harness_config(info, "lr=0.02", kv1, kv2, NULL));
    float pa[N], pb[N], sa[2 * N] = { 0 }, sb[2 * N] = { 0 };
    memcpy(pa, p0, sizeof pa);
    memcpy(pb, p0, sizeof pb);
    grm_status st = ops->set_lr_scale(a, 0.5);
    for (int t = 1; t <= 3 && st == GRM_OK; t++) {
        st = ops->row_step(a, pa, sa, grads[t - 1], N, t);
        if (st == GRM_OK) st = ops->step(half, pb, sb, grads[t - 1], N, t);
    }
    tap_ok(st == GRM_OK && memcmp(pa, pb, sizeof pa) == 0 && memcmp(sa, sb, sizeof sa) == 0,
           "%s: 3 updates at lr 0.02 scaled by 0.5 are bitwise those at lr 0.01", what);
    if (st == GRM_OK) st = ops->set_lr_scale(a, 1.0);
    if (st == GRM_OK) st = ops->row_step(a, pa, sa, grads[3], N, 4);
    if (st == GRM_OK) st = ops->step(full, pb, sb, grads[3], N, 4);
    tap_ok(st == GRM_OK && memcmp(pa, pb, sizeof pa) == 0,
           "%s: scale 1 gives the configured lr back (a 4th update equals lr 0.02's)", what);
    st = ops->set_lr_scale(a, -1.0);
    const grm_status st2 = ops->set_lr_scale(a, NAN);
    tap_ok(st == GRM_EINVAL && st2 == GRM_EINVAL
           && strstr(harness_host()->last_error(), "scale") != NULL,
           "%s: a negative or NaN scale is GRM_EINVAL (%s)", what, harness_host()->last_error());
    ops->destroy(a);
    ops->destroy(half);
    ops->destroy(full);
}

int main(void)
{
    tap_plan(56);
    make_inputs();
    const grm_plugin_info *adam = harness_plugin("opt-adam");
    const grm_plugin_info *sgd = harness_plugin("opt-sgd");
    const grm_opt_ops *aops = adam->ops, *sops = sgd->ops;
    tap_ok(adam->kind == GRM_KIND_OPT && sgd->kind == GRM_KIND_OPT,
           "opt-adam and opt-sgd are optimizer plugins");

    // ---- state_floats ----
    void *inst = create_opt(adam, harness_config(adam, NULL));
    tap_ok(aops->state_floats(inst) == 2, "adam keeps 2 state floats per element (m, v)");
    aops->destroy(inst);
    inst = create_opt(sgd, harness_config(sgd, NULL));
    tap_ok(sops->state_floats(inst) == 0, "sgd without momentum keeps no state");
    sops->destroy(inst);
    inst = create_opt(sgd, harness_config(sgd, "momentum=0.9", NULL));
    tap_ok(sops->state_floats(inst) == 1, "sgd with momentum 0.9 keeps 1 state float");
    sops->destroy(inst);

    // ---- Adam and AdamW ----
    const adam_hp a_l2 = { 0.01, 0.9, 0.99, 1e-6, 0.1, 0 };
    const void *cfg = harness_config(adam, "lr=0.01", "beta1=0.9", "beta2=0.99", "eps=1e-6",
                                     "weight_decay=0.1", NULL);
    check_adam_steps(adam, cfg, &a_l2, 0, "adam (L2 wd 0.1) step: parameters after 3 "
                     "updates vs the double reference");
    check_adam_steps(adam, cfg, &a_l2, 1, "adam (L2 wd 0.1) row_step: parameters after 3 "
                     "updates vs the double reference");
    const adam_hp a_w = { 0.05, 0.8, 0.95, 1e-8, 0.2, 1 };
    cfg = harness_config(adam, "lr=0.05", "beta1=0.8", "beta2=0.95", "weight_decay=0.2",
                         "variant=adamw", NULL);
    check_adam_steps(adam, cfg, &a_w, 0, "adamw (decoupled wd 0.2) step: parameters after "
                     "3 updates vs the double reference");
    check_adam_steps(adam, cfg, &a_w, 1, "adamw (decoupled wd 0.2) row_step: parameters "
                     "after 3 updates vs the double reference");
    const adam_hp a_def = { 1e-3, 0.9, 0.999, 1e-8, 0.0, 0 };
    check_adam_steps(adam, harness_config(adam, NULL), &a_def, 0,
                     "adam with default parameters (lr 1e-3, 0.9, 0.999, 1e-8)");

    // row_step with per-row step counts: row A is updated at iterations 1..2, row B at
    // 1..5; each row's bias correction must follow its own count (TF sparse Adam)
    {
        inst = create_opt(adam, harness_config(adam, "lr=0.02", "variant=adamw",
                                               "weight_decay=0.05", NULL));
        const adam_hp h = { 0.02, 0.9, 0.999, 1e-8, 0.05, 1 };
        enum { D = 8 };
        float ra[D], rb[D], sa[2 * D] = { 0 }, sb[2 * D] = { 0 }, wa[D], wb[D];
        double pa[D], pb[D], ma[D] = { 0 }, va[D] = { 0 }, mb[D] = { 0 }, vb[D] = { 0 };
        double gd[D];
        memcpy(ra, p0, sizeof ra);
        memcpy(rb, p0 + D, sizeof rb);
        to_double(pa, ra, D);
        to_double(pb, rb, D);
        grm_status st = GRM_OK;
        int64_t ta = 0, tb = 0;
        for (int it = 0; it < 5; it++) {
            if (it >= 3) {      // row A is touched only in the last two iterations
                ta++;
                st |= aops->row_step(inst, ra, sa, grads[it], D, ta);
                to_double(gd, grads[it], D);
                adam_d(pa, ma, va, gd, D, (int)ta, &h);
            }
            tb++;
            st |= aops->row_step(inst, rb, sb, grads[it] + D, D, tb);
            to_double(gd, grads[it] + D, D);
            adam_d(pb, mb, vb, gd, D, (int)tb, &h);
        }
        to_float(wa, pa, D);
        to_float(wb, pb, D);
        tap_ok(st == GRM_OK, "adamw row_step with per-row counts returns GRM_OK");
        tap_close_f32(ra, wa, D, 1e-5, 1e-6, "adamw row touched twice (steps 1, 2)");
        tap_close_f32(rb, wb, D, 1e-5, 1e-6, "adamw row touched five times (steps 1..5)");
        // the same row stepped with the global count instead would differ
        float rg[D], sg[2 * D] = { 0 };
        memcpy(rg, p0, sizeof rg);
        aops->row_step(inst, rg, sg, grads[3], D, 4);
        aops->row_step(inst, rg, sg, grads[4], D, 5);
        tap_ok(fabsf(rg[0] - ra[0]) > 1e-4f, "the per-row count matters: global steps 4, 5 "
               "give another row (%g vs %g)", (double)rg[0], (double)ra[0]);
        aops->destroy(inst);
    }

    // ---- SGD ----
    const sgd_hp s_plain = { 0.1, 0.0, 0.01, 0 };
    cfg = harness_config(sgd, "lr=0.1", "weight_decay=0.01", NULL);
    check_sgd_steps(sgd, cfg, &s_plain, 0, "sgd (wd 0.01) step: parameters after 3 updates");
    check_sgd_steps(sgd, cfg, &s_plain, 1, "sgd (wd 0.01) row_step: parameters after 3 updates");
    const sgd_hp s_mom = { 0.05, 0.9, 0.0, 0 };
    cfg = harness_config(sgd, "lr=0.05", "momentum=0.9", NULL);
    check_sgd_steps(sgd, cfg, &s_mom, 0, "sgd momentum 0.9 step: parameters after 3 updates");
    check_sgd_steps(sgd, cfg, &s_mom, 1, "sgd momentum 0.9 row_step: parameters after 3 updates");
    const sgd_hp s_nes = { 0.05, 0.8, 0.02, 1 };
    cfg = harness_config(sgd, "lr=0.05", "momentum=0.8", "nesterov=true",
                         "weight_decay=0.02", NULL);
    check_sgd_steps(sgd, cfg, &s_nes, 0, "sgd nesterov 0.8 (wd 0.02) step: parameters after "
                    "3 updates");
    check_sgd_steps(sgd, cfg, &s_nes, 1, "sgd nesterov 0.8 (wd 0.02) row_step: parameters "
                    "after 3 updates");
    {
        // a row stepped for the first time starts its buffer at g even when the state
        // holds garbage (per-row counts: the row's own step 1)
        inst = create_opt(sgd, harness_config(sgd, "lr=0.5", "momentum=0.5", NULL));
        float r[2] = { 1.0f, 2.0f }, s[2] = { 100.0f, -100.0f };
        const float g[2] = { 0.5f, -1.0f };
        sops->row_step(inst, r, s, g, 2, 1);
        const float want[2] = { 1.0f - 0.25f, 2.0f + 0.5f };
        tap_close_f32(r, want, 2, 0, 1e-7, "sgd row_step at the row's step 1 uses buf = g");
        sops->destroy(inst);
    }

    // ---- the learning-rate scale (ABI 1.9, [train] lr_warmup / lr_decay) ----
    check_lr_scale(adam, "adamw (wd 0.1)", "weight_decay=0.1", "variant=adamw");
    check_lr_scale(sgd, "sgd momentum 0.9", "momentum=0.9", NULL);

    // ---- errors ----
    check_create_fails(adam, "lr=0", "lr");
    check_create_fails(adam, "beta1=1", "beta1");
    check_create_fails(adam, "beta2=1", "beta2");
    check_create_fails(sgd, "lr=0", "lr");
    check_create_fails(sgd, "nesterov=true", "nesterov");
    inst = create_opt(adam, harness_config(adam, NULL));
    float p[4] = { 0 }, s[8] = { 0 }, g[4] = { 0 };
    grm_status st = aops->step(inst, p, s, g, 4, 0);
    tap_ok(st == GRM_EINVAL && strstr(harness_host()->last_error(), "step 0") != NULL,
           "adam step 0 is GRM_EINVAL naming the step (%s)", harness_host()->last_error());
    st = aops->row_step(inst, p, NULL, g, 4, 1);
    tap_ok(st == GRM_EINVAL && strstr(harness_host()->last_error(), "NULL") != NULL,
           "adam row_step with NULL state is GRM_EINVAL (%s)", harness_host()->last_error());
    aops->destroy(inst);
    inst = create_opt(sgd, harness_config(sgd, "momentum=0.9", NULL));
    st = sops->step(inst, p, NULL, g, 4, 1);
    tap_ok(st == GRM_EINVAL && strstr(harness_host()->last_error(), "state") != NULL,
           "sgd with momentum and NULL state is GRM_EINVAL (%s)", harness_host()->last_error());
    st = sops->step(inst, p, s, g, -1, 1);
    tap_ok(st == GRM_EINVAL && strstr(harness_host()->last_error(), "negative") != NULL,
           "sgd step of -1 elements is GRM_EINVAL (%s)", harness_host()->last_error());
    sops->destroy(inst);
    aops->destroy(NULL);
    sops->destroy(NULL);
    return tap_done();
}
