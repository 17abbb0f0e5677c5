/* refill.c: the client's background memory thread (refill.h): started with
 * the first vspace page pool or growable range, it runs each pool's and the
 * growable ranges' background step when a request left work (a kick) and
 * every REFILL_TICK_MS, and stops in mb_close. */
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "grow.h"
#include "log.h"
#include "pagepool.h"
#include "refill.h"
#include "vsnodes.h"
#include "wire.h"

static void *refill_main(void *arg)
{
    fcache_background_thread();
    stitch_background_thread();
    struct refill *r = arg;
    pthread_mutex_lock(&r->lock);
    while (!r->stop) {
        if (r->holds || !__atomic_load_n(&r->kicked, __ATOMIC_RELAXED)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += (long)REFILL_TICK_MS * 1000000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&r->wake, &r->lock, &ts);
        }
        if (r->stop)
            break;
        if (r->holds)
            continue;   /* a trim runs: no pass until it is done */
        __atomic_store_n(&r->kicked, false, __ATOMIC_RELAXED);
        struct pagepool *pools[REFILL_PAGE_SIZES];
        for (int k = 0; k < REFILL_PAGE_SIZES; k++)
            pools[k] = r->pools[k];
        r->passes++;
        r->in_pass = true;
        pthread_mutex_unlock(&r->lock);
        /* Pools live until refill_close, which stops this thread first. */
        uint64_t t0 = mb_now_ns();
        int64_t now = mb_now_ms();
        bool again = false;   /* a pool short after its extent, or tails still due: no sleep */
        for (int k = 0; k < REFILL_PAGE_SIZES; k++)
            if (pools[k] && pagepool_work(pools[k], now, r->idle_ms, r->test_delay_us))
                again = true;
        if (grow_work(r->c, r->grow, now, r->idle_ms))
            again = true;
        vsnodes_work(r->nodes);
        __atomic_fetch_add(&r->busy_ns, mb_now_ns() - t0, __ATOMIC_RELAXED);
        pthread_mutex_lock(&r->lock);
        r->in_pass = false;
        pthread_cond_broadcast(&r->passed);
        if (again)
            __atomic_store_n(&r->kicked, true, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

void waiters_first(const unsigned *waiting)
{
    for (int i = 0; i < FL_YIELD_SPINS && __atomic_load_n(waiting, __ATOMIC_RELAXED); i++)
        sched_yield();
}

void fl_lock_bg(mb_client *c)
{
    waiters_first(&c->fl_callers);
    pthread_mutex_lock(&c->flock);
}

void fl_yield(mb_client *c)
{
    if (!__atomic_load_n(&c->fl_callers, __ATOMIC_RELAXED))
        return;
    pthread_mutex_unlock(&c->flock);
    waiters_first(&c->fl_callers);
    pthread_mutex_lock(&c->flock);
}

int refill_get(mb_client *c, struct refill **out)
{
    struct refill *r = __atomic_load_n(&c->refill, __ATOMIC_ACQUIRE);
    if (r) {
        *out = r;
        return 0;
    }
    int rc = 0;
    fl_lock(c);
    if (!(r = c->refill)) {
        r = calloc(1, sizeof(*r));
        if (r && (!(r->grow = growset_new()) || !(r->nodes = vsnodes_new(c)))) {
            free(r->grow);
            free(r);
            r = NULL;
        }
        if (!r) {
            rc = MB_ENOMEM;
        } else {
            r->c = c;
            r->idle_ms = (int)c->idle_ms;   /* $MOONBRIGHT_IDLE_MS, read by mb_open */
            const char *d = getenv("MOONBRIGHT_TEST_REFILL_DELAY_US");
            r->test_delay_us = d && *d ? (unsigned)strtoul(d, NULL, 10) : 0;
            pthread_mutex_init(&r->lock, NULL);
            pthread_cond_init(&r->wake, NULL);
            pthread_cond_init(&r->passed, NULL);
            if (pthread_create(&r->thread, NULL, refill_main, r) != 0) {
                mb_log(MB_LOG_ERR, "failed to start the client's refill thread; pools grow on "
                                   "demand only");
            } else {
                r->thread_on = true;
            }
            __atomic_store_n(&c->refill, r, __ATOMIC_RELEASE);
        }
    }
    fl_unlock(c);
    if (rc == 0)
        *out = r;
    return rc;
}

void refill_kick(struct refill *r)
{
    if (__atomic_load_n(&r->kicked, __ATOMIC_RELAXED))
        return;   /* the thread has a kick to see already */
    pthread_mutex_lock(&r->lock);
    __atomic_store_n(&r->kicked, true, __ATOMIC_RELAXED);
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
}

void refill_hold(mb_client *c)
{
    struct refill *r = __atomic_load_n(&c->refill, __ATOMIC_ACQUIRE);
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->holds++;
    while (r->in_pass)
        pthread_cond_wait(&r->passed, &r->lock);
    pthread_mutex_unlock(&r->lock);
}

void refill_unhold(mb_client *c)
{
    struct refill *r = __atomic_load_n(&c->refill, __ATOMIC_ACQUIRE);
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
#ifdef MB_DEBUG
    if (r->holds <= 0)
        abort();   /* an unhold without its hold */
#endif
    if (--r->holds == 0)
        pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
}

void refill_stop(mb_client *c)
{
    struct refill *r = c->refill;
    if (!r || !r->thread_on)
        return;
    pthread_mutex_lock(&r->lock);
    r->stop = true;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->thread, NULL);
    r->thread_on = false;
}

void refill_close(mb_client *c)
{
    struct refill *r = c->refill;
    if (!r)
        return;
    refill_stop(c);
    for (int k = 0; k < REFILL_PAGE_SIZES; k++)
        pagepool_free(r->pools[k]);   /* destroyed vspaces' nodes come back */
    vsnodes_free(r->nodes);
    growset_free(c, r->grow);
    pthread_cond_destroy(&r->wake);
    pthread_cond_destroy(&r->passed);
    pthread_mutex_destroy(&r->lock);
    c->refill = NULL;
    free(r);
}

/* The pools created so far (they live until refill_close). */
static void snapshot(struct refill *r, struct pagepool **pools)
{
    pthread_mutex_lock(&r->lock);
    for (int k = 0; k < REFILL_PAGE_SIZES; k++)
        pools[k] = r->pools[k];
    pthread_mutex_unlock(&r->lock);
}

void refill_trim_held(mb_client *c)
{
    struct refill *r = c->refill;
    struct pagepool *pools[REFILL_PAGE_SIZES];
    if (!r)
        return;
    snapshot(r, pools);
    for (int k = 0; k < REFILL_PAGE_SIZES; k++)
        if (pools[k])
            pagepool_trim_held(pools[k]);
    grow_trim_held(c, r->grow);
}

void refill_stats(mb_client *c, mb_client_stats *st)
{
    struct refill *r = c->refill;
    struct pagepool *pools[REFILL_PAGE_SIZES];
    if (!r)
        return;
    snapshot(r, pools);
    for (int k = 0; k < REFILL_PAGE_SIZES; k++)
        if (pools[k])
            pagepool_stats(pools[k], st);
    grow_stats(r->grow, st);
    st->vspace_refill_waits += vsnodes_waits(r->nodes);
    st->background_busy_us += __atomic_load_n(&r->busy_ns, __ATOMIC_RELAXED) / 1000;
}

bool refill_running(mb_client *c)
{
    struct refill *r = __atomic_load_n(&c->refill, __ATOMIC_ACQUIRE);
    return r && r->thread_on;
}

