/* frames.c: the daemon's frame books: creating frames within the budget,
 * granting them to sessions, taking them back, scrubbing between tenants. */
#include <stdlib.h>
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
    p->scrub = true;
    return p->frames ? 0 : MB_ENOMEM;
}

void frame_pool_destroy(struct frame_pool *p)
{
    for (uint32_t id = 1; id < p->next_unused; id++)
        if (p->frames[id].state != FRAME_UNUSED)
            p->be->ops->release(p->be, &p->frames[id].mem);
    free(p->frames);
    memset(p, 0, sizeof(*p));
}

struct frame *frame_pool_get(struct frame_pool *p, uint32_t id)
{
    if (id == 0 || id >= p->next_unused || p->frames[id].state == FRAME_UNUSED)
        return NULL;
    return &p->frames[id];
}

static void push_free(struct frame_pool *p, uint32_t id)
{
    struct frame *f = &p->frames[id];
    f->state = FRAME_FREE;
    f->owner = 0;
    f->next_free = p->free_head;
    p->free_head = id;
    p->n_free++;
}

/* Create and export one frame into a new slot; it joins the free list. */
static int create_frame(struct frame_pool *p)
{
    if (p->bytes_total + p->frame_bytes > p->budget_bytes)
        return MB_ENOMEM;
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
    struct mb_mem m = MB_MEM_INIT;
    int rc = p->be->ops->create(p->be, p->frame_bytes, &m);
    if (rc == 0 && (rc = p->be->ops->export_fd(p->be, &m)) != 0)
        p->be->ops->release(p->be, &m);
    if (rc != 0)
        return rc;
    memset(f, 0, sizeof(*f));
    f->mem = m;
    p->next_unused++;
    p->n_total++;
    p->bytes_total += p->frame_bytes;
    push_free(p, id);
    return 0;
}

int frame_pool_prefill(struct frame_pool *p, uint64_t bytes)
{
    int rc = 0;
    while (rc == 0 && (uint64_t)p->n_free * p->frame_bytes < bytes)
        rc = create_frame(p);
    POOL_CHECK(p);
    return rc == MB_ENOMEM && p->n_free ? 0 : rc;
}

int frame_pool_grant(struct frame_pool *p, uint32_t n, uint64_t session, uint32_t tenant,
                     uint32_t *ids)
{
    if (n == 0 || session == 0)
        return MB_EINVAL;
    if ((uint64_t)n * p->frame_bytes > p->budget_bytes)
        return MB_ENOMEM;
    /* All or nothing: make sure enough frames exist before taking any. */
    while (p->n_free < n) {
        int rc = create_frame(p);
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
        p->n_free--;
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
    for (size_t i = 0; i < n; i++) {
        p->n_granted--;
        push_free(p, ids[i]);
    }
    POOL_CHECK(p);
    return 0;
}

uint32_t frame_pool_reclaim(struct frame_pool *p, uint64_t session)
{
    uint32_t n = 0;
    for (uint32_t id = 1; id < p->next_unused; id++) {
        struct frame *f = &p->frames[id];
        if (f->state == FRAME_GRANTED && f->owner == session) {
            p->n_granted--;
            push_free(p, id);
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
        if (f->state == FRAME_GRANTED && f->owner == 0)
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
