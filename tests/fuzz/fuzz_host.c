/* tests/fuzz/fuzz_host.c - the minimal host API table the fuzz targets hand the plugins
 * they drive (reader-text, ckpt-grm): errors into one buffer, no logging, plain
 * allocation, a one-thread parallel_for, no config and no communicator. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_host.h"

static char fz_err[1024];

static void fz_log(int32_t level, const char *who, const char *fmt, ...)
{
    (void)level;
    (void)who;
    (void)fmt;
}

static grm_status fz_errorf(grm_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fz_err, sizeof fz_err, fmt, ap);
    va_end(ap);
    return st;
}

static const char *fz_last_error(void) { return fz_err; }

static void *fz_alloc(grm_device d, size_t bytes, size_t align)
{
    void *p = NULL;
    (void)d;
    if (align == 0) align = 64;
    return posix_memalign(&p, align, bytes ? bytes : 1) == 0 ? p : NULL;
}

static void fz_free(grm_device d, void *p)
{
    (void)d;
    free(p);
}

static grm_status fz_parallel_for(int64_t n, int64_t grain, grm_range_fn fn, void *ctx)
{
    (void)grain;
    return n > 0 ? fn(ctx, 0, n) : GRM_OK;
}

static int32_t fz_threads(void) { return 1; }
static void *fz_scratch(size_t b, size_t a) { return fz_alloc((grm_device){ 0, 0 }, b, a); }
static const char *fz_config_get(const char *s, const char *k) { (void)s; (void)k; return NULL; }

const grm_host_api fz_host = {
    .struct_size = sizeof(grm_host_api),
    .abi_major = GRM_ABI_MAJOR,
    .abi_minor = GRM_ABI_MINOR,
    .log = fz_log,
    .errorf = fz_errorf,
    .last_error = fz_last_error,
    .alloc = fz_alloc,
    .free = fz_free,
    .parallel_for = fz_parallel_for,
    .num_threads = fz_threads,
    .scratch = fz_scratch,
    .config_get = fz_config_get,
    .comm = NULL,
};
