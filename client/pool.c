/* pool.c: the fast tier's best fit with coalescing: arenas tiled by blocks,
 * bucketed free lists (ready, and pending per stream), the live-pointer
 * hash, the lazy fences that move pending blocks to ready, and holes (parts
 * of ready blocks whose memory the owner unmapped). */
#include "pool.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moonbright/mbclient.h"

#ifndef MB_DEBUG
#define MB_DEBUG 0
#endif
#if MB_DEBUG
#define POOL_CHECK(p) assert(mb_pool_is_valid(p))
#else
#define POOL_CHECK(p) ((void)0)
#endif

#define CLASS_BUCKETS 448               /* 16 exact + 8 per doubling up to 2^58 units */
#define NBUCKETS (2 * CLASS_BUCKETS)    /* small arenas' blocks, then large arenas' */
#define NBWORDS ((NBUCKETS + 63) / 64)
#define FIT_SCAN 16                     /* entries examined per bucket */
#define FENCE_BATCH 32                  /* frees on a stream covered by one event */
#define FENCE_BYTES ((size_t)64 << 20)  /* ... or this many bytes of them */

enum { B_LIVE, B_READY, B_PENDING, B_HOLE };

struct arena;
struct pstream;

struct blk {
    uintptr_t addr;              /* addr % align == 0 */
    size_t size;                 /* > 0, size % align == 0 */
    struct blk *aprev, *anext;   /* address order: aprev->addr + aprev->size == addr */
    struct arena *arena;
    struct blk *fprev, *fnext;   /* free: bucket list of its free list */
    struct blk *oprev, *onext;   /* pending: owner's free-order list */
    struct blk *hnext;           /* live: hash chain; spare: free-struct list */
    struct pstream *owner;       /* pending: the stream it was freed on; else NULL */
    uint64_t seq;                /* pending: completes with a fence of seq >= this */
    uint32_t bucket;             /* free: == bucket_in(size, its arena's class) */
    uint8_t state;               /* B_LIVE, B_READY, B_PENDING, B_HOLE */
    bool busy;                   /* hole: the owner is still unmapping it */
    uint64_t since;              /* free: p->nalloc when it (its newest part) was freed */
};

struct arena {
    uintptr_t base;              /* == first->addr */
    size_t bytes;                /* == sum of its blocks' sizes; live + free + holes == bytes */
    size_t live;                 /* sum of its live blocks' sizes */
    size_t holes;                /* sum of its holes' sizes (not mapped) */
    unsigned busy;               /* holes still being unmapped: never shrunk meanwhile */
    bool extending;              /* ops->extend maps more after it: never shrunk or detached */
    bool filling;                /* ops->fill maps into one of its holes: neither extended,
                                  * punched, shrunk nor detached meanwhile */
    bool large;                  /* made for a request above large_min: serves only those */
    size_t too_big;              /* ops->extend had no room for this many bytes more
                                  * (MB_ELIMIT; 1: can never grow, MB_EINVAL): not asked
                                  * for as many again; 0: none */
    int64_t idle_since_ms;       /* when live last fell to 0 */
    struct blk *first;           /* lowest block; first->aprev == NULL */
    struct arena *prev, *next;
};

struct flist {                   /* bucketed free lists of one owner */
    struct blk *head[NBUCKETS];  /* map bit b set <=> head[b] != NULL */
    uint64_t map[NBWORDS];
    size_t count, bytes;         /* blocks and bytes listed */
};

struct fence {
    void *ev;                    /* NULL: a device-sync fence (complete once
                                  * p->synced >= ticket) */
    uint64_t seq;                /* completes pending blocks with seq <= this */
    uint64_t ticket;             /* device-sync fences: mb_pool_sync_begin's ticket */
    struct fence *next;
};

struct pstream {
    void *stream;
    struct flist fl;             /* pending blocks freed on stream */
    struct blk *ohead, *otail;   /* the same blocks, seq non-decreasing from ohead */
    uint64_t open_seq;           /* seq of blocks freed now; every block's seq <= open_seq */
    size_t unfenced_n, unfenced_bytes;   /* frees with seq == open_seq (no fence yet) */
    struct fence *fhead, *ftail; /* seq strictly increasing, every fence seq < open_seq */
    struct pstream *next;
};

struct mb_pool {
    struct mb_pool_ops ops;
    void *ctx;
    size_t align;                /* power of two >= 256 */
    unsigned lg_align;
    size_t arena_bytes;
    struct flist ready;          /* free blocks usable by every stream */
    struct pstream *streams, *last;
    struct arena *arenas;
    size_t mapped;               /* == sum of arena bytes - holes */
    size_t live;                 /* == sum of arena live */
    size_t nlive;                /* live blocks == entries in hash */
    struct blk **hash;           /* live addr -> block; 2^hlg buckets */
    unsigned hlg;
    struct blk *spare;           /* recycled block structs, via hnext */
    uint64_t sync_ticket;        /* last ticket of mb_pool_sync_begin */
    uint64_t synced;             /* tickets <= synced are complete */
    uint64_t misses;             /* allocations that needed a new arena */
    uint64_t extends;            /* misses served by extending an arena */
    size_t extend_min;           /* misses this large try extending first (0: never) */
    size_t large_min;            /* requests above this use large arenas only, the rest
                                  * small ones only (0: one class) */
    uint64_t nalloc;             /* allocations so far (the age of free blocks) */
    size_t close_fit_min;        /* requests this large take a block at most 1/8 larger (0: off) */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static unsigned lg_floor(uint64_t x) { return 63u - (unsigned)__builtin_clzll(x); }

static uint32_t bucket_of(const struct mb_pool *p, size_t size)
{
    uint64_t u = size >> p->lg_align;
    if (u < 16)
        return (uint32_t)u;
    unsigned lg = lg_floor(u);
    return 16 + (lg - 4) * 8 + (uint32_t)((u >> (lg - 3)) & 7);
}

/* Requests above large_min, and the arenas made for them, are of the large
 * class; their free blocks are bucketed after the small class's. */
static bool is_large(const struct mb_pool *p, size_t size) { return p->large_min && size > p->large_min; }

static uint32_t bucket_in(const struct mb_pool *p, size_t size, bool large)
{
    return bucket_of(p, size) + (large ? CLASS_BUCKETS : 0);
}

/* ---- block structs ---- */

static struct blk *blk_get(struct mb_pool *p)
{
    struct blk *b = p->spare;
    if (b) {
        p->spare = b->hnext;
        return b;
    }
    return malloc(sizeof *b);
}

static void blk_put(struct mb_pool *p, struct blk *b)
{
    b->hnext = p->spare;
    p->spare = b;
}

/* ---- live hash ---- */

static size_t hash_slot(unsigned hlg, uintptr_t addr)
{
    return (size_t)(((uint64_t)addr * 0x9E3779B97F4A7C15ull) >> (64 - hlg));
}

static struct blk *hash_find(const struct mb_pool *p, uintptr_t addr)
{
    struct blk *b = p->hash[hash_slot(p->hlg, addr)];
    while (b && b->addr != addr)
        b = b->hnext;
    return b;
}

static int hash_reserve(struct mb_pool *p)
{
    if (p->nlive < ((size_t)1 << p->hlg))
        return 0;
    unsigned lg = p->hlg + 1;
    struct blk **h = calloc((size_t)1 << lg, sizeof *h);
    if (!h)
        return MB_ENOMEM;
    for (size_t i = 0; i < ((size_t)1 << p->hlg); i++) {
        struct blk *b = p->hash[i];
        while (b) {
            struct blk *nx = b->hnext;
            size_t s = hash_slot(lg, b->addr);
            b->hnext = h[s];
            h[s] = b;
            b = nx;
        }
    }
    free(p->hash);
    p->hash = h;
    p->hlg = lg;
    return 0;
}

/* ---- free lists ---- */

static void fl_insert(struct mb_pool *p, struct flist *fl, struct blk *b)
{
    uint32_t k = bucket_in(p, b->size, b->arena->large);
    b->bucket = k;
    b->fprev = NULL;
    b->fnext = fl->head[k];
    if (b->fnext)
        b->fnext->fprev = b;
    fl->head[k] = b;
    fl->map[k / 64] |= 1ull << (k % 64);
    fl->count++;
    fl->bytes += b->size;
}

static void fl_remove(struct flist *fl, struct blk *b)
{
    uint32_t k = b->bucket;
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else if (!(fl->head[k] = b->fnext))
        fl->map[k / 64] &= ~(1ull << (k % 64));
    if (b->fnext)
        b->fnext->fprev = b->fprev;
    fl->count--;
    fl->bytes -= b->size;
}

static struct blk *scan_bucket(struct blk *b, size_t size)
{
    struct blk *best = NULL;
    for (int n = 0; b && n < FIT_SCAN; b = b->fnext, n++) {
        if (b->size >= size && (!best || b->size < best->size)) {
            best = b;
            if (b->size == size)
                break;
        }
    }
    return best;
}

/* The best fit for size among the blocks of its class. */
static struct blk *fl_find(const struct mb_pool *p, const struct flist *fl, size_t size)
{
    bool large = is_large(p, size);
    uint32_t k = bucket_in(p, size, large), end = large ? NBUCKETS : CLASS_BUCKETS;
    if (fl->head[k]) {
        struct blk *b = k % CLASS_BUCKETS < 16 ? fl->head[k] : scan_bucket(fl->head[k], size);
        if (b)
            return b;
    }
    k++;
    for (uint32_t w = k / 64; w < NBWORDS; w++) {
        uint64_t m = fl->map[w];
        if (w == k / 64)
            m &= k % 64 ? ~0ull << (k % 64) : ~0ull;
        if (m) {
            uint32_t j = w * 64 + (uint32_t)__builtin_ctzll(m);
            if (j >= end)
                return NULL;   /* the other class's */
            return j % CLASS_BUCKETS < 16 ? fl->head[j] : scan_bucket(fl->head[j], size);
        }
    }
    return NULL;
}

/* ---- streams ---- */

static struct pstream *stream_find(struct mb_pool *p, void *stream)
{
    if (stream == MB_POOL_SYNC)
        return NULL;
    if (p->last && p->last->stream == stream)
        return p->last;
    for (struct pstream *s = p->streams; s; s = s->next)
        if (s->stream == stream)
            return p->last = s;
    return NULL;
}

static struct pstream *stream_get(struct mb_pool *p, void *stream)
{
    struct pstream *s = stream_find(p, stream);
    if (s)
        return s;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->stream = stream;
    s->next = p->streams;
    p->streams = s;
    return p->last = s;
}

static void olist_unlink(struct pstream *s, struct blk *b)
{
    if (b->oprev) b->oprev->onext = b->onext; else s->ohead = b->onext;
    if (b->onext) b->onext->oprev = b->oprev; else s->otail = b->oprev;
}

static void olist_append(struct pstream *s, struct blk *b)
{
    b->onext = NULL;
    b->oprev = s->otail;
    if (s->otail) s->otail->onext = b; else s->ohead = b;
    s->otail = b;
}

/* Take b out of whatever free list holds it. */
static void free_unlink(struct mb_pool *p, struct blk *b)
{
    if (b->state == B_READY) {
        fl_remove(&p->ready, b);
    } else {
        fl_remove(&b->owner->fl, b);
        olist_unlink(b->owner, b);
    }
}

/* keep takes over gone's range; gone is adjacent to keep and on no list. */
static void absorb(struct mb_pool *p, struct blk *keep, struct blk *gone)
{
    if (gone->addr < keep->addr) {
        keep->addr = gone->addr;
        keep->aprev = gone->aprev;
        if (keep->aprev)
            keep->aprev->anext = keep;
        else
            keep->arena->first = keep;
    } else {
        keep->anext = gone->anext;
        if (keep->anext)
            keep->anext->aprev = keep;
    }
    keep->size += gone->size;
    keep->since = gone->since < keep->since ? gone->since : keep->since;
    blk_put(p, gone);
}

/* b (on no list) becomes ready: merge with ready neighbours, list it. */
static void ready_insert(struct mb_pool *p, struct blk *b)
{
    b->state = B_READY;
    b->owner = NULL;
    struct blk *n;
    if ((n = b->aprev) && n->state == B_READY) {
        fl_remove(&p->ready, n);
        absorb(p, b, n);
    }
    if ((n = b->anext) && n->state == B_READY) {
        fl_remove(&p->ready, n);
        absorb(p, b, n);
    }
    fl_insert(p, &p->ready, b);
}

/* ---- fences ---- */

static bool unfenced(const struct pstream *s)
{
    return s->otail && s->otail->seq == s->open_seq;
}

/* Close s's open group with a fence: an event recorded on s (only ever
 * from a call that names s, so the stream is alive), or with ticket != 0 a
 * device-sync fence. */
static int fence_stream(struct mb_pool *p, struct pstream *s, uint64_t ticket)
{
    s->unfenced_n = s->unfenced_bytes = 0;
    if (!unfenced(s))
        return 0;
    struct fence *f = malloc(sizeof *f);
    if (!f)
        return MB_ENOMEM;
    void *ev = NULL;
    int rc = ticket ? 0 : p->ops.event_record(p->ctx, s->stream, &ev);
    if (rc) {
        free(f);
        return rc;
    }
    f->ev = ev;
    f->ticket = ticket;
    f->seq = s->open_seq++;
    f->next = NULL;
    if (s->ftail) s->ftail->next = f; else s->fhead = f;
    s->ftail = f;
    return 0;
}

static bool fence_done(const struct mb_pool *p, const struct fence *f)
{
    return f->ev ? p->ops.event_query(p->ctx, f->ev) == 1 : f->ticket <= p->synced;
}

/* Turn blocks whose fence completed ready. Returns the number of blocks
 * made ready. Records nothing. */
static size_t poll_streams(struct mb_pool *p)
{
    size_t n = 0;
    for (struct pstream *s = p->streams; s; s = s->next) {
        struct fence *f;
        while ((f = s->fhead) && fence_done(p, f)) {
            struct blk *b;
            while ((b = s->ohead) && b->seq <= f->seq) {
                fl_remove(&s->fl, b);
                olist_unlink(s, b);
                ready_insert(p, b);
                n++;
            }
            if (f->ev)
                p->ops.event_release(p->ctx, f->ev);
            if (!(s->fhead = f->next))
                s->ftail = NULL;
            free(f);
        }
    }
    return n;
}

/* ---- alloc / release ---- */

static struct blk *best_fit(struct mb_pool *p, struct pstream *s, size_t size)
{
    struct blk *a = s && s->fl.count ? fl_find(p, &s->fl, size) : NULL;
    struct blk *r = p->ready.count ? fl_find(p, &p->ready, size) : NULL;
    struct blk *b = a && (!r || a->size <= r->size) ? a : r;
    /* A large request does not split a much larger block: the remainder
     * would strand; a miss lets the owner rebuild instead (close_fit). */
    if (b && p->close_fit_min && size >= p->close_fit_min && b->size - size > size / 8)
        return NULL;
    return b;
}

static bool mergeable_for(const struct blk *b, const struct pstream *s)
{
    return b && (b->state == B_READY || (b->state == B_PENDING && b->owner == s));
}

/* The pending block of s whose run of neighbours (ready, or pending on s)
 * is the smallest one holding size; it absorbs that run and is returned.
 * Usable by s at once: the ready part by anyone, the rest by stream order. */
static struct blk *gather_for(struct mb_pool *p, struct pstream *s, size_t size)
{
    struct blk *best = NULL;
    size_t best_ext = SIZE_MAX;
    for (struct blk *b = s->ohead; b; b = b->onext) {
        size_t ext = 0;
        struct blk *x = b;
        while (mergeable_for(x->aprev, s))
            x = x->aprev;
        for (; mergeable_for(x, s); x = x->anext)
            ext += x->size;
        if (ext >= size && ext < best_ext) {
            best = b;
            best_ext = ext;
        }
    }
    if (!best)
        return NULL;
    fl_remove(&s->fl, best);
    struct blk *n;
    while (mergeable_for(n = best->aprev, s) || mergeable_for(n = best->anext, s)) {
        if (n->state == B_PENDING && n->seq > best->seq) {
            /* keep the later fence: best moves to just after n in free order */
            olist_unlink(s, best);
            best->seq = n->seq;
            best->oprev = n;
            best->onext = n->onext;
            if (n->onext) n->onext->oprev = best; else s->otail = best;
            n->onext = best;
        }
        free_unlink(p, n);
        absorb(p, best, n);
    }
    fl_insert(p, &s->fl, best);
    return best;
}

static int add_arena(struct mb_pool *p, size_t size, struct blk **out)
{
    size_t want = size > p->arena_bytes ? size : p->arena_bytes;
    struct arena *a = malloc(sizeof *a);
    struct blk *b = blk_get(p);
    if (!a || !b) {
        free(a);
        if (b)
            blk_put(p, b);
        return MB_ENOMEM;
    }
    void *base = NULL;
    size_t bytes = 0;
    int rc = p->ops.grow(p->ctx, want, &base, &bytes);
    if (rc == 0 && (!base || ((uintptr_t)base & (p->align - 1)) || (bytes & ~(p->align - 1)) < size)) {
        if (base)
            p->ops.shrink(p->ctx, base, bytes);
        rc = MB_EBACKEND;
    }
    if (rc) {
        free(a);
        blk_put(p, b);
        return rc;
    }
    a->base = (uintptr_t)base;
    a->bytes = bytes & ~(p->align - 1);
    a->live = 0;
    a->holes = 0;
    a->busy = 0;
    a->extending = false;
    a->filling = false;
    a->too_big = 0;
    a->large = is_large(p, size);
    a->idle_since_ms = now_ms();
    a->first = b;
    a->prev = NULL;
    a->next = p->arenas;
    if (p->arenas)
        p->arenas->prev = a;
    p->arenas = a;
    p->mapped += a->bytes;
    b->addr = a->base;
    b->size = a->bytes;
    b->since = p->nalloc;
    b->aprev = b->anext = NULL;
    b->arena = a;
    b->owner = NULL;
    b->state = B_READY;
    fl_insert(p, &p->ready, b);
    *out = b;
    return 0;
}

static struct blk *last_of(const struct arena *a)
{
    struct blk *b = a->first;
    while (b->anext)
        b = b->anext;
    return b;
}

/* A miss of size: the arena of its class with the largest ready free end
 * short of size (none at all counts: the request then starts right after
 * the arena's last block), not refused as large an extension before, is
 * extended so that its end holds size; then the best fit again (the
 * caller's lock may have been dropped while the owner mapped, so the new
 * end is whatever fits now). NULL: none. An arena so grows like one
 * segment: its free blocks all merge, where separate arenas would strand
 * them. */
static struct blk *extend_for(struct mb_pool *p, void *stream, size_t size)
{
    struct arena *best = NULL;
    size_t tail = 0;
    bool large = is_large(p, size);
    for (struct arena *a = p->arenas; a; a = a->next) {
        if (a->extending || a->filling || a->large != large)
            continue;
        struct blk *b = last_of(a);
        size_t t = b->state == B_READY ? b->size : 0;
        if (t < size && (!a->too_big || size - t < a->too_big) && (!best || t > tail)) {
            best = a;
            tail = t;
        }
    }
    struct blk *nb = best ? blk_get(p) : NULL;
    if (!nb)
        return NULL;
    size_t more = 0;
    best->extending = true;
    int rc = p->ops.extend(p->ctx, (void *)best->base, best->bytes, size - tail, &more);
    best->extending = false;
    if (rc != 0 || more == 0 || (more & (p->align - 1))) {
        if (rc == MB_EINVAL)
            best->too_big = 1;             /* never extensible (shared, or mapped elsewhere) */
        else if (rc == MB_ELIMIT)
            best->too_big = size - tail;   /* no room left for this much more */
        blk_put(p, nb);
        return NULL;
    }
    struct blk *last = last_of(best);
    nb->addr = best->base + best->bytes;
    nb->size = more;
    nb->arena = best;
    nb->aprev = last;
    nb->anext = NULL;
    nb->since = p->nalloc;
    last->anext = nb;
    best->bytes += more;
    p->mapped += more;
    ready_insert(p, nb);
    p->extends++;
    /* The stream's record may have gone meanwhile (a trim frees idle ones). */
    return best_fit(p, stream_find(p, stream), size);
}

/* The legacy default stream is always alive: close its open group, so
 * that synchronous frees become reusable by everyone once it is done, and
 * collect every completed fence. Returns the blocks made ready. */
static size_t settle_legacy(struct mb_pool *p, struct pstream *legacy)
{
    if (legacy && unfenced(legacy))
        (void)fence_stream(p, legacy, 0);
    return poll_streams(p);
}

/* b fits size but is larger: a block freed on the legacy stream (mb_free)
 * that fits closer is still pending only because nothing has looked at the
 * legacy clock since. Look now (one query for every such free of the
 * process), and take the best fit again: left alone, b is split and the
 * closer block strands until a miss makes it ready. */
static struct blk *better_settled(struct mb_pool *p, struct pstream *s, size_t size, struct blk *b)
{
    struct pstream *legacy = stream_find(p, NULL);
    if (!legacy || legacy == s || !legacy->fl.count)
        return b;
    struct blk *q = fl_find(p, &legacy->fl, size);
    if (!q || q->size >= b->size)
        return b;
    return settle_legacy(p, legacy) ? best_fit(p, s, size) : b;
}

/* An idle hole takes in the idle holes beside it (holes are on no list). */
static void hole_merge(struct mb_pool *p, struct blk *b)
{
    struct blk *n;
    while (((n = b->aprev) && n->state == B_HOLE && !n->busy) ||
           ((n = b->anext) && n->state == B_HOLE && !n->busy))
        absorb(p, b, n);
}

/* The first hole that a request of size needs in the run of ready blocks
 * and holes of its class that holds it with the fewest hole bytes (counted
 * from the run's start until size is covered), in an arena no other call
 * is working on; *start gets the run's start. NULL: none. */
static struct blk *hole_to_fill(const struct mb_pool *p, size_t size, uintptr_t *start_addr)
{
    bool large = is_large(p, size);
    struct blk *best = NULL;
    size_t best_holes = SIZE_MAX;
    for (struct arena *a = p->arenas; a; a = a->next) {
        if (!a->holes || a->busy || a->extending || a->filling || a->large != large)
            continue;
        struct blk *start = NULL, *first_hole = NULL;
        size_t run = 0, holes = 0;
        for (struct blk *x = a->first; x; x = x->anext) {
            bool idle_hole = x->state == B_HOLE && !x->busy;
            if (x->state != B_READY && !idle_hole) {
                start = NULL;
                continue;
            }
            if (!start) {
                start = x;
                first_hole = NULL;
                run = holes = 0;
            }
            if (run >= size)
                continue;   /* covered already: this start's cost is known */
            run += x->size;
            if (idle_hole) {
                holes += x->size;
                if (!first_hole)
                    first_hole = x;
            }
            if (run >= size && first_hole && holes < best_holes) {
                best = first_hole;
                best_holes = holes;
                *start_addr = start->addr;
            }
        }
    }
    return best;
}

/* A miss of size: fill the holes it needs (hole_to_fill, one at a time,
 * since other calls may run while the owner maps) while the best fit
 * fails; then that fit, or NULL (holes filled so far stay ready). The
 * owner learns how much of each hole the request will cover (it lands at
 * the run's start), so that it can lay frames out to end there. */
static struct blk *fill_for(struct mb_pool *p, void *stream, size_t size)
{
    struct blk *b = NULL, *h;
    uintptr_t start = 0;
    for (int k = 0; k < 64 && !b && (h = hole_to_fill(p, size, &start)); k++) {
        struct arena *a = h->arena;
        size_t covers = start + size > h->addr ? start + size - h->addr : 0;
        h->busy = true;
        a->busy++;
        a->filling = true;
        size_t filled = 0;
        struct blk *rest = blk_get(p);
        int rc = rest ? p->ops.fill(p->ctx, (void *)a->base, (void *)h->addr, h->size,
                                    covers < h->size ? covers : h->size, &filled) : MB_ENOMEM;
        a->filling = false;
        h->busy = false;
        a->busy--;
        if (rc == 0 && (filled == 0 || filled > h->size || (filled & (p->align - 1))))
            rc = MB_EBACKEND;   /* an owner's bug: the hole is left as it is */
        if (rc != 0) {
            if (rest)
                blk_put(p, rest);
            break;
        }
        if (filled < h->size) {   /* the rest stays a hole, after the filled part */
            *rest = (struct blk){ .addr = h->addr + filled, .size = h->size - filled, .arena = a,
                                  .aprev = h, .anext = h->anext, .state = B_HOLE };
            if (rest->anext)
                rest->anext->aprev = rest;
            h->anext = rest;
            h->size = filled;
        } else {
            blk_put(p, rest);
            rest = NULL;
        }
        a->holes -= filled;
        p->mapped += filled;
        h->since = p->nalloc;
        ready_insert(p, h);
        if (rest)
            hole_merge(p, rest);   /* with a hole after it */
        b = best_fit(p, stream_find(p, stream), size);
    }
    POOL_CHECK(p);
    return b;
}

int mb_pool_alloc(struct mb_pool *p, size_t size, void *stream, void **ptr)
{
    if (!p || !ptr || size == 0 || size > SIZE_MAX - p->align)
        return MB_EINVAL;
    size = (size + p->align - 1) & ~(p->align - 1);
    int rc = hash_reserve(p);
    if (rc)
        return rc;
    struct pstream *s = stream_find(p, stream);
    struct blk *b = best_fit(p, s, size);
    if (b && b->size != size && p->ops.event_record)
        b = better_settled(p, s, size, b);
    if (!b && p->ops.event_record && settle_legacy(p, stream_find(p, NULL)))
        b = best_fit(p, s, size);
    if (!b && s && s->ohead)
        b = gather_for(p, s, size);
    if (!b && p->ops.fill && !(p->close_fit_min && size >= p->close_fit_min))
        b = fill_for(p, stream, size);
    if (!b && p->extend_min && size >= p->extend_min && p->ops.extend)
        b = extend_for(p, stream, size);
    if (!b) {
        p->misses++;
        if ((rc = add_arena(p, size, &b)))
            return rc;
    }
    struct blk *live = b;
    if (b->size > size) {
        live = blk_get(p);
        if (!live)
            return MB_ENOMEM;
        /* the low part is handed out, the remainder keeps b's lists and seq */
        uint32_t old = b->bucket;
        struct flist *fl = b->state == B_READY ? &p->ready : &b->owner->fl;
        live->addr = b->addr;
        live->size = size;
        live->arena = b->arena;
        live->aprev = b->aprev;
        live->anext = b;
        if (live->aprev)
            live->aprev->anext = live;
        else
            b->arena->first = live;
        b->aprev = live;
        b->addr += size;
        if (bucket_in(p, b->size - size, b->arena->large) != old) {
            fl_remove(fl, b);
            b->size -= size;
            fl_insert(p, fl, b);
        } else {
            b->size -= size;
            fl->bytes -= size;
        }
    } else {
        free_unlink(p, b);
    }
    live->state = B_LIVE;
    live->owner = NULL;
    size_t h = hash_slot(p->hlg, live->addr);
    live->hnext = p->hash[h];
    p->hash[h] = live;
    p->nlive++;
    live->arena->live += size;
    p->live += size;
    p->nalloc++;
    *ptr = (void *)live->addr;
    POOL_CHECK(p);
    return 0;
}

/* The hash link that holds the live block at addr (*result NULL: none). */
static struct blk **hash_link(struct mb_pool *p, uintptr_t addr)
{
    struct blk **pp = &p->hash[hash_slot(p->hlg, addr)];
    while (*pp && (*pp)->addr != addr)
        pp = &(*pp)->hnext;
    return pp;
}

int mb_pool_release(struct mb_pool *p, void *ptr, void *stream)
{
    if (!p || !ptr)
        return MB_ENOENT;
    struct blk **pp = hash_link(p, (uintptr_t)ptr);
    struct blk *b = *pp;
    if (!b)
        return MB_ENOENT;
    struct pstream *s = NULL;
    if (p->ops.event_record && !(s = stream_get(p, stream)))
        return MB_ENOMEM;
    *pp = b->hnext;
    p->nlive--;
    b->arena->live -= b->size;
    p->live -= b->size;
    b->since = p->nalloc;
    if (b->arena->live == 0)
        b->arena->idle_since_ms = now_ms();
    if (!s) {
        ready_insert(p, b);
    } else {
        /* Pending on s with the newest seq. Neighbours pending on s merge
         * in, and ready ones too: their memory stays usable at once by s,
         * and by the other streams once s's fence completes, and the block
         * is as large as if the free had been ready at once (left apart, a
         * request splits one part while the other strands). */
        b->state = B_PENDING;
        b->owner = s;
        b->seq = s->open_seq;
        struct blk *n;
        while (mergeable_for(n = b->aprev, s) || mergeable_for(n = b->anext, s)) {
            free_unlink(p, n);
            absorb(p, b, n);
        }
        size_t freed = b->size;
        fl_insert(p, &s->fl, b);
        olist_append(s, b);
        /* One event covers a batch of frees; recorded now, while the caller
         * vouches for the stream being alive. */
        if (++s->unfenced_n >= FENCE_BATCH || (s->unfenced_bytes += freed) >= FENCE_BYTES)
            (void)fence_stream(p, s, 0);
    }
    POOL_CHECK(p);
    return 0;
}

int mb_pool_usable_size(const struct mb_pool *p, const void *ptr, size_t *size)
{
    struct blk *b = p && ptr ? hash_find(p, (uintptr_t)ptr) : NULL;
    if (!b)
        return MB_ENOENT;
    if (size)
        *size = b->size;
    return 0;
}

int mb_pool_fence(struct mb_pool *p, void *stream)
{
    if (!p)
        return MB_EINVAL;
    if (!p->ops.event_record)
        return 0;
    struct pstream *s = stream_find(p, stream);
    int rc = s ? fence_stream(p, s, 0) : 0;
    POOL_CHECK(p);
    return rc;
}

static void arena_unlink(struct mb_pool *p, struct arena *a)
{
    if (a->prev) a->prev->next = a->next; else p->arenas = a->next;
    if (a->next) a->next->prev = a->prev;
}

static size_t trim(struct mb_pool *p, size_t keep_bytes, int64_t idle_ms, size_t want);

/* Nothing live or pending in a, and no hole still being unmapped. */
static bool arena_free(const struct arena *a)
{
    if (a->live || a->busy || a->extending || a->filling)
        return false;
    for (const struct blk *b = a->first; b; b = b->anext)
        if (b->state != B_READY && b->state != B_HOLE)
            return false;
    return true;
}

size_t mb_pool_trim(struct mb_pool *p, size_t keep_bytes)
{
    return trim(p, keep_bytes, -1, SIZE_MAX);
}

size_t mb_pool_trim_idle(struct mb_pool *p, int64_t idle_ms)
{
    return trim(p, 0, idle_ms, SIZE_MAX);
}

size_t mb_pool_trim_for(struct mb_pool *p, size_t want)
{
    return trim(p, 0, -1, want);
}

static size_t trim(struct mb_pool *p, size_t keep_bytes, int64_t idle_ms, size_t want)
{
    size_t freed = 0;
    int64_t now = now_ms();
    if (p->ops.event_record)
        poll_streams(p);
    for (struct arena *a = p->arenas, *nx; a && p->mapped - p->live > keep_bytes && freed < want; a = nx) {
        nx = a->next;
        if (!arena_free(a) || (idle_ms >= 0 && now - a->idle_since_ms < idle_ms))
            continue;
        for (struct blk *b = a->first, *bn; b; b = bn) {
            bn = b->anext;
            if (b->state == B_READY)
                fl_remove(&p->ready, b);
            blk_put(p, b);
        }
        arena_unlink(p, a);
        p->mapped -= a->bytes - a->holes;
        freed += a->bytes - a->holes;
        p->ops.shrink(p->ctx, (void *)a->base, a->bytes);
        free(a);
    }
    /* forget streams with nothing pending */
    for (struct pstream **sp = &p->streams; *sp;) {
        struct pstream *s = *sp;
        if (!s->ohead && !s->fhead) {
            *sp = s->next;
            if (p->last == s)
                p->last = NULL;
            free(s);
        } else {
            sp = &s->next;
        }
    }
    POOL_CHECK(p);
    return freed;
}

uint64_t mb_pool_sync_begin(struct mb_pool *p)
{
    if (!p->ops.event_record)
        return 0;
    uint64_t ticket = 0;
    for (struct pstream *s = p->streams; s; s = s->next)
        if (unfenced(s)) {
            if (!ticket)
                ticket = ++p->sync_ticket;
            if (fence_stream(p, s, ticket) != 0)
                return 0;
        }
    POOL_CHECK(p);
    return ticket ? ticket : p->sync_ticket;
}

void mb_pool_sync_end(struct mb_pool *p, uint64_t ticket)
{
    if (ticket > p->synced && ticket <= p->sync_ticket)
        p->synced = ticket;
    poll_streams(p);
    POOL_CHECK(p);
}

size_t mb_pool_pending(const struct mb_pool *p, bool *unfenced_any)
{
    size_t bytes = 0;
    bool any = false;
    for (const struct pstream *s = p->streams; s; s = s->next) {
        bytes += s->fl.bytes;
        any |= unfenced(s) && s->stream != NULL;   /* the legacy stream can always be fenced */
    }
    if (unfenced_any)
        *unfenced_any = any;
    return bytes;
}

int mb_pool_adopt(struct mb_pool *p, void *base, size_t bytes, void *stream)
{
    if (!p || !base || ((uintptr_t)base & (p->align - 1)) || bytes < p->align ||
        (bytes & (p->align - 1)))
        return MB_EINVAL;
    struct arena *a = malloc(sizeof *a);
    struct blk *b = blk_get(p);
    struct pstream *s = NULL;
    if (!a || !b || (p->ops.event_record && stream != MB_POOL_SYNC && !(s = stream_get(p, stream)))) {
        free(a);
        if (b)
            blk_put(p, b);
        return MB_ENOMEM;
    }
    *a = (struct arena){ .base = (uintptr_t)base, .bytes = bytes, .first = b, .next = p->arenas,
                         .idle_since_ms = now_ms(), .large = is_large(p, bytes) };
    if (p->arenas)
        p->arenas->prev = a;
    p->arenas = a;
    p->mapped += bytes;
    *b = (struct blk){ .addr = a->base, .size = bytes, .arena = a, .since = p->nalloc };
    if (!s) {
        ready_insert(p, b);
    } else {
        b->state = B_PENDING;
        b->owner = s;
        b->seq = s->open_seq;
        fl_insert(p, &s->fl, b);
        olist_append(s, b);
        s->unfenced_n++;
        s->unfenced_bytes += bytes;
    }
    POOL_CHECK(p);
    return 0;
}

int mb_pool_detach(struct mb_pool *p, void *ptr, void **base, size_t *bytes)
{
    struct blk **pp = p && ptr ? hash_link(p, (uintptr_t)ptr) : NULL;
    struct blk *b = pp ? *pp : NULL;
    if (!b)
        return MB_ENOENT;
    struct arena *a = b->arena;
    if (b->aprev || b->anext || a->extending || a->filling)
        return MB_EBUSY;                            /* shares its arena, or grows */
    *pp = b->hnext;
    p->nlive--;
    p->live -= b->size;
    p->mapped -= a->bytes;
    if (a->prev) a->prev->next = a->next; else p->arenas = a->next;
    if (a->next) a->next->prev = a->prev;
    *base = (void *)a->base;
    *bytes = a->bytes;
    blk_put(p, b);
    free(a);
    POOL_CHECK(p);
    return 0;
}

uint64_t mb_pool_misses(const struct mb_pool *p) { return p->misses; }

uint64_t mb_pool_extends(const struct mb_pool *p) { return p->extends; }

uint64_t mb_pool_allocs(const struct mb_pool *p) { return p->nalloc; }

void mb_pool_set_extend_min(struct mb_pool *p, size_t min_size) { p->extend_min = min_size; }

void mb_pool_set_large_min(struct mb_pool *p, size_t min_size) { p->large_min = min_size; }

void mb_pool_set_close_fit(struct mb_pool *p, size_t min_size) { p->close_fit_min = min_size; }

bool mb_pool_would_miss(struct mb_pool *p, size_t size, void *stream)
{
    if (size == 0 || size > SIZE_MAX - p->align)
        return false;
    size = (size + p->align - 1) & ~(p->align - 1);
    struct pstream *s = stream_find(p, stream);
    if (best_fit(p, s, size))
        return false;
    if (p->ops.event_record && poll_streams(p) && best_fit(p, s, size))
        return false;
    /* gathering free neighbours could still fit: let the allocation try */
    return !(s && s->fl.bytes + p->ready.bytes >= size);
}

void mb_pool_stats(const struct mb_pool *p, size_t *live, size_t *mapped)
{
    if (live)
        *live = p->live;
    if (mapped)
        *mapped = p->mapped;
}

int mb_pool_new(struct mb_pool **out, const struct mb_pool_ops *ops, void *ctx,
                size_t align, size_t arena_bytes)
{
    if (!out || !ops || !ops->grow || !ops->shrink || align < 256 || (align & (align - 1)) ||
        arena_bytes == 0 || arena_bytes > SIZE_MAX / 2 ||
        (ops->event_record && (!ops->event_query || !ops->event_release)))
        return MB_EINVAL;
    struct mb_pool *p = calloc(1, sizeof *p);
    if (!p)
        return MB_ENOMEM;
    p->ops = *ops;
    p->ctx = ctx;
    p->align = align;
    p->lg_align = lg_floor(align);
    p->arena_bytes = (arena_bytes + align - 1) & ~(align - 1);
    p->hlg = 6;
    p->hash = calloc((size_t)1 << p->hlg, sizeof *p->hash);
    if (!p->hash) {
        free(p);
        return MB_ENOMEM;
    }
    *out = p;
    POOL_CHECK(p);
    return 0;
}

void mb_pool_free(struct mb_pool *p)
{
    if (!p)
        return;
    while (p->streams) {
        struct pstream *s = p->streams;
        while (s->fhead) {
            struct fence *f = s->fhead;
            s->fhead = f->next;
            if (f->ev)
                p->ops.event_release(p->ctx, f->ev);
            free(f);
        }
        p->streams = s->next;
        free(s);
    }
    while (p->arenas) {
        struct arena *a = p->arenas;
        p->arenas = a->next;
        for (struct blk *b = a->first, *nx; b; b = nx) {
            nx = b->anext;
            free(b);
        }
        p->ops.shrink(p->ctx, (void *)a->base, a->bytes);
        free(a);
    }
    while (p->spare) {
        struct blk *b = p->spare;
        p->spare = b->hnext;
        free(b);
    }
    free(p->hash);
    free(p);
}

/* ---- holes ---- */

size_t mb_pool_ready_spans(struct mb_pool *p, size_t min_size, uint64_t min_age, struct mb_pool_span *out,
                           size_t max)
{
    if (p->ops.event_record)
        poll_streams(p);
    size_t n = 0;
    for (int cls = 1; cls >= 0; cls--) {   /* largest first within each class */
        uint32_t lo = bucket_in(p, min_size, cls);
        for (uint32_t k = (uint32_t)(cls + 1) * CLASS_BUCKETS; k-- > lo && n < max;)
            for (const struct blk *b = p->ready.head[k]; b && n < max; b = b->fnext)
                if (b->size >= min_size && p->nalloc - b->since >= min_age)
                    out[n++] = (struct mb_pool_span){ .arena = b->arena->base, .addr = b->addr,
                                                      .size = b->size };
    }
    return n;
}

/* The block of state `state` that holds [addr, addr + size), or NULL. */
static struct blk *block_holding(struct mb_pool *p, uintptr_t addr, size_t size, int state)
{
    for (struct arena *a = p->arenas; a; a = a->next) {
        if (addr < a->base || addr - a->base >= a->bytes)
            continue;
        for (struct blk *b = a->first; b; b = b->anext)
            if (b->addr <= addr && addr - b->addr < b->size)
                return b->state == state && size <= b->size - (addr - b->addr) ? b : NULL;
        return NULL;
    }
    return NULL;
}

int mb_pool_punch(struct mb_pool *p, void *ptr, size_t size)
{
    uintptr_t addr = (uintptr_t)ptr;
    if (!p || size == 0 || ((addr | size) & (p->align - 1)))
        return MB_EINVAL;
    struct blk *b = block_holding(p, addr, size, B_READY);
    if (!b)
        return MB_ENOENT;
    if (b->arena->filling)
        return MB_EBUSY;   /* the owner is laying out one of its holes */
    struct blk *pre = NULL, *post = NULL;
    if ((b->addr < addr && !(pre = blk_get(p))) ||
        (addr + size < b->addr + b->size && !(post = blk_get(p)))) {
        if (pre)
            blk_put(p, pre);
        return MB_ENOMEM;
    }
    fl_remove(&p->ready, b);
    struct arena *a = b->arena;
    if (pre) {   /* [b->addr, addr) stays ready, before the hole */
        *pre = (struct blk){ .addr = b->addr, .size = addr - b->addr, .arena = a, .aprev = b->aprev,
                             .anext = b, .state = B_READY, .since = b->since };
        if (pre->aprev)
            pre->aprev->anext = pre;
        else
            a->first = pre;
        b->aprev = pre;
        fl_insert(p, &p->ready, pre);
    }
    if (post) {  /* and the part after it */
        *post = (struct blk){ .addr = addr + size, .size = b->addr + b->size - (addr + size), .arena = a,
                              .aprev = b, .anext = b->anext, .state = B_READY, .since = b->since };
        if (post->anext)
            post->anext->aprev = post;
        b->anext = post;
        fl_insert(p, &p->ready, post);
    }
    b->addr = addr;
    b->size = size;
    b->state = B_HOLE;
    b->busy = true;
    a->holes += size;
    a->busy++;
    p->mapped -= size;
    POOL_CHECK(p);
    return 0;
}

void mb_pool_punch_end(struct mb_pool *p, void *ptr, bool unmapped)
{
    struct blk *b = block_holding(p, (uintptr_t)ptr, 1, B_HOLE);
    if (!b || !b->busy || b->addr != (uintptr_t)ptr)
        return;
    b->busy = false;
    b->arena->busy--;
    if (!unmapped) {   /* still mapped: free memory again */
        b->arena->holes -= b->size;
        p->mapped += b->size;
        ready_insert(p, b);
    } else {
        hole_merge(p, b);
    }
    POOL_CHECK(p);
}

/* ---- invariants ---- */

static bool flist_is_valid(const struct mb_pool *p, const struct flist *fl,
                           const struct pstream *owner, size_t *count)
{
    size_t n = 0, bytes = 0;
    for (uint32_t k = 0; k < NBUCKETS; k++) {
        bool bit = (fl->map[k / 64] >> (k % 64)) & 1;
        if (bit != (fl->head[k] != NULL))
            return false;
        const struct blk *prev = NULL;
        for (const struct blk *b = fl->head[k]; b; prev = b, b = b->fnext) {
            if (b->fprev != prev || b->bucket != k || bucket_in(p, b->size, b->arena->large) != k)
                return false;
            if (owner ? (b->state != B_PENDING || b->owner != owner) : (b->state != B_READY || b->owner))
                return false;
            n++;
            bytes += b->size;
        }
    }
    for (uint32_t k = NBUCKETS; k < NBWORDS * 64; k++)
        if ((fl->map[k / 64] >> (k % 64)) & 1)
            return false;
    *count += n;
    return n == fl->count && bytes == fl->bytes;
}

static bool compatible(const struct blk *a, const struct blk *b)
{
    return (a->state == B_READY && b->state == B_READY) ||
           (a->state == B_PENDING && b->state == B_PENDING && a->owner == b->owner);
}

bool mb_pool_is_valid(const struct mb_pool *p)
{
    if (!p || !p->hash || p->align < 256 || (p->align & (p->align - 1)) ||
        p->align != ((size_t)1 << p->lg_align))
        return false;
    size_t mapped = 0, live = 0, nlive = 0, nfree = 0, listed = 0;
    for (const struct arena *a = p->arenas; a; a = a->next) {
        if ((a->next && a->next->prev != a) || (!a->prev && p->arenas != a))
            return false;
        if (!a->first || a->first->addr != a->base || a->first->aprev)
            return false;
        uintptr_t at = a->base;
        size_t alive = 0, holes = 0;
        unsigned busy = 0;
        const struct blk *prev = NULL;
        for (const struct blk *b = a->first; b; prev = b, b = b->anext) {
            /* blocks tile the arena exactly, in address order */
            if (b->aprev != prev || b->addr != at || b->arena != a || b->size == 0 ||
                (b->addr | b->size) & (p->align - 1))
                return false;
            if (prev && prev->state != B_LIVE && b->state != B_LIVE && compatible(prev, b))
                return false;                       /* compatible free neighbours are merged */
            if (b->state == B_LIVE) {
                if (hash_find(p, b->addr) != b)
                    return false;
                alive += b->size;
                nlive++;
            } else if (b->state == B_READY || b->state == B_PENDING) {
                if ((b->state == B_PENDING) != (b->owner != NULL))
                    return false;
                nfree++;
            } else if (b->state == B_HOLE) {
                holes += b->size;
                busy += b->busy;
            } else {
                return false;
            }
            at += b->size;
        }
        if (at != a->base + a->bytes || alive != a->live || holes != a->holes || busy != a->busy)
            return false;                           /* live + free + holes == bytes */
        mapped += a->bytes - a->holes;
        live += a->live;
    }
    if (mapped != p->mapped || live != p->live || nlive != p->nlive)
        return false;
    size_t hashed = 0;
    for (size_t i = 0; i < ((size_t)1 << p->hlg); i++)
        for (const struct blk *b = p->hash[i]; b; b = b->hnext) {
            if (b->state != B_LIVE || hash_slot(p->hlg, b->addr) != i)
                return false;
            hashed++;
        }
    if (hashed != p->nlive)
        return false;
    if (!flist_is_valid(p, &p->ready, NULL, &listed))
        return false;
    bool last_seen = p->last == NULL;
    for (const struct pstream *s = p->streams; s; s = s->next) {
        last_seen |= s == p->last;
        if (!flist_is_valid(p, &s->fl, s, &listed))
            return false;
        size_t n = 0;
        const struct blk *prev = NULL;
        for (const struct blk *b = s->ohead; b; prev = b, b = b->onext) {
            if (b->oprev != prev || b->owner != s || b->state != B_PENDING ||
                b->seq > s->open_seq || (prev && prev->seq > b->seq))
                return false;
            n++;
        }
        if (s->otail != prev || n != s->fl.count)
            return false;
        const struct fence *fprev = NULL;
        for (const struct fence *f = s->fhead; f; fprev = f, f = f->next)
            if (f->seq >= s->open_seq || (fprev && fprev->seq >= f->seq) ||
                (!f->ev && (f->ticket == 0 || f->ticket > p->sync_ticket)))
                return false;
        if (s->ftail != fprev)
            return false;
    }
    return last_seen && listed == nfree;
}
