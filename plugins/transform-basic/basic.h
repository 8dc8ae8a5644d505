/* plugins/transform-basic/basic.h - transform-basic internals shared by plugin.c (ops,
 * config checks, instance setup) and basic_ref.c (the row-wise hash/mod pass and
 * sequence building). Nothing here crosses the ABI. */
#ifndef GRM_TRANSFORM_BASIC_H
#define GRM_TRANSFORM_BASIC_H

#include <stddef.h>
#include <stdint.h>

#include <grm/grm.h>

/* The config struct the host fills from the declared params (plugin.c). */
typedef struct basic_config {
    grm_str_list hash;              /* STR or I64 columns replaced by an I64 hash */
    int64_t hash_buckets;           /* > 0: hash modulo this; 0: the full 63-bit hash */
    grm_str_list mod;               /* "column:N" entries */
    grm_str_list bucketize;         /* "column:b1/b2/..." entries, ascending boundaries */
    grm_str_list keep;              /* output columns in order; empty = all */
    const char *sequence_by;        /* I64 key column; NULL or "" = no sequence building */
    const char *sequence_order;     /* I64 column ordering events of a key; NULL or "" */
    grm_str_list sequence_columns;  /* I64/F32 columns gathered into per-key lists */
    int64_t min_length;             /* keys with fewer events are dropped */
    int64_t max_length;             /* > 0: keep the last max_length events of a key */
} basic_config;

/* What the row-wise pass does to one input column. */
typedef struct basic_colplan {
    char *name;         /* owned copy of the input column's name */
    int32_t in_type;    /* grm_coltype of the input column */
    int32_t out_type;   /* grm_coltype after the pass (I64 when hashed) */
    int32_t hash;       /* 1: replace by the hash of its bytes */
    int32_t reserved;
    int64_t mod;        /* > 0: reduce ((x % mod) + mod) % mod; 0: untouched */
    double *bounds;     /* [nbounds] owned ascending boundaries when bucketized, else NULL */
    int64_t nbounds;
    int64_t *buf;       /* [rows] owned output when hashed or reduced, else NULL */
    size_t buf_cap;     /* bytes */
} basic_colplan;

/* One column gathered into per-key lists (sequence mode). */
typedef struct basic_seqcol {
    int32_t src;        /* input column index */
    int32_t type;       /* GRM_COL_I64 or GRM_COL_F32, after the row-wise pass */
    void *events;       /* [nevents] buffered values, int64_t or float */
    size_t events_cap;  /* bytes */
    void *values;       /* [total] list values of the emitted chunk */
    int64_t *offsets;   /* [nkeys+1] list offsets of the emitted chunk */
} basic_seqcol;

/* One buffered event, as sorted at flush: by key, then order, then arrival. */
typedef struct basic_event {
    int64_t key;
    int64_t order;      /* the sequence_order value, or 0 when there is none */
    int64_t idx;        /* arrival index: makes the sort stable */
} basic_event;

/* A transform instance. */
typedef struct basic_inst {
    const grm_host_api *host;
    int32_t nin;              /* input columns */
    int32_t nfull;            /* columns before `keep`: nin, or 1 + nseq in sequence mode */
    int32_t nout;             /* columns after `keep` */
    int32_t seq;              /* 1: sequence building */
    basic_colplan *plan;      /* [nin] */
    int64_t hash_buckets;
    grm_column *row;          /* [nin] columns after the row-wise pass */
    grm_field *full_fields;   /* [nfull] names borrowed from plan */
    grm_column *full;         /* [nfull] columns before `keep`; == row without sequences */
    int32_t *out_src;         /* [nout] index into full per output column */
    grm_field *fields;        /* [nout] the output schema */
    grm_schema schema;
    grm_column *cols;         /* [nout] */
    grm_chunk chunk;
    /* sequence mode */
    int32_t key_src;          /* input column of sequence_by */
    int32_t order_src;        /* input column of sequence_order, or -1 */
    int32_t nseq;
    int32_t flushed;          /* 1 after flush emitted */
    basic_seqcol *seqcols;    /* [nseq] */
    int64_t min_length, max_length;
    int64_t nevents;          /* events buffered by apply */
    int64_t *ev_key;          /* [nevents] */
    size_t ev_key_cap;        /* bytes */
    int64_t *ev_order;        /* [nevents], or NULL without sequence_order */
    size_t ev_order_cap;      /* bytes */
    int64_t *keys_out;        /* [nkeys] the emitted key column */
} basic_inst;

/* ---- basic_ref.c ---- */

/* The row-wise kernels (plain loops). out and in may alias for mod. */
void basic_hash_str(int64_t *out, const char *bytes, const int64_t *offsets, int64_t rows,
                    int64_t buckets);           /* out [rows]; offsets [rows+1] */
void basic_hash_i64(int64_t *out, const int64_t *in, int64_t rows,
                    int64_t buckets);           /* out, in [rows] */
void basic_mod_i64(int64_t *out, const int64_t *in, int64_t rows,
                   int64_t n);                  /* out, in [rows]; n > 0 */

/* out [rows] = number of boundaries <= x for each x of in [rows] (I64 or F32, `type`):
 * the bucket index of RecIS's bucketize (Table 1), bounds [n] ascending. */
void basic_bucketize(int64_t *out, const void *in, int32_t type, int64_t rows,
                     const double *bounds, int64_t n);

/* Grow host-allocated *p (CPU) to at least `need` bytes, keeping its contents. */
grm_status basic_grow(const grm_host_api *host, void **p, size_t *cap, size_t need);
/* Run the hash/mod pass over `in` (checked against the create schema) into t->full. */
grm_status basic_rows(basic_inst *t, const grm_chunk *in);
/* Append the key, order and sequence columns of t->full (rows of them) to the buffers. */
grm_status basic_seq_append(basic_inst *t, int64_t rows);
/* Sort the buffered events and fill t->full with one row per kept key; *nkeys = its rows.
 * Frees the event buffers. */
grm_status basic_seq_build(basic_inst *t, int64_t *nkeys);
/* Release the sequence buffers (events and emitted lists). */
void basic_seq_free(basic_inst *t);

#endif /* GRM_TRANSFORM_BASIC_H */
