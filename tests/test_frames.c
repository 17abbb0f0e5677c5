/* test_frames.c: the daemon's frame books always balance (free + granted ==
 * total) through random grants, returns and reclaims, never exceed the
 * budget, refuse what is not the caller's, and scrub between tenants. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "daemon.h"

#define FB ((size_t)64 << 10)

static void random_books_balance(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    /* held[s] lists the frames session s+1 holds, as the model sees it. */
    enum { S = 4 };
    uint32_t held[S][64];
    uint32_t nheld[S] = { 0 };
    srand(42);
    for (int step = 0; step < 20000; step++) {
        int s = rand() % S;
        int op = rand() % 10;
        if (op < 5) {
            uint32_t n = 1 + (uint32_t)(rand() % 8);
            uint32_t ids[8];
            uint32_t before = p.n_granted;
            int rc = frame_pool_grant(&p, n, (uint64_t)s + 1, (uint32_t)(s % 2) + 1, ids);
            if (before + n <= 64) {
                assert_int_equal(rc, 0);
                for (uint32_t i = 0; i < n; i++)
                    held[s][nheld[s]++] = ids[i];
            } else {
                assert_int_equal(rc, MB_ENOMEM);
                assert_int_equal(p.n_granted, before);   /* all or nothing */
            }
        } else if (op < 9 && nheld[s]) {
            uint32_t k = (uint32_t)rand() % nheld[s];
            uint32_t id = held[s][k];
            /* Another session may not return it. */
            assert_int_equal(frame_pool_return(&p, &id, 1, (uint64_t)((s + 1) % S) + 1), MB_EPERM);
            assert_int_equal(frame_pool_return(&p, &id, 1, (uint64_t)s + 1), 0);
            held[s][k] = held[s][--nheld[s]];
        } else {
            assert_int_equal(frame_pool_reclaim(&p, (uint64_t)s + 1), nheld[s]);
            nheld[s] = 0;
        }
        assert_true(frame_pool_is_valid(&p));
        assert_int_equal(p.n_free + p.n_granted, p.n_total);
        assert_true(p.bytes_total <= p.budget_bytes);
        uint32_t model = 0;
        for (int i = 0; i < S; i++)
            model += nheld[i];
        assert_int_equal(p.n_granted, model);
    }
    uint32_t bogus[2] = { 0, 100000 };
    assert_int_equal(frame_pool_return(&p, &bogus[0], 1, 1), MB_ENOENT);
    assert_int_equal(frame_pool_return(&p, &bogus[1], 1, 1), MB_ENOENT);
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

static void duplicate_return_changes_nothing(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 8 * FB), 0);
    uint32_t ids[2];
    assert_int_equal(frame_pool_grant(&p, 2, 1, 1, ids), 0);
    uint32_t twice[2] = { ids[0], ids[0] };
    assert_int_equal(frame_pool_return(&p, twice, 2, 1), MB_EINVAL);
    assert_int_equal(p.n_granted, 2);
    assert_int_equal(frame_pool_grant(&p, 0, 1, 1, ids), MB_EINVAL);
    assert_int_equal(frame_pool_grant(&p, 9, 1, 1, ids), MB_ENOMEM);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

static void descriptor_cap_is_an_error_not_a_crash(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    p.max_frames = 5;
    uint32_t ids[8];
    assert_int_equal(frame_pool_grant(&p, 6, 1, 1, ids), MB_ELIMIT);
    assert_int_equal(p.n_granted, 0);
    assert_int_equal(frame_pool_grant(&p, 5, 1, 1, ids), 0);
    assert_int_equal(frame_pool_grant(&p, 1, 2, 1, ids), MB_ELIMIT);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

static void scrubbed_between_tenants(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 1 * FB), 0);
    uint32_t id;
    assert_int_equal(frame_pool_grant(&p, 1, 1, 7, &id), 0);
    struct frame *f = frame_pool_get(&p, id);
    uint8_t *m = mmap(NULL, FB, PROT_READ | PROT_WRITE, MAP_SHARED, f->mem.fd, 0);
    assert_true(m != MAP_FAILED);
    memset(m, 0xa5, FB);
    assert_int_equal(frame_pool_return(&p, &id, 1, 1), 0);
    /* The same tenant gets its data back unscrubbed... */
    assert_int_equal(frame_pool_grant(&p, 1, 2, 7, &id), 0);
    assert_int_equal(m[100], 0xa5);
    assert_int_equal(p.scrubs, 0);
    assert_int_equal(frame_pool_return(&p, &id, 1, 2), 0);
    /* ...another tenant reads only zeros. */
    assert_int_equal(frame_pool_grant(&p, 1, 3, 8, &id), 0);
    for (size_t k = 0; k < FB; k += 64)
        assert_int_equal(m[k], 0);
    assert_int_equal(p.scrubs, 1);
    munmap(m, FB);
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

static void warm_reserve_fills_in_background(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 12 * FB), 0);
    assert_int_equal(frame_pool_prefill(&p, 8 * FB), 0);
    /* The workers create 8 frames without any grant asking. */
    uint32_t ready = 0;
    for (int i = 0; i < 400 && ready < 8; i++) {
        pthread_mutex_lock(&p.lock);
        ready = p.n_ready;
        pthread_mutex_unlock(&p.lock);
        if (ready < 8)
            usleep(5000);
    }
    assert_int_equal(ready, 8);
    assert_int_equal(p.n_total, 0);   /* not in the books until adopted */
    uint32_t ids[12];
    assert_int_equal(frame_pool_grant(&p, 6, 1, 1, ids), 0);
    assert_true(p.n_total >= 8);      /* adopted, not created on the request path */
    assert_true(frame_pool_is_valid(&p));
    /* The budget holds across workers and the request path together. */
    assert_int_equal(frame_pool_grant(&p, 6, 2, 1, ids), 0);
    assert_int_equal(frame_pool_grant(&p, 1, 2, 1, ids), MB_ENOMEM);
    pthread_mutex_lock(&p.lock);
    assert_true(p.committed <= p.budget_bytes);
    assert_true(p.bytes_total + (uint64_t)(p.n_ready + p.creating) * FB == p.committed);
    pthread_mutex_unlock(&p.lock);
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_books_balance),
        cmocka_unit_test(duplicate_return_changes_nothing),
        cmocka_unit_test(scrubbed_between_tenants),
        cmocka_unit_test(descriptor_cap_is_an_error_not_a_crash),
        cmocka_unit_test(warm_reserve_fills_in_background),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
