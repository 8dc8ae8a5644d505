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

static int ed_cand_by_id(const void *a, const void *b)
{
    const int64_t x = ((const ed_candidate *)a)->id, y = ((const ed_candidate *)b)->id;
    return x < y ? -1 : x > y;
}

void ed_export_free(ed_export *e)
{
    free(e->ids);
    free(e->weight);
    free(e->state);
    free(e->meta);
    memset(e, 0, sizeof(*e));
    e->version = -1;
}

static grm_status ed_export_grow(const ed_store *s, const ed_table *t, ed_export *e,
                                 int64_t n)
{
    if (n <= e->cap && e->ids != NULL) return GRM_OK;
    const size_t N = (size_t)(n > 0 ? n : 1), D = (size_t)t->dim, S = (size_t)s->S;
    int64_t *ids = realloc(e->ids, N * sizeof(int64_t));
    if (ids != NULL) e->ids = ids;
    float *w = realloc(e->weight, N * D * sizeof(float));
    if (w != NULL) e->weight = w;
    float *st = realloc(e->state, N * (S > 0 ? S * D : 1) * sizeof(float));
    if (st != NULL) e->state = st;
    int64_t *m = realloc(e->meta, N * 3 * sizeof(int64_t));
    if (m != NULL) e->meta = m;
    if (ids == NULL || w == NULL || st == NULL || m == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory exporting "
                               "%lld rows", t->name, (long long)n);
    e->cap = (int64_t)N;
    return GRM_OK;
}

/* Row i of the export from record rec of pool p: its id, optimizer state and metadata
 * (the row itself is the caller's: a cached FP16 row is widened by ed_row_read). */
static void ed_export_fields(const ed_store *s, const ed_table *t, ed_export *e, int64_t i,
                             char *rec, const ed_pool *p)
{
    const size_t SD = (size_t)s->S * (size_t)t->dim;
    const ed_meta *m = ed_rec_meta(rec);
    e->ids[i] = m->id;
    if (SD > 0) memcpy(e->state + (size_t)i * SD, ed_rec_state(p, rec), SD * sizeof(float));
    e->meta[3 * i] = m->steps;
    e->meta[3 * i + 1] = m->count;
    e->meta[3 * i + 2] = m->last;
}

typedef struct ed_export_job {
    const ed_store *s;
    ed_table *t;
    ed_export *e;
} ed_export_job;

/* A backing record read for the export: row i of it, when it holds the id expected there. */
static grm_status ed_export_visit(void *ctx, int64_t i, int64_t r, char *rec)
{
    const ed_export_job *j = ctx;
    const grm_status st = ed_tier_expect(j->s, j->t, r, rec, j->t->cand[i].id);
    if (st != GRM_OK) return st;
    memcpy(j->e->weight + (size_t)i * (size_t)j->t->dim, ed_rec_row(rec),
           (size_t)j->t->dim * sizeof(float));
    ed_export_fields(j->s, j->t, j->e, i, rec, &j->t->pools[0]);
    return GRM_OK;
}

static grm_status ed_export_locked(const ed_store *s, ed_table *t)
{
    ed_export *e = &t->exp;
    const int64_t version = atomic_load(&t->version);
    if (e->version == version && e->ids != NULL) return GRM_OK;

    // Tiered: the rows of both tiers (the cache's, then the file's that are not cached).
    const int64_t cached = atomic_load(&t->keys.live);
    const int64_t live = cached + (s->tiered ? atomic_load(&t->tier.file_only) : 0);
    grm_status st = ed_export_grow(s, t, e, live);
    if (st != GRM_OK) return st;
    if (t->cand_cap < live) {
        ed_candidate *c = realloc(t->cand, (size_t)live * sizeof(*c));
        if (c == NULL)
            return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                                   "exporting %lld rows", t->name, (long long)live);
        t->cand = c;
        t->cand_cap = live;
    }
    int64_t n = 0;
    for (int i = 0; i < 2; i++) {
        const ed_pool *p = &t->pools[i];
        const int64_t end = atomic_load(&p->next);
        for (int64_t r = 0; r < end && n < cached; r++) {
            const ed_meta *m = ed_rec_meta(ed_pool_record(p, r));
            if (m->id == ED_KEY_EMPTY) continue;
            t->cand[n].id = m->id;
            t->cand[n].ref = (r << 1) | i;
            n++;
        }
    }
    if (s->tiered) n = ed_tier_collect(t, n);     // refs -1 - record number
    if (n > 1) qsort(t->cand, (size_t)n, sizeof(*t->cand), ed_cand_by_id);

    // The cache's rows now; the file's in file order after (ed_tier_visit: a pread a run
    // of records, not one a row in id order), at[record] = their place in the export.
    const int64_t nrec = s->tiered ? ed_tier_nrec(&t->tier) : 0;
    int64_t *at = NULL, nfile = 0;
    if (s->tiered && (at = malloc((size_t)(nrec > 0 ? nrec : 1) * sizeof *at)) == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: table '%s': out of memory "
                               "exporting", t->name);
    for (int64_t r = 0; r < nrec; r++) at[r] = -1;
    for (int64_t i = 0; i < n; i++) {
        const int64_t ref = t->cand[i].ref;
        if (ref < 0) {
            at[-1 - ref] = i;
            nfile++;
            continue;
        }
        char *rec = ed_record(t, ref);
        ed_row_read(s, t, ref, e->weight + (size_t)i * (size_t)t->dim);
        ed_export_fields(s, t, e, i, rec, &t->pools[ref & 1]);
    }
    ed_export_job j = { s, t, e };
    st = nfile > 0 ? ed_tier_visit(s, t, at, ed_export_visit, &j) : GRM_OK;
    free(at);
    if (st != GRM_OK) return st;
    e->n = n;
    e->counters[0] = atomic_load(&t->clock);
    e->counters[1] = t->keys.M;
    e->counters[2] = atomic_load(&t->lookups);
    e->counters[3] = atomic_load(&t->misses);
    e->counters[4] = atomic_load(&t->evictions);
    e->version = version;
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

void ed_stage_clear(ed_stage *st)
{
    for (int k = 0; k < ED_NTENSORS; k++) free(st->data[k]);
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

/* Rebuild table t from the staged tensors. Caller holds the write lock. */
static grm_status ed_commit(const ed_store *s, ed_table *t)
{
    ed_stage *sg = &t->stage;
    int64_t n = sg->n[0];
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

    // Keys first, into a fresh structure: a bad id leaves the table as it was. Tiered: the
    // key structure is checked the same way, then left empty (the rows go to the file).
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
            return s->host->errorf(GRM_EFORMAT, "emb-dynamic: table '%s': checkpoint id "
                                   "%lld is reserved or repeated", t->name,
                                   (long long)ids[i]);
        }
    }
    if (s->tiered) {
        ed_keys_fini(s, &keys);
        if ((st = ed_tier_commit(s, t, ids, w, state, meta, n)) != GRM_OK) return st;
        ed_keys empty;
        if ((st = ed_keys_init(s, &empty, t->keys.M, t->keys.lanes)) != GRM_OK) return st;
        ed_keys_fini(s, &t->keys);
        t->keys = empty;
        for (int i = 0; i < 2; i++) ed_pool_reset(&t->pools[i]);
        n = 0;      // nothing cached
    } else {
        ed_keys_fini(s, &t->keys);
        t->keys = keys;
    }

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
    atomic_store(&t->clock, counters[0]);
    atomic_store(&t->last_sweep, counters[0]);
    atomic_store(&t->lookups, counters[2]);
    atomic_store(&t->misses, counters[3]);
    atomic_store(&t->evictions, counters[4]);
    atomic_fetch_add(&t->version, 1);
    return GRM_OK;
}

/* Check tensor k of table t against what tensors() writes, and stage a copy. */
grm_status ed_load_tensor(const ed_store *s, ed_table *t, int k, const grm_named_tensor *in)
{
    static const int32_t dtypes[ED_NTENSORS] = { GRM_DTYPE_I64, GRM_DTYPE_F32, GRM_DTYPE_F32,
                                                 GRM_DTYPE_I64, GRM_DTYPE_I64 };
    const grm_tensor *x = &in->tensor;
    const int32_t ndim = k == 0 || k == 4 ? 1 : 2;
    const int64_t cols = k == 1 ? t->dim : k == 2 ? (int64_t)s->S * t->dim : k == 3 ? 3 : 1;

    int ok = x->dtype == dtypes[k] && x->ndim == ndim && x->shape[0] >= 0;
    if (ok && ndim == 2) ok = x->shape[1] == cols;
    if (ok && k == 4) ok = x->shape[0] == 5;
    if (!ok) {
        char want[64];
        if (k == 4) snprintf(want, sizeof(want), "i64 [5]");
        else if (ndim == 1) snprintf(want, sizeof(want), "i64 [N]");
        else snprintf(want, sizeof(want), "%s [N, %lld]", ed_dtype_name(dtypes[k]),
                      (long long)cols);
        return s->host->errorf(GRM_EFORMAT, "emb-dynamic: tensor '%s': expected %s, got %s "
                               "with %d dims [%lld, %lld]; the checkpoint was written for "
                               "another table config", in->name, want,
                               ed_dtype_name(x->dtype), (int)x->ndim,
                               (long long)x->shape[0],
                               (long long)(x->ndim > 1 ? x->shape[1] : 1));
    }
    if (x->device.type != GRM_DEVICE_CPU)
        return s->host->errorf(GRM_ENOTSUP, "emb-dynamic: tensor '%s': load needs a CPU "
                               "tensor", in->name);
    const size_t elem = grm_dtype_size(dtypes[k]);
    const size_t bytes = (size_t)x->shape[0] * (size_t)cols * elem;
    if (bytes > 0 && x->data == NULL)
        return s->host->errorf(GRM_EINVAL, "emb-dynamic: tensor '%s': data is NULL", in->name);

    void *copy = malloc(bytes > 0 ? bytes : 1);
    if (copy == NULL)
        return s->host->errorf(GRM_ENOMEM, "emb-dynamic: tensor '%s': out of memory staging "
                               "%zu bytes", in->name, bytes);
    if (bytes > 0) memcpy(copy, x->data, bytes);
    free(t->stage.data[k]);
    t->stage.data[k] = copy;
    t->stage.n[k] = x->shape[0];
    t->stage.have |= 1 << k;

    const int32_t need = s->S > 0 ? 0x1F : 0x1B;
    if ((t->stage.have & need) != need) return GRM_OK;
    pthread_rwlock_wrlock(&t->lock);
    const grm_status st = ed_commit(s, t);
    pthread_rwlock_unlock(&t->lock);
    ed_stage_clear(&t->stage);     // a failed set is dropped whole; load it again
    return st;
}
