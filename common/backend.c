/* backend.c: choosing a backend ("auto", "cuda", "host") for a device and
 * closing it; the implementations live in backend_host.c and backend_cuda.c. */
#include "backend.h"

#include <string.h>

#include <moonbright/status.h>

#include "faults.h"
#include "log.h"

#ifndef MB_WITH_CUDA
int mb_backend_cuda_open(int device, mb_backend **out)
{
    (void)device;
    (void)out;
    mb_log(MB_LOG_INFO, "cuda backend not built in (no CUDA toolkit at build time)");
    return MB_EDEVICE;
}
#endif

static int open_kind(const char *kind, int device, mb_backend **out);

int mb_backend_open(const char *kind, int device, mb_backend **out)
{
    int rc = open_kind(kind, device, out);
    if (rc == 0)
        mb_faults_wrap_backend(*out);
    return rc;
}

static int open_kind(const char *kind, int device, mb_backend **out)
{
    if (!kind || strcmp(kind, "auto") == 0) {
        int rc = mb_backend_cuda_open(device, out);
        if (rc == 0) {
            mb_log(MB_LOG_INFO, "backend auto: using cuda on device %d", device);
            return 0;
        }
        mb_log(MB_LOG_INFO, "backend auto: no usable GPU for device %d (%s); using host memory",
               device, mb_strerror(rc));
        return mb_backend_host_open(device, out);
    }
    if (strcmp(kind, "cuda") == 0)
        return mb_backend_cuda_open(device, out);
    if (strcmp(kind, "host") == 0)
        return mb_backend_host_open(device, out);
    mb_log(MB_LOG_ERR, "unknown backend '%s' (expected auto, cuda or host)", kind);
    return MB_EINVAL;
}

void mb_backend_close(mb_backend *b)
{
    if (b)
        b->ops->close(b);
}
