/* frame_plan.h: which frame sizes serve a request (the policy is written
 * in frame_plan.c). Shared by the daemon, which grants frames by this plan,
 * and the client, which looks for the same frames in its cache first. */
#ifndef MB_FRAME_PLAN_H
#define MB_FRAME_PLAN_H

#include <stddef.h>
#include <stdint.h>

/* A frame of order k holds unit << k bytes (unit = the daemon's frame size,
 * one granule by default); orders run 0..MB_MAX_ORDER. */
#define MB_MAX_ORDER 9
#define MB_ORDERS (MB_MAX_ORDER + 1)

/* Plan the frames for a request of `bytes`, no frame above max_order
 * (MB_MAX_ORDER: the full plan; 0: whole units): writes at most `max`
 * orders, largest first, into orders[] and returns how many the plan has
 * (which may exceed max: call again with room for them). *covered gets the
 * bytes the plan holds (>= bytes, less than 3.2 % more for requests of 64
 * units and above, not rounded at all below). Returns 0 for bytes == 0. */
size_t mb_frame_plan(uint64_t bytes, size_t unit, unsigned max_order, uint8_t *orders, size_t max,
                     uint64_t *covered);

/* The same without rounding (frame_plan.c, "Exact plans"): bytes rounded
 * up to whole units, in max_order frames and the binary digits of the
 * rest, largest first. */
size_t mb_frame_plan_exact(uint64_t bytes, size_t unit, unsigned max_order, uint8_t *orders,
                           size_t max, uint64_t *covered);

/* The order of a frame of `bytes`, or -1 when bytes is not unit << k. */
int mb_frame_order(uint64_t bytes, size_t unit);

#endif
