/* grm/rng.h - deterministic row initialization shared by every embedding store.
 *
 * A row's initial value is a pure function of (seed, table, id): the generator stream of
 * each row is seeded from those three alone, so rows come out the same whatever the thread
 * timing, the insertion order, the shard layout or the store plugin. All helpers are
 * static inline; nothing here needs libgrmcore. Generator: SplitMix64 (Steele, Lea and
 * Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014); mixer: the
 * MurmurHash3 fmix64 finalizer; hash of names: FNV-1a 64. */
#ifndef GRM_RNG_H
#define GRM_RNG_H

#include <math.h>
#include <stdint.h>

#include <grm/emb.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Under nvcc, GRM_RNG_HD makes grm_mix64 and grm_row_seed __host__ __device__, so CUDA
 * kernels call these very functions and hash and seed rows bit-identically with the host;
 * elsewhere it is empty. Since 1.3. */
#ifdef __CUDACC__
#define GRM_RNG_HD __host__ __device__
#else
#define GRM_RNG_HD
#endif

/* Advance a SplitMix64 state and return the next 64 random bits.
 * state: borrowed, updated in place; any value (including 0) is a valid state.
 * Cannot fail. Thread-safe for distinct states. Since 1.0. */
static inline uint64_t grm_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Mix the bits of x (MurmurHash3's fmix64 finalizer): a bijection on 64-bit values whose
 * every output bit depends on every input bit. Pure. Since 1.0. */
GRM_RNG_HD static inline uint64_t grm_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xFF51AFD7ED558CCD);
    x ^= x >> 33;
    x *= UINT64_C(0xC4CEB9FE1A85EC53);
    x ^= x >> 33;
    return x;
}

/* A uniform double in [0, 1) made from the top 53 bits of the next SplitMix64 output, so
 * every value is a multiple of 2^-53. state: borrowed, updated. Since 1.0. */
static inline double grm_rng_uniform01(uint64_t *state)
{
    return (double)(grm_splitmix64(state) >> 11) * (1.0 / 9007199254740992.0); /* 2^53 */
}

/* FNV-1a 64-bit hash of the NUL-terminated string s (borrowed); the table_hash that
 * grm_row_init takes is grm_str_hash64(table name). NULL hashes like "". Pure. Since 1.0. */
static inline uint64_t grm_str_hash64(const char *s)
{
    uint64_t h = UINT64_C(0xCBF29CE484222325);          /* FNV offset basis */
    if (s == NULL) return h;
    for (; *s != '\0'; s++) {
        h ^= (uint64_t)(unsigned char)*s;
        h *= UINT64_C(0x100000001B3);                   /* FNV prime */
    }
    return h;
}

/* The seed of the generator stream of row `id` of a table:
 * grm_mix64(seed ^ grm_mix64(table_hash ^ grm_mix64((uint64_t)id))). Pure. Since 1.0. */
GRM_RNG_HD static inline uint64_t grm_row_seed(uint64_t seed, uint64_t table_hash, int64_t id)
{
    return grm_mix64(seed ^ grm_mix64(table_hash ^ grm_mix64((uint64_t)id)));
}

/* Fill row [dim] with the initial value of row `id`:
 *   GRM_EMB_INIT_ZEROS    0;
 *   GRM_EMB_INIT_UNIFORM  scale * (2u - 1), u = grm_rng_uniform01: U(-scale, scale);
 *   GRM_EMB_INIT_NORMAL   scale * z, z ~ N(0, 1) by Box-Muller on pairs of uniforms
 *                         (u1 taken as 1 - u in (0, 1] so the log is finite; the pair gives
 *                         z0 = r cos(2 pi u2), z1 = r sin(2 pi u2), r = sqrt(-2 ln u1)).
 * The stream is seeded with grm_row_seed(seed, table_hash, id), so the result depends on
 * nothing else. row: borrowed, written [dim]; dim <= 0 writes nothing. init: grm_emb_init;
 * any other value writes zeros (callers validate init when they are created).
 * table_hash: grm_str_hash64 of the table name. Cannot fail. Thread-safe. Since 1.0. */
static inline void grm_row_init(float *row /* [dim] */, int32_t dim, int32_t init,
                                double scale, uint64_t seed, uint64_t table_hash, int64_t id)
{
    const double two_pi = 6.283185307179586476925286766559;
    uint64_t state = grm_row_seed(seed, table_hash, id);
    int32_t j;

    if (init == GRM_EMB_INIT_UNIFORM) {
        for (j = 0; j < dim; j++)
            row[j] = (float)(scale * (2.0 * grm_rng_uniform01(&state) - 1.0));
    } else if (init == GRM_EMB_INIT_NORMAL) {
        for (j = 0; j < dim; j += 2) {
            const double u1 = 1.0 - grm_rng_uniform01(&state);    /* (0, 1] */
            const double u2 = grm_rng_uniform01(&state);
            const double r = sqrt(-2.0 * log(u1));
            row[j] = (float)(scale * r * cos(two_pi * u2));
            if (j + 1 < dim) row[j + 1] = (float)(scale * r * sin(two_pi * u2));
        }
    } else {
        for (j = 0; j < dim; j++) row[j] = 0.0f;
    }
}

#ifdef __cplusplus
}
#endif
#endif /* GRM_RNG_H */
