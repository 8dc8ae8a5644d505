/* core/params.c - declared plugin parameters: validate INI keys against a plugin's
 * grm_param_decl table and fill its config struct (STYLE.md §5.8). Defaults are parsed by
 * the same code as INI values, so a default is checked exactly like a user's value. */
#include "grm_core.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int grm__edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int row[64 + 1];
    if (lb > 64) return (int)(la > lb ? la : lb);
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int best = diag + cost;
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *grm__closest(const char *word, const char *const *names, int n)
{
    const char *best = NULL;
    int bestd = 1 << 30;
    int limit = (int)strlen(word) / 3 + 2;
    for (int i = 0; i < n; i++) {
        int d = grm__edit_distance(word, names[i]);
        if (d < bestd) {
            bestd = d;
            best = names[i];
        }
    }
    return bestd <= limit ? best : NULL;
}

static const char *type_name(int32_t type)
{
    switch (type) {
    case GRM_PARAM_INT: return "int";
    case GRM_PARAM_DOUBLE: return "float";
    case GRM_PARAM_BOOL: return "bool";
    case GRM_PARAM_STRING: return "string";
    case GRM_PARAM_ENUM: return "enum";
    case GRM_PARAM_INT_LIST: return "int list";
    case GRM_PARAM_STR_LIST: return "word list";
    }
    return NULL;
}

static size_t type_size(int32_t type)
{
    switch (type) {
    case GRM_PARAM_INT: return sizeof(int64_t);
    case GRM_PARAM_DOUBLE: return sizeof(double);
    case GRM_PARAM_BOOL: return sizeof(int32_t);
    case GRM_PARAM_STRING: return sizeof(const char *);
    case GRM_PARAM_ENUM: return sizeof(int32_t);
    case GRM_PARAM_INT_LIST: return sizeof(grm_int_list);
    case GRM_PARAM_STR_LIST: return sizeof(grm_str_list);
    }
    return 0;
}

static int bounded(const grm_param_decl *d)
{
    return d->min <= d->max;
}

static char *pc_strdup(grm__pconfig *pc, const char *s, size_t n)
{
    char **ns = realloc(pc->strings, (size_t)(pc->nstrings + 1) * sizeof *ns);
    if (!ns) return NULL;
    pc->strings = ns;
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    pc->strings[pc->nstrings++] = d;
    return d;
}

/* Index of `word` in "a|b|c", or -1. */
static int enum_index(const char *choices, const char *word)
{
    int i = 0;
    size_t wl = strlen(word);
    for (const char *p = choices; p && *p; i++) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == wl && strncasecmp(p, word, l) == 0) return i;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

static const char *enum_word(const char *choices, int idx, size_t *len)
{
    const char *p = choices;
    for (int i = 0; p && i < idx; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p) return NULL;
    const char *bar = strchr(p, '|');
    *len = bar ? (size_t)(bar - p) : strlen(p);
    return p;
}

static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1])) (*n)--;
}

/* An integer: decimal (or 0x hex), 1e6-style, or with a binary suffix Ki, Mi, Gi (2^10,
 * 2^20, 2^30: 256Ki = 262144). A bare k, M or G is refused: "256k" read as 256000 when the
 * writer meant 262144 (or the reverse) is a silent error (issue 22), so the value is spelt
 * out or binary. Returns 0 when not an integer; *ambiguous = 1 for a bare k/M/G. */
static int parse_int_why(const char *s, size_t n, int64_t *out, int *ambiguous)
{
    char buf[64], *end;
    *ambiguous = 0;
    trim(&s, &n);
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    long long v = strtoll(buf, &end, 0);
    if (errno || *end) {
        double d = strtod(buf, &end);
        double mul = 1;
        if (end[0] && strchr("kKMG", end[0]) && end[1] == 'i' && !end[2]) {
            mul = end[0] == 'G' ? 0x1p30 : end[0] == 'M' ? 0x1p20 : 0x1p10;
            end += 2;
        } else if (end != buf && end[0] && strchr("kKMG", end[0]) && !end[1]) {
            *ambiguous = 1;
            return 0;
        }
        if (*end || d * mul != floor(d * mul) || fabs(d * mul) > 9.2e18) return 0;
        v = (long long)(d * mul);
    }
    *out = v;
    return 1;
}

static int parse_int(const char *s, size_t n, int64_t *out)
{
    int ambiguous;
    return parse_int_why(s, n, out, &ambiguous);
}

static int parse_double(const char *s, size_t n, double *out)
{
    char buf[64], *end;
    trim(&s, &n);
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    double v = strtod(buf, &end);
    if (errno || *end || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

/* Parse `text` as the value of decl d into the struct at base. On failure writes a reason
 * into why and returns GRM_EINVAL without setting the error buffer. */
static grm_status parse_value(const grm_param_decl *d, const char *text, char *base,
                              grm__pconfig *pc, char *why, size_t whylen)
{
    void *dst = base + d->offset;
    size_t n = strlen(text);
    switch (d->type) {
    case GRM_PARAM_INT: {
        int64_t v;
        int ambiguous;
        if (!parse_int_why(text, n, &v, &ambiguous)) {
            if (ambiguous)
                snprintf(why, whylen, "'%s' is ambiguous (k = 1000 or 1024?); write the number "
                         "out, or a binary suffix: Ki = 1024, Mi = 2^20, Gi = 2^30 (256Ki = "
                         "262144)", text);
            else
                snprintf(why, whylen, "'%s' is not an integer", text);
            return GRM_EINVAL;
        }
        if (bounded(d) && ((double)v < d->min || (double)v > d->max)) {
            snprintf(why, whylen, "%lld is outside [%.17g, %.17g]", (long long)v, d->min,
                     d->max);
            return GRM_EINVAL;
        }
        memcpy(dst, &v, sizeof v);
        return GRM_OK;
    }
    case GRM_PARAM_DOUBLE: {
        double v;
        if (!parse_double(text, n, &v)) {
            snprintf(why, whylen, "'%s' is not a number", text);
            return GRM_EINVAL;
        }
        if (bounded(d) && (v < d->min || v > d->max)) {
            snprintf(why, whylen, "%g is outside [%g, %g]", v, d->min, d->max);
            return GRM_EINVAL;
        }
        memcpy(dst, &v, sizeof v);
        return GRM_OK;
    }
    case GRM_PARAM_BOOL: {
        static const char *const yes[] = { "true", "yes", "on", "1" };
        static const char *const no[] = { "false", "no", "off", "0" };
        const char *s = text;
        size_t l = n;
        trim(&s, &l);
        for (int i = 0; i < 4; i++) {
            int32_t v = -1;
            if (strlen(yes[i]) == l && strncasecmp(s, yes[i], l) == 0) v = 1;
            if (strlen(no[i]) == l && strncasecmp(s, no[i], l) == 0) v = 0;
            if (v >= 0) {
                memcpy(dst, &v, sizeof v);
                return GRM_OK;
            }
        }
        snprintf(why, whylen, "'%s' is not a boolean (true/false, yes/no, on/off, 1/0)", text);
        return GRM_EINVAL;
    }
    case GRM_PARAM_STRING: {
        const char *s = text;
        size_t l = n;
        trim(&s, &l);
        char *copy = pc_strdup(pc, s, l);
        if (!copy) {
            snprintf(why, whylen, "out of memory");
            return GRM_ENOMEM;
        }
        memcpy(dst, &copy, sizeof copy);
        return GRM_OK;
    }
    case GRM_PARAM_ENUM: {
        char w[128];
        const char *s = text;
        size_t l = n;
        trim(&s, &l);
        if (l >= sizeof w) l = sizeof w - 1;
        memcpy(w, s, l);
        w[l] = '\0';
        int32_t v = enum_index(d->choices, w);
        if (v < 0) {
            snprintf(why, whylen, "'%s' is not one of %s", w, d->choices);
            return GRM_EINVAL;
        }
        memcpy(dst, &v, sizeof v);
        return GRM_OK;
    }
    case GRM_PARAM_INT_LIST:
    case GRM_PARAM_STR_LIST: {
        grm_int_list il = { 0 };
        grm_str_list sl = { 0 };
        const char *p = text;
        while (*p) {
            const char *e = p;
            while (*e && *e != ',') e++;
            const char *s = p;
            size_t l = (size_t)(e - p);
            trim(&s, &l);
            if (l > 0) {
                if (il.n >= GRM_PARAM_LIST_MAX || sl.n >= GRM_PARAM_LIST_MAX) {
                    snprintf(why, whylen, "more than %d entries", GRM_PARAM_LIST_MAX);
                    return GRM_EINVAL;
                }
                if (d->type == GRM_PARAM_INT_LIST) {
                    int64_t v;
                    if (!parse_int(s, l, &v)) {
                        snprintf(why, whylen, "entry '%.*s' is not an integer", (int)l, s);
                        return GRM_EINVAL;
                    }
                    if (bounded(d) && ((double)v < d->min || (double)v > d->max)) {
                        snprintf(why, whylen, "entry %lld is outside [%.17g, %.17g]",
                                 (long long)v, d->min, d->max);
                        return GRM_EINVAL;
                    }
                    il.v[il.n++] = v;
                } else {
                    char *copy = pc_strdup(pc, s, l);
                    if (!copy) {
                        snprintf(why, whylen, "out of memory");
                        return GRM_ENOMEM;
                    }
                    sl.v[sl.n++] = copy;
                }
            }
            p = *e ? e + 1 : e;
        }
        if (d->type == GRM_PARAM_INT_LIST)
            memcpy(dst, &il, sizeof il);
        else
            memcpy(dst, &sl, sizeof sl);
        return GRM_OK;
    }
    }
    snprintf(why, whylen, "parameter type %d is unknown", d->type);
    return GRM_EINVAL;
}

void grm__pconfig_fini(grm__pconfig *pc)
{
    if (!pc) return;
    for (int i = 0; i < pc->nstrings; i++) free(pc->strings[i]);
    free(pc->strings);
    free(pc->data);
    memset(pc, 0, sizeof *pc);
}

static int in_list(const char *key, const char *const *skip)
{
    for (; skip && *skip; skip++)
        if (strcmp(*skip, key) == 0) return 1;
    return 0;
}

/* Fill defaults, then the given values (from a section or from kv strings). */
static grm_status fill(const grm_plugin_info *info, const grm__section *sec, const char *file,
                       const char *const *skip, const char *const *kvs, int nkv,
                       int check_required, grm__pconfig *out)
{
    char why[512];
    const grm_param_decl *params = info->params;
    int np = 0;
    memset(out, 0, sizeof *out);
    while (params && params[np].name) np++;
    out->data = calloc(1, info->config_size ? info->config_size : 1);
    if (!out->data) return grm_errorf(GRM_ENOMEM, "%s: out of memory", info->name);

    /* defaults */
    for (int i = 0; i < np; i++) {
        const grm_param_decl *d = &params[i];
        if (!d->def) continue;
        grm_status st = parse_value(d, d->def, out->data, out, why, sizeof why);
        if (st != GRM_OK) {
            grm__pconfig_fini(out);
            return grm_errorf(GRM_EABI, "%s: default of '%s': %s; fix the plugin's parameter "
                              "table", info->name, d->name, why);
        }
    }

    /* given values */
    const char **names = calloc((size_t)np + 1, sizeof *names);
    int *seen = calloc((size_t)np + 1, sizeof *seen);
    if (!names || !seen) {
        free(names);
        free(seen);
        grm__pconfig_fini(out);
        return grm_errorf(GRM_ENOMEM, "%s: out of memory", info->name);
    }
    for (int i = 0; i < np; i++) names[i] = params[i].name;
    int count = sec ? sec->nkv : nkv;
    grm_status st = GRM_OK;
    for (int k = 0; k < count && st == GRM_OK; k++) {
        char keybuf[256];
        const char *key, *value, *kfile = file;
        int line = 0;
        if (sec) {
            key = sec->kv[k].key;
            value = sec->kv[k].value;
            line = sec->kv[k].line;
            kfile = grm__kv_file(&sec->kv[k], file);
            if (in_list(key, skip)) continue;
        } else {
            const char *eq = strchr(kvs[k], '=');
            size_t kl = eq ? (size_t)(eq - kvs[k]) : strlen(kvs[k]);
            const char *ks = kvs[k];
            trim(&ks, &kl);
            if (kl >= sizeof keybuf) kl = sizeof keybuf - 1;
            memcpy(keybuf, ks, kl);
            keybuf[kl] = '\0';
            key = keybuf;
            value = eq ? eq + 1 : "";
        }
        char where[512];
        if (sec)
            snprintf(where, sizeof where, "%s:%d: [%s] %s", kfile, line, sec->name, key);
        else
            snprintf(where, sizeof where, "%s: %s", info->name, key);
        int idx = -1;
        for (int i = 0; i < np; i++)
            if (strcmp(params[i].name, key) == 0) idx = i;
        if (idx < 0) {
            const char *near = grm__closest(key, names, np);
            if (near)
                st = grm_errorf(GRM_EINVAL, "%s: unknown key for %s; did you mean '%s'?",
                                where, info->name, near);
            else
                st = grm_errorf(GRM_EINVAL, "%s: unknown key for %s; `grmhost plugins %s` "
                                "lists its keys", where, info->name, info->name);
            break;
        }
        if (sec) sec->kv[k].used = 1;
        seen[idx] = 1;
        st = parse_value(&params[idx], value, out->data, out, why, sizeof why);
        if (st != GRM_OK) {
            const grm_param_decl *d = &params[idx];
            st = grm_errorf(st, "%s: %s; expected %s%s%s", where, why, type_name(d->type),
                            d->type == GRM_PARAM_ENUM ? " " : "",
                            d->type == GRM_PARAM_ENUM ? d->choices : "");
        }
    }
    for (int i = 0; i < np && st == GRM_OK && check_required; i++) {
        if (params[i].required && !seen[i]) {
            if (sec)
                st = grm_errorf(GRM_EINVAL, "%s:%d: [%s] is missing required key '%s' (%s: "
                                "%s)", sec->file ? sec->file : file, sec->line, sec->name,
                                params[i].name,
                                type_name(params[i].type), params[i].help);
            else
                st = grm_errorf(GRM_EINVAL, "%s: missing required key '%s' (%s)", info->name,
                                params[i].name, params[i].help);
        }
    }
    free(names);
    free(seen);
    if (st != GRM_OK) grm__pconfig_fini(out);
    return st;
}

grm_status grm__params_fill(const grm_plugin_info *info, const grm__section *sec,
                            const char *file, const char *const *skip, grm__pconfig *out)
{
    static const grm__section empty = { .name = (char *)"", .line = 0 };
    return fill(info, sec ? sec : &empty, file ? file : "(config)", skip, NULL, 0, 1, out);
}

grm_status grm__params_fill_kv(const grm_plugin_info *info, const char *const *kvs, int n,
                               grm__pconfig *out)
{
    return fill(info, NULL, NULL, NULL, kvs, n, 1, out);
}

grm_status grm__params_check_decls(const grm_plugin_info *info, const char *path)
{
    const grm_param_decl *params = info->params;
    for (int i = 0; params && params[i].name; i++) {
        const grm_param_decl *d = &params[i];
        size_t sz = type_size(d->type);
        if (sz == 0)
            return grm_errorf(GRM_EABI, "%s: plugin '%s' parameter '%s' has unknown type %d; "
                              "rebuild it against this grm-sdk", path, info->name, d->name,
                              d->type);
        if (d->offset + sz > info->config_size)
            return grm_errorf(GRM_EABI, "%s: plugin '%s' parameter '%s' lies outside its "
                              "config struct (offset %zu + %zu > config_size %zu); fix the "
                              "plugin's parameter table", path, info->name, d->name,
                              d->offset, sz, info->config_size);
        if (d->type == GRM_PARAM_ENUM && (!d->choices || !d->choices[0]))
            return grm_errorf(GRM_EABI, "%s: plugin '%s' enum parameter '%s' has no choices; "
                              "fix the plugin's parameter table", path, info->name, d->name);
        for (int j = 0; j < i; j++)
            if (strcmp(params[j].name, d->name) == 0)
                return grm_errorf(GRM_EABI, "%s: plugin '%s' declares parameter '%s' twice; "
                                  "fix the plugin's parameter table", path, info->name,
                                  d->name);
    }
    /* defaults must parse and lie in range (required keys have none to check) */
    grm__pconfig pc;
    grm_status st = fill(info, NULL, NULL, NULL, NULL, 0, 0, &pc);
    if (st != GRM_OK) {
        grm_error_prefix("%s: ", path);
        return st;
    }
    grm__pconfig_fini(&pc);
    return GRM_OK;
}

void grm__params_print(FILE *f, const grm_plugin_info *info)
{
    const grm_param_decl *params = info->params;
    if (!params || !params[0].name) {
        fprintf(f, "  (no parameters)\n");
        return;
    }
    for (int i = 0; params[i].name; i++) {
        const grm_param_decl *d = &params[i];
        char type[160];
        if (d->type == GRM_PARAM_ENUM)
            snprintf(type, sizeof type, "%s", d->choices);
        else if (bounded(d) && d->type != GRM_PARAM_DOUBLE)
            snprintf(type, sizeof type, "%s in [%.0f, %.0f]", type_name(d->type), d->min,
                     d->max);
        else if (bounded(d))
            snprintf(type, sizeof type, "%s in [%g, %g]", type_name(d->type), d->min, d->max);
        else
            snprintf(type, sizeof type, "%s", type_name(d->type));
        fprintf(f, "  %-18s %-28s %s%s%s\n", d->name, type,
                d->required ? "(required) " : "", d->def ? "default " : "",
                d->def ? d->def : "");
        fprintf(f, "  %-18s %s\n", "", d->help ? d->help : "");
    }
}

void grm__params_print_values(FILE *f, const grm_plugin_info *info, const void *config,
                              const char *indent)
{
    const grm_param_decl *params = info->params;
    const char *base = config;
    for (int i = 0; params && params[i].name; i++) {
        const grm_param_decl *d = &params[i];
        const void *src = base + d->offset;
        fprintf(f, "%s%s = ", indent, d->name);
        switch (d->type) {
        case GRM_PARAM_INT: {
            int64_t v;
            memcpy(&v, src, sizeof v);
            fprintf(f, "%lld", (long long)v);
            break;
        }
        case GRM_PARAM_DOUBLE: {
            double v;
            memcpy(&v, src, sizeof v);
            fprintf(f, "%g", v);
            break;
        }
        case GRM_PARAM_BOOL: {
            int32_t v;
            memcpy(&v, src, sizeof v);
            fprintf(f, "%s", v ? "true" : "false");
            break;
        }
        case GRM_PARAM_STRING: {
            const char *v;
            memcpy(&v, src, sizeof v);
            fprintf(f, "%s", v ? v : "");
            break;
        }
        case GRM_PARAM_ENUM: {
            int32_t v;
            size_t l = 0;
            memcpy(&v, src, sizeof v);
            const char *w = enum_word(d->choices, v, &l);
            fprintf(f, "%.*s", (int)l, w ? w : "?");
            break;
        }
        case GRM_PARAM_INT_LIST: {
            const grm_int_list *l = src;
            for (int64_t j = 0; j < l->n; j++)
                fprintf(f, "%s%lld", j ? "," : "", (long long)l->v[j]);
            break;
        }
        case GRM_PARAM_STR_LIST: {
            const grm_str_list *l = src;
            for (int64_t j = 0; j < l->n; j++) fprintf(f, "%s%s", j ? "," : "", l->v[j]);
            break;
        }
        }
        fputc('\n', f);
    }
}
