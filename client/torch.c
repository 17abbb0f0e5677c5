/* torch.c: drop-in hooks for frameworks: the pair of C symbols PyTorch's
 * CUDAPluggableAllocator loads (also usable from CuPy through ctypes). One
 * client per process, opened on first use with $MOONBRIGHT_TENANT. */
#include <pthread.h>
#include <stdlib.h>

#include <moonbright/mbclient.h>

#include "client.h"
#include "log.h"
#include "refill.h"

static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static mb_client *hook_client;
static int hook_error;

/* The hook's client is never closed: the framework may free into it until
 * the very end. But the CUDA runtime destroys the device's context at exit
 * (its handler was registered before this one, so it runs after), and the
 * client's background threads must not call the driver after that: they
 * stop here. Requests still work, with no background step; the daemon
 * takes the frames back when the process is gone. */
static void hook_at_exit(void)
{
    mb_client *c = __atomic_load_n(&hook_client, __ATOMIC_ACQUIRE);
    if (c) {
        maint_stop(c);
        refill_stop(c);
    }
}

static mb_client *hook(void)
{
    mb_client *c = __atomic_load_n(&hook_client, __ATOMIC_ACQUIRE);
    if (c)
        return c;
    pthread_mutex_lock(&hook_lock);
    if (!hook_client && !hook_error) {
        const char *t = getenv("MOONBRIGHT_TENANT");
        hook_error = mb_open(&c, t && *t ? t : "torch");
        if (hook_error)
            mb_log(MB_LOG_ERR, "failed to connect the framework allocator to moonbrightd: %s",
                   mb_strerror(hook_error));
        else {
            __atomic_store_n(&hook_client, c, __ATOMIC_RELEASE);
            if (atexit(hook_at_exit) != 0)
                mb_log(MB_LOG_WARN, "failed to register the framework allocator's exit handler");
        }
    }
    pthread_mutex_unlock(&hook_lock);
    return hook_client;
}

/* The device must be the one the client's daemon serves ($MOONBRIGHT_DEVICE):
 * the pluggable allocator is per process and one daemon serves one GPU, so a
 * request for another device is refused (NULL: the framework reports out of
 * memory) rather than served with the wrong device's memory. */
void *mb_torch_malloc(ssize_t size, int device, void *stream)
{
    mb_client *c = size > 0 ? hook() : NULL;
    void *p = NULL;
    if (c && device != c->device) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            mb_log(MB_LOG_ERR, "refused an allocation on device %d: this process's moonbrightd "
                   "serves device %d ($MOONBRIGHT_DEVICE)", device, c->device);
        return NULL;
    }
    if (c && mb_malloc_async(c, (size_t)size, stream, &p) != 0)
        p = NULL;
    return p;
}

void mb_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    mb_client *c = __atomic_load_n(&hook_client, __ATOMIC_ACQUIRE);
    if (c && ptr) {
        int rc = mb_free_async(c, ptr, stream);
        if (rc)
            mb_log(MB_LOG_ERR, "failed to free %p from the framework: %s", ptr, mb_strerror(rc));
    }
}
