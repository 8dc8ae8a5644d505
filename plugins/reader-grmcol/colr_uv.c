/* plugins/reader-grmcol/colr_uv.c - decompression and CSR assembly of row groups on
 * libuv's thread pool (uv_queue_work; UV_THREADPOOL_SIZE workers, default 4), with
 * `prefetch` row groups in flight ahead of the one being consumed: RecIS §2.2.1 (high
 * concurrency, asynchronous reading overlapped with training) and MTGRBoost §3 (prefetch
 * the next batches). Each instance owns a loop that only collects completions: the
 * reader's thread runs it while it waits for the row group it hands out next. */
#include "colr.h"

static void colr_work(uv_work_t *req)
{
    colr_load(req->data);
}

static void colr_after(uv_work_t *req, int status)
{
    colr_slot *const s = req->data;
    s->canceled = status == UV_ECANCELED;
    s->state = COLR_DONE;
}

grm_status colr_uv_init(colr_reader *r)
{
    const int rc = uv_loop_init(&r->loop);
    if (rc != 0) {
        return r->host->errorf(GRM_EINTERNAL, "reader-grmcol: uv_loop_init: %s",
                               uv_strerror(rc));
    }
    r->loop_ok = 1;
    return GRM_OK;
}

void colr_uv_fini(colr_reader *r)
{
    if (!r->loop_ok) return;
    // Work not started yet is canceled; work running now is waited for (libuv cannot
    // interrupt it), so no worker touches a slot after close.
    for (int32_t i = 0; r->slots != NULL && i < r->nslots; i++) {
        if (r->slots[i].state == COLR_QUEUED) uv_cancel((uv_req_t *)&r->slots[i].req);
    }
    uv_run(&r->loop, UV_RUN_DEFAULT);
    uv_loop_close(&r->loop);
    r->loop_ok = 0;
}

grm_status colr_uv_submit(colr_reader *r)
{
    while (r->next_submit < r->ngroups && r->next_submit < r->next_out + r->nslots) {
        colr_slot *const s = &r->slots[r->next_submit % r->nslots];
        if (s->state != COLR_IDLE || (int32_t)(r->next_submit % r->nslots) == r->held) break;
        s->task = r->next_submit;
        s->state = COLR_QUEUED;
        s->canceled = 0;
        const int rc = uv_queue_work(&r->loop, &s->req, colr_work, colr_after);
        if (rc != 0) {
            s->state = COLR_IDLE;
            return r->host->errorf(GRM_EINTERNAL, "reader-grmcol: uv_queue_work: %s",
                                   uv_strerror(rc));
        }
        r->next_submit++;
    }
    return GRM_OK;
}

grm_status colr_uv_wait(colr_reader *r, colr_slot *s)
{
    const grm_status st = colr_uv_submit(r);
    if (st != GRM_OK) return st;
    while (s->state == COLR_QUEUED) uv_run(&r->loop, UV_RUN_ONCE);
    return GRM_OK;
}
