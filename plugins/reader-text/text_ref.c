/* plugins/reader-text/text_ref.c - the reference reader: split each line into fields,
 * parse them against the declared columns, append them to per-column buffers, and hand
 * out chunks of up to chunk_rows rows. Plain loops, one thread. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

static const grm_device text_cpu = { GRM_DEVICE_CPU, 0 };

/* Longest value quoted in a bad-row message. */
#define TEXT_QUOTE_MAX 64

/* Why a row is bad, written into a caller's buffer of this size. */
#define TEXT_WHY_MAX 256

static const char *const text_format_names[] = { "tsv", "csv", "ssv", "movielens" };

grm_status text_grow(const grm_host_api *host, void **p, size_t *cap, size_t need)
{
    if (need <= *cap) return GRM_OK;
    size_t ncap = *cap > 0 ? *cap : 256;
    while (ncap < need) ncap *= 2;
    void *const q = host->alloc(text_cpu, ncap, 0);
    if (q == NULL) return GRM_ENOMEM;
    if (*p != NULL) {
        memcpy(q, *p, *cap);
        host->free(text_cpu, *p);
    }
    *p = q;
    *cap = ncap;
    return GRM_OK;
}

/* ---- the declared columns ---- */

static const struct {
    const char *name;
    int32_t type;
} text_types[] = {
    { "i64", GRM_COL_I64 },
    { "f32", GRM_COL_F32 },
    { "str", GRM_COL_STR },
    { "list_i64", GRM_COL_LIST_I64 },
    { "list_f32", GRM_COL_LIST_F32 },
};

static int text_is_list(int32_t type)
{
    return type == GRM_COL_LIST_I64 || type == GRM_COL_LIST_F32;
}

grm_status text_spec_parse(text_reader *r)
{
    const grm_host_api *const host = r->host;
    const grm_str_list *const cols = &r->cfg->columns;
    const int32_t n = (int32_t)cols->n;
    grm_status st = GRM_OK;

    if (n <= 0) {
        return host->errorf(GRM_EINVAL, "reader-text: columns is empty; declare one "
                            "name:type per field, e.g. user:i64,item:i64,rating:f32");
    }
    r->spec = host->alloc(text_cpu, (size_t)n * sizeof(*r->spec), 0);
    if (r->spec == NULL) return GRM_ENOMEM;
    memset(r->spec, 0, (size_t)n * sizeof(*r->spec));
    r->nspec = n;
    r->nout = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *const entry = cols->v[i];
        const char *const colon = strchr(entry, ':');
        const size_t name_len = colon != NULL ? (size_t)(colon - entry) : strlen(entry);
        text_colspec *const c = &r->spec[i];

        c->out = -1;
        c->type = GRM_COL_STR;
        if (colon != NULL) {
            c->type = 0;
            for (size_t t = 0; t < sizeof(text_types) / sizeof(text_types[0]); t++) {
                if (strcmp(colon + 1, text_types[t].name) == 0) c->type = text_types[t].type;
            }
            if (c->type == 0) {
                return host->errorf(GRM_EINVAL, "reader-text: columns entry '%s': unknown "
                                    "type '%s'; use i64, f32, str, list_i64 or list_f32",
                                    entry, colon + 1);
            }
        }
        if (name_len == 1 && entry[0] == '_') {
            continue;  // a skipped field; its type only matters for lists
        }
        if (colon == NULL || name_len == 0) {
            return host->errorf(GRM_EINVAL, "reader-text: columns entry '%s': expected "
                                "name:type (e.g. 'user:i64'), or '_' to skip a field",
                                entry);
        }
        for (int32_t j = 0; j < i; j++) {
            if (r->spec[j].name != NULL && strlen(r->spec[j].name) == name_len
                && memcmp(r->spec[j].name, entry, name_len) == 0) {
                return host->errorf(GRM_EINVAL, "reader-text: columns entry '%s': column "
                                    "'%s' is declared twice; rename one or use '_'",
                                    entry, r->spec[j].name);
            }
        }
        c->name = host->alloc(text_cpu, name_len + 1, 0);
        if (c->name == NULL) return GRM_ENOMEM;
        memcpy(c->name, entry, name_len);
        c->name[name_len] = '\0';
        c->out = r->nout++;
    }
    for (int32_t i = 0; i + 1 < n; i++) {
        if (text_is_list(r->spec[i].type)) {
            return host->errorf(GRM_EINVAL, "reader-text: columns entry '%s': a list column "
                                "takes all remaining fields, so it must be the last entry",
                                cols->v[i]);
        }
    }
    r->list_last = text_is_list(r->spec[n - 1].type);
    if (r->nout == 0) {
        return host->errorf(GRM_EINVAL, "reader-text: columns declares no column (every "
                            "entry is '_'); name at least one, e.g. user:i64");
    }

    const size_t nout = (size_t)r->nout;
    r->fields = host->alloc(text_cpu, nout * sizeof(*r->fields), 0);
    r->bufs = host->alloc(text_cpu, nout * sizeof(*r->bufs), 0);
    r->cols = host->alloc(text_cpu, nout * sizeof(*r->cols), 0);
    // zero whatever was allocated before checking: text_spec_free walks bufs
    if (r->fields != NULL) memset(r->fields, 0, nout * sizeof(*r->fields));
    if (r->bufs != NULL) memset(r->bufs, 0, nout * sizeof(*r->bufs));
    if (r->cols != NULL) memset(r->cols, 0, nout * sizeof(*r->cols));
    if (r->fields == NULL || r->bufs == NULL || r->cols == NULL) return GRM_ENOMEM;
    for (int32_t i = 0; i < n; i++) {
        const text_colspec *const c = &r->spec[i];
        if (c->out < 0) continue;
        r->fields[c->out].name = c->name;
        r->fields[c->out].type = c->type;
        r->cols[c->out].name = c->name;
        r->cols[c->out].type = c->type;
        if (c->type == GRM_COL_STR || text_is_list(c->type)) {
            text_colbuf *const b = &r->bufs[c->out];
            void *p = NULL;
            st = text_grow(host, &p, &b->offsets_cap, sizeof(int64_t));
            if (st != GRM_OK) return st;
            b->offsets = p;
            b->offsets[0] = 0;
        }
    }
    r->schema.struct_size = (uint32_t)sizeof(grm_schema);
    r->schema.nfields = r->nout;
    r->schema.fields = r->fields;
    return GRM_OK;
}

void text_spec_free(text_reader *r)
{
    const grm_host_api *const host = r->host;
    if (r->spec != NULL) {
        for (int32_t i = 0; i < r->nspec; i++) host->free(text_cpu, r->spec[i].name);
        host->free(text_cpu, r->spec);
    }
    if (r->bufs != NULL) {
        for (int32_t i = 0; i < r->nout; i++) {
            host->free(text_cpu, r->bufs[i].values);
            host->free(text_cpu, r->bufs[i].offsets);
        }
        host->free(text_cpu, r->bufs);
    }
    host->free(text_cpu, r->fields);
    host->free(text_cpu, r->cols);
    host->free(text_cpu, r->fv);
    r->spec = NULL;
    r->bufs = NULL;
    r->fields = NULL;
    r->cols = NULL;
    r->fv = NULL;
}

/* ---- splitting a line into fields ---- */

static grm_status text_push_field(text_reader *r, size_t *n, char *p, size_t len)
{
    if ((*n + 1) * sizeof(text_field) > r->fv_cap) {
        void *q = r->fv;
        const grm_status st = text_grow(r->host, &q, &r->fv_cap, (*n + 1) * sizeof(text_field));
        if (st != GRM_OK) return st;
        r->fv = q;
    }
    r->fv[*n].p = p;
    r->fv[*n].n = len;
    (*n)++;
    return GRM_OK;
}

/* Split line [len] (NUL-terminated) into r->fv, NUL-terminating every field in place. */
static grm_status text_split(text_reader *r, char *line, size_t len, size_t *nfields)
{
    char *const end = line + len;
    char *p = line;
    grm_status st = GRM_OK;

    *nfields = 0;
    switch (r->cfg->format) {
    case TEXT_FMT_SSV:
        for (;;) {
            while (p < end && (*p == ' ' || *p == '\t')) p++;
            if (p == end) return GRM_OK;
            char *q = p;
            while (q < end && *q != ' ' && *q != '\t') q++;
            *q = '\0';
            st = text_push_field(r, nfields, p, (size_t)(q - p));
            if (st != GRM_OK) return st;
            p = q + (q < end);
        }
    case TEXT_FMT_MOVIELENS:
        for (;;) {
            char *q = p;
            while (q + 1 < end && !(q[0] == ':' && q[1] == ':')) q++;
            if (q + 1 >= end) q = end;
            *q = '\0';
            st = text_push_field(r, nfields, p, (size_t)(q - p));
            if (st != GRM_OK || q == end) return st;
            p = q + 2;
        }
    default: {
        const char sep = r->cfg->format == TEXT_FMT_CSV ? ',' : '\t';
        for (;;) {
            char *q = memchr(p, sep, (size_t)(end - p));
            if (q == NULL) q = end;
            *q = '\0';
            st = text_push_field(r, nfields, p, (size_t)(q - p));
            if (st != GRM_OK || q == end) return st;
            p = q + 1;
        }
    }
    }
}

static int text_blank(const char *line, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (line[i] != ' ' && line[i] != '\t') return 0;
    }
    return 1;
}

/* ---- parsing values ---- */

/* Outcome of parsing one value. */
enum text_parse {
    TEXT_PARSE_OK = 0,
    TEXT_PARSE_SYNTAX = 1,   /* not a number of the column's type */
    TEXT_PARSE_RANGE = 2     /* a number, but it does not fit */
};

/* Decimal integer with an optional sign; nothing else (no spaces, no "5.0"). */
static int text_parse_i64(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (n > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == n) return TEXT_PARSE_SYNTAX;
    for (size_t j = i; j < n; j++) {
        if (s[j] < '0' || s[j] > '9') return TEXT_PARSE_SYNTAX;
    }
    // Accumulate in uint64 and compare against the limit of the sign before each step,
    // so no intermediate value overflows.
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    for (; i < n; i++) {
        const uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (limit - d) / 10) return TEXT_PARSE_RANGE;
        v = v * 10 + d;
    }
    if (!neg) {
        *out = (int64_t)v;
    } else {
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    }
    return TEXT_PARSE_OK;
}

/* A finite float as strtof reads it (C locale), covering the whole field. */
static int text_parse_f32(const char *s, size_t n, float *out)
{
    if (n == 0 || isspace((unsigned char)s[0])) return TEXT_PARSE_SYNTAX;
    char *end = NULL;
    errno = 0;
    const float f = strtof(s, &end);
    if (end != s + n) return TEXT_PARSE_SYNTAX;
    if (!isfinite(f)) return errno == ERANGE ? TEXT_PARSE_RANGE : TEXT_PARSE_SYNTAX;
    *out = f;
    return TEXT_PARSE_OK;
}

/* "'value'" for messages, cut to TEXT_QUOTE_MAX bytes. */
static void text_why_value(char *why, const char *col, const text_field *f, const char *what)
{
    // The field as printable text: a NUL byte printed nothing ("'7' is not an integer" for
    // "7\0x") and an ESC reached the terminal raw (issue 25 items 13 and 14).
    char shown[4 * TEXT_QUOTE_MAX + 8];
    size_t w = 0;
    const size_t n = f->n > TEXT_QUOTE_MAX ? TEXT_QUOTE_MAX : f->n;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)f->p[i];
        if (c >= 0x20 && c != 0x7f && c != '\\') shown[w++] = (char)c;   // UTF-8 passes
        else w += (size_t)snprintf(shown + w, sizeof shown - w, "\\x%02x", c);
    }
    shown[w] = '\0';
    snprintf(why, TEXT_WHY_MAX, "column '%s': '%s%s' %s", col, shown,
             f->n > TEXT_QUOTE_MAX ? "..." : "", what);
}

/* Parse one scalar field into element `at` of values (I64 or F32). */
static int text_parse_scalar(int32_t type, const text_field *f, void *values, int64_t at,
                             const char *col, char *why)
{
    int rc;
    if (type == GRM_COL_I64 || type == GRM_COL_LIST_I64) {
        rc = text_parse_i64(f->p, f->n, (int64_t *)values + at);
        if (rc == TEXT_PARSE_SYNTAX) text_why_value(why, col, f, "is not an integer");
        if (rc == TEXT_PARSE_RANGE) text_why_value(why, col, f, "is out of range for i64");
    } else {
        rc = text_parse_f32(f->p, f->n, (float *)values + at);
        if (rc == TEXT_PARSE_SYNTAX) text_why_value(why, col, f, "is not a finite number");
        if (rc == TEXT_PARSE_RANGE) text_why_value(why, col, f, "is out of range for f32");
    }
    return rc;
}

/* Append the fields of one line as row `row` of every output column. Returns GRM_OK,
 * GRM_EFORMAT for a bad row (why set, nothing committed: STR/LIST offsets[row+1] are
 * written last), or GRM_ENOMEM. */
static grm_status text_row_add(text_reader *r, size_t nfields, int64_t row, char *why)
{
    const grm_host_api *const host = r->host;
    const int32_t nspec = r->nspec;
    const size_t nfixed = (size_t)(r->list_last ? nspec - 1 : nspec);
    const char *const fmt = text_format_names[r->cfg->format];
    grm_status st;

    if (r->list_last ? nfields <= nfixed : nfields != nfixed) {
        if (r->list_last && nfields == nfixed) {
            const char *const name = r->spec[nspec - 1].name;
            snprintf(why, TEXT_WHY_MAX, "column '%s' is an empty list (expected at least %zu "
                     "%s fields, got %zu)", name != NULL ? name : "_", nfixed + 1, fmt,
                     nfields);
        } else {
            snprintf(why, TEXT_WHY_MAX, "expected %s%zu %s fields, got %zu",
                     r->list_last ? "at least " : "", nfixed + r->list_last, fmt, nfields);
        }
        return GRM_EFORMAT;
    }
    for (int32_t i = 0; i < nspec; i++) {
        const text_colspec *const c = &r->spec[i];
        if (c->out < 0) continue;
        text_colbuf *const b = &r->bufs[c->out];
        const text_field *const f = &r->fv[i];
        switch (c->type) {
        case GRM_COL_I64:
        case GRM_COL_F32:
            st = text_grow(host, &b->values, &b->values_cap,
                           (size_t)(row + 1) * grm_coltype_size(c->type));
            if (st != GRM_OK) return st;
            if (text_parse_scalar(c->type, f, b->values, row, c->name, why) != 0) {
                return GRM_EFORMAT;
            }
            break;
        case GRM_COL_STR: {
            void *offs = b->offsets;
            st = text_grow(host, &offs, &b->offsets_cap, (size_t)(row + 2) * sizeof(int64_t));
            if (st != GRM_OK) return st;
            b->offsets = offs;
            const size_t at = (size_t)b->offsets[row];
            if (f->n == 0) break;
            st = text_grow(host, &b->values, &b->values_cap, at + f->n);
            if (st != GRM_OK) return st;
            memcpy((char *)b->values + at, f->p, f->n);
            break;
        }
        default: {  // a list: fields i .. nfields-1
            const size_t len = nfields - (size_t)i;
            void *offs = b->offsets;
            st = text_grow(host, &offs, &b->offsets_cap, (size_t)(row + 2) * sizeof(int64_t));
            if (st != GRM_OK) return st;
            b->offsets = offs;
            const int64_t at = b->offsets[row];
            st = text_grow(host, &b->values, &b->values_cap,
                           ((size_t)at + len) * grm_coltype_size(c->type));
            if (st != GRM_OK) return st;
            for (size_t k = 0; k < len; k++) {
                if (text_parse_scalar(c->type, &r->fv[(size_t)i + k], b->values,
                                      at + (int64_t)k, c->name, why) != 0) {
                    return GRM_EFORMAT;
                }
            }
            break;
        }
        }
    }
    // Commit: only now do STR and LIST columns grow by this row.
    for (int32_t i = 0; i < nspec; i++) {
        const text_colspec *const c = &r->spec[i];
        if (c->out < 0) continue;
        text_colbuf *const b = &r->bufs[c->out];
        if (c->type == GRM_COL_STR) {
            b->offsets[row + 1] = b->offsets[row] + (int64_t)r->fv[i].n;
        } else if (text_is_list(c->type)) {
            b->offsets[row + 1] = b->offsets[row] + (int64_t)(nfields - (size_t)i);
        }
    }
    return GRM_OK;
}

/* ---- chunks ---- */

/* A bad row: fail with the full message, or count it and log the first few. */
static grm_status text_bad_row(text_reader *r, const char *why)
{
    const char *const path = r->cfg->path;
    if (r->cfg->on_bad_row == TEXT_BAD_FAIL) {
        r->failed = GRM_EFORMAT;
        return r->host->errorf(GRM_EFORMAT, "reader-text: %s:%lld: %s; fix the file or set "
                               "on_bad_row = skip", path, (long long)r->line, why);
    }
    r->stats.bad_rows++;
    if (r->logged_bad < TEXT_LOG_BAD_MAX) {
        r->logged_bad++;
        r->host->log(GRM_LOG_WARN, "reader-text", "%s:%lld: skipping bad row: %s%s", path,
                     (long long)r->line, why,
                     r->logged_bad == TEXT_LOG_BAD_MAX ? " (further bad rows are counted, "
                     "not logged)" : "");
    }
    return GRM_OK;
}

grm_status text_reader_next(text_reader *r, const grm_chunk **chunk)
{
    char why[TEXT_WHY_MAX];
    int64_t rows = 0;
    grm_status st = GRM_OK;

    *chunk = NULL;
    if (r->failed != GRM_OK) {
        return r->host->errorf((grm_status)r->failed, "reader-text: %s: an earlier error "
                               "stopped this reader; close it and open a new one",
                               r->cfg->path);
    }
    while (!r->done && rows < r->cfg->chunk_rows) {
        char *line = NULL;
        size_t len = 0;
        st = text_src_line(&r->src, &line, &len);
        if (st != GRM_OK) goto fail;
        if (line == NULL) {
            r->done = 1;
            if (r->stats.bad_rows > 0) {
                r->host->log(GRM_LOG_INFO, "reader-text", "%s: skipped %lld bad rows of "
                             "shard %d/%d", r->cfg->path, (long long)r->stats.bad_rows,
                             r->shard, r->nshards);
            }
            break;
        }
        r->line++;
        if ((r->line == 1 && r->cfg->header) || text_blank(line, len)) continue;
        // Block k of chunk_rows data rows belongs to shard k % nshards, and a chunk never
        // spans two blocks: the shards' chunks taken round-robin are the file's order.
        const int64_t data_row = r->data_row++;
        const int block_end = (data_row + 1) % r->cfg->chunk_rows == 0;
        if ((data_row / r->cfg->chunk_rows) % r->nshards != r->shard) continue;
        size_t nfields = 0;
        st = text_split(r, line, len, &nfields);
        if (st != GRM_OK) goto fail;
        st = text_row_add(r, nfields, rows, why);
        if (st == GRM_EFORMAT) {
            st = text_bad_row(r, why);
            if (st != GRM_OK) return st;
            if (block_end && rows > 0) break;
            continue;
        }
        if (st != GRM_OK) goto fail;
        rows++;
        if (block_end) break;
    }
    r->stats.bytes = r->src.bytes;
    if (rows == 0) return GRM_OK;
    r->stats.rows += rows;
    for (int32_t i = 0; i < r->nout; i++) {
        r->cols[i].rows = rows;
        r->cols[i].values = r->bufs[i].values;
        r->cols[i].offsets = r->bufs[i].offsets;
    }
    r->chunk.struct_size = (uint32_t)sizeof(grm_chunk);
    r->chunk.ncols = r->nout;
    r->chunk.rows = rows;
    r->chunk.cols = r->cols;
    *chunk = &r->chunk;
    return GRM_OK;

fail:
    r->failed = st;
    return st;
}
