/* moonbright/status.h: the status codes every MoonBright call returns and
 * every reply carries, and their text. One table makes both the enum and
 * mb_strerror(), so a code cannot lack its text. Used by the library, the
 * daemon, the tools and the kernels alike. */
#ifndef MOONBRIGHT_STATUS_H
#define MOONBRIGHT_STATUS_H

#include <moonbright/api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, text): 0 is success, failures are negative. The numbers
 * travel in the protocol's replies: never renumber. */
#define MB_STATUS_TABLE(X)                                                                         \
    X(MB_OK,       0,   "success")                                                                 \
    X(MB_EINVAL,  -1,   "invalid argument")                                                        \
    X(MB_ENOMEM,  -2,   "out of memory: the daemon's budget or the device is exhausted")           \
    X(MB_EQUOTA,  -3,   "tenant quota exceeded")                                                   \
    X(MB_EUNAVAIL, -4,  "daemon unavailable")                                                      \
    X(MB_EPROTO,  -5,   "protocol error")                                                          \
    X(MB_EPERM,   -6,   "not permitted")                                                           \
    X(MB_ENOENT,  -7,   "not found")                                                               \
    X(MB_EBACKEND, -8,  "device driver call failed")                                               \
    X(MB_ESYS,    -9,   "system call failed")                                                      \
    X(MB_EBUSY,   -10,  "busy or draining")                                                        \
    X(MB_EDEVICE, -11,  "device lost or unusable")                                                 \
    X(MB_ELIMIT,  -12,  "resource limit reached")

/* MB_ENOMEM   the daemon's budget (or the device) is exhausted
 * MB_EQUOTA   the tenant's quota would be exceeded
 * MB_EUNAVAIL the daemon is not reachable or did not answer
 * MB_EPROTO   malformed or unexpected message, or another protocol version
 * MB_EPERM    not permitted for this session or user
 * MB_ENOENT   no such pointer, frame, session, tenant or token
 * MB_EBACKEND the CUDA driver (or host backend) failed
 * MB_ESYS     an operating-system call failed (see errno in the log)
 * MB_EBUSY    already running, or draining
 * MB_EDEVICE  the device is lost or unusable
 * MB_ELIMIT   a hard limit (file descriptors, mappings) was reached */
enum mb_status {
#define MB_STATUS_ENUM_(name, value, text) name = value,
    MB_STATUS_TABLE(MB_STATUS_ENUM_)
#undef MB_STATUS_ENUM_
};
#define MB_STATUS_MIN (-12)

/* Text for a status code; never NULL ("unknown error" for other numbers). */
MB_API const char *mb_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
