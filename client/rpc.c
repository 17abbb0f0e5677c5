/* rpc.c: the client's end of both channels: the handle channel (connect,
 * welcome with the session token) and the ZeroMQ DEALER (hello, then one
 * request at a time with an id and a timeout, so a lost reply never wedges
 * the caller). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "client.h"
#include "log.h"
#include "refill.h"
#include "wire.h"

static int rpc_connect_held(mb_client *c, const char *tenant)
{
    if (tenant != c->tenant)   /* a reconnect passes c->tenant itself */
        snprintf(c->tenant, sizeof(c->tenant), "%s", tenant);
    const char *dir = mb_default_runtime_dir();
    struct mb_chan_msg w;
    int rc = mb_chan_open(dir, c->device, c->timeout_ms, &c->chan, &w);
    if (rc != 0)
        return rc;
    char ep[300];
    if (mb_ctl_endpoint(ep, sizeof(ep), dir, c->device) != 0)
        return MB_EINVAL;
    c->zctx = zmq_ctx_new();
    c->dealer = c->zctx ? zmq_socket(c->zctx, ZMQ_DEALER) : NULL;
    if (!c->dealer)
        return MB_ESYS;
    int zero = 0;
    zmq_setsockopt(c->dealer, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(c->dealer, ep) != 0) {
        mb_log(MB_LOG_WARN, "failed to connect to %s: %s", ep, zmq_strerror(errno));
        return MB_EUNAVAIL;
    }
    Mb__Request req;
    Mb__Hello h;
    mb_wire_hello(&req, &h, w.token, tenant);
    Mb__Reply *rep;
    if ((rc = rpc_call(c, &req, &rep)) != 0)
        return rc;
    if (rep->body_case != MB__REPLY__BODY_HELLO || rep->hello->frame_bytes == 0) {
        mb__reply__free_unpacked(rep, NULL);
        return MB_EPROTO;
    }
    /* The unit and the backend are the client's from the first connect on
     * (every tier is laid out in that unit, and other threads read them
     * without the frame layer's lock): a daemon that comes back with
     * others cannot serve this process. */
    if (rep->hello->device_uuid.len != MB_UUID_BYTES) {
        mb_log(MB_LOG_ERR, "moonbrightd's hello names no device identity");
        mb__reply__free_unpacked(rep, NULL);
        return MB_EPROTO;
    }
    if (c->frame_bytes && memcmp(c->device_uuid, rep->hello->device_uuid.data, MB_UUID_BYTES) != 0) {
        char was[MB_UUID_STR], now[MB_UUID_STR];
        mb_uuid_str(c->device_uuid, was);
        mb_uuid_str(rep->hello->device_uuid.data, now);
        mb_log(c->reconnect_wait_ms ? MB_LOG_DEBUG : MB_LOG_ERR,
               "moonbrightd came back serving %s; this process's memory is on %s and it stays "
               "without it", now, was);
        mb__reply__free_unpacked(rep, NULL);
        return MB_EPROTO;
    }
    if (c->frame_bytes && (c->frame_bytes != rep->hello->frame_bytes ||
                           strcmp(c->backend_name, rep->hello->backend) != 0)) {
        mb_log(c->reconnect_wait_ms ? MB_LOG_DEBUG : MB_LOG_ERR,
               "moonbrightd came back with %llu-byte frames on the %s backend; this process uses "
               "%zu-byte frames on the %s backend and stays without it",
               (unsigned long long)rep->hello->frame_bytes, rep->hello->backend, c->frame_bytes,
               c->backend_name);
        mb__reply__free_unpacked(rep, NULL);
        return MB_EPROTO;
    }
    c->session_id = rep->hello->session_id;
    c->exact_plans = c->exact_allowed && rep->hello->exact_plans;   /* (a daemon may come back older) */
    if (!c->frame_bytes) {
        c->frame_bytes = rep->hello->frame_bytes;
        snprintf(c->backend_name, sizeof(c->backend_name), "%s", rep->hello->backend);
        memcpy(c->device_uuid, rep->hello->device_uuid.data, MB_UUID_BYTES);
    }
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

int rpc_connect(mb_client *c, const char *tenant)
{
    rpc_lock(c);
    int rc = rpc_connect_held(c, tenant);
    rpc_unlock(c);
    return rc;
}

/* The frames this process still maps or caches, reported to a new daemon:
 * granted ones, and those held through an import (marked imported). */
static int reattach(mb_client *c)
{
    size_t n = 0;
    for (uint32_t i = 0; i < c->fc.cap; i++)
        n += c->fc.by_id[i] != NULL;
    if (n == 0)
        return 0;
    Mb__Frame *frames = calloc(n, sizeof(*frames));
    Mb__Frame **fp = calloc(n, sizeof(*fp));
    int rc = frames && fp ? 0 : MB_ENOMEM;
    size_t k = 0;
    for (uint32_t i = 0; rc == 0 && i < c->fc.cap; i++) {
        const struct cframe *f = c->fc.by_id[i];
        if (!f)
            continue;
        mb__frame__init(&frames[k]);
        frames[k].id = f->id;
        frames[k].bytes = f->mem.bytes;
        frames[k].imported = f->imported;   /* a hold, not a grant */
        fp[k] = &frames[k];
        k++;
    }
    if (rc == 0) {
        Mb__Request req = MB__REQUEST__INIT;
        Mb__Reattach ra = MB__REATTACH__INIT;
        ra.frames = fp;
        ra.n_frames = n;
        req.body_case = MB__REQUEST__BODY_REATTACH;
        req.reattach = &ra;
        Mb__Reply *rep;
        rc = rpc_call(c, &req, &rep);
        if (rc == 0) {
            if (rep->body_case == MB__REPLY__BODY_REATTACH && rep->reattach->n_refused)
                mb_log(MB_LOG_ERR, "moonbrightd refused %zu of the frames this process still maps "
                       "(another process reported them): they stay mapped here", rep->reattach->n_refused);
            mb__reply__free_unpacked(rep, NULL);
        }
    }
    free(frames);
    free(fp);
    return rc;
}

static int rpc_ensure_connected_held(mb_client *c)
{
    if (!c->lost)
        return 0;
    if (c->broken || c->grants_in_flight)
        return MB_EUNAVAIL;   /* (a grant's frames not yet in the books it would report: later) */
    int64_t now = mb_now_ms();
    if (now < c->next_reconnect_ms)
        return MB_EUNAVAIL;
    /* A daemon that ended this session on purpose said so before closing
     * the channel: read what it sent last before trying again. */
    if (c->dealer)
        rpc_poll_notices(c);
    if (c->broken)
        return MB_EUNAVAIL;
    rpc_disconnect(c);
    int saved = c->timeout_ms;
    c->timeout_ms = saved < 1000 ? saved : 1000;   /* a bounded wait per attempt */
    c->lost = false;
    int rc = rpc_connect(c, c->tenant);   /* refuses a daemon with other frames */
    if (rc == 0)
        rc = reattach(c);
    c->timeout_ms = saved;
    if (rc != 0) {
        c->lost = true;
        c->reconnect_wait_ms = c->reconnect_wait_ms ? c->reconnect_wait_ms * 2 : 50;
        if (c->reconnect_wait_ms > 2000)
            c->reconnect_wait_ms = 2000;
        c->next_reconnect_ms = now + c->reconnect_wait_ms;
        return MB_EUNAVAIL;
    }
    mb_log(MB_LOG_WARN, "reconnected to moonbrightd (session %llu) and reported the frames held",
           (unsigned long long)c->session_id);
    c->reconnect_wait_ms = 0;
    c->cache_reported = (uint64_t)-1;
    return 0;
}

int rpc_ensure_connected(mb_client *c)
{
    rpc_lock(c);
    int rc = rpc_ensure_connected_held(c);
    rpc_unlock(c);
    return rc;
}

/* The channel is readable with nothing queued: the daemon went away. */
static void check_lost(mb_client *c)
{
    char b;
    if (c->chan >= 0 && !c->lost && recv(c->chan, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        mb_log(MB_LOG_WARN, "moonbrightd went away; calls that need it fail until it is back");
        c->lost = true;
        c->next_reconnect_ms = mb_now_ms() + 200;
    }
}

void rpc_disconnect(mb_client *c)
{
    rpc_lock(c);
    if (c->dealer)
        zmq_close(c->dealer);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    if (c->chan >= 0)
        close(c->chan);
    c->dealer = c->zctx = NULL;
    c->chan = -1;
    rpc_unlock(c);
}

/* Record a notice; the work it asks for happens once no call is waiting.
 * (Late answers to calls that gave up are dropped: a late grant's frames
 * are handed back by the descriptors that came for them, frames.c.) */
static void on_notice(void *ctx, const Mb__Reply *r)
{
    mb_client *c = ctx;
    if (r->id != 0 || r->body_case != MB__REPLY__BODY_NOTICE)
        return;
    const Mb__Notice *n = r->notice;
    switch (n->kind) {
    case MB__NOTICE__KIND__RECLAIM:
        c->reclaim_due = true;
        c->reclaim_bytes = n->bytes;
        break;
    case MB__NOTICE__KIND__DRAINING:
        c->draining = true;
        mb_log(MB_LOG_WARN, "moonbrightd is draining%s: %s", n->exiting ? " and will exit" : "",
               n->reason ? n->reason : "");
        break;
    case MB__NOTICE__KIND__UNDRAINED:
        c->draining = false;
        break;
    case MB__NOTICE__KIND__KILLED:
        c->broken = true;
        mb_log(MB_LOG_ERR, "an administrator ended this session: %s", n->reason ? n->reason : "");
        break;
    default:
        break;
    }
}

void rpc_poll_notices(mb_client *c)
{
    rpc_lock(c);
    Mb__Reply *r;
    /* No request is outstanding: anything waiting is a notice or a late reply. */
    while (c->dealer && mb_wire_recv_reply(c->dealer, (uint64_t)-1, 0, &r, on_notice, c) == 0)
        mb__reply__free_unpacked(r, NULL);
    rpc_unlock(c);
}

void rpc_check_lost(mb_client *c)
{
    rpc_lock(c);
    check_lost(c);
    rpc_unlock(c);
}

int rpc_post(mb_client *c, Mb__Request *req)
{
    rpc_lock(c);
    int rc = MB_EUNAVAIL;
    if (!c->broken && !c->lost) {
        req->id = ++c->next_id;
        rc = mb_wire_send_request(c->dealer, req);
    }
    rpc_unlock(c);
    return rc;
}

static int call(mb_client *c, Mb__Request *req, Mb__Reply **out, bool reconnect);

int rpc_call(mb_client *c, Mb__Request *req, Mb__Reply **out)
{
    rpc_lock(c);
    int rc = call(c, req, out, true);
    rpc_unlock(c);
    return rc;
}

int rpc_room(mb_client *c, uint64_t bytes, uint32_t *released)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Room room = MB__ROOM__INIT;
    room.bytes = bytes;
    req.body_case = MB__REQUEST__BODY_ROOM;
    req.room = &room;
    Mb__Reply *rep;
    int rc = rpc_call_connected(c, &req, &rep);
    if (rc != 0)
        return rc;
    if (rep->body_case != MB__REPLY__BODY_ROOM)
        rc = MB_EPROTO;
    else if (released)
        *released = rep->room->released;
    mb__reply__free_unpacked(rep, NULL);
    return rc;
}

int rpc_call_connected(mb_client *c, Mb__Request *req, Mb__Reply **out)
{
    rpc_lock(c);
    int rc = call(c, req, out, false);
    rpc_unlock(c);
    return rc;
}

static int call(mb_client *c, Mb__Request *req, Mb__Reply **out, bool reconnect)
{
    if (c->broken)
        return MB_EUNAVAIL;
    check_lost(c);
    if (c->lost && (!reconnect || rpc_ensure_connected(c) != 0)) {
        if (reconnect)
            mb_log(MB_LOG_WARN, "moonbrightd is unavailable");
        return MB_EUNAVAIL;
    }
    req->id = ++c->next_id;
    uint64_t t0 = mb_now_ns();
    int rc = mb_wire_send_request(c->dealer, req);
    if (rc == 0)
        rc = mb_wire_recv_reply(c->dealer, req->id, c->timeout_ms, out, on_notice, c);
    __atomic_add_fetch(&c->fst.daemon_requests, 1, __ATOMIC_RELAXED);   /* (read without the line) */
    __atomic_add_fetch(&c->fst.daemon_ns, mb_now_ns() - t0, __ATOMIC_RELAXED);
    if (rc == MB_EUNAVAIL) {
        mb_log(MB_LOG_WARN, "moonbrightd did not answer within %d ms", c->timeout_ms);
        return rc;
    }
    if (rc != 0)
        return rc;
    if ((*out)->code != 0) {
        rc = (*out)->code < MB_STATUS_MIN || (*out)->code > 0 ? MB_EPROTO : (*out)->code;
        const char *why = (*out)->error ? (*out)->error : mb_strerror(rc);
        if (refused_for_room(rc)) {
            /* Near the budget the library gives memory back and tries
             * again, or asks for less: the call that finally fails says
             * why (client.c), in these words. */
            snprintf(c->refusal, sizeof(c->refusal), "%s", why);
            mb_log(MB_LOG_INFO, "moonbrightd refused: %s", why);
        } else {
            mb_log(MB_LOG_WARN, "moonbrightd refused: %s", why);
        }
        mb__reply__free_unpacked(*out, NULL);
        *out = NULL;
    }
    return rc;
}
