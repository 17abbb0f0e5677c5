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
/* The pools open on each device (begun, not yet ended), innermost last:
 * a capture's, or a torch.cuda.MemPool's around it (graph_lock). */
#define POOLS_OPEN_MAX 8
static unsigned pools_open[MB_DEVICE_MAX + 1];
static uint64_t pool_ids[MB_DEVICE_MAX + 1][POOLS_OPEN_MAX][2];

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
        unsigned k = pools_open[device];
        if (k)
            memcpy(b->pool, pool_ids[device][k - 1], sizeof(b->pool));
    }
    if (freed)
        __atomic_store_n(&b->freed, true, __ATOMIC_RELAXED);
    return 0;
}

/* ---- tensor.record_stream ----
 *
 * A tensor used on streams other than its own (record_stream) must not be
 * reused before that work is done, though the framework frees it on its
 * own stream, where stream-ordered reuse would hand it out at once.
 * `recorded` maps such a pointer to the streams named; its free then
 * records an event on each of them and on the freeing stream, and the
 * block goes back (mb_free) only once every event completed: `deferred`,
 * a queue polled by the next hook calls, a few entries at a time. No
 * stream is used after the call that named it, and none is made to wait.
 * Invariant: a pointer is in `recorded` or in `deferred`, not both, and a
 * deferred block is in no tier of its client. */
struct rec_streams {
    size_t n;
    void *streams[];
};
struct deferred_free {
    mb_client *c;
    void *p;
    size_t n_ev;
    struct deferred_free *next;
    void *ev[];
};

#define DEFERRED_POLL 8   /* deferred frees one hook call looks at, at most */

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ptrmap recorded;
static size_t rec_n, deferred_n;   /* entries (atomic reads: the calls' fast paths) */
static struct deferred_free *deferred, **deferred_tail = &deferred;

void mb_torch_record_stream(void *ptr, void *stream)
{
    if (!ptr)
        return;
    pthread_mutex_lock(&rec_lock);
    struct rec_streams *r = ptrmap_get(&recorded, ptr), *nr;
    for (size_t i = 0; r && i < r->n; i++)
        if (r->streams[i] == stream) {
            pthread_mutex_unlock(&rec_lock);
            return;
        }
    size_t n = r ? r->n : 0;
    if ((nr = realloc(r, sizeof(*nr) + (n + 1) * sizeof(nr->streams[0]))) != NULL) {
        nr->n = n + 1;
        nr->streams[n] = stream;
        if (nr != r && (r ? (ptrmap_del(&recorded, ptr), ptrmap_put(&recorded, ptr, nr))
                          : ptrmap_put(&recorded, ptr, nr)) != 0) {
            free(nr);
            nr = NULL;
        }
    }
    if (!nr)
        mb_log(MB_LOG_ERR, "out of memory recording stream %p for %p: it may be reused before "
               "that stream's work is done", stream, ptr);
    __atomic_store_n(&rec_n, recorded.n, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rec_lock);
}

/* Give back the deferred frees whose events all completed (at most
 * DEFERRED_POLL looked at; all when `all`). No lock held. */
static void deferred_poll(bool all)
{
    struct deferred_free *done = NULL;
    pthread_mutex_lock(&rec_lock);
    int looked = 0;
    for (struct deferred_free **pp = &deferred; *pp && (all || looked < DEFERRED_POLL); looked++) {
        struct deferred_free *d = *pp;
        mb_backend *be = d->c->be;
        bool ready = true;
        for (size_t i = 0; i < d->n_ev && ready; i++)
            ready = be->ops->event_query(be, d->ev[i]) != 0;   /* (an error: nothing to wait for) */
        if (!ready) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        if (deferred_tail == &d->next)
            deferred_tail = pp;
        d->next = done;
        done = d;
        __atomic_store_n(&deferred_n, deferred_n - 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&rec_lock);
    while (done) {
        struct deferred_free *d = done;
        done = d->next;
        for (size_t i = 0; i < d->n_ev; i++)
            d->c->be->ops->event_destroy(d->c->be, d->ev[i]);
        int rc = mb_free(d->c, d->p);
        if (rc)
            mb_log(MB_LOG_ERR, "failed to free %p after its recorded streams: %s", d->p,
                   mb_strerror(rc));
        free(d);
    }
}

/* The free of p on stream, if p had streams recorded: deferred until
 * their work and stream's, queued so far, is done. True when deferred (or
 * when p was recorded but its events could not be made: then freed on
 * stream after a wait for those streams, the one host wait this takes). */
static bool free_recorded(mb_client *c, void *p, void *stream)
{
    pthread_mutex_lock(&rec_lock);
    struct rec_streams *r = ptrmap_del(&recorded, p);
    __atomic_store_n(&rec_n, recorded.n, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rec_lock);
    if (!r)
        return false;
    mb_backend *be = c->be;
    struct deferred_free *d = calloc(1, sizeof(*d) + (r->n + 1) * sizeof(d->ev[0]));
    bool ok = d && be->ops->event_record;
    for (size_t i = 0; ok && i <= r->n; i++) {
        void *s = i < r->n ? r->streams[i] : stream;
        if ((ok = be->ops->event_create(be, &d->ev[i]) == 0) &&
            !(ok = be->ops->event_record(be, d->ev[i], s) == 0))
            be->ops->event_destroy(be, d->ev[i]);
        d->n_ev += ok;
    }
    if (!ok) {
        for (size_t i = 0; d && i < d->n_ev; i++)
            be->ops->event_destroy(be, d->ev[i]);
        free(d);
        for (size_t i = 0; be->ops->stream_sync && i < r->n; i++)
            be->ops->stream_sync(be, r->streams[i]);
        free(r);
        return false;
    }
    free(r);
    d->c = c;
    d->p = p;
    pthread_mutex_lock(&rec_lock);
    *deferred_tail = d;
    deferred_tail = &d->next;
    __atomic_store_n(&deferred_n, deferred_n + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rec_lock);
    return true;
}

void *mb_torch_malloc(ssize_t size, int device, void *stream)
{
    mb_client *c = size > 0 ? hook(device) : NULL;
    void *p = NULL;
    if (!c)
        return NULL;   /* (a device no daemon serves: logged once by hook) */
    if (__atomic_load_n(&deferred_n, __ATOMIC_RELAXED))
        deferred_poll(false);
    if (!capturing(c, stream)) {
        int rc = mb_malloc_async(c, (size_t)size, stream, &p);
        if (rc == MB_ENOMEM && __atomic_load_n(&deferred_n, __ATOMIC_RELAXED)) {
            deferred_poll(true);   /* blocks whose recorded streams finished meanwhile */
            rc = mb_malloc_async(c, (size_t)size, stream, &p);
        }
        return rc == 0 ? p : NULL;
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
    if (c && __atomic_load_n(&deferred_n, __ATOMIC_RELAXED))
        deferred_poll(false);
    if (c && __atomic_load_n(&rec_n, __ATOMIC_RELAXED) && free_recorded(c, ptr, stream))
        return;
    int rc = c ? mb_free_async(c, ptr, stream) : MB_ENOENT;
    if (rc)
        mb_log(MB_LOG_ERR, "failed to free %p of device %d from the framework: %s", ptr, device,
               mb_strerror(rc));
}

/* torch.cuda.empty_cache (set_reset_fn): every device's idle memory goes
 * back to its daemon (mb_trim), the deferred frees that are done first;
 * not while a graph captures there (a trim synchronises the device). */
void mb_torch_empty_cache(void)
{
    if (__atomic_load_n(&deferred_n, __ATOMIC_RELAXED))
        deferred_poll(true);
    for (int d = 0; d <= MB_DEVICE_MAX; d++) {
        mb_client *c = __atomic_load_n(&hook_clients[d], __ATOMIC_ACQUIRE);
        if (!c || __atomic_load_n(&c->captures, __ATOMIC_ACQUIRE))
            continue;
        int rc = mb_trim(c, 0);
        if (rc)
            mb_log(MB_LOG_WARN, "empty_cache: failed to give device %d's idle memory back: %s", d,
                   mb_strerror(rc));
    }
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
    mb_client *c = __atomic_load_n(&hook_clients[device], __ATOMIC_ACQUIRE);
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
