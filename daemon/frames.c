/* frames.c: the daemon's frame books: creating frames within the budget
 * (ahead of demand on worker threads: the warm reserve), granting them to
 * sessions, taking them back, scrubbing between tenants. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "daemon.h"
#include "log.h"

#ifdef MB_DEBUG
#define POOL_CHECK(p) do { if (!frame_pool_is_valid(p)) abort(); } while (0)
#else
#define POOL_CHECK(p) ((void)0)
#endif

int frame_pool_init(struct frame_pool *p, mb_backend *be, size_t frame_bytes, uint64_t budget)
{
    memset(p, 0, sizeof(*p));
    p->be = be;
    p->frame_bytes = frame_bytes;
    p->budget_bytes = budget;
    p->cap = 1024;
    p->frames = calloc(p->cap, sizeof(*p->frames));
    p->next_unused = 1;
    p->journal_fd = -1;
    p->scrub = true;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    return p->frames ? 0 : MB_ENOMEM;
}

void frame_pool_destroy(struct frame_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_workers; i++)
        pthread_join(p->workers[i], NULL);
    for (uint32_t i = 0; i < p->n_ready; i++)
        p->be->ops->release(p->be, &p->ready[i]);
    free(p->ready);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    for (uint32_t id = 1; id < p->next_unused; id++)
        if (p->frames[id].state != FRAME_UNUSED && !p->frames[id].adopted)
            p->be->ops->release(p->be, &p->frames[id].mem);
    if (p->journal_fd >= 0)
        close(p->journal_fd);
    free(p->frames);
    memset(p, 0, sizeof(*p));
}

struct frame *frame_pool_get(struct frame_pool *p, uint32_t id)
{
    if (id == 0 || id >= p->next_unused || p->frames[id].state == FRAME_UNUSED)
        return NULL;
    return &p->frames[id];
}

/* An adopted frame has no handle here: when let go its slot ends and its
 * bytes leave the books (the memory went with its last process). */
static void end_adopted(struct frame_pool *p, uint32_t id)
{
    struct frame *f = &p->frames[id];
    memset(f, 0, sizeof(*f));
    f->mem = (struct mb_mem)MB_MEM_INIT;
    p->n_total--;
    p->bytes_total -= p->frame_bytes;
    pthread_mutex_lock(&p->lock);
    p->committed -= p->frame_bytes;
    pthread_mutex_unlock(&p->lock);
}

static void push_free(struct frame_pool *p, uint32_t id)
{
    struct frame *f = &p->frames[id];
    if (f->adopted) {
        end_adopted(p, id);
        return;
    }
    f->state = FRAME_FREE;
    f->owner = 0;
    f->next_free = p->free_head;
    p->free_head = id;
    __atomic_add_fetch(&p->n_free, 1, __ATOMIC_RELAXED);   /* read by reserve workers */
}

/* Count one frame against the budget (and the descriptor limit) before
 * creating it. */
static int commit_one(struct frame_pool *p)
{
    pthread_mutex_lock(&p->lock);
    int rc = p->committed + p->frame_bytes > p->budget_bytes ? MB_ENOMEM : 0;
    if (rc == 0 && p->max_frames && p->committed / p->frame_bytes + 1 > p->max_frames) {
        static bool said;
        if (!said)
            mb_log(MB_LOG_WARN, "frame count at the descriptor limit (%u frames); raise "
                   "LimitNOFILE or use larger frames", p->max_frames);
        said = true;
        rc = MB_ELIMIT;
    }
    if (rc == 0)
        p->committed += p->frame_bytes;
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static void uncommit_one(struct frame_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->committed -= p->frame_bytes;
    pthread_mutex_unlock(&p->lock);
}

static int make_mem(struct frame_pool *p, struct mb_mem *m)
{
    *m = (struct mb_mem)MB_MEM_INIT;
    int rc = p->be->ops->create(p->be, p->frame_bytes, m);
    if (rc == 0 && (rc = p->be->ops->export_fd(p->be, m)) != 0)
        p->be->ops->release(p->be, m);
    return rc;
}

/* Ids handed out in one journal write, so the journal is written rarely. */
#define JOURNAL_STEP 4096u

static int write_journal(struct frame_pool *p, uint32_t limit)
{
    char line[64];
    int n = snprintf(line, sizeof(line), "next_id %u\n", limit);
    if (pwrite(p->journal_fd, line, (size_t)n, 0) != n || ftruncate(p->journal_fd, n) != 0 ||
        fdatasync(p->journal_fd) != 0) {
        mb_log(MB_LOG_ERR, "failed to write the state journal: %s", strerror(errno));
        return MB_ESYS;
    }
    p->journal_limit = limit;
    return 0;
}

int frame_pool_open_journal(struct frame_pool *p, const char *path)
{
    p->journal_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (p->journal_fd < 0) {
        mb_log(MB_LOG_ERR, "failed to open the state journal %s: %s", path, strerror(errno));
        return MB_ESYS;
    }
    char buf[64] = "";
    ssize_t n = pread(p->journal_fd, buf, sizeof(buf) - 1, 0);
    unsigned long prev = 0;
    if (n > 0 && sscanf(buf, "next_id %lu", &prev) != 1) {
        mb_log(MB_LOG_ERR, "%s: not a MoonBright state journal", path);
        return MB_EINVAL;
    }
    if (prev >= UINT32_MAX - JOURNAL_STEP) {
        mb_log(MB_LOG_ERR, "%s: frame ids exhausted (%lu)", path, prev);
        return MB_EINVAL;
    }
    if (prev > 1) {
        /* Ids below prev may still be held by clients of the last daemon:
         * they can report them; new frames start above. */
        p->id_limit = (uint32_t)prev;
        while (p->cap <= p->id_limit) {
            struct frame *nf = realloc(p->frames, 2 * (size_t)p->cap * sizeof(*nf));
            if (!nf)
                return MB_ENOMEM;
            memset(nf + p->cap, 0, p->cap * sizeof(*nf));
            p->frames = nf;
            p->cap *= 2;
        }
        p->next_unused = p->id_limit;
        mb_log(MB_LOG_INFO, "state journal: ids below %u may be reported by running clients", p->id_limit);
    }
    return write_journal(p, p->next_unused + JOURNAL_STEP);
}

/* Put a created, exported, committed mem into a new slot on the free list. */
static int add_frame(struct frame_pool *p, const struct mb_mem *m)
{
    if (p->journal_fd >= 0 && p->next_unused >= p->journal_limit &&
        write_journal(p, p->next_unused + JOURNAL_STEP) != 0)
        return MB_ESYS;
    if (p->next_unused == p->cap) {
        if (p->cap >= UINT32_MAX / 2)
            return MB_ELIMIT;
        struct frame *nf = realloc(p->frames, 2 * (size_t)p->cap * sizeof(*nf));
        if (!nf)
            return MB_ENOMEM;
        memset(nf + p->cap, 0, p->cap * sizeof(*nf));
        p->frames = nf;
        p->cap *= 2;
    }
    uint32_t id = p->next_unused;
    struct frame *f = &p->frames[id];
    memset(f, 0, sizeof(*f));
    f->mem = *m;
    p->next_unused++;
    p->n_total++;
    p->bytes_total += p->frame_bytes;
    push_free(p, id);
    return 0;
}


/* Create one frame on the request path (the reserve ran dry). */
static int create_frame(struct frame_pool *p)
{
    int rc = commit_one(p);
    if (rc != 0)
        return rc;
    struct mb_mem m;
    if ((rc = make_mem(p, &m)) != 0) {
        uncommit_one(p);
        return rc;
    }
    if ((rc = add_frame(p, &m)) != 0) {
        p->be->ops->release(p->be, &m);
        uncommit_one(p);
    }
    return rc;
}

/* A reserve worker: sleep while free and ready frames cover the target (the
 * free count is read without the poll loop's cooperation: a hint). */
static void *reserve_worker(void *arg)
{
    struct frame_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        uint64_t have = ((uint64_t)__atomic_load_n(&p->n_free, __ATOMIC_RELAXED) + p->n_ready +
                         p->creating) * p->frame_bytes;
        if (have >= p->reserve_bytes || p->committed + p->frame_bytes > p->budget_bytes ||
            (p->max_frames && p->committed / p->frame_bytes + 1 > p->max_frames)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&p->wake, &p->lock, &ts);
            continue;
        }
        p->committed += p->frame_bytes;
        p->creating++;
        pthread_mutex_unlock(&p->lock);
        struct mb_mem m;
        int rc = make_mem(p, &m);
        pthread_mutex_lock(&p->lock);
        p->creating--;
        if (rc == 0 && p->n_ready == p->ready_cap) {
            uint32_t cap = p->ready_cap ? 2 * p->ready_cap : 64;
            struct mb_mem *nr = realloc(p->ready, cap * sizeof(*nr));
            if (nr) {
                p->ready = nr;
                p->ready_cap = cap;
            }
        }
        pthread_cond_broadcast(&p->wake);   /* a grant may wait for creating == 0 */
        if (rc == 0 && p->n_ready < p->ready_cap) {
            p->ready[p->n_ready++] = m;
            continue;
        }
        if (rc == 0)
            p->be->ops->release(p->be, &m);
        p->committed -= p->frame_bytes;
        mb_log(MB_LOG_WARN, "failed to add a frame to the warm reserve: %s; retrying in 1 s",
               mb_strerror(rc ? rc : MB_ENOMEM));
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&p->wake, &p->lock, &ts);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Wait until no worker is creating a frame; true when one was. */
static bool wait_for_workers(struct frame_pool *p)
{
    pthread_mutex_lock(&p->lock);
    bool waited = p->creating > 0;
    while (p->creating > 0)
        pthread_cond_wait(&p->wake, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return waited;
}

int frame_pool_prefill(struct frame_pool *p, uint64_t bytes)
{
    p->reserve_bytes = bytes;
    for (; p->n_workers < RESERVE_THREADS; p->n_workers++) {
        int e = pthread_create(&p->workers[p->n_workers], NULL, reserve_worker, p);
        if (e != 0) {
            mb_log(MB_LOG_ERR, "failed to start a reserve worker: %s", strerror(e));
            return p->n_workers ? 0 : MB_ESYS;
        }
    }
    return 0;
}

void frame_pool_adopt(struct frame_pool *p)
{
    pthread_mutex_lock(&p->lock);
    uint32_t i = 0;
    for (; i < p->n_ready; i++)
        if (add_frame(p, &p->ready[i]) != 0)
            break;
    if (i && i < p->n_ready)
        memmove(p->ready, p->ready + i, (p->n_ready - i) * sizeof(*p->ready));
    p->n_ready -= i;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    POOL_CHECK(p);
}

int frame_pool_grant(struct frame_pool *p, uint32_t n, uint64_t session, uint32_t tenant,
                     uint32_t *ids)
{
    if (n == 0 || session == 0)
        return MB_EINVAL;
    if ((uint64_t)n * p->frame_bytes > p->budget_bytes)
        return MB_ENOMEM;
    /* All or nothing: make sure enough frames exist before taking any:
     * the free list, then the warm reserve, then the driver. */
    if (p->n_free < n || p->n_workers)
        frame_pool_adopt(p);
    while (p->n_free < n) {
        int rc = create_frame(p);
        if (rc == MB_ENOMEM && wait_for_workers(p)) {
            frame_pool_adopt(p);   /* what they were making counted against the budget */
            continue;
        }
        if (rc != 0)
            return rc;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = p->free_head;
        struct frame *f = &p->frames[id];
        if (p->scrub && f->last_tenant != 0 && f->last_tenant != tenant) {
            int rc = p->be->ops->scrub(p->be, &f->mem);
            if (rc != 0) {
                /* Never hand out unscrubbed memory: undo the partial grant. */
                frame_pool_return(p, ids, i, session);
                return rc;
            }
            p->scrubs++;
        }
        p->free_head = f->next_free;
        __atomic_sub_fetch(&p->n_free, 1, __ATOMIC_RELAXED);
        f->next_free = 0;
        f->state = FRAME_GRANTED;
        f->owner = session;
        f->last_tenant = tenant;
        p->n_granted++;
        ids[i] = id;
    }
    POOL_CHECK(p);
    return 0;
}

/* The owner lets go: free, unless importers still hold the frame. */
static void let_go(struct frame_pool *p, uint32_t id)
{
    struct frame *f = &p->frames[id];
    if (f->holders) {
        f->owner = 0;
        return;
    }
    p->n_granted--;
    push_free(p, id);
}

void frame_pool_drop_hold(struct frame_pool *p, uint32_t id)
{
    struct frame *f = frame_pool_get(p, id);
    if (!f || f->state != FRAME_GRANTED || f->holders == 0)
        return;
    if (--f->holders == 0 && f->owner == 0) {
        p->n_granted--;
        push_free(p, id);
    }
    POOL_CHECK(p);
}

int frame_pool_return(struct frame_pool *p, const uint32_t *ids, size_t n, uint64_t session)
{
    for (size_t i = 0; i < n; i++) {
        struct frame *f = frame_pool_get(p, ids[i]);
        if (!f)
            return MB_ENOENT;
        if (f->state != FRAME_GRANTED || f->owner != session)
            return MB_EPERM;
        for (size_t j = 0; j < i; j++)
            if (ids[j] == ids[i])
                return MB_EINVAL;   /* the same frame twice */
    }
    for (size_t i = 0; i < n; i++)
        let_go(p, ids[i]);
    POOL_CHECK(p);
    return 0;
}

int frame_pool_adopt_reported(struct frame_pool *p, uint32_t id, uint64_t bytes, uint64_t session,
                              uint32_t tenant)
{
    if (id == 0 || bytes != p->frame_bytes || id >= p->id_limit)
        return MB_EINVAL;   /* no earlier daemon handed this out */
    if (p->frames[id].state != FRAME_UNUSED)
        return MB_EPERM;    /* someone else reported it first */
    int rc = commit_one(p);
    if (rc != 0)
        return rc;
    struct frame *f = &p->frames[id];
    memset(f, 0, sizeof(*f));
    f->mem = (struct mb_mem)MB_MEM_INIT;
    f->state = FRAME_GRANTED;
    f->owner = session;
    f->last_tenant = tenant;
    f->adopted = true;
    p->n_total++;
    p->n_granted++;
    p->bytes_total += p->frame_bytes;
    POOL_CHECK(p);
    return 0;
}

uint32_t frame_pool_reclaim(struct frame_pool *p, uint64_t session)
{
    uint32_t n = 0;
    for (uint32_t id = 1; id < p->next_unused; id++) {
        struct frame *f = &p->frames[id];
        if (f->state == FRAME_GRANTED && f->owner == session) {
            let_go(p, id);
            n++;
        }
    }
    POOL_CHECK(p);
    return n;
}

bool frame_pool_is_valid(const struct frame_pool *p)
{
    uint32_t total = 0, granted = 0, free_count = 0;
    for (uint32_t id = 1; id < p->next_unused; id++) {
        const struct frame *f = &p->frames[id];
        if (f->state == FRAME_UNUSED)
            continue;
        total++;
        if (f->state == FRAME_GRANTED && f->owner == 0 && f->holders == 0)
            return false;
        if (f->state != FRAME_GRANTED && f->holders)
            return false;
        granted += f->state == FRAME_GRANTED;
    }
    for (uint32_t id = p->free_head; id; id = p->frames[id].next_free) {
        if (id >= p->next_unused || p->frames[id].state != FRAME_FREE || ++free_count > total)
            return false;
    }
    return total == p->n_total && granted == p->n_granted && free_count == p->n_free &&
           p->n_free + p->n_granted == p->n_total &&
           (uint64_t)p->n_total * p->frame_bytes == p->bytes_total &&
           p->bytes_total <= p->budget_bytes;
}
