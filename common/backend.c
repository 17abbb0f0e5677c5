/* backend.c: choosing a backend ("auto", "cuda", "host") for a device and
 * closing it; the implementations live in backend_host.c and backend_cuda.c. */
#include "backend.h"

#include <stdio.h>
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

int mb_backend_cuda_find(const uint8_t uuid[MB_UUID_BYTES], int *ordinal)
{
    (void)uuid;
    (void)ordinal;
    return MB_EDEVICE;
}
#endif

/* The host backend's device identities: a fixed prefix and the ordinal
 * (every process numbers host devices alike). */
static const char host_uuid_prefix[MB_UUID_BYTES - 1] = "moonbright-host";

void mb_backend_host_uuid(int device, uint8_t uuid[MB_UUID_BYTES])
{
    memcpy(uuid, host_uuid_prefix, sizeof(host_uuid_prefix));
    uuid[MB_UUID_BYTES - 1] = (uint8_t)device;
}

static bool host_uuid(const uint8_t uuid[MB_UUID_BYTES])
{
    return memcmp(uuid, host_uuid_prefix, sizeof(host_uuid_prefix)) == 0;
}

int mb_backend_find(const char *kind, const uint8_t uuid[MB_UUID_BYTES], int *ordinal)
{
    if (kind && strcmp(kind, "host") == 0) {
        if (!host_uuid(uuid))
            return MB_ENOENT;
        *ordinal = uuid[MB_UUID_BYTES - 1];
        return 0;
    }
    if (kind && strcmp(kind, "cuda") == 0)
        return mb_backend_cuda_find(uuid, ordinal);
    return MB_EINVAL;
}

void mb_uuid_str(const uint8_t u[MB_UUID_BYTES], char out[MB_UUID_STR])
{
    if (host_uuid(u)) {
        snprintf(out, MB_UUID_STR, "host device %u", u[MB_UUID_BYTES - 1]);
        return;
    }
    snprintf(out, MB_UUID_STR,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

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
