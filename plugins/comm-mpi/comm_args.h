/* plugins/comm-mpi/comm_args.h - argument checks shared by the communicators that span
 * several ranks (comm-mpi, comm-nccl): one place for the messages a caller sees when a
 * collective is called wrongly, so both plugins fail the same way (STYLE.md §1). The file
 * is compiled into each plugin; `who` is the plugin name that starts every message. */
#ifndef GRM_COMM_ARGS_H
#define GRM_COMM_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include <grm/host.h>

/* inst non-NULL, dtype known, count >= 0, buf non-NULL when count > 0; *elem gets the
 * element size. GRM_EINVAL with a message otherwise. */
grm_status comm_check_buf(const grm_host_api *host, const char *who, const char *op,
                          const void *inst, int32_t dtype, int64_t count, const void *buf,
                          size_t *elem);

/* op is a grm_reduce_op. */
grm_status comm_check_reduce(const grm_host_api *host, const char *who, int32_t op);

/* root in [0, size). */
grm_status comm_check_root(const grm_host_api *host, const char *who, int32_t root,
                           int32_t size);

/* alltoallv arguments of a rank in a job of `size` ranks: the four arrays [size]
 * non-NULL, counts and displacements >= 0, a buffer non-NULL when its counts are not all
 * zero. *elem gets the element size. */
grm_status comm_check_alltoallv(const grm_host_api *host, const char *who, const void *inst,
                                int32_t size, const void *recv, const int64_t *rcounts,
                                const int64_t *rdispls, const void *send,
                                const int64_t *scounts, const int64_t *sdispls, int32_t dtype,
                                size_t *elem);

#endif /* GRM_COMM_ARGS_H */
