/* test_fdpass.c: the handle channel's messages (common/fdpass.c) over a real
 * AF_UNIX SEQPACKET socket pair: descriptors arrive paired with their ids,
 * and every message whose ids and descriptors do not pair up is refused
 * with each descriptor it carried closed, so that a caller that closes
 * m.count descriptors never closes one it was not given. A descriptor's
 * fate is read from a pipe: the write end is what travels, and the read
 * end sees end of file once every copy of it is closed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/status.h>

#include "fdpass.h"

#define HDR (offsetof(struct mb_chan_msg, ids))

static void pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

/* A pipe whose write end is returned; *rd gets the read end, non-blocking. */
static int pipe_w(int *rd)
{
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    *rd = p[0];
    return p[1];
}

/* Has every copy of the pipe's write end been closed (read end at EOF)? */
static bool writers_gone(int rd)
{
    char b;
    return read(rd, &b, 1) == 0;
}

/* Send a header of `type` with `ids` ids and `nfds` copies of fd attached,
 * however little they agree (mb_chan_send would refuse some of these). */
static void send_raw(int sock, uint32_t type, uint32_t ids, int fd, int nfds, size_t cut)
{
    struct mb_chan_msg m;
    memset(&m, 0, sizeof(m));
    m.type = type;
    m.count = ids;
    for (uint32_t i = 0; i < ids && i < MB_CHAN_MAX_FDS; i++)
        m.ids[i] = 100 + i;
    size_t len = HDR + (ids < MB_CHAN_MAX_FDS ? ids : MB_CHAN_MAX_FDS) * sizeof(uint32_t);
    struct iovec iov = { &m, len - cut };
    int *fds = calloc((size_t)(nfds ? nfds : 1), sizeof(int));
    assert_non_null(fds);
    for (int i = 0; i < nfds; i++)
        fds[i] = fd;
    size_t space = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    char *ctl = calloc(1, space ? space : 1);
    assert_non_null(ctl);
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfds) {
        msg.msg_control = ctl;
        msg.msg_controllen = space;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    assert_int_equal(sendmsg(sock, &msg, 0), (ssize_t)(len - cut));
    free(ctl);
    free(fds);
}

/* Frames arrive as sent: ids in order, each descriptor open on the same
 * file as the one sent. */
static void frames_arrive_paired(void **state)
{
    (void)state;
    int sv[2], rd[3], wr[3];
    pair(sv);
    struct mb_chan_msg m = { .type = MB_CHAN_FRAMES, .count = 3 };
    for (int i = 0; i < 3; i++) {
        wr[i] = pipe_w(&rd[i]);
        m.ids[i] = 7 + (uint32_t)i;
    }
    assert_int_equal(mb_chan_send(sv[0], &m, wr), 0);
    struct mb_chan_msg got;
    int fds[MB_CHAN_MAX_FDS];
    assert_int_equal(mb_chan_recv(sv[1], &got, fds, 1000), 0);
    assert_int_equal(got.type, MB_CHAN_FRAMES);
    assert_int_equal(got.count, 3);
    for (int i = 0; i < 3; i++) {
        struct stat a, b;
        assert_int_equal(got.ids[i], 7 + (uint32_t)i);
        assert_int_equal(fstat(fds[i], &a), 0);
        assert_int_equal(fstat(wr[i], &b), 0);
        assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
        close(fds[i]);
        close(wr[i]);
        assert_true(writers_gone(rd[i]));
        close(rd[i]);
    }
    close(sv[0]);
    close(sv[1]);
}

/* A welcome with ids but no descriptors: refused. Before, it was taken,
 * and callers that close m.count descriptors closed what fds[] held
 * (uninitialised stack: any descriptor of the process). */
static void ids_without_descriptors_refused(void **state)
{
    (void)state;
    int sv[2];
    pair(sv);
    struct mb_chan_msg m = { .type = MB_CHAN_WELCOME, .count = 2, .ids = { 1, 2 } };
    assert_int_equal(mb_chan_send(sv[0], &m, NULL), 0);
    struct mb_chan_msg got;
    int fds[MB_CHAN_MAX_FDS];
    assert_int_equal(mb_chan_recv(sv[1], &got, fds, 1000), MB_EPROTO);
    /* The same for a frames message, and for a type nobody knows. */
    m.type = MB_CHAN_FRAMES;
    assert_int_equal(mb_chan_send(sv[0], &m, NULL), 0);
    assert_int_equal(mb_chan_recv(sv[1], &got, fds, 1000), MB_EPROTO);
    m.type = 9;
    assert_int_equal(mb_chan_send(sv[0], &m, NULL), 0);
    assert_int_equal(mb_chan_recv(sv[1], &got, fds, 1000), MB_EPROTO);
    /* The channel goes on: a well-formed welcome next is taken. */
    struct mb_chan_msg w = { .type = MB_CHAN_WELCOME, .session_id = 42 };
    assert_int_equal(mb_chan_send(sv[0], &w, NULL), 0);
    assert_int_equal(mb_chan_recv(sv[1], &got, fds, 1000), 0);
    assert_int_equal(got.session_id, 42);
    assert_int_equal(got.count, 0);
    close(sv[0]);
    close(sv[1]);
}

/* Messages whose descriptors do not pair with their ids are refused, and
 * every descriptor they carried is closed (the pipe's write end, sent as
 * the only copy, leaves no writer). */
static void unpaired_descriptors_closed(void **state)
{
    (void)state;
    struct {
        const char *what;
        uint32_t type, ids;
        int nfds;
        size_t cut;
    } cases[] = {
        { "fewer ids than descriptors", MB_CHAN_FRAMES, 1, 2, 0 },
        { "more ids than descriptors", MB_CHAN_FRAMES, 3, 2, 0 },
        { "descriptors on a welcome", MB_CHAN_WELCOME, 0, 1, 0 },
        { "descriptors on an unknown type", 9, 1, 1, 0 },
        { "a header cut short", MB_CHAN_FRAMES, 1, 1, HDR - 4 + sizeof(uint32_t) },
        { "more descriptors than a message may carry", MB_CHAN_FRAMES, MB_CHAN_MAX_FDS,
          MB_CHAN_MAX_FDS + 1, 0 },
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        int sv[2], rd;
        pair(sv);
        int wr = pipe_w(&rd);
        send_raw(sv[0], cases[k].type, cases[k].ids, wr, cases[k].nfds, cases[k].cut);
        close(wr);
        struct mb_chan_msg got;
        int fds[MB_CHAN_MAX_FDS];
        int rc = mb_chan_recv(sv[1], &got, fds, 1000);
        if (rc != MB_EPROTO || !writers_gone(rd))
            fail_msg("%s: rc %d, writers gone %d", cases[k].what, rc, writers_gone(rd));
        close(rd);
        close(sv[0]);
        close(sv[1]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(frames_arrive_paired),
        cmocka_unit_test(ids_without_descriptors_refused),
        cmocka_unit_test(unpaired_descriptors_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
