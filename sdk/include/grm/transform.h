/* grm/transform.h - feature transforms: chunk in, chunk out (DESIGN.md §3).
 * Row-wise transforms (hash, mod, bucketize) answer each chunk at once; aggregating
 * transforms (sequence building) may hold rows back and emit them from flush. */
#ifndef GRM_TRANSFORM_H
#define GRM_TRANSFORM_H

#include <stdint.h>

#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grm_transform_ops {
    uint32_t struct_size;  /* sizeof(grm_transform_ops) */

    /* (required) Create an instance for input `schema` (borrowed for the call). Fails
     * with GRM_EINVAL naming the column when the config refers to a missing column or
     * one of the wrong type. *inst: owned, release with destroy. */
    grm_status (*create)(const void *config, const grm_schema *schema, void **inst);

    /* (required) The output schema. *schema: borrowed, valid until destroy. */
    grm_status (*schema)(void *inst, const grm_schema **schema);

    /* (required) Transform one chunk. *out: borrowed, valid until the next call on the
     * instance and while `in` is unchanged (untouched columns may point into `in`); NULL
     * when the transform buffered the rows (see flush). */
    grm_status (*apply)(void *inst, const grm_chunk *in, const grm_chunk **out);

    /* (optional; if NULL, nothing is buffered) Emit what was held back, after the last
     * chunk. *out as for apply; NULL when nothing remains. Called until it yields NULL. */
    grm_status (*flush)(void *inst, const grm_chunk **out);

    /* (required) Release the instance; NULL is accepted. */
    void (*destroy)(void *inst);
} grm_transform_ops;

#ifdef __cplusplus
}
#endif
#endif /* GRM_TRANSFORM_H */
