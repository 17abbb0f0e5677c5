/* test_vspace_host.c: vspaces on the host backend through a real daemon:
 * random map/unmap sequences on two vspaces sharing one page pool, checked
 * after every step against a reference model by walking the table memory
 * with the layout vspace.h documents (and with mb_vspace_read_entries);
 * new directory levels; pages reused by another vspace never reached
 * through the first one's table; argument errors and empty maps; the page
 * pools (pagepool.c): pages carved from few extents, extents granted the
 * daemon's free frames of a smaller size where its budget is full of them,
 * the refill thread filling a pool in the background, pools emptied by
 * mb_trim, by the idle policy and by mb_close with the daemon's books
 * balanced and the thread gone; growable ranges (grow.c): grows inside the mapped tail make no
 * daemon request and no mapping, data survives grows; the host path of the
 * stream-ordered slow path (async_map.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <moonbright/mbclient.h>
#include <moonbright/vspace.h>

#include "async_map.h"
#include "client.h"
#include "harness.h"
#include "json.h"
#include "log.h"
#include "pagepool.h"
#include "refill.h"

static struct mbt_daemon g_d;
static mb_client *g_c;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* The documented translation, done on the table's memory (host backend:
 * device addresses are host addresses). */
static uint64_t walk(const struct mb_vspace_dev *t, uint64_t page)
{
    uint64_t e = t->root;
    for (int l = (int)t->levels - 1; l >= 0 && e != MB_VSPACE_INVALID; l--)
        e = ((const uint64_t *)(uintptr_t)e)[(page >> (MB_VSPACE_FANOUT_SHIFT * l)) & 511];
    return e;
}

/* Reference model of one vspace: the page each index holds (0: none). */
struct model {
    mb_vspace *v;
    size_t npages;
    uint64_t *addr;
    uint32_t tag;
};

#define WINDOWS 4
#define WINDOW_PAGES 700

/* Windows far apart, so maps create directory nodes at every level. */
static size_t window_base(const struct model *m, int w)
{
    size_t stride = (m->npages - WINDOW_PAGES) / (WINDOWS - 1);
    return (size_t)w * stride;
}

static void put_tags(struct model *m, size_t p, size_t n)
{
    for (size_t i = p; i < p + n; i++)
        if (m->addr[i])
            *(uint64_t *)(uintptr_t)m->addr[i] = ((uint64_t)m->tag << 32) | i;
}

static void check_model(struct model *m)
{
    const struct mb_vspace_dev *t = mb_vspace_device(m->v);
    uint64_t *got = malloc(WINDOW_PAGES * sizeof(*got));
    size_t mapped = 0;
    for (int w = 0; w < WINDOWS; w++) {
        size_t base = window_base(m, w);
        assert_int_equal(mb_vspace_read_entries(m->v, base, WINDOW_PAGES, NULL, got), 0);
        for (size_t i = base; i < base + WINDOW_PAGES; i++) {
            uint64_t e = walk(t, i);
            assert_true(e == got[i - base]);
            if (m->addr[i] == 0) {
                assert_true(e == MB_VSPACE_INVALID);
                continue;
            }
            mapped++;
            assert_true(e == m->addr[i]);
            assert_int_equal(e % ((uint64_t)1 << t->page_shift), 0);
            /* The data this vspace wrote is still there: nobody else got the page. */
            assert_true(*(uint64_t *)(uintptr_t)e == (((uint64_t)m->tag << 32) | i));
        }
    }
    assert_int_equal(mapped, mb_vspace_mapped_pages(m->v));
    free(got);
}

/* Pages a map gave: read back, each must be new (unique across models). */
static void learn(struct model *m, struct model *other, size_t p, size_t n)
{
    const struct mb_vspace_dev *t = mb_vspace_device(m->v);
    for (size_t i = p; i < p + n; i++) {
        uint64_t e = walk(t, i);
        assert_true(e != MB_VSPACE_INVALID);
        if (m->addr[i]) {
            assert_true(e == m->addr[i]);   /* already mapped: kept */
            continue;
        }
        for (int w = 0; w < WINDOWS; w++) {
            size_t b = window_base(other, w);
            for (size_t k = b; k < b + WINDOW_PAGES; k++)
                assert_true(other->addr[k] != e);
        }
        m->addr[i] = e;
        put_tags(m, i, 1);
    }
}

static void model_init(struct model *m, size_t max_bytes, size_t page, uint32_t tag)
{
    assert_int_equal(mb_vspace_create(g_c, max_bytes, page, &m->v), 0);
    m->npages = max_bytes / page;
    m->addr = calloc(m->npages, sizeof(*m->addr));
    m->tag = tag;
}

static void model_free(struct model *m)
{
    mb_vspace_destroy(m->v);
    free(m->addr);
}

static void test_random(void **state)
{
    (void)state;
    const size_t page = 64 << 10;
    /* 2^19 + 1 pages: three levels (512^2 < pages <= 512^3). */
    struct model m[2];
    model_init(&m[0], ((size_t)1 << 19) * page + page, page, 0xA);
    model_init(&m[1], ((size_t)1 << 19) * page + page, page, 0xB);
    assert_int_equal(mb_vspace_device(m[0].v)->levels, 3);
    check_model(&m[0]);
    for (int step = 0; step < 400; step++) {
        int k = (int)(rnd() % 2);
        struct model *x = &m[k], *y = &m[1 - k];
        size_t base = window_base(x, (int)(rnd() % WINDOWS));
        size_t n = 1 + rnd() % (rnd() % 4 == 0 ? 300 : 20);
        size_t p = base + rnd() % (WINDOW_PAGES - n);
        if (rnd() % 5 < 3) {
            assert_int_equal(mb_vspace_map_async(x->v, p, n, NULL), 0);
            learn(x, y, p, n);
        } else {
            assert_int_equal(mb_vspace_unmap_async(x->v, p, n, NULL), 0);
            memset(x->addr + p, 0, n * sizeof(*x->addr));
        }
        check_model(x);
        check_model(y);
    }
    model_free(&m[0]);
    model_free(&m[1]);
}

/* A page unmapped by A and mapped by B: B writes it; A's later reads of that
 * page translate to INVALID, never to B's data. */
static void test_reuse_by_other(void **state)
{
    (void)state;
    const size_t page = 2 << 20;
    mb_vspace *a, *b;
    assert_int_equal(mb_vspace_create(g_c, 64 * page, page, &a), 0);
    assert_int_equal(mb_vspace_create(g_c, 64 * page, page, &b), 0);
    assert_int_equal(mb_vspace_device(a)->levels, 1);
    assert_int_equal(mb_vspace_map_async(a, 3, 1, NULL), 0);
    uint64_t pa = walk(mb_vspace_device(a), 3);
    assert_true(pa != MB_VSPACE_INVALID);
    memset((void *)(uintptr_t)pa, 0xAA, page);
    assert_int_equal(mb_vspace_unmap_async(a, 3, 1, NULL), 0);
    assert_int_equal(mb_vspace_map_async(b, 10, 1, NULL), 0);
    uint64_t pb = walk(mb_vspace_device(b), 10);
    assert_true(pb == pa);   /* LIFO: B got A's page back */
    memset((void *)(uintptr_t)pb, 0xBB, page);
    assert_true(walk(mb_vspace_device(a), 3) == MB_VSPACE_INVALID);
    uint64_t e = 1;
    assert_int_equal(mb_vspace_read_entries(a, 3, 1, NULL, &e), 0);
    assert_true(e == MB_VSPACE_INVALID);
    /* Mapping again gives A another page. */
    assert_int_equal(mb_vspace_map_async(a, 3, 1, NULL), 0);
    assert_true(walk(mb_vspace_device(a), 3) != pb);
    mb_vspace_destroy(a);
    mb_vspace_destroy(b);
}

/* Sparse maps create directory nodes at every level; whole-range unmap. */
static void test_levels(void **state)
{
    (void)state;
    const size_t page = 64 << 10;
    mb_vspace *v;
    size_t npages = ((size_t)1 << 27) + 3;   /* four levels */
    assert_int_equal(mb_vspace_create(g_c, npages * page, page, &v), 0);
    const struct mb_vspace_dev *t = mb_vspace_device(v);
    assert_int_equal(t->levels, 4);
    assert_true(t->max_bytes == npages * page);
    size_t at[] = { 0, 511, 512, (size_t)1 << 18, ((size_t)1 << 27) + 2 };
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
        assert_int_equal(mb_vspace_map_async(v, at[i], 1, NULL), 0);
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
        assert_true(walk(t, at[i]) != MB_VSPACE_INVALID);
    assert_true(walk(t, 1) == MB_VSPACE_INVALID);
    assert_true(walk(t, ((size_t)1 << 27) + 1) == MB_VSPACE_INVALID);
    assert_int_equal(mb_vspace_mapped_pages(v), 5);
    /* Mapping a range that is partly mapped keeps the mapped pages. */
    uint64_t keep = walk(t, 511);
    assert_int_equal(mb_vspace_map_async(v, 500, 20, NULL), 0);
    assert_true(walk(t, 511) == keep);
    assert_int_equal(mb_vspace_mapped_pages(v), 5 + 18);
    assert_int_equal(mb_vspace_unmap_async(v, 0, npages, NULL), 0);
    assert_int_equal(mb_vspace_mapped_pages(v), 0);
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
        assert_true(walk(t, at[i]) == MB_VSPACE_INVALID);
    mb_vspace_destroy(v);
}

static void test_errors(void **state)
{
    (void)state;
    mb_vspace *v = NULL;
    assert_int_equal(mb_vspace_create(g_c, 1 << 30, 32 << 10, &v), MB_EINVAL);
    assert_int_equal(mb_vspace_create(g_c, 1 << 30, 3 << 20, &v), MB_EINVAL);
    assert_int_equal(mb_vspace_create(g_c, 1 << 30, 4 << 20, &v), MB_EINVAL);
    assert_int_equal(mb_vspace_create(g_c, 0, 64 << 10, &v), MB_EINVAL);
    assert_int_equal(mb_vspace_create(NULL, 1 << 30, 64 << 10, &v), MB_EINVAL);
    assert_int_equal(mb_vspace_create(g_c, 10 << 20, 64 << 10, &v), 0);
    assert_int_equal(mb_vspace_map_async(v, 160, 1, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_map_async(v, 150, 11, NULL), MB_EINVAL);
    /* Zero pages is nothing to do, anywhere up to the end (a block boundary
     * inside a page maps no new page). */
    assert_int_equal(mb_vspace_map_async(v, 0, 0, NULL), 0);
    assert_int_equal(mb_vspace_map_async(v, 115, 0, NULL), 0);
    assert_int_equal(mb_vspace_map_async(v, 160, 0, NULL), 0);
    assert_int_equal(mb_vspace_unmap_async(v, 160, 0, NULL), 0);
    assert_int_equal(mb_vspace_mapped_pages(v), 0);
    assert_int_equal(mb_vspace_map_async(v, 161, 0, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_map_async(NULL, 0, 0, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_unmap_async(v, 159, 2, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_map_async(v, 0, 160, NULL), 0);
    assert_int_equal(mb_vspace_unmap_async(v, 0, 160, NULL), 0);
    /* Unmapping what is not mapped is fine. */
    assert_int_equal(mb_vspace_unmap_async(v, 0, 160, NULL), 0);
    mb_vspace_destroy(v);
    mb_vspace_destroy(NULL);
    assert_null(mb_vspace_device(NULL));
}
static mb_client_stats stats_of(mb_client *c)
{
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    return st;
}

static double status_num(const char *key)
{
    struct json *j = mbt_status(&g_d);
    assert_non_null(j);
    double v = json_num(j, key);
    json_free(j);
    return v;
}

/* Threads of this process now. */
static int n_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Pages are offsets into few extents: 1000 pages of 64 KiB come from one
 * mapped range, not 1000 frames; they stay in the pool after the vspace is
 * destroyed (reused without a daemon request) and go back on mb_trim. */
static void test_pool_extents_and_trim(void **state)
{
    (void)state;
    assert_int_equal(mb_trim(g_c, 0), 0);
    mb_client_stats before = stats_of(g_c), after;
    assert_int_equal(before.vspace_pool_bytes, 0);
    assert_int_equal(before.vspace_extents, 0);
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(g_c, (size_t)1 << 30, 64 << 10, &v), 0);
    assert_int_equal(mb_vspace_map_async(v, 0, 1000, NULL), 0);
    after = stats_of(g_c);
    assert_true(after.vspace_pool_bytes >= (size_t)1000 * (64 << 10));
    assert_true(after.vspace_extents >= 1 && after.vspace_extents <= 2);
    assert_true(after.bytes_mapped >= before.bytes_mapped + after.vspace_pool_bytes);
    assert_true(after.vspace_refill_waits >= before.vspace_refill_waits + 1);
    /* Every page distinct, inside the pool, aligned. */
    uint64_t *e = malloc(1000 * sizeof(*e));
    assert_int_equal(mb_vspace_read_entries(v, 0, 1000, NULL, e), 0);
    for (size_t i = 0; i < 1000; i++) {
        assert_true(e[i] != MB_VSPACE_INVALID && e[i] % (64 << 10) == 0);
        memset((void *)(uintptr_t)e[i], (int)(i & 0xff), 64 << 10);
        if (i)
            assert_true(e[i] != e[i - 1]);
    }
    free(e);
    mb_vspace_destroy(v);
    after = stats_of(g_c);
    assert_true(after.vspace_pool_bytes >= (size_t)1000 * (64 << 10));   /* kept, mapped */
    assert_true(after.vspace_free_bytes == after.vspace_pool_bytes);
    /* A new vspace takes them again: no new extent, no wait. */
    mb_client_stats kept = after;
    assert_int_equal(mb_vspace_create(g_c, (size_t)1 << 30, 64 << 10, &v), 0);
    assert_int_equal(mb_vspace_map_async(v, 0, 1000, NULL), 0);
    after = stats_of(g_c);
    assert_int_equal(after.vspace_refill_waits, kept.vspace_refill_waits);
    assert_true(after.vspace_extents >= 1 && after.vspace_extents <= 2);
    mb_vspace_destroy(v);
    /* Trim empties the pool and unmaps its extents. */
    assert_int_equal(mb_trim(g_c, 0), 0);
    after = stats_of(g_c);
    assert_int_equal(after.vspace_pool_bytes, 0);
    assert_int_equal(after.vspace_free_bytes, 0);
    assert_int_equal(after.vspace_extents, 0);
    assert_true(after.bytes_mapped <= before.bytes_mapped);
}

/* Wait until c's pools hold at least want free bytes (the refill thread
 * at work: this thread makes no call meanwhile); their stats. */
static mb_client_stats wait_free(mb_client *c, size_t want)
{
    mb_client_stats st = stats_of(c);
    for (int i = 0; i < 1000 && st.vspace_free_bytes < want; i++) {
        mbt_sleep_ms(10);
        st = stats_of(c);
    }
    assert_true(st.vspace_free_bytes >= want);
    return st;
}

/* Demand raises the watermark; a map that leaves the pool under it wakes
 * the refill thread, which maps an extent ahead, so the next maps find
 * their pages ready (no wait). */
static void test_refill_background(void **state)
{
    (void)state;
    assert_int_equal(mb_trim(g_c, 0), 0);
    assert_true(refill_running(g_c));
    const size_t page = 64 << 10, n1 = 6400;
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(g_c, (size_t)1 << 31, page, &v), 0);
    mb_client_stats st = stats_of(g_c);
    uint64_t waits0 = st.vspace_refill_waits;
    /* The wait's debug line, caught from stderr. */
    char logf[] = "/tmp/mbtest-vslog.XXXXXX";
    int lfd = mkstemp(logf), saved = dup(STDERR_FILENO), level = mb_log_level();
    assert_true(lfd >= 0 && saved >= 0);
    fflush(stderr);
    assert_int_equal(dup2(lfd, STDERR_FILENO), STDERR_FILENO);
    mb_log_set_level(MB_LOG_DEBUG);
    assert_int_equal(mb_vspace_map_async(v, 0, n1, NULL), 0);
    mb_log_set_level(level);
    fflush(stderr);
    assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    char text[8192] = "";
    ssize_t got = pread(lfd, text, sizeof(text) - 1, 0);
    close(lfd);
    unlink(logf);
    assert_true(got > 0);
    assert_non_null(strstr(text, "a map of 6400 64-KiB vspace pages waited"));
    assert_non_null(strstr(text, "0 pages were free"));
    st = stats_of(g_c);
    assert_int_equal(st.vspace_refill_waits, waits0 + 1);   /* the pool was empty */
    /* The watermark is now n1 / 64 pages: the thread maps up to it. */
    st = wait_free(g_c, n1 / 64 * page);
    size_t ext = st.vspace_extents;
    /* Take all but 10 free pages: no wait, and the pool is under its
     * watermark again, so the thread maps another extent. */
    size_t left = st.vspace_free_bytes / page;
    assert_int_equal(mb_vspace_map_async(v, n1, left - 10, NULL), 0);
    st = stats_of(g_c);
    assert_int_equal(st.vspace_refill_waits, waits0 + 1);
    st = wait_free(g_c, (n1 + left) / 64 * page);
    assert_int_equal(st.vspace_extents, ext + 1);
    /* Those pages serve the next map without a wait. */
    size_t more = st.vspace_free_bytes / page;
    assert_int_equal(mb_vspace_map_async(v, n1 + left - 10, more, NULL), 0);
    st = stats_of(g_c);
    assert_int_equal(st.vspace_refill_waits, waits0 + 1);
    assert_int_equal(mb_vspace_mapped_pages(v), n1 + left - 10 + more);
    mb_vspace_destroy(v);
    assert_int_equal(mb_trim(g_c, 0), 0);
    st = stats_of(g_c);
    assert_int_equal(st.vspace_pool_bytes, 0);
}

/* Pages [0, n) of v mapped and unmapped `rounds` times, the refill
 * thread let act every 40; the most c's page pools held meanwhile and
 * 150 ms after. */
static size_t churn_pool_peak(mb_client *c, mb_vspace *v, size_t n, int rounds)
{
    size_t most = 0;
    for (int i = 0; i <= rounds; i++) {
        if (i == rounds)
            mbt_sleep_ms(150);
        else {
            assert_int_equal(mb_vspace_map_async(v, 0, n, NULL), 0);
            assert_int_equal(mb_vspace_unmap_async(v, 0, n, NULL), 0);
            if (i % 40 == 0)
                mbt_sleep_ms(20);   /* let the refill thread act on what it saw */
        }
        mb_client_stats st = stats_of(c);
        most = st.vspace_pool_bytes > most ? st.vspace_pool_bytes : most;
    }
    return most;
}

/* A load that takes and returns as many pages as it holds (a server at a
 * steady size) keeps few free pages, however many it takes: the watermark
 * follows the rise of the pages held in a window, not the pages taken.
 * 512 pages (32 MiB) mapped and unmapped 400 times take 12 800 MiB; the
 * pool stays at most 256 MiB (128 MiB here; 896 MiB when the watermark
 * followed the pages taken). */
static void test_refill_steady_churn(void **state)
{
    (void)state;
    assert_int_equal(mb_trim(g_c, 0), 0);
    const size_t page = 64 << 10, n = 512;
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(g_c, n * page, page, &v), 0);
    size_t most = churn_pool_peak(g_c, v, n, 400);
    assert_true(most >= n * page);
    assert_true(most <= (size_t)256 << 20);
    mb_vspace_destroy(v);
    assert_int_equal(mb_trim(g_c, 0), 0);
}

/* Refills in flight in c's pool of page_bytes pages (the thread's or a
 * waiting map's). */
static int growers(mb_client *c, size_t page_bytes)
{
    struct pagepool *p;
    assert_int_equal(pagepool_get(c, page_bytes, &p), 0);
    pthread_mutex_lock(&p->lock);
    int n = p->growers;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* Every mapped page of the live vspaces v[0..n) (their first npages),
 * each owned by one vspace only, each holding its vspace's tag. */
static void check_owners(mb_vspace **v, const uint32_t *tag, int n, size_t npages)
{
    uint64_t *all = malloc(n * npages * sizeof(*all)), *e = malloc(npages * sizeof(*e));
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(mb_vspace_read_entries(v[i], 0, npages, NULL, e), 0);
        for (size_t q = 0; q < npages; q++) {
            if (e[q] == MB_VSPACE_INVALID)
                continue;
            assert_true(*(uint64_t *)(uintptr_t)e[q] == (((uint64_t)tag[i] << 32) | q));
            all[k++] = e[q];
        }
    }
    for (size_t a = 0; a < k; a++)   /* no page shared by two live vspaces (or twice) */
        for (size_t b = a + 1; b < k; b++)
            assert_true(all[a] != all[b]);
    free(all);
    free(e);
}

static void tag_pages(mb_vspace *v, uint32_t tag, size_t first, size_t n)
{
    const struct mb_vspace_dev *t = mb_vspace_device(v);
    for (size_t q = first; q < first + n; q++)
        *(uint64_t *)(uintptr_t)walk(t, q) = ((uint64_t)tag << 32) | q;
}

/* Maps issued while the refill thread grows the pool (held in flight by
 * the test hook): one served from the free pages, one that finds too few
 * and waits for the refill in flight rather than mapping an extent of its
 * own; then maps from the refilled pages without a wait. Every page keeps
 * its data and no page belongs to two live vspaces. */
static void test_map_during_refill(void **state)
{
    (void)state;
    const size_t page = 64 << 10, vpages = 16384;
    /* Each refill is held 1.5 s: long enough for the calls below to land
     * inside it on a loaded machine. */
    setenv("MOONBRIGHT_TEST_REFILL_DELAY_US", "1500000", 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "vspace-refill"), 0);
    mb_vspace *v[2];
    const uint32_t tag[2] = { 0xA1, 0xB2 };
    assert_int_equal(mb_vspace_create(c, vpages * page, page, &v[0]), 0);
    unsetenv("MOONBRIGHT_TEST_REFILL_DELAY_US");   /* read when the thread started */
    assert_int_equal(mb_vspace_create(c, vpages * page, page, &v[1]), 0);
    assert_int_equal(mb_vspace_map_async(v[0], 0, 6400, NULL), 0);
    mb_client_stats st = wait_free(c, 6400 / 64 * page);   /* the first refill (held too) */
    size_t ext = st.vspace_extents;
    size_t left = st.vspace_free_bytes / page, a_pages = 6400 + left - 10;
    assert_int_equal(mb_vspace_map_async(v[0], 6400, left - 10, NULL), 0);
    /* Under the watermark now: the thread's next refill starts and is held
     * (a loaded machine may take seconds to run it). */
    for (int i = 0; i < 2000 && growers(c, page) == 0; i++)
        mbt_sleep_ms(5);
    assert_int_equal(growers(c, page), 1);
    uint64_t waits = stats_of(c).vspace_refill_waits;
    assert_int_equal(mb_vspace_map_async(v[1], 0, 8, NULL), 0);      /* from the 10 free */
    assert_int_equal(stats_of(c).vspace_refill_waits, waits);
    assert_int_equal(mb_vspace_map_async(v[1], 8, 500, NULL), 0);    /* waits for the refill */
    for (int i = 0; i < 2000 && growers(c, page) != 0; i++)   /* (landed already: it waited) */
        mbt_sleep_ms(5);
    st = stats_of(c);
    assert_int_equal(st.vspace_refill_waits, waits + 1);
    assert_int_equal(st.vspace_extents, ext + 1);   /* the thread's extent, none of its own */
    tag_pages(v[0], tag[0], 0, a_pages);
    tag_pages(v[1], tag[1], 0, 508);
    check_owners(v, tag, 2, vpages);
    /* Maps use the refill's pages without a wait. */
    size_t more = st.vspace_free_bytes / page;
    assert_true(more > 0);
    more = more < 2000 ? more : 2000;
    assert_int_equal(mb_vspace_map_async(v[1], 508, more, NULL), 0);
    assert_int_equal(stats_of(c).vspace_refill_waits, waits + 1);
    tag_pages(v[1], tag[1], 508, more);
    check_owners(v, tag, 2, vpages);
    assert_int_equal(mb_vspace_mapped_pages(v[0]), a_pages);
    assert_int_equal(mb_vspace_mapped_pages(v[1]), 508 + more);
    mb_vspace_destroy(v[0]);
    mb_vspace_destroy(v[1]);
    mb_close(c);
}

/* A reclaim notice (mbctl reclaim TENANT) empties the pools and returns
 * the growable tails, without any call from this process. */
static void test_reclaim(void **state)
{
    (void)state;
    mb_client *c;
    setenv("MOONBRIGHT_IDLE_MS", "600000", 1);   /* the idle policy stays out of it */
    assert_int_equal(mb_open(&c, "vspace-reclaim"), 0);
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(c, (size_t)1 << 30, 64 << 10, &v), 0);
    unsetenv("MOONBRIGHT_IDLE_MS");
    assert_int_equal(mb_vspace_map_async(v, 0, 3000, NULL), 0);
    mb_vspace_destroy(v);
    void *g;
    assert_int_equal(mb_malloc_growable(c, 64 << 20, 1 << 30, &g), 0);
    mb_client_stats st = stats_of(c);
    for (int i = 0; i < 200 && st.grow_mapped_ahead == 0; i++) {   /* the tail, mapped ahead */
        mbt_sleep_ms(25);
        st = stats_of(c);
    }
    assert_true(st.vspace_pool_bytes >= (size_t)3000 * (64 << 10));
    assert_true(st.grow_mapped_ahead > 0);
    const char *args[] = { "reclaim", "vspace-reclaim", NULL };
    int rc = -1;
    struct json *j = mbt_ctl_json(&g_d, &rc, args);
    json_free(j);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 200 && (st.vspace_pool_bytes || st.grow_mapped_ahead >= st.frame_bytes); i++) {
        mbt_sleep_ms(25);
        st = stats_of(c);
    }
    assert_int_equal(st.vspace_pool_bytes, 0);
    assert_true(st.grow_mapped_ahead < st.frame_bytes);
    memset(g, 9, 64 << 20);   /* the used part stays */
    assert_int_equal(mb_free(c, g), 0);
    mb_close(c);
}

/* Threads mapping, unmapping, destroying and re-creating their own
 * vspaces on one client while the refill thread refills and the idle
 * policy (50 ms) returns extents: every page keeps its owner's tag and no
 * page is mapped by two live vspaces. Failures are counted, then asserted
 * on the main thread. */
#define STRESS_THREADS 4
#define STRESS_PAGES 2048
struct stress {
    mb_client *c;
    mb_vspace *v;
    uint32_t tag;
    uint64_t seed;
    int bad;
    bool *mapped;
};

static uint64_t srnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void *stress_main(void *arg)
{
    struct stress *t = arg;
    const size_t page = 64 << 10;
    for (int it = 0; it < 300 && !t->bad; it++) {
        uint64_t r = srnd(&t->seed);
        if (r % 40 == 0) {   /* destroy and start over */
            mb_vspace_destroy(t->v);
            memset(t->mapped, 0, STRESS_PAGES);
            t->bad += mb_vspace_create(t->c, STRESS_PAGES * page, page, &t->v) != 0;
            continue;
        }
        size_t n = 1 + srnd(&t->seed) % 200, p = srnd(&t->seed) % (STRESS_PAGES - n);
        const struct mb_vspace_dev *d = mb_vspace_device(t->v);
        if (r % 3) {
            t->bad += mb_vspace_map_async(t->v, p, n, NULL) != 0;
            for (size_t q = p; q < p + n && !t->bad; q++) {
                uint64_t e = walk(d, q);
                t->bad += e == MB_VSPACE_INVALID;
                if (!t->mapped[q] && e != MB_VSPACE_INVALID)
                    *(uint64_t *)(uintptr_t)e = ((uint64_t)t->tag << 32) | q;
                t->mapped[q] = true;
            }
        } else {
            t->bad += mb_vspace_unmap_async(t->v, p, n, NULL) != 0;
            memset(t->mapped + p, 0, n);
        }
        for (size_t q = 0; q < STRESS_PAGES && !t->bad; q++) {
            uint64_t e = walk(d, q);
            if (t->mapped[q] != (e != MB_VSPACE_INVALID) ||
                (e != MB_VSPACE_INVALID && *(uint64_t *)(uintptr_t)e != (((uint64_t)t->tag << 32) | q)))
                t->bad++;
        }
    }
    return NULL;
}

static void test_threads_stress(void **state)
{
    (void)state;
    setenv("MOONBRIGHT_IDLE_MS", "50", 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "vspace-stress"), 0);
    struct stress t[STRESS_THREADS];
    pthread_t th[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        t[i] = (struct stress){ .c = c, .tag = 0x100u + (uint32_t)i, .seed = 0x9E37ull * (uint64_t)(i + 1) };
        t[i].mapped = calloc(STRESS_PAGES, 1);
        assert_int_equal(mb_vspace_create(c, STRESS_PAGES * (64 << 10), 64 << 10, &t[i].v), 0);
    }
    unsetenv("MOONBRIGHT_IDLE_MS");   /* read when the thread started */
    for (int i = 0; i < STRESS_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, stress_main, &t[i]), 0);
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(th[i], NULL);
    mb_vspace *v[STRESS_THREADS];
    uint32_t tags[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        assert_int_equal(t[i].bad, 0);
        v[i] = t[i].v;
        tags[i] = t[i].tag;
    }
    check_owners(v, tags, STRESS_THREADS, STRESS_PAGES);
    for (int i = 0; i < STRESS_THREADS; i++) {
        mb_vspace_destroy(t[i].v);
        free(t[i].mapped);
    }
    assert_int_equal(mb_trim(c, 0), 0);
    mb_client_stats st = stats_of(c);
    assert_int_equal(st.vspace_pool_bytes, 0);
    mb_close(c);
}

/* Pools and growable tails left unused for $MOONBRIGHT_IDLE_MS go back by
 * themselves; mb_close stops the thread and returns everything, and the
 * daemon's books balance. */
static void test_idle_and_close(void **state)
{
    (void)state;
    assert_int_equal(mb_trim(g_c, 0), 0);
    int threads0 = n_threads();
    double granted0 = status_num("frames_granted");
    setenv("MOONBRIGHT_IDLE_MS", "200", 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "vspace-idle"), 0);
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(c, (size_t)1 << 30, 2 << 20, &v), 0);
    unsetenv("MOONBRIGHT_IDLE_MS");   /* read when the thread started */
    assert_int_equal(mb_vspace_map_async(v, 0, 40, NULL), 0);
    void *g;
    assert_int_equal(mb_malloc_growable(c, 8 << 20, 64 << 20, &g), 0);
    assert_true(refill_running(c));
    assert_true(status_num("frames_granted") > granted0);
    mb_vspace_destroy(v);
    /* Nothing uses the pool or the growable tail now: both go back. */
    mb_client_stats st = stats_of(c);
    for (int i = 0; i < 200 && (st.vspace_pool_bytes || st.grow_mapped_ahead); i++) {
        mbt_sleep_ms(25);
        st = stats_of(c);
    }
    assert_int_equal(st.vspace_pool_bytes, 0);
    assert_int_equal(st.vspace_extents, 0);
    assert_int_equal(st.grow_mapped_ahead, 0);
    assert_int_equal(mb_usable_size(c, g), 8 << 20);
    memset(g, 0x3C, 8 << 20);
    /* The pool fills again on use; close with a vspace mapped and a growable
     * range live: the thread stops, everything goes back. */
    assert_int_equal(mb_vspace_create(c, (size_t)1 << 30, 2 << 20, &v), 0);
    assert_int_equal(mb_vspace_map_async(v, 0, 40, NULL), 0);
    mb_vspace_destroy(v);
    assert_true(n_threads() > threads0);
    mb_close(c);
    assert_int_equal(n_threads(), threads0);
    for (int i = 0; i < 200 && status_num("frames_granted") != granted0; i++)
        mbt_sleep_ms(25);
    assert_true(status_num("frames_granted") == granted0);
}

/* Grow in place: the tail is mapped ahead in the background; a grow inside
 * it makes no daemon request and maps nothing; data survives every grow;
 * a grow past the tail maps at once (a wait); past the reservation fails. */
static void test_grow_tail(void **state)
{
    (void)state;
    const size_t mib = 1 << 20;
    void *p;
    /* 4 MiB used of 6 MiB reserved: the rest is mapped ahead (the tail's
     * target, 8 MiB, is cut to the max). A new range: freed ones of earlier
     * tests are unmapped first. */
    assert_int_equal(mb_trim(g_c, 0), 0);
    assert_int_equal(mb_malloc_growable(g_c, 4 * mib, 6 * mib, &p), 0);
    assert_int_equal(mb_usable_size(g_c, p), 4 * mib);
    memset(p, 0x11, 4 * mib);
    mb_client_stats st = stats_of(g_c);
    for (int i = 0; i < 200 && st.grow_mapped_ahead < 2 * mib; i++) {
        mbt_sleep_ms(10);
        st = stats_of(g_c);
    }
    assert_int_equal(st.grow_mapped_ahead, 2 * mib);   /* mapped up to the reservation */
    /* Background work of earlier tests (table nodes cleared, pools
     * refilled) settles first: no daemon request for 100 ms. */
    for (int i = 0, quiet = 0; i < 200 && quiet < 5; i++) {
        mbt_sleep_ms(20);
        mb_client_stats now = stats_of(g_c);
        quiet = now.daemon_requests == st.daemon_requests ? quiet + 1 : 0;
        st = now;
    }
    mb_client_stats before = st;
    assert_int_equal(mb_grow(g_c, p, 5 * mib), 0);
    memset((char *)p + 4 * mib, 0x22, mib);
    assert_int_equal(mb_grow(g_c, p, 6 * mib), 0);
    memset((char *)p + 5 * mib, 0x33, mib);
    st = stats_of(g_c);
    assert_int_equal(st.daemon_requests, before.daemon_requests);
    assert_int_equal(st.bytes_mapped, before.bytes_mapped);
    assert_int_equal(st.frames_imported, before.frames_imported);
    assert_int_equal(st.grow_waits, before.grow_waits);
    assert_int_equal(st.grow_mapped_ahead, 0);
    assert_int_equal(mb_usable_size(g_c, p), 6 * mib);
    assert_int_equal(mb_grow(g_c, p, 6 * mib + 1), MB_EINVAL);
    assert_int_equal(mb_grow(g_c, p, 2 * mib), 0);   /* shrinking is not done: no-op */
    assert_int_equal(mb_usable_size(g_c, p), 6 * mib);
    for (size_t i = 0; i < 6 * mib; i += 4096) {
        unsigned char want = i < 4 * mib ? 0x11 : i < 5 * mib ? 0x22 : 0x33;
        assert_int_equal(((unsigned char *)p)[i], want);
    }
    assert_int_equal(mb_free(g_c, p), 0);
    assert_int_equal(mb_usable_size(g_c, p), 0);
    assert_int_equal(mb_grow(g_c, p, 6 * mib), MB_ENOENT);

    /* The thread refills a tail a grow used up: it maps a tail ahead of
     * 4 MiB (half of a range this small: one 2 MiB unit, not the 8 MiB of
     * larger ranges); growing through all of it empties it, and the thread
     * maps ahead again (twice the last step); growing into that makes no
     * wait. A new range: the freed one is unmapped first. */
    assert_int_equal(mb_trim(g_c, 0), 0);
    assert_int_equal(mb_malloc_growable(g_c, 4 * mib, 64 * mib, &p), 0);
    st = stats_of(g_c);
    for (int i = 0; i < 200 && st.grow_mapped_ahead < 2 * mib; i++) {
        mbt_sleep_ms(10);
        st = stats_of(g_c);
    }
    mbt_sleep_ms(50);   /* and no more comes */
    st = stats_of(g_c);
    assert_int_equal(st.grow_mapped_ahead, 2 * mib);
    size_t end = 4 * mib + st.grow_mapped_ahead;
    before = st;
    assert_int_equal(mb_grow(g_c, p, end), 0);   /* the whole tail: bookkeeping */
    st = stats_of(g_c);
    assert_int_equal(st.grow_waits, before.grow_waits);
    for (int i = 0; i < 200 && st.grow_mapped_ahead < 4 * mib; i++) {
        mbt_sleep_ms(10);
        st = stats_of(g_c);
    }
    assert_true(st.grow_mapped_ahead >= 4 * mib);
    before = st;
    assert_int_equal(mb_grow(g_c, p, end + 4 * mib), 0);
    memset(p, 0x44, end + 4 * mib);
    st = stats_of(g_c);
    assert_int_equal(st.grow_waits, before.grow_waits);
    /* A growable range can be shared; trimming keeps its shared frames. */
    mb_share_token tok;
    assert_int_equal(mb_export(g_c, p, &tok), 0);
    assert_int_equal(mb_trim(g_c, 0), 0);
    assert_int_equal(mb_usable_size(g_c, p), end + 4 * mib);
    memset(p, 0x45, end + 4 * mib);
    assert_int_equal(mb_free(g_c, p), 0);

    /* Many grows by one block: data kept, tails ahead, waits counted only
     * past the tail; trim returns the tails. */
    const size_t block = 2 * mib, max = 256 * mib;
    assert_int_equal(mb_malloc_growable(g_c, block, max, &p), 0);
    memset(p, 1, block);
    uint64_t waits0 = stats_of(g_c).grow_waits;
    size_t used = block;
    for (int k = 2; used + block <= max; k++) {
        assert_int_equal(mb_grow(g_c, p, used + block), 0);
        memset((char *)p + used, k & 0xff, block);
        used += block;
    }
    for (size_t off = 0, k = 1; off < used; off += block, k++)
        assert_int_equal(((unsigned char *)p)[off + block - 1], (unsigned char)(k & 0xff));
    st = stats_of(g_c);
    assert_true(st.grow_waits >= waits0);
    assert_true(st.grow_waits - waits0 < used / block);   /* some grows were bookkeeping */
    assert_int_equal(mb_usable_size(g_c, p), max);
    assert_int_equal(mb_free(g_c, p), 0);

    /* A new range (the freed one unmapped first, so that it is not reused
     * with frames straddling the size used). */
    assert_int_equal(mb_trim(g_c, 0), 0);
    assert_int_equal(mb_malloc_growable(g_c, 32 * mib, max, &p), 0);
    st = stats_of(g_c);
    for (int i = 0; i < 200 && st.grow_mapped_ahead == 0; i++) {
        mbt_sleep_ms(25);
        st = stats_of(g_c);
    }
    assert_true(st.grow_mapped_ahead > 0);
    size_t mapped = st.bytes_mapped;
    assert_int_equal(mb_trim(g_c, 0), 0);
    st = stats_of(g_c);
    assert_true(st.grow_mapped_ahead < st.frame_bytes);
    assert_true(st.bytes_mapped < mapped);
    memset(p, 7, 32 * mib);   /* the used part stays mapped */
    assert_int_equal(mb_free(g_c, p), 0);

    /* Ranges that grow by little keep little ahead: after grows of 64 KiB
     * (a KV cache of small tokens), a new 64 MiB range's tail is one or two
     * units (at most 4 growth steps, rounded up), not the 8 MiB of ranges
     * that grow by whole units; growing through it still keeps data. */
    const size_t small = 64 << 10;
    assert_int_equal(mb_malloc_growable(g_c, 64 * mib, max, &p), 0);
    for (size_t u = 64 * mib; u < 66 * mib; u += small)
        assert_int_equal(mb_grow(g_c, p, u + small), 0);
    assert_int_equal(mb_free(g_c, p), 0);
    assert_int_equal(mb_trim(g_c, 0), 0);
    assert_int_equal(mb_malloc_growable(g_c, 64 * mib, max, &p), 0);
    memset(p, 0x55, 64 * mib);
    used = 64 * mib;
    for (int k = 0; k < 100; k++) {
        assert_int_equal(mb_grow(g_c, p, used + small), 0);
        memset((char *)p + used, 0x56, small);
        used += small;
        if (k % 10 == 0)
            mbt_sleep_ms(5);   /* time for the thread to keep the tail ahead */
    }
    for (int i = 0, quiet = 0; i < 200 && quiet < 5; i++) {   /* refills settle */
        mbt_sleep_ms(20);
        mb_client_stats now = stats_of(g_c);
        quiet = now.daemon_requests == st.daemon_requests ? quiet + 1 : 0;
        st = now;
    }
    assert_true(st.grow_mapped_ahead > 0);
    assert_true(st.grow_mapped_ahead <= 2 * st.frame_bytes);
    assert_int_equal(((unsigned char *)p)[0], 0x55);
    assert_int_equal(((unsigned char *)p)[used - 1], 0x56);
    assert_int_equal(mb_free(g_c, p), 0);
}

/* On the host backend the slow path maps before it returns. */
static void test_amap_host(void **state)
{
    (void)state;
    struct stitched *s = NULL;
    assert_int_equal(amap_take_error(g_c), 0);
    int rc = amap_alloc(g_c, 5 << 20, NULL, &s);
    assert_int_equal(rc, 0);
    assert_true(s->bytes >= (size_t)5 << 20);
    memset(s->va, 0x5A, 5 << 20);
    assert_int_equal(amap_in_flight(g_c), 0);
    bool failed, unmapped;
    amap_settle(g_c, s, &failed, &unmapped);
    assert_false(failed);
    pthread_mutex_lock(&g_c->flock);
    assert_int_equal(stitch_free(g_c, s, NULL), 0);
    pthread_mutex_unlock(&g_c->flock);
    amap_close(g_c);
}

/* Bytes at p from `from` to `to` hold (check) or get (!check) a pattern of
 * seed; true when they all matched. */
static bool pattern(void *p, size_t from, size_t to, unsigned seed, bool check)
{
    unsigned char *b = p;
    for (size_t i = from; i < to; i += 4096) {
        unsigned char v = (unsigned char)(seed * 31 + i / 4096);
        if (!check)
            b[i] = v;
        else if (b[i] != v)
            return false;
    }
    return true;
}

/* Growable ranges in stream order with the mapper thread at work, on the
 * host backend with its test gates ($MOONBRIGHT_TEST_HOST_GATES): calls
 * return with mappings queued; a range freed with them still queued goes
 * idle at once and a stream-ordered allocation on the same stream takes
 * it, a synchronous one does not; then a random run of allocations,
 * growths and frees, every byte checked once the mapper is done. Memory
 * whose mapping is queued is touched only after amap_drain. */
static void test_grow_async_gated(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20;
    setenv("MOONBRIGHT_TEST_HOST_GATES", "1", 1);
    mb_client *c = NULL;
    int rc = mb_open(&c, "gated");
    unsetenv("MOONBRIGHT_TEST_HOST_GATES");
    assert_int_equal(rc, 0);
    amap_test_inject(c, 50 * 1000, 0);   /* 50 ms a job */
    mb_client_stats st0 = stats_of(c);
    void *p = NULL, *q = NULL, *r = NULL;
    assert_int_equal(mb_malloc_growable_async(c, 4 * mib, (size_t)1 << 30, NULL, &p), 0);
    size_t in_alloc = amap_in_flight(c);
    assert_int_equal(mb_grow_async(c, p, 40 * mib, NULL), 0);
    size_t in_grow = amap_in_flight(c);
    assert_int_equal(mb_free(c, p), 0);
    size_t in_free = amap_in_flight(c);
    /* The growth mapped twice its step ahead (72 MiB past 40): an owner
     * takes the range only if at most one tail would stay stranded past
     * its own, so the same stream asks for what the range holds. */
    size_t held = stats_of(c).bytes_idle;
    assert_true(held >= 40 * mib);
    assert_int_equal(mb_malloc_growable(c, 40 * mib, (size_t)1 << 30, &q), 0);
    assert_int_equal(mb_malloc_growable_async(c, held, (size_t)1 << 30, NULL, &r), 0);
    size_t in_reuse = amap_in_flight(c);
    mb_client_stats st1 = stats_of(c);
    printf("  in flight after the allocation %zu, the growth %zu, the free %zu, the reuse %zu; "
           "queued %llu; freed %p, synchronous %p, same stream %p\n", in_alloc, in_grow, in_free,
           in_reuse, (unsigned long long)(st1.grow_queued - st0.grow_queued), p, q, r);
    assert_true(in_alloc >= 1 && in_grow >= 2);
    assert_true(in_free >= 1);    /* the free did not wait */
    assert_ptr_not_equal(q, p);   /* a synchronous allocation does not take it */
    assert_ptr_equal(r, p);       /* the same stream does, at once */
    assert_true(in_reuse >= 1);
    assert_true(st1.grow_queued - st0.grow_queued >= 2);
    amap_drain(c);
    assert_true(mb_usable_size(c, r) == held && mb_usable_size(c, q) == 40 * mib);
    pattern(r, 0, held, 1, false);
    pattern(q, 0, 40 * mib, 2, false);
    assert_true(pattern(r, 0, held, 1, true));
    assert_int_equal(mb_free(c, q), 0);
    assert_int_equal(mb_free(c, r), 0);

    /* A random run, the mapper fast: 6 slots, growths of 1-8 MiB. */
    amap_test_inject(c, 0, 0);
    enum { SLOTS = 6 };
    void *ptr[SLOTS] = { 0 };
    size_t size[SLOTS] = { 0 }, written[SLOTS] = { 0 };
    unsigned seed[SLOTS] = { 0 };
    unsigned x = 12345;
    for (int op = 0; op < 3000; op++) {
        x = x * 1103515245u + 12345u;
        int k = (int)((x >> 16) % SLOTS), what = (int)((x >> 8) % 8);
        if (what == 7) {   /* the mapper done: check what was written, write the rest */
            amap_drain(c);
            for (int j = 0; j < SLOTS; j++) {
                if (!ptr[j])
                    continue;
                assert_true(pattern(ptr[j], 0, written[j], seed[j], true));
                pattern(ptr[j], written[j], size[j], seed[j], false);
                written[j] = size[j];
            }
        } else if (!ptr[k]) {
            size[k] = ((x >> 4) % 16 + 1) * mib;
            seed[k] = (unsigned)op;
            written[k] = 0;
            assert_int_equal(mb_malloc_growable_async(c, size[k], 512 * mib, NULL, &ptr[k]), 0);
        } else if (what < 4 && size[k] < 400 * mib) {
            size[k] += ((x >> 4) % 8 + 1) * mib;
            assert_int_equal(mb_grow_async(c, ptr[k], size[k], NULL), 0);
        } else {
            if (written[k]) {   /* (its first bytes were mapped before they were written) */
                amap_drain(c);
                assert_true(pattern(ptr[k], 0, written[k], seed[k], true));
            }
            assert_int_equal(mb_free(c, ptr[k]), 0);
            ptr[k] = NULL;
        }
        if (op % 500 == 0)
            assert_int_equal(mb_trim(c, 0), 0);
    }
    amap_drain(c);
    for (int j = 0; j < SLOTS; j++) {
        if (!ptr[j])
            continue;
        assert_true(pattern(ptr[j], 0, written[j], seed[j], true));
        assert_int_equal(mb_usable_size(c, ptr[j]), size[j]);
        assert_int_equal(mb_free(c, ptr[j]), 0);
    }
    mb_client_stats st2 = stats_of(c);
    printf("  random run: %llu mappings queued\n",
           (unsigned long long)(st2.grow_queued - st1.grow_queued));
    assert_true(st2.grow_queued > st1.grow_queued);
    mb_close(c);
}

/* The mapper's queue bounds stream-ordered growth, not frees: with
 * MOONBRIGHT_GROW_LAG=1 and a mapper that takes 50 ms a job, each
 * stream-ordered allocation returns with at most 2 jobs queued (it waited
 * for the mapper before queuing its own), and a free of a range whose job
 * is still queued returns with both still queued (it did not wait for the
 * mapper). Every byte is checked once the mapper is done. */
static void test_grow_lag_bounds_growth_not_frees(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20;
    setenv("MOONBRIGHT_TEST_HOST_GATES", "1", 1);
    setenv("MOONBRIGHT_GROW_LAG", "1", 1);
    setenv("MOONBRIGHT_GROW_SPARES", "0", 1);   /* every allocation maps its own */
    mb_client *c = NULL;
    int rc = mb_open(&c, "lag");
    unsetenv("MOONBRIGHT_TEST_HOST_GATES");
    unsetenv("MOONBRIGHT_GROW_LAG");
    unsetenv("MOONBRIGHT_GROW_SPARES");
    assert_int_equal(rc, 0);
    amap_test_inject(c, 50 * 1000, 0);
    mb_client_stats st0 = stats_of(c);
    void *p[4] = { 0 };
    size_t most = 0;
    for (int k = 0; k < 4; k++) {
        assert_int_equal(mb_malloc_growable_async(c, (size_t)(k + 2) * mib, (size_t)1 << 30, NULL,
                                                  &p[k]), 0);
        size_t n = amap_in_flight(c);
        most = n > most ? n : most;
    }
    assert_int_equal(mb_free(c, p[3]), 0);
    size_t in_free = amap_in_flight(c);
    mb_client_stats st1 = stats_of(c);
    printf("  at most %zu jobs queued after an allocation, %zu after the free; %llu queued\n",
           most, in_free, (unsigned long long)(st1.grow_queued - st0.grow_queued));
    assert_true(st1.grow_queued - st0.grow_queued >= 4);   /* each allocation queued a job */
    assert_true(most <= 2);
    assert_true(in_free >= 2);
    amap_drain(c);
    for (int k = 0; k < 3; k++) {
        assert_true(mb_usable_size(c, p[k]) == (size_t)(k + 2) * mib);
        pattern(p[k], 0, (size_t)(k + 2) * mib, 10u + (unsigned)k, false);
    }
    for (int k = 0; k < 3; k++) {
        assert_true(pattern(p[k], 0, (size_t)(k + 2) * mib, 10u + (unsigned)k, true));
        assert_int_equal(mb_free(c, p[k]), 0);
    }
    amap_test_inject(c, 0, 0);
    mb_close(c);
}

/* A client knob read from the environment at mb_open: each of vals[k]
 * gives want[k], as read back by value_of. */
static void check_env_knob(const char *name, const char *const *vals, const size_t *want, size_t n,
                           size_t (*value_of)(const mb_client *))
{
    for (size_t k = 0; k < n; k++) {
        setenv(name, vals[k], 1);
        mb_client *c = NULL;
        assert_int_equal(mb_open(&c, "env-knob"), 0);
        assert_int_equal(value_of(c), want[k]);
        mb_close(c);
    }
    unsetenv(name);
}

static size_t lag_of(const mb_client *c) { return c->grow_lag; }
static size_t near_pct_of(const mb_client *c) { return c->fc.near_pct; }

/* MOONBRIGHT_GROW_LAG (or its former name, MOONBRIGHT_GROW_FREE_LAG): how
 * far stream-ordered growth may run ahead of the mapper; a value that is
 * no count in range is ignored (the default, 8). */
static void test_grow_lag_env(void **state)
{
    (void)state;
    const char *vals[] = { "3", "0", "abc", "-1", "", "99999999" };
    const size_t want[] = { 3, 0, 8, 8, 8, 8 };
    check_env_knob("MOONBRIGHT_GROW_LAG", vals, want, 6, lag_of);
    check_env_knob("MOONBRIGHT_GROW_FREE_LAG", vals, want, 6, lag_of);
    setenv("MOONBRIGHT_GROW_FREE_LAG", "5", 1);
    const char *lag[] = { "2" };
    const size_t two[] = { 2 };
    check_env_knob("MOONBRIGHT_GROW_LAG", lag, two, 1, lag_of);   /* the new name first */
    unsetenv("MOONBRIGHT_GROW_FREE_LAG");
}

/* MOONBRIGHT_NEAR_BUDGET_PCT: 0 to 1000, else the default 12. */
static void test_near_budget_pct_env(void **state)
{
    (void)state;
    const char *vals[] = { "25", "0", "x", "-3", "", "1001" };
    const size_t want[] = { 25, 0, 12, 12, 12, 12 };
    check_env_knob("MOONBRIGHT_NEAR_BUDGET_PCT", vals, want, 6, near_pct_of);
}

/* Stream-ordered growable calls on the host backend, which cannot gate a
 * stream: they map before returning, as mb_malloc_growable and mb_grow
 * do (counted as waits, none queued), and the bytes are usable at once. */
static void test_grow_async_host(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20;
    void *p = NULL;
    mb_client_stats st0 = stats_of(g_c);
    assert_int_equal(mb_malloc_growable_async(g_c, 0, mib, NULL, &p), MB_EINVAL);
    assert_int_equal(mb_malloc_growable_async(g_c, 2 * mib, mib, NULL, &p), MB_EINVAL);
    assert_int_equal(mb_malloc_growable_async(NULL, mib, mib, NULL, &p), MB_EINVAL);
    assert_int_equal(mb_malloc_growable_async(g_c, 3 * mib, 256 * mib, NULL, &p), 0);
    memset(p, 0x61, 3 * mib);
    assert_int_equal(mb_grow_async(g_c, p, 200 * mib, NULL), 0);   /* past any tail */
    memset((char *)p + 3 * mib, 0x62, 197 * mib);
    assert_int_equal(mb_grow_async(g_c, p, 300 * mib, NULL), MB_EINVAL);
    assert_int_equal(mb_grow_async(g_c, (char *)p + 1, 4 * mib, NULL), MB_ENOENT);
    mb_client_stats st1 = stats_of(g_c);
    assert_int_equal(st1.grow_queued, st0.grow_queued);
    assert_true(st1.grow_waits >= st0.grow_waits + 2);   /* the allocation and the growth */
    assert_int_equal(mb_usable_size(g_c, p), 200 * mib);
    for (size_t i = 0; i < 200 * mib; i += 4096)
        assert_int_equal(((unsigned char *)p)[i], i < 3 * mib ? 0x61 : 0x62);
    assert_int_equal(mb_free_async(g_c, p, NULL), 0);
    assert_int_equal(mb_grow_async(g_c, p, 4 * mib, NULL), MB_ENOENT);
    /* The daemon's view (mbctl tenants) follows the client's counters. */
    assert_true(WAIT_FOR(3000, mbt_tenant_num(&g_d, "vspace-test", "grow_waits") >=
                                   (double)st1.grow_waits));
    assert_true(mbt_tenant_num(&g_d, "vspace-test", "grow_queued") == 0);
}

/* A client of its own whose idle policy waits ten minutes (so nothing a
 * test sees comes from it) and whose frame cache keeps `cache` bytes;
 * spares: whether it makes spare growable ranges. */
static mb_client *open_patient_spares(const char *tenant, const char *cache, bool spares)
{
    setenv("MOONBRIGHT_IDLE_MS", "600000", 1);
    setenv("MOONBRIGHT_CACHE", cache, 1);
    if (!spares)
        setenv("MOONBRIGHT_GROW_SPARES", "0", 1);
    mb_client *c = NULL;
    int rc = mb_open(&c, tenant);
    unsetenv("MOONBRIGHT_IDLE_MS");
    unsetenv("MOONBRIGHT_CACHE");
    unsetenv("MOONBRIGHT_GROW_SPARES");
    assert_int_equal(rc, 0);
    return c;
}

static mb_client *open_patient(const char *tenant, const char *cache)
{
    return open_patient_spares(tenant, cache, true);
}

/* Near the budget (what the daemon could still grant is under
 * MOONBRIGHT_NEAR_BUDGET_PCT percent of what the process holds) the heap
 * fits large requests closely; elsewhere it splits. Either way a freed
 * growable range whose frames would strand memory past a new owner's size
 * once its excess went back is passed over, and one that would not is
 * reused. A daemon of its own, with a budget the client learns from its
 * grants. */
static void test_near_budget(void **state)
{
    (void)state;
    const size_t mib = 1 << 20;
    const char *extra[] = { "--budget", "512M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    for (int near = 0; near < 2; near++) {
        /* 1000 %: near while the room is under ten times what it holds. */
        setenv("MOONBRIGHT_NEAR_BUDGET_PCT", near ? "1000" : "0", 1);
        mb_client *c = open_patient_spares("near", "256M", false);
        unsetenv("MOONBRIGHT_NEAR_BUDGET_PCT");
        void *p, *q, *r;
        /* 64 MiB and its 8 MiB tail: a 64 MiB frame and an 8 MiB one. */
        assert_int_equal(mb_malloc_growable(c, 64 * mib, 1024 * mib, &p), 0);
        memset(p, 0x4D, 64 * mib);
        mb_client_stats st = stats_of(c);
        assert_true(st.grant_room > 0);
        assert_true(st.grant_room + st.bytes_granted <= 512 * mib);
        assert_int_equal(st.near_budget, near);
        assert_int_equal(mb_free(c, p), 0);
        mb_client_stats before = stats_of(c);
        assert_true(before.bytes_idle >= 64 * mib);
        /* 4 MiB and a 2 MiB tail: the freed range would keep its 64 MiB
         * frame whole. */
        assert_int_equal(mb_malloc_growable(c, 4 * mib, 1024 * mib, &q), 0);
        memset(q, 0x4E, 4 * mib);
        mb_client_stats after = stats_of(c);
        assert_ptr_not_equal(q, p);
        assert_int_equal(after.grow_close_passes, before.grow_close_passes + 1);
        assert_int_equal(after.grow_waits, before.grow_waits + 1);   /* mapped its own */
        /* 60 MiB and an 8 MiB tail: the 72 MiB it holds are at most one
         * tail more, so it is reused as it is, with no driver call. */
        before = after;
        assert_int_equal(mb_malloc_growable(c, 60 * mib, 1024 * mib, &r), 0);
        memset(r, 0x4C, 60 * mib);
        after = stats_of(c);
        assert_ptr_equal(r, p);
        assert_int_equal(after.grow_close_passes, before.grow_close_passes);
        assert_int_equal(after.grow_waits, before.grow_waits);
        assert_int_equal(mb_free(c, r), 0);
        assert_int_equal(mb_usable_size(c, q), 4 * mib);
        assert_int_equal(mb_free(c, q), 0);
        /* The heap: a 64 MiB block freed, then 16 MiB asked for. Near the
         * budget the request misses rather than split a block four times
         * its size; elsewhere it is carved from it. */
        assert_int_equal(mb_malloc(c, 64 * mib, &p), 0);
        assert_int_equal(mb_free(c, p), 0);
        before = stats_of(c);
        assert_int_equal(mb_malloc(c, 16 * mib, &q), 0);
        memset(q, 0x4F, 16 * mib);
        after = stats_of(c);
        assert_int_equal(after.heap_hits, before.heap_hits + !near);
        assert_int_equal(after.heap_grants, before.heap_grants + near);
        assert_int_equal(mb_free(c, q), 0);
        mb_close(c);
    }
    setenv("MOONBRIGHT_RUNTIME_DIR", g_d.dir, 1);
    mbt_daemon_stop(&d);
}

/* A budget full of free frames of a smaller size (a tenant gone): a page
 * pool's extent is granted those frames, not a frame of its own that the
 * daemon would have to release them for and make on the grant's path.
 * With room in the budget, the extent's planned frame is made instead (few
 * frames to map). A daemon of its own each time: 16 free 64 MiB frames in
 * a budget of 1 GiB (and 64 MiB for the table's nodes), then of 4 GiB. */
static void extent_frames(const char *budget, size_t *taken, size_t *larger, double *warm_full)
{
    const uint64_t mib = 1 << 20;
    const char *extra[] = { "--budget", budget, NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session gone;
    assert_int_equal(mbt_session_open(&d, "gone", &gone), 0);
    for (int i = 0; i < 16; i++)
        assert_int_equal(mbt_session_grant_large(&gone, 64 * mib), 0);
    mbt_session_close(&gone);
    assert_int_equal(mbt_status_wait(&d, "frames_granted", 0, 2000), 0);
    double creates0 = mbt_status_num(&d, "grant_creates");
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    mb_client *c = open_patient("pool", "0");
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(c, (size_t)1 << 30, 2 * mib, &v), 0);
    assert_int_equal(mb_vspace_map_async(v, 0, 256, NULL), 0);   /* 512 MiB of pages */
    const struct mb_vspace_dev *t = mb_vspace_device(v);
    for (size_t i = 0; i < 256; i++)
        *(uint64_t *)(uintptr_t)walk(t, i) = i * 3 + 1;
    for (size_t i = 0; i < 256; i++)
        assert_true(*(uint64_t *)(uintptr_t)walk(t, i) == i * 3 + 1);
    mb_client_stats st = stats_of(c);
    assert_true(st.vspace_pool_bytes >= 512 * mib);
    /* The granted 64 MiB frames, and the frames larger than them. */
    const char *args[] = { "frames", "--json", NULL };
    struct json *j = mbt_ctl_json(&d, NULL, args);
    assert_non_null(j);
    const struct json *fr = json_get(j, "frames");
    assert_non_null(fr);
    *taken = *larger = 0;
    for (size_t i = 0; i < fr->n; i++) {
        const struct json *state_of = json_get(&fr->kids[i], "state");
        bool granted = state_of && state_of->str && strcmp(state_of->str, "granted") == 0;
        double b = json_num(&fr->kids[i], "bytes");
        *taken += granted && b == (double)(64 * mib);
        *larger += b > (double)(64 * mib);
    }
    json_free(j);
    *warm_full = mbt_status_num(&d, "warm_full_grants");
    printf("  budget %s: %zu free 64 MiB frames granted to the pool, %zu larger frames, %.0f made on "
           "grant paths, %.0f grants of many free frames\n", budget, *taken, *larger,
           mbt_status_num(&d, "grant_creates") - creates0, *warm_full);
    mb_vspace_destroy(v);
    mb_close(c);
    setenv("MOONBRIGHT_RUNTIME_DIR", g_d.dir, 1);
    mbt_daemon_stop(&d);
}

static void test_extent_takes_free_frames(void **state)
{
    (void)state;
    size_t taken, larger;
    double warm_full;
    extent_frames("1088M", &taken, &larger, &warm_full);
    assert_int_equal(larger, 0);
    assert_true(taken >= 8);
    assert_true(warm_full >= 1);   /* mbctl status counts them */
    extent_frames("4G", &taken, &larger, &warm_full);
    assert_true(larger >= 1);
    assert_true(taken <= 2);   /* at most the two per planned frame of any grant */
    assert_true(warm_full == 0);
}

/* A freed growable range stays mapped and the next allocation it fits
 * takes it: no daemon request, no mapping, no wait; one it does not fit
 * (a larger max) gets a range of its own. Trim unmaps the idle ranges. */
static void test_grow_reuse(void **state)
{
    (void)state;
    const size_t mib = 1 << 20;
    mb_client *c = open_patient_spares("grow-reuse", "256M", false);   /* no spare to race with */
    void *p, *q, *r;
    assert_int_equal(mb_malloc_growable(c, 8 * mib, 24 * mib, &p), 0);
    memset(p, 0x5A, 8 * mib);
    /* Its tail (half its size below 16 MiB) mapped by the background
     * thread before the free, so that the reused range needs none: waiting
     * for more would run into the thread's idle rule (the default 2 s: the
     * thread starts with the first growable range, after open_patient's
     * setting is gone), which cuts the tail again. */
    mb_client_stats before = stats_of(c);
    for (int i = 0; i < 150 && before.grow_mapped_ahead < 4 * mib; i++) {
        mbt_sleep_ms(10);
        before = stats_of(c);
    }
    assert_true(before.grow_mapped_ahead >= 4 * mib);
    assert_int_equal(mb_free(c, p), 0);
    before = stats_of(c);
    assert_true(before.bytes_idle >= 8 * mib);   /* kept mapped */
    assert_int_equal(mb_malloc_growable(c, 8 * mib, 24 * mib, &q), 0);
    mb_client_stats after = stats_of(c);
    assert_ptr_equal(q, p);
    assert_int_equal(after.daemon_requests, before.daemon_requests);
    assert_int_equal(after.bytes_mapped, before.bytes_mapped);
    assert_int_equal(after.grow_waits, before.grow_waits);
    assert_int_equal(mb_usable_size(c, q), 8 * mib);
    assert_int_equal(mb_grow(c, q, 24 * mib), 0);   /* up to its own max */
    assert_int_equal(mb_grow(c, q, 24 * mib + 1), MB_EINVAL);
    memset(q, 0x6B, 24 * mib);
    /* A max past the range's reservation (1 GiB at least): a new range. */
    assert_int_equal(mb_free(c, q), 0);
    assert_int_equal(mb_malloc_growable(c, 8 * mib, 2048 * mib, &r), 0);
    assert_ptr_not_equal(r, q);
    memset(r, 0x7C, 8 * mib);
    assert_int_equal(mb_free(c, r), 0);
    before = stats_of(c);
    assert_true(before.bytes_idle >= 8 * mib);   /* r at least, kept mapped */
    assert_int_equal(mb_trim(c, 0), 0);
    after = stats_of(c);
    assert_true(before.bytes_idle - after.bytes_idle >= 8 * mib);   /* unmapped by the trim */
    assert_true(before.bytes_mapped - after.bytes_mapped >= 8 * mib);
    assert_int_equal(after.grow_mapped_ahead, 0);
    mb_close(c);
}

/* Poll c's stats until ok(st) holds, 30 s at most on a loaded machine. */
static mb_client_stats wait_stats(mb_client *c, bool (*ok)(const mb_client_stats *))
{
    mb_client_stats st = stats_of(c);
    for (int i = 0; i < 3000 && !ok(&st); i++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        st = stats_of(c);
    }
    return st;
}

static bool ahead_cut(const mb_client_stats *st)
{
    return st->grow_mapped_ahead <= (16u << 20) && st->bytes_mapped - st->bytes_idle <= (32u << 20);
}
static bool spare_ready(const mb_client_stats *st) { return st->bytes_idle >= (4u << 20); }

/* A freed range mapped far past what a new allocation needs is still
 * handed to it at once (no wait), and the background thread unmaps its
 * excess (spares off: the freed range is the only idle one); with spares
 * on, a spare range of a recent allocation's size is ready for the next
 * allocation with no wait and no round trip. */
static void test_grow_excess_and_spares(void **state)
{
    (void)state;
    const size_t mib = 1 << 20;
    mb_client *c = open_patient_spares("grow-excess", "1G", false);
    void *a, *b, *d;
    assert_int_equal(mb_malloc_growable(c, 2 * mib, 64 * mib, &a), 0);
    for (size_t n = 4; n <= 48; n += 2)
        assert_int_equal(mb_grow(c, a, n * mib), 0);
    memset(a, 0x11, 48 * mib);
    assert_int_equal(mb_free(c, a), 0);
    mb_client_stats st0 = stats_of(c);
    assert_true(st0.bytes_idle >= 48 * mib);
    /* Reused as it is, 46 MiB past its use. */
    assert_int_equal(mb_malloc_growable(c, 2 * mib, 64 * mib, &b), 0);
    mb_client_stats st1 = stats_of(c);
    assert_ptr_equal(b, a);
    assert_int_equal(st1.grow_waits, st0.grow_waits);
    assert_int_equal(st1.daemon_requests, st0.daemon_requests);
    memset(b, 0x22, 2 * mib);
    /* The excess goes back to the frame cache. */
    mb_client_stats st2 = wait_stats(c, ahead_cut);
    assert_true(ahead_cut(&st2));   /* 48 MiB mapped for 2 MiB used before */
    assert_int_equal(st2.bytes_granted, st1.bytes_granted);   /* kept by the process */
    assert_true(st2.bytes_idle < 4 * mib);                    /* no spare range made */
    assert_int_equal(((unsigned char *)b)[2 * mib - 1], 0x22);
    assert_int_equal(mb_free(c, b), 0);
    mb_close(c);

    /* Spares on: after one allocation, a spare range comes ready. */
    c = open_patient("grow-spares", "1G");
    assert_int_equal(mb_malloc_growable(c, 2 * mib, 64 * mib, &b), 0);
    memset(b, 0x22, 2 * mib);
    mb_client_stats st3 = wait_stats(c, spare_ready);
    assert_true(spare_ready(&st3));
    assert_int_equal(mb_malloc_growable(c, 2 * mib, 8 * mib, &d), 0);
    mb_client_stats st4 = stats_of(c);
    assert_int_equal(st4.grow_waits, st3.grow_waits);   /* mapped already: the spare */
    memset(d, 0x33, 2 * mib);
    assert_int_equal(((unsigned char *)b)[2 * mib - 1], 0x22);
    assert_int_equal(((unsigned char *)d)[2 * mib - 1], 0x33);
    assert_int_equal(mb_free(c, b), 0);
    assert_int_equal(mb_free(c, d), 0);
    mb_close(c);
}

/* A small load's pool holds little: one 64 KiB page mapped and unmapped
 * 200 times in a client of its own maps extents of a few units, not the
 * 64 MiB a growing pool's extents reach (an extent is at least a quarter
 * of what the pool holds, and 64 MiB only once it holds 256 MiB). */
static void test_refill_small_load(void **state)
{
    (void)state;
    mb_client *c = open_patient("vspace-small", "1G");
    const size_t page = 64 << 10;
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(c, 64 * page, page, &v), 0);
    size_t most = churn_pool_peak(c, v, 1, 200);
    assert_true(most >= page);
    assert_true(most <= (size_t)8 << 20);
    mb_vspace_destroy(v);
    mb_close(c);
}

/* A load that rises by small takes keeps few free pages: the free-page
 * floor is twice the largest take of the last second, up to 512 MiB.
 * 2 000 pages (125 MiB) taken 8 at a time, the refill thread let act every
 * 50 takes: at most 64 MiB free at any point (up to about 375 MiB when
 * the floor was 512 MiB whatever the takes). */
static void test_refill_small_takes(void **state)
{
    (void)state;
    mb_client *c = open_patient("vspace-small-takes", "2G");
    const size_t page = 64 << 10, n = 2000, k = 8;
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(c, n * page, page, &v), 0);
    size_t most_free = 0;
    for (size_t i = 0; i < n / k; i++) {
        assert_int_equal(mb_vspace_map_async(v, i * k, k, NULL), 0);
        if (i % 50 == 0)
            mbt_sleep_ms(20);   /* let the refill thread act on what it saw */
        mb_client_stats st = stats_of(c);
        most_free = st.vspace_free_bytes > most_free ? st.vspace_free_bytes : most_free;
    }
    mbt_sleep_ms(150);
    mb_client_stats st = stats_of(c);
    most_free = st.vspace_free_bytes > most_free ? st.vspace_free_bytes : most_free;
    assert_int_equal(mb_vspace_mapped_pages(v), n);
    assert_true(st.vspace_pool_bytes >= n * page);
    assert_true(most_free <= (size_t)64 << 20);
    mb_vspace_destroy(v);
    mb_close(c);
}

/* Spare ranges follow what the bytes in use rise by, not how many
 * allocations come: one range at a time, allocated and freed 300 times
 * (a light load turning over fast), keeps little idle; 24 ranges live at
 * once (a load that grows) get spares again. Before spares followed the
 * rise, the churn filled the idle ranges to their 128 MiB floor. */
static void test_grow_spares_follow_rise(void **state)
{
    (void)state;
    const size_t mib = 1 << 20;
    mb_client *c = open_patient("grow-churn", "1G");
    size_t most = 0;
    for (int i = 0; i < 300; i++) {
        void *p;
        assert_int_equal(mb_malloc_growable(c, mib, 4 * mib, &p), 0);
        memset(p, i, mib);
        assert_int_equal(mb_free(c, p), 0);
        if (i % 30 == 0)
            mbt_sleep_ms(20);   /* let the background thread act on what it saw */
        mb_client_stats st = stats_of(c);
        most = st.bytes_idle > most ? st.bytes_idle : most;
    }
    mbt_sleep_ms(150);
    mb_client_stats st = stats_of(c);
    most = st.bytes_idle > most ? st.bytes_idle : most;
    assert_true(most <= 16 * mib);
    /* A rise of 48 MiB: spares come (up to twice the rise). */
    void *live[24];
    for (int i = 0; i < 24; i++)
        assert_int_equal(mb_malloc_growable(c, 2 * mib, 8 * mib, &live[i]), 0);
    st = wait_stats(c, spare_ready);
    assert_true(spare_ready(&st));
    for (int i = 0; i < 24; i++)
        assert_int_equal(mb_free(c, live[i]), 0);
    mb_close(c);
}

/* Freed growable ranges past the idle cap are unmapped into the frame
 * cache; past the cache's size, the frames no allocation takes go back to
 * the daemon soon, not at the idle policy's time (set to ten minutes here,
 * so only the stale-frame rule can return them). */
static void test_grow_cache_drains(void **state)
{
    (void)state;
    const size_t mib = 1 << 20, keep = 64 * mib;
    mb_client *c = open_patient_spares("grow-cache", "64M", false);
    enum { N = 32 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(mb_malloc_growable(c, 16 * mib, 16 * mib, &p[i]), 0);
        memset(p[i], i, 16 * mib);
    }
    /* What the process holds with every range live (once freed, the
     * background thread may start giving back at once). */
    mb_client_stats st = stats_of(c);
    size_t held_live = st.bytes_granted;
    assert_true(held_live >= (size_t)N * 16 * mib);
    for (int i = 0; i < N; i++)
        assert_int_equal(mb_free(c, p[i]), 0);
    /* The background thread unmaps what the idle cap does not keep and
     * returns the cache's excess; 30 s at most on a loaded machine. */
    for (int i = 0; i < 3000; i++) {
        st = stats_of(c);
        if (st.bytes_cached <= keep && st.bytes_idle <= 256 * mib)
            break;
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    assert_true(st.bytes_cached <= keep);
    assert_true(st.bytes_idle <= 256 * mib);   /* the idle cap: 128 MiB plus 1/64 of what is used */
    assert_true(st.bytes_granted <= st.bytes_idle + keep + st.grow_mapped_ahead);
    assert_true(st.bytes_granted < held_live);
    /* What stayed serves new ranges, data intact. */
    void *q;
    assert_int_equal(mb_malloc_growable(c, 16 * mib, 16 * mib, &q), 0);
    memset(q, 0x3C, 16 * mib);
    assert_int_equal(((unsigned char *)q)[16 * mib - 1], 0x3C);
    assert_int_equal(mb_free(c, q), 0);
    mb_close(c);
}

/* A new growable range maps frames the process caches whatever their
 * sizes: three cached 8 MiB frames serve a range of 24 MiB, whose plan
 * (16 + 8, and 2 for its tail) would have used one of them and asked the
 * daemon for the rest. */
static void test_grow_uses_cached_frames(void **state)
{
    (void)state;
    const size_t mib = 1 << 20;
    mb_client *c = open_patient_spares("grow-cached", "1G", false);
    void *p[3], *q;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(mb_malloc_growable(c, 8 * mib, 8 * mib, &p[i]), 0);   /* one 8 MiB frame */
        memset(p[i], 0x11, 8 * mib);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(mb_free(c, p[i]), 0);
    assert_int_equal(mb_trim(c, (size_t)1 << 30), 0);   /* unmapped; the frames stay cached */
    mb_client_stats before = stats_of(c);
    assert_int_equal(before.bytes_cached, 24 * mib);
    assert_int_equal(before.grow_mapped_ahead, 0);
    assert_int_equal(mb_malloc_growable(c, 24 * mib, 48 * mib, &q), 0);
    mb_client_stats after = stats_of(c);
    assert_int_equal(after.grow_waits, before.grow_waits + 1);   /* mapped on the call... */
    assert_int_equal(after.bytes_cached, 0);                      /* ... every cached frame */
    memset(q, 0x22, 24 * mib);
    assert_int_equal(((unsigned char *)q)[24 * mib - 1], 0x22);
    assert_int_equal(mb_grow(c, q, 48 * mib), 0);   /* past the cache: granted */
    memset(q, 0x33, 48 * mib);
    assert_int_equal(((unsigned char *)q)[48 * mib - 1], 0x33);
    assert_int_equal(mb_free(c, q), 0);
    mb_close(c);
}

/* Before a grant, cached frames past the cache's size go back to the
 * daemon, the longest cached first, at least as many bytes as the grant
 * asks for: a process whose cache holds frames that fit nothing it
 * allocates does not grow meanwhile. Within the cache's size they stay. */
static void test_grant_swaps_out_cached_frames(void **state)
{
    (void)state;
    const size_t mib = 1 << 20;
    mb_client *c = open_patient_spares("grow-swap", "1G", false);
    void *p[3], *q, *r;
    for (int i = 0; i < 3; i++)
        assert_int_equal(mb_malloc_growable(c, 8 * mib, 8 * mib, &p[i]), 0);   /* one 8 MiB frame */
    for (int i = 0; i < 3; i++)
        assert_int_equal(mb_free(c, p[i]), 0);
    assert_int_equal(mb_trim(c, (size_t)1 << 30), 0);   /* unmapped; the frames stay cached */
    mb_client_stats st0 = stats_of(c);
    double daemon0 = mbt_tenant_num(&g_d, "grow-swap", "bytes");   /* in the daemon's books */
    assert_true(daemon0 >= 0);
    assert_int_equal(st0.bytes_cached, 24 * mib);
    /* 2 MiB at most: no cached frame fits, so a grant; the cache (1 GiB)
     * keeps its frames. */
    assert_int_equal(mb_malloc_growable(c, 2 * mib, 2 * mib, &q), 0);
    mb_client_stats st1 = stats_of(c);
    assert_int_equal(st1.bytes_cached, 24 * mib);
    assert_int_equal(st1.bytes_granted, st0.bytes_granted + 2 * mib);
    /* With no cache to keep, the next grant hands one 8 MiB frame back first. */
    fl_lock(c);
    c->fc.keep_bytes = 0;
    fl_unlock(c);
    assert_int_equal(mb_malloc_growable(c, 2 * mib, 2 * mib, &r), 0);
    mb_client_stats st2 = stats_of(c);
    assert_int_equal(st2.bytes_cached, 16 * mib);
    assert_int_equal(st2.bytes_granted, st1.bytes_granted - 8 * mib + 2 * mib);
    memset(q, 0x61, 2 * mib);
    memset(r, 0x62, 2 * mib);
    assert_int_equal(((unsigned char *)q)[2 * mib - 1], 0x61);
    assert_int_equal(((unsigned char *)r)[0], 0x62);
    /* The daemon's books agree: the frame came back. (Read until they do:
     * with no cache to keep, the background thread may return the cached
     * frames between the two reads.) */
    bool agree = false;
    for (int i = 0; i < 200 && !agree; i++) {
        double now = mbt_tenant_num(&g_d, "grow-swap", "bytes");
        agree = daemon0 - now == (double)st0.bytes_granted - (double)stats_of(c).bytes_granted;
        if (!agree)
            mbt_sleep_ms(10);
    }
    assert_true(agree);
    assert_int_equal(mb_free(c, q), 0);
    assert_int_equal(mb_free(c, r), 0);
    mb_close(c);
}

/* A reused range mapped far short of a new allocation maps the rest in a
 * few exact frames, not in one-unit frames: 502 MiB (251 units, whose
 * frame plan would round up past the range's limit of 512 MiB) comes as
 * 6 frames of 128, 64, 32, 16, 8 and 2 units' worth, not 251 one-unit
 * frames (the daemon may grant two free frames of half the size for any
 * of them: 12 at most). The same with MOONBRIGHT_EXACT_PLANS=0, as with a
 * daemon that plans no Grant.exact: one grant per frame. */
static void grow_exact_frames(bool exact)
{
    const size_t mib = 1 << 20;
    if (!exact)
        setenv("MOONBRIGHT_EXACT_PLANS", "0", 1);
    mb_client *c = open_patient_spares("grow-exact", "0", false);
    unsetenv("MOONBRIGHT_EXACT_PLANS");
    mb_client_stats s0 = stats_of(c);
    void *a, *b;
    assert_int_equal(mb_malloc_growable(c, 10 * mib, 10 * mib, &a), 0);   /* no tail: max reached */
    memset(a, 0x44, 10 * mib);
    assert_int_equal(mb_free(c, a), 0);
    mb_client_stats st0 = stats_of(c);
    assert_int_equal(st0.bytes_idle, 10 * mib);
    assert_int_equal(mb_malloc_growable(c, 512 * mib, 512 * mib, &b), 0);
    mb_client_stats st1 = stats_of(c);
    assert_ptr_equal(b, a);                        /* the freed range, 502 MiB short */
    assert_int_equal(st1.grow_waits, st0.grow_waits + 1);
    assert_true(st1.frames_imported - st0.frames_imported <= 12);
    assert_true(st1.frames_imported - st0.frames_imported >= 1);
    assert_int_equal(mb_usable_size(c, b), 512 * mib);
    memset(b, 0x55, 512 * mib);
    assert_int_equal(((unsigned char *)b)[512 * mib - 1], 0x55);
    assert_int_equal(mb_free(c, b), 0);
    /* One round trip for the exact plan's frames, one a frame without it
     * (the first allocation's grant before both). */
    uint64_t trips = st1.daemon_requests - st0.daemon_requests;
    printf("  exact plans %s: %llu frames in %llu round trips (%llu before)\n", exact ? "on" : "off",
           (unsigned long long)(st1.frames_imported - st0.frames_imported),
           (unsigned long long)trips, (unsigned long long)(st0.daemon_requests - s0.daemon_requests));
    assert_true(exact ? trips <= 2 : trips >= 6);
    mb_close(c);
}

static void test_grow_exact_frames(void **state)
{
    (void)state;
    grow_exact_frames(true);
    grow_exact_frames(false);
}

/* A thread on a request's path waiting for the frame lock gets it between
 * the background thread's units of work (fl_yield), not after its whole
 * pass: here a "pass" of 200 units of 2 ms each. */
struct lock_caller {
    mb_client *c;
    int *unit;                   /* the pass's current unit */
    int got_at;                  /* the unit during which the caller got the lock */
};

static void *lock_caller_main(void *p)
{
    struct lock_caller *a = p;
    fl_lock_caller(a->c);
    a->got_at = __atomic_load_n(a->unit, __ATOMIC_ACQUIRE);
    fl_unlock(a->c);
    return NULL;
}

static void test_frame_lock_yields(void **state)
{
    (void)state;
    enum { UNITS = 200 };
    int unit = 0;
    struct lock_caller a = { g_c, &unit, -1 };
    fl_lock_bg(g_c);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, lock_caller_main, &a), 0);
    /* The pass starts once the caller waits for the lock. */
    for (int i = 0; i < 10000 && !__atomic_load_n(&g_c->fl_callers, __ATOMIC_RELAXED); i++)
        mbt_sleep_ms(1);
    assert_int_equal(__atomic_load_n(&g_c->fl_callers, __ATOMIC_RELAXED), 1);
    for (int i = 1; i <= UNITS; i++) {
        mbt_sleep_ms(2);
        __atomic_store_n(&unit, i, __ATOMIC_RELEASE);
        fl_yield(g_c);
    }
    __atomic_store_n(&unit, UNITS + 1, __ATOMIC_RELEASE);
    fl_unlock(g_c);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(a.got_at >= 1);
    assert_true(a.got_at <= UNITS);   /* UNITS + 1: it waited for the whole pass */
}

/* mb_vspace_prepare: bad arguments change nothing; afterwards the first
 * vspace's create and map wait for nothing (the refill thread may then map
 * ahead for the demand the map showed, off the call); prepared pages are
 * ordinary free pages (trim returns them). */
static void test_prepare(void **state)
{
    (void)state;
    assert_int_equal(mb_trim(g_c, 0), 0);
    mb_client_stats before = stats_of(g_c), st;
    assert_int_equal(before.vspace_pool_bytes, 0);
    assert_int_equal(mb_vspace_prepare(NULL, 64 << 10, 1), MB_EINVAL);
    assert_int_equal(mb_vspace_prepare(g_c, 96 << 10, 1), MB_EINVAL);   /* not a power of two */
    assert_int_equal(mb_vspace_prepare(g_c, 32 << 10, 1), MB_EINVAL);   /* below 64 KiB */
    assert_int_equal(mb_vspace_prepare(g_c, 4 << 20, 1), MB_EINVAL);    /* above 2 MiB */
    assert_int_equal(mb_vspace_prepare(g_c, 64 << 10, SIZE_MAX), MB_EINVAL);   /* no such vspace */
    st = stats_of(g_c);
    assert_int_equal(st.vspace_pool_bytes, 0);
    assert_int_equal(st.daemon_requests, before.daemon_requests);
    /* 0 pages: the kernels and nodes only, no page mapped. */
    assert_int_equal(mb_vspace_prepare(g_c, 64 << 10, 0), 0);
    assert_int_equal(stats_of(g_c).vspace_pool_bytes, 0);
    assert_int_equal(mb_vspace_prepare(g_c, 64 << 10, 1000), 0);
    st = stats_of(g_c);
    assert_true(st.vspace_free_bytes >= (size_t)1000 * (64 << 10));
    assert_int_equal(st.vspace_free_bytes, st.vspace_pool_bytes);
    assert_int_equal(st.vspace_refill_waits, before.vspace_refill_waits);   /* not a wait */
    assert_true(st.daemon_requests > before.daemon_requests);
    /* Already prepared: nothing more. */
    mb_client_stats prepared = st;
    assert_int_equal(mb_vspace_prepare(g_c, 64 << 10, 1000), 0);
    st = stats_of(g_c);
    assert_int_equal(st.vspace_pool_bytes, prepared.vspace_pool_bytes);
    assert_int_equal(st.daemon_requests, prepared.daemon_requests);
    /* The first vspace: no wait, no round trip; its pages hold data. */
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(g_c, (size_t)1 << 30, 64 << 10, &v), 0);
    assert_int_equal(mb_vspace_map_async(v, 0, 1000, NULL), 0);
    st = stats_of(g_c);
    assert_int_equal(st.vspace_refill_waits, prepared.vspace_refill_waits);
    const struct mb_vspace_dev *t = mb_vspace_device(v);
    for (size_t i = 0; i < 1000; i++)
        *(uint64_t *)(uintptr_t)walk(t, i) = i * 7 + 1;
    for (size_t i = 0; i < 1000; i++)
        assert_true(*(uint64_t *)(uintptr_t)walk(t, i) == i * 7 + 1);
    mb_vspace_destroy(v);
    for (int i = 0; i < 400 && growers(g_c, 64 << 10); i++)
        mbt_sleep_ms(10);   /* the refill thread's map ahead, if any, ends */
    assert_int_equal(mb_trim(g_c, 0), 0);
    st = stats_of(g_c);
    assert_int_equal(st.vspace_pool_bytes, 0);
    assert_int_equal(st.vspace_free_bytes, 0);
}

int main(void)
{
    if (mbt_daemon_start(&g_d, NULL) != 0) {
        fprintf(stderr, "failed to start moonbrightd\n");
        return 1;
    }
    setenv("MOONBRIGHT_RUNTIME_DIR", g_d.dir, 1);
    if (mb_open(&g_c, "vspace-test") != 0) {
        fprintf(stderr, "failed to open a client\n");
        mbt_daemon_stop(&g_d);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_levels),
        cmocka_unit_test(test_reuse_by_other),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_pool_extents_and_trim),
        cmocka_unit_test(test_refill_background),
        cmocka_unit_test(test_refill_steady_churn),
        cmocka_unit_test(test_refill_small_load),
        cmocka_unit_test(test_refill_small_takes),
        cmocka_unit_test(test_map_during_refill),
        cmocka_unit_test(test_grow_tail),
        cmocka_unit_test(test_grow_reuse),
        cmocka_unit_test(test_near_budget),
        cmocka_unit_test(test_extent_takes_free_frames),
        cmocka_unit_test(test_grow_excess_and_spares),
        cmocka_unit_test(test_grow_spares_follow_rise),
        cmocka_unit_test(test_grow_cache_drains),
        cmocka_unit_test(test_grow_uses_cached_frames),
        cmocka_unit_test(test_grant_swaps_out_cached_frames),
        cmocka_unit_test(test_grow_exact_frames),
        cmocka_unit_test(test_reclaim),
        cmocka_unit_test(test_threads_stress),
        cmocka_unit_test(test_idle_and_close),
        cmocka_unit_test(test_amap_host),
        cmocka_unit_test(test_grow_async_host),
        cmocka_unit_test(test_grow_lag_env),
        cmocka_unit_test(test_grow_lag_bounds_growth_not_frees),
        cmocka_unit_test(test_near_budget_pct_env),
        cmocka_unit_test(test_grow_async_gated),
        cmocka_unit_test(test_prepare),
        cmocka_unit_test(test_frame_lock_yields),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    mb_close(g_c);
    mbt_daemon_stop(&g_d);
    return failed ? 1 : 0;
}
