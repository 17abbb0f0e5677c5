/* test_stitch_slices.c: the driver calls of stitch_map and
 * stitch_unmap_frames (client/stitch.c) against a scripted backend that
 * keeps a table of what is mapped where, with access or not. A background
 * thread's calls cover at most the slice's frames each; a request's thread
 * covers the whole range in one access call and one unmap; an unmap that
 * fails part way leaves every frame mapped, with access, as before. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "client.h"

#define NF 10
#define UNIT ((size_t)2 << 20)
#define BASE ((uintptr_t)1 << 40)   /* a fake address range: nothing is dereferenced */

/* The table: which frame (index + 1; 0 none) is mapped at each unit of the
 * range, and whether it has access. */
static int at[4 * NF];
static bool access_ok[4 * NF];
static int n_map, n_access, n_unmap, fail_unmap_call;
static size_t most_access_units, most_unmap_units;
static struct cframe frames[NF];

static size_t unit_of(const void *va) { return (size_t)(((uintptr_t)va - BASE) / UNIT); }

static int f_map(mb_backend *b, void *va, const struct mb_mem *m)
{
    (void)b;
    size_t u = unit_of(va), n = m->bytes / UNIT;
    int f = 0;
    while (f < NF && &frames[f].mem != m)
        f++;
    assert_true(f < NF);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(at[u + i], 0);   /* never mapped over a mapping */
        at[u + i] = f + 1;
    }
    n_map++;
    return 0;
}

static int f_set_access(mb_backend *b, void *va, size_t bytes)
{
    (void)b;
    size_t u = unit_of(va), n = bytes / UNIT;
    for (size_t i = 0; i < n; i++) {
        assert_int_not_equal(at[u + i], 0);   /* access only where mapped */
        access_ok[u + i] = true;
    }
    n_access++;
    most_access_units = n > most_access_units ? n : most_access_units;
    return 0;
}

static int f_unmap(mb_backend *b, void *va, size_t bytes)
{
    (void)b;
    if (++n_unmap == fail_unmap_call)
        return MB_EBACKEND;
    size_t u = unit_of(va), n = bytes / UNIT;
    for (size_t i = 0; i < n; i++) {
        assert_int_not_equal(at[u + i], 0);
        at[u + i] = 0;
        access_ok[u + i] = false;
    }
    most_unmap_units = n > most_unmap_units ? n : most_unmap_units;
    return 0;
}

static const struct mb_backend_ops fake_ops = {
    .map = f_map,
    .set_access = f_set_access,
    .unmap = f_unmap,
};
static mb_backend fake = { .name = "scripted", .granularity = UNIT, .ops = &fake_ops };

/* Frames of 1, 2, 1, 1, ... units: slices are counted in frames, not bytes. */
static struct stitched *range(void)
{
    struct stitched *s = stitch_new(NF);
    assert_non_null(s);
    for (int i = 0; i < NF; i++) {
        frames[i] = (struct cframe){ .id = (uint32_t)i, .mem = { .bytes = (i % 3 == 1 ? 2 : 1) * UNIT } };
        stitch_push(s, &frames[i]);
    }
    s->va = (void *)BASE;
    return s;
}

static void reset(void)
{
    memset(at, 0, sizeof(at));
    memset(access_ok, 0, sizeof(access_ok));
    n_map = n_access = n_unmap = fail_unmap_call = 0;
    most_access_units = most_unmap_units = 0;
}

/* Every frame of s mapped at its place, with access (or nothing mapped). */
static void check_all_mapped(const struct stitched *s, bool mapped)
{
    size_t u = 0;
    for (size_t i = 0; i < s->n; i++)
        for (size_t k = 0; k < s->frames[i]->mem.bytes / UNIT; k++, u++) {
            assert_int_equal(at[u], mapped ? (int)i + 1 : 0);
            assert_int_equal(access_ok[u], mapped);
        }
}

struct job {
    struct stitched *s;
    int rc_map, rc_unmap;
    int fail_at;
};

static void *background(void *arg)
{
    struct job *j = arg;
    stitch_background_thread();
    j->rc_map = stitch_map(&fake, j->s, 0, j->s->n, 0);
    fail_unmap_call = j->fail_at ? n_unmap + j->fail_at : 0;
    j->rc_unmap = stitch_unmap_frames(&fake, j->s, 0, j->s->n, 0);
    return NULL;
}

static void run_background(struct job *j)
{
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, background, j), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

/* A background thread maps and unmaps 10 frames in slices of 4 frames:
 * 10 maps, 3 access calls, 3 unmaps, none over more than 4 frames (of up
 * to 2 units each). */
static void test_background_slices(void **state)
{
    (void)state;
    reset();
    stitch_set_slice(4);
    struct stitched *s = range();
    struct job j = { .s = s };
    run_background(&j);
    assert_int_equal(j.rc_map, 0);
    assert_int_equal(j.rc_unmap, 0);
    assert_int_equal(n_map, NF);
    assert_int_equal(n_access, 3);
    assert_int_equal(n_unmap, 3);
    assert_true(most_access_units <= 4 * 2 && most_access_units >= 4);
    assert_true(most_unmap_units <= 4 * 2 && most_unmap_units >= 4);
    check_all_mapped(s, false);
    free(s);
}

/* The request's thread: one access call and one unmap over the whole range. */
static void test_request_path_whole(void **state)
{
    (void)state;
    reset();
    stitch_set_slice(4);
    struct stitched *s = range();
    assert_int_equal(stitch_map(&fake, s, 0, s->n, 0), 0);
    check_all_mapped(s, true);
    assert_int_equal(n_access, 1);
    assert_int_equal(most_access_units, s->bytes / UNIT);
    assert_int_equal(stitch_unmap_frames(&fake, s, 0, s->n, 0), 0);
    assert_int_equal(n_unmap, 1);
    check_all_mapped(s, false);
    free(s);
}

/* Slice 0 ($MOONBRIGHT_DRIVER_SLICE=0): whole ranges on background threads too. */
static void test_slice_off(void **state)
{
    (void)state;
    reset();
    stitch_set_slice(0);
    struct stitched *s = range();
    struct job j = { .s = s };
    run_background(&j);
    assert_int_equal(j.rc_map, 0);
    assert_int_equal(j.rc_unmap, 0);
    assert_int_equal(n_access, 1);
    assert_int_equal(n_unmap, 1);
    check_all_mapped(s, false);
    stitch_set_slice(STITCH_SLICE_DEFAULT);
    free(s);
}

/* The second slice's unmap fails: the first slice is mapped again, so the
 * range is whole, with access, and the call reports the failure. */
static void test_failed_slice_restores(void **state)
{
    (void)state;
    reset();
    stitch_set_slice(4);
    struct stitched *s = range();
    struct job j = { .s = s, .fail_at = 2 };
    run_background(&j);
    assert_int_equal(j.rc_map, 0);
    assert_int_equal(j.rc_unmap, MB_EBACKEND);
    check_all_mapped(s, true);
    /* a later unmap (on the request's thread) still finds the range whole */
    assert_int_equal(stitch_unmap_frames(&fake, s, 0, s->n, 0), 0);
    check_all_mapped(s, false);
    free(s);
}

/* A cut in the middle of a range: frames [3, 10) from their offset only. */
static void test_unmap_part(void **state)
{
    (void)state;
    reset();
    stitch_set_slice(2);
    struct stitched *s = range();
    assert_int_equal(stitch_map(&fake, s, 0, s->n, 0), 0);
    size_t off = 0;
    for (int i = 0; i < 3; i++)
        off += s->frames[i]->mem.bytes;
    assert_int_equal(stitch_unmap_frames(&fake, s, 3, s->n, off), 0);
    for (size_t u = 0; u < s->bytes / UNIT; u++)
        assert_int_equal(at[u] != 0, u < off / UNIT);
    stitch_set_slice(STITCH_SLICE_DEFAULT);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_background_slices),
        cmocka_unit_test(test_request_path_whole),
        cmocka_unit_test(test_slice_off),
        cmocka_unit_test(test_failed_slice_restores),
        cmocka_unit_test(test_unmap_part),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
