/* grm/head.h - heads: the loss at the top of a pipeline's dense stack (DESIGN.md §3,
 * §5 "dense forward -> loss"), a plugin kind of their own since ABI 1.5.
 *
 * The host runs the [dense.N] blocks, then hands the last block's output, the batch and, for
 * retrieval, the item table's rows of the batch to the head's loss op, which returns the
 * loss and writes every gradient: of the stack's output (the blocks' backward continues from
 * it) and of the item rows it read (the host's row optimizer applies them). A retrieval head
 * also draws the step's negatives; the host merges them into the batch's unique item keys,
 * so each item row of a step is looked up and updated once whether it is a target, a
 * negative or both. The gathering of the targets' and negatives' rows from the batch's
 * unique rows, and the summing of their gradients back, happen inside the head
 * (grm_loss_io.item_rows), through the host's backend (host->backend(), grm/backend.h).
 *
 * Heads written for ABI 1.0-1.4 are dense blocks with the loss, loss_kind and negatives ops
 * of grm/dense.h; the host still runs them, gathering and summing the rows for them. */
#ifndef GRM_HEAD_H
#define GRM_HEAD_H

#include <stdint.h>

#include <grm/dense.h>
#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grm_head_ops {
    uint32_t struct_size;       /* sizeof(grm_head_ops) */

    /* (required) Create for a dense stack whose rows have in_dim features (ranking: one
     * logit per task; retrieval: a query in the item table's space), with parameters (if
     * any) initialized from `seed`. *inst: owned, release with destroy. */
    grm_status (*create)(const void *config, int64_t in_dim, uint64_t seed, void **inst);

    /* (required) Release the instance; NULL is accepted. */
    void (*destroy)(void *inst);

    /* (required) The task the head trains: GRM_LOSS_BCE (ranking: io->labels) or
     * GRM_LOSS_RETRIEVAL (io->item_rows, targets and negatives). */
    int32_t (*task)(void *inst);

    /* (required) The loss of one batch: io->loss, io->d_pred, and for retrieval the item
     * rows' gradients (io->d_item_rows, added to; or io->d_pos and io->d_neg when the host
     * passed gathered rows). Evaluation calls it with d_pred NULL and, for ranking, scores
     * set. Deterministic given the inputs and the last negatives draw. */
    grm_status (*loss)(void *inst, grm_loss_io *io);

    /* (optional; required for retrieval heads) Draw up to `max` negatives for this step
     * into ids [max], setting *n; deterministic given `seed`. The head may keep what it
     * needs of the draw for the loss that follows (logQ). */
    grm_status (*negatives)(void *inst, int64_t *ids, int64_t *n, int64_t max,
                            const grm_catalog *catalog, uint64_t seed);

    /* (optional; if NULL, the head has no parameters) The index-th parameter and its
     * gradient, as grm_dense_ops.params: GRM_ENOTFOUND past the last. The host's dense
     * optimizer steps them and checkpoints save them as "head.<name>". */
    grm_status (*params)(void *inst, int32_t index, grm_named_tensor *value,
                         grm_tensor *grad);

    /* (optional; if NULL, 0) Floating-point operations of the loss (backward = 0) or its
     * gradient (backward = 1) on `rows` rows with `nneg` negatives, for MFU. */
    double (*flops)(void *inst, int64_t rows, int64_t nneg, int32_t backward);

    /* (optional, since 1.8; if NULL, the rows are scored as they are) Put n item rows
     * [n, dim] of the item table, in place, into the form whose dot product with a query
     * ranks items as the head's logits do: a head with cosine logits (L2-normalised query
     * and item) normalises each row. The host calls it on the catalog's rows it ranks in
     * evaluation, `grmhost recommend` and `grmhost export` (item.weight), never on the
     * table itself. Test it with GRM_HAS_OP(grm_head_ops, ops, score_rows). */
    grm_status (*score_rows)(void *inst, float *rows, int64_t n, int64_t dim);
} grm_head_ops;

#ifdef __cplusplus
}
#endif
#endif /* GRM_HEAD_H */
