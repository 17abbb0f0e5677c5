/* test_vspace_host.c: vspaces on the host backend through a real daemon:
 * random map/unmap sequences on two vspaces sharing one page pool, checked
 * after every step against a reference model by walking the table memory
 * with the layout vspace.h documents (and with mb_vspace_read_entries);
 * new directory levels; pages reused by another vspace never reached
 * through the first one's table; argument errors; the host path of the
 * stream-ordered slow path (async_map.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <moonbright/mbclient.h>
#include <moonbright/vspace.h>

#include "async_map.h"
#include "client.h"
#include "harness.h"

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
    assert_int_equal(mb_vspace_map_async(v, 0, 0, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_unmap_async(v, 159, 2, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_map_async(v, 0, 160, NULL), 0);
    assert_int_equal(mb_vspace_unmap_async(v, 0, 160, NULL), 0);
    /* Unmapping what is not mapped is fine. */
    assert_int_equal(mb_vspace_unmap_async(v, 0, 160, NULL), 0);
    mb_vspace_destroy(v);
    mb_vspace_destroy(NULL);
    assert_null(mb_vspace_device(NULL));
}

/* Every frame the pools took goes back when the last vspace is destroyed. */
static void test_frames_return(void **state)
{
    (void)state;
    mb_client_stats before, after;
    assert_int_equal(mb_stats(g_c, &before), 0);
    mb_vspace *v;
    assert_int_equal(mb_vspace_create(g_c, (size_t)1 << 30, 64 << 10, &v), 0);
    assert_int_equal(mb_vspace_map_async(v, 0, 1000, NULL), 0);
    assert_int_equal(mb_stats(g_c, &after), 0);
    assert_true(after.bytes_mapped >= before.bytes_mapped + 1000 * (64 << 10));
    mb_vspace_destroy(v);
    assert_int_equal(mb_stats(g_c, &after), 0);
    assert_true(after.bytes_mapped == before.bytes_mapped);
}

/* On the host backend the slow path maps before it returns. */
static void test_amap_host(void **state)
{
    (void)state;
    struct stitched *s = NULL;
    assert_int_equal(amap_take_error(g_c), 0);
    pthread_mutex_lock(&g_c->flock);
    int rc = amap_alloc(g_c, 5 << 20, NULL, &s);
    pthread_mutex_unlock(&g_c->flock);
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
        cmocka_unit_test(test_frames_return),
        cmocka_unit_test(test_amap_host),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    mb_close(g_c);
    mbt_daemon_stop(&g_d);
    return failed ? 1 : 0;
}
