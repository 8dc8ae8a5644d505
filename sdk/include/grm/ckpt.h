/* grm/ckpt.h - checkpoint formats: save and load a stream of named tensors plus a
 * metadata string (DESIGN.md §3). Saving is atomic: a crash during save never leaves a
 * file at `path` that loads. */
#ifndef GRM_CKPT_H
#define GRM_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called once per tensor by load, in file order. t borrowed for the call. A non-OK
 * return stops the load and is returned by it. */
typedef grm_status (*grm_ckpt_visit_fn)(void *user, const grm_named_tensor *t);

typedef struct grm_ckpt_ops {
    uint32_t struct_size;       /* sizeof(grm_ckpt_ops) */

    /* (required) Create from the filled config. *inst: owned, release with destroy. */
    grm_status (*create)(const void *config, void **inst);

    /* (required) Release the instance; NULL is accepted. */
    void (*destroy)(void *inst);

    /* (required) The file name extension without the dot ("grm", "safetensors"). */
    const char *(*extension)(void *inst);

    /* (required) Write tensors [n] (CPU) and `meta` (a NUL-terminated JSON object) to
     * `path` atomically: write elsewhere, fsync, rename. GRM_EIO names path and errno. */
    grm_status (*save)(void *inst, const char *path, const grm_named_tensor *tensors,
                       int64_t n, const char *meta);

    /* (required) Verify the file at `path` and pass each tensor to visit. Corrupt,
     * truncated or foreign files are GRM_EFORMAT naming path and what failed, before any
     * tensor is visited. */
    grm_status (*load)(void *inst, const char *path, grm_ckpt_visit_fn visit, void *user);

    /* (required) Copy the metadata string of the file at `path` into buf [cap],
     * NUL-terminated; GRM_EFORMAT if it does not fit or the file is corrupt. */
    grm_status (*meta)(void *inst, const char *path, char *buf, size_t cap);
} grm_ckpt_ops;

#ifdef __cplusplus
}
#endif
#endif /* GRM_CKPT_H */
