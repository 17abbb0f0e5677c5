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
 * Pages smaller than the frame size are carved from frames this process
 * holds from the daemon, mapped once into a range the library owns; free
 * pages are shared by all vspaces of one client with the same page size and
 * reused without a driver call. Frames go back to the client's frame cache
 * only when all their pages are free and the work that used them completed.
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
 * page_bytes. Allocates the root node and launches each table kernel once
 * (so no first launch happens while a stream is gated). Nothing is mapped. */
MB_API int mb_vspace_create(mb_client *c, size_t max_bytes, size_t page_bytes, mb_vspace **out);

/* Back pages [first_page, first_page + npages) with physical pages (this
 * client's free pages first, then frames from its cache or the daemon),
 * create missing directory nodes, and enqueue on stream the kernel that
 * writes their entries. Work enqueued later on stream sees the mapping;
 * other streams are not held up. Pages already mapped keep their memory.
 * Quota and out-of-memory errors come back at once and change nothing. */
MB_API int mb_vspace_map_async(mb_vspace *v, size_t first_page, size_t npages, void *stream);

/* Enqueue on stream the kernel that invalidates the entries of the mapped
 * pages in the range (unmapped ones are skipped). Their physical pages are
 * reused only after that kernel and all work before it on stream completed:
 * a kernel enqueued later on stream reads INVALID, never another owner's data. */
MB_API int mb_vspace_unmap_async(mb_vspace *v, size_t first_page, size_t npages, void *stream);

/* The translation descriptor for kernels; NULL when v is NULL. */
MB_API const struct mb_vspace_dev *mb_vspace_device(const mb_vspace *v);

/* Wait for the work of every stream this vspace was used on, then give its
 * pages back to the client's free pages and free its table. */
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
