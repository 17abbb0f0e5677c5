/* stitch.c: the slow tier: reserve a virtual range and map frames side by
 * side into it (the process's own cached frames first, non-contiguous is
 * fine, then the daemon's), grow a range in place, and the reverse, in
 * order: wait for the work that may use the range, unmap, free the range,
 * then cache the frames. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "log.h"

/* Map frames[from..to) of s and give the device access to them. */
static int map_frames(mb_client *c, struct stitched *s, size_t from, size_t to)
{
    size_t fb = c->frame_bytes;
    size_t mapped = from;   /* frames[from..mapped) are mapped */
    int rc = 0;
    for (; rc == 0 && mapped < to; mapped += rc == 0)
        rc = c->be->ops->map(c->be, (char *)s->va + mapped * fb, &s->frames[mapped]->mem);
    if (rc == 0)
        rc = c->be->ops->set_access(c->be, (char *)s->va + from * fb, (to - from) * fb);
    if (rc != 0 && mapped > from)
        c->be->ops->unmap(c->be, (char *)s->va + from * fb, (mapped - from) * fb);
    return rc;
}

int stitch_alloc(mb_client *c, size_t bytes, size_t reserve_bytes, struct stitched **out)
{
    size_t fb = c->frame_bytes;
    if (bytes == 0 || bytes > SIZE_MAX - fb || reserve_bytes < bytes || reserve_bytes > SIZE_MAX - fb)
        return MB_EINVAL;
    size_t n = (bytes + fb - 1) / fb;
    size_t cap = (reserve_bytes + fb - 1) / fb;
    struct stitched *s = malloc(sizeof(*s) + cap * sizeof(s->frames[0]));
    if (!s)
        return MB_ENOMEM;
    s->n = n;
    s->cap = cap;
    s->bytes = n * fb;
    s->reserved = cap * fb;
    s->imported = false;
    int rc = c->be->ops->reserve(c->be, s->reserved, &s->va);
    if (rc != 0) {
        free(s);
        return rc;
    }
    rc = fcache_take(c, n, s->frames);
    if (rc == 0 && (rc = map_frames(c, s, 0, n)) != 0)
        for (size_t i = 0; i < n; i++)
            fcache_put(c, s->frames[i]);
    if (rc != 0) {
        c->be->ops->free_va(c->be, s->va, s->reserved);
        free(s);
        return rc;
    }
    c->st.bytes_mapped += s->bytes;
    *out = s;
    return 0;
}

int stitch_adopt(mb_client *c, struct cframe **frames, size_t n, struct stitched **out)
{
    size_t fb = c->frame_bytes;
    struct stitched *s = malloc(sizeof(*s) + n * sizeof(s->frames[0]));
    if (!s)
        return MB_ENOMEM;
    s->n = s->cap = n;
    s->bytes = s->reserved = n * fb;
    s->imported = true;
    memcpy(s->frames, frames, n * sizeof(*frames));
    int rc = c->be->ops->reserve(c->be, s->reserved, &s->va);
    if (rc == 0 && (rc = map_frames(c, s, 0, n)) != 0)
        c->be->ops->free_va(c->be, s->va, s->reserved);
    if (rc != 0) {
        free(s);
        return rc;
    }
    c->st.bytes_mapped += s->bytes;
    *out = s;
    return 0;
}

int stitch_grow(mb_client *c, struct stitched **sp, size_t new_bytes)
{
    struct stitched *s = *sp;
    size_t fb = c->frame_bytes;
    if (new_bytes <= s->bytes)
        return 0;
    if (new_bytes > s->reserved)
        return MB_EINVAL;
    size_t n = (new_bytes + fb - 1) / fb;
    int rc = fcache_take(c, n - s->n, s->frames + s->n);
    if (rc != 0)
        return rc;
    if ((rc = map_frames(c, s, s->n, n)) != 0) {
        for (size_t i = s->n; i < n; i++)
            fcache_put(c, s->frames[i]);
        return rc;
    }
    c->st.bytes_mapped += (n - s->n) * fb;
    s->n = n;
    s->bytes = n * fb;
    return 0;
}

int stitch_free(mb_client *c, struct stitched *s, void *stream)
{
    /* Work that may still use the range must finish before it is unmapped. */
    int rc = c->be->ops->stream_sync(c->be, stream);
    if (rc != 0)
        mb_log(MB_LOG_ERR, "failed to wait for work on a range being freed: %s", mb_strerror(rc));
    rc = c->be->ops->unmap(c->be, s->va, s->bytes);
    if (rc != 0)
        return rc;   /* still mapped: keep everything as it is */
    c->be->ops->free_va(c->be, s->va, s->reserved);
    /* Frames shared with another process go back to the daemon (which
     * keeps them for the importers), the rest into the cache. */
    uint32_t *ids = NULL;
    size_t n_shared = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->frames[i]->exported) {
            fcache_put(c, s->frames[i]);
            continue;
        }
        if (!ids && !(ids = malloc(s->n * sizeof(*ids))))
            rc = MB_ENOMEM;
        if (ids)
            ids[n_shared++] = s->frames[i]->id;
        fcache_forget(c, s->frames[i]);
    }
    if (n_shared)
        rc = fcache_return_ids(c, ids, n_shared);
    free(ids);
    c->st.bytes_mapped -= s->bytes;
    free(s);
    return rc;
}

bool stitch_is_valid(const mb_client *c, const struct stitched *s)
{
    if (s->n * c->frame_bytes != s->bytes || s->bytes > s->reserved ||
        s->reserved != s->cap * c->frame_bytes || s->n > s->cap)
        return false;
    for (size_t i = 0; i < s->n; i++)
        if (!s->frames[i]->in_use)
            return false;
    return true;
}
