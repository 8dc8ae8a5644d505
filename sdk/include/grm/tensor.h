/* grm/tensor.h - the data model shared by the host and every plugin (DESIGN.md §2):
 * dense tensors, columns and chunks (what readers and transforms exchange), jagged
 * (CSR) sequences, keyed jagged tensors for sparse features, and the training batch.
 *
 * grm_tensor, grm_column, grm_field, grm_named_tensor and grm_kjt are fixed-layout value
 * types (like DLPack's DLTensor): plugins may declare them on their stack, and their
 * layout never changes within an ABI major (tests/test-abi-layout.c pins it).
 * grm_chunk, grm_batch and grm_schema begin with struct_size and are created by their
 * producer only; readers of them check struct_size before touching a later field. */
#ifndef GRM_TENSOR_H
#define GRM_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when `ptr`, a struct of type `type` that begins with struct_size (grm_batch,
 * grm_loss_io, ...), is large enough to hold `member`: its producer knew the field. Read a
 * field appended after 1.0 only behind it. Since 1.5. */
#define GRM_HAS_FIELD(type, ptr, member)                                                 \
    ((ptr) != NULL && (ptr)->struct_size >= offsetof(type, member) + sizeof((ptr)->member))

/* Element types. Stored in int32_t fields. */
typedef enum grm_dtype {
    GRM_DTYPE_F32 = 1,
    GRM_DTYPE_F16 = 2,
    GRM_DTYPE_BF16 = 3,
    GRM_DTYPE_I32 = 4,
    GRM_DTYPE_I64 = 5,
    GRM_DTYPE_U8 = 6
} grm_dtype;

/* Bytes per element of a grm_dtype: f32 and i32 4, f16 and bf16 2, i64 8, u8 1; 0 when
 * dtype is no grm_dtype, so one call both sizes and validates. The only table of element
 * sizes in grm; header-only, so it adds nothing to the ABI. Pure. Since 1.3. */
static inline size_t grm_dtype_size(int32_t dtype)
{
    switch (dtype) {
    case GRM_DTYPE_F32: return 4;
    case GRM_DTYPE_F16: return 2;
    case GRM_DTYPE_BF16: return 2;
    case GRM_DTYPE_I32: return 4;
    case GRM_DTYPE_I64: return 8;
    case GRM_DTYPE_U8: return 1;
    default: return 0;
    }
}

/* Device kinds. Stored in int32_t fields. */
typedef enum grm_device_type {
    GRM_DEVICE_CPU = 0,
    GRM_DEVICE_CUDA = 1
} grm_device_type;

/* A device: kind and ordinal ("cuda:1" is {GRM_DEVICE_CUDA, 1}; CPU uses index 0). */
typedef struct grm_device {
    int32_t type;   /* grm_device_type */
    int32_t index;  /* ordinal within its type */
} grm_device;

/* Most dims a tensor has. */
#define GRM_TENSOR_MAX_DIMS 4

/* A contiguous, row-major tensor. `data` is borrowed unless the producer's
 * documentation says otherwise; the host's allocator (host->alloc) owns memory that
 * crosses the ABI. */
typedef struct grm_tensor {
    void *data;                           /* first element; NULL when numel is 0 */
    int32_t dtype;                        /* grm_dtype */
    int32_t ndim;                         /* 0..GRM_TENSOR_MAX_DIMS */
    int64_t shape[GRM_TENSOR_MAX_DIMS];   /* dims beyond ndim are 1 */
    grm_device device;                    /* where data lives */
} grm_tensor;

/* A tensor with a name, as checkpoints store them ("emb.item.weight"). Name borrowed. */
typedef struct grm_named_tensor {
    const char *name;
    grm_tensor tensor;
} grm_named_tensor;

/* Column types for chunks exchanged by readers and transforms. Stored in int32_t. */
typedef enum grm_coltype {
    GRM_COL_I64 = 1,       /* values: int64_t[rows] */
    GRM_COL_F32 = 2,       /* values: float[rows] */
    GRM_COL_STR = 3,       /* values: char bytes; offsets[rows+1] delimit each string */
    GRM_COL_LIST_I64 = 4,  /* jagged: values int64_t[offsets[rows]], offsets[rows+1] */
    GRM_COL_LIST_F32 = 5   /* jagged: values float[offsets[rows]], offsets[rows+1] */
} grm_coltype;

/* Bytes per value of a column type: I64 and LIST_I64 8, F32 and LIST_F32 4, STR 1 (a byte
 * of its text); 0 when type is no grm_coltype. Header-only, like grm_dtype_size. Since
 * 1.5. */
static inline size_t grm_coltype_size(int32_t type)
{
    switch (type) {
    case GRM_COL_I64: return 8;
    case GRM_COL_F32: return 4;
    case GRM_COL_STR: return 1;
    case GRM_COL_LIST_I64: return 8;
    case GRM_COL_LIST_F32: return 4;
    default: return 0;
    }
}

/* One column of a chunk. Strings are not NUL-terminated; use the offsets. */
typedef struct grm_column {
    const char *name;      /* borrowed from the chunk's producer */
    int32_t type;          /* grm_coltype */
    int32_t reserved;      /* zero */
    int64_t rows;          /* number of rows */
    void *values;          /* see grm_coltype */
    int64_t *offsets;      /* [rows+1] for STR and LIST_*, else NULL; offsets[0] == 0 */
} grm_column;

/* A column's name and type, as a schema lists them. */
typedef struct grm_field {
    const char *name;      /* borrowed */
    int32_t type;          /* grm_coltype */
    int32_t reserved;      /* zero */
} grm_field;

/* The columns a reader produces or a transform emits. Owned by its producer. */
typedef struct grm_schema {
    uint32_t struct_size;     /* sizeof(grm_schema) as the producer knows it */
    int32_t nfields;
    const grm_field *fields;  /* [nfields] */
} grm_schema;

/* A batch of rows in columnar form. Owned by its producer; valid until the
 * producer's next call on the same instance. */
typedef struct grm_chunk {
    uint32_t struct_size;     /* sizeof(grm_chunk) as the producer knows it */
    int32_t ncols;
    int64_t rows;             /* every column has this many rows */
    const grm_column *cols;   /* [ncols] */
} grm_chunk;

/* A jagged (CSR) sequence batch, DESIGN.md §2: B sequences, sequence b occupying rows
 * offsets[b]..offsets[b+1] of values. No padding anywhere in the sequence path. */
typedef struct grm_jagged {
    grm_tensor values;        /* [total, D] */
    const int64_t *offsets;   /* [B+1] int64, offsets[0] == 0, offsets[B] == total */
    int64_t batch;            /* B */
} grm_jagged;

/* A keyed jagged tensor for sparse features: for key k and sample b, ids
 * ids[offsets[k*B+b] .. offsets[k*B+b+1]). All pointers borrowed from the batch. */
typedef struct grm_kjt {
    int32_t nkeys;                 /* number of features */
    int32_t reserved;              /* zero */
    const char *const *keys;       /* [nkeys] feature names */
    int64_t batch;                 /* B */
    const int64_t *offsets;        /* [nkeys*B+1] */
    const int64_t *ids;            /* [offsets[nkeys*B]] */
    const float *weights;          /* same length as ids, or NULL */
    const int64_t *timestamps;     /* same length as ids (Unix seconds), or NULL */
} grm_kjt;

/* A training batch, built by the host. Plugins read it, never allocate it. */
typedef struct grm_batch {
    uint32_t struct_size;          /* sizeof(grm_batch) as the host knows it */
    int32_t ntasks;                /* label columns per sample (T) */
    int64_t samples;               /* B */
    int64_t tokens;                /* total sequence tokens in the batch */
    const int64_t *group_ids;      /* [B] user id per sample (for GAUC), or NULL */
    const grm_kjt *sparse;         /* sparse features, or NULL */
    const float *dense;            /* [B, ndense] dense features, or NULL */
    int64_t ndense;                /* dense features per sample */
    const float *labels;           /* [B, T] labels, or NULL */
    const int64_t *targets;        /* [B] retrieval target item ids, or NULL */
} grm_batch;

#ifdef __cplusplus
}
#endif
#endif /* GRM_TENSOR_H */
