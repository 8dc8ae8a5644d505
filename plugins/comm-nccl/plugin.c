/* plugins/comm-nccl/plugin.c - comm-nccl, the communicator of GPU ranks (DESIGN.md §3, §6):
 * glue only. The same argument checks and messages as comm-mpi (../comm-mpi/comm_args.c),
 * plus: every buffer must be CUDA device memory. The collectives are in cn_nccl.c. */
#include <stddef.h>
#include <stdlib.h>

#include <grm/plugin.h>

#include "cn.h"
#include "comm_args.h"

static const grm_host_api *cn_host;

#define CN_WHO "comm-nccl"

static const grm_param_decl cn_params[] = {
    GRM_PARAM_DECL_INT(cn_config, device, "-1", GRM_PARAM_RANGE(-1, 1024),
                       "CUDA device of this rank; -1: the node-local rank modulo the device count"),
    GRM_PARAM_DECL_END
};

static grm_status cn_create(const void *config, void **inst)
{
    static const cn_config defaults = { .device = -1 };
    const cn_config *const cfg = config ? config : &defaults;
    if (inst == NULL) return cn_host->errorf(GRM_EINVAL, CN_WHO ": create: inst is NULL");
    *inst = NULL;
    cn_inst *c = malloc(sizeof(*c));
    if (c == NULL) return cn_host->errorf(GRM_ENOMEM, CN_WHO ": create: out of memory");
    const grm_status st = cn_open(c, cn_host, cfg);
    if (st != GRM_OK) {
        free(c);
        return st;
    }
    *inst = c;
    return GRM_OK;
}

static void cn_destroy(void *inst)
{
    if (inst == NULL) return;
    cn_close(inst);
    free(inst);
}

static int32_t cn_rank(void *inst)
{
    return inst ? ((const cn_inst *)inst)->rank : 0;
}

static int32_t cn_size(void *inst)
{
    return inst ? ((const cn_inst *)inst)->size : 1;
}

static grm_status cn_allreduce_op(void *inst, void *buf, int64_t count, int32_t dtype,
                                  int32_t op)
{
    size_t elem;
    grm_status st = comm_check_buf(cn_host, CN_WHO, "allreduce", inst, dtype, count, buf, &elem);
    if (st != GRM_OK || (st = comm_check_reduce(cn_host, CN_WHO, op)) != GRM_OK
        || (st = cn_check_device(inst, "allreduce", buf)) != GRM_OK)
        return st;
    return cn_allreduce(inst, buf, count, dtype, op);
}

static grm_status cn_allgather_op(void *inst, void *recv, const void *send, int64_t count,
                                  int32_t dtype)
{
    size_t elem;
    grm_status st = comm_check_buf(cn_host, CN_WHO, "allgather", inst, dtype, count, recv,
                                   &elem);
    if (st != GRM_OK) return st;
    if (count > 0 && send == NULL)
        return cn_host->errorf(GRM_EINVAL, CN_WHO ": allgather: send is NULL");
    if ((st = cn_check_device(inst, "allgather", recv)) != GRM_OK
        || (st = cn_check_device(inst, "allgather", send)) != GRM_OK)
        return st;
    return cn_allgather(inst, recv, send, count, dtype);
}

static grm_status cn_alltoallv_op(void *inst, void *recv, const int64_t *rcounts,
                                  const int64_t *rdispls, const void *send,
                                  const int64_t *scounts, const int64_t *sdispls, int32_t dtype)
{
    size_t elem;
    grm_status st = comm_check_alltoallv(cn_host, CN_WHO, inst, cn_size(inst), recv, rcounts,
                                         rdispls, send, scounts, sdispls, dtype, &elem);
    if (st != GRM_OK || (st = cn_check_device(inst, "alltoallv", recv)) != GRM_OK
        || (st = cn_check_device(inst, "alltoallv", send)) != GRM_OK)
        return st;
    return cn_alltoallv(inst, recv, rcounts, rdispls, send, scounts, sdispls, dtype, elem);
}

static grm_status cn_broadcast_op(void *inst, void *buf, int64_t count, int32_t dtype,
                                  int32_t root)
{
    size_t elem;
    grm_status st = comm_check_buf(cn_host, CN_WHO, "broadcast", inst, dtype, count, buf, &elem);
    if (st != GRM_OK || (st = comm_check_root(cn_host, CN_WHO, root, cn_size(inst))) != GRM_OK
        || (st = cn_check_device(inst, "broadcast", buf)) != GRM_OK)
        return st;
    return cn_broadcast(inst, buf, count, dtype, root);
}

static grm_status cn_barrier_op(void *inst)
{
    if (inst == NULL) return cn_host->errorf(GRM_EINVAL, CN_WHO ": barrier: inst is NULL");
    return cn_barrier(inst);
}

static const grm_comm_ops cn_ops = {
    .struct_size = sizeof(grm_comm_ops),
    .create = cn_create,
    .destroy = cn_destroy,
    .rank = cn_rank,
    .size = cn_size,
    .allreduce = cn_allreduce_op,
    .allgather = cn_allgather_op,
    .alltoallv = cn_alltoallv_op,
    .broadcast = cn_broadcast_op,
    .barrier = cn_barrier_op,
};

static const grm_plugin_info cn_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_COMM,
    .name = "comm-nccl",
    .version = "1.0.0",
    .description = "GPU ranks over NCCL (id bootstrapped over MPI): all collectives on "
                   "CUDA device buffers",
    .ops = &cn_ops,
    .params = cn_params,
    .config_size = sizeof(cn_config),
};

GRM_PLUGIN_DEFINE(cn_host, &cn_info);
