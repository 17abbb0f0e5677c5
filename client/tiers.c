/* tiers.c: the allocator tiers over mapped memory: the slab (small objects)
 * and the heap (mb_pool: best fit with coalescing and stream-ordered reuse,
 * every size above the slab's), their backing ranges, the slab objects
 * thread caches flushed while their stream's work may still run, the idle
 * ranges kept mapped for reuse, and the device-sync fences that settle frees
 * on streams the application may have destroyed.
 *
 * Locking: every function here runs with c->lock held. Getting new backing
 * memory is the one slow step: backing_get drops c->lock while the frame
 * layer grants and maps (under c->flock), so no other thread waits on the
 * daemon or the driver behind c->lock. Nothing here unmaps: ranges a tier
 * gives back become idle ranges, still mapped, reused by the next request
 * of their size and unmapped later by tiers_release (trim, reclaim, the
 * idle policy), off the request path. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "frame_plan.h"
#include "log.h"
#include "protocol.h"

/* A new arena of the small class maps up to this much at first; one for a
 * request above OWN_ARENA_ABOVE (the large class) maps the request's size
 * (the frame plan's large frames). Both then grow at their end. */
#define ARENA_BYTES ((size_t)32 << 20)
#define OWN_ARENA_ABOVE ((size_t)8 << 20)
/* Every heap arena reserves ARENA_ROOM bytes of address space after it
 * (address space only: nothing is mapped there), and a miss extends the
 * arena of its class with the largest free end ($MOONBRIGHT_HEAP_EXTEND=0:
 * never): an arena grows like one segment, whose free blocks all merge,
 * instead of a new arena beside it whose free space could never join
 * theirs. On PyTorch's own allocations (captured on an H200, replayed on
 * the host backend) this takes a GPT's training steps from 1.13 to 1.10
 * of live (1.34 to 1.12 over ten passes), text generation from 1.19 to
 * 1.17 (1.50 to 1.17 over ten), the AlexNet loop from 1.18 to 1.03 and
 * the conversation replay from 1.140 to 1.115, with the free-time merge
 * of pool.c (BENCHMARKS.md, "Arenas that grow as segments"). */
#define ARENA_ROOM ((size_t)64 << 30)
/* Punching ($MOONBRIGHT_HEAP_PUNCH=1): heap arenas are made of frames of
 * at most this size (the frame plan capped), so a free block inside an
 * arena holds whole frames; a miss that finds no free block large enough
 * unmaps them and stitches them into its own arena instead of growing
 * (heap_punch). 32 MiB: about 80 % of the free bytes stranded in partly
 * used arenas lie in whole frames on the conversation replay (16 MiB: 90 %,
 * at twice the descriptors). Off by default: a miss then maps and unmaps
 * 16 handles where the plan's large frames need 3 (BENCHMARKS.md). */
#define HEAP_FRAME_BYTES ((size_t)32 << 20)

int64_t tiers_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool host_backend(const mb_client *c)
{
    return c->be->ops->event_record == NULL;
}

/* ---- backing ranges ---- */

/* The bytes of s that are mapped (all but punched frames). */
static size_t mapped_of(const struct stitched *s)
{
    return s->bytes - s->holes;
}

/* The largest order of a heap arena's frames: with punching on,
 * HEAP_FRAME_BYTES, unless the arena would need more frames than one grant
 * may hold; else the frame plan's own (fewer, larger frames map faster). */
static unsigned heap_order(const mb_client *c, size_t bytes)
{
    if (!c->punch)
        return MB_MAX_ORDER;
    unsigned k = 0;
    while (k < MB_MAX_ORDER && (c->frame_bytes << (k + 1)) <= HEAP_FRAME_BYTES)
        k++;
    return bytes / (c->frame_bytes << k) < MB_GRANT_MAX_FRAMES / 2 ? k : MB_MAX_ORDER;
}

/* An idle range of exactly bytes, still mapped (no holes): reused without
 * a driver call. */
static struct stitched *idle_take(mb_client *c, size_t bytes)
{
    for (struct idle_range **pp = &c->idle; *pp; pp = &(*pp)->next) {
        struct idle_range *r = *pp;
        if (r->s->bytes != bytes || r->s->holes)
            continue;
        *pp = r->next;
        struct stitched *s = r->s;
        c->idle_bytes -= s->bytes;
        free(r);
        return s;
    }
    return NULL;
}

/* Idle ranges, the most recent first, until they hold at least bytes. */
static size_t take_idle_for(mb_client *c, size_t bytes, struct stitched ***out)
{
    size_t n = 0, sum = 0;
    for (struct idle_range *r = c->idle; r && sum < bytes; r = r->next, n++)
        sum += mapped_of(r->s);
    struct stitched **v = n ? malloc(n * sizeof(*v)) : NULL;
    if (!v)
        return 0;
    for (size_t i = 0; i < n; i++) {
        struct idle_range *r = c->idle;
        v[i] = r->s;
        c->idle = r->next;
        c->idle_bytes -= mapped_of(r->s);
        free(r);
    }
    *out = v;
    return n;
}

static void idle_put(mb_client *c, struct stitched *s)
{
    struct idle_range *r = malloc(sizeof(*r));
    if (!r) {
        /* No memory for the record: the range can only be dropped later,
         * at close; keep it as a backing range nobody names. */
        mb_log(MB_LOG_WARN, "failed to keep an idle range: out of memory");
        return;
    }
    r->s = s;
    r->since_ms = tiers_now_ms();
    r->next = c->idle;
    c->idle = r;
    c->idle_bytes += mapped_of(s);
}

/* A mapped range of at least `bytes` (exactly, unless repair) for a tier:
 * an idle range of that size, else new frames. With repair (a heap miss),
 * the idle ranges are unmapped first and their frames, whatever their
 * sizes, are stitched into the new range before the daemon is asked for
 * more: fragmentation repaired without growing. Called with c->lock held;
 * drops it while the frame layer works. */
static int backing_take(mb_client *c, size_t bytes, bool repair, size_t room, void **base, size_t *got)
{
    struct stitched *s = idle_take(c, bytes);
    int rc = 0;
    if (!s) {
        struct stitched **idle = NULL;
        size_t n_idle = repair ? take_idle_for(c, bytes, &idle) : 0;
        pthread_mutex_unlock(&c->lock);
        fl_lock_caller(c);
        for (size_t i = 0; i < n_idle; i++)
            if (stitch_free(c, idle[i], NULL) != 0)
                mb_log(MB_LOG_ERR, "failed to unmap an idle range at %p: it stays mapped", idle[i]->va);
        c->fst.unmaps += n_idle;
        free(idle);
        /* Ranges of several units map as few large frames (below 64 units
         * the plan rounds nothing, so the range is exactly `bytes`). A
         * refusal for budget or quota goes up: client.c gives the process's
         * own idle memory back and tries once more. */
        bool was = fcache_grant_unlocks(true);   /* c->lock is not held here */
        if (repair && c->fc.n_cached)
            rc = stitch_alloc_any(c, bytes, heap_order(c, bytes), room, &s);
        else if (c->large_frames && bytes > c->frame_bytes)
            rc = stitch_alloc_large(c, bytes, heap_order(c, bytes), room, &s);
        else
            rc = stitch_alloc(c, bytes, bytes + room, &s);
        fcache_grant_unlocks(was);
        if (n_idle && c->fc.bytes_cached > c->fc.keep_bytes)
            fcache_trim(c, c->fc.keep_bytes);   /* frames the repair left over */
        pthread_mutex_unlock(&c->flock);
        pthread_mutex_lock(&c->lock);
        if (rc != 0)
            return rc;
        c->st.heap_grants++;
        c->st.stitches += n_idle != 0;
        if (repair ? s->bytes < bytes : s->bytes != bytes) {
            idle_put(c, s);
            return MB_EINVAL;
        }
    }
    if ((rc = ptrmap_put(&c->backing, s->va, s)) != 0) {
        idle_put(c, s);
        return rc;
    }
    *base = s->va;
    *got = s->bytes;
    return 0;
}

/* The slab's chunks: exactly `bytes`. */
static int backing_get(void *ctx, size_t bytes, void **base)
{
    size_t got;
    return backing_take(ctx, bytes, false, 0, base, &got);
}

/* A tier gives a range back: it stays mapped, idle. */
static void backing_put(void *ctx, void *base, size_t bytes)
{
    mb_client *c = ctx;
    struct stitched *s = ptrmap_del(&c->backing, base);
    if (!s || s->bytes != bytes) {
        mb_log(MB_LOG_ERR, "failed to take back backing %p: not a range of this client", base);
        return;
    }
    idle_put(c, s);
}

/* Bytes a backing range of at least `bytes` will have: the frame plan's
 * rounding (large frames), else whole frames. */
static size_t backing_bytes(const mb_client *c, size_t bytes)
{
    bytes = round_unit(bytes, c->frame_bytes);
    uint64_t covered = bytes;
    if (c->large_frames && bytes > c->frame_bytes)
        mb_frame_plan(bytes, c->frame_bytes, heap_order(c, bytes), NULL, 0, &covered);
    return (size_t)covered;
}

/* A slab chunk goes back: it leaves the chunk registry first. */
static void slab_chunk_put(void *ctx, void *base, size_t bytes)
{
    mb_client *c = ctx;
    chunkreg_del(c->chunks, base);
    backing_put(ctx, base, bytes);
}

/* ---- punching: the frames under free heap blocks ---- */

/* Frames punched out of one arena, side by side from addr. */
struct punched {
    struct stitched *s;
    void *addr;
    size_t from, to;             /* s->frames[from..to) are holes now */
    size_t bytes;                /* theirs (the frames go to the cache once unmapped) */
    bool unmapped;
    struct cframe *fr[];
};

/* Ready blocks looked at per miss. */
#define PUNCH_SPANS 64
/* Only blocks free for this many heap allocations give frames: a block
 * freed just now is likely to serve the next requests of its size, and
 * punching it only moves the miss to them (on the conversation replay,
 * ages of 100, 300, 1000 and 3000 gave 2 258, 1 304, 661 and 315 misses at
 * 1.096, 1.111, 1.110 and 1.157 of live; no age limit: 5 400 misses). */
#define PUNCH_MIN_AGE 1000

/* Record the run frames[from..to) of s at addr as a hole of the heap and
 * take its frames out of s; NULL (nothing changed) when that fails. */
static struct punched *punch_run(mb_client *c, struct stitched *s, size_t from, size_t to, size_t off)
{
    struct punched *r = malloc(sizeof(*r) + (to - from) * sizeof(r->fr[0]));
    if (!r)
        return NULL;
    *r = (struct punched){ .s = s, .addr = (char *)s->va + off, .from = from, .to = to };
    size_t len = 0;
    for (size_t i = from; i < to; i++)
        len += s->frames[i]->mem.bytes;
    r->bytes = len;
    if (mb_pool_punch(c->pool, r->addr, len) != 0) {
        free(r);
        return NULL;
    }
    if (stitch_punch(s, from, to, r->fr) != 0) {
        mb_pool_punch_end(c->pool, r->addr, false);
        free(r);
        return NULL;
    }
    return r;
}

/* The whole frames (each at least min_frame) under ready free blocks free
 * for min_age heap allocations at least, largest blocks first, up to `need`
 * bytes: they leave their arenas as holes and go to the frame cache.
 * Returns the bytes punched. c->lock held; dropped while the frame layer
 * unmaps. */
static size_t punch_frames(mb_client *c, size_t need, size_t min_frame, uint64_t min_age)
{
    size_t got = 0, n = 0;
    struct mb_pool_span sp[PUNCH_SPANS];
    struct punched *runs[PUNCH_SPANS * 4];
    size_t n_sp = mb_pool_ready_spans(c->pool, min_frame, min_age, sp, PUNCH_SPANS);
    for (size_t k = 0; k < n_sp && got < need; k++) {
        struct stitched *s = ptrmap_get(&c->backing, (void *)sp[k].arena);
        if (!s)
            continue;
        uintptr_t lo = sp[k].addr, hi = sp[k].addr + sp[k].size, at = (uintptr_t)s->va;
        size_t from = SIZE_MAX, from_off = 0, off = 0;
        for (size_t i = 0; i <= s->n && got < need && n < sizeof(runs) / sizeof(runs[0]); i++) {
            const struct cframe *f = i < s->n ? s->frames[i] : NULL;
            bool in = f && !f->hole && f->mem.bytes >= min_frame && at + off >= lo &&
                      at + off + f->mem.bytes <= hi;
            if (in && from == SIZE_MAX) {
                from = i;
                from_off = off;
            }
            /* A run ends at a frame that stays, or once it covers the need. */
            bool full = in && got + (off + f->mem.bytes - from_off) >= need;
            if (from != SIZE_MAX && (!in || full)) {
                size_t to = in ? i + 1 : i;
                struct punched *r = punch_run(c, s, from, to, from_off);
                if (r) {
                    runs[n++] = r;
                    got += (in ? off + f->mem.bytes : off) - from_off;
                }
                from = SIZE_MAX;
            }
            if (f)
                off += f->mem.bytes;
        }
    }
    if (n == 0)
        return 0;
    pthread_mutex_unlock(&c->lock);
    fl_lock_caller(c);
    for (size_t i = 0; i < n; i++) {
        struct punched *r = runs[i];
        r->unmapped = stitch_unmap_punched(c, r->addr, r->fr, r->to - r->from) == 0;
        if (!r->unmapped)
            mb_log(MB_LOG_ERR, "failed to unmap free heap frames at %p: they stay mapped", r->addr);
    }
    pthread_mutex_unlock(&c->flock);
    pthread_mutex_lock(&c->lock);
    size_t done = 0;
    for (size_t i = 0; i < n; i++) {
        struct punched *r = runs[i];
        if (r->unmapped) {
            c->st.heap_punches += r->to - r->from;
            done += r->bytes;
        } else {
            stitch_unpunch(r->s, r->from, r->to, r->fr);
        }
        mb_pool_punch_end(c->pool, r->addr, r->unmapped);
        free(r);
    }
    return done;
}

/* A large heap miss found no free block that fits, and the process's idle
 * ranges and cached frames hold less than `want`: the whole frames (of at
 * least HEAP_FRAME_BYTES) under ready free blocks old enough go to the
 * frame cache, up to what is missing, so the miss stitches them instead
 * of asking the daemon for more. c->lock held; dropped while the frame
 * layer unmaps. */
static void heap_punch(mb_client *c, size_t want)
{
    pthread_mutex_unlock(&c->lock);
    fl_lock_caller(c);
    size_t cached = c->fc.bytes_cached;
    pthread_mutex_unlock(&c->flock);
    pthread_mutex_lock(&c->lock);
    if (cached + c->idle_bytes >= want)
        return;
    size_t min_frame = HEAP_FRAME_BYTES > c->frame_bytes ? HEAP_FRAME_BYTES : c->frame_bytes;
    punch_frames(c, want - cached - c->idle_bytes, min_frame, PUNCH_MIN_AGE);
}

static int heap_grow(void *ctx, size_t min_bytes, void **base, size_t *bytes)
{
    mb_client *c = ctx;
    /* No arena of the request's class could grow (the first of its class,
     * or none with room left): a new one, of the request's own size above
     * 8 MiB (that allocation owns its frames and can be exported), else a
     * quarter of what the heap maps (at most ARENA_BYTES), so a small
     * process holds little more than it uses. */
    size_t mapped = 0, step;
    mb_pool_stats(c->pool, NULL, &mapped);
    step = mapped / 4 > ARENA_BYTES ? ARENA_BYTES : mapped / 4;
    size_t want = backing_bytes(c, min_bytes > OWN_ARENA_ABOVE || min_bytes > step ? min_bytes : step);
    /* Nothing free fits: arenas entirely free become idle ranges, and a
     * large request is stitched from their frames (repair) rather than
     * granted anew. */
    bool repair = c->repair && min_bytes > OWN_ARENA_ABOVE;
    if (repair) {
        mb_pool_trim_for(c->pool, want);
        if (c->punch)
            heap_punch(c, want);
    }
    /* Room to extend into, unless arenas do not extend: near the budget
     * misses are many, and 64 GiB of address space each would run a
     * process out of it (ThreadSanitizer's smaller space first). */
    size_t room = c->extend && !c->heap_near ? ARENA_ROOM : 0;
    int rc = backing_take(c, want, repair, room, base, bytes);
    if (refused_for_room(rc) && want > backing_bytes(c, min_bytes)) {
        /* Near the budget or the tenant's quota: an arena just big enough
         * may still fit. */
        want = backing_bytes(c, min_bytes);
        rc = backing_take(c, want, repair, room, base, bytes);
    }
    size_t units = round_unit(min_bytes, c->frame_bytes);
    if (refused_for_room(rc) && want > units) {
        /* Nor the plan's rounding: whole units, which the frame layer asks
         * for in the exact plan's frames once the plan is refused. */
        want = units;
        rc = backing_take(c, want, repair, room, base, bytes);
    }
    return rc;
}

/* Frames taken for a heap arena (t) were mapped (rc 0): count them; else
 * they go back to the cache. c->flock held. */
static void mapped_or_back(mb_client *c, const struct stitched *t, int rc)
{
    if (rc == 0)
        c->fst.bytes_mapped += t->bytes;
    else if (t)
        for (size_t i = 0; i < t->n; i++)
            fcache_put(c, t->frames[i]);
}

/* A miss extends the arena at base, whose last block is free, by at least
 * min_more: frames mapped into the room reserved after it (the cache's
 * first, the daemon's for the rest). c->lock held; dropped while the
 * frame layer works (the pool keeps the arena meanwhile). */
static int heap_extend(void *ctx, void *base, size_t bytes, size_t min_more, size_t *more)
{
    mb_client *c = ctx;
    struct stitched *s = ptrmap_get(&c->backing, base);
    size_t want = backing_bytes(c, min_more);
    if (!s || s->imported || s->mapped_async || s->bytes != bytes)
        return MB_EINVAL;
    if (want > s->reserved - s->bytes)
        return MB_ELIMIT;
    /* Only this thread appends to s while the pool keeps the arena
     * extending; its n and bytes are raised under c->lock below. */
    pthread_mutex_unlock(&c->lock);
    fl_lock_caller(c);
    struct stitched *t = NULL;
    int rc = stitch_take_large(c, want, &t);
    if (rc == 0 && (rc = stitch_map_after(c->be, s, t)) == MB_EPROTO)
        rc = MB_ELIMIT;   /* the plan rounded past the room left */
    mapped_or_back(c, t, rc);
    pthread_mutex_unlock(&c->flock);
    pthread_mutex_lock(&c->lock);
    if (rc == 0) {
        s->n += t->n;
        s->bytes += t->bytes;
        *more = t->bytes;
        c->st.heap_grants++;
        c->st.heap_extends++;
    }
    free(t);
    return rc;
}

/* Frames one fill lays out at most, for the request's part or the rest. */
#define FILL_FRAMES 64

/* Orders of frames that tile u units exactly, largest first: the exact
 * plan (no rounding, unlike the frame plan: they must fit a hole). Returns
 * how many, 0 when more than max. */
static size_t exact_orders(mb_client *c, size_t u, uint8_t *orders, size_t max)
{
    uint64_t covered;
    size_t n = mb_frame_plan_exact((uint64_t)u * c->frame_bytes, c->frame_bytes, MB_MAX_ORDER,
                                   orders, max, &covered);
    return n <= max ? n : 0;
}

/* A miss fills the start of the hole [addr, addr + bytes) of the arena at
 * base again: the `covers` bytes its request will use, in the frames of
 * the frame plan for them as a new arena would get (cached ones first;
 * the daemon's free frames of other sizes holding the same bytes count),
 * exact ones where the plan would round past the hole; they end about
 * where the request ends, so that they can leave again once it is freed.
 * The rest of the hole stays one. The arena's address space is used again
 * instead of growing past its holes. c->lock held; dropped while the frame
 * layer works (the pool keeps the arena from being extended, punched or
 * shrunk meanwhile, so frames[] stays as it is until the new frames and
 * the rest's placeholders replace the hole's). */
static int heap_fill(void *ctx, void *base, void *addr, size_t bytes, size_t covers, size_t *filled)
{
    mb_client *c = ctx;
    struct stitched *s = c->fill ? ptrmap_get(&c->backing, base) : NULL;
    size_t fb = c->frame_bytes;
    if (!s || s->imported || s->mapped_async || (char *)addr < (char *)s->va || bytes % fb || !covers)
        return MB_EINVAL;
    size_t at = (size_t)((char *)addr - (char *)s->va), off = 0, from = 0;
    while (from < s->n && off < at)
        off += s->frames[from++]->mem.bytes;
    size_t to = from, sum = 0;
    while (to < s->n && sum < bytes && s->frames[to]->hole)
        sum += s->frames[to++]->mem.bytes;
    if (off != at || sum != bytes)
        return MB_EINVAL;   /* not a run of punched frames */
    size_t units = bytes / fb, head = (covers + fb - 1) / fb;
    head = head < units ? head : units;
    uint64_t covered = 0;
    mb_frame_plan((uint64_t)head * fb, fb, MB_MAX_ORDER, NULL, 0, &covered);
    uint8_t orders[FILL_FRAMES];
    size_t n_exact = covered / fb <= units ? 0 : exact_orders(c, head, orders, FILL_FRAMES);
    if (covered / fb > units && !n_exact)
        return MB_ELIMIT;
    pthread_mutex_unlock(&c->lock);
    fl_lock_caller(c);
    struct stitched *t = NULL;
    int rc;
    if (!n_exact) {
        rc = stitch_take_large(c, head * fb, &t);   /* largest first */
    } else {
        t = stitch_new(n_exact);
        rc = t ? fcache_take_orders(c, orders, n_exact, t->frames) : MB_ENOMEM;
        for (size_t i = 0; rc == 0 && i < n_exact; i++)
            stitch_push(t, t->frames[i]);   /* in place: counts their bytes */
    }
    /* Placeholders for the rest of the hole, after the new frames. */
    size_t got = rc == 0 ? t->bytes / fb : 0, nrest = 0, made = 0;
    uint8_t rest[FILL_FRAMES];
    struct cframe *ph[FILL_FRAMES];
    if (rc == 0 && got < units)
        nrest = exact_orders(c, units - got, rest, FILL_FRAMES);
    if (rc == 0 && (got > units || (got < units && !nrest) || s->n - (to - from) + t->n + nrest > s->cap))
        rc = MB_ELIMIT;   /* past the hole, or no room in frames[] for the layout */
    for (; rc == 0 && made < nrest; made++) {
        if (!(ph[made] = calloc(1, sizeof(*ph[made])))) {
            rc = MB_ENOMEM;
            break;
        }
        *ph[made] = (struct cframe){ .id = UINT32_MAX, .hole = true, .mem.bytes = fb << rest[made] };
    }
    if (rc == 0) {
        t->va = addr;
        rc = stitch_map(c->be, t, 0, t->n, 0);
    }
    mapped_or_back(c, t, rc);
    pthread_mutex_unlock(&c->flock);
    pthread_mutex_lock(&c->lock);
    if (rc == 0) {
        size_t k = t->n + nrest;
        for (size_t i = from; i < to; i++)
            free(s->frames[i]);   /* the hole's placeholders */
        memmove(s->frames + from + k, s->frames + to, (s->n - to) * sizeof(s->frames[0]));
        memcpy(s->frames + from, t->frames, t->n * sizeof(t->frames[0]));
        memcpy(s->frames + from + t->n, ph, nrest * sizeof(ph[0]));
        s->n = s->n - (to - from) + k;
        s->holes -= t->bytes;
        *filled = t->bytes;
        c->st.heap_grants++;
        c->st.heap_fills++;
    } else {
        for (size_t i = 0; i < made; i++)
            free(ph[i]);
    }
    free(t);
    return rc;
}

/* The heap's fences (lclock.c): on the legacy stream no driver event but a
 * legacy-clock token (one stream query settles every thread's frees). */
static int ev_record(void *ctx, void *stream, void **ev)
{
    mb_client *c = ctx;
    return lclock_fence(&c->lclk, c->be, stream, ev);
}

static int ev_query(void *ctx, void *ev)
{
    mb_client *c = ctx;
    return lclock_fence_query(&c->lclk, c->be, ev);
}

static void ev_release(void *ctx, void *ev)
{
    mb_client *c = ctx;
    lclock_fence_drop(c->be, ev);
}

static const struct mb_pool_ops heap_ops_streams = {
    .grow = heap_grow, .shrink = backing_put, .extend = heap_extend, .fill = heap_fill,
    .event_record = ev_record, .event_query = ev_query, .event_release = ev_release,
};
/* Host memory has no streams: frees are ready for everyone at once. */
static const struct mb_pool_ops heap_ops_host = { .grow = heap_grow, .shrink = backing_put, .extend = heap_extend,
                                                  .fill = heap_fill };

int tiers_init(mb_client *c)
{
    size_t fb = c->frame_bytes;
    if ((fb & (fb - 1)) == 0 && fb >= MB_SLAB_MIN_CHUNK && fb <= MB_SLAB_MAX_CHUNK) {
        int rc = mb_slab_new(&c->slab, fb, backing_get, slab_chunk_put, c);
        if (rc == 0 && (rc = chunkreg_new(fb, &c->chunks)) != 0) {
            mb_slab_free(c->slab);   /* empty: no chunk was made yet */
            c->slab = NULL;
        }
        if (rc != 0)
            return rc;
        c->slab_max = mb_slab_max_size(c->slab);
    }
    /* The heap asks for what the request needs; heap_grow picks the arena
     * size, so it can fall back to a smaller one near the budget. */
    int rc = mb_pool_new(&c->pool, host_backend(c) ? &heap_ops_host : &heap_ops_streams, c, 256, fb);
    if (rc == 0 && c->close_fit)
        mb_pool_set_close_fit(c->pool, OWN_ARENA_ABOVE);
    if (rc == 0 && c->extend)
        mb_pool_set_extend_min(c->pool, 1);
    /* Blocks up to OWN_ARENA_ABOVE and larger ones live in arenas of their
     * own class: a small block left in a large arena's free space pins it,
     * so that the large requests of the next round find no room (a
     * training loop's footprint crept to 1.9x its live bytes that way). */
    if (rc == 0 && c->classes)
        mb_pool_set_large_min(c->pool, OWN_ARENA_ABOVE);
    return rc;
}

/* ---- slab objects waiting for their stream's work ---- */

static bool sd_done(mb_client *c, const struct sdefer *d)
{
    return d->ev ? c->be->ops->event_query(c->be, d->ev) == 1 : d->ticket && d->ticket <= c->synced;
}

static void sd_release(mb_client *c, struct sdefer *d)
{
    for (uint32_t i = 0; i < d->n; i++)
        mb_slab_release(c->slab, d->ptrs[i]);
    c->n_deferred -= d->n;
    c->deferred_bytes -= d->bytes;
    if (d->ev)
        c->be->ops->event_destroy(c->be, d->ev);
    free(d);
}

/* Release the slab objects of every fenced batch known complete. */
static void sd_reap(mb_client *c)
{
    for (struct sdefer **pp = &c->sd_fenced; *pp;) {
        struct sdefer *d = *pp;
        if (!sd_done(c, d)) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        if (!*pp)
            c->sd_fenced_tail = pp;
        sd_release(c, d);
    }
}

/* Up to n objects of size; at most one new chunk is made for them (a
 * thread cache's refill of large objects would otherwise ask the daemon
 * twice on one allocation). */
size_t tiers_slab_take(mb_client *c, size_t size, size_t n, void **out)
{
    if (c->n_deferred)
        sd_reap(c);
    size_t k = 0;
    c->slab_err = 0;
    for (bool made = false; k < n; k++) {
        if (!mb_slab_has_free(c->slab, size)) {
            if (made)
                break;
            made = true;
        }
        int rc = mb_slab_alloc(c->slab, size, &out[k]);
        if (rc == 0) {
            uintptr_t base = (uintptr_t)out[k] & ~(uintptr_t)(c->frame_bytes - 1);
            rc = chunkreg_add(c->chunks, (void *)base, mb_slab_class_of(c->slab, size), size);
            if (rc != 0)
                mb_slab_release(c->slab, out[k]);
        }
        if (rc != 0) {
            c->slab_err = rc;
            break;
        }
    }
    return k;
}

void tiers_slab_put(mb_client *c, void **ptrs, size_t n, void *ev, bool pending)
{
    if (!pending || n == 0) {
        for (size_t i = 0; i < n; i++)
            if (mb_slab_release(c->slab, ptrs[i]) != 0)
                mb_log(MB_LOG_ERR, "double free of %p detected (freed again after it was freed "
                       "on another thread); the second free is ignored", ptrs[i]);
        if (ev)
            c->be->ops->event_destroy(c->be, ev);
        return;
    }
    struct sdefer *d = calloc(1, sizeof(*d) + n * sizeof(void *));
    if (!d) {
        /* No memory to keep them apart: they stay out of use. */
        mb_log(MB_LOG_ERR, "failed to defer %zu freed objects: out of memory", n);
        if (ev)
            c->be->ops->event_destroy(c->be, ev);
        return;
    }
    memcpy(d->ptrs, ptrs, n * sizeof(void *));
    d->n = (uint32_t)n;
    size_t sz;
    for (size_t i = 0; i < n; i++)
        if (mb_slab_usable_size(c->slab, ptrs[i], &sz) == 0)
            d->bytes += sz;
    c->deferred_bytes += d->bytes;
    d->ev = ev;
    d->ticket = ev ? 0 : ++c->sync_ticket;   /* settled by the next device sync */
    *c->sd_fenced_tail = d;
    c->sd_fenced_tail = &d->next;
    c->n_deferred += n;
}

/* ---- allocation and free ---- */

/* Near the budget or the quota (fcache_near) the heap fits closely, as
 * MOONBRIGHT_HEAP_CLOSE_FIT makes it always: a large request misses
 * rather than split a free block much larger than itself, and the miss
 * rebuilds from free arenas' frames (repair) before it asks for more;
 * arenas are not extended past the blocks it refused meanwhile. More
 * misses and maps, less memory: the trade only near the budget. c->lock
 * held. */
static void heap_follow_budget(mb_client *c)
{
    bool near = fcache_near(c);
    if (near == c->heap_near)
        return;
    c->heap_near = near;
    mb_pool_set_close_fit(c->pool, near || c->close_fit ? OWN_ARENA_ABOVE : 0);
    mb_pool_set_extend_min(c->pool, c->extend && !near ? 1 : 0);
}

int tiers_alloc(mb_client *c, size_t size, void *stream, bool sync, void **ptr)
{
    heap_follow_budget(c);
    uint64_t misses = mb_pool_misses(c->pool);
    int rc = mb_pool_alloc(c->pool, size, sync ? MB_POOL_SYNC : stream, ptr);
    bool unfenced = false;
    if (mb_pool_misses(c->pool) == misses)
        c->st.heap_hits++;
    else if (mb_pool_pending(c->pool, &unfenced) && unfenced)
        c->want_sync = true;    /* frees on other streams may settle soon */
    return rc;
}

int tiers_free(mb_client *c, void *ptr, void *stream)
{
    return mb_pool_release(c->pool, ptr, stream);
}

size_t tiers_usable_size(mb_client *c, const void *ptr)
{
    size_t sz = 0;
    return mb_pool_usable_size(c->pool, ptr, &sz) == 0 ? sz : 0;
}

int tiers_adopt(mb_client *c, struct stitched *s, void *stream)
{
    int rc = ptrmap_put(&c->backing, s->va, s);
    if (rc == 0 && (rc = mb_pool_adopt(c->pool, s->va, s->bytes, stream)) != 0)
        ptrmap_del(&c->backing, s->va);
    return rc;
}

int tiers_detach(mb_client *c, void *ptr, struct stitched **out)
{
    void *base;
    size_t bytes;
    int rc = mb_pool_detach(c->pool, ptr, &base, &bytes);
    if (rc != 0)
        return rc;
    *out = ptrmap_del(&c->backing, base);
    return 0;
}

/* ---- settling and giving back ---- */

uint64_t tiers_sync_begin(mb_client *c, uint64_t *pool_ticket)
{
    uint64_t ticket = ++c->sync_ticket;   /* covers every ticket issued before it */
    *pool_ticket = mb_pool_sync_begin(c->pool);
    c->want_sync = false;
    return ticket;
}

void tiers_sync_end(mb_client *c, uint64_t ticket, uint64_t pool_ticket)
{
    if (ticket > c->synced)
        c->synced = ticket;
    mb_pool_sync_end(c->pool, pool_ticket);
    sd_reap(c);
}

bool tiers_unsettled(mb_client *c, bool any)
{
    bool unfenced = false;
    size_t pending = mb_pool_pending(c->pool, &unfenced);
    return unfenced || c->sync_ticket > c->synced || (any && (pending || c->n_deferred));
}

void tiers_fence_legacy(mb_client *c)
{
    if (!host_backend(c))
        mb_pool_fence(c->pool, NULL);
}

/* Passes of punch_frames one trim makes at most (each looks at
 * PUNCH_SPANS free blocks). */
#define TRIM_PUNCH_PASSES 64

void tiers_trim(mb_client *c, int64_t idle_ms)
{
    if (c->slab) {
        sd_reap(c);
        mb_slab_trim(c->slab, 0);
    }
    if (idle_ms < 0)
        mb_pool_trim(c->pool, 0);
    else
        mb_pool_trim_idle(c->pool, idle_ms);
    /* Arenas grow as segments, so free memory sits inside arenas still in
     * use: a trim, a reclaim, or an idle pass after no heap allocation for
     * idle_ms gives back the whole frames under their free blocks. */
    uint64_t allocs = mb_pool_allocs(c->pool);
    int64_t now = tiers_now_ms();
    if (allocs != c->heap_allocs_seen) {
        c->heap_allocs_seen = allocs;
        c->heap_quiet_since_ms = now;
    }
    if (idle_ms >= 0 && now - c->heap_quiet_since_ms < idle_ms)
        return;
    for (int i = 0; i < TRIM_PUNCH_PASSES && punch_frames(c, SIZE_MAX, c->frame_bytes, 0) > 0; i++)
        ;
}

size_t tiers_take_idle(mb_client *c, int64_t idle_ms, int64_t since_ms, struct stitched ***out)
{
    int64_t now = tiers_now_ms();
    size_t n = 0, cap = 0;
    struct stitched **v = NULL;
    for (struct idle_range **pp = &c->idle; *pp;) {
        struct idle_range *r = *pp;
        if (idle_ms >= 0 && now - r->since_ms < idle_ms && r->since_ms < since_ms) {
            pp = &r->next;
            continue;
        }
        if (n == cap) {
            struct stitched **nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof(*v));
            if (!nv)
                break;
            v = nv;
        }
        v[n++] = r->s;
        c->idle_bytes -= mapped_of(r->s);
        *pp = r->next;
        free(r);
    }
    *out = v;
    return n;
}

void tiers_stats(mb_client *c, mb_client_stats *st)
{
    if (c->slab) {
        mb_slab_stats(c->slab, &st->slab_live, &st->slab_mapped);
        st->slab_live -= c->deferred_bytes;   /* freed, waiting for their stream */
    }
    mb_pool_stats(c->pool, &st->pool_live, &st->pool_mapped);
    st->bytes_idle = (st->slab_mapped - st->slab_live) + (st->pool_mapped - st->pool_live) +
                     c->idle_bytes;
}

void tiers_destroy(mb_client *c)
{
    c->synced = c->sync_ticket;   /* the caller synchronised the device */
    sd_reap(c);
    mb_slab_free(c->slab);
    mb_pool_free(c->pool);
    c->slab = NULL;
    c->pool = NULL;
}
