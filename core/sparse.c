/* core/sparse.c - table merging (MTGRBoost §4.2), segment unique and layout recovery (FusedRec
 * §3, Fig. 5, Algorithm 1), ids partition (FusedRec §3 rankwise sort) and the RecIS Table 1
 * operators (gather, scatter-add, reduce sum/mean, sequence tile, bucketize, mod). The plain
 * loops that specify each operator live in tests/test-sparse.c; the code here is the fast CPU
 * path: vectorisable inner loops over D (restrict pointers, D as the bound; the hot range
 * functions are compiled for AVX-512, AVX2 and baseline and picked at load time) and
 * grm__parallel_for over partitions that never depend on the thread count. */
#include "sparse.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <xmmintrin.h>   /* _mm_stream_ps: SSE, part of the x86-64 baseline */
#define SPARSE_HAVE_NT 1
#else
#define SPARSE_HAVE_NT 0
#endif

#include "grm_core.h"

__extension__ typedef unsigned __int128 sparse_u128;

/* ---- workspace ---- */

void grm__sparse_work_init(grm__sparse_work *work)
{
    work->mem = NULL;
    work->bytes = 0;
}

void grm__sparse_work_fini(grm__sparse_work *work)
{
    if (!work) return;
    free(work->mem);
    work->mem = NULL;
    work->bytes = 0;
}

/* A bump layout: lay_take returns the 64-byte aligned offset of the next `bytes`. */
typedef struct sparse_layout {
    size_t off;
} sparse_layout;

static size_t lay_take(sparse_layout *l, size_t bytes)
{
    size_t at = (l->off + 63) & ~(size_t)63;
    l->off = at + bytes;
    return at;
}

/* Grow `work` to at least `bytes`; the contents are not kept. */
static grm_status work_get(grm__sparse_work *work, size_t bytes, const char *where,
                           unsigned char **out)
{
    if (!work)
        return grm_errorf(GRM_EINVAL, "%s: workspace is NULL; pass a grm__sparse_work", where);
    if (work->mem && work->bytes >= bytes) return *out = work->mem, GRM_OK;
    free(work->mem);
    work->mem = NULL;
    work->bytes = 0;
    size_t cap = bytes + bytes / 4 + 64;   /* slack so a slightly larger batch does not regrow */
    void *p = NULL;
    if (posix_memalign(&p, 64, cap) != 0)
        return grm_errorf(GRM_ENOMEM, "%s: out of memory allocating %zu bytes of workspace",
                          where, cap);
    work->mem = p;
    work->bytes = cap;
    *out = p;
    return GRM_OK;
}

/* ---- shared helpers ---- */

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int ilog2_ceil(int64_t x)   /* smallest k with 2^k >= x (x >= 1) */
{
    int k = 0;
    while (((int64_t)1 << k) < x) k++;
    return k;
}

/* Check a jagged offsets array [B+1]: starts at 0, non-decreasing. */
static grm_status check_offsets(const char *where, const int64_t *offsets, int64_t B)
{
    if (B < 0) return grm_errorf(GRM_EINVAL, "%s: segment count %lld is negative", where,
                                 (long long)B);
    if (!offsets) return grm_errorf(GRM_EINVAL, "%s: offsets is NULL", where);
    if (offsets[0] != 0)
        return grm_errorf(GRM_EINVAL, "%s: offsets[0] is %lld; offsets must start at 0", where,
                          (long long)offsets[0]);
    for (int64_t b = 0; b < B; b++) {
        if (offsets[b + 1] < offsets[b])
            return grm_errorf(GRM_EINVAL, "%s: offsets decrease at segment %lld (%lld > %lld)",
                              where, (long long)b, (long long)offsets[b],
                              (long long)offsets[b + 1]);
    }
    return GRM_OK;
}

/* The first j with idx[j] outside [0, nrows): the message of every range check. */
static grm_status index_error(const char *where, const int64_t *idx, int64_t n, int64_t nrows)
{
    for (int64_t j = 0; j < n; j++) {
        if (idx[j] < 0 || idx[j] >= nrows)
            return grm_errorf(GRM_EINVAL, "%s: index %lld at position %lld is outside "
                              "[0, %lld)", where, (long long)idx[j], (long long)j,
                              (long long)nrows);
    }
    return grm_errorf(GRM_EINTERNAL, "%s: index check failed but no index is out of range",
                      where);
}

/* Branch-free range check of idx [n]: nonzero when some index is outside [0, nrows). */
GRM__HOT_LOOP
static uint64_t index_any_bad(const int64_t *restrict idx, int64_t n, int64_t nrows)
{
    uint64_t bad = 0;
    for (int64_t j = 0; j < n; j++) bad |= (uint64_t)((uint64_t)idx[j] >= (uint64_t)nrows);
    return bad;
}

/* First f in [0, F] with offsets[f] > j (offsets [F+1], j < offsets[F]): feature f - 1 holds j. */
static int32_t seg_upper(const int64_t *offsets, int32_t F, int64_t j)
{
    int32_t lo = 0, hi = F;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (offsets[mid] > j) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* x mod m for x >= 0 through the reciprocal M = floor((2^64 - 1) / m): q = (x * M) >> 64 is
 * floor(x / m) or up to 2 less (x < 2^64, so the error of M contributes < 2), hence the two
 * conditional subtractions. */
static inline uint64_t fastmod_u64(uint64_t x, uint64_t m, uint64_t M)
{
    uint64_t q = (uint64_t)(((sparse_u128)x * M) >> 64);
    uint64_t r = x - q * m;
    r -= r >= m ? m : 0;
    r -= r >= m ? m : 0;
    return r;
}

/* ---- table merging (MTGRBoost §4.2) ---- */

static char *dup_str(const char *s)
{
    size_t len = strlen(s) + 1;
    char *d = malloc(len);
    if (d) memcpy(d, s, len);
    return d;
}

static int spec_equal(const grm__sparse_feature_spec *a, const grm__sparse_feature_spec *b)
{
    return a->dim == b->dim && strcmp(a->optimizer, b->optimizer) == 0 &&
           strcmp(a->init, b->init) == 0 && a->init_scale == b->init_scale;
}

static int has_table(const grm__sparse_feature_spec *s)
{
    return s->table && s->table[0];
}

void grm__sparse_plan_destroy(grm__sparse_plan *plan)
{
    if (!plan) return;
    for (int32_t t = 0; t < plan->ntables; t++) {
        free(plan->tables[t].name);
        free(plan->tables[t].optimizer);
        free(plan->tables[t].init);
        free(plan->tables[t].features);
    }
    free(plan->tables);
    if (plan->feature_names) {
        for (int32_t f = 0; f < plan->nfeatures; f++) free(plan->feature_names[f]);
    }
    free(plan->feature_names);
    free(plan->slots);
    free(plan);
}

static grm_status check_spec(const grm__sparse_feature_spec *specs, int32_t i)
{
    const grm__sparse_feature_spec *s = &specs[i];
    if (!s->name || !s->name[0])
        return grm_errorf(GRM_EINVAL, "sparse plan: feature %d has no name", i);
    if (s->dim <= 0)
        return grm_errorf(GRM_EINVAL, "sparse plan: feature \"%s\": dim %d must be > 0",
                          s->name, s->dim);
    if (!s->optimizer || !s->optimizer[0])
        return grm_errorf(GRM_EINVAL, "sparse plan: feature \"%s\" has no optimizer", s->name);
    if (!s->init || !s->init[0])
        return grm_errorf(GRM_EINVAL, "sparse plan: feature \"%s\" has no initializer",
                          s->name);
    for (int32_t j = 0; j < i; j++) {
        if (strcmp(specs[j].name, s->name) == 0)
            return grm_errorf(GRM_EINVAL, "sparse plan: feature \"%s\" is declared twice "
                              "(features %d and %d)", s->name, j, i);
    }
    return GRM_OK;
}

grm_status grm__sparse_plan_build(const grm__sparse_feature_spec *specs, int32_t n,
                                  grm__sparse_plan **out)
{
    grm_status st = GRM_OK;
    grm__sparse_plan *plan = NULL;
    int32_t *first = NULL;   /* [n] first feature of each table (defines its spec) */

    *out = NULL;
    if (n < 0 || n > (1 << 24))
        return grm_errorf(GRM_EINVAL, "sparse plan: %d features; allowed 0 .. %d", n, 1 << 24);
    if (n > 0 && !specs) return grm_errorf(GRM_EINVAL, "sparse plan: specs is NULL");
    for (int32_t i = 0; i < n; i++) {
        if ((st = check_spec(specs, i)) != GRM_OK) return st;
    }

    plan = calloc(1, sizeof *plan);
    if (!plan) goto nomem;
    plan->nfeatures = n;
    plan->slots = calloc((size_t)n + 1, sizeof *plan->slots);
    plan->feature_names = calloc((size_t)n + 1, sizeof *plan->feature_names);
    plan->tables = calloc((size_t)n + 1, sizeof *plan->tables);
    first = calloc((size_t)n + 1, sizeof *first);
    if (!plan->slots || !plan->feature_names || !plan->tables || !first) goto nomem;

    /* Pass 1: assign every feature its (table, index). A named table holds one id space that
     * all its features share; unnamed features with equal specs each get a fresh index of
     * the same merged table (FusedRec §3: spec = (dim, optimizer, initializer)). */
    int32_t nt = 0;
    for (int32_t i = 0; i < n; i++) {
        const grm__sparse_feature_spec *s = &specs[i];
        int32_t t;
        for (t = 0; t < nt; t++) {
            const grm__sparse_feature_spec *r = &specs[first[t]];
            if (has_table(s) != has_table(r)) continue;
            if (has_table(s) ? strcmp(s->table, r->table) == 0 : spec_equal(s, r)) break;
        }
        if (t < nt && has_table(s) && !spec_equal(s, &specs[first[t]])) {
            const grm__sparse_feature_spec *r = &specs[first[t]];
            st = grm_errorf(GRM_EINVAL, "sparse plan: feature \"%s\" names table \"%s\" with "
                            "dim %d, optimizer %s, init %s(%g), but feature \"%s\" declared "
                            "it with dim %d, optimizer %s, init %s(%g); features sharing a "
                            "table need the same spec", s->name, s->table, s->dim,
                            s->optimizer, s->init, s->init_scale, r->name, r->dim,
                            r->optimizer, r->init, r->init_scale);
            goto fail;
        }
        if (t == nt) {
            first[nt++] = i;
            plan->tables[t].nslots = 0;
        }
        grm__sparse_table *tb = &plan->tables[t];
        plan->slots[i].table = t;
        plan->slots[i].index = has_table(s) ? 0 : tb->nslots;
        if (!has_table(s) || tb->nslots == 0) tb->nslots++;
        tb->nfeatures++;
        if (!(plan->feature_names[i] = dup_str(s->name))) goto nomem;
    }
    plan->ntables = nt;

    /* Pass 2: per-table fields; k = ceil(log2(m + 1)) identifier bits below the sign bit
     * (eq. 8, MTGRBoost §4.2), leaving 63 - k bits of raw id. */
    int32_t merged = 0;
    for (int32_t t = 0; t < nt; t++) {
        grm__sparse_table *tb = &plan->tables[t];
        const grm__sparse_feature_spec *r = &specs[first[t]];
        char buf[64];
        tb->explicit_name = has_table(r);
        if (!tb->explicit_name) snprintf(buf, sizeof buf, "merged%d", merged++);
        tb->name = dup_str(tb->explicit_name ? r->table : buf);
        tb->optimizer = dup_str(r->optimizer);
        tb->init = dup_str(r->init);
        tb->features = malloc((size_t)tb->nfeatures * sizeof *tb->features);
        if (!tb->name || !tb->optimizer || !tb->init || !tb->features) goto nomem;
        tb->dim = r->dim;
        tb->init_scale = r->init_scale;
        tb->k = ilog2_ceil((int64_t)tb->nslots + 1);
        tb->max_id = (int64_t)(((uint64_t)1 << (63 - tb->k)) - 1);
        tb->nfeatures = 0;
    }
    for (int32_t i = 0; i < n; i++) {
        grm__sparse_table *tb = &plan->tables[plan->slots[i].table];
        tb->features[tb->nfeatures++] = i;
        plan->slots[i].k = tb->k;
    }
    free(first);
    *out = plan;
    return GRM_OK;

nomem:
    st = grm_errorf(GRM_ENOMEM, "sparse plan: out of memory for %d features", n);
fail:
    grm__sparse_plan_destroy(plan);
    free(first);
    return st;
}

/* Raw ids that fit: 0 <= x <= max_id, i.e. no bit at or above 63 - k (the sign included). */
GRM__HOT_LOOP
static uint64_t encode_bad(const int64_t *restrict ids, int64_t n, int shift)
{
    uint64_t bad = 0;
    for (int64_t j = 0; j < n; j++) bad |= (uint64_t)ids[j] >> shift;
    return bad;
}

GRM__HOT_LOOP
static void encode_block(int64_t *out, const int64_t *ids, int64_t n, uint64_t prefix)
{
    for (int64_t j = 0; j < n; j++) out[j] = (int64_t)(prefix | (uint64_t)ids[j]);
}

grm_status grm__sparse_plan_encode(const grm__sparse_plan *plan, int32_t feature,
                                   int64_t *out, const int64_t *ids, int64_t n)
{
    if (!plan || feature < 0 || feature >= plan->nfeatures)
        return grm_errorf(GRM_EINVAL, "sparse encode: feature %d is outside [0, %d)", feature,
                          plan ? plan->nfeatures : 0);
    const grm__sparse_slot *sl = &plan->slots[feature];
    const int shift = 63 - sl->k;
    const uint64_t prefix = (uint64_t)sl->index << shift;   /* eq. 8: i << (63 - k) */
    /* Blocks of 4096: check a block, then write it (out may alias ids, so the check must see
     * the raw ids before they are overwritten). */
    for (int64_t b = 0; b < n; b += 4096) {
        const int64_t m = n - b < 4096 ? n - b : 4096;
        if (encode_bad(ids + b, m, shift)) {
            for (int64_t j = b; j < b + m; j++) {
                if (ids[j] < 0 || ids[j] > plan->tables[sl->table].max_id)
                    return grm_errorf(GRM_EINVAL, "sparse encode: feature \"%s\": id %lld "
                                      "(position %lld) does not fit merged table \"%s\": "
                                      "ids must lie in [0, %lld] (63 - k = %d bits, k = %d "
                                      "for %d id spaces, MTGRBoost §4.2); hash or mod the "
                                      "ids into range, or give the feature its own table",
                                      plan->feature_names[feature], (long long)ids[j],
                                      (long long)j, plan->tables[sl->table].name,
                                      (long long)plan->tables[sl->table].max_id, shift, sl->k,
                                      plan->tables[sl->table].nslots);
            }
        }
        encode_block(out + b, ids + b, m, prefix);
    }
    return GRM_OK;
}

grm_status grm__sparse_plan_decode(const grm__sparse_plan *plan, int32_t table,
                                   int32_t *index, int64_t *ids, const int64_t *keys,
                                   int64_t n)
{
    if (!plan || table < 0 || table >= plan->ntables)
        return grm_errorf(GRM_EINVAL, "sparse decode: table %d is outside [0, %d)", table,
                          plan ? plan->ntables : 0);
    const grm__sparse_table *tb = &plan->tables[table];
    const int shift = 63 - tb->k;
    const uint64_t mask = ((uint64_t)1 << shift) - 1;
    for (int64_t j = 0; j < n; j++) {
        const uint64_t key = (uint64_t)keys[j];
        const uint64_t i = key >> shift;
        if (i >= (uint64_t)tb->nslots)
            return grm_errorf(GRM_EINVAL, "sparse decode: key %lld (position %lld) of table "
                              "\"%s\" names id space %llu, but the table has %d", 
                              (long long)keys[j], (long long)j, tb->name,
                              (unsigned long long)i, tb->nslots);
        if (index) index[j] = (int32_t)i;
        if (ids) ids[j] = (int64_t)(key & mask);
    }
    return GRM_OK;
}

void grm__sparse_plan_print(FILE *f, const grm__sparse_plan *plan, const char *indent)
{
    if (!indent) indent = "";
    fprintf(f, "%s%d features in %d embedding tables (MTGRBoost §4.2 table merging)\n", indent,
            plan->nfeatures, plan->ntables);
    for (int32_t t = 0; t < plan->ntables; t++) {
        const grm__sparse_table *tb = &plan->tables[t];
        fprintf(f, "%stable %s (%s): dim=%d optimizer=%s init=%s(%g) id_spaces=%d k=%d "
                "max_id=%lld features=", indent, tb->name,
                tb->explicit_name ? "named" : "merged", tb->dim, tb->optimizer, tb->init,
                tb->init_scale, tb->nslots, tb->k, (long long)tb->max_id);
        for (int32_t i = 0; i < tb->nfeatures; i++)
            fprintf(f, "%s%s", i ? "," : "", plan->feature_names[tb->features[i]]);
        fputc('\n', f);
    }
    for (int32_t i = 0; i < plan->nfeatures; i++) {
        const grm__sparse_slot *sl = &plan->slots[i];
        fprintf(f, "%sfeature %s -> table %s, id space %d: key = (%d << %d) | id\n", indent,
                plan->feature_names[i], plan->tables[sl->table].name, sl->index, sl->index,
                63 - sl->k);
    }
}

/* ---- segment unique (FusedRec §3, Fig. 5) ----
 *
 * FusedRec hashes the fused group into one scratch table with atomics (Fig. 5, step 1). On a
 * CPU the same single pass is made deterministic and free of atomics by partitioning first:
 *   A  per chunk of the input: partition p = top bits of hash(feature, id); histogram.
 *   B  per chunk: stable scatter of (id, feature << 40 | j) into the partitions.
 *   C  per partition (threads own partitions): a private open-addressing table small enough
 *      for L2; the first occurrence of each (feature, id) leads, later ones record it.
 *   D  per chunk: read the leaders back in input order (one sequential stream per partition).
 *   E  per chunk: number the leaders in input order (the unique output, first-occurrence).
 *   F  per chunk: followers copy their leader's number (the inverse I_u).
 * Chunks and partitions depend only on n, so the output is the same for any thread count. */

typedef struct su_entry {
    int64_t id;
    int64_t fj;          /* feature << 40 | j */
} su_entry;

typedef struct su_ctx {
    const int64_t *ids;       /* [n] */
    const int64_t *offsets;   /* [F+1] */
    int64_t n;
    int32_t F;
    int32_t logP;
    int64_t P, C;
    uint16_t *part;           /* [n] partition of each j */
    su_entry *entries;        /* [n] grouped by partition */
    int64_t *lead;            /* [n] per entry: j of its leader */
    int64_t *hist;            /* [C * P] counts, then start of (c, p) */
    int64_t *cursor;          /* [C * P] scratch cursors */
    int64_t *part_off;        /* [P + 1] */
    int64_t *tab_off;         /* [P + 1] slots before partition p's table */
    int32_t *tables;          /* [tab_off[P]] */
    int64_t *nlead;           /* [C + 1] leaders per chunk, then their exclusive scan */
    int64_t *ustart;          /* [F + 1] unique entries before feature f */
    int64_t *uniq_ids;        /* [n] */
    int32_t *uniq_feat;       /* [n] or NULL */
    int64_t *inverse;         /* [n] */
} su_ctx;

static inline uint64_t su_hash(int64_t id, int64_t f)
{
    return grm_mix64((uint64_t)id ^ ((uint64_t)f * 0x9e3779b97f4a7c15ULL));
}

static void su_chunk(const su_ctx *c, int64_t chunk, int64_t *b, int64_t *e)
{
    *b = c->n * chunk / c->C;
    *e = c->n * (chunk + 1) / c->C;
}

static grm_status su_pass_a(void *ctx, int64_t c0, int64_t c1)
{
    const su_ctx *c = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        int64_t b, e;
        su_chunk(c, ch, &b, &e);
        int64_t *restrict h = c->hist + ch * c->P;
        memset(h, 0, (size_t)c->P * sizeof *h);
        if (b >= e) continue;
        int32_t fn = seg_upper(c->offsets, c->F, b);
        for (int64_t j = b; j < e; j++) {
            while (c->offsets[fn] <= j) fn++;
            const uint64_t hv = su_hash(c->ids[j], fn - 1);
            const uint16_t p = c->logP ? (uint16_t)(hv >> (64 - c->logP)) : 0;
            c->part[j] = p;
            h[p]++;
        }
    }
    return GRM_OK;
}

static grm_status su_pass_b(void *ctx, int64_t c0, int64_t c1)
{
    const su_ctx *c = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        int64_t b, e;
        su_chunk(c, ch, &b, &e);
        int64_t *restrict cur = c->cursor + ch * c->P;
        memcpy(cur, c->hist + ch * c->P, (size_t)c->P * sizeof *cur);
        if (b >= e) continue;
        int32_t fn = seg_upper(c->offsets, c->F, b);
        for (int64_t j = b; j < e; j++) {
            while (c->offsets[fn] <= j) fn++;
            su_entry *en = &c->entries[cur[c->part[j]]++];
            en->id = c->ids[j];
            en->fj = ((int64_t)(fn - 1) << 40) | j;
        }
    }
    return GRM_OK;
}

static grm_status su_pass_c(void *ctx, int64_t p0, int64_t p1)
{
    const su_ctx *c = ctx;
    const int64_t jmask = ((int64_t)1 << 40) - 1;
    for (int64_t p = p0; p < p1; p++) {
        const su_entry *restrict en = c->entries + c->part_off[p];
        int64_t *restrict lead = c->lead + c->part_off[p];
        const int64_t cnt = c->part_off[p + 1] - c->part_off[p];
        int32_t *restrict tab = c->tables + c->tab_off[p];
        const uint64_t mask = (uint64_t)(c->tab_off[p + 1] - c->tab_off[p]) - 1;
        memset(tab, 0xff, (mask + 1) * sizeof *tab);   /* -1: empty */
        for (int64_t e = 0; e < cnt; e++) {
            const int64_t id = en[e].id, fj = en[e].fj;
            /* The low hash bits pick the slot; the high ones picked the partition. */
            uint64_t s = su_hash(id, fj >> 40) & mask;
            int64_t leader = fj & jmask;
            for (;;) {
                const int32_t t = tab[s];
                if (t < 0) {
                    tab[s] = (int32_t)e;
                    break;
                }
                if (en[t].id == id && (en[t].fj >> 40) == (fj >> 40)) {
                    leader = en[t].fj & jmask;
                    break;
                }
                s = (s + 1) & mask;
            }
            lead[e] = leader;
        }
    }
    return GRM_OK;
}

/* Pass D: inverse[j] = -1 - leader(j) (negative: not yet numbered); count leaders. */
static grm_status su_pass_d(void *ctx, int64_t c0, int64_t c1)
{
    const su_ctx *c = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        int64_t b, e, nl = 0;
        su_chunk(c, ch, &b, &e);
        int64_t *restrict cur = c->cursor + ch * c->P;
        memcpy(cur, c->hist + ch * c->P, (size_t)c->P * sizeof *cur);
        for (int64_t j = b; j < e; j++) {
            const int64_t l = c->lead[cur[c->part[j]]++];
            c->inverse[j] = -1 - l;
            nl += l == j;
        }
        c->nlead[ch] = nl;
    }
    return GRM_OK;
}

/* Pass E: number the leaders in input order; record where each feature starts. */
static grm_status su_pass_e(void *ctx, int64_t c0, int64_t c1)
{
    const su_ctx *c = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        int64_t b, e;
        su_chunk(c, ch, &b, &e);
        int64_t u = c->nlead[ch];
        /* fn: first feature whose start is > j once advanced; starts within [b, e) are
         * recorded here, by the chunk that owns them. */
        int32_t fn = 0, lo = 0, hi = c->F + 1;
        while (lo < hi) {   /* first f with offsets[f] >= b */
            int32_t mid = lo + (hi - lo) / 2;
            if (c->offsets[mid] >= b) hi = mid;
            else lo = mid + 1;
        }
        fn = lo;
        for (int64_t j = b; j < e; j++) {
            while (fn <= c->F && c->offsets[fn] <= j) c->ustart[fn++] = u;
            if (c->inverse[j] == -1 - j) {
                c->uniq_ids[u] = c->ids[j];
                if (c->uniq_feat) c->uniq_feat[u] = fn - 1;
                c->inverse[j] = u++;
            }
        }
    }
    return GRM_OK;
}

GRM__HOT_LOOP
static grm_status su_pass_f(void *ctx, int64_t b, int64_t e)
{
    const su_ctx *c = ctx;
    int64_t *inv = c->inverse;
    for (int64_t j = b; j < e; j++) {
        const int64_t v = inv[j];
        if (v < 0) inv[j] = inv[-1 - v];   /* the leader is numbered (>= 0) after pass E */
    }
    return GRM_OK;
}

grm_status grm__sparse_segment_unique(int64_t *uniq_ids, int32_t *uniq_feat, int64_t *counts,
                                      int64_t *inverse, int64_t *nuniq, const int64_t *ids,
                                      const int64_t *offsets, int64_t n, int32_t F,
                                      grm__sparse_work *work)
{
    static const char where[] = "segment unique";
    grm_status st;
    *nuniq = 0;
    if (F < 0 || F >= (1 << 23))
        return grm_errorf(GRM_EINVAL, "%s: %d features; allowed 0 .. %d", where, F,
                          (1 << 23) - 1);
    if (n < 0 || n >= ((int64_t)1 << 40))
        return grm_errorf(GRM_EINVAL, "%s: %lld ids; allowed 0 .. 2^40 - 1", where,
                          (long long)n);
    if ((st = check_offsets(where, offsets, F)) != GRM_OK) return st;
    if (offsets[F] != n)
        return grm_errorf(GRM_EINVAL, "%s: offsets[%d] is %lld but there are %lld ids", where,
                          F, (long long)offsets[F], (long long)n);
    if (n == 0) {
        if (counts) memset(counts, 0, (size_t)F * sizeof *counts);
        return GRM_OK;
    }

    su_ctx c = { .ids = ids, .offsets = offsets, .n = n, .F = F, .uniq_ids = uniq_ids,
                 .uniq_feat = uniq_feat, .inverse = inverse };
    /* ~4096 entries per partition: entries (64 KiB) and table (32 KiB) stay in L2. */
    int64_t P = 1;
    while (P < 4096 && P * 4096 < n) P *= 2;
    c.P = P;
    c.logP = ilog2_ceil(P);
    c.C = ceil_div(n, 16384);
    if (c.C > 64) c.C = 64;

    sparse_layout l = { 0 };
    const size_t o_part = lay_take(&l, (size_t)n * sizeof *c.part);
    const size_t o_ent = lay_take(&l, (size_t)n * sizeof *c.entries);
    const size_t o_lead = lay_take(&l, (size_t)n * sizeof *c.lead);
    const size_t o_hist = lay_take(&l, (size_t)(c.C * P) * sizeof(int64_t));
    const size_t o_cur = lay_take(&l, (size_t)(c.C * P) * sizeof(int64_t));
    const size_t o_poff = lay_take(&l, (size_t)(P + 1) * sizeof(int64_t));
    const size_t o_toff = lay_take(&l, (size_t)(P + 1) * sizeof(int64_t));
    const size_t o_nlead = lay_take(&l, (size_t)(c.C + 1) * sizeof(int64_t));
    const size_t o_ust = lay_take(&l, (size_t)(F + 1) * sizeof(int64_t));
    /* Table p has the power of two >= 2 * count_p (at least 16) slots: <= 4 n + 16 P total. */
    const size_t o_tab = lay_take(&l, (size_t)(4 * n + 16 * P) * sizeof(int32_t));
    unsigned char *mem;
    if ((st = work_get(work, l.off, where, &mem)) != GRM_OK) return st;
    c.part = (uint16_t *)(mem + o_part);
    c.entries = (su_entry *)(mem + o_ent);
    c.lead = (int64_t *)(mem + o_lead);
    c.hist = (int64_t *)(mem + o_hist);
    c.cursor = (int64_t *)(mem + o_cur);
    c.part_off = (int64_t *)(mem + o_poff);
    c.tab_off = (int64_t *)(mem + o_toff);
    c.nlead = (int64_t *)(mem + o_nlead);
    c.ustart = (int64_t *)(mem + o_ust);
    c.tables = (int32_t *)(mem + o_tab);

    if ((st = grm__parallel_for(c.C, 1, su_pass_a, &c)) != GRM_OK) return st;
    /* Exclusive scan, partition-major then chunk: a stable counting sort by partition. */
    int64_t run = 0, tabs = 0;
    for (int64_t p = 0; p < P; p++) {
        c.part_off[p] = run;
        c.tab_off[p] = tabs;
        for (int64_t ch = 0; ch < c.C; ch++) {
            const int64_t h = c.hist[ch * P + p];
            c.hist[ch * P + p] = run;
            run += h;
        }
        const int64_t cnt = run - c.part_off[p];
        tabs += (int64_t)1 << ilog2_ceil(cnt * 2 > 16 ? cnt * 2 : 16);
    }
    c.part_off[P] = run;
    c.tab_off[P] = tabs;
    if ((st = grm__parallel_for(c.C, 1, su_pass_b, &c)) != GRM_OK) return st;
    if ((st = grm__parallel_for(P, 1, su_pass_c, &c)) != GRM_OK) return st;
    if ((st = grm__parallel_for(c.C, 1, su_pass_d, &c)) != GRM_OK) return st;
    int64_t U = 0;
    for (int64_t ch = 0; ch < c.C; ch++) {
        const int64_t k = c.nlead[ch];
        c.nlead[ch] = U;
        U += k;
    }
    c.nlead[c.C] = U;
    if ((st = grm__parallel_for(c.C, 1, su_pass_e, &c)) != GRM_OK) return st;
    /* Starts of the features at the very end (empty trailing features) were not reached. */
    for (int32_t f = F; f >= 0 && offsets[f] == n; f--) c.ustart[f] = U;
    if ((st = grm__parallel_for(n, 16384, su_pass_f, &c)) != GRM_OK) return st;
    if (counts) {
        for (int32_t f = 0; f < F; f++) counts[f] = c.ustart[f + 1] - c.ustart[f];
    }
    *nuniq = U;
    return GRM_OK;
}

/* ---- ids partition (FusedRec §3 rankwise sort) ----
 * A stable counting sort by destination rank over fixed chunks: histogram per chunk, scan
 * rank-major, scatter. I_s (pos) falls out of the scatter. */

typedef struct ip_ctx {
    const int64_t *ids;       /* [n] */
    const int32_t *feat;      /* [n] or NULL */
    int64_t n, C, R;
    uint64_t M;               /* floor((2^64 - 1) / R) */
    uint32_t *dest;           /* [n] rank of each id */
    int64_t *hist;            /* [C * R] */
    int64_t *sorted_ids;      /* [n] */
    int32_t *sorted_feat;     /* [n] or NULL */
    int64_t *pos;             /* [n] */
} ip_ctx;

static grm_status ip_pass_a(void *ctx, int64_t c0, int64_t c1)
{
    const ip_ctx *c = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        const int64_t b = c->n * ch / c->C, e = c->n * (ch + 1) / c->C;
        int64_t *restrict h = c->hist + ch * c->R;
        memset(h, 0, (size_t)c->R * sizeof *h);
        for (int64_t j = b; j < e; j++) {
            const uint32_t r = (uint32_t)fastmod_u64(grm_mix64((uint64_t)c->ids[j]),
                                                     (uint64_t)c->R, c->M);
            c->dest[j] = r;
            h[r]++;
        }
    }
    return GRM_OK;
}

static grm_status ip_pass_b(void *ctx, int64_t c0, int64_t c1)
{
    const ip_ctx *c = ctx;
    for (int64_t ch = c0; ch < c1; ch++) {
        const int64_t b = c->n * ch / c->C, e = c->n * (ch + 1) / c->C;
        int64_t *restrict cur = c->hist + ch * c->R;
        for (int64_t j = b; j < e; j++) {
            const int64_t q = cur[c->dest[j]]++;
            c->sorted_ids[q] = c->ids[j];
            if (c->sorted_feat) c->sorted_feat[q] = c->feat[j];
            c->pos[j] = q;
        }
    }
    return GRM_OK;
}

grm_status grm__sparse_ids_partition(int64_t *sorted_ids, int32_t *sorted_feat, int64_t *pos,
                                     int64_t *rank_counts, const int64_t *ids,
                                     const int32_t *feat, int64_t n, int32_t nranks,
                                     grm__sparse_work *work)
{
    static const char where[] = "ids partition";
    grm_status st;
    if (nranks < 1)
        return grm_errorf(GRM_EINVAL, "%s: nranks %d must be >= 1", where, nranks);
    if (sorted_feat && !feat)
        return grm_errorf(GRM_EINVAL, "%s: sorted_feat wanted but feat is NULL", where);
    if (n < 0) return grm_errorf(GRM_EINVAL, "%s: n %lld is negative", where, (long long)n);
    ip_ctx c = { .ids = ids, .feat = feat, .n = n, .R = nranks, .sorted_ids = sorted_ids,
                 .sorted_feat = sorted_feat, .pos = pos };
    c.M = UINT64_MAX / (uint64_t)nranks;
    c.C = ceil_div(n, 16384);
    if (c.C > 64) c.C = 64;
    if (c.C < 1) c.C = 1;
    sparse_layout l = { 0 };
    const size_t o_dest = lay_take(&l, (size_t)n * sizeof *c.dest);
    const size_t o_hist = lay_take(&l, (size_t)(c.C * c.R) * sizeof *c.hist);
    unsigned char *mem;
    if ((st = work_get(work, l.off, where, &mem)) != GRM_OK) return st;
    c.dest = (uint32_t *)(mem + o_dest);
    c.hist = (int64_t *)(mem + o_hist);
    if ((st = grm__parallel_for(c.C, 1, ip_pass_a, &c)) != GRM_OK) return st;
    int64_t run = 0;
    for (int64_t r = 0; r < c.R; r++) {
        const int64_t r0 = run;
        for (int64_t ch = 0; ch < c.C; ch++) {
            const int64_t h = c.hist[ch * c.R + r];
            c.hist[ch * c.R + r] = run;
            run += h;
        }
        rank_counts[r] = run - r0;
    }
    return grm__parallel_for(c.C, 1, ip_pass_b, &c);
}

/* ---- gather (RecIS Table 1; FusedRec §3 recovery) ---- */

typedef struct rows_ctx {
    float *out;
    const float *in;
    const int64_t *idx;
    int64_t nrows, D;
    int nt;                /* gather: non-temporal output stores */
    atomic_int bad;
} rows_ctx;

/* Rows are fetched with a software prefetch ahead of use: the table is far larger than any
 * cache and the ids are random, so the hardware prefetcher cannot guess them. The reduce and
 * tile loops look SPARSE_PF ids ahead; gather and scatter-add keep about 4 KiB of rows in
 * flight (64 rows of dim 16, 16 of dim 64: measured best on Zen 4, flat from 4 to 8 KiB). */
#define SPARSE_PF 16

static inline int64_t pf_rows(int64_t D)
{
    if (D * 4 <= 64) return 64;
    if (D * 4 >= 1024) return 4;
    return 4096 / (D * 4);
}

/* Gather outputs at least this large are streamed (non-temporal stores): far beyond the
 * caches, a cached store first reads the line it overwrites (a third more traffic), and the
 * output would evict the hot rows of the table. Smaller outputs stay cached for the consumer. */
#define SPARSE_NT_BYTES ((size_t)8 << 20)

/* One gathered row: dst[0, D) = src[0, D). With nt, non-temporal 16-byte stores (dst 16-byte
 * aligned, D % 4 == 0): the output goes to memory without the read-for-ownership a cached
 * store costs, and does not evict the table's hot rows. Inlined into each instance below, so
 * D is a constant there and the copy a few full-width vector moves. */
static inline __attribute__((always_inline)) void
row_copy(float *restrict dst, const float *restrict src, int64_t D, int nt)
{
#if SPARSE_HAVE_NT
    if (nt) {
        for (int64_t d = 0; d < D; d += 4) _mm_stream_ps(dst + d, _mm_loadu_ps(src + d));
        return;
    }
#endif
    for (int64_t d = 0; d < D; d++) dst[d] = src[d];
}

static inline __attribute__((always_inline)) void
gather_loop(float *restrict out, const float *restrict rows, const int64_t *restrict idx,
            int64_t b, int64_t e, int64_t D, int nt)
{
    const int64_t ahead = pf_rows(D), pf_end = e - ahead;
    int64_t j = b;
    for (; j < pf_end; j++) {
        const char *pf = (const char *)(rows + idx[j + ahead] * D);
        for (int64_t o = 0; o < D * 4; o += 64) __builtin_prefetch(pf + o);
        row_copy(out + j * D, rows + idx[j] * D, D, nt);
    }
    for (; j < e; j++) row_copy(out + j * D, rows + idx[j] * D, D, nt);
}

GRM__HOT_LOOP
static void gather_rows(float *restrict out, const float *restrict rows,
                        const int64_t *restrict idx, int64_t b, int64_t e, int64_t D, int nt)
{
    if (nt) {
        switch (D) {
        case 16: gather_loop(out, rows, idx, b, e, 16, 1); break;
        case 32: gather_loop(out, rows, idx, b, e, 32, 1); break;
        case 64: gather_loop(out, rows, idx, b, e, 64, 1); break;
        case 128: gather_loop(out, rows, idx, b, e, 128, 1); break;
        default: gather_loop(out, rows, idx, b, e, D, 1); break;
        }
    } else {
        switch (D) {
        case 16: gather_loop(out, rows, idx, b, e, 16, 0); break;
        case 32: gather_loop(out, rows, idx, b, e, 32, 0); break;
        case 64: gather_loop(out, rows, idx, b, e, 64, 0); break;
        case 128: gather_loop(out, rows, idx, b, e, 128, 0); break;
        default: gather_loop(out, rows, idx, b, e, D, 0); break;
        }
    }
}

static grm_status gather_range(void *ctx, int64_t b, int64_t e)
{
    rows_ctx *c = ctx;
    if (index_any_bad(c->idx + b, e - b, c->nrows)) {
        atomic_store_explicit(&c->bad, 1, memory_order_relaxed);
        return GRM_OK;
    }
    gather_rows(c->out, c->in, c->idx, b, e, c->D, c->nt);
#if SPARSE_HAVE_NT
    if (c->nt) _mm_sfence();   /* streamed stores are weakly ordered: drain before the join */
#endif
    return GRM_OK;
}

static int64_t row_grain(int64_t D)
{
    const int64_t g = 16384 / (D > 0 ? D : 1);
    return g > 64 ? g : 64;
}

grm_status grm__sparse_gather(float *out, const float *rows, const int64_t *idx, int64_t n,
                              int64_t nrows, int64_t D)
{
    grm_status st;
    if (n < 0 || D < 0 || nrows < 0)
        return grm_errorf(GRM_EINVAL, "gather: negative size (n %lld, nrows %lld, D %lld)",
                          (long long)n, (long long)nrows, (long long)D);
    rows_ctx c = { .out = out, .in = rows, .idx = idx, .nrows = nrows, .D = D };
    c.nt = SPARSE_HAVE_NT && D % 4 == 0 && ((uintptr_t)out & 15) == 0 &&
           (size_t)n * (size_t)D * 4 >= SPARSE_NT_BYTES;
    atomic_init(&c.bad, 0);
    if ((st = grm__parallel_for(n, row_grain(D), gather_range, &c)) != GRM_OK) return st;

    if (atomic_load(&c.bad)) return index_error("gather", idx, n, nrows);
    return GRM_OK;
}

/* ---- scatter-add (RecIS Table 1 "scatter"; backward of the recovery) ----
 * Rows are split among P owners (P = the pool's thread count) by a multiplicative hash of the
 * row id, so Zipf-hot rows and runs of low ids spread out. Owner p scans all of idx in
 * increasing j, compacts the positions of the rows it owns into an L1-sized buffer and applies
 * them in that order with rows and src prefetched ahead. Every row therefore sums its
 * contributions in the order of the plain loop whatever P is (the result never depends on the
 * thread count), with no atomics, no workspace, and src read in increasing address order.
 * The price is P reads of idx (8 bytes per id per thread, against the 3 * 4 * D bytes per id
 * the update itself moves): right for the few-core hosts this runs on; with tens of threads a
 * bucketing pre-pass (one idx read, 16 bytes per id of buckets) would be the better trade.
 * Measured on 2 Zen 4 cores, 1M ids over a 2^20-row table: about 2x faster at dim 16 (1.5x
 * at dim 64) than a counting sort by partition, which then read idx and src at random. */

#define SA_BLOCK 4096   /* positions scanned per compaction round (32 KiB of idx) */

typedef struct sa_ctx {
    float *rows;              /* [nrows, D] */
    const float *src;         /* [n, D] */
    const int64_t *idx;       /* [n] */
    int64_t n, nrows, D, P;
    atomic_int bad;
} sa_ctx;

static inline __attribute__((always_inline)) void
row_add(float *restrict dst, const float *restrict s, int64_t D)
{
#pragma GCC ivdep
    for (int64_t d = 0; d < D; d++) dst[d] += s[d];
}

static inline __attribute__((always_inline)) void
sa_loop(float *restrict rows, const float *restrict src, const int64_t *restrict idx,
        int64_t n, uint64_t P, uint64_t p, int64_t D)
{
    const int64_t ahead = pf_rows(D);
    int64_t sel[SA_BLOCK + 64];   /* positions j owned by p not yet applied; ahead <= 64 */
    int64_t have = 0;
    for (int64_t b = 0; b < n; b += SA_BLOCK) {
        const int64_t e = n - b < SA_BLOCK ? n : b + SA_BLOCK;
        for (int64_t j = b; j < e; j++) {
            const uint64_t h = (uint64_t)idx[j] * 0x9e3779b97f4a7c15ULL;
            sel[have] = j;
            have += ((h >> 32) * P) >> 32 == p;
        }
        int64_t k = 0;
        for (; k + ahead < have; k++) {
            const int64_t jp = sel[k + ahead];
            const char *pr = (const char *)(rows + idx[jp] * D);
            const char *ps = (const char *)(src + jp * D);
            for (int64_t o = 0; o < D * 4; o += 64) {
                __builtin_prefetch(pr + o, 1);
                __builtin_prefetch(ps + o);
            }
            const int64_t j = sel[k];
            row_add(rows + idx[j] * D, src + j * D, D);
        }
        memmove(sel, sel + k, (size_t)(have - k) * sizeof sel[0]);
        have -= k;
    }
    for (int64_t k = 0; k < have; k++) row_add(rows + idx[sel[k]] * D, src + sel[k] * D, D);
}

GRM__HOT_LOOP
static void sa_apply(float *restrict rows, const float *restrict src,
                     const int64_t *restrict idx, int64_t n, uint64_t P, uint64_t p, int64_t D)
{
    switch (D) {
    case 16: sa_loop(rows, src, idx, n, P, p, 16); break;
    case 32: sa_loop(rows, src, idx, n, P, p, 32); break;
    case 64: sa_loop(rows, src, idx, n, P, p, 64); break;
    case 128: sa_loop(rows, src, idx, n, P, p, 128); break;
    default: sa_loop(rows, src, idx, n, P, p, D); break;
    }
}

static grm_status sa_check(void *ctx, int64_t b, int64_t e)
{
    sa_ctx *c = ctx;
    if (index_any_bad(c->idx + b, e - b, c->nrows))
        atomic_store_explicit(&c->bad, 1, memory_order_relaxed);
    return GRM_OK;
}

static grm_status sa_owner(void *ctx, int64_t p0, int64_t p1)
{
    const sa_ctx *c = ctx;
    for (int64_t p = p0; p < p1; p++)
        sa_apply(c->rows, c->src, c->idx, c->n, (uint64_t)c->P, (uint64_t)p, c->D);
    return GRM_OK;
}

grm_status grm__sparse_scatter_add(float *rows, const float *src, const int64_t *idx,
                                   int64_t n, int64_t nrows, int64_t D,
                                   grm__sparse_work *work)
{
    static const char where[] = "scatter-add";
    grm_status st;
    (void)work;   /* no temporary memory any more; the parameter stays for the callers */
    if (n < 0 || D < 0 || nrows < 0)
        return grm_errorf(GRM_EINVAL, "%s: negative size (n %lld, nrows %lld, D %lld)", where,
                          (long long)n, (long long)nrows, (long long)D);
    sa_ctx c = { .rows = rows, .src = src, .idx = idx, .n = n, .nrows = nrows, .D = D };
    atomic_init(&c.bad, 0);
    if ((st = grm__parallel_for(n, 65536, sa_check, &c)) != GRM_OK) return st;
    if (atomic_load(&c.bad)) return index_error(where, idx, n, nrows);
    /* Validated before any row changes (an error leaves rows unchanged). One thread, or too
     * little work to split: one owner, the plain loop. */
    c.P = grm__num_threads() == 1 || n * D < 65536 ? 1 : (int64_t)grm__num_threads();
    return grm__parallel_for(c.P, 1, sa_owner, &c);
}

/* ---- pooling over jagged segments (RecIS Table 1: reduce, sequence tile) ----
 * Tasks are ranges of whole segments holding about the same number of elements, so a long
 * tail of segments does not idle threads; a segment is reduced by one thread in increasing j,
 * so the result does not depend on how segments are grouped into tasks. */

#define SPARSE_TASKS 64

typedef struct pool_ctx {
    float *out;
    const float *in;
    const int64_t *idx;       /* [n] or NULL */
    const int64_t *offsets;   /* [B+1] */
    int64_t B, L, D, nrows;
    int32_t mode;             /* grm__sparse_pool_mode or grm__sparse_tile_side */
    int64_t seg[SPARSE_TASKS + 1];   /* first segment of each task */
    atomic_int bad;
} pool_ctx;

/* Split [0, B) into at most SPARSE_TASKS ranges of about equal element count. */
static int64_t split_segments(pool_ctx *c)
{
    const int64_t n = c->offsets[c->B];
    int64_t T = c->B < SPARSE_TASKS ? c->B : SPARSE_TASKS;
    if (T < 1) T = 1;
    c->seg[0] = 0;
    for (int64_t t = 1; t < T; t++) {
        const int64_t target = n / T * t + n % T * t / T;   /* t n / T without overflow */
        int64_t lo = c->seg[t - 1], hi = c->B;
        while (lo < hi) {   /* first segment starting at or after target */
            int64_t mid = lo + (hi - lo) / 2;
            if (c->offsets[mid] >= target) hi = mid;
            else lo = mid + 1;
        }
        c->seg[t] = lo;
    }
    c->seg[T] = c->B;
    return T;
}

/* Segments b0 .. b1 - 1 with D a multiple of 16 known at compile time: the sums live in
 * registers (gcc vector extension, one 32-byte vector per 8 columns) instead of in out,
 * where every add would wait for the previous store of the same row. Lane-wise the same
 * float additions in the same order as the plain loop, so bitwise the same result. The
 * vectors are 32 bytes, the width of every clone but the SSE2 one: with 64-byte vectors
 * the AVX2 clone kept the sums on the stack and moved them through general registers at
 * every id (1.3-1.8x slower than torch's embedding_bag, bench/README). */
typedef float sparse_v8sf __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) void
reduce_segs_v(float *restrict out, const float *restrict rows, const int64_t *restrict idx,
              const int64_t *restrict off, int64_t b0, int64_t b1, int64_t D, int32_t mode)
{
    const int64_t ahead = pf_rows(D), end = off[b1];
    for (int64_t b = b0; b < b1; b++) {
        sparse_v8sf acc[16];   /* D <= 128 */
        for (int64_t v = 0; v < D / 8; v++) acc[v] = (sparse_v8sf){ 0 };
        for (int64_t j = off[b]; j < off[b + 1]; j++) {
            if (idx && j + ahead < end) {
                const char *pf = (const char *)(rows + idx[j + ahead] * D);
                for (int64_t o = 0; o < D * 4; o += 64) __builtin_prefetch(pf + o);
            }
            const float *r = rows + (idx ? idx[j] : j) * D;
            for (int64_t v = 0; v < D / 8; v++) {
                sparse_v8sf x;
                memcpy(&x, r + 8 * v, sizeof x);
                acc[v] += x;
            }
        }
        const int64_t len = off[b + 1] - off[b];
        if (mode == GRM_SPARSE_POOL_MEAN && len > 0) {
            const float fl = (float)len;
            for (int64_t v = 0; v < D / 8; v++) acc[v] /= fl;
        }
        memcpy(out + b * D, acc, (size_t)D * 4);
    }
}

GRM__HOT_LOOP
static grm_status reduce_range(void *ctx, int64_t t0, int64_t t1)
{
    pool_ctx *c = ctx;
    const int64_t D = c->D;
    const int64_t *restrict off = c->offsets;
    const int64_t *restrict idx = c->idx;
    const float *restrict rows = c->in;
    const int64_t b0 = c->seg[t0], b1 = c->seg[t1];
    if (idx && index_any_bad(idx + off[b0], off[b1] - off[b0], c->nrows)) {
        atomic_store_explicit(&c->bad, 1, memory_order_relaxed);
        return GRM_OK;
    }
    switch (D) {
    case 16: reduce_segs_v(c->out, rows, idx, off, b0, b1, 16, c->mode); return GRM_OK;
    case 32: reduce_segs_v(c->out, rows, idx, off, b0, b1, 32, c->mode); return GRM_OK;
    case 64: reduce_segs_v(c->out, rows, idx, off, b0, b1, 64, c->mode); return GRM_OK;
    case 128: reduce_segs_v(c->out, rows, idx, off, b0, b1, 128, c->mode); return GRM_OK;
    default: break;
    }
    for (int64_t b = b0; b < b1; b++) {
        float *restrict acc = c->out + b * D;
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
        for (int64_t j = off[b]; j < off[b + 1]; j++) {
            if (idx && j + SPARSE_PF < off[b1]) {
                const char *pf = (const char *)(rows + idx[j + SPARSE_PF] * D);
                for (int64_t o = 0; o < D * 4; o += 64) __builtin_prefetch(pf + o);
            }
            const float *restrict r = rows + (idx ? idx[j] : j) * D;
            for (int64_t d = 0; d < D; d++) acc[d] += r[d];
        }
        const int64_t len = off[b + 1] - off[b];
        if (c->mode == GRM_SPARSE_POOL_MEAN && len > 0) {
            const float fl = (float)len;
            for (int64_t d = 0; d < D; d++) acc[d] /= fl;
        }
    }
    return GRM_OK;
}

static grm_status pool_check(const char *where, const int64_t *offsets, int64_t B, int64_t D,
                             int32_t mode, int32_t nmodes, const char *modes)
{
    grm_status st;
    if ((st = check_offsets(where, offsets, B)) != GRM_OK) return st;
    if (D < 0) return grm_errorf(GRM_EINVAL, "%s: D %lld is negative", where, (long long)D);
    if (mode < 0 || mode >= nmodes)
        return grm_errorf(GRM_EINVAL, "%s: mode %d is not one of %s", where, mode, modes);
    return GRM_OK;
}

grm_status grm__sparse_segment_reduce(float *out, const float *rows, const int64_t *idx,
                                      const int64_t *offsets, int64_t B, int64_t nrows,
                                      int64_t D, int32_t mode)
{
    static const char where[] = "segment reduce";
    grm_status st;
    if ((st = pool_check(where, offsets, B, D, mode, 2, "0 (sum), 1 (mean)")) != GRM_OK)
        return st;
    if (B == 0) return GRM_OK;
    pool_ctx c = { .out = out, .in = rows, .idx = idx, .offsets = offsets, .B = B, .D = D,
                   .nrows = nrows, .mode = mode };
    atomic_init(&c.bad, 0);
    const int64_t T = split_segments(&c);
    if ((st = grm__parallel_for(T, 1, reduce_range, &c)) != GRM_OK) return st;
    if (atomic_load(&c.bad)) return index_error(where, idx, offsets[B], nrows);
    return GRM_OK;
}

GRM__HOT_LOOP
static grm_status reduce_bwd_range(void *ctx, int64_t t0, int64_t t1)
{
    const pool_ctx *c = ctx;
    const int64_t D = c->D;
    const int64_t *restrict off = c->offsets;
    const float *restrict g = c->in;
    for (int64_t b = c->seg[t0]; b < c->seg[t1]; b++) {
        const int64_t len = off[b + 1] - off[b];
        const float *restrict go = g + b * D;
        if (c->mode == GRM_SPARSE_POOL_MEAN) {
            const float fl = (float)len;
            for (int64_t j = off[b]; j < off[b + 1]; j++) {
                float *restrict gi = c->out + j * D;
                for (int64_t d = 0; d < D; d++) gi[d] = go[d] / fl;
            }
        } else {
            for (int64_t j = off[b]; j < off[b + 1]; j++) {
                float *restrict gi = c->out + j * D;
                for (int64_t d = 0; d < D; d++) gi[d] = go[d];
            }
        }
    }
    return GRM_OK;
}

grm_status grm__sparse_segment_reduce_bwd(float *grad_in, const float *grad_out,
                                          const int64_t *offsets, int64_t B, int64_t D,
                                          int32_t mode)
{
    grm_status st;
    if ((st = pool_check("segment reduce backward", offsets, B, D, mode, 2,
                         "0 (sum), 1 (mean)")) != GRM_OK)
        return st;
    if (B == 0) return GRM_OK;
    pool_ctx c = { .out = grad_in, .in = grad_out, .offsets = offsets, .B = B, .D = D,
                   .mode = mode };
    const int64_t T = split_segments(&c);
    return grm__parallel_for(T, 1, reduce_bwd_range, &c);
}

/* Rows [first, first + t) of segment b are taken by the tile (side FIRST or LAST). */
static void tile_window(const int64_t *off, int64_t b, int64_t L, int32_t side, int64_t *first,
                        int64_t *t)
{
    const int64_t len = off[b + 1] - off[b];
    *t = len < L ? len : L;
    *first = side == GRM_SPARSE_TILE_FIRST ? off[b] : off[b + 1] - *t;
}

GRM__HOT_LOOP
static grm_status tile_range(void *ctx, int64_t b0, int64_t b1)
{
    pool_ctx *c = ctx;
    const int64_t D = c->D, L = c->L;
    const int64_t *restrict idx = c->idx;
    const float *restrict rows = c->in;
    for (int64_t b = b0; b < b1; b++) {
        int64_t first, t;
        tile_window(c->offsets, b, L, c->mode, &first, &t);
        if (idx && index_any_bad(idx + first, t, c->nrows)) {
            atomic_store_explicit(&c->bad, 1, memory_order_relaxed);
            return GRM_OK;
        }
        float *restrict o = c->out + b * L * D;
        for (int64_t s = 0; s < t; s++) {
            const float *restrict r = rows + (idx ? idx[first + s] : first + s) * D;
            for (int64_t d = 0; d < D; d++) o[s * D + d] = r[d];
        }
        for (int64_t x = t * D; x < L * D; x++) o[x] = 0.0f;
    }
    return GRM_OK;
}

grm_status grm__sparse_tile(float *out, const float *rows, const int64_t *idx,
                            const int64_t *offsets, int64_t B, int64_t L, int64_t nrows,
                            int64_t D, int32_t side)
{
    static const char where[] = "sequence tile";
    grm_status st;
    if ((st = pool_check(where, offsets, B, D, side, 2, "0 (first), 1 (last)")) != GRM_OK)
        return st;
    if (L < 1) return grm_errorf(GRM_EINVAL, "%s: L %lld must be >= 1", where, (long long)L);
    pool_ctx c = { .out = out, .in = rows, .idx = idx, .offsets = offsets, .B = B, .L = L,
                   .D = D, .nrows = nrows, .mode = side };
    atomic_init(&c.bad, 0);
    if ((st = grm__parallel_for(B, 1 + 16384 / (L * D + 1), tile_range, &c)) != GRM_OK)
        return st;
    if (atomic_load(&c.bad)) return index_error(where, idx, offsets[B], nrows);
    return GRM_OK;
}

GRM__HOT_LOOP
static grm_status tile_bwd_range(void *ctx, int64_t b0, int64_t b1)
{
    const pool_ctx *c = ctx;
    const int64_t D = c->D, L = c->L;
    for (int64_t b = b0; b < b1; b++) {
        int64_t first, t;
        tile_window(c->offsets, b, L, c->mode, &first, &t);
        const float *restrict go = c->in + b * L * D;
        for (int64_t j = c->offsets[b]; j < c->offsets[b + 1]; j++) {
            float *restrict gi = c->out + j * D;
            const int64_t s = j - first;
            if (s >= 0 && s < t) {
                for (int64_t d = 0; d < D; d++) gi[d] = go[s * D + d];
            } else {
                for (int64_t d = 0; d < D; d++) gi[d] = 0.0f;
            }
        }
    }
    return GRM_OK;
}

grm_status grm__sparse_tile_bwd(float *grad_in, const float *grad_out, const int64_t *offsets,
                                int64_t B, int64_t L, int64_t D, int32_t side)
{
    static const char where[] = "sequence tile backward";
    grm_status st;
    if ((st = pool_check(where, offsets, B, D, side, 2, "0 (first), 1 (last)")) != GRM_OK)
        return st;
    if (L < 1) return grm_errorf(GRM_EINVAL, "%s: L %lld must be >= 1", where, (long long)L);
    pool_ctx c = { .out = grad_in, .in = grad_out, .offsets = offsets, .B = B, .L = L, .D = D,
                   .mode = side };
    return grm__parallel_for(B, 1 + 16384 / (L * D + 1), tile_bwd_range, &c);
}

/* ---- feature transforms (RecIS Table 1: bucketize, mod) ---- */

typedef struct bk_ctx {
    int64_t *out;
    const float *values;
    const double *bnd;
    int64_t nb;
} bk_ctx;

/* grm_bucketize (grm/transform.h) is the rule and the loop; here it is compiled per ISA and
 * spread over the pool. */
GRM__HOT_LOOP
static grm_status bucketize_range(void *ctx, int64_t b, int64_t e)
{
    const bk_ctx *c = ctx;
    grm_bucketize(c->out + b, c->values + b, GRM_DTYPE_F32, e - b, c->bnd, c->nb);
    return GRM_OK;
}

grm_status grm__sparse_bucketize(int64_t *out, const float *values, int64_t n,
                                 const double *boundaries, int64_t nb)
{
    if (nb < 0 || nb >= INT32_MAX)
        return grm_errorf(GRM_EINVAL, "bucketize: %lld boundaries; allowed 0 .. %d",
                          (long long)nb, INT32_MAX - 1);
    for (int64_t i = 0; i < nb; i++) {
        if (isnan(boundaries[i]) || (i > 0 && boundaries[i] < boundaries[i - 1]))
            return grm_errorf(GRM_EINVAL, "bucketize: boundaries must be sorted and not NaN: "
                              "boundary %lld is %g after %g", (long long)i,
                              boundaries[i], i > 0 ? boundaries[i - 1] : 0.0);
    }
    bk_ctx c = { .out = out, .values = values, .bnd = boundaries, .nb = nb };
    return grm__parallel_for(n, 16384, bucketize_range, &c);
}

typedef struct mod_ctx {
    int64_t *out;
    const int64_t *ids;
    uint64_t m, M;
} mod_ctx;

static grm_status mod_range(void *ctx, int64_t b, int64_t e)
{
    const mod_ctx *c = ctx;
    const uint64_t m = c->m, M = c->M;
    for (int64_t j = b; j < e; j++) {
        /* Floored modulo: for x < 0, x mod m = m - 1 - ((-x - 1) mod m), and -x - 1 = ~x. */
        const uint64_t x = (uint64_t)c->ids[j];
        const uint64_t neg = (uint64_t)((int64_t)x >> 63);   /* all ones when x < 0 */
        const uint64_t r = fastmod_u64(x ^ neg, m, M);
        c->out[j] = (int64_t)((r ^ neg) + (m & neg));
    }
    return GRM_OK;
}

grm_status grm__sparse_mod(int64_t *out, const int64_t *ids, int64_t n, int64_t m)
{
    if (m < 1) return grm_errorf(GRM_EINVAL, "mod: modulus %lld must be >= 1", (long long)m);
    mod_ctx c = { .out = out, .ids = ids, .m = (uint64_t)m, .M = UINT64_MAX / (uint64_t)m };
    return grm__parallel_for(n, 16384, mod_range, &c);
}
