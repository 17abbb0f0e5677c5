/* torch.c: drop-in hooks for frameworks: the pair of C symbols PyTorch's
 * CUDAPluggableAllocator loads (also usable from CuPy through ctypes), and
 * empty_cache. One client per device the process allocates on, opened on
 * first use with $MOONBRIGHT_TENANT, from the daemon that serves that GPU.
 * CUDA graphs are torch_graph.c's, tensor.record_stream torch_streams.c's
 * (torch_int.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "client.h"
#include "log.h"
#include "refill.h"
#include "torch_int.h"

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
mb_client *torch_client(int device)
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

mb_client *torch_client_open(int device)
{
    return device >= 0 && device <= MB_DEVICE_MAX
               ? __atomic_load_n(&hook_clients[device], __ATOMIC_ACQUIRE)
               : NULL;
}

void *mb_torch_malloc(ssize_t size, int device, void *stream)
{
    mb_client *c = size > 0 ? torch_client(device) : NULL;
    void *p = NULL;
    if (!c)
        return NULL;   /* (a device no daemon serves: logged once by torch_client) */
    if (streams_deferred())
        streams_poll(false);
    if (graph_capturing(c, stream))
        return graph_alloc(c, device, (size_t)size);
    int rc = mb_malloc_async(c, (size_t)size, stream, &p);
    if (rc == MB_ENOMEM && streams_deferred()) {
        streams_poll(true);   /* blocks whose recorded streams finished meanwhile */
        rc = mb_malloc_async(c, (size_t)size, stream, &p);
    }
    return rc == 0 ? p : NULL;
}

void mb_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;
    mb_client *c = torch_client_open(device);
    if (!ptr)
        return;
    if (c && graph_free(ptr, device, graph_capturing(c, stream)))
        return;   /* a graph's until its pool is released */
    if (c && streams_deferred())
        streams_poll(false);
    if (c && streams_free(c, ptr, stream))
        return;   /* given back once its recorded streams' work is done */
    int rc = c ? mb_free_async(c, ptr, stream) : MB_ENOENT;
    if (rc)
        mb_log(MB_LOG_ERR, "failed to free %p of device %d from the framework: %s", ptr, device,
               mb_strerror(rc));
}

/* torch.cuda.empty_cache (set_reset_fn): every device's idle memory goes
 * back to its daemon (mb_trim), the deferred frees that are done first;
 * not while a graph captures there (a trim synchronises the device). */
void mb_torch_empty_cache(void)
{
    if (streams_deferred())
        streams_poll(true);
    for (int d = 0; d <= MB_DEVICE_MAX; d++) {
        mb_client *c = torch_client_open(d);
        if (!c || __atomic_load_n(&c->captures, __ATOMIC_ACQUIRE))
            continue;
        int rc = mb_trim(c, 0);
        if (rc)
            mb_log(MB_LOG_WARN, "empty_cache: failed to give device %d's idle memory back: %s", d,
                   mb_strerror(rc));
    }
}
