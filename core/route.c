/* core/route.c - rows routed by key between ranks before the transforms (route.h). */
#include "route.h"

#include "grm_core.h"
#include "grmcol.h"

#include <grm/rng.h>

#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL   /* as core/grmcol.c: header-only, no library to link */
#include <xxhash.h>

/* The 2-value header every rank sends every rank in a round: the bytes that follow, and
 * the sender's state. */
enum { ROUTE_MORE = 0, ROUTE_DONE = 1, ROUTE_FAILED = 2 };

/* zstd level of the exchanged buffers: the cheapest; the bytes cross a local link. */
#define ROUTE_LEVEL 1

/* One destination's rows of a chunk, gathered into columns of their own. */
typedef struct part {
    grm_column *cols;      /* [ncols] */
    int64_t rows;
} part;

struct grm__router {
    const grm_comm_handle *comm;
    const grm_schema *schema;
    int32_t key, rank, size;
    int32_t *dest;          /* [cap] destination of each row of the current chunk */
    int64_t cap;
    part *parts;            /* [size] */
    void **bufs;            /* [size] encoded parts (malloc'ed by the grmcol writer) */
    int64_t *hdr_s, *hdr_r; /* [2 * size] */
    int64_t *cnt_s, *dsp_s, *cnt_r, *dsp_r;   /* [size] each, counts in elements */
};

int32_t grm__route_owner(const grm_column *col, int64_t row, int32_t nranks)
{
    uint64_t h;
    if (col->type == GRM_COL_STR) {
        const int64_t b = col->offsets[row], e = col->offsets[row + 1];
        h = XXH64((const char *)col->values + b, (size_t)(e - b), 0);
    } else {
        h = grm_mix64((uint64_t)((const int64_t *)col->values)[row]);
    }
    return (int32_t)(h % (uint64_t)nranks);
}

grm_status grm__router_create(const grm_comm_handle *comm, const grm_schema *schema,
                              int32_t key, grm__router **out)
{
    *out = NULL;
    const int32_t t = schema->fields[key].type;
    if (t != GRM_COL_I64 && t != GRM_COL_STR)
        return grm_errorf(GRM_EINVAL, "column '%s' is %s; rows are routed by an i64 or "
                          "string column", schema->fields[key].name,
                          grm__grmcol_type_name(t));
    grm__router *r = calloc(1, sizeof *r);
    if (!r) return grm_errorf(GRM_ENOMEM, "out of memory");
    r->comm = comm;
    r->schema = schema;
    r->key = key;
    r->rank = comm->ops->rank(comm->inst);
    r->size = comm->ops->size(comm->inst);
    const size_t n = (size_t)r->size;
    r->parts = calloc(n, sizeof *r->parts);
    r->bufs = calloc(n, sizeof *r->bufs);
    r->hdr_s = calloc(2 * n, sizeof *r->hdr_s);
    r->hdr_r = calloc(2 * n, sizeof *r->hdr_r);
    r->cnt_s = calloc(4 * n, sizeof *r->cnt_s);
    if (!r->parts || !r->bufs || !r->hdr_s || !r->hdr_r || !r->cnt_s) {
        grm__router_destroy(r);
        return grm_errorf(GRM_ENOMEM, "out of memory");
    }
    r->dsp_s = r->cnt_s + n;
    r->cnt_r = r->cnt_s + 2 * n;
    r->dsp_r = r->cnt_s + 3 * n;
    *out = r;
    return GRM_OK;
}

static void part_free(part *p, int32_t ncols)
{
    for (int32_t i = 0; p->cols && i < ncols; i++) {
        free(p->cols[i].values);
        free(p->cols[i].offsets);
    }
    free(p->cols);
    p->cols = NULL;
    p->rows = 0;
}

static void round_free(grm__router *r)
{
    for (int32_t d = 0; d < r->size; d++) {
        part_free(&r->parts[d], r->schema->nfields);
        free(r->bufs[d]);
        r->bufs[d] = NULL;
    }
}

void grm__router_destroy(grm__router *r)
{
    if (!r) return;
    if (r->parts) round_free(r);
    free(r->dest);
    free(r->parts);
    free(r->bufs);
    free(r->hdr_s);
    free(r->hdr_r);
    free(r->cnt_s);
    free(r);
}

/* The rows of c with dest == d, in chunk order, into p (n of them). */
static grm_status gather(const grm_chunk *c, const int32_t *dest, int32_t d, int64_t n,
                         part *p)
{
    p->rows = n;
    p->cols = calloc((size_t)c->ncols, sizeof *p->cols);
    if (!p->cols) return grm_errorf(GRM_ENOMEM, "out of memory");
    for (int32_t i = 0; i < c->ncols; i++) {
        const grm_column *s = &c->cols[i];
        grm_column *o = &p->cols[i];
        const size_t es = grm_coltype_size(s->type);
        o->name = s->name;
        o->type = s->type;
        o->rows = n;
        if (!s->offsets) {   /* one value per row */
            o->values = malloc((size_t)(n ? n : 1) * es);
            if (!o->values) return grm_errorf(GRM_ENOMEM, "out of memory");
            int64_t k = 0;
            for (int64_t row = 0; row < c->rows; row++)
                if (dest[row] == d)
                    memcpy((char *)o->values + (size_t)k++ * es,
                           (const char *)s->values + (size_t)row * es, es);
            continue;
        }
        o->offsets = malloc((size_t)(n + 1) * sizeof *o->offsets);
        if (!o->offsets) return grm_errorf(GRM_ENOMEM, "out of memory");
        int64_t k = 0, total = 0;
        o->offsets[0] = 0;
        for (int64_t row = 0; row < c->rows; row++)
            if (dest[row] == d) {
                total += s->offsets[row + 1] - s->offsets[row];
                o->offsets[++k] = total;
            }
        o->values = malloc((size_t)(total ? total : 1) * es);
        if (!o->values) return grm_errorf(GRM_ENOMEM, "out of memory");
        k = 0;
        for (int64_t row = 0; row < c->rows; row++)
            if (dest[row] == d) {
                const int64_t b = s->offsets[row], len = s->offsets[row + 1] - b;
                memcpy((char *)o->values + (size_t)o->offsets[k] * es,
                       (const char *)s->values + (size_t)b * es, (size_t)len * es);
                k++;
            }
    }
    return GRM_OK;
}

/* Split c by destination; encode every other rank's part. */
static grm_status split(grm__router *r, const grm_chunk *c)
{
    if (c->ncols != r->schema->nfields || r->key >= c->ncols)
        return grm_errorf(GRM_EINTERNAL, "routing: a chunk of %d columns for a schema of %d",
                          c->ncols, r->schema->nfields);
    if (c->rows > r->cap) {
        int32_t *nd = realloc(r->dest, (size_t)c->rows * sizeof *nd);
        if (!nd) return grm_errorf(GRM_ENOMEM, "out of memory");
        r->dest = nd;
        r->cap = c->rows;
    }
    int64_t *count = r->cnt_s;   /* rows per destination, for now */
    memset(count, 0, (size_t)r->size * sizeof *count);
    for (int64_t row = 0; row < c->rows; row++) {
        r->dest[row] = grm__route_owner(&c->cols[r->key], row, r->size);
        count[r->dest[row]]++;
    }
    grm_status st = GRM_OK;
    for (int32_t d = 0; d < r->size && st == GRM_OK; d++) {
        int64_t n = count[d];
        r->hdr_s[2 * d] = 0;
        if (n == 0) continue;
        if ((st = gather(c, r->dest, d, n, &r->parts[d])) != GRM_OK || d == r->rank) continue;
        grm__grmcol_err e = { { 0 } };
        size_t len = 0;
        st = grm__grmcol_write_buffer(r->schema->fields, c->ncols, r->parts[d].cols, n, n,
                                      ROUTE_LEVEL, &r->bufs[d], &len, &e);
        if (st != GRM_OK) st = grm_errorf(st, "routing rows to rank %d: %s", d, e.msg);
        r->hdr_s[2 * d] = (int64_t)len;
        part_free(&r->parts[d], c->ncols);   /* the buffer carries it now */
        r->parts[d].rows = n;
    }
    return st;
}

/* Decode the one-row-group buffer of `len` bytes sent by rank `from` and hand it to fn. */
static grm_status deliver(const void *buf, size_t len, int32_t from, grm__route_fn fn,
                          void *ctx)
{
    char name[64];
    snprintf(name, sizeof name, "(rows from rank %d)", from);
    grm__grmcol_meta m = { 0 };
    grm__grmcol_err e = { { 0 } };
    grm_status st = grm__grmcol_parse_buffer(buf, len, name, &m, &e);
    if (st != GRM_OK) return grm_errorf(st, "routing: %s", e.msg);
    grm_column *cols = calloc((size_t)m.ncols + 1, sizeof *cols);
    void **payload = calloc((size_t)m.ncols + 1, sizeof *payload);
    if (!cols || !payload) st = grm_errorf(GRM_ENOMEM, "out of memory");
    for (int64_t g = 0; g < m.ngroups && st == GRM_OK; g++) {
        for (int32_t i = 0; i < m.ncols && st == GRM_OK; i++) {
            const grm__grmcol_chunk *k = &m.chunks[g * m.ncols + i];
            free(payload[i]);
            payload[i] = malloc((size_t)k->usize + 8);
            if (!payload[i]) {
                st = grm_errorf(GRM_ENOMEM, "out of memory");
                break;
            }
            st = grm__grmcol_decode(&m, name, g, i, (const char *)buf + k->offset, payload[i],
                                    NULL, &e);
            if (st != GRM_OK) st = grm_errorf(st, "routing: %s", e.msg);
            else grm__grmcol_column(&m, g, i, payload[i], &cols[i]);
        }
        if (st == GRM_OK) {
            grm_chunk c = { sizeof c, m.ncols, m.group_rows[g], cols };
            st = fn(ctx, &c);
        }
    }
    for (int32_t i = 0; payload && i < m.ncols; i++) free(payload[i]);
    free(payload);
    free(cols);
    grm__grmcol_meta_fini(&m);
    return st;
}

grm_status grm__route_round(grm__router *r, const grm_chunk *c, int failed, grm__route_fn fn,
                            void *ctx, int *done)
{
    const grm_comm_ops *ops = r->comm->ops;
    void *ci = r->comm->inst;
    const int32_t n = r->size;
    grm_status mine = GRM_OK, st;
    *done = 1;
    memset(r->hdr_s, 0, 2 * (size_t)n * sizeof *r->hdr_s);
    if (!failed && c && c->rows > 0 && (mine = split(r, c)) != GRM_OK) failed = 1;
    int64_t state = failed ? ROUTE_FAILED : c ? ROUTE_MORE : ROUTE_DONE;
    for (int32_t d = 0; d < n; d++) {
        if (failed) r->hdr_s[2 * d] = 0;
        r->hdr_s[2 * d + 1] = state;
        r->cnt_s[d] = r->cnt_r[d] = 2;
        r->dsp_s[d] = r->dsp_r[d] = 2 * d;
    }
    if ((st = ops->alltoallv(ci, r->hdr_r, r->cnt_r, r->dsp_r, r->hdr_s, r->cnt_s, r->dsp_s,
                             GRM_DTYPE_I64)) != GRM_OK)
        goto out;   /* the link is gone: *done stays 1 */

    /* the bytes: every other rank's encoded part */
    int64_t ssum = 0, rsum = 0;
    for (int32_t d = 0; d < n; d++) {
        r->cnt_s[d] = d == r->rank ? 0 : r->hdr_s[2 * d];
        r->dsp_s[d] = ssum;
        ssum += r->cnt_s[d];
        r->cnt_r[d] = d == r->rank ? 0 : r->hdr_r[2 * d];
        r->dsp_r[d] = rsum;
        rsum += r->cnt_r[d];
    }
    char *sbuf = malloc((size_t)(ssum ? ssum : 1)), *rbuf = malloc((size_t)(rsum ? rsum : 1));
    if (!sbuf || !rbuf) {   /* the peers wait in the exchange: no way back from here */
        free(sbuf);
        free(rbuf);
        st = grm_errorf(GRM_ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t d = 0; d < n; d++)
        if (r->cnt_s[d]) memcpy(sbuf + r->dsp_s[d], r->bufs[d], (size_t)r->cnt_s[d]);
    st = ops->alltoallv(ci, rbuf, r->cnt_r, r->dsp_r, sbuf, r->cnt_s, r->dsp_s, GRM_DTYPE_U8);
    free(sbuf);

    if (st != GRM_OK) {
        free(rbuf);
        goto out;
    }
    int32_t bad = -1;
    *done = 0;
    int all_done = 1;
    for (int32_t s = 0; s < n; s++) {
        if (r->hdr_r[2 * s + 1] == ROUTE_FAILED && bad < 0 && s != r->rank) bad = s;
        if (r->hdr_r[2 * s + 1] != ROUTE_DONE) all_done = 0;
    }
    /* a failure known to all ends the rounds; one of fn's this round is told in the next */
    *done = all_done || failed || bad >= 0;
    /* the rows routed here, in sender order (this rank's own part among them) */
    for (int32_t s = 0; s < n && st == GRM_OK && !failed && bad < 0; s++) {
        if (s == r->rank && r->parts[s].cols) {
            grm_chunk own = { sizeof own, r->schema->nfields, r->parts[s].rows,
                              r->parts[s].cols };
            st = fn(ctx, &own);
        } else if (s != r->rank && r->cnt_r[s] > 0) {
            st = deliver(rbuf + r->dsp_r[s], (size_t)r->cnt_r[s], s, fn, ctx);
        }
    }
    free(rbuf);
    if (st == GRM_OK && mine == GRM_OK && bad >= 0 && !failed)
        st = grm_errorf(GRM_EIO, "rank %d of %d failed while reading its share of the input "
                        "(its own message says why); this rank stops too", bad, n);
out:
    round_free(r);
    return mine != GRM_OK ? mine : st;
}

grm_status grm__gather_bytes(const grm_comm_handle *comm, void *all, const void *mine,
                             size_t bytes)
{
    return comm->ops->allgather(comm->inst, all, mine, (int64_t)bytes, GRM_DTYPE_U8);
}

grm_status grm__sum_ranks(const grm_comm_handle *comm, double *v, int32_t n)
{
    const int32_t size = comm->ops->size(comm->inst);
    double *all = malloc((size_t)size * (size_t)(n ? n : 1) * sizeof *all);
    if (!all) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm_status st = grm__gather_bytes(comm, all, v, (size_t)n * sizeof *v);
    for (int32_t k = 0; st == GRM_OK && k < n; k++) {
        v[k] = 0;
        for (int32_t r = 0; r < size; r++) v[k] += all[(size_t)r * n + k];
    }
    free(all);
    return st;
}

grm_status grm__gatherv(const grm_comm_handle *comm, const void *mine, int64_t n_mine,
                        size_t item, void **all, int64_t *n_all)
{
    const int32_t n = comm->ops->size(comm->inst);
    *all = NULL;
    *n_all = 0;
    /* counts in bytes: what rank p receives from each rank, what this rank sends to each */
    int64_t *c = calloc(4 * (size_t)n, sizeof *c);
    if (!c) return grm_errorf(GRM_ENOMEM, "out of memory");
    int64_t *rcount = c, *rdisp = c + n, *scount = c + 2 * n, *sdisp = c + 3 * n;
    const int64_t mine_bytes = n_mine * (int64_t)item;
    grm_status st = comm->ops->allgather(comm->inst, rcount, &mine_bytes, 1, GRM_DTYPE_I64);
    int64_t total = 0;
    for (int32_t r = 0; st == GRM_OK && r < n; r++) {
        rdisp[r] = total;
        total += rcount[r];
        scount[r] = mine_bytes;   /* the same bytes to every rank, all from offset 0 */
        sdisp[r] = 0;
    }
    char *buf = st == GRM_OK ? malloc((size_t)(total ? total : 1)) : NULL;
    if (st == GRM_OK && !buf) st = grm_errorf(GRM_ENOMEM, "out of memory");
    if (st == GRM_OK)
        st = comm->ops->alltoallv(comm->inst, buf, rcount, rdisp, mine, scount, sdisp,
                                  GRM_DTYPE_U8);
    free(c);
    if (st != GRM_OK) {
        free(buf);
        return st;
    }
    *all = buf;
    *n_all = total / (int64_t)item;
    return GRM_OK;
}
