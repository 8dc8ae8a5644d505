/* grm/status.h - status codes. Every grm function that can fail returns a
 * grm_status; the sentence describing the failure is kept in a per-thread buffer
 * (host->last_error, or grm_last_error() inside the host) until the next grm call
 * on that thread. */
#ifndef GRM_STATUS_H
#define GRM_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes; 0 is success, anything else a failure. Stored in int32_t fields. */
typedef enum grm_status {
    GRM_OK = 0,
    GRM_EINVAL = 1,     /* bad argument or config value */
    GRM_ENOMEM = 2,     /* allocation failed */
    GRM_EIO = 3,        /* I/O failed; the message carries errno's text */
    GRM_EFORMAT = 4,    /* malformed data or file */
    GRM_EABI = 5,       /* plugin ABI mismatch */
    GRM_ENOTSUP = 6,    /* op, dtype or device unsupported */
    GRM_ENOTFOUND = 7,  /* named thing does not exist; also "past the end" in iterators */
    GRM_EDEVICE = 8,    /* CUDA, NCCL or MPI failure */
    GRM_ECANCELED = 9,  /* interrupted by a signal or a caller */
    GRM_EINTERNAL = 10  /* broken invariant: a bug in grm or a plugin */
} grm_status;

#ifdef __cplusplus
}
#endif
#endif /* GRM_STATUS_H */
