/* bench/bench-cuda.c - driver of bench/bench_cuda.py: times the kernels of kernels/ on the
 * first CUDA device and prints one `bench=cuda case=... key=value ...` line per case
 * (DESIGN.md §8). Peers measured in the same run: cudaMemcpy device-to-device bandwidth
 * for the memory-bound kernels (mbu = achieved bytes/s / copy bytes/s, RecIS Table 1),
 * the device's fp32 SIMT peak (SMs x fp32 lanes x 2 x clock) for the attention (mfu).
 * Without a device it prints `# SKIP no CUDA device` and exits 0. Usage: bench-cuda [quick] */
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

int main(int argc, char **argv)
{
    quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    if (grm_cuda_device_count() == 0) {
        printf("# SKIP no CUDA device\n");
        return 0;
    }
    const size_t bytes = (size_t)1 << (quick ? 28 : 30);
    copy_arg c = {dalloc(bytes), dalloc(bytes), bytes};
    const double copy_bw = 2.0 * (double)bytes / time_op(copy_op, &c, 10);
    printf("bench=cuda case=copy_d2d bytes=%zu gbps=%.1f\n", bytes, copy_bw / 1e9);
    grm_cuda_free(c.dst), grm_cuda_free(c.src);
    bench_rows(copy_bw);
    bench_unique(copy_bw);
    bench_hash();
    bench_attn();
    return 0;
}
