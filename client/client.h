/* client.h: libmbclient's internal types, declared once for its files.
 *
 * Glossary
 *   cframe    a frame this process imported from the daemon: granted to the
 *             session, its handle held here; either in use (mapped into a
 *             stitched range) or cached (unmapped, ready to be reused).
 *   stitched  one virtual range with frames mapped side by side; the slow
 *             tier, and the backing of the slab's chunks and the pool's
 *             arenas.
 * One mutex guards the whole client. */
#ifndef MB_CLIENT_INTERNAL_H
#define MB_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <moonbright/mbclient.h>

#include "backend.h"
#include "fdpass.h"
#include "moonbright.pb-c.h"
#include "pool.h"
#include "slab.h"

struct cframe {
    uint32_t id;                 /* the daemon's frame id */
    struct mb_mem mem;           /* imported handle; mem.bytes = frame_bytes << order */
    bool in_use;                 /* mapped into a stitched range */
    bool exported;               /* shared with another process: never reused here */
    bool imported;               /* another process's frame, held through an import */
    struct cframe *next_cached;  /* cache link while !in_use */
};

/* Frames this process holds. Invariants (fcache_is_valid):
 *   n_cached + n_in_use == n_held
 *   the two cached lists hold exactly the held frames with !in_use:
 *   `cached` the order-0 frames, `cached_large` the larger ones
 *   bytes_cached and bytes_held are the bytes of those frames */
struct frame_cache {
    struct cframe **by_id;       /* indexed by frame id; NULL when not held */
    uint32_t cap;
    uint32_t n_held, n_cached, n_in_use;
    size_t bytes_held, bytes_cached;
    struct cframe *cached;       /* order 0, LIFO: the most recently used first */
    struct cframe *cached_large; /* larger orders (frame_plan.c), LIFO */
    size_t keep_bytes;           /* cached bytes kept when frames are freed */
};

/* Invariants: bytes == the sum of frames[0..n)'s bytes <= reserved; frames
 * are in non-increasing size, so each lies at a multiple of its own size;
 * a range with room to grow (cap > n) holds order-0 frames only and
 * reserved == cap * frame_bytes. */
struct stitched {
    void *va;
    size_t bytes;                /* mapped from va */
    size_t reserved;             /* address space held from va (grow room) */
    size_t n, cap;               /* frames mapped; room in frames[] */
    bool imported;               /* frames another process shared: never cached here */
    struct cframe *frames[];     /* frames[i] mapped right after frames[i-1] */
};

/* A slab object freed on a stream, kept until that stream's work is done. */
struct deferred_free {
    void *ptr;
    void *event;
    struct deferred_free *next;
};

/* ptr -> stitched, open addressing with linear probing. */
struct ptrmap {
    struct ptrmap_slot { uintptr_t key; void *val; } *slots;
    size_t cap, n, tombs;
};

struct mb_client {
    pthread_mutex_t lock;
    mb_backend *be;
    int device;
    size_t frame_bytes;
    char backend_name[16];
    /* control plane */
    void *zctx, *dealer;
    int chan;
    uint64_t session_id;
    uint64_t next_id;
    int timeout_ms;
    bool broken;                 /* the daemon went away; calls that need it fail */
    bool draining;               /* the daemon said it is draining */
    bool lost;                   /* the daemon went away (its channel closed) */
    bool large_frames;           /* plain allocations ask for large frames
                                  * (MOONBRIGHT_LARGE_FRAMES=0 turns it off) */
    int64_t next_reconnect_ms;   /* back-off: earliest next attempt */
    int reconnect_wait_ms;       /* current back-off step */
    char tenant[64];
    bool reclaim_due;            /* a RECLAIM notice waits to be answered */
    uint64_t reclaim_bytes;      /* ... for this many bytes (0: all cached) */
    bool in_reclaim;             /* answering one now (no recursion) */
    uint64_t cache_reported;     /* bytes of the last Cache report */
    pthread_t notice_thread;     /* answers notices while the caller is idle */
    bool notice_thread_on, stopping;
    /* memory: three tiers over the frame cache. Small objects (<= slab_max)
     * come from the slab, medium ones (<= pool_max) from the pool, larger
     * ones are stitched ranges of their own. */
    struct frame_cache fc;
    struct mb_slab *slab;        /* NULL when frames are not a power of two */
    struct mb_pool *pool;
    size_t slab_max, pool_max;
    struct ptrmap live;          /* stitched allocations handed to the caller */
    struct ptrmap backing;       /* slab chunks and pool arenas: base -> stitched */
    struct deferred_free *deferred;   /* slab frees waiting for their stream */
    size_t n_deferred;
    int sticky;                  /* first error of work that failed after its call returned */
    struct amap *amap;           /* stream-ordered mapper (async_map.c), once started */
    struct refill *refill;       /* vspace page pools, growable ranges and their
                                  * background thread (refill.h), once used */
    mb_client_stats st;
};

/* rpc.c */
int rpc_connect(mb_client *c, const char *tenant);
void rpc_disconnect(mb_client *c);
/* Send req (its id is set here) and wait for the reply. Non-zero reply
 * codes come back as the return value, with the text logged. */
int rpc_call(mb_client *c, Mb__Request *req, Mb__Reply **rep);
/* Send without waiting for the reply (it is dropped when it comes). */
int rpc_post(mb_client *c, Mb__Request *req);
/* Handle notices that arrived (lock held); answers a due RECLAIM. */
void rpc_poll_notices(mb_client *c);
/* Lock held: when the daemon is lost, reconnect if the back-off allows and
 * report the frames this process still maps (Reattach). 0 once connected. */
int rpc_ensure_connected(mb_client *c);
int rpc_start_notice_thread(mb_client *c);
void rpc_stop_notice_thread(mb_client *c);

/* frames.c */
/* n order-0 frames: cached ones first, then granted. */
int fcache_take(mb_client *c, size_t n, struct cframe **out);
/* The frames of the frame plan for `bytes`, largest first: cached ones of
 * the planned orders, the rest granted as large frames (falling back to
 * order-0 frames when that fails for memory or quota). *out is malloc'd. */
int fcache_take_plan(mb_client *c, size_t bytes, struct cframe ***out, size_t *n);
void fcache_put(mb_client *c, struct cframe *f);
int fcache_trim(mb_client *c, size_t keep_bytes);
void fcache_release_all(mb_client *c);
/* Redeem a share token: the frames arrive imported and in use. */
int fcache_import(mb_client *c, const uint8_t *token, size_t len, struct cframe ***out, size_t *n);
/* Drop a frame this process holds without caching it (unmapped first). */
void fcache_forget(mb_client *c, struct cframe *f);
int fcache_return_ids(mb_client *c, uint32_t *ids, size_t n);
/* Tell the daemon how much this process caches, when it changed. */
void fcache_report(mb_client *c);
bool fcache_is_valid(const struct frame_cache *fc);

/* stitch.c */
/* Map bytes now inside a range of reserve_bytes (>= bytes). */
int stitch_alloc(mb_client *c, size_t bytes, size_t reserve_bytes, struct stitched **out);
/* Map bytes now in few large frames (the frame plan); no room to grow. */
int stitch_alloc_large(mb_client *c, size_t bytes, struct stitched **out);
/* Map frames[from..to) of s side by side, the first at offset `off` (each
 * right after the one before), and give access to them; on failure none of
 * them stays mapped. Touches no client state (the mapper thread calls it). */
int stitch_map(mb_backend *be, struct stitched *s, size_t from, size_t to, size_t off);
/* Take the frame plan's frames for bytes (largest first) into a new range
 * that is neither reserved nor mapped yet (va NULL). */
int stitch_take_large(mb_client *c, size_t bytes, struct stitched **out);
/* Map more frames at the end of s, up to its reservation; *s may move. */
int stitch_grow(mb_client *c, struct stitched **s, size_t new_bytes);
int stitch_free(mb_client *c, struct stitched *s, void *stream);
bool stitch_is_valid(const mb_client *c, const struct stitched *s);
/* Map frames this process already holds (an import) into a new range. */
int stitch_adopt(mb_client *c, struct cframe **frames, size_t n, struct stitched **out);

/* share.c: freeing a range imported from another process. */
int share_free_imported(mb_client *c, struct stitched *s, void *stream);

/* tiers.c: the slab and pool over stitched backing, and their frees. */
int tiers_init(mb_client *c);
void tiers_destroy(mb_client *c);
/* 0 and *ptr set, or MB_ENOENT when size is not a tier's, or an error. */
int tiers_alloc(mb_client *c, size_t size, void *stream, void **ptr);
/* 0, or MB_ENOENT when ptr is not a live tier object. */
int tiers_free(mb_client *c, void *ptr, void *stream);
size_t tiers_usable_size(mb_client *c, const void *ptr);
void tiers_trim(mb_client *c);
void tiers_stats(mb_client *c, mb_client_stats *st);

/* ptrmap.c */
int ptrmap_put(struct ptrmap *m, const void *key, void *val);
void *ptrmap_get(const struct ptrmap *m, const void *key);
void *ptrmap_del(struct ptrmap *m, const void *key);
void ptrmap_destroy(struct ptrmap *m);

#endif
