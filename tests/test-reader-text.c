/* tests/test-reader-text.c - reader-text: every format with hand-written files and exact
 * expected values, list columns, header/CRLF/blank lines/no final newline, zstd input
 * (compressed here with ZSTD_compress), sharding, chunking, bad rows (fail and skip),
 * and every user-reachable error: missing file, corrupt and truncated zstd, bad columns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "harness.h"
#include "tap.h"

static const grm_plugin_info *rt_info;
static const grm_reader_ops *rt_ops;
static char rt_dir[4096];

/* ---- files ---- */

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
}

/* rt_dir/name holding text; returns the path (static buffer per slot). */
static const char *write_text(const char *name, const char *text)
{
    static char paths[8][4200];
    static int slot;
    char *const p = paths[slot++ % 8];
    snprintf(p, sizeof(paths[0]), "%s/%s", rt_dir, name);
    write_bytes(p, text, strlen(text));
    return p;
}

/* rt_dir/name holding text compressed by libzstd (level 3). */
static const char *write_zst(const char *name, const char *text, size_t keep_bytes)
{
    static char p[4200];
    const size_t n = strlen(text);
    const size_t cap = ZSTD_compressBound(n);
    char *const z = malloc(cap);
    const size_t zn = ZSTD_compress(z, cap, text, n, 3);
    if (ZSTD_isError(zn)) {
        printf("Bail out! ZSTD_compress: %s\n", ZSTD_getErrorName(zn));
        exit(1);
    }
    snprintf(p, sizeof(p), "%s/%s", rt_dir, name);
    write_bytes(p, z, keep_bytes > 0 && keep_bytes < zn ? keep_bytes : zn);
    free(z);
    return p;
}

/* ---- reading everything into plain arrays ---- */

typedef struct col_acc {
    int32_t type;
    int64_t *i64;       /* I64 values or LIST_I64 values */
    float *f32;         /* F32 values or LIST_F32 values */
    int64_t nvals;
    int64_t *offs;      /* [rows+1] for STR and LIST_* (rebased across chunks) */
    char *bytes;        /* STR bytes */
    int64_t nbytes;
} col_acc;

typedef struct table {
    int32_t ncols;
    int64_t rows, chunks, max_chunk;
    col_acc c[8];
} table;

static void table_free(table *t)
{
    for (int i = 0; i < 8; i++) {
        free(t->c[i].i64);
        free(t->c[i].f32);
        free(t->c[i].offs);
        free(t->c[i].bytes);
    }
    memset(t, 0, sizeof(*t));
}

static void acc_chunk(table *t, const grm_chunk *ch)
{
    t->ncols = ch->ncols;
    for (int32_t j = 0; j < ch->ncols && j < 8; j++) {
        const grm_column *const c = &ch->cols[j];
        col_acc *const a = &t->c[j];
        a->type = c->type;
        const int64_t r = ch->rows;
        if (c->type == GRM_COL_I64 || c->type == GRM_COL_F32) {
            a->i64 = realloc(a->i64, (size_t)(a->nvals + r) * sizeof(int64_t) + 8);
            a->f32 = realloc(a->f32, (size_t)(a->nvals + r) * sizeof(float) + 8);
            for (int64_t i = 0; i < r; i++) {
                if (c->type == GRM_COL_I64) a->i64[a->nvals + i] = ((int64_t *)c->values)[i];
                else a->f32[a->nvals + i] = ((float *)c->values)[i];
            }
            a->nvals += r;
            continue;
        }
        a->offs = realloc(a->offs, (size_t)(t->rows + r + 1) * sizeof(int64_t));
        if (t->rows == 0) a->offs[0] = 0;
        const int64_t base = a->offs[t->rows];
        for (int64_t i = 0; i < r; i++) a->offs[t->rows + i + 1] = base + c->offsets[i + 1];
        const int64_t nv = c->offsets[r];
        if (c->type == GRM_COL_STR) {
            a->bytes = realloc(a->bytes, (size_t)(a->nbytes + nv) + 1);
            if (nv > 0) memcpy(a->bytes + a->nbytes, c->values, (size_t)nv);
            a->nbytes += nv;
        } else {
            a->i64 = realloc(a->i64, (size_t)(a->nvals + nv) * sizeof(int64_t) + 8);
            a->f32 = realloc(a->f32, (size_t)(a->nvals + nv) * sizeof(float) + 8);
            for (int64_t i = 0; i < nv; i++) {
                if (c->type == GRM_COL_LIST_I64) {
                    a->i64[a->nvals + i] = ((int64_t *)c->values)[i];
                } else {
                    a->f32[a->nvals + i] = ((float *)c->values)[i];
                }
            }
            a->nvals += nv;
        }
    }
    t->rows += ch->rows;
    t->chunks++;
    if (ch->rows > t->max_chunk) t->max_chunk = ch->rows;
}

/* Open with "key=value" strings; the status of config filling or open. */
static grm_status rt_open(void **inst, int32_t shard, int32_t nshards, const char *const *kvs,
                          int n)
{
    const void *cfg = NULL;
    *inst = NULL;
    grm_status st = harness_config_try(rt_info, &cfg, kvs, n);
    if (st != GRM_OK) {
        tap_diag("config: %s", grm_last_error());
        return st;
    }
    return rt_ops->open(cfg, shard, nshards, inst);
}

/* Read the whole shard into t; returns the first failure. */
static grm_status rt_read(void *inst, table *t)
{
    memset(t, 0, sizeof(*t));
    for (;;) {
        const grm_chunk *ch = NULL;
        const grm_status st = rt_ops->next(inst, &ch);
        if (st != GRM_OK) return st;
        if (ch == NULL) return GRM_OK;
        acc_chunk(t, ch);
    }
}

/* Open + read + close in one go; the status of whichever step failed. */
static grm_status rt_slurp(table *t, int32_t shard, int32_t nshards, const char *const *kvs,
                           int n, grm_reader_stats *stats)
{
    void *inst = NULL;
    memset(t, 0, sizeof(*t));
    grm_status st = rt_open(&inst, shard, nshards, kvs, n);
    if (st == GRM_OK) st = rt_read(inst, t);
    if (st == GRM_OK && stats != NULL) st = rt_ops->stats(inst, stats);
    if (st != GRM_OK) tap_diag("status %d: %s", st, harness_host()->last_error());
    rt_ops->close(inst);
    return st;
}

static int eq_i64(const int64_t *got, const int64_t *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            tap_diag("index %lld: expected %lld, got %lld", (long long)i, (long long)want[i],
                     (long long)got[i]);
            return 0;
        }
    }
    return 1;
}

static int eq_f32(const float *got, const float *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            tap_diag("index %lld: expected %.9g, got %.9g", (long long)i, (double)want[i],
                     (double)got[i]);
            return 0;
        }
    }
    return 1;
}

/* Status equals want and the last error contains every needle. */
static int err_is(grm_status st, grm_status want, const char *n1, const char *n2)
{
    const char *const msg = harness_host()->last_error();
    const int ok = st == want && strstr(msg, n1) != NULL && (n2 == NULL || strstr(msg, n2));
    if (!ok) tap_diag("status %d (want %d), message: %s", st, want, msg);
    return ok;
}

/* ---- cases ---- */

static void test_formats(void)
{
    table t;
    char kv_path[4300];

    // tsv with the schema
    snprintf(kv_path, sizeof(kv_path), "path=%s",
             write_text("a.tsv", "1\t10\t4.5\t100\n2\t20\t3\t200\n-7\t30\t0.25\t-1\n"));
    {
        const char *kvs[] = { kv_path, "columns=user:i64,item:i64,rating:f32,ts:i64" };
        void *inst = NULL;
        const grm_schema *sc = NULL;
        grm_status st = rt_open(&inst, 0, 1, kvs, 2);
        if (st == GRM_OK) st = rt_ops->schema(inst, &sc);
        tap_ok(st == GRM_OK && sc->nfields == 4 && strcmp(sc->fields[0].name, "user") == 0
                   && sc->fields[0].type == GRM_COL_I64 && strcmp(sc->fields[2].name, "rating") == 0
                   && sc->fields[2].type == GRM_COL_F32 && strcmp(sc->fields[3].name, "ts") == 0,
               "tsv schema lists user:i64 item:i64 rating:f32 ts:i64 in order");
        rt_ops->close(inst);
        st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        const int64_t user[] = { 1, 2, -7 }, item[] = { 10, 20, 30 }, ts[] = { 100, 200, -1 };
        const float rating[] = { 4.5f, 3.0f, 0.25f };
        tap_ok(st == GRM_OK && t.rows == 3 && eq_i64(t.c[0].i64, user, 3)
                   && eq_i64(t.c[1].i64, item, 3) && eq_f32(t.c[2].f32, rating, 3)
                   && eq_i64(t.c[3].i64, ts, 3),
               "tsv: 3 rows with exact i64 and f32 values (negative ids too)");
        table_free(&t);
    }

    // csv with str columns, one of them empty
    snprintf(kv_path, sizeof(kv_path), "path=%s", write_text("b.csv", "a,1,x\nbb,-2,\n"));
    {
        const char *kvs[] = { kv_path, "format=csv", "columns=name:str,v:i64,tag:str" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, NULL);
        const int64_t v[] = { 1, -2 }, noffs[] = { 0, 1, 3 }, toffs[] = { 0, 1, 1 };
        tap_ok(st == GRM_OK && t.rows == 2 && t.c[0].type == GRM_COL_STR
                   && eq_i64(t.c[0].offs, noffs, 3) && memcmp(t.c[0].bytes, "abb", 3) == 0
                   && eq_i64(t.c[1].i64, v, 2) && eq_i64(t.c[2].offs, toffs, 3)
                   && t.c[2].bytes[0] == 'x',
               "csv: str columns 'a','bb' and 'x','' with offsets [0,1,3] and [0,1,1]");
        table_free(&t);
    }

    // ssv: runs of spaces and tabs, leading and trailing ones; '_' skips a field
    snprintf(kv_path, sizeof(kv_path), "path=%s",
             write_text("c.ssv", "  1   2  3\n4 5\t6.5  \n"));
    {
        const char *kvs[] = { kv_path, "format=ssv", "columns=a:i64,_,c:f32" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, NULL);
        const int64_t a[] = { 1, 4 };
        const float c[] = { 3.0f, 6.5f };
        tap_ok(st == GRM_OK && t.rows == 2 && t.ncols == 2 && eq_i64(t.c[0].i64, a, 2)
                   && eq_f32(t.c[1].f32, c, 2),
               "ssv: runs of blanks split fields, '_' field skipped (2 output columns)");
        table_free(&t);
    }

    // MovieLens ml-1m ratings.dat
    snprintf(kv_path, sizeof(kv_path), "path=%s",
             write_text("ratings.dat", "1::1193::5::978300760\n1::661::3::978302109\n"));
    {
        const char *kvs[] = { kv_path, "format=movielens",
                              "columns=user:i64,item:i64,rating:f32,ts:i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, NULL);
        const int64_t user[] = { 1, 1 }, item[] = { 1193, 661 }, ts[] = { 978300760, 978302109 };
        const float rating[] = { 5.0f, 3.0f };
        tap_ok(st == GRM_OK && t.rows == 2 && eq_i64(t.c[0].i64, user, 2)
                   && eq_i64(t.c[1].i64, item, 2) && eq_f32(t.c[2].f32, rating, 2)
                   && eq_i64(t.c[3].i64, ts, 2),
               "movielens '::' rows 1::1193::5::978300760 parse exactly");
        table_free(&t);
    }

    // Amazon Beauty shape: user then a list of items
    snprintf(kv_path, sizeof(kv_path), "path=%s",
             write_text("beauty.txt", "1 1 2 3 4 5\n2 6 7 8 9 10 4 11\n3 7\n"));
    {
        const char *kvs[] = { kv_path, "format=ssv", "columns=user:i64,items:list_i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, NULL);
        const int64_t user[] = { 1, 2, 3 }, offs[] = { 0, 5, 12, 13 };
        const int64_t items[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 4, 11, 7 };
        tap_ok(st == GRM_OK && t.rows == 3 && t.c[1].type == GRM_COL_LIST_I64
                   && eq_i64(t.c[0].i64, user, 3) && eq_i64(t.c[1].offs, offs, 4)
                   && eq_i64(t.c[1].i64, items, 13),
               "ssv list_i64 column takes the rest of each line (lengths 5, 7, 1)");
        table_free(&t);
    }

    // the same list file two rows per chunk: offsets restart at 0 in every chunk
    snprintf(kv_path, sizeof(kv_path), "path=%s",
             write_text("beauty2.txt", "1 1 2 3 4 5\n2 6 7 8 9 10 4 11\n3 7\n4 8 9\n"));
    {
        const char *kvs[] = { kv_path, "format=ssv", "columns=user:i64,items:list_i64",
                              "chunk_rows=2" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 4, NULL);
        const int64_t offs[] = { 0, 5, 12, 13, 15 };
        const int64_t items[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 4, 11, 7, 8, 9 };
        tap_ok(st == GRM_OK && t.rows == 4 && t.chunks == 2 && eq_i64(t.c[1].offs, offs, 5)
                   && eq_i64(t.c[1].i64, items, 15),
               "list column over 2 chunks of 2 rows: per-chunk offsets and values exact");
        table_free(&t);
    }

    // list_f32 in tsv
    snprintf(kv_path, sizeof(kv_path), "path=%s", write_text("f.tsv", "k\t0.5\t-1.5\t2\n"));
    {
        const char *kvs[] = { kv_path, "columns=key:str,w:list_f32" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        const float w[] = { 0.5f, -1.5f, 2.0f };
        tap_ok(st == GRM_OK && t.rows == 1 && t.c[1].type == GRM_COL_LIST_F32
                   && t.c[1].offs[1] == 3 && eq_f32(t.c[1].f32, w, 3),
               "tsv list_f32 column [0.5, -1.5, 2]");
        table_free(&t);
    }

    // header, CRLF, blank lines, last line without newline
    snprintf(kv_path, sizeof(kv_path), "path=%s",
             write_text("h.tsv", "user\titem\r\n1\t2\r\n\r\n   \n3\t4\r\n5\t6"));
    {
        const char *kvs[] = { kv_path, "header=true", "columns=user:i64,item:i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, NULL);
        const int64_t u[] = { 1, 3, 5 }, it[] = { 2, 4, 6 };
        tap_ok(st == GRM_OK && t.rows == 3 && eq_i64(t.c[0].i64, u, 3)
                   && eq_i64(t.c[1].i64, it, 3),
               "header skipped, \\r\\n stripped, blank lines skipped, unterminated last line "
               "read");
        table_free(&t);
    }
}

/* "i\t(i*7919)%1000\t(i%5)+0.5\n" for i in [0, n). */
static char *make_rows(int n)
{
    char *const s = malloc((size_t)n * 40 + 1);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        at += (size_t)sprintf(s + at, "%d\t%d\t%d.5\n", i, (i * 7919) % 1000, i % 5);
    }
    s[at] = '\0';
    return s;
}

static int check_rows(const table *t, int n)
{
    if (t->rows != n) {
        tap_diag("rows: expected %d, got %lld", n, (long long)t->rows);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (t->c[0].i64[i] != i || t->c[1].i64[i] != (i * 7919) % 1000
            || t->c[2].f32[i] != (float)(i % 5) + 0.5f) {
            tap_diag("row %d differs", i);
            return 0;
        }
    }
    return 1;
}

static void test_zstd_chunks_shards(void)
{
    table t;
    char kv_path[4300];
    grm_reader_stats stats;
    char *const rows = make_rows(1000);

    // zstd input
    snprintf(kv_path, sizeof(kv_path), "path=%s", write_zst("rows.tsv.zst", rows, 0));
    {
        const char *kvs[] = { kv_path, "columns=id:i64,item:i64,w:f32" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, &stats);
        tap_ok(st == GRM_OK && check_rows(&t, 1000) && stats.rows == 1000
                   && stats.bad_rows == 0,
               "zstd input (ZSTD_compress in the test): 1000 rows with exact values");
        table_free(&t);
    }

    // several chunks
    snprintf(kv_path, sizeof(kv_path), "path=%s", write_text("rows.tsv", rows));
    {
        const char *kvs[] = { kv_path, "columns=id:i64,item:i64,w:f32", "chunk_rows=7" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, &stats);
        tap_ok(st == GRM_OK && check_rows(&t, 1000) && t.chunks == 143 && t.max_chunk == 7,
               "chunk_rows=7 over 1000 rows: 143 chunks of at most 7, values exact");
        tap_ok(st == GRM_OK && stats.bytes == (int64_t)strlen(rows),
               "stats.bytes equals the file size (%zu)", strlen(rows));
        table_free(&t);
    }

    // sharding three ways: every row exactly once, row i in shard (i / 50) % 3, in blocks
    // of chunk_rows = 50 rows, one block per chunk
    {
        const char *kvs[] = { kv_path, "columns=id:i64,item:i64,w:f32", "chunk_rows=50" };
        int seen[1000] = { 0 };
        int ok = 1;
        for (int32_t s = 0; s < 3; s++) {
            const grm_status st = rt_slurp(&t, s, 3, kvs, 3, NULL);
            ok = ok && st == GRM_OK;
            for (int64_t i = 0; ok && i < t.rows; i++) {
                const int64_t id = t.c[0].i64[i];
                if (id < 0 || id >= 1000 || (id / 50) % 3 != s) {
                    ok = 0;
                } else {
                    seen[id]++;
                }
            }
            ok = ok && t.max_chunk == 50 && t.chunks == (s < 2 ? 7 : 6);   // 20 blocks
            table_free(&t);
        }
        for (int i = 0; i < 1000; i++) ok = ok && seen[i] == 1;
        tap_ok(ok, "3 shards cover each of 1000 rows exactly once, row i in shard (i / 50) "
                   "%% 3, one block of 50 per chunk");
    }
    free(rows);

    // a line of 200000 list items (~1.3 MB): no fixed buffer truncates it
    {
        char *const big = malloc(200000 * 8 + 64);
        size_t at = (size_t)sprintf(big, "42");
        for (int i = 0; i < 200000; i++) at += (size_t)sprintf(big + at, " %d", i * 3);
        strcpy(big + at, "\n7 1\n");
        snprintf(kv_path, sizeof(kv_path), "path=%s", write_text("long.txt", big));
        free(big);
        const char *kvs[] = { kv_path, "format=ssv", "columns=user:i64,items:list_i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, NULL);
        int ok = st == GRM_OK && t.rows == 2 && t.c[0].i64[0] == 42 && t.c[0].i64[1] == 7
                 && t.c[1].offs[1] == 200000 && t.c[1].offs[2] == 200001;
        for (int i = 0; ok && i < 200000; i++) ok = t.c[1].i64[i] == (int64_t)i * 3;
        tap_ok(ok && t.c[1].i64[200000] == 1, "a 1.3 MB line with 200000 list items is read whole");
        table_free(&t);
    }
}

static void test_bad_rows(void)
{
    table t;
    char kv_path[4300];
    const char *path;

    path = write_text("bad1.tsv", "1\t2\t3\n4\t5\t6\n7\tabc\t9\n");
    snprintf(kv_path, sizeof(kv_path), "path=%s", path);
    {
        const char *kvs[] = { kv_path, "columns=user:i64,item:i64,ts:i64" };
        char where[4300];
        snprintf(where, sizeof(where), "%s:3:", path);
        grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        tap_ok(err_is(st, GRM_EFORMAT, where, "column 'item': 'abc' is not an integer"),
               "on_bad_row=fail: GRM_EFORMAT naming PATH:3 and column 'item': 'abc'");
        table_free(&t);
    }

    // a failed reader stays failed
    {
        const char *kvs[] = { kv_path, "columns=user:i64,item:i64,ts:i64" };
        void *inst = NULL;
        const grm_chunk *ch = NULL;
        grm_status st = rt_open(&inst, 0, 1, kvs, 2);
        if (st == GRM_OK) st = rt_ops->next(inst, &ch);
        if (st == GRM_EFORMAT) st = rt_ops->next(inst, &ch);
        tap_ok(err_is(st, GRM_EFORMAT, "an earlier error stopped this reader", NULL)
                   && ch == NULL,
               "next after a bad-row failure repeats GRM_EFORMAT and returns no chunk");
        rt_ops->close(inst);
    }

    path = write_text("bad2.tsv", "1\t2\t3\n4\t5\n");
    snprintf(kv_path, sizeof(kv_path), "path=%s", path);
    {
        const char *kvs[] = { kv_path, "columns=user:i64,item:i64,ts:i64" };
        char where[4300];
        snprintf(where, sizeof(where), "%s:2:", path);
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        tap_ok(err_is(st, GRM_EFORMAT, where, "expected 3 tsv fields, got 2"),
               "wrong field count: GRM_EFORMAT 'PATH:2: expected 3 tsv fields, got 2'");
        table_free(&t);
    }

    path = write_text("bad3.tsv", "1\t99999999999999999999\n");
    snprintf(kv_path, sizeof(kv_path), "path=%s", path);
    {
        const char *kvs[] = { kv_path, "columns=user:i64,item:i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        tap_ok(err_is(st, GRM_EFORMAT, ":1: column 'item'", "is out of range for i64"),
               "integer overflow 99999999999999999999 is a bad row (out of range for i64)");
        table_free(&t);
    }

    path = write_text("bad4.txt", "1 2 3\n2\n");
    snprintf(kv_path, sizeof(kv_path), "path=%s", path);
    {
        const char *kvs[] = { kv_path, "format=ssv", "columns=user:i64,items:list_i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, NULL);
        tap_ok(err_is(st, GRM_EFORMAT, ":2: column 'items' is an empty list", "on_bad_row"),
               "an empty list is a bad row naming the column and the fix");
        table_free(&t);
    }

    // skip: three bad rows (letters, too few fields, overflow), seven good ones
    path = write_text("bad5.tsv", "0\t1\n1\t1\nx\t1\n2\t1\n3\n4\t1\n5\t1\n"
                                  "6\t1\n9223372036854775808\t1\n-9223372036854775808\t1\n");
    snprintf(kv_path, sizeof(kv_path), "path=%s", path);
    {
        const char *kvs[] = { kv_path, "columns=a:i64,b:i64", "on_bad_row=skip" };
        grm_reader_stats stats;
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, &stats);
        const int64_t a[] = { 0, 1, 2, 4, 5, 6, INT64_MIN };
        tap_ok(st == GRM_OK && t.rows == 7 && eq_i64(t.c[0].i64, a, 7) && stats.rows == 7
                   && stats.bad_rows == 3,
               "on_bad_row=skip: 7 good rows kept (INT64_MIN parses), stats.bad_rows == 3");
        table_free(&t);
    }
}

static void test_errors(void)
{
    table t;
    char kv_path[4300];
    char path[4200];

    snprintf(path, sizeof(path), "%s/no-such-file.tsv", rt_dir);
    snprintf(kv_path, sizeof(kv_path), "path=%s", path);
    {
        const char *kvs[] = { kv_path, "columns=a:i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        tap_ok(err_is(st, GRM_EIO, path, "No such file or directory"),
               "missing file: GRM_EIO naming the path and strerror");
    }

    snprintf(kv_path, sizeof(kv_path), "path=%s",
             write_text("garbage.tsv.zst", "this is not a zstd frame at all\n"));
    {
        const char *kvs[] = { kv_path, "columns=a:i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        const char junk[] = "this is not a zstd frame at all\n";
        char dst[64];
        const char *const zerr = ZSTD_getErrorName(ZSTD_decompress(dst, sizeof(dst), junk,
                                                                   sizeof(junk) - 1));
        tap_ok(err_is(st, GRM_EFORMAT, "garbage.tsv.zst: corrupt zstd stream: ", zerr),
               "corrupt .zst: GRM_EFORMAT naming the path and ZSTD_getErrorName");
        table_free(&t);
    }

    {
        char *const rows = make_rows(2000);
        snprintf(kv_path, sizeof(kv_path), "path=%s", write_zst("cut.tsv.zst", rows, 500));
        free(rows);
        const char *kvs[] = { kv_path, "columns=id:i64,item:i64,w:f32" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        tap_ok(err_is(st, GRM_EFORMAT, "cut.tsv.zst: truncated zstd stream", NULL),
               "truncated .zst (first 500 bytes): GRM_EFORMAT 'truncated zstd stream'");
        table_free(&t);
    }

    snprintf(kv_path, sizeof(kv_path), "path=%s", write_text("ok.tsv", "1\t2\n"));
    {
        const char *kvs[] = { kv_path, "columns=a:i64,b:int" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        tap_ok(err_is(st, GRM_EINVAL, "columns entry 'b:int': unknown type 'int'", "i64"),
               "columns type 'int' is GRM_EINVAL listing the valid types");
    }
    {
        const char *kvs[] = { kv_path, "columns=a:list_i64,b:i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        tap_ok(err_is(st, GRM_EINVAL, "'a:list_i64'", "must be the last entry"),
               "a list column before the last entry is GRM_EINVAL");
    }
    {
        const char *kvs[] = { kv_path, "columns=a:i64,a:f32" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        tap_ok(err_is(st, GRM_EINVAL, "column 'a' is declared twice", NULL),
               "a column declared twice is GRM_EINVAL");
    }
    {
        const char *kvs[] = { kv_path, "columns=a,b:i64" };
        const grm_status st = rt_slurp(&t, 0, 1, kvs, 2, NULL);
        tap_ok(err_is(st, GRM_EINVAL, "columns entry 'a': expected name:type", NULL),
               "a columns entry without a type is GRM_EINVAL");
    }
    {
        const char *kvs[] = { kv_path, "columns=a:i64" };
        void *inst = (void *)1;
        const grm_status st = rt_open(&inst, 3, 3, kvs, 2);
        tap_ok(err_is(st, GRM_EINVAL, "shard 3 of 3 is out of range", NULL) && inst == NULL,
               "open with shard >= nshards is GRM_EINVAL and leaves *inst NULL");
    }
    {
        const char *kvs[] = { kv_path, "columns=a:i64", "chunk_rows=0" };
        const void *cfg = NULL;
        const grm_status st = harness_config_try(rt_info, &cfg, kvs, 3);
        tap_ok(st == GRM_EINVAL && strstr(harness_host()->last_error(), "chunk_rows") != NULL,
               "chunk_rows=0 is refused by the declared range (GRM_EINVAL naming chunk_rows)");
    }
    rt_ops->close(NULL);
}

/* Amazon Beauty (S3-Rec preprocessing), when GRM_DATA_DIR has it. */
static void test_beauty(void)
{
    const char *const what = "Beauty.txt.zst: 22363 users, 198502 items, lengths 5..204, "
                             "12101 distinct items";
    char path[4096], kv_path[4200];
    const char *const data = harness_datadir();
    snprintf(path, sizeof(path), "%s/amazon-beauty/Beauty.txt.zst", data != NULL ? data : "");
    FILE *f = data != NULL ? fopen(path, "rb") : NULL;
    if (f == NULL) {
        tap_skip("amazon-beauty/Beauty.txt.zst not found under GRM_DATA_DIR", "%s", what);
        return;
    }
    fclose(f);
    snprintf(kv_path, sizeof(kv_path), "path=%s", path);
    const char *kvs[] = { kv_path, "format=ssv", "columns=user:i64,items:list_i64" };
    table t;
    const grm_status st = rt_slurp(&t, 0, 1, kvs, 3, NULL);
    int64_t minlen = INT64_MAX, maxlen = 0, distinct = 0;
    static unsigned char seen[1 << 20];
    for (int64_t i = 0; st == GRM_OK && i < t.rows; i++) {
        const int64_t len = t.c[1].offs[i + 1] - t.c[1].offs[i];
        minlen = len < minlen ? len : minlen;
        maxlen = len > maxlen ? len : maxlen;
    }
    for (int64_t i = 0; st == GRM_OK && i < t.c[1].nvals; i++) {
        const int64_t id = t.c[1].i64[i];
        if (id >= 0 && id < (1 << 20) && !seen[id]) {
            seen[id] = 1;
            distinct++;
        }
    }
    tap_ok(st == GRM_OK && t.rows == 22363 && t.c[1].nvals == 198502 && minlen == 5
               && maxlen == 204 && distinct == 12101,
           "%s (got %lld, %lld, %lld..%lld, %lld)", what, (long long)t.rows,
           (long long)t.c[1].nvals, (long long)minlen, (long long)maxlen, (long long)distinct);
    table_free(&t);
}

int main(void)
{
    tap_plan(31);
    rt_info = harness_plugin("reader-text");
    rt_ops = rt_info->ops;
    snprintf(rt_dir, sizeof(rt_dir), "%s", harness_tmpdir("reader-text"));
    const int64_t live0 = grm__alloc_live();
    test_formats();
    test_zstd_chunks_shards();
    test_bad_rows();
    test_errors();
    tap_ok(grm__alloc_live() == live0, "every reader's close freed its host allocations "
           "(%lld live, %lld before); close(NULL) is accepted", (long long)grm__alloc_live(),
           (long long)live0);
    test_beauty();
    return tap_done();
}
