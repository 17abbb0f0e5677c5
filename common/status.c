/* status.c: the text of every mb_status code, shared by library, daemon and
 * tools (the same numbers travel in replies). */
#include <moonbright/mbclient.h>

const char *mb_strerror(int err)
{
    switch (err) {
    case MB_OK: return "success";
    case MB_EINVAL: return "invalid argument";
    case MB_ENOMEM: return "out of memory: the daemon's budget or the device is exhausted";
    case MB_EQUOTA: return "tenant quota exceeded";
    case MB_EUNAVAIL: return "daemon unavailable";
    case MB_EPROTO: return "protocol error";
    case MB_EPERM: return "not permitted";
    case MB_ENOENT: return "no such pointer, frame, session or token";
    case MB_EBACKEND: return "device driver call failed";
    case MB_ESYS: return "system call failed";
    case MB_EBUSY: return "busy or draining";
    case MB_EDEVICE: return "device lost or unusable";
    case MB_ELIMIT: return "resource limit reached";
    default: return "unknown error";
    }
}
