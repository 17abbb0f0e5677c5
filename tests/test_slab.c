/* test_slab.c: the slab tier against a reference model: chunks are aligned
 * host allocations, and every step checks contents, overlap, alignment,
 * class choice, refusals of bad pointers and the chunk accounting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pattern.h"

#include "moonbright/mbclient.h"
#include "slab.h"

#ifndef MB_DEBUG
#define MB_DEBUG 0
#endif
/* Under MB_DEBUG the slab checks every invariant after every call. */
#define OPS(n) (MB_DEBUG ? (n) / 4 : (n))

#define MAX_CHUNKS 8192

struct prov {
    int fail;
    size_t gets, puts, out;           /* calls and chunks outstanding */
    uintptr_t base[MAX_CHUNKS];
};

static int prov_get(void *ctx, size_t bytes, void **base)
{
    struct prov *v = ctx;
    if (v->fail)
        return MB_ENOMEM;
    void *m = aligned_alloc(bytes, bytes);
    if (!m)
        return MB_ENOMEM;
    assert_true(v->out < MAX_CHUNKS);
    v->base[v->out++] = (uintptr_t)m;
    v->gets++;
    *base = m;
    return 0;
}

static void prov_put(void *ctx, void *base, size_t bytes)
{
    struct prov *v = ctx;
    (void)bytes;
    size_t i = 0;
    while (i < v->out && v->base[i] != (uintptr_t)base)
        i++;
    assert_true(i < v->out);                     /* only chunks we handed out */
    v->base[i] = v->base[--v->out];
    v->puts++;
    free(base);
}

/* ---- classes ---- */

static void test_classes(void **state)
{
    (void)state;
    struct prov v = { 0 };
    struct mb_slab *s;
    assert_int_equal(mb_slab_new(&s, 3 << 20, prov_get, prov_put, &v), MB_EINVAL);
    assert_int_equal(mb_slab_new(&s, 2048, prov_get, prov_put, &v), MB_EINVAL);
    assert_int_equal(mb_slab_new(&s, 2 << 20, prov_get, prov_put, &v), 0);
    assert_int_equal(mb_slab_max_size(s), 1 << 20);
    unsigned n = mb_slab_class_count(s);
    assert_int_equal(n, 4 + 4 * 10);
    for (unsigned i = 0; i < n; i++) {
        size_t c = mb_slab_class_size(s, i);
        assert_int_equal(c % 256, 0);
        if (i < 4) {
            assert_int_equal(c, 256 * (i + 1));
        } else {
            /* 4 classes per doubling: spacing is a quarter of the group base */
            size_t prev = mb_slab_class_size(s, i - 1);
            size_t base = (size_t)1 << (63 - __builtin_clzll(c - 1));
            assert_int_equal(c - prev, base / 4);
        }
    }
    /* every size gets the smallest class that holds it */
    for (size_t size = 1; size <= mb_slab_max_size(s); size += size < 8192 ? 1 : 97) {
        void *p;
        size_t us;
        assert_int_equal(mb_slab_alloc(s, size, &p), 0);
        assert_int_equal((uintptr_t)p % 256, 0);
        assert_int_equal(mb_slab_usable_size(s, p, &us), 0);
        assert_true(us >= size);
        unsigned i = 0;
        while (mb_slab_class_size(s, i) != us)
            i++;
        assert_true(i == 0 || mb_slab_class_size(s, i - 1) < size);
        assert_int_equal(mb_slab_release(s, p), 0);
    }
    void *p;
    assert_int_equal(mb_slab_alloc(s, 0, &p), MB_EINVAL);
    assert_int_equal(mb_slab_alloc(s, mb_slab_max_size(s) + 1, &p), MB_EINVAL);
    mb_slab_free(s);
    assert_int_equal(v.out, 0);

    /* a small chunk caps the largest class at chunk / 2 */
    assert_int_equal(mb_slab_new(&s, 64 << 10, prov_get, prov_put, &v), 0);
    assert_int_equal(mb_slab_max_size(s), 32 << 10);
    assert_int_equal(mb_slab_class_count(s), 4 + 4 * 5);
    assert_true(mb_slab_is_valid(s));
    mb_slab_free(s);
}

/* ---- refusals, spare, trim, failures ---- */

static void test_refusals_and_trim(void **state)
{
    (void)state;
    struct prov v = { 0 };
    struct mb_slab *s;
    const size_t C = 64 << 10;
    assert_int_equal(mb_slab_new(&s, C, prov_get, prov_put, &v), 0);
    void *a, *b;
    assert_int_equal(mb_slab_alloc(s, 1000, &a), 0);
    assert_int_equal(mb_slab_alloc(s, 1000, &b), 0);
    size_t live, mapped;
    mb_slab_stats(s, &live, &mapped);
    assert_int_equal(live, 2048);
    assert_int_equal(mapped, C);
    int x;
    assert_int_equal(mb_slab_release(s, &x), MB_ENOENT);              /* foreign */
    assert_int_equal(mb_slab_release(s, NULL), MB_ENOENT);
    assert_int_equal(mb_slab_release(s, (char *)a + 256), MB_ENOENT); /* interior */
    assert_int_equal(mb_slab_release(s, (char *)a + 1), MB_ENOENT);
    assert_int_equal(mb_slab_release(s, (char *)b + 1024), MB_ENOENT); /* free slot */
    assert_int_equal(mb_slab_release(s, (char *)a + C - 1024), MB_ENOENT);
    assert_int_equal(mb_slab_release(s, a), 0);
    assert_int_equal(mb_slab_release(s, a), MB_ENOENT);               /* double free */
    assert_int_equal(mb_slab_usable_size(s, a, NULL), MB_ENOENT);
    mb_slab_stats(s, &live, &mapped);
    assert_int_equal(live, 1024);
    assert_true(mb_slab_is_valid(s));

    /* the class keeps one empty chunk: no get/put ping-pong */
    assert_int_equal(mb_slab_release(s, b), 0);
    size_t gets = v.gets;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(mb_slab_alloc(s, 1000, &a), 0);
        assert_int_equal(mb_slab_release(s, a), 0);
    }
    assert_int_equal(v.gets, gets);
    assert_int_equal(v.puts, 0);

    /* fill several chunks of one class, free them: all but the spare go back */
    enum { N = 64 * 5 };
    void *o[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(mb_slab_alloc(s, 1024, &o[i]), 0);
    mb_slab_stats(s, &live, &mapped);
    assert_int_equal(live, N * 1024);
    assert_int_equal(mapped, 5 * C);
    for (int i = 0; i < N; i++)
        assert_int_equal(mb_slab_release(s, o[i]), 0);
    mb_slab_stats(s, &live, &mapped);
    assert_int_equal(live, 0);
    assert_int_equal(mapped, C);
    assert_int_equal(v.out, 1);
    /* spares of other classes; trim keeps the number asked for */
    for (size_t sz = 256; sz <= 4096; sz *= 2) {
        assert_int_equal(mb_slab_alloc(s, sz, &a), 0);
        assert_int_equal(mb_slab_release(s, a), 0);
    }
    assert_int_equal(v.out, 5);
    assert_int_equal(mb_slab_trim(s, 2), 3 * C);
    assert_int_equal(v.out, 2);
    assert_int_equal(mb_slab_trim(s, 0), 2 * C);
    mb_slab_stats(s, &live, &mapped);
    assert_int_equal(mapped, 0);
    assert_int_equal(v.out, 0);

    /* a failing get is reported and changes nothing */
    v.fail = 1;
    assert_int_equal(mb_slab_alloc(s, 300, &a), MB_ENOMEM);
    assert_true(mb_slab_is_valid(s));
    v.fail = 0;
    /* free with live objects puts every chunk back */
    assert_int_equal(mb_slab_alloc(s, 300, &a), 0);
    assert_int_equal(mb_slab_alloc(s, 8 << 10, &b), 0);
    mb_slab_free(s);
    assert_int_equal(v.out, 0);
}

/* ---- randomised model check ---- */

static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1Dull;
}
static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

struct live {
    uintptr_t p;
    size_t size, usable;
    uint64_t seed;
};

struct model {
    struct live *live;                /* sorted by p */
    size_t n, cap, live_bytes;
};

static void fill(uintptr_t p, size_t n, uint64_t seed)
{
    pattern_fill(p, n, seed, 2048, 32);
}

static void check_fill(uintptr_t p, size_t n, uint64_t seed)
{
    long at = pattern_check(p, n, seed, 2048, 32);
    if (at >= 0)
        fail_msg("object %#lx+%zu corrupted %s %ld", (unsigned long)p, n, n <= 2048 ? "at" : "near", at);
}

static size_t pos(const struct model *m, uintptr_t p)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->live[mid].p < p) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static size_t rand_size(size_t max)
{
    unsigned l1 = 63 - __builtin_clzll(max);
    unsigned l = (unsigned)rnd_below(l1 + 1);
    size_t a = (size_t)1 << l, b = (size_t)2 << l;
    if (b > max)
        b = max;
    return a + rnd_below(b - a + 1);
}

static void do_alloc(struct model *m, struct mb_slab *s, size_t size)
{
    void *ptr;
    assert_int_equal(mb_slab_alloc(s, size, &ptr), 0);
    uintptr_t a = (uintptr_t)ptr;
    size_t us;
    assert_int_equal(a % 256, 0);
    assert_int_equal(mb_slab_usable_size(s, ptr, &us), 0);
    assert_true(us >= size && us % 256 == 0);
    size_t i = pos(m, a);
    if (i < m->n && m->live[i].p < a + us)
        fail_msg("overlap with the next live object");
    if (i > 0 && m->live[i - 1].p + m->live[i - 1].usable > a)
        fail_msg("overlap with the previous live object");
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 1024;
        m->live = realloc(m->live, m->cap * sizeof *m->live);
        assert_non_null(m->live);
    }
    memmove(&m->live[i + 1], &m->live[i], (m->n - i) * sizeof *m->live);
    m->live[i] = (struct live){ a, size, us, rnd() };
    m->n++;
    m->live_bytes += us;
    fill(a, size, m->live[i].seed);
}

static void do_free(struct model *m, struct mb_slab *s, size_t i)
{
    struct live l = m->live[i];
    check_fill(l.p, l.size, l.seed);
    memmove(&m->live[i], &m->live[i + 1], (m->n - i - 1) * sizeof *m->live);
    m->n--;
    m->live_bytes -= l.usable;
    assert_int_equal(mb_slab_release(s, (void *)l.p), 0);
}

static void check_all(struct model *m, struct mb_slab *s, struct prov *v, size_t chunk)
{
    assert_true(mb_slab_is_valid(s));
    size_t live, mapped;
    mb_slab_stats(s, &live, &mapped);
    assert_int_equal(live, m->live_bytes);
    assert_int_equal(mapped, v->out * chunk);
    for (size_t i = 0; i < m->n; i++)
        check_fill(m->live[i].p, m->live[i].size, m->live[i].seed);
}

static void run_model(size_t ops, size_t target, size_t chunk, size_t check_every)
{
    struct prov *v = calloc(1, sizeof *v);
    struct model m = { 0 };
    struct mb_slab *s;
    assert_non_null(v);
    assert_int_equal(mb_slab_new(&s, chunk, prov_get, prov_put, v), 0);
    size_t max = mb_slab_max_size(s), allocs = 0, frees = 0, refused = 0, peak = 0;
    for (size_t step = 1; step <= ops; step++) {
        uint64_t r = rnd_below(1000);
        /* the live target drifts so whole chunks empty out and come back */
        size_t tgt = target * (1 + (step / 50000) % 4) / 4;
        if (r < 2) {
            mb_slab_trim(s, rnd_below(3));
        } else if (r < 10 && m.n) {
            size_t i = rnd_below(m.n);
            void *bad = (void *)(m.live[i].p + 1 + rnd_below(255));
            assert_int_equal(mb_slab_release(s, bad), MB_ENOENT);
            refused++;
        } else if (m.n < tgt ? rnd_below(100) < 60 : rnd_below(100) < 40) {
            do_alloc(&m, s, rand_size(max));
            allocs++;
        } else if (m.n) {
            size_t i = rnd_below(m.n);
            uintptr_t a = m.live[i].p;
            do_free(&m, s, i);
            frees++;
            if (rnd_below(8) == 0) {
                /* double free: refused unless the address is live again (it is not yet) */
                assert_int_equal(mb_slab_release(s, (void *)a), MB_ENOENT);
                refused++;
            }
        }
        if (v->out > peak)
            peak = v->out;
        if (step % check_every == 0)
            check_all(&m, s, v, chunk);
    }
    check_all(&m, s, v, chunk);
    while (m.n)
        do_free(&m, s, rnd_below(m.n));
    size_t live, mapped;
    mb_slab_stats(s, &live, &mapped);
    assert_int_equal(live, 0);
    mb_slab_trim(s, 0);
    mb_slab_stats(s, &live, &mapped);
    assert_int_equal(mapped, 0);
    assert_int_equal(v->out, 0);
    assert_true(mb_slab_is_valid(s));
    mb_slab_free(s);
    print_message("slab model: %zu ops (%zu allocs, %zu frees, %zu refused), chunk %zu KiB, "
                  "peak %zu chunks, %zu gets\n", ops, allocs, frees, refused, chunk >> 10, peak, v->gets);
    free(m.live);
    free(v);
}

static void test_model_every_step(void **state)
{
    (void)state;
    rng_state = 0x9e3779b97f4a7c15ull;
    run_model(OPS(100000), 300, 64 << 10, 1);
}

static void test_model_long(void **state)
{
    (void)state;
    rng_state = 0x2545f4914f6cdd1dull;
    run_model(OPS(1500000), 2000, 2 << 20, 20000);
}

static void test_model_small_chunks(void **state)
{
    (void)state;
    rng_state = 0xdeadbeefcafef00dull;
    run_model(OPS(500000), 1500, 16 << 10, 20000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_refusals_and_trim),
        cmocka_unit_test(test_model_every_step),
        cmocka_unit_test(test_model_long),
        cmocka_unit_test(test_model_small_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
