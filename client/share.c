/* share.c: sharing allocations between processes: a capability token for
 * the frames behind a stitched range (mb_export), redeeming it in another
 * process (mb_import maps the same frames), and freeing an imported range
 * (its frames go back to the daemon, never into this process's cache).
 *
 * Only ranges of their own can be shared: allocations above the pool's
 * size (8 MiB), growable ones, and imports cannot be re-shared. The memory
 * lives until every holder has freed it. Revocation: a token not yet
 * redeemed dies when the exporter frees the range or exits; an import
 * already made keeps its memory. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "grow.h"
#include "log.h"

static int export(mb_client *c, void *ptr, bool restrict_uid, uint32_t uid, mb_share_token *out)
{
    if (!c || !ptr || !out)
        return MB_EINVAL;
    pthread_mutex_lock(&c->lock);
    struct stitched *s = ptrmap_get(&c->live, ptr);
    if (!s)
        s = grow_find_held(c, ptr);
    int rc = !s ? MB_ENOENT : s->imported ? MB_EINVAL : 0;
    uint32_t *ids = rc == 0 ? malloc(s->n * sizeof(*ids)) : NULL;
    if (rc == 0 && !ids)
        rc = MB_ENOMEM;
    if (rc == 0) {
        for (size_t i = 0; i < s->n; i++)
            ids[i] = s->frames[i]->id;
        Mb__Request req = MB__REQUEST__INIT;
        Mb__Share sh = MB__SHARE__INIT;
        sh.ids = ids;
        sh.n_ids = s->n;
        sh.restrict_uid = restrict_uid;
        sh.uid = uid;
        req.body_case = MB__REQUEST__BODY_SHARE;
        req.share = &sh;
        Mb__Reply *rep;
        rc = rpc_call(c, &req, &rep);
        if (rc == 0) {
            if (rep->body_case == MB__REPLY__BODY_SHARE && rep->share->token.len == sizeof(out->bytes)) {
                memcpy(out->bytes, rep->share->token.data, sizeof(out->bytes));
                /* Another process may map these frames from now on: once
                 * freed here they go back to the daemon, never into this
                 * process's cache for reuse. */
                for (size_t i = 0; i < s->n; i++)
                    s->frames[i]->exported = true;
            } else
                rc = MB_EPROTO;
            mb__reply__free_unpacked(rep, NULL);
        }
    }
    free(ids);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int mb_export(mb_client *c, void *ptr, mb_share_token *out) { return export(c, ptr, false, 0, out); }
int mb_export_to(mb_client *c, void *ptr, uint32_t uid, mb_share_token *out)
{
    return export(c, ptr, true, uid, out);
}

int mb_import(mb_client *c, const mb_share_token *t, void **ptr, size_t *size)
{
    if (!c || !t || !ptr)
        return MB_EINVAL;
    pthread_mutex_lock(&c->lock);
    struct cframe **frames = NULL;
    size_t n = 0;
    int rc = fcache_import(c, t->bytes, sizeof(t->bytes), &frames, &n);
    struct stitched *s = NULL;
    for (size_t i = 0; rc == 0 && i < n; i++)
        frames[i]->imported = true;
    if (rc == 0 && (rc = stitch_adopt(c, frames, n, &s)) != 0) {
        uint32_t *ids = malloc(n * sizeof(*ids));
        for (size_t i = 0; i < n; i++) {
            if (ids)
                ids[i] = frames[i]->id;
            fcache_forget(c, frames[i]);
        }
        if (ids)
            fcache_return_ids(c, ids, n);
        free(ids);
    }
    if (rc == 0 && (rc = ptrmap_put(&c->live, s->va, s)) != 0)
        share_free_imported(c, s, NULL);
    if (rc == 0) {
        c->st.stitch_live += s->bytes;
        *ptr = s->va;
        if (size)
            *size = s->bytes;
    }
    free(frames);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int share_free_imported(mb_client *c, struct stitched *s, void *stream)
{
    int rc = c->be->ops->stream_sync(c->be, stream);
    if (rc != 0)
        mb_log(MB_LOG_ERR, "failed to wait for work on a shared range being freed: %s", mb_strerror(rc));
    if ((rc = c->be->ops->unmap(c->be, s->va, s->bytes)) != 0)
        return rc;
    c->be->ops->free_va(c->be, s->va, s->reserved);
    c->st.bytes_mapped -= s->bytes;
    uint32_t *ids = malloc(s->n * sizeof(*ids));
    for (size_t i = 0; i < s->n; i++) {
        if (ids)
            ids[i] = s->frames[i]->id;
        fcache_forget(c, s->frames[i]);
    }
    /* Handles are dropped: tell the daemon this process let go. */
    if (ids)
        rc = fcache_return_ids(c, ids, s->n);
    free(ids);
    free(s);
    return rc;
}
