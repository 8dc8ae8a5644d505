/* tests/test-emb-tiered.c - emb-dynamic's tiered mode (issue 20: a cache in RAM over a
 * backing file, seed 003 §2.1-2.3) against the same store with every row in memory. The
 * expected values are the all-in-memory store's: a tiered table whose backing tier holds
 * 10x its cache must give bitwise the same rows, optimizer state and per-row metadata
 * after the same lookups and Adam updates, through evictions, write-backs, fetches,
 * evaluation reads from the file and a checkpoint round trip. Also: prefetching batch i+1
 * never evicts batch i (a stream that would under plain LRU), the auto cache size from a
 * stream whose reuse distances are known, the checksum catching a changed backing file,
 * the configuration errors, the prefetch reading through io_uring or pread alike, and the
 * data thread's trim (ABI 1.12) keeping the batches in flight. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grm/emb.h>
#include <grm/rng.h>

#include "../plugins/emb-dynamic/emb_dynamic.h"
#include "emb-fakes.h"
#include "harness.h"
#include "tap.h"

#define D 16
#define R 6000          /* ids of the table */
#define B 256           /* ids per batch */
#define STEPS 60

static const grm_opt_ops *adam_ops;
static void *adam;
static char dir[256];

static void *try_store(const grm_emb_table_spec *spec, grm_status *status,
                       const char *const *kv)
{
    int nkv = 0;
    while (kv != NULL && kv[nkv] != NULL) nkv++;
    const void *cfg = NULL;
    grm_status st = harness_config_try(info, &cfg, kv, nkv);
    void *s = NULL;
    if (st == GRM_OK) {
        grm_optimizer opt = { adam_ops, adam };
        st = ops->create(cfg, spec, 1, &opt, &s);
    }
    if (status) *status = st;
    return st == GRM_OK ? s : NULL;
}

static void *make_store(const grm_emb_table_spec *spec, const char *const *kv)
{
    grm_status st;
    void *s = try_store(spec, &st, kv);
    if (s == NULL) {
        printf("Bail out! create: %s\n", harness_host()->last_error());
        exit(1);
    }
    return s;
}

static grm_emb_stats stats_of(void *s)
{
    grm_emb_stats st;
    memset(&st, 0, sizeof(st));
    if (ops->stats(s, 0, &st) != GRM_OK) tap_diag("stats: %s", harness_host()->last_error());
    return st;
}

/* n distinct ids of a skewed stream over [0, R): squares of uniforms favour small ranks. */
static int64_t batch_ids(int64_t *ids, int64_t n, uint64_t *rng)
{
    int64_t k = 0;
    while (k < n) {
        const double u = grm_rng_uniform01(rng);
        const int64_t id = (int64_t)(u * u * R) * 7919 + 11;    // sparse ids
        int dup = 0;
        for (int64_t i = 0; i < k && !dup; i++) dup = ids[i] == id;
        if (!dup) ids[k++] = id;
    }
    return k;
}

/* Every exported tensor of a and b equal bitwise (the checkpoint's content). */
static int same_export(void *a, void *b, const char *what)
{
    static const char *const names[] = { "t.ids", "t.weight", "t.opt_state", "t.meta" };
    int ok = 1;
    for (int k = 0; k < 4; k++) {
        const grm_named_tensor x = find_tensor(a, names[k]);
        const grm_named_tensor y = find_tensor(b, names[k]);
        const size_t bytes = (size_t)x.tensor.shape[0] * (size_t)x.tensor.shape[1]
                             * grm_dtype_size(x.tensor.dtype);
        if (x.name == NULL || y.name == NULL || x.tensor.shape[0] != y.tensor.shape[0]
            || x.tensor.shape[1] != y.tensor.shape[1]
            || memcmp(x.tensor.data, y.tensor.data, bytes) != 0) {
            tap_diag("%s: %s differs (%lld vs %lld rows)", what, names[k],
                     (long long)x.tensor.shape[0], (long long)y.tensor.shape[0]);
            ok = 0;
        }
    }
    return ok;
}

/* Train a (all in memory) and b (tiered) on the same batches; 1 when every looked-up row
 * matched bitwise. Also evaluates (lookups without INSERT) every 10 steps. */
static int train_both(void *a, void *b, int64_t step0, int64_t steps, uint64_t seed,
                      int64_t *mismatch)
{
    int64_t ids[B];
    float ra[B * D], rb[B * D], g[B * D];
    uint64_t rng = seed;
    for (int64_t s = step0; s < step0 + steps; s++) {
        const int64_t n = batch_ids(ids, B, &rng);
        if (ops->lookup(a, ra, 0, ids, n, GRM_EMB_INSERT) != GRM_OK
            || ops->lookup(b, rb, 0, ids, n, GRM_EMB_INSERT) != GRM_OK) {
            tap_diag("lookup: %s", harness_host()->last_error());
            return 0;
        }
        if (memcmp(ra, rb, sizeof(float) * (size_t)(n * D)) != 0) (*mismatch)++;
        for (int64_t i = 0; i < n * D; i++) g[i] = (float)(grm_rng_uniform01(&rng) - 0.5);
        if (ops->update(a, 0, ids, g, n, s) != GRM_OK
            || ops->update(b, 0, ids, g, n, s) != GRM_OK) {
            tap_diag("update: %s", harness_host()->last_error());
            return 0;
        }
        if (s % 10 == 0) {      // evaluation: rows of the file read without caching them
            for (int64_t i = 0; i < n; i++) ids[i] = (int64_t)i * 7919 * 23 + 11;
            if (ops->lookup(a, ra, 0, ids, n, 0) != GRM_OK
                || ops->lookup(b, rb, 0, ids, n, 0) != GRM_OK)
                return 0;
            if (memcmp(ra, rb, sizeof(float) * (size_t)(n * D)) != 0) (*mismatch)++;
        }
    }
    return 1;
}

/* "backing=<dir>/<sub>", the directory made: each live store gets its own (the file is
 * named after the table). Four rotating buffers. */
static const char *kv_dir(const char *sub)
{
    static char kv[4][300];
    static int next;
    char *k = kv[next++ % 4];
    char path[280];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0700);
    snprintf(k, 300, "backing=%s", path);
    return k;
}

/* Bytes of this process's open backing file whose path contains `sub` (it is unlinked, so
 * found through /proc/self/fd); -1 when none is open. */
static int64_t backing_bytes(const char *sub)
{
    const int fd = harness_fd_of(sub);
    struct stat sb;
    return fd >= 0 && fstat(fd, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/* Overwrite with junk every garbage record of the backing file of table t, whose path
 * contains `sub`: every record the table's index does not point at (an id's older copies,
 * the records of free segments). Records of rec bytes after the 64-byte header, each
 * starting with its id. Returns the records junked, or -1. */
static int64_t junk_garbage(const ed_table *t, const char *sub, int64_t rec)
{
    const int fd0 = harness_fd_of(sub);
    char path[64];
    if (fd0 < 0) return -1;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd0);
    const int fd = open(path, O_RDWR);
    const off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
    const int64_t n = size > 64 ? (int64_t)(size - 64) / rec : 0;
    char *junk = malloc((size_t)rec);
    int64_t junked = fd >= 0 && junk != NULL ? 0 : -1;
    if (junk != NULL) memset(junk, 0xA5, (size_t)rec);
    for (int64_t i = 0; i < n && junked >= 0; i++) {
        int64_t id;
        if (pread(fd, &id, 8, 64 + i * rec) != 8) {
            junked = -1;
            break;
        }
        const ed_slot *sl = ed_keys_find(&t->tier.index, id, ed_hash(id));
        if (sl != NULL && atomic_load(&sl->ref) == i) continue;     // live
        junked = pwrite(fd, junk, (size_t)rec, 64 + i * rec) == rec ? junked + 1 : -1;
    }
    if (fd >= 0) close(fd);
    free(junk);
    return junked;
}

/* The budget auto gives for an LRU cache of C rows: the smallest whose 7/8 (what a tiered
 * cache is cut to past its budget) still holds C rows (profile.c). */
static int64_t budget_for(int64_t C)
{
    int64_t b = C;
    while (b - b / 8 < C) b++;
    return b;
}


/* Tensor k of store s read through tensor_rows (ABI 1.10) in ranges of `step` rows into a
 * malloc()ed buffer, its description in *d; NULL on failure. */
static void *rows_of(void *s, int32_t k, int64_t step, grm_named_tensor *d)
{
    if (ops->tensor_rows(s, k, d, 0, 0, NULL) != GRM_OK || d->tensor.data != NULL) return NULL;
    const int64_t n = d->tensor.shape[0];
    const size_t rb = grm_dtype_size(d->tensor.dtype)
                      * (size_t)(d->tensor.ndim > 1 ? d->tensor.shape[1] : 1);
    char *buf = malloc((size_t)n * rb + 1);
    for (int64_t r0 = 0; r0 < n; r0 += step) {
        const int64_t m = n - r0 < step ? n - r0 : step;
        if (ops->tensor_rows(s, k, NULL, r0, m, buf + (size_t)r0 * rb) != GRM_OK) {
            tap_diag("tensor_rows: %s", harness_host()->last_error());
            free(buf);
            return NULL;
        }
    }
    return buf;
}

/* Restore store s from src's tensors through load_rows, tensor order `order` [5], each in
 * pieces of 1000, 1, 777 rows, then the rest. */
static grm_status load_by_pieces(void *s, void *src, const int *order)
{
    grm_status st = GRM_OK;
    for (int q = 0; q < 5 && st == GRM_OK; q++) {
        grm_named_tensor d;
        char *buf = rows_of(src, order[q], 4096, &d);
        if (buf == NULL) return GRM_EINTERNAL;
        const int64_t n = d.tensor.shape[0];
        const size_t rb = grm_dtype_size(d.tensor.dtype)
                          * (size_t)(d.tensor.ndim > 1 ? d.tensor.shape[1] : 1);
        static const int64_t sizes[3] = { 1000, 1, 777 };
        for (int64_t r0 = 0, p = 0; st == GRM_OK && (r0 < n || r0 == 0); p++) {
            int64_t m = p < 3 ? sizes[p] : n - r0;
            if (m > n - r0) m = n - r0;
            grm_named_tensor piece = d;
            piece.tensor.shape[0] = m;
            piece.tensor.data = buf + (size_t)r0 * rb;
            st = ops->load_rows(s, &piece, r0, n);
            r0 += m;
            if (n == 0) break;
        }
        free(buf);
    }
    return st;
}

/* Restore store s from src's five tensors through load_rows, interleaved: in round g,
 * tensor k hands over its range g - lag[k] of `range` rows (when it has one), so lag 0 for
 * all is a range of each in turn, as ckpt-grm 2.0 writes them, and unequal lags make a
 * tensor run ahead of the others. */
static grm_status load_lagged(void *s, void *src, int64_t range, const int *lag)
{
    grm_named_tensor d[5];
    char *buf[5] = { NULL };
    size_t rb[5];
    grm_status st = GRM_OK;
    int64_t most = 0;
    for (int k = 0; k < 5 && st == GRM_OK; k++) {
        if ((buf[k] = rows_of(src, k, 4096, &d[k])) == NULL) st = GRM_EINTERNAL;
        else rb[k] = grm_dtype_size(d[k].tensor.dtype)
                     * (size_t)(d[k].tensor.ndim > 1 ? d[k].tensor.shape[1] : 1);
        if (st == GRM_OK && d[k].tensor.shape[0] / range + lag[k] > most)
            most = d[k].tensor.shape[0] / range + lag[k];
    }
    for (int64_t g = 0; g <= most && st == GRM_OK; g++)
        for (int k = 0; k < 5 && st == GRM_OK; k++) {
            const int64_t n = d[k].tensor.shape[0], r0 = (g - lag[k]) * range;
            if (r0 < 0 || (r0 >= n && !(n == 0 && r0 == 0))) continue;
            grm_named_tensor piece = d[k];
            piece.tensor.shape[0] = n - r0 < range ? n - r0 : range;
            piece.tensor.data = buf[k] + (size_t)r0 * rb[k];
            st = ops->load_rows(s, &piece, r0, n);
        }
    for (int k = 0; k < 5; k++) free(buf[k]);
    return st;
}

/* save_rows' and load_rows' callbacks over a store: its tensors a range of rows at a time,
 * as the host's checkpoint moves them. */
static grm_status store_rows(void *user, int64_t index, int64_t row0, int64_t n, void *out)
{
    return ops->tensor_rows(user, (int32_t)index, NULL, row0, n, out);
}

static grm_status store_piece(void *user, const grm_named_tensor *t, int64_t row0,
                              int64_t rows)
{
    return ops->load_rows(user, t, row0, rows);
}

/* The checkpoint formats whose save_rows and load_rows these tests go through. */
static const char *const formats[2] = { "ckpt-grm", "ckpt-safetensors" };

/* Store src's five tensors saved by format fmt, as the host saves a store (save_rows over
 * tensor_rows), into dir/<stem>.<its extension>: kpath [cap]. *kops and *kinst: the
 * format's ops and instance, for the caller to read the file back and destroy. */
static grm_status save_through(const char *fmt, void *src, const char *stem,
                               const grm_ckpt_ops **kops, void **kinst, char *kpath,
                               size_t cap)
{
    const grm_plugin_info *ki = harness_plugin(fmt);
    *kops = ki->ops;
    *kinst = NULL;
    grm_status st = (*kops)->create(harness_config(ki, NULL), kinst);
    snprintf(kpath, cap, "%s/%s.%s", dir, stem, st == GRM_OK ? (*kops)->extension(*kinst) : "x");
    grm_named_tensor kt[5];
    for (int k = 0; k < 5 && st == GRM_OK; k++) st = ops->tensor_rows(src, k, &kt[k], 0, 0, NULL);
    if (st == GRM_OK) st = (*kops)->save_rows(*kinst, kpath, kt, 5, "{}", store_rows, src);
    if (st != GRM_OK) tap_diag("%s: %s", fmt, harness_host()->last_error());
    return st;
}

/* The backing file's bytes read and written by store s (its one table) so far. */
static void tier_io(void *s, int64_t *rd, int64_t *wr)
{
    const ed_tier *tr = &((ed_store *)s)->tables[0].tier;
    *rd = atomic_load(&tr->bytes_read);
    *wr = atomic_load(&tr->bytes_written);
}

int main(void)
{
    tap_plan(42);
    info = harness_plugin("emb-dynamic");
    ops = info->ops;
    const grm_plugin_info *oinfo = harness_plugin("opt-adam");
    adam_ops = oinfo->ops;
    if (adam_ops->create(harness_config(oinfo, NULL), &adam) != GRM_OK) {
        printf("Bail out! opt-adam: %s\n", harness_host()->last_error());
        return 1;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/grm-tiered-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        printf("Bail out! mkdtemp %s\n", dir);
        return 1;
    }
    grm_emb_table_spec spec = { "t", R, D, GRM_EMB_INIT_UNIFORM, 0.05, 3 };

    // ---- 1. backing 10x the cache: bitwise the all-in-memory store ----
    void *mem = make_store(&spec, NULL);
    // A row costs 32 + 8 (meta) + 64 (row) + 128 (Adam state) + 32 (two key slots) bytes;
    // 58000 bytes hold ~220 rows, under one batch: the floor of 2 batches does not apply
    // to a given size, so the cache is overfilled only by the batch in flight.
    const char *kv1[] = { kv_dir("a"), "cache_bytes=58000", "evict=lru", NULL };
    void *tier = make_store(&spec, kv1);
    int64_t mism = 0;
    int ok = train_both(mem, tier, 1, STEPS, 42, &mism);
    const grm_emb_stats sm = stats_of(mem), st = stats_of(tier);
    tap_ok(ok && mism == 0, "tiered (cache %lld rows) and in-memory stores: %d training steps "
           "of %d ids with Adam, every looked-up and evaluated row bitwise equal (%lld "
           "mismatches)", (long long)st.capacity, STEPS, B, (long long)mism);
    tap_ok(st.rows == sm.rows && st.rows >= 10 * st.capacity,
           "both hold %lld rows; the backing tier holds >= 10x the cache's %lld (%lld "
           "evictions)", (long long)st.rows, (long long)st.capacity,
           (long long)st.evictions);
    tap_ok(same_export(mem, tier, "after training"), "checkpoint tensors (ids, weight, "
           "Adam state, meta) of both tiers equal the in-memory store's bitwise");

    // ---- 2. checkpoint round trip into a fresh tiered store, then more training ----
    const char *kv2[] = { kv_dir("b"), "cache_bytes=30000", "evict=lfu", NULL };
    void *back = make_store(&spec, kv2);
    static const char *const names[] = { "t.ids", "t.weight", "t.opt_state", "t.meta",
                                         "t.counters" };
    grm_status lst = GRM_OK;
    for (int k = 4; k >= 0 && lst == GRM_OK; k--) {
        grm_named_tensor x = find_tensor(tier, names[k]);
        lst = ops->load(back, &x);
    }
    tap_ok(lst == GRM_OK && same_export(mem, back, "after load"),
           "a fresh tiered store (LFU, smaller cache) loads the checkpoint: its export "
           "equals the in-memory store's bitwise");
    mism = 0;
    ok = train_both(mem, back, STEPS + 1, 20, 43, &mism);
    tap_ok(ok && mism == 0 && same_export(mem, back, "resumed"),
           "20 more steps after the load: rows and export still bitwise equal (%lld "
           "mismatches)", (long long)mism);
    ops->destroy(back);

    // ---- 2b. the checkpoint a range of rows at a time (ABI 1.10) ----
    // tensor_rows in ranges of 333 rows equals tensors(); load_rows in uneven pieces, the
    // tensors in another order than they were written (so the file's records are patched
    // by each and finished by the opt_state's pieces), restores the same table.
    int same_rows = 1;
    for (int k = 0; k < 5; k++) {
        grm_named_tensor d;
        const grm_named_tensor w = find_tensor(tier, names[k]);
        char *buf = rows_of(tier, k, 333, &d);
        const size_t bytes = (size_t)w.tensor.shape[0] * grm_dtype_size(w.tensor.dtype)
                             * (size_t)(w.tensor.ndim > 1 ? w.tensor.shape[1] : 1);
        same_rows &= buf != NULL && strcmp(d.name, w.name) == 0
                     && d.tensor.shape[0] == w.tensor.shape[0]
                     && memcmp(buf, w.tensor.data, bytes) == 0;
        free(buf);
    }
    tap_ok(same_rows, "tensor_rows in ranges of 333 rows: the tiered table's five tensors "
           "equal tensors()' bitwise");
    // A save that asks for the weight, state and meta of a range in turn (ckpt-grm 2.0)
    // reads the range's file records once; one that asks for a tensor at a time reads them
    // once a tensor.
    {
        _Atomic int64_t *br = &((ed_store *)tier)->tables[0].tier.bytes_read;
        grm_named_tensor d;
        int64_t b0 = atomic_load(br);
        int okr = 1;
        for (int k = 1; k <= 3; k++) {
            char *buf = rows_of(tier, k, 333, &d);
            okr &= buf != NULL;
            free(buf);
        }
        const int64_t by_tensor = atomic_load(br) - b0;
        const int64_t n = d.tensor.shape[0];
        float *w = malloc((size_t)333 * D * sizeof(float)), *x = malloc((size_t)333 * 2 * D
                                                                          * sizeof(float));
        int64_t *m = malloc((size_t)333 * 3 * sizeof(int64_t));
        b0 = atomic_load(br);
        for (int64_t r0 = 0; r0 < n && okr; r0 += 333) {
            const int64_t c = n - r0 < 333 ? n - r0 : 333;
            okr &= ops->tensor_rows(tier, 1, NULL, r0, c, w) == GRM_OK
                   && ops->tensor_rows(tier, 2, NULL, r0, c, x) == GRM_OK
                   && ops->tensor_rows(tier, 3, NULL, r0, c, m) == GRM_OK;
        }
        const int64_t by_range = atomic_load(br) - b0;
        free(w);
        free(x);
        free(m);
        tap_ok(okr && by_range > 0 && by_tensor == 3 * by_range,
               "the weight, state and meta of each range in turn read the backing file once "
               "(%lld bytes); a tensor at a time, once a tensor (%lld bytes)",
               (long long)by_range, (long long)by_tensor);
        // the formats' save_rows ask for them so: ckpt-grm's chunks, and ckpt-safetensors'
        // ranges, each hashed and written at its offset (its header, first in the file,
        // is written again with their XXH64s)
        int64_t fread_[2] = { -1, -1 };
        for (int f = 0; f < 2; f++) {
            const grm_ckpt_ops *ko;
            void *kinst;
            char kpath[400];
            b0 = atomic_load(br);
            if (save_through(formats[f], tier, "save", &ko, &kinst, kpath, sizeof kpath)
                == GRM_OK)
                fread_[f] = atomic_load(br) - b0;
            ko->destroy(kinst);
            remove(kpath);
        }
        tap_ok(fread_[0] > 0 && fread_[0] <= by_range && fread_[1] == fread_[0],
               "a save through ckpt-grm and one through ckpt-safetensors each read the backing "
               "file once (%lld and %lld bytes)", (long long)fread_[0], (long long)fread_[1]);
    }
    const int order[5] = { 3, 4, 1, 0, 2 };     // meta, counters, weight, ids, opt_state
    void *piecewise = make_store(&spec, (const char *[]){ kv_dir("b"), "cache_bytes=30000",
                                                         NULL });
    lst = load_by_pieces(piecewise, tier, order);
    mism = 0;
    tap_ok(lst == GRM_OK && same_export(tier, piecewise, "load_rows")
           && train_both(tier, piecewise, STEPS + 1, 10, 44, &mism) && mism == 0
           && same_export(tier, piecewise, "load_rows, trained"),
           "a fresh tiered store restored by load_rows (pieces of 1000, 1, 777 rows, tensors "
           "out of order): its export equals the source's, and 10 more steps match (%lld "
           "mismatches)", (long long)mism);
    grm_named_tensor d0;
    ops->tensor_rows(tier, 1, &d0, 0, 0, NULL);
    int64_t one = 11;
    float row[D], g1[D] = { 0 };
    ops->lookup(tier, row, 0, &one, 1, GRM_EMB_INSERT);
    ops->update(tier, 0, &one, g1, 1, STEPS + 20);
    float *w1 = malloc(sizeof(float) * D * 4);
    tap_ok(ops->tensor_rows(tier, 1, NULL, 0, 4, w1) == GRM_EINTERNAL && has("moved past"),
           "rows asked for after an update moved the table past its description: "
           "GRM_EINTERNAL");
    free(w1);
    // pieces out of order, and tensors whose row counts disagree, are refused; a tiered
    // load that fails leaves an empty table, not a mix
    grm_named_tensor ids_t = find_tensor(tier, "t.ids"), w_t = find_tensor(tier, "t.weight");
    grm_named_tensor late = ids_t;
    late.tensor.shape[0] = 10;
    late.tensor.data = (int64_t *)ids_t.tensor.data + 5;
    const grm_status ost = ops->load_rows(piecewise, &late, 5, ids_t.tensor.shape[0]);
    const int ooo = ost == GRM_EFORMAT && has("pieces come in order");
    grm_named_tensor shortw = w_t;
    shortw.tensor.shape[0] -= 1;
    const grm_status l1 = ops->load_rows(piecewise, &ids_t, 0, ids_t.tensor.shape[0]);
    const grm_status l2 = ops->load_rows(piecewise, &shortw, 0, shortw.tensor.shape[0]);
    tap_ok(ooo && l1 == GRM_OK && l2 == GRM_EFORMAT && has("rows in")
           && stats_of(piecewise).rows == 0,
           "load_rows refuses a piece out of order, and a weight of %lld rows after %lld ids; "
           "the table is then empty (%lld rows)", (long long)shortw.tensor.shape[0],
           (long long)ids_t.tensor.shape[0], (long long)stats_of(piecewise).rows);
    ops->destroy(piecewise);

    // ---- 2c. a checkpoint of more than 64 segments ----
    // A load lays the checkpoint's records out in 1 MiB segments all at once; the segment
    // tables grew by one doubling from 64, so a table of more than 64 MiB (synthetic-
    // tiered-large's eval) wrote past them. 12,000 rows of dim 512 with Adam are ~6 KiB
    // records, 169 a segment: 72 segments.
    {
        enum { BIG_D = 512, BIG_N = 12000, BIG_B = 1000 };
        grm_emb_table_spec big = { "t", BIG_N, BIG_D, GRM_EMB_INIT_UNIFORM, 0.05, 5 };
        void *bmem = make_store(&big, NULL);
        void *btier = make_store(&big, (const char *[]){ kv_dir("big"), "cache_bytes=4M",
                                                        NULL });
        int64_t *bids = malloc(BIG_B * sizeof *bids);
        float *brow = malloc((size_t)BIG_B * BIG_D * sizeof *brow);
        float *brow2 = malloc((size_t)BIG_B * BIG_D * sizeof *brow2);
        grm_status bst = bids && brow && brow2 ? GRM_OK : GRM_ENOMEM;
        for (int64_t r0 = 0; r0 < BIG_N && bst == GRM_OK; r0 += BIG_B) {
            for (int64_t i = 0; i < BIG_B; i++) bids[i] = (r0 + i) * 31 + 7;
            bst = ops->lookup(bmem, brow, 0, bids, BIG_B, GRM_EMB_INSERT);
        }
        const int border[5] = { 0, 1, 2, 3, 4 };
        if (bst == GRM_OK) bst = load_by_pieces(btier, bmem, border);
        const ed_tier *bt = &((ed_store *)btier)->tables[0].tier;
        int same = bst == GRM_OK && same_export(bmem, btier, "72 segments");
        for (int64_t i = 0; i < BIG_B && same; i++) bids[i] = (BIG_N - 1 - 11 * i) * 31 + 7;
        same = same && ops->lookup(bmem, brow, 0, bids, BIG_B, 0) == GRM_OK
               && ops->lookup(btier, brow2, 0, bids, BIG_B, 0) == GRM_OK
               && memcmp(brow, brow2, (size_t)BIG_B * BIG_D * sizeof *brow) == 0;
        tap_ok(same && bt->nseg > 64 && bt->seg_cap >= bt->nseg
               && backing_bytes("big") > (64 << 20),
               "a checkpoint of %lld MiB loads into %lld segments (room for %lld): its "
               "export and 1000 of its rows equal the source's", (long long)(
               backing_bytes("big") >> 20), (long long)bt->nseg, (long long)bt->seg_cap);
        free(bids);
        free(brow);
        free(brow2);
        ops->destroy(btier);

        // The same table through each format's file (save_rows: a range of the four row
        // tensors in turn). Read back a range of each in turn (load_rows_interleaved, ABI
        // 1.13), each record is put together in memory and written once, and none is read
        // back; a tensor at a time (load_rows), the ids run past the restore's 32 MiB
        // window and the later tensors patch the records in the file.
        for (int f = 0; f < 2; f++) {
            const grm_ckpt_ops *kops;
            void *kinst;
            char kpath[400];
            const grm_status kst = save_through(formats[f], bmem, "big", &kops, &kinst, kpath,
                                                sizeof kpath);
            void *bi = make_store(&big, (const char *[]){ kv_dir("bi"), "cache_bytes=4M",
                                                         NULL });
            void *bt2 = make_store(&big, (const char *[]){ kv_dir("bt"), "cache_bytes=4M",
                                                          NULL });
            const int64_t brb = (int64_t)((ed_store *)bi)->tables[0].pools[0].rec_bytes;
            int64_t ird, iwr, trd, twr;
            const grm_status ist = kst == GRM_OK
                ? kops->load_rows_interleaved(kinst, kpath, store_piece, bi) : kst;
            tier_io(bi, &ird, &iwr);
            const grm_status tst = kst == GRM_OK
                ? kops->load_rows(kinst, kpath, store_piece, bt2) : kst;
            tier_io(bt2, &trd, &twr);
            tap_ok(ist == GRM_OK && same_export(bmem, bi, "interleaved") && ird == 0
                   && iwr == (int64_t)BIG_N * brb && tst == GRM_OK
                   && same_export(bmem, bt2, "tensor order") && trd > 0 && twr > iwr,
                   "restored from %s a range of each tensor in turn: export equal, every "
                   "record written once (%lld bytes = %d x %lld) and none read back (%lld); a "
                   "tensor at a time, export equal, the records patched in the file (%lld "
                   "bytes written, %lld read)", formats[f], (long long)iwr, BIG_N,
                   (long long)brb, (long long)ird, (long long)twr, (long long)trd);
            ops->destroy(bi);
            ops->destroy(bt2);
            kops->destroy(kinst);
            remove(kpath);
        }

        // Tensors running ahead of each other by more than the window (the ids by 7,000
        // rows): records the window let go are patched in the file, the rest put together
        // in it; every record is finished once.
        void *bl = make_store(&big, (const char *[]){ kv_dir("bl"), "cache_bytes=4M", NULL });
        const int lag[5] = { 0, 14, 3, 7, 0 };
        const grm_status lst2 = load_lagged(bl, bmem, 500, lag);
        int64_t lrd, lwr;
        tier_io(bl, &lrd, &lwr);
        tap_ok(lst2 == GRM_OK && same_export(bmem, bl, "lagged") && lrd > 0,
               "pieces of 500 rows, the ids 14 ranges ahead of the weight: export equal (%lld "
               "bytes patched in the file)", (long long)lrd);
        ops->destroy(bl);
        ops->destroy(bmem);
    }

    // ---- 3. the checksum catches a changed backing file ----
    // Every record after the 64-byte header overwritten; then evaluation lookups of every
    // id reach a row that lives only in the file.
    // The file is unlinked at creation: reach it through this process's descriptors.
    char prefix[400], path[64] = "";
    snprintf(prefix, sizeof prefix, "%s/a/t.tier.", dir);
    const int tfd = harness_fd_of(prefix);
    if (tfd >= 0) snprintf(path, sizeof path, "/proc/self/fd/%d", tfd);
    const int fd = path[0] != '\0' ? open(path, O_WRONLY) : -1;
    const off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
    int wrote = fd >= 0 && size > 64;
    for (off_t at = 64; wrote && at < size; at += 8) wrote = pwrite(fd, "garbage!", 8, at) == 8;
    if (fd >= 0) close(fd);
    int64_t all[512];
    float rows[512 * D];
    grm_status cst = GRM_OK;
    for (int64_t r0 = 0; r0 < R && cst == GRM_OK; r0 += 512) {
        for (int64_t i = 0; i < 512; i++) all[i] = (r0 + i) * 7919 + 11;
        cst = ops->lookup(tier, rows, 0, all, 512, 0);
    }
    tap_ok(wrote && cst == GRM_EFORMAT && has("checksum") && has("/a/t.tier."),
           "a record of the backing file changed under the run: the read fails with "
           "GRM_EFORMAT naming the file and the checksum");
    ops->destroy(tier);
    ops->destroy(mem);

    // ---- 4. prefetch of batch i+1 never evicts batch i ----
    // Cache of exactly B rows. Batch i fills it; batch i+1 is B other ids. Plain LRU
    // making room for i+1 would evict all of batch i before its update.
    char cb[64];
    {
        void *probe = make_store(&spec, (const char *[]){ kv_dir("c"), "cache_bytes=1M",
                                                          NULL });
        // rows per byte from the store itself: capacity = 1M / row cost
        const grm_emb_stats ps = stats_of(probe);
        snprintf(cb, sizeof cb, "cache_bytes=%lld",
                 (long long)(1000000 / ps.capacity * B + 1000000 / ps.capacity / 2));
        ops->destroy(probe);
    }
    void *pin = make_store(&spec, (const char *[]){ kv_dir("c"), cb, NULL });
    int64_t bi[B], bj[B];
    float out[B * D], grad[B * D];
    for (int64_t i = 0; i < B; i++) {
        bi[i] = 1000 + i;
        bj[i] = 5000 + i;
        for (int d = 0; d < D; d++) grad[i * D + d] = 0.25f;
    }
    const grm_emb_stats p0 = stats_of(pin);
    // Step 1 trains batch j (so its rows exist), step 2 batch i, which moves j's rows to
    // the file. Step 3: batch i again is in flight when batch j is prefetched.
    grm_status pst = ops->lookup(pin, out, 0, bj, B, GRM_EMB_INSERT);
    if (pst == GRM_OK) pst = ops->update(pin, 0, bj, grad, B, 1);
    if (pst == GRM_OK) pst = ops->lookup(pin, out, 0, bi, B, GRM_EMB_INSERT);
    if (pst == GRM_OK) pst = ops->update(pin, 0, bi, grad, B, 2);
    if (pst == GRM_OK) pst = ops->lookup(pin, out, 0, bi, B, GRM_EMB_INSERT);
    const grm_emb_stats p1 = stats_of(pin);
    if (pst == GRM_OK) pst = ops->prefetch(pin, 0, bj, B);
    const grm_emb_stats p2 = stats_of(pin);
    if (pst == GRM_OK) pst = ops->update(pin, 0, bi, grad, B, 3);
    const grm_emb_stats p3 = stats_of(pin);
    tap_ok(pst == GRM_OK && p0.capacity == B && p1.evictions == B
           && p2.evictions == p1.evictions && p3.evictions == p1.evictions,
           "cache of %lld rows = one batch: prefetching the next %d ids (in the file) while "
           "batch i is in flight evicts none of batch i (evictions %lld -> %lld -> %lld)",
           (long long)p0.capacity, B, (long long)p1.evictions, (long long)p2.evictions,
           (long long)p3.evictions);
    const int64_t miss0 = stats_of(pin).misses;
    if (pst == GRM_OK) pst = ops->lookup(pin, out, 0, bj, B, GRM_EMB_INSERT);
    const grm_emb_stats p4 = stats_of(pin);
    tap_ok(pst == GRM_OK && p4.misses == miss0 && p4.evictions == p1.evictions + B,
           "batch i+1's lookup finds every prefetched row (misses +%lld) and only then "
           "are batch i's %d rows moved out (evictions +%lld)",
           (long long)(p4.misses - miss0), B, (long long)(p4.evictions - p1.evictions));
    // The rows of batch i came back exact: 2 Adam updates, as in a store without a file.
    float again[B * D];
    pst = ops->lookup(pin, again, 0, bi, B, 0);
    void *ref = make_store(&spec, NULL);
    float want[B * D];
    ops->lookup(ref, want, 0, bj, B, GRM_EMB_INSERT);
    ops->update(ref, 0, bj, grad, B, 1);
    ops->lookup(ref, want, 0, bi, B, GRM_EMB_INSERT);
    ops->update(ref, 0, bi, grad, B, 2);
    ops->lookup(ref, want, 0, bi, B, GRM_EMB_INSERT);
    ops->update(ref, 0, bi, grad, B, 3);
    ops->lookup(ref, want, 0, bi, B, 0);
    tap_ok(pst == GRM_OK && memcmp(again, want, sizeof want) == 0,
           "batch i's rows, now only in the backing file, read back bitwise as the "
           "in-memory store's");
    // Ids in neither tier are left to the lookup: prefetch adds no row.
    int64_t fresh[4] = { 777001, 777002, 777003, 777004 };
    const int64_t rows0 = stats_of(pin).rows;
    pst = ops->prefetch(pin, 0, fresh, 4);
    tap_ok(pst == GRM_OK && stats_of(pin).rows == rows0,
           "prefetch of 4 ids in neither tier adds no row (rows %lld)", (long long)rows0);
    ops->destroy(ref);
    ops->destroy(pin);

    // ---- 4b. log-structured write-back: segments are cleaned, the file does not grow ----
    // 500 steps through a ~250-row cache move ~117,000 rows out, each to a new record in
    // the open segment; the table has under 6000 rows. Without cleaning the file would
    // hold every one (more than the bound below); with it, at most the live records, the
    // 65,536 garbage records cleaning waits for as many more, and two segments (the open
    // one and the one being cleaned, 4519 records of 232 bytes each).
    void *mem4 = make_store(&spec, NULL);
    void *log4 = make_store(&spec, (const char *[]){ kv_dir("g"), "cache_bytes=58000",
                                                     "evict=lru", NULL });
    const ed_table *t4 = &((const ed_store *)log4)->tables[0];
    int64_t mism4 = 0;
    int ok4 = train_both(mem4, log4, 1, 500, 99, &mism4);
    const grm_emb_stats s4 = stats_of(log4);
    const int64_t fbytes = backing_bytes("/g/t.tier.");
    const int64_t rec = 232, bound = (2 * s4.rows + 65536 + 2 * 4519) * rec + 64;
    tap_ok(ok4 && mism4 == 0 && same_export(mem4, log4, "after 500 steps")
               && s4.evictions * rec > bound && fbytes > 0 && fbytes <= bound
               && t4->tier.cleaned > 0,
           "%lld rows moved out over 500 steps (%lld mismatches, exports equal): the backing "
           "file holds %lld bytes, within %lld (%lld segments cleaned)",
           (long long)s4.evictions, (long long)mism4, (long long)fbytes, (long long)bound,
           (long long)t4->tier.cleaned);

    // ---- 4c. cleaning reads only what is live ----
    // Cleaning reads a segment and moves the records the index points at. Every garbage
    // record of log4's file is overwritten with junk; the store then trains on until more
    // segments are cleaned: were any garbage record checked or moved, the cleaning or a
    // later read would fail its checksum. Rows and export stay bitwise the in-memory
    // store's.
    // One step first: the export of 500 steps is kept until the rows change. The export
    // reads the rows that are only in the file in runs that span garbage: a checkpoint
    // taken after the junk reads across it and checks none of it.
    int64_t mism4c = 0, steps4c = 1;
    int ok4c = train_both(mem4, log4, 501, 1, 1000, &mism4c);
    const int64_t junked = junk_garbage(t4, "/g/t.tier.", rec);
    const int64_t cleaned0 = t4->tier.cleaned;
    ok4c = ok4c && junked > 0;
    const int export_ok = ok4c && mism4c == 0 && same_export(mem4, log4, "over junked garbage");
    while (ok4c && t4->tier.cleaned < cleaned0 + 4 && steps4c < 600) {
        ok4c = train_both(mem4, log4, 501 + steps4c, 1, 1000 + (uint64_t)steps4c, &mism4c);
        steps4c++;
    }
    tap_ok(ok4c && t4->tier.cleaned >= cleaned0 + 4 && mism4c == 0
               && same_export(mem4, log4, "after cleaning"),
           "%lld garbage records overwritten with junk, then %lld steps until 4 more segments "
           "were cleaned: no read failed, rows and export bitwise equal (%lld mismatches)",
           (long long)junked, (long long)steps4c, (long long)mism4c);
    tap_ok(export_ok, "an export over the junked garbage (the file's rows read in runs "
           "across it) equals the in-memory store's bitwise");
    ops->destroy(log4);
    ops->destroy(mem4);

    // ---- 4d. cleaning writes the cached rows from the cache ----
    // With a cache of ~1,000 rows and cleaning from the first garbage record on
    // (backing_garbage_min = 0: segments stay about half live), many live records of a
    // cleaned segment have their row in the cache, dirty or clean, and most of those rows
    // are not in the batch in flight.
    // Cleaning writes them from the cache and marks them clean, so a later eviction of
    // one that is not touched again writes nothing: were the bytes written the file's
    // older ones, its next fetch would read them, and rows and export would differ from
    // the in-memory store's. Trained until cleaning starts, then 300 steps more.
    void *mem5 = make_store(&spec, NULL);
    void *log5 = make_store(&spec, (const char *[]){ kv_dir("h"), "cache_bytes=265000",
                                                     "evict=lru", "backing_garbage_min=0",
                                                     NULL });
    const ed_table *t5 = &((const ed_store *)log5)->tables[0];
    int64_t mism5 = 0, steps5 = 0, after5 = 0;
    int ok5 = 1;
    while (ok5 && after5 < 300 && steps5 < 6000) {
        ok5 = train_both(mem5, log5, 1 + steps5, 1, 5000 + (uint64_t)steps5, &mism5);
        steps5++;
        after5 += t5->tier.cleaned > 0;
    }
    const int64_t cached5 = t5->tier.from_cache;
    tap_ok(ok5 && after5 == 300 && cached5 > 2 * B && mism5 == 0
               && same_export(mem5, log5, "after cleaning from the cache"),
           "%lld segments cleaned over %lld steps, %lld of their live records written from "
           "the cache (> 2 batches of %d): rows and export bitwise equal (%lld mismatches)",
           (long long)t5->tier.cleaned, (long long)steps5, (long long)cached5, B,
           (long long)mism5);
    ops->destroy(log5);
    ops->destroy(mem5);

    // ---- 5. cache_bytes = auto ----
    // Batches cycle over 4 disjoint sets of B ids, always in the same order: every
    // re-reference has LRU stack distance 4B - 1, so the smallest cache reaching 0.9 of
    // the re-references holds 4B rows (above the floor of 2 batches = 2B), and its budget
    // is the smallest whose 7/8 holds them.
    void *au = make_store(&spec, (const char *[]){ kv_dir("d"), "cache_bytes=auto",
                                                   "profile_batches=8", NULL });
    int64_t cyc[B];
    grm_status ast = GRM_OK;
    const grm_emb_stats a0 = stats_of(au);
    for (int64_t s = 0; s < 16 && ast == GRM_OK; s++) {
        for (int64_t i = 0; i < B; i++) cyc[i] = (s % 4) * 100000 + i;
        ast = ops->lookup(au, out, 0, cyc, B, GRM_EMB_INSERT);
        if (ast == GRM_OK) ast = ops->update(au, 0, cyc, grad, B, s + 1);
    }
    const grm_emb_stats a1 = stats_of(au);
    tap_ok(ast == GRM_OK && a0.capacity == 0 && a1.capacity == budget_for(4 * B)
               && a1.evictions == 0,
           "auto: a stream cycling over 4 batches of %d ids (stack distance %d) gets a cache "
           "of %lld rows (want %d rows after the cut to 7/8) after 8 profiled batches, and "
           "evicts nothing (%lld)", B, 4 * B - 1, (long long)a1.capacity, 4 * B,
           (long long)a1.evictions);
    ops->destroy(au);

    // Reuse longer than the profiled window: 12 batches a cycle (stack distance 12B - 1),
    // 4 batches profiled. The window sees no re-reference (the floor, 2B); the sample of
    // the rest of the run (SHARDS, a quarter of these ids) sees the cycle, and the cache
    // grows to hold it (the estimate within 10%) by the re-choice after 64 batches.
    au = make_store(&spec, (const char *[]){ kv_dir("d"), "cache_bytes=auto",
                                             "profile_batches=4", NULL });
    int64_t cap_window = -1;
    for (int64_t s = 0; s < 64 && ast == GRM_OK; s++) {
        for (int64_t i = 0; i < B; i++) cyc[i] = (s % 12) * 100000 + i;
        ast = ops->lookup(au, out, 0, cyc, B, GRM_EMB_INSERT);
        if (ast == GRM_OK) ast = ops->update(au, 0, cyc, grad, B, s + 1);
        if (s == 4) cap_window = stats_of(au).capacity;
    }
    const grm_emb_stats a3 = stats_of(au);
    tap_ok(ast == GRM_OK && cap_window == budget_for(2 * B) && a3.capacity >= 12 * B * 9 / 10 &&
               a3.capacity <= 12 * B * 11 / 10,
           "auto: reuse at stack distance %d, past the 4 profiled batches: the window gives "
           "the floor (%lld rows), the run's sample grows the cache to %lld rows (want %d "
           "+- 10%%)", 12 * B - 1, (long long)cap_window, (long long)a3.capacity, 12 * B);
    ops->destroy(au);

    // More ids than the sample tracks (16384): its rate halves, and the run goes on with
    // the floor (no id is ever reused).
    au = make_store(&spec, (const char *[]){ kv_dir("d"), "cache_bytes=auto",
                                             "profile_batches=4", NULL });
    const uint64_t th0 = 0;
    uint64_t th1 = th0;
    for (int64_t s = 0; s < 320 && ast == GRM_OK; s++) {
        for (int64_t i = 0; i < B; i++) cyc[i] = s * 100000 + i;
        ast = ops->lookup(au, out, 0, cyc, B, GRM_EMB_INSERT);
        if (ast == GRM_OK) ast = ops->update(au, 0, cyc, grad, B, s + 1);
        if (s == 0) th1 = ((ed_store *)au)->tables[0].tier.sh.thresh;
    }
    const ed_shards *sh = &((ed_store *)au)->tables[0].tier.sh;
    const grm_emb_stats a4 = stats_of(au);
    tap_ok(ast == GRM_OK && th1 == (UINT64_C(1) << 32) / 4 && sh->thresh == th1 / 2 &&
               atomic_load(&sh->last.live) <= 16384 && a4.capacity == budget_for(2 * B) &&
               a4.rows == 320 * B,
           "auto: 81920 ids never reused, sampled at 1/4 then 1/8 (threshold %llu -> %llu) "
           "once 16384 were tracked (now %lld); cache stays at the floor (%lld rows), all "
           "%lld rows kept", (unsigned long long)th1, (unsigned long long)sh->thresh,
           (long long)atomic_load(&sh->last.live), (long long)a4.capacity,
           (long long)a4.rows);
    ops->destroy(au);

    au = make_store(&spec, (const char *[]){ kv_dir("d"), "cache_bytes=auto",
                                             "profile_batches=4", NULL });
    for (int64_t s = 0; s < 8 && ast == GRM_OK; s++) {
        for (int64_t i = 0; i < B; i++) cyc[i] = s * 100000 + i;     // never reused
        ast = ops->lookup(au, out, 0, cyc, B, GRM_EMB_INSERT);
        if (ast == GRM_OK) ast = ops->update(au, 0, cyc, grad, B, s + 1);
    }
    const grm_emb_stats a2 = stats_of(au);
    tap_ok(ast == GRM_OK && a2.capacity == budget_for(2 * B) && a2.rows == 8 * B,
           "auto: a stream that never reuses an id gets the floor, two batches' working set "
           "(%lld rows, want %d after the cut to 7/8); all %lld rows kept",
           (long long)a2.capacity, 2 * B, (long long)a2.rows);
    ops->destroy(au);

    // ---- 6. configuration errors ----
    grm_status est;
    void *bad = try_store(&spec, &est, (const char *[]){ "cache_bytes=1M", NULL });
    tap_ok(bad == NULL && est == GRM_EINVAL && has("backing"),
           "cache_bytes without backing: GRM_EINVAL naming backing");
    bad = try_store(&spec, &est, (const char *[]){ kv_dir("e"), NULL });
    tap_ok(bad == NULL && est == GRM_EINVAL && has("cache_bytes"),
           "backing without cache_bytes: GRM_EINVAL naming cache_bytes");
    bad = try_store(&spec, &est, (const char *[]){ kv_dir("e"), "cache_bytes=lots", NULL });
    tap_ok(bad == NULL && est == GRM_EINVAL && has("'lots'") && has("64M"),
           "cache_bytes = lots: GRM_EINVAL quoting it and showing the form");
    bad = try_store(&spec, &est, (const char *[]){ "backing=/nonexistent/grm", "cache_bytes=1M",
                                                   NULL });
    tap_ok(bad == NULL && est == GRM_EIO && has("/nonexistent/grm/t.tier."),
           "backing in a missing directory: GRM_EIO naming the file");
    bad = try_store(&spec, &est, (const char *[]){ kv_dir("e"), "cache_bytes=1M",
                                                   "fp16_cold=true", NULL });
    tap_ok(bad == NULL && est == GRM_EINVAL && has("fp16_cold"),
           "backing with fp16_cold: GRM_EINVAL (the tiered mode keeps rows exact)");
    bad = try_store(&spec, &est, (const char *[]){ kv_dir("e"), "cache_bytes=100", NULL });
    tap_ok(bad == NULL && est == GRM_EINVAL && has("holds no row"),
           "cache_bytes smaller than one row: GRM_EINVAL");

    // ---- 7. backing_io: the prefetch's reads through io_uring or pread, the same rows ----
    // Three stores on the same batches, each step prefetching the next batch first: in
    // memory, tiered with pread, tiered with io_uring (auto: when the kernel allows a ring).
    {
        void *m7 = make_store(&spec, NULL);
        void *pr = make_store(&spec, (const char *[]){ kv_dir("p"), "cache_bytes=58000",
                                                       "evict=lru", "backing_io=pread", NULL });
        void *ur = make_store(&spec, (const char *[]){ kv_dir("u"), "cache_bytes=58000",
                                                       "evict=lru", "backing_io=auto", NULL });
        void *st3[3] = { m7, pr, ur };
        int64_t ids7[2][B], n7[2];
        float r7[3][B * D], g7[B * D];
        uint64_t rng = 77;
        n7[0] = batch_ids(ids7[0], B, &rng);
        int64_t bad7 = 0;
        grm_status s7 = GRM_OK;
        for (int64_t step = 1; step <= 40 && s7 == GRM_OK; step++) {
            const int cur = (int)(step - 1) % 2, nxt = 1 - cur;
            n7[nxt] = batch_ids(ids7[nxt], B, &rng);
            // (not after the last step: a prefetch stamps its rows' last use, which the
            // in-memory store's export would not show). Each id passed twice in a row: a
            // repeat inside one chunk must not wait for its own first occurrence's read.
            int64_t twice[2 * B];
            for (int64_t i = 0; i < n7[nxt]; i++) twice[2 * i] = twice[2 * i + 1] = ids7[nxt][i];
            for (int k = 1; k < 3 && s7 == GRM_OK && step < 40; k++)
                s7 = ops->prefetch(st3[k], 0, twice, 2 * n7[nxt]);
            for (int k = 0; k < 3 && s7 == GRM_OK; k++)
                s7 = ops->lookup(st3[k], r7[k], 0, ids7[cur], n7[cur], GRM_EMB_INSERT);
            for (int k = 1; k < 3; k++)
                bad7 += memcmp(r7[0], r7[k], sizeof(float) * (size_t)(n7[cur] * D)) != 0;
            for (int64_t i = 0; i < n7[cur] * D; i++)
                g7[i] = (float)(grm_rng_uniform01(&rng) - 0.5);
            for (int k = 0; k < 3 && s7 == GRM_OK; k++)
                s7 = ops->update(st3[k], 0, ids7[cur], g7, n7[cur], step);
        }
        const ed_tier *tp = &((ed_store *)pr)->tables[0].tier;
        const ed_tier *tu = &((ed_store *)ur)->tables[0].tier;
        tap_ok(s7 == GRM_OK && bad7 == 0 && same_export(m7, pr, "pread")
                   && same_export(m7, ur, "io_uring") && atomic_load(&tp->prefetched) > 0
                   && atomic_load(&tu->prefetched) > 0 && atomic_load(&tp->ring_reads) == 0,
               "40 steps, each prefetching the next batch (every id twice): backing_io = pread "
               "and auto give the in-memory rows and export bitwise (%lld and %lld rows prefetched)",
               (long long)atomic_load(&tp->prefetched), (long long)atomic_load(&tu->prefetched));
        if (tu->ring == NULL)
            tap_skip("io_uring unavailable here (no liburing at build time, or the kernel "
                     "or sandbox refuses a ring)", "backing_io = auto read through io_uring");
        else
            tap_ok(atomic_load(&tu->ring_reads) > atomic_load(&tu->prefetched) / 2,
                   "backing_io = auto read %lld of its %lld prefetched rows through io_uring",
                   (long long)atomic_load(&tu->ring_reads),
                   (long long)atomic_load(&tu->prefetched));
        tap_ok(ops->prefetch(m7, 0, NULL, 0) == GRM_ENOTSUP
                   && ops->prefetch(pr, 0, NULL, 0) == GRM_OK,
               "prefetch of 0 ids answers whether a table has a slower tier: GRM_ENOTSUP all "
               "in memory, GRM_OK tiered (the host then draws the negatives ahead)");
        for (int k = 0; k < 3; k++) ops->destroy(st3[k]);
    }
    // ---- 8. trim (ABI 1.12): the data thread's eviction keeps the batches in flight ----
    // A cache of 2B rows; steps 1-4 train 4 batches of B fresh ids. Step 5 looks up batch
    // X (fresh ids), the trainer's eviction keeping X; then batch Y (step 1's ids, now in
    // the file) is prefetched, as the data thread does during step 5: 2.75B rows are
    // cached, over the budget. trim(keep_from = 5) must move out rows, but none of X (its
    // update is still to come) nor Y (its lookup is next). The control trims a twin store
    // with keep_from = 6, which leaves X and Y unprotected: LRU then takes the oldest
    // stamps first and, past batch 4's rows, some of Y's.
    {
        char cb8[64];
        void *probe = make_store(&spec, (const char *[]){ kv_dir("c"), "cache_bytes=1M",
                                                          NULL });
        const int64_t per = 1000000 / stats_of(probe).capacity;
        ops->destroy(probe);
        snprintf(cb8, sizeof cb8, "cache_bytes=%lld", (long long)(per * 2 * B + per / 2));
        void *m8 = make_store(&spec, NULL);
        void *k8 = make_store(&spec, (const char *[]){ kv_dir("k"), cb8, "evict=lru", NULL });
        void *c8 = make_store(&spec, (const char *[]){ kv_dir("l"), cb8, "evict=lru", NULL });
        void *st8[3] = { m8, k8, c8 };
        int64_t b8[6][B];
        float o8[B * D], g8[B * D];
        for (int64_t i = 0; i < B; i++)
            for (int d = 0; d < D; d++) g8[i * D + d] = 0.125f * (float)(1 + (i + d) % 5);
        for (int b = 0; b < 5; b++)
            for (int64_t i = 0; i < B; i++) b8[b][i] = 20000 + b * 1000 + i;
        memcpy(b8[5], b8[0], sizeof b8[0]);     // Y: step 1's ids
        grm_status s8 = GRM_OK;
        for (int64_t step = 1; step <= 4; step++)
            for (int k = 0; k < 3 && s8 == GRM_OK; k++) {
                s8 = ops->lookup(st8[k], o8, 0, b8[step - 1], B, GRM_EMB_INSERT);
                if (s8 == GRM_OK) s8 = ops->update(st8[k], 0, b8[step - 1], g8, B, step);
            }
        for (int k = 0; k < 3 && s8 == GRM_OK; k++)
            s8 = ops->lookup(st8[k], o8, 0, b8[4], B, GRM_EMB_INSERT);      // X, step 5
        for (int k = 1; k < 3 && s8 == GRM_OK; k++) s8 = ops->prefetch(st8[k], 0, b8[5], B);
        const ed_table *tk = &((ed_store *)k8)->tables[0], *tc = &((ed_store *)c8)->tables[0];
        const grm_emb_stats before = stats_of(k8);
        const int64_t over = atomic_load(&tk->keys.live), cap8 = before.capacity;
        if (s8 == GRM_OK) s8 = ops->trim(k8, 0, 5);
        if (s8 == GRM_OK) s8 = ops->trim(c8, 0, 6);
        const grm_emb_stats after = stats_of(k8);
        const int64_t lk = atomic_load(&tk->keys.live), lc = atomic_load(&tc->keys.live);
        const int64_t fk = atomic_load(&tk->tier.fetches), fc = atomic_load(&tc->tier.fetches);
        for (int k = 0; k < 3 && s8 == GRM_OK; k++)
            s8 = ops->update(st8[k], 0, b8[4], g8, B, 5);
        const int64_t xk = atomic_load(&tk->tier.fetches) - fk;
        const int64_t xc = atomic_load(&tc->tier.fetches) - fc;
        const int64_t mk = stats_of(k8).misses, mc = stats_of(c8).misses;
        for (int k = 0; k < 3 && s8 == GRM_OK; k++) {
            s8 = ops->lookup(st8[k], o8, 0, b8[5], B, GRM_EMB_INSERT);      // Y, step 6
            if (s8 == GRM_OK) s8 = ops->update(st8[k], 0, b8[5], g8, B, 6);
        }
        const int64_t yk = stats_of(k8).misses - mk, yc = stats_of(c8).misses - mc;
        tap_ok(s8 == GRM_OK && cap8 == 2 * B && over > cap8
                   && after.evictions > before.evictions && lk < over
                   && atomic_load(&tk->tier.trimmed) == after.evictions - before.evictions
                   && xk == 0 && yk == 0,
               "trim(keep_from = 5) of a cache of %lld rows holding %lld: %lld moved out, none "
               "of the batch in flight (its update fetched %lld) nor of the one prefetched "
               "(its lookup missed %lld)", (long long)cap8, (long long)over,
               (long long)(after.evictions - before.evictions), (long long)xk, (long long)yk);
        tap_ok(s8 == GRM_OK && lc < lk && xc + yc > 0,
               "control: trim(keep_from = 6) of the twin store moves out more (%lld rows "
               "left cached, against %lld), rows of those batches included (the update "
               "fetched %lld, the lookup missed %lld)", (long long)lc, (long long)lk,
               (long long)xc, (long long)yc);
        tap_ok(s8 == GRM_OK && same_export(m8, k8, "trimmed") && same_export(m8, c8, "control"),
               "after the trims, both tiered stores export bitwise the in-memory store's "
               "rows, state and metadata");
        // A trim between a checkpoint's description and its rows moves rows between the
        // tiers and changes none: the bounded save goes on (tensor_rows, ABI 1.10).
        grm_named_tensor d8;
        const int64_t v8 = atomic_load(&tk->version);
        int ok8 = ops->tensor_rows(k8, 1, &d8, 0, 0, NULL) == GRM_OK;
        const int64_t n8 = d8.tensor.shape[0];
        float *w8 = malloc((size_t)(n8 * D) * sizeof *w8);
        const int64_t ev0 = stats_of(k8).evictions;
        ok8 = ok8 && ops->trim(k8, 0, INT64_MAX) == GRM_OK && stats_of(k8).evictions > ev0
              && atomic_load(&tk->version) == v8
              && ops->tensor_rows(k8, 1, NULL, 0, n8, w8) == GRM_OK;
        const grm_named_tensor mw = find_tensor(m8, "t.weight");
        tap_ok(ok8 && mw.tensor.shape[0] == n8
                   && memcmp(mw.tensor.data, w8, (size_t)(n8 * D) * sizeof *w8) == 0,
               "a trim between tensor_rows' description and its rows (%lld rows moved out) "
               "leaves the save going on, its rows bitwise the in-memory store's",
               (long long)(stats_of(k8).evictions - ev0));
        free(w8);
        for (int k = 0; k < 3; k++) ops->destroy(st8[k]);
    }

    bad = try_store(&spec, &est, (const char *[]){ kv_dir("e"), "cache_bytes=1M",
                                                   "backing_io=mmap", NULL });
    tap_ok(bad == NULL && est == GRM_EINVAL && has("backing_io") && has("io_uring"),
           "backing_io = mmap: GRM_EINVAL naming the key and its values");

    adam_ops->destroy(adam);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) tap_diag("could not remove %s", dir);
    return tap_failed_ ? 1 : 0;
}
