/* core/export.c - a trained model leaving grm: `grmhost inspect` of checkpoints (.grm,
 * .safetensors: any ckpt-* plugin, picked by the file's extension through
 * core/checkpoint.h grm__ckpt_fmt_for) and what it shares with `grmhost export`. The
 * format plugin verifies the file before the first tensor is listed; the XXH64 printed per
 * tensor is computed here over its raw bytes, so the same model in two formats prints the
 * same checksums. */
#include "cli.h"
#include "checkpoint.h"
#include "grm_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* ---- a few fields of the trainer's metadata JSON ---- */

/* The text of "key": value in the flat JSON object meta into buf [cap] (a string without
 * its quotes, a number as written); "" when absent. */
static const char *meta_field(const char *meta, const char *key, char *buf, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(meta, pat);
    buf[0] = '\0';
    if (!p) return buf;
    p += strlen(pat);
    while (*p == ' ') p++;
    size_t n = 0;
    if (*p == '"') {
        for (p++; *p && *p != '"' && n + 1 < cap; p++) buf[n++] = *p;
    } else {
        for (; *p && *p != ',' && *p != '}' && n + 1 < cap; p++) buf[n++] = *p;
    }
    buf[n] = '\0';
    return buf;
}

static const char *dtype_name(int32_t dtype)
{
    static const char *const names[] = { "?", "f32", "f16", "bf16", "i32", "i64", "u8" };
    return dtype >= 1 && dtype <= 6 ? names[dtype] : "?";
}

/* ---- inspect ---- */

typedef struct inspect_ctx {
    int64_t n;
    uint64_t bytes;
} inspect_ctx;

static grm_status inspect_visit(void *user, const grm_named_tensor *t)
{
    inspect_ctx *c = user;
    size_t bytes = grm_dtype_size(t->tensor.dtype);
    char shape[96] = "[";
    for (int32_t d = 0; d < t->tensor.ndim; d++) {
        bytes *= (size_t)t->tensor.shape[d];
        size_t k = strlen(shape);
        snprintf(shape + k, sizeof shape - k, "%s%lld", d ? "," : "",
                 (long long)t->tensor.shape[d]);
    }
    strncat(shape, "]", sizeof shape - strlen(shape) - 1);
    const uint64_t h = XXH64(bytes ? t->tensor.data : "", bytes, 0);
    printf("%-40s %-5s %-20s %12zu %016llx\n", t->name, dtype_name(t->tensor.dtype), shape,
           bytes, (unsigned long long)h);
    c->n++;
    c->bytes += bytes;
    return GRM_OK;
}

int grm__inspect_ckpt(const char *path)
{
    grm__registry *reg = NULL;
    grm__ckpt_fmt fmt = { 0 };
    char *meta = NULL;
    const size_t cap = 1 << 20;
    grm_status st = grm__registry_create(&reg);
    if (st == GRM_OK) st = grm__registry_load_default(reg);
    if (st == GRM_OK) st = grm__ckpt_fmt_for(reg, path, &fmt);
    if (st == GRM_OK && !(meta = malloc(cap))) st = grm_errorf(GRM_ENOMEM, "out of memory");
    // meta verifies the whole file first: nothing is printed from a file that fails.
    if (st == GRM_OK) st = fmt.ops->meta(fmt.inst, path, meta, cap);
    if (st == GRM_OK) {
        char v[256];
        printf("%s: %s checkpoint, verified by %s (headers, bounds and checksums)\n", path,
               fmt.ext, fmt.plugin->info->name);
        printf("step:        %s\n", meta_field(meta, "step", v, sizeof v)[0] ? v : "-");
        printf("pipeline:    %s\n", meta_field(meta, "pipeline", v, sizeof v)[0] ? v : "-");
        printf("config hash: %s\n", meta_field(meta, "config_hash", v, sizeof v)[0] ? v : "-");
        printf("written by:  grm %s, rank %s of world size %s\n",
               meta_field(meta, "grm_version", v, sizeof v)[0] ? v : "-",
               meta_field(meta, "rank", v + 128, 64)[0] ? v + 128 : "-",
               meta_field(meta, "world_size", v + 192, 64)[0] ? v + 192 : "-");
        printf("metadata:    %s\n", meta);
        printf("%-40s %-5s %-20s %12s %s\n", "tensor", "dtype", "shape", "bytes", "xxh64");
        fflush(stdout);
        inspect_ctx c = { 0, 0 };
        st = fmt.ops->load(fmt.inst, path, inspect_visit, &c);
        if (st == GRM_OK)
            printf("%lld tensors, %llu bytes\n", (long long)c.n, (unsigned long long)c.bytes);
    }
    free(meta);
    grm__ckpt_fmt_fini(&fmt);
    grm__registry_destroy(reg);
    return st == GRM_OK ? 0 : grm__cli_fail(st);
}
