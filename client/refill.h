/* refill.h: the client's background memory work (refill.c): one thread per
 * client, started with the first vspace page pool or growable range, that
 * keeps the pools' free pages above their watermarks, clears vspace table
 * nodes (vsnodes.h), maps the tails of
 * growable ranges ahead of their use, and returns memory left idle for
 * $MOONBRIGHT_IDLE_MS (default 2000 ms). It stops in mb_close.
 *
 * Test hook (any build): $MOONBRIGHT_TEST_REFILL_DELAY_US, read when the
 * thread starts, makes each of its pool refills sleep that long after the
 * extent is mapped and before its pages join the pool, so a test can issue
 * maps while a refill is in flight.
 *
 * Locks: c->flock (fl_lock) before refill->lock; refill->lock is held only to create
 * pools and to sleep or wake the thread. */
#ifndef MB_CLIENT_REFILL_H
#define MB_CLIENT_REFILL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "client.h"

#define REFILL_PAGE_SIZES 6      /* vspace pages: 64 KiB .. 2 MiB */
#define REFILL_TICK_MS 50        /* the thread looks at least this often */

struct pagepool;
struct growset;
struct vsnodes;

struct refill {
    mb_client *c;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t passed;       /* a pass ended (refill_hold waits on it) */
    pthread_t thread;
    bool thread_on, stop, kicked;
    bool in_pass;                /* a background pass runs now */
    int holds;                   /* refill_hold calls not yet released: no pass starts */
    int idle_ms;
    unsigned test_delay_us;      /* $MOONBRIGHT_TEST_REFILL_DELAY_US */
    uint64_t passes;             /* background steps run (tests) */
    uint64_t busy_ns;            /* time spent in them (atomic; mb_stats) */
    struct pagepool *pools[REFILL_PAGE_SIZES];   /* by log2(page_bytes) - 16 */
    struct growset *grow;                        /* growable ranges (grow.c) */
    struct vsnodes *nodes;                       /* vspace table nodes (vsnodes.h) */
};

/* The client's background state, created (and its thread started) on first
 * use. No lock held. */
int refill_get(mb_client *c, struct refill **out);
/* Wake the thread (work is due now). */
void refill_kick(struct refill *r);
/* Stop the thread for good, keeping the pools and ranges (requests still
 * work, with no background step). No lock held. */
void refill_stop(mb_client *c);
/* Stop the thread, return every pool's memory and free every growable
 * range still live. mb_close, before it takes c->lock. */
void refill_close(mb_client *c);
/* Hold the thread between passes: wait for the pass in flight to end, and
 * start none until refill_unhold, so that a trim leaves nothing a pass
 * mapped meanwhile. No lock held (a pass takes c->flock). */
void refill_hold(mb_client *c);
void refill_unhold(mb_client *c);
/* Give back what the pools hold free and the growable tails hold ahead
 * (mb_trim, reclaim). c->lock held. */
void refill_trim_held(mb_client *c);
/* The pools' and growable ranges' figures into st. c->lock held. */
void refill_stats(mb_client *c, mb_client_stats *st);
/* Bytes a trim would give back, from a client's figures (tiers and
 * refill_stats): idle tier bytes and freed growable ranges, free pool
 * pages, growable tails; an upper bound, for the Cache report. */
static inline uint64_t refill_reclaimable(const mb_client_stats *st)
{
    return (uint64_t)st->bytes_idle + st->vspace_free_bytes + st->grow_mapped_ahead;
}
/* Whether the client's refill thread runs now (tests). */
bool refill_running(mb_client *c);

#endif
