/* plugins/emb-dynamic/ckpt.c - checkpoint export and restore of emb-dynamic. Per table:
 *   <table>.ids        i64 [N]        live ids, ascending
 *   <table>.weight     f32 [N, D]     rows (cold FP16 rows widened; exact on reload)
 *   <table>.opt_state  f32 [N, S*D]   optimizer state (absent when S = 0)
 *   <table>.meta       i64 [N, 3]     per-row steps, access count, last-access step
 *   <table>.counters   i64 [5]        clock, key slots, lookups, misses, evictions
 * The export is a sorted snapshot, so it depends on the table's contents only, not on
 * insertion order or threads. load() stages tensors until a table's set is complete, then
 * rebuilds the key structure and the records in one go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emb_dynamic.h"

static int ed_id_cmp(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int ed_recref_cmp(const void *a, const void *b)
{
    const int64_t x = ((const ed_recref *)a)->r, y = ((const ed_recref *)b)->r;
    return x < y ? -1 : x > y;
}

void ed_export_free(ed_export *e)
{
    free(e->ids);
    free(e->weight);
    free(e->state);
    free(e->meta);
    free(e->rw);
    free(e->rstate);
    free(e->rmeta);
    memset(e, 0, sizeof(*e));
    e->version = e->full = e->rver = -1;
}

/* The ids of every row of both tiers (the cache's, then the file's that are not cached),
 * ascending, and the counters, at the table's version. Caller holds the write lock. */
static grm_status ed_snapshot_locked(const ed_store *s, ed_table *t)
{
    ed_export *e = &t->exp;
    const int64_t version = atomic_load(&t->version);
    if (e->version == version) return GRM_OK;
    const int64_t cached = atomic_load(&t->keys.live);
    const int64_t live = cached + (s->tiered ? atomic_load(&t->tier.file_only) : 0);
    if (e->cap < live || e->ids == NULL) {
        int64_t *ids = realloc(e->ids, (size_t)(live > 0 ? live : 1) * sizeof *ids);
        if (ids == NULL)
            return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                                   "exporting %lld rows", t->name, (long long)live);
        e->ids = ids;
        e->cap = live > 0 ? live : 1;
    }
    int64_t n = 0;
    for (int i = 0; i < 2; i++) {
        const ed_pool *p = &t->pools[i];
        const int64_t end = atomic_load(&p->next);
        for (int64_t r = 0; r < end && n < cached; r++) {
            const ed_meta *m = ed_rec_meta(ed_pool_record(p, r));
            if (m->id != ED_KEY_EMPTY) e->ids[n++] = m->id;
        }
    }
    if (s->tiered) n = ed_tier_collect(t, e->ids, n);
    if (n > 1) qsort(e->ids, (size_t)n, sizeof(*e->ids), ed_id_cmp);
    e->n = n;
    e->counters[0] = atomic_load(&t->clock);
    e->counters[1] = t->keys.M;
    e->counters[2] = atomic_load(&t->lookups);
    e->counters[3] = atomic_load(&t->misses);
    e->counters[4] = atomic_load(&t->evictions);
    e->version = version;
    e->full = e->rver = -1;
    return GRM_OK;
}

/* Where rows [a, a + n) of the export go: any of the three may be NULL (not wanted);
 * row i of the export is row i - a of each. */
typedef struct ed_rows_job {
    const ed_store *s;
    ed_table *t;
    int64_t a;
    float *w, *state;
    int64_t *meta;
} ed_rows_job;

/* Export row i from record rec of pool p; the row itself from the cache record ref (an
 * FP16 row widened: exact on reload), or, with ref < 0, from a file record. */
static void ed_rows_put(const ed_rows_job *j, int64_t i, char *rec, const ed_pool *p,
                        int64_t ref)
{
    const ed_table *t = j->t;
    const size_t D = (size_t)t->dim, SD = (size_t)j->s->S * D, o = (size_t)(i - j->a);
    const ed_meta *m = ed_rec_meta(rec);
    if (j->w != NULL) {
        if (ref >= 0) ed_row_read(j->s, t, ref, j->w + o * D);
        else memcpy(j->w + o * D, ed_rec_row(rec), D * sizeof(float));
    }
    if (j->state != NULL && SD > 0)
        memcpy(j->state + o * SD, ed_rec_state(p, rec), SD * sizeof(float));
    if (j->meta != NULL) {
        j->meta[3 * o] = m->steps;
        j->meta[3 * o + 1] = m->count;
        j->meta[3 * o + 2] = m->last;
    }
}

/* A backing record read for the export: row tag of it, when it holds the id expected. */
static grm_status ed_rows_visit(void *ctx, int64_t tag, int64_t r, char *rec)
{
    const ed_rows_job *j = ctx;
    const grm_status st = ed_tier_expect(j->s, j->t, r, rec, j->t->exp.ids[tag]);
    if (st != GRM_OK) return st;
    ed_rows_put(j, tag, rec, &j->t->pools[0], -1);
    return GRM_OK;
}

/* Rows [a, a + n) of the snapshot into j's buffers: each id is found where it is now
 * (the prefetch moves rows between the tiers between two calls, never changing one), the
 * cache's rows copied, the file's read in file order (ed_tier_visit: a pread a run of
 * records, not one a row in id order). Caller holds the write lock. */
static grm_status ed_rows_locked(const ed_store *s, ed_table *t, ed_rows_job *j, int64_t n)
{
    const ed_export *e = &t->exp;
    ed_recref *want = NULL;
    int64_t nwant = 0;
    if (s->tiered && n > 0 && (want = malloc((size_t)n * sizeof *want)) == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                               "exporting %lld rows", t->name, (long long)n);
    for (int64_t i = j->a; i < j->a + n; i++) {
        const int64_t id = e->ids[i];
        const uint64_t h = ed_hash(id);
        const ed_slot *sl = ed_keys_find(&t->keys, id, h);
        if (sl != NULL) {
            const int64_t ref = atomic_load_explicit(&sl->ref, memory_order_relaxed);
            ed_rows_put(j, i, ed_record(t, ref), &t->pools[ref & 1], ref);
            continue;
        }
        const ed_slot *fs = s->tiered ? ed_keys_find(&t->tier.index, id, h) : NULL;
        if (fs == NULL) {
            free(want);
            return s->host->errorf(GRM_EINTERNAL, "emb-dynamic: table '%s': id %lld of the "
                                   "checkpoint's snapshot is gone; the table changed while "
                                   "it was saved", t->name, (long long)id);
        }
        want[nwant].r = atomic_load_explicit(&fs->ref, memory_order_relaxed);
        want[nwant++].tag = i;
    }
    if (nwant > 1) qsort(want, (size_t)nwant, sizeof *want, ed_recref_cmp);
    const grm_status st = nwant > 0 ? ed_tier_visit(s, t, want, nwant, ed_rows_visit, j)
                                    : GRM_OK;
    free(want);
    return st;
}

/* Rows [row0, row0 + n) of tensor k (weight, state, meta) of a tiered table: the range's
 * three tensors are read together into the range buffers, and the next tensor asked for
 * the same range is copied from them, without reading the backing file again. A save that
 * asked for every range of the weight, then of the state, then of the meta, read each
 * file record three times (ckpt-grm 1.0 wrote a tensor at a time; 2.0 writes a range of
 * all of them at a time). Caller holds the write lock. */
static grm_status ed_rows_range(const ed_store *s, ed_table *t, int k, int64_t row0, int64_t n,
                                void *out)
{
    ed_export *e = &t->exp;
    const size_t D = (size_t)t->dim, SD = (size_t)s->S * D;
    if (e->rver != e->version || e->r0 != row0 || e->rn != n) {
        if (n > e->rcap) {
            float *w = realloc(e->rw, (size_t)n * D * sizeof(float));
            if (w != NULL) e->rw = w;
            float *x = realloc(e->rstate, (size_t)n * (SD > 0 ? SD : 1) * sizeof(float));
            if (x != NULL) e->rstate = x;
            int64_t *m = realloc(e->rmeta, (size_t)n * 3 * sizeof(int64_t));
            if (m != NULL) e->rmeta = m;
            if (w == NULL || x == NULL || m == NULL)
                return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                                       "for a range of %lld rows of its checkpoint", t->name,
                                       (long long)n);
            e->rcap = n;
        }
        e->rver = -1;
        ed_rows_job j = { s, t, row0, e->rw, e->rstate, e->rmeta };
        const grm_status st = ed_rows_locked(s, t, &j, n);
        if (st != GRM_OK) return st;
        e->rver = e->version;
        e->r0 = row0;
        e->rn = n;
        e->rtaken = 0;
    }
    if (k == 1) memcpy(out, e->rw, (size_t)n * D * sizeof(float));
    else if (k == 2) memcpy(out, e->rstate, (size_t)n * SD * sizeof(float));
    else memcpy(out, e->rmeta, (size_t)n * 3 * sizeof(int64_t));
    e->rtaken |= 1 << k;
    // the last range, once each of the three took it (a save a range of each in turn asks
    // in the caller's order, ckpt-safetensors' in its file's: i64 tensors first): the
    // buffers (about a range of 8 MiB) go back until the next save. (A save a tensor at a
    // time, as no format now asks, keeps them until the next save or the store's end.)
    const int32_t all = s->S > 0 ? 0xE : 0xA;
    if (row0 + n == e->n && (e->rtaken & all) == all) {
        free(e->rw);
        free(e->rstate);
        free(e->rmeta);
        e->rw = e->rstate = NULL;
        e->rmeta = NULL;
        e->rcap = 0;
        e->rver = -1;
    }
    return GRM_OK;
}

grm_status ed_export_describe(const ed_store *s, ed_table *t, int64_t *rows)
{
    pthread_rwlock_wrlock(&t->lock);
    const grm_status st = ed_snapshot_locked(s, t);
    *rows = t->exp.n;
    pthread_rwlock_unlock(&t->lock);
    return st;
}

grm_status ed_export_rows(const ed_store *s, ed_table *t, int k, int64_t row0, int64_t n,
                          void *out)
{
    ed_export *e = &t->exp;
    grm_status st = GRM_OK;
    pthread_rwlock_wrlock(&t->lock);
    const int64_t rows = k == 4 ? 5 : e->n;
    if (e->version != atomic_load(&t->version) || e->ids == NULL)
        st = s->host->errorf(GRM_EINTERNAL, "emb-dynamic: table '%s': rows asked for of a "
                             "snapshot the table has moved past (a lookup or update between "
                             "the description and the rows)", t->name);
    else if (row0 < 0 || n < 0 || row0 > rows - n || (n > 0 && out == NULL))
        st = s->host->errorf(GRM_EINVAL, "emb-dynamic: table '%s': rows [%lld, +%lld) at %p "
                             "of a tensor of %lld", t->name, (long long)row0, (long long)n,
                             out, (long long)rows);
    else if (k == 0)
        memcpy(out, e->ids + row0, (size_t)n * sizeof(int64_t));
    else if (k == 4)
        memcpy(out, e->counters + row0, (size_t)n * sizeof(int64_t));
    else if (s->tiered)
        st = ed_rows_range(s, t, k, row0, n, out);
    else {
        ed_rows_job j = { s, t, row0, k == 1 ? out : NULL, k == 2 ? out : NULL,
                          k == 3 ? out : NULL };
        st = ed_rows_locked(s, t, &j, n);
    }
    pthread_rwlock_unlock(&t->lock);
    return st;
}

/* Every row into the whole-tensor buffers (tensors()). */
static grm_status ed_export_locked(const ed_store *s, ed_table *t)
{
    ed_export *e = &t->exp;
    grm_status st = ed_snapshot_locked(s, t);
    if (st != GRM_OK || e->full == e->version) return st;
    const int64_t n = e->n;
    if (n > e->wcap || e->weight == NULL) {
        const size_t N = (size_t)(n > 0 ? n : 1), D = (size_t)t->dim, S = (size_t)s->S;
        float *w = realloc(e->weight, N * D * sizeof(float));
        if (w != NULL) e->weight = w;
        float *sv = realloc(e->state, N * (S > 0 ? S * D : 1) * sizeof(float));
        if (sv != NULL) e->state = sv;
        int64_t *m = realloc(e->meta, N * 3 * sizeof(int64_t));
        if (m != NULL) e->meta = m;
        if (w == NULL || sv == NULL || m == NULL)
            return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                                   "exporting %lld rows", t->name, (long long)n);
        e->wcap = (int64_t)N;
    }
    ed_rows_job j = { s, t, 0, e->weight, e->state, e->meta };
    if ((st = ed_rows_locked(s, t, &j, n)) != GRM_OK) return st;
    e->full = e->version;
    return GRM_OK;
}

grm_status ed_export_table(const ed_store *s, ed_table *t)
{
    pthread_rwlock_wrlock(&t->lock);
    const grm_status st = ed_export_locked(s, t);
    pthread_rwlock_unlock(&t->lock);
    return st;
}

/* ---- load ---- */

void ed_stage_clear(const ed_store *s, ed_stage *st)
{
    for (int k = 0; k < ED_NTENSORS; k++) free(st->data[k]);
    if (st->index.slots != NULL) ed_keys_fini(s, &st->index);
    free(st->win);
    memset(st, 0, sizeof(*st));
}

static const char *ed_dtype_name(int32_t dtype)
{
    switch (dtype) {
    case GRM_DTYPE_F32: return "f32";
    case GRM_DTYPE_F16: return "f16";
    case GRM_DTYPE_BF16: return "bf16";
    case GRM_DTYPE_I32: return "i32";
    case GRM_DTYPE_I64: return "i64";
    case GRM_DTYPE_U8: return "u8";
    default: return "unknown-dtype";
    }
}

/* The clock and the counters of a restored table. */
static void ed_commit_counters(ed_table *t, const int64_t *counters)
{
    atomic_store(&t->clock, counters[0]);
    atomic_store(&t->last_sweep, counters[0]);
    atomic_store(&t->lookups, counters[2]);
    atomic_store(&t->misses, counters[3]);
    atomic_store(&t->evictions, counters[4]);
    atomic_fetch_add(&t->version, 1);
}

static grm_status ed_bad_id(const ed_store *s, const ed_table *t, int64_t id)
{
    return s->host->errorf(GRM_EFORMAT, "emb-dynamic: table '%s': checkpoint id %lld is "
                           "reserved or repeated", t->name, (long long)id);
}

/* Rebuild an all-in-memory table t from the staged tensors. Caller holds the write lock. */
static grm_status ed_commit(const ed_store *s, ed_table *t)
{
    ed_stage *sg = &t->stage;
    const int64_t n = sg->n[0];
    const int64_t *ids = sg->data[0];                  /* [n] */
    const float *w = sg->data[1];                      /* [n, D] */
    const float *state = sg->data[2];                  /* [n, S*D] */
    const int64_t *meta = sg->data[3];                 /* [n, 3] */
    const int64_t *counters = sg->data[4];             /* [5] */
    const size_t D = (size_t)t->dim, SD = (size_t)s->S * D;
    grm_status st;

    for (int k = 1; k < 4; k++)
        if ((k != 2 || s->S > 0) && sg->n[k] != n)
            return s->host->errorf(GRM_EFORMAT, "emb-dynamic: table '%s': checkpoint has %lld "
                                   "ids but %lld rows in '%s'", t->name, (long long)n,
                                   (long long)sg->n[k], t->tensor_names[k]);

    // Keys first, into a fresh structure: a bad id leaves the table as it was.
    int64_t M = ed_keys_slots_for(n, t->keys.lanes);
    if (counters[1] >= M && counters[1] <= (INT64_C(1) << 40)
        && (counters[1] & (counters[1] - 1)) == 0)
        M = counters[1];
    ed_keys keys;
    if ((st = ed_keys_init(s, &keys, M, t->keys.lanes)) != GRM_OK) return st;
    for (int64_t i = 0; i < n; i++) {
        int inserted = 0;
        if (ids[i] == ED_KEY_EMPTY || ids[i] == ED_KEY_TOMB
            || ed_keys_find_or_insert(&keys, ids[i], ed_hash(ids[i]), &inserted) == NULL
            || !inserted) {
            ed_keys_fini(s, &keys);
            return ed_bad_id(s, t, ids[i]);
        }
    }
    ed_keys_fini(s, &t->keys);
    t->keys = keys;

    for (int i = 0; i < 2; i++) ed_pool_reset(&t->pools[i]);
    for (int i = 0; i < (s->cfg.fp16_cold ? 2 : 1); i++)
        if ((st = ed_pool_ensure(s, t, &t->pools[i], n + t->pools[i].chunk_rows)) != GRM_OK)
            return st;
    for (int64_t i = 0; i < n; i++) {
        const int pool = s->cfg.fp16_cold && meta[3 * i + 1] < s->cfg.hot_threshold;
        const int64_t ref = (ed_pool_alloc(&t->pools[pool]) << 1) | pool;
        char *rec = ed_record(t, ref);
        ed_meta *m = ed_rec_meta(rec);
        m->id = ids[i];
        m->steps = meta[3 * i];
        m->count = meta[3 * i + 1];
        m->last = meta[3 * i + 2];
        if (pool) s->to_f16(ed_rec_row(rec), w + (size_t)i * D, t->dim);
        else memcpy(ed_rec_row(rec), w + (size_t)i * D, D * sizeof(float));
        if (SD > 0)
            memcpy(ed_rec_state(&t->pools[pool], rec), state + (size_t)i * SD,
                   SD * sizeof(float));
        ed_slot *slot = ed_keys_find(&t->keys, ids[i], ed_hash(ids[i]));
        atomic_store(&slot->ref, ref);
    }
    ed_commit_counters(t, counters);
    return GRM_OK;
}

/* ---- tiered: the rows go to the backing file ----
 * Record r of the file (records numbered in id order) holds row r of the four row tensors
 * (ids, weight, opt_state, meta) and is finished (checksum, index) once all four reached
 * it. Pieces of a tensor come in order; a format's load_rows_interleaved (ABI 1.13:
 * ckpt-grm, ckpt-safetensors) hands a range of each tensor over in turn: the records a
 * range spans are then put together in the window, in memory, and each is written once,
 * with no read. Pieces a tensor at a time (load_rows, or a format without the op) run past
 * the window: its records go to the file as they are and the tensors that come later read
 * them back and patch them, a pass each, as before 1.13. */

/* Bytes of the window: about 4 of ckpt-grm's ranges (ckpt_group_rows: 8 MiB of a
 * group's rows), so the range of each tensor fits while the next begins. */
#define ED_LOAD_WINDOW_BYTES ((size_t)32 << 20)

/* Row tensors of a tiered table: ids, weight, opt_state (when S > 0), meta. */
static int32_t ed_rowmask(const ed_store *s)
{
    return s->S > 0 ? 0xF : 0xB;
}

/* Row i of piece data of tensor k into record rec. */
static void ed_tier_apply(const ed_store *s, const ed_table *t, int k, const void *data,
                          int64_t i, char *rec)
{
    const size_t D = (size_t)t->dim, SD = (size_t)s->S * D;
    ed_meta *md = ed_rec_meta(rec);
    switch (k) {
    case 0: md->id = ((const int64_t *)data)[i]; break;
    case 1: memcpy(ed_rec_row(rec), (const float *)data + (size_t)i * D, D * sizeof(float));
            break;
    case 2: memcpy(ed_rec_state(&t->pools[0], rec), (const float *)data + (size_t)i * SD,
                   SD * sizeof(float)); break;
    default:
        md->steps = ((const int64_t *)data)[3 * i];
        md->count = ((const int64_t *)data)[3 * i + 1];
        md->last = ((const int64_t *)data)[3 * i + 2];
        break;
    }
}

/* 1 when record r has every row tensor once tensor k has reached it: the others' pieces
 * arrived past r. */
static int ed_tier_whole(const ed_store *s, const ed_stage *sg, int k, int64_t r)
{
    const int32_t rowmask = ed_rowmask(s);
    for (int q = 0; q < 4; q++)
        if ((rowmask >> q & 1) && q != k && sg->got[q] <= r) return 0;
    return 1;
}

/* Finish record r: its checksum, and its id into the new index. */
static grm_status ed_tier_finish(const ed_store *s, ed_table *t, char *rec, int64_t r)
{
    ed_meta *md = ed_rec_meta(rec);
    ed_tier_seal(t, rec);
    int inserted = 0;
    ed_slot *sl = md->id == ED_KEY_EMPTY || md->id == ED_KEY_TOMB ? NULL
        : ed_keys_find_or_insert(&t->stage.index, md->id, ed_hash(md->id), &inserted);
    if (sl == NULL || !inserted) return ed_bad_id(s, t, md->id);
    atomic_store_explicit(&sl->ref, r, memory_order_relaxed);
    return GRM_OK;
}

/* Records [first, first + n) of buf to the file, a segment at most a write. */
static grm_status ed_tier_write(const ed_store *s, ed_table *t, int64_t first, int64_t n,
                                char *buf)
{
    const size_t rb = t->pools[0].rec_bytes;
    grm_status st = GRM_OK;
    for (int64_t b = 0; b < n && st == GRM_OK; b += t->tier.wcap) {
        const int64_t c = n - b < t->tier.wcap ? n - b : t->tier.wcap;
        st = ed_tier_block(s, t, first + b, c, buf + (size_t)b * rb, 0);
    }
    return st;
}

/* Rows [r, r + c) of a piece of tensor k (its row0 at data's row 0), records the file
 * holds already: read back, patched, finished when whole, written again. */
static grm_status ed_tier_patch(const ed_store *s, ed_table *t, int k, const void *data,
                                int64_t row0, int64_t r, int64_t c, char *buf)
{
    const size_t rb = t->pools[0].rec_bytes;
    grm_status st = ed_tier_block(s, t, r, c, buf, 1);
    for (int64_t q = 0; q < c && st == GRM_OK; q++) {
        char *rec = buf + (size_t)q * rb;
        ed_tier_apply(s, t, k, data, r + q - row0, rec);
        if (ed_tier_whole(s, &t->stage, k, r + q)) st = ed_tier_finish(s, t, rec, r + q);
    }
    return st == GRM_OK ? ed_tier_block(s, t, r, c, buf, 0) : st;
}

/* The window's first n records to the file, those whole once tensor k reached them
 * finished; the window then starts n records later. */
static grm_status ed_tier_slide(const ed_store *s, ed_table *t, int k, int64_t n)
{
    ed_stage *sg = &t->stage;
    const size_t rb = t->pools[0].rec_bytes;
    grm_status st = GRM_OK;
    for (int64_t q = 0; q < n && st == GRM_OK; q++)
        if (ed_tier_whole(s, sg, k, sg->flushed + q))
            st = ed_tier_finish(s, t, sg->win + (size_t)q * rb, sg->flushed + q);
    if (st == GRM_OK) st = ed_tier_write(s, t, sg->flushed, n, sg->win);
    if (st != GRM_OK) return st;
    // only the records the pieces reached move and are cleared: a restore a range of each
    // tensor in turn touches about a range of the window, not all of it
    const int64_t keep = sg->used > n ? sg->used - n : 0;
    memmove(sg->win, sg->win + (size_t)n * rb, (size_t)keep * rb);
    memset(sg->win + (size_t)keep * rb, 0, (size_t)(sg->used - keep) * rb);
    sg->used = keep;
    sg->flushed += n;
    return GRM_OK;
}

/* A piece of row tensor k (0..3) of a tiered table: rows [row0, row0 + m). Rows whose
 * records the file holds are patched there (ed_tier_patch); the others go to the window,
 * which moves on when the piece runs past it; then the records at the window's front that
 * every tensor has reached are finished and written. Caller holds the write lock and adds
 * m to got[k] after. */
static grm_status ed_tier_piece(const ed_store *s, ed_table *t, int k, const void *data,
                                int64_t row0, int64_t m)
{
    ed_stage *sg = &t->stage;
    const size_t rb = t->pools[0].rec_bytes;
    grm_status st = GRM_OK;
    char *buf = NULL;
    int64_t r = row0;
    const int64_t end = row0 + m;
    while (r < end && st == GRM_OK) {
        if (r < sg->flushed) {
            const int64_t to = end < sg->flushed ? end : sg->flushed;
            const int64_t c = to - r < t->tier.wcap ? to - r : t->tier.wcap;
            if (buf == NULL && (buf = malloc((size_t)t->tier.wcap * rb)) == NULL)
                return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                                       "writing the backing file", t->name);
            st = ed_tier_patch(s, t, k, data, row0, r, c, buf);
            r += c;
            continue;
        }
        if (r == sg->flushed + sg->win_cap) {   // ahead of the window: move it on
            st = ed_tier_slide(s, t, k, sg->win_cap);
            continue;
        }
        const int64_t c = (end < sg->flushed + sg->win_cap ? end : sg->flushed + sg->win_cap)
                          - r;
        for (int64_t q = 0; q < c; q++)
            ed_tier_apply(s, t, k, data, r + q - row0,
                          sg->win + (size_t)(r + q - sg->flushed) * rb);
        r += c;
        if (r - sg->flushed > sg->used) sg->used = r - sg->flushed;
    }
    free(buf);
    if (st != GRM_OK) return st;
    // the window's front, as far as every row tensor has reached (k: to the piece's end)
    int64_t done = end;
    const int32_t rowmask = ed_rowmask(s);
    for (int q = 0; q < 4; q++)
        if ((rowmask >> q & 1) && q != k && sg->got[q] < done) done = sg->got[q];
    return done > sg->flushed ? ed_tier_slide(s, t, k, done - sg->flushed) : GRM_OK;
}

/* Tiered: the first piece of a row tensor. The first of the load empties the file and
 * the cache and makes the index, sized for the rows, and the window. */
static grm_status ed_tier_piece_begin(const ed_store *s, ed_table *t, int k, int64_t rows)
{
    ed_stage *sg = &t->stage;
    const int32_t rowmask = ed_rowmask(s);
    grm_status st;
    for (int q = 0; q < 4; q++)
        if ((rowmask >> q & 1) && q != k && ((sg->have >> q & 1) || sg->got[q] > 0)
            && sg->n[q] != rows)
            return s->host->errorf(GRM_EFORMAT, "emb-dynamic: table '%s': checkpoint has "
                                   "%lld rows in '%s' but %lld in '%s'", t->name,
                                   (long long)sg->n[q], t->tensor_names[q], (long long)rows,
                                   t->tensor_names[k]);
    if (sg->begun) return GRM_OK;
    if ((st = ed_tier_load_begin(s, t)) != GRM_OK) return st;
    sg->begun = 1;
    sg->read0 = atomic_load(&t->tier.bytes_read);
    sg->written0 = atomic_load(&t->tier.bytes_written);
    if ((st = ed_keys_init(s, &sg->index, ed_keys_slots_for(rows, 1), 1)) != GRM_OK) return st;
    const size_t rb = t->pools[0].rec_bytes;
    sg->win_cap = (int64_t)(ED_LOAD_WINDOW_BYTES / rb);
    if (sg->win_cap < 1) sg->win_cap = 1;
    if (sg->win_cap > rows) sg->win_cap = rows > 0 ? rows : 1;
    sg->flushed = sg->used = 0;
    if ((sg->win = calloc((size_t)sg->win_cap, rb)) == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory for %lld "
                               "records of the restore's window", t->name,
                               (long long)sg->win_cap);
    return GRM_OK;
}

/* Check a piece of tensor k of table t against what tensors() writes; stage it (an
 * all-in-memory table, or the counters) or write it to the file (a tiered table's rows);
 * the piece that completes the set commits the table. */
grm_status ed_load_rows(const ed_store *s, ed_table *t, int k, const grm_named_tensor *in,
                        int64_t row0, int64_t rows)
{
    static const int32_t dtypes[ED_NTENSORS] = { GRM_DTYPE_I64, GRM_DTYPE_F32, GRM_DTYPE_F32,
                                                 GRM_DTYPE_I64, GRM_DTYPE_I64 };
    const grm_tensor *x = &in->tensor;
    const int32_t ndim = k == 0 || k == 4 ? 1 : 2;
    const int64_t cols = k == 1 ? t->dim : k == 2 ? (int64_t)s->S * t->dim : k == 3 ? 3 : 1;
    ed_stage *sg = &t->stage;
    const int64_t m = x->shape[0];

    int ok = x->dtype == dtypes[k] && x->ndim == ndim && m >= 0 && rows >= 0;
    if (ok && ndim == 2) ok = x->shape[1] == cols;
    if (ok && k == 4) ok = rows == 5;
    if (!ok) {
        char want[64];
        if (k == 4) snprintf(want, sizeof(want), "i64 [5]");
        else if (ndim == 1) snprintf(want, sizeof(want), "i64 [N]");
        else snprintf(want, sizeof(want), "%s [N, %lld]", ed_dtype_name(dtypes[k]),
                      (long long)cols);
        return s->host->errorf(GRM_EFORMAT, "emb-dynamic: tensor '%s': expected %s, got %s "
                               "with %d dims [%lld, %lld]; the checkpoint was written for "
                               "another table config", in->name, want,
                               ed_dtype_name(x->dtype), (int)x->ndim, (long long)rows,
                               (long long)(x->ndim > 1 ? x->shape[1] : 1));
    }
    if (x->device.type != GRM_DEVICE_CPU)
        return s->host->errorf(GRM_ENOTSUP, "emb-dynamic: tensor '%s': load needs a CPU "
                               "tensor", in->name);
    if (row0 != (sg->have >> k & 1 ? -1 : sg->got[k]) || m > rows - row0)
        return s->host->errorf(GRM_EFORMAT, "emb-dynamic: tensor '%s': rows [%lld, %lld) of "
                               "%lld arrive after %lld rows; pieces come in order, once",
                               in->name, (long long)row0, (long long)(row0 + m),
                               (long long)rows, (long long)sg->got[k]);
    const size_t row_bytes = (size_t)cols * grm_dtype_size(dtypes[k]);
    if (m > 0 && x->data == NULL)
        return s->host->errorf(GRM_EINVAL, "emb-dynamic: tensor '%s': data is NULL", in->name);

    grm_status st = GRM_OK;
    const int tiered_rows = s->tiered && k < 4;
    if (row0 == 0) {
        sg->n[k] = rows;
        if (tiered_rows) {
            pthread_rwlock_wrlock(&t->lock);
            st = ed_tier_piece_begin(s, t, k, rows);
            pthread_rwlock_unlock(&t->lock);
        } else {
            free(sg->data[k]);
            const size_t bytes = (size_t)rows * row_bytes;
            if ((sg->data[k] = malloc(bytes > 0 ? bytes : 1)) == NULL)
                st = s->host->errorf(GRM_ENOMEM, "emb-dynamic: tensor '%s': out of memory "
                                     "staging %zu bytes", in->name, bytes);
        }
    }
    if (st == GRM_OK && tiered_rows) {
        pthread_rwlock_wrlock(&t->lock);
        st = ed_tier_piece(s, t, k, x->data, row0, m);
        pthread_rwlock_unlock(&t->lock);
    } else if (st == GRM_OK && m > 0) {
        memcpy((char *)sg->data[k] + (size_t)row0 * row_bytes, x->data, (size_t)m * row_bytes);
    }
    if (st != GRM_OK) {
        ed_stage_clear(s, sg);      // a failed set is dropped whole; load it again
        return st;
    }
    sg->got[k] += m;
    if (sg->got[k] == rows) sg->have |= 1 << k;

    const int32_t need = s->S > 0 ? 0x1F : 0x1B;
    if ((sg->have & need) != need) return GRM_OK;
    pthread_rwlock_wrlock(&t->lock);
    if (!s->tiered) {
        st = ed_commit(s, t);
    } else {
        st = ed_tier_load_end(s, t, &sg->index, sg->n[0]);
        if (st == GRM_OK) ed_commit_counters(t, sg->data[4]);
        const int64_t rb = (int64_t)t->pools[0].rec_bytes;
        const int64_t wr = atomic_load(&t->tier.bytes_written) - sg->written0;
        if (st == GRM_OK)
            s->host->log(GRM_LOG_INFO, "emb-dynamic", "table '%s': %lld rows restored into "
                         "%s: %lld bytes written (%.2f a record), %lld read back", t->name,
                         (long long)sg->n[0], t->tier.path, (long long)wr,
                         sg->n[0] > 0 ? (double)wr / (double)(sg->n[0] * rb) : 0.0,
                         (long long)(atomic_load(&t->tier.bytes_read) - sg->read0));
    }
    pthread_rwlock_unlock(&t->lock);
    ed_stage_clear(s, sg);
    return st;
}
