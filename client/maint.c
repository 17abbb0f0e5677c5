/* maint.c: the client's background thread and the work it keeps off the
 * request path: reading the daemon's notices (reconnecting when it went
 * away) and answering RECLAIM, the idle policy (memory unused for
 * $MOONBRIGHT_IDLE_MS goes back to the daemon), device-sync fences that
 * settle frees on streams no event covers, and unmapping ranges of their
 * own once the work queued before their free has completed. */
#include <poll.h>
#include <stdlib.h>
#include <zmq.h>

#include "async_map.h"
#include "client.h"
#include "log.h"
#include "refill.h"
#include "wire.h"

#define TICK_MS 100

/* ---- ranges of their own, retiring ---- */

int maint_retire(mb_client *c, struct stitched *s, void *stream, bool unmapped)
{
    struct retiring *r = calloc(1, sizeof(*r));
    if (!r)
        return MB_ENOMEM;
    r->s = s;
    r->unmapped = unmapped;
    mb_backend *be = c->be;
    /* An event recorded now, while the caller vouches for the stream, covers
     * every use of the range; without events (host) it is done at once. */
    if (be->ops->event_record && be->name[0] != 'h') {
        int rc = be->ops->event_create(be, &r->ev);
        if (rc == 0 && (rc = be->ops->event_record(be, r->ev, stream)) != 0) {
            be->ops->event_destroy(be, r->ev);
            r->ev = NULL;
        }
        if (rc != 0) {   /* settle it with a device-sync fence instead */
            r->ticket = ++c->sync_ticket;
            c->want_sync = true;
        }
    }
    r->next = c->retiring;
    c->retiring = r;
    return 0;
}

static bool retired_done(mb_client *c, const struct retiring *r)
{
    if (r->ev)
        return c->be->ops->event_query(c->be, r->ev) == 1;
    return r->ticket <= c->synced;
}

/* Unmap a range whose work is done (flock held). */
static void drop_range(mb_client *c, struct stitched *s, bool unmapped)
{
    if (s->imported) {
        share_free_imported(c, s, NULL);
    } else if (unmapped) {
        c->be->ops->free_va(c->be, s->va, s->reserved);
        for (size_t i = 0; i < s->n; i++)
            fcache_put(c, s->frames[i]);
        c->fst.bytes_mapped -= s->bytes;
        free(s);
    } else if (stitch_free(c, s, NULL) != 0) {
        mb_log(MB_LOG_ERR, "failed to unmap a range at %p: it stays mapped", s->va);
    }
}

void maint_reap_retiring(mb_client *c, bool wait)
{
    pthread_mutex_lock(&c->lock);
    struct retiring *done = NULL;
    for (struct retiring **pp = &c->retiring; *pp;) {
        struct retiring *r = *pp;
        if (!wait && !retired_done(c, r)) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        r->next = done;
        done = r;
    }
    pthread_mutex_unlock(&c->lock);
    if (!done)
        return;
    pthread_mutex_lock(&c->flock);
    while (done) {
        struct retiring *r = done;
        done = r->next;
        if (r->ev)
            c->be->ops->event_destroy(c->be, r->ev);
        drop_range(c, r->s, r->unmapped);
        c->fst.unmaps++;
        free(r);
    }
    pthread_mutex_unlock(&c->flock);
}

/* ---- settling and giving back ---- */

/* Synchronise the whole device so frees on streams no event covers settle
 * (the streams may be gone). Takes c->lock itself; never holds it while
 * waiting. */
static void settle(mb_client *c)
{
    /* A device sync while a stream captures would end the capture: the
     * frees wait for the next settle. */
    if (__atomic_load_n(&c->captures, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&c->lock);
    uint64_t pt, t = tiers_sync_begin(c, &pt);
    pthread_mutex_unlock(&c->lock);
    int rc = c->be->ops->device_sync ? c->be->ops->device_sync(c->be) : 0;
    if (rc != 0) {
        mb_log(MB_LOG_WARN, "failed to synchronise the device to settle frees: %s", mb_strerror(rc));
        return;
    }
    pthread_mutex_lock(&c->lock);
    tiers_sync_end(c, t, pt);
    c->st.device_syncs++;
    pthread_mutex_unlock(&c->lock);
}

int maint_release(mb_client *c, int64_t idle_ms, size_t keep_bytes)
{
    if (idle_ms >= 0 && c->chunks)
        tc_flush_idle(c, idle_ms);   /* caches of threads gone quiet */
    /* An explicit trim or a reclaim settles every free, the legacy
     * stream's included, so that memory freed before it goes back. One
     * release at a time: ranges another took would reach the frame cache
     * after this one trimmed it. */
    pthread_mutex_lock(&c->release_lock);
    pthread_mutex_lock(&c->lock);
    if (idle_ms < 0)
        tiers_fence_legacy(c);
    bool unsettled = idle_ms < 0 && tiers_unsettled(c, true);
    pthread_mutex_unlock(&c->lock);
    if (unsettled)
        settle(c);
    maint_reap_retiring(c, false);
    pthread_mutex_lock(&c->lock);
    int64_t t0 = tiers_now_ms();
    tiers_trim(c, idle_ms);
    struct stitched **v;
    size_t n = tiers_take_idle(c, idle_ms, t0, &v);
    mb_client_stats st = { 0 };
    tiers_stats(c, &st);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&c->flock);
    if (idle_ms < 0)
        refill_trim_held(c);   /* free vspace pages, growable tails (their own idle policy) */
    c->fst.unmaps += n;
    for (size_t i = 0; i < n; i++)
        if (stitch_free(c, v[i], NULL) != 0)
            mb_log(MB_LOG_ERR, "failed to unmap an idle range at %p: it stays mapped", v[i]->va);
    free(v);
    int rc = 0;
    if (idle_ms < 0 || mb_now_ms() - c->fc.last_use_ms >= idle_ms)   /* the frame cache's clock */
        rc = fcache_trim(c, keep_bytes);
    refill_stats(c, &st);
    c->tier_idle = refill_reclaimable(&st);
    fcache_report(c, c->tier_idle);
    pthread_mutex_unlock(&c->flock);
    pthread_mutex_unlock(&c->release_lock);
    return rc;
}

/* ---- the client's figures ---- */

/* What mb_stats reports, gathered from every layer (no lock held on entry). */
void maint_stats(mb_client *c, mb_client_stats *out)
{
    tc_lists_lock();
    pthread_mutex_lock(&c->lock);
    size_t cached = c->chunks ? tc_cached_bytes_held(c) : 0;
    *out = c->st;
    tiers_stats(c, out);
    pthread_mutex_unlock(&c->lock);
    tc_lists_unlock();
    /* objects in thread caches are free, though the slab counts them live */
    cached = cached < out->slab_live ? cached : out->slab_live;
    out->slab_live -= cached;
    out->bytes_idle += cached;
    pthread_mutex_lock(&c->flock);
    out->bytes_mapped = c->fst.bytes_mapped;
    out->daemon_requests = __atomic_load_n(&c->fst.daemon_requests, __ATOMIC_RELAXED);
    out->daemon_wait_us = __atomic_load_n(&c->fst.daemon_ns, __ATOMIC_RELAXED) / 1000;
    out->import_us = c->fst.import_ns / 1000;
    out->frames_imported = c->fst.frames_imported;
    out->unmaps = c->fst.unmaps;
    refill_stats(c, out);
    out->bytes_cached = c->fc.bytes_cached;
    out->bytes_granted = c->fc.bytes_held;
    out->grant_room = fcache_room(&c->fc);
    out->near_budget = fcache_near(c);
    pthread_mutex_unlock(&c->flock);
    out->bytes_live = out->slab_live + out->pool_live + out->stitch_live;
}

/* ---- the thread ---- */

static void answer_reclaim(mb_client *c, uint64_t want)
{
    /* Whatever the tiers hold idle goes first, then cached frames down to
     * what the daemon asked for. */
    pthread_mutex_lock(&c->flock);
    size_t cached = c->fc.bytes_cached;
    pthread_mutex_unlock(&c->flock);
    size_t keep = want == 0 || want >= cached ? 0 : cached - want;
    if (c->chunks)
        tc_flush_every_thread(c, false);   /* thread caches hold slab objects */
    maint_release(c, -1, keep);
    pthread_mutex_lock(&c->flock);
    fcache_answer_notice(c, c->tier_idle);   /* after the Returns, on the same socket */
    pthread_mutex_unlock(&c->flock);
}

static void *maint_main(void *arg)
{
    mb_client *c = arg;
    int64_t last_idle = tiers_now_ms();
    int unsettled_ticks = 0;
    pthread_mutex_lock(&c->flock);
    while (!c->stopping) {
        int fd = -1;
        size_t len = sizeof(fd);
        rpc_lock(c);
        if (c->dealer)
            zmq_getsockopt(c->dealer, ZMQ_FD, &fd, &len);
        int chan = c->chan;
        rpc_unlock(c);
        pthread_mutex_unlock(&c->flock);
        /* ZMQ_FD is edge-triggered: wake on it, on the channel closing, or
         * every tick regardless. */
        struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = chan, .events = POLLIN } };
        poll(p, 2, TICK_MS);
        pthread_mutex_lock(&c->flock);
        if (c->stopping)
            break;
        pthread_mutex_unlock(&c->flock);
        /* The line alone: a grant that let go of the frame lock may hold it,
         * and threads served from the frame cache should not wait for that
         * behind this one. No call is in progress, nor a grant's handles
         * being received, while it is held. */
        rpc_lock(c);
        if (!c->lost)
            rpc_poll_notices(c);   /* a KILLED notice comes before the channel closes */
        rpc_check_lost(c);
        bool lost = c->lost;
        if (!lost)
            fcache_drop_strays(c);
        bool reclaim = !lost && c->reclaim_due;
        uint64_t want = c->reclaim_bytes;
        if (reclaim)
            c->reclaim_due = false;
        rpc_unlock(c);
        if (lost) {
            pthread_mutex_lock(&c->flock);   /* a reconnect reports the frames held */
            rpc_ensure_connected(c);
            continue;
        }

        if (reclaim)
            answer_reclaim(c, want);
        maint_reap_retiring(c, false);
        /* Frees no event covers settle by a device sync when an allocation
         * missed while they waited, or when they have waited a while. */
        pthread_mutex_lock(&c->lock);
        tiers_fence_legacy(c);   /* cheap: an event on a stream that is always alive */
        bool unsettled = tiers_unsettled(c, false), want_sync = c->want_sync;
        pthread_mutex_unlock(&c->lock);
        unsettled_ticks = unsettled ? unsettled_ticks + 1 : 0;
        if (want_sync || unsettled_ticks * TICK_MS >= (c->idle_ms < 1000 ? c->idle_ms : 1000)) {
            settle(c);
            unsettled_ticks = 0;
        }
        int64_t now = tiers_now_ms();
        if (now - last_idle >= c->idle_ms / 4) {
            maint_release(c, c->idle_ms, 0);
            last_idle = now;
        }
        /* What could be given back, and the allocator's counters, for the
         * daemon's books and mbctl tenants. */
        mb_client_stats st;
        maint_stats(c, &st);
        pthread_mutex_lock(&c->flock);
        c->tier_idle = refill_reclaimable(&st);
        fcache_report_counters(c, c->tier_idle, &st);
    }
    pthread_mutex_unlock(&c->flock);
    return NULL;
}

int maint_start(mb_client *c)
{
    if (pthread_create(&c->maint_thread, NULL, maint_main, c) != 0)
        return MB_ESYS;
    c->maint_on = true;
    return 0;
}

void maint_stop(mb_client *c)
{
    if (!c->maint_on)
        return;
    pthread_mutex_lock(&c->flock);
    c->stopping = true;
    pthread_mutex_unlock(&c->flock);
    pthread_join(c->maint_thread, NULL);
    c->maint_on = false;
}
