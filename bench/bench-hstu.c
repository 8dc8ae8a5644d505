/* bench/bench-hstu.c - timing driver of bench/bench_hstu.py for dense-hstu (MTGRBoost §2,
 * §5.2). Three modes, each printing one key=value line:
 *   --sgemm             the SGEMM peak of this machine: cblas_sgemm 2048^3 split over rows
 *                       on the host's pool, the way the layer calls it (GFLOP/s, best of 3);
 *   --layer             forward + backward of the dense-hstu block through its ops table on
 *                       jagged sequences of the given lengths (median of --reps);
 *   --attn              the cpu attention kernels alone (hstu_attn_fwd_cpu + _bwd_cpu).
 * Usage: bench-hstu MODE --threads T --lengths L1,L2,... [--dim D --heads H --reps R]
 * Needs GRM_TOP_BUILDDIR (for --layer). Not a test: numbers only, no assertions. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "hstu.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* ---- SGEMM peak ---- */

enum { GEMM_N = 2048 };

typedef struct gemm_job {
    const float *a, *b;
    float *c;
} gemm_job;

static grm_status gemm_rows(void *ctx, int64_t r0, int64_t r1)
{
    const gemm_job *j = ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(r1 - r0), GEMM_N, GEMM_N,
                1.0f, j->a + r0 * GEMM_N, GEMM_N, j->b, GEMM_N, 0.0f, j->c + r0 * GEMM_N,
                GEMM_N);
    return GRM_OK;
}

static int run_sgemm(void)
{
    const size_t n = (size_t)GEMM_N * GEMM_N;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    uint64_t s = 1;
    for (size_t i = 0; i < n; i++) {
        a[i] = harness_randf(&s);
        b[i] = harness_randf(&s);
    }
    gemm_job j = { a, b, c };
    const grm_host_api *host = harness_host();
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        const double t0 = now_ms();
        host->parallel_for(GEMM_N, 64, gemm_rows, &j);
        const double t = now_ms() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    printf("sgemm_gflops=%.2f\n", 2.0 * GEMM_N * GEMM_N * (double)GEMM_N / (best * 1e6));
    free(a);
    free(b);
    free(c);
    return 0;
}

/* ---- the layer and the attention ---- */

typedef struct opts {
    int64_t lengths[4096];
    int64_t nseq, D, H, reps;
} opts;

static void fill(float *v, int64_t n, uint64_t *s, float scale)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = harness_randf(s) * scale;
}

static int run_layer(const opts *o)
{
    const grm_plugin_info *info = harness_plugin("dense-hstu");
    const grm_dense_ops *ops = info->ops;
    char h[32], d[32];
    snprintf(h, sizeof h, "num_heads=%lld", (long long)o->H);
    snprintf(d, sizeof d, "dqk=%lld", (long long)(o->D / o->H));
    char v[32];
    snprintf(v, sizeof v, "dv=%lld", (long long)(o->D / o->H));
    const void *cfg = harness_config(info, h, d, v, "max_len=1024", "time_buckets=32", NULL);
    void *inst = NULL;
    if (ops->create(cfg, o->D, 1, &inst) != GRM_OK) {
        fprintf(stderr, "bench-hstu: %s\n", grm_last_error());
        return 1;
    }
    int64_t *offs = malloc((size_t)(o->nseq + 1) * 8);
    offs[0] = 0;
    for (int64_t i = 0; i < o->nseq; i++)
        offs[i + 1] = offs[i] + o->lengths[i];
    const int64_t N = offs[o->nseq], D = o->D;
    int64_t *times = malloc((size_t)N * 8);
    float *x = malloc((size_t)(N * D) * 4), *y = malloc((size_t)(N * D) * 4);
    float *dy = malloc((size_t)(N * D) * 4), *dx = malloc((size_t)(N * D) * 4);
    uint64_t s = 7;
    fill(x, N * D, &s, 1.0f);
    fill(dy, N * D, &s, 1.0f);
    for (int64_t i = 0; i < N; i++)
        times[i] = 1700000000 + 60 * i + (int64_t)(harness_rand(&s) % 60);
    grm_tensor tx = { 0 };
    tx.dtype = GRM_DTYPE_F32;
    tx.device.type = GRM_DEVICE_CPU;
    tx.ndim = 2;
    tx.shape[0] = N;
    tx.shape[1] = D;
    tx.shape[2] = tx.shape[3] = 1;
    grm_tensor ty = tx, tdy = tx, tdx = tx;
    tx.data = x;
    ty.data = y;
    tdy.data = dy;
    tdx.data = dx;
    grm_dense_ctx ctx = { .struct_size = sizeof ctx, .training = 1, .offsets = offs,
                          .nseq = o->nseq, .times = times };
    double fw[64], bw[64], tot[64];
    const int reps = (int)(o->reps < 64 ? o->reps : 64);
    for (int r = -1; r < reps; r++) {
        const double t0 = now_ms();
        if (ops->forward(inst, &ty, &tx, &ctx) != GRM_OK)
            return fprintf(stderr, "bench-hstu: %s\n", grm_last_error()), 1;
        const double t1 = now_ms();
        if (ops->backward(inst, &tdx, &tdy, &ctx) != GRM_OK)
            return fprintf(stderr, "bench-hstu: %s\n", grm_last_error()), 1;
        const double t2 = now_ms();
        if (r >= 0) {
            fw[r] = t1 - t0;
            bw[r] = t2 - t1;
            tot[r] = t2 - t0;
        }
    }
    const double flops = ops->flops(inst, N, 0) + ops->flops(inst, N, 1);
    printf("tokens=%lld fwd_ms=%.3f bwd_ms=%.3f total_ms=%.3f flops=%.6g\n", (long long)N,
           median(fw, reps), median(bw, reps), median(tot, reps), flops);
    ops->destroy(inst);
    free(offs);
    free(times);
    free(x);
    free(y);
    free(dy);
    free(dx);
    return 0;
}

/* The layer's two projections alone, forward and backward, through the same functions
 * dense-hstu calls (f1: D -> P = 2 HV + 2 H dqk, f2: HV -> D; eq. 1 and 3): the GEMM part of
 * the layer, whose MFU the issue's > 50% target names. */
static int run_proj(const opts *o)
{
    const int64_t D = o->D, HV = o->D, P = 4 * o->D;     // dqk = dv = D / H
    int64_t N = 0;
    for (int64_t i = 0; i < o->nseq; i++)
        N += o->lengths[i];
    const grm_host_api *host = harness_host();
    float *x = malloc((size_t)(N * D) * 4), *z1 = malloc((size_t)(N * P) * 4);
    float *g = malloc((size_t)(N * HV) * 4), *z2 = malloc((size_t)(N * D) * 4);
    float *dz1 = malloc((size_t)(N * P) * 4), *dx = malloc((size_t)(N * D) * 4);
    float *dg = malloc((size_t)(N * HV) * 4), *dz2 = malloc((size_t)(N * D) * 4);
    float *w1 = malloc((size_t)(P * D) * 4), *b1 = calloc((size_t)P, 4);
    float *w2 = malloc((size_t)(D * HV) * 4), *b2 = calloc((size_t)D, 4);
    float *dw1 = calloc((size_t)(P * D), 4), *db1 = calloc((size_t)P, 4);
    float *dw2 = calloc((size_t)(D * HV), 4), *db2 = calloc((size_t)D, 4);
    uint64_t s = 5;
    fill(x, N * D, &s, 1.0f);
    fill(g, N * HV, &s, 1.0f);
    fill(dz1, N * P, &s, 1.0f);
    fill(dz2, N * D, &s, 1.0f);
    fill(w1, P * D, &s, 0.05f);
    fill(w2, D * HV, &s, 0.05f);
    double tot[64];
    const int reps = (int)(o->reps < 64 ? o->reps : 64);
    linear_exec ex;             // as dense-hstu runs its projections
    if (linear_exec_init(&ex, host, 1, "bench-hstu") != GRM_OK)
        return fprintf(stderr, "bench-hstu: %s\n", grm_last_error()), 1;
    ex.grain_rows = 32;
    ex.grain_cols = 16;
    for (int r = -1; r < reps; r++) {
        const double t0 = now_ms();
        if (linear_fwd_cpu(z1, x, w1, b1, N, D, P, &ex) != GRM_OK
            || linear_fwd_cpu(z2, g, w2, b2, N, HV, D, &ex) != GRM_OK
            || linear_bwd_cpu(dg, dw2, db2, dz2, g, w2, N, HV, D, 0, &ex) != GRM_OK
            || linear_bwd_cpu(dx, dw1, db1, dz1, x, w1, N, D, P, 0, &ex) != GRM_OK)
            return fprintf(stderr, "bench-hstu: %s\n", grm_last_error()), 1;
        if (r >= 0)
            tot[r] = now_ms() - t0;
    }
    // forward 2 N (D P + HV D), backward twice that (dx and dw)
    printf("tokens=%lld total_ms=%.3f flops=%.6g\n", (long long)N, median(tot, reps),
           3.0 * 2.0 * (double)N * (double)(D * P + HV * D));
    float *bufs[] = { x, z1, g, z2, dz1, dx, dg, dz2, w1, b1, w2, b2, dw1, db1, dw2, db2 };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    return 0;
}

static int run_attn(const opts *o)
{
    const int64_t H = o->H, dk = o->D / o->H, ld = 2 * H * dk + H * dk, ml = 1024, nb = 32;
    int64_t *offs = malloc((size_t)(o->nseq + 1) * 8);
    offs[0] = 0;
    double pairs = 0;
    for (int64_t i = 0; i < o->nseq; i++) {
        offs[i + 1] = offs[i] + o->lengths[i];
        pairs += 0.5 * (double)o->lengths[i] * (double)(o->lengths[i] + 1);
    }
    const int64_t N = offs[o->nseq];
    float *qkv = malloc((size_t)(N * ld) * 4), *d = malloc((size_t)(N * ld) * 4);
    float *out = malloc((size_t)(N * H * dk) * 4), *rab = malloc((size_t)(H * (ml + nb)) * 4);
    float *drab = calloc((size_t)(H * (ml + nb)), 4);
    int64_t *times = malloc((size_t)N * 8), thr[32];
    uint64_t s = 3;
    fill(qkv, N * ld, &s, 1.0f);
    fill(rab, H * (ml + nb), &s, 0.1f);
    for (int64_t i = 0; i < N; i++)
        times[i] = 60 * i;
    hstu_time_thresholds(thr, nb);
    void *ws = malloc(hstu_attn_ws_bytes(N, o->nseq, H, ml + nb));
    grm_hstu_attn_args a = { .host = harness_host(), .nseq = o->nseq, .offsets = offs,
                         .times = times, .H = H, .dqk = dk, .dv = dk, .ld = ld,
                         .q = qkv + 2 * H * dk, .k = qkv + 2 * H * dk + H * dk, .v = qkv,
                         .rab_pos = rab, .rab_time = rab + H * ml, .max_len = ml,
                         .nbuckets = nb, .time_thr = thr, .norm = HSTU_NORM_MAX_LEN };
    double tot[64];
    const int reps = (int)(o->reps < 64 ? o->reps : 64);
    for (int r = -1; r < reps; r++) {
        const double t0 = now_ms();
        hstu_attn_fwd_cpu(NULL, out, &a, ws);
        hstu_attn_bwd_cpu(NULL, d + 2 * H * dk, d + 2 * H * dk + H * dk, d, drab, drab + H * ml,
                          out, &a, ws);
        if (r >= 0)
            tot[r] = now_ms() - t0;
    }
    // model flops: forward 2 (dqk + dv) per pair and head, backward twice that
    printf("tokens=%lld pairs=%.0f total_ms=%.3f flops=%.6g\n", (long long)N, pairs,
           median(tot, reps), 3.0 * pairs * (double)H * 2.0 * (double)(2 * dk));
    free(offs);
    free(qkv);
    free(d);
    free(out);
    free(rab);
    free(drab);
    free(times);
    free(ws);
    return 0;
}

int main(int argc, char **argv)
{
    static opts o = { .D = 256, .H = 4, .reps = 5 };
    const char *mode = argc > 1 ? argv[1] : "";
    int threads = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--dim") == 0)
            o.D = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--heads") == 0)
            o.H = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0)
            o.reps = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--lengths") == 0) {
            char *p = argv[i + 1];
            while (*p != '\0' && o.nseq < 4096) {
                o.lengths[o.nseq++] = strtoll(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        }
    }
    grm__pool_init(threads);    // before harness_host(), whose pool_init is then a no-op
    if (strcmp(mode, "--sgemm") == 0)
        return run_sgemm();
    if (o.nseq == 0 || o.H < 1 || o.D % o.H != 0 || o.reps < 1) {
        fprintf(stderr, "usage: bench-hstu --sgemm|--layer|--attn|--proj --threads T "
                "--lengths L1,L2,... [--dim D --heads H --reps R]\n");
        return 2;
    }
    if (strcmp(mode, "--layer") == 0)
        return run_layer(&o);
    if (strcmp(mode, "--attn") == 0)
        return run_attn(&o);
    if (strcmp(mode, "--proj") == 0)
        return run_proj(&o);
    fprintf(stderr, "bench-hstu: unknown mode '%s'\n", mode);
    return 2;
}
