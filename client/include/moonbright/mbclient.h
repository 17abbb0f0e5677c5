/* moonbright/mbclient.h: the public API of libmbclient, the library every
 * MoonBright tenant links. One header; every public symbol starts with mb_.
 *
 * A process opens a client (one session with moonbrightd, the daemon that
 * owns the GPU's physical frames), then allocates device memory through it.
 * Every function returns 0 or a negative mb_status; mb_strerror() names it.
 * The client is thread-safe. */
#ifndef MOONBRIGHT_MBCLIENT_H
#define MOONBRIGHT_MBCLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: 0 is success, failures are negative. The same numbers travel
 * in the protocol's replies. */
enum mb_status {
    MB_OK = 0,
    MB_EINVAL = -1,     /* invalid argument */
    MB_ENOMEM = -2,     /* the daemon's budget (or the device) is exhausted */
    MB_EQUOTA = -3,     /* the tenant's quota would be exceeded */
    MB_EUNAVAIL = -4,   /* the daemon is not reachable or did not answer */
    MB_EPROTO = -5,     /* malformed or unexpected message */
    MB_EPERM = -6,      /* not permitted for this session or user */
    MB_ENOENT = -7,     /* no such pointer, frame, session or token */
    MB_EBACKEND = -8,   /* the CUDA driver (or host backend) failed */
    MB_ESYS = -9,       /* an operating-system call failed (see errno in the log) */
    MB_EBUSY = -10,     /* already running, or draining */
    MB_EDEVICE = -11,   /* the device is lost or unusable */
    MB_ELIMIT = -12,    /* a hard limit (file descriptors, mappings) was reached */
};
#define MB_STATUS_MIN (-12)

typedef struct mb_client mb_client;

/* Open a session with the daemon of device $MOONBRIGHT_DEVICE (default 0)
 * whose sockets live in $MOONBRIGHT_RUNTIME_DIR (default /run/moonbright).
 * tenant_name NULL means $MOONBRIGHT_TENANT, else "default". */
int mb_open(mb_client **out, const char *tenant_name);
/* Unmap everything, return every frame to the daemon, end the session. */
void mb_close(mb_client *c);

/* Synchronous, cudaMalloc-like: the memory is usable when the call returns,
 * aligned to at least 256 bytes. mb_free waits for work that may still use
 * the memory only when frames leave the process. */
int mb_malloc(mb_client *c, size_t size, void **ptr);
int mb_free(mb_client *c, void *ptr);

/* Stream-ordered: stream is a cudaStream_t / CUstream (NULL: the legacy
 * default stream). On the host backend streams are accepted and ordering is
 * trivially satisfied. */
int mb_malloc_async(mb_client *c, size_t size, void *stream, void **ptr);
int mb_free_async(mb_client *c, void *ptr, void *stream);

/* Grow in place: reserve max_size bytes of address space, map size bytes
 * now; mb_grow makes more of the same range usable (no copy, the pointer
 * stays). A background thread keeps the range's mapped tail ahead of its
 * size, so mb_grow inside it makes no driver call; tails unused for
 * $MOONBRIGHT_IDLE_MS (default 2000) go back. Freed with mb_free. */
int mb_malloc_growable(mb_client *c, size_t size, size_t max_size, void **ptr);
int mb_grow(mb_client *c, void *ptr, size_t new_size);
/* Bytes usable at ptr (a live allocation's start), 0 if unknown. */
size_t mb_usable_size(mb_client *c, const void *ptr);

/* Sharing between processes. mb_export makes an unguessable capability
 * (32 random bytes from the daemon) for an allocation of its own range
 * (above 8 MiB, or growable); mb_export_to restricts it to one uid. Another
 * process passes it to mb_import, once, and maps the same memory. The
 * memory is released only when every holder has freed it; a token not yet
 * redeemed is revoked when the exporter frees the allocation or exits. */
typedef struct mb_share_token {
    uint8_t bytes[32];
} mb_share_token;
int mb_export(mb_client *c, void *ptr, mb_share_token *out);
int mb_export_to(mb_client *c, void *ptr, uint32_t uid, mb_share_token *out);
int mb_import(mb_client *c, const mb_share_token *t, void **ptr, size_t *size);

/* Return cached frames to the daemon until at most keep_bytes stay cached;
 * free vspace pages and the tails growable ranges mapped ahead go first. */
int mb_trim(mb_client *c, size_t keep_bytes);

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
    /* vspace page pools (all page sizes): extents of large frames mapped
     * once, carved into pages; refilled in the background */
    size_t vspace_pool_bytes;        /* mapped into the pools */
    size_t vspace_free_bytes;        /* ... of which free pages, ready to be taken */
    size_t vspace_extents;           /* mapped ranges (frames) behind the pools */
    uint64_t vspace_refill_waits;    /* maps that found too few free pages and
                                      * mapped memory before returning */
    /* growable ranges (mb_malloc_growable): tails mapped ahead of use */
    size_t grow_mapped_ahead;        /* mapped past the sizes asked for */
    uint64_t grow_waits;             /* mb_malloc_growable calls, and mb_grow calls
                                      * past the mapped tail: they mapped before
                                      * returning */
} mb_client_stats;
int mb_stats(mb_client *c, mb_client_stats *out);

/* Framework hooks (PyTorch CUDAPluggableAllocator, CuPy): connect lazily
 * to the daemon with the tenant $MOONBRIGHT_TENANT (default "torch"). */
#include <sys/types.h>
void *mb_torch_malloc(ssize_t size, int device, void *stream);
void mb_torch_free(void *ptr, ssize_t size, int device, void *stream);

/* Text for a status code; never NULL. */
const char *mb_strerror(int err);
/* The backend this client uses: "cuda" or "host". */
const char *mb_backend_name(const mb_client *c);

#ifdef __cplusplus
}
#endif
#endif
