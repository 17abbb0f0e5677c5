/* grow.h: growable ranges (grow.c), for client.c's mb_malloc_growable,
 * mb_grow, mb_free and mb_usable_size, and share.c's mb_export.
 *
 * Glossary
 *   used     the size the caller asked for (mb_malloc_growable, mb_grow).
 *   tail     mapped bytes past used: the client's background thread keeps
 *            it ahead of demand (about used/64, at least 8 MiB and twice
 *            the last growth step), up to the range's max: frames the process
 *            caches, of any size, first (no round trip), else the frame
 *            plan's large frames; mb_grow inside it is bookkeeping, no
 *            driver call. A new range's first bytes come the same way.
 *   idle     a freed range kept mapped (at most 1/64 of the bytes in use
 *            plus 128 MiB): mb_malloc_growable reuses one whose reservation
 *            holds its max once the work before the free completed: one
 *            mapped to at least the size asked for, the least mapped first
 *            (a surplus past the tail the range would keep is unmapped by
 *            the background thread), else the most mapped (the rest is
 *            mapped on the call). Reservations are powers of two of 1 GiB
 *            at least, so that ranges fit many sizes.
 *   spare    an idle range the background thread maps ahead from frames
 *            the process caches (no round trip), sized so that three in
 *            four of the latest allocations fit in it, while the idle
 *            ranges hold less than their cap.
 *   wait     an mb_grow past the mapped tail, or an mb_malloc_growable
 *            that found no idle range with its first bytes mapped: it maps
 *            before returning (counted in mb_stats as grow_waits).
 *   queued   the same for mb_grow_async and mb_malloc_growable_async: the
 *            frames are taken on the call, the mapper thread maps them and
 *            the stream waits for it (grow_queued); the range is pending
 *            (and busy) until then; such a call first waits while the
 *            mapper has more than c->grow_lag jobs queued (their frames
 *            are held until they ran). Freed while pending, it goes idle
 *            at once with its jobs (no wait), and only a stream-ordered
 *            allocation on the stream it was freed on takes it before
 *            they are done; it is neither unmapped nor cut meanwhile.
 * Tails and idle ranges left unused for $MOONBRIGHT_IDLE_MS, and all of
 * them on mb_trim or a reclaim notice, go back (whole frames past used).
 *
 * Every function but the _held ones is called without c->lock. */
#ifndef MB_CLIENT_GROW_H
#define MB_CLIENT_GROW_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"

struct growset;

/* Reserve max bytes of address space and map size now; with async, in
 * stream order on a backend that gates streams (the mapping queued to
 * async_map.c's mapper thread, stream gated behind it). */
int grow_alloc(mb_client *c, size_t size, size_t max, void *stream, bool async, void **ptr);
/* Make new_size bytes at ptr usable (no-op when smaller than now), with
 * async in stream order as above; MB_ENOENT when ptr is not a growable
 * range. */
int grow_extend(mb_client *c, void *ptr, size_t new_size, void *stream, bool async);
/* Free a growable range; MB_ENOENT when ptr is not one. */
int grow_free(mb_client *c, void *ptr, void *stream);
/* The used size at ptr; 0 when ptr is not a growable range. */
size_t grow_usable(mb_client *c, const void *ptr);
/* Sharing a growable range: grow_share_begin waits until no other thread
 * maps, cuts or frees it and a former owner's work is done, holds it busy
 * and copies the ids of its frames (*ids, malloc'd, *n of them); MB_ENOENT
 * when ptr is not a growable range. grow_share_end marks those frames
 * exported when the daemon shared them (freed, they go back to the daemon,
 * never into the cache) and lets the range go. c->lock not held. */
int grow_share_begin(mb_client *c, const void *ptr, uint32_t **ids, size_t *n);
void grow_share_end(mb_client *c, const void *ptr, size_t n, bool shared);

/* For refill.c: the growable ranges of a client. */
struct growset *growset_new(void);
/* The background step: what ranges hold past their need returned (tails
 * idle since now - idle_ms, reused ranges' excess, freed ranges past the
 * idle cap), then tails below their target mapped ahead (the closest to a
 * wait first, a few per step), then spare ranges. True when tails are
 * still due (the next step should come at once). */
bool grow_work(mb_client *c, struct growset *g, int64_t now, int idle_ms);
/* Return every tail (c->lock held). */
void grow_trim_held(mb_client *c, struct growset *g);
/* Free every range still live, then the set. No lock held. */
void growset_free(mb_client *c, struct growset *g);
void grow_stats(struct growset *g, mb_client_stats *st);

#endif
