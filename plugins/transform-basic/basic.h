/* plugins/transform-basic/basic.h - transform-basic internals shared by plugin.c (ops,
 * config checks, instance setup), basic_ref.c (the per-value kernels and sequence
 * building) and basic_cpu.c (the fused, multi-threaded pass over a chunk). The feature
 * engine of RecIS §2.1-2.2: hash, bucketize, mod, cross, truncate/pad, declared per column
 * and executed fused. Nothing here crosses the ABI. */
#ifndef GRM_TRANSFORM_BASIC_H
#define GRM_TRANSFORM_BASIC_H

#include <stddef.h>
#include <stdint.h>

#include <grm/grm.h>

/* The config struct the host fills from the declared params (plugin.c). */
typedef struct basic_config {
    grm_str_list hash;              /* STR, I64 or LIST_I64 columns replaced by I64 hashes */
    int64_t hash_buckets;           /* > 0: hash modulo this; 0: the full 63-bit hash */
    grm_str_list mod;               /* "column:N" entries */
    grm_str_list bucketize;         /* "column:b1/b2/..." entries, ascending boundaries */
    grm_str_list keep;              /* output columns in order; empty = all */
    const char *sequence_by;        /* I64 key column; NULL or "" = no sequence building */
    const char *sequence_order;     /* I64 column ordering events of a key; NULL or "" */
    grm_str_list sequence_columns;  /* I64/F32 columns gathered into per-key lists */
    int64_t min_length;             /* keys with fewer events are dropped */
    int64_t max_length;             /* > 0: keep the last max_length events of a key */
    grm_str_list cross;             /* "a*b:out[:N]" entries: new I64 (or LIST_I64) columns */
    grm_str_list truncate;          /* "column:N[:recent|first]" entries on list columns */
    grm_str_list pad;               /* "column:N[:value]" entries on list columns */
    grm_str_list copy;              /* "src:dst" entries: new columns copied from inputs */
    const char *history_by;         /* I64 key column; NULL or "" = no per-event history */
    const char *history_order;      /* I64 column ordering events of a key; NULL or "" */
    grm_str_list history_columns;   /* "src:dst" entries: dst = list of src's recent values */
    int64_t history_length;         /* > 0 with history_by: events per history list */
    int32_t history_self;           /* 1: a row's own event ends its history lists */
} basic_config;

/* Length transforms of one list column (RecIS §2.1 "sequence processing"): truncate to at
 * most `trunc` values per row, then pad at the back up to `pad` values. */
typedef struct basic_lenop {
    int64_t trunc;      /* > 0: keep at most this many values of a row; 0: no truncation */
    int32_t first;      /* 1: keep the first `trunc` values; 0: the last (most recent) */
    int32_t reserved;
    int64_t pad;        /* > 0: rows shorter than this get pad values at the back */
    int64_t pad_i64;    /* the pad value of a LIST_I64 column */
    float pad_f32;      /* the pad value of a LIST_F32 column */
    int64_t *offsets;   /* [rows+1] owned output offsets */
    size_t offsets_cap; /* bytes */
    void *values;       /* [offsets[rows]] owned output values, int64_t or float */
    size_t values_cap;  /* bytes */
} basic_lenop;

/* One column of the fused pass: an input column, or a cross output (src == -1). Stage 1
 * (per value): hash or bucketize, then mod; or cross of two earlier columns. Stage 2 (per
 * list row): truncate, then pad. */
typedef struct basic_colplan {
    char *name;         /* owned copy of the column's name */
    int32_t in_type;    /* grm_coltype of the input column (a cross: its out_type) */
    int32_t out_type;   /* grm_coltype after stage 1 (I64 / LIST_I64 when transformed) */
    int32_t src;        /* input column index, or -1 for a cross */
    int32_t hash;       /* 1: replace each value by the hash of its bytes */
    int32_t cross_a;    /* plan index of a cross's first source, else -1 */
    int32_t cross_b;    /* plan index of a cross's second source, else -1 */
    int32_t is_source;  /* 1: some cross reads this column's stage-1 values */
    int32_t comp;       /* fused-pass component: columns linked by crosses share one */
    int64_t cross_n;    /* > 0: cross output modulo this */
    int64_t mod;        /* > 0: reduce ((x % mod) + mod) % mod; 0: untouched */
    double *bounds;     /* [nbounds] owned ascending boundaries when bucketized, else NULL */
    int64_t nbounds;
    int64_t *buf;       /* [nvals] owned stage-1 output when it is materialised, else NULL */
    size_t buf_cap;     /* bytes */
    int32_t has_len;    /* 1: len holds a truncate and/or pad of this list column */
    int32_t reserved;
    basic_lenop len;
} basic_colplan;

/* One column gathered into per-key lists (sequence mode). */
typedef struct basic_seqcol {
    int32_t src;        /* plan index of the column */
    int32_t type;       /* GRM_COL_I64 or GRM_COL_F32, after the row-wise pass */
    int32_t has_len;    /* 1: len holds a truncate and/or pad of the emitted lists */
    int32_t reserved;
    basic_lenop len;
    void *events;       /* [nevents] buffered values, int64_t or float */
    size_t events_cap;  /* bytes */
    void *values;       /* [total] list values of the emitted chunk */
    int64_t *offsets;   /* [nkeys+1] list offsets of the emitted chunk */
} basic_seqcol;

/* One history list column (history mode): per row, the values of `src` over the most
 * recent history_length events of the row's key up to the row (itself included or not). */
typedef struct basic_histcol {
    int32_t src;        /* plan index of the column whose values are gathered */
    int32_t type;       /* GRM_COL_I64 or GRM_COL_F32, after the row-wise pass */
    char *name;         /* owned name of the emitted list column */
    void *values;       /* [offsets[rows]] emitted list values, int64_t or float */
} basic_histcol;

/* A row-wise output column buffered in history mode (all chunks, rows in arrival order). */
typedef struct basic_buffered {
    int32_t need;       /* 1: emitted, or read by the history (key, order, sources) */
    int32_t reserved;
    void *values;       /* [nvals] values; bytes for STR */
    size_t values_cap;  /* bytes */
    int64_t nvals;
    int64_t *offsets;   /* [rows+1] for STR and LIST_*, rebased to this buffer */
    size_t offsets_cap; /* bytes */
} basic_buffered;

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
    int32_t ncopy;            /* copies: plan columns [nin, nin + ncopy) */
    int32_t nplan;            /* nin + copies + crosses: the columns of the fused pass */
    int32_t nfull;            /* columns before `keep`: nplan, 1 + nseq in sequence mode,
                                 nplan + nhist in history mode */
    int32_t nout;             /* columns after `keep` */
    int32_t seq;              /* 1: sequence building */
    int32_t ncomp;            /* components of the fused pass (columns with work) */
    basic_colplan *plan;      /* [nplan] inputs, then copies, then crosses, each in
                                 declaration order; a copy's src is its input column */
    int32_t *comp_cols;       /* [ncomp_cols] plan indices grouped by component, plan order */
    int32_t *comp_start;      /* [ncomp+1] into comp_cols */
    int32_t nlen;             /* columns with a truncate or pad in the row-wise pass */
    int32_t *len_cols;        /* [nlen] their plan indices */
    int64_t hash_buckets;
    const grm_chunk *in;      /* the chunk of the running apply (borrowed) */
    grm_column *mid;          /* [nplan] columns after stage 1 */
    grm_column *row;          /* [nplan] columns after stage 2 (the row-wise output) */
    grm_field *full_fields;   /* [nplan+1] names borrowed from plan */
    grm_column *full;         /* [nfull] columns before `keep`; == row without sequences */
    int32_t *out_src;         /* [nout] index into full per output column */
    grm_field *fields;        /* [nout] the output schema */
    grm_schema schema;
    grm_column *cols;         /* [nout] */
    grm_chunk chunk;
    /* sequence mode */
    int32_t key_src;          /* plan index of sequence_by */
    int32_t order_src;        /* plan index of sequence_order, or -1 */
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
    /* history mode (key_src, order_src and flushed are shared with sequence mode) */
    int32_t hist;             /* 1: per-event history lists */
    int32_t hist_self;        /* 1: a row's own event is the last of its lists */
    int64_t hist_length;      /* most events per list */
    int32_t nhist;
    int32_t reserved;
    basic_histcol *histcols;  /* [nhist] */
    basic_buffered *kept;     /* [nplan] the row-wise output of every chunk */
    int64_t nrows;            /* rows buffered by apply */
    int64_t *hist_offsets;    /* [nrows+1] emitted list offsets, shared by every histcol */
} basic_inst;

/* ---- basic_ref.c: per-value kernels (plain loops) ---- */

void basic_hash_str(int64_t *out, const char *bytes, const int64_t *offsets, int64_t rows,
                    int64_t buckets);           /* out [rows]; offsets [rows+1] */
void basic_hash_i64(int64_t *out, const int64_t *in, int64_t rows,
                    int64_t buckets);           /* out, in [rows] */
void basic_mod_i64(int64_t *out, const int64_t *in, int64_t rows,
                   int64_t n);                  /* out, in [rows]; n > 0 */

/* The cross id of two ids: XXH3_64bits of the 16 bytes a, b (each little-endian),
 * & INT64_MAX, then % n when n > 0. Not symmetric: a*b and b*a differ. */
int64_t basic_cross_id(int64_t a, int64_t b, int64_t n);

/* Stage 1 of column p for input values [v0, v0+n) of `c` (the raw input column: values of
 * a list, rows of a scalar) into out [n]: hash or bucketize, then mod. */
void basic_stage1(const basic_colplan *p, int64_t *out, const grm_column *c, int64_t v0,
                  int64_t n, int64_t hash_buckets);

/* Stage 2 offsets: out [rows+1] from in [rows+1] after truncate then pad. */
void basic_len_offsets(const basic_lenop *l, int64_t *out, const int64_t *in, int64_t rows);

/* Stage 2 values of rows [r0, r1): copy each row's kept values of `in` (offsets inoffs,
 * elements of `elem` bytes) to l->values at l->offsets and pad. */
void basic_len_rows(const basic_lenop *l, const void *in, const int64_t *inoffs, size_t elem,
                    int64_t r0, int64_t r1);

/* Write the pad value to l->values [from, to) (elem: 4 for f32 lists, 8 for i64). */
void basic_len_pad(const basic_lenop *l, size_t elem, int64_t from, int64_t to);

/* The kept input range [*b, *e) of a row of inoffs[r]..inoffs[r+1] under truncate. */
void basic_len_keep(const basic_lenop *l, const int64_t *inoffs, int64_t r, int64_t *b,
                    int64_t *e);

/* Grow host-allocated *p (CPU) to at least `need` bytes, keeping its contents. */
grm_status basic_grow(const grm_host_api *host, void **p, size_t *cap, size_t need);

/* ---- basic_cpu.c: the fused pass ---- */

/* Group the columns with work into components linked by crosses (create). */
grm_status basic_fuse_plan(basic_inst *t);
/* Run every declared transform of every column over `in` (checked against the create
 * schema) into t->row, in one pass split over host->parallel_for by (component, rows). */
grm_status basic_rows(basic_inst *t, const grm_chunk *in);

/* ---- basic_ref.c: sequence building ---- */

/* Append the key, order and sequence columns of t->row (rows of them) to the buffers. */
grm_status basic_seq_append(basic_inst *t, int64_t rows);
/* Sort the buffered events and fill t->full with one row per kept key; *nkeys = its rows.
 * Applies the truncate/pad of sequence columns. Frees the event buffers. */
grm_status basic_seq_build(basic_inst *t, int64_t *nkeys);
/* Release the sequence buffers (events and emitted lists). */
void basic_seq_free(basic_inst *t);

/* ---- basic_ref.c: per-event history ---- */

/* Append the needed columns of t->row (rows of them) to t->kept. */
grm_status basic_hist_append(basic_inst *t, int64_t rows);
/* Fill t->full with every buffered row in arrival order plus one list column per
 * histcol: one stable sort by (key, order, arrival), then per row a window of its key's
 * sorted events, gathered in a parallel_for over rows. */
grm_status basic_hist_build(basic_inst *t);
/* Release the history buffers (buffered columns and emitted lists; not the names). */
void basic_hist_free(basic_inst *t);

#endif /* GRM_TRANSFORM_BASIC_H */
