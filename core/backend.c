/* core/backend.c - the `cpu` backend (grm/backend.h): core/sparse.c's threaded operators
 * (hash-partitioned scatter-add and segment unique, element-balanced pooling; RecIS Table 1,
 * FusedRec §3) and OpenBLAS's SGEMM, on host memory; and the registry that opens a backend
 * from a [pipeline] device value, loading the cuda module (kernels/backend_cuda.c) on
 * demand. Tested against core/backend_ref.c by tests/test-backend.c. */
#include "config.h"

#include "backend.h"
#include "sparse.h"

#include <cblas.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define HOST ((grm_device){ GRM_DEVICE_CPU, 0 })

static const char *cpu_name(void *ctx)
{
    (void)ctx;
    return "cpu";
}

void *grm__backend_host_alloc(void *ctx, size_t bytes, size_t align)
{
    (void)ctx;
    return grm__alloc(HOST, bytes ? bytes : 1, align ? align : 64);
}

void grm__backend_host_free(void *ctx, void *ptr)
{
    (void)ctx;
    grm__free(HOST, ptr);
}

grm_status grm__backend_host_copy(void *ctx, void *dst, grm_device dst_dev, const void *src,
                            grm_device src_dev, size_t bytes, void *stream)
{
    (void)ctx;
    (void)stream;
    if (dst_dev.type != GRM_DEVICE_CPU || src_dev.type != GRM_DEVICE_CPU)
        return grm_errorf(GRM_ENOTSUP, "backend copy: the CPU backends copy host memory only");
    if (bytes) memmove(dst, src, bytes);
    return GRM_OK;
}

grm_status grm__backend_host_sync(void *ctx, void *stream)
{
    (void)ctx;
    (void)stream;
    return GRM_OK;
}

static grm_status cpu_work_create(void *ctx, void **work)
{
    (void)ctx;
    grm__sparse_work *w = calloc(1, sizeof *w);
    if (!w) return grm_errorf(GRM_ENOMEM, "out of memory");
    grm__sparse_work_init(w);
    *work = w;
    return GRM_OK;
}

static void cpu_work_destroy(void *ctx, void *work)
{
    (void)ctx;
    grm__sparse_work_fini(work);
    free(work);
}

static grm_status cpu_gather(void *ctx, float *out, const float *rows, const int64_t *idx,
                             int64_t n, int64_t nrows, int64_t D, void *stream)
{
    (void)ctx;
    (void)stream;
    return grm__sparse_gather(out, rows, idx, n, nrows, D);
}

static grm_status cpu_scatter_add(void *ctx, float *rows, const float *src, const int64_t *idx,
                                  int64_t n, int64_t nrows, int64_t D, void *work, void *stream)
{
    (void)ctx;
    (void)stream;
    return grm__sparse_scatter_add(rows, src, idx, n, nrows, D, work);
}

static grm_status cpu_segment_reduce(void *ctx, float *out, const float *rows,
                                     const int64_t *idx, const int64_t *offsets, int64_t B,
                                     int64_t nrows, int64_t D, int32_t mode, void *stream)
{
    (void)ctx;
    (void)stream;
    return grm__sparse_segment_reduce(out, rows, idx, offsets, B, nrows, D,
                                      mode == GRM_POOL_MEAN ? GRM_SPARSE_POOL_MEAN
                                                            : GRM_SPARSE_POOL_SUM);
}

static grm_status cpu_segment_reduce_bwd(void *ctx, float *grad_in, const float *grad_out,
                                         const int64_t *offsets, int64_t B, int64_t D,
                                         int32_t mode, void *stream)
{
    (void)ctx;
    (void)stream;
    return grm__sparse_segment_reduce_bwd(grad_in, grad_out, offsets, B, D,
                                          mode == GRM_POOL_MEAN ? GRM_SPARSE_POOL_MEAN
                                                                : GRM_SPARSE_POOL_SUM);
}

static grm_status cpu_segment_unique(void *ctx, int64_t *uniq_ids, int32_t *uniq_feat,
                                     int64_t *counts, int64_t *inverse, int64_t *nuniq,
                                     const int64_t *ids, const int64_t *offsets, int64_t n,
                                     int32_t F, void *work, void *stream)
{
    (void)ctx;
    (void)stream;
    return grm__sparse_segment_unique(uniq_ids, uniq_feat, counts, inverse, nuniq, ids,
                                      offsets, n, F, work);
}

static grm_status cpu_gemm(void *ctx, int32_t trans_a, int32_t trans_b, int64_t M, int64_t N,
                           int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                           int64_t ldb, float beta, float *C, int64_t ldc, void *stream)
{
    (void)ctx;
    (void)stream;
    if (M <= 0 || N <= 0) return GRM_OK;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda,
                B, (int)ldb, beta, C, (int)ldc);
    return GRM_OK;
}

const grm_backend_iface grm__backend_cpu_iface = {
    .struct_size = sizeof(grm_backend_iface),
    .name = cpu_name,
    .alloc = grm__backend_host_alloc,
    .free = grm__backend_host_free,
    .copy = grm__backend_host_copy,
    .synchronize = grm__backend_host_sync,
    .work_create = cpu_work_create,
    .work_destroy = cpu_work_destroy,
    .gather = cpu_gather,
    .scatter_add = cpu_scatter_add,
    .segment_reduce = cpu_segment_reduce,
    .segment_reduce_bwd = cpu_segment_reduce_bwd,
    .segment_unique = cpu_segment_unique,
    .gemm = cpu_gemm,
};

/* ---- the registry ---- */

grm_status grm__device_parse(const char *spec, grm_device *device, char *name, size_t cap)
{
    char *end = NULL;
    if (strcmp(spec, "cpu") == 0 || strcmp(spec, "ref") == 0) {
        *device = HOST;
        snprintf(name, cap, "%s", spec);
        return GRM_OK;
    }
    if (strcmp(spec, "cuda") == 0 || strncmp(spec, "cuda:", 5) == 0) {
        long idx = 0;
        if (spec[4] == ':') {
            idx = strtol(spec + 5, &end, 10);
            if (end == spec + 5 || *end != '\0' || idx < 0 || idx > 1023)
                return grm_errorf(GRM_EINVAL, "device '%s': expected cuda:N with N a GPU "
                                  "ordinal (0, 1, ...)", spec);
        }
        *device = (grm_device){ GRM_DEVICE_CUDA, (int32_t)idx };
        snprintf(name, cap, "cuda");
        return GRM_OK;
    }
    return grm_errorf(GRM_EINVAL, "device '%s': expected cpu, ref or cuda:N", spec);
}

#ifdef GRM_HAVE_CUDA
/* The cuda module, loaded by the first open of cuda:N and released by the close of the
 * last: process state, under cuda_lock. RTLD_NODELETE as for plugins (core/loader.c): the
 * CUDA runtime and cuBLAS it pulls in register exit handlers and keep a C++ runtime pool,
 * neither of which survives being unmapped, so dlclose drops the reference and the code
 * stays mapped; a second load finds it there. */
static pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static void *cuda_handle;
static const grm__cuda_module *cuda_mod;
static int32_t cuda_refs;

/* Load the module into cuda_handle and cuda_mod (under cuda_lock). */
static grm_status cuda_load(const char *spec)
{
    char path[PATH_MAX];
    if (!grm__module_path(GRM__CUDA_MODULE, path, sizeof path))
        return grm_errorf(GRM_ENOTFOUND, "device '%s': the cuda backend module %s is neither "
                          "in %s nor in its kernels/.libs; rebuild or reinstall grm (make "
                          "install puts it beside lib/grm/plugins), or use device = cpu", spec,
                          GRM__CUDA_MODULE, path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h)
        return grm_errorf(GRM_EABI, "device '%s': cannot load %s: %s; check that the CUDA "
                          "runtime and cuBLAS are installed (ldd %s), or use device = cpu",
                          spec, path, dlerror(), path);
    grm__cuda_entry_fn entry;
    void *sym = dlsym(h, GRM__CUDA_ENTRY);
    memcpy(&entry, &sym, sizeof entry);
    const grm__cuda_module *m = entry ? entry(grm__host_api()) : NULL;
    if (!m || m->struct_size != sizeof *m || !m->iface || !m->open || !m->close) {
        dlclose(h);
        return grm_errorf(GRM_EABI, "device '%s': %s is not this grmhost's cuda module (%s); "
                          "build grmhost and the module together (make), or use device = cpu",
                          spec, path, entry ? "its table differs" : "no " GRM__CUDA_ENTRY);
    }
    cuda_handle = h;
    cuda_mod = m;
    return GRM_OK;
}

static grm_status cuda_open(const char *spec, int32_t device, grm_backend *out)
{
    pthread_mutex_lock(&cuda_lock);
    grm_status st = cuda_handle ? GRM_OK : cuda_load(spec);
    void *ctx = NULL;
    if (st == GRM_OK && (st = cuda_mod->open(device, &ctx)) == GRM_OK) {
        cuda_refs++;
        out->iface = cuda_mod->iface;
        out->context = ctx;
    } else if (cuda_handle && cuda_refs == 0) {
        dlclose(cuda_handle);
        cuda_handle = NULL;
        cuda_mod = NULL;
    }
    pthread_mutex_unlock(&cuda_lock);
    return st;
}
#endif

grm_status grm__backend_open(const char *spec, grm_backend *out)
{
    char name[16];
    grm_device dev;
    grm_status st = grm__device_parse(spec, &dev, name, sizeof name);
    if (st != GRM_OK) return st;
    memset(out, 0, sizeof *out);
    out->device = dev;
    if (strcmp(name, "ref") == 0) {
        out->iface = &grm__backend_ref_iface;
        return GRM_OK;
    }
    if (strcmp(name, "cpu") == 0) {
        out->iface = &grm__backend_cpu_iface;
        return GRM_OK;
    }
#ifdef GRM_HAVE_CUDA
    return cuda_open(spec, dev.index, out);
#else
    return grm_errorf(GRM_ENOTSUP, "device '%s': this grmhost was built without CUDA "
                      "(configure found no nvcc/cuBLAS); use device = cpu", spec);
#endif
}

void grm__backend_close(grm_backend *b)
{
    if (!b) return;
#ifdef GRM_HAVE_CUDA
    if (b->iface && b->device.type == GRM_DEVICE_CUDA) {
        pthread_mutex_lock(&cuda_lock);
        cuda_mod->close(b->context);
        if (--cuda_refs == 0) {
            dlclose(cuda_handle);
            cuda_handle = NULL;
            cuda_mod = NULL;
        }
        pthread_mutex_unlock(&cuda_lock);
    }
#endif
    memset(b, 0, sizeof *b);
}
