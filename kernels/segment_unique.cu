// kernels/segment_unique.cu - id preparation of the sparse hot path (FusedRec §3, Fig. 3-5):
// segment unique of a fused group (dedup inside each feature, equal ids of different
// features kept apart, inverse indices I_u), rank-wise partition by destination
// (hash % nranks, positions I_s), and the CSR of duplicate occurrences that the fused row
// optimizers consume. The references the tests compare with are plain loops in
// tests/test-cuda-unique.c (first-occurrence dedup per feature, stable partition).
// All outputs are integers and deterministic, so the test compares them exactly.
#include <cub/cub.cuh>

#include "cuda_common.cuh"

namespace {

constexpr int kBlock = 256;                 // inputs per block in the count/scatter passes
constexpr uint64_t kEmpty = ~0ull;          // free slot of the scratch hash table

size_t align_up(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

// Carve `bytes` from the workspace cursor (256-byte aligned pieces).
template <typename T> T *carve(char *&cur, size_t count)
{
    T *p = reinterpret_cast<T *>(cur);
    cur += align_up(count * sizeof(T));
    return p;
}

int64_t table_slots(int64_t n)
{
    int64_t cap = 64;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

// ---- segment unique ----
// Step (1) of Fig. 5: hash every (id, feature) into a scratch table whose slots hold the
// index of the key's first occurrence (CAS to claim, atomicMin to keep the smallest index:
// every index that reaches a claimed slot carries the same key, so the slot always names
// an occurrence of its key). Steps (2)-(3): the first occurrences are compacted with warp
// ballot/popc counts per block, a scan of the block counts, and a ballot/popc rank inside
// the block, which yields the unique keys in first-occurrence order.

__global__ void feature_of_kernel(int32_t *__restrict__ feat, const int64_t *__restrict__ offsets,
                                  int64_t n, int64_t F)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        // the last f with offsets[f] <= i (empty features share offsets, skip them)
        int64_t lo = 0, hi = F - 1;
        while (lo < hi) {
            const int64_t mid = (lo + hi + 1) / 2;
            if (__ldg(offsets + mid) <= i) lo = mid;
            else hi = mid - 1;
        }
        feat[i] = (int32_t)lo;
    }
}

__device__ __forceinline__ uint64_t key_hash(int64_t id, int32_t f)
{
    return grm_mix64((uint64_t)id ^ grm_mix64((uint64_t)f + 1));
}

__global__ void insert_kernel(unsigned long long *__restrict__ slots, int64_t *__restrict__ hslot,
                              const int64_t *__restrict__ ids, const int32_t *__restrict__ feat,
                              int64_t n, uint64_t mask)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t id = ids[i];
        const int32_t f = feat[i];
        uint64_t s = key_hash(id, f) & mask;
        for (;;) {
            unsigned long long cur = slots[s];
            if (cur == kEmpty) {
                cur = atomicCAS(slots + s, kEmpty, (unsigned long long)i);
                if (cur == kEmpty) break;                  // claimed
            }
            if (ids[cur] == id && feat[cur] == f) {
                atomicMin(slots + s, (unsigned long long)i);
                break;
            }
            s = (s + 1) & mask;                            // linear probing
        }
        hslot[i] = (int64_t)s;
    }
}

__device__ __forceinline__ bool is_first(const unsigned long long *slots, const int64_t *hslot,
                                         int64_t i)
{
    return slots[hslot[i]] == (unsigned long long)i;
}

// counts[b] = number of first occurrences among inputs [b * kBlock, (b + 1) * kBlock)
__global__ void count_kernel(int64_t *__restrict__ counts, const unsigned long long *slots,
                             const int64_t *hslot, int64_t n)
{
    __shared__ int warp_count[kBlock / 32];
    const int64_t i = blockIdx.x * (int64_t)kBlock + threadIdx.x;
    const bool flag = i < n && is_first(slots, hslot, i);
    const unsigned ballot = __ballot_sync(0xffffffffu, flag);
    if ((threadIdx.x & 31) == 0) warp_count[threadIdx.x >> 5] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
        int64_t c = 0;
        for (int w = 0; w < kBlock / 32; w++) c += warp_count[w];
        counts[blockIdx.x] = c;
    }
}

__global__ void scatter_kernel(int64_t *__restrict__ uniq_ids, int32_t *__restrict__ uniq_feat,
                               int64_t *__restrict__ upos, const int64_t *__restrict__ block_off,
                               const unsigned long long *slots, const int64_t *hslot,
                               const int64_t *__restrict__ ids, const int32_t *__restrict__ feat,
                               int64_t n)
{
    __shared__ int warp_off[kBlock / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t i = blockIdx.x * (int64_t)kBlock + threadIdx.x;
    const bool flag = i < n && is_first(slots, hslot, i);
    const unsigned ballot = __ballot_sync(0xffffffffu, flag);
    if (lane == 0) warp_off[warp] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
        int acc = 0;
        for (int w = 0; w < kBlock / 32; w++) {
            const int c = warp_off[w];
            warp_off[w] = acc;
            acc += c;
        }
    }
    __syncthreads();
    if (flag) {
        const int rank = __popc(ballot & ((1u << lane) - 1u));
        const int64_t pos = block_off[blockIdx.x] + warp_off[warp] + rank;
        uniq_ids[pos] = ids[i];
        uniq_feat[pos] = feat[i];
        upos[i] = pos;
    }
}

__global__ void inverse_kernel(int64_t *__restrict__ inverse, const int64_t *__restrict__ upos,
                               const unsigned long long *slots, const int64_t *hslot, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        inverse[i] = upos[slots[hslot[i]]];
}

// uniq_offsets[f] = first occurrences before input offsets[f] (uniques keep feature order)
__global__ void uniq_offsets_kernel(int64_t *__restrict__ uniq_offsets,
                                    const int64_t *__restrict__ offsets,
                                    const int64_t *__restrict__ block_off,
                                    const unsigned long long *slots, const int64_t *hslot,
                                    int64_t n, int64_t F)
{
    for (int64_t f = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; f <= F;
         f += (int64_t)gridDim.x * blockDim.x) {
        const int64_t p = min(offsets[f], n);
        const int64_t b = p / kBlock;
        int64_t c = block_off[b];
        for (int64_t i = b * kBlock; i < p; i++) c += is_first(slots, hslot, i);
        uniq_offsets[f] = c;
    }
}

struct unique_ws {
    unsigned long long *slots;
    int64_t *hslot, *upos, *counts, *block_off;
    int32_t *feat;
    void *cub_tmp;
    size_t cub_bytes;
    size_t total;
};

grm_status unique_layout(int64_t n, char *base, unique_ws *w)
{
    const int64_t cap = table_slots(n);
    const int64_t nb = (n + kBlock - 1) / kBlock;
    w->cub_bytes = 0;
    const cudaError_t e = cub::DeviceScan::ExclusiveSum(nullptr, w->cub_bytes,
                                                        (int64_t *)nullptr, (int64_t *)nullptr,
                                                        (int)(nb + 1));
    GRM_CUDA_CHECK(e);
    char *cur = base;
    w->slots = carve<unsigned long long>(cur, (size_t)cap);
    w->hslot = carve<int64_t>(cur, (size_t)n);
    w->upos = carve<int64_t>(cur, (size_t)n);
    w->feat = carve<int32_t>(cur, (size_t)n);
    w->counts = carve<int64_t>(cur, (size_t)nb + 1);
    w->block_off = carve<int64_t>(cur, (size_t)nb + 1);
    w->cub_tmp = cur;
    cur += align_up(w->cub_bytes);
    w->total = (size_t)(cur - base);
    return GRM_OK;
}

grm_status check_n(const char *fn, int64_t n)
{
    if (n < 0 || n > INT32_MAX)
        return grm_cuda__errorf(GRM_EINVAL, "%s: n %lld outside [0, 2^31 - 1]", fn,
                                (long long)n);
    return GRM_OK;
}

grm_status check_ws(const char *fn, size_t have, size_t need)
{
    if (have < need)
        return grm_cuda__errorf(GRM_EINVAL, "%s: workspace of %zu bytes, needs %zu; size it "
                                "with the _workspace function", fn, have, need);
    return GRM_OK;
}

// ---- rank partition and CSR: a stable radix sort of small keys ----

__global__ void dest_kernel(uint32_t *__restrict__ keys, int64_t *__restrict__ iota,
                            const int64_t *__restrict__ ids, int64_t n, uint32_t nranks)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        keys[i] = (uint32_t)(grm_mix64((uint64_t)ids[i]) % nranks);
        iota[i] = i;
    }
}

__global__ void permute_kernel(int64_t *__restrict__ sorted_ids, int32_t *__restrict__ sorted_feat,
                               int64_t *__restrict__ positions,
                               unsigned long long *__restrict__ counts,
                               const uint32_t *__restrict__ keys_sorted,
                               const int64_t *__restrict__ perm, const int64_t *__restrict__ ids,
                               const int32_t *__restrict__ feat, int64_t n)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n;
         j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = perm[j];
        sorted_ids[j] = ids[i];
        if (sorted_feat != nullptr) sorted_feat[j] = feat[i];
        positions[i] = j;
        atomicAdd(counts + keys_sorted[j], 1ull);
    }
}

__global__ void inverse_keys_kernel(uint32_t *__restrict__ keys, int64_t *__restrict__ iota,
                                    const int64_t *__restrict__ inverse, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        keys[i] = (uint32_t)inverse[i];
        iota[i] = i;
    }
}

// csr_offsets[u] = first j with keys_sorted[j] >= u, for u in [0, U]
__global__ void lower_bound_kernel(int64_t *__restrict__ csr_offsets,
                                   const uint32_t *__restrict__ keys_sorted, int64_t n,
                                   int64_t U)
{
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u <= U;
         u += (int64_t)gridDim.x * blockDim.x) {
        int64_t lo = 0, hi = n;
        while (lo < hi) {
            const int64_t mid = (lo + hi) / 2;
            if ((int64_t)keys_sorted[mid] < u) lo = mid + 1;
            else hi = mid;
        }
        csr_offsets[u] = lo;
    }
}

struct sort_ws {
    uint32_t *keys_in, *keys_out;
    int64_t *vals_in, *vals_out;
    void *cub_tmp;
    size_t cub_bytes;
    size_t total;
};

grm_status sort_layout(int64_t n, char *base, sort_ws *w)
{
    w->cub_bytes = 0;
    GRM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, w->cub_bytes, (uint32_t *)nullptr,
                                                   (uint32_t *)nullptr, (int64_t *)nullptr,
                                                   (int64_t *)nullptr, (int)(n > 0 ? n : 1)));
    char *cur = base;
    w->keys_in = carve<uint32_t>(cur, (size_t)n);
    w->keys_out = carve<uint32_t>(cur, (size_t)n);
    w->vals_in = carve<int64_t>(cur, (size_t)n);
    w->vals_out = carve<int64_t>(cur, (size_t)n);
    w->cub_tmp = cur;
    cur += align_up(w->cub_bytes);
    w->total = (size_t)(cur - base);
    return GRM_OK;
}

int bits_for(uint64_t maxval)
{
    int b = 1;
    while (b < 32 && (maxval >> b) != 0) b++;
    return b;
}

} // namespace

extern "C" grm_status grm_cuda_segment_unique_workspace(int64_t n, size_t *bytes)
{
    grm_status s = check_n("grm_cuda_segment_unique_workspace", n);
    if (s != GRM_OK) return s;
    unique_ws w;
    s = unique_layout(n, nullptr, &w);
    *bytes = w.total;
    return s;
}

extern "C" grm_status grm_cuda_segment_unique(int64_t *uniq_ids, int32_t *uniq_feat,
                                              int64_t *uniq_offsets, int64_t *inverse,
                                              const int64_t *ids, const int64_t *offsets,
                                              int64_t n, int64_t F, void *workspace,
                                              size_t workspace_bytes, void *stream)
{
    const char *fn = "grm_cuda_segment_unique";
    grm_status s = check_n(fn, n);
    if (s != GRM_OK) return s;
    if (F < 1 || F > INT32_MAX)
        return grm_cuda__errorf(GRM_EINVAL, "%s: F %lld outside [1, 2^31 - 1]", fn,
                                (long long)F);
    unique_ws w;
    s = unique_layout(n, static_cast<char *>(workspace), &w);
    if (s != GRM_OK) return s;
    s = check_ws(fn, workspace_bytes, w.total);
    if (s != GRM_OK) return s;
    const cudaStream_t st = grm_cuda__stream(stream);
    if (n == 0) {
        GRM_CUDA_CHECK(cudaMemsetAsync(uniq_offsets, 0, (size_t)(F + 1) * sizeof(int64_t), st));
        return GRM_OK;
    }
    const int64_t cap = table_slots(n);
    const unsigned nb = (unsigned)((n + kBlock - 1) / kBlock);
    const unsigned grid = grm_cuda__blocks(n, 256);
    GRM_CUDA_CHECK(cudaMemsetAsync(w.slots, 0xFF, (size_t)cap * sizeof(uint64_t), st));
    GRM_CUDA_CHECK(cudaMemsetAsync(w.counts, 0, ((size_t)nb + 1) * sizeof(int64_t), st));
    feature_of_kernel<<<grid, 256, 0, st>>>(w.feat, offsets, n, F);
    insert_kernel<<<grid, 256, 0, st>>>(w.slots, w.hslot, ids, w.feat, n, (uint64_t)cap - 1);
    count_kernel<<<nb, kBlock, 0, st>>>(w.counts, w.slots, w.hslot, n);
    GRM_CUDA_CHECK_LAUNCH();
    size_t cub_bytes = w.cub_bytes;
    GRM_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(w.cub_tmp, cub_bytes, w.counts, w.block_off,
                                                 (int)nb + 1, st));
    scatter_kernel<<<nb, kBlock, 0, st>>>(uniq_ids, uniq_feat, w.upos, w.block_off, w.slots,
                                          w.hslot, ids, w.feat, n);
    inverse_kernel<<<grid, 256, 0, st>>>(inverse, w.upos, w.slots, w.hslot, n);
    uniq_offsets_kernel<<<grm_cuda__blocks(F + 1, 256), 256, 0, st>>>(
        uniq_offsets, offsets, w.block_off, w.slots, w.hslot, n, F);
    GRM_CUDA_CHECK_LAUNCH();
    return GRM_OK;
}

extern "C" grm_status grm_cuda_rank_partition_workspace(int64_t n, size_t *bytes)
{
    grm_status s = check_n("grm_cuda_rank_partition_workspace", n);
    if (s != GRM_OK) return s;
    sort_ws w;
    s = sort_layout(n, nullptr, &w);
    *bytes = w.total;
    return s;
}

extern "C" grm_status grm_cuda_rank_partition(int64_t *sorted_ids, int32_t *sorted_feat,
                                              int64_t *rank_counts, int64_t *positions,
                                              const int64_t *ids, const int32_t *feat,
                                              int64_t n, int32_t nranks, void *workspace,
                                              size_t workspace_bytes, void *stream)
{
    const char *fn = "grm_cuda_rank_partition";
    grm_status s = check_n(fn, n);
    if (s != GRM_OK) return s;
    if (nranks < 1 || nranks > 65536)
        return grm_cuda__errorf(GRM_EINVAL, "%s: nranks %d outside [1, 65536]", fn, (int)nranks);
    if ((sorted_feat == nullptr) != (feat == nullptr))
        return grm_cuda__errorf(GRM_EINVAL, "%s: sorted_feat and feat must both be given or "
                                "both be NULL", fn);
    sort_ws w;
    s = sort_layout(n, static_cast<char *>(workspace), &w);
    if (s != GRM_OK) return s;
    s = check_ws(fn, workspace_bytes, w.total);
    if (s != GRM_OK) return s;
    const cudaStream_t st = grm_cuda__stream(stream);
    GRM_CUDA_CHECK(cudaMemsetAsync(rank_counts, 0, (size_t)nranks * sizeof(int64_t), st));
    if (n == 0) return GRM_OK;
    const unsigned grid = grm_cuda__blocks(n, 256);
    dest_kernel<<<grid, 256, 0, st>>>(w.keys_in, w.vals_in, ids, n, (uint32_t)nranks);
    GRM_CUDA_CHECK_LAUNCH();
    size_t cub_bytes = w.cub_bytes;
    // radix sort is stable: keys of one destination keep their input order
    GRM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.cub_tmp, cub_bytes, w.keys_in, w.keys_out,
                                                   w.vals_in, w.vals_out, (int)n, 0,
                                                   bits_for((uint64_t)nranks - 1), st));
    permute_kernel<<<grid, 256, 0, st>>>(sorted_ids, sorted_feat, positions,
                                         reinterpret_cast<unsigned long long *>(rank_counts),
                                         w.keys_out, w.vals_out, ids, feat, n);
    GRM_CUDA_CHECK_LAUNCH();
    return GRM_OK;
}

extern "C" grm_status grm_cuda_csr_from_inverse_workspace(int64_t n, size_t *bytes)
{
    return grm_cuda_rank_partition_workspace(n, bytes);
}

extern "C" grm_status grm_cuda_csr_from_inverse(int64_t *csr_offsets, int64_t *csr_index,
                                                const int64_t *inverse, int64_t n, int64_t U,
                                                void *workspace, size_t workspace_bytes,
                                                void *stream)
{
    const char *fn = "grm_cuda_csr_from_inverse";
    grm_status s = check_n(fn, n);
    if (s != GRM_OK) return s;
    if (U < 0 || U > INT32_MAX)
        return grm_cuda__errorf(GRM_EINVAL, "%s: U %lld outside [0, 2^31 - 1]", fn,
                                (long long)U);
    sort_ws w;
    s = sort_layout(n, static_cast<char *>(workspace), &w);
    if (s != GRM_OK) return s;
    s = check_ws(fn, workspace_bytes, w.total);
    if (s != GRM_OK) return s;
    const cudaStream_t st = grm_cuda__stream(stream);
    if (n == 0) {
        GRM_CUDA_CHECK(cudaMemsetAsync(csr_offsets, 0, (size_t)(U + 1) * sizeof(int64_t), st));
        return GRM_OK;
    }
    const unsigned grid = grm_cuda__blocks(n, 256);
    inverse_keys_kernel<<<grid, 256, 0, st>>>(w.keys_in, w.vals_in, inverse, n);
    GRM_CUDA_CHECK_LAUNCH();
    size_t cub_bytes = w.cub_bytes;
    GRM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.cub_tmp, cub_bytes, w.keys_in, w.keys_out,
                                                   w.vals_in, csr_index, (int)n, 0,
                                                   bits_for(U > 0 ? (uint64_t)U - 1 : 0), st));
    lower_bound_kernel<<<grm_cuda__blocks(U + 1, 256), 256, 0, st>>>(csr_offsets, w.keys_out, n,
                                                                      U);
    GRM_CUDA_CHECK_LAUNCH();
    return GRM_OK;
}
