/* client.c: libmbclient's public entry points: opening a session, the
 * synchronous and stream-ordered allocation calls over the tiers, ranges of
 * their own (growable, stream-ordered maps), trimming, statistics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "async_map.h"
#include "client.h"
#include "config.h"
#include "faults.h"
#include "grow.h"
#include "log.h"
#include "refill.h"
#include "size.h"
#include "wire.h"

/* Cached frames kept after frees unless $MOONBRIGHT_CACHE says otherwise. */
#define DEFAULT_CACHE_BYTES ((size_t)256 << 20)
#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_IDLE_MS 2000
/* With $MOONBRIGHT_ASYNC_MAP=1, stream requests above this that the heap
 * cannot serve are mapped behind a gate on the stream (async_map.c) instead
 * of on the caller's thread. Off by default: until the mapping is done the
 * range is not valid for the runtime's own checks (cudaMemsetAsync and
 * cudaMemcpyAsync refuse it with "invalid argument"), only for kernels. */
#define ASYNC_MAP_ABOVE ((size_t)8 << 20)

/* grow.c's hand-over: a freed range it cannot keep retires like any other. */
static int retire_range(mb_client *c, struct stitched *s, void *stream)
{
    return maint_retire(c, s, stream, false);
}

/* Which of this process's devices the daemon serves, by the identity its
 * hello named: c->local_device. MB_EDEVICE when this process does not see
 * it (logged only when `quiet` is false: a search tries other daemons). */
static int find_local_device(mb_client *c, bool quiet)
{
    int rc = mb_backend_find(c->backend_name, c->device_uuid, &c->local_device);
    if (rc == MB_ENOENT || rc == MB_EDEVICE) {   /* (MB_EDEVICE: this process sees no GPU) */
        char id[MB_UUID_STR];
        mb_uuid_str(c->device_uuid, id);
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        mb_log(quiet ? MB_LOG_DEBUG : MB_LOG_ERR,
               "moonbrightd of device %d serves %s, which this process does not see%s%s%s",
               c->device, id, vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", vis ? ")" : "");
        return MB_EDEVICE;
    }
    return rc;
}

/* The CUDA backend in this process. Its context needs device memory: on a
 * device full (of the daemon's free frames, or of other processes' memory)
 * the daemon is asked to release free frames for OPEN_ROOM_BYTES (Room),
 * and the open is tried again for up to OPEN_ROOM_WAIT_MS before it fails. */
#define OPEN_ROOM_BYTES ((uint64_t)1 << 30)
#define OPEN_ROOM_WAIT_MS 2000
static int open_cuda(mb_client *c)
{
    uint64_t t0 = mb_now_ns();
    for (bool said = false;; said = true) {
        int rc = mb_backend_cuda_open(c->local_device, &c->be);
        if (rc != MB_ENOMEM || mb_now_ns() - t0 >= (uint64_t)OPEN_ROOM_WAIT_MS * 1000000)
            return rc;
        uint32_t released = 0;
        int rr = rpc_room(c, OPEN_ROOM_BYTES, &released);
        if (!said)
            mb_log(MB_LOG_INFO, "device %d has no room for this process's CUDA context: moonbrightd "
                   "released %u free frames (%s); trying again for up to %d ms", c->local_device,
                   released, rr ? mb_strerror(rr) : "ok", OPEN_ROOM_WAIT_MS);
        if (!released) {
            struct timespec ts = { 0, 50 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
}

/* A session with the daemon of device index `device` (its sockets'
 * name). want_local >= 0: only if that daemon serves this process's device
 * want_local, else MB_ENOENT before anything is opened on a device. */
static int client_open(mb_client **out, const char *tenant_name, int device, int want_local)
{
    mb_log_set_ident("mbclient");
    const char *lv = getenv("MOONBRIGHT_LOG");
    int level = lv && *lv ? mb_log_parse_level(lv) : MB_LOG_WARN;
    mb_log_set_level(level >= 0 ? level : MB_LOG_WARN);
    if (level < 0)
        mb_log(MB_LOG_WARN, "ignoring MOONBRIGHT_LOG=%s (expected error, warn, info or debug)", lv);
    mb_client *c = calloc(1, sizeof(*c));
    if (!c)
        return MB_ENOMEM;
    mb_raise_fd_limit(false);   /* host frames are descriptors in this process too */
    /* Grants pass up to MB_CHAN_MAX_FDS descriptors at once (and host frames
     * keep theirs): grow the table here rather than in a grant. */
    mb_fd_table_reserve(1024);
    pthread_mutex_init(&c->lock, NULL);
    c->node_alloc = mb_malloc;
    c->node_free = mb_free;
    c->retire = retire_range;
    lclock_init(&c->lclk);
    pthread_mutex_init(&c->flock, NULL);
    pthread_mutex_init(&c->release_lock, NULL);
    pthread_mutexattr_t ra;
    pthread_mutexattr_init(&ra);
    pthread_mutexattr_settype(&ra, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&c->rpclock, &ra);
    pthread_mutexattr_destroy(&ra);
    c->sd_fenced_tail = &c->sd_fenced;
    c->chan = -1;
    c->device = device;
    c->timeout_ms = (int)mb_env_long("MOONBRIGHT_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 1, 3600000);
    c->idle_ms = mb_env_long("MOONBRIGHT_IDLE_MS", DEFAULT_IDLE_MS, 1, 86400000);
    c->fc.keep_bytes = DEFAULT_CACHE_BYTES;
    c->large_frames = mb_env_long("MOONBRIGHT_LARGE_FRAMES", 1, 0, 1) != 0;
    c->warm_per_frame = (unsigned)mb_env_long("MOONBRIGHT_WARM_GRANTS", 2, 0, 8);
    c->async_map = mb_env_long("MOONBRIGHT_ASYNC_MAP", 0, 0, 1) != 0;
    c->close_fit = mb_env_long("MOONBRIGHT_HEAP_CLOSE_FIT", 0, 0, 1) != 0;
    c->repair = mb_env_long("MOONBRIGHT_HEAP_REPAIR", 1, 0, 1) != 0;
    c->punch = mb_env_long("MOONBRIGHT_HEAP_PUNCH", 0, 0, 1) != 0;
    /* Close fit rebuilds arenas from the frames of free ones; extending an
     * arena past the free blocks a close fit refused would keep them
     * mapped and grow the heap without bound. */
    c->extend = mb_env_long("MOONBRIGHT_HEAP_EXTEND", 1, 0, 1) != 0 && !c->close_fit;
    c->classes = mb_env_long("MOONBRIGHT_HEAP_CLASSES", 1, 0, 1) != 0;
    c->fill = mb_env_long("MOONBRIGHT_HEAP_FILL", 1, 0, 1) != 0;
    c->grow_spares = mb_env_long("MOONBRIGHT_GROW_SPARES", 1, 0, 1) != 0;
    stitch_set_slice((size_t)mb_env_long("MOONBRIGHT_DRIVER_SLICE", STITCH_SLICE_DEFAULT, 0, 1 << 20));
    c->exact_allowed = mb_env_long("MOONBRIGHT_EXACT_PLANS", 1, 0, 1) != 0;
    /* (MOONBRIGHT_GROW_FREE_LAG: its name before frees stopped waiting) */
    const char *lag = getenv("MOONBRIGHT_GROW_LAG") ? "MOONBRIGHT_GROW_LAG" : "MOONBRIGHT_GROW_FREE_LAG";
    c->grow_lag = (size_t)mb_env_long(lag, 8, 0, 1 << 20);
    c->fc.near_pct = (unsigned)mb_env_long("MOONBRIGHT_NEAR_BUDGET_PCT", 12, 0, 1000);
    const char *cache = getenv("MOONBRIGHT_CACHE");
    uint64_t v;
    if (cache && *cache) {
        if (mb_parse_size(cache, &v) == 0)
            c->fc.keep_bytes = (size_t)v;
        else
            mb_log(MB_LOG_WARN, "ignoring MOONBRIGHT_CACHE=%s (expected a size)", cache);
    }
    const char *tenant = tenant_name && *tenant_name ? tenant_name : getenv("MOONBRIGHT_TENANT");
    int rc = rpc_connect(c, tenant && *tenant ? tenant : "default");
    if (rc == 0 && (rc = find_local_device(c, want_local >= 0)) == 0 && want_local >= 0 &&
        c->local_device != want_local)
        rc = MB_ENOENT;
    if (rc == 0) {
        if (strcmp(c->backend_name, "host") == 0)
            rc = mb_backend_host_open(c->local_device, &c->be);
        else if (strcmp(c->backend_name, "cuda") == 0)
            rc = open_cuda(c);
        else
            rc = MB_EPROTO;
        if (rc != 0)
            mb_log(MB_LOG_ERR, "failed to open the daemon's '%s' backend in this process: %s",
                   c->backend_name, mb_strerror(rc));
        else if (c->frame_bytes % c->be->granularity)
            rc = MB_EPROTO;
    }
    if (rc == 0)
        mb_faults_wrap_backend(c->be);   /* $MOONBRIGHT_FAULTS, debug builds */
    if (rc != 0) {
        rpc_disconnect(c);
        mb_backend_close(c->be);
        pthread_mutex_destroy(&c->release_lock);
        pthread_mutex_destroy(&c->rpclock);
        pthread_mutex_destroy(&c->flock);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return rc;
    }
    c->st.frame_bytes = c->frame_bytes;   /* (before the background thread reads c->st) */
    if ((rc = tiers_init(c)) != 0 || (rc = tc_client_init(c)) != 0 || (rc = maint_start(c)) != 0) {
        mb_log(MB_LOG_ERR, "failed to set up the allocator tiers: %s", mb_strerror(rc));
        mb_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int mb_open(mb_client **out, const char *tenant_name)
{
    if (!out)
        return MB_EINVAL;
    *out = NULL;
    return client_open(out, tenant_name, (int)mb_env_long("MOONBRIGHT_DEVICE", 0, 0, MB_DEVICE_MAX),
                       -1);
}

/* The daemons to ask for this process's device `device`, most likely
 * first: $MOONBRIGHT_DEVICE's, the same index (ordinals agree unless
 * CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER differ), then every other
 * daemon whose socket is in the runtime directory. */
static int candidates(int device, int *out)
{
    bool seen[MB_DEVICE_MAX + 1] = { false };
    int n = 0;
    const char *env = getenv("MOONBRIGHT_DEVICE");
    if (env && *env) {
        int k = (int)mb_env_long("MOONBRIGHT_DEVICE", 0, 0, MB_DEVICE_MAX);
        seen[k] = true;
        out[n++] = k;
    }
    if (!seen[device]) {
        seen[device] = true;
        out[n++] = device;
    }
    int listed[MB_DEVICE_MAX + 1], m = mb_runtime_devices(mb_default_runtime_dir(), listed);
    for (int i = 0; i < m; i++)
        if (!seen[listed[i]]) {
            seen[listed[i]] = true;
            out[n++] = listed[i];
        }
    return n;
}

int mb_open_device(mb_client **out, const char *tenant_name, int device)
{
    if (!out)
        return MB_EINVAL;
    *out = NULL;
    if (device < 0 || device > MB_DEVICE_MAX)
        return MB_EINVAL;
    int order[MB_DEVICE_MAX + 1];
    int n = candidates(device, order);
    for (int i = 0; i < n; i++) {
        char path[256];
        if (mb_chan_path(path, sizeof(path), mb_default_runtime_dir(), order[i]) != 0 ||
            access(path, F_OK) != 0)
            continue;   /* no daemon of that index */
        int rc = client_open(out, tenant_name, order[i], device);
        /* Another device's daemon, one whose device this process does not
         * see, or one gone since its socket was listed: the next. */
        if (rc != MB_ENOENT && rc != MB_EDEVICE && rc != MB_EUNAVAIL)
            return rc;
    }
    mb_log(MB_LOG_ERR, "no moonbrightd in %s serves this process's device %d: start one for "
           "that GPU (systemctl start moonbrightd)", mb_default_runtime_dir(), device);
    return MB_EUNAVAIL;
}

void mb_close(mb_client *c)
{
    if (!c)
        return;
    maint_stop(c);
    amap_close(c);
    /* Work that may still use this process's memory finishes first. */
    if (c->be->ops->device_sync)
        c->be->ops->device_sync(c->be);
    refill_close(c);   /* may free table nodes: before the thread caches go */
    if (c->chunks)
        tc_flush_every_thread(c, true);
    maint_reap_retiring(c, true);
    pthread_mutex_lock(&c->lock);
    if (c->pool)
        tiers_destroy(c);
    struct stitched **idle;
    size_t n_idle = tiers_take_idle(c, -1, 0, &idle);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&c->flock);
    for (size_t i = 0; i < n_idle; i++)
        stitch_free(c, idle[i], NULL);
    free(idle);
    for (size_t i = 0; i < c->live.cap; i++) {
        struct ptrmap_slot *sl = &c->live.slots[i];
        if (sl->key > 1 && ((struct stitched *)sl->val)->imported)
            share_free_imported(c, sl->val, NULL);
        else if (sl->key > 1)
            stitch_free(c, sl->val, NULL);
    }
    ptrmap_destroy(&c->live);
    ptrmap_destroy(&c->backing);
    chunkreg_free(c->chunks);   /* after the slab: its chunks left it */
    c->chunks = NULL;
    lclock_destroy(&c->lclk, c->be);
    /* Handles go first; closing the channel then ends the session and the
     * daemon takes every frame back. */
    fcache_release_all(c);
    rpc_disconnect(c);
    mb_backend_close(c->be);
    pthread_mutex_unlock(&c->flock);
    pthread_mutex_destroy(&c->release_lock);
    pthread_mutex_destroy(&c->rpclock);
    pthread_mutex_destroy(&c->flock);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

#ifdef MB_DEBUG
static void check_client(mb_client *c)
{
    if ((c->slab && !mb_slab_is_valid(c->slab)) || !mb_pool_is_valid(c->pool))
        abort();
}
#else
#define check_client(c) ((void)0)
#endif

/* Frame-layer work for a range of its own, c->lock dropped around it. */
static int own_range(mb_client *c, size_t size, size_t reserve, void *stream, struct stitched **s)
{
    pthread_mutex_unlock(&c->lock);
    int rc;
    if (stream) {
        rc = amap_alloc(c, size, stream, s);   /* (it takes the frame lock) */
    } else {
        pthread_mutex_lock(&c->flock);
        rc = stitch_alloc(c, size, reserve, s);
        pthread_mutex_unlock(&c->flock);
    }
    pthread_mutex_lock(&c->lock);
    if (rc == 0) {
        (*s)->mapped_async = stream != NULL;
        if ((rc = ptrmap_put(&c->live, (*s)->va, *s)) != 0)
            maint_retire(c, *s, stream, false);
        else
            c->st.stitch_live += (*s)->bytes;
    }
    return rc;
}

/* Is an allocation of size on stream one for the stream-ordered mapper: a
 * heap miss that would otherwise map on the caller's thread? */
static bool wants_async_map(mb_client *c, size_t size, void *stream)
{
    return c->async_map && stream && size > ASYNC_MAP_ABOVE && c->be->ops->stream_wait_value32 &&
           mb_pool_would_miss(c->pool, size, stream);
}

static int malloc_once(mb_client *c, size_t size, void *stream, bool sync, void **ptr)
{
    /* Small objects: the calling thread's cache, no shared lock. */
    if (size <= c->slab_max && !amap_has_error(c))
        return tc_alloc(c, size, stream, sync, ptr);
    pthread_mutex_lock(&c->lock);
    int rc = amap_take_error(c);   /* no lock of its own unless a map failed */
    if (rc == 0 && (rc = __atomic_load_n(&c->sticky, __ATOMIC_ACQUIRE)) == 0) {
        if (!sync && wants_async_map(c, size, stream)) {
            struct stitched *s;
            if ((rc = own_range(c, size, size, stream, &s)) == 0)
                *ptr = s->va;
        } else if (size <= c->slab_max) {
            pthread_mutex_unlock(&c->lock);
            return tc_alloc(c, size, stream, sync, ptr);
        } else {
            rc = tiers_alloc(c, size, stream, sync, ptr);
        }
    }
    __atomic_store_n(&c->sticky, 0, __ATOMIC_RELEASE);
    check_client(c);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* After a call refused for budget or quota (rc): the process's own idle
 * memory goes back (idle ranges, caches, pools, tails, freed growable
 * ranges) and the caller tries once more. */
static bool gave_back_after_refusal(mb_client *c, int rc)
{
    if (!refused_for_room(rc))
        return false;
    pthread_mutex_lock(&c->flock);
    size_t held = c->fc.bytes_held, cached = c->fc.bytes_cached;
    pthread_mutex_unlock(&c->flock);
    maint_release(c, -1, 0);
    /* Retry only if something changed: frames went back to the daemon, or
     * idle ranges were unmapped into the cache. Otherwise the retry would
     * ask the daemon again for what it just refused (and start another
     * round of reclaim notices). */
    pthread_mutex_lock(&c->flock);
    bool changed = c->fc.bytes_held < held || c->fc.bytes_cached > cached;
    size_t held_now = c->fc.bytes_held, mapped = c->fst.bytes_mapped;
    pthread_mutex_unlock(&c->flock);
    mb_log(MB_LOG_DEBUG, "refused (%s): the process's idle memory went back: %zu MiB held before, "
                         "%zu MiB after (%zu MiB mapped)%s",
           mb_strerror(rc), held >> 20, held_now >> 20, mapped >> 20,
           changed ? "; trying once more" : "");
    return changed;
}

/* A call refused for budget or quota even after its retry says so once,
 * with the daemon's words for the last refusal (rpc.c logs refusals at
 * info: most are recovered from). */
static int refused_log(mb_client *c, int rc, const char *what, size_t bytes)
{
    if (!refused_for_room(rc))
        return rc;
    char why[sizeof(c->refusal)];
    fcache_refusal(c, rc, why, sizeof(why));
    mb_log(MB_LOG_WARN, "%s of %zu bytes failed: %s", what, bytes, why);
    return rc;
}

static int do_malloc(mb_client *c, size_t size, void *stream, bool sync, void **ptr)
{
    if (!c || !ptr || size == 0)
        return MB_EINVAL;
    int rc = malloc_once(c, size, stream, sync, ptr);
    if (gave_back_after_refusal(c, rc))
        rc = malloc_once(c, size, stream, sync, ptr);
    return refused_log(c, rc, "an allocation", size);
}

static int do_free(mb_client *c, void *ptr, void *stream)
{
    if (!c)
        return MB_EINVAL;
    if (!ptr)
        return 0;
    int rc = tc_free(c, ptr, stream);
    if (rc <= 0)
        return rc;            /* a slab object (or a double free of one) */
    rc = grow_free(c, ptr, stream);
    if (rc != MB_ENOENT)
        return rc;
    pthread_mutex_lock(&c->lock);
    rc = tiers_free(c, ptr, stream);
    struct stitched *s;
    if (rc == MB_ENOENT && (s = ptrmap_del(&c->live, ptr)) != NULL) {
        c->st.stitch_live -= s->bytes;
        bool failed = false, unmapped = false, shared = s->imported;
        for (size_t i = 0; i < s->n && !shared; i++)
            shared = s->frames[i]->exported;
        if (s->mapped_async) {
            pthread_mutex_unlock(&c->lock);
            amap_settle(c, s, &failed, &unmapped);
            pthread_mutex_lock(&c->lock);
        }
        /* A mapped range nobody else holds joins the heap, free on this
         * stream; others are unmapped once the stream's work is done. */
        if (!failed && !shared && s->n == s->cap && tiers_adopt(c, s, stream) == 0)
            rc = 0;
        else
            rc = maint_retire(c, s, stream, unmapped);
        if (rc != 0) {
            /* Out of memory for the record: the range stays live. */
            ptrmap_put(&c->live, s->va, s);
            c->st.stitch_live += s->bytes;
        }
    }
    check_client(c);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mb_malloc(mb_client *c, size_t size, void **ptr) { return do_malloc(c, size, NULL, true, ptr); }
/* Freed on the legacy default stream: reused once work queued there has
 * finished (cudaFree's guarantee), without waiting for it here. */
int mb_free(mb_client *c, void *ptr) { return do_free(c, ptr, NULL); }
int mb_malloc_async(mb_client *c, size_t size, void *stream, void **ptr)
{
    return do_malloc(c, size, stream, false, ptr);
}
int mb_free_async(mb_client *c, void *ptr, void *stream) { return do_free(c, ptr, stream); }

/* A stream-ordered growable call was refused for budget or quota: before
 * the process gives back its idle memory, the mappings queued so far end
 * and the stream's work completes, so that ranges freed behind its gates
 * can go back too (the one host wait of these calls, on this path only). */
static void settle_refused(mb_client *c, int rc, bool async, void *stream)
{
    if (!async || !refused_for_room(rc))
        return;
    amap_drain(c);
    if (c->be->ops->stream_sync)
        c->be->ops->stream_sync(c->be, stream);
}

static int do_malloc_growable(mb_client *c, size_t size, size_t max_size, void *stream,
                              bool async, void **ptr)
{
    if (!c || !ptr || size == 0 || max_size < size)
        return MB_EINVAL;
    int rc = grow_alloc(c, size, max_size, stream, async, ptr);
    settle_refused(c, rc, async, stream);
    if (gave_back_after_refusal(c, rc))
        rc = grow_alloc(c, size, max_size, stream, async, ptr);
    return refused_log(c, rc, "a growable allocation", size);
}

static int do_grow(mb_client *c, void *ptr, size_t new_size, void *stream, bool async)
{
    if (!c || !ptr)
        return MB_EINVAL;
    int rc = grow_extend(c, ptr, new_size, stream, async);
    settle_refused(c, rc, async, stream);
    if (gave_back_after_refusal(c, rc))
        rc = grow_extend(c, ptr, new_size, stream, async);
    return refused_log(c, rc, "a growth", new_size);
}

int mb_malloc_growable(mb_client *c, size_t size, size_t max_size, void **ptr)
{
    return do_malloc_growable(c, size, max_size, NULL, false, ptr);
}
int mb_grow(mb_client *c, void *ptr, size_t new_size) { return do_grow(c, ptr, new_size, NULL, false); }
int mb_malloc_growable_async(mb_client *c, size_t size, size_t max_size, void *stream, void **ptr)
{
    return do_malloc_growable(c, size, max_size, stream, true, ptr);
}
int mb_grow_async(mb_client *c, void *ptr, size_t new_size, void *stream)
{
    return do_grow(c, ptr, new_size, stream, true);
}

size_t mb_usable_size(mb_client *c, const void *ptr)
{
    if (!c || !ptr)
        return 0;
    size_t slot;
    const struct chunkreg_chunk *k = chunkreg_object(c->chunks, ptr, &slot);
    if (k)
        return k->size;
    size_t gsz = grow_usable(c, ptr);
    if (gsz)
        return gsz;
    pthread_mutex_lock(&c->lock);
    size_t sz = tiers_usable_size(c, ptr);
    if (sz == 0) {
        struct stitched *s = ptrmap_get(&c->live, ptr);
        sz = s ? s->bytes : 0;
    }
    pthread_mutex_unlock(&c->lock);
    return sz;
}

int mb_trim(mb_client *c, size_t keep_bytes)
{
    if (!c)
        return MB_EINVAL;
    if (c->chunks)
        tc_flush_every_thread(c, false);   /* thread caches hold slab objects */
    refill_hold(c);   /* no background pass maps spare memory behind the trim */
    int rc = maint_release(c, -1, keep_bytes);
    refill_unhold(c);
    return rc;
}

int mb_stats(mb_client *c, mb_client_stats *out)
{
    if (!c || !out)
        return MB_EINVAL;
    maint_stats(c, out);
    return 0;
}

const char *mb_backend_name(const mb_client *c) { return c ? c->backend_name : "none"; }
