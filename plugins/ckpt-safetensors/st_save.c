/* plugins/ckpt-safetensors/st_save.c - write a checkpoint in the SafeTensors layout
 * (README.md "Layout", "Shards"). Each file is written as ckpt-grm writes its own:
 * "<file>.tmp.<pid>", fsync, rename, fsync of the directory. Data is ordered by element
 * size, largest first, so every tensor starts at a multiple of its element size (the
 * header is padded to 8 bytes); the JSON keeps the caller's order, which load follows. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY     // XXH64_state_t on the stack
#include <xxhash.h>

#include "ckpt_file.h"
#include "st.h"

/* ---- a growing string ---- */

typedef struct st_buf {
    char *s;
    size_t len, cap;
    int nomem;
} st_buf;

static void st_put(st_buf *b, const char *s, size_t n)
{
    if (b->nomem) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (p == NULL) {
            b->nomem = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void st_puts(st_buf *b, const char *s)
{
    st_put(b, s, strlen(s));
}

/* s as a JSON string: quotes, backslashes and control bytes escaped; UTF-8 as it is. */
static void st_put_json(st_buf *b, const char *s)
{
    st_put(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        const unsigned char c = (unsigned char)*p;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            st_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            st_put(b, esc, 6);
        } else {
            st_put(b, p, 1);
        }
    }
    st_put(b, "\"", 1);
}

/* ---- one file ---- */

typedef struct st_item {
    const grm_named_tensor *t;
    size_t bytes;
    int64_t index;             /* the caller's order */
    int32_t shard;             /* 0-based shard it goes to */
    uint64_t begin;            /* data_offsets[0] inside its file */
    uint64_t xxh;              /* XXH64 of its bytes (the header's xxh64:NAME) */
} st_item;

/* Where the bytes of a tensor whose data is NULL come from (save_rows). */
typedef struct st_src {
    grm_ckpt_rows_fn rows;     /* NULL: every tensor holds its data (save) */
    void *user;
    void *buf;                 /* a range of rows */
    size_t cap;
} st_src;

/* The XXH64 of every item held in memory (or of no bytes), which the header records; an
 * item read by rows gets its own as it is written (st_write_ranges), 0 until then. */
static void st_hash_whole(st_item *items, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const grm_tensor *t = &items[i].t->tensor;
        items[i].xxh = t->data == NULL && items[i].bytes > 0
            ? 0 : XXH64(items[i].bytes > 0 ? t->data : "", items[i].bytes, ST_XXH_SEED);
    }
}

static int st_by_size(const void *a, const void *b)
{
    const st_item *x = a, *y = b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    const size_t ex = grm_dtype_size(x->t->tensor.dtype), ey = grm_dtype_size(y->t->tensor.dtype);
    if (ex != ey) return ex > ey ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int st_by_index(const void *a, const void *b)
{
    const st_item *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The header of the tensors of shard s (all when s < 0) plus the metadata pairs kv [nkv]
 * (key, value, key, value, ...), padded with spaces to a multiple of 8. Items are in data
 * order with begin set; the JSON lists them in the caller's order. */
static void st_header_json(st_buf *b, st_item *items, int64_t n, int32_t s,
                           const char *const *kv, int nkv)
{
    st_puts(b, "{\"__metadata__\":{");
    for (int i = 0; i < nkv; i++) {
        if (i > 0) st_puts(b, ",");
        st_put_json(b, kv[2 * i]);
        st_puts(b, ":");
        st_put_json(b, kv[2 * i + 1]);
    }
    st_puts(b, "}");
    st_item *sorted = malloc((size_t)(n > 0 ? n : 1) * sizeof(*sorted));
    if (sorted == NULL) {
        b->nomem = 1;
        return;
    }
    memcpy(sorted, items, (size_t)n * sizeof(*sorted));
    qsort(sorted, (size_t)n, sizeof(*sorted), st_by_index);
    for (int64_t i = 0; i < n; i++) {
        const st_item *it = &sorted[i];
        if (s >= 0 && it->shard != s) continue;
        char num[64];
        st_puts(b, ",");
        st_put_json(b, it->t->name);
        st_puts(b, ":{\"dtype\":\"");
        st_puts(b, st_dtype_name(it->t->tensor.dtype));
        st_puts(b, "\",\"shape\":[");
        for (int32_t d = 0; d < it->t->tensor.ndim; d++) {
            snprintf(num, sizeof(num), "%s%lld", d ? "," : "", (long long)it->t->tensor.shape[d]);
            st_puts(b, num);
        }
        snprintf(num, sizeof(num), "],\"data_offsets\":[%llu,%llu]}",
                 (unsigned long long)it->begin, (unsigned long long)(it->begin + it->bytes));
        st_puts(b, num);
    }
    free(sorted);
    st_puts(b, "}");
    while (b->len % 8 != 0) st_puts(b, " ");
}

/* Write header hdr [hlen] and the data of shard s's items (all when s < 0; each held in
 * memory) to path atomically (ckpt_tmp), in file order; *xxh (when not NULL) the XXH64 of
 * the whole file. prefix 0 writes hdr alone, without the 8-byte length (the shards' JSON index). */
static grm_status st_write_file(const grm_host_api *host, const char *path, const char *hdr,
                                size_t hlen, const st_item *items, int64_t n, int32_t s,
                                int prefix, uint64_t *xxh)
{
    ckpt_tmp o;
    grm_status st = ckpt_tmp_open(host, "ckpt-safetensors", path, 0, &o);
    if (st != GRM_OK) return st;
    XXH64_state_t hs;
    XXH64_reset(&hs, ST_XXH_SEED);
    uint64_t at = 0;
    uint8_t len8[8];
    st_put_u64(len8, hlen);
    if (prefix) {
        ckpt_tmp_pwrite(&o, len8, 8, 0);
        XXH64_update(&hs, len8, 8);
        at = 8;
    }
    ckpt_tmp_pwrite(&o, hdr, hlen, at);
    XXH64_update(&hs, hdr, hlen);
    at += hlen;
    for (int64_t i = 0; i < n && o.err == 0; i++) {
        if ((s >= 0 && items[i].shard != s) || items[i].bytes == 0) continue;
        ckpt_tmp_pwrite(&o, items[i].t->tensor.data, items[i].bytes, at);
        XXH64_update(&hs, items[i].t->tensor.data, items[i].bytes);
        at += items[i].bytes;
    }
    st = ckpt_tmp_commit(host, &o, GRM_OK);
    if (st == GRM_OK && xxh != NULL) *xxh = XXH64_digest(&hs);
    return st;
}

/* ---- checks and the whole save ---- */

static grm_status st_check_tensor(const grm_host_api *host, const char *path,
                                  const grm_named_tensor *nt, int64_t i, int by_rows,
                                  size_t *bytes)
{
    const grm_tensor *t = &nt->tensor;
    if (nt->name == NULL || nt->name[0] == '\0')
        return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: tensor #%lld has no name", path,
                            (long long)i);
    if (!st_utf8_valid((const uint8_t *)nt->name, strlen(nt->name)))
        return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: tensor #%lld: its name is not "
                            "valid UTF-8", path, (long long)i);
    if (strcmp(nt->name, "__metadata__") == 0)
        return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: a tensor may not be named "
                            "__metadata__", path);
    if (st_dtype_name(t->dtype) == NULL)
        return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: tensor '%s': unknown dtype %d",
                            path, nt->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > GRM_TENSOR_MAX_DIMS)
        return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: tensor '%s': ndim %d outside "
                            "[0, %d]", path, nt->name, (int)t->ndim, GRM_TENSOR_MAX_DIMS);
    if (t->device.type != GRM_DEVICE_CPU)
        return host->errorf(GRM_ENOTSUP, "ckpt-safetensors: %s: tensor '%s' is not on the CPU; "
                            "copy it to the host before saving", path, nt->name);
    size_t b = grm_dtype_size(t->dtype);
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: tensor '%s': dim %d is "
                                "%lld", path, nt->name, (int)d, (long long)t->shape[d]);
        if (t->shape[d] > 0 && b > SIZE_MAX / (size_t)t->shape[d])
            return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: tensor '%s' is too large",
                                path, nt->name);
        b *= (size_t)t->shape[d];
    }
    if (b > 0 && t->data == NULL && !(by_rows && t->ndim >= 1))
        return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: tensor '%s' holds %zu bytes "
                            "but its data is NULL", path, nt->name, b);
    *bytes = b;
    return GRM_OK;
}

static int st_by_name_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The metadata of shard or file s: "format", the trainer's JSON (when given), an XXH64 per
 * tensor, and extra pairs; returned as a malloc'd key/value array, strings in *store. */
static const char **st_meta_pairs(const st_item *items, int64_t n, int32_t s, const char *meta,
                                  const char *const *extra, int nextra, int *npairs,
                                  char **store)
{
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; i++) cnt += s < 0 || items[i].shard == s;
    const char **kv = malloc((size_t)(2 * (cnt + 2 + nextra)) * sizeof(*kv));
    size_t need = 1;
    for (int64_t i = 0; i < n; i++)
        if (s < 0 || items[i].shard == s) need += strlen(items[i].t->name) + 32;
    *store = malloc(need);
    if (kv == NULL || *store == NULL) {
        free(kv);
        free(*store);
        *store = NULL;
        return NULL;
    }
    int k = 0;
    kv[2 * k] = "format", kv[2 * k + 1] = "pt", k++;    // what Python's safetensors writes
    if (meta != NULL) kv[2 * k] = ST_META_GRM, kv[2 * k + 1] = meta, k++;
    char *p = *store;
    for (int64_t i = 0; i < n; i++) {
        if (s >= 0 && items[i].shard != s) continue;
        const int w = sprintf(p, "%s%s", ST_META_XXH, items[i].t->name);
        kv[2 * k] = p;
        p += w + 1;
        sprintf(p, "%016llx", (unsigned long long)items[i].xxh);
        kv[2 * k + 1] = p;
        p += 17;
        k++;
    }
    for (int i = 0; i < nextra; i++, k++) {
        kv[2 * k] = extra[2 * i];
        kv[2 * k + 1] = extra[2 * i + 1];
    }
    *npairs = k;
    return kv;
}

/* The header of shard or file s (all tensors when s < 0) with extra metadata pairs into
 * *b (empty); GRM_ENOMEM names path. */
static grm_status st_make_header(const grm_host_api *host, const char *path, st_item *items,
                                 int64_t n, int32_t s, const char *meta,
                                 const char *const *extra, int nextra, st_buf *b)
{
    char *store = NULL;
    int npairs = 0;
    const char **kv = st_meta_pairs(items, n, s, meta, extra, nextra, &npairs, &store);
    if (kv != NULL) st_header_json(b, items, n, s, kv, npairs);
    free(kv);
    free(store);
    if (kv == NULL || b->nomem)
        return host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory for the header",
                            path);
    return GRM_OK;
}

/* 1 when shard s (all when s < 0) holds an item read by rows (its data NULL). */
static int st_has_rows(const st_item *items, int64_t n, int32_t s)
{
    for (int64_t i = 0; i < n; i++)
        if ((s < 0 || items[i].shard == s) && items[i].t->tensor.data == NULL
            && items[i].bytes > 0)
            return 1;
    return 0;
}

/* The items of shard s read by rows, written at their offsets (data0 + begin) into fd a
 * range at a time: those of as many rows form a group, read a range of all of them at a
 * time (ckpt_group_rows, as ckpt-grm's save_rows reads them), each range hashed into its
 * item's XXH64 as it is written. A store whose rows live in a file (emb-dynamic's tiered
 * tables keep a row's weight, state and metadata in one record) then reads each range of
 * its records once for the whole save. *err: a write's errno. */
static grm_status st_put_groups(const grm_host_api *host, const char *path, int fd,
                                uint64_t data0, st_item *items, int64_t n, int32_t s,
                                st_src *src, int *err)
{
    int64_t *group = malloc((size_t)(n > 0 ? n : 1) * sizeof(*group));
    XXH64_state_t *hs = malloc((size_t)(n > 0 ? n : 1) * sizeof(*hs));
    if (group == NULL || hs == NULL) {
        free(group);
        free(hs);
        return host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory", path);
    }
    for (int64_t i = 0; i < n; i++)     // -1: by rows, not yet in a group
        group[i] = (s < 0 || items[i].shard == s) && items[i].t->tensor.data == NULL
                   && items[i].bytes > 0 ? -1 : -2;
    grm_status st = GRM_OK;
    for (int64_t i = 0; i < n && st == GRM_OK && *err == 0; i++) {
        if (group[i] != -1) continue;
        const int64_t rows = items[i].t->tensor.shape[0];
        size_t all = 0;
        for (int64_t j = i; j < n; j++)
            if (group[j] == -1 && items[j].t->tensor.shape[0] == rows) {
                group[j] = i;
                all += items[j].bytes / (size_t)rows;
                XXH64_reset(&hs[j], ST_XXH_SEED);
            }
        const int64_t per = ckpt_group_rows(all, rows);
        size_t want = 0;
        for (int64_t j = i; j < n; j++)
            if (group[j] == i && (size_t)per * (items[j].bytes / (size_t)rows) > want)
                want = (size_t)per * (items[j].bytes / (size_t)rows);
        if (want > src->cap) {
            void *b = realloc(src->buf, want);
            if (b == NULL) {
                st = host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory for %lld "
                                  "rows of '%s'", path, (long long)per, items[i].t->name);
                break;
            }
            src->buf = b;
            src->cap = want;
        }
        for (int64_t r0 = 0; r0 < rows && st == GRM_OK && *err == 0; r0 += per) {
            const int64_t m = rows - r0 < per ? rows - r0 : per;
            for (int64_t j = i; j < n && st == GRM_OK && *err == 0; j++) {
                if (group[j] != i) continue;
                const size_t rb = items[j].bytes / (size_t)rows;
                if ((st = src->rows(src->user, items[j].index, r0, m, src->buf)) != GRM_OK)
                    break;
                XXH64_update(&hs[j], src->buf, (size_t)m * rb);
                *err = ckpt_pwrite_all(fd, src->buf, (size_t)m * rb,
                                     data0 + items[j].begin + (uint64_t)r0 * rb);
            }
        }
        for (int64_t j = i; j < n; j++)
            if (group[j] == i) items[j].xxh = XXH64_digest(&hs[j]);
    }
    free(group);
    free(hs);
    return st;
}

/* The XXH64 of fd's first `end` bytes, read back (a shard's, which the checkpoint's file
 * lists); 0 or an errno in *err. */
static uint64_t st_hash_back(int fd, uint64_t end, void *buf, size_t cap, int *err)
{
    XXH64_state_t hs;
    XXH64_reset(&hs, ST_XXH_SEED);
    for (uint64_t at = 0; at < end && *err == 0;) {
        const size_t want = end - at < cap ? (size_t)(end - at) : cap;
        errno = 0;
        const ssize_t got = pread(fd, buf, want, (off_t)at);
        if (got <= 0) {
            *err = errno ? errno : -1;
            break;
        }
        XXH64_update(&hs, buf, (size_t)got);
        at += (uint64_t)got;
    }
    return XXH64_digest(&hs);
}

/* Shard or file s (all when s < 0) of a save_rows, whose items read by rows are written a
 * range of all of them at a time (st_put_groups) at their offsets, not in file order: the
 * header goes first with their XXH64s at 0, the items held in memory next, then the
 * groups, then the header again with the XXH64s the groups gave (16 hex digits each, so
 * of the same length). Atomic as st_write_file. xxh: the whole file's XXH64 when not NULL
 * (a shard's), read back from the file. */
static grm_status st_write_ranges(const grm_host_api *host, const char *path, const st_buf *hdr,
                                  st_item *items, int64_t n, int32_t s, const char *meta,
                                  const char *const *extra, int nextra, st_src *src,
                                  uint64_t *xxh)
{
    ckpt_tmp o;
    grm_status st = ckpt_tmp_open(host, "ckpt-safetensors", path, 0, &o);
    if (st != GRM_OK) return st;
    st_buf again = { 0 };
    const uint64_t data0 = 8 + (uint64_t)hdr->len;
    uint64_t end = data0;
    uint8_t len8[8];
    st_put_u64(len8, hdr->len);
    ckpt_tmp_pwrite(&o, len8, 8, 0);
    ckpt_tmp_pwrite(&o, hdr->s, hdr->len, 8);
    for (int64_t i = 0; i < n && o.err == 0; i++) {
        if (s >= 0 && items[i].shard != s) continue;
        if (data0 + items[i].begin + items[i].bytes > end)
            end = data0 + items[i].begin + items[i].bytes;
        if (items[i].t->tensor.data != NULL && items[i].bytes > 0)
            ckpt_tmp_pwrite(&o, items[i].t->tensor.data, items[i].bytes, data0 + items[i].begin);
    }
    if (o.err == 0) st = st_put_groups(host, path, o.fd, data0, items, n, s, src, &o.err);
    if (st == GRM_OK && o.err == 0
        && (st = st_make_header(host, path, items, n, s, meta, extra, nextra, &again))
               == GRM_OK) {
        if (again.len != hdr->len)
            st = host->errorf(GRM_EINTERNAL, "ckpt-safetensors: %s: the header's length moved "
                              "from %zu to %zu bytes when the XXH64s were filled in", path,
                              hdr->len, again.len);
        else
            ckpt_tmp_pwrite(&o, again.s, again.len, 8);
    }
    if (st == GRM_OK && o.err == 0 && xxh != NULL) {
        if (src->cap == 0 && (src->buf = malloc((size_t)1 << 20)) != NULL) src->cap = 1u << 20;
        if (src->cap == 0) st = host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory",
                                             path);
        else *xxh = st_hash_back(o.fd, end, src->buf, src->cap, &o.err);
    }
    free(again.s);
    return ckpt_tmp_commit(host, &o, st);
}

/* Write one file of shard s (all tensors when s < 0) with extra metadata pairs; *xxh (when
 * not NULL) the whole file's XXH64. */
static grm_status st_emit(const grm_host_api *host, const char *path, st_item *items,
                          int64_t n, int32_t s, const char *meta, const char *const *extra,
                          int nextra, st_src *src, uint64_t *xxh)
{
    st_buf b = { 0 };
    grm_status st = st_make_header(host, path, items, n, s, meta, extra, nextra, &b);
    if (st == GRM_OK && src->rows != NULL && st_has_rows(items, n, s))
        st = st_write_ranges(host, path, &b, items, n, s, meta, extra, nextra, src, xxh);
    else if (st == GRM_OK)
        st = st_write_file(host, path, b.s, b.len, items, n, s, 1, xxh);
    free(b.s);
    return st;
}

/* Shards base-0000i-of-0000K.safetensors beside path, the index path.index.json (Hugging
 * Face's weight_map, for tools that load sharded models), and last the file at path, which
 * lists the shards with their XXH64: until it is renamed into place no checkpoint exists. */
static grm_status st_save_shards(const grm_host_api *host, const char *path, st_item *items,
                                 int64_t n, int32_t nshards, uint64_t total, const char *meta,
                                 st_src *src)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const int dirlen = (int)(base - path);
    size_t blen = strlen(base);
    const char *ext = ".safetensors";
    if (blen > strlen(ext) && strcmp(base + blen - strlen(ext), ext) == 0) blen -= strlen(ext);
    const size_t plen = strlen(path) + 64;
    char *shard = malloc(plen), *index = malloc(plen);
    char **pairs = calloc((size_t)nshards * 2 + 2, sizeof(*pairs));
    char **files = calloc((size_t)nshards, sizeof(*files));
    st_buf b = { 0 };
    grm_status st = GRM_OK;
    if (shard == NULL || index == NULL || pairs == NULL || files == NULL) {
        st = host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory", path);
        goto out;
    }
    for (int32_t s = 0; s < nshards; s++) {
        uint64_t xxh;
        char name[64 + 4096];
        snprintf(name, sizeof(name), "%.*s-%05d-of-%05d.safetensors", (int)blen, base, s + 1,
                 nshards);
        snprintf(shard, plen, "%.*s%s", dirlen, path, name);
        if ((st = st_emit(host, shard, items, n, s, NULL, NULL, 0, src, &xxh)) != GRM_OK)
            goto out;
        pairs[2 * s] = malloc(32);
        pairs[2 * s + 1] = malloc(strlen(name) + 24);
        files[s] = strdup(name);
        if (pairs[2 * s] == NULL || pairs[2 * s + 1] == NULL || files[s] == NULL) {
            st = host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory", path);
            goto out;
        }
        snprintf(pairs[2 * s], 32, "%s%d", ST_META_SHARD, s + 1);
        sprintf(pairs[2 * s + 1], "%s %016llx", name, (unsigned long long)xxh);
    }
    char num[32];
    snprintf(num, sizeof(num), "%d", nshards);
    pairs[2 * nshards] = strdup(ST_META_SHARDS);
    pairs[2 * nshards + 1] = strdup(num);
    if (pairs[2 * nshards] == NULL || pairs[2 * nshards + 1] == NULL) {
        st = host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory", path);
        goto out;
    }
    snprintf(num, sizeof(num), "%llu", (unsigned long long)total);
    st_puts(&b, "{\"metadata\":{\"total_size\":");
    st_puts(&b, num);
    st_puts(&b, "},\"weight_map\":{");
    for (int64_t i = 0; i < n; i++) {
        if (i > 0) st_puts(&b, ",");
        st_put_json(&b, items[i].t->name);
        st_puts(&b, ":");
        st_put_json(&b, files[items[i].shard]);
    }
    st_puts(&b, "}}\n");
    if (b.nomem) {
        st = host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory", path);
        goto out;
    }
    snprintf(index, plen, "%s.index.json", path);
    uint64_t xxh;
    if ((st = st_write_file(host, index, b.s, b.len, NULL, 0, -1, 0, &xxh)) != GRM_OK)
        goto out;
    st = st_emit(host, path, items, 0, -1, meta, (const char *const *)pairs, nshards + 1, src,
                 &xxh);
out:
    for (int32_t s = 0; pairs != NULL && s <= nshards; s++) {
        free(pairs[2 * s]);
        free(pairs[2 * s + 1]);
    }
    for (int32_t s = 0; files != NULL && s < nshards; s++) free(files[s]);
    free(pairs);
    free(files);
    free(shard);
    free(index);
    free(b.s);
    return st;
}

static grm_status st_save_from(const grm_host_api *host, int64_t shard_bytes, const char *path,
                               const grm_named_tensor *tensors, int64_t n, const char *meta,
                               st_src *src)
{
    grm_status st = GRM_OK;
    if (path == NULL || path[0] == '\0')
        return host->errorf(GRM_EINVAL, "ckpt-safetensors: save: path is empty");
    if (n < 0 || (n > 0 && tensors == NULL))
        return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: save of %lld tensors at %p",
                            path, (long long)n, (const void *)tensors);
    if (meta == NULL) meta = "{}";
    st_item *items = calloc((size_t)(n > 0 ? n : 1), sizeof(*items));
    const char **names = calloc((size_t)(n > 0 ? n : 1), sizeof(*names));
    if (items == NULL || names == NULL) {
        st = host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory", path);
        goto out;
    }
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if ((st = st_check_tensor(host, path, &tensors[i], i, src->rows != NULL,
                                  &items[i].bytes)) != GRM_OK)
            goto out;
        items[i].t = &tensors[i];
        items[i].index = i;
        names[i] = tensors[i].name;
        total += items[i].bytes;
    }
    // the header records every tensor's XXH64: a tensor read by rows gets its own as it is
    // written (st_write_ranges)
    st_hash_whole(items, n);
    qsort(names, (size_t)n, sizeof(*names), st_by_name_ptr);
    for (int64_t i = 1; i < n; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            st = host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: two tensors are named '%s'",
                              path, names[i]);
            goto out;
        }
    }
    // Shards take the tensors in the caller's order (so load visits them in that order):
    // a new one starts when the next tensor would take the current one past shard_bytes.
    // Inside each file, data goes largest element first, which keeps every tensor aligned.
    int32_t nshards = 1;
    uint64_t in_shard = 0;
    const int sharded = shard_bytes > 0 && total > (uint64_t)shard_bytes;
    for (int64_t i = 0; i < n && sharded; i++) {
        if (in_shard > 0 && in_shard + items[i].bytes > (uint64_t)shard_bytes) {
            nshards++;
            in_shard = 0;
        }
        items[i].shard = nshards - 1;
        in_shard += items[i].bytes;
    }
    qsort(items, (size_t)n, sizeof(*items), st_by_size);
    uint64_t *at = calloc((size_t)nshards, sizeof(*at));
    if (at == NULL) {
        st = host->errorf(GRM_ENOMEM, "ckpt-safetensors: %s: out of memory", path);
        goto out;
    }
    for (int64_t i = 0; i < n; i++) {
        items[i].begin = at[items[i].shard];
        at[items[i].shard] += items[i].bytes;
    }
    free(at);
    if (!sharded) {
        st = st_emit(host, path, items, n, -1, meta, NULL, 0, src, NULL);
        goto out;
    }
    st = st_save_shards(host, path, items, n, nshards, total, meta, src);
out:
    free(items);
    free(names);
    return st;
}

grm_status st_save(const grm_host_api *host, int64_t shard_bytes, const char *path,
                   const grm_named_tensor *tensors, int64_t n, const char *meta)
{
    st_src src = { 0 };
    return st_save_from(host, shard_bytes, path, tensors, n, meta, &src);
}

grm_status st_save_rows(const grm_host_api *host, int64_t shard_bytes, const char *path,
                        const grm_named_tensor *tensors, int64_t n, const char *meta,
                        grm_ckpt_rows_fn rows, void *user)
{
    if (rows == NULL)
        return host->errorf(GRM_EINVAL, "ckpt-safetensors: %s: save_rows without rows", path);
    st_src src = { rows, user, NULL, 0 };
    const grm_status st = st_save_from(host, shard_bytes, path, tensors, n, meta, &src);
    free(src.buf);
    return st;
}
