/* test_backend_host.c: the host backend keeps backend.h's contract: frames
 * shared through their fds, stitched side by side, unmapped back into the
 * reservation, scrubbed to zero; its emulated driver costs read as
 * documented and are paid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "backend.h"
#include "host_costs.h"
#include "wire.h"

#define FB ((size_t)64 << 10)

static void stitch_and_share(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_open("host", 0, &b), 0);
    assert_string_equal(b->name, "host");
    struct mb_mem m[3], imp[3];
    for (int i = 0; i < 3; i++) {
        m[i] = (struct mb_mem)MB_MEM_INIT;
        assert_int_equal(b->ops->create(b, FB, &m[i]), 0);
        assert_int_equal(b->ops->export_fd(b, &m[i]), 0);
        assert_true(m[i].fd >= 0);
        /* An importer gets the memory through a new descriptor. */
        assert_int_equal(b->ops->import_fd(b, dup(m[i].fd), FB, &imp[i]), 0);
    }
    void *va, *va2;
    assert_int_equal(b->ops->reserve(b, 3 * FB, &va), 0);
    assert_int_equal((uintptr_t)va % FB, 0);   /* aligned for the slab */
    assert_int_equal(b->ops->reserve(b, 3 * FB, &va2), 0);
    /* Map in reverse order: non-contiguous frames behind one range. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(b->ops->map(b, (char *)va + (size_t)i * FB, &m[2 - i]), 0);
        assert_int_equal(b->ops->map(b, (char *)va2 + (size_t)i * FB, &imp[i]), 0);
    }
    assert_int_equal(b->ops->set_access(b, va, 3 * FB), 0);
    assert_int_equal(b->ops->set_access(b, va2, 3 * FB), 0);
    uint8_t *p = va, *q = va2;
    for (size_t k = 0; k < 3 * FB; k += 4093)
        p[k] = (uint8_t)(k * 31 + 7);
    /* Byte k of va lives in frame 2 - k/FB at offset k%FB. */
    for (size_t k = 0; k < 3 * FB; k += 4093) {
        size_t frame = 2 - k / FB;
        assert_int_equal(q[frame * FB + k % FB], (uint8_t)(k * 31 + 7));
    }
    assert_int_equal(b->ops->unmap(b, va, 3 * FB), 0);
    /* Scrub zeroes the memory the other mapping still sees. */
    assert_int_equal(b->ops->scrub(b, &m[1]), 0);
    for (size_t k = 0; k < FB; k += 512)
        assert_int_equal(q[FB + k], 0);
    assert_int_equal(b->ops->unmap(b, va2, 3 * FB), 0);
    b->ops->free_va(b, va, 3 * FB);
    b->ops->free_va(b, va2, 3 * FB);
    for (int i = 0; i < 3; i++) {
        b->ops->release(b, &m[i]);
        b->ops->release(b, &imp[i]);
    }
    void *ev;
    assert_int_equal(b->ops->event_create(b, &ev), 0);
    assert_int_equal(b->ops->event_record(b, ev, NULL), 0);
    assert_int_equal(b->ops->event_query(b, ev), 1);
    b->ops->event_destroy(b, ev);
    mb_backend_close(b);
}

static void rejects_bad_input(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_open("nosuch", 0, &b), MB_EINVAL);
    assert_int_equal(mb_backend_open("host", 0, &b), 0);
    struct mb_mem m = MB_MEM_INIT;
    assert_int_equal(b->ops->create(b, 0, &m), MB_EINVAL);
    assert_int_equal(b->ops->create(b, 1000, &m), MB_EINVAL);
    /* An fd smaller than claimed is refused (and closed). */
    assert_int_equal(b->ops->create(b, FB, &m), 0);
    assert_int_equal(b->ops->export_fd(b, &m), 0);
    struct mb_mem imp = MB_MEM_INIT;
    assert_int_equal(b->ops->import_fd(b, dup(m.fd), 2 * FB, &imp), MB_EPROTO);
    b->ops->release(b, &m);
    mb_backend_close(b);
}

/* $MOONBRIGHT_HOST_COSTS reads as documented: "gpu", NAME=MICROSECONDS
 * items over it or alone; anything else is refused. */
static void host_costs_read(void **state)
{
    unsigned us[6];   /* create, export, import, map, unmap, release */
    assert_int_equal(mb_host_costs_parse("gpu", us), 0);
    assert_int_equal(us[0], 18);
    assert_int_equal(us[1], 620);
    assert_int_equal(us[3], 37);
    assert_int_equal(mb_host_costs_parse("gpu,export=100", us), 0);
    assert_int_equal(us[1], 100);
    assert_int_equal(us[0], 18);
    assert_int_equal(mb_host_costs_parse("map=40", us), 0);
    assert_int_equal(us[3], 40);
    assert_int_equal(us[0] + us[1] + us[2] + us[4] + us[5], 0);
    const char *bad[] = { "", "gpu,", ",gpu", "bogus=1", "map=", "map=-1", "map=12x", "map=99999999999",
                          "=5", "map", "gpu;map=1", "maps=1", "ma=1" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(mb_host_costs_parse(bad[i], us), MB_EINVAL);
}

/* With costs set, each call takes at least its cost (sleeps never end
 * early), an unmap its cost for each handle it unmaps, and the memory
 * behaves as without them. A value that does not
 * read, or another value once one was applied, fails the open. */
static void host_costs_paid(void **state)
{
    mb_backend *b;
    setenv("MOONBRIGHT_HOST_COSTS", "map=abc", 1);
    assert_int_equal(mb_backend_open("host", 0, &b), MB_EINVAL);
    setenv("MOONBRIGHT_HOST_COSTS", "map=20000,unmap=30000", 1);
    assert_int_equal(mb_backend_open("host", 0, &b), 0);
    struct mb_mem m = MB_MEM_INIT;
    assert_int_equal(b->ops->create(b, FB, &m), 0);
    void *va;
    assert_int_equal(b->ops->reserve(b, FB, &va), 0);
    uint64_t t0 = mb_now_ns();
    assert_int_equal(b->ops->map(b, va, &m), 0);
    assert_true(mb_now_ns() - t0 >= 20000000u);
    assert_int_equal(b->ops->set_access(b, va, FB), 0);
    memset(va, 0x5a, FB);
    assert_int_equal(((unsigned char *)va)[FB - 1], 0x5a);
    t0 = mb_now_ns();
    assert_int_equal(b->ops->unmap(b, va, FB), 0);
    assert_true(mb_now_ns() - t0 >= 30000000u);
    b->ops->free_va(b, va, FB);
    /* An unmap pays for each handle mapped in its range, as the driver's
     * does: two side by side, one call over both. */
    struct mb_mem m2 = MB_MEM_INIT;
    assert_int_equal(b->ops->create(b, FB, &m2), 0);
    assert_int_equal(b->ops->reserve(b, 2 * FB, &va), 0);
    assert_int_equal(b->ops->map(b, va, &m), 0);
    assert_int_equal(b->ops->map(b, (char *)va + FB, &m2), 0);
    t0 = mb_now_ns();
    assert_int_equal(b->ops->unmap(b, va, 2 * FB), 0);
    assert_true(mb_now_ns() - t0 >= 60000000u);
    b->ops->free_va(b, va, 2 * FB);
    b->ops->release(b, &m2);
    b->ops->release(b, &m);
    mb_backend *b2;
    setenv("MOONBRIGHT_HOST_COSTS", "map=1", 1);
    assert_int_equal(mb_backend_open("host", 0, &b2), MB_EINVAL);
    unsetenv("MOONBRIGHT_HOST_COSTS");
    mb_backend_close(b);
}

/* $MOONBRIGHT_HOST_MEMORY: a device of that size. Frames created past it
 * fail with MB_ENOMEM until one is released; imported frames do not
 * count; a value that is no size fails the open. */
static void host_memory_is_a_full_device(void **state)
{
    (void)state;
    mb_backend *b;
    setenv("MOONBRIGHT_HOST_MEMORY", "lots", 1);
    assert_int_equal(mb_backend_open("host", 0, &b), MB_EINVAL);
    setenv("MOONBRIGHT_HOST_MEMORY", "192K", 1);
    int rc = mb_backend_open("host", 0, &b);
    unsetenv("MOONBRIGHT_HOST_MEMORY");
    assert_int_equal(rc, 0);
    assert_int_equal(b->total_bytes, 3 * FB);
    struct mb_mem m[3], extra = MB_MEM_INIT, imp = MB_MEM_INIT;
    assert_int_equal(b->ops->create(b, 2 * FB, &m[0]), 0);
    assert_int_equal(b->ops->create(b, FB, &m[1]), 0);
    assert_int_equal(b->ops->create(b, FB, &extra), MB_ENOMEM);
    assert_int_equal(b->ops->export_fd(b, &m[1]), 0);
    assert_int_equal(b->ops->import_fd(b, dup(m[1].fd), FB, &imp), 0);
    b->ops->release(b, &imp);   /* an import gives back nothing */
    assert_int_equal(b->ops->create(b, FB, &extra), MB_ENOMEM);
    b->ops->release(b, &m[0]);
    assert_int_equal(b->ops->create(b, FB, &m[2]), 0);
    assert_int_equal(b->ops->create(b, FB, &extra), 0);
    assert_int_equal(b->ops->create(b, FB, &m[0]), MB_ENOMEM);
    b->ops->release(b, &m[1]);
    b->ops->release(b, &m[2]);
    b->ops->release(b, &extra);
    mb_backend_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stitch_and_share),
        cmocka_unit_test(rejects_bad_input),
        cmocka_unit_test(host_memory_is_a_full_device),
        cmocka_unit_test(host_costs_read),
        cmocka_unit_test(host_costs_paid),   /* last: the costs stay applied in this process */
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
