/* reclaim.c: elastic reclaim. A grant that the budget cannot cover waits in
 * a FIFO while sessions that report cached frames are asked (RECLAIM
 * notices, tenants above their min first) to hand some back; the poll loop
 * answers it when returned frames cover it (checking quotas again), asks
 * the next sessions when the asked ones answered or let their deadline
 * pass, or answers MB_ENOMEM: at the deadline, or at once when every
 * session asked has answered and none reports more. Also the guarantee
 * arithmetic every grant goes through.
 *
 * A session's notice_deadline_ms is nonzero from an automatic notice until
 * it answers (Cache.answers_notice) or the deadline passes; while it is,
 * the session is not asked again and waiting grants wait for it.
 *
 * No two grants wait on each other (a client answers notices between its
 * calls, so a session whose grant waits answers nothing until that grant
 * is answered): the grant at the head of the queue neither asks nor waits
 * for sessions whose grants wait behind it, and a session that a waiting
 * grant asked, and that has returned nothing since, is refused rather
 * than queued. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moonbright/status.h>

#include "daemon.h"
#include "log.h"
#include "size.h"

static uint64_t sat_sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

/* Bytes the budget keeps for other tenants' and uids' unmet `min`. */
static uint64_t reserved_for_others(const struct daemon *d, const struct session *s)
{
    uint64_t r = 0;
    for (const struct tenant *t = d->tenants; t; t = t->next)
        if (t != s->tenant && t->min)
            r += sat_sub(t->min, t->bytes);
    for (size_t i = 0; i < d->cfg.n_uids; i++) {
        const struct mb_config_policy *u = &d->cfg.uids[i];
        if (u->uid != s->uid && u->min)
            r += sat_sub(u->min, uid_bytes(d, u->uid));
    }
    return r;
}

/* The budget's room for s: less what is granted and what other tenants'
 * and uids' unmet min keeps for them. */
static uint64_t budget_room(const struct daemon *d, const struct session *s)
{
    return sat_sub(sat_sub(d->pool.budget_bytes, d->pool.bytes_granted), reserved_for_others(d, s));
}

bool grant_fits(const struct daemon *d, const struct session *s, uint64_t want, uint64_t *short_bytes)
{
    uint64_t avail = budget_room(d, s);
    *short_bytes = sat_sub(want, avail);
    return want <= avail;
}

uint64_t grant_room(const struct daemon *d, const struct session *s)
{
    uint64_t room = budget_room(d, s);
    const struct tenant *t = s->tenant;
    if (t && t->max != MB_CONFIG_UNLIMITED) {
        uint64_t left = sat_sub(t->max, t->bytes);
        room = left < room ? left : room;
    }
    const struct mb_config_policy *u = mb_config_uid(&d->cfg, s->uid);
    if (u && u->max != MB_CONFIG_UNLIMITED) {
        uint64_t left = sat_sub(u->max, uid_bytes(d, s->uid));
        room = left < room ? left : room;
    }
    return room;
}

static bool over_min(const struct session *s)
{
    return !s->tenant || s->tenant->bytes > s->tenant->min;
}

/* Sessions that ignored a notice come last; then those above their
 * tenant's min, then larger caches. */
static int ask_order(const void *a, const void *b)
{
    const struct session *x = *(const struct session *const *)a;
    const struct session *y = *(const struct session *const *)b;
    if ((x->ignored_notices > 0) != (y->ignored_notices > 0))
        return x->ignored_notices ? 1 : -1;
    if (over_min(x) != over_min(y))
        return over_min(x) ? -1 : 1;
    return x->cached < y->cached ? 1 : x->cached > y->cached ? -1 : 0;
}

/* reclaim_ask; with skip_waiting, not the sessions whose own grant waits:
 * the grant at the head of the queue asks without them, since they wait
 * behind it and could answer only after it. */
static uint32_t ask(struct daemon *d, const struct tenant *t, const struct session *except,
                    uint64_t bytes, uint64_t *cached_out, bool skip_waiting)
{
    uint32_t n = 0, sent = 0;
    for (struct session *s = d->sessions; s; s = s->next)
        n++;
    struct session **v = n ? calloc(n, sizeof(*v)) : NULL;
    if (!v) {
        if (n)
            mb_log(MB_LOG_ERR, "failed to ask for cached frames: out of memory");
        return 0;
    }
    uint32_t k = 0;
    bool automatic = bytes != 0;
    int64_t now = mb_now_ms();
    for (struct session *s = d->sessions; s; s = s->next) {
        if (!s->bound || s == except || s->frames == 0 || (t && s->tenant != t))
            continue;
        if (automatic && (s->cached == 0 || s->ignored_notices || s->notice_deadline_ms > now ||
                          (skip_waiting && s->waiting)))
            continue;   /* only sessions that report a cache, and can answer, are asked, once */
        v[k++] = s;
    }
    qsort(v, k, sizeof(*v), ask_order);
    uint64_t left = bytes, cached = 0;
    uint32_t deadline = (uint32_t)d->reclaim_timeout_ms;
    for (uint32_t i = 0; i < k && (!automatic || left > 0); i++) {
        uint64_t ask = automatic ? (v[i]->cached < left ? v[i]->cached : left) : 0;
        cached += v[i]->cached;
        if (daemon_notice(d, v[i], MB__NOTICE__KIND__RECLAIM, ask, deadline,
                          automatic ? "a grant is waiting for frames" : "reclaim requested") == 0) {
            sent++;
            d->count.reclaim_notices++;
            if (automatic) {   /* watched: an unanswered notice lets the next be asked */
                v[i]->notice_deadline_ms = now + (int64_t)deadline;
                v[i]->returned_at_notice = v[i]->reclaim_returned;
            }
        }
        left = sat_sub(left, ask);
    }
    free(v);
    if (cached_out)
        *cached_out = cached;
    return sent;
}

uint32_t reclaim_ask(struct daemon *d, const struct tenant *t, const struct session *except,
                     uint64_t bytes, uint64_t *cached_out)
{
    return ask(d, t, except, bytes, cached_out, false);
}

/* Whether a session other than s was asked for frames and may still
 * answer, for the grant at the head of the queue. A session whose own
 * grant waits (behind it) answers only after it (its client answers
 * notices between calls), so it is not waited for. */
static bool answers_due(const struct daemon *d, const struct session *s, int64_t now)
{
    for (const struct session *o = d->sessions; o; o = o->next)
        if (o != s && !o->waiting && o->notice_deadline_ms > now)
            return true;
    return false;
}

/* Has s returned nothing since its latest RECLAIM notice? */
static bool returned_nothing(const struct session *s)
{
    return s->reclaim_returned == s->returned_at_notice;
}

int pending_add(struct daemon *d, struct session *s, const uint8_t *ident, size_t ident_len,
                uint64_t req_id, uint64_t bytes, struct grant_shape shape, uint64_t t0_ns,
                uint64_t short_bytes)
{
    if (d->reclaim_timeout_ms <= 0 || d->n_pending >= MB_MAX_PENDING || s->waiting ||
        ident_len > sizeof(((struct pending *)0)->ident))
        return MB_ENOMEM;
    if (s->notice_deadline_ms > mb_now_ms() && returned_nothing(s))
        return MB_ENOMEM;   /* a grant waits for s's answer, which s could not give while it
                             * waits itself: refused, s gives back first (then it may wait) */
    uint64_t cached = 0;
    for (const struct session *o = d->sessions; o; o = o->next)
        if (o != s && o->bound && !o->ignored_notices)
            cached += o->cached;   /* sessions that wait, wait ahead of this grant */
    if (cached < short_bytes)
        return MB_ENOMEM;   /* nobody could give enough back: fail now */
    struct pending *p = calloc(1, sizeof(*p));
    if (!p)
        return MB_ENOMEM;
    memcpy(p->ident, ident, ident_len);
    p->ident_len = ident_len;
    p->session = s->id;
    p->req_id = req_id;
    p->bytes = bytes;
    p->shape = shape;
    p->t0_ns = t0_ns;
    p->deadline_ms = mb_now_ms() + d->reclaim_timeout_ms;
    p->reclaimed_at_start = d->count.reclaim_bytes;
    struct pending **pp = &d->pending;
    while (*pp)
        pp = &(*pp)->next;
    *pp = p;
    d->n_pending++;
    s->waiting = true;
    uint32_t asked = reclaim_ask(d, NULL, s, short_bytes, NULL);
    char a[32], b[32];
    mb_log(MB_LOG_INFO, "session %llu waits for %s: asked %u sessions for %s of cached frames",
           (unsigned long long)s->id, mb_format_size(grant_bytes(d, bytes, shape), b, sizeof(b)),
           asked, mb_format_size(short_bytes, a, sizeof(a)));
    /* Grants queued before may have waited for s, which cannot answer
     * now; and this one may have nobody left to wait for. */
    pending_run(d);
    return 0;
}

static void pending_unlink(struct daemon *d, struct pending *p)
{
    for (struct pending **pp = &d->pending; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    d->n_pending--;
    free(p);
}

static void pending_answer(struct daemon *d, struct pending *p, Mb__Reply *rep)
{
    rep->id = p->req_id;
    stats_record(d, MB_CMD_grant, rep->code, p->t0_ns);
    if (daemon_send(d, p->ident, p->ident_len, rep) != 0)
        mb_log(MB_LOG_DEBUG, "failed to send a deferred grant reply (peer gone)");
}

static void ignored(struct daemon *d, struct session *s, const char *how)
{
    s->ignored_notices++;
    d->count.reclaim_ignored++;
    mb_log(MB_LOG_INFO, "session %llu (pid %d) %s; other sessions are asked first from now on",
           (unsigned long long)s->id, (int)s->pid, how);
}

/* Sessions whose notice deadline passed without a return are marked: their
 * cache reports no longer get them asked first, nor count for a grant. */
static void mark_ignored(struct daemon *d, int64_t now)
{
    for (struct session *s = d->sessions; s; s = s->next) {
        if (!s->notice_deadline_ms || now < s->notice_deadline_ms)
            continue;
        s->notice_deadline_ms = 0;
        if (returned_nothing(s))
            ignored(d, s, "let a RECLAIM notice pass unanswered");
    }
}

void reclaim_answered(struct daemon *d, struct session *s)
{
    if (!s->notice_deadline_ms)
        return;   /* not asked by a waiting grant, or its deadline passed */
    s->notice_deadline_ms = 0;
    if (returned_nothing(s) && s->cached)
        ignored(d, s, "answered a RECLAIM notice returning nothing, yet reports a cache");
    if (d->pending)
        pending_run(d);
}

/* Quotas again at grant time: other sessions, or a lowered max, may have
 * changed them while the grant waited. */
static bool still_within_quota(struct daemon *d, struct session *s, struct pending *p)
{
    Mb__Reply rep = MB__REPLY__INIT;
    if (within_quota(d, s, grant_bytes(d, p->bytes, p->shape), &rep))
        return true;
    s->waiting = false;
    pending_answer(d, p, &rep);
    pending_unlink(d, p);
    return false;
}

void pending_run(struct daemon *d)
{
    int64_t now = mb_now_ms();
    mark_ignored(d, now);
    bool blocked = false;   /* FIFO: a grant that still waits keeps later ones waiting */
    for (struct pending *p = d->pending, *next; p; p = next) {
        next = p->next;
        struct session *s = session_by_id(d, p->session);
        if (!s) {
            pending_unlink(d, p);
            continue;
        }
        uint64_t short_bytes = 0;
        if (!blocked && grant_fits(d, s, grant_bytes(d, p->bytes, p->shape), &short_bytes)) {
            if (!still_within_quota(d, s, p))
                continue;
            Mb__Reply rep = MB__REPLY__INIT;
            grant_now(d, s, p->bytes, p->shape, 0, 0, p->t0_ns, &rep);
            s->waiting = false;
            pending_answer(d, p, &rep);
            pending_unlink(d, p);
            continue;
        }
        if (now >= p->deadline_ms && p->rounds + 1 < MB_RECLAIM_ROUNDS && !blocked &&
            ask(d, NULL, s, short_bytes, NULL, true) > 0) {
            /* The asked sessions let the deadline pass: the next ones were
             * asked; wait for them. */
            p->rounds++;
            p->deadline_ms = now + d->reclaim_timeout_ms;
            blocked = true;
            continue;
        }
        /* Before the deadline it waits, unless every session asked has
         * answered and none that reports a cache is left to ask: then it
         * is refused at once. */
        bool late = now >= p->deadline_ms;
        if (!late &&
            (blocked || answers_due(d, s, now) || ask(d, NULL, s, short_bytes, NULL, true) > 0)) {
            blocked = true;
            continue;
        }
        Mb__Reply rep = MB__REPLY__INIT;
        char a[32], b[32], c[32], w[32], why[64];
        if (late)
            snprintf(why, sizeof(why), "within %lld ms", (long long)d->reclaim_timeout_ms);
        else
            snprintf(why, sizeof(why), "(no session asked could return more)");
        mb_reply_error(&rep, MB_ENOMEM, "cannot grant %s: %s of %s budget in use, and reclaim "
                       "returned only %s %s",
                       mb_format_size(grant_bytes(d, p->bytes, p->shape), w, sizeof(w)),
                       mb_format_size(d->pool.bytes_granted, a, sizeof(a)),
                       mb_format_size(d->pool.budget_bytes, b, sizeof(b)),
                       mb_format_size(d->count.reclaim_bytes - p->reclaimed_at_start, c, sizeof(c)),
                       why);
        if (late)
            d->count.reclaim_timeouts++;
        else
            d->count.reclaim_short++;
        s->waiting = false;
        pending_answer(d, p, &rep);
        pending_unlink(d, p);
    }
}

void pending_drop_session(struct daemon *d, uint64_t session)
{
    for (struct pending *p = d->pending, *next; p; p = next) {
        next = p->next;
        if (p->session == session)
            pending_unlink(d, p);
    }
}

void pending_fail_all(struct daemon *d, int code, const char *why)
{
    while (d->pending) {
        struct pending *p = d->pending;
        struct session *s = session_by_id(d, p->session);
        if (s) {
            Mb__Reply rep = MB__REPLY__INIT;
            mb_reply_error(&rep, code, "cannot grant %llu bytes: %s",
                           (unsigned long long)p->bytes, why);
            s->waiting = false;
            pending_answer(d, p, &rep);
        }
        pending_unlink(d, p);
    }
}

int64_t pending_next_deadline(const struct daemon *d)
{
    int64_t t = INT64_MAX;
    for (const struct pending *p = d->pending; p; p = p->next)
        if (p->deadline_ms < t)
            t = p->deadline_ms;
    return t;
}
