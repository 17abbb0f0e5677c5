/* fuzz_request.c: libFuzzer target over moonbrightd's handling of one
 * control message in a given session state. A fresh daemon (host backend,
 * small frames, no sockets) per input; the first byte picks the state:
 *   0 no session   1 bound session holding frames, beside another tenant's
 *   2 admin session holding frames   3 bound session while draining
 * the rest is the message, fed to daemon_message as if from the control
 * socket. An unbound session (uid 1001) waits with the token {7, 0, ...}
 * in every state, so hello is reached. With bit 7 of the first byte set,
 * the rest is instead a byte stream on a control connection (zmtp.c:
 * greeting, READY, frames), bound to the first session in states 1-3.
 * A state journal says ids 1..39 were handed out by an earlier daemon (odd
 * ids to uid 1000, even ones to uid 1001, ids divisible by 3 also imported
 * by the other uid), so Reattach reports meet the journal's checks; new
 * frames start at id 40 (session B holds 40-47, session A 48-50).
 * Must never crash or leak; the frame books must stay valid. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <moonbright/mbclient.h>

#include "daemon.h"
#include "log.h"

static const uint8_t IDENT_A[] = { 0, 1, 2, 3, 4 };
static const uint8_t IDENT_B[] = { 0, 9, 9, 9, 9 };

/* A bound session on a socketpair; *peer is the client end. */
static struct session *fake_session(struct daemon *d, const char *tenant, uid_t uid,
                                    const uint8_t *ident, size_t len, int *peer)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        return NULL;
    struct session *s = session_open(d, sv[0]);
    if (!s) {
        close(sv[0]);
        close(sv[1]);
        return NULL;
    }
    s->uid = uid;   /* SO_PEERCRED says us; the state says who */
    memcpy(s->ident, ident, len);
    s->ident_len = len;
    s->bound = true;
    s->tenant = tenant_attach(d, s, tenant);
    *peer = sv[1];
    return s;
}

/* Read and close whatever the daemon sent a client on its channel. */
static void drain_peer(int fd)
{
    struct mb_chan_msg m;
    int fds[MB_CHAN_MAX_FDS];
    while (mb_chan_recv(fd, &m, fds, 0) == 0)
        for (uint32_t i = 0; i < m.count; i++)
            close(fds[i]);
}

/* The bytes as a peer's stream on a control connection (bound to session
 * a when there is one); replies are read and dropped. */
static void feed_stream(struct daemon *d, struct session *a, const uint8_t *data, size_t size)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    d->ctl_listen = sv[1];   /* replies go out on the connection */
    struct ctl_conn *c = ctl_open(d, sv[0], getpid(), 1000);
    if (!c)
        abort();
    if (a) {
        ctl_ident(c, a->ident);
        a->ident_len = CTL_IDENT_BYTES;
    }
    if (size && send(sv[1], data, size, MSG_DONTWAIT) < 0)
        abort();
    char sink[4096];
    for (int i = 0; i < 4 && !c->dead; i++) {
        ctl_readable(d, c);
        while (recv(sv[1], sink, sizeof(sink), MSG_DONTWAIT) > 0)
            ;
        ctl_writable(d, c);
        ctl_resume(d);
    }
    ctl_housekeep(d, mb_now_ms() + 60000);   /* every timeout has passed */
    ctl_reap(d);
    while (d->ctl)
        ctl_free(d, d->ctl);
    close(sv[1]);
    d->ctl_listen = -1;
}

static void give(struct daemon *d, struct session *s, uint32_t n)
{
    Mb__Reply rep = MB__REPLY__INIT;
    grant_now(d, s, (uint64_t)n * d->pool.frame_bytes, (struct grant_shape){ 0, false }, 0, 0, 0, &rep);
}

/* The journal's layout (frames.c): records of 16 bytes from offset 4096,
 * indexed by frame id: uid + 1, importing uid + 1, order. */
#define JOURNAL_IDS 40u
static int journal_fd = -1;

static void journal_reset(void)
{
    uint8_t rec[JOURNAL_IDS][16];
    memset(rec, 0, sizeof(rec));
    for (uint32_t id = 1; id < JOURNAL_IDS; id++) {
        uint32_t uid = id % 2 ? 1000 : 1001, other = id % 2 ? 1001 : 1000;
        uint32_t u = uid + 1, imp = id % 3 == 0 ? other + 1 : 0;
        memcpy(rec[id], &u, 4);
        memcpy(rec[id] + 4, &imp, 4);
    }
    if (pwrite(journal_fd, rec, sizeof(rec), 4096) != (ssize_t)sizeof(rec))
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    mb_log_set_level(MB_LOG_ERR - 1);   /* quiet */
    char path[] = "/tmp/mbfuzz-journal.XXXXXX";
    journal_fd = mkstemp(path);
    if (journal_fd < 0)
        abort();
    unlink(path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct daemon d;
    memset(&d, 0, sizeof(d));
    d.chan_listen = d.ctl_listen = d.spare_fd = d.sigfd = d.lock_fd = -1;
    d.reclaim_timeout_ms = 50;
    d.drain_timeout_ms = 1000;
    mb_config_defaults(&d.cfg);
    char err[256];
    static const char conf[] = "admin_uids = 4242\n[tenant capped]\nmax = 64K\nuids = 1000, 4242\n"
                               "[tenant kept]\nmin = 32K\n";
    if (mb_config_parse_string(conf, "fuzz.conf", &d.cfg, err, sizeof(err)) != 0 ||
        mb_backend_open("host", 0, &d.be) != 0 ||
        frame_pool_init(&d.pool, d.be, 4096, 64 * 4096) != 0)
        abort();
    journal_reset();
    d.pool.journal_fd = dup(journal_fd);
    d.pool.journal_limit = UINT32_MAX;   /* the header is never rewritten */
    d.pool.id_limit = d.pool.next_unused = JOURNAL_IDS;
    d.started_ms = mb_now_ms();
    for (size_t i = 0; i < d.cfg.n_tenants; i++)
        tenant_get(&d, d.cfg.tenants[i].name);
    int peer_a = -1, peer_b = -1, peer_u = -1;
    const uint8_t *ident = IDENT_A;
    uint8_t state = data[0] % 4;
    struct session *a = NULL;
    {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
            abort();
        struct session *u = session_open(&d, sv[0]);
        if (!u)
            abort();
        u->uid = 1001;
        memset(u->token, 0, sizeof(u->token));
        u->token[0] = 7;
        peer_u = sv[1];
    }
    if (state != 0) {
        struct session *b = fake_session(&d, "kept", 1001, IDENT_B, sizeof(IDENT_B), &peer_b);
        a = fake_session(&d, state == 2 ? "ops" : "capped", state == 2 ? 4242 : 1000,
                         IDENT_A, sizeof(IDENT_A), &peer_a);
        if (!a || !b)
            abort();
        give(&d, b, 8);
        give(&d, a, 3);
        b->cached = 4 * 4096;
        if (state == 3)
            daemon_drain(&d, true, false);
    }
    if (data[0] & 0x80)
        feed_stream(&d, a, data + 1, size - 1);
    else
        daemon_message(&d, ident, sizeof(IDENT_A), data + 1, size - 1);
    /* A deferred grant: frames come back or its deadline passes. */
    if (d.pending) {
        d.pending->deadline_ms = 0;
        pending_run(&d);
    }
    if (!frame_pool_is_valid(&d.pool) || !shares_is_valid(&d))
        abort();
    if (peer_a >= 0)
        drain_peer(peer_a);
    if (peer_b >= 0)
        drain_peer(peer_b);
    while (d.pending)
        pending_drop_session(&d, d.pending->session);
    while (d.sessions)
        session_close(&d, d.sessions);
    while (d.withdrawn)
        withdrawn_release(&d, d.withdrawn);
    if (d.pool.n_granted != 0)
        abort();   /* a frame leaked */
    while (d.tenants) {
        struct tenant *t = d.tenants;
        d.tenants = t->next;
        free(t);
    }
    if (peer_a >= 0) {
        drain_peer(peer_a);
        close(peer_a);
    }
    close(peer_u);
    if (peer_b >= 0) {
        drain_peer(peer_b);
        close(peer_b);
    }
    shares_destroy(&d);   /* tokens and the hold table, as the daemon does at exit */
    frame_pool_destroy(&d.pool);
    mb_backend_close(d.be);
    mb_config_free(&d.cfg);
    return 0;
}
