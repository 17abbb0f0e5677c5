/* test_shares.c: the daemon's share tokens and hold index in-process (no
 * sockets): many holds added and dropped in random order stay findable,
 * their charges follow them, and the frame books stay valid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "daemon.h"
#include "log.h"

#define FB 4096u
#define N 200

static struct session *fake_session(struct daemon *d, const char *tenant, uid_t uid, uint8_t tag,
                                    int *peer)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    struct session *s = session_open(d, sv[0]);
    assert_non_null(s);
    s->uid = uid;
    s->tenant = tenant_get(d, tenant);
    s->ident[0] = tag;
    s->ident_len = 1;
    s->bound = true;
    *peer = sv[1];
    return s;
}

static void drain_peer(int fd)
{
    struct mb_chan_msg m;
    int fds[MB_CHAN_MAX_FDS];
    while (mb_chan_recv(fd, &m, fds, 0) == 0)
        for (uint32_t i = 0; i < m.count; i++)
            close(fds[i]);
}

static void holds_in_random_order(void **state)
{
    struct daemon d;
    memset(&d, 0, sizeof(d));
    d.chan_listen = d.sigfd = d.lock_fd = -1;
    mb_config_defaults(&d.cfg);
    assert_int_equal(mb_backend_open("host", 0, &d.be), 0);
    assert_int_equal(frame_pool_init(&d.pool, d.be, FB, 4 * N * FB), 0);
    int pa, pb;
    struct session *a = fake_session(&d, "a", 1000, 1, &pa);
    struct session *b = fake_session(&d, "b", 1000, 2, &pb);
    uint32_t ids[N];
    for (int k = 0; k < N; k += 50) {   /* in parts, so the channel never fills */
        Mb__Reply rep = MB__REPLY__INIT;
        grant_now(&d, a, 50 * FB, (struct grant_shape){ 0, false }, 0, 0, 0, &rep);
        assert_int_equal(rep.code, 0);
        for (int i = 0; i < 50; i++)
            ids[k + i] = rep.grant->frames[i]->id;
        drain_peer(pa);
    }
    /* Share and import them in batches of 10: 20 tokens, 200 holds. */
    for (int k = 0; k < N; k += 10) {
        Mb__Request req = MB__REQUEST__INIT;
        Mb__Share sh = MB__SHARE__INIT;
        sh.ids = ids + k;
        sh.n_ids = 10;
        req.body_case = MB__REQUEST__BODY_SHARE;
        req.share = &sh;
        struct request_ctx rc = { .d = &d, .s = a };
        Mb__Reply r1 = MB__REPLY__INIT;
        h_share(&rc, &req, &r1);
        assert_int_equal(r1.code, 0);
        uint8_t tok[32];
        memcpy(tok, r1.share->token.data, sizeof(tok));
        Mb__Import im = MB__IMPORT__INIT;
        im.token.data = tok;
        im.token.len = sizeof(tok);
        req.body_case = MB__REQUEST__BODY_IMPORT;
        req.import = &im;
        rc.s = b;
        Mb__Reply r2 = MB__REPLY__INIT;
        h_import(&rc, &req, &r2);
        assert_int_equal(r2.code, 0);
        drain_peer(pb);
    }
    assert_int_equal(d.n_holds, N);
    assert_true(shares_is_valid(&d));
    assert_int_equal(b->import_bytes, (uint64_t)N * FB);
    assert_int_equal(b->tenant->bytes, (uint64_t)N * FB);
    assert_int_equal(a->lent_bytes, (uint64_t)N * FB);   /* returning them frees nothing */
    /* The owner lets go: the importer keeps them. */
    assert_int_equal(frame_pool_return(&d.pool, ids, N, a->id), 0);
    a->frames = 0;
    a->tenant->bytes -= a->bytes;
    a->bytes = a->lent_bytes = 0;
    assert_int_equal(d.pool.n_granted, N);
    /* Drop them one by one in a scrambled order; the rest stay found. */
    uint32_t order[N];
    memcpy(order, ids, sizeof(order));
    srand(7);
    for (int i = N - 1; i > 0; i--) {
        int j = rand() % (i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(shares_return(&d, b, &order[i], 1), 0);
        assert_false(shares_holds(&d, b, order[i]));
        assert_int_equal(shares_return(&d, b, &order[i], 1), MB_EPERM);
        for (int k = i + 1; k < N; k += 17)
            assert_true(shares_holds(&d, b, order[k]));
        assert_true(frame_pool_is_valid(&d.pool));
        assert_true(shares_is_valid(&d));
    }
    assert_int_equal(d.n_holds, 0);
    assert_int_equal(b->import_bytes, 0);
    assert_int_equal(b->tenant->bytes, 0);
    assert_int_equal(d.pool.n_granted, 0);
    while (d.sessions)
        session_close(&d, d.sessions);
    while (d.tenants) {
        struct tenant *t = d.tenants;
        d.tenants = t->next;
        free(t);
    }
    close(pa);
    close(pb);
    shares_destroy(&d);
    frame_pool_destroy(&d.pool);
    mb_backend_close(d.be);
    mb_config_free(&d.cfg);
}

int main(void)
{
    mb_log_set_level(MB_LOG_ERR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(holds_in_random_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
