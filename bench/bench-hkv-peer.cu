/* bench/bench-hkv-peer.cu - NVIDIA HierarchicalKV (the GPU hash table under NVIDIA's
 * DynamicEmb and Merlin HugeCTR's embedding collections) on the cases of bench-cuda's
 * `hash_d*_lf*` lines, so bench_cuda.py can print grm's table against it from one run on
 * one GPU. Compiled by bench_cuda.py with nvcc when --hkv DIR (or $GRM_HKV_DIR) names a
 * checkout of github.com/NVIDIA-Merlin/HierarchicalKV (header-only); never part of the
 * build. Usage: bench-hkv-peer [quick]
 *
 * The protocol is bench-cuda's bench_hash(), call for call:
 *   - a table of `cap` keys (2^24; 2^20 with quick), D floats a key, random 63-bit keys;
 *   - fill to one batch (cap/16) below the load factor, untimed;
 *   - insert: one batch of new keys that ends at the load factor (insert_or_assign);
 *   - find: 10 x the first batch of keys, the values' addresses only (HKV's find into
 *     V**, as grm's find returns row indices);
 *   - find_values: 10 x find with the D floats copied out (grm: find + gather);
 *   - assign: 10 x insert_or_assign of the same batch, keys already present.
 * HKV's table is sized as grm's: init = max capacity = cap, values all in HBM, no
 * rehash (max_load_factor 1), LRU scores kept by HKV itself. */
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>

#include "merlin_hashtable.cuh"

using K = uint64_t;
using V = float;
using S = uint64_t;
using Table = nv::merlin::HashTable<K, V, S, nv::merlin::EvictStrategy::kLru>;

static void ck(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        std::printf("# bench-hkv-peer: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

static double now()
{
    return std::chrono::duration<double>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

/* splitmix64, bench-cuda's generator; its own seed, so other keys of the same kind
 * (bench-cuda draws its earlier cases' numbers from its stream first) */
static uint64_t state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd()
{
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    const bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        std::printf("# SKIP no CUDA device\n");
        return 0;
    }
    const int64_t cap = quick ? 1 << 20 : 1 << 24;
    const int dims[] = {64, 128};
    const double lfs[] = {0.5, 0.75};
    cudaStream_t st;
    ck(cudaStreamCreate(&st), "stream");
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            const int64_t D = dims[a];
            const int64_t total = (int64_t)(lfs[b] * (double)cap) - 1;
            const int64_t batch = cap / 16;
            const int64_t pre = total - batch;
            nv::merlin::HashTableOptions o;
            o.init_capacity = (size_t)cap;
            o.max_capacity = (size_t)cap;
            o.max_hbm_for_vectors = nv::merlin::GB(64);
            o.dim = (size_t)D;
            o.max_load_factor = 1.0f;
            Table t;
            t.init(o);
            std::vector<K> keys((size_t)total);
            for (auto &k : keys) k = rnd() >> 1;   /* HKV reserves the top three keys */
            K *d_keys;
            V *d_vals, **d_ptrs;
            bool *d_found;
            ck(cudaMalloc(&d_keys, (size_t)total * sizeof(K)), "malloc keys");
            ck(cudaMalloc(&d_vals, (size_t)total * (size_t)D * sizeof(V)), "malloc vals");
            ck(cudaMalloc(&d_ptrs, (size_t)batch * sizeof(V *)), "malloc ptrs");
            ck(cudaMalloc(&d_found, (size_t)batch), "malloc found");
            ck(cudaMemset(d_vals, 0, (size_t)total * (size_t)D * sizeof(V)), "memset");
            ck(cudaMemcpy(d_keys, keys.data(), (size_t)total * sizeof(K),
                          cudaMemcpyHostToDevice), "upload");
            /* the fill, in batches as a trainer would */
            for (int64_t i = 0; i < pre; i += batch) {
                const int64_t n = pre - i < batch ? pre - i : batch;
                t.insert_or_assign((size_t)n, d_keys + i, d_vals + i * D, nullptr, st);
            }
            ck(cudaStreamSynchronize(st), "fill");
            double t0 = now();
            t.insert_or_assign((size_t)batch, d_keys + pre, d_vals + pre * D, nullptr, st);
            ck(cudaStreamSynchronize(st), "insert");
            const double t_ins = now() - t0;
            /* warm the find kernels' selection once, untimed, as HKV's own benchmark does */
            t.find((size_t)batch, d_keys, d_ptrs, d_found, nullptr, st);
            t.find((size_t)batch, d_keys, d_vals, d_found, nullptr, st);
            ck(cudaStreamSynchronize(st), "warm");
            t0 = now();
            for (int it = 0; it < 10; it++)
                t.find((size_t)batch, d_keys, d_ptrs, d_found, nullptr, st);
            ck(cudaStreamSynchronize(st), "find");
            const double t_find = (now() - t0) / 10;
            t0 = now();
            for (int it = 0; it < 10; it++)
                t.find((size_t)batch, d_keys, d_vals, d_found, nullptr, st);
            ck(cudaStreamSynchronize(st), "find values");
            const double t_findv = (now() - t0) / 10;
            /* every key of the first batch must be found, or the times mean nothing */
            std::vector<char> found((size_t)batch);
            ck(cudaMemcpy(found.data(), d_found, (size_t)batch, cudaMemcpyDeviceToHost), "found");
            int64_t nfound = 0;
            for (char f : found) nfound += f != 0;
            t0 = now();
            for (int it = 0; it < 10; it++)
                t.insert_or_assign((size_t)batch, d_keys, d_vals, nullptr, st);
            ck(cudaStreamSynchronize(st), "assign");
            const double t_assign = (now() - t0) / 10;
            const double load = t.load_factor(st);
            std::printf("bench=cuda case=hash_d%lld_lf%.2f peer=hkv capacity=%lld batch=%lld "
                        "insert_mkeys_s=%.1f find_mkeys_s=%.1f find_values_mkeys_s=%.1f "
                        "assign_mkeys_s=%.1f load=%.3f found=%lld\n",
                        (long long)D, lfs[b], (long long)t.capacity(), (long long)batch,
                        (double)batch / t_ins / 1e6, (double)batch / t_find / 1e6,
                        (double)batch / t_findv / 1e6, (double)batch / t_assign / 1e6, load,
                        (long long)nfound);
            std::fflush(stdout);
            cudaFree(d_keys), cudaFree(d_vals), cudaFree(d_ptrs), cudaFree(d_found);
        }
    cudaStreamDestroy(st);
    return 0;
}
