/* tests/test-emb-dynamic-stress.c - emb-dynamic under concurrent batches: several pthreads
 * (and the host's pool through host->parallel_for) run random insert/lookup/update batches
 * on the same tables while the key structure grows, rows are evicted and FP16 rows are
 * promoted. Expected values are independent of thread timing: a zeros-initialized table
 * is updated with dyadic gradients (every sum is exact in FP32, so the order of updates
 * cannot change the result) and compared with per-thread tallies merged afterwards; a
 * read-only table must always return grm_row_init rows (or their FP16 rounding). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grm/emb.h>
#include <grm/rng.h>

#include "emb-fakes.h"
#include "harness.h"
#include "tap.h"

#define D 4
#define NID 2000
#define NTHREADS 4

/* Table 0 "acc": zeros, updated. Table 1 "ro": uniform, looked up only. */
static const grm_emb_table_spec specs[] = {
    { "acc", 0, D, GRM_EMB_INIT_ZEROS, 0.0, 3 },
    { "ro", 0, D, GRM_EMB_INIT_UNIFORM, 0.25, 3 },
};

static _Atomic int64_t global_step;

typedef struct worker {
    void *store;
    uint64_t seed;
    int batches;
    int64_t max_batch;
    int fp16;               /* ro rows read back FP16-rounded */
    int track;              /* tallies are exact (no eviction) */
    float gsum[NID][D];     /* sum of gradients sent per id */
    int64_t nupd[NID];      /* updates per id */
    int64_t nlook[NID];     /* INSERT lookups per id (acc table) */
    int64_t bad_ro;         /* ro rows that were not grm_row_init */
    int64_t bad_acc;        /* acc rows that are not multiples of 1/32 */
    int64_t errors;
} worker;

static int ro_ok(const float *row, int64_t id, int fp16)
{
    float want[D];
    grm_row_init(want, D, GRM_EMB_INIT_UNIFORM, 0.25, 3, grm_str_hash64("ro"), id);
    for (int j = 0; j < D; j++) {
        const float w = fp16 ? (float)(_Float16)want[j] : want[j];
        if (memcmp(&w, &row[j], sizeof(float)) != 0) return 0;
    }
    return 1;
}

static int acc_ok(const float *row)
{
    for (int j = 0; j < D; j++) {
        const float x = row[j] * 32.0f;
        if (x != (float)(int64_t)x || row[j] > 1e6f || row[j] < -1e6f) return 0;
    }
    return 1;
}

/* One random batch of each kind. */
static void run_batch(worker *w, uint64_t *rs, int64_t *ids, float *rows, float *g,
                      uint8_t *mark)
{
    const int64_t n = 1 + (int64_t)(harness_rand(rs) % (uint64_t)w->max_batch);
    for (int64_t i = 0; i < n; i++) {
        const uint64_t r = harness_rand(rs) % (uint64_t)NID;
        ids[i] = (int64_t)((r * r) / NID);    // skewed: low ids are hot
    }
    // Read-only table, with INSERT: concurrent first touches of the same ids.
    if (ops->lookup(w->store, rows, 1, ids, n, GRM_EMB_INSERT) != GRM_OK) w->errors++;
    for (int64_t i = 0; i < n; i++) w->bad_ro += !ro_ok(rows + i * D, ids[i], w->fp16);
    // Accumulating table: INSERT lookup, then an update of the unique ids.
    if (ops->lookup(w->store, rows, 0, ids, n, GRM_EMB_INSERT) != GRM_OK) w->errors++;
    for (int64_t i = 0; i < n; i++) {
        w->bad_acc += !acc_ok(rows + i * D);
        w->nlook[ids[i]]++;
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (!mark[ids[i]]) {
            mark[ids[i]] = 1;
            ids[k++] = ids[i];
        }
    for (int64_t i = 0; i < k; i++) {
        mark[ids[i]] = 0;
        for (int j = 0; j < D; j++) {
            g[i * D + j] = (float)((int)(harness_rand(rs) % 17) - 8) / 16.0f;
            w->gsum[ids[i]][j] += g[i * D + j];
        }
        w->nupd[ids[i]]++;
    }
    const int64_t step = atomic_fetch_add(&global_step, 1) + 1;
    if (ops->update(w->store, 0, ids, g, k, step) != GRM_OK) w->errors++;
    // A read without INSERT of a few ids.
    if (ops->lookup(w->store, rows, 1, ids, k < 8 ? k : 8, 0) != GRM_OK) w->errors++;
    for (int64_t i = 0; i < (k < 8 ? k : 8); i++)
        w->bad_ro += !ro_ok(rows + i * D, ids[i], w->fp16);
}

static void run_worker(worker *w, int batches)
{
    uint64_t rs = w->seed;
    int64_t *ids = malloc((size_t)w->max_batch * sizeof(int64_t));
    float *rows = malloc((size_t)w->max_batch * D * sizeof(float));
    float *g = malloc((size_t)w->max_batch * D * sizeof(float));
    uint8_t *mark = calloc(NID, 1);
    for (int b = 0; b < batches; b++) run_batch(w, &rs, ids, rows, g, mark);
    w->seed = rs;
    free(ids);
    free(rows);
    free(g);
    free(mark);
}

static void *thread_main(void *arg)
{
    worker *w = arg;
    run_worker(w, w->batches);
    return NULL;
}

/* host->parallel_for over batch indices: each range runs batches on its own worker. */
typedef struct pool_ctx {
    worker *workers;        /* [NTHREADS] */
    _Atomic int next;
} pool_ctx;

static grm_status pool_range(void *ctx, int64_t begin, int64_t end)
{
    pool_ctx *c = ctx;
    const int me = atomic_fetch_add(&c->next, 1) % NTHREADS;
    // Ranges may run on the same pool thread one after another; each takes its own worker
    // slot, and the slots are distinct while the number of ranges is <= NTHREADS.
    run_worker(&c->workers[me], 40 * (int)(end - begin));
    return GRM_OK;
}

/* A store of the n tables sp with the config kv [nkv]. */
static void *make_store_of(const grm_emb_table_spec *sp, int n, const char *const *kv, int nkv)
{
    const void *cfg = NULL;
    // the fake optimizer of tests/emb-fakes.c: row -= 0.5 * grad; state = (updates, step)
    static fake_opt fake = { .S = 2 };
    grm_optimizer opt = { &fake_ops, &fake };
    void *s = NULL;
    if (harness_config_try(info, &cfg, kv, nkv) != GRM_OK
        || ops->create(cfg, sp, n, &opt, &s) != GRM_OK) {
        printf("Bail out! create: %s\n", harness_host()->last_error());
        exit(1);
    }
    return s;
}

static void *make_store(const char *const *kv, int nkv)
{
    return make_store_of(specs, 2, kv, nkv);
}

/* Merge the tallies and compare with the acc table's export. */
static int64_t check_acc(void *s, worker *ws, int exact_rows)
{
    static float gsum[NID][D];
    static int64_t nupd[NID], nlook[NID];
    memset(gsum, 0, sizeof(gsum));
    memset(nupd, 0, sizeof(nupd));
    memset(nlook, 0, sizeof(nlook));
    int64_t touched = 0;
    for (int t = 0; t < NTHREADS; t++)
        for (int i = 0; i < NID; i++) {
            for (int j = 0; j < D; j++) gsum[i][j] += ws[t].gsum[i][j];
            nupd[i] += ws[t].nupd[i];
            nlook[i] += ws[t].nlook[i];
        }
    for (int i = 0; i < NID; i++) touched += nlook[i] > 0;

    grm_named_tensor ids = find_tensor(s, "acc.ids"), w = find_tensor(s, "acc.weight");
    grm_named_tensor st = find_tensor(s, "acc.opt_state"), me = find_tensor(s, "acc.meta");
    if (ids.name == NULL || ids.tensor.shape[0] != touched) {
        tap_diag("export has %lld ids, %lld touched", (long long)ids.tensor.shape[0],
                 (long long)touched);
        return 1;
    }
    const int64_t *I = ids.tensor.data, *M = me.tensor.data;
    const float *W = w.tensor.data, *S = st.tensor.data;
    int64_t bad = 0;
    for (int64_t r = 0; r < touched; r++) {
        const int64_t id = I[r];
        if (id < 0 || id >= NID) {
            bad++;
            continue;
        }
        for (int j = 0; j < D; j++) {
            bad += exact_rows && W[r * D + j] != -0.5f * gsum[id][j];
            bad += S[r * 2 * D + j] != (float)nupd[id];
            bad += S[r * 2 * D + D + j] != (float)nupd[id];
        }
        bad += M[3 * r] != nupd[id] || M[3 * r + 1] != nlook[id];
    }
    return bad;
}

/* track: no eviction, so the tallies are exact (rows too unless fp16). */
static void phase(const char *what, const char *const *kv, int nkv, int fp16, int track)
{
    void *s = make_store(kv, nkv);
    worker *ws = calloc(NTHREADS, sizeof(worker));
    for (int t = 0; t < NTHREADS; t++) {
        ws[t].store = s;
        ws[t].seed = 1000 + (uint64_t)t;
        ws[t].batches = 150;
        ws[t].max_batch = 256;      // <= the plugin's grain: no nested parallel_for
        ws[t].fp16 = fp16;
        ws[t].track = track;
    }
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) pthread_create(&th[t], NULL, thread_main, &ws[t]);
    for (int t = 0; t < NTHREADS; t++) pthread_join(th[t], NULL);

    // Then batches on the host's pool, bigger ones.
    for (int t = 0; t < NTHREADS; t++) ws[t].max_batch = 1500;
    pool_ctx c = { .workers = ws };
    atomic_init(&c.next, 0);
    const grm_status pst = harness_host()->parallel_for(NTHREADS, 1, pool_range, &c);

    int64_t bad_ro = 0, bad_acc = 0, errors = 0;
    for (int t = 0; t < NTHREADS; t++) {
        bad_ro += ws[t].bad_ro;
        bad_acc += ws[t].bad_acc;
        errors += ws[t].errors;
    }
    grm_emb_stats st0, st1;
    ops->stats(s, 0, &st0);
    ops->stats(s, 1, &st1);
    tap_ok(pst == GRM_OK && errors == 0 && bad_ro == 0 && bad_acc == 0,
           "%s: %d threads x 150 batches, then pool batches: no errors, every read-only row "
           "equals grm_row_init%s (%lld bad), every updated row well-formed (%lld bad)", what,
           NTHREADS, fp16 ? " in FP16" : "", (long long)bad_ro, (long long)bad_acc);
    if (track) {
        const int64_t bad = check_acc(s, ws, !fp16);
        tap_ok(bad == 0 && st1.rows == st0.rows,
               "%s: final %soptimizer state, step and access counts equal the merged "
               "per-thread tallies (%lld rows, %lld differences)", what,
               fp16 ? "" : "rows, ", (long long)st0.rows, (long long)bad);
    } else {
        // A last serial step brings the tables back within the budget.
        const int64_t id = 0;
        const float g[D] = { 0 };
        ops->update(s, 0, &id, g, 1, atomic_fetch_add(&global_step, 1) + 1);
        float row[D];
        ops->lookup(s, row, 1, &id, 1, GRM_EMB_INSERT);
        ops->update(s, 1, &id, g, 1, atomic_fetch_add(&global_step, 1) + 1);
        ops->stats(s, 0, &st0);
        ops->stats(s, 1, &st1);
        tap_ok(st0.evictions > 0 && st1.evictions > 0 && st0.rows <= 300 && st1.rows <= 300,
               "%s: after a serial step both tables are within max_rows 300 (%lld, %lld "
               "rows; %lld, %lld evictions)", what, (long long)st0.rows, (long long)st1.rows,
               (long long)st0.evictions, (long long)st1.evictions);
    }
    ops->destroy(s);
    free(ws);
}

/* ---- lock-free reads never return a torn row ----
 * One thread updates 8 wide rows with a gradient equal in every element, so each row stays
 * a constant vector (0, -0.5, -1, ...); two threads read them with plain lookups, which
 * take no lock (emb_dynamic.h: sequence locks). A reader that copied a row while an update
 * was writing it must retry; one that did not would see a row whose elements differ. */
#define WIDE 512
#define WIDE_IDS 8

typedef struct torn_ctx {
    void *store;
    _Atomic int done;
    int updates;
    int64_t reads, torn, errors;    /* per reader */
} torn_ctx;

static void *torn_writer(void *arg)
{
    torn_ctx *c = arg;
    static float g[WIDE_IDS * WIDE];
    for (int i = 0; i < WIDE_IDS * WIDE; i++) g[i] = 1.0f;
    const int64_t ids[WIDE_IDS] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    for (int k = 0; k < c->updates; k++)
        if (ops->update(c->store, 0, ids, g, WIDE_IDS, k + 1) != GRM_OK) c->errors++;
    atomic_store(&c->done, 1);
    return NULL;
}

static void *torn_reader(void *arg)
{
    torn_ctx *c = arg;
    static _Thread_local float rows[WIDE_IDS * WIDE];
    const int64_t ids[WIDE_IDS] = { 8, 7, 6, 5, 4, 3, 2, 1 };
    while (!atomic_load(&c->done)) {
        if (ops->lookup(c->store, rows, 0, ids, WIDE_IDS, 0) != GRM_OK) c->errors++;
        for (int r = 0; r < WIDE_IDS; r++) {
            const float *row = rows + (size_t)r * WIDE;
            int torn = 0;
            for (int d = 1; d < WIDE; d++) torn |= row[d] != row[0];
            c->torn += torn;
        }
        c->reads += WIDE_IDS;
    }
    return NULL;
}

static void torn_reads(void)
{
    static const grm_emb_table_spec wide[] = { { "wide", 0, WIDE, GRM_EMB_INIT_ZEROS, 0.0, 3 } };
    static const char *const kv[] = { "initial_rows=16" };
    void *s = make_store_of(wide, 1, kv, 1);
    static float rows[WIDE_IDS * WIDE];
    const int64_t ids[WIDE_IDS] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    ops->lookup(s, rows, 0, ids, WIDE_IDS, GRM_EMB_INSERT);
    torn_ctx w = { .store = s, .updates = 20000 }, r[2] = { { .store = s }, { .store = s } };
    atomic_init(&w.done, 0);
    pthread_t tw, tr[2];
    for (int i = 0; i < 2; i++) {
        atomic_init(&r[i].done, 0);
        pthread_create(&tr[i], NULL, torn_reader, &r[i]);
    }
    pthread_create(&tw, NULL, torn_writer, &w);
    pthread_join(tw, NULL);
    for (int i = 0; i < 2; i++) atomic_store(&r[i].done, 1);
    for (int i = 0; i < 2; i++) pthread_join(tr[i], NULL);
    ops->lookup(s, rows, 0, ids, WIDE_IDS, 0);
    const int64_t reads = r[0].reads + r[1].reads, torn = r[0].torn + r[1].torn;
    tap_ok(w.errors + r[0].errors + r[1].errors == 0 && torn == 0 && reads > 0
           && rows[0] == -0.5f * (float)w.updates && rows[WIDE - 1] == rows[0],
           "plain lookups concurrent with %d updates of %d rows of dim %d: %lld rows read, "
           "%lld torn (each row a constant vector), final row %g", w.updates, WIDE_IDS, WIDE,
           (long long)reads, (long long)torn, (double)rows[0]);
    ops->destroy(s);
}

int main(void)
{
    info = harness_plugin("emb-dynamic");
    ops = info->ops;
    atomic_init(&global_step, 0);
    tap_plan(7);
    static const char *const grow[] = { "initial_rows=16", "chunk_rows=64" };
    phase("growth", grow, 2, 0, 1);
    static const char *const f16[] = { "initial_rows=16", "chunk_rows=64", "fp16_cold=true",
                                       "hot_threshold=4" };
    phase("fp16 cold + promotion", f16, 4, 1, 1);
    static const char *const lru[] = { "initial_rows=16", "chunk_rows=64", "evict=lru",
                                       "max_rows=300" };
    phase("lru max_rows 300", lru, 4, 0, 0);
    torn_reads();
    return tap_failed_ ? 1 : 0;
}
