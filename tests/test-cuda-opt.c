/* tests/test-cuda-opt.c - kernels/row_opt.cu (row optimizers fused with the aggregation of
 * duplicate ids) against plain C written here: the duplicate gradients of each unique row
 * are summed in occurrence order, then SGD (plain, momentum, Nesterov), Adam, AdamW or
 * Adagrad (torch.optim semantics) updates the row with its own step count. Two steps in a
 * row, D = 1, 33, 128, per-row step counts starting at 0..3 (so SGD's first-step buffer
 * rule is hit), a unique row with no occurrence (must stay untouched). Tolerance: rtol
 * 1e-4, atol 1e-5 (the GPU contracts multiply-adds). Without a device the reference is
 * still checked against the opt-sgd and opt-adam plugins' row_step, so the test pins the
 * semantics the kernel must follow. */
#include <math.h>

#include <grm/opt.h>

#include "cuda-common.h"

#define NROWS 300
#define NOCC 2000
#define NUNIQ 151          /* 150 rows with occurrences + 1 without */
#define N_CFG 6
#define N_DIM 3
#define N_NEG 5
#define N_PLUGIN 3

static const int32_t dims[N_DIM] = {1, 33, 128};

static grm_cuda_row_opt cfgs[N_CFG] = {
    {.kind = GRM_CUDA_OPT_SGD, .lr = 0.1, .weight_decay = 0.01},
    {.kind = GRM_CUDA_OPT_SGD, .lr = 0.05, .momentum = 0.9},
    {.kind = GRM_CUDA_OPT_SGD, .lr = 0.05, .momentum = 0.8, .nesterov = 1, .weight_decay = 0.1},
    {.kind = GRM_CUDA_OPT_ADAM, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-6,
     .weight_decay = 0.1},
    {.kind = GRM_CUDA_OPT_ADAMW, .lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-8,
     .weight_decay = 0.2},
    {.kind = GRM_CUDA_OPT_ADAGRAD, .lr = 0.1, .eps = 1e-10, .weight_decay = 0.01,
     .lr_decay = 0.01, .initial_accumulator_value = 0.1},
};
static const char *cfg_names[N_CFG] = {"sgd wd 0.01", "sgd momentum 0.9",
                                       "sgd nesterov 0.8 wd 0.1", "adam wd 0.1",
                                       "adamw wd 0.2", "adagrad lr_decay 0.01 wd 0.01 init 0.1"};

/* ---- the reference: one update of one row [D] with its summed gradient g [D] ---- */
static void ref_update(float *p, float *st, const float *g0, int32_t D, int64_t t,
                       const grm_cuda_row_opt *o)
{
    for (int32_t j = 0; j < D; j++) {
        float g = g0[j];
        if (o->kind == GRM_CUDA_OPT_SGD) {
            g = g + (float)o->weight_decay * p[j];
            if (o->momentum > 0) {
                st[j] = t == 1 ? g : (float)o->momentum * st[j] + g;
                g = o->nesterov ? g + (float)o->momentum * st[j] : st[j];
            }
            p[j] -= (float)o->lr * g;
        } else if (o->kind == GRM_CUDA_OPT_ADAGRAD) {
            const float clr = (float)(o->lr / (1.0 + (double)(t - 1) * o->lr_decay));
            g = g + (float)o->weight_decay * p[j];
            /* plugins/opt-adagrad: the sum starts at initial_accumulator_value */
            st[j] = (t == 1 ? (float)o->initial_accumulator_value : st[j]) + g * g;
            p[j] -= clr * g / (sqrtf(st[j]) + (float)o->eps);
        } else {
            const int w = o->kind == GRM_CUDA_OPT_ADAMW;
            const double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
            g = g + (w ? 0.0f : (float)o->weight_decay) * p[j];
            st[j] = (float)o->beta1 * st[j] + (float)(1.0 - o->beta1) * g;
            st[D + j] = (float)o->beta2 * st[D + j] + (float)(1.0 - o->beta2) * g * g;
            const float decayed = p[j] * (w ? (float)(1.0 - o->lr * o->weight_decay) : 1.0f);
            p[j] = decayed - (float)(o->lr / bc1) * st[j] /
                                 (sqrtf(st[D + j]) * (float)(1.0 / sqrt(bc2)) + (float)o->eps);
        }
    }
}

typedef struct occs {
    int64_t rows[NUNIQ];        /* distinct rows */
    int64_t coff[NUNIQ + 1];    /* CSR offsets over occurrences */
    int64_t cidx[NOCC];         /* occurrences, increasing within each unique */
} occs;

/* NOCC occurrences of 150 distinct rows (duplicate-heavy: some rows once, some ~40 times),
 * plus a 151st unique row with no occurrence. */
static void make_occs(occs *o, uint64_t *rng)
{
    int64_t inv[NOCC], fill[NUNIQ] = {0};
    for (int64_t u = 0; u < NUNIQ; u++) o->rows[u] = (u * 7 + 3) % NROWS;  /* distinct */
    for (int64_t i = 0; i < NOCC; i++) {
        const uint64_t r = harness_rand(rng);
        inv[i] = (int64_t)(r % 4 == 0 ? r % 10 : r % 150);   /* u < 10 are hot */
    }
    memset(o->coff, 0, sizeof o->coff);
    for (int64_t i = 0; i < NOCC; i++) o->coff[inv[i] + 1]++;
    for (int64_t u = 0; u < NUNIQ; u++) o->coff[u + 1] += o->coff[u];
    for (int64_t i = 0; i < NOCC; i++) o->cidx[o->coff[inv[i]] + fill[inv[i]]++] = i;
}

static void run_case(const occs *o, const grm_cuda_row_opt *opt, const char *name, int32_t D,
                     uint64_t *rng)
{
    const int32_t S = grm_cuda_row_opt_state_floats(opt);
    const size_t tn = (size_t)NROWS * D, sn = tn * (size_t)(S > 0 ? S : 1);
    float *table = tc_xmalloc(tn * 4), *state = tc_xmalloc(sn * 4);
    float *grad = tc_xmalloc((size_t)NOCC * D * 4), *g = tc_xmalloc((size_t)D * 4);
    int64_t steps[NROWS];
    for (size_t i = 0; i < tn; i++) table[i] = harness_randf(rng);
    for (size_t i = 0; i < sn; i++) state[i] = 0.5f * (harness_randf(rng) + 1.0f);  /* >= 0 */
    for (size_t i = 0; i < (size_t)NOCC * D; i++) grad[i] = harness_randf(rng);
    for (int64_t r = 0; r < NROWS; r++) steps[r] = (int64_t)(harness_rand(rng) % 4);
    float *d_table = tc_upload(table, tn * 4), *d_state = tc_upload(state, sn * 4);
    float *d_grad = tc_upload(grad, (size_t)NOCC * D * 4);
    int64_t *d_steps = tc_upload(steps, sizeof steps), *d_rows = tc_upload(o->rows, sizeof o->rows);
    int64_t *d_coff = tc_upload(o->coff, sizeof o->coff);
    int64_t *d_cidx = tc_upload(o->cidx, sizeof o->cidx);
    grm_status st = GRM_OK;

    for (int pass = 0; pass < 2; pass++) {
        for (int64_t u = 0; u < NUNIQ; u++) {
            if (o->coff[u + 1] == o->coff[u]) continue;
            memset(g, 0, (size_t)D * 4);
            for (int64_t k = o->coff[u]; k < o->coff[u + 1]; k++)
                for (int32_t j = 0; j < D; j++) g[j] += grad[o->cidx[k] * D + j];
            const int64_t r = o->rows[u];
            ref_update(table + r * D, state + r * (int64_t)S * D, g, D, ++steps[r], opt);
        }
        if (st == GRM_OK)
            st = grm_cuda_row_opt_step(d_table, S > 0 ? d_state : NULL, d_steps, d_grad, d_rows,
                                       d_coff, d_cidx, NUNIQ, D, opt, NULL);
    }
    float *got = tc_xmalloc((tn + sn) * 4), *want = tc_xmalloc((tn + sn) * 4);
    int64_t got_steps[NROWS];
    tc_download(got, d_table, tn * 4);
    tc_download(got + tn, d_state, sn * 4);
    tc_download(got_steps, d_steps, sizeof got_steps);
    memcpy(want, table, tn * 4);
    memcpy(want + tn, state, sn * 4);
    char what[160];
    snprintf(what, sizeof what, "row_opt_step %s D=%d: rows and state after 2 steps (st=%d)",
             name, D, (int)st);
    tap_close_f32(got, want, (int64_t)(tn + (S > 0 ? sn : 0)), 1e-4, 1e-5, what);
    int ok = 1;
    for (int64_t r = 0; r < NROWS; r++) ok &= got_steps[r] == steps[r];
    tap_ok(ok, "row_opt_step %s D=%d: per-row step counts (untouched row unchanged)", name, D);
    grm_cuda_free(d_table), grm_cuda_free(d_state), grm_cuda_free(d_grad);
    grm_cuda_free(d_steps), grm_cuda_free(d_rows), grm_cuda_free(d_coff), grm_cuda_free(d_cidx);
    free(table), free(state), free(grad), free(g), free(got), free(want);
}

/* The reference against the CPU plugins' row_step over 3 steps of one row (no device). */
static void plugin_check(const char *plugin, const grm_cuda_row_opt *opt, const char *name,
                         const char *kv0, const char *kv1, const char *kv2, const char *kv3,
                         const char *kv4)
{
    enum { D = 37 };
    const grm_plugin_info *info = harness_plugin(plugin);
    const grm_opt_ops *ops = info->ops;
    const void *cfg = harness_config(info, kv0, kv1, kv2, kv3, kv4, NULL);
    void *inst = NULL;
    uint64_t rng = 99;
    float p1[D], p2[D], s1[2 * D] = {0}, s2[2 * D] = {0}, g[D];
    for (int j = 0; j < D; j++) p1[j] = p2[j] = harness_randf(&rng);
    grm_status st = ops->create(cfg, &inst);
    for (int64_t t = 1; t <= 3 && st == GRM_OK; t++) {
        for (int j = 0; j < D; j++) g[j] = harness_randf(&rng);
        st = ops->row_step(inst, p1, s1, g, D, t);
        ref_update(p2, s2, g, D, t, opt);
    }
    ops->destroy(inst);
    float both1[3 * D], both2[3 * D];
    memcpy(both1, p1, sizeof p1), memcpy(both1 + D, s1, sizeof s1);
    memcpy(both2, p2, sizeof p2), memcpy(both2 + D, s2, sizeof s2);
    char what[160];
    snprintf(what, sizeof what, "test reference %s agrees with %s row_step over 3 steps (st=%d)",
             name, plugin, (int)st);
    tap_close_f32(both2, both1, 3 * D, 1e-6, 1e-7, what);
}

static void negative_tests(void)
{
    grm_cuda_row_opt bad = {.kind = 9, .lr = 0.1};
    float x = 0;
    int64_t i = 0;
    tc_expect_error(grm_cuda_row_opt_step(&x, &x, &i, &x, &i, &i, &i, 1, 4, &bad, NULL),
                    GRM_EINVAL, "optimizer kind 9 unknown", "row_opt_step refuses kind 9");
    grm_cuda_row_opt o = cfgs[3];
    o.lr = 0;
    tc_expect_error(grm_cuda_row_opt_step(&x, &x, &i, &x, &i, &i, &i, 1, 4, &o, NULL),
                    GRM_EINVAL, "lr 0 must be > 0", "row_opt_step refuses lr 0");
    tc_expect_error(grm_cuda_row_opt_step(&x, &x, &i, &x, &i, &i, &i, 1, 0, &cfgs[0], NULL),
                    GRM_EINVAL, "D 0 < 1", "row_opt_step refuses D 0");
    tc_expect_error(grm_cuda_row_opt_step(&x, NULL, &i, &x, &i, &i, &i, 1, 4, &cfgs[5], NULL),
                    GRM_EINVAL, "state is NULL but the optimizer keeps 1",
                    "row_opt_step refuses a NULL state for adagrad");
    tap_ok(grm_cuda_row_opt_state_floats(&cfgs[0]) == 0 &&
               grm_cuda_row_opt_state_floats(&cfgs[1]) == 1 &&
               grm_cuda_row_opt_state_floats(&cfgs[3]) == 2 &&
               grm_cuda_row_opt_state_floats(&cfgs[4]) == 2 &&
               grm_cuda_row_opt_state_floats(&cfgs[5]) == 1 &&
               grm_cuda_row_opt_state_floats(&bad) == -1,
           "state floats: sgd 0, sgd momentum 1, adam(w) 2, adagrad 1, unknown -1");
}

int main(void)
{
    uint64_t rng = 0x6f7074ULL;
    tap_plan(N_NEG + N_PLUGIN + N_CFG * N_DIM * 2);
    negative_tests();
    plugin_check("opt-sgd", &cfgs[2], cfg_names[2], "lr=0.05", "momentum=0.8", "nesterov=1",
                 "weight_decay=0.1", NULL);
    plugin_check("opt-adam", &cfgs[3], cfg_names[3], "lr=0.01", "beta1=0.9", "beta2=0.99",
                 "eps=1e-6", "weight_decay=0.1");
    plugin_check("opt-adam", &cfgs[4], cfg_names[4], "lr=0.05", "beta1=0.8", "beta2=0.95",
                 "weight_decay=0.2", "variant=adamw");
    if (!tc_have_device()) {
        for (int k = 0; k < N_CFG * N_DIM * 2; k++)
            tap_skip(CUDA_SKIP, "row optimizer case %d", k + 1);
        return tap_done();
    }
    occs o;
    make_occs(&o, &rng);
    for (int c = 0; c < N_CFG; c++)
        for (int d = 0; d < N_DIM; d++) run_case(&o, &cfgs[c], cfg_names[c], dims[d], &rng);
    return tap_done();
}
