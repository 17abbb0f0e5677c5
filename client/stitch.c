/* stitch.c: the slow tier: reserve a virtual range and map frames side by
 * side into it (the process's own cached frames first, non-contiguous is
 * fine, then the daemon's): order-0 frames for ranges that may grow in
 * place, the few large frames of the frame plan for the rest; and the
 * reverse, in order: wait for the work that may use the range, unmap, free
 * the range, then cache the frames. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "frame_plan.h"
#include "log.h"

/* ---- driver calls: a request's path first ----
 * The driver serialises one process's map, access and unmap calls
 * (FACTS.md: 15-20 k handles a second whatever the threads), and an
 * access or unmap call over n handles holds it n times as long as over
 * one: on an H200 a request's map of 2 frames took 2.9 ms while the
 * background thread's calls covered up to tens of frames each, and on an
 * H100 slices of 2 took two thirds of grow's calls over 2 ms away
 * (BENCHMARKS.md, "Background driver calls in slices"). So a background
 * thread (stitch_background_thread) calls the driver for at most
 * slice_frames frames at a time, and between two slices lets the
 * request-path threads that are mapping, unmapping, importing handles
 * (frames.c) or writing page-table entries (vspace.c) go first
 * (waiters_first). Request paths call over whole ranges, as before. */
static unsigned path_in_driver;   /* request-path threads in stitch_map/stitch_unmap_frames,
                                   * importing handles or writing page-table entries */
static size_t slice_frames = STITCH_SLICE_DEFAULT;
static _Thread_local bool background;

void stitch_background_thread(void) { background = true; }

void stitch_set_slice(size_t frames) { __atomic_store_n(&slice_frames, frames, __ATOMIC_RELAXED); }

/* Frames one driver call of this thread covers at most. */
static size_t slice_now(void)
{
    size_t n = __atomic_load_n(&slice_frames, __ATOMIC_RELAXED);
    return background && n ? n : SIZE_MAX;
}

void stitch_path_enter(void)
{
    if (!background)
        __atomic_add_fetch(&path_in_driver, 1, __ATOMIC_RELAXED);
}

void stitch_path_leave(void)
{
    if (!background)
        __atomic_sub_fetch(&path_in_driver, 1, __ATOMIC_RELAXED);
}

void stitch_path_first(void)
{
    if (background)
        waiters_first(&path_in_driver);
}

int stitch_map(mb_backend *be, struct stitched *s, size_t from, size_t to, size_t off)
{
    /* frames[from..mapped) are mapped, up to end; access given up to done */
    size_t mapped = from, end = off, done = off, per = slice_now();
    int rc = 0;
    stitch_path_enter();
    while (rc == 0 && mapped < to) {
        if (mapped > from)
            waiters_first(&path_in_driver);
        size_t stop = to - mapped > per ? mapped + per : to;
        for (; rc == 0 && mapped < stop; mapped += rc == 0) {
            rc = be->ops->map(be, (char *)s->va + end, &s->frames[mapped]->mem);
            if (rc == 0)
                end += s->frames[mapped]->mem.bytes;
        }
        if (rc == 0 && (rc = be->ops->set_access(be, (char *)s->va + done, end - done)) == 0)
            done = end;
    }
    if (rc != 0 && end > off)
        be->ops->unmap(be, (char *)s->va + off, end - off);
    stitch_path_leave();
    return rc;
}

int stitch_unmap_frames(mb_backend *be, struct stitched *s, size_t k, size_t n, size_t off)
{
    size_t per = slice_now(), i = k, end = off;   /* frames[k..i) unmapped, up to end */
    int rc = 0;
    stitch_path_enter();
    while (rc == 0 && i < n) {
        if (i > k)
            waiters_first(&path_in_driver);
        size_t stop = n - i > per ? i + per : n, bytes = 0;
        for (size_t j = i; j < stop; j++)
            bytes += s->frames[j]->mem.bytes;
        if ((rc = be->ops->unmap(be, (char *)s->va + end, bytes)) == 0) {
            i = stop;
            end += bytes;
        }
    }
    /* All or nothing: a later slice that failed maps the earlier ones again. */
    if (rc != 0 && i > k && stitch_map(be, s, k, i, off) != 0)
        mb_log(MB_LOG_ERR, "failed to map again %zu frames at %p after a failed unmap: the range "
                           "has a hole", i - k, (char *)s->va + off);
    stitch_path_leave();
    return rc;
}

int stitch_map_after(mb_backend *be, struct stitched *s, const struct stitched *t)
{
    if (s->n + t->n > s->cap || t->bytes > s->reserved - s->bytes)
        return MB_EPROTO;
    memcpy(s->frames + s->n, t->frames, t->n * sizeof(t->frames[0]));
    return stitch_map(be, s, s->n, s->n + t->n, s->bytes);
}

static int by_size_desc(const void *a, const void *b)
{
    size_t x = (*(struct cframe *const *)a)->mem.bytes, y = (*(struct cframe *const *)b)->mem.bytes;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Which frames take_frames takes: the frame plan's, the exact plan's, or
 * cached frames of any size first (fcache_take_any). */
enum take_kind { TAKE_PLAN, TAKE_EXACT, TAKE_ANY };

static int take_frames(mb_client *c, size_t bytes, enum take_kind kind, unsigned max_order,
                       unsigned warm_full_per, size_t extra_cap, struct stitched **out)
{
    if (bytes == 0 || bytes > SIZE_MAX / 2)
        return MB_EINVAL;
    struct cframe **fr;
    size_t n;
    int rc = kind == TAKE_ANY
                 ? fcache_take_any(c, bytes, max_order, warm_full_per, &fr, &n)
                 : fcache_take_plan(c, bytes, max_order, kind == TAKE_EXACT, warm_full_per, &fr, &n);
    if (rc != 0)
        return rc;
    /* Largest first: every frame then lies at a multiple of its size. */
    qsort(fr, n, sizeof(*fr), by_size_desc);
    struct stitched *s = stitch_new(n + extra_cap);
    for (size_t i = 0; i < n; i++) {
        if (s)
            stitch_push(s, fr[i]);
        else
            fcache_put(c, fr[i]);
    }
    free(fr);
    if (!s)
        return MB_ENOMEM;
    *out = s;
    return 0;
}

struct stitched *stitch_new(size_t cap)
{
    struct stitched *s = malloc(sizeof(*s) + cap * sizeof(s->frames[0]));
    if (s)
        *s = (struct stitched){ .cap = cap };
    return s;
}

void stitch_push(struct stitched *s, struct cframe *f)
{
    s->frames[s->n++] = f;
    s->bytes += f->mem.bytes;
    s->reserved += f->mem.bytes;
}

int stitch_take_large(mb_client *c, size_t bytes, struct stitched **out)
{
    return take_frames(c, bytes, TAKE_PLAN, MB_MAX_ORDER, 0, 0, out);
}

int stitch_take_exact(mb_client *c, size_t bytes, struct stitched **out)
{
    if (c->exact_plans)
        return take_frames(c, bytes, TAKE_EXACT, MB_MAX_ORDER, 0, 0, out);
    /* A daemon that plans no Grant.exact: each frame of the exact plan as
     * a plan of its own (a plan of one frame is exact), largest first. */
    uint8_t orders[MB_GRANT_MAX_FRAMES];
    uint64_t covered;
    size_t n = mb_frame_plan_exact(bytes, c->frame_bytes, MB_MAX_ORDER, orders, MB_GRANT_MAX_FRAMES,
                                   &covered);
    if (n > MB_GRANT_MAX_FRAMES)
        return MB_EINVAL;
    struct stitched *all = stitch_new(covered / c->frame_bytes);   /* (warm grants: smaller frames) */
    if (!all)
        return MB_ENOMEM;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct stitched *t;
        if ((rc = stitch_take_large(c, (size_t)c->frame_bytes << orders[i], &t)) != 0)
            break;
        for (size_t k = 0; k < t->n; k++)
            stitch_push(all, t->frames[k]);   /* (a frame holds a unit at least: room for all) */
        free(t);
    }
    if (rc != 0) {
        for (size_t k = 0; k < all->n; k++)
            fcache_put(c, all->frames[k]);
        free(all);
        return rc;
    }
    *out = all;
    return 0;
}

int stitch_take_units(mb_client *c, size_t n, struct stitched **out)
{
    struct stitched *s = stitch_new(n);
    int rc = s ? fcache_take(c, n, s->frames) : MB_ENOMEM;
    if (rc != 0) {
        free(s);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        stitch_push(s, s->frames[i]);   /* in place: counts their bytes */
    *out = s;
    return 0;
}

static int alloc_frames(mb_client *c, size_t bytes, bool any, unsigned max_order, size_t room,
                        unsigned warm_full_per, struct stitched **out)
{
    struct stitched *s;
    room = room / c->frame_bytes * c->frame_bytes;
    int rc = take_frames(c, bytes, any ? TAKE_ANY : TAKE_PLAN, max_order, warm_full_per, room / c->frame_bytes,
                         &s);
    if (rc != 0)
        return rc;
    s->reserved += room;
    rc = c->be->ops->reserve(c->be, s->reserved, &s->va);
    if (rc == 0 && (rc = stitch_map(c->be, s, 0, s->n, 0)) != 0)
        c->be->ops->free_va(c->be, s->va, s->reserved);
    if (rc != 0) {
        for (size_t i = 0; i < s->n; i++)
            fcache_put(c, s->frames[i]);
        free(s);
        return rc;
    }
    c->fst.bytes_mapped += s->bytes;
    *out = s;
    return 0;
}

int stitch_alloc_large(mb_client *c, size_t bytes, unsigned max_order, size_t room, struct stitched **out)
{
    return alloc_frames(c, bytes, false, max_order, room, 0, out);
}

int stitch_alloc_warm(mb_client *c, size_t bytes, unsigned warm_full_per, struct stitched **out)
{
    return alloc_frames(c, bytes, false, MB_MAX_ORDER, 0, warm_full_per, out);
}

int stitch_alloc_any(mb_client *c, size_t bytes, unsigned max_order, size_t room, struct stitched **out)
{
    return alloc_frames(c, bytes, true, max_order, room, 0, out);
}

int stitch_alloc(mb_client *c, size_t bytes, size_t reserve_bytes, struct stitched **out)
{
    size_t fb = c->frame_bytes;
    if (bytes == 0 || bytes > SIZE_MAX - fb || reserve_bytes < bytes || reserve_bytes > SIZE_MAX - fb)
        return MB_EINVAL;
    size_t n = (bytes + fb - 1) / fb;
    size_t cap = (reserve_bytes + fb - 1) / fb;
    struct stitched *s = malloc(sizeof(*s) + cap * sizeof(s->frames[0]));
    if (!s)
        return MB_ENOMEM;
    s->n = n;
    s->cap = cap;
    s->bytes = n * fb;
    s->reserved = cap * fb;
    s->imported = false;
    s->mapped_async = false;
    s->holes = 0;
    int rc = c->be->ops->reserve(c->be, s->reserved, &s->va);
    if (rc != 0) {
        free(s);
        return rc;
    }
    rc = fcache_take(c, n, s->frames);
    if (rc == 0 && (rc = stitch_map(c->be, s, 0, n, 0)) != 0)
        for (size_t i = 0; i < n; i++)
            fcache_put(c, s->frames[i]);
    if (rc != 0) {
        c->be->ops->free_va(c->be, s->va, s->reserved);
        free(s);
        return rc;
    }
    c->fst.bytes_mapped += s->bytes;
    *out = s;
    return 0;
}

int stitch_adopt(mb_client *c, struct cframe **frames, size_t n, struct stitched **out)
{
    struct stitched *s = malloc(sizeof(*s) + n * sizeof(s->frames[0]));
    if (!s)
        return MB_ENOMEM;
    s->n = s->cap = n;
    s->bytes = 0;
    for (size_t i = 0; i < n; i++) {
        s->bytes += frames[i]->mem.bytes;
        if (i && frames[i]->mem.bytes > frames[i - 1]->mem.bytes) {
            free(s);
            return MB_EPROTO;   /* the exporter's ranges are largest first */
        }
    }
    s->reserved = s->bytes;
    s->imported = true;
    s->mapped_async = false;
    s->holes = 0;
    memcpy(s->frames, frames, n * sizeof(*frames));
    int rc = c->be->ops->reserve(c->be, s->reserved, &s->va);
    if (rc == 0 && (rc = stitch_map(c->be, s, 0, n, 0)) != 0)
        c->be->ops->free_va(c->be, s->va, s->reserved);
    if (rc != 0) {
        free(s);
        return rc;
    }
    c->fst.bytes_mapped += s->bytes;
    *out = s;
    return 0;
}

/* Unmap every run of frames between s's holes. */
static int unmap_runs(mb_client *c, struct stitched *s)
{
    if (s->holes == 0)
        return stitch_unmap_frames(c->be, s, 0, s->n, 0);
    size_t off = 0, run = 0;
    int rc = 0;
    for (size_t i = 0; i <= s->n && rc == 0; i++) {
        if (i < s->n && !s->frames[i]->hole) {
            run += s->frames[i]->mem.bytes;
            continue;
        }
        if (run)
            rc = c->be->ops->unmap(c->be, (char *)s->va + off, run);
        off += run + (i < s->n ? s->frames[i]->mem.bytes : 0);
        run = 0;
    }
    return rc;
}

int stitch_free(mb_client *c, struct stitched *s, void *stream)
{
    (void)stream;   /* the caller knows no work uses the range any more */
    int rc = unmap_runs(c, s);
    if (rc != 0)
        return rc;   /* still mapped: keep everything as it is */
    c->be->ops->free_va(c->be, s->va, s->reserved);
    /* Frames shared with another process go back to the daemon (which
     * keeps them for the importers), the rest into the cache. */
    uint32_t *ids = NULL;
    size_t n_shared = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->frames[i]->hole) {
            free(s->frames[i]);
            continue;
        }
        if (!s->frames[i]->exported) {
            fcache_put(c, s->frames[i]);
            continue;
        }
        if (!ids && !(ids = malloc(s->n * sizeof(*ids))))
            rc = MB_ENOMEM;
        if (ids)
            ids[n_shared++] = s->frames[i]->id;
        fcache_forget(c, s->frames[i]);
    }
    if (n_shared)
        rc = fcache_return_ids(c, ids, n_shared);
    if (rc != 0)   /* the session's end gives them back */
        mb_log(MB_LOG_WARN, "failed to return %zu shared frames of an unmapped range: %s", n_shared,
               mb_strerror(rc));
    free(ids);
    c->fst.bytes_mapped -= s->bytes - s->holes;
    free(s);
    return 0;   /* unmapped and gone, whatever the return did */
}

int stitch_punch(struct stitched *s, size_t from, size_t to, struct cframe **out)
{
    struct cframe **ph = malloc((to - from) * sizeof(*ph));
    size_t k = 0;
    while (ph && k < to - from && (ph[k] = calloc(1, sizeof(**ph))) != NULL)
        k++;
    if (!ph || k < to - from) {
        while (ph && k)
            free(ph[--k]);
        free(ph);
        return MB_ENOMEM;
    }
    for (size_t i = from; i < to; i++) {
        struct cframe *h = ph[i - from];
        h->hole = true;
        h->id = UINT32_MAX;
        h->mem.bytes = s->frames[i]->mem.bytes;
        out[i - from] = s->frames[i];
        s->frames[i] = h;
        s->holes += h->mem.bytes;
    }
    free(ph);
    return 0;
}

void stitch_unpunch(struct stitched *s, size_t from, size_t to, struct cframe **frames)
{
    for (size_t i = from; i < to; i++) {
        s->holes -= s->frames[i]->mem.bytes;
        free(s->frames[i]);
        s->frames[i] = frames[i - from];
    }
}

int stitch_unmap_punched(mb_client *c, void *addr, struct cframe **frames, size_t n)
{
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += frames[i]->mem.bytes;
    int rc = c->be->ops->unmap(c->be, addr, bytes);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        fcache_put(c, frames[i]);
    c->fst.bytes_mapped -= bytes;
    c->fst.unmaps++;
    return 0;
}

bool stitch_is_valid(const mb_client *c, const struct stitched *s)
{
    size_t sum = 0, holes = 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct cframe *f = s->frames[i];
        if ((!f->in_use && !f->hole) || (i && f->mem.bytes > s->frames[i - 1]->mem.bytes))
            return false;
        sum += f->mem.bytes;
        holes += f->hole ? f->mem.bytes : 0;
    }
    if (sum != s->bytes || holes != s->holes || s->bytes > s->reserved || s->n > s->cap)
        return false;
    return s->cap == s->n || (s->reserved == s->cap * c->frame_bytes && sum == s->n * c->frame_bytes);
}
