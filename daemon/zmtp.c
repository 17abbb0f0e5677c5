/* zmtp.c: the control socket (gpuN.ctl): the server side of ZMTP 3.0, the
 * ZeroMQ wire protocol (NULL mechanism), spoken to clients' DEALER sockets
 * by the daemon itself, with an identity the daemon assigns to each
 * connection and a bound on what one connection may queue.
 *
 * Why not a libzmq ROUTER: a ROUTER takes a peer's self-chosen routing id
 * as it is and names the other peers 0x00 + a counter that starts at libzmq's
 * rand() (unseeded, so predictable); when a generated id equals one a peer
 * chose, libzmq asserts and the daemon aborts. No socket option prevents it
 * (ROUTER_HANDOVER renames the old pipe with a generated id, which can
 * collide the same way), and libzmq also asserts when it runs out of
 * descriptors while setting up a connection. Here the identity of a
 * connection is 8 bytes of a counter the daemon owns, assigned at accept and
 * never reused while it runs; the Identity a peer announces is ignored, so no
 * peer can name itself, let alone collide. Out of descriptors, accept fails
 * and the connection is refused (server.c); nothing aborts.
 *
 * Wire format (ZMTP 3.0, rfc.zeromq.org/spec/23): a 64-byte greeting each
 * way (signature 0xFF, 8 padding bytes, 0x7F; version 3.0; mechanism "NULL";
 * as-server 0; filler), a READY command each way (the peer must say
 * Socket-Type DEALER), then frames: a flags byte (MORE 1, LONG 2, COMMAND 4),
 * the size in one byte or eight (LONG, big-endian), the body. A request is
 * one message frame; a reply goes back as one frame. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <moonbright/mbclient.h>

#include "daemon.h"
#include "log.h"

#ifdef MB_DEBUG
#define CONN_CHECK(c) do { if (!ctl_conn_is_valid(c)) abort(); } while (0)
#else
#define CONN_CHECK(c) do { } while (0)
#endif

#define GREETING_BYTES 64
#define READ_CHUNK (64u * 1024)
#define COMMAND_MAX 1024           /* largest command frame accepted */

static const uint8_t server_greeting[GREETING_BYTES] = {
    0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F,  /* signature */
    3, 0,                                /* version 3.0 */
    'N', 'U', 'L', 'L',                  /* mechanism, NUL-padded to 20 bytes */
};

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void ctl_ident(const struct ctl_conn *c, uint8_t ident[CTL_IDENT_BYTES])
{
    put_be64(ident, c->id);
}

struct ctl_conn *ctl_by_ident(struct daemon *d, const uint8_t *ident, size_t len)
{
    if (len != CTL_IDENT_BYTES)
        return NULL;
    uint64_t id = get_be64(ident);
    for (struct ctl_conn *c = d->ctl; c; c = c->next)
        if (c->id == id)
            return c->dead ? NULL : c;
    return NULL;
}

bool ctl_conn_is_valid(const struct ctl_conn *c)
{
    return c->fd >= 0 && c->id != 0 && c->in_len <= c->in_cap && c->out_off <= c->out_len &&
           c->out_len <= c->out_cap && c->out_len - c->out_off <= CTL_OUT_HARD_BYTES &&
           (c->state == CTL_OPEN || !c->multipart);
}

/* Append bytes to the output; false when that would pass the hard cap. */
static bool out_append(struct ctl_conn *c, const void *a, size_t na, const void *b, size_t nb)
{
    if (c->out_off && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    size_t pending = c->out_len - c->out_off;
    if (pending + na + nb > CTL_OUT_HARD_BYTES)
        return false;
    if (c->out_len + na + nb > c->out_cap) {
        if (c->out_off) {   /* compact first */
            memmove(c->out, c->out + c->out_off, pending);
            c->out_len = pending;
            c->out_off = 0;
        }
        if (c->out_len + na + nb > c->out_cap) {
            size_t cap = c->out_cap ? c->out_cap : 4096;
            while (cap < c->out_len + na + nb)
                cap *= 2;
            uint8_t *n = realloc(c->out, cap);
            if (!n)
                return false;
            c->out = n;
            c->out_cap = cap;
        }
    }
    memcpy(c->out + c->out_len, a, na);
    if (nb)
        memcpy(c->out + c->out_len + na, b, nb);
    c->out_len += na + nb;
    return true;
}

/* Write what the socket takes now. 0, or -1 when the peer is gone. */
static int flush(struct ctl_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0)
            return -1;
        c->out_off += (size_t)n;
        c->last_progress_ms = mb_now_ms();
    }
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    return 0;
}

size_t ctl_pending_out(const struct ctl_conn *c)
{
    return c->out_len - c->out_off;
}

static void drop(struct daemon *d, struct ctl_conn *c, const char *why)
{
    if (c->dead)
        return;
    c->dead = true;
    daemon_log_limited(d, LOG_DROPPED, MB_LOG_WARN, "control connection of pid %d (uid %u) closed: %s",
                       (int)c->pid, (unsigned)c->uid, why);
}

struct ctl_conn *ctl_open(struct daemon *d, int fd, pid_t pid, uid_t uid)
{
    struct ctl_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->fd = fd;
    c->pid = pid;
    c->uid = uid;
    c->id = ++d->next_ctl_id;
    c->opened_ms = c->last_progress_ms = mb_now_ms();
    /* Greeting and READY go out at once: a libzmq peer sends its own
     * greeting in parts and waits to see ours. */
    static const uint8_t ready[] = {
        0x04, 28, 5, 'R', 'E', 'A', 'D', 'Y',
        11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e',
        0, 0, 0, 6, 'R', 'O', 'U', 'T', 'E', 'R',
    };
    if (!out_append(c, server_greeting, sizeof(server_greeting), ready, sizeof(ready)) ||
        flush(c) != 0) {
        free(c->out);
        free(c);
        return NULL;
    }
    c->next = d->ctl;
    d->ctl = c;
    d->n_ctl++;
    return c;
}

void ctl_free(struct daemon *d, struct ctl_conn *c)
{
    for (struct ctl_conn **pp = &d->ctl; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    close(c->fd);
    free(c->in);
    free(c->out);
    d->n_ctl--;
    free(c);
}

/* Unsent reply bytes of a uid's connections that are past the soft cap:
 * one uid's many slow connections together stay bounded too. */
static size_t uid_backlog(const struct daemon *d, uid_t uid)
{
    size_t n = 0;
    for (const struct ctl_conn *c = d->ctl; c; c = c->next)
        if (!c->dead && c->uid == uid && ctl_pending_out(c) >= CTL_OUT_SOFT_BYTES)
            n += ctl_pending_out(c);
    return n;
}

int ctl_send(struct daemon *d, const uint8_t *ident, size_t ident_len, const void *data, size_t size)
{
    struct ctl_conn *c = ctl_by_ident(d, ident, ident_len);
    if (!c || c->state != CTL_OPEN)
        return MB_EUNAVAIL;
    uint8_t hdr[9];
    size_t nh;
    if (size <= 255) {
        hdr[0] = 0;
        hdr[1] = (uint8_t)size;
        nh = 2;
    } else {
        hdr[0] = 2;
        put_be64(hdr + 1, size);
        nh = 9;
    }
    if (!out_append(c, hdr, nh, data, size) ||
        (ctl_pending_out(c) >= CTL_OUT_SOFT_BYTES && uid_backlog(d, c->uid) > CTL_UID_OUT_BYTES)) {
        d->count.slow_readers++;
        drop(d, c, "it does not read its replies");
        return MB_EUNAVAIL;
    }
    if (flush(c) != 0) {
        c->dead = true;   /* the peer closed: nothing to log */
        return MB_EUNAVAIL;
    }
    return 0;
}

/* The peer's greeting: ZMTP 3.x with the NULL mechanism. */
static bool greeting_ok(const uint8_t *g)
{
    static const uint8_t null_mech[20] = { 'N', 'U', 'L', 'L' };
    return g[0] == 0xFF && (g[9] & 1) && g[10] >= 3 && memcmp(g + 12, null_mech, 20) == 0;
}

/* The peer's READY: its Socket-Type must be DEALER; any Identity is
 * ignored (the daemon names connections). */
static bool ready_ok(const uint8_t *b, size_t n)
{
    if (n < 6 || b[0] != 5 || memcmp(b + 1, "READY", 5) != 0)
        return false;
    bool dealer = false;
    for (size_t i = 6; i < n;) {
        size_t nl = b[i++];
        if (nl == 0 || i + nl + 4 > n)
            return false;
        const uint8_t *name = b + i;
        i += nl;
        uint32_t vl = get_be32(b + i);
        i += 4;
        if (vl > n - i)
            return false;
        if (nl == 11 && memcmp(name, "Socket-Type", 11) == 0)
            dealer = vl == 6 && memcmp(b + i, "DEALER", 6) == 0;
        i += vl;
    }
    return dealer;
}

/* Handle the complete frames in the input buffer while the output is below
 * its soft cap (a peer that does not read its replies is not read either). */
static void process_input(struct daemon *d, struct ctl_conn *c)
{
    size_t pos = 0;
    c->held = false;
    for (;;) {
        if (c->dead)
            break;
        if (ctl_pending_out(c) >= CTL_OUT_SOFT_BYTES) {
            c->held = pos < c->in_len;
            break;
        }
        const uint8_t *b = c->in + pos;
        size_t avail = c->in_len - pos;
        if (c->state == CTL_GREETING) {
            if (avail < GREETING_BYTES)
                break;
            if (!greeting_ok(b)) {
                drop(d, c, "not a ZMTP 3 peer with the NULL mechanism");
                break;
            }
            pos += GREETING_BYTES;
            c->state = CTL_READY;
            continue;
        }
        if (avail < 2)
            break;
        uint8_t flags = b[0];
        if (flags & ~7u) {
            drop(d, c, "bad frame flags");
            break;
        }
        size_t hdr = flags & 2 ? 9 : 2;
        if (avail < hdr)
            break;
        uint64_t size = flags & 2 ? get_be64(b + 1) : b[1];
        uint64_t limit = flags & 4 ? COMMAND_MAX : MB_WIRE_MAX_BYTES;
        if (size > limit) {
            drop(d, c, "frame larger than the message limit");
            break;
        }
        if (avail - hdr < size)
            break;
        const uint8_t *body = b + hdr;
        pos += hdr + (size_t)size;
        if (c->state == CTL_READY) {
            if (!(flags & 4) || !ready_ok(body, (size_t)size)) {
                drop(d, c, "handshake: expected READY from a DEALER socket");
                break;
            }
            c->state = CTL_OPEN;
            continue;
        }
        if (flags & 4) {
            /* PING (a ZMTP 3.1 peer with heartbeats on): PONG with its
             * context; other commands are ignored. */
            if (size >= 7 && body[0] == 4 && memcmp(body + 1, "PING", 4) == 0 && size <= 7 + 16) {
                uint8_t pong[2 + 5 + 16] = { 0x04, (uint8_t)(5 + size - 7), 4, 'P', 'O', 'N', 'G' };
                memcpy(pong + 7, body + 7, (size_t)size - 7);
                if (!out_append(c, pong, 7 + (size_t)size - 7, NULL, 0) || flush(c) != 0)
                    c->dead = true;
            }
            continue;
        }
        if (flags & 1) {
            c->multipart = true;   /* drop parts until the last one */
            continue;
        }
        uint8_t ident[CTL_IDENT_BYTES];
        ctl_ident(c, ident);
        if (c->multipart) {
            c->multipart = false;
            daemon_malformed(d, ident, sizeof(ident), "a request is one frame");
            continue;
        }
        daemon_message(d, ident, sizeof(ident), body, (size_t)size);
    }
    if (pos) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    /* A frame begun and not complete is timed (ctl_housekeep drops it past
     * CTL_PARTIAL_MS, however slowly it trickles in); an emptied buffer
     * grown past one read's chunk goes, so that no connection keeps a large
     * message's memory (one of READ_CHUNK stays: freed after every message,
     * each request would cost the main loop an allocation). */
    if (c->in_len == 0 || c->held)
        c->partial_ms = 0;
    else if (!c->partial_ms || pos)
        c->partial_ms = mb_now_ms();
    if (c->in_len == 0 && c->in_cap > READ_CHUNK) {
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
}

void ctl_readable(struct daemon *d, struct ctl_conn *c)
{
    if (c->dead || ctl_pending_out(c) >= CTL_OUT_SOFT_BYTES)
        return;
    size_t most = MB_WIRE_MAX_BYTES + 9 + READ_CHUNK;
    if (c->in_cap - c->in_len < READ_CHUNK && c->in_cap < most) {
        size_t cap = c->in_cap ? c->in_cap * 2 : READ_CHUNK;
        if (cap > most)
            cap = most;
        uint8_t *n = realloc(c->in, cap);
        if (!n) {
            drop(d, c, "out of memory");
            return;
        }
        c->in = n;
        c->in_cap = cap;
    }
    size_t room = c->in_cap - c->in_len;
    if (room > READ_CHUNK)
        room = READ_CHUNK;
    ssize_t n = recv(c->fd, c->in + c->in_len, room, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        c->dead = true;   /* the peer closed: nothing to log */
        return;
    }
    c->in_len += (size_t)n;
    process_input(d, c);
}

void ctl_writable(struct daemon *d, struct ctl_conn *c)
{
    if (c->dead)
        return;
    if (flush(c) != 0) {
        c->dead = true;
        return;
    }
    if (ctl_pending_out(c) < CTL_OUT_SOFT_BYTES && c->in_len)
        process_input(d, c);
}

void ctl_resume(struct daemon *d)
{
    for (struct ctl_conn *c = d->ctl; c; c = c->next)
        if (c->held && !c->dead && ctl_pending_out(c) < CTL_OUT_SOFT_BYTES)
            process_input(d, c);
}

void ctl_housekeep(struct daemon *d, int64_t now)
{
    for (struct ctl_conn *c = d->ctl; c; c = c->next) {
        if (c->dead)
            continue;
        if (c->state != CTL_OPEN && now - c->opened_ms > CTL_HANDSHAKE_MS)
            drop(d, c, "no handshake in time");
        else if (c->partial_ms && now - c->partial_ms > CTL_PARTIAL_MS)
            drop(d, c, "a frame left incomplete for 10 s");
        else if (ctl_pending_out(c) >= CTL_OUT_SOFT_BYTES &&
                 now - c->last_progress_ms > CTL_STALL_MS) {
            d->count.slow_readers++;
            drop(d, c, "it does not read its replies");
        }
    }
}

void ctl_reap(struct daemon *d)
{
    for (struct ctl_conn *c = d->ctl, *next; c; c = next) {
        next = c->next;
        if (c->dead)
            ctl_free(d, c);
        else
            CONN_CHECK(c);
    }
}

uint32_t ctl_count_uid(const struct daemon *d, uid_t uid)
{
    uint32_t n = 0;
    for (const struct ctl_conn *c = d->ctl; c; c = c->next)
        n += !c->dead && c->uid == uid;
    return n;
}
