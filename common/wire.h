/* wire.h: protobuf messages over ZeroMQ. The daemon (daemon/zmtp.c) sees
 * [identity][payload] as a ROUTER would; a client's DEALER sends and
 * receives [payload] alone. Identities are opaque bytes. */
#ifndef MB_WIRE_H
#define MB_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "moonbright.pb-c.h"

/* Largest control message accepted (a larger frame ends its connection). */
#include "protocol.h"

#define MB_WIRE_MAX_BYTES (256 * 1024)
#define MB_WIRE_MAX_IDENT 255

/* Pack a request and send it on a DEALER; 0 or a negative mb_status. */
int mb_wire_send_request(void *dealer, const Mb__Request *req);

/* Pack m for sending (both sides): into stack (stack_bytes long) when it
 * fits, else into memory from malloc (*out != stack: the caller frees it);
 * *len bytes, to be sent *copies times. Fault injection (debug builds) may
 * delay the call, halve *len, or ask for 0 or 2 copies. 0, MB_EINVAL past
 * MB_WIRE_MAX_BYTES (logged), or MB_ENOMEM. */
int mb_wire_pack(const ProtobufCMessage *m, uint8_t *stack, size_t stack_bytes, uint8_t **out,
                 size_t *len, int *copies);

/* Receive one reply on a DEALER, waiting at most timeout_ms. Every other
 * message goes to on_notice when given, then is dropped: unsolicited
 * notices (id 0) and replies to other requests (late answers to requests
 * that timed out).
 * *out is freed with mb__reply__free_unpacked(*out, NULL). MB_EUNAVAIL on
 * timeout. */
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
