/* tests/fuzz/fuzz_host.h - the host API table of the fuzz targets (fuzz_host.c). */
#ifndef GRM_FUZZ_HOST_H
#define GRM_FUZZ_HOST_H

#include <grm/host.h>
#include <grm/plugin.h>
#include <grm/version.h>

extern const grm_host_api fz_host;

#endif /* GRM_FUZZ_HOST_H */
