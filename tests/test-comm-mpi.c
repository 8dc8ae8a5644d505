/* tests/test-comm-mpi.c - comm-mpi, run under mpirun by tests/test-comm-mpi.sh at 1, 2 and
 * 4 ranks. Every collective, every dtype, both the plain MPI path and the split path
 * (max_count=3), uneven alltoallv counts with zeros and gaps; each rank checks its result
 * against values it computes alone from (rank, peer, index). Then every argument error,
 * an alltoallv count mismatch (check_counts), an MPI error's text (a truncated receive) and
 * create after MPI_Finalize. With GRM_TAP_DIR set, rank r writes its TAP to
 * GRM_TAP_DIR/rank-r.tap (the script merges them); otherwise to stdout. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grm/comm.h>

#include "comm-checks.h"
#include "harness.h"
#include "tap.h"

/* GRM_TEST_LOOP=DIR: write DIR/pid-R, then allreduce until one fails (a peer died) or ten
 * minutes pass; DIR/loops-R shows progress. tests/test-comm-mpi.sh kills one rank and
 * times how long mpirun takes to end the job. */
static int run_loop(void *c, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/pid-%d", dir, (int)me);
    FILE *f = fopen(path, "w");
    if (f == NULL) return 1;
    fprintf(f, "%ld\n", (long)getpid());
    fclose(f);
    static float buf[1024];
    const time_t stop = time(NULL) + 600;
    for (long it = 1; time(NULL) < stop; it++) {
        if (ops->allreduce(c, buf, 1024, GRM_DTYPE_F32, GRM_REDUCE_SUM) != GRM_OK) {
            fprintf(stderr, "rank %d: %s\n", (int)me, harness_host()->last_error());
            return 1;
        }
        if (it % 1000 == 0) {
            /* written aside and renamed, so the watching script never reads it empty */
            char done[sizeof path];
            snprintf(path, sizeof path, "%s/loops-%d.tmp", dir, (int)me);
            snprintf(done, sizeof done, "%s/loops-%d", dir, (int)me);
            if ((f = fopen(path, "w")) != NULL) {
                fprintf(f, "%ld\n", it);
                fclose(f);
                rename(path, done);
            }
        }
    }
    return 1;
}

// CPU buffers: the collectives work on the host buffers themselves.
static void *host_dev(int slot, const void *host, size_t bytes)
{
    (void)slot, (void)bytes;
    return (void *)(uintptr_t)host;
}

static void host_back(void *host, int slot, size_t bytes)
{
    (void)host, (void)slot, (void)bytes;
}

int main(void)
{
    mv = (cc_mover){ host_dev, host_back };
    const grm_plugin_info *info = harness_plugin("comm-mpi");
    ops = info->ops;
    void *c = NULL, *c2 = NULL;
    if (ops->create(NULL, &c) != GRM_OK) {
        printf("1..1\nnot ok 1 - create: %s\n", harness_host()->last_error());
        return 1;
    }
    me = ops->rank(c);
    R = ops->size(c);
    if (getenv("GRM_TEST_LOOP") != NULL) return run_loop(c, getenv("GRM_TEST_LOOP"));
    const char *dir = getenv("GRM_TAP_DIR");
    if (dir != NULL) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank-%d.tap", dir, (int)me);
        if (freopen(path, "w", stdout) == NULL) return 1;
    }
    tap_plan(48);
    if (R > 4) tap_diag("more than 4 ranks: buffers are sized for 4");

    tap_ok(info->kind == GRM_KIND_COMM && !strcmp(info->name, "comm-mpi")
           && info->params != NULL, "comm-mpi is a comm plugin with parameters");
    // mpirun tells each process its place; a singleton run is rank 0 of 1.
    const char *er = getenv("OMPI_COMM_WORLD_RANK"), *es = getenv("OMPI_COMM_WORLD_SIZE");
    tap_ok(me == (er ? atoi(er) : 0) && R == (es ? atoi(es) : 1) && R <= 4,
           "rank %d of %d matches mpirun's OMPI_COMM_WORLD_RANK/SIZE", (int)me, (int)R);
    const void *cfg2 = harness_config(info, "max_count=3", "check_counts=true", NULL);
    tap_ok(ops->create(cfg2, &c2) == GRM_OK && ops->rank(c2) == me && ops->size(c2) == R,
           "a second instance (max_count=3, check_counts) joins with the same rank and size");

    // allreduce: 11 elements = 4 pieces of <= 3 on the second instance.
    void *const insts[2] = { c, c2 };
    const char *const inames[2] = { "MPI path", "split path" };
    for (int k = 0; k < 2; k++) {
        for (int d = 0; d < 6; d++) {
            tap_ok(check_allreduce(insts[k], dtypes[d], 11, inames[k]),
                   "allreduce sum/max/min of 11 %s over %d ranks (%s)", dnames[dtypes[d]],
                   (int)R, inames[k]);
        }
    }

    // allgather: 5 elements per rank (2 pieces on the second instance).
    for (int k = 0; k < 2; k++) {
        int ok = 1;
        for (int d = 0; d < 6; d++) ok &= check_allgather(insts[k], dtypes[d], 5, 0, inames[k]);
        tap_ok(ok, "allgather of 5 elements per rank, every dtype (%s)", inames[k]);
        ok = 1;
        for (int d = 0; d < 6; d++) ok &= check_allgather(insts[k], dtypes[d], 5, 1, inames[k]);
        tap_ok(ok, "allgather in place (send is this rank's row of recv) (%s)", inames[k]);
        tap_ok(ops->allgather(insts[k], NULL, NULL, 0, GRM_DTYPE_F32) == GRM_OK,
               "allgather of 0 elements with NULL buffers (%s)", inames[k]);
    }

    // alltoallv: counts (r + 2p + 1) % 4 times 2; up to 6 > max_count 3 goes point to point.
    static const int32_t adt[] = { GRM_DTYPE_I64, GRM_DTYPE_F32, GRM_DTYPE_I32, GRM_DTYPE_U8,
                                   GRM_DTYPE_BF16 };
    for (int k = 0; k < 2; k++) {
        for (int d = 0; d < 5; d++) {
            tap_ok(check_alltoallv(insts[k], adt[d], 2, inames[k]),
                   "alltoallv of %s with uneven counts including 0, gaps kept (%s)",
                   dnames[adt[d]], inames[k]);
        }
    }
    {
        const int64_t z[4] = { 0, 0, 0, 0 };
        tap_ok(ops->alltoallv(c, NULL, z, z, NULL, z, z, GRM_DTYPE_F32) == GRM_OK,
               "alltoallv with all counts 0 and NULL buffers");
    }

    // broadcast from every root; 7 elements = 3 pieces on the second instance.
    for (int k = 0; k < 2; k++) {
        tap_ok(check_broadcast(insts[k], 7, inames[k]),
               "broadcast of i64, f32, bf16, u8 from every root (%s)", inames[k]);
    }
    tap_ok(ops->barrier(c) == GRM_OK && ops->barrier(c2) == GRM_OK, "barrier on both");

    // Argument errors: found on this rank before any communication.
    float f[4] = { 0 };
    tap_ok(ops->allreduce(c, f, 4, 42, GRM_REDUCE_SUM) == GRM_EINVAL
           && has("comm-mpi: allreduce: unknown dtype 42"), "allreduce with dtype 42: GRM_EINVAL");
    tap_ok(ops->allreduce(c, f, 4, GRM_DTYPE_F32, 7) == GRM_EINVAL
           && has("comm-mpi: allreduce: unknown reduce op 7"), "allreduce with op 7: GRM_EINVAL");
    tap_ok(ops->allreduce(c, f, -1, GRM_DTYPE_F32, GRM_REDUCE_SUM) == GRM_EINVAL
           && has("count -1 is negative"), "allreduce of -1 elements: GRM_EINVAL");
    tap_ok(ops->allreduce(c, NULL, 3, GRM_DTYPE_F32, GRM_REDUCE_SUM) == GRM_EINVAL
           && has("3 elements at a NULL buffer"), "allreduce of 3 elements at NULL: GRM_EINVAL");
    tap_ok(ops->broadcast(c, f, 4, GRM_DTYPE_F32, R) == GRM_EINVAL
           && has("broadcast: root") && has("outside [0, "), "broadcast from root %d: "
           "GRM_EINVAL", (int)R);
    tap_ok(ops->broadcast(c, f, 4, GRM_DTYPE_F32, -1) == GRM_EINVAL
           && has("broadcast: root -1 outside"), "broadcast from root -1: GRM_EINVAL");
    tap_ok(ops->allgather(c, f, NULL, 1, GRM_DTYPE_F32) == GRM_EINVAL
           && has("comm-mpi: allgather: send is NULL"), "allgather with NULL send: GRM_EINVAL");
    {
        int64_t one[4] = { 1, 1, 1, 1 }, zero[4] = { 0, 0, 0, 0 }, neg[4] = { 0, 0, 0, 0 };
        neg[R - 1] = -2;
        tap_ok(ops->alltoallv(c, f, one, zero, f, NULL, zero, GRM_DTYPE_F32) == GRM_EINVAL
               && has("a count or displacement array is NULL"),
               "alltoallv with NULL scounts: GRM_EINVAL");
        tap_ok(ops->alltoallv(c, f, one, zero, f, neg, zero, GRM_DTYPE_F32) == GRM_EINVAL
               && has("negative count or displacement for peer"),
               "alltoallv with scounts[%d] -2: GRM_EINVAL", (int)(R - 1));
        tap_ok(ops->alltoallv(c, f, one, zero, NULL, one, zero, GRM_DTYPE_F32) == GRM_EINVAL
               && has("with a NULL send buffer"), "alltoallv with NULL send: GRM_EINVAL");

        // check_counts: rank 0 expects 2 elements from the last rank, which sends 1.
        float s1[4] = { 1, 2, 3, 4 }, r1[8] = { 0 };
        int64_t rc[4] = { 1, 1, 1, 1 }, rd[4] = { 0, 2, 4, 6 }, sd[4] = { 0, 1, 2, 3 };
        if (me == 0) rc[R - 1] = 2;
        char want[128];
        snprintf(want, sizeof want, "rank 0 expects 2 elements from rank %d, which sends 1",
                 (int)(R - 1));
        tap_ok(ops->alltoallv(c2, r1, rc, rd, s1, one, sd, GRM_DTYPE_F32) == GRM_EINVAL
               && has(want), "check_counts: every rank fails a count mismatch with GRM_EINVAL");

        // Without the check MPI finds it. Every rank sends itself 2 elements into room for
        // 1 and nothing to others, so all ranks fail alike and no message is left in flight.
        int64_t sc[4] = { 0, 0, 0, 0 }, rc0[4] = { 0, 0, 0, 0 };
        sc[me] = 2;
        rc0[me] = 1;
        const grm_status st = ops->alltoallv(c, r1, rc0, zero, s1, sc, zero, GRM_DTYPE_F32);
        // Open MPI says MPI_ERR_TRUNCATE, or MPI_ERR_OTHER from inside some algorithms.
        tap_ok(st == GRM_EDEVICE && has("comm-mpi: alltoallv: MPI error") && has(": MPI_ERR_")
               && ops->barrier(c) == GRM_OK, "a truncated receive is GRM_EDEVICE with "
               "MPI_Error_string's text; the communicator still works");
    }

    ops->destroy(c2);
    ops->destroy(c);        // the first instance initialised MPI, so this finalizes it
    ops->destroy(NULL);
    void *c3 = NULL;
    tap_ok(ops->create(NULL, &c3) == GRM_EDEVICE && c3 == NULL
           && has("comm-mpi: create: MPI is already finalized"),
           "create after the owning instance finalized MPI: GRM_EDEVICE");
    return tap_done();
}
