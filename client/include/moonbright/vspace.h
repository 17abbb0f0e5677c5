/* moonbright/vspace.h: MoonBright's GPU-resident page tables ("vspaces").
 *
 * A vspace is a virtual object of up to max_bytes, cut into pages of
 * page_bytes (a power of two, 64 KiB .. 2 MiB), whose pages are backed by
 * physical memory only where mapped. Its page table lives in device memory
 * and is multi-level like the hardware's: a root directory, directory levels
 * created when first needed, and leaf entries that hold the device address
 * of each mapped page. Mapping and unmapping are stream-ordered: they enqueue
 * a small kernel that writes the entries, so growing an object by thousands
 * of pages costs one launch instead of one driver call per 2 MiB.
 *
 * Consumer kernels translate through the table with the device header
 * kernels/mb_vspace.cuh (mb_vspace_translate); they take the struct returned
 * by mb_vspace_device() by value.
 *
 * Pages come from the client's page pool of their size: extents of large
 * frames (a 64 MiB to 1 GiB frame at the default 2 MiB unit, one descriptor;
 * a map of more pages than that maps the frame plan of what it needs),
 * mapped once and carved into pages, so a page costs no descriptor and no
 * driver call. A background thread keeps each pool's free pages above a low
 * watermark sized from recent demand (twice the largest rise of the pages
 * held within 100 ms over the last second: a load at a steady size that
 * takes and returns pages needs few; at most 1/64 of the pages in use); a
 * map that finds too few free pages maps an extent itself before returning,
 * and mb_stats counts it (vspace_refill_waits). Free pages are shared by
 * all vspaces of the client with the same page size and stay mapped after mb_vspace_destroy; extents
 * whose pages are all free (and whose last use completed) go back on
 * mb_trim, on the daemon's reclaim notice, and when unused for
 * $MOONBRIGHT_IDLE_MS (default 2000 ms).
 *
 * Every function returns 0 or a negative mb_status (moonbright/mbclient.h).
 * One vspace may be used from several threads; calls on it are serialised.
 * Destroy every vspace before mb_close(). */
#ifndef MOONBRIGHT_VSPACE_H
#define MOONBRIGHT_VSPACE_H

#include <stddef.h>
#include <stdint.h>

#include <moonbright/mbclient.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Entries per directory or leaf node (a node is 4 KiB of 64-bit entries). */
#define MB_VSPACE_FANOUT_SHIFT 9
#define MB_VSPACE_FANOUT (1u << MB_VSPACE_FANOUT_SHIFT)
/* The value of an absent entry, at every level. */
#define MB_VSPACE_INVALID 0ull
#define MB_VSPACE_MAX_LEVELS 6
#define MB_VSPACE_MIN_PAGE ((size_t)64 << 10)
#define MB_VSPACE_MAX_PAGE ((size_t)2 << 20)

/* What kernels take (by value: it never changes while the vspace lives).
 * Translation of byte offset o, with p = o >> page_shift:
 *   e = root; for level l = levels-1 .. 0:
 *       e = ((const uint64_t *)e)[(p >> (9 * l)) & 511]   (absent: INVALID)
 *   address = e + (o & ((1 << page_shift) - 1))
 * so a table of L levels covers 512^L pages. */
struct mb_vspace_dev {
    uint64_t root;          /* device address of the root node (512 entries) */
    uint64_t max_bytes;     /* offsets at or above this are invalid */
    uint32_t page_shift;    /* log2(page_bytes) */
    uint32_t levels;        /* 1 .. MB_VSPACE_MAX_LEVELS; 1: the root is the leaf */
};

typedef struct mb_vspace mb_vspace;

/* A vspace of max_bytes (rounded up to whole pages) with pages of
 * page_bytes. Nothing is mapped, and any stream may use it at once: its
 * root is a node already cleared on the device (the client's background
 * thread keeps some ready; when none is, one is cleared and waited for
 * here, counted in mb_stats' vspace_refill_waits). The first call in a
 * process launches each table kernel once (so no first launch happens
 * while a stream is gated). */
MB_API int mb_vspace_create(mb_client *c, size_t max_bytes, size_t page_bytes, mb_vspace **out);

/* Ready this client for vspaces of page_bytes pages ahead of the first,
 * for a server at start: the table kernels are launched once, a chunk of
 * page-table nodes is cleared, and the page pool of that size maps extents
 * until at least npages pages are free (0: none). The first
 * mb_vspace_create and mb_vspace_map_async then wait for nothing the
 * process has not done already. Prepared pages are ordinary free pages:
 * mb_trim, the daemon's reclaim notice and the idle policy
 * ($MOONBRIGHT_IDLE_MS) return them like any other. Quota and
 * out-of-memory errors come back as such; pages mapped before the failure
 * stay free in the pool. */
MB_API int mb_vspace_prepare(mb_client *c, size_t page_bytes, size_t npages);

/* Back pages [first_page, first_page + npages) with physical pages (this
 * client's free pages first, then frames from its cache or the daemon),
 * create missing directory nodes, and enqueue on stream the kernel that
 * writes their entries. Work enqueued later on stream sees the mapping;
 * other streams are not held up. Pages already mapped keep their memory.
 * npages == 0 (with first_page <= the vspace's pages) does nothing.
 * Quota and out-of-memory errors come back at once and change nothing. */
MB_API int mb_vspace_map_async(mb_vspace *v, size_t first_page, size_t npages, void *stream);

/* Enqueue on stream the kernel that invalidates the entries of the mapped
 * pages in the range (unmapped ones are skipped; npages == 0 does nothing). Their physical pages are
 * reused only after that kernel and all work before it on stream completed:
 * a kernel enqueued later on stream reads INVALID, never another owner's data. */
MB_API int mb_vspace_unmap_async(mb_vspace *v, size_t first_page, size_t npages, void *stream);

/* The translation descriptor for kernels; NULL when v is NULL. */
MB_API const struct mb_vspace_dev *mb_vspace_device(const mb_vspace *v);

/* Give the vspace up without waiting: its pages go back to the client's
 * page pool (still mapped, for the next vspace) and its table nodes to the
 * client, each once the work enqueued so far on every stream this vspace
 * was used on has completed (events recorded after that work tell; the
 * streams themselves are not touched again and may be destroyed). */
MB_API void mb_vspace_destroy(mb_vspace *v);

/* Inspection: read the leaf entries of pages [first_page, first_page+n) as
 * the device holds them after the work enqueued on stream (waits for it),
 * by walking the table in device memory from the root. Absent directory
 * nodes read as MB_VSPACE_INVALID. For tests and debugging. */
MB_API int mb_vspace_read_entries(mb_vspace *v, size_t first_page, size_t n, void *stream, uint64_t *out);

/* Pages of v mapped now (host view, including work not yet run). */
MB_API size_t mb_vspace_mapped_pages(const mb_vspace *v);

#ifdef __cplusplus
}
#endif
#endif
