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

/* Helpers for writing tables: GRM_PARAM_RANGE(lo, hi) and GRM_PARAM_ANY. Each stands for
 * the two fields min, max: an inclusive range, or unbounded (min > max). In the
 * GRM_PARAM_DECL_* macros below they are the single `range` argument. */
#define GRM_PARAM_RANGE(lo, hi) (lo), (hi)
#define GRM_PARAM_ANY 1.0, 0.0

/* ---- table entries (source-level only: the entries they build are plain
 * grm_param_decl values, field for field, so the ABI is unchanged) ----
 *
 * One macro per parameter type writes one table entry with designated initializers:
 *
 *     static const grm_param_decl sgd_params[] = {
 *         GRM_PARAM_DECL_DOUBLE(sgd_config, lr, "0.01", GRM_PARAM_RANGE(0, 1e3),
 *                               "learning rate (> 0)"),
 *         GRM_PARAM_DECL_BOOL(sgd_config, nesterov, "false", "Nesterov momentum"),
 *         GRM_PARAM_DECL_STRING(sgd_config, path, GRM_PARAM_REQUIRED, "input file"),
 *         GRM_PARAM_DECL_END
 *     };
 *
 * The arguments, in this order:
 *   cfg      the plugin's config struct type (the one `create` receives), e.g. sgd_config.
 *   field    the member of `cfg` the host fills. It is also the INI key (the entry's name
 *            is the string #field), so a key and its field can never drift apart. The
 *            member's C type is checked at compile time against the parameter type
 *            (grm_param_type lists them); a mismatch is a static assertion naming cfg,
 *            field and the expected type, rather than the host later writing 8 bytes
 *            into a 4-byte field.
 *   def      the default as written in the INI ("0.01", "false", "relu", "16,1"), or NULL
 *            for zero/empty, or GRM_PARAM_REQUIRED: the key must appear (required = 1,
 *            def = NULL).
 *   range    INT, DOUBLE and INT_LIST only: GRM_PARAM_RANGE(lo, hi), inclusive, checked on
 *            the value (each entry of a list), or GRM_PARAM_ANY for no bound. The other
 *            types store GRM_PARAM_ANY.
 *   choices  ENUM only: the names, "a|b|c"; the field gets the 0-based index of the one
 *            chosen. The other types store NULL.
 *   text     the one-line help shown by `grmhost plugins NAME`.
 *
 * The macros are C11 (_Generic, designated initializers); C++ code writes the entries out
 * field by field. Tables built either way are the same bytes. */

/* In the `def` argument of a GRM_PARAM_DECL_* macro: the key has no default and must
 * appear in the INI section. Expands to the two fields' values (def NULL, required 1);
 * only meaningful there. */
#define GRM_PARAM_REQUIRED NULL, 1

/* An int64_t field (GRM_PARAM_INT) with default `def` in `range`. */
#define GRM_PARAM_DECL_INT(cfg, field, def, range, text)                                       \
    GRM__PARAM_DECL(cfg, field, GRM_PARAM_INT, int64_t, (def), (range), NULL, text)

/* A double field (GRM_PARAM_DOUBLE) with default `def` in `range`. */
#define GRM_PARAM_DECL_DOUBLE(cfg, field, def, range, text)                                    \
    GRM__PARAM_DECL(cfg, field, GRM_PARAM_DOUBLE, double, (def), (range), NULL, text)

/* An int32_t field (GRM_PARAM_BOOL), 0 or 1; `def` is "true" or "false". */
#define GRM_PARAM_DECL_BOOL(cfg, field, def, text)                                             \
    GRM__PARAM_DECL(cfg, field, GRM_PARAM_BOOL, int32_t, (def), (GRM_PARAM_ANY), NULL,         \
                    text)

/* A const char * field (GRM_PARAM_STRING), host-owned for the instance's life. */
#define GRM_PARAM_DECL_STRING(cfg, field, def, text)                                           \
    GRM__PARAM_DECL(cfg, field, GRM_PARAM_STRING, const char *, (def), (GRM_PARAM_ANY),        \
                    NULL, text)

/* An int32_t field (GRM_PARAM_ENUM): the index in `choices` ("a|b|c") of the name given;
 * `def` is one of the names. */
#define GRM_PARAM_DECL_ENUM(cfg, field, def, choices, text)                                    \
    GRM__PARAM_DECL(cfg, field, GRM_PARAM_ENUM, int32_t, (def), (GRM_PARAM_ANY), choices,      \
                    text)

/* A grm_int_list field (GRM_PARAM_INT_LIST): comma-separated integers, each in `range`. */
#define GRM_PARAM_DECL_INT_LIST(cfg, field, def, range, text)                                  \
    GRM__PARAM_DECL(cfg, field, GRM_PARAM_INT_LIST, grm_int_list, (def), (range), NULL, text)

/* A grm_str_list field (GRM_PARAM_STR_LIST): comma-separated words. */
#define GRM_PARAM_DECL_STR_LIST(cfg, field, def, text)                                         \
    GRM__PARAM_DECL(cfg, field, GRM_PARAM_STR_LIST, grm_str_list, (def), (GRM_PARAM_ANY),      \
                    NULL, text)

/* The entry that ends every table (its name is NULL). */
#define GRM_PARAM_DECL_END { .name = NULL }

/* Internal to the macros above; not part of the API. `def` and `range` expand to one or
 * two comma-separated values (GRM_PARAM_REQUIRED, GRM_PARAM_RANGE, GRM_PARAM_ANY), so the
 * typed macros hand them on in parentheses, as one argument each, and GRM__PARAM_DECL
 * splits them with GRM__PARAM_DEF and GRM__PARAM_MINMAX. */
#define GRM__PARAM_DECL(cfg, field, ptype, ctype, def_p, range_p, choices_, text)              \
    { .name = #field, .type = (ptype), GRM__PARAM_DEF def_p,                                   \
      .offset = offsetof(cfg, field) + GRM__PARAM_CHECK(cfg, field, ctype),                    \
      GRM__PARAM_MINMAX range_p, .choices = (choices_), .help = (text) }
/* `def` is one expression ("0.01", NULL) or GRM_PARAM_REQUIRED's two: pad with 0, ~ so
 * the second argument is `required`. */
#define GRM__PARAM_DEF(...) GRM__PARAM_DEF2(__VA_ARGS__, 0, ~)
#define GRM__PARAM_DEF2(d, r, ...) .required = (r), .def = (d)
#define GRM__PARAM_MINMAX(...) GRM__PARAM_MINMAX2(__VA_ARGS__)
#define GRM__PARAM_MINMAX2(lo, hi) .min = (lo), .max = (hi)
/* 0, or a compile error unless cfg.field has type ctype. */
#define GRM__PARAM_CHECK(cfg, field, ctype)                                                    \
    (0 * sizeof(struct {                                                                       \
        _Static_assert(_Generic(((cfg *)0)->field, ctype: 1, default: 0),                      \
                       #cfg "." #field " must have type " #ctype " for this parameter");       \
        int grm__unused;                                                                       \
    }))

#ifdef __cplusplus
}
#endif
#endif /* GRM_PARAM_H */
