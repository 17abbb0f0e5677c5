/* torch_streams.c: tensor.record_stream through the framework hook
 * (torch_int.h).
 *
 * A tensor used on streams other than its own (record_stream) must not be
 * reused before that work is done, though the framework frees it on its
 * own stream, where stream-ordered reuse would hand it out at once.
 * `recorded` maps such a pointer to the streams named; its free then
 * records an event on each of them and on the freeing stream, and the
 * block goes back (mb_free) only once every event completed: `deferred`,
 * a queue polled by the next hook calls, a few entries at a time. No
 * stream is used after the call that named it, and none is made to wait;
 * where events cannot be made, a device-sync fence (c->sync_ticket, which
 * the client's background thread settles) stands in for them.
 *
 * Locks, never held across a driver call: `rec_lock` (read: a free's
 * lookup; write: recording and removing), `queue_lock` (the queue's links;
 * a poll detaches the entries it looks at and queries their events
 * without it). Invariant: a pointer is in `recorded` or in `deferred`, not
 * both, and a deferred block is in no tier of its client. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include <moonbright/mbclient.h>

#include "log.h"
#include "torch_int.h"

struct rec_streams {
    size_t n;
    void *streams[];
};
struct deferred_free {
    mb_client *c;
    void *p;
    uint64_t ticket;   /* a device-sync fence standing in for missing events, or 0 */
    size_t n_ev;
    struct deferred_free *next;
    void *ev[];
};

#define DEFERRED_POLL 8   /* deferred frees one hook call looks at, at most */

static pthread_rwlock_t rec_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct ptrmap recorded;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct deferred_free *deferred, **deferred_tail = &deferred;
static size_t rec_n, deferred_n;   /* entries (atomic reads: the calls' fast paths) */

void mb_torch_record_stream(void *ptr, void *stream)
{
    if (!ptr)
        return;
    pthread_rwlock_wrlock(&rec_lock);
    struct rec_streams *r = ptrmap_get(&recorded, ptr), *nr;
    for (size_t i = 0; r && i < r->n; i++)
        if (r->streams[i] == stream) {
            pthread_rwlock_unlock(&rec_lock);
            return;
        }
    size_t n = r ? r->n : 0;
    if ((nr = realloc(r, sizeof(*nr) + (n + 1) * sizeof(nr->streams[0]))) != NULL) {
        nr->n = n + 1;
        nr->streams[n] = stream;
        if (nr != r && (r ? (ptrmap_del(&recorded, ptr), ptrmap_put(&recorded, ptr, nr))
                          : ptrmap_put(&recorded, ptr, nr)) != 0) {
            free(nr);
            nr = NULL;
        }
    }
    if (!nr)
        mb_log(MB_LOG_ERR, "out of memory recording stream %p for %p: it may be reused before "
               "that stream's work is done", stream, ptr);
    __atomic_store_n(&rec_n, recorded.n, __ATOMIC_RELAXED);
    pthread_rwlock_unlock(&rec_lock);
}

/* Have d's events, and its device-sync fence, all completed? (An event's
 * error counts as done: there is nothing left to wait for.) No lock held. */
static bool deferred_done(struct deferred_free *d)
{
    mb_backend *be = d->c->be;
    for (; d->n_ev; d->n_ev--) {
        if (be->ops->event_query(be, d->ev[d->n_ev - 1]) == 0)
            return false;
        be->ops->event_destroy(be, d->ev[d->n_ev - 1]);
    }
    if (!d->ticket)
        return true;
    pthread_mutex_lock(&d->c->lock);
    bool synced = d->ticket <= d->c->synced;
    if (!synced)
        d->c->want_sync = true;
    pthread_mutex_unlock(&d->c->lock);
    return synced;
}

void streams_poll(bool all)
{
    /* Detach up to DEFERRED_POLL entries (all of them with `all`) ... */
    pthread_mutex_lock(&queue_lock);
    struct deferred_free *mine = deferred, **end = &deferred;
    for (int k = 0; *end && (all || k < DEFERRED_POLL); k++)
        end = &(*end)->next;
    deferred = *end;
    *end = NULL;
    if (!deferred)
        deferred_tail = &deferred;
    pthread_mutex_unlock(&queue_lock);
    /* ... query them with no lock held ... */
    struct deferred_free *keep = NULL, **keep_end = &keep, *done = NULL;
    while (mine) {
        struct deferred_free *d = mine;
        mine = d->next;
        d->next = NULL;
        if (deferred_done(d)) {
            d->next = done;
            done = d;
        } else {
            *keep_end = d;
            keep_end = &d->next;
        }
    }
    /* ... and put back, at the head, those still waiting. */
    if (keep) {
        pthread_mutex_lock(&queue_lock);
        *keep_end = deferred;
        if (!deferred)
            deferred_tail = keep_end;
        deferred = keep;
        pthread_mutex_unlock(&queue_lock);
    }
    while (done) {
        struct deferred_free *d = done;
        done = d->next;
        __atomic_fetch_sub(&deferred_n, 1, __ATOMIC_RELAXED);
        int rc = mb_free(d->c, d->p);
        if (rc)
            mb_log(MB_LOG_ERR, "failed to free %p after its recorded streams: %s", d->p,
                   mb_strerror(rc));
        free(d);
    }
}

bool streams_free(mb_client *c, void *p, void *stream)
{
    if (!__atomic_load_n(&rec_n, __ATOMIC_RELAXED))
        return false;
    pthread_rwlock_rdlock(&rec_lock);   /* most frees are of pointers never recorded */
    bool listed = ptrmap_get(&recorded, p) != NULL;
    pthread_rwlock_unlock(&rec_lock);
    if (!listed)
        return false;
    pthread_rwlock_wrlock(&rec_lock);
    struct rec_streams *r = ptrmap_del(&recorded, p);
    __atomic_store_n(&rec_n, recorded.n, __ATOMIC_RELAXED);
    pthread_rwlock_unlock(&rec_lock);
    mb_backend *be = c->be;
    if (!r || !be->ops->event_record) {   /* (host streams: trivially ordered) */
        free(r);
        return false;
    }
    struct deferred_free *d = calloc(1, sizeof(*d) + (r->n + 1) * sizeof(d->ev[0]));
    if (!d) {
        mb_log(MB_LOG_ERR, "out of memory deferring the free of %p after its recorded streams: "
               "freed on its own stream", p);
        free(r);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; ok && i <= r->n; i++) {
        void *s = i < r->n ? r->streams[i] : stream;
        if ((ok = be->ops->event_create(be, &d->ev[i]) == 0) &&
            !(ok = be->ops->event_record(be, d->ev[i], s) == 0))
            be->ops->event_destroy(be, d->ev[i]);
        d->n_ev += ok;
    }
    free(r);
    if (!ok) {   /* the next device sync of the background thread covers them all */
        pthread_mutex_lock(&c->lock);
        d->ticket = ++c->sync_ticket;
        c->want_sync = true;
        pthread_mutex_unlock(&c->lock);
    }
    d->c = c;
    d->p = p;
    __atomic_fetch_add(&deferred_n, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&queue_lock);
    *deferred_tail = d;
    deferred_tail = &d->next;
    pthread_mutex_unlock(&queue_lock);
    return true;
}

bool streams_deferred(void)
{
    return __atomic_load_n(&deferred_n, __ATOMIC_RELAXED) != 0;
}
