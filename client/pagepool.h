/* pagepool.h: the client's pools of mapped pages for vspaces (pagepool.c),
 * one per page size, owned by the client (refill.h holds them).
 *
 * Glossary
 *   extent   a stitched range of the frame plan's large frames (64 MiB to
 *            1 GiB at the default unit, at most 1/64 of the pages in use
 *            above 64 MiB), mapped once and carved into pages;
 *            a page is an offset into it: no descriptor, no driver call.
 *   low      the low watermark: free pages the background thread keeps
 *            ready, sized from recent demand (twice the largest rise of the
 *            pages held, used or pending, within one 100 ms window of the
 *            last second), at most 1/64 of the pages in use (512 MiB of
 *            pages while the pool is smaller).
 *   pending  pages unmapped on a stream, free once an event recorded after
 *            the invalidation completed.
 *   wait     a take that found fewer free pages than it needed and mapped an
 *            extent itself before returning (counted in mb_stats).
 *
 * Locks: c->lock (frame layer) before pool->lock; pool->lock is never held
 * across a call into the frame layer. */
#ifndef MB_CLIENT_PAGEPOOL_H
#define MB_CLIENT_PAGEPOOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "demand.h"

struct vsnodes;

/* Invariants (pp_extent_is_valid): n_free <= npages; free[0..n_free) are
 * distinct page indices < npages; idle_since_ms != 0 iff n_free == npages. */
struct pp_extent {
    struct stitched *s;          /* the mapped frames; pages at s->va + i * page_bytes */
    uint64_t base;               /* (uint64_t)s->va */
    size_t npages;               /* s->bytes / page_bytes */
    size_t n_free;
    int64_t idle_since_ms;       /* when its last page came back; 0 while any is in use */
    uint32_t *free;              /* stack of free page indices; pops give the lowest first */
};

/* Pages (and with them a destroyed vspace's table nodes) waiting for the
 * events recorded after their last use; evs[0..nev) are those not yet seen
 * complete (none: free now). */
struct pp_pending {
    void **evs;                  /* fences (lclock.c), in the same allocation */
    size_t nev;
    struct vsnodes *nodes_to;    /* nodes[0..nn) go back there with the pages */
    uint64_t *nodes;
    size_t nn;
    size_t n;
    struct pp_pending *next;
    uint64_t pages[];
};

/* Guarded by lock. Invariants (pagepool_is_valid):
 *   n_free + n_pending + n_used == n_total == sum of ext[i]->npages
 *   demand: low <= n_used + n_pending (the pages held now)
 *   n_free == sum of ext[i]->n_free; ext[] sorted by base, not overlapping */
struct pagepool {
    mb_client *c;
    size_t page_bytes;
    pthread_mutex_t lock;
    struct pp_extent **ext;
    size_t n_ext, cap_ext;
    size_t first_free;           /* no extent below this index has a free page */
    size_t n_free, n_pending, n_used, n_total;
    struct pp_pending *pending;
    struct demand dm;            /* the pages held (used or pending): their rises */
    size_t low;                  /* low watermark, pages */
    int growers;                 /* grows in flight (frame layer calls outside the lock) */
    pthread_cond_t grown;        /* a grow ended (growers fell) */
    int64_t retry_ms;            /* no background refill before this (after a failure) */
    uint64_t trims;              /* pagepool_trim_held calls (a refill racing one gives its
                                  * extent back) */
    uint64_t waits;              /* takes that had to map an extent first */
    uint64_t extents_mapped;     /* extents mapped over the pool's life */
};

/* The pool of page_bytes pages of c, created on first use. */
int pagepool_get(mb_client *c, size_t page_bytes, struct pagepool **out);
/* n free pages into out[] (lowest address first among those popped);
 * maps an extent first when too few are free (a wait). No lock held. */
int pagepool_take(struct pagepool *p, size_t n, uint64_t *out);
/* Map extents until at least n pages are free (mb_vspace_prepare); not a
 * wait, and no demand is noted. */
int pagepool_prepare(struct pagepool *p, size_t n);
/* Pages whose last use completed go back. */
void pagepool_give(struct pagepool *p, const uint64_t *pages, size_t n);
/* Pages unmapped on stream: free once the work enqueued so far completed. */
void pagepool_defer(struct pagepool *p, const uint64_t *pages, size_t n, void *stream);
/* A destroyed vspace's pages and table nodes: free (the nodes to `to`)
 * once every one of evs (owned from now on) completed. Never waits; on
 * failure nothing is taken and the caller still owns the events. */
int pagepool_retire(struct pagepool *p, const uint64_t *pages, size_t n, void *const *evs,
                    size_t nev, struct vsnodes *to, const uint64_t *nodes, size_t nn);
/* Whether page is a page of p (an extent's, at a page boundary). */
bool pagepool_owns(struct pagepool *p, uint64_t page);

/* For refill.c. The background step of one pool at now_ms: pending pages
 * back, refill by one extent towards the watermark, idle extents returned;
 * delay_us: the refill test hook (refill.h). Returns true when the extent
 * was mapped and the pool is still under its watermark (run again now). */
bool pagepool_work(struct pagepool *p, int64_t now_ms, int idle_ms, unsigned delay_us);
/* Whether a take left the pool under its watermark (the thread should run). */
bool pagepool_needs_refill(struct pagepool *p);
/* Return every extent whose pages are all free (c->lock held). */
void pagepool_trim_held(struct pagepool *p);
/* Wait for pending pages, return every extent, free p. No lock held. */
void pagepool_free(struct pagepool *p);
void pagepool_stats(struct pagepool *p, mb_client_stats *st);
bool pagepool_is_valid(struct pagepool *p);

#endif
