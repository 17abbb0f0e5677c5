/* pool.h: the fast tier of libmbclient's stream-ordered allocator: best fit
 * with coalescing over arenas (mapped ranges from a grow callback).
 *
 * Glossary
 *   arena    one mapped range from ops->grow, tiled exactly by blocks.
 *   block    a piece of an arena: live (handed out), ready (free, usable by
 *            every stream) or pending on stream S (freed on S: usable at
 *            once by later allocations on S, by other streams only once the
 *            work S had queued when it was freed is known complete).
 *   seq      the group a pending block belongs to; a stream's pending
 *            blocks are kept in free order, seq non-decreasing.
 *   fence    an event recorded on S covering every block of S with
 *            seq <= fence seq; when event_query says 1 they become ready.
 *   bucket   a size-segregated free list: 16 exact buckets (1..15 units of
 *            align), then 8 per doubling.
 *   hole     a piece of an arena whose memory the owner unmapped (it gave
 *            back the frames under a ready block): neither free nor live,
 *            never handed out; the arena shrinks once nothing but ready
 *            blocks and holes is left.
 *
 * Fit: the smallest block found among the request's own bucket (up to 16
 * entries examined) and the first non-empty larger bucket, searched in the
 * ready lists and the requesting stream's pending lists; so the choice is
 * best fit to within one bucket (1/8 of a doubling), exact below 16 units.
 * The remainder of a split stays free (it is a multiple of align).
 *
 * Events are batched: a free costs no driver call until FENCE_BATCH frees
 * (or FENCE_BYTES) have gathered on its stream since the last fence; that
 * free records one event covering all of them. An event recorded later on
 * S completes after all the work S had when each of those blocks was
 * freed, so this is never earlier than a per-free event. Events are only
 * ever recorded on a stream from a call that names it (a free on S, or
 * mb_pool_fence(p, S)), plus the legacy default stream (NULL), which is
 * always alive and is fenced when an allocation misses. So an application
 * may destroy a stream once its work is done: the pool never touches that
 * handle again. Blocks freed on it that no event covers (the tail of a
 * batch) become ready through a device-sync fence: mb_pool_sync_begin,
 * then a synchronisation of the whole device by the caller (off the
 * request path), then mb_pool_sync_end. With ops->event_record NULL (no
 * streams, e.g. the host backend) frees are ready at once. No call ever
 * waits for a device.
 *
 * Synchronous allocations pass MB_POOL_SYNC as their stream: they take
 * only ready blocks (memory whose earlier users' work is known complete).
 *
 * The managed memory may be device memory: all metadata lives in host
 * memory and the pool never reads or writes the arenas.
 * Not thread-safe: the caller serialises calls on one mb_pool. */
#ifndef MB_POOL_H
#define MB_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The stream of synchronous allocations: ready blocks only. */
#define MB_POOL_SYNC ((void *)~(uintptr_t)0)

struct mb_pool_ops {
    /* A new mapped arena of *bytes >= min_bytes, *base aligned to align. */
    int  (*grow)(void *ctx, size_t min_bytes, void **base, size_t *bytes);
    /* Give back an arena that is entirely free and ready. */
    void (*shrink)(void *ctx, void *base, size_t bytes);
    /* Record "work on stream so far"; NULL: no streams, frees are ready at once. */
    int  (*event_record)(void *ctx, void *stream, void **ev);
    /* 1 complete, 0 pending, < 0 error (treated as pending). */
    int  (*event_query)(void *ctx, void *ev);
    void (*event_release)(void *ctx, void *ev);
    /* Map at least min_more bytes more right after the arena at base (of
     * bytes); *more gets how many (a multiple of align). Nonzero: it could
     * not, and the pool adds an arena instead; MB_EINVAL: the arena can
     * never grow (not asked again), MB_ELIMIT: no room for this much (not
     * asked again for as much or more). NULL: arenas never grow.
     * Like grow, it may let other calls on the pool run meanwhile (the
     * caller's lock dropped while it maps): the arena is neither shrunk
     * nor detached until it returns. */
    int  (*extend)(void *ctx, void *base, size_t bytes, size_t min_more, size_t *more);
    /* Map memory again into the start of the hole [addr, addr + bytes) of
     * the arena at base (mb_pool_punch made it; the caller unmapped it): at
     * least the `covers` bytes the request that needs it will use, *filled
     * gets how many (a multiple of align, at most bytes); the rest stays a
     * hole. Nonzero: it could not, and the hole stays. NULL: holes are
     * never filled. It may let other calls on the pool run meanwhile, as
     * extend does; until it returns, the arena is neither extended,
     * punched, shrunk nor detached. */
    int  (*fill)(void *ctx, void *base, void *addr, size_t bytes, size_t covers, size_t *filled);
};

struct mb_pool;

/* align: a power of two >= 256; arena_bytes: default growth unit (> 0). */
int  mb_pool_new(struct mb_pool **out, const struct mb_pool_ops *ops, void *ctx,
                 size_t align, size_t arena_bytes);
/* Releases every event and shrinks every arena; the caller guarantees no
 * pending work uses the memory. NULL is a no-op. */
void mb_pool_free(struct mb_pool *p);

/* size is rounded up to align. MB_EINVAL for 0 or an overflowing size;
 * otherwise what grow returned on failure. */
int  mb_pool_alloc(struct mb_pool *p, size_t size, void *stream, void **ptr);
/* Stream-ordered free: the block is reusable on stream at once. MB_ENOENT
 * for a pointer that is not live here (unknown, interior, double free). */
int  mb_pool_release(struct mb_pool *p, void *ptr, void *stream);
/* The rounded size of a live block, or MB_ENOENT. */
int  mb_pool_usable_size(const struct mb_pool *p, const void *ptr, size_t *size);
/* Record an event now covering every unfenced block freed on stream (the
 * caller vouches that stream is alive). */
int  mb_pool_fence(struct mb_pool *p, void *stream);
/* Device-sync fences: begin closes every stream's unfenced group with a
 * fence that completes when end is called with the returned ticket, which
 * the caller does once the whole device has been synchronised after begin
 * returned (no lock needs to be held in between). */
uint64_t mb_pool_sync_begin(struct mb_pool *p);
void mb_pool_sync_end(struct mb_pool *p, uint64_t ticket);
/* Bytes of blocks pending on streams; *unfenced_any: some on a stream
 * other than the legacy one have no fence (only a device sync settles them). */
size_t mb_pool_pending(const struct mb_pool *p, bool *unfenced_any);
/* Collect completed fences (records nothing), then shrink arenas that are
 * entirely free and ready until mapped - live <= keep_bytes or none is
 * left. Returns the bytes given back. */
size_t mb_pool_trim(struct mb_pool *p, size_t keep_bytes);
/* The same for arenas entirely free for at least idle_ms. */
size_t mb_pool_trim_idle(struct mb_pool *p, int64_t idle_ms);
/* The same until at least want bytes were given back (or none is left). */
size_t mb_pool_trim_for(struct mb_pool *p, size_t want);
/* Take a mapped range as a new arena, free: pending on stream (usable by
 * it at once), or ready with MB_POOL_SYNC or without streams. */
int  mb_pool_adopt(struct mb_pool *p, void *base, size_t bytes, void *stream);
/* Remove the arena of a live block that spans all of it (MB_EBUSY when the
 * block shares its arena, MB_ENOENT when not live): the pool forgets it
 * without calling shrink, *base and *bytes say what the caller now owns. */
int  mb_pool_detach(struct mb_pool *p, void *ptr, void **base, size_t *bytes);
/* Requests of min_size and more take a free block at most 1/8 larger than
 * themselves, or miss (0: any block that fits). The remainder of a large
 * block split for a much smaller request strands memory that only a trim
 * could give back; a miss lets the caller rebuild from whole free arenas. */
void mb_pool_set_close_fit(struct mb_pool *p, size_t min_size);
/* Holes. A ready block of at least min_size, free for at least min_age
 * allocations, largest first (completed fences collected first): its
 * arena's base and its own range. */
struct mb_pool_span {
    uintptr_t arena, addr;
    size_t size;
};
size_t mb_pool_ready_spans(struct mb_pool *p, size_t min_size, uint64_t min_age, struct mb_pool_span *out,
                           size_t max);
/* [ptr, ptr + size) must lie in one ready block (MB_ENOENT otherwise;
 * MB_EBUSY while a hole of its arena is being filled): it becomes a hole,
 * busy (its arena is not shrunk) until mb_pool_punch_end; the pool's
 * mapped bytes drop by size. The caller then unmaps it. */
int  mb_pool_punch(struct mb_pool *p, void *ptr, size_t size);
/* The caller unmapped the hole at ptr, or (unmapped false) could not: it is
 * ready again. A miss that finds a run of ready blocks and idle holes
 * (before any extension) large enough fills the parts of holes that the
 * request needs (ops->fill, the run with the fewest hole bytes first), so
 * that an arena's address space is used again rather than extended past
 * its holes. */
void mb_pool_punch_end(struct mb_pool *p, void *ptr, bool unmapped);
/* Misses of at least min_size (0: none) first extend the arena of their
 * class whose last block is the largest free one (a live last block
 * counts as none) so that its end holds the request (ops->extend): an
 * arena grows like a segment, and its free blocks all merge instead of
 * stranding beside a new arena. */
void mb_pool_set_extend_min(struct mb_pool *p, size_t min_size);
/* Allocations served so far. */
uint64_t mb_pool_allocs(const struct mb_pool *p);
/* Two classes (0: one): requests above min_size take free blocks only
 * from arenas made for (or adopted at) such sizes, the rest only from the
 * others, so small blocks never pin a large arena's free space and large
 * requests never split a small arena. */
void mb_pool_set_large_min(struct mb_pool *p, size_t min_size);
/* Allocations that needed a new arena, and those served by extending one. */
uint64_t mb_pool_misses(const struct mb_pool *p);
uint64_t mb_pool_extends(const struct mb_pool *p);
/* Would an allocation of size on stream need a new arena? (Collects
 * completed fences; otherwise changes nothing.) */
bool mb_pool_would_miss(struct mb_pool *p, size_t size, void *stream);
/* live: bytes handed out (rounded sizes); mapped: bytes of all arenas
 * but their holes. */
void mb_pool_stats(const struct mb_pool *p, size_t *live, size_t *mapped);
/* Full invariant check (O(blocks + buckets)); false on the first violation. */
bool mb_pool_is_valid(const struct mb_pool *p);

#endif
