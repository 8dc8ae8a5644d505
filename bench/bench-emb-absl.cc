// bench/bench-emb-absl.cc - the abseil peer of bench/bench_emb.py: absl::flat_hash_map
// (Swiss table) from id to row index, rows in one contiguous vector initialized on first
// touch with grm_row_init, exactly the rows emb-dynamic stores. One thread. Reads the key
// set and Zipf stream written by bench-emb. Built by bench_emb.py with g++ and libabsl-dev.
// Prints: store=absl op=<insert|lookup> dim=D lf=L rows=R ids_per_s=X
// Usage: bench-emb-absl DIM LOAD_FACTOR IDS_FILE [SECONDS]
#include <time.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"

extern "C" {
#include <grm/rng.h>
}

// CPU time of this thread, as bench-emb.c measures (the machine may be shared).
static double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        std::fprintf(stderr, "usage: bench-emb-absl DIM LOAD_FACTOR IDS_FILE [SECONDS]\n");
        return 2;
    }
    const int D = std::atoi(argv[1]);
    const double lf = std::atof(argv[2]);
    const double secs = argc > 4 ? std::atof(argv[4]) : 0.5;
    std::FILE *f = std::fopen(argv[3], "rb");
    if (!f) {
        std::perror(argv[3]);
        return 1;
    }
    int64_t hdr[2];
    if (std::fread(hdr, sizeof(hdr), 1, f) != 1) return 1;
    const int64_t R = hdr[0], N = hdr[1];
    std::vector<int64_t> all(R), stream(N);
    if (std::fread(all.data(), 8, R, f) != (size_t)R
        || std::fread(stream.data(), 8, N, f) != (size_t)N)
        return 1;
    std::fclose(f);

    const uint64_t th = grm_str_hash64("bench");
    absl::flat_hash_map<int64_t, int64_t> map;
    map.reserve(R);
    // Rows as fresh memory, as emb-dynamic's chunks are: both pay the first touch of a new
    // row's pages inside the timed insert. A std::vector<float>(R * D) zeroed every page
    // before the clock started, which left the page faults to emb-dynamic alone.
    std::unique_ptr<float[]> rows_mem(new float[(size_t)R * D]);
    float *rows_p = rows_mem.get();
    std::vector<float> out((size_t)4096 * D);

    // Insert: find-or-insert each id, initialize its row on first touch.
    double t0 = now_s();
    for (int64_t i = 0; i < R; i++) {
        auto it = map.try_emplace(all[i], (int64_t)map.size());
        if (it.second)
            grm_row_init(&rows_p[(size_t)it.first->second * D], D, GRM_EMB_INIT_UNIFORM, 0.05,
                         7, th, all[i]);
        std::memcpy(&out[(size_t)(i % 4096) * D], &rows_p[(size_t)it.first->second * D],
                    (size_t)D * sizeof(float));
    }
    const double ins = (double)R / (now_s() - t0);

    // Lookup: find and copy the row.
    int64_t done = 0;
    t0 = now_s();
    double t = t0;
    do {
        for (int64_t i = 0; i < N; i++) {
            auto it = map.find(stream[i]);
            std::memcpy(&out[(size_t)(i % 4096) * D], &rows_p[(size_t)it->second * D],
                        (size_t)D * sizeof(float));
        }
        done += N;
        t = now_s();
    } while (t - t0 < secs);
    const double look = (double)done / (t - t0);
    volatile float sink = out[0];
    (void)sink;
    std::printf("store=absl op=insert dim=%d lf=%.3f rows=%lld ids_per_s=%.0f\n", D, lf,
                (long long)R, ins);
    std::printf("store=absl op=lookup dim=%d lf=%.3f rows=%lld ids_per_s=%.0f\n", D, lf,
                (long long)R, look);
    return 0;
}
