/* bench/bench-cuda.c - driver of bench/bench_cuda.py: times the kernels of kernels/ on the
 * first CUDA device and prints one `bench=cuda case=... key=value ...` line per case
 * (DESIGN.md §8). Peers measured in the same run: cudaMemcpy device-to-device bandwidth
 * for the memory-bound kernels (mbu = achieved bytes/s / copy bytes/s, RecIS Table 1),
 * the device's fp32 SIMT peak (SMs x fp32 lanes x 2 x clock) for the attention (mfu).
 * Without a device it prints `# SKIP no CUDA device` and exits 0.
 * Usage: bench-cuda [quick] [rows|unique|hash|cache|attn ...] (the groups named, or all) */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "grm_cuda.h"

static int quick;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    printf("# bench-cuda: %s failed: %s\n", what, grm_cuda_last_error());
    exit(1);
}

#define CK(expr) do { if ((expr) != GRM_OK) die(#expr); } while (0)

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    CK(grm_cuda_malloc(&p, bytes));
    CK(grm_cuda_memset(p, 0, bytes));
    return p;
}

static void *dupload(const void *h, size_t bytes)
{
    void *p = dalloc(bytes);
    CK(grm_cuda_memcpy_h2d(p, h, bytes));
    return p;
}

static uint64_t rng_state = 0x62656e6368ULL;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* seconds per call of op(arg), median-free: warm-up, then the mean of `iters` calls */
typedef void (*op_fn)(void *arg);
static double time_op(op_fn op, void *arg, int iters)
{
    op(arg);
    CK(grm_cuda_sync(NULL));
    const double t0 = now();
    for (int i = 0; i < iters; i++) op(arg);
    CK(grm_cuda_sync(NULL));
    return (now() - t0) / iters;
}

/* ---- peer: device-to-device copy bandwidth (read + write bytes per second) ---- */
typedef struct copy_arg { void *dst, *src; size_t bytes; } copy_arg;
static void copy_op(void *a)
{
    copy_arg *c = a;
    if (cudaMemcpy(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice) != cudaSuccess)
        die("cudaMemcpy");
}

/* ---- rows ---- */
typedef struct rows_arg {
    void *out, *table, *src;
    int64_t *idx, *offsets;
    int64_t n, rows, S;
    int32_t D, dtype, which;
} rows_arg;
static void rows_op(void *a)
{
    rows_arg *r = a;
    switch (r->which) {
    case 0: CK(grm_cuda_gather_fwd(r->out, r->table, r->idx, r->n, r->rows, r->D, r->dtype,
                                   NULL)); break;
    case 1: CK(grm_cuda_gather_bwd(r->table, r->src, r->idx, r->n, r->rows, r->D, r->dtype,
                                   NULL)); break;
    default: CK(grm_cuda_pool_fwd(r->out, r->table, r->idx, r->offsets, r->S, r->rows, r->D,
                                  r->dtype, GRM_CUDA_POOL_SUM, NULL)); break;
    }
}

static void bench_rows(double copy_bw)
{
    const int32_t dts[] = {GRM_DTYPE_F32, GRM_DTYPE_BF16};
    const int32_t dims[] = {64, 128, 512};
    const int64_t rows = quick ? 100000 : 1000000, n = quick ? 200000 : 2000000;
    const int64_t S = n / 32;
    int64_t *idx = malloc((size_t)n * 8), *off = malloc((size_t)(S + 1) * 8);
    for (int64_t i = 0; i < n; i++) idx[i] = (int64_t)(rnd() % (uint64_t)rows);
    for (int64_t s = 0; s <= S; s++) off[s] = s * 32;
    int64_t *d_idx = dupload(idx, (size_t)n * 8), *d_off = dupload(off, (size_t)(S + 1) * 8);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++) {
            const int32_t D = dims[b], dt = dts[a];
            const size_t es = grm_dtype_size(dt), rb = (size_t)D * es;
            rows_arg r = {dalloc((size_t)n * rb), dalloc((size_t)rows * rb),
                          dalloc((size_t)n * rb), d_idx, d_off, n, rows, S, D, dt, 0};
            static const char *names[] = {"gather", "scatter_add", "pool_sum"};
            for (int w = 0; w < 3; w++) {
                r.which = w;
                const double t = time_op(rows_op, &r, 10);
                /* bytes a perfect kernel moves: rows read + written, ids read */
                double bytes = (double)n * 8;
                if (w == 0) bytes += 2.0 * (double)n * rb;
                else if (w == 1) bytes += 3.0 * (double)n * rb;      /* src, table r+w */
                else bytes += (double)n * rb + (double)S * rb + (double)(S + 1) * 8;
                const double bw = bytes / t;
                printf("bench=cuda case=%s_%s_d%d n=%lld time_ms=%.3f gbps=%.1f "
                       "peer=cudaMemcpyD2D peer_gbps=%.1f ratio=%.3f mbu=%.3f\n",
                       names[w], dt == GRM_DTYPE_F32 ? "f32" : "bf16", D, (long long)n,
                       t * 1e3, bw / 1e9, copy_bw / 1e9, bw / copy_bw, bw / copy_bw);
            }
            grm_cuda_free(r.out), grm_cuda_free(r.table), grm_cuda_free(r.src);
        }
    grm_cuda_free(d_idx), grm_cuda_free(d_off);
    free(idx), free(off);
}

/* ---- segment unique ---- */
typedef struct uniq_arg {
    int64_t *uids, *uoff, *inv, *ids, *off;
    int32_t *ufeat;
    int64_t n, F;
    void *ws;
    size_t ws_bytes;
} uniq_arg;
static void uniq_op(void *a)
{
    uniq_arg *u = a;
    CK(grm_cuda_segment_unique(u->uids, u->ufeat, u->uoff, u->inv, u->ids, u->off, u->n, u->F,
                               u->ws, u->ws_bytes, NULL));
}

static void bench_unique(double copy_bw)
{
    const int64_t n = quick ? 1 << 20 : 1 << 24, F = 8;
    int64_t *ids = malloc((size_t)n * 8), off[9];
    for (int64_t i = 0; i < n; i++) ids[i] = (int64_t)(rnd() % (uint64_t)(n / 4));
    for (int f = 0; f <= F; f++) off[f] = n / F * f;
    uniq_arg u = {dalloc((size_t)n * 8), dalloc((F + 1) * 8), dalloc((size_t)n * 8),
                  dupload(ids, (size_t)n * 8), dupload(off, sizeof off), dalloc((size_t)n * 4),
                  n, F, NULL, 0};
    CK(grm_cuda_segment_unique_workspace(n, &u.ws_bytes));
    u.ws = dalloc(u.ws_bytes);
    const double t = time_op(uniq_op, &u, 5);
    /* ids read, inverse written, unique ids + features written (~n/4 each) */
    const double bytes = (double)n * 8 * 2 + (double)n / 4 * 12;
    printf("bench=cuda case=segment_unique n=%lld F=%lld time_ms=%.3f gbps=%.1f "
           "peer=cudaMemcpyD2D peer_gbps=%.1f ratio=%.3f mbu=%.3f\n", (long long)n,
           (long long)F, t * 1e3, bytes / t / 1e9, copy_bw / 1e9, bytes / t / copy_bw,
           bytes / t / copy_bw);
    grm_cuda_free(u.uids), grm_cuda_free(u.uoff), grm_cuda_free(u.inv), grm_cuda_free(u.ids);
    grm_cuda_free(u.off), grm_cuda_free(u.ufeat), grm_cuda_free(u.ws);
    free(ids);
}

/* ---- hash table: keys/s at load factors 0.5 and 0.75 ---- */
static void bench_hash(void)
{
    const int64_t cap = quick ? 1 << 20 : 1 << 24;
    const int32_t dims[] = {64, 128};
    const double lfs[] = {0.5, 0.75};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            /* fill to just under the target load, then time a batch that ends at it */
            const int64_t total = (int64_t)(lfs[b] * (double)cap) - 1;
            const int64_t batch = cap / 16;
            const int64_t pre = total - batch;
            grm_cuda_hash_opts o = {.capacity = cap, .dim = dims[a],
                                    .init = GRM_EMB_INIT_UNIFORM, .chunk_rows = 1 << 20,
                                    .init_scale = 0.01, .seed = 1, .table_hash = 2};
            grm_cuda_hash *h = NULL;
            CK(grm_cuda_hash_create(&h, &o));
            int64_t *keys = malloc((size_t)total * 8);
            for (int64_t i = 0; i < total; i++) keys[i] = (int64_t)rnd();
            int64_t *d_keys = dupload(keys, (size_t)total * 8);
            int64_t *d_rows = dalloc((size_t)total * 8);
            CK(grm_cuda_hash_find_or_insert(h, d_rows, d_keys, pre, NULL));
            CK(grm_cuda_sync(NULL));
            double t0 = now();
            CK(grm_cuda_hash_find_or_insert(h, d_rows, d_keys + pre, batch, NULL));
            CK(grm_cuda_sync(NULL));
            const double t_ins = now() - t0;
            t0 = now();
            for (int it = 0; it < 10; it++)
                CK(grm_cuda_hash_find(h, d_rows, d_keys, batch, NULL));
            CK(grm_cuda_sync(NULL));
            const double t_find = (now() - t0) / 10;
            /* HierarchicalKV's find returns the values, and its insert_or_assign writes
             * them: the same two on grm's table are find + gather and insert_or_assign of
             * keys already present, both over the batch's D floats a key */
            float *d_vals = dalloc((size_t)batch * (size_t)dims[a] * sizeof(float));
            t0 = now();
            for (int it = 0; it < 10; it++) {
                CK(grm_cuda_hash_find(h, d_rows, d_keys, batch, NULL));
                CK(grm_cuda_hash_gather(h, d_vals, d_rows, batch, NULL));
            }
            CK(grm_cuda_sync(NULL));
            const double t_findv = (now() - t0) / 10;
            const int64_t cap_at = grm_cuda_hash_capacity(h);    /* as find ran */
            const double load = (double)grm_cuda_hash_size(h) / (double)cap_at;
            /* the table reserves room for every key of a batch as if new, so a batch
             * near load 0.75 grows it first: once, untimed */
            CK(grm_cuda_hash_insert_or_assign(h, d_keys, d_vals, batch, NULL));
            CK(grm_cuda_sync(NULL));
            t0 = now();
            for (int it = 0; it < 10; it++)
                CK(grm_cuda_hash_insert_or_assign(h, d_keys, d_vals, batch, NULL));
            CK(grm_cuda_sync(NULL));
            const double t_assign = (now() - t0) / 10;
            printf("bench=cuda case=hash_d%d_lf%.2f capacity=%lld batch=%lld "
                   "insert_mkeys_s=%.1f find_mkeys_s=%.1f find_values_mkeys_s=%.1f "
                   "assign_mkeys_s=%.1f load=%.3f\n", dims[a], lfs[b],
                   (long long)cap_at, (long long)batch,
                   (double)batch / t_ins / 1e6, (double)batch / t_find / 1e6,
                   (double)batch / t_findv / 1e6, (double)batch / t_assign / 1e6, load);
            grm_cuda_free(d_vals);
            grm_cuda_hash_destroy(h);
            grm_cuda_free(d_keys), grm_cuda_free(d_rows);
            free(keys);
        }
}

/* ---- HBM cache over a host-RAM tier: a training step's rate at budgets of 5-100% ---- */
typedef struct host_tier {
    float *vals;            /* [N, W] */
    int64_t *steps;         /* [N] */
    uint8_t *present;       /* [N] */
    int64_t W;
} host_tier;

static grm_status ht_fetch(void *ctx, float *vals, int64_t *steps, uint8_t *found,
                           const int64_t *keys, int64_t n)
{
    host_tier *t = ctx;
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = keys[i];
        found[i] = t->present[k];
        if (!found[i]) continue;
        memcpy(vals + i * t->W, t->vals + k * t->W, (size_t)t->W * sizeof(float));
        steps[i] = t->steps[k];
    }
    return GRM_OK;
}

static grm_status ht_store(void *ctx, const int64_t *keys, const float *vals,
                           const int64_t *steps, int64_t n)
{
    host_tier *t = ctx;
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = keys[i];
        t->present[k] = 1;
        memcpy(t->vals + k * t->W, vals + i * t->W, (size_t)t->W * sizeof(float));
        t->steps[k] = steps[i];
    }
    return GRM_OK;
}

/* Zipf(1.05) ranks over N ids by inverse CDF, scattered by an odd multiplier mod N (N a
 * power of two, so a bijection): the hot ids are not neighbours. */
static void zipf_stream(int64_t *ids, int64_t n, int64_t N)
{
    double *cdf = malloc((size_t)N * sizeof(double)), sum = 0;
    for (int64_t r = 0; r < N; r++) cdf[r] = (sum += 1.0 / pow((double)(r + 1), 1.05));
    for (int64_t i = 0; i < n; i++) {
        const double u = (double)(rnd() >> 11) / 9007199254740992.0 * sum;
        int64_t lo = 0, hi = N - 1;
        while (lo < hi) {
            const int64_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1; else hi = mid;
        }
        ids[i] = (int64_t)(((uint64_t)lo * 0x9E3779B97F4A7C15ULL) & (uint64_t)(N - 1));
    }
    free(cdf);
}

/* The prefetch of the next batch, on its own thread and stream (the overlapped mode). */
typedef struct pf_job {
    grm_cuda_cache *c;
    const int64_t *keys;
    int64_t n, stamp, protect;
    void *stream;
    grm_status st;
} pf_job;

static void *pf_main(void *a)
{
    pf_job *j = a;
    j->st = grm_cuda_cache_ensure(j->c, NULL, j->keys, j->n, j->stamp, j->protect,
                                  GRM_CUDA_CACHE_PREFETCH, j->stream);
    return NULL;
}

/* The store all in HBM (every row made resident before timing) against budgets of 50% to
 * 5% of the rows over a host tier that holds every row (a trained table, its pages already
 * touched), on the same Zipf stream: 300 batches of ids alone bring the cache to the state
 * of a long run, warm-up training batches follow, then the mean step of the next 40 is
 * timed. A step: lookup (ensure, marking dirty), prefetch of the next
 * batch, gather, dedup of the slots, CSR, Adagrad. Each budget runs twice: the prefetch in
 * line (sync), and on a thread and stream of its own while the step's kernels run
 * (overlap; the cache's contract allows it: only rows older than the batch move). Peer of
 * the tier's traffic: the pinned host-to-device copy bandwidth of the same run. */
static void bench_cache(int64_t N)
{
    const int64_t batch = quick ? 16384 : 65536;
    /* nfill batches of ids only bring the cache to its steady state (a long run's); then
     * warm training batches, then nb - warm timed ones */
    const int nfill = quick ? 40 : 300, nb = 50, warm = 10;
    const int32_t D = 64;
    const grm_cuda_row_opt opt = {.kind = GRM_CUDA_OPT_ADAGRAD, .lr = 0.05, .eps = 1e-10,
                                  .initial_accumulator_value = 0.1};
    const int32_t sf = grm_cuda_row_opt_state_floats(&opt);
    const int64_t W = (int64_t)D * (1 + sf);
    int64_t *ids = malloc((size_t)(nb * batch) * 8);
    zipf_stream(ids, nb * batch, N);
    int64_t *d_ids = dupload(ids, (size_t)(nb * batch) * 8);
    int64_t *fill = malloc((size_t)nfill * (size_t)batch * 8);
    zipf_stream(fill, nfill * batch, N);
    int64_t *d_fill = dupload(fill, (size_t)nfill * (size_t)batch * 8);
    free(fill);
    /* the physical limit of the tier's traffic: pinned host-to-device copy bandwidth */
    const size_t pb = (size_t)256 << 20;
    void *pinned = NULL, *dbuf = dalloc(pb);
    if (cudaMallocHost(&pinned, pb) != cudaSuccess) die("cudaMallocHost");
    memset(pinned, 1, pb);
    double t0 = now();
    for (int i = 0; i < 5; i++)
        if (cudaMemcpy(dbuf, pinned, pb, cudaMemcpyHostToDevice) != cudaSuccess) die("h2d");
    const double h2d_bw = 5.0 * (double)pb / (now() - t0);
    cudaFreeHost(pinned);
    grm_cuda_free(dbuf);
    printf("bench=cuda case=copy_h2d_pinned bytes=%zu gbps=%.1f\n", pb, h2d_bw / 1e9);
    /* the host tier: every row present, every page written */
    host_tier t = {malloc((size_t)(N * W) * 4), malloc((size_t)N * 8), malloc((size_t)N), W};
    for (int64_t i = 0; i < N * W; i++) t.vals[i] = 0.001f * (float)(i % 7);
    for (int64_t k = 0; k < N; k++) t.steps[k] = 1, t.present[k] = 1;
    const int64_t chunk = 1 << 20;
    int64_t *all = malloc((size_t)chunk * 8);
    int64_t *d_all = dalloc((size_t)chunk * 8);
    int64_t *d_slots = dalloc((size_t)batch * 8), *d_uniq = dalloc((size_t)batch * 8);
    int64_t *d_inv = dalloc((size_t)batch * 8), *d_coff = dalloc((size_t)(batch + 1) * 8);
    int64_t *d_cidx = dalloc((size_t)batch * 8), *d_uoff = dalloc(16);
    int32_t *d_ufeat = dalloc((size_t)batch * 4);
    float *d_rows = dalloc((size_t)batch * D * 4);
    const int64_t off[2] = {0, batch};
    int64_t *d_off = dupload(off, sizeof off);
    size_t wu = 0, wc = 0;
    CK(grm_cuda_segment_unique_workspace(batch, &wu));
    CK(grm_cuda_csr_from_inverse_workspace(batch, &wc));
    void *d_ws = dalloc(wu > wc ? wu : wc);
    cudaStream_t s1, s2;
    if (cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) != cudaSuccess)
        die("cudaStreamCreate");
    const int pct[] = {100, 50, 25, 10, 5};
    double base = 0;     /* the faster of the two all-in-HBM runs */
    for (int p = 0; p < 5; p++)
        for (int overlap = 0; overlap < 2; overlap++) {
            grm_cuda_cache_opts o = {.budget_rows = N * pct[p] / 100, .dim = D,
                                     .state_floats = sf, .init = GRM_EMB_INIT_UNIFORM,
                                     .init_scale = 0.01, .seed = 1, .table_hash = 2};
            o.backing.ctx = &t;
            o.backing.fetch = ht_fetch;
            o.backing.store = ht_store;
            grm_cuda_cache *c = NULL;
            CK(grm_cuda_cache_create(&c, &o));
            float *table, *state;
            int64_t *steps;
            grm_cuda_cache_arrays(c, &table, &state, &steps);
            if (pct[p] == 100)      /* all in HBM: every row resident before the stream */
                for (int64_t k0 = 0; k0 < N; k0 += chunk) {
                    for (int64_t i = 0; i < chunk; i++) all[i] = k0 + i;
                    CK(grm_cuda_memcpy_h2d(d_all, all, (size_t)chunk * 8));
                    CK(grm_cuda_cache_ensure(c, NULL, d_all, chunk, 0, 0, 0, NULL));
                }
            else
                for (int f = 0; f < nfill; f++)
                    CK(grm_cuda_cache_ensure(c, NULL, d_fill + (int64_t)f * batch, batch, f,
                                             f, 0, s1));
            const int64_t t1 = nfill + 1;   /* the first training batch's stamp */
            grm_cuda_cache_stats s0 = {0}, s1s;
            for (int b = 0; b < nb; b++) {
                if (b == warm) {
                    CK(grm_cuda_sync(NULL));
                    grm_cuda_cache_get_stats(c, &s0);
                    t0 = now();
                }
                const int64_t *k = d_ids + (int64_t)b * batch;
                CK(grm_cuda_cache_ensure(c, d_slots, k, batch, t1 + b, t1 + b,
                                         GRM_CUDA_CACHE_UPDATE, s1));
                pf_job job = {c, k + batch, batch, t1 + b + 1, t1 + b, s2, GRM_OK};
                pthread_t th;
                const int pf = b + 1 < nb;
                if (pf && !overlap) pf_main(&job);
                if (pf && overlap && pthread_create(&th, NULL, pf_main, &job) != 0)
                    die("pthread_create");
                CK(grm_cuda_gather_fwd(d_rows, table, d_slots, batch, o.budget_rows, D,
                                       GRM_DTYPE_F32, s1));
                CK(grm_cuda_segment_unique(d_uniq, d_ufeat, d_uoff, d_inv, d_slots, d_off, batch,
                                           1, d_ws, wu, s1));
                int64_t uoff[2];
                if (cudaMemcpyAsync(uoff, d_uoff, sizeof uoff, cudaMemcpyDeviceToHost, s1) !=
                        cudaSuccess ||
                    cudaStreamSynchronize(s1) != cudaSuccess)
                    die("uoff");
                CK(grm_cuda_csr_from_inverse(d_coff, d_cidx, d_inv, batch, uoff[1], d_ws, wc,
                                             s1));
                /* the gradient of 0.5 |row|^2 is the row itself */
                CK(grm_cuda_row_opt_step(table, state, steps, d_rows, d_uniq, d_coff, d_cidx,
                                         uoff[1], D, &opt, s1));
                if (cudaStreamSynchronize(s1) != cudaSuccess) die("step");
                if (pf && overlap) pthread_join(th, NULL);
                CK(job.st);
            }
            CK(grm_cuda_sync(NULL));
            const int timed = nb - warm;
            const double dt = (now() - t0) / timed;
            grm_cuda_cache_get_stats(c, &s1s);
            if (p == 0 && (overlap == 0 || dt < base)) base = dt;
            const double uniq = (double)(s1s.unique - s0.unique);
            const double moved = (double)(s1s.bytes_h2d - s0.bytes_h2d + s1s.bytes_d2h -
                                          s0.bytes_d2h);
            /* the distinct ids a prefetch found resident: the hit rate the cache gives alone */
            const double hit = 1.0 - (double)(s1s.prefetched - s0.prefetched) / uniq;
            printf("bench=cuda case=cache_zipf_%lldm_%dpct_%s rows=%lld budget_rows=%lld batch=%lld "
                   "dim=%d step_ms=%.3f steps_s_ratio=%.3f hit=%.3f lookup_hit=%.3f "
                   "tier_mb_step=%.2f tier_gbps=%.2f h2d_share=%.3f evicted_step=%.0f\n",
                   (long long)N >> 20, pct[p], overlap ? "overlap" : "sync", (long long)N, (long long)o.budget_rows,
                   (long long)batch, D, dt * 1e3, base / dt, hit,
                   (double)(s1s.hits - s0.hits) / uniq, moved / timed / 1e6,
                   moved / timed / dt / 1e9, moved / timed / h2d_bw / dt,
                   (double)(s1s.evicted - s0.evicted) / timed);
            grm_cuda_cache_destroy(c);
        }
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    void *bufs[] = {d_ids, d_slots, d_uniq, d_inv, d_coff, d_cidx, d_uoff, d_ufeat, d_rows,
                    d_off, d_ws, d_all, d_fill};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) grm_cuda_free(bufs[i]);
    free(t.vals), free(t.steps), free(t.present), free(ids), free(all);
}

/* ---- HSTU attention ---- */
typedef struct attn_arg {
    grm_hstu_attn_args a;       /* device pointers */
    float *out, *dq, *dk, *dv, *drab, *dout;
    void *ws;
    int bwd;
} attn_arg;
static void attn_op(void *p)
{
    attn_arg *x = p;
    if (!x->bwd)
        CK(grm_cuda_hstu_attn_fwd(NULL, x->out, &x->a, x->ws));
    else
        CK(grm_cuda_hstu_attn_bwd(NULL, x->dq, x->dk, x->dv, x->drab, NULL, x->dout, &x->a,
                                  x->ws));
}

static void bench_attn(void)
{
    int sms = 0, clock_khz = 0, major = 0, minor = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    const int lanes = (major == 8 && minor == 0) ? 64 : 128;   /* fp32 lanes per SM */
    const double peak = (double)sms * lanes * 2.0 * clock_khz * 1e3;
    const int64_t lens[] = {512, 1024, 2048, 4096, 8192};
    const int32_t H = 4, D = 128;
    for (int c = 0; c < (quick ? 2 : 5); c++) {
        const int64_t tokens = quick ? 8192 : 32768;
        const int64_t L = lens[c], B = tokens / L < 1 ? 1 : tokens / L;
        const int64_t T = B * L;
        const size_t nx = (size_t)T * H * D;
        int64_t *off = malloc((size_t)(B + 1) * 8);
        for (int64_t b = 0; b <= B; b++) off[b] = b * L;
        float *hx = malloc(nx * 4);
        for (size_t i = 0; i < nx; i++) hx[i] = (float)((double)(rnd() >> 11) * 0x1.0p-53 - 0.5);
        /* q, k, v share one [T, H*D] buffer (ld = H*D); rab_pos over max_len = L buckets */
        attn_arg x = {
            .a = { .nseq = B, .offsets = dupload(off, (size_t)(B + 1) * 8), .H = H, .dqk = D,
                   .dv = D, .ld = (int64_t)H * D, .max_len = L, .nbuckets = 1,
                   .norm = GRM_HSTU_NORM_MAX_LEN },
            .out = dalloc(nx * 4), .dq = dalloc(nx * 4), .dk = dalloc(nx * 4),
            .dv = dalloc(nx * 4), .drab = dalloc((size_t)(H * L) * 4),
            .dout = dupload(hx, nx * 4),
            .ws = dalloc(grm_cuda_hstu_attn_ws_bytes(NULL, T, B, H, L)),
        };
        float *dx = dupload(hx, nx * 4);
        x.a.q = x.a.k = x.a.v = dx;
        x.a.rab_pos = dalloc((size_t)(H * L) * 4);
        /* causal pairs per head: L (L + 1) / 2; fwd 2 GEMM-like products of D each */
        const double pairs = (double)B * H * (double)L * (double)(L + 1) / 2.0;
        const double f_fwd = 2.0 * pairs * (2.0 * D), f_bwd = 2.0 * pairs * (4.0 * D);
        const double t_f = time_op(attn_op, &x, 3);
        x.bwd = 1;
        const double t_b = time_op(attn_op, &x, 3);
        printf("bench=cuda case=hstu_attn_L%lld B=%lld H=%d D=%d fwd_ms=%.3f bwd_ms=%.3f "
               "fwd_tflops=%.2f bwd_tflops=%.2f peer=fp32_simt_peak peer_tflops=%.1f "
               "ratio=%.3f mfu=%.3f\n", (long long)L, (long long)B, H, D, t_f * 1e3, t_b * 1e3,
               f_fwd / t_f / 1e12, f_bwd / t_b / 1e12, peak / 1e12,
               (f_fwd + f_bwd) / (t_f + t_b) / peak, (f_fwd + f_bwd) / (t_f + t_b) / peak);
        grm_cuda_free(x.out), grm_cuda_free(x.dq), grm_cuda_free(x.dk), grm_cuda_free(x.dv);
        grm_cuda_free(x.drab), grm_cuda_free(x.dout), grm_cuda_free(x.ws), grm_cuda_free(dx);
        grm_cuda_free((void *)x.a.offsets), grm_cuda_free((void *)x.a.rab_pos);
        free(off), free(hx);
    }
}

/* a group runs when the command line names it, or names none */
static int wanted(int argc, char **argv, const char *group)
{
    int named = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], group) == 0) return 1;
        named += strcmp(argv[i], "quick") != 0;
    }
    return !named;
}

int main(int argc, char **argv)
{
    static const char *const groups[] = {"quick", "rows", "unique", "hash", "cache", "attn"};
    for (int i = 1; i < argc; i++) {
        size_t g = 0;
        while (g < sizeof groups / sizeof *groups && strcmp(argv[i], groups[g]) != 0) g++;
        if (g == sizeof groups / sizeof *groups) {
            fprintf(stderr, "bench-cuda: unknown argument '%s'\n"
                    "usage: bench-cuda [quick] [rows|unique|hash|cache|attn ...]\n", argv[i]);
            return 2;
        }
        quick |= g == 0;
    }
    if (grm_cuda_device_count() == 0) {
        printf("# SKIP no CUDA device\n");
        return 0;
    }
    const size_t bytes = (size_t)1 << (quick ? 28 : 30);
    copy_arg c = {dalloc(bytes), dalloc(bytes), bytes};
    const double copy_bw = 2.0 * (double)bytes / time_op(copy_op, &c, 10);
    printf("bench=cuda case=copy_d2d bytes=%zu gbps=%.1f\n", bytes, copy_bw / 1e9);
    grm_cuda_free(c.dst), grm_cuda_free(c.src);
    if (wanted(argc, argv, "rows")) bench_rows(copy_bw);
    if (wanted(argc, argv, "unique")) bench_unique(copy_bw);
    if (wanted(argc, argv, "hash")) bench_hash();
    if (wanted(argc, argv, "cache")) {
        if (quick) {
            bench_cache(1 << 20);
        } else {
            bench_cache(1 << 23);
            bench_cache(1 << 21);    /* a table the stream nearly covers: hit rates near 0.9 */
        }
    }
    if (wanted(argc, argv, "attn")) bench_attn();
    return 0;
}
