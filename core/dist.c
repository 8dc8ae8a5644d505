/* core/dist.c - model-parallel embedding lookup and update with two-stage id dedup; see
 * dist.h for the algorithm (MTGRBoost §3, §4.3; FusedRec §3, Algorithm 1; TurboGR §4.2.1).
 * Reuses core/sparse.h for segment unique, ids partition, gather and scatter-add. */
#include "dist.h"

#include <stdlib.h>
#include <string.h>

#include "grm_core.h"
#include "sparse.h"

/* A growable malloc buffer: grows on first use, reused afterwards (STYLE.md §8). */
typedef struct dist_buf {
    void *p;
    size_t cap;
} dist_buf;

/* Routing of the last lookup (or update with ids) of one table: what the update needs to send
 * gradients back along the same paths (FusedRec §3: I_u, I_s, I_l kept per rank). */
typedef struct dist_route {
    int valid;              /* 1 when the fields below describe the last routed call */
    int have_inv2;          /* stage-2 inverse computed */
    int64_t n_in;           /* the caller's n */
    int64_t u1;             /* ids after stage 1 (= n_in without dedup1) */
    dist_buf uniq1;         /* int64 [u1]: stage-1 unique ids (dedup1 only) */
    dist_buf inv1;          /* int64 [n_in]: I_u, uniq1[inv1[j]] == ids[j] (dedup1 only) */
    dist_buf pos;           /* int64 [u1]: I_s, sorted position of each sent id */
    dist_buf sent;          /* int64 [u1]: the ids sent, in the caller's (stage-1) order */
    int64_t *scounts, *sdispls, *rcounts, *rdispls;   /* [N] each, in ids */
    int64_t nrecv;
    dist_buf recv_ids;      /* int64 [nrecv]: ids received as owner, requester-major */
    dist_buf inv2;          /* int64 [nrecv]: I_l, uniq2[inv2[j]] == recv_ids[j] */
    dist_buf uniq2;         /* int64 [nu] */
    int64_t nu;
} dist_route;

typedef struct dist_table {
    int32_t dim;
    dist_route r;
    grm__dist_stats last[2], total[2];
    int64_t *served;        /* [nfeatures] ids served per feature, or NULL */
} dist_table;

struct grm__dist {
    grm_comm_handle comm;
    const grm_emb_ops *ops;
    void *store;
    grm__dist_opts opts;
    int32_t ntables;
    dist_table *tables;     /* [ntables] */
    int32_t N, me;          /* world size, this rank */
    int32_t I, M;           /* group size, groups */
    int32_t base, local;    /* first rank of this rank's group, position in it */
    int32_t last_table[2];  /* table of the most recent lookup / update, or -1 */
    grm__sparse_work work;
    /* scratch, reused by every call */
    int64_t *c_send, *c_recv, *c_one_s, *c_disp;   /* [N] */
    int64_t *x_sc, *x_sd, *x_rc, *x_rd;                       /* [N] */
    int64_t *part;                                            /* [I] */
    dist_buf sorted, sfeat, ufeat, rfeat, fa, fb, fc, ia, ib;
    /* opts.ahead: the next batch's keys of the lookup in progress, and their exchange */
    const int64_t *ahead;
    int64_t n_ahead;
    int64_t *a_sc, *a_sd, *a_rc, *a_rd, *c2s, *c2r;          /* [N] each; c2 [2N] */
    dist_buf asend, arecv;
    int64_t n_got;
};

static const char *const op_name[2] = { "lookup", "update" };

/* ---- small helpers ---- */

static grm_status buf_get(dist_buf *b, size_t bytes, void **out)
{
    if (bytes == 0) bytes = 1;
    if (b->cap < bytes) {
        size_t cap = bytes + bytes / 4 + 64;
        void *p = malloc(cap);
        if (!p) return grm_errorf(GRM_ENOMEM, "dist: out of memory allocating %zu bytes", cap);
        free(b->p);
        b->p = p;
        b->cap = cap;
    }
    *out = b->p;
    return GRM_OK;
}

static void buf_free(dist_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

/* "3" or "3 (\"items\")": how messages name a table. */
static const char *tname(const grm__dist *d, int32_t t, char *buf, size_t size)
{
    if (d->opts.table_names && d->opts.table_names[t])
        snprintf(buf, size, "%d (\"%s\")", (int)t, d->opts.table_names[t]);
    else snprintf(buf, size, "%d", (int)t);
    return buf;
}

/* Prefix the communicator's message with the op, the table and what was exchanged. */
static grm_status comm_fail(const grm__dist *d, grm_status st, int op, int32_t t,
                            const char *what)
{
    char nb[160];
    grm_error_prefix("dist %s: table %s: %s: ", op_name[op], tname(d, t, nb, sizeof nb), what);
    return st;
}

enum { SET_GROUP = 0, SET_PEERS = 1 };

/* Rank p takes part in exchanges of `set`: the ranks of this rank's group (the in-group id and
 * row exchanges) or the owners of the same shard position in every group (replica sync). */
static int in_set(const grm__dist *d, int set, int32_t p)
{
    return set == SET_GROUP ? p / d->I == d->me / d->I : p % d->I == d->local;
}

static void prefix(int64_t *displs, const int64_t *counts, int32_t N)
{
    int64_t run = 0;
    for (int32_t p = 0; p < N; p++) {
        displs[p] = run;
        run += counts[p];
    }
}

/* recv[k p .. k p + k) = what rank p put in its send[k me ..], for p in `set` (0 elsewhere):
 * k int64 per pair through a world alltoallv with zero counts outside the set (the comm ABI
 * has no split). */
static grm_status xchg_counts(grm__dist *d, int set, int k, int64_t *recv, const int64_t *send,
                              int64_t *bytes)
{
    for (int32_t p = 0; p < d->N; p++) {
        d->c_one_s[p] = k * in_set(d, set, p);
        d->c_disp[p] = (int64_t)k * p;
        for (int i = 0; i < k; i++) recv[k * p + i] = 0;
        if (p != d->me) *bytes += 8 * d->c_one_s[p];
    }
    return d->comm.ops->alltoallv(d->comm.inst, recv, d->c_one_s, d->c_disp, send, d->c_one_s,
                                  d->c_disp, GRM_DTYPE_I64);
}

/* Bytes of a send layout that leave this rank: counts [N] of elem-byte elements. */
static int64_t off_rank_bytes(const grm__dist *d, const int64_t *counts, int64_t elem)
{
    int64_t b = 0;
    for (int32_t p = 0; p < d->N; p++) {
        if (p != d->me) b += counts[p] * elem;
    }
    return b;
}

static void counters_add(grm__dist_stats *into, const grm__dist_stats *c)
{
    into->calls += c->calls;
    into->ids_raw += c->ids_raw;
    into->ids_unique += c->ids_unique;
    into->ids_sent += c->ids_sent;
    into->ids_recv += c->ids_recv;
    into->ids_store += c->ids_store;
    into->id_bytes += c->id_bytes;
    into->row_bytes += c->row_bytes;
    into->rounds += c->rounds;
    into->sync_ids += c->sync_ids;
    into->sync_bytes += c->sync_bytes;
    into->ids_ahead += c->ids_ahead;
    into->ids_ahead_recv += c->ids_ahead_recv;
}

static void counters_commit(grm__dist *d, int32_t t, int op, const grm__dist_stats *c)
{
    d->tables[t].last[op] = *c;
    counters_add(&d->tables[t].total[op], c);
    d->last_table[op] = t;
}

/* Dedup ids [n] as one segment: uniq [n], inverse [n], *nu. */
static grm_status unique1(grm__dist *d, int64_t *uniq, int64_t *inverse, int64_t *nu,
                          const int64_t *ids, int64_t n)
{
    const int64_t offsets[2] = { 0, n };
    return grm__sparse_segment_unique(uniq, NULL, NULL, inverse, nu, ids, offsets, n, 1,
                                      &d->work);
}

/* ---- create / destroy ---- */

grm__dist_opts grm__dist_opts_default(void)
{
    grm__dist_opts o = { .group_size = 0, .dedup1 = 1, .dedup2 = 1, .nfeatures = 0,
                         .table_names = NULL };
    return o;
}

void grm__dist_destroy(grm__dist *d)
{
    if (!d) return;
    if (d->tables) {
        for (int32_t t = 0; t < d->ntables; t++) {
            dist_route *r = &d->tables[t].r;
            buf_free(&r->uniq1);
            buf_free(&r->inv1);
            buf_free(&r->pos);
            buf_free(&r->sent);
            buf_free(&r->recv_ids);
            buf_free(&r->inv2);
            buf_free(&r->uniq2);
            free(r->scounts);
            free(d->tables[t].served);
        }
    }
    free(d->tables);
    free(d->c_send);
    free(d->part);
    dist_buf *bufs[] = { &d->sorted, &d->sfeat, &d->ufeat, &d->rfeat, &d->fa, &d->fb, &d->fc,
                         &d->ia, &d->ib, &d->asend, &d->arecv };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) buf_free(bufs[i]);
    grm__sparse_work_fini(&d->work);
    free(d);
}

/* Every rank must have passed the same values: gathered [N, k] rows compared with rank 0's. */
static grm_status check_agree(const int64_t *all, int32_t N, int32_t k,
                              const char *const *names, const char *what)
{
    for (int32_t p = 1; p < N; p++) {
        for (int32_t i = 0; i < k; i++) {
            if (all[(int64_t)p * k + i] == all[i]) continue;
            char what_i[96];
            if (names) snprintf(what_i, sizeof what_i, "%s", names[i]);
            else snprintf(what_i, sizeof what_i, "%s of table %d", what, (int)i);
            return grm_errorf(GRM_EINVAL, "dist create: rank %d has %s = %lld but rank 0 has "
                              "%lld; every rank must pass the same ntables, dims and options",
                              (int)p, what_i, (long long)all[(int64_t)p * k + i],
                              (long long)all[i]);
        }
    }
    return GRM_OK;
}

grm_status grm__dist_create(const grm_comm_handle *comm, const grm_emb_ops *ops, void *store,
                            int32_t ntables, const int32_t *dims, const grm__dist_opts *opts,
                            grm__dist **out)
{
    grm_status st = GRM_OK;
    grm__dist *d = NULL;
    int64_t *all = NULL;
    if (!out) return grm_errorf(GRM_EINVAL, "dist create: out is NULL");
    *out = NULL;
    if (!comm || !comm->ops || !comm->inst)
        return grm_errorf(GRM_EINVAL, "dist create: communicator is NULL");
    if (!ops || !ops->lookup || !ops->update || !store)
        return grm_errorf(GRM_EINVAL, "dist create: embedding store ops or instance is NULL");
    if (ntables > 0 && !dims) return grm_errorf(GRM_EINVAL, "dist create: dims is NULL");
    const grm__dist_opts o = opts ? *opts : grm__dist_opts_default();

    d = calloc(1, sizeof *d);
    if (!d) return grm_errorf(GRM_ENOMEM, "dist create: out of memory");
    d->comm = *comm;
    d->ops = ops;
    d->store = store;
    d->opts = o;
    d->N = comm->ops->size(comm->inst);
    d->me = comm->ops->rank(comm->inst);
    d->last_table[0] = d->last_table[1] = -1;
    grm__sparse_work_init(&d->work);
    if (d->N < 1 || d->me < 0 || d->me >= d->N) {
        st = grm_errorf(GRM_EINTERNAL, "dist create: communicator reports rank %d of %d",
                        (int)d->me, (int)d->N);
        goto fail;
    }

    /* Agree on the options and dims before judging them, so that every rank refuses alike
     * (a rank returning early would leave the others waiting in a collective). */
    enum { NH = 6 };
    static const char *const hnames[NH] = { "ntables", "group_size", "dedup1", "dedup2",
                                            "nfeatures", "ahead" };
    const int64_t head[NH] = { ntables, o.group_size, o.dedup1 != 0, o.dedup2 != 0,
                               o.nfeatures, o.ahead != 0 };
    const int64_t nall = (int64_t)d->N * (NH > ntables ? NH : ntables);
    all = malloc((size_t)nall * sizeof *all);
    int64_t *mine = malloc(((size_t)(ntables > 0 ? ntables : 0) + NH) * sizeof *mine);
    if (!all || !mine) {
        free(mine);
        st = grm_errorf(GRM_ENOMEM, "dist create: out of memory");
        goto fail;
    }
    memcpy(mine, head, sizeof head);
    st = comm->ops->allgather(comm->inst, all, mine, NH, GRM_DTYPE_I64);
    if (st != GRM_OK) {
        free(mine);
        grm_error_prefix("dist create: allgather of the options: ");
        goto fail;
    }
    if ((st = check_agree(all, d->N, NH, hnames, NULL)) != GRM_OK) {
        free(mine);
        goto fail;
    }
    if (ntables > 0) {
        for (int32_t t = 0; t < ntables; t++) mine[t] = dims[t];
        st = comm->ops->allgather(comm->inst, all, mine, ntables, GRM_DTYPE_I64);
        free(mine);
        if (st != GRM_OK) {
            grm_error_prefix("dist create: allgather of the dims: ");
            goto fail;
        }
        if ((st = check_agree(all, d->N, ntables, NULL, "dim")) != GRM_OK) goto fail;
    } else {
        free(mine);
    }

    if (ntables < 1) {
        st = grm_errorf(GRM_EINVAL, "dist create: ntables %d must be >= 1", (int)ntables);
        goto fail;
    }
    for (int32_t t = 0; t < ntables; t++) {
        if (dims[t] < 1) {
            st = grm_errorf(GRM_EINVAL, "dist create: table %d: dim %d must be >= 1", (int)t,
                            (int)dims[t]);
            goto fail;
        }
    }
    if (o.nfeatures < 0 || o.nfeatures > (1 << 24)) {
        st = grm_errorf(GRM_EINVAL, "dist create: nfeatures %d outside [0, 2^24]",
                        (int)o.nfeatures);
        goto fail;
    }
    d->I = o.group_size == 0 ? d->N : o.group_size;
    if (d->I < 1 || d->I > d->N || d->N % d->I != 0) {
        st = grm_errorf(GRM_EINVAL, "dist create: group_size %d does not divide the %d ranks; "
                        "use 0 (one group) or a divisor of the world size (TurboGR §4.2.1)",
                        (int)o.group_size, (int)d->N);
        goto fail;
    }
    d->M = d->N / d->I;
    d->base = d->me / d->I * d->I;
    d->local = d->me % d->I;

    d->ntables = ntables;
    d->tables = calloc((size_t)ntables, sizeof *d->tables);
    /* the per-rank scratch arrays, [N] each ([2N] for two counts a pair), carved from one
     * block that starts at c_send (destroy frees it) */
    const struct { int64_t **p; int w; } cut[] = {
        { &d->c_send, 1 }, { &d->c_recv, 1 }, { &d->c_one_s, 2 }, { &d->c_disp, 1 },
        { &d->x_sc, 1 }, { &d->x_sd, 1 }, { &d->x_rc, 1 }, { &d->x_rd, 1 },
        { &d->a_sc, 1 }, { &d->a_sd, 1 }, { &d->a_rc, 1 }, { &d->a_rd, 1 },
        { &d->c2s, 2 }, { &d->c2r, 2 },
    };
    size_t width = 0;
    for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) width += (size_t)cut[i].w;
    int64_t *block = calloc((size_t)d->N * width, sizeof *block);
    d->c_send = block;
    d->part = calloc((size_t)d->I, sizeof *d->part);
    if (!d->tables || !block || !d->part) goto nomem;
    for (size_t i = 0, at = 0; i < sizeof cut / sizeof *cut; at += (size_t)cut[i++].w)
        *cut[i].p = block + at * (size_t)d->N;
    for (int32_t t = 0; t < ntables; t++) {
        dist_table *tb = &d->tables[t];
        tb->dim = dims[t];
        tb->r.scounts = calloc((size_t)d->N * 4, sizeof(int64_t));
        if (!tb->r.scounts) goto nomem;
        tb->r.sdispls = tb->r.scounts + d->N;
        tb->r.rcounts = tb->r.scounts + 2 * d->N;
        tb->r.rdispls = tb->r.scounts + 3 * d->N;
        if (o.nfeatures > 0 && !(tb->served = calloc((size_t)o.nfeatures, sizeof(int64_t))))
            goto nomem;
    }
    free(all);
    *out = d;
    return GRM_OK;

nomem:
    st = grm_errorf(GRM_ENOMEM, "dist create: out of memory for %d tables on %d ranks",
                    (int)ntables, (int)d->N);
fail:
    free(all);
    grm__dist_destroy(d);
    return st;
}

/* ---- routing: stage 1, ids partition, id exchange (FusedRec Algorithm 1 lines a.2-a.4) ---- */

/* opts.ahead: the next batch's keys d->ahead [n_ahead] grouped by owner into d->asend, with
 * a_sc / a_sd; this rank's own keys stay out (its data thread prefetches them). */
static grm_status ahead_pack(grm__dist *d)
{
    for (int32_t p = 0; p < d->N; p++) d->a_sc[p] = 0;
    for (int64_t j = 0; j < d->n_ahead; j++) {
        const int32_t p = grm__dist_owner(d, d->me, d->ahead[j]);
        if (p != d->me) d->a_sc[p]++;
    }
    prefix(d->a_sd, d->a_sc, d->N);
    int64_t *out, *at = d->a_rd;    /* a_rd is free until the exchange: the write cursors */
    const int64_t total = d->a_sd[d->N - 1] + d->a_sc[d->N - 1];
    grm_status st = buf_get(&d->asend, (size_t)total * 8, (void **)&out);
    if (st != GRM_OK) return st;
    memcpy(at, d->a_sd, (size_t)d->N * sizeof *at);
    for (int64_t j = 0; j < d->n_ahead; j++) {
        const int32_t p = grm__dist_owner(d, d->me, d->ahead[j]);
        if (p != d->me) out[at[p]++] = d->ahead[j];
    }
    return GRM_OK;
}

/* Route ids [n] (feat [n] or NULL) of table t to their owners and keep the routing in the
 * table's dist_route. with_feat: exchange feature indices and count them (lookups only). */
static grm_status route(grm__dist *d, int32_t t, int op, const int64_t *ids,
                        const int32_t *feat, int64_t n, int with_feat, grm__dist_stats *c)
{
    dist_table *tb = &d->tables[t];
    dist_route *r = &tb->r;
    grm_status st;
    int64_t *sent, *pos, *sorted, *inv1 = NULL;
    int32_t *sfeat = NULL, *ufeat = NULL;
    const int32_t *fsrc = feat;
    r->valid = 0;
    r->have_inv2 = 0;

    /* Stage 1 (MTGRBoost §4.3 first stage; FusedRec segment unique, I_u kept). */
    if ((st = buf_get(&r->sent, (size_t)n * 8, (void **)&sent)) != GRM_OK) return st;
    if (d->opts.dedup1) {
        if ((st = buf_get(&r->inv1, (size_t)n * 8, (void **)&inv1)) != GRM_OK) return st;
        if ((st = unique1(d, sent, inv1, &r->u1, ids, n)) != GRM_OK) return st;
        if (with_feat && feat) {
            /* The feature of a unique id is that of its first occurrence. */
            if ((st = buf_get(&d->ufeat, (size_t)n * 4, (void **)&ufeat)) != GRM_OK) return st;
            for (int64_t j = n - 1; j >= 0; j--) ufeat[inv1[j]] = feat[j];
            fsrc = ufeat;
        }
    } else {
        if (n > 0) memcpy(sent, ids, (size_t)n * 8);
        r->u1 = n;
    }
    const int64_t u1 = r->u1;
    r->n_in = n;

    /* Ids partition by owner inside the group (FusedRec rankwise sort, I_s kept). */
    if ((st = buf_get(&r->pos, (size_t)u1 * 8, (void **)&pos)) != GRM_OK ||
        (st = buf_get(&d->sorted, (size_t)u1 * 8, (void **)&sorted)) != GRM_OK)
        return st;
    if (with_feat && (st = buf_get(&d->sfeat, (size_t)u1 * 4, (void **)&sfeat)) != GRM_OK)
        return st;
    st = grm__sparse_ids_partition(sorted, with_feat && fsrc ? sfeat : NULL, pos, d->part,
                                   sent, with_feat ? fsrc : NULL, u1, d->I, &d->work);
    if (st != GRM_OK) return st;
    if (with_feat && !fsrc) {
        for (int64_t j = 0; j < u1; j++) sfeat[j] = -1;   /* unknown feature: not counted */
    }
    for (int32_t p = 0; p < d->N; p++) r->scounts[p] = 0;
    for (int32_t k = 0; k < d->I; k++) r->scounts[d->base + k] = d->part[k];
    prefix(r->sdispls, r->scounts, d->N);

    /* Counts, then ids (and features), confined to the group. With opts.ahead a lookup's
     * counts carry the next batch's keys' too, a pair per rank. */
    const int ahead = d->opts.ahead && op == GRM__DIST_LOOKUP;
    if (ahead) {
        if ((st = ahead_pack(d)) != GRM_OK) return st;
        for (int32_t p = 0; p < d->N; p++) {
            d->c2s[2 * p] = r->scounts[p];
            d->c2s[2 * p + 1] = d->a_sc[p];
        }
        st = xchg_counts(d, SET_GROUP, 2, d->c2r, d->c2s, &c->id_bytes);
        for (int32_t p = 0; p < d->N; p++) {
            r->rcounts[p] = d->c2r[2 * p];
            d->a_rc[p] = d->c2r[2 * p + 1];
        }
    } else {
        st = xchg_counts(d, SET_GROUP, 1, r->rcounts, r->scounts, &c->id_bytes);
    }
    if (st != GRM_OK) return comm_fail(d, st, op, t, "alltoallv of id counts");
    prefix(r->rdispls, r->rcounts, d->N);
    r->nrecv = r->rdispls[d->N - 1] + r->rcounts[d->N - 1];
    int64_t *recv;
    if ((st = buf_get(&r->recv_ids, (size_t)r->nrecv * 8, (void **)&recv)) != GRM_OK) return st;
    st = d->comm.ops->alltoallv(d->comm.inst, recv, r->rcounts, r->rdispls, sorted, r->scounts,
                                r->sdispls, GRM_DTYPE_I64);
    if (st != GRM_OK) return comm_fail(d, st, op, t, "alltoallv of ids");
    c->rounds += 2;
    const int64_t off_ids = off_rank_bytes(d, r->scounts, 1);
    c->id_bytes += 8 * off_ids;
    if (with_feat) {
        int32_t *rfeat;
        if ((st = buf_get(&d->rfeat, (size_t)r->nrecv * 4, (void **)&rfeat)) != GRM_OK)
            return st;
        st = d->comm.ops->alltoallv(d->comm.inst, rfeat, r->rcounts, r->rdispls, sfeat,
                                    r->scounts, r->sdispls, GRM_DTYPE_I32);
        if (st != GRM_OK) return comm_fail(d, st, op, t, "alltoallv of feature indices");
        c->rounds += 1;
        c->id_bytes += 4 * off_ids;
        /* FusedRec §3 deferred category information: the owner counts per feature. */
        for (int64_t j = 0; j < r->nrecv; j++) {
            if (rfeat[j] >= 0 && rfeat[j] < d->opts.nfeatures) tb->served[rfeat[j]]++;
        }
    }
    if (ahead) {   /* the next batch's keys, to their owners */
        prefix(d->a_rd, d->a_rc, d->N);
        d->n_got = d->a_rd[d->N - 1] + d->a_rc[d->N - 1];
        int64_t *got;
        if ((st = buf_get(&d->arecv, (size_t)d->n_got * 8, (void **)&got)) != GRM_OK) return st;
        st = d->comm.ops->alltoallv(d->comm.inst, got, d->a_rc, d->a_rd, d->asend.p, d->a_sc,
                                    d->a_sd, GRM_DTYPE_I64);
        if (st != GRM_OK) return comm_fail(d, st, op, t, "alltoallv of the next batch's ids");
        c->rounds += 1;
        const int64_t off = off_rank_bytes(d, d->a_sc, 1);
        c->id_bytes += 8 * off;
        c->ids_ahead += off;
        c->ids_ahead_recv += d->n_got;
    }
    c->ids_unique += u1;
    c->ids_sent += off_ids;
    c->ids_recv += r->nrecv;
    r->valid = 1;
    return GRM_OK;
}

/* Stage 2 (MTGRBoost §4.3 second stage; FusedRec lookup groups, I_l kept): the received ids
 * repeat across requesters. */
static grm_status route_stage2(grm__dist *d, dist_route *r)
{
    if (r->have_inv2) return GRM_OK;
    int64_t *inv2, *uniq2;
    grm_status st;
    if ((st = buf_get(&r->inv2, (size_t)r->nrecv * 8, (void **)&inv2)) != GRM_OK ||
        (st = buf_get(&r->uniq2, (size_t)r->nrecv * 8, (void **)&uniq2)) != GRM_OK)
        return st;
    if ((st = unique1(d, uniq2, inv2, &r->nu, r->recv_ids.p, r->nrecv)) != GRM_OK) return st;
    r->have_inv2 = 1;
    return GRM_OK;
}

static grm_status check_call(const grm__dist *d, int op, int32_t t, int64_t n)
{
    if (!d) return grm_errorf(GRM_EINVAL, "dist %s: instance is NULL", op_name[op]);
    if (t < 0 || t >= d->ntables)
        return grm_errorf(GRM_EINVAL, "dist %s: table %d outside [0, %d)", op_name[op], (int)t,
                          (int)d->ntables);
    if (n < 0 || n >= ((int64_t)1 << 40))
        return grm_errorf(GRM_EINVAL, "dist %s: table %d: %lld ids; allowed 0 .. 2^40 - 1",
                          op_name[op], (int)t, (long long)n);
    return GRM_OK;
}

/* ---- lookup ---- */

grm_status grm__dist_lookup(grm__dist *d, int32_t table, const int64_t *ids, const int32_t *feat,
                            int64_t n, int64_t n_raw, float *rows, uint32_t flags)
{
    return grm__dist_lookup_ahead(d, table, ids, feat, n, n_raw, rows, flags, NULL, 0, NULL,
                                  NULL);
}

grm_status grm__dist_lookup_ahead(grm__dist *d, int32_t table, const int64_t *ids,
                                  const int32_t *feat, int64_t n, int64_t n_raw, float *rows,
                                  uint32_t flags, const int64_t *ahead, int64_t n_ahead,
                                  const int64_t **got, int64_t *n_got)
{
    enum { OP = GRM__DIST_LOOKUP };
    if (got) *got = NULL;
    if (n_got) *n_got = 0;
    grm_status st = check_call(d, OP, table, n);
    if (st != GRM_OK) return st;
    char nb[160];
    if (n_ahead < 0 || (n_ahead > 0 && !ahead))
        return grm_errorf(GRM_EINVAL, "dist lookup: table %s: %lld keys ahead at %p",
                          tname(d, table, nb, sizeof nb), (long long)n_ahead,
                          (const void *)ahead);
    d->ahead = ahead;
    d->n_ahead = ahead ? n_ahead : 0;
    d->n_got = 0;
    if (n > 0 && (!ids || !rows))
        return grm_errorf(GRM_EINVAL, "dist lookup: table %s: ids or rows is NULL with n = %lld",
                          tname(d, table, nb, sizeof nb), (long long)n);
    if (n_raw != 0 && n_raw < n)
        return grm_errorf(GRM_EINVAL, "dist lookup: table %s: n_raw %lld < n %lld; n_raw counts "
                          "the ids before stage-1 dedup", tname(d, table, nb, sizeof nb),
                          (long long)n_raw, (long long)n);
    const int with_feat = d->opts.nfeatures > 0;
    if (with_feat && feat) {
        for (int64_t j = 0; j < n; j++) {
            if (feat[j] < 0 || feat[j] >= d->opts.nfeatures)
                return grm_errorf(GRM_EINVAL, "dist lookup: table %s: feature index %d at "
                                  "position %lld outside [0, %d)",
                                  tname(d, table, nb, sizeof nb), (int)feat[j], (long long)j,
                                  (int)d->opts.nfeatures);
        }
    }
    dist_table *tb = &d->tables[table];
    dist_route *r = &tb->r;
    const int64_t D = tb->dim;
    grm__dist_stats c = { .calls = 1, .ids_raw = n_raw ? n_raw : n };

    st = route(d, table, OP, ids, feat, n, with_feat, &c);
    d->ahead = NULL;
    d->n_ahead = 0;
    if (st != GRM_OK) return st;
    if (got && d->n_got > 0) {
        *got = d->arecv.p;
        *n_got = d->n_got;
    }
    const int64_t *recv = r->recv_ids.p;
    const int64_t *sids = recv;
    int64_t ns = r->nrecv;
    if (d->opts.dedup2) {
        if ((st = route_stage2(d, r)) != GRM_OK) return st;
        sids = r->uniq2.p;
        ns = r->nu;
    }

    /* One store lookup of the (unique) received ids. */
    float *urows, *srow, *rrow;
    if ((st = buf_get(&d->fa, (size_t)(ns * D) * 4, (void **)&urows)) != GRM_OK) return st;
    grm_status st_store = GRM_OK;
    if (ns > 0) st_store = d->ops->lookup(d->store, urows, table, sids, ns, flags);
    if (st_store != GRM_OK) grm_error_prefix("dist lookup: table %s: store lookup: ",
                                             tname(d, table, nb, sizeof nb));

    /* Rows back: block p = [status, rows of the ids p sent]; the status float lets every
     * requester see an owner's failure without another collective. */
    for (int32_t p = 0; p < d->N; p++) {
        const int g = in_set(d, SET_GROUP, p);
        d->x_sc[p] = g ? r->rcounts[p] * D + 1 : 0;
        d->x_rc[p] = g ? r->scounts[p] * D + 1 : 0;
    }
    prefix(d->x_sd, d->x_sc, d->N);
    prefix(d->x_rd, d->x_rc, d->N);
    const int64_t nsend = d->x_sd[d->N - 1] + d->x_sc[d->N - 1];
    const int64_t nrecvf = d->x_rd[d->N - 1] + d->x_rc[d->N - 1];
    if ((st = buf_get(&d->fb, (size_t)nsend * 4, (void **)&srow)) != GRM_OK ||
        (st = buf_get(&d->fc, (size_t)nrecvf * 4, (void **)&rrow)) != GRM_OK)
        return st;
    const int64_t *inv2 = d->opts.dedup2 ? r->inv2.p : NULL;
    for (int32_t p = 0; p < d->N; p++) {
        if (!d->x_sc[p]) continue;
        float *blk = srow + d->x_sd[p];
        blk[0] = st_store == GRM_OK ? 0.0f : 1.0f;
        for (int64_t j = 0; j < r->rcounts[p]; j++) {
            const int64_t q = r->rdispls[p] + j;   /* index into recv */
            float *dst = blk + 1 + j * D;
            if (st_store != GRM_OK) memset(dst, 0, (size_t)D * 4);
            else memcpy(dst, urows + (inv2 ? inv2[q] : q) * D, (size_t)D * 4);
        }
    }
    st = d->comm.ops->alltoallv(d->comm.inst, rrow, d->x_rc, d->x_rd, srow, d->x_sc, d->x_sd,
                                GRM_DTYPE_F32);
    if (st != GRM_OK) return comm_fail(d, st, OP, table, "alltoallv of rows");
    c.rounds += 1;
    c.row_bytes += off_rank_bytes(d, d->x_sc, 4);
    c.ids_store += ns;
    if (st_store != GRM_OK) return st_store;
    for (int32_t k = 0; k < d->I; k++) {
        const int32_t p = d->base + k;
        if (rrow[d->x_rd[p]] != 0.0f)
            return grm_errorf(GRM_EINTERNAL, "dist lookup: table %s: the store lookup failed "
                              "on owner rank %d (its error is reported there)",
                              tname(d, table, nb, sizeof nb), (int)p);
    }

    /* Recovery (FusedRec §3 c.2): row of sent[i] is in owner k's block at its sorted
     * position pos[i]; then through I_u back to the caller's duplicates. */
    const int64_t *sent = r->sent.p, *pos = r->pos.p;
    float *dst = rows;
    if (d->opts.dedup1 && (st = buf_get(&d->fa, (size_t)(r->u1 * D) * 4, (void **)&dst))
        != GRM_OK)
        return st;
    for (int64_t i = 0; i < r->u1; i++) {
        const int32_t p = grm__dist_owner(d, d->me, sent[i]);
        const float *src = rrow + d->x_rd[p] + 1 + (pos[i] - r->sdispls[p]) * D;
        memcpy(dst + i * D, src, (size_t)D * 4);
    }
    if (d->opts.dedup1 && n > 0 &&
        (st = grm__sparse_gather(rows, dst, r->inv1.p, n, r->u1, D)) != GRM_OK)
        return st;
    counters_commit(d, table, OP, &c);
    return GRM_OK;
}

/* ---- update ---- */

/* Hierarchical replica sync (TurboGR §4.2.1, see dist.h): the owners of this shard position in
 * every group swap (unique id, summed gradient) lists; every one of them sums the
 * concatenation in group order. In: uniq [nu], g [nu, D]. Out: *ids_out [*nout], *g_out
 * [*nout, D] (scratch owned by d). */
static grm_status replica_sync(grm__dist *d, int32_t t, const int64_t *uniq, const float *g,
                               int64_t nu, int64_t D, const int64_t **ids_out,
                               const float **g_out, int64_t *nout, grm__dist_stats *c)
{
    enum { OP = GRM__DIST_UPDATE };
    grm_status st;
    for (int32_t p = 0; p < d->N; p++) d->c_send[p] = nu;
    int64_t cb = 0;
    if ((st = xchg_counts(d, SET_PEERS, 1, d->c_recv, d->c_send, &cb)) != GRM_OK)
        return comm_fail(d, st, OP, t, "alltoallv of replica counts");
    for (int32_t p = 0; p < d->N; p++) {
        d->x_sc[p] = in_set(d, SET_PEERS, p) ? nu : 0;
        d->x_sd[p] = 0;   /* every peer gets the same list: overlapping send blocks */
    }
    prefix(d->x_rd, d->c_recv, d->N);
    const int64_t tot = d->x_rd[d->N - 1] + d->c_recv[d->N - 1];
    int64_t *all_ids, *inv, *uniq_all;
    float *all_g, *sum;
    if ((st = buf_get(&d->ia, (size_t)tot * 16, (void **)&all_ids)) != GRM_OK ||
        (st = buf_get(&d->ib, (size_t)tot * 8, (void **)&uniq_all)) != GRM_OK ||
        (st = buf_get(&d->fb, (size_t)(tot * D) * 4, (void **)&all_g)) != GRM_OK)
        return st;
    inv = all_ids + tot;
    st = d->comm.ops->alltoallv(d->comm.inst, all_ids, d->c_recv, d->x_rd, uniq, d->x_sc,
                                d->x_sd, GRM_DTYPE_I64);
    if (st != GRM_OK) return comm_fail(d, st, OP, t, "alltoallv of replica ids");
    for (int32_t p = 0; p < d->N; p++) {
        d->x_sc[p] *= D;
        d->x_rc[p] = d->c_recv[p] * D;
        d->x_rd[p] *= D;
    }
    st = d->comm.ops->alltoallv(d->comm.inst, all_g, d->x_rc, d->x_rd, g, d->x_sc, d->x_sd,
                                GRM_DTYPE_F32);
    if (st != GRM_OK) return comm_fail(d, st, OP, t, "alltoallv of replica gradients");
    int64_t U;
    if ((st = unique1(d, uniq_all, inv, &U, all_ids, tot)) != GRM_OK) return st;
    if ((st = buf_get(&d->fc, (size_t)(U * D) * 4, (void **)&sum)) != GRM_OK) return st;
    if (U > 0) memset(sum, 0, (size_t)(U * D) * 4);
    if (tot > 0 && (st = grm__sparse_scatter_add(sum, all_g, inv, tot, U, D, &d->work)) != GRM_OK)
        return st;
    c->rounds += 3;
    c->sync_ids += nu * (d->M - 1);
    c->sync_bytes += cb + (d->M - 1) * nu * (8 + 4 * D);
    *ids_out = uniq_all;
    *g_out = sum;
    *nout = U;
    return GRM_OK;
}

grm_status grm__dist_update(grm__dist *d, int32_t table, const int64_t *ids, const float *grads,
                            int64_t n, int64_t step)
{
    enum { OP = GRM__DIST_UPDATE };
    grm_status st = check_call(d, OP, table, n);
    if (st != GRM_OK) return st;
    char nb[160];
    dist_table *tb = &d->tables[table];
    dist_route *r = &tb->r;
    const int64_t D = tb->dim;
    if (n > 0 && !grads)
        return grm_errorf(GRM_EINVAL, "dist update: table %s: grads is NULL with n = %lld",
                          tname(d, table, nb, sizeof nb), (long long)n);
    if (!ids && (!r->valid || r->n_in != n))
        return grm_errorf(GRM_EINVAL, "dist update: table %s: ids is NULL but the table's last "
                          "lookup %s; pass the ids", tname(d, table, nb, sizeof nb),
                          r->valid ? "had a different n" : "did not complete");
    grm__dist_stats c = { .calls = 1, .ids_raw = n };
    if (ids) {
        if ((st = route(d, table, OP, ids, NULL, n, 0, &c)) != GRM_OK) return st;
    } else {
        c.ids_unique = r->u1;
        c.ids_sent = off_rank_bytes(d, r->scounts, 1);
        c.ids_recv = r->nrecv;
    }
    if ((st = route_stage2(d, r)) != GRM_OK) return st;

    /* Stage-1 sum: gradients of the caller's duplicates into the unique rows (backward of
     * the I_u recovery). */
    const float *g1 = grads;
    float *sendg, *recvg, *gu;
    if (d->opts.dedup1) {
        float *t1;
        if ((st = buf_get(&d->fa, (size_t)(r->u1 * D) * 4, (void **)&t1)) != GRM_OK) return st;
        if (r->u1 > 0) memset(t1, 0, (size_t)(r->u1 * D) * 4);
        if (n > 0 && (st = grm__sparse_scatter_add(t1, grads, r->inv1.p, n, r->u1, D,
                                                   &d->work)) != GRM_OK)
            return st;
        g1 = t1;
    }
    /* Rows to their owners, in the sorted layout of the ids (I_s). */
    const int64_t *pos = r->pos.p;
    if ((st = buf_get(&d->fb, (size_t)(r->u1 * D) * 4, (void **)&sendg)) != GRM_OK ||
        (st = buf_get(&d->fc, (size_t)(r->nrecv * D) * 4, (void **)&recvg)) != GRM_OK)
        return st;
    for (int64_t i = 0; i < r->u1; i++)
        memcpy(sendg + pos[i] * D, g1 + i * D, (size_t)D * 4);
    for (int32_t p = 0; p < d->N; p++) {
        d->x_sc[p] = r->scounts[p] * D;
        d->x_sd[p] = r->sdispls[p] * D;
        d->x_rc[p] = r->rcounts[p] * D;
        d->x_rd[p] = r->rdispls[p] * D;
    }
    st = d->comm.ops->alltoallv(d->comm.inst, recvg, d->x_rc, d->x_rd, sendg, d->x_sc, d->x_sd,
                                GRM_DTYPE_F32);
    if (st != GRM_OK) return comm_fail(d, st, OP, table, "alltoallv of gradients");
    c.rounds += 1;
    c.row_bytes += off_rank_bytes(d, d->x_sc, 4);

    /* The owner sums the gradients of equal ids from all requesters (scatter-add over I_l,
     * contributions in rank order). */
    if ((st = buf_get(&d->fa, (size_t)(r->nu * D) * 4, (void **)&gu)) != GRM_OK) return st;
    if (r->nu > 0) memset(gu, 0, (size_t)(r->nu * D) * 4);
    if (r->nrecv > 0 && (st = grm__sparse_scatter_add(gu, recvg, r->inv2.p, r->nrecv, r->nu, D,
                                                      &d->work)) != GRM_OK)
        return st;
    const int64_t *uids = r->uniq2.p;
    const float *ug = gu;
    int64_t nu = r->nu;
    if (d->M > 1 &&
        (st = replica_sync(d, table, r->uniq2.p, gu, r->nu, D, &uids, &ug, &nu, &c)) != GRM_OK)
        return st;
    c.ids_store += nu;
    if (nu > 0 && (st = d->ops->update(d->store, table, uids, ug, nu, step)) != GRM_OK) {
        grm_error_prefix("dist update: table %s: store update: ", tname(d, table, nb, sizeof nb));
        return st;
    }
    counters_commit(d, table, OP, &c);
    return GRM_OK;
}

/* ---- counters ---- */

grm_status grm__dist_counters(const grm__dist *d, int32_t table, int32_t op,
                              grm__dist_stats *last, grm__dist_stats *total)
{
    if (!d) return grm_errorf(GRM_EINVAL, "dist counters: instance is NULL");
    if (op != GRM__DIST_LOOKUP && op != GRM__DIST_UPDATE)
        return grm_errorf(GRM_EINVAL, "dist counters: op %d is neither GRM__DIST_LOOKUP nor "
                          "GRM__DIST_UPDATE", (int)op);
    if (table < -1 || table >= d->ntables)
        return grm_errorf(GRM_EINVAL, "dist counters: table %d outside [-1, %d)", (int)table,
                          (int)d->ntables);
    if (table >= 0) {
        if (last) *last = d->tables[table].last[op];
        if (total) *total = d->tables[table].total[op];
        return GRM_OK;
    }
    if (last) {
        const int32_t lt = d->last_table[op];
        memset(last, 0, sizeof *last);
        if (lt >= 0) *last = d->tables[lt].last[op];
    }
    if (total) {
        memset(total, 0, sizeof *total);
        for (int32_t t = 0; t < d->ntables; t++) counters_add(total, &d->tables[t].total[op]);
    }
    return GRM_OK;
}

grm_status grm__dist_feature_served(const grm__dist *d, int32_t table, int64_t *served)
{
    if (!d || !served) return grm_errorf(GRM_EINVAL, "dist feature served: NULL argument");
    if (d->opts.nfeatures <= 0)
        return grm_errorf(GRM_EINVAL, "dist feature served: created with nfeatures = 0; set "
                          "opts.nfeatures to count ids per feature");
    if (table < 0 || table >= d->ntables)
        return grm_errorf(GRM_EINVAL, "dist feature served: table %d outside [0, %d)",
                          (int)table, (int)d->ntables);
    memcpy(served, d->tables[table].served, (size_t)d->opts.nfeatures * sizeof *served);
    return GRM_OK;
}

int32_t grm__dist_owner_of(int64_t id, int32_t rank, int32_t group)
{
    const int32_t base = rank / group * group;
    return base + (int32_t)(grm_mix64((uint64_t)id) % (uint64_t)group);
}

int32_t grm__dist_owner(const grm__dist *d, int32_t rank, int64_t id)
{
    return grm__dist_owner_of(id, rank, d->I);
}
