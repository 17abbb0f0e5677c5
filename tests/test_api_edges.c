/* test_api_edges.c: the public API's answers to bad arguments, in one
 * process against a real moonbrightd (host backend): each call gets its
 * error code, nothing it was given is lost or freed twice, and the client
 * goes on serving with its books balanced (bytes_live back to where it
 * was, every frame back with the daemon once it closes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>
#include <moonbright/vspace.h>

#include "harness.h"

static size_t live(mb_client *c)
{
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    return st.bytes_live;
}

/* Open, sizes and pointers: wrong ones are refused or not found, right
 * ones still work, frees of what was never handed out change nothing. */
static void allocations(void **state)
{
    struct mbt_daemon *d = *state;
    assert_int_equal(mb_open(NULL, "edges"), MB_EINVAL);
    mb_client *c = NULL;
    assert_int_equal(mb_open(&c, "bad name with spaces"), MB_EINVAL);
    assert_null(c);
    assert_int_equal(mb_open(&c, "edges"), 0);
    size_t base = live(c);
    void *p = (void *)1, *q = NULL;
    assert_int_equal(mb_malloc(c, 0, &p), MB_EINVAL);
    assert_int_equal(mb_malloc(c, SIZE_MAX, &p), MB_EINVAL);
    assert_int_equal(mb_malloc(c, (size_t)1 << 62, &p), MB_EINVAL);   /* more than one grant */
    assert_int_equal(mb_malloc_async(c, (size_t)1 << 50, NULL, &p), MB_EINVAL);
    assert_int_equal(mb_malloc(c, 100, NULL), MB_EINVAL);
    assert_int_equal(mb_malloc(NULL, 100, &p), MB_EINVAL);
    assert_int_equal(mb_free(c, NULL), 0);
    assert_int_equal(mb_free(c, (void *)0x1234), MB_ENOENT);
    /* A slab object: an interior pointer and a second free are refused. */
    assert_int_equal(mb_malloc(c, 100, &p), 0);
    assert_int_equal(mb_free(c, (char *)p + 8), MB_ENOENT);
    assert_int_equal(mb_free(c, p), 0);
    assert_int_equal(mb_free(c, p), MB_ENOENT);
    /* A heap block: the same, and it is not growable. */
    assert_int_equal(mb_malloc(c, 64u << 20, &q), 0);
    assert_int_equal(mb_free(c, (char *)q + 4096), MB_ENOENT);
    assert_int_equal(mb_grow(c, q, 128u << 20), MB_ENOENT);
    assert_int_equal(mb_free(c, q), 0);
    assert_int_equal(mb_free_async(c, q, NULL), MB_ENOENT);
    assert_int_equal(mb_usable_size(c, q), 0);
    /* Growable ranges: max below size, max past what any range reserves,
     * growth past max, an interior pointer, growth after free. */
    assert_int_equal(mb_malloc_growable(c, 10u << 20, 5u << 20, &p), MB_EINVAL);
    assert_int_equal(mb_malloc_growable(c, 10u << 20, SIZE_MAX, &p), MB_EINVAL);
    assert_int_equal(mb_malloc_growable(c, 10u << 20, 100u << 20, &p), 0);
    assert_int_equal(mb_grow(c, p, 200u << 20), MB_EINVAL);
    assert_int_equal(mb_grow(c, (char *)p + 1, 20u << 20), MB_ENOENT);
    assert_int_equal(mb_grow(c, p, 20u << 20), 0);
    assert_true(mb_usable_size(c, p) >= (20u << 20));
    assert_int_equal(mb_free(c, p), 0);
    assert_int_equal(mb_grow(c, p, 30u << 20), MB_ENOENT);
    /* Sharing: a token nobody made, pointers that are not blocks. */
    mb_share_token t;
    memset(&t, 0xab, sizeof(t));
    void *ip = NULL;
    size_t isz = 0;
    assert_int_equal(mb_import(c, &t, &ip, &isz), MB_ENOENT);
    assert_int_equal(mb_import(c, NULL, &ip, &isz), MB_EINVAL);
    assert_int_equal(mb_export(c, (void *)0x1000, &t), MB_ENOENT);
    assert_int_equal(mb_export(c, NULL, NULL), MB_EINVAL);
    assert_int_equal(mb_stats(c, NULL), MB_EINVAL);
    /* Still serving, and nothing above is counted live. */
    assert_int_equal(live(c), base);
    assert_int_equal(mb_malloc(c, 3u << 20, &p), 0);
    assert_int_equal(mb_free(c, p), 0);
    assert_int_equal(live(c), base);
    assert_int_equal(mb_trim(c, SIZE_MAX), 0);
    mb_close(c);
    mb_close(NULL);
    assert_true(mbt_daemon_alive(d));
    assert_true(WAIT_FOR(2000, mbt_status_num(d, "frames_granted") == 0));
}

/* vspaces: sizes and page ranges out of bounds are refused; a map of no
 * pages is nothing; an unmap of pages never mapped is nothing. */
static void vspaces(void **state)
{
    struct mbt_daemon *d = *state;
    mb_client *c;
    assert_int_equal(mb_open(&c, "edges-vs"), 0);
    mb_vspace *v = NULL;
    assert_int_equal(mb_vspace_create(c, 0, 0, &v), MB_EINVAL);
    assert_int_equal(mb_vspace_create(c, 1u << 30, 3u << 10, &v), MB_EINVAL);   /* page not a power of two */
    assert_int_equal(mb_vspace_create(c, SIZE_MAX, 2u << 20, &v), MB_EINVAL);
    assert_int_equal(mb_vspace_create(c, 1u << 30, 2u << 20, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_prepare(c, 3, 5), MB_EINVAL);
    assert_int_equal(mb_vspace_prepare(c, 2u << 20, SIZE_MAX), MB_EINVAL);
    assert_int_equal(mb_vspace_create(c, 1u << 30, 2u << 20, &v), 0);   /* 512 pages */
    assert_int_equal(mb_vspace_map_async(v, 0, 0, NULL), 0);
    assert_int_equal(mb_vspace_mapped_pages(v), 0);
    assert_int_equal(mb_vspace_map_async(v, 510, 10, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_map_async(v, SIZE_MAX, 2, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_map_async(v, 0, 4, NULL), 0);
    assert_int_equal(mb_vspace_map_async(v, 2, 4, NULL), 0);   /* overlapping: the new pages only */
    assert_int_equal(mb_vspace_mapped_pages(v), 6);
    assert_int_equal(mb_vspace_unmap_async(v, 100, 4, NULL), 0);
    assert_int_equal(mb_vspace_unmap_async(v, 0, SIZE_MAX, NULL), MB_EINVAL);
    assert_int_equal(mb_vspace_mapped_pages(v), 6);
    uint64_t e[4];
    assert_int_equal(mb_vspace_read_entries(v, 600, 4, NULL, e), MB_EINVAL);
    assert_int_equal(mb_vspace_read_entries(v, 0, 4, NULL, NULL), MB_EINVAL);
    mb_vspace_destroy(v);
    mb_vspace_destroy(NULL);
    mb_close(c);
    assert_true(mbt_daemon_alive(d));
    assert_true(WAIT_FOR(2000, mbt_status_num(d, "frames_granted") == 0));
}

static int up(void **state)
{
    static struct mbt_daemon d;
    static const char *const args[] = { "--budget", "2G", NULL };
    if (mbt_daemon_start(&d, args) != 0)
        return -1;
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    *state = &d;
    return 0;
}

static int down(void **state)
{
    return mbt_daemon_stop(*state) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(allocations),
        cmocka_unit_test(vspaces),
    };
    return cmocka_run_group_tests(tests, up, down);
}
