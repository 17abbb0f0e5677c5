/* wire.h: protobuf messages over ZeroMQ. The daemon's ROUTER sees
 * [identity][payload]; a client's DEALER sends and receives [payload] alone.
 * Identities are opaque bytes. */
#ifndef MB_WIRE_H
#define MB_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "moonbright.pb-c.h"

/* Largest control message accepted (the ROUTER's ZMQ_MAXMSGSIZE too). */
#include "protocol.h"

#define MB_WIRE_MAX_BYTES (256 * 1024)
#define MB_WIRE_MAX_IDENT 255

/* Pack and send; 0 or a negative mb_status. */
int mb_wire_send_request(void *dealer, const Mb__Request *req);
int mb_wire_send_reply(void *router, const void *ident, size_t ident_len, const Mb__Reply *rep);

/* Receive one reply on a DEALER, waiting at most timeout_ms. Replies to
 * other requests (late answers to requests that timed out) are dropped;
 * unsolicited notices (id 0) go to on_notice when given. *out is freed with
 * mb__reply__free_unpacked(*out, NULL). MB_EUNAVAIL on timeout. */
int mb_wire_recv_reply(void *dealer, uint64_t id, int timeout_ms, Mb__Reply **out,
                       void (*on_notice)(void *ctx, const Mb__Reply *r), void *ctx);

/* Fill req as the hello that binds a connection to the session whose
 * welcome carried token (MB_TOKEN_BYTES). */
void mb_wire_hello(Mb__Request *req, Mb__Hello *h, const uint8_t *token, const char *tenant);

/* Set a reply's code and error text (printf-style). */
void mb_reply_error(Mb__Reply *rep, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Monotonic clock in nanoseconds and milliseconds. */
uint64_t mb_now_ns(void);
static inline int64_t mb_now_ms(void) { return (int64_t)(mb_now_ns() / 1000000u); }

#endif
