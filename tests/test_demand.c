/* test_demand.c: demand over the last second (client/demand.h): rises
 * counted within and across windows, steady turnover counted as little,
 * a window's rise forgotten after DEMAND_WINDOWS windows, and the largest
 * single take kept for as long. Times are
 * given, not read: the checks do not depend on the machine's speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "demand.h"

/* A rise noted once, in a window of its own, counts: the window starts at
 * what was held after the previous note. */
static void rise_alone_in_its_window(void **state)
{
    (void)state;
    struct demand d;
    demand_init(&d, 0, 1000);
    assert_int_equal(demand_note(&d, 0, 0, 1010), 0);
    /* The next window: held went from 0 to 8 in between. */
    assert_int_equal(demand_note(&d, 8, 0, 1130), 8);
    assert_true(demand_is_valid(&d, 8));
    /* A window later, nothing new: the rise is still within the second. */
    assert_int_equal(demand_note(&d, 8, 0, 1250), 8);
}

/* Taking and returning as much within a window rises by one take, not by
 * the sum of the takes. */
static void steady_turnover_counts_little(void **state)
{
    (void)state;
    struct demand d;
    demand_init(&d, 100, 0);
    size_t peak = 0;
    for (int k = 0; k < 50; k++) {
        peak = demand_note(&d, 100, 4, 2 * k);   /* about to take 4 */
        peak = demand_note(&d, 100, 0, 2 * k + 1);   /* ... and gave 4 back */
    }
    assert_int_equal(peak, 4);
    assert_true(demand_is_valid(&d, 100));
}

/* A rise is forgotten DEMAND_WINDOWS windows later; a fall lowers the
 * window's floor, so a later rise counts from there. */
static void rise_forgotten_after_a_second(void **state)
{
    (void)state;
    struct demand d;
    demand_init(&d, 0, 0);
    assert_int_equal(demand_note(&d, 16, 0, 10), 16);
    int64_t later = 10 + (int64_t)DEMAND_WINDOWS * DEMAND_WINDOW_MS;
    assert_int_equal(demand_note(&d, 16, 0, later), 0);
    assert_int_equal(demand_note(&d, 4, 0, later + 1), 0);   /* a fall */
    assert_int_equal(demand_note(&d, 10, 0, later + 2), 6);
    demand_forget(&d, 10);
    assert_int_equal(demand_note(&d, 10, 0, later + 3), 0);
    assert_true(demand_is_valid(&d, 10));
}

/* The largest single take of the last second: the largest `more`, not the
 * sum of the takes nor the rise; forgotten after DEMAND_WINDOWS windows
 * and by a trim. */
static void largest_take_over_a_second(void **state)
{
    (void)state;
    struct demand d;
    demand_init(&d, 0, 0);
    assert_int_equal(demand_largest_take(&d), 0);
    demand_note(&d, 0, 3, 10);
    demand_note(&d, 3, 40, 20);
    demand_note(&d, 43, 5, 150);   /* the next window */
    assert_int_equal(demand_largest_take(&d), 40);
    int64_t later = 20 + (int64_t)DEMAND_WINDOWS * DEMAND_WINDOW_MS;
    demand_note(&d, 48, 2, later);   /* the window of the 40 has gone */
    assert_int_equal(demand_largest_take(&d), 5);
    demand_forget(&d, 50);
    assert_int_equal(demand_largest_take(&d), 0);
    demand_note(&d, 50, 7, later + 1);
    assert_int_equal(demand_largest_take(&d), 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rise_alone_in_its_window),
        cmocka_unit_test(steady_turnover_counts_little),
        cmocka_unit_test(rise_forgotten_after_a_second),
        cmocka_unit_test(largest_take_over_a_second),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
