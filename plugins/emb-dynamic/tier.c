/* plugins/emb-dynamic/tier.c - the backing tier of emb-dynamic's tiered mode (issue 20):
 * the key structure and record pools of the other files are the cache tier in RAM, and
 * every row evicted from it goes, with its optimizer state and metadata, to a file-backed
 * row store (seed 003 §2.1: a cache in fast memory over the whole table in a larger, slower
 * tier, LRU/LFU choosing what stays). A later access reads it back exactly (pread), so
 * training is bitwise that of the all-in-memory table.
 *
 * File <backing>/<table>.tier.XXXXXX (mkostemp, unlinked at once): a 64-byte header, then
 * fixed-size records numbered from 0, each laid out as the cache record (ed_meta | row f32
 * [D] padded to 8 | state f32 [S*D]), with ed_meta.flags holding the XXH3-64 of the record
 * (that field taken as 0). An in-memory key structure (table.c's, 16 bytes a slot) maps id
 * -> record number. The file is scratch: a checkpoint holds every row of both tiers, and
 * load() rewrites it.
 *
 * Write-back is log-structured (Rosenblum and Ousterhout, "The Design and Implementation
 * of a Log-Structured File System", SOSP 1991): a dirty row leaving the cache always goes
 * to a new record in the open segment (1 MiB of records), and its old record dies.
 * Evictions pick rows by LRU/LFU, so their old records lie all over the file, and writing
 * each in place cost one pwrite (and the file system's block lookup) a row: 3 us a miss,
 * most of a tiered step. Appended, they go out 1 MiB to a pwrite. When the dead records
 * outnumber the live ones (and backing_garbage_min), the closed segments with the fewest
 * live records are cleaned (the paper's cleaner with its greedy policy): their live
 * records move to the open segment (from the cache when the row is there) and they become
 * free, to be reused before the file grows. Rows evicted together leave and come back
 * together, so most segments die almost whole and cleaning moves little; a compaction of
 * the whole file, which this replaced, copied every live record each time.
 *
 * Reads are preads. A read-only shared mapping of the file made them ~10% faster in the
 * synthetic-tiered run's loop, but every page a process maps counts in its RSS (fault-around
 * maps 16 of them a fault), and the run's peak RSS went from 344 to 470 MB, past the
 * all-in-memory run's 374: letting the pages go every cache budget of reads (MADV_DONTNEED)
 * took the gain back and still left 410-450 MB. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>
#ifdef HAVE_LIBURING
#include <liburing.h>
#endif
#ifdef HAVE_VALGRIND_MEMCHECK_H
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(p, n) ((void)(p), (void)(n))
#endif

#include "emb_dynamic.h"

#define ED_TIER_MAGIC "GRMTIER1"
#define ED_TIER_VERSION 1
#define ED_TIER_HEADER 64

/* The header: magic, version, D, S, record bytes, table name hash, its own XXH3-64. */
typedef struct ed_tier_header {
    char magic[8];
    uint32_t version;
    uint32_t dim;
    uint32_t S;
    uint32_t pad;
    uint64_t rec_bytes;
    uint64_t name_hash;
    uint64_t sum;
    char reserved[ED_TIER_HEADER - 48];
} ed_tier_header;

static off_t ed_tier_offset(const ed_table *t, int64_t index)
{
    return (off_t)ED_TIER_HEADER + (off_t)index * (off_t)t->pools[0].rec_bytes;
}

/* XXH3-64 of a record with its flags (checksum) field taken as 0. */
static uint64_t ed_tier_sum(const ed_table *t, char *rec)
{
    ed_meta *m = ed_rec_meta(rec);
    const int64_t flags = m->flags;
    m->flags = 0;
    const uint64_t h = XXH3_64bits(rec, t->pools[0].rec_bytes);
    m->flags = flags;
    return h;
}

/* A finished record's checksum into its flags. */
void ed_tier_seal(const ed_table *t, char *rec)
{
    ed_rec_meta(rec)->flags = (int64_t)ed_tier_sum(t, rec);
}

static grm_status ed_tier_io_error(const ed_store *s, const ed_table *t, const char *what,
                                   int64_t index, ssize_t got, size_t want)
{
    const int e = errno;
    const int full = got < 0 && (e == ENOSPC || e == EDQUOT || e == EFBIG);
    return s->host->errorf(GRM_EIO, "emb-dynamic: %s: %s record %lld: %s; %s backing = %s%s",
                           t->tier.path, what, (long long)index,
                           got < 0 ? strerror(e) : got < (ssize_t)want ? "short transfer"
                           : "unknown error",
                           full ? "free space on the disk of (or move)" : "check the disk of",
                           s->cfg.backing,
                           full ? ", then resume from the last checkpoint: the backing file "
                                  "is scratch, every row is in the checkpoints" : "");
}

/* The checksum of a record read from file record `index`, and its bytes counted. */
static grm_status ed_tier_check(const ed_store *s, ed_table *t, char *rec, int64_t index)
{
    ed_meta *m = ed_rec_meta(rec);
    if (ed_tier_sum(t, rec) != (uint64_t)m->flags)
        return s->host->errorf(GRM_EFORMAT, "emb-dynamic: %s: record %lld (id %lld) fails "
                               "its checksum; the backing file was changed under the run: "
                               "resume from the last checkpoint", t->tier.path,
                               (long long)index, (long long)m->id);
    atomic_fetch_add_explicit(&t->tier.bytes_read, (int64_t)t->pools[0].rec_bytes,
                              memory_order_relaxed);
    return GRM_OK;
}

static grm_status ed_tier_pread(const ed_store *s, ed_table *t, char *rec, int64_t index)
{
    const size_t n = t->pools[0].rec_bytes;
    const ssize_t got = pread(t->tier.fd, rec, n, ed_tier_offset(t, index));
    if (got != (ssize_t)n) return ed_tier_io_error(s, t, "reading", index, got, n);
    return ed_tier_check(s, t, rec, index);
}

/* ---- open and close ---- */

/* A new backing file <backing>/<table>.tier.XXXXXX with its header, unlinked at once: its
 * descriptor into *fd and its name into path [cap]. */
static grm_status ed_tier_create(const ed_store *s, const ed_table *t, char *path, size_t cap,
                                 int *fd)
{
    snprintf(path, cap, "%s/%s.tier.XXXXXX", s->cfg.backing, t->name);
    mkdir(s->cfg.backing, 0700);   // one level, like the checkpoint directory; may exist
    // The file is this process's scratch, never read across runs (checkpoints are): it is
    // unlinked at once, so nothing is left behind even by kill -9, and processes (ranks)
    // sharing the directory never meet.
    *fd = mkostemp(path, O_CLOEXEC);
    if (*fd < 0)
        return s->host->errorf(GRM_EIO, "emb-dynamic: backing = %s: cannot create %s: %s; "
                               "give an existing, writable directory", s->cfg.backing, path,
                               strerror(errno));
    unlink(path);
    // No access times: every read of the file would check whether to update one (about 3%
    // of the prefetching thread's time). Ours alone, so the kernel allows it; if not,
    // nothing is lost.
    const int fl = fcntl(*fd, F_GETFL);
    if (fl >= 0) (void)fcntl(*fd, F_SETFL, fl | O_NOATIME);
    ed_tier_header h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, ED_TIER_MAGIC, 8);
    h.version = ED_TIER_VERSION;
    h.dim = (uint32_t)t->dim;
    h.S = (uint32_t)s->S;
    h.rec_bytes = t->pools[0].rec_bytes;
    h.name_hash = t->name_hash;
    h.sum = XXH3_64bits(&h, offsetof(ed_tier_header, sum));
    if (pwrite(*fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
        const grm_status st = s->host->errorf(GRM_EIO, "emb-dynamic: %s: writing the header: "
                                              "%s", path, strerror(errno));
        close(*fd);
        *fd = -1;
        return st;
    }
    return GRM_OK;
}

/* The prefetch's ring (backing_io): one io_uring a table, used by the one thread that
 * prefetches. A read of a record in the page cache completes inside the submission, so a
 * chunk's misses cost one system call instead of one each (pread); on a disk they are in
 * flight together. A kernel or sandbox that refuses io_uring (a seccomp profile, the
 * kernel.io_uring_disabled sysctl) leaves auto on pread and makes io_uring an error. */
static grm_status ed_tier_ring_open(const ed_store *s, ed_table *t)
{
    ed_tier *tr = &t->tier;
    tr->ring = NULL;
    if (s->cfg.backing_io == ED_IO_PREAD) return GRM_OK;
#ifdef HAVE_LIBURING
    struct io_uring *ring = malloc(sizeof *ring);
    if (ring == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory",
                               t->name);
    const int rc = io_uring_queue_init(ED_TIER_RING, ring, 0);
    if (rc == 0) {
        tr->ring = ring;
        return GRM_OK;
    }
    free(ring);
    if (s->cfg.backing_io == ED_IO_URING)
        return s->host->errorf(GRM_EIO, "emb-dynamic: table '%s': backing_io = io_uring, but "
                               "the kernel refused a ring: %s; set backing_io = pread (or "
                               "auto)", t->name, strerror(-rc));
    s->host->log(GRM_LOG_INFO, "emb-dynamic", "table '%s': io_uring unavailable (%s): the "
                 "prefetch reads the backing file with pread", t->name, strerror(-rc));
    return GRM_OK;
#else
    if (s->cfg.backing_io == ED_IO_URING)
        return s->host->errorf(GRM_EINVAL, "emb-dynamic: backing_io = io_uring, but this build "
                               "has no liburing: install Debian package liburing-dev and "
                               "rebuild, or set backing_io = pread (or auto)");
    return GRM_OK;
#endif
}

grm_status ed_tier_open(const ed_store *s, ed_table *t)
{
    ed_tier *tr = &t->tier;
    const size_t len = strlen(s->cfg.backing) + strlen(t->name) + 16;
    grm_status st;
    tr->fd = -1;
    if (pthread_mutex_init(&tr->plock, NULL) != 0)
        return s->host->errorf(GRM_EINTERNAL, "emb-dynamic: table '%s': cannot create the "
                               "profile's lock", t->name);
    tr->plock_ready = 1;
    if (strchr(t->name, '/') != NULL)
        return s->host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': a tiered table's name "
                               "names its backing file and may not hold '/'", t->name);
    tr->path = malloc(len);
    if (tr->path == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory",
                               t->name);
    if ((st = ed_tier_create(s, t, tr->path, len, &tr->fd)) != GRM_OK) return st;
    if ((st = ed_keys_init(s, &tr->index, ed_keys_slots_for(0, 1), 1)) != GRM_OK) return st;
    tr->garbage = 0;
    // Segments of 1 MiB of records; the open one is staged in wbuf.
    const size_t rb = t->pools[0].rec_bytes;
    tr->wcap = rb >= (1u << 20) ? 1 : (int64_t)((1u << 20) / rb);
    tr->wbuf = malloc((size_t)tr->wcap * rb);
    tr->wseg = -1;
    tr->wn = tr->wdone = 0;
    tr->nseg = tr->nfree = 0;
    if (tr->wbuf == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory for the "
                               "write-back buffer", t->name);
    return ed_tier_ring_open(s, t);
}

void ed_tier_close(const ed_store *s, ed_table *t)
{
    ed_tier *tr = &t->tier;
    if (tr->fd >= 0) close(tr->fd);     // unlinked at open: its blocks go now
    tr->fd = -1;
    if (tr->index.slots != NULL) ed_keys_fini(s, &tr->index);
    free(tr->path);
    tr->path = NULL;
    ed_profile_fini(s, t);
    free(tr->wbuf);
    tr->wbuf = NULL;
    free(tr->seg_live);
    free(tr->seg_free);
    tr->seg_live = NULL;
    tr->seg_free = NULL;
    tr->seg_cap = 0;
#ifdef HAVE_LIBURING
    if (tr->ring != NULL) io_uring_queue_exit(tr->ring);
#endif
    free(tr->ring);
    tr->ring = NULL;
}

/* ---- fetch and write-back ---- */

/* A record read into the cache: clean (equal to its file copy), and counted. */
static void ed_tier_took(ed_tier *tr, char *rec)
{
    ed_rec_meta(rec)->flags = 0;
    atomic_fetch_add_explicit(&tr->fetches, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&tr->file_only, 1, memory_order_relaxed);
}

/* Fill the fresh cache record ref of id: from the backing file when the id is there, else
 * initialized (ed_record_fill). Runs inside batches: the index only changes under the
 * table's write lock. */
grm_status ed_tier_fetch(const ed_store *s, ed_table *t, int64_t ref, int64_t id, int64_t now)
{
    const ed_slot *sl = ed_keys_find(&t->tier.index, id, ed_hash(id));
    if (sl == NULL) {
        ed_record_fill(s, t, ref, id, now);
        return GRM_OK;
    }
    const int64_t index = atomic_load_explicit(&sl->ref, memory_order_relaxed);
    char *rec = ed_record(t, ref);
    const grm_status st = ed_tier_pread(s, t, rec, index);
    if (st != GRM_OK) {
        ed_record_fill(s, t, ref, id, now);     // a defined record; the batch fails
        return st;
    }
    ed_tier_took(&t->tier, rec);
    return GRM_OK;
}

/* Read the file records index [n] into the cache records refs [n] through the ring, in
 * one submission: res[i] gets record i's bytes read or -errno. 0 when there is no ring
 * (or n <= 1, where a pread costs no more), and nothing was read. */
static int ed_tier_ring_read(ed_table *t, const int64_t *refs, const int64_t *index,
                             int64_t n, int *res)
{
#ifdef HAVE_LIBURING
    ed_tier *tr = &t->tier;
    if (tr->ring == NULL || n <= 1) return 0;
    struct io_uring *ring = tr->ring;
    const unsigned rb = (unsigned)t->pools[0].rec_bytes;
    for (int64_t i = 0; i < n; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(ring);  // n <= the ring's entries
        io_uring_prep_read(sqe, tr->fd, ed_record(t, refs[i]), rb,
                           (uint64_t)ed_tier_offset(t, index[i]));
        io_uring_sqe_set_data(sqe, (void *)(uintptr_t)i);
        res[i] = -ECANCELED;
    }
    int rc = io_uring_submit_and_wait(ring, (unsigned)n);
    int64_t seen = 0;
    while (seen < n) {
        struct io_uring_cqe *cqe;
        if (io_uring_peek_cqe(ring, &cqe) != 0) {
            if (rc < 0) break;                  // the submission failed: nothing more comes
            if ((rc = io_uring_wait_cqe(ring, &cqe)) != 0) break;
        }
        const uintptr_t i = (uintptr_t)io_uring_cqe_get_data(cqe);
        res[i] = cqe->res;
        // the kernel wrote these bytes; memcheck sees only syscalls' buffers (a no-op
        // outside valgrind)
        if (cqe->res > 0) VALGRIND_MAKE_MEM_DEFINED(ed_record(t, refs[i]), (size_t)cqe->res);
        io_uring_cqe_seen(ring, cqe);
        seen++;
    }
    atomic_fetch_add_explicit(&tr->ring_reads, seen, memory_order_relaxed);
    return 1;
#else
    (void)t, (void)refs, (void)index, (void)n, (void)res;
    return 0;
#endif
}

/* The file records index [n] of ids [n] into the fresh cache records refs [n]
 * (n <= ED_TIER_RING), each checked as ed_tier_fetch checks one: through the ring in one
 * submission when there is one, else a pread each. On an error every record is still
 * defined (the ones not read are initialized), so the caller can publish them all and fail
 * the batch. Caller holds the read lock; only the prefetching thread uses the ring. */
grm_status ed_tier_fetch_many(const ed_store *s, ed_table *t, const int64_t *refs,
                              const int64_t *ids, const int64_t *index, int64_t n)
{
    const size_t rb = t->pools[0].rec_bytes;
    int res[ED_TIER_RING];
    const int ring = ed_tier_ring_read(t, refs, index, n, res);
    grm_status st = GRM_OK;
    for (int64_t i = 0; i < n; i++) {
        char *rec = ed_record(t, refs[i]);
        grm_status e = st;
        if (e == GRM_OK && !ring) {
            e = ed_tier_pread(s, t, rec, index[i]);
        } else if (e == GRM_OK) {
            errno = res[i] < 0 ? -res[i] : 0;
            e = res[i] != (int)rb
                ? ed_tier_io_error(s, t, "reading", index[i], res[i] < 0 ? -1 : res[i], rb)
                : ed_tier_check(s, t, rec, index[i]);
        }
        if (e == GRM_OK) {
            ed_tier_took(&t->tier, rec);
        } else {
            ed_record_fill(s, t, refs[i], ids[i], 0);
            st = e;
        }
    }
    return st;
}

/* The row of id as stored in the backing file, into out [D]; *found = 0 when absent.
 * For lookups without INSERT (evaluation): nothing is cached. */
grm_status ed_tier_read_row(const ed_store *s, ed_table *t, int64_t id, float *out,
                            int *found)
{
    const ed_slot *sl = ed_keys_find(&t->tier.index, id, ed_hash(id));
    *found = 0;
    if (sl == NULL) return GRM_OK;
    char *rec = malloc(t->pools[0].rec_bytes);
    if (rec == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory reading "
                               "a backing row", t->name);
    const grm_status st = ed_tier_pread(s, t, rec,
                                        atomic_load_explicit(&sl->ref, memory_order_relaxed));
    if (st == GRM_OK) memcpy(out, ed_rec_row(rec), (size_t)t->dim * sizeof(float));
    free(rec);
    *found = st == GRM_OK;
    return st;
}

/* Room in the index for n more ids. Caller holds the table's write lock. */
grm_status ed_tier_reserve(const ed_store *s, ed_table *t, int64_t n)
{
    ed_keys *k = &t->tier.index;
    if (atomic_load(&k->used) + n <= k->M / ED_GROW_DEN * ED_GROW_NUM) return GRM_OK;
    return ed_keys_rebuild(s, k, ed_keys_slots_for(atomic_load(&k->live) + n, k->lanes));
}

/* Records [first, first + n) of file fd from buf, in one pwrite, counted in bytes_written. */
static grm_status ed_tier_put(const ed_store *s, ed_table *t, int fd, const char *buf,
                              int64_t first, int64_t n)
{
    const size_t bytes = (size_t)n * t->pools[0].rec_bytes;
    const off_t at = ed_tier_offset(t, first);
    size_t done = 0;
    ssize_t put = 0;
    // a short write (a disk filling up, a signal) is continued: the next call says why
    while (done < bytes) {
        put = pwrite(fd, buf + done, bytes - done, at + (off_t)done);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) break;
        done += (size_t)put;
    }
    if (done != bytes)
        return ed_tier_io_error(s, t, "writing", first, put < 0 ? -1 : (ssize_t)done, bytes);
    atomic_fetch_add_explicit(&t->tier.bytes_written, (int64_t)bytes, memory_order_relaxed);
    return GRM_OK;
}

/* Garbage records a scan may read across rather than start a new pread: about 16 KiB,
 * which costs about what one more pread's call does. */
#define ED_TIER_SPAN_BYTES 16384

/* Visit the file records want [n] (ascending by record), in file order: a pread for each
 * run of them whose gaps hold at most ED_TIER_SPAN_BYTES of garbage, up to the write-back
 * buffer's size (1 MiB). Each record is checked (its checksum holds) before
 * visit(ctx, tag, r, rec) sees it, in a scratch buffer that the next run reuses; the
 * garbage read inside runs counts in bytes_read, as the records checked do. The first
 * error stops the scan and is returned. Reading the records one pread each in the order
 * of their owners (the index, or the ids of an export) scattered the reads over the file:
 * in the synthetic-tiered run's former compactions that was 2.26M preads, about 0.8 ms of
 * each step of the trainer. Records far apart still get a pread each, not a read of the
 * garbage between them. The checkpoint's export reads the file's rows with it. Caller
 * holds the write lock; the io_uring ring is not used (the prefetch's thread owns it). */
grm_status ed_tier_visit(const ed_store *s, ed_table *t, const ed_recref *want, int64_t n,
                         ed_tier_visit_fn visit, void *ctx)
{
    ed_tier *tr = &t->tier;
    const size_t rb = t->pools[0].rec_bytes;
    const int64_t cap = tr->wcap;
    const int64_t gap = (int64_t)(ED_TIER_SPAN_BYTES / rb) > 1
                        ? (int64_t)(ED_TIER_SPAN_BYTES / rb) : 1;
    char *in = malloc((size_t)cap * rb);
    if (in == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory reading "
                               "the backing file", t->name);
    grm_status st = GRM_OK;
    int64_t skipped = 0;
    for (int64_t i = 0; i < n && st == GRM_OK;) {
        // the run want[i..j): records at most `gap` apart, within the buffer
        const int64_t a = want[i].r;
        int64_t j = i + 1;
        while (j < n && want[j].r - a < cap && want[j].r - want[j - 1].r <= gap) j++;
        const int64_t b = want[j - 1].r;
        const size_t bytes = (size_t)(b - a + 1) * rb;
        const ssize_t got = pread(tr->fd, in, bytes, ed_tier_offset(t, a));
        if (got != (ssize_t)bytes) {
            st = ed_tier_io_error(s, t, "reading", a, got, bytes);
            break;
        }
        skipped += (b - a + 1) - (j - i);   // garbage inside the run: read, not checked
        for (int64_t q = i; q < j && st == GRM_OK; q++) {
            char *rec = in + (size_t)(want[q].r - a) * rb;
            if ((st = ed_tier_check(s, t, rec, want[q].r)) == GRM_OK)
                st = visit(ctx, want[q].tag, want[q].r, rec);
        }
        i = j;
    }
    atomic_fetch_add_explicit(&tr->bytes_read, skipped * (int64_t)rb, memory_order_relaxed);
    free(in);
    return st;
}

/* The id file record r holds is the one its owner expects, or the file was changed. */
grm_status ed_tier_expect(const ed_store *s, const ed_table *t, int64_t r, const char *rec,
                          int64_t id)
{
    const int64_t got = ed_rec_meta((char *)rec)->id;
    if (got == id) return GRM_OK;
    return s->host->errorf(GRM_EFORMAT, "emb-dynamic: %s: record %lld holds id %lld where "
                           "the index puts id %lld; the backing file was changed under the "
                           "run: resume from the last checkpoint", t->tier.path,
                           (long long)r, (long long)got, (long long)id);
}

/* ---- segments: write-back and cleaning ---- */

/* Room for segment `seg` in seg_live and seg_free: the file grows a segment at a time, but
 * a load makes every segment of the checkpoint's records at once (ed_tier_load_end). The
 * room was doubled once, so a load of more than 64 MiB of records wrote past seg_live. */
static grm_status ed_seg_room(const ed_store *s, ed_table *t, int64_t seg)
{
    ed_tier *tr = &t->tier;
    if (seg < tr->seg_cap) return GRM_OK;
    int64_t cap = tr->seg_cap > 0 ? 2 * tr->seg_cap : 64;
    while (cap <= seg) cap *= 2;
    int32_t *live = realloc(tr->seg_live, (size_t)cap * sizeof *live);
    if (live != NULL) tr->seg_live = live;
    int64_t *fr = realloc(tr->seg_free, (size_t)cap * sizeof *fr);
    if (fr != NULL) tr->seg_free = fr;
    if (live == NULL || fr == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory for the "
                               "backing file's segments", t->name);
    tr->seg_cap = cap;
    return GRM_OK;
}

/* Write the open segment's staged records that are not written yet, in one pwrite. */
static grm_status ed_seg_write(const ed_store *s, ed_table *t)
{
    ed_tier *tr = &t->tier;
    if (tr->wn == tr->wdone) return GRM_OK;
    const size_t rb = t->pools[0].rec_bytes;
    const int64_t n = tr->wn - tr->wdone;
    const grm_status st = ed_tier_put(s, t, tr->fd, tr->wbuf + (size_t)tr->wdone * rb,
                                      tr->wseg * tr->wcap + tr->wdone, n);
    if (st != GRM_OK) return st;
    tr->wdone = tr->wn;
    return GRM_OK;
}

/* A place for one more record: the next of the open segment. A full one is written and
 * closed (its dead records become garbage), and the next is a free segment, else a new one
 * at the end of the file. *r gets the record number, *dst its staging bytes. */
static grm_status ed_seg_append(const ed_store *s, ed_table *t, int64_t *r, char **dst)
{
    ed_tier *tr = &t->tier;
    grm_status st;
    if (tr->wseg >= 0 && tr->wn == tr->wcap) {
        if ((st = ed_seg_write(s, t)) != GRM_OK) return st;
        tr->garbage += tr->wcap - tr->seg_live[tr->wseg];
        tr->wseg = -1;
    }
    if (tr->wseg < 0) {
        int64_t seg;
        if (tr->nfree > 0) {
            seg = tr->seg_free[--tr->nfree];
        } else {
            if ((st = ed_seg_room(s, t, tr->nseg)) != GRM_OK) return st;
            seg = tr->nseg++;
        }
        tr->seg_live[seg] = 0;
        tr->wseg = seg;
        tr->wn = tr->wdone = 0;
    }
    *r = tr->wseg * tr->wcap + tr->wn;
    *dst = tr->wbuf + (size_t)tr->wn++ * t->pools[0].rec_bytes;
    tr->seg_live[tr->wseg]++;
    return GRM_OK;
}

/* Record r is dead (its row was written again, or moved): its segment has one live record
 * less, and when that segment is closed, the file one more garbage record. */
static void ed_seg_kill(ed_tier *tr, int64_t r)
{
    const int64_t seg = r / tr->wcap;
    tr->seg_live[seg]--;
    if (seg != tr->wseg) tr->garbage++;
}

/* Point id's index slot sl at a new record holding rec's bytes (a cache record, or with
 * file a record read from the file, its checksum kept); its old record, if any, dies. */
static grm_status ed_seg_put(const ed_store *s, ed_table *t, ed_slot *sl, int had,
                             const char *rec, int file)
{
    ed_tier *tr = &t->tier;
    int64_t r;
    char *dst;
    // the old record dies first: were it in the open segment when that fills up, the
    // closing would count it live
    if (had) ed_seg_kill(tr, atomic_load_explicit(&sl->ref, memory_order_relaxed));
    const grm_status st = ed_seg_append(s, t, &r, &dst);
    if (st != GRM_OK) return st;
    memcpy(dst, rec, t->pools[0].rec_bytes);
    if (!file) ed_tier_seal(t, dst);
    atomic_store_explicit(&sl->ref, r, memory_order_relaxed);
    return GRM_OK;
}

/* Clean segment seg (closed): read it in one pread and move its live records (those the
 * index points at) to the open segment, then free it. A live record whose row is in the
 * cache is written from the cache, its current bytes, and the cached row is clean
 * afterwards (a dirty row's file record was stale; its eviction now writes nothing unless
 * it changes again); the others are moved as read, after their checksum is checked. */
static grm_status ed_seg_clean(const ed_store *s, ed_table *t, int64_t seg, char *buf)
{
    ed_tier *tr = &t->tier;
    const size_t rb = t->pools[0].rec_bytes;
    const int64_t first = seg * tr->wcap;
    const size_t bytes = (size_t)tr->wcap * rb;
    const int read = tr->seg_live[seg] > 0;     // one without live records is freed unread
    if (read) {
        const ssize_t got = pread(tr->fd, buf, bytes, ed_tier_offset(t, first));
        if (got != (ssize_t)bytes)
            return ed_tier_io_error(s, t, "reading", first, got, bytes);
    }
    int64_t checked = 0;
    grm_status st = GRM_OK;
    for (int64_t p = 0; p < tr->wcap && st == GRM_OK && tr->seg_live[seg] > 0; p++) {
        char *rec = buf + (size_t)p * rb;
        const int64_t id = ed_rec_meta(rec)->id;
        ed_slot *sl = ed_keys_find(&tr->index, id, ed_hash(id));
        if (sl == NULL || atomic_load_explicit(&sl->ref, memory_order_relaxed) != first + p)
            continue;               // garbage (its bytes need not even be a record)
        const ed_slot *cs = ed_keys_find(&t->keys, id, ed_hash(id));
        const int64_t ref = cs != NULL ? atomic_load_explicit(&cs->ref, memory_order_relaxed)
                                       : ED_REF_NONE;
        if (ref >= 0 && !(ref & 1)) {
            char *crec = ed_record(t, ref);
            st = ed_seg_put(s, t, sl, 1, crec, 0);
            if (st == GRM_OK) ed_rec_meta(crec)->flags &= ~(int64_t)ED_FLAG_DIRTY;
            tr->from_cache++;
        } else if ((st = ed_tier_check(s, t, rec, first + p)) == GRM_OK) {
            st = ed_seg_put(s, t, sl, 1, rec, 1);
            checked++;
        }
        tr->moved++;
    }
    // bytes_read counts the segment once (ed_tier_check counted the records it checked)
    if (read)
        atomic_fetch_add_explicit(&tr->bytes_read, (int64_t)bytes - checked * (int64_t)rb,
                                  memory_order_relaxed);
    if (st != GRM_OK) return st;
    tr->garbage -= tr->wcap;        // all of its records are dead now, and it is free
    tr->seg_live[seg] = -1;
    tr->seg_free[tr->nfree++] = seg;
    tr->cleaned++;
    return GRM_OK;
}

/* Clean the closed segments with the fewest live records (the greedy policy of Rosenblum
 * and Ousterhout's cleaner) while their dead records outnumber the live records and are
 * more than backing_garbage_min. A linear scan for the emptiest: a segment is 1 MiB, so a
 * file of 100 GB has 10^5 of them, about 0.1 ms a segment cleaned. */
static grm_status ed_tier_clean(const ed_store *s, ed_table *t)
{
    ed_tier *tr = &t->tier;
    char *buf = NULL;
    grm_status st = GRM_OK;
    while (st == GRM_OK && tr->garbage > s->cfg.backing_garbage_min
           && tr->garbage > atomic_load(&tr->index.live)) {
        int64_t best = -1;
        for (int64_t g = 0; g < tr->nseg; g++)
            if (g != tr->wseg && tr->seg_live[g] >= 0
                && (best < 0 || tr->seg_live[g] < tr->seg_live[best]))
                best = g;
        if (best < 0 || tr->seg_live[best] >= tr->wcap) break;     // nothing to gain
        if (buf == NULL && (buf = malloc((size_t)tr->wcap * t->pools[0].rec_bytes)) == NULL)
            return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                                   "cleaning the backing file", t->name);
        st = ed_seg_clean(s, t, best, buf);
    }
    free(buf);
    return st;
}

/* Write the staged records out, then clean segments when the file's garbage outnumbers its
 * live records. Caller holds the write lock, and calls this before letting it go. */
grm_status ed_tier_flush(const ed_store *s, ed_table *t)
{
    grm_status st = ed_seg_write(s, t);
    if (st == GRM_OK) st = ed_tier_clean(s, t);
    if (st == GRM_OK) st = ed_seg_write(s, t);
    return st;
}

/* A cache record leaves the cache: when dirty (its file copy, if any, is older), it is
 * staged as a new record in the open segment and its old record, if any, dies; a clean
 * one's file copy is current. The staged records go out together when the segment is full
 * and in ed_tier_flush, before the write lock is let go. Caller holds the write lock and
 * reserved room in the index (ed_tier_reserve). */
grm_status ed_tier_evict(const ed_store *s, ed_table *t, int64_t ref)
{
    ed_tier *tr = &t->tier;
    char *rec = ed_record(t, ref);
    ed_meta *m = ed_rec_meta(rec);
    atomic_fetch_add_explicit(&tr->file_only, 1, memory_order_relaxed);
    if (!(m->flags & ED_FLAG_DIRTY)) return GRM_OK;
    int inserted;
    ed_slot *sl = ed_keys_find_or_insert(&tr->index, m->id, ed_hash(m->id), &inserted);
    if (sl == NULL)
        return s->host->errorf(GRM_EINTERNAL, "emb-dynamic: table '%s': backing index full",
                               t->name);
    atomic_fetch_add_explicit(&tr->writebacks, 1, memory_order_relaxed);
    return ed_seg_put(s, t, sl, !inserted, rec, 0);
}

/* ---- checkpoints ---- */

/* The ids only the file holds (not cached), appended to ids from position n. Caller holds
 * the write lock and sized ids for n + file_only. */
int64_t ed_tier_collect(const ed_table *t, int64_t *ids, int64_t n)
{
    const ed_keys *k = &t->tier.index;
    for (int64_t i = 0; i < k->M; i++) {
        const int64_t id = atomic_load_explicit(&k->slots[i].key, memory_order_relaxed);
        if (id == ED_KEY_EMPTY || id == ED_KEY_TOMB) continue;
        if (ed_keys_find(&t->keys, id, ed_hash(id)) != NULL) continue;
        ids[n++] = id;
    }
    return n;
}

/* Load: every row of the checkpoint goes to the file, records 0..n-1 in id order, a piece
 * of a tensor at a time (ckpt.c ed_load_rows), and the cache starts empty (rows come back
 * on first access). The file and the cache are emptied first: a load that fails leaves an
 * empty table, never a mix of two. Caller holds the write lock. */
grm_status ed_tier_load_begin(const ed_store *s, ed_table *t)
{
    ed_tier *tr = &t->tier;
    grm_status st;
    ed_keys empty, index;
    if ((st = ed_keys_init(s, &empty, t->keys.M, t->keys.lanes)) != GRM_OK) return st;
    if ((st = ed_keys_init(s, &index, ed_keys_slots_for(0, 1), 1)) != GRM_OK) {
        ed_keys_fini(s, &empty);
        return st;
    }
    ed_keys_fini(s, &t->keys);
    t->keys = empty;
    ed_keys_fini(s, &tr->index);
    tr->index = index;
    for (int i = 0; i < 2; i++) ed_pool_reset(&t->pools[i]);
    tr->nseg = tr->nfree = 0;
    tr->wseg = -1;
    tr->wn = tr->wdone = 0;
    tr->garbage = 0;
    atomic_store(&tr->file_only, 0);
    atomic_fetch_add(&t->version, 1);
    if (ftruncate(tr->fd, ED_TIER_HEADER) != 0)
        return s->host->errorf(GRM_EIO, "emb-dynamic: %s: truncating: %s", tr->path,
                               strerror(errno));
    return GRM_OK;
}

/* Records [first, first + n) of the file to or from buf (n at most wcap). */
grm_status ed_tier_block(const ed_store *s, ed_table *t, int64_t first, int64_t n, char *buf,
                         int read)
{
    const size_t bytes = (size_t)n * t->pools[0].rec_bytes;
    if (!read) return ed_tier_put(s, t, t->tier.fd, buf, first, n);
    const ssize_t got = pread(t->tier.fd, buf, bytes, ed_tier_offset(t, first));
    if (got != (ssize_t)bytes) return ed_tier_io_error(s, t, "reading", first, got, bytes);
    atomic_fetch_add_explicit(&t->tier.bytes_read, (int64_t)bytes, memory_order_relaxed);
    return GRM_OK;
}

/* Records [0, n) written and sealed, index mapping their ids to them: they are the file.
 * The last partly full segment stays open. Caller holds the write lock. */
grm_status ed_tier_load_end(const ed_store *s, ed_table *t, ed_keys *index, int64_t n)
{
    ed_tier *tr = &t->tier;
    const int64_t nseg = (n + tr->wcap - 1) / tr->wcap;
    grm_status st;
    if (nseg > 0 && (st = ed_seg_room(s, t, nseg - 1)) != GRM_OK) return st;
    ed_keys_fini(s, &tr->index);
    tr->index = *index;
    memset(index, 0, sizeof(*index));
    // records [0, wdone) of the open segment are in the file; only later ones are staged
    for (int64_t g = 0; g < nseg; g++)
        tr->seg_live[g] = (int32_t)(n - g * tr->wcap < tr->wcap ? n - g * tr->wcap : tr->wcap);
    tr->nseg = nseg;
    tr->nfree = 0;
    tr->wseg = n % tr->wcap != 0 ? nseg - 1 : -1;
    tr->wn = tr->wdone = n % tr->wcap;
    tr->garbage = 0;
    atomic_store(&tr->file_only, n);
    return GRM_OK;
}
