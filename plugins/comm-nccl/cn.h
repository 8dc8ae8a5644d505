/* plugins/comm-nccl/cn.h - comm-nccl internals: the instance and the collectives over NCCL
 * on device buffers (cn_nccl.c). plugin.c checks arguments and calls these. */
#ifndef GRM_CN_H
#define GRM_CN_H

#include <stdint.h>

#include <cuda_runtime.h>
#include <mpi.h>
// nccl.h declares `ncclGetLastError()`-style functions without `void`; keep -Werror on ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include <grm/comm.h>
#include <grm/host.h>

/* [distributed] parameters, filled by the host from plugin.c's table. */
typedef struct cn_config {
    int64_t device;             /* CUDA ordinal; -1: node-local rank mod device count */
} cn_config;

/* One communicator: an ncclComm of every rank, bootstrapped over a private MPI_Comm_dup
 * of MPI_COMM_WORLD, and the CUDA stream its collectives run on. */
typedef struct cn_inst {
    const grm_host_api *host;   /* borrowed, for errorf and log */
    MPI_Comm mpi;               /* owned: the bootstrap communicator */
    ncclComm_t nccl;            /* owned: ncclCommDestroy at close */
    cudaStream_t stream;        /* owned: every collective runs here, then syncs */
    float *one;                 /* [1] device word the barrier all-reduces */
    int32_t rank;               /* in [0, size) */
    int32_t size;
    int32_t device;             /* the CUDA device this rank uses */
    int32_t owns_mpi;           /* 1: cn_open called MPI_Init_thread, cn_close finalizes */
} cn_inst;

/* Join the job: MPI (initialised when nobody has), pick the device, rank 0's
 * ncclGetUniqueId broadcast over MPI, ncclCommInitRank. Nothing left on failure. */
grm_status cn_open(cn_inst *c, const grm_host_api *host, const cn_config *config);

/* Destroy the NCCL communicator and the stream; finalize MPI when cn_open initialised it. */
void cn_close(cn_inst *c);

/* A device buffer, or GRM_EINVAL naming op when ptr is host memory. */
grm_status cn_check_device(const cn_inst *c, const char *op, const void *ptr);

/* The collectives of grm/comm.h on device buffers; synchronous (the stream is synced
 * before they return). Arguments are already checked by plugin.c. */
grm_status cn_allreduce(cn_inst *c, void *buf, int64_t count, int32_t dtype, int32_t op);
grm_status cn_allgather(cn_inst *c, void *recv, const void *send, int64_t count,
                        int32_t dtype);
grm_status cn_alltoallv(cn_inst *c, void *recv, const int64_t *rcounts, const int64_t *rdispls,
                        const void *send, const int64_t *scounts, const int64_t *sdispls,
                        int32_t dtype, size_t elem);
grm_status cn_broadcast(cn_inst *c, void *buf, int64_t count, int32_t dtype, int32_t root);
grm_status cn_barrier(cn_inst *c);

#endif /* GRM_CN_H */
