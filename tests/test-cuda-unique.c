/* tests/test-cuda-unique.c - kernels/segment_unique.cu against plain C written here:
 * segment unique of a fused group (first-occurrence dedup inside each feature, equal ids of
 * different features kept apart, inverse indices), the stable rank-wise partition by
 * grm_mix64(id) % nranks with positions, and the CSR of duplicate occurrences. Inputs: no
 * ids, empty and length-1 features, duplicate-heavy streams, ids at the 64-bit edges
 * (INT64_MIN, INT64_MAX, 0, -1) shared across features, and a 300k-id stream spanning many
 * blocks. Every output is an integer and compared exactly. */
#include <grm/rng.h>

#include "cuda-common.h"

#define N_CASES 5
#define N_PER_CASE 6
#define N_NEG 5

typedef struct ucase {
    const char *name;
    int64_t n, F;
    int64_t *ids;       /* [n] */
    int64_t *offsets;   /* [F+1] */
} ucase;

/* ---- references ---- */

/* first-occurrence dedup per feature with a small open-addressing map of (id, f) */
static int64_t unique_ref(int64_t *uids, int32_t *ufeat, int64_t *uoff, int64_t *inverse,
                          const ucase *c)
{
    int64_t cap = 64;
    while (cap < 2 * c->n) cap *= 2;
    int64_t *slot = tc_xmalloc((size_t)cap * sizeof(int64_t));    /* unique index + 1 */
    int64_t U = 0;
    for (int64_t f = 0; f < c->F; f++) {
        uoff[f] = U;
        for (int64_t i = c->offsets[f]; i < c->offsets[f + 1]; i++) {
            uint64_t h = grm_mix64((uint64_t)c->ids[i] * 31 + (uint64_t)f) & (uint64_t)(cap - 1);
            while (slot[h] != 0 && !(uids[slot[h] - 1] == c->ids[i] && ufeat[slot[h] - 1] == f))
                h = (h + 1) & (uint64_t)(cap - 1);
            if (slot[h] == 0) {
                uids[U] = c->ids[i];
                ufeat[U] = (int32_t)f;
                slot[h] = ++U;
            }
            inverse[i] = slot[h] - 1;
        }
    }
    uoff[c->F] = U;
    free(slot);
    return U;
}

static int eq64(const int64_t *a, const int64_t *b, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            tap_diag("%s: index %lld: expected %lld, got %lld", what, (long long)i,
                     (long long)b[i], (long long)a[i]);
            return 0;
        }
    return 1;
}

static int eq32(const int32_t *a, const int32_t *b, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            tap_diag("%s: index %lld: expected %d, got %d", what, (long long)i, b[i], a[i]);
            return 0;
        }
    return 1;
}

/* ---- inputs ---- */

static ucase make_case(int k, uint64_t *rng)
{
    static const int64_t edges[] = {INT64_MIN, INT64_MAX, 0, -1};
    ucase c = {0};
    int64_t lens[8] = {0};
    switch (k) {
    case 0: c.name = "no ids, 3 empty features"; c.F = 3; break;
    case 1: c.name = "one feature of edge ids"; c.F = 1; lens[0] = 64; break;
    case 2:
        c.name = "5 features: empty, length 1, duplicate-heavy, shared edge ids";
        c.F = 5; lens[0] = 0; lens[1] = 1; lens[2] = 3000; lens[3] = 700; lens[4] = 700;
        break;
    case 3: c.name = "8 features, 300k ids over 50k values"; c.F = 8;
        for (int f = 0; f < 8; f++) lens[f] = 37500;
        break;
    default: c.name = "one feature, all ids equal"; c.F = 1; lens[0] = 5000; break;
    }
    c.offsets = tc_xmalloc((size_t)(c.F + 1) * sizeof(int64_t));
    for (int64_t f = 0; f < c.F; f++) c.offsets[f + 1] = c.offsets[f] + lens[f];
    c.n = c.offsets[c.F];
    c.ids = tc_xmalloc((size_t)c.n * sizeof(int64_t));
    for (int64_t f = 0; f < c.F; f++)
        for (int64_t i = c.offsets[f]; i < c.offsets[f + 1]; i++) {
            const uint64_t r = harness_rand(rng);
            int64_t v;
            if (k == 1) v = edges[r % 4];
            else if (k == 2 && f == 2) v = (int64_t)(r % 10) - 5;
            else if (k == 2) v = (r % 3 == 0) ? edges[r % 4] : (int64_t)(r % 200); /* f 3, 4 */
            else if (k == 3) v = (int64_t)((r % 50000) * 0x9E3779B97F4A7C1ULL);
            else v = 42;
            c.ids[i] = v;
        }
    if (k == 2) c.ids[c.offsets[1]] = INT64_MIN;   /* the length-1 feature */
    return c;
}

/* ---- one case on the device ---- */

static void run_case(const ucase *c)
{
    const int64_t n = c->n, F = c->F;
    const size_t n8 = (size_t)n * 8, n4 = (size_t)n * 4;
    int64_t *r_uids = tc_xmalloc(n8), *r_uoff = tc_xmalloc((size_t)(F + 1) * 8);
    int64_t *r_inv = tc_xmalloc(n8);
    int32_t *r_ufeat = tc_xmalloc(n4);
    const int64_t U = unique_ref(r_uids, r_ufeat, r_uoff, r_inv, c);
    int64_t *g_uids = tc_xmalloc(n8), *g_uoff = tc_xmalloc((size_t)(F + 1) * 8);
    int64_t *g_inv = tc_xmalloc(n8);
    int32_t *g_ufeat = tc_xmalloc(n4);
    size_t ws_bytes = 0, ws2 = 0;
    grm_status st = grm_cuda_segment_unique_workspace(n, &ws_bytes);
    if (st != GRM_OK) tc_bail("segment_unique_workspace");
    if (grm_cuda_rank_partition_workspace(U, &ws2) != GRM_OK) tc_bail("partition workspace");
    if (ws2 > ws_bytes) ws_bytes = ws2;
    if (grm_cuda_csr_from_inverse_workspace(n, &ws2) != GRM_OK) tc_bail("csr workspace");
    if (ws2 > ws_bytes) ws_bytes = ws2;
    void *d_ws = tc_alloc(ws_bytes);
    int64_t *d_ids = tc_upload(c->ids, n8), *d_off = tc_upload(c->offsets, (size_t)(F + 1) * 8);
    int64_t *d_uids = tc_alloc(n8), *d_uoff = tc_alloc((size_t)(F + 1) * 8);
    int64_t *d_inv = tc_alloc(n8);
    int32_t *d_ufeat = tc_alloc(n4);

    st = grm_cuda_segment_unique(d_uids, d_ufeat, d_uoff, d_inv, d_ids, d_off, n, F, d_ws,
                                 ws_bytes, NULL);
    tc_download(g_uoff, d_uoff, (size_t)(F + 1) * 8);
    tc_download(g_uids, d_uids, (size_t)U * 8);
    tc_download(g_ufeat, d_ufeat, (size_t)U * 4);
    tc_download(g_inv, d_inv, n8);
    tap_ok(st == GRM_OK && eq64(g_uoff, r_uoff, F + 1, "uniq_offsets"),
           "segment_unique %s: uniq_offsets (U = %lld of n = %lld)", c->name, (long long)U,
           (long long)n);
    tap_ok(eq64(g_uids, r_uids, U, "uniq_ids") && eq32(g_ufeat, r_ufeat, U, "uniq_feat"),
           "segment_unique %s: unique (id, feature) in first-occurrence order", c->name);
    tap_ok(eq64(g_inv, r_inv, n, "inverse"), "segment_unique %s: inverse indices I_u",
           c->name);

    /* rank partition of the unique keys, nranks 3 with features (8 without) */
    for (int pass = 0; pass < 2; pass++) {
        const int32_t nranks = pass == 0 ? 3 : 8;
        int64_t *r_sorted = tc_xmalloc(n8), *r_pos = tc_xmalloc(n8), r_counts[8] = {0};
        int32_t *r_sfeat = tc_xmalloc(n4);
        int64_t j = 0;
        for (int32_t r = 0; r < nranks; r++)
            for (int64_t u = 0; u < U; u++)
                if ((int32_t)(grm_mix64((uint64_t)r_uids[u]) % (uint64_t)nranks) == r) {
                    r_sorted[j] = r_uids[u];
                    r_sfeat[j] = r_ufeat[u];
                    r_pos[u] = j++;
                    r_counts[r]++;
                }
        int64_t *d_sorted = tc_alloc(n8), *d_pos = tc_alloc(n8), *d_counts = tc_alloc(64);
        int32_t *d_sfeat = pass == 0 ? tc_alloc(n4) : NULL;
        int64_t *g_sorted = tc_xmalloc(n8), *g_pos = tc_xmalloc(n8), g_counts[8] = {0};
        int32_t *g_sfeat = tc_xmalloc(n4);
        st = grm_cuda_rank_partition(d_sorted, d_sfeat, d_counts, d_pos, d_uids,
                                     pass == 0 ? d_ufeat : NULL, U, nranks, d_ws, ws_bytes,
                                     NULL);
        tc_download(g_sorted, d_sorted, (size_t)U * 8);
        tc_download(g_pos, d_pos, (size_t)U * 8);
        tc_download(g_counts, d_counts, (size_t)nranks * 8);
        if (pass == 0) tc_download(g_sfeat, d_sfeat, (size_t)U * 4);
        tap_ok(st == GRM_OK && eq64(g_counts, r_counts, nranks, "rank_counts") &&
                   eq64(g_sorted, r_sorted, U, "sorted_ids") && eq64(g_pos, r_pos, U, "I_s") &&
                   (pass == 1 || eq32(g_sfeat, r_sfeat, U, "sorted_feat")),
               "rank_partition %s: nranks %d%s, stable, counts and positions I_s", c->name,
               nranks, pass == 0 ? " with features" : ", ids only");
        grm_cuda_free(d_sorted);
        grm_cuda_free(d_pos);
        grm_cuda_free(d_counts);
        grm_cuda_free(d_sfeat);
        free(r_sorted), free(r_pos), free(r_sfeat), free(g_sorted), free(g_pos), free(g_sfeat);
    }

    /* CSR of the occurrences of each unique, in increasing occurrence order */
    int64_t *r_coff = tc_xmalloc((size_t)(U + 1) * 8), *r_cidx = tc_xmalloc(n8);
    for (int64_t i = 0; i < n; i++) r_coff[r_inv[i] + 1]++;
    for (int64_t u = 0; u < U; u++) r_coff[u + 1] += r_coff[u];
    int64_t *fill = tc_xmalloc((size_t)(U + 1) * 8);
    for (int64_t i = 0; i < n; i++) r_cidx[r_coff[r_inv[i]] + fill[r_inv[i]]++] = i;
    int64_t *d_coff = tc_alloc((size_t)(U + 1) * 8), *d_cidx = tc_alloc(n8);
    int64_t *g_coff = tc_xmalloc((size_t)(U + 1) * 8), *g_cidx = tc_xmalloc(n8);
    st = grm_cuda_csr_from_inverse(d_coff, d_cidx, d_inv, n, U, d_ws, ws_bytes, NULL);
    tc_download(g_coff, d_coff, (size_t)(U + 1) * 8);
    tc_download(g_cidx, d_cidx, n8);
    tap_ok(st == GRM_OK && eq64(g_coff, r_coff, U + 1, "csr_offsets") &&
               eq64(g_cidx, r_cidx, n, "csr_index"),
           "csr_from_inverse %s: offsets and occurrence lists", c->name);

    grm_cuda_free(d_ws), grm_cuda_free(d_ids), grm_cuda_free(d_off), grm_cuda_free(d_uids);
    grm_cuda_free(d_uoff), grm_cuda_free(d_inv), grm_cuda_free(d_ufeat);
    grm_cuda_free(d_coff), grm_cuda_free(d_cidx);
    free(r_uids), free(r_uoff), free(r_inv), free(r_ufeat), free(g_uids), free(g_uoff);
    free(g_inv), free(g_ufeat), free(r_coff), free(r_cidx), free(fill), free(g_coff);
    free(g_cidx);
}

/* Argument errors found before any device work run without a GPU. */
static void negative_tests(void)
{
    size_t b = 0;
    int64_t x = 0;
    tc_expect_error(grm_cuda_segment_unique_workspace(-1, &b), GRM_EINVAL,
                    "n -1 outside [0, 2^31 - 1]", "segment_unique_workspace refuses n -1");
    tc_expect_error(grm_cuda_segment_unique(&x, NULL, &x, &x, &x, &x, 1, 0, NULL, 0, NULL),
                    GRM_EINVAL, "F 0 outside", "segment_unique refuses F 0");
    tc_expect_error(grm_cuda_rank_partition(&x, NULL, &x, &x, &x, NULL, 1, 0, NULL, 0, NULL),
                    GRM_EINVAL, "nranks 0 outside [1, 65536]", "rank_partition refuses 0 ranks");
    tc_expect_error(grm_cuda_rank_partition(&x, NULL, &x, &x, &x, (const int32_t *)&x, 1, 2,
                                            NULL, 0, NULL),
                    GRM_EINVAL, "both be NULL", "rank_partition refuses feat without sorted_feat");
    tc_expect_error(grm_cuda_csr_from_inverse(&x, &x, &x, 1, -2, NULL, 0, NULL), GRM_EINVAL,
                    "U -2 outside", "csr_from_inverse refuses U -2");
}

int main(void)
{
    uint64_t rng = 0x756e69717565ULL;
    tap_plan(N_NEG + N_CASES * N_PER_CASE);
    negative_tests();
    if (!tc_have_device()) {
        for (int k = 0; k < N_CASES * N_PER_CASE; k++)
            tap_skip(CUDA_SKIP, "segment unique / partition case %d", k + 1);
        return tap_done();
    }
    for (int k = 0; k < N_CASES; k++) {
        ucase c = make_case(k, &rng);
        run_case(&c);
        free(c.ids);
        free(c.offsets);
    }
    return tap_done();
}
