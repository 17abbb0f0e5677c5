/* test_late_grant.c: grants whose answers come late. When the client
 * gave up first (every daemon reply delayed up to 50 ms, a client timeout
 * of 25 ms), it hands each late grant's frames back by id and closes their
 * descriptors, so its later grants never trip over stray descriptors and
 * the daemon never charges it for frames it does not hold. While one
 * thread waits for a grant (the daemon stopped), another is served from
 * the frames the process caches. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "harness.h"

static uint64_t daemon_granted_bytes(const struct mbt_daemon *d)
{
    struct json *j = mbt_status(d);
    assert_non_null(j);
    uint64_t n = (uint64_t)json_num(j, "frames_granted");
    json_free(j);
    return n * (2u << 20);
}

static void late_grants_handed_back(void **state)
{
    (void)state;
    struct mbt_daemon d;
    static const char *const args[] = { "--frame-size", "2M", "--budget", "4G", NULL };
    static const char *const env[] = { "MOONBRIGHT_FAULTS=delay=1,seed=7", NULL };
    assert_int_equal(mbt_daemon_start_env(&d, args, env), 0);
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    setenv("MOONBRIGHT_TIMEOUT_MS", "25", 1);
    setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);   /* one grant per frame: many replies */
    mb_client *c = NULL;
    int rc = MB_EUNAVAIL;
    for (int tries = 0; rc != 0 && tries < 50; tries++)
        rc = mb_open(&c, "late");   /* the hello itself may time out */
    assert_int_equal(rc, 0);
    int ok = 0, unavailable = 0, proto = 0, n = 0;
    /* 60 allocations, or more until one timed out */
    for (; n < 60 || (n < 600 && unavailable == 0); n++) {
        void *p;
        rc = mb_malloc(c, (size_t)12 << 20, &p);
        ok += rc == 0;
        unavailable += rc == MB_EUNAVAIL;
        proto += rc == MB_EPROTO;
        if (rc == 0)
            assert_int_equal(mb_free(c, p), 0);
        mb_trim(c, 0);   /* the next allocation needs a grant again */
    }
    printf("%d allocations: %d served, %d timed out, %d protocol errors\n", n, ok, unavailable, proto);
    assert_true(unavailable > 0);   /* the test really made answers late */
    assert_int_equal(proto, 0);     /* no stray descriptor confused a grant */
    /* Meanwhile the daemon serves a client that waits long enough (how
     * many of the 25 ms calls made it depends on the machine's load). */
    setenv("MOONBRIGHT_TIMEOUT_MS", "10000", 1);
    mb_client *patient = NULL;
    assert_int_equal(mb_open(&patient, "late"), 0);
    void *q;
    assert_int_equal(mb_malloc(patient, (size_t)12 << 20, &q), 0);
    assert_int_equal(mb_free(patient, q), 0);
    mb_close(patient);
    /* Late answers are handed back by the background thread as they come:
     * the daemon's books converge on what the client holds. */
    mb_client_stats st;
    uint64_t theirs = 0;
    for (int i = 0; i < 100; i++) {
        mb_trim(c, 0);
        assert_int_equal(mb_stats(c, &st), 0);
        theirs = daemon_granted_bytes(&d);
        if (theirs == st.bytes_granted)
            break;
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    assert_int_equal(theirs, st.bytes_granted);
    mb_close(c);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

struct waiter {
    mb_client *c;
    void *p;
    int rc;
    int done;   /* atomic */
};

static void *heap_miss(void *arg)
{
    struct waiter *w = arg;
    w->rc = mb_malloc(w->c, (size_t)512 << 20, &w->p);   /* a 512 MiB frame: none cached */
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A grant lets go of the frame lock while it waits for the daemon: with
 * the daemon stopped (SIGSTOP), one thread's heap miss waits for its grant
 * while another thread's growable allocation is served from cached frames
 * and returns first. */
static void cache_served_while_a_grant_waits(void **state)
{
    (void)state;
    struct mbt_daemon d;
    static const char *const args[] = { "--frame-size", "2M", "--budget", "4G", NULL };
    assert_int_equal(mbt_daemon_start_env(&d, args, NULL), 0);
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    setenv("MOONBRIGHT_TIMEOUT_MS", "10000", 1);
    setenv("MOONBRIGHT_LARGE_FRAMES", "1", 1);   /* (the test above turned them off) */
    setenv("MOONBRIGHT_HEAP_REPAIR", "0", 1);    /* a heap miss takes no cached frame of another size */
    setenv("MOONBRIGHT_GROW_SPARES", "0", 1);    /* nor does a spare range */
    setenv("MOONBRIGHT_IDLE_MS", "600000", 1);   /* the cache stays, */
    setenv("MOONBRIGHT_CACHE", "1G", 1);         /* and a grant hands none of it back first */
    mb_client *c = NULL;
    assert_int_equal(mb_open(&c, "waiter"), 0);
    /* Cached frames: growable ranges freed and trimmed into the cache. */
    void *r[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(mb_malloc_growable(c, (size_t)8 << 20, (size_t)64 << 20, &r[i]), 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(mb_free(c, r[i]), 0);
    assert_int_equal(mb_trim(c, (size_t)1 << 30), 0);
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    assert_true(st.bytes_cached >= ((size_t)32 << 20));

    assert_int_equal(kill(d.pid, SIGSTOP), 0);
    struct waiter w = { .c = c };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, heap_miss, &w), 0);
    struct timespec ts = { 0, 300 * 1000 * 1000 };
    nanosleep(&ts, NULL);   /* the miss is in its grant by now */
    void *g;
    assert_int_equal(mb_malloc_growable(c, (size_t)4 << 20, (size_t)64 << 20, &g), 0);
    int waiting = !__atomic_load_n(&w.done, __ATOMIC_ACQUIRE);
    assert_int_equal(kill(d.pid, SIGCONT), 0);
    pthread_join(t, NULL);
    assert_true(waiting);   /* served while the grant waited */
    assert_int_equal(w.rc, 0);
    assert_int_equal(mb_free(c, w.p), 0);
    assert_int_equal(mb_free(c, g), 0);
    assert_int_equal(mb_trim(c, 0), 0);
    assert_int_equal(mb_stats(c, &st), 0);
    assert_int_equal(st.bytes_granted, 0);
    assert_int_equal(daemon_granted_bytes(&d), 0);
    mb_close(c);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unsetenv("MOONBRIGHT_HEAP_REPAIR");
    unsetenv("MOONBRIGHT_GROW_SPARES");
    unsetenv("MOONBRIGHT_IDLE_MS");
    unsetenv("MOONBRIGHT_CACHE");
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(late_grants_handed_back),
                                        cmocka_unit_test(cache_served_while_a_grant_waits) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
