/* tests/test-sparse.c - core/sparse.c against plain loops written here: table merging
 * (MTGRBoost §4.2 eq. 8), segment unique and layout recovery (FusedRec §3), ids partition
 * (rankwise sort), gather / scatter-add, reduce sum/mean, sequence tile, bucketize, mod.
 * Every reference is an obviously-correct loop (O(n^2) search, qsort, sequential sums) or a
 * hand-derived value (torch.bucketize outputs transcribed by hand); results that must not
 * depend on the thread count are compared bitwise between a 1-thread and a 2-thread pool. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grm_core.h"
#include "harness.h"
#include "sparse.h"
#include "tap.h"

static int has(const char *needle)
{
    const char *msg = grm_last_error();
    if (strstr(msg, needle) != NULL) return 1;
    tap_diag("message: %s", msg);
    return 0;
}

/* "One thread": run `fn` as a task of the 2-thread pool, where grm__parallel_for runs the
 * whole range inline on the calling worker (core/pool.c in_parallel). Restarting the pool
 * with 1 thread is not an option: grm__pool_init after grm__pool_fini is not safe once the
 * pool has run a job. */
typedef struct serial_job {
    grm_status (*fn)(void *);
    void *arg;
    grm_status st;
} serial_job;

static grm_status serial_range(void *ctx, int64_t b, int64_t e)
{
    serial_job *j = ctx;
    (void)e;
    if (b == 0) j->st = j->fn(j->arg);
    return GRM_OK;
}

static grm_status one_thread(grm_status (*fn)(void *), void *arg)
{
    serial_job j = { fn, arg, GRM_EINTERNAL };
    grm_status st = grm__parallel_for(2, 1, serial_range, &j);
    return st != GRM_OK ? st : j.st;
}

typedef struct op_args {
    void *o1, *o2, *o3, *o4, *o5;
    const void *i1, *i2, *i3;
    int64_t n1, n2, n3;
    int32_t k;
    grm__sparse_work *w;
} op_args;

static grm_status do_unique(void *p)
{
    op_args *a = p;
    return grm__sparse_segment_unique(a->o1, a->o2, a->o3, a->o4, a->o5, a->i1, a->i2, a->n1,
                                      a->k, a->w);
}

static grm_status do_partition(void *p)
{
    op_args *a = p;
    return grm__sparse_ids_partition(a->o1, a->o2, a->o3, a->o4, a->i1, a->i2, a->n1, a->k,
                                     a->w);
}

static grm_status do_scatter(void *p)
{
    op_args *a = p;
    return grm__sparse_scatter_add(a->o1, a->i1, a->i2, a->n1, a->n2, a->n3, a->w);
}

static grm_status do_reduce(void *p)
{
    op_args *a = p;
    return grm__sparse_segment_reduce(a->o1, a->i1, a->i2, a->i3, a->n1, a->n2, a->n3, a->k);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    return p;
}

/* An id drawn from a heavily duplicated range (with probability 3/4) or the full 40 bits. */
static int64_t dup_id(uint64_t *rng, int64_t range)
{
    uint64_t r = harness_rand(rng);
    return (r & 3) ? (int64_t)((r >> 8) % (uint64_t)range) : (int64_t)(r >> 24);
}

/* ---- table merging ---- */

static void test_plan(void)
{
    const grm__sparse_feature_spec specs[] = {
        { "a", 16, "adam", "normal", 0.01, NULL },
        { "b", 16, "adam", "normal", 0.01, "" },
        { "big", 64, "adam", "normal", 0.01, NULL },
        { "c", 16, "adam", "normal", 0.01, NULL },
        { "hist", 32, "sgd", "uniform", 0.05, "item" },
        { "recent", 32, "sgd", "uniform", 0.05, "item" },
        { "d", 16, "adam", "normal", 0.02, NULL },   /* another scale: not merged with a */
    };
    grm__sparse_plan *plan = NULL;
    grm_status st = grm__sparse_plan_build(specs, 7, &plan);
    tap_ok(st == GRM_OK && plan, "plan of 7 features builds");
    if (!plan) return;
    tap_ok(plan->ntables == 4, "4 tables: {a,b,c}, {big}, item{hist,recent}, {d} (got %d)",
           plan->ntables);
    const grm__sparse_slot *s = plan->slots;
    tap_ok(s[0].table == s[1].table && s[1].table == s[3].table && s[0].index == 0 &&
           s[1].index == 1 && s[3].index == 2 && s[0].k == 2,
           "a, b, c share one table with indices 0, 1, 2 and k = ceil(log2(4)) = 2");
    tap_ok(s[2].table != s[0].table && s[2].k == 1 && s[2].index == 0,
           "big (dim 64) has its own table, k = ceil(log2(2)) = 1");
    tap_ok(s[4].table == s[5].table && s[4].index == 0 && s[5].index == 0 &&
           plan->tables[s[4].table].nslots == 1 && plan->tables[s[4].table].explicit_name &&
           strcmp(plan->tables[s[4].table].name, "item") == 0,
           "hist and recent share table \"item\" and its id space");
    tap_ok(s[6].table != s[0].table, "d (init scale 0.02) is not merged with a (0.01)");
    const grm__sparse_table *t0 = &plan->tables[s[0].table];
    tap_ok(t0->max_id == ((int64_t)1 << 61) - 1 && t0->nfeatures == 3 &&
           t0->features[0] == 0 && t0->features[1] == 1 && t0->features[2] == 3,
           "merged table: max_id 2^61 - 1, features a, b, c in spec order");

    /* Hand case of eq. 8: feature b (i = 1, k = 2), id 5 -> (1 << 61) | 5. */
    int64_t in[3] = { 5, 0, ((int64_t)1 << 61) - 1 }, key[3];
    st = grm__sparse_plan_encode(plan, 1, key, in, 3);
    tap_ok(st == GRM_OK && key[0] == (((int64_t)1 << 61) | 5) && key[1] == ((int64_t)1 << 61) &&
           key[2] == ((int64_t)1 << 62) - 1, "encode b: (1 << 61) | x for 5, 0 and max_id");

    /* Round trip and no collisions: ids from a small range so equal ids meet across a, b, c. */
    enum { N = 3000 };
    int64_t *raw = xmalloc(3 * N * sizeof *raw), *keys = xmalloc(3 * N * sizeof *keys);
    int64_t *dec = xmalloc(3 * N * sizeof *dec);
    int32_t *idx = xmalloc(3 * N * sizeof *idx);
    uint64_t rng = 7;
    int ok = 1;
    const int32_t feats[3] = { 0, 1, 3 };
    for (int f = 0; f < 3; f++) {
        for (int j = 0; j < N; j++) {
            uint64_t r = harness_rand(&rng);
            raw[f * N + j] = j % 7 == 0 ? t0->max_id - (int64_t)(r % 3) : (int64_t)(r % 200);
        }
        ok &= grm__sparse_plan_encode(plan, feats[f], keys + f * N, raw + f * N, N) == GRM_OK;
    }
    ok &= grm__sparse_plan_decode(plan, s[0].table, idx, dec, keys, 3 * N) == GRM_OK;
    int rt = ok;
    for (int f = 0; f < 3; f++) {
        for (int j = 0; j < N; j++)
            rt &= idx[f * N + j] == s[feats[f]].index && dec[f * N + j] == raw[f * N + j];
    }
    tap_ok(rt, "decode(encode(x)) gives back (index, id) for %d random ids of a, b, c", 3 * N);
    int distinct = 1;
    for (int p = 0; p < 3 * N && distinct; p += 7) {   /* every 7th key against all */
        for (int q = 0; q < 3 * N; q++) {
            const int same_pair = p / N == q / N && raw[p] == raw[q];
            if ((keys[p] == keys[q]) != same_pair) {
                tap_diag("keys %d and %d: %lld vs %lld", p, q, (long long)keys[p],
                         (long long)keys[q]);
                distinct = 0;
                break;
            }
        }
    }
    tap_ok(distinct, "equal keys exactly when (feature, id) pairs are equal");
    /* In place (out aliases ids). */
    int64_t inplace[2] = { 9, 10 };
    st = grm__sparse_plan_encode(plan, 3, inplace, inplace, 2);
    tap_ok(st == GRM_OK && inplace[0] == (((int64_t)2 << 61) | 9), "encode in place");

    /* Overflow is refused, naming feature and id. */
    int64_t over[3] = { 1, (int64_t)1 << 61, 2 };
    st = grm__sparse_plan_encode(plan, 1, key, over, 3);
    tap_ok(st == GRM_EINVAL && has("feature \"b\"") && has("id 2305843009213693952") &&
           has("[0, 2305843009213693951]"), "id 2^61 in a k = 2 table is refused by name");
    int64_t negid[5000];
    for (int j = 0; j < 5000; j++) negid[j] = j;
    negid[4321] = -3;
    st = grm__sparse_plan_encode(plan, 2, negid, negid, 5000);
    tap_ok(st == GRM_EINVAL && has("feature \"big\"") && has("id -3") && has("position 4321"),
           "a negative id in a later block is refused with its position");
    st = grm__sparse_plan_encode(plan, 9, key, in, 1);
    tap_ok(st == GRM_EINVAL && has("feature 9"), "encode refuses an unknown feature");
    int64_t badkey = (int64_t)3 << 61;   /* index 3 of a 3-slot table */
    st = grm__sparse_plan_decode(plan, s[0].table, NULL, dec, &badkey, 1);
    tap_ok(st == GRM_EINVAL && has("id space 3"), "decode refuses a key of id space 3 of 3");

    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    grm__sparse_plan_print(mf, plan, "  ");
    fclose(mf);
    tap_ok(text && strstr(text, "table merged0 (merged): dim=16") &&
           strstr(text, "features=a,b,c") && strstr(text, "table item (named)") &&
           strstr(text, "feature c -> table merged0, id space 2: key = (2 << 61) | id"),
           "plan print names tables, their features and the key formula");
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
        tap_diag("%s", line);
    free(text);
    grm__sparse_plan_destroy(plan);
    free(raw), free(keys), free(dec), free(idx);

    /* Spec errors. */
    grm__sparse_feature_spec bad[2] = {
        { "x", 8, "adam", "normal", 0.01, "t" },
        { "y", 16, "adam", "normal", 0.01, "t" },
    };
    st = grm__sparse_plan_build(bad, 2, &plan);
    tap_ok(st == GRM_EINVAL && plan == NULL && has("feature \"y\" names table \"t\" with dim 16") &&
           has("feature \"x\" declared it with dim 8"),
           "sharing a table with another dim is refused");
    bad[1].dim = 8;
    bad[1].name = "x";
    st = grm__sparse_plan_build(bad, 2, &plan);
    tap_ok(st == GRM_EINVAL && has("\"x\" is declared twice"), "duplicate feature refused");
    bad[1].name = "y";
    bad[1].dim = 0;
    st = grm__sparse_plan_build(bad, 2, &plan);
    tap_ok(st == GRM_EINVAL && has("\"y\": dim 0 must be > 0"), "dim 0 refused");
    bad[1].dim = 8;
    bad[1].optimizer = NULL;
    st = grm__sparse_plan_build(bad, 2, &plan);
    tap_ok(st == GRM_EINVAL && has("\"y\" has no optimizer"), "missing optimizer refused");
}

/* ---- segment unique ---- */

typedef struct unique_out {
    int64_t *uid, *counts, *inv, U;
    int32_t *ufeat;
} unique_out;

static void unique_alloc(unique_out *o, int64_t n, int32_t F)
{
    o->uid = xmalloc((size_t)n * 8);
    o->inv = xmalloc((size_t)n * 8);
    o->counts = xmalloc((size_t)F * 8 + 8);
    o->ufeat = xmalloc((size_t)n * 4);
    o->U = -1;
}

static void unique_free(unique_out *o)
{
    free(o->uid), free(o->inv), free(o->counts), free(o->ufeat);
}

static int32_t feature_of(const int64_t *off, int32_t F, int64_t j)
{
    int32_t f = 0;
    while (f < F && off[f + 1] <= j) f++;
    return f;
}

/* The O(n^2) reference: j leads when no earlier j' of its feature has its id. */
static void unique_naive(unique_out *o, const int64_t *ids, const int64_t *off, int64_t n,
                         int32_t F)
{
    o->U = 0;
    for (int32_t f = 0; f < F; f++) o->counts[f] = 0;
    for (int64_t j = 0; j < n; j++) {
        const int32_t f = feature_of(off, F, j);
        int64_t lead = -1;
        for (int64_t q = off[f]; q < j; q++) {
            if (ids[q] == ids[j]) {
                lead = q;
                break;
            }
        }
        if (lead < 0) {
            o->uid[o->U] = ids[j];
            o->ufeat[o->U] = f;
            o->counts[f]++;
            o->inv[j] = o->U++;
        } else {
            o->inv[j] = o->inv[lead];
        }
    }
}

/* The sort-based reference for large n: sort (feature, id, j); the first j of each group
 * leads; leaders numbered in order of j. */
typedef struct trip {
    int64_t f, id, j;
} trip;

static int trip_cmp(const void *a, const void *b)
{
    const trip *x = a, *y = b;
    if (x->f != y->f) return x->f < y->f ? -1 : 1;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return (x->j > y->j) - (x->j < y->j);
}

static void unique_sorted(unique_out *o, const int64_t *ids, const int64_t *off, int64_t n,
                          int32_t F)
{
    trip *t = xmalloc((size_t)n * sizeof *t);
    int64_t *leader = xmalloc((size_t)n * 8);
    for (int32_t f = 0; f < F; f++) {
        for (int64_t j = off[f]; j < off[f + 1]; j++) t[j] = (trip){ f, ids[j], j };
    }
    qsort(t, (size_t)n, sizeof *t, trip_cmp);
    for (int64_t i = 0; i < n; i++) {
        const int newgroup = i == 0 || t[i].f != t[i - 1].f || t[i].id != t[i - 1].id;
        leader[t[i].j] = newgroup ? t[i].j : leader[t[i - 1].j];
    }
    o->U = 0;
    for (int32_t f = 0; f < F; f++) o->counts[f] = 0;
    for (int64_t j = 0; j < n; j++) {
        if (leader[j] == j) {
            const int32_t f = feature_of(off, F, j);
            o->uid[o->U] = ids[j];
            o->ufeat[o->U] = f;
            o->counts[f]++;
            o->inv[j] = o->U++;
        } else {
            o->inv[j] = o->inv[leader[j]];
        }
    }
    free(t), free(leader);
}

static int unique_equal(const unique_out *a, const unique_out *b, int64_t n, int32_t F)
{
    if (a->U != b->U) {
        tap_diag("U: %lld vs %lld", (long long)a->U, (long long)b->U);
        return 0;
    }
    for (int64_t u = 0; u < a->U; u++) {
        if (a->uid[u] != b->uid[u] || a->ufeat[u] != b->ufeat[u]) {
            tap_diag("unique %lld: (%d, %lld) vs (%d, %lld)", (long long)u, a->ufeat[u],
                     (long long)a->uid[u], b->ufeat[u], (long long)b->uid[u]);
            return 0;
        }
    }
    for (int64_t j = 0; j < n; j++) {
        if (a->inv[j] != b->inv[j]) {
            tap_diag("inverse %lld: %lld vs %lld", (long long)j, (long long)a->inv[j],
                     (long long)b->inv[j]);
            return 0;
        }
    }
    for (int32_t f = 0; f < F; f++) {
        if (a->counts[f] != b->counts[f]) {
            tap_diag("count %d: %lld vs %lld", f, (long long)a->counts[f],
                     (long long)b->counts[f]);
            return 0;
        }
    }
    return 1;
}

/* A row value that is a function of (feature, id, d), for the recovery checks. */
static float row_value(int32_t f, int64_t id, int64_t d)
{
    return (float)((uint64_t)(id * 131 + f * 7919 + d * 17) % 1009) * 0.25f - 100.0f;
}

/* Features of lengths lens [F] (a zero is an empty feature); ids heavily duplicated. */
static int64_t make_group(int64_t **ids, int64_t *off, const int64_t *lens, int32_t F,
                          int64_t range, uint64_t seed)
{
    int64_t n = 0;
    off[0] = 0;
    for (int32_t f = 0; f < F; f++) off[f + 1] = (n += lens[f]);
    *ids = xmalloc((size_t)n * 8 + 8);
    for (int64_t j = 0; j < n; j++) (*ids)[j] = dup_id(&seed, range);
    return n;
}

static void test_unique(void)
{
    grm__sparse_work w;
    grm__sparse_work_init(&w);
    const int64_t D = 8;

    /* Small: against the O(n^2) reference; one feature empty, equal ids across features. */
    {
        const int64_t lens[6] = { 700, 0, 1500, 1, 900, 300 };
        int64_t off[7], *ids;
        const int64_t n = make_group(&ids, off, lens, 6, 60, 11);
        ids[off[2]] = ids[0];   /* an id of feature 0 also in feature 2 */
        unique_out got, want;
        unique_alloc(&got, n, 6);
        unique_alloc(&want, n, 6);
        unique_naive(&want, ids, off, n, 6);
        grm_status st = grm__sparse_segment_unique(got.uid, got.ufeat, got.counts, got.inv,
                                                   &got.U, ids, off, n, 6, &w);
        tap_ok(st == GRM_OK && unique_equal(&got, &want, n, 6),
               "segment unique of %lld ids (6 features, one empty) matches the O(n^2) loop "
               "(U = %lld)", (long long)n, (long long)want.U);
        int across = 0;
        for (int64_t u = 0; u < got.U; u++) across += got.uid[u] == ids[0];
        tap_ok(across >= 2, "an id shared by features 0 and 2 stays twice in the output");

        /* Forward recovery: gather of unique rows by I_u reproduces the full layout. */
        float *urows = xmalloc((size_t)(got.U * D) * 4), *full = xmalloc((size_t)(n * D) * 4);
        for (int64_t u = 0; u < got.U; u++)
            for (int64_t d = 0; d < D; d++)
                urows[u * D + d] = row_value(got.ufeat[u], got.uid[u], d);
        st = grm__sparse_gather(full, urows, got.inv, n, got.U, D);
        int same = st == GRM_OK;
        for (int64_t j = 0; j < n && same; j++)
            for (int64_t d = 0; d < D; d++)
                same &= full[j * D + d] == row_value(feature_of(off, 6, j), ids[j], d);
        tap_ok(same, "recovery: gather(unique rows, I_u) reproduces the original layout");

        /* Backward recovery: scatter-add of full-layout gradients sums duplicates. */
        float *g = xmalloc((size_t)(n * D) * 4), *gu = xmalloc((size_t)(got.U * D) * 4);
        float *gw = xmalloc((size_t)(got.U * D) * 4);
        uint64_t rng = 5;
        for (int64_t x = 0; x < n * D; x++) g[x] = harness_randf(&rng);
        memset(gu, 0, (size_t)(got.U * D) * 4);
        memset(gw, 0, (size_t)(got.U * D) * 4);
        st = grm__sparse_scatter_add(gu, g, got.inv, n, got.U, D, &w);
        for (int64_t u = 0; u < got.U; u++) {   /* naive: every j with the same pair */
            for (int64_t j = 0; j < n; j++) {
                if (ids[j] != got.uid[u] || feature_of(off, 6, j) != got.ufeat[u]) continue;
                for (int64_t d = 0; d < D; d++) gw[u * D + d] += g[j * D + d];
            }
        }
        tap_ok(st == GRM_OK && memcmp(gu, gw, (size_t)(got.U * D) * 4) == 0,
               "recovery backward: scatter-add into unique rows equals the naive sum, bitwise");
        free(urows), free(full), free(g), free(gu), free(gw);
        unique_free(&got), unique_free(&want);
        free(ids);
    }

    /* Large (many partitions and chunks): against the sort-based reference, 1 vs 2 threads. */
    {
        const int64_t lens[5] = { 60000, 90000, 0, 50000, 100000 };
        int64_t off[6], *ids;
        const int64_t n = make_group(&ids, off, lens, 5, 5000, 12);
        unique_out got1, got2, want;
        unique_alloc(&got1, n, 5);
        unique_alloc(&got2, n, 5);
        unique_alloc(&want, n, 5);
        unique_sorted(&want, ids, off, n, 5);
        op_args a1 = { .o1 = got1.uid, .o2 = got1.ufeat, .o3 = got1.counts, .o4 = got1.inv,
                       .o5 = &got1.U, .i1 = ids, .i2 = off, .n1 = n, .k = 5, .w = &w };
        grm_status st1 = one_thread(do_unique, &a1);
        grm_status st2 = grm__sparse_segment_unique(got2.uid, got2.ufeat, got2.counts,
                                                    got2.inv, &got2.U, ids, off, n, 5, &w);
        tap_ok(st2 == GRM_OK && unique_equal(&got2, &want, n, 5),
               "segment unique of %lld ids matches the sort-based reference (U = %lld)",
               (long long)n, (long long)want.U);
        tap_ok(st1 == GRM_OK && unique_equal(&got1, &got2, n, 5),
               "segment unique: 1 and 2 threads give identical output");
        /* Optional outputs may be NULL. */
        int64_t U3 = 0;
        grm_status st3 = grm__sparse_segment_unique(got1.uid, NULL, NULL, got1.inv, &U3, ids,
                                                    off, n, 5, &w);
        tap_ok(st3 == GRM_OK && U3 == want.U && got1.inv[n - 1] == want.inv[n - 1],
               "segment unique without uniq_feat and counts");

        /* Ids partition of the unique group: runs by rank, stable, I_s consistent. */
        const int32_t R = 3;
        const int64_t U = want.U;
        int64_t *sorted = xmalloc((size_t)U * 8), *pos = xmalloc((size_t)U * 8), rc[3];
        int32_t *sfeat = xmalloc((size_t)U * 4);
        st1 = grm__sparse_ids_partition(sorted, sfeat, pos, rc, want.uid, want.ufeat, U, R, &w);
        int64_t start[3] = { 0, rc[0], rc[0] + rc[1] };
        int okp = st1 == GRM_OK && rc[0] + rc[1] + rc[2] == U;
        int64_t last[3] = { -1, -1, -1 };
        char *seen = calloc((size_t)U + 1, 1);
        for (int64_t i = 0; i < U && okp; i++) {
            const int32_t r = (int32_t)(grm_mix64((uint64_t)want.uid[i]) % 3);
            okp &= pos[i] >= start[r] && pos[i] < start[r] + rc[r] && pos[i] > last[r] &&
                   !seen[pos[i]] && sorted[pos[i]] == want.uid[i] && sfeat[pos[i]] == want.ufeat[i];
            if (okp) seen[pos[i]] = 1, last[r] = pos[i];
            if (!okp) tap_diag("ids partition: unique %lld rank %d pos %lld", (long long)i, r,
                               (long long)pos[i]);
        }
        tap_ok(okp, "ids partition: %lld ids in rank runs (%lld, %lld, %lld), stable, "
               "sorted[I_s[i]] == unique[i]", (long long)U, (long long)rc[0], (long long)rc[1],
               (long long)rc[2]);
        int64_t *sorted1 = xmalloc((size_t)U * 8), *pos1 = xmalloc((size_t)U * 8), rc1[3];
        op_args a2 = { .o1 = sorted1, .o3 = pos1, .o4 = rc1, .i1 = want.uid, .n1 = U, .k = R,
                       .w = &w };
        st1 = one_thread(do_partition, &a2);
        tap_ok(st1 == GRM_OK && memcmp(sorted1, sorted, (size_t)U * 8) == 0 &&
               memcmp(pos1, pos, (size_t)U * 8) == 0 && memcmp(rc1, rc, sizeof rc) == 0,
               "ids partition: 1 and 2 threads identical");
        st1 = grm__sparse_ids_partition(sorted1, NULL, pos1, rc1, want.uid, NULL, U, 0, &w);
        tap_ok(st1 == GRM_EINVAL && has("nranks 0 must be >= 1"), "ids partition refuses 0 ranks");
        st1 = grm__sparse_ids_partition(sorted1, sfeat, pos1, rc1, want.uid, NULL, U, 2, &w);
        tap_ok(st1 == GRM_EINVAL && has("feat is NULL"), "ids partition: sorted_feat needs feat");
        free(sorted), free(pos), free(sfeat), free(seen), free(sorted1), free(pos1);
        unique_free(&got1), unique_free(&got2), unique_free(&want);
        free(ids);
    }

    /* Errors. */
    {
        int64_t ids[4] = { 1, 2, 3, 4 }, out[4], inv[4], U;
        int64_t off_bad[3] = { 0, 3, 2 }, off_short[3] = { 0, 1, 3 }, off_neg[2] = { 1, 4 };
        grm_status st = grm__sparse_segment_unique(out, NULL, NULL, inv, &U, ids, off_bad, 4,
                                                   2, &w);
        tap_ok(st == GRM_EINVAL && has("offsets decrease at segment 1 (3 > 2)"),
               "segment unique refuses decreasing offsets");
        st = grm__sparse_segment_unique(out, NULL, NULL, inv, &U, ids, off_short, 4, 2, &w);
        tap_ok(st == GRM_EINVAL && has("offsets[2] is 3 but there are 4 ids"),
               "segment unique refuses offsets that do not cover the ids");
        st = grm__sparse_segment_unique(out, NULL, NULL, inv, &U, ids, off_neg, 4, 1, &w);
        tap_ok(st == GRM_EINVAL && has("offsets[0] is 1"),
               "segment unique refuses offsets[0] != 0");
        st = grm__sparse_segment_unique(out, NULL, NULL, inv, &U, ids, off_short, 3, 2, NULL);
        tap_ok(st == GRM_EINVAL && has("workspace is NULL"), "segment unique needs a workspace");
        int64_t off0[1] = { 0 }, cnt[1] = { 9 };
        st = grm__sparse_segment_unique(out, NULL, cnt, inv, &U, ids, off0, 0, 0, &w);
        tap_ok(st == GRM_OK && U == 0, "segment unique of an empty group");
    }
    grm__sparse_work_fini(&w);
}

/* ---- gather / scatter-add ---- */

static void test_gather_scatter(void)
{
    grm__sparse_work w;
    grm__sparse_work_init(&w);
    const int64_t nrows = 1000, n = 60000, D = 5;   /* D off any vector width */
    int64_t *idx = xmalloc((size_t)n * 8);
    float *src = xmalloc((size_t)(n * D) * 4), *rows0 = xmalloc((size_t)(nrows * D) * 4);
    float *r1 = xmalloc((size_t)(nrows * D) * 4), *r2 = xmalloc((size_t)(nrows * D) * 4);
    float *rw = xmalloc((size_t)(nrows * D) * 4), *out = xmalloc((size_t)(n * D) * 4);
    uint64_t rng = 21;
    for (int64_t j = 0; j < n; j++) {   /* skewed: a few rows get most updates */
        const uint64_t r = harness_rand(&rng);
        idx[j] = (r & 1) ? (int64_t)(r >> 20) % 8 : (int64_t)((r >> 20) % (uint64_t)nrows);
    }
    for (int64_t x = 0; x < n * D; x++) src[x] = harness_randf(&rng);
    for (int64_t x = 0; x < nrows * D; x++) rows0[x] = harness_randf(&rng);

    grm_status st = grm__sparse_gather(out, rows0, idx, n, nrows, D);
    int ok = st == GRM_OK;
    for (int64_t j = 0; j < n && ok; j++)
        ok &= memcmp(out + j * D, rows0 + idx[j] * D, (size_t)D * 4) == 0;
    tap_ok(ok, "gather of %lld rows equals the plain copy", (long long)n);

    memcpy(rw, rows0, (size_t)(nrows * D) * 4);
    for (int64_t j = 0; j < n; j++)
        for (int64_t d = 0; d < D; d++) rw[idx[j] * D + d] += src[j * D + d];
    memcpy(r1, rows0, (size_t)(nrows * D) * 4);
    memcpy(r2, rows0, (size_t)(nrows * D) * 4);
    op_args a1 = { .o1 = r1, .i1 = src, .i2 = idx, .n1 = n, .n2 = nrows, .n3 = D, .w = &w };
    grm_status st1 = one_thread(do_scatter, &a1);
    grm_status st2 = grm__sparse_scatter_add(r2, src, idx, n, nrows, D, &w);
    tap_ok(st2 == GRM_OK && memcmp(r2, rw, (size_t)(nrows * D) * 4) == 0,
           "scatter-add (2 threads, partitioned) equals the sequential loop bitwise");
    tap_ok(st1 == GRM_OK && memcmp(r1, r2, (size_t)(nrows * D) * 4) == 0,
           "scatter-add: 1 and 2 threads identical");

    idx[n - 7] = nrows;
    memcpy(r2, rows0, (size_t)(nrows * D) * 4);
    st = grm__sparse_scatter_add(r2, src, idx, n, nrows, D, &w);
    tap_ok(st == GRM_EINVAL && has("index 1000 at position 59993 is outside [0, 1000)") &&
           memcmp(r2, rows0, (size_t)(nrows * D) * 4) == 0,
           "scatter-add refuses an index out of range and leaves rows unchanged");
    idx[n - 7] = -1;
    st = grm__sparse_gather(out, rows0, idx, n, nrows, D);
    tap_ok(st == GRM_EINVAL && has("index -1 at position 59993"), "gather refuses index -1");
    st = grm__sparse_scatter_add(r2, src, idx, 10, nrows, D, NULL);
    tap_ok(st == GRM_OK, "scatter-add of a small batch needs no workspace");
    free(idx), free(src), free(rows0), free(r1), free(r2), free(rw), free(out);
    grm__sparse_work_fini(&w);
}

/* Every specialised row width (16, 32, 64, 128), odd ones (1, 5) and a multiple of 4 that is
 * not specialised (20), each large enough for the partitioned scatter-add and, at >= 8 MiB of
 * output with D % 4 == 0, for the gather's streaming stores; against the plain loops, bitwise,
 * with 2 threads and with 1. */
static void test_gather_scatter_dims(void)
{
    static const int64_t dims[] = { 1, 5, 16, 20, 32, 64, 128 };
    const int64_t nrows = 4096;
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        const int64_t D = dims[k];
        int64_t n = ((int64_t)9 << 20) / (4 * D) + 1;
        if (n * D < 70000) n = 70000;
        int64_t *idx = xmalloc((size_t)n * 8);
        float *src = xmalloc((size_t)(n * D) * 4), *rows0 = xmalloc((size_t)(nrows * D) * 4);
        float *rw = xmalloc((size_t)(nrows * D) * 4), *r1 = xmalloc((size_t)(nrows * D) * 4);
        float *r2 = xmalloc((size_t)(nrows * D) * 4);
        float *out = xmalloc((size_t)(n * D + 4) * 4);
        uint64_t rng = 100 + (uint64_t)D;
        for (int64_t j = 0; j < n; j++) {   /* half the updates on 3 hot rows */
            const uint64_t r = harness_rand(&rng);
            idx[j] = (r & 1) ? (int64_t)(r >> 20) % 3 : (int64_t)((r >> 20) % (uint64_t)nrows);
        }
        for (int64_t x = 0; x < n * D; x++) src[x] = harness_randf(&rng);
        for (int64_t x = 0; x < nrows * D; x++) rows0[x] = harness_randf(&rng);

        /* Aligned output (streamed when large) and one float off (cached stores). */
        int ok = 1;
        for (int shift = 0; shift < 2; shift++) {
            float *o = out + shift;
            grm_status st = grm__sparse_gather(o, rows0, idx, n, nrows, D);
            ok &= st == GRM_OK;
            for (int64_t j = 0; j < n && ok; j++)
                ok &= memcmp(o + j * D, rows0 + idx[j] * D, (size_t)D * 4) == 0;
        }
        tap_ok(ok, "gather D=%lld of %lld rows (%.1f MiB out, aligned and not) equals the copy",
               (long long)D, (long long)n, (double)(n * D * 4) / (1 << 20));

        memcpy(rw, rows0, (size_t)(nrows * D) * 4);
        for (int64_t j = 0; j < n; j++)
            for (int64_t d = 0; d < D; d++) rw[idx[j] * D + d] += src[j * D + d];
        memcpy(r1, rows0, (size_t)(nrows * D) * 4);
        memcpy(r2, rows0, (size_t)(nrows * D) * 4);
        op_args a1 = { .o1 = r1, .i1 = src, .i2 = idx, .n1 = n, .n2 = nrows, .n3 = D };
        const grm_status st1 = one_thread(do_scatter, &a1);
        const grm_status st2 = grm__sparse_scatter_add(r2, src, idx, n, nrows, D, NULL);
        tap_ok(st1 == GRM_OK && st2 == GRM_OK &&
               memcmp(r2, rw, (size_t)(nrows * D) * 4) == 0 &&
               memcmp(r1, rw, (size_t)(nrows * D) * 4) == 0,
               "scatter-add D=%lld of %lld rows equals the sequential loop bitwise, 1 and 2 "
               "threads", (long long)D, (long long)n);

        /* A batch shorter than the prefetch distance. */
        memcpy(r2, rows0, (size_t)(nrows * D) * 4);
        memcpy(rw, rows0, (size_t)(nrows * D) * 4);
        for (int64_t j = 0; j < 7; j++)
            for (int64_t d = 0; d < D; d++) rw[idx[j] * D + d] += src[j * D + d];
        grm_status st = grm__sparse_scatter_add(r2, src, idx, 7, nrows, D, NULL);
        ok = st == GRM_OK && memcmp(r2, rw, (size_t)(nrows * D) * 4) == 0;
        st = grm__sparse_gather(out, rows0, idx, 7, nrows, D);
        ok &= st == GRM_OK;
        for (int64_t j = 0; j < 7 && ok; j++)
            ok &= memcmp(out + j * D, rows0 + idx[j] * D, (size_t)D * 4) == 0;
        tap_ok(ok, "gather and scatter-add D=%lld of 7 rows equal the plain loops",
               (long long)D);
        free(idx), free(src), free(rows0), free(rw), free(r1), free(r2), free(out);
    }
    float dummy = 1.0f;
    const int64_t zero = 0;
    tap_ok(grm__sparse_gather(&dummy, &dummy, &zero, 1, 1, 0) == GRM_OK &&
           grm__sparse_scatter_add(&dummy, &dummy, &zero, 1, 1, 0, NULL) == GRM_OK &&
           dummy == 1.0f, "gather and scatter-add of rows of dim 0 do nothing");
}

/* ---- pooling ---- */

static void test_pooling(void)
{
    /* Long-tailed segments with empties: lengths 0, 1, 2, 3 and some of hundreds. */
    enum { B = 300 };
    const int64_t D = 7, nrows = 500, L = 3;
    int64_t off[B + 1];
    off[0] = 0;
    uint64_t rng = 33;
    for (int b = 0; b < B; b++) {
        const uint64_t r = harness_rand(&rng);
        off[b + 1] = off[b] + (b % 50 == 0 ? (int64_t)(r % 900) : (int64_t)(r % 4));
    }
    const int64_t n = off[B];
    int64_t *idx = xmalloc((size_t)n * 8);
    float *rows = xmalloc((size_t)(nrows * D) * 4), *out = xmalloc((size_t)(B * L * D) * 4);
    float *want = xmalloc((size_t)(B * L * D) * 4), *gi = xmalloc((size_t)(n * D) * 4);
    float *gw = xmalloc((size_t)(n * D) * 4), *go = xmalloc((size_t)(B * L * D) * 4);
    float *o1 = xmalloc((size_t)(B * D) * 4);
    for (int64_t j = 0; j < n; j++) idx[j] = (int64_t)(harness_rand(&rng) % (uint64_t)nrows);
    for (int64_t x = 0; x < nrows * D; x++) rows[x] = harness_randf(&rng);
    for (int64_t x = 0; x < B * L * D; x++) go[x] = harness_randf(&rng);

    for (int mode = 0; mode < 2; mode++) {
        const char *name = mode ? "mean" : "sum";
        for (int b = 0; b < B; b++) {
            for (int64_t d = 0; d < D; d++) {
                float s = 0.0f;
                for (int64_t j = off[b]; j < off[b + 1]; j++) s += rows[idx[j] * D + d];
                const int64_t len = off[b + 1] - off[b];
                want[b * D + d] = mode && len ? s / (float)len : s;
            }
        }
        grm_status st = grm__sparse_segment_reduce(out, rows, idx, off, B, nrows, D, mode);
        tap_ok(st == GRM_OK && memcmp(out, want, (size_t)(B * D) * 4) == 0,
               "reduce %s over %d long-tailed segments (%lld ids) equals the loop bitwise",
               name, B, (long long)n);
        op_args a1 = { .o1 = o1, .i1 = rows, .i2 = idx, .i3 = off, .n1 = B, .n2 = nrows,
                       .n3 = D, .k = mode };
        st = one_thread(do_reduce, &a1);
        tap_ok(st == GRM_OK && memcmp(out, o1, (size_t)(B * D) * 4) == 0,
               "reduce %s: 1 and 2 threads identical", name);
        for (int b = 0; b < B; b++) {
            const int64_t len = off[b + 1] - off[b];
            for (int64_t j = off[b]; j < off[b + 1]; j++)
                for (int64_t d = 0; d < D; d++)
                    gw[j * D + d] = mode ? go[b * D + d] / (float)len : go[b * D + d];
        }
        st = grm__sparse_segment_reduce_bwd(gi, go, off, B, D, mode);
        tap_ok(st == GRM_OK && memcmp(gi, gw, (size_t)(n * D) * 4) == 0,
               "reduce %s backward equals the loop", name);
    }
    /* Without idx: rows are the gathered layout [n, D]. */
    float *full = xmalloc((size_t)(n * D) * 4);
    grm__sparse_gather(full, rows, idx, n, nrows, D);
    grm_status st = grm__sparse_segment_reduce(o1, full, NULL, off, B, n, D, 0);
    grm__sparse_segment_reduce(out, rows, idx, off, B, nrows, D, 0);
    tap_ok(st == GRM_OK && memcmp(o1, out, (size_t)(B * D) * 4) == 0,
           "reduce with idx NULL over gathered rows equals the fused gather + reduce");
    free(full);

    for (int side = 0; side < 2; side++) {
        const char *name = side ? "last" : "first";
        memset(want, 0, (size_t)(B * L * D) * 4);
        for (int b = 0; b < B; b++) {
            const int64_t len = off[b + 1] - off[b], t = len < L ? len : L;
            for (int64_t s = 0; s < t; s++) {
                const int64_t j = side ? off[b + 1] - t + s : off[b] + s;
                for (int64_t d = 0; d < D; d++)
                    want[(b * L + s) * D + d] = rows[idx[j] * D + d];
            }
        }
        memset(out, 0x7f, (size_t)(B * L * D) * 4);   /* the padding must be written */
        st = grm__sparse_tile(out, rows, idx, off, B, L, nrows, D, side);
        tap_ok(st == GRM_OK && memcmp(out, want, (size_t)(B * L * D) * 4) == 0,
               "sequence tile (%s %lld, zero-padded) equals the loop", name, (long long)L);
        memset(gw, 0, (size_t)(n * D) * 4);
        for (int b = 0; b < B; b++) {
            const int64_t len = off[b + 1] - off[b], t = len < L ? len : L;
            for (int64_t s = 0; s < t; s++) {
                const int64_t j = side ? off[b + 1] - t + s : off[b] + s;
                for (int64_t d = 0; d < D; d++) gw[j * D + d] = go[(b * L + s) * D + d];
            }
        }
        memset(gi, 0x7f, (size_t)(n * D) * 4);
        st = grm__sparse_tile_bwd(gi, go, off, B, L, D, side);
        tap_ok(st == GRM_OK && memcmp(gi, gw, (size_t)(n * D) * 4) == 0,
               "sequence tile (%s) backward equals the loop", name);
    }
    /* Hand case: segments [r0 r1 r2 r3], [], [r4]; L = 2, last: [r2 r3], [0 0], [r4 0]. */
    {
        const float r[5] = { 1, 2, 3, 4, 5 };
        const int64_t o3[4] = { 0, 4, 4, 5 };
        float t[6];
        grm__sparse_tile(t, r, NULL, o3, 3, 2, 5, 1, GRM_SPARSE_TILE_LAST);
        tap_ok(t[0] == 3 && t[1] == 4 && t[2] == 0 && t[3] == 0 && t[4] == 5 && t[5] == 0,
               "tile last 2 by hand: [3 4 | 0 0 | 5 0]");
        float m[3];
        grm__sparse_segment_reduce(m, r, NULL, o3, 3, 5, 1, GRM_SPARSE_POOL_MEAN);
        tap_ok(m[0] == 2.5f && m[1] == 0.0f && m[2] == 5.0f, "mean by hand: [2.5, 0, 5]");
    }
    idx[n / 2] = nrows + 5;
    st = grm__sparse_segment_reduce(out, rows, idx, off, B, nrows, D, 0);
    tap_ok(st == GRM_EINVAL && has("index 505"), "reduce refuses an index out of range");
    st = grm__sparse_segment_reduce(out, rows, idx, off, B, nrows, D, 2);
    tap_ok(st == GRM_EINVAL && has("mode 2 is not one of"), "reduce refuses mode 2");
    st = grm__sparse_tile(out, rows, NULL, off, B, 0, n, D, 0);
    tap_ok(st == GRM_EINVAL && has("L 0 must be >= 1"), "tile refuses L = 0");
    free(idx), free(rows), free(out), free(want), free(gi), free(gw), free(go), free(o1);
}

/* The register-accumulated reduce of the row widths 16, 32, 64 and 128: sum and mean, with
 * and without idx, against the plain loop bitwise (rows hold some -0.0: 0 + -0 is +0), with
 * 2 threads and 1. */
static void test_reduce_dims(void)
{
    enum { B = 200 };
    static const int64_t dims[] = { 16, 32, 64, 128 };
    const int64_t nrows = 300;
    int64_t off[B + 1];
    off[0] = 0;
    uint64_t rng = 44;
    for (int b = 0; b < B; b++) {
        const uint64_t r = harness_rand(&rng);
        off[b + 1] = off[b] + (b % 40 == 0 ? (int64_t)(r % 700) : (int64_t)(r % 4));
    }
    const int64_t n = off[B];
    int64_t *idx = xmalloc((size_t)n * 8);
    for (int64_t j = 0; j < n; j++) idx[j] = (int64_t)(harness_rand(&rng) % (uint64_t)nrows);
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        const int64_t D = dims[k];
        float *rows = xmalloc((size_t)(nrows * D) * 4), *full = xmalloc((size_t)(n * D) * 4);
        float *out = xmalloc((size_t)(B * D) * 4), *o1 = xmalloc((size_t)(B * D) * 4);
        float *o2 = xmalloc((size_t)(B * D) * 4), *want = xmalloc((size_t)(B * D) * 4);
        for (int64_t x = 0; x < nrows * D; x++)
            rows[x] = x % 13 == 0 ? -0.0f : harness_randf(&rng);
        for (int64_t j = 0; j < n; j++)
            memcpy(full + j * D, rows + idx[j] * D, (size_t)D * 4);
        int ok = 1;
        for (int mode = 0; mode < 2; mode++) {
            for (int b = 0; b < B; b++) {
                for (int64_t d = 0; d < D; d++) {
                    float sum = 0.0f;
                    for (int64_t j = off[b]; j < off[b + 1]; j++) sum += rows[idx[j] * D + d];
                    const int64_t len = off[b + 1] - off[b];
                    want[b * D + d] = mode && len ? sum / (float)len : sum;
                }
            }
            grm_status st = grm__sparse_segment_reduce(out, rows, idx, off, B, nrows, D, mode);
            ok &= st == GRM_OK && memcmp(out, want, (size_t)(B * D) * 4) == 0;
            st = grm__sparse_segment_reduce(o2, full, NULL, off, B, n, D, mode);
            ok &= st == GRM_OK && memcmp(o2, want, (size_t)(B * D) * 4) == 0;
            op_args a1 = { .o1 = o1, .i1 = rows, .i2 = idx, .i3 = off, .n1 = B, .n2 = nrows,
                           .n3 = D, .k = mode };
            st = one_thread(do_reduce, &a1);
            ok &= st == GRM_OK && memcmp(o1, want, (size_t)(B * D) * 4) == 0;
        }
        tap_ok(ok, "reduce sum and mean D=%lld (with and without idx, 1 and 2 threads) equal "
               "the loop bitwise", (long long)D);
        free(rows), free(full), free(out), free(o1), free(o2), free(want);
    }
    free(idx);
}

/* ---- bucketize, mod ---- */

static void test_transforms(void)
{
    /* The tie rule (grm/transform.h): a value on a boundary goes to the bucket above it, as
     * RecIS and torch.bucketize(v, [1, 2, 3], right=True) = [3 0 1 1 3 3 3 0] (torch 1.13;
     * right=False, the other rule, gives [3 0 0 1 2 3 3 0]). */
    const double b3[3] = { 1, 2, 3 };
    const float v[8] = { NAN, 0, 1, 1.5f, 3, 4, INFINITY, -INFINITY };
    const int64_t want[8] = { 3, 0, 1, 1, 3, 3, 3, 0 };
    int64_t out[8];
    grm_status st = grm__sparse_bucketize(out, v, 8, b3, 3);
    tap_ok(st == GRM_OK && memcmp(out, want, sizeof want) == 0,
           "bucketize [NaN 0 1 1.5 3 4 inf -inf] by [1 2 3] = torch's right=True "
           "[3 0 1 1 3 3 3 0]: 1 and 3 on a boundary go up");
    /* MovieLens ratings by [4] (share/pipelines/ml100k-ranking.ini): 4 and 5 are label 1.
     * i64 values compare exactly: 2^24 + 1 is no float, so a detour through f32 would put it
     * below its own boundary. */
    const int64_t rating[6] = { 1, 2, 3, 4, 5, (1 << 24) + 1 };
    const double b4[2] = { 4, (double)((1 << 24) + 1) };
    const int64_t want4[6] = { 0, 0, 0, 1, 1, 2 };
    grm_bucketize(out, rating, GRM_DTYPE_I64, 6, b4, 2);
    tap_ok(memcmp(out, want4, sizeof want4) == 0,
           "grm_bucketize of i64 ratings 1..5 by [4] gives 0 0 0 1 1; 2^24+1 on its own "
           "boundary goes up to 2");
    const double bd[3] = { 1, 1, 2 };
    const float vd[4] = { 1, 1.5f, 0.5f, 2 };
    st = grm__sparse_bucketize(out, vd, 4, bd, 3);
    tap_ok(st == GRM_OK && out[0] == 2 && out[1] == 2 && out[2] == 0 && out[3] == 3,
           "bucketize with repeated boundaries [1 1 2] = torch's right=True: 1 -> 2, "
           "1.5 -> 2, 0.5 -> 0, 2 -> 3");
    st = grm__sparse_bucketize(out, v, 8, NULL, 0);
    int zero = st == GRM_OK;
    for (int j = 0; j < 8; j++) zero &= out[j] == 0;
    tap_ok(zero, "bucketize with no boundaries gives 0");
    /* Random against a linear count for every nb in 1 .. 70. */
    enum { N = 3000 };
    float *vals = xmalloc(N * 4);
    double bnd[70];
    int64_t *got = xmalloc(N * 8);
    uint64_t rng = 44;
    int ok = 1;
    for (int nb = 1; nb <= 70 && ok; nb++) {
        double x = -5.0;
        for (int i = 0; i < nb; i++) bnd[i] = (x += (double)(harness_rand(&rng) % 3) * 0.25);
        for (int j = 0; j < N; j++)
            vals[j] = j % 5 == 0 ? (float)bnd[harness_rand(&rng) % (uint64_t)nb]
                                 : harness_randf(&rng) * 12.0f - 1.0f;
        ok &= grm__sparse_bucketize(got, vals, N, bnd, nb) == GRM_OK;
        for (int j = 0; j < N && ok; j++) {
            int64_t c = 0;
            for (int k = 0; k < nb; k++) c += bnd[k] <= vals[j];
            if (got[j] != c) {
                tap_diag("nb %d value %g: got %lld want %lld", nb, (double)vals[j],
                         (long long)got[j], (long long)c);
                ok = 0;
            }
        }
    }
    tap_ok(ok, "bucketize equals the linear count for nb = 1 .. 70 (ties included)");
    const double unsorted[3] = { 1, 3, 2 };
    st = grm__sparse_bucketize(out, v, 8, unsorted, 3);
    tap_ok(st == GRM_EINVAL && has("boundary 2 is 2 after 3"), "bucketize refuses unsorted");

    const int64_t x[6] = { -7, 7, -1, INT64_MIN, INT64_MAX, 0 };
    int64_t r[6];
    st = grm__sparse_mod(r, x, 6, 3);
    tap_ok(st == GRM_OK && r[0] == 2 && r[1] == 1 && r[2] == 2 && r[3] == 1 && r[4] == 1 &&
           r[5] == 0, "mod 3 by hand (floored, as torch.remainder): -7->2 7->1 -1->2 "
           "INT64_MIN->1 INT64_MAX->1 0->0");
    int64_t *ids = xmalloc(N * 8), *m = xmalloc(N * 8);
    const int64_t mods[7] = { 1, 2, 3, 1000003, ((int64_t)1 << 40) + 7, INT64_MAX,
                              ((int64_t)1 << 62) };
    ok = 1;
    for (int k = 0; k < 7 && ok; k++) {
        for (int j = 0; j < N; j++) ids[j] = (int64_t)harness_rand(&rng);
        ids[0] = INT64_MIN, ids[1] = INT64_MAX, ids[2] = -1, ids[3] = mods[k], ids[4] = -mods[k];
        ok &= grm__sparse_mod(m, ids, N, mods[k]) == GRM_OK;
        for (int j = 0; j < N && ok; j++) {
            int64_t want_r = ids[j] % mods[k];
            if (want_r < 0) want_r += mods[k];
            if (m[j] != want_r) {
                tap_diag("%lld mod %lld: got %lld want %lld", (long long)ids[j],
                         (long long)mods[k], (long long)m[j], (long long)want_r);
                ok = 0;
            }
        }
    }
    tap_ok(ok, "mod equals C's %% made non-negative for 7 moduli up to INT64_MAX");
    st = grm__sparse_mod(r, x, 6, 0);
    tap_ok(st == GRM_EINVAL && has("modulus 0 must be >= 1"), "mod refuses modulus 0");
    free(vals), free(got), free(ids), free(m);
}

int main(void)
{
    if (grm__pool_init(2) != GRM_OK) {
        printf("Bail out! pool init: %s\n", grm_last_error());
        return 1;
    }
    test_plan();
    test_unique();
    test_gather_scatter();
    test_gather_scatter_dims();
    test_pooling();
    test_reduce_dims();
    test_transforms();
    grm__pool_fini();
    tap_plan(tap_n_);
    return tap_done();
}
