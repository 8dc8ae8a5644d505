/* bench/bench-sparse.c - C driver of bench/bench_sparse.py: times the RecIS Table 1 operator
 * set of core/sparse.c on CPU and measures the machine's memory bandwidth with a STREAM-style
 * triad in the same run, so the script can report MBU = useful bytes / time / bandwidth
 * (RecIS §3.1). It writes every input stream it times to --dir as raw little-endian arrays
 * so the PyTorch peer runs on exactly the same data.
 *
 * Workload (RecIS §3.1): 1M ids over a 2^20-row table, rows of dim 16 and 64, a Zipf(1.05)
 * id stream (hot ids spread over the table by a bijective hash, as hashed ids are) and a
 * uniform one; reduce "easy" = short uniform segments (1..8 ids), "hard" = long-tailed
 * segments (Pareto lengths, a few thousand ids long).
 *
 * Output: `triad_gbs=X` (first and last line; the best of cached and streaming stores) and
 * one line per case between:
 *   case=gather dist=zipf dim=64 grm_ms=.. bytes=..
 * Usage: bench-sparse --dir DIR [--threads T] [--reps R] [--n N] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "grm_core.h"
#include "sparse.h"

#define ROWS ((int64_t)1 << 20)

static const char *out_dir;
static int reps = 5;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void *xmalloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        fprintf(stderr, "bench-sparse: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    memset(p, 0, bytes);   /* touch: no page faults inside the timed region */
    return p;
}

static void dump(const char *name, const void *data, size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", out_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes) {
        fprintf(stderr, "bench-sparse: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void check(grm_status st, const char *what)
{
    if (st != GRM_OK) {
        fprintf(stderr, "bench-sparse: %s: %s\n", what, grm_last_error());
        exit(1);
    }
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of `reps` timed runs after one warm-up. */
#define TIME_MS(result, stmt)                                                                 \
    do {                                                                                      \
        double t_[64];                                                                        \
        stmt;                                                                                 \
        for (int r_ = 0; r_ < reps; r_++) {                                                   \
            const double t0_ = now_ms();                                                      \
            stmt;                                                                             \
            t_[r_] = now_ms() - t0_;                                                          \
        }                                                                                     \
        qsort(t_, (size_t)reps, sizeof t_[0], cmp_double);                                    \
        (result) = t_[reps / 2];                                                              \
    } while (0)

static uint64_t rng_state = 0x5eed;

static uint64_t rnd(void)
{
    return grm_mix64(++rng_state);
}

static double rndu(void)   /* [0, 1) */
{
    return (double)(rnd() >> 11) * (1.0 / 9007199254740992.0);
}

/* Zipf(s) ranks over ROWS by inverse CDF, mapped to rows by an odd multiplier mod 2^20. */
static void zipf_ids(int64_t *ids, int64_t n, double s)
{
    double *cdf = xmalloc((size_t)ROWS * sizeof *cdf), acc = 0;
    for (int64_t r = 0; r < ROWS; r++) cdf[r] = (acc += pow((double)(r + 1), -s));
    for (int64_t j = 0; j < n; j++) {
        const double u = rndu() * acc;
        int64_t lo = 0, hi = ROWS - 1;
        while (lo < hi) {
            const int64_t mid = (lo + hi) / 2;
            if (cdf[mid] >= u) hi = mid;
            else lo = mid + 1;
        }
        ids[j] = (int64_t)(((uint64_t)lo * 0x9e3779b1ULL) & (uint64_t)(ROWS - 1));
    }
    free(cdf);
}

/* ---- STREAM triad: a = b + s c, bandwidth counted as 3 arrays of traffic ----
 * Run twice: with ordinary (cached) stores, where the hardware also reads every line of `a`
 * before overwriting it (4 arrays really move, STREAM still counts 3), and with streaming
 * (non-temporal) stores, as STREAM builds for x86 usually are, where 3 arrays is the real
 * traffic. The best of the two is the bandwidth MBU divides by: the operators may stream
 * their output too (gather does), so the cached-store figure would understate the peak by up
 * to a quarter and overstate every MBU. */

typedef struct triad_ctx {
    double *a;
    const double *b, *c;
    int nt;
} triad_ctx;

static grm_status triad_range(void *ctx, int64_t b, int64_t e)
{
    triad_ctx *t = ctx;
    double *restrict a = t->a;
    const double *restrict x = t->b, *restrict y = t->c;
#if defined(__x86_64__)
    if (t->nt) {
        int64_t i = b;
        if (i & 1) a[i] = x[i] + 3.0 * y[i], i++;   /* 16-byte alignment for the stream */
        const __m128d s = _mm_set1_pd(3.0);
        for (; i + 2 <= e; i += 2)
            _mm_stream_pd(a + i, _mm_add_pd(_mm_loadu_pd(x + i),
                                            _mm_mul_pd(s, _mm_loadu_pd(y + i))));
        for (; i < e; i++) a[i] = x[i] + 3.0 * y[i];
        _mm_sfence();
        return GRM_OK;
    }
#endif
    for (int64_t i = b; i < e; i++) a[i] = x[i] + 3.0 * y[i];
    return GRM_OK;
}

static double triad_gbs(int nt)
{
    const int64_t n = (int64_t)10 << 20;   /* 3 x 80 MiB: far beyond any cache */
    triad_ctx t = { xmalloc((size_t)n * 8), xmalloc((size_t)n * 8), xmalloc((size_t)n * 8), nt };
    for (int64_t i = 0; i < n; i++) ((double *)t.b)[i] = 1.0, ((double *)t.c)[i] = 2.0;
    double best = 1e30;
    for (int r = 0; r < 7; r++) {
        const double t0 = now_ms();
        check(grm__parallel_for(n, 65536, triad_range, &t), "triad");
        const double ms = now_ms() - t0;
        if (ms < best) best = ms;
    }
    free(t.a), free((void *)t.b), free((void *)t.c);
    return (double)(3 * n * 8) / (best * 1e6);   /* STREAM reports the best run */
}

/* Prints `triad_gbs=` (the best of both store kinds) and a comment line with each. */
static void print_triad(void)
{
    const double cached = triad_gbs(0), streamed = triad_gbs(1);
    printf("# triad: %.2f GB/s with cached stores, %.2f GB/s with streaming stores\n", cached,
           streamed);
    printf("triad_gbs=%.3f\n", cached > streamed ? cached : streamed);
    fflush(stdout);
}

static void line(const char *cs, const char *dist, int64_t dim, double ms, double bytes)
{
    printf("case=%s dist=%s dim=%lld grm_ms=%.4f bytes=%.0f\n", cs, dist, (long long)dim, ms,
           bytes);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int32_t threads = 2;
    int64_t n = 1000000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) out_dir = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: bench-sparse --dir DIR [--threads T] [--reps R] [--n N]\n");
            return 2;
        }
    }
    if (!out_dir || reps < 1 || reps > 64 || n < 1) {
        fprintf(stderr, "bench-sparse: --dir is required; reps in 1..64; n >= 1\n");
        return 2;
    }
    check(grm__pool_init(threads), "pool");
    printf("threads=%d n=%lld rows=%lld reps=%d\n", grm__num_threads(), (long long)n,
           (long long)ROWS, reps);
    print_triad();

    grm__sparse_work work;
    grm__sparse_work_init(&work);
    const char *dists[2] = { "zipf", "uniform" };
    int64_t *ids[2] = { xmalloc((size_t)n * 8), xmalloc((size_t)n * 8) };
    zipf_ids(ids[0], n, 1.05);
    for (int64_t j = 0; j < n; j++) ids[1][j] = (int64_t)(rnd() & (uint64_t)(ROWS - 1));
    dump("ids_zipf", ids[0], (size_t)n * 8);
    dump("ids_uniform", ids[1], (size_t)n * 8);

    /* ---- gather / scatter-add, dims 16 and 64 ---- */
    const int64_t dims[2] = { 16, 64 };
    for (int di = 0; di < 2; di++) {
        const int64_t D = dims[di];
        float *table = xmalloc((size_t)(ROWS * D) * 4), *buf = xmalloc((size_t)(n * D) * 4);
        for (int64_t x = 0; x < ROWS * D; x++) table[x] = (float)(x % 1000) * 1e-3f;
        for (int64_t x = 0; x < n * D; x++) buf[x] = 1e-3f;
        for (int d = 0; d < 2; d++) {
            double ms;
            TIME_MS(ms, check(grm__sparse_gather(buf, table, ids[d], n, ROWS, D), "gather"));
            line("gather", dists[d], D, ms, (double)n * 8 + 2.0 * (double)(n * D) * 4);
            for (int64_t x = 0; x < n * D; x++) buf[x] = 1e-3f;
            TIME_MS(ms, check(grm__sparse_scatter_add(table, buf, ids[d], n, ROWS, D, &work),
                              "scatter"));
            line("scatter", dists[d], D, ms, (double)n * 8 + 3.0 * (double)(n * D) * 4);
        }
        free(table), free(buf);
    }

    /* ---- ids partition = segment unique + shard split (8 ranks); unique alone ---- */
    {
        int64_t *uid = xmalloc((size_t)n * 8), *inv = xmalloc((size_t)n * 8);
        int64_t *sorted = xmalloc((size_t)n * 8), *pos = xmalloc((size_t)n * 8), rc[8], U = 0;
        int64_t *distinct = xmalloc((size_t)n * 8);
        for (int64_t j = 0; j < n; j++) distinct[j] = (int64_t)(rnd() >> 24);   /* 40 bits */
        dump("ids_distinct", distinct, (size_t)n * 8);
        const int64_t off[2] = { 0, n };
        const int64_t *streams[3] = { ids[0], ids[1], distinct };
        const char *names[3] = { "zipf", "uniform", "distinct" };
        for (int d = 0; d < 3; d++) {
            double ms;
            TIME_MS(ms, check(grm__sparse_segment_unique(uid, NULL, NULL, inv, &U, streams[d],
                                                         off, n, 1, &work), "unique"));
            line("unique", names[d], 0, ms, 16.0 * (double)n + 8.0 * (double)U);
            TIME_MS(ms, {
                check(grm__sparse_segment_unique(uid, NULL, NULL, inv, &U, streams[d], off, n,
                                                 1, &work), "unique");
                check(grm__sparse_ids_partition(sorted, NULL, pos, rc, uid, NULL, U, 8, &work),
                      "ids partition");
            });
            line("ids_partition", names[d], 0, ms, 16.0 * (double)n + 32.0 * (double)U);
            printf("# %s: %lld unique of %lld\n", names[d], (long long)U, (long long)n);
        }
        free(uid), free(inv), free(sorted), free(pos), free(distinct);
    }

    /* ---- reduce sum / mean, easy and hard, and sequence tile: dim 16, Zipf rows ---- */
    {
        const int64_t D = 16, L = 50;
        float *table = xmalloc((size_t)(ROWS * D) * 4);
        for (int64_t x = 0; x < ROWS * D; x++) table[x] = (float)(x % 1000) * 1e-3f;
        int64_t *off[2];
        int64_t nseg[2] = { 0, 0 };
        for (int k = 0; k < 2; k++) {
            off[k] = xmalloc((size_t)(n + 1) * 8);
            off[k][0] = 0;
            while (off[k][nseg[k]] < n) {
                /* easy: 1..8 ids; hard: Pareto(alpha 1.2) lengths, mean ~100, up to 1e5 */
                int64_t len = k == 0 ? 1 + (int64_t)(rnd() % 8)
                                     : (int64_t)(20.0 / pow(1.0 - rndu(), 1.0 / 1.2));
                if (len > 100000) len = 100000;
                if (off[k][nseg[k]] + len > n) len = n - off[k][nseg[k]];
                off[k][nseg[k] + 1] = off[k][nseg[k]] + len;
                nseg[k]++;
            }
        }
        dump("off_easy", off[0], (size_t)(nseg[0] + 1) * 8);
        dump("off_hard", off[1], (size_t)(nseg[1] + 1) * 8);
        printf("# segments: easy %lld, hard %lld\n", (long long)nseg[0], (long long)nseg[1]);
        const char *kinds[2] = { "easy", "hard" };
        float *out = xmalloc((size_t)(n * D) * 4 > (size_t)(nseg[1] * L * D) * 4
                                 ? (size_t)(n * D) * 4 : (size_t)(nseg[1] * L * D) * 4);
        for (int k = 0; k < 2; k++) {
            for (int mode = 0; mode < 2; mode++) {
                char cs[64];
                double ms;
                snprintf(cs, sizeof cs, "reduce_%s_%s", mode ? "mean" : "sum", kinds[k]);
                TIME_MS(ms, check(grm__sparse_segment_reduce(out, table, ids[0], off[k],
                                                             nseg[k], ROWS, D, mode), cs));
                line(cs, "zipf", D, ms, (double)n * 8 + (double)(n * D) * 4 +
                     (double)(nseg[k] * D) * 4 + (double)(nseg[k] + 1) * 8);
            }
        }
        /* Tile: the last 50 of each long-tailed sequence (user history), zero-padded. */
        double ms, taken = 0;
        for (int64_t b = 0; b < nseg[1]; b++) {
            const int64_t len = off[1][b + 1] - off[1][b];
            taken += (double)(len < L ? len : L);
        }
        TIME_MS(ms, check(grm__sparse_tile(out, table, ids[0], off[1], nseg[1], L, ROWS, D,
                                           GRM_SPARSE_TILE_LAST), "tile"));
        line("sequence_tile", "zipf", D, ms, taken * 8 + taken * (double)D * 4 +
             (double)(nseg[1] * L * D) * 4 + (double)(nseg[1] + 1) * 8);
        free(table), free(out), free(off[0]), free(off[1]);
    }

    /* ---- bucketize (64 boundaries) and mod: 1M values (RecIS: 100 columns x 10,000) ---- */
    {
        float *vals = xmalloc((size_t)n * 4);
        double bnd[64];
        int64_t *res = xmalloc((size_t)n * 8);
        for (int i = 0; i < 64; i++) bnd[i] = (double)i * 0.125 - 4.0;
        for (int64_t j = 0; j < n; j++) vals[j] = (float)(rndu() * 10.0 - 5.0);
        dump("bucket_values", vals, (size_t)n * 4);
        dump("bucket_bounds", bnd, sizeof bnd);
        double ms;
        TIME_MS(ms, check(grm__sparse_bucketize(res, vals, n, bnd, 64), "bucketize"));
        line("bucketize", "uniform", 0, ms, 12.0 * (double)n);
        TIME_MS(ms, check(grm__sparse_mod(res, ids[1], n, 1000003), "mod"));
        line("mod", "uniform", 0, ms, 16.0 * (double)n);
        free(vals), free(res);
    }
    free(ids[0]), free(ids[1]);
    /* Again at the end: on a shared machine the best of both is the closer estimate. */
    print_triad();
    grm__sparse_work_fini(&work);
    grm__pool_fini();
    return 0;
}
