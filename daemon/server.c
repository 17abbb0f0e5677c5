/* server.c: moonbrightd's one zmq_poll loop: the ROUTER control socket, the
 * handle channel's listening socket and every session's channel (whose end
 * of file ends the session), killed sessions' pidfds, signals, and the
 * sd-daemon protocol (WATCHDOG=1 from the loop, STATUS= as state changes,
 * STOPPING=1 when SIGTERM starts the drain). The poll timeout is the next
 * deadline (watchdog, status, pending grants, drain). Malformed messages
 * are logged, counted and answered or dropped; never asserted. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>
#include <zmq.h>

#include <moonbright/status.h>

#include "daemon.h"
#include "faults.h"
#include "log.h"

/* Messages handled per wakeup before the loop looks at its other sockets. */
#define BURST 256
#define STATUS_PERIOD_MS 1000

int daemon_send(struct daemon *d, const uint8_t *ident, size_t ident_len, const Mb__Reply *rep)
{
    if (d->router)
        return mb_wire_send_reply(d->router, ident, ident_len, rep);
    /* No socket (the fuzz target): pack it all the same. */
    size_t len = mb__reply__get_packed_size(rep);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return MB_ENOMEM;
    mb__reply__pack(rep, buf);
    free(buf);
    return len > MB_WIRE_MAX_BYTES ? MB_EINVAL : 0;
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

static void reply_malformed(struct daemon *d, const uint8_t *ident, size_t len, const char *why)
{
    Mb__Reply rep = MB__REPLY__INIT;
    d->count.malformed++;
    mb_log(MB_LOG_DEBUG, "malformed request: %s", why);
    mb_reply_error(&rep, MB_EPROTO, "malformed request: %s", why);
    daemon_send(d, ident, len, &rep);
}

void daemon_message(struct daemon *d, const uint8_t *ident, size_t ident_len,
                    const void *data, size_t size)
{
    uint64_t t0 = mb_now_ns();
    Mb__Request *req = mb__request__unpack(NULL, size, data);
    if (!req) {
        reply_malformed(d, ident, ident_len, "not a Request message");
        return;
    }
    struct request_ctx rc = { .d = d, .ident = ident, .ident_len = ident_len, .t0_ns = t0 };
    rc.s = session_by_ident(d, ident, ident_len);
    Mb__Reply rep = MB__REPLY__INIT;
    handle_request(&rc, req, &rep);
    if (rep.code != 0)
        mb_log(MB_LOG_DEBUG, "request %llu refused: %s", (unsigned long long)req->id, rep.error);
    mb__request__free_unpacked(req, NULL);
    if (!rc.deferred && daemon_send(d, ident, ident_len, &rep) != 0)
        mb_log(MB_LOG_DEBUG, "failed to send a reply (peer gone)");
}

/* Read whatever is left of a multipart message. */
static void drain_parts(void *sock)
{
    int more = 1;
    size_t sz = sizeof(more);
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
    }
}

/* One message from the ROUTER: [identity][request]. Returns 0 when one was
 * handled, MB_EBUSY when none was waiting. */
static int serve_one(struct daemon *d)
{
    uint8_t ident[MB_WIRE_MAX_IDENT];
    int ilen = zmq_recv(d->router, ident, sizeof(ident), ZMQ_DONTWAIT);
    if (ilen < 0)
        return MB_EBUSY;
    int more = 0;
    size_t sz = sizeof(more);
    zmq_getsockopt(d->router, ZMQ_RCVMORE, &more, &sz);
    if (!more || ilen > (int)sizeof(ident)) {
        d->count.malformed++;
        drain_parts(d->router);
        return 0;
    }
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, d->router, 0) < 0) {
        zmq_msg_close(&msg);
        return 0;
    }
    if (zmq_msg_more(&msg)) {
        zmq_msg_close(&msg);
        drain_parts(d->router);
        reply_malformed(d, ident, (size_t)ilen, "a request is one frame");
        return 0;
    }
    daemon_message(d, ident, (size_t)ilen, zmq_msg_data(&msg), zmq_msg_size(&msg));
    zmq_msg_close(&msg);
    return 0;
}

static void accept_sessions(struct daemon *d)
{
    for (;;) {
        int fd = accept4(d->chan_listen, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0 && mb_fault(MB_FAULT_FDS)) {
            close(fd);   /* as if accept had failed with EMFILE: the client sees EOF */
            fd = -1;
            errno = EMFILE;
        }
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                mb_log(MB_LOG_WARN, "failed to accept on the handle channel: %s", strerror(errno));
            return;
        }
        int buf = 1 << 20;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
        if (!session_open(d, fd))
            close(fd);
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
    zmq_pollitem_t *items = NULL;
    uint64_t *ids = NULL;
    size_t cap = 0;
    int rc = 0;

    while (!d->exit_now) {
        if (d->stopping && (d->n_sessions == 0 || mb_now_ms() >= d->drain_deadline_ms)) {
            if (d->n_sessions)
                mb_log(MB_LOG_WARN, "drain timeout: stopping with %u sessions still open",
                       d->n_sessions);
            break;
        }
        size_t n = 3 + d->n_sessions + d->n_withdrawn;
        if (n > cap) {
            zmq_pollitem_t *ni = realloc(items, 2 * n * sizeof(*ni));
            uint64_t *nid = ni ? realloc(ids, 2 * n * sizeof(*nid)) : NULL;
            if (ni)
                items = ni;
            if (!nid) {
                mb_log(MB_LOG_ERR, "failed to grow the poll set: out of memory");
                rc = MB_ENOMEM;
                break;
            }
            ids = nid;
            cap = 2 * n;
        }
        items[0] = (zmq_pollitem_t){ d->router, 0, ZMQ_POLLIN, 0 };
        items[1] = (zmq_pollitem_t){ NULL, d->chan_listen, ZMQ_POLLIN, 0 };
        items[2] = (zmq_pollitem_t){ NULL, d->sigfd, ZMQ_POLLIN, 0 };
        size_t k = 3;
        for (struct session *s = d->sessions; s; s = s->next, k++) {
            items[k] = (zmq_pollitem_t){ NULL, s->chan, ZMQ_POLLIN, 0 };
            ids[k] = s->id;
        }
        size_t k_sessions = k;
        for (struct withdrawn *w = d->withdrawn; w; w = w->next, k++) {
            items[k] = (zmq_pollitem_t){ NULL, w->pidfd, ZMQ_POLLIN, 0 };
            ids[k] = (uint64_t)w->pidfd;
        }
        int64_t now = mb_now_ms();
        int64_t deadline = next_status;
        if (wd_period && next_wd < deadline)
            deadline = next_wd;
        if (next_tick < deadline)
            deadline = next_tick;
        if (pending_next_deadline(d) < deadline)
            deadline = pending_next_deadline(d);
        if (d->stopping && d->drain_deadline_ms < deadline)
            deadline = d->drain_deadline_ms;
        long timeout = deadline > now ? (long)(deadline - now) : 0;
        int pr = zmq_poll(items, (int)k, timeout);
        if (pr < 0 && errno != EINTR) {
            mb_log(MB_LOG_ERR, "failed to poll: %s", zmq_strerror(errno));
            rc = MB_ESYS;
            break;
        }
        if (pr > 0) {
            if (items[2].revents)
                handle_signals(d);
            if (items[0].revents)
                for (int i = 0; i < BURST && serve_one(d) == 0; i++)
                    ;
            if (items[1].revents)
                accept_sessions(d);
            for (size_t i = 3; i < k_sessions; i++)
                if (items[i].revents)
                    check_channel(d, ids[i]);
            for (size_t i = k_sessions; i < k; i++)
                if (items[i].revents)
                    check_withdrawn(d, (int)ids[i]);
        }
        if (d->pending)
            pending_run(d);
        now = mb_now_ms();
        if (now >= next_tick) {
            next_tick = frame_pool_tick(&d->pool, now);   /* the reserve follows demand */
            withdrawn_poll(d);
        }
        if (wd_period && now >= next_wd) {
            sd_notify(0, "WATCHDOG=1");
            next_wd = now + wd_period;
        }
        if (now >= next_status) {
            daemon_notify_status(d);
            next_status = now + STATUS_PERIOD_MS;
        }
    }
    if (d->pending)
        pending_fail_all(d, MB_EBUSY, "the daemon is stopping");
    free(items);
    free(ids);
    return rc;
}
