/* core/head.h - the pipeline's head as the trainer drives it: a grm_head_ops plugin (ABI
 * 1.5, grm/head.h), or a dense block with the loss ops of ABI 1.0-1.4, whose forward,
 * backward and row gathering the adapter in core/head.c runs so both look alike to the
 * trainer. Internal to libgrmcore. */
#ifndef GRM_HEAD_INTERNAL_H
#define GRM_HEAD_INTERNAL_H

#include "pipeline.h"

#include <grm/backend.h>
#include <grm/head.h>

typedef struct grm__head {
    const grm__stage *stage;       /* borrowed: [head] */
    const grm_head_ops *ops;       /* a head plugin, or NULL */
    const grm_dense_ops *legacy;   /* a dense-kind head of ABI < 1.5, or NULL */
    void *inst;
    /* legacy heads: the block's output and its gradient [cap, out_dim], the gathered rows
     * [cap, D] and their gradients, for the rows the host gathers for them */
    int64_t cap, out_dim;
    float *y, *dy, *pos, *dpos, *neg, *dneg;
    int64_t ncap;
} grm__head;

/* Create the head stage's instance for stack rows of in_dim features, with buffers for up
 * to `rows` rows and `nneg` negatives (legacy heads). */
grm_status grm__head_create(grm__head *h, const grm__stage *stage, int64_t in_dim,
                            uint64_t seed);
/* Buffers of a legacy head for `rows` rows and `nneg` negatives of dim D. */
grm_status grm__head_reserve(grm__head *h, int64_t rows, int64_t nneg, int64_t D);
void grm__head_destroy(grm__head *h);
/* GRM_LOSS_BCE or GRM_LOSS_RETRIEVAL. */
int32_t grm__head_task(const grm__head *h);
grm_status grm__head_negatives(grm__head *h, int64_t *ids, int64_t *n, int64_t max,
                               const grm_catalog *catalog, uint64_t seed);
grm_status grm__head_params(grm__head *h, int32_t index, grm_named_tensor *value,
                            grm_tensor *grad);
/* The loss of io (host-filled as for a grm_head_ops head: pred, item rows and slots). A
 * legacy head runs its forward first and its backward after, and the adapter gathers and
 * sums the rows for it through `be`. */
/* Floating-point operations of the last loss call, forward and backward, on `rows` rows with
 * `nneg` negatives (the head's flops op; 0 for a head without one): --profile's MFU. */
double grm__head_flops(const grm__head *h, int64_t rows, int64_t nneg);
/* The catalog's n item rows [n, dim], in place, in the form a dot product with a query
 * ranks as the head's logits do (the head's score_rows op; as they are without one). */
grm_status grm__head_score_rows(grm__head *h, float *rows, int64_t n, int64_t dim);
grm_status grm__head_loss(grm__head *h, grm_loss_io *io, const grm_backend *be, void *work);

/* The [head] checks, written once: a head plugin that can train `task` (GRM_LOSS_BCE for
 * ranking, GRM_LOSS_RETRIEVAL for retrieval); `got` is the instance's task, or -1 before
 * one exists (then only the ops are checked). */
grm_status grm__head_check(const grm__pipeline *p, const grm__stage *stage, int ranking,
                           int32_t got);

#endif /* GRM_HEAD_INTERNAL_H */
