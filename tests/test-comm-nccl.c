/* tests/test-comm-nccl.c - comm-nccl on CUDA device buffers: every collective and dtype
 * with the checks of tests/comm-checks.h (values each rank computes alone), a second
 * instance, and the argument errors (host memory, bad device, dtype, op, root). Without a
 * usable CUDA device (no GPU, no driver, cudaErrorInsufficientDriver, ...) it prints
 * "1..0 # SKIP no CUDA device". Run it alone (1 rank) or one rank per GPU:
 *   mpirun -n NGPUS tests/test-comm-nccl   (GRM_TAP_DIR=DIR: rank r writes DIR/rank-r.tap) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include <grm/comm.h>

#include "comm-checks.h"
#include "harness.h"
#include "tap.h"

static char *dbuf[2];          // [4096] bytes each: the send and receive slots on the device

static void *dev_in(int slot, const void *host, size_t bytes)
{
    if (cudaMemcpy(dbuf[slot], host, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        tap_diag("cudaMemcpy to the device failed");
    return dbuf[slot];
}

static void dev_out(void *host, int slot, size_t bytes)
{
    if (cudaMemcpy(host, dbuf[slot], bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        tap_diag("cudaMemcpy from the device failed");
}

int main(void)
{
    int ndev = 0;
    // Any error here (no device, no or too old a driver) means there is nothing to test.
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) tap_skip_all("no CUDA device");
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (ls != NULL && atoi(ls) > ndev) {
        printf("1..0 # SKIP %s ranks on this node but %d CUDA devices; NCCL needs one GPU "
               "per rank\n", ls, ndev);
        return 0;
    }
    const grm_plugin_info *info = harness_plugin("comm-nccl");
    ops = info->ops;
    mv = (cc_mover){ dev_in, dev_out };
    void *c = NULL, *c2 = NULL;
    if (ops->create(NULL, &c) != GRM_OK) {
        printf("1..1\nnot ok 1 - create: %s\n", harness_host()->last_error());
        return 1;
    }
    me = ops->rank(c);
    R = ops->size(c);
    const char *dir = getenv("GRM_TAP_DIR");
    if (dir != NULL) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank-%d.tap", dir, (int)me);
        if (freopen(path, "w", stdout) == NULL) return 1;
    }
    tap_plan(29);
    if (R > 4) tap_diag("more than 4 ranks: buffers are sized for 4");
    if (cudaMalloc((void **)&dbuf[0], 4096) != cudaSuccess
        || cudaMalloc((void **)&dbuf[1], 4096) != cudaSuccess) {
        printf("Bail out! cudaMalloc of 8 KiB failed\n");
        return 1;
    }

    tap_ok(info->kind == GRM_KIND_COMM && !strcmp(info->name, "comm-nccl"),
           "comm-nccl is a comm plugin");
    const char *er = getenv("OMPI_COMM_WORLD_RANK"), *es = getenv("OMPI_COMM_WORLD_SIZE");
    tap_ok(me == (er ? atoi(er) : 0) && R == (es ? atoi(es) : 1) && R <= 4,
           "rank %d of %d matches mpirun's OMPI_COMM_WORLD_RANK/SIZE", (int)me, (int)R);
    int cur = -1;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    tap_ok(cudaGetDevice(&cur) == cudaSuccess && cur == (lr ? atoi(lr) : 0) % ndev,
           "device -1 picks the node-local rank modulo %d devices (got %d)", ndev, cur);

    for (int d = 0; d < 6; d++) {
        tap_ok(check_allreduce(c, dtypes[d], 11, "nccl"), "allreduce sum/max/min of 11 %s over "
               "%d ranks", dnames[dtypes[d]], (int)R);
    }
    int ok = 1;
    for (int d = 0; d < 6; d++) ok &= check_allgather(c, dtypes[d], 5, 0, "nccl");
    tap_ok(ok, "allgather of 5 elements per rank, every dtype");
    ok = 1;
    for (int d = 0; d < 6; d++) ok &= check_allgather(c, dtypes[d], 5, 1, "nccl");
    tap_ok(ok, "allgather in place (send is this rank's row of recv)");
    tap_ok(ops->allgather(c, NULL, NULL, 0, GRM_DTYPE_F32) == GRM_OK,
           "allgather of 0 elements with NULL buffers");
    static const int32_t adt[] = { GRM_DTYPE_I64, GRM_DTYPE_F32, GRM_DTYPE_I32, GRM_DTYPE_U8,
                                   GRM_DTYPE_BF16 };
    for (int d = 0; d < 5; d++) {
        tap_ok(check_alltoallv(c, adt[d], 2, "nccl"), "alltoallv of %s with uneven counts "
               "including 0, gaps kept (grouped ncclSend/ncclRecv)", dnames[adt[d]]);
    }
    const int64_t z[4] = { 0, 0, 0, 0 };
    tap_ok(ops->alltoallv(c, NULL, z, z, NULL, z, z, GRM_DTYPE_F32) == GRM_OK,
           "alltoallv with all counts 0 and NULL buffers");
    tap_ok(check_broadcast(c, 7, "nccl"), "broadcast of i64, f32, bf16, u8 from every root");
    tap_ok(ops->barrier(c) == GRM_OK, "barrier");

    // A second communicator on this rank's device named explicitly, used between calls on
    // the first.
    char dkey[64];
    snprintf(dkey, sizeof dkey, "device=%d", cur);
    const void *cfg2 = harness_config(info, dkey, NULL);
    tap_ok(ops->create(cfg2, &c2) == GRM_OK && ops->rank(c2) == me && ops->size(c2) == R,
           "a second instance (%s) joins with the same rank and size", dkey);
    tap_ok(c2 != NULL && check_allreduce(c2, GRM_DTYPE_F32, 11, "second")
           && check_allreduce(c, GRM_DTYPE_I64, 11, "first"),
           "collectives on the two instances interleave");

    // Errors.
    float hostf[4] = { 0 };
    tap_ok(ops->allreduce(c, hostf, 4, GRM_DTYPE_F32, GRM_REDUCE_SUM) == GRM_EINVAL
           && has("comm-nccl: allreduce: buffer") && has("is host memory"),
           "allreduce of a host buffer: GRM_EINVAL");
    tap_ok(ops->broadcast(c, hostf, 4, GRM_DTYPE_F32, 0) == GRM_EINVAL
           && has("comm-nccl: broadcast: buffer") && has("is host memory"),
           "broadcast of a host buffer: GRM_EINVAL");
    tap_ok(ops->allreduce(c, dbuf[0], 4, 42, GRM_REDUCE_SUM) == GRM_EINVAL
           && has("comm-nccl: allreduce: unknown dtype 42"), "allreduce with dtype 42");
    tap_ok(ops->allreduce(c, dbuf[0], 4, GRM_DTYPE_F32, 7) == GRM_EINVAL
           && has("comm-nccl: allreduce: unknown reduce op 7"), "allreduce with op 7");
    tap_ok(ops->broadcast(c, dbuf[0], 4, GRM_DTYPE_F32, R) == GRM_EINVAL
           && has("outside [0, "), "broadcast from root %d: GRM_EINVAL", (int)R);
    {
        int64_t one[4] = { 1, 1, 1, 1 };
        tap_ok(ops->alltoallv(c, dbuf[1], one, z, hostf, one, z, GRM_DTYPE_F32) == GRM_EINVAL
               && has("comm-nccl: alltoallv: buffer") && has("is host memory"),
               "alltoallv from a host send buffer: GRM_EINVAL");
    }
    void *c3 = NULL;
    char key[64];
    snprintf(key, sizeof key, "device=%d", ndev);
    const void *cfg3 = harness_config(info, key, NULL);
    char want[64];
    snprintf(want, sizeof want, "device %d outside [0, %d)", ndev, ndev);
    tap_ok(ops->create(cfg3, &c3) == GRM_EINVAL && c3 == NULL && has(want),
           "create with device=%d of %d: GRM_EINVAL", ndev, ndev);

    ops->destroy(c2);
    ops->destroy(c);
    ops->destroy(NULL);
    cudaFree(dbuf[0]);
    cudaFree(dbuf[1]);
    return tap_done();
}
