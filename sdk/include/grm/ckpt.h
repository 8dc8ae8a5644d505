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

/* Called by save_rows: copy rows [row0, row0 + n) of tensors[index] (one whose data is
 * NULL; a row is its first dim) into out. since 1.10 */
typedef grm_status (*grm_ckpt_rows_fn)(void *user, int64_t index, int64_t row0, int64_t n,
                                       void *out);

/* Called by load_rows with a piece of a tensor: rows [row0, row0 + t->tensor.shape[0]) of
 * one of `rows` rows (its other dims those of the whole tensor). t borrowed for the call.
 * A tensor's pieces come in file order, back to back from row 0 (load_rows_interleaved:
 * in order from row 0, maybe between other tensors' pieces). since 1.10 */
typedef grm_status (*grm_ckpt_piece_fn)(void *user, const grm_named_tensor *t, int64_t row0,
                                        int64_t rows);

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

    /* (optional; if NULL, the host gives save whole tensors) save, where the tensors whose
     * data is NULL are read through rows(user, ...) a range of rows at a time and never
     * held whole, so that a checkpoint of a store larger than memory is written in bounded
     * memory. The file holds what save would write (a compressing format may frame a
     * large tensor differently). since 1.10 */
    grm_status (*save_rows)(void *inst, const char *path, const grm_named_tensor *tensors,
                            int64_t n, const char *meta, grm_ckpt_rows_fn rows, void *user);

    /* (optional; if NULL, the host loads whole tensors) load, handing each tensor to visit
     * in pieces of rows (a small tensor is one piece) so that no tensor is held whole. As
     * with load, a corrupt, truncated or foreign file is GRM_EFORMAT before any piece is
     * visited, except for a check that needs a piece-wise tensor's decompressed bytes (its
     * own checksum): that one fails after its last piece, and the caller drops what it
     * restored. since 1.10 */
    grm_status (*load_rows)(void *inst, const char *path, grm_ckpt_piece_fn visit,
                            void *user);

    /* (optional; if NULL, the host calls load_rows) load_rows, where the pieces of
     * different tensors may interleave: a range of rows of each of several tensors of as
     * many rows in turn, as save_rows read them (each tensor's own pieces still come in
     * order from row 0; the caller puts together any it needs whole). A store that takes
     * its tensors so (GRM_EMB_LOAD_INTERLEAVED) puts each of its rows together once
     * instead of once a tensor. Checks and errors as load_rows. since 1.13 */
    grm_status (*load_rows_interleaved)(void *inst, const char *path,
                                        grm_ckpt_piece_fn visit, void *user);
} grm_ckpt_ops;

#ifdef __cplusplus
}
#endif
#endif /* GRM_CKPT_H */
