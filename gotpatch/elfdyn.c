/*
 * elfdyn.c - read one loaded module's dynamic section from memory.
 *
 * Everything is taken from the module as mapped (PT_DYNAMIC of the
 * dl_iterate_phdr entry), never from the file: the file may be gone or
 * replaced, and in another mount namespace. Every pointer read from the
 * dynamic section is checked to fall inside the module's PT_LOAD extent, so
 * a corrupt or unusual module makes us skip it rather than crash the target.
 *
 * The number of dynamic symbols is not recorded anywhere in the dynamic
 * section; it is taken from DT_HASH (nchain) or computed from DT_GNU_HASH
 * (the highest symbol index reachable from a bucket, walked to the end of
 * its chain). Symbol names are looked up through the same hash tables.
 */
#include <string.h>
#include <sys/mman.h>

#include "got_internal.h"

int mlz__in_module(const mlz__dyn *d, uintptr_t a)
{
    return a >= d->lo && a < d->hi;
}

int mlz__in_exec(const mlz__dyn *d, uintptr_t a)
{
    for (size_t i = 0; i < d->phnum; i++) {
        const ElfW(Phdr) *p = &d->phdr[i];
        if (p->p_type != PT_LOAD || !(p->p_flags & PF_X)) continue;
        uintptr_t s = d->base + p->p_vaddr;
        if (a >= s && a < s + p->p_memsz) return 1;
    }
    return 0;
}

/*
 * glibc relocates most d_ptr entries in place (adds the load bias), but not
 * for read-only dynamic sections such as the vDSO's. Accept either form, and
 * return 0 for anything outside the module.
 */
static uintptr_t dptr(const mlz__dyn *d, uint64_t v)
{
    if (v == 0) return 0;     /* tag absent */
    if (v >= d->lo && v < d->hi) return (uintptr_t)v;
    if (v + d->base >= d->lo && v + d->base < d->hi) return (uintptr_t)(v + d->base);
    return 0;
}

static size_t gnu_hash_nsyms(const uint32_t *h)
{
    uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
    const uint32_t *buckets = h + 4 + (size_t)bloom_size * (sizeof(ElfW(Addr)) / 4);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t last = 0;
    for (uint32_t b = 0; b < nbuckets; b++)
        if (buckets[b] > last) last = buckets[b];
    if (last < symoffset) return symoffset;
    while (!(chain[last - symoffset] & 1)) last++;
    return (size_t)last + 1;
}

int mlz__dyn_parse(const struct dl_phdr_info *info, mlz__dyn *d)
{
    memset(d, 0, sizeof *d);
    d->base = info->dlpi_addr;
    d->name = info->dlpi_name ? info->dlpi_name : "";
    d->phdr = info->dlpi_phdr;
    d->phnum = info->dlpi_phnum;
    d->lo = UINTPTR_MAX;
    uintptr_t dynaddr = 0;
    for (size_t i = 0; i < d->phnum; i++) {
        const ElfW(Phdr) *p = &d->phdr[i];
        if (p->p_type == PT_LOAD) {
            uintptr_t s = d->base + p->p_vaddr, e = s + p->p_memsz;
            if (s < d->lo) d->lo = s;
            if (e > d->hi) d->hi = e;
        } else if (p->p_type == PT_DYNAMIC) {
            dynaddr = d->base + p->p_vaddr;
        }
    }
    if (!dynaddr || d->lo >= d->hi || !mlz__in_module(d, dynaddr)) return -1;
    d->dyn = (const ElfW(Dyn) *)dynaddr;

    uint64_t strtab = 0, symtab = 0, hash = 0, gnuhash = 0, versym = 0, soname = ~0ull;
    uint64_t flags = 0;
    d->pltrel = DT_RELA;
    d->relaent = sizeof(ElfW(Rela));
    d->relent = sizeof(ElfW(Rel));
    for (const ElfW(Dyn) *e = d->dyn; e->d_tag != DT_NULL; e++) {
        if ((uintptr_t)(e + 1) > d->hi) return -1;
        switch (e->d_tag) {
        case DT_STRTAB: strtab = e->d_un.d_ptr; break;
        case DT_STRSZ: d->strsz = e->d_un.d_val; break;
        case DT_SYMTAB: symtab = e->d_un.d_ptr; break;
        case DT_SYMENT: if (e->d_un.d_val != sizeof(ElfW(Sym))) return -1; break;
        case DT_HASH: hash = e->d_un.d_ptr; break;
        case DT_GNU_HASH: gnuhash = e->d_un.d_ptr; break;
        case DT_VERSYM: versym = e->d_un.d_ptr; break;
        case DT_JMPREL: d->jmprel = e->d_un.d_ptr; break;
        case DT_PLTRELSZ: d->jmprelsz = e->d_un.d_val; break;
        case DT_PLTREL: d->pltrel = (int)e->d_un.d_val; break;
        case DT_RELA: d->rela = e->d_un.d_ptr; break;
        case DT_RELASZ: d->relasz = e->d_un.d_val; break;
        case DT_RELAENT: d->relaent = e->d_un.d_val; break;
        case DT_REL: d->rel = e->d_un.d_ptr; break;
        case DT_RELSZ: d->relsz = e->d_un.d_val; break;
        case DT_RELENT: d->relent = e->d_un.d_val; break;
        case DT_RELACOUNT: d->relacount = e->d_un.d_val; break;
        case DT_RELCOUNT: d->relcount = e->d_un.d_val; break;
        case DT_SONAME: soname = e->d_un.d_val; break;
        case DT_SYMBOLIC: d->symbolic = 1; break;
        case DT_FLAGS: flags = e->d_un.d_val; break;
        default: break;
        }
    }
    if (flags & DF_SYMBOLIC) d->symbolic = 1;
    d->strtab = (const char *)dptr(d, strtab);
    d->symtab = (const ElfW(Sym) *)dptr(d, symtab);
    d->hash = (const uint32_t *)dptr(d, hash);
    d->gnu_hash = (const uint32_t *)dptr(d, gnuhash);
    d->versym = (const ElfW(Half) *)dptr(d, versym);
    d->jmprel = d->jmprel ? dptr(d, d->jmprel) : 0;
    d->rela = d->rela ? dptr(d, d->rela) : 0;
    d->rel = d->rel ? dptr(d, d->rel) : 0;
    if (!d->strtab || !d->symtab || d->strsz == 0) {
        d->symtab = NULL;   /* relocation walking needs symbols */
        return 0;
    }
    if (d->hash) d->nsyms = d->hash[1];
    else if (d->gnu_hash) d->nsyms = gnu_hash_nsyms(d->gnu_hash);
    if ((uintptr_t)(d->symtab + d->nsyms) > d->hi) d->nsyms = 0;
    if (soname < d->strsz) d->soname = d->strtab + soname;
    return 0;
}

const char *mlz__dyn_symname(const mlz__dyn *d, size_t idx)
{
    if (!d->symtab || idx >= d->nsyms) return NULL;
    ElfW(Word) off = d->symtab[idx].st_name;
    return off < d->strsz ? d->strtab + off : NULL;
}

static uint32_t gnu_hash(const char *s)
{
    uint32_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = h * 33 + *p;
    return h;
}

static uint32_t sysv_hash(const char *s)
{
    uint32_t h = 0, g;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h = (h << 4) + *p;
        g = h & 0xf0000000u;
        if (g) h ^= g >> 24;
        h &= ~g;
    }
    return h;
}

/* want_def: only defined function-like symbols; prefer the default version
 * (versym without the hidden bit), which is what an unversioned reference
 * and dlsym bind to. */
static int candidate_ok(const mlz__dyn *d, size_t i, int want_def, int *is_default)
{
    const ElfW(Sym) *s = &d->symtab[i];
    *is_default = !d->versym || !(d->versym[i] & 0x8000);
    if (!want_def) return 1;
    int type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
    if (s->st_shndx == SHN_UNDEF || s->st_value == 0) return 0;
    if (bind == STB_LOCAL) return 0;
    /* IFUNC would need its resolver called; no allocation function is one. */
    return type == STT_FUNC || type == STT_NOTYPE;
}

static const ElfW(Sym) *lookup(const mlz__dyn *d, const char *name, int want_def)
{
    if (!d->symtab || d->nsyms == 0) return NULL;
    const ElfW(Sym) *fallback = NULL;
    int dflt;
    if (d->gnu_hash) {
        const uint32_t *h = d->gnu_hash;
        uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2], shift = h[3];
        if (nbuckets == 0 || bloom_size == 0) return NULL;
        const ElfW(Addr) *bloom = (const ElfW(Addr) *)(h + 4);
        const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size);
        const uint32_t *chain = buckets + nbuckets;
        uint32_t hv = gnu_hash(name);
        const unsigned bits = sizeof(ElfW(Addr)) * 8;
        ElfW(Addr) word = bloom[(hv / bits) % bloom_size];
        ElfW(Addr) mask = ((ElfW(Addr))1 << (hv % bits)) | ((ElfW(Addr))1 << ((hv >> shift) % bits));
        if ((word & mask) != mask) return NULL;
        uint32_t i = buckets[hv % nbuckets];
        if (i < symoffset) return NULL;
        for (; i < d->nsyms; i++) {
            uint32_t c = chain[i - symoffset];
            if ((c | 1) == (hv | 1)) {
                const char *n = mlz__dyn_symname(d, i);
                if (n && strcmp(n, name) == 0 && candidate_ok(d, i, want_def, &dflt)) {
                    if (dflt) return &d->symtab[i];
                    if (!fallback) fallback = &d->symtab[i];
                }
            }
            if (c & 1) break;
        }
        return fallback;
    }
    if (d->hash) {
        uint32_t nbucket = d->hash[0], nchain = d->hash[1];
        if (nbucket == 0) return NULL;
        const uint32_t *bucket = d->hash + 2, *chain = bucket + nbucket;
        for (uint32_t i = bucket[sysv_hash(name) % nbucket]; i != STN_UNDEF && i < nchain; i = chain[i]) {
            const char *n = mlz__dyn_symname(d, i);
            if (n && strcmp(n, name) == 0 && candidate_ok(d, i, want_def, &dflt)) {
                if (dflt) return &d->symtab[i];
                if (!fallback) fallback = &d->symtab[i];
            }
        }
    }
    return fallback;
}

const ElfW(Sym) *mlz__dyn_lookup_def(const mlz__dyn *d, const char *name)
{
    return lookup(d, name, 1);
}

const ElfW(Sym) *mlz__dyn_lookup_any(const mlz__dyn *d, const char *name)
{
    return lookup(d, name, 0);
}

/* Only symbol-based 64-bit slot relocations interest us; large libraries
 * carry thousands of R_X86_64_RELATIVE entries, which DT_RELACOUNT lets us
 * skip without looking (the linker sorts them first). */
static int wanted(uint32_t type)
{
    return type == R_X86_64_JUMP_SLOT || type == R_X86_64_GLOB_DAT || type == R_X86_64_64;
}

static void walk(const mlz__dyn *d, uintptr_t tab, size_t sz, int rela, size_t ent, size_t skip,
                 mlz__reloc_fn fn, void *ctx)
{
    if (!tab || !sz || !ent || tab + sz > d->hi || tab + sz < tab) return;
    size_t start = skip < sz / ent ? skip * ent : sz;
    for (size_t off = start; off + ent <= sz; off += ent) {
        uint64_t r_offset, r_info;
        int64_t addend = 0;
        if (rela) {
            const ElfW(Rela) *r = (const ElfW(Rela) *)(tab + off);
            r_offset = r->r_offset; r_info = r->r_info; addend = r->r_addend;
        } else {
            const ElfW(Rel) *r = (const ElfW(Rel) *)(tab + off);
            r_offset = r->r_offset; r_info = r->r_info;
        }
        uint32_t type = (uint32_t)ELF64_R_TYPE(r_info), sym = (uint32_t)ELF64_R_SYM(r_info);
        if (!wanted(type) || sym == 0) continue;
        uintptr_t where = d->base + r_offset;
        if (!mlz__in_module(d, where) || where + 8 > d->hi) continue;
        fn(ctx, d, where, type, sym, addend);
    }
}

void mlz__dyn_foreach_reloc(const mlz__dyn *d, mlz__reloc_fn fn, void *ctx)
{
    /* DT_JMPREL's entry format is whatever DT_PLTREL says. When DT_JMPREL
     * lies inside DT_RELA (as with some linkers), the shared part is
     * visited once, through DT_RELA. */
    int plt_rela = d->pltrel != DT_REL;
    size_t pltent = plt_rela ? sizeof(ElfW(Rela)) : sizeof(ElfW(Rel));
    uintptr_t jr = d->jmprel;
    size_t jsz = d->jmprelsz;
    if (plt_rela && d->rela && jr >= d->rela && jr + jsz <= d->rela + d->relasz) jsz = 0;
    if (!plt_rela && d->rel && jr >= d->rel && jr + jsz <= d->rel + d->relsz) jsz = 0;
    walk(d, d->rela, d->relasz, 1, d->relaent, d->relacount, fn, ctx);
    walk(d, d->rel, d->relsz, 0, d->relent, d->relcount, fn, ctx);
    walk(d, jr, jsz, plt_rela, pltent, 0, fn, ctx);
}
