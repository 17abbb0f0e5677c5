/* test_client_model.c: libmbclient against a simple reference model, through
 * a real moonbrightd (host backend): mixed allocations and frees from bytes
 * to a gigabyte across all tiers (slab, pool, stitched, growable), checking
 * that every live block keeps its contents, blocks never overlap, alignment
 * holds, stats balance, and frees of unknown pointers are refused. Run a
 * second time near the budget (test_client_model_near: memory packed
 * closely most of the time). */
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

#define MAXLIVE 256

struct block {
    uint8_t *p;
    size_t size;
    size_t max;                  /* growable: mb_grow accepts up to this; else 0 */
    uint8_t tag;
};

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Sizes spread over tiers: mostly small, some medium, a few huge. */
static size_t pick_size(void)
{
    uint64_t r = next() % 1000;
    if (r < 600)
        return 1 + next() % 4096;                 /* slab */
    if (r < 900)
        return 4096 + next() % (4u << 20);        /* slab or pool */
    if (r < 995)
        return (8u << 20) + next() % (56u << 20); /* pool edge and stitched */
    return (size_t)(256u << 20) + next() % (768u << 20);   /* up to ~1 GiB, never touched inside */
}

static uint8_t val(const struct block *b, size_t k) { return (uint8_t)(b->tag ^ (k * 131u >> 3)); }

/* A growable range: 1-48 MiB to start, room to grow to 1-4 times that. */
static int alloc_growable(mb_client *c, struct block *b)
{
    b->size = (1u << 20) + next() % (47u << 20);
    b->max = b->size * (1 + next() % 4);
    return mb_malloc_growable(c, b->size, b->max, (void **)&b->p);
}

/* Write (or check) the block's pattern: every byte of small blocks, the
 * edges and a few spots of large ones (huge blocks stay sparse: only what is
 * written gets committed). Returns the number of wrong bytes. */
static size_t touch(struct block *b, bool check)
{
    size_t bad = 0;
    if (b->size <= 8192) {
        for (size_t k = 0; k < b->size; k++) {
            if (check)
                bad += b->p[k] != val(b, k);
            else
                b->p[k] = val(b, k);
        }
        return bad;
    }
    size_t spots[6] = { 0, b->size - 1, b->size / 2, b->size / 3, 4096, b->size - 4097 };
    for (size_t i = 0; i < 6; i++) {
        if (check)
            bad += b->p[spots[i]] != val(b, spots[i]);
        else
            b->p[spots[i]] = val(b, spots[i]);
    }
    return bad;
}

static void model(void **state)
{
    struct mbt_daemon d;
    /* $MB_MODEL_BUDGET: another budget (the default holds every peak). */
    const char *budget = getenv("MB_MODEL_BUDGET");
    const char *const args[] = { "--frame-size", "2M", "--budget", budget ? budget : "64G", NULL };
    assert_int_equal(mbt_daemon_start(&d, args), 0);
    setenv("MOONBRIGHT_RUNTIME_DIR", d.dir, 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "model"), 0);

    struct block live[MAXLIVE];
    size_t n = 0, ops = 0, allocs = 0, near_seen = 0;
    const char *env = getenv("MB_MODEL_OPS");
    size_t total = env ? strtoull(env, NULL, 10) : 400000;
    /* $MB_MODEL_SEED: another sequence of operations (nonzero). */
    const char *seed = getenv("MB_MODEL_SEED");
    if (seed && strtoull(seed, NULL, 10))
        rng = strtoull(seed, NULL, 10);
    uint64_t seed0 = rng;
    for (; ops < total; ops++) {
        bool do_alloc = n == 0 || (n < MAXLIVE && next() % 100 < 52);
        if (do_alloc) {
            struct block b = { .size = pick_size(), .tag = (uint8_t)next() };
            uint64_t how = next() % 20;
            int rc = how == 0 ? alloc_growable(c, &b)
                     : how < 5 ? mb_malloc_async(c, b.size, NULL, (void **)&b.p)
                     : mb_malloc(c, b.size, (void **)&b.p);
            assert_int_equal(rc, 0);
            assert_int_equal((uintptr_t)b.p % 256, 0);
            assert_true(mb_usable_size(c, b.p) >= b.size);
            for (size_t i = 0; i < n; i++)   /* never overlaps a live block */
                assert_true(b.p + b.size <= live[i].p || live[i].p + live[i].size <= b.p);
            touch(&b, false);
            live[n++] = b;
            allocs++;
        } else if (next() % 3 == 0) {   /* grow a growable range in place */
            size_t i = next() % n;
            struct block *b = &live[i];
            if (!b->max || b->size == b->max)
                continue;
            assert_int_equal(touch(b, true), 0);
            size_t to = b->size + 1 + next() % (b->max - b->size);
            assert_int_equal(mb_grow(c, b->p, to), 0);
            /* max counts in whole frames (2 MiB here): one byte past those is refused */
            size_t cap = (b->max + (2u << 20) - 1) / (2u << 20) * (2u << 20);
            assert_int_equal(mb_grow(c, b->p, cap + 1), MB_EINVAL);
            assert_int_equal(touch(b, true), 0);   /* what was there stays */
            b->size = to;
            assert_int_equal(mb_usable_size(c, b->p), to);
            for (size_t k = 0; k < n; k++)   /* the grown range overlaps nobody */
                assert_true(k == i || b->p + b->max <= live[k].p || live[k].p + live[k].size <= b->p);
            touch(b, false);
        } else {
            size_t i = next() % n;
            assert_int_equal(touch(&live[i], true), 0);
            assert_int_equal(next() % 3 ? mb_free(c, live[i].p) : mb_free_async(c, live[i].p, NULL), 0);
            /* A second free of the same pointer is refused, nothing changes. */
            if (next() % 16 == 0)
                assert_int_equal(mb_free(c, live[i].p), MB_ENOENT);
            live[i] = live[--n];
        }
        if (ops % 997 == 0) {   /* everyone else's contents survived */
            for (size_t i = 0; i < n; i++)
                assert_int_equal(touch(&live[i], true), 0);
            mb_client_stats st;
            assert_int_equal(mb_stats(c, &st), 0);
            assert_true(st.bytes_live == st.slab_live + st.pool_live + st.stitch_live);
            /* granted == mapped + cached, plus whatever the background
             * thread is mapping into a growable tail right now */
            assert_true(st.bytes_granted >= st.bytes_mapped + st.bytes_cached);
            assert_true(st.slab_live <= st.slab_mapped && st.pool_live <= st.pool_mapped);
            near_seen += st.near_budget != 0;
        }
        if (ops % 50000 == 49999)
            assert_int_equal(mb_trim(c, 0), 0);
    }
    /* $MB_MODEL_NEAR=1: the run is meant to be near the budget (packed
     * closely) at most checks: it was. */
    const char *near = getenv("MB_MODEL_NEAR");
    if (near && strcmp(near, "1") == 0)
        assert_true(near_seen * 2 > ops / 997 + 1);
    int dummy;
    assert_int_equal(mb_free(c, &dummy), MB_ENOENT);
    while (n)
        assert_int_equal(mb_free(c, live[--n].p), 0);
    assert_int_equal(mb_trim(c, 0), 0);
    mb_client_stats st;
    assert_int_equal(mb_stats(c, &st), 0);
    assert_int_equal(st.bytes_live, 0);
    assert_int_equal(st.bytes_granted, 0);
    printf("client model (seed %llu): %zu operations, %zu allocations, %llu daemon round trips, "
           "%llu heap arenas extended, %llu holes filled again, near the budget at %zu of %zu checks\n",
           (unsigned long long)seed0, ops, allocs, (unsigned long long)st.daemon_requests,
           (unsigned long long)st.heap_extends, (unsigned long long)st.heap_fills, near_seen,
           ops / 997 + 1);
    mb_close(c);
    struct json *j = mbt_status(&d);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "frames_granted"), 0);
    json_free(j);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(model) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
