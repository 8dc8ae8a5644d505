/* core/pool.c - host allocation, the step scratch arena and the parallel_for thread pool.
 *
 * parallel_for splits [0, n) into at most (threads * 4) ranges of at least `grain`
 * items; workers and the calling thread take ranges from an atomic counter, so an
 * uneven range never idles the rest. The pool is a plain pthread pool: parallel_for is a
 * fork-join barrier, which libuv's asynchronous work queue does not give. */
#include "grm_core.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- allocation ---- */

/* Tests make the Nth host allocation fail to walk every failure path (STYLE.md §8), and
 * count the live ones to check that destroy frees what create allocated. */
static atomic_llong alloc_count, alloc_fail_at, alloc_live;

void grm__alloc_fail_at(int64_t n)
{
    atomic_store(&alloc_count, 0);
    atomic_store(&alloc_fail_at, n);
}

int64_t grm__alloc_live(void)
{
    return atomic_load(&alloc_live);
}

void *grm__alloc(grm_device device, size_t bytes, size_t align)
{
    void *p = NULL;
    int64_t fail_at = atomic_load(&alloc_fail_at);
    if (fail_at > 0 && atomic_fetch_add(&alloc_count, 1) + 1 == fail_at) {
        grm_errorf(GRM_ENOMEM, "alloc: injected failure of allocation %lld (test)",
                   (long long)fail_at);
        return NULL;
    }
    if (device.type != GRM_DEVICE_CPU) {
        grm_errorf(GRM_ENOTSUP, "alloc: device type %d is not supported by this host build",
                   device.type);
        return NULL;
    }
    if (align == 0) align = 64;
    if (align < sizeof(void *) || (align & (align - 1))) {
        grm_errorf(GRM_EINVAL, "alloc: alignment %zu is not a power of two >= %zu", align,
                   sizeof(void *));
        return NULL;
    }
    if (bytes == 0) bytes = 1;
    if (posix_memalign(&p, align, bytes) != 0) {
        grm_errorf(GRM_ENOMEM, "alloc: out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    atomic_fetch_add(&alloc_live, 1);
    return p;
}

void grm__free(grm_device device, void *ptr)
{
    (void)device;
    if (ptr != NULL) atomic_fetch_sub(&alloc_live, 1);
    free(ptr);
}

/* ---- scratch arena: a list of blocks, reset after every step ---- */

typedef struct scratch_block {
    struct scratch_block *next;
    size_t size, used;
    unsigned char *mem;
} scratch_block;

static scratch_block *scratch_head;

void *grm__scratch(size_t bytes, size_t align)
{
    scratch_block *b;
    if (align == 0) align = 64;
    for (b = scratch_head; b; b = b->next) {
        size_t off = (b->used + align - 1) & ~(align - 1);
        if (off + bytes <= b->size) {
            b->used = off + bytes;
            return b->mem + off;
        }
    }
    size_t size = bytes + align > (size_t)1 << 22 ? bytes + align : (size_t)1 << 22;
    b = calloc(1, sizeof *b);
    if (!b || posix_memalign((void **)&b->mem, 64, size) != 0) {
        free(b);
        grm_errorf(GRM_ENOMEM, "scratch: out of memory allocating %zu bytes", size);
        return NULL;
    }
    b->size = size;
    b->next = scratch_head;
    scratch_head = b;
    size_t off = ((uintptr_t)b->mem % align) ? align - (uintptr_t)b->mem % align : 0;
    b->used = off + bytes;
    return b->mem + off;
}

void grm__scratch_reset(void)
{
    for (scratch_block *b = scratch_head; b; b = b->next) b->used = 0;
}

void grm__scratch_fini(void)
{
    while (scratch_head) {
        scratch_block *n = scratch_head->next;
        free(scratch_head->mem);
        free(scratch_head);
        scratch_head = n;
    }
}

/* ---- thread pool ---- */

typedef struct pool_job {
    grm_range_fn fn;
    void *ctx;
    int64_t n, chunk, nchunks;
    atomic_llong next;        /* next chunk index to take */
    atomic_int failed;        /* first failure wins */
    grm_status status;
    char message[1024];
    pthread_mutex_t err_lock;
} pool_job;

static struct {
    pthread_t *threads;
    int32_t nthreads;         /* workers, not counting the caller */
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    pool_job *job;
    uint64_t generation;
    int32_t busy;             /* workers still inside the current job */
    int stop;
    int started;
    uint64_t base;            /* generation when the workers were created */
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER,
           .done = PTHREAD_COND_INITIALIZER };

static _Thread_local int in_parallel;

static void pool_run(pool_job *job)
{
    in_parallel = 1;
    for (;;) {
        int64_t c = atomic_fetch_add(&job->next, 1);
        if (c >= job->nchunks || atomic_load(&job->failed)) break;
        int64_t b = c * job->chunk, e = b + job->chunk < job->n ? b + job->chunk : job->n;
        grm_status st = job->fn(job->ctx, b, e);
        if (st != GRM_OK) {
            pthread_mutex_lock(&job->err_lock);
            if (!atomic_load(&job->failed)) {
                job->status = st;
                snprintf(job->message, sizeof job->message, "%s", grm_last_error());
                atomic_store(&job->failed, 1);
            }
            pthread_mutex_unlock(&job->err_lock);
        }
    }
    in_parallel = 0;
}

static void *pool_worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pool.lock);
    /* the generation count survives grm__pool_fini: a worker of a restarted pool starts
     * from the count at its creation, so it neither replays a finished job nor misses one
     * posted before it first took the lock */
    uint64_t seen = pool.base;
    for (;;) {
        while (!pool.stop && pool.generation == seen) pthread_cond_wait(&pool.work, &pool.lock);
        if (pool.stop) break;
        seen = pool.generation;
        pool_job *job = pool.job;
        pthread_mutex_unlock(&pool.lock);
        pool_run(job);
        pthread_mutex_lock(&pool.lock);
        if (--pool.busy == 0) pthread_cond_signal(&pool.done);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

grm_status grm__pool_init(int32_t threads)
{
    if (pool.started) return GRM_OK;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int32_t)n : 1;
    }
    pool.nthreads = threads - 1;
    pool.stop = 0;
    pool.base = pool.generation;
    if (pool.nthreads > 0) {
        pool.threads = calloc((size_t)pool.nthreads, sizeof *pool.threads);
        if (!pool.threads) return grm_errorf(GRM_ENOMEM, "thread pool: out of memory");
        for (int32_t i = 0; i < pool.nthreads; i++) {
            int rc = pthread_create(&pool.threads[i], NULL, pool_worker, NULL);
            if (rc != 0) {
                pool.nthreads = i;
                grm__pool_fini();
                return grm_errorf(GRM_EINTERNAL, "thread pool: pthread_create: %s",
                                  strerror(rc));
            }
        }
    }
    pool.started = 1;
    return GRM_OK;
}

void grm__pool_fini(void)
{
    pthread_mutex_lock(&pool.lock);
    pool.stop = 1;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    for (int32_t i = 0; i < pool.nthreads; i++) pthread_join(pool.threads[i], NULL);
    free(pool.threads);
    pool.threads = NULL;
    pool.nthreads = 0;
    pool.started = 0;
}

void grm__pool_inline_thread(void)
{
    in_parallel = 1;
}

int32_t grm__num_threads(void)
{
    return pool.started ? pool.nthreads + 1 : 1;
}

grm_status grm__parallel_for(int64_t n, int64_t grain, grm_range_fn fn, void *ctx)
{
    if (n <= 0) return GRM_OK;
    if (grain < 1) grain = 1;
    int32_t threads = grm__num_threads();
    if (threads == 1 || in_parallel || n <= grain) return fn(ctx, 0, n);

    pool_job job = { .fn = fn, .ctx = ctx, .n = n };
    int64_t target = (int64_t)threads * 4;
    job.chunk = (n + target - 1) / target;
    if (job.chunk < grain) job.chunk = grain;
    job.nchunks = (n + job.chunk - 1) / job.chunk;
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, 0);
    pthread_mutex_init(&job.err_lock, NULL);

    pthread_mutex_lock(&pool.lock);
    pool.job = &job;
    pool.busy = pool.nthreads;
    pool.generation++;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);

    pool_run(&job);

    pthread_mutex_lock(&pool.lock);
    while (pool.busy > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pool.job = NULL;
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_destroy(&job.err_lock);
    if (atomic_load(&job.failed)) return grm_errorf(job.status, "%s", job.message);
    return GRM_OK;
}
