/* async_map.h: the stream-ordered slow path of mb_malloc_async, for
 * client.c. When no tier can serve a request on a stream, amap_alloc takes
 * the frames at once (so quota and out-of-memory are immediate errors),
 * reserves a range and returns it unmapped; the stream is gated with a
 * 32-bit wait on a device-mapped host word, and the client's mapper thread
 * maps the frames, gives access, then raises the word. Work enqueued later
 * on the stream runs after the mapping; other streams and the calling
 * thread never wait for it.
 *
 * How client.c uses it (no lock held that a job of the mapper takes, the
 * frame lock or a growable set's: the driver blocks a stream operation
 * while the stream's queue is full, until the mapper has opened earlier
 * gates; amap_alloc takes the frame lock itself):
 *
 *   mb_malloc_async, once the tiers returned MB_ENOENT (own_range):
 *       rc = amap_take_error(c);             (also at the top of mb_free*)
 *       struct stitched *s;
 *       if (rc == 0) rc = amap_alloc(c, size, stream, &s);
 *       then s is a live range (c->live), s->mapped_async set;
 *   freeing it (mb_free*): amap_settle(c, s, ...) first (it waits for the
 *       mapper when s is still being mapped, and says whether the mapping
 *       failed), then the range is retired as any other; the ranges of
 *       amap_alloc have no room to grow (reserved == bytes).
 *   mb_close, first of all (before live ranges are unmapped):
 *       amap_close(c);
 *
 * Failures after the pointer was returned (mapping failed in the mapper
 * thread): the gate is still raised, so nothing hangs, and the range is
 * backed by aliases of its own first frame where the driver allows (a
 * dependent kernel then writes garbage into memory the allocation owns,
 * never into another allocation, and never faults); otherwise it stays
 * unmapped and a dependent kernel faults with an illegal address. Either
 * way the error is sticky: amap_take_error (and amap_alloc) return it once,
 * and amap_take_error also stores it in c->sticky when that is 0, so the
 * next mb_malloc* call returns it. The range stays a live allocation that
 * mb_free releases normally.
 *
 * Backends without stream memory operations (host) map synchronously
 * inside amap_alloc: the pointer is usable when it returns.
 *
 * Test hooks (any build): $MOONBRIGHT_TEST_AMAP_DELAY_US makes the mapper
 * sleep that long before each mapping; $MOONBRIGHT_TEST_AMAP_FAIL=N makes
 * the next N mappings fail (MB_EBACKEND) after their pointer was returned.
 * Both are read when the client's mapper starts; amap_test_inject changes
 * them at run time. $MOONBRIGHT_TEST_HOST_GATES=1 gives the host backend
 * stream gates that hold nothing back (backend_host.c), so that the mapper
 * runs there too (test_vspace_host's test_grow_async_gated). */
#ifndef MB_CLIENT_ASYNC_MAP_H
#define MB_CLIENT_ASYNC_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

/* A stitched range of ceil(size / frame_bytes) frames whose va may be
 * handed out now; mapped (or failed, see above) in stream order. */
int amap_alloc(mb_client *c, size_t size, void *stream, struct stitched **out);
/* Another layer's mapping job (grow.c's tails mapped after mb_grow_async
 * returned): run(arg, fail) on the mapper thread, in order with the other
 * jobs, stream gated behind it; *seq is its number for amap_gate. With
 * fail true (a test hook's injected failure) run must not map and must
 * undo as for a failed mapping. run returns 0, or the error amap_take_error
 * reports next. MB_ENOENT where streams cannot be gated (host backend):
 * the caller maps synchronously. Where this stream could not be gated
 * (the driver's error, logged), the job is done when this returns. */
int amap_run_async(mb_client *c, void *stream, int (*run)(void *arg, bool fail), void *arg,
                   uint32_t *seq);
/* Gate stream behind job seq (queued or done): MB_ENOENT without a
 * mapper. */
int amap_gate(mb_client *c, void *stream, uint32_t seq);
/* Before s is freed: wait for its mapping when it is still in flight, and
 * say whether the mapping failed (*unmapped: nothing of it is mapped). */
void amap_settle(mb_client *c, struct stitched *s, bool *failed, bool *unmapped);
/* 0, or the first mapping failure not reported yet (cleared by this call;
 * stored in c->sticky when that is 0). */
int amap_take_error(mb_client *c);
/* Is there a failure amap_take_error would return? (No lock.) */
bool amap_has_error(mb_client *c);
/* Wait for every mapping in flight, stop the mapper, free its state. */
void amap_close(mb_client *c);
/* Wait until every job queued so far is done (a refused grant's path:
 * frees ordered behind gates can then complete). */
void amap_drain(mb_client *c);
/* Wait until at most `most` jobs are queued (the running one included):
 * the bound on how far stream-ordered growth runs ahead of the mapper
 * (the frames of queued jobs are held and cannot be cut or reused until
 * they ran). No lock a job takes may be held. */
void amap_throttle(mb_client *c, size_t most);
/* Ranges being mapped now (for stats and tests). */
size_t amap_in_flight(mb_client *c);

void amap_test_inject(mb_client *c, unsigned delay_us, unsigned fail_next);

#endif
