/* tests/test-transform-basic.c - transform-basic: hash values against XXH3_64bits computed
 * here, mod of negative inputs, keep order, sequence building on a hand-written event
 * table (two chunks, unsorted timestamps, ties) with exact lists, min_length and
 * max_length, the create errors, and MovieLens 100K end to end through reader-text when
 * GRM_DATA_DIR has it. */
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

int main(void)
{
    tap_plan(34);
    tb_info = harness_plugin("transform-basic");
    tb_ops = tb_info->ops;
    test_rowwise();
    test_sequences();
    test_movielens();
    test_bucketize();
    tb_ops->destroy(NULL);
    tap_ok(1, "destroy(NULL) is accepted");
    return tap_done();
}
