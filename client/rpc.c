/* rpc.c: the client's end of both channels: the handle channel (connect,
 * welcome with the session token) and the ZeroMQ DEALER (hello, then one
 * request at a time with an id and a timeout, so a lost reply never wedges
 * the caller). */
#include <errno.h>
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

static int chan_connect(mb_client *c, const char *dir, struct mb_chan_msg *welcome)
{
    char path[256];
    if (mb_chan_path(path, sizeof(path), dir, c->device) != 0)
        return MB_EINVAL;
    c->chan = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c->chan < 0)
        return MB_ESYS;
    struct sockaddr_un sa;
    if (mb_chan_sockaddr(&sa, path) != 0)
        return MB_EINVAL;
    if (connect(c->chan, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        mb_log(MB_LOG_WARN, "failed to connect to moonbrightd at %s: %s", path, strerror(errno));
        return MB_EUNAVAIL;
    }
    int fds[MB_CHAN_MAX_FDS];
    int rc = mb_chan_recv(c->chan, welcome, fds, c->timeout_ms);
    if (rc == 0 && welcome->type != MB_CHAN_WELCOME)
        rc = MB_EPROTO;
    if (rc != 0)
        mb_log(MB_LOG_WARN, "no welcome from moonbrightd on %s: %s", path, mb_strerror(rc));
    return rc;
}

int rpc_connect(mb_client *c, const char *tenant)
{
    const char *dir = mb_default_runtime_dir();
    struct mb_chan_msg w;
    int rc = chan_connect(c, dir, &w);
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
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Hello h = MB__HELLO__INIT;
    h.token.data = w.token;
    h.token.len = sizeof(w.token);
    h.tenant = (char *)tenant;
    h.version = 1;
    req.body_case = MB__REQUEST__BODY_HELLO;
    req.hello = &h;
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

int rpc_call(mb_client *c, Mb__Request *req, Mb__Reply **out)
{
    if (c->broken)
        return MB_EUNAVAIL;
    req->id = ++c->next_id;
    int rc = mb_wire_send_request(c->dealer, req);
    if (rc == 0)
        rc = mb_wire_recv_reply(c->dealer, req->id, c->timeout_ms, out, NULL, NULL);
    c->st.daemon_requests++;
    if (rc == MB_EUNAVAIL) {
        mb_log(MB_LOG_WARN, "moonbrightd did not answer within %d ms", c->timeout_ms);
        return rc;
    }
    if (rc != 0)
        return rc;
    if ((*out)->code != 0) {
        rc = (*out)->code < MB_STATUS_MIN || (*out)->code > 0 ? MB_EPROTO : (*out)->code;
        mb_log(MB_LOG_WARN, "moonbrightd refused: %s", (*out)->error ? (*out)->error : mb_strerror(rc));
        mb__reply__free_unpacked(*out, NULL);
        *out = NULL;
    }
    return rc;
}
