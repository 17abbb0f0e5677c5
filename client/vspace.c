/* vspace.c: vspaces (moonbright/vspace.h): the host mirror of each GPU page
 * table and the runs of entry writes that bring the device copy up to date
 * (PTE kernels on the cuda backend, plain stores on the host backend). The
 * physical pages come from the client's page pools (pagepool.c). */
#include <moonbright/vspace.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "log.h"
#include "pagepool.h"
#include "refill.h"
#include "vsnodes.h"
#include "wire.h"

#ifdef MB_HAVE_KERNELS
#include "mbk_vspace.h"
#endif

/* Glossary
 *   page     page_bytes of physical memory at a device address, carved from
 *            an extent of a page pool (pagepool.h); what a leaf entry points at.
 *   node     FANOUT 64-bit entries (4 KiB) of device memory: the root, a
 *            directory (entries point at nodes) or a leaf (entries point at
 *            pages). Absent entries hold MB_VSPACE_INVALID.
 *   mirror   the host copy of every node (vs_node.e), always equal to what
 *            the device holds once the runs already enqueued have run.
 *   run      one write of consecutive entries of a node (struct vs_run). */

#define FANOUT MB_VSPACE_FANOUT
#define NODE_BYTES ((size_t)FANOUT * sizeof(uint64_t))
#define NODE_SHIFT 12          /* log2(NODE_BYTES): step between nodes of a chunk */

#ifdef MB_DEBUG
#define VS_CHECK(x, fn) do { if (!fn(x)) abort(); } while (0)
#else
#define VS_CHECK(x, fn) ((void)(0 && fn(x)))
#endif

/* Layout of struct mbk_pte_run, so runs go to the kernel as they are. */
struct vs_run {
    uint64_t dst;
    uint64_t value;
    uint32_t count;
    uint32_t step_shift;       /* 0: constant value; else value + (i << step_shift) */
};
#ifdef MB_HAVE_KERNELS
_Static_assert(sizeof(struct vs_run) == sizeof(struct mbk_pte_run) &&
               offsetof(struct vs_run, count) == offsetof(struct mbk_pte_run, count),
               "vs_run must match mbk_pte_run");
#endif

/* How runs and reads reach the table's memory. */
struct vs_engine {
    const char *name;
    int (*write)(const struct vs_run *runs, size_t n, void *stream);
    int (*read)(void *dst, uint64_t src, size_t bytes, void *stream);
    int (*warm)(void);
};

/* Host backend: the table lives in host memory; a "kernel" is plain stores,
 * done at once (host streams are trivially ordered). */
static int host_write(const struct vs_run *runs, size_t n, void *stream)
{
    for (size_t r = 0; r < n; r++) {
        uint64_t *dst = (uint64_t *)(uintptr_t)runs[r].dst;
        for (uint32_t i = 0; i < runs[r].count; i++)
            dst[i] = runs[r].value + (runs[r].step_shift ? (uint64_t)i << runs[r].step_shift : 0);
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
    return 0;
}

static int host_read(void *dst, uint64_t src, size_t bytes, void *stream)
{
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return 0;
}

static int host_warm(void) { return 0; }

static const struct vs_engine host_engine = { "host", host_write, host_read, host_warm };

#ifdef MB_HAVE_KERNELS
/* Counted as a request path's driver call (stitch.c): the background
 * threads' map and unmap slices wait for it. */
static int cuda_write(const struct vs_run *runs, size_t n, void *stream)
{
    stitch_path_enter();
    int rc = mbk_pte_write((const struct mbk_pte_run *)runs, n, stream);
    stitch_path_leave();
    return rc;
}

static pthread_once_t g_warm_once = PTHREAD_ONCE_INIT;
static int g_warm_rc;
static void warm_once(void) { g_warm_rc = mbk_vspace_warm(); }
/* Kernels are launched once per process, before any stream is gated. */
static int cuda_warm(void)
{
    pthread_once(&g_warm_once, warm_once);
    return g_warm_rc;
}

static const struct vs_engine cuda_engine = { "cuda", cuda_write, mbk_read, cuda_warm };
#endif

/* ---- the table ---- */

/* One node of the mirror. Invariants (vspace_is_valid):
 *   used == number of entries e[i] != INVALID
 *   leaf (level 0): e[i] is a page of the pool or INVALID
 *   directory: child[i] != NULL  <=>  e[i] == child[i]->dev
 *   lo < hi  <=>  on the dirty list (entries [lo, hi) not yet sent) */
struct vs_node {
    uint64_t dev;                /* device address of the node's entries */
    uint64_t e[FANOUT];
    struct vs_node **child;      /* directories only */
    uint32_t lo, hi;
    uint32_t used;
    uint32_t level;              /* 0: leaf */
    struct vs_node *next_dirty;
};

/* Streams the vspace enqueued work on, each with an event after its latest. */
struct vs_stream {
    void *stream, *ev;
};

struct mb_vspace {
    mb_client *c;
    struct pagepool *pool;       /* the client's pool of this page size */
    const struct vs_engine *eng;
    pthread_mutex_t lock;        /* serialises calls on this vspace; taken before c->lock */
    struct mb_vspace_dev dev;
    size_t npages;               /* max_bytes / page_bytes */
    size_t mapped;               /* leaf entries != INVALID, all nodes */
    struct vs_node *root;        /* level dev.levels - 1 */
    struct vs_node *dirty;
    struct vsnodes *nodes;       /* the client's node memory (vsnodes.h) */
    uint64_t *spare;             /* nodes taken for the call in progress */
    size_t n_spare, cap_spare;
    struct vs_run *runs;
    size_t n_runs, cap_runs;
    struct vs_stream *streams;
    size_t n_streams;
};

static void node_free(struct vs_node *n)
{
    if (!n)
        return;
    if (n->child) {
        for (size_t i = 0; i < FANOUT; i++)
            node_free(n->child[i]);
        free(n->child);
    }
    free(n);
}

static bool node_is_valid(const mb_vspace *v, const struct vs_node *n, size_t *mapped)
{
    uint32_t used = 0;
    for (size_t i = 0; i < FANOUT; i++) {
        used += n->e[i] != MB_VSPACE_INVALID;
        if (n->level == 0) {
            *mapped += n->e[i] != MB_VSPACE_INVALID;
            if (n->e[i] % v->pool->page_bytes)
                return false;
        } else if ((n->child[i] != NULL) != (n->e[i] != MB_VSPACE_INVALID) ||
                   (n->child[i] && (n->child[i]->dev != n->e[i] ||
                                    n->child[i]->level + 1 != n->level ||
                                    !node_is_valid(v, n->child[i], mapped)))) {
            return false;
        }
    }
    return used == n->used && (n->level == 0) == (n->child == NULL) && n->lo <= FANOUT &&
           n->hi <= FANOUT;
}

static bool vspace_is_valid(const mb_vspace *v)
{
    size_t mapped = 0;
    return v->root && v->root->level + 1 == v->dev.levels && node_is_valid(v, v->root, &mapped) &&
           mapped == v->mapped && v->mapped <= v->npages;
}

static void mark_dirty(mb_vspace *v, struct vs_node *n, uint32_t lo, uint32_t hi)
{
    if (n->lo >= n->hi) {
        n->lo = lo;
        n->hi = hi;
        n->next_dirty = v->dirty;
        v->dirty = n;
    } else {
        n->lo = lo < n->lo ? lo : n->lo;
        n->hi = hi > n->hi ? hi : n->hi;
    }
}

/* Node memory for `more` nodes beyond the spare ones. Called without the
 * client's lock (vsnodes_take may call mb_malloc). */
static int reserve_nodes(mb_vspace *v, size_t more)
{
    if (v->n_spare >= more)
        return 0;
    size_t need = more - v->n_spare;
    if (v->n_spare + need > v->cap_spare) {
        size_t cap = v->cap_spare ? 2 * v->cap_spare : 16;
        while (cap < v->n_spare + need)
            cap *= 2;
        uint64_t *ns = realloc(v->spare, cap * sizeof(*ns));
        if (!ns)
            return MB_ENOMEM;
        v->spare = ns;
        v->cap_spare = cap;
    }
    int rc = vsnodes_take(v->nodes, need, v->spare + v->n_spare);
    if (rc == 0)
        v->n_spare += need;
    return rc;
}

/* A new node, all INVALID in the mirror; dirty whole unless its device
 * memory is already clean (a root). */
static struct vs_node *node_new(mb_vspace *v, uint32_t level, uint64_t clean_dev)
{
    if (!clean_dev && !v->n_spare)
        return NULL;
    struct vs_node *n = calloc(1, sizeof(*n));
    if (!n || (level > 0 && !(n->child = calloc(FANOUT, sizeof(*n->child))))) {
        free(n);
        return NULL;
    }
    n->dev = clean_dev ? clean_dev : v->spare[--v->n_spare];
    n->level = level;
    if (!clean_dev)
        mark_dirty(v, n, 0, FANOUT);
    return n;
}

/* The leaf holding page p; created with its missing parents when create. */
static struct vs_node *leaf_of(mb_vspace *v, size_t p, bool create)
{
    struct vs_node *n = v->root;
    while (n->level > 0) {
        size_t i = (p >> (MB_VSPACE_FANOUT_SHIFT * n->level)) & (FANOUT - 1);
        if (!n->child[i]) {
            if (!create)
                return NULL;
            struct vs_node *k = node_new(v, n->level - 1, 0);
            if (!k)
                return NULL;
            n->child[i] = k;
            n->e[i] = k->dev;
            n->used++;
            mark_dirty(v, n, (uint32_t)i, (uint32_t)i + 1);
        }
        n = n->child[i];
    }
    return n;
}

/* The pages from p on that share p's leaf, up to end. */
static size_t leaf_stretch(size_t p, size_t end)
{
    size_t len = FANOUT - (p & (FANOUT - 1));
    return len < end - p ? len : end - p;
}

/* Nodes that mapping [first, first + n) would add. */
static size_t nodes_missing(mb_vspace *v, size_t first, size_t n)
{
    size_t missing = 0;
    for (uint32_t level = 0; level + 1 < v->dev.levels; level++) {
        /* Nodes of this level cover FANOUT^(level+1) pages each. */
        size_t shift = MB_VSPACE_FANOUT_SHIFT * (level + 1);
        for (size_t k = first >> shift; k <= (first + n - 1) >> shift; k++) {
            /* Does the node of `level` covering page k << shift exist? */
            struct vs_node *x = v->root;
            size_t p = k << shift;
            while (x && x->level > level) {
                size_t i = (p >> (MB_VSPACE_FANOUT_SHIFT * x->level)) & (FANOUT - 1);
                x = x->child[i];
            }
            missing += x == NULL;
        }
    }
    return missing;
}

static int add_run(mb_vspace *v, uint64_t dst, uint64_t value, uint32_t count, uint32_t step)
{
    if (v->n_runs == v->cap_runs) {
        size_t cap = v->cap_runs ? 2 * v->cap_runs : 64;
        struct vs_run *nr = realloc(v->runs, cap * sizeof(*nr));
        if (!nr)
            return MB_ENOMEM;
        v->runs = nr;
        v->cap_runs = cap;
    }
    v->runs[v->n_runs++] = (struct vs_run){ dst, value, count, step };
    return 0;
}

/* Runs for every dirty node: constant stretches (INVALID ones mostly) and
 * stretches stepping by the page size (leaves) or node size (directories). */
static int build_runs(mb_vspace *v)
{
    v->n_runs = 0;
    for (struct vs_node *n = v->dirty; n; n = n->next_dirty) {
        uint32_t step = n->level == 0 ? v->dev.page_shift : NODE_SHIFT;
        for (uint32_t i = n->lo; i < n->hi;) {
            uint64_t x = n->e[i];
            uint32_t j = i + 1;
            if (x == MB_VSPACE_INVALID)
                while (j < n->hi && n->e[j] == x)
                    j++;
            else
                while (j < n->hi && n->e[j] == x + ((uint64_t)(j - i) << step))
                    j++;
            int rc = add_run(v, n->dev + (uint64_t)i * sizeof(uint64_t), x, j - i,
                             x == MB_VSPACE_INVALID || j == i + 1 ? 0 : step);
            if (rc)
                return rc;
            i = j;
        }
    }
    return 0;
}

static void clear_dirty(mb_vspace *v)
{
    while (v->dirty) {
        struct vs_node *n = v->dirty;
        v->dirty = n->next_dirty;
        n->lo = n->hi = 0;
        n->next_dirty = NULL;
    }
}

/* Remember stream and record its event after the work just enqueued. */
static void note_stream(mb_vspace *v, void *stream)
{
    mb_backend *be = v->c->be;
    struct vs_stream *s = NULL;
    for (size_t i = 0; i < v->n_streams && !s; i++)
        if (v->streams[i].stream == stream)
            s = &v->streams[i];
    bool legacy = stream == NULL && be->ops->stream_query;
    if (!s) {
        struct vs_stream *ns = realloc(v->streams, (v->n_streams + 1) * sizeof(*ns));
        if (!ns)
            return;
        v->streams = ns;
        s = &ns[v->n_streams];
        s->stream = stream;
        if (!legacy && be->ops->event_create(be, &s->ev) != 0)
            return;
        v->n_streams++;
    }
    /* The legacy stream needs no event: the legacy clock's token tells
     * when the work enqueued so far is done. */
    if (legacy)
        s->ev = lclock_token(&v->c->lclk);
    else
        be->ops->event_record(be, s->ev, stream);
}

/* Send the dirty entries to the device on stream. On failure the dirty
 * marks stay (a later call sends them) and the caller undoes its changes. */
static int flush(mb_vspace *v, void *stream)
{
    int rc = build_runs(v);
    if (rc == 0 && v->n_runs)
        rc = v->eng->write(v->runs, v->n_runs, stream);
    if (rc) {
        mb_log(MB_LOG_ERR, "failed to enqueue page-table writes: %s", mb_strerror(rc));
        return rc;
    }
    clear_dirty(v);
    note_stream(v, stream);
    return 0;
}

static int check_range(const mb_vspace *v, size_t first, size_t n, const char *what)
{
    /* Zero pages anywhere up to the end is an empty range: nothing to do. */
    if (!v || first > v->npages || (n && (first >= v->npages || n > v->npages - first))) {
        mb_log(MB_LOG_ERR, "failed to %s pages [%zu, +%zu): outside the vspace's %zu pages", what,
               first, n, v ? v->npages : 0);
        return MB_EINVAL;
    }
    return 0;
}

/* A map that took SLOW_MAP_MS or more is logged (MOONBRIGHT_LOG=debug)
 * with where its time went: the vspace's lock, table nodes, the pool's
 * pages (a refill waited for), the entries' write to the device. */
#define SLOW_MAP_MS 1

static void slow_map_log(size_t n, const uint64_t t[5])
{
    if (t[4] - t[0] < (uint64_t)SLOW_MAP_MS * 1000000 || mb_log_level() < MB_LOG_DEBUG)
        return;
    mb_log(MB_LOG_DEBUG, "a vspace map of %zu pages took %.2f ms: %.2f for the vspace's lock, %.2f "
           "for table nodes, %.2f for the pool's pages, %.2f writing the entries", n,
           (t[4] - t[0]) / 1e6, (t[1] - t[0]) / 1e6, (t[2] - t[1]) / 1e6, (t[3] - t[2]) / 1e6,
           (t[4] - t[3]) / 1e6);
}

int mb_vspace_map_async(mb_vspace *v, size_t first, size_t n, void *stream)
{
    int rc = check_range(v, first, n, "map");
    if (rc || n == 0)
        return rc;
    uint64_t t[5];
    t[0] = mb_now_ns();
    pthread_mutex_lock(&v->lock);
    t[1] = mb_now_ns();
    /* Pages of the range not mapped yet (one leaf at a time). */
    size_t want = 0, end = first + n;
    for (size_t p = first, len; p < end; p += len) {
        len = leaf_stretch(p, end);
        const struct vs_node *l = leaf_of(v, p, false);
        if (!l) {
            want += len;
            continue;
        }
        for (size_t i = p & (FANOUT - 1), e = i + len; i < e; i++)
            want += l->e[i] == MB_VSPACE_INVALID;
    }
    uint64_t *pages = want ? malloc(want * sizeof(*pages)) : NULL;
    size_t *where = want ? malloc(want * sizeof(*where)) : NULL;
    if (want && (!pages || !where))
        rc = MB_ENOMEM;
    if (rc == 0 && want)
        rc = reserve_nodes(v, nodes_missing(v, first, n));
    t[2] = mb_now_ns();
    bool taken = false;
    if (rc == 0 && want) {
        rc = pagepool_take(v->pool, want, pages);
        taken = rc == 0;
    }
    t[3] = mb_now_ns();
    size_t k = 0;   /* pages[0..k) entered at where[0..k) */
    for (size_t p = first, len; rc == 0 && k < want && p < end; p += len) {
        len = leaf_stretch(p, end);
        struct vs_node *l = leaf_of(v, p, true);
        if (!l) {
            rc = MB_ENOMEM;
            break;
        }
        /* The entries set here are sent as one stretch [lo, hi) of the
         * leaf (valid ones inside it again, unchanged). */
        uint32_t i0 = (uint32_t)(p & (FANOUT - 1)), lo = FANOUT, hi = 0;
        for (uint32_t i = i0; i < i0 + len && k < want; i++) {
            if (l->e[i] != MB_VSPACE_INVALID)
                continue;
            l->e[i] = pages[k];
            where[k++] = p + (i - i0);
            l->used++;
            lo = i < lo ? i : lo;
            hi = i + 1;
        }
        if (lo < hi)
            mark_dirty(v, l, lo, hi);
    }
    if (rc == 0 && want)
        rc = flush(v, stream);
    if (rc == 0) {
        v->mapped += want;
    } else {
        /* Undo: nothing of this call reached the device. New nodes stay
         * (dirty, so a later call writes them). */
        for (size_t j = 0; j < k; j++) {
            struct vs_node *l = leaf_of(v, where[j], false);
            l->e[where[j] & (FANOUT - 1)] = MB_VSPACE_INVALID;
            l->used--;
        }
        if (taken)
            pagepool_give(v->pool, pages, want);
    }
    VS_CHECK(v, vspace_is_valid);
    pthread_mutex_unlock(&v->lock);
    t[4] = mb_now_ns();
    slow_map_log(n, t);
    free(pages);
    free(where);
    return rc;
}

int mb_vspace_unmap_async(mb_vspace *v, size_t first, size_t n, void *stream)
{
    int rc = check_range(v, first, n, "unmap");
    if (rc || n == 0)
        return rc;
    pthread_mutex_lock(&v->lock);
    size_t cap = n < v->mapped ? n : v->mapped, k = 0;
    uint64_t *pages = cap ? malloc(cap * sizeof(*pages)) : NULL;
    size_t *where = cap ? malloc(cap * sizeof(*where)) : NULL;
    if (cap && (!pages || !where))
        rc = MB_ENOMEM;
    for (size_t p = first, len, end = first + n; rc == 0 && k < cap && p < end; p += len) {
        len = leaf_stretch(p, end);
        struct vs_node *l = leaf_of(v, p, false);
        if (!l)
            continue;   /* an absent leaf: nothing mapped there */
        uint32_t i0 = (uint32_t)(p & (FANOUT - 1)), lo = FANOUT, hi = 0;
        for (uint32_t i = i0; i < i0 + len && k < cap; i++) {
            if (l->e[i] == MB_VSPACE_INVALID)
                continue;
            pages[k] = l->e[i];
            where[k++] = p + (i - i0);
            l->e[i] = MB_VSPACE_INVALID;
            l->used--;
            lo = i < lo ? i : lo;
            hi = i + 1;
        }
        if (lo < hi)
            mark_dirty(v, l, lo, hi);
    }
    if (rc == 0 && k)
        rc = flush(v, stream);
    if (rc == 0 && k) {
        v->mapped -= k;
        pagepool_defer(v->pool, pages, k, stream);
    } else if (rc != 0) {
        /* The device still holds the old entries: so does the mirror. */
        for (size_t j = 0; j < k; j++) {
            struct vs_node *l = leaf_of(v, where[j], false);
            l->e[where[j] & (FANOUT - 1)] = pages[j];
            l->used++;
        }
    }
    VS_CHECK(v, vspace_is_valid);
    pthread_mutex_unlock(&v->lock);
    free(pages);
    free(where);
    return rc;
}

const struct mb_vspace_dev *mb_vspace_device(const mb_vspace *v) { return v ? &v->dev : NULL; }

size_t mb_vspace_mapped_pages(const mb_vspace *v) { return v ? v->mapped : 0; }

static void collect_pages(struct vs_node *n, uint64_t *out, size_t *k)
{
    for (size_t i = 0; i < FANOUT; i++) {
        if (n->e[i] == MB_VSPACE_INVALID)
            continue;
        if (n->level == 0)
            out[(*k)++] = n->e[i];
        else
            collect_pages(n->child[i], out, k);
    }
}

/* Every node's device address, the tree's and the spare ones. */
static void collect_nodes(const struct vs_node *n, uint64_t *out, size_t *k)
{
    out[(*k)++] = n->dev;
    if (n->child)
        for (size_t i = 0; i < FANOUT; i++)
            if (n->child[i])
                collect_nodes(n->child[i], out, k);
}

static size_t count_nodes(const struct vs_node *n)
{
    size_t k = 1;
    if (n->child)
        for (size_t i = 0; i < FANOUT; i++)
            if (n->child[i])
                k += count_nodes(n->child[i]);
    return k;
}

/* The old way, when memory for the hand-over is short: wait for each
 * stream's last work, then give the pages and nodes back at once. */
static void destroy_waiting(mb_vspace *v, uint64_t *pages, size_t np, uint64_t *nodes, size_t nn)
{
    mb_backend *be = v->c->be;
    for (size_t i = 0; i < v->n_streams; i++) {
        void *ev = v->streams[i].ev;
        int done;
        while ((done = lclock_fence_query(&v->c->lclk, be, ev)) == 0) {
            struct timespec ts = { 0, 20000 };
            nanosleep(&ts, NULL);
        }
        if (done < 0)
            mb_log(MB_LOG_ERR, "failed to wait for a vspace's work: %s", mb_strerror(done));
        lclock_fence_drop(be, ev);
    }
    if (v->pool)
        pagepool_give(v->pool, pages, np);
    vsnodes_put(v->nodes, nodes, nn);
}

void mb_vspace_destroy(mb_vspace *v)
{
    if (!v)
        return;
    pthread_mutex_lock(&v->lock);
    /* The table and its pages may be in use by work enqueued on our
     * streams: they go back once the event after each stream's last work
     * completed, without waiting here. */
    size_t nn = (v->root ? count_nodes(v->root) : 0) + v->n_spare, np = 0, k = 0;
    uint64_t *pages = malloc((v->mapped + 1) * sizeof(*pages));
    uint64_t *nodes = malloc((nn + 1) * sizeof(*nodes));
    void **evs = malloc((v->n_streams + 1) * sizeof(*evs));
    if (pages && nodes && evs) {
        if (v->root) {
            collect_pages(v->root, pages, &np);
            collect_nodes(v->root, nodes, &k);
        }
        for (size_t i = 0; i < v->n_spare; i++)
            nodes[k++] = v->spare[i];
        for (size_t i = 0; i < v->n_streams; i++)
            evs[i] = v->streams[i].ev;
        if (!v->pool || pagepool_retire(v->pool, pages, np, evs, v->n_streams, v->nodes, nodes,
                                        k) != 0)
            destroy_waiting(v, pages, np, nodes, k);
    } else {
        mb_log(MB_LOG_ERR, "failed to return the pages of a vspace: out of memory");
    }
    free(pages);
    free(nodes);
    free(evs);
    node_free(v->root);
    free(v->spare);
    free(v->runs);
    free(v->streams);
    pthread_mutex_unlock(&v->lock);
    pthread_mutex_destroy(&v->lock);
    free(v);
}

/* The table engine of c's backend for pages of page_bytes, its kernels
 * launched once; what (create, prepare) names the call in errors. */
static int engine_for(mb_client *c, size_t page_bytes, const char *what, const struct vs_engine **out)
{
    if (page_bytes < MB_VSPACE_MIN_PAGE || page_bytes > MB_VSPACE_MAX_PAGE || (page_bytes & (page_bytes - 1))) {
        mb_log(MB_LOG_ERR, "failed to %s vspaces of %zu-byte pages: invalid argument (pages are "
                           "a power of two from 64 KiB to 2 MiB)", what, page_bytes);
        return MB_EINVAL;
    }
    if (c->frame_bytes % page_bytes) {
        mb_log(MB_LOG_ERR, "failed to %s vspaces: %zu-byte pages do not divide %zu-byte frames",
               what, page_bytes, c->frame_bytes);
        return MB_EINVAL;
    }
    const struct vs_engine *eng = NULL;
    if (strcmp(c->be->name, "host") == 0)
        eng = &host_engine;
#ifdef MB_HAVE_KERNELS
    else if (strcmp(c->be->name, "cuda") == 0)
        eng = &cuda_engine;
#endif
    if (!eng) {
        mb_log(MB_LOG_ERR, "failed to %s vspaces: no page-table kernels for the '%s' backend in "
                           "this build", what, c->be->name);
        return MB_EBACKEND;
    }
    *out = eng;
    return eng->warm();
}

int mb_vspace_prepare(mb_client *c, size_t page_bytes, size_t npages)
{
    const struct vs_engine *eng = NULL;   /* set once the arguments are valid */
    if (!c)
        return MB_EINVAL;
    int rc = engine_for(c, page_bytes, "prepare", &eng);
    if (rc == 0 && npages > ((size_t)1 << 62) / page_bytes) {
        mb_log(MB_LOG_ERR, "failed to prepare %zu vspace pages: more than any vspace holds", npages);
        return MB_EINVAL;
    }
    struct refill *r = NULL;
    struct pagepool *p = NULL;
    if (rc == 0)
        rc = refill_get(c, &r);
    if (rc == 0)
        rc = vsnodes_prepare(r->nodes);
    if (rc == 0)
        rc = pagepool_get(c, page_bytes, &p);
    if (rc == 0)
        rc = pagepool_prepare(p, npages);
    if (rc && eng)
        mb_log(MB_LOG_ERR, "failed to prepare %zu vspace pages of %zu KiB: %s", npages,
               page_bytes >> 10, mb_strerror(rc));
    return rc;
}

int mb_vspace_create(mb_client *c, size_t max_bytes, size_t page_bytes, mb_vspace **out)
{
    if (!c || !out || max_bytes == 0 || max_bytes > ((size_t)1 << 62)) {
        mb_log(MB_LOG_ERR, "failed to create a vspace of %zu bytes: invalid argument", max_bytes);
        return MB_EINVAL;
    }
    const struct vs_engine *eng;
    int rc = engine_for(c, page_bytes, "create", &eng);
    if (rc)
        return rc;
    uint64_t t0 = mb_now_ns();
    mb_vspace *v = calloc(1, sizeof(*v));
    if (!v)
        return MB_ENOMEM;
    pthread_mutex_init(&v->lock, NULL);
    v->c = c;
    v->eng = eng;
    uint32_t shift = 0;
    while (((size_t)1 << shift) < page_bytes)
        shift++;
    v->npages = (max_bytes + page_bytes - 1) >> shift;
    uint32_t levels = 1;
    while (levels < MB_VSPACE_MAX_LEVELS &&
           ((uint64_t)1 << (MB_VSPACE_FANOUT_SHIFT * levels)) < v->npages)
        levels++;
    v->dev.max_bytes = (uint64_t)v->npages << shift;
    v->dev.page_shift = shift;
    v->dev.levels = levels;
    struct refill *r = NULL;
    rc = pagepool_get(c, page_bytes, &v->pool);
    if (rc == 0)
        rc = refill_get(c, &r);
    if (rc) {
        pthread_mutex_destroy(&v->lock);
        free(v);
        return rc;
    }
    v->nodes = r->nodes;
    /* The root is a clean node: its INVALID entries are on the device
     * already, so any stream may use the vspace at once, and nothing was
     * enqueued or waited for. */
    uint64_t root = 0, t1 = mb_now_ns();
    rc = vsnodes_take_clean(v->nodes, &root);
    uint64_t t2 = mb_now_ns();
    if (t2 - t0 >= (uint64_t)SLOW_MAP_MS * 1000000 && mb_log_level() >= MB_LOG_DEBUG)
        mb_log(MB_LOG_DEBUG, "a vspace's creation took %.2f ms: %.2f for its pool and the refill "
               "thread, %.2f for a clean root node", (t2 - t0) / 1e6, (t1 - t0) / 1e6, (t2 - t1) / 1e6);
    if (rc == 0 && !(v->root = node_new(v, levels - 1, root))) {
        vsnodes_put(v->nodes, &root, 1);
        rc = MB_ENOMEM;
    }
    if (vsnodes_busy(v->nodes))
        refill_kick(r);
    if (rc) {
        mb_log(MB_LOG_ERR, "failed to create a vspace: %s", mb_strerror(rc));
        mb_vspace_destroy(v);
        return rc;
    }
    v->dev.root = v->root->dev;
    VS_CHECK(v, vspace_is_valid);
    *out = v;
    return 0;
}

/* Walk the device's copy of the table, reading each node once. */
int mb_vspace_read_entries(mb_vspace *v, size_t first, size_t n, void *stream, uint64_t *out)
{
    int rc = check_range(v, first, n, "read");
    if (rc || !out)
        return rc ? rc : MB_EINVAL;
    struct seen {
        uint64_t dev;
        uint64_t e[FANOUT];
    } *cache = NULL;
    size_t n_cache = 0, cap = 0;
    pthread_mutex_lock(&v->lock);
    for (size_t p = first; rc == 0 && p < first + n; p++) {
        uint64_t e = v->dev.root;
        for (int l = (int)v->dev.levels - 1; l >= 0 && e != MB_VSPACE_INVALID; l--) {
            struct seen *s = NULL;
            for (size_t i = n_cache; i-- > 0 && !s;)
                if (cache[i].dev == e)
                    s = &cache[i];
            if (!s) {
                if (n_cache == cap) {
                    cap = cap ? 2 * cap : 8;
                    struct seen *nc = realloc(cache, cap * sizeof(*nc));
                    if (!nc) {
                        rc = MB_ENOMEM;
                        break;
                    }
                    cache = nc;
                }
                s = &cache[n_cache];
                s->dev = e;
                if ((rc = v->eng->read(s->e, e, NODE_BYTES, stream)) != 0)
                    break;
                n_cache++;
            }
            e = s->e[(p >> (MB_VSPACE_FANOUT_SHIFT * l)) & (FANOUT - 1)];
        }
        out[p - first] = e;
    }
    pthread_mutex_unlock(&v->lock);
    free(cache);
    return rc;
}
