/* map_unmap_probe.c: do cuMemUnmap calls on one thread slow cuMemMap +
 * cuMemSetAccess on another?  Three phases over N handles of SIZE each:
 *   alone:    thread A maps set A (N handles), then unmaps it; timed apart;
 *   serial:   one thread maps set A while unmapping set B, interleaved;
 *   parallel: thread A maps set A while thread B unmaps set B (mapped before).
 * Printed: per-handle map and unmap cost in each, and the parallel wall time
 * against the alone sum. Build: cc -O2 map_unmap_probe.c -lcuda -lpthread */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_; cuGetErrorString(r_, &s_); \
    fprintf(stderr, "%s: %s\n", #x, s_); exit(1); } } while (0)

static size_t N, SIZE;
static CUdevice dev;
static CUcontext ctx;
static CUmemGenericAllocationHandle *ha, *hb;
static CUdeviceptr va, vb;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static void map_set(CUdeviceptr base, CUmemGenericAllocationHandle *h)
{
    CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (size_t i = 0; i < N; i++) {
        CK(cuMemMap(base + i * SIZE, SIZE, 0, h[i], 0));
        CK(cuMemSetAccess(base + i * SIZE, SIZE, &a, 1));
    }
}
static void unmap_set(CUdeviceptr base)
{
    for (size_t i = 0; i < N; i++)
        CK(cuMemUnmap(base + i * SIZE, SIZE));
}

static double t_map_par, t_unmap_par;
static void *thr_map(void *p) { (void)p; CK(cuCtxSetCurrent(ctx)); double t = now(); map_set(va, ha); t_map_par = now() - t; return NULL; }
static void *thr_unmap(void *p) { (void)p; CK(cuCtxSetCurrent(ctx)); double t = now(); unmap_set(vb); t_unmap_par = now() - t; return NULL; }

int main(int argc, char **argv)
{
    N = argc > 1 ? strtoul(argv[1], 0, 0) : 256;
    SIZE = (argc > 2 ? strtoul(argv[2], 0, 0) : 2) << 20;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    CUmemAllocationProp pr = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                              .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    ha = calloc(N, sizeof(*ha)); hb = calloc(N, sizeof(*hb));
    for (size_t i = 0; i < N; i++) { CK(cuMemCreate(&ha[i], SIZE, &pr, 0)); CK(cuMemCreate(&hb[i], SIZE, &pr, 0)); }
    CK(cuMemAddressReserve(&va, N * SIZE, 0, 0, 0)); CK(cuMemAddressReserve(&vb, N * SIZE, 0, 0, 0));
    printf("%zu handles of %zu MiB per set, %d rounds (per handle, us)\n", N, SIZE >> 20, rounds);
    printf("round  alone:map unmap  serial:map+unmap  parallel:map unmap wall  wall/alone-sum\n");
    for (int r = 0; r < rounds; r++) {
        double t0 = now(); map_set(va, ha); double t1 = now(); unmap_set(va); double t2 = now();
        double am = (t1 - t0) / N * 1e6, au = (t2 - t1) / N * 1e6;
        /* serial: interleave map of A and unmap of B on one thread */
        map_set(vb, hb);
        CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                             .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        double s0 = now();
        for (size_t i = 0; i < N; i++) {
            CK(cuMemMap(va + i * SIZE, SIZE, 0, ha[i], 0));
            CK(cuMemSetAccess(va + i * SIZE, SIZE, &a, 1));
            CK(cuMemUnmap(vb + i * SIZE, SIZE));
        }
        double ser = (now() - s0) / N * 1e6;
        unmap_set(va);
        /* parallel */
        map_set(vb, hb);
        pthread_t x, y;
        double p0 = now();
        pthread_create(&x, 0, thr_map, 0); pthread_create(&y, 0, thr_unmap, 0);
        pthread_join(x, 0); pthread_join(y, 0);
        double wall = now() - p0;
        unmap_set(va);
        printf("%5d  %9.1f %5.1f  %16.1f  %12.1f %5.1f %5.1f  %14.2f\n", r, am, au, ser,
               t_map_par / N * 1e6, t_unmap_par / N * 1e6, wall / N * 1e6, wall / N * 1e6 / (am + au));
    }
    return 0;
}
