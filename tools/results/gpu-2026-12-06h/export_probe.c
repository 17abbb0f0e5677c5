/* export_probe.c: what cuMemCreate and cuMemExportToShareableHandle (POSIX
 * fd) cost on this GPU, per frame size: the first export of a handle and a
 * second one after its fd was closed (as the daemon's re-exports are),
 * cuMemImportFromShareableHandle of the fd in the same process, and
 * cuMemMap, cuMemSetAccess and cuMemUnmap of one handle; medians of N
 * handles. With an argument T, then: T threads each creating and
 * exporting 32 frames of 2 MiB at once, the wall time per frame over all
 * of them, for 1..T threads (the daemon's reserve has two workers). A
 * measurement for the host backend's emulated costs (common/host_costs.c);
 * not part of the build.
 *   gcc -O2 export_probe.c -I$CUDA/include -lcuda -lpthread -o export_probe */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define N 48
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    const char *s_; cuGetErrorString(r_, &s_); fprintf(stderr, "%s: %s\n", #x, s_); exit(1); } } while (0)

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double med(double *v)
{
    qsort(v, N, sizeof(v[0]), cmp);
    return v[N / 2];
}

#define PER_THREAD 32
static CUcontext g_ctx;
static CUmemAllocationProp g_prop;
static pthread_barrier_t g_start;

static void *exporter(void *arg)
{
    CUmemGenericAllocationHandle *h = arg;
    CK(cuCtxSetCurrent(g_ctx));
    pthread_barrier_wait(&g_start);
    for (int i = 0; i < PER_THREAD; i++) {
        int fd;
        CK(cuMemCreate(&h[i], 2u << 20, &g_prop, 0));
        CK(cuMemExportToShareableHandle(&fd, h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        close(fd);
    }
    return NULL;
}

/* T threads creating and exporting at once: wall time per frame. */
static double threaded(int t)
{
    pthread_t th[16];
    static CUmemGenericAllocationHandle h[16][PER_THREAD];
    pthread_barrier_init(&g_start, NULL, (unsigned)t + 1);
    for (int i = 0; i < t; i++)
        pthread_create(&th[i], NULL, exporter, h[i]);
    pthread_barrier_wait(&g_start);
    double t0 = now_us();
    for (int i = 0; i < t; i++)
        pthread_join(th[i], NULL);
    double us = (now_us() - t0) / (t * PER_THREAD);
    pthread_barrier_destroy(&g_start);
    for (int i = 0; i < t; i++)
        for (int j = 0; j < PER_THREAD; j++)
            CK(cuMemRelease(h[i][j]));
    return us;
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUmemAllocationProp prop = { 0 };
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t sizes[] = { 2u << 20, 8u << 20, 32u << 20, 128u << 20 };
    printf("size MiB | create us | first export us | second export us | import us | map us | access us | unmap us (medians of %d)\n", N);
    for (int s = 0; s < 4; s++) {
        CUmemGenericAllocationHandle h[N], g;
        double cr[N], e1[N], e2[N], im[N], mp[N], ac[N], um[N];
        CUdeviceptr va;
        CK(cuMemAddressReserve(&va, sizes[s], 0, 0, 0));
        CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        for (int i = 0; i < N; i++) {
            double t0 = now_us();
            CK(cuMemCreate(&h[i], sizes[s], &prop, 0));
            double t1 = now_us();
            int fd;
            CK(cuMemExportToShareableHandle(&fd, h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            double t2 = now_us();
            close(fd);
            double t3 = now_us();
            CK(cuMemExportToShareableHandle(&fd, h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            double t4 = now_us();
            CK(cuMemImportFromShareableHandle(&g, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
            double t5 = now_us();
            CK(cuMemRelease(g));
            close(fd);
            double t5b = now_us();
            CK(cuMemMap(va, sizes[s], 0, h[i], 0));
            double t6 = now_us();
            CK(cuMemSetAccess(va, sizes[s], &acc, 1));
            double t7 = now_us();
            CK(cuMemUnmap(va, sizes[s]));
            double t8 = now_us();
            cr[i] = t1 - t0, e1[i] = t2 - t1, e2[i] = t4 - t3, im[i] = t5 - t4;
            mp[i] = t6 - t5b, ac[i] = t7 - t6, um[i] = t8 - t7;
        }
        for (int i = 0; i < N; i++)
            CK(cuMemRelease(h[i]));
        CK(cuMemAddressFree(va, sizes[s]));
        printf("%zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f\n", sizes[s] >> 20, med(cr), med(e1),
               med(e2), med(im), med(mp), med(ac), med(um));
    }
    int tmax = argc > 1 ? atoi(argv[1]) : 0;
    if (tmax > 16)
        tmax = 16;
    g_ctx = ctx;
    g_prop = prop;
    for (int t = 1; t <= tmax; t++)
        printf("%d threads creating and exporting 2 MiB frames at once: %.1f us a frame (wall)\n", t,
               threaded(t));
    return 0;
}
