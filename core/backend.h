/* core/backend.h - the backends a pipeline can run on ([pipeline] device, grm/backend.h):
 * `ref` (core/backend_ref.c, the plain loops), `cpu` (core/backend.c: the threaded sparse
 * operators of core/sparse.c and OpenBLAS), `cuda:N` (kernels/, when built with CUDA).
 * Internal to libgrmcore. */
#ifndef GRM_BACKEND_INTERNAL_H
#define GRM_BACKEND_INTERNAL_H

#include "grm_core.h"

#include <grm/backend.h>

extern const grm_backend_iface grm__backend_ref_iface;
extern const grm_backend_iface grm__backend_cpu_iface;

/* Parse a [pipeline] device value: "cpu", "ref" or "cuda:N" (N >= 0; "cuda" is cuda:0).
 * *device gets the device, name [cap] the backend's name. GRM_EINVAL with the allowed
 * values otherwise. */
grm_status grm__device_parse(const char *spec, grm_device *device, char *name, size_t cap);

/* The backend for `spec` into *out (context owned: grm__backend_close). GRM_ENOTSUP when
 * this build or machine cannot run it (no CUDA build, no such device); GRM_ENOTFOUND or
 * GRM_EABI when the cuda module is missing or cannot be loaded. The first cuda:N loads the
 * cuda module (below); it stays loaded while any of its backends is open. Thread-safe. */
grm_status grm__backend_open(const char *spec, grm_backend *out);
/* Close a backend from grm__backend_open (a cuda one: the module's close, then dlclose) and
 * zero *b; a zeroed or NULL b is accepted. */
void grm__backend_close(grm_backend *b);

/* ---- the cuda module ---- */

/* The cuda backend is kernels/backend_cuda.c built with libgrmcuda.la into the libtool
 * module GRM__CUDA_MODULE (only with CUDA), so that grmhost loads the CUDA runtime and
 * cuBLAS only for a pipeline on cuda:N. It is part of grmhost's own build, not a plugin:
 * it is found beside grmhost's own plugin directory (grm__module_path) and must come from
 * the same build (struct_size equal). Its one exported symbol, GRM__CUDA_ENTRY, is a
 * grm__cuda_entry_fn: pure, it keeps the host API (errors go through host->errorf) and
 * returns its static table. */
#define GRM__CUDA_MODULE "grm-cuda.so"
#define GRM__CUDA_ENTRY "grm_cuda_backend_entry"

typedef struct grm__cuda_module {
    uint32_t struct_size;                   /* sizeof(grm__cuda_module) */
    const grm_backend_iface *iface;         /* static */
    /* The context of GPU `device` into *ctx (owned: close). GRM_ENOTSUP with the number of
     * devices when there is no such device, GRM_EDEVICE on a CUDA error. */
    grm_status (*open)(int32_t device, void **ctx);
    void (*close)(void *ctx);               /* NULL is accepted */
} grm__cuda_module;

typedef const grm__cuda_module *(*grm__cuda_entry_fn)(const grm_host_api *host);

/* Host memory, shared by the two CPU backends: grm__alloc / grm__free, memmove, no-op sync. */
void *grm__backend_host_alloc(void *ctx, size_t bytes, size_t align);
void grm__backend_host_free(void *ctx, void *ptr);
grm_status grm__backend_host_copy(void *ctx, void *dst, grm_device dst_dev, const void *src,
                                  grm_device src_dev, size_t bytes, void *stream);
grm_status grm__backend_host_sync(void *ctx, void *stream);

/* 1 for the two CPU backends (ref, cpu): their gemm works on host memory and may run on
 * the host pool's threads at once, so a loop over users can multiply each thread's own
 * block of them (evaluation, recommend) instead of the whole batch on one thread. */
static inline int grm__backend_on_host(const grm_backend *b)
{
    return b->iface == &grm__backend_cpu_iface || b->iface == &grm__backend_ref_iface;
}

/* The bit of grm_plugin_info.devices for device type `type`. */
#define GRM__DEVICE_BIT(type) (1u << (uint32_t)(type))

#endif /* GRM_BACKEND_INTERNAL_H */
