/* core/gen.c - the deterministic sample-data generator behind the quick start.
 *
 * Writes `user \t item \t ts` interaction rows with the shape of real recommendation
 * logs: Zipf item popularity inside taste clusters, long-tail sequence lengths (a
 * log-normal, 5..max), bursty timestamps, and sequential structure (a user often moves
 * to the successor of the last item, and stays in a cluster), so that a sequence model
 * can beat a most-popular ranking while popularity still matters. A pure function of
 * the options: the same seed writes the same bytes. */
#include "grm_core.h"
#include "gen.h"

#include <grm/rng.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Index drawn from a cumulative table cdf [n] (last entry 1). */
static int64_t draw(const double *cdf, int64_t n, double u)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (cdf[mid] < u) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

grm_status grm__generate(const grm__gen_opts *o, FILE *out)
{
    int64_t M = o->items, K = o->clusters, per = (M + K - 1) / K;
    double *item_cdf = malloc((size_t)per * sizeof *item_cdf);
    double *clus_cdf = malloc((size_t)K * sizeof *clus_cdf);
    unsigned char *seen = calloc((size_t)M + 1, 1);
    int64_t *hist = calloc((size_t)o->max_len, sizeof *hist);
    uint64_t s = o->seed * 0x2545f4914f6cdd1dULL + 1;
    grm_status st = GRM_OK;
    if (!item_cdf || !clus_cdf || !seen || !hist) {
        st = grm_errorf(GRM_ENOMEM, "generate: out of memory");
        goto out;
    }
    /* Zipf(1.1) over the ranks inside a cluster, Zipf(0.8) over clusters */
    double acc = 0;
    for (int64_t r = 0; r < per; r++) item_cdf[r] = acc += pow((double)r + 1, -1.1);
    for (int64_t r = 0; r < per; r++) item_cdf[r] /= acc;
    acc = 0;
    for (int64_t c = 0; c < K; c++) clus_cdf[c] = acc += pow((double)c + 1, -0.8);
    for (int64_t c = 0; c < K; c++) clus_cdf[c] /= acc;

    if (fprintf(out, "user\titem\tts\n") < 0) goto ioerr;
    for (int64_t u = 1; u <= o->users; u++) {
        /* long tail of lengths: log-normal around 18 */
        double u1 = grm_rng_uniform01(&s), u2 = grm_rng_uniform01(&s);
        double z = sqrt(-2 * log(u1 + 1e-300)) * cos(2 * M_PI * u2);   /* Box-Muller */
        int64_t len = (int64_t)exp(log(18.0) + 0.8 * z);
        if (len < o->min_len) len = o->min_len;
        if (len > o->max_len) len = o->max_len;
        if (len > per * K / 2) len = per * K / 2;
        int64_t home = draw(clus_cdf, K, grm_rng_uniform01(&s)), cur = home, last = -1;
        int64_t ts = 1700000000 + (int64_t)(grm_rng_uniform01(&s) * 3e7);
        for (int64_t j = 0; j < len; j++) {
            int64_t item = 0;
            for (int tries = 0; tries < 32; tries++) {
                double r = grm_rng_uniform01(&s);
                if (last >= 0 && r < 0.35) {
                    /* successor of the last item in its cluster */
                    int64_t c = (last - 1) / per, rank = (last - 1) % per;
                    rank = (rank + 1 + (int64_t)(grm_rng_uniform01(&s) * 3)) % per;
                    item = c * per + rank + 1;
                } else {
                    if (r > 0.9) cur = draw(clus_cdf, K, grm_rng_uniform01(&s));
                    else if (r > 0.8) cur = home;
                    item = cur * per + draw(item_cdf, per, grm_rng_uniform01(&s)) + 1;
                }
                if (item <= M && !seen[item]) break;
            }
            if (item > M || seen[item]) continue;
            seen[item] = 1;
            hist[j] = item;
            last = item;
            double gap = -log(grm_rng_uniform01(&s) + 1e-12);   /* exponential */
            ts += 60 + (int64_t)(gap * (grm_rng_uniform01(&s) < 0.7 ? 600 : 86400));
            if (fprintf(out, "%lld\t%lld\t%lld\n", (long long)u, (long long)item,
                        (long long)ts) < 0)
                goto ioerr;
        }
        for (int64_t j = 0; j < len; j++)
            if (hist[j] > 0 && hist[j] <= M) seen[hist[j]] = 0;
        memset(hist, 0, (size_t)len * sizeof *hist);
    }
    if (fflush(out) != 0) goto ioerr;
    goto out;
ioerr:
    st = grm_errorf(GRM_EIO, "generate: write failed: %s", strerror(errno));
out:
    free(item_cdf);
    free(clus_cdf);
    free(seen);
    free(hist);
    return st;
}
