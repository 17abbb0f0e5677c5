/* nvml.h: device memory per process from NVIDIA's management library,
 * loaded at run time (libnvidia-ml.so.1), for mbctl status: memory a
 * process holds beyond what MoonBright granted it (a descriptor kept after
 * a return keeps memory alive outside the daemon's books). */
#ifndef MBCTL_NVML_H
#define MBCTL_NVML_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct nvml_proc {
    pid_t pid;
    uint64_t used;               /* device memory the driver charges to it, bytes */
};

/* Compute processes on device `index` (NVML's numbering), at most cap of
 * them in out[]. Returns how many, or -1 when NVML is absent or fails (no
 * NVIDIA driver, the host backend): callers leave the section out. */
int nvml_processes(unsigned index, struct nvml_proc *out, size_t cap);

#endif
