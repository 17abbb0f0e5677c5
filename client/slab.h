/* slab.h: the small-object tier of libmbclient.
 *
 * Glossary
 *   chunk   one mapped range obtained from the caller (a frame): chunk_bytes,
 *           a power of two, its base aligned to chunk_bytes.
 *   class   an object size; every object of a chunk has the same class.
 *   run     the host-side header of one chunk carved into objects of one
 *           class: a bitmap of free slots (1 = free) and a summary bitmap
 *           (bit w set iff word w of the slot bitmap is non-zero).
 *   spare   the one empty run a class may keep to avoid get/put ping-pong.
 *
 * Size classes (jemalloc style, 4 per doubling, quantum 256 bytes):
 *   group 0:      256, 512, 768, 1024                     (spacing 256)
 *   group g >= 1: 2^(9+g) + k * 2^(7+g), k = 1..4          (spacing 2^(7+g))
 *                 g=1: 1280 1536 1792 2048, g=2: 2560 .. 4096, ...
 *   largest:      min(chunk_bytes / 2, MB_SLAB_MAX_OBJECT), a power of two,
 *                 so every run holds at least 2 objects (objects up to 1 MiB
 *                 in 2 MiB chunks, as PyTorch's small-block pool does).
 * Every class is a multiple of 256 and every chunk base is aligned to
 * chunk_bytes, so every object is aligned to at least 256 bytes.
 *
 * The managed memory may be device memory: all metadata lives in host
 * memory and the tier never reads or writes the chunks themselves.
 * Not thread-safe: the caller serialises calls on one mb_slab. */
#ifndef MB_SLAB_H
#define MB_SLAB_H

#include <stdbool.h>
#include <stddef.h>

#define MB_SLAB_QUANTUM     ((size_t)256)          /* smallest class and alignment */
#define MB_SLAB_MAX_OBJECT  ((size_t)1 << 20)      /* cap on the largest class */
#define MB_SLAB_MIN_CHUNK   ((size_t)4096)
#define MB_SLAB_MAX_CHUNK   ((size_t)1 << 31)

/* Obtain a mapped chunk of `bytes`, its base aligned to `bytes`. 0 or a
 * negative mb_status. */
typedef int (*mb_chunk_get_fn)(void *ctx, size_t bytes, void **base);
/* Give back an empty chunk obtained from get. */
typedef void (*mb_chunk_put_fn)(void *ctx, void *base, size_t bytes);

struct mb_slab;

/* chunk_bytes: a power of two in [MB_SLAB_MIN_CHUNK, MB_SLAB_MAX_CHUNK]. */
int mb_slab_new(struct mb_slab **out, size_t chunk_bytes, mb_chunk_get_fn get,
                mb_chunk_put_fn put, void *ctx);
/* Puts every chunk back (live objects included) and frees s. NULL is a no-op. */
void mb_slab_free(struct mb_slab *s);

/* The largest size mb_slab_alloc accepts. */
size_t mb_slab_max_size(const struct mb_slab *s);
/* Number of size classes and the size of class i (for tests and stats). */
unsigned mb_slab_class_count(const struct mb_slab *s);
size_t mb_slab_class_size(const struct mb_slab *s, unsigned i);
/* Whether an object of size can be had without a new chunk. */
bool mb_slab_has_free(const struct mb_slab *s, size_t size);

/* The class index of size (1 <= size <= max). */
unsigned mb_slab_class_of(const struct mb_slab *s, size_t size);

/* MB_EINVAL for size 0 or > max; otherwise what get returned on failure. */
int mb_slab_alloc(struct mb_slab *s, size_t size, void **ptr);
/* MB_ENOENT if ptr is not a live object of this slab (double free, foreign
 * or interior pointer); nothing changes then. */
int mb_slab_release(struct mb_slab *s, void *ptr);
/* The class size of a live object, or MB_ENOENT. */
int mb_slab_usable_size(const struct mb_slab *s, const void *ptr, size_t *size);
/* Put back empty chunks until at most keep_empty_chunks remain; returns the
 * bytes put back. */
size_t mb_slab_trim(struct mb_slab *s, size_t keep_empty_chunks);
/* live_bytes: class sizes of live objects; mapped_bytes: chunks held. */
void mb_slab_stats(const struct mb_slab *s, size_t *live_bytes, size_t *mapped_bytes);
/* Full invariant check (O(chunks * bitmap)); false on the first violation. */
bool mb_slab_is_valid(const struct mb_slab *s);

#endif
