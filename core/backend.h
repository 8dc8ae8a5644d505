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
 * this build or machine cannot run it (no CUDA build, no such device). */
grm_status grm__backend_open(const char *spec, grm_backend *out);
void grm__backend_close(grm_backend *b);

/* Host memory, shared by the two CPU backends: grm__alloc / grm__free, memmove, no-op sync. */
void *grm__backend_host_alloc(void *ctx, size_t bytes, size_t align);
void grm__backend_host_free(void *ctx, void *ptr);
grm_status grm__backend_host_copy(void *ctx, void *dst, grm_device dst_dev, const void *src,
                                  grm_device src_dev, size_t bytes, void *stream);
grm_status grm__backend_host_sync(void *ctx, void *stream);

/* The bit of grm_plugin_info.devices for device type `type`. */
#define GRM__DEVICE_BIT(type) (1u << (uint32_t)(type))

#endif /* GRM_BACKEND_INTERNAL_H */
