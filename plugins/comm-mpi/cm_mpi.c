/* plugins/comm-mpi/cm_mpi.c - the collectives of grm/comm.h over MPI (DESIGN.md §6: ranks
 * are processes, MPI launches them and carries CPU collectives). Every call runs on the
 * instance's own duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so an MPI failure
 * becomes GRM_EDEVICE with MPI_Error_string's text instead of an abort. MPI counts are
 * int: transfers longer than max_count elements are split (allreduce, broadcast), use a
 * strided receive type (allgather) or go point to point in pieces (alltoallv). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cm.h"

#define CM_WHO "comm-mpi"

// MPI's own message for rc, as GRM_EDEVICE (STYLE.md §6).
static grm_status cm_fail(const cm_inst *c, const char *op, int rc)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    text[len] = '\0';
    return c->host->errorf(GRM_EDEVICE, CM_WHO ": %s: MPI error %d: %s", op, rc,
                           len > 0 ? text : "(no text)");
}

#define CM_MPI_CHECK(c, op, expr)                                                  \
    do {                                                                           \
        const int cm_rc_ = (expr);                                                 \
        if (cm_rc_ != MPI_SUCCESS) return cm_fail((c), (op), cm_rc_);              \
    } while (0)

// The MPI type that moves one element of a grm_dtype. bf16/f16 travel as 16-bit words.
static MPI_Datatype cm_type(int32_t dtype)
{
    switch (dtype) {
    case GRM_DTYPE_F32: return MPI_FLOAT;
    case GRM_DTYPE_F16: return MPI_UINT16_T;
    case GRM_DTYPE_BF16: return MPI_UINT16_T;
    case GRM_DTYPE_I32: return MPI_INT32_T;
    case GRM_DTYPE_I64: return MPI_INT64_T;
    default: return MPI_UINT8_T;
    }
}

static MPI_Op cm_op(const cm_inst *c, int32_t dtype, int32_t op)
{
    if (dtype == GRM_DTYPE_BF16) return c->half_ops[0][op];
    if (dtype == GRM_DTYPE_F16) return c->half_ops[1][op];
    return op == GRM_REDUCE_MAX ? MPI_MAX : op == GRM_REDUCE_MIN ? MPI_MIN : MPI_SUM;
}

/* ---- open / close ---- */

static void cm_free_ops(cm_inst *c)
{
    for (int k = 0; k < 2; k++) {
        for (int o = 0; o < 3; o++) {
            if (c->half_ops[k][o] != MPI_OP_NULL) MPI_Op_free(&c->half_ops[k][o]);
        }
    }
}

grm_status cm_open(cm_inst *c, const grm_host_api *host, const cm_config *config)
{
    static MPI_User_function *const fns[2][3] = {
        { cm_op_bf16_sum, cm_op_bf16_max, cm_op_bf16_min },
        { cm_op_f16_sum, cm_op_f16_max, cm_op_f16_min },
    };
    grm_status st;
    int inited = 0, finalized = 0, provided = 0, rc;

    memset(c, 0, sizeof(*c));
    c->host = host;
    c->comm = MPI_COMM_NULL;
    for (int k = 0; k < 2; k++) {
        for (int o = 0; o < 3; o++) c->half_ops[k][o] = MPI_OP_NULL;
    }
    c->max_count = config->max_count;
    c->check_counts = config->check_counts;

    MPI_Finalized(&finalized);
    if (finalized)
        return host->errorf(GRM_EDEVICE, CM_WHO ": create: MPI is already finalized in this "
                            "process (by an earlier comm-mpi instance or the host); MPI can "
                            "be initialised only once per process");
    MPI_Initialized(&inited);
    if (!inited) {
        // Several instances may be used from different threads (one thread each).
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) return cm_fail(c, "create: MPI_Init_thread", rc);
        c->owns_mpi = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED)
        host->log(GRM_LOG_WARN, CM_WHO, "MPI provides thread level %d < MPI_THREAD_SERIALIZED;"
                  " call collectives from the thread that initialised MPI only", provided);

    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->comm)) != MPI_SUCCESS) {
        st = cm_fail(c, "create: MPI_Comm_dup", rc);
        c->comm = MPI_COMM_NULL;
        goto fail;
    }
    if ((rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
        st = cm_fail(c, "create: MPI_Comm_set_errhandler", rc);
        goto fail;
    }
    int rank = 0, size = 0;
    MPI_Comm_rank(c->comm, &rank);
    MPI_Comm_size(c->comm, &size);
    c->rank = rank;
    c->size = size;
    for (int k = 0; k < 2; k++) {
        for (int o = 0; o < 3; o++) {
            if ((rc = MPI_Op_create(fns[k][o], 1, &c->half_ops[k][o])) != MPI_SUCCESS) {
                c->half_ops[k][o] = MPI_OP_NULL;
                st = cm_fail(c, "create: MPI_Op_create", rc);
                goto fail;
            }
        }
    }
    c->iargs = malloc(4 * (size_t)size * sizeof(int));
    c->xcounts = malloc(5 * (size_t)size * sizeof(int64_t));
    c->reqs = malloc(2 * (size_t)size * sizeof(MPI_Request));
    if (c->iargs == NULL || c->xcounts == NULL || c->reqs == NULL) {
        st = host->errorf(GRM_ENOMEM, CM_WHO ": create: out of memory for %d ranks", size);
        goto fail;
    }
    return GRM_OK;

fail:
    cm_close(c);
    return st;
}

void cm_close(cm_inst *c)
{
    free(c->reqs);
    free(c->xcounts);
    free(c->iargs);
    c->reqs = NULL;
    c->xcounts = NULL;
    c->iargs = NULL;
    cm_free_ops(c);
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    if (c->owns_mpi) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
        c->owns_mpi = 0;
    }
}

/* ---- collectives ---- */

grm_status cm_allreduce(cm_inst *c, void *buf, int64_t count, int32_t dtype, int32_t op,
                        size_t elem)
{
    const MPI_Datatype type = cm_type(dtype);
    const MPI_Op mop = cm_op(c, dtype, op);
    // Pieces are reduced independently, so splitting changes nothing elementwise.
    for (int64_t off = 0; off < count; off += c->max_count) {
        const int64_t n = count - off < c->max_count ? count - off : c->max_count;
        CM_MPI_CHECK(c, "allreduce", MPI_Allreduce(MPI_IN_PLACE, (char *)buf + (size_t)off * elem,
                                                   (int)n, type, mop, c->comm));
    }
    return GRM_OK;
}

grm_status cm_broadcast(cm_inst *c, void *buf, int64_t count, int32_t dtype, int32_t root,
                        size_t elem)
{
    const MPI_Datatype type = cm_type(dtype);
    for (int64_t off = 0; off < count; off += c->max_count) {
        const int64_t n = count - off < c->max_count ? count - off : c->max_count;
        CM_MPI_CHECK(c, "broadcast", MPI_Bcast((char *)buf + (size_t)off * elem, (int)n, type,
                                               root, c->comm));
    }
    return GRM_OK;
}

/* recv [size, count]: row p is rank p's send [count]. In place when send is this rank's
 * own row of recv. A piece [off, off + n) lands in every row through a receive type of n
 * elements whose extent is a whole row, so row offsets never pass through an int. */
grm_status cm_allgather(cm_inst *c, void *recv, const void *send, int64_t count,
                        int32_t dtype, size_t elem)
{
    const MPI_Datatype type = cm_type(dtype);
    const size_t row = (size_t)count * elem;
    const int in_place = send == (const char *)recv + (size_t)c->rank * row;
    if (count == 0) return GRM_OK;
    if (count <= c->max_count) {
        CM_MPI_CHECK(c, "allgather", MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)count,
                                                   type, recv, (int)count, type, c->comm));
        return GRM_OK;
    }
    for (int64_t off = 0; off < count; off += c->max_count) {
        const int64_t n = count - off < c->max_count ? count - off : c->max_count;
        MPI_Datatype piece, rowtype;
        CM_MPI_CHECK(c, "allgather: MPI_Type_contiguous",
                     MPI_Type_contiguous((int)n, type, &piece));
        int rc = MPI_Type_create_resized(piece, 0, (MPI_Aint)row, &rowtype);
        MPI_Type_free(&piece);
        if (rc != MPI_SUCCESS) return cm_fail(c, "allgather: MPI_Type_create_resized", rc);
        if ((rc = MPI_Type_commit(&rowtype)) == MPI_SUCCESS) {
            // In place, this rank's piece is at recv + off + rank * row: where MPI looks.
            rc = MPI_Allgather(in_place ? MPI_IN_PLACE : (const char *)send + (size_t)off * elem,
                               (int)n, type, (char *)recv + (size_t)off * elem, 1, rowtype,
                               c->comm);
        }
        MPI_Type_free(&rowtype);
        if (rc != MPI_SUCCESS) return cm_fail(c, "allgather", rc);
    }
    return GRM_OK;
}

/* check_counts: every rank learns what each peer sends it and compares with its rcounts;
 * then all ranks see every rank's verdict, so all of them fail with the same message. */
static grm_status cm_check_counts(cm_inst *c, const int64_t *rcounts, const int64_t *scounts)
{
    int64_t *const got = c->xcounts;            /* [size]: got[p] = rank p's scounts[me] */
    int64_t *const all = c->xcounts + c->size;  /* [size, 4]: rank, peer, rcount, scount */
    CM_MPI_CHECK(c, "alltoallv: count exchange",
                 MPI_Alltoall(scounts, 1, MPI_INT64_T, got, 1, MPI_INT64_T, c->comm));
    int64_t mine[4] = { -1, -1, 0, 0 };
    for (int32_t p = 0; p < c->size; p++) {
        if (got[p] != rcounts[p]) {
            mine[0] = c->rank;
            mine[1] = p;
            mine[2] = rcounts[p];
            mine[3] = got[p];
            break;
        }
    }
    CM_MPI_CHECK(c, "alltoallv: count exchange",
                 MPI_Allgather(mine, 4, MPI_INT64_T, all, 4, MPI_INT64_T, c->comm));
    for (int32_t r = 0; r < c->size; r++) {
        const int64_t *const v = all + 4 * r;
        if (v[0] >= 0)
            return c->host->errorf(GRM_EINVAL, CM_WHO ": alltoallv: rank %lld expects %lld "
                                   "elements from rank %lld, which sends %lld; rank r's "
                                   "rcounts[p] must equal rank p's scounts[r]",
                                   (long long)v[0], (long long)v[2], (long long)v[1],
                                   (long long)v[3]);
    }
    return GRM_OK;
}

/* Counts or displacements beyond max_count: per peer, pieces of at most max_count
 * elements, one round of Isend/Irecv per piece index, so at most 2 * size requests are in
 * flight. MPI keeps messages between one pair on one communicator in order. */
static grm_status cm_alltoallv_p2p(cm_inst *c, void *recv, const int64_t *rcounts,
                                   const int64_t *rdispls, const void *send,
                                   const int64_t *scounts, const int64_t *sdispls,
                                   MPI_Datatype type, size_t elem)
{
    const int64_t m = c->max_count;
    for (int64_t off = 0;; off += m) {
        int nreq = 0;
        for (int32_t p = 0; p < c->size; p++) {
            if (off < rcounts[p]) {
                const int64_t n = rcounts[p] - off < m ? rcounts[p] - off : m;
                CM_MPI_CHECK(c, "alltoallv: MPI_Irecv",
                             MPI_Irecv((char *)recv + (size_t)(rdispls[p] + off) * elem, (int)n,
                                       type, p, 0, c->comm, &c->reqs[nreq++]));
            }
        }
        for (int32_t p = 0; p < c->size; p++) {
            if (off < scounts[p]) {
                const int64_t n = scounts[p] - off < m ? scounts[p] - off : m;
                CM_MPI_CHECK(c, "alltoallv: MPI_Isend",
                             MPI_Isend((const char *)send + (size_t)(sdispls[p] + off) * elem,
                                       (int)n, type, p, 0, c->comm, &c->reqs[nreq++]));
            }
        }
        if (nreq == 0) return GRM_OK;
        CM_MPI_CHECK(c, "alltoallv", MPI_Waitall(nreq, c->reqs, MPI_STATUSES_IGNORE));
    }
}

grm_status cm_alltoallv(cm_inst *c, void *recv, const int64_t *rcounts, const int64_t *rdispls,
                        const void *send, const int64_t *scounts, const int64_t *sdispls,
                        int32_t dtype, size_t elem)
{
    const MPI_Datatype type = cm_type(dtype);
    const int32_t size = c->size;
    if (c->check_counts) {
        const grm_status st = cm_check_counts(c, rcounts, scounts);
        if (st != GRM_OK) return st;
    }
    int fits = 1;
    for (int32_t p = 0; p < size && fits; p++) {
        fits = scounts[p] <= c->max_count && rcounts[p] <= c->max_count
               && sdispls[p] <= INT_MAX && rdispls[p] <= INT_MAX;
    }
    if (!fits) return cm_alltoallv_p2p(c, recv, rcounts, rdispls, send, scounts, sdispls, type,
                                       elem);
    int *const sc = c->iargs, *const sd = sc + size, *const rc = sd + size, *const rd = rc + size;
    for (int32_t p = 0; p < size; p++) {
        sc[p] = (int)scounts[p];
        sd[p] = (int)sdispls[p];
        rc[p] = (int)rcounts[p];
        rd[p] = (int)rdispls[p];
    }
    // MPI may reject NULL buffers even with zero counts; any address will do then.
    char none[1];
    CM_MPI_CHECK(c, "alltoallv", MPI_Alltoallv(send ? send : none, sc, sd, type,
                                               recv ? recv : none, rc, rd, type, c->comm));
    return GRM_OK;
}

grm_status cm_barrier(cm_inst *c)
{
    CM_MPI_CHECK(c, "barrier", MPI_Barrier(c->comm));
    return GRM_OK;
}
