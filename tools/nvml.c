/* nvml.c: the few NVML calls mbctl status needs (init, device by index,
 * running compute processes, shutdown), resolved with dlopen so mbctl has
 * no link-time dependency on the NVIDIA driver. */
#include <dlfcn.h>
#include <string.h>

#include "nvml.h"

/* nvmlProcessInfo_t as _v2 and _v3 of the call fill it. */
struct nvml_info {
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
};

typedef int (*init_fn)(void);
typedef int (*handle_fn)(unsigned int, void **);
typedef int (*procs_fn)(void *, unsigned int *, struct nvml_info *);

int nvml_processes(unsigned index, struct nvml_proc *out, size_t cap)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return -1;
    init_fn init = (init_fn)dlsym(lib, "nvmlInit_v2");
    init_fn shutdown = (init_fn)dlsym(lib, "nvmlShutdown");
    handle_fn handle = (handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    procs_fn procs = (procs_fn)dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!procs)
        procs = (procs_fn)dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    int n = -1;
    void *dev = NULL;
    struct nvml_info info[256];
    unsigned int count = sizeof(info) / sizeof(info[0]);
    if (init && shutdown && handle && procs && init() == 0) {
        if (handle(index, &dev) == 0 && procs(dev, &count, info) == 0) {
            n = 0;
            for (unsigned int i = 0; i < count && (size_t)n < cap; i++) {
                out[n].pid = (pid_t)info[i].pid;
                /* NVML_VALUE_NOT_AVAILABLE (all ones) when the driver cannot tell */
                out[n++].used = info[i].used == ~0ull ? 0 : info[i].used;
            }
        }
        shutdown();
    }
    dlclose(lib);
    return n;
}
