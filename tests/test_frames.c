/* test_frames.c: the daemon's frame books always balance (free + granted ==
 * total, in frames and in bytes) through random grants of frames of every
 * order, returns and reclaims, never exceed the budget, re-create free
 * frames as the order a grant needs, refuse what is not the caller's, and
 * scrub between tenants, make room on a device full below the budget, keep
 * their slots when the table is made ahead, keep the journal's id limit
 * ahead of them, reuse the slots of ended frames under new ids (and keep
 * those clients may report across a restart), grant frames that hold
 * descriptors first and export
 * returned ones again ahead of grants; and the frame plan keeps its
 * promises. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "daemon.h"

#define FB ((size_t)64 << 10)

/* The pool whose reserve workers run, from start_workers to end_pool. A
 * failed assertion leaves its test before end_pool: stop_workers, every
 * test's teardown, ends the pool then, so that no worker outlives its test
 * (the next test's pool would wait on it). Pools with workers are static,
 * so that they outlive a failed test's stack frame. */
static struct frame_pool *live;

static void start_workers(struct frame_pool *p, uint64_t reserve)
{
    live = p;
    assert_int_equal(frame_pool_prefill(p, reserve), 0);
}

static void end_pool(struct frame_pool *p)
{
    live = NULL;
    frame_pool_destroy(p);
}

static int stop_workers(void **state)
{
    (void)state;
    if (live)
        end_pool(live);
    return 0;
}

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
            int rc = frame_pool_grant(&p, n, (uint64_t)s + 1, 0, (uint32_t)(s % 2) + 1, ids);
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
            assert_int_equal(frame_pool_reclaim(&p, (uint64_t)s + 1, NULL), nheld[s]);
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
    assert_int_equal(frame_pool_grant(&p, 2, 1, 0, 1, ids), 0);
    uint32_t twice[2] = { ids[0], ids[0] };
    assert_int_equal(frame_pool_return(&p, twice, 2, 1), MB_EINVAL);
    assert_int_equal(p.n_granted, 2);
    /* Named twice after others, or after a frame not the session's: the
     * marks the check left are cleared (the invariants say no frame stays
     * named), and the frames return whole afterwards. */
    uint32_t late[3] = { ids[0], ids[1], ids[0] }, foreign[2] = { ids[1], ids[0] };
    assert_int_equal(frame_pool_return(&p, late, 3, 1), MB_EINVAL);
    assert_int_equal(frame_pool_return(&p, foreign, 2, 2), MB_EPERM);
    assert_true(frame_pool_is_valid(&p));
    assert_int_equal(p.n_granted, 2);
    uint32_t scratch[9];
    assert_int_equal(frame_pool_grant(&p, 0, 1, 0, 1, scratch), MB_EINVAL);
    assert_int_equal(frame_pool_grant(&p, 9, 1, 0, 1, scratch), MB_ENOMEM);
    assert_int_equal(frame_pool_return(&p, ids, 2, 1), 0);
    assert_int_equal(p.n_granted, 0);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* Slots made ahead keep the frames already booked, and making frames up to
 * them never moves the table (no doubling on a grant's path). */
static void slots_made_ahead(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 3000 * FB), 0);
    uint32_t ids[64];
    assert_int_equal(frame_pool_grant(&p, 3, 1, 0, 1, ids), 0);
    assert_int_equal(frame_pool_reserve_slots(&p, 100), 0);   /* fewer than it has: nothing */
    assert_true(p.cap >= 1024);
    assert_int_equal(frame_pool_reserve_slots(&p, 4096), 0);
    assert_int_equal(p.cap, 4096);
    assert_true(frame_pool_is_valid(&p));
    assert_int_equal(frame_pool_return(&p, ids, 3, 1), 0);   /* the booked frames survived */
    const struct frame *table = p.frames;
    for (int i = 0; i < 40; i++)
        assert_int_equal(frame_pool_grant(&p, 64, 2 + (uint64_t)i, 0, 1, ids), 0);
    assert_true(p.next_unused > 2048);
    assert_ptr_equal(p.frames, table);
    assert_int_equal(p.cap, 4096);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* A fresh directory for a journal (its path in path) and the host backend. */
static mb_backend *journal_pool_backend(char *dir, char *path, size_t n)
{
    assert_non_null(mkdtemp(dir));
    snprintf(path, n, "%s/gpu0.journal", dir);
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    return b;
}

/* The tick moves the journal's id limit ahead half a step before frames
 * reach it, so the grant that would cross it writes nothing. */
static void journal_limit_moves_ahead(void **state)
{
    char dir[] = "/tmp/mbtest-journal-XXXXXX", path[64];
    struct frame_pool p;
    mb_backend *b = journal_pool_backend(dir, path, sizeof(path));
    assert_int_equal(frame_pool_init(&p, b, FB, 3000 * FB), 0);
    assert_int_equal(frame_pool_open_journal(&p, path), 0);
    uint32_t first = p.journal_limit, ids[64];
    assert_true(first > 2048);
    frame_pool_tick(&p, 1000);   /* far from the limit: unchanged */
    assert_int_equal(p.journal_limit, first);
    uint64_t session = 1;
    while (p.next_unused + first / 2 < first)
        assert_int_equal(frame_pool_grant(&p, 64, session++, 0, 1, ids), 0);
    frame_pool_tick(&p, 2000);
    assert_true(p.journal_limit > first);
    assert_int_equal(p.journal_limit, p.next_unused + (first - 1));
    char head[32] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(head, sizeof(head), f));
    fclose(f);
    unsigned long limit = 0;
    assert_int_equal(sscanf(head, "next_id %lu", &limit), 1);
    assert_int_equal(limit, p.journal_limit);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
    unlink(path);
    rmdir(dir);
}

static void descriptor_cap_is_an_error_not_a_crash(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    p.max_frames = 5;
    uint32_t ids[8];
    assert_int_equal(frame_pool_grant(&p, 6, 1, 0, 1, ids), MB_ELIMIT);
    assert_int_equal(p.n_granted, 0);
    assert_int_equal(frame_pool_grant(&p, 5, 1, 0, 1, ids), 0);
    assert_int_equal(frame_pool_grant(&p, 1, 2, 0, 1, ids), MB_ELIMIT);
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
    assert_int_equal(frame_pool_grant(&p, 1, 1, 0, 7, &id), 0);
    struct frame *f = frame_pool_get(&p, id);
    uint8_t *m = mmap(NULL, FB, PROT_READ | PROT_WRITE, MAP_SHARED, f->mem.fd, 0);
    assert_true(m != MAP_FAILED);
    memset(m, 0xa5, FB);
    assert_int_equal(frame_pool_return(&p, &id, 1, 1), 0);
    /* The same tenant gets its data back unscrubbed... */
    assert_int_equal(frame_pool_grant(&p, 1, 2, 0, 7, &id), 0);
    assert_int_equal(m[100], 0xa5);
    assert_int_equal(p.scrubs, 0);
    assert_int_equal(frame_pool_return(&p, &id, 1, 2), 0);
    /* ...another tenant reads only zeros. */
    assert_int_equal(frame_pool_grant(&p, 1, 3, 0, 8, &id), 0);
    for (size_t k = 0; k < FB; k += 64)
        assert_int_equal(m[k], 0);
    assert_int_equal(p.scrubs, 1);
    munmap(m, FB);
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* A frame one uid held never goes to another uid (it may keep the
 * descriptor): uid 2 gets fresh frames, uid 1's free frames are released to
 * make room and counted; uid 2 later gets its own frames back. */
static void other_uid_gets_fresh_frames(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 4 * FB), 0);
    uint32_t a[4], c[4], e[4];
    assert_int_equal(frame_pool_grant(&p, 4, 1, 1000, 1, a), 0);
    assert_int_equal(frame_pool_return(&p, a, 4, 1), 0);
    assert_int_equal(frame_pool_grant(&p, 4, 2, 2000, 1, c), 0);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            assert_int_not_equal(c[i], a[k]);
    assert_int_equal(p.released_isolation, 4);
    assert_int_equal(p.scrubs, 0);
    assert_true(frame_pool_is_valid(&p));
    assert_int_equal(frame_pool_return(&p, c, 4, 2), 0);
    assert_int_equal(frame_pool_grant(&p, 4, 3, 2000, 1, e), 0);
    for (int i = 0; i < 4; i++) {
        bool found = false;
        for (int k = 0; k < 4; k++)
            found |= e[i] == c[k];
        assert_true(found);   /* its own frames, not new ones */
    }
    assert_int_equal(p.released_isolation, 4);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* Free frames above the reserve's target go back to the driver once they
 * have been idle for the idle period, not before. */
static void idle_frames_released(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 8 * FB), 0);
    p.idle_ms = 1000;
    uint32_t ids[6];
    assert_int_equal(frame_pool_grant(&p, 6, 1, 0, 1, ids), 0);
    assert_int_equal(frame_pool_return(&p, ids, 3, 1), 0);
    int64_t t0 = mb_now_ms();   /* the frames came free at or before t0 */
    frame_pool_tick(&p, t0 + 100);
    frame_pool_tick(&p, t0 + 600);
    assert_int_equal(p.bytes_free, 3 * FB);   /* not idle long enough */
    /* Three more come free later (as if at t0 + 900): the first three go,
     * these stay until they too have been idle for the period. */
    assert_int_equal(frame_pool_return(&p, ids + 3, 3, 1), 0);
    for (int i = 3; i < 6; i++)
        frame_pool_get(&p, ids[i])->freed_ms = t0 + 900;
    frame_pool_tick(&p, t0 + 1100);
    assert_int_equal(p.bytes_free, 3 * FB);
    assert_int_equal(p.released_idle, 3);
    frame_pool_tick(&p, t0 + 2000);
    assert_int_equal(p.bytes_free, 0);
    assert_int_equal(p.bytes_total, 0);
    assert_int_equal(p.released_idle, 6);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* The reserve's workers' frames made and waiting to be adopted, once
 * there are n of them (or 2 s have passed). */
static uint32_t wait_ready(struct frame_pool *p, uint32_t n)
{
    uint32_t ready = 0;
    for (int i = 0; i < 400; i++) {
        pthread_mutex_lock(&p->lock);
        ready = p->n_ready;
        pthread_mutex_unlock(&p->lock);
        if (ready >= n)
            break;
        usleep(5000);
    }
    return ready;
}

static void warm_reserve_fills_in_background(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 12 * FB), 0);
    start_workers(&p, 8 * FB);
    /* The workers create 8 frames without any grant asking. */
    assert_int_equal(wait_ready(&p, 8), 8);
    assert_int_equal(p.n_total, 0);   /* not in the books until adopted */
    uint32_t ids[12];
    assert_int_equal(frame_pool_grant(&p, 6, 1, 0, 1, ids), 0);
    assert_true(p.n_total >= 8);      /* adopted, not created on the request path */
    assert_true(frame_pool_is_valid(&p));
    /* The budget holds across workers and the request path together. */
    assert_int_equal(frame_pool_grant(&p, 6, 2, 0, 1, ids), 0);
    assert_int_equal(frame_pool_grant(&p, 1, 2, 0, 1, ids), MB_ENOMEM);
    pthread_mutex_lock(&p.lock);
    assert_true(p.committed <= p.budget_bytes);
    assert_true(p.bytes_total + (uint64_t)(p.n_ready + p.creating) * FB == p.committed);
    pthread_mutex_unlock(&p.lock);
    end_pool(&p);
    mb_backend_close(b);
}

/* While a grant's driver calls run on its path (frame_pool_path_busy),
 * the workers start none of theirs; they make the reserve once it ends. */
static void workers_hold_off_during_a_grants_calls(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 12 * FB), 0);
    frame_pool_path_busy(&p, 1);
    start_workers(&p, 4 * FB);
    usleep(100000);
    pthread_mutex_lock(&p.lock);
    uint32_t ready = p.n_ready, creating = p.creating;
    pthread_mutex_unlock(&p.lock);
    frame_pool_path_busy(&p, -1);
    assert_int_equal(ready, 0);
    assert_int_equal(creating, 0);
    assert_int_equal(wait_ready(&p, 4), 4);
    end_pool(&p);
    mb_backend_close(b);
}

/* The reserve's target follows grants at once, not at the next tick: the
 * workers make the frames a burst of grants takes next while it goes on,
 * so its later grants create nothing on their own path. */
static void reserve_follows_grants_at_once(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    start_workers(&p, 0);   /* workers, no configured reserve */
    uint32_t ids[6];
    assert_int_equal(frame_pool_grant(&p, 6, 1, 0, 1, ids), 0);
    assert_int_equal(p.path_created, 6);   /* nothing was ready */
    pthread_mutex_lock(&p.lock);
    assert_true(p.reserve_bytes >= 6 * FB);   /* no tick has run */
    pthread_mutex_unlock(&p.lock);
    assert_int_equal(wait_ready(&p, 6), 6);
    assert_int_equal(frame_pool_grant(&p, 6, 1, 0, 1, ids), 0);
    assert_int_equal(p.path_created, 6);   /* all six from the reserve */
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* Each grant that has to create a frame of an order whose spares did not
 * last keeps one more spare of it, up to MB_SPARES_MAX. The workers are
 * held back (none runs) so that no spare is made in between. */
static void spares_grow_when_they_run_out(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    p.n_workers = 1;   /* spares are kept only where workers make them */
    uint8_t orders[1] = { 2 };
    uint32_t id;
    for (unsigned i = 1; i <= MB_SPARES_MAX + 2; i++) {
        assert_int_equal(frame_pool_grant_orders(&p, orders, 1, 1, 0, 1, &id), 0);
        assert_int_equal(p.path_created, i);
        assert_int_equal(p.spare[2], i < MB_SPARES_MAX ? i : MB_SPARES_MAX);
    }
    assert_int_equal(p.spare[1], 0);   /* no other order's */
    assert_true(frame_pool_is_valid(&p));
    p.n_workers = 0;   /* no thread to join */
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* With the budget full of the reserve's order-0 frames, a grant that must
 * create a larger frame releases only what it needs: the workers refill the
 * reserve only after it, not with each release's budget (which made a
 * grant release hundreds of frames before its own could fit). */
static void room_made_once_with_reserve_full(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    for (int round = 0; round < 20; round++) {
        static struct frame_pool p;   /* (static: stop_workers may end it) */
        assert_int_equal(frame_pool_init(&p, b, FB, 16 * FB), 0);
        start_workers(&p, 16 * FB);
        assert_int_equal(wait_ready(&p, 16), 16);
        uint8_t orders[1] = { 2 };   /* 4 units: 4 order-0 frames must go */
        uint32_t id;
        assert_int_equal(frame_pool_grant_orders(&p, orders, 1, 1, 0, 1, &id), 0);
        assert_int_equal(frame_pool_bytes(&p, id), 4 * FB);
        assert_true(p.recreated >= 4);
        assert_true(p.recreated <= 4 + 2);   /* a worker's frame in flight may take one release */
        pthread_mutex_lock(&p.lock);
        assert_true(p.committed <= p.budget_bytes);
        pthread_mutex_unlock(&p.lock);
        assert_true(frame_pool_is_valid(&p));
        end_pool(&p);
    }
    /* Room is made with as few releases as can be: one free frame that
     * covers the deficit goes, not four of the reserve's. */
    static struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 32 * FB), 0);
    uint8_t big[1] = { 3 }, mid[1] = { 2 };
    uint32_t id;
    assert_int_equal(frame_pool_grant_orders(&p, big, 1, 1, 0, 1, &id), 0);
    assert_int_equal(frame_pool_return(&p, &id, 1, 1), 0);
    start_workers(&p, 24 * FB);
    assert_int_equal(wait_ready(&p, 24), 24);
    uint64_t before = p.recreated;
    assert_int_equal(frame_pool_grant_orders(&p, mid, 1, 1, 0, 1, &id), 0);
    assert_int_equal(frame_pool_bytes(&p, id), 4 * FB);
    assert_int_equal(p.recreated - before, 1);
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* The frame plan: covers the request, wastes < 3.2 % (nothing below 64
 * units), at most 6 frames below 512 units, largest first, and the plan of
 * any subset of a plan's frames is that subset (clients rely on it); the
 * exact plan holds whole units only, in few frames, and keeps that too. */
static void frame_plan_policy(void **state)
{
    const size_t U = (size_t)2 << 20;
    uint8_t o[2048], o2[2048];
    uint64_t covered, covered2;
    assert_int_equal(mb_frame_plan(0, U, MB_MAX_ORDER, o, 8, &covered), 0);
    assert_int_equal(mb_frame_plan(1, U, MB_MAX_ORDER, o, 8, &covered), 1);
    assert_int_equal(o[0], 0);
    assert_int_equal(covered, U);
    /* 300 MiB: 256 + 32 + 16 MiB. */
    assert_int_equal(mb_frame_plan((uint64_t)300 << 20, U, MB_MAX_ORDER, o, 8, &covered), 3);
    assert_int_equal(o[0], 7);
    assert_int_equal(o[1], 4);
    assert_int_equal(o[2], 3);
    assert_int_equal(covered, (uint64_t)304 << 20);
    /* 1 GiB: one frame; 64 MiB: one frame. */
    assert_int_equal(mb_frame_plan((uint64_t)1 << 30, U, MB_MAX_ORDER, o, 8, &covered), 1);
    assert_int_equal(o[0], 9);
    assert_int_equal(mb_frame_plan((uint64_t)64 << 20, U, MB_MAX_ORDER, o, 8, &covered), 1);
    assert_int_equal(o[0], 5);
    assert_int_equal(mb_frame_order((uint64_t)64 << 20, U), 5);
    assert_int_equal(mb_frame_order(U * 3, U), -1);
    assert_int_equal(mb_frame_order(U << 10, U), -1);
    assert_int_equal(mb_frame_order(U + 1, U), -1);
    srand(7);
    for (int t = 0; t < 20000; t++) {
        uint64_t bytes = 1 + ((uint64_t)rand() << 16 ^ (uint64_t)rand()) % ((uint64_t)600 << 30);
        if (t % 3 == 0)
            bytes %= (uint64_t)64 << 20;
        bytes += bytes == 0;
        /* A quarter of the plans are capped (the heap's 32 MiB frames). */
        unsigned m = t % 4 == 0 ? (unsigned)(rand() % (MB_MAX_ORDER + 1)) : MB_MAX_ORDER;
        if ((bytes >> (21 + m)) >= sizeof(o) - 16)
            m = MB_MAX_ORDER;
        size_t n = mb_frame_plan(bytes, U, m, o, sizeof(o), &covered);
        assert_true(n >= 1 && n <= sizeof(o));
        uint64_t units = (bytes + U - 1) / U, sum = 0;
        for (size_t i = 0; i < n; i++) {
            assert_true(o[i] <= m);
            if (i)
                assert_true(o[i] <= o[i - 1]);
            sum += U << o[i];
        }
        assert_true(sum == covered && covered >= bytes);
        if (units < 64)
            assert_true(covered == units * U);
        else
            assert_true((covered - units * U) * 31 < units * U);
        if (units < 512 && m == MB_MAX_ORDER)
            assert_true(n <= 6);
        /* A random subset plans to itself. */
        uint8_t sub[2048];
        size_t k = 0;
        uint64_t sub_bytes = 0;
        for (size_t i = 0; i < n; i++)
            if (rand() % 2) {
                sub[k++] = o[i];
                sub_bytes += U << o[i];
            }
        if (k == 0)
            continue;
        assert_int_equal(mb_frame_plan(sub_bytes, U, m, o2, sizeof(o2), &covered2), k);
        assert_true(covered2 == sub_bytes);
        assert_memory_equal(o2, sub, k);
        /* The exact plan: whole units, largest first, 2^m-unit frames and
         * then distinct orders below m; never more than the plan holds;
         * a random subset plans to itself. */
        n = mb_frame_plan_exact(bytes, U, m, o, sizeof(o), &covered2);
        assert_true(n >= 1 && n <= sizeof(o) && covered2 == units * U && covered2 <= covered);
        sum = 0;
        for (size_t i = 0; i < n; i++) {
            assert_true(o[i] <= m && (!i || o[i] < o[i - 1] || o[i] == m));
            sum += U << o[i];
        }
        assert_true(sum == covered2);
        assert_true(n <= (size_t)(units >> m) + m);
        k = 0;
        sub_bytes = 0;
        for (size_t i = 0; i < n; i++)
            if (rand() % 2) {
                sub[k++] = o[i];
                sub_bytes += U << o[i];
            }
        if (k) {
            assert_int_equal(mb_frame_plan_exact(sub_bytes, U, m, o2, sizeof(o2), &covered2), k);
            assert_memory_equal(o2, sub, k);
        }
    }
    uint64_t exact;
    /* 398 units: the plan takes 400 (256 + 128 + 16), the exact plan 256 +
     * 128 + 8 + 4 + 2. */
    assert_int_equal(mb_frame_plan(398 * U, U, MB_MAX_ORDER, o, 8, &covered), 3);
    assert_int_equal(covered, 400 * U);
    assert_int_equal(mb_frame_plan_exact(398 * U, U, MB_MAX_ORDER, o, 8, &exact), 5);
    assert_int_equal(exact, 398 * U);
    assert_int_equal(o[0], 8);
    assert_int_equal(o[4], 1);
    assert_int_equal(mb_frame_plan_exact(0, U, MB_MAX_ORDER, o, 8, &exact), 0);
}

/* Grants of frames of mixed orders, by the plan, against a small budget:
 * a grant succeeds exactly when granted + planned bytes fit the budget
 * (free frames of other orders are re-created to make room), gets the
 * planned orders, and the books balance in frames and bytes throughout. */
/* A warm plan takes only free frames this uid may have, largest first,
 * holds at least the bytes asked and at most the room, at most max_n
 * frames; granting it creates nothing. When the free frames cannot, it
 * says 0 and changes nothing. */
static void warm_plan_takes_free_frames_only(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 256 * FB), 0);
    /* uid 7 holds then returns frames of orders 3, 2, 2, 0 (17 units). */
    const uint8_t give[4] = { 3, 2, 2, 0 };
    uint32_t ids[8];
    assert_int_equal(frame_pool_grant_orders(&p, give, 4, 1, 7, 1, ids), 0);
    assert_int_equal(frame_pool_return(&p, ids, 4, 1), 0);
    uint64_t created = p.path_created;
    uint8_t o[8];
    /* 16 units (one order-4 frame planned): 8 + 4 + 4. */
    uint32_t n = frame_pool_warm_plan(&p, 7, 16 * FB, 16 * FB, MB_MAX_ORDER, 8, o);
    assert_int_equal(n, 3);
    assert_int_equal(o[0], 3);
    assert_int_equal(o[1], 2);
    assert_int_equal(o[2], 2);
    /* Another uid may not have them (nothing fresh is free). */
    assert_int_equal(frame_pool_warm_plan(&p, 8, 16 * FB, 16 * FB, MB_MAX_ORDER, 8, o), 0);
    /* More than the free frames hold, or in fewer frames than it takes, or
     * above max_order: 0. */
    assert_int_equal(frame_pool_warm_plan(&p, 7, 17 * FB + 1, 32 * FB, MB_MAX_ORDER, 8, o), 0);
    assert_int_equal(frame_pool_warm_plan(&p, 7, 16 * FB, 16 * FB, MB_MAX_ORDER, 2, o), 0);
    assert_int_equal(frame_pool_warm_plan(&p, 7, 8 * FB, 8 * FB, 2, 8, o), 2);   /* 4 + 4 */
    /* 3 units within a room of 4: one order-2 frame holds them. */
    n = frame_pool_warm_plan(&p, 7, 3 * FB, 4 * FB, MB_MAX_ORDER, 8, o);
    assert_int_equal(n, 1);
    assert_int_equal(o[0], 2);
    /* 13 units within 13: 8 + 4 + 1. */
    n = frame_pool_warm_plan(&p, 7, 13 * FB, 13 * FB, MB_MAX_ORDER, 8, o);
    assert_int_equal(n, 3);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += FB << o[i];
    assert_int_equal(sum, 13 * FB);
    /* Granting a warm plan creates no frame. */
    assert_int_equal(frame_pool_warm_plan(&p, 7, 15 * FB, 15 * FB, MB_MAX_ORDER, 8, o), 0);  /* 8+4+1, 2 short */
    n = frame_pool_warm_plan(&p, 7, 17 * FB, 17 * FB, MB_MAX_ORDER, 8, o);
    assert_int_equal(n, 4);
    assert_int_equal(frame_pool_grant_orders(&p, o, n, 2, 7, 1, ids), 0);
    assert_int_equal(p.path_created, created);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    b->ops->close(b);
}

/* Open the host backend as a device of `bytes` (0: the host's memory). */
static mb_backend *host_device(uint64_t bytes)
{
    char v[32];
    snprintf(v, sizeof(v), "%llu", (unsigned long long)bytes);
    if (bytes)
        setenv("MOONBRIGHT_HOST_MEMORY", v, 1);
    mb_backend *b = NULL;
    int rc = mb_backend_host_open(0, &b);
    unsetenv("MOONBRIGHT_HOST_MEMORY");
    assert_int_equal(rc, 0);
    if (bytes)
        assert_int_equal(b->total_bytes, bytes);
    return b;
}

/* Random grants of mixed orders for uid 0 under a budget, on a device of
 * `device` bytes (0: unbounded): a grant succeeds exactly when what is
 * granted plus it fits the budget and the device, since free frames of
 * other orders are re-created (released for room, in the budget or on the
 * device). */
static void mixed_orders_run(uint64_t budget, uint64_t device)
{
    mb_backend *b = host_device(device);
    const uint64_t fits = device && device < budget ? device : budget;
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, budget), 0);
    enum { S = 3, MAXH = 256 };
    uint32_t held[S][MAXH];
    uint32_t nheld[S] = { 0 };
    uint64_t model_bytes = 0;
    srand(11);
    for (int step = 0; step < 6000; step++) {
        int s = rand() % S;
        int op = rand() % 10;
        if (op < 5) {
            uint64_t bytes = 1 + (uint64_t)rand() % (40 * FB);
            uint8_t orders[16];
            uint64_t covered;
            uint32_t n = (uint32_t)mb_frame_plan(bytes, FB, MB_MAX_ORDER, orders, 16, &covered);
            uint32_t ids[16];
            uint32_t before = p.n_granted;
            int rc = frame_pool_grant_orders(&p, orders, n, (uint64_t)s + 1, 0, 1, ids);
            if (model_bytes + covered <= fits && nheld[s] + n <= MAXH) {
                assert_int_equal(rc, 0);
                for (uint32_t i = 0; i < n; i++) {
                    assert_int_equal(frame_pool_bytes(&p, ids[i]), FB << orders[i]);
                    held[s][nheld[s]++] = ids[i];
                }
                model_bytes += covered;
            } else if (model_bytes + covered > fits) {
                assert_int_equal(rc, MB_ENOMEM);
                assert_int_equal(p.n_granted, before);   /* all or nothing */
            } else if (rc == 0) {
                frame_pool_return(&p, ids, n, (uint64_t)s + 1);
            }
        } else if (op < 9 && nheld[s]) {
            uint32_t k = (uint32_t)rand() % nheld[s];
            uint32_t id = held[s][k];
            uint64_t fbytes = frame_pool_bytes(&p, id);
            assert_int_equal(frame_pool_return(&p, &id, 1, (uint64_t)s + 1), 0);
            model_bytes -= fbytes;
            held[s][k] = held[s][--nheld[s]];
        } else {
            uint64_t bytes;
            assert_int_equal(frame_pool_reclaim(&p, (uint64_t)s + 1, &bytes), nheld[s]);
            model_bytes -= bytes;
            nheld[s] = 0;
        }
        assert_true(frame_pool_is_valid(&p));
        assert_true(p.bytes_granted == model_bytes);
        assert_true(p.bytes_total <= fits);
    }
    assert_true(p.recreated > 0);   /* the mix did change by re-creation */
    if (device && device < budget)
        assert_true(p.released_device_full > 0);   /* the device, not the budget, was full */
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

static void mixed_orders_recreate_within_budget(void **state)
{
    mixed_orders_run(96 * FB, 0);
}

/* The device full below the budget (other processes' memory on the GPU,
 * or a budget above the device's): free frames make room on the device as
 * they do in the budget. */
static void mixed_orders_recreate_on_a_full_device(void **state)
{
    mixed_orders_run(96 * FB, 40 * FB);
}

/* Memory the pool does not hold (another process's) fills the device:
 * making frames would release free ones first, though the pool's own
 * frames leave room on the device by its size. */
static void device_filled_by_others(void **state)
{
    (void)state;
    mb_backend *b = host_device(16 * FB);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    uint64_t free_now = 0;
    assert_int_equal(b->ops->mem_free(b, &free_now), 0);
    assert_int_equal(free_now, 16 * FB);
    assert_false(frame_pool_would_release(&p, 8 * FB));
    struct mb_mem other;
    assert_int_equal(b->ops->create(b, 12 * FB, &other), 0);
    assert_int_equal(b->ops->mem_free(b, &free_now), 0);
    assert_int_equal(free_now, 4 * FB);
    assert_false(frame_pool_would_release(&p, 4 * FB));
    assert_true(frame_pool_would_release(&p, 5 * FB));
    b->ops->release(b, &other);
    assert_false(frame_pool_would_release(&p, 8 * FB));
    frame_pool_destroy(&p);
    mb_backend_close(b);
    /* The host's own memory: its free bytes are not the backend's to say. */
    b = host_device(0);
    assert_int_equal(b->ops->mem_free(b, &free_now), MB_ENOENT);
    mb_backend_close(b);
}

/* A device full below the budget, of frames held and another process's
 * memory: a grant whose frame would not fit even if every free frame it
 * may release went back is refused at once, and the free frames stay for
 * the grants they can serve; one that releasing makes room for is made. */
static void full_device_keeps_free_frames(void **state)
{
    (void)state;
    mb_backend *b = host_device(16 * FB);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    uint32_t ids[12];
    assert_int_equal(frame_pool_grant(&p, 12, 1, 0, 1, ids), 0);
    assert_int_equal(frame_pool_return(&p, ids, 3, 1), 0);   /* 3 free frames of uid 0 */
    struct mb_mem other;
    assert_int_equal(b->ops->create(b, 3 * FB, &other), 0);  /* the device: 1 frame's room left */
    uint8_t o3 = 3, o2 = 2;
    uint32_t id;
    assert_int_equal(frame_pool_grant_orders(&p, &o3, 1, 1, 0, 1, &id), MB_ENOMEM);   /* 8: 3 + 1 short */
    assert_int_equal(p.n_free, 3);
    assert_int_equal(p.released_device_full, 0);
    assert_int_equal(p.bytes_granted, 9 * FB);
    assert_true(frame_pool_is_valid(&p));
    assert_int_equal(frame_pool_grant_orders(&p, &o2, 1, 1, 0, 1, &id), 0);   /* 4: 3 + 1 */
    assert_int_equal(frame_pool_bytes(&p, id), 4 * FB);
    assert_int_equal(p.n_free, 0);
    assert_int_equal(p.released_device_full, 3);
    assert_int_equal(p.bytes_granted, 13 * FB);
    assert_true(frame_pool_is_valid(&p));
    b->ops->release(b, &other);
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

static uint64_t device_free(mb_backend *b)
{
    uint64_t v = 0;
    assert_int_equal(b->ops->mem_free(b, &v), 0);
    return v;
}

/* Free frames leave the device its headroom: a grant may use it, but the
 * tick then releases free frames (never granted ones) until the device's
 * free memory is back to it, and the reserve's workers make no frame into
 * it. Without the headroom they fill the device (checked last). */
static void free_frames_leave_headroom(void **state)
{
    (void)state;
    mb_backend *b = host_device(16 * FB);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    p.headroom = 4 * FB;
    uint32_t ids[14];
    assert_int_equal(frame_pool_grant(&p, 14, 1, 1000, 1, ids), 0);   /* into the headroom */
    assert_int_equal(device_free(b), 2 * FB);
    frame_pool_tick(&p, mb_now_ms());
    assert_int_equal(p.released_room, 0);   /* nothing free to release */
    assert_int_equal(p.n_total, 14);
    assert_int_equal(frame_pool_return(&p, ids, 10, 1), 0);
    frame_pool_tick(&p, mb_now_ms());
    assert_int_equal(p.released_room, 2);   /* 2 frames short of 4 free */
    assert_int_equal(device_free(b), 4 * FB);
    assert_int_equal(p.n_granted, 4);
    assert_int_equal(p.n_free, 8);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_tick(&p, mb_now_ms());
    assert_int_equal(p.released_room, 2);   /* back to it: no more */

    /* The workers want 12 fresh frames; the device has room for 2 above
     * a 2-frame headroom. */
    p.headroom = 2 * FB;
    start_workers(&p, 12 * FB);
    for (int i = 0; i < 500 && device_free(b) > 2 * FB; i++)
        usleep(10000);
    usleep(200000);   /* time to overfill, if they would */
    frame_pool_adopt(&p);
    assert_int_equal(device_free(b), 2 * FB);
    assert_int_equal(p.n_total, 14);
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);

    /* No headroom: the same workers fill the device. */
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    p.headroom = 0;
    start_workers(&p, 12 * FB);
    for (int i = 0; i < 500 && device_free(b) > 4 * FB; i++)
        usleep(10000);
    assert_int_equal(device_free(b), 4 * FB);   /* 12 fresh of 16 */
    end_pool(&p);
    mb_backend_close(b);
}

/* A frame that ends leaves no re-export behind: a worker would otherwise
 * export a released handle, or one whose value came back for a frame made
 * since (on the host a memfd's number). The workers are held off (as
 * during a grant's driver calls) so that the entry waits in the queue. */
static void ended_frame_drops_its_exports(void **state)
{
    (void)state;
    mb_backend *b = host_device(FB);   /* room for one frame */
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    p.unexport = p.export_ahead = true;
    start_workers(&p, 0);
    uint32_t id, other;
    assert_int_equal(frame_pool_grant(&p, 1, 1, 0, 1, &id), 0);
    frame_pool_passed(&p, frame_pool_get(&p, id));   /* its descriptor went with the grant */
    frame_pool_path_busy(&p, 1);
    assert_int_equal(frame_pool_return(&p, &id, 1, 1), 0);   /* free: queued to export again */
    pthread_mutex_lock(&p.lock);
    uint32_t queued = p.n_rex_todo;
    pthread_mutex_unlock(&p.lock);
    /* Another uid's grant on the full device: uid 0's free frame ends. */
    uint64_t ended = p.released_isolation + p.released_device_full;
    assert_int_equal(frame_pool_grant(&p, 1, 2, 1000, 1, &other), 0);
    pthread_mutex_lock(&p.lock);
    uint32_t left = p.n_rex_todo + p.n_rex_done;
    pthread_mutex_unlock(&p.lock);
    frame_pool_path_busy(&p, -1);
    assert_int_equal(queued, 1);
    assert_true(p.released_isolation + p.released_device_full > ended);
    assert_int_equal(left, 0);
    frame_pool_adopt(&p);
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* A grant takes a free frame that still holds its descriptor before one
 * whose descriptor went with its last grant (which the grant would export
 * again on its path), however recently that one came back. */
static void grants_take_exported_frames_first(void **state)
{
    (void)state;
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    p.unexport = true;
    uint32_t ids[2], id;
    assert_int_equal(frame_pool_grant(&p, 2, 1, 0, 1, ids), 0);
    frame_pool_passed(&p, frame_pool_get(&p, ids[0]));   /* it went with the grant */
    assert_int_equal(frame_pool_return(&p, &ids[1], 1, 1), 0);
    assert_int_equal(frame_pool_return(&p, &ids[0], 1, 1), 0);   /* the latest returned */
    assert_int_equal(frame_pool_exported_held(&p), 1);
    assert_true(frame_pool_is_valid(&p));
    assert_int_equal(frame_pool_grant(&p, 1, 1, 0, 1, &id), 0);
    assert_int_equal(id, ids[1]);
    assert_true(frame_pool_get(&p, id)->mem.fd >= 0);
    assert_int_equal(frame_pool_grant(&p, 1, 1, 0, 1, &id), 0);
    assert_int_equal(id, ids[0]);   /* then the other */
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* Room for a grant is made by releasing a free frame without a descriptor
 * before one that holds its own (which a grant could take as it is). */
static void room_made_from_frames_without_descriptors(void **state)
{
    (void)state;
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 3 * FB), 0);
    p.unexport = true;
    uint32_t ids[2], big;
    assert_int_equal(frame_pool_grant(&p, 2, 1, 0, 1, ids), 0);
    frame_pool_passed(&p, frame_pool_get(&p, ids[1]));   /* it went with the grant */
    assert_int_equal(frame_pool_return(&p, ids, 2, 1), 0);
    uint8_t order[1] = { 1 };   /* 2 units: one free unit must go */
    assert_int_equal(frame_pool_grant_orders(&p, order, 1, 1, 0, 1, &big), 0);
    assert_null(frame_pool_get(&p, ids[1]));
    assert_non_null(frame_pool_get(&p, ids[0]));
    assert_true(frame_pool_get(&p, ids[0])->mem.fd >= 0);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* Poll (adopting what the workers did) until `exported` free frames hold
 * descriptors and `todo` wait to be exported; false after 10 s. */
static bool wait_exports(struct frame_pool *p, uint32_t exported, uint32_t todo)
{
    for (int i = 0; i < 10000; i++) {
        frame_pool_adopt(p);
        pthread_mutex_lock(&p->lock);
        bool done = frame_pool_exported_held(p) == exported && p->n_rex_todo == todo &&
                    p->n_rex_done == 0 && p->n_rex_busy == 0;
        pthread_mutex_unlock(&p->lock);
        if (done)
            return true;
        usleep(1000);
    }
    fprintf(stderr, "wait_exports: %u exported, %u to export, %u done, %u busy\n",
            frame_pool_exported_held(p), p->n_rex_todo, p->n_rex_done, p->n_rex_busy);
    return false;
}

/* Past the cap on free frames' descriptors, returned frames wait for their
 * export rather than being left to the grants that take them: each grant
 * of a frame that has a descriptor lets the workers export the next. The
 * budget holds exactly the granted frames, so the reserve makes none. */
static void exports_wait_at_the_cap(void **state)
{
    (void)state;
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 4 * FB), 0);
    p.unexport = p.export_ahead = true;
    p.free_descriptors_max = p.exported_held_min = 2;
    p.exported_order_min = 0;   /* (each order's floor: the next test) */
    start_workers(&p, 0);
    uint32_t ids[4], id;
    assert_int_equal(frame_pool_grant(&p, 4, 1, 0, 1, ids), 0);
    for (int i = 0; i < 4; i++)
        frame_pool_passed(&p, frame_pool_get(&p, ids[i]));
    assert_int_equal(frame_pool_return(&p, ids, 4, 1), 0);   /* four to export again */
    assert_true(wait_exports(&p, 2, 2));
    uint64_t ahead = p.exported_ahead;
    assert_int_equal(frame_pool_grant(&p, 1, 1, 0, 1, &id), 0);
    assert_true(frame_pool_get(&p, id)->mem.fd >= 0);   /* exported ahead */
    assert_true(wait_exports(&p, 2, 1));   /* the next one, exported in its place */
    assert_int_equal(p.exported_ahead, ahead + 1);
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* Each order's floor comes first within the room: the workers export a
 * returned frame of an order that holds fewer descriptors than its floor,
 * though frames of another order came back later, and a grant of that
 * order then finds one with its descriptor. */
static void exports_share_room_among_orders(void **state)
{
    (void)state;
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 6 * FB), 0);   /* the granted frames' */
    p.unexport = p.export_ahead = true;
    p.free_descriptors_max = p.exported_held_min = 2;
    p.exported_order_min = 1;
    start_workers(&p, 0);
    uint32_t ids[4], two, id;
    uint8_t order = 1;
    assert_int_equal(frame_pool_grant_orders(&p, &order, 1, 1, 0, 1, &two), 0);
    assert_int_equal(frame_pool_grant(&p, 4, 1, 0, 1, ids), 0);
    frame_pool_passed(&p, frame_pool_get(&p, two));
    for (int i = 0; i < 4; i++)
        frame_pool_passed(&p, frame_pool_get(&p, ids[i]));
    assert_int_equal(frame_pool_return(&p, &two, 1, 1), 0);
    assert_int_equal(frame_pool_return(&p, ids, 4, 1), 0);   /* later, order 0 */
    assert_true(wait_exports(&p, 2, 3));
    assert_int_equal(p.n_exported_held_order[0], 1);
    assert_int_equal(p.n_exported_held_order[1], 1);
    assert_int_equal(frame_pool_grant_orders(&p, &order, 1, 1, 0, 1, &id), 0);
    assert_int_equal(id, two);
    assert_true(frame_pool_get(&p, id)->mem.fd >= 0);   /* exported ahead */
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* Returned frames that hold descriptors past the cap (here: they came back
 * with them; in a daemon: fresh frames adopted after they were exported)
 * give the excess up, from the order that holds the most, and wait to be
 * exported again. */
static void excess_descriptors_given_up(void **state)
{
    (void)state;
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    /* The budget holds exactly the granted frames: the reserve makes none
     * (fresh frames would take the room, and descriptors would go). */
    assert_int_equal(frame_pool_init(&p, b, FB, 6 * FB), 0);
    p.unexport = p.export_ahead = true;
    p.exported_held_min = p.exported_order_min = 0;
    start_workers(&p, 0);
    uint32_t ids[4], two;
    uint8_t order = 1;
    assert_int_equal(frame_pool_grant(&p, 4, 1, 0, 1, ids), 0);
    assert_int_equal(frame_pool_grant_orders(&p, &order, 1, 1, 0, 1, &two), 0);
    assert_int_equal(p.n_granted_fd, 5);   /* (under the default cap they keep them) */
    p.free_descriptors_max = 3;
    assert_int_equal(frame_pool_return(&p, ids, 4, 1), 0);   /* with their descriptors */
    assert_int_equal(frame_pool_return(&p, &two, 1, 1), 0);
    assert_int_equal(frame_pool_exported_held(&p), 5);
    assert_true(wait_exports(&p, 3, 2));   /* two gave theirs up, both of order 0 */
    assert_int_equal(p.n_exported_held_order[0], 2);
    assert_int_equal(p.n_exported_held_order[1], 1);
    assert_int_equal(p.exports_dropped, 2);
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* Granted frames passed on keep their descriptor while the daemon's are
 * within the cap, and, returned, are granted again with no export; past
 * the cap a frame passed on lets go of it, and fresh frames adopted later
 * take the granted frames' descriptors before the free ones'. */
static void granted_frames_keep_descriptors_within_the_cap(void **state)
{
    (void)state;
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    /* The budget holds the four granted frames: the reserve makes none
     * until it is raised. */
    assert_int_equal(frame_pool_init(&p, b, FB, 4 * FB), 0);
    p.unexport = p.export_ahead = p.keep_granted = true;
    p.free_descriptors_max = 3;
    p.exported_held_min = p.exported_order_min = 0;
    start_workers(&p, 0);
    uint32_t ids[4];
    assert_int_equal(frame_pool_grant(&p, 4, 1, 0, 1, ids), 0);
    for (int i = 0; i < 4; i++)
        frame_pool_passed(&p, frame_pool_get(&p, ids[i]));   /* as send_fds does */
    /* Four held one: the first to be passed on went down to the cap. */
    assert_int_equal(p.n_granted_fd, 3);
    assert_true(frame_pool_get(&p, ids[0])->mem.fd < 0);
    for (int i = 1; i < 4; i++)
        assert_true(frame_pool_get(&p, ids[i])->mem.fd >= 0);
    assert_true(frame_pool_is_valid(&p));
    /* Returned, the three are granted again as they are. */
    assert_int_equal(frame_pool_return(&p, &ids[1], 3, 1), 0);
    assert_int_equal(frame_pool_exported_held(&p), 3);
    assert_int_equal(p.n_granted_fd, 0);
    uint64_t reexports = p.reexports;
    uint32_t again[3];
    assert_int_equal(frame_pool_grant(&p, 3, 1, 0, 1, again), 0);
    for (int i = 0; i < 3; i++)
        assert_true(frame_pool_get(&p, again[i])->mem.fd >= 0);
    assert_int_equal(p.reexports, reexports);
    assert_int_equal(p.n_granted_fd, 3);
    /* A fresh frame made ahead (room for one more) takes a granted frame's
     * descriptor. */
    uint64_t dropped = p.exports_dropped;
    pthread_mutex_lock(&p.lock);
    p.budget_bytes = 5 * FB;
    p.reserve_bytes = FB;
    pthread_cond_broadcast(&p.wake);
    pthread_mutex_unlock(&p.lock);
    for (int i = 0; i < 10000 && p.n_free == 0; i++) {
        usleep(1000);
        frame_pool_adopt(&p);
    }
    assert_int_equal(p.n_free, 1);
    assert_int_equal(p.n_granted_fd, 2);
    assert_int_equal(p.exports_dropped, dropped + 1);
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* A grant the full device cannot take fails whole and leaves nothing
 * behind (and the pool says a new frame would release free ones first);
 * once frames are free, a grant of another order releases as many bytes
 * of them as its frame needs, and no more. */
static void device_full_below_budget(void **state)
{
    mb_backend *b = host_device(16 * FB);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    uint32_t ids[16], one;
    assert_false(frame_pool_would_release(&p, 16 * FB));
    assert_true(frame_pool_would_release(&p, 17 * FB));   /* past the device */
    assert_true(frame_pool_would_release(&p, 65 * FB));   /* past the budget */
    assert_int_equal(frame_pool_grant(&p, 16, 1, 0, 1, ids), 0);
    assert_true(frame_pool_would_release(&p, FB));        /* the device full of its frames */
    /* Its size not known: its free memory, asked of the backend, says so. */
    b->total_bytes = 0;
    assert_true(frame_pool_would_release(&p, FB));
    /* Neither known: a make that found the device full says so. */
    const struct mb_backend_ops *had = b->ops;
    struct mb_backend_ops blind = *had;
    blind.mem_free = NULL;
    b->ops = &blind;
    assert_false(frame_pool_would_release(&p, FB));
    assert_int_equal(frame_pool_grant(&p, 1, 2, 0, 1, &one), MB_ENOMEM);
    assert_true(frame_pool_would_release(&p, FB));
    b->ops = had;
    b->total_bytes = 16 * FB;
    assert_int_equal(p.n_total, 16);
    assert_int_equal(p.n_granted, 16);
    assert_true(frame_pool_is_valid(&p));
    assert_int_equal(frame_pool_return(&p, ids, 16, 1), 0);
    uint8_t order = 3;
    uint32_t big;
    assert_int_equal(frame_pool_grant_orders(&p, &order, 1, 2, 0, 1, &big), 0);
    assert_int_equal(frame_pool_bytes(&p, big), 8 * FB);
    assert_int_equal(p.released_device_full, 8);
    assert_int_equal(p.n_free, 8);   /* the other eight stay cached */
    assert_int_equal(p.bytes_total, 16 * FB);
    /* Another uid: this uid's free frames can never serve it; they go. */
    assert_int_equal(frame_pool_grant_orders(&p, &order, 1, 3, 1000, 1, &one), 0);
    assert_int_equal(p.n_free, 0);
    assert_int_equal(p.bytes_total, 16 * FB);
    assert_int_equal(frame_pool_grant_orders(&p, &order, 1, 4, 0, 1, ids), MB_ENOMEM);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* With the reserve's workers running, ask for `n` spares of order k and
 * wait until the workers, refused by the full device, have said what they
 * lack of it (both may try; 2 s at most). Returns the bytes wanted. */
static uint64_t spares_refused(struct frame_pool *p, unsigned k, uint8_t n, uint64_t expect)
{
    pthread_mutex_lock(&p->lock);
    p->spare[k] = n;   /* as after grants that made such frames on their path */
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    uint64_t wanted = 0;
    for (int i = 0; i < 400 && wanted < expect; i++) {
        usleep(5000);
        pthread_mutex_lock(&p->lock);
        wanted = p->room_wanted[k];
        pthread_mutex_unlock(&p->lock);
    }
    return wanted;
}

/* The device full below the budget with frames an earlier session
 * returned: a reserve worker that cannot make a spare the grants want gets
 * room from the next tick, which releases returned frames idle for a tick
 * (about the bytes of the spares missing, none of their order); the next
 * grants of that order then take the spares and make nothing on their
 * path. */
static void reserve_makes_room_on_a_full_device(void **state)
{
    mb_backend *b = host_device(16 * FB);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    uint8_t big[2] = { 3, 3 }, mid = 2;
    uint32_t ids[2], id;
    p.spare_share = 0;   /* spares of any size (this device is too small for the cap) */
    assert_int_equal(frame_pool_grant_orders(&p, big, 2, 1, 0, 1, ids), 0);
    assert_int_equal(frame_pool_return(&p, ids, 2, 1), 0);   /* the device full of free frames */
    start_workers(&p, 0);
    assert_int_equal(spares_refused(&p, 2, 2, 8 * FB), 8 * FB);   /* the workers could not make them */
    assert_int_equal(p.n_free, 2);
    frame_pool_tick(&p, mb_now_ms() + 1000);   /* both returned frames idle past a tick */
    assert_int_equal(p.released_device_full, 1);   /* one 8-unit frame covers both */
    assert_int_equal(p.n_free, 1);
    assert_int_equal(wait_ready(&p, 2), 2);
    /* A worker released its handle (off the main thread), before making the spares. */
    pthread_mutex_lock(&p.lock);
    uint64_t by_workers = p.released_by_workers, queued = p.n_release_q;
    pthread_mutex_unlock(&p.lock);
    assert_int_equal(by_workers, 1);
    assert_int_equal(queued, 0);
    uint64_t made = p.path_created;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(frame_pool_grant_orders(&p, &mid, 1, 2, 0, 1, &id), 0);
        assert_int_equal(frame_pool_bytes(&p, id), 4 * FB);
    }
    assert_int_equal(p.path_created, made);   /* the spares, not frames made on their path */
    assert_true(p.bytes_total <= 16 * FB);
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* Spares cost device memory in proportion to their size: the workers keep
 * spares only as far as they hold, all orders together, a sixteenth
 * (SPARE_SHARE) of the bytes granted. One 8-unit frame made on a grant's
 * path while 8 units are granted leaves no spare; with 136 units granted,
 * one is made; 2-unit spares then wait for more granted, and as many are
 * made as fit. */
static void spares_follow_the_bytes_granted(void **state)
{
    (void)state;
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 512 * FB), 0);
    assert_int_equal(p.spare_share, 16);
    start_workers(&p, 0);
    uint8_t big = 3;
    uint32_t id, ids[128];
    assert_int_equal(frame_pool_grant_orders(&p, &big, 1, 1, 0, 1, &id), 0);
    assert_int_equal(p.path_created, 1);
    pthread_mutex_lock(&p.lock);
    uint8_t wanted = p.spare[3];
    pthread_mutex_unlock(&p.lock);
    assert_int_equal(wanted, 1);   /* demand seen ... */
    usleep(200000);
    frame_pool_adopt(&p);
    assert_int_equal(p.n_free_order[3], 0);   /* ... but no 8-unit spare for 8 units granted */
    assert_int_equal(frame_pool_grant(&p, 128, 1, 0, 1, ids), 0);
    frame_pool_tick(&p, mb_now_ms());   /* 136 units granted: room for one */
    for (int i = 0; i < 400 && p.n_free_order[3] == 0; i++) {
        usleep(5000);
        frame_pool_adopt(&p);
    }
    assert_int_equal(p.n_free_order[3], 1);
    usleep(100000);
    frame_pool_adopt(&p);
    assert_int_equal(p.n_free_order[3], 1);   /* one, not the MB_SPARES_MAX */
    pthread_mutex_lock(&p.lock);
    p.spare[1] = 2;   /* as after a grant that made two 2-unit frames on its path */
    pthread_cond_broadcast(&p.wake);
    pthread_mutex_unlock(&p.lock);
    usleep(200000);
    frame_pool_adopt(&p);
    assert_int_equal(p.n_free_order[1], 0);   /* 8 + 2 units pass 136 / 16 */
    assert_int_equal(frame_pool_grant(&p, 32, 1, 0, 1, ids), 0);
    frame_pool_tick(&p, mb_now_ms());   /* 168 units granted: 10.5 for spares */
    for (int i = 0; i < 400 && p.n_free_order[1] == 0; i++) {
        usleep(5000);
        frame_pool_adopt(&p);
    }
    usleep(100000);
    frame_pool_adopt(&p);
    assert_int_equal(p.n_free_order[1], 1);   /* one of the two fits */
    assert_int_equal(p.n_free_order[3], 1);
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* Room for the reserve goes by release_order's rule: the smallest returned
 * frame that covers what the reserve lacks, not the largest. */
static void reserve_room_takes_the_smallest_cover(void **state)
{
    mb_backend *b = host_device(16 * FB);
    static struct frame_pool p;   /* (static: stop_workers may end it) */
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    uint8_t orders[3] = { 3, 2, 2 }, small = 1;
    uint32_t ids[3], id;
    p.spare_share = 0;   /* spares of any size (this device is too small for the cap) */
    assert_int_equal(frame_pool_grant_orders(&p, orders, 3, 1, 0, 1, ids), 0);
    assert_int_equal(frame_pool_return(&p, ids, 3, 1), 0);   /* 8 + 4 + 4 units: the device full */
    start_workers(&p, 0);
    assert_int_equal(spares_refused(&p, 1, 2, 4 * FB), 4 * FB);   /* two 2-unit spares */
    frame_pool_tick(&p, mb_now_ms() + 1000);
    assert_int_equal(p.released_device_full, 1);
    assert_int_equal(p.n_free, 2);
    assert_int_equal(p.n_free_order[3], 1);   /* the 8-unit frame stays */
    assert_int_equal(p.n_free_order[2], 1);
    assert_int_equal(wait_ready(&p, 2), 2);
    uint64_t made = p.path_created;
    assert_int_equal(frame_pool_grant_orders(&p, &small, 1, 2, 0, 1, &id), 0);
    assert_int_equal(p.path_created, made);
    assert_true(frame_pool_is_valid(&p));
    end_pool(&p);
    mb_backend_close(b);
}

/* A reported frame of a larger order is booked with its size after a
 * restart; a size that is no order is refused; a shared frame is booked
 * once for its owner and its importers, and leaves when all let go. */
static void adopted_large_frame_keeps_its_size(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    p.id_limit = 100;   /* as if a journal said ids below 100 were handed out */
    p.next_unused = 100;
    assert_int_equal(frame_pool_adopt_reported(&p, 5, 3 * FB, 1, 0, 1), MB_EINVAL);
    assert_int_equal(frame_pool_adopt_reported(&p, 5, 16 * FB, 1, 0, 1), 0);
    assert_int_equal(frame_pool_adopt_reported(&p, 5, 16 * FB, 2, 0, 1), MB_EPERM);
    assert_int_equal(p.bytes_granted, 16 * FB);
    assert_true(frame_pool_is_valid(&p));
    uint32_t id = 5;
    assert_int_equal(frame_pool_return(&p, &id, 1, 1), 0);
    assert_int_equal(p.bytes_total, 0);   /* its memory went with the process */
    assert_true(frame_pool_is_valid(&p));
    /* A shared frame: its importer reports first (a hold, no owner), then
     * its owner claims it; a second owner, or another size, is refused. */
    assert_int_equal(frame_pool_adopt_held(&p, 7, 4 * FB, 0), 0);
    assert_int_equal(frame_pool_adopt_held(&p, 7, 8 * FB, 0), MB_EPERM);
    assert_int_equal(p.bytes_granted, 4 * FB);
    assert_int_equal(frame_pool_adopt_reported(&p, 7, 4 * FB, 3, 0, 1), 0);
    assert_int_equal(frame_pool_adopt_reported(&p, 7, 4 * FB, 4, 0, 1), MB_EPERM);
    assert_true(frame_pool_is_valid(&p));
    id = 7;
    assert_int_equal(frame_pool_return(&p, &id, 1, 3), 0);   /* the owner lets go */
    assert_int_equal(p.bytes_granted, 4 * FB);                /* the importer holds it */
    frame_pool_drop_hold(&p, 7);
    assert_int_equal(p.bytes_total, 0);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* A frame ends: granted to uid 0, imported by uid 1 (tainted), returned.
 * Its id in *id. */
static void make_and_end_frame(struct frame_pool *p, uint64_t session, uint32_t *id)
{
    assert_int_equal(frame_pool_grant(p, 1, session, 0, 1, id), 0);
    frame_pool_note_importer(p, *id, 1);
    assert_int_equal(frame_pool_return(p, id, 1, session), 0);
}

/* Frames made and released over and over reuse the slots of ended frames,
 * oldest first: the table stays as large as the most frames held at once,
 * and an ended frame's id names nothing, not the frame in its slot now,
 * until the slot has been reused FRAME_GENS times. */
static void ended_slots_reused_under_new_ids(void **state)
{
    mb_backend *b;
    assert_int_equal(mb_backend_host_open(0, &b), 0);
    struct frame_pool p;
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    uint32_t held[4], first, id;
    assert_int_equal(frame_pool_grant(&p, 4, 1, 0, 1, held), 0);   /* stay held throughout */
    make_and_end_frame(&p, 2, &first);
    uint32_t slots = p.next_unused;
    assert_null(frame_pool_get(&p, first));
    assert_int_equal(frame_pool_bytes(&p, first), 0);
    for (uint32_t i = 0; i < FRAME_GENS - 2; i++) {
        make_and_end_frame(&p, 3 + i, &id);
        assert_int_not_equal(id, first);
        assert_int_equal(p.next_unused, slots);
    }
    /* The first id's slot holds a frame again; a return under the ended id
     * is refused and changes nothing. */
    assert_int_equal(frame_pool_grant(&p, 1, 9, 0, 1, &id), 0);
    assert_int_equal(frame_id_slot(id), frame_id_slot(first));
    assert_int_not_equal(id, first);
    assert_int_equal(frame_pool_return(&p, &first, 1, 2), MB_ENOENT);
    assert_int_equal(frame_pool_return(&p, &first, 1, 9), MB_ENOENT);
    assert_int_equal(p.n_granted, 5);
    for (int i = 0; i < 4; i++)
        assert_non_null(frame_pool_get(&p, held[i]));
    /* The listing names each frame by its id. */
    uint32_t listed = 0, n = 0;
    for (uint32_t slot = 1; slot < p.next_unused; slot++)
        if (frame_pool_at(&p, slot, &listed)) {
            assert_ptr_equal(frame_pool_at(&p, slot, &listed), frame_pool_get(&p, listed));
            n++;
        }
    assert_int_equal(n, 5);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
}

/* Across a restart the journal keeps the slots of frames the last
 * daemon's clients may report, under their ids; the slots of frames that
 * ended, or were free at a clean exit, are reused under new ids, so their
 * ids are refused; a slot kept for a report that never came is reused
 * after JOURNAL_KEEP_EPOCHS more restarts. */
static void journal_slots_across_restarts(void **state)
{
    char dir[] = "/tmp/mbtest-journal-XXXXXX", path[64];
    struct frame_pool p;
    mb_backend *b = journal_pool_backend(dir, path, sizeof(path));
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    assert_int_equal(frame_pool_open_journal(&p, path), 0);
    uint32_t kept, silent, ended, returned;
    assert_int_equal(frame_pool_grant(&p, 1, 1, 0, 1, &kept), 0);
    assert_int_equal(frame_pool_grant(&p, 1, 2, 0, 1, &silent), 0);
    make_and_end_frame(&p, 3, &ended);
    assert_int_equal(frame_pool_grant(&p, 1, 4, 0, 1, &returned), 0);
    assert_int_equal(frame_pool_return(&p, &returned, 1, 4), 0);
    frame_pool_forget_free(&p);   /* the daemon exits; its clients live on */
    frame_pool_destroy(&p);

    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    assert_int_equal(frame_pool_open_journal(&p, path), 0);
    assert_true(p.id_limit > frame_id_slot(ended));
    assert_int_equal(frame_pool_adopt_reported(&p, ended, FB, 7, 0, 1), MB_EINVAL);
    assert_int_equal(frame_pool_adopt_reported(&p, returned, FB, 7, 0, 1), MB_EINVAL);
    assert_int_equal(frame_pool_adopt_reported(&p, kept, FB, 7, 0, 1), 0);
    /* Frames made now take reusable slots, never the kept ones. */
    uint32_t ids[8];
    assert_int_equal(frame_pool_grant(&p, 8, 8, 0, 1, ids), 0);
    for (int i = 0; i < 8; i++) {
        assert_int_not_equal(frame_id_slot(ids[i]), frame_id_slot(kept));
        assert_int_not_equal(frame_id_slot(ids[i]), frame_id_slot(silent));
        assert_int_not_equal(ids[i], ended);
        assert_int_not_equal(ids[i], returned);
        assert_true(frame_id_slot(ids[i]) < p.id_limit);
    }
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    /* More restarts: `kept` is reported to each daemon, `silent` never. */
    for (uint32_t e = 0; e <= JOURNAL_KEEP_EPOCHS; e++) {
        assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
        assert_int_equal(frame_pool_open_journal(&p, path), 0);
        assert_int_equal(frame_pool_adopt_reported(&p, kept, FB, 9, 0, 1), 0);
        if (e == 0) {   /* still kept for its report: not taken by a new frame */
            assert_int_equal(frame_pool_grant(&p, 8, 8, 0, 1, ids), 0);
            for (int i = 0; i < 8; i++)
                assert_int_not_equal(frame_id_slot(ids[i]), frame_id_slot(silent));
        }
        assert_true(frame_pool_is_valid(&p));
        frame_pool_destroy(&p);
    }
    assert_int_equal(frame_pool_init(&p, b, FB, 64 * FB), 0);
    assert_int_equal(frame_pool_open_journal(&p, path), 0);
    assert_int_equal(frame_pool_adopt_reported(&p, silent, FB, 9, 0, 1), MB_EINVAL);
    assert_int_equal(frame_pool_adopt_reported(&p, kept, FB, 9, 0, 1), 0);
    assert_true(frame_pool_is_valid(&p));
    frame_pool_destroy(&p);
    mb_backend_close(b);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(random_books_balance, stop_workers),
        cmocka_unit_test_teardown(other_uid_gets_fresh_frames, stop_workers),
        cmocka_unit_test_teardown(idle_frames_released, stop_workers),
        cmocka_unit_test_teardown(duplicate_return_changes_nothing, stop_workers),
        cmocka_unit_test_teardown(scrubbed_between_tenants, stop_workers),
        cmocka_unit_test_teardown(descriptor_cap_is_an_error_not_a_crash, stop_workers),
        cmocka_unit_test_teardown(slots_made_ahead, stop_workers),
        cmocka_unit_test_teardown(journal_limit_moves_ahead, stop_workers),
        cmocka_unit_test_teardown(warm_reserve_fills_in_background, stop_workers),
        cmocka_unit_test_teardown(reserve_follows_grants_at_once, stop_workers),
        cmocka_unit_test_teardown(spares_grow_when_they_run_out, stop_workers),
        cmocka_unit_test_teardown(room_made_once_with_reserve_full, stop_workers),
        cmocka_unit_test_teardown(frame_plan_policy, stop_workers),
        cmocka_unit_test_teardown(mixed_orders_recreate_within_budget, stop_workers),
        cmocka_unit_test_teardown(mixed_orders_recreate_on_a_full_device, stop_workers),
        cmocka_unit_test_teardown(device_full_below_budget, stop_workers),
        cmocka_unit_test_teardown(device_filled_by_others, stop_workers),
        cmocka_unit_test(full_device_keeps_free_frames),
        cmocka_unit_test_teardown(workers_hold_off_during_a_grants_calls, stop_workers),
        cmocka_unit_test_teardown(ended_frame_drops_its_exports, stop_workers),
        cmocka_unit_test_teardown(grants_take_exported_frames_first, stop_workers),
        cmocka_unit_test_teardown(exports_wait_at_the_cap, stop_workers),
        cmocka_unit_test_teardown(exports_share_room_among_orders, stop_workers),
        cmocka_unit_test_teardown(excess_descriptors_given_up, stop_workers),
        cmocka_unit_test_teardown(granted_frames_keep_descriptors_within_the_cap, stop_workers),
        cmocka_unit_test_teardown(room_made_from_frames_without_descriptors, stop_workers),
        cmocka_unit_test_teardown(reserve_makes_room_on_a_full_device, stop_workers),
        cmocka_unit_test_teardown(reserve_room_takes_the_smallest_cover, stop_workers),
        cmocka_unit_test_teardown(warm_plan_takes_free_frames_only, stop_workers),
        cmocka_unit_test_teardown(adopted_large_frame_keeps_its_size, stop_workers),
        cmocka_unit_test_teardown(ended_slots_reused_under_new_ids, stop_workers),
        cmocka_unit_test_teardown(journal_slots_across_restarts, stop_workers),
        cmocka_unit_test_teardown(free_frames_leave_headroom, stop_workers),
        cmocka_unit_test_teardown(spares_follow_the_bytes_granted, stop_workers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
