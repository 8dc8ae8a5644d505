/* core/gen.h - the sample-data generator (grmhost generate). */
#ifndef GRM_GEN_H
#define GRM_GEN_H

#include <stdint.h>
#include <stdio.h>

#include <grm/status.h>

typedef struct grm__gen_opts {
    int64_t users, items, clusters, min_len, max_len;
    uint64_t seed;
} grm__gen_opts;

/* Write the interaction rows (with a header line) to out. */
grm_status grm__generate(const grm__gen_opts *o, FILE *out);

#endif /* GRM_GEN_H */
