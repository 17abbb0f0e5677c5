/* shares.c: sharing frames between processes: capability tokens a session
 * makes for frames it holds (random, single use, optionally for one uid,
 * capped per session and per uid), their redemption by another session (the
 * frames' descriptors follow on its handle channel; the importer is charged
 * for them), the holds importers keep (indexed by a hash of session and
 * frame), and revocation. A frame is free only when its owner and every
 * importer have let go (frames.c). */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <moonbright/status.h>

#include "daemon.h"
#include "log.h"

#define SHARE_TOKEN_BYTES MB_SHARE_TOKEN_BYTES
#define SHARE_MAX_FRAMES MB_SHARE_MAX_FRAMES
/* Unredeemed tokens one session, and all sessions of one uid, may have. */
#define SHARE_MAX_TOKENS_SESSION 64u
#define SHARE_MAX_TOKENS_UID 256u

struct share {
    uint8_t token[SHARE_TOKEN_BYTES];
    uint64_t exporter;           /* session id */
    uid_t exporter_uid;
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

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
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
    uint32_t dup = frame_pool_duplicate(&d->pool, m->ids, m->n_ids);   /* (all name frames) */
    if (dup) {
        mb_reply_error(rep, MB_EINVAL, "share refused: frame %u is named more than once", dup);
        return;
    }
    uint32_t mine = 0, uid_tokens = 0;
    for (const struct share *o = d->shares; o; o = o->next) {
        mine += o->exporter == rc->s->id;
        uid_tokens += o->exporter_uid == rc->s->uid;
    }
    if (mine >= SHARE_MAX_TOKENS_SESSION || uid_tokens >= SHARE_MAX_TOKENS_UID) {
        mb_reply_error(rep, MB_ELIMIT, "share refused: %u unredeemed share tokens already (at most "
                       "%u per session and %u per uid); wait until some are imported or revoked",
                       mine >= SHARE_MAX_TOKENS_SESSION ? mine : uid_tokens,
                       SHARE_MAX_TOKENS_SESSION, SHARE_MAX_TOKENS_UID);
        return;
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
    sh->exporter_uid = rc->s->uid;
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

/* The hold index: open addressing with linear probing over hold_slots,
 * each slot 0 (empty) or the index + 1 of a hold in holds[]. */
static size_t hold_hash(uint64_t session, uint32_t id)
{
    uint64_t x = session * 0x9e3779b97f4a7c15ull ^ ((uint64_t)id + 0x632be59bd9b4e019ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return (size_t)x;
}

/* The slot holding (session, id), or the empty slot where it would go. */
static size_t hold_slot(const struct daemon *d, uint64_t session, uint32_t id)
{
    size_t mask = d->hold_slots_cap - 1;
    size_t i = hold_hash(session, id) & mask;
    while (d->hold_slots[i]) {
        const struct hold *h = &d->holds[d->hold_slots[i] - 1];
        if (h->session == session && h->id == id)
            break;
        i = (i + 1) & mask;
    }
    return i;
}

/* Index of the hold (session, id) in holds[], or -1. */
static ptrdiff_t hold_find(const struct daemon *d, uint64_t session, uint32_t id)
{
    if (!d->hold_slots_cap)
        return -1;
    size_t i = hold_slot(d, session, id);
    return d->hold_slots[i] ? (ptrdiff_t)d->hold_slots[i] - 1 : -1;
}

static int index_grow(struct daemon *d, size_t want)
{
    size_t cap = d->hold_slots_cap ? d->hold_slots_cap : 128;
    while (cap < 2 * want + 2)
        cap *= 2;
    if (cap == d->hold_slots_cap)
        return 0;
    uint32_t *ns = calloc(cap, sizeof(*ns));
    if (!ns)
        return MB_ENOMEM;
    free(d->hold_slots);
    d->hold_slots = ns;
    d->hold_slots_cap = cap;
    for (size_t k = 0; k < d->n_holds; k++)
        d->hold_slots[hold_slot(d, d->holds[k].session, d->holds[k].id)] = (uint32_t)k + 1;
    return 0;
}

/* Remove the hold at index k: its slot (shifting later probes back), then
 * move the last hold into its place. */
static void hold_remove(struct daemon *d, size_t k)
{
    size_t mask = d->hold_slots_cap - 1;
    size_t i = hold_slot(d, d->holds[k].session, d->holds[k].id);
    d->hold_slots[i] = 0;
    for (size_t j = (i + 1) & mask; d->hold_slots[j]; j = (j + 1) & mask) {
        const struct hold *h = &d->holds[d->hold_slots[j] - 1];
        size_t home = hold_hash(h->session, h->id) & mask;
        /* Move j back to the hole at i when the hole lies between its home
         * and j (cyclically): a lookup from home would stop at the hole. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            d->hold_slots[i] = d->hold_slots[j];
            d->hold_slots[j] = 0;
            i = j;
        }
    }
    size_t last = --d->n_holds;
    if (k != last) {
        d->holds[k] = d->holds[last];
        d->hold_slots[hold_slot(d, d->holds[k].session, d->holds[k].id)] = (uint32_t)k + 1;
    }
}

bool shares_is_valid(const struct daemon *d)
{
    if (d->n_holds && (!d->hold_slots_cap || d->hold_slots_cap <= 2 * d->n_holds ||
                       (d->hold_slots_cap & (d->hold_slots_cap - 1))))
        return false;
    size_t used = 0;
    for (size_t i = 0; i < d->hold_slots_cap; i++)
        used += d->hold_slots[i] != 0;
    if (used != d->n_holds)
        return false;
    for (size_t k = 0; k < d->n_holds; k++)
        if (hold_find(d, d->holds[k].session, d->holds[k].id) != (ptrdiff_t)k)
            return false;
    return true;
}

bool shares_holds(struct daemon *d, const struct session *s, uint32_t id)
{
    return hold_find(d, s->id, id) >= 0;
}

bool shares_session_holds(const struct daemon *d, uint64_t session)
{
    for (size_t k = 0; k < d->n_holds; k++)
        if (d->holds[k].session == session)
            return true;
    return false;
}

/* Room for n more hold records. */
static int holds_room(struct daemon *d, size_t n)
{
    if (d->n_holds + n > UINT32_MAX / 4)
        return MB_ELIMIT;
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
    return index_grow(d, d->n_holds + n);
}

static void hold_add(struct daemon *d, uint64_t session, uint32_t id)
{
    d->holds[d->n_holds] = (struct hold){ session, id };
    d->hold_slots[hold_slot(d, session, id)] = (uint32_t)++d->n_holds;
}

/* Charge (or with a negative sign, uncharge) imported bytes to the holder:
 * its session, or the record of its killed session. */
static void charge(struct daemon *d, uint64_t session, uint64_t bytes, bool add)
{
    struct session *s = session_by_id(d, session);
    if (s) {
        s->import_bytes = add ? s->import_bytes + bytes : s->import_bytes - bytes;
        if (s->tenant)
            s->tenant->bytes = add ? s->tenant->bytes + bytes : s->tenant->bytes - bytes;
        return;
    }
    for (struct withdrawn *w = d->withdrawn; w; w = w->next)
        if (w->session == session && !add) {
            w->import_bytes -= bytes;
            if (w->tenant)
                w->tenant->bytes -= bytes;
            return;
        }
}

/* Frame id of its owner's becomes lent (or stops being lent). */
static void lent_change(struct daemon *d, uint32_t id, bool more)
{
    struct frame *f = frame_pool_get(&d->pool, id);
    struct session *o = f && f->owner ? session_by_id(d, f->owner) : NULL;
    if (!o)
        return;   /* nobody owns it, or a killed session: nothing to bound */
    uint64_t b = frame_pool_bytes(&d->pool, id);
    o->lent_bytes = more ? o->lent_bytes + b : o->lent_bytes - b;
    if (o->cached > o->bytes - o->lent_bytes)
        o->cached = o->bytes - o->lent_bytes;
}

void shares_lend(struct daemon *d, uint32_t id, bool more)
{
    struct frame *f = frame_pool_get(&d->pool, id);
    if (f && f->holders == (more ? 0u : 1u))
        lent_change(d, id, more);
}

static int add_holds(struct daemon *d, struct session *s, const uint32_t *ids, uint32_t n)
{
    int rc = holds_room(d, n);
    if (rc != 0)
        return rc;
    for (uint32_t i = 0; i < n; i++) {
        hold_add(d, s->id, ids[i]);
        shares_lend(d, ids[i], true);
        frame_pool_get(&d->pool, ids[i])->holders++;
        frame_pool_note_importer(&d->pool, ids[i], s->uid);
        charge(d, s->id, frame_pool_bytes(&d->pool, ids[i]), true);
    }
    return 0;
}

/* Drop the hold at index k: uncharge its holder, let the frame go. */
static void drop_hold_at(struct daemon *d, size_t k)
{
    uint64_t session = d->holds[k].session;
    uint32_t id = d->holds[k].id;
    hold_remove(d, k);
    charge(d, session, frame_pool_bytes(&d->pool, id), false);
    shares_lend(d, id, false);
    frame_pool_drop_hold(&d->pool, id);
}

int shares_reattach_hold(struct daemon *d, struct session *s, uint32_t id, uint64_t bytes)
{
    if (shares_holds(d, s, id))
        return MB_EPERM;   /* reported twice */
    int rc = holds_room(d, 1);
    struct frame *f = frame_pool_get(&d->pool, id);
    /* Its owner reported it first: the owner's frame becomes lent. */
    bool lend = f && f->state == FRAME_GRANTED && f->adopted && f->holders == 0 && f->owner;
    if (rc == 0)
        rc = frame_pool_adopt_held(&d->pool, id, bytes, s->uid);
    if (rc == 0 && lend)
        lent_change(d, id, true);
    if (rc == 0) {
        hold_add(d, s->id, id);
        frame_pool_note_importer(&d->pool, id, s->uid);
        charge(d, s->id, frame_pool_bytes(&d->pool, id), true);
    }
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
    uint64_t want = 0;
    for (uint32_t i = 0; i < sh->n; i++) {
        if (shares_holds(d, s, sh->ids[i])) {
            mb_reply_error(rep, MB_EINVAL, "this session already holds frame %u", sh->ids[i]);
            return;
        }
        want += frame_pool_bytes(&d->pool, sh->ids[i]);
    }
    /* Imported frames count against the importer's quotas like granted ones. */
    if (!within_quota(d, s, want, rep))
        return;
    /* Single use: the token is gone whatever happens next. */
    *pp = sh->next;
    int err = add_holds(d, s, sh->ids, sh->n);
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
    if (frame_pool_duplicate(&d->pool, ids, n))   /* (held: all name frames) */
        return MB_EINVAL;
    for (size_t i = 0; i < n; i++)
        drop_hold_at(d, (size_t)hold_find(d, s->id, ids[i]));
    return 0;
}

void shares_revoke(struct daemon *d, const struct session *s, const uint32_t *ids, size_t n)
{
    /* The ids sorted once, each token's looked up: O((n + its ids) log n)
     * a request, not their product. Without memory for the copy every
     * token of the session goes (revoking more is safe). */
    uint32_t *v = n ? malloc(n * sizeof(*v)) : NULL;
    if (v) {
        memcpy(v, ids, n * sizeof(*v));
        qsort(v, n, sizeof(*v), cmp_u32);
    }
    for (struct share **pp = &d->shares; *pp;) {
        struct share *sh = *pp;
        bool hit = sh->exporter == s->id && n && !v;
        for (uint32_t i = 0; sh->exporter == s->id && !hit && v && i < sh->n; i++)
            hit = bsearch(&sh->ids[i], v, n, sizeof(*v), cmp_u32) != NULL;
        if (hit) {
            *pp = sh->next;
            share_free(sh);
        } else {
            pp = &sh->next;
        }
    }
    free(v);
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
        if (d->holds[k].session == session)
            drop_hold_at(d, k);   /* the last hold moves into k */
        else
            k++;
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
    free(d->hold_slots);
    d->holds = NULL;
    d->hold_slots = NULL;
    d->n_holds = d->cap_holds = d->hold_slots_cap = 0;
}
