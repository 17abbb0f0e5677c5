/* moonbright/mbclient.h: the public API of libmbclient, the library every
 * MoonBright tenant links. One header; every public symbol starts with mb_.
 *
 * A process opens a client (one session with moonbrightd, the daemon that
 * owns the GPU's physical frames), then allocates device memory through it.
 * Every function returns 0 or a negative mb_status (moonbright/status.h;
 * mb_strerror() names it) except those documented otherwise: mb_close()
 * cannot fail, and the queries (mb_usable_size, mb_backend_name,
 * mb_strerror) and framework hooks return what they say. The client is
 * thread-safe. Functions marked MB_API are the library's whole interface. */
#ifndef MOONBRIGHT_MBCLIENT_H
#define MOONBRIGHT_MBCLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <moonbright/api.h>
#include <moonbright/status.h>   /* enum mb_status, mb_strerror() */

#ifdef __cplusplus
extern "C" {
#endif


typedef struct mb_client mb_client;

/* Open a session with the daemon of device $MOONBRIGHT_DEVICE (default 0)
 * whose sockets live in $MOONBRIGHT_RUNTIME_DIR (default /run/moonbright).
 * tenant_name NULL or "" means $MOONBRIGHT_TENANT, else "default". */
MB_API int mb_open(mb_client **out, const char *tenant_name);
/* Open a session with the daemon that serves this process's device
 * `device` (its CUDA ordinal here, as cudaSetDevice numbers it, whatever
 * CUDA_VISIBLE_DEVICES hides or reorders), found among the daemons in
 * $MOONBRIGHT_RUNTIME_DIR by the GPU's UUID. MB_EUNAVAIL when none serves
 * it. A process that uses several GPUs opens one client per device. */
MB_API int mb_open_device(mb_client **out, const char *tenant_name, int device);
/* Unmap everything, return every frame to the daemon, end the session. */
MB_API void mb_close(mb_client *c);

/* Synchronous, cudaMalloc-like: the memory is usable when the call returns,
 * aligned to at least 256 bytes, and free of any stream's earlier work.
 * mb_free never waits: the memory is freed on the legacy default stream and
 * is not reused before work queued there has finished (cudaFree's
 * guarantee). A free never unmaps either: freed memory stays mapped for
 * reuse until mb_trim, a reclaim notice or $MOONBRIGHT_IDLE_MS of disuse.
 * Any thread may free what another thread allocated. */
MB_API int mb_malloc(mb_client *c, size_t size, void **ptr);
MB_API int mb_free(mb_client *c, void *ptr);

/* Stream-ordered: stream is a cudaStream_t / CUstream (NULL: the legacy
 * default stream). Memory freed on stream S is reused at once by requests on
 * S, by other streams once the work queued on S before the free is known
 * complete; no call waits for the device. On the host backend streams are
 * accepted and ordering is trivially satisfied.
 *
 * Streams are the application's to destroy: the library records work on a
 * stream only inside a call that names it. Once the application has
 * synchronised a stream on which it freed memory and destroyed it, the
 * library never uses that handle again and the memory is not stranded (a
 * background device synchronisation settles frees no event covered). Only
 * destroy a stream after the work queued on it has finished.
 *
 * CUDA graphs: these calls take no part in stream capture (they ask no
 * stream whether it captures, which would cost every call a driver call).
 * Allocate a graph's memory before the capture and free it after the
 * graph is gone; PyTorch's graphs are handled by the framework hook. */
MB_API int mb_malloc_async(mb_client *c, size_t size, void *stream, void **ptr);
MB_API int mb_free_async(mb_client *c, void *ptr, void *stream);

/* Grow in place: reserve max_size bytes of address space, map size bytes
 * now; mb_grow makes more of the same range usable (no copy, the pointer
 * stays). A background thread keeps the range's mapped tail ahead of its
 * size, so mb_grow inside it makes no driver call; tails unused for
 * $MOONBRIGHT_IDLE_MS (default 2000) go back. Freed with mb_free. */
MB_API int mb_malloc_growable(mb_client *c, size_t size, size_t max_size, void **ptr);
MB_API int mb_grow(mb_client *c, void *ptr, size_t new_size);
/* The same, in stream order: where the mapped tail falls short, the frames
 * are taken on the call (quota and out-of-memory are its errors) and
 * mapped by the client's mapper thread, with work enqueued on stream
 * after the call waiting on the device until they are (as
 * mb_malloc_async's slow path); the caller does not wait for the driver.
 * Use the bytes past the old size only from kernels on stream, or after
 * synchronising it: until the mapping is done the runtime's own checks
 * (cudaMemcpyAsync, cudaMemsetAsync) refuse them. Launch the kernels once
 * before a stream is first gated (a first launch behind a gate has been
 * seen to hang). A mapping that fails after the call returned leaves the range at
 * the size it had mapped (dependent kernels fault) and the next call
 * returns the error. A growable range freed on stream (mb_free_async, or
 * mb_free for the legacy default stream) is reused at once by
 * mb_malloc_growable_async on the same stream, as cudaMallocAsync reuses
 * a block, even while mappings of its former owner are still queued (they
 * go on; nothing else reuses, unmaps or trims the range until they are
 * done). Freeing never waits for the mapper. A call that queues mappings
 * first waits while the mapper has more than $MOONBRIGHT_GROW_LAG
 * (default 8) jobs queued: queued mappings hold their frames.
 * Refused for budget or quota, these calls wait for the mappings
 * queued and the stream's work before the process gives back idle memory
 * and tries once more. On the host backend both map before returning. */
MB_API int mb_malloc_growable_async(mb_client *c, size_t size, size_t max_size, void *stream,
                                   void **ptr);
MB_API int mb_grow_async(mb_client *c, void *ptr, size_t new_size, void *stream);
/* Bytes usable at ptr (a live allocation's start), 0 if unknown. */
MB_API size_t mb_usable_size(mb_client *c, const void *ptr);

/* Sharing between processes. mb_export makes an unguessable capability
 * (32 random bytes from the daemon) for an allocation of its own range: a
 * growable one (always; allocate memory meant to be shared with
 * mb_malloc_growable(c, size, size, &p)), or one above 8 MiB that spans
 * its heap arena (one that found no free memory to reuse or extend);
 * others get MB_EBUSY. mb_export_to restricts it to one uid. Another
 * process passes it to mb_import, once, and maps the same memory. The
 * memory is released only when every holder has freed it; a token not yet
 * redeemed is revoked when the exporter frees the allocation or exits. */
typedef struct mb_share_token {
    uint8_t bytes[32];
} mb_share_token;
MB_API int mb_export(mb_client *c, void *ptr, mb_share_token *out);
MB_API int mb_export_to(mb_client *c, void *ptr, uint32_t uid, mb_share_token *out);
MB_API int mb_import(mb_client *c, const mb_share_token *t, void **ptr, size_t *size);

/* Return cached frames to the daemon until at most keep_bytes stay cached;
 * idle memory goes first: free heap and slab memory, free vspace pages,
 * the tails growable ranges mapped ahead and freed growable ranges. Frees
 * whose stream work is not yet known complete are settled first, by one
 * device synchronisation (the one call here that may wait for the GPU). */
MB_API int mb_trim(mb_client *c, size_t keep_bytes);

typedef struct mb_client_stats {
    size_t frame_bytes;       /* size of the daemon's base frame */
    size_t bytes_live;        /* handed to the caller, not yet freed */
    size_t bytes_mapped;      /* mapped into this process */
    size_t bytes_cached;      /* frames held from the daemon but not mapped */
    size_t bytes_granted;     /* all frames this process holds from the daemon */
    size_t slab_live, slab_mapped;   /* small-object tier */
    size_t pool_live, pool_mapped;   /* fast tier (best fit) */
    size_t stitch_live;              /* slow tier (whole stitched ranges) */
    uint64_t daemon_requests;        /* round trips made */
    uint64_t frames_imported;        /* handles received over the channel */
    uint64_t daemon_wait_us;         /* time spent waiting for the daemon's replies */
    uint64_t import_us;              /* time spent receiving and importing granted handles */
    size_t bytes_idle;               /* mapped, free, kept for reuse (slab, heap, idle
                                      * ranges, freed growable ranges) */
    uint64_t heap_hits;              /* heap allocations served from mapped memory */
    uint64_t heap_grants;            /* backing ranges obtained (grant and map) */
    uint64_t stitches;               /* of them, stitched from idle ranges' frames (repairs) */
    uint64_t unmaps;                 /* ranges unmapped (trim, reclaim, idle policy, frees of ranges of their own) */
    uint64_t device_syncs;           /* background device syncs that settled frees on streams */
    uint64_t heap_punches;           /* heap frames unmapped from under free blocks for a
                                      * miss to stitch (the arena keeps a hole there) */
    /* vspace page pools (all page sizes): extents of large frames mapped
     * once, carved into pages; refilled in the background */
    size_t vspace_pool_bytes;        /* mapped into the pools */
    size_t vspace_free_bytes;        /* ... of which free pages, ready to be taken */
    size_t vspace_extents;           /* mapped ranges (frames) behind the pools */
    uint64_t vspace_refill_waits;    /* maps that found too few free pages and
                                      * mapped memory before returning */
    /* growable ranges (mb_malloc_growable): tails mapped ahead of use */
    size_t grow_mapped_ahead;        /* mapped past the sizes asked for */
    uint64_t grow_waits;             /* mb_malloc_growable calls that found no freed
                                      * range to reuse, and mb_grow calls past the
                                      * mapped tail: they mapped before returning */
    uint64_t background_busy_us;     /* time the background memory thread spent working
                                      * (refills, tails, spares, returns) */
    uint64_t heap_extends;           /* of heap_grants, arenas extended in place: a miss
                                      * mapped memory after an arena's free end */
    uint64_t heap_fills;             /* of heap_grants, holes that trims had left in an
                                      * arena mapped again for a miss */
    uint64_t grow_queued;            /* mb_malloc_growable_async and mb_grow_async calls
                                      * past the mapped tail that left the mapping to the
                                      * mapper thread: the stream waited, not the caller */
    /* Near the budget: what the daemon could still grant this process
     * without a reclaim (budget and quotas), as of its last grant less what
     * it took since (0 after a refusal, and before any grant); near_budget
     * when that is under MOONBRIGHT_NEAR_BUDGET_PCT percent (12) of what it
     * holds. Then memory is packed closely: the heap fits large requests
     * closely (as MOONBRIGHT_HEAP_CLOSE_FIT=1 does always) and growable
     * ranges get no spare ranges. */
    size_t grant_room;
    int near_budget;
    uint64_t grow_close_passes;      /* growable allocations that passed over a freed
                                      * range which, once its excess went back, would
                                      * still hold more than one tail past their size
                                      * (frames go back whole) */
} mb_client_stats;
MB_API int mb_stats(mb_client *c, mb_client_stats *out);

/* Framework hooks (PyTorch CUDAPluggableAllocator, CuPy): connect lazily,
 * with the tenant $MOONBRIGHT_TENANT (default "torch"), to the daemon that
 * serves `device` (mb_open_device: one client per device the process
 * uses). A device no daemon serves gets NULL (out of memory to the
 * framework), with the reason logged once. */
MB_API void *mb_torch_malloc(ssize_t size, int device, void *stream);
MB_API void mb_torch_free(void *ptr, ssize_t size, int device, void *stream);
/* CUDA graphs (PyTorch's pool hooks, registered by moonbright_torch.enable
 * through set_begin_allocate_to_pool, set_end_allocate_to_pool_fn and
 * set_release_pool): memory allocated or freed on a stream while it
 * captures stays the graph's, never handed to anyone else, until the
 * graph's pool is released. The pool id is PyTorch's MempoolId_t (two
 * 64-bit integers); filter is PyTorch's and not used. */
/* tensor.record_stream (set_record_stream_fn): ptr is used on stream too;
 * its free is then deferred, without a wait, until the work queued on
 * every stream named and on the freeing stream is done. */
MB_API void mb_torch_record_stream(void *ptr, void *stream);
/* torch.cuda.empty_cache (set_reset_fn): mb_trim(c, 0) on every device's
 * client, giving its idle memory back to the daemon. */
MB_API void mb_torch_empty_cache(void);
MB_API void mb_torch_begin_pool(int device, uint64_t id0, uint64_t id1, void *filter);
MB_API void mb_torch_end_pool(int device, uint64_t id0, uint64_t id1);
MB_API void mb_torch_release_pool(int device, uint64_t id0, uint64_t id1);

/* The backend this client uses: "cuda" or "host". */
MB_API const char *mb_backend_name(const mb_client *c);

#ifdef __cplusplus
}
#endif
#endif
