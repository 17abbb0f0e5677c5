/* client.h: libmbclient's internal types, declared once for its files.
 *
 * Glossary
 *   cframe    a frame this process imported from the daemon: granted to the
 *             session, its handle held here; either in use (mapped into a
 *             stitched range) or cached (unmapped, ready to be reused).
 *   stitched  one virtual range with frames mapped side by side; the slow
 *             tier, and the backing of the slab's chunks and the pool's
 *             arenas.
 * Locks and layers: see struct mb_client. */
#ifndef MB_CLIENT_INTERNAL_H
#define MB_CLIENT_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <moonbright/mbclient.h>

#include "backend.h"
#include "fdpass.h"
#include "moonbright.pb-c.h"
#include "pool.h"
#include "protocol.h"
#include "slab.h"

struct cframe {
    uint32_t id;                 /* the daemon's frame id */
    struct mb_mem mem;           /* imported handle; mem.bytes = frame_bytes << order */
    bool in_use;                 /* mapped into a stitched range */
    bool exported;               /* shared with another process: never reused here */
    bool imported;               /* another process's frame, held through an import */
    bool hole;                   /* a placeholder for a frame punched out of a
                                  * range (stitch_punch): its size, nothing mapped */
    struct cframe *next_cached;  /* cache link while !in_use */
    int64_t cached_ms;           /* when it last entered the cache */
};

/* Frames this process holds. Invariants (fcache_is_valid):
 *   n_cached + n_in_use == n_held <= cap / 2; by_id holds each held frame
 *   once, found by its id
 *   the two cached lists hold exactly the held frames with !in_use:
 *   `cached` the order-0 frames, `cached_large` the larger ones
 *   bytes_cached and bytes_held are the bytes of those frames
 *   near == (near_pct && ceiling && bytes_held > ceiling / (1 + near_pct / 100)) */
struct frame_cache {
    struct cframe **by_id;       /* the held frames, open addressing by id (frames.c) */
    uint32_t cap;                /* entries of by_id: 0 or a power of two */
    uint32_t n_held, n_cached, n_in_use;
    size_t bytes_held, bytes_cached;
    struct cframe *cached;       /* order 0, LIFO: the most recently used first */
    struct cframe *cached_large; /* larger orders (frame_plan.c), LIFO */
    size_t keep_bytes;           /* cached bytes kept when frames are freed */
    int64_t last_use_ms;         /* when a frame last entered or left the cache */
    /* Near the budget: the most this process could hold without a
     * reclaim, as of its last grant (held + GrantReply.room; held after a
     * refusal; 0 before any grant), and whether what it holds comes within
     * near_pct percent of that (`near`, atomic: read without the frame
     * lock by fcache_near). */
    size_t ceiling;
    unsigned near_pct;
    bool near;
};

/* Invariants: bytes == the sum of frames[0..n)'s bytes <= reserved; each
 * frame lies right after the one before, at a multiple of the unit (a
 * range the frame plan made has them in non-increasing size, so each lies
 * at a multiple of its own size; a growable range maps frames of any size
 * in the order it takes them, grow.c); a range with room to grow (cap > n)
 * has reserved == cap * frame_bytes; holes == the bytes of the hole
 * placeholders among frames[] (a heap arena's punched frames). */
struct stitched {
    void *va;
    size_t bytes;                /* laid out from va (mapped but for holes) */
    size_t holes;                /* of them, unmapped: frames punched out */
    size_t reserved;             /* address space held from va (grow room) */
    size_t n, cap;               /* frames mapped; room in frames[] */
    bool imported;               /* frames another process shared: never cached here */
    bool mapped_async;           /* mapped by async_map.c behind a stream gate */
    struct cframe *frames[];     /* frames[i] mapped right after frames[i-1] */
};

/* Slab objects a thread cache gave back while their stream's work may
 * still run, reusable together once the fence completes: an event recorded
 * on the stream, or (ev NULL) a device-sync ticket. */
struct sdefer {
    void *ev;
    uint64_t ticket;             /* ev == NULL: done once c->synced >= ticket */
    size_t bytes;                /* the objects' class sizes */
    uint32_t n;
    struct sdefer *next;
    void *ptrs[];
};

/* A backing range a tier gave back: still mapped, reused by the next
 * request of its size, unmapped by tiers_take_idle's caller. */
struct idle_range {
    struct stitched *s;
    int64_t since_ms;
    struct idle_range *next;
};

/* A range of its own whose frees wait for the stream's work before it is
 * unmapped (maint.c): imported, exported, or a failed stream-ordered map. */
struct retiring {
    struct stitched *s;
    void *ev;                    /* recorded on the freeing stream; NULL: ticket */
    uint64_t ticket;
    bool unmapped;               /* nothing mapped: free the address range only */
    struct retiring *next;
};

/* The legacy clock (lclock.c): epochs of frees on the legacy stream. */
struct lclock {
    char pad0[64];               /* alone on its cache lines: every mb_free reads
                                  * open and mb_malloc done, from every thread; */
    uint64_t open;               /* frees now are tagged with it (atomic) */
    char pad_open[64 - sizeof(uint64_t)];   /* ... each on a line of its own, */
    uint64_t done;               /* tags <= done are complete (atomic) */
    char pad_done[64 - sizeof(uint64_t)];   /* ... apart from the advancing thread's */
    int busy;                    /* 1 while a thread advances (atomic; others spin on it) */
    void *ev;                    /* recorded on the legacy stream ... */
    uint64_t ev_gen;             /* ... after closing this epoch */
    bool ev_pending;
    char pad1[64];
};

/* ptr -> stitched, open addressing with linear probing. */
struct ptrmap {
    struct ptrmap_slot { uintptr_t key; void *val; } *slots;
    size_t cap, n, tombs;
};

/* Layers, top to bottom; a layer calls only the ones below it:
 *   client.c, torch.c            public API (a refused grant: maint_release,
 *     (torch_graph.c,            then once more); torch*.c: the framework
 *     torch_streams.c)           hook (a client per device, CUDA graphs,
 *                                record_stream)
 *   maint.c                      the background thread: notices, idle
 *                                policy, device-sync fences, retiring
 *                                ranges; the figures of mb_stats
 *   vspace.c                     vspaces: page tables over page pools
 *   share.c                      ranges shared between processes
 *   tcache.c                     per-thread caches of slab objects
 *   tiers.c (slab.c, pool.c,     allocator tiers over mapped ranges
 *     chunkreg.c)
 *   refill.c (pagepool.c,        the memory helper thread: vspace page
 *     vsnodes.c, grow.c)         pools, table nodes, growable ranges
 *   lclock.c                     which legacy-stream frees are complete
 *   async_map.c, stitch.c        mapping: address ranges, map/unmap
 *   frames.c                     the frames this process holds
 *   rpc.c                        the daemon's control plane
 * Nothing below calls a layer above it by name. Two hand-overs go up
 * through callbacks that mb_open sets (struct mb_client): grow.c gives a
 * freed range it cannot keep to the background thread's retiring queue
 * (c->retire), and vsnodes.c takes its chunks of table nodes from the
 * public allocator (c->node_alloc, c->node_free).
 *
 * Locks: c->lock guards the tiers (slab, heap, live and backing maps, idle
 * ranges, deferred frees, stats); c->flock guards the frame layer and the
 * control plane (frame cache, sockets, session state). A thread never takes
 * c->flock while holding c->lock: the tiers drop c->lock around frame-layer
 * work (tiers.c backing_get), so no thread waits for the daemon or the
 * driver behind c->lock. c->release_lock, taken before either, lets one
 * give-back (maint_release: trim, reclaim, the idle policy) run at a time.
 * c->rpclock (recursive) guards the daemon's line: both sockets, request
 * ids, the session state that calls change (lost, broken, the notices'
 * flags, the last refusal) and the wait counters; taken after c->flock or
 * alone, and a grant may let go of c->flock while it holds c->rpclock
 * (fcache_grant_unlocks), so that threads served from the frame cache do
 * not wait for another thread's round trip. */
struct mb_client {
    pthread_mutex_t lock;
    pthread_mutex_t flock;
    unsigned fl_callers;         /* threads on a request's path waiting for flock (atomic) */
    unsigned rpc_callers;        /* ... and for rpclock in a grant (atomic) */
    pthread_mutex_t release_lock;
    pthread_mutex_t rpclock;     /* the daemon's line (above); recursive */
    /* Hand-overs up, set by mb_open (client.c): the layers below call these
     * rather than name a function of a layer above them. */
    int (*node_alloc)(mb_client *c, size_t bytes, void **out);   /* vsnodes.c: chunks of table nodes */
    int (*node_free)(mb_client *c, void *p);
    int (*retire)(mb_client *c, struct stitched *s, void *stream);   /* grow.c: a freed range it
                                                                        * cannot keep (c->lock held) */
    mb_backend *be;
    int device;                  /* the daemon's device index (its sockets' name) */
    int local_device;            /* this process's ordinal of that device (device_uuid) */
    unsigned captures;           /* pools the framework hook has open on it (CUDA graph
                                  * captures among them; atomic): no device sync meanwhile */
    uint8_t device_uuid[MB_UUID_BYTES];   /* the daemon's device, from its hello */
    size_t frame_bytes;
    char backend_name[16];
    /* control plane (rpclock; chan, dealer and the flags are set under flock too) */
    void *zctx, *dealer;
    int chan;
    uint64_t session_id;
    uint64_t next_id;
    int timeout_ms;
    bool broken;                 /* the daemon went away; calls that need it fail */
    bool draining;               /* the daemon said it is draining */
    bool lost;                   /* the daemon went away (its channel closed) */
    unsigned grants_in_flight;   /* grants without c->flock whose frames are not yet in
                                  * the frame cache's books: no reconnect meanwhile */
    bool grow_spares;            /* growable ranges get spare ranges (grow.c) */
    size_t grow_lag;             /* stream-ordered growth waits while the mapper has more
                                  * jobs queued than this (grow.c, $MOONBRIGHT_GROW_LAG) */
    bool exact_allowed;          /* $MOONBRIGHT_EXACT_PLANS (default 1) */
    bool exact_plans;            /* ... and the daemon plans Grant.exact (its hello said so) */
    bool large_frames;           /* plain allocations ask for large frames
                                  * (MOONBRIGHT_LARGE_FRAMES=0 turns it off) */
    unsigned warm_per_frame;     /* $MOONBRIGHT_WARM_GRANTS (default 2, 0: off): a large
                                  * grant takes up to this many of the daemon's free
                                  * frames of other orders per planned frame rather
                                  * than wait for new ones to be made */
    bool async_map;              /* $MOONBRIGHT_ASYNC_MAP: heap misses on a stream map behind a gate */
    bool repair;                 /* $MOONBRIGHT_HEAP_REPAIR (default on): a large heap miss
                                  * stitches whole free arenas' frames before growing */
    bool punch;                  /* $MOONBRIGHT_HEAP_PUNCH (default off): heap arenas of
                                  * 32 MiB frames, and a repair also unmaps the whole
                                  * frames under old free heap blocks */
    bool extend;                 /* $MOONBRIGHT_HEAP_EXTEND (default on): a heap miss
                                  * extends an arena of its class at its end (tiers.c) */
    bool fill;                   /* $MOONBRIGHT_HEAP_FILL (default on): a heap miss maps
                                  * frames again into holes a trim left (tiers.c) */
    bool classes;                /* $MOONBRIGHT_HEAP_CLASSES (default on): blocks above 8 MiB
                                  * and smaller ones use separate arenas (tiers.c) */
    bool close_fit;              /* $MOONBRIGHT_HEAP_CLOSE_FIT: large requests never split a much
                                  * larger free block (less memory, more misses) */
    bool heap_near;              /* the heap fits closely for now: near the budget (tiers.c) */
    int64_t next_reconnect_ms;   /* back-off: earliest next attempt */
    int reconnect_wait_ms;       /* current back-off step */
    char tenant[64];
    char refusal[256];           /* the daemon's words for the latest request refused for
                                  * budget or quota (rpclock): logged if the call fails */
    bool reclaim_due;            /* a RECLAIM notice waits to be answered */
    uint64_t reclaim_bytes;      /* ... for this many bytes (0: all cached) */
    uint64_t cache_reported;     /* bytes of the last Cache report */
    uint64_t counters_reported[MB_CLIENT_COUNTERS];   /* ... and its counters (Mb__ClientCounters order) */
    uint64_t tier_idle;          /* bytes a trim would give back above the frame layer
                                  * (tiers, page pools, growable tails), as maint.c
                                  * last saw them */
    pthread_t maint_thread;      /* notices, idle policy, settling (maint.c) */
    bool maint_on, stopping;
    pthread_cond_t maint_wake;
    int64_t idle_ms;             /* $MOONBRIGHT_IDLE_MS */
    struct frame_cache fc;
    /* memory (lock): small objects (<= slab_max) come from the slab, all
     * larger ones from the heap (the pool); ranges of their own (imports,
     * exports, growable) are in live. */
    struct mb_slab *slab;        /* NULL when frames are not a power of two */
    struct mb_pool *pool;
    size_t slab_max;
    struct ptrmap live;          /* ranges of their own handed to the caller */
    struct ptrmap backing;       /* slab chunks and heap arenas: base -> stitched */
    struct idle_range *idle;     /* backing ranges given back, still mapped */
    size_t idle_bytes;
    uint64_t heap_allocs_seen;   /* the heap's allocations at the last release pass */
    int64_t heap_quiet_since_ms; /* ... and since when that count has not moved */
    struct sdefer *sd_fenced, **sd_fenced_tail;   /* FIFO */
    size_t n_deferred;           /* objects in sd_fenced */
    size_t deferred_bytes;       /* their class sizes */
    uint64_t sync_ticket, synced;/* device-sync fences: issued, completed */
    bool want_sync;              /* an allocation missed while frees were unsettled */
    struct retiring *retiring;   /* ranges of their own waiting for their stream */
    /* per-thread caches of slab objects (tcache.c) */
    uint64_t cid;                /* unique per client, never reused */
    struct chunkreg *chunks;     /* the slab's chunk registry (NULL without a slab: no thread caches) */
    struct tcache *tcaches;      /* every thread's cache for this client */
    struct lclock lclk;          /* frees on the legacy stream (lclock.c) */
    int slab_err;                /* why the last refill got nothing */
    int sticky;                  /* first error of work that failed after its call returned
                                  * (atomic: set with no c->lock by amap_take_error) */
    struct amap *amap;           /* stream-ordered mapper (async_map.c), once started
                                  * (by one thread: async_map.c's start lock) */
    mb_client_stats st;          /* the tiers' counters (lock) */
    struct {                     /* the frame layer's counters (flock) */
        size_t bytes_mapped;
        uint64_t daemon_requests, frames_imported, unmaps;
        uint64_t daemon_ns, import_ns;   /* waiting for replies; importing handles
                                          * (daemon_*: atomic, rpc.c) */
    } fst;
    struct refill *refill;       /* vspace page pools, growable ranges and their
                                  * background thread (refill.h), once used */
};

/* b rounded up to a multiple of unit (a frame unit, a page). */
static inline size_t round_unit(size_t b, size_t unit) { return (b + unit - 1) / unit * unit; }

/* The frame layer's lock (c->flock), taken around every call pagepool.c,
 * grow.c and refill.c make into the frame and mapping layer (frames.c,
 * stitch.c) and around the client fields they touch (c->refill, c->st);
 * held by callers of the _held functions. */
static inline void fl_lock(mb_client *c) { pthread_mutex_lock(&c->flock); }
static inline void fl_unlock(mb_client *c) { pthread_mutex_unlock(&c->flock); }

/* Requests first at the frame lock (c->flock). A thread on a request's
 * path that must map takes it with fl_lock_caller, which counts it while
 * it waits; the background thread takes it with fl_lock_bg (refill.c),
 * which lets waiting callers in first, and in a long pass calls fl_yield
 * between units of work (flock held, no other lock held), which hands the
 * lock to them and takes it back. Each wait for callers is bounded
 * (FL_YIELD_SPINS yields), so a stream of requests cannot stop the
 * background thread. */
#define FL_YIELD_SPINS 2000
/* The background thread lets request threads in first: until the count
 * they keep of themselves at a lock (c->fl_callers, c->rpc_callers) is 0,
 * or FL_YIELD_SPINS yields. */
void waiters_first(const unsigned *waiting);
void fl_lock_bg(mb_client *c);
void fl_yield(mb_client *c);

static inline void fl_lock_caller(mb_client *c)
{
    __atomic_add_fetch(&c->fl_callers, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&c->flock);
    __atomic_sub_fetch(&c->fl_callers, 1, __ATOMIC_RELAXED);
}

/* rpc.c: each takes c->rpclock itself; a caller holds it (rpc_lock) across
 * a call and what follows on the handle channel. c->flock is held by every
 * caller except rpc_call_connected's. */
static inline void rpc_lock(mb_client *c) { pthread_mutex_lock(&c->rpclock); }
static inline void rpc_unlock(mb_client *c) { pthread_mutex_unlock(&c->rpclock); }
int rpc_connect(mb_client *c, const char *tenant);
void rpc_disconnect(mb_client *c);
/* Send req (its id is set here) and wait for the reply. Non-zero reply
 * codes come back as the return value, with the text logged. When the
 * daemon was lost, this reconnects first and reports the frames held. */
int rpc_call(mb_client *c, Mb__Request *req, Mb__Reply **rep);
/* rpc_call without c->flock: never reconnects (that reads the frame
 * cache); MB_EUNAVAIL with c->lost set when the daemon is gone, and the
 * caller takes c->flock and calls rpc_call. */
int rpc_call_connected(mb_client *c, Mb__Request *req, Mb__Reply **rep);
/* Send without waiting for the reply (it is dropped when it comes). */
int rpc_post(mb_client *c, Mb__Request *req);
/* Ask the daemon to release free frames until the device has `bytes` free
 * (Room): for this process's own device memory (its CUDA context). Frames
 * released in *released (may be NULL). */
int rpc_room(mb_client *c, uint64_t bytes, uint32_t *released);
/* Handle notices that arrived; a RECLAIM sets c->reclaim_due. */
void rpc_poll_notices(mb_client *c);
/* When the daemon is lost, reconnect if the back-off allows and report the
 * frames this process still maps (Reattach). 0 once connected. */
int rpc_ensure_connected(mb_client *c);
/* Notice whether the daemon's channel closed. */
void rpc_check_lost(mb_client *c);

/* frames.c */
/* n order-0 frames: cached ones first, then granted. */
int fcache_take(mb_client *c, size_t n, struct cframe **out);
/* The frames of the frame plan for `bytes` (no frame above max_order), or
 * of its exact plan (frame_plan.h): cached ones of the planned orders, the
 * rest granted as large frames (with warm grants, the daemon may grant up
 * to c->warm_per_frame free frames of other orders per planned frame
 * holding the same bytes, and up to warm_full_per where making the planned
 * ones would first release free frames; 0: no more than c->warm_per_frame
 * there either). When the grant fails for
 * memory or quota: the cache handed back, the plan again, then the exact
 * plan (order-0 frames only where it has more frames than a grant takes).
 * *out is malloc'd, *n says how many. */
int fcache_take_plan(mb_client *c, size_t bytes, unsigned max_order, bool exact, unsigned warm_full_per,
                     struct cframe ***out, size_t *n);
/* Exactly one frame of each of orders[0..n) into out[i]: cached ones
 * first, the rest granted (no warm grant: other orders would not fit where
 * the caller maps them). On failure nothing is taken. */
int fcache_take_orders(mb_client *c, const uint8_t *orders, size_t n, struct cframe **out);
/* At least `bytes` in frames of any size the cache holds (fragmentation
 * repair: frames of ranges given back, whatever plan made them), the rest
 * by fcache_take_plan. *out is malloc'd. */
int fcache_take_any(mb_client *c, size_t bytes, unsigned max_order, unsigned warm_full_per, struct cframe ***out,
                    size_t *n);
/* Cached frames of any size, largest first, none past `bytes` in all: at
 * most max_n into out[], *got their bytes; no round trip. */
size_t fcache_take_within(mb_client *c, size_t bytes, struct cframe **out, size_t max_n, size_t *got);
/* Cached frames of any size holding at least `need` bytes and at most
 * `room` in all: each the smallest that covers what is still missing, else
 * the largest that fits; at most max_n, *got their bytes (under need when
 * the cache holds too little); no round trip. */
size_t fcache_take_cover(mb_client *c, size_t need, size_t room, struct cframe **out, size_t max_n,
                         size_t *got);
void fcache_put(mb_client *c, struct cframe *f);
/* Descriptors waiting on the handle channel while no grant or import is
 * being received belong to calls that gave up (their answers came late):
 * close them and hand their frames back by id. */
void fcache_drop_strays(mb_client *c);
int fcache_trim(mb_client *c, size_t keep_bytes);
/* fcache_trim for frames cached at least age_ms ago only: frames of the
 * orders the process keeps asking for stay, the others go back. */
int fcache_trim_stale(mb_client *c, size_t keep_bytes, int64_t age_ms);
void fcache_release_all(mb_client *c);
/* Redeem a share token: the frames arrive imported and in use. */
int fcache_import(mb_client *c, const uint8_t *token, size_t len, struct cframe ***out, size_t *n);
/* Drop a frame this process holds without caching it (unmapped first). */
void fcache_forget(mb_client *c, struct cframe *f);
int fcache_return_ids(mb_client *c, uint32_t *ids, size_t n);
/* Tell the daemon how much this process could give back (cached frames
 * plus tier_idle bytes), when it changed. */
void fcache_report(mb_client *c, uint64_t tier_idle);
/* The same with the allocator's counters (mbctl tenants shows them), sent
 * when either changed. */
void fcache_report_counters(mb_client *c, uint64_t tier_idle, const mb_client_stats *st);
/* The same, always sent, marked as the answer to a RECLAIM notice (after
 * the Returns it made), so that waiting grants stop waiting for it. */
void fcache_answer_notice(mb_client *c, uint64_t tier_idle);
bool fcache_is_valid(const struct frame_cache *fc);
/* Is rc a refusal for budget or quota (MB_ENOMEM, MB_EQUOTA): what giving
 * memory back, or asking for less, may cure? */
static inline bool refused_for_room(int rc) { return rc == MB_ENOMEM || rc == MB_EQUOTA; }
/* Why a call failed with rc, for its error message: the daemon's words
 * for the latest refusal when rc is a refusal for budget or quota, else
 * rc's name. Takes c->rpclock. */
void fcache_refusal(mb_client *c, int rc, char *buf, size_t n);
/* Let this thread's grants go of c->flock while they wait for the daemon
 * and import the handles (on), so that other threads take cached frames
 * meanwhile; returns the setting it replaces. Only for a caller that holds
 * no other client lock and keeps nothing it read under c->flock across
 * the call but the frames it took (they are in use, no one else's). */
bool fcache_grant_unlocks(bool on);
/* This thread is the background one (refill.c): its grants let threads on
 * a request's path that wait for the daemon's line go first, as
 * fl_lock_bg does at the frame lock. */
void fcache_background_thread(void);
/* Is the process near the budget or its quota: what it could still be
 * granted under fc.near_pct percent of what it holds? Layers that map
 * ahead then pack their memory closely (grow.c). Any thread. */
static inline bool fcache_near(mb_client *c)
{
    return __atomic_load_n(&c->fc.near, __ATOMIC_RELAXED);
}
/* What the daemon could still grant: the ceiling less what is held (0
 * past it). fl_lock held. */
static inline size_t fcache_room(const struct frame_cache *fc)
{
    return fc->ceiling > fc->bytes_held ? fc->ceiling - fc->bytes_held : 0;
}

/* stitch.c */
/* Map bytes now inside a range of reserve_bytes (>= bytes). */
int stitch_alloc(mb_client *c, size_t bytes, size_t reserve_bytes, struct stitched **out);
/* Map bytes now in few large frames (the frame plan, none above
 * max_order), with room to map about `room` bytes more after them (address
 * space and frames[] slots for that many units; 0: none). */
int stitch_alloc_large(mb_client *c, size_t bytes, unsigned max_order, size_t room, struct stitched **out);
/* The same for a range whose frames may be many smaller ones (a page
 * pool's extent, mapped off any request's path): where making the planned
 * frames would first release free frames, the daemon may grant up to
 * warm_full_per of its free frames per planned frame instead. */
int stitch_alloc_warm(mb_client *c, size_t bytes, unsigned warm_full_per, struct stitched **out);
/* Map frames[from..to) of s side by side, the first at offset `off` (each
 * right after the one before), and give access to them; on failure none of
 * them stays mapped. Touches no client state (the mapper thread calls it). */
int stitch_map(mb_backend *be, struct stitched *s, size_t from, size_t to, size_t off);
/* Unmap frames[k..n) of s (no holes among them), laid out from offset
 * off: all of them, or none on failure. Touches no client state. */
int stitch_unmap_frames(mb_backend *be, struct stitched *s, size_t k, size_t n, size_t off);
/* This thread works in the background (refill.c, async_map.c): its map and
 * unmap calls go to the driver at most `slice` frames at a time (see
 * stitch.c), request paths first between slices. stitch_set_slice sets
 * the slice for the process ($MOONBRIGHT_DRIVER_SLICE; 0: whole ranges). */
#define STITCH_SLICE_DEFAULT 2
void stitch_background_thread(void);
void stitch_set_slice(size_t frames);
/* Around a request path's other driver calls (frames.c: handle imports;
 * vspace.c: page-table writes):
 * counted like its maps, so that background slices wait for them. Between
 * two such calls of a background thread, stitch_path_first lets the
 * request paths in the driver go first. */
void stitch_path_enter(void);
void stitch_path_leave(void);
void stitch_path_first(void);
/* Map t's frames right after what s has mapped, in t's order: MB_EPROTO,
 * nothing mapped, when s->frames[] or s's reservation has no room for
 * them. s->n and s->bytes are the caller's to raise once it publishes. */
int stitch_map_after(mb_backend *be, struct stitched *s, const struct stitched *t);
/* A new range record for up to cap frames, holding none, neither reserved
 * nor mapped (va NULL); NULL when out of memory. */
struct stitched *stitch_new(size_t cap);
/* Append f to a record stitch_new made (its bytes and reserved grow by f's). */
void stitch_push(struct stitched *s, struct cframe *f);
/* Take the frame plan's frames for bytes (largest first) into a new range
 * that is neither reserved nor mapped yet (va NULL); stitch_take_exact,
 * those of the exact plan (bytes in whole units, no rounding). */
int stitch_take_large(mb_client *c, size_t bytes, struct stitched **out);
int stitch_take_exact(mb_client *c, size_t bytes, struct stitched **out);
/* The same with n one-unit frames. */
int stitch_take_units(mb_client *c, size_t n, struct stitched **out);
/* Map at least bytes now from whatever frames the cache holds (largest
 * first), the rest by the frame plan (none above max_order); s->bytes may
 * exceed bytes. */
int stitch_alloc_any(mb_client *c, size_t bytes, unsigned max_order, size_t room, struct stitched **out);
/* Unmap s, put its frames into the cache (shared ones back to the daemon)
 * and free it: nonzero only when the unmap failed, and s is then as it was
 * (callers log it and keep it). fl_lock held. */
int stitch_free(mb_client *c, struct stitched *s, void *stream);
/* Punching (a heap arena gives back the frames under a free block):
 * frames[from..to) leave s for out[] and hole placeholders take their
 * slots (MB_ENOMEM when none can be made); stitch_unpunch puts them back. */
int stitch_punch(struct stitched *s, size_t from, size_t to, struct cframe **out);
void stitch_unpunch(struct stitched *s, size_t from, size_t to, struct cframe **frames);
/* Unmap n punched frames laid out from addr and cache them (flock held);
 * on failure they stay mapped and nothing changes. */
int stitch_unmap_punched(mb_client *c, void *addr, struct cframe **frames, size_t n);
bool stitch_is_valid(const mb_client *c, const struct stitched *s);
/* Map frames this process already holds (an import) into a new range. */
int stitch_adopt(mb_client *c, struct cframe **frames, size_t n, struct stitched **out);

/* share.c: freeing a range imported from another process. */
int share_free_imported(mb_client *c, struct stitched *s, void *stream);

/* tiers.c (c->lock held by every caller) */
int tiers_init(mb_client *c);
void tiers_destroy(mb_client *c);
/* The heap (sizes above slab_max; the slab is reached through tcache.c).
 * 0 and *ptr set, or an error. sync: the memory must be free of any
 * stream's earlier work (mb_malloc). */
int tiers_alloc(mb_client *c, size_t size, void *stream, bool sync, void **ptr);
/* 0, or MB_ENOENT when ptr is not a live tier object. */
int tiers_free(mb_client *c, void *ptr, void *stream);
size_t tiers_usable_size(mb_client *c, const void *ptr);
/* A mapped range of its own joins the heap, free on stream. */
int tiers_adopt(mb_client *c, struct stitched *s, void *stream);
/* The heap block at ptr spans its arena: the arena leaves the heap and
 * *out is its range (MB_EBUSY when the block shares its arena). */
int tiers_detach(mb_client *c, void *ptr, struct stitched **out);
/* Give empty slab chunks and heap arenas (idle_ms >= 0: idle that long)
 * back as idle ranges. */
void tiers_trim(mb_client *c, int64_t idle_ms);
/* Take the idle ranges for unmapping: all (idle_ms < 0), or those idle for
 * idle_ms or given back at or after since_ms (by a trim just made). */
size_t tiers_take_idle(mb_client *c, int64_t idle_ms, int64_t since_ms, struct stitched ***out);
/* Device-sync fences: begin, synchronise the device (lock dropped), end. */
uint64_t tiers_sync_begin(mb_client *c, uint64_t *pool_ticket);
void tiers_sync_end(mb_client *c, uint64_t ticket, uint64_t pool_ticket);
/* Frees on streams that no event covers yet (the legacy stream aside);
 * any: or frees whose fence has not been seen complete. */
bool tiers_unsettled(mb_client *c, bool any);
/* Cover the heap's frees on the legacy stream with an event (always alive). */
void tiers_fence_legacy(mb_client *c);
void tiers_stats(mb_client *c, mb_client_stats *st);
int64_t tiers_now_ms(void);

/* Refill and flush of the thread caches (c->lock held): take up to n
 * objects of class size (0 taken: c->slab_err says why); give n back,
 * ready ones (pending false) at once, pending ones under ev (owned from
 * now on) or, with ev NULL, a device-sync fence. */
size_t tiers_slab_take(mb_client *c, size_t size, size_t n, void **out);
void tiers_slab_put(mb_client *c, void **ptrs, size_t n, void *ev, bool pending);

/* tcache.c: per-thread caches in front of the slab (no lock held). */
int tc_client_init(mb_client *c);
/* 0 and *ptr, MB_ENOENT when this thread has no cache (take the shared
 * path), or an error. size <= c->slab_max. */
int tc_alloc(mb_client *c, size_t size, void *stream, bool sync, void **ptr);
/* 0, MB_ENOENT for a slab object that is not live (a double free), 1 when
 * ptr is no slab object. */
int tc_free(mb_client *c, void *ptr, void *stream);
/* Flush every thread's cache into the shared slab (detach: the client is
 * closing). c->lock not held. */
void tc_flush_every_thread(mb_client *c, bool detach);
/* The bytes c's thread caches hold: tc_lists_lock, then c->lock, held
 * (each cache's count changes under c->lock with the slab's, when objects
 * move between them, so the two read together agree). */
void tc_lists_lock(void);
void tc_lists_unlock(void);
size_t tc_cached_bytes_held(mb_client *c);
/* Flush the caches of threads that made no call for idle_ms (the idle
 * policy). c->lock not held. */
void tc_flush_idle(mb_client *c, int64_t idle_ms);

/* chunkreg.c: the slab's chunks by address. Added and removed by the
 * tiers under c->lock; looked up with no lock. */
struct chunkreg;
struct chunkreg_chunk {
    uintptr_t base;
    size_t size;                 /* class size */
    unsigned cls;
    uint32_t nslots;
    struct chunkreg_chunk *next_retired;
};
int chunkreg_new(size_t chunk_bytes, struct chunkreg **out);
void chunkreg_free(struct chunkreg *r);
int chunkreg_add(struct chunkreg *r, void *base, unsigned cls, size_t size);
void chunkreg_del(struct chunkreg *r, void *base);
/* The chunk holding p and p's slot in it, or NULL when p is not the start
 * of a slab object (r may be NULL). */
const struct chunkreg_chunk *chunkreg_object(const struct chunkreg *r, const void *p, size_t *slot);

/* A pause inside a spin loop. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Wait while *flag is set by a holder that keeps it briefly: pause for
 * `spins` looks, then yield the processor (the holder may have been
 * preempted). Acquire: the holder's writes are seen once it is clear. */
static inline void spin_while_set(const int *flag, int spins)
{
    for (int i = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE); i++) {
        if (i < spins)
            cpu_relax();
        else
            sched_yield();
    }
}

/* lclock.c: which legacy-stream frees are complete (no lock held). */
void lclock_init(struct lclock *k);
void lclock_destroy(struct lclock *k, mb_backend *be);
/* The tag of a free on the legacy stream made now. */
uint64_t lclock_tag(struct lclock *k);
bool lclock_ready(struct lclock *k, uint64_t gen);
/* The done epoch: tags at or below it are complete (it only grows). */
static inline uint64_t lclock_done(struct lclock *k) { return __atomic_load_n(&k->done, __ATOMIC_ACQUIRE); }
/* Move done forward to gen or beyond if the driver says the work is done
 * (a query, never a wait). */
void lclock_advance(struct lclock *k, mb_backend *be, uint64_t gen);
/* A free's tag as an event-like token (odd, never a handle), and its query:
 * 1 when complete, 0 while pending. */
void *lclock_token(struct lclock *k);
bool lclock_is_token(const void *ev);
int lclock_token_query(struct lclock *k, mb_backend *be, const void *tok);
/* A fence after the work queued on stream so far: a token for the legacy
 * stream (the backend can query it), else an event recorded now. Its query
 * (1 done, 0 pending, <0 error; NULL is done) and its release. */
int lclock_fence(struct lclock *k, mb_backend *be, void *stream, void **out);
int lclock_fence_query(struct lclock *k, mb_backend *be, void *fence);
void lclock_fence_drop(mb_backend *be, void *fence);

/* maint.c: the background thread and the ranges of their own. */
int maint_start(mb_client *c);
void maint_stop(mb_client *c);
/* Free a range of its own once work queued on stream has completed (an
 * event recorded now); never waits. */
int maint_retire(mb_client *c, struct stitched *s, void *stream, bool unmapped);
/* The figures mb_stats reports, from every layer (no lock held). */
void maint_stats(mb_client *c, mb_client_stats *out);
/* Give back idle memory: settle frees on streams (device sync), trim the
 * tiers, unmap idle ranges (idle_ms >= 0: idle that long), return cached
 * frames above keep_bytes. Takes the locks itself; leaves thread caches
 * alone (tc_flush_every_thread first, where the caller holds none). */
int maint_release(mb_client *c, int64_t idle_ms, size_t keep_bytes);
/* Unmap and drop retiring ranges whose work is done (all, with wait). */
void maint_reap_retiring(mb_client *c, bool wait);

/* ptrmap.c */
int ptrmap_put(struct ptrmap *m, const void *key, void *val);
void *ptrmap_get(const struct ptrmap *m, const void *key);
void *ptrmap_del(struct ptrmap *m, const void *key);
void ptrmap_destroy(struct ptrmap *m);

#endif
