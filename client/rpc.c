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
#include "wire.h"

int rpc_connect(mb_client *c, const char *tenant)
{
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
    c->session_id = rep->hello->session_id;
    c->frame_bytes = rep->hello->frame_bytes;
    snprintf(c->backend_name, sizeof(c->backend_name), "%s", rep->hello->backend);
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

void rpc_disconnect(mb_client *c)
{
    if (c->dealer)
        zmq_close(c->dealer);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    if (c->chan >= 0)
        close(c->chan);
    c->dealer = c->zctx = NULL;
    c->chan = -1;
}

/* Record a notice; the work it asks for happens once no call is waiting. */
static void on_notice(void *ctx, const Mb__Reply *r)
{
    mb_client *c = ctx;
    if (r->body_case != MB__REPLY__BODY_NOTICE)
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

/* RECLAIM: give back cached frames (first whatever the tiers hold empty),
 * then report what stays cached. */
static void answer_reclaim(mb_client *c)
{
    c->reclaim_due = false;
    c->in_reclaim = true;
    size_t cached = (size_t)c->fc.n_cached * c->frame_bytes;
    if (c->reclaim_bytes == 0 || c->reclaim_bytes > cached) {
        tiers_trim(c);
        cached = (size_t)c->fc.n_cached * c->frame_bytes;
    }
    size_t keep = c->reclaim_bytes == 0 || c->reclaim_bytes >= cached ? 0 : cached - c->reclaim_bytes;
    fcache_trim(c, keep);
    c->cache_reported = (uint64_t)-1;   /* always answer with a report */
    fcache_report(c);
    c->in_reclaim = false;
}

void rpc_poll_notices(mb_client *c)
{
    if (!c->dealer)
        return;
    Mb__Reply *r;
    /* No request is outstanding: anything waiting is a notice or a late reply. */
    while (mb_wire_recv_reply(c->dealer, (uint64_t)-1, 0, &r, on_notice, c) == 0)
        mb__reply__free_unpacked(r, NULL);
    if (c->reclaim_due && !c->in_reclaim && !c->broken)
        answer_reclaim(c);
}

static void *notice_main(void *arg)
{
    mb_client *c = arg;
    int fd = -1;
    size_t len = sizeof(fd);
    pthread_mutex_lock(&c->lock);
    zmq_getsockopt(c->dealer, ZMQ_FD, &fd, &len);
    while (!c->stopping) {
        pthread_mutex_unlock(&c->lock);
        /* ZMQ_FD is edge-triggered: wake on it or every 100 ms regardless. */
        struct pollfd p = { .fd = fd, .events = POLLIN };
        poll(&p, 1, 100);
        pthread_mutex_lock(&c->lock);
        if (!c->stopping) {
            rpc_poll_notices(c);
            /* Frees into the slab and pool change what could be given back
             * without a message: report it from here, off the fast path. */
            fcache_report(c);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int rpc_start_notice_thread(mb_client *c)
{
    if (pthread_create(&c->notice_thread, NULL, notice_main, c) != 0)
        return MB_ESYS;
    c->notice_thread_on = true;
    return 0;
}

/* Called without the lock held. */
void rpc_stop_notice_thread(mb_client *c)
{
    if (!c->notice_thread_on)
        return;
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->notice_thread, NULL);
    c->notice_thread_on = false;
}

int rpc_post(mb_client *c, Mb__Request *req)
{
    if (c->broken)
        return MB_EUNAVAIL;
    req->id = ++c->next_id;
    return mb_wire_send_request(c->dealer, req);
}

int rpc_call(mb_client *c, Mb__Request *req, Mb__Reply **out)
{
    if (c->broken)
        return MB_EUNAVAIL;
    req->id = ++c->next_id;
    int rc = mb_wire_send_request(c->dealer, req);
    if (rc == 0)
        rc = mb_wire_recv_reply(c->dealer, req->id, c->timeout_ms, out, on_notice, c);
    c->st.daemon_requests++;
    if (rc == MB_EUNAVAIL) {
        mb_log(MB_LOG_WARN, "moonbrightd did not answer within %d ms", c->timeout_ms);
        return rc;
    }
    if (rc != 0)
        return rc;
    if (c->reclaim_due && !c->in_reclaim) {
        Mb__Reply *keep = *out;   /* answer the daemon before going on */
        answer_reclaim(c);
        *out = keep;
    }
    if ((*out)->code != 0) {
        rc = (*out)->code < MB_STATUS_MIN || (*out)->code > 0 ? MB_EPROTO : (*out)->code;
        mb_log(MB_LOG_WARN, "moonbrightd refused: %s", (*out)->error ? (*out)->error : mb_strerror(rc));
        mb__reply__free_unpacked(*out, NULL);
        *out = NULL;
    }
    return rc;
}
