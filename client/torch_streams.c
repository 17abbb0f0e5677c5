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
 * stream is used after the call that named it, and none is made to wait.
 * Invariant: a pointer is in `recorded` or in `deferred`, not both, and a
 * deferred block is in no tier of its client. */
#include <pthread.h>
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
    size_t n_ev;
    struct deferred_free *next;
    void *ev[];
};

#define DEFERRED_POLL 8   /* deferred frees one hook call looks at, at most */

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ptrmap recorded;
static size_t rec_n, deferred_n;   /* entries (atomic reads: the calls' fast paths) */
static struct deferred_free *deferred, **deferred_tail = &deferred;

void mb_torch_record_stream(void *ptr, void *stream)
{
    if (!ptr)
        return;
    pthread_mutex_lock(&rec_lock);
    struct rec_streams *r = ptrmap_get(&recorded, ptr), *nr;
    for (size_t i = 0; r && i < r->n; i++)
        if (r->streams[i] == stream) {
            pthread_mutex_unlock(&rec_lock);
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
    pthread_mutex_unlock(&rec_lock);
}

/* Give back the deferred frees whose events all completed (at most
 * DEFERRED_POLL looked at; all when `all`). No lock held. */
void streams_poll(bool all)
{
    struct deferred_free *done = NULL;
    pthread_mutex_lock(&rec_lock);
    int looked = 0;
    for (struct deferred_free **pp = &deferred; *pp && (all || looked < DEFERRED_POLL); looked++) {
        struct deferred_free *d = *pp;
        mb_backend *be = d->c->be;
        bool ready = true;
        for (size_t i = 0; i < d->n_ev && ready; i++)
            ready = be->ops->event_query(be, d->ev[i]) != 0;   /* (an error: nothing to wait for) */
        if (!ready) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        if (deferred_tail == &d->next)
            deferred_tail = pp;
        d->next = done;
        done = d;
        __atomic_store_n(&deferred_n, deferred_n - 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&rec_lock);
    while (done) {
        struct deferred_free *d = done;
        done = d->next;
        for (size_t i = 0; i < d->n_ev; i++)
            d->c->be->ops->event_destroy(d->c->be, d->ev[i]);
        int rc = mb_free(d->c, d->p);
        if (rc)
            mb_log(MB_LOG_ERR, "failed to free %p after its recorded streams: %s", d->p,
                   mb_strerror(rc));
        free(d);
    }
}

/* The free of p on stream, if p had streams recorded: deferred until
 * their work and stream's, queued so far, is done. True when deferred (or
 * when p was recorded but its events could not be made: then freed on
 * stream after a wait for those streams, the one host wait this takes). */
bool streams_free(mb_client *c, void *p, void *stream)
{
    if (!__atomic_load_n(&rec_n, __ATOMIC_RELAXED))
        return false;
    pthread_mutex_lock(&rec_lock);
    struct rec_streams *r = ptrmap_del(&recorded, p);
    __atomic_store_n(&rec_n, recorded.n, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rec_lock);
    if (!r)
        return false;
    mb_backend *be = c->be;
    struct deferred_free *d = calloc(1, sizeof(*d) + (r->n + 1) * sizeof(d->ev[0]));
    bool ok = d && be->ops->event_record;
    for (size_t i = 0; ok && i <= r->n; i++) {
        void *s = i < r->n ? r->streams[i] : stream;
        if ((ok = be->ops->event_create(be, &d->ev[i]) == 0) &&
            !(ok = be->ops->event_record(be, d->ev[i], s) == 0))
            be->ops->event_destroy(be, d->ev[i]);
        d->n_ev += ok;
    }
    if (!ok) {
        for (size_t i = 0; d && i < d->n_ev; i++)
            be->ops->event_destroy(be, d->ev[i]);
        free(d);
        for (size_t i = 0; be->ops->stream_sync && i < r->n; i++)
            be->ops->stream_sync(be, r->streams[i]);
        free(r);
        return false;
    }
    free(r);
    d->c = c;
    d->p = p;
    pthread_mutex_lock(&rec_lock);
    *deferred_tail = d;
    deferred_tail = &d->next;
    __atomic_store_n(&deferred_n, deferred_n + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rec_lock);
    return true;
}

bool streams_deferred(void)
{
    return __atomic_load_n(&deferred_n, __ATOMIC_RELAXED) != 0;
}
