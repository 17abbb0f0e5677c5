/* test_threads.c: many threads share one client: every tier (slab, heap,
 * ranges of their own), synchronous and stream calls, frees from threads
 * other than the allocating one, trims racing with allocations; every
 * block's contents are checked before it is freed. Run under
 * ThreadSanitizer in CI (MB_TSAN) and under AddressSanitizer. */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "harness.h"

#define THREADS 8
#define LIVE 16
#define OPS 3000

struct blk { uint8_t *p; size_t size, max; uint8_t tag; };   /* max: growable ranges */

/* A handoff slot: one thread's block, freed by another. */
static struct { pthread_mutex_t m; struct blk b; } g_hand = { PTHREAD_MUTEX_INITIALIZER, { 0 } };
static mb_client *g_c;

static uint64_t step(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t pick(uint64_t *s)
{
    switch (step(s) % 8) {
    case 0: case 1: case 2: return 3 + step(s) % 4096;               /* slab (3: the three spots differ) */
    case 3: case 4: return 4096 + step(s) % (256 << 10);              /* slab, big classes */
    case 5: case 6: return (256 << 10) + step(s) % (4 << 20);         /* heap */
    default: return (8 << 20) + step(s) % (8 << 20);                  /* heap, own arenas */
    }
}

/* Host backend: the memory is the process's; write the ends and middle. */
static void fill(struct blk *b)
{
    b->p[0] = b->tag;
    b->p[b->size / 2] = (uint8_t)(b->tag + 1);
    b->p[b->size - 1] = (uint8_t)(b->tag + 2);
}

static int intact(const struct blk *b)
{
    return b->p[0] == b->tag && b->p[b->size / 2] == (uint8_t)(b->tag + 1) &&
           b->p[b->size - 1] == (uint8_t)(b->tag + 2);
}

static int release(struct blk *b, void *stream, bool async)
{
    if (!intact(b)) {
        fprintf(stderr, "block %p of %zu bytes changed behind its owner's back\n", (void *)b->p, b->size);
        return -100;
    }
    return async ? mb_free_async(g_c, b->p, stream) : mb_free(g_c, b->p);
}

static void *worker(void *arg)
{
    uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    void *stream = (void *)(uintptr_t)(0x1000 * ((uintptr_t)arg + 1));   /* host: any handle */
    struct blk live[LIVE];
    size_t n = 0;
    intptr_t bad = 0;
    for (int op = 0; op < OPS && !bad; op++) {
        bool async = step(&s) % 2;
        if (n < LIVE && (n == 0 || step(&s) % 100 < 55)) {
            struct blk b = { .size = pick(&s), .tag = (uint8_t)step(&s) };
            void *p;
            int rc;
            if (step(&s) % 16 == 0) {   /* a growable range, room for twice its size */
                b.size = (1 << 20) + step(&s) % (8 << 20);
                b.max = 2 * b.size;
                rc = mb_malloc_growable(g_c, b.size, b.max, &p);
            } else {
                rc = async ? mb_malloc_async(g_c, b.size, stream, &p) : mb_malloc(g_c, b.size, &p);
            }
            if (rc != 0) {
                bad = rc;
                break;
            }
            b.p = p;
            fill(&b);
            live[n++] = b;
        } else if (live[n - 1].max > live[n - 1].size && step(&s) % 2) {
            /* grow the newest block in place; what it held stays */
            struct blk *b = &live[n - 1];
            size_t to = b->size + 1 + step(&s) % (b->max - b->size);
            if (!intact(b) || mb_grow(g_c, b->p, to) != 0 || !intact(b)) {
                bad = -101;
                break;
            }
            b->size = to;
            fill(b);
        } else {
            size_t i = step(&s) % n;
            struct blk b = live[i];
            live[i] = live[--n];
            if (step(&s) % 8 == 0) {
                /* hand it to whichever thread comes next; free what was there */
                pthread_mutex_lock(&g_hand.m);
                struct blk prev = g_hand.b;
                g_hand.b = b;
                pthread_mutex_unlock(&g_hand.m);
                if (prev.p && (bad = release(&prev, stream, async)) != 0)
                    break;
            } else if ((bad = release(&b, stream, async)) != 0) {
                break;
            }
        }
        if (step(&s) % 500 == 0)
            mb_trim(g_c, 0);
    }
    while (!bad && n)
        bad = release(&live[--n], stream, false);
    return (void *)bad;
}

static void shared_client(void **state)
{
    (void)state;
    struct mbt_daemon d;
    static const char *const args[] = { "--frame-size", "2M", "--budget", "8G", NULL };
    assert_int_equal(mbt_daemon_start(&d, args), 0);
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    setenv("MOONBRIGHT_IDLE_MS", "50", 1);   /* the idle policy runs during the test */
    assert_int_equal(mb_open(&g_c, "threads"), 0);
    const char *e = getenv("MB_TEST_THREADS");
    int nt = e && atoi(e) > 0 && atoi(e) <= THREADS ? atoi(e) : THREADS;
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < (uintptr_t)nt; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < nt; i++) {
        void *r;
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_int_equal((intptr_t)r, 0);
    }
    if (g_hand.b.p)
        assert_int_equal(release(&g_hand.b, NULL, false), 0);
    mb_client_stats st;
    assert_int_equal(mb_stats(g_c, &st), 0);
    assert_int_equal(st.bytes_live, 0);
    assert_true(st.heap_hits > 0);            /* freed memory was reused mapped */
    printf("heap: %llu hits, %llu extends, %llu holes filled again\n", (unsigned long long)st.heap_hits,
           (unsigned long long)st.heap_extends, (unsigned long long)st.heap_fills);
    /* Everything idle goes back on trim; the daemon's books agree. */
    assert_int_equal(mb_trim(g_c, 0), 0);
    assert_int_equal(mb_stats(g_c, &st), 0);
    assert_int_equal(st.bytes_idle, 0);
    assert_int_equal(st.bytes_granted, 0);
    mb_close(g_c);
    struct json *j = mbt_status(&d);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "frames_granted"), 0);
    json_free(j);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Frees of a small object: a second free, on a stream or not, is refused
 * with MB_ENOENT and changes nothing; so is an interior pointer. The
 * framework hook refuses a device its daemon does not serve. */
static void double_free_and_hook(void **state)
{
    (void)state;
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, NULL), 0);
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    setenv("MOONBRIGHT_DEVICE", "0", 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "frees"), 0);
    void *stream = (void *)(uintptr_t)0x1234;
    void *p, *q;
    assert_int_equal(mb_malloc_async(c, 1000, stream, &p), 0);
    assert_int_equal(mb_free_async(c, (char *)p + 256, stream), MB_ENOENT);   /* interior */
    assert_int_equal(mb_free_async(c, p, stream), 0);
    assert_int_equal(mb_free_async(c, p, stream), MB_ENOENT);   /* double, on a stream */
    assert_int_equal(mb_free(c, p), MB_ENOENT);                  /* and synchronously */
    assert_int_equal(mb_malloc(c, 1000, &q), 0);
    assert_int_equal(mb_free(c, q), 0);
    assert_int_equal(mb_free(c, q), MB_ENOENT);
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    assert_int_equal(st.bytes_live, 0);
    mb_close(c);
    void *t = mb_torch_malloc(4096, 1, NULL);
    assert_null(t);                           /* device 1 is not this daemon's */
    t = mb_torch_malloc(4096, 0, NULL);
    assert_non_null(t);
    mb_torch_free(t, 4096, 0, NULL);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A thread cache's first refill of a large slab class makes one chunk:
 * the first 256 KiB object (8 to a 2 MiB chunk; a refill wants 9) maps
 * 2 MiB from one frame, not two chunks from two grants. */
static void first_refill_makes_one_chunk(void **state)
{
    (void)state;
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, NULL), 0);
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "refill"), 0);
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    assert_int_equal(st.slab_mapped, 0);
    void *p[9];
    assert_int_equal(mb_malloc(c, 256u << 10, &p[0]), 0);
    assert_int_equal(mb_stats(c, &st), 0);
    assert_int_equal(st.slab_mapped, st.frame_bytes);
    assert_int_equal(st.frames_imported, 1);
    for (int i = 1; i < 9; i++)   /* the ninth needs a second chunk */
        assert_int_equal(mb_malloc(c, 256u << 10, &p[i]), 0);
    assert_int_equal(mb_stats(c, &st), 0);
    assert_int_equal(st.slab_mapped, 2 * st.frame_bytes);
    for (int i = 0; i < 9; i++)
        assert_int_equal(mb_free(c, p[i]), 0);
    mb_close(c);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

int main(void)
{
    /* double_free_and_hook last: the hook's client lives on, and its
     * background thread reads the environment the other tests set. */
    const struct CMUnitTest tests[] = { cmocka_unit_test(shared_client),
                                        cmocka_unit_test(first_refill_makes_one_chunk),
                                        cmocka_unit_test(double_free_and_hook) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
