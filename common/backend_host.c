/* backend_host.c: the "host" backend: backend.h's contract on host memory.
 * A frame is a memfd, its export is that same fd (a duplicate after
 * unexport, as a CUDA handle's second export is a new fd), a reservation is an
 * inaccessible anonymous mapping, and map is mmap(MAP_FIXED|MAP_SHARED).
 * $MOONBRIGHT_HOST_COSTS adds a GPU driver's costs to its calls
 * (host_costs.c); $MOONBRIGHT_HOST_MEMORY gives it a device's capacity:
 * frames created past it fail with MB_ENOMEM, as cuMemCreate does on a
 * full device, whatever the daemon's budget says. */
#include "backend.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <moonbright/status.h>

#include "host_costs.h"
#include "log.h"
#include "size.h"

/* The emulated device's capacity ($MOONBRIGHT_HOST_MEMORY) and the bytes
 * of frames this backend created and has not released. created[fd] is
 * the size of the frame whose memfd is fd when this backend created it
 * (imported frames share the fd's kind but are not counted). Invariant:
 * used == the sum of created[], used <= cap. */
struct host_device {
    pthread_mutex_t lock;
    uint64_t cap, used;
    uint64_t *created;
    size_t n_created;
};

/* Count a created frame against the capacity; MB_ENOMEM when full. */
static int device_take(struct host_device *d, int fd, size_t bytes)
{
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    if (d->used + bytes > d->cap) {
        rc = MB_ENOMEM;
    } else if ((size_t)fd >= d->n_created) {
        size_t n = d->n_created ? d->n_created : 256;
        while (n <= (size_t)fd)
            n *= 2;
        uint64_t *c = realloc(d->created, n * sizeof(*c));
        if (!c) {
            rc = MB_ENOMEM;
        } else {
            memset(c + d->n_created, 0, (n - d->n_created) * sizeof(*c));
            d->created = c;
            d->n_created = n;
        }
    }
    if (rc == 0) {
        d->created[fd] = bytes;
        d->used += bytes;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}

static void device_give(struct host_device *d, int fd)
{
    pthread_mutex_lock(&d->lock);
    if (fd >= 0 && (size_t)fd < d->n_created && d->created[fd]) {
        d->used -= d->created[fd];
        d->created[fd] = 0;
    }
    pthread_mutex_unlock(&d->lock);
}

/* Reservations are aligned to the largest power of two not above their size,
 * capped at 2 MiB, so a range of one frame is aligned to its own size (the
 * slab finds a chunk's header from any pointer inside it). */
#define HOST_MAX_ALIGN ((size_t)2 << 20)

static size_t reserve_align(size_t bytes)
{
    size_t a = (size_t)sysconf(_SC_PAGESIZE);
    while (a < HOST_MAX_ALIGN && a * 2 <= bytes)
        a *= 2;
    return a;
}

static int host_create(mb_backend *b, size_t bytes, struct mb_mem *out)
{
    if (bytes == 0 || bytes % b->granularity) {
        mb_log(MB_LOG_ERR, "failed to create frame: size %zu is not a multiple of %zu",
               bytes, b->granularity);
        return MB_EINVAL;
    }
    int fd = memfd_create("moonbright-frame", MFD_CLOEXEC);
    if (fd < 0) {
        mb_log(MB_LOG_ERR, "failed to create frame: memfd_create: %s", strerror(errno));
        return errno == EMFILE || errno == ENFILE ? MB_ELIMIT : MB_ESYS;
    }
    if (ftruncate(fd, (off_t)bytes) != 0) {
        mb_log(MB_LOG_ERR, "failed to size frame to %zu bytes: %s", bytes, strerror(errno));
        close(fd);
        return MB_ENOMEM;
    }
    if (b->priv && device_take(b->priv, fd, bytes) != 0) {
        close(fd);   /* full, as a device is: the caller reports it */
        return MB_ENOMEM;
    }
    out->h = (uint64_t)fd;
    out->fd = -1;
    out->bytes = bytes;
    return 0;
}

/* The memfd is its own first export: fd and handle are one descriptor.
 * After unexport, an export is a duplicate of it (as the CUDA backend's
 * is a new fd for the same handle), closed by the next unexport. */
static int host_export_fd(mb_backend *b, struct mb_mem *m)
{
    if (m->fd >= 0)
        return 0;
    if ((int)m->h < 0)
        return MB_EINVAL;
    int fd = fcntl((int)m->h, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        mb_log(MB_LOG_ERR, "failed to export frame: %s", strerror(errno));
        return errno == EMFILE || errno == ENFILE ? MB_ELIMIT : MB_ESYS;
    }
    m->fd = fd;
    return 0;
}

/* The handle (the memfd) stays: only a duplicate made by export_fd is
 * closed. */
static void host_unexport(mb_backend *b, struct mb_mem *m)
{
    if (m->fd >= 0 && m->fd != (int)m->h)
        close(m->fd);
    m->fd = -1;
}

static int host_import_fd(mb_backend *b, int fd, size_t bytes, struct mb_mem *out)
{
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0 || (size_t)end < bytes) {
        mb_log(MB_LOG_ERR, "failed to import frame: fd %d holds %lld bytes, expected %zu",
               fd, (long long)end, bytes);
        close(fd);
        return MB_EPROTO;
    }
    out->h = (uint64_t)fd;
    out->fd = fd;
    out->bytes = bytes;
    return 0;
}

static void host_release(mb_backend *b, struct mb_mem *m)
{
    if (b->priv)
        device_give(b->priv, (int)m->h);
    host_unexport(b, m);
    if ((int)m->h >= 0)
        close((int)m->h);
    m->h = (uint64_t)-1;
    m->fd = -1;
}

static int host_reserve(mb_backend *b, size_t bytes, void **va)
{
    size_t align = reserve_align(bytes);
    size_t span = bytes + align;
    char *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        mb_log(MB_LOG_ERR, "failed to reserve %zu bytes: %s", bytes, strerror(errno));
        return MB_ENOMEM;
    }
    char *start = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    if (start > p)
        munmap(p, (size_t)(start - p));
    size_t tail = (size_t)(p + span - (start + bytes));
    if (tail)
        munmap(start + bytes, tail);
    *va = start;
    return 0;
}

static void host_free_va(mb_backend *b, void *va, size_t bytes)
{
    if (va && munmap(va, bytes) != 0)
        mb_log(MB_LOG_ERR, "failed to free range %p+%zu: %s", va, bytes, strerror(errno));
}

static int host_map(mb_backend *b, void *va, const struct mb_mem *m)
{
    void *p = mmap(va, m->bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, (int)m->h, 0);
    if (p == MAP_FAILED) {
        mb_log(MB_LOG_ERR, "failed to map frame at %p: %s", va, strerror(errno));
        return errno == ENOMEM ? MB_ELIMIT : MB_ESYS;
    }
    return 0;
}

static int host_set_access(mb_backend *b, void *va, size_t bytes)
{
    if (mprotect(va, bytes, PROT_READ | PROT_WRITE) != 0) {
        mb_log(MB_LOG_ERR, "failed to set access on %p+%zu: %s", va, bytes, strerror(errno));
        return MB_ESYS;
    }
    return 0;
}

/* Unmapping puts the reservation back in place rather than leaving a hole. */
static int host_unmap(mb_backend *b, void *va, size_t bytes)
{
    void *p = mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        mb_log(MB_LOG_ERR, "failed to unmap %p+%zu: %s", va, bytes, strerror(errno));
        return MB_ESYS;
    }
    return 0;
}

/* Punching the whole file frees its pages: it reads as zeros and costs no
 * memory until written again. */
static int host_scrub(mb_backend *b, struct mb_mem *m)
{
    if (fallocate((int)m->h, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)m->bytes) != 0) {
        mb_log(MB_LOG_ERR, "failed to scrub frame: %s", strerror(errno));
        return MB_ESYS;
    }
    return 0;
}

static int host_memset(mb_backend *b, void *va, int value, size_t bytes, void *stream)
{
    memset(va, value, bytes);
    return 0;
}

/* Host work is complete when the call returns: events are always complete. */
static _Alignas(8) char host_event;   /* even: never a tagged value */
static int host_event_create(mb_backend *b, void **ev) { *ev = &host_event; return 0; }
static void host_event_destroy(mb_backend *b, void *ev) { }
static int host_event_record(mb_backend *b, void *ev, void *stream) { return 0; }
static int host_event_query(mb_backend *b, void *ev) { return 1; }
static int host_stream_sync(mb_backend *b, void *stream) { return 0; }
static int host_stream_query(mb_backend *b, void *stream) { return 1; }

/* The emulated device's room; not known for the host's own memory. */
static int host_mem_free(mb_backend *b, uint64_t *bytes)
{
    struct host_device *d = b->priv;
    if (!d)
        return MB_ENOENT;
    pthread_mutex_lock(&d->lock);
    *bytes = d->cap - d->used;
    pthread_mutex_unlock(&d->lock);
    return 0;
}

static void host_close(mb_backend *b)
{
    struct host_device *d = b->priv;
    if (d) {
        pthread_mutex_destroy(&d->lock);
        free(d->created);
        free(d);
    }
    free(b);
}

static const struct mb_backend_ops host_ops = {
    .create = host_create,
    .export_fd = host_export_fd,
    .unexport = host_unexport,
    .import_fd = host_import_fd,
    .release = host_release,
    .reserve = host_reserve,
    .free_va = host_free_va,
    .map = host_map,
    .set_access = host_set_access,
    .unmap = host_unmap,
    .scrub = host_scrub,
    .memset = host_memset,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .stream_sync = host_stream_sync,
    .stream_query = host_stream_query,
    .mem_free = host_mem_free,
    .close = host_close,
};

/* Test hook ($MOONBRIGHT_TEST_HOST_GATES=1, any build): streams can be
 * "gated", so that stream-ordered mappings run on the client's mapper
 * thread as they do on a GPU. No device work runs on the host, so a gate
 * holds nothing back: a test touches memory whose mapping was queued only
 * after waiting for the mapper. */
static int host_mapped_alloc(mb_backend *b, size_t bytes, void **host, uint64_t *dev)
{
    (void)b;
    void *p = calloc(1, bytes);
    if (!p)
        return MB_ENOMEM;
    *host = p;
    *dev = (uint64_t)(uintptr_t)p;
    return 0;
}

static void host_mapped_free(mb_backend *b, void *host)
{
    (void)b;
    free(host);
}

static int host_stream_wait_value32(mb_backend *b, void *stream, uint64_t dev, uint32_t value)
{
    (void)b;
    (void)stream;
    (void)dev;
    (void)value;
    return 0;
}

/* host_ops with the gates: made once, on first use. */
static struct mb_backend_ops host_gated_ops;
static pthread_once_t host_gated_once = PTHREAD_ONCE_INIT;

static void host_gated_init(void)
{
    host_gated_ops = host_ops;
    host_gated_ops.host_mapped_alloc = host_mapped_alloc;
    host_gated_ops.host_mapped_free = host_mapped_free;
    host_gated_ops.stream_wait_value32 = host_stream_wait_value32;
}

int mb_backend_host_open(int device, mb_backend **out)
{
    mb_backend *b = calloc(1, sizeof(*b));
    if (!b)
        return MB_ENOMEM;
    b->name = "host";
    b->device = device;
    mb_backend_host_uuid(device, b->uuid);
    b->granularity = (size_t)sysconf(_SC_PAGESIZE);
    long pages = sysconf(_SC_PHYS_PAGES);
    b->total_bytes = pages > 0 ? (uint64_t)pages * b->granularity : 0;
    b->total_shared = true;
    const char *cap = getenv("MOONBRIGHT_HOST_MEMORY");
    if (cap && *cap) {   /* empty: the host's memory, unenforced */
        uint64_t bytes = 0;
        if (mb_parse_size(cap, &bytes) != 0 || bytes < b->granularity) {
            mb_log(MB_LOG_ERR, "failed to read MOONBRIGHT_HOST_MEMORY=\"%s\": expected a size "
                               "of at least %zu bytes (as 64G or 512M)", cap, b->granularity);
            free(b);
            return MB_EINVAL;
        }
        struct host_device *d = calloc(1, sizeof(*d));
        if (!d) {
            free(b);
            return MB_ENOMEM;
        }
        pthread_mutex_init(&d->lock, NULL);
        d->cap = bytes;
        b->priv = d;
        b->total_bytes = bytes;
        b->total_shared = false;
    }
    const char *gates = getenv("MOONBRIGHT_TEST_HOST_GATES");
    b->ops = &host_ops;
    if (gates && strcmp(gates, "1") == 0) {
        pthread_once(&host_gated_once, host_gated_init);
        b->ops = &host_gated_ops;
    }
    const char *costs = getenv("MOONBRIGHT_HOST_COSTS");
    if (costs && *costs && mb_host_costs_apply(b, costs) != 0) {   /* empty: none */
        host_close(b);
        return MB_EINVAL;
    }
    *out = b;
    return 0;
}
