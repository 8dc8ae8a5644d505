/* plugins/comm-single/plugin.c - comm-single, the communicator of a job with one rank
 * (DESIGN.md §3, §6): rank 0 of 1. Every collective reduces to a copy or to nothing, but
 * arguments are checked as a real communicator would check them, so a pipeline that runs
 * here fails the same way under comm-mpi. The whole plugin is glue, so it is one file. */
#include <stdlib.h>
#include <string.h>

#include <grm/comm.h>
#include <grm/plugin.h>

#include "comm_args.h"

static const grm_host_api *cs_host;

/* The instance carries nothing; it exists so create/destroy behave like other comms. */
typedef struct cs_inst {
    int32_t rank;              /* always 0 */
} cs_inst;

/* Check inst, dtype, count and buffer (comm-mpi's comm_args.c, shared by every comm so
 * they fail alike); *elem gets the element size. */
static grm_status cs_check(const char *op, void *inst, int32_t dtype, int64_t count,
                           const void *buf, size_t *elem)
{
    return comm_check_buf(cs_host, "comm-single", op, inst, dtype, count, buf, elem);
}

static grm_status cs_create(const void *config, void **inst)
{
    (void)config;
    if (inst == NULL) return cs_host->errorf(GRM_EINVAL, "comm-single: create: inst is NULL");
    *inst = calloc(1, sizeof(cs_inst));
    if (*inst == NULL) return cs_host->errorf(GRM_ENOMEM, "comm-single: create: out of memory");
    return GRM_OK;
}

static void cs_destroy(void *inst)
{
    free(inst);
}

static int32_t cs_rank(void *inst)
{
    (void)inst;
    return 0;
}

static int32_t cs_size(void *inst)
{
    (void)inst;
    return 1;
}

/* The reduction over one rank is the identity: buf is already the result. */
static grm_status cs_allreduce(void *inst, void *buf, int64_t count, int32_t dtype,
                               int32_t op)
{
    size_t elem;
    const grm_status st = cs_check("allreduce", inst, dtype, count, buf, &elem);
    if (st != GRM_OK) return st;
    if (op != GRM_REDUCE_SUM && op != GRM_REDUCE_MAX && op != GRM_REDUCE_MIN)
        return cs_host->errorf(GRM_EINVAL, "comm-single: allreduce: unknown reduce op %d; "
                               "expected sum (0), max (1) or min (2)", (int)op);
    return GRM_OK;
}

/* recv [1 * count] = send [count]. */
static grm_status cs_allgather(void *inst, void *recv, const void *send, int64_t count,
                               int32_t dtype)
{
    size_t elem;
    grm_status st = cs_check("allgather", inst, dtype, count, recv, &elem);
    if (st != GRM_OK) return st;
    if (count > 0 && send == NULL)
        return cs_host->errorf(GRM_EINVAL, "comm-single: allgather: send is NULL");
    if (count > 0 && recv != send) memmove(recv, send, (size_t)count * elem);
    return GRM_OK;
}

/* The one peer is this rank: recv[rdispls[0] ..] = send[sdispls[0] .. + scounts[0]). */
static grm_status cs_alltoallv(void *inst, void *recv, const int64_t *rcounts,
                               const int64_t *rdispls, const void *send,
                               const int64_t *scounts, const int64_t *sdispls, int32_t dtype)
{
    size_t elem;
    grm_status st = cs_check("alltoallv", inst, dtype, 0, NULL, &elem);
    if (st != GRM_OK) return st;
    if (rcounts == NULL || rdispls == NULL || scounts == NULL || sdispls == NULL)
        return cs_host->errorf(GRM_EINVAL, "comm-single: alltoallv: a count or displacement "
                               "array is NULL");
    if (scounts[0] != rcounts[0])
        return cs_host->errorf(GRM_EINVAL, "comm-single: alltoallv: rank 0 sends %lld "
                               "elements to itself but expects to receive %lld; "
                               "scounts[0] must equal rcounts[0]",
                               (long long)scounts[0], (long long)rcounts[0]);
    if (scounts[0] < 0 || sdispls[0] < 0 || rdispls[0] < 0)
        return cs_host->errorf(GRM_EINVAL, "comm-single: alltoallv: negative count or "
                               "displacement (count %lld, sdispl %lld, rdispl %lld)",
                               (long long)scounts[0], (long long)sdispls[0],
                               (long long)rdispls[0]);
    if (scounts[0] == 0) return GRM_OK;
    if (send == NULL || recv == NULL)
        return cs_host->errorf(GRM_EINVAL, "comm-single: alltoallv: %lld elements with a NULL "
                               "send or recv buffer", (long long)scounts[0]);
    memmove((char *)recv + (size_t)rdispls[0] * elem,
            (const char *)send + (size_t)sdispls[0] * elem, (size_t)scounts[0] * elem);
    return GRM_OK;
}

/* Only rank 0 exists, so only it can be the root; its buffer is already everyone's. */
static grm_status cs_broadcast(void *inst, void *buf, int64_t count, int32_t dtype,
                               int32_t root)
{
    size_t elem;
    const grm_status st = cs_check("broadcast", inst, dtype, count, buf, &elem);
    if (st != GRM_OK) return st;
    if (root != 0)
        return cs_host->errorf(GRM_EINVAL, "comm-single: broadcast: root %d outside [0, 1); "
                               "a single-rank job has only rank 0", (int)root);
    return GRM_OK;
}

static grm_status cs_barrier(void *inst)
{
    if (inst == NULL) return cs_host->errorf(GRM_EINVAL, "comm-single: barrier: inst is NULL");
    return GRM_OK;
}

static const grm_comm_ops cs_ops = {
    .struct_size = sizeof(grm_comm_ops),
    .create = cs_create,
    .destroy = cs_destroy,
    .rank = cs_rank,
    .size = cs_size,
    .allreduce = cs_allreduce,
    .allgather = cs_allgather,
    .alltoallv = cs_alltoallv,
    .broadcast = cs_broadcast,
    .barrier = cs_barrier,
};

static const grm_plugin_info cs_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_COMM,
    .name = "comm-single",
    .version = "1.0.0",
    .description = "a world of one: rank 0 of 1, collectives are copies or no-ops",
    .ops = &cs_ops,
    .params = NULL,
    .config_size = 0,
};

GRM_PLUGIN_DEFINE(cs_host, &cs_info);
