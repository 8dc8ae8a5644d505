/* bench/bench-head.c - timing driver of bench/bench_head.py for head-sampled-softmax, through
 * its ops table (the plugin as the trainer calls it), training mode (loss, d_pred and the
 * item rows' gradients). Two modes, each printing one key=value line:
 *   --tok   per-token negatives read in place (share_k = k, default 1, row_negatives = r,
 *           l2norm, T = 0.05): B tokens, each against its own r of N unique rows of dim D
 *           (k > 1: against the k r of its group, TurboGR eq. 2);
 *   --full  catalog = all: B rows against every one of N items of dim D.
 * Prints grm_ms (median of --reps after a warm-up) and flops (useful flops of the loss:
 * --tok 6 B k r D, --full 6 B N D: the logits, d_pred and the rows' gradients once each).
 * Usage: bench-head --tok|--full --threads T --rows B --items N --dim D [--r R --k K --reps N]
 * Needs GRM_TOP_BUILDDIR. Not a test: numbers only, no assertions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

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

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int64_t B = 0, N = 0, D = 0, r = 128, k = 1, reps = 10, threads = 2;
    for (int i = 2; i + 1 < argc; i += 2) {
        const int64_t v = strtoll(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--rows") == 0) B = v;
        else if (strcmp(argv[i], "--items") == 0) N = v;
        else if (strcmp(argv[i], "--dim") == 0) D = v;
        else if (strcmp(argv[i], "--r") == 0) r = v;
        else if (strcmp(argv[i], "--k") == 0) k = v;
        else if (strcmp(argv[i], "--reps") == 0) reps = v;
        else if (strcmp(argv[i], "--threads") == 0) threads = v;
    }
    const int tok = strcmp(mode, "--tok") == 0, full = strcmp(mode, "--full") == 0;
    if ((!tok && !full) || B < 1 || N < 1 || D < 1 || r < 1 || k < 1 || reps < 1) {
        fprintf(stderr, "usage: bench-head --tok|--full --threads T --rows B --items N "
                "--dim D [--r R --k K --reps N]\n");
        return 2;
    }
    grm__pool_init((int32_t)threads);   // before harness_host(), whose pool_init is a no-op
    const grm_plugin_info *info = harness_plugin("head-sampled-softmax");
    const grm_head_ops *ops = info->ops;
    char neg[64], rn[64], sk[64];
    snprintf(sk, sizeof sk, "share_k=%lld", (long long)k);
    snprintf(neg, sizeof neg, "negatives=%lld", (long long)(tok ? B * r : 1));
    snprintf(rn, sizeof rn, "row_negatives=%lld", (long long)r);
    const void *cfg = tok ? harness_config(info, sk, rn, neg, "in_batch=false",
                                           "l2norm=true", "temperature=0.05", NULL)
                          : harness_config(info, "catalog=all", "in_batch=false", NULL);
    void *h = NULL;
    if (ops->create(cfg, D, 1, &h) != GRM_OK) {
        fprintf(stderr, "bench-head: %s\n", grm_last_error());
        return 1;
    }
    const int64_t R = tok ? B * r : N;
    float *rows = malloc((size_t)(N * D) * 4), *drows = malloc((size_t)(N * D) * 4);
    float *pred = malloc((size_t)(B * D) * 4), *dpred = malloc((size_t)(B * D) * 4);
    int64_t *ids = malloc((size_t)N * 8), *pslot = malloc((size_t)B * 8);
    int64_t *pid = malloc((size_t)B * 8), *nslot = malloc((size_t)R * 8);
    int64_t *nid = malloc((size_t)R * 8);
    uint64_t s = 7;
    for (int64_t i = 0; i < N * D; i++) rows[i] = harness_randf(&s) * 0.1f;
    for (int64_t i = 0; i < B * D; i++) pred[i] = harness_randf(&s);
    for (int64_t i = 0; i < N; i++) ids[i] = i;
    for (int64_t b = 0; b < B; b++) pid[b] = pslot[b] = (int64_t)(harness_rand(&s) % N);
    for (int64_t j = 0; j < R; j++)
        nid[j] = nslot[j] = tok ? (int64_t)(harness_rand(&s) % N) : j;
    grm_loss_io io;
    memset(&io, 0, sizeof io);
    io.struct_size = sizeof io;
    io.rows = B;
    io.dim = D;
    io.pred = pred;
    io.d_pred = dpred;
    io.pos_ids = pid;
    io.neg_ids = nid;
    io.nneg = R;
    io.item_rows = rows;
    io.d_item_rows = drows;
    io.nitems = N;
    io.pos_slots = pslot;
    io.neg_slots = nslot;
    double *t = malloc((size_t)reps * sizeof *t);
    for (int64_t it = -1; it < reps; it++) {
        memset(drows, 0, (size_t)(N * D) * 4);
        const double t0 = now_ms();
        if (ops->loss(h, &io) != GRM_OK) {
            fprintf(stderr, "bench-head: %s\n", grm_last_error());
            return 1;
        }
        if (it >= 0) t[it] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    const double flops = 6.0 * (double)B * (double)(tok ? k * r : N) * (double)D;
    printf("grm_ms=%.3f spread=%.3f flops=%.0f loss=%.6f\n", t[reps / 2],
           (t[reps - 1] - t[0]) / t[reps / 2], flops, io.loss);
    ops->destroy(h);
    return 0;
}
