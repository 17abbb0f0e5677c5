/* slab.c: the small-object tier: size classes, runs (one chunk carved into
 * equal slots, tracked by host-side bitmaps), the chunk-base hash used by
 * release, and the per-class spare that damps get/put ping-pong. */
#include "slab.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moonbright/mbclient.h"

#ifndef MB_DEBUG
#define MB_DEBUG 0
#endif
#if MB_DEBUG
#define SLAB_CHECK(s) assert(mb_slab_is_valid(s))
#else
#define SLAB_CHECK(s) ((void)0)
#endif

#define SLAB_STEPS_LG 2                     /* 2^2 = 4 classes per doubling */
#define SLAB_MAX_CLASSES 64

struct run {
    uintptr_t base;          /* chunk base; base % chunk_bytes == 0 */
    struct run *prev, *next; /* class list; listed <=> nfree > 0 */
    struct run *hnext;       /* hash chain */
    uint32_t cls;
    uint32_t nslots;         /* chunk_bytes / class size */
    uint32_t nfree;          /* == popcount(bits); 0 <= nfree <= nslots */
    uint32_t sumhint;        /* sum[w] == 0 for every w < sumhint */
    uint64_t *sum;           /* bit w set <=> bits[w] != 0; nsum words */
    uint64_t bits[];         /* 1 = free slot; bits >= nslots are 0; nwords words */
};

struct slab_class {
    size_t size;             /* multiple of MB_SLAB_QUANTUM */
    uint64_t magic;          /* ceil(2^32 / size): offset / size for multiples */
    uint32_t nslots, nwords, nsum;
    struct run *head, *tail; /* runs with a free slot; spare (if any) is tail */
    struct run *spare;       /* the class's one empty run, or NULL; spare->nfree == nslots */
    size_t nruns;            /* runs of this class, full or not */
};

struct mb_slab {
    size_t chunk_bytes;      /* power of two */
    unsigned lg_chunk;
    unsigned nclasses;
    size_t max_size;         /* == classes[nclasses-1].size */
    mb_chunk_get_fn get;
    mb_chunk_put_fn put;
    void *ctx;
    size_t live;             /* sum over runs of (nslots - nfree) * class size */
    size_t nruns;            /* mapped == nruns * chunk_bytes */
    struct run **hash;       /* chunk base -> run; nruns <= 2 * hmask + 2 */
    size_t hmask;            /* buckets - 1, buckets a power of two */
    struct slab_class cls[SLAB_MAX_CLASSES];
};

static unsigned lg_floor(size_t x) { return 63u - (unsigned)__builtin_clzll((unsigned long long)x); }

/* The class of size (1 <= size <= max_size), mirroring the derivation in
 * slab.h: group 0 by quantum, then 4 steps per doubling. */
static unsigned size_class(size_t size)
{
    if (size <= 4 * MB_SLAB_QUANTUM)
        return (unsigned)((size + MB_SLAB_QUANTUM - 1) / MB_SLAB_QUANTUM) - 1;
    unsigned lg = lg_floor(size - 1);                 /* 2^lg < size <= 2^(lg+1) */
    unsigned lg_space = lg - SLAB_STEPS_LG;
    size_t k = (size - ((size_t)1 << lg) + ((size_t)1 << lg_space) - 1) >> lg_space;
    return 4 + (lg - 10) * 4 + (unsigned)k - 1;
}

static size_t hash_slot(const struct mb_slab *s, uintptr_t base)
{
    uint64_t k = (uint64_t)(base >> s->lg_chunk);
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & s->hmask;
}

static struct run *hash_find(const struct mb_slab *s, uintptr_t base)
{
    struct run *r = s->hash[hash_slot(s, base)];
    while (r && r->base != base)
        r = r->hnext;
    return r;
}

static int hash_grow(struct mb_slab *s)
{
    size_t n = (s->hmask + 1) * 2;
    struct run **h = calloc(n, sizeof *h);
    if (!h)
        return MB_ENOMEM;
    struct run **old = s->hash;
    size_t oldn = s->hmask + 1;
    s->hash = h;
    s->hmask = n - 1;
    for (size_t i = 0; i < oldn; i++) {
        struct run *r = old[i];
        while (r) {
            struct run *nx = r->hnext;
            size_t b = hash_slot(s, r->base);
            r->hnext = h[b];
            h[b] = r;
            r = nx;
        }
    }
    free(old);
    return 0;
}

static void hash_remove(struct mb_slab *s, struct run *r)
{
    struct run **pp = &s->hash[hash_slot(s, r->base)];
    while (*pp != r)
        pp = &(*pp)->hnext;
    *pp = r->hnext;
}

static void list_unlink(struct slab_class *c, struct run *r)
{
    if (r->prev) r->prev->next = r->next; else c->head = r->next;
    if (r->next) r->next->prev = r->prev; else c->tail = r->prev;
    r->prev = r->next = NULL;
}

static void list_push_head(struct slab_class *c, struct run *r)
{
    r->prev = NULL;
    r->next = c->head;
    if (c->head) c->head->prev = r; else c->tail = r;
    c->head = r;
}

static void list_push_tail(struct slab_class *c, struct run *r)
{
    r->next = NULL;
    r->prev = c->tail;
    if (c->tail) c->tail->next = r; else c->head = r;
    c->tail = r;
}

int mb_slab_new(struct mb_slab **out, size_t chunk_bytes, mb_chunk_get_fn get,
                mb_chunk_put_fn put, void *ctx)
{
    if (!out || !get || !put || chunk_bytes < MB_SLAB_MIN_CHUNK ||
        chunk_bytes > MB_SLAB_MAX_CHUNK || (chunk_bytes & (chunk_bytes - 1)))
        return MB_EINVAL;
    struct mb_slab *s = calloc(1, sizeof *s);
    if (!s)
        return MB_ENOMEM;
    s->chunk_bytes = chunk_bytes;
    s->lg_chunk = lg_floor(chunk_bytes);
    s->get = get;
    s->put = put;
    s->ctx = ctx;
    s->hmask = 15;
    s->hash = calloc(s->hmask + 1, sizeof *s->hash);
    if (!s->hash) {
        free(s);
        return MB_ENOMEM;
    }
    size_t max = chunk_bytes / 2 < MB_SLAB_MAX_OBJECT ? chunk_bytes / 2 : MB_SLAB_MAX_OBJECT;
    unsigned n = 0;
    for (size_t k = 1; k <= 4 && k * MB_SLAB_QUANTUM <= max; k++)
        s->cls[n++].size = k * MB_SLAB_QUANTUM;
    for (unsigned lg = 10; ((size_t)2 << lg) <= max; lg++)
        for (size_t k = 1; k <= 4; k++)
            s->cls[n++].size = ((size_t)1 << lg) + k * ((size_t)1 << (lg - SLAB_STEPS_LG));
    assert(n <= SLAB_MAX_CLASSES);
    s->nclasses = n;
    s->max_size = s->cls[n - 1].size;
    for (unsigned i = 0; i < n; i++) {
        struct slab_class *c = &s->cls[i];
        assert(size_class(c->size) == i && (i == 0 || size_class(s->cls[i - 1].size + 1) == i));
        c->magic = (((uint64_t)1 << 32) + c->size - 1) / c->size;
        c->nslots = (uint32_t)(chunk_bytes / c->size);
        c->nwords = (c->nslots + 63) / 64;
        c->nsum = (c->nwords + 63) / 64;
    }
    *out = s;
    SLAB_CHECK(s);
    return 0;
}

static void run_destroy(struct mb_slab *s, struct run *r)
{
    hash_remove(s, r);
    s->cls[r->cls].nruns--;
    s->nruns--;
    s->put(s->ctx, (void *)r->base, s->chunk_bytes);
    free(r);
}

void mb_slab_free(struct mb_slab *s)
{
    if (!s)
        return;
    for (size_t i = 0; i <= s->hmask; i++) {
        struct run *r = s->hash[i];
        while (r) {
            struct run *nx = r->hnext;
            s->put(s->ctx, (void *)r->base, s->chunk_bytes);
            free(r);
            r = nx;
        }
    }
    free(s->hash);
    free(s);
}

size_t mb_slab_max_size(const struct mb_slab *s) { return s->max_size; }
unsigned mb_slab_class_of(const struct mb_slab *s, size_t size) { (void)s; return size_class(size); }
unsigned mb_slab_class_count(const struct mb_slab *s) { return s->nclasses; }
size_t mb_slab_class_size(const struct mb_slab *s, unsigned i) { return i < s->nclasses ? s->cls[i].size : 0; }
bool mb_slab_has_free(const struct mb_slab *s, size_t size)
{
    return size && size <= s->max_size && s->cls[size_class(size)].head != NULL;
}

/* A new run of class ci on a fresh chunk, listed at the head. */
static int run_create(struct mb_slab *s, unsigned ci, struct run **out)
{
    struct slab_class *c = &s->cls[ci];
    if (s->nruns + 1 > 2 * (s->hmask + 1)) {
        int rc = hash_grow(s);
        if (rc)
            return rc;
    }
    struct run *r = malloc(sizeof *r + ((size_t)c->nwords + c->nsum) * sizeof(uint64_t));
    if (!r)
        return MB_ENOMEM;
    void *base = NULL;
    int rc = s->get(s->ctx, s->chunk_bytes, &base);
    if (rc || !base || ((uintptr_t)base & (s->chunk_bytes - 1))) {
        if (!rc && base)
            s->put(s->ctx, base, s->chunk_bytes);
        free(r);
        return rc ? rc : MB_EBACKEND;
    }
    r->base = (uintptr_t)base;
    r->cls = ci;
    r->nslots = c->nslots;
    r->nfree = c->nslots;
    r->sumhint = 0;
    r->sum = r->bits + c->nwords;
    for (uint32_t w = 0; w < c->nwords; w++) {
        uint32_t left = c->nslots - w * 64;
        r->bits[w] = left >= 64 ? ~0ull : ((1ull << left) - 1);
    }
    memset(r->sum, 0, c->nsum * sizeof(uint64_t));
    for (uint32_t w = 0; w < c->nwords; w++)
        r->sum[w / 64] |= 1ull << (w % 64);
    size_t b = hash_slot(s, r->base);
    r->hnext = s->hash[b];
    s->hash[b] = r;
    list_push_head(c, r);
    c->nruns++;
    s->nruns++;
    *out = r;
    return 0;
}

int mb_slab_alloc(struct mb_slab *s, size_t size, void **ptr)
{
    if (!s || !ptr || size == 0 || size > s->max_size)
        return MB_EINVAL;
    unsigned ci = size_class(size);
    struct slab_class *c = &s->cls[ci];
    struct run *r = c->head;
    if (!r) {
        int rc = run_create(s, ci, &r);
        if (rc)
            return rc;
    }
    uint32_t sw = r->sumhint;
    while (r->sum[sw] == 0)
        sw++;
    r->sumhint = sw;
    uint32_t w = sw * 64 + (uint32_t)__builtin_ctzll(r->sum[sw]);
    uint32_t bit = (uint32_t)__builtin_ctzll(r->bits[w]);
    r->bits[w] &= r->bits[w] - 1;
    if (r->bits[w] == 0)
        r->sum[sw] &= ~(1ull << (w % 64));
    if (r == c->spare)
        c->spare = NULL;
    if (--r->nfree == 0)
        list_unlink(c, r);
    s->live += c->size;
    *ptr = (void *)(r->base + ((size_t)w * 64 + bit) * c->size);
    SLAB_CHECK(s);
    return 0;
}

/* The run and slot of a live object, or NULL. */
static struct run *lookup(const struct mb_slab *s, const void *ptr, uint32_t *slot)
{
    uintptr_t p = (uintptr_t)ptr;
    struct run *r = hash_find(s, p & ~(uintptr_t)(s->chunk_bytes - 1));
    if (!r)
        return NULL;
    const struct slab_class *c = &s->cls[r->cls];
    uint64_t off = p - r->base;
    uint64_t idx = (off * c->magic) >> 32;        /* exact when size divides off */
    if (idx * c->size != off || idx >= r->nslots)
        return NULL;
    if (r->bits[idx / 64] & (1ull << (idx % 64)))
        return NULL;                                 /* already free */
    *slot = (uint32_t)idx;
    return r;
}

int mb_slab_release(struct mb_slab *s, void *ptr)
{
    if (!s || !ptr)
        return MB_ENOENT;
    uint32_t idx;
    struct run *r = lookup(s, ptr, &idx);
    if (!r)
        return MB_ENOENT;
    struct slab_class *c = &s->cls[r->cls];
    uint32_t w = idx / 64;
    r->bits[w] |= 1ull << (idx % 64);
    r->sum[w / 64] |= 1ull << (w % 64);
    if (w / 64 < r->sumhint)
        r->sumhint = w / 64;
    s->live -= c->size;
    if (r->nfree++ == 0)
        list_push_head(c, r);                       /* partial runs fill before the spare (the tail) */
    if (r->nfree == r->nslots) {
        if (!c->spare) {
            c->spare = r;
            list_unlink(c, r);
            list_push_tail(c, r);
        } else {
            list_unlink(c, r);
            run_destroy(s, r);
        }
    }
    SLAB_CHECK(s);
    return 0;
}

int mb_slab_usable_size(const struct mb_slab *s, const void *ptr, size_t *size)
{
    uint32_t idx;
    struct run *r = s && ptr ? lookup(s, ptr, &idx) : NULL;
    if (!r)
        return MB_ENOENT;
    if (size)
        *size = s->cls[r->cls].size;
    return 0;
}

size_t mb_slab_trim(struct mb_slab *s, size_t keep_empty_chunks)
{
    size_t spares = 0, freed = 0;
    for (unsigned i = 0; i < s->nclasses; i++)
        spares += s->cls[i].spare != NULL;
    for (unsigned i = s->nclasses; i-- > 0 && spares > keep_empty_chunks;) {
        struct slab_class *c = &s->cls[i];
        struct run *r = c->spare;
        if (!r)
            continue;
        c->spare = NULL;
        list_unlink(c, r);
        run_destroy(s, r);
        freed += s->chunk_bytes;
        spares--;
    }
    SLAB_CHECK(s);
    return freed;
}

void mb_slab_stats(const struct mb_slab *s, size_t *live_bytes, size_t *mapped_bytes)
{
    if (live_bytes)
        *live_bytes = s->live;
    if (mapped_bytes)
        *mapped_bytes = s->nruns * s->chunk_bytes;
}

static bool run_is_valid(const struct mb_slab *s, const struct run *r)
{
    if (r->cls >= s->nclasses || (r->base & (s->chunk_bytes - 1)))
        return false;
    const struct slab_class *c = &s->cls[r->cls];
    if (r->nslots != c->nslots || r->nfree > r->nslots || r->sum != r->bits + c->nwords)
        return false;
    uint32_t nfree = 0;
    for (uint32_t w = 0; w < c->nwords; w++) {
        uint64_t valid = (c->nslots - w * 64) >= 64 ? ~0ull : ((1ull << (c->nslots - w * 64)) - 1);
        if (r->bits[w] & ~valid)
            return false;
        bool sb = (r->sum[w / 64] >> (w % 64)) & 1;
        if (sb != (r->bits[w] != 0))
            return false;
        nfree += (uint32_t)__builtin_popcountll(r->bits[w]);
    }
    for (uint32_t sw = 0; sw < c->nsum; sw++) {
        uint64_t valid = (c->nwords - sw * 64) >= 64 ? ~0ull : ((1ull << (c->nwords - sw * 64)) - 1);
        if (r->sum[sw] & ~valid)
            return false;
        if (sw < r->sumhint && r->sum[sw])
            return false;
    }
    if (r->nfree > 0 && r->sumhint >= c->nsum)
        return false;
    return nfree == r->nfree;
}

bool mb_slab_is_valid(const struct mb_slab *s)
{
    if (!s || !s->hash || s->nclasses == 0 || s->nclasses > SLAB_MAX_CLASSES)
        return false;
    if (s->max_size != s->cls[s->nclasses - 1].size || s->max_size > s->chunk_bytes / 2)
        return false;
    size_t listed = 0, nruns = 0, live = 0, withfree = 0;
    size_t class_runs[SLAB_MAX_CLASSES] = {0};
    for (unsigned i = 0; i < s->nclasses; i++) {
        const struct slab_class *c = &s->cls[i];
        if (c->size % MB_SLAB_QUANTUM || (i && c->size <= s->cls[i - 1].size) || size_class(c->size) != i)
            return false;
        const struct run *prev = NULL;
        bool seen_spare = false;
        for (const struct run *r = c->head; r; prev = r, r = r->next) {
            if (r->prev != prev || r->cls != i || r->nfree == 0)
                return false;
            if (hash_find(s, r->base) != r)
                return false;
            if (r->nfree == r->nslots && r != c->spare)
                return false;                        /* one empty run per class, the spare */
            if (r == c->spare) {
                if (r->next)
                    return false;                    /* the spare is the tail */
                seen_spare = true;
            }
            listed++;
        }
        if (c->tail != prev || (c->spare && (!seen_spare || c->spare->nfree != c->spare->nslots)))
            return false;
    }
    for (size_t b = 0; b <= s->hmask; b++) {
        for (const struct run *r = s->hash[b]; r; r = r->hnext) {
            if (hash_slot(s, r->base) != b || !run_is_valid(s, r))
                return false;
            nruns++;
            class_runs[r->cls]++;
            withfree += r->nfree > 0;
            live += (size_t)(r->nslots - r->nfree) * s->cls[r->cls].size;
        }
    }
    for (unsigned i = 0; i < s->nclasses; i++)
        if (class_runs[i] != s->cls[i].nruns)
            return false;
    return nruns == s->nruns && listed == withfree && live == s->live;
}
