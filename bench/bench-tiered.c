/* bench/bench-tiered.c - C driver of bench/bench_tiered.py: a training loop over an id
 * stream (lookup with INSERT of each batch's unique ids, an Adam update of the same rows)
 * on emb-dynamic all in memory or tiered (a RAM cache over a backing file), with the next
 * batch's rows prefetched on a second thread while the current batch runs, as the
 * trainer's data thread does. Prints one line:
 *   mode=<mem|tiered> cache_bytes=<given> cache_rows=R rows=N ids=I seconds=S ids_per_s=X
 *   hit_rate=H lookup_hit_rate=L bytes_read=BR bytes_written=BW prefetched=P
 * hit_rate = 1 - (rows read from the backing file, by prefetch or lookup, plus rows created)
 * / ids: the cache's own hit rate. lookup_hit_rate = 1 - (rows the lookups had to read or
 * create) / ids: a prefetched row counts as a hit (its read was hidden).
 * Usage: bench-tiered STREAM_FILE DIM (mem | BYTES | auto) BACKING_DIR [EPOCHS]
 * EPOCHS (default 1): passes over the stream, as training makes; the step keeps counting.
 * STREAM_FILE: int64 nbatch, int64 B, then nbatch * B ids (a batch's ids may repeat).
 * GRM_TOP_BUILDDIR must be set. Wall time: the backing file's I/O is part of the cost. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grm/emb.h>

#include "../plugins/emb-dynamic/emb_dynamic.h"
#include "harness.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The unique ids of ids [n] into out; returns their count (the host dedups likewise). */
static int64_t unique(int64_t *out, const int64_t *ids, int64_t n)
{
    memcpy(out, ids, (size_t)n * sizeof(int64_t));
    qsort(out, (size_t)n, sizeof(int64_t), cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++)
        if (u == 0 || out[u - 1] != out[i]) out[u++] = out[i];
    return u;
}

/* The prefetch thread: one for the run, handed a batch at a time, as the trainer's data
 * thread is (core/prefetch.c). A thread created per batch cost about as much as a batch
 * of this loop does in memory. */
typedef struct pf_job {
    const grm_emb_ops *ops;
    void *store;
    const int64_t *ids;
    int64_t n;
    grm_status st;
    int posted, quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} pf_job;

static void *pf_main(void *arg)
{
    pf_job *j = arg;
    grm__pool_inline_thread();      // as core/prefetch.c: the pool is the trainer's
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (!j->posted && !j->quit) pthread_cond_wait(&j->cv, &j->mu);
        if (j->quit) break;
        pthread_mutex_unlock(&j->mu);
        const grm_status st = j->ops->prefetch(j->store, 0, j->ids, j->n);
        pthread_mutex_lock(&j->mu);
        if (j->st == GRM_OK) j->st = st;
        j->posted = 0;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static void pf_post(pf_job *j, const int64_t *ids, int64_t n)
{
    pthread_mutex_lock(&j->mu);
    j->ids = ids, j->n = n, j->posted = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void pf_wait(pf_job *j)
{
    pthread_mutex_lock(&j->mu);
    while (j->posted) pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
}

static void die(const char *what)
{
    fprintf(stderr, "bench-tiered: %s: %s\n", what, harness_host()->last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench-tiered STREAM_FILE DIM (mem | BYTES | auto) DIR "
                "[EPOCHS]\n");
        return 2;
    }
    const int64_t epochs = argc > 5 ? atoll(argv[5]) : 1;
    if (epochs < 1) {
        fprintf(stderr, "bench-tiered: EPOCHS '%s' is not a count >= 1\n", argv[5]);
        return 2;
    }
    const int32_t D = atoi(argv[2]);
    const char *mode = argv[3];
    FILE *f = fopen(argv[1], "rb");
    int64_t hdr[2];
    if (f == NULL || fread(hdr, sizeof(hdr), 1, f) != 1) {
        perror(argv[1]);
        return 1;
    }
    const int64_t nb = hdr[0], B = hdr[1];
    int64_t *stream = malloc((size_t)(nb * B) * sizeof(int64_t));
    int64_t *u = malloc((size_t)(nb * B) * sizeof(int64_t));
    int64_t *nu = malloc((size_t)nb * sizeof(int64_t));
    float *rows = malloc((size_t)B * (size_t)D * sizeof(float));
    float *grads = malloc((size_t)B * (size_t)D * sizeof(float));
    if (fread(stream, sizeof(int64_t), (size_t)(nb * B), f) != (size_t)(nb * B)) {
        fprintf(stderr, "bench-tiered: %s: short file\n", argv[1]);
        return 1;
    }
    fclose(f);
    for (int64_t i = 0; i < nb; i++) nu[i] = unique(u + i * B, stream + i * B, B);
    for (int64_t i = 0; i < B * D; i++) grads[i] = 0.01f * (float)((i * 7) % 13 - 6);

    const grm_plugin_info *info = harness_plugin("emb-dynamic");
    const grm_plugin_info *oinfo = harness_plugin("opt-adam");
    const grm_emb_ops *ops = info->ops;
    const grm_opt_ops *oops = oinfo->ops;
    void *adam = NULL, *s = NULL;
    if (oops->create(harness_config(oinfo, NULL), &adam) != GRM_OK) die("opt-adam");
    grm_optimizer opt = { oops, adam };
    grm_emb_table_spec spec = { "bench", 1 << 16, D, GRM_EMB_INIT_UNIFORM, 0.05, 7 };
    const int tiered = strcmp(mode, "mem") != 0;
    char kv_back[600], kv_cache[64];
    snprintf(kv_back, sizeof kv_back, "backing=%s", argv[4]);
    snprintf(kv_cache, sizeof kv_cache, "cache_bytes=%s", mode);
    const void *cfg = tiered ? harness_config(info, kv_back, kv_cache, "profile_batches=20",
                                              (const char *)NULL)
                             : harness_config(info, (const char *)NULL);
    if (ops->create(cfg, &spec, 1, &opt, &s) != GRM_OK) die("create");

    pf_job j = { .ops = ops, .store = s, .st = GRM_OK, .mu = PTHREAD_MUTEX_INITIALIZER,
                 .cv = PTHREAD_COND_INITIALIZER };
    pthread_t th;
    if (tiered && pthread_create(&th, NULL, pf_main, &j) != 0) {
        fprintf(stderr, "bench-tiered: cannot start the prefetch thread\n");
        return 1;
    }
    int64_t ids = 0;
    const double t0 = now_s();
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t i = 0; i < nb; i++) {
            const int64_t nx = i + 1 < nb ? i + 1 : (e + 1 < epochs ? 0 : -1);
            const int pf = tiered && nx >= 0;
            if (pf) pf_post(&j, u + nx * B, nu[nx]);
            if (ops->lookup(s, rows, 0, u + i * B, nu[i], GRM_EMB_INSERT) != GRM_OK)
                die("lookup");
            if (ops->update(s, 0, u + i * B, grads, nu[i], e * nb + i + 1) != GRM_OK)
                die("update");
            if (pf) pf_wait(&j);
            if (j.st != GRM_OK) die("prefetch");
            ids += nu[i];
        }
    const double secs = now_s() - t0;
    if (tiered) {
        pthread_mutex_lock(&j.mu);
        j.quit = 1;
        pthread_cond_broadcast(&j.cv);
        pthread_mutex_unlock(&j.mu);
        pthread_join(th, NULL);
    }
    grm_emb_stats st;
    ops->stats(s, 0, &st);
    const ed_table *t = &((const ed_store *)s)->tables[0];
    printf("mode=%s cache_bytes=%s cache_rows=%lld rows=%lld ids=%lld seconds=%.3f "
           "ids_per_s=%.0f hit_rate=%.4f lookup_hit_rate=%.4f bytes_read=%lld "
           "bytes_written=%lld prefetched=%lld\n",
           tiered ? "tiered" : "mem", tiered ? mode : "-", (long long)(tiered ? st.capacity
                                                                              : st.rows),
           (long long)st.rows, (long long)ids, secs, (double)ids / secs,
           1.0 - (double)((tiered ? atomic_load(&t->tier.fetches) : 0) + st.rows)
                 / (double)ids,
           1.0 - (double)st.misses / (double)st.lookups,
           (long long)(tiered ? atomic_load(&t->tier.bytes_read) : 0),
           (long long)(tiered ? atomic_load(&t->tier.bytes_written) : 0),
           (long long)(tiered ? atomic_load(&t->tier.prefetched) : 0));
    ops->destroy(s);
    oops->destroy(adam);
    free(stream);
    free(u);
    free(nu);
    free(rows);
    free(grads);
    return 0;
}
