/* core/recommend.c - what a trained retrieval model gives out: `grmhost recommend` (top-K items
 * per user) and `grmhost export` (the tables, user states, dense weights and a manifest as
 * SafeTensors files). Both start from grm__trainer_open (the pipeline's data, the
 * checkpoint loaded) and compute user states with core/eval.c's grm__eval_queries, the one
 * evaluation uses, so a recommendation scores exactly what HR@K/NDCG@K measured: the user's
 * query (for a sequence model its last token's output) dotted with every catalog item's
 * row, history excluded, ties to the lower item id. */
#include "checkpoint.h"
#include "backend.h"
#include "train.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- top-K of one score row ---- */

/* a outranks b: a higher score, or the same score and a lower catalog index (eval.c's
 * tie rule). NaN never outranks anything. */
static int outranks(float sa, int64_t ia, float sb, int64_t ib)
{
    return sa > sb || (sa == sb && ia < ib);
}

/* Whether any of sc [n] scores above x (NaN does not): a reduction gcc vectorises. */
static GRM__HOT_LOOP int any_above(const float *sc, int64_t n, float x)
{
    int any = 0;
    for (int64_t j = 0; j < n; j++) any |= sc[j] > x;
    return any;
}

/* Scores a top_k scan tests at once before looking at them one by one. */
#define TOPK_BLOCK 64

/* The K best of sc [C] into items/scores [K], best first; *n how many (fewer when fewer
 * than K are finite candidates). A min-heap of K: O(C log K). Once the heap is full a
 * candidate must score above its worst (an earlier index wins a tie), so a block of
 * TOPK_BLOCK scores none of which does is passed over by one vectorised test: most of them,
 * once the first blocks have filled the heap. The scalar scan of every score was 22% of
 * recommend's time on Beauty. */
static int64_t top_k(const float *sc, int64_t C, int64_t K, int64_t *idx, float *val)
{
    int64_t n = 0;
    for (int64_t j = 0; j < C; j++) {
        if (n == K && j % TOPK_BLOCK == 0 && j + TOPK_BLOCK <= C
            && !any_above(sc + j, TOPK_BLOCK, val[0])) {
            j += TOPK_BLOCK - 1;
            continue;
        }
        const float s = sc[j];
        if (!(s > -INFINITY)) continue;     /* excluded (-inf) or NaN */
        if (n == K && !outranks(s, j, val[0], idx[0])) continue;
        int64_t at;
        if (n < K) {   /* sift up from the end */
            at = n++;
            while (at > 0) {
                const int64_t parent = (at - 1) / 2;
                if (!outranks(val[parent], idx[parent], s, j)) break;
                val[at] = val[parent];
                idx[at] = idx[parent];
                at = parent;
            }
        } else {       /* replace the worst (the root) and sift down */
            at = 0;
            for (;;) {
                int64_t c = 2 * at + 1;
                if (c >= n) break;
                if (c + 1 < n && outranks(val[c], idx[c], val[c + 1], idx[c + 1])) c++;
                if (!outranks(s, j, val[c], idx[c])) break;
                val[at] = val[c];
                idx[at] = idx[c];
                at = c;
            }
        }
        val[at] = s;
        idx[at] = j;
    }
    /* heap sort in place: repeatedly move the worst to the end, best ends first */
    for (int64_t m = n; m > 1; m--) {
        float tv = val[0];
        int64_t ti = idx[0];
        val[0] = val[m - 1];
        idx[0] = idx[m - 1];
        val[m - 1] = tv;
        idx[m - 1] = ti;
        int64_t at = 0;
        for (;;) {
            int64_t c = 2 * at + 1;
            if (c >= m - 1) break;
            if (c + 1 < m - 1 && outranks(val[c], idx[c], val[c + 1], idx[c + 1])) c++;
            if (!outranks(val[at], idx[at], val[c], idx[c])) break;
            float sv = val[at];
            int64_t si = idx[at];
            val[at] = val[c];
            idx[at] = idx[c];
            val[c] = sv;
            idx[c] = si;
            at = c;
        }
    }
    return n;
}

/* ---- recommend ---- */

/* The K best of a [na] and b [nb] (both best first) into out/outv, best first; returns
 * how many. Catalog indices are global, so the tie rule is the whole catalog's. */
static int64_t merge_k(const int64_t *a, const float *av, int64_t na, const int64_t *b,
                       const float *bv, int64_t nb, int64_t K, int64_t *out, float *outv)
{
    int64_t i = 0, j = 0, n = 0;
    while (n < K && (i < na || j < nb)) {
        if (j >= nb || (i < na && outranks(av[i], a[i], bv[j], b[j]))) {
            out[n] = a[i];
            outv[n++] = av[i++];
        } else {
            out[n] = b[j];
            outv[n++] = bv[j++];
        }
    }
    return n;
}

typedef struct rec_ctx {
    grm__trainer *t;
    const float *q;            /* [b, D] queries */
    float *scores;             /* [b, C] */
    int64_t K, D, C;
    int64_t c0;                /* catalog index of the chunk's first item (C of them) */
    int keep_history;
    int use_cblas;             /* the CPU backends: each range runs its own sgemm */
    const int64_t *users;      /* [b] user indices */
    int64_t *items;            /* [b, K] catalog indices */
    float *vals;               /* [b, K] */
    int64_t *count;            /* [b] */
    /* several chunks: the users' K best so far, merged with each chunk's ([b, K], [b]),
     * and a scratch [K] per range's merge */
    int64_t *best;
    float *bestv;
    int64_t *nbest;
} rec_ctx;

static grm_status rec_range(void *vctx, int64_t lo, int64_t hi)
{
    rec_ctx *c = vctx;
    const grm__dataset *ds = c->t->ds;
    if (c->use_cblas && hi > lo)   /* scores[lo:hi] = q[lo:hi] . items^T, one sgemm per range */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(hi - lo), (int)c->C,
                    (int)c->D, 1.0f, c->q + lo * c->D, (int)c->D, c->t->ev.cat_rows, (int)c->D,
                    0.0f, c->scores + lo * c->C, (int)c->C);
    int64_t *mi = NULL;
    float *mv = NULL;
    if (c->best && (!(mi = malloc((size_t)c->K * sizeof *mi))
                    || !(mv = malloc((size_t)c->K * sizeof *mv)))) {
        free(mi);
        return grm_errorf(GRM_ENOMEM, "out of memory");
    }
    for (int64_t k = lo; k < hi; k++) {
        float *sc = c->scores + k * c->C;
        const int64_t u = c->users[k];
        if (!c->keep_history) {
            for (int64_t j = ds->offsets[u]; j < ds->offsets[u + 1]; j++) {
                const int64_t ci = grm__eval_catalog_index(ds, ds->items[j]) - c->c0;
                if (ci >= 0 && ci < c->C) sc[ci] = -INFINITY;
            }
        }
        int64_t *it = c->items + k * c->K;
        float *v = c->vals + k * c->K;
        c->count[k] = top_k(sc, c->C, c->K, it, v);
        if (!c->best) continue;
        for (int64_t r = 0; r < c->count[k]; r++) it[r] += c->c0;
        int64_t *bi = c->best + k * c->K;
        float *bv = c->bestv + k * c->K;
        const int64_t n = merge_k(bi, bv, c->nbest[k], it, v, c->count[k], c->K, mi, mv);
        memcpy(bi, mi, (size_t)n * sizeof *mi);
        memcpy(bv, mv, (size_t)n * sizeof *mv);
        c->nbest[k] = n;
    }
    free(mi);
    free(mv);
    return GRM_OK;
}

/* One user's recommendations (catalog indices it [n], scores v) in the output format. */
static void rec_print(const grm__rec_opts *ro, const grm__dataset *ds, int64_t uid,
                      const int64_t *it, const float *v, int64_t n)
{
    if (ro->jsonl) {
        fprintf(ro->out, "{\"user\":%lld,\"items\":[", (long long)uid);
        for (int64_t r = 0; r < n; r++)
            fprintf(ro->out, "%s%lld", r ? "," : "", (long long)ds->catalog_ids[it[r]]);
        fputs("],\"scores\":[", ro->out);
        for (int64_t r = 0; r < n; r++) fprintf(ro->out, "%s%.9g", r ? "," : "", (double)v[r]);
        fputs("]}\n", ro->out);
    } else {
        for (int64_t r = 0; r < n; r++)
            fprintf(ro->out, "%lld\t%lld\t%lld\t%.9g\n", (long long)uid, (long long)(r + 1),
                    (long long)ds->catalog_ids[it[r]], (double)v[r]);
    }
}

/* The user indices of the ids listed in path (one per line; blank lines and lines starting
 * with '#' skipped) into *out [*n]. An id not in the data is GRM_EINVAL naming path:line. */
static grm_status read_users(const grm__dataset *ds, const char *path, int64_t **out, int64_t *n)
{
    FILE *f = fopen(path, "r");
    if (!f) return grm_errorf(GRM_EIO, "%s: cannot open: %s", path, strerror(errno));
    /* ds->users in id order, to find each listed id */
    int64_t *order = malloc((size_t)(ds->nusers + 1) * sizeof *order);
    int64_t cap = 1024, m = 0, line = 0;
    int64_t *v = malloc((size_t)cap * sizeof *v);
    grm_status st = GRM_OK;
    if (!order || !v) {
        st = grm_errorf(GRM_ENOMEM, "out of memory");
        goto out;
    }
    for (int64_t u = 0; u < ds->nusers; u++) order[u] = u;
    /* insertion into id order would be O(U^2); a shell sort keeps this self-contained */
    for (int64_t gap = ds->nusers / 2; gap > 0; gap /= 2)
        for (int64_t i = gap; i < ds->nusers; i++)
            for (int64_t j = i; j >= gap && ds->users[order[j - gap]] > ds->users[order[j]];
                 j -= gap) {
                int64_t tmp = order[j];
                order[j] = order[j - gap];
                order[j - gap] = tmp;
            }
    char buf[256];
    while (fgets(buf, sizeof buf, f)) {
        line++;
        char *s = buf, *end;
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '\n' || *s == '\0' || *s == '#' || *s == '\r') continue;
        errno = 0;
        const long long id = strtoll(s, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
        if (errno || end == s || *end) {
            st = grm_errorf(GRM_EINVAL, "%s:%lld: '%.*s' is not a user id (one integer per "
                            "line)", path, (long long)line, (int)strcspn(s, "\r\n"), s);
            goto out;
        }
        int64_t lo = 0, hi = ds->nusers - 1, found = -1;
        while (lo <= hi) {
            const int64_t mid = (lo + hi) / 2, x = ds->users[order[mid]];
            if (x == id) {
                found = order[mid];
                break;
            }
            if (x < id) lo = mid + 1;
            else hi = mid - 1;
        }
        if (found < 0) {
            st = grm_errorf(GRM_EINVAL, "%s:%lld: user %lld has no history in the pipeline's "
                            "data, so there is nothing to recommend from; list users of the "
                            "[reader] data", path, (long long)line, id);
            goto out;
        }
        if (m == cap) {
            int64_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *nv);
            if (!nv) {
                st = grm_errorf(GRM_ENOMEM, "out of memory");
                goto out;
            }
            v = nv;
        }
        v[m++] = found;
    }
    if (ferror(f)) st = grm_errorf(GRM_EIO, "%s: read error: %s", path, strerror(errno));
out:
    fclose(f);
    free(order);
    if (st != GRM_OK) {
        free(v);
        return st;
    }
    *out = v;
    *n = m;
    return GRM_OK;
}

static void progress(int64_t done, int64_t total, double t0, const char *what)
{
    const double el = now_s() - t0;
    const int width = 30, filled = total ? (int)(width * done / total) : width;
    fprintf(stderr, "\rrecommend [%.*s%*s] %lld/%lld %s, %.0f %s/s", filled,
            "##############################", width - filled, "", (long long)done,
            (long long)total, what, el > 0 ? (double)done / el : 0.0, what);
    fflush(stderr);
}

/* The state of users [n] (user indices; NULL: 0 .. n - 1) after their whole history, the
 * query recommend scores with, into out [n, D]: eval_batch users at a time. */
static grm_status user_states(grm__trainer *t, const int64_t *users, int64_t n, float *out)
{
    const grm__dataset *ds = t->ds;
    const int64_t D = t->p->tables[t->item_table].dim, EB = t->p->set.eval_batch;
    grm_status st = GRM_OK;
    for (int64_t lo = 0; lo < n && st == GRM_OK; lo += EB) {
        const int64_t b = n - lo < EB ? n - lo : EB;
        for (int64_t k = 0; k < b; k++) {
            const int64_t u = users ? users[lo + k] : lo + k;
            t->eb.users[k] = u;
            t->eb.hist_end[k] = ds->offsets[u + 1];   /* the whole history */
        }
        t->eb.b = b;
        const float *q;
        if ((st = grm__eval_queries(t, &q)) == GRM_OK)
            memcpy(out + lo * D, q, (size_t)(b * D) * sizeof *out);
        grm__scratch_reset();
    }
    return st;
}

/* A catalog of several chunks ([train] eval_memory_mb; a tiered table's catalog larger than
 * memory): every user's query first (U x D floats), then each chunk looked up once and
 * scored against every user, each user's K best merged chunk after chunk. The result is
 * the one-chunk ranking's: the tie rule (lower catalog index) holds across chunks. */
static grm_status rec_chunked(grm__trainer *t, const grm__rec_opts *ro, const int64_t *users,
                              int64_t nu, int64_t K, int cpu, double t0)
{
    const grm__dataset *ds = t->ds;
    const int64_t C = ds->ncatalog, D = t->p->tables[t->item_table].dim;
    const int64_t EB = t->p->set.eval_batch, CC = t->ev.chunk, nch = (C + CC - 1) / CC;
    grm_status st = GRM_OK;
    float *Q = malloc((size_t)(nu * D + 1) * sizeof *Q);
    int64_t *best = malloc((size_t)(nu * K + 1) * sizeof *best);
    float *bestv = malloc((size_t)(nu * K + 1) * sizeof *bestv);
    int64_t *nbest = calloc((size_t)nu + 1, sizeof *nbest);
    int64_t *items = malloc((size_t)(EB * K + 1) * sizeof *items);
    float *vals = malloc((size_t)(EB * K + 1) * sizeof *vals);
    int64_t *count = malloc((size_t)(EB + 1) * sizeof *count);
    if (!Q || !best || !bestv || !nbest || !items || !vals || !count) {
        st = grm_errorf(GRM_ENOMEM, "out of memory for the queries and the %lld best items of "
                        "%lld users", (long long)K, (long long)nu);
        goto out;
    }
    st = user_states(t, users, nu, Q);
    double last = 0;
    for (int64_t c = 0; c < nch && st == GRM_OK; c++) {
        const int64_t c0 = c * CC, cc = C - c0 < CC ? C - c0 : CC;
        if ((st = grm__eval_catalog_rows(t, c0, cc)) != GRM_OK) break;
        for (int64_t lo = 0; lo < nu && st == GRM_OK; lo += EB) {
            const int64_t b = nu - lo < EB ? nu - lo : EB;
            if (!cpu && (st = t->be.iface->gemm(t->be.context, 0, 1, b, cc, D, 1.0f,
                                                 Q + lo * D, D, t->ev.cat_rows, D, 0.0f,
                                                 t->ev.scores, cc, NULL)) != GRM_OK)
                break;
            rec_ctx rc = { .t = t, .q = Q + lo * D, .scores = t->ev.scores, .K = K, .D = D,
                           .C = cc, .c0 = c0, .keep_history = ro->keep_history,
                           .use_cblas = cpu, .users = users + lo, .items = items, .vals = vals,
                           .count = count, .best = best + lo * K, .bestv = bestv + lo * K,
                           .nbest = nbest + lo };
            const int64_t nt = grm__num_threads() > 0 ? grm__num_threads() : 1;
            st = grm__parallel_for(b, (b + nt - 1) / nt, rec_range, &rc);
        }
        if (ro->progress && now_s() - last > 0.2) {
            progress(c + 1, nch, t0, "chunks");
            last = now_s();
        }
    }
    for (int64_t k = 0; k < nu && st == GRM_OK; k++)
        rec_print(ro, ds, ds->users[users[k]], best + k * K, bestv + k * K, nbest[k]);
    if (st == GRM_OK && ferror(ro->out))
        st = grm_errorf(GRM_EIO, "%s: write error: %s", ro->out_name, strerror(errno));
out:
    free(Q);
    free(best);
    free(bestv);
    free(nbest);
    free(items);
    free(vals);
    free(count);
    return st;
}

grm_status grm__recommend(grm__pipeline *p, const grm__run_opts *opts,
                          const grm__rec_opts *ro, grm__rec_stats *stats)
{
    grm__trainer t;
    char path[4096];
    int64_t *users = NULL, nu = 0, *items = NULL, *count = NULL;
    float *vals = NULL;
    grm_status st = grm__trainer_open(p, opts, &t, path, sizeof path);
    if (st != GRM_OK) goto out;
    if (t.ranking || t.nranks > 1) {
        st = grm_errorf(GRM_ENOTSUP, "%s: recommend ranks a retrieval model's catalog on one "
                        "rank; this pipeline %s", p->cfg->path,
                        t.ranking ? "is [train] task = ranking" : "runs on several ranks");
        goto out;
    }
    const grm__dataset *ds = t.ds;
    const int64_t C = ds->ncatalog, D = p->tables[t.item_table].dim;
    const int64_t EB = p->set.eval_batch, K = ro->k < C ? ro->k : C;
    if (ro->users_path) {
        if ((st = read_users(ds, ro->users_path, &users, &nu)) != GRM_OK) goto out;
    } else {
        nu = ds->nusers;
        users = malloc((size_t)(nu + 1) * sizeof *users);
        if (users)
            for (int64_t u = 0; u < nu; u++) users[u] = u;
    }
    items = malloc((size_t)(EB * K + 1) * sizeof *items);
    vals = malloc((size_t)(EB * K + 1) * sizeof *vals);
    count = malloc((size_t)(EB + 1) * sizeof *count);
    if (!users || !items || !vals || !count) {
        st = grm_errorf(GRM_ENOMEM, "out of memory");
        goto out;
    }
    if (!opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "recommending %lld items to %lld users from %s "
                 "(step %lld), %lld candidates, history %s", (long long)K, (long long)nu,
                 path, (long long)t.step, (long long)C, ro->keep_history ? "kept" : "excluded");
    const double t0 = now_s();
    const int cpu = grm__backend_on_host(&t.be);
    if (t.ev.chunk < C) {
        if (!opts->quiet)
            grm__log(GRM_LOG_INFO, "grmhost", "recommend: the catalog's %lld items are scored "
                     "in %lld chunks of %lld items ([train] eval_memory_mb = %lld)",
                     (long long)C, (long long)((C + t.ev.chunk - 1) / t.ev.chunk),
                     (long long)t.ev.chunk, (long long)p->set.eval_memory_mb);
        st = rec_chunked(&t, ro, users, nu, K, cpu, t0);
        goto done;
    }
    if ((st = grm__eval_catalog(&t)) != GRM_OK) goto out;
    double last = 0;
    for (int64_t lo = 0; lo < nu; lo += EB) {
        const int64_t b = nu - lo < EB ? nu - lo : EB;
        for (int64_t k = 0; k < b; k++) {
            t.eb.users[k] = users[lo + k];
            t.eb.hist_end[k] = ds->offsets[users[lo + k] + 1];   /* the whole history */
        }
        t.eb.b = b;
        const float *q;
        if ((st = grm__eval_queries(&t, &q)) != GRM_OK) break;
        if (!cpu && (st = t.be.iface->gemm(t.be.context, 0, 1, b, C, D, 1.0f, q, D,
                                           t.ev.cat_rows, D, 0.0f, t.ev.scores, C, NULL))
                        != GRM_OK)
            break;
        rec_ctx rc = { .t = &t, .q = q, .scores = t.ev.scores, .K = K, .D = D, .C = C,
                       .keep_history = ro->keep_history, .use_cblas = cpu,
                       .users = t.eb.users, .items = items, .vals = vals, .count = count };
        /* one range per thread: each sgemm then multiplies a block of users, not a few */
        const int64_t nt = grm__num_threads() > 0 ? grm__num_threads() : 1;
        if ((st = grm__parallel_for(b, (b + nt - 1) / nt, rec_range, &rc)) != GRM_OK) break;
        for (int64_t k = 0; k < b; k++)
            rec_print(ro, ds, ds->users[users[lo + k]], items + k * K, vals + k * K, count[k]);
        if (ferror(ro->out)) {
            st = grm_errorf(GRM_EIO, "%s: write error: %s", ro->out_name, strerror(errno));
            break;
        }
        grm__scratch_reset();
        if (ro->progress && now_s() - last > 0.2) {
            progress(lo + b, nu, t0, "users");
            last = now_s();
        }
    }
done:
    if (ro->progress) {
        progress(st == GRM_OK ? nu : 0, nu, t0, "users");
        fputc('\n', stderr);
    }
    if (st == GRM_OK && fflush(ro->out) != 0)
        st = grm_errorf(GRM_EIO, "%s: write error: %s", ro->out_name, strerror(errno));
    stats->users = nu;
    stats->seconds = now_s() - t0;
    stats->candidates = C;
out:
    free(users);
    free(items);
    free(vals);
    free(count);
    grm__trainer_close(&t);
    return st;
}

/* ---- export ---- */

/* Floats data [n] into out as dtype (F32 copied, F16 rounded to nearest even through
 * _Float16, BF16 rounded to nearest even on the bits). */
static void to_dtype(const float *data, int64_t n, int32_t dtype, void *out)
{
    if (dtype == GRM_DTYPE_F32) {
        memcpy(out, data, (size_t)n * sizeof *data);
        return;
    }
    uint16_t *h = out;
    for (int64_t i = 0; i < n; i++) {
        if (dtype == GRM_DTYPE_F16) {
            _Float16 x = (_Float16)data[i];
            memcpy(&h[i], &x, 2);
        } else {
            uint32_t b;
            memcpy(&b, &data[i], 4);
            if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu))
                h[i] = (uint16_t)((b >> 16) | 0x40);   /* NaN stays a (quiet) NaN */
            else
                h[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
        }
    }
}

/* A float tensor [n] as dtype: *out malloc'd, or data itself for F32 (*owned 0). */
static grm_status as_dtype(const float *data, int64_t n, int32_t dtype, void **out, int *owned)
{
    *owned = 0;
    if (dtype == GRM_DTYPE_F32) {
        *out = (void *)data;
        return GRM_OK;
    }
    uint16_t *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    if (!h) return grm_errorf(GRM_ENOMEM, "out of memory");
    to_dtype(data, n, dtype, h);
    *out = h;
    *owned = 1;
    return GRM_OK;
}

/* Where the rows of a tensor given with data NULL come from, a range at a time (save_rows):
 * the catalog's rows in chunks, or a store tensor's through tensor_rows; both floats, written
 * as the export's dtype. */
typedef struct ex_src {
    int kind;                  /* EX_CATALOG, EX_STORE */
    int32_t index;             /* EX_STORE: the table (ex_list.tabs) */
    int64_t dim;
} ex_src;
enum { EX_NONE, EX_CATALOG, EX_STORE };

/* The tensors of one export file, with what they own. */
typedef struct ex_list {
    grm_named_tensor v[256];
    char *names[256];
    ex_src src[256];
    void *bufs[512];
    int n, nbufs, streamed;
    grm__trainer *t;
    int32_t dtype;
    float *rows;               /* [cap] a range of f32 rows */
    size_t cap;
    grm__table_src tabs[64];   /* the tables whose rows are read when the file is written */
    int nsrc;
} ex_list;

static grm_status ex_add(ex_list *l, const char *name, void *data, int32_t dtype, int32_t ndim,
                         int64_t d0, int64_t d1, int own)
{
    if (l->n == 256 || l->nbufs == 512)
        return grm_errorf(GRM_ENOTSUP, "export: more than 256 tensors in one file");
    char *nm = strdup(name);
    if (!nm) return grm_errorf(GRM_ENOMEM, "out of memory");
    l->names[l->n] = nm;
    l->src[l->n] = (ex_src){ EX_NONE, 0, 0 };
    l->v[l->n++] = (grm_named_tensor){ nm, { .data = data, .dtype = dtype, .ndim = ndim,
                                             .shape = { d0, d1, 1, 1 }, .device = CPU } };
    if (own) l->bufs[l->nbufs++] = data;
    return GRM_OK;
}

/* A float tensor converted to the export dtype, into a buffer l owns (data is the caller's
 * and may be freed before the file is written). */
static grm_status ex_add_f(ex_list *l, const char *name, const float *data, int32_t dtype,
                           int32_t ndim, int64_t d0, int64_t d1)
{
    const int64_t n = ndim == 2 ? d0 * d1 : d0;
    void *out;
    int owned;
    grm_status st = as_dtype(data, n, dtype, &out, &owned);
    if (st != GRM_OK) return st;
    if (!owned) {
        if (!(out = malloc((size_t)(n > 0 ? n : 1) * sizeof(float))))
            return grm_errorf(GRM_ENOMEM, "out of memory");
        memcpy(out, data, (size_t)n * sizeof(float));
        owned = 1;
    }
    if ((st = ex_add(l, name, out, dtype, ndim, d0, d1, owned)) != GRM_OK && owned) free(out);
    return st;
}

/* A tensor [d0, dim] of the export dtype whose rows ex_rows reads from src when the file is
 * written, never held whole. */
static grm_status ex_add_rows(ex_list *l, const char *name, ex_src src, int64_t d0)
{
    grm_status st = ex_add(l, name, NULL, l->dtype, 2, d0, src.dim, 0);
    if (st == GRM_OK) {
        l->src[l->n - 1] = src;
        l->streamed = 1;
    }
    return st;
}

static void ex_free(ex_list *l)
{
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    for (int i = 0; i < l->nbufs; i++) free(l->bufs[i]);
    for (int i = 0; i < l->nsrc; i++) grm__table_close(&l->tabs[i]);
    free(l->rows);
    grm__trainer *t = l->t;
    const int32_t dtype = l->dtype;
    memset(l, 0, sizeof *l);
    l->t = t;
    l->dtype = dtype;
}

/* grm_ckpt_rows_fn of save_rows: rows [row0, row0 + n) of tensor `index` into out. */
static grm_status ex_rows(void *user, int64_t index, int64_t row0, int64_t n, void *out)
{
    ex_list *l = user;
    grm__trainer *t = l->t;
    const ex_src *s = &l->src[index];
    const size_t es = grm_dtype_size(l->dtype);
    grm_status st = GRM_OK;
    if (s->kind == EX_CATALOG) {    /* at most a catalog chunk at a time */
        for (int64_t r = 0; r < n && st == GRM_OK; r += t->ev.chunk) {
            const int64_t m = n - r < t->ev.chunk ? n - r : t->ev.chunk;
            if ((st = grm__eval_catalog_rows(t, row0 + r, m)) == GRM_OK)
                to_dtype(t->ev.cat_rows, m * s->dim, l->dtype,
                         (char *)out + (size_t)(r * s->dim) * es);
        }
        return st;
    }
    /* fp32: the store's rows straight into out; fp16, bf16: through a buffer of floats */
    const size_t need = (size_t)(n * s->dim) * sizeof(float);
    if (l->dtype != GRM_DTYPE_F32 && need > l->cap) {
        float *b = realloc(l->rows, need);
        if (!b) return grm_errorf(GRM_ENOMEM, "out of memory for %lld rows", (long long)n);
        l->rows = b;
        l->cap = need;
    }
    float *f = l->dtype == GRM_DTYPE_F32 ? out : l->rows;
    if ((st = grm__table_read(t, &l->tabs[s->index], row0, n, f)) != GRM_OK) return st;
    if (f != out) to_dtype(f, n * s->dim, l->dtype, out);
    return GRM_OK;
}

static grm_status ex_save(const grm__ckpt_fmt *f, const char *dir, const char *file,
                          ex_list *l, const char *meta)
{
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    grm_status st = l->streamed
        ? f->ops->save_rows(f->inst, path, l->v, l->n, meta, ex_rows, l)
        : f->ops->save(f->inst, path, l->v, l->n, meta);
    ex_free(l);
    return st;
}

/* The store's tensors of physical table `name` (weight, ids, steps) as tensors() hands
 * them out, borrowed. */
typedef struct ex_table {
    grm_named_tensor weight, ids, steps;
    int have_w, have_ids, have_steps;
} ex_table;

static grm_status ex_find_table(grm__trainer *t, const char *name, ex_table *et)
{
    memset(et, 0, sizeof *et);
    const size_t n = strlen(name);
    for (int32_t k = 0;; k++) {
        grm_named_tensor nt;
        grm_status st = t->sp.eops->tensors(t->p->emb.inst, k, &nt);
        if (st == GRM_ENOTFOUND) break;
        if (st != GRM_OK) return st;
        if (strncmp(nt.name, name, n) != 0 || nt.name[n] != '.') continue;
        const char *what = nt.name + n + 1;
        if (!strcmp(what, "weight")) et->weight = nt, et->have_w = 1;
        else if (!strcmp(what, "ids")) et->ids = nt, et->have_ids = 1;
        else if (!strcmp(what, "steps")) et->steps = nt, et->have_steps = 1;
    }
    return GRM_OK;
}

typedef struct key_row {
    int64_t key, row;
} key_row;

static int by_key(const void *a, const void *b)
{
    const int64_t x = ((const key_row *)a)->key, y = ((const key_row *)b)->key;
    return x < y ? -1 : x > y;
}

/* Table s through tensors(): its keys sorted, and where each key's row is in the weight
 * the store hands out (borrowed). */
static grm_status table_open_whole(grm__trainer *t, int32_t s, grm__table_src *src)
{
    ex_table et;
    grm_status st = ex_find_table(t, t->p->phys[s].name, &et);
    if (st != GRM_OK) return st;
    if (!et.have_w || et.weight.tensor.dtype != GRM_DTYPE_F32 || et.weight.tensor.ndim != 2)
        return GRM_OK;
    const int64_t R = et.weight.tensor.shape[0];
    const int by_id = et.have_ids && et.ids.tensor.shape[0] == R;
    int64_t *keys = malloc((size_t)(R + 1) * sizeof *keys);
    if (!keys) return grm_errorf(GRM_ENOMEM, "out of memory for %lld keys", (long long)R);
    int64_t n = 0;
    if (!by_id) {   /* rows indexed by id: those training updated, in id order */
        const int steps = et.have_steps && et.steps.tensor.shape[0] == R;
        for (int64_t r = 0; r < R; r++)
            if (!steps || ((const int64_t *)et.steps.tensor.data)[r] > 0) keys[n++] = r;
    } else {        /* a hash store lists its rows in slot order: sorted by key */
        key_row *kr = malloc((size_t)(R + 1) * sizeof *kr);
        int64_t *row = malloc((size_t)(R + 1) * sizeof *row);
        if (!kr || !row) {
            free(kr), free(row), free(keys);
            return grm_errorf(GRM_ENOMEM, "out of memory for %lld keys", (long long)R);
        }
        for (int64_t r = 0; r < R; r++)
            kr[r] = (key_row){ ((const int64_t *)et.ids.tensor.data)[r], r };
        qsort(kr, (size_t)R, sizeof *kr, by_key);
        for (n = 0; n < R; n++) keys[n] = kr[n].key, row[n] = kr[n].row;
        free(kr);
        src->row = row;
    }
    src->keys = keys;
    src->n = n;
    src->dim = et.weight.tensor.shape[1];
    src->base = et.weight.tensor.data;
    return GRM_OK;
}

grm_status grm__table_open(grm__trainer *t, int32_t s, grm__table_src *src)
{
    const grm_emb_ops *e = t->sp.eops;
    const char *name = t->p->phys[s].name;
    const size_t len = strlen(name);
    memset(src, 0, sizeof *src);
    src->weight = -1;
    if (!GRM_HAS_OP(grm_emb_ops, e, tensor_rows)) return table_open_whole(t, s, src);
    grm_named_tensor w = { 0 }, ids = { 0 };
    int32_t wk = -1, ik = -1;
    for (int32_t k = 0;; k++) {
        grm_named_tensor nt;
        grm_status st = e->tensor_rows(t->p->emb.inst, k, &nt, 0, 0, NULL);
        if (st == GRM_ENOTFOUND) break;
        if (st != GRM_OK) return st;
        if (strncmp(nt.name, name, len) != 0 || nt.name[len] != '.') continue;
        if (!strcmp(nt.name + len + 1, "weight")) w = nt, wk = k;
        else if (!strcmp(nt.name + len + 1, "ids")) ids = nt, ik = k;
    }
    if (wk < 0 || ik < 0 || w.tensor.dtype != GRM_DTYPE_F32 || w.tensor.ndim != 2
        || ids.tensor.dtype != GRM_DTYPE_I64 || ids.tensor.ndim != 1
        || ids.tensor.shape[0] != w.tensor.shape[0])
        return table_open_whole(t, s, src);
    const int64_t R = w.tensor.shape[0];
    int64_t *keys = malloc((size_t)(R + 1) * sizeof *keys);
    if (!keys) return grm_errorf(GRM_ENOMEM, "out of memory for %lld keys", (long long)R);
    grm_status st = e->tensor_rows(t->p->emb.inst, ik, NULL, 0, R, keys);
    int sorted = 1;
    for (int64_t r = 1; st == GRM_OK && r < R && sorted; r++) sorted = keys[r - 1] < keys[r];
    if (st != GRM_OK || !sorted) {
        free(keys);
        return st != GRM_OK ? st : table_open_whole(t, s, src);
    }
    src->keys = keys;
    src->n = R;
    src->dim = w.tensor.shape[1];
    src->weight = wk;
    return GRM_OK;
}

grm_status grm__table_read(grm__trainer *t, const grm__table_src *src, int64_t row0, int64_t n,
                           float *out)
{
    const int64_t D = src->dim;
    if (src->weight < 0) {
        for (int64_t i = 0; i < n; i++) {
            const int64_t r = src->row ? src->row[row0 + i] : src->keys[row0 + i];
            memcpy(out + i * D, src->base + r * D, (size_t)D * sizeof *out);
        }
        return GRM_OK;
    }
    const grm_status st = t->sp.eops->tensor_rows(t->p->emb.inst, src->weight, NULL, row0, n,
                                                  out);
    if (st != GRM_OK)
        grm_error_prefix("[embedding] %s: tensor_rows: ", t->p->emb.plugin->info->name);
    return st;
}

void grm__table_close(grm__table_src *src)
{
    free(src->keys);
    free(src->row);
    memset(src, 0, sizeof *src);
    src->weight = -1;
}

/* Table s's existing rows into l as emb.<name>.ids (whole: 8 bytes a row) and .weight (a
 * range at a time from the store, never copied whole). *nrows 0 when the store has no such
 * table. */
static grm_status ex_table_rows(ex_list *l, int32_t s, int64_t *nrows)
{
    grm__trainer *t = l->t;
    const char *name = t->p->phys[s].name;
    *nrows = 0;
    if (l->nsrc == (int)(sizeof l->tabs / sizeof *l->tabs))
        return grm_errorf(GRM_ENOTSUP, "export: more than %d tables", l->nsrc);
    grm__table_src *src = &l->tabs[l->nsrc];
    grm_status st = grm__table_open(t, s, src);
    if (st != GRM_OK || !src->keys) return st;
    l->nsrc++;
    char tn[256];
    snprintf(tn, sizeof tn, "emb.%s.ids", name);
    /* the ids are the file's (l frees them); the source keeps reading them until then */
    if ((st = ex_add(l, tn, src->keys, GRM_DTYPE_I64, 1, src->n, 1, 0)) != GRM_OK) return st;
    snprintf(tn, sizeof tn, "emb.%s.weight", name);
    if ((st = ex_add_rows(l, tn, (ex_src){ EX_STORE, l->nsrc - 1, src->dim }, src->n)) != GRM_OK)
        return st;
    *nrows = src->n;
    return GRM_OK;
}

/* JSON string s (names from the INI: quotes and backslashes escaped). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static const char *pool_name(int32_t pooling)
{
    static const char *const n[] = { "mean", "sum", "none", "tile" };
    return pooling >= 0 && pooling <= 3 ? n[pooling] : "?";
}

static grm_status write_manifest(grm__trainer *t, const char *dir, const char *ckpt,
                                 const char *dtype, const int64_t *table_rows)
{
    grm__pipeline *p = t->p;
    char path[4096 + 64], tmp[4096 + 96];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return grm_errorf(GRM_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    const int32_t D = p->tables[t->item_table].dim;
    fprintf(f, "{\n  \"format\": \"grm-export\",\n  \"format_version\": 1,\n");
    fprintf(f, "  \"grm_version\": \"%s\",\n  \"pipeline\": ", GRM_VERSION_STRING);
    json_str(f, p->set.name);
    fprintf(f, ",\n  \"config\": ");
    json_str(f, p->cfg->path);
    fprintf(f, ",\n  \"config_hash\": \"%016llx\",\n  \"checkpoint\": ",
            (unsigned long long)grm__ckpt_config_hash(p->cfg));
    json_str(f, ckpt);
    fprintf(f, ",\n  \"step\": %lld,\n  \"dtype\": \"%s\",\n", (long long)t->step, dtype);
    fprintf(f, "  \"task\": \"%s\",\n  \"dim\": %d,\n", t->ranking ? "ranking" : "retrieval",
            (int)D);
    fprintf(f, "  \"scoring\": \"score(user, item) = user.state[user] . item.weight[item]; "
            "items in the user's history excluded; ties to the lower item id\",\n");
    fprintf(f, "  \"files\": {\"items\": \"items.safetensors\", \"users\": \"users.safetensors\","
            " \"tables\": \"tables.safetensors\", \"dense\": \"dense.safetensors\"},\n");
    fprintf(f, "  \"blocks\": [");
    for (int32_t i = 0; i < p->ndense; i++) {
        fprintf(f, "%s\n    {\"index\": %d, \"section\": ", i ? "," : "", (int)i);
        json_str(f, p->dense[i].label);
        fprintf(f, ", \"plugin\": ");
        json_str(f, p->dense[i].plugin->info->name);
        fprintf(f, ", \"in_dim\": %lld, \"out_dim\": %lld, \"parameters\": [",
                (long long)t->dn.dims[i], (long long)t->dn.dims[i + 1]);
        char pre[32];
        snprintf(pre, sizeof pre, "dense.%d.", (int)i);
        int first = 1;
        for (int32_t k = 0; k < t->dn.nparams; k++) {
            const grm__dparam *dp = &t->dn.params[k];
            if (strncmp(dp->name, pre, strlen(pre)) != 0) continue;
            fprintf(f, "%s{\"name\": ", first ? "" : ", ");
            json_str(f, dp->name);
            fprintf(f, ", \"shape\": [");
            for (int32_t d = 0; d < dp->shape.ndim; d++)
                fprintf(f, "%s%lld", d ? ", " : "", (long long)dp->shape.shape[d]);
            fprintf(f, "]}");
            first = 0;
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n  ],\n  \"head\": {\"section\": \"head\", \"plugin\": ");
    json_str(f, p->head.plugin ? p->head.plugin->info->name : "");
    fprintf(f, "},\n  \"features\": [");
    for (int32_t i = 0; i < p->nfeatures; i++) {
        const grm__feature *fe = &p->features[i];
        fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
        json_str(f, fe->name);
        fprintf(f, ", \"source\": ");
        json_str(f, fe->source);
        fprintf(f, ", \"table\": ");
        json_str(f, fe->table);
        fprintf(f, ", \"dim\": %d, \"pooling\": \"%s\", \"window\": %lld, \"sequence\": %s}",
                (int)fe->dim, pool_name(fe->pooling), (long long)fe->window,
                fe->is_sequence ? "true" : "false");
    }
    fprintf(f, "\n  ],\n  \"id_spaces\": [");
    for (int32_t s = 0; s < p->ntables; s++) {
        const grm__sparse_slot *sl = &p->plan->slots[s];
        const grm__sparse_table *pt = &p->plan->tables[sl->table];
        fprintf(f, "%s\n    {\"name\": ", s ? "," : "");
        json_str(f, p->tables[s].name);
        fprintf(f, ", \"dim\": %d, \"physical_table\": ", (int)p->tables[s].dim);
        json_str(f, p->phys[sl->table].name);
        fprintf(f, ", \"slot\": %d, \"k\": %d, \"merged\": %s, \"max_id\": %lld}", (int)sl->index,
                (int)sl->k, pt->nslots > 1 ? "true" : "false", (long long)pt->max_id);
    }
    fprintf(f, "\n  ],\n  \"merged_key\": \"key = (slot << (63 - k)) | id (MTGRBoost §4.2): the "
            "ids of tables.safetensors; k = 0 and key = id for a table of one id space\",\n");
    fprintf(f, "  \"tables\": [");
    for (int32_t s = 0; s < p->nphys; s++) {
        fprintf(f, "%s\n    {\"name\": ", s ? "," : "");
        json_str(f, p->phys[s].name);
        fprintf(f, ", \"dim\": %d, \"rows\": %lld}", (int)p->phys[s].dim,
                (long long)table_rows[s]);
    }
    fprintf(f, "\n  ],\n  \"items\": %lld,\n  \"users\": %lld\n}\n", (long long)t->ds->ncatalog,
            (long long)t->ds->nusers);
    int err = ferror(f) ? EIO : 0;
    if (!err && fflush(f) != 0) err = errno;
    if (!err && fsync(fileno(f)) != 0) err = errno;
    if (fclose(f) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) {
        unlink(tmp);
        return grm_errorf(GRM_EIO, "%s: cannot write: %s", path, strerror(err));
    }
    return GRM_OK;
}

grm_status grm__export(grm__pipeline *p, const grm__run_opts *opts, const char *dir,
                       int32_t dtype, int64_t *nfiles)
{
    grm__trainer t;
    char path[4096];
    ex_list l = { 0 };
    grm__ckpt_fmt fmt = { 0 };
    int64_t *table_rows = NULL;
    const char *dname = dtype == GRM_DTYPE_F16 ? "fp16" : dtype == GRM_DTYPE_BF16 ? "bf16"
                                                                                 : "fp32";
    grm_status st = grm__trainer_open(p, opts, &t, path, sizeof path);
    l.t = &t;
    l.dtype = dtype;
    if (st != GRM_OK) goto out;
    if (t.ranking || t.nranks > 1) {
        st = grm_errorf(GRM_ENOTSUP, "%s: export writes a retrieval model from one rank; this "
                        "pipeline %s", p->cfg->path, t.ranking ? "is [train] task = ranking"
                                                               : "runs on several ranks");
        goto out;
    }
    const grm__plugin *pl;
    if ((st = grm__registry_get(p->reg, "ckpt-safetensors", GRM_KIND_CKPT, &pl)) != GRM_OK)
        goto out;
    fmt.plugin = pl;
    fmt.ops = pl->info->ops;
    /* defaults: one file per part however large (shard_bytes = 0 is not the default, but
     * an export is read whole by its user) */
    if ((st = fmt.ops->create(NULL, &fmt.inst)) != GRM_OK) goto out;
    if ((st = grm__ckpt_make_dirs(dir)) != GRM_OK) goto out;
    const grm__dataset *ds = t.ds;
    const int64_t C = ds->ncatalog, U = ds->nusers;
    const int32_t D = p->tables[t.item_table].dim;
    char meta[512];
    snprintf(meta, sizeof meta, "{\"format\":\"grm-export\",\"step\":%lld,\"config_hash\":"
             "\"%016llx\",\"dtype\":\"%s\"}", (long long)t.step,
             (unsigned long long)grm__ckpt_config_hash(p->cfg), dname);

    /* items: the catalog's ids and the rows recommend scores, looked up a catalog chunk at
     * a time as the file is written ([train] eval_memory_mb; a tiered table's catalog) */
    int64_t *ids = malloc((size_t)(C + 1) * sizeof *ids);
    if (!ids || (st = ex_add(&l, "item.ids", ids, GRM_DTYPE_I64, 1, C, 1, 1)) != GRM_OK) {
        free(ids);
        if (st == GRM_OK) st = grm_errorf(GRM_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(ids, ds->catalog_ids, (size_t)C * sizeof *ids);
    if ((st = ex_add_rows(&l, "item.weight", (ex_src){ EX_CATALOG, 0, D }, C)) != GRM_OK
        || (st = ex_save(&fmt, dir, "items.safetensors", &l, meta)) != GRM_OK)
        goto out;

    /* users: each user's state after their whole history (recommend's query) */
    float *state = malloc((size_t)(U * D + 1) * sizeof *state);
    ids = malloc((size_t)(U + 1) * sizeof *ids);
    if (!state || !ids) {
        free(state);
        free(ids);
        st = grm_errorf(GRM_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(ids, ds->users, (size_t)U * sizeof *ids);
    st = user_states(&t, NULL, U, state);
    if (st == GRM_OK) st = ex_add(&l, "user.ids", ids, GRM_DTYPE_I64, 1, U, 1, 1);
    else free(ids);
    if (st == GRM_OK) st = ex_add_f(&l, "user.state", state, dtype, 2, U, D);
    free(state);
    /* each user's history (item ids, time order), what recommend excludes */
    const int64_t H = ds->offsets[U] - ds->offsets[0];
    int64_t *hoff = malloc((size_t)(U + 1) * sizeof *hoff);
    int64_t *hist = malloc((size_t)(H + 1) * sizeof *hist);
    if (st == GRM_OK && (!hoff || !hist)) st = grm_errorf(GRM_ENOMEM, "out of memory");
    if (st == GRM_OK) {
        for (int64_t u = 0; u <= U; u++) hoff[u] = ds->offsets[u] - ds->offsets[0];
        memcpy(hist, ds->items + ds->offsets[0], (size_t)H * sizeof *hist);
        if ((st = ex_add(&l, "user.history_offsets", hoff, GRM_DTYPE_I64, 1, U + 1, 1, 1))
            == GRM_OK)
            hoff = NULL;   /* l owns it now */
        if (st == GRM_OK
            && (st = ex_add(&l, "user.history", hist, GRM_DTYPE_I64, 1, H, 1, 1)) == GRM_OK)
            hist = NULL;
    }
    free(hoff);
    free(hist);
    if (st != GRM_OK || (st = ex_save(&fmt, dir, "users.safetensors", &l, meta)) != GRM_OK)
        goto out;

    /* tables: each physical table's existing rows with their keys, a range at a time
     * (ex_table_rows) */
    table_rows = calloc((size_t)p->nphys + 1, sizeof *table_rows);
    if (!table_rows) {
        st = grm_errorf(GRM_ENOMEM, "out of memory");
        goto out;
    }
    for (int32_t s = 0; s < p->nphys && st == GRM_OK; s++)
        st = ex_table_rows(&l, s, &table_rows[s]);
    if (st != GRM_OK || (st = ex_save(&fmt, dir, "tables.safetensors", &l, meta)) != GRM_OK)
        goto out;

    /* dense: every block parameter under its own name, dense.N.<parameter> */
    for (int32_t k = 0; k < t.dn.nparams && st == GRM_OK; k++) {
        const grm__dparam *dp = &t.dn.params[k];
        void *out = NULL;
        int owned = 0;
        if ((st = as_dtype(dp->value, dp->numel, dtype, &out, &owned)) != GRM_OK) break;
        if ((st = ex_add(&l, dp->name, out, dtype, dp->shape.ndim, dp->shape.shape[0],
                         dp->shape.ndim > 1 ? dp->shape.shape[1] : 1, owned)) != GRM_OK) {
            if (owned) free(out);
            break;
        }
        for (int32_t d = 2; d < dp->shape.ndim; d++)
            l.v[l.n - 1].tensor.shape[d] = dp->shape.shape[d];
    }
    if (st != GRM_OK || (st = ex_save(&fmt, dir, "dense.safetensors", &l, meta)) != GRM_OK)
        goto out;
    if ((st = write_manifest(&t, dir, path, dname, table_rows)) != GRM_OK) goto out;
    *nfiles = 5;
    if (!opts->quiet)
        grm__log(GRM_LOG_INFO, "grmhost", "exported %s (step %lld) to %s: %lld items, %lld "
                 "users, %d tables, %d dense parameters, %s", path, (long long)t.step, dir,
                 (long long)C, (long long)U, (int)p->nphys, (int)t.dn.nparams, dname);
out:
    ex_free(&l);
    free(table_rows);
    grm__ckpt_fmt_fini(&fmt);
    grm__trainer_close(&t);
    return st;
}
