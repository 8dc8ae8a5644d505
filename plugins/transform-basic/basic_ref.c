/* plugins/transform-basic/basic_ref.c - the reference transform: the fused row-wise pass
 * (hash, mod) and sequence building (buffer every event, one stable O(n log n) sort by
 * key and order at flush, then gather each key's events into lists). Plain loops. */
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

void basic_bucketize(int64_t *out, const void *in, int32_t type, int64_t rows,
                     const double *bounds, int64_t n)
{
    for (int64_t i = 0; i < rows; i++) {
        const double x = type == GRM_COL_I64 ? (double)((const int64_t *)in)[i]
                                             : (double)((const float *)in)[i];
        int64_t lo = 0, hi = n;   // upper bound: first boundary > x
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (bounds[mid] <= x)
                lo = mid + 1;
            else
                hi = mid;
        }
        out[i] = lo;
    }
}

grm_status basic_rows(basic_inst *t, const grm_chunk *in)
{
    const int64_t rows = in->rows;
    for (int32_t j = 0; j < t->nin; j++) {
        const grm_column *const c = &in->cols[j];
        basic_colplan *const p = &t->plan[j];
        grm_column *const o = &t->row[j];

        *o = *c;  // untouched columns point into the input chunk
        o->name = p->name;
        if (!p->hash && p->mod == 0 && p->nbounds == 0) continue;
        void *buf = p->buf;
        const grm_status st = basic_grow(t->host, &buf, &p->buf_cap,
                                         (size_t)rows * sizeof(int64_t));
        if (st != GRM_OK) return st;
        p->buf = buf;
        const int64_t *src = c->values;   /* [rows] */
        if (p->hash) {
            if (p->in_type == GRM_COL_STR) {
                basic_hash_str(p->buf, c->values, c->offsets, rows, t->hash_buckets);
            } else {
                basic_hash_i64(p->buf, c->values, rows, t->hash_buckets);
            }
            src = p->buf;
        } else if (p->nbounds > 0) {
            basic_bucketize(p->buf, c->values, p->in_type, rows, p->bounds, p->nbounds);
            src = p->buf;
        }
        if (p->mod > 0) basic_mod_i64(p->buf, src, rows, p->mod);
        o->type = GRM_COL_I64;
        o->values = p->buf;
        o->offsets = NULL;
    }
    return GRM_OK;
}

/* ---- sequence building ---- */

static size_t basic_elem_size(int32_t type)
{
    return type == GRM_COL_I64 ? sizeof(int64_t) : sizeof(float);
}

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
                          basic_elem_size(s->type));
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
        s->values = host->alloc(basic_cpu, (size_t)total * basic_elem_size(s->type), 0);
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
    *nkeys_out = nkeys;
    goto done;

nomem:
    st = GRM_ENOMEM;
done:
    host->free(basic_cpu, ev);
    basic_free_events(t);
    return st;
}
