/* ptrmap.c: a hash map from pointers to records (open addressing, linear
 * probing, tombstones), used to find an allocation from the pointer the
 * caller hands back. */
#include <stdlib.h>

#include "client.h"

#define TOMB ((uintptr_t)1)

static size_t hash(uintptr_t k, size_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static int grow(struct ptrmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    while (cap < 4 * m->n)
        cap *= 2;
    struct ptrmap_slot *ns = calloc(cap, sizeof(*ns));
    if (!ns)
        return MB_ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        uintptr_t k = m->slots[i].key;
        if (k > TOMB) {
            size_t j = hash(k, cap);
            while (ns[j].key)
                j = (j + 1) & (cap - 1);
            ns[j] = m->slots[i];
        }
    }
    free(m->slots);
    m->slots = ns;
    m->cap = cap;
    m->tombs = 0;
    return 0;
}

int ptrmap_put(struct ptrmap *m, const void *key, void *val)
{
    if ((m->n + m->tombs + 1) * 2 > m->cap && grow(m) != 0)
        return MB_ENOMEM;
    uintptr_t k = (uintptr_t)key;
    size_t i = hash(k, m->cap);
    while (m->slots[i].key > TOMB && m->slots[i].key != k)
        i = (i + 1) & (m->cap - 1);
    if (m->slots[i].key == k) {
        m->slots[i].val = val;
        return 0;
    }
    if (m->slots[i].key == TOMB)
        m->tombs--;
    m->slots[i].key = k;
    m->slots[i].val = val;
    m->n++;
    return 0;
}

static struct ptrmap_slot *find(const struct ptrmap *m, uintptr_t k)
{
    if (!m->cap || k <= TOMB)
        return NULL;
    for (size_t i = hash(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->slots[i].key == k)
            return &m->slots[i];
        if (m->slots[i].key == 0)
            return NULL;
    }
}

void *ptrmap_get(const struct ptrmap *m, const void *key)
{
    struct ptrmap_slot *s = find(m, (uintptr_t)key);
    return s ? s->val : NULL;
}

void *ptrmap_del(struct ptrmap *m, const void *key)
{
    struct ptrmap_slot *s = find(m, (uintptr_t)key);
    if (!s)
        return NULL;
    void *v = s->val;
    s->key = TOMB;
    s->val = NULL;
    m->n--;
    m->tombs++;
    return v;
}

void ptrmap_destroy(struct ptrmap *m)
{
    free(m->slots);
    *m = (struct ptrmap){ 0 };
}
