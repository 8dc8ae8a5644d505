/* plugins/comm-mpi/plugin.c - comm-mpi, the communicator of CPU ranks launched by mpirun
 * (DESIGN.md §3, §6): glue only. Arguments are checked here (comm_args.c, the same
 * messages as comm-single and comm-nccl); the collectives are in cm_mpi.c. */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>

#include <grm/plugin.h>

#include "cm.h"
#include "comm_args.h"

static const grm_host_api *cm_host;

#define CM_WHO "comm-mpi"

static const grm_param_decl cm_params[] = {
    GRM_PARAM_DECL_INT(cm_config, max_count, "2147483647", GRM_PARAM_RANGE(1, INT_MAX),
                       "most elements per MPI call (MPI counts are int); longer collectives are "
                       "split"),
    GRM_PARAM_DECL_BOOL(cm_config, check_counts, "false",
                        "alltoallv first exchanges counts and fails on every rank if a peer "
                        "sends a different number of elements than this rank expects (one extra "
                        "collective)"),
    GRM_PARAM_DECL_END
};

static grm_status cm_create(const void *config, void **inst)
{
    static const cm_config defaults = { .max_count = INT_MAX, .check_counts = 0 };
    const cm_config *const cfg = config ? config : &defaults;
    if (inst == NULL) return cm_host->errorf(GRM_EINVAL, CM_WHO ": create: inst is NULL");
    *inst = NULL;
    if (cfg->max_count < 1 || cfg->max_count > INT_MAX)
        return cm_host->errorf(GRM_EINVAL, CM_WHO ": create: max_count %lld outside [1, %d]",
                               (long long)cfg->max_count, INT_MAX);
    cm_inst *c = malloc(sizeof(*c));
    if (c == NULL) return cm_host->errorf(GRM_ENOMEM, CM_WHO ": create: out of memory");
    const grm_status st = cm_open(c, cm_host, cfg);
    if (st != GRM_OK) {
        free(c);
        return st;
    }
    *inst = c;
    return GRM_OK;
}

static void cm_destroy(void *inst)
{
    if (inst == NULL) return;
    cm_close(inst);
    free(inst);
}

static int32_t cm_rank(void *inst)
{
    return inst ? ((const cm_inst *)inst)->rank : 0;
}

static int32_t cm_size(void *inst)
{
    return inst ? ((const cm_inst *)inst)->size : 1;
}

static grm_status cm_allreduce_op(void *inst, void *buf, int64_t count, int32_t dtype,
                                  int32_t op)
{
    size_t elem;
    grm_status st = comm_check_buf(cm_host, CM_WHO, "allreduce", inst, dtype, count, buf, &elem);
    if (st != GRM_OK || (st = comm_check_reduce(cm_host, CM_WHO, op)) != GRM_OK) return st;
    return cm_allreduce(inst, buf, count, dtype, op, elem);
}

static grm_status cm_allgather_op(void *inst, void *recv, const void *send, int64_t count,
                                  int32_t dtype)
{
    size_t elem;
    const grm_status st = comm_check_buf(cm_host, CM_WHO, "allgather", inst, dtype, count,
                                         recv, &elem);
    if (st != GRM_OK) return st;
    if (count > 0 && send == NULL)
        return cm_host->errorf(GRM_EINVAL, CM_WHO ": allgather: send is NULL");
    return cm_allgather(inst, recv, send, count, dtype, elem);
}

static grm_status cm_alltoallv_op(void *inst, void *recv, const int64_t *rcounts,
                                  const int64_t *rdispls, const void *send,
                                  const int64_t *scounts, const int64_t *sdispls, int32_t dtype)
{
    size_t elem;
    const grm_status st = comm_check_alltoallv(cm_host, CM_WHO, inst, cm_size(inst), recv,
                                               rcounts, rdispls, send, scounts, sdispls, dtype,
                                               &elem);
    if (st != GRM_OK) return st;
    return cm_alltoallv(inst, recv, rcounts, rdispls, send, scounts, sdispls, dtype, elem);
}

static grm_status cm_broadcast_op(void *inst, void *buf, int64_t count, int32_t dtype,
                                  int32_t root)
{
    size_t elem;
    grm_status st = comm_check_buf(cm_host, CM_WHO, "broadcast", inst, dtype, count, buf, &elem);
    if (st != GRM_OK || (st = comm_check_root(cm_host, CM_WHO, root, cm_size(inst))) != GRM_OK)
        return st;
    return cm_broadcast(inst, buf, count, dtype, root, elem);
}

static grm_status cm_barrier_op(void *inst)
{
    if (inst == NULL) return cm_host->errorf(GRM_EINVAL, CM_WHO ": barrier: inst is NULL");
    return cm_barrier(inst);
}

static const grm_comm_ops cm_ops = {
    .struct_size = sizeof(grm_comm_ops),
    .create = cm_create,
    .destroy = cm_destroy,
    .rank = cm_rank,
    .size = cm_size,
    .allreduce = cm_allreduce_op,
    .allgather = cm_allgather_op,
    .alltoallv = cm_alltoallv_op,
    .broadcast = cm_broadcast_op,
    .barrier = cm_barrier_op,
};

static const grm_plugin_info cm_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_COMM,
    .name = "comm-mpi",
    .version = "1.0.0",
    .description = "CPU ranks over MPI (mpirun / grmhost launch): all collectives on host "
                   "buffers",
    .ops = &cm_ops,
    .params = cm_params,
    .config_size = sizeof(cm_config),
};

GRM_PLUGIN_DEFINE(cm_host, &cm_info);
