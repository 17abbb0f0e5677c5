/* vsnodes.c: device memory for vspace table nodes (vsnodes.h): chunks from
 * the public allocator (c->node_alloc, set by mb_open) carved into 4 KiB
 * nodes, a stack of clean nodes (roots) kept above a watermark by the
 * background thread, and a stack of raw ones.
 *
 * Invariants (vsnodes_is_valid, debug builds): every node on either stack
 * lies in a chunk at a multiple of VSN_NODE_BYTES; n_clean <= cap_clean,
 * n_raw <= cap_raw. A clean node's zeroes were written and waited for
 * before it joined the stack. */
#include "vsnodes.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>

#include "log.h"
#include "wire.h"

#define VSN_CHUNK_NODES 64       /* nodes per chunk (256 KiB) */
#define VSN_LOW 32               /* clean nodes kept free */

struct vsnodes {
    mb_client *c;
    pthread_mutex_t lock;
    uint64_t *clean, *raw;
    size_t n_clean, cap_clean, n_raw, cap_raw;
    void **chunks;
    size_t n_chunks, cap_chunks;
    uint64_t waits;
    int64_t last_root_ms;        /* when a vspace last took a root */
};

static bool in_chunk(const struct vsnodes *n, uint64_t a)
{
    for (size_t i = 0; i < n->n_chunks; i++) {
        uint64_t base = (uint64_t)(uintptr_t)n->chunks[i];
        if (a >= base && a < base + VSN_CHUNK_NODES * VSN_NODE_BYTES)
            return (a - base) % VSN_NODE_BYTES == 0;
    }
    return false;
}

static bool vsnodes_is_valid(const struct vsnodes *n)
{
    if (n->n_clean > n->cap_clean || n->n_raw > n->cap_raw)
        return false;
    for (size_t i = 0; i < n->n_clean; i++)
        if (!in_chunk(n, n->clean[i]))
            return false;
    for (size_t i = 0; i < n->n_raw; i++)
        if (!in_chunk(n, n->raw[i]))
            return false;
    return true;
}

#ifdef MB_DEBUG
#define VSN_CHECK(n) assert(vsnodes_is_valid(n))
#else
#define VSN_CHECK(n) ((void)(0 && vsnodes_is_valid(n)))
#endif

struct vsnodes *vsnodes_new(mb_client *c)
{
    struct vsnodes *n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    n->c = c;
    pthread_mutex_init(&n->lock, NULL);
    return n;
}

/* Room for `more` entries on a stack (lock held). */
static int stack_room(uint64_t **v, size_t *cap, size_t len, size_t more)
{
    if (len + more <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < len + more)
        nc *= 2;
    uint64_t *nv = realloc(*v, nc * sizeof(*nv));
    if (!nv)
        return MB_ENOMEM;
    *v = nv;
    *cap = nc;
    return 0;
}

/* Zero nodes on the legacy stream and wait for it (the background step,
 * or a root nobody cleared in time). Adjacent nodes go in one call. */
static int clear_nodes(struct vsnodes *n, uint64_t *nodes, size_t count)
{
    mb_backend *be = n->c->be;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < count;) {
        size_t j = i + 1;
        while (j < count && nodes[j] == nodes[j - 1] + VSN_NODE_BYTES)
            j++;
        rc = be->ops->memset(be, (void *)(uintptr_t)nodes[i], 0, (j - i) * VSN_NODE_BYTES, NULL);
        i = j;
    }
    if (rc == 0)
        rc = be->ops->stream_sync(be, NULL);
    if (rc)
        mb_log(MB_LOG_ERR, "failed to clear %zu page-table nodes: %s", count, mb_strerror(rc));
    return rc;
}

/* A new chunk's nodes into out[0..VSN_CHUNK_NODES), cleared when clear. */
static int new_chunk(struct vsnodes *n, bool clear, uint64_t *out)
{
    void *mem;
    int rc = n->c->node_alloc(n->c, VSN_CHUNK_NODES * VSN_NODE_BYTES, &mem);
    if (rc) {
        mb_log(MB_LOG_ERR, "failed to allocate %d page-table nodes: %s", VSN_CHUNK_NODES,
               mb_strerror(rc));
        return rc;
    }
    for (size_t i = 0; i < VSN_CHUNK_NODES; i++)
        out[i] = (uint64_t)(uintptr_t)mem + i * VSN_NODE_BYTES;
    if (clear && (rc = clear_nodes(n, out, VSN_CHUNK_NODES)) != 0) {
        n->c->node_free(n->c, mem);
        return rc;
    }
    pthread_mutex_lock(&n->lock);
    if (n->n_chunks == n->cap_chunks) {
        size_t nc = n->cap_chunks ? 2 * n->cap_chunks : 16;
        void **nv = realloc(n->chunks, nc * sizeof(*nv));
        if (!nv) {
            pthread_mutex_unlock(&n->lock);
            n->c->node_free(n->c, mem);
            return MB_ENOMEM;
        }
        n->chunks = nv;
        n->cap_chunks = nc;
    }
    n->chunks[n->n_chunks++] = mem;
    pthread_mutex_unlock(&n->lock);
    return 0;
}

/* Push nodes on a stack; a node that finds no room is dropped (it stays
 * in its chunk, unused, until mb_close). */
static void push(struct vsnodes *n, bool clean, const uint64_t *nodes, size_t count)
{
    pthread_mutex_lock(&n->lock);
    uint64_t **v = clean ? &n->clean : &n->raw;
    size_t *len = clean ? &n->n_clean : &n->n_raw, *cap = clean ? &n->cap_clean : &n->cap_raw;
    if (stack_room(v, cap, *len, count) == 0) {
        for (size_t i = 0; i < count; i++)
            (*v)[(*len)++] = nodes[i];
    } else {
        mb_log(MB_LOG_WARN, "out of memory: %zu page-table nodes left unused", count);
    }
    VSN_CHECK(n);
    pthread_mutex_unlock(&n->lock);
}

int vsnodes_take_clean(struct vsnodes *n, uint64_t *out)
{
    pthread_mutex_lock(&n->lock);
    n->last_root_ms = mb_now_ms();
    if (n->n_clean) {
        *out = n->clean[--n->n_clean];
        pthread_mutex_unlock(&n->lock);
        return 0;
    }
    n->waits++;
    pthread_mutex_unlock(&n->lock);
    uint64_t fresh[VSN_CHUNK_NODES];
    int rc = new_chunk(n, true, fresh);
    if (rc)
        return rc;
    *out = fresh[0];
    push(n, true, fresh + 1, VSN_CHUNK_NODES - 1);
    return 0;
}

int vsnodes_prepare(struct vsnodes *n)
{
    pthread_mutex_lock(&n->lock);
    bool enough = n->n_clean >= VSN_LOW;
    pthread_mutex_unlock(&n->lock);
    if (enough)
        return 0;
    uint64_t fresh[VSN_CHUNK_NODES];
    int rc = new_chunk(n, true, fresh);
    if (rc == 0)
        push(n, true, fresh, VSN_CHUNK_NODES);
    return rc;
}

int vsnodes_take(struct vsnodes *n, size_t count, uint64_t *out)
{
    size_t k = 0;
    pthread_mutex_lock(&n->lock);
    while (k < count && n->n_raw)
        out[k++] = n->raw[--n->n_raw];
    while (k < count && n->n_clean > VSN_LOW / 2)
        out[k++] = n->clean[--n->n_clean];
    pthread_mutex_unlock(&n->lock);
    while (k < count) {
        uint64_t fresh[VSN_CHUNK_NODES];
        int rc = new_chunk(n, false, fresh);
        if (rc) {
            push(n, false, out, k);   /* nothing taken */
            return rc;
        }
        size_t use = count - k < VSN_CHUNK_NODES ? count - k : VSN_CHUNK_NODES;
        for (size_t i = 0; i < use; i++)
            out[k++] = fresh[i];
        if (use < VSN_CHUNK_NODES)
            push(n, false, fresh + use, VSN_CHUNK_NODES - use);
    }
    return 0;
}

void vsnodes_put(struct vsnodes *n, const uint64_t *nodes, size_t count)
{
    if (count)
        push(n, false, nodes, count);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void vsnodes_work(struct vsnodes *n)
{
    pthread_mutex_lock(&n->lock);
    size_t count = n->n_raw;
    uint64_t *mine = count ? malloc(count * sizeof(*mine)) : NULL;
    if (mine) {
        for (size_t i = 0; i < count; i++)
            mine[i] = n->raw[i];
        n->n_raw = 0;
    }
    /* Top up only while vspaces are being created (the last second). */
    bool low = n->n_clean < VSN_LOW && mb_now_ms() - n->last_root_ms < 1000;
    pthread_mutex_unlock(&n->lock);
    if (mine) {
        qsort(mine, count, sizeof(*mine), cmp_u64);
        push(n, clear_nodes(n, mine, count) == 0, mine, count);
        free(mine);
    } else if (low) {
        uint64_t fresh[VSN_CHUNK_NODES];
        if (new_chunk(n, true, fresh) == 0)
            push(n, true, fresh, VSN_CHUNK_NODES);
    }
}

bool vsnodes_busy(struct vsnodes *n)
{
    pthread_mutex_lock(&n->lock);
    bool busy = n->n_clean < VSN_LOW / 2 || (n->n_raw > 0 && n->n_clean < VSN_LOW);
    pthread_mutex_unlock(&n->lock);
    return busy;
}

void vsnodes_free(struct vsnodes *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n_chunks; i++)
        n->c->node_free(n->c, n->chunks[i]);
    free(n->chunks);
    free(n->clean);
    free(n->raw);
    pthread_mutex_destroy(&n->lock);
    free(n);
}

uint64_t vsnodes_waits(struct vsnodes *n)
{
    pthread_mutex_lock(&n->lock);
    uint64_t w = n->waits;
    pthread_mutex_unlock(&n->lock);
    return w;
}
