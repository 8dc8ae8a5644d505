/* grm/comm.h - communicators: the collectives a distributed job needs (DESIGN.md §3, §6).
 * Ranks are processes. Buffers are on the device the communicator serves (CPU for
 * comm-single and comm-mpi). Every rank calls each collective in the same order. */
#ifndef GRM_COMM_H
#define GRM_COMM_H

#include <stdint.h>

#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reduction operators. Stored in int32_t. */
typedef enum grm_reduce_op {
    GRM_REDUCE_SUM = 0,
    GRM_REDUCE_MAX = 1,
    GRM_REDUCE_MIN = 2
} grm_reduce_op;

typedef struct grm_comm_ops {
    uint32_t struct_size;       /* sizeof(grm_comm_ops) */

    /* (required) Join the job. *inst: owned, release with destroy. */
    grm_status (*create)(const void *config, void **inst);

    /* (required) Leave the job; NULL is accepted. */
    void (*destroy)(void *inst);

    /* (required) This process's rank in [0, size). */
    int32_t (*rank)(void *inst);

    /* (required) Number of ranks. */
    int32_t (*size)(void *inst);

    /* (required) In place: buf [count] of dtype (grm_dtype: F32, I64 at least; F64 is
     * not a grm_dtype, use two calls or I64) reduced with op (grm_reduce_op). */
    grm_status (*allreduce)(void *inst, void *buf, int64_t count, int32_t dtype, int32_t op);

    /* (required) recv [size * count] = concatenation of every rank's send [count]. */
    grm_status (*allgather)(void *inst, void *recv, const void *send, int64_t count,
                            int32_t dtype);

    /* (required) Rank r sends send[sdispls[p] .. +scounts[p]) to each rank p and
     * receives from p into recv[rdispls[p] .. +rcounts[p]); counts in elements. */
    grm_status (*alltoallv)(void *inst, void *recv, const int64_t *rcounts,
                            const int64_t *rdispls, const void *send,
                            const int64_t *scounts, const int64_t *sdispls, int32_t dtype);

    /* (required) buf [count] of root copied to every rank. */
    grm_status (*broadcast)(void *inst, void *buf, int64_t count, int32_t dtype, int32_t root);

    /* (required) Wait until every rank arrives. */
    grm_status (*barrier)(void *inst);
} grm_comm_ops;

/* The communicator the host hands plugins through host->comm. */
typedef struct grm_comm_handle {
    const grm_comm_ops *ops;    /* static, from the comm plugin */
    void *inst;                 /* owned by the host */
} grm_comm_handle;

#ifdef __cplusplus
}
#endif
#endif /* GRM_COMM_H */
