/* tcache.c: per-thread caches of slab objects in front of the client's
 * shared slab (in the manner of jemalloc's tcache and mimalloc's thread-
 * local heaps): the hits of mb_malloc/mb_free and their stream forms touch
 * only the calling thread's cache; refills and flushes reach the shared slab
 * in batches under c->lock. A free finds its object's class in the slab's
 * chunk registry (chunkreg.c) without any lock.
 *
 * Glossary
 *   bin      a thread's cached objects of one class: a ring, oldest first.
 *   gen      when an object entered the cache. Under the legacy tag it is
 *            the client's legacy clock (lclock.c) and the object is ready
 *            (free of any stream's earlier work) once the clock is done
 *            with it; under a stream's tag it counts the thread's frees and
 *            only gen 0 (objects from a refill) is ready. Objects not
 *            ready are usable at once only by allocations on the tag.
 *   tag      the stream of the cache's pending objects (NULL: the legacy
 *            default stream, which synchronous frees use).
 *   chunk    a slab chunk and its class (chunkreg.c).
 *
 * Invariants: every bin's gens are non-decreasing from its oldest entry;
 * bytes == the sum of the class sizes of the cached objects. The fast
 * paths write nothing another thread reads (no shared bitmap): a free is
 * checked against the slot grid of its chunk and against the calling
 * thread's bin (a double free within one thread is refused); a double free
 * that crosses threads is caught when the object reaches the shared slab
 * (logged, the second copy dropped).
 *
 * Events: frees on the legacy stream record nothing; an allocation that
 * finds its oldest object not ready advances the shared legacy clock (one
 * driver call for every thread's frees so far). A cache tagged with an application's stream never records on
 * it except inside a free that names it (an overflowing bin); when the
 * thread moves to another stream, exits, or the client trims or closes,
 * its pending objects go to the shared slab under a device-sync fence. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "log.h"

#define TC_CAP 32            /* entries per bin */
#define TC_BIN_BYTES ((size_t)16 << 20)  /* ... and at most this many bytes */
#define TC_REFILL 8          /* objects taken from the slab per refill */
#define TC_SLOTS 4           /* clients a thread caches for at once */

struct tc_ent { void *p; uint64_t gen; };

struct tc_bin {
    uint32_t head, n;            /* ring: e[(head + i) % TC_CAP], oldest first */
    struct tc_ent e[TC_CAP];
};

struct tcache {
    int m;                       /* owned (1) by the owner on every call, by others to flush:
                                  * tc_lock; an exchange and a plain store per call */
    mb_client *c;                /* NULL once the client closed */
    uint64_t cid;
    void *tag;
    bool host;                   /* no events: every object is ready */
    uint64_t open_gen, done_gen; /* a stream's tag: its frees' gens; ready ones */
    uint64_t seen_done;          /* the legacy clock's done epoch when last read */
    size_t bytes;                /* read by mb_stats without m (atomic) */
    uint64_t ops;                /* calls served; the idle policy watches it */
    uint64_t seen_ops;           /* ops when the idle policy last saw it change */
    int64_t seen_ms;             /* ... and when */
    struct tcache *next;         /* the client's list (g_tc_lock) */
    struct tc_bin bins[];
};

/* A cache's lock: its owner takes it on every call and others only to
 * flush it, so it is almost never contended; a pthread mutex's unlock
 * costs an atomic read-modify-write (it looks for waiters), this one a
 * store. A flusher holds it for one flush (which may query the driver or
 * wait for c->lock): waiters spin briefly, then yield. */
static inline bool tc_trylock(int *m)
{
    return __atomic_exchange_n(m, 1, __ATOMIC_ACQUIRE) == 0;
}

static inline void tc_lock(int *m)
{
    while (!tc_trylock(m))
        spin_while_set(m, 100);
}

static inline void tc_unlock(int *m) { __atomic_store_n(m, 0, __ATOMIC_RELEASE); }

static pthread_mutex_t g_tc_lock = PTHREAD_MUTEX_INITIALIZER;   /* lists, attach, detach */
static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static uint64_t g_next_cid = 1;
static __thread struct tcache *tl_slots[TC_SLOTS];

/* ---- bins ---- */

static struct tc_ent *bin_at(struct tc_bin *b, uint32_t i) { return &b->e[(b->head + i) % TC_CAP]; }

static uint32_t bin_cap(size_t size)
{
    size_t n = TC_BIN_BYTES / size;
    return n < 4 ? 4 : n > TC_CAP ? TC_CAP : (uint32_t)n;
}

/* Free of every stream's earlier work. */
static bool ent_ready(struct tcache *t, uint64_t gen)
{
    if (t->host)
        return true;
    if (t->tag != NULL)
        return gen <= t->done_gen;
    /* The shared clock is read only when the thread's last look at it
     * does not prove gen done already. */
    if (gen <= t->seen_done)
        return true;
    t->seen_done = lclock_done(&t->c->lclk);
    return gen <= t->seen_done;
}

/* ---- flushing into the shared slab ---- */

/* Move the first n (oldest) entries of b to the shared slab: ready ones
 * released, pending ones deferred under ev (recorded by the caller on the
 * tag, which it vouches for) or, with ev NULL, a device-sync fence. */
static void bin_flush(struct tcache *t, struct tc_bin *b, uint32_t n, size_t size, void *ev)
{
    void *ready[TC_CAP], *pending[TC_CAP];
    uint32_t nr = 0, np = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct tc_ent *e = bin_at(b, i);
        if (ent_ready(t, e->gen))
            ready[nr++] = e->p;
        else
            pending[np++] = e->p;
    }
    b->head = (b->head + n) % TC_CAP;
    b->n -= n;
    mb_client *c = t->c;
    pthread_mutex_lock(&c->lock);
    tiers_slab_put(c, ready, nr, NULL, false);
    tiers_slab_put(c, pending, np, ev, true);
    /* Under c->lock with the slab's change: mb_stats reads both at once. */
    __atomic_store_n(&t->bytes, t->bytes - n * size, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->lock);
}

/* Everything cached goes back (the tag may be gone: no event on it). */
static void flush_all(struct tcache *t)
{
    mb_client *c = t->c;
    unsigned nclasses = c->slab ? mb_slab_class_count(c->slab) : 0;
    if (t->tag == NULL && !t->host)
        lclock_advance(&c->lclk, c->be, lclock_tag(&c->lclk) - 1);
    for (unsigned k = 0; k < nclasses; k++)
        if (t->bins[k].n)
            bin_flush(t, &t->bins[k], t->bins[k].n, mb_slab_class_size(c->slab, k), NULL);
    t->done_gen = t->open_gen++;
}

/* ---- attaching a thread's cache to a client ---- */

/* Take t off its client's list (g_tc_lock held). */
static void detach(struct tcache *t)
{
    for (struct tcache **pp = &t->c->tcaches; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
}

static void thread_exit(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&g_tc_lock);
    for (int i = 0; i < TC_SLOTS; i++) {
        struct tcache *t = tl_slots[i];
        if (!t)
            continue;
        if (t->c) {
            tc_lock(&t->m);
            flush_all(t);
            tc_unlock(&t->m);
            detach(t);
        }
        free(t);
        tl_slots[i] = NULL;
    }
    pthread_mutex_unlock(&g_tc_lock);
}

static void key_once(void) { pthread_key_create(&g_key, thread_exit); }

static struct tcache *attach(mb_client *c)
{
    pthread_once(&g_key_once, key_once);
    unsigned nclasses = mb_slab_class_count(c->slab);
    struct tcache *t = calloc(1, sizeof(*t) + nclasses * sizeof(struct tc_bin));
    if (!t)
        return NULL;
    t->c = c;
    t->cid = c->cid;
    t->host = c->be->ops->event_record == NULL;
    t->open_gen = 1;
    pthread_mutex_lock(&g_tc_lock);
    int slot = -1;
    for (int i = 0; i < TC_SLOTS && slot < 0; i++)
        if (!tl_slots[i] || !tl_slots[i]->c)
            slot = i;
    if (slot < 0) {
        slot = 0;   /* every slot serves a live client: hand the first back */
        struct tcache *old = tl_slots[0];
        tc_lock(&old->m);
        flush_all(old);
        tc_unlock(&old->m);
        detach(old);
        old->c = NULL;
    }
    if (tl_slots[slot]) {
        free(tl_slots[slot]);
    }
    tl_slots[slot] = t;
    t->next = c->tcaches;
    c->tcaches = t;
    pthread_mutex_unlock(&g_tc_lock);
    pthread_setspecific(g_key, t);   /* any non-NULL value runs thread_exit */
    return t;
}

/* The calling thread's cache for c, locked; NULL when there is none. */
static struct tcache *tc_get(mb_client *c)
{
    for (int i = 0; i < TC_SLOTS; i++) {
        struct tcache *t = tl_slots[i];
        if (t && t->cid == c->cid) {
            tc_lock(&t->m);
            if (t->c == c)
                return t;
            tc_unlock(&t->m);
            return NULL;
        }
    }
    struct tcache *t = attach(c);
    if (t)
        tc_lock(&t->m);
    return t;
}

/* ---- the fast paths ---- */

/* Objects fresh from the shared slab (ready for every stream) go in at
 * the oldest end of bin b (t->bytes counted them, under c->lock with the
 * slab's change, so that mb_stats reads both at once). */
static void push_ready(struct tc_bin *b, void *const *objs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        b->head = (b->head + TC_CAP - 1) % TC_CAP;
        b->e[b->head] = (struct tc_ent){ objs[i], 0 };
        b->n++;
    }
}

static int refill(struct tcache *t, unsigned k, size_t size, void **ptr)
{
    mb_client *c = t->c;
    struct tc_bin *b = &t->bins[k];
    uint32_t want = bin_cap(size) / 2;
    if (want > TC_REFILL)
        want = TC_REFILL;
    if (want > TC_CAP - b->n)
        want = TC_CAP - b->n;
    void *got[TC_REFILL + 1];
    pthread_mutex_lock(&c->lock);
    size_t n = tiers_slab_take(c, size, want + 1, got);
    int rc = n ? 0 : c->slab_err;
    if (n > 1)
        __atomic_store_n(&t->bytes, t->bytes + (n - 1) * size, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->lock);
    if (n == 0)
        return rc ? rc : MB_ENOMEM;
    push_ready(b, got + 1, n - 1);
    *ptr = got[0];
    return 0;
}

/* Ready objects from the shared slab into the oldest end of bin k, up to
 * half its capacity (the slab grows for them as for any refill). */
static void top_up(struct tcache *t, unsigned k, size_t size)
{
    mb_client *c = t->c;
    struct tc_bin *b = &t->bins[k];
    uint32_t want = bin_cap(size) / 2 > b->n ? bin_cap(size) / 2 - b->n : 0;
    if (want > TC_REFILL)
        want = TC_REFILL;
    if (!want)
        return;
    void *got[TC_REFILL];
    pthread_mutex_lock(&c->lock);
    size_t n = tiers_slab_take(c, size, want, got);
    __atomic_store_n(&t->bytes, t->bytes + n * size, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->lock);
    push_ready(b, got, n);
}

int tc_alloc(mb_client *c, size_t size, void *stream, bool sync, void **ptr)
{
    struct tcache *t = tc_get(c);
    if (!t)
        return MB_ENOENT;   /* no cache: the caller takes the shared path */
    unsigned k = mb_slab_class_of(c->slab, size);
    size_t csize = mb_slab_class_size(c->slab, k);
    t->ops++;
    struct tc_bin *b = &t->bins[k];
    int rc = 0;
    void *p = NULL;
    if (b->n && (t->host || (!sync && stream == t->tag))) {
        p = bin_at(b, --b->n)->p;              /* the newest: stream order */
    } else {
        bool advanced = false;
        if (b->n && !t->host && t->tag == NULL && !ent_ready(t, bin_at(b, 0)->gen)) {
            lclock_advance(&c->lclk, c->be, bin_at(b, 0)->gen);
            advanced = true;
        }
        if (b->n && ent_ready(t, bin_at(b, 0)->gen)) {
            p = bin_at(b, 0)->p;               /* the oldest, ready */
            b->head = (b->head + 1) % TC_CAP;
            b->n--;
            /* A shallow bin asks the driver often: deepen it (one shared
             * refill now, fewer advances from then on). */
            if (advanced && b->n < bin_cap(csize) / 2)
                top_up(t, k, csize);
        }
    }
    if (p)
        __atomic_store_n(&t->bytes, t->bytes - csize, __ATOMIC_RELAXED);
    else
        rc = refill(t, k, csize, &p);
    if (rc == 0)
        *ptr = p;
    tc_unlock(&t->m);
    return rc;
}

/* Whether p is cached in b: the ring's two runs, no index arithmetic. */
static bool bin_has(const struct tc_bin *b, const void *p)
{
    uint32_t first = TC_CAP - b->head < b->n ? TC_CAP - b->head : b->n;
    for (uint32_t i = 0; i < first; i++)
        if (b->e[b->head + i].p == p)
            return true;
    for (uint32_t i = 0; i < b->n - first; i++)
        if (b->e[i].p == p)
            return true;
    return false;
}

int tc_free(mb_client *c, void *ptr, void *stream)
{
    size_t slot;
    const struct chunkreg_chunk *ck = chunkreg_object(c->chunks, ptr, &slot);
    if (!ck)
        return 1;                              /* not a slab object */
    struct tcache *t = tc_get(c);
    if (!t)
        return 1;
    struct tc_bin *b = &t->bins[ck->cls];
    if (bin_has(b, ptr)) {
        tc_unlock(&t->m);
        return MB_ENOENT;                      /* freed already: a double free */
    }
    if (!t->host && stream != t->tag) {
        flush_all(t);                          /* the old tag may be gone */
        t->tag = stream;
    }
    uint32_t cap = bin_cap(ck->size);
    if (b->n >= cap) {
        /* Full: the older half goes to the shared slab, pending ones under
         * an event recorded now on the stream this free names. */
        void *ev = NULL;
        struct tc_ent *last = bin_at(b, b->n - cap / 2 - 1);   /* the newest to go */
        if (!t->host && t->tag == NULL)
            lclock_advance(&c->lclk, c->be, last->gen);
        if (!ent_ready(t, last->gen)) {
            mb_backend *be = c->be;
            if (be->ops->event_create(be, &ev) == 0 && be->ops->event_record(be, ev, stream) != 0) {
                be->ops->event_destroy(be, ev);
                ev = NULL;
            }
        }
        bin_flush(t, b, b->n - cap / 2, ck->size, ev);
    }
    uint64_t gen = t->host ? 0 : t->tag == NULL ? lclock_tag(&c->lclk) : t->open_gen;
    *bin_at(b, b->n++) = (struct tc_ent){ ptr, gen };
    __atomic_store_n(&t->bytes, t->bytes + ck->size, __ATOMIC_RELAXED);
    tc_unlock(&t->m);
    return 0;
}

/* ---- the client's side ---- */

int tc_client_init(mb_client *c)
{
    pthread_mutex_lock(&g_tc_lock);
    c->cid = g_next_cid++;
    pthread_mutex_unlock(&g_tc_lock);
    return 0;
}

void tc_flush_every_thread(mb_client *c, bool detach)
{
    pthread_mutex_lock(&g_tc_lock);
    for (struct tcache **pp = &c->tcaches; *pp;) {
        struct tcache *t = *pp;
        tc_lock(&t->m);
        if (t->c)
            flush_all(t);
        if (detach) {
            t->c = NULL;   /* the thread frees it when it exits or needs the slot */
            *pp = t->next;
        } else {
            pp = &t->next;
        }
        tc_unlock(&t->m);
    }
    pthread_mutex_unlock(&g_tc_lock);
}

void tc_flush_idle(mb_client *c, int64_t idle_ms)
{
    int64_t now = tiers_now_ms();
    pthread_mutex_lock(&g_tc_lock);
    for (struct tcache *t = c->tcaches; t; t = t->next) {
        if (!tc_trylock(&t->m))
            continue;   /* in use right now: not idle */
        if (t->ops != t->seen_ops || !t->seen_ms) {
            t->seen_ops = t->ops;
            t->seen_ms = now;
        } else if (now - t->seen_ms >= idle_ms && t->c) {
            flush_all(t);
        }
        tc_unlock(&t->m);
    }
    pthread_mutex_unlock(&g_tc_lock);
}

void tc_lists_lock(void) { pthread_mutex_lock(&g_tc_lock); }
void tc_lists_unlock(void) { pthread_mutex_unlock(&g_tc_lock); }

size_t tc_cached_bytes_held(mb_client *c)
{
    size_t n = 0;
    for (struct tcache *t = c->tcaches; t; t = t->next)
        n += __atomic_load_n(&t->bytes, __ATOMIC_RELAXED);
    return n;
}

