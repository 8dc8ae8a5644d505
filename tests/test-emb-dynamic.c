/* tests/test-emb-dynamic.c - emb-dynamic (MTGRBoost §4.1, §5.2) driven through its ops
 * table. Expected values come from code in this file: a plain reference map (one entry
 * per id, linear-probing index, the eviction rules written out with qsort), grm_row_init,
 * emb-static's rows, GCC's _Float16 conversions, and hand-derived eviction sequences. The
 * probe sequence of eq. 5 is enumerated from the plugin's header and checked against the
 * formula written out here (Theorem 1: every slot reachable for power-of-two M). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grm/emb.h>
#include <grm/rng.h>

#include "../plugins/emb-dynamic/emb_dynamic.h"
#include "emb-fakes.h"
#include "harness.h"
#include "tap.h"

/* ---- helpers ---- */

/* Create a store from "k=v" strings (NULL-terminated); NULL and the status on failure. */
static void *try_store(const grm_emb_table_spec *specs, int32_t n, fake_opt *o,
                       grm_status *status, const char *const *kv)
{
    int nkv = 0;
    while (kv != NULL && kv[nkv] != NULL) nkv++;
    const void *cfg = NULL;
    grm_status st = harness_config_try(info, &cfg, kv, nkv);
    void *s = NULL;
    if (st == GRM_OK) {
        grm_optimizer opt = { &fake_ops, o };
        st = ops->create(cfg, specs, n, o ? &opt : NULL, &s);
    }
    if (status) *status = st;
    return st == GRM_OK ? s : NULL;
}

static void *make_store(const grm_emb_table_spec *specs, int32_t n, fake_opt *o,
                        const char *const *kv)
{
    grm_status st;
    void *s = try_store(specs, n, o, &st, kv);
    if (s == NULL) {
        printf("Bail out! create: %s\n", harness_host()->last_error());
        exit(1);
    }
    return s;
}

static grm_emb_stats stats_of(void *s, int32_t table)
{
    grm_emb_stats st;
    memset(&st, 0, sizeof(st));
    if (ops->stats(s, table, &st) != GRM_OK) tap_diag("stats: %s", harness_host()->last_error());
    return st;
}

static float f16_round(float x)
{
    return (float)(_Float16)x;
}

/* ---- Theorem 1: grouped parallel probing reaches every slot ---- */

static void test_probing(void)
{
    static const int64_t Ms[] = { 64, 128, 1024, 4096 };
    static const int32_t Ts[] = { 1, 2, 4, 8, 32 };
    int cases = 0, full = 0, lanes_ok = 1, formula_ok = 1;
    uint8_t *seen = malloc(4096);
    uint64_t rs = 7;
    for (size_t a = 0; a < sizeof(Ms) / sizeof(Ms[0]); a++) {
        for (size_t b = 0; b < sizeof(Ts) / sizeof(Ts[0]); b++) {
            const int64_t M = Ms[a];
            const int32_t T = Ts[b];
            for (int key = 0; key < 40; key++) {
                const int64_t id = key < 20 ? key : (int64_t)harness_rand(&rs);
                const uint64_t h = ed_hash(id);
                const ed_probe p = ed_probe_start(h, M, T);
                // eq. 5 written out: S = ((k mod (M/T - 1)) + 1 | 1) * T, k = h >> 32.
                const uint64_t G = (uint64_t)(M / T);
                const uint64_t S = ((((h >> 32) % (G - 1)) + 1) | 1) * (uint64_t)T;
                formula_ok &= p.step == S && p.rounds == G && p.h0 % (uint64_t)T == 0;
                memset(seen, 0, (size_t)M);
                int64_t distinct = 0;
                for (uint64_t r = 0; r < p.rounds; r++)
                    for (int32_t g = 0; g < T; g++) {
                        const uint64_t slot = ed_probe_slot(&p, r, (uint32_t)g);
                        lanes_ok &= slot < (uint64_t)M && (int32_t)(slot % (uint64_t)T) == g;
                        if (slot < (uint64_t)M && !seen[slot]) {
                            seen[slot] = 1;
                            distinct++;
                        }
                    }
                cases++;
                full += distinct == M;
            }
        }
    }
    tap_ok(formula_ok, "probe step equals eq. 5 ((k mod (M/T-1)) + 1 | 1) * T for %d cases",
           cases);
    tap_ok(full == cases, "Theorem 1: every probe sequence visits all M slots exactly once "
           "(%d of %d; M in 64..4096, T in 1..32, 40 keys)", full, cases);
    tap_ok(lanes_ok, "lane g only visits slots = g (mod T): thread groups probe disjoint lanes");

    // The condition matters: an even step S/T leaves slots unvisited.
    ed_probe p = ed_probe_start(ed_hash(5), 256, 4);
    p.step = 2 * 4;
    memset(seen, 0, 256);
    int64_t distinct = 0;
    for (uint64_t r = 0; r < p.rounds; r++)
        for (uint32_t g = 0; g < 4; g++) {
            const uint64_t slot = ed_probe_slot(&p, r, g);
            distinct += !seen[slot];
            seen[slot] = 1;
        }
    tap_ok(distinct == 128, "an even step (S/T = 2) reaches only %lld of 256 slots",
           (long long)distinct);
    tap_ok(ed_hash(0) == 0 && ed_hash(1) == UINT64_C(0xB456BCFC34C2CB2C)
           && ed_hash(-7) == grm_mix64((uint64_t)-7),
           "hash is MurmurHash3 fmix64 (value of 1 computed in Python)");
    free(seen);
}

/* ---- first touch equals emb-static ---- */

static const grm_emb_table_spec specs[] = {
    { "item", 1683, 16, GRM_EMB_INIT_UNIFORM, 0.05, 42 },
    { "user", 2000, 64, GRM_EMB_INIT_NORMAL, 0.1, 42 },
    { "zero", 10, 3, GRM_EMB_INIT_ZEROS, 0.0, 42 },
};

static void test_first_touch(void)
{
    const grm_plugin_info *sinfo = harness_plugin("emb-static");
    const grm_emb_ops *sops = sinfo->ops;
    fake_opt o = { .S = 2 };
    grm_optimizer opt = { &fake_ops, &o };
    void *st = NULL;
    if (sops->create(harness_config(sinfo, (const char *)NULL), specs, 3, &opt, &st)
        != GRM_OK) {
        printf("Bail out! emb-static: %s\n", harness_host()->last_error());
        exit(1);
    }
    static const char *const kv[] = { "initial_rows=100", "chunk_rows=64", NULL };
    void *s = make_store(specs, 3, &o, kv);

    enum { N = 3000 };
    int64_t *ids = malloc(N * sizeof(int64_t));
    float *a = malloc((size_t)N * 64 * sizeof(float)), *b = malloc((size_t)N * 64 * 4);
    int same = 1;
    for (int32_t t = 0; t < 3; t++) {
        const int64_t R = specs[t].rows;
        for (int i = 0; i < N; i++) ids[i] = (int64_t)((i * 7919 + t) % R);
        same &= sops->lookup(st, a, t, ids, N, GRM_EMB_INSERT) == GRM_OK;
        same &= ops->lookup(s, b, t, ids, N, GRM_EMB_INSERT) == GRM_OK;
        same &= memcmp(a, b, (size_t)N * (size_t)specs[t].dim * sizeof(float)) == 0;
    }
    tap_ok(same, "first-touch rows of 3 tables (uniform, normal, zeros; %d ids each, threaded) "
           "equal emb-static's for the same spec", N);

    // A lookup without INSERT reads the initial value and stores nothing.
    const int64_t fresh[2] = { 123456789012345LL, -77 };
    float r2[2 * 16], w2[2 * 16];
    const grm_emb_stats before = stats_of(s, 0);
    tap_ok(ops->lookup(s, r2, 0, fresh, 2, 0) == GRM_OK, "lookup without INSERT of 2 new ids");
    for (int i = 0; i < 2; i++)
        grm_row_init(w2 + 16 * i, 16, GRM_EMB_INIT_UNIFORM, 0.05, 42, grm_str_hash64("item"),
                     fresh[i]);
    const grm_emb_stats after = stats_of(s, 0);
    tap_ok(memcmp(r2, w2, sizeof(r2)) == 0 && after.rows == before.rows
           && after.misses == before.misses + 2 && after.lookups == before.lookups + 2,
           "... returns grm_row_init rows, stores none (rows %lld), counts 2 misses",
           (long long)after.rows);
    ops->destroy(s);
    sops->destroy(st);
    free(ids);
    free(a);
    free(b);
}

/* ---- the reference map ---- */

#define RD 8                /* dim of the random-sequence tests */
#define REF_SLOTS 16384

typedef struct ref_row {
    int64_t id;
    float row[RD];
    float st[2 * RD];
    int64_t steps, count, last;
} ref_row;

typedef struct ref_map {
    ref_row *v;             /* [cap] */
    int64_t n;
    int32_t idx[REF_SLOTS]; /* linear probing: index into v + 1, 0 empty */
    int64_t clock, last_sweep, lookups, misses, evictions;
    int policy;             /* ed_evict_mode */
    int64_t max_rows, ttl;
    grm_emb_table_spec spec;
} ref_map;

static uint64_t ref_h(int64_t id)
{
    return ((uint64_t)id * UINT64_C(0x9E3779B97F4A7C15)) >> 50;   // 14 bits
}

static void ref_reindex(ref_map *m)
{
    memset(m->idx, 0, sizeof(m->idx));
    for (int64_t i = 0; i < m->n; i++) {
        uint64_t h = ref_h(m->v[i].id);
        while (m->idx[h]) h = (h + 1) & (REF_SLOTS - 1);
        m->idx[h] = (int32_t)i + 1;
    }
}

static ref_row *ref_find(ref_map *m, int64_t id)
{
    for (uint64_t h = ref_h(id); m->idx[h]; h = (h + 1) & (REF_SLOTS - 1))
        if (m->v[m->idx[h] - 1].id == id) return &m->v[m->idx[h] - 1];
    return NULL;
}

static ref_row *ref_add(ref_map *m, int64_t id, int64_t now)
{
    ref_row *r = &m->v[m->n++];
    memset(r, 0, sizeof(*r));
    r->id = id;
    r->last = now;
    grm_row_init(r->row, RD, m->spec.init, m->spec.init_scale, m->spec.seed,
                 grm_str_hash64(m->spec.name), id);
    uint64_t h = ref_h(id);
    while (m->idx[h]) h = (h + 1) & (REF_SLOTS - 1);
    m->idx[h] = (int32_t)(m->n - 1) + 1;
    return r;
}

static int ref_policy;

static int ref_cmp(const void *pa, const void *pb)
{
    const ref_row *a = *(ref_row *const *)pa, *b = *(ref_row *const *)pb;
    const int64_t a1 = ref_policy == ED_EVICT_LFU ? a->count : a->last;
    const int64_t b1 = ref_policy == ED_EVICT_LFU ? b->count : b->last;
    const int64_t a2 = ref_policy == ED_EVICT_LFU ? a->last : 0;
    const int64_t b2 = ref_policy == ED_EVICT_LFU ? b->last : 0;
    if (a1 != b1) return a1 < b1 ? -1 : 1;
    if (a2 != b2) return a2 < b2 ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Remove the rows flagged by id == INT64_MIN and rebuild the index. */
static void ref_compact(ref_map *m)
{
    int64_t k = 0;
    for (int64_t i = 0; i < m->n; i++)
        if (m->v[i].id != INT64_MIN) m->v[k++] = m->v[i];
    m->evictions += m->n - k;
    m->n = k;
    ref_reindex(m);
}

static void ref_evict_budget(ref_map *m, int64_t protect)
{
    if (m->max_rows <= 0 || m->n <= m->max_rows) return;
    ref_row **c = malloc((size_t)m->n * sizeof(*c));
    int64_t nc = 0;
    for (int64_t i = 0; i < m->n; i++)
        if (m->v[i].last < protect) c[nc++] = &m->v[i];
    ref_policy = m->policy;
    qsort(c, (size_t)nc, sizeof(*c), ref_cmp);
    int64_t k = m->n - m->max_rows;
    if (k > nc) k = nc;
    for (int64_t i = 0; i < k; i++) c[i]->id = INT64_MIN;
    free(c);
    ref_compact(m);
}

static void ref_lookup(ref_map *m, float *out, const int64_t *ids, int64_t n, int insert)
{
    const int64_t now = m->clock + 1;
    for (int64_t i = 0; i < n; i++) {
        ref_row *r = ref_find(m, ids[i]);
        if (r == NULL && !insert) {
            grm_row_init(out + i * RD, RD, m->spec.init, m->spec.init_scale, m->spec.seed,
                         grm_str_hash64(m->spec.name), ids[i]);
            m->misses++;
            continue;
        }
        if (r == NULL) {
            r = ref_add(m, ids[i], now);
            m->misses++;
        }
        if (insert) {
            r->count++;
            if (r->last < now) r->last = now;
        }
        memcpy(out + i * RD, r->row, sizeof(r->row));
    }
    m->lookups += n;
    if (insert) ref_evict_budget(m, now);
}

static void ref_update(ref_map *m, const int64_t *ids, const float *g, int64_t n,
                       int64_t step)
{
    for (int64_t i = 0; i < n; i++) {
        ref_row *r = ref_find(m, ids[i]);
        if (r == NULL) r = ref_add(m, ids[i], step);
        r->steps++;
        for (int j = 0; j < RD; j++) {
            r->row[j] -= 0.5f * g[i * RD + j];
            r->st[j] += 1.0f;
            r->st[RD + j] = (float)r->steps;
        }
        if (r->last < step) r->last = step;
    }
    if (m->clock < step) m->clock = step;
    if (m->ttl > 0 && step > m->last_sweep) {
        for (int64_t i = 0; i < m->n; i++)
            if (step - m->v[i].last >= m->ttl) m->v[i].id = INT64_MIN;
        ref_compact(m);
        m->last_sweep = step;
    }
    ref_evict_budget(m, step);
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Compare store s's export with the reference; returns the number of differences. */
static int64_t ref_compare_export(void *s, ref_map *m)
{
    grm_named_tensor ids = find_tensor(s, "t.ids"), w = find_tensor(s, "t.weight");
    grm_named_tensor st = find_tensor(s, "t.opt_state"), me = find_tensor(s, "t.meta");
    grm_named_tensor cn = find_tensor(s, "t.counters");
    if (ids.name == NULL || w.name == NULL || st.name == NULL || me.name == NULL
        || cn.name == NULL)
        return 1000000;
    const int64_t n = ids.tensor.shape[0];
    int64_t bad = n != m->n;
    const int64_t *I = ids.tensor.data, *ME = me.tensor.data, *C = cn.tensor.data;
    const float *W = w.tensor.data, *ST = st.tensor.data;
    for (int64_t i = 0; i < n && !bad; i++) {
        const ref_row *r = ref_find(m, I[i]);
        if (r == NULL || (i > 0 && I[i - 1] >= I[i])) {
            bad++;
            continue;
        }
        bad += memcmp(W + i * RD, r->row, sizeof(r->row)) != 0;
        bad += memcmp(ST + i * 2 * RD, r->st, sizeof(r->st)) != 0;
        bad += ME[3 * i] != r->steps || ME[3 * i + 1] != r->count || ME[3 * i + 2] != r->last;
    }
    bad += C[0] != m->clock || C[2] != m->lookups || C[3] != m->misses
           || C[4] != m->evictions;
    return bad;
}

/* A random id: Zipf-like over [-300, 3000), sometimes huge. */
static int64_t rand_id(uint64_t *rs)
{
    const uint64_t r = harness_rand(rs);
    if (r % 50 == 0) return (int64_t)(r >> 1) * ((r & 2) ? -1 : 1);   // anywhere in int64
    const double u = (double)(r >> 11) / 9007199254740992.0;
    return (int64_t)(3300.0 * u * u * u) - 300;
}

/* Run `steps` random steps on store s and the reference; count mismatches. */
static int64_t run_random(void *s, ref_map *m, uint64_t seed, int steps, int64_t max_batch)
{
    uint64_t rs = seed;
    int64_t bad = 0;
    int64_t *ids = malloc((size_t)max_batch * sizeof(int64_t));
    int64_t *uniq = malloc((size_t)(max_batch + 64) * sizeof(int64_t));
    float *got = malloc((size_t)max_batch * RD * sizeof(float));
    float *want = malloc((size_t)max_batch * RD * sizeof(float));
    float *g = malloc((size_t)(max_batch + 64) * RD * sizeof(float));
    int64_t step = 0;
    for (int it = 0; it < steps; it++) {
        const int64_t n = 1 + (int64_t)(harness_rand(&rs) % (uint64_t)max_batch);
        for (int64_t i = 0; i < n; i++) ids[i] = rand_id(&rs);
        bad += ops->lookup(s, got, 0, ids, n, GRM_EMB_INSERT) != GRM_OK;
        ref_lookup(m, want, ids, n, 1);
        bad += memcmp(got, want, (size_t)n * RD * sizeof(float)) != 0;

        if (harness_rand(&rs) % 3 == 0) {   // an evaluation-style read
            const int64_t k = 1 + n / 2;
            for (int64_t i = 0; i < k; i++) ids[i] = rand_id(&rs);
            bad += ops->lookup(s, got, 0, ids, k, 0) != GRM_OK;
            ref_lookup(m, want, ids, k, 0);
            bad += memcmp(got, want, (size_t)k * RD * sizeof(float)) != 0;
        }

        // Update the unique ids of the batch plus a few never looked up.
        memcpy(uniq, ids, (size_t)n * sizeof(int64_t));
        int64_t u = n;
        for (int i = 0; i < 8; i++) uniq[u++] = 5000 + (int64_t)(harness_rand(&rs) % 2000);
        qsort(uniq, (size_t)u, sizeof(int64_t), cmp_i64);
        int64_t k = 0;
        for (int64_t i = 0; i < u; i++)
            if (k == 0 || uniq[k - 1] != uniq[i]) uniq[k++] = uniq[i];
        for (int64_t i = 0; i < k * RD; i++) g[i] = harness_randf(&rs);
        step += 1 + (int64_t)(harness_rand(&rs) % 2);
        bad += ops->update(s, 0, uniq, g, k, step) != GRM_OK;
        ref_update(m, uniq, g, k, step);
    }
    free(ids);
    free(uniq);
    free(got);
    free(want);
    free(g);
    return bad;
}

static const grm_emb_table_spec tspec[] = { { "t", 0, RD, GRM_EMB_INIT_NORMAL, 0.5, 9 } };

static void test_random(const char *impl, const char *policy, int64_t max_rows, int64_t ttl)
{
    char k1[32], k2[32], k3[32], k4[32];
    snprintf(k1, sizeof k1, "impl=%s", impl);
    snprintf(k2, sizeof k2, "evict=%s", policy);
    snprintf(k3, sizeof k3, "max_rows=%lld", (long long)max_rows);
    snprintf(k4, sizeof k4, "ttl_steps=%lld", (long long)ttl);
    const char *const kv[] = { k1, k2, k3, k4, "initial_rows=16", "chunk_rows=64", NULL };
    fake_opt o = { .S = 2 };
    void *s = make_store(tspec, 1, &o, kv);
    ref_map *m = calloc(1, sizeof(*m));
    m->v = calloc(REF_SLOTS / 2, sizeof(ref_row));
    m->spec = tspec[0];
    m->policy = strcmp(policy, "lfu") == 0 ? ED_EVICT_LFU : ED_EVICT_LRU;
    m->max_rows = max_rows;
    m->ttl = ttl;
    const grm_emb_stats st0 = stats_of(s, 0);
    const int64_t bad = run_random(s, m, 1234 + (uint64_t)max_rows, 40, 1500);
    const int64_t xbad = ref_compare_export(s, m);
    const grm_emb_stats st = stats_of(s, 0);
    tap_ok(bad == 0 && xbad == 0 && st.rows == m->n && st.evictions == m->evictions
           && st.lookups == m->lookups && st.misses == m->misses,
           "random 40 steps, impl=%s evict=%s max_rows=%lld ttl=%lld: lookups, updates and "
           "the export equal the reference map (%lld rows, %lld evictions, %lld misses; "
           "%lld + %lld mismatches)", impl, policy, (long long)max_rows, (long long)ttl,
           (long long)m->n, (long long)m->evictions, (long long)m->misses, (long long)bad,
           (long long)xbad);
    if (max_rows == 0 && ttl == 0)
        tap_ok(st.capacity > st0.capacity && st.rows <= st.capacity,
               "... the key structure grew from %lld to %lld rows' capacity during use",
               (long long)st0.capacity, (long long)st.capacity);
    ops->destroy(s);
    free(m->v);
    free(m);
}

/* ---- growth keeps rows in place ---- */

static void test_growth(void)
{
    fake_opt o = { .S = 2 };
    const char *const kv[] = { "impl=ref", "initial_rows=16", "chunk_rows=64", NULL };
    void *s = make_store(tspec, 1, &o, kv);
    const int64_t id7 = 7;
    float g[RD] = { 1, 2, 3, 4, 5, 6, 7, 8 }, row[RD];
    ops->lookup(s, row, 0, &id7, 1, GRM_EMB_INSERT);
    ops->update(s, 0, &id7, g, 1, 1);
    float *p1 = o.rows[0];
    const grm_emb_stats a = stats_of(s, 0);
    enum { N = 5000 };
    int64_t *ids = malloc(N * sizeof(int64_t));
    float *out = malloc((size_t)N * RD * sizeof(float));
    for (int i = 0; i < N; i++) ids[i] = 1000 + i * 3;
    ops->lookup(s, out, 0, ids, N, GRM_EMB_INSERT);
    const grm_emb_stats b = stats_of(s, 0);
    ops->update(s, 0, &id7, g, 1, 2);
    float *p2 = o.rows[1];
    tap_ok(b.capacity > a.capacity && b.rows == N + 1
           && b.rows <= b.capacity,
           "5000 inserts grow the key structure from capacity %lld to %lld (rows %lld)",
           (long long)a.capacity, (long long)b.capacity, (long long)b.rows);
    tap_ok(p1 == p2 && o.steps[1] == 2,
           "row pointer of id 7 is the same before and after growth (%p, %p): rows never move",
           (void *)p1, (void *)p2);
    free(ids);
    free(out);
    ops->destroy(s);
}

/* ---- eviction by hand ---- */

static int export_ids_are(void *s, const int64_t *want, int64_t n)
{
    grm_named_tensor t = find_tensor(s, "t.ids");
    if (t.name == NULL || t.tensor.shape[0] != n) {
        tap_diag("export has %lld ids, want %lld", (long long)(t.name ? t.tensor.shape[0] : -1),
                 (long long)n);
        return 0;
    }
    return memcmp(t.tensor.data, want, (size_t)n * sizeof(int64_t)) == 0;
}

static void look(void *s, const int64_t *ids, int64_t n)
{
    float out[16 * RD];
    if (ops->lookup(s, out, 0, ids, n, GRM_EMB_INSERT) != GRM_OK)
        tap_diag("lookup: %s", harness_host()->last_error());
}

static void upd(void *s, const int64_t *ids, int64_t n, int64_t step)
{
    float g[16 * RD];
    for (int i = 0; i < 16 * RD; i++) g[i] = 1.0f;
    if (ops->update(s, 0, ids, g, n, step) != GRM_OK)
        tap_diag("update: %s", harness_host()->last_error());
}

static void test_evict_order(const char *policy)
{
    fake_opt o = { .S = 2 };
    char k1[32];
    snprintf(k1, sizeof k1, "evict=%s", policy);
    const char *const kv[] = { k1, "max_rows=4", "impl=ref", NULL };
    void *s = make_store(tspec, 1, &o, kv);
    const int64_t a[4] = { 1, 2, 3, 4 }, ones[3] = { 1, 1, 1 }, fours[2] = { 4, 4 };
    const int64_t two = 2, three = 3, fivesix[2] = { 5, 6 };
    // Step 1: 1..4 (1 accessed 4 times, 4 three times); step 2: id 2; step 3: id 3.
    look(s, a, 4);
    look(s, ones, 3);
    look(s, fours, 2);
    upd(s, a, 4, 1);
    look(s, &two, 1);
    upd(s, &two, 1, 2);
    look(s, &three, 1);
    upd(s, &three, 1, 3);
    const grm_emb_stats before = stats_of(s, 0);
    look(s, fivesix, 2);    // 6 rows > 4: two go
    const grm_emb_stats after = stats_of(s, 0);
    // LRU: last access 1 (ids 1, 4), 2, 3 -> 1 and 4 go (tie by id).
    // LFU: counts 1:4, 2:2, 3:2, 4:3 -> 2 and 3 go (tie by last access).
    static const int64_t lru_left[4] = { 2, 3, 5, 6 }, lfu_left[4] = { 1, 4, 5, 6 };
    const int lfu = strcmp(policy, "lfu") == 0;
    tap_ok(before.evictions == 0 && after.evictions == 2 && after.rows == 4
           && export_ids_are(s, lfu ? lfu_left : lru_left, 4),
           "%s with max_rows 4: inserting 5, 6 evicts %s (stats: 2 evictions, 4 rows)", policy,
           lfu ? "the least frequently used 2 and 3" : "the least recently used 1 and 4");

    // An evicted id comes back freshly initialized: row, state and step count.
    const int64_t gone = lfu ? 2 : 1;
    float row[RD], want[RD];
    look(s, &gone, 1);
    ops->lookup(s, row, 0, &gone, 1, 0);
    grm_row_init(want, RD, GRM_EMB_INIT_NORMAL, 0.5, 9, grm_str_hash64("t"), gone);
    o.calls = 0;
    upd(s, &gone, 1, 4);
    tap_ok(memcmp(row, want, sizeof(row)) == 0 && o.steps[0] == 1,
           "evicted id %lld comes back as grm_row_init with its row step back at 1",
           (long long)gone);
    ops->destroy(s);
}

static void test_ttl_and_protection(void)
{
    fake_opt o = { .S = 2 };
    const char *const kv[] = { "ttl_steps=3", "impl=ref", NULL };
    void *s = make_store(tspec, 1, &o, kv);
    const int64_t a[2] = { 1, 2 }, two = 2, three = 3;
    look(s, a, 2);
    upd(s, a, 2, 1);
    look(s, &two, 1);
    upd(s, &two, 1, 2);
    look(s, &three, 1);
    upd(s, &three, 1, 3);
    static const int64_t all3[3] = { 1, 2, 3 }, w4[2] = { 2, 3 }, w5[1] = { 3 };
    const int ok3 = export_ids_are(s, all3, 3);
    upd(s, &three, 1, 4);   // id 1 last touched at step 1: 4 - 1 >= 3
    const int ok4 = export_ids_are(s, w4, 2) && stats_of(s, 0).evictions == 1;
    upd(s, &three, 1, 5);   // id 2 last touched at step 2
    const int ok5 = export_ids_are(s, w5, 1) && stats_of(s, 0).evictions == 2;
    tap_ok(ok3 && ok4 && ok5, "ttl_steps 3: id 1 (last step 1) goes at step 4, id 2 (last "
           "step 2) at step 5, id 3 stays");
    ops->destroy(s);

    // Rows of the step in progress are never evicted, even over budget.
    const char *const kv2[] = { "evict=lru", "max_rows=2", "impl=ref", NULL };
    s = make_store(tspec, 1, &o, kv2);
    const int64_t b[3] = { 1, 2, 3 }, four = 4;
    look(s, b, 3);
    const grm_emb_stats x = stats_of(s, 0);
    upd(s, b, 3, 1);
    const grm_emb_stats y = stats_of(s, 0);
    look(s, &four, 1);
    static const int64_t left[2] = { 3, 4 };
    tap_ok(x.rows == 3 && y.rows == 3 && y.evictions == 0 && export_ids_are(s, left, 2),
           "max_rows 2: 3 rows of one step stay (rows %lld) until the next step evicts 1, 2",
           (long long)y.rows);
    ops->destroy(s);
}

/* A table under max_rows keeps a slot array sized by its budget, not by the spec's row
 * hint, and drops eviction's tombstones (a rebuild) once they pass 1/8 of it: left to fill
 * the array up to the load factor, they push every new key and every miss's search far
 * down its probe sequence. */
static void test_tombstones(void)
{
    fake_opt o = { .S = 2 };
    static const grm_emb_table_spec big[] = { { "t", 65536, RD, GRM_EMB_INIT_NORMAL, 0.5, 9 } };
    const char *const kv[] = { "evict=lru", "max_rows=500", NULL };
    void *s = make_store(big, 1, &o, kv);
    const ed_keys *k = &((const ed_store *)s)->tables[0].keys;
    enum { NB = 256 };
    static int64_t ids[NB];
    static float out[NB * RD], g[NB * RD];
    const int64_t M0 = k->M;
    int64_t over = 0, steps = 0;     // most tombstones past M/8 seen after a batch
    grm_status st = GRM_OK;
    for (int64_t b = 0; b < 300 && st == GRM_OK; b++) {    // 76,800 new ids, 500 kept
        for (int64_t i = 0; i < NB; i++) ids[i] = b * NB + i + 1;
        st = ops->lookup(s, out, 0, ids, NB, GRM_EMB_INSERT);
        if (st == GRM_OK) st = ops->update(s, 0, ids, g, NB, ++steps);
        const int64_t x = atomic_load(&k->used) - atomic_load(&k->live) - k->M / 8;
        if (x > over) over = x;
    }
    const grm_emb_stats x = stats_of(s, 0);
    // budget 500 + two batches = 1012 rows at most half full: 2048 slots
    tap_ok(st == GRM_OK && x.evictions > 50 * k->M / 8 && over <= 2 * NB && k->M == 2048,
           "max_rows 500, hint 65536 rows (%lld slots): the array takes the budget's size "
           "(%lld slots); %lld evictions, tombstones at most M/8 + %lld (bound 2 batches, "
           "%d)", (long long)M0, (long long)k->M, (long long)x.evictions, (long long)over,
           2 * NB);
    ops->destroy(s);
}

/* ---- FP16 cold rows (MTGRBoost §5.2) ---- */

static void test_fp16(const char *impl)
{
    fake_opt o = { .S = 2 };
    char k1[32];
    snprintf(k1, sizeof k1, "impl=%s", impl);
    static const grm_emb_table_spec zs[] = {
        { "t", 0, RD, GRM_EMB_INIT_NORMAL, 0.5, 9 },
        { "z", 0, RD, GRM_EMB_INIT_ZEROS, 0.0, 9 },
    };
    const char *const kv[] = { k1, "fp16_cold=true", "hot_threshold=3", "chunk_rows=64",
                               NULL };
    void *s = make_store(zs, 2, &o, kv);

    // Cold rows: FP16 round trip of the initial value, within FP16 precision.
    enum { N = 600 };
    int64_t ids[N];
    float got[N * RD], want[N * RD];
    for (int i = 0; i < N; i++) ids[i] = i * 13 - 100;
    ops->lookup(s, got, 0, ids, N, GRM_EMB_INSERT);
    int exact = 1;
    double maxrel = 0;
    for (int i = 0; i < N; i++) {
        grm_row_init(want + i * RD, RD, GRM_EMB_INIT_NORMAL, 0.5, 9, grm_str_hash64("t"),
                     ids[i]);
        for (int j = 0; j < RD; j++) {
            const float w = want[i * RD + j], x = got[i * RD + j];
            exact &= x == f16_round(w);
            const double rel = fabs((double)x - w) / (fabs(w) + 6.1e-5);
            maxrel = rel > maxrel ? rel : maxrel;
        }
    }
    tap_ok(exact && maxrel <= 1.0 / 2048,
           "impl=%s: %d cold rows read back as FP16(init) (RNE, as _Float16), max rel err %.2g "
           "<= 2^-11", impl, N, maxrel);

    // Special values through a zeros table: row = -0.5 * g = v exactly in FP32.
    static const float vals[RD] = { 1.00048828125f,     /* 1 + 2^-11: tie -> even 1.0 */
                                    1.00146484375f,     /* 1 + 3*2^-11: tie -> 1 + 2^-9 */
                                    5.9604644775390625e-8f,  /* 2^-24, smallest subnormal */
                                    8.940696716308594e-8f,   /* 1.5 * 2^-24: tie -> 2^-23 */
                                    65519.0f, 65520.0f, -1e-10f, -3.1415926f };
    float g[RD], zr[RD], zw[RD];
    for (int j = 0; j < RD; j++) g[j] = -2.0f * vals[j];
    const int64_t zid = 5;
    ops->update(s, 1, &zid, g, 1, 1);
    ops->lookup(s, zr, 1, &zid, 1, 0);
    for (int j = 0; j < RD; j++) zw[j] = f16_round(vals[j]);
    int same = 1;
    for (int j = 0; j < RD; j++) same &= memcmp(&zr[j], &zw[j], sizeof(float)) == 0;
    tap_ok(same && zr[0] == 1.0f && zr[2] == 5.9604644775390625e-8f && isinf(zr[5])
           && zr[4] == 65504.0f,
           "impl=%s: FP16 storage rounds ties to even, keeps subnormals, saturates 65520 to "
           "inf, as _Float16 does", impl);

    // Updates of a cold row round to FP16; at 3 accesses the row is promoted to FP32.
    const int64_t id = 7;
    float r0[RD], r1[RD], r2[RD], gg[RD], w1[RD], w2[RD];
    for (int j = 0; j < RD; j++) gg[j] = 0.001f * (float)(j + 1);
    ops->lookup(s, r0, 0, &id, 1, GRM_EMB_INSERT);     // access 1, cold
    ops->update(s, 0, &id, gg, 1, 2);
    ops->lookup(s, r1, 0, &id, 1, GRM_EMB_INSERT);     // access 2, cold
    for (int j = 0; j < RD; j++) w1[j] = f16_round(r0[j] - 0.5f * gg[j]);
    ops->lookup(s, r2, 0, &id, 1, GRM_EMB_INSERT);     // access 3: promoted
    ops->update(s, 0, &id, gg, 1, 3);
    ops->lookup(s, r2, 0, &id, 1, 0);
    for (int j = 0; j < RD; j++) w2[j] = w1[j] - 0.5f * gg[j];
    tap_ok(memcmp(r1, w1, sizeof(r1)) == 0 && memcmp(r2, w2, sizeof(r2)) == 0,
           "impl=%s: a cold row's update is stored rounded to FP16; after 3 accesses the row "
           "is FP32 and the next update is exact", impl);

    // Memory: the same 2000 rows cost less with FP16 cold storage.
    const char *const kv32[] = { k1, "chunk_rows=64", NULL };
    void *s32 = make_store(zs, 2, &o, kv32);
    void *s16 = make_store(zs, 2, &o, kv);
    int64_t many[100];
    float *out = malloc(100 * RD * sizeof(float));
    for (int b = 0; b < 20; b++) {     // batches of 100: room is reserved per batch
        for (int i = 0; i < 100; i++) many[i] = 100000 + 100 * b + i;
        ops->lookup(s16, out, 1, many, 100, GRM_EMB_INSERT);
        ops->lookup(s32, out, 1, many, 100, GRM_EMB_INSERT);
    }
    const grm_emb_stats a = stats_of(s16, 1), b = stats_of(s32, 1);
    tap_ok(a.rows == 2000 && b.rows == 2000 && a.bytes < b.bytes,
           "impl=%s: 2000 cold rows (dim 8, Adam-size state) hold %lld bytes in FP16 vs %lld in "
           "FP32 (%.1f%% saved)", impl, (long long)a.bytes, (long long)b.bytes,
           100.0 * (double)(b.bytes - a.bytes) / (double)b.bytes);
    free(out);
    ops->destroy(s16);
    ops->destroy(s32);
    ops->destroy(s);
}

/* ---- checkpoint round trip ---- */

static int exports_equal(void *a, void *b)
{
    grm_named_tensor x, y;
    int32_t i = 0, same = 1;
    for (; ops->tensors(a, i, &x) == GRM_OK; i++) {
        if (ops->tensors(b, i, &y) != GRM_OK) return 0;
        size_t bytes = grm_dtype_size(x.tensor.dtype);
        for (int d = 0; d < x.tensor.ndim; d++) bytes *= (size_t)x.tensor.shape[d];
        int ok = strcmp(x.name, y.name) == 0 && x.tensor.ndim == y.tensor.ndim
                 && x.tensor.shape[0] == y.tensor.shape[0];
        if (ok && strstr(x.name, ".counters") != NULL) {
            // Key slots (counter 1) depend on tombstones, which a restored store drops.
            const int64_t *p = x.tensor.data, *q = y.tensor.data;
            ok = p[0] == q[0] && p[2] == q[2] && p[3] == q[3] && p[4] == q[4];
        } else if (ok) {
            ok = memcmp(x.tensor.data, y.tensor.data, bytes) == 0;
        }
        if (!ok) tap_diag("tensor %s differs", x.name);
        same &= ok;
    }
    return same && i > 0 && ops->tensors(b, i, &y) == GRM_ENOTFOUND;
}

static void test_checkpoint(void)
{
    fake_opt o = { .S = 2 };
    const char *const kv[] = { "evict=lru", "max_rows=700", "fp16_cold=true",
                               "hot_threshold=2", "initial_rows=16", "chunk_rows=64", NULL };
    void *a = make_store(tspec, 1, &o, kv);
    ref_map *m = calloc(1, sizeof(*m));
    m->v = calloc(REF_SLOTS / 2, sizeof(ref_row));
    m->spec = tspec[0];
    run_random(a, m, 99, 15, 600);  // FP16 rows differ from the FP32 reference: not compared

    // Copy a's export, load it into b in reverse order.
    grm_named_tensor t[8];
    void *copies[8];
    int nt = 0;
    for (; nt < 8 && ops->tensors(a, nt, &t[nt]) == GRM_OK; nt++) {
        size_t bytes = grm_dtype_size(t[nt].tensor.dtype);
        for (int d = 0; d < t[nt].tensor.ndim; d++) bytes *= (size_t)t[nt].tensor.shape[d];
        copies[nt] = malloc(bytes + 1);
        memcpy(copies[nt], t[nt].tensor.data, bytes);
        t[nt].tensor.data = copies[nt];
    }
    void *b = make_store(tspec, 1, &o, kv);
    int loaded = 1;
    for (int k = nt - 1; k >= 0; k--) loaded &= ops->load(b, &t[k]) == GRM_OK;
    tap_ok(nt == 5 && loaded && exports_equal(a, b),
           "checkpoint: 5 tensors of a store with LRU budget and FP16 rows load (in reverse "
           "order) into a fresh store whose export is identical");

    // Both continue identically: same lookups, evictions and promotions.
    ref_map *m2 = calloc(1, sizeof(*m2));
    m2->v = calloc(REF_SLOTS / 2, sizeof(ref_row));
    m2->spec = tspec[0];
    ref_map *m3 = calloc(1, sizeof(*m3));
    m3->v = calloc(REF_SLOTS / 2, sizeof(ref_row));
    m3->spec = tspec[0];
    // run_random compares against its own (empty) reference; only the stores are compared.
    run_random(a, m2, 5, 10, 400);
    run_random(b, m3, 5, 10, 400);
    const grm_emb_stats sa = stats_of(a, 0), sb = stats_of(b, 0);
    tap_ok(exports_equal(a, b) && sa.rows == sb.rows && sa.evictions == sb.evictions
           && sa.evictions > 0,
           "... and after 10 more identical steps both stores still agree (%lld rows, %lld "
           "evictions)", (long long)sa.rows, (long long)sa.evictions);

    // Negative: wrong dim, unknown name, inconsistent counts, repeated ids.
    grm_named_tensor bad = t[1];
    bad.tensor.shape[1] = RD + 1;
    tap_ok(ops->load(b, &bad) == GRM_EFORMAT
           && has("emb-dynamic: tensor 't.weight': expected f32 [N, 8], got f32 with 2 dims"),
           "load of t.weight with dim 9: GRM_EFORMAT naming expected and got");
    bad = t[0];
    bad.name = "t.bogus";
    tap_ok(ops->load(b, &bad) == GRM_ENOTFOUND && has("no tensor named 't.bogus'"),
           "load of an unknown tensor name: GRM_ENOTFOUND");
    bad = t[0];
    bad.tensor.shape[0] = t[0].tensor.shape[0] - 1;
    int st = GRM_OK;
    for (int k = 1; k < nt; k++) ops->load(b, &t[k]);
    st = ops->load(b, &bad);
    tap_ok(st == GRM_EFORMAT && has("checkpoint has") && has("rows in 't.weight'"),
           "load with one id fewer than rows: GRM_EFORMAT naming both counts");
    int64_t *dup = copies[0];
    const int64_t keep = dup[1];
    dup[1] = dup[0];
    for (int k = 0; k < nt; k++) st = ops->load(b, &t[k]);
    tap_ok(st == GRM_EFORMAT && has("is reserved or repeated") && exports_equal(a, b),
           "load with a repeated id: GRM_EFORMAT; the failed loads left the table as it was");
    dup[1] = keep;
    for (int k = 0; k < nt; k++) free(copies[k]);
    ops->destroy(a);
    ops->destroy(b);
    free(m->v);
    free(m);
    free(m2->v);
    free(m2);
    free(m3->v);
    free(m3);
}

/* ---- negative tests ---- */

static void expect_create_error(const char *const *kv, const grm_emb_table_spec *sp,
                                int32_t n, const char *needle, const char *what)
{
    fake_opt o = { .S = 2 };
    grm_status st;
    void *s = try_store(sp, n, &o, &st, kv);
    tap_ok(s == NULL && st == GRM_EINVAL && has(needle), "create refuses %s", what);
    ops->destroy(s);
}

static void test_negative(void)
{
    static const char *const k_budget[] = { "max_rows=10", NULL };
    expect_create_error(k_budget, tspec, 1,
                        "emb-dynamic: max_rows = 10 needs an eviction policy; set evict = lru",
                        "max_rows without evict");
    static const char *const k_policy[] = { "evict=lfu", NULL };
    expect_create_error(k_policy, tspec, 1, "evict = lfu needs a row budget; set max_rows > 0",
                        "evict = lfu without max_rows");
    static const char *const k_chunk[] = { "chunk_rows=100", NULL };
    expect_create_error(k_chunk, tspec, 1, "chunk_rows = 100; need a power of two",
                        "chunk_rows 100");
    static const char *const k_lanes[] = { "probe_lanes=3", NULL };
    expect_create_error(k_lanes, tspec, 1, "probe_lanes = 3; need a power of two in [1, 32]",
                        "probe_lanes 3");
    static const char *const k_f16[] = { "fp16_cold=true", NULL };
    static const grm_emb_table_spec wide[] = { { "w", 0, 5000, 0, 0.0, 1 } };
    expect_create_error(k_f16, wide, 1, "table 'w': dim = 5000; fp16_cold supports dim <= 4096",
                        "fp16_cold with dim 5000");
    static const grm_emb_table_spec dupl[] = { { "a", 0, 4, 0, 0.0, 1 },
                                               { "a", 0, 4, 0, 0.0, 1 } };
    expect_create_error(NULL, dupl, 2, "table 'a' is declared twice", "duplicate table names");
    static const grm_emb_table_spec bad_init[] = { { "a", 0, 4, 7, 0.0, 1 } };
    expect_create_error(NULL, bad_init, 1, "table 'a': unknown initializer 7",
                        "initializer 7");
    static const grm_emb_table_spec no_dim[] = { { "a", 0, 0, 0, 0.0, 1 } };
    expect_create_error(NULL, no_dim, 1, "table 'a': dim = 0; need dim > 0", "dim 0");

    const void *cfg = NULL;
    const char *const typo[] = { "max_row=5" };
    tap_ok(harness_config_try(info, &cfg, typo, 1) != GRM_OK && has("max_row"),
           "the host refuses an unknown key (max_row) with its name");

    const int64_t live0 = grm__alloc_live();
    void *s = make_store(tspec, 1, NULL, NULL);
    float out[2 * RD];
    const int64_t res[2] = { 3, INT64_MIN };
    tap_ok(ops->lookup(s, out, 0, res, 2, GRM_EMB_INSERT) == GRM_EINVAL
           && has("emb-dynamic: table 't': id -9223372036854775808 is reserved")
           && stats_of(s, 0).rows == 0,
           "lookup of INT64_MIN: GRM_EINVAL naming the id, nothing inserted");
    const int64_t tomb = INT64_MIN + 1;
    tap_ok(ops->lookup(s, out, 0, &tomb, 1, 0) == GRM_EINVAL && has("is reserved"),
           "lookup of INT64_MIN + 1: GRM_EINVAL");
    tap_ok(ops->lookup(s, out, 1, res, 1, 0) == GRM_EINVAL
           && has("lookup: table index 1 outside [0, 1)"), "lookup of table 1 of 1: GRM_EINVAL");
    float g[RD] = { 0 };
    tap_ok(ops->update(s, 0, res, g, 1, 1) == GRM_EINVAL
           && has("update without an optimizer"), "update without an optimizer: GRM_EINVAL");
    tap_ok(ops->lookup(s, NULL, 0, res, 1, 0) == GRM_EINVAL && has("lookup of 1 ids with rows"),
           "lookup into NULL rows: GRM_EINVAL");
    grm_named_tensor t;
    tap_ok(ops->tensors(s, 4, &t) == GRM_ENOTFOUND && has("index 4 outside [0, 4)"),
           "tensors: without optimizer state a table has 4 tensors; index 4 is GRM_ENOTFOUND");
    grm_emb_stats st;
    tap_ok(ops->stats(s, 2, &st) == GRM_EINVAL && has("stats: table index 2"),
           "stats of table 2: GRM_EINVAL");
    const int64_t held = grm__alloc_live() - live0;
    ops->destroy(s);
    ops->destroy(NULL);
    tap_ok(held > 0 && grm__alloc_live() == live0,
           "destroy frees the store's %lld host allocations; destroy(NULL) is a no-op",
           (long long)held);
}

int main(void)
{
    info = harness_plugin("emb-dynamic");
    ops = info->ops;
    tap_plan(56);
    test_probing();
    test_first_touch();
    test_random("cpu", "none", 0, 0);
    test_random("ref", "none", 0, 0);
    test_random("cpu", "lru", 800, 6);
    test_random("ref", "lru", 800, 6);
    test_random("cpu", "lfu", 500, 0);
    test_random("ref", "lfu", 500, 0);
    test_growth();
    test_evict_order("lru");
    test_evict_order("lfu");
    test_ttl_and_protection();
    test_tombstones();
    test_fp16("cpu");
    test_fp16("ref");
    test_checkpoint();
    test_negative();
    return tap_failed_ ? 1 : 0;
}
