// kernels/hash_table.cu - dynamic embedding hash table on the device (MTGRBoost §4.1):
// a key structure (keys [cap] and slot states [cap]) separate from an embedding structure
// of fixed-size row chunks, MurmurHash3 fmix64 as the hash, open addressing with grouped
// parallel probing (eq. 5): a group of G = 8 threads checks G consecutive slots (one
// bucket) at once and the bucket stride is S' = (k % (M/G - 1) + 1) | 1, i.e. eq. 5's
// S = S' * G in slots; S' is odd and M/G a power of two, so the probe visits every bucket
// (Theorem 1). Growth doubles the key structure only (at load factor 0.75, erased slots
// counted) and re-inserts (key, row) pairs; rows never move, new rows come in new chunks.
// New rows get grm_row_init's value (grm/rng.h, ported in cuda_common.cuh). The reference
// the test compares with is a plain C map in tests/test-cuda-hash.c (exact row values for
// UNIFORM init, 1e-6 relative for NORMAL).
//
// Slot states: EMPTY, TOMB (erased), BUSY (claimed, key being written), or a row >= 0.
// An insert claims the first EMPTY slot of its probe sequence with a CAS (EMPTY -> BUSY),
// writes the key, fences and publishes the row; a lookup waits out BUSY slots of its
// bucket, so two threads inserting the same key in one batch end on the same row.
#include <string.h>

#include <cooperative_groups.h>
#include <new>
#include <type_traits>
#include <vector>

#include "cuda_common.cuh"

namespace {

constexpr int kG = 8;                                   // threads per probing group
constexpr long long kEmpty = -1, kTomb = -2, kBusy = -3;

// Counters on the device. How many keys a batch inserted or erased follows from their
// change (settle): a counter of its own cost every insert one more atomic on one address,
// and such atomics are what bounds inserts (three a key ran at 0.46-0.66 G keys/s on an
// H100, under HierarchicalKV's 0.83-1.09).
enum { C_NEXT_ROW = 0, C_FREE_TOP = 1, C_N = 2 };

struct dev_table {
    int64_t *keys;          // [cap]
    long long *state;       // [cap]
    uint64_t nb;            // buckets = cap / kG, a power of two >= 8
    float *const *chunks;   // [n_chunks] -> [chunk_rows, dim]
    int64_t chunk_rows;
    int32_t dim;
    int64_t *free_rows;     // [free_cap] recycled rows
    long long *ctr;         // [C_N]
    long long free_avail;   // recycled rows at launch; 0: alloc_row skips the free list
    int32_t init;
    double scale;
    uint64_t seed, table_hash;
};

__device__ __forceinline__ uint64_t bucket_step(int64_t key, uint64_t nb)
{
    return (((uint64_t)key % (nb - 1)) + 1) | 1;      // eq. 5 in units of buckets
}

__device__ __forceinline__ float *row_ptr(const dev_table &t, int64_t row)
{
    return t.chunks[row / t.chunk_rows] + (row % t.chunk_rows) * t.dim;
}

__device__ __forceinline__ long long load_state(const long long *p)
{
    return *(const volatile long long *)p;
}

__device__ __forceinline__ int64_t load_key(const int64_t *p)
{
    return *(const volatile int64_t *)p;
}

// Allocate a row: a recycled one if any, else the next fresh one. Fresh rows are taken
// once per set of threads of the warp allocating together (warp-aggregated atomic).
__device__ int64_t alloc_row(const dev_table &t)
{
    if (t.free_avail > 0) {
        const long long top = atomicAdd((unsigned long long *)(t.ctr + C_FREE_TOP),
                                        (unsigned long long)-1ll) - 1;
        if ((long long)top >= 0) return t.free_rows[top];
    }
    namespace cg = cooperative_groups;
    const cg::coalesced_group g = cg::coalesced_threads();
    unsigned long long base = 0;
    if (g.thread_rank() == 0)
        base = atomicAdd((unsigned long long *)(t.ctr + C_NEXT_ROW), (unsigned long long)g.size());
    return (int64_t)(g.shfl(base, 0) + g.thread_rank());
}

enum op_kind { OP_FIND = 0, OP_FIND_OR_INSERT = 1, OP_ASSIGN = 2, OP_ERASE = 3 };

// One group of kG threads per key. rows_out: the key's row (-1 if absent for FIND).
template <int OP>
__global__ void probe_kernel(dev_table t, int64_t *__restrict__ rows_out,
                             const int64_t *__restrict__ keys, const float *__restrict__ values,
                             int64_t n)
{
    const int lane = threadIdx.x % kG;
    const int gshift = (threadIdx.x % 32) / kG * kG;
    const unsigned gmask = 0xFFu << gshift;
    const int64_t ngroups_grid = ((int64_t)gridDim.x * blockDim.x) / kG;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / kG; i < n;
         i += ngroups_grid) {
        const int64_t key = keys[i];
        const uint64_t h = grm_mix64((uint64_t)key);
        const uint64_t mask = t.nb - 1, step = bucket_step(key, t.nb);
        uint64_t b = h & mask;
        int64_t row = -1;
        bool fresh = false;
        for (uint64_t probes = 0; probes < t.nb;) {
            const uint64_t slot = b * kG + lane;
            long long st = load_state(t.state + slot);
            // wait for slots being written by another group of this batch
            while (__ballot_sync(gmask, st == kBusy) != 0) {
                if (st == kBusy) st = load_state(t.state + slot);
            }
            const bool match = st >= 0 && load_key(t.keys + slot) == key;
            const unsigned mb = __ballot_sync(gmask, match) >> gshift & 0xFFu;
            if (mb != 0) {
                const int src = __ffs(mb) - 1;
                row = __shfl_sync(gmask, (long long)st, gshift + src);
                if (OP == OP_ERASE && lane == src) {
                    if (atomicCAS((unsigned long long *)(t.state + slot), (unsigned long long)st,
                                  (unsigned long long)kTomb) == (unsigned long long)st) {
                        const long long top = atomicAdd(
                            (unsigned long long *)(t.ctr + C_FREE_TOP), 1ull);
                        t.free_rows[top] = row;
                    }
                }
                break;
            }
            const unsigned eb = __ballot_sync(gmask, st == kEmpty) >> gshift & 0xFFu;
            if (eb == 0) {                              // full bucket: next one (eq. 5)
                b = (b + step) & mask;
                probes++;
                continue;
            }
            if (OP == OP_FIND || OP == OP_ERASE) break; // an empty slot ends the sequence
            const int leader = __ffs(eb) - 1;
            long long won = 0;
            if (lane == leader) {
                if (atomicCAS((unsigned long long *)(t.state + slot), (unsigned long long)kEmpty,
                              (unsigned long long)kBusy) == (unsigned long long)kEmpty) {
                    const int64_t r = alloc_row(t);
                    *(volatile int64_t *)(t.keys + slot) = key;
                    __threadfence();
                    atomicExch((unsigned long long *)(t.state + slot), (unsigned long long)r);
                    won = 1 + r;
                }
            }
            won = __shfl_sync(gmask, won, gshift + leader);
            if (won != 0) {
                row = won - 1;
                fresh = true;
                break;
            }
            // lost the race for that slot: look at the same bucket again
        }
        if (OP == OP_FIND_OR_INSERT && fresh) {
            float *p = row_ptr(t, row);
            const uint64_t rs = grm_row_seed(t.seed, t.table_hash, key);
            for (int32_t j = lane; j < t.dim; j += kG)
                p[j] = grm_dev_row_init_elem(j, t.init, t.scale, rs);
        }
        if (OP == OP_ASSIGN && row >= 0) {
            float *p = row_ptr(t, row);
            for (int32_t j = lane; j < t.dim; j += kG) p[j] = values[i * t.dim + j];
        }
        if (rows_out != nullptr && lane == 0) rows_out[i] = row;
    }
}

// Re-insert every live (key, row) of the old key structure into the new one (growth).
__global__ void rehash_kernel(int64_t *__restrict__ nkeys, long long *__restrict__ nstate,
                              uint64_t nnb, const int64_t *__restrict__ okeys,
                              const long long *__restrict__ ostate, int64_t ocap)
{
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < ocap;
         s += (int64_t)gridDim.x * blockDim.x) {
        const long long row = ostate[s];
        if (row < 0) continue;
        const int64_t key = okeys[s];
        const uint64_t mask = nnb - 1, step = bucket_step(key, nnb);
        uint64_t b = grm_mix64((uint64_t)key) & mask;
        for (;;) {
            bool done = false;
            for (int l = 0; l < kG && !done; l++) {
                const uint64_t slot = b * kG + l;
                if (atomicCAS((unsigned long long *)(nstate + slot), (unsigned long long)kEmpty,
                              (unsigned long long)row) == (unsigned long long)kEmpty) {
                    nkeys[slot] = key;      // nobody reads keys during a rehash
                    done = true;
                }
            }
            if (done) break;
            b = (b + step) & mask;
        }
    }
}

// out [n, dim] = the rows (zeros for -1), VEC floats a thread: 4 (16-byte accesses) when
// dim % 4 == 0 and out is 16-byte aligned (chunks come from cudaMalloc), else 1. One float
// a thread ran at 1.0-1.8 G rows/s at dim 64-128 on an H100, a sixth of its bandwidth.
template <int VEC>
__global__ void gather_rows_kernel(float *__restrict__ out, dev_table t,
                                   const int64_t *__restrict__ rows, int64_t n)
{
    using V = typename std::conditional<VEC == 4, float4, float>::type;
    const int64_t nvec = t.dim / VEC, total = n * nvec;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = k / nvec, j = k - i * nvec;
        const int64_t r = __ldg(rows + i);
        V v;
        if (r >= 0) {
            v = reinterpret_cast<const V *>(row_ptr(t, r))[j];
        } else {
            memset(&v, 0, sizeof v);
        }
        reinterpret_cast<V *>(out)[k] = v;
    }
}

} // namespace

struct grm_cuda_hash {
    grm_cuda_hash_opts opts;
    int64_t cap;                    // key slots
    int64_t *keys;                  // [cap] device
    long long *state;               // [cap] device
    // the key structure a rehash at the same capacity left (one that only dropped erased
    // slots): the next such rehash reuses it, without cudaMalloc and the device-wide
    // synchronisation of cudaFree, since a table under steady churn (an HBM cache) does
    // that every few batches
    int64_t *spare_keys;
    long long *spare_state;
    int64_t spare_cap;
    std::vector<float *> chunks;    // host copy of the chunk pointers
    float **d_chunks;               // [chunk_slots] device
    int64_t chunk_slots;
    int64_t chunks_on_device;       // how many of chunks d_chunks holds
    int64_t *free_rows;             // [free_cap] device
    int64_t free_cap;
    long long *ctr;                 // [C_N] device
    long long host_ctr[C_N];        // as of the last synchronisation
    int64_t size, tombs;
};

static dev_table dev_view(const grm_cuda_hash *h)
{
    dev_table t;
    t.keys = h->keys;
    t.state = h->state;
    t.nb = (uint64_t)h->cap / kG;
    t.chunks = h->d_chunks;
    t.chunk_rows = h->opts.chunk_rows;
    t.dim = h->opts.dim;
    t.free_rows = h->free_rows;
    t.ctr = h->ctr;
    t.free_avail = h->host_ctr[C_FREE_TOP];
    t.init = h->opts.init;
    t.scale = h->opts.init_scale;
    t.seed = h->opts.seed;
    t.table_hash = h->opts.table_hash;
    return t;
}

static grm_status alloc_keys(int64_t cap, int64_t **keys, long long **state, cudaStream_t st)
{
    *keys = nullptr;
    *state = nullptr;
    GRM_CUDA_CHECK(cudaMalloc(keys, (size_t)cap * sizeof(int64_t)));
    const cudaError_t e = cudaMalloc(state, (size_t)cap * sizeof(long long));
    if (e != cudaSuccess) {
        cudaFree(*keys);
        *keys = nullptr;
        GRM_CUDA_CHECK(e);
    }
    GRM_CUDA_CHECK(cudaMemsetAsync(*state, 0xFF, (size_t)cap * sizeof(long long), st));  // kEmpty
    return GRM_OK;
}

// Rebuild the key structure with new_cap slots, dropping erased slots; rows stay in place.
// At the same capacity the spare structure is reused and the old one becomes the spare.
static grm_status rehash(grm_cuda_hash *h, int64_t new_cap, cudaStream_t st)
{
    int64_t *nkeys;
    long long *nstate;
    if (h->spare_cap == new_cap) {
        nkeys = h->spare_keys;
        nstate = h->spare_state;
        h->spare_keys = nullptr;
        h->spare_state = nullptr;
        h->spare_cap = 0;
        GRM_CUDA_CHECK(cudaMemsetAsync(nstate, 0xFF, (size_t)new_cap * sizeof(long long), st));
    } else {
        grm_status s = alloc_keys(new_cap, &nkeys, &nstate, st);
        if (s != GRM_OK) return s;
    }
    rehash_kernel<<<grm_cuda__blocks(h->cap, 256), 256, 0, st>>>(
        nkeys, nstate, (uint64_t)new_cap / kG, h->keys, h->state, h->cap);
    GRM_CUDA_CHECK_LAUNCH();
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    cudaFree(h->spare_keys);
    cudaFree(h->spare_state);
    if (new_cap == h->cap) {
        h->spare_keys = h->keys;
        h->spare_state = h->state;
        h->spare_cap = h->cap;
    } else {
        cudaFree(h->keys);
        cudaFree(h->state);
        h->spare_keys = nullptr;
        h->spare_state = nullptr;
        h->spare_cap = 0;
    }
    h->keys = nkeys;
    h->state = nstate;
    h->cap = new_cap;
    h->tombs = 0;
    return GRM_OK;
}

// Make room for n more keys: key slots under load factor 0.75, chunks for n fresh rows.
static grm_status reserve(grm_cuda_hash *h, int64_t n, cudaStream_t st)
{
    if ((double)(h->size + h->tombs + n) > 0.75 * (double)h->cap) {
        int64_t new_cap = h->cap;
        while ((double)(h->size + n) > 0.75 * (double)new_cap) new_cap *= 2;
        grm_status s = rehash(h, new_cap, st);
        if (s != GRM_OK) return s;
    }
    const int64_t need = h->host_ctr[C_NEXT_ROW] + n;
    const int64_t cr = h->opts.chunk_rows;
    while ((int64_t)h->chunks.size() * cr < need) {
        float *c = nullptr;
        GRM_CUDA_CHECK(cudaMalloc(&c, (size_t)cr * h->opts.dim * sizeof(float)));
        h->chunks.push_back(c);
    }
    if ((int64_t)h->chunks.size() > h->chunk_slots) {
        // the small pointer array is reallocated; the chunks it points to stay
        const int64_t slots = 2 * (int64_t)h->chunks.size();
        float **d = nullptr;
        GRM_CUDA_CHECK(cudaMalloc(&d, (size_t)slots * sizeof(float *)));
        cudaFree(h->d_chunks);
        h->d_chunks = d;
        h->chunk_slots = slots;
        h->chunks_on_device = 0;
    }
    if ((int64_t)h->chunks.size() != h->chunks_on_device) {     // a synchronous copy
        GRM_CUDA_CHECK(cudaMemcpy(h->d_chunks, h->chunks.data(),
                                  h->chunks.size() * sizeof(float *), cudaMemcpyHostToDevice));
        h->chunks_on_device = (int64_t)h->chunks.size();
    }
    return GRM_OK;
}

// Room on the free list for every row there is, before an erase pushes rows on it. Only
// an erase needs it: growing it as inserts added chunks put a cudaMalloc and a cudaFree (a
// device-wide synchronisation) into the timed insert of every batch that took a new chunk.
static grm_status reserve_free_list(grm_cuda_hash *h)
{
    const int64_t rows_cap = (int64_t)h->chunks.size() * h->opts.chunk_rows;
    if (rows_cap <= h->free_cap) return GRM_OK;
    int64_t *nf = nullptr;
    GRM_CUDA_CHECK(cudaMalloc(&nf, (size_t)rows_cap * sizeof(int64_t)));
    if (h->free_rows != nullptr && h->host_ctr[C_FREE_TOP] > 0)
        GRM_CUDA_CHECK(cudaMemcpy(nf, h->free_rows,
                                  (size_t)h->host_ctr[C_FREE_TOP] * sizeof(int64_t),
                                  cudaMemcpyDeviceToDevice));
    cudaFree(h->free_rows);
    h->free_rows = nf;
    h->free_cap = rows_cap;
    return GRM_OK;
}

// Read the counters back after a batch (synchronises) and fold them into the host view.
// An erase batch only pushes the free list: it erased what the list grew by. An insert
// batch only pops it (pops past the bottom take fresh rows and leave it negative): it
// inserted the fresh rows plus the recycled ones.
static grm_status settle(grm_cuda_hash *h, cudaStream_t st, bool erase)
{
    long long c[C_N];
    GRM_CUDA_CHECK(cudaMemcpyAsync(c, h->ctr, sizeof c, cudaMemcpyDeviceToHost, st));
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    if (erase) {
        const long long erased = c[C_FREE_TOP] - h->host_ctr[C_FREE_TOP];
        h->size -= erased;
        h->tombs += erased;
    } else if (c[C_FREE_TOP] < 0) {
        // pops past the bottom of the free list: the device's top is reset to 0 (the
        // one case where the host's view and the device's differ; a second copy and
        // synchronisation a call otherwise)
        c[C_FREE_TOP] = 0;
        GRM_CUDA_CHECK(cudaMemcpyAsync(h->ctr + C_FREE_TOP, &c[C_FREE_TOP], sizeof c[0],
                                       cudaMemcpyHostToDevice, st));
        GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    }
    if (!erase)
        h->size += c[C_NEXT_ROW] - h->host_ctr[C_NEXT_ROW] +
                   h->host_ctr[C_FREE_TOP] - c[C_FREE_TOP];
    memcpy(h->host_ctr, c, sizeof c);
    return GRM_OK;
}

extern "C" void grm_cuda_hash_destroy(grm_cuda_hash *h)
{
    if (h == nullptr) return;
    cudaFree(h->keys);
    cudaFree(h->state);
    cudaFree(h->spare_keys);
    cudaFree(h->spare_state);
    for (float *c : h->chunks) cudaFree(c);
    cudaFree(h->d_chunks);
    cudaFree(h->free_rows);
    cudaFree(h->ctr);
    delete h;
}

extern "C" grm_status grm_cuda_hash_create(grm_cuda_hash **out, const grm_cuda_hash_opts *o)
{
    const char *fn = "grm_cuda_hash_create";
    *out = nullptr;
    if (o->dim < 1 || o->dim > 4096)
        return grm_cuda__errorf(GRM_EINVAL, "%s: dim %d outside [1, 4096]", fn, (int)o->dim);
    if (o->chunk_rows < 1)
        return grm_cuda__errorf(GRM_EINVAL, "%s: chunk_rows %lld < 1", fn,
                                (long long)o->chunk_rows);
    if (o->capacity < 0 || o->capacity > ((int64_t)1 << 40))
        return grm_cuda__errorf(GRM_EINVAL, "%s: capacity %lld outside [0, 2^40]", fn,
                                (long long)o->capacity);
    if (o->init < GRM_EMB_INIT_ZEROS || o->init > GRM_EMB_INIT_NORMAL)
        return grm_cuda__errorf(GRM_EINVAL, "%s: init %d is not a grm_emb_init", fn,
                                (int)o->init);
    grm_cuda_hash *h = new (std::nothrow) grm_cuda_hash();
    if (h == nullptr) return grm_cuda__errorf(GRM_ENOMEM, "%s: out of host memory", fn);
    h->opts = *o;
    h->cap = 64;
    while (h->cap < o->capacity) h->cap *= 2;
    grm_status s = alloc_keys(h->cap, &h->keys, &h->state, nullptr);
    if (s != GRM_OK) goto fail;
    if (cudaStreamSynchronize(nullptr) != cudaSuccess) {
        s = grm_cuda__errorf(GRM_EDEVICE, "%s: clearing the key structure failed", fn);
        goto fail;
    }
    {
        const cudaError_t e = cudaMalloc(&h->ctr, C_N * sizeof(long long));
        if (e != cudaSuccess) {
            s = grm_cuda__errorf(GRM_EDEVICE, "%s: %s", fn, cudaGetErrorString(e));
            goto fail;
        }
        if (cudaMemset(h->ctr, 0, C_N * sizeof(long long)) != cudaSuccess) {
            s = grm_cuda__errorf(GRM_EDEVICE, "%s: cudaMemset failed", fn);
            goto fail;
        }
    }
    *out = h;
    return GRM_OK;
fail:
    grm_cuda_hash_destroy(h);
    return s;
}

template <int OP>
static grm_status run_op(grm_cuda_hash *h, int64_t *rows, const int64_t *keys,
                         const float *values, int64_t n, void *stream)
{
    if (n < 0) return grm_cuda__errorf(GRM_EINVAL, "grm_cuda_hash: n %lld < 0", (long long)n);
    if (n == 0) return GRM_OK;
    const cudaStream_t st = grm_cuda__stream(stream);
    if (OP == OP_FIND_OR_INSERT || OP == OP_ASSIGN) {
        grm_status s = reserve(h, n, st);
        if (s != GRM_OK) return s;
    }
    if (OP == OP_ERASE) {
        grm_status s = reserve_free_list(h);
        if (s != GRM_OK) return s;
    }
    if (h->d_chunks == nullptr) {                    // nothing inserted yet: all absent
        if (rows != nullptr) GRM_CUDA_CHECK(cudaMemsetAsync(rows, 0xFF, (size_t)n * 8, st));
        return GRM_OK;
    }
    probe_kernel<OP><<<grm_cuda__blocks(n * kG, 256), 256, 0, st>>>(dev_view(h), rows, keys,
                                                                    values, n);
    GRM_CUDA_CHECK_LAUNCH();
    if (OP == OP_FIND) return GRM_OK;
    return settle(h, st, OP == OP_ERASE);
}

extern "C" grm_status grm_cuda_hash_find(grm_cuda_hash *h, int64_t *rows, const int64_t *keys,
                                         int64_t n, void *stream)
{
    return run_op<OP_FIND>(h, rows, keys, nullptr, n, stream);
}

extern "C" grm_status grm_cuda_hash_find_or_insert(grm_cuda_hash *h, int64_t *rows,
                                                   const int64_t *keys, int64_t n, void *stream)
{
    return run_op<OP_FIND_OR_INSERT>(h, rows, keys, nullptr, n, stream);
}

extern "C" grm_status grm_cuda_hash_insert_or_assign(grm_cuda_hash *h, const int64_t *keys,
                                                     const float *values, int64_t n,
                                                     void *stream)
{
    return run_op<OP_ASSIGN>(h, nullptr, keys, values, n, stream);
}

extern "C" grm_status grm_cuda_hash_erase(grm_cuda_hash *h, const int64_t *keys, int64_t n,
                                          void *stream)
{
    return run_op<OP_ERASE>(h, nullptr, keys, nullptr, n, stream);
}

extern "C" grm_status grm_cuda_hash_gather(grm_cuda_hash *h, float *out, const int64_t *rows,
                                           int64_t n, void *stream)
{
    if (n < 0) return grm_cuda__errorf(GRM_EINVAL, "grm_cuda_hash_gather: n %lld < 0",
                                       (long long)n);
    if (n == 0) return GRM_OK;
    const cudaStream_t st = grm_cuda__stream(stream);
    if (h->d_chunks == nullptr) {
        GRM_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)n * h->opts.dim * sizeof(float), st));
        return GRM_OK;
    }
    if (h->opts.dim % 4 == 0 && (uintptr_t)out % 16 == 0)
        gather_rows_kernel<4><<<grm_cuda__blocks(n * h->opts.dim / 4, 256), 256, 0, st>>>(
            out, dev_view(h), rows, n);
    else
        gather_rows_kernel<1><<<grm_cuda__blocks(n * h->opts.dim, 256), 256, 0, st>>>(
            out, dev_view(h), rows, n);
    GRM_CUDA_CHECK_LAUNCH();
    return GRM_OK;
}

extern "C" int64_t grm_cuda_hash_size(const grm_cuda_hash *h)
{
    return h->size;
}

extern "C" int64_t grm_cuda_hash_capacity(const grm_cuda_hash *h)
{
    return h->cap;
}
