/* plugins/head-sampled-softmax/head_rows.c - the item rows of a retrieval loss (ABI 1.5,
 * grm_loss_io.item_rows): the targets' and negatives' rows gathered from the batch's unique
 * item rows before the loss, and their gradients, scaled by grad_scale, summed back after
 * it, pos before neg and each in increasing order (the order the host used before 1.5, so
 * results are bitwise those of a host-side gather). Through the host's backend when a run
 * has one (host->backend()), with plain loops otherwise (a head created outside a run). */
#include <string.h>

#include "heads.h"

static const grm_backend *backend_of(const grm_host_api *host)
{
    return GRM_HAS_OP(grm_host_api, host, backend) ? host->backend() : NULL;
}

static grm_status gather(const grm_host_api *host, float *out, const float *rows,
                         const int64_t *idx, int64_t n, int64_t nrows, int64_t D)
{
    const grm_backend *be = backend_of(host);
    if (be) return be->iface->gather(be->context, out, rows, idx, n, nrows, D, NULL);
    for (int64_t j = 0; j < n; j++) {
        if (idx[j] < 0 || idx[j] >= nrows)
            return host->errorf(GRM_EINVAL, "head: item slot %lld (position %lld) outside "
                                "[0, %lld)", (long long)idx[j], (long long)j, (long long)nrows);
        memcpy(out + j * D, rows + idx[j] * D, (size_t)D * sizeof(float));
    }
    return GRM_OK;
}

static grm_status scatter(const grm_host_api *host, head_rows_work *w, float *rows,
                          const float *src, const int64_t *idx, int64_t n, int64_t nrows,
                          int64_t D)
{
    const grm_backend *be = backend_of(host);
    if (be) {
        if (w->be != be) {   /* the run's backend: its scratch, kept for the next steps */
            head_rows_work_fini(w);
            grm_status st = be->iface->work_create(be->context, &w->work);
            if (st != GRM_OK) return st;
            w->be = be;
        }
        return be->iface->scatter_add(be->context, rows, src, idx, n, nrows, D, w->work, NULL);
    }
    for (int64_t j = 0; j < n; j++)
        if (idx[j] < 0 || idx[j] >= nrows)
            return host->errorf(GRM_EINVAL, "head: item slot %lld (position %lld) outside "
                                "[0, %lld)", (long long)idx[j], (long long)j, (long long)nrows);
    for (int64_t j = 0; j < n; j++)
        for (int64_t d = 0; d < D; d++) rows[idx[j] * D + d] += src[j * D + d];
    return GRM_OK;
}

grm_status head_rows_gather(const grm_host_api *host, const grm_loss_io *io, float *pos,
                            float *neg, int64_t D)
{
    grm_status st = gather(host, pos, io->item_rows, io->pos_slots, io->rows, io->nitems, D);
    if (st == GRM_OK)
        st = gather(host, neg, io->item_rows, io->neg_slots, io->nneg, io->nitems, D);
    return st;
}

grm_status head_rows_scatter(const grm_host_api *host, head_rows_work *w, const grm_loss_io *io,
                             const float *d_pos, const float *d_neg, int64_t D)
{
    grm_status st = scatter(host, w, io->d_item_rows, d_pos, io->pos_slots, io->rows,
                            io->nitems, D);
    if (st == GRM_OK)
        st = scatter(host, w, io->d_item_rows, d_neg, io->neg_slots, io->nneg, io->nitems, D);
    return st;
}

void head_rows_work_fini(head_rows_work *w)
{
    if (w->be && w->work) w->be->iface->work_destroy(w->be->context, w->work);
    w->be = NULL;
    w->work = NULL;
}

void head_scale(float *v, int64_t n, float s)
{
    if (v == NULL || s == 1.0f) return;
    for (int64_t i = 0; i < n; i++) v[i] *= s;
}
