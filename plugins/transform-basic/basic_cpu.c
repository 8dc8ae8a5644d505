/* plugins/transform-basic/basic_cpu.c - the fused pass of the feature engine (RecIS §2.1
 * Feature Engine; §2.2.2 operator fusion: "600 feature transformation operators into three
 * operators"). Every declared transform of every column runs in one parallel_for over
 * tasks (component, row block): a component is a set of columns linked by crosses, so a
 * task computes a block of each source column and then the crosses that read it while the
 * block is still in cache. Each value is read once from the chunk and written once (twice
 * for a list that is both transformed and read by a cross before truncate/pad). Two short
 * serial steps frame it: sizing the buffers, and the output offsets of truncated or padded
 * lists (offsets only, O(rows) per such column). The kernels are basic_ref.c's. */
#include <stdlib.h>
#include <string.h>

#include "basic.h"

/* Rows per task: large enough to amortise the task (a few hundred ns), small enough that a
 * block of every column of a component stays in L2 and that 2-16 threads get work. */
#define BASIC_BLOCK_ROWS 4096

static int basic_has_elem(const basic_colplan *p)
{
    return p->src >= 0 && (p->hash || p->nbounds > 0 || p->mod > 0);
}

/* Stage-1 values are materialised in p->buf for crosses (always), and for transformed
 * columns that are emitted as they are or that a cross reads. A truncated or padded column
 * no cross reads computes stage 1 straight into its output, for the kept values only. */
static int basic_needs_buf(const basic_colplan *p)
{
    return p->src < 0 || (basic_has_elem(p) && (!p->has_len || p->is_source));
}

static int basic_has_work(const basic_colplan *p)
{
    return p->src < 0 || basic_has_elem(p) || p->has_len;
}

static int basic_is_list(int32_t type)
{
    return type == GRM_COL_LIST_I64 || type == GRM_COL_LIST_F32;
}

static int32_t basic_root(int32_t *parent, int32_t j)
{
    while (parent[j] != j) {
        parent[j] = parent[parent[j]];
        j = parent[j];
    }
    return j;
}

grm_status basic_fuse_plan(basic_inst *t)
{
    const grm_device cpu = { GRM_DEVICE_CPU, 0 };
    const int32_t n = t->nplan;
    int32_t *const parent = malloc((size_t)n * 2 * sizeof(int32_t));
    if (parent == NULL) return GRM_ENOMEM;
    int32_t *const comp_of = parent + n;   /* [n] component of each root, or -1 */
    int32_t nwork = 0;

    for (int32_t j = 0; j < n; j++) {
        parent[j] = j;
        comp_of[j] = -1;
    }
    for (int32_t j = 0; j < n; j++) {
        const basic_colplan *const p = &t->plan[j];
        if (p->src >= 0) continue;
        parent[basic_root(parent, p->cross_a)] = basic_root(parent, j);
        parent[basic_root(parent, p->cross_b)] = basic_root(parent, j);
    }
    t->ncomp = 0;
    t->nlen = 0;
    for (int32_t j = 0; j < n; j++) {
        if (!basic_has_work(&t->plan[j])) continue;
        nwork++;
        t->nlen += t->plan[j].has_len;
        const int32_t r = basic_root(parent, j);
        if (comp_of[r] < 0) comp_of[r] = t->ncomp++;
    }
    t->comp_start = t->host->alloc(cpu, (size_t)(t->ncomp + 1) * sizeof(int32_t), 0);
    t->comp_cols = t->host->alloc(cpu, (size_t)(nwork > 0 ? nwork : 1) * sizeof(int32_t), 0);
    t->len_cols = t->host->alloc(cpu, (size_t)(t->nlen > 0 ? t->nlen : 1) * sizeof(int32_t), 0);
    if (t->comp_start == NULL || t->comp_cols == NULL || t->len_cols == NULL) {
        free(parent);
        return GRM_ENOMEM;
    }
    // Counting sort of the columns with work by component, keeping plan order inside one
    // (sources before the crosses that read them: a cross names earlier columns only).
    memset(t->comp_start, 0, (size_t)(t->ncomp + 1) * sizeof(int32_t));
    for (int32_t j = 0; j < n; j++) {
        if (basic_has_work(&t->plan[j])) t->comp_start[comp_of[basic_root(parent, j)] + 1]++;
    }
    for (int32_t c = 0; c < t->ncomp; c++) t->comp_start[c + 1] += t->comp_start[c];
    int32_t nl = 0;
    for (int32_t j = 0; j < n; j++) {
        basic_colplan *const p = &t->plan[j];
        p->comp = -1;
        if (!basic_has_work(p)) continue;
        p->comp = comp_of[basic_root(parent, j)];
        t->comp_cols[t->comp_start[p->comp]++] = j;   // shifted back below
        if (p->has_len) t->len_cols[nl++] = j;
    }
    for (int32_t c = t->ncomp; c > 0; c--) t->comp_start[c] = t->comp_start[c - 1];
    t->comp_start[0] = 0;
    free(parent);
    return GRM_OK;
}

/* ---- the pass ---- */

/* Size every buffer for `in` and set t->mid / t->row (serial: allocation stays on the
 * calling thread). */
static grm_status basic_prepare(basic_inst *t, const grm_chunk *in)
{
    const int64_t rows = in->rows;
    grm_status st;

    for (int32_t j = 0; j < t->nplan; j++) {
        basic_colplan *const p = &t->plan[j];
        grm_column *const m = &t->mid[j];
        if (p->src >= 0) {
            *m = in->cols[p->src];   // untouched columns point into the input chunk
        } else {
            const grm_column *const a = &t->mid[p->cross_a], *const b = &t->mid[p->cross_b];
            *m = (grm_column){ .type = p->out_type, .rows = rows, .values = NULL,
                               .offsets = a->offsets != NULL ? a->offsets : b->offsets };
        }
        m->name = p->name;
        if (basic_needs_buf(p)) {
            const int64_t nvals = basic_is_list(p->out_type) ? m->offsets[rows] : rows;
            void *buf = p->buf;
            st = basic_grow(t->host, &buf, &p->buf_cap, (size_t)nvals * sizeof(int64_t));
            if (st != GRM_OK) return st;
            p->buf = buf;
            m->values = p->buf;
            m->type = p->out_type;
            if (!basic_is_list(p->out_type)) m->offsets = NULL;   // a hashed str is a scalar
        }
        t->row[j] = *m;
        t->row[j].type = p->out_type;
        if (p->has_len) {
            void *offs = p->len.offsets;
            st = basic_grow(t->host, &offs, &p->len.offsets_cap,
                            (size_t)(rows + 1) * sizeof(int64_t));
            if (st != GRM_OK) return st;
            p->len.offsets = offs;
        }
    }
    return GRM_OK;
}

static grm_status basic_offsets_task(void *ctx, int64_t begin, int64_t end)
{
    basic_inst *const t = ctx;
    for (int64_t k = begin; k < end; k++) {
        const int32_t j = t->len_cols[k];
        basic_colplan *const p = &t->plan[j];
        basic_len_offsets(&p->len, p->len.offsets, t->mid[j].offsets, t->in->rows);
    }
    return GRM_OK;
}

/* The cross of rows [r0, r1): out [values of those rows] from two I64 / LIST_I64 columns;
 * a list crossed with a scalar pairs each list value with the row's scalar. */
static void basic_cross_rows(const basic_colplan *p, const grm_column *a, const grm_column *b,
                             int64_t r0, int64_t r1)
{
    const int64_t *const av = a->values, *const bv = b->values;
    int64_t *const out = p->buf;
    if (a->offsets == NULL && b->offsets == NULL) {
        for (int64_t r = r0; r < r1; r++) out[r] = basic_cross_id(av[r], bv[r], p->cross_n);
    } else if (a->offsets != NULL) {
        for (int64_t r = r0; r < r1; r++) {
            for (int64_t v = a->offsets[r]; v < a->offsets[r + 1]; v++) {
                out[v] = basic_cross_id(av[v], bv[r], p->cross_n);
            }
        }
    } else {
        for (int64_t r = r0; r < r1; r++) {
            for (int64_t v = b->offsets[r]; v < b->offsets[r + 1]; v++) {
                out[v] = basic_cross_id(av[r], bv[v], p->cross_n);
            }
        }
    }
}

/* Every transform of column j for rows [r0, r1). */
static void basic_column_rows(const basic_inst *t, int32_t j, int64_t r0, int64_t r1)
{
    const basic_colplan *const p = &t->plan[j];
    const grm_column *const raw = p->src >= 0 ? &t->in->cols[p->src] : NULL;
    const grm_column *const m = &t->mid[j];

    // Stage 1: hash or bucketize, then mod; or the cross of two earlier columns.
    if (p->src < 0) {
        basic_cross_rows(p, &t->mid[p->cross_a], &t->mid[p->cross_b], r0, r1);
    } else if (basic_needs_buf(p)) {
        const int list = basic_is_list(raw->type);
        const int64_t v0 = list ? raw->offsets[r0] : r0, v1 = list ? raw->offsets[r1] : r1;
        basic_stage1(p, p->buf + v0, raw, v0, v1 - v0, t->hash_buckets);
    }
    if (!p->has_len) return;

    // Stage 2: truncate, then pad, each row of the list.
    const basic_lenop *const l = &p->len;
    const size_t elem = p->out_type == GRM_COL_LIST_F32 ? sizeof(float) : sizeof(int64_t);
    if (basic_needs_buf(p) || !basic_has_elem(p)) {
        basic_len_rows(l, m->values, m->offsets, elem, r0, r1);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        int64_t b, e;
        basic_len_keep(l, raw->offsets, r, &b, &e);
        const int64_t dst = l->offsets[r];
        basic_stage1(p, (int64_t *)l->values + dst, raw, b, e - b, t->hash_buckets);
        basic_len_pad(l, elem, dst + (e - b), l->offsets[r + 1]);
    }
}

static int64_t basic_nblocks(int64_t rows)
{
    return (rows + BASIC_BLOCK_ROWS - 1) / BASIC_BLOCK_ROWS;
}

static grm_status basic_fused_task(void *ctx, int64_t begin, int64_t end)
{
    const basic_inst *const t = ctx;
    const int64_t rows = t->in->rows;
    for (int64_t k = begin; k < end; k++) {
        // Block-major: consecutive tasks are the components of one row block.
        const int64_t blk = k / t->ncomp;
        const int32_t c = (int32_t)(k % t->ncomp);
        const int64_t r0 = blk * BASIC_BLOCK_ROWS;
        const int64_t r1 = r0 + BASIC_BLOCK_ROWS < rows ? r0 + BASIC_BLOCK_ROWS : rows;
        for (int32_t i = t->comp_start[c]; i < t->comp_start[c + 1]; i++) {
            basic_column_rows(t, t->comp_cols[i], r0, r1);
        }
    }
    return GRM_OK;
}

grm_status basic_rows(basic_inst *t, const grm_chunk *in)
{
    const int64_t rows = in->rows;
    grm_status st = basic_prepare(t, in);
    if (st != GRM_OK) return st;
    t->in = in;
    if (t->nlen > 0) {
        st = t->host->parallel_for(t->nlen, 1, basic_offsets_task, t);
        if (st != GRM_OK) goto done;
        for (int32_t k = 0; k < t->nlen; k++) {
            basic_colplan *const p = &t->plan[t->len_cols[k]];
            const size_t elem = p->out_type == GRM_COL_LIST_F32 ? sizeof(float)
                                                                 : sizeof(int64_t);
            void *vals = p->len.values;
            st = basic_grow(t->host, &vals, &p->len.values_cap,
                            (size_t)p->len.offsets[rows] * elem);
            if (st != GRM_OK) goto done;
            p->len.values = vals;
            t->row[t->len_cols[k]].values = p->len.values;
            t->row[t->len_cols[k]].offsets = p->len.offsets;
        }
    }
    if (t->ncomp > 0 && rows > 0) {
        st = t->host->parallel_for(basic_nblocks(rows) * t->ncomp, 1, basic_fused_task, t);
    }
done:
    t->in = NULL;
    return st;
}
