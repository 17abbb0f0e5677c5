/* test_races.c: interleavings between a client's threads that once went
 * wrong, made to happen every run: the thread that starts a client's
 * mapper slowed while another makes its first stream-ordered call; an
 * exporter delayed between naming a growable range's frames and sending
 * them while the background thread cuts idle tails; mb_stats read while
 * another thread's cache moves objects to and from the slab. The delays
 * come from wrapping pthread_create and pthread_mutex_lock at link time
 * (tests/CMakeLists.txt). Host backend, a daemon of the test's own. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "async_map.h"
#include "client.h"
#include "grow_int.h"
#include "harness.h"
#include "refill.h"

static const size_t MiB = (size_t)1 << 20;

/* ---- the delays ---- */

/* pthread_create: the first call from a thread marked slow_create sleeps
 * 300 ms first, as if preempted there. */
static __thread bool slow_create;
static int created_slowly;
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    if (slow_create && __atomic_exchange_n(&created_slowly, 1, __ATOMIC_ACQ_REL) == 0)
        usleep(300 * 1000);
    return __real_pthread_create(t, a, fn, arg);
}

/* pthread_mutex_lock: the next lock of slow_mutex by slow_thread sleeps
 * slow_ms first, as if blocked behind another thread's round trip. */
static pthread_mutex_t *slow_mutex;
static pthread_t slow_thread;
static int slow_armed;
static unsigned slow_ms;
int __real_pthread_mutex_lock(pthread_mutex_t *m);
int __wrap_pthread_mutex_lock(pthread_mutex_t *m)
{
    if (m == slow_mutex && __atomic_load_n(&slow_armed, __ATOMIC_ACQUIRE) &&
        pthread_equal(pthread_self(), slow_thread)) {
        __atomic_store_n(&slow_armed, 0, __ATOMIC_RELEASE);
        usleep(slow_ms * 1000);
    }
    return __real_pthread_mutex_lock(m);
}

/* Is p mapped? (write(2) from it fails with EFAULT where it is not.) */
static bool mapped(const void *p)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    bool ok = write(fd[1], p, 1) == 1;
    close(fd[0]);
    close(fd[1]);
    return ok;
}

static struct mbt_daemon g_d;

static int setup(void **state)
{
    (void)state;
    const char *args[] = { "--budget", "4G", NULL };
    if (mbt_daemon_start(&g_d, args) != 0)
        return -1;
    setenv("MOONBRIGHT_RUNTIME_DIR", g_d.dir, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return mbt_daemon_stop(&g_d);
}

/* ---- one mapper ---- */

#define STARTERS 5
static mb_client *g_c;
static void *g_ptrs[STARTERS];

static void *first_async_call(void *arg)
{
    long i = (long)arg;
    slow_create = true;
    usleep(i == 0 ? 0 : i == 1 ? 50000 : 100000);
    assert_int_equal(mb_malloc_growable_async(g_c, 4 * MiB, 1024 * MiB, NULL, &g_ptrs[i]), 0);
    return NULL;
}

/* Threads make a client's first stream-ordered calls while the first of
 * them is slow to start the mapper: one mapper serves them all, so that
 * draining it maps every range (two mappers: the later one's jobs were
 * drained by nobody, and mb_close left its thread running on freed
 * ranges). */
static void first_async_calls_start_one_mapper(void **state)
{
    (void)state;
    setenv("MOONBRIGHT_TEST_HOST_GATES", "1", 1);
    setenv("MOONBRIGHT_GROW_SPARES", "0", 1);
    int rc = mb_open(&g_c, "starters");
    unsetenv("MOONBRIGHT_TEST_HOST_GATES");
    unsetenv("MOONBRIGHT_GROW_SPARES");
    assert_int_equal(rc, 0);
    void *w;
    assert_int_equal(mb_malloc_growable(g_c, MiB, 1024 * MiB, &w), 0);   /* the refill thread */
    assert_int_equal(mb_free(g_c, w), 0);
    assert_int_equal(mb_trim(g_c, 0), 0);
    amap_test_inject(g_c, 300 * 1000, 0);   /* 300 ms a mapping job */
    pthread_t th[STARTERS];
    for (long i = 0; i < STARTERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, first_async_call, (void *)i), 0);
    for (int i = 0; i < STARTERS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(created_slowly, 1);   /* the delay happened */
    amap_drain(g_c);
    int unmapped = 0;
    for (int i = 0; i < STARTERS; i++)
        unmapped += !mapped(g_ptrs[i]);
    printf("  after the drain %d of %d ranges unmapped\n", unmapped, STARTERS);
    assert_int_equal(unmapped, 0);
    for (int i = 0; i < STARTERS; i++)
        assert_int_equal(mb_free(g_c, g_ptrs[i]), 0);
    mb_close(g_c);
}

/* ---- an export and the background thread ---- */

/* A growable range is exported while the background thread cuts tails
 * idle for 200 ms, the exporter held up 300 ms between naming the range's
 * frames and sending them: the frames named stay the range's (none goes
 * to the exporter's frame cache, where its next allocation would take
 * memory the importer writes), and the importer's writes reach only the
 * shared range. */
static void export_holds_the_range(void **state)
{
    (void)state;
    setenv("MOONBRIGHT_IDLE_MS", "200", 1);
    setenv("MOONBRIGHT_GROW_SPARES", "0", 1);
    mb_client *c, *c2;
    int rc = mb_open(&c, "exporter");
    int rc2 = mb_open(&c2, "importer");
    unsetenv("MOONBRIGHT_IDLE_MS");
    unsetenv("MOONBRIGHT_GROW_SPARES");
    assert_int_equal(rc, 0);
    assert_int_equal(rc2, 0);
    void *p;
    assert_int_equal(mb_malloc_growable(c, 64 * MiB, 1024 * MiB, &p), 0);
    struct growset *g = c->refill->grow;
    /* The refill thread maps a tail ahead of the 64 MiB. */
    size_t n0 = 0;
    uint32_t ids0[256];
    for (int tries = 0; tries < 200 && n0 < 2; tries++) {
        usleep(10 * 1000);
        pthread_mutex_lock(&g->lock);
        struct growable *x = ptrmap_get(&g->map, p);
        n0 = x->s->n < 256 ? x->s->n : 256;
        for (size_t i = 0; i < n0; i++)
            ids0[i] = x->s->frames[i]->id;
        pthread_mutex_unlock(&g->lock);
    }
    assert_true(n0 >= 2);
    slow_mutex = &c->flock;
    slow_thread = pthread_self();
    slow_ms = 300;
    __atomic_store_n(&slow_armed, 1, __ATOMIC_RELEASE);
    mb_share_token tok;
    assert_int_equal(mb_export(c, p, &tok), 0);
    assert_int_equal(__atomic_load_n(&slow_armed, __ATOMIC_ACQUIRE), 0);   /* the delay happened */
    /* No frame named is in the exporter's cache. */
    size_t stray = 0;
    pthread_mutex_lock(&c->flock);
    for (size_t i = 0; i < n0; i++) {
        for (struct cframe *f = c->fc.cached_large; f; f = f->next_cached)
            stray += f->id == ids0[i];
        for (struct cframe *f = c->fc.cached; f; f = f->next_cached)
            stray += f->id == ids0[i];
    }
    pthread_mutex_unlock(&c->flock);
    assert_int_equal(stray, 0);
    void *q;
    size_t qsize = 0;
    assert_int_equal(mb_import(c2, &tok, &q, &qsize), 0);
    assert_true(qsize > 64 * MiB);   /* the tail was shared too */
    usleep(400 * 1000);              /* tails idle past 200 ms are cut */
    void *r;
    assert_int_equal(mb_malloc_growable(c, qsize - 64 * MiB, 1024 * MiB, &r), 0);
    memset(r, 0x11, 4096);
    ((volatile unsigned char *)q)[64 * MiB] = 0xAB;
    assert_int_equal(((volatile unsigned char *)r)[0], 0x11);
    assert_int_equal(mb_free(c, r), 0);
    assert_int_equal(mb_free(c2, q), 0);
    assert_int_equal(mb_free(c, p), 0);
    mb_close(c2);
    mb_close(c);
}

/* ---- statistics ---- */

static int g_stop;
static void *churn(void *arg)
{
    mb_client *c = arg;
    void *v[64];
    while (!__atomic_load_n(&g_stop, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < 64; i++)
            assert_int_equal(mb_malloc(c, 4096, &v[i]), 0);
        for (int i = 0; i < 64; i++)
            assert_int_equal(mb_free(c, v[i]), 0);
    }
    return NULL;
}

/* While another thread's cache fills from and flushes to the slab,
 * mb_stats never counts an object in both (slab_live never falls below
 * what is live and stays so: 256 KiB of 4 KiB objects). */
static void stats_count_cached_objects_once(void **state)
{
    (void)state;
    mb_client *c;
    assert_int_equal(mb_open(&c, "stats"), 0);
    void *held[64];
    for (int i = 0; i < 64; i++)
        assert_int_equal(mb_malloc(c, 4096, &held[i]), 0);
    g_stop = 0;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, churn, c), 0);
    size_t low = SIZE_MAX;
    for (int i = 0; i < 100000; i++) {
        mb_client_stats st;
        assert_int_equal(mb_stats(c, &st), 0);
        if (st.slab_live < low)
            low = st.slab_live;
    }
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    printf("  the least slab_live seen: %zu bytes (256 KiB live throughout)\n", low);
    assert_true(low >= 64 * 4096);
    for (int i = 0; i < 64; i++)
        assert_int_equal(mb_free(c, held[i]), 0);
    mb_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_async_calls_start_one_mapper),
        cmocka_unit_test(export_holds_the_range),
        cmocka_unit_test(stats_count_cached_objects_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
