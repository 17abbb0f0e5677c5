/* gpu_chan.h: the few lines of SCM_RIGHTS messaging between
 * test_backend_cuda and its separately started helper gpu_importer: one
 * fixed-size message per SOCK_SEQPACKET datagram, up to GPU_CHAN_MAX_FDS fds. */
#ifndef MB_TESTS_GPU_CHAN_H
#define MB_TESTS_GPU_CHAN_H

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define GPU_CHAN_MAX_FDS 8
#define GPU_CHAN_SKIP 77   /* exit code of a program that found no usable GPU */

enum { GPU_OP_IMPORT = 1, GPU_OP_RESULT = 2 };

struct gpu_msg {
    uint32_t op;
    uint32_t count;                      /* frames (and fds) in this message */
    uint32_t seed;
    int32_t status;                      /* result: 0 or a negative mb_status */
    uint64_t bytes[GPU_CHAN_MAX_FDS];    /* size of each frame */
    uint64_t mismatches;                 /* result: importer's own read-back */
};

static inline int gpu_chan_send(int sock, const struct gpu_msg *m, const int *fds, int nfds)
{
    char ctl[CMSG_SPACE(sizeof(int) * GPU_CHAN_MAX_FDS)];
    struct iovec iov = { (void *)m, sizeof(*m) };
    struct msghdr h;
    memset(&h, 0, sizeof(h));
    memset(ctl, 0, sizeof(ctl));
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    if (nfds > 0) {
        h.msg_control = ctl;
        h.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &h, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(*m) ? 0 : -1;
}

/* Returns the number of fds received (>= 0), -1 on error or timeout, -2 at
 * end of file. */
static inline int gpu_chan_recv(int sock, struct gpu_msg *m, int *fds, int timeout_ms)
{
    struct pollfd p = { sock, POLLIN, 0 };
    int r;
    do
        r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        return -1;
    char ctl[CMSG_SPACE(sizeof(int) * GPU_CHAN_MAX_FDS)];
    struct iovec iov = { m, sizeof(*m) };
    struct msghdr h;
    memset(&h, 0, sizeof(h));
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = ctl;
    h.msg_controllen = sizeof(ctl);
    ssize_t n;
    do
        n = recvmsg(sock, &h, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n == 0)
        return -2;
    int nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)nfds);
        }
    }
    if (n != (ssize_t)sizeof(*m) || (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        return -1;
    }
    return nfds;
}

#endif
