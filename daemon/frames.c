/* frames.c: the daemon's frame books: creating frames of each order within
 * the budget (ahead of demand on worker threads: the warm reserve, whose
 * target follows recent grants), granting them to sessions by the frame
 * plan, keeping free frames on their last uid's list (never granted to
 * another uid), taking them back, re-creating free frames as another order
 * when the budget is full, releasing idle ones, scrubbing between tenants,
 * and the state journal. The size policy is in common/frame_plan.c.
 * Inside this file a frame is named by its slot (frames[slot]); callers
 * name it by its id, the slot and the slot's generation (daemon.h): the
 * functions they call turn one into the other (slot_of, frame_id). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <string.h>

#include <moonbright/status.h>

#include "daemon.h"
#include "log.h"

#ifdef MB_DEBUG
#define POOL_CHECK(p) do { if (!frame_pool_is_valid(p)) abort(); } while (0)
#else
#define POOL_CHECK(p) ((void)0)
#endif

static uint64_t obytes(const struct frame_pool *p, unsigned order)
{
    return (uint64_t)p->frame_bytes << order;
}

/* The id of the frame in `slot`. */
static uint32_t frame_id(const struct frame_pool *p, uint32_t slot)
{
    return slot | (uint32_t)p->frames[slot].gen << FRAME_SLOT_BITS;
}

/* Slot `slot` holds a frame. */
static bool slot_used(const struct frame_pool *p, uint32_t slot)
{
    return slot != 0 && slot < p->next_unused && p->frames[slot].state != FRAME_UNUSED;
}

/* The slot of the frame `id` names, 0 when it names none. */
static uint32_t slot_of(const struct frame_pool *p, uint32_t id)
{
    uint32_t slot = frame_id_slot(id);
    return slot_used(p, slot) && p->frames[slot].gen == frame_id_gen(id) ? slot : 0;
}

uint64_t frame_pool_bytes(const struct frame_pool *p, uint32_t id)
{
    uint32_t slot = slot_of(p, id);
    return slot ? obytes(p, p->frames[slot].order) : 0;
}

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
    p->idle_ms = 5000;
    p->free_descriptors_max = FREE_DESCRIPTORS_MAX;
    p->spare_share = SPARE_SHARE;
    p->exported_held_min = EXPORTED_HELD_MIN;
    p->exported_order_min = EXPORTED_ORDER_MIN;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    return p->frames ? 0 : MB_ENOMEM;
}

/* The journal: a header line ("next_id N epoch E", JOURNAL_HEAD bytes: no
 * slot at or above N is in use; E counts the daemons that used the file)
 * and, from JOURNAL_RECORDS, one record per slot: the uid that was granted
 * its frame (plus one; 0: none), the last other uid that imported it (plus
 * one; 0: none), its order, the slot's generation and the epoch of the
 * daemon that wrote the record. A frame keeps one uid for its life, so a
 * record is written when a fresh frame is first granted (and when another
 * uid imports it, and when a daemon books it after a restart) and cleared,
 * keeping the slot's next generation, when the frame ends. Records need
 * no fsync: they matter after a daemon exit, not after a host crash (which
 * ends the clients too). */
#define JOURNAL_HEAD 64
#define JOURNAL_RECORDS 4096
struct journal_rec {
    uint32_t uid_plus1;
    uint32_t importer_plus1;
    uint8_t order;
    uint8_t pad;
    uint16_t gen;                /* the slot's generation (0 in journals of daemons
                                  * that never reused slots) */
    uint32_t epoch;              /* of the daemon that wrote it (0 in those journals) */
};

static off_t record_off(uint32_t slot)
{
    return JOURNAL_RECORDS + (off_t)slot * (off_t)sizeof(struct journal_rec);
}

/* The generation a slot takes after gen. */
static uint16_t next_gen(uint16_t gen)
{
    return (uint16_t)((gen + 1u) % FRAME_GENS);
}

/* Write slot's record r under this daemon's epoch. */
static void journal_write(struct frame_pool *p, uint32_t slot, struct journal_rec r)
{
    if (p->journal_fd < 0)
        return;
    r.epoch = p->epoch;
    if (pwrite(p->journal_fd, &r, sizeof(r), record_off(slot)) != (ssize_t)sizeof(r))
        mb_log(MB_LOG_WARN, "failed to write slot %u to the state journal: %s", slot, strerror(errno));
}

/* Write the record of the frame in `slot` (f NULL: clear it, keeping the
 * slot's generation). */
static void journal_record(struct frame_pool *p, uint32_t slot, const struct frame *f)
{
    struct journal_rec r = { .gen = p->frames[slot].gen };
    if (f) {
        r.uid_plus1 = (uint32_t)f->last_uid + 1;
        r.importer_plus1 = f->tainted ? (uint32_t)f->importer_uid + 1 : 0;
        r.order = f->order;
    }
    journal_write(p, slot, r);
}

/* What the journal says about id: 0 and *r, or MB_ENOENT when no uid was
 * granted it (its slot's record is clear, or of another generation).
 * Without a journal (tests) every id reads as unknown but allowed:
 * MB_EINVAL. */
static int journal_lookup(struct frame_pool *p, uint32_t id, struct journal_rec *r)
{
    if (p->journal_fd < 0)
        return MB_EINVAL;
    memset(r, 0, sizeof(*r));
    ssize_t n = pread(p->journal_fd, r, sizeof(*r), record_off(frame_id_slot(id)));
    return n == (ssize_t)sizeof(*r) && r->uid_plus1 != 0 && r->gen == frame_id_gen(id)
               ? 0 : MB_ENOENT;
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
    for (uint32_t i = 0; i < p->n_release_q; i++)
        p->be->ops->release(p->be, &p->release_q[i]);
    free(p->release_q);
    for (uint32_t i = 0; i < p->n_rex_done; i++)
        if (p->rex_done[i].fd >= 0)
            close(p->rex_done[i].fd);
    free(p->rex);
    free(p->rex_done);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    /* Journal records stay: at exit the daemon's sessions end first, but
     * their processes may live on and report their frames to the next
     * daemon. A uid's records cover at most the frames it held at once and
     * its own free frames, which no other uid gets. */
    for (uint32_t slot = 1; slot < p->next_unused; slot++) {
        struct frame *f = &p->frames[slot];
        if (f->state != FRAME_UNUSED && !f->adopted)
            p->be->ops->release(p->be, &f->mem);
    }
    if (p->journal_fd >= 0)
        close(p->journal_fd);
    for (uint32_t i = 0; i < p->n_by_uid; i++)
        free(p->by_uid[i]);
    free(p->by_uid);
    free(p->frames);
    memset(p, 0, sizeof(*p));
}

uint32_t frame_pool_exported_held(const struct frame_pool *p)
{
    uint32_t n = 0;
    for (unsigned k = 0; k < MB_ORDERS; k++)
        n += __atomic_load_n(&p->n_exported_held_order[k], __ATOMIC_RELAXED);
    return n;
}

/* Fresh free frames (each holds its descriptor). */
static uint32_t fresh_free(const struct frame_pool *p)
{
    uint32_t fresh = 0;
    for (unsigned k = 0; k < MB_ORDERS; k++)
        fresh += __atomic_load_n(&p->fresh.n[k], __ATOMIC_RELAXED);
    return fresh;
}

/* The descriptors the books hold (main thread): fresh free frames',
 * returned free frames' and granted frames' (those being exported again
 * or made by the workers are not in the books yet). */
static uint32_t descriptors_booked(const struct frame_pool *p)
{
    return fresh_free(p) + frame_pool_exported_held(p) + p->n_granted_fd;
}

int frame_pool_export_passed(struct frame_pool *p, struct frame *f)
{
    uint64_t t0 = mb_now_ns();
    int rc = p->be->ops->export_fd(p->be, &f->mem);
    p->last.reexported++;
    p->last.reexport_ns += mb_now_ns() - t0;
    p->reexports++;
    if (rc == 0)
        p->n_granted_fd++;
    return rc;
}

/* The GRANTED frame f lets go of the daemon's descriptor (it has one). */
static void unexport_granted(struct frame_pool *p, struct frame *f)
{
    p->be->ops->unexport(p->be, &f->mem);
    p->n_granted_fd--;
}

void frame_pool_passed(struct frame_pool *p, struct frame *f)
{
    if (!p->unexport || f->mem.fd < 0 ||
        (p->keep_granted && descriptors_booked(p) <= p->free_descriptors_max))
        return;
    unexport_granted(p, f);
}

/* One granted frame's descriptor goes: the first after drop_cursor, the
 * slot of the last one that went (n_granted_fd > 0: there is one). */
static void drop_granted_fd(struct frame_pool *p)
{
    uint32_t n = p->next_unused - 1;   /* slots 1 .. n */
    for (uint32_t i = 1; i <= n; i++) {
        uint32_t slot = 1 + (p->drop_cursor + i - 1) % n;
        struct frame *f = &p->frames[slot];
        if (f->state == FRAME_GRANTED && f->mem.fd >= 0) {
            unexport_granted(p, f);
            p->exports_dropped++;
            p->drop_cursor = slot;
            return;
        }
    }
}

uint32_t frame_pool_exported(const struct frame_pool *p)
{
    uint32_t n = 0;
    for (uint32_t slot = 1; slot < p->next_unused && slot < p->cap; slot++)
        n += p->frames[slot].state != FRAME_UNUSED && p->frames[slot].mem.fd >= 0;
    return n;
}

struct frame *frame_pool_get(struct frame_pool *p, uint32_t id)
{
    uint32_t slot = slot_of(p, id);
    return slot ? &p->frames[slot] : NULL;
}

struct frame *frame_pool_at(struct frame_pool *p, uint32_t slot, uint32_t *id)
{
    if (!slot_used(p, slot))
        return NULL;
    *id = frame_id(p, slot);
    return &p->frames[slot];
}

/* Count a frame of `bytes` against the budget (and the descriptor limit)
 * before creating it. When it does not fit, *deficit (if not NULL) gets
 * the bytes the budget lacks (0 when only the frame count stops it). */
static int commit(struct frame_pool *p, uint64_t bytes, uint64_t *deficit)
{
    pthread_mutex_lock(&p->lock);
    uint64_t over = p->committed + bytes > p->budget_bytes ? p->committed + bytes - p->budget_bytes : 0;
    if (deficit)
        *deficit = over;
    int rc = over ? MB_ENOMEM : 0;
    if (rc == 0 && p->max_frames && p->n_committed + 1 > p->max_frames) {
        static bool said;
        if (!said)
            mb_log(MB_LOG_WARN, "frame count at the descriptor limit (%u frames); raise "
                   "LimitNOFILE or use larger frames", p->max_frames);
        said = true;
        rc = MB_ELIMIT;
    }
    if (rc == 0) {
        p->committed += bytes;
        p->n_committed++;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static void uncommit(struct frame_pool *p, uint64_t bytes)
{
    pthread_mutex_lock(&p->lock);
    p->committed -= bytes;
    p->n_committed--;
    pthread_cond_broadcast(&p->wake);   /* room for the reserve again */
    pthread_mutex_unlock(&p->lock);
}

/* The entries of the frame in `slot` in the export queue go (p->lock held). */
static void drop_todo_held(struct frame_pool *p, uint32_t slot)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < p->n_rex_todo; i++) {
        if (p->rex[i].slot != slot)
            p->rex[k++] = p->rex[i];
        else
            p->n_rex_todo_order[p->rex[i].order]--;
    }
    p->n_rex_todo = k;
}

/* The frame in `slot` (handle h) ends: its re-export entries go, and a worker's
 * export of h in flight is waited for; a descriptor it made is closed.
 * p->lock held. */
static void forget_exports_held(struct frame_pool *p, uint32_t slot, uint64_t h)
{
    drop_todo_held(p, slot);
    for (;;) {
        bool busy = false;
        for (uint32_t i = 0; i < p->n_rex_busy; i++)
            busy = busy || p->rex_busy[i].h == h;
        if (!busy)
            break;
        pthread_cond_wait(&p->wake, &p->lock);
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < p->n_rex_done; i++) {
        if (p->rex_done[i].slot != slot)
            p->rex_done[k++] = p->rex_done[i];
        else if (p->rex_done[i].fd >= 0)
            close(p->rex_done[i].fd);
    }
    p->n_rex_done = k;
}

/* Unused slot `slot` joins the queue of slots to reuse (at its tail). */
static void queue_reuse(struct frame_pool *p, uint32_t slot)
{
    p->frames[slot].reusable = true;
    p->frames[slot].next_free = 0;
    if (p->reuse_tail)
        p->frames[p->reuse_tail].next_free = slot;
    else
        p->reuse_head = slot;
    p->reuse_tail = slot;
    p->n_reusable++;
}

/* A frame leaves the books: its handle is released (an adopted frame has
 * none: the memory went with its last process), by a worker while the
 * tick defers releases, and its slot ends. */
static void end_frame(struct frame_pool *p, uint32_t slot)
{
    struct frame *f = &p->frames[slot];
    uint64_t bytes = obytes(p, f->order);
    bool queued = false;
    if (!f->adopted && p->n_workers) {
        pthread_mutex_lock(&p->lock);
        forget_exports_held(p, slot, f->mem.h);
        if (p->defer_release && p->n_release_q == p->release_q_cap) {
            uint32_t cap = p->release_q_cap ? 2 * p->release_q_cap : 16;
            struct mb_mem *nq = realloc(p->release_q, cap * sizeof(*nq));
            if (nq) {
                p->release_q = nq;
                p->release_q_cap = cap;
            }
        }
        if (p->defer_release && p->n_release_q < p->release_q_cap) {
            p->release_q[p->n_release_q++] = f->mem;   /* (committed until released) */
            pthread_cond_broadcast(&p->wake);
            queued = true;
        }
        pthread_mutex_unlock(&p->lock);
    }
    if (!f->adopted && !queued)
        p->be->ops->release(p->be, &f->mem);
    bool held = f->held;
    uint16_t gen = f->gen;
    memset(f, 0, sizeof(*f));
    f->mem = (struct mb_mem)MB_MEM_INIT;
    /* The slot is reused, oldest first, with the next generation (which
     * its cleared record keeps across a restart). */
    f->gen = next_gen(gen);
    if (held)
        journal_record(p, slot, NULL);
    queue_reuse(p, slot);
    p->n_total--;
    p->bytes_total -= bytes;
    if (!queued)
        uncommit(p, bytes);
}

/* The free list of a uid; created when `make` (NULL when out of memory or
 * absent). Lists are few (one per uid that returned frames). */
static struct free_list *uid_list(struct frame_pool *p, uid_t uid, bool make)
{
    for (uint32_t i = 0; i < p->n_by_uid; i++)
        if (p->by_uid[i]->uid == uid)
            return p->by_uid[i];
    if (!make)
        return NULL;
    if (p->n_by_uid == p->cap_by_uid) {
        uint32_t cap = p->cap_by_uid ? 2 * p->cap_by_uid : 8;
        struct free_list **nl = realloc(p->by_uid, cap * sizeof(*nl));
        if (!nl)
            return NULL;
        p->by_uid = nl;
        p->cap_by_uid = cap;
    }
    struct free_list *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->uid = uid;
    p->by_uid[p->n_by_uid++] = l;
    return l;
}

/* Append r to a queue (lock held); false when out of memory. */
static bool rex_push(struct rex **q, uint32_t *n, uint32_t *cap, struct rex r)
{
    if (*n == *cap) {
        uint32_t c = *cap ? 2 * *cap : 64;
        struct rex *nq = realloc(*q, c * sizeof(*nq));
        if (!nq)
            return false;
        *q = nq;
        *cap = c;
    }
    (*q)[(*n)++] = r;
    return true;
}

/* Workers export returned free frames again ahead of grants (frames
 * passed on lose their descriptor, and the queue is on). */
static bool exports_ahead(const struct frame_pool *p)
{
    return p->unexport && p->export_ahead && p->n_workers;
}

/* A free frame without a descriptor goes to the workers to be exported
 * again (without workers, the grant that takes it exports it). */
static void queue_export(struct frame_pool *p, uint32_t slot)
{
    const struct frame *f = &p->frames[slot];
    if (f->mem.fd >= 0 || !exports_ahead(p))
        return;
    pthread_mutex_lock(&p->lock);
    if (rex_push(&p->rex, &p->n_rex_todo, &p->rex_cap, (struct rex){ slot, f->mem.h, -1, f->order })) {
        p->n_rex_todo_order[f->order]++;
        pthread_cond_broadcast(&p->wake);
    }
    pthread_mutex_unlock(&p->lock);
}

/* A grant took the free frame in `slot` without its descriptor (and exports it on
 * its path): its entry in the export queue goes. */
static void unqueue_export(struct frame_pool *p, uint32_t slot)
{
    if (!exports_ahead(p))
        return;
    pthread_mutex_lock(&p->lock);
    drop_todo_held(p, slot);
    pthread_mutex_unlock(&p->lock);
}

/* A free frame a uid held gains (+1) or loses (-1) its descriptor's
 * count (main thread; the workers read the counts as hints). */
static void count_exported_held(struct frame_pool *p, unsigned order, int d)
{
    __atomic_add_fetch(&p->n_exported_held_order[order], (uint32_t)d, __ATOMIC_RELAXED);
}

/* Link the free frame in `slot` at the head of chain c of its order on list l. */
static void chain_link(struct frame_pool *p, struct free_list *l, uint32_t slot, unsigned c)
{
    struct frame *f = &p->frames[slot];
    uint32_t *head = &l->head[c][f->order];
    f->prev_free = 0;
    f->next_free = *head;
    if (*head)
        p->frames[*head].prev_free = slot;
    *head = slot;
}

/* Unlink the free frame in `slot` from chain c of its order on list l. */
static void chain_unlink(struct frame_pool *p, struct free_list *l, uint32_t slot, unsigned c)
{
    struct frame *f = &p->frames[slot];
    if (f->prev_free)
        p->frames[f->prev_free].next_free = f->next_free;
    else
        l->head[c][f->order] = f->next_free;
    if (f->next_free)
        p->frames[f->next_free].prev_free = f->prev_free;
    f->next_free = f->prev_free = 0;
}

/* The free list of frame f: the fresh one, or its uid's (created when
 * `make`; NULL when out of memory or absent). */
static struct free_list *list_of(struct frame_pool *p, const struct frame *f, bool make)
{
    return f->held ? uid_list(p, f->last_uid, make) : &p->fresh;
}

static void push_free(struct frame_pool *p, uint32_t slot)
{
    struct frame *f = &p->frames[slot];
    struct free_list *l = list_of(p, f, true);
    if (f->adopted || f->tainted || !l) {
        /* Adopted: no handle. Tainted, or no list to keep it on: another
         * uid may keep its descriptor, so it must not be granted again. */
        if (!f->adopted)
            p->released_isolation++;
        end_frame(p, slot);
        return;
    }
    f->state = FRAME_FREE;
    f->owner = 0;
    f->freed_ms = mb_now_ms();
    chain_link(p, l, slot, f->mem.fd >= 0);
    __atomic_add_fetch(&l->n[f->order], 1, __ATOMIC_RELAXED);
    p->bytes_free += obytes(p, f->order);
    /* read by the reserve workers, as hints */
    __atomic_add_fetch(&p->n_free_order[f->order], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&p->n_free, 1, __ATOMIC_RELAXED);
    if (f->mem.fd >= 0 && f->held)
        count_exported_held(p, f->order, 1);
}

/* Take the free frame in `slot` off list l. */
static uint32_t unlink_free(struct frame_pool *p, struct free_list *l, uint32_t slot)
{
    struct frame *f = &p->frames[slot];
    unsigned order = f->order;
    chain_unlink(p, l, slot, f->mem.fd >= 0);
    __atomic_sub_fetch(&l->n[order], 1, __ATOMIC_RELAXED);
    p->bytes_free -= obytes(p, order);
    __atomic_sub_fetch(&p->n_free_order[order], 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&p->n_free, 1, __ATOMIC_RELAXED);
    if (f->mem.fd >= 0 && f->held)
        count_exported_held(p, f->order, -1);
    return slot;
}

/* The latest returned free frame of order k on list l (which has one),
 * from chain c if it has one, else from the other. */
static uint32_t first_free(const struct free_list *l, unsigned k, unsigned c)
{
    return l->head[c][k] ? l->head[c][k] : l->head[!c][k];
}

/* The one a grant takes: a frame that holds a descriptor first. */
static uint32_t next_free(const struct free_list *l, unsigned k)
{
    return first_free(l, k, 1);
}

/* Take that frame off list l. */
static uint32_t pop_free(struct frame_pool *p, struct free_list *l, unsigned order)
{
    return unlink_free(p, l, next_free(l, order));
}

/* Take a free frame of order k off list l (which has one) to release it:
 * one without a descriptor first (a grant would have to export it). */
static uint32_t pop_to_release(struct frame_pool *p, struct free_list *l, unsigned k)
{
    return unlink_free(p, l, first_free(l, k, 0));
}

/* Create and export one frame; ns (may be NULL) adds each step's time:
 * create, export. The daemon maps a frame itself only to scrub it (the
 * backend's scrub maps it once, kept until release): most frames never
 * change tenant, and a map here would add driver work, which other
 * processes' maps wait behind, to every frame made. */
static int make_mem(struct frame_pool *p, unsigned order, struct mb_mem *m, uint64_t ns[2])
{
    *m = (struct mb_mem)MB_MEM_INIT;
    uint64_t t[3];
    t[0] = mb_now_ns();
    int rc = p->be->ops->create(p->be, obytes(p, order), m);
    t[1] = mb_now_ns();
    if (rc == 0)
        rc = p->be->ops->export_fd(p->be, m);
    t[2] = mb_now_ns();
    for (int i = 0; ns && i < 2; i++)
        ns[i] += t[i + 1] - t[i];
    if (rc != 0 && m->bytes)
        p->be->ops->release(p->be, m);
    return rc;
}

/* Ids handed out in one journal write, so the journal is written rarely. */
#define JOURNAL_STEP 4096u

static int write_journal(struct frame_pool *p, uint32_t limit)
{
    char line[JOURNAL_HEAD];
    memset(line, ' ', sizeof(line));
    int n = snprintf(line, sizeof(line), "next_id %u epoch %u", limit, p->epoch);
    line[n] = ' ';
    line[sizeof(line) - 1] = '\n';
    if (pwrite(p->journal_fd, line, sizeof(line), 0) != (ssize_t)sizeof(line) ||
        fdatasync(p->journal_fd) != 0) {
        mb_log(MB_LOG_ERR, "failed to write the state journal: %s", strerror(errno));
        return MB_ESYS;
    }
    p->journal_limit = limit;
    p->journal_ahead_failed = false;
    return 0;
}

/* The table with n slots (n > cap): the new slots are zero (FRAME_UNUSED),
 * in calloc's pages, touched only as slots are used. */
static int set_cap(struct frame_pool *p, uint32_t n)
{
    struct frame *nf = calloc(n, sizeof(*nf));
    if (!nf)
        return MB_ENOMEM;
    memcpy(nf, p->frames, (size_t)p->cap * sizeof(*nf));
    free(p->frames);
    p->frames = nf;
    p->touched = p->cap;   /* the copy touched the old slots' pages, and only those */
    p->cap = n;
    return 0;
}

/* Room for slot `need`, doubling the table. */
static int grow_table(struct frame_pool *p, uint32_t need)
{
    uint32_t cap = p->cap;
    while (cap <= need) {
        if (cap >= UINT32_MAX / 2)
            return MB_ELIMIT;
        cap *= 2;
    }
    return cap == p->cap ? 0 : set_cap(p, cap);
}

int frame_pool_reserve_slots(struct frame_pool *p, uint32_t n)
{
    return n <= p->cap ? 0 : set_cap(p, n);
}

/* After a restart, the slots below id_limit: those whose record one of
 * the last JOURNAL_KEEP_EPOCHS daemons wrote are kept for the frames their
 * clients may report (a client may stay away while a daemon of another
 * frame size runs), under the generation of the record; the others are
 * queued for reuse, an older record cleared first. */
static int keep_reported_slots(struct frame_pool *p)
{
    enum { CHUNK = 4096 };
    struct journal_rec *r = malloc(CHUNK * sizeof(*r));
    if (!r)
        return MB_ENOMEM;
    for (uint32_t base = 0; base < p->id_limit; base += CHUNK) {
        uint32_t count = p->id_limit - base < CHUNK ? p->id_limit - base : CHUNK;
        memset(r, 0, count * sizeof(*r));
        if (pread(p->journal_fd, r, count * sizeof(*r), record_off(base)) < 0) {
            mb_log(MB_LOG_ERR, "failed to read the state journal: %s", strerror(errno));
            free(r);
            return MB_ESYS;
        }
        for (uint32_t i = base ? 0 : 1; i < count; i++) {
            uint32_t slot = base + i;
            struct frame *f = &p->frames[slot];
            f->gen = (uint16_t)(r[i].gen % FRAME_GENS);
            if (r[i].uid_plus1 && p->epoch - r[i].epoch <= JOURNAL_KEEP_EPOCHS)
                continue;   /* kept for its report */
            if (r[i].uid_plus1) {
                f->gen = next_gen(f->gen);
                journal_record(p, slot, NULL);
            }
            queue_reuse(p, slot);
        }
    }
    free(r);
    return 0;
}

int frame_pool_open_journal(struct frame_pool *p, const char *path)
{
    p->journal_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (p->journal_fd < 0) {
        mb_log(MB_LOG_ERR, "failed to open the state journal %s: %s", path, strerror(errno));
        return MB_ESYS;
    }
    char buf[JOURNAL_HEAD + 1] = "";
    ssize_t n = pread(p->journal_fd, buf, JOURNAL_HEAD, 0);
    unsigned long prev = 0, epoch = 0;
    if (n > 0 && sscanf(buf, "next_id %lu epoch %lu", &prev, &epoch) < 1) {
        mb_log(MB_LOG_ERR, "%s: not a MoonBright state journal", path);
        return MB_EINVAL;
    }
    if (prev > FRAME_SLOTS + JOURNAL_STEP || epoch >= UINT32_MAX) {
        /* A journal of a daemon that never reused ids, past the table's
         * slots: its clients' frames cannot be named here. */
        mb_log(MB_LOG_WARN, "%s: frame ids of the last daemon (up to %lu) are past this daemon's "
               "%u slots: frames its clients still hold will not be counted", path, prev, FRAME_SLOTS);
        if (ftruncate(p->journal_fd, 0) != 0) {
            mb_log(MB_LOG_ERR, "failed to clear the state journal %s: %s", path, strerror(errno));
            return MB_ESYS;
        }
        prev = epoch = 0;
    }
    p->epoch = (uint32_t)epoch + 1;
    if (prev > 1) {
        p->id_limit = prev < FRAME_SLOTS ? (uint32_t)prev : FRAME_SLOTS;
        int rc = grow_table(p, p->id_limit);
        if (rc == 0)
            rc = keep_reported_slots(p);
        if (rc != 0)
            return rc;
        p->next_unused = p->id_limit;
        mb_log(MB_LOG_DEBUG, "state journal %s (epoch %u): %u slots below %u kept for frames "
               "clients of the last daemon may report, %u to reuse", path, p->epoch,
               p->id_limit - 1 - p->n_reusable, p->id_limit, p->n_reusable);
    }
    return write_journal(p, p->next_unused + JOURNAL_STEP);
}

/* Order-0 bytes taken from the fresh frames now: what the reserve must
 * replace (demand_target turns it into the target). */
static void count_demand(struct frame_pool *p, uint64_t bytes)
{
    int64_t sec = mb_now_ms() / 1000;
    if (sec != p->demand_sec) {
        for (int64_t t = p->demand_sec + 1; t <= sec && t <= p->demand_sec + 16; t++)
            p->demand[(uint64_t)t % 16] = 0;
        p->demand_sec = sec;
    }
    p->demand[(uint64_t)sec % 16] += bytes;
}

/* Release the frames of list l's order k free since `cutoff` or before,
 * while free bytes exceed target; *count counts them. */
static void trim_list(struct frame_pool *p, struct free_list *l, unsigned k, int64_t cutoff,
                      uint64_t target, uint64_t *count)
{
    for (unsigned c = 0; c < 2; c++)   /* frames without a descriptor first */
        for (uint32_t slot = l->head[c][k], next; slot && p->bytes_free > target; slot = next) {
            next = p->frames[slot].next_free;
            if (p->frames[slot].freed_ms > cutoff)
                continue;   /* used lately: kept */
            end_frame(p, unlink_free(p, l, slot));
            (*count)++;
        }
}

/* Release frames free since `cutoff` or before until free bytes are at most
 * `target`: frames users returned first, then fresh ones of larger orders,
 * then fresh one-unit frames (what the reserve keeps). */
static void trim_to(struct frame_pool *p, uint64_t target, int64_t cutoff, uint64_t *count)
{
    for (uint32_t i = 0; i < p->n_by_uid && p->bytes_free > target; i++)
        for (int k = MB_MAX_ORDER; k >= 0 && p->bytes_free > target; k--)
            trim_list(p, p->by_uid[i], (unsigned)k, cutoff, target, count);
    for (int k = MB_MAX_ORDER; k >= 0 && p->bytes_free > target; k--)
        trim_list(p, &p->fresh, (unsigned)k, cutoff, target, count);
}

/* How much of the device the reserve leaves free now: the headroom, or
 * more for ROOM_HOLD_MS after a Room (the room the caller asked for, which
 * the workers would otherwise fill again before the caller takes it).
 * p->lock held. */
#define ROOM_HOLD_MS 2000
static uint64_t reserve_headroom(const struct frame_pool *p)
{
    return p->room_until_ms > mb_now_ms() && p->room_bytes > p->headroom ? p->room_bytes
                                                                           : p->headroom;
}

/* Does the device keep `headroom` free with `bytes` more taken from it?
 * Yes where there is none or its free memory is not known (the host
 * backend without MOONBRIGHT_HOST_MEMORY). Any thread (a driver call). */
static bool headroom_after(struct frame_pool *p, uint64_t bytes, uint64_t headroom)
{
    uint64_t free_now;
    return !headroom || !p->be->ops->mem_free || p->be->ops->mem_free(p->be, &free_now) != 0 ||
           free_now >= bytes + headroom;
}

uint32_t frame_pool_make_room(struct frame_pool *p, uint64_t bytes, uint64_t *device_free,
                              bool hold)
{
    uint64_t free_now = 0, before = p->released_room;
    if (device_free)
        *device_free = 0;
    if (!p->be->ops->mem_free)
        return 0;
    if (hold) {
        pthread_mutex_lock(&p->lock);
        p->room_bytes = bytes;
        p->room_until_ms = mb_now_ms() + ROOM_HOLD_MS;
        pthread_mutex_unlock(&p->lock);
    }
    if (p->be->ops->mem_free(p->be, &free_now) != 0)
        return 0;
    pthread_mutex_lock(&p->lock);
    for (uint32_t i = 0; i < p->n_release_q; i++)
        free_now += p->release_q[i].bytes;   /* a worker is releasing them */
    pthread_mutex_unlock(&p->lock);
    if (free_now < bytes && p->bytes_free) {
        uint64_t short_by = bytes - free_now, had = p->bytes_free, was = free_now;
        p->defer_release = true;   /* the workers release them (end_frame), where they run */
        trim_to(p, had > short_by ? had - short_by : 0, INT64_MAX, &p->released_room);
        p->defer_release = false;
        free_now += had - p->bytes_free;
        mb_log(MB_LOG_DEBUG, "the device had %llu MiB free, %llu MiB wanted: released %llu free "
               "frames", (unsigned long long)(was >> 20), (unsigned long long)(bytes >> 20),
               (unsigned long long)(p->released_room - before));
        POOL_CHECK(p);
    }
    if (device_free)
        *device_free = free_now;
    return (uint32_t)(p->released_room - before);
}

#define TICK_MS 250

/* The order of the frame to release among n[k] candidates when `deficit`
 * bytes are missing: the smallest that covers it alone, else the largest
 * (a release costs the same whatever the size: fewer is faster); -1 when
 * there is none. */
static int release_order(const struct frame_pool *p, const uint32_t *n, uint64_t deficit)
{
    for (unsigned k = 0; k < MB_ORDERS; k++)
        if (n[k] && obytes(p, k) >= deficit)
            return (int)k;
    for (int k = MB_ORDERS - 1; k >= 0; k--)
        if (n[k])
            return k;
    return -1;
}

/* Release one frame a user returned, free since cutoff or before and not
 * of order `skip`, of the order release_order picks for `deficit`. Its
 * bytes, 0 when there is none. */
static uint64_t release_returned(struct frame_pool *p, unsigned skip, int64_t cutoff,
                                 uint64_t deficit)
{
    uint32_t found[MB_ORDERS] = { 0 };   /* an order has such a frame: at[k] in from[k] */
    uint32_t at[MB_ORDERS];
    struct free_list *from[MB_ORDERS];
    for (uint32_t i = 0; i < p->n_by_uid; i++)
        for (unsigned k = 0; k < MB_ORDERS; k++)
            for (unsigned c = 0; c < 2 && k != skip && !found[k]; c++) {
                uint32_t slot = p->by_uid[i]->head[c][k];
                while (slot && p->frames[slot].freed_ms > cutoff)
                    slot = p->frames[slot].next_free;   /* used lately: kept */
                if (slot) {
                    found[k] = 1;
                    at[k] = slot;
                    from[k] = p->by_uid[i];
                }
            }
    int k = release_order(p, found, deficit);
    if (k < 0)
        return 0;
    end_frame(p, unlink_free(p, from[k], at[k]));
    p->released_device_full++;
    return obytes(p, (unsigned)k);
}

/* A worker found the device full below the budget (other processes' memory,
 * or a budget above the device's) and could not make a frame the reserve
 * wants: frames users returned and nobody took for a tick go back to the
 * driver, about the bytes the reserve lacks of that frame's order, none of
 * that order, so that the reserve holds the sizes grants ask for now rather
 * than those earlier sessions returned, and the next grants of that size
 * make no frame on their path. Fresh frames (the reserve itself) stay.
 * Without such frames the workers try that order again a second later, not
 * at each wake-up. */
static void room_for_reserve(struct frame_pool *p, int64_t now_ms)
{
    uint64_t room[MB_ORDERS];
    pthread_mutex_lock(&p->lock);
    memcpy(room, p->room_wanted, sizeof(room));
    memset(p->room_wanted, 0, sizeof(p->room_wanted));
    pthread_mutex_unlock(&p->lock);
    bool made[MB_ORDERS] = { false }, any = false;
    p->defer_release = true;   /* the workers release them (end_frame) */
    for (unsigned order = 0; order < MB_ORDERS; order++) {
        uint64_t left = room[order], before = p->released_device_full, got;
        while (left && (got = release_returned(p, order, now_ms - TICK_MS, left)) != 0)
            left -= got < left ? got : left;
        if (p->released_device_full == before)
            continue;
        mb_log(MB_LOG_DEBUG, "the device is full below the budget: released %llu returned free "
               "frames for the reserve's order-%u frames",
               (unsigned long long)(p->released_device_full - before), order);
        made[order] = any = true;
    }
    p->defer_release = false;
    if (!any)
        return;
    pthread_mutex_lock(&p->lock);
    for (unsigned order = 0; order < MB_ORDERS; order++)
        if (made[order])
            p->full_until_ms[order] = 0;
    pthread_cond_broadcast(&p->wake);   /* the workers try those orders again now */
    pthread_mutex_unlock(&p->lock);
    POOL_CHECK(p);
}

/* The reserve's target now: the configured reserve, or the most order-0
 * bytes taken from fresh frames in one second of the last idle period
 * (this second's so far included) when workers make frames; at most the
 * budget. */
static uint64_t demand_target(const struct frame_pool *p)
{
    int64_t window = p->idle_ms > 0 ? (p->idle_ms + 999) / 1000 : 16;
    if (window > 16)
        window = 16;
    uint64_t target = p->reserve_base, peak = 0;
    for (int64_t i = 0; i < window; i++)
        if (p->demand[(uint64_t)(p->demand_sec - i) % 16] > peak)
            peak = p->demand[(uint64_t)(p->demand_sec - i) % 16];
    /* Fresh frames hold descriptors: demand raises the target as far as
     * FREE_DESCRIPTORS_MAX leaves room for returned frames exported again. */
    uint64_t most = p->free_descriptors_max > p->exported_held_min
                        ? (uint64_t)(p->free_descriptors_max - p->exported_held_min) * p->frame_bytes
                        : 0;
    if (peak > most)
        peak = most;
    if (p->n_workers && peak > target)
        target = peak;
    return target < p->budget_bytes ? target : p->budget_bytes;
}

/* What all spares together may hold: a spare_share-th of the bytes granted
 * and `more` being granted (spare_share 0: not capped, reserve_short). */
static uint64_t spare_room(const struct frame_pool *p, uint64_t more)
{
    return p->spare_share ? (p->bytes_granted + more) / p->spare_share : 0;
}

/* Set the target (raise_only: unless that lowers it), waking the workers
 * when it changes; and what spares may hold, by the bytes granted now. */
static void set_target(struct frame_pool *p, uint64_t target, bool raise_only)
{
    pthread_mutex_lock(&p->lock);
    p->spare_room = spare_room(p, 0);
    if (target != p->reserve_bytes && (!raise_only || target > p->reserve_bytes)) {
        p->reserve_bytes = target;
        pthread_cond_broadcast(&p->wake);
    }
    pthread_mutex_unlock(&p->lock);
}

/* The slots the next TOUCH_AHEAD frames take have their pages touched
 * here, between requests, not by the grant that first writes them: a page
 * fault on the main thread waits for the process's memory map lock, which
 * the driver may hold for a long time in a reserve worker's create. */
#define TOUCH_AHEAD 1024
static void touch_ahead(struct frame_pool *p)
{
    uint32_t end = p->next_unused + TOUCH_AHEAD < p->cap ? p->next_unused + TOUCH_AHEAD : p->cap;
    if (p->touched < p->next_unused)
        p->touched = p->next_unused;
    if (p->touched < end && end - p->touched >= TOUCH_AHEAD / 4) {
        for (uint32_t i = p->touched; i < end; i++) {
            volatile uint8_t *b = (volatile uint8_t *)&p->frames[i];
            *b = *b;   /* a write: a read of an untouched page maps the shared zero page */
        }
        p->touched = end;
    }
}

int64_t frame_pool_tick(struct frame_pool *p, int64_t now_ms)
{
    /* The journal's id limit moves ahead here, between requests, half a
     * step before frames reach it: else the grant whose frame crosses it
     * writes it and waits for fdatasync on its path. After a failed write
     * (logged) the tick leaves it to that grant, which fails if it fails. */
    if (p->journal_fd >= 0 && !p->journal_ahead_failed &&
        p->next_unused + JOURNAL_STEP / 2 >= p->journal_limit)
        p->journal_ahead_failed = write_journal(p, p->next_unused + JOURNAL_STEP) != 0;
    touch_ahead(p);
    if (p->n_workers) {
        frame_pool_adopt(p);   /* what the workers made and exported */
        room_for_reserve(p, now_ms);
    }
    if (p->headroom && p->bytes_free)
        frame_pool_make_room(p, p->headroom, NULL, false);   /* free frames leave the headroom */
    count_demand(p, 0);   /* rotate to this second */
    uint64_t target = demand_target(p);
    set_target(p, target, false);
    if (p->idle_ms <= 0)
        return now_ms + TICK_MS;
    if (p->bytes_free <= target) {
        p->excess_since_ms = 0;
    } else if (p->excess_since_ms == 0) {
        p->excess_since_ms = now_ms;
    } else if (now_ms - p->excess_since_ms >= p->idle_ms) {
        /* Above the target for the idle period: frames nobody took for
         * that long go (each tick, until free bytes are down to it), and
         * the spares with them: none is made again until a request has to
         * create its order itself (else a worker would re-create, in the
         * budget the release frees, frames of orders nobody asked for). */
        pthread_mutex_lock(&p->lock);
        memset(p->spare, 0, sizeof(p->spare));
        pthread_mutex_unlock(&p->lock);
        uint64_t before = p->released_idle;
        trim_to(p, target, now_ms - p->idle_ms, &p->released_idle);
        if (p->released_idle != before)
            mb_log(MB_LOG_DEBUG, "released %llu idle free frames to the driver",
                   (unsigned long long)(p->released_idle - before));
        POOL_CHECK(p);
    }
    return now_ms + TICK_MS;
}

/* Put a created, exported, committed mem into a slot on its free list: the
 * oldest one whose frame ended, else a new one. */
static int add_frame(struct frame_pool *p, const struct mb_mem *m)
{
    int order = mb_frame_order(m->bytes, p->frame_bytes);
    if (order < 0)
        return MB_EINVAL;
    uint32_t slot = p->reuse_head;
    if (slot) {
        p->reuse_head = p->frames[slot].next_free;
        if (!p->reuse_head)
            p->reuse_tail = 0;
        p->n_reusable--;
    } else {
        if (p->next_unused >= FRAME_SLOTS) {
            mb_log(MB_LOG_ERR, "failed to add a frame: all %u slots of the frame table hold frames",
                   FRAME_SLOTS - 1);
            return MB_ELIMIT;
        }
        if (p->journal_fd >= 0 && p->next_unused >= p->journal_limit &&
            write_journal(p, p->next_unused + JOURNAL_STEP) != 0)
            return MB_ESYS;
        int rc = grow_table(p, p->next_unused);
        if (rc != 0)
            return rc;
        slot = p->next_unused++;
    }
    struct frame *f = &p->frames[slot];
    uint16_t gen = f->gen;
    memset(f, 0, sizeof(*f));
    f->gen = gen;
    f->mem = *m;
    f->order = (uint8_t)order;
    p->n_total++;
    p->bytes_total += m->bytes;
    push_free(p, slot);
    return 0;
}

/* Frames of order k a grant for uid may take: its own and fresh ones. */
static uint32_t usable(const struct frame_pool *p, const struct free_list *own, unsigned k)
{
    return p->fresh.n[k] + (own ? own->n[k] : 0);
}

/* Usable order-k frames of uid (own: its list) past what a grant takes of
 * them (need[k]). */
static uint32_t unneeded(const struct frame_pool *p, const struct free_list *own,
                         const uint32_t *need, unsigned k)
{
    uint32_t u = usable(p, own, k);
    return u > need[k] ? u - need[k] : 0;
}

/* Make room in the budget for a grant to `uid` (need[k]: frames of order k
 * it still takes; deficit: the bytes missing, 0 when a frame count is the
 * limit): release one free frame another uid held last (it can never serve
 * this uid), else one of the grant's own usable frames it does not need,
 * chosen by release_order. False when there is none. */
static bool release_surplus(struct frame_pool *p, const uint32_t *need, uid_t uid, uint64_t deficit)
{
    for (uint32_t i = 0; i < p->n_by_uid; i++) {
        struct free_list *l = p->by_uid[i];
        int k = l->uid == uid ? -1 : release_order(p, l->n, deficit);
        if (k >= 0) {
            end_frame(p, pop_to_release(p, l, (unsigned)k));
            p->released_isolation++;
            return true;
        }
    }
    struct free_list *own = uid_list(p, uid, false);
    uint32_t spare[MB_ORDERS];
    for (unsigned k = 0; k < MB_ORDERS; k++)
        spare[k] = unneeded(p, own, need, k);
    int k = release_order(p, spare, deficit);
    if (k < 0)
        return false;
    end_frame(p, pop_to_release(p, own && own->n[k] ? own : &p->fresh, (unsigned)k));
    p->recreated++;
    return true;
}

/* The bytes release_surplus could release for a grant to uid (need as
 * there): other uids' free frames, and the usable ones the grant does not
 * need. */
static uint64_t releasable(struct frame_pool *p, const uint32_t *need, uid_t uid)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < p->n_by_uid; i++)
        if (p->by_uid[i]->uid != uid)
            for (unsigned k = 0; k < MB_ORDERS; k++)
                b += (uint64_t)p->by_uid[i]->n[k] * obytes(p, k);
    const struct free_list *own = uid_list(p, uid, false);
    for (unsigned k = 0; k < MB_ORDERS; k++)
        b += (uint64_t)unneeded(p, own, need, k) * obytes(p, k);
    return b;
}

/* The device refused a frame of `bytes`: could releasing free frames make
 * room for it? Not when all it may release and what the device has free
 * fall short: then it keeps them (releasing would only take them from the
 * grants to come, and the reserve's workers would make them again). */
static bool room_by_release(struct frame_pool *p, const uint32_t *need, uid_t uid, uint64_t bytes)
{
    uint64_t have = releasable(p, need, uid), free_now = 0;
    if (have >= bytes)
        return true;
    if (!p->be->ops->mem_free || p->be->ops->mem_free(p->be, &free_now) != 0)
        return true;   /* not known: try */
    return have + free_now >= bytes;
}

void frame_pool_path_busy(struct frame_pool *p, int d)
{
    pthread_mutex_lock(&p->lock);
    p->path_busy += d;
    if (d < 0)
        pthread_cond_broadcast(&p->wake);   /* the workers may go on */
    pthread_mutex_unlock(&p->lock);
}

/* Create one frame of an order on the request path (neither the free list
 * nor the reserve had one), making room by re-creation when needed. The
 * reserve's workers hold off from the first release on: else each release
 * would hand its budget to a worker's new frame, and the grant would
 * release again (hundreds of frames for one grant with the budget full).
 * The device may be full below the budget (other processes' memory, or a
 * budget above the device's): then free frames the grant does not need go
 * back to the driver, as many bytes as the frame, before the next try. */
static int create_frame(struct frame_pool *p, unsigned order, const uint32_t *need, uid_t uid)
{
    uint64_t bytes = obytes(p, order), deficit;
    int rc;
    frame_pool_path_busy(p, 1);
    for (;;) {
        while ((rc = commit(p, bytes, &deficit)) == MB_ENOMEM || rc == MB_ELIMIT)
            if (!release_surplus(p, need, uid, deficit))
                break;
        if (rc != 0)
            break;
        struct mb_mem m;
        rc = make_mem(p, order, &m, p->last.step_ns);
        if (rc == MB_ENOMEM)
            p->device_room = p->bytes_total;   /* no more fits beside what it holds */
        else if (rc == 0 && p->bytes_total + bytes > p->device_room)
            p->device_room = 0;   /* more fit than then: not known again */
        if (rc == 0) {
            if ((rc = add_frame(p, &m)) != 0) {
                p->be->ops->release(p->be, &m);
                uncommit(p, bytes);
            }
            break;
        }
        uncommit(p, bytes);
        if (rc == MB_ENOMEM && !room_by_release(p, need, uid, bytes))
            break;
        uint64_t before = p->bytes_total;
        while (rc == MB_ENOMEM && before - p->bytes_total < bytes &&
               release_surplus(p, need, uid, bytes - (before - p->bytes_total)))
            p->released_device_full++;
        if (p->bytes_total == before)
            break;   /* nothing of ours to give back: the device is full */
        if (p->released_device_full && !p->said_device_full)
            mb_log(MB_LOG_INFO, "the device is full below the budget (%llu MiB in frames): free "
                   "frames go back to the driver to make the frames grants need",
                   (unsigned long long)(before >> 20));
        p->said_device_full = true;
    }
    frame_pool_path_busy(p, -1);
    return rc;
}

/* Order-k frames made ahead: fresh, ready or being made (lock held). */
static uint64_t ahead(const struct frame_pool *p, unsigned k)
{
    return (uint64_t)__atomic_load_n(&p->fresh.n[k], __ATOMIC_RELAXED) + p->ready_order[k] +
           p->creating_order[k];
}

/* The bytes of order-k frames the reserve lacks: below the target (order
 * 0), or spares missing, as many as fit in spare_room beside the spares
 * of other orders (lock held). */
static uint64_t reserve_short(const struct frame_pool *p, unsigned k)
{
    uint64_t have = ahead(p, k);
    if (k == 0)
        return p->reserve_bytes > have * p->frame_bytes ? p->reserve_bytes - have * p->frame_bytes : 0;
    uint64_t fit = UINT64_MAX;
    if (p->spare_share) {
        uint64_t others = 0;
        for (unsigned j = 1; j < MB_ORDERS; j++)
            if (j != k) {
                uint64_t n = ahead(p, j);
                others += (n < p->spare[j] ? n : p->spare[j]) * obytes(p, j);
            }
        fit = others < p->spare_room ? (p->spare_room - others) / obytes(p, k) : 0;
    }
    uint64_t want = p->spare[k] < fit ? p->spare[k] : fit;
    return want > have ? (want - have) * obytes(p, k) : 0;
}

/* What a reserve worker should create next (lock held): order 0 below the
 * reserve, else a missing spare, an order the device refused within the
 * last second excepted; -1 when nothing is due or it would not fit. */
static int reserve_due(struct frame_pool *p)
{
    int order = -1;
    int64_t now = mb_now_ms();
    if (p->path_busy || p->n_release_q)
        return -1;   /* a grant's driver calls, or releases, wait: they go first */
    for (unsigned k = 0; order < 0 && k < MB_ORDERS; k++)
        if (reserve_short(p, k) && now >= p->full_until_ms[k])
            order = (int)k;
    if (order < 0 || p->committed + obytes(p, (unsigned)order) > p->budget_bytes ||
        (p->max_frames && p->n_committed + 1 > p->max_frames))
        return -1;
    return order;
}

static void timed_wait(struct frame_pool *p, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&p->wake, &p->lock, &ts);
}

/* How many returned free frames may keep exported descriptors: what the
 * fresh frames leave of free_descriptors_max, and exported_held_min at
 * least (the fresh counts are the main thread's: hints to the workers). */
static uint32_t reexport_room(const struct frame_pool *p)
{
    uint32_t fresh = fresh_free(p);
    uint32_t room = fresh < p->free_descriptors_max ? p->free_descriptors_max - fresh : 0;
    return room > p->exported_held_min ? room : p->exported_held_min;
}

/* The export queue's entry a worker takes next, -1 when none may go now
 * (p->lock held; the held counts are hints). Within reexport_room: the
 * latest returned frame, as grants take them, but for the share of the
 * room that orders short of exported_order_min descriptors (held, or
 * being given) still need, which goes to the latest of those orders (the
 * latest returned frames are mostly of one order, and a grant of another
 * would export on its path). Past the room the rest wait: grants take
 * frames with descriptors first, and each one they take makes room for
 * the next export. */
static int64_t next_export(const struct frame_pool *p)
{
    if (!p->n_rex_todo)
        return -1;
    uint32_t have[MB_ORDERS];
    for (unsigned k = 0; k < MB_ORDERS; k++)
        have[k] = __atomic_load_n(&p->n_exported_held_order[k], __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < p->n_rex_done; i++)
        have[p->rex_done[i].order]++;
    for (uint32_t i = 0; i < p->n_rex_busy; i++)
        have[p->rex_busy[i].order]++;
    bool scarce[MB_ORDERS];
    uint32_t held = 0, short_by = 0;
    for (unsigned k = 0; k < MB_ORDERS; k++) {
        held += have[k];
        scarce[k] = p->n_rex_todo_order[k] && have[k] < p->exported_order_min;
        short_by += scarce[k] ? p->exported_order_min - have[k] : 0;
    }
    uint32_t room = reexport_room(p);
    if (held + short_by < room)
        return (int64_t)p->n_rex_todo - 1;
    for (int64_t i = (int64_t)p->n_rex_todo - 1; held < room && short_by && i >= 0; i--)
        if (scarce[p->rex[i].order])
            return i;
    return -1;
}

/* A reserve worker: sleep while nothing is due (the free counts are read
 * without the poll loop's cooperation: hints). */
static void *reserve_worker(void *arg)
{
    struct frame_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        if (p->n_release_q) {
            /* Handles the tick released for the reserve's room: first, so
             * that the frames they make room for fit. */
            struct mb_mem m = p->release_q[--p->n_release_q];
            uint64_t bytes = m.bytes;
            pthread_mutex_unlock(&p->lock);
            p->be->ops->release(p->be, &m);
            pthread_mutex_lock(&p->lock);
            p->committed -= bytes;
            p->n_committed--;
            p->released_by_workers++;
            pthread_cond_broadcast(&p->wake);
            continue;
        }
        if (p->path_busy) {
            /* A grant creates or exports on its path: its calls first
             * (frame_pool_path_busy wakes us). */
            pthread_cond_wait(&p->wake, &p->lock);
            continue;
        }
        int64_t next = next_export(p);
        if (next >= 0) {
            /* A free frame's descriptor, again: the handle's export is the
             * frame's memory for as long as the handle lives (the main
             * thread attaches it only to the same frame, still free). */
            struct rex r = p->rex[next];
            memmove(&p->rex[next], &p->rex[next + 1],
                    (p->n_rex_todo - (uint32_t)next - 1) * sizeof(*p->rex));
            p->n_rex_todo--;
            p->n_rex_todo_order[r.order]--;
            p->rex_busy[p->n_rex_busy++] = r;   /* (one per worker) */
            pthread_mutex_unlock(&p->lock);
            struct mb_mem m = MB_MEM_INIT;
            m.h = r.h;
            r.fd = p->be->ops->export_fd(p->be, &m) == 0 ? m.fd : -1;
            pthread_mutex_lock(&p->lock);
            for (uint32_t i = 0; i < p->n_rex_busy; i++)
                if (p->rex_busy[i].h == r.h) {
                    p->rex_busy[i] = p->rex_busy[--p->n_rex_busy];
                    break;
                }
            if (!rex_push(&p->rex_done, &p->n_rex_done, &p->rex_done_cap, r) && r.fd >= 0)
                close(r.fd);
            pthread_cond_broadcast(&p->wake);   /* a frame's end may wait for this export */
            continue;
        }
        int order = reserve_due(p);
        if (order < 0) {
            timed_wait(p, 50);
            continue;
        }
        uint64_t bytes = obytes(p, (unsigned)order);
        p->committed += bytes;
        p->n_committed++;
        p->creating++;
        p->creating_order[order]++;
        uint64_t headroom = reserve_headroom(p);
        pthread_mutex_unlock(&p->lock);
        struct mb_mem m;
        bool room = headroom_after(p, bytes, headroom);
        int rc = room ? make_mem(p, (unsigned)order, &m, NULL) : MB_ENOMEM;
        pthread_mutex_lock(&p->lock);
        p->creating--;
        p->creating_order[order]--;
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
            p->ready_order[order]++;
            continue;
        }
        if (rc == 0)
            p->be->ops->release(p->be, &m);
        p->committed -= bytes;
        p->n_committed--;
        if (!room) {
            /* The device keeps its headroom: no reserve frame now, nothing
             * released for one (the tick's frame_pool_make_room releases
             * free frames instead); this order is tried again in a second. */
            p->full_until_ms[order] = mb_now_ms() + 1000;
            continue;
        }
        /* Said at most once a minute: a device full below the budget stays
         * so for a while, and the workers try each order once a second. */
        int64_t now = mb_now_ms();
        bool say = p->reserve_warned_ms == 0 || now - p->reserve_warned_ms >= 60000;
        mb_log(say ? MB_LOG_WARN : MB_LOG_DEBUG,
               "failed to add a frame to the warm reserve: %s; retrying every second",
               mb_strerror(rc ? rc : MB_ENOMEM));
        if (say)
            p->reserve_warned_ms = now;
        if (rc == MB_ENOMEM) {
            /* Within the budget (reserve_due), so the device is full: the
             * tick may release returned frames for what the reserve lacks
             * of this order and wake us; other orders due may still fit. */
            uint64_t lack = reserve_short(p, (unsigned)order);
            lack = lack > bytes ? lack : bytes;
            if (lack > p->room_wanted[order])
                p->room_wanted[order] = lack;   /* (the other worker's may be larger) */
            p->full_until_ms[order] = now + 1000;
            continue;
        }
        timed_wait(p, 1000);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Wait until no worker is creating a frame; true when one was, or when
 * made frames wait in ready[] (either way there is something to adopt). */
static bool wait_for_workers(struct frame_pool *p)
{
    pthread_mutex_lock(&p->lock);
    bool waited = p->creating > 0 || p->n_ready > 0;
    while (p->creating > 0)
        pthread_cond_wait(&p->wake, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return waited;
}

int frame_pool_prefill(struct frame_pool *p, uint64_t bytes)
{
    pthread_mutex_lock(&p->lock);
    p->reserve_base = p->reserve_bytes = bytes;
    pthread_mutex_unlock(&p->lock);
    for (; p->n_workers < RESERVE_THREADS; p->n_workers++) {
        int e = pthread_create(&p->workers[p->n_workers], NULL, reserve_worker, p);
        if (e != 0) {
            mb_log(MB_LOG_ERR, "failed to start a reserve worker: %s", strerror(e));
            return p->n_workers ? 0 : MB_ESYS;
        }
    }
    return 0;
}

/* Fresh frames adopted after returned ones were exported again can take
 * the daemon's descriptors past free_descriptors_max: granted frames that
 * kept theirs give them up first, then returned frames (a close; the
 * handle stays), from the order that holds the most, down to
 * reexport_room, and wait in the export queue for room again (when the
 * workers export ahead). */
static void drop_excess_exports(struct frame_pool *p)
{
    if (!p->unexport)
        return;
    /* Granted frames' descriptors go first: a free frame's serves the next
     * grant of its order, a granted frame's only once it is returned. */
    while (p->n_granted_fd && descriptors_booked(p) > p->free_descriptors_max)
        drop_granted_fd(p);
    uint32_t room = reexport_room(p);
    for (uint32_t held = frame_pool_exported_held(p); held > room; held--) {
        unsigned most = 0;
        for (unsigned k = 1; k < MB_ORDERS; k++)
            if (p->n_exported_held_order[k] > p->n_exported_held_order[most])
                most = k;
        struct free_list *l = NULL;
        uint32_t slot = 0;
        for (uint32_t i = 0; i < p->n_by_uid && !slot; i++) {
            l = p->by_uid[i];
            slot = l->head[1][most];
        }
        if (!slot)
            return;   /* (n_exported_held_order[most] counts one: not reached) */
        struct frame *f = &p->frames[slot];
        chain_unlink(p, l, slot, 1);
        p->be->ops->unexport(p->be, &f->mem);
        chain_link(p, l, slot, 0);
        count_exported_held(p, most, -1);
        p->exports_dropped++;
        queue_export(p, slot);
    }
}

void frame_pool_adopt(struct frame_pool *p)
{
    uint64_t t = mb_now_ns();
    pthread_mutex_lock(&p->lock);
    p->adopt_wait_ns += mb_now_ns() - t;
    uint32_t i = 0;
    for (; i < p->n_ready; i++) {
        int order = mb_frame_order(p->ready[i].bytes, p->frame_bytes);
        if (add_frame(p, &p->ready[i]) != 0)
            break;
        p->ready_order[order]--;
    }
    if (i && i < p->n_ready)
        memmove(p->ready, p->ready + i, (p->n_ready - i) * sizeof(*p->ready));
    p->n_ready -= i;
    p->adopted += i;
    p->made_ahead += i;
    if (i)
        pthread_cond_broadcast(&p->wake);   /* room in ready[]: the workers may go on */
    for (uint32_t k = 0; k < p->n_rex_done; k++) {
        struct rex r = p->rex_done[k];
        struct frame *f = r.slot < p->cap ? &p->frames[r.slot] : NULL;
        struct free_list *l = f && f->state == FRAME_FREE ? list_of(p, f, false) : NULL;
        if (r.fd >= 0 && l && f->mem.h == r.h && f->mem.fd < 0) {
            chain_unlink(p, l, r.slot, 0);   /* to the chain grants take first */
            f->mem.fd = r.fd;
            chain_link(p, l, r.slot, 1);
            p->exported_ahead++;
            /* (a frame without a descriptor was held: fresh ones keep theirs) */
            count_exported_held(p, f->order, 1);
        } else if (r.fd >= 0) {
            close(r.fd);   /* granted (and exported on its path) or released meanwhile */
        }
    }
    p->n_rex_done = 0;
    pthread_mutex_unlock(&p->lock);
    drop_excess_exports(p);
    POOL_CHECK(p);
}

bool frame_pool_would_release(struct frame_pool *p, uint64_t bytes)
{
    uint64_t device = p->be->total_bytes;   /* 0: not known */
    pthread_mutex_lock(&p->lock);
    uint64_t after = p->committed + bytes;
    bool r = after > p->budget_bytes || (device && after > device) ||
             (p->device_room && after > p->device_room);
    pthread_mutex_unlock(&p->lock);
    /* The device may be full below what the pool holds: other processes'
     * memory, contexts. Asked of the driver only here, on a grant's path
     * that would otherwise go on to make frames (a driver call anyway). */
    uint64_t free_now;
    if (!r && p->be->ops->mem_free && p->be->ops->mem_free(p->be, &free_now) == 0)
        r = free_now < bytes;
    return r;
}

uint32_t frame_pool_warm_plan(struct frame_pool *p, uid_t uid, uint64_t bytes, uint64_t room,
                              unsigned max_order, uint32_t max_n, uint8_t *orders)
{
    uint64_t fb = p->frame_bytes;
    if (bytes == 0 || max_order > MB_MAX_ORDER || room < bytes)
        return 0;
    if (p->n_workers)
        frame_pool_adopt(p);
    const struct free_list *own = uid_list(p, uid, false);
    uint32_t avail[MB_ORDERS];
    for (unsigned k = 0; k <= max_order; k++)
        avail[k] = usable(p, own, k);
    uint64_t need = bytes / fb + (bytes % fb != 0), left = need, most = room / fb;
    uint32_t n = 0;
    /* One frame that holds it all within room, the smallest; else ... */
    for (unsigned k = 0; k <= max_order && max_n; k++)
        if (avail[k] && ((uint64_t)1 << k) >= left && ((uint64_t)1 << k) <= most) {
            orders[0] = (uint8_t)k;
            return 1;
        }
    /* ... the largest free frames that fit in what is left, ... */
    for (int k = (int)max_order; k >= 0 && left; k--)
        for (; avail[k] && ((uint64_t)1 << k) <= left && n < max_n; avail[k]--) {
            orders[n++] = (uint8_t)k;
            left -= (uint64_t)1 << k;
        }
    /* ... then the smallest one that covers the rest within room. */
    for (unsigned k = 0; k <= max_order && left && n < max_n; k++)
        if (avail[k] && ((uint64_t)1 << k) >= left && need - left + ((uint64_t)1 << k) <= most) {
            orders[n++] = (uint8_t)k;
            left = 0;
        }
    return left ? 0 : n;
}

int frame_pool_grant_orders(struct frame_pool *p, const uint8_t *orders, uint32_t n,
                            uint64_t session, uid_t uid, uint32_t tenant, uint32_t *ids)
{
    if (n == 0 || session == 0)
        return MB_EINVAL;
    uint32_t need[MB_ORDERS] = { 0 };
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (orders[i] > MB_MAX_ORDER)
            return MB_EINVAL;
        need[orders[i]]++;
        bytes += obytes(p, orders[i]);
    }
    if (bytes > p->budget_bytes)
        return MB_ENOMEM;
    /* All or nothing: make sure enough frames of each order exist before
     * taking any: this uid's free frames and fresh ones, then the warm
     * reserve, then the driver (largest orders first: making room for them
     * may release small frames). */
    memset(&p->last, 0, sizeof(p->last));
    uint64_t released0 = p->recreated + p->released_isolation;
    if (p->n_workers)
        frame_pool_adopt(p);
    for (int k = MB_MAX_ORDER; k >= 0; k--) {
        bool created = false;
        while (usable(p, uid_list(p, uid, false), (unsigned)k) < need[k]) {
            uint64_t t0 = mb_now_ns();
            int rc = create_frame(p, (unsigned)k, need, uid);
            p->last.create_ns += mb_now_ns() - t0;
            p->last.created += rc == 0;
            p->path_created += rc == 0;
            p->last.released = (uint32_t)(p->recreated + p->released_isolation - released0);
            if ((rc == MB_ENOMEM || rc == MB_ELIMIT) && wait_for_workers(p)) {
                p->last.wait_ns += mb_now_ns() - t0;
                frame_pool_adopt(p);   /* what they were making counted against the budget */
                continue;
            }
            if (rc != 0)
                return rc;
            created = true;
        }
        if (created && k > 0 && p->n_workers) {
            /* Demand for this order: keep as many ready for the next
             * request (a burst of large frames waits for one export at
             * most, not one per frame), and one more each time the
             * spares kept did not last until the workers replaced them. */
            pthread_mutex_lock(&p->lock);
            uint32_t want = need[k] > p->spare[k] ? need[k] : p->spare[k] + 1u;
            if (want > MB_SPARES_MAX)
                want = MB_SPARES_MAX;
            if (p->spare[k] < want)
                p->spare[k] = (uint8_t)want;
            p->spare_room = spare_room(p, obytes(p, k));
            pthread_cond_broadcast(&p->wake);
            pthread_mutex_unlock(&p->lock);
        }
    }
    struct free_list *own = uid_list(p, uid, false);
    uint64_t fresh0 = 0;
    bool took_exported = false;
    for (uint32_t i = 0; i < n; i++) {
        unsigned k = orders[i];
        /* The uid's own frames first: fresh ones serve anyone. */
        struct free_list *l = own && own->n[k] ? own : &p->fresh;
        struct frame *f = &p->frames[next_free(l, k)];
        /* Never another uid's frame (the lists guarantee it); scrub when the
         * tenant changes within the uid. */
        if (f->held && f->last_uid != uid) {
            mb_log(MB_LOG_ERR, "failed to grant: frame %u of uid %u on the list of uid %u",
                   next_free(l, k), (unsigned)f->last_uid, (unsigned)uid);
            frame_pool_return(p, ids, i, session);
            return MB_ESYS;
        }
        if (p->scrub && f->held && f->last_tenant != tenant) {
            uint64_t t0 = mb_now_ns();
            int rc = p->be->ops->scrub(p->be, &f->mem);
            p->last.scrub_ns += mb_now_ns() - t0;
            p->last.scrubbed++;
            if (rc != 0) {
                /* Never hand out unscrubbed memory: undo the partial grant. */
                frame_pool_return(p, ids, i, session);
                return rc;
            }
            p->scrubs++;
        }
        uint32_t slot = pop_free(p, l, k);
        if (f->mem.fd < 0)
            unqueue_export(p, slot);   /* exported on this grant's path */
        else
            took_exported = true;
        if (!f->held) {
            f->held = true;
            f->last_uid = uid;
            journal_record(p, slot, f);   /* only this uid may report it after a restart */
            if (k == 0)
                fresh0 += p->frame_bytes;
        }
        f->state = FRAME_GRANTED;
        f->owner = session;
        f->last_tenant = tenant;
        p->n_granted_fd += f->mem.fd >= 0;
        p->n_granted++;
        p->bytes_granted += obytes(p, k);
        ids[i] = frame_id(p, slot);
    }
    if (took_exported && exports_ahead(p)) {
        /* Room under reexport_room: the workers export the next free
         * frames grants would take. */
        pthread_mutex_lock(&p->lock);
        if (p->n_rex_todo)
            pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    if (fresh0) {
        /* The target follows at once (the tick may lower it later): a
         * burst of grants finds the workers making its next frames rather
         * than making each on its own path until the next tick. */
        count_demand(p, fresh0);
        set_target(p, demand_target(p), true);
    }
    POOL_CHECK(p);
    return 0;
}

int frame_pool_grant(struct frame_pool *p, uint32_t n, uint64_t session, uid_t uid,
                     uint32_t tenant, uint32_t *ids)
{
    uint8_t *orders = calloc(n ? n : 1, 1);
    if (!orders)
        return MB_ENOMEM;
    int rc = frame_pool_grant_orders(p, orders, n, session, uid, tenant, ids);
    free(orders);
    return rc;
}

void frame_pool_note_importer(struct frame_pool *p, uint32_t id, uid_t uid)
{
    struct frame *f = frame_pool_get(p, id);
    if (f && f->held && f->last_uid != uid && (!f->tainted || f->importer_uid != uid)) {
        f->tainted = true;
        f->importer_uid = uid;
        if (!f->adopted)   /* that uid may report its import after a restart */
            journal_record(p, slot_of(p, id), f);
    }
}

/* A granted frame goes back to its free list (or ends, if adopted). */
static void ungrant(struct frame_pool *p, uint32_t slot)
{
    p->n_granted_fd -= p->frames[slot].mem.fd >= 0;   /* (returned with it: granted again
                                                         * with no export) */
    p->n_granted--;
    p->bytes_granted -= obytes(p, p->frames[slot].order);
    push_free(p, slot);
    if (p->frames[slot].state == FRAME_FREE)
        queue_export(p, slot);   /* (p->lock not held here) */
}

/* The owner lets go: free, unless importers still hold the frame. */
static void let_go(struct frame_pool *p, uint32_t slot)
{
    struct frame *f = &p->frames[slot];
    if (f->holders) {
        f->owner = 0;
        return;
    }
    ungrant(p, slot);
}

void frame_pool_drop_hold(struct frame_pool *p, uint32_t id)
{
    struct frame *f = frame_pool_get(p, id);
    if (!f || f->state != FRAME_GRANTED || f->holders == 0)
        return;
    if (--f->holders == 0 && f->owner == 0)
        ungrant(p, slot_of(p, id));
    POOL_CHECK(p);
}

uint32_t frame_pool_duplicate(struct frame_pool *p, const uint32_t *ids, size_t n)
{
    /* Each frame marked (named) where first seen, the marks cleared after:
     * O(n) whatever a request names, and no memory to allocate. */
    uint32_t dup = 0;
    size_t i = 0;
    for (; i < n && !dup; i++) {
        struct frame *f = frame_pool_get(p, ids[i]);
        if (f && f->named)
            dup = ids[i];
        else if (f)
            f->named = true;
    }
    for (size_t j = 0; j < i; j++) {
        struct frame *f = frame_pool_get(p, ids[j]);
        if (f)
            f->named = false;
    }
    return dup;
}

int frame_pool_return(struct frame_pool *p, const uint32_t *ids, size_t n, uint64_t session)
{
    for (size_t i = 0; i < n; i++) {
        struct frame *f = frame_pool_get(p, ids[i]);
        if (!f)
            return MB_ENOENT;
        if (f->state != FRAME_GRANTED || f->owner != session)
            return MB_EPERM;
    }
    if (frame_pool_duplicate(p, ids, n))
        return MB_EINVAL;   /* the same frame twice */
    for (size_t i = 0; i < n; i++)
        let_go(p, slot_of(p, ids[i]));
    POOL_CHECK(p);
    return 0;
}

/* Book an adopted frame, id (an unused slot below id_limit, not on the
 * reuse queue): granted to `session` (0: to nobody yet, held by one
 * importer). Its journal record `rec` is written again under this
 * daemon's epoch, so that the next daemon keeps the slot for its report. */
static int adopt_slot(struct frame_pool *p, uint32_t id, unsigned order, uint64_t session,
                      uid_t uid, uint32_t tenant, const struct journal_rec *rec)
{
    uint64_t bytes = obytes(p, order);
    int rc = commit(p, bytes, NULL);
    if (rc != 0)
        return rc;
    struct frame *f = &p->frames[frame_id_slot(id)];
    memset(f, 0, sizeof(*f));
    f->gen = frame_id_gen(id);
    f->mem = (struct mb_mem)MB_MEM_INIT;
    f->state = FRAME_GRANTED;
    f->owner = session;
    f->holders = session ? 0 : 1;
    f->last_tenant = tenant;
    f->last_uid = uid;
    f->held = true;
    f->adopted = true;
    f->order = (uint8_t)order;
    journal_write(p, frame_id_slot(id), *rec);
    p->n_total++;
    p->n_granted++;
    p->bytes_total += bytes;
    p->bytes_granted += bytes;
    POOL_CHECK(p);
    return 0;
}

/* The journal's word on a reported frame of `order`: 0 and *rec, or
 * MB_EPERM when no uid was granted a frame of that order under that id.
 * Without a journal (unit tests) nothing is known: 0 with an empty rec. */
static int reported_ok(struct frame_pool *p, uint32_t id, int order, struct journal_rec *rec)
{
    int rc = journal_lookup(p, id, rec);
    if (rc == MB_EINVAL) {
        memset(rec, 0, sizeof(*rec));
        return 0;
    }
    return rc == 0 && rec->order == order ? 0 : MB_EPERM;
}

/* The slot of a frame an earlier daemon handed out as id, if this daemon
 * could book it: below id_limit, and not a slot this daemon reused. */
static struct frame *reported_slot(struct frame_pool *p, uint32_t id)
{
    uint32_t slot = frame_id_slot(id);
    if (slot == 0 || slot >= p->id_limit || p->frames[slot].reusable)
        return NULL;
    return &p->frames[slot];
}

int frame_pool_adopt_held(struct frame_pool *p, uint32_t id, uint64_t bytes, uid_t uid)
{
    int order = mb_frame_order(bytes, p->frame_bytes);
    struct frame *f = reported_slot(p, id);
    if (!f || order < 0)
        return MB_EINVAL;
    struct journal_rec rec;
    if (reported_ok(p, id, order, &rec) != 0 ||
        (rec.uid_plus1 && rec.uid_plus1 != (uint32_t)uid + 1 &&
         rec.importer_plus1 != (uint32_t)uid + 1))
        return MB_EPERM;   /* no earlier daemon let this uid hold a frame like that */
    if (f->state == FRAME_UNUSED)
        return adopt_slot(p, id, (unsigned)order, 0, rec.uid_plus1 ? (uid_t)(rec.uid_plus1 - 1) : uid,
                          0, &rec);
    if (f->state != FRAME_GRANTED || !f->adopted || f->order != order ||
        f->gen != frame_id_gen(id))
        return MB_EPERM;    /* contradicts what was reported before */
    f->holders++;
    POOL_CHECK(p);
    return 0;
}

int frame_pool_adopt_reported(struct frame_pool *p, uint32_t id, uint64_t bytes, uint64_t session,
                              uid_t uid, uint32_t tenant)
{
    int order = mb_frame_order(bytes, p->frame_bytes);
    struct frame *f = reported_slot(p, id);
    if (!f || order < 0)
        return MB_EINVAL;   /* no earlier daemon handed this out */
    struct journal_rec rec;
    if (reported_ok(p, id, order, &rec) != 0 ||
        (rec.uid_plus1 != 0 && rec.uid_plus1 != (uint32_t)uid + 1))
        return MB_EPERM;    /* this uid was never granted it */
    if (f->state == FRAME_GRANTED && f->adopted && f->owner == 0 && f->order == order &&
        f->gen == frame_id_gen(id)) {
        /* Its importers reported it first: the owner claims it. */
        f->owner = session;
        f->last_uid = uid;
        f->last_tenant = tenant;
        POOL_CHECK(p);
        return 0;
    }
    if (f->state != FRAME_UNUSED)
        return MB_EPERM;    /* someone else reported it first */
    return adopt_slot(p, id, (unsigned)order, session, uid, tenant, &rec);
}

void frame_pool_forget_free(struct frame_pool *p)
{
    for (uint32_t slot = 1; slot < p->next_unused; slot++) {
        struct frame *f = &p->frames[slot];
        if (f->state == FRAME_FREE && f->held)   /* cleared, under what the next daemon reuses it as */
            journal_write(p, slot, (struct journal_rec){ .gen = next_gen(f->gen) });
    }
}

uint32_t frame_pool_reclaim(struct frame_pool *p, uint64_t session, uint64_t *bytes)
{
    uint32_t n = 0;
    uint64_t b = 0;
    for (uint32_t slot = 1; slot < p->next_unused; slot++) {
        struct frame *f = &p->frames[slot];
        if (f->state == FRAME_GRANTED && f->owner == session) {
            b += obytes(p, f->order);
            let_go(p, slot);
            n++;
        }
    }
    if (bytes)
        *bytes = b;
    POOL_CHECK(p);
    return n;
}

bool frame_pool_is_valid(const struct frame_pool *p)
{
    uint32_t total = 0, granted = 0, granted_fd = 0, free_count = 0;
    uint32_t exported_order[MB_ORDERS] = { 0 };
    uint64_t bytes = 0, bytes_granted = 0, bytes_free = 0;
    uint32_t reusable = 0, queued = 0, last = 0;
    for (uint32_t slot = p->reuse_head; slot; last = slot, slot = p->frames[slot].next_free)
        if (slot >= p->next_unused || p->frames[slot].state != FRAME_UNUSED || !p->frames[slot].reusable ||
            ++queued > p->n_reusable)
            return false;
    if (queued != p->n_reusable || last != p->reuse_tail || p->next_unused > FRAME_SLOTS)
        return false;
    for (uint32_t slot = 1; slot < p->next_unused; slot++) {
        const struct frame *f = &p->frames[slot];
        if (f->gen >= FRAME_GENS || f->named)
            return false;
        reusable += f->reusable;
        if (f->state == FRAME_UNUSED)
            continue;
        if (f->reusable)
            return false;
        if (f->order > MB_MAX_ORDER)
            return false;
        total++;
        bytes += obytes(p, f->order);
        if (f->state == FRAME_GRANTED && f->owner == 0 && f->holders == 0)
            return false;
        if (f->state != FRAME_GRANTED && f->holders)
            return false;
        if (f->state == FRAME_GRANTED) {
            granted++;
            granted_fd += f->mem.fd >= 0;
            bytes_granted += obytes(p, f->order);
        }
    }
    uint32_t in_order[MB_ORDERS] = { 0 };
    for (uint32_t i = 0; i <= p->n_by_uid; i++) {
        const struct free_list *l = i < p->n_by_uid ? p->by_uid[i] : &p->fresh;
        bool fresh = l == &p->fresh;
        for (unsigned k = 0; k < MB_ORDERS; k++) {
            uint32_t in_list = 0;
            for (unsigned c = 0; c < 2; c++)
                for (uint32_t slot = l->head[c][k], prev = 0; slot;
                     prev = slot, slot = p->frames[slot].next_free) {
                    const struct frame *f = &p->frames[slot];
                    if (slot >= p->next_unused || f->state != FRAME_FREE || f->order != k ||
                        f->held == fresh || (!fresh && f->last_uid != l->uid) || f->tainted ||
                        f->adopted || f->prev_free != prev || (f->mem.fd >= 0) != c ||
                        ++in_list > total)
                        return false;
                    bytes_free += obytes(p, k);
                    exported_order[k] += c && !fresh;
                }
            if (in_list != l->n[k])
                return false;
            in_order[k] += in_list;
        }
    }
    for (unsigned k = 0; k < MB_ORDERS; k++) {
        if (in_order[k] != p->n_free_order[k] ||
            exported_order[k] != __atomic_load_n(&p->n_exported_held_order[k], __ATOMIC_RELAXED))
            return false;
        free_count += in_order[k];
    }
    return reusable == p->n_reusable && granted_fd == p->n_granted_fd &&
           total == p->n_total && granted == p->n_granted && free_count == p->n_free &&
           p->n_free + p->n_granted == p->n_total && bytes == p->bytes_total &&
           bytes_granted == p->bytes_granted && bytes_free == p->bytes_free &&
           p->bytes_free + p->bytes_granted == p->bytes_total &&
           p->bytes_total <= p->budget_bytes;
}
