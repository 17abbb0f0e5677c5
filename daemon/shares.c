/* shares.c: sharing frames between processes: capability tokens a session
 * makes for frames it holds (random, single use, optionally for one uid),
 * their redemption by another session (the frames' descriptors follow on
 * its handle channel), the holds importers keep, and revocation. A frame is
 * free only when its owner and every importer have let go (frames.c). */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <moonbright/status.h>

#include "daemon.h"
#include "log.h"

#define SHARE_TOKEN_BYTES MB_SHARE_TOKEN_BYTES
#define SHARE_MAX_FRAMES MB_SHARE_MAX_FRAMES

struct share {
    uint8_t token[SHARE_TOKEN_BYTES];
    uint64_t exporter;           /* session id */
    bool restrict_uid;
    uid_t uid;
    uint32_t n;
    uint32_t *ids;               /* in the exporter's order */
    struct share *next;
};

static void share_free(struct share *sh)
{
    free(sh->ids);
    free(sh);
}

void h_share(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__ShareReply sr;
    static uint8_t token[SHARE_TOKEN_BYTES];
    struct daemon *d = rc->d;
    const Mb__Share *m = req->share;
    if (m->n_ids == 0 || m->n_ids > SHARE_MAX_FRAMES) {
        mb_reply_error(rep, MB_EINVAL, "share of %zu frames: name 1 to %u", m->n_ids, SHARE_MAX_FRAMES);
        return;
    }
    for (size_t i = 0; i < m->n_ids; i++) {
        struct frame *f = frame_pool_get(&d->pool, m->ids[i]);
        if (!f || f->state != FRAME_GRANTED || f->owner != rc->s->id) {
            mb_reply_error(rep, MB_EPERM, "share refused: frame %u is not held by this session",
                           m->ids[i]);
            return;
        }
    }
    struct share *sh = calloc(1, sizeof(*sh));
    if (sh)
        sh->ids = malloc(m->n_ids * sizeof(*sh->ids));
    if (!sh || !sh->ids || getrandom(sh->token, sizeof(sh->token), 0) != (ssize_t)sizeof(sh->token)) {
        if (sh)
            share_free(sh);
        mb_reply_error(rep, MB_ESYS, "failed to make a share token");
        return;
    }
    memcpy(sh->ids, m->ids, m->n_ids * sizeof(*sh->ids));
    sh->n = (uint32_t)m->n_ids;
    sh->exporter = rc->s->id;
    sh->restrict_uid = m->restrict_uid;
    sh->uid = (uid_t)m->uid;
    sh->next = d->shares;
    d->shares = sh;
    memcpy(token, sh->token, sizeof(token));
    mb__share_reply__init(&sr);
    sr.token.data = token;
    sr.token.len = sizeof(token);
    sr.bytes = 0;
    for (uint32_t i = 0; i < sh->n; i++)
        sr.bytes += frame_pool_bytes(&d->pool, sh->ids[i]);
    rep->body_case = MB__REPLY__BODY_SHARE;
    rep->share = &sr;
}

/* Constant-time: tokens are secrets. */
static struct share **find_token(struct daemon *d, const uint8_t *token)
{
    for (struct share **pp = &d->shares; *pp; pp = &(*pp)->next) {
        uint8_t diff = 0;
        for (size_t i = 0; i < SHARE_TOKEN_BYTES; i++)
            diff |= (uint8_t)((*pp)->token[i] ^ token[i]);
        if (diff == 0)
            return pp;
    }
    return NULL;
}

bool shares_holds(struct daemon *d, const struct session *s, uint32_t id)
{
    for (size_t i = 0; i < d->n_holds; i++)
        if (d->holds[i].session == s->id && d->holds[i].id == id)
            return true;
    return false;
}

/* Room for n more hold records. */
static int holds_room(struct daemon *d, size_t n)
{
    if (d->n_holds + n > d->cap_holds) {
        size_t cap = d->cap_holds ? d->cap_holds : 64;
        while (cap < d->n_holds + n)
            cap *= 2;
        struct hold *nh = realloc(d->holds, cap * sizeof(*nh));
        if (!nh)
            return MB_ENOMEM;
        d->holds = nh;
        d->cap_holds = cap;
    }
    return 0;
}

static int add_holds(struct daemon *d, uint64_t session, const uint32_t *ids, uint32_t n)
{
    int rc = holds_room(d, n);
    if (rc != 0)
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        d->holds[d->n_holds++] = (struct hold){ session, ids[i] };
        frame_pool_get(&d->pool, ids[i])->holders++;
    }
    return 0;
}

int shares_reattach_hold(struct daemon *d, struct session *s, uint32_t id, uint64_t bytes)
{
    if (shares_holds(d, s, id))
        return MB_EPERM;   /* reported twice */
    int rc = holds_room(d, 1);
    if (rc == 0 && (rc = frame_pool_adopt_held(&d->pool, id, bytes)) == 0)
        d->holds[d->n_holds++] = (struct hold){ s->id, id };
    return rc;
}

void h_import(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__ImportReply ir;
    static Mb__Frame *framep[SHARE_MAX_FRAMES];
    static Mb__Frame frames[SHARE_MAX_FRAMES];
    struct daemon *d = rc->d;
    struct session *s = rc->s;
    const Mb__Import *m = req->import;
    struct share **pp = m->token.len == SHARE_TOKEN_BYTES ? find_token(d, m->token.data) : NULL;
    if (!pp) {
        mb_reply_error(rep, MB_ENOENT, "unknown, used or revoked share token");
        return;
    }
    struct share *sh = *pp;
    if (sh->restrict_uid && sh->uid != s->uid) {
        mb_reply_error(rep, MB_EPERM, "this share token is for another user");
        return;
    }
    if (sh->exporter == s->id) {
        mb_reply_error(rep, MB_EINVAL, "a session cannot import its own share");
        return;
    }
    for (uint32_t i = 0; i < sh->n; i++) {
        if (shares_holds(d, s, sh->ids[i])) {
            mb_reply_error(rep, MB_EINVAL, "this session already holds frame %u", sh->ids[i]);
            return;
        }
    }
    /* Single use: the token is gone whatever happens next. */
    *pp = sh->next;
    int err = add_holds(d, s->id, sh->ids, sh->n);
    if (err == 0 && (err = send_frame_fds(d, s, sh->ids, sh->n)) != 0)
        /* Some descriptors may have reached the process: the holds stay
         * until it returns them or exits. */
        mb_log(MB_LOG_WARN, "session %llu: failed to pass shared frames", (unsigned long long)s->id);
    if (err != 0) {
        mb_reply_error(rep, err, "import failed: %s", mb_strerror(err));
        share_free(sh);
        return;
    }
    mb__import_reply__init(&ir);
    for (uint32_t i = 0; i < sh->n; i++) {
        mb__frame__init(&frames[i]);
        frames[i].id = sh->ids[i];
        frames[i].bytes = frame_pool_bytes(&d->pool, sh->ids[i]);
        frames[i].fd_follows = true;
        framep[i] = &frames[i];
    }
    ir.n_frames = sh->n;
    ir.frames = framep;
    rep->body_case = MB__REPLY__BODY_IMPORT;
    rep->import = &ir;
    mb_log(MB_LOG_INFO, "session %llu imported %u frames shared by session %llu",
           (unsigned long long)s->id, sh->n, (unsigned long long)sh->exporter);
    share_free(sh);
}

int shares_return(struct daemon *d, struct session *s, const uint32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!shares_holds(d, s, ids[i]))
            return MB_EPERM;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < d->n_holds; k++) {
            if (d->holds[k].session == s->id && d->holds[k].id == ids[i]) {
                d->holds[k] = d->holds[--d->n_holds];
                frame_pool_drop_hold(&d->pool, ids[i]);
                break;
            }
        }
    }
    return 0;
}

void shares_revoke(struct daemon *d, const struct session *s, const uint32_t *ids, size_t n)
{
    for (struct share **pp = &d->shares; *pp;) {
        struct share *sh = *pp;
        bool hit = false;
        for (uint32_t i = 0; sh->exporter == s->id && !hit && i < sh->n; i++)
            for (size_t k = 0; !hit && k < n; k++)
                hit = sh->ids[i] == ids[k];
        if (hit) {
            *pp = sh->next;
            share_free(sh);
        } else {
            pp = &sh->next;
        }
    }
}

void shares_revoke_all(struct daemon *d, uint64_t session)
{
    for (struct share **pp = &d->shares; *pp;) {
        struct share *sh = *pp;
        if (sh->exporter == session) {
            *pp = sh->next;
            share_free(sh);
        } else {
            pp = &sh->next;
        }
    }
}

void shares_drop_holds(struct daemon *d, uint64_t session)
{
    for (size_t k = 0; k < d->n_holds;) {
        if (d->holds[k].session == session) {
            uint32_t id = d->holds[k].id;
            d->holds[k] = d->holds[--d->n_holds];
            frame_pool_drop_hold(&d->pool, id);
        } else {
            k++;
        }
    }
}

void shares_destroy(struct daemon *d)
{
    while (d->shares) {
        struct share *sh = d->shares;
        d->shares = sh->next;
        share_free(sh);
    }
    free(d->holds);
    d->holds = NULL;
    d->n_holds = d->cap_holds = 0;
}
