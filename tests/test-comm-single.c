/* tests/test-comm-single.c - comm-single, the world of one: every collective with its
 * expected single-rank result, and every argument error with its message. */
#include <stdint.h>
#include <string.h>

#include <grm/comm.h>

#include "harness.h"
#include "tap.h"

int main(void)
{
    tap_plan(21);
    const grm_plugin_info *info = harness_plugin("comm-single");
    const grm_comm_ops *ops = info->ops;
    void *c = NULL;

    tap_ok(info->kind == GRM_KIND_COMM && info->params == NULL && info->config_size == 0,
           "comm-single is a comm plugin with no parameters");
    tap_ok(ops->create(NULL, &c) == GRM_OK && c != NULL, "create with no config");
    tap_ok(ops->rank(c) == 0 && ops->size(c) == 1, "rank 0 of size 1");

    // allreduce: the sum, max or min over one rank is the buffer itself.
    float f[4] = { 1.5f, -2.0f, 0.0f, 3.25f };
    const float f0[4] = { 1.5f, -2.0f, 0.0f, 3.25f };
    int64_t l[3] = { INT64_MIN, 0, INT64_MAX };
    const int64_t l0[3] = { INT64_MIN, 0, INT64_MAX };
    int ok = 1;
    for (int32_t op = GRM_REDUCE_SUM; op <= GRM_REDUCE_MIN; op++) {
        ok &= ops->allreduce(c, f, 4, GRM_DTYPE_F32, op) == GRM_OK;
        ok &= ops->allreduce(c, l, 3, GRM_DTYPE_I64, op) == GRM_OK;
    }
    tap_ok(ok && memcmp(f, f0, sizeof(f)) == 0 && memcmp(l, l0, sizeof(l)) == 0,
           "allreduce sum/max/min of f32 and i64 leaves the buffer unchanged");
    tap_ok(ops->allreduce(c, NULL, 0, GRM_DTYPE_F32, GRM_REDUCE_SUM) == GRM_OK,
           "allreduce of 0 elements with a NULL buffer is fine");
    tap_ok(ops->allreduce(c, f, 4, 42, GRM_REDUCE_SUM) == GRM_EINVAL
           && harness_error_has("comm-single: allreduce: unknown dtype 42"),
           "allreduce with dtype 42: GRM_EINVAL");
    tap_ok(ops->allreduce(c, f, 4, GRM_DTYPE_F32, 7) == GRM_EINVAL
           && harness_error_has("comm-single: allreduce: unknown reduce op 7"),
           "allreduce with op 7: GRM_EINVAL");
    tap_ok(ops->allreduce(c, f, -1, GRM_DTYPE_F32, GRM_REDUCE_SUM) == GRM_EINVAL
           && harness_error_has("count -1 is negative"), "allreduce of -1 elements: GRM_EINVAL");
    tap_ok(ops->allreduce(c, NULL, 3, GRM_DTYPE_F32, GRM_REDUCE_SUM) == GRM_EINVAL
           && harness_error_has("3 elements at a NULL buffer"), "allreduce of 3 elements at NULL: GRM_EINVAL");

    // allgather: recv [1 * count] = send.
    const int64_t s8[5] = { 9, 8, 7, 6, 5 };
    int64_t r8[6] = { 0, 0, 0, 0, 0, -1 };
    tap_ok(ops->allgather(c, r8, s8, 5, GRM_DTYPE_I64) == GRM_OK
           && memcmp(r8, s8, sizeof(s8)) == 0 && r8[5] == -1,
           "allgather copies exactly count elements (i64)");
    const uint8_t bs[3] = { 1, 2, 3 };
    uint8_t br[4] = { 0, 0, 0, 77 };
    tap_ok(ops->allgather(c, br, bs, 3, GRM_DTYPE_U8) == GRM_OK && br[2] == 3 && br[3] == 77,
           "allgather of u8 uses the 1-byte element size");
    tap_ok(ops->allgather(c, r8, s8, 5, 0) == GRM_EINVAL
           && harness_error_has("comm-single: allgather: unknown dtype 0"), "allgather with dtype 0: GRM_EINVAL");

    // alltoallv: the only peer is this rank.
    const float send[6] = { 10, 11, 12, 13, 14, 15 };
    float recv[6] = { -1, -1, -1, -1, -1, -1 };
    const int64_t sc[1] = { 3 }, sd[1] = { 2 }, rc[1] = { 3 }, rd[1] = { 1 };
    tap_ok(ops->alltoallv(c, recv, rc, rd, send, sc, sd, GRM_DTYPE_F32) == GRM_OK
           && recv[0] == -1 && recv[1] == 12 && recv[2] == 13 && recv[3] == 14
           && recv[4] == -1 && recv[5] == -1,
           "alltoallv copies send[2..5) to recv[1..4) and nothing else");
    const int64_t rc2[1] = { 2 };
    tap_ok(ops->alltoallv(c, recv, rc2, rd, send, sc, sd, GRM_DTYPE_F32) == GRM_EINVAL
           && harness_error_has("sends 3 elements to itself but expects to receive 2"),
           "alltoallv with scounts[0] 3 != rcounts[0] 2: GRM_EINVAL");
    tap_ok(ops->alltoallv(c, recv, NULL, rd, send, sc, sd, GRM_DTYPE_F32) == GRM_EINVAL
           && harness_error_has("a count or displacement array is NULL"), "alltoallv with NULL rcounts: "
           "GRM_EINVAL");
    const int64_t neg[1] = { -1 };
    tap_ok(ops->alltoallv(c, recv, rc, neg, send, sc, sd, GRM_DTYPE_F32) == GRM_EINVAL
           && harness_error_has("negative count or displacement"), "alltoallv with rdispls[0] -1: GRM_EINVAL");
    tap_ok(ops->alltoallv(c, recv, rc, rd, send, sc, sd, GRM_DTYPE_F32 + 100) == GRM_EINVAL
           && harness_error_has("alltoallv: unknown dtype 101"), "alltoallv with dtype 101: GRM_EINVAL");

    // broadcast from rank 0 leaves the buffer; any other root does not exist.
    tap_ok(ops->broadcast(c, f, 4, GRM_DTYPE_F32, 0) == GRM_OK && memcmp(f, f0, sizeof(f)) == 0,
           "broadcast from root 0 leaves the buffer unchanged");
    tap_ok(ops->broadcast(c, f, 4, GRM_DTYPE_F32, 1) == GRM_EINVAL
           && harness_error_has("comm-single: broadcast: root 1 outside [0, 1)"),
           "broadcast from root 1: GRM_EINVAL");
    tap_ok(ops->broadcast(c, f, 4, -3, 0) == GRM_EINVAL && harness_error_has("broadcast: unknown dtype -3"),
           "broadcast with dtype -3: GRM_EINVAL");

    tap_ok(ops->barrier(c) == GRM_OK, "barrier returns at once");
    ops->destroy(c);
    ops->destroy(NULL);
    return tap_done();
}
