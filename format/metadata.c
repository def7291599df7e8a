/*
 * metadata.c - parses and checks the JSON metadata of a .mlyze file.
 *
 * The spec's tables (stack_traces, files, functions) are objects keyed by
 * decimal ids. They become arrays sorted by id, so lookups are a binary
 * search (or a direct index when the ids are dense, as ours always are).
 * Rule 3 covers shape and types; rule 4 the ids that frames point at.
 */
#include "mlz_format.h"
#include "meta_stacks.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ids are canonical decimal strings: "0", "17"; no sign, no leading zero. */
static int parse_id(const char *s, uint64_t *out)
{
    if (!*s || (s[0] == '0' && s[1])) return -1;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

static int cmp_u64(uint64_t a, uint64_t b) { return a < b ? -1 : a > b; }
static int cmp_stack(const void *a, const void *b)
{
    return cmp_u64(((const mlz_stack *)a)->id, ((const mlz_stack *)b)->id);
}

/* Sorts the (id, string) pairs of one string table by id. */
typedef struct { uint64_t id; char *s; } idstr;
static int cmp_idstr(const void *a, const void *b)
{
    return cmp_u64(((const idstr *)a)->id, ((const idstr *)b)->id);
}

static int load_strings(json_t *obj, const char *name, uint64_t **ids, char ***strs,
                        size_t *n, mlz_error *err)
{
    size_t cnt = json_object_size(obj), i = 0;
    idstr *tmp = calloc(cnt ? cnt : 1, sizeof *tmp);
    *ids = calloc(cnt ? cnt : 1, sizeof **ids);
    *strs = calloc(cnt ? cnt : 1, sizeof **strs);
    if (!tmp || !*ids || !*strs) { free(tmp); return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory"); }
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(obj, key, v) {
        if (parse_id(key, &tmp[i].id))
            rc = mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "%s key \"%.40s\" is not a decimal id", name, key);
        else if (!json_is_string(v))
            rc = mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "%s[\"%s\"] is not a string", name, key);
        else if (!(tmp[i].s = strdup(json_string_value(v))))
            rc = mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory");
        if (rc) {
            while (i > 0) free(tmp[--i].s);
            free(tmp);
            return rc;
        }
        i++;
    }
    qsort(tmp, cnt, sizeof *tmp, cmp_idstr);
    for (i = 0; i < cnt; i++) { (*ids)[i] = tmp[i].id; (*strs)[i] = tmp[i].s; }
    *n = cnt;
    free(tmp);
    return 0;
}

static ssize_t find_id(const uint64_t *ids, size_t n, uint64_t id)
{
    if (id < n && ids[id] == id) return (ssize_t)id;    /* dense tables */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ids[mid] < id) lo = mid + 1; else hi = mid;
    }
    return lo < n && ids[lo] == id ? (ssize_t)lo : -1;
}

const char *mlz_meta_file(const mlz_meta *m, uint64_t id)
{
    ssize_t i = find_id(m->file_ids, m->nfiles, id);
    return i < 0 ? NULL : m->files[i];
}

uint64_t mlz_meta_marker_rate(const mlz_meta *m, uint64_t func_id)
{
    const char *s = mlz_meta_function(m, func_id);
    size_t k = sizeof MLZ_RATE_MARKER - 1;
    if (!s || strncmp(s, MLZ_RATE_MARKER, k) || s[k] < '1' || s[k] > '9') return 0;
    uint64_t n = 0;
    for (s += k; *s >= '0' && *s <= '9'; s++) {
        if (n > (UINT64_MAX - 9) / 10) return 0;
        n = n * 10 + (uint64_t)(*s - '0');
    }
    return *s ? 0 : n;
}

const char *mlz_meta_function(const mlz_meta *m, uint64_t id)
{
    ssize_t i = find_id(m->func_ids, m->nfunctions, id);
    return i < 0 ? NULL : m->functions[i];
}

const mlz_stack *mlz_meta_stack(const mlz_meta *m, uint64_t id)
{
    /* Ids are usually dense from 0 or 1 (the payload's table counts from
     * 1): then the id's place is known, without a search per ALLOC. */
    if (m->nstacks && id - m->stacks[0].id < m->nstacks && m->stacks[id - m->stacks[0].id].id == id)
        return &m->stacks[id - m->stacks[0].id];
    size_t lo = 0, hi = m->nstacks;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->stacks[mid].id < id) lo = mid + 1; else hi = mid;
    }
    return lo < m->nstacks && m->stacks[lo].id == id ? &m->stacks[lo] : NULL;
}

static int get_uint(json_t *o, const char *k, uint64_t *out, int required)
{
    json_t *v = json_object_get(o, k);
    if (!v) return required ? -1 : 1;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* A frame's references (rule 4) and ranges, then the frame itself. Both
 * parsers (jansson's tree, the fast path) come here in document order, so
 * they report the same first error. */
static int set_frame(const mlz_meta *m, mlz_frame *fr, uint64_t file, uint64_t func, uint64_t line,
                     int has_module, uint64_t mod, uint64_t addr, int inlined, const char *key, uint32_t i,
                     mlz_error *err)
{
    if (find_id(m->file_ids, m->nfiles, file) < 0)
        return mlz__error_set(err, MLZ_RULE_REFERENCE, MLZ_HEADER_SIZE,
                    "stack_traces[\"%s\"][%u] names file %llu, which is not in files", key, i,
                    (unsigned long long)file);
    if (find_id(m->func_ids, m->nfunctions, func) < 0)
        return mlz__error_set(err, MLZ_RULE_REFERENCE, MLZ_HEADER_SIZE,
                    "stack_traces[\"%s\"][%u] names function %llu, which is not in functions", key, i,
                    (unsigned long long)func);
    if (has_module && mod >= m->nmodules)
        return mlz__error_set(err, MLZ_RULE_REFERENCE, MLZ_HEADER_SIZE,
                    "stack_traces[\"%s\"][%u] names module %llu, which is not in modules", key, i,
                    (unsigned long long)mod);
    fr->file_id = (uint32_t)file;
    fr->func_id = (uint32_t)func;
    fr->line = (uint32_t)line;
    fr->module = has_module ? (int32_t)mod : -1;
    fr->addr = addr;
    fr->inlined = inlined;
    if (file > UINT32_MAX || func > UINT32_MAX)
        return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "stack_traces[\"%s\"][%u] id too large", key, i);
    return 0;
}

static int load_frames(mlz_meta *m, json_t *arr, mlz_stack *st, const char *key, mlz_error *err)
{
    st->depth = (uint32_t)json_array_size(arr);
    st->frames = calloc(st->depth ? st->depth : 1, sizeof *st->frames);
    if (!st->frames) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory");
    for (uint32_t i = 0; i < st->depth; i++) {
        json_t *f = json_array_get(arr, i);
        uint64_t file, line, func, mod = 0, addr = 0;
        if (!json_is_object(f) || get_uint(f, "file_id", &file, 1) || get_uint(f, "line", &line, 1) ||
            get_uint(f, "func_id", &func, 1) || line > UINT32_MAX)
            return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE,
                        "stack_traces[\"%s\"][%u] needs non-negative integers file_id, line, func_id", key, i);
        int hm = get_uint(f, "module", &mod, 0), ha = get_uint(f, "addr", &addr, 0);
        json_t *inl = json_object_get(f, "inline");
        if (hm < 0 || ha < 0 || (inl && !json_is_boolean(inl)))
            return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE,
                        "stack_traces[\"%s\"][%u] has a malformed module, addr or inline", key, i);
        if (set_frame(m, &st->frames[i], file, func, line, hm == 0, mod, addr, inl && json_is_true(inl), key, i, err))
            return -1;
    }
    return 0;
}

/* The stacks from the fast path, checked as load_frames checks them. */
static int load_raw_stacks(mlz_meta *m, const mlz_raw_stacks *raw, mlz_error *err)
{
    m->stacks = calloc(raw->n ? raw->n : 1, sizeof *m->stacks);
    if (!m->stacks) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory");
    for (size_t i = 0; i < raw->n; i++) {
        mlz_stack *st = &m->stacks[i];
        char key[24];
        snprintf(key, sizeof key, "%llu", (unsigned long long)raw->id[i]);
        st->id = raw->id[i];
        st->depth = (uint32_t)(raw->first[i + 1] - raw->first[i]);
        st->frames = calloc(st->depth ? st->depth : 1, sizeof *st->frames);
        m->nstacks = i + 1;
        if (!st->frames) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory");
        for (uint32_t j = 0; j < st->depth; j++) {
            const mlz_raw_frame *f = &raw->frames[raw->first[i] + j];
            if (set_frame(m, &st->frames[j], f->file, f->func, f->line, f->has_module, f->module, f->addr,
                          f->inlined, key, j, err))
                return -1;
        }
    }
    return 0;
}

static int load_modules(mlz_meta *m, json_t *arr, mlz_error *err)
{
    if (!json_is_array(arr)) return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "modules is not an array");
    m->nmodules = json_array_size(arr);
    m->modules = calloc(m->nmodules ? m->nmodules : 1, sizeof *m->modules);
    if (!m->modules) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory");
    for (size_t i = 0; i < m->nmodules; i++) {
        json_t *o = json_array_get(arr, i), *p = json_object_get(o, "path"), *b = json_object_get(o, "build_id");
        mlz_meta_module *mod = &m->modules[i];
        if (!json_is_object(o) || !json_is_string(p) || (b && !json_is_string(b)) ||
            get_uint(o, "base", &mod->base, 1) || get_uint(o, "size", &mod->size, 0) < 0)
            return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE,
                        "modules[%zu] needs a string path, integer base, optional size and build_id", i);
        mod->path = strdup(json_string_value(p));
        mod->build_id = b ? strdup(json_string_value(b)) : NULL;
        if (!mod->path || (b && !mod->build_id)) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory");
    }
    return 0;
}

/* The document with the span [b, e) (the stack_traces value) replaced by
 * {}, read by jansson; NULL if jansson refuses it. */
static json_t *load_without(const char *json, size_t len, size_t b, size_t e)
{
    size_t n = len - (e - b) + 2;
    char *doc = malloc(n);
    if (!doc) return NULL;
    memcpy(doc, json, b);
    memcpy(doc + b, "{}", 2);
    memcpy(doc + b + 2, json + e, len - e);
    json_error_t je;
    json_t *root = json_loadb(doc, n, JSON_REJECT_DUPLICATES, &je);
    free(doc);
    return root;
}

/* Everything after the JSON parse; raw: the fast path's stacks, or NULL
 * to take them from the tree. */
static int load_tables(mlz_meta *m, json_t *root, const mlz_raw_stacks *raw, mlz_error *err)
{
    if (!json_is_object(root))
        return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "metadata is not a JSON object");

    json_t *st = json_object_get(root, "stack_traces"), *files = json_object_get(root, "files"),
           *funcs = json_object_get(root, "functions");
    if (!json_is_object(st) || !json_is_object(files) || !json_is_object(funcs))
        return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE,
                    "metadata needs objects \"stack_traces\", \"files\" and \"functions\"");

    json_t *v;
    if ((v = json_object_get(root, "kind"))) {
        if (!json_is_string(v)) return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "kind is not a string");
        m->kind = json_string_value(v);
    }
    if (get_uint(root, "rate", &m->rate, 0) < 0)
        return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "rate is not a non-negative integer");
    if ((v = json_object_get(root, "pid"))) {
        if (!json_is_integer(v)) return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "pid is not an integer");
        m->pid = json_integer_value(v);
    }
    if ((v = json_object_get(root, "exe"))) {
        if (!json_is_string(v)) return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "exe is not a string");
        m->exe = json_string_value(v);
    }
    if ((v = json_object_get(root, "modules")) && load_modules(m, v, err)) return -1;

    if (load_strings(files, "files", &m->file_ids, &m->files, &m->nfiles, err) ||
        load_strings(funcs, "functions", &m->func_ids, &m->functions, &m->nfunctions, err))
        return -1;

    if (raw) {
        if (load_raw_stacks(m, raw, err)) return -1;
    } else {
        size_t ns = json_object_size(st), i = 0;
        m->stacks = calloc(ns ? ns : 1, sizeof *m->stacks);
        if (!m->stacks) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory");
        const char *key;
        json_object_foreach(st, key, v) {
            if (parse_id(key, &m->stacks[i].id))
                return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "stack_traces key \"%.40s\" is not a decimal id", key);
            if (!json_is_array(v))
                return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "stack_traces[\"%s\"] is not an array", key);
            m->nstacks = i + 1;
            if (load_frames(m, v, &m->stacks[i], key, err)) return -1;
            i++;
        }
    }
    qsort(m->stacks, m->nstacks, sizeof *m->stacks, cmp_stack);
    return 0;
}

int mlz_meta_parse(mlz_meta *m, const char *json, size_t len, mlz_error *err)
{
    memset(m, 0, sizeof *m);
    m->pid = -1;
    m->json = malloc(len + 1);
    if (!m->json) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory");
    memcpy(m->json, json, len);
    m->json[len] = 0;
    m->json_len = len;

    /* The fast path for stack_traces, when the document is as our writers
     * make it; else (or if jansson refuses the rest) the whole document
     * through jansson, whose errors and positions are then reported. */
    mlz_raw_stacks raw;
    size_t b, e;
    json_t *root = NULL;
    if (!mlz_meta_fast_stacks(json, len, &b, &e, &raw)) {
        if (!(root = load_without(json, len, b, e))) mlz_raw_stacks_free(&raw);
    }
    int fast = root != NULL;
    if (!root) {
        json_error_t je;
        if (!(root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je)))
            return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE + (uint64_t)(je.position > 0 ? je.position : 0),
                        "metadata is not valid JSON: %s", je.text);
    }
    m->root = root;
    int rc = load_tables(m, root, fast ? &raw : NULL, err);
    if (fast) mlz_raw_stacks_free(&raw);
    return rc;
}

void mlz_meta_free(mlz_meta *m)
{
    for (size_t i = 0; i < m->nstacks; i++) free(m->stacks[i].frames);
    free(m->stacks);
    for (size_t i = 0; i < m->nfiles; i++) free(m->files[i]);
    for (size_t i = 0; i < m->nfunctions; i++) free(m->functions[i]);
    free(m->files); free(m->file_ids);
    free(m->functions); free(m->func_ids);
    for (size_t i = 0; i < m->nmodules; i++) { free(m->modules[i].path); free(m->modules[i].build_id); }
    free(m->modules);
    if (m->root) json_decref(m->root);
    free(m->json);
    memset(m, 0, sizeof *m);
}
