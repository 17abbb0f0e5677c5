/* wire.c: packing protobuf envelopes into ZeroMQ frames and back, with
 * request ids and timeouts on the client side. */
#include "wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <moonbright/status.h>

#include "faults.h"
#include "fdpass.h"
#include "log.h"

uint64_t mb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int mb_wire_pack(const ProtobufCMessage *m, uint8_t *stack, size_t stack_bytes, uint8_t **out,
                 size_t *len, int *copies)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > MB_WIRE_MAX_BYTES) {
        mb_log(MB_LOG_ERR, "failed to send a message: %zu bytes exceeds the %d-byte limit", n,
               MB_WIRE_MAX_BYTES);
        return MB_EINVAL;
    }
    uint8_t *buf = n <= stack_bytes ? stack : malloc(n);
    if (!buf)
        return MB_ENOMEM;
    protobuf_c_message_pack(m, buf);
    if (mb_fault(MB_FAULT_DELAY))
        usleep((useconds_t)(rand() % 50000));
    if (mb_fault(MB_FAULT_TRUNC))
        n /= 2;
    *copies = mb_fault(MB_FAULT_DROP) ? 0 : mb_fault(MB_FAULT_DUP) ? 2 : 1;
    *out = buf;
    *len = n;
    return 0;
}

int mb_wire_send_request(void *dealer, const Mb__Request *req)
{
    uint8_t stack[4096], *buf;
    size_t len;
    int copies, rc = mb_wire_pack(&req->base, stack, sizeof(stack), &buf, &len, &copies);
    if (rc < 0)
        return rc;
    for (int k = 0; k < copies && rc >= 0; k++) {
        do
            rc = zmq_send(dealer, buf, len, ZMQ_DONTWAIT);
        while (rc < 0 && errno == EINTR);
    }
    if (buf != stack)
        free(buf);
    if (rc < 0) {
        mb_log(MB_LOG_DEBUG, "failed to send message: %s", zmq_strerror(errno));
        return MB_EUNAVAIL;
    }
    return 0;
}

int mb_wire_recv_reply(void *dealer, uint64_t id, int timeout_ms, Mb__Reply **out,
                       void (*on_notice)(void *ctx, const Mb__Reply *r), void *ctx)
{
    int64_t deadline = mb_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - mb_now_ms();
        if (left < 0)
            return MB_EUNAVAIL;
        zmq_pollitem_t item = { dealer, 0, ZMQ_POLLIN, 0 };
        int pr = zmq_poll(&item, 1, (long)left);
        if (pr < 0 && errno != EINTR)
            return MB_EUNAVAIL;
        if (pr == 0 && left == 0)
            return MB_EUNAVAIL;   /* a look with nothing waiting (timeout 0 would spin to the next ms) */
        if (pr <= 0)
            continue;
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, dealer, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            continue;
        }
        int more = zmq_msg_more(&msg);
        Mb__Reply *r = more ? NULL
                            : mb__reply__unpack(NULL, zmq_msg_size(&msg), zmq_msg_data(&msg));
        zmq_msg_close(&msg);
        while (more) {  /* a reply is one frame; drain anything else */
            zmq_msg_init(&msg);
            zmq_msg_recv(&msg, dealer, 0);
            more = zmq_msg_more(&msg);
            zmq_msg_close(&msg);
        }
        if (!r) {
            mb_log(MB_LOG_WARN, "dropped a malformed reply from the daemon");
            continue;
        }
        if (r->id == id) {
            *out = r;
            return 0;
        }
        if (on_notice)
            on_notice(ctx, r);
        mb__reply__free_unpacked(r, NULL);
    }
}

void mb_wire_hello(Mb__Request *req, Mb__Hello *h, const uint8_t *token, const char *tenant)
{
    mb__request__init(req);
    mb__hello__init(h);
    h->token.data = (uint8_t *)token;
    h->token.len = MB_TOKEN_BYTES;
    h->tenant = (char *)tenant;
    h->version = MB_PROTOCOL_VERSION;
    req->body_case = MB__REQUEST__BODY_HELLO;
    req->hello = h;
}

void mb_reply_error(Mb__Reply *rep, int code, const char *fmt, ...)
{
    static __thread char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    rep->code = code;
    rep->error = text;
}
