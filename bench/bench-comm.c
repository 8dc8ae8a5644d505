/* bench/bench-comm.c - comm-mpi against raw MPI on the same buffers (DESIGN.md §8), run
 * under mpirun by bench/bench_comm.py. For each size: allreduce (f32 sum, in place) and
 * alltoallv (i64, `per_peer` elements to every rank) through the plugin's ops, then the
 * same call straight to MPI on MPI_COMM_WORLD: the physical limit the plugin can reach.
 * Times are medians over iterations of the slowest rank. Rank 0 prints key=value lines. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include <grm/comm.h>

#include "harness.h"

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Median over iters of the slowest rank's time for one call of fn, in microseconds.
typedef int (*bc_fn)(void *ctx);
static double bc_time(bc_fn fn, void *ctx, int iters)
{
    double *t = malloc((size_t)iters * sizeof(double));
    for (int w = 0; w < 3; w++) fn(ctx);
    for (int i = 0; i < iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        if (fn(ctx) != 0) {
            fprintf(stderr, "bench-comm: %s\n", harness_host()->last_error());
            exit(1);
        }
        double dt = MPI_Wtime() - t0, worst = 0;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t[i] = worst;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_d);
    const double med = t[iters / 2] * 1e6;
    free(t);
    return med;
}

typedef struct bc_ctx {
    const grm_comm_ops *ops;
    void *inst;
    float *buf;                 /* [n] allreduce buffer */
    int64_t n;
    int64_t *send, *recv;       /* [size * per_peer] alltoallv buffers */
    int64_t *cnt, *dsp;         /* [size] */
    int *icnt, *idsp;           /* [size] */
} bc_ctx;

static int grm_allreduce(void *p)
{
    bc_ctx *c = p;
    return c->ops->allreduce(c->inst, c->buf, c->n, GRM_DTYPE_F32, GRM_REDUCE_SUM) != GRM_OK;
}

static int mpi_allreduce(void *p)
{
    bc_ctx *c = p;
    return MPI_Allreduce(MPI_IN_PLACE, c->buf, (int)c->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)
           != MPI_SUCCESS;
}

static int grm_alltoallv(void *p)
{
    bc_ctx *c = p;
    return c->ops->alltoallv(c->inst, c->recv, c->cnt, c->dsp, c->send, c->cnt, c->dsp,
                             GRM_DTYPE_I64) != GRM_OK;
}

static int mpi_alltoallv(void *p)
{
    bc_ctx *c = p;
    return MPI_Alltoallv(c->send, c->icnt, c->idsp, MPI_INT64_T, c->recv, c->icnt, c->idsp,
                         MPI_INT64_T, MPI_COMM_WORLD) != MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    const grm_plugin_info *info = harness_plugin("comm-mpi");
    bc_ctx c = { .ops = info->ops };
    if (c.ops->create(NULL, &c.inst) != GRM_OK) {
        fprintf(stderr, "bench-comm: %s\n", harness_host()->last_error());
        return 1;
    }
    const int rank = c.ops->rank(c.inst), size = c.ops->size(c.inst);
    static const int64_t sizes[] = { 16, 4096, 262144, 2097152 };   // elements
    const int nsizes = argc > 1 ? atoi(argv[1]) : 4;
    for (int s = 0; s < nsizes && s < 4; s++) {
        const int64_t n = sizes[s];
        const int iters = n >= 262144 ? 20 : 200;
        c.n = n;
        c.buf = calloc((size_t)n, sizeof(float));
        const double g = bc_time(grm_allreduce, &c, iters), m = bc_time(mpi_allreduce, &c, iters);
        if (rank == 0)
            printf("bench=comm case=allreduce ranks=%d dtype=f32 bytes=%lld grm_us=%.2f "
                   "peer=mpi peer_us=%.2f ratio=%.3f grm_gbps=%.3f\n", size,
                   (long long)(n * 4), g, m, m / g, (double)n * 4 / (g * 1e3));
        free(c.buf);

        // alltoallv: n / size elements to every peer, so each rank sends n elements.
        const int64_t per = n / size > 0 ? n / size : 1;
        c.send = calloc((size_t)(per * size), sizeof(int64_t));
        c.recv = calloc((size_t)(per * size), sizeof(int64_t));
        c.cnt = malloc((size_t)size * sizeof(int64_t));
        c.dsp = malloc((size_t)size * sizeof(int64_t));
        c.icnt = malloc((size_t)size * sizeof(int));
        c.idsp = malloc((size_t)size * sizeof(int));
        for (int p = 0; p < size; p++) {
            c.cnt[p] = per;
            c.dsp[p] = p * per;
            c.icnt[p] = (int)per;
            c.idsp[p] = (int)(p * per);
        }
        const double ga = bc_time(grm_alltoallv, &c, iters);
        const double ma = bc_time(mpi_alltoallv, &c, iters);
        if (rank == 0)
            printf("bench=comm case=alltoallv ranks=%d dtype=i64 bytes=%lld grm_us=%.2f "
                   "peer=mpi peer_us=%.2f ratio=%.3f grm_gbps=%.3f\n", size,
                   (long long)(per * size * 8), ga, ma, ma / ga,
                   (double)per * size * 8 / (ga * 1e3));
        free(c.send), free(c.recv), free(c.cnt), free(c.dsp), free(c.icnt), free(c.idsp);
    }
    fflush(stdout);
    c.ops->destroy(c.inst);
    return 0;
}
