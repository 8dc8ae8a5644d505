/* tests/test-reader-grmcol.c - reader-grmcol: several files per dataset (directory and
 * glob), every type with values recomputed from each row's id, the reference path
 * (prefetch 0) and the libuv pool (prefetch 1 and 3), sharding (the union of ranks is
 * every row exactly once), column projection (stats.bytes equals the stored bytes of the
 * requested columns only, taken from the footers), damaged data with on_bad_chunk fail and
 * skip, every user-reachable error, allocation failures in open, and the same chunks as
 * reader-text on the same rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grmcol.h"
#include "harness.h"
#include "tap.h"

static const grm_plugin_info *cg_info;
static const grm_reader_ops *cg_ops;
static char cg_dir[4096];

/* ---- the data: every value is a function of the row id ---- */

#define NC 5

static float id_score(int64_t id) { return (float)id * 0.5f - 3.0f; }
static int64_t id_nitems(int64_t id) { return id % 4; }             // 0 = an empty list
static int64_t id_item(int64_t id, int64_t j) { return id * 10 + j; }
static int64_t id_nw(int64_t id) { return (id / 3) % 3; }
static float id_w(int64_t id, int64_t j) { return (float)(id + j) * 0.25f; }
static void id_name(int64_t id, char *out) /* empty when id % 7 == 0 */
{
    if (id % 7 == 0) out[0] = '\0';
    else snprintf(out, 32, "n%lld", (long long)id);
}

static const grm_field cg_fields[NC] = {
    { "id", GRM_COL_I64, 0 }, { "score", GRM_COL_F32, 0 }, { "name", GRM_COL_STR, 0 },
    { "items", GRM_COL_LIST_I64, 0 }, { "w", GRM_COL_LIST_F32, 0 },
};

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
}

/* Write dir/name holding rows id0 .. id0+n-1 in groups of `per`; `type0` replaces the
 * type of column id (schema-mismatch test). Returns the path (static per slot). */
static const char *write_file(const char *dir, const char *name, int64_t id0, int64_t n,
                              int64_t per, int32_t type0)
{
    static char paths[8][4200];
    static int slot;
    char *const path = paths[slot++ % 8];
    int64_t *id = malloc((size_t)(n + 1) * 8), *so = malloc((size_t)(n + 1) * 8);
    int64_t *lo = malloc((size_t)(n + 1) * 8), *wo = malloc((size_t)(n + 1) * 8);
    float *sc = malloc((size_t)(n + 1) * 4), *wv = malloc((size_t)(n * 3 + 1) * 4);
    char *sv = malloc((size_t)(n * 32 + 1));
    int64_t *lv = malloc((size_t)(n * 4 + 1) * 8);
    so[0] = lo[0] = wo[0] = 0;
    for (int64_t r = 0; r < n; r++) {
        const int64_t x = id0 + r;
        char nm[32];
        id[r] = x;
        sc[r] = id_score(x);
        id_name(x, nm);
        memcpy(sv + so[r], nm, strlen(nm));
        so[r + 1] = so[r] + (int64_t)strlen(nm);
        for (int64_t j = 0; j < id_nitems(x); j++) lv[lo[r] + j] = id_item(x, j);
        lo[r + 1] = lo[r] + id_nitems(x);
        for (int64_t j = 0; j < id_nw(x); j++) wv[wo[r] + j] = id_w(x, j);
        wo[r + 1] = wo[r] + id_nw(x);
    }
    grm_field f[NC];
    memcpy(f, cg_fields, sizeof f);
    f[0].type = type0;
    grm_column c[NC] = {
        { "id", type0, 0, n, id, NULL }, { "score", GRM_COL_F32, 0, n, sc, NULL },
        { "name", GRM_COL_STR, 0, n, sv, so }, { "items", GRM_COL_LIST_I64, 0, n, lv, lo },
        { "w", GRM_COL_LIST_F32, 0, n, wv, wo },
    };
    if (type0 == GRM_COL_F32) {
        for (int64_t r = 0; r < n; r++) sc[r] = (float)(id0 + r);
        c[0].values = sc;
    }
    void *buf;
    size_t len;
    grm__grmcol_err e;
    if (grm__grmcol_write_buffer(f, NC, c, n, per, 3, &buf, &len, &e) != GRM_OK) {
        printf("Bail out! %s\n", e.msg);
        exit(1);
    }
    snprintf(path, sizeof paths[0], "%s/%s", dir, name);
    write_bytes(path, buf, len);
    free(buf);
    free(id); free(so); free(lo); free(wo); free(sc); free(wv); free(sv); free(lv);
    return path;
}

/* ---- reading ---- */

typedef struct result {
    grm_status st;
    char msg[1024];
    int64_t rows, chunks, bad_values;
    int64_t *ids;               /* [rows] in read order */
    grm_reader_stats stats;
    int32_t nfields;
    char names[NC][16];
} result;

/* Check one row of a chunk against the values its id implies. */
static int row_ok(const grm_chunk *ch, int64_t r, int64_t *id_out)
{
    int64_t id = -1;
    for (int32_t c = 0; c < ch->ncols; c++) {
        if (strcmp(ch->cols[c].name, "id") == 0) id = ((const int64_t *)ch->cols[c].values)[r];
    }
    if (id < 0) {
        // Without the id column the score identifies the row (score = id/2 - 3).
        for (int32_t c = 0; c < ch->ncols; c++) {
            if (strcmp(ch->cols[c].name, "score") == 0) {
                id = (int64_t)((((const float *)ch->cols[c].values)[r] + 3.0f) * 2.0f);
            }
        }
    }
    *id_out = id;
    int ok = 1;
    for (int32_t c = 0; c < ch->ncols; c++) {
        const grm_column *col = &ch->cols[c];
        if (col->rows != ch->rows) ok = 0;
        if (strcmp(col->name, "score") == 0) {
            ok &= ((const float *)col->values)[r] == id_score(id);
        } else if (strcmp(col->name, "name") == 0) {
            char nm[32];
            id_name(id, nm);
            const int64_t n = col->offsets[r + 1] - col->offsets[r];
            ok &= n == (int64_t)strlen(nm)
                  && memcmp((const char *)col->values + col->offsets[r], nm, (size_t)n) == 0;
        } else if (strcmp(col->name, "items") == 0) {
            const int64_t n = col->offsets[r + 1] - col->offsets[r];
            ok &= n == id_nitems(id);
            for (int64_t j = 0; ok && j < n; j++) {
                ok &= ((const int64_t *)col->values)[col->offsets[r] + j] == id_item(id, j);
            }
        } else if (strcmp(col->name, "w") == 0) {
            const int64_t n = col->offsets[r + 1] - col->offsets[r];
            ok &= n == id_nw(id);
            for (int64_t j = 0; ok && j < n; j++) {
                ok &= ((const float *)col->values)[col->offsets[r] + j] == id_w(id, j);
            }
        }
    }
    return ok;
}

/* Open with "key=value" settings, read every chunk of shard/nshards, close. */
static result read_all(const char *const *kv, int nkv, int32_t shard, int32_t nshards)
{
    result res;
    memset(&res, 0, sizeof res);
    const void *cfg;
    res.st = harness_config_try(cg_info, &cfg, kv, nkv);
    void *inst = NULL;
    if (res.st == GRM_OK) res.st = cg_ops->open(cfg, shard, nshards, &inst);
    if (res.st == GRM_OK) {
        const grm_schema *s;
        cg_ops->schema(inst, &s);
        res.nfields = s->nfields;
        for (int32_t i = 0; i < s->nfields && i < NC; i++) {
            snprintf(res.names[i], sizeof res.names[i], "%s", s->fields[i].name);
        }
        int64_t cap = 1024;
        res.ids = malloc((size_t)cap * 8);
        for (;;) {
            const grm_chunk *ch;
            res.st = cg_ops->next(inst, &ch);
            if (res.st != GRM_OK || ch == NULL) break;
            res.chunks++;
            for (int64_t r = 0; r < ch->rows; r++) {
                int64_t id;
                if (!row_ok(ch, r, &id)) res.bad_values++;
                if (res.rows == cap) res.ids = realloc(res.ids, (size_t)(cap *= 2) * 8);
                res.ids[res.rows++] = id;
            }
        }
        if (res.st != GRM_OK) {
            snprintf(res.msg, sizeof res.msg, "%s", harness_host()->last_error());
            const grm_chunk *ch;
            const grm_status again = cg_ops->next(inst, &ch);
            if (again != res.st) res.bad_values += 1000000;   // a failed reader stays failed
        }
        cg_ops->stats(inst, &res.stats);
        cg_ops->close(inst);
    } else {
        snprintf(res.msg, sizeof res.msg, "%s", harness_host()->last_error());
    }
    return res;
}

static int ids_are(const result *r, int64_t from, int64_t to, int64_t skip0, int64_t skip1)
{
    int64_t k = 0;
    for (int64_t id = from; id < to; id++) {
        if (id >= skip0 && id < skip1) continue;
        if (k >= r->rows || r->ids[k] != id) return 0;
        k++;
    }
    return k == r->rows;
}

static int msg_has(const result *r, const char *a, const char *b, const char *c)
{
    const int ok = strstr(r->msg, a) && (!b || strstr(r->msg, b)) && (!c || strstr(r->msg, c));
    if (!ok) tap_diag("message: %s", r->msg);
    return ok;
}

/* Stored bytes of the given columns over every row group of the files. */
static int64_t stored_bytes(const char *const *paths, int npaths, const char *const *cols,
                            int ncols)
{
    int64_t total = 0;
    for (int i = 0; i < npaths; i++) {
        grm__grmcol_meta m;
        grm__grmcol_err e;
        int fd;
        if (grm__grmcol_open(paths[i], &fd, &m, &e) != GRM_OK) return -1;
        for (int64_t g = 0; g < m.ngroups; g++) {
            for (int c = 0; c < ncols; c++) {
                total += (int64_t)m.chunks[g * m.ncols + grm__grmcol_find(&m, cols[c])].csize;
            }
        }
        close(fd);
        grm__grmcol_meta_fini(&m);
    }
    return total;
}

static char kvbuf[16][4300];
static const char *kvs[16];

/* Build a key=value list: kv("path=%s", dir) ... */
static void kv_set(int i, const char *fmt, const char *arg)
{
    snprintf(kvbuf[i], sizeof kvbuf[i], fmt, arg);
    kvs[i] = kvbuf[i];
}

static void copy_file(const char *from, const char *to, long cut, long flip_at, int set8)
{
    FILE *f = fopen(from, "rb");
    static unsigned char b[1 << 20];
    long n = (long)fread(b, 1, sizeof b, f);
    fclose(f);
    if (flip_at >= 0) b[flip_at] ^= 0x10;
    if (set8) b[8] = (unsigned char)set8;
    write_bytes(to, b, (size_t)(n - cut));
}

/* ---- reader-text on the same rows ---- */

static int same_as_text(void)
{
    // user, item, rating, ts: 500 random rows as TSV and as grmcol written independently.
    uint64_t s = 99;
    const int64_t n = 500;
    int64_t *u = malloc(n * 8), *it = malloc(n * 8), *ts = malloc(n * 8);
    float *ra = malloc(n * 4);
    char tsv[4200], col[4200];
    snprintf(tsv, sizeof tsv, "%s/r.tsv", cg_dir);
    snprintf(col, sizeof col, "%s/r.grmcol", cg_dir);
    FILE *f = fopen(tsv, "w");
    for (int64_t r = 0; r < n; r++) {
        u[r] = (int64_t)(harness_rand(&s) % 50);
        it[r] = (int64_t)(harness_rand(&s) % 1000);
        ra[r] = (float)(harness_rand(&s) % 9) * 0.5f + 1.0f;
        ts[r] = 880000000 + (int64_t)(harness_rand(&s) % 10000000);
        fprintf(f, "%lld\t%lld\t%g\t%lld\n", (long long)u[r], (long long)it[r], ra[r],
                (long long)ts[r]);
    }
    fclose(f);
    const grm_field fl[4] = { { "user", GRM_COL_I64, 0 }, { "item", GRM_COL_I64, 0 },
                              { "rating", GRM_COL_F32, 0 }, { "ts", GRM_COL_I64, 0 } };
    const grm_column cl[4] = { { "user", GRM_COL_I64, 0, n, u, NULL },
                               { "item", GRM_COL_I64, 0, n, it, NULL },
                               { "rating", GRM_COL_F32, 0, n, ra, NULL },
                               { "ts", GRM_COL_I64, 0, n, ts, NULL } };
    void *buf;
    size_t len;
    grm__grmcol_err e;
    if (grm__grmcol_write_buffer(fl, 4, cl, n, 64, 3, &buf, &len, &e) != GRM_OK) return 0;
    write_bytes(col, buf, len);
    free(buf);

    const grm_plugin_info *ti = harness_plugin("reader-text");
    const grm_reader_ops *to = ti->ops;
    char p1[4300], p2[4300];
    snprintf(p1, sizeof p1, "path=%s", tsv);
    snprintf(p2, sizeof p2, "path=%s", col);
    const void *tc = harness_config(ti, p1, "columns=user:i64,item:i64,rating:f32,ts:i64",
                                    "chunk_rows=100", NULL);
    const void *gc = harness_config(cg_info, p2, "prefetch=2", NULL);
    void *a = NULL, *b = NULL;
    int ok = to->open(tc, 0, 1, &a) == GRM_OK && cg_ops->open(gc, 0, 1, &b) == GRM_OK;
    // Rows are compared one by one across chunks of different sizes (100 vs 64 rows).
    const grm_chunk *ca = NULL, *cb = NULL;
    int64_t ra_i = 0, rb_i = 0, rows = 0;
    while (ok) {
        if (ca == NULL || ra_i == ca->rows) {
            ok = to->next(a, &ca) == GRM_OK;
            ra_i = 0;
        }
        if (cb == NULL || rb_i == cb->rows) {
            ok = ok && cg_ops->next(b, &cb) == GRM_OK;
            rb_i = 0;
        }
        if (!ok || ca == NULL || cb == NULL) {
            ok = ok && ca == NULL && cb == NULL;
            break;
        }
        for (int c = 0; c < 4; c++) {
            const grm_column *x = &ca->cols[c], *y = &cb->cols[c];
            ok &= strcmp(x->name, y->name) == 0 && x->type == y->type;
            ok &= memcmp((const char *)x->values + ra_i * 8 / (x->type == GRM_COL_F32 ? 2 : 1),
                         (const char *)y->values + rb_i * 8 / (y->type == GRM_COL_F32 ? 2 : 1),
                         x->type == GRM_COL_F32 ? 4 : 8) == 0;
        }
        ra_i++;
        rb_i++;
        rows++;
    }
    to->close(a);
    cg_ops->close(b);
    free(u); free(it); free(ts); free(ra);
    return ok && rows == n;
}

int main(void)
{
    cg_info = harness_plugin("reader-grmcol");
    cg_ops = cg_info->ops;
    snprintf(cg_dir, sizeof cg_dir, "%s", harness_tmpdir("reader-grmcol"));
    tap_plan(32);

    // Three files: ids 0..99 (groups of 10), 100..129 (7), 130..249 (50); 21 row groups.
    char d1[4200];
    snprintf(d1, sizeof d1, "%s/set", cg_dir);
    mkdir(d1, 0777);
    const char *fa = write_file(d1, "a.grmcol", 0, 100, 10, GRM_COL_I64);
    const char *fb = write_file(d1, "b.grmcol", 100, 30, 7, GRM_COL_I64);
    const char *fc = write_file(d1, "c.grmcol", 130, 120, 50, GRM_COL_I64);
    write_bytes(strcat(strcpy(kvbuf[15], d1), "/notes.txt"), "not grmcol", 10);
    const char *const all[3] = { fa, fb, fc };

    result r;
    kv_set(0, "path=%s", d1);
    kv_set(1, "prefetch=%s", "0");
    r = read_all(kvs, 2, 0, 1);
    tap_ok(r.st == GRM_OK && r.nfields == 5 && !strcmp(r.names[0], "id")
           && !strcmp(r.names[4], "w"), "directory of 3 files: schema of 5 columns in file "
           "order (other files in the directory ignored)");
    tap_ok(r.st == GRM_OK && ids_are(&r, 0, 250, 0, 0) && r.bad_values == 0 && r.chunks == 18,
           "prefetch 0 (reference): 250 rows in file then row-group order, every value right "
           "(%lld chunks)", (long long)r.chunks);
    tap_ok(r.stats.rows == 250 && r.stats.bad_rows == 0, "stats: 250 rows, 0 bad rows");
    free(r.ids);
    kv_set(1, "prefetch=%s", "3");
    r = read_all(kvs, 2, 0, 1);
    tap_ok(r.st == GRM_OK && ids_are(&r, 0, 250, 0, 0) && r.bad_values == 0,
           "prefetch 3 on libuv's pool: the same 250 rows and values");
    const int64_t bytes_all = r.stats.bytes;
    free(r.ids);
    kv_set(0, "path=%s/[ab].grmcol", d1);
    kv_set(1, "prefetch=%s", "1");
    r = read_all(kvs, 2, 0, 1);
    tap_ok(r.st == GRM_OK && ids_are(&r, 0, 130, 0, 0) && r.bad_values == 0,
           "glob [ab].grmcol with prefetch 1: rows 0..129");
    free(r.ids);
    kv_set(0, "path=%s", fb);
    r = read_all(kvs, 2, 0, 1);
    tap_ok(r.st == GRM_OK && ids_are(&r, 100, 130, 0, 0) && r.bad_values == 0,
           "a single file path: rows 100..129, last row group of 2 rows");
    free(r.ids);

    // ---- sharding ----
    {
        int count[250] = { 0 };
        int ok = 1;
        int64_t total = 0;
        kv_set(0, "path=%s", d1);
        kv_set(1, "prefetch=%s", "2");
        for (int32_t sh = 0; sh < 3; sh++) {
            r = read_all(kvs, 2, sh, 3);
            ok &= r.st == GRM_OK && r.bad_values == 0;
            for (int64_t i = 0; i < r.rows; i++) {
                if (r.ids[i] >= 0 && r.ids[i] < 250) count[r.ids[i]]++;
            }
            total += r.rows;
            free(r.ids);
        }
        int once = 1;
        for (int i = 0; i < 250; i++) once &= count[i] == 1;
        tap_ok(ok && once && total == 250, "3 shards: the union is every row and each row is "
               "read by exactly one shard");
        // Shard 1 of 3 owns global row groups 1, 4, 7, ...: group 1 is ids 10..19.
        r = read_all(kvs, 2, 1, 3);
        tap_ok(r.st == GRM_OK && r.rows > 0 && r.ids[0] == 10 && r.ids[10] == 40,
               "shard 1 of 3 reads global row groups 1, 4, ... (round robin)");
        free(r.ids);
        r = read_all(kvs, 2, 5, 30);
        tap_ok(r.st == GRM_OK && r.rows == 10 && r.ids[0] == 50,
               "more shards than some files have groups: shard 5 of 30 reads group 5 only");
        free(r.ids);
    }

    // ---- projection ----
    {
        kv_set(0, "path=%s", d1);
        kv_set(1, "columns=%s", "items,id");
        kv_set(2, "prefetch=%s", "3");
        r = read_all(kvs, 3, 0, 1);
        tap_ok(r.st == GRM_OK && r.nfields == 2 && !strcmp(r.names[0], "items")
               && !strcmp(r.names[1], "id") && ids_are(&r, 0, 250, 0, 0) && r.bad_values == 0,
               "columns=items,id: two columns in that order, values right");
        const char *const want[2] = { "items", "id" };
        const char *const every[5] = { "id", "score", "name", "items", "w" };
        const int64_t exp = stored_bytes(all, 3, want, 2);
        const int64_t exp_all = stored_bytes(all, 3, every, 5);
        tap_ok(r.stats.bytes == exp && exp < exp_all && bytes_all == exp_all,
               "projection reads only the chunks of items and id: %lld bytes (footers say "
               "%lld; all columns %lld, read %lld)", (long long)r.stats.bytes, (long long)exp,
               (long long)exp_all, (long long)bytes_all);
        free(r.ids);
        kv_set(1, "columns=%s", "id,zz");
        r = read_all(kvs, 2, 0, 1);
        tap_ok(r.st == GRM_EINVAL && msg_has(&r, "has no column 'zz'", "it has: id, score",
                                             "a.grmcol"),
               "an unknown projected column is GRM_EINVAL listing the file's columns");
        kv_set(1, "columns=%s", "id,id");
        r = read_all(kvs, 2, 0, 1);
        tap_ok(r.st == GRM_EINVAL && msg_has(&r, "'id' is listed twice", NULL, NULL),
               "a column projected twice is GRM_EINVAL");
    }

    // ---- damage ----
    char d2[4200], bad[4300];
    snprintf(d2, sizeof d2, "%s/bad", cg_dir);
    mkdir(d2, 0777);
    write_file(d2, "a.grmcol", 0, 100, 10, GRM_COL_I64);
    snprintf(bad, sizeof bad, "%s/b.grmcol", d2);
    {
        grm__grmcol_meta m;
        grm__grmcol_err e;
        int fd;
        grm__grmcol_open(fb, &fd, &m, &e);
        const grm__grmcol_chunk *k = &m.chunks[1 * m.ncols + 2];   // group 1, 'name'
        copy_file(fb, bad, 0, (long)(k->offset + k->csize / 2), 0);
        close(fd);
        grm__grmcol_meta_fini(&m);
    }
    kv_set(0, "path=%s", d2);
    kv_set(1, "prefetch=%s", "2");
    r = read_all(kvs, 2, 0, 1);
    tap_ok(r.st == GRM_EFORMAT && msg_has(&r, bad, "row group 1, column 'name'",
                                          "checksum mismatch") && r.bad_values == 0,
           "a damaged chunk fails naming file, row group and column; next repeats the status");
    tap_ok(r.rows == 107, "rows before the damaged row group were returned (%lld)",
           (long long)r.rows);
    free(r.ids);
    kv_set(2, "on_bad_chunk=%s", "skip");
    r = read_all(kvs, 3, 0, 1);
    tap_ok(r.st == GRM_OK && ids_are(&r, 0, 130, 107, 114) && r.bad_values == 0,
           "on_bad_chunk = skip: the damaged row group (ids 107..113) is skipped, the rest "
           "read");
    tap_ok(r.stats.bad_rows == 7 && r.stats.rows == 123, "skip counts the 7 rows in "
           "stats.bad_rows (%lld)", (long long)r.stats.bad_rows);
    free(r.ids);
    kv_set(2, "columns=%s", "id,score,w");
    r = read_all(kvs, 3, 0, 1);
    tap_ok(r.st == GRM_OK && ids_are(&r, 0, 130, 0, 0) && r.bad_values == 0,
           "a projection without 'name' never reads the damaged chunk: all 130 rows");
    free(r.ids);

    copy_file(fb, bad, 5, -1, 0);   // truncated: the trailer is gone
    r = read_all(kvs, 2, 0, 1);
    tap_ok(r.st == GRM_EFORMAT && msg_has(&r, bad, "truncated", NULL),
           "a truncated file fails at open naming it");
    kv_set(2, "on_bad_chunk=%s", "skip");
    r = read_all(kvs, 3, 0, 1);
    tap_ok(r.st == GRM_OK && ids_are(&r, 0, 100, 0, 0), "skip: the truncated file is skipped "
           "and the other read (%lld rows)", (long long)r.rows);
    if (r.st != GRM_OK) tap_diag("%s", r.msg);
    free(r.ids);
    copy_file(fb, bad, 0, -1, 2);   // header major 2
    r = read_all(kvs, 3, 0, 1);
    tap_ok(r.st == GRM_ENOTSUP && msg_has(&r, "grmcol format 2.0 is newer than this reader",
                                          "(1.0)", bad),
           "a newer major version fails even with skip, naming file and versions");
    {
        // A chunk offset outside the data area (footer rewritten by the writer of
        // test-grmcol is not available here): a file whose footer checksum is wrong.
        grm__grmcol_meta m;
        grm__grmcol_err e;
        int fd;
        grm__grmcol_open(fb, &fd, &m, &e);
        copy_file(fb, bad, 0, (long)m.footer_offset + 20, 0);
        close(fd);
        grm__grmcol_meta_fini(&m);
        r = read_all(kvs, 2, 0, 1);
        tap_ok(r.st == GRM_EFORMAT && msg_has(&r, bad, "bad footer", NULL),
               "a damaged footer fails naming the file");
    }
    write_file(d2, "b.grmcol", 100, 30, 7, GRM_COL_F32);
    r = read_all(kvs, 2, 0, 1);
    tap_ok(r.st == GRM_EFORMAT && msg_has(&r, "column 'id' is f32 here but i64",
                                          "every file of a dataset", bad),
           "files that disagree on a column's type are refused");

    // ---- other errors ----
    kv_set(0, "path=%s/*.nothing", cg_dir);
    r = read_all(kvs, 1, 0, 1);
    tap_ok(r.st == GRM_ENOTFOUND && msg_has(&r, "matches no file", NULL, NULL),
           "a glob matching nothing is GRM_ENOTFOUND");
    char d3[4200];
    snprintf(d3, sizeof d3, "%s/empty", cg_dir);
    mkdir(d3, 0777);
    kv_set(0, "path=%s", d3);
    r = read_all(kvs, 1, 0, 1);
    tap_ok(r.st == GRM_ENOTFOUND && msg_has(&r, "holds no *.grmcol file", d3, NULL),
           "a directory without grmcol files is GRM_ENOTFOUND");
    kv_set(0, "path=%s/missing.grmcol", cg_dir);
    r = read_all(kvs, 1, 0, 1);
    tap_ok(r.st == GRM_EIO && msg_has(&r, "missing.grmcol", "cannot open", NULL),
           "a missing file is GRM_EIO naming it");
    kv_set(0, "path=%s", fb);
    kv_set(1, "prefetch=%s", "999");
    r = read_all(kvs, 2, 0, 1);
    tap_ok(r.st == GRM_EINVAL && msg_has(&r, "prefetch", NULL, NULL),
           "prefetch = 999 is refused by the declared range");
    {
        const void *cfg = harness_config(cg_info, kvs[0], NULL);
        void *inst = NULL;
        grm_status st = cg_ops->open(cfg, 3, 3, &inst);
        tap_ok(st == GRM_EINVAL && inst == NULL
               && strstr(harness_host()->last_error(), "shard 3 of 3"),
               "shard 3 of 3 is GRM_EINVAL");
        tap_ok(cg_ops->next(NULL, NULL) == GRM_EINVAL && cg_ops->stats(NULL, NULL) == GRM_EINVAL,
               "NULL arguments are GRM_EINVAL");
        cg_ops->close(NULL);

        // Every allocation open makes can fail: each failure is GRM_ENOMEM and leaks
        // nothing (ASan), until open succeeds.
        int ok = 1, n;
        const void *dcfg = harness_config(cg_info, "prefetch=2", kvs[0], NULL);
        for (n = 1; n < 200; n++) {
            grm__alloc_fail_at(n);
            st = cg_ops->open(dcfg, 0, 1, &inst);
            grm__alloc_fail_at(0);
            if (st == GRM_OK) break;
            ok &= st == GRM_ENOMEM && inst == NULL;
        }
        const grm_chunk *ch = NULL;
        ok &= st == GRM_OK && cg_ops->next(inst, &ch) == GRM_OK && ch != NULL && ch->rows == 7;
        cg_ops->close(inst);
        tap_ok(ok, "each of the %d allocations of open fails cleanly with GRM_ENOMEM", n - 1);
    }

    // ---- the same rows as reader-text ----
    tap_ok(same_as_text(), "reader-grmcol yields exactly reader-text's rows (user, item, "
           "rating, ts) for the same 500 rows, across different chunk sizes");
    {
        // Reading stops early: close with loads in flight cancels or waits for them.
        kv_set(0, "path=%s", d1);
        kv_set(1, "prefetch=%s", "8");
        const void *cfg = harness_config(cg_info, kvs[0], kvs[1], NULL);
        void *inst = NULL;
        const grm_chunk *ch = NULL;
        int ok = cg_ops->open(cfg, 0, 1, &inst) == GRM_OK
                 && cg_ops->next(inst, &ch) == GRM_OK && ch != NULL;
        cg_ops->close(inst);
        tap_ok(ok, "close after one chunk with 8 row groups in flight");
    }
    return tap_done();
}
