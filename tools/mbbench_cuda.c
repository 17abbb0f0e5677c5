/* mbbench_cuda.c: the CUDA driver baselines (cuMemAlloc, cuMemAllocAsync on
 * the device's default pool) loaded with dlopen, so mbbench needs no CUDA at
 * build or run time and reports why the rows are missing instead. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "mbbench.h"

/* Look a driver entry point up; record the first one missing. */
static void *sym(void *lib, const char *name, const char **missing)
{
    void *p = dlsym(lib, name);
    if (!p && !*missing)
        *missing = name;
    return p;
}

int bench_cuda_open(int device, struct bench_cuda **out, char *why, size_t why_len)
{
    *out = NULL;
    struct bench_cuda *cu = calloc(1, sizeof(*cu));
    if (!cu) {
        snprintf(why, why_len, "out of memory");
        return MB_ENOMEM;
    }
    cu->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu->lib) {
        snprintf(why, why_len, "no CUDA driver (libcuda.so.1 cannot be loaded)");
        free(cu);
        return MB_EDEVICE;
    }
    const char *missing = NULL;
    int (*cuInit)(unsigned);
    int (*cuDeviceGet)(int *, int);
    int (*cuDevicePrimaryCtxRetain)(void **, int);
    int (*cuCtxSetCurrent)(void *);
    int (*cuDeviceGetDefaultMemPool)(void **, int);
    *(void **)&cuInit = sym(cu->lib, "cuInit", &missing);
    *(void **)&cuDeviceGet = sym(cu->lib, "cuDeviceGet", &missing);
    *(void **)&cuDevicePrimaryCtxRetain = sym(cu->lib, "cuDevicePrimaryCtxRetain", &missing);
    *(void **)&cuCtxSetCurrent = sym(cu->lib, "cuCtxSetCurrent", &missing);
    *(void **)&cuDeviceGetDefaultMemPool = sym(cu->lib, "cuDeviceGetDefaultMemPool", &missing);
    *(void **)&cu->cuMemAlloc = sym(cu->lib, "cuMemAlloc_v2", &missing);
    *(void **)&cu->cuMemFree = sym(cu->lib, "cuMemFree_v2", &missing);
    *(void **)&cu->cuMemAllocAsync = sym(cu->lib, "cuMemAllocAsync", &missing);
    *(void **)&cu->cuMemFreeAsync = sym(cu->lib, "cuMemFreeAsync", &missing);
    *(void **)&cu->cuStreamSynchronize = sym(cu->lib, "cuStreamSynchronize", &missing);
    *(void **)&cu->cuMemPoolGetAttribute = sym(cu->lib, "cuMemPoolGetAttribute", &missing);
    *(void **)&cu->cuMemPoolSetAttribute = sym(cu->lib, "cuMemPoolSetAttribute", &missing);
    *(void **)&cu->cuMemPoolTrimTo = sym(cu->lib, "cuMemPoolTrimTo", &missing);
    *(void **)&cu->cuDevicePrimaryCtxRelease = sym(cu->lib, "cuDevicePrimaryCtxRelease_v2", &missing);
    int r = 0;
    if (missing) {
        snprintf(why, why_len, "libcuda.so.1 lacks %s", missing);
        r = -1;
    } else if ((r = cuInit(0)) != 0) {
        snprintf(why, why_len, "cuInit failed (CUresult %d): no usable GPU", r);
    } else if ((r = cuDeviceGet(&cu->dev, device)) != 0) {
        snprintf(why, why_len, "no CUDA device %d (CUresult %d)", device, r);
    } else if ((r = cuDevicePrimaryCtxRetain(&cu->ctx, cu->dev)) != 0) {
        snprintf(why, why_len, "cuDevicePrimaryCtxRetain failed (CUresult %d)", r);
    } else if ((r = cuCtxSetCurrent(cu->ctx)) != 0 ||
               (r = cuDeviceGetDefaultMemPool(&cu->pool, cu->dev)) != 0) {
        snprintf(why, why_len, "no default memory pool (CUresult %d)", r);
        cu->cuDevicePrimaryCtxRelease(cu->dev);
    } else {
        /* Keep everything freed in the pool: the fastest cudaMallocAsync setting. */
        uint64_t max = UINT64_MAX;
        r = cu->cuMemPoolSetAttribute(cu->pool, BENCH_POOL_RELEASE_THRESHOLD, &max);
        if (r != 0) {
            snprintf(why, why_len, "cuMemPoolSetAttribute(release threshold) failed (CUresult %d)", r);
            cu->cuDevicePrimaryCtxRelease(cu->dev);
        }
    }
    if (r != 0) {
        dlclose(cu->lib);
        free(cu);
        return MB_EDEVICE;
    }
    *out = cu;
    return 0;
}

void bench_cuda_close(struct bench_cuda *cu)
{
    if (!cu)
        return;
    cu->cuStreamSynchronize(NULL);
    cu->cuMemPoolTrimTo(cu->pool, 0);
    cu->cuDevicePrimaryCtxRelease(cu->dev);
    /* libcuda stays loaded: unloading the driver under a live process is not supported. */
    free(cu);
}

void *bench_cuda_sym(struct bench_cuda *cu, const char *name)
{
    return cu && cu->lib ? dlsym(cu->lib, name) : NULL;
}
