/* share.c: sharing allocations between processes: a capability token for
 * the frames behind a stitched range (mb_export), redeeming it in another
 * process (mb_import maps the same frames), and freeing an imported range
 * (its frames go back to the daemon, never into this process's cache).
 *
 * Only memory of its own can be shared: a heap allocation above 8 MiB that
 * spans its arena (it leaves the heap and becomes a range of its own), or a
 * growable one; imports cannot be re-shared. The memory
 * lives until every holder has freed it. Revocation: a token not yet
 * redeemed dies when the exporter frees the range or exits; an import
 * already made keeps its memory. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "grow.h"
#include "log.h"
#include "protocol.h"

_Static_assert(sizeof(((mb_share_token *)0)->bytes) == MB_SHARE_TOKEN_BYTES,
               "mb_share_token carries the protocol's share token");

/* Ask the daemon for a token for frames ids[0..n). */
static int share_ids(mb_client *c, const uint32_t *ids, size_t n, bool restrict_uid, uint32_t uid,
                     mb_share_token *out)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Share sh = MB__SHARE__INIT;
    sh.ids = (uint32_t *)ids;
    sh.n_ids = n;
    sh.restrict_uid = restrict_uid;
    sh.uid = uid;
    req.body_case = MB__REQUEST__BODY_SHARE;
    req.share = &sh;
    Mb__Reply *rep;
    pthread_mutex_lock(&c->flock);
    int rc = rpc_call(c, &req, &rep);
    pthread_mutex_unlock(&c->flock);
    if (rc == 0) {
        if (rep->body_case == MB__REPLY__BODY_SHARE && rep->share->token.len == sizeof(out->bytes))
            memcpy(out->bytes, rep->share->token.data, sizeof(out->bytes));
        else
            rc = MB_EPROTO;
        mb__reply__free_unpacked(rep, NULL);
    }
    return rc;
}

static int export(mb_client *c, void *ptr, bool restrict_uid, uint32_t uid, mb_share_token *out)
{
    if (!c || !ptr || !out)
        return MB_EINVAL;
    /* A growable range of its own: held busy while its frames are named,
     * so that no tail is mapped or cut under them. */
    uint32_t *ids = NULL;
    size_t n = 0;
    int rc = grow_share_begin(c, ptr, &ids, &n);
    if (rc != MB_ENOENT) {
        if (rc == 0)
            rc = share_ids(c, ids, n, restrict_uid, uid, out);
        if (ids)
            grow_share_end(c, ptr, n, rc == 0);
        free(ids);
        return rc;
    }
    rc = 0;
    pthread_mutex_lock(&c->lock);
    struct stitched *s = ptrmap_get(&c->live, ptr);
    if (!s) {
        /* A heap block that spans its arena becomes a range of its own. */
        size_t before;
        if (mb_pool_usable_size(c->pool, ptr, &before) != 0)
            rc = MB_ENOENT;
        else if ((rc = tiers_detach(c, ptr, &s)) == MB_EBUSY)
            mb_log(MB_LOG_WARN, "failed to export %p: it shares heap memory with other "
                   "allocations (growable ones always own theirs: allocate memory to share with "
                   "mb_malloc_growable)", ptr);
        else if (rc == 0 && (rc = ptrmap_put(&c->live, s->va, s)) != 0)
            tiers_adopt(c, s, MB_POOL_SYNC);   /* unreachable in practice: back to the heap */
        else if (rc == 0)
            c->st.stitch_live += s->bytes;
    } else if (s->imported) {
        rc = MB_EINVAL;
    }
    /* A range of its own (c->live): its frames change only when the user
     * frees it, which the caller does not do while sharing it. */
    ids = rc == 0 ? malloc(s->n * sizeof(*ids)) : NULL;
    if (rc == 0 && !ids)
        rc = MB_ENOMEM;
    for (size_t i = 0; rc == 0 && i < s->n; i++)
        ids[i] = s->frames[i]->id;
    n = rc == 0 ? s->n : 0;
    pthread_mutex_unlock(&c->lock);
    if (rc == 0)
        rc = share_ids(c, ids, n, restrict_uid, uid, out);
    if (rc == 0) {
        /* Another process may map these frames from now on: once freed
         * here they go back to the daemon, never into this process's
         * cache for reuse. */
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < n; i++)
            s->frames[i]->exported = true;
        pthread_mutex_unlock(&c->lock);
    }
    free(ids);
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
    pthread_mutex_lock(&c->flock);
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
    pthread_mutex_unlock(&c->flock);
    free(frames);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&c->lock);
    if ((rc = ptrmap_put(&c->live, s->va, s)) == 0)
        c->st.stitch_live += s->bytes;
    pthread_mutex_unlock(&c->lock);
    if (rc != 0) {
        pthread_mutex_lock(&c->flock);
        share_free_imported(c, s, NULL);   /* never handed out: nothing uses it */
        pthread_mutex_unlock(&c->flock);
        return rc;
    }
    *ptr = s->va;
    if (size)
        *size = s->bytes;
    return 0;
}

int share_free_imported(mb_client *c, struct stitched *s, void *stream)
{
    (void)stream;   /* the caller knows no work uses the range any more */
    int rc;
    if ((rc = c->be->ops->unmap(c->be, s->va, s->bytes)) != 0)
        return rc;
    c->be->ops->free_va(c->be, s->va, s->reserved);
    c->fst.bytes_mapped -= s->bytes;
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
