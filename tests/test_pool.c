/* test_pool.c: the pool tier against a reference model: arenas are host
 * mmaps (MAP_NORESERVE), streams and events are fakes whose completion the
 * test decides, and every step checks contents, overlap, alignment and the
 * stream rule (a block freed on S reaches another stream only after an
 * event recorded on S after the free has completed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "pattern.h"

#include "moonbright/mbclient.h"
#include "pool.h"

#define NSTREAMS 4
#ifndef MB_DEBUG
#define MB_DEBUG 0
#endif
/* Under MB_DEBUG the pool checks every invariant after every call, so the
 * long runs are shortened to keep each test within seconds. */
#define OPS(n) (MB_DEBUG ? (n) / 6 : (n))
#define MAX_ARENAS 4096

/* ---- fake device: arenas, streams, events ---- */

struct fake_ev {
    int stream;
    uint64_t stamp;
};

struct dev {
    size_t round;                     /* arenas rounded up to this (0: exact) */
    int fail_grow, fail_extend, fail_fill;
    size_t fills, fill_covers;        /* holes filled, and the last fill's covers */
    size_t room;                      /* address space reserved past each arena for extends */
    size_t extends, extend_asks;
    size_t arenas, arena_bytes;       /* outstanding */
    uintptr_t base[MAX_ARENAS];
    size_t len[MAX_ARENAS], res[MAX_ARENAS];
    uint64_t clock[NSTREAMS + 1];     /* work launched per stream so far (LEGACY last) */
    uint64_t done[NSTREAMS + 1];          /* work completed; an event is complete once done >= its stamp */
    size_t ev_live, ev_recorded, ev_queried;
    void (*on_shrink)(uintptr_t base, size_t bytes);
};

#define LEGACY NSTREAMS               /* the legacy default stream, NULL */
static int sidx(void *stream) { return stream ? (int)(uintptr_t)stream - 1 : LEGACY; }
static void *stream_of(int i) { return (void *)(uintptr_t)(i + 1); }

static int dev_grow(void *ctx, size_t min_bytes, void **base, size_t *bytes)
{
    struct dev *d = ctx;
    if (d->fail_grow)
        return MB_ENOMEM;
    size_t len = d->round ? (min_bytes + d->round - 1) / d->round * d->round : min_bytes;
    void *m = mmap(NULL, len + d->room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED)
        return MB_ENOMEM;
    assert_true(d->arenas < MAX_ARENAS);
    d->base[d->arenas] = (uintptr_t)m;
    d->len[d->arenas] = len;
    d->res[d->arenas] = len + d->room;
    d->arenas++;
    d->arena_bytes += len;
    *base = m;
    *bytes = len;
    return 0;
}

static void dev_shrink(void *ctx, void *base, size_t bytes)
{
    struct dev *d = ctx;
    size_t i = 0;
    while (i < d->arenas && d->base[i] != (uintptr_t)base)
        i++;
    assert_true(i < d->arenas);                   /* only arenas we handed out */
    assert_int_equal(d->len[i], bytes);
    if (d->on_shrink)
        d->on_shrink((uintptr_t)base, bytes);
    munmap(base, d->res[i]);
    d->arenas--;
    d->base[i] = d->base[d->arenas];
    d->len[i] = d->len[d->arenas];
    d->res[i] = d->res[d->arenas];
    d->arena_bytes -= bytes;
}

/* Arenas grow into the room reserved after them: MB_ELIMIT past it (as the
 * client's heap_extend), MB_ENOMEM when told to fail (out of memory). */
static int dev_extend(void *ctx, void *base, size_t bytes, size_t min_more, size_t *more)
{
    struct dev *d = ctx;
    size_t i = 0;
    while (i < d->arenas && d->base[i] != (uintptr_t)base)
        i++;
    assert_true(i < d->arenas);                   /* only arenas we handed out */
    assert_int_equal(d->len[i], bytes);           /* the pool knows their size */
    size_t m = d->round ? (min_more + d->round - 1) / d->round * d->round : min_more;
    d->extend_asks++;
    if (d->len[i] + m > d->res[i])
        return MB_ELIMIT;
    if (d->fail_extend)
        return MB_ENOMEM;
    d->len[i] += m;
    d->arena_bytes += m;
    d->extends++;
    *more = m;
    return 0;
}

static int dev_record(void *ctx, void *stream, void **ev)
{
    struct dev *d = ctx;
    int s = sidx(stream);
    assert_true(s >= 0 && s <= LEGACY);
    struct fake_ev *e = malloc(sizeof *e);
    assert_non_null(e);
    e->stream = s;
    e->stamp = d->clock[s];           /* "work on stream so far" */
    d->ev_live++;
    d->ev_recorded++;
    *ev = e;
    return 0;
}

static int dev_query(void *ctx, void *ev)
{
    struct dev *d = ctx;
    struct fake_ev *e = ev;
    d->ev_queried++;
    return e->stamp <= d->done[e->stream];
}

static void dev_release(void *ctx, void *ev)
{
    struct dev *d = ctx;
    d->ev_live--;
    free(ev);
}

/* A hole is filled from its start in whole MiB: what the request covers. */
static int dev_fill(void *ctx, void *base, void *addr, size_t bytes, size_t covers, size_t *filled)
{
    struct dev *d = ctx;
    const size_t M = 1 << 20;
    assert_true((uintptr_t)addr >= (uintptr_t)base);
    assert_true(covers > 0 && covers <= bytes);
    d->fill_covers = covers;
    if (d->fail_fill)
        return MB_ENOMEM;
    d->fills++;
    size_t f = (covers + M - 1) / M * M;
    *filled = f < bytes ? f : bytes;
    return 0;
}

static const struct mb_pool_ops dev_ops = { dev_grow, dev_shrink, dev_record, dev_query, dev_release,
                                            dev_extend, dev_fill };
static const struct mb_pool_ops dev_ops_nostream = { dev_grow, dev_shrink, NULL, NULL, NULL, dev_extend,
                                                     dev_fill };

/* The device was synchronised: device-sync fences complete. */
static void settle(struct mb_pool *p)
{
    mb_pool_sync_end(p, mb_pool_sync_begin(p));
}

static void complete(struct dev *d, int s) { d->done[s] = d->clock[s]; }
static void launch(struct dev *d, int s) { d->clock[s]++; }

/* ---- basic behaviour ---- */

static void test_basic(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 128, 1 << 20), MB_EINVAL);
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 768, 1 << 20), MB_EINVAL);
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 256, 1 << 20), 0);
    void *a, *b;
    size_t us;
    assert_int_equal(mb_pool_alloc(p, 0, stream_of(0), &a), MB_EINVAL);
    assert_int_equal(mb_pool_alloc(p, SIZE_MAX, stream_of(0), &a), MB_EINVAL);
    assert_int_equal(mb_pool_alloc(p, 1, stream_of(0), &a), 0);
    assert_int_equal((uintptr_t)a % 256, 0);
    assert_int_equal(mb_pool_usable_size(p, a, &us), 0);
    assert_int_equal(us, 256);
    assert_int_equal(mb_pool_alloc(p, 257, stream_of(0), &b), 0);
    assert_int_equal(mb_pool_usable_size(p, b, &us), 0);
    assert_int_equal(us, 512);
    size_t live, mapped;
    mb_pool_stats(p, &live, &mapped);
    assert_int_equal(live, 768);
    assert_int_equal(mapped, 1 << 20);
    /* refusals change nothing */
    int x;
    assert_int_equal(mb_pool_release(p, &x, stream_of(0)), MB_ENOENT);
    assert_int_equal(mb_pool_release(p, (char *)b + 256, stream_of(0)), MB_ENOENT);
    assert_int_equal(mb_pool_release(p, NULL, stream_of(0)), MB_ENOENT);
    assert_int_equal(mb_pool_usable_size(p, (char *)a + 1, &us), MB_ENOENT);
    assert_int_equal(mb_pool_release(p, a, stream_of(1)), 0);
    assert_int_equal(mb_pool_release(p, a, stream_of(1)), MB_ENOENT);
    assert_int_equal(mb_pool_release(p, a, stream_of(0)), MB_ENOENT);
    assert_true(mb_pool_is_valid(p));
    assert_int_equal(mb_pool_release(p, b, stream_of(0)), 0);
    mb_pool_stats(p, &live, &mapped);
    assert_int_equal(live, 0);
    complete(&d, 0);
    complete(&d, 1);
    settle(p);                                     /* frees no event covers */
    assert_int_equal(mb_pool_trim(p, 0), 1 << 20);
    mb_pool_stats(p, &live, &mapped);
    assert_int_equal(mapped, 0);
    assert_int_equal(d.arenas, 0);
    assert_int_equal(d.ev_live, 0);
    /* a grow failure is reported and changes nothing */
    d.fail_grow = 1;
    assert_int_equal(mb_pool_alloc(p, 4096, stream_of(0), &a), MB_ENOMEM);
    assert_true(mb_pool_is_valid(p));
    d.fail_grow = 0;
    /* a request bigger than the growth unit gets an arena of its own */
    assert_int_equal(mb_pool_alloc(p, (3 << 20) + 5, stream_of(0), &a), 0);
    mb_pool_stats(p, &live, &mapped);
    assert_int_equal(live, (3 << 20) + 256);
    assert_int_equal(mapped, (3 << 20) + 256);
    mb_pool_free(p);
    assert_int_equal(d.arenas, 0);
    assert_int_equal(d.ev_live, 0);
}

/* One event covers a batch of frees; a miss never records on a stream
 * other than the legacy one; the tail of a batch settles by a device sync. */
static void test_batched_fences(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    const size_t K = 4096;
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 256, 1 << 20), 0);
    void *A = stream_of(0), *B = stream_of(1), *v[40], *y;
    void *filler;
    for (int i = 0; i < 40; i++)
        assert_int_equal(mb_pool_alloc(p, K, A, &v[i]), 0);
    assert_int_equal(mb_pool_alloc(p, (1 << 20) - 40 * K, A, &filler), 0);   /* arena full */
    launch(&d, 0);
    for (int i = 0; i < 31; i++)
        assert_int_equal(mb_pool_release(p, v[i], A), 0);
    assert_int_equal(d.ev_recorded, 0);                   /* frees record nothing */
    assert_int_equal(mb_pool_release(p, v[31], A), 0);
    assert_int_equal(d.ev_recorded, 1);                   /* the 32nd closes the batch */
    complete(&d, 0);
    /* B misses: A is not touched (it may be gone); the batch is reusable */
    size_t arenas = d.arenas;
    assert_int_equal(mb_pool_alloc(p, 32 * K, B, &y), 0);
    assert_int_equal(d.ev_recorded, 1);
    assert_int_equal(d.arenas, arenas);
    assert_ptr_equal(y, v[0]);
    launch(&d, 0);
    for (int i = 32; i < 40; i++)
        assert_int_equal(mb_pool_release(p, v[i], A), 0);
    complete(&d, 0);
    /* the tail (8 frees) has no event: a device sync settles it */
    bool unfenced = false;
    assert_int_equal(mb_pool_pending(p, &unfenced), 8 * K);
    assert_true(unfenced);
    settle(p);
    assert_int_equal(mb_pool_pending(p, &unfenced), 0);
    assert_false(unfenced);
    void *z;
    assert_int_equal(mb_pool_alloc(p, 8 * K, MB_POOL_SYNC, &z), 0);
    assert_ptr_equal(z, v[32]);
    assert_int_equal(d.arenas, arenas);
    /* a synchronous allocation never takes a block pending on a stream */
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, z, A), 0);
    assert_int_equal(mb_pool_alloc(p, 8 * K, MB_POOL_SYNC, &z), 0);
    assert_ptr_not_equal(z, v[32]);
    assert_true(mb_pool_is_valid(p));
    complete(&d, 0);
    settle(p);
    assert_int_equal(mb_pool_release(p, y, B), 0);
    assert_int_equal(mb_pool_release(p, z, B), 0);
    assert_int_equal(mb_pool_release(p, filler, B), 0);
    complete(&d, 1);
    settle(p);
    mb_pool_free(p);
    assert_int_equal(d.arenas, 0);
    assert_int_equal(d.ev_live, 0);
}

/* A mapped range joins as a free arena; a block spanning its arena leaves. */
static void test_adopt_detach(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 256, 1 << 20), 0);
    static char range[1 << 16] __attribute__((aligned(256)));
    assert_int_equal(mb_pool_adopt(p, range, sizeof(range), stream_of(0)), 0);
    void *x, *y, *base;
    size_t bytes;
    assert_int_equal(mb_pool_alloc(p, sizeof(range), stream_of(0), &x), 0);
    assert_ptr_equal(x, range);                            /* pending on its stream: at once */
    assert_int_equal(mb_pool_detach(p, x, &base, &bytes), 0);
    assert_ptr_equal(base, range);
    assert_int_equal(bytes, sizeof(range));
    assert_int_equal(mb_pool_detach(p, x, &base, &bytes), MB_ENOENT);
    assert_int_equal(mb_pool_alloc(p, 4096, stream_of(0), &x), 0);
    assert_int_equal(mb_pool_alloc(p, 4096, stream_of(0), &y), 0);
    assert_int_equal(mb_pool_detach(p, x, &base, &bytes), MB_EBUSY);  /* shares its arena */
    assert_true(mb_pool_is_valid(p));
    assert_int_equal(mb_pool_release(p, x, stream_of(0)), 0);
    assert_int_equal(mb_pool_release(p, y, stream_of(0)), 0);
    complete(&d, 0);
    settle(p);
    mb_pool_free(p);
    assert_int_equal(d.arenas, 0);
}

/* Close fits: a large request does not split a much larger free block. */
static void test_close_fit(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    const size_t M = 1 << 20;
    assert_int_equal(mb_pool_new(&p, &dev_ops_nostream, &d, 256, M), 0);
    mb_pool_set_close_fit(p, M);
    void *a, *b, *x;
    assert_int_equal(mb_pool_alloc(p, 8 * M, NULL, &a), 0);
    assert_int_equal(mb_pool_release(p, a, NULL), 0);
    assert_int_equal(d.arenas, 1);
    assert_int_equal(mb_pool_alloc(p, 4 * M, NULL, &b), 0);   /* 8 MiB is twice too big */
    assert_int_equal(d.arenas, 2);
    assert_int_equal(mb_pool_alloc(p, 7 * M + M / 2, NULL, &x), 0);   /* within 1/8: taken */
    assert_ptr_equal(x, a);
    assert_int_equal(d.arenas, 2);
    assert_int_equal(mb_pool_release(p, x, NULL), 0);
    assert_int_equal(mb_pool_release(p, b, NULL), 0);
    void *small;
    assert_int_equal(mb_pool_alloc(p, 4096, NULL, &small), 0);   /* below the limit: splits */
    assert_int_equal(d.arenas, 2);
    assert_int_equal(mb_pool_release(p, small, NULL), 0);
    assert_true(mb_pool_is_valid(p));
    mb_pool_free(p);
    assert_int_equal(d.arenas, 0);
}

/* Extending: a miss grows the arena of its class with the largest free end
 * (none at all counts) rather than add an arena beside it: a free end by
 * what it lacks, a live end by the whole request. An arena with no room
 * for an extension is not asked again for as large a one; a refused
 * extend (out of memory) leaves that miss to a new arena and the arena
 * extensible. */
static void test_extend(void **state)
{
    (void)state;
    struct dev d = { .room = 64 << 20 };
    struct mb_pool *p;
    const size_t M = 1 << 20;
    assert_int_equal(mb_pool_new(&p, &dev_ops_nostream, &d, 256, M), 0);
    mb_pool_set_extend_min(p, M);
    void *a, *b, *x, *y, *z, *u, *v, *w;
    assert_int_equal(mb_pool_alloc(p, 16 * M, NULL, &a), 0);
    assert_int_equal(mb_pool_release(p, a, NULL), 0);
    assert_int_equal(mb_pool_alloc(p, 10 * M, NULL, &b), 0);    /* low end; 6 MiB free after it */
    assert_ptr_equal(b, a);
    assert_int_equal(mb_pool_alloc(p, 20 * M, NULL, &x), 0);
    assert_ptr_equal(x, (char *)a + 10 * M);                    /* the free end, extended */
    assert_int_equal(d.arenas, 1);
    assert_int_equal(d.extends, 1);
    assert_int_equal(d.len[0], 30 * M);                         /* 14 MiB more: what was missing */
    assert_int_equal(mb_pool_extends(p), 1);
    assert_int_equal(mb_pool_misses(p), 1);
    memset(x, 0x5a, 20 * M);
    assert_true(mb_pool_is_valid(p));
    assert_int_equal(mb_pool_alloc(p, 8 * M, NULL, &y), 0);     /* the end is live: right after it */
    assert_ptr_equal(y, (char *)a + 30 * M);
    assert_int_equal(d.arenas, 1);
    assert_int_equal(d.len[0], 38 * M);
    assert_int_equal(mb_pool_release(p, x, NULL), 0);           /* 20 MiB free inside */
    assert_int_equal(mb_pool_alloc(p, 60 * M, NULL, &z), 0);    /* 38 + 60 > 16 + 64: no room */
    assert_int_equal(d.arenas, 2);
    assert_int_equal(d.extends, 2);
    assert_int_equal(mb_pool_release(p, y, NULL), 0);           /* a free end of 28 MiB */
    assert_int_equal(mb_pool_alloc(p, 65 * M, NULL, &u), 0);    /* 37 MiB more: room for that */
    assert_ptr_equal(u, (char *)a + 10 * M);
    assert_int_equal(d.extends, 3);
    assert_int_equal(d.len[0], 75 * M);
    assert_int_equal(mb_pool_release(p, u, NULL), 0);           /* a free end of 65 MiB */
    size_t asks = d.extend_asks;
    assert_int_equal(mb_pool_alloc(p, 200 * M, NULL, &v), 0);   /* 135 more: not asked; z's arena is */
    assert_int_equal(d.extend_asks, asks + 1);
    assert_int_equal(d.arenas, 3);
    assert_int_equal(mb_pool_release(p, v, NULL), 0);
    assert_int_equal(mb_pool_release(p, z, NULL), 0);
    d.fail_extend = 1;
    assert_int_equal(mb_pool_alloc(p, 300 * M, NULL, &w), 0);   /* refused: a new arena */
    assert_int_equal(d.arenas, 4);
    assert_int_equal(d.extends, 3);
    d.fail_extend = 0;
    /* The 200 MiB arena (free) grows by 10 MiB: the refusal did not mark it. */
    assert_int_equal(mb_pool_alloc(p, 210 * M, NULL, &u), 0);
    assert_ptr_equal(u, v);
    assert_int_equal(d.extends, 4);
    assert_int_equal(d.arenas, 4);
    assert_true(mb_pool_is_valid(p));
    assert_int_equal(mb_pool_release(p, u, NULL), 0);
    assert_int_equal(mb_pool_release(p, w, NULL), 0);
    assert_int_equal(mb_pool_release(p, b, NULL), 0);
    mb_pool_trim(p, 0);
    assert_int_equal(d.arenas, 0);
    assert_true(mb_pool_is_valid(p));
    mb_pool_free(p);
}

/* A block freed on a stream takes in its ready neighbours: a request of
 * their joint size on that stream takes them rather than split a larger
 * block, and another stream waits for the free's fence to use them. */
static void test_merge_ready(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    const size_t M = 1 << 20;
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 256, 4 * M), 0);
    void *A = stream_of(0), *B = stream_of(1);
    void *x, *y, *z, *b, *r;
    assert_int_equal(mb_pool_alloc(p, M, A, &x), 0);          /* a 4 MiB arena */
    assert_int_equal(mb_pool_alloc(p, M, A, &y), 0);          /* 2 MiB ready after it */
    assert_ptr_equal(y, (char *)x + M);
    assert_int_equal(mb_pool_alloc(p, 8 * M, A, &z), 0);      /* an arena of its own */
    assert_int_equal(d.arenas, 2);
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, z, A), 0);
    assert_int_equal(mb_pool_release(p, y, A), 0);            /* y and the 2 MiB: one block on A */
    assert_true(mb_pool_is_valid(p));
    assert_int_equal(mb_pool_alloc(p, 2 * M, B, &b), 0);      /* not on B before the fence */
    assert_int_equal(d.arenas, 3);
    assert_true((char *)b < (char *)x || (char *)b >= (char *)x + 4 * M);
    assert_int_equal(mb_pool_alloc(p, 3 * M, A, &r), 0);      /* on A: the 3 MiB, not z's 8 */
    assert_ptr_equal(r, y);
    assert_int_equal(d.arenas, 3);
    assert_int_equal(mb_pool_release(p, r, A), 0);
    assert_int_equal(mb_pool_release(p, x, A), 0);
    assert_int_equal(mb_pool_release(p, b, B), 0);
    assert_int_equal(mb_pool_fence(p, A), 0);
    assert_int_equal(mb_pool_fence(p, B), 0);
    complete(&d, 0);
    complete(&d, 1);
    assert_true(mb_pool_is_valid(p));
    mb_pool_trim(p, 0);
    assert_int_equal(d.arenas, 0);
    mb_pool_free(p);
    assert_int_equal(d.ev_live, 0);
}

/* A block freed on the legacy stream (mb_free) that fits a synchronous
 * request closer than any ready block is taken once the legacy stream's
 * work is complete, though no miss looked at that stream since: a larger
 * ready block is not split meanwhile. Before that work completes it is not
 * taken. */
static void test_settle_legacy(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    const size_t M = 1 << 20;
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 256, 16 * M), 0);
    void *x, *g, *r, *r2;
    assert_int_equal(mb_pool_alloc(p, 3 * M, MB_POOL_SYNC, &x), 0);   /* a 16 MiB arena */
    assert_int_equal(mb_pool_alloc(p, M, MB_POOL_SYNC, &g), 0);       /* 12 MiB free after */
    assert_ptr_equal(g, (char *)x + 3 * M);
    launch(&d, LEGACY);                                              /* x still read there */
    assert_int_equal(mb_pool_release(p, x, NULL), 0);
    assert_int_equal(mb_pool_alloc(p, 3 * M, MB_POOL_SYNC, &r), 0);   /* not x: the 12 MiB */
    assert_ptr_equal(r, (char *)g + M);
    complete(&d, LEGACY);
    assert_int_equal(mb_pool_alloc(p, 3 * M, MB_POOL_SYNC, &r2), 0);  /* now x, not the 9 MiB */
    assert_ptr_equal(r2, x);
    assert_int_equal(d.arenas, 1);
    assert_true(mb_pool_is_valid(p));
    assert_int_equal(mb_pool_release(p, r2, NULL), 0);
    assert_int_equal(mb_pool_release(p, r, NULL), 0);
    assert_int_equal(mb_pool_release(p, g, NULL), 0);
    assert_int_equal(mb_pool_fence(p, NULL), 0);
    complete(&d, LEGACY);
    settle(p);
    mb_pool_trim(p, 0);
    assert_int_equal(d.arenas, 0);
    mb_pool_free(p);
    assert_int_equal(d.ev_live, 0);
}

/* Classes: above large_min a request takes free blocks only from arenas
 * made for such sizes, and at or below it only from the others. */
static void test_classes(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    const size_t M = 1 << 20;
    assert_int_equal(mb_pool_new(&p, &dev_ops_nostream, &d, 256, 4 * M), 0);
    mb_pool_set_large_min(p, M);
    void *big, *small, *mid, *x;
    assert_int_equal(mb_pool_alloc(p, 8 * M, NULL, &big), 0);       /* a large arena */
    assert_int_equal(mb_pool_release(p, big, NULL), 0);
    assert_int_equal(mb_pool_alloc(p, 512 << 10, NULL, &small), 0); /* not in it: a small arena */
    assert_int_equal(d.arenas, 2);
    assert_true((char *)small < (char *)big || (char *)small >= (char *)big + 8 * M);
    assert_int_equal(mb_pool_alloc(p, 2 * M, NULL, &mid), 0);        /* large: the free 8 MiB */
    assert_ptr_equal(mid, big);
    assert_int_equal(d.arenas, 2);
    /* The small arena has 3.5 MiB free, the large one 6: a 3 MiB large
     * request takes the large one's, a 1 MiB small one the small one's. */
    assert_int_equal(mb_pool_alloc(p, 3 * M, NULL, &x), 0);
    assert_true((char *)x >= (char *)big && (char *)x < (char *)big + 8 * M);
    assert_int_equal(mb_pool_release(p, x, NULL), 0);
    assert_int_equal(mb_pool_alloc(p, M, NULL, &x), 0);
    assert_true((char *)x < (char *)big || (char *)x >= (char *)big + 8 * M);
    assert_int_equal(d.arenas, 2);
    assert_true(mb_pool_is_valid(p));
    assert_int_equal(mb_pool_release(p, x, NULL), 0);
    assert_int_equal(mb_pool_release(p, mid, NULL), 0);
    assert_int_equal(mb_pool_release(p, small, NULL), 0);
    mb_pool_free(p);
    assert_int_equal(d.arenas, 0);
}

/* Holes: only a ready block free for min_age allocations is offered; a
 * punched range is never handed out, splits its block, leaves the mapped
 * bytes, comes back as free memory when its unmapping failed, and keeps its
 * arena from shrinking only while busy. */
static void test_holes(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    const size_t M = 1 << 20;
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 256, M), 0);
    void *a, *b, *x;
    assert_int_equal(mb_pool_alloc(p, 64 * M, stream_of(0), &a), 0);
    launch(&d, 0);                                   /* a kernel still uses a */
    assert_int_equal(mb_pool_release(p, a, stream_of(0)), 0);
    assert_int_equal(mb_pool_alloc(p, 8 * M, MB_POOL_SYNC, &b), 0);   /* pending: a new arena */
    assert_int_equal(d.arenas, 2);
    struct mb_pool_span sp[4];
    assert_int_equal(mb_pool_ready_spans(p, 16 * M, 0, sp, 4), 0);    /* pending is not ready */
    complete(&d, 0);
    assert_int_equal(mb_pool_fence(p, stream_of(0)), 0);
    assert_int_equal(mb_pool_ready_spans(p, 16 * M, 0, sp, 4), 1);
    assert_int_equal(sp[0].arena, (uintptr_t)a);
    assert_int_equal(sp[0].size, 64 * M);
    assert_int_equal(mb_pool_ready_spans(p, 16 * M, 5, sp, 4), 0);    /* freed 1 allocation ago */
    assert_int_equal(mb_pool_ready_spans(p, 65 * M, 0, sp, 4), 0);
    /* Punch [16, 48) MiB of a's arena. */
    size_t mapped0, mapped1;
    mb_pool_stats(p, NULL, &mapped0);
    char *hole = (char *)a + 16 * M;
    assert_int_equal(mb_pool_punch(p, hole + 40 * M, 32 * M), MB_ENOENT);   /* past the block */
    assert_int_equal(mb_pool_punch(p, hole, 32 * M), 0);
    assert_int_equal(mb_pool_punch(p, hole, 32 * M), MB_ENOENT);           /* not ready any more */
    mb_pool_stats(p, NULL, &mapped1);
    assert_int_equal(mapped0 - mapped1, 32 * M);
    assert_true(mb_pool_is_valid(p));
    /* Busy: a trim leaves the arena alone, allocations never land in the hole. */
    assert_int_equal(mb_pool_trim(p, 0), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(mb_pool_alloc(p, 16 * M, stream_of(1), &x), 0);
        assert_true((char *)x + 16 * M <= hole || (char *)x >= hole + 32 * M);
        assert_int_equal(mb_pool_release(p, x, stream_of(1)), 0);
    }
    assert_int_equal(d.arenas, 2);
    assert_int_equal(mb_pool_fence(p, stream_of(1)), 0);
    complete(&d, 1);
    /* A failed unmapping gives the range back as free memory. */
    mb_pool_punch_end(p, hole, false);
    mb_pool_stats(p, NULL, &mapped1);
    assert_int_equal(mapped1, mapped0);
    assert_int_equal(mb_pool_alloc(p, 64 * M, MB_POOL_SYNC, &x), 0);      /* whole again */
    assert_ptr_equal(x, a);
    assert_int_equal(mb_pool_release(p, x, stream_of(1)), 0);
    assert_int_equal(mb_pool_fence(p, stream_of(1)), 0);
    /* A finished hole: the arena shrinks once the rest of it is free. */
    assert_int_equal(mb_pool_ready_spans(p, 64 * M, 0, sp, 4), 1);
    assert_int_equal(mb_pool_punch(p, hole, 32 * M), 0);
    mb_pool_punch_end(p, hole, true);
    size_t live;
    mb_pool_stats(p, &live, &mapped1);
    assert_int_equal(mapped1, mapped0 - 32 * M);
    assert_int_equal(live, 8 * M);
    assert_int_equal(mb_pool_trim(p, 0), 32 * M);   /* a's arena, all but its hole */
    assert_int_equal(d.arenas, 1);
    assert_int_equal(mb_pool_release(p, b, stream_of(1)), 0);
    assert_int_equal(mb_pool_fence(p, stream_of(1)), 0);
    assert_true(mb_pool_is_valid(p));
    mb_pool_free(p);
    assert_int_equal(d.arenas, 0);
    assert_int_equal(d.ev_live, 0);
}

/* A miss fills the part of a hole its request needs, in the run of free
 * blocks and holes with the fewest hole bytes, before any extension; the
 * rest stays a hole. A fill that fails leaves the hole and the miss
 * extends instead. */
static void test_fill(void **state)
{
    (void)state;
    struct dev d = { .room = 64 << 20 };
    struct mb_pool *p;
    const size_t M = 1 << 20;
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 256, 16 * M), 0);
    mb_pool_set_extend_min(p, 1);
    void *x, *y, *z, *w, *r, *r2, *r3;
    assert_int_equal(mb_pool_alloc(p, 4 * M, MB_POOL_SYNC, &x), 0);   /* a 16 MiB arena */
    assert_int_equal(mb_pool_alloc(p, 4 * M, MB_POOL_SYNC, &y), 0);
    assert_int_equal(mb_pool_alloc(p, 4 * M, MB_POOL_SYNC, &z), 0);
    assert_int_equal(mb_pool_alloc(p, 4 * M, MB_POOL_SYNC, &w), 0);
    assert_int_equal(d.arenas, 1);
    assert_int_equal(mb_pool_release(p, y, NULL), 0);
    assert_int_equal(mb_pool_release(p, z, NULL), 0);
    assert_int_equal(mb_pool_fence(p, NULL), 0);
    struct mb_pool_span sp[2];
    assert_int_equal(mb_pool_ready_spans(p, 8 * M, 0, sp, 2), 1);       /* y and z, merged */
    assert_int_equal(mb_pool_punch(p, y, 8 * M), 0);
    mb_pool_punch_end(p, y, true);
    size_t mapped;
    mb_pool_stats(p, NULL, &mapped);
    assert_int_equal(mapped, 8 * M);
    /* 5.5 MiB: the first 6 MiB of the hole are filled, 2 stay a hole. */
    assert_int_equal(mb_pool_alloc(p, 5 * M + M / 2, MB_POOL_SYNC, &r), 0);
    assert_ptr_equal(r, y);
    assert_int_equal(d.fills, 1);
    assert_int_equal(d.fill_covers, 5 * M + M / 2);
    assert_int_equal(d.extends, 0);
    mb_pool_stats(p, NULL, &mapped);
    assert_int_equal(mapped, 14 * M);
    assert_true(mb_pool_is_valid(p));
    /* Freed, the 6 MiB do not merge with the hole; 7 MiB fill 1 more. */
    assert_int_equal(mb_pool_release(p, r, NULL), 0);
    assert_int_equal(mb_pool_fence(p, NULL), 0);
    assert_int_equal(mb_pool_alloc(p, 7 * M, MB_POOL_SYNC, &r2), 0);
    assert_ptr_equal(r2, y);
    assert_int_equal(d.fills, 2);
    assert_int_equal(d.fill_covers, M);
    mb_pool_stats(p, NULL, &mapped);
    assert_int_equal(mapped, 15 * M);
    /* A fill that fails: the hole stays, the miss extends the arena. */
    d.fail_fill = 1;
    d.fill_covers = 0;
    assert_int_equal(mb_pool_release(p, r2, NULL), 0);
    assert_int_equal(mb_pool_fence(p, NULL), 0);
    assert_int_equal(mb_pool_alloc(p, 8 * M, MB_POOL_SYNC, &r3), 0);   /* 7 MiB + the 1 MiB hole */
    assert_int_equal(d.fill_covers, M);                                 /* asked, */
    assert_int_equal(d.fills, 2);                                       /* refused */
    assert_int_equal(d.extends, 1);
    assert_ptr_equal(r3, (char *)x + 16 * M);
    mb_pool_stats(p, NULL, &mapped);
    assert_int_equal(mapped, 23 * M);
    assert_true(mb_pool_is_valid(p));
    d.fail_fill = 0;
    assert_int_equal(mb_pool_release(p, x, NULL), 0);
    assert_int_equal(mb_pool_release(p, r3, NULL), 0);
    assert_int_equal(mb_pool_release(p, w, NULL), 0);
    assert_int_equal(mb_pool_fence(p, NULL), 0);
    complete(&d, LEGACY);
    settle(p);
    assert_true(mb_pool_is_valid(p));
    mb_pool_trim(p, 0);
    assert_int_equal(d.arenas, 0);   /* nothing but free blocks and a hole: it goes */
    mb_pool_free(p);
    assert_int_equal(d.ev_live, 0);
}

/* The stream rule, step by step. */
static void test_streams(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    const size_t M = 1 << 20;
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, 256, M), 0);
    void *A = stream_of(0), *B = stream_of(1), *C = stream_of(2);
    void *x, *y, *z, *w;
    assert_int_equal(mb_pool_alloc(p, M, A, &x), 0);
    assert_int_equal(d.arenas, 1);
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, x, A), 0);
    /* same stream: at once, and without any event */
    assert_int_equal(mb_pool_alloc(p, M, A, &y), 0);
    assert_ptr_equal(y, x);
    assert_int_equal(d.ev_recorded, 0);
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, x, A), 0);
    assert_int_equal(mb_pool_fence(p, A), 0);      /* the caller vouches for A */
    /* another stream: not while the free's work is pending */
    assert_int_equal(mb_pool_alloc(p, M, B, &y), 0);
    assert_ptr_not_equal(y, x);
    assert_int_equal(d.arenas, 2);
    assert_int_equal(d.ev_recorded, 1);           /* one event on A, still pending */
    assert_int_equal(mb_pool_alloc(p, M, B, &z), 0);
    assert_ptr_not_equal(z, x);
    assert_int_equal(d.arenas, 3);
    /* once it completed: handed to B */
    complete(&d, 0);
    assert_int_equal(mb_pool_alloc(p, M, B, &w), 0);
    assert_ptr_equal(w, x);
    assert_int_equal(d.arenas, 3);
    assert_int_equal(d.ev_live, 0);
    assert_true(mb_pool_is_valid(p));

    /* pending blocks of one stream coalesce and keep the later event */
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, w, A), 0);    /* whole arena pending on A */
    void *s[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(mb_pool_alloc(p, M / 4, A, &s[i]), 0);
        assert_ptr_equal(s[i], (char *)x + i * (M / 4));
    }
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, s[0], A), 0);
    assert_int_equal(mb_pool_fence(p, A), 0);         /* event e1 covers s[0] */
    uint64_t e1 = d.clock[0];
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, s[1], A), 0); /* merges: now under a later event */
    d.done[0] = e1;
    assert_int_equal(mb_pool_alloc(p, M, C, &z), 0);         /* e1 alone does not free them */
    assert_true((uintptr_t)z + M <= (uintptr_t)x || (uintptr_t)z >= (uintptr_t)x + M);
    assert_int_equal(mb_pool_fence(p, A), 0);                /* e2 covers s[1] */
    complete(&d, 0);
    void *h;
    assert_int_equal(mb_pool_alloc(p, M / 2, B, &h), 0);     /* both halves, merged */
    assert_ptr_equal(h, x);
    /* on A the two pending quarters left by s[2], s[3] are usable at once */
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, s[2], A), 0);
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, s[3], A), 0);
    assert_int_equal(mb_pool_alloc(p, M / 2, A, &w), 0);
    assert_ptr_equal(w, (char *)x + M / 2);
    assert_true(mb_pool_is_valid(p));

    /* a stream that misses gathers its pending block with ready neighbours */
    launch(&d, 1);
    assert_int_equal(mb_pool_release(p, h, B), 0);
    assert_int_equal(mb_pool_fence(p, B), 0);
    complete(&d, 1);
    launch(&d, 0);
    assert_int_equal(mb_pool_release(p, w, A), 0);
    size_t arenas = d.arenas;
    assert_int_equal(mb_pool_alloc(p, M, A, &w), 0);
    assert_ptr_equal(w, x);
    assert_int_equal(d.arenas, arenas);
    assert_true(mb_pool_is_valid(p));

    for (int i = 0; i < NSTREAMS; i++)
        complete(&d, i);
    mb_pool_free(p);
    assert_int_equal(d.arenas, 0);
    assert_int_equal(d.ev_live, 0);
}

/* Without event ops every free is ready for every stream at once. */
static void test_no_streams(void **state)
{
    (void)state;
    struct dev d = { 0 };
    struct mb_pool *p;
    assert_int_equal(mb_pool_new(&p, &dev_ops_nostream, &d, 512, 1 << 20), 0);
    void *x, *y;
    assert_int_equal(mb_pool_alloc(p, 1000, stream_of(0), &x), 0);
    assert_int_equal((uintptr_t)x % 512, 0);
    assert_int_equal(mb_pool_release(p, x, stream_of(0)), 0);
    assert_int_equal(mb_pool_alloc(p, 1000, stream_of(1), &y), 0);
    assert_ptr_equal(x, y);
    assert_int_equal(mb_pool_release(p, y, stream_of(3)), 0);
    assert_int_equal(mb_pool_trim(p, 0), 1 << 20);
    assert_int_equal(d.arenas, 0);
    mb_pool_free(p);
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
    size_t size;       /* requested */
    size_t usable;     /* rounded */
    uint64_t seed;
};

struct fr {            /* a range whose latest free was on stream at clock */
    uintptr_t lo, hi;
    int stream;
    uint64_t clock;
};

struct model {
    struct live *live;     /* sorted by p */
    size_t nlive, cap;
    struct fr *fr;         /* disjoint, unsorted, pruned once complete */
    size_t nfr, frcap;
    struct dev *d;
    size_t live_bytes;
};

static struct model *cur_model;

static void fill(uintptr_t p, size_t n, uint64_t seed)
{
    pattern_fill(p, n, seed, 4096, 64);
}

static void check_fill(uintptr_t p, size_t n, uint64_t seed)
{
    long at = pattern_check(p, n, seed, 4096, 64);
    if (at >= 0)
        fail_msg("block %#lx+%zu corrupted %s %ld", (unsigned long)p, n, n <= 4096 ? "at" : "near", at);
}

static size_t live_pos(const struct model *m, uintptr_t p)
{
    size_t lo = 0, hi = m->nlive;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->live[mid].p < p) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static void fr_add(struct model *m, uintptr_t lo, uintptr_t hi, int s, uint64_t clock)
{
    if (m->nfr == m->frcap) {
        m->frcap = m->frcap ? m->frcap * 2 : 256;
        m->fr = realloc(m->fr, m->frcap * sizeof *m->fr);
        assert_non_null(m->fr);
    }
    m->fr[m->nfr++] = (struct fr){ lo, hi, s, clock };
}

/* [lo, hi) was just handed to stream s: every earlier free of those bytes on
 * another stream must be covered by a completed event recorded after it. */
static void fr_claim(struct model *m, uintptr_t lo, uintptr_t hi, int s)
{
    for (size_t i = 0; i < m->nfr;) {
        struct fr f = m->fr[i];
        if (m->d->done[f.stream] >= f.clock) {    /* its work completed: no constraint left */
            m->fr[i] = m->fr[--m->nfr];
            continue;
        }
        if (f.hi <= lo || f.lo >= hi) {
            i++;
            continue;
        }
        if (f.stream != s)
            fail_msg("range %#lx..%#lx freed on stream %d (clock %lu, done %lu) handed to stream %d",
                     (unsigned long)f.lo, (unsigned long)f.hi, f.stream, (unsigned long)f.clock,
                     (unsigned long)m->d->done[f.stream], s);
        m->fr[i] = m->fr[--m->nfr];
        if (f.lo < lo)
            fr_add(m, f.lo, lo, f.stream, f.clock);
        if (f.hi > hi)
            fr_add(m, hi, f.hi, f.stream, f.clock);
    }
}

static void fr_drop(uintptr_t base, size_t bytes)
{
    struct model *m = cur_model;
    for (size_t i = 0; i < m->nfr;) {
        if (m->fr[i].lo >= base && m->fr[i].hi <= base + bytes)
            m->fr[i] = m->fr[--m->nfr];
        else
            i++;
    }
}

static size_t rand_size(size_t max)
{
    uint64_t r = rnd_below(100);
    size_t lo, hi;
    if (r < 85) { lo = 1; hi = 64 << 10; }
    else if (r < 98) { lo = 64 << 10; hi = 8 << 20; }
    else { lo = 8 << 20; hi = max; }
    /* log-uniform in [lo, hi] */
    unsigned l0 = 63 - __builtin_clzll(lo), l1 = 63 - __builtin_clzll(hi);
    unsigned l = l0 + (unsigned)rnd_below(l1 - l0 + 1);
    size_t a = (size_t)1 << l, b = (size_t)2 << l;
    if (a < lo) a = lo;
    if (b > hi) b = hi;
    return a + rnd_below(b - a + 1);
}

static void do_alloc(struct model *m, struct mb_pool *p, size_t size, int s, size_t align)
{
    void *ptr;
    int rc = mb_pool_alloc(p, size, stream_of(s), &ptr);
    assert_int_equal(rc, 0);
    uintptr_t a = (uintptr_t)ptr;
    size_t us = 0;
    assert_int_equal(a % align, 0);
    assert_int_equal(mb_pool_usable_size(p, ptr, &us), 0);
    assert_int_equal(us, (size + align - 1) / align * align);
    size_t i = live_pos(m, a);
    if (i < m->nlive && m->live[i].p < a + us)
        fail_msg("overlap with the next live block");
    if (i > 0 && m->live[i - 1].p + m->live[i - 1].usable > a)
        fail_msg("overlap with the previous live block");
    fr_claim(m, a, a + us, s);
    if (m->nlive == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 256;
        m->live = realloc(m->live, m->cap * sizeof *m->live);
        assert_non_null(m->live);
    }
    memmove(&m->live[i + 1], &m->live[i], (m->nlive - i) * sizeof *m->live);
    m->live[i] = (struct live){ a, size, us, rnd() };
    m->nlive++;
    m->live_bytes += us;
    fill(a, size, m->live[i].seed);
}

static void do_free(struct model *m, struct mb_pool *p, size_t i, int s)
{
    struct live l = m->live[i];
    check_fill(l.p, l.size, l.seed);
    memmove(&m->live[i], &m->live[i + 1], (m->nlive - i - 1) * sizeof *m->live);
    m->nlive--;
    m->live_bytes -= l.usable;
    launch(m->d, s);                               /* a kernel used the block on s */
    assert_int_equal(mb_pool_release(p, (void *)l.p, stream_of(s)), 0);
    fr_add(m, l.p, l.p + l.usable, s, m->d->clock[s]);
    if (l.usable >= (64 << 10)) {                 /* hand the touched pages back to the OS */
        uintptr_t lo = (l.p + 4095) & ~(uintptr_t)4095, hi = (l.p + l.usable) & ~(uintptr_t)4095;
        if (hi > lo)
            madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
}

static void check_all(struct model *m, struct mb_pool *p)
{
    assert_true(mb_pool_is_valid(p));
    size_t live, mapped;
    mb_pool_stats(p, &live, &mapped);
    assert_int_equal(live, m->live_bytes);
    assert_int_equal(mapped, m->d->arena_bytes);
    for (size_t i = 0; i < m->nlive; i++)
        check_fill(m->live[i].p, m->live[i].size, m->live[i].seed);
}

static void run_model(size_t ops, size_t target, size_t max_size, size_t align,
                      size_t arena_bytes, size_t check_every, size_t drain_every, size_t extend_min)
{
    struct dev d = { .round = 2 << 20, .on_shrink = fr_drop, .room = extend_min ? 4 * max_size : 0 };
    struct model m = { .d = &d };
    cur_model = &m;
    struct mb_pool *p;
    assert_int_equal(mb_pool_new(&p, &dev_ops, &d, align, arena_bytes), 0);
    mb_pool_set_extend_min(p, extend_min);
    mb_pool_set_large_min(p, extend_min);   /* two classes with extension */
    size_t allocs = 0, frees = 0, refused = 0, trims = 0, drains = 0;
    for (size_t step = 1; step <= ops; step++) {
        uint64_t r = rnd_below(1000);
        if (r < 3) {
            complete(&d, (int)rnd_below(NSTREAMS));
        } else if (r < 4) {
            launch(&d, (int)rnd_below(NSTREAMS));
        } else if (r < 6) {
            int s = (int)rnd_below(NSTREAMS);
            d.done[s] += rnd_below(d.clock[s] - d.done[s] + 1);
        } else if (r < 7) {
            mb_pool_trim(p, rnd_below(2) ? 0 : arena_bytes * rnd_below(4));
            trims++;
        } else if (r < 12 && m.nlive) {
            size_t i = rnd_below(m.nlive);
            void *bad = (void *)(m.live[i].p + 1 + rnd_below(align - 1));
            assert_int_equal(mb_pool_release(p, bad, stream_of(0)), MB_ENOENT);
            refused++;
        } else {
            bool grow = m.nlive < target ? rnd_below(100) < 60 : rnd_below(100) < 40;
            if (grow || !m.nlive) {
                do_alloc(&m, p, rand_size(max_size), (int)rnd_below(NSTREAMS), align);
                allocs++;
            } else {
                size_t i = rnd_below(m.nlive);
                uintptr_t a = m.live[i].p;
                do_free(&m, p, i, (int)rnd_below(NSTREAMS));
                frees++;
                if (rnd_below(8) == 0) {
                    assert_int_equal(mb_pool_release(p, (void *)a, stream_of(0)), MB_ENOENT);
                    refused++;
                }
            }
        }
        if (step % check_every == 0)
            check_all(&m, p);
        if (drain_every && step % drain_every == 0) {
            while (m.nlive)
                do_free(&m, p, rnd_below(m.nlive), (int)rnd_below(NSTREAMS));
            for (int s = 0; s < NSTREAMS; s++)
                complete(&d, s);
            settle(p);
            mb_pool_trim(p, 0);
            size_t live, mapped;
            mb_pool_stats(p, &live, &mapped);
            assert_int_equal(live, 0);
            assert_int_equal(mapped, 0);          /* everything ready and given back */
            assert_int_equal(d.arenas, 0);
            assert_int_equal(d.ev_live, 0);
            drains++;
        }
    }
    check_all(&m, p);
    while (m.nlive)
        do_free(&m, p, rnd_below(m.nlive), (int)rnd_below(NSTREAMS));
    mb_pool_free(p);
    assert_int_equal(d.arenas, 0);
    assert_int_equal(d.ev_live, 0);
    print_message("pool model: %zu ops (%zu allocs, %zu frees, %zu refused, %zu trims, %zu drains), "
                  "%zu events recorded, %zu arenas extended\n", ops, allocs, frees, refused, trims, drains,
                  d.ev_recorded, d.extends);
    if (extend_min)
        assert_true(d.extends > 0);
    free(m.live);
    free(m.fr);
}

static void test_model_every_step(void **state)
{
    (void)state;
    rng_state = 0x9e3779b97f4a7c15ull;
    run_model(OPS(120000), 64, 64 << 20, 256, 4 << 20, 1, 20000, 0);
}

static void test_model_long(void **state)
{
    (void)state;
    rng_state = 0x2545f4914f6cdd1dull;
    run_model(OPS(1500000), 160, 256 << 20, 256, 32 << 20, 5000, 100000, 0);
}

static void test_model_align4k(void **state)
{
    (void)state;
    rng_state = 0xdeadbeefcafef00dull;
    run_model(OPS(200000), 100, 32 << 20, 4096, 8 << 20, 1000, 50000, 0);
}

/* The same with two classes (above 1 MiB, and the rest) and misses above
 * 1 MiB extending arenas. */
static void test_model_extend(void **state)
{
    (void)state;
    rng_state = 0x6a09e667f3bcc909ull;
    run_model(OPS(300000), 100, 64 << 20, 256, 4 << 20, 1000, 50000, 1 << 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_streams),
        cmocka_unit_test(test_batched_fences),
        cmocka_unit_test(test_adopt_detach),
        cmocka_unit_test(test_close_fit),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_merge_ready),
        cmocka_unit_test(test_settle_legacy),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_holes),
        cmocka_unit_test(test_fill),
        cmocka_unit_test(test_no_streams),
        cmocka_unit_test(test_model_every_step),
        cmocka_unit_test(test_model_long),
        cmocka_unit_test(test_model_align4k),
        cmocka_unit_test(test_model_extend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
