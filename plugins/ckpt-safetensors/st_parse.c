/* plugins/ckpt-safetensors/st_parse.c - validate a SafeTensors header (README.md "Layout",
 * "Checks"): the 8-byte length against the file, then a strict JSON reader for the one
 * shape a header may have, then every tensor's dtype, shape and data_offsets against its
 * byte count, the data's bounds and its neighbours. Nothing here reads tensor data or any
 * byte outside the image it is given; tests/fuzz/fuzz_safetensors.c drives it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st.h"

static const struct {
    const char *name;
    int32_t dtype;
} st_dtypes[] = {
    { "F32", GRM_DTYPE_F32 }, { "F16", GRM_DTYPE_F16 }, { "BF16", GRM_DTYPE_BF16 },
    { "I32", GRM_DTYPE_I32 }, { "I64", GRM_DTYPE_I64 }, { "U8", GRM_DTYPE_U8 },
};
#define ST_NDTYPES (sizeof(st_dtypes) / sizeof(st_dtypes[0]))

const char *st_dtype_name(int32_t dtype)
{
    for (size_t i = 0; i < ST_NDTYPES; i++)
        if (st_dtypes[i].dtype == dtype) return st_dtypes[i].name;
    return NULL;
}

int st_utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        const uint8_t c = s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) n = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) n = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) n = 3, cp = c & 0x07;
        else return 0;
        if (len - i <= n) return 0;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF))
            || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += n + 1;
    }
    return 1;
}

/* ---- the JSON reader ---- */

typedef struct st_json {
    const uint8_t *s;          /* the header text [len] */
    size_t len, pos;
    char *arena;               /* [len + 1]: decoded strings, each shorter than its source */
    size_t used;
    char what[256];            /* the first failure */
} st_json;

#define ST_FAIL(j, ...)                                                                  \
    do {                                                                                 \
        if ((j)->what[0] == '\0') snprintf((j)->what, sizeof((j)->what), __VA_ARGS__);   \
        return -1;                                                                       \
    } while (0)

static void st_ws(st_json *j)
{
    while (j->pos < j->len && (j->s[j->pos] == ' ' || j->s[j->pos] == '\t'
                               || j->s[j->pos] == '\n' || j->s[j->pos] == '\r'))
        j->pos++;
}

/* Consume c after optional white space. */
static int st_expect(st_json *j, char c, const char *where)
{
    st_ws(j);
    if (j->pos >= j->len)
        ST_FAIL(j, "the header ends inside %s (expected '%c')", where, c);
    if (j->s[j->pos] != (uint8_t)c)
        ST_FAIL(j, "expected '%c' in %s at byte %zu, found '%c'", c, where, 8 + j->pos,
                j->s[j->pos] >= 0x20 && j->s[j->pos] < 0x7f ? j->s[j->pos] : '?');
    j->pos++;
    return 0;
}

/* 1 and consume c when it is next (after white space), else 0. */
static int st_peek(st_json *j, char c)
{
    st_ws(j);
    if (j->pos < j->len && j->s[j->pos] == (uint8_t)c) {
        j->pos++;
        return 1;
    }
    return 0;
}

static int st_hex4(st_json *j, uint32_t *v)
{
    if (j->len - j->pos < 4) ST_FAIL(j, "the header ends inside a \\u escape");
    *v = 0;
    for (int k = 0; k < 4; k++) {
        const uint8_t c = j->s[j->pos++];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) ST_FAIL(j, "bad \\u escape at byte %zu", 8 + j->pos - 1);
        *v = (*v << 4) | (uint32_t)d;
    }
    return 0;
}

/* A string into the arena; *out is its NUL-terminated UTF-8 text, *n its bytes. */
static int st_string(st_json *j, const char **out, size_t *n, const char *where)
{
    if (st_expect(j, '"', where) != 0) return -1;
    const size_t start = 8 + j->pos - 1;
    char *o = j->arena + j->used;
    size_t k = 0;
    for (;;) {
        if (j->pos >= j->len) ST_FAIL(j, "the header ends inside the string at byte %zu", start);
        const uint8_t c = j->s[j->pos++];
        if (c == '"') break;
        if (c < 0x20) ST_FAIL(j, "control byte 0x%02x inside the string at byte %zu", c, start);
        if (c != '\\') {
            o[k++] = (char)c;
            continue;
        }
        if (j->pos >= j->len) ST_FAIL(j, "the header ends inside the string at byte %zu", start);
        const uint8_t e = j->s[j->pos++];
        uint32_t cp;
        switch (e) {
        case '"': case '\\': case '/': o[k++] = (char)e; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'u': break;
        default: ST_FAIL(j, "bad escape '\\%c' in the string at byte %zu",
                         e >= 0x20 && e < 0x7f ? e : '?', start);
        }
        if (st_hex4(j, &cp) != 0) return -1;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            ST_FAIL(j, "lone low surrogate \\u%04x in the string at byte %zu", cp, start);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (j->len - j->pos < 2 || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u')
                ST_FAIL(j, "lone high surrogate \\u%04x in the string at byte %zu", cp, start);
            j->pos += 2;
            if (st_hex4(j, &lo) != 0) return -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                ST_FAIL(j, "bad surrogate pair in the string at byte %zu", start);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        // Each escape is 6 (or 12) source bytes and makes at most 4: the arena holds it.
        if (cp < 0x80) {
            o[k++] = (char)cp;
        } else if (cp < 0x800) {
            o[k++] = (char)(0xC0 | (cp >> 6));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            o[k++] = (char)(0xE0 | (cp >> 12));
            o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        } else {
            o[k++] = (char)(0xF0 | (cp >> 18));
            o[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    if (!st_utf8_valid((const uint8_t *)o, k))
        ST_FAIL(j, "the string at byte %zu is not valid UTF-8", start);
    if (memchr(o, '\0', k) != NULL)
        ST_FAIL(j, "the string at byte %zu holds a NUL character", start);
    o[k] = '\0';
    j->used += k + 1;
    *out = o;
    *n = k;
    return 0;
}

/* A non-negative integer below 2^63. */
static int st_uint(st_json *j, uint64_t *v, const char *where)
{
    st_ws(j);
    const size_t start = j->pos;
    *v = 0;
    while (j->pos < j->len && j->s[j->pos] >= '0' && j->s[j->pos] <= '9') {
        const uint64_t d = (uint64_t)(j->s[j->pos] - '0');
        if (*v > (((uint64_t)INT64_MAX) - d) / 10)
            ST_FAIL(j, "%s at byte %zu does not fit in 63 bits", where, 8 + start);
        *v = *v * 10 + d;
        j->pos++;
    }
    if (j->pos == start)
        ST_FAIL(j, "%s at byte %zu is not a non-negative integer", where, 8 + start);
    if (j->pos - start > 1 && j->s[start] == '0')
        ST_FAIL(j, "%s at byte %zu has a leading zero", where, 8 + start);
    if (j->pos < j->len && (j->s[j->pos] == '.' || j->s[j->pos] == 'e' || j->s[j->pos] == 'E'))
        ST_FAIL(j, "%s at byte %zu is not an integer", where, 8 + start);
    return 0;
}

/* [u, u, ...] of at most max values; *n how many. */
static int st_uints(st_json *j, uint64_t *v, int max, int *n, const char *where)
{
    *n = 0;
    if (st_expect(j, '[', where) != 0) return -1;
    if (st_peek(j, ']')) return 0;
    do {
        if (*n == max) ST_FAIL(j, "%s has more than %d values", where, max);
        if (st_uint(j, &v[*n], where) != 0) return -1;
        (*n)++;
    } while (st_peek(j, ','));
    return st_expect(j, ']', where);
}

/* ---- the header's shape ---- */

typedef struct st_build {
    st_entry *e;
    int64_t n, cap;
    st_kv *kv;
    int64_t nkv, capkv;
    int nomem;
} st_build;

static int st_meta_object(st_json *j, st_build *b)
{
    if (st_expect(j, '{', "__metadata__") != 0) return -1;
    if (st_peek(j, '}')) return 0;
    do {
        const char *k, *v;
        size_t kn, vn;
        if (st_string(j, &k, &kn, "a __metadata__ key") != 0) return -1;
        if (st_expect(j, ':', "__metadata__") != 0) return -1;
        st_ws(j);
        if (j->pos < j->len && j->s[j->pos] != '"')
            ST_FAIL(j, "__metadata__ '%.64s' at byte %zu is not a string (safetensors "
                    "metadata maps strings to strings)", k, 8 + j->pos);
        if (st_string(j, &v, &vn, "a __metadata__ value") != 0) return -1;
        if (b->nkv == b->capkv) {
            const int64_t cap = b->capkv ? 2 * b->capkv : 16;
            st_kv *p = realloc(b->kv, (size_t)cap * sizeof(*p));
            if (p == NULL) {
                b->nomem = 1;
                return -1;
            }
            b->kv = p;
            b->capkv = cap;
        }
        b->kv[b->nkv++] = (st_kv){ k, v };
    } while (st_peek(j, ','));
    return st_expect(j, '}', "__metadata__");
}

static int st_tensor_object(st_json *j, st_entry *e)
{
    const char *nm = e->name;
    int have_dtype = 0, have_shape = 0, have_off = 0;
    if (st_expect(j, '{', "a tensor entry") != 0) return -1;
    do {
        const char *k;
        size_t kn;
        if (st_string(j, &k, &kn, "a tensor entry") != 0) return -1;
        if (st_expect(j, ':', "a tensor entry") != 0) return -1;
        if (strcmp(k, "dtype") == 0 && !have_dtype) {
            const char *v;
            size_t vn;
            if (st_string(j, &v, &vn, "dtype") != 0) return -1;
            e->dtype = 0;
            for (size_t i = 0; i < ST_NDTYPES; i++)
                if (strcmp(v, st_dtypes[i].name) == 0) e->dtype = st_dtypes[i].dtype;
            if (e->dtype == 0)
                ST_FAIL(j, "tensor '%.64s': dtype '%.16s' is not one grm reads (F32, F16, "
                        "BF16, I32, I64, U8)", nm, v);
            have_dtype = 1;
        } else if (strcmp(k, "shape") == 0 && !have_shape) {
            uint64_t v[GRM_TENSOR_MAX_DIMS];
            int n;
            if (st_uints(j, v, GRM_TENSOR_MAX_DIMS, &n, "shape") != 0) {
                if (strstr(j->what, "more than") != NULL) {
                    snprintf(j->what, sizeof(j->what), "tensor '%.64s' has more than %d "
                             "dims, the most grm holds", nm, GRM_TENSOR_MAX_DIMS);
                }
                return -1;
            }
            e->ndim = n;
            for (int d = 0; d < GRM_TENSOR_MAX_DIMS; d++)
                e->shape[d] = d < n ? (int64_t)v[d] : 1;
            have_shape = 1;
        } else if (strcmp(k, "data_offsets") == 0 && !have_off) {
            uint64_t v[2];
            int n;
            if (st_uints(j, v, 2, &n, "data_offsets") != 0) return -1;
            if (n != 2) ST_FAIL(j, "tensor '%.64s': data_offsets holds %d values, not 2", nm, n);
            e->begin = v[0];
            e->end = v[1];
            have_off = 1;
        } else if (!strcmp(k, "dtype") || !strcmp(k, "shape") || !strcmp(k, "data_offsets")) {
            ST_FAIL(j, "tensor '%.64s': '%s' given twice", nm, k);
        } else {
            ST_FAIL(j, "tensor '%.64s': unknown field '%.32s' (expected dtype, shape, "
                    "data_offsets)", nm, k);
        }
    } while (st_peek(j, ','));
    if (st_expect(j, '}', "a tensor entry") != 0) return -1;
    if (!have_dtype || !have_shape || !have_off)
        ST_FAIL(j, "tensor '%.64s' lacks %s", nm, !have_dtype ? "a dtype"
                : !have_shape ? "a shape" : "data_offsets");
    return 0;
}

static int st_top(st_json *j, st_build *b)
{
    int have_meta = 0;
    if (st_expect(j, '{', "the header") != 0) return -1;
    if (!st_peek(j, '}')) {
        do {
            const char *k;
            size_t kn;
            if (st_string(j, &k, &kn, "the header") != 0) return -1;
            if (st_expect(j, ':', "the header") != 0) return -1;
            if (strcmp(k, "__metadata__") == 0) {
                if (have_meta) ST_FAIL(j, "__metadata__ given twice");
                have_meta = 1;
                if (st_meta_object(j, b) != 0) return -1;
                continue;
            }
            if (kn == 0) ST_FAIL(j, "a tensor has an empty name");
            if (b->n == b->cap) {
                const int64_t cap = b->cap ? 2 * b->cap : 16;
                st_entry *p = realloc(b->e, (size_t)cap * sizeof(*p));
                if (p == NULL) {
                    b->nomem = 1;
                    return -1;
                }
                b->e = p;
                b->cap = cap;
            }
            st_entry *e = &b->e[b->n++];
            memset(e, 0, sizeof(*e));
            e->name = k;
            e->order = b->n - 1;
            if (st_tensor_object(j, e) != 0) return -1;
        } while (st_peek(j, ','));
        if (st_expect(j, '}', "the header") != 0) return -1;
    }
    st_ws(j);    // writers pad the header with spaces to a multiple of 8
    if (j->pos != j->len)
        ST_FAIL(j, "unexpected bytes after the header's JSON object at byte %zu", 8 + j->pos);
    return 0;
}

/* ---- validation ---- */

static int st_by_name(const void *a, const void *b)
{
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int st_by_begin(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int st_by_order(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int st_kv_by_key(const void *a, const void *b)
{
    return strcmp(((const st_kv *)a)->key, ((const st_kv *)b)->key);
}

/* The checks after the JSON has been read: what [cap] says what failed. */
static int st_check(st_header *h, char *what, size_t cap)
{
    // Duplicate names and keys: sorted copies make each an adjacent pair.
    for (int pass = 0; pass < 2; pass++) {
        const int64_t n = pass == 0 ? h->n : h->nmeta;
        if (n < 2) continue;
        const size_t sz = pass == 0 ? sizeof(st_entry) : sizeof(st_kv);
        void *copy = malloc((size_t)n * sz);
        if (copy == NULL) return -2;
        memcpy(copy, pass == 0 ? (void *)h->entries : (void *)h->meta, (size_t)n * sz);
        qsort(copy, (size_t)n, sz, pass == 0 ? st_by_name : st_kv_by_key);
        int dup = 0;
        for (int64_t i = 1; i < n && !dup; i++) {
            const char *a = pass == 0 ? ((st_entry *)copy)[i - 1].name
                                      : ((st_kv *)copy)[i - 1].key;
            const char *b = pass == 0 ? ((st_entry *)copy)[i].name : ((st_kv *)copy)[i].key;
            if (strcmp(a, b) == 0) {
                snprintf(what, cap, "duplicate %s '%.64s'", pass == 0 ? "tensor name"
                         : "__metadata__ key", a);
                dup = 1;
            }
        }
        free(copy);
        if (dup) return -1;
    }
    for (int64_t i = 0; i < h->n; i++) {
        st_entry *e = &h->entries[i];
        uint64_t want = grm_dtype_size(e->dtype);
        for (int d = 0; d < e->ndim; d++) {
            const uint64_t s = (uint64_t)e->shape[d];
            if (s > 0 && want > UINT64_MAX / s) {
                snprintf(what, cap, "tensor '%.64s': its shape overflows 64 bits", e->name);
                return -1;
            }
            want *= s;
        }
        if (e->begin > e->end) {
            snprintf(what, cap, "tensor '%.64s': data_offsets [%llu, %llu] end before they "
                     "begin", e->name, (unsigned long long)e->begin,
                     (unsigned long long)e->end);
            return -1;
        }
        if (e->end - e->begin != want) {
            snprintf(what, cap, "tensor '%.64s': dtype %s and shape hold %llu bytes, its "
                     "data_offsets [%llu, %llu] give %llu", e->name, st_dtype_name(e->dtype),
                     (unsigned long long)want, (unsigned long long)e->begin,
                     (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
            return -1;
        }
        if (e->end > h->data_len) {
            snprintf(what, cap, "tensor '%.64s': data_offsets [%llu, %llu] are out of bounds "
                     "(the data holds %llu bytes)", e->name, (unsigned long long)e->begin,
                     (unsigned long long)e->end, (unsigned long long)h->data_len);
            return -1;
        }
    }
    // File order; the data must be covered exactly once: no overlap, no hole, nothing after.
    if (h->n > 1) qsort(h->entries, (size_t)h->n, sizeof(st_entry), st_by_begin);
    uint64_t at = 0;
    for (int64_t i = 0; i < h->n; i++) {
        const st_entry *e = &h->entries[i];
        if (e->begin < at) {
            snprintf(what, cap, "tensors '%.64s' and '%.64s' overlap (bytes [%llu, %llu) and "
                     "[%llu, %llu))", h->entries[i - 1].name, e->name,
                     (unsigned long long)h->entries[i - 1].begin, (unsigned long long)at,
                     (unsigned long long)e->begin, (unsigned long long)e->end);
            return -1;
        }
        if (e->begin > at) {
            snprintf(what, cap, "a hole of %llu bytes before tensor '%.64s' (data_offsets "
                     "must cover the data without gaps)", (unsigned long long)(e->begin - at),
                     e->name);
            return -1;
        }
        at = e->end;
    }
    if (at != h->data_len) {
        snprintf(what, cap, "%llu bytes of data after the last tensor (the tensors cover "
                 "%llu of %llu)", (unsigned long long)(h->data_len - at),
                 (unsigned long long)at, (unsigned long long)h->data_len);
        return -1;
    }
    // Back to the header's order: the saver's, which load keeps.
    if (h->n > 1) qsort(h->entries, (size_t)h->n, sizeof(st_entry), st_by_order);
    // Recorded checksums: each must name a tensor, and be 16 hex digits.
    const size_t plen = strlen(ST_META_XXH);
    for (int64_t i = 0; i < h->nmeta; i++) {
        const st_kv *kv = &h->meta[i];
        if (strncmp(kv->key, ST_META_XXH, plen) != 0) continue;
        st_entry key = { .name = kv->key + plen };
        st_entry *e = NULL;
        for (int64_t k = 0; k < h->n && e == NULL; k++)
            if (st_by_name(&key, &h->entries[k]) == 0) e = &h->entries[k];
        char *end = NULL;
        const unsigned long long v = strtoull(kv->value, &end, 16);
        if (e == NULL || strlen(kv->value) != 16 || end == NULL || *end != '\0') {
            snprintf(what, cap, "__metadata__ '%.64s' = '%.32s' is not the XXH64 of a tensor "
                     "in this file", kv->key, kv->value);
            return -1;
        }
        e->xxh64 = v;
        e->has_xxh = 1;
    }
    return 0;
}

void st_header_fini(st_header *h)
{
    if (h == NULL) return;
    free(h->entries);
    free(h->meta);
    free(h->arena);
    memset(h, 0, sizeof(*h));
}

const char *st_meta_get(const st_header *h, const char *key)
{
    for (int64_t i = 0; i < h->nmeta; i++)
        if (strcmp(h->meta[i].key, key) == 0) return h->meta[i].value;
    return NULL;
}

grm_status st_parse(const grm_host_api *host, const char *path, const uint8_t *d, size_t size,
                    st_header *h)
{
    memset(h, 0, sizeof(*h));
    if (size < 8)
        return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: truncated: %zu bytes, a "
                            "safetensors file starts with an 8-byte header length", path, size);
    const uint64_t hl = st_get_u64(d);
    if (hl > size - 8)
        return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: header length %llu runs past "
                            "the end of the file (%zu bytes); truncated or not a safetensors "
                            "file", path, (unsigned long long)hl, size);
    if (hl > ST_MAX_HEADER)
        return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: header length %llu is above "
                            "the %u bytes safetensors allows", path, (unsigned long long)hl,
                            ST_MAX_HEADER);
    if (hl < 2)
        return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: header of %llu bytes cannot "
                            "hold a JSON object", path, (unsigned long long)hl);

    st_json j = { .s = d + 8, .len = (size_t)hl };
    st_build b = { 0 };
    j.arena = malloc((size_t)hl + 1);
    if (j.arena == NULL)
        return host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory for a header of "
                            "%llu bytes", path, (unsigned long long)hl);
    h->data_start = 8 + hl;
    h->data_len = size - 8 - hl;
    const int r = st_top(&j, &b);
    h->entries = b.e;
    h->n = b.n;
    h->meta = b.kv;
    h->nmeta = b.nkv;
    h->arena = j.arena;
    if (b.nomem) {
        st_header_fini(h);
        return host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory reading the "
                            "header", path);
    }
    if (r != 0) {
        st_header_fini(h);
        return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: corrupt header: %s", path,
                            j.what);
    }
    char what[512];
    const int c = st_check(h, what, sizeof(what));
    if (c == -2) {
        st_header_fini(h);
        return host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory", path);
    }
    if (c != 0) {
        st_header_fini(h);
        return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: corrupt header: %s", path,
                            what);
    }
    return GRM_OK;
}
