/* faults.c: the fault injector behind faults.h (debug builds): reads
 * $MOONBRIGHT_FAULTS once, draws from its own generator, and wraps a
 * backend's fallible calls. */
#include "faults.h"

#ifdef MB_DEBUG
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moonbright/status.h>

#include "backend.h"
#include "log.h"

static double rate[MB_FAULT_COUNT];
static uint64_t state = 88172645463325252ull;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void load(void)
{
    static const char *names[MB_FAULT_COUNT] = { "drop", "dup", "delay", "trunc", "backend", "fds", "pidfd" };
    const char *env = getenv("MOONBRIGHT_FAULTS");
    if (!env || !*env)
        return;
    char *copy = strdup(env), *save = NULL;
    for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            continue;
        *eq = '\0';
        if (strcmp(kv, "seed") == 0)
            state = strtoull(eq + 1, NULL, 0) | 1;
        for (int i = 0; i < MB_FAULT_COUNT; i++)
            if (strcmp(kv, names[i]) == 0)
                rate[i] = strtod(eq + 1, NULL);
    }
    state ^= (uint64_t)getpid() << 17;
    free(copy);
    mb_log(MB_LOG_WARN, "fault injection on: %s", env);
}

bool mb_fault(enum mb_fault f)
{
    pthread_once(&once, load);
    if (rate[f] <= 0)
        return false;
    pthread_mutex_lock(&lock);
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    double u = (double)(state >> 11) / 9007199254740992.0;
    pthread_mutex_unlock(&lock);
    return u < rate[f];
}

/* The real calls, one table per process is enough (one backend each). */
static const struct mb_backend_ops *real;
static struct mb_backend_ops faulty;

static int f_create(mb_backend *b, size_t bytes, struct mb_mem *out)
{
    if (mb_fault(MB_FAULT_FDS))
        return MB_ELIMIT;   /* what memfd_create's EMFILE becomes */
    return mb_fault(MB_FAULT_BACKEND) ? MB_EBACKEND : real->create(b, bytes, out);
}
static int f_export(mb_backend *b, struct mb_mem *m)
{
    return mb_fault(MB_FAULT_BACKEND) ? MB_EBACKEND : real->export_fd(b, m);
}
static int f_import(mb_backend *b, int fd, size_t bytes, struct mb_mem *out)
{
    bool fds = mb_fault(MB_FAULT_FDS);
    if (fds || mb_fault(MB_FAULT_BACKEND)) {
        close(fd);   /* the contract: import owns fd whatever happens */
        return fds ? MB_ELIMIT : MB_EBACKEND;
    }
    return real->import_fd(b, fd, bytes, out);
}
static int f_map(mb_backend *b, void *va, const struct mb_mem *m)
{
    return mb_fault(MB_FAULT_BACKEND) ? MB_EBACKEND : real->map(b, va, m);
}

void mb_faults_wrap_backend(struct mb_backend *b)
{
    pthread_once(&once, load);
    if ((rate[MB_FAULT_BACKEND] <= 0 && rate[MB_FAULT_FDS] <= 0) || real)
        return;
    real = b->ops;
    faulty = *b->ops;
    faulty.create = f_create;
    faulty.export_fd = f_export;
    faulty.import_fd = f_import;
    faulty.map = f_map;
    b->ops = &faulty;
}
#endif
