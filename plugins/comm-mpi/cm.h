/* plugins/comm-mpi/cm.h - comm-mpi internals: the instance, its configuration and the
 * collectives over MPI (cm_mpi.c). plugin.c checks arguments and calls these. */
#ifndef GRM_CM_H
#define GRM_CM_H

#include <stdint.h>

#include <mpi.h>

#include <grm/comm.h>
#include <grm/host.h>

/* [comm] parameters, filled by the host from plugin.c's table. */
typedef struct cm_config {
    int64_t max_count;          /* most elements per MPI call, in [1, INT_MAX] */
    int32_t check_counts;       /* 1: alltoallv verifies send/receive counts agree */
} cm_config;

/* One communicator: a private MPI_Comm_dup of MPI_COMM_WORLD, so traffic of two
 * instances (or of the host's own MPI use) never matches across them. */
typedef struct cm_inst {
    const grm_host_api *host;   /* borrowed, for errorf and log */
    MPI_Comm comm;              /* owned: MPI_Comm_free at close; errors return */
    int32_t rank;               /* in [0, size) */
    int32_t size;
    int32_t owns_mpi;           /* 1: cm_open called MPI_Init_thread, cm_close finalizes */
    int32_t check_counts;
    int64_t max_count;
    MPI_Op half_ops[2][3];      /* [bf16, f16][sum, max, min] user ops on MPI_UINT16_T */
    int *iargs;                 /* [4 * size] int counts/displs for MPI_Alltoallv */
    int64_t *xcounts;           /* [size + 4 * size] count exchange of check_counts */
    MPI_Request *reqs;          /* [2 * size] chunked point-to-point alltoallv */
} cm_inst;

/* Join the job: initialise MPI when nobody has, duplicate MPI_COMM_WORLD. On failure
 * nothing is left allocated (and MPI is finalized again if this call initialised it). */
grm_status cm_open(cm_inst *c, const grm_host_api *host, const cm_config *config);

/* Free the communicator; finalize MPI when cm_open initialised it. */
void cm_close(cm_inst *c);

/* The collectives of grm/comm.h; arguments are already checked by plugin.c. */
grm_status cm_allreduce(cm_inst *c, void *buf, int64_t count, int32_t dtype, int32_t op,
                        size_t elem);
grm_status cm_allgather(cm_inst *c, void *recv, const void *send, int64_t count,
                        int32_t dtype, size_t elem);
grm_status cm_alltoallv(cm_inst *c, void *recv, const int64_t *rcounts, const int64_t *rdispls,
                        const void *send, const int64_t *scounts, const int64_t *sdispls,
                        int32_t dtype, size_t elem);
grm_status cm_broadcast(cm_inst *c, void *buf, int64_t count, int32_t dtype, int32_t root,
                        size_t elem);
grm_status cm_barrier(cm_inst *c);

/* Half precision <-> float (cm_half.c): round to nearest even, NaN stays NaN. */
float cm_bf16_to_f32(uint16_t h);
uint16_t cm_f32_to_bf16(float f);
float cm_f16_to_f32(uint16_t h);
uint16_t cm_f32_to_f16(float f);

/* MPI user reductions on MPI_UINT16_T holding bf16 or f16 (cm_half.c). */
void cm_op_bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type);
void cm_op_bf16_max(void *in, void *inout, int *len, MPI_Datatype *type);
void cm_op_bf16_min(void *in, void *inout, int *len, MPI_Datatype *type);
void cm_op_f16_sum(void *in, void *inout, int *len, MPI_Datatype *type);
void cm_op_f16_max(void *in, void *inout, int *len, MPI_Datatype *type);
void cm_op_f16_min(void *in, void *inout, int *len, MPI_Datatype *type);

#endif /* GRM_CM_H */
