/* tests/test-transform-basic.c - transform-basic: hash values against XXH3_64bits computed
 * here, mod of negative inputs, keep order, sequence building on a hand-written event
 * table (two chunks, unsorted timestamps, ties) with exact lists, min_length and
 * max_length, the create errors, and MovieLens 100K end to end through reader-text when
 * GRM_DATA_DIR has it. The feature engine (RecIS §2.1): cross values computed here from
 * XXH3, truncate/pad by hand, the order of operations, the fused pass against one
 * transform at a time on random data, 1 thread against 4, and every new create error.
 * copy (labels from one rating, copies feeding mod/cross/hash) and per-event history
 * (history_by: hand-computed lists with ties, self or not, length cuts, f32, keep, str and
 * list columns across chunks, random events against a scan of the definition, 1 thread
 * against 4, MovieLens two-label rows), with every error of both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "harness.h"
#include "tap.h"

static const grm_plugin_info *tb_info;
static const grm_transform_ops *tb_ops;

/* ---- building input chunks by hand ---- */

static grm_column col_i64(const char *name, int64_t *v, int64_t rows)
{
    return (grm_column){ .name = name, .type = GRM_COL_I64, .rows = rows, .values = v };
}

static grm_column col_f32(const char *name, float *v, int64_t rows)
{
    return (grm_column){ .name = name, .type = GRM_COL_F32, .rows = rows, .values = v };
}

static grm_chunk chunk_of(const grm_column *cols, int32_t ncols, int64_t rows)
{
    return (grm_chunk){ .struct_size = sizeof(grm_chunk), .ncols = ncols, .rows = rows,
                        .cols = cols };
}

/* The schema of a chunk (fields point at the chunk's names). */
static grm_schema schema_of(const grm_chunk *ch, grm_field *fields)
{
    for (int32_t j = 0; j < ch->ncols; j++) {
        fields[j] = (grm_field){ .name = ch->cols[j].name, .type = ch->cols[j].type };
    }
    return (grm_schema){ .struct_size = sizeof(grm_schema), .nfields = ch->ncols,
                         .fields = fields };
}

/* create from "key=value" strings; the status of config filling or create. */
static grm_status tb_create(void **inst, const grm_schema *schema, const char *const *kvs,
                            int n)
{
    const void *cfg = NULL;
    *inst = NULL;
    grm_status st = harness_config_try(tb_info, &cfg, kvs, n);
    if (st != GRM_OK) {
        tap_diag("config: %s", harness_host()->last_error());
        return st;
    }
    st = tb_ops->create(cfg, schema, inst);
    return st;
}

static int err_is(grm_status st, grm_status want, const char *n1, const char *n2)
{
    const char *const msg = harness_host()->last_error();
    const int ok = st == want && strstr(msg, n1) != NULL && (n2 == NULL || strstr(msg, n2));
    if (!ok) tap_diag("status %d (want %d), message: %s", st, want, msg);
    return ok;
}

static int eq_i64(const int64_t *got, const int64_t *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            tap_diag("%s[%lld]: expected %lld, got %lld", what, (long long)i,
                     (long long)want[i], (long long)got[i]);
            return 0;
        }
    }
    return 1;
}

/* The expected hash, written from the spec: XXH3-64 of the bytes, & INT64_MAX, % buckets. */
static int64_t want_hash(const void *p, size_t n, int64_t buckets)
{
    const int64_t h = (int64_t)(XXH3_64bits(p, n) & 0x7fffffffffffffffULL);
    return buckets > 0 ? h % buckets : h;
}

/* ---- row-wise ---- */

static void test_rowwise(void)
{
    // name: str ["alice", "bob", ""]; id: i64; ts: i64; score: f32
    char names[] = "alicebob";
    int64_t noffs[] = { 0, 5, 8, 8 };
    int64_t id[] = { 1, -5, (int64_t)1 << 40 };
    int64_t ts[] = { -1, -7, INT64_MIN };
    float score[] = { 0.5f, 1.5f, 2.5f };
    grm_column cols[4] = {
        { .name = "name", .type = GRM_COL_STR, .rows = 3, .values = names, .offsets = noffs },
        col_i64("id", id, 3), col_i64("ts", ts, 3), col_f32("score", score, 3),
    };
    const grm_chunk in = chunk_of(cols, 4, 3);
    grm_field fields[4];
    const grm_schema schema = schema_of(&in, fields);
    void *inst = NULL;
    const grm_chunk *out = NULL;
    const grm_schema *osc = NULL;

    // hash a str column (full 63 bits) and keep the rest
    {
        const char *kvs[] = { "hash=name" };
        grm_status st = tb_create(&inst, &schema, kvs, 1);
        if (st == GRM_OK) st = tb_ops->schema(inst, &osc);
        tap_ok(st == GRM_OK && osc->nfields == 4 && strcmp(osc->fields[0].name, "name") == 0
                   && osc->fields[0].type == GRM_COL_I64 && osc->fields[3].type == GRM_COL_F32,
               "schema after hash=name: 'name' becomes i64, other columns unchanged");
        if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
        const int64_t want[] = { want_hash("alice", 5, 0), want_hash("bob", 3, 0),
                                 want_hash("", 0, 0) };
        tap_ok(st == GRM_OK && out != NULL && out->rows == 3 && out->cols[0].type == GRM_COL_I64
                   && eq_i64(out->cols[0].values, want, 3, "hash")
                   && ((int64_t *)out->cols[1].values)[1] == -5,
               "hash of str 'alice','bob','' equals XXH3_64bits & INT64_MAX");
        tb_ops->destroy(inst);
    }

    // hash an i64 column over 1000 buckets: the 8 little-endian bytes of each value
    {
        const char *kvs[] = { "hash=id", "hash_buckets=1000" };
        grm_status st = tb_create(&inst, &schema, kvs, 2);
        if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
        int64_t want[3];
        for (int i = 0; i < 3; i++) {
            unsigned char le[8];
            for (int k = 0; k < 8; k++) le[k] = (unsigned char)((uint64_t)id[i] >> (8 * k));
            want[i] = want_hash(le, 8, 1000);
        }
        int in_range = 1;
        for (int i = 0; st == GRM_OK && i < 3; i++) {
            const int64_t v = ((int64_t *)out->cols[1].values)[i];
            in_range = in_range && v >= 0 && v < 1000;
        }
        tap_ok(st == GRM_OK && in_range && eq_i64(out->cols[1].values, want, 3, "hash"),
               "hash of i64 1, -5, 2^40 over 1000 buckets equals XXH3 of 8 LE bytes %% 1000");
        tb_ops->destroy(inst);
    }

    // mod with negative inputs, then keep in a new order
    {
        const char *kvs[] = { "mod=ts:7", "keep=score,ts" };
        grm_status st = tb_create(&inst, &schema, kvs, 2);
        if (st == GRM_OK) st = tb_ops->schema(inst, &osc);
        tap_ok(st == GRM_OK && osc->nfields == 2 && strcmp(osc->fields[0].name, "score") == 0
                   && strcmp(osc->fields[1].name, "ts") == 0,
               "keep=score,ts: output schema is score then ts");
        if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
        // -1 -> 6, -7 -> 0, INT64_MIN = -2^63 and 2^63 = 8^21 = 1 (mod 7), so -> 6
        const int64_t want[] = { 6, 0, 6 };
        tap_ok(st == GRM_OK && out->ncols == 2 && out->cols[0].type == GRM_COL_F32
                   && ((float *)out->cols[0].values)[2] == 2.5f
                   && strcmp(out->cols[1].name, "ts") == 0
                   && eq_i64(out->cols[1].values, want, 3, "mod"),
               "mod=ts:7 maps -1, -7, INT64_MIN to 6, 0, 6 (never negative); keep order held");
        const grm_chunk *fl = (const grm_chunk *)1;
        st = tb_ops->flush(inst, &fl);
        tap_ok(st == GRM_OK && fl == NULL, "flush without sequence_by yields NULL");
        tb_ops->destroy(inst);
    }

    // a chunk that does not match the schema given to create
    {
        const char *kvs[] = { "mod=id:3" };
        grm_status st = tb_create(&inst, &schema, kvs, 1);
        const grm_chunk short_in = chunk_of(cols, 3, 3);
        if (st == GRM_OK) st = tb_ops->apply(inst, &short_in, &out);
        tap_ok(err_is(st, GRM_EINVAL, "chunk has 3 columns", "has 4 columns"),
               "apply with a chunk of 3 columns against a 4-column schema is GRM_EINVAL");
        tb_ops->destroy(inst);
    }

    // create errors: each names the column or entry and lists what is available
    {
        const char *kvs[] = { "hash=nope" };
        const grm_status st = tb_create(&inst, &schema, kvs, 1);
        tap_ok(err_is(st, GRM_EINVAL, "hash column 'nope' is not in the input",
                      "available: name (str), id (i64), ts (i64), score (f32)") && inst == NULL,
               "hash of a missing column names it and lists the available columns");
    }
    {
        const char *kvs[] = { "hash=score" };
        const grm_status st = tb_create(&inst, &schema, kvs, 1);
        tap_ok(err_is(st, GRM_EINVAL, "hash column 'score' is f32", "str or i64"),
               "hash of an f32 column is GRM_EINVAL naming its type");
    }
    {
        const char *kvs[] = { "mod=ts:0" };
        const grm_status st = tb_create(&inst, &schema, kvs, 1);
        tap_ok(err_is(st, GRM_EINVAL, "mod entry 'ts:0': N must be > 0", NULL),
               "mod N = 0 is GRM_EINVAL naming the entry");
    }
    {
        const char *kvs[] = { "mod=ts" };
        const grm_status st = tb_create(&inst, &schema, kvs, 1);
        tap_ok(err_is(st, GRM_EINVAL, "mod entry 'ts': expected column:N", NULL),
               "mod entry without ':N' is GRM_EINVAL naming the entry");
    }
    {
        const char *kvs[] = { "mod=score:10" };
        const grm_status st = tb_create(&inst, &schema, kvs, 1);
        tap_ok(err_is(st, GRM_EINVAL, "mod column 'score' is f32", NULL),
               "mod of an f32 column is GRM_EINVAL");
    }
    {
        const char *kvs[] = { "keep=id,nope" };
        const grm_status st = tb_create(&inst, &schema, kvs, 1);
        tap_ok(err_is(st, GRM_EINVAL, "keep column 'nope' is not in the output", "id (i64)"),
               "keep of a missing column names it and lists the available columns");
    }
    {
        const char *kvs[] = { "sequence_by=name", "sequence_columns=id" };
        const grm_status st = tb_create(&inst, &schema, kvs, 2);
        tap_ok(err_is(st, GRM_EINVAL, "sequence_by column 'name' is str", NULL),
               "sequence_by on a str column is GRM_EINVAL (suggests hashing it)");
    }
    {
        const char *kvs[] = { "sequence_order=ts" };
        const grm_status st = tb_create(&inst, &schema, kvs, 1);
        tap_ok(err_is(st, GRM_EINVAL, "sequence_by is not", NULL),
               "sequence_order without sequence_by is GRM_EINVAL");
    }
    {
        const char *kvs[] = { "sequence_by=id", "sequence_columns=ts,missing" };
        const grm_status st = tb_create(&inst, &schema, kvs, 2);
        tap_ok(err_is(st, GRM_EINVAL, "sequence_columns column 'missing' is not in the input",
                      "available"),
               "a missing sequence column is GRM_EINVAL naming it");
    }
}

/* ---- sequence building ---- */

/* Events (user, item, ts, rating), unsorted, with ties in ts; given as two chunks. */
static int64_t ev_user[] = { 2, 1, 1, 2, 1, 1, 2, 3 };
static int64_t ev_item[] = { 5, 1, 2, 6, 3, 4, 7, 9 };
static int64_t ev_ts[] = { 30, 20, 10, 10, 20, 5, 30, 1 };
static float ev_rating[] = { 0.5f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f };

/* Run sequence building with extra config; returns the flushed chunk (or NULL). */
static grm_status run_seq(void **inst, const char *const *extra, int nextra,
                          const grm_chunk **out, int *apply_null)
{
    grm_column c1[4] = { col_i64("user", ev_user, 5), col_i64("item", ev_item, 5),
                         col_i64("ts", ev_ts, 5), col_f32("rating", ev_rating, 5) };
    grm_column c2[4] = { col_i64("user", ev_user + 5, 3), col_i64("item", ev_item + 5, 3),
                         col_i64("ts", ev_ts + 5, 3), col_f32("rating", ev_rating + 5, 3) };
    const grm_chunk in1 = chunk_of(c1, 4, 5), in2 = chunk_of(c2, 4, 3);
    grm_field fields[4];
    const grm_schema schema = schema_of(&in1, fields);
    const char *kvs[16] = { "sequence_by=user", "sequence_columns=item,ts,rating" };
    int n = 2;
    for (int i = 0; i < nextra; i++) kvs[n++] = extra[i];
    const grm_chunk *o1 = (const grm_chunk *)1, *o2 = (const grm_chunk *)1;

    *out = NULL;
    grm_status st = tb_create(inst, &schema, kvs, n);
    if (st == GRM_OK) st = tb_ops->apply(*inst, &in1, &o1);
    if (st == GRM_OK) st = tb_ops->apply(*inst, &in2, &o2);
    *apply_null = o1 == NULL && o2 == NULL;
    if (st == GRM_OK) st = tb_ops->flush(*inst, out);
    if (st != GRM_OK) tap_diag("status %d: %s", st, harness_host()->last_error());
    return st;
}

static void test_sequences(void)
{
    void *inst = NULL;
    const grm_chunk *out = NULL;
    const grm_schema *osc = NULL;
    int apply_null = 0;

    {
        const char *extra[] = { "sequence_order=ts" };
        grm_status st = run_seq(&inst, extra, 1, &out, &apply_null);
        tap_ok(st == GRM_OK && apply_null, "sequence mode: apply buffers and returns NULL");
        if (st == GRM_OK) st = tb_ops->schema(inst, &osc);
        tap_ok(st == GRM_OK && osc->nfields == 4 && strcmp(osc->fields[0].name, "user") == 0
                   && osc->fields[0].type == GRM_COL_I64
                   && osc->fields[1].type == GRM_COL_LIST_I64
                   && strcmp(osc->fields[2].name, "ts") == 0
                   && osc->fields[3].type == GRM_COL_LIST_F32,
               "sequence schema: user i64, item list_i64, ts list_i64, rating list_f32");
        // user 1: (ts 5, i4) (10, i2) (20, i1) (20, i3: tie, later input); user 2: (10, i6)
        // (30, i5) (30, i7); user 3: (1, i9)
        const int64_t keys[] = { 1, 2, 3 }, offs[] = { 0, 4, 7, 8 };
        const int64_t items[] = { 4, 2, 1, 3, 6, 5, 7, 9 };
        const int64_t tss[] = { 5, 10, 20, 20, 10, 30, 30, 1 };
        const float ratings[] = { 5.0f, 2.0f, 1.0f, 4.0f, 3.0f, 0.5f, 6.0f, 7.0f };
        int ok = st == GRM_OK && out != NULL && out->rows == 3 && out->ncols == 4;
        ok = ok && eq_i64(out->cols[0].values, keys, 3, "user");
        ok = ok && eq_i64(out->cols[1].offsets, offs, 4, "item offsets");
        ok = ok && eq_i64(out->cols[1].values, items, 8, "item");
        ok = ok && eq_i64(out->cols[2].offsets, offs, 4, "ts offsets");
        ok = ok && eq_i64(out->cols[2].values, tss, 8, "ts");
        tap_ok(ok, "sorted by ts with ties in input order: user 1 items [4,2,1,3], user 2 "
               "[6,5,7], user 3 [9]");
        tap_ok(ok && eq_i64(out->cols[3].offsets, offs, 4, "rating offsets")
                   && memcmp(out->cols[3].values, ratings, sizeof(ratings)) == 0,
               "f32 column gathered into list_f32 in the same order");
        const grm_chunk *again = (const grm_chunk *)1;
        st = tb_ops->flush(inst, &again);
        tap_ok(st == GRM_OK && again == NULL, "second flush yields NULL");
        grm_column c[4] = { col_i64("user", ev_user, 1), col_i64("item", ev_item, 1),
                            col_i64("ts", ev_ts, 1), col_f32("rating", ev_rating, 1) };
        const grm_chunk late = chunk_of(c, 4, 1);
        st = tb_ops->apply(inst, &late, &again);
        tap_ok(err_is(st, GRM_EINVAL, "apply after flush", NULL),
               "apply after flush is GRM_EINVAL");
        tb_ops->destroy(inst);
    }
    {
        const char *extra[] = { "sequence_order=", "keep=item,user" };
        const grm_status st = run_seq(&inst, extra, 2, &out, &apply_null);
        const int64_t items[] = { 1, 2, 3, 4, 5, 6, 7, 9 }, offs[] = { 0, 4, 7, 8 };
        tap_ok(st == GRM_OK && out != NULL && out->ncols == 2
                   && strcmp(out->cols[0].name, "item") == 0
                   && eq_i64(out->cols[0].values, items, 8, "item")
                   && eq_i64(out->cols[0].offsets, offs, 4, "offsets")
                   && ((int64_t *)out->cols[1].values)[2] == 3,
               "no sequence_order: input order per key; keep=item,user reorders the output");
        tb_ops->destroy(inst);
    }
    {
        const char *extra[] = { "sequence_order=ts", "min_length=2" };
        const grm_status st = run_seq(&inst, extra, 2, &out, &apply_null);
        const int64_t keys[] = { 1, 2 }, offs[] = { 0, 4, 7 };
        tap_ok(st == GRM_OK && out != NULL && out->rows == 2
                   && eq_i64(out->cols[0].values, keys, 2, "user")
                   && eq_i64(out->cols[1].offsets, offs, 3, "offsets"),
               "min_length=2 drops user 3 (one event); users 1 and 2 remain");
        tb_ops->destroy(inst);
    }
    {
        const char *extra[] = { "sequence_order=ts", "max_length=2" };
        const grm_status st = run_seq(&inst, extra, 2, &out, &apply_null);
        const int64_t items[] = { 1, 3, 5, 7, 9 }, offs[] = { 0, 2, 4, 5 };
        tap_ok(st == GRM_OK && out != NULL && out->rows == 3
                   && eq_i64(out->cols[1].offsets, offs, 4, "offsets")
                   && eq_i64(out->cols[1].values, items, 5, "item"),
               "max_length=2 keeps the 2 most recent: user 1 [1,3], user 2 [5,7], user 3 [9]");
        tb_ops->destroy(inst);
    }
    {
        const char *extra[] = { "sequence_order=ts", "min_length=3", "max_length=2" };
        const grm_status st = run_seq(&inst, extra, 3, &out, &apply_null);
        tap_ok(err_is(st, GRM_EINVAL, "min_length = 3, max_length = 2", NULL),
               "max_length below min_length is GRM_EINVAL");
    }
}

/* ---- MovieLens 100K through reader-text ---- */

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t distinct(int64_t *v, int64_t n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_i64);
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += i == 0 || v[i] != v[i - 1];
    return d;
}

static void test_movielens(void)
{
    const int npoints = 3;
    char path[4096], kv_path[4200];
    const char *const data = harness_datadir();
    snprintf(path, sizeof(path), "%s/ml-100k/u.data.zst", data != NULL ? data : "");
    FILE *f = data != NULL ? fopen(path, "rb") : NULL;
    if (f == NULL) {
        static const char *const what[] = {
            "ml-100k u.data.zst: 100000 rows, 943 users, 1682 items",
            "sequences by user ordered by ts: 943 rows, 100000 list entries",
            "ml-100k sequences: users ascending, each user's ts non-decreasing",
        };
        for (int i = 0; i < npoints; i++) {
            tap_skip("ml-100k/u.data.zst not found under GRM_DATA_DIR", "%s", what[i]);
        }
        return;
    }
    fclose(f);
    snprintf(kv_path, sizeof(kv_path), "path=%s", path);

    const grm_plugin_info *const rinfo = harness_plugin("reader-text");
    const grm_reader_ops *const rops = rinfo->ops;
    const char *rkvs[] = { kv_path, "columns=user:i64,item:i64,rating:f32,ts:i64" };
    const void *rcfg = NULL;
    void *reader = NULL, *tr = NULL;
    const grm_schema *rs = NULL;
    int64_t rows = 0, *users = NULL, *items = NULL;
    grm_status st = harness_config_try(rinfo, &rcfg, rkvs, 2);
    if (st == GRM_OK) st = rops->open(rcfg, 0, 1, &reader);
    if (st == GRM_OK) st = rops->schema(reader, &rs);
    const char *tkvs[] = { "sequence_by=user", "sequence_order=ts", "sequence_columns=item,ts" };
    if (st == GRM_OK) st = tb_create(&tr, rs, tkvs, 3);
    while (st == GRM_OK) {
        const grm_chunk *ch = NULL, *o = (const grm_chunk *)1;
        st = rops->next(reader, &ch);
        if (st != GRM_OK || ch == NULL) break;
        users = realloc(users, (size_t)(rows + ch->rows) * sizeof(int64_t));
        items = realloc(items, (size_t)(rows + ch->rows) * sizeof(int64_t));
        memcpy(users + rows, ch->cols[0].values, (size_t)ch->rows * sizeof(int64_t));
        memcpy(items + rows, ch->cols[1].values, (size_t)ch->rows * sizeof(int64_t));
        rows += ch->rows;
        st = tb_ops->apply(tr, ch, &o);
        if (st == GRM_OK && o != NULL) st = GRM_EINTERNAL;
    }
    if (st != GRM_OK) tap_diag("status %d: %s", st, harness_host()->last_error());
    const int64_t nu = st == GRM_OK ? distinct(users, rows) : -1;
    const int64_t ni = st == GRM_OK ? distinct(items, rows) : -1;
    tap_ok(st == GRM_OK && rows == 100000 && nu == 943 && ni == 1682,
           "ml-100k u.data.zst: %lld rows, %lld users, %lld items (want 100000, 943, 1682)",
           (long long)rows, (long long)nu, (long long)ni);

    const grm_chunk *out = NULL;
    if (st == GRM_OK) st = tb_ops->flush(tr, &out);
    const int ok = st == GRM_OK && out != NULL;
    tap_ok(ok && out->rows == 943 && out->cols[1].offsets[943] == 100000
               && out->cols[2].offsets[943] == 100000,
           "sequences by user ordered by ts: 943 rows, 100000 list entries");
    int sorted = ok;
    for (int64_t i = 0; sorted && i + 1 < (ok ? out->rows : 0); i++) {
        const int64_t *const t = out->cols[2].values, *const o = out->cols[2].offsets;
        sorted = ((const int64_t *)out->cols[0].values)[i]
                 < ((const int64_t *)out->cols[0].values)[i + 1];
        for (int64_t e = o[i] + 1; sorted && e < o[i + 1]; e++) sorted = t[e - 1] <= t[e];
    }
    tap_ok(sorted, "ml-100k sequences: users ascending, each user's ts non-decreasing");
    free(users);
    free(items);
    tb_ops->destroy(tr);
    rops->close(reader);
}

/* ---- bucketize (RecIS Table 1): bucket index = number of boundaries <= x ---- */

static void test_bucketize(void)
{
    int64_t rating[] = { 1, 3, 4, 5, -2 };
    float age[] = { -1.0f, 3.0f, 4.0f, 4.5f, 10.0f };
    const grm_column cols[] = { col_i64("rating", rating, 5), col_f32("age", age, 5) };
    const grm_chunk in = chunk_of(cols, 2, 5);
    grm_field fields[2];
    const grm_schema schema = schema_of(&in, fields);
    void *inst = NULL;
    const char *kv[] = { "bucketize=rating:4, age:0/4/5" };
    grm_status st = tb_create(&inst, &schema, kv, 1);
    const grm_chunk *out = NULL;
    if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
    /* rating >= 4 -> 1 (a binary label); age: -1 < 0 -> 0, 3 -> 1, 4 -> 2, 4.5 -> 2, 10 -> 3 */
    const int64_t want_rating[] = { 0, 0, 1, 1, 0 }, want_age[] = { 0, 1, 2, 2, 3 };
    tap_ok(st == GRM_OK && out && out->cols[0].type == GRM_COL_I64
           && out->cols[1].type == GRM_COL_I64
           && eq_i64(out->cols[0].values, want_rating, 5, "rating")
           && eq_i64(out->cols[1].values, want_age, 5, "age"),
           "bucketize rating:4 gives 0/1 labels and age:0/4/5 gives bucket indices 0..3 "
           "(i64 and f32 inputs, boundary values go up)");
    tb_ops->destroy(inst);

    const char *bad1[] = { "bucketize=age:4/4" };
    tap_ok(err_is(tb_create(&inst, &schema, bad1, 1), GRM_EINVAL, "age:4/4",
                  "strictly ascending"), "bucketize refuses boundaries that are not ascending");
    const char *bad2[] = { "bucketize=age:1/x" };
    tap_ok(err_is(tb_create(&inst, &schema, bad2, 1), GRM_EINVAL, "boundary 2 is not a number",
                  NULL), "bucketize refuses a non-numeric boundary, naming its position");
    const char *bad3[] = { "bucketize=rating:4", "hash=rating" };
    tap_ok(err_is(tb_create(&inst, &schema, bad3, 2), GRM_EINVAL, "already hashed", NULL),
           "a column is hashed or bucketized, not both");
}

/* ---- cross, truncate, pad (RecIS §2.1 Feature Engine) ---- */

static grm_column col_list_i64(const char *name, int64_t *v, int64_t *offs, int64_t rows)
{
    return (grm_column){ .name = name, .type = GRM_COL_LIST_I64, .rows = rows, .values = v,
                         .offsets = offs };
}

static grm_column col_list_f32(const char *name, float *v, int64_t *offs, int64_t rows)
{
    return (grm_column){ .name = name, .type = GRM_COL_LIST_F32, .rows = rows, .values = v,
                         .offsets = offs };
}

/* The expected cross, written from the spec: XXH3-64 of the 16 bytes a, b (each
 * little-endian), & INT64_MAX, % n when n > 0. */
static int64_t want_cross(int64_t a, int64_t b, int64_t n)
{
    unsigned char k[16];
    for (int i = 0; i < 8; i++) {
        k[i] = (unsigned char)((uint64_t)a >> (8 * i));
        k[8 + i] = (unsigned char)((uint64_t)b >> (8 * i));
    }
    return want_hash(k, 16, n);
}

static int64_t want_hash_i64(int64_t x, int64_t buckets)
{
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)((uint64_t)x >> (8 * k));
    return want_hash(le, 8, buckets);
}

/* Index of output column `name`, or -1. */
static int out_col(const grm_chunk *out, const char *name)
{
    for (int32_t j = 0; out != NULL && j < out->ncols; j++) {
        if (strcmp(out->cols[j].name, name) == 0) return j;
    }
    return -1;
}

static void test_cross(void)
{
    // user i64, item str ["a", "bb", "c"], hist list_i64 [[10,11,12],[],[13]], score f32
    int64_t user[] = { 1, 2, -3 };
    char items[] = "abbc";
    int64_t ioffs[] = { 0, 1, 3, 4 };
    int64_t hist[] = { 10, 11, 12, 13 }, hoffs[] = { 0, 3, 3, 4 };
    float score[] = { 1.0f, 2.0f, 3.0f };
    int64_t hist2[] = { 5, 6, 7, 8 };
    grm_column cols[5] = {
        col_i64("user", user, 3),
        { .name = "item", .type = GRM_COL_STR, .rows = 3, .values = items, .offsets = ioffs },
        col_list_i64("hist", hist, hoffs, 3), col_f32("score", score, 3),
        col_list_i64("hist2", hist2, hoffs, 3),
    };
    const grm_chunk in = chunk_of(cols, 5, 3);
    grm_field fields[5];
    const grm_schema schema = schema_of(&in, fields);
    void *inst = NULL;
    const grm_chunk *out = NULL;
    const grm_schema *osc = NULL;

    const char *kvs[] = { "hash=item", "cross=user*item:ui, user*hist:uh:100, ui*user:uiu:7" };
    grm_status st = tb_create(&inst, &schema, kvs, 2);
    if (st == GRM_OK) st = tb_ops->schema(inst, &osc);
    tap_ok(st == GRM_OK && osc->nfields == 8 && strcmp(osc->fields[5].name, "ui") == 0
               && osc->fields[5].type == GRM_COL_I64 && strcmp(osc->fields[6].name, "uh") == 0
               && osc->fields[6].type == GRM_COL_LIST_I64 && osc->fields[7].type == GRM_COL_I64,
           "cross schema: ui i64, uh list_i64 (user*hist), uiu i64 appended after the inputs");
    if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
    const int64_t hi[] = { want_hash("a", 1, 0), want_hash("bb", 2, 0), want_hash("c", 1, 0) };
    int64_t ui[3], uiu[3], uh[4];
    for (int r = 0; r < 3; r++) {
        ui[r] = want_cross(user[r], hi[r], 0);
        uiu[r] = want_cross(ui[r], user[r], 7);
    }
    uh[0] = want_cross(1, 10, 100);
    uh[1] = want_cross(1, 11, 100);
    uh[2] = want_cross(1, 12, 100);
    uh[3] = want_cross(-3, 13, 100);
    const int ok = st == GRM_OK && out != NULL && out->ncols == 8;
    tap_ok(ok && eq_i64(out->cols[5].values, ui, 3, "ui"),
           "cross user*item = XXH3-64 of the 16 LE bytes (user, hash(item)) & INT64_MAX");
    tap_ok(ok && eq_i64(out->cols[6].values, uh, 4, "uh")
               && eq_i64(out->cols[6].offsets, hoffs, 4, "uh offsets"),
           "cross user*hist:100 is a list: each hist value with its row's user, %% 100");
    tap_ok(ok && eq_i64(out->cols[7].values, uiu, 3, "uiu"),
           "a cross of a cross (ui*user:7) reads the earlier cross's ids");
    tb_ops->destroy(inst);

    // Range and spread of cross % N: 4000 pairs over 13 buckets hit every bucket.
    enum { R = 4000 };
    static int64_t a[R], b[R];
    uint64_t seed = 42;
    for (int r = 0; r < R; r++) {
        a[r] = (int64_t)(harness_rand(&seed) % 50);
        b[r] = (int64_t)(harness_rand(&seed) % 80) - 40;
    }
    grm_column c2[2] = { col_i64("a", a, R), col_i64("b", b, R) };
    const grm_chunk in2 = chunk_of(c2, 2, R);
    grm_field f2[2];
    const grm_schema s2 = schema_of(&in2, f2);
    const char *kv2[] = { "cross=a*b:ab:13, b*a:ba" };
    st = tb_create(&inst, &s2, kv2, 1);
    if (st == GRM_OK) st = tb_ops->apply(inst, &in2, &out);
    int range_ok = st == GRM_OK, hit[13] = { 0 }, all = 1, asym = 0;
    for (int r = 0; range_ok && r < R; r++) {
        const int64_t v = ((const int64_t *)out->cols[2].values)[r];
        range_ok = v >= 0 && v < 13 && v == want_cross(a[r], b[r], 13);
        if (range_ok) hit[v] = 1;
        asym += ((const int64_t *)out->cols[3].values)[r] != want_cross(a[r], b[r], 0);
    }
    for (int k = 0; k < 13; k++) all = all && hit[k];
    tap_ok(range_ok && all, "cross a*b:ab:13 over 4000 rows: every id in [0, 13) and equal to "
           "the spec, every bucket hit");
    tap_ok(range_ok && asym > R / 2, "cross is ordered: b*a differs from a*b (%d of %d rows)",
           asym, R);
    tb_ops->destroy(inst);

    // Negative cases: each names the entry or column.
    static const struct { const char *kv, *n1, *n2, *what; } bad[] = {
        { "cross=user+item:x", "cross entry 'user+item:x': expected a*b:out", NULL,
          "cross entry without '*'" },
        { "cross=user*item", "cross entry 'user*item': expected a*b:out", NULL,
          "cross entry without an output name" },
        { "cross=user*nope:x", "cross column 'nope' is not in the input", "user (i64)",
          "cross of an unknown column lists the available ones" },
        { "cross=user*score:x", "cross entry 'user*score:x': column 'score' is f32",
          "i64 or list_i64", "cross of an f32 column" },
        { "cross=user*item:x", "column 'item' is str", NULL, "cross of an unhashed str column" },
        { "cross=hist*hist2:x", "cross entry 'hist*hist2:x': 'hist' and 'hist2' are both lists",
          "scalar", "cross of two list columns" },
        { "cross=user*hist:score", "column 'score' already exists", NULL,
          "cross output named like an input column" },
        { "cross=user*hist:x:0", "cross entry 'user*hist:x:0': N = '0' must be an integer > 0",
          NULL, "cross N = 0" },
        { "cross=user*hist:x:ten", "N = 'ten' must be an integer", NULL, "cross N not a number" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *kv[] = { bad[i].kv };
        st = tb_create(&inst, &schema, kv, 1);
        tap_ok(err_is(st, GRM_EINVAL, bad[i].n1, bad[i].n2) && inst == NULL,
               "%s is GRM_EINVAL (%s)", bad[i].what, bad[i].kv);
    }
}

static void test_truncate_pad(void)
{
    // hist list_i64 [[1,2,3,4,5],[6],[],[7,8,9]]; vals list_f32 [[.5],[],[1,2,3],[4]]
    int64_t hist[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, hoffs[] = { 0, 5, 6, 6, 9 };
    float vals[] = { 0.5f, 1.0f, 2.0f, 3.0f, 4.0f };
    int64_t voffs[] = { 0, 1, 1, 4, 5 };
    int64_t user[] = { 3, 4, 5, 6 };
    grm_column cols[3] = { col_list_i64("hist", hist, hoffs, 4),
                           col_list_f32("vals", vals, voffs, 4), col_i64("user", user, 4) };
    const grm_chunk in = chunk_of(cols, 3, 4);
    grm_field fields[3];
    const grm_schema schema = schema_of(&in, fields);
    void *inst = NULL;
    const grm_chunk *out = NULL;

    static const struct {
        const char *kv1, *kv2;
        int64_t offs[5], v[20];
        const char *what;
    } cases[] = {
        { "truncate=hist:3", NULL, { 0, 3, 4, 4, 7 }, { 3, 4, 5, 6, 7, 8, 9 },
          "truncate=hist:3 keeps the 3 most recent (last) values of each row" },
        { "truncate=hist:2:recent", NULL, { 0, 2, 3, 3, 5 }, { 4, 5, 6, 8, 9 },
          "truncate=hist:2:recent keeps the last 2" },
        { "truncate=hist:2:first", NULL, { 0, 2, 3, 3, 5 }, { 1, 2, 6, 7, 8 },
          "truncate=hist:2:first keeps the first 2" },
        { "pad=hist:3", NULL, { 0, 5, 8, 11, 14 }, { 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 7, 8, 9 },
          "pad=hist:3 pads short rows with 0 at the back, leaves long rows whole" },
        { "truncate=hist:3", "pad=hist:3:-1", { 0, 3, 6, 9, 12 },
          { 3, 4, 5, 6, -1, -1, -1, -1, -1, 7, 8, 9 },
          "truncate=hist:3 then pad=hist:3:-1 gives every row exactly 3 values" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *kv[] = { cases[i].kv1, cases[i].kv2 };
        grm_status st = tb_create(&inst, &schema, kv, cases[i].kv2 != NULL ? 2 : 1);
        if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
        const int64_t n = cases[i].offs[4];
        tap_ok(st == GRM_OK && out->cols[0].type == GRM_COL_LIST_I64
                   && eq_i64(out->cols[0].offsets, cases[i].offs, 5, "offsets")
                   && eq_i64(out->cols[0].values, cases[i].v, n, "hist")
                   && out->cols[1].values == (void *)vals,
               "%s", cases[i].what);
        tb_ops->destroy(inst);
    }
    {
        const char *kv[] = { "truncate=vals:2", "pad=vals:2:-1.5" };
        grm_status st = tb_create(&inst, &schema, kv, 2);
        if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
        const int64_t offs[] = { 0, 2, 4, 6, 8 };
        const float want[] = { 0.5f, -1.5f, -1.5f, -1.5f, 2.0f, 3.0f, 4.0f, -1.5f };
        tap_ok(st == GRM_OK && out->cols[1].type == GRM_COL_LIST_F32
                   && eq_i64(out->cols[1].offsets, offs, 5, "offsets")
                   && memcmp(out->cols[1].values, want, sizeof(want)) == 0,
               "list_f32: truncate=vals:2 keeps [2,3] of [1,2,3]; pad=vals:2:-1.5 fills");
        tb_ops->destroy(inst);
    }
    {
        // The documented order: hash, mod, cross (on the full list), truncate, pad; the pad
        // value is written as given (not hashed).
        const char *kv[] = { "hash=hist", "mod=hist:10", "cross=hist*user:hu:1000",
                             "truncate=hist:2, hu:1:first", "pad=hist:3:99" };
        grm_status st = tb_create(&inst, &schema, kv, 5);
        if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
        int64_t m[9], hu[9], whist[12], whu[4];
        const int64_t rowof[] = { 0, 0, 0, 0, 0, 1, 3, 3, 3 };
        for (int v = 0; v < 9; v++) {
            m[v] = want_hash_i64(hist[v], 0) % 10;
            hu[v] = want_cross(m[v], user[rowof[v]], 1000);
        }
        // hist: last 2 of each row, padded to 3 with 99: [m3 m4 99][m5 99 99][99 99 99][m7 m8 99]
        const int64_t src[] = { 3, 4, -1, 5, -1, -1, -1, -1, -1, 7, 8, -1 };
        for (int k = 0; k < 12; k++) whist[k] = src[k] >= 0 ? m[src[k]] : 99;
        whu[0] = hu[0];
        whu[1] = hu[5];
        whu[2] = hu[6];
        const int64_t hoffs_w[] = { 0, 3, 6, 9, 12 }, huoffs_w[] = { 0, 1, 2, 2, 3 };
        const int jh = out_col(out, "hu");
        tap_ok(st == GRM_OK && jh == 3 && eq_i64(out->cols[0].offsets, hoffs_w, 5, "offsets")
                   && eq_i64(out->cols[0].values, whist, 12, "hist")
                   && eq_i64(out->cols[jh].offsets, huoffs_w, 5, "hu offsets")
                   && eq_i64(out->cols[jh].values, whu, 3, "hu"),
               "order hash -> mod -> cross -> truncate -> pad on one list column and its cross");
        tb_ops->destroy(inst);
    }
    {
        // In sequence mode truncate and pad apply to the emitted lists.
        const grm_chunk *sout = NULL;
        int apply_null = 0;
        const char *extra[] = { "sequence_order=ts", "truncate=item:2:first", "pad=item:4:-1" };
        grm_status st = run_seq(&inst, extra, 3, &sout, &apply_null);
        const int64_t items[] = { 4, 2, -1, -1, 6, 5, -1, -1, 9, -1, -1, -1 };
        const int64_t offs[] = { 0, 4, 8, 12 }, roffs[] = { 0, 4, 7, 8 };
        tap_ok(st == GRM_OK && sout != NULL && sout->rows == 3
                   && eq_i64(sout->cols[1].offsets, offs, 4, "item offsets")
                   && eq_i64(sout->cols[1].values, items, 12, "item")
                   && eq_i64(sout->cols[3].offsets, roffs, 4, "rating offsets"),
               "sequence mode: truncate=item:2:first, pad=item:4:-1 on the built lists only");
        tb_ops->destroy(inst);
    }

    static const struct { const char *kv, *n1, *n2, *what; } bad[] = {
        { "truncate=user:3", "truncate column 'user' is i64", "list_i64 or list_f32",
          "truncate of a scalar column" },
        { "truncate=nope:3", "truncate column 'nope' is not in the input", "hist (list_i64)",
          "truncate of an unknown column" },
        { "truncate=hist:0", "truncate entry 'hist:0': expected column:N", NULL,
          "truncate N = 0" },
        { "truncate=hist", "truncate entry 'hist': expected column:N", NULL,
          "truncate without N" },
        { "truncate=hist:3:newest", "policy 'newest' is not recent", NULL,
          "truncate with an unknown policy" },
        { "truncate=hist:3, hist:2", "truncate lists column 'hist' twice", NULL,
          "truncate of one column twice" },
        { "pad=hist:3:x", "pad entry 'hist:3:x': value 'x' is not an integer", NULL,
          "pad of a list_i64 with a non-integer value" },
        { "pad=vals:3:abc", "pad entry 'vals:3:abc': value 'abc' is not a number", NULL,
          "pad of a list_f32 with a non-number" },
        { "pad=user:3", "pad column 'user' is i64", NULL, "pad of a scalar column" },
        { "hash=vals", "hash column 'vals' is list_f32", NULL, "hash of a list_f32 column" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *kv[] = { bad[i].kv };
        const grm_status st = tb_create(&inst, &schema, kv, 1);
        tap_ok(err_is(st, GRM_EINVAL, bad[i].n1, bad[i].n2) && inst == NULL,
               "%s is GRM_EINVAL (%s)", bad[i].what, bad[i].kv);
    }
    {
        const grm_chunk *sout = NULL;
        int apply_null = 0;
        const char *extra[] = { "truncate=user:2" };
        const grm_status st = run_seq(&inst, extra, 1, &sout, &apply_null);
        tap_ok(err_is(st, GRM_EINVAL, "truncate column 'user' is not a sequence column", NULL),
               "sequence mode: truncate of the key column is GRM_EINVAL");
    }
    {
        const char *kv[] = { "truncate=hist:2" };
        grm_status st = tb_create(&inst, &schema, kv, 1);
        grm_column bc[3] = { cols[0], cols[1], cols[2] };
        bc[0].offsets = NULL;
        const grm_chunk bin = chunk_of(bc, 3, 4);
        if (st == GRM_OK) st = tb_ops->apply(inst, &bin, &out);
        tap_ok(err_is(st, GRM_EINVAL, "chunk column 0 is 'hist'", NULL),
               "apply with a list column without offsets is GRM_EINVAL");
        tb_ops->destroy(inst);
    }
}

/* ---- the fused pass against one transform at a time ---- */

/* A column of the reference: the transforms below each make one full pass over it. */
typedef struct refcol {
    char name[16];
    int32_t type;
    int64_t *i;      /* i64 values (scalars or list values) */
    float *f;        /* f32 values */
    char *bytes;     /* str bytes */
    int64_t *offs;   /* [rows+1] str or list offsets */
} refcol;

enum { FR = 9000, FNCOL = 17 };   /* rows: three 4096-row blocks of the fused pass */

static refcol fcols[FNCOL + 8];
static void *ref_blocks[256];
static int ref_nblocks;

/* malloc, remembered for ref_free_all (the reference replaces arrays pass by pass). */
static void *ref_alloc(size_t n)
{
    void *const p = malloc(n);
    if (ref_nblocks < 256) ref_blocks[ref_nblocks++] = p;
    return p;
}

static void ref_free_all(void)
{
    while (ref_nblocks > 0) free(ref_blocks[--ref_nblocks]);
}
static int fncols;

static refcol *fcol(const char *name)
{
    for (int j = 0; j < fncols; j++) {
        if (strcmp(fcols[j].name, name) == 0) return &fcols[j];
    }
    return NULL;
}

static int64_t fnvals(const refcol *c)
{
    return c->offs != NULL && c->type != GRM_COL_STR ? c->offs[FR] : FR;
}

static void ref_hash(refcol *c, int64_t buckets)
{
    const int64_t n = fnvals(c);
    int64_t *const o = ref_alloc((size_t)n * sizeof(int64_t));
    for (int64_t v = 0; v < n; v++) {
        o[v] = c->type == GRM_COL_STR
                   ? want_hash(c->bytes + c->offs[v], (size_t)(c->offs[v + 1] - c->offs[v]),
                               buckets)
                   : want_hash_i64(c->i[v], buckets);
    }
    if (c->type == GRM_COL_STR) {
        c->type = GRM_COL_I64;
        c->offs = NULL;
    }
    c->i = o;
}

static void ref_mod(refcol *c, int64_t n)
{
    const int64_t nv = fnvals(c);
    int64_t *const o = ref_alloc((size_t)nv * sizeof(int64_t));
    for (int64_t v = 0; v < nv; v++) o[v] = ((c->i[v] % n) + n) % n;
    c->i = o;
}

/* Linear count of boundaries <= x (the plugin searches; this one scans). */
static void ref_bucketize(refcol *c, const double *b, int nb)
{
    const int64_t nv = fnvals(c);
    int64_t *const o = ref_alloc((size_t)nv * sizeof(int64_t));
    for (int64_t v = 0; v < nv; v++) {
        const double x = c->f != NULL ? (double)c->f[v] : (double)c->i[v];
        o[v] = 0;
        for (int k = 0; k < nb; k++) o[v] += b[k] <= x;
    }
    c->i = o;
    c->f = NULL;
    c->type = c->offs != NULL ? GRM_COL_LIST_I64 : GRM_COL_I64;
}

static void ref_cross(const char *a, const char *b, const char *out, int64_t n)
{
    const refcol *const ca = fcol(a), *const cb = fcol(b);
    refcol *const c = &fcols[fncols++];
    snprintf(c->name, sizeof(c->name), "%s", out);
    c->offs = ca->offs != NULL ? ca->offs : cb->offs;
    c->type = c->offs != NULL ? GRM_COL_LIST_I64 : GRM_COL_I64;
    c->i = ref_alloc((size_t)fnvals(c) * sizeof(int64_t));
    for (int64_t r = 0; r < FR; r++) {
        const int64_t v0 = c->offs != NULL ? c->offs[r] : r;
        const int64_t v1 = c->offs != NULL ? c->offs[r + 1] : r + 1;
        for (int64_t v = v0; v < v1; v++) {
            c->i[v] = want_cross(ca->i[ca->offs != NULL ? v : r], cb->i[cb->offs != NULL ? v : r],
                                 n);
        }
    }
}

/* Truncate (n > 0, first or last) or pad (pad > 0 with value pv) one list column. */
static void ref_len(refcol *c, int64_t n, int first, int64_t pad, double pv)
{
    int64_t *const offs = ref_alloc((FR + 1) * sizeof(int64_t));
    offs[0] = 0;
    for (int64_t r = 0; r < FR; r++) {
        int64_t len = c->offs[r + 1] - c->offs[r];
        if (n > 0 && len > n) len = n;
        if (pad > 0 && len < pad) len = pad;
        offs[r + 1] = offs[r] + len;
    }
    int64_t *const oi = ref_alloc((size_t)offs[FR] * sizeof(int64_t) + 1);
    float *const of = ref_alloc((size_t)offs[FR] * sizeof(float) + 1);
    for (int64_t r = 0; r < FR; r++) {
        int64_t b = c->offs[r], e = c->offs[r + 1];
        if (n > 0 && e - b > n) {
            if (first) e = b + n; else b = e - n;
        }
        for (int64_t k = 0; k < offs[r + 1] - offs[r]; k++) {
            if (c->type == GRM_COL_LIST_I64) {
                oi[offs[r] + k] = b + k < e ? c->i[b + k] : (int64_t)pv;
            } else {
                of[offs[r] + k] = b + k < e ? c->f[b + k] : (float)pv;
            }
        }
    }
    c->offs = offs;
    c->i = oi;
    c->f = of;
}

/* The random input: i64 i0..i7, f32 f0..f2, str s0 s1, list_i64 l0..l2, list_f32 lf0. */
static void fused_input(grm_column *cols)
{
    static const char *const names[FNCOL] = { "i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7",
                                              "f0", "f1", "f2", "s0", "s1", "l0", "l1", "l2",
                                              "lf0" };
    uint64_t seed = 7;
    fncols = FNCOL;
    for (int j = 0; j < FNCOL; j++) {
        refcol *const c = &fcols[j];
        snprintf(c->name, sizeof(c->name), "%s", names[j]);
        c->type = j < 8 ? GRM_COL_I64 : j < 11 ? GRM_COL_F32 : j < 13 ? GRM_COL_STR
                  : j < 16 ? GRM_COL_LIST_I64 : GRM_COL_LIST_F32;
        if (c->type >= GRM_COL_STR) {
            c->offs = ref_alloc((FR + 1) * sizeof(int64_t));
            c->offs[0] = 0;
            for (int64_t r = 0; r < FR; r++) {
                c->offs[r + 1] = c->offs[r] + (int64_t)(harness_rand(&seed) % 13);
            }
        }
        const int64_t n = fnvals(c) > FR ? fnvals(c) : FR;
        const int64_t nv = c->type == GRM_COL_STR ? c->offs[FR] : n;
        c->i = ref_alloc((size_t)nv * sizeof(int64_t) + 8);
        c->f = ref_alloc((size_t)nv * sizeof(float) + 8);
        c->bytes = ref_alloc((size_t)nv + 1);
        for (int64_t v = 0; v < nv; v++) {
            c->i[v] = (int64_t)(harness_rand(&seed) % 2000001) - 1000000;
            c->f[v] = 10.0f * harness_randf(&seed);
            c->bytes[v] = (char)('a' + harness_rand(&seed) % 4);
        }
        if (c->type != GRM_COL_F32 && c->type != GRM_COL_LIST_F32) c->f = NULL;
        cols[j] = (grm_column){ .name = c->name, .type = c->type, .rows = FR,
                                .values = c->type == GRM_COL_STR ? (void *)c->bytes
                                          : c->f != NULL ? (void *)c->f : (void *)c->i,
                                .offsets = c->type >= GRM_COL_STR ? c->offs : NULL };
    }
}

static const char *const fused_kvs[] = {
    "hash=s0, s1, i0, i1, l0",
    "hash_buckets=100000",
    "mod=i0:1000, i2:77, i3:5, l0:50, l1:9",
    "bucketize=f0:-5/0/5, f1:0, i4:-100/0/100/1000, lf0:-1/1",
    "cross=s0*i0:c0:1000, i1*i2:c1, l0*i5:c2:500, i6*l1:c3, c0*c1:c4:64, i7*lf0:c5",
    "truncate=l0:4, l1:3:first, c2:2, l2:6",
    "pad=l0:5:-1, c3:4, l2:8:7",
};

/* One transform at a time, in the documented order, each a full pass over its column. */
static void fused_reference(void)
{
    const char *const hashed[] = { "s0", "s1", "i0", "i1", "l0" };
    for (int k = 0; k < 5; k++) ref_hash(fcol(hashed[k]), 100000);
    const double b0[] = { -5, 0, 5 }, b1[] = { 0 }, b4[] = { -100, 0, 100, 1000 },
                 bl[] = { -1, 1 };
    ref_bucketize(fcol("f0"), b0, 3);
    ref_bucketize(fcol("f1"), b1, 1);
    ref_bucketize(fcol("i4"), b4, 4);
    ref_bucketize(fcol("lf0"), bl, 2);
    ref_mod(fcol("i0"), 1000);
    ref_mod(fcol("i2"), 77);
    ref_mod(fcol("i3"), 5);
    ref_mod(fcol("l0"), 50);
    ref_mod(fcol("l1"), 9);
    ref_cross("s0", "i0", "c0", 1000);
    ref_cross("i1", "i2", "c1", 0);
    ref_cross("l0", "i5", "c2", 500);
    ref_cross("i6", "l1", "c3", 0);
    ref_cross("c0", "c1", "c4", 64);
    ref_cross("i7", "lf0", "c5", 0);
    ref_len(fcol("l0"), 4, 0, 0, 0);
    ref_len(fcol("l1"), 3, 1, 0, 0);
    ref_len(fcol("c2"), 2, 0, 0, 0);
    ref_len(fcol("l2"), 6, 0, 0, 0);
    ref_len(fcol("l0"), 0, 0, 5, -1);
    ref_len(fcol("c3"), 0, 0, 4, 0);
    ref_len(fcol("l2"), 0, 0, 8, 7);
}

/* 1 when every output column equals the reference column of the same name. */
static int fused_matches(const grm_chunk *out)
{
    if (out == NULL || out->ncols != fncols || out->rows != FR) {
        tap_diag("fused output: %d columns (want %d)", out != NULL ? out->ncols : -1, fncols);
        return 0;
    }
    for (int32_t j = 0; j < out->ncols; j++) {
        const grm_column *const o = &out->cols[j];
        const refcol *const c = fcol(o->name);
        if (c == NULL || o->type != c->type) {
            tap_diag("column %s: type %d, want %d", o->name, o->type, c != NULL ? c->type : -1);
            return 0;
        }
        const int list = c->type == GRM_COL_LIST_I64 || c->type == GRM_COL_LIST_F32;
        if (list && !eq_i64(o->offsets, c->offs, FR + 1, o->name)) return 0;
        const int64_t n = list ? c->offs[FR] : c->type == GRM_COL_STR ? c->offs[FR] : FR;
        if (c->type == GRM_COL_I64 || c->type == GRM_COL_LIST_I64) {
            if (!eq_i64(o->values, c->i, n, o->name)) return 0;
        } else if (c->type == GRM_COL_F32 || c->type == GRM_COL_LIST_F32) {
            if (memcmp(o->values, c->f, (size_t)n * sizeof(float)) != 0) {
                tap_diag("column %s: f32 values differ", o->name);
                return 0;
            }
        } else if (memcmp(o->values, c->bytes, (size_t)n) != 0) {
            return 0;
        }
    }
    return 1;
}

/* Run apply as a task of the pool: nested parallel_for runs inline, i.e. on 1 thread
 * (core/pool.c in_parallel; the same trick as tests/test-sparse.c). */
typedef struct serial_apply {
    void *inst;
    const grm_chunk *in, *out;
    grm_status st;
} serial_apply;

static grm_status serial_range(void *ctx, int64_t b, int64_t e)
{
    serial_apply *const j = ctx;
    (void)e;
    if (b == 0) j->st = tb_ops->apply(j->inst, j->in, &j->out);
    return GRM_OK;
}

/* Copy of a chunk's column values and offsets into one malloc'd blob (for comparing). */
static size_t blob_of(const grm_chunk *out, unsigned char **blob)
{
    size_t n = 0, at = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t j = 0; j < out->ncols; j++) {
            const grm_column *const c = &out->cols[j];
            const int has_offs = c->offsets != NULL;
            const int64_t nv = has_offs ? c->offsets[c->rows] : c->rows;
            const size_t elem = c->type == GRM_COL_STR ? 1
                                : c->type == GRM_COL_F32 || c->type == GRM_COL_LIST_F32 ? 4 : 8;
            const size_t vb = (size_t)nv * elem, ob = has_offs ? (size_t)(c->rows + 1) * 8 : 0;
            if (pass == 1) {
                memcpy(*blob + at, c->values, vb);
                if (ob > 0) memcpy(*blob + at + vb, c->offsets, ob);
                at += vb + ob;
            } else {
                n += vb + ob;
            }
        }
        if (pass == 0) *blob = malloc(n);
    }
    return n;
}

static void test_fused(void)
{
    grm_column cols[FNCOL];
    fused_input(cols);
    const grm_chunk in = chunk_of(cols, FNCOL, FR);
    grm_field fields[FNCOL];
    const grm_schema schema = schema_of(&in, fields);
    void *inst = NULL;
    const grm_chunk *out = NULL;
    const int nkv = (int)(sizeof(fused_kvs) / sizeof(fused_kvs[0]));

    grm_status st = tb_create(&inst, &schema, fused_kvs, nkv);
    if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
    if (st != GRM_OK) tap_diag("status %d: %s", st, harness_host()->last_error());
    unsigned char *multi = NULL, *single = NULL;
    const size_t nm = st == GRM_OK ? blob_of(out, &multi) : 0;

    fused_reference();
    tap_ok(st == GRM_OK && fused_matches(out),
           "fused pass (27 transforms, 23 columns, 9000 rows) equals one transform at a time "
           "(hash, bucketize, mod, cross, truncate, pad reference loops)");

    serial_apply job = { .inst = inst, .in = &in, .st = GRM_EINTERNAL };
    if (st == GRM_OK) st = harness_host()->parallel_for(1, 1, serial_range, &job);
    if (st == GRM_OK) st = job.st;
    const size_t ns = st == GRM_OK ? blob_of(job.out, &single) : 0;
    tap_ok(st == GRM_OK && nm == ns && memcmp(multi, single, nm) == 0 && fused_matches(job.out),
           "the same instance on 1 thread and on %d threads gives identical bytes (%zu)",
           harness_host()->num_threads(), nm);

    // A second, smaller chunk through the same instance: buffers are reused, not stale.
    grm_column small[FNCOL];
    for (int j = 0; j < FNCOL; j++) small[j] = cols[j];
    const grm_chunk in0 = chunk_of(small, FNCOL, 0);
    for (int j = 0; j < FNCOL; j++) small[j].rows = 0;
    if (st == GRM_OK) st = tb_ops->apply(inst, &in0, &out);
    tap_ok(st == GRM_OK && out->rows == 0 && out->ncols == fncols,
           "an empty chunk through the fused pass gives 0 rows and every column");
    free(multi);
    free(single);
    ref_free_all();
    tb_ops->destroy(inst);
}

/* ---- copy (step 0): a new column that starts as a copy of an input column ---- */

static void test_copy(void)
{
    int64_t user[] = { 7, 8, 7, 9, 8, 7 };
    int64_t rating[] = { 1, 3, 4, 5, 5, 2 };
    char names[] = "abbccc";
    int64_t noffs[] = { 0, 1, 3, 6, 6, 6, 6 };
    const grm_column cols[] = {
        col_i64("user", user, 6), col_i64("rating", rating, 6),
        { .name = "name", .type = GRM_COL_STR, .rows = 6, .values = names, .offsets = noffs },
    };
    const grm_chunk in = chunk_of(cols, 3, 6);
    grm_field fields[3];
    const grm_schema schema = schema_of(&in, fields);
    void *inst = NULL;
    const grm_chunk *out = NULL;
    const grm_schema *osc = NULL;

    // Two labels from one rating: rating >= 4 and rating == 5 (the copy takes its own bounds).
    {
        const char *kvs[] = { "copy=rating:top", "bucketize=rating:4, top:5" };
        grm_status st = tb_create(&inst, &schema, kvs, 2);
        if (st == GRM_OK) st = tb_ops->schema(inst, &osc);
        tap_ok(st == GRM_OK && osc->nfields == 4 && strcmp(osc->fields[3].name, "top") == 0
                   && osc->fields[3].type == GRM_COL_I64
                   && strcmp(osc->fields[2].name, "name") == 0
                   && osc->fields[2].type == GRM_COL_STR,
               "copy=rating:top: schema user, rating, name, then top (i64) after the inputs");
        if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
        const int64_t ge4[] = { 0, 0, 1, 1, 1, 0 }, eq5[] = { 0, 0, 0, 1, 1, 0 };
        tap_ok(st == GRM_OK && out->ncols == 4 && eq_i64(out->cols[1].values, ge4, 6, "rating")
                   && eq_i64(out->cols[3].values, eq5, 6, "top") && rating[3] == 5,
               "copy + bucketize=rating:4, top:5 gives labels rating>=4 [0,0,1,1,1,0] and "
               "rating==5 [0,0,0,1,1,0]; the input is untouched");
        tb_ops->destroy(inst);
    }
    // An untransformed copy equals its source; a copy feeds mod and cross like any column;
    // copies come before crosses; keep reorders them.
    {
        const char *kvs[] = { "copy=rating:r, user:u2, rating:r3", "mod=u2:5",
                              "cross=user*r:ur:1000", "keep=ur,r3,u2,r,user" };
        grm_status st = tb_create(&inst, &schema, kvs, 4);
        if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
        int64_t ur[6], u2[6];
        for (int i = 0; i < 6; i++) {
            ur[i] = want_cross(user[i], rating[i], 1000);
            u2[i] = user[i] % 5;
        }
        tap_ok(st == GRM_OK && out->ncols == 5 && strcmp(out->cols[1].name, "r3") == 0
                   && eq_i64(out->cols[0].values, ur, 6, "ur")
                   && eq_i64(out->cols[1].values, rating, 6, "r3")
                   && eq_i64(out->cols[2].values, u2, 6, "u2")
                   && eq_i64(out->cols[3].values, rating, 6, "r")
                   && eq_i64(out->cols[4].values, user, 6, "user"),
               "copies: r3 == rating, u2 == user %% 5 (mod on the copy only), cross user*r "
               "equals XXH3 of (user, rating) %% 1000; keep=ur,r3,u2,r,user in that order");
        tb_ops->destroy(inst);
    }
    // A str copy hashed while its source stays a str column.
    {
        const char *kvs[] = { "copy=name:name_id", "hash=name_id", "hash_buckets=100" };
        grm_status st = tb_create(&inst, &schema, kvs, 3);
        if (st == GRM_OK) st = tb_ops->apply(inst, &in, &out);
        const int64_t want[] = { want_hash("a", 1, 100), want_hash("bb", 2, 100),
                                 want_hash("ccc", 3, 100), want_hash("", 0, 100),
                                 want_hash("", 0, 100), want_hash("", 0, 100) };
        tap_ok(st == GRM_OK && out->ncols == 4 && out->cols[2].type == GRM_COL_STR
                   && eq_i64(out->cols[2].offsets, noffs, 7, "name offsets")
                   && out->cols[3].type == GRM_COL_I64
                   && eq_i64(out->cols[3].values, want, 6, "name_id"),
               "copy=name:name_id with hash=name_id: name stays str, name_id is XXH3 %% 100");
        tb_ops->destroy(inst);
    }
    // Errors name the entry.
    static const struct { const char *kv, *a, *b, *what; } bad[] = {
        { "copy=rating", "copy entry 'rating': expected src:dst", NULL, "no colon" },
        { "copy=rating:", "copy entry 'rating:': expected src:dst", NULL, "empty dst" },
        { "copy=:top", "copy entry ':top': expected src:dst", NULL, "empty src" },
        { "copy=rating:top:x", "copy entry 'rating:top:x'", "expected src:dst", "two colons" },
        { "copy=nope:top", "copy entry 'nope:top': source column 'nope' is not in the input",
          "available: user (i64), rating (i64), name (str)", "unknown src" },
        { "copy=rating:user", "copy entry 'rating:user': column 'user' already exists", NULL,
          "dst is an input" },
        { "copy=rating:top, user:top", "copy entry 'user:top': column 'top' already exists",
          NULL, "dst twice" },
        { "copy=rating:top, top:t2", "copy entry 'top:t2': source column 'top' is not in the "
          "input", NULL, "src is a copy" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *kvs[] = { bad[i].kv };
        const grm_status st = tb_create(&inst, &schema, kvs, 1);
        tap_ok(err_is(st, GRM_EINVAL, bad[i].a, bad[i].b) && inst == NULL,
               "copy error (%s): %s is GRM_EINVAL naming the entry", bad[i].what, bad[i].kv);
    }
    {
        const char *kvs[] = { "copy=rating:ur", "cross=user*rating:ur" };
        const grm_status st = tb_create(&inst, &schema, kvs, 2);
        tap_ok(err_is(st, GRM_EINVAL, "copy entry 'rating:ur': column 'ur' already exists",
                      NULL), "copy error: dst named like a cross output is GRM_EINVAL");
    }
}

/* ---- per-event history (history_by) on the event table of test_sequences ---- */

/* Run history mode over ev_* in two chunks (rows 0-4, 5-7) with extra config. */
static grm_status run_hist(void **inst, const char *const *kvs, int n, const grm_chunk **out,
                           int *apply_null)
{
    grm_column c1[4] = { col_i64("user", ev_user, 5), col_i64("item", ev_item, 5),
                         col_i64("ts", ev_ts, 5), col_f32("rating", ev_rating, 5) };
    grm_column c2[4] = { col_i64("user", ev_user + 5, 3), col_i64("item", ev_item + 5, 3),
                         col_i64("ts", ev_ts + 5, 3), col_f32("rating", ev_rating + 5, 3) };
    const grm_chunk in1 = chunk_of(c1, 4, 5), in2 = chunk_of(c2, 4, 3);
    grm_field fields[4];
    const grm_schema schema = schema_of(&in1, fields);
    const grm_chunk *o1 = (const grm_chunk *)1, *o2 = (const grm_chunk *)1;

    *out = NULL;
    grm_status st = tb_create(inst, &schema, kvs, n);
    if (st == GRM_OK) st = tb_ops->apply(*inst, &in1, &o1);
    if (st == GRM_OK) st = tb_ops->apply(*inst, &in2, &o2);
    *apply_null = o1 == NULL && o2 == NULL;
    if (st == GRM_OK) st = tb_ops->flush(*inst, out);
    if (st != GRM_OK) tap_diag("status %d: %s", st, harness_host()->last_error());
    return st;
}

/* A list column equals (offsets, values) written out by hand. */
static int list_is(const grm_chunk *out, int j, const int64_t *offs, const int64_t *vals)
{
    if (out == NULL || j < 0 || out->cols[j].type != GRM_COL_LIST_I64) return 0;
    const int64_t rows = out->rows;
    return eq_i64(out->cols[j].offsets, offs, rows + 1, "offsets")
           && eq_i64(out->cols[j].values, vals, offs[rows], out->cols[j].name);
}

static void test_history(void)
{
    void *inst = NULL;
    const grm_chunk *out = NULL;
    const grm_schema *osc = NULL;
    int apply_null = 0;

    // Arrival rows (user, item, ts): 0 (2,5,30) 1 (1,1,20) 2 (1,2,10) 3 (2,6,10) 4 (1,3,20)
    // 5 (1,4,5) 6 (2,7,30) 7 (3,9,1). By (ts, arrival): user 1: i4 i2 i1 i3 (i1 and i3 tie
    // at 20, i1 arrived first); user 2: i6 i5 i7 (tie at 30); user 3: i9.
    {
        const char *kvs[] = { "history_by=user", "history_order=ts", "history_length=10",
                              "history_columns=item:hist_item, rating:hist_rating" };
        grm_status st = run_hist(&inst, kvs, 4, &out, &apply_null);
        tap_ok(st == GRM_OK && apply_null, "history mode: apply buffers and returns NULL");
        if (st == GRM_OK) st = tb_ops->schema(inst, &osc);
        tap_ok(st == GRM_OK && osc->nfields == 6 && strcmp(osc->fields[0].name, "user") == 0
                   && osc->fields[3].type == GRM_COL_F32
                   && strcmp(osc->fields[4].name, "hist_item") == 0
                   && osc->fields[4].type == GRM_COL_LIST_I64
                   && strcmp(osc->fields[5].name, "hist_rating") == 0
                   && osc->fields[5].type == GRM_COL_LIST_F32,
               "history schema: user, item, ts, rating, then hist_item list_i64, hist_rating "
               "list_f32");
        int ok = st == GRM_OK && out != NULL && out->rows == 8 && out->ncols == 6;
        ok = ok && eq_i64(out->cols[0].values, ev_user, 8, "user")
             && eq_i64(out->cols[1].values, ev_item, 8, "item")
             && eq_i64(out->cols[2].values, ev_ts, 8, "ts")
             && memcmp(out->cols[3].values, ev_rating, sizeof(ev_rating)) == 0;
        tap_ok(ok, "history emits all 8 rows in arrival order with every input column");
        const int64_t offs[] = { 0, 2, 5, 7, 8, 12, 13, 16, 17 };
        const int64_t items[] = { 6, 5, 4, 2, 1, 4, 2, 6, 4, 2, 1, 3, 4, 6, 5, 7, 9 };
        tap_ok(ok && list_is(out, 4, offs, items),
               "history_self (default): row 0 [6,5], row 1 [4,2,1], row 2 [4,2], row 3 [6], "
               "row 4 [4,2,1,3] (tie: after i1), row 5 [4], row 6 [6,5,7], row 7 [9]");
        const float ratings[] = { 3.0f, 0.5f, 5.0f, 2.0f, 1.0f, 5.0f, 2.0f, 3.0f, 5.0f,
                                  2.0f, 1.0f, 4.0f, 5.0f, 3.0f, 0.5f, 6.0f, 7.0f };
        tap_ok(ok && out->cols[5].type == GRM_COL_LIST_F32
                   && eq_i64(out->cols[5].offsets, offs, 9, "rating offsets")
                   && memcmp(out->cols[5].values, ratings, sizeof(ratings)) == 0,
               "f32 history: hist_rating holds the ratings of the same events, same offsets");
        const grm_chunk *again = (const grm_chunk *)1;
        st = tb_ops->flush(inst, &again);
        tap_ok(st == GRM_OK && again == NULL, "history: second flush yields NULL");
        grm_column c[4] = { col_i64("user", ev_user, 1), col_i64("item", ev_item, 1),
                            col_i64("ts", ev_ts, 1), col_f32("rating", ev_rating, 1) };
        const grm_chunk late = chunk_of(c, 4, 1);
        st = tb_ops->apply(inst, &late, &again);
        tap_ok(err_is(st, GRM_EINVAL, "apply after flush; the history rows", NULL),
               "history: apply after flush is GRM_EINVAL");
        tb_ops->destroy(inst);
    }
    {
        const char *kvs[] = { "history_by=user", "history_order=ts", "history_length=10",
                              "history_columns=item:h", "history_self=false" };
        const grm_status st = run_hist(&inst, kvs, 5, &out, &apply_null);
        const int64_t offs[] = { 0, 1, 3, 4, 4, 7, 7, 9, 9 };
        const int64_t items[] = { 6, 4, 2, 4, 4, 2, 1, 6, 5 };
        tap_ok(st == GRM_OK && out != NULL && out->rows == 8 && list_is(out, 4, offs, items),
               "history_self=false: strictly earlier events; rows 3, 5, 7 (first of their "
               "key) get empty lists");
        tb_ops->destroy(inst);
    }
    {
        const char *kvs[] = { "history_by=user", "history_order=ts", "history_length=2",
                              "history_columns=item:h" };
        const grm_status st = run_hist(&inst, kvs, 4, &out, &apply_null);
        const int64_t offs[] = { 0, 2, 4, 6, 7, 9, 10, 12, 13 };
        const int64_t items[] = { 6, 5, 2, 1, 4, 2, 6, 1, 3, 4, 5, 7, 9 };
        tap_ok(st == GRM_OK && out != NULL && list_is(out, 4, offs, items),
               "history_length=2 keeps the 2 most recent: row 1 [2,1], row 4 [1,3], "
               "row 6 [5,7]");
        tb_ops->destroy(inst);
    }
    {
        const char *kvs[] = { "history_by=user", "history_length=3", "history_columns=item:h",
                              "history_self=false" };
        const grm_status st = run_hist(&inst, kvs, 4, &out, &apply_null);
        // Input order per key: user 1 rows 1,2,4,5 = i1 i2 i3 i4; user 2 rows 0,3,6 = i5 i6 i7.
        const int64_t offs[] = { 0, 0, 0, 1, 2, 4, 7, 9, 9 };
        const int64_t items[] = { 1, 5, 1, 2, 1, 2, 3, 5, 6 };
        tap_ok(st == GRM_OK && out != NULL && list_is(out, 4, offs, items),
               "no history_order: arrival order per key; with self=false, length 3: row 5 "
               "[1,2,3], row 6 [5,6]");
        tb_ops->destroy(inst);
    }
    // keep, and history over transformed columns: item % 4 and a copy of it.
    {
        const char *kvs[] = { "history_by=user", "history_order=ts", "history_length=10",
                              "copy=item:cand", "mod=item:4",
                              "history_columns=item:hist, cand:hist_raw",
                              "keep=hist,cand,hist_raw" };
        grm_status st = run_hist(&inst, kvs, 7, &out, &apply_null);
        if (st == GRM_OK) st = tb_ops->schema(inst, &osc);
        tap_ok(st == GRM_OK && osc->nfields == 3 && strcmp(osc->fields[0].name, "hist") == 0
                   && osc->fields[1].type == GRM_COL_I64 && osc->fields[2].type == GRM_COL_LIST_I64,
               "history with keep=hist,cand,hist_raw: schema hist list_i64, cand i64, "
               "hist_raw list_i64 (the key is not kept)");
        const int64_t offs[] = { 0, 2, 5, 7, 8, 12, 13, 16, 17 };
        const int64_t raw[] = { 6, 5, 4, 2, 1, 4, 2, 6, 4, 2, 1, 3, 4, 6, 5, 7, 9 };
        int64_t m4[17];
        for (int i = 0; i < 17; i++) m4[i] = raw[i] % 4;
        tap_ok(st == GRM_OK && out != NULL && out->ncols == 3 && list_is(out, 0, offs, m4)
                   && eq_i64(out->cols[1].values, ev_item, 8, "cand")
                   && list_is(out, 2, offs, raw),
               "history of a modded column holds item %% 4; of the copy, the raw items");
        tb_ops->destroy(inst);
    }
    // Every error path of the history options.
    static const struct { const char *kv[5]; int n; const char *a, *b, *what; } bad[] = {
        { { "history_by=user", "sequence_by=user", "sequence_columns=item",
            "history_columns=item:h", "history_length=3" }, 5,
          "history_by = user and sequence_by = user are both set", NULL, "with sequence_by" },
        { { "history_columns=item:h" }, 1, "history_by is not", NULL, "no history_by" },
        { { "history_order=ts" }, 1, "history_by is not", NULL, "order without history_by" },
        { { "history_length=5" }, 1, "history_by is not", NULL, "length without history_by" },
        { { "history_by=user", "history_length=3" }, 2, "history_columns is empty", NULL,
          "no history_columns" },
        { { "history_by=user", "history_columns=item:h" }, 2,
          "history_by = user needs history_length > 0", NULL, "no history_length" },
        { { "history_by=user", "history_columns=item:h", "history_length=-1" }, 3,
          "history_length", NULL, "negative history_length" },
        { { "history_by=nope", "history_columns=item:h", "history_length=3" }, 3,
          "history_by column 'nope' is not in the input", "available: user (i64)",
          "unknown key" },
        { { "history_by=rating", "history_columns=item:h", "history_length=3" }, 3,
          "history_by column 'rating' is f32", "needs i64", "f32 key" },
        { { "history_by=user", "history_order=rating", "history_columns=item:h",
            "history_length=3" }, 4, "history_order column 'rating' is f32", NULL,
          "f32 order" },
        { { "history_by=user", "history_order=when", "history_columns=item:h",
            "history_length=3" }, 4, "history_order column 'when' is not in the input", NULL,
          "unknown order" },
        { { "history_by=user", "history_columns=item", "history_length=3" }, 3,
          "history_columns entry 'item': expected src:dst", NULL, "entry without dst" },
        { { "history_by=user", "history_columns=item:h:x", "history_length=3" }, 3,
          "history_columns entry 'item:h:x': expected src:dst", NULL, "two colons" },
        { { "history_by=user", "history_columns=nope:h", "history_length=3" }, 3,
          "history_columns column 'nope' is not in the input", NULL, "unknown src" },
        { { "history_by=user", "history_columns=item:ts", "history_length=3" }, 3,
          "history_columns entry 'item:ts': column 'ts' already exists", NULL,
          "dst is a column" },
        { { "history_by=user", "history_columns=item:h, ts:h", "history_length=3" }, 3,
          "history_columns entry 'ts:h': column 'h' already exists", NULL, "dst twice" },
        { { "history_by=user", "history_columns=item:h", "history_length=3",
            "min_length=2" }, 4, "min_length and max_length apply to sequence_by", NULL,
          "min_length" },
        { { "history_by=user", "history_columns=item:h", "history_length=3",
            "keep=h,nope" }, 4, "keep column 'nope' is not in the output",
          "h (list_i64)", "keep of an unknown column" },
    };
    grm_column c1[4] = { col_i64("user", ev_user, 5), col_i64("item", ev_item, 5),
                         col_i64("ts", ev_ts, 5), col_f32("rating", ev_rating, 5) };
    const grm_chunk in1 = chunk_of(c1, 4, 5);
    grm_field fields[4];
    const grm_schema schema = schema_of(&in1, fields);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const grm_status st = tb_create(&inst, &schema, bad[i].kv, bad[i].n);
        tap_ok(err_is(st, GRM_EINVAL, bad[i].a, bad[i].b) && inst == NULL,
               "history error (%s) is GRM_EINVAL: %s", bad[i].what, bad[i].a);
    }
    {
        char tags[] = "xyz";
        int64_t toffs[] = { 0, 1, 2, 3 };
        const grm_column c[] = {
            col_i64("user", ev_user, 3),
            { .name = "tag", .type = GRM_COL_STR, .rows = 3, .values = tags, .offsets = toffs },
        };
        const grm_chunk in = chunk_of(c, 2, 3);
        grm_field f[2];
        const grm_schema s = schema_of(&in, f);
        const char *kvs[] = { "history_by=user", "history_columns=tag:h", "history_length=3" };
        const grm_status st = tb_create(&inst, &s, kvs, 3);
        tap_ok(err_is(st, GRM_EINVAL, "history_columns column 'tag' is str", "i64 or f32"),
               "history error (str src) is GRM_EINVAL naming its type");
    }
}

/* History with str and list columns across chunks: the buffered offsets are rebased, and
 * truncate/pad of the row-wise pass apply before buffering. */
static void test_history_lists(void)
{
    int64_t user[] = { 1, 2, 1, 1, 2 };
    char tag[] = "aabcccdd";
    int64_t toffs[] = { 0, 2, 3, 6, 6, 8 };
    int64_t hv[] = { 10, 11, 12, 13, 14, 15, 16 }, hoffs[] = { 0, 3, 3, 4, 7, 7 };
    // Chunk 1: rows 0-1; chunk 2: rows 2-4 (offsets of chunk 2 start at its own 0).
    int64_t toffs2[] = { 0, 3, 3, 5 }, hoffs2[] = { 0, 1, 4, 4 };
    grm_column c1[3] = {
        col_i64("user", user, 2),
        { .name = "tag", .type = GRM_COL_STR, .rows = 2, .values = tag, .offsets = toffs },
        col_list_i64("clicks", hv, hoffs, 2),
    };
    grm_column c2[3] = {
        col_i64("user", user + 2, 3),
        { .name = "tag", .type = GRM_COL_STR, .rows = 3, .values = tag + 3, .offsets = toffs2 },
        col_list_i64("clicks", hv + 3, hoffs2, 3),
    };
    const grm_chunk in1 = chunk_of(c1, 3, 2), in2 = chunk_of(c2, 3, 3);
    grm_field fields[3];
    const grm_schema schema = schema_of(&in1, fields);
    void *inst = NULL;
    const grm_chunk *out = NULL, *o = NULL;
    const char *kvs[] = { "history_by=user", "history_columns=user:hu", "history_length=2",
                          "truncate=clicks:2", "pad=clicks:2:-1" };
    grm_status st = tb_create(&inst, &schema, kvs, 5);
    if (st == GRM_OK) st = tb_ops->apply(inst, &in1, &o);
    if (st == GRM_OK) st = tb_ops->apply(inst, &in2, &o);
    if (st == GRM_OK) st = tb_ops->flush(inst, &out);
    // tag rows: "aa", "b", "ccc", "", "dd"; clicks rows [10,11,12] [] [13] [14,15,16] []
    // -> truncate 2 (recent), pad 2 with -1: [11,12] [-1,-1] [13,-1] [15,16] [-1,-1].
    const int64_t tw[] = { 0, 2, 3, 6, 6, 8 };
    const int64_t cw[] = { 11, 12, -1, -1, 13, -1, 15, 16, -1, -1 };
    const int64_t cow[] = { 0, 2, 4, 6, 8, 10 };
    const int64_t huo[] = { 0, 1, 2, 4, 6, 8 }, huv[] = { 1, 2, 1, 1, 1, 1, 2, 2 };
    tap_ok(st == GRM_OK && out != NULL && out->rows == 5 && out->cols[1].type == GRM_COL_STR
               && eq_i64(out->cols[1].offsets, tw, 6, "tag offsets")
               && memcmp(out->cols[1].values, "aabcccdd", 8) == 0,
           "history mode buffers a str column over two chunks: offsets rebased, bytes kept");
    tap_ok(st == GRM_OK && out != NULL && list_is(out, 2, cow, cw) && list_is(out, 3, huo, huv),
           "history mode: truncate=clicks:2 / pad=clicks:2:-1 apply row-wise before "
           "buffering; history of the key itself");
    tb_ops->destroy(inst);
}

/* ---- history against the definition: random events, 1 thread against several ---- */

/* The history of row i from the definition, scanning every row: the rows r of i's key with
 * (ord[r], r) <= (ord[i], i) (strictly before when !self), ordered by (ord, r), the last L.
 * Writes their row indices to idx; returns how many. O(n * L) per row, no sort. */
static int64_t ref_history(const int64_t *key, const int64_t *ord, int64_t n, int64_t i,
                           int64_t L, int self, int64_t *idx)
{
    int64_t m = 0;
    for (int64_t r = 0; r < n; r++) {
        if (key[r] != key[i]) continue;
        const int before = ord[r] < ord[i] || (ord[r] == ord[i] && (r < i || (self && r == i)));
        if (!before) continue;
        // Insert r among the up to L latest seen so far (kept ascending by (ord, r)).
        int64_t pos = m;
        while (pos > 0 && (ord[idx[pos - 1]] > ord[r]
                           || (ord[idx[pos - 1]] == ord[r] && idx[pos - 1] > r))) {
            pos--;
        }
        if (m == L) {
            if (pos == 0) continue;   // older than all L kept
            memmove(idx, idx + 1, (size_t)(pos - 1) * sizeof(*idx));
            idx[pos - 1] = r;
        } else {
            memmove(idx + pos + 1, idx + pos, (size_t)(m - pos) * sizeof(*idx));
            idx[pos] = r;
            m++;
        }
    }
    return m;
}

/* Compare rows [0, n) step `step` of a history list column against ref_history. */
static int hist_matches(const grm_chunk *out, int j, const int64_t *key, const int64_t *ord,
                        const void *val, int is_f32, int64_t n, int64_t L, int self,
                        int64_t step)
{
    int64_t *const idx = malloc((size_t)(L + 1) * sizeof(*idx));
    int ok = out != NULL && j >= 0 && out->rows == n;
    for (int64_t i = 0; ok && i < n; i += step) {
        const int64_t m = ref_history(key, ord, n, i, L, self, idx);
        const int64_t *const o = out->cols[j].offsets;
        ok = o[i + 1] - o[i] == m;
        for (int64_t k = 0; ok && k < m; k++) {
            ok = is_f32 ? ((const float *)out->cols[j].values)[o[i] + k]
                              == ((const float *)val)[idx[k]]
                        : ((const int64_t *)out->cols[j].values)[o[i] + k]
                              == ((const int64_t *)val)[idx[k]];
        }
        if (!ok) tap_diag("row %lld: history differs from the definition (%lld values)",
                          (long long)i, (long long)m);
    }
    free(idx);
    return ok;
}

typedef struct serial_flush {
    void *inst;
    const grm_chunk *out;
    grm_status st;
} serial_flush;

static grm_status serial_flush_range(void *ctx, int64_t b, int64_t e)
{
    serial_flush *const j = ctx;
    (void)e;
    if (b == 0) j->st = tb_ops->flush(j->inst, &j->out);
    return GRM_OK;
}

static void test_history_random(void)
{
    enum { N = 20000 };
    int64_t *const user = malloc(N * sizeof(int64_t)), *const ts = malloc(N * sizeof(int64_t));
    int64_t *const item = malloc(N * sizeof(int64_t));
    float *const w = malloc(N * sizeof(float));
    uint64_t seed = 42;
    for (int64_t i = 0; i < N; i++) {
        user[i] = (int64_t)(harness_rand(&seed) % 300) - 100;   // negative keys too
        ts[i] = (int64_t)(harness_rand(&seed) % 50);             // many ties
        item[i] = (int64_t)(harness_rand(&seed) % 100000);
        w[i] = harness_randf(&seed);
    }
    const grm_column cols[] = { col_i64("user", user, N), col_i64("item", item, N),
                                col_i64("ts", ts, N), col_f32("w", w, N) };
    const grm_chunk in = chunk_of(cols, 4, N);
    grm_field fields[4];
    const grm_schema schema = schema_of(&in, fields);
    const char *kvs[] = { "history_by=user", "history_order=ts", "history_length=7",
                          "history_columns=item:hi, w:hw", "history_self=false" };
    void *multi = NULL, *single = NULL;
    const grm_chunk *out = NULL, *o = NULL;
    unsigned char *bm = NULL, *bs = NULL;

    grm_status st = tb_create(&multi, &schema, kvs, 5);
    if (st == GRM_OK) st = tb_ops->apply(multi, &in, &o);
    if (st == GRM_OK) st = tb_ops->flush(multi, &out);
    if (st != GRM_OK) tap_diag("status %d: %s", st, harness_host()->last_error());
    tap_ok(st == GRM_OK && hist_matches(out, 4, user, ts, item, 0, N, 7, 0, 37)
               && hist_matches(out, 5, user, ts, w, 1, N, 7, 0, 37),
           "random 20000 events, 300 keys, 50 timestamps (ties), length 7, self=false: "
           "every 37th row's i64 and f32 lists equal the definition");
    const size_t nm = st == GRM_OK ? blob_of(out, &bm) : 0;
    serial_flush job = { .st = GRM_EINTERNAL };
    st = tb_create(&single, &schema, kvs, 5);
    job.inst = single;
    if (st == GRM_OK) st = tb_ops->apply(single, &in, &o);
    if (st == GRM_OK) st = harness_host()->parallel_for(1, 1, serial_flush_range, &job);
    if (st == GRM_OK) st = job.st;
    const size_t ns = st == GRM_OK ? blob_of(job.out, &bs) : 0;
    tap_ok(st == GRM_OK && nm > 0 && nm == ns && memcmp(bm, bs, nm) == 0,
           "history on 1 thread and on %d threads gives identical bytes (%zu)",
           harness_host()->num_threads(), nm);
    free(bm);
    free(bs);
    tb_ops->destroy(multi);
    tb_ops->destroy(single);
    free(user);
    free(ts);
    free(item);
    free(w);
}

/* ---- MovieLens 100K: the two-label ranking rows with item histories ---- */

static void test_history_movielens(void)
{
    static const char *const what[] = {
        "ml-100k history: 100000 rows in reader order, labels rating>=4 and rating==5",
        "ml-100k history: every row's list ends with its own item and holds 1 to 200 items",
        "ml-100k history: every 97th row's list equals a scan of all rows",
    };
    char path[4096], kv_path[4200];
    const char *const data = harness_datadir();
    snprintf(path, sizeof(path), "%s/ml-100k/u.data.zst", data != NULL ? data : "");
    FILE *f = data != NULL ? fopen(path, "rb") : NULL;
    if (f == NULL) {
        for (int i = 0; i < 3; i++) {
            tap_skip("ml-100k/u.data.zst not found under GRM_DATA_DIR", "%s", what[i]);
        }
        return;
    }
    fclose(f);
    snprintf(kv_path, sizeof(kv_path), "path=%s", path);

    const grm_plugin_info *const rinfo = harness_plugin("reader-text");
    const grm_reader_ops *const rops = rinfo->ops;
    const char *rkvs[] = { kv_path, "columns=user:i64,item:i64,rating:f32,ts:i64" };
    const void *rcfg = NULL;
    void *reader = NULL, *tr = NULL;
    const grm_schema *rs = NULL;
    int64_t rows = 0, *users = NULL, *items = NULL, *tss = NULL;
    float *ratings = NULL;
    grm_status st = harness_config_try(rinfo, &rcfg, rkvs, 2);
    if (st == GRM_OK) st = rops->open(rcfg, 0, 1, &reader);
    if (st == GRM_OK) st = rops->schema(reader, &rs);
    const char *tkvs[] = { "copy=rating:top", "bucketize=rating:4, top:5", "history_by=user",
                           "history_order=ts", "history_columns=item:hist_item",
                           "history_length=200" };
    if (st == GRM_OK) st = tb_create(&tr, rs, tkvs, 6);
    while (st == GRM_OK) {
        const grm_chunk *ch = NULL, *o = (const grm_chunk *)1;
        st = rops->next(reader, &ch);
        if (st != GRM_OK || ch == NULL) break;
        const size_t nb = (size_t)(rows + ch->rows);
        users = realloc(users, nb * sizeof(int64_t));
        items = realloc(items, nb * sizeof(int64_t));
        tss = realloc(tss, nb * sizeof(int64_t));
        ratings = realloc(ratings, nb * sizeof(float));
        memcpy(users + rows, ch->cols[0].values, (size_t)ch->rows * sizeof(int64_t));
        memcpy(items + rows, ch->cols[1].values, (size_t)ch->rows * sizeof(int64_t));
        memcpy(ratings + rows, ch->cols[2].values, (size_t)ch->rows * sizeof(float));
        memcpy(tss + rows, ch->cols[3].values, (size_t)ch->rows * sizeof(int64_t));
        rows += ch->rows;
        st = tb_ops->apply(tr, ch, &o);
        if (st == GRM_OK && o != NULL) st = GRM_EINTERNAL;
    }
    const grm_chunk *out = NULL;
    if (st == GRM_OK) st = tb_ops->flush(tr, &out);
    if (st != GRM_OK) tap_diag("status %d: %s", st, harness_host()->last_error());
    const int hi = out_col(out, "hist_item"), ti = out_col(out, "top");
    int ok = st == GRM_OK && out != NULL && rows == 100000 && out->rows == rows && hi == 5
             && ti == 4 && eq_i64(out->cols[0].values, users, rows, "user")
             && eq_i64(out->cols[1].values, items, rows, "item")
             && eq_i64(out->cols[3].values, tss, rows, "ts");
    for (int64_t i = 0; ok && i < rows; i++) {
        ok = ((const int64_t *)out->cols[2].values)[i] == (ratings[i] >= 4.0f)
             && ((const int64_t *)out->cols[ti].values)[i] == (ratings[i] == 5.0f);
    }
    tap_ok(ok, "%s", what[0]);
    int ends = ok;
    for (int64_t i = 0; ends && i < rows; i++) {
        const int64_t *const o = out->cols[hi].offsets;
        const int64_t len = o[i + 1] - o[i];
        ends = len >= 1 && len <= 200
               && ((const int64_t *)out->cols[hi].values)[o[i + 1] - 1] == items[i];
        if (!ends) tap_diag("row %lld: length %lld", (long long)i, (long long)len);
    }
    tap_ok(ends, "%s", what[1]);
    tap_ok(ends && hist_matches(out, hi, users, tss, items, 0, rows, 200, 1, 97), "%s",
           what[2]);
    free(users);
    free(items);
    free(tss);
    free(ratings);
    tb_ops->destroy(tr);
    rops->close(reader);
}

int main(void)
{
    tap_plan(123);
    // Several threads for the 1-vs-N comparison (harness_host would start 2).
    grm__pool_init(4);
    tb_info = harness_plugin("transform-basic");
    tb_ops = tb_info->ops;
    const int64_t live0 = grm__alloc_live();
    test_rowwise();
    test_sequences();
    test_movielens();
    test_bucketize();
    test_cross();
    test_truncate_pad();
    test_fused();
    test_copy();
    test_history();
    test_history_lists();
    test_history_random();
    test_history_movielens();
    tb_ops->destroy(NULL);
    tap_ok(grm__alloc_live() == live0, "every instance's destroy freed its host allocations "
           "(%lld live, %lld before the tests); destroy(NULL) is accepted",
           (long long)grm__alloc_live(), (long long)live0);
    return tap_done();
}
