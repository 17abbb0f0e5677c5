/* handlers.c: one handler per row of commands.def and the dispatch that
 * checks what every row needs (a body, a bound session) in one place. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moonbright/mbclient.h>

#include "commands.h"
#include "daemon.h"
#include "log.h"
#include "size.h"

/* A grant moves at most this many frames, so its descriptors fit the handle
 * channel's buffer while the client waits for the reply. */
#define MAX_GRANT_FRAMES 256u

typedef void handler_fn(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep);

static bool tenant_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(((struct tenant *)0)->name))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-:@+", s[i]))
            return false;
    return true;
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
    if (!(s->tenant = tenant_get(rc->d, name))) {
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
    rep->body_case = MB__REPLY__BODY_HELLO;
    rep->hello = &hr;
    mb_log(MB_LOG_INFO, "session %llu: pid %d uid %d tenant %s", (unsigned long long)s->id,
           (int)s->pid, (int)s->uid, name);
}

/* Descriptors travel on the handle channel before the reply, in batches. */
static int send_frame_fds(struct daemon *d, struct session *s, const uint32_t *ids, uint32_t n)
{
    for (uint32_t off = 0; off < n; off += MB_CHAN_MAX_FDS) {
        struct mb_chan_msg m = { .type = MB_CHAN_FRAMES, .session_id = s->id };
        int fds[MB_CHAN_MAX_FDS];
        m.count = n - off < MB_CHAN_MAX_FDS ? n - off : MB_CHAN_MAX_FDS;
        for (uint32_t i = 0; i < m.count; i++) {
            m.ids[i] = ids[off + i];
            fds[i] = frame_pool_get(&d->pool, ids[off + i])->mem.fd;
        }
        int rc = mb_chan_send(s->chan, &m, fds);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void h_grant(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__GrantReply gr;
    static Mb__Frame frames[MAX_GRANT_FRAMES];
    static Mb__Frame *framep[MAX_GRANT_FRAMES];
    struct daemon *d = rc->d;
    struct session *s = rc->s;
    uint64_t fb = d->pool.frame_bytes;
    uint64_t bytes = req->grant->bytes;
    if (bytes == 0 || bytes > (uint64_t)MAX_GRANT_FRAMES * fb) {
        mb_reply_error(rep, MB_EINVAL, "grant of %llu bytes: ask for 1 to %llu bytes at a time",
                       (unsigned long long)bytes, (unsigned long long)MAX_GRANT_FRAMES * fb);
        return;
    }
    if (d->stopping) {
        mb_reply_error(rep, MB_EBUSY, "the daemon is shutting down");
        return;
    }
    uint32_t n = (uint32_t)((bytes + fb - 1) / fb);
    uint32_t ids[MAX_GRANT_FRAMES];
    int err = frame_pool_grant(&d->pool, n, s->id, s->tenant->id, ids);
    if (err != 0) {
        char a[32], b[32];
        mb_reply_error(rep, err, "cannot grant %u frames: %s (%s of %s budget in use)", n,
                       mb_strerror(err),
                       mb_format_size((uint64_t)d->pool.n_granted * fb, a, sizeof(a)),
                       mb_format_size(d->pool.budget_bytes, b, sizeof(b)));
        return;
    }
    s->frames += n;
    s->tenant->bytes += (uint64_t)n * fb;
    err = send_frame_fds(d, s, ids, n);
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
        frames[i].bytes = fb;
        frames[i].fd_follows = true;
        framep[i] = &frames[i];
    }
    gr.n_frames = n;
    gr.frames = framep;
    rep->body_case = MB__REPLY__BODY_GRANT;
    rep->grant = &gr;
}

static void h_ret(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__ReturnReply rr;
    struct session *s = rc->s;
    const Mb__Return *r = req->ret;
    if (r->n_ids == 0 || r->n_ids > s->frames) {
        mb_reply_error(rep, MB_EINVAL, "return of %zu frames: the session holds %u",
                       r->n_ids, s->frames);
        return;
    }
    int err = frame_pool_return(&rc->d->pool, r->ids, r->n_ids, s->id);
    if (err != 0) {
        mb_reply_error(rep, err, "return refused: %s (nothing was returned)",
                       err == MB_EPERM ? "a frame is not held by this session"
                       : err == MB_ENOENT ? "no such frame" : "a frame is listed twice");
        return;
    }
    s->frames -= (uint32_t)r->n_ids;
    s->tenant->bytes -= (uint64_t)r->n_ids * rc->d->pool.frame_bytes;
    mb__return_reply__init(&rr);
    rr.count = (uint32_t)r->n_ids;
    rep->body_case = MB__REPLY__BODY_RET;
    rep->ret = &rr;
}

static void h_status(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    static Mb__StatusReply sr;
    static Mb__SessionInfo *infos;
    static Mb__SessionInfo **infop;
    static uint32_t ninfo_cap;
    struct daemon *d = rc->d;
    if (d->n_sessions > ninfo_cap) {
        uint32_t cap = d->n_sessions * 2;
        Mb__SessionInfo *ni = realloc(infos, cap * sizeof(*ni));
        Mb__SessionInfo **np = ni ? realloc(infop, cap * sizeof(*np)) : NULL;
        if (ni)
            infos = ni;
        if (!np) {
            mb_reply_error(rep, MB_ENOMEM, "out of memory");
            return;
        }
        infop = np;
        ninfo_cap = cap;
    }
    mb__status_reply__init(&sr);
    sr.backend = (char *)d->be->name;
    sr.device = (uint32_t)d->device;
    sr.frame_bytes = d->pool.frame_bytes;
    sr.budget_bytes = d->pool.budget_bytes;
    sr.frames_total = d->pool.n_total;
    sr.frames_free = d->pool.n_free;
    sr.frames_granted = d->pool.n_granted;
    sr.bytes_free = (uint64_t)d->pool.n_free * d->pool.frame_bytes;
    sr.bytes_granted = (uint64_t)d->pool.n_granted * d->pool.frame_bytes;
    sr.requests = d->count.requests;
    sr.malformed = d->count.malformed;
    sr.refused = d->count.refused;
    sr.uptime_ms = (uint64_t)(mb_now_ms() - d->started_ms);
    sr.pid = (uint32_t)getpid();
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
        si->bytes = (uint64_t)s->frames * d->pool.frame_bytes;
        infop[n++] = si;
    }
    sr.n_sessions = n;
    sr.sessions = infop;
    rep->body_case = MB__REPLY__BODY_STATUS;
    rep->status = &sr;
}

static handler_fn *const handlers[MB_CMD_COUNT] = {
#define MB_COMMAND(name, body, flags, usage, summary) [MB_CMD_##name] = h_##name,
#include "commands.def"
#undef MB_COMMAND
};

void handle_request(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep)
{
    rep->id = req->id;
    int cmd = mb_command_by_body(req->body_case);
    if (cmd < 0 || req->body_case == MB__REQUEST__BODY__NOT_SET) {
        rc->d->count.malformed++;
        mb_reply_error(rep, MB_EPROTO, "unknown or missing request body (%d)", (int)req->body_case);
        return;
    }
    if ((mb_commands[cmd].flags & MB_CMD_SESSION) && !rc->s) {
        rc->d->count.refused++;
        mb_reply_error(rep, MB_EPERM, "%s needs a session: connect the handle channel and send hello",
                       mb_commands[cmd].name);
        return;
    }
    rc->d->count.requests++;
    handlers[cmd](rc, req, rep);
    if (rep->code == MB_EPERM)
        rc->d->count.refused++;
    else if (rep->code != 0)
        rc->d->count.errors++;
}
