/* tests/test-cuda-cache.c - kernels/emb_cache.cu, the HBM cache of embedding rows over a
 * host-RAM tier (seed 003 §2.2), with the tier written here as a plain C map.
 *  - Training through the cache: a duplicate-heavy, skewed id stream over 3,000 ids (the
 *    64-bit edge ids among them), rows gathered from the cache by slot, gradients made from
 *    the rows, Adagrad on the cache's arrays (grm_cuda_row_opt_step), the next batch
 *    prefetched between lookup and update. Budgets of all the ids, 2, 3 and 2 batches (the
 *    last without prefetch): the per-batch losses and every record of the tier after a
 *    flush (row, Adagrad sum, step count) are bitwise those of the run that never evicts,
 *    and that run matches a host model of the same training (rtol 1e-4). The small budgets
 *    must have evicted, written back and re-read rows, or the comparison proves nothing.
 *  - With prefetch, every lookup after the first batch finds all its rows resident.
 *  - The pathological stream of the issue: batch 0 inserts A (the oldest rows), batch 1 B,
 *    batch 2 looks up A again, then the prefetch of batch 3 brings C in a budget of 2|A|:
 *    A must keep its slots and B must be the rows evicted (insertion-order LRU would take
 *    A). A prefetch that needs the protected rows fails with GRM_ENOMEM naming the budget
 *    and leaves them in place.
 *  - Argument checks (no device needed). */
#include <math.h>

#include <grm/rng.h>

#include "cuda-common.h"

#define NKEYS 3000
#define NB 40
#define BATCH 512
#define DIM 16
#define SF 1                 /* Adagrad: one state float a row element */
#define W (DIM * (1 + SF))
#define MAPCAP 8192
#define N_NEG 5
#define N_RUN 4
#define N_TRAIN (3 * (N_RUN - 1) + 5)
#define N_PIN 5

/* ---- the host tier: key -> record ---- */
typedef struct tier {
    int64_t keys[MAPCAP];
    uint8_t used[MAPCAP];
    float vals[MAPCAP][W];
    int64_t steps[MAPCAP];
    int64_t n, stores, fetches;
} tier;

static int64_t tier_slot(const tier *t, int64_t key)
{
    uint64_t i = grm_mix64((uint64_t)key) % MAPCAP;
    while (t->used[i] && t->keys[i] != key) i = (i + 1) % MAPCAP;
    return (int64_t)i;
}

static grm_status tier_fetch(void *ctx, float *vals, int64_t *steps, uint8_t *found,
                             const int64_t *keys, int64_t n)
{
    tier *t = ctx;
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = tier_slot(t, keys[i]);
        found[i] = t->used[s];
        if (!found[i]) continue;
        memcpy(vals + i * W, t->vals[s], sizeof t->vals[s]);
        steps[i] = t->steps[s];
        t->fetches++;
    }
    return GRM_OK;
}

static grm_status tier_store(void *ctx, const int64_t *keys, const float *vals,
                             const int64_t *steps, int64_t n)
{
    tier *t = ctx;
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = tier_slot(t, keys[i]);
        if (!t->used[s]) t->n++;
        t->used[s] = 1;
        t->keys[s] = keys[i];
        memcpy(t->vals[s], vals + i * W, sizeof t->vals[s]);
        t->steps[s] = steps[i];
        t->stores++;
    }
    return GRM_OK;
}

static int64_t universe(int64_t i)
{
    static const int64_t edge[4] = {INT64_MIN, INT64_MAX, 0, -1};
    if (i < 4) return edge[i];
    return (int64_t)grm_mix64((uint64_t)i * 0x9E37u);
}

/* Batch b's ids: skewed (u^3 favours low indices) with a window that drifts, so ids leave
 * and come back. */
static void make_stream(int64_t ids[NB][BATCH])
{
    uint64_t rng = 77;
    for (int b = 0; b < NB; b++)
        for (int i = 0; i < BATCH; i++) {
            const double u = 0.5 * (harness_randf(&rng) + 1.0);
            const int64_t k = (int64_t)(u * u * u * 1200.0) + (b * 45) % 1800;
            ids[b][i] = universe(k % NKEYS);
        }
}

static float target(int64_t key, int j)
{
    return (float)((grm_mix64((uint64_t)key + (uint64_t)j) >> 40) % 1000) / 1000.0f - 0.5f;
}

static const grm_cuda_row_opt opt = {.kind = GRM_CUDA_OPT_ADAGRAD, .lr = 0.1, .eps = 1e-10,
                                     .initial_accumulator_value = 0.1};

static grm_cuda_cache_opts cache_opts(tier *t, int64_t budget)
{
    grm_cuda_cache_opts o = {.budget_rows = budget, .dim = DIM, .state_floats = SF,
                             .init = GRM_EMB_INIT_UNIFORM, .init_scale = 0.05, .seed = 11,
                             .table_hash = 5};
    o.backing.ctx = t;
    o.backing.fetch = tier_fetch;
    o.backing.store = tier_store;
    return o;
}

typedef struct run_out {
    double loss[NB];
    tier *t;
    grm_cuda_cache_stats st;
    int pinned_ok;          /* every prefetch left the batch's slots in place */
    int64_t first_unique;
} run_out;

/* The training loop of the file comment; returns the tier after a flush in r->t. */
static void train(run_out *r, int64_t ids[NB][BATCH], int64_t budget, int prefetch)
{
    r->t = tc_xmalloc(sizeof(tier));
    grm_cuda_cache_opts o = cache_opts(r->t, budget);
    grm_cuda_cache *c = NULL;
    if (grm_cuda_cache_create(&c, &o) != GRM_OK) tc_bail("grm_cuda_cache_create");
    float *table, *state;
    int64_t *steps;
    grm_cuda_cache_arrays(c, &table, &state, &steps);
    int64_t *d_ids = tc_alloc(sizeof(int64_t) * NB * BATCH);
    if (grm_cuda_memcpy_h2d(d_ids, ids, sizeof(int64_t) * NB * BATCH) != GRM_OK)
        tc_bail("upload ids");
    int64_t *d_slots = tc_alloc(BATCH * 8), *d_check = tc_alloc(BATCH * 8);
    float *d_rows = tc_alloc(BATCH * DIM * 4), *d_grad = tc_alloc(BATCH * DIM * 4);
    int64_t *d_uniq = tc_alloc(BATCH * 8), *d_uoff = tc_alloc(16), *d_inv = tc_alloc(BATCH * 8);
    int32_t *d_ufeat = tc_alloc(BATCH * 4);
    int64_t *d_coff = tc_alloc((BATCH + 1) * 8), *d_cidx = tc_alloc(BATCH * 8);
    const int64_t off[2] = {0, BATCH};
    int64_t *d_off = tc_upload(off, sizeof off);
    size_t wu = 0, wc = 0;
    if (grm_cuda_segment_unique_workspace(BATCH, &wu) != GRM_OK ||
        grm_cuda_csr_from_inverse_workspace(BATCH, &wc) != GRM_OK)
        tc_bail("workspace");
    void *d_ws = tc_alloc(wu > wc ? wu : wc);
    static float rows[BATCH * DIM], grad[BATCH * DIM];
    int64_t slots[BATCH], check[BATCH];
    r->pinned_ok = 1;
    for (int b = 0; b < NB; b++) {
        const int64_t *k = d_ids + (int64_t)b * BATCH;
        if (grm_cuda_cache_ensure(c, d_slots, k, BATCH, b, b, GRM_CUDA_CACHE_UPDATE, NULL) !=
            GRM_OK)
            tc_bail("lookup");
        if (b == 0) {
            grm_cuda_cache_stats s0;
            grm_cuda_cache_get_stats(c, &s0);
            r->first_unique = s0.unique;
        }
        if (prefetch && b + 1 < NB) {
            if (grm_cuda_cache_ensure(c, NULL, k + BATCH, BATCH, b + 1, b, GRM_CUDA_CACHE_PREFETCH,
                                      NULL) != GRM_OK)
                tc_bail("prefetch");
            if (grm_cuda_cache_find(c, d_check, k, BATCH, NULL) != GRM_OK) tc_bail("find");
            tc_download(slots, d_slots, sizeof slots);
            tc_download(check, d_check, sizeof check);
            if (memcmp(slots, check, sizeof slots) != 0) r->pinned_ok = 0;
        }
        if (grm_cuda_gather_fwd(d_rows, table, d_slots, BATCH, budget, DIM, GRM_DTYPE_F32,
                                NULL) != GRM_OK)
            tc_bail("gather");
        tc_download(rows, d_rows, sizeof rows);
        double loss = 0;
        for (int i = 0; i < BATCH; i++)
            for (int j = 0; j < DIM; j++) {
                const float e = rows[i * DIM + j] - target(ids[b][i], j);
                grad[i * DIM + j] = e;
                loss += 0.5 * (double)e * (double)e;
            }
        r->loss[b] = loss;
        if (grm_cuda_memcpy_h2d(d_grad, grad, sizeof grad) != GRM_OK) tc_bail("upload grad");
        if (grm_cuda_segment_unique(d_uniq, d_ufeat, d_uoff, d_inv, d_slots, d_off, BATCH, 1,
                                    d_ws, wu, NULL) != GRM_OK)
            tc_bail("unique");
        int64_t uoff[2];
        tc_download(uoff, d_uoff, sizeof uoff);
        if (grm_cuda_csr_from_inverse(d_coff, d_cidx, d_inv, BATCH, uoff[1], d_ws, wc, NULL) !=
                GRM_OK ||
            grm_cuda_row_opt_step(table, state, steps, d_grad, d_uniq, d_coff, d_cidx, uoff[1],
                                  DIM, &opt, NULL) != GRM_OK)
            tc_bail("optimizer step");
    }
    if (grm_cuda_cache_flush(c, NULL) != GRM_OK) tc_bail("flush");
    grm_cuda_cache_get_stats(c, &r->st);
    grm_cuda_cache_destroy(c);
    void *bufs[] = {d_ids, d_slots, d_check, d_rows, d_grad, d_uniq, d_uoff, d_inv,
                    d_ufeat, d_coff, d_cidx, d_off, d_ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) grm_cuda_free(bufs[i]);
}

/* The same training on the host, every row in memory (rtol check of the cache's run). */
static void host_model(tier *t, int64_t ids[NB][BATCH], double *loss)
{
    memset(t, 0, sizeof *t);
    static float g[NKEYS][DIM];
    for (int b = 0; b < NB; b++) {
        loss[b] = 0;
        int64_t touched[BATCH], nt = 0;
        for (int i = 0; i < BATCH; i++) {
            const int64_t key = ids[b][i], s = tier_slot(t, key);
            if (!t->used[s]) {
                t->used[s] = 1;
                t->keys[s] = key;
                t->n++;
                grm_row_init(t->vals[s], DIM, GRM_EMB_INIT_UNIFORM, 0.05, 11, 5, key);
                memset(t->vals[s] + DIM, 0, sizeof(float) * DIM * SF);
                t->steps[s] = 0;
            }
            int seen = 0;
            for (int64_t q = 0; q < nt; q++) seen |= touched[q] == s;
            if (!seen) {
                memset(g[nt], 0, sizeof g[nt]);
                touched[nt++] = s;
            }
            int64_t q = 0;
            while (touched[q] != s) q++;
            for (int j = 0; j < DIM; j++) {
                const float e = t->vals[s][j] - target(key, j);
                g[q][j] += e;
                loss[b] += 0.5 * (double)e * (double)e;
            }
        }
        for (int64_t q = 0; q < nt; q++) {
            const int64_t s = touched[q], step = ++t->steps[s];
            float *p = t->vals[s], *acc = t->vals[s] + DIM;
            for (int j = 0; j < DIM; j++) {
                acc[j] = (step == 1 ? (float)opt.initial_accumulator_value : acc[j]) +
                         g[q][j] * g[q][j];
                p[j] -= (float)opt.lr * g[q][j] / (sqrtf(acc[j]) + (float)opt.eps);
            }
        }
    }
}

/* Every record of a (flushed) tier equals b's: same keys, bitwise values and steps. */
static int same_tier(const tier *a, const tier *b, int bitwise, float *ga, float *gb,
                     int64_t *nv)
{
    if (a->n != b->n) return 0;
    *nv = 0;
    for (int64_t i = 0; i < MAPCAP; i++) {
        if (!a->used[i]) continue;
        const int64_t s = tier_slot(b, a->keys[i]);
        if (!b->used[s] || a->steps[i] != b->steps[s]) return 0;
        if (bitwise && memcmp(a->vals[i], b->vals[s], sizeof a->vals[i]) != 0) return 0;
        memcpy(ga + *nv, a->vals[i], sizeof a->vals[i]);
        memcpy(gb + *nv, b->vals[s], sizeof b->vals[s]);
        *nv += W;
    }
    return 1;
}

static void test_training(void)
{
    static int64_t ids[NB][BATCH];
    make_stream(ids);
    int64_t maxu = 0;
    for (int b = 0; b < NB; b++) {
        int64_t u = 0;
        for (int i = 0; i < BATCH; i++) {
            int dup = 0;
            for (int q = 0; q < i && !dup; q++) dup = ids[b][q] == ids[b][i];
            u += !dup;
        }
        if (u > maxu) maxu = u;
    }
    const int64_t budgets[N_RUN] = {NKEYS, 2 * maxu, 3 * maxu, 2 * maxu};
    const int prefetch[N_RUN] = {1, 1, 1, 0};
    static run_out runs[N_RUN];
    for (int r = 0; r < N_RUN; r++) train(&runs[r], ids, budgets[r], prefetch[r]);
    const run_out *full = &runs[0];
    static float ga[MAPCAP * W], gb[MAPCAP * W];
    int64_t nv = 0;
    tap_ok(full->st.evicted == 0 && full->pinned_ok && full->st.written_back == full->t->n,
           "budget of every id: nothing evicted, the flush wrote back all %lld rows",
           (long long)full->t->n);
    tap_ok(full->st.hits == full->st.unique - full->first_unique,
           "with prefetch every lookup after the first batch hits (%lld of %lld distinct ids)",
           (long long)full->st.hits, (long long)full->st.unique);
    static tier ref;
    double ref_loss[NB];
    host_model(&ref, ids, ref_loss);
    int loss_close = 1;
    for (int b = 0; b < NB; b++)
        loss_close &= fabs(full->loss[b] - ref_loss[b]) <= 1e-4 * fabs(ref_loss[b]);
    tap_ok(loss_close && same_tier(full->t, &ref, 0, ga, gb, &nv),
           "the cache's training follows a host model: same losses (rtol 1e-4), same ids and "
           "step counts");
    tap_close_f32(ga, gb, nv, 1e-4, 1e-5, "rows and Adagrad sums against the host model");
    for (int r = 1; r < N_RUN; r++) {
        const run_out *x = &runs[r];
        tap_diag("budget %lld%s: %lld lookups, hits %lld of %lld, prefetched %lld, fetched "
                 "%lld, initialised %lld, evicted %lld, written back %lld",
                 (long long)budgets[r], prefetch[r] ? " + prefetch" : "",
                 (long long)x->st.lookups, (long long)x->st.hits, (long long)x->st.unique,
                 (long long)x->st.prefetched, (long long)x->st.fetched,
                 (long long)x->st.initialised, (long long)x->st.evicted,
                 (long long)x->st.written_back);
        tap_ok(x->st.evicted > 0 && x->st.fetched > 0 && x->st.written_back > x->t->n / 2,
               "budget %lld rows: rows were evicted, written back and read again",
               (long long)budgets[r]);
        tap_ok(memcmp(x->loss, full->loss, sizeof x->loss) == 0 && x->pinned_ok,
               "budget %lld rows%s: losses of all %d batches bitwise those in full memory, "
               "no prefetch moved the batch's rows",
               (long long)budgets[r], prefetch[r] ? " + prefetch" : "", NB);
        tap_ok(same_tier(x->t, full->t, 1, ga, gb, &nv),
               "budget %lld rows: every record after the flush bitwise the full run's "
               "(%lld rows, Adagrad sums, step counts)",
               (long long)budgets[r], (long long)full->t->n);
    }
    tap_ok(runs[1].st.hits == runs[1].st.unique - runs[1].first_unique &&
               runs[3].st.hits < runs[3].st.unique - runs[3].first_unique,
           "at 2 batches' budget, prefetch hides every miss after the first batch "
           "(%lld of %lld lookups hit without it)",
           (long long)runs[3].st.hits, (long long)runs[3].st.unique);
    for (int r = 0; r < N_RUN; r++) free(runs[r].t);
}

/* The pathological stream: A oldest, B next, A again, then prefetch C. */
static void test_pinning(void)
{
    enum { S = 256 };
    static tier t;
    memset(&t, 0, sizeof t);
    grm_cuda_cache_opts o = cache_opts(&t, 2 * S);
    grm_cuda_cache *c = NULL;
    if (grm_cuda_cache_create(&c, &o) != GRM_OK) tc_bail("grm_cuda_cache_create");
    int64_t keys[4][S];
    for (int g = 0; g < 4; g++)
        for (int i = 0; i < S; i++) keys[g][i] = universe(100000 + g * S + i);
    int64_t *d_keys = tc_upload(keys, sizeof keys);
    int64_t *d_a = tc_alloc(S * 8), *d_chk = tc_alloc(S * 8);
    int64_t sa[S], chk[S];
    const int64_t *A = d_keys, *Bk = d_keys + S, *C = d_keys + 2 * S, *D = d_keys + 3 * S;
    int ok = grm_cuda_cache_ensure(c, d_a, A, S, 0, 0, GRM_CUDA_CACHE_UPDATE, NULL) == GRM_OK &&
             grm_cuda_cache_ensure(c, NULL, Bk, S, 1, 1, GRM_CUDA_CACHE_UPDATE, NULL) == GRM_OK &&
             grm_cuda_cache_ensure(c, d_a, A, S, 2, 2, GRM_CUDA_CACHE_UPDATE, NULL) == GRM_OK;
    tc_download(sa, d_a, sizeof sa);
    ok = ok && grm_cuda_cache_ensure(c, NULL, C, S, 3, 2, GRM_CUDA_CACHE_PREFETCH, NULL) == GRM_OK;
    tap_ok(ok, "A, B, A, then prefetch C in a budget of 2 batches");
    if (grm_cuda_cache_find(c, d_chk, A, S, NULL) != GRM_OK) tc_bail("find");
    tc_download(chk, d_chk, sizeof chk);
    tap_ok(memcmp(sa, chk, sizeof sa) == 0,
           "the current batch A (the oldest rows) keeps all %d slots through the prefetch", S);
    if (grm_cuda_cache_find(c, d_chk, Bk, S, NULL) != GRM_OK) tc_bail("find");
    tc_download(chk, d_chk, sizeof chk);
    int gone = 1;
    for (int i = 0; i < S; i++) gone &= chk[i] == -1;
    grm_cuda_cache_stats st;
    grm_cuda_cache_get_stats(c, &st);
    tap_ok(gone && st.evicted == S && st.rows == 2 * S && t.stores == S,
           "the prefetch evicted B, the rows of the batch before (evicted %lld, written back "
           "%lld)", (long long)st.evicted, (long long)t.stores);
    /* the cache holds A (stamp 2) and C (3); a prefetch of D protecting stamps >= 2 finds no
     * row it may evict */
    const grm_status s = grm_cuda_cache_ensure(c, NULL, D, S, 4, 2, GRM_CUDA_CACHE_PREFETCH, NULL);
    const char *msg = grm_cuda_last_error();
    tap_ok(s == GRM_ENOMEM && strstr(msg, "budget of 512 rows") != NULL &&
               strstr(msg, "two batches") != NULL,
           "a prefetch that would need protected rows fails: %s", msg);
    if (grm_cuda_cache_find(c, d_chk, A, S, NULL) != GRM_OK) tc_bail("find");
    tc_download(chk, d_chk, sizeof chk);
    tap_ok(memcmp(sa, chk, sizeof sa) == 0, "after the refusal A still holds its slots");
    grm_cuda_cache_destroy(c);
    grm_cuda_free(d_keys);
    grm_cuda_free(d_a);
    grm_cuda_free(d_chk);
}

static void test_args(void)
{
    static tier t;
    grm_cuda_cache *c = (grm_cuda_cache *)&t;
    grm_cuda_cache_opts o = cache_opts(&t, 0);
    tap_ok(grm_cuda_cache_create(&c, &o) == GRM_EINVAL && c == NULL &&
               strstr(grm_cuda_last_error(), "budget_rows 0") != NULL,
           "budget 0 refused: %s", grm_cuda_last_error());
    o = cache_opts(&t, 10);
    o.dim = 0;
    tap_ok(grm_cuda_cache_create(&c, &o) == GRM_EINVAL &&
               strstr(grm_cuda_last_error(), "dim 0") != NULL,
           "dim 0 refused: %s", grm_cuda_last_error());
    o = cache_opts(&t, 10);
    o.state_floats = -1;
    tap_ok(grm_cuda_cache_create(&c, &o) == GRM_EINVAL, "state_floats -1 refused: %s",
           grm_cuda_last_error());
    o = cache_opts(&t, 10);
    o.backing.store = NULL;
    tap_ok(grm_cuda_cache_create(&c, &o) == GRM_EINVAL &&
               strstr(grm_cuda_last_error(), "fetch and store") != NULL,
           "a tier without store refused: %s", grm_cuda_last_error());
    tap_ok(grm_cuda_cache_row_bytes(DIM, SF) == 4 * W + 101,
           "a budget row of dim %d with Adagrad costs %lld bytes", DIM,
           (long long)grm_cuda_cache_row_bytes(DIM, SF));
}

int main(void)
{
    tap_plan(N_NEG + N_TRAIN + N_PIN);
    test_args();
    if (!tc_have_device()) {
        for (int i = 0; i < N_TRAIN; i++) tap_skip(CUDA_SKIP, "cache training check %d", i + 1);
        for (int i = 0; i < N_PIN; i++) tap_skip(CUDA_SKIP, "cache pinning check %d", i + 1);
        return tap_done();
    }
    test_training();
    test_pinning();
    return tap_done();
}
