/* plugins/comm-mpi/comm_args.c - argument checks shared by comm-mpi and comm-nccl (see
 * comm_args.h). Messages follow comm-single's, so a pipeline fails the same way on one
 * rank and on many. */
#include "comm_args.h"

#include <grm/comm.h>

grm_status comm_check_buf(const grm_host_api *host, const char *who, const char *op,
                          const void *inst, int32_t dtype, int64_t count, const void *buf,
                          size_t *elem)
{
    if (inst == NULL) return host->errorf(GRM_EINVAL, "%s: %s: inst is NULL", who, op);
    *elem = grm_dtype_size(dtype);
    if (*elem == 0)
        return host->errorf(GRM_EINVAL, "%s: %s: unknown dtype %d; expected a grm_dtype "
                            "(f32 1, f16 2, bf16 3, i32 4, i64 5, u8 6)", who, op, (int)dtype);
    if (count < 0)
        return host->errorf(GRM_EINVAL, "%s: %s: count %lld is negative", who, op,
                            (long long)count);
    if (count > 0 && buf == NULL)
        return host->errorf(GRM_EINVAL, "%s: %s: %lld elements at a NULL buffer", who, op,
                            (long long)count);
    return GRM_OK;
}

grm_status comm_check_reduce(const grm_host_api *host, const char *who, int32_t op)
{
    if (op != GRM_REDUCE_SUM && op != GRM_REDUCE_MAX && op != GRM_REDUCE_MIN)
        return host->errorf(GRM_EINVAL, "%s: allreduce: unknown reduce op %d; expected sum "
                            "(0), max (1) or min (2)", who, (int)op);
    return GRM_OK;
}

grm_status comm_check_root(const grm_host_api *host, const char *who, int32_t root,
                           int32_t size)
{
    if (root < 0 || root >= size)
        return host->errorf(GRM_EINVAL, "%s: broadcast: root %d outside [0, %d)", who,
                            (int)root, (int)size);
    return GRM_OK;
}

grm_status comm_check_alltoallv(const grm_host_api *host, const char *who, const void *inst,
                                int32_t size, const void *recv, const int64_t *rcounts,
                                const int64_t *rdispls, const void *send,
                                const int64_t *scounts, const int64_t *sdispls, int32_t dtype,
                                size_t *elem)
{
    const grm_status st = comm_check_buf(host, who, "alltoallv", inst, dtype, 0, NULL, elem);
    if (st != GRM_OK) return st;
    if (rcounts == NULL || rdispls == NULL || scounts == NULL || sdispls == NULL)
        return host->errorf(GRM_EINVAL, "%s: alltoallv: a count or displacement array is "
                            "NULL", who);
    int64_t sent = 0, received = 0;
    for (int32_t p = 0; p < size; p++) {
        if (scounts[p] < 0 || sdispls[p] < 0 || rcounts[p] < 0 || rdispls[p] < 0)
            return host->errorf(GRM_EINVAL, "%s: alltoallv: negative count or displacement "
                                "for peer %d (scount %lld, sdispl %lld, rcount %lld, "
                                "rdispl %lld)", who, (int)p, (long long)scounts[p],
                                (long long)sdispls[p], (long long)rcounts[p],
                                (long long)rdispls[p]);
        sent += scounts[p];
        received += rcounts[p];
    }
    if ((sent > 0 && send == NULL) || (received > 0 && recv == NULL))
        return host->errorf(GRM_EINVAL, "%s: alltoallv: %lld elements to send and %lld to "
                            "receive with a NULL %s buffer", who, (long long)sent,
                            (long long)received, sent > 0 && send == NULL ? "send" : "recv");
    return GRM_OK;
}
