/* grm/param.h - declared plugin parameters (STYLE.md §5.8).
 *
 * Every INI key a plugin accepts is declared in a table of grm_param_decl ending with an
 * entry whose name is NULL. The host parses the INI section, rejects unknown keys (with a
 * did-you-mean drawn from this table), checks types, ranges and required keys, fills the
 * plugin's config struct at each entry's offset, and hands the struct to the plugin's
 * create/open op. No plugin parses INI text itself. */
#ifndef GRM_PARAM_H
#define GRM_PARAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parameter types and the C type the host writes at `offset`. Stored in int32_t. */
typedef enum grm_param_type {
    GRM_PARAM_INT = 1,       /* int64_t */
    GRM_PARAM_DOUBLE = 2,    /* double */
    GRM_PARAM_BOOL = 3,      /* int32_t, 0 or 1; INI: true/false/yes/no/on/off/1/0 */
    GRM_PARAM_STRING = 4,    /* const char *, owned by the host, valid for the instance */
    GRM_PARAM_ENUM = 5,      /* int32_t index into `choices` ("uniform|popularity") */
    GRM_PARAM_INT_LIST = 6,  /* grm_int_list; INI: comma-separated integers */
    GRM_PARAM_STR_LIST = 7   /* grm_str_list; INI: comma-separated words */
} grm_param_type;

/* Most entries in a list parameter. */
#define GRM_PARAM_LIST_MAX 64

/* A list of integers, filled by the host. */
typedef struct grm_int_list {
    int64_t n;                       /* entries used */
    int64_t v[GRM_PARAM_LIST_MAX];
} grm_int_list;

/* A list of words, filled by the host; the strings are host-owned. */
typedef struct grm_str_list {
    int64_t n;
    const char *v[GRM_PARAM_LIST_MAX];
} grm_str_list;

/* One declared parameter. */
typedef struct grm_param_decl {
    const char *name;      /* INI key; NULL ends the table */
    int32_t type;          /* grm_param_type */
    int32_t required;      /* 1: the key must appear (def is then ignored) */
    size_t offset;         /* offsetof(plugin config struct, field) */
    const char *def;       /* default, written as in the INI; NULL: zero/empty */
    double min;            /* inclusive range for INT, DOUBLE and each INT_LIST entry; */
    double max;            /*   min > max means unbounded */
    const char *choices;   /* ENUM: "a|b|c"; otherwise NULL */
    const char *help;      /* one line, shown by `grmhost plugins NAME` */
} grm_param_decl;

/* Helpers for writing tables: GRM_PARAM_RANGE(lo, hi) and GRM_PARAM_ANY. */
#define GRM_PARAM_RANGE(lo, hi) (lo), (hi)
#define GRM_PARAM_ANY 1.0, 0.0

#ifdef __cplusplus
}
#endif
#endif /* GRM_PARAM_H */
