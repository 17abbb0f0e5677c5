/* test_async_map.c: the stream-ordered slow path (client/async_map.c) on a
 * real GPU through a real daemon: a kernel enqueued right after the call on
 * the same stream writes through the new pointer; a kernel on another
 * stream finishes while a deliberately slow mapper is still mapping; a
 * failure injected after the pointer was returned is reported and nothing
 * hangs. The same for growable ranges (mb_malloc_growable_async,
 * mb_grow_async): tails mapped by the mapper, a growth into a mapping in
 * flight from another stream, a failed mapping, a range freed and reused
 * while its mappings are still queued; and thousands of gates queued on
 * one stream behind a slow mapper. Exits 77 (skipped) when
 * no GPU is usable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "async_map.h"
#include "client.h"
#include "harness.h"
#include "mbk_vspace.h"
#include "mbkernels.h"

static struct mbt_daemon g_d;
static mb_client *g_c;
static void *g_s, *g_t;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int alloc(size_t bytes, void *stream, struct stitched **s, double *us)
{
    double t0 = now_us();
    int rc = amap_take_error(g_c);
    if (rc == 0)
        rc = amap_alloc(g_c, bytes, stream, s);
    if (us)
        *us = now_us() - t0;
    return rc;
}

/* As the library frees a range of its own: unmapped once the stream's
 * work is done, by the background thread. */
static int release(struct stitched *s, void *stream)
{
    bool failed, unmapped;
    amap_settle(g_c, s, &failed, &unmapped);
    pthread_mutex_lock(&g_c->lock);
    int rc = maint_retire(g_c, s, stream, unmapped);
    pthread_mutex_unlock(&g_c->lock);
    return rc;
}

/* A slow mapper (300 ms): the call returns at once, the dependent kernel
 * writes correctly once mapped, another stream is not held up. */
static void test_slow_mapper(void **state)
{
    (void)state;
    const size_t bytes = (size_t)64 << 20;
    amap_test_inject(g_c, 300 * 1000, 0);
    struct stitched *s;
    double us;
    assert_int_equal(alloc(bytes, g_s, &s, &us), 0);
    double t0 = now_us();
    assert_int_equal(mbk_fill_pattern(s->va, bytes, 42, g_s), 0);
    assert_int_equal(mbk_spin(1000, g_t), 0);
    assert_int_equal(mbk_stream_sync(g_t), 0);
    double other_us = now_us() - t0;
    size_t in_flight = amap_in_flight(g_c);
    printf("  amap_alloc(64 MiB) returned in %.1f us; other stream done after %.1f us with "
           "%zu mapping(s) in flight\n", us, other_us, in_flight);
    assert_int_equal(in_flight, 1);
    assert_true(other_us < 200 * 1000.0);
    unsigned long long bad = 1;
    assert_int_equal(mbk_check_pattern(s->va, bytes, 0, 42, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(amap_in_flight(g_c), 0);
    assert_int_equal(release(s, g_s), 0);
    amap_test_inject(g_c, 0, 0);
}

/* Several ranges queued on two streams, each written right after its call. */
static void test_many(void **state)
{
    (void)state;
    struct stitched *s[8];
    for (int i = 0; i < 8; i++) {
        size_t bytes = (size_t)(i + 1) << 21;
        void *st = i % 2 ? g_t : g_s;
        assert_int_equal(alloc(bytes, st, &s[i], NULL), 0);
        assert_int_equal(mbk_fill_pattern(s[i]->va, bytes, 100 + i, st), 0);
    }
    for (int i = 0; i < 8; i++) {
        unsigned long long bad = 1;
        assert_int_equal(mbk_check_pattern(s[i]->va, (size_t)(i + 1) << 21, 0, 100 + i,
                                           i % 2 ? g_t : g_s, &bad, NULL), 0);
        assert_int_equal(bad, 0);
    }
    for (int i = 0; i < 8; i++)
        assert_int_equal(release(s[i], i % 2 ? g_t : g_s), 0);
}

/* An injected failure after the pointer was returned: the gate opens, the
 * dependent kernel finishes (into aliases of the range's own first frame),
 * the error comes back once, and later calls work. */
static void test_injected_failure(void **state)
{
    (void)state;
    const size_t bytes = (size_t)8 << 20;
    amap_test_inject(g_c, 50 * 1000, 1);
    struct stitched *s;
    assert_int_equal(alloc(bytes, g_s, &s, NULL), 0);
    assert_int_equal(mbk_fill_pattern(s->va, bytes, 7, g_s), 0);
    assert_int_equal(mbk_stream_sync(g_s), 0);   /* returns: the gate was opened */
    int err = amap_take_error(g_c);
    pthread_mutex_lock(&g_c->lock);
    int sticky = g_c->sticky;
    g_c->sticky = 0;
    pthread_mutex_unlock(&g_c->lock);
    int again = amap_take_error(g_c);
    printf("  injected failure reported as %d (%s), sticky %d, then %d\n", err, mb_strerror(err),
           sticky, again);
    assert_int_equal(err, MB_EBACKEND);
    assert_int_equal(sticky, MB_EBACKEND);
    assert_int_equal(again, 0);
    assert_int_equal(release(s, g_s), 0);
    struct stitched *s2;
    assert_int_equal(alloc(bytes, g_s, &s2, NULL), 0);
    assert_int_equal(mbk_fill_pattern(s2->va, bytes, 8, g_s), 0);
    unsigned long long bad = 1;
    assert_int_equal(mbk_check_pattern(s2->va, bytes, 0, 8, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(release(s2, g_s), 0);
    amap_test_inject(g_c, 0, 0);
}

static mb_client_stats stats(void)
{
    mb_client_stats st;
    assert_int_equal(mb_stats(g_c, &st), 0);
    return st;
}

/* Nothing in flight, nothing cached: the frames a call takes come from a
 * grant, as the frame plan makes them. */
static void settle_and_trim(void)
{
    assert_int_equal(mbk_stream_sync(g_s), 0);
    assert_int_equal(mbk_stream_sync(g_t), 0);
    for (int i = 0; i < 500 && amap_in_flight(g_c); i++)
        nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
    nanosleep(&(struct timespec){ 0, 100 * 1000 * 1000 }, NULL);   /* retired ranges unmapped */
    assert_int_equal(mb_trim(g_c, 0), 0);
}

/* Growable ranges in stream order, with a slow mapper (200 ms a job): the
 * calls return with their mappings in flight, a growth past a mapping in
 * flight queues behind it, a growth from another stream into it is gated
 * (no job), kernels on both streams write the new bytes once mapped, and
 * every byte reads back. */
static void test_grow_async(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20, first = 64 * mib, grown = 512 * mib, more = 520 * mib;
    settle_and_trim();
    mb_client_stats st0 = stats();
    amap_test_inject(g_c, 200 * 1000, 0);
    void *p;
    /* Room for 576 MiB: the growth to 512 maps to the end (its tail). */
    assert_int_equal(mb_malloc_growable_async(g_c, first, 576 * mib, g_s, &p), 0);
    size_t in_alloc = amap_in_flight(g_c);
    assert_int_equal(mbk_fill_pattern(p, first, 11, g_s), 0);
    assert_int_equal(mb_grow_async(g_c, p, grown, g_s), 0);
    size_t in_grow = amap_in_flight(g_c);
    assert_int_equal(mbk_fill_pattern((char *)p + first, grown - first, 12, g_s), 0);
    mb_client_stats st1 = stats();
    assert_int_equal(mb_grow_async(g_c, p, more, g_t), 0);
    size_t in_other = amap_in_flight(g_c);
    assert_int_equal(mbk_fill_pattern((char *)p + grown, more - grown, 13, g_t), 0);
    mb_client_stats st2 = stats();
    printf("  in flight after the allocation %zu, the growth %zu, the other stream's growth "
           "%zu; queued %llu, waits %llu; mapped ahead %zu MiB\n", in_alloc, in_grow, in_other,
           (unsigned long long)(st2.grow_queued - st0.grow_queued),
           (unsigned long long)(st2.grow_waits - st0.grow_waits), st1.grow_mapped_ahead >> 20);
    assert_int_equal(in_alloc, 1);
    assert_int_equal(in_grow, 2);    /* queued behind the first, no wait */
    assert_int_equal(in_other, 2);   /* inside the second: gated, nothing queued */
    assert_int_equal(st2.grow_queued - st0.grow_queued, 2);
    assert_int_equal(st2.grow_waits, st0.grow_waits);
    assert_int_equal(mb_usable_size(g_c, p), more);
    unsigned long long bad = 1;
    assert_int_equal(mbk_check_pattern(p, first, 0, 11, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mbk_check_pattern((char *)p + first, grown - first, 0, 12, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mbk_check_pattern((char *)p + grown, more - grown, 0, 13, g_t, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mb_free_async(g_c, p, g_s), 0);
    assert_int_equal(mbk_stream_sync(g_t), 0);
    /* A synchronous growth into a mapping in flight waits for it. */
    settle_and_trim();   /* (the freed range is not reused) */
    assert_int_equal(mb_malloc_growable(g_c, 16 * mib, (size_t)1 << 30, &p), 0);
    assert_int_equal(mb_grow_async(g_c, p, 100 * mib, g_s), 0);   /* and a tail ahead */
    size_t in_async = amap_in_flight(g_c);
    assert_int_equal(mb_grow(g_c, p, 110 * mib), 0);
    size_t in_sync = amap_in_flight(g_c);
    printf("  a synchronous growth into it: in flight %zu before, %zu after\n", in_async, in_sync);
    assert_int_equal(in_async, 1);
    assert_int_equal(in_sync, 0);
    amap_test_inject(g_c, 0, 0);
    assert_int_equal(mbk_fill_pattern(p, 110 * mib, 14, g_s), 0);
    assert_int_equal(mbk_check_pattern(p, 110 * mib, 0, 14, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mb_free_async(g_c, p, g_s), 0);
}

/* A growth's mapping fails after the call returned: the gate opens, the
 * range ends where it was mapped, the next allocation reports the error
 * once, and the range grows again afterwards. */
static void test_grow_async_failure(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20;
    void *p;
    settle_and_trim();
    assert_int_equal(mb_malloc_growable(g_c, 16 * mib, (size_t)1 << 30, &p), 0);
    amap_test_inject(g_c, 50 * 1000, 1);
    assert_int_equal(mb_grow_async(g_c, p, 600 * mib, g_s), 0);
    assert_int_equal(mbk_stream_sync(g_s), 0);   /* returns: the gate was opened */
    size_t usable = mb_usable_size(g_c, p);
    void *q = NULL;
    int err = mb_malloc_async(g_c, 32 * mib, g_s, &q);
    int again = mb_malloc_async(g_c, 32 * mib, g_s, &q);
    printf("  after the failed mapping: usable %zu MiB, next call %d (%s), then %d\n",
           usable >> 20, err, mb_strerror(err), again);
    assert_true(usable >= 16 * mib && usable < 600 * mib);
    assert_int_equal(err, MB_EBACKEND);
    assert_int_equal(again, 0);
    assert_int_equal(mb_free_async(g_c, q, g_s), 0);
    amap_test_inject(g_c, 0, 0);
    assert_int_equal(mb_grow_async(g_c, p, 600 * mib, g_s), 0);
    assert_int_equal(mbk_fill_pattern(p, 600 * mib, 21, g_s), 0);
    unsigned long long bad = 1;
    assert_int_equal(mbk_check_pattern(p, 600 * mib, 0, 21, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mb_free_async(g_c, p, g_s), 0);
}

/* A growable range freed on a stream while a kernel there still runs is
 * reused at once by a stream-ordered allocation on the same stream (its
 * work runs after the kernel), never by one on another stream; and a
 * trim meanwhile leaves it mapped. */
static void test_grow_async_reuse(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20, bytes = 64 * mib;
    settle_and_trim();
    void *p, *q, *r;
    assert_int_equal(mb_malloc_growable_async(g_c, bytes, (size_t)1 << 30, g_s, &p), 0);
    assert_int_equal(mbk_fill_pattern(p, bytes, 31, g_s), 0);
    assert_int_equal(mbk_spin(300ull * 1000 * 1000, g_s), 0);   /* 300 ms */
    assert_int_equal(mbk_fill_pattern(p, bytes, 32, g_s), 0);   /* after the spin */
    assert_int_equal(mb_free_async(g_c, p, g_s), 0);
    assert_int_equal(mb_malloc_growable_async(g_c, bytes, (size_t)1 << 30, g_t, &q), 0);
    assert_int_equal(mb_malloc_growable_async(g_c, bytes, (size_t)1 << 30, g_s, &r), 0);
    assert_int_equal(mb_trim(g_c, 0), 0);
    int done = g_c->be->ops->stream_query(g_c->be, g_s);
    printf("  freed %p while its stream ran; another stream got %p, the same stream %p "
           "(its work done at that point: %d)\n", p, q, r, done);
    assert_ptr_not_equal(q, p);
    assert_ptr_equal(r, p);
    assert_int_equal(done, 0);   /* the reuse came before the kernel ended */
    unsigned long long bad = 1;
    assert_int_equal(mbk_check_pattern(r, bytes, 0, 32, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mbk_fill_pattern(r, bytes, 33, g_s), 0);
    assert_int_equal(mbk_check_pattern(r, bytes, 0, 33, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mb_free_async(g_c, q, g_t), 0);
    assert_int_equal(mb_free_async(g_c, r, g_s), 0);
}

/* A growable range freed while its mappings are still queued (a 200 ms
 * mapper): the free returns with them in flight, a trim leaves the range
 * mapped, a stream-ordered allocation on the same stream takes it at once
 * (still in flight) and reads what the former owner's kernels wrote past
 * the queued mapping; one on another stream does not take it. The growth
 * mapped twice its step ahead, and a range is taken only by a size that
 * would strand at most one tail of it: the same stream asks for what the
 * range holds. */
static void test_grow_async_free_queued(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20, first = 64 * mib, grown = 300 * mib;
    settle_and_trim();
    amap_test_inject(g_c, 200 * 1000, 0);
    void *p, *q, *r;
    assert_int_equal(mb_malloc_growable_async(g_c, first, (size_t)1 << 30, g_s, &p), 0);
    assert_int_equal(mbk_fill_pattern(p, first, 41, g_s), 0);
    assert_int_equal(mb_grow_async(g_c, p, grown, g_s), 0);
    assert_int_equal(mbk_fill_pattern((char *)p + first, grown - first, 42, g_s), 0);
    assert_int_equal(mb_free_async(g_c, p, g_s), 0);
    size_t in_free = amap_in_flight(g_c);
    assert_int_equal(mb_trim(g_c, 0), 0);
    size_t held = stats().bytes_idle;
    assert_true(held >= grown);
    assert_int_equal(mb_malloc_growable_async(g_c, first, (size_t)1 << 30, g_t, &q), 0);
    assert_int_equal(mb_malloc_growable_async(g_c, held, (size_t)1 << 30, g_s, &r), 0);
    size_t in_reuse = amap_in_flight(g_c);
    printf("  freed %p with %zu mapping(s) in flight; the same stream got %p with %zu in flight, "
           "another stream %p\n", p, in_free, r, in_reuse, q);
    assert_true(in_free >= 1);    /* the free did not wait for the mapper */
    assert_ptr_equal(r, p);
    assert_true(in_reuse >= 1);   /* nor did the reuse */
    assert_ptr_not_equal(q, p);
    assert_int_equal(mb_usable_size(g_c, r), held);
    unsigned long long bad = 1;
    assert_int_equal(mbk_check_pattern(r, first, 0, 41, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mbk_check_pattern((char *)r + first, grown - first, 0, 42, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    amap_test_inject(g_c, 0, 0);
    assert_int_equal(mbk_fill_pattern(r, grown, 43, g_s), 0);
    assert_int_equal(mbk_check_pattern(r, grown, 0, 43, g_s, &bad, NULL), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mb_free_async(g_c, q, g_t), 0);
    assert_int_equal(mb_free_async(g_c, r, g_s), 0);
}

/* A job that maps nothing. */
static int noop_job(void *arg, bool fail)
{
    (void)arg;
    (void)fail;
    return 0;
}

/* Twenty thousand jobs on one stream behind a slow mapper: the driver may
 * make a stream operation wait for room in the stream's queue until the
 * mapper has opened earlier gates, so no lock the mapper takes may be
 * held meanwhile. Every call returns and the stream completes. */
static void test_many_gates(void **state)
{
    (void)state;
    const int n = 20000;
    settle_and_trim();
    amap_test_inject(g_c, 50, 0);
    double worst = 0, t0 = now_us();
    for (int i = 0; i < n; i++) {
        uint32_t seq;
        double t = now_us();
        assert_int_equal(amap_run_async(g_c, g_s, noop_job, NULL, &seq), 0);
        if (now_us() - t > worst)
            worst = now_us() - t;
    }
    double queued = now_us() - t0;
    size_t left = amap_in_flight(g_c);
    assert_int_equal(mbk_stream_sync(g_s), 0);
    double done = now_us() - t0;
    amap_test_inject(g_c, 0, 0);
    printf("  %d jobs queued in %.1f ms (the slowest call %.1f ms, %zu still queued then); "
           "the stream done after %.1f ms\n", n, queued / 1e3, worst / 1e3, left, done / 1e3);
    assert_int_equal(amap_in_flight(g_c), 0);
}

int main(void)
{
    const char *extra[] = { "--backend", "cuda", "--budget", "8G", NULL };
    if (mbt_daemon_start(&g_d, extra) != 0) {
        printf("SKIP: moonbrightd --backend cuda did not start (no usable GPU?)\n");
        return 77;
    }
    setenv("MOONBRIGHT_RUNTIME_DIR", g_d.dir, 1);
    setenv("MOONBRIGHT_GROW_SPARES", "0", 1);   /* freed ranges are the only idle ones */
    int rc = mb_open(&g_c, "amap-gpu");
    if (rc != 0 || strcmp(mb_backend_name(g_c), "cuda") != 0) {
        printf("SKIP: no cuda client (%s)\n", rc ? mb_strerror(rc) : mb_backend_name(g_c));
        if (rc == 0)
            mb_close(g_c);
        mbt_daemon_stop(&g_d);
        return 77;
    }
    if (mbk_stream_create(&g_s) != 0 || mbk_stream_create(&g_t) != 0)
        return 1;
    /* Every kernel this test launches, once, before any stream is gated. */
    void *p;
    unsigned long long bad;
    if (mb_malloc(g_c, 1 << 20, &p) != 0 || mbk_fill_pattern(p, 1 << 20, 1, g_s) != 0 ||
        mbk_check_pattern(p, 1 << 20, 0, 1, g_s, &bad, NULL) != 0 || mbk_test_warm() != 0 ||
        mbk_spin(0, g_s) != 0 ||
        mbk_stream_sync(g_s) != 0 || mb_free(g_c, p) != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_mapper),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_injected_failure),
        cmocka_unit_test(test_grow_async),
        cmocka_unit_test(test_grow_async_failure),
        cmocka_unit_test(test_grow_async_reuse),
        cmocka_unit_test(test_grow_async_free_queued),
        cmocka_unit_test(test_many_gates),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    amap_close(g_c);
    mbk_stream_destroy(g_s);
    mbk_stream_destroy(g_t);
    mb_close(g_c);
    mbt_daemon_stop(&g_d);
    return failed ? 1 : 0;
}
