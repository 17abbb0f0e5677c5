/* test_vspace.c: vspaces on a real GPU through a real daemon (cuda
 * backend): PTE kernel entries against a reference model over random
 * map/unmap sequences, consumers on the mapping stream, a paged gather
 * against the same gather on one contiguous buffer, an unrelated stream not
 * held up by a busy mapping stream, pages reused by another vspace, and
 * consumers reading pages mapped by map_async calls issued while the page
 * pool's refill thread was growing the pool (no page shared by two live
 * vspaces). Exits 77 (skipped) when no GPU is usable. */
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
#include <moonbright/vspace.h>

#include "harness.h"
#include "pagepool.h"
#include "mbk_vspace.h"
#include "mbkernels.h"

static struct mbt_daemon g_d;
static mb_client *g_c;
static void *g_s, *g_t;   /* two non-blocking streams */

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Random map/unmap on two vspaces; entries read back from device memory
 * (walking the table from the root) match the model after every step. */
static void test_entries_random(void **state)
{
    (void)state;
    const size_t page = 64 << 10, npages = ((size_t)1 << 18) + 7, win = 600;
    const size_t bases[3] = { 0, (size_t)1 << 17, npages - win };
    mb_vspace *v[2];
    uint64_t *model[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(mb_vspace_create(g_c, npages * page, page, &v[i]), 0);
        assert_int_equal(mb_vspace_device(v[i])->levels, 3);   /* 512^2 < npages */
        model[i] = calloc(npages, sizeof(uint64_t));
    }
    uint64_t *got = malloc(win * sizeof(*got));
    for (int step = 0; step < 120; step++) {
        int k = (int)(rnd() % 2);
        size_t n = 1 + rnd() % (rnd() % 4 == 0 ? 400 : 30);
        size_t p = bases[rnd() % 3] + rnd() % (win - n);
        bool map = rnd() % 5 < 3;
        int rc = map ? mb_vspace_map_async(v[k], p, n, g_s) : mb_vspace_unmap_async(v[k], p, n, g_s);
        assert_int_equal(rc, 0);
        for (int b = 0; b < 3; b++) {
            assert_int_equal(mb_vspace_read_entries(v[k], bases[b], win, g_s, got), 0);
            for (size_t i = 0; i < win; i++) {
                size_t q = bases[b] + i;
                bool in = q >= p && q < p + n;
                if (in && !map)
                    model[k][q] = 0;
                if (in && map && !model[k][q]) {
                    assert_true(got[i] != MB_VSPACE_INVALID && got[i] % page == 0);
                    model[k][q] = got[i];
                    for (int w = 0; w < 3; w++)   /* not one of the other vspace's */
                        for (size_t j = bases[w]; j < bases[w] + win; j++)
                            assert_true(model[1 - k][j] != got[i]);
                }
                assert_true(got[i] == model[k][q]);
            }
        }
    }
    free(got);
    for (int i = 0; i < 2; i++) {
        mb_vspace_destroy(v[i]);
        free(model[i]);
    }
}

/* Write through the table and read back on the mapping stream; gather rows
 * scattered over pages and compare with the same gather from one buffer. */
static void consumer_and_gather(size_t page)
{
    const size_t bytes = (size_t)256 << 20, row = 16 << 10, nrows = 4096;
    const uint32_t seed = 0xC0FFEEu + (uint32_t)page;
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(g_c, bytes, page, &v), 0);
    struct mb_vspace_dev t = *mb_vspace_device(v);
    /* Map in two pieces, back to front, so pages are not in address order. */
    size_t np = bytes / page;
    assert_int_equal(mb_vspace_map_async(v, np / 2, np - np / 2, g_s), 0);
    assert_int_equal(mb_vspace_map_async(v, 0, np / 2, g_s), 0);
    assert_int_equal(mbk_vspace_fill_pattern(t, 0, bytes, seed, g_s), 0);
    unsigned long long bad = 1;
    assert_int_equal(mbk_vspace_check_pattern(t, 0, bytes, seed, g_s, &bad), 0);
    assert_int_equal(bad, 0);

    void *contig, *out1, *out2, *rows_d;
    assert_int_equal(mb_malloc(g_c, bytes, &contig), 0);
    assert_int_equal(mb_malloc(g_c, nrows * row, &out1), 0);
    assert_int_equal(mb_malloc(g_c, nrows * row, &out2), 0);
    assert_int_equal(mb_malloc(g_c, nrows * 8, &rows_d), 0);
    assert_int_equal(mbk_fill_pattern(contig, bytes, seed, g_s), 0);
    uint64_t *rows = malloc(nrows * 8);
    for (size_t i = 0; i < nrows; i++)
        rows[i] = rnd() % (bytes / row);
    assert_int_equal(mbk_write((uint64_t)(uintptr_t)rows_d, rows, nrows * 8, g_s), 0);
    assert_int_equal(mbk_stream_sync(g_s), 0);
    assert_int_equal(mbk_vspace_gather(t, rows_d, nrows, row, out1, g_s), 0);
    assert_int_equal(mbk_contig_gather(contig, rows_d, nrows, row, out2, g_s), 0);
    assert_int_equal(mbk_compare(out1, out2, nrows * row, g_s, &bad), 0);
    assert_int_equal(bad, 0);
    /* And against the pattern itself, row by row for a few rows. */
    for (size_t i = 0; i < 16; i++) {
        assert_int_equal(mbk_check_pattern((char *)out1 + i * row, row, rows[i] * row, seed, g_s,
                                           &bad, NULL), 0);
        assert_int_equal(bad, 0);
    }
    free(rows);
    mb_free(g_c, rows_d);
    mb_free(g_c, out2);
    mb_free(g_c, out1);
    mb_free(g_c, contig);
    mb_vspace_destroy(v);
}

static void test_consumer_gather_64k(void **state) { (void)state; consumer_and_gather(64 << 10); }
static void test_consumer_gather_2m(void **state) { (void)state; consumer_and_gather(2 << 20); }

/* A long kernel holds stream S; map_async and a consumer queue behind it.
 * A kernel on T completes meanwhile; the consumer then sees the mapping. */
static void test_other_stream_not_held(void **state)
{
    (void)state;
    const size_t page = 64 << 10, np = 512;
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(g_c, np * page, page, &v), 0);
    struct mb_vspace_dev t = *mb_vspace_device(v);
    void *ev;
    assert_int_equal(mbk_event_create(&ev), 0);
    double t0 = now_ms();
    assert_int_equal(mbk_spin(500ull * 1000 * 1000, g_s), 0);   /* 500 ms */
    assert_int_equal(mb_vspace_map_async(v, 0, np, g_s), 0);
    double t_map = now_ms() - t0;
    assert_int_equal(mbk_vspace_fill_pattern(t, 0, np * page, 77, g_s), 0);
    assert_int_equal(mbk_event_record(ev, g_s), 0);
    assert_int_equal(mbk_spin(1000, g_t), 0);
    assert_int_equal(mbk_stream_sync(g_t), 0);
    double t_other = now_ms() - t0;
    int pending = mbk_event_query(ev);
    printf("  map_async behind a 500 ms kernel returned after %.3f ms; other stream done "
           "after %.3f ms, mapping stream still busy: %s\n", t_map, t_other,
           pending == 0 ? "yes" : "no");
    assert_int_equal(pending, 0);
    assert_true(t_other < 400.0);
    unsigned long long bad = 1;
    assert_int_equal(mbk_vspace_check_pattern(t, 0, np * page, 77, g_s, &bad), 0);
    assert_int_equal(bad, 0);
    mbk_event_destroy(ev);
    mb_vspace_destroy(v);
}

/* A unmaps a page on S (behind a long kernel); B maps and fills it; A's
 * later kernels find INVALID, never B's data. */
static void test_reuse_no_stale(void **state)
{
    (void)state;
    const size_t page = 2 << 20;
    mb_vspace *a, *b;
    assert_int_equal(mb_vspace_create(g_c, 8 * page, page, &a), 0);
    assert_int_equal(mb_vspace_create(g_c, 8 * page, page, &b), 0);
    struct mb_vspace_dev ta = *mb_vspace_device(a), tb = *mb_vspace_device(b);
    assert_int_equal(mb_vspace_map_async(a, 2, 1, g_s), 0);
    assert_int_equal(mbk_vspace_fill_pattern(ta, 2 * page, page, 1, g_s), 0);
    uint64_t pa = 0, e = 1;
    assert_int_equal(mb_vspace_read_entries(a, 2, 1, g_s, &pa), 0);
    assert_int_equal(mbk_spin(100ull * 1000 * 1000, g_s), 0);
    assert_int_equal(mb_vspace_unmap_async(a, 2, 1, g_s), 0);
    /* Not reusable yet: S is still busy. */
    assert_int_equal(mb_vspace_map_async(b, 5, 1, g_t), 0);
    assert_int_equal(mb_vspace_read_entries(b, 5, 1, g_t, &e), 0);
    assert_true(e != pa);
    assert_int_equal(mbk_stream_sync(g_s), 0);
    assert_int_equal(mb_vspace_map_async(b, 6, 1, g_t), 0);
    assert_int_equal(mb_vspace_read_entries(b, 6, 1, g_t, &e), 0);
    assert_true(e == pa);   /* now it is: B got A's old page */
    assert_int_equal(mbk_vspace_fill_pattern(tb, 6 * page, page, 2, g_t), 0);
    assert_int_equal(mbk_stream_sync(g_t), 0);
    unsigned long long bad = 0;
    assert_int_equal(mbk_vspace_check_pattern(ta, 2 * page, page, 2, g_s, &bad), 0);
    assert_int_equal(bad, page);   /* A reads INVALID: every byte counts as wrong */
    assert_int_equal(mb_vspace_read_entries(a, 2, 1, g_s, &e), 0);
    assert_true(e == MB_VSPACE_INVALID);
    assert_int_equal(mbk_vspace_check_pattern(tb, 6 * page, page, 2, g_t, &bad), 0);
    assert_int_equal(bad, 0);
    mb_vspace_destroy(a);
    mb_vspace_destroy(b);
}

/* Refills in flight in c's pool of page_bytes pages. */
static int growers(mb_client *c, size_t page_bytes)
{
    struct pagepool *p;
    assert_int_equal(pagepool_get(c, page_bytes, &p), 0);
    pthread_mutex_lock(&p->lock);
    int n = p->growers;
    pthread_mutex_unlock(&p->lock);
    return n;
}

static mb_client_stats stats_of(mb_client *c)
{
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    return st;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Pages [0, n[i]) of each live vspace: all mapped, none shared (each page
 * belongs to one vspace once). */
static void check_no_sharing(mb_vspace **v, const size_t *n, int nv, void *stream)
{
    size_t total = 0;
    for (int i = 0; i < nv; i++)
        total += n[i];
    uint64_t *all = malloc(total * sizeof(*all));
    size_t k = 0;
    for (int i = 0; i < nv; i++) {
        assert_int_equal(mb_vspace_read_entries(v[i], 0, n[i], stream, all + k), 0);
        for (size_t j = 0; j < n[i]; j++)
            assert_true(all[k + j] != MB_VSPACE_INVALID);
        k += n[i];
    }
    qsort(all, total, sizeof(*all), cmp_u64);
    for (size_t j = 1; j < total; j++)
        assert_true(all[j] != all[j - 1]);
    free(all);
}

/* map_async calls issued while the refill thread grows the pool (held in
 * flight by MOONBRIGHT_TEST_REFILL_DELAY_US): one served from the free
 * pages, whose consumer kernels write and read every byte through both
 * tables while the refill is still in flight; one that finds too few free
 * pages and waits for that refill rather than mapping an extent of its
 * own; then maps from the refilled extent without a wait. No page is shared
 * by the two live vspaces and each keeps its own data. */
static void test_map_during_refill(void **state)
{
    (void)state;
    const size_t page = 64 << 10, vpages = 16384;
    setenv("MOONBRIGHT_TEST_REFILL_DELAY_US", "500000", 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "vspace-gpu-refill"), 0);
    mb_vspace *v[2];
    assert_int_equal(mb_vspace_create(c, vpages * page, page, &v[0]), 0);
    assert_int_equal(mb_vspace_create(c, vpages * page, page, &v[1]), 0);
    unsetenv("MOONBRIGHT_TEST_REFILL_DELAY_US");   /* read when the thread started */
    struct mb_vspace_dev ta = *mb_vspace_device(v[0]), tb = *mb_vspace_device(v[1]);
    assert_int_equal(mb_vspace_map_async(v[0], 0, 6400, g_s), 0);
    /* The watermark is now 6400 / 64 pages: the thread maps up to it. */
    mb_client_stats st = stats_of(c);
    for (int i = 0; i < 400 && st.vspace_free_bytes < 6400 / 64 * page; i++) {
        sleep_ms(10);
        st = stats_of(c);
    }
    assert_true(st.vspace_free_bytes >= 6400 / 64 * page);
    size_t ext = st.vspace_extents;
    size_t left = st.vspace_free_bytes / page;
    size_t n[2] = { 6400 + left - 10, 0 };
    assert_int_equal(mb_vspace_map_async(v[0], 6400, left - 10, g_s), 0);
    /* Under the watermark again: the thread's next refill starts, held. */
    for (int i = 0; i < 400 && growers(c, page) == 0; i++)
        sleep_ms(5);
    assert_int_equal(growers(c, page), 1);
    uint64_t waits = stats_of(c).vspace_refill_waits;
    assert_int_equal(mb_vspace_map_async(v[1], 0, 8, g_t), 0);      /* from the free pages */
    n[1] = 8;
    assert_int_equal(mbk_vspace_fill_pattern(ta, 0, n[0] * page, 0xA1, g_s), 0);
    assert_int_equal(mbk_vspace_fill_pattern(tb, 0, n[1] * page, 0xB2, g_t), 0);
    unsigned long long bad = 1;
    assert_int_equal(mbk_vspace_check_pattern(tb, 0, n[1] * page, 0xB2, g_t, &bad), 0);
    assert_int_equal(bad, 0);
    st = stats_of(c);
    assert_int_equal(st.vspace_refill_waits, waits);
    assert_int_equal(st.vspace_extents, ext);
    assert_int_equal(growers(c, page), 1);   /* the consumers ran while it was in flight */
    assert_int_equal(mb_vspace_map_async(v[1], 8, 500, g_t), 0);    /* waits for the refill */
    assert_int_equal(mbk_vspace_fill_pattern(tb, n[1] * page, 500 * page, 0xB2, g_t), 0);
    n[1] += 500;
    for (int i = 0; i < 400 && growers(c, page) != 0; i++)   /* (landed already: it waited) */
        sleep_ms(5);
    st = stats_of(c);
    assert_int_equal(st.vspace_refill_waits, waits + 1);
    assert_int_equal(st.vspace_extents, ext + 1);   /* the thread's extent, none of its own */
    /* The refill's pages serve the next map without a wait. */
    size_t more = st.vspace_free_bytes / page;
    assert_true(more > 0);
    more = more < 2000 ? more : 2000;
    assert_int_equal(mb_vspace_map_async(v[1], n[1], more, g_t), 0);
    assert_int_equal(stats_of(c).vspace_refill_waits, waits + 1);
    assert_int_equal(mbk_vspace_fill_pattern(tb, n[1] * page, more * page, 0xB2, g_t), 0);
    n[1] += more;
    assert_int_equal(mbk_stream_sync(g_t), 0);
    assert_int_equal(mbk_vspace_check_pattern(ta, 0, n[0] * page, 0xA1, g_s, &bad), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(mbk_vspace_check_pattern(tb, 0, n[1] * page, 0xB2, g_t, &bad), 0);
    assert_int_equal(bad, 0);
    check_no_sharing(v, n, 2, g_s);
    assert_int_equal(mb_vspace_mapped_pages(v[0]), n[0]);
    assert_int_equal(mb_vspace_mapped_pages(v[1]), n[1]);
    mb_vspace_destroy(v[0]);
    mb_vspace_destroy(v[1]);
    mb_close(c);
}

int main(void)
{
    /* The daemon first: never fork after this process initialised CUDA. */
    const char *extra[] = { "--backend", "cuda", "--budget", "16G", NULL };
    if (mbt_daemon_start(&g_d, extra) != 0) {
        printf("SKIP: moonbrightd --backend cuda did not start (no usable GPU?)\n");
        return 77;
    }
    setenv("MOONBRIGHT_RUNTIME_DIR", g_d.dir, 1);
    int rc = mb_open(&g_c, "vspace-gpu");
    if (rc != 0 || strcmp(mb_backend_name(g_c), "cuda") != 0) {
        printf("SKIP: no cuda client (%s)\n", rc ? mb_strerror(rc) : mb_backend_name(g_c));
        if (rc == 0)
            mb_close(g_c);
        mbt_daemon_stop(&g_d);
        return 77;
    }
    if (mbk_stream_create(&g_s) != 0 || mbk_stream_create(&g_t) != 0)
        return 1;
    /* Warm the test's own kernels before any stream is gated. */
    if (mbk_test_warm() != 0)
        return 1;
    mbk_spin(0, g_s);
    mbk_stream_sync(g_s);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_random),
        cmocka_unit_test(test_consumer_gather_64k),
        cmocka_unit_test(test_consumer_gather_2m),
        cmocka_unit_test(test_other_stream_not_held),
        cmocka_unit_test(test_reuse_no_stale),
        cmocka_unit_test(test_map_during_refill),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    mbk_stream_destroy(g_s);
    mbk_stream_destroy(g_t);
    mb_close(g_c);
    mbt_daemon_stop(&g_d);
    return failed ? 1 : 0;
}
