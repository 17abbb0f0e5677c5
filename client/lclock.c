/* lclock.c: the legacy clock, which frees on the legacy default stream are
 * known to be complete. One per client, shared by every thread: a free on
 * the legacy stream (mb_free) is tagged with the clock's open epoch; it is
 * ready for any stream once the clock's done epoch reaches its tag.
 *
 * Advancing is one driver call for the whole process, not one event per
 * thread: the epoch is closed first (every free tagged before it was made
 * after the work it follows was queued), then the legacy stream is queried;
 * idle, it proves every closed epoch done at once. Busy (an application
 * queueing on it), an event is recorded and queried by later advances, one
 * in flight at a time. One thread advances at a time (busy); a thread that
 * finds another advancing spins for it and usually finds its own frees done.
 *
 * Tokens: a tag as an odd pointer, for places that keep an event per free
 * (the heap's fences, vspaces' streams): never a handle, since events and
 * the host backend's are aligned. A fence is either: a token for the
 * legacy stream, an event recorded on any other.
 *
 * Invariants: done < open; done only grows; with an event in flight,
 * done < ev_gen < open; busy is 1 only while one thread advances. */
#include <assert.h>

#include "client.h"

void lclock_init(struct lclock *k)
{
    k->open = 1;
    k->done = 0;
    k->busy = 0;
    k->ev = NULL;
    k->ev_gen = 0;
    k->ev_pending = false;
}

void lclock_destroy(struct lclock *k, mb_backend *be)
{
    if (k->ev)
        be->ops->event_destroy(be, k->ev);
    k->ev = NULL;
}

uint64_t lclock_tag(struct lclock *k)
{
    return __atomic_load_n(&k->open, __ATOMIC_SEQ_CST);
}

bool lclock_ready(struct lclock *k, uint64_t gen) { return gen <= lclock_done(k); }

static void set_done(struct lclock *k, uint64_t gen)
{
    if (gen > k->done)
        __atomic_store_n(&k->done, gen, __ATOMIC_RELEASE);
    assert(k->done < __atomic_load_n(&k->open, __ATOMIC_RELAXED));
}

/* One look at the driver (busy held). */
static void advance_once(struct lclock *k, mb_backend *be, uint64_t gen)
{
    if (k->ev_pending) {
        int q = be->ops->event_query(be, k->ev);
        if (q != 0) {   /* done, or an error: never wait on it again */
            if (q == 1)
                set_done(k, k->ev_gen);
            k->ev_pending = false;
        }
    }
    if (!k->ev_pending && !lclock_ready(k, gen)) {
        /* close the epoch, then look at the stream */
        uint64_t g = __atomic_fetch_add(&k->open, 1, __ATOMIC_SEQ_CST);
        if (be->ops->stream_query && be->ops->stream_query(be, NULL) == 1) {
            set_done(k, g);
        } else if ((k->ev || be->ops->event_create(be, &k->ev) == 0) &&
                   be->ops->event_record(be, k->ev, NULL) == 0) {
            k->ev_gen = g;
            k->ev_pending = true;
        }
    }
}

void lclock_advance(struct lclock *k, mb_backend *be, uint64_t gen)
{
    /* A thread that finds another advancing spins until it is done (one
     * driver call) rather than sleeping on a lock, then looks again: the
     * other's advance covers its frees whenever the stream was idle. */
    for (int round = 0; round < 3 && !lclock_ready(k, gen); round++) {
        int idle = 0;
        if (__atomic_compare_exchange_n(&k->busy, &idle, 1, false, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            advance_once(k, be, gen);
            __atomic_store_n(&k->busy, 0, __ATOMIC_RELEASE);
            return;   /* what the driver said holds for now */
        }
        /* The holder makes one non-blocking driver call: wait for it,
         * yielding the processor should it have been preempted. */
        spin_while_set(&k->busy, 1000);
    }
}

void *lclock_token(struct lclock *k)
{
    return (void *)(uintptr_t)(lclock_tag(k) << 1 | 1);
}

bool lclock_is_token(const void *ev)
{
    return ((uintptr_t)ev & 1) != 0;
}

int lclock_token_query(struct lclock *k, mb_backend *be, const void *tok)
{
    uint64_t gen = (uint64_t)(uintptr_t)tok >> 1;
    lclock_advance(k, be, gen);
    return lclock_ready(k, gen);
}

int lclock_fence(struct lclock *k, mb_backend *be, void *stream, void **out)
{
    if (stream == NULL && be->ops->stream_query) {
        *out = lclock_token(k);
        return 0;
    }
    int rc = be->ops->event_create(be, out);
    if (rc == 0 && (rc = be->ops->event_record(be, *out, stream)) != 0)
        be->ops->event_destroy(be, *out);
    return rc;
}

int lclock_fence_query(struct lclock *k, mb_backend *be, void *fence)
{
    if (!fence)
        return 1;
    return lclock_is_token(fence) ? lclock_token_query(k, be, fence) : be->ops->event_query(be, fence);
}

void lclock_fence_drop(mb_backend *be, void *fence)
{
    if (fence && !lclock_is_token(fence))
        be->ops->event_destroy(be, fence);
}
