/* host_costs.c: the host backend's emulated driver costs
 * ($MOONBRIGHT_HOST_COSTS). Each call that stands for a CUDA driver call
 * sleeps as long as that call takes on the target GPU before it does its
 * host work, so that a run on the host backend puts driver time where a
 * GPU would: on the request path or on a background thread, and a
 * background thread that maps can fall behind as it does there.
 *
 * The value is "gpu" (FACTS.md's H200 medians, in microseconds: create 18,
 * export 620, import 46, map 37 per handle with its access grant, unmap 28,
 * release 17) and/or NAME=MICROSECONDS items, comma-separated, for those
 * six names: "gpu,export=100" starts from the H200's figures, "map=40"
 * from none; an empty value is no costs. Mapping and unmapping within one process take turns, as the
 * driver serialises them (FACTS.md: ~15-20 k frames/s whatever the
 * threads); creating and exporting do not.
 *
 * What it is not: a model of contention between processes, of the
 * driver's slow first exports, or of any GPU work. Figures measured with
 * it are host figures and say so. */
#include "host_costs.h"

#include <errno.h>
#include <pthread.h>
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

static void pay_in_turn(unsigned us)
{
    pthread_mutex_lock(&map_turn);
    pay(us);
    pthread_mutex_unlock(&map_turn);
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

static int c_map(mb_backend *b, void *va, const struct mb_mem *m)
{
    pay_in_turn(costs_us[C_MAP]);
    return inner->map(b, va, m);
}

static int c_unmap(mb_backend *b, void *va, size_t bytes)
{
    pay_in_turn(costs_us[C_UNMAP]);
    return inner->unmap(b, va, bytes);
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
