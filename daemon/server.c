/* server.c: moonbrightd's one poll loop: the control socket and its
 * connections (zmtp.c), the handle channel's listening socket and every
 * session's channel (whose end of file ends the session), the limits on
 * connections (per uid, in all, at the descriptor limit), killed sessions'
 * pidfds, signals, and the
 * sd-daemon protocol (WATCHDOG=1 from the loop, STATUS= as state changes,
 * STOPPING=1 when SIGTERM starts the drain). The poll timeout is the next
 * deadline (watchdog, status, pending grants, drain). Malformed messages
 * are logged, counted and answered or dropped; never asserted. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include <moonbright/status.h>

#include "commands.h"
#include "daemon.h"
#include "faults.h"
#include "log.h"

/* Connections accepted per wakeup on each listening socket, so a flood
 * cannot hold the loop. */
#define ACCEPT_BURST 64
/* Handle-channel connections must say hello within this. */
#define HELLO_TIMEOUT_MS 3000
/* Out of descriptors with no spare to free: listeners rest this long. */
#define ACCEPT_PAUSE_MS 100
#define STATUS_PERIOD_MS 1000
#define SLOW_PASS_MS 2          /* a request or a pass of the main loop this slow is logged (debug) */

int daemon_send(struct daemon *d, const uint8_t *ident, size_t ident_len, const Mb__Reply *rep)
{
    uint8_t stack[4096], *buf;
    size_t len;
    int copies, rc = mb_wire_pack(&rep->base, stack, sizeof(stack), &buf, &len, &copies);
    if (rc < 0)
        return rc;
    for (int k = 0; k < copies && rc == 0; k++)
        rc = d->ctl_listen >= 0 ? ctl_send(d, ident, ident_len, buf, len) : 0;
    if (buf != stack)
        free(buf);
    return rc;
}

void daemon_log_limited(struct daemon *d, enum log_kind kind, int level, const char *fmt, ...)
{
    struct log_limit *l = &d->log_limits[kind];
    int64_t now = mb_now_ms();
    if (now < l->next_ms) {
        l->suppressed++;
        return;
    }
    char line[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (l->suppressed)
        mb_log(level, "%s (and %llu similar events in the last second)", line,
               (unsigned long long)l->suppressed);
    else
        mb_log(level, "%s", line);
    l->suppressed = 0;
    l->next_ms = now + 1000;
}

int daemon_notice(struct daemon *d, const struct session *s, Mb__Notice__Kind kind,
                  uint64_t bytes, uint32_t deadline_ms, const char *reason)
{
    if (!s->bound)
        return MB_EINVAL;
    Mb__Reply rep = MB__REPLY__INIT;
    Mb__Notice n = MB__NOTICE__INIT;
    n.kind = kind;
    n.bytes = bytes;
    n.deadline_ms = deadline_ms;
    n.exiting = d->stopping;
    n.reason = (char *)reason;
    rep.id = 0;
    rep.body_case = MB__REPLY__BODY_NOTICE;
    rep.notice = &n;
    int rc = daemon_send(d, s->ident, s->ident_len, &rep);
    if (rc != 0)
        mb_log(MB_LOG_DEBUG, "failed to send a notice to session %llu: %s",
               (unsigned long long)s->id, mb_strerror(rc));
    return rc;
}

void daemon_drain(struct daemon *d, bool on, bool exiting)
{
    d->draining = on;
    if (exiting) {
        d->stopping = true;
        d->drain_deadline_ms = mb_now_ms() + d->drain_timeout_ms;
    }
    if (on)
        pending_fail_all(d, MB_EBUSY, exiting ? "the daemon is shutting down" : "draining");
    for (struct session *s = d->sessions; s; s = s->next)
        if (s->bound)
            daemon_notice(d, s, on ? MB__NOTICE__KIND__DRAINING : MB__NOTICE__KIND__UNDRAINED, 0,
                          exiting ? (uint32_t)d->drain_timeout_ms : 0,
                          !on ? "grants resume" : exiting ? "the daemon is shutting down"
                                                          : "drained by an administrator");
    daemon_notify_status(d);
}

void daemon_malformed(struct daemon *d, const uint8_t *ident, size_t len, const char *why)
{
    Mb__Reply rep = MB__REPLY__INIT;
    d->count.malformed++;
    mb_log(MB_LOG_DEBUG, "malformed request: %s", why);
    mb_reply_error(&rep, MB_EPROTO, "malformed request: %s", why);
    daemon_send(d, ident, len, &rep);
}

/* A reply past the message limit (status, metrics and tenants list every
 * session or tenant, and many peers can make those lists long): its list
 * is cut to fit, the reply saying how many entries it left out; any other
 * reply too large becomes an error, so that the peer is answered. */
static void fit_reply(Mb__Reply *rep)
{
    size_t bytes = protobuf_c_message_get_packed_size(&rep->base);
    if (bytes <= MB_WIRE_MAX_BYTES)
        return;
    size_t *count = NULL;
    uint32_t *omitted = NULL;
    Mb__StatusReply *st = rep->body_case == MB__REPLY__BODY_STATUS    ? rep->status
                          : rep->body_case == MB__REPLY__BODY_METRICS ? rep->metrics->status
                                                                      : NULL;
    if (st) {
        count = &st->n_sessions;
        omitted = &st->sessions_omitted;
    } else if (rep->body_case == MB__REPLY__BODY_TENANTS) {
        count = &rep->tenants->n_tenants;
        omitted = &rep->tenants->omitted;
    }
    if (count) {
        size_t all = *count;
        /* An eighth at a time; 16 bytes kept for the count left out. */
        while (*count && protobuf_c_message_get_packed_size(&rep->base) > MB_WIRE_MAX_BYTES - 16)
            *count -= (*count + 7) / 8;
        *omitted = (uint32_t)(all - *count);
        mb_log(MB_LOG_DEBUG, "a reply of %zu bytes passed the %d-byte message limit: %zu of %zu "
               "entries listed", bytes, MB_WIRE_MAX_BYTES, *count, all);
        if (protobuf_c_message_get_packed_size(&rep->base) <= MB_WIRE_MAX_BYTES)
            return;
    }
    rep->body_case = MB__REPLY__BODY__NOT_SET;
    mb_reply_error(rep, MB_ELIMIT, "the reply (%zu bytes) passes the %d-byte message limit", bytes,
                   MB_WIRE_MAX_BYTES);
}

void daemon_message(struct daemon *d, const uint8_t *ident, size_t ident_len,
                    const void *data, size_t size)
{
    uint64_t t0 = mb_now_ns();
    Mb__Request *req = mb__request__unpack(NULL, size, data);
    if (!req) {
        daemon_malformed(d, ident, ident_len, "not a Request message");
        return;
    }
    struct request_ctx rc = { .d = d, .ident = ident, .ident_len = ident_len, .t0_ns = t0 };
    rc.s = session_by_ident(d, ident, ident_len);
    Mb__Reply rep = MB__REPLY__INIT;
    handle_request(&rc, req, &rep);
    uint64_t ns = mb_now_ns() - t0;
    if (ns >= (uint64_t)SLOW_PASS_MS * 1000000 && req->body_case != MB__REQUEST__BODY_GRANT &&
        mb_log_level() >= MB_LOG_DEBUG) {   /* (grants log their own parts) */
        int cmd = mb_command_by_body((int)req->body_case);
        if (cmd >= 0)
            mb_log(MB_LOG_DEBUG, "a %s request took %.2f ms", mb_commands[cmd].name, ns / 1e6);
    }
    if (rep.code != 0)
        mb_log(MB_LOG_DEBUG, "request %llu refused: %s", (unsigned long long)req->id, rep.error);
    mb__request__free_unpacked(req, NULL);
    if (!rc.deferred)
        fit_reply(&rep);
    if (!rc.deferred && daemon_send(d, ident, ident_len, &rep) != 0)
        mb_log(MB_LOG_DEBUG, "failed to send a reply (peer gone)");
}

/* A pass of the main loop that kept requests waiting SLOW_PASS_MS or
 * more, with its parts (debug): a request that waits in its socket behind
 * the pass shows in its client's round trip, not in the daemon's
 * slow-grant line. b0: poll returned; b1: messages handled; b2: pending
 * grants run; b3: the reserve's tick done; then status and housekeeping. */
static void loop_log(uint64_t b0, uint64_t b1, uint64_t b2, uint64_t b3, uint64_t requests)
{
    if (mb_log_level() < MB_LOG_DEBUG)
        return;
    uint64_t b4 = mb_now_ns();
    if (b4 - b0 < (uint64_t)SLOW_PASS_MS * 1000000)
        return;
    mb_log(MB_LOG_DEBUG,
           "a pass of the main loop took %.2f ms: %.2f handling %llu requests and connections, "
           "%.2f running pending grants, %.2f in the reserve's tick, %.2f status and housekeeping",
           (b4 - b0) / 1e6, (b1 - b0) / 1e6, (unsigned long long)requests, (b2 - b1) / 1e6,
           (b3 - b2) / 1e6, (b4 - b3) / 1e6);
}

/* Accept one connection. Out of descriptors, a pending connection would
 * keep the listening socket readable and the loop spinning: free the spare
 * descriptor, accept it and close it (the peer sees end of file), take the
 * spare again; without a spare the listeners rest a moment. Returns the
 * descriptor, -1 when none is waiting, -2 when one was refused. */
static int accept_one(struct daemon *d, int lfd, const char *what)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0 && mb_fault(MB_FAULT_FDS)) {
        close(fd);   /* as if accept had failed with EMFILE: the client sees EOF */
        fd = -1;
        errno = EMFILE;
    }
    if (fd >= 0)
        return fd;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return -1;
    if (errno == EMFILE || errno == ENFILE) {
        d->count.conns_refused++;
        if (d->spare_fd >= 0) {
            close(d->spare_fd);
            d->spare_fd = -1;
            int k = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (k >= 0)
                close(k);
            d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        if (d->spare_fd < 0)
            d->accept_paused_until_ms = mb_now_ms() + ACCEPT_PAUSE_MS;
        daemon_log_limited(d, LOG_NOFD, MB_LOG_WARN, "refused a connection on the %s: out of descriptors (%s)",
                           what, strerror(EMFILE));
        return -2;
    }
    daemon_log_limited(d, LOG_NOFD, MB_LOG_WARN, "failed to accept on the %s: %s", what, strerror(errno));
    return -1;
}

static uint32_t pending_of_uid(const struct daemon *d, uid_t uid)
{
    uint32_t n = 0;
    for (const struct session *s = d->sessions; s; s = s->next)
        n += !s->bound && s->uid == uid;
    return n;
}

static uint32_t sessions_of_uid(const struct daemon *d, uid_t uid)
{
    uint32_t n = 0;
    for (const struct session *s = d->sessions; s; s = s->next)
        n += s->uid == uid;
    return n;
}

/* Why a connection of uid cannot be taken on either channel, or NULL: the
 * daemon's cap (but the few kept for administrators), and the uid's share
 * of it, its sessions (with hello or not) and control connections
 * together. */
static const char *conns_full(struct daemon *d, uid_t uid)
{
    bool admin = mb_config_is_admin(&d->cfg, uid);
    if (d->n_sessions + d->n_ctl >= d->conn_cap - (admin ? 0 : d->conn_admin))
        return admin ? "the daemon's connection limit is reached"
                     : "the daemon's connection limit is reached (but those kept for administrators)";
    if (!admin && sessions_of_uid(d, uid) + ctl_count_uid(d, uid) >= d->uid_conn_cap)
        return "the uid holds its share of the daemon's connections (a quarter)";
    return NULL;
}

/* Accept up to a burst of `what` connections on listen_fd (the `sock`) and
 * hand each to open once the peer's credentials and the limits allow it
 * (conns_full; and uid_full, when given, for the channel's own cap: its
 * reason, or NULL). */
static void accept_burst(struct daemon *d, int listen_fd, const char *sock, const char *what,
                         const char *(*uid_full)(struct daemon *d, uid_t uid),
                         bool (*open)(struct daemon *d, int fd, pid_t pid, uid_t uid))
{
    for (int i = 0; i < ACCEPT_BURST; i++) {
        int fd = accept_one(d, listen_fd, sock);
        if (fd == -1)
            return;
        if (fd < 0)
            continue;
        pid_t pid;
        uid_t uid;
        gid_t gid;
        const char *why = NULL;
        if (mb_chan_peer(fd, &pid, &uid, &gid) != 0)
            why = "no peer credentials";
        else if (!(why = conns_full(d, uid)) && uid_full)
            why = uid_full(d, uid);
        if (why) {
            d->count.conns_refused++;
            daemon_log_limited(d, LOG_REFUSED, MB_LOG_WARN, "refused a %s connection of pid %d (uid %u): %s",
                               what, (int)pid, (unsigned)uid, why);
            close(fd);
            continue;
        }
        if (!open(d, fd, pid, uid))
            close(fd);
    }
}

static const char *sessions_full(struct daemon *d, uid_t uid)
{
    return pending_of_uid(d, uid) >= d->uid_pending_cap
               ? "too many of its connections have not said hello" : NULL;
}

static bool open_session(struct daemon *d, int fd, pid_t pid, uid_t uid)
{
    (void)pid;
    (void)uid;
    int buf = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    return session_open(d, fd) != NULL;
}

static void accept_sessions(struct daemon *d)
{
    accept_burst(d, d->chan_listen, "handle channel", "handle-channel", sessions_full, open_session);
}

static bool open_ctl(struct daemon *d, int fd, pid_t pid, uid_t uid)
{
    return ctl_open(d, fd, pid, uid) != NULL;
}

static void accept_ctl(struct daemon *d)
{
    accept_burst(d, d->ctl_listen, "control socket", "control", NULL, open_ctl);
}

/* Handle-channel connections that never said hello end after a while. */
static void expire_unbound(struct daemon *d, int64_t now)
{
    for (struct session *s = d->sessions, *next; s; s = next) {
        next = s->next;
        if (s->bound || now - s->opened_ms <= HELLO_TIMEOUT_MS)
            continue;
        d->count.hello_timeouts++;
        daemon_log_limited(d, LOG_DROPPED, MB_LOG_WARN, "session %llu (pid %d, uid %u) sent no hello within %d ms; "
                           "closing its handle channel", (unsigned long long)s->id, (int)s->pid,
                           (unsigned)s->uid, HELLO_TIMEOUT_MS);
        session_close(d, s);
    }
}

/* A client never writes to its channel: readable means closed (or junk,
 * which ends the session just the same). */
static void check_channel(struct daemon *d, uint64_t id)
{
    struct session *s;
    for (s = d->sessions; s && s->id != id; s = s->next)
        ;
    if (!s)
        return;
    char b[64];
    ssize_t n = recv(s->chan, b, sizeof(b), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0) {
        d->count.malformed++;
        mb_log(MB_LOG_WARN, "session %llu wrote to its handle channel; ending it",
               (unsigned long long)s->id);
    }
    session_close(d, s);
}

/* The first SIGTERM (or SIGINT) drains: no new grants, sessions told, exit
 * once they end or the drain timeout passes. A second one exits at once. */
static void handle_signals(struct daemon *d)
{
    struct signalfd_siginfo si;
    while (read(d->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo != SIGTERM && si.ssi_signo != SIGINT)
            continue;
        if (d->stopping) {
            mb_log(MB_LOG_INFO, "%s received again: exiting now", strsignal((int)si.ssi_signo));
            d->exit_now = true;
            continue;
        }
        mb_log(MB_LOG_INFO, "%s received: draining %u sessions for at most %lld ms, then stopping",
               strsignal((int)si.ssi_signo), d->n_sessions, (long long)d->drain_timeout_ms);
        sd_notify(0, "STOPPING=1");
        daemon_drain(d, true, true);
    }
}

void daemon_notify_status(struct daemon *d)
{
    char line[sizeof(d->last_status)];
    if (d->stopping)
        snprintf(line, sizeof(line), "draining to stop: %u sessions left, %lld s at most",
                 d->n_sessions, (long long)(d->drain_deadline_ms - mb_now_ms() + 999) / 1000);
    else
        snprintf(line, sizeof(line), "%s %u sessions; frames %u free, %u granted of %u%s",
                 d->draining ? "draining:" : "serving", d->n_sessions, d->pool.n_free,
                 d->pool.n_granted, d->pool.n_total,
                 d->n_pending ? "; grants waiting for reclaim" : "");
    if (strcmp(line, d->last_status) == 0)
        return;
    memcpy(d->last_status, line, sizeof(line));
    sd_notifyf(0, "STATUS=%s", line);
}

static void check_withdrawn(struct daemon *d, int pidfd)
{
    for (struct withdrawn *w = d->withdrawn; w; w = w->next)
        if (w->pidfd == pidfd) {
            withdrawn_release(d, w);
            return;
        }
}

int daemon_serve(struct daemon *d)
{
    uint64_t wd_usec = 0;
    int64_t wd_period = d->cfg.watchdog && sd_watchdog_enabled(0, &wd_usec) > 0
                        ? (int64_t)(wd_usec / 2000) : 0;
    if (wd_period <= 0 && wd_usec)
        wd_period = 1;
    int64_t next_wd = mb_now_ms(), next_status = mb_now_ms(), next_tick = mb_now_ms();
    struct pollfd *items = NULL;
    uint64_t *ids = NULL;
    struct ctl_conn **conns = NULL;
    size_t cap = 0;
    int rc = 0;

    while (!d->exit_now) {
        if (d->stopping && (d->n_sessions == 0 || mb_now_ms() >= d->drain_deadline_ms)) {
            if (d->n_sessions)
                mb_log(MB_LOG_WARN, "drain timeout: stopping with %u sessions still open",
                       d->n_sessions);
            break;
        }
        size_t n = 3 + d->n_ctl + d->n_sessions + d->n_withdrawn;
        if (n > cap) {
            struct pollfd *ni = realloc(items, 2 * n * sizeof(*ni));
            if (ni)
                items = ni;
            uint64_t *nid = ni ? realloc(ids, 2 * n * sizeof(*nid)) : NULL;
            if (nid)
                ids = nid;
            struct ctl_conn **nc = nid ? realloc(conns, 2 * n * sizeof(*nc)) : NULL;
            if (!nc) {
                mb_log(MB_LOG_ERR, "failed to grow the poll set: out of memory");
                rc = MB_ENOMEM;
                break;
            }
            conns = nc;
            cap = 2 * n;
        }
        int64_t now = mb_now_ms();
        bool listen = now >= d->accept_paused_until_ms;
        items[0] = (struct pollfd){ listen ? d->ctl_listen : -1, POLLIN, 0 };
        items[1] = (struct pollfd){ listen ? d->chan_listen : -1, POLLIN, 0 };
        items[2] = (struct pollfd){ d->sigfd, POLLIN, 0 };
        size_t k = 3;
        for (struct ctl_conn *c = d->ctl; c; c = c->next, k++) {
            short ev = ctl_pending_out(c) < CTL_OUT_SOFT_BYTES ? POLLIN : 0;
            if (ctl_pending_out(c))
                ev |= POLLOUT;
            items[k] = (struct pollfd){ c->fd, ev, 0 };
            conns[k] = c;
        }
        size_t k_ctl = k;
        for (struct session *s = d->sessions; s; s = s->next, k++) {
            items[k] = (struct pollfd){ s->chan, POLLIN, 0 };
            ids[k] = s->id;
        }
        size_t k_sessions = k;
        for (struct withdrawn *w = d->withdrawn; w; w = w->next, k++) {
            items[k] = (struct pollfd){ w->pidfd, POLLIN, 0 };
            ids[k] = (uint64_t)w->pidfd;
        }
        int64_t deadline = next_status;
        if (wd_period && next_wd < deadline)
            deadline = next_wd;
        if (next_tick < deadline)
            deadline = next_tick;
        if (pending_next_deadline(d) < deadline)
            deadline = pending_next_deadline(d);
        if (d->stopping && d->drain_deadline_ms < deadline)
            deadline = d->drain_deadline_ms;
        if (!listen && d->accept_paused_until_ms < deadline)
            deadline = d->accept_paused_until_ms;
        int timeout = deadline > now ? (int)(deadline - now) : 0;
        int pr = poll(items, (nfds_t)k, timeout);
        if (pr < 0 && errno != EINTR) {
            mb_log(MB_LOG_ERR, "failed to poll: %s", strerror(errno));
            rc = MB_ESYS;
            break;
        }
        uint64_t b0 = mb_now_ns(), req0 = d->count.requests;
        if (pr > 0) {
            if (items[2].revents)
                handle_signals(d);
            for (size_t i = 3; i < k_ctl; i++) {
                if (items[i].revents & POLLOUT)
                    ctl_writable(d, conns[i]);
                if (items[i].revents & (POLLIN | POLLHUP | POLLERR))
                    ctl_readable(d, conns[i]);
            }
            if (items[0].revents)
                accept_ctl(d);
            if (items[1].revents)
                accept_sessions(d);
            for (size_t i = k_ctl; i < k_sessions; i++)
                if (items[i].revents)
                    check_channel(d, ids[i]);
            for (size_t i = k_sessions; i < k; i++)
                if (items[i].revents)
                    check_withdrawn(d, (int)ids[i]);
        }
        uint64_t b1 = mb_now_ns();
        ctl_resume(d);
        if (d->pending)
            pending_run(d);
        uint64_t b2 = mb_now_ns();
        now = mb_now_ms();
        if (now >= next_tick) {
            next_tick = frame_pool_tick(&d->pool, now);   /* the reserve follows demand */
            withdrawn_poll(d);
        }
        uint64_t b3 = mb_now_ns();
        if (wd_period && now >= next_wd) {
            sd_notify(0, "WATCHDOG=1");
            next_wd = now + wd_period;
        }
        if (now >= next_status) {
            daemon_notify_status(d);
            expire_unbound(d, now);
            ctl_housekeep(d, now);
            next_status = now + STATUS_PERIOD_MS;
        }
        ctl_reap(d);
        loop_log(b0, b1, b2, b3, d->count.requests - req0);
    }
    if (d->pending)
        pending_fail_all(d, MB_EBUSY, "the daemon is stopping");
    free(items);
    free(ids);
    free(conns);
    return rc;
}
