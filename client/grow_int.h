/* grow_int.h: what grow.c (growable ranges: their calls, mapping, idle
 * list) and grow_bg.c (the background pass over them) share: the
 * structures, the tail's target, and the helpers the pass calls. Not for
 * other files: grow.h is the layer's interface. */
#ifndef MB_CLIENT_GROW_INT_H
#define MB_CLIENT_GROW_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "client.h"
#include "demand.h"
#include "grow.h"

/* Tail target: used / 2^AHEAD_SHIFT (about 1.6 % of the range), at least
 * TAIL_MIN (half the size used, for ranges under twice that: a small range
 * keeps a tail its own size's order, one unit at least; and no more than
 * TAIL_STEPS growth steps, so ranges that grow by little keep little ahead)
 * and twice the last growth step, in whole units; refilled by one target's
 * worth when it falls under half of it. A range not yet grown caps its
 * floor by the latest step of any range (its hint). */
#define AHEAD_SHIFT 6
#define TAIL_MIN ((size_t)8 << 20)   /* fewer, larger frames: fewer descriptors and grants */
#define TAIL_STEPS 4
#define IDLE_MAX 256            /* idle ranges kept mapped at most */
#define IDLE_FLOOR ((size_t)128 << 20)   /* idle bytes kept past 1/64 of the bytes in use */
#define RESERVE_MIN ((size_t)1 << 30)   /* address space a range reserves at least */
#define RECENT 32               /* allocation sizes a spare range is sized from */

/* Driver work by kind, counted for the log line at close
 * (MOONBRIGHT_LOG=info): how often, how many bytes, how long. */
enum { GT_WAIT, GT_QUEUED, GT_TAIL, GT_SPARE, GT_IDLE, GT_CUT, GT_STALE, GT_N };
struct grow_tally {
    uint64_t n, bytes, ns, frames;
};

void tally(struct grow_tally *t, size_t bytes, size_t frames, uint64_t t0);

/* Where a caller's wait went: logged at debug level when it took more than
 * SLOW_WAIT_MS (MOONBRIGHT_LOG=debug), so that a slow allocation or growth
 * says what it waited for. */
#define SLOW_WAIT_MS 1
struct wait_parts {
    uint64_t busy_ns;            /* for another thread mapping the same range */
    uint64_t behind_ns;          /* for the mapper to come within c->grow_lag jobs */
    uint64_t lock_ns;            /* for the frame lock */
    uint64_t grant_ns;           /* in daemon grants (round trip and imports) */
    uint64_t map_ns;             /* mapping, access grants included */
    size_t cached, granted;      /* frames taken from the cache, and granted */
};

/* A freed range, still mapped: reused once its fence completed (an event
 * recorded on the freeing stream, or a legacy-clock token). */
struct gidle {
    struct stitched *s;
    void *fence;
    void *stream;                /* freed on it (NULL: the legacy default stream) */
    void *prior;                 /* the range's prior fence still pending (see growable) */
    size_t used;                 /* the size its last owner used (what its work may touch) */
    int64_t since_ms;
    bool spare;                  /* mapped ahead by spares_work, not freed by a user */
    /* Freed while mappings of its last owner were still queued (grow_free
     * does not wait for the mapper): that owner's record, which the jobs
     * end on (x->idle, x->s == s); kept until taken or unmapped. NULL
     * otherwise. */
    struct growable *x;
    struct gidle *next;
};

/* Invariants (growable_is_valid): used <= max <= s->reserved, used <=
 * s->bytes <= s->reserved; s->bytes is the sum of s->frames[0..s->n), each
 * a multiple of the unit; busy while one thread maps frames past s->bytes
 * (s->frames[s->n..] are its own) and while jobs are pending; enqueuing
 * and making only while busy (the job may end before map_queue returns);
 * a freed record (idle) busy only while its jobs run. */
struct growable {
    struct stitched *s;
    size_t used;
    size_t max;                  /* the largest size mb_grow accepts (max, in whole units) */
    size_t limit;                /* mapping stops here: max, or the plan of the first
                                  * size if larger (the reservation may be larger still,
                                  * so that the range fits later requests once freed) */
    size_t step;                 /* the last growth (bytes), 0 before the first */
    size_t hint;                 /* any range's latest growth when this one was made */
    int64_t last_ms;             /* last allocation or growth */
    bool busy;
    /* Mappings after mb_grow_async or mb_malloc_growable_async returned:
     * s->frames[.n) and s->bytes already hold them; bytes past `settled`
     * are mapped by the client's mapper thread (async_map.c), in order, as
     * `pending` jobs, the last one seq. The range stays busy until they
     * are done; a stream-ordered growth past s->bytes queues one more
     * (`queuing` while it takes frames), any other waits. `broken`: one
     * failed and the range ended where it had mapped; the jobs after it
     * only return their frames. */
    unsigned pending;
    bool queuing, broken;
    bool enqueuing;              /* map_queue is handing a job to the mapper: seq not set yet */
    bool making;                 /* a call maps it and has not published its size yet: its
                                  * last job leaves it busy (the call clears it) */
    uint32_t seq;
    size_t settled;
    /* Reused in stream order (idle_take) before the work of its last
     * owner completed: that work's fence, on prior_stream; until it
     * completes no byte below prior_used (what that owner used) is
     * unmapped. */
    void *prior, *prior_stream;
    size_t prior_used;
    /* Freed with jobs still pending: on g->idle (a gidle's x), out of the
     * set's map and sums; the next owner that takes the range in stream
     * order takes this record with it. */
    bool idle;
};

/* Guarded by lock (taken after c->lock, never held across a call into the
 * frame layer). Invariants: ahead == sum of s->bytes - used over ranges;
 * dm.low <= used (every change of used is noted). */
struct growset {
    pthread_mutex_t lock;
    pthread_cond_t not_busy;     /* a range stopped being busy */
    struct ptrmap map;           /* va -> struct growable */
    size_t n, used, ahead;
    struct demand dm;            /* used: its rises over the last second, which spare
                                  * ranges follow (grow_bg.c) */
    size_t last_step;            /* the latest growth of any range (bytes) */
    struct gidle *idle;          /* freed ranges still mapped, newest first */
    size_t n_idle, idle_bytes;   /* idle_bytes == sum of their s->bytes */
    uint64_t waits;
    uint64_t queued;             /* mappings of stream-ordered calls left to the mapper */
    uint64_t close_passes;       /* allocations that passed over an idle range holding
                                  * too much past their size (idle_close) */
    uint64_t reuse_kind[3];      /* freed ranges reused, by idle_fit: within, past, short */
    uint64_t reuse_spare, drop_spare, drop_freed;
    uint64_t reuse_ordered;      /* of them, taken in stream order before their fence */
    struct grow_tally tally[GT_N];   /* where the time goes (logged at close) */
    size_t recent[RECENT];       /* the first sizes of the latest allocations (a ring) */
    unsigned n_recent;           /* allocations recorded (the ring's next slot mod RECENT) */
};

bool growable_is_valid(const mb_client *c, const struct growable *x);

#ifdef MB_DEBUG
#define GROW_CHECK(c, x) do { if (!growable_is_valid(c, x)) abort(); } while (0)
#else
#define GROW_CHECK(c, x) ((void)(0 && growable_is_valid(c, x)))
#endif

/* The tail a range of `used` bytes growing by `step` keeps ahead. */
static inline size_t target_for(size_t used, size_t step, size_t hint, size_t unit)
{
    size_t t = used >> AHEAD_SHIFT, floor = used / 2 < TAIL_MIN ? used / 2 : TAIL_MIN;
    size_t by = step ? step : hint;
    if (by && floor > TAIL_STEPS * by)
        floor = TAIL_STEPS * by;
    if (t < 2 * step)
        t = 2 * step;
    if (t < floor)
        t = floor;
    return round_unit(t ? t : 1, unit);
}

static inline size_t target_of(const mb_client *c, const struct growable *x)
{
    return target_for(x->used, x->step, x->hint, c->frame_bytes);
}

/* Is x's tail below half its target, with room left to map and no thread
 * mapping it? g->lock held. */
static inline bool tail_short(const mb_client *c, const struct growable *x)
{
    const struct stitched *s = x->s;
    return !x->busy && s->bytes < x->limit && s->bytes - x->used < target_of(c, x) / 2;
}

/* ---- grow.c's helpers for the background pass ---- */

/* The bytes the frame plan's frames for `bytes` hold. */
size_t plan_bytes(size_t bytes, size_t unit);
/* Frames for `want` bytes (at least `need`), holding at most `room`:
 * cached frames of any size first, the daemon's for the rest. */
int fl_take(mb_client *c, size_t need, size_t want, size_t room, struct wait_parts *w,
            struct stitched **out);
/* Frames taken but not mapped go back. */
void fl_put(mb_client *c, struct cframe **f, size_t n);
/* Map `want` bytes more (at least `need`) at the end of x's range (x
 * busy); see grow.c. */
int map_tail(mb_client *c, struct growset *g, struct growable *x, size_t need, size_t want,
             struct wait_parts *w, void *stream, bool *queued);

/* A tail being unmapped: frames [k, n) of x's range, from offset off on. */
struct tail_cut {
    struct growable *x;
    size_t k, n, off, gone;
};
/* Cut the frames wholly past keep off x's range (x made busy); false when
 * none lies past keep or one is shared. g->lock held. */
bool tail_cut_held(struct growset *g, struct growable *x, size_t keep, struct tail_cut *cut);
/* Unmap a cut's frames into the frame cache (or give them back to the
 * range); then x is no longer busy. fl_lock held; g->lock taken to
 * publish unless `held`. */
void tail_unmap(mb_client *c, struct growset *g, const struct tail_cut *cut, bool held);

/* The bytes of x no unmap may reach below. g->lock held. */
size_t keep_floor(mb_client *c, struct growable *x);
/* Freed ranges kept mapped: at most this many bytes. */
size_t idle_cap(const struct growset *g);
/* s, mapped and free, becomes an idle range. g->lock held. */
void idle_push_held(struct growset *g, struct gidle *i, struct stitched *s);
/* Unlink the idle ranges due to go (see grow.c). g->lock held. */
struct gidle *idle_detach_held(mb_client *c, struct growset *g, int64_t now, int64_t idle_ms);
/* Unmap what idle_detach_held took; fl_lock held (and no other lock with
 * `yield`). */
void idle_unmap(mb_client *c, struct growset *g, struct gidle *gone, bool yield);
/* Both, for idle ranges whose time is up (idle_ms < 0: all). fl_lock and
 * g->lock held. */
void idle_release_held(mb_client *c, struct growset *g, int64_t now, int64_t idle_ms);
/* A new range with nothing mapped, its address space reserved. */
int range_new(mb_client *c, size_t bytes, struct stitched **out);
/* A range range_new made, nothing mapped in it: its address space goes. */
void range_drop(mb_client *c, struct stitched *s);

#endif
