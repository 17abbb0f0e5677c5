/* test_lclock.c: the legacy clock (client/lclock.c) against a scripted
 * backend: frees become ready only when the driver says the legacy stream's
 * work before them is done, by a stream query or by an event recorded after
 * them; nothing else moves the clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "client.h"

static int stream_idle;      /* what the stream query answers */
static int event_done;       /* what the event query answers */
static int n_query, n_record, n_event_query, n_create;
static char the_event;

static int f_stream_query(mb_backend *b, void *s) { (void)b; assert_null(s); n_query++; return stream_idle; }
static int f_event_create(mb_backend *b, void **ev) { (void)b; n_create++; *ev = &the_event; return 0; }
static void f_event_destroy(mb_backend *b, void *ev) { (void)b; assert_ptr_equal(ev, &the_event); }
static int f_event_record(mb_backend *b, void *ev, void *s) { (void)b; (void)ev; assert_null(s); n_record++; return 0; }
static int f_event_query(mb_backend *b, void *ev) { (void)b; (void)ev; n_event_query++; return event_done; }

static const struct mb_backend_ops fake_ops = {
    .stream_query = f_stream_query,
    .event_create = f_event_create,
    .event_destroy = f_event_destroy,
    .event_record = f_event_record,
    .event_query = f_event_query,
};

static mb_backend fake = { .ops = &fake_ops };

static void reset(void) { stream_idle = event_done = n_query = n_record = n_event_query = n_create = 0; }

static void idle_stream_makes_every_earlier_free_ready(void **state)
{
    (void)state;
    reset();
    struct lclock k;
    lclock_init(&k);
    uint64_t a = lclock_tag(&k), b = lclock_tag(&k);
    assert_false(lclock_ready(&k, a));
    stream_idle = 1;
    lclock_advance(&k, &fake, b);
    assert_int_equal(n_query, 1);
    assert_true(lclock_ready(&k, a));
    assert_true(lclock_ready(&k, b));
    /* a free after the advance is a new epoch: not ready yet */
    uint64_t c = lclock_tag(&k);
    assert_true(c > b);
    assert_false(lclock_ready(&k, c));
    /* asking for a ready tag costs no driver call */
    lclock_advance(&k, &fake, b);
    assert_int_equal(n_query, 1);
    lclock_destroy(&k, &fake);
}

static void busy_stream_waits_for_the_event(void **state)
{
    (void)state;
    reset();
    struct lclock k;
    lclock_init(&k);
    uint64_t a = lclock_tag(&k);
    lclock_advance(&k, &fake, a);          /* busy: an event goes in */
    assert_int_equal(n_record, 1);
    assert_false(lclock_ready(&k, a));
    uint64_t later = lclock_tag(&k);       /* a free after the event */
    lclock_advance(&k, &fake, a);          /* still running */
    assert_int_equal(n_event_query, 1);
    assert_int_equal(n_record, 1);         /* one event in flight at a time */
    assert_false(lclock_ready(&k, a));
    event_done = 1;
    lclock_advance(&k, &fake, a);
    assert_true(lclock_ready(&k, a));
    assert_false(lclock_ready(&k, later)); /* the event was recorded before it */
    lclock_advance(&k, &fake, later);      /* a new event covers it */
    assert_int_equal(n_record, 2);
    assert_int_equal(n_create, 1);         /* the event is reused */
    lclock_advance(&k, &fake, later);
    assert_true(lclock_ready(&k, later));
    lclock_destroy(&k, &fake);
}

static void failed_event_query_never_marks_done(void **state)
{
    (void)state;
    reset();
    struct lclock k;
    lclock_init(&k);
    uint64_t a = lclock_tag(&k);
    lclock_advance(&k, &fake, a);
    event_done = -1;                       /* the driver failed */
    lclock_advance(&k, &fake, a);
    assert_false(lclock_ready(&k, a));
    stream_idle = 1;                       /* a later idle stream settles it */
    lclock_advance(&k, &fake, a);
    assert_true(lclock_ready(&k, a));
    lclock_destroy(&k, &fake);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(idle_stream_makes_every_earlier_free_ready),
        cmocka_unit_test(busy_stream_waits_for_the_event),
        cmocka_unit_test(failed_event_query_never_marks_done),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
