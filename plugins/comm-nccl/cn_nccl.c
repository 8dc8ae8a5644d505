/* plugins/comm-nccl/cn_nccl.c - the collectives of grm/comm.h over NCCL (DESIGN.md §6:
 * NCCL carries GPU collectives, its unique id bootstrapped over MPI). alltoallv is grouped
 * ncclSend/ncclRecv pairs between ncclGroupStart/End, the others are NCCL collectives,
 * barrier is a one-element all-reduce. Each call runs on the instance's stream and syncs
 * it before returning, so the ABI stays synchronous like comm-mpi's. */
#include <string.h>

#include "cn.h"

#define CN_WHO "comm-nccl"

static grm_status cn_cuda_fail(const cn_inst *c, const char *op, const char *expr,
                               cudaError_t e)
{
    return c->host->errorf(GRM_EDEVICE, CN_WHO ": %s: %s: %s (%s)", op, expr,
                           cudaGetErrorString(e), cudaGetErrorName(e));
}

static grm_status cn_nccl_fail(const cn_inst *c, const char *op, const char *expr,
                               ncclResult_t r)
{
    const char *last = c->nccl ? ncclGetLastError(c->nccl) : NULL;
    return c->host->errorf(GRM_EDEVICE, CN_WHO ": %s: %s: %s%s%s", op, expr,
                           ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

static grm_status cn_mpi_fail(const cn_inst *c, const char *op, int rc)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    text[len] = '\0';
    return c->host->errorf(GRM_EDEVICE, CN_WHO ": %s: MPI error %d: %s", op, rc, text);
}

#define CN_CUDA_CHECK(c, op, expr)                                                 \
    do {                                                                           \
        const cudaError_t cn_e_ = (expr);                                          \
        if (cn_e_ != cudaSuccess) return cn_cuda_fail((c), (op), #expr, cn_e_);    \
    } while (0)

#define CN_NCCL_CHECK(c, op, expr)                                                 \
    do {                                                                           \
        const ncclResult_t cn_r_ = (expr);                                         \
        if (cn_r_ != ncclSuccess) return cn_nccl_fail((c), (op), #expr, cn_r_);    \
    } while (0)

static ncclDataType_t cn_type(int32_t dtype)
{
    switch (dtype) {
    case GRM_DTYPE_F32: return ncclFloat32;
    case GRM_DTYPE_F16: return ncclFloat16;
    case GRM_DTYPE_BF16: return ncclBfloat16;
    case GRM_DTYPE_I32: return ncclInt32;
    case GRM_DTYPE_I64: return ncclInt64;
    default: return ncclUint8;
    }
}

static ncclRedOp_t cn_op(int32_t op)
{
    return op == GRM_REDUCE_MAX ? ncclMax : op == GRM_REDUCE_MIN ? ncclMin : ncclSum;
}

/* ---- open / close ---- */

// Pick the device: the configured one, or the node-local rank modulo the device count.
static grm_status cn_pick_device(cn_inst *c, int64_t want)
{
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return c->host->errorf(GRM_EDEVICE, CN_WHO ": create: no CUDA device (%s); use "
                               "comm-mpi for CPU ranks",
                               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if (want >= n)
        return c->host->errorf(GRM_EINVAL, CN_WHO ": create: device %lld outside [0, %d)",
                               (long long)want, n);
    if (want < 0) {
        MPI_Comm local;
        int lrank = 0, rc;
        if ((rc = MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                                      &local)) != MPI_SUCCESS)
            return cn_mpi_fail(c, "create: MPI_Comm_split_type", rc);
        MPI_Comm_rank(local, &lrank);
        MPI_Comm_free(&local);
        want = lrank % n;
    }
    c->device = (int32_t)want;
    CN_CUDA_CHECK(c, "create", cudaSetDevice(c->device));
    return GRM_OK;
}

static grm_status cn_open_nccl(cn_inst *c, const cn_config *config)
{
    grm_status st = cn_pick_device(c, config->device);
    if (st != GRM_OK) return st;
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (c->rank == 0) CN_NCCL_CHECK(c, "create", ncclGetUniqueId(&id));
    const int rc = MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, c->mpi);
    if (rc != MPI_SUCCESS) return cn_mpi_fail(c, "create: broadcasting the NCCL id", rc);
    CN_NCCL_CHECK(c, "create", ncclCommInitRank(&c->nccl, c->size, id, c->rank));
    CN_CUDA_CHECK(c, "create", cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CN_CUDA_CHECK(c, "create", cudaMalloc((void **)&c->one, sizeof(float)));
    CN_CUDA_CHECK(c, "create", cudaMemset(c->one, 0, sizeof(float)));
    return GRM_OK;
}

grm_status cn_open(cn_inst *c, const grm_host_api *host, const cn_config *config)
{
    int inited = 0, finalized = 0, provided = 0, rc;
    grm_status st;

    memset(c, 0, sizeof(*c));
    c->host = host;
    c->mpi = MPI_COMM_NULL;
    MPI_Finalized(&finalized);
    if (finalized)
        return host->errorf(GRM_EDEVICE, CN_WHO ": create: MPI is already finalized in this "
                            "process; MPI can be initialised only once per process");
    MPI_Initialized(&inited);
    if (!inited) {
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided)) != MPI_SUCCESS)
            return cn_mpi_fail(c, "create: MPI_Init_thread", rc);
        c->owns_mpi = 1;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi)) != MPI_SUCCESS) {
        c->mpi = MPI_COMM_NULL;
        st = cn_mpi_fail(c, "create: MPI_Comm_dup", rc);
        goto fail;
    }
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(c->mpi, &rank);
    MPI_Comm_size(c->mpi, &size);
    c->rank = rank;
    c->size = size;
    if ((st = cn_open_nccl(c, config)) != GRM_OK) goto fail;
    return GRM_OK;

fail:
    cn_close(c);
    return st;
}

void cn_close(cn_inst *c)
{
    if (c->one) cudaFree(c->one);
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->nccl) ncclCommDestroy(c->nccl);
    c->one = NULL;
    c->stream = NULL;
    c->nccl = NULL;
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    if (c->owns_mpi) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
        c->owns_mpi = 0;
    }
}

grm_status cn_check_device(const cn_inst *c, const char *op, const void *ptr)
{
    struct cudaPointerAttributes a;
    if (ptr == NULL) return GRM_OK;
    const cudaError_t e = cudaPointerGetAttributes(&a, ptr);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();   // clear the sticky-free error of this query
        return cn_cuda_fail(c, op, "cudaPointerGetAttributes", e);
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return c->host->errorf(GRM_EINVAL, CN_WHO ": %s: buffer %p is host memory; comm-nccl "
                               "works on CUDA device buffers (use comm-mpi for CPU ranks)",
                               op, ptr);
    return GRM_OK;
}

/* ---- collectives ---- */

static grm_status cn_sync(cn_inst *c, const char *op)
{
    CN_CUDA_CHECK(c, op, cudaStreamSynchronize(c->stream));
    return GRM_OK;
}

grm_status cn_allreduce(cn_inst *c, void *buf, int64_t count, int32_t dtype, int32_t op)
{
    if (count == 0) return GRM_OK;
    CN_NCCL_CHECK(c, "allreduce", ncclAllReduce(buf, buf, (size_t)count, cn_type(dtype),
                                                cn_op(op), c->nccl, c->stream));
    return cn_sync(c, "allreduce");
}

// In place when send is this rank's row of recv [size, count], as NCCL defines it.
grm_status cn_allgather(cn_inst *c, void *recv, const void *send, int64_t count,
                        int32_t dtype)
{
    if (count == 0) return GRM_OK;
    CN_NCCL_CHECK(c, "allgather", ncclAllGather(send, recv, (size_t)count, cn_type(dtype),
                                                c->nccl, c->stream));
    return cn_sync(c, "allgather");
}

grm_status cn_alltoallv(cn_inst *c, void *recv, const int64_t *rcounts, const int64_t *rdispls,
                        const void *send, const int64_t *scounts, const int64_t *sdispls,
                        int32_t dtype, size_t elem)
{
    const ncclDataType_t type = cn_type(dtype);
    CN_NCCL_CHECK(c, "alltoallv", ncclGroupStart());
    for (int32_t p = 0; p < c->size; p++) {
        ncclResult_t r = ncclSuccess;
        if (scounts[p] > 0)
            r = ncclSend((const char *)send + (size_t)sdispls[p] * elem, (size_t)scounts[p],
                         type, p, c->nccl, c->stream);
        if (r == ncclSuccess && rcounts[p] > 0)
            r = ncclRecv((char *)recv + (size_t)rdispls[p] * elem, (size_t)rcounts[p], type,
                         p, c->nccl, c->stream);
        if (r != ncclSuccess) {
            (void)ncclGroupEnd();
            return cn_nccl_fail(c, "alltoallv", "ncclSend/ncclRecv", r);
        }
    }
    CN_NCCL_CHECK(c, "alltoallv", ncclGroupEnd());
    return cn_sync(c, "alltoallv");
}

grm_status cn_broadcast(cn_inst *c, void *buf, int64_t count, int32_t dtype, int32_t root)
{
    if (count == 0) return GRM_OK;
    CN_NCCL_CHECK(c, "broadcast", ncclBroadcast(buf, buf, (size_t)count, cn_type(dtype), root,
                                                c->nccl, c->stream));
    return cn_sync(c, "broadcast");
}

grm_status cn_barrier(cn_inst *c)
{
    CN_NCCL_CHECK(c, "barrier", ncclAllReduce(c->one, c->one, 1, ncclFloat32, ncclSum, c->nccl,
                                              c->stream));
    return cn_sync(c, "barrier");
}
