/* test_heap.c: the heap keeps freed memory mapped, and gives it back only
 * the ways it should: the idle policy ($MOONBRIGHT_IDLE_MS), mb_trim and a
 * reclaim notice; the daemon's books balance after each, and mbctl tenants
 * shows the idle bytes and the allocator's counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "harness.h"
#include "pattern.h"

static size_t granted(mb_client *c)
{
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    return st.bytes_granted;
}

static size_t idle(mb_client *c)
{
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    return st.bytes_idle;
}

/* A daemon of its own for a test, and the clients opened next pointed at
 * it, with their idle policy at idle_ms. */
static void start_daemon(struct mbt_daemon *d, const char *const *args, const char *idle_ms)
{
    assert_int_equal(mbt_daemon_start(d, args), 0);
    setenv("MOONBRIGHT_RUNTIME_DIR", d->dir, 1);
    setenv("MOONBRIGHT_IDLE_MS", idle_ms, 1);
}

/* Allocate and free a mix of heap sizes; the memory stays mapped. */
static void churn(mb_client *c)
{
    static const size_t sizes[] = { 20u << 20, 3u << 20, 12u << 20, 1u << 20, 40u << 20 };
    void *p[5];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 5; i++)
            assert_int_equal(mb_malloc(c, sizes[i], &p[i]), 0);
        for (int i = 0; i < 5; i++)
            assert_int_equal(mb_free(c, p[i]), 0);
    }
}

static void idle_policy_and_trim(void **state)
{
    (void)state;
    struct mbt_daemon d;
    start_daemon(&d, NULL, "400");
    mb_client *c;
    assert_int_equal(mb_open(&c, "heap-idle"), 0);
    churn(c);
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    assert_int_equal(st.bytes_live, 0);
    assert_true(st.heap_hits > 0);            /* later rounds reused what the first mapped */
    assert_true(st.bytes_idle > 0);
    /* mbctl tenants sees the idle memory and the counters... */
    assert_true(WAIT_FOR(2000, mbt_tenant_num(&d, "heap-idle", "heap_hits") > 0));
    /* ...and, once the idle policy has run, idle bytes fall to zero and
     * every frame is back with the daemon. */
    assert_true(WAIT_FOR(5000, idle(c) == 0 && granted(c) == 0));
    assert_true(WAIT_FOR(2000, mbt_status_num(&d, "frames_granted") == 0));
    assert_true(WAIT_FOR(2000, mbt_tenant_num(&d, "heap-idle", "idle") == 0));
    assert_true(mbt_tenant_num(&d, "heap-idle", "unmaps") > 0);
    /* mb_trim gives it back at once. */
    setenv("MOONBRIGHT_IDLE_MS", "600000", 1);
    mb_client *t;
    assert_int_equal(mb_open(&t, "heap-trim"), 0);
    churn(t);
    assert_true(idle(t) > 0 && granted(t) > 0);
    assert_int_equal(mb_trim(t, 0), 0);
    assert_int_equal(idle(t), 0);
    assert_int_equal(granted(t), 0);
    mb_close(t);
    mb_close(c);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A client holding idle heap memory answers a reclaim notice: another
 * client's grant, refused for budget at first, is served. */
static void reclaim_returns_idle(void **state)
{
    (void)state;
    struct mbt_daemon d;
    static const char *const args[] = { "--budget", "128M", "--reserve", "0", NULL };
    start_daemon(&d, args, "600000");   /* only the notice can move it */
    mb_client *a, *b;
    assert_int_equal(mb_open(&a, "holder"), 0);
    void *p;
    assert_int_equal(mb_malloc(a, 96u << 20, &p), 0);
    assert_int_equal(mb_free(a, p), 0);
    size_t held = granted(a);
    assert_true(held >= (96u << 20));
    assert_true(WAIT_FOR(2000, mbt_tenant_num(&d, "holder", "cached") > 0));   /* reported */
    assert_int_equal(mb_open(&b, "needy"), 0);
    void *q;
    assert_int_equal(mb_malloc(b, 64u << 20, &q), 0);   /* waits for the reclaim */
    assert_true(granted(a) < held);
    assert_int_equal(mb_free(b, q), 0);
    mb_close(b);
    mb_close(a);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* The punching sequence: a 64 MiB block lives at the start of a free
 * 256 MiB arena whose other 192 MiB then stay free for 1000 allocations
 * (of 200 MiB: too large to land there); a 512 MiB request misses. Returns the bytes the process holds after it,
 * and checks both blocks' data. */
static size_t punch_sequence(mb_client *c, uint64_t *punched)
{
    const size_t M = 1u << 20;
    mb_client_stats st0, st1;
    assert_int_equal(mb_stats(c, &st0), 0);
    void *x, *live, *big, *t;
    assert_int_equal(mb_malloc(c, 256 * M, &x), 0);
    assert_int_equal(mb_free(c, x), 0);
    assert_int_equal(mb_malloc(c, 64 * M, &live), 0);
    assert_ptr_equal(live, x);                       /* the start of the free arena */
    pattern_fill((uintptr_t)live, 64 * M, 7, 0, 1 << 16);
    for (int i = 0; i < 1000; i++) {                 /* the rest of it ages */
        assert_int_equal(mb_malloc(c, 200 * M, &t), 0);
        assert_int_equal(mb_free(c, t), 0);
    }
    assert_int_equal(mb_malloc(c, 512 * M, &big), 0);
    pattern_fill((uintptr_t)big, 512 * M, 9, 0, 1 << 16);
    assert_int_equal(pattern_check((uintptr_t)live, 64 * M, 7, 0, 1 << 16), -1);
    assert_int_equal(pattern_check((uintptr_t)big, 512 * M, 9, 0, 1 << 16), -1);
    assert_int_equal(mb_stats(c, &st1), 0);
    *punched = st1.heap_punches - st0.heap_punches;
    assert_int_equal(mb_free(c, big), 0);
    assert_int_equal(mb_free(c, live), 0);
    return st1.bytes_granted;
}

/* $MOONBRIGHT_HEAP_PUNCH=1: a large miss takes the whole 32 MiB frames
 * under a free block that stayed free for 1000 allocations (the arena
 * keeps a hole there) instead of asking the daemon for all of it; the live
 * block's data stays, and trim gives every frame back, hole or not. Both
 * ways the miss first stitches the idle 200 MiB arena: held 256 + 200 +
 * 312 MiB without punching, 256 + 200 + 120 with it. Extending arenas is
 * off here: the free end would serve the miss before any punching. */
static void punching_reuses_stale_free_frames(void **state)
{
    (void)state;
    struct mbt_daemon d;
    start_daemon(&d, NULL, "600000");
    setenv("MOONBRIGHT_HEAP_EXTEND", "0", 1);
    const size_t M = 1u << 20;
    uint64_t punched;
    /* Off (the default): the miss is granted whole. */
    unsetenv("MOONBRIGHT_HEAP_PUNCH");
    mb_client *c;
    assert_int_equal(mb_open(&c, "no-punch"), 0);
    assert_true(punch_sequence(c, &punched) >= 768 * M);
    assert_int_equal(punched, 0);
    mb_close(c);
    /* On: the 192 MiB free block's six frames serve the miss. */
    setenv("MOONBRIGHT_HEAP_PUNCH", "1", 1);
    assert_int_equal(mb_open(&c, "punch"), 0);
    size_t held = punch_sequence(c, &punched);
    unsetenv("MOONBRIGHT_HEAP_PUNCH");
    unsetenv("MOONBRIGHT_HEAP_EXTEND");
    assert_int_equal(punched, 6);
    assert_true(held >= 576 * M && held < 768 * M);
    assert_int_equal(mb_trim(c, 0), 0);
    assert_int_equal(granted(c), 0);
    assert_int_equal(idle(c), 0);
    mb_close(c);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* $MOONBRIGHT_HEAP_CLOSE_FIT=1 with arenas that extend (the default): a
 * KV cache grown by reallocation (each step a block 2 MiB larger, then the
 * old one freed) for 6 requests at once holds little more than it uses.
 * A close-fit miss must not extend an arena past the free blocks it
 * refused: they stayed mapped, and the heap grew to 2.9x its live bytes
 * on a replay. */
static void close_fit_holds_its_footprint(void **state)
{
    (void)state;
    struct mbt_daemon d;
    start_daemon(&d, NULL, "600000");
    setenv("MOONBRIGHT_HEAP_CLOSE_FIT", "1", 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "close-fit"), 0);
    unsetenv("MOONBRIGHT_HEAP_CLOSE_FIT");
    const size_t M = 1u << 20;
    enum { R = 6, STEPS = 40 };
    void *p[R];
    size_t size[R], peak_live = 0, peak_granted = 0;
    for (int r = 0; r < R; r++) {
        size[r] = (size_t)(12 + 6 * r) * M;
        assert_int_equal(mb_malloc(c, size[r], &p[r]), 0);
    }
    for (int k = 0; k < STEPS; k++) {
        size_t live = 0;
        for (int r = 0; r < R; r++) {
            void *q;
            assert_int_equal(mb_malloc(c, size[r] + 2 * M, &q), 0);
            assert_int_equal(mb_free(c, p[r]), 0);
            p[r] = q;
            size[r] += 2 * M;
            live += size[r];
        }
        peak_live = live > peak_live ? live : peak_live;
        size_t g = granted(c);
        peak_granted = g > peak_granted ? g : peak_granted;
    }
    assert_true(peak_granted < 2 * peak_live);
    for (int r = 0; r < R; r++)
        assert_int_equal(mb_free(c, p[r]), 0);
    assert_int_equal(mb_trim(c, 0), 0);
    assert_int_equal(granted(c), 0);
    mb_close(c);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Punching with a daemon unit of 32 MiB: the heap's frames are whole
 * units, asked for as a plain grant (a capped grant of order 0 would read
 * as no cap on the wire, and larger frames would come back). */
static void punching_with_large_units(void **state)
{
    (void)state;
    static const char *const args[] = { "--frame-size", "32M", "--budget", "1G", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, args), 0);
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    setenv("MOONBRIGHT_HEAP_PUNCH", "1", 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "punch-32m"), 0);
    unsetenv("MOONBRIGHT_HEAP_PUNCH");
    void *p;
    assert_int_equal(mb_malloc(c, 256u << 20, &p), 0);
    assert_int_equal(granted(c), 256u << 20);
    assert_int_equal(mb_free(c, p), 0);
    assert_int_equal(mb_trim(c, 0), 0);
    mb_close(c);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Extending an arena: a 256 MiB block is freed, a 160 MiB one takes the
 * low end of its arena, and a 300 MiB request then maps only what the
 * 96 MiB free end lacks, right after it (one arena; the daemon grants
 * about 460 MiB, not 556); every block's data stays. With
 * $MOONBRIGHT_HEAP_EXTEND=0 the request gets an arena of its own. Trim
 * gives everything back either way. */
static size_t extend_sequence(mb_client *c, uint64_t *extends, bool *adjacent)
{
    const size_t M = 1u << 20;
    mb_client_stats st0, st1;
    assert_int_equal(mb_stats(c, &st0), 0);
    void *a, *b, *x;
    assert_int_equal(mb_malloc(c, 256 * M, &a), 0);
    assert_int_equal(mb_free(c, a), 0);
    assert_int_equal(mb_malloc(c, 160 * M, &b), 0);
    assert_ptr_equal(b, a);
    pattern_fill((uintptr_t)b, 160 * M, 3, 0, 1 << 16);
    assert_int_equal(mb_malloc(c, 300 * M, &x), 0);
    pattern_fill((uintptr_t)x, 300 * M, 4, 0, 1 << 16);
    assert_int_equal(pattern_check((uintptr_t)b, 160 * M, 3, 0, 1 << 16), -1);
    assert_int_equal(pattern_check((uintptr_t)x, 300 * M, 4, 0, 1 << 16), -1);
    assert_int_equal(mb_stats(c, &st1), 0);
    *extends = st1.heap_extends - st0.heap_extends;
    *adjacent = x == (char *)a + 160 * M;
    assert_int_equal(st1.bytes_live - st0.bytes_live, 460 * M);
    assert_int_equal(mb_free(c, x), 0);
    assert_int_equal(mb_free(c, b), 0);
    return st1.bytes_granted;
}

static void extending_a_free_end(void **state)
{
    (void)state;
    struct mbt_daemon d;
    start_daemon(&d, NULL, "600000");
    const size_t M = 1u << 20;
    uint64_t extends;
    bool adjacent;
    mb_client *c;
    assert_int_equal(mb_open(&c, "extend"), 0);
    size_t held = extend_sequence(c, &extends, &adjacent);
    assert_int_equal(extends, 1);
    assert_true(adjacent);
    assert_true(held >= 460 * M && held <= 480 * M);   /* the frame plan rounds by < 3.2 % */
    /* mbctl tenants shows it too. */
    assert_true(WAIT_FOR(2000, mbt_tenant_num(&d, "extend", "heap_extends") == 1));
    assert_int_equal(mb_trim(c, 0), 0);
    assert_int_equal(granted(c), 0);
    assert_int_equal(idle(c), 0);
    mb_close(c);
    setenv("MOONBRIGHT_HEAP_EXTEND", "0", 1);
    assert_int_equal(mb_open(&c, "no-extend"), 0);
    unsetenv("MOONBRIGHT_HEAP_EXTEND");
    held = extend_sequence(c, &extends, &adjacent);
    assert_int_equal(extends, 0);
    assert_false(adjacent);
    assert_true(held >= 556 * M);
    assert_int_equal(mb_trim(c, 0), 0);
    assert_int_equal(granted(c), 0);
    mb_close(c);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* An arena grown as a segment stays in use while any block in it lives:
 * a trim gives back the whole frames under its free blocks (the arena
 * keeps a hole), the live block's data stays and the heap goes on serving;
 * the idle policy does the same once the heap has served nothing for
 * $MOONBRIGHT_IDLE_MS. */
static void segment_frames_go_back(mb_client *c, bool by_trim)
{
    const size_t M = 1u << 20;
    mb_client_stats st0, st1;
    assert_int_equal(mb_stats(c, &st0), 0);
    void *a, *x, *y;
    assert_int_equal(mb_malloc(c, 64 * M, &a), 0);
    assert_int_equal(mb_malloc(c, 128 * M, &x), 0);
    assert_ptr_equal(x, (char *)a + 64 * M);             /* the arena grew at its end */
    pattern_fill((uintptr_t)a, 64 * M, 7, 0, 1 << 16);
    assert_int_equal(mb_free(c, x), 0);
    assert_true(granted(c) >= 192 * M);
    if (by_trim)
        assert_int_equal(mb_trim(c, 0), 0);
    else
        assert_true(WAIT_FOR(5000, granted(c) < 192 * M));
    assert_true(WAIT_FOR(5000, granted(c) == 64 * M));  /* only a's frames are held */
    assert_int_equal(mb_stats(c, &st1), 0);
    assert_true(st1.heap_punches > st0.heap_punches);
    assert_int_equal(pattern_check((uintptr_t)a, 64 * M, 7, 0, 1 << 16), -1);
    assert_int_equal(mb_malloc(c, 32 * M, &y), 0);       /* the start of the hole, filled again */
    pattern_fill((uintptr_t)y, 32 * M, 8, 0, 1 << 16);
    assert_int_equal(pattern_check((uintptr_t)y, 32 * M, 8, 0, 1 << 16), -1);
    assert_int_equal(pattern_check((uintptr_t)a, 64 * M, 7, 0, 1 << 16), -1);
    assert_int_equal(mb_free(c, y), 0);
    assert_int_equal(mb_free(c, a), 0);
    assert_int_equal(mb_trim(c, 0), 0);
    assert_int_equal(granted(c), 0);
}

static void trim_inside_an_arena(void **state)
{
    (void)state;
    struct mbt_daemon d;
    start_daemon(&d, NULL, "600000");
    mb_client *c;
    assert_int_equal(mb_open(&c, "segment-trim"), 0);
    segment_frames_go_back(c, true);
    mb_close(c);
    setenv("MOONBRIGHT_IDLE_MS", "200", 1);
    assert_int_equal(mb_open(&c, "segment-idle"), 0);
    segment_frames_go_back(c, false);
    mb_close(c);
    unsetenv("MOONBRIGHT_IDLE_MS");
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A miss fills the hole a trim left inside an arena (the part it needs;
 * the rest stays a hole) instead of extending the arena past it, so that
 * cycles of trims and allocations reuse the arena's address space; the
 * neighbours' data stays. With $MOONBRIGHT_HEAP_FILL=0 the arena grows. */
static void fill_cycles(const struct mbt_daemon *d, bool fill)
{
    const size_t M = 1u << 20;
    mb_client *c;
    setenv("MOONBRIGHT_HEAP_FILL", fill ? "1" : "0", 1);
    assert_int_equal(mb_open(&c, fill ? "fill" : "no-fill"), 0);
    void *a, *x, *b, *y;
    assert_int_equal(mb_malloc(c, 64 * M, &a), 0);
    assert_int_equal(mb_malloc(c, 128 * M, &x), 0);
    assert_int_equal(mb_malloc(c, 32 * M, &b), 0);
    assert_ptr_equal(x, (char *)a + 64 * M);
    assert_ptr_equal(b, (char *)x + 128 * M);
    pattern_fill((uintptr_t)a, 64 * M, 3, 0, 1 << 16);
    pattern_fill((uintptr_t)b, 32 * M, 4, 0, 1 << 16);
    mb_client_stats st0, st1;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(mb_free(c, x), 0);
        assert_int_equal(mb_trim(c, 0), 0);
        assert_true(WAIT_FOR(5000, granted(c) == 96 * M));   /* x's frames went back */
        assert_int_equal(mb_stats(c, &st0), 0);
        size_t size = (100 + 3 * (size_t)i) * M + 4096;   /* within x's 128 MiB */
        assert_int_equal(mb_malloc(c, size, &y), 0);
        assert_int_equal(mb_stats(c, &st1), 0);
        if (fill) {
            assert_ptr_equal(y, x);                            /* in the hole */
            assert_true(st1.heap_fills > st0.heap_fills);
            assert_int_equal(st1.heap_extends, st0.heap_extends);
            assert_true(granted(c) <= 96 * M + size + 2 * M);  /* the part it needs */
        } else {
            assert_true((char *)y >= (char *)b + 32 * M);      /* past b: the arena grew */
            assert_int_equal(st1.heap_fills, 0);
        }
        pattern_fill((uintptr_t)y, size, 5 + i, 0, 1 << 16);
        assert_int_equal(pattern_check((uintptr_t)y, size, 5 + i, 0, 1 << 16), -1);
        x = y;
    }
    assert_int_equal(pattern_check((uintptr_t)a, 64 * M, 3, 0, 1 << 16), -1);
    assert_int_equal(pattern_check((uintptr_t)b, 32 * M, 4, 0, 1 << 16), -1);
    /* mbctl tenants shows the process's count. */
    assert_int_equal(mb_stats(c, &st1), 0);
    assert_true(fill ? st1.heap_fills >= 8 : st1.heap_fills == 0);
    assert_true(WAIT_FOR(2000, mbt_tenant_num(d, fill ? "fill" : "no-fill", "heap_fills") ==
                                   (double)st1.heap_fills));
    assert_int_equal(mb_free(c, x), 0);
    assert_int_equal(mb_free(c, a), 0);
    assert_int_equal(mb_free(c, b), 0);
    assert_int_equal(mb_trim(c, 0), 0);
    assert_int_equal(granted(c), 0);
    mb_close(c);
    unsetenv("MOONBRIGHT_HEAP_FILL");
}

static void misses_fill_holes(void **state)
{
    (void)state;
    struct mbt_daemon d;
    start_daemon(&d, NULL, "600000");
    fill_cycles(&d, true);
    fill_cycles(&d, false);
    unsetenv("MOONBRIGHT_IDLE_MS");
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(idle_policy_and_trim),
        cmocka_unit_test(reclaim_returns_idle),
        cmocka_unit_test(punching_reuses_stale_free_frames),
        cmocka_unit_test(punching_with_large_units),
        cmocka_unit_test(close_fit_holds_its_footprint),
        cmocka_unit_test(extending_a_free_end),
        cmocka_unit_test(trim_inside_an_arena),
        cmocka_unit_test(misses_fill_holes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
