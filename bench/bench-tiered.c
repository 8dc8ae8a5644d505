/* bench/bench-tiered.c - C driver of bench/bench_tiered.py: a training loop over an id
 * stream (lookup with INSERT of each batch's unique ids, an Adam update of the same rows)
 * on emb-dynamic all in memory or tiered (a RAM cache over a backing file); in both modes a
 * data thread assembles the batches up to 2 ahead as the trainer's does, and in tiered mode
 * it also prefetches their rows (BT_NOPF=1: not; BT_BACKING_IO=pread|io_uring: how;
 * BT_EVICT=lru|lfu: the policy; BT_THREADS=N: the store's pool, 2 by default; BT_COLD=1:
 * the file dropped from the page cache before each prefetch and before the export).
 * Prints one line:
 *   mode=<mem|tiered> cache_bytes=<given> cache_rows=R rows=N ids=I seconds=S ids_per_s=X
 *   hit_rate=H lookup_hit_rate=L bytes_read=BR bytes_written=BW prefetched=P prefetch_s=T
 *   wait_s=W export_s=E export_bytes_read=EB rows_export_s=X rows_export_bytes_read=XB
 *   tensor_export_s=Y tensor_export_bytes_read=YB rows_import_s=I
 *   rows_import_bytes_read=IR rows_import_bytes_written=IW tensor_import_s=J
 *   tensor_import_bytes_read=JR tensor_import_bytes_written=JW
 * wait_s: the loop's time waiting for the data thread; export_s: the first tensors() call
 * after the loop, the checkpoint's export of every row (both tiers when tiered);
 * rows_export_s: the same export a range of 16 MiB at a time (tensor_rows, ABI 1.10), a
 * range of each tensor in turn, as ckpt-grm 2.0 saves (one pass over the table);
 * tensor_export_s: every range of a tensor before the next, as ckpt-grm 1.0 saved (a pass
 * for each of weight, opt_state and meta); rows_import_s / tensor_import_s: that export
 * restored (load_rows) into a fresh store in the same two orders, the bytes it read from
 * and wrote to its new backing file beside each (tiered only; 0 in memory).
 * hit_rate = 1 - (rows read from the backing file, by prefetch or lookup, plus rows created)
 * / ids: the cache's own hit rate. lookup_hit_rate = 1 - (rows the lookups had to read or
 * create) / ids: a prefetched row counts as a hit (its read was hidden).
 * Usage: bench-tiered STREAM_FILE DIM (mem | BYTES | auto) BACKING_DIR [EPOCHS]
 * EPOCHS (default 1): passes over the stream, as training makes; the step keeps counting.
 * STREAM_FILE: int64 nbatch, int64 B, then nbatch * B ids (a batch's ids may repeat).
 * GRM_TOP_BUILDDIR must be set. Wall time: the backing file's I/O is part of the cost. */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grm/emb.h>

#include "../plugins/emb-dynamic/emb_dynamic.h"
#include "harness.h"
#include "../core/grm_core.h"

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

/* The data thread, as the trainer's (core/prefetch.c) in both modes: it assembles batch g
 * (here the dedup of its ids, the part of the trainer's assembly that grows with the batch)
 * into a ring of DEPTH + 1 slots up to DEPTH batches ahead of the loop ([train] prefetch,
 * default 2), and in tiered mode also prefetches the batch's rows; it runs at SCHED_IDLE,
 * as the trainer's does. The loop waits only for a batch not assembled yet, and each side
 * signals the other only when that one sleeps. (Before, the loop posted batch i+1 to a
 * thread that existed only in tiered mode and waited for it at the end of batch i: two
 * wake-ups a batch that the in-memory runs never paid, ~16% of the tiered loop on ML-100K
 * in perf.) BT_NOPF=1 in the environment keeps the thread but drops the prefetch: the
 * lookups then fetch what they miss. */
#define DEPTH 2
typedef struct pf_ring {
    const grm_emb_ops *ops;
    void *store;
    const int64_t *stream;      /* [nb, B] the batches' raw ids */
    int64_t *slot_ids;          /* [DEPTH + 1, B] unique ids of the batches in the ring */
    int64_t slot_n[DEPTH + 1];
    int64_t nb, B, total;       /* batches a pass, their size, batches in all (g = 1..total) */
    int64_t ready, done;        /* assembled through batch `ready`; trained through `done` */
    double prefetch_s;          /* seconds in the store's prefetch */
    double wait_s;              /* seconds the loop waited for a batch to be assembled */
    int prefetch, pf_sleeps, loop_sleeps;
    int cold_fd;                /* BT_COLD=1: the backing file, dropped from the page cache
                                 * before each prefetch (a file far larger than the RAM) */
    grm_status st;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} pf_ring;

static void *pf_main(void *arg)
{
    pf_ring *r = arg;
    grm__pool_inline_thread();      // as core/prefetch.c: the pool is the trainer's
    struct sched_param sp = { 0 };
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    for (int64_t g = 1; g <= r->total; g++) {
        pthread_mutex_lock(&r->mu);
        while (g > r->done + DEPTH) {
            r->pf_sleeps = 1;
            pthread_cond_wait(&r->cv, &r->mu);
        }
        r->pf_sleeps = 0;
        pthread_mutex_unlock(&r->mu);
        const int64_t k = (g - 1) % (DEPTH + 1);
        int64_t *ids = r->slot_ids + k * r->B;
        if (r->cold_fd >= 0) {      // BT_COLD: the backing file's pages out of the cache
            fdatasync(r->cold_fd);
            posix_fadvise(r->cold_fd, 0, 0, POSIX_FADV_DONTNEED);
        }
        r->slot_n[k] = unique(ids, r->stream + (g - 1) % r->nb * r->B, r->B);
        const double t0 = now_s();
        const grm_status st =
            r->prefetch ? r->ops->prefetch(r->store, 0, ids, r->slot_n[k]) : GRM_OK;
        r->prefetch_s += now_s() - t0;
        pthread_mutex_lock(&r->mu);
        if (r->st == GRM_OK) r->st = st;
        r->ready = g;
        if (r->loop_sleeps) pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        if (st != GRM_OK) break;
    }
    return NULL;
}

/* Batch g, once assembled: its slot's unique ids (*n of them). */
static const int64_t *pf_take(pf_ring *r, int64_t g, int64_t *n)
{
    pthread_mutex_lock(&r->mu);
    if (r->ready < g && r->st == GRM_OK) {
        const double t0 = now_s();
        while (r->ready < g && r->st == GRM_OK) {
            r->loop_sleeps = 1;
            pthread_cond_wait(&r->cv, &r->mu);
        }
        r->wait_s += now_s() - t0;
    }
    r->loop_sleeps = 0;
    pthread_mutex_unlock(&r->mu);
    const int64_t k = (g - 1) % (DEPTH + 1);
    *n = r->slot_n[k];
    return r->slot_ids + k * r->B;
}

/* After batch g's update: its slot is free and its rows may leave the cache. */
static void pf_release(pf_ring *r, int64_t g)
{
    pthread_mutex_lock(&r->mu);
    r->done = g;
    if (r->pf_sleeps) pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
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
    float *rows = malloc((size_t)B * (size_t)D * sizeof(float));
    float *grads = malloc((size_t)B * (size_t)D * sizeof(float));
    if (fread(stream, sizeof(int64_t), (size_t)(nb * B), f) != (size_t)(nb * B)) {
        fprintf(stderr, "bench-tiered: %s: short file\n", argv[1]);
        return 1;
    }
    fclose(f);
    for (int64_t i = 0; i < B * D; i++) grads[i] = 0.01f * (float)((i * 7) % 13 - 6);

    const grm_plugin_info *info = harness_plugin("emb-dynamic");
    const grm_plugin_info *oinfo = harness_plugin("opt-adam");
    // BT_THREADS=N: the trainer's pool (the harness starts 2, both of this machine's cores,
    // which leaves the data thread only what the loop does not use; N = 1 leaves it a core,
    // as a trainer does that keeps a core for its data thread)
    if (getenv("BT_THREADS") != NULL) {
        grm__pool_fini();
        if (grm__pool_init(atoi(getenv("BT_THREADS"))) != GRM_OK) die("BT_THREADS");
    }
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
    char kv_io[64];     // BT_BACKING_IO=pread|io_uring|auto: emb-dynamic's backing_io
    snprintf(kv_io, sizeof kv_io, "backing_io=%s",
             getenv("BT_BACKING_IO") ? getenv("BT_BACKING_IO") : "auto");
    char kv_evict[64];  // BT_EVICT=lru|lfu: emb-dynamic's evict policy
    snprintf(kv_evict, sizeof kv_evict, "evict=%s",
             getenv("BT_EVICT") ? getenv("BT_EVICT") : "lru");
    const void *cfg = tiered ? harness_config(info, kv_back, kv_cache, "profile_batches=20",
                                              kv_io, kv_evict, (const char *)NULL)
                             : harness_config(info, (const char *)NULL);
    if (ops->create(cfg, &spec, 1, &opt, &s) != GRM_OK) die("create");

    pf_ring r = { .ops = ops, .store = s, .stream = stream, .nb = nb, .B = B,
                  .total = epochs * nb, .prefetch = tiered && getenv("BT_NOPF") == NULL,
                  .st = GRM_OK, .mu = PTHREAD_MUTEX_INITIALIZER,
                  .cv = PTHREAD_COND_INITIALIZER };
    r.slot_ids = malloc((size_t)(DEPTH + 1) * (size_t)B * sizeof(int64_t));
    r.cold_fd = tiered && getenv("BT_COLD") ? harness_fd_of(".tier.") : -1;
    pthread_t th;
    if (pthread_create(&th, NULL, pf_main, &r) != 0) {
        fprintf(stderr, "bench-tiered: cannot start the data thread\n");
        return 1;
    }
    int64_t ids = 0;
    const double t0 = now_s();
    for (int64_t g = 1; g <= epochs * nb; g++) {
        int64_t n;
        const int64_t *uids = pf_take(&r, g, &n);
        if (r.st != GRM_OK) die("prefetch");
        if (ops->lookup(s, rows, 0, uids, n, GRM_EMB_INSERT) != GRM_OK) die("lookup");
        if (ops->update(s, 0, uids, grads, n, g) != GRM_OK) die("update");
        pf_release(&r, g);
        ids += n;
    }
    const double secs = now_s() - t0;
    pthread_join(th, NULL);
    free(r.slot_ids);
    grm_emb_stats st;
    ops->stats(s, 0, &st);
    const ed_table *t = &((const ed_store *)s)->tables[0];
    // The checkpoint's export: the first tensors() call builds the sorted snapshot of every
    // row (both tiers when tiered), which a checkpoint save then writes out.
    // BT_COLD: the file out of the page cache for the export too (found again: a compaction
    // replaced the descriptor the loop started with)
    const int cold_fd = tiered && getenv("BT_COLD") ? harness_fd_of(".tier.") : -1;
    if (cold_fd >= 0) {
        fdatasync(cold_fd);
        posix_fadvise(cold_fd, 0, 0, POSIX_FADV_DONTNEED);
    }
    const int64_t read_before = tiered ? atomic_load(&t->tier.bytes_read) : 0;
    grm_named_tensor nt;
    const double e0 = now_s();
    if (ops->tensors(s, 0, &nt) != GRM_OK) die("tensors");
    const double export_s = now_s() - e0;
    const int64_t export_read = tiered ? atomic_load(&t->tier.bytes_read) - read_before : 0;
    // The same export by rows (ABI 1.10, what a checkpoint save does with ckpt-grm): a fresh
    // snapshot, then ids, weight, opt_state and meta in ranges of 8 MiB of all four, each
    // range of each into one scratch buffer, so memory is the range, not the table: a range
    // of every tensor in turn, as ckpt-grm 2.0 asks (rows_export_s), and every range of a
    // tensor before the next tensor, as 1.0 did (tensor_export_s), each from the file
    // dropped from the page cache with BT_COLD (by tensor: before each tensor).
    double rows_export_s = 0, tensor_export_s = 0;
    int64_t rows_read = 0, tensor_read = 0;
    for (int by_tensor = 0; by_tensor < 2; by_tensor++) {
        ((ed_store *)s)->tables[0].exp.version = -1;
        if (cold_fd >= 0) posix_fadvise(cold_fd, 0, 0, POSIX_FADV_DONTNEED);
        const int64_t b0 = tiered ? atomic_load(&t->tier.bytes_read) : 0;
        const double r0 = now_s();
        grm_named_tensor d[4];
        size_t rb[4], all = 0;
        for (int32_t k = 0; k < 4; k++) {
            if (ops->tensor_rows(s, k, &d[k], 0, 0, NULL) != GRM_OK) die("tensor_rows");
            rb[k] = grm_dtype_size(d[k].tensor.dtype)
                    * (size_t)(d[k].tensor.ndim > 1 ? d[k].tensor.shape[1] : 1);
            all += rb[k];
        }
        const int64_t n = d[0].tensor.shape[0];
        char *range = malloc((size_t)16 << 20);
        for (int32_t q = 0; q < (by_tensor ? 4 : 1); q++) {
            // BT_COLD, a file far larger than the RAM: a pass over it leaves none of it
            // cached for the next tensor's
            if (cold_fd >= 0 && by_tensor) posix_fadvise(cold_fd, 0, 0, POSIX_FADV_DONTNEED);
            // ckpt-grm 2.0's ranges: 8 MiB of rows of all of the tensors; 1.0's: 16 MiB
            const int64_t per = by_tensor ? (int64_t)(((size_t)16 << 20) / rb[q])
                                          : (int64_t)(((size_t)8 << 20) / all);
            for (int64_t a = 0; a < n; a += per) {
                const int64_t m = n - a < per ? n - a : per;
                for (int32_t k = by_tensor ? q : 0; k < (by_tensor ? q + 1 : 4); k++)
                    if (ops->tensor_rows(s, k, NULL, a, m, range) != GRM_OK)
                        die("tensor_rows");
            }
        }
        free(range);
        const double secs_x = now_s() - r0;
        const int64_t read_x = tiered ? atomic_load(&t->tier.bytes_read) - b0 : 0;
        if (by_tensor) tensor_export_s = secs_x, tensor_read = read_x;
        else rows_export_s = secs_x, rows_read = read_x;
    }
    // The checkpoint's restore (load_rows, ABI 1.10) of that export into a fresh store of
    // the same config: a range of each of the four row tensors in turn (8 MiB of all four),
    // as ckpt-grm's load_rows_interleaved hands a 2.0 file over (ABI 1.13: each record put
    // together once), and a tensor at a time in pieces of 16 MiB, as load_rows hands it
    // (each tensor after the first reads its records back from the file and patches them),
    // each until the file is on disk (fdatasync). BT_COLD: the file dropped from the page
    // cache before each tensor, as for a table far larger than the RAM.
    double import_s[2] = { 0, 0 };
    int64_t import_read[2] = { 0, 0 }, import_written[2] = { 0, 0 };
    for (int by_tensor = 0; tiered && by_tensor < 2; by_tensor++) {
        grm_named_tensor all[5];
        for (int32_t k = 0; k < 5; k++)
            if (ops->tensors(s, k, &all[k]) != GRM_OK) die("tensors");
        void *fresh = NULL;
        if (ops->create(cfg, &spec, 1, &opt, &fresh) != GRM_OK) die("create");
        const ed_tier *ft = &((const ed_store *)fresh)->tables[0].tier;
        size_t rb[5], row_all = 0;
        for (int32_t k = 0; k < 5; k++) {
            rb[k] = grm_dtype_size(all[k].tensor.dtype)
                    * (size_t)(all[k].tensor.ndim > 1 ? all[k].tensor.shape[1] : 1);
            if (k < 4) row_all += rb[k];
        }
        const int64_t n = all[0].tensor.shape[0];
        const double i0 = now_s();
        for (int32_t q = 0; q < (by_tensor ? 4 : 1); q++) {
            if (by_tensor && cold_fd >= 0 && q > 0) {
                fdatasync(ft->fd);
                posix_fadvise(ft->fd, 0, 0, POSIX_FADV_DONTNEED);
            }
            const int64_t per = by_tensor ? (int64_t)(((size_t)16 << 20) / rb[q])
                                          : (int64_t)(((size_t)8 << 20) / row_all);
            for (int64_t a = 0; a < n; a += per) {
                const int64_t m = n - a < per ? n - a : per;
                for (int32_t k = by_tensor ? q : 0; k < (by_tensor ? q + 1 : 4); k++) {
                    grm_named_tensor piece = all[k];
                    piece.tensor.shape[0] = m;
                    piece.tensor.data = (char *)all[k].tensor.data + (size_t)a * rb[k];
                    if (ops->load_rows(fresh, &piece, a, n) != GRM_OK) die("load_rows");
                }
            }
        }
        if (ops->load_rows(fresh, &all[4], 0, all[4].tensor.shape[0]) != GRM_OK) die("load_rows");
        fdatasync(ft->fd);
        import_s[by_tensor] = now_s() - i0;
        import_read[by_tensor] = atomic_load(&ft->bytes_read);
        import_written[by_tensor] = atomic_load(&ft->bytes_written);
        ops->destroy(fresh);
    }
    printf("mode=%s cache_bytes=%s cache_rows=%lld rows=%lld ids=%lld seconds=%.3f "
           "ids_per_s=%.0f hit_rate=%.4f lookup_hit_rate=%.4f bytes_read=%lld "
           "bytes_written=%lld prefetched=%lld prefetch_s=%.3f wait_s=%.3f export_s=%.4f "
           "export_bytes_read=%lld rows_export_s=%.4f rows_export_bytes_read=%lld "
           "tensor_export_s=%.4f tensor_export_bytes_read=%lld rows_import_s=%.4f "
           "rows_import_bytes_read=%lld rows_import_bytes_written=%lld tensor_import_s=%.4f "
           "tensor_import_bytes_read=%lld tensor_import_bytes_written=%lld\n",
           tiered ? "tiered" : "mem", tiered ? mode : "-", (long long)(tiered ? st.capacity
                                                                              : st.rows),
           (long long)st.rows, (long long)ids, secs, (double)ids / secs,
           1.0 - (double)((tiered ? atomic_load(&t->tier.fetches) : 0) + st.rows)
                 / (double)ids,
           1.0 - (double)st.misses / (double)st.lookups,
           (long long)(tiered ? atomic_load(&t->tier.bytes_read) : 0),
           (long long)(tiered ? atomic_load(&t->tier.bytes_written) : 0),
           (long long)(tiered ? atomic_load(&t->tier.prefetched) : 0), r.prefetch_s, r.wait_s,
           export_s, (long long)export_read, rows_export_s, (long long)rows_read,
           tensor_export_s, (long long)tensor_read, import_s[0], (long long)import_read[0],
           (long long)import_written[0], import_s[1], (long long)import_read[1],
           (long long)import_written[1]);
    ops->destroy(s);
    oops->destroy(adam);
    free(stream);
    free(rows);
    free(grads);
    return 0;
}
