/* frame_plan.c: the frame size policy: which handle sizes serve a request.
 *
 * Costs that decide it (FACTS.md, H200, CUDA 13): cuMemCreate ~20 us and
 * export ~0.6 ms per handle, map + set access ~30-40 us per handle, whatever
 * the handle's size; a handle maps whole or not at all; scrubbing costs bytes
 * (memset bandwidth). Bytes are cheap and handles are expensive, so large
 * requests are served by few, large handles.
 *
 * Orders. U = the daemon's frame unit (--frame-size, one 2 MiB granule by
 * default). A frame of order k holds U << k bytes, k = 0..9 (2 MiB .. 1 GiB
 * at the default unit). Nothing larger: 1 GiB already maps in one ~40 us
 * call, and bigger handles only make reclaim and scrubbing coarser.
 *
 * Request -> frames. A request of u units (rounded up) is rounded up to a
 * quantum q = clamp(2^floor(log2 u) / 32, 1, 512) units (waste < 3.2 %, none
 * below 64 units), and u' = roundup(u, q) is split into 512-unit frames plus
 * the binary digits of the remainder, largest first. Every frame of a plan is
 * a multiple of its q, and q grows with u, so the plan of any subset of a
 * plan's frames is exactly that subset. u' / q lies in [32, 64), so
 * below 512 units a request needs at most 6 handles (3 on average); above,
 * u / 512 + 6. Example: 300 MiB = 150 units -> q = 4, u' = 152 = 128 + 16 + 8:
 * three handles (256 + 32 + 16 MiB) instead of 150.
 * A capped plan (max_order m < 9) uses 2^m-unit frames where the rule above
 * uses larger ones (q at most 2^m); it keeps the subset property. The
 * client's heap arenas use 32 MiB frames so that a free block of an arena
 * holds whole frames it can give back for other requests (tiers.c).
 * Why 32: on the Azure conversation replay (mbbench replay, realloc), a
 * quantum of u/8 (at most 4 handles) held 1.062x the live bytes, u/32 held
 * 1.014x; mapping 1-2 more handles (~35 us each) is the price of keeping
 * rounding waste near the 3 % the product promises. Mapped largest first from offset 0 of a
 * reservation aligned to the largest, every frame lands on a multiple of its
 * own size. Quotas and statistics charge u' (the bytes the handles hold).
 *
 * Only requests that ask for large frames get them (Grant.large: libmbclient
 * asks for plain allocations above its pool's range, growable ranges'
 * tails and vspace page pools' extents); the slab and the pool's small
 * arenas use order-0 frames.
 *
 * Where the frames come from (daemon/frames.c). Free frames keep their order
 * in the daemon: a frame a client returns goes back to its order's free list
 * and serves the next request that plans the same order, with no driver
 * call. The warm reserve (worker threads) keeps order-0 frames created and
 * exported ahead of demand, and after a request had to create an order-k
 * frame it also keeps spares of that order ready (one more each time they
 * ran out first, at most four), so the next request of that size does not
 * wait for an export either. A planned frame with no free or ready frame
 * of its order is created on the request path (one create + export,
 * ~0.6 ms, which beats mapping the same bytes as dozens of small handles
 * at ~35 us each).
 *
 * Split and merge by re-creation. A handle cannot be split or joined. When
 * creating a frame would exceed the budget, the daemon releases free frames
 * the request does not use, smallest orders first, until the new frame fits
 * (release before create, so physical use never exceeds the budget), then
 * creates it. Frames granted to a session, or held through an import, are
 * never re-created; a session's cache of unused frames comes back through
 * reclaim (RECLAIM notices) like any cached frame.
 *
 * In the client (client/frames.c). A process keeps the frames it frees in
 * its cache by order; a request looks for the planned orders there first and
 * asks the daemon only for the frames it lacks (their plan is exactly those
 * frames, see above). Re-allocating a size
 * the process freed costs no round trip and maps as many handles as the plan
 * has. Before any grant, cached frames past the cache's size (none of which
 * the request could use) go back first, at least the bytes it asks for.
 * When a large grant fails for memory or quota, the client returns its
 * cached frames and retries, then asks for the exact plan (below); what
 * that cannot get, order-0 frames of the same bytes would not get either.
 *
 * Exact plans (mb_frame_plan_exact, Grant.exact). Near the budget the 3 %
 * a plan rounds up by may be more than the room left, where u units exactly
 * would fit. The exact plan of u units is u's 512-unit frames (2^m with a
 * cap m) and the binary digits of the rest, largest first: no rounding, at
 * most u / 512 + 9 handles where order-0 frames would take u. A 1.3 GiB
 * allocation gets 4 handles instead of 650, and near the budget, where no
 * spares are kept, each of those 650 would be made and exported on the
 * grant's path. Its frames are distinct
 * powers of two below the cap, so the exact plan of a subset of them is
 * that subset too. The client asks for it after the plan was refused, and
 * for a growable range whose reservation the plan would round past. */
#include "frame_plan.h"

#include <stdbool.h>

int mb_frame_order(uint64_t bytes, size_t unit)
{
    if (unit == 0 || bytes == 0 || bytes % unit)
        return -1;
    uint64_t u = bytes / unit;
    for (int k = 0; k <= MB_MAX_ORDER; k++)
        if (u == (uint64_t)1 << k)
            return k;
    return -1;
}

static size_t plan(uint64_t bytes, size_t unit, unsigned max_order, bool exact, uint8_t *orders,
                   size_t max, uint64_t *covered)
{
    *covered = 0;
    if (bytes == 0 || unit == 0)
        return 0;
    uint64_t u = bytes / unit + (bytes % unit != 0);
    uint64_t top = 1;   /* 2^floor(log2 u) */
    while (top <= u / 2)
        top *= 2;
    if (max_order > MB_MAX_ORDER)
        max_order = MB_MAX_ORDER;
    const uint64_t big = (uint64_t)1 << max_order;
    uint64_t q = top / 32 && !exact ? top / 32 : 1;
    if (q > big)
        q = big;
    u = (u + q - 1) / q * q;
    *covered = u * unit;
    size_t n = 0;
    for (; u >= big; u -= big, n++)
        if (n < max)
            orders[n] = (uint8_t)max_order;
    for (int k = (int)max_order - 1; k >= 0; k--)
        if (u & ((uint64_t)1 << k)) {
            if (n < max)
                orders[n] = (uint8_t)k;
            n++;
        }
    return n;
}

size_t mb_frame_plan(uint64_t bytes, size_t unit, unsigned max_order, uint8_t *orders, size_t max,
                     uint64_t *covered)
{
    return plan(bytes, unit, max_order, false, orders, max, covered);
}

size_t mb_frame_plan_exact(uint64_t bytes, size_t unit, unsigned max_order, uint8_t *orders,
                           size_t max, uint64_t *covered)
{
    return plan(bytes, unit, max_order, true, orders, max, covered);
}
