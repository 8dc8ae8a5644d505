/* plugins/transform-basic/basic_ref.c - the reference kernels of the feature engine
 * (RecIS §2.1 Feature Engine, Table 1 bucketize/mod): hash, bucketize, mod and cross of a
 * range of values, truncate/pad of a range of list rows, and sequence building (buffer
 * every event, one stable O(n log n) sort by key and order at flush, then gather each
 * key's events into lists), and per-event histories (buffer every row, the same sort, then
 * each row's window of its key's events). Plain loops; basic_cpu.c fuses and parallelises
 * the row-wise pass. */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "basic.h"

static const grm_device basic_cpu = { GRM_DEVICE_CPU, 0 };

grm_status basic_grow(const grm_host_api *host, void **p, size_t *cap, size_t need)
{
    if (need <= *cap) return GRM_OK;
    size_t ncap = *cap > 0 ? *cap : 256;
    while (ncap < need) ncap *= 2;
    void *const q = host->alloc(basic_cpu, ncap, 0);
    if (q == NULL) return GRM_ENOMEM;
    if (*p != NULL) {
        memcpy(q, *p, *cap);
        host->free(basic_cpu, *p);
    }
    *p = q;
    *cap = ncap;
    return GRM_OK;
}

/* ---- row-wise kernels ---- */

/* The 64-bit XXH3 hash masked to a non-negative int64, then reduced to `buckets` when
 * that is positive. Masking (not shifting) keeps the low bits, which the modulo uses. */
static int64_t basic_hash_finish(uint64_t h, int64_t buckets)
{
    const int64_t v = (int64_t)(h & (uint64_t)INT64_MAX);
    return buckets > 0 ? v % buckets : v;
}

void basic_hash_str(int64_t *out, const char *bytes, const int64_t *offsets, int64_t rows,
                    int64_t buckets)
{
    for (int64_t i = 0; i < rows; i++) {
        const size_t len = (size_t)(offsets[i + 1] - offsets[i]);
        const char *const s = len > 0 ? bytes + offsets[i] : "";
        out[i] = basic_hash_finish(XXH3_64bits(s, len), buckets);
    }
}

void basic_hash_i64(int64_t *out, const int64_t *in, int64_t rows, int64_t buckets)
{
    for (int64_t i = 0; i < rows; i++) {
        // The value's 8 bytes in little-endian order, whatever the host's byte order,
        // so the hash of an id is the same on every machine.
        const uint64_t u = (uint64_t)in[i];
        unsigned char b[8];
        for (int k = 0; k < 8; k++) b[k] = (unsigned char)(u >> (8 * k));
        out[i] = basic_hash_finish(XXH3_64bits(b, sizeof(b)), buckets);
    }
}

void basic_mod_i64(int64_t *out, const int64_t *in, int64_t rows, int64_t n)
{
    for (int64_t i = 0; i < rows; i++) {
        // ((x % n) + n) % n without the overflow of x % n + n for n near INT64_MAX.
        const int64_t r = in[i] % n;
        out[i] = r < 0 ? r + n : r;
    }
}

int64_t basic_cross_id(int64_t a, int64_t b, int64_t n)
{
    // The 16 bytes of (a, b), each little-endian whatever the host's byte order, so a cross
    // id is the same on every machine; XXH3 mixes all 128 input bits into the 64 output
    // bits, so ids that differ in one source still spread over every bucket of `% n`.
    const uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    unsigned char k[16];
    for (int i = 0; i < 8; i++) {
        k[i] = (unsigned char)(ua >> (8 * i));
        k[8 + i] = (unsigned char)(ub >> (8 * i));
    }
    return basic_hash_finish(XXH3_64bits(k, sizeof(k)), n);
}

void basic_stage1(const basic_colplan *p, int64_t *out, const grm_column *c, int64_t v0,
                  int64_t n, int64_t hash_buckets)
{
    const int32_t t = p->in_type;
    const int32_t elem = t == GRM_COL_F32 || t == GRM_COL_LIST_F32 ? GRM_COL_F32 : GRM_COL_I64;
    const int64_t *src = out;
    if (p->hash) {
        if (t == GRM_COL_STR) {
            basic_hash_str(out, c->values, c->offsets + v0, n, hash_buckets);
        } else {
            basic_hash_i64(out, (const int64_t *)c->values + v0, n, hash_buckets);
        }
    } else if (p->nbounds > 0) {
        const void *const in = elem == GRM_COL_F32 ? (const void *)((const float *)c->values + v0)
                                                   : (const void *)((const int64_t *)c->values
                                                                    + v0);
        grm_bucketize(out, in, elem == GRM_COL_F32 ? GRM_DTYPE_F32 : GRM_DTYPE_I64, n, p->bounds,
                      p->nbounds);
    } else {
        src = (const int64_t *)c->values + v0;   // mod alone reads the input ids
    }
    if (p->mod > 0) basic_mod_i64(out, src, n, p->mod);
}

/* ---- truncate and pad (stage 2) ---- */

void basic_len_keep(const basic_lenop *l, const int64_t *inoffs, int64_t r, int64_t *b,
                    int64_t *e)
{
    *b = inoffs[r];
    *e = inoffs[r + 1];
    if (l->trunc > 0 && *e - *b > l->trunc) {
        if (l->first) {
            *e = *b + l->trunc;
        } else {
            *b = *e - l->trunc;   // the most recent: lists are ordered oldest first
        }
    }
}

void basic_len_offsets(const basic_lenop *l, int64_t *out, const int64_t *in, int64_t rows)
{
    out[0] = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t len = in[r + 1] - in[r];
        if (l->trunc > 0 && len > l->trunc) len = l->trunc;
        if (l->pad > 0 && len < l->pad) len = l->pad;
        out[r + 1] = out[r] + len;
    }
}

void basic_len_pad(const basic_lenop *l, size_t elem, int64_t from, int64_t to)
{
    for (int64_t i = from; i < to; i++) {
        if (elem == sizeof(float)) {
            ((float *)l->values)[i] = l->pad_f32;
        } else {
            ((int64_t *)l->values)[i] = l->pad_i64;
        }
    }
}

void basic_len_rows(const basic_lenop *l, const void *in, const int64_t *inoffs, size_t elem,
                    int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++) {
        int64_t b, e;
        basic_len_keep(l, inoffs, r, &b, &e);
        const int64_t dst = l->offsets[r];
        if (e > b) {
            memcpy((char *)l->values + (size_t)dst * elem, (const char *)in + (size_t)b * elem,
                   (size_t)(e - b) * elem);
        }
        basic_len_pad(l, elem, dst + (e - b), l->offsets[r + 1]);
    }
}

/* ---- sequence building ---- */

/* Append rows values of `src` to the buffer *p of *cap bytes that holds `have` values. */
static grm_status basic_append(const grm_host_api *host, void **p, size_t *cap, int64_t have,
                               const void *src, int64_t rows, size_t elem)
{
    if (rows == 0) return GRM_OK;
    const grm_status st = basic_grow(host, p, cap, (size_t)(have + rows) * elem);
    if (st != GRM_OK) return st;
    memcpy((char *)*p + (size_t)have * elem, src, (size_t)rows * elem);
    return GRM_OK;
}

grm_status basic_seq_append(basic_inst *t, int64_t rows)
{
    const grm_host_api *const host = t->host;
    const int64_t n = t->nevents;
    grm_status st;
    void *p = t->ev_key;

    st = basic_append(host, &p, &t->ev_key_cap, n, t->row[t->key_src].values, rows,
                      sizeof(int64_t));
    t->ev_key = p;
    if (st != GRM_OK) return st;
    if (t->order_src >= 0) {
        p = t->ev_order;
        st = basic_append(host, &p, &t->ev_order_cap, n, t->row[t->order_src].values, rows,
                          sizeof(int64_t));
        t->ev_order = p;
        if (st != GRM_OK) return st;
    }
    for (int32_t j = 0; j < t->nseq; j++) {
        basic_seqcol *const s = &t->seqcols[j];
        st = basic_append(host, &s->events, &s->events_cap, n, t->row[s->src].values, rows,
                          grm_coltype_size(s->type));
        if (st != GRM_OK) return st;
    }
    t->nevents = n + rows;
    return GRM_OK;
}

static int basic_event_cmp(const void *pa, const void *pb)
{
    const basic_event *const a = pa, *const b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    if (a->order != b->order) return a->order < b->order ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Events a key of `len` events keeps: all, or the last max_length of them. */
static int64_t basic_take(const basic_inst *t, int64_t len)
{
    return t->max_length > 0 && len > t->max_length ? t->max_length : len;
}

static void basic_free_events(basic_inst *t)
{
    const grm_host_api *const host = t->host;
    host->free(basic_cpu, t->ev_key);
    host->free(basic_cpu, t->ev_order);
    t->ev_key = NULL;
    t->ev_order = NULL;
    t->ev_key_cap = 0;
    t->ev_order_cap = 0;
    for (int32_t j = 0; j < t->nseq; j++) {
        host->free(basic_cpu, t->seqcols[j].events);
        t->seqcols[j].events = NULL;
        t->seqcols[j].events_cap = 0;
    }
}

void basic_seq_free(basic_inst *t)
{
    basic_free_events(t);
    for (int32_t j = 0; j < t->nseq; j++) {
        t->host->free(basic_cpu, t->seqcols[j].values);
        t->host->free(basic_cpu, t->seqcols[j].offsets);
        t->seqcols[j].values = NULL;
        t->seqcols[j].offsets = NULL;
    }
    t->host->free(basic_cpu, t->keys_out);
    t->keys_out = NULL;
    for (int32_t j = 0; j < t->nseq; j++) {
        basic_lenop *const l = &t->seqcols[j].len;
        t->host->free(basic_cpu, l->offsets);
        t->host->free(basic_cpu, l->values);
        l->offsets = NULL;
        l->values = NULL;
        l->offsets_cap = l->values_cap = 0;
    }
}

grm_status basic_seq_build(basic_inst *t, int64_t *nkeys_out)
{
    const grm_host_api *const host = t->host;
    const int64_t n = t->nevents;
    basic_event *ev = NULL;   /* [n] */
    int64_t nkeys = 0, total = 0, dropped_keys = 0, dropped_events = 0, cut_keys = 0;
    grm_status st = GRM_OK;

    *nkeys_out = 0;
    if (n > 0) {
        ev = host->alloc(basic_cpu, (size_t)n * sizeof(*ev), 0);
        if (ev == NULL) return GRM_ENOMEM;
    }
    for (int64_t i = 0; i < n; i++) {
        ev[i].key = t->ev_key[i];
        ev[i].order = t->ev_order != NULL ? t->ev_order[i] : 0;
        ev[i].idx = i;
    }
    // The arrival index breaks ties, so this unstable sort yields the stable order.
    if (n > 1) qsort(ev, (size_t)n, sizeof(*ev), basic_event_cmp);

    // Pass 1: how many keys survive min_length and how many events they keep.
    for (int64_t g0 = 0, g1; g0 < n; g0 = g1) {
        for (g1 = g0 + 1; g1 < n && ev[g1].key == ev[g0].key; g1++) continue;
        const int64_t len = g1 - g0;
        if (len < t->min_length) {
            dropped_keys++;
            dropped_events += len;
            continue;
        }
        cut_keys += basic_take(t, len) < len;
        nkeys++;
        total += basic_take(t, len);
    }
    if (dropped_keys > 0) {
        host->log(GRM_LOG_INFO, "transform-basic", "dropped %lld keys of %s (%lld events) "
                  "with fewer than min_length = %lld events", (long long)dropped_keys,
                  t->plan[t->key_src].name, (long long)dropped_events,
                  (long long)t->min_length);
    }
    if (cut_keys > 0) {
        host->log(GRM_LOG_INFO, "transform-basic", "kept the last %lld events of %lld keys "
                  "of %s (max_length)", (long long)t->max_length, (long long)cut_keys,
                  t->plan[t->key_src].name);
    }
    if (nkeys == 0) goto done;

    // Pass 2: gather each kept key's last events, oldest first.
    t->keys_out = host->alloc(basic_cpu, (size_t)nkeys * sizeof(int64_t), 0);
    if (t->keys_out == NULL) goto nomem;
    for (int32_t j = 0; j < t->nseq; j++) {
        basic_seqcol *const s = &t->seqcols[j];
        s->offsets = host->alloc(basic_cpu, (size_t)(nkeys + 1) * sizeof(int64_t), 0);
        s->values = host->alloc(basic_cpu, (size_t)total * grm_coltype_size(s->type), 0);
        if (s->offsets == NULL || s->values == NULL) goto nomem;
        s->offsets[0] = 0;
    }
    int64_t k = 0, at = 0;
    for (int64_t g0 = 0, g1; g0 < n; g0 = g1) {
        for (g1 = g0 + 1; g1 < n && ev[g1].key == ev[g0].key; g1++) continue;
        const int64_t len = g1 - g0;
        if (len < t->min_length) continue;
        const int64_t take = basic_take(t, len);
        t->keys_out[k] = ev[g0].key;
        for (int32_t j = 0; j < t->nseq; j++) {
            basic_seqcol *const s = &t->seqcols[j];
            for (int64_t e = g1 - take, o = at; e < g1; e++, o++) {
                const int64_t i = ev[e].idx;
                if (s->type == GRM_COL_I64) {
                    ((int64_t *)s->values)[o] = ((const int64_t *)s->events)[i];
                } else {
                    ((float *)s->values)[o] = ((const float *)s->events)[i];
                }
            }
            s->offsets[k + 1] = at + take;
        }
        at += take;
        k++;
    }

    // The emitted chunk before `keep`: the key, then one list per sequence column.
    t->full[0] = (grm_column){ .name = t->plan[t->key_src].name, .type = GRM_COL_I64,
                               .rows = nkeys, .values = t->keys_out, .offsets = NULL };
    for (int32_t j = 0; j < t->nseq; j++) {
        const basic_seqcol *const s = &t->seqcols[j];
        t->full[1 + j] = (grm_column){
            .name = t->plan[s->src].name,
            .type = s->type == GRM_COL_I64 ? GRM_COL_LIST_I64 : GRM_COL_LIST_F32,
            .rows = nkeys, .values = s->values, .offsets = s->offsets };
    }

    // Truncate, then pad, the emitted lists of the sequence columns that declare it.
    for (int32_t j = 0; j < t->nseq; j++) {
        basic_seqcol *const s = &t->seqcols[j];
        if (!s->has_len) continue;
        basic_lenop *const l = &s->len;
        const size_t elem = grm_coltype_size(s->type);
        void *p = l->offsets;
        st = basic_grow(host, &p, &l->offsets_cap, (size_t)(nkeys + 1) * sizeof(int64_t));
        l->offsets = p;
        if (st != GRM_OK) goto done;
        basic_len_offsets(l, l->offsets, s->offsets, nkeys);
        p = l->values;
        st = basic_grow(host, &p, &l->values_cap, (size_t)l->offsets[nkeys] * elem);
        l->values = p;
        if (st != GRM_OK) goto done;
        basic_len_rows(l, s->values, s->offsets, elem, 0, nkeys);
        t->full[1 + j].values = l->values;
        t->full[1 + j].offsets = l->offsets;
    }
    *nkeys_out = nkeys;
    goto done;

nomem:
    st = GRM_ENOMEM;
done:
    host->free(basic_cpu, ev);
    basic_free_events(t);
    return st;
}

/* ---- per-event history: each row's historical sequence (MTGRBoost §2 T_hst) ---- */

/* Bytes per value of a column of `type` (STR: bytes). */
static size_t basic_col_elem(int32_t type)
{
    switch (type) {
    case GRM_COL_STR: return 1;
    case GRM_COL_F32:
    case GRM_COL_LIST_F32: return sizeof(float);
    default: return sizeof(int64_t);
    }
}

grm_status basic_hist_append(basic_inst *t, int64_t rows)
{
    const grm_host_api *const host = t->host;
    const int64_t n = t->nrows;
    grm_status st;

    for (int32_t j = 0; j < t->nplan; j++) {
        basic_buffered *const b = &t->kept[j];
        if (!b->need) continue;
        const grm_column *const c = &t->row[j];
        const int32_t type = t->plan[j].out_type;
        const size_t elem = basic_col_elem(type);
        const int64_t v0 = type >= GRM_COL_STR ? c->offsets[0] : 0;
        const int64_t nv = type >= GRM_COL_STR ? c->offsets[rows] - v0 : rows;
        void *p;
        if (type >= GRM_COL_STR) {
            // Offsets rebased onto the buffer: row r of this chunk is row n + r of all.
            p = b->offsets;
            st = basic_grow(host, &p, &b->offsets_cap, (size_t)(n + rows + 1) * sizeof(int64_t));
            b->offsets = p;
            if (st != GRM_OK) return st;
            b->offsets[0] = 0;
            for (int64_t r = 0; r < rows; r++) {
                b->offsets[n + r + 1] = b->nvals + (c->offsets[r + 1] - v0);
            }
        }
        // At least one byte, so an emitted column never has NULL values.
        const size_t need = (size_t)(b->nvals + nv) * elem;
        p = b->values;
        st = basic_grow(host, &p, &b->values_cap, need > 0 ? need : 1);
        b->values = p;
        if (st != GRM_OK) return st;
        if (nv > 0) {
            memcpy((char *)b->values + (size_t)b->nvals * elem,
                   (const char *)c->values + (size_t)v0 * elem, (size_t)nv * elem);
        }
        b->nvals += nv;
    }
    t->nrows = n + rows;
    return GRM_OK;
}

/* One history column's gather, split over rows by host->parallel_for. */
typedef struct basic_hist_job {
    const basic_event *ev;   /* [n] sorted by (key, order, arrival) */
    const int64_t *win;      /* [n] per arrival row: sorted position of its window's start */
    const int64_t *offs;     /* [n+1] per arrival row: list offsets */
    const void *src;         /* [n] the source column, arrival order, int64_t or float */
    void *sorted;            /* [n] the source column in sorted order */
    void *out;               /* [offs[n]] the emitted lists */
    size_t elem;             /* 4 (f32) or 8 (i64) */
} basic_hist_job;

/* sorted[e] = src[ev[e].idx] for e in [begin, end). */
static grm_status basic_hist_sort_task(void *ctx, int64_t begin, int64_t end)
{
    const basic_hist_job *const j = ctx;
    if (j->elem == sizeof(int64_t)) {
        const int64_t *const src = j->src;
        int64_t *const dst = j->sorted;
        for (int64_t e = begin; e < end; e++) dst[e] = src[j->ev[e].idx];
    } else {
        const float *const src = j->src;
        float *const dst = j->sorted;
        for (int64_t e = begin; e < end; e++) dst[e] = src[j->ev[e].idx];
    }
    return GRM_OK;
}

/* Row i's list is the sorted slice [win[i], win[i] + len): its key's events, oldest first,
 * contiguous after the sort. Each row writes its own range: any thread count gives the
 * same bytes. */
static grm_status basic_hist_rows_task(void *ctx, int64_t begin, int64_t end)
{
    const basic_hist_job *const j = ctx;
    for (int64_t i = begin; i < end; i++) {
        const int64_t len = j->offs[i + 1] - j->offs[i];
        if (len > 0) {
            memcpy((char *)j->out + (size_t)j->offs[i] * j->elem,
                   (const char *)j->sorted + (size_t)j->win[i] * j->elem, (size_t)len * j->elem);
        }
    }
    return GRM_OK;
}

/* Rows per parallel_for range of the history gather (a few µs of copying each). */
#define BASIC_HIST_GRAIN 4096

grm_status basic_hist_build(basic_inst *t)
{
    const grm_host_api *const host = t->host;
    const int64_t n = t->nrows;
    const int64_t *const keys = t->kept[t->key_src].values;                    /* [n] */
    const int64_t *const order = t->order_src >= 0 ? t->kept[t->order_src].values : NULL;
    basic_event *ev = NULL;     /* [n] */
    int64_t *win = NULL;        /* [n] */
    void *sorted = NULL;        /* [n] int64_t or float */
    int64_t nkeys = 0;
    grm_status st = GRM_OK;

    if (n == 0) return GRM_OK;
    ev = host->alloc(basic_cpu, (size_t)n * sizeof(*ev), 0);
    win = host->alloc(basic_cpu, (size_t)n * sizeof(*win), 0);
    sorted = host->alloc(basic_cpu, (size_t)n * sizeof(int64_t), 0);
    t->hist_offsets = host->alloc(basic_cpu, (size_t)(n + 1) * sizeof(int64_t), 0);
    if (ev == NULL || win == NULL || sorted == NULL || t->hist_offsets == NULL) goto nomem;
    for (int64_t i = 0; i < n; i++) {
        ev[i].key = keys[i];
        ev[i].order = order != NULL ? order[i] : 0;
        ev[i].idx = i;
    }
    // The arrival index breaks ties, so this unstable sort yields the stable order
    // (key, order, arrival) once; every key's events are then one contiguous run.
    if (n > 1) qsort(ev, (size_t)n, sizeof(*ev), basic_event_cmp);

    // Row ev[e].idx sees its key's events [g0, e + self), of which the last history_length:
    // the window [max(g0, e + self - L), e + self). Lengths first, then offsets in arrival
    // order (the output keeps every row where it arrived).
    int64_t *const offs = t->hist_offsets;
    offs[0] = 0;
    for (int64_t g0 = 0, g1; g0 < n; g0 = g1) {
        for (g1 = g0 + 1; g1 < n && ev[g1].key == ev[g0].key; g1++) continue;
        nkeys++;
        for (int64_t e = g0; e < g1; e++) {
            const int64_t stop = e + t->hist_self;
            const int64_t start = stop - t->hist_length > g0 ? stop - t->hist_length : g0;
            win[ev[e].idx] = start;
            offs[ev[e].idx + 1] = stop - start;
        }
    }
    for (int64_t i = 0; i < n; i++) offs[i + 1] += offs[i];
    host->log(GRM_LOG_INFO, "transform-basic", "history by %s: %lld rows, %lld keys, %lld "
              "values per list column (history_length %lld)", t->plan[t->key_src].name,
              (long long)n, (long long)nkeys, (long long)offs[n], (long long)t->hist_length);

    for (int32_t k = 0; k < t->nhist; k++) {
        basic_histcol *const h = &t->histcols[k];
        const size_t elem = grm_coltype_size(h->type);
        const size_t bytes = (size_t)offs[n] * elem;
        h->values = host->alloc(basic_cpu, bytes > 0 ? bytes : 1, 0);
        if (h->values == NULL) goto nomem;
        basic_hist_job job = { .ev = ev, .win = win, .offs = offs,
                               .src = t->kept[h->src].values, .sorted = sorted,
                               .out = h->values, .elem = elem };
        st = host->parallel_for(n, BASIC_HIST_GRAIN, basic_hist_sort_task, &job);
        if (st == GRM_OK) st = host->parallel_for(n, BASIC_HIST_GRAIN, basic_hist_rows_task, &job);
        if (st != GRM_OK) goto done;
    }

    // The emitted chunk before `keep`: every buffered row-wise column, then the lists.
    for (int32_t j = 0; j < t->nplan; j++) {
        const basic_buffered *const b = &t->kept[j];
        const int32_t type = t->plan[j].out_type;
        t->full[j] = (grm_column){ .name = t->plan[j].name, .type = type, .rows = n,
                                   .values = b->values,
                                   .offsets = type >= GRM_COL_STR ? b->offsets : NULL };
    }
    for (int32_t k = 0; k < t->nhist; k++) {
        const basic_histcol *const h = &t->histcols[k];
        t->full[t->nplan + k] = (grm_column){
            .name = h->name, .type = h->type == GRM_COL_I64 ? GRM_COL_LIST_I64
                                                            : GRM_COL_LIST_F32,
            .rows = n, .values = h->values, .offsets = offs };
    }
    goto done;

nomem:
    st = host->errorf(GRM_ENOMEM, "transform-basic: out of memory building the history of "
                      "%lld rows", (long long)n);
done:
    host->free(basic_cpu, ev);
    host->free(basic_cpu, win);
    host->free(basic_cpu, sorted);
    return st;
}

void basic_hist_free(basic_inst *t)
{
    const grm_host_api *const host = t->host;
    if (t->kept != NULL) {
        for (int32_t j = 0; j < t->nplan; j++) {
            host->free(basic_cpu, t->kept[j].values);
            host->free(basic_cpu, t->kept[j].offsets);
            t->kept[j] = (basic_buffered){ .need = t->kept[j].need };
        }
    }
    if (t->histcols != NULL) {
        for (int32_t k = 0; k < t->nhist; k++) {
            host->free(basic_cpu, t->histcols[k].values);
            t->histcols[k].values = NULL;
        }
    }
    host->free(basic_cpu, t->hist_offsets);
    t->hist_offsets = NULL;
}
