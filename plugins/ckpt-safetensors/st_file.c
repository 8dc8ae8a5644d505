/* plugins/ckpt-safetensors/st_file.c - map and verify a checkpoint (README.md "Checks"):
 * the file at the path, and when its metadata lists shards, each shard, whose whole-file
 * XXH64 must match the one recorded beside its name (so shards of two saves never mix).
 * Every header is validated by st_parse and every recorded tensor XXH64 checked before
 * st_open returns, so load visits nothing from a file that fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "ckpt_file.h"
#include "st.h"

void st_close(st_file *f)
{
    if (f == NULL) return;
    for (int32_t i = 0; i < f->nparts; i++) {
        ckpt_unmap(f->parts[i].data, f->parts[i].size);
        st_header_fini(&f->parts[i].h);
        free(f->parts[i].path);
    }
    free(f->parts);
    const char *path = f->path;
    memset(f, 0, sizeof(*f));
    f->path = path;
}

/* Map and validate part p (its path already set); check each recorded tensor XXH64. */
static grm_status st_open_part(const grm_host_api *host, st_part *p, int release)
{
    grm_status st = ckpt_map(host, "ckpt-safetensors", p->path, &p->data, &p->size);
    if (st != GRM_OK) return st;
    if ((st = st_parse(host, p->path, p->data, p->size, &p->h)) != GRM_OK) return st;
    for (int64_t i = 0; i < p->h.n; i++) {
        const st_entry *e = &p->h.entries[i];
        if (!e->has_xxh) continue;
        const uint64_t got = XXH64(p->data + p->h.data_start + e->begin,
                                   (size_t)(e->end - e->begin), ST_XXH_SEED);
        if (release)
            ckpt_unneed(p->data, (size_t)(p->h.data_start + e->begin),
                        (size_t)(e->end - e->begin));
        if (got != e->xxh64)
            return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: checksum mismatch in "
                                "tensor '%.64s' (XXH64 of its data is %016llx, the header "
                                "says %016llx)", p->path, e->name, (unsigned long long)got,
                                (unsigned long long)e->xxh64);
    }
    return GRM_OK;
}

static int st_by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The shards listed in part 0's metadata: "grm_shard:<i>" = "<file name> <XXH64>". */
static grm_status st_open_shards(const grm_host_api *host, st_file *f, const char *count)
{
    const char *path = f->path;
    char *end = NULL;
    const long k = strtol(count, &end, 10);
    if (end == count || *end != '\0' || k < 1 || k > 99999)
        return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: corrupt header: %s = '%.32s' "
                            "is not a shard count", path, ST_META_SHARDS, count);
    if (f->parts[0].h.n != 0)
        return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: corrupt header: it lists "
                            "shards and holds tensors itself", path);
    st_part *parts = realloc(f->parts, (size_t)(k + 1) * sizeof(*parts));
    if (parts == NULL) return host->errorf(GRM_ENOMEM, "ckpt-safetensors: out of memory");
    f->parts = parts;
    const char *slash = strrchr(path, '/');
    const int dirlen = slash == NULL ? 0 : (int)(slash - path + 1);
    for (long i = 1; i <= k; i++) {
        char key[64], name[512];
        unsigned long long want;
        snprintf(key, sizeof(key), "%s%ld", ST_META_SHARD, i);
        const char *v = st_meta_get(&f->parts[0].h, key);
        int used = 0;
        if (v == NULL || sscanf(v, "%511s %16llx%n", name, &want, &used) != 2
            || v[used] != '\0' || strchr(name, '/') != NULL)
            return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: corrupt header: %s is "
                                "missing or not '<file name> <XXH64>'", path, key);
        st_part *p = &f->parts[f->nparts];
        memset(p, 0, sizeof(*p));
        const size_t len = (size_t)dirlen + strlen(name) + 1;
        if ((p->path = malloc(len)) == NULL)
            return host->errorf(GRM_ENOMEM, "ckpt-safetensors: out of memory");
        snprintf(p->path, len, "%.*s%s", dirlen, path, name);
        f->nparts++;
        grm_status st = ckpt_map(host, "ckpt-safetensors", p->path, &p->data, &p->size);
        if (st != GRM_OK) return st;     // the message names the shard's path
        const uint64_t got = XXH64(p->data, p->size, ST_XXH_SEED);
        if (f->release) ckpt_unneed(p->data, 0, p->size);
        if (got != want)
            return host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: shard %s has XXH64 "
                                "%016llx, the checkpoint records %016llx: it belongs to "
                                "another save", path, p->path, (unsigned long long)got, want);
        ckpt_unmap(p->data, p->size);
        p->data = NULL;
        if ((st = st_open_part(host, p, f->release)) != GRM_OK) return st;
        f->n += p->h.n;
    }
    // A name in two shards would be visited twice.
    const char **names = malloc((size_t)(f->n > 0 ? f->n : 1) * sizeof(*names));
    if (names == NULL) return host->errorf(GRM_ENOMEM, "ckpt-safetensors: out of memory");
    int64_t m = 0;
    for (int32_t i = 1; i < f->nparts; i++)
        for (int64_t j = 0; j < f->parts[i].h.n; j++) names[m++] = f->parts[i].h.entries[j].name;
    qsort(names, (size_t)m, sizeof(*names), st_by_name);
    for (int64_t i = 1; i < m; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            const grm_status st = host->errorf(GRM_EFORMAT, "ckpt-safetensors: %s: duplicate "
                                               "tensor name '%.64s' in two shards", path,
                                               names[i]);
            free(names);
            return st;
        }
    }
    free(names);
    return GRM_OK;
}

grm_status st_open(const grm_host_api *host, const char *path, st_file *f, int release)
{
    memset(f, 0, sizeof(*f));
    f->path = path;
    f->release = release;
    f->parts = calloc(1, sizeof(*f->parts));
    if (f->parts == NULL || (f->parts[0].path = strdup(path)) == NULL) {
        st_close(f);
        return host->errorf(GRM_ENOMEM, "ckpt-safetensors: out of memory");
    }
    f->nparts = 1;
    grm_status st = st_open_part(host, &f->parts[0], release);
    if (st == GRM_OK) {
        f->n = f->parts[0].h.n;
        f->meta = st_meta_get(&f->parts[0].h, ST_META_GRM);
        const char *count = st_meta_get(&f->parts[0].h, ST_META_SHARDS);
        if (count != NULL) st = st_open_shards(host, f, count);
    }
    if (st != GRM_OK) st_close(f);
    return st;
}

void st_unneed(const st_file *f, const void *p, size_t len)
{
    const uint8_t *b = p;
    for (int32_t i = 0; i < f->nparts; i++) {
        const st_part *part = &f->parts[i];
        if (part->data != NULL && b >= part->data && b + len <= part->data + part->size) {
            ckpt_unneed(part->data, (size_t)(b - part->data), len);
            return;
        }
    }
}

void st_tensor(const st_file *f, int64_t i, grm_named_tensor *out, const st_entry **ep)
{
    int32_t p = 0;
    while (i >= f->parts[p].h.n) i -= f->parts[p++].h.n;
    const st_part *part = &f->parts[p];
    const st_entry *e = &part->h.entries[i];
    memset(out, 0, sizeof(*out));
    out->name = e->name;
    out->tensor.data = e->end > e->begin ? (void *)(part->data + part->h.data_start + e->begin)
                                         : NULL;
    out->tensor.dtype = e->dtype;
    out->tensor.ndim = e->ndim;
    for (int k = 0; k < GRM_TENSOR_MAX_DIMS; k++) out->tensor.shape[k] = e->shape[k];
    out->tensor.device.type = GRM_DEVICE_CPU;
    out->tensor.device.index = 0;
    if (ep != NULL) *ep = e;
}
