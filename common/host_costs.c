/* host_costs.c: the host backend's emulated driver costs
 * ($MOONBRIGHT_HOST_COSTS). Each call that stands for a CUDA driver call
 * sleeps as long as that call takes on the target GPU before it does its
 * host work, so that a run on the host backend puts driver time where a
 * GPU would: on the request path or on a background thread, and a
 * background thread that maps can fall behind as it does there.
 *
 * The value is "gpu" (FACTS.md's H200 medians, in microseconds: create 18,
 * export 620, import 46, map 37 per handle with its access grant, unmap 28
 * per handle mapped in the range, release 17) and/or NAME=MICROSECONDS
 * items, comma-separated, for those six names: "gpu,export=100" starts
 * from the H200's figures, "map=40" from none; an empty value is no costs.
 * Mapping and unmapping within one process take turns, as the driver
 * serialises them (FACTS.md: ~15-20 k frames/s whatever the threads);
 * creating and exporting do not.
 *
 * What it is not: a model of contention between processes, of the
 * driver's slow first exports, or of any GPU work. Figures measured with
 * it are host figures and say so. */
#include "host_costs.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include <moonbright/status.h>

#include "log.h"

enum { C_CREATE, C_EXPORT, C_IMPORT, C_MAP, C_UNMAP, C_RELEASE, C_N };
static const char *const cost_names[C_N] = { "create", "export", "import", "map", "unmap", "release" };
static const unsigned gpu_us[C_N] = { 18, 620, 46, 37, 28, 17 };

/* One set of costs and the ops they wrap, per process: set by the first
 * host backend opened, shared by every later one (the environment is the
 * process's), never written again. */
static unsigned costs_us[C_N];
static const struct mb_backend_ops *inner;
static struct mb_backend_ops wrapped;
static pthread_mutex_t map_turn = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t setup = PTHREAD_MUTEX_INITIALIZER;   /* guards inner, wrapped, costs_us */

int mb_host_costs_parse(const char *spec, unsigned us[6])
{
    memset(us, 0, C_N * sizeof(us[0]));
    if (!spec || !*spec)
        return MB_EINVAL;
    const char *p = spec;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len == 3 && strncmp(p, "gpu", 3) == 0) {
            memcpy(us, gpu_us, sizeof(gpu_us));
        } else {
            const char *eq = memchr(p, '=', len);
            size_t name_len = eq ? (size_t)(eq - p) : 0;
            int k = -1;
            for (int i = 0; eq && i < C_N; i++)
                if (name_len == strlen(cost_names[i]) && strncmp(p, cost_names[i], name_len) == 0)
                    k = i;
            char *end = NULL;
            errno = 0;
            unsigned long v = k >= 0 ? strtoul(eq + 1, &end, 10) : 0;
            if (k < 0 || end == eq + 1 || end != p + len || errno || v > 10000000ul || eq[1] == '-')
                return MB_EINVAL;
            us[k] = (unsigned)v;
        }
        p += len;
        if (*p == ',' && *++p == '\0')
            return MB_EINVAL;   /* a trailing comma */
    }
    return 0;
}

static void pay(unsigned us)
{
    if (!us)
        return;
    static __thread int slack_set;
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);   /* 1 us, not the default 50 */
        slack_set = 1;
    }
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_nsec += (long)(us % 1000000u) * 1000L;
    t.tv_sec += us / 1000000u + t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
        ;
}

static int c_create(mb_backend *b, size_t bytes, struct mb_mem *out)
{
    pay(costs_us[C_CREATE]);
    return inner->create(b, bytes, out);
}

static int c_export(mb_backend *b, struct mb_mem *m)
{
    if (m->fd < 0)
        pay(costs_us[C_EXPORT]);   /* the first export only: later ones find the fd */
    return inner->export_fd(b, m);
}

static int c_import(mb_backend *b, int fd, size_t bytes, struct mb_mem *out)
{
    pay(costs_us[C_IMPORT]);
    return inner->import_fd(b, fd, bytes, out);
}

static void c_release(mb_backend *b, struct mb_mem *m)
{
    pay(costs_us[C_RELEASE]);
    inner->release(b, m);
}

/* ---- the handles mapped, by address ----
 * cuMemUnmap over a range costs per handle mapped in it (FACTS.md's figure
 * is one handle's), so an unmap pays for each mapping it ends. Mappings
 * are recorded here by their first address (open addressing, linear
 * probing, deletion by backward shift), under map_turn. An unmap that
 * starts or runs off a recorded mapping pays once for the rest. */
struct mapping {
    uintptr_t va;   /* 0: empty slot */
    size_t bytes;
};
static struct mapping *maps;
static size_t maps_cap, maps_n;   /* maps_cap a power of two, maps_n <= maps_cap / 2 */

static size_t map_slot(uintptr_t va)
{
    return (size_t)((va >> 12) * 0x9E3779B97F4A7C15ull) & (maps_cap - 1);
}

/* The slot holding va, else the empty slot its probe ends at (maps_cap > 0). */
static size_t map_find(uintptr_t va)
{
    size_t i = map_slot(va);
    while (maps[i].va && maps[i].va != va)
        i = (i + 1) & (maps_cap - 1);
    return i;
}

static void maps_put(uintptr_t va, size_t bytes)
{
    if (2 * (maps_n + 1) > maps_cap) {
        size_t cap = maps_cap ? 2 * maps_cap : 1024;
        struct mapping *old = maps, *m = calloc(cap, sizeof(*m));
        if (!m)
            return;   /* not recorded: its unmap pays once */
        size_t old_cap = maps_cap;
        maps = m;
        maps_cap = cap;
        maps_n = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].va)
                maps_put(old[i].va, old[i].bytes);
        free(old);
    }
    size_t i = map_find(va);
    if (!maps[i].va)
        maps_n++;
    maps[i] = (struct mapping){ va, bytes };
}

/* The bytes of the mapping at va, removed; 0 when none starts there. */
static size_t maps_take(uintptr_t va)
{
    if (!maps_cap)
        return 0;
    size_t i = map_find(va);
    if (!maps[i].va)
        return 0;
    size_t bytes = maps[i].bytes;
    maps_n--;
    for (size_t j = (i + 1) & (maps_cap - 1); maps[j].va; j = (j + 1) & (maps_cap - 1)) {
        size_t home = map_slot(maps[j].va);
        /* maps[j] may move to the hole at i when its home is not in (i, j] */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            maps[i] = maps[j];
            i = j;
        }
    }
    maps[i].va = 0;
    return bytes;
}

static int c_map(mb_backend *b, void *va, const struct mb_mem *m)
{
    pthread_mutex_lock(&map_turn);
    pay(costs_us[C_MAP]);
    int rc = inner->map(b, va, m);
    if (rc == 0)
        maps_put((uintptr_t)va, m->bytes);
    pthread_mutex_unlock(&map_turn);
    return rc;
}

static int c_unmap(mb_backend *b, void *va, size_t bytes)
{
    pthread_mutex_lock(&map_turn);
    size_t handles = 0, off = 0;
    while (off < bytes) {
        size_t got = maps_take((uintptr_t)va + off);
        handles++;
        if (!got)
            break;
        off += got;
    }
    uint64_t us = (uint64_t)costs_us[C_UNMAP] * handles;
    pay(us < UINT32_MAX ? (unsigned)us : UINT32_MAX);
    int rc = inner->unmap(b, va, bytes);
    pthread_mutex_unlock(&map_turn);
    return rc;
}

int mb_host_costs_apply(mb_backend *b, const char *spec)
{
    unsigned us[C_N];
    if (mb_host_costs_parse(spec, us) != 0) {
        mb_log(MB_LOG_ERR, "failed to read MOONBRIGHT_HOST_COSTS=\"%s\": expected \"gpu\" and/or "
                           "NAME=MICROSECONDS items (create, export, import, map, unmap, release), "
                           "comma-separated", spec ? spec : "");
        return MB_EINVAL;
    }
    pthread_mutex_lock(&setup);
    int rc = 0;
    if (!inner) {
        inner = b->ops;
        wrapped = *inner;
        wrapped.create = c_create;
        wrapped.export_fd = c_export;
        wrapped.import_fd = c_import;
        wrapped.release = c_release;
        wrapped.map = c_map;
        wrapped.unmap = c_unmap;
        memcpy(costs_us, us, sizeof(us));
    } else if (inner != b->ops || memcmp(costs_us, us, sizeof(us)) != 0) {
        rc = MB_EINVAL;   /* one set of costs over one kind of host ops per process */
    }
    pthread_mutex_unlock(&setup);
    if (rc != 0) {
        mb_log(MB_LOG_ERR, "failed to apply MOONBRIGHT_HOST_COSTS: this process applied other costs already");
        return rc;
    }
    b->ops = &wrapped;
    mb_log(MB_LOG_INFO, "host backend with emulated driver costs (us): create %u, export %u, import %u, "
                        "map %u, unmap %u, release %u", us[C_CREATE], us[C_EXPORT], us[C_IMPORT], us[C_MAP],
           us[C_UNMAP], us[C_RELEASE]);
    return 0;
}
