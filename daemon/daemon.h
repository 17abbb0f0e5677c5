/* daemon.h: moonbrightd's internal types, declared once for its files.
 *
 * Glossary
 *   frame    one physical allocation the daemon created and exported; its id
 *            is its index in the frame table (ids start at 1).
 *   session  one client process: opened when it connects to the handle
 *            channel (credentials from SO_PEERCRED), bound to one ZeroMQ
 *            identity by hello, ended when the channel closes.
 *   tenant   the name a session runs under; its policy (max, min) comes
 *            from the config and `quota`. Names are chosen by clients: they
 *            are accounting, not an isolation boundary.
 *   uid      the isolation boundary (SO_PEERCRED): a frame one uid has held
 *            is never granted to another uid, since the holder may have kept
 *            its descriptor, which nothing can revoke. Free frames wait on
 *            their last holder's free list; other uids get fresh frames.
 *   fresh    a frame no session has held yet (created by the daemon).
 *   budget   the most bytes of frames the daemon will create.
 *   cached   bytes of granted frames a session reports it holds unmapped
 *            (Cache request): what it can hand back in a reclaim.
 *   pending  a grant whose reply is deferred until reclaimed frames come
 *            back or its deadline passes (reclaim.c).
 *   drain    grants refused (MB_EBUSY); after SIGTERM the daemon exits once
 *            every session ended or the drain timeout passed.
 *   withdrawn frames of a killed session: the process may still map them,
 *            so they stay granted to the dead session until the process
 *            exits (its pidfd), then return to the pool. */
#ifndef MB_DAEMON_H
#define MB_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "commands.h"
#include "config.h"
#include "fdpass.h"
#include "frame_plan.h"
#include "protocol.h"
#include "wire.h"

enum frame_state { FRAME_UNUSED = 0, FRAME_FREE, FRAME_GRANTED };

struct frame {
    enum frame_state state;
    struct mb_mem mem;           /* created and exported while state != UNUSED */
    uint64_t owner;              /* session id while GRANTED; 0 once the owner let go
                                  * while importers still hold it (holders > 0) */
    uint32_t holders;            /* sessions holding it through an import */
    bool adopted;                /* reported by a client after a daemon restart:
                                  * counted, but the daemon holds no handle; when
                                  * its holder lets go the slot simply ends */
    uint8_t order;               /* holds frame_bytes << order bytes (frame_plan.h) */
    uint32_t last_tenant;        /* tenant that last held it; 0 = never granted */
    uid_t last_uid;              /* uid that held it (valid when held) */
    bool held;                   /* granted or reported at least once; else fresh */
    bool tainted;                /* imported by a uid other than last_uid: released
                                  * to the driver once free, never granted again */
    uid_t importer_uid;          /* the last such uid (valid when tainted) */
    uint32_t next_free;          /* free-list links while FREE (0: none); while
                                  * UNUSED and reusable, the next slot to reuse */
    uint32_t prev_free;          /*   prev_free 0 at the head of its chain */
    int64_t freed_ms;            /* when it last became FREE (mb_now_ms) */
    uint16_t gen;                /* the slot's generation: its id's high bits
                                  * (FRAME_SLOT_BITS); kept when the slot ends */
    bool reusable;               /* UNUSED, on the queue of slots to reuse */
    bool named;                  /* named once already in the request being checked
                                  * (frame_pool_duplicate: duplicates in O(n)); false
                                  * between requests */
};

/* A frame's id names its slot in the table and the slot's generation:
 * id = slot | gen << FRAME_SLOT_BITS. A slot whose frame ended is reused
 * (oldest first) with the next generation, so the table and the journal
 * stay as large as the most frames held at once, however many are made
 * and released over the daemon's life; an id kept past its frame's end
 * names no frame until its slot has been reused FRAME_GENS times. Slot 0
 * is never used: id 0 names no frame. */
#define FRAME_SLOT_BITS 20
#define FRAME_SLOTS ((uint32_t)1 << FRAME_SLOT_BITS)
#define FRAME_GENS ((uint32_t)1 << (32 - FRAME_SLOT_BITS))

/* The slot and the generation an id names (whether or not a frame holds
 * that slot now). */
static inline uint32_t frame_id_slot(uint32_t id) { return id & (FRAME_SLOTS - 1); }
static inline uint16_t frame_id_gen(uint32_t id) { return (uint16_t)(id >> FRAME_SLOT_BITS); }
/* The journal keeps a slot for a frame a client may report after a
 * restart for this many restarts (frames.c). */
#define JOURNAL_KEEP_EPOCHS 8u

/* Free frames by order: the fresh ones (held by nobody yet), or those one
 * uid held last (only that uid may get them again). Each order has two
 * chains: frames that hold an exported descriptor (head[1][k]), which
 * grants take first, and frames whose descriptor went with their last
 * grant (head[0][k]), which the workers export again ahead of grants. */
struct free_list {
    uid_t uid;                   /* for a uid's list */
    uint32_t head[2][MB_ORDERS]; /* first free frame of each chain, 0 when none */
    uint32_t n[MB_ORDERS];       /* frames of order k on both chains */
};

/* The frame books. Frames have orders (frame_plan.c: the size policy); counts
 * are frames, bytes are what their handles hold. Invariants
 * (frame_pool_is_valid):
 *   n_free + n_granted == n_total, bytes_free + bytes_granted == bytes_total
 *   bytes_total == the sum of the frames' bytes <= budget_bytes
 *   the free lists (fresh, and one per uid) hold exactly the FREE frames,
 *   each once, on the list of its order: fresh iff !held, else the list of
 *   last_uid, on chain head[1] iff it holds a descriptor (mem.fd >= 0),
 *   doubly linked; n_free_order[k] counts the free frames of order k over all
 *   lists, and n_free is their sum
 *   no FREE frame is tainted or adopted (those end when let go)
 *   n_exported_held_order[k] counts the FREE frames of order k a uid held
 *   that hold an exported descriptor (fresh frames always hold theirs)
 *   n_granted_fd counts the GRANTED frames that hold one
 *   bytes_total + bytes of ready[] and of frames being created == committed
 *     <= budget_bytes; n_total + n_ready + creating == n_committed
 *   the reuse queue holds exactly the slots marked reusable, each once, all
 *     UNUSED and below next_unused <= FRAME_SLOTS; every gen < FRAME_GENS
 * The warm reserve: RESERVE_THREADS workers create and export frames ahead of
 * demand (export costs ~0.6 ms on a GPU) into ready[]: order-0 frames until
 * fresh free and ready order-0 frames hold reserve_bytes (the target: the
 * configured reserve, or more when recent grants took more: see
 * frame_pool_tick; a grant raises it at once), and spares of each order k
 * a request had to create on its own path: as many as the most one such
 * request took, plus one each time a request had to create it again while
 * spares were kept (spare[k], at most MB_SPARES_MAX; all spares together
 * hold at most a SPARE_SHARE-th of the bytes granted, spare_room); grants
 * adopt them into the books, so a grant from the reserve makes no driver
 * call. Only ready[], n_ready, creating, path_busy, committed, n_committed,
 * spare[], spare_room, room_wanted[], full_until_ms[], room_bytes,
 * room_until_ms, the export queues (rex, rex_done) and the release queue
 * (release_q, released_by_workers) are shared with the workers (under
 * lock). */
#define RESERVE_THREADS 2
/* Free frames' descriptors the workers let the daemon hold at most: fresh
 * frames (made ahead, up to the reserve's target) and returned frames they
 * export again ahead of grants, of which they keep EXPORTED_HELD_MIN at
 * least. Past it, returned frames wait for a grant to take one that has a
 * descriptor: grants take those first, so this bounds how far the exports
 * run ahead of grants, not how fast they follow them. */
#define FREE_DESCRIPTORS_MAX 1792
#define EXPORTED_HELD_MIN 256
/* Of that room, each order's returned free frames get EXPORTED_ORDER_MIN
 * descriptors before the latest returned frames take the rest (those are
 * mostly of one order, and a grant of another would export on its path).
 * Fresh frames adopted later can pass the cap: returned frames then give
 * descriptors up, the order holding most first. */
#define EXPORTED_ORDER_MIN 8
/* Where a grant's time went: frames created on its path (create_ns, of it
 * wait_ns waiting for the reserve's workers and step_ns in the driver's
 * create and export; released: free frames ended to make room), frames
 * scrubbed for a new tenant (a frame's first scrub maps it here too). */
struct grant_path {
    uint32_t created, released, scrubbed, reexported;
    uint64_t create_ns, wait_ns, scrub_ns, reexport_ns;
    uint64_t step_ns[2];
};
#ifndef MB_SPARES_MAX
#define MB_SPARES_MAX 4
#endif
#define SPARE_SHARE 16
struct frame_pool {
    mb_backend *be;
    size_t frame_bytes;
    uint64_t budget_bytes;
    uint64_t bytes_total, bytes_free, bytes_granted;
    struct frame *frames;        /* by slot: [0] unused; slots 1..cap-1 */
    uint32_t cap;                /* slots allocated in frames[] */
    uint32_t reuse_head, reuse_tail; /* queue of slots whose frame ended (0: empty),
                                  * linked by next_free, oldest first */
    uint32_t n_reusable;
    uint32_t n_total, n_free, n_granted;
    struct free_list fresh;      /* never-held free frames (n[] read by workers) */
    struct free_list **by_uid;   /* one list per uid that returned frames */
    uint32_t n_by_uid, cap_by_uid;
    uint32_t n_free_order[MB_ORDERS];
    uint64_t recreated;          /* free frames released to make room for another order */
    uint64_t path_created;       /* frames grants created on their own path */
    uint64_t reexports;          /* frames exported again on a grant's or an import's
                                  * path (their descriptor went when last passed on) */
    uint64_t exported_ahead;     /* ... and by the workers, ahead of the grant */
    uint64_t made_ahead;         /* fresh frames the workers made (created, exported) */
    uint64_t exports_dropped;    /* descriptors granted, then returned free, frames gave
                                  * up when fresh ones took the room (drop_excess_exports) */
    uint64_t warm_full_grants;   /* grants that took free frames past warm_max (main thread) */
    bool export_ahead;           /* the workers export returned frames again (default on) */
    bool unexport;               /* frames passed on keep no descriptor here (default on,
                                  * where the backend can; MOONBRIGHTD_UNEXPORT=0) ... */
    bool keep_granted;           /* ... but while the daemon's descriptors are within
                                  * free_descriptors_max (default on;
                                  * MOONBRIGHTD_KEEP_GRANTED=0) */
    uint32_t n_granted_fd;       /* GRANTED frames that kept their descriptor */
    uint32_t drop_cursor;        /* where drop_granted_fd looks next */
    uint32_t n_exported_held_order[MB_ORDERS]; /* free frames of order k a uid held
                                  * that hold an exported descriptor (written by the
                                  * main thread, read by the workers: atomic) */
    uint32_t free_descriptors_max, exported_held_min, exported_order_min;
                                 /* FREE_DESCRIPTORS_MAX, EXPORTED_HELD_MIN and
                                  * EXPORTED_ORDER_MIN (tests set smaller ones) */
    uint32_t spare_share;        /* SPARE_SHARE (tests set 0: spares not capped) */
    struct grant_path last;      /* the last grant's (main thread only) */
    uint64_t adopt_wait_ns;      /* frame_pool_adopt's waits for the lock and the frames */
    uint32_t adopted;            /* it adopted, since grant_now zeroed them (main thread) */
    uint32_t touched;            /* slots below this have had their pages touched:
                                  * frame_pool_tick runs ahead of next_unused */
    uint64_t released_isolation; /* free frames of one uid released so that another
                                  * uid got fresh ones (or tainted by a share) */
    uint64_t released_idle;      /* free frames above the reserve target released
                                  * after the idle period */
    uint64_t released_device_full; /* free frames released because the device was
                                  * full below the budget (a grant, or a reserve
                                  * worker, then makes its frame in their place);
                                  * a grant's are also counted above */
    uint64_t headroom;           /* device bytes free frames leave free (0: off;
                                  * set before the workers start) */
    uint64_t released_room;      /* free frames released to leave device memory free:
                                  * below headroom, or for a Room (main thread) */
    uint64_t room_bytes;         /* after a Room, the reserve leaves this much of the
                                  * device free ... */
    int64_t room_until_ms;       /* ... until then (both under lock) */
    /* demand: order-0 bytes taken from the fresh frames in each second */
    uint64_t reserve_base;       /* configured reserve (the target's floor) */
    int64_t idle_ms;             /* free bytes above the target this long: released
                                  * (0: never) */
    uint64_t demand[16];         /* [second % 16] */
    int64_t demand_sec;          /* the second demand[demand_sec % 16] counts */
    int64_t excess_since_ms;     /* free bytes above the target since (0: not above);
                                  * after idle_ms of it, frames free for idle_ms
                                  * are released down to the target */
    uint32_t next_unused;        /* lowest slot never used (ended slots are reused
                                  * before it moves) */
    uint32_t id_limit;           /* slots below this may hold frames an earlier
                                  * daemon handed out (the journal): used only for
                                  * their reports until one ends; 0: no journal */
    int journal_fd;              /* state journal (ids handed out), or -1 */
    uint32_t epoch;              /* daemons that used the journal, this one included */
    uint32_t journal_limit;      /* the journal promises no slot at or above this is in use */
    bool journal_ahead_failed;   /* the tick's last write of the limit failed */
    uint64_t scrubs;             /* frames zeroed between tenants */
    bool scrub;                  /* zero frames that change tenant (default on) */
    uint32_t max_frames;         /* frames the descriptor limit allows (0: no cap) */
    /* warm reserve */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t workers[RESERVE_THREADS];
    int n_workers;
    bool stop;
    uint64_t reserve_bytes;      /* the target (under lock) */
    uint64_t committed;          /* bytes created, being created or ready */
    uint32_t n_committed;        /* frames created, being created or ready */
    uint32_t creating;           /* frames the workers are creating now */
    uint32_t path_busy;          /* a grant is creating frames or exporting
                                  * descriptors on its path: the workers start no
                                  * create or export meanwhile (the driver
                                  * serialises them, and the grant's caller is
                                  * waiting) */
    uint32_t creating_order[MB_ORDERS], ready_order[MB_ORDERS];
    uint8_t spare[MB_ORDERS];    /* keep this many free order-k frames ready ... */
    uint64_t spare_room;         /* ... as far as they hold at most this many bytes
                                  * in all: bytes_granted / spare_share as of
                                  * the last tick or grant that created (a spare
                                  * costs device memory in proportion to its size,
                                  * and saves one create and export whatever it is) */
    struct mb_mem *ready;        /* created and exported, not yet in the books */
    uint32_t n_ready, ready_cap;
    /* Free frames whose descriptor went with a grant, exported again by the
     * workers: rex[0..n_rex_todo) to do (fd -1), then rex_done[0..n_rex_done)
     * done, which frame_pool_adopt attaches where the frame is still free
     * and has none (else it closes the fd); n_rex_todo_order[k] counts the
     * entries to do of order k. */
    struct rex { uint32_t slot; uint64_t h; int fd; uint8_t order; } *rex, *rex_done;
    uint32_t n_rex_todo, rex_cap, n_rex_done, rex_done_cap;
    uint32_t n_rex_todo_order[MB_ORDERS];
    /* The handles the workers export now (outside the lock): a frame that
     * ends first drops its entries and waits for these (end_frame), so that
     * no worker exports a handle being released, and no descriptor of a
     * released frame reaches a frame made later (a handle's value may come
     * back). */
    struct rex rex_busy[RESERVE_THREADS];
    uint32_t n_rex_busy;
    uint64_t room_wanted[MB_ORDERS]; /* bytes of order-k frames the reserve lacks, which
                                  * a worker could not make on a device full below
                                  * the budget: the tick releases returned frames
                                  * for them (0: none) */
    int64_t full_until_ms[MB_ORDERS]; /* ... and no worker tries order k again before
                                  * this unless the tick made room */
    /* The handles of frames the tick released for that room, released by a
     * worker (a release takes the driver milliseconds, which the main
     * thread's requests would wait): out of the books at once, their bytes
     * committed until a worker has released them; the workers make nothing
     * while some wait. defer_release: end_frame queues (main thread). */
    struct mb_mem *release_q;
    uint32_t n_release_q, release_q_cap;
    bool defer_release;
    uint64_t released_by_workers; /* handles the workers released so */
    int64_t reserve_warned_ms;   /* when a worker's failure was last said (0: never) */
    bool said_device_full;       /* released_device_full's first was logged */
    uint64_t device_room;        /* bytes_total when a frame made on a grant's path
                                  * last found the device full (0: not known, or a
                                  * make has fit more since); main thread */
};

int frame_pool_init(struct frame_pool *p, mb_backend *be, size_t frame_bytes, uint64_t budget);
void frame_pool_destroy(struct frame_pool *p);
/* Start the warm reserve: background workers keep `bytes` of frames created
 * and exported ahead of demand. Returns at once. */
int frame_pool_prefill(struct frame_pool *p, uint64_t bytes);
/* Move frames the workers made into the books (free list). */
void frame_pool_adopt(struct frame_pool *p);
/* Around a grant's driver calls on the main thread (frames created on its
 * path, send_frame_fds' exports): the reserve's workers start no create or
 * export meanwhile; d is +1 before, -1 after. */
void frame_pool_path_busy(struct frame_pool *p, int d);
/* Would making `bytes` of new frames now first release free frames? Yes
 * when they would pass, with the frames the pool holds, the budget, the
 * device's memory, or what the device held of them when a frame made on a
 * grant's path last found it full (other processes' memory, the driver's
 * own); or when the device's free memory (backend mem_free, where known)
 * is less than `bytes`. */
bool frame_pool_would_release(struct frame_pool *p, uint64_t bytes);
/* Orders of frames this uid could be granted now with no frame created:
 * free frames of this uid or fresh ones, of any order up to max_order,
 * largest first, at most max_n of them, holding at least `bytes` and at
 * most `room` bytes. Returns how many (0: the free frames cannot). */
uint32_t frame_pool_warm_plan(struct frame_pool *p, uid_t uid, uint64_t bytes, uint64_t room,
                              unsigned max_order, uint32_t max_n, uint8_t *orders);
/* Grant n frames of the given orders to a session of a uid and tenant, all
 * or nothing; ids[] gets them, in the order of orders[]. Only frames this
 * uid held last, or fresh ones, are granted; free frames of other uids are
 * released to make room when the budget is full. A frame last held by
 * another tenant (of the same uid) is scrubbed first. */
int frame_pool_grant_orders(struct frame_pool *p, const uint8_t *orders, uint32_t n,
                            uint64_t session, uid_t uid, uint32_t tenant, uint32_t *ids);
/* The same for n order-0 frames. */
int frame_pool_grant(struct frame_pool *p, uint32_t n, uint64_t session, uid_t uid,
                     uint32_t tenant, uint32_t *ids);
/* A session of `uid` holds frame id through an import: when that is not the
 * uid the frame belongs to, the frame is never granted again. */
void frame_pool_note_importer(struct frame_pool *p, uint32_t id, uid_t uid);
/* The reserve follows demand: the target becomes the most order-0 bytes
 * taken from fresh frames in one second of the last idle period (at least
 * the configured reserve; grants raise it between ticks); once free bytes
 * have exceeded the target for the idle period, frames free for that long
 * are released to the driver down to the target. It also moves the state
 * journal's id limit ahead of the ids in use, so that no grant writes it.
 * Call from the poll loop; returns when to call again. */
int64_t frame_pool_tick(struct frame_pool *p, int64_t now_ms);
/* Release free frames (frames users returned first, of any age; granted
 * frames never) until the device has `bytes` free, or none is left; counted
 * in released_room. Frames the workers made count once adopted: callers
 * adopt first (the tick does). With `hold`, the reserve's workers leave `bytes`
 * free for a while too (a caller's room, which they would fill again).
 * Returns how many went; *device_free (may be NULL) is what the device had
 * free after, with handles queued for release counted (0, and nothing
 * released, where the backend cannot tell). */
uint32_t frame_pool_make_room(struct frame_pool *p, uint64_t bytes, uint64_t *device_free,
                              bool hold);
/* Bytes of frame id (0 when it names no frame). */
uint64_t frame_pool_bytes(const struct frame_pool *p, uint32_t id);
/* Take back frames granted to `session`; all must be its own, else nothing
 * changes and MB_EPERM (or MB_ENOENT for ids that name no frame) returns. */
int frame_pool_return(struct frame_pool *p, const uint32_t *ids, size_t n, uint64_t session);
/* The first id of ids[] that names a frame named before it, or 0: the same
 * frame twice in a request (ids naming no frame are not counted). */
uint32_t frame_pool_duplicate(struct frame_pool *p, const uint32_t *ids, size_t n);
/* After a restart: book frame `id` of `bytes` as held by `session` of
 * `uid`, reported by the client that still maps it. MB_EPERM when the
 * journal does not say this uid held a frame of that size under that id, or
 * another holder already claimed it (contradicting reports); MB_EINVAL for
 * an id this daemon could not have handed out. */
int frame_pool_adopt_reported(struct frame_pool *p, uint32_t id, uint64_t bytes, uint64_t session,
                              uid_t uid, uint32_t tenant);
/* After a restart: book frame `id` of `bytes` as held through an import by
 * a session of `uid` (holders + 1; its owner, if any, reports it
 * separately). MB_EPERM when the journal has no frame of that size under
 * that id granted to or imported by that uid (the last other uid that
 * imported it), or the frame is not an adopted one of that size; MB_EINVAL
 * as above. */
int frame_pool_adopt_held(struct frame_pool *p, uint32_t id, uint64_t bytes, uid_t uid);
/* Slots for frame ids below n, made at start-up (before the reserve's
 * workers run): the table otherwise doubles as frames are made, a copy and
 * a fill of the whole table on a grant's path (0.5 ms at 2 048 slots on a
 * 2-core VM). calloc's pages are touched only as slots are used. */
int frame_pool_reserve_slots(struct frame_pool *p, uint32_t n);
/* The journal: ids handed out survive a restart, so new frames never take
 * the id of one a client still holds; and the uid each frame was granted
 * to, so only that uid can report it after a restart. */
int frame_pool_open_journal(struct frame_pool *p, const char *path);

/* At exit, before the sessions end: the journal records of the free
 * frames are cleared (no process holds them; their memory goes with this
 * daemon), so that the next daemon reuses their slots at once. */
void frame_pool_forget_free(struct frame_pool *p);
/* Take back every frame of a session; returns how many, and their bytes in
 * *bytes when not NULL. */
uint32_t frame_pool_reclaim(struct frame_pool *p, uint64_t session, uint64_t *bytes);
/* An importer let go of frame id; the frame becomes free once neither its
 * owner nor any importer holds it. */
void frame_pool_drop_hold(struct frame_pool *p, uint32_t id);
/* The frame id names, NULL when none does (never was, ended, or its slot
 * now holds a later frame). */
struct frame *frame_pool_get(struct frame_pool *p, uint32_t id);
/* The table in slot order, for listings: the frame in slot `slot` and its
 * id (*id), NULL when the slot holds none. */
struct frame *frame_pool_at(struct frame_pool *p, uint32_t slot, uint32_t *id);
/* Frames whose exported descriptor the daemon holds now. */
uint32_t frame_pool_exported(const struct frame_pool *p);
/* ... of them, free frames a uid held (n_exported_held_order's sum). */
uint32_t frame_pool_exported_held(const struct frame_pool *p);
/* A descriptor for the GRANTED frame f, being passed on without one (an
 * export on the caller's path, counted in reexports); 0 or an MB_ error. */
int frame_pool_export_passed(struct frame_pool *p, struct frame *f);
/* The GRANTED frame f was passed on (the message holds its own reference to
 * the descriptor): the daemon's stays while keep_granted and its
 * descriptors are within free_descriptors_max, so that the frame, returned,
 * is granted again with no export; else it goes (unexport). */
void frame_pool_passed(struct frame_pool *p, struct frame *f);
bool frame_pool_is_valid(const struct frame_pool *p);

struct tenant {
    uint32_t id;                 /* 1-based, stable for the daemon's life */
    char name[64];
    uint64_t bytes;              /* held by its sessions now: == sum of bytes and
                                  * import_bytes of its sessions (and withdrawn) */
    uint64_t max;                /* MB_CONFIG_UNLIMITED or bytes; bytes may exceed
                                  * it only after quota lowered it */
    uint64_t min;                /* kept available for it; <= max at start */
    uint32_t n_sessions;         /* bound sessions under it == length of sessions */
    uint32_t n_withdrawn;        /* killed sessions still charged to it */
    struct session *sessions;    /* its bound sessions, linked by t_prev/t_next */
    struct tenant *prev, *next;  /* daemon's list, in order of appearance */
};
/* A tenant with no session, nothing charged, and no policy (config or
 * quota) is freed (tenant_release): names clients pick come and go. */

struct session {
    uint64_t id;
    uint8_t token[MB_TOKEN_BYTES];
    int chan;                    /* handle channel; its EOF ends the session */
    pid_t pid;
    uid_t uid;
    gid_t gid;
    struct tenant *tenant;       /* set by hello */
    bool bound;                  /* hello done: ident is valid */
    uint8_t ident[MB_WIRE_MAX_IDENT];
    size_t ident_len;
    uint32_t frames;             /* granted now; == frames in the pool owned by id */
    uint64_t bytes;              /* == the bytes of those frames */
    uint64_t import_bytes;       /* bytes of frames it holds through imports (charged
                                  * to its tenant and uid like granted ones) */
    uint64_t lent_bytes;         /* of its bytes, frames importers hold too (returning
                                  * them frees nothing); <= bytes */
    uint64_t cached;             /* last Cache report; <= bytes */
    uint64_t counters[MB_CLIENT_COUNTERS];   /* last ClientCounters, in field order */
    uint32_t ignored_notices;    /* RECLAIM notices it let pass their deadline
                                  * without returning frames; reset by a return */
    int64_t notice_deadline_ms;  /* its last RECLAIM notice's deadline (0: none) */
    uint64_t returned_at_notice; /* reclaim bytes it had returned when asked */
    uint64_t reclaim_returned;   /* bytes it returned while grants waited */
    bool waiting;                /* has a pending grant (at most one) */
    int64_t opened_ms;
    struct session *next;
    struct session *t_prev, *t_next;  /* the tenant's sessions, while bound */
};

struct daemon_counters {
    uint64_t requests;           /* well-formed requests handled */
    uint64_t malformed;          /* dropped or answered with MB_EPROTO */
    uint64_t refused;            /* refused_auth + refused_quota */
    uint64_t refused_auth;       /* answered with MB_EPERM */
    uint64_t refused_quota;      /* answered with MB_EQUOTA */
    uint64_t errors;             /* any other non-zero reply */
    uint64_t sessions_opened, sessions_closed, sessions_killed;
    uint64_t reclaim_notices;    /* RECLAIM notices sent */
    uint64_t reclaim_bytes;      /* returned while a grant was pending */
    uint64_t reclaim_timeouts;   /* pending grants answered MB_ENOMEM at their deadline */
    uint64_t reclaim_short;      /* ... before it: every session asked had answered */
    uint64_t conns_refused;      /* connections closed at accept (caps, descriptors) */
    uint64_t hello_timeouts;     /* handle-channel connections closed without hello */
    uint64_t slow_readers;       /* control connections dropped for unread replies */
    uint64_t reclaim_ignored;    /* RECLAIM notices that passed their deadline unanswered */
};

/* Request latency histogram, per command. Bucket bounds in microseconds,
 * roughly 1-2.5-5 per decade from 50 us to 5 s; a request counts in the
 * first bucket whose bound it does not exceed (mbctl makes them cumulative). */
#define MB_LAT_BUCKETS 16
extern const uint64_t mb_lat_bounds_us[MB_LAT_BUCKETS];
struct cmd_stats {
    uint64_t count;              /* == sum of bucket[] + over */
    uint64_t errors;
    uint64_t sum_us;
    uint64_t bucket[MB_LAT_BUCKETS];
    uint64_t over;               /* above the last bound */
};

/* Frames of a killed session: still granted to its id until its process
 * exits (pidfd readable), then reclaimed. */
struct withdrawn {
    uint64_t session;
    uint32_t frames;
    uint64_t bytes;
    struct tenant *tenant;       /* still charged with the frames */
    uint64_t import_bytes;       /* and with these, until its holds are dropped */
    uid_t uid;
    pid_t pid;
    unsigned long long start_time; /* of pid (/proc), to tell a reused pid; 0: unknown */
    int pidfd;                   /* -1: pidfd_open failed; withdrawn_poll watches pid */
    struct withdrawn *next;
};

/* How a grant's frames are planned (Grant.large, max_order, exact): no
 * frame above max_order (0: whole units), rounded as the frame plan
 * rounds or, exact, to whole units only (frame_plan.h). */
struct grant_shape {
    unsigned max_order;
    bool exact;
};

/* A grant waiting for reclaimed frames (reclaim.c). */
struct pending {
    uint8_t ident[MB_WIRE_MAX_IDENT];
    size_t ident_len;
    uint64_t session;            /* session id of the requester */
    uint64_t req_id;
    uint64_t bytes;              /* asked for */
    struct grant_shape shape;    /* how its frames are planned */
    uint64_t t0_ns;              /* arrival, for the latency histogram */
    int64_t deadline_ms;
    uint64_t reclaimed_at_start; /* count.reclaim_bytes when it began waiting */
    uint32_t rounds;             /* notice rounds sent for it (MB_RECLAIM_ROUNDS at most) */
    struct pending *next;
};
#define MB_MAX_PENDING 64
/* A waiting grant whose notices were ignored until its deadline asks the
 * next sessions once more (a new deadline), then fails: with the client's
 * 5 s timeout and the default 2 s reclaim deadline, 2 rounds fit. */
#define MB_RECLAIM_ROUNDS 2

/* One connection to the control socket (zmtp.c). Its identity is id, 8
 * bytes big-endian, assigned at accept and never reused; the peer cannot
 * choose it. Invariants (ctl_conn_is_valid): in_len <= in_cap;
 * out_off <= out_len <= out_cap; out_len - out_off <= CTL_OUT_HARD_BYTES. */
#define CTL_IDENT_BYTES 8
#define CTL_OUT_SOFT_BYTES (256u * 1024)     /* above it the peer's requests wait */
#define CTL_OUT_HARD_BYTES (2u * 1024 * 1024) /* above it the connection is dropped */
#define CTL_UID_OUT_BYTES (32u * 1024 * 1024) /* unsent replies of one uid's connections
                                              * above the soft cap: past it, dropped */
#define CTL_HANDSHAKE_MS 3000                 /* greeting and READY within this */
#define CTL_STALL_MS 10000                    /* replies above the soft cap unread this long */
#define CTL_PARTIAL_MS 10000                  /* a frame begun and not complete this long */
enum ctl_state { CTL_GREETING, CTL_READY, CTL_OPEN };
struct ctl_conn {
    int fd;
    uint64_t id;                 /* the identity; > 0 */
    pid_t pid;                   /* SO_PEERCRED at accept */
    uid_t uid;
    enum ctl_state state;
    bool multipart;              /* inside a multipart message (refused at its end) */
    bool dead;                   /* to be freed by ctl_reap (never while handled) */
    bool held;                   /* complete requests wait in `in` for the output to
                                  * drop below the soft cap (ctl_resume) */
    uint8_t *in;                 /* received, not yet handled: in_len of in_cap */
    size_t in_len, in_cap;
    uint8_t *out;                /* to send: out[out_off..out_len) */
    size_t out_off, out_len, out_cap;
    int64_t opened_ms, last_progress_ms;
    int64_t partial_ms;          /* since when `in` holds the start of a frame not yet
                                  * complete (0: it does not) */
    struct ctl_conn *next;
};

/* One line per second at most for each kind of event a peer can cause in
 * bulk; the next line of a kind says how many were left out. */
enum log_kind {
    LOG_REFUSED,                 /* connections refused by the caps */
    LOG_NOFD,                    /* accept failed: out of descriptors, or other errors */
    LOG_DROPPED,                 /* connections ended: no hello or handshake, protocol
                                  * violations, unread replies */
    LOG_KINDS
};
struct log_limit {
    int64_t next_ms;
    uint64_t suppressed;
};

struct daemon {
    struct mb_config cfg;        /* file, then command line */
    int device;
    const char *runtime_dir;
    mb_backend *be;
    struct frame_pool pool;
    int ctl_listen;              /* gpuN.ctl, ZMTP (zmtp.c) */
    struct ctl_conn *ctl;        /* n_ctl connections */
    uint32_t n_ctl;
    uint64_t next_ctl_id;
    /* Descriptor limits (server.c): connections of both channels together
     * stay below conn_cap, a uid's below its caps, so frames and the
     * sockets keep their descriptors; at EMFILE the spare is freed to
     * accept and close one connection. */
    int spare_fd;
    uint32_t conn_cap;           /* control connections + sessions */
    uint32_t conn_admin;         /* of conn_cap, kept for administrators' uids */
    uint32_t uid_conn_cap;       /* sessions and control connections of one uid
                                  * (administrators: no cap but conn_cap) */
    uint32_t uid_pending_cap;    /* handle-channel connections of one uid without hello */
    int64_t accept_paused_until_ms;  /* out of descriptors with no spare: listeners rest */
    struct log_limit log_limits[LOG_KINDS];
    int chan_listen;
    int sigfd;
    int lock_fd;
    char ctl_path[256], chan_path[256], lock_path[256];
    struct session *sessions;
    uint32_t n_sessions;
    uint64_t next_session_id;
    struct tenant *tenants, *tenants_tail;
    uint32_t n_tenants;          /* in the list */
    uint32_t next_tenant_id;     /* ids are never reused */
    struct daemon_counters count;
    struct cmd_stats stats[MB_CMD_COUNT];
    int64_t started_ms;
    bool draining;               /* grants refused */
    bool stopping;               /* SIGTERM: draining, exit when sessions end */
    bool exit_now;               /* leave the loop now */
    int64_t drain_deadline_ms;   /* while stopping */
    int64_t drain_timeout_ms;    /* --drain-timeout */
    int64_t reclaim_timeout_ms;  /* --reclaim-timeout; 0 disables deferred grants */
    uint64_t slow_grant_ns;      /* grants this slow are logged ($MOONBRIGHTD_SLOW_GRANT_US;
                                  * 0: the default) */
    struct withdrawn *withdrawn;
    uint32_t n_withdrawn;
    struct share *shares;        /* unredeemed share tokens */
    struct hold *holds;          /* frames held through imports: n_holds */
    size_t n_holds, cap_holds;
    uint32_t *hold_slots;        /* hash of (session, id) -> index + 1 into holds[];
                                  * hold_slots_cap is 0 or a power of two > 2 n_holds */
    size_t hold_slots_cap;
    struct pending *pending;     /* FIFO */
    uint32_t n_pending;
    char last_status[160];       /* last STATUS= sent */
};

/* server.c */
int daemon_serve(struct daemon *d);
/* One control message from `ident`: unpack, dispatch, reply (unless the
 * reply is deferred). Bad bytes are counted and answered, never asserted. */
void daemon_message(struct daemon *d, const uint8_t *ident, size_t ident_len,
                    const void *data, size_t size);
/* Send a reply to the control connection named ident (zmtp.c); without a
 * control socket (the fuzz target) the reply is packed and dropped. 0 or a
 * negative mb_status. */
int daemon_send(struct daemon *d, const uint8_t *ident, size_t ident_len, const Mb__Reply *rep);
/* An unsolicited notice (Reply id 0) to a bound session. */
int daemon_notice(struct daemon *d, const struct session *s, Mb__Notice__Kind kind,
                  uint64_t bytes, uint32_t deadline_ms, const char *reason);
/* Stop granting (on) or resume; `exiting` is SIGTERM's drain. Sessions are
 * told with a notice; pending grants fail with MB_EBUSY. */
void daemon_drain(struct daemon *d, bool on, bool exiting);
/* Send STATUS= when the state line changed. */
void daemon_notify_status(struct daemon *d);

/* A malformed request: counted, logged at debug, answered MB_EPROTO. */
void daemon_malformed(struct daemon *d, const uint8_t *ident, size_t ident_len, const char *why);
/* mb_log, at most once a second for each kind; counts what it leaves out. */
void daemon_log_limited(struct daemon *d, enum log_kind kind, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* zmtp.c: the control socket's connections. */
struct ctl_conn *ctl_open(struct daemon *d, int fd, pid_t pid, uid_t uid);
void ctl_free(struct daemon *d, struct ctl_conn *c);
/* Queue one reply frame to the connection named ident and write what the
 * socket takes; MB_EUNAVAIL when it is gone or was dropped for not reading. */
int ctl_send(struct daemon *d, const uint8_t *ident, size_t ident_len, const void *data, size_t size);
struct ctl_conn *ctl_by_ident(struct daemon *d, const uint8_t *ident, size_t len);
void ctl_ident(const struct ctl_conn *c, uint8_t ident[CTL_IDENT_BYTES]);
bool ctl_conn_is_valid(const struct ctl_conn *c);
size_t ctl_pending_out(const struct ctl_conn *c);
void ctl_readable(struct daemon *d, struct ctl_conn *c);
void ctl_writable(struct daemon *d, struct ctl_conn *c);
/* Handle requests held back by a full output once it has room again
 * (however it drained); the loop calls it every turn. */
void ctl_resume(struct daemon *d);
/* Drop connections without a handshake in time and those whose unread
 * replies stalled; ctl_reap frees what was dropped. */
void ctl_housekeep(struct daemon *d, int64_t now);
void ctl_reap(struct daemon *d);
uint32_t ctl_count_uid(const struct daemon *d, uid_t uid);

/* sessions.c */
struct session *session_open(struct daemon *d, int chan);
void session_close(struct daemon *d, struct session *s);
/* End a session for an administrator: KILLED notice, frames withdrawn,
 * channel closed. Returns how many frames were withdrawn. */
uint32_t session_kill(struct daemon *d, struct session *s);
/* Killed sessions watched without a pidfd: release those whose process is
 * gone. Called from the poll loop. */
void withdrawn_poll(struct daemon *d);
/* A killed session's process exited: its frames go back to the pool. */
void withdrawn_release(struct daemon *d, struct withdrawn *w);
struct session *session_by_id(struct daemon *d, uint64_t id);
/* Bytes granted to every session of a uid. */
uint64_t uid_bytes(const struct daemon *d, uid_t uid);
struct session *session_by_ident(struct daemon *d, const void *ident, size_t len);
struct session *session_by_token(struct daemon *d, const uint8_t *token);
/* The tenant named `name`, created with its config policy (else unlimited,
 * min 0) on first use; NULL when out of memory. */
struct tenant *tenant_get(struct daemon *d, const char *name);
/* Put bound session s under tenant `name` (tenant_get) and index it there;
 * NULL when out of memory. The session leaves its tenant when it ends. */
struct tenant *tenant_attach(struct daemon *d, struct session *s, const char *name);
/* Free t when nothing keeps it (see struct tenant); true when freed. */
bool tenant_release(struct daemon *d, struct tenant *t);
struct tenant *tenant_by_id(struct daemon *d, uint32_t id);
struct tenant *tenant_find(struct daemon *d, const char *name);
bool tenant_name_ok(const char *s);

/* reclaim.c: deferred grants and elastic reclaim. */
/* Whether `bytes` of frames fit for session s now: budget less granted less other
 * tenants' and uids' unmet min. *short_bytes gets what is missing. */
bool grant_fits(const struct daemon *d, const struct session *s, uint64_t bytes, uint64_t *short_bytes);
/* What s may still be granted without a reclaim: the budget's room less
 * other tenants' and uids' unmet min, or its tenant's or uid's quota room
 * when smaller (GrantReply.room). */
uint64_t grant_room(const struct daemon *d, const struct session *s);
/* Defer a grant that does not fit when other sessions report enough cached
 * bytes: queue it and send RECLAIM notices. 0 when deferred, else an
 * mb_status (the caller answers MB_ENOMEM). */
int pending_add(struct daemon *d, struct session *s, const uint8_t *ident, size_t ident_len,
                uint64_t req_id, uint64_t bytes, struct grant_shape shape, uint64_t t0_ns,
                uint64_t short_bytes);
/* Answer pending grants that now fit (FIFO), whose deadline passed, or
 * that no session asked can still help. */
void pending_run(struct daemon *d);
/* s answered a RECLAIM notice (Cache.answers_notice, after its Return):
 * it is no longer waited for, and waiting grants are looked at again. */
void reclaim_answered(struct daemon *d, struct session *s);
/* Drop a session's pending grant without answering (it ended). */
void pending_drop_session(struct daemon *d, uint64_t session);
/* Answer every pending grant with an error (drain, shutdown). */
void pending_fail_all(struct daemon *d, int code, const char *why);
/* The earliest pending deadline, or INT64_MAX. */
int64_t pending_next_deadline(const struct daemon *d);
/* Ask sessions (of tenant t, or all when NULL; never `except`) for cached
 * frames: RECLAIM notices in the documented order until `bytes` are asked
 * for (0: every session holding frames, all its cache). Returns notices sent. */
uint32_t reclaim_ask(struct daemon *d, const struct tenant *t, const struct session *except,
                     uint64_t bytes, uint64_t *cached_out);

/* Quotas: the tenant's max, then the uid's, for `want` more bytes; false
 * with an MB_EQUOTA error in rep when either would be exceeded. */
bool within_quota(struct daemon *d, struct session *s, uint64_t want, Mb__Reply *rep);

/* handlers.c: one handler per command in commands.def. */
struct request_ctx {
    struct daemon *d;
    struct session *s;           /* bound session of the sender, or NULL */
    const uint8_t *ident;
    size_t ident_len;
    uint64_t t0_ns;              /* arrival */
    bool deferred;               /* set by a handler: no reply now (pending) */
};
void handle_request(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep);
/* Grant frames covering `bytes` to s (planned as `shape` says; max_order
 * 0: order-0 frames) and pass their descriptors: fills rep (reply body or
 * error). With warm_max, free frames of any orders (at most warm_max of
 * them, holding no more than the plan) when they cover it. Used by grant
 * and by pending grants. */
void grant_now(struct daemon *d, struct session *s, uint64_t bytes, struct grant_shape shape,
               uint32_t warm_max, uint32_t warm_full_max, uint64_t t0_ns, Mb__Reply *rep);
/* The bytes a grant of `bytes` charges: the plan's. */
uint64_t grant_bytes(const struct daemon *d, uint64_t bytes, struct grant_shape shape);
/* How a Grant's frames are planned (Grant.large, max_order, exact). */
struct grant_shape grant_shape_of(const Mb__Grant *g);
/* Count a finished request in the per-command stats and counters. */
void stats_record(struct daemon *d, int cmd, int code, uint64_t t0_ns);

/* shares.c: share tokens and the frames importers hold. */
struct share;
struct hold {
    uint64_t session;
    uint32_t id;
};
int send_frame_fds(struct daemon *d, struct session *s, const uint32_t *ids, uint32_t n);
void h_share(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep);
void h_import(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep);
bool shares_holds(struct daemon *d, const struct session *s, uint32_t id);
/* After a restart: session s reports frame id held through an import. */
int shares_reattach_hold(struct daemon *d, struct session *s, uint32_t id, uint64_t bytes);
int shares_return(struct daemon *d, struct session *s, const uint32_t *ids, size_t n);
/* The exporter returned frames: tokens covering any of them die. */
void shares_revoke(struct daemon *d, const struct session *s, const uint32_t *ids, size_t n);
/* A session's unredeemed tokens die (it ended or was killed). */
void shares_revoke_all(struct daemon *d, uint64_t session);
/* A session's process is gone: the frames it imported are let go (and
 * uncharged from it, or from its withdrawn record). */
void shares_drop_holds(struct daemon *d, uint64_t session);
/* The hold index agrees with holds[] (every hold found at its index, one
 * slot per hold, fewer than half the slots used). */
bool shares_is_valid(const struct daemon *d);
/* The owner of frame id gains (or loses) an importer: its lent bytes
 * follow the frame's holders going from 0 to 1 (or 1 to 0). */
void shares_lend(struct daemon *d, uint32_t id, bool more);
/* Whether a session holds any frame through an import. */
bool shares_session_holds(const struct daemon *d, uint64_t session);
void shares_destroy(struct daemon *d);

#endif
