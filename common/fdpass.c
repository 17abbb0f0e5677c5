/* fdpass.c: messages with file descriptors over the AF_UNIX handle channel,
 * peer credentials, and the socket paths of a device. */
#include "fdpass.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <moonbright/status.h>

#include "backend.h"
#include "log.h"

#define CHAN_HDR_BYTES (offsetof(struct mb_chan_msg, ids))

int mb_chan_send(int sock, const struct mb_chan_msg *m, const int *fds)
{
    if (m->count > MB_CHAN_MAX_FDS)
        return MB_EINVAL;
    struct iovec iov = { (void *)m, CHAN_HDR_BYTES + m->count * sizeof(uint32_t) };
    union {
        char buf[CMSG_SPACE(sizeof(int) * MB_CHAN_MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (m->count && fds) {
        memset(&u, 0, sizeof(u));
        msg.msg_control = u.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * m->count);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * m->count);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * m->count);
    }
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return MB_EBUSY;
        mb_log(MB_LOG_DEBUG, "failed to send on handle channel: %s", strerror(errno));
        return MB_EUNAVAIL;
    }
    return (size_t)n == iov.iov_len ? 0 : MB_EPROTO;
}

int mb_chan_recv(int sock, struct mb_chan_msg *m, int *fds, int timeout_ms)
{
    struct pollfd p = { .fd = sock, .events = POLLIN };
    int pr;
    do
        pr = poll(&p, 1, timeout_ms);
    while (pr < 0 && errno == EINTR);
    if (pr <= 0)
        return MB_EUNAVAIL;
    union {
        char buf[CMSG_SPACE(sizeof(int) * MB_CHAN_MAX_FDS)];
        struct cmsghdr align;
    } u;
    memset(m, 0, sizeof(*m));
    struct iovec iov = { m, sizeof(*m) };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                          .msg_controllen = sizeof(u.buf) };
    ssize_t n;
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return MB_EUNAVAIL;
    int nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (nfds < MB_CHAN_MAX_FDS)
                fds[nfds++] = fd;
            else
                close(fd);
        }
    }
    /* One descriptor for each id, and ids only in FRAMES: so that, as
     * fdpass.h promises, m->count descriptors are open whatever the type,
     * and a caller that closes that many never closes one it was not given. */
    bool ok = (size_t)n >= CHAN_HDR_BYTES && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
              m->count <= MB_CHAN_MAX_FDS &&
              (size_t)n == CHAN_HDR_BYTES + m->count * sizeof(uint32_t) &&
              (int)m->count == nfds && (m->type == MB_CHAN_FRAMES || m->count == 0);
    if (!ok) {
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        mb_log(MB_LOG_WARN, "dropped malformed handle-channel message (%zd bytes, %d fds)", n, nfds);
        return MB_EPROTO;
    }
    return 0;
}

int mb_chan_open(const char *dir, int device, int timeout_ms, int *fd, struct mb_chan_msg *welcome)
{
    char path[256];
    struct sockaddr_un sa;
    *fd = -1;
    if (mb_chan_path(path, sizeof(path), dir, device) != 0 || mb_chan_sockaddr(&sa, path) != 0)
        return MB_EINVAL;
    *fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (*fd < 0)
        return MB_ESYS;
    if (connect(*fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        mb_log(MB_LOG_WARN, "failed to connect to moonbrightd at %s: %s", path, strerror(errno));
        return MB_EUNAVAIL;
    }
    int fds[MB_CHAN_MAX_FDS];
    int rc = mb_chan_recv(*fd, welcome, fds, timeout_ms);
    if (rc == 0 && welcome->type != MB_CHAN_WELCOME) {
        for (uint32_t i = 0; i < welcome->count; i++)
            close(fds[i]);
        rc = MB_EPROTO;
    }
    if (rc != 0)
        mb_log(MB_LOG_WARN, "no welcome from moonbrightd on %s: %s", path, mb_strerror(rc));
    return rc;
}

int mb_chan_peer(int sock, pid_t *pid, uid_t *uid, gid_t *gid)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
        mb_log(MB_LOG_ERR, "failed to read peer credentials: %s", strerror(errno));
        return MB_ESYS;
    }
    *pid = cr.pid;
    *uid = cr.uid;
    *gid = cr.gid;
    return 0;
}

int mb_ctl_endpoint(char *buf, size_t len, const char *dir, int device)
{
    int n = snprintf(buf, len, "ipc://%s/gpu%d.ctl", dir, device);
    return n > 0 && (size_t)n < len ? 0 : MB_EINVAL;
}

int mb_chan_path(char *buf, size_t len, const char *dir, int device)
{
    /* sun_path holds 108 bytes with its terminator. */
    int n = snprintf(buf, len, "%s/gpu%d.fds", dir, device);
    return n > 0 && (size_t)n < len && n < 108 ? 0 : MB_EINVAL;
}

int mb_runtime_devices(const char *dir, int *out)
{
    bool seen[MB_DEVICE_MAX + 1] = { false };
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        int k, len = 0;
        if (sscanf(e->d_name, "gpu%d.fds%n", &k, &len) == 1 && e->d_name[len] == '\0' && k >= 0 &&
            k <= MB_DEVICE_MAX)
            seen[k] = true;
    }
    if (d)
        closedir(d);
    int n = 0;
    for (int k = 0; k <= MB_DEVICE_MAX; k++)
        if (seen[k])
            out[n++] = k;
    return n;
}

int mb_chan_sockaddr(struct sockaddr_un *sa, const char *path)
{
    size_t n = strlen(path);
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (n >= sizeof(sa->sun_path))
        return MB_EINVAL;
    memcpy(sa->sun_path, path, n + 1);
    return 0;
}

unsigned long mb_raise_fd_limit(bool raise_hard)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    if (raise_hard) {
        unsigned long nr_open = 0;
        FILE *f = fopen("/proc/sys/fs/nr_open", "r");
        if (f) {
            if (fscanf(f, "%lu", &nr_open) != 1)
                nr_open = 0;
            fclose(f);
        }
        if (nr_open > rl.rlim_max) {
            struct rlimit want = { nr_open, nr_open };
            if (setrlimit(RLIMIT_NOFILE, &want) == 0)
                return nr_open;
        }
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    return (unsigned long)rl.rlim_cur;
}

int mb_fd_table_reserve(unsigned long n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && n > rl.rlim_cur)
        n = (unsigned long)rl.rlim_cur;
    if (n < 2 || n > INT_MAX)
        return n < 2 ? 0 : MB_EINVAL;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return MB_ESYS;
    /* The lowest free descriptor at n - 1 or above: never one in use. */
    int high = fcntl(fd, F_DUPFD_CLOEXEC, (int)(n - 1));
    int e = errno;
    close(fd);
    if (high < 0) {
        mb_log(MB_LOG_DEBUG, "failed to grow the descriptor table to %lu: %s", n, strerror(e));
        return MB_ESYS;
    }
    close(high);
    return 0;
}

const char *mb_default_runtime_dir(void)
{
    const char *d = getenv("MOONBRIGHT_RUNTIME_DIR");
    return d && *d ? d : "/run/moonbright";
}
