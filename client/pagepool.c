/* pagepool.c: the client's pools of mapped vspace pages (pagepool.h):
 * extents of large frames mapped once and carved into pages, taking and
 * giving pages without a driver call, pages unmapped on a stream held until
 * their work completed, and the background step that refills a pool to its
 * watermark and returns extents left idle. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <moonbright/vspace.h>

#include "frame_plan.h"
#include "log.h"
#include "pagepool.h"
#include "vsnodes.h"
#include "refill.h"
#include "wire.h"

/* Extents are the frame plan's frames of order 0..9: 2 MiB .. 1 GiB at the
 * default 2 MiB unit, one descriptor each; a request larger than that maps
 * its own plan. An extent is at least a quarter of what the pool holds
 * already, and at least order EXTENT_MIN_ORDER (64 MiB) once the pool
 * holds four times that: a small load holds little, and a growing one
 * reaches 64 MiB extents within about 16 (no more than the free-page cap
 * above that least size). */
#define EXTENT_MIN_ORDER 5
/* The free-page cap: the watermark and the extents are at most the pages in
 * use / LOW_SHARE (about 1.6 %), or LOW_FLOOR_BYTES of pages while the pool
 * is small (so the early part of a growing load, whose single requests
 * may take hundreds of pages, does not wait on the driver; at a peak of
 * more than 32 GiB of pages the share decides). For the watermark that
 * floor is at most twice the largest single take of the last second: a
 * load of small requests keeps little free. */
#define LOW_SHARE 64
#define LOW_FLOOR_BYTES ((size_t)512 << 20)

#ifdef MB_DEBUG
#define PP_CHECK(p) do { if (!pagepool_is_valid(p)) abort(); } while (0)
#else
#define PP_CHECK(p) ((void)0)
#endif

/* ---- the frame layer: every call pagepool.c makes into it ---- */

/* A stitched range of the frame plan's frames for bytes, mapped. Pages
 * lie anywhere in it, so its frames may be many: where the daemon would
 * release free frames to make the planned ones (its budget or the device
 * full of frames of other sizes, tenants gone), it may grant up to
 * EXTENT_WARM_PER of its free frames per planned frame instead. Making a
 * frame that way took 6-9 ms a grant on an H100, against about 80 us a
 * frame to import and map. Elsewhere the planned frames are made: fewer
 * frames for the refill a request may wait on. */
#define EXTENT_WARM_PER 16
static int fl_map(mb_client *c, size_t bytes, struct stitched **out)
{
    fl_lock(c);
    int rc = stitch_alloc_warm(c, bytes, EXTENT_WARM_PER, out);
    fl_unlock(c);
    return rc;
}

/* Unmap ranges whose pages are all free and idle; their frames go to the
 * frame cache, which keeps at most its usual bytes. c->lock held. */
static void fl_unmap_held(mb_client *c, struct stitched **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (stitch_free(c, s[i], NULL) != 0)
            mb_log(MB_LOG_ERR, "failed to unmap a page pool's extent; its frames stay mapped");
    if (n && c->fc.bytes_cached > c->fc.keep_bytes)
        fcache_trim(c, c->fc.keep_bytes);
}

static void fl_unmap(mb_client *c, struct stitched **s, size_t n)
{
    if (n == 0)
        return;
    fl_lock(c);
    fl_unmap_held(c, s, n);
    fl_unlock(c);
}

/* ---- extents ---- */

static bool extent_is_valid(const struct pp_extent *x, size_t page_bytes)
{
    if (x->n_free > x->npages || x->npages != x->s->bytes / page_bytes ||
        x->base != (uint64_t)(uintptr_t)x->s->va || x->base % page_bytes ||
        (x->idle_since_ms != 0) != (x->n_free == x->npages))
        return false;
    uint8_t *seen = calloc(x->npages, 1);
    bool ok = seen != NULL;
    for (size_t i = 0; ok && i < x->n_free; i++) {
        ok = x->free[i] < x->npages && !seen[x->free[i]];
        if (ok)
            seen[x->free[i]] = 1;
    }
    free(seen);
    return ok;
}

bool pagepool_is_valid(struct pagepool *p)
{
    size_t total = 0, nfree = 0;
    for (size_t i = 0; i < p->n_ext; i++) {
        const struct pp_extent *x = p->ext[i];
        if (!extent_is_valid(x, p->page_bytes) ||
            (i && p->ext[i - 1]->base + p->ext[i - 1]->npages * p->page_bytes > x->base) ||
            (i < p->first_free && x->n_free))
            return false;
        total += x->npages;
        nfree += x->n_free;
    }
    size_t pend = 0;
    for (const struct pp_pending *q = p->pending; q; q = q->next)
        pend += q->n;
    return total == p->n_total && nfree == p->n_free && pend == p->n_pending &&
           p->n_free + p->n_pending + p->n_used == p->n_total &&
           demand_is_valid(&p->dm, p->n_used + p->n_pending);
}

/* The extent holding page, or NULL. */
static struct pp_extent *extent_of(struct pagepool *p, uint64_t page, size_t *idx)
{
    size_t lo = 0, hi = p->n_ext;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->ext[mid]->base <= page)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    struct pp_extent *x = p->ext[lo - 1];
    if (page >= x->base + x->npages * p->page_bytes || (page - x->base) % p->page_bytes)
        return NULL;
    *idx = lo - 1;
    return x;
}

bool pagepool_owns(struct pagepool *p, uint64_t page)
{
    size_t i;
    pthread_mutex_lock(&p->lock);
    bool yes = extent_of(p, page, &i) != NULL;
    pthread_mutex_unlock(&p->lock);
    return yes;
}

/* A newly mapped range joins the pool, all free. Pool lock held. */
static int add_extent(struct pagepool *p, struct stitched *s, int64_t now)
{
    struct pp_extent *x = calloc(1, sizeof(*x));
    size_t np = s->bytes / p->page_bytes;
    if (x)
        x->free = malloc(np * sizeof(*x->free));
    if (p->n_ext == p->cap_ext && x && x->free) {
        size_t cap = p->cap_ext ? 2 * p->cap_ext : 8;
        struct pp_extent **ne = realloc(p->ext, cap * sizeof(*ne));
        if (ne) {
            p->ext = ne;
            p->cap_ext = cap;
        }
    }
    if (!x || !x->free || p->n_ext == p->cap_ext) {
        if (x)
            free(x->free);
        free(x);
        return MB_ENOMEM;
    }
    x->s = s;
    x->base = (uint64_t)(uintptr_t)s->va;
    x->npages = np;
    x->n_free = np;
    x->idle_since_ms = now ? now : 1;
    for (size_t i = 0; i < np; i++)
        x->free[i] = (uint32_t)(np - 1 - i);   /* pops give the lowest first */
    size_t at = p->n_ext;
    while (at > 0 && p->ext[at - 1]->base > x->base)
        at--;
    memmove(p->ext + at + 1, p->ext + at, (p->n_ext - at) * sizeof(*p->ext));
    p->ext[at] = x;
    p->n_ext++;
    if (at < p->first_free)
        p->first_free = at;
    p->n_total += np;
    p->n_free += np;
    p->extents_mapped++;
    return 0;
}

/* Take the extents whose pages are all free (and idle since idle_before
 * when it is not 0) out of the pool, keeping at least `keep` free pages;
 * their ranges go to out[] (room for n_ext). Pool lock held. */
static size_t remove_free_extents(struct pagepool *p, int64_t idle_before, size_t keep,
                                  struct stitched **out)
{
    size_t k = 0, j = 0;
    for (size_t i = 0; i < p->n_ext; i++) {
        struct pp_extent *x = p->ext[i];
        bool go = x->n_free == x->npages && p->n_free >= keep + x->npages &&
                  (idle_before == 0 || x->idle_since_ms <= idle_before);
        if (!go) {
            p->ext[j++] = x;
            continue;
        }
        p->n_free -= x->npages;
        p->n_total -= x->npages;
        out[k++] = x->s;
        free(x->free);
        free(x);
    }
    p->n_ext = j;
    p->first_free = 0;
    while (p->first_free < p->n_ext && p->ext[p->first_free]->n_free == 0)
        p->first_free++;
    return k;
}

/* ---- free pages ---- */

/* Pages held now fell (at now): the window's lowest point may be lower. */
static void note_held(struct pagepool *p, int64_t now)
{
    demand_note(&p->dm, p->n_used + p->n_pending, 0, now);
}

static void push_pages(struct pagepool *p, const uint64_t *pages, size_t n, int64_t now)
{
    /* Last first: pops then return them in the order given. Pages come in
     * runs of one extent: the last one found is tried first. */
    struct pp_extent *x = NULL;
    size_t idx = 0;
    unsigned shift = (unsigned)__builtin_ctzll(p->page_bytes);
    for (size_t j = n; j-- > 0;) {
        if (!x || pages[j] < x->base || pages[j] >= x->base + ((uint64_t)x->npages << shift) ||
            (pages[j] - x->base) & (p->page_bytes - 1))
            x = extent_of(p, pages[j], &idx);
        if (!x || x->n_free == x->npages) {
            mb_log(MB_LOG_ERR, "failed to return page %#llx to its pool: not a used page of it",
                   (unsigned long long)pages[j]);
            continue;
        }
        x->free[x->n_free++] = (uint32_t)((pages[j] - x->base) >> shift);
        p->n_free++;
        if (x->n_free == x->npages)
            x->idle_since_ms = now ? now : 1;
        if (idx < p->first_free)
            p->first_free = idx;
    }
}

/* Query q's events, newest last, dropping those complete: 1 when none is
 * left, 0 while one runs, <0 when the device failed. */
static int batch_done(mb_client *c, struct pp_pending *q, bool wait)
{
    while (q->nev) {
        void *ev = q->evs[q->nev - 1];
        int done = lclock_fence_query(&c->lclk, c->be, ev);
        while (wait && done == 0) {
            struct timespec ts = { 0, 20000 };
            nanosleep(&ts, NULL);
            done = lclock_fence_query(&c->lclk, c->be, ev);
        }
        if (done != 1)
            return done;
        lclock_fence_drop(c->be, ev);
        q->nev--;
    }
    return 1;
}

/* Pending batches whose work completed become free; with wait, wait for
 * all of them. Pool lock held. */
static void reclaim(struct pagepool *p, bool wait, int64_t now)
{
    for (struct pp_pending **qq = &p->pending; *qq;) {
        struct pp_pending *q = *qq;
        int done = batch_done(p->c, q, wait);
        if (done < 0) {   /* the device failed: the pages may never be safe to reuse */
            mb_log(MB_LOG_ERR, "failed to learn whether unmapped pages are idle: %s; "
                               "keeping them out of use", mb_strerror(done));
            qq = &q->next;
            if (wait)
                break;
            continue;
        }
        if (!done) {
            qq = &q->next;
            continue;
        }
        *qq = q->next;
        p->n_pending -= q->n;
        push_pages(p, q->pages, q->n, now);
        if (q->nn)
            vsnodes_put(q->nodes_to, q->nodes, q->nn);
        free(q);
    }
    note_held(p, now);
}

/* The free-page cap (see LOW_SHARE) of a pool; by_take: the floor as low
 * as twice the largest take. Pool lock held. */
static size_t cap_of(const struct pagepool *p, bool by_take)
{
    size_t share = p->n_used / LOW_SHARE, floor = LOW_FLOOR_BYTES / p->page_bytes;
    if (by_take) {
        size_t take2 = 2 * demand_largest_take(&p->dm);
        floor = take2 < floor ? take2 : floor;
    }
    return share > floor ? share : floor;
}

/* The watermark: twice the demand of the last second (demand.h: the
 * largest rise of the pages held, used or unmapped and waiting for their
 * work, in a window), but never more than the cap (free pages are memory
 * held for nobody: a burst that outruns the thread waits rather than
 * doubling the pool). Pool lock held. */
static size_t low_of(const struct pagepool *p, size_t peak)
{
    size_t cap = cap_of(p, true);
    return 2 * peak < cap ? 2 * peak : cap;
}

/* n pages are about to be taken (0: the clock only). */
static void note_demand(struct pagepool *p, size_t n, int64_t now)
{
    p->low = low_of(p, demand_note(&p->dm, p->n_used + p->n_pending, n, now));
}

/* Map an extent holding at least need pages (and, room allowing, the
 * watermark's worth); no lock held. Sizes: order 0..9 frames of the unit
 * from the least above (total: the pages the pool holds), the smallest
 * that covers need + low but none above the free-page cap (so
 * a pool's free pages stay a few percent of its used ones); exactly need
 * when that fails for memory or quota. A failure is an error for a caller
 * (refill false); the refill thread's tries again later, so it is news
 * only (near the budget it is expected). */
static int map_extent(struct pagepool *p, size_t need, size_t low, size_t cap, size_t total,
                      bool refill, struct stitched **out)
{
    mb_client *c = p->c;
    size_t unit = c->frame_bytes, pb = p->page_bytes;
    size_t exact = round_unit(need * pb, unit);
    size_t want = (need + low) * pb;
    size_t lo = unit, hi = unit << MB_MAX_ORDER;
    while (lo < (unit << EXTENT_MIN_ORDER) && lo < total * pb / 4)
        lo <<= 1;
    while (hi > lo && hi > cap * pb)
        hi >>= 1;
    size_t bytes = lo;
    while (bytes < want && bytes < hi)
        bytes <<= 1;
    if (bytes < exact)
        bytes = exact;   /* more than one large frame: the plan of exactly need */
    int rc = fl_map(c, bytes, out);
    if (refused_for_room(rc) && bytes > exact)
        rc = fl_map(c, exact, out);
    if (rc) {
        char why[sizeof(c->refusal)];
        fcache_refusal(c, rc, why, sizeof(why));
        mb_log(refill ? MB_LOG_INFO : MB_LOG_ERR, "%s to map %zu KiB for %zu %zu-KiB vspace pages: %s",
               refill ? "the refill thread could not" : "failed", exact >> 10, need, pb >> 10, why);
    }
    return rc;
}

/* Grow by one extent for need pages with the pool lock held on entry and
 * exit (dropped around the frame layer); refill: for the refill thread,
 * delay_us its test hook. */
static int grow_locked(struct pagepool *p, size_t need, bool refill, unsigned delay_us)
{
    size_t low = p->low, cap = cap_of(p, false), total = p->n_total;
    p->growers++;
    pthread_mutex_unlock(&p->lock);
    struct stitched *s;
    int rc = map_extent(p, need, low, cap, total, refill, &s);
    if (delay_us) {
        struct timespec ts = { delay_us / 1000000u, (long)(delay_us % 1000000u) * 1000L };
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&p->lock);
    p->growers--;
    if (rc == 0 && (rc = add_extent(p, s, mb_now_ms())) != 0) {
        pthread_mutex_unlock(&p->lock);
        fl_unmap(p->c, &s, 1);
        pthread_mutex_lock(&p->lock);
    }
    pthread_cond_broadcast(&p->grown);
    return rc;
}

int pagepool_take(struct pagepool *p, size_t n, uint64_t *out)
{
    if (n == 0)
        return 0;
    int64_t now = mb_now_ms();
    pthread_mutex_lock(&p->lock);
    if (p->pending)   /* pages whose work completed come back first (lowest address first) */
        reclaim(p, false, now);
    note_demand(p, n, now);
    bool waited = false;
    int rc = 0;
    /* What a wait found, for its line at debug level (MOONBRIGHT_LOG=debug):
     * the pages free, the watermark, a refill already on its way. */
    size_t free0 = p->n_free, low0 = p->low;
    bool refilling = p->growers > 0;
    uint64_t t0 = p->n_free < n ? mb_now_ns() : 0;
    while (rc == 0 && p->n_free < n) {
        waited = true;
        /* An extent on its way (the background thread's, or another
         * caller's) is awaited rather than doubled by one of our own: it
         * is further along, and two would hold twice the free pages. */
        if (p->growers) {
            pthread_cond_wait(&p->grown, &p->lock);
            continue;
        }
        rc = grow_locked(p, n - p->n_free, false, 0);
    }
    if (waited)
        p->waits++;
    uint64_t wait_ns = waited ? mb_now_ns() - t0 : 0;
    if (rc) {
        pthread_mutex_unlock(&p->lock);
        return rc;
    }
    size_t k = 0;
    for (size_t i = p->first_free; k < n && i < p->n_ext; i++) {
        struct pp_extent *x = p->ext[i];
        if (x->n_free && k < n)
            x->idle_since_ms = 0;
        while (x->n_free && k < n)
            out[k++] = x->base + (uint64_t)x->free[--x->n_free] * p->page_bytes;
        if (x->n_free == 0 && i == p->first_free)
            p->first_free = i + 1;
    }
    p->n_free -= n;
    p->n_used += n;
    bool kick = p->n_free < p->low && p->growers == 0;
    PP_CHECK(p);
    pthread_mutex_unlock(&p->lock);
    if (waited)
        mb_log(MB_LOG_DEBUG,
               "a map of %zu %zu-KiB vspace pages waited %.2f ms: %zu pages were free "
               "(watermark %zu), %s",
               n, p->page_bytes >> 10, wait_ns / 1e6, free0, low0,
               refilling ? "a refill already on its way" : "no refill on its way");
    if (kick && p->c->refill)
        refill_kick(p->c->refill);
    return 0;
}

int pagepool_prepare(struct pagepool *p, size_t n)
{
    int rc = 0;
    pthread_mutex_lock(&p->lock);
    while (rc == 0 && p->n_free < n)
        rc = grow_locked(p, n - p->n_free, false, 0);
    PP_CHECK(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

void pagepool_give(struct pagepool *p, const uint64_t *pages, size_t n)
{
    if (n == 0)
        return;
    int64_t now = mb_now_ms();
    pthread_mutex_lock(&p->lock);
    size_t before = p->n_free;
    push_pages(p, pages, n, now);
    p->n_used -= p->n_free - before;
    note_held(p, now);
    PP_CHECK(p);
    pthread_mutex_unlock(&p->lock);
}

void pagepool_defer(struct pagepool *p, const uint64_t *pages, size_t n, void *stream)
{
    if (n == 0)
        return;
    mb_backend *be = p->c->be;
    void *ev = NULL;
    int rc = lclock_fence(&p->c->lclk, be, stream, &ev);
    if (rc != 0 && (rc = be->ops->stream_sync(be, stream)) == 0)
        ev = NULL;   /* no fence: the stream was waited for, the pages are idle */
    if (rc == 0 && (rc = pagepool_retire(p, pages, n, &ev, ev != NULL, NULL, NULL, 0)) != 0)
        lclock_fence_drop(be, ev);
    if (rc != 0)
        mb_log(MB_LOG_ERR, "failed to wait for unmapped pages to be idle: %s; "
                           "keeping them out of use", mb_strerror(rc));
    /* on failure they count as used until the pool is freed */
}

int pagepool_retire(struct pagepool *p, const uint64_t *pages, size_t n, void *const *evs,
                    size_t nev, struct vsnodes *to, const uint64_t *nodes, size_t nn)
{
    struct pp_pending *q = malloc(sizeof(*q) + (n + nn) * sizeof(uint64_t) + nev * sizeof(void *));
    if (!q)
        return MB_ENOMEM;
    if (n)
        memcpy(q->pages, pages, n * sizeof(*pages));
    q->nodes = q->pages + n;
    if (nn)
        memcpy(q->nodes, nodes, nn * sizeof(*nodes));
    q->evs = (void **)(q->nodes + nn);
    if (nev)
        memcpy(q->evs, evs, nev * sizeof(*evs));
    q->nev = nev;
    q->nn = to ? nn : 0;
    q->nodes_to = to;
    q->n = n;
    bool done = batch_done(p->c, q, false) == 1;   /* its work may be over already */
    pthread_mutex_lock(&p->lock);
    p->n_used -= n;
    if (done) {
        int64_t now = mb_now_ms();
        push_pages(p, q->pages, n, now);
        note_held(p, now);
    } else {
        q->next = p->pending;
        p->pending = q;
        p->n_pending += n;
    }
    PP_CHECK(p);
    pthread_mutex_unlock(&p->lock);
    if (done) {
        if (q->nn)
            vsnodes_put(to, q->nodes, q->nn);
        free(q);
    }
    return 0;
}

/* ---- the pools of a client ---- */

int pagepool_get(mb_client *c, size_t page_bytes, struct pagepool **out)
{
    struct refill *r;
    int rc = refill_get(c, &r);
    if (rc)
        return rc;
    int k = 0;
    while (((size_t)MB_VSPACE_MIN_PAGE << k) < page_bytes)
        k++;
    if (k >= REFILL_PAGE_SIZES || ((size_t)MB_VSPACE_MIN_PAGE << k) != page_bytes)
        return MB_EINVAL;
    pthread_mutex_lock(&r->lock);
    struct pagepool *p = r->pools[k];
    if (!p && (p = calloc(1, sizeof(*p))) != NULL) {
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->grown, NULL);
        p->c = c;
        p->page_bytes = page_bytes;
        demand_init(&p->dm, 0, mb_now_ms());
        r->pools[k] = p;
    }
    pthread_mutex_unlock(&r->lock);
    if (!p)
        return MB_ENOMEM;
    *out = p;
    return 0;
}

bool pagepool_needs_refill(struct pagepool *p)
{
    pthread_mutex_lock(&p->lock);
    bool due = p->n_free < p->low || p->pending;
    pthread_mutex_unlock(&p->lock);
    return due;
}

bool pagepool_work(struct pagepool *p, int64_t now, int idle_ms, unsigned delay_us)
{
    bool again = false;
    pthread_mutex_lock(&p->lock);
    if (p->pending)
        reclaim(p, false, now);
    note_demand(p, 0, now);
    /* Refill: one extent per step, up to half again the watermark; after a
     * failure (memory, quota) not again for a second. */
    uint64_t trims = p->trims;
    if (p->n_free < p->low && p->growers == 0 && now >= p->retry_ms) {
        size_t need = p->low + p->low / 2 - p->n_free;
        if (grow_locked(p, need, true, delay_us) != 0)
            p->retry_ms = now + 1000;
        else
            again = p->n_free < p->low;
    }
    /* A trim while the refill mapped: what it mapped goes back as well. */
    bool trimmed = p->trims != trims;
    struct stitched **gone = NULL;
    size_t n_gone = 0;
    if ((p->n_free > p->low || trimmed) && p->n_ext && (gone = malloc(p->n_ext * sizeof(*gone))) != NULL)
        n_gone = remove_free_extents(p, trimmed ? 0 : now - idle_ms, trimmed ? 0 : p->low, gone);
    PP_CHECK(p);
    pthread_mutex_unlock(&p->lock);
    fl_unmap(p->c, gone, n_gone);
    free(gone);
    return again;
}

void pagepool_trim_held(struct pagepool *p)
{
    pthread_mutex_lock(&p->lock);
    reclaim(p, false, mb_now_ms());
    struct stitched **gone = p->n_ext ? malloc(p->n_ext * sizeof(*gone)) : NULL;
    size_t n_gone = gone ? remove_free_extents(p, 0, 0, gone) : 0;
    p->low = 0;
    p->trims++;
    demand_forget(&p->dm, p->n_used + p->n_pending);
    PP_CHECK(p);
    pthread_mutex_unlock(&p->lock);
    fl_unmap_held(p->c, gone, n_gone);
    free(gone);
}

void pagepool_free(struct pagepool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    reclaim(p, true, mb_now_ms());
    if (p->n_used || p->pending)
        mb_log(MB_LOG_ERR, "failed to find every %zu KiB vspace page free at close: %zu in use "
                           "(a vspace was not destroyed); unmapping them", p->page_bytes >> 10,
               p->n_used + p->n_pending);
    struct stitched **gone = p->n_ext ? malloc(p->n_ext * sizeof(*gone)) : NULL;
    size_t n_gone = 0;
    for (size_t i = 0; i < p->n_ext; i++) {
        if (gone)
            gone[n_gone++] = p->ext[i]->s;
        free(p->ext[i]->free);
        free(p->ext[i]);
    }
    while (p->pending) {
        struct pp_pending *q = p->pending;
        p->pending = q->next;
        while (q->nev)
            lclock_fence_drop(p->c->be, q->evs[--q->nev]);
        free(q);
    }
    pthread_mutex_unlock(&p->lock);
    fl_unmap(p->c, gone, n_gone);
    free(gone);
    free(p->ext);
    pthread_cond_destroy(&p->grown);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void pagepool_stats(struct pagepool *p, mb_client_stats *st)
{
    pthread_mutex_lock(&p->lock);
    st->vspace_pool_bytes += p->n_total * p->page_bytes;
    st->vspace_free_bytes += p->n_free * p->page_bytes;
    st->vspace_refill_waits += p->waits;
    st->vspace_extents += p->n_ext;
    pthread_mutex_unlock(&p->lock);
}
