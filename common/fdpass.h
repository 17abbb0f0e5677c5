/* fdpass.h: the handle channel, an AF_UNIX SOCK_SEQPACKET socket between the
 * daemon and each client process. It carries what ZeroMQ cannot: file
 * descriptors (SCM_RIGHTS) and the peer's credentials (SO_PEERCRED). Its end
 * of file is how the daemon learns that a client died, even by SIGKILL. */
#ifndef MB_FDPASS_H
#define MB_FDPASS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define MB_CHAN_MAX_FDS 64
#define MB_TOKEN_BYTES 16

enum mb_chan_type {
    MB_CHAN_WELCOME = 1,   /* daemon -> client: session id and token */
    MB_CHAN_FRAMES = 2,    /* daemon -> client: frame ids, one fd each */
};

struct mb_chan_msg {
    uint32_t type;                     /* enum mb_chan_type */
    uint32_t count;                    /* ids[] used == fds attached */
    uint64_t session_id;
    uint8_t token[MB_TOKEN_BYTES];
    uint32_t ids[MB_CHAN_MAX_FDS];
};

/* Send m with m->count descriptors from fds. Non-blocking sockets return
 * MB_EBUSY when the peer's buffer is full. */
int mb_chan_send(int sock, const struct mb_chan_msg *m, const int *fds);
/* Receive one message, waiting at most timeout_ms (-1: forever). fds must
 * hold MB_CHAN_MAX_FDS; on return m->count of them are open and owned by the
 * caller (0 unless m->type is MB_CHAN_FRAMES). End of file and timeout
 * return MB_EUNAVAIL; a malformed message (ids and descriptors that do not
 * pair up, ids in another type, a truncated message or too many
 * descriptors) returns MB_EPROTO with every received descriptor closed. */
int mb_chan_recv(int sock, struct mb_chan_msg *m, int *fds, int timeout_ms);

/* A client's side of opening a session: connect to DIR/gpuN.fds and read
 * the daemon's welcome (session id and token) within timeout_ms. *fd is the
 * connected channel (or -1); MB_EUNAVAIL when no daemon listens there,
 * MB_EPROTO when the first message is not a welcome. */
int mb_chan_open(const char *dir, int device, int timeout_ms, int *fd, struct mb_chan_msg *welcome);

/* The peer's credentials. */
int mb_chan_peer(int sock, pid_t *pid, uid_t *uid, gid_t *gid);

/* Paths of a device's sockets inside a runtime directory. */
int mb_ctl_endpoint(char *buf, size_t len, const char *dir, int device);  /* "ipc://DIR/gpuN.ctl" */
int mb_chan_path(char *buf, size_t len, const char *dir, int device);     /* "DIR/gpuN.fds" */
/* The device indexes whose handle sockets (gpuN.fds) are in dir, ascending,
 * into out[0..MB_DEVICE_MAX] (backend.h): one daemon each, running or not. */
int mb_runtime_devices(const char *dir, int *out);
/* Fill an AF_UNIX address with path; MB_EINVAL when it does not fit. */
struct sockaddr_un;
int mb_chan_sockaddr(struct sockaddr_un *sa, const char *path);
/* Every frame is a descriptor: raise RLIMIT_NOFILE's soft limit to the hard
 * one and, with raise_hard (and the privilege to), both to fs.nr_open.
 * Returns the soft limit now in force. */
unsigned long mb_raise_fd_limit(bool raise_hard);
/* Grow this process's descriptor table to hold n descriptors (at most the
 * soft limit) now. In a process with threads, each growth of the table
 * waits for an RCU grace period (milliseconds, tens on a busy host) inside
 * whichever call made the descriptor: an export, a received grant. The
 * table never shrinks, so one early growth spares those calls. No open
 * descriptor is touched. Returns 0 or MB_ESYS. */
int mb_fd_table_reserve(unsigned long n);
/* $MOONBRIGHT_RUNTIME_DIR, else /run/moonbright. */
const char *mb_default_runtime_dir(void);

#endif
