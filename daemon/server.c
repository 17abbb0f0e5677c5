/* server.c: moonbrightd's one zmq_poll loop: the ROUTER control socket, the
 * handle channel's listening socket and every session's channel (whose end
 * of file ends the session), signals, and the sd-daemon watchdog. The poll
 * timeout is the next deadline. Malformed messages are logged, counted and
 * answered or dropped; never asserted. */
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

#include <moonbright/mbclient.h>

#include "daemon.h"
#include "log.h"

/* Messages handled per wakeup before the loop looks at its other sockets. */
#define BURST 256
#define STATUS_PERIOD_MS 1000

static void reply_malformed(struct daemon *d, const uint8_t *ident, size_t len, const char *why)
{
    Mb__Reply rep = MB__REPLY__INIT;
    d->count.malformed++;
    mb_log(MB_LOG_DEBUG, "malformed request: %s", why);
    mb_reply_error(&rep, MB_EPROTO, "malformed request: %s", why);
    mb_wire_send_reply(d->router, ident, len, &rep);
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
    Mb__Request *req = mb__request__unpack(NULL, zmq_msg_size(&msg), zmq_msg_data(&msg));
    zmq_msg_close(&msg);
    if (!req) {
        reply_malformed(d, ident, (size_t)ilen, "not a Request message");
        return 0;
    }
    struct request_ctx rc = { .d = d, .ident = ident, .ident_len = (size_t)ilen };
    rc.s = session_by_ident(d, ident, (size_t)ilen);
    Mb__Reply rep = MB__REPLY__INIT;
    handle_request(&rc, req, &rep);
    if (rep.code != 0)
        mb_log(MB_LOG_DEBUG, "request %llu refused: %s", (unsigned long long)req->id, rep.error);
    mb__request__free_unpacked(req, NULL);
    if (mb_wire_send_reply(d->router, ident, (size_t)ilen, &rep) != 0)
        mb_log(MB_LOG_DEBUG, "failed to send a reply (peer gone)");
    return 0;
}

static void accept_sessions(struct daemon *d)
{
    for (;;) {
        int fd = accept4(d->chan_listen, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
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

static void handle_signals(struct daemon *d)
{
    struct signalfd_siginfo si;
    while (read(d->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
            mb_log(MB_LOG_INFO, "%s received: stopping", strsignal((int)si.ssi_signo));
            d->stopping = true;
        }
    }
}

static void notify_status(struct daemon *d)
{
    sd_notifyf(0, "STATUS=serving %u sessions; frames %u free, %u granted of %u",
               d->n_sessions, d->pool.n_free, d->pool.n_granted, d->pool.n_total);
}

int daemon_serve(struct daemon *d)
{
    uint64_t wd_usec = 0;
    int64_t wd_period = sd_watchdog_enabled(0, &wd_usec) > 0 ? (int64_t)(wd_usec / 2000) : 0;
    int64_t next_wd = mb_now_ms(), next_status = mb_now_ms();
    zmq_pollitem_t *items = NULL;
    uint64_t *ids = NULL;
    size_t cap = 0;
    int rc = 0;

    while (!d->stopping) {
        size_t n = 3 + d->n_sessions;
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
        int64_t now = mb_now_ms();
        int64_t deadline = next_status;
        if (wd_period && next_wd < deadline)
            deadline = next_wd;
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
            for (size_t i = 3; i < k; i++)
                if (items[i].revents)
                    check_channel(d, ids[i]);
        }
        now = mb_now_ms();
        if (wd_period && now >= next_wd) {
            sd_notify(0, "WATCHDOG=1");
            next_wd = now + wd_period;
        }
        if (now >= next_status) {
            notify_status(d);
            next_status = now + STATUS_PERIOD_MS;
        }
    }
    free(items);
    free(ids);
    return rc;
}
