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
 * in flight at a time. One thread advances at a time, and a thread that
 * waited for it finds its own frees done by it whenever the stream was idle.
 *
 * Invariants: done < open; done only grows; with an event in flight,
 * done < ev_gen < open. */
#include <assert.h>

#include "client.h"

void lclock_init(struct lclock *k)
{
    pthread_mutex_init(&k->m, NULL);
    k->open = 1;
    k->done = 0;
    k->ev = NULL;
    k->ev_gen = 0;
    k->ev_pending = false;
}

void lclock_destroy(struct lclock *k, mb_backend *be)
{
    if (k->ev)
        be->ops->event_destroy(be, k->ev);
    k->ev = NULL;
    pthread_mutex_destroy(&k->m);
}

uint64_t lclock_tag(struct lclock *k)
{
    return __atomic_load_n(&k->open, __ATOMIC_SEQ_CST);
}

bool lclock_ready(struct lclock *k, uint64_t gen)
{
    return gen <= __atomic_load_n(&k->done, __ATOMIC_ACQUIRE);
}

static void set_done(struct lclock *k, uint64_t gen)
{
    if (gen > k->done)
        __atomic_store_n(&k->done, gen, __ATOMIC_RELEASE);
    assert(k->done < __atomic_load_n(&k->open, __ATOMIC_RELAXED));
}

void lclock_advance(struct lclock *k, mb_backend *be, uint64_t gen)
{
    if (lclock_ready(k, gen))
        return;
    pthread_mutex_lock(&k->m);   /* held across one query at most */
    if (lclock_ready(k, gen)) {
        pthread_mutex_unlock(&k->m);   /* the thread before advanced it */
        return;
    }
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
    pthread_mutex_unlock(&k->m);
}
