/* torch_passthrough.c: a pass-through allocator for PyTorch's
 * CUDAPluggableAllocator that serves every call with the driver's
 * stream-ordered allocator (cuMemAllocAsync, cuMemFreeAsync on the
 * caller's stream, from the device's default pool with no release
 * threshold, as PyTorch's own backend:cudaMallocAsync sets it).
 *
 * bench_torch.py's torch-pluggable-cudaMallocAsync runs it beside PyTorch's
 * built-in backend:cudaMallocAsync: the same allocator behind the two
 * interfaces, so the difference between them is what the pluggable
 * interface itself costs a workload, apart from what libmbclient does
 * behind it. PyTorch calls it from threads with no current context (the
 * autograd engine's): each call makes the device's primary context
 * current where none is. libcuda is opened at run time (the one the process already
 * has), so this builds on machines without CUDA. Not for production use:
 * a failed call returns NULL (PyTorch raises out of memory) and a failed
 * free is dropped. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int (*alloc_async_fn)(unsigned long long *, size_t, void *);
typedef int (*free_async_fn)(unsigned long long, void *);
typedef int (*device_get_fn)(int *, int);
typedef int (*default_pool_fn)(void **, int);
typedef int (*pool_set_fn)(void *, int, void *);
typedef int (*ctx_get_fn)(void **);
typedef int (*ctx_set_fn)(void *);
typedef int (*primary_retain_fn)(void **, int);

#define POOL_ATTR_RELEASE_THRESHOLD 4   /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD */
#define MAX_DEVICES 64

static alloc_async_fn alloc_async;
static free_async_fn free_async;
static device_get_fn device_get;
static ctx_get_fn ctx_get;
static ctx_set_fn ctx_set;
static primary_retain_fn primary_retain;
static default_pool_fn default_pool;
static pool_set_fn pool_attr_set;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char pool_set[MAX_DEVICES];
static void *primary[MAX_DEVICES];   /* retained once each (pool_lock) */

static void load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return;
    device_get = (device_get_fn)dlsym(h, "cuDeviceGet");
    ctx_get = (ctx_get_fn)dlsym(h, "cuCtxGetCurrent");
    ctx_set = (ctx_set_fn)dlsym(h, "cuCtxSetCurrent");
    primary_retain = (primary_retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain");
    default_pool = (default_pool_fn)dlsym(h, "cuDeviceGetDefaultMemPool");
    pool_attr_set = (pool_set_fn)dlsym(h, "cuMemPoolSetAttribute");
    if (!device_get || !ctx_get || !ctx_set || !primary_retain || !default_pool || !pool_attr_set)
        return;
    free_async = (free_async_fn)dlsym(h, "cuMemFreeAsync");
    alloc_async = (alloc_async_fn)dlsym(h, "cuMemAllocAsync");
}

/* A current context on this thread: the device's primary one (PyTorch's),
 * retained once per device, where the thread has none. 0 or -1. */
static int ensure_ctx(int device)
{
    void *cur = NULL;
    if (ctx_get(&cur) == 0 && cur)
        return 0;
    if (device < 0 || device >= MAX_DEVICES)
        return -1;
    pthread_mutex_lock(&pool_lock);
    int dev;
    if (!primary[device] && (device_get(&dev, device) != 0 || primary_retain(&primary[device], dev) != 0))
        primary[device] = NULL;
    void *ctx = primary[device];
    pthread_mutex_unlock(&pool_lock);
    return ctx && ctx_set(ctx) == 0 ? 0 : -1;
}

/* The device's default pool keeps what is freed (as PyTorch's backend does):
 * without it, the pool would give memory back at every synchronisation.
 * device is in range (the caller checks). */
static void keep_freed(int device)
{
    pthread_mutex_lock(&pool_lock);
    int dev;
    void *pool;
    uint64_t keep = UINT64_MAX;
    if (!pool_set[device] && device_get(&dev, device) == 0 && default_pool(&pool, dev) == 0 &&
        pool_attr_set(pool, POOL_ATTR_RELEASE_THRESHOLD, &keep) == 0)
        __atomic_store_n(&pool_set[device], 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool_lock);
}

void *mbpass_malloc(ssize_t size, int device, void *stream)
{
    pthread_once(&once, load);
    if (size <= 0 || !alloc_async || ensure_ctx(device) != 0)
        return NULL;
    if (device >= 0 && device < MAX_DEVICES && !__atomic_load_n(&pool_set[device], __ATOMIC_RELAXED))
        keep_freed(device);
    unsigned long long p = 0;
    if (alloc_async(&p, (size_t)size, stream) != 0)
        return NULL;
    return (void *)(uintptr_t)p;
}

void mbpass_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;
    if (ptr && free_async && ensure_ctx(device) == 0)
        (void)free_async((unsigned long long)(uintptr_t)ptr, stream);
}
