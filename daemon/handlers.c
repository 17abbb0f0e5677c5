/* handlers.c: one handler per row of commands.def, the dispatch that checks
 * what every row needs (a body, a bound session, an admin uid) in one place,
 * and the per-command counts and latency histograms it records. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <moonbright/status.h>

#include "commands.h"
#include "daemon.h"
#include "log.h"
#include "size.h"

/* A grant moves at most this many frames, so its descriptors fit the handle
 * channel's buffer while the client waits for the reply. */
#define MAX_GRANT_FRAMES MB_GRANT_MAX_FRAMES
#define SLOW_GRANT_NS 2000000ull   /* grants slower than this are logged (info) with their path,
                                     * unless d->slow_grant_ns says otherwise */
/* Largest page of the frame table (each entry up to ~160 bytes packed). */
#define MAX_FRAMES_PAGE MB_FRAMES_PAGE_MAX

const uint64_t mb_lat_bounds_us[MB_LAT_BUCKETS] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000,
};

typedef void handler_fn(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep);

static const char *size_str(uint64_t bytes, char *buf, size_t len)
{
    if (bytes == MB_CONFIG_UNLIMITED)
        return "unlimited";
    return mb_format_size(bytes, buf, len);
}

void stats_record(struct daemon *d, int cmd, int code, uint64_t t0_ns)
{
    if (code == MB_EPERM) {
        d->count.refused++;
        d->count.refused_auth++;
    } else if (code == MB_EQUOTA) {
        d->count.refused++;
        d->count.refused_quota++;
    } else if (code != 0) {
        d->count.errors++;
    }
    if (cmd < 0 || cmd >= MB_CMD_COUNT)
        return;
    struct cmd_stats *st = &d->stats[cmd];
    uint64_t us = (mb_now_ns() - t0_ns) / 1000u;
    st->count++;
    st->errors += code != 0;
    st->sum_us += us;
    for (int i = 0; i < MB_LAT_BUCKETS; i++)
        if (us <= mb_lat_bounds_us[i]) {
            st->bucket[i]++;
            return;
        }
    st->over++;
}

static void h_hello(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__HelloReply hr;
    const Mb__Hello *h = req->hello;
    if (rc->s) {
        mb_reply_error(rep, MB_EINVAL, "this connection is already bound to session %llu",
                       (unsigned long long)rc->s->id);
        return;
    }
    if (h->version != MB_PROTOCOL_VERSION) {
        mb_reply_error(rep, MB_EPROTO, "client speaks protocol version %u, this moonbrightd speaks "
                       "version %u: use libmbclient and mbctl from the daemon's release",
                       h->version, MB_PROTOCOL_VERSION);
        return;
    }
    if (h->token.len != MB_TOKEN_BYTES) {
        mb_reply_error(rep, MB_EPROTO, "hello needs the %d-byte token from the handle channel",
                       MB_TOKEN_BYTES);
        return;
    }
    struct session *s = session_by_token(rc->d, h->token.data);
    if (!s || s->bound) {
        mb_reply_error(rep, MB_EPERM, "unknown or already used session token");
        return;
    }
    const char *name = h->tenant && *h->tenant ? h->tenant : "default";
    if (!tenant_name_ok(name)) {
        mb_reply_error(rep, MB_EINVAL, "bad tenant name (1-63 of A-Z a-z 0-9 . _ - : @ +)");
        return;
    }
    if (rc->ident_len > sizeof(s->ident)) {
        mb_reply_error(rep, MB_EPROTO, "identity too long");
        return;
    }
    /* The control connection's own credentials (zmtp.c): a token another
     * uid got hold of does not make that uid this session. */
    const struct ctl_conn *conn = ctl_by_ident(rc->d, rc->ident, rc->ident_len);
    if (conn && conn->uid != s->uid) {
        mb_reply_error(rep, MB_EPERM, "the token belongs to a session of uid %u; this connection "
                       "is uid %u's", (unsigned)s->uid, (unsigned)conn->uid);
        return;
    }
    const struct mb_config_policy *pol = mb_config_tenant(&rc->d->cfg, name);
    if (pol && !mb_config_tenant_allows(pol, s->uid)) {
        mb_reply_error(rep, MB_EPERM, "tenant '%s' is bound to other users by the config: uid %u "
                       "may not run under it", name, (unsigned)s->uid);
        mb_log(MB_LOG_WARN, "refused hello of pid %d (uid %u) as tenant %s: not one of its uids",
               (int)s->pid, (unsigned)s->uid, name);
        return;
    }
    if (!(s->tenant = tenant_attach(rc->d, s, name))) {
        mb_reply_error(rep, MB_ENOMEM, "out of memory");
        return;
    }
    memcpy(s->ident, rc->ident, rc->ident_len);
    s->ident_len = rc->ident_len;
    s->bound = true;
    mb__hello_reply__init(&hr);
    hr.session_id = s->id;
    hr.backend = (char *)rc->d->be->name;
    hr.frame_bytes = rc->d->pool.frame_bytes;
    hr.device = (uint32_t)rc->d->device;
    hr.exact_plans = true;
    hr.device_uuid.data = rc->d->be->uuid;
    hr.device_uuid.len = sizeof(rc->d->be->uuid);
    rep->body_case = MB__REPLY__BODY_HELLO;
    rep->hello = &hr;
    mb_log(MB_LOG_INFO, "session %llu: pid %d uid %d tenant %s", (unsigned long long)s->id,
           (int)s->pid, (int)s->uid, name);
    if (rc->d->draining)
        daemon_notice(rc->d, s, MB__NOTICE__KIND__DRAINING, 0,
                      rc->d->stopping ? (uint32_t)(rc->d->drain_deadline_ms - mb_now_ms()) : 0,
                      "the daemon is draining");
}

/* The descriptors of ids[0..n) on s's handle channel, in batches (see
 * send_frame_fds). */
static int send_fds(struct daemon *d, struct session *s, const uint32_t *ids, uint32_t n)
{
    for (uint32_t off = 0; off < n; off += MB_CHAN_MAX_FDS) {
        struct mb_chan_msg m = { .type = MB_CHAN_FRAMES, .session_id = s->id };
        int fds[MB_CHAN_MAX_FDS];
        struct frame *f[MB_CHAN_MAX_FDS];
        m.count = n - off < MB_CHAN_MAX_FDS ? n - off : MB_CHAN_MAX_FDS;
        for (uint32_t i = 0; i < m.count; i++) {
            m.ids[i] = ids[off + i];
            f[i] = frame_pool_get(&d->pool, ids[off + i]);
            if (f[i]->mem.fd < 0) {
                int rc = frame_pool_export_passed(&d->pool, f[i]);
                if (rc != 0)
                    return rc;
            }
            fds[i] = f[i]->mem.fd;
        }
        int rc = mb_chan_send(s->chan, &m, fds);
        if (rc != 0)
            return rc;
        for (uint32_t i = 0; i < m.count; i++)
            frame_pool_passed(&d->pool, f[i]);
    }
    return 0;
}

/* Descriptors travel on the handle channel before the reply, in batches.
 * A frame passed on keeps its exported descriptor here only while the
 * daemon's descriptors are within free_descriptors_max (frame_pool_passed;
 * where the backend can let go of one): the daemon's descriptors are
 * mostly its free frames', not one for every frame it ever granted. A
 * frame granted again, or shared, without one is exported again first
 * (counted in d->pool.last and reexports). */
int send_frame_fds(struct daemon *d, struct session *s, const uint32_t *ids, uint32_t n)
{
    /* Exports on this path go first: the reserve's workers start no create
     * or export meanwhile (on an H100, 4 exports on a grant's path once took
     * 13.85 ms while the workers made frames). */
    bool exports = false;
    for (uint32_t i = 0; i < n && !exports; i++)
        exports = frame_pool_get(&d->pool, ids[i])->mem.fd < 0;
    if (exports)
        frame_pool_path_busy(&d->pool, 1);
    int rc = send_fds(d, s, ids, n);
    if (exports)
        frame_pool_path_busy(&d->pool, -1);
    return rc;
}

/* The orders of the frames a grant of `bytes` takes (into orders[], when
 * not NULL); returns how many (0 when more than MAX_GRANT_FRAMES),
 * *covered the bytes they hold. */
static uint32_t grant_plan(const struct daemon *d, uint64_t bytes, struct grant_shape shape,
                           uint8_t *orders, uint64_t *covered)
{
    size_t n = (shape.exact ? mb_frame_plan_exact : mb_frame_plan)(
        bytes, d->pool.frame_bytes, shape.max_order, orders, orders ? MAX_GRANT_FRAMES : 0, covered);
    return n <= MAX_GRANT_FRAMES ? (uint32_t)n : 0;
}

uint64_t grant_bytes(const struct daemon *d, uint64_t bytes, struct grant_shape shape)
{
    uint64_t covered;
    grant_plan(d, bytes, shape, NULL, &covered);
    return covered;
}

struct grant_shape grant_shape_of(const Mb__Grant *g)
{
    if (!g->large)
        return (struct grant_shape){ 0, false };
    unsigned m = g->max_order && g->max_order < MB_MAX_ORDER ? g->max_order : MB_MAX_ORDER;
    return (struct grant_shape){ m, g->exact };
}

/* The warm plan of a grant: at most max_n free frames (and a grant's most). */
static uint32_t warm_plan(struct daemon *d, const struct session *s, uint64_t bytes, uint64_t covered,
                          struct grant_shape shape, uint32_t max_n, uint8_t *orders)
{
    return frame_pool_warm_plan(&d->pool, s->uid, bytes, covered, shape.max_order,
                                max_n < MAX_GRANT_FRAMES ? max_n : MAX_GRANT_FRAMES, orders);
}

void grant_now(struct daemon *d, struct session *s, uint64_t bytes, struct grant_shape shape,
               uint32_t warm_max, uint32_t warm_full_max, uint64_t t0_ns, Mb__Reply *rep)
{
    static Mb__GrantReply gr;
    static Mb__Frame frames[MAX_GRANT_FRAMES];
    static Mb__Frame *framep[MAX_GRANT_FRAMES];
    uint32_t ids[MAX_GRANT_FRAMES];
    uint8_t orders[MAX_GRANT_FRAMES];
    uint64_t covered;
    uint32_t n = grant_plan(d, bytes, shape, orders, &covered);
    if (n == 0) {
        mb_reply_error(rep, MB_EINVAL, "cannot grant %llu bytes in at most %u frames",
                       (unsigned long long)bytes, MAX_GRANT_FRAMES);
        return;
    }
    struct rusage ru0, ru1;   /* the warm plan's page faults and preemptions, for the slow-grant line */
    getrusage(RUSAGE_THREAD, &ru0);
    uint64_t tp = mb_now_ns();
    d->pool.adopt_wait_ns = 0;
    d->pool.adopted = 0;
    if (warm_max) {
        /* Free frames of any orders, when they hold it within the plan's
         * bytes: no frame made on this path. More of them (up to
         * warm_full_max) where making the plan's would release free frames
         * first. */
        uint8_t warm[MAX_GRANT_FRAMES];
        uint32_t w = warm_plan(d, s, bytes, covered, shape, warm_max, warm);
        if (!w && warm_full_max > warm_max && frame_pool_would_release(&d->pool, covered)) {
            w = warm_plan(d, s, bytes, covered, shape, warm_full_max, warm);
            d->pool.warm_full_grants += w != 0;
        }
        if (w) {
            n = w;
            covered = 0;
            for (uint32_t i = 0; i < n; i++)
                covered += d->pool.frame_bytes << (orders[i] = warm[i]);
        }
    }
    uint64_t t0 = mb_now_ns();
    getrusage(RUSAGE_THREAD, &ru1);
    int err = frame_pool_grant_orders(&d->pool, orders, n, s->id, s->uid, s->tenant->id, ids);
    uint64_t t1 = mb_now_ns();
    if (err != 0) {
        char a[32], b[32], c[32];
        const struct grant_path *l = &d->pool.last;
        uint64_t slow_ns = d->slow_grant_ns ? d->slow_grant_ns : SLOW_GRANT_NS;
        if (t1 - t0 >= slow_ns)
            mb_log(MB_LOG_INFO, "grant of %s in %u frames to session %llu refused after %.2f ms: "
                                "%u created (%.2f ms), %.2f ms waiting for the reserve's workers, "
                                "%u free frames released for room",
                   mb_format_size(covered, c, sizeof(c)), n, (unsigned long long)s->id,
                   (t1 - t0) / 1e6, l->created, l->create_ns / 1e6, l->wait_ns / 1e6, l->released);
        /* The device, not the budget, when a frame found it full. */
        bool device = err == MB_ENOMEM && d->pool.device_room;
        char t[32], holds[64] = "";
        if (device)
            snprintf(holds, sizeof(holds), "it holds %s of frames; ",
                     mb_format_size(d->pool.bytes_total, t, sizeof(t)));
        mb_reply_error(rep, err, "cannot grant %s in %u frames: %s (%s%s of %s budget in use)",
                       mb_format_size(covered, c, sizeof(c)), n,
                       device ? "the device is full" : mb_strerror(err), holds,
                       mb_format_size(d->pool.bytes_granted, a, sizeof(a)),
                       mb_format_size(d->pool.budget_bytes, b, sizeof(b)));
        return;
    }
    s->frames += n;
    s->bytes += covered;
    s->tenant->bytes += covered;
    err = send_frame_fds(d, s, ids, n);
    uint64_t t2 = mb_now_ns();
    uint64_t slow_ns = d->slow_grant_ns ? d->slow_grant_ns : SLOW_GRANT_NS;
    if (t2 - (t0_ns && t0_ns < t0 ? t0_ns : t0) >= slow_ns) {
        /* Where a slow grant's time went: frames made on its path (and the
         * frames released to make room for them), scrubbing, passing the
         * descriptors. */
        const struct grant_path *l = &d->pool.last;
        char b[32];
        mb_log(MB_LOG_INFO, "grant of %s in %u frames to session %llu took %.2f ms (%.2f ms since it "
                            "arrived; before it: checks %.2f ms, the warm plan %.2f ms (%ld page faults, %ld "
                            "preemptions); %.2f ms waiting for the frame lock to adopt %u made "
                            "frames): %u created "
                            "on the path (%.2f ms: create %.2f, export %.2f; "
                            "%.2f ms waiting for the reserve's workers, %u free frames "
                            "released for room), %u scrubbed (%.2f ms), descriptors passed in %.2f ms "
                            "(%u exported again, %.2f ms)",
               mb_format_size(covered, b, sizeof(b)), n, (unsigned long long)s->id, (t2 - t0) / 1e6,
               t0_ns && t2 > t0_ns ? (t2 - t0_ns) / 1e6 : 0.0,
               t0_ns && tp > t0_ns ? (tp - t0_ns) / 1e6 : 0.0, (t0 - tp) / 1e6,
               (ru1.ru_minflt - ru0.ru_minflt) + (ru1.ru_majflt - ru0.ru_majflt),
               ru1.ru_nivcsw - ru0.ru_nivcsw, d->pool.adopt_wait_ns / 1e6, d->pool.adopted,
               l->created, l->create_ns / 1e6, l->step_ns[0] / 1e6, l->step_ns[1] / 1e6,
               l->wait_ns / 1e6, l->released, l->scrubbed,
               l->scrub_ns / 1e6, (t2 - t1) / 1e6, l->reexported, l->reexport_ns / 1e6);
    }
    if (err != 0) {
        /* Some descriptors may have reached the process: the frames stay
         * charged to it until it returns them or exits. */
        mb_reply_error(rep, err, "failed to pass frame handles on the handle channel");
        return;
    }
    mb__grant_reply__init(&gr);
    for (uint32_t i = 0; i < n; i++) {
        mb__frame__init(&frames[i]);
        frames[i].id = ids[i];
        frames[i].bytes = frame_pool_bytes(&d->pool, ids[i]);
        frames[i].fd_follows = true;
        framep[i] = &frames[i];
    }
    gr.n_frames = n;
    gr.frames = framep;
    gr.room = grant_room(d, s);   /* with these frames charged */
    rep->body_case = MB__REPLY__BODY_GRANT;
    rep->grant = &gr;
}

bool within_quota(struct daemon *d, struct session *s, uint64_t want, Mb__Reply *rep)
{
    char a[32], b[32], c[32];
    const struct tenant *t = s->tenant;
    if (t->max != MB_CONFIG_UNLIMITED && (t->bytes > t->max || want > t->max - t->bytes)) {
        mb_reply_error(rep, MB_EQUOTA, "quota of tenant '%s' exceeded: it holds %s, asks %s more, max %s",
                       t->name, mb_format_size(t->bytes, a, sizeof(a)),
                       mb_format_size(want, b, sizeof(b)), mb_format_size(t->max, c, sizeof(c)));
        return false;
    }
    const struct mb_config_policy *u = mb_config_uid(&d->cfg, s->uid);
    if (u && u->max != MB_CONFIG_UNLIMITED) {
        uint64_t held = uid_bytes(d, s->uid);
        if (held > u->max || want > u->max - held) {
            mb_reply_error(rep, MB_EQUOTA, "quota of uid %u exceeded: it holds %s, asks %s more, max %s",
                           (unsigned)s->uid, mb_format_size(held, a, sizeof(a)),
                           mb_format_size(want, b, sizeof(b)), mb_format_size(u->max, c, sizeof(c)));
            return false;
        }
    }
    return true;
}

static void h_grant(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    struct daemon *d = rc->d;
    struct session *s = rc->s;
    uint64_t fb = d->pool.frame_bytes;
    uint64_t bytes = req->grant->bytes;
    struct grant_shape shape = grant_shape_of(req->grant);
    uint64_t most = MB_GRANT_MAX_BYTES(fb, shape.max_order);
    if (bytes == 0 || bytes > most) {
        mb_reply_error(rep, MB_EINVAL, "grant of %llu bytes: ask for 1 to %llu bytes at a time",
                       (unsigned long long)bytes, (unsigned long long)most);
        return;
    }
    if (d->draining) {
        mb_reply_error(rep, MB_EBUSY, "draining: the daemon grants no frames %s",
                       d->stopping ? "while it shuts down" : "until 'mbctl drain off'");
        return;
    }
    if (s->waiting) {
        mb_reply_error(rep, MB_EBUSY, "this session already has a grant waiting for reclaimed frames");
        return;
    }
    uint64_t want = grant_bytes(d, bytes, shape);
    if (!within_quota(d, s, want, rep))
        return;
    uint64_t short_bytes;
    if (!grant_fits(d, s, want, &short_bytes)) {
        if (pending_add(d, s, rc->ident, rc->ident_len, req->id, bytes, shape, rc->t0_ns,
                        short_bytes) == 0) {
            rc->deferred = true;
            return;
        }
        char a[32], b[32], c[32], w[32];
        mb_reply_error(rep, MB_ENOMEM,
                       "cannot grant %s: out of memory (%s of %s budget in use; %s short, "
                       "counting other tenants' guaranteed min)",
                       mb_format_size(want, w, sizeof(w)),
                       mb_format_size(d->pool.bytes_granted, a, sizeof(a)),
                       mb_format_size(d->pool.budget_bytes, b, sizeof(b)),
                       mb_format_size(short_bytes, c, sizeof(c)));
        return;
    }
    grant_now(d, s, bytes, shape, req->grant->warm_max_frames, req->grant->warm_full_max_frames, rc->t0_ns,
              rep);
}

static void h_ret(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__ReturnReply rr;
    struct daemon *d = rc->d;
    struct session *s = rc->s;
    const Mb__Return *r = req->ret;
    if (r->n_ids > MB_RETURN_MAX_IDS) {
        mb_reply_error(rep, MB_EINVAL, "return of %zu frames refused: at most %u a request",
                       r->n_ids, MB_RETURN_MAX_IDS);
        return;
    }
    if (r->n_ids && shares_holds(d, s, r->ids[0])) {
        /* Frames this session imported: it lets go of its holds. */
        int e = shares_return(d, s, r->ids, r->n_ids);
        if (e != 0) {
            mb_reply_error(rep, e, "return refused: a frame is not held by this session through "
                                   "an import (nothing was returned)");
            return;
        }
        mb__return_reply__init(&rr);
        rr.count = (uint32_t)r->n_ids;
        rep->body_case = MB__REPLY__BODY_RET;
        rep->ret = &rr;
        return;
    }
    if (r->n_ids == 0 || r->n_ids > s->frames) {
        mb_reply_error(rep, MB_EINVAL, "return of %zu frames: the session holds %u",
                       r->n_ids, s->frames);
        return;
    }
    uint64_t bytes = 0, freed = 0;   /* freed: no importer holds them on */
    for (size_t i = 0; i < r->n_ids; i++) {
        struct frame *f = frame_pool_get(&d->pool, r->ids[i]);
        if (f && f->state == FRAME_GRANTED && f->owner == s->id) {
            bytes += frame_pool_bytes(&d->pool, r->ids[i]);
            freed += f->holders ? 0 : frame_pool_bytes(&d->pool, r->ids[i]);
        }
    }
    uint64_t lent = bytes - freed;
    int err = frame_pool_return(&d->pool, r->ids, r->n_ids, s->id);
    if (err == 0)
        shares_revoke(d, s, r->ids, r->n_ids);
    if (err != 0) {
        mb_reply_error(rep, err, "return refused: %s (nothing was returned)",
                       err == MB_EPERM ? "a frame is not held by this session"
                       : err == MB_ENOENT ? "no such frame" : "a frame is listed twice");
        return;
    }
    s->frames -= (uint32_t)r->n_ids;
    s->bytes -= bytes;
    s->lent_bytes -= lent;
    s->tenant->bytes -= bytes;
    s->cached = s->cached > bytes ? s->cached - bytes : 0;
    if (freed) {
        /* Only frames that come free answer a reclaim: returning frames an
         * importer still holds frees nothing. */
        s->reclaim_returned += freed;
        s->ignored_notices = 0;
    }
    if (d->pending) {
        d->count.reclaim_bytes += bytes;
        pending_run(d);
    }
    mb__return_reply__init(&rr);
    rr.count = (uint32_t)r->n_ids;
    rep->body_case = MB__REPLY__BODY_RET;
    rep->ret = &rr;
}

static void h_reattach(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__ReattachReply rr;
    static uint32_t *refused;
    static size_t refused_cap;
    struct daemon *d = rc->d;
    struct session *s = rc->s;
    const Mb__Reattach *r = req->reattach;
    if (r->n_frames > refused_cap) {
        uint32_t *nr = realloc(refused, r->n_frames * sizeof(*nr));
        if (!nr) {
            mb_reply_error(rep, MB_ENOMEM, "out of memory");
            return;
        }
        refused = nr;
        refused_cap = r->n_frames;
    }
    mb__reattach_reply__init(&rr);
    for (size_t i = 0; i < r->n_frames; i++) {
        const Mb__Frame *f = r->frames[i];
        if (f->imported) {
            int e = shares_reattach_hold(d, s, f->id, f->bytes);
            if (e == 0) {
                rr.adopted++;
            } else {
                refused[rr.n_refused++] = f->id;
                mb_log(MB_LOG_WARN, "session %llu (pid %d) reported imported frame %u: refused (%s)",
                       (unsigned long long)s->id, (int)s->pid, f->id, mb_strerror(e));
            }
            continue;
        }
        int e = frame_pool_adopt_reported(&d->pool, f->id, f->bytes, s->id, s->uid, s->tenant->id);
        if (e == 0) {
            struct frame *fr = frame_pool_get(&d->pool, f->id);
            if (fr && fr->holders)
                s->lent_bytes += f->bytes;   /* its importers reported it first */
            s->frames++;
            rr.adopted++;
            s->bytes += f->bytes;
            s->tenant->bytes += f->bytes;
        } else {
            refused[rr.n_refused++] = f->id;
            mb_log(MB_LOG_WARN, "session %llu (pid %d) reported frame %u: refused (%s)",
                   (unsigned long long)s->id, (int)s->pid, f->id, mb_strerror(e));
        }
    }
    if (rr.adopted)
        mb_log(MB_LOG_INFO, "session %llu (pid %d, tenant %s) reattached %u frames",
               (unsigned long long)s->id, (int)s->pid, s->tenant->name, rr.adopted);
    rr.refused = refused;
    rep->body_case = MB__REPLY__BODY_REATTACH;
    rep->reattach = &rr;
}

/* Room on the device for the caller's own memory (its CUDA context): free
 * frames go back to the driver, at most ROOM_MAX bytes' worth of room. */
#define ROOM_MAX (4ull << 30)
static void h_room(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__RoomReply rr;
    mb__room_reply__init(&rr);
    uint64_t want = req->room->bytes < ROOM_MAX ? req->room->bytes : ROOM_MAX;
    frame_pool_adopt(&rc->d->pool);   /* what the workers made is free frames too */
    rr.released = frame_pool_make_room(&rc->d->pool, want, &rr.device_free, true);
    if (rr.released)
        mb_log(MB_LOG_INFO, "session %llu (pid %d) found no room on the device: released %u free "
               "frames, %llu MiB free now", (unsigned long long)rc->s->id, (int)rc->s->pid,
               rr.released, (unsigned long long)(rr.device_free >> 20));
    rep->body_case = MB__REPLY__BODY_ROOM;
    rep->room = &rr;
}

static void h_cache(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__CacheReply cr;
    struct session *s = rc->s;
    /* What returning could free: frames importers hold stay held. */
    uint64_t held = s->bytes - s->lent_bytes;
    s->cached = req->cache->bytes < held ? req->cache->bytes : held;
    const Mb__ClientCounters *k = req->cache->counters;
    if (k) {
        const uint64_t v[MB_CLIENT_COUNTERS] = {
            k->bytes_idle, k->heap_hits,  k->heap_grants,  k->stitches,   k->unmaps,
            k->refill_waits, k->grow_waits, k->heap_extends, k->heap_fills, k->grow_queued,
        };
        memcpy(s->counters, v, sizeof(v));
    }
    if (req->cache->answers_notice)
        reclaim_answered(rc->d, s);
    mb__cache_reply__init(&cr);
    rep->body_case = MB__REPLY__BODY_CACHE;
    rep->cache = &cr;
}

static int fill_status(struct daemon *d, Mb__StatusReply *sr)
{
    static Mb__SessionInfo *infos;
    static Mb__SessionInfo **infop;
    static uint32_t ninfo_cap;
    if (d->n_sessions > ninfo_cap) {
        uint32_t cap = d->n_sessions * 2;
        Mb__SessionInfo *ni = realloc(infos, cap * sizeof(*ni));
        Mb__SessionInfo **np = ni ? realloc(infop, cap * sizeof(*np)) : NULL;
        if (ni)
            infos = ni;
        if (!np)
            return MB_ENOMEM;
        infop = np;
        ninfo_cap = cap;
    }
    mb__status_reply__init(sr);
    sr->backend = (char *)d->be->name;
    sr->device = (uint32_t)d->device;
    static char device_id[MB_UUID_STR];
    mb_uuid_str(d->be->uuid, device_id);
    sr->device_id = device_id;
    sr->frame_bytes = d->pool.frame_bytes;
    sr->budget_bytes = d->pool.budget_bytes;
    sr->frames_total = d->pool.n_total;
    sr->frames_free = d->pool.n_free;
    sr->frames_granted = d->pool.n_granted;
    sr->bytes_free = d->pool.bytes_free;
    sr->bytes_granted = d->pool.bytes_granted;
    sr->requests = d->count.requests;
    sr->malformed = d->count.malformed;
    sr->refused = d->count.refused;
    sr->refused_quota = d->count.refused_quota;
    sr->errors = d->count.errors;
    sr->uptime_ms = (uint64_t)(mb_now_ms() - d->started_ms);
    sr->pid = (uint32_t)getpid();
    sr->draining = d->draining;
    sr->scrubs = d->pool.scrubs;
    sr->reclaim_notices = d->count.reclaim_notices;
    sr->grants_waiting = d->n_pending;
    sr->tenants_known = d->n_tenants;
    sr->connections = d->n_ctl;
    sr->conns_refused = d->count.conns_refused;
    sr->hello_timeouts = d->count.hello_timeouts;
    sr->slow_readers = d->count.slow_readers;
    sr->released_isolation = d->pool.released_isolation;
    sr->released_idle = d->pool.released_idle;
    sr->released_device_full = d->pool.released_device_full;
    sr->grant_creates = d->pool.path_created;
    sr->descriptors = frame_pool_exported(&d->pool);
    sr->reexports = d->pool.reexports;
    sr->exported_ahead = d->pool.exported_ahead;
    sr->made_ahead = d->pool.made_ahead;
    sr->exports_dropped = d->pool.exports_dropped;
    sr->frame_slots = d->pool.next_unused - 1;
    sr->released_room = d->pool.released_room;
    sr->warm_full_grants = d->pool.warm_full_grants;
    pthread_mutex_lock(&d->pool.lock);
    sr->reserve_target = d->pool.reserve_bytes;
    pthread_mutex_unlock(&d->pool.lock);
    size_t n = 0;
    for (struct session *s = d->sessions; s; s = s->next) {
        if (!s->bound)
            continue;
        Mb__SessionInfo *si = &infos[n];
        mb__session_info__init(si);
        si->id = s->id;
        si->pid = (uint32_t)s->pid;
        si->uid = (uint32_t)s->uid;
        si->tenant = s->tenant->name;
        si->frames = s->frames;
        si->bytes = s->bytes;
        si->cached = s->cached;
        si->import_bytes = s->import_bytes;
        infop[n++] = si;
    }
    sr->n_sessions = n;
    sr->sessions = infop;
    return 0;
}

static void h_status(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__StatusReply sr;
    if (fill_status(rc->d, &sr) != 0) {
        mb_reply_error(rep, MB_ENOMEM, "out of memory");
        return;
    }
    rep->body_case = MB__REPLY__BODY_STATUS;
    rep->status = &sr;
}

static void h_tenants(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__TenantsReply tr;
    static Mb__TenantInfo *infos;
    static Mb__TenantInfo **infop;
    static Mb__ClientCounters *counters;
    static uint32_t cap;
    struct daemon *d = rc->d;
    if (d->n_tenants > cap) {
        uint32_t ncap = d->n_tenants * 2;
        Mb__TenantInfo *ni = realloc(infos, ncap * sizeof(*ni));
        Mb__TenantInfo **np = ni ? realloc(infop, ncap * sizeof(*np)) : NULL;
        Mb__ClientCounters *nk = np ? realloc(counters, ncap * sizeof(*nk)) : NULL;
        if (ni)
            infos = ni;
        if (np)
            infop = np;
        if (!nk) {
            mb_reply_error(rep, MB_ENOMEM, "out of memory");
            return;
        }
        counters = nk;
        cap = ncap;
    }
    size_t n = 0;
    for (struct tenant *t = d->tenants; t && n < cap; t = t->next) {
        Mb__TenantInfo *ti = &infos[n];
        mb__tenant_info__init(ti);
        ti->name = t->name;
        ti->bytes = t->bytes;
        ti->max = t->max;
        ti->min = t->min;
        ti->sessions = t->n_sessions;
        Mb__ClientCounters *k = &counters[n];
        mb__client_counters__init(k);
        for (const struct session *s = t->sessions; s; s = s->t_next) {
            uint64_t room = grant_room(d, s);
            ti->room = s == t->sessions || room < ti->room ? room : ti->room;
            ti->cached += s->cached;
            k->bytes_idle += s->counters[0];
            k->heap_hits += s->counters[1];
            k->heap_grants += s->counters[2];
            k->stitches += s->counters[3];
            k->unmaps += s->counters[4];
            k->refill_waits += s->counters[5];
            k->grow_waits += s->counters[6];
            k->heap_extends += s->counters[7];
            k->heap_fills += s->counters[8];
            k->grow_queued += s->counters[9];
        }
        ti->counters = k;
        /* Tenants with nothing to show (past sessions, default policy) are left out. */
        if (ti->sessions == 0 && t->bytes == 0 && t->max == MB_CONFIG_UNLIMITED && t->min == 0)
            continue;
        infop[n++] = ti;
    }
    mb__tenants_reply__init(&tr);
    tr.n_tenants = n;
    tr.tenants = infop;
    rep->body_case = MB__REPLY__BODY_TENANTS;
    rep->tenants = &tr;
}

static void h_frames(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__FramesReply fr;
    static Mb__FrameInfo infos[MAX_FRAMES_PAGE];
    static Mb__FrameInfo *infop[MAX_FRAMES_PAGE];
    struct daemon *d = rc->d;
    uint32_t limit = req->frames->limit;
    if (limit == 0 || limit > MAX_FRAMES_PAGE)
        limit = MAX_FRAMES_PAGE;
    uint32_t slot = req->frames->start ? req->frames->start : 1, id;
    size_t n = 0;
    mb__frames_reply__init(&fr);
    for (; slot < d->pool.next_unused && n < limit; slot++) {
        struct frame *f = frame_pool_at(&d->pool, slot, &id);
        if (!f)
            continue;
        Mb__FrameInfo *fi = &infos[n];
        mb__frame_info__init(fi);
        fi->id = id;
        fi->bytes = frame_pool_bytes(&d->pool, id);
        struct tenant *last = tenant_by_id(d, f->last_tenant);
        fi->last_tenant = last ? last->name : "";
        if (f->state == FRAME_GRANTED) {
            struct session *s = session_by_id(d, f->owner);
            fi->state = s ? "granted" : "withdrawn";
            fi->session = f->owner;
            fi->tenant = s && s->tenant ? s->tenant->name : fi->last_tenant;
        } else {
            fi->state = "free";
        }
        infop[n++] = fi;
    }
    fr.next = slot < d->pool.next_unused ? slot : 0;
    fr.n_frames = n;
    fr.frames = infop;
    rep->body_case = MB__REPLY__BODY_FRAMES;
    rep->frames = &fr;
}

static void h_quota(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__QuotaReply qr;
    static char name[64];
    const Mb__Quota *q = req->quota;
    struct daemon *d = rc->d;
    if (!q->tenant || !tenant_name_ok(q->tenant)) {
        mb_reply_error(rep, MB_EINVAL, "quota needs a tenant name (1-63 of A-Z a-z 0-9 . _ - : @ +)");
        return;
    }
    uint64_t max = q->unlimited ? MB_CONFIG_UNLIMITED : q->max;
    struct tenant *t = tenant_get(d, q->tenant);
    if (!t) {
        mb_reply_error(rep, MB_ENOMEM, "out of memory");
        return;
    }
    char a[32], b[32], c[32];
    if (max < t->min) {
        mb_reply_error(rep, MB_EINVAL, "max %s for tenant '%s' is below its guaranteed min %s",
                       mb_format_size(max, a, sizeof(a)), t->name, mb_format_size(t->min, b, sizeof(b)));
        return;
    }
    mb__quota_reply__init(&qr);
    snprintf(name, sizeof(name), "%s", t->name);
    qr.tenant = name;
    qr.previous_max = t->max;
    qr.max = max;
    qr.bytes = t->bytes;
    t->max = max;
    mb_log(MB_LOG_INFO, "uid %u set tenant %s max to %s (was %s; holds %s)", (unsigned)rc->s->uid,
           t->name, size_str(max, a, sizeof(a)), size_str(qr.previous_max, b, sizeof(b)),
           mb_format_size(t->bytes, c, sizeof(c)));
    tenant_release(d, t);   /* an unlimited tenant nobody uses is not kept */
    rep->body_case = MB__REPLY__BODY_QUOTA;
    rep->quota = &qr;
}

static void h_reclaim(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__ReclaimReply rr;
    const Mb__Reclaim *r = req->reclaim;
    struct daemon *d = rc->d;
    const struct tenant *t = NULL;
    if (r->tenant && *r->tenant && !(t = tenant_find(d, r->tenant))) {
        mb_reply_error(rep, MB_ENOENT, "no tenant '%.63s'", r->tenant);
        return;
    }
    mb__reclaim_reply__init(&rr);
    rr.sessions = reclaim_ask(d, t, NULL, r->bytes, &rr.cached);
    mb_log(MB_LOG_INFO, "uid %u asked %u sessions%s%s to return cached frames", (unsigned)rc->s->uid,
           rr.sessions, t ? " of tenant " : "", t ? t->name : "");
    rep->body_case = MB__REPLY__BODY_RECLAIM;
    rep->reclaim = &rr;
}

static void h_drain(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__DrainReply dr;
    struct daemon *d = rc->d;
    if (req->drain->off && d->stopping) {
        mb_reply_error(rep, MB_EBUSY, "the daemon is shutting down; the drain cannot be lifted");
        return;
    }
    if (d->draining != !req->drain->off) {
        mb_log(MB_LOG_INFO, "uid %u %s the drain", (unsigned)rc->s->uid,
               req->drain->off ? "lifted" : "started");
        daemon_drain(d, !req->drain->off, false);
    }
    mb__drain_reply__init(&dr);
    dr.draining = d->draining;
    dr.sessions = d->n_sessions;
    rep->body_case = MB__REPLY__BODY_DRAIN;
    rep->drain = &dr;
}

static void h_kill(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__KillReply kr;
    struct daemon *d = rc->d;
    uint64_t id = req->kill->session;
    struct session *s = session_by_id(d, id);
    if (!s) {
        mb_reply_error(rep, MB_ENOENT, "no session %llu", (unsigned long long)id);
        return;
    }
    if (s == rc->s) {
        mb_reply_error(rep, MB_EINVAL, "session %llu is the caller's own", (unsigned long long)id);
        return;
    }
    mb_log(MB_LOG_INFO, "uid %u kills session %llu", (unsigned)rc->s->uid, (unsigned long long)id);
    mb__kill_reply__init(&kr);
    kr.session = id;
    kr.frames = session_kill(d, s);
    rep->body_case = MB__REPLY__BODY_KILL;
    rep->kill = &kr;
}

static void h_metrics(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__MetricsReply mr;
    static Mb__StatusReply sr;
    static Mb__CommandStats cs[MB_CMD_COUNT];
    static Mb__CommandStats *csp[MB_CMD_COUNT];
    static uint64_t cum[MB_CMD_COUNT][MB_LAT_BUCKETS];
    static uint64_t bounds[MB_LAT_BUCKETS];
    struct daemon *d = rc->d;
    if (fill_status(d, &sr) != 0) {
        mb_reply_error(rep, MB_ENOMEM, "out of memory");
        return;
    }
    mb__metrics_reply__init(&mr);
    mr.status = &sr;
    memcpy(bounds, mb_lat_bounds_us, sizeof(bounds));
    mr.n_bucket_le_us = MB_LAT_BUCKETS;
    mr.bucket_le_us = bounds;
    size_t n = 0;
    for (int c = 0; c < MB_CMD_COUNT; c++) {
        const struct cmd_stats *st = &d->stats[c];
        Mb__CommandStats *x = &cs[n];
        mb__command_stats__init(x);
        x->name = (char *)mb_commands[c].name;
        x->count = st->count;
        x->errors = st->errors;
        x->sum_us = st->sum_us;
        uint64_t acc = 0;
        for (int i = 0; i < MB_LAT_BUCKETS; i++)
            cum[c][i] = acc += st->bucket[i];
        x->n_buckets = MB_LAT_BUCKETS;
        x->buckets = cum[c];
        csp[n++] = x;
    }
    mr.n_commands = n;
    mr.commands = csp;
    mr.sessions_opened = d->count.sessions_opened;
    mr.sessions_closed = d->count.sessions_closed;
    mr.sessions_killed = d->count.sessions_killed;
    mr.reclaim_bytes = d->count.reclaim_bytes;
    mr.reclaim_timeouts = d->count.reclaim_timeouts;
    mr.refused_auth = d->count.refused_auth;
    mr.reclaim_ignored = d->count.reclaim_ignored;
    mr.reclaim_short = d->count.reclaim_short;
    rep->body_case = MB__REPLY__BODY_METRICS;
    rep->metrics = &mr;
}

static handler_fn *const handlers[MB_CMD_COUNT] = {
#define MB_COMMAND(name, body, flags, usage, summary) [MB_CMD_##name] = h_##name,
#include "commands.def"
#undef MB_COMMAND
};

void handle_request(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    struct daemon *d = rc->d;
    rep->id = req->id;
    int cmd = mb_command_by_body(req->body_case);
    if (cmd < 0 || !handlers[cmd]) {
        d->count.malformed++;
        mb_reply_error(rep, MB_EPROTO, "unknown or missing request body (%d)", (int)req->body_case);
        return;
    }
    const struct mb_command *c = &mb_commands[cmd];
    if ((c->flags & (MB_CMD_SESSION | MB_CMD_ADMIN)) && !rc->s) {
        mb_reply_error(rep, MB_EPERM, "%s needs a session: connect the handle channel and send hello",
                       c->name);
        stats_record(d, cmd, rep->code, rc->t0_ns);
        return;
    }
    if ((c->flags & MB_CMD_ADMIN) && !mb_config_is_admin(&d->cfg, rc->s->uid)) {
        mb_reply_error(rep, MB_EPERM, "%s is for administrators: uid %u is neither root nor in admin_uids",
                       c->name, (unsigned)rc->s->uid);
        mb_log(MB_LOG_WARN, "refused %s from session %llu (pid %d, uid %u): not an administrator",
               c->name, (unsigned long long)rc->s->id, (int)rc->s->pid, (unsigned)rc->s->uid);
        stats_record(d, cmd, rep->code, rc->t0_ns);
        return;
    }
    d->count.requests++;
    handlers[cmd](rc, req, rep);
    if (!rc->deferred)
        stats_record(d, cmd, rep->code, rc->t0_ns);
}
