/* grow.c: growable ranges (grow.h): one reserved range per allocation whose
 * mapped tail runs ahead of the size in use, so that mb_grow is
 * bookkeeping; the calls (allocate, grow, free, find), their frames
 * (cached frames of any size first, else the frame plan's large frames),
 * mapping on the caller's path or, in stream order, by the mapper thread;
 * freed ranges kept mapped (idle) and handed to the next allocation that
 * fits, once the work before their free completed; the set's life and
 * counts. The background pass that keeps tails ahead and gives back what
 * ranges hold past their need is grow_bg.c; what both share, grow_int.h. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "async_map.h"
#include "frame_plan.h"
#include "grow_int.h"
#include "log.h"
#include "refill.h"
#include "wire.h"

/* The kinds of driver work, as logged at close. */
static const char *const gt_name[GT_N] = {
    "maps on the caller's path", "maps queued for a stream", "tails mapped ahead",
    "spare ranges mapped",
    "idle ranges unmapped", "tails cut", "stale cached frames returned",
};

void tally(struct grow_tally *t, size_t bytes, size_t frames, uint64_t t0)
{
    __atomic_fetch_add(&t->n, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&t->frames, frames, __ATOMIC_RELAXED);
    __atomic_fetch_add(&t->bytes, bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&t->ns, mb_now_ns() - t0, __ATOMIC_RELAXED);
}

static void wait_log(const char *what, size_t bytes, uint64_t t0, const struct wait_parts *w)
{
    uint64_t ns = mb_now_ns() - t0;
    if (ns < (uint64_t)SLOW_WAIT_MS * 1000000 || mb_log_level() < MB_LOG_DEBUG)
        return;
    mb_log(MB_LOG_DEBUG,
           "%s to %zu MiB waited %.2f ms: %.2f for the range's refill, %.2f for the mapper's "
           "queue, %.2f for the frame lock, %.2f in grants of %zu frames, %.2f mapping %zu frames",
           what, bytes >> 20, ns / 1e6, w->busy_ns / 1e6, w->behind_ns / 1e6, w->lock_ns / 1e6,
           w->grant_ns / 1e6, w->granted, w->map_ns / 1e6, w->cached + w->granted);
}

/* The frame lock for a caller's path (w: its wait, timed) ahead of the
 * background thread, or for the background thread (w NULL). */
static void fl_lock_for(mb_client *c, struct wait_parts *w)
{
    if (!w) {
        fl_lock_bg(c);
        return;
    }
    uint64_t t0 = mb_now_ns();
    fl_lock_caller(c);
    w->lock_ns += mb_now_ns() - t0;
}

/* The invariants written at struct growable (grow_int.h). */
bool growable_is_valid(const mb_client *c, const struct growable *x)
{
    const struct stitched *s = x->s;
    size_t sum = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->frames[i]->mem.bytes % c->frame_bytes)
            return false;
        sum += s->frames[i]->mem.bytes;
    }
    return sum == s->bytes && x->used <= s->bytes && s->bytes <= s->reserved && s->n <= s->cap &&
           x->used <= x->max && x->max <= x->limit && x->limit <= s->reserved &&
           (!x->pending || (x->busy && x->settled <= s->bytes)) && (!x->queuing || x->busy) &&
           (!x->broken || x->pending || x->queuing) && (!x->enqueuing || x->busy) &&
           (!x->making || x->busy) &&
           (!x->idle || x->pending || !x->busy);
}

/* g->used changed: its demand (g->dm) notes it (and checks, in debug
 * builds, the invariant at struct growset). g->lock held. */
static void note_used(struct growset *g)
{
    demand_note(&g->dm, g->used, 0, mb_now_ms());
#ifdef MB_DEBUG
    if (!demand_is_valid(&g->dm, g->used))
        abort();
#endif
}

/* ---- the frame layer: every call grow.c makes into it ---- */

/* The bytes the frame plan's frames for `bytes` hold. */
size_t plan_bytes(size_t bytes, size_t unit)
{
    uint64_t covered = 0;
    mb_frame_plan(bytes, unit, MB_MAX_ORDER, NULL, 0, &covered);
    return (size_t)covered;
}

/* Frames from the daemon for `want` bytes (at least `need`), holding at
 * most `room`: the frame plan's for want, or else for need, when they fit
 * and large frames are on; else the exact plan's for need (ranges of 128
 * MiB and more, where the plan rounds past the room), or order-0 frames
 * with large frames off. Into (*out)->frames[0..n). fl_lock
 * held. */
static int fl_grant(mb_client *c, size_t need, size_t want, size_t room, struct stitched **out)
{
    size_t unit = c->frame_bytes, bytes = 0;   /* plan frames for bytes, when they fit */
    if (c->large_frames)
        bytes = plan_bytes(want, unit) <= room ? want : plan_bytes(need, unit) <= room ? need : 0;
    if (bytes)
        return stitch_take_large(c, bytes, out);
    size_t n = round_unit(need, unit) / unit;
    if (n * unit > room)
        return MB_EINVAL;
    return c->large_frames && n > 1 ? stitch_take_exact(c, n * unit, out) : stitch_take_units(c, n, out);
}

/* Frames for `want` bytes (at least `need`), holding at most `room`:
 * cached frames of any size first (a range maps its frames one after the
 * other at unit boundaries, whatever their sizes), with no round trip when
 * they hold need; the daemon's (fl_grant) for the rest. */
#define TAKE_CACHED_MAX 64
int fl_take(mb_client *c, size_t need, size_t want, size_t room, struct wait_parts *w,
                   struct stitched **out)
{
    struct cframe *cached[TAKE_CACHED_MAX];
    size_t got = 0;
    fl_lock_for(c, w);
    size_t k = fcache_take_within(c, want < room ? want : room, cached, TAKE_CACHED_MAX, &got);
    if (got < need) {
        /* Cached frames larger than wanted still beat a grant: the process
         * holds them already. */
        size_t more = 0;
        k += fcache_take_cover(c, need - got, room - got, cached + k, TAKE_CACHED_MAX - k, &more);
        got += more;
    }
    struct stitched *t = NULL;
    int rc = 0;
    if (got < need) {
        uint64_t t0 = w ? mb_now_ns() : 0;
        /* The background thread's grants let go of the frame lock (no other
         * lock is held here), so that requests take cached frames meanwhile;
         * a request's own grant keeps it, so that the background thread does
         * not map beside it (measured on an H100: letting go there too put
         * more of grow's waits over 2 ms, in grants). */
        bool was = fcache_grant_unlocks(w == NULL);
        rc = fl_grant(c, need - got, want - got, room - got, &t);
        fcache_grant_unlocks(was);
        if (w) {
            w->grant_ns += mb_now_ns() - t0;
            w->granted += t ? t->n : 0;
        }
    }
    if (w)
        w->cached += k;
    struct stitched *m = rc == 0 ? stitch_new(k + (t ? t->n : 0)) : NULL;
    if (rc == 0 && !m)
        rc = MB_ENOMEM;
    /* The cached frames first, then the granted ones (or all back). */
    for (size_t i = 0; i < k; i++) {
        if (m)
            stitch_push(m, cached[i]);
        else
            fcache_put(c, cached[i]);
    }
    for (size_t i = 0; t && i < t->n; i++) {
        if (m)
            stitch_push(m, t->frames[i]);
        else
            fcache_put(c, t->frames[i]);
    }
    free(t);
    fl_unlock(c);
    if (rc == 0)
        *out = m;
    return rc;
}

/* Frames taken but not mapped go back. */
void fl_put(mb_client *c, struct cframe **f, size_t n)
{
    fl_lock(c);
    for (size_t i = 0; i < n; i++)
        fcache_put(c, f[i]);
    fl_unlock(c);
}

/* A tail mapped on the mapper thread: t's frames (t->va is the range's)
 * at offset from of x's range, published there as s->frames[from_n..). */
struct grow_job {
    mb_client *c;
    struct growset *g;
    struct growable *x;
    struct stitched *t;
    size_t from_n, from;
};

/* The mapper thread's half of map_queue: map, then count it settled; the
 * last job of a range makes it no longer busy. When the mapping fails (or
 * fail, a test hook), the frames go back to the cache and the range ends
 * where it was mapped, its used size too, so that an access past it faults
 * instead of reaching memory the range does not hold; the jobs queued
 * after it (broken) return their frames. The first failure is sticky
 * (async_map.c). */
static int grow_job_run(void *arg, bool fail)
{
    struct grow_job *j = arg;
    mb_client *c = j->c;
    struct growset *g = j->g;
    struct growable *x = j->x;
    struct stitched *s = x->s, *t = j->t;
    char *va = s->va;   /* (s may be unmapped once its last job ended, if idle) */
    pthread_mutex_lock(&g->lock);
    bool skip = x->broken;   /* set only by this thread: stable while it runs */
    pthread_mutex_unlock(&g->lock);
    uint64_t t0 = mb_now_ns();
    int rc = skip ? MB_EBACKEND
         : fail ? MB_EBACKEND
                : stitch_map(c->be, t, 0, t->n, j->from);
    if (!skip)
        tally(&g->tally[GT_QUEUED], t->bytes, t->n, t0);
    fl_lock_caller(c);
    if (rc == 0) {
        c->fst.bytes_mapped += t->bytes;
    } else {
        for (size_t i = 0; i < t->n; i++)
            fcache_put(c, t->frames[i]);
    }
    pthread_mutex_lock(&g->lock);
    if (rc == 0) {
        x->settled = j->from + t->bytes;
    } else if (!skip) {
        size_t ahead_was = s->bytes - x->used, bytes_was = s->bytes;
        s->n = j->from_n;
        s->bytes = j->from;
        if (x->idle) {   /* freed: counted among the idle bytes, not the set's */
            g->idle_bytes -= bytes_was - s->bytes;
            if (x->used > s->bytes)
                x->used = s->bytes;
        } else {
            if (x->used > s->bytes) {
                g->used -= x->used - s->bytes;
                x->used = s->bytes;
                note_used(g);
            }
            g->ahead = g->ahead - ahead_was + (s->bytes - x->used);
        }
        x->settled = s->bytes;
        x->broken = true;
    }
    if (--x->pending == 0 && !x->queuing && !x->making) {   /* (else the calling thread does) */
        x->broken = false;
        x->busy = false;
    }
    pthread_cond_broadcast(&g->not_busy);
    GROW_CHECK(c, x);
    pthread_mutex_unlock(&g->lock);
    fl_unlock(c);
    if (rc != 0 && !skip)
        mb_log(MB_LOG_ERR, "failed to map %zu bytes at %p after a stream-ordered growth returned: "
                           "%s; the range ends at %zu bytes, the next call reports the error",
               t->bytes, va + j->from, fail ? "injected failure" : mb_strerror(rc), j->from);
    free(t);
    free(j);
    return skip ? 0 : rc;
}

/* The error of a queued mapping that failed before its call returned. */
static int queued_failure(mb_client *c)
{
    int e = amap_take_error(c);
    return e ? e : MB_EBACKEND;
}

/* Hand t's frames, taken for the end of x's range, to the mapper thread
 * with stream gated behind them: published at once (x pending, and busy
 * until its jobs are done), behind the jobs x has queued already. The job
 * owns t then. MB_ENOENT, or the driver's error, when the stream cannot be
 * gated. x is busy. */
static int map_queue(mb_client *c, struct growset *g, struct growable *x, struct stitched *t,
                     void *stream)
{
    struct stitched *s = x->s;
    struct grow_job *j = malloc(sizeof(*j));
    if (!j)
        return MB_ENOMEM;
    pthread_mutex_lock(&g->lock);
    int rc = x->broken ? MB_EBACKEND
           : s->n + t->n > s->cap || t->bytes > x->limit - s->bytes ? MB_EPROTO : 0;
    if (rc == 0) {
        *j = (struct grow_job){ c, g, x, t, s->n, s->bytes };
        t->va = s->va;
        memcpy(s->frames + s->n, t->frames, t->n * sizeof(t->frames[0]));
        if (!x->pending)
            x->settled = s->bytes;
        /* Published before the job can run: it may finish at once. */
        s->n += t->n;
        s->bytes += t->bytes;
        g->ahead += t->bytes;
        x->pending++;
        x->enqueuing = true;
    }
    pthread_mutex_unlock(&g->lock);
    if (rc != 0) {
        free(j);
        return rc;
    }
    /* Queued without g->lock, which the job takes: gating the stream may
     * block until the mapper has run earlier jobs. */
    uint32_t seq;
    rc = amap_run_async(c, stream, grow_job_run, j, &seq);
    pthread_mutex_lock(&g->lock);
    if (rc == 0) {
        x->seq = seq;
    } else {   /* never queued */
        s->n -= t->n;
        s->bytes -= t->bytes;
        g->ahead -= t->bytes;
        x->pending--;
        free(j);
    }
    x->enqueuing = false;
    pthread_cond_broadcast(&g->not_busy);
    pthread_mutex_unlock(&g->lock);
    return rc;
}

/* Map `want` bytes more (at least `need`, at most the room left) at the
 * end of x's range; x is busy (this thread alone maps it). The range's new
 * frames are published under c->lock and g->lock. With `queued`, on a
 * backend that gates streams: the frames are taken now (so that quota and
 * out-of-memory are errors of this call) and mapped by the mapper thread,
 * stream gated behind them (map_queue); *queued says so, and x stays busy
 * until the mapper is done. */
int map_tail(mb_client *c, struct growset *g, struct growable *x, size_t need, size_t want,
                    struct wait_parts *w, void *stream, bool *queued)
{
    struct stitched *s = x->s, *t;
    size_t room = x->limit > s->bytes ? x->limit - s->bytes : 0;
    if (queued) {
        /* Not ahead of the mapper by more than c->grow_lag jobs, before
         * taking frames for one more: what is queued holds its frames. */
        uint64_t t0 = w ? mb_now_ns() : 0;
        amap_throttle(c, c->grow_lag);
        if (w)
            w->behind_ns += mb_now_ns() - t0;
    }
    int rc = fl_take(c, need, want, room, w, &t);
    if (rc)
        return rc;
    if (queued) {
        rc = map_queue(c, g, x, t, stream);
        if (rc == 0) {
            *queued = true;
            return 0;
        }
        if (x->queuing) {   /* behind jobs of its own: never mapped here */
            fl_put(c, t->frames, t->n);
            free(t);
            return rc;
        }
    }
    /* Largest first would break the order of a range already mapped;
     * frames are mapped in the order taken, each at a unit boundary. */
    uint64_t t0 = w ? mb_now_ns() : 0;
    rc = stitch_map_after(c->be, s, t);
    if (w)
        w->map_ns += mb_now_ns() - t0;
    if (rc) {
        fl_put(c, t->frames, t->n);
        free(t);
        return rc;
    }
    fl_lock_for(c, w);
    pthread_mutex_lock(&g->lock);
    s->n += t->n;
    s->bytes += t->bytes;
    g->ahead += t->bytes;
    pthread_mutex_unlock(&g->lock);
    c->fst.bytes_mapped += t->bytes;
    fl_unlock(c);
    free(t);
    return 0;
}

/* Cut the frames lying wholly past keep (>= x->used) off x's range for
 * tail_unmap: x made busy, its bytes and g->ahead lowered (a grow past them
 * waits for the unmap). False when none lies past keep or one is shared
 * with another process (never cached here). g->lock held. */
bool tail_cut_held(struct growset *g, struct growable *x, size_t keep, struct tail_cut *cut)
{
    struct stitched *s = x->s;
    size_t k = 0, off = 0;
    while (k < s->n && off < keep)
        off += s->frames[k++]->mem.bytes;
    if (k == s->n)
        return false;
    for (size_t i = k; i < s->n; i++)
        if (s->frames[i]->exported)
            return false;
    *cut = (struct tail_cut){ x, k, s->n, off, s->bytes - off };
    x->busy = true;
    s->n = k;
    s->bytes = off;
    g->ahead -= cut->gone;
    return true;
}

/* Unmap a cut's frames into the frame cache, or hand them back to the
 * range when the unmap fails; then x is no longer busy. fl_lock held;
 * g->lock taken to publish unless `held`. */
void tail_unmap(mb_client *c, struct growset *g, const struct tail_cut *cut, bool held)
{
    struct growable *x = cut->x;
    struct stitched *s = x->s;
    uint64_t t0 = mb_now_ns();
    bool ok = stitch_unmap_frames(c->be, s, cut->k, cut->n, cut->off) == 0;
    tally(&g->tally[GT_CUT], cut->gone, cut->n - cut->k, t0);
    if (ok) {
        for (size_t i = cut->k; i < cut->n; i++)
            fcache_put(c, s->frames[i]);
        c->fst.bytes_mapped -= cut->gone;
    }
    if (!held)
        pthread_mutex_lock(&g->lock);
    if (!ok) {   /* still mapped: the range keeps it */
        s->n = cut->n;
        s->bytes = cut->off + cut->gone;
        g->ahead += cut->gone;
    }
    x->busy = false;
    pthread_cond_broadcast(&g->not_busy);
    GROW_CHECK(c, x);
    if (!held)
        pthread_mutex_unlock(&g->lock);
}

/* ---- the set ---- */

static int set_of(mb_client *c, bool create, struct growset **out)
{
    struct refill *r = __atomic_load_n(&c->refill, __ATOMIC_ACQUIRE);
    if (!r && !create)
        return MB_ENOENT;
    int rc = r ? 0 : refill_get(c, &r);
    if (rc)
        return rc;
    if (!r->grow)
        return MB_ENOENT;
    *out = r->grow;
    return 0;
}

struct growset *growset_new(void)
{
    struct growset *g = calloc(1, sizeof(*g));
    if (g) {
        pthread_mutex_init(&g->lock, NULL);
        pthread_cond_init(&g->not_busy, NULL);
        demand_init(&g->dm, 0, mb_now_ms());
    }
    return g;
}

/* ---- idle ranges ---- */

static int fence_done(mb_client *c, void *fence) { return lclock_fence_query(&c->lclk, c->be, fence); }

static void fence_drop(mb_client *c, void *fence) { lclock_fence_drop(c->be, fence); }

/* Has the fence at *f completed (or is there none)? Dropped once it has. */
static bool fence_settled(mb_client *c, void **f)
{
    if (!*f)
        return true;
    if (fence_done(c, *f) != 1)
        return false;
    fence_drop(c, *f);
    *f = NULL;
    return true;
}

/* Wait on the host until the fence at *f completes (dropped then): only
 * where no record could keep it for later (out of memory, no fence). */
static void fence_wait(mb_client *c, void **f)
{
    while (!fence_settled(c, f)) {
        struct timespec ts = { 0, 100 * 1000 };
        nanosleep(&ts, NULL);
    }
}

/* The bytes of x no unmap may reach below: its used size, and while a
 * former owner's work is pending (reused in stream order) what that owner
 * used. g->lock held. */
size_t keep_floor(mb_client *c, struct growable *x)
{
    return fence_settled(c, &x->prior) || x->prior_used < x->used ? x->used : x->prior_used;
}

/* Does anything still use x's range (being freed or given up): its
 * mappings still queued, or a former owner's work not done? */
static bool still_used(mb_client *c, struct growset *g, struct growable *x)
{
    pthread_mutex_lock(&g->lock);
    bool jobs = x->pending > 0;
    pthread_mutex_unlock(&g->lock);
    return jobs || !fence_settled(c, &x->prior);
}

/* How well an idle range of `bytes` mapped serves a range used up to
 * `size` that may map up to `limit`: 0 best. A range holding size within
 * limit needs nothing; one mapped past limit needs its excess unmapped by
 * the background thread; one short of size maps the rest on the caller's
 * path. Smaller is better within each kind. */
static unsigned idle_fit(size_t bytes, size_t size, size_t limit)
{
    return bytes >= size ? (bytes <= limit ? 0 : 1) : 2;
}

static bool idle_better(size_t b, size_t best, size_t size, size_t limit)
{
    unsigned kb = idle_fit(b, size, limit), kbest = idle_fit(best, size, limit);
    if (kb != kbest)
        return kb < kbest;
    return kb == 2 ? b > best : b < best;   /* short: the most mapped; else the least */
}

/* May idle range s serve a range used up to `size` with `target` ahead?
 * Not when the bytes it would keep mapped past size + target exceed
 * another target: frames go back whole, so once its excess is cut
 * (give_back) the frame that holds size + target stays entire, and a
 * large one strands its excess for the new owner's whole life (a range of
 * one 256 MiB frame reused for 146 MiB holds 110 MiB it can never use:
 * such reuses held 5-6 GiB of the 8 GiB mapped ahead at the peak of the
 * conversation replay at compression 32, on the host backend). */
static bool idle_close(const struct stitched *s, size_t size, size_t target)
{
    size_t keep = size + target, off = 0;
    if (s->bytes <= keep + target)
        return true;
    for (size_t k = 0; k < s->n && off < keep; k++)
        off += s->frames[k]->mem.bytes;
    return off <= keep + target;
}

/* Are the jobs of idle range i's last owner still pending? g->lock held. */
static bool idle_pending(const struct gidle *i)
{
    return i->x && i->x->pending;
}

/* The idle range to reuse for a range of `need_res` reserved bytes used
 * up to `size`, mapping up to `limit`: reserved enough, the best by
 * idle_better, and done: its fence completed and its mappings too, or,
 * for a stream-ordered allocation (async), freed on the same stream (the
 * work that may still use it runs before the work the new owner enqueues
 * there; mappings still queued end on the record *xo, which the new owner
 * then becomes). Unlinked; g->lock held. */
static struct stitched *idle_take(mb_client *c, struct growset *g, size_t need_res, size_t limit,
                                  size_t size, size_t target, bool async, void *stream,
                                  void **prior, size_t *prior_used, struct growable **xo)
{
    struct gidle **best = NULL;
    bool best_ordered = false, passed = false;
    *xo = NULL;
    for (struct gidle **pp = &g->idle; *pp; pp = &(*pp)->next) {
        struct gidle *i = *pp;
        if (i->s->reserved < need_res)
            continue;
        if (best && !idle_better(i->s->bytes, (*best)->s->bytes, size, limit))
            continue;
        if (!fence_settled(c, &i->prior))
            continue;
        bool ordered = async && !i->spare && i->stream == stream;
        if (idle_pending(i) && !(ordered && !i->x->broken))
            continue;
        bool done = fence_done(c, i->fence) == 1;
        if (!done && !ordered)
            continue;
        if (i->s->bytes >= size && !idle_close(i->s, size, target)) {
            passed = true;   /* it would have been taken */
            continue;
        }
        best = pp;
        best_ordered = !done;
    }
    g->close_passes += passed;
    if (!best)
        return NULL;
    struct gidle *i = *best;
    *best = i->next;
    struct stitched *s = i->s;
    if (idle_pending(i))
        *xo = i->x;
    else
        free(i->x);   /* its jobs ended (under g->lock): nobody holds it */
    g->reuse_kind[idle_fit(s->bytes, size, limit)]++;
    g->reuse_spare += i->spare;
    g->reuse_ordered += best_ordered;
    g->n_idle--;
    g->idle_bytes -= s->bytes;
    if (best_ordered) {
        *prior = i->fence;   /* the new owner keeps it */
        *prior_used = i->used;
    } else
        fence_drop(c, i->fence);
    free(i);
    return s;
}

/* s, mapped and free, becomes an idle range (i's fence set or NULL).
 * g->lock held. */
void idle_push_held(struct growset *g, struct gidle *i, struct stitched *s)
{
    i->s = s;
    i->since_ms = mb_now_ms();
    i->next = g->idle;
    g->idle = i;
    g->n_idle++;
    g->idle_bytes += s->bytes;
}

/* Freed ranges kept mapped: at most this many bytes (1/64 of the bytes in
 * use, and IDLE_FLOOR besides), the rest unmapped by the background
 * thread. */
size_t idle_cap(const struct growset *g) { return (g->used >> AHEAD_SHIFT) + IDLE_FLOOR; }

/* Unlink idle ranges whose fence and mappings completed: all (idle_ms <
 * 0), those idle since before now - idle_ms, and more while they hold
 * more than idle_cap. g->lock held. */
struct gidle *idle_detach_held(mb_client *c, struct growset *g, int64_t now, int64_t idle_ms)
{
    struct gidle *gone = NULL;
    for (struct gidle **pp = &g->idle; *pp;) {
        struct gidle *i = *pp;
        bool due = idle_ms < 0 || now - i->since_ms >= idle_ms || g->idle_bytes > idle_cap(g);
        if (!due || idle_pending(i) || fence_done(c, i->fence) != 1 ||
            !fence_settled(c, &i->prior)) {
            pp = &i->next;
            continue;
        }
        *pp = i->next;
        g->n_idle--;
        g->idle_bytes -= i->s->bytes;
        if (i->spare)
            g->drop_spare++;
        else
            g->drop_freed++;
        fence_drop(c, i->fence);
        i->next = gone;
        gone = i;
    }
    return gone;
}

/* Unmap the ranges idle_detach_held took; fl_lock held, and with `yield`
 * no other lock: waiting callers take the frame lock between ranges
 * (fl_yield), each range's frames already in the cache. */
void idle_unmap(mb_client *c, struct growset *g, struct gidle *gone, bool yield)
{
    while (gone) {
        if (yield)
            fl_yield(c);
        struct gidle *i = gone;
        gone = i->next;
        uint64_t t0 = mb_now_ns();
        size_t bytes = i->s->bytes, nf = i->s->n;
        int rc = stitch_free(c, i->s, NULL);
        tally(&g->tally[GT_IDLE], bytes, nf, t0);
        if (rc != 0)
            mb_log(MB_LOG_ERR, "failed to unmap an idle growable range at %p", i->s->va);
        free(i->x);
        free(i);
    }
}

void idle_release_held(mb_client *c, struct growset *g, int64_t now, int64_t idle_ms)
{
    idle_unmap(c, g, idle_detach_held(c, g, now, idle_ms), false);
}

static size_t pow2_at_least(size_t x)
{
    size_t p = 1;
    while (p < x && p <= SIZE_MAX / 2)
        p <<= 1;
    return p < x ? x : p;
}

/* A new range with nothing mapped, its address space reserved for `bytes`
 * to a power of two of RESERVE_MIN at least, so that it fits many later
 * requests once freed. */
int range_new(mb_client *c, size_t bytes, struct stitched **out)
{
    size_t unit = c->frame_bytes;
    size_t reserved = pow2_at_least(bytes > RESERVE_MIN ? bytes : RESERVE_MIN);
    struct stitched *s = malloc(sizeof(*s) + reserved / unit * sizeof(s->frames[0]));
    if (!s)
        return MB_ENOMEM;
    s->n = 0;
    s->cap = reserved / unit;
    s->bytes = 0;
    s->reserved = reserved;
    s->imported = false;
    s->mapped_async = false;
    s->holes = 0;
    int rc = c->be->ops->reserve(c->be, reserved, &s->va);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* A range range_new made, nothing mapped in it: its address space goes. */
void range_drop(mb_client *c, struct stitched *s)
{
    c->be->ops->free_va(c->be, s->va, s->reserved);
    free(s);
}

int grow_alloc(mb_client *c, size_t size, size_t max, void *stream, bool async, void **ptr)
{
    size_t unit = c->frame_bytes;
    if (size == 0 || max < size || max > SIZE_MAX / 4)
        return MB_EINVAL;
    struct growset *g;
    int rc = set_of(c, true, &g);
    if (rc)
        return rc;
    /* Room for max, and for the plan of size (which may round up). */
    size_t need_res = round_unit(max, unit), planned = plan_bytes(size, unit);
    if (need_res < planned)
        need_res = planned;
    struct growable *x = calloc(1, sizeof(*x));
    if (!x)
        return MB_ENOMEM;
    x->max = round_unit(max, unit);
    x->limit = need_res;
    x->last_ms = mb_now_ms();
    x->hint = __atomic_load_n(&g->last_step, __ATOMIC_RELAXED);
    x->busy = true;   /* until its first bytes are mapped (or queued) */
    /* The first bytes and a tail ahead of them. */
    size_t target = target_for(size, 0, x->hint, unit), first = size + target;
    /* A freed range that fits is reused, mapped as it is. */
    pthread_mutex_lock(&g->lock);
    g->recent[g->n_recent++ % RECENT] = first;
    struct stitched *s = NULL;
    struct growable *xo = NULL;
    if (g->idle)
        s = idle_take(c, g, need_res, x->limit, size, target, async, stream, &x->prior,
                      &x->prior_used, &xo);
    if (xo) {
        /* Its former owner's mappings are still queued and end on its
         * record: this range becomes that record (busy while they run). */
        xo->used = xo->step = 0;
        xo->max = x->max;
        xo->limit = x->limit;
        xo->last_ms = x->last_ms;
        xo->hint = x->hint;
        xo->prior = x->prior;
        xo->prior_used = x->prior_used;
        xo->idle = false;
        free(x);
        x = xo;
    }
    x->prior_stream = stream;
    x->making = true;   /* busy until this call publishes its size */
    if (s)
        g->ahead += s->bytes;   /* counted as used below */
    pthread_mutex_unlock(&g->lock);
    /* Work enqueued on stream from now on runs after the mappings queued
     * (they may have gated another stream only); a synchronous wait for
     * them where the stream cannot be gated. */
    if (xo && amap_gate(c, stream, xo->seq) != 0) {
        pthread_mutex_lock(&g->lock);
        while (x->pending)
            pthread_cond_wait(&g->not_busy, &g->lock);
        pthread_mutex_unlock(&g->lock);
    }
    bool reused = s != NULL;
    if (!s && (rc = range_new(c, need_res, &s)) != 0) {
        free(x);
        return rc;
    }
    if (!xo)
        x->s = s;   /* (an adopted record has it: its jobs read it) */
    /* Published busy, used 0: the caller has not the pointer yet, and the
     * background thread and trims leave busy ranges alone; a mapping
     * queued below may end (and fail) before this call does. */
    pthread_mutex_lock(&g->lock);
    rc = ptrmap_put(&g->map, s->va, x);
    g->n += rc == 0;
    pthread_mutex_unlock(&g->lock);
    bool waited = rc == 0 && s->bytes < size, queued = false;   /* mapped on this call */
    if (waited && xo) {   /* behind its jobs: they must not end its busy state meanwhile */
        pthread_mutex_lock(&g->lock);
        x->queuing = true;
        pthread_mutex_unlock(&g->lock);
    }
    if (waited) {
        uint64_t t0 = mb_now_ns();
        size_t had = s->bytes, had_n = s->n;
        struct wait_parts w = { 0 };
        rc = map_tail(c, g, x, size - s->bytes, size - s->bytes, &w, stream,
                      async ? &queued : NULL);
        if (!queued)
            tally(&g->tally[GT_WAIT], s->bytes - had, s->n - had_n, t0);
        wait_log(reused ? "a growable allocation (a freed range reused)" : "a growable allocation",
                 size, t0, &w);
    }
    pthread_mutex_lock(&g->lock);
    x->queuing = x->making = false;
    if (rc == 0 && s->bytes < size)   /* queued, and failed already */
        rc = queued_failure(c);
    if (rc == 0) {
        g->ahead -= size;   /* the mapping was counted ahead */
        x->used = size;
        g->used += size;
        note_used(g);
        g->waits += waited && !queued;
        g->queued += queued;
        if (!x->pending) {   /* (else its last job does) */
            x->broken = false;
            x->busy = false;
            pthread_cond_broadcast(&g->not_busy);
        }
        GROW_CHECK(c, x);
    } else {
        if (ptrmap_get(&g->map, s->va) == x) {
            ptrmap_del(&g->map, s->va);
            g->n--;
        }
        g->ahead -= s->bytes;   /* a reused range's, or what a failed job left */
    }
    pthread_mutex_unlock(&g->lock);
    if (rc) {
        struct gidle *i = NULL;
        if (still_used(c, g, x)) {
            /* Its former owner's work may still use it, or mappings still
             * queued end on its record: idle again. */
            while (!(i = calloc(1, sizeof(*i))) && still_used(c, g, x)) {
                struct timespec ts = { 0, 100 * 1000 };
                nanosleep(&ts, NULL);
            }
        }
        if (i) {
            i->fence = x->prior;
            i->stream = stream;
            i->used = x->prior_used;
            pthread_mutex_lock(&g->lock);
            if (x->pending) {
                i->x = x;
                x->idle = true;
                x->prior = NULL;   /* (the record's fence now) */
                x = NULL;
            }
            idle_push_held(g, i, s);
            pthread_mutex_unlock(&g->lock);
        } else {
            fl_lock(c);
            if (s->bytes) {
                stitch_free(c, s, NULL);
            } else {
                range_drop(c, s);
            }
            fl_unlock(c);
        }
        free(x);
        return rc;
    }
    *ptr = s->va;
    /* A tail to refill, a reused range's excess to give back, or spare
     * ranges to make ready for the next allocations. */
    refill_kick(c->refill);
    return 0;
}

int grow_extend(mb_client *c, void *ptr, size_t new_size, void *stream, bool async)
{
    struct growset *g;
    if (set_of(c, false, &g) != 0)
        return MB_ENOENT;
    pthread_mutex_lock(&g->lock);
    struct growable *x = ptrmap_get(&g->map, ptr);
    if (!x) {
        pthread_mutex_unlock(&g->lock);
        return MB_ENOENT;
    }
    int rc = 0;
    uint64_t t0 = 0;   /* when a wait began */
    struct wait_parts w = { 0 };
    if (new_size > x->max) {
        rc = MB_EINVAL;
    } else if (new_size > x->used) {
        while (x->enqueuing)
            pthread_cond_wait(&g->not_busy, &g->lock);
        if (x->pending && new_size > x->settled && new_size <= x->s->bytes) {
            /* Within a mapping still in flight: a stream waits for it on
             * the device (gated without g->lock, which the mapper's jobs
             * take), a synchronous caller here. */
            bool gated = false;
            if (async) {
                uint32_t seq = x->seq;
                pthread_mutex_unlock(&g->lock);
                gated = amap_gate(c, stream, seq) == 0;
                pthread_mutex_lock(&g->lock);
            }
            if (!gated) {
                t0 = mb_now_ns();
                while (x->pending)
                    pthread_cond_wait(&g->not_busy, &g->lock);
                w.busy_ns = mb_now_ns() - t0;
            }
        }
        bool queued = false;
        if (new_size > x->s->bytes) {
            /* Past the mapped tail: map what is missing now (a wait), or,
             * in stream order, queue it, behind the range's own jobs
             * when it has some (appending). */
            t0 = mb_now_ns();
            bool appending = false;
            while (x->busy && !appending) {
                appending = async && x->pending && !x->broken && !x->queuing;
                if (!appending)
                    pthread_cond_wait(&g->not_busy, &g->lock);
            }
            w.busy_ns = mb_now_ns() - t0;
            if (new_size > x->s->bytes) {
                /* What is missing and the tail ahead of it, in one mapping. */
                size_t more = new_size - x->s->bytes +
                              target_for(new_size, new_size - x->used, 0, c->frame_bytes);
                if (more > x->limit - x->s->bytes)
                    more = x->limit - x->s->bytes;
                if (appending)
                    x->queuing = true;
                else
                    x->busy = x->making = true;
                size_t had = x->s->bytes, had_n = x->s->n;
                pthread_mutex_unlock(&g->lock);
                uint64_t t1 = mb_now_ns();
                rc = map_tail(c, g, x, new_size - had, more, &w, stream, async ? &queued : NULL);
                pthread_mutex_lock(&g->lock);
                g->waits += !queued;
                g->queued += queued;
                if (appending) {
                    x->queuing = false;
                    if (!x->pending) {   /* its jobs are done (and the last one left this) */
                        x->broken = false;
                        x->busy = false;
                    }
                    pthread_cond_broadcast(&g->not_busy);
                } else {
                    x->making = false;
                    if (!queued)
                        tally(&g->tally[GT_WAIT], x->s->bytes - had, x->s->n - had_n, t1);
                    if (!x->pending) {   /* mapped here, or its job done already */
                        x->broken = false;
                        x->busy = false;
                        pthread_cond_broadcast(&g->not_busy);
                    }
                }
                if (rc == 0 && new_size > x->s->bytes)   /* a queued mapping failed already */
                    rc = queued_failure(c);
            }
        }
        if (rc == 0) {
            x->step = new_size - x->used;
            __atomic_store_n(&g->last_step, x->step, __ATOMIC_RELAXED);
            g->ahead -= new_size - x->used;
            g->used += new_size - x->used;
            x->used = new_size;
            note_used(g);
            x->last_ms = mb_now_ms();
        }
    }
    bool kick = rc == 0 && tail_short(c, x);
    GROW_CHECK(c, x);
    pthread_mutex_unlock(&g->lock);
    if (kick)
        refill_kick(c->refill);
    if (t0)
        wait_log("a growth", new_size, t0, &w);
    if (rc && !refused_for_room(rc))   /* (those: client.c, after its retry) */
        mb_log(MB_LOG_ERR, "failed to grow a range to %zu bytes: %s", new_size, mb_strerror(rc));
    return rc;
}

/* A freed range went idle: past the idle cap, the background thread
 * unmaps the oldest. No lock held. */
static void idle_pushed(mb_client *c, struct growset *g)
{
    pthread_mutex_lock(&g->lock);
    bool over = g->idle_bytes > idle_cap(g);
    pthread_mutex_unlock(&g->lock);
    if (over && c->refill)
        refill_kick(c->refill);
}

static bool range_shared(const struct stitched *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->frames[i]->exported)
            return true;
    return false;
}

int grow_free(mb_client *c, void *ptr, void *stream)
{
    struct growset *g;
    if (!ptr || set_of(c, false, &g) != 0)
        return MB_ENOENT;
    pthread_mutex_lock(&g->lock);
    bool mine = ptrmap_get(&g->map, ptr) != NULL;
    pthread_mutex_unlock(&g->lock);
    if (!mine)
        return MB_ENOENT;   /* (every free of another tier's pointer passes here) */
    /* The record the range goes idle with, and the fence of the work
     * queued on stream before this free, made first: a range whose
     * mappings are still queued goes idle at once, without waiting for
     * the mapper (its jobs end on its record, kept with it). */
    struct gidle *i = calloc(1, sizeof(*i));
    int frc = i ? lclock_fence(&c->lclk, c->be, stream, &i->fence) : MB_ENOMEM;
    pthread_mutex_lock(&g->lock);
    struct growable *x = ptrmap_get(&g->map, ptr);
    /* Busy otherwise (another thread mapping or cutting it, a growth
     * queuing behind its jobs), or shared with another process (unmapped
     * once freed): wait. */
    while (x && x->busy &&
           !(frc == 0 && x->pending && !x->queuing && !x->enqueuing && !x->making &&
             !range_shared(x->s))) {
        pthread_cond_wait(&g->not_busy, &g->lock);
        x = ptrmap_get(&g->map, ptr);
    }
    if (!x) {
        pthread_mutex_unlock(&g->lock);
        if (frc == 0)
            fence_drop(c, i->fence);
        free(i);
        return MB_ENOENT;
    }
    ptrmap_del(&g->map, ptr);
    g->n--;
    g->used -= x->used;
    note_used(g);
    g->ahead -= x->s->bytes - x->used;
    struct stitched *s = x->s;
    /* The work of an owner before it (reused in stream order) is covered
     * by this free's fence when it ran on the same stream; otherwise the
     * range goes idle carrying that fence too (mb_export waited for it,
     * so a shared range has none). */
    void *prior = x->prior;
    x->prior = NULL;
    if (prior && (stream == x->prior_stream || fence_settled(c, &prior))) {
        fence_drop(c, prior);
        prior = NULL;
    }
    if (i) {
        i->stream = stream;
        i->prior = prior;
        i->used = x->used > x->prior_used || !prior ? x->used : x->prior_used;
    }
    if (x->pending) {   /* (frc == 0, not shared) */
        i->x = x;
        x->idle = true;
        idle_push_held(g, i, s);
        pthread_mutex_unlock(&g->lock);
        idle_pushed(c, g);
        return 0;
    }
    pthread_mutex_unlock(&g->lock);
    free(x);
    /* Kept mapped for the next allocation that fits, once the work queued
     * on stream before this free completed; ranges shared with another
     * process, and those past IDLE_MAX, are unmapped by the background
     * thread instead. */
    if (i && (frc != 0 || range_shared(s))) {
        if (frc == 0)
            fence_drop(c, i->fence);
        free(i);
        i = NULL;
    }
    if (!i)   /* (shared, or out of memory for the record: rare) */
        fence_wait(c, &prior);
    if (i) {
        pthread_mutex_lock(&g->lock);
        if (g->n_idle < IDLE_MAX || prior) {
            idle_push_held(g, i, s);
            s = NULL;
        }
        pthread_mutex_unlock(&g->lock);
        if (s) {
            fence_drop(c, i->fence);
            fence_wait(c, &i->prior);
            free(i);
        }
    }
    if (!s) {
        idle_pushed(c, g);
        return 0;
    }
    /* Unmapped by the background thread once the stream's work is done. */
    pthread_mutex_lock(&c->lock);
    int rc = c->retire(c, s, stream);
    pthread_mutex_unlock(&c->lock);
    if (rc)
        mb_log(MB_LOG_ERR, "failed to free a growable range: %s; its frames stay mapped",
               mb_strerror(rc));
    return rc;
}

size_t grow_usable(mb_client *c, const void *ptr)
{
    struct growset *g;
    if (!ptr || set_of(c, false, &g) != 0)
        return 0;
    pthread_mutex_lock(&g->lock);
    struct growable *x = ptrmap_get(&g->map, ptr);
    size_t n = x ? x->used : 0;
    pthread_mutex_unlock(&g->lock);
    return n;
}

int grow_share_begin(mb_client *c, const void *ptr, uint32_t **ids, size_t *n)
{
    struct growset *g;
    if (!ptr || set_of(c, false, &g) != 0)
        return MB_ENOENT;
    pthread_mutex_lock(&g->lock);
    struct growable *x = ptrmap_get(&g->map, ptr);
    /* Another thread mapping, cutting or freeing it, or a former owner's
     * work still running (reused in stream order): shared once they are
     * done; then busy, so that no tail is mapped or cut under the ids. */
    while (x && (x->busy || !fence_settled(c, &x->prior))) {
        if (x->busy) {
            pthread_cond_wait(&g->not_busy, &g->lock);
        } else {
            pthread_mutex_unlock(&g->lock);
            struct timespec ts = { 0, 100 * 1000 };
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&g->lock);
        }
        x = ptrmap_get(&g->map, ptr);
    }
    int rc = x ? 0 : MB_ENOENT;
    uint32_t *v = x ? malloc(x->s->n * sizeof(*v)) : NULL;
    if (x && !v)
        rc = MB_ENOMEM;
    if (rc == 0) {
        for (size_t i = 0; i < x->s->n; i++)
            v[i] = x->s->frames[i]->id;
        *ids = v;
        *n = x->s->n;
        x->busy = true;
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

void grow_share_end(mb_client *c, const void *ptr, size_t n, bool shared)
{
    struct growset *g;
    if (set_of(c, false, &g) != 0)
        return;
    pthread_mutex_lock(&g->lock);
    struct growable *x = ptrmap_get(&g->map, ptr);   /* busy: not freed meanwhile */
    if (x) {
        for (size_t i = 0; shared && i < n; i++)
            x->s->frames[i]->exported = true;
        x->busy = false;
        pthread_cond_broadcast(&g->not_busy);
    }
    pthread_mutex_unlock(&g->lock);
}

/* What the ranges' driver work was, at close (MOONBRIGHT_LOG=info): where
 * a growing workload's time went, and how freed ranges were used again. */
static void log_work(const struct growset *g)
{
    uint64_t reuses = g->reuse_kind[0] + g->reuse_kind[1] + g->reuse_kind[2];
    if (!reuses && !g->tally[GT_WAIT].n && !g->tally[GT_TAIL].n)
        return;
    mb_log(MB_LOG_INFO,
           "growable ranges: %" PRIu64 " reused (%" PRIu64 " within their limit, %" PRIu64
           " past it, %" PRIu64 " short; %" PRIu64 " of them spares, %" PRIu64 " taken in stream "
           "order before their fence); idle ranges unmapped: %" PRIu64 " freed, %" PRIu64 " spares",
           reuses, g->reuse_kind[0], g->reuse_kind[1], g->reuse_kind[2], g->reuse_spare,
           g->reuse_ordered, g->drop_freed, g->drop_spare);
    for (int k = 0; k < GT_N; k++)
        if (g->tally[k].n)
            mb_log(MB_LOG_INFO,
                   "growable ranges, %s: %" PRIu64 " times, %" PRIu64 " frames, %.1f MiB, %.1f ms",
                   gt_name[k], g->tally[k].n, g->tally[k].frames,
                   (double)g->tally[k].bytes / (1 << 20), (double)g->tally[k].ns / 1e6);
}

void growset_free(mb_client *c, struct growset *g)
{
    if (!g)
        return;
    log_work(g);
    fl_lock(c);
    idle_release_held(c, g, 0, -1);   /* the device is idle by now */
    while (g->idle) {                  /* a fence that failed: unmap anyway */
        struct gidle *i = g->idle;
        g->idle = i->next;
        fence_drop(c, i->fence);
        fence_drop(c, i->prior);
        stitch_free(c, i->s, NULL);
        free(i->x);   /* (the mapper stopped before the ranges go) */
        free(i);
    }
    for (size_t i = 0; i < g->map.cap; i++) {
        struct ptrmap_slot *sl = &g->map.slots[i];
        if (sl->key <= 1)
            continue;
        struct growable *x = sl->val;
        if (stitch_free(c, x->s, NULL) != 0)
            mb_log(MB_LOG_ERR, "failed to unmap a growable range at close");
        fence_drop(c, x->prior);
        free(x);
    }
    fl_unlock(c);
    ptrmap_destroy(&g->map);
    pthread_cond_destroy(&g->not_busy);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

void grow_stats(struct growset *g, mb_client_stats *st)
{
    pthread_mutex_lock(&g->lock);
    st->stitch_live += g->used;
    st->grow_mapped_ahead += g->ahead;
    st->bytes_idle += g->idle_bytes;   /* freed ranges kept mapped */
    st->grow_waits += g->waits;
    st->grow_queued += g->queued;
    st->grow_close_passes += g->close_passes;
    pthread_mutex_unlock(&g->lock);
}
