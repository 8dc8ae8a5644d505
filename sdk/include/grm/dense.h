/* grm/dense.h - dense blocks and heads (DESIGN.md §3).
 *
 * A dense block maps x [N, in_dim] to y [N, out_dim] (N = samples or tokens), caches
 * what its backward needs, and accumulates the gradients of its named parameters. The
 * host stacks blocks in [dense.N] order. Parameters live in one block per instance
 * (STYLE.md §8). Heads are a kind of their own since ABI 1.5 (grm/head.h); before it a head
 * was a dense block with the loss, loss_kind and negatives ops below, which the host still
 * runs. grm_loss_io and grm_catalog are shared by both. */
#ifndef GRM_DENSE_H
#define GRM_DENSE_H

#include <stdint.h>

#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the host tells a block about the step. Borrowed for the call. */
typedef struct grm_dense_ctx {
    uint32_t struct_size;       /* sizeof(grm_dense_ctx) as the host knows it */
    int32_t training;           /* 1 in training (dropout on, cache for backward) */
    int64_t step;               /* global step, for seeding dropout */
    const grm_batch *batch;     /* the batch, or NULL */
    const int64_t *offsets;     /* [nseq+1] when rows are jagged sequence tokens, else NULL */
    int64_t nseq;               /* number of sequences when offsets is set */
    /* since 1.2: [N] timestamp (seconds) of each jagged token, or NULL when the data has
     * none. Test it with GRM_HAS_OP(grm_dense_ctx, ctx, times) (grm/host.h). */
    const int64_t *times;
} grm_dense_ctx;

/* Loss kinds a head computes. Stored in int32_t. */
typedef enum grm_loss_kind {
    GRM_LOSS_BCE = 1,           /* pred [B, T] logits against labels [B, T] */
    GRM_LOSS_RETRIEVAL = 2      /* pred [B, D] query vectors against item rows */
} grm_loss_kind;

/* The items a retrieval head can draw negatives from. Borrowed for the call. */
typedef struct grm_catalog {
    int64_t n;                  /* number of items */
    const int64_t *ids;         /* [n] item ids */
    const int64_t *counts;      /* [n] training occurrences (popularity), or NULL */
} grm_catalog;

/* Inputs and outputs of a head's loss op. The host fills the inputs and zeroes the
 * gradient buffers; the head writes losses and gradients. Pointers borrowed. */
typedef struct grm_loss_io {
    uint32_t struct_size;       /* sizeof(grm_loss_io) as the host knows it */
    int32_t ntasks;             /* T, for BCE */
    int64_t rows;               /* B */
    int64_t dim;                /* columns of pred: T for BCE, D for retrieval */
    const float *pred;          /* [B, dim] */
    float *d_pred;              /* [B, dim] out: d(loss)/d(pred), loss averaged over B */
    const float *weights;       /* [B] sample weights, or NULL for 1 */
    const float *labels;        /* [B, T] BCE labels in [0, 1], or NULL */
    const float *pos;           /* [B, D] positive item rows (retrieval) */
    float *d_pos;               /* [B, D] out */
    const int64_t *pos_ids;     /* [B] positive item ids */
    const float *neg;           /* [R, D] negative item rows shared by the batch */
    float *d_neg;               /* [R, D] out */
    const int64_t *neg_ids;     /* [R] */
    int64_t nneg;               /* R */
    double loss;                /* out: mean loss over the batch */
    float *scores;              /* [B, T] out for BCE (probabilities), or NULL */
    /* since 1.5 (read them after checking struct_size): */
    const grm_batch *batch;     /* the batch (its KJT, labels, targets), or NULL */
    int64_t step;               /* the global step (0 in evaluation) */
    /* Retrieval, for grm_head_ops heads: the item table's unique rows of the batch, which
     * the head gathers itself. When item_rows is set, pos, neg, d_pos and d_neg are NULL:
     * the target of row b is item_rows[pos_slots[b]], negative j is item_rows[neg_slots[j]],
     * and the head adds each one's gradient into d_item_rows at the same slot (a row that
     * is several targets and negatives receives their sum). */
    const float *item_rows;     /* [nitems, D] */
    float *d_item_rows;         /* [nitems, D] in/out: += the rows' gradients */
    int64_t nitems;
    const int64_t *pos_slots;   /* [B] */
    const int64_t *neg_slots;   /* [R] */
    /* Every gradient the head writes (d_pred, d_pos, d_neg, the rows added into
     * d_item_rows) is multiplied by grad_scale (the batch's share of the step's rows when a
     * step has several batches or ranks, MTGRBoost §5.1); 0 means 1. */
    float grad_scale;
} grm_loss_io;

/* The factor a head multiplies every gradient it writes by: io->grad_scale when the host
 * sent one (1.5) and it is not 0, else 1. Since 1.5. */
static inline float grm_loss_io_grad_scale(const grm_loss_io *io)
{
    return GRM_HAS_FIELD(grm_loss_io, io, grad_scale) && io->grad_scale != 0.0f
               ? io->grad_scale : 1.0f;
}

typedef struct grm_dense_ops {
    uint32_t struct_size;       /* sizeof(grm_dense_ops) */

    /* (required) Create for inputs of in_dim features; parameters are initialized from
     * `seed`. *inst: owned, release with destroy. */
    grm_status (*create)(const void *config, int64_t in_dim, uint64_t seed, void **inst);

    /* (required) Release the instance; NULL is accepted. */
    void (*destroy)(void *inst);

    /* (required) Features per output row. */
    int64_t (*out_dim)(void *inst);

    /* (required) y [N, out_dim] = f(x [N, in_dim]). In training the block keeps what
     * backward needs until the next forward. N is x->shape[0]; x and y are CPU f32. */
    grm_status (*forward)(void *inst, grm_tensor *y, const grm_tensor *x,
                          const grm_dense_ctx *ctx);

    /* (required) Given dy [N, out_dim] of the last forward, add parameter gradients into
     * the grads and write dx [N, in_dim] (dx NULL: not needed). */
    grm_status (*backward)(void *inst, grm_tensor *dx, const grm_tensor *dy,
                           const grm_dense_ctx *ctx);

    /* (required) The index-th parameter: *value and *grad view the block's memory (grad
     * has value's shape). GRM_ENOTFOUND past the last; a block with no parameters
     * returns GRM_ENOTFOUND for index 0. */
    grm_status (*params)(void *inst, int32_t index, grm_named_tensor *value, grm_tensor *grad);

    /* (required) Floating-point operations of forward (backward = 0) or backward
     * (backward = 1) on `rows` rows, for MFU. */
    double (*flops)(void *inst, int64_t rows, int32_t backward);

    /* (optional; if NULL, the block is not a head) Which grm_loss_kind this head computes. */
    int32_t (*loss_kind)(void *inst);

    /* (optional; required for heads) Compute io->loss and the gradients. */
    grm_status (*loss)(void *inst, grm_loss_io *io);

    /* (optional; retrieval heads) Draw up to `max` negatives for this step into ids,
     * setting *n. Deterministic given `seed`. */
    grm_status (*negatives)(void *inst, int64_t *ids, int64_t *n, int64_t max,
                            const grm_catalog *catalog, uint64_t seed);
} grm_dense_ops;

#ifdef __cplusplus
}
#endif
#endif /* GRM_DENSE_H */
