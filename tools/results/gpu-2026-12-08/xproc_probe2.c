/* xproc_probe2.c: does another process's frame work (what moonbrightd's reserve
 * workers do: cuMemCreate, cuMemExportToShareableHandle, cuMemRelease) stall this
 * process's cuMemMap + cuMemSetAccess and cuMemUnmap?  A child (forked before
 * either initialises CUDA) loops over MODE for SECONDS while the parent maps and
 * unmaps 64 handles of 2 MiB in turn, timing each call; the parent's latencies are
 * printed per mode (idle: the child only sleeps; the others: see child()).
 * xproc_probe.c (s304) with modes 3 and 4 added.
 *   usage: xproc_probe2 SECONDS CHILD_FRAME_MIB    Build: cc -O2 xproc_probe2.c -lcuda */
#include <cuda.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s_; cuGetErrorString(r_, &s_); \
    fprintf(stderr, "%s: %s\n", #x, s_); exit(1); } } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static CUmemAllocationProp prop(CUdevice dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* The child: MODE 0 idle, 1 create + release, 2 create + export + release,
 * 3 the same while it holds one exported handle (the daemon's anchor, which
 * keeps its exports in the driver's fast regime), 4 with the anchor, export
 * again (and close) 64 handles it holds, in turn (the daemon's re-exports). */
#define MODES 5
static void child(int mode, double secs, size_t bytes, int go_fd, int ready_fd)
{
    CUdevice dev; CUcontext ctx;
    char g;
    if (read(go_fd, &g, 1) != 1) exit(0);   /* the parent's turn for this mode */
    CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    CUmemAllocationProp p = prop(dev);
    CUmemGenericAllocationHandle anchor, held[64];
    int anchor_fd = -1;
    if (mode >= 3) {
        CK(cuMemCreate(&anchor, 2 << 20, &p, 0));
        CK(cuMemExportToShareableHandle(&anchor_fd, anchor, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    }
    for (int i = 0; mode == 4 && i < 64; i++)
        CK(cuMemCreate(&held[i], bytes, &p, 0));
    char c = 1;
    if (write(ready_fd, &c, 1) != 1) exit(1);
    double end = now() + secs, busy = 0;
    long n = 0;
    while (now() < end) {
        if (mode == 0) { usleep(1000); continue; }
        double t = now();
        if (mode == 4) {
            int fd;
            CK(cuMemExportToShareableHandle(&fd, held[n % 64], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            close(fd);
            busy += now() - t;
            n++;
            continue;
        }
        CUmemGenericAllocationHandle h;
        CK(cuMemCreate(&h, bytes, &p, 0));
        if (mode >= 2) {
            int fd;
            CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            close(fd);
        }
        CK(cuMemRelease(h));
        busy += now() - t;
        n++;
    }
    if (n)
        fprintf(stderr, "  child: %ld frames of %zu MiB, %.1f us each\n", n, bytes >> 20, busy / n * 1e6);
    exit(0);
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 2;
    size_t cbytes = (size_t)(argc > 2 ? atoi(argv[2]) : 2) << 20;
    const char *name[MODES] = { "idle", "create+release", "create+export+release",
                                "anchor, create+export+rel", "anchor, export again" };
    printf("parent: 64 handles of 2 MiB mapped and unmapped in turn for %.0f s; child frames of %zu MiB (us)\n",
           secs, cbytes >> 20);
    printf("%-24s %8s %8s %8s %8s %8s | %8s %8s %8s\n", "child", "maps", "map p50", "p99", "p99.9", "max",
           "unm p50", "p99", "max");
    fflush(stdout);   /* (else each child prints the header again at exit) */
    /* Every child is forked before this process initialises CUDA. */
    int go[MODES][2], rd[MODES][2];
    pid_t pids[MODES];
    for (int mode = 0; mode < MODES; mode++) {
        if (pipe(go[mode]) || pipe(rd[mode])) return 1;
        pids[mode] = fork();
        if (pids[mode] == 0) {
            close(go[mode][1]); close(rd[mode][0]);
            child(mode, secs + 0.5, cbytes, go[mode][0], rd[mode][1]);
        }
        close(go[mode][0]); close(rd[mode][1]);
    }
    for (int mode = 0; mode < MODES; mode++) {
        pid_t pid = pids[mode];
        char c = 1;
        if (write(go[mode][1], &c, 1) != 1 || read(rd[mode][0], &c, 1) != 1) { fprintf(stderr, "child failed\n"); return 1; }
        static int inited;
        static CUdevice dev; static CUcontext ctx;
        static CUmemGenericAllocationHandle h[64];
        static CUdeviceptr va;
        if (!inited) {
            CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
            CUmemAllocationProp p = prop(dev);
            for (int i = 0; i < 64; i++) CK(cuMemCreate(&h[i], 2 << 20, &p, 0));
            CK(cuMemAddressReserve(&va, 64ull << 21, 0, 0, 0));
            inited = 1;
        }
        CUmemAccessDesc a;
        memset(&a, 0, sizeof(a));
        a.location.type = CU_MEM_LOCATION_TYPE_DEVICE; a.location.id = dev;
        a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        size_t cap = 1 << 20, n = 0;
        double *mt = malloc(cap * sizeof(double)), *ut = malloc(cap * sizeof(double));
        double end = now() + secs;
        while (now() < end && n < cap) {
            int i = (int)(n % 64);
            CUdeviceptr at = va + ((CUdeviceptr)i << 21);
            double t0 = now();
            CK(cuMemMap(at, 2 << 20, 0, h[i], 0));
            CK(cuMemSetAccess(at, 2 << 20, &a, 1));
            double t1 = now();
            CK(cuMemUnmap(at, 2 << 20));
            ut[n] = (now() - t1) * 1e6;
            mt[n++] = (t1 - t0) * 1e6;
        }
        int st;
        waitpid(pid, &st, 0);
        qsort(mt, n, sizeof(double), cmpd); qsort(ut, n, sizeof(double), cmpd);
        printf("%-24s %8zu %8.1f %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f\n", name[mode], n, mt[n / 2],
               mt[n * 99 / 100], mt[n * 999 / 1000], mt[n - 1], ut[n / 2], ut[n * 99 / 100], ut[n - 1]);
        fflush(stdout);
        free(mt); free(ut);
    }
    return 0;
}
