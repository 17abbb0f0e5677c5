/* torch.c: drop-in hooks for frameworks: the pair of C symbols PyTorch's
 * CUDAPluggableAllocator loads (also usable from CuPy through ctypes). One
 * client per device the process allocates on, opened on first use with
 * $MOONBRIGHT_TENANT, from the daemon that serves that GPU. */
#include <pthread.h>
#include <stdlib.h>

#include <moonbright/mbclient.h>

#include "client.h"
#include "log.h"
#include "refill.h"

static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
/* One client per device the framework allocates on (its ordinal in this
 * process), opened on first use; a device no daemon serves is tried once. */
static mb_client *hook_clients[MB_DEVICE_MAX + 1];
static bool hook_failed[MB_DEVICE_MAX + 1];
static bool hook_exit_registered;

/* The hook's clients are never closed: the framework may free into them
 * until the very end. But the CUDA runtime destroys the devices' contexts
 * at exit (its handler was registered before this one, so it runs after),
 * and the clients' background threads must not call the driver after
 * that: they stop here. Requests still work, with no background step; the
 * daemons take the frames back when the process is gone. */
static void hook_at_exit(void)
{
    for (int d = 0; d <= MB_DEVICE_MAX; d++) {
        mb_client *c = __atomic_load_n(&hook_clients[d], __ATOMIC_ACQUIRE);
        if (c) {
            maint_stop(c);
            refill_stop(c);
        }
    }
}

/* The client of this process's device `device`: the daemon that serves
 * that GPU (mb_open_device), whatever its index. */
static mb_client *hook(int device)
{
    if (device < 0 || device > MB_DEVICE_MAX)
        return NULL;
    mb_client *c = __atomic_load_n(&hook_clients[device], __ATOMIC_ACQUIRE);
    if (c)
        return c;
    pthread_mutex_lock(&hook_lock);
    if (!hook_clients[device] && !hook_failed[device]) {
        const char *t = getenv("MOONBRIGHT_TENANT");
        int rc = mb_open_device(&c, t && *t ? t : "torch", device);
        if (rc) {
            hook_failed[device] = true;
            mb_log(MB_LOG_ERR, "failed to connect the framework allocator of device %d to "
                   "moonbrightd: %s", device, mb_strerror(rc));
        } else {
            __atomic_store_n(&hook_clients[device], c, __ATOMIC_RELEASE);
            if (!hook_exit_registered) {
                hook_exit_registered = true;
                if (atexit(hook_at_exit) != 0)
                    mb_log(MB_LOG_WARN, "failed to register the framework allocator's exit handler");
            }
        }
    }
    c = hook_clients[device];
    pthread_mutex_unlock(&hook_lock);
    return c;
}

/* A request for a device no daemon serves gets NULL: the framework reports
 * out of memory (the reason was logged once, when the hook looked for
 * that device's daemon). */
void *mb_torch_malloc(ssize_t size, int device, void *stream)
{
    mb_client *c = size > 0 ? hook(device) : NULL;
    void *p = NULL;
    if (c && mb_malloc_async(c, (size_t)size, stream, &p) != 0)
        p = NULL;
    return p;
}

void mb_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;
    mb_client *c = device >= 0 && device <= MB_DEVICE_MAX
                       ? __atomic_load_n(&hook_clients[device], __ATOMIC_ACQUIRE)
                       : NULL;
    if (!ptr)
        return;
    int rc = c ? mb_free_async(c, ptr, stream) : MB_ENOENT;
    if (rc)
        mb_log(MB_LOG_ERR, "failed to free %p of device %d from the framework: %s", ptr, device,
               mb_strerror(rc));
}
