/* tests/harness.h - helpers for tests that drive plugins directly: load a plugin built in
 * this tree by name, fill its config from "key=value" strings, reach the host API. */
#ifndef GRM_TEST_HARNESS_H
#define GRM_TEST_HARNESS_H

#include <stdint.h>

#include "grm_core.h"

/* Load every plugin of the build tree (GRM_TOP_BUILDDIR/plugins) once; return the one
 * named `name` or print a TAP bail-out and exit. */
const grm_plugin_info *harness_plugin(const char *name);

/* Fill a config for info from "key=value" strings (NULL-terminated list); the config lives
 * until the process exits. Bails out on error. */
const void *harness_config(const grm_plugin_info *info, ...);

/* Same, but returns the status (for negative tests); *config set on success. */
grm_status harness_config_try(const grm_plugin_info *info, const void **config,
                              const char *const *kvs, int n);

/* The host API table plugins get. */
const grm_host_api *harness_host(void);
/* 1 when the host's last error message holds `needle`; else 0, with the message and the
 * text wanted as TAP diagnostics. */
int harness_error_has(const char *needle);

/* Path helpers: GRM_TOP_BUILDDIR, GRM_TOP_SRCDIR, GRM_DATA_DIR (NULL when unset). */
const char *harness_builddir(void);
const char *harness_srcdir(void);
const char *harness_datadir(void);

/* A fresh temporary directory, removed with what it holds when the test exits. Static
 * buffer. */
const char *harness_tmpdir(const char *tag);

/* The first open descriptor (>= 3) of this process whose path contains needle, or -1: how
 * tests and benches reach a file a plugin opened and unlinked (emb-dynamic's backing file),
 * through /proc/self/fd. */
int harness_fd_of(const char *needle);

/* Deterministic generator for test inputs. */
uint64_t harness_rand(uint64_t *state);
float harness_randf(uint64_t *state);   /* uniform in [-1, 1) */

#endif /* GRM_TEST_HARNESS_H */
