/*
 * import_trace.c - see import_trace.h.
 */
#include "import_trace.h"
#include "errbuf.h"
#include "growbuf.h"
#include "mlz_format.h"
#include "platform.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMP_FREE UINT32_MAX

static uint64_t hash_bytes(const void *data, size_t n, uint64_t h)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return mlz_fmix64(h);
}

/* Open-addressed table of ids + 1, rebuilt x2 at half full. */
static int slots_grow(uint32_t **slots, size_t *mask, size_t count, uint64_t (*hash_of)(const imp_trace *, size_t),
                      const imp_trace *t)
{
    if (*slots && count * 2 < *mask + 1) return 0;
    size_t n = *slots ? (*mask + 1) * 2 : 1024;
    uint32_t *s = calloc(n, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < count; i++) {
        size_t k = hash_of(t, i) & (n - 1);
        while (s[k]) k = (k + 1) & (n - 1);
        s[k] = (uint32_t)i + 1;
    }
    free(*slots);
    *slots = s;
    *mask = n - 1;
    return 0;
}

static uint64_t str_hash(const imp_trace *t, size_t i)
{
    return hash_bytes(t->strs[i], strlen(t->strs[i]), 0xCBF29CE484222325ull);
}

static uint64_t stack_hash(const imp_trace *t, size_t i)
{
    return t->stacks[i].hash;
}

/* The id of string s (0 is ""), interning it; UINT32_MAX on out of memory. */
static uint32_t intern(imp_trace *t, const char *s)
{
    if (!s) s = "";
    if (slots_grow(&t->str_slots, &t->str_mask, t->nstrs, str_hash, t)) return UINT32_MAX;
    size_t k = hash_bytes(s, strlen(s), 0xCBF29CE484222325ull) & t->str_mask;
    for (; t->str_slots[k]; k = (k + 1) & t->str_mask)
        if (!strcmp(t->strs[t->str_slots[k] - 1], s)) return t->str_slots[k] - 1;
    char *copy = strdup(s);
    if (!copy || grow_to((void **)&t->strs, &t->capstrs, t->nstrs + 1, sizeof *t->strs)) {
        free(copy);
        return UINT32_MAX;
    }
    t->strs[t->nstrs] = copy;
    t->str_slots[k] = (uint32_t)++t->nstrs;
    return (uint32_t)(t->nstrs - 1);
}

int imp_init(imp_trace *t)
{
    memset(t, 0, sizeof *t);
    return intern(t, "") == 0 ? 0 : -1;
}

void imp_free(imp_trace *t)
{
    for (size_t i = 0; i < t->nstrs; i++) free(t->strs[i]);
    free(t->strs);
    free(t->str_slots);
    free(t->stacks);
    free(t->stack_slots);
    free(t->frames);
    free(t->events);
    memset(t, 0, sizeof *t);
}

int64_t imp_stack(imp_trace *t, const imp_frame *frames, uint32_t depth)
{
    /* The new chain goes to the end of the frame array; it stays there only
     * when no identical chain exists. */
    if (grow_to((void **)&t->frames, &t->capframes, t->nframes + depth, sizeof *t->frames)) return -1;
    /* An empty chain into an empty array: no frames at all, no pointer. */
    struct imp_fr *fr = t->frames ? t->frames + t->nframes : NULL;
    for (uint32_t i = 0; i < depth; i++) {
        uint32_t fn = intern(t, frames[i].func), fl = intern(t, frames[i].file);
        if (fn == UINT32_MAX || fl == UINT32_MAX) return -1;
        fr[i] = (struct imp_fr){ fn, fl, frames[i].line, frames[i].inlined != 0, frames[i].addr };
    }
    uint64_t h = hash_bytes(&depth, sizeof depth, 0xCBF29CE484222325ull);
    for (uint32_t i = 0; i < depth; i++) {
        uint64_t v[3] = { ((uint64_t)fr[i].func << 32) | fr[i].file, (uint64_t)fr[i].inlined << 32 | fr[i].line, fr[i].addr };
        h = hash_bytes(v, sizeof v, h);
    }
    if (slots_grow(&t->stack_slots, &t->stack_mask, t->nstacks, stack_hash, t)) return -1;
    size_t k = h & t->stack_mask;
    for (; t->stack_slots[k]; k = (k + 1) & t->stack_mask) {
        const struct imp_stack *s = &t->stacks[t->stack_slots[k] - 1];
        if (s->hash != h || s->depth != depth) continue;
        int same = 1;
        for (uint32_t i = 0; i < depth && same; i++) {
            const struct imp_fr *a = &t->frames[s->first + i];
            same = a->func == fr[i].func && a->file == fr[i].file && a->line == fr[i].line && a->addr == fr[i].addr &&
                   a->inlined == fr[i].inlined;
        }
        if (same) return (int64_t)(t->stack_slots[k] - 1);
    }
    if (t->nstacks >= UINT32_MAX - 1 ||
        grow_to((void **)&t->stacks, &t->capstacks, t->nstacks + 1, sizeof *t->stacks))
        return -1;
    t->stacks[t->nstacks] = (struct imp_stack){ t->nframes, depth, h };
    t->nframes += depth;
    t->stack_slots[k] = (uint32_t)++t->nstacks;
    return (int64_t)(t->nstacks - 1);
}

static int push(imp_trace *t, uint64_t time_us, uint64_t addr, uint64_t size, uint32_t stack, uint16_t thread)
{
    if (grow_to((void **)&t->events, &t->capevents, t->nevents + 1, sizeof *t->events)) return -1;
    if (time_us < t->last_us) time_us = t->last_us;
    t->last_us = time_us;
    t->events[t->nevents++] = (imp_event){ time_us, addr, size, stack, thread };
    return 0;
}

int imp_alloc(imp_trace *t, uint64_t time_us, uint64_t addr, uint64_t size, uint32_t stack, uint16_t thread)
{
    return push(t, time_us, addr, size, stack, thread);
}

int imp_free_event(imp_trace *t, uint64_t time_us, uint64_t addr)
{
    return push(t, time_us, addr, 0, IMP_FREE, 0);
}

/* A JSON string of s; an imported name that is not UTF-8 gets '?' for
 * each byte outside ASCII (the metadata must be valid JSON). */
static json_t *utf8_string(const char *s)
{
    json_t *j = json_string(s);
    if (j) return j;
    char *c = strdup(s);
    if (!c) return NULL;
    for (char *p = c; *p; p++)
        if ((unsigned char)*p >= 0x80 || (unsigned char)*p < 0x20) *p = '?';
    j = json_string(c);
    free(c);
    return j;
}

/* The metadata: an exact trace with every interned string as both a
 * function and a file name (ids shared), and the stacks. */
static char *meta_json(const imp_trace *t, const imp_info *info, char *err, size_t errlen)
{
    json_t *root = json_object(), *st = json_object(), *files = json_object(), *funcs = json_object();
    json_object_set_new(root, "kind", json_string("trace"));
    json_object_set_new(root, "rate", json_integer(1));
    if (info->pid >= 0) json_object_set_new(root, "pid", json_integer(info->pid));
    if (info->exe) json_object_set_new(root, "exe", utf8_string(info->exe));
    json_object_set_new(root, "clock", json_string("realtime"));
    json_object_set_new(root, "imported_from", json_string(info->source));
    if (info->extra_json) {
        json_t *x = json_loads(info->extra_json, 0, NULL);
        if (json_is_object(x)) json_object_update(root, x);
        json_decref(x);
    }
    char key[24];
    for (size_t i = 0; i < t->nstrs; i++) {
        snprintf(key, sizeof key, "%zu", i);
        json_object_set_new(funcs, key, utf8_string(t->strs[i]));
        json_object_set_new(files, key, utf8_string(t->strs[i]));
    }
    for (size_t i = 0; i < t->nstacks; i++) {
        json_t *arr = json_array();
        for (uint32_t j = 0; j < t->stacks[i].depth; j++) {
            const struct imp_fr *f = &t->frames[t->stacks[i].first + j];
            json_t *o = json_object();
            json_object_set_new(o, "file_id", json_integer(f->file));
            json_object_set_new(o, "line", json_integer(f->line));
            json_object_set_new(o, "func_id", json_integer(f->func));
            if (f->addr && f->addr <= INT64_MAX) json_object_set_new(o, "addr", json_integer((json_int_t)f->addr));
            if (f->inlined) json_object_set_new(o, "inline", json_true());
            json_array_append_new(arr, o);
        }
        snprintf(key, sizeof key, "%zu", i);
        json_object_set_new(st, key, arr);
    }
    json_object_set_new(root, "stack_traces", st);
    json_object_set_new(root, "files", files);
    json_object_set_new(root, "functions", funcs);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s) errbuf_set(err, errlen, "out of memory (metadata)");
    return s;
}

int imp_write(const imp_trace *t, const char *path, const imp_info *info, int replace, char *err, size_t errlen)
{
    char *meta = meta_json(t, info, err, errlen);
    if (!meta) return -1;
    uint8_t *buf = malloc(MLZ_BLOCK_SIZE), *zbuf = malloc(MLZ_LZ4_BOUND);
    int rc = -1;
    mlz_writer w;
    if (!buf || !zbuf) {
        errbuf_set(err, errlen, "out of memory");
        goto out;
    }
    mlz_writer_opts o = { .start_us = t->nevents ? t->events[0].time_us : 0, .meta = meta, .meta_len = strlen(meta),
                          .flags = MLZ_FLAG_LZ4, .replace = replace, .buf = buf, .buf_size = MLZ_BLOCK_SIZE,
                          .zbuf = zbuf, .zbuf_size = MLZ_LZ4_BOUND };
    int e = mlz_writer_open(&w, path, &o);
    if (e) {
        errbuf_set(err, errlen, "%s: %s", mlz_writer_error_path(&w, path), strerror(-e));
        goto out;
    }
    for (size_t i = 0; i < t->nevents && !e; i++) {
        const imp_event *ev = &t->events[i];
        e = ev->stack == IMP_FREE ? mlz_writer_free(&w, ev->time_us, ev->addr)
                                  : mlz_writer_alloc(&w, ev->time_us, ev->addr, ev->size, ev->stack, ev->thread);
    }
    if (e) {
        mlz_writer_abort(&w);
        errbuf_set(err, errlen, "%s: %s", mlz_writer_error_path(&w, path), strerror(-e));
        goto out;
    }
    if ((e = mlz_writer_close(&w))) {
        errbuf_set(err, errlen, "%s: %s", mlz_writer_error_path(&w, path), strerror(-e));
        goto out;
    }
    rc = 0;
out:
    free(buf);
    free(zbuf);
    free(meta);
    return rc;
}
