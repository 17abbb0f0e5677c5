/* backend_cuda.c: the "cuda" backend: backend.h's contract on the CUDA driver
 * API (virtual memory management), with libcuda.so.1 loaded at run time so
 * binaries start on hosts without a driver. The only file that includes <cuda.h>. */
#include "backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include <moonbright/status.h>

#include "config.h"
#include "log.h"

/* Frames of any size (a multiple of the granularity) are created, exported,
 * imported and mapped the same way; which sizes the daemon creates is the
 * frame size policy in frame_plan.c. */

/* The driver entry points this backend calls, each with the CUDA version
 * whose signature <cuda.h> declares under its plain name (the newest one up
 * to CUDA 13.0). cuGetProcAddress is asked for exactly that version, so a
 * driver never hands back a newer entry point with another signature, and
 * the build checks each against cudaTypedefs.h. */
#define MB_CUDA_FUNCS(X)                                                                        \
    X(cuInit, 2000) X(cuDriverGetVersion, 2020) X(cuGetErrorString, 6000)                       \
    X(cuDeviceGetCount, 2000) X(cuDeviceGet, 2000) X(cuDeviceGetName, 2000)                     \
    X(cuDeviceGetAttribute, 2000) X(cuDevicePrimaryCtxRetain, 7000)                             \
    X(cuDevicePrimaryCtxRelease, 11000) X(cuCtxGetCurrent, 4000) X(cuCtxSetCurrent, 4000)       \
    X(cuCtxPushCurrent, 4000) X(cuCtxPopCurrent, 4000) X(cuMemGetAllocationGranularity, 10020)  \
    X(cuMemCreate, 10020) X(cuMemRelease, 10020) X(cuMemExportToShareableHandle, 10020)         \
    X(cuMemImportFromShareableHandle, 10020) X(cuMemAddressReserve, 10020)                      \
    X(cuMemAddressFree, 10020) X(cuMemMap, 10020) X(cuMemUnmap, 10020) X(cuMemSetAccess, 10020) \
    X(cuMemsetD8Async, 3020) X(cuStreamCreate, 2000) X(cuStreamDestroy, 4000)                   \
    X(cuStreamSynchronize, 2000) X(cuEventCreate, 2000) X(cuEventDestroy, 4000)                 \
    X(cuEventRecord, 2000) X(cuEventQuery, 2000) X(cuStreamQuery, 2000) X(cuMemHostAlloc, 2020) \
    X(cuMemFreeHost, 2000) X(cuMemHostGetDevicePointer, 3020) X(cuStreamWaitValue32, 11070)     \
    X(cuStreamWriteValue32, 11070) X(cuDeviceTotalMem, 3020) X(cuMemGetInfo, 3020)  \
    X(cuDeviceGetUuid, 11040) X(cuStreamIsCapturing, 10000)                                    \
    X(cuThreadExchangeStreamCaptureMode, 10010)

static struct {
#define X(name, ver) __typeof__(&name) p_##name;
    MB_CUDA_FUNCS(X)
#undef X
} cu;

#define X(name, ver)                                                                               \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&name), PFN_##name##_v##ver),           \
                   #name " as cudaTypedefs.h gives its version " #ver);
MB_CUDA_FUNCS(X)
#undef X

#define CU(name) (cu.p_##name)

/* cuCtxSynchronize is the one entry point whose CUDA 13 version has another
 * signature than <cuda.h>'s plain declaration: it takes the context to
 * synchronize (PFN_cuCtxSynchronize_v13000). Called as the old one, it read
 * a stray register as the context and failed now and then with "context
 * is destroyed". */
#if CUDA_VERSION >= 13000
#define CTX_SYNC_VERSION 13000
typedef PFN_cuCtxSynchronize_v13000 ctx_sync_fn;
#define CTX_SYNC(ctx) (g_ctx_sync(ctx))
#else
#define CTX_SYNC_VERSION 2000
typedef PFN_cuCtxSynchronize_v2000 ctx_sync_fn;
#define CTX_SYNC(ctx) ((void)(ctx), g_ctx_sync())
#endif
static ctx_sync_fn g_ctx_sync;

/* Result of loading the driver once: 0 or MB_EDEVICE, and why. */
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static int g_load_rc;
static int g_load_level;    /* MB_LOG_INFO when no driver is expected (no GPU), else WARN */
static char g_load_why[256];

/* Page size ceiling of reservations: see reserve_align(). */
#define CUDA_MAX_ALIGN ((size_t)1 << 30)

/* One scrub mapping: the private range a mem is mapped at for scrubbing. */
struct scrub_map {
    uint64_t h;
    CUdeviceptr va;
    size_t bytes;
    struct scrub_map *next;
};

struct cuda_priv {
    CUdevice dev;
    CUcontext ctx;          /* the device's primary context, retained */
    CUstream scrub_stream;  /* internal, non-blocking */
    pthread_mutex_t lock;   /* guards the scrub table */
    struct scrub_map **buckets;
    size_t nbuckets;        /* a power of two */
    size_t nmaps;           /* entries in the table; grows it at 2 * nbuckets */
    struct mb_mem anchor;   /* keep_exports_warm's frame (h 0: none) */
    pthread_mutex_t ev_lock;   /* guards ev_free */
    CUevent *ev_free;          /* events given back, for the next event_create */
    size_t n_ev_free;
    bool ev_pool;              /* off: MOONBRIGHT_EVENT_POOL=0 */
};

/* Events given back are kept for reuse, up to EVENT_POOL_MAX a backend: the
 * fences of stream-ordered frees are made and dropped on request paths, and
 * cuEventCreate / cuEventDestroy cost more there than a reuse. A kept event
 * may still be pending; recording it again supersedes that record, which
 * nobody waits on any more (a stream that waited on it captured the record
 * it saw when it was told to wait). */
#define EVENT_POOL_MAX 1024

static struct cuda_priv *P(mb_backend *b) { return b->priv; }

static const char *cu_errstr(CUresult r)
{
    const char *s = NULL;
    if (!CU(cuGetErrorString) || CU(cuGetErrorString)(r, &s) != CUDA_SUCCESS || !s)
        return "unknown CUDA error";
    return s;
}

static int cu_status(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return 0;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return MB_ENOMEM;
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
        return MB_EDEVICE;
    default:
        return MB_EBACKEND;
    }
}

/* Log "failed to <what>: <driver's text>" and map the result to a status. */
static int cu_fail(CUresult r, const char *what)
{
    mb_log(MB_LOG_ERR, "failed to %s: %s", what, cu_errstr(r));
    return cu_status(r);
}

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

/* The entry point of `name` at `version` (the signature we call it with). */
static int resolve(get_proc_fn get_proc, const char *name, int version, void **fn)
{
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = get_proc(name, fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (r == CUDA_SUCCESS && *fn && found == CU_GET_PROC_ADDRESS_SUCCESS)
        return 0;
    snprintf(g_load_why, sizeof(g_load_why), "driver lacks %s for CUDA %d (driver too old?)", name,
             version);
    return MB_EDEVICE;
}

static void load_driver(void)
{
    g_load_rc = MB_EDEVICE;
    g_load_level = MB_LOG_INFO;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(g_load_why, sizeof(g_load_why), "cannot load libcuda.so.1 (no NVIDIA driver?): %s",
                 dlerror());
        return;
    }
    g_load_level = MB_LOG_WARN;
    /* The CUDA 12+ form of cuGetProcAddress; older drivers lack it. */
    get_proc_fn get_proc;
    *(void **)&get_proc = dlsym(lib, "cuGetProcAddress_v2");
    if (!get_proc) {
        snprintf(g_load_why, sizeof(g_load_why),
                 "libcuda.so.1 has no cuGetProcAddress_v2: driver older than CUDA 12");
        return;
    }
#define X(name, ver)                                                                               \
    if (resolve(get_proc, #name, ver, (void **)&cu.p_##name) != 0)                                 \
        return;
    MB_CUDA_FUNCS(X)
#undef X
    if (resolve(get_proc, "cuCtxSynchronize", CTX_SYNC_VERSION, (void **)&g_ctx_sync) != 0)
        return;
    CUresult r = CU(cuInit)(0);
    if (r != CUDA_SUCCESS) {
        snprintf(g_load_why, sizeof(g_load_why), "cuInit failed: %s", cu_errstr(r));
        if (r == CUDA_ERROR_NO_DEVICE)
            g_load_level = MB_LOG_INFO;
        return;
    }
    g_load_rc = 0;
}

/* Make the backend's context current for the calling thread. Threads with no
 * context (or ours) keep ours current afterwards; a thread that had another
 * context current gets it back in ctx_leave(). */
static int ctx_enter(mb_backend *b, int *pushed)
{
    CUcontext cur = NULL;
    *pushed = 0;
    CUresult r = CU(cuCtxGetCurrent)(&cur);
    if (r == CUDA_SUCCESS && cur == P(b)->ctx)
        return 0;
    if (r == CUDA_SUCCESS && cur) {
        r = CU(cuCtxPushCurrent)(P(b)->ctx);
        *pushed = r == CUDA_SUCCESS;
    } else {
        r = CU(cuCtxSetCurrent)(P(b)->ctx);
    }
    return r == CUDA_SUCCESS ? 0 : cu_fail(r, "make the device's context current");
}

static void ctx_leave(int pushed)
{
    CUcontext prev;
    if (pushed)
        CU(cuCtxPopCurrent)(&prev);
}

#define ENTER(b)                                                                                   \
    int pushed_;                                                                                   \
    do {                                                                                           \
        int rc_ = ctx_enter((b), &pushed_);                                                        \
        if (rc_ != 0)                                                                              \
            return rc_;                                                                            \
    } while (0)
#define LEAVE() ctx_leave(pushed_)

static int check_size(mb_backend *b, size_t bytes, const char *what)
{
    if (bytes == 0 || bytes % b->granularity) {
        mb_log(MB_LOG_ERR, "failed to %s: size %zu is not a multiple of %zu", what, bytes,
               b->granularity);
        return MB_EINVAL;
    }
    return 0;
}

/* ---- scrub table: handle -> private mapping ---- */

static size_t scrub_slot(const struct cuda_priv *p, uint64_t h)
{
    return (size_t)((h * 0x9E3779B97F4A7C15ull) >> 32) & (p->nbuckets - 1);
}

/* Caller holds p->lock. Returns the entry, unlinked when `unlink` is set. */
static struct scrub_map *scrub_find(struct cuda_priv *p, uint64_t h, int unlink)
{
    if (!p->buckets)
        return NULL;
    for (struct scrub_map **pp = &p->buckets[scrub_slot(p, h)]; *pp; pp = &(*pp)->next) {
        struct scrub_map *e = *pp;
        if (e->h == h) {
            if (unlink) {
                *pp = e->next;
                p->nmaps--;
            }
            return e;
        }
    }
    return NULL;
}

/* Caller holds p->lock. */
static int scrub_insert(struct cuda_priv *p, struct scrub_map *e)
{
    if (!p->buckets || p->nmaps >= 2 * p->nbuckets) {
        size_t n = p->buckets ? p->nbuckets * 4 : 64;
        struct scrub_map **nb = calloc(n, sizeof(*nb));
        if (!nb)
            return MB_ENOMEM;
        struct scrub_map **old = p->buckets;
        size_t oldn = p->nbuckets;
        p->buckets = nb;
        p->nbuckets = n;
        for (size_t i = 0; i < oldn; i++) {
            while (old[i]) {
                struct scrub_map *m = old[i];
                old[i] = m->next;
                size_t s = scrub_slot(p, m->h);
                m->next = nb[s];
                nb[s] = m;
            }
        }
        free(old);
    }
    size_t s = scrub_slot(p, e->h);
    e->next = p->buckets[s];
    p->buckets[s] = e;
    p->nmaps++;
    return 0;
}

/* Context must be current. */
static void scrub_unmap(struct scrub_map *e)
{
    CUresult r = CU(cuMemUnmap)(e->va, e->bytes);
    if (r != CUDA_SUCCESS)
        cu_fail(r, "unmap a frame's scrub mapping");
    r = CU(cuMemAddressFree)(e->va, e->bytes);
    if (r != CUDA_SUCCESS)
        cu_fail(r, "free a frame's scrub range");
    free(e);
}

/* ---- frames ---- */

static int cuda_create(mb_backend *b, size_t bytes, struct mb_mem *out)
{
    int rc = check_size(b, bytes, "create frame");
    if (rc)
        return rc;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = P(b)->dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h = 0;
    ENTER(b);
    CUresult r = CU(cuMemCreate)(&h, bytes, &prop, 0);
    LEAVE();
    if (r != CUDA_SUCCESS) {
        /* A full device is the caller's to report (it may make room). */
        mb_log(r == CUDA_ERROR_OUT_OF_MEMORY ? MB_LOG_DEBUG : MB_LOG_ERR,
               "failed to create frame of %zu bytes: %s", bytes, cu_errstr(r));
        return cu_status(r);
    }
    out->h = (uint64_t)h;
    out->fd = -1;
    out->bytes = bytes;
    return 0;
}

static int cuda_export_fd(mb_backend *b, struct mb_mem *m)
{
    if (m->fd >= 0)
        return 0;
    int fd = -1;
    ENTER(b);
    CUresult r = CU(cuMemExportToShareableHandle)(&fd, (CUmemGenericAllocationHandle)m->h,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    LEAVE();
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "export frame to an fd");
    m->fd = fd;
    return 0;
}

static void cuda_unexport(mb_backend *b, struct mb_mem *m)
{
    if (m->fd >= 0)
        close(m->fd);
    m->fd = -1;
}

/* The imported handle keeps the memory alive: the fd is closed at once. */
static int cuda_import_fd(mb_backend *b, int fd, size_t bytes, struct mb_mem *out)
{
    if (fd < 0)
        return MB_EINVAL;
    int rc = check_size(b, bytes, "import frame");
    if (rc) {
        close(fd);
        return rc;
    }
    CUmemGenericAllocationHandle h = 0;
    int pushed;
    rc = ctx_enter(b, &pushed);
    if (rc) {
        close(fd);
        return rc;
    }
    CUresult r = CU(cuMemImportFromShareableHandle)(&h, (void *)(uintptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    ctx_leave(pushed);
    close(fd);
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "import frame from an fd");
    out->h = (uint64_t)h;
    out->fd = -1;
    out->bytes = bytes;
    return 0;
}

static void cuda_release(mb_backend *b, struct mb_mem *m)
{
    int pushed;
    if (ctx_enter(b, &pushed) == 0) {
        pthread_mutex_lock(&P(b)->lock);
        struct scrub_map *e = scrub_find(P(b), m->h, 1);
        pthread_mutex_unlock(&P(b)->lock);
        if (e)
            scrub_unmap(e);
        CUresult r = CU(cuMemRelease)((CUmemGenericAllocationHandle)m->h);
        if (r != CUDA_SUCCESS)
            cu_fail(r, "release frame");
        ctx_leave(pushed);
    }
    if (m->fd >= 0)
        close(m->fd);
    m->h = 0;
    m->fd = -1;
}

/* ---- virtual ranges ---- */

/* Reservations are aligned to the largest power of two not above their size,
 * between the granularity and 1 GiB: a range of one frame is aligned to its
 * own size (the slab finds a chunk's header from any pointer inside it), and
 * frames mapped largest first each land on a multiple of their own size. */
static size_t reserve_align(mb_backend *b, size_t bytes)
{
    size_t a = b->granularity;
    while (a < CUDA_MAX_ALIGN && a * 2 <= bytes)
        a *= 2;
    return a;
}

static int cuda_reserve(mb_backend *b, size_t bytes, void **va)
{
    int rc = check_size(b, bytes, "reserve a range");
    if (rc)
        return rc;
    CUdeviceptr p = 0;
    ENTER(b);
    CUresult r = CU(cuMemAddressReserve)(&p, bytes, reserve_align(b, bytes), 0, 0);
    LEAVE();
    if (r != CUDA_SUCCESS) {
        mb_log(MB_LOG_ERR, "failed to reserve %zu bytes: %s", bytes, cu_errstr(r));
        return cu_status(r);
    }
    *va = (void *)(uintptr_t)p;
    return 0;
}

static void cuda_free_va(mb_backend *b, void *va, size_t bytes)
{
    int pushed;
    if (!va || ctx_enter(b, &pushed) != 0)
        return;
    CUresult r = CU(cuMemAddressFree)((CUdeviceptr)(uintptr_t)va, bytes);
    ctx_leave(pushed);
    if (r != CUDA_SUCCESS)
        cu_fail(r, "free a reserved range");
}

static int cuda_map(mb_backend *b, void *va, const struct mb_mem *m)
{
    ENTER(b);
    CUresult r = CU(cuMemMap)((CUdeviceptr)(uintptr_t)va, m->bytes, 0,
                              (CUmemGenericAllocationHandle)m->h, 0);
    LEAVE();
    if (r != CUDA_SUCCESS) {
        mb_log(MB_LOG_ERR, "failed to map frame at %p: %s", va, cu_errstr(r));
        return r == CUDA_ERROR_OUT_OF_MEMORY ? MB_ELIMIT : cu_status(r);
    }
    return 0;
}

static int cuda_set_access(mb_backend *b, void *va, size_t bytes)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = P(b)->dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ENTER(b);
    CUresult r = CU(cuMemSetAccess)((CUdeviceptr)(uintptr_t)va, bytes, &d, 1);
    LEAVE();
    if (r != CUDA_SUCCESS) {
        mb_log(MB_LOG_ERR, "failed to set access on %p+%zu: %s", va, bytes, cu_errstr(r));
        return r == CUDA_ERROR_OUT_OF_MEMORY ? MB_ELIMIT : cu_status(r);
    }
    return 0;
}

static int cuda_unmap(mb_backend *b, void *va, size_t bytes)
{
    ENTER(b);
    CUresult r = CU(cuMemUnmap)((CUdeviceptr)(uintptr_t)va, bytes);
    LEAVE();
    if (r != CUDA_SUCCESS) {
        mb_log(MB_LOG_ERR, "failed to unmap %p+%zu: %s", va, bytes, cu_errstr(r));
        return cu_status(r);
    }
    return 0;
}

/* ---- fills ---- */

/* Context must be current. Maps m into a private range on first use. */
static int scrub_va(mb_backend *b, struct mb_mem *m, CUdeviceptr *va)
{
    struct cuda_priv *p = P(b);
    pthread_mutex_lock(&p->lock);
    struct scrub_map *e = scrub_find(p, m->h, 0);
    if (e)
        *va = e->va;
    pthread_mutex_unlock(&p->lock);
    if (e)
        return 0;

    e = calloc(1, sizeof(*e));
    if (!e)
        return MB_ENOMEM;
    e->h = m->h;
    e->bytes = m->bytes;
    CUresult r = CU(cuMemAddressReserve)(&e->va, m->bytes, reserve_align(b, m->bytes), 0, 0);
    if (r != CUDA_SUCCESS) {
        free(e);
        return cu_fail(r, "reserve a scrub range");
    }
    r = CU(cuMemMap)(e->va, m->bytes, 0, (CUmemGenericAllocationHandle)m->h, 0);
    if (r != CUDA_SUCCESS) {
        CU(cuMemAddressFree)(e->va, m->bytes);
        free(e);
        return cu_fail(r, "map a frame for scrubbing");
    }
    CUmemAccessDesc d;
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = p->dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = CU(cuMemSetAccess)(e->va, m->bytes, &d, 1);
    if (r != CUDA_SUCCESS) {
        scrub_unmap(e);
        return cu_fail(r, "set access on a scrub mapping");
    }
    pthread_mutex_lock(&p->lock);
    struct scrub_map *raced = scrub_find(p, m->h, 0);
    int rc = raced ? 0 : scrub_insert(p, e);
    if (raced)
        *va = raced->va;
    else if (rc == 0)
        *va = e->va;
    pthread_mutex_unlock(&p->lock);
    if (raced || rc)
        scrub_unmap(e);
    return rc;
}

static int cuda_scrub(mb_backend *b, struct mb_mem *m)
{
    CUdeviceptr va = 0;
    ENTER(b);
    int rc = scrub_va(b, m, &va);
    if (rc == 0) {
        CUresult r = CU(cuMemsetD8Async)(va, 0, m->bytes, P(b)->scrub_stream);
        if (r == CUDA_SUCCESS)
            r = CU(cuStreamSynchronize)(P(b)->scrub_stream);
        if (r != CUDA_SUCCESS)
            rc = cu_fail(r, "scrub frame");
    }
    LEAVE();
    return rc;
}

static int cuda_memset(mb_backend *b, void *va, int value, size_t bytes, void *stream)
{
    ENTER(b);
    CUresult r = CU(cuMemsetD8Async)((CUdeviceptr)(uintptr_t)va, (unsigned char)value, bytes,
                                     (CUstream)stream);
    LEAVE();
    if (r != CUDA_SUCCESS) {
        mb_log(MB_LOG_ERR, "failed to memset %p+%zu: %s", va, bytes, cu_errstr(r));
        return cu_status(r);
    }
    return 0;
}

/* ---- streams and events ---- */

static int cuda_event_create(mb_backend *b, void **ev)
{
    struct cuda_priv *p = P(b);
    if (p->ev_pool) {
        pthread_mutex_lock(&p->ev_lock);
        CUevent kept = p->n_ev_free ? p->ev_free[--p->n_ev_free] : NULL;
        pthread_mutex_unlock(&p->ev_lock);
        if (kept) {
            *ev = kept;
            return 0;
        }
    }
    CUevent e;
    ENTER(b);
    CUresult r = CU(cuEventCreate)(&e, CU_EVENT_DISABLE_TIMING);
    LEAVE();
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "create event");
    *ev = e;
    return 0;
}

static void cuda_event_destroy(mb_backend *b, void *ev)
{
    struct cuda_priv *p = P(b);
    if (ev && p->ev_pool) {
        pthread_mutex_lock(&p->ev_lock);
        bool kept = p->n_ev_free < EVENT_POOL_MAX;
        if (kept)
            p->ev_free[p->n_ev_free++] = ev;
        pthread_mutex_unlock(&p->ev_lock);
        if (kept)
            return;
    }
    int pushed;
    if (!ev || ctx_enter(b, &pushed) != 0)
        return;
    CUresult r = CU(cuEventDestroy)((CUevent)ev);
    ctx_leave(pushed);
    if (r != CUDA_SUCCESS)
        cu_fail(r, "destroy event");
}

static int cuda_event_record(mb_backend *b, void *ev, void *stream)
{
    ENTER(b);
    CUresult r = CU(cuEventRecord)((CUevent)ev, (CUstream)stream);
    LEAVE();
    return r == CUDA_SUCCESS ? 0 : cu_fail(r, "record event");
}

/* A query's answer: 1 complete, 0 pending, <0 the error (logged). */
static int query_result(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return 1;
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    return cu_fail(r, what);
}

static int cuda_event_query(mb_backend *b, void *ev)
{
    ENTER(b);
    CUresult r = CU(cuEventQuery)((CUevent)ev);
    LEAVE();
    return query_result(r, "query event");
}

static int cuda_stream_sync(mb_backend *b, void *stream)
{
    ENTER(b);
    CUresult r = CU(cuStreamSynchronize)((CUstream)stream);
    LEAVE();
    return r == CUDA_SUCCESS ? 0 : cu_fail(r, "synchronize stream");
}

static int cuda_stream_query(mb_backend *b, void *stream)
{
    ENTER(b);
    CUresult r = CU(cuStreamQuery)((CUstream)stream);
    LEAVE();
    return query_result(r, "query stream");
}

static int cuda_device_sync(mb_backend *b)
{
    ENTER(b);
    CUresult r = CTX_SYNC(P(b)->ctx);
    LEAVE();
    return r == CUDA_SUCCESS ? 0 : cu_fail(r, "synchronize the device");
}

static int cuda_stream_capturing(mb_backend *b, void *stream)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    ENTER(b);
    CUresult r = CU(cuStreamIsCapturing)((CUstream)stream, &st);
    LEAVE();
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "ask whether a stream captures");
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static int cuda_capture_relax(mb_backend *b)
{
    (void)b;
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (CU(cuThreadExchangeStreamCaptureMode)(&m) != CUDA_SUCCESS)
        return -1;
    return (int)m;
}

static void cuda_capture_restore(mb_backend *b, int mode)
{
    (void)b;
    CUstreamCaptureMode m = (CUstreamCaptureMode)mode;
    if (mode >= 0)
        CU(cuThreadExchangeStreamCaptureMode)(&m);
}

static int cuda_mem_free(mb_backend *b, uint64_t *bytes)
{
    size_t free_b = 0, total = 0;
    ENTER(b);
    CUresult r = CU(cuMemGetInfo)(&free_b, &total);
    LEAVE();
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "read the device's free memory");
    *bytes = free_b;
    return 0;
}

/* ---- stream memory operations ---- */

static int cuda_host_mapped_alloc(mb_backend *b, size_t bytes, void **host, uint64_t *dev)
{
    void *h = NULL;
    CUdeviceptr d = 0;
    ENTER(b);
    CUresult r = CU(cuMemHostAlloc)(&h, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    if (r == CUDA_SUCCESS) {
        r = CU(cuMemHostGetDevicePointer)(&d, h, 0);
        if (r != CUDA_SUCCESS)
            CU(cuMemFreeHost)(h);
    }
    LEAVE();
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "allocate device-mapped host memory");
    memset(h, 0, bytes);
    *host = h;
    *dev = (uint64_t)d;
    return 0;
}

static void cuda_host_mapped_free(mb_backend *b, void *host)
{
    int pushed;
    if (!host || ctx_enter(b, &pushed) != 0)
        return;
    CUresult r = CU(cuMemFreeHost)(host);
    ctx_leave(pushed);
    if (r != CUDA_SUCCESS)
        cu_fail(r, "free device-mapped host memory");
}

static int cuda_stream_wait_value32(mb_backend *b, void *stream, uint64_t dev, uint32_t value)
{
    ENTER(b);
    CUresult r = CU(cuStreamWaitValue32)((CUstream)stream, (CUdeviceptr)dev, value,
                                         CU_STREAM_WAIT_VALUE_GEQ);
    LEAVE();
    return r == CUDA_SUCCESS ? 0 : cu_fail(r, "enqueue a wait on a stream");
}

static int cuda_stream_write_value32(mb_backend *b, void *stream, uint64_t dev, uint32_t value)
{
    ENTER(b);
    CUresult r = CU(cuStreamWriteValue32)((CUstream)stream, (CUdeviceptr)dev, value,
                                          CU_STREAM_WRITE_VALUE_DEFAULT);
    LEAVE();
    return r == CUDA_SUCCESS ? 0 : cu_fail(r, "enqueue a value write on a stream");
}

/* ---- open and close ---- */

/* One frame of the granularity, exported, its fd held until close. */
static int cuda_keep_exports_warm(mb_backend *b)
{
    struct cuda_priv *p = P(b);
    if (p->anchor.h)
        return 0;
    struct mb_mem m = MB_MEM_INIT;
    int rc = cuda_create(b, b->granularity, &m);
    if (rc == 0 && (rc = cuda_export_fd(b, &m)) != 0)
        cuda_release(b, &m);
    if (rc == 0)
        p->anchor = m;
    return rc;
}

static void cuda_close(mb_backend *b)
{
    struct cuda_priv *p = P(b);
    if (p->anchor.h)
        cuda_release(b, &p->anchor);
    int pushed;
    if (ctx_enter(b, &pushed) == 0) {
        for (size_t i = 0; i < p->nbuckets; i++) {
            while (p->buckets[i]) {
                struct scrub_map *e = p->buckets[i];
                p->buckets[i] = e->next;
                scrub_unmap(e);
            }
        }
        if (p->scrub_stream)
            CU(cuStreamDestroy)(p->scrub_stream);
        while (p->n_ev_free)
            CU(cuEventDestroy)(p->ev_free[--p->n_ev_free]);
        ctx_leave(pushed);
    }
    CUcontext cur = NULL;
    if (CU(cuCtxGetCurrent)(&cur) == CUDA_SUCCESS && cur == p->ctx)
        CU(cuCtxSetCurrent)(NULL);
    CU(cuDevicePrimaryCtxRelease)(p->dev);
    free(p->buckets);
    free(p->ev_free);
    pthread_mutex_destroy(&p->ev_lock);
    pthread_mutex_destroy(&p->lock);
    free(p);
    free(b);
}

static const struct mb_backend_ops cuda_ops = {
    .create = cuda_create,
    .export_fd = cuda_export_fd,
    .unexport = cuda_unexport,
    .import_fd = cuda_import_fd,
    .release = cuda_release,
    .reserve = cuda_reserve,
    .free_va = cuda_free_va,
    .map = cuda_map,
    .set_access = cuda_set_access,
    .unmap = cuda_unmap,
    .scrub = cuda_scrub,
    .memset = cuda_memset,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .stream_sync = cuda_stream_sync,
    .stream_query = cuda_stream_query,
    .device_sync = cuda_device_sync,
    .stream_capturing = cuda_stream_capturing,
    .capture_relax = cuda_capture_relax,
    .capture_restore = cuda_capture_restore,
    .mem_free = cuda_mem_free,
    .close = cuda_close,
    .keep_exports_warm = cuda_keep_exports_warm,
    .host_mapped_alloc = cuda_host_mapped_alloc,
    .host_mapped_free = cuda_host_mapped_free,
    .stream_wait_value32 = cuda_stream_wait_value32,
    .stream_write_value32 = cuda_stream_write_value32,
};

/* Checks that make a device unusable for this backend; 0 when usable. */
static int probe_device(int device, CUdevice *dev, char *name, size_t name_len)
{
    int count = 0;
    CUresult r = CU(cuDeviceGetCount)(&count);
    if (r != CUDA_SUCCESS || count == 0) {
        mb_log(MB_LOG_WARN, "cuda backend unusable: no CUDA device (%s)",
               r != CUDA_SUCCESS ? cu_errstr(r) : "count is 0");
        return MB_EDEVICE;
    }
    if (device < 0 || device >= count) {
        mb_log(MB_LOG_WARN, "cuda backend unusable: no device %d (this host has %d)", device,
               count);
        return MB_EDEVICE;
    }
    r = CU(cuDeviceGet)(dev, device);
    if (r != CUDA_SUCCESS) {
        mb_log(MB_LOG_WARN, "cuda backend unusable: device %d: %s", device, cu_errstr(r));
        return MB_EDEVICE;
    }
    if (CU(cuDeviceGetName)(name, (int)name_len, *dev) != CUDA_SUCCESS)
        snprintf(name, name_len, "?");
    int vmm = 0, posix_fd = 0;
    CU(cuDeviceGetAttribute)(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, *dev);
    CU(cuDeviceGetAttribute)(&posix_fd,
                             CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, *dev);
    if (!vmm || !posix_fd) {
        mb_log(MB_LOG_WARN, "cuda backend unusable: device %d (%s) lacks %s", device, name,
               !vmm ? "virtual memory management" : "POSIX-fd memory handles");
        return MB_EDEVICE;
    }
    return 0;
}

int mb_backend_cuda_find(const uint8_t uuid[MB_UUID_BYTES], int *ordinal)
{
    pthread_once(&g_load_once, load_driver);
    if (g_load_rc != 0) {
        mb_log(g_load_level, "cuda backend unusable: %s", g_load_why);
        return g_load_rc;
    }
    int count = 0;
    CUresult r = CU(cuDeviceGetCount)(&count);
    if (r != CUDA_SUCCESS) {
        mb_log(MB_LOG_WARN, "cuda backend unusable: %s", cu_errstr(r));
        return MB_EDEVICE;
    }
    for (int i = 0; i < count; i++) {
        CUdevice dev;
        CUuuid id;
        if (CU(cuDeviceGet)(&dev, i) == CUDA_SUCCESS &&
            CU(cuDeviceGetUuid)(&id, dev) == CUDA_SUCCESS &&
            memcmp(id.bytes, uuid, MB_UUID_BYTES) == 0) {
            *ordinal = i;
            return 0;
        }
    }
    return MB_ENOENT;
}

int mb_backend_cuda_open(int device, mb_backend **out)
{
    pthread_once(&g_load_once, load_driver);
    if (g_load_rc != 0) {
        /* No driver is normal on CPU hosts; a broken one is worth a warning. */
        mb_log(g_load_level, "cuda backend unusable: %s", g_load_why);
        return g_load_rc;
    }
    CUdevice dev;
    char name[128];
    int rc = probe_device(device, &dev, name, sizeof(name));
    if (rc)
        return rc;
    CUuuid id;
    CUresult ru = CU(cuDeviceGetUuid)(&id, dev);
    if (ru != CUDA_SUCCESS) {
        mb_log(MB_LOG_WARN, "cuda backend unusable: device %d's UUID: %s", device, cu_errstr(ru));
        return MB_EDEVICE;
    }

    mb_backend *b = calloc(1, sizeof(*b));
    struct cuda_priv *p = calloc(1, sizeof(*p));
    if (!b || !p) {
        free(b);
        free(p);
        return MB_ENOMEM;
    }
    p->dev = dev;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->ev_lock, NULL);
    p->ev_pool = mb_env_long("MOONBRIGHT_EVENT_POOL", 1, 0, 1) != 0 &&
                 (p->ev_free = malloc(EVENT_POOL_MAX * sizeof(*p->ev_free))) != NULL;
    b->name = "cuda";
    b->device = device;
    _Static_assert(sizeof(id.bytes) == MB_UUID_BYTES, "a CUuuid is 16 bytes");
    memcpy(b->uuid, id.bytes, MB_UUID_BYTES);
    b->ops = &cuda_ops;
    b->priv = p;

    CUresult r = CU(cuDevicePrimaryCtxRetain)(&p->ctx, dev);
    if (r != CUDA_SUCCESS) {
        /* (out of memory: the caller may make room and try again, and says so) */
        mb_log(r == CUDA_ERROR_OUT_OF_MEMORY ? MB_LOG_INFO : MB_LOG_WARN,
               "cuda backend unusable: failed to retain device %d's context: %s", device,
               cu_errstr(r));
        free(p->ev_free);
        pthread_mutex_destroy(&p->ev_lock);
        pthread_mutex_destroy(&p->lock);
        free(p);
        free(b);
        /* A context needs device memory: a full device may have room again
         * soon (the caller may wait for it). */
        return r == CUDA_ERROR_OUT_OF_MEMORY ? MB_ENOMEM : MB_EDEVICE;
    }

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0, recommended = 0;
    int pushed;
    rc = ctx_enter(b, &pushed);
    if (rc == 0) {
        r = CU(cuMemGetAllocationGranularity)(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r == CUDA_SUCCESS)
            r = CU(cuMemGetAllocationGranularity)(&recommended, &prop,
                                                  CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
        if (r != CUDA_SUCCESS) {
            rc = cu_fail(r, "query allocation granularity");
        } else if (gran == 0 || (gran & (gran - 1))) {
            mb_log(MB_LOG_ERR, "cuda backend unusable: granularity %zu is not a power of two",
                   gran);
            rc = MB_EBACKEND;
        }
        if (rc == 0) {
            r = CU(cuStreamCreate)(&p->scrub_stream, CU_STREAM_NON_BLOCKING);
            if (r != CUDA_SUCCESS)
                rc = cu_fail(r, "create the scrub stream");
        }
        ctx_leave(pushed);
    }
    if (rc) {
        b->granularity = gran ? gran : 1;
        cuda_close(b);
        return rc;
    }
    b->granularity = gran;
    size_t total = 0;
    if (CU(cuDeviceTotalMem)(&total, p->dev) == CUDA_SUCCESS)
        b->total_bytes = total;
    mb_log(MB_LOG_INFO,
           "cuda backend: device %d (%s), frame granularity %zu KiB (recommended %zu KiB)", device,
           name, gran >> 10, recommended >> 10);
    *out = b;
    return 0;
}
