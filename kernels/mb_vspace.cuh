/* mb_vspace.cuh: the device side of MoonBright's vspaces, for users' kernels:
 * translate a byte offset of a virtual object into a device pointer by
 * walking the GPU-resident page table (moonbright/vspace.h describes it).
 *
 *   #include <mb_vspace.cuh>
 *   __global__ void k(struct mb_vspace_dev t, ...) {
 *       float *p = (float *)mb_vspace_translate(&t, offset);
 *   }
 *
 * An offset whose page is not mapped translates to NULL + (offset within the
 * page), which faults when dereferenced. Define MB_VSPACE_DEBUG before
 * including this header to trap (__trap()) at the translation instead.
 * Entries are read with plain loads: a kernel sees the mapping made by
 * map_async calls enqueued before it on its stream (or ordered before it by
 * events), not ones racing with it on other streams. */
#ifndef MB_VSPACE_CUH
#define MB_VSPACE_CUH

#include <stdint.h>

#include <moonbright/vspace.h>

/* The leaf entry (page address or MB_VSPACE_INVALID) of page p. */
__device__ __forceinline__ uint64_t mb_vspace_entry(const struct mb_vspace_dev *t, uint64_t p)
{
    uint64_t e = t->root;
    for (int l = (int)t->levels - 1; l >= 0; l--) {
        e = __ldg((const unsigned long long *)e +
                  ((p >> (MB_VSPACE_FANOUT_SHIFT * l)) & (MB_VSPACE_FANOUT - 1)));
        if (e == MB_VSPACE_INVALID)
            break;
    }
    return e;
}

__device__ __forceinline__ void *mb_vspace_translate(const struct mb_vspace_dev *t, uint64_t offset)
{
    uint64_t e = offset < t->max_bytes ? mb_vspace_entry(t, offset >> t->page_shift)
                                       : MB_VSPACE_INVALID;
#ifdef MB_VSPACE_DEBUG
    if (e == MB_VSPACE_INVALID) {
        printf("mb_vspace_translate: offset %llu is not mapped\n", (unsigned long long)offset);
        __trap();
    }
#endif
    return (void *)(uintptr_t)(e + (offset & (((uint64_t)1 << t->page_shift) - 1)));
}

/* Bytes from offset to the end of its page: a run that needs no other
 * translation. */
__device__ __forceinline__ uint64_t mb_vspace_page_left(const struct mb_vspace_dev *t,
                                                        uint64_t offset)
{
    return ((uint64_t)1 << t->page_shift) - (offset & (((uint64_t)1 << t->page_shift) - 1));
}

#endif
