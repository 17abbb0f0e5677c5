/* backend.h: the one interface every device-memory call sits behind.
 *
 * Two implementations share this contract: "cuda" (the CUDA driver API,
 * loaded at run time; backend_cuda.c is the only file that includes
 * <cuda.h>) and "host" (the same contract on host memory: memfd frames,
 * export = the fd, reserve = an inaccessible anonymous mapping, map =
 * mmap(MAP_FIXED|MAP_SHARED)).
 *
 * Glossary
 *   mem      one physical allocation (a "frame"): created, exported to a
 *            POSIX fd, imported in another process from that fd, released.
 *   reserve  a range of virtual addresses with nothing behind it.
 *   map      put one whole mem at an address inside a reservation; a handle
 *            is mapped whole or not at all (CUDA cannot map part of one).
 *   access   mapped memory is unusable until set_access makes it
 *            read-write for the device (host: for the process).
 *
 * Every call returns 0 or a negative mb_status and logs "failed to ...".
 * Calls may come from any thread. */
#ifndef MB_BACKEND_H
#define MB_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mb_mem {
    uint64_t h;      /* backend handle: host = memfd, cuda = CUmemGenericAllocationHandle */
    int fd;          /* exported POSIX fd owned by this mem, or -1 until exported */
    size_t bytes;    /* size; a multiple of the backend's granularity */
};
#define MB_MEM_INIT { 0, -1, 0 }

typedef struct mb_backend mb_backend;

#define MB_UUID_BYTES 16
#define MB_DEVICE_MAX 255              /* device indexes and ordinals are 0..MB_DEVICE_MAX */
#define MB_UUID_STR 48                 /* "GPU-" and 36 characters, or "host device N" */

struct mb_backend_ops {
    /* Create `bytes` of physical memory, exportable as a POSIX fd. */
    int (*create)(mb_backend *b, size_t bytes, struct mb_mem *out);
    /* Make m->fd valid (idempotent); the fd stays owned by m. */
    int (*export_fd)(mb_backend *b, struct mb_mem *m);
    /* Close m->fd, if any: the handle keeps the memory, and export_fd makes
     * another fd when one is needed again. A process that passes frames on
     * (the daemon) so holds no descriptor for each frame it passed (host:
     * the memfd is the handle and stays; a duplicate made by export_fd is
     * closed). */
    void (*unexport)(mb_backend *b, struct mb_mem *m);
    /* Import a mem from an fd received from another process. Takes ownership
     * of fd whatever the outcome (keeps it as the handle or closes it). */
    int (*import_fd)(mb_backend *b, int fd, size_t bytes, struct mb_mem *out);
    /* Drop this process's reference; the memory lives on while mapped or
     * held elsewhere. Closes m->fd. */
    void (*release)(mb_backend *b, struct mb_mem *m);

    int (*reserve)(mb_backend *b, size_t bytes, void **va);
    void (*free_va)(mb_backend *b, void *va, size_t bytes);
    /* Map the whole of m at va (inside a reservation); no access yet. */
    int (*map)(mb_backend *b, void *va, const struct mb_mem *m);
    /* Give read-write access to [va, va+bytes), all of it mapped. */
    int (*set_access)(mb_backend *b, void *va, size_t bytes);
    /* Unmap [va, va+bytes); the range stays reserved. */
    int (*unmap)(mb_backend *b, void *va, size_t bytes);

    /* Zero the whole of m. Synchronous: the memory reads zero when this
     * returns. May map m internally once (kept until release). */
    int (*scrub)(mb_backend *b, struct mb_mem *m);
    /* Fill mapped memory, ordered on stream (host: at once). */
    int (*memset)(mb_backend *b, void *va, int value, size_t bytes, void *stream);

    /* Events order frees across streams: record at free time, query later.
     * query returns 1 when complete, 0 while pending, <0 on error. */
    int (*event_create)(mb_backend *b, void **ev);
    void (*event_destroy)(mb_backend *b, void *ev);
    int (*event_record)(mb_backend *b, void *ev, void *stream);
    int (*event_query)(mb_backend *b, void *ev);
    int (*stream_sync)(mb_backend *b, void *stream);
    /* 1 when every operation queued on stream so far has completed, 0 while
     * some is pending, <0 on error. NULL: the backend has no streams. */
    int (*stream_query)(mb_backend *b, void *stream);
    /* Wait for all work on the device, every stream included (only ever
     * called off the request path). NULL: nothing to wait for. */
    int (*device_sync)(mb_backend *b);
    /* CUDA graphs. 1 while work enqueued on stream is being captured into
     * a graph, 0 otherwise, <0 on error; NULL where nothing is captured
     * (host). While a stream captures, an event recorded on it is a node
     * of the graph, not a point in time: it must not be queried, and
     * memory the graph uses must not go to anyone else. */
    int (*stream_capturing)(mb_backend *b, void *stream);
    /* This thread's capture mode made relaxed (its driver calls may go on
     * while a stream captures, as PyTorch's allocator does around
     * cudaMalloc); returns the mode it replaced, for capture_restore. */
    int (*capture_relax)(mb_backend *b);
    void (*capture_restore)(mb_backend *b, int mode);
    /* The device memory free now, other processes' use counted (host: the
     * emulated device's, $MOONBRIGHT_HOST_MEMORY); MB_ENOENT where not
     * known. NULL: never known. */
    int (*mem_free)(mb_backend *b, uint64_t *bytes);

    void (*close)(mb_backend *b);

    /* Keep one exported handle open for the backend's life, so that exports
     * stay in the driver's fast regime after this process has let go of
     * every other frame (an export in a process that holds no exported
     * handle costs about 30x more). NULL where exports cost the same either
     * way (host). */
    int (*keep_exports_warm)(mb_backend *b);

    /* Stream memory operations, for gating a stream on a host-side event
     * (client/async_map.c). NULL in a backend without them (host: its
     * streams are trivially ordered, so nothing needs gating). */
    /* Pinned host memory the device can read and wait on, zeroed; *dev is
     * its device address. */
    int (*host_mapped_alloc)(mb_backend *b, size_t bytes, void **host, uint64_t *dev);
    void (*host_mapped_free)(mb_backend *b, void *host);
    /* Work enqueued on stream after this waits until the 32-bit word at dev
     * reaches value, compared cyclically: (int32_t)(*dev - value) >= 0. */
    int (*stream_wait_value32)(mb_backend *b, void *stream, uint64_t dev, uint32_t value);
    /* Store value in the 32-bit word at dev, ordered on stream. */
    int (*stream_write_value32)(mb_backend *b, void *stream, uint64_t dev, uint32_t value);
};

struct mb_backend {
    const char *name;                  /* "cuda" or "host" */
    int device;                        /* ordinal this backend serves, in this process */
    uint8_t uuid[MB_UUID_BYTES];       /* the device's identity, the same in every process
                                        * (cuda: the GPU's UUID, whatever the ordinals;
                                        * host: mb_backend_host_uuid) */
    size_t granularity;                /* smallest mem size, a power of two */
    uint64_t total_bytes;              /* device memory (host: physical memory); 0 unknown */
    bool total_shared;                 /* total_bytes is memory the rest of the machine
                                        * needs too (the host's, unless it emulates a
                                        * device): a default budget takes half */
    const struct mb_backend_ops *ops;
    void *priv;
};

/* Open "auto", "cuda" or "host" for device ordinal `device`. "auto" picks
 * cuda when a usable GPU is present, else host, and logs which and why. */
int mb_backend_open(const char *kind, int device, mb_backend **out);
void mb_backend_close(mb_backend *b);

/* Implementations (each returns MB_EDEVICE/MB_EBACKEND when unusable). */
int mb_backend_host_open(int device, mb_backend **out);
int mb_backend_cuda_open(int device, mb_backend **out);

/* The ordinal in this process of the device whose identity is uuid (a
 * backend's uuid, as another process reports it), for backend `kind`
 * ("cuda" or "host"): MB_ENOENT when this process does not see that
 * device (cuda: hidden by CUDA_VISIBLE_DEVICES, or another machine's);
 * MB_EDEVICE when the backend is unusable here; MB_EINVAL for another
 * kind. The ordinals of one GPU differ between processes whose
 * CUDA_VISIBLE_DEVICES (or CUDA_DEVICE_ORDER) differ; its UUID does not. */
int mb_backend_find(const char *kind, const uint8_t uuid[MB_UUID_BYTES], int *ordinal);
int mb_backend_cuda_find(const uint8_t uuid[MB_UUID_BYTES], int *ordinal);
/* The host backend's identity of its device `device`. */
void mb_backend_host_uuid(int device, uint8_t uuid[MB_UUID_BYTES]);
/* uuid as nvidia-smi writes a GPU's ("GPU-8-4-4-4-12" hex digits), or
 * "host device N" for the host backend's. */
void mb_uuid_str(const uint8_t uuid[MB_UUID_BYTES], char out[MB_UUID_STR]);

#endif
