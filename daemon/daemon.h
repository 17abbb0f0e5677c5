/* daemon.h: moonbrightd's internal types, declared once for its files.
 *
 * Glossary
 *   frame    one physical allocation the daemon created and exported; its id
 *            is its index in the frame table (ids start at 1).
 *   session  one client process: opened when it connects to the handle
 *            channel (credentials from SO_PEERCRED), bound to one ZeroMQ
 *            identity by hello, ended when the channel closes.
 *   tenant   the name a session runs under; frames are scrubbed before they
 *            move to a different tenant than the one that last held them.
 *   budget   the most bytes of frames the daemon will create. */
#ifndef MB_DAEMON_H
#define MB_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "config.h"
#include "fdpass.h"
#include "wire.h"

enum frame_state { FRAME_UNUSED = 0, FRAME_FREE, FRAME_GRANTED };

struct frame {
    enum frame_state state;
    struct mb_mem mem;           /* created and exported while state != UNUSED */
    uint64_t owner;              /* session id while GRANTED, else 0 */
    uint32_t last_tenant;        /* tenant that last held it; 0 = never granted */
    uint32_t next_free;          /* free-list link while FREE, 0 ends it */
};

/* The frame books. Invariants (frame_pool_is_valid):
 *   n_free + n_granted == n_total
 *   n_total * frame_bytes == bytes_total <= budget_bytes
 *   the free list holds exactly the FREE frames, each once
 *   bytes_total + (n_ready + creating) * frame_bytes == committed <= budget_bytes
 * The warm reserve: RESERVE_THREADS workers create and export frames ahead of
 * demand (export costs ~0.6 ms on a GPU) into ready[], until free and ready
 * frames hold reserve_bytes; grants adopt them into the books, so a grant
 * from the reserve makes no driver call. Only ready[], n_ready, creating and
 * committed are shared with the workers (under lock). */
#define RESERVE_THREADS 2
struct frame_pool {
    mb_backend *be;
    size_t frame_bytes;
    uint64_t budget_bytes;
    uint64_t bytes_total;
    struct frame *frames;        /* [0] unused; ids 1..cap-1 */
    uint32_t cap;                /* slots allocated in frames[] */
    uint32_t n_total, n_free, n_granted;
    uint32_t free_head;          /* first FREE frame, 0 when none */
    uint32_t next_unused;        /* lowest slot never used or released */
    uint64_t scrubs;             /* frames zeroed between tenants */
    bool scrub;                  /* zero frames that change tenant (default on) */
    /* warm reserve */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t workers[RESERVE_THREADS];
    int n_workers;
    bool stop;
    uint64_t reserve_bytes;
    uint64_t committed;          /* bytes created, being created or ready */
    uint32_t creating;           /* frames the workers are creating now */
    struct mb_mem *ready;        /* created and exported, not yet in the books */
    uint32_t n_ready, ready_cap;
};

int frame_pool_init(struct frame_pool *p, mb_backend *be, size_t frame_bytes, uint64_t budget);
void frame_pool_destroy(struct frame_pool *p);
/* Start the warm reserve: background workers keep `bytes` of frames created
 * and exported ahead of demand. Returns at once. */
int frame_pool_prefill(struct frame_pool *p, uint64_t bytes);
/* Move frames the workers made into the books (free list). */
void frame_pool_adopt(struct frame_pool *p);
/* Grant n frames to a session of a tenant, all or nothing; ids[] gets them.
 * Frames last held by another tenant are scrubbed first. */
int frame_pool_grant(struct frame_pool *p, uint32_t n, uint64_t session, uint32_t tenant,
                     uint32_t *ids);
/* Take back frames granted to `session`; all must be its own, else nothing
 * changes and MB_EPERM (or MB_ENOENT for ids that name no frame) returns. */
int frame_pool_return(struct frame_pool *p, const uint32_t *ids, size_t n, uint64_t session);
/* Take back every frame of a session; returns how many. */
uint32_t frame_pool_reclaim(struct frame_pool *p, uint64_t session);
struct frame *frame_pool_get(struct frame_pool *p, uint32_t id);
bool frame_pool_is_valid(const struct frame_pool *p);

struct tenant {
    uint32_t id;                 /* 1-based, stable for the daemon's life */
    char name[64];
    uint64_t bytes;              /* granted to its sessions now */
    struct tenant *next;
};

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
    int64_t opened_ms;
    struct session *next;
};

struct daemon_counters {
    uint64_t requests;           /* well-formed requests handled */
    uint64_t malformed;          /* dropped or answered with MB_EPROTO */
    uint64_t refused;            /* answered with MB_EPERM */
    uint64_t errors;             /* any other non-zero reply */
    uint64_t sessions_opened, sessions_closed;
};

struct daemon {
    struct mb_config cfg;        /* file, then command line */
    int device;
    const char *runtime_dir;
    mb_backend *be;
    struct frame_pool pool;
    void *zctx, *router;
    int chan_listen;
    int sigfd;
    int lock_fd;
    char ctl_path[256], chan_path[256], lock_path[256];
    struct session *sessions;
    uint32_t n_sessions;
    uint64_t next_session_id;
    struct tenant *tenants;
    uint32_t n_tenants;
    struct daemon_counters count;
    int64_t started_ms;
    bool stopping;
};

/* server.c */
int daemon_serve(struct daemon *d);

/* sessions.c */
struct session *session_open(struct daemon *d, int chan);
void session_close(struct daemon *d, struct session *s);
struct session *session_by_ident(struct daemon *d, const void *ident, size_t len);
struct session *session_by_token(struct daemon *d, const uint8_t *token);
struct tenant *tenant_get(struct daemon *d, const char *name);
struct tenant *tenant_by_id(struct daemon *d, uint32_t id);

/* handlers.c: one handler per command in commands.def. */
struct request_ctx {
    struct daemon *d;
    struct session *s;           /* bound session of the sender, or NULL */
    const uint8_t *ident;
    size_t ident_len;
};
void handle_request(struct request_ctx *rc, const Mb__Request *req, Mb__Reply *rep);

#endif
