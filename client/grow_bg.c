/* grow_bg.c: the background pass over growable ranges (grow.h, grow_int.h),
 * run by the client's refill thread: what ranges hold past their need goes
 * back (tails idle, reused ranges' excess, freed ranges past the idle cap
 * or their time, cached frames nobody took), tails short of their target
 * are mapped ahead, the closest to a wait first, and spare ranges are
 * made ready for the next allocations; and the trim of every tail. */
#include <stdlib.h>
#include <string.h>

#include "grow_int.h"
#include "log.h"
#include "wire.h"

#define CACHE_STALE_MS 50       /* cached frames past the cache's size go back after this
                                 * (spare ranges are made from the daemon's frames too) */
#define SPARES_PER_PASS 4       /* spare ranges one background pass maps at most */
#define TAILS_PER_PASS 16       /* tails one pass refills at most; the next pass comes at
                                 * once, after what freed meanwhile went back */

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* The size of a spare range: three quarters of the latest allocations'
 * first bytes fit in it (0 before any). g->lock held. */
static size_t spare_size_held(const struct growset *g, size_t unit)
{
    unsigned n = g->n_recent < RECENT ? g->n_recent : RECENT;
    if (!n)
        return 0;
    size_t v[RECENT];
    memcpy(v, g->recent, n * sizeof(v[0]));
    qsort(v, n, sizeof(v[0]), cmp_size);
    return round_unit(v[n * 3 / 4 < n ? n * 3 / 4 : n - 1], unit);
}

/* What the idle ranges may hold for spare ranges to be made: idle_cap's
 * share of the bytes in use (1/64), and of its floor only twice the
 * demand of the last second (demand.h: the largest rise of the bytes in
 * use in a window, what arrivals took that departures had not given
 * back). A small load turning over fast, whose departures free the ranges
 * its arrivals reuse, gets no spares however many allocations it makes;
 * a large or growing one gets idle_cap's. g->lock held. */
static size_t spare_room_held(struct growset *g)
{
    size_t rise2 = 2 * demand_note(&g->dm, g->used, 0, mb_now_ms());
    return (g->used >> AHEAD_SHIFT) + (rise2 < IDLE_FLOOR ? rise2 : IDLE_FLOOR);
}

/* Spare ranges: frames mapped ahead into ready idle ranges of a recent
 * allocation's size, so that the next mb_malloc_growable finds its first
 * bytes mapped: the frames the process caches first, the daemon's frame
 * plan for the rest (large frames: few descriptors, few maps). Only while
 * the idle ranges hold less than spare_room_held, and not near the
 * budget, where a spare's size would rarely fit closely (idle_close). */
static void spares_work(mb_client *c, struct growset *g)
{
    size_t unit = c->frame_bytes;
    for (int k = 0; c->grow_spares && k < SPARES_PER_PASS; k++) {
        pthread_mutex_lock(&g->lock);
        size_t want = spare_size_held(g, unit);
        bool room = want && g->idle_bytes + want <= spare_room_held(g) && g->n_idle < IDLE_MAX &&
                    !fcache_near(c);
        pthread_mutex_unlock(&g->lock);
        if (!room)
            return;
        struct stitched *t = NULL, *s = NULL;
        uint64_t t0 = mb_now_ns();
        if (fl_take(c, want, want, plan_bytes(want, unit), NULL, &t) != 0)
            return;   /* no memory or quota for it now: none made */
        size_t got = t->bytes, n = t->n;
        struct gidle *i = calloc(1, sizeof(*i));
        if (!i || range_new(c, got, &s) != 0) {
            free(i);
            fl_put(c, t->frames, n);
            free(t);
            return;
        }
        memcpy(s->frames, t->frames, n * sizeof(t->frames[0]));
        s->n = n;
        s->bytes = got;
        free(t);
        if (stitch_map(c->be, s, 0, n, 0) != 0) {
            fl_put(c, s->frames, n);
            range_drop(c, s);
            free(i);
            return;
        }
        fl_lock_bg(c);
        c->fst.bytes_mapped += got;
        fl_unlock(c);
        pthread_mutex_lock(&g->lock);
        i->spare = true;
        idle_push_held(g, i, s);
        pthread_mutex_unlock(&g->lock);
        tally(&g->tally[GT_SPARE], got, n, t0);
    }
}

/* Does x's tail want refilling: short, and in use within idle_ms? g->lock
 * held. */
static bool tail_due(const mb_client *c, const struct growable *x, int64_t now, int idle_ms)
{
    return tail_short(c, x) && now - x->last_ms < idle_ms;
}

/* A range due for a refill, and how many of its growth steps its tail
 * still holds: the fewest first. */
struct due {
    void *va;
    size_t steps;
};

static int cmp_due(const void *a, const void *b)
{
    size_t x = ((const struct due *)a)->steps, y = ((const struct due *)b)->steps;
    return x < y ? -1 : x > y;
}

/* Refill the tails due, the closest to a wait first (at most
 * TAILS_PER_PASS): when the driver is the bottleneck, the ranges that would
 * otherwise map on their caller's path are served before those with steps
 * to spare. True when some were left for the next pass. */
static bool refill_tails(mb_client *c, struct growset *g, int64_t now, int idle_ms)
{
    pthread_mutex_lock(&g->lock);
    struct due *due = g->n ? malloc(g->n * sizeof(*due)) : NULL;
    size_t n_due = 0;
    for (size_t i = 0; due && i < g->map.cap && n_due < g->n; i++) {
        struct ptrmap_slot *sl = &g->map.slots[i];
        struct growable *x = sl->key > 1 ? sl->val : NULL;
        if (!x || !tail_due(c, x, now, idle_ms))
            continue;
        size_t step = x->step > c->frame_bytes ? x->step : c->frame_bytes;
        due[n_due++] = (struct due){ x->s->va, (x->s->bytes - x->used) / step };
    }
    if (n_due > 1)
        qsort(due, n_due, sizeof(*due), cmp_due);
    size_t k = 0;
    for (; k < n_due && k < TAILS_PER_PASS; k++) {
        /* Looked up again: it may have been freed or grown meanwhile. */
        struct growable *x = ptrmap_get(&g->map, due[k].va);
        if (!x || !tail_due(c, x, now, idle_ms))
            continue;
        /* Map one target's worth; busy holds off frees and grows of this
         * range meanwhile. */
        struct stitched *s = x->s;
        size_t target = target_of(c, x), room = x->limit - s->bytes;
        x->busy = true;
        pthread_mutex_unlock(&g->lock);
        size_t want = target < room ? target : room;
        uint64_t t0 = mb_now_ns();
        size_t had_n = s->n;
        int rc = map_tail(c, g, x, want, want, NULL, NULL, NULL);
        pthread_mutex_lock(&g->lock);
        x->busy = false;
        pthread_cond_broadcast(&g->not_busy);
        if (rc == 0)
            tally(&g->tally[GT_TAIL], want, s->n - had_n, t0);
        else
            x->last_ms = now - idle_ms;   /* out of memory: leave it until it grows again */
    }
    free(due);
    pthread_mutex_unlock(&g->lock);
    return k < n_due;
}

/* Give back what the ranges hold past their need: tails idle for idle_ms,
 * reused ranges' excess, freed ranges idle for idle_ms or past the idle
 * cap; then cached frames nobody took. */
static void give_back(mb_client *c, struct growset *g, int64_t now, int idle_ms)
{
    pthread_mutex_lock(&g->lock);
    bool tails = g->ahead > 0 || g->idle;   /* idle tails, excess, idle ranges */
    pthread_mutex_unlock(&g->lock);
    if (!tails)
        return;
    /* Tails and freed ranges idle for idle_ms go back: taken under g->lock,
     * unmapped without it, so that grows within their tails go on, and
     * with the frame lock, which callers waiting for it take between one
     * range or tail and the next. */
    fl_lock_bg(c);
    pthread_mutex_lock(&g->lock);
    struct gidle *gone = idle_detach_held(c, g, now, idle_ms);
    struct tail_cut *cuts = g->n ? malloc(g->n * sizeof(*cuts)) : NULL;
    size_t ncut = 0;
    for (size_t i = 0; cuts && i < g->map.cap && ncut < g->n; i++) {
        struct ptrmap_slot *sl = &g->map.slots[i];
        struct growable *x = sl->key > 1 ? sl->val : NULL;
        if (!x || x->busy)
            continue;
        size_t floor = keep_floor(c, x);
        if (x->s->bytes > x->used && now - x->last_ms >= idle_ms)
            ncut += tail_cut_held(g, x, floor, &cuts[ncut]);
        else if (x->s->bytes - x->used > 2 * target_of(c, x)) {   /* a reused range's excess */
            size_t keep = x->used + target_of(c, x);
            ncut += tail_cut_held(g, x, keep > floor ? keep : floor, &cuts[ncut]);
        }
    }
    pthread_mutex_unlock(&g->lock);
    idle_unmap(c, g, gone, true);
    for (size_t i = 0; i < ncut; i++) {
        fl_yield(c);
        tail_unmap(c, g, &cuts[i], false);
    }
    free(cuts);
    /* Their frames went to the frame cache, where new ranges and tails
     * take them whatever their size. Past the cache's usual bytes, frames
     * nobody took within CACHE_STALE_MS go back to the daemon now rather
     * than at the next idle trim. */
    if (c->fc.bytes_cached > c->fc.keep_bytes) {
        uint64_t t0 = mb_now_ns();
        size_t had = c->fc.bytes_cached, had_n = c->fc.n_cached;
        fcache_trim_stale(c, c->fc.keep_bytes, CACHE_STALE_MS);
        tally(&g->tally[GT_STALE], had - c->fc.bytes_cached, had_n - c->fc.n_cached, t0);
    }
    fl_unlock(c);
}

/* One background pass. What the ranges hold past their need goes first:
 * unmapping is the driver's cheaper half, and the frames it puts in the
 * cache feed the tails mapped next without a grant. Then the tails, the
 * closest to a wait first, TAILS_PER_PASS at most, so that ranges freed
 * while the driver is slow do not pile up idle; spare ranges last. True
 * when tails are still due: the next pass should start at once. */
bool grow_work(mb_client *c, struct growset *g, int64_t now, int idle_ms)
{
    give_back(c, g, now, idle_ms);
    bool more = refill_tails(c, g, now, idle_ms);
    spares_work(c, g);
    return more;
}

void grow_trim_held(mb_client *c, struct growset *g)
{
    pthread_mutex_lock(&g->lock);
    g->n_recent = 0;   /* no spare ranges until allocations come again */
    demand_forget(&g->dm, g->used);
    idle_release_held(c, g, 0, -1);
    /* What stays mapped past the sizes in use, and why (debug log). */
    size_t busy = 0, busy_bytes = 0, floored = 0, floor_bytes = 0, left = 0, left_bytes = 0;
    for (size_t i = 0; i < g->map.cap; i++) {
        struct ptrmap_slot *sl = &g->map.slots[i];
        struct growable *x = sl->key > 1 ? sl->val : NULL;
        struct tail_cut cut;
        if (!x || x->s->bytes <= x->used)
            continue;
        if (x->busy) {
            busy++;
            busy_bytes += x->s->bytes - x->used;
            continue;
        }
        size_t keep = keep_floor(c, x);
        if (keep > x->used) {
            floored++;
            floor_bytes += keep - x->used;
        }
        if (tail_cut_held(g, x, keep, &cut))
            tail_unmap(c, g, &cut, true);
        x->last_ms = 0;   /* not refilled until it grows again */
        if (x->s->bytes > keep) {   /* inside a frame that holds used bytes too */
            left++;
            left_bytes += x->s->bytes - keep;
        }
    }
    size_t n_idle = g->n_idle, idle_bytes = g->idle_bytes;
    pthread_mutex_unlock(&g->lock);
    if (busy || floored || left || n_idle)
        mb_log(MB_LOG_DEBUG,
               "growable ranges trimmed: mapped past their sizes still, %zu MiB in %zu ranges "
               "busy mapping, %zu MiB in %zu kept for a former owner's work, %zu MiB in %zu "
               "frames that hold used bytes too; %zu MiB in %zu idle ranges whose work is not "
               "done",
               busy_bytes >> 20, busy, floor_bytes >> 20, floored, left_bytes >> 20, left,
               idle_bytes >> 20, n_idle);
}

