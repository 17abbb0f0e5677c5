/* client.c: libmbclient's public entry points: opening a session, the
 * synchronous and stream-ordered allocation calls over the tiers, trimming,
 * statistics. Every call takes the client's mutex. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async_map.h"
#include "client.h"
#include "grow.h"
#include "log.h"
#include "refill.h"
#include "size.h"

/* Cached frames kept after frees unless $MOONBRIGHT_CACHE says otherwise. */
#define DEFAULT_CACHE_BYTES ((size_t)1 << 30)
#define DEFAULT_TIMEOUT_MS 5000

static long env_long(const char *name, long dflt, long lo, long hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        mb_log(MB_LOG_WARN, "ignoring %s=%s (expected %ld..%ld)", name, v, lo, hi);
        return dflt;
    }
    return x;
}

int mb_open(mb_client **out, const char *tenant_name)
{
    if (!out)
        return MB_EINVAL;
    *out = NULL;
    mb_log_set_ident("mbclient");
    const char *lv = getenv("MOONBRIGHT_LOG");
    mb_log_set_level(lv && mb_log_parse_level(lv) >= 0 ? mb_log_parse_level(lv) : MB_LOG_WARN);
    mb_client *c = calloc(1, sizeof(*c));
    if (!c)
        return MB_ENOMEM;
    mb_raise_fd_limit(false);   /* host frames are descriptors in this process too */
    pthread_mutex_init(&c->lock, NULL);
    c->chan = -1;
    c->device = (int)env_long("MOONBRIGHT_DEVICE", 0, 0, 255);
    c->timeout_ms = (int)env_long("MOONBRIGHT_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 1, 3600000);
    c->fc.keep_bytes = DEFAULT_CACHE_BYTES;
    c->large_frames = env_long("MOONBRIGHT_LARGE_FRAMES", 1, 0, 1) != 0;
    const char *cache = getenv("MOONBRIGHT_CACHE");
    uint64_t v;
    if (cache && *cache) {
        if (mb_parse_size(cache, &v) == 0)
            c->fc.keep_bytes = (size_t)v;
        else
            mb_log(MB_LOG_WARN, "ignoring MOONBRIGHT_CACHE=%s (expected a size)", cache);
    }
    const char *tenant = tenant_name ? tenant_name : getenv("MOONBRIGHT_TENANT");
    int rc = rpc_connect(c, tenant && *tenant ? tenant : "default");
    if (rc == 0) {
        if (strcmp(c->backend_name, "host") == 0)
            rc = mb_backend_host_open(c->device, &c->be);
        else if (strcmp(c->backend_name, "cuda") == 0)
            rc = mb_backend_cuda_open(c->device, &c->be);
        else
            rc = MB_EPROTO;
        if (rc != 0)
            mb_log(MB_LOG_ERR, "failed to open the daemon's '%s' backend in this process: %s",
                   c->backend_name, mb_strerror(rc));
        else if (c->frame_bytes % c->be->granularity)
            rc = MB_EPROTO;
    }
    if (rc != 0) {
        rpc_disconnect(c);
        mb_backend_close(c->be);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return rc;
    }
    if ((rc = tiers_init(c)) != 0 || (rc = rpc_start_notice_thread(c)) != 0) {
        mb_log(MB_LOG_ERR, "failed to set up the allocator tiers: %s", mb_strerror(rc));
        mb_close(c);
        return rc;
    }
    c->st.frame_bytes = c->frame_bytes;
    *out = c;
    return 0;
}

void mb_close(mb_client *c)
{
    if (!c)
        return;
    rpc_stop_notice_thread(c);
    refill_close(c);
    pthread_mutex_lock(&c->lock);
    amap_close(c);
    c->be->ops->stream_sync(c->be, NULL);
    tiers_destroy(c);
    for (size_t i = 0; i < c->live.cap; i++) {
        struct ptrmap_slot *sl = &c->live.slots[i];
        if (sl->key > 1 && ((struct stitched *)sl->val)->imported)
            share_free_imported(c, sl->val, NULL);
        else if (sl->key > 1)
            amap_free(c, sl->val, NULL);
    }
    ptrmap_destroy(&c->live);
    /* Handles go first; closing the channel then ends the session and the
     * daemon takes every frame back. */
    fcache_release_all(c);
    rpc_disconnect(c);
    mb_backend_close(c->be);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

#ifdef MB_DEBUG
static void check_client(mb_client *c)
{
    if (!fcache_is_valid(&c->fc) || (c->slab && !mb_slab_is_valid(c->slab)) ||
        !mb_pool_is_valid(c->pool))
        abort();
}
#else
#define check_client(c) ((void)0)
#endif

/* A stitched range of its own for sizes no tier serves. */
static int alloc_stitched(mb_client *c, size_t size, size_t reserve, void **ptr)
{
    struct stitched *s;
    int rc = reserve == size && c->large_frames ? stitch_alloc_large(c, size, &s)
                                                : stitch_alloc(c, size, reserve, &s);
    if (rc == 0 && (rc = ptrmap_put(&c->live, s->va, s)) != 0)
        stitch_free(c, s, NULL);
    if (rc == 0) {
        c->st.stitch_live += s->bytes;
        *ptr = s->va;
    }
    return rc;
}

/* The stream-ordered slow path: the pointer comes back at once, the
 * mapping completes behind a gate on the stream (async_map.c). */
static int alloc_mapping_async(mb_client *c, size_t size, void *stream, void **ptr)
{
    struct stitched *s;
    int rc = amap_alloc(c, size, stream, &s);
    if (rc == 0 && (rc = ptrmap_put(&c->live, s->va, s)) != 0)
        amap_free(c, s, stream);
    if (rc == 0) {
        c->st.stitch_live += s->bytes;
        *ptr = s->va;
    }
    return rc;
}

static int do_malloc(mb_client *c, size_t size, void *stream, void **ptr)
{
    if (!c || !ptr || size == 0)
        return MB_EINVAL;
    pthread_mutex_lock(&c->lock);
    int rc = amap_take_error(c);
    if (rc == 0 && (rc = c->sticky) == 0) {
        rc = tiers_alloc(c, size, stream, ptr);
        if (rc == MB_ENOENT && stream)
            rc = alloc_mapping_async(c, size, stream, ptr);
        else if (rc == MB_ENOENT)
            rc = alloc_stitched(c, size, size, ptr);
    }
    c->sticky = 0;
    check_client(c);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static int do_free(mb_client *c, void *ptr, void *stream)
{
    if (!c)
        return MB_EINVAL;
    if (!ptr)
        return 0;
    int grc = grow_free(c, ptr, stream);
    if (grc != MB_ENOENT)
        return grc;
    pthread_mutex_lock(&c->lock);
    amap_take_error(c);   /* reported by the next allocation */
    int rc = tiers_free(c, ptr, stream);
    if (rc == MB_ENOENT) {
        struct stitched *s = ptrmap_get(&c->live, ptr);
        if (s) {
            size_t bytes = s->bytes;
            rc = s->imported ? share_free_imported(c, s, stream) : amap_free(c, s, stream);
            if (rc == 0) {
                ptrmap_del(&c->live, ptr);
                c->st.stitch_live -= bytes;
                fcache_report(c);
            }
        }
    }
    if (rc == 0 && c->fc.bytes_cached > c->fc.keep_bytes)
        fcache_trim(c, c->fc.keep_bytes);
    check_client(c);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mb_malloc(mb_client *c, size_t size, void **ptr) { return do_malloc(c, size, NULL, ptr); }
int mb_free(mb_client *c, void *ptr) { return do_free(c, ptr, NULL); }
int mb_malloc_async(mb_client *c, size_t size, void *stream, void **ptr)
{
    return do_malloc(c, size, stream, ptr);
}
int mb_free_async(mb_client *c, void *ptr, void *stream) { return do_free(c, ptr, stream); }

int mb_malloc_growable(mb_client *c, size_t size, size_t max_size, void **ptr)
{
    if (!c || !ptr || size == 0 || max_size < size)
        return MB_EINVAL;
    return grow_alloc(c, size, max_size, ptr);
}

int mb_grow(mb_client *c, void *ptr, size_t new_size)
{
    if (!c || !ptr)
        return MB_EINVAL;
    int grc = grow_extend(c, ptr, new_size);
    if (grc != MB_ENOENT)
        return grc;
    pthread_mutex_lock(&c->lock);
    struct stitched *s = ptrmap_get(&c->live, ptr);
    int rc = MB_ENOENT;
    if (s) {
        size_t before = s->bytes;
        rc = stitch_grow(c, &s, new_size);
        if (rc == 0)
            c->st.stitch_live += s->bytes - before;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

size_t mb_usable_size(mb_client *c, const void *ptr)
{
    if (!c || !ptr)
        return 0;
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
    pthread_mutex_lock(&c->lock);
    tiers_trim(c);
    refill_trim_held(c);
    int rc = fcache_trim(c, keep_bytes);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mb_stats(mb_client *c, mb_client_stats *out)
{
    if (!c || !out)
        return MB_EINVAL;
    pthread_mutex_lock(&c->lock);
    *out = c->st;
    tiers_stats(c, out);
    refill_stats(c, out);
    out->bytes_live = out->slab_live + out->pool_live + out->stitch_live;
    out->bytes_cached = c->fc.bytes_cached;
    out->bytes_granted = c->fc.bytes_held;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

const char *mb_backend_name(const mb_client *c) { return c ? c->backend_name : "none"; }
