/* bench/bench-emb.c - C driver of bench/bench_emb.py: lookup and insert throughput of
 * emb-dynamic (impl cpu and ref) and emb-static on a Zipf id stream, at a given load factor
 * of emb-dynamic's key structure and row dim. Writes the id stream and the key set to a
 * file so bench-emb-absl.cc measures the same ids. The host pool has one thread, as the
 * abseil peer does: impl cpu is then the grouped-prefetch loop on the calling thread, impl
 * ref the plain per-id loop. Prints one line per measurement:
 *   store=<s> op=<lookup|train_lookup|insert> dim=D lf=L rows=R distinct=U ids_per_s=X
 * (U: the distinct ids of the stream, its working set).
 * Usage: bench-emb DIM LOAD_FACTOR IDS_FILE [SECONDS [HOT]] (GRM_TOP_BUILDDIR must be set);
 * HOT > 0 draws the stream from the HOT hottest rows only (a cache-resident working set). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grm/emb.h>
#include <grm/rng.h>

#include "harness.h"

#define LOG2_SLOTS 18           /* key slots of emb-dynamic: 262144 */
#define BATCH 4096
#define STREAM (1 << 21)        /* ids in the Zipf stream */
#define ZIPF_S 1.05

/* CPU time of the calling thread: every measurement here runs on it alone (a one-thread
 * pool), and on a shared machine wall time also counts the time other processes hold the
 * core (spreads of 20-300 % between rounds); bench-emb-absl.cc uses the same clock. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The key of rank r: a sparse 64-bit id (what a hash store sees). */
static int64_t key_of(int64_t r)
{
    return (int64_t)(grm_mix64((uint64_t)r + 1) >> 1);
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b != 0) {
        const int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Zipf(s) ranks by inverse CDF, deterministic: over the H hottest of R rows (H = R: all of
 * them), scattered over [0, R). */
static void zipf_stream(int64_t *ranks, int64_t n, int64_t R, int64_t H)
{
    double *cdf = malloc((size_t)H * sizeof(double));
    double acc = 0;
    for (int64_t r = 0; r < H; r++) {
        acc += pow((double)(r + 1), -ZIPF_S);
        cdf[r] = acc;
    }
    // Ranks are scattered over [0, R) by a multiplier prime to R, so that hot rows are not
    // all adjacent in emb-static and every rank stays distinct. 40503 alone shares the
    // factor 23 with R = 188,416 (load factor 0.75): that stream held 8,192 distinct ids,
    // a working set that fit in L2, and measured a cache-resident table instead.
    int64_t mul = 40503;
    while (gcd64(mul, R) != 1) mul += 2;
    uint64_t st = 2024;
    for (int64_t i = 0; i < n; i++) {
        const double u = grm_rng_uniform01(&st) * acc;
        int64_t lo = 0, hi = H - 1;
        while (lo < hi) {
            const int64_t mid = (lo + hi) / 2;
            if (cdf[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        ranks[i] = (lo * mul) % R;
    }
    free(cdf);
}

static void *create(const grm_plugin_info *info, const grm_emb_table_spec *spec,
                    const char *kv1, const char *kv2)
{
    const void *cfg = harness_config(info, kv1, kv2, (const char *)NULL);
    void *s = NULL;
    if (((const grm_emb_ops *)info->ops)->create(cfg, spec, 1, NULL, &s) != GRM_OK) {
        fprintf(stderr, "bench-emb: %s: %s\n", info->name, harness_host()->last_error());
        exit(1);
    }
    return s;
}

/* Ids per second of lookups of `stream` [n] in batches, repeated for >= seconds. */
static double time_lookups(const grm_emb_ops *ops, void *s, const int64_t *stream, int64_t n,
                           float *out, uint32_t flags, double seconds)
{
    int64_t done = 0;
    const double t0 = now_s();
    double t = t0;
    do {
        for (int64_t i = 0; i < n; i += BATCH) {
            const int64_t b = n - i < BATCH ? n - i : BATCH;
            if (ops->lookup(s, out, 0, stream + i, b, flags) != GRM_OK) {
                fprintf(stderr, "bench-emb: lookup: %s\n", harness_host()->last_error());
                exit(1);
            }
        }
        done += n;
        t = now_s();
    } while (t - t0 < seconds);
    return (double)done / (t - t0);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench-emb DIM LOAD_FACTOR IDS_FILE [SECONDS [HOT]]\n");
        return 2;
    }
    const int32_t D = atoi(argv[1]);
    const double lf = atof(argv[2]);
    const double secs = argc > 4 ? atof(argv[4]) : 0.5;
    const int64_t hot = argc > 5 ? atoll(argv[5]) : 0;
    const int64_t M = INT64_C(1) << LOG2_SLOTS;
    // Rows at the load factor, less two batches so a training batch still fits (the
    // store reserves room for a whole batch before it runs; see README.md).
    int64_t R = (int64_t)(lf * (double)M);
    if (R > M / 4 * 3 - 2 * BATCH) R = M / 4 * 3 - 2 * BATCH;

    int64_t *ranks = malloc(STREAM * sizeof(int64_t));
    int64_t *keys = malloc(STREAM * sizeof(int64_t));
    int64_t *all = malloc((size_t)R * sizeof(int64_t));
    float *out = malloc((size_t)BATCH * (size_t)D * sizeof(float));
    zipf_stream(ranks, STREAM, R, hot > 0 && hot < R ? hot : R);
    for (int64_t i = 0; i < STREAM; i++) keys[i] = key_of(ranks[i]);
    for (int64_t r = 0; r < R; r++) all[r] = key_of(r);
    // Distinct ids of the stream: its working set, printed with every measurement.
    unsigned char *seen = calloc((size_t)R, 1);
    int64_t distinct = 0;
    for (int64_t i = 0; i < STREAM; i++) {
        distinct += !seen[ranks[i]];
        seen[ranks[i]] = 1;
    }
    free(seen);

    FILE *f = fopen(argv[3], "wb");
    if (f == NULL) {
        perror(argv[3]);
        return 1;
    }
    const int64_t hdr[2] = { R, STREAM };
    fwrite(hdr, sizeof(hdr), 1, f);
    fwrite(all, sizeof(int64_t), (size_t)R, f);
    fwrite(keys, sizeof(int64_t), STREAM, f);
    fclose(f);

    // One thread, as the abseil peer runs (the first pool_init wins; harness_host's is a
    // no-op after this).
    if (grm__pool_init(1) != GRM_OK) {
        fprintf(stderr, "bench-emb: %s\n", grm_last_error());
        return 1;
    }
    const grm_plugin_info *dyn = harness_plugin("emb-dynamic");
    const grm_plugin_info *sta = harness_plugin("emb-static");
    const grm_emb_ops *dops = dyn->ops, *sops = sta->ops;
    grm_emb_table_spec spec = { "bench", R, D, GRM_EMB_INIT_UNIFORM, 0.05, 7 };
    char rows_kv[64];
    snprintf(rows_kv, sizeof rows_kv, "initial_rows=%lld", (long long)(M / 4 * 3));

    static const char *const impls[2] = { "cpu", "ref" };
    for (int k = 0; k < 2; k++) {
        char impl_kv[32];
        snprintf(impl_kv, sizeof impl_kv, "impl=%s", impls[k]);
        void *s = create(dyn, &spec, rows_kv, impl_kv);
        // Insert: R fresh ids into a key structure sized for them (no growth).
        const double t0 = now_s();
        time_lookups(dops, s, all, R, out, GRM_EMB_INSERT, 0.0);
        const double ins = (double)R / (now_s() - t0);
        grm_emb_stats st;
        dops->stats(s, 0, &st);
        const double lf_got = (double)st.rows / (double)(st.capacity / 3 * 4);
        const double look = time_lookups(dops, s, keys, STREAM, out, 0, secs);
        const double train = time_lookups(dops, s, keys, STREAM, out, GRM_EMB_INSERT, secs);
        printf("store=emb-dynamic-%s op=insert dim=%d lf=%.3f rows=%lld distinct=%lld "
               "ids_per_s=%.0f\n", impls[k], (int)D, lf_got, (long long)R,
               (long long)distinct, ins);
        printf("store=emb-dynamic-%s op=lookup dim=%d lf=%.3f rows=%lld distinct=%lld "
               "ids_per_s=%.0f\n", impls[k], (int)D, lf_got, (long long)R,
               (long long)distinct, look);
        printf("store=emb-dynamic-%s op=train_lookup dim=%d lf=%.3f rows=%lld distinct=%lld "
               "ids_per_s=%.0f\n", impls[k], (int)D, lf_got, (long long)R,
               (long long)distinct, train);
        dops->destroy(s);
    }
    for (int k = 0; k < 2; k++) {
        char impl_kv[32];
        snprintf(impl_kv, sizeof impl_kv, "impl=%s", impls[k]);
        void *s = create(sta, &spec, impl_kv, NULL);
        const double look = time_lookups(sops, s, ranks, STREAM, out, 0, secs);
        printf("store=emb-static-%s op=lookup dim=%d lf=%.3f rows=%lld distinct=%lld "
               "ids_per_s=%.0f\n", impls[k], (int)D, lf, (long long)R, (long long)distinct,
               look);
        sops->destroy(s);
    }
    free(ranks);
    free(keys);
    free(all);
    free(out);
    return 0;
}
