/* torch_graph.c: CUDA graphs through the framework hook (torch_int.h).
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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "log.h"
#include "torch_int.h"

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
/* The pools open on each device (begun, not yet ended), innermost last:
 * a capture's, or a torch.cuda.MemPool's around it (graph_lock). */
#define POOLS_OPEN_MAX 8
static unsigned pools_open[MB_DEVICE_MAX + 1];
static uint64_t pool_ids[MB_DEVICE_MAX + 1][POOLS_OPEN_MAX][2];

/* Is work on stream being captured into a graph? Only asked of the driver
 * while the framework said a capture is under way on c's device. */
bool graph_capturing(mb_client *c, void *stream)
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
        unsigned k = pools_open[device];
        if (k)
            memcpy(b->pool, pool_ids[device][k - 1], sizeof(b->pool));
    }
    if (freed)
        __atomic_store_n(&b->freed, true, __ATOMIC_RELAXED);
    return 0;
}

void *graph_alloc(mb_client *c, int device, size_t size)
{
    void *p = NULL;
    int mode = c->be->ops->capture_relax(c->be);
    if (mb_malloc(c, size, &p) != 0)
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

bool graph_free(void *p, int device, bool cap)
{
    if (__atomic_load_n(&graph_n, __ATOMIC_RELAXED)) {
        pthread_rwlock_rdlock(&graph_lock);
        struct gblock *b = ptrmap_get(&graph_blocks, p);
        if (b)
            __atomic_store_n(&b->freed, true, __ATOMIC_RELAXED);
        pthread_rwlock_unlock(&graph_lock);
        if (b)
            return true;   /* the graph's until its pool is released */
    }
    if (!cap)
        return false;
    pthread_rwlock_wrlock(&graph_lock);   /* freed inside a capture: the graph's too */
    int rc = graph_keep_held(p, device, true);
    pthread_rwlock_unlock(&graph_lock);
    return rc == 0;
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
    mb_client *c = torch_client(device);
    if (!c)
        return;
    pthread_rwlock_wrlock(&graph_lock);
    unsigned k = pools_open[device];
    if (k < POOLS_OPEN_MAX) {
        pool_ids[device][k][0] = id0;
        pool_ids[device][k][1] = id1;
        pools_open[device] = k + 1;
        __atomic_fetch_add(&c->captures, 1, __ATOMIC_ACQ_REL);
    } else {
        mb_log(MB_LOG_ERR, "more than %d pools open at once on device %d: a graph captured now "
               "may have its memory handed out again", POOLS_OPEN_MAX, device);
    }
    pthread_rwlock_unlock(&graph_lock);
}

void mb_torch_end_pool(int device, uint64_t id0, uint64_t id1)
{
    if (device < 0 || device > MB_DEVICE_MAX)
        return;
    mb_client *c = torch_client_open(device);
    pthread_rwlock_wrlock(&graph_lock);
    for (unsigned k = pools_open[device]; c && k-- > 0;) {   /* the innermost with that id */
        if (pool_ids[device][k][0] != id0 || pool_ids[device][k][1] != id1)
            continue;
        memmove(pool_ids[device][k], pool_ids[device][k + 1],
                (pools_open[device] - k - 1) * sizeof(pool_ids[device][0]));
        pools_open[device]--;
        __atomic_fetch_sub(&c->captures, 1, __ATOMIC_ACQ_REL);
        break;
    }
    pthread_rwlock_unlock(&graph_lock);
}

void mb_torch_release_pool(int device, uint64_t id0, uint64_t id1)
{
    if (device < 0 || device > MB_DEVICE_MAX)
        return;
    mb_client *c = torch_client_open(device);
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
