/* tests/test-emb-static.c - emb-static driven through its ops table, and the row
 * initializer of grm/rng.h it relies on. The optimizer is tests/emb-fakes.c's fake (row -=
 * 0.5 * grad; state counts updates and records the step), so every expected value is
 * computed by hand in this file. Reference values of grm/rng.h were computed independently in
 * Python (splitmix64, fmix64, FNV-1a and grm_row_init transcribed from their definitions). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grm/emb.h>
#include <grm/rng.h>

#include "emb-fakes.h"
#include "harness.h"
#include "tap.h"

/* ---- helpers ---- */

static size_t tensor_bytes(const grm_named_tensor *t)
{
    size_t b = grm_dtype_size(t->tensor.dtype);
    for (int d = 0; d < t->tensor.ndim; d++) b *= (size_t)t->tensor.shape[d];
    return b;
}

static void *create_store(const grm_emb_table_spec *specs, int32_t n, fake_opt *o,
                          const char *kv1)
{
    const void *cfg = harness_config(info, kv1, (const char *)NULL);
    grm_optimizer opt = { &fake_ops, o };
    void *s = NULL;
    if (ops->create(cfg, specs, n, o ? &opt : NULL, &s) != GRM_OK) {
        printf("Bail out! create: %s\n", harness_host()->last_error());
        exit(1);
    }
    return s;
}

/* ---- the tests ---- */

static void test_rng(void)
{
    uint64_t st = 0;
    tap_ok(grm_splitmix64(&st) == UINT64_C(0xE220A8397B1DCDAF),
           "rng: splitmix64 from state 0 gives the published first output");
    tap_ok(grm_mix64(0) == 0 && grm_mix64(1) == UINT64_C(0xB456BCFC34C2CB2C),
           "rng: mix64 (fmix64) of 0 and 1 match values computed in Python");
    tap_ok(grm_str_hash64("") == UINT64_C(0xCBF29CE484222325)
           && grm_str_hash64("a") == UINT64_C(0xAF63DC4C8601EC8C)
           && grm_str_hash64("item") == UINT64_C(0x2841A0C596D6F426),
           "rng: str_hash64 is FNV-1a 64 (\"\", \"a\", \"item\")");
    tap_ok(grm_row_seed(42, grm_str_hash64("item"), 7) == UINT64_C(0x66C9C21ADF965E75),
           "rng: row seed is mix64(seed ^ mix64(table_hash ^ mix64(id)))");

    double lo = 1, hi = 0;
    st = 12345;
    for (int i = 0; i < 100000; i++) {
        const double u = grm_rng_uniform01(&st);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    tap_ok(lo >= 0 && hi < 1 && lo < 1e-3 && hi > 1 - 1e-3,
           "rng: uniform01 stays in [0, 1) and covers it (min %g, max %g)", lo, hi);

    const uint64_t th = grm_str_hash64("item");
    float got[5];
    static const float want_u[5] = { -0.02706071361899376f, -0.031749337911605835f,
                                     0.030092129483819008f, 0.029929975047707558f,
                                     -0.034212131053209305f };
    grm_row_init(got, 5, GRM_EMB_INIT_UNIFORM, 0.05, 42, th, 7);
    tap_close_f32(got, want_u, 5, 1e-6, 1e-9, "rng: uniform row (seed 42, 'item', id 7)");
    static const float want_n[5] = { -0.014346819370985031f, -0.013441412709653378f,
                                     -0.1499522477388382f, 0.012620489113032818f,
                                     -0.06183377280831337f };
    grm_row_init(got, 5, GRM_EMB_INIT_NORMAL, 0.1, 42, th, -3);
    tap_close_f32(got, want_n, 5, 1e-6, 1e-9, "rng: normal row (seed 42, 'item', id -3)");
}

static const grm_emb_table_spec specs[] = {
    { "item", 1683, 16, GRM_EMB_INIT_UNIFORM, 0.05, 42 },
    { "user", 2000, 64, GRM_EMB_INIT_NORMAL, 0.1, 42 },
    { "zero", 10, 3, GRM_EMB_INIT_ZEROS, 0.0, 42 },
};

static void test_init(void)
{
    fake_opt o = { .S = 2 };
    void *s = create_store(specs, 3, &o, NULL);

    // Lookup equals grm_row_init for a spread of ids, first and last included.
    const int64_t ids[6] = { 0, 1682, 7, 99, 7, 1000 };
    float got[6 * 16], want[6 * 16];
    tap_ok(ops->lookup(s, got, 0, ids, 6, 0) == GRM_OK, "lookup of 6 item ids succeeds");
    for (int i = 0; i < 6; i++)
        grm_row_init(want + 16 * i, 16, GRM_EMB_INIT_UNIFORM, 0.05, 42,
                     grm_str_hash64("item"), ids[i]);
    tap_ok(memcmp(got, want, sizeof(got)) == 0,
           "lookup rows equal grm_row_init(seed 42, hash('item'), id), duplicates included");

    // Large lookup (the threaded path) against grm_row_init, row by row.
    enum { N = 4000 };
    int64_t *big = malloc(N * sizeof(int64_t));
    float *rows = malloc((size_t)N * 64 * sizeof(float));
    float want_row[64];
    for (int i = 0; i < N; i++) big[i] = (int64_t)((i * 7919) % 2000);
    tap_ok(ops->lookup(s, rows, 1, big, N, GRM_EMB_INSERT) == GRM_OK,
           "lookup of %d user ids (threaded path) succeeds", N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        grm_row_init(want_row, 64, GRM_EMB_INIT_NORMAL, 0.1, 42, grm_str_hash64("user"),
                     big[i]);
        bad += memcmp(rows + (size_t)i * 64, want_row, sizeof(want_row)) != 0;
    }
    tap_ok(bad == 0, "threaded lookup of %d ids equals grm_row_init (%d rows differ)", N, bad);

    // Uniform stays in [-a, a) with std a/sqrt(3); normal has std a.
    grm_named_tensor w = find_tensor(s, "item.weight");
    const float *x = w.tensor.data;
    const int64_t nu = 1683 * 16;
    double sum = 0, sq = 0, mn = 1, mx = -1;
    for (int64_t i = 0; i < nu; i++) {
        sum += x[i];
        sq += (double)x[i] * x[i];
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    double sd = sqrt(sq / (double)nu - (sum / (double)nu) * (sum / (double)nu));
    tap_ok(mn >= -0.05 && mx <= 0.05 && fabs(sd - 0.05 / sqrt(3.0)) < 0.02 * 0.05 / sqrt(3.0),
           "uniform init within [-0.05, 0.05] (min %g, max %g), std %g vs %g", mn, mx, sd,
           0.05 / sqrt(3.0));

    w = find_tensor(s, "user.weight");
    x = w.tensor.data;
    const int64_t nn = 2000 * 64;
    sum = sq = 0;
    for (int64_t i = 0; i < nn; i++) {
        sum += x[i];
        sq += (double)x[i] * x[i];
    }
    const double mean = sum / (double)nn;
    sd = sqrt(sq / (double)nn - mean * mean);
    tap_ok(fabs(sd - 0.1) < 0.01 * 0.1 && fabs(mean) < 0.003,
           "normal init over %lld values: std %g within 1%% of 0.1, mean %g near 0",
           (long long)nn, sd, mean);

    w = find_tensor(s, "zero.weight");
    int nz = 0;
    for (int i = 0; i < 30; i++) nz += ((const float *)w.tensor.data)[i] != 0.0f;
    tap_ok(w.tensor.data != NULL && nz == 0, "zeros init gives an all-zero table");

    // Same seed: same rows; another seed: other rows.
    void *s2 = create_store(specs, 3, &o, NULL);
    grm_named_tensor a = find_tensor(s, "user.weight"), b = find_tensor(s2, "user.weight");
    tap_ok(memcmp(a.tensor.data, b.tensor.data, tensor_bytes(&a)) == 0,
           "two stores with the same seed hold identical user rows");
    grm_emb_table_spec other[3];
    memcpy(other, specs, sizeof(other));
    for (int i = 0; i < 3; i++) other[i].seed = 43;
    void *s3 = create_store(other, 3, &o, NULL);
    grm_named_tensor c = find_tensor(s3, "user.weight");
    int64_t same = 0;
    for (int64_t i = 0; i < nn; i++)
        same += ((const float *)a.tensor.data)[i] == ((const float *)c.tensor.data)[i];
    tap_ok(same < 10, "seed 43 gives other rows than seed 42 (%lld of %lld values equal)",
           (long long)same, (long long)nn);

    grm_emb_stats st;
    const grm_status sst = ops->stats(s, 1, &st);
    tap_ok(sst == GRM_OK && st.rows == 2000 && st.capacity == 2000
           && st.lookups == N && st.misses == 0 && st.evictions == 0
           && st.bytes >= 2000 * 64 * 4 * 3 + 2000 * 8,
           "stats of 'user': rows = capacity = 2000, lookups %lld = %d, no misses, %lld bytes",
           (long long)st.lookups, N, (long long)st.bytes);

    free(big);
    free(rows);
    ops->destroy(s);
    ops->destroy(s2);
    ops->destroy(s3);
}

static void test_update(void)
{
    fake_opt o = { .S = 2 };
    void *s = create_store(specs, 1, &o, NULL);
    const int32_t D = 16;
    grm_named_tensor w = find_tensor(s, "item.weight");
    grm_named_tensor os = find_tensor(s, "item.opt_state");
    grm_named_tensor cnt = find_tensor(s, "item.steps");
    float *before = malloc(tensor_bytes(&w));
    memcpy(before, w.tensor.data, tensor_bytes(&w));

    const int64_t ids1[3] = { 3, 10, 7 };
    float g1[3 * 16];
    for (int i = 0; i < 3 * 16; i++) g1[i] = (float)(i + 1) * 0.25f;
    tap_ok(ops->update(s, 0, ids1, g1, 3, 100) == GRM_OK, "update of 3 rows succeeds");
    const int64_t ids2[2] = { 10, 11 };
    float g2[2 * 16];
    for (int i = 0; i < 2 * 16; i++) g2[i] = -(float)i;
    tap_ok(ops->update(s, 0, ids2, g2, 2, 101) == GRM_OK, "second update of 2 rows succeeds");

    // Expected table, by hand: row -= 0.5 * grad per update, other rows untouched.
    float *want = malloc(tensor_bytes(&w));
    memcpy(want, before, tensor_bytes(&w));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < D; j++) want[ids1[i] * D + j] -= 0.5f * g1[i * D + j];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < D; j++) want[ids2[i] * D + j] -= 0.5f * g2[i * D + j];
    tap_ok(memcmp(w.tensor.data, want, tensor_bytes(&w)) == 0,
           "only rows 3, 7, 10, 11 changed, each by -0.5 * grad per update");

    float rows[4 * 16];
    const int64_t look[4] = { 3, 7, 10, 11 };
    ops->lookup(s, rows, 0, look, 4, 0);
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= memcmp(rows + i * D, want + look[i] * D, 64) == 0;
    tap_ok(ok, "lookup after update returns the updated rows");

    const int64_t *steps = cnt.tensor.data;
    int64_t others = 0;
    for (int64_t r = 0; r < 1683; r++)
        if (r != 3 && r != 7 && r != 10 && r != 11) others += steps[r];
    tap_ok(steps[3] == 1 && steps[7] == 1 && steps[10] == 2 && steps[11] == 1 && others == 0,
           "per-row step counts: rows 3, 7, 11 at 1, row 10 at 2, all others 0");
    tap_ok(o.calls == 5 && o.steps[0] == 1 && o.steps[1] == 1 && o.steps[2] == 1
           && o.steps[3] == 2 && o.steps[4] == 1,
           "row_step saw steps 1, 1, 1 then 2, 1 (the row's count, not the global step)");

    const float *W = w.tensor.data, *S = os.tensor.data;
    const int64_t order[5] = { 3, 10, 7, 10, 11 };
    ok = 1;
    for (int k = 0; k < 5; k++)
        ok &= o.rows[k] == W + order[k] * D && o.states[k] == S + order[k] * 2 * D;
    tap_ok(ok, "row_step got row r at weight + r*D and its state at opt_state + r*S*D");
    tap_ok(os.tensor.shape[0] == 1683 && os.tensor.shape[1] == 32 && S[10 * 32] == 2.0f
           && S[10 * 32 + 16] == 2.0f && S[11 * 32] == 1.0f && S[3 * 32 + 16] == 1.0f
           && S[4 * 32] == 0.0f,
           "optimizer state [1683, 32] kept beside each row, zero for untouched rows");

    // Errors leave the store unchanged.
    const int64_t badids[2] = { 5, 1700 };
    tap_ok(ops->update(s, 0, badids, g1, 2, 102) == GRM_EINVAL
           && has("emb-static: table 'item': id 1700 outside [0, 1683); raise the table's "
                  "rows or set on_out_of_range = modulo")
           && steps[5] == 0,
           "update with id 1700 of 1683 rows: GRM_EINVAL, names table and id, row 5 untouched");
    float out[2 * 16];
    tap_ok(ops->lookup(s, out, 0, badids, 2, 0) == GRM_EINVAL
           && has("emb-static: table 'item': id 1700 outside [0, 1683); raise the table's rows "
                  "or set on_out_of_range = modulo"),
           "lookup of id 1700 in a 1683-row table: GRM_EINVAL with the fix");
    const int64_t neg = -1;
    tap_ok(ops->lookup(s, out, 0, &neg, 1, 0) == GRM_EINVAL && has("id -1 outside [0, 1683)"),
           "lookup of id -1: GRM_EINVAL");
    tap_ok(ops->lookup(s, out, 3, &neg, 1, 0) == GRM_EINVAL
           && has("table index 3 outside [0, 1)"),
           "lookup in table 3 of 1: GRM_EINVAL");

    free(before);
    free(want);
    ops->destroy(s);
}

static void test_modulo(void)
{
    fake_opt o = { .S = 2 };
    void *s = create_store(specs, 1, &o, "on_out_of_range=modulo");
    const int64_t ids[3] = { 1700, -1, 17 + 2 * 1683 };
    float got[3 * 16], want[3 * 16];
    tap_ok(ops->lookup(s, got, 0, ids, 3, 0) == GRM_OK, "modulo: lookup of 1700, -1, 3383 "
           "succeeds");
    const int64_t rows[3] = { 17, 1682, 17 };
    for (int i = 0; i < 3; i++)
        grm_row_init(want + 16 * i, 16, GRM_EMB_INIT_UNIFORM, 0.05, 42, grm_str_hash64("item"),
                     rows[i]);
    tap_ok(memcmp(got, want, sizeof(got)) == 0,
           "modulo: ids 1700 and 3383 read row 17, id -1 reads row 1682");

    // Two ids on one row: both updates apply, in order.
    const int64_t up[2] = { 5, 5 + 1683 };
    float g[2 * 16];
    for (int i = 0; i < 32; i++) g[i] = 1.0f;
    float w5[16];
    grm_row_init(w5, 16, GRM_EMB_INIT_UNIFORM, 0.05, 42, grm_str_hash64("item"), 5);
    tap_ok(ops->update(s, 0, up, g, 2, 1) == GRM_OK, "modulo: update of ids 5 and 1688");
    const grm_named_tensor cnt = find_tensor(s, "item.steps");
    const grm_named_tensor w = find_tensor(s, "item.weight");
    int ok = 1;
    for (int j = 0; j < 16; j++) ok &= ((const float *)w.tensor.data)[5 * 16 + j]
                                      == (w5[j] - 0.5f) - 0.5f;
    tap_ok(ok && ((const int64_t *)cnt.tensor.data)[5] == 2,
           "modulo: ids 5 and 1688 both update row 5 (two steps, two -0.5 moves)");
    ops->destroy(s);
}

/* update = dense: every row steps at every update, untouched rows with a zero gradient. */
static void test_dense(void)
{
    fake_opt o = { .S = 2 };
    void *s = create_store(specs, 1, &o, "update=dense");
    const int32_t D = 16;
    grm_named_tensor w = find_tensor(s, "item.weight");
    grm_named_tensor os = find_tensor(s, "item.opt_state");
    grm_named_tensor cnt = find_tensor(s, "item.steps");
    float *want = malloc(tensor_bytes(&w));
    memcpy(want, w.tensor.data, tensor_bytes(&w));
    const int64_t ids1[3] = { 3, 10, 7 }, ids2[2] = { 10, 11 };
    float g1[3 * 16], g2[2 * 16];
    for (int i = 0; i < 3 * 16; i++) g1[i] = (float)(i + 1) * 0.25f;
    for (int i = 0; i < 2 * 16; i++) g2[i] = -(float)i;
    int ok = ops->update(s, 0, ids1, g1, 3, 1) == GRM_OK
             && ops->update(s, 0, ids2, g2, 2, 2) == GRM_OK;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < D; j++) want[ids1[i] * D + j] -= 0.5f * g1[i * D + j];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < D; j++) want[ids2[i] * D + j] -= 0.5f * g2[i * D + j];
    const int64_t *steps = cnt.tensor.data;
    const float *S = os.tensor.data;
    int all = 1;
    for (int64_t r = 0; r < 1683; r++) all &= steps[r] == 2 && S[r * 32] == 2.0f;
    tap_ok(ok && all && o.calls == 2 * 1683,
           "update=dense: two updates step all 1683 rows twice (%lld row steps)",
           (long long)o.calls);
    tap_ok(memcmp(w.tensor.data, want, tensor_bytes(&w)) == 0,
           "update=dense: the ids' rows move by their gradients, the rest by a zero one");
    ops->destroy(s);

    // ids sharing a row (modulo) add their gradients into one step of the row
    fake_opt o2 = { .S = 2 };
    const void *cfg = harness_config(info, "update=dense", "on_out_of_range=modulo",
                                     (const char *)NULL);
    grm_optimizer opt = { &fake_ops, &o2 };
    s = NULL;
    ops->create(cfg, specs, 1, &opt, &s);
    const int64_t up[2] = { 5, 5 + 1683 };
    float g[2 * 16], w5[16];
    for (int i = 0; i < 32; i++) g[i] = (float)(i % 16) + (i < 16 ? 1.0f : 0.5f);
    grm_row_init(w5, 16, GRM_EMB_INIT_UNIFORM, 0.05, 42, grm_str_hash64("item"), 5);
    ok = s != NULL && ops->update(s, 0, up, g, 2, 1) == GRM_OK;
    w = find_tensor(s, "item.weight");
    cnt = find_tensor(s, "item.steps");
    for (int j = 0; j < 16; j++)
        ok &= ((const float *)w.tensor.data)[5 * 16 + j] == w5[j] - 0.5f * (g[j] + g[16 + j]);
    tap_ok(ok && ((const int64_t *)cnt.tensor.data)[5] == 1,
           "update=dense, modulo: ids 5 and 1688 sum into one step of row 5");
    ops->destroy(s);

    // with Adam, update=dense is the optimizer's dense step over the whole table, as
    // torch.optim.Adam steps an nn.Embedding weight
    const grm_plugin_info *ainfo = harness_plugin("opt-adam");
    const grm_opt_ops *aops = ainfo->ops;
    void *adam = NULL;
    aops->create(harness_config(ainfo, "lr=0.01", (const char *)NULL), &adam);
    grm_optimizer aopt = { aops, adam };
    const grm_emb_table_spec small = { "small", 50, 8, GRM_EMB_INIT_NORMAL, 0.1, 3 };
    void *e = NULL;
    ops->create(harness_config(info, "update=dense", (const char *)NULL), &small, 1, &aopt,
                &e);
    w = find_tensor(e, "small.weight");
    float flat[50 * 8], state[2 * 50 * 8] = { 0 }, grad[50 * 8];
    memcpy(flat, w.tensor.data, sizeof flat);
    uint64_t rs = 5;
    ok = e != NULL;
    for (int step = 1; step <= 4; step++) {
        const int64_t ids[3] = { step, 2 * step + 7, 40 };
        float gr[3 * 8];
        for (int i = 0; i < 24; i++) gr[i] = harness_randf(&rs) - 0.5f;
        memset(grad, 0, sizeof grad);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 8; j++) grad[ids[i] * 8 + j] += gr[i * 8 + j];
        ok &= ops->update(e, 0, ids, gr, 3, step) == GRM_OK;
        ok &= aops->step(adam, flat, state, grad, 50 * 8, step) == GRM_OK;
    }
    double worst = 0;
    for (int i = 0; i < 50 * 8; i++) {
        const double d = fabs((double)flat[i] - ((const float *)w.tensor.data)[i]);
        if (d > worst) worst = d;
    }
    tap_ok(ok && worst <= 1e-7, "update=dense with opt-adam equals Adam's dense step over "
           "the [50, 8] table for 4 steps (largest difference %.2g)", worst);
    ops->destroy(e);
    aops->destroy(adam);
    free(want);
}

/* The threaded update (cpu) against the reference (ref): identical bytes. */
static void test_cpu_vs_ref(const char *mode)
{
    fake_opt o1 = { .S = 2 }, o2 = { .S = 2 };
    const grm_emb_table_spec big = { "big", 5000, 24, GRM_EMB_INIT_NORMAL, 0.02, 7 };
    const int modulo = strcmp(mode, "modulo") == 0;
    const void *c1 = harness_config(info, "impl=cpu", modulo ? "on_out_of_range=modulo"
                                    : (const char *)NULL, (const char *)NULL);
    const void *c2 = harness_config(info, "impl=ref", modulo ? "on_out_of_range=modulo"
                                    : (const char *)NULL, (const char *)NULL);
    grm_optimizer opt1 = { &fake_ops, &o1 }, opt2 = { &fake_ops, &o2 };
    void *a = NULL, *b = NULL;
    ops->create(c1, &big, 1, &opt1, &a);
    ops->create(c2, &big, 1, &opt2, &b);

    enum { N = 3000 };
    int64_t *ids = malloc(N * sizeof(int64_t));
    float *g = malloc((size_t)N * 24 * sizeof(float));
    uint64_t rs = 99;
    // Unique ids; in modulo mode they span 3x the rows, so many share a row.
    const int64_t span = modulo ? 15000 : 5000;
    for (int i = 0; i < N; i++) ids[i] = (int64_t)i * 4999 % span;
    for (int i = 0; i < N * 24; i++) g[i] = harness_randf(&rs);
    int ok = 1;
    for (int round = 0; round < 3; round++) {
        ok &= ops->update(a, 0, ids, g, N, round) == GRM_OK;
        ok &= ops->update(b, 0, ids, g, N, round) == GRM_OK;
    }
    const char *names[3] = { "big.weight", "big.opt_state", "big.steps" };
    for (int k = 0; k < 3; k++) {
        grm_named_tensor ta = find_tensor(a, names[k]), tb = find_tensor(b, names[k]);
        ok &= ta.tensor.data && memcmp(ta.tensor.data, tb.tensor.data, tensor_bytes(&ta)) == 0;
    }
    tap_ok(ok, "%s mode: 3 threaded updates of %d ids equal the reference bit for bit",
           mode, N);
    free(ids);
    free(g);
    ops->destroy(a);
    ops->destroy(b);
}

static void test_checkpoint(void)
{
    fake_opt o = { .S = 2 };
    void *s = create_store(specs, 3, &o, NULL);
    const int64_t ids[3] = { 1, 2, 3 };
    float g[3 * 64];
    for (int i = 0; i < 3 * 64; i++) g[i] = (float)i;
    ops->update(s, 1, ids, g, 3, 1);
    ops->update(s, 0, ids, g, 3, 1);

    const char *want_names[9] = { "item.weight", "item.opt_state", "item.steps",
                                  "user.weight", "user.opt_state", "user.steps",
                                  "zero.weight", "zero.opt_state", "zero.steps" };
    grm_named_tensor t;
    int ok = 1;
    for (int i = 0; i < 9; i++) ok &= ops->tensors(s, i, &t) == GRM_OK
                                      && strcmp(t.name, want_names[i]) == 0;
    tap_ok(ok, "tensors lists weight, opt_state, steps per table in table order");
    tap_ok(ops->tensors(s, 9, &t) == GRM_ENOTFOUND, "tensors(9) past the end: GRM_ENOTFOUND");
    ops->tensors(s, 1, &t);
    grm_named_tensor st;
    ops->tensors(s, 2, &st);
    tap_ok(t.tensor.dtype == GRM_DTYPE_F32 && t.tensor.ndim == 2 && t.tensor.shape[0] == 1683
           && t.tensor.shape[1] == 32 && st.tensor.dtype == GRM_DTYPE_I64
           && st.tensor.ndim == 1 && st.tensor.shape[0] == 1683
           && t.tensor.device.type == GRM_DEVICE_CPU,
           "item.opt_state is f32 [1683, 32], item.steps is i64 [1683], on the CPU");

    // Round trip into a store with another seed, so nothing matches until load.
    grm_emb_table_spec other[3];
    memcpy(other, specs, sizeof(other));
    for (int i = 0; i < 3; i++) other[i].seed = 1000;
    fake_opt o2 = { .S = 2 };
    void *r = create_store(other, 3, &o2, NULL);
    ok = 1;
    for (int i = 0; ops->tensors(s, i, &t) == GRM_OK; i++) ok &= ops->load(r, &t) == GRM_OK;
    tap_ok(ok, "load of all 9 tensors into a fresh store succeeds");
    ok = 1;
    for (int i = 0; i < 9; i++) {
        grm_named_tensor a = find_tensor(s, want_names[i]), b = find_tensor(r, want_names[i]);
        ok &= b.tensor.data != NULL && tensor_bytes(&a) == tensor_bytes(&b)
              && memcmp(a.tensor.data, b.tensor.data, tensor_bytes(&a)) == 0;
    }
    tap_ok(ok, "after tensors()/load() every tensor of the fresh store is byte-identical");
    float x[3 * 64], y[3 * 64];
    ops->lookup(s, x, 1, ids, 3, 0);
    ops->lookup(r, y, 1, ids, 3, 0);
    tap_ok(memcmp(x, y, sizeof(x)) == 0, "restored store looks up the updated rows");

    // Shape, dtype and name mismatches.
    grm_named_tensor bad = find_tensor(s, "item.weight");
    bad.tensor.shape[1] = 8;
    tap_ok(ops->load(r, &bad) == GRM_EFORMAT
           && has("emb-static: tensor 'item.weight': expected f32 [1683, 16], got f32 "
                  "[1683, 8]"),
           "load of item.weight shaped [1683, 8]: GRM_EFORMAT naming both shapes");
    bad = find_tensor(s, "item.steps");
    bad.tensor.dtype = GRM_DTYPE_F32;
    tap_ok(ops->load(r, &bad) == GRM_EFORMAT
           && has("tensor 'item.steps': expected i64 [1683], got f32 [1683]"),
           "load of item.steps as f32: GRM_EFORMAT naming both dtypes");
    bad.name = "bogus.weight";
    tap_ok(ops->load(r, &bad) == GRM_ENOTFOUND && has("no tensor named 'bogus.weight'"),
           "load of an unknown tensor name: GRM_ENOTFOUND");
    ops->destroy(s);
    ops->destroy(r);

    // S == 0: no opt_state tensor.
    fake_opt o0 = { .S = 0 };
    void *z = create_store(specs + 2, 1, &o0, NULL);
    ok = ops->tensors(z, 0, &t) == GRM_OK && strcmp(t.name, "zero.weight") == 0;
    ok &= ops->tensors(z, 1, &t) == GRM_OK && strcmp(t.name, "zero.steps") == 0;
    ok &= ops->tensors(z, 2, &t) == GRM_ENOTFOUND;
    t.name = "zero.opt_state";
    ok &= ops->load(z, &t) == GRM_ENOTFOUND;
    tap_ok(ok, "optimizer without state: tensors are zero.weight and zero.steps only");
    ops->destroy(z);
}

static void test_create_errors(void)
{
    const void *cfg = harness_config(info, (const char *)NULL);
    fake_opt o = { .S = 2 };
    grm_optimizer opt = { &fake_ops, &o };
    void *s = (void *)&o;
    grm_emb_table_spec bad[2] = { specs[0], { "bad", 0, 4, GRM_EMB_INIT_ZEROS, 0, 1 } };

    tap_ok(ops->create(cfg, bad, 2, &opt, &s) == GRM_EINVAL && s == NULL
           && has("emb-static: table 'bad': rows = 0"),
           "create with rows = 0: GRM_EINVAL naming the table, *inst NULL");
    bad[1].rows = 4;
    bad[1].dim = -2;
    tap_ok(ops->create(cfg, bad, 2, &opt, &s) == GRM_EINVAL
           && has("emb-static: table 'bad': dim = -2"), "create with dim = -2: GRM_EINVAL");
    bad[1].dim = 4;
    bad[1].init = 9;
    tap_ok(ops->create(cfg, bad, 2, &opt, &s) == GRM_EINVAL
           && has("table 'bad': unknown initializer 9"), "create with init 9: GRM_EINVAL");
    bad[1].init = GRM_EMB_INIT_ZEROS;
    bad[1].name = "item";
    tap_ok(ops->create(cfg, bad, 2, &opt, &s) == GRM_EINVAL
           && has("table 'item' is declared twice"), "create with a duplicate name: GRM_EINVAL");

    // No optimizer: lookups work, updates are refused.
    const int64_t live0 = grm__alloc_live();
    tap_ok(ops->create(cfg, specs + 2, 1, NULL, &s) == GRM_OK, "create without an optimizer");
    const int64_t id = 1;
    const float g[3] = { 1, 2, 3 };
    tap_ok(ops->update(s, 0, &id, g, 1, 1) == GRM_EINVAL
           && has("table 'zero': update without an optimizer"),
           "update without an optimizer: GRM_EINVAL");
    const int64_t held = grm__alloc_live() - live0;
    ops->destroy(s);
    ops->destroy(NULL);
    tap_ok(held > 0 && grm__alloc_live() == live0,
           "destroy frees the store's %lld host allocations; destroy(NULL) is accepted",
           (long long)held);
}

int main(void)
{
    tap_plan(56);
    info = harness_plugin("emb-static");
    ops = info->ops;
    test_rng();
    test_init();
    test_update();
    test_modulo();
    test_dense();
    test_cpu_vs_ref("error");
    test_cpu_vs_ref("modulo");
    test_checkpoint();
    test_create_errors();
    return tap_done();
}
