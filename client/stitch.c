/* stitch.c: the slow tier: reserve a virtual range and map frames side by
 * side into it (the process's own cached frames first, non-contiguous is
 * fine, then the daemon's), and the reverse, in order: wait for the work
 * that may use the range, unmap, free the range, then cache the frames. */
#include <stdlib.h>

#include "client.h"
#include "log.h"

int stitch_alloc(mb_client *c, size_t bytes, struct stitched **out)
{
    size_t fb = c->frame_bytes;
    if (bytes == 0 || bytes > SIZE_MAX - fb)
        return MB_EINVAL;
    size_t n = (bytes + fb - 1) / fb;
    struct stitched *s = malloc(sizeof(*s) + n * sizeof(s->frames[0]));
    if (!s)
        return MB_ENOMEM;
    s->n = n;
    s->bytes = n * fb;
    int rc = c->be->ops->reserve(c->be, s->bytes, &s->va);
    if (rc != 0) {
        free(s);
        return rc;
    }
    rc = fcache_take(c, n, s->frames);
    if (rc != 0) {
        c->be->ops->free_va(c->be, s->va, s->bytes);
        free(s);
        return rc;
    }
    size_t mapped = 0;
    for (; rc == 0 && mapped < n; mapped++)
        rc = c->be->ops->map(c->be, (char *)s->va + mapped * fb, &s->frames[mapped]->mem);
    if (rc == 0)
        rc = c->be->ops->set_access(c->be, s->va, s->bytes);
    if (rc != 0) {
        if (mapped > 1)
            c->be->ops->unmap(c->be, s->va, (mapped - 1) * fb);
        c->be->ops->free_va(c->be, s->va, s->bytes);
        for (size_t i = 0; i < n; i++)
            fcache_put(c, s->frames[i]);
        free(s);
        return rc;
    }
    c->st.bytes_mapped += s->bytes;
    *out = s;
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
    c->be->ops->free_va(c->be, s->va, s->bytes);
    for (size_t i = 0; i < s->n; i++)
        fcache_put(c, s->frames[i]);
    c->st.bytes_mapped -= s->bytes;
    free(s);
    return 0;
}
