/* async_map.c: the stream-ordered slow path of mb_malloc_async (see
 * async_map.h): per client, one device-mapped host word that gated streams
 * wait on, and one mapper thread that maps queued ranges (and runs other
 * layers' mapping jobs, amap_run_async) in order and raises the word to
 * each job's sequence number when it is done. */
#include "async_map.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "frame_plan.h"
#include "log.h"

/* One range handed out before it was mapped, or another layer's job
 * (run set, s NULL). */
struct amap_job {
    struct stitched *s;
    size_t n;                    /* frames to map: s->frames[0..n) */
    int (*run)(void *arg, bool fail);
    void *arg;
    uint32_t seq;                /* the word reaches seq once this job is done */
    bool done;
    bool unmapped;               /* failed and left without any mapping */
    int rc;                      /* 0, or why the mapping failed */
    struct amap_job *next;
};

/* Invariants (amap_is_valid), under lock:
 *   the queue head..tail holds the jobs not done, seq increasing by one
 *   *flag == seq of the last job done (next_seq - queued jobs), or of the
 *   head job while the mapper is unlinking it
 *   failed holds done jobs whose range is still live (rc != 0) */
struct amap {
    mb_client *c;
    mb_backend *be;
    pthread_mutex_t lock;
    pthread_cond_t wake;         /* mapper: a job was queued, or stop */
    pthread_cond_t done;         /* waiters: a job finished */
    pthread_t thread;
    bool stop;
    volatile uint32_t *flag;     /* device-mapped host word */
    uint64_t flag_dev;
    uint32_t next_seq;           /* seq of the last job queued */
    struct amap_job *head, *tail;
    size_t queued;
    struct amap_job *failed;
    int error;                   /* first failure not yet reported */
};

/* Test hooks: process-wide; see async_map.h. */
static unsigned g_delay_us;
static unsigned g_fail_next;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

static void read_env(void)
{
    const char *d = getenv("MOONBRIGHT_TEST_AMAP_DELAY_US");
    const char *f = getenv("MOONBRIGHT_TEST_AMAP_FAIL");
    if (d && *d)
        __atomic_store_n(&g_delay_us, (unsigned)strtoul(d, NULL, 10), __ATOMIC_RELAXED);
    if (f && *f)
        __atomic_store_n(&g_fail_next, (unsigned)strtoul(f, NULL, 10), __ATOMIC_RELAXED);
}

void amap_test_inject(mb_client *c, unsigned delay_us, unsigned fail_next)
{
    pthread_once(&g_env_once, read_env);
    __atomic_store_n(&g_delay_us, delay_us, __ATOMIC_RELAXED);
    __atomic_store_n(&g_fail_next, fail_next, __ATOMIC_RELAXED);
}

/* The client's amap lives in c->amap (set once, under g_start_lock; read
 * without a lock by amap_take_error). */
static struct amap *find(mb_client *c, bool unlink)
{
    struct amap *a = __atomic_load_n(&c->amap, __ATOMIC_ACQUIRE);
    if (unlink)
        c->amap = NULL;
    return a;
}

#ifdef MB_DEBUG
static bool amap_is_valid(const struct amap *a)
{
    size_t n = 0;
    uint32_t seq = a->next_seq - (uint32_t)a->queued;
    for (const struct amap_job *j = a->head; j; j = j->next) {
        if (j->seq != ++seq || j->done || (!j->next && j != a->tail))
            return false;
        n++;
    }
    for (const struct amap_job *j = a->failed; j; j = j->next)
        if (!j->done || j->rc == 0)
            return false;
    /* The mapper raises the flag for the head job before it takes the
     * lock to unlink it. */
    uint32_t done = a->next_seq - (uint32_t)a->queued,
             flag = __atomic_load_n(a->flag, __ATOMIC_ACQUIRE);
    return n == a->queued && seq == a->next_seq && (flag == done || (a->head && flag == done + 1));
}
#define AMAP_CHECK(a) do { if (!amap_is_valid(a)) abort(); } while (0)
#else
#define AMAP_CHECK(a) ((void)0)
#endif

/* After a failure: back the whole of s with aliases of its smallest frame
 * (frames are largest first, so every offset is a multiple of its size),
 * so a dependent kernel writes into memory s owns instead of faulting. */
static bool alias_smallest_frame(mb_backend *be, struct stitched *s)
{
    const struct mb_mem *m = &s->frames[s->n - 1]->mem;
    size_t end = 0;
    int rc = 0;
    while (rc == 0 && end < s->bytes) {
        rc = be->ops->map(be, (char *)s->va + end, m);
        if (rc == 0)
            end += m->bytes;
    }
    if (rc == 0)
        rc = be->ops->set_access(be, s->va, s->bytes);
    if (rc != 0 && end > 0)
        be->ops->unmap(be, s->va, end);
    return rc == 0;
}

static void *mapper_main(void *arg)
{
    stitch_background_thread();
    struct amap *a = arg;
    pthread_mutex_lock(&a->lock);
    for (;;) {
        while (!a->head && !a->stop)
            pthread_cond_wait(&a->wake, &a->lock);
        if (!a->head)
            break;
        struct amap_job *j = a->head;
        pthread_mutex_unlock(&a->lock);

        unsigned delay = __atomic_load_n(&g_delay_us, __ATOMIC_RELAXED);
        if (delay)
            usleep(delay);
        int rc;
        unsigned fail = __atomic_load_n(&g_fail_next, __ATOMIC_RELAXED);
        bool inject = fail && __atomic_compare_exchange_n(&g_fail_next, &fail, fail - 1, false,
                                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        if (j->run) {
            rc = j->run(j->arg, inject);   /* it undoes and logs its own failure */
        } else if (inject) {
            rc = MB_EBACKEND;
            mb_log(MB_LOG_ERR, "failed to map %p+%zu for a stream: injected failure",
                   j->s->va, j->s->bytes);
        } else {
            rc = stitch_map(a->be, j->s, 0, j->n, 0);
        }
        bool unmapped = false;
        if (rc != 0 && !j->run) {
            unmapped = !alias_smallest_frame(a->be, j->s);
            mb_log(MB_LOG_ERR, "failed to map %p+%zu after mb_malloc_async returned it: %s; "
                               "the range is %s, the next call reports the error",
                   j->s->va, j->s->bytes, mb_strerror(rc),
                   unmapped ? "left unmapped (dependent kernels fault)"
                            : "backed by aliases of its first frame");
        }
        /* Open the gate of every stream waiting for this job. */
        __atomic_store_n(a->flag, j->seq, __ATOMIC_RELEASE);

        pthread_mutex_lock(&a->lock);
        a->head = j->next;
        if (!a->head)
            a->tail = NULL;
        a->queued--;
        j->done = true;
        j->rc = rc;
        j->unmapped = unmapped;
        if (rc != 0 && a->error == 0)
            __atomic_store_n(&a->error, rc, __ATOMIC_RELEASE);
        if (rc != 0 && !j->run) {
            j->next = a->failed;
            a->failed = j;
        } else {
            free(j);
        }
        AMAP_CHECK(a);
        pthread_cond_broadcast(&a->done);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

/* Start c's amap: NULL when the backend cannot gate streams. g_start_lock
 * held. */
static struct amap *amap_start(mb_client *c)
{
    struct amap *a;
    mb_backend *be = c->be;
    if (!be->ops->host_mapped_alloc || !be->ops->stream_wait_value32)
        return NULL;
    pthread_once(&g_env_once, read_env);
    a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->c = c;
    a->be = be;
    void *host = NULL;
    int rc = be->ops->host_mapped_alloc(be, 64, &host, &a->flag_dev);
    if (rc == 0) {
        a->flag = host;
        /* The wait operation's first use happens here, not on a user's
         * stream: the word is 0, so it is already satisfied. */
        rc = be->ops->stream_wait_value32(be, NULL, a->flag_dev, 0);
        if (rc == 0)
            rc = be->ops->stream_sync(be, NULL);
    }
    if (rc == 0) {
        pthread_mutex_init(&a->lock, NULL);
        pthread_cond_init(&a->wake, NULL);
        pthread_cond_init(&a->done, NULL);
        int e = pthread_create(&a->thread, NULL, mapper_main, a);
        if (e != 0) {
            mb_log(MB_LOG_ERR, "failed to start the mapper thread: %s", strerror(e));
            pthread_cond_destroy(&a->done);
            pthread_cond_destroy(&a->wake);
            pthread_mutex_destroy(&a->lock);
            rc = MB_ESYS;
        }
    }
    if (rc == 0) {
        __atomic_store_n(&c->amap, a, __ATOMIC_RELEASE);
        return a;
    }
    mb_log(MB_LOG_WARN, "stream-ordered mapping unavailable (%s): mb_malloc_async maps "
                        "synchronously", mb_strerror(rc));
    if (a->flag)
        be->ops->host_mapped_free(be, (void *)a->flag);
    free(a);
    return NULL;
}

/* Held while an amap starts, so that two threads making a client's first
 * stream-ordered call start one mapper, not two (a second would run jobs
 * nobody drains, gate streams on its own word and outlive mb_close). */
static pthread_mutex_t g_start_lock = PTHREAD_MUTEX_INITIALIZER;

/* The client's amap, started on first use; NULL when the backend cannot
 * gate streams (the caller maps synchronously). */
static struct amap *amap_get(mb_client *c)
{
    struct amap *a = find(c, false);
    if (a)
        return a;
    pthread_mutex_lock(&g_start_lock);
    a = find(c, false);
    if (!a)
        a = amap_start(c);
    pthread_mutex_unlock(&g_start_lock);
    return a;
}

bool amap_has_error(mb_client *c)
{
    struct amap *a = find(c, false);
    return a && __atomic_load_n(&a->error, __ATOMIC_ACQUIRE) != 0;
}

int amap_take_error(mb_client *c)
{
    struct amap *a = find(c, false);
    if (!a)
        return 0;
    if (__atomic_load_n(&a->error, __ATOMIC_ACQUIRE) == 0)
        return 0;   /* the common case takes no lock */
    pthread_mutex_lock(&a->lock);
    int rc = a->error;
    __atomic_store_n(&a->error, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&a->lock);
    int none = 0;   /* c->sticky is atomic: grow.c takes errors with no c->lock */
    if (rc)
        __atomic_compare_exchange_n(&c->sticky, &none, rc, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
    return rc;
}

/* Wait until at most `most` jobs are queued or job seq is done. a->lock
 * held. */
static void wait_behind_held(struct amap *a, size_t most, uint32_t seq)
{
    while (a->queued > most && (int32_t)(__atomic_load_n(a->flag, __ATOMIC_ACQUIRE) - seq) < 0)
        pthread_cond_wait(&a->done, &a->lock);
}

/* Queue j behind the jobs queued, then gate stream on it; its seq. No
 * lock may be held that a job takes (the frame lock, a growable set's):
 * the driver blocks a stream operation while the stream's queue is full,
 * until the mapper has opened earlier gates. Where the stream cannot be
 * gated the job is queued already: the caller waits for it here, so that
 * work enqueued later finds it done. */
static uint32_t enqueue(mb_client *c, struct amap *a, struct amap_job *j, void *stream)
{
    pthread_mutex_lock(&a->lock);
    uint32_t seq = j->seq = a->next_seq + 1;   /* (j is the mapper's once queued) */
    a->next_seq = seq;
    if (a->tail)
        a->tail->next = j;
    else
        a->head = j;
    a->tail = j;
    a->queued++;
    AMAP_CHECK(a);
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    int rc = c->be->ops->stream_wait_value32(c->be, stream, a->flag_dev, seq);
    if (rc != 0) {
        mb_log(MB_LOG_WARN, "failed to gate a stream behind a mapping: %s; waiting for it",
               mb_strerror(rc));
        pthread_mutex_lock(&a->lock);
        wait_behind_held(a, 0, seq);
        pthread_mutex_unlock(&a->lock);
    }
    return seq;
}

int amap_alloc(mb_client *c, size_t size, void *stream, struct stitched **out)
{
    size_t fb = c->frame_bytes;
    if (size == 0 || size > SIZE_MAX - fb || !out)
        return MB_EINVAL;
    pthread_mutex_lock(&c->flock);
    struct amap *a = amap_get(c);
    int rc;
    if (!a) {
        rc = c->large_frames ? stitch_alloc_large(c, size, MB_MAX_ORDER, 0, out)
                             : stitch_alloc(c, size, size, out);
        pthread_mutex_unlock(&c->flock);
        return rc;
    }
    pthread_mutex_lock(&a->lock);
    rc = a->error;
    __atomic_store_n(&a->error, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&a->lock);
    struct stitched *s = NULL;
    struct amap_job *j = rc ? NULL : calloc(1, sizeof(*j));
    if (!j) {
        pthread_mutex_unlock(&c->flock);
        return rc ? rc : MB_ENOMEM;
    }
    if (c->large_frames) {
        /* The frame plan's few frames, cached or granted now. */
        rc = stitch_take_large(c, size, &s);
    } else {
        rc = stitch_take_units(c, (size + fb - 1) / fb, &s);
    }
    if (rc == 0 && (rc = c->be->ops->reserve(c->be, s->reserved, &s->va)) != 0) {
        for (size_t i = 0; i < s->n; i++)
            fcache_put(c, s->frames[i]);
        free(s);
    }
    if (rc == 0)
        c->fst.bytes_mapped += s->bytes;
    pthread_mutex_unlock(&c->flock);
    if (rc != 0) {
        free(j);
        return rc;
    }
    j->s = s;
    j->n = s->n;
    enqueue(c, a, j, stream);
    *out = s;
    return 0;
}

int amap_run_async(mb_client *c, void *stream, int (*run)(void *arg, bool fail), void *arg,
                   uint32_t *seq)
{
    struct amap *a = amap_get(c);
    if (!a)
        return MB_ENOENT;
    struct amap_job *j = calloc(1, sizeof(*j));
    if (!j)
        return MB_ENOMEM;
    j->run = run;
    j->arg = arg;
    *seq = enqueue(c, a, j, stream);
    return 0;
}

int amap_gate(mb_client *c, void *stream, uint32_t seq)
{
    struct amap *a = find(c, false);
    if (!a)
        return MB_ENOENT;
    return c->be->ops->stream_wait_value32(c->be, stream, a->flag_dev, seq);
}

void amap_settle(mb_client *c, struct stitched *s, bool *failed, bool *unmapped)
{
    *failed = *unmapped = false;
    struct amap *a = find(c, false);
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    /* In flight: wait until the mapper is done with it (only a range freed
     * before its own mapping finished waits here). */
    for (struct amap_job *j = a->head; j;) {
        if (j->s == s) {
            pthread_cond_wait(&a->done, &a->lock);
            j = a->head;   /* the queue changed: look again */
        } else {
            j = j->next;
        }
    }
    for (struct amap_job **jj = &a->failed; *jj; jj = &(*jj)->next) {
        if ((*jj)->s == s) {
            struct amap_job *j = *jj;
            *failed = true;
            *unmapped = j->unmapped;
            *jj = j->next;
            free(j);
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
}

void amap_drain(mb_client *c)
{
    struct amap *a = find(c, false);
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    while (a->head)
        pthread_cond_wait(&a->done, &a->lock);
    pthread_mutex_unlock(&a->lock);
}

void amap_throttle(mb_client *c, size_t most)
{
    struct amap *a = find(c, false);
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    wait_behind_held(a, most, a->next_seq + 1);   /* (a seq not queued yet: never done) */
    pthread_mutex_unlock(&a->lock);
}

size_t amap_in_flight(mb_client *c)
{
    struct amap *a = find(c, false);
    if (!a)
        return 0;
    pthread_mutex_lock(&a->lock);
    size_t n = a->queued;
    pthread_mutex_unlock(&a->lock);
    return n;
}

void amap_close(mb_client *c)
{
    struct amap *a = find(c, true);
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    a->stop = true;   /* the mapper finishes the queue first */
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->thread, NULL);
    while (a->failed) {
        struct amap_job *j = a->failed;
        a->failed = j->next;
        free(j);
    }
    a->be->ops->host_mapped_free(a->be, (void *)a->flag);
    pthread_cond_destroy(&a->done);
    pthread_cond_destroy(&a->wake);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
