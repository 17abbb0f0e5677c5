/* torch.c: drop-in hooks for frameworks: the pair of C symbols PyTorch's
 * CUDAPluggableAllocator loads (also usable from CuPy through ctypes). One
 * client per device the process allocates on, opened on first use with
 * $MOONBRIGHT_TENANT, from the daemon that serves that GPU. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "client.h"
#include "log.h"
#include "refill.h"

static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
/* One client per device the framework allocates on (its ordinal in this
 * process), opened on first use; a device no daemon serves is tried once. */
static mb_client *hook_clients[MB_DEVICE_MAX + 1];
static bool hook_failed[MB_DEVICE_MAX + 1];
static bool hook_exit_registered;

/* The hook's clients are never closed: the framework may free into them
 * until the very end. But the CUDA runtime destroys the devices' contexts
 * at exit (its handler was registered before this one, so it runs after),
 * and the clients' background threads must not call the driver after
 * that: they stop here. Requests still work, with no background step; the
 * daemons take the frames back when the process is gone. */
static void hook_at_exit(void)
{
    for (int d = 0; d <= MB_DEVICE_MAX; d++) {
        mb_client *c = __atomic_load_n(&hook_clients[d], __ATOMIC_ACQUIRE);
        if (c) {
            maint_stop(c);
            refill_stop(c);
        }
    }
}

/* The client of this process's device `device`: the daemon that serves
 * that GPU (mb_open_device), whatever its index. */
static mb_client *hook(int device)
{
    if (device < 0 || device > MB_DEVICE_MAX)
        return NULL;
    mb_client *c = __atomic_load_n(&hook_clients[device], __ATOMIC_ACQUIRE);
    if (c)
        return c;
    pthread_mutex_lock(&hook_lock);
    if (!hook_clients[device] && !hook_failed[device]) {
        const char *t = getenv("MOONBRIGHT_TENANT");
        int rc = mb_open_device(&c, t && *t ? t : "torch", device);
        if (rc) {
            hook_failed[device] = true;
            mb_log(MB_LOG_ERR, "failed to connect the framework allocator of device %d to "
                   "moonbrightd: %s", device, mb_strerror(rc));
        } else {
            __atomic_store_n(&hook_clients[device], c, __ATOMIC_RELEASE);
            if (!hook_exit_registered) {
                hook_exit_registered = true;
                if (atexit(hook_at_exit) != 0)
                    mb_log(MB_LOG_WARN, "failed to register the framework allocator's exit handler");
            }
        }
    }
    c = hook_clients[device];
    pthread_mutex_unlock(&hook_lock);
    return c;
}

/* ---- CUDA graphs ----
 *
 * While a stream captures, what the framework allocates or frees on it
 * belongs to the graph: the graph writes that memory at every replay, so
 * it must not go to anyone else until the graph is gone. Such blocks are
 * kept in `graph_blocks` (pointer -> struct gblock) under the pool
 * PyTorch named at the capture's begin (mb_torch_begin_pool); a free of
 * one only marks it, and mb_torch_release_pool (the graph reset or
 * destroyed) frees the marked ones and lets go of the rest. Allocations
 * on a capturing stream take memory free of every stream's earlier work
 * (mb_malloc: no event is recorded or queried on the capturing stream)
 * with the thread's capture mode relaxed, as PyTorch's own allocator does
 * around cudaMalloc. Without the pool hooks (an older PyTorch, CuPy)
 * nothing is known to capture, and graph blocks would be pool 0, never
 * released. Invariant: a pointer is in graph_blocks at most once, and a
 * block marked freed is not in any tier of its client. */
struct gblock {
    int device;
    uint64_t pool[2];
    bool freed;
};

/* Frees look blocks up under the read lock (every free does while any
 * graph block exists); the rest takes the write lock. */
static pthread_rwlock_t graph_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct ptrmap graph_blocks;
static size_t graph_n;                           /* entries (atomic reads: a free's fast path) */
static bool pool_on[MB_DEVICE_MAX + 1];          /* a capture's pool is open (graph_lock) */
static uint64_t pool_id[MB_DEVICE_MAX + 1][2];

/* Is work on stream being captured into a graph? Only asked of the driver
 * while the framework said a capture is under way on c's device. */
static bool capturing(mb_client *c, void *stream)
{
    if (!__atomic_load_n(&c->captures, __ATOMIC_ACQUIRE) || !c->be->ops->stream_capturing)
        return false;
    return c->be->ops->stream_capturing(c->be, stream) == 1;
}

/* Keep p for the pool open on device (pool 0 when none is), marked freed
 * once the framework gave it back. graph_lock held for writing. */
static int graph_keep_held(void *p, int device, bool freed)
{
    struct gblock *b = ptrmap_get(&graph_blocks, p);
    if (!b) {
        if (!(b = calloc(1, sizeof(*b))))
            return MB_ENOMEM;
        if (ptrmap_put(&graph_blocks, p, b) != 0) {
            free(b);
            return MB_ENOMEM;
        }
        __atomic_store_n(&graph_n, graph_n + 1, __ATOMIC_RELAXED);
        b->device = device;
        if (pool_on[device])
            memcpy(b->pool, pool_id[device], sizeof(b->pool));
    }
    if (freed)
        __atomic_store_n(&b->freed, true, __ATOMIC_RELAXED);
    return 0;
}

void *mb_torch_malloc(ssize_t size, int device, void *stream)
{
    mb_client *c = size > 0 ? hook(device) : NULL;
    void *p = NULL;
    if (!c)
        return NULL;   /* (a device no daemon serves: logged once by hook) */
    if (!capturing(c, stream)) {
        if (mb_malloc_async(c, (size_t)size, stream, &p) != 0)
            p = NULL;
        return p;
    }
    int mode = c->be->ops->capture_relax(c->be);
    if (mb_malloc(c, (size_t)size, &p) != 0)
        p = NULL;
    c->be->ops->capture_restore(c->be, mode);
    pthread_rwlock_wrlock(&graph_lock);
    int rc = p ? graph_keep_held(p, device, false) : 0;
    pthread_rwlock_unlock(&graph_lock);
    if (rc != 0) {
        mb_free(c, p);   /* untracked, it could be handed out under the graph */
        p = NULL;
    }
    return p;
}

void mb_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;
    mb_client *c = device >= 0 && device <= MB_DEVICE_MAX
                       ? __atomic_load_n(&hook_clients[device], __ATOMIC_ACQUIRE)
                       : NULL;
    if (!ptr)
        return;
    bool cap = c && capturing(c, stream);
    if (c && __atomic_load_n(&graph_n, __ATOMIC_RELAXED)) {
        pthread_rwlock_rdlock(&graph_lock);
        struct gblock *b = ptrmap_get(&graph_blocks, ptr);
        if (b)
            __atomic_store_n(&b->freed, true, __ATOMIC_RELAXED);
        pthread_rwlock_unlock(&graph_lock);
        if (b)
            return;   /* the graph's until its pool is released */
    }
    if (cap) {   /* freed inside a capture: the graph's too */
        pthread_rwlock_wrlock(&graph_lock);
        int rc = graph_keep_held(ptr, device, true);
        pthread_rwlock_unlock(&graph_lock);
        if (rc == 0)
            return;
    }
    int rc = c ? mb_free_async(c, ptr, stream) : MB_ENOENT;
    if (rc)
        mb_log(MB_LOG_ERR, "failed to free %p of device %d from the framework: %s", ptr, device,
               mb_strerror(rc));
}

/* PyTorch's CUDAPluggableAllocator pool hooks, registered by
 * moonbright_torch.enable (set_begin_allocate_to_pool and the two after
 * it). They are called as C++ functions taking (int device, MempoolId_t
 * id, std::function filter): the id, a pair of two 64-bit integers, comes
 * in two registers and the filter as a pointer (the x86-64 and AArch64
 * C++ ABIs), which these C signatures read; the filter is not used (the
 * stream's own capture status decides). */
void mb_torch_begin_pool(int device, uint64_t id0, uint64_t id1, void *filter)
{
    (void)filter;
    mb_client *c = hook(device);
    if (!c)
        return;
    pthread_rwlock_wrlock(&graph_lock);
    if (!pool_on[device])
        __atomic_fetch_add(&c->captures, 1, __ATOMIC_ACQ_REL);
    pool_on[device] = true;
    pool_id[device][0] = id0;
    pool_id[device][1] = id1;
    pthread_rwlock_unlock(&graph_lock);
}

void mb_torch_end_pool(int device, uint64_t id0, uint64_t id1)
{
    if (device < 0 || device > MB_DEVICE_MAX)
        return;
    mb_client *c = __atomic_load_n(&hook_clients[device], __ATOMIC_ACQUIRE);
    pthread_rwlock_wrlock(&graph_lock);
    if (c && pool_on[device] && pool_id[device][0] == id0 && pool_id[device][1] == id1) {
        pool_on[device] = false;
        __atomic_fetch_sub(&c->captures, 1, __ATOMIC_ACQ_REL);
    }
    pthread_rwlock_unlock(&graph_lock);
}

void mb_torch_release_pool(int device, uint64_t id0, uint64_t id1)
{
    if (device < 0 || device > MB_DEVICE_MAX)
        return;
    mb_client *c = __atomic_load_n(&hook_clients[device], __ATOMIC_ACQUIRE);
    size_t n = 0;
    void **gone = NULL;
    pthread_rwlock_wrlock(&graph_lock);
    if (graph_blocks.n)
        gone = malloc(graph_blocks.n * sizeof(*gone));
    for (size_t i = 0; i < graph_blocks.cap; i++) {
        struct ptrmap_slot *sl = &graph_blocks.slots[i];
        struct gblock *b = sl->key > 1 ? sl->val : NULL;
        if (!b || b->device != device || b->pool[0] != id0 || b->pool[1] != id1)
            continue;
        void *p = (void *)sl->key;
        bool freed = __atomic_load_n(&b->freed, __ATOMIC_RELAXED);
        if (freed && gone)
            gone[n++] = p;
        else if (freed)
            continue;   /* out of memory for the list: kept, as before */
        ptrmap_del(&graph_blocks, p);
        free(b);
        __atomic_store_n(&graph_n, graph_n - 1, __ATOMIC_RELAXED);
    }
    pthread_rwlock_unlock(&graph_lock);
    /* Freed as cudaFree would (not reused before work queued on the
     * legacy stream has finished): the graph is reset or destroyed. */
    for (size_t i = 0; c && i < n; i++) {
        int rc = mb_free(c, gone[i]);
        if (rc)
            mb_log(MB_LOG_ERR, "failed to free %p of a released graph pool: %s", gone[i],
                   mb_strerror(rc));
    }
    free(gone);
}
