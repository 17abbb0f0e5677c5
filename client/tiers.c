/* tiers.c: the client's fast paths: the slab (small objects) and the
 * stream-ordered pool (best fit with coalescing), both carved from stitched
 * backing ranges, and the slab's deferred frees for stream-ordered frees.
 * Hits touch neither the driver nor the daemon. */
#include <sched.h>
#include <stdlib.h>

#include "client.h"
#include "log.h"

/* Pool arenas grow by this much (or the request, if larger); requests up to
 * pool_max use the pool, larger ones get a stitched range of their own. */
#define ARENA_BYTES ((size_t)32 << 20)
#define POOL_MAX_BYTES ((size_t)8 << 20)
/* Slab frees deferred on streams are checked once this many are waiting. */
#define DEFERRED_CHECK 64

static int backing_get(void *ctx, size_t bytes, void **base)
{
    mb_client *c = ctx;
    struct stitched *s;
    /* Arenas of several units map as few large frames (below 64 units the
     * plan rounds nothing, so the range is exactly `bytes`). */
    int rc = c->large_frames && bytes > c->frame_bytes ? stitch_alloc_large(c, bytes, &s)
                                                       : stitch_alloc(c, bytes, bytes, &s);
    if (rc != 0)
        return rc;
    if (s->bytes != bytes) {
        stitch_free(c, s, NULL);
        return MB_EINVAL;
    }
    if ((rc = ptrmap_put(&c->backing, s->va, s)) != 0) {
        stitch_free(c, s, NULL);
        return rc;
    }
    *base = s->va;
    return 0;
}

static void backing_put(void *ctx, void *base, size_t bytes)
{
    mb_client *c = ctx;
    struct stitched *s = ptrmap_del(&c->backing, base);
    if (!s || s->bytes != bytes) {
        mb_log(MB_LOG_ERR, "failed to return backing %p: not a range of this client", base);
        return;
    }
    stitch_free(c, s, NULL);
}

static int pool_grow(void *ctx, size_t min_bytes, void **base, size_t *bytes)
{
    mb_client *c = ctx;
    size_t want = min_bytes > ARENA_BYTES ? min_bytes : ARENA_BYTES;
    want = (want + c->frame_bytes - 1) / c->frame_bytes * c->frame_bytes;
    int rc = backing_get(ctx, want, base);
    if ((rc == MB_ENOMEM || rc == MB_EQUOTA) && want > min_bytes) {
        /* Near the budget or the tenant's quota: an arena just big enough
         * may still fit. */
        want = (min_bytes + c->frame_bytes - 1) / c->frame_bytes * c->frame_bytes;
        rc = backing_get(ctx, want, base);
    }
    if (rc == 0)
        *bytes = want;
    return rc;
}

static int ev_record(void *ctx, void *stream, void **ev)
{
    mb_client *c = ctx;
    int rc = c->be->ops->event_create(c->be, ev);
    if (rc == 0 && (rc = c->be->ops->event_record(c->be, *ev, stream)) != 0)
        c->be->ops->event_destroy(c->be, *ev);
    return rc;
}

static int ev_query(void *ctx, void *ev)
{
    mb_client *c = ctx;
    return c->be->ops->event_query(c->be, ev);
}

static void ev_release(void *ctx, void *ev)
{
    mb_client *c = ctx;
    c->be->ops->event_destroy(c->be, ev);
}

static const struct mb_pool_ops pool_ops_streams = {
    .grow = pool_grow, .shrink = backing_put,
    .event_record = ev_record, .event_query = ev_query, .event_release = ev_release,
};
/* Host memory has no streams: frees are ready for everyone at once. */
static const struct mb_pool_ops pool_ops_host = { .grow = pool_grow, .shrink = backing_put };

static bool host_backend(const mb_client *c) { return c->be->ops->event_record == NULL ||
                                                      c->be->name[0] == 'h'; }

int tiers_init(mb_client *c)
{
    size_t fb = c->frame_bytes;
    if ((fb & (fb - 1)) == 0 && fb >= MB_SLAB_MIN_CHUNK && fb <= MB_SLAB_MAX_CHUNK) {
        int rc = mb_slab_new(&c->slab, fb, backing_get, backing_put, c);
        if (rc != 0)
            return rc;
        c->slab_max = mb_slab_max_size(c->slab);
    }
    c->pool_max = POOL_MAX_BYTES;
    /* The pool asks for what the request needs; pool_grow picks the arena
     * size, so it can fall back to a smaller one near the budget. */
    return mb_pool_new(&c->pool, host_backend(c) ? &pool_ops_host : &pool_ops_streams, c, 256, fb);
}

/* Release slab objects whose stream work is known complete; with wait, wait
 * for each (only when the client closes). */
static void reap_deferred(mb_client *c, bool wait)
{
    for (struct deferred_free **pp = &c->deferred; *pp;) {
        struct deferred_free *d = *pp;
        int done = c->be->ops->event_query(c->be, d->event);
        while (wait && done == 0) {
            sched_yield();
            done = c->be->ops->event_query(c->be, d->event);
        }
        if (done == 0) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        c->be->ops->event_destroy(c->be, d->event);
        mb_slab_release(c->slab, d->ptr);
        c->n_deferred--;
        free(d);
    }
}

void tiers_destroy(mb_client *c)
{
    if (c->slab)
        reap_deferred(c, true);
    mb_slab_free(c->slab);
    mb_pool_free(c->pool);
    c->slab = NULL;
    c->pool = NULL;
    for (size_t i = 0; i < c->backing.cap; i++)   /* nothing should be left */
        if (c->backing.slots[i].key > 1)
            stitch_free(c, c->backing.slots[i].val, NULL);
    ptrmap_destroy(&c->backing);
}

int tiers_alloc(mb_client *c, size_t size, void *stream, void **ptr)
{
    if (c->slab && size <= c->slab_max) {
        if (c->n_deferred >= DEFERRED_CHECK)
            reap_deferred(c, false);
        return mb_slab_alloc(c->slab, size, ptr);
    }
    if (size <= c->pool_max)
        return mb_pool_alloc(c->pool, size, stream, ptr);
    return MB_ENOENT;
}

int tiers_free(mb_client *c, void *ptr, void *stream)
{
    size_t sz;
    if (c->slab && mb_slab_usable_size(c->slab, ptr, &sz) == 0) {
        if (stream == NULL || host_backend(c))
            return mb_slab_release(c->slab, ptr);
        /* Freed on a stream: reusable once the work queued there is done. */
        struct deferred_free *d = malloc(sizeof(*d));
        if (!d)
            return MB_ENOMEM;
        int rc = ev_record(c, stream, &d->event);
        if (rc != 0) {
            free(d);
            return rc;
        }
        d->ptr = ptr;
        d->next = c->deferred;
        c->deferred = d;
        c->n_deferred++;
        return 0;
    }
    return mb_pool_release(c->pool, ptr, stream);
}

size_t tiers_usable_size(mb_client *c, const void *ptr)
{
    size_t sz = 0;
    if (c->slab && mb_slab_usable_size(c->slab, ptr, &sz) == 0)
        return sz;
    if (mb_pool_usable_size(c->pool, ptr, &sz) == 0)
        return sz;
    return 0;
}

void tiers_trim(mb_client *c)
{
    if (c->slab) {
        reap_deferred(c, false);
        mb_slab_trim(c->slab, 0);
    }
    mb_pool_trim(c->pool, 0);
}

void tiers_stats(mb_client *c, mb_client_stats *st)
{
    if (c->slab)
        mb_slab_stats(c->slab, &st->slab_live, &st->slab_mapped);
    mb_pool_stats(c->pool, &st->pool_live, &st->pool_mapped);
}
