/* chunkreg.c: the registry of the slab's chunks: from any address, the
 * chunk holding it, its size class and its slot grid, found with no lock
 * (a two-level radix table on the address). The tiers' slab adds a chunk
 * when it first hands out objects from it and removes it when the chunk
 * goes back, both under c->lock; the thread caches (tcache.c) and
 * mb_usable_size read it with no lock. A removed chunk's record stays
 * until the registry is freed, since a racing reader may still hold it.
 *
 * Invariants: every entry lies in the leaf of its address's index; an
 * entry's base is a multiple of the chunk size, nslots * size <= chunk
 * size. */
#include <stdlib.h>

#include "client.h"

#define LEAF_BITS 13
#define VA_BITS 47               /* user address space: the radix table covers it */

struct chunkreg_leaf { struct chunkreg_chunk *e[1u << LEAF_BITS]; };

struct chunkreg {
    unsigned lg_chunk, l1_bits;
    struct chunkreg_leaf **l1;   /* atomic pointers */
    struct chunkreg_chunk *retired;
};

int chunkreg_new(size_t chunk_bytes, struct chunkreg **out)
{
    struct chunkreg *r = calloc(1, sizeof(*r));
    if (!r)
        return MB_ENOMEM;
    r->lg_chunk = (unsigned)__builtin_ctzll(chunk_bytes);
    r->l1_bits = VA_BITS > r->lg_chunk + LEAF_BITS ? VA_BITS - r->lg_chunk - LEAF_BITS : 1;
    if (!(r->l1 = calloc((size_t)1 << r->l1_bits, sizeof(*r->l1)))) {
        free(r);
        return MB_ENOMEM;
    }
    *out = r;
    return 0;
}

void chunkreg_free(struct chunkreg *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < ((size_t)1 << r->l1_bits); i++) {
        struct chunkreg_leaf *leaf = r->l1[i];
        if (!leaf)
            continue;
        for (size_t j = 0; j < (1u << LEAF_BITS); j++)
            free(leaf->e[j]);
        free(leaf);
    }
    while (r->retired) {
        struct chunkreg_chunk *k = r->retired;
        r->retired = k->next_retired;
        free(k);
    }
    free(r->l1);
    free(r);
}

static size_t chunk_index(const struct chunkreg *r, uintptr_t a) { return (size_t)(a >> r->lg_chunk); }

static struct chunkreg_chunk *chunk_find(const struct chunkreg *r, uintptr_t a)
{
    size_t i = chunk_index(r, a), hi = i >> LEAF_BITS;
    if (hi >> r->l1_bits)
        return NULL;
    struct chunkreg_leaf *leaf = __atomic_load_n(&r->l1[hi], __ATOMIC_ACQUIRE);
    return leaf ? __atomic_load_n(&leaf->e[i & ((1u << LEAF_BITS) - 1)], __ATOMIC_ACQUIRE) : NULL;
}

int chunkreg_add(struct chunkreg *r, void *base, unsigned cls, size_t size)
{
    uintptr_t a = (uintptr_t)base;
    if (chunk_find(r, a))
        return 0;
    size_t i = chunk_index(r, a), hi = i >> LEAF_BITS;
    if (hi >> r->l1_bits)
        return MB_EINVAL;
    struct chunkreg_leaf *leaf = r->l1[hi];
    if (!leaf) {
        if (!(leaf = calloc(1, sizeof(*leaf))))
            return MB_ENOMEM;
        __atomic_store_n(&r->l1[hi], leaf, __ATOMIC_RELEASE);
    }
    struct chunkreg_chunk *k = calloc(1, sizeof(*k));
    if (!k)
        return MB_ENOMEM;
    k->base = a;
    k->size = size;
    k->cls = cls;
    k->nslots = (uint32_t)(((size_t)1 << r->lg_chunk) / size);
    __atomic_store_n(&leaf->e[i & ((1u << LEAF_BITS) - 1)], k, __ATOMIC_RELEASE);
    return 0;
}

void chunkreg_del(struct chunkreg *r, void *base)
{
    struct chunkreg_chunk *k = chunk_find(r, (uintptr_t)base);
    if (!k)
        return;
    size_t i = chunk_index(r, (uintptr_t)base);
    __atomic_store_n(&r->l1[i >> LEAF_BITS]->e[i & ((1u << LEAF_BITS) - 1)], NULL, __ATOMIC_RELEASE);
    k->next_retired = r->retired;   /* a racing reader may still look at it */
    r->retired = k;
}

const struct chunkreg_chunk *chunkreg_object(const struct chunkreg *r, const void *p, size_t *slot)
{
    uintptr_t a = (uintptr_t)p;
    const struct chunkreg_chunk *k = r ? chunk_find(r, a) : NULL;
    if (!k || (a - k->base) % k->size)
        return NULL;
    *slot = (a - k->base) / k->size;
    return *slot < k->nslots ? k : NULL;
}
