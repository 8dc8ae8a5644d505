// kernels/emb_cache.cu - an HBM cache of embedding rows over a host-RAM tier (seed 003 §2.2:
// a cache in fast memory over a larger, slower tier, the ids of batch i+1 brought in while
// batch i computes, never evicting batch i's rows; MTGRBoost §4.1 and HierarchicalKV keep the
// hot rows in HBM in the same way). The contract is in grm_cuda.h.
//
// Layout. Resident records live in three plain arrays indexed by slot, the layout of
// grm_cuda_row_opt_step: table [B, dim], state [B, sf * dim], steps [B]. Beside them per
// slot: the key, an LRU stamp (the batch number of its last use; kFree when the slot is
// empty) and a dirty flag. The key -> slot index is the device hash table of hash_table.cu
// with a one-float row of its own: its row index is the slot. It recycles erased rows
// before taking fresh ones, and ensure() evicts before it inserts, so slots stay below B.
//
// ensure(keys, stamp, protect), all on one stream, host-orchestrated:
//  1. dedup the keys (segment_unique, one feature) and find them;
//  2. compact the missing distinct keys (m of them);
//  3. stamp the resident keys (so this call cannot evict them); if rows + m > B, evict
//     k = rows + m - B rows among those stamped < protect, oldest
//     first: a histogram of ages (protect - 1 - stamp, the last bin holding every age past
//     it) picks the threshold age, one pass takes the rows older than it and as many of
//     that age as still needed; dirty victims are copied out and stored to the tier, then
//     the keys are erased (their slots go to the hash table's free list);
//  4. insert the missing keys (recycled slots), read their records from the tier into the
//     slots (or initialise them with grm_row_init, ported bit-exactly for ZEROS/UNIFORM);
//  5. stamp the admitted slots too: every key's slot ends at max(stamp, old) and, for an
//     update, dirty.
// Which of equally old rows are evicted depends on thread order; values never do, since
// every evicted dirty record is written back and a clean one equals the tier's copy (or its
// initial value, a pure function of the key).
#include <string.h>

#include <new>
#include <vector>

#include "cuda_common.cuh"

namespace {

constexpr long long kFree = (long long)(-0x7FFFFFFFFFFFFFFFll - 1);   // stamp of an empty slot
constexpr int kAgeBins = 4096;          // LRU ages told apart; older rows share the last bin
enum { K_MISS = 0, K_VICT = 1, K_QUOTA = 2, K_DIRTY = 3, K_N = 4 };

__global__ void compact_missing_kernel(int64_t *__restrict__ miss_keys,
                                       unsigned long long *__restrict__ cnt,
                                       const int64_t *__restrict__ uniq,
                                       const int64_t *__restrict__ slot_u, int64_t U)
{
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < U;
         u += (int64_t)gridDim.x * blockDim.x) {
        if (slot_u[u] >= 0) continue;
        const unsigned long long i = atomicAdd(cnt + K_MISS, 1ull);
        miss_keys[i] = uniq[u];
    }
}

__device__ __forceinline__ int age_bin(long long stamp, long long protect)
{
    const long long age = protect - 1 - stamp;          // >= 0 for an evictable row
    return age >= kAgeBins - 1 ? kAgeBins - 1 : (int)age;
}

// A block's histogram in shared memory, added to the global one bin by bin: ages cluster
// in a few recent batches, and one global atomic a row on those few addresses serialised
// (a 2M-row budget spent ~1 ms here on an H100).
__global__ void age_hist_kernel(unsigned long long *__restrict__ hist,
                                const long long *__restrict__ stamp, int64_t B,
                                long long protect)
{
    __shared__ unsigned int h[kAgeBins];
    for (int i = threadIdx.x; i < kAgeBins; i += blockDim.x) h[i] = 0;
    __syncthreads();
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < B;
         s += (int64_t)gridDim.x * blockDim.x) {
        const long long t = stamp[s];
        if (t == kFree || t >= protect) continue;
        atomicAdd(h + age_bin(t, protect), 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kAgeBins; i += blockDim.x)
        if (h[i] != 0) atomicAdd(hist + i, (unsigned long long)h[i]);
}

// Victims: every evictable row in a bin older than thr, and quota rows of bin thr. Their
// keys go to vkeys; dirty ones get a write-back index in wb_idx (-1 for clean).
__global__ void select_victims_kernel(int64_t *__restrict__ vslots, int64_t *__restrict__ vkeys,
                                      long long *__restrict__ wb_idx,
                                      unsigned long long *__restrict__ cnt,
                                      long long *__restrict__ stamp,
                                      uint8_t *__restrict__ dirty,
                                      const int64_t *__restrict__ slot_key, int64_t B,
                                      long long protect, int thr, unsigned long long quota)
{
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < B;
         s += (int64_t)gridDim.x * blockDim.x) {
        const long long t = stamp[s];
        if (t == kFree || t >= protect) continue;
        const int bin = age_bin(t, protect);
        if (bin < thr) continue;
        if (bin == thr && atomicAdd(cnt + K_QUOTA, 1ull) >= quota) continue;
        const unsigned long long i = atomicAdd(cnt + K_VICT, 1ull);
        vslots[i] = s;
        vkeys[i] = slot_key[s];
        wb_idx[i] = dirty[s] ? (long long)atomicAdd(cnt + K_DIRTY, 1ull) : -1ll;
        stamp[s] = kFree;
        dirty[s] = 0;
    }
}

// Flush: every dirty live slot, up to cap of them a pass (the counter runs on past cap, so
// the host sees whether another pass is needed); taken slots become clean.
__global__ void select_dirty_kernel(int64_t *__restrict__ vslots, int64_t *__restrict__ vkeys,
                                    long long *__restrict__ wb_idx,
                                    unsigned long long *__restrict__ cnt,
                                    const long long *__restrict__ stamp,
                                    uint8_t *__restrict__ dirty,
                                    const int64_t *__restrict__ slot_key, int64_t B,
                                    unsigned long long cap)
{
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < B;
         s += (int64_t)gridDim.x * blockDim.x) {
        if (stamp[s] == kFree || !dirty[s]) continue;
        const unsigned long long i = atomicAdd(cnt + K_DIRTY, 1ull);
        if (i >= cap) continue;
        vslots[i] = s;
        vkeys[i] = slot_key[s];
        wb_idx[i] = (long long)i;
        dirty[s] = 0;
    }
}

// Copy the records of the victims with a write-back index into wb_keys/wb_vals/wb_steps.
__global__ void pack_records_kernel(int64_t *__restrict__ wb_keys, float *__restrict__ wb_vals,
                                    int64_t *__restrict__ wb_steps,
                                    const int64_t *__restrict__ vslots,
                                    const int64_t *__restrict__ vkeys,
                                    const long long *__restrict__ wb_idx,
                                    const float *__restrict__ table,
                                    const float *__restrict__ state,
                                    const int64_t *__restrict__ steps, int64_t k, int32_t dim,
                                    int32_t sdim)
{
    const int64_t W = (int64_t)dim + sdim;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < k * W;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / W, j = e - i * W;
        const long long w = wb_idx[i];
        if (w < 0) continue;
        const int64_t s = vslots[i];
        wb_vals[w * W + j] = j < dim ? table[s * dim + j] : state[s * sdim + (j - dim)];
        if (j == 0) {
            wb_keys[w] = vkeys[i];
            wb_steps[w] = steps[s];
        }
    }
}

// Fill the slots of the missing keys from the tier's records, or initialise them.
__global__ void fill_kernel(float *__restrict__ table, float *__restrict__ state,
                            int64_t *__restrict__ steps, int64_t *__restrict__ slot_key,
                            long long *__restrict__ stamp, uint8_t *__restrict__ dirty,
                            const int64_t *__restrict__ mslots,
                            const int64_t *__restrict__ mkeys, const float *__restrict__ vals,
                            const int64_t *__restrict__ vsteps,
                            const uint8_t *__restrict__ found, int64_t m, int32_t dim,
                            int32_t sdim, int32_t init, double scale, uint64_t seed,
                            uint64_t table_hash)
{
    const int64_t W = (int64_t)dim + sdim;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * W;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / W, j = e - i * W;
        const int64_t s = mslots[i];
        float v;
        if (found[i]) {
            v = vals[i * W + j];
        } else if (j < dim) {
            v = grm_dev_row_init_elem((int32_t)j, init, scale,
                                      grm_row_seed(seed, table_hash, mkeys[i]));
        } else {
            v = 0.0f;
        }
        if (j < dim)
            table[s * dim + j] = v;
        else
            state[s * sdim + (j - dim)] = v;
        if (j == 0) {
            steps[s] = found[i] ? vsteps[i] : 0;
            slot_key[s] = mkeys[i];
            stamp[s] = kFree + 1;       // live, older than any stamp; set by stamp_kernel
            dirty[s] = 0;
        }
    }
}

__global__ void stamp_kernel(long long *__restrict__ stamp, uint8_t *__restrict__ dirty,
                             const int64_t *__restrict__ slot_u, int64_t U, long long t,
                             int mark_dirty)
{
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < U;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = slot_u[u];
        if (s < 0) continue;
        atomicMax(stamp + s, t);
        if (mark_dirty) dirty[s] = 1;
    }
}

__global__ void expand_kernel(int64_t *__restrict__ slots, const int64_t *__restrict__ slot_u,
                              const int64_t *__restrict__ inverse, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        slots[i] = slot_u[inverse[i]];
}

__global__ void fill_stamp_kernel(long long *__restrict__ stamp, int64_t B)
{
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < B;
         s += (int64_t)gridDim.x * blockDim.x)
        stamp[s] = kFree;
}

} // namespace

struct grm_cuda_cache {
    grm_cuda_cache_opts o;
    int64_t B, W;
    int32_t sdim;
    grm_cuda_hash *index;
    float *table, *state;
    int64_t *steps, *slot_key;
    long long *stamp;
    uint8_t *dirty;
    unsigned long long *cnt, *hist;     // [K_N], [kAgeBins] device
    unsigned long long *h_cnt, *h_hist; // pinned
    // scratch for up to ncap ids a call (grown on demand)
    int64_t ncap;
    int64_t *d_off, *h_off;             // [2] device, pinned: {0, n} for segment_unique
    int64_t *uniq, *uoff, *inverse, *slot_u, *mkeys, *mslots, *vslots, *vkeys, *wb_keys;
    int32_t *ufeat;
    long long *wb_idx;
    float *d_vals;                      // [ncap, W] staging on the device
    int64_t *d_steps;
    uint8_t *d_found;
    void *ws;
    size_t ws_bytes;
    int64_t *h_keys, *h_steps;          // pinned staging
    float *h_vals;
    uint8_t *h_found;
    grm_cuda_cache_stats st;
};

static void free_scratch(grm_cuda_cache *c)
{
    int64_t *dev64[] = {c->uniq, c->uoff, c->inverse, c->slot_u, c->mkeys, c->mslots,
                        c->vslots, c->vkeys, c->wb_keys, c->d_steps};
    for (int64_t *p : dev64) cudaFree(p);
    cudaFree(c->ufeat);
    cudaFree(c->wb_idx);
    cudaFree(c->d_vals);
    cudaFree(c->d_found);
    cudaFree(c->ws);
    cudaFreeHost(c->h_keys);
    cudaFreeHost(c->h_steps);
    cudaFreeHost(c->h_vals);
    cudaFreeHost(c->h_found);
    c->uniq = c->uoff = c->inverse = c->slot_u = c->mkeys = c->mslots = nullptr;
    c->vslots = c->vkeys = c->wb_keys = c->d_steps = nullptr;
    c->ufeat = nullptr;
    c->wb_idx = nullptr;
    c->d_vals = nullptr;
    c->d_found = nullptr;
    c->ws = nullptr;
    c->h_keys = c->h_steps = nullptr;
    c->h_vals = nullptr;
    c->h_found = nullptr;
    c->ncap = 0;
    c->ws_bytes = 0;
}

// Scratch for n ids a call (at least 4096, so a flush moves records in blocks of that many).
static grm_status reserve_scratch(grm_cuda_cache *c, int64_t n)
{
    if (n <= c->ncap) return GRM_OK;
    int64_t cap = c->ncap > 0 ? c->ncap : 4096;
    while (cap < n) cap *= 2;
    free_scratch(c);
    const size_t b8 = (size_t)cap * 8, W = (size_t)c->W;
    int64_t **dev64[] = {&c->uniq, &c->inverse, &c->slot_u, &c->mkeys, &c->mslots,
                         &c->vslots, &c->vkeys, &c->wb_keys, &c->d_steps};
    for (int64_t **p : dev64) GRM_CUDA_CHECK(cudaMalloc(p, b8));
    GRM_CUDA_CHECK(cudaMalloc(&c->uoff, 2 * sizeof(int64_t)));
    GRM_CUDA_CHECK(cudaMalloc(&c->ufeat, (size_t)cap * sizeof(int32_t)));
    GRM_CUDA_CHECK(cudaMalloc(&c->wb_idx, b8));
    GRM_CUDA_CHECK(cudaMalloc(&c->d_vals, (size_t)cap * W * sizeof(float)));
    GRM_CUDA_CHECK(cudaMalloc(&c->d_found, (size_t)cap));
    size_t wsb = 0;
    grm_status s = grm_cuda_segment_unique_workspace(cap, &wsb);
    if (s != GRM_OK) return s;
    GRM_CUDA_CHECK(cudaMalloc(&c->ws, wsb));
    c->ws_bytes = wsb;
    GRM_CUDA_CHECK(cudaMallocHost(&c->h_keys, b8));
    GRM_CUDA_CHECK(cudaMallocHost(&c->h_steps, b8));
    GRM_CUDA_CHECK(cudaMallocHost(&c->h_vals, (size_t)cap * W * sizeof(float)));
    GRM_CUDA_CHECK(cudaMallocHost(&c->h_found, (size_t)cap));
    c->ncap = cap;
    return GRM_OK;
}

extern "C" int64_t grm_cuda_cache_row_bytes(int32_t dim, int32_t state_floats)
{
    // record (row, state, step), stamp, key, dirty flag; the index: its one-float row, a
    // free-list entry, two key slots (a key and a state each) at load <= 0.5 and two more
    // in the spare structure that its tombstone rehashes reuse
    return 4 * (int64_t)dim * (1 + state_floats) + 8 + 8 + 8 + 1 + 4 + 8 + 4 * 16;
}

extern "C" void grm_cuda_cache_destroy(grm_cuda_cache *c)
{
    if (c == nullptr) return;
    free_scratch(c);
    grm_cuda_hash_destroy(c->index);
    cudaFree(c->table);
    cudaFree(c->state);
    cudaFree(c->steps);
    cudaFree(c->slot_key);
    cudaFree(c->stamp);
    cudaFree(c->dirty);
    cudaFree(c->cnt);
    cudaFree(c->hist);
    cudaFree(c->d_off);
    cudaFreeHost(c->h_cnt);
    cudaFreeHost(c->h_hist);
    cudaFreeHost(c->h_off);
    delete c;
}

static grm_status create_arrays(grm_cuda_cache *c)
{
    const size_t B = (size_t)c->B;
    GRM_CUDA_CHECK(cudaMalloc(&c->table, B * c->o.dim * sizeof(float)));
    if (c->sdim > 0) GRM_CUDA_CHECK(cudaMalloc(&c->state, B * c->sdim * sizeof(float)));
    GRM_CUDA_CHECK(cudaMalloc(&c->steps, B * sizeof(int64_t)));
    GRM_CUDA_CHECK(cudaMalloc(&c->slot_key, B * sizeof(int64_t)));
    GRM_CUDA_CHECK(cudaMalloc(&c->stamp, B * sizeof(long long)));
    GRM_CUDA_CHECK(cudaMalloc(&c->dirty, B));
    GRM_CUDA_CHECK(cudaMemset(c->dirty, 0, B));
    fill_stamp_kernel<<<grm_cuda__blocks(c->B, 256), 256>>>(c->stamp, c->B);
    GRM_CUDA_CHECK_LAUNCH();
    GRM_CUDA_CHECK(cudaMalloc(&c->cnt, K_N * sizeof(unsigned long long)));
    GRM_CUDA_CHECK(cudaMalloc(&c->hist, kAgeBins * sizeof(unsigned long long)));
    GRM_CUDA_CHECK(cudaMalloc(&c->d_off, 2 * sizeof(int64_t)));
    GRM_CUDA_CHECK(cudaMallocHost(&c->h_cnt, K_N * sizeof(unsigned long long)));
    GRM_CUDA_CHECK(cudaMallocHost(&c->h_hist, kAgeBins * sizeof(unsigned long long)));
    GRM_CUDA_CHECK(cudaMallocHost(&c->h_off, 2 * sizeof(int64_t)));
    GRM_CUDA_CHECK(cudaDeviceSynchronize());
    return GRM_OK;
}

extern "C" grm_status grm_cuda_cache_create(grm_cuda_cache **out, const grm_cuda_cache_opts *o)
{
    const char *fn = "grm_cuda_cache_create";
    *out = nullptr;
    if (o->budget_rows < 1 || o->budget_rows > ((int64_t)1 << 36))
        return grm_cuda__errorf(GRM_EINVAL, "%s: budget_rows %lld outside [1, 2^36]", fn,
                                (long long)o->budget_rows);
    if (o->dim < 1 || o->dim > 4096)
        return grm_cuda__errorf(GRM_EINVAL, "%s: dim %d outside [1, 4096]", fn, (int)o->dim);
    if (o->state_floats < 0 || o->state_floats > 8)
        return grm_cuda__errorf(GRM_EINVAL, "%s: state_floats %d outside [0, 8]", fn,
                                (int)o->state_floats);
    if (o->init < GRM_EMB_INIT_ZEROS || o->init > GRM_EMB_INIT_NORMAL)
        return grm_cuda__errorf(GRM_EINVAL, "%s: init %d is not a grm_emb_init", fn,
                                (int)o->init);
    if (o->backing.fetch == nullptr || o->backing.store == nullptr)
        return grm_cuda__errorf(GRM_EINVAL, "%s: the backing tier needs fetch and store", fn);
    grm_cuda_cache *c = new (std::nothrow) grm_cuda_cache();
    if (c == nullptr) return grm_cuda__errorf(GRM_ENOMEM, "%s: out of host memory", fn);
    c->o = *o;
    c->B = o->budget_rows;
    c->sdim = o->dim * o->state_floats;
    c->W = (int64_t)o->dim + c->sdim;
    c->st.budget_rows = c->B;
    grm_cuda_hash_opts ho = {};
    ho.capacity = 2 * c->B;
    ho.dim = 1;
    ho.init = GRM_EMB_INIT_ZEROS;
    ho.chunk_rows = c->B;
    grm_status s = grm_cuda_hash_create(&c->index, &ho);
    if (s == GRM_OK) s = create_arrays(c);
    if (s != GRM_OK) {
        grm_cuda_cache_destroy(c);
        return s;
    }
    *out = c;
    return GRM_OK;
}

extern "C" void grm_cuda_cache_arrays(grm_cuda_cache *c, float **table, float **state,
                                      int64_t **steps)
{
    *table = c->table;
    *state = c->state;
    *steps = c->steps;
}

extern "C" void grm_cuda_cache_get_stats(const grm_cuda_cache *c, grm_cuda_cache_stats *out)
{
    *out = c->st;
}

static grm_status read_counters(grm_cuda_cache *c, cudaStream_t st)
{
    GRM_CUDA_CHECK(cudaMemcpyAsync(c->h_cnt, c->cnt, K_N * sizeof(unsigned long long),
                                   cudaMemcpyDeviceToHost, st));
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    return GRM_OK;
}

// Pack the k selected records whose wb_idx >= 0 (nd of them), copy them to the host and
// store them to the tier.
static grm_status write_back(grm_cuda_cache *c, int64_t k, int64_t nd, cudaStream_t st)
{
    if (nd == 0) return GRM_OK;
    pack_records_kernel<<<grm_cuda__blocks(k * c->W, 256), 256, 0, st>>>(
        c->wb_keys, c->d_vals, c->d_steps, c->vslots, c->vkeys, c->wb_idx, c->table, c->state,
        c->steps, k, c->o.dim, c->sdim);
    GRM_CUDA_CHECK_LAUNCH();
    const size_t vb = (size_t)nd * c->W * sizeof(float);
    GRM_CUDA_CHECK(cudaMemcpyAsync(c->h_keys, c->wb_keys, (size_t)nd * 8,
                                   cudaMemcpyDeviceToHost, st));
    GRM_CUDA_CHECK(cudaMemcpyAsync(c->h_vals, c->d_vals, vb, cudaMemcpyDeviceToHost, st));
    GRM_CUDA_CHECK(cudaMemcpyAsync(c->h_steps, c->d_steps, (size_t)nd * 8,
                                   cudaMemcpyDeviceToHost, st));
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    grm_status s = c->o.backing.store(c->o.backing.ctx, c->h_keys, c->h_vals, c->h_steps, nd);
    if (s != GRM_OK) return s;
    c->st.written_back += nd;
    c->st.bytes_d2h += (int64_t)(vb + (size_t)nd * 8);
    return GRM_OK;
}

// Evict k rows stamped < protect, oldest first (step 3 of the file comment).
static grm_status evict(grm_cuda_cache *c, int64_t k, int64_t protect, cudaStream_t st)
{
    GRM_CUDA_CHECK(cudaMemsetAsync(c->hist, 0, kAgeBins * sizeof(unsigned long long), st));
    // a block a few thousand rows: fewer blocks flushing 4,096 bins each
    age_hist_kernel<<<grm_cuda__blocks(c->B, 256 * 16, 1024), 256, 0, st>>>(
        c->hist, c->stamp, c->B, (long long)protect);
    GRM_CUDA_CHECK_LAUNCH();
    GRM_CUDA_CHECK(cudaMemcpyAsync(c->h_hist, c->hist, kAgeBins * sizeof(unsigned long long),
                                   cudaMemcpyDeviceToHost, st));
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    int64_t older = 0;                  // evictable rows in bins above thr
    int thr = kAgeBins - 1;
    for (; thr >= 0; thr--) {
        if (older + (int64_t)c->h_hist[thr] >= k) break;
        older += (int64_t)c->h_hist[thr];
    }
    if (thr < 0)
        return grm_cuda__errorf(GRM_ENOMEM,
                                "grm_cuda_cache: a budget of %lld rows cannot take %lld more: "
                                "only %lld rows are older than the protected batch; the "
                                "budget must hold two batches' distinct ids (seed 003 §2.2)",
                                (long long)c->B, (long long)k, (long long)older);
    GRM_CUDA_CHECK(cudaMemsetAsync(c->cnt, 0, K_N * sizeof(unsigned long long), st));
    select_victims_kernel<<<grm_cuda__blocks(c->B, 256), 256, 0, st>>>(
        c->vslots, c->vkeys, c->wb_idx, c->cnt, c->stamp, c->dirty, c->slot_key, c->B,
        (long long)protect, thr, (unsigned long long)(k - older));
    GRM_CUDA_CHECK_LAUNCH();
    grm_status s = read_counters(c, st);
    if (s != GRM_OK) return s;
    if ((int64_t)c->h_cnt[K_VICT] != k)
        return grm_cuda__errorf(GRM_EDEVICE, "grm_cuda_cache: selected %lld victims, not %lld",
                                (long long)c->h_cnt[K_VICT], (long long)k);
    s = write_back(c, k, (int64_t)c->h_cnt[K_DIRTY], st);
    if (s != GRM_OK) return s;
    s = grm_cuda_hash_erase(c->index, c->vkeys, k, st);
    if (s != GRM_OK) return s;
    c->st.rows -= k;
    c->st.evicted += k;
    return GRM_OK;
}

// Insert the m missing keys (mkeys) and fill their slots from the tier (step 4).
static grm_status admit(grm_cuda_cache *c, int64_t m, cudaStream_t st)
{
    grm_status s = grm_cuda_hash_find_or_insert(c->index, c->mslots, c->mkeys, m, st);
    if (s != GRM_OK) return s;
    GRM_CUDA_CHECK(cudaMemcpyAsync(c->h_keys, c->mkeys, (size_t)m * 8, cudaMemcpyDeviceToHost,
                                   st));
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    memset(c->h_found, 0, (size_t)m);
    s = c->o.backing.fetch(c->o.backing.ctx, c->h_vals, c->h_steps, c->h_found, c->h_keys, m);
    if (s != GRM_OK) return s;
    int64_t found = 0;
    for (int64_t i = 0; i < m; i++) found += c->h_found[i] != 0;
    // only the found records travel: copy the whole staging block when most are found
    const size_t vb = (size_t)m * c->W * sizeof(float);
    if (found > 0) {
        GRM_CUDA_CHECK(cudaMemcpyAsync(c->d_vals, c->h_vals, vb, cudaMemcpyHostToDevice, st));
        GRM_CUDA_CHECK(cudaMemcpyAsync(c->d_steps, c->h_steps, (size_t)m * 8,
                                       cudaMemcpyHostToDevice, st));
        c->st.bytes_h2d += (int64_t)(vb + (size_t)m * 8);
    }
    GRM_CUDA_CHECK(cudaMemcpyAsync(c->d_found, c->h_found, (size_t)m, cudaMemcpyHostToDevice,
                                   st));
    fill_kernel<<<grm_cuda__blocks(m * c->W, 256), 256, 0, st>>>(
        c->table, c->state, c->steps, c->slot_key, c->stamp, c->dirty, c->mslots, c->mkeys,
        c->d_vals, c->d_steps, c->d_found, m, c->o.dim, c->sdim, c->o.init, c->o.init_scale,
        c->o.seed, c->o.table_hash);
    GRM_CUDA_CHECK_LAUNCH();
    // the pinned staging is reused by the next call: wait for the copies out of it
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    c->st.rows += m;
    c->st.fetched += found;
    c->st.initialised += m - found;
    return GRM_OK;
}

extern "C" grm_status grm_cuda_cache_ensure(grm_cuda_cache *c, int64_t *slots,
                                            const int64_t *keys, int64_t n, int64_t stamp,
                                            int64_t protect, uint32_t flags, void *stream)
{
    if (n < 0 || n > INT32_MAX)
        return grm_cuda__errorf(GRM_EINVAL, "grm_cuda_cache_ensure: n %lld outside [0, 2^31)",
                                (long long)n);
    if (stamp < 0 || protect < 0 || protect > stamp)
        return grm_cuda__errorf(GRM_EINVAL,
                                "grm_cuda_cache_ensure: stamp %lld and protect %lld must "
                                "satisfy 0 <= protect <= stamp",
                                (long long)stamp, (long long)protect);
    if (n == 0) return GRM_OK;
    const cudaStream_t st = grm_cuda__stream(stream);
    grm_status s = reserve_scratch(c, n);
    if (s != GRM_OK) return s;
    // 1. distinct keys, then which are resident
    c->h_off[0] = 0;
    c->h_off[1] = n;
    GRM_CUDA_CHECK(cudaMemcpyAsync(c->d_off, c->h_off, 2 * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, st));
    s = grm_cuda_segment_unique(c->uniq, c->ufeat, c->uoff, c->inverse, keys, c->d_off, n, 1,
                                c->ws, c->ws_bytes, st);
    if (s != GRM_OK) return s;
    GRM_CUDA_CHECK(cudaMemcpyAsync(c->h_off, c->uoff, 2 * sizeof(int64_t),
                                   cudaMemcpyDeviceToHost, st));
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    const int64_t U = c->h_off[1];
    s = grm_cuda_hash_find(c->index, c->slot_u, c->uniq, U, st);
    if (s != GRM_OK) return s;
    // 2. the missing ones
    GRM_CUDA_CHECK(cudaMemsetAsync(c->cnt, 0, K_N * sizeof(unsigned long long), st));
    compact_missing_kernel<<<grm_cuda__blocks(U, 256), 256, 0, st>>>(c->mkeys, c->cnt, c->uniq,
                                                                     c->slot_u, U);
    GRM_CUDA_CHECK_LAUNCH();
    s = read_counters(c, st);
    if (s != GRM_OK) return s;
    const int64_t m = (int64_t)c->h_cnt[K_MISS];
    if (m > c->B)
        return grm_cuda__errorf(GRM_ENOMEM,
                                "grm_cuda_cache: %lld distinct ids of one call exceed the "
                                "budget of %lld rows",
                                (long long)m, (long long)c->B);
    // 3. room; the resident keys of this call are stamped first, so they are not evicted
    const int mark = (flags & GRM_CUDA_CACHE_UPDATE) != 0;
    stamp_kernel<<<grm_cuda__blocks(U, 256), 256, 0, st>>>(c->stamp, c->dirty, c->slot_u, U,
                                                           (long long)stamp, mark);
    GRM_CUDA_CHECK_LAUNCH();
    if (c->st.rows + m > c->B) {
        s = evict(c, c->st.rows + m - c->B, protect, st);
        if (s != GRM_OK) return s;
    }
    // 4. admission, then 5. the stamps and dirty flags of the admitted rows
    if (m > 0) {
        s = admit(c, m, st);
        if (s != GRM_OK) return s;
        // the resident keys are stamped already: the admitted ones are mslots [m]
        stamp_kernel<<<grm_cuda__blocks(m, 256), 256, 0, st>>>(c->stamp, c->dirty, c->mslots,
                                                               m, (long long)stamp, mark);
        GRM_CUDA_CHECK_LAUNCH();
        if (slots != nullptr) {                 // every key's slot, for the expansion
            s = grm_cuda_hash_find(c->index, c->slot_u, c->uniq, U, st);
            if (s != GRM_OK) return s;
        }
    }
    if (slots != nullptr) {
        expand_kernel<<<grm_cuda__blocks(n, 256), 256, 0, st>>>(slots, c->slot_u, c->inverse, n);
        GRM_CUDA_CHECK_LAUNCH();
    }
    GRM_CUDA_CHECK(cudaStreamSynchronize(st));
    if (flags & GRM_CUDA_CACHE_PREFETCH) {
        c->st.prefetched += m;
    } else {
        c->st.lookups += n;
        c->st.unique += U;
        c->st.hits += U - m;
    }
    return GRM_OK;
}

extern "C" grm_status grm_cuda_cache_find(grm_cuda_cache *c, int64_t *slots,
                                          const int64_t *keys, int64_t n, void *stream)
{
    return grm_cuda_hash_find(c->index, slots, keys, n, stream);
}

extern "C" grm_status grm_cuda_cache_flush(grm_cuda_cache *c, void *stream)
{
    const cudaStream_t st = grm_cuda__stream(stream);
    grm_status s = reserve_scratch(c, 1);
    if (s != GRM_OK) return s;
    for (;;) {
        GRM_CUDA_CHECK(cudaMemsetAsync(c->cnt, 0, K_N * sizeof(unsigned long long), st));
        select_dirty_kernel<<<grm_cuda__blocks(c->B, 256), 256, 0, st>>>(
            c->vslots, c->vkeys, c->wb_idx, c->cnt, c->stamp, c->dirty, c->slot_key, c->B,
            (unsigned long long)c->ncap);
        GRM_CUDA_CHECK_LAUNCH();
        s = read_counters(c, st);
        if (s != GRM_OK) return s;
        const int64_t total = (int64_t)c->h_cnt[K_DIRTY];
        const int64_t k = total < c->ncap ? total : c->ncap;
        s = write_back(c, k, k, st);
        if (s != GRM_OK) return s;
        if (total <= c->ncap) return GRM_OK;
    }
}
