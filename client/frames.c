/* frames.c: the frames this process holds from the daemon: taking them
 * (own cache first, then a grant whose handles arrive on the handle channel
 * and are imported once), caching them unmapped by size, and handing them
 * back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "frame_plan.h"
#include "log.h"
#include "wire.h"
#include "protocol.h"

/* Set on a thread whose grants may let go of the frame lock
 * (fcache_grant_unlocks). */
static _Thread_local bool grant_unlocks;
static _Thread_local bool background;   /* fcache_background_thread */

void fcache_background_thread(void) { background = true; }

/* The daemon's line for a grant that let go of the frame lock: a request's
 * thread is counted while it waits; the background thread first lets
 * those waiting in (waiters_first, as at the frame lock). */
static void line_for_grant(mb_client *c)
{
    if (background) {
        waiters_first(&c->rpc_callers);
        rpc_lock(c);
        return;
    }
    __atomic_add_fetch(&c->rpc_callers, 1, __ATOMIC_RELAXED);
    rpc_lock(c);
    __atomic_sub_fetch(&c->rpc_callers, 1, __ATOMIC_RELAXED);
}

#ifdef MB_DEBUG
#define FC_CHECK(fc) do { if (!fcache_is_valid(fc)) abort(); } while (0)
#else
#define FC_CHECK(fc) ((void)0)
#endif

/* Is what the process holds within near_pct percent of its ceiling? */
static bool near_now(const struct frame_cache *fc)
{
    return fc->near_pct && fc->ceiling &&
           (uint64_t)fc->bytes_held * (100 + fc->near_pct) > (uint64_t)fc->ceiling * 100;
}

/* Recompute fc->near after what the process holds or its ceiling
 * changed. fl_lock held. */
static void near_update(struct frame_cache *fc)
{
    bool near = near_now(fc);
    if (near != __atomic_load_n(&fc->near, __ATOMIC_RELAXED))
        mb_log(MB_LOG_DEBUG, "%s: %zu MiB held, %zu MiB more could be granted",
               near ? "near the budget or quota, memory is packed closely" : "room again",
               fc->bytes_held >> 20, fcache_room(fc) >> 20);
    __atomic_store_n(&fc->near, near, __ATOMIC_RELAXED);
}

/* ---- by_id: the held frames, open addressing keyed by frame id ----
 * (ids name a slot of the daemon's table and its generation: sparse, so
 * not an index). Linear probing from id_home; at most half full. */
static uint32_t id_home(const struct frame_cache *fc, uint32_t id)
{
    id ^= id >> 16;
    id *= 0x45d9f3bu;
    id ^= id >> 16;
    return id & (fc->cap - 1);
}

/* The entry that holds frame id, or the empty one where it would go. */
static uint32_t id_probe(const struct frame_cache *fc, uint32_t id)
{
    uint32_t i = id_home(fc, id);
    while (fc->by_id[i] && fc->by_id[i]->id != id)
        i = (i + 1) & (fc->cap - 1);
    return i;
}

static struct cframe *id_find(const struct frame_cache *fc, uint32_t id)
{
    return fc->cap ? fc->by_id[id_probe(fc, id)] : NULL;
}

/* Frame id leaves the table: the entries after it that probed past its
 * place move back into it. */
static void id_remove(struct frame_cache *fc, uint32_t id)
{
    uint32_t mask = fc->cap - 1, i = id_probe(fc, id), j = i;
    if (!fc->by_id[i])
        return;
    fc->by_id[i] = NULL;
    for (;;) {
        j = (j + 1) & mask;
        if (!fc->by_id[j])
            return;
        uint32_t k = id_home(fc, fc->by_id[j]->id);
        if (i <= j ? i < k && k <= j : i < k || k <= j)
            continue;   /* its home lies after the hole: it stays */
        fc->by_id[i] = fc->by_id[j];
        fc->by_id[j] = NULL;
        i = j;
    }
}

/* Room for one more held frame: the table doubles past half full. */
static int id_room(struct frame_cache *fc)
{
    if (2 * (fc->n_held + 1) <= fc->cap)
        return 0;
    uint32_t cap = fc->cap ? 2 * fc->cap : 256;
    struct cframe **old = fc->by_id, **nb = calloc(cap, sizeof(*nb));
    if (!nb)
        return MB_ENOMEM;
    uint32_t old_cap = fc->cap;
    fc->by_id = nb;
    fc->cap = cap;
    for (uint32_t i = 0; i < old_cap; i++)
        if (old[i])
            fc->by_id[id_probe(fc, old[i]->id)] = old[i];
    free(old);
    return 0;
}

static int hold(struct frame_cache *fc, struct cframe *f)
{
    int rc = id_room(fc);
    if (rc != 0)
        return rc;
    uint32_t i = id_probe(fc, f->id);
    if (fc->by_id[i])
        return MB_EPROTO;   /* the daemon granted a frame we already hold */
    fc->by_id[i] = f;
    fc->n_held++;
    fc->bytes_held += f->mem.bytes;
    near_update(fc);
    return 0;
}

/* Tell the daemon these frames are gone from this process: waiting for
 * each answer (wait), or not (frames of calls that gave up). */
static int send_return(mb_client *c, const uint32_t *ids, size_t n, bool wait)
{
    int rc = 0;
    for (size_t off = 0; off < n; off += MB_RETURN_MAX_IDS) {
        Mb__Request req = MB__REQUEST__INIT;
        Mb__Return r = MB__RETURN__INIT;
        r.ids = (uint32_t *)ids + off;
        r.n_ids = n - off < MB_RETURN_MAX_IDS ? n - off : MB_RETURN_MAX_IDS;
        req.body_case = MB__REQUEST__BODY_RET;
        req.ret = &r;
        Mb__Reply *rep;
        int e = wait ? rpc_call(c, &req, &rep) : rpc_post(c, &req);
        if (e == 0 && wait)
            mb__reply__free_unpacked(rep, NULL);
        else if (e != 0)
            rc = e;
    }
    return rc;
}

static int return_ids(mb_client *c, uint32_t *ids, size_t n) { return send_return(c, ids, n, true); }

/* What this process could hand back: cached frames, plus the idle bytes
 * its upper layers reported (tiers, page pools, growable tails: what a
 * trim would release; an upper bound, since a partly used arena stays). */
static void report(mb_client *c, uint64_t tier_idle, const mb_client_stats *st, bool answer)
{
    uint64_t now = c->fc.bytes_cached + tier_idle;
    uint64_t v[MB_CLIENT_COUNTERS] = { 0 };
    if (st) {
        const uint64_t k[MB_CLIENT_COUNTERS] = {
            st->bytes_idle, st->heap_hits,    st->heap_grants, st->stitches,  st->unmaps,
            st->vspace_refill_waits, st->grow_waits, st->heap_extends, st->heap_fills,
            st->grow_queued,
        };
        memcpy(v, k, sizeof(v));
    }
    bool counters = st && memcmp(v, c->counters_reported, sizeof(v)) != 0;
    rpc_lock(c);
    bool broken = c->broken;
    rpc_unlock(c);
    if ((now == c->cache_reported && !counters && !answer) || broken)
        return;
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Cache m = MB__CACHE__INIT;
    Mb__ClientCounters cc = MB__CLIENT_COUNTERS__INIT;
    m.bytes = now;
    if (counters) {
        cc.bytes_idle = v[0];
        cc.heap_hits = v[1];
        cc.heap_grants = v[2];
        cc.stitches = v[3];
        cc.unmaps = v[4];
        cc.refill_waits = v[5];
        cc.grow_waits = v[6];
        cc.heap_extends = v[7];
        cc.heap_fills = v[8];
        cc.grow_queued = v[9];
        m.counters = &cc;
    }
    m.answers_notice = answer;
    req.body_case = MB__REQUEST__BODY_CACHE;
    req.cache = &m;
    if (rpc_post(c, &req) == 0) {
        c->cache_reported = now;
        if (counters)
            memcpy(c->counters_reported, v, sizeof(v));
    }
}

void fcache_report(mb_client *c, uint64_t tier_idle) { report(c, tier_idle, NULL, false); }

void fcache_report_counters(mb_client *c, uint64_t tier_idle, const mb_client_stats *st)
{
    report(c, tier_idle, st, false);
}

void fcache_answer_notice(mb_client *c, uint64_t tier_idle) { report(c, tier_idle, NULL, true); }

/* A channel message that belongs to no call in progress: its frames were
 * granted to a call that gave up before the answer came. */
static void drop_stray(mb_client *c, const struct mb_chan_msg *m, const int *fds)
{
    for (uint32_t i = 0; i < m->count; i++)
        close(fds[i]);
    if (m->type == MB_CHAN_FRAMES && m->count) {
        mb_log(MB_LOG_WARN, "handing back %u frames granted to a call that gave up", m->count);
        send_return(c, m->ids, m->count, false);
    }
}

void fcache_drop_strays(mb_client *c)
{
    struct mb_chan_msg m;
    int fds[MB_CHAN_MAX_FDS];
    rpc_lock(c);
    while (c->chan >= 0 && !c->lost && mb_chan_recv(c->chan, &m, fds, 0) == 0)
        drop_stray(c, &m, fds);
    rpc_unlock(c);
}

/* After a reply whose frames this process will not keep: their handles
 * still on the handle channel are closed, and any other call's handed
 * back as strays (c->rpclock held). The daemon sends a reply's handles
 * before the reply, so none of its frames' come later. */
static void drain_handles(mb_client *c, const Mb__Frame *const *fr, size_t n)
{
    struct mb_chan_msg m;
    int fds[MB_CHAN_MAX_FDS];
    while (mb_chan_recv(c->chan, &m, fds, 0) == 0) {
        bool ours = false;
        for (size_t i = 0; m.count && i < n && !ours; i++)
            ours = fr[i]->id == m.ids[0];
        if (!ours) {
            drop_stray(c, &m, fds);
            continue;
        }
        for (uint32_t i = 0; i < m.count; i++)
            close(fds[i]);
    }
}

/* The n frames a reply named go back to the daemon, none of their handles
 * kept (drain_handles, or received and closed or released). */
static void return_reply_frames(mb_client *c, const Mb__Frame *const *fr, size_t n, int rc)
{
    mb_log(MB_LOG_WARN, "failed to import frames: %s", mb_strerror(rc));
    uint32_t *ids = malloc((n ? n : 1) * sizeof(*ids));
    for (size_t i = 0; ids && i < n; i++)
        ids[i] = fr[i]->id;
    if (ids && n)
        return_ids(c, ids, n);
    free(ids);
}

/* The reply to a grant or an import names n frames whose handles were
 * sent on the handle channel before it: receive them, fds[i] for fr[i]
 * (c->rpclock held since the call). Messages of earlier calls that gave up
 * are handed back. On failure what arrived is closed. */
static int recv_handles(mb_client *c, const Mb__Frame *const *fr, size_t n, int *fds)
{
    int rc = 0;
    size_t got = 0;
    for (size_t i = 0; i < n; i++)
        if (mb_frame_order(fr[i]->bytes, c->frame_bytes) < 0 || !fr[i]->fd_follows)
            rc = MB_EPROTO;
    while (rc == 0 && got < n) {
        struct mb_chan_msg m;
        int mfds[MB_CHAN_MAX_FDS];
        rc = mb_chan_recv(c->chan, &m, mfds, c->timeout_ms);
        if (rc != 0)
            break;
        if (m.type == MB_CHAN_FRAMES && m.count && m.ids[0] != fr[got]->id) {
            drop_stray(c, &m, mfds);   /* an earlier call's, which gave up */
            continue;
        }
        if (m.type != MB_CHAN_FRAMES || got + m.count > n)
            rc = MB_EPROTO;
        for (uint32_t i = 0; i < m.count; i++) {
            if (rc == 0 && m.ids[i] == fr[got]->id)
                fds[got++] = mfds[i];
            else {
                close(mfds[i]);
                rc = MB_EPROTO;
            }
        }
    }
    if (rc != 0)
        while (got > 0)
            close(fds[--got]);
    return rc;
}

/* Import each received handle once (no lock: the backends are
 * thread-safe), into new frames in use: out[i] for fr[i]. Every fd is
 * consumed. On failure nothing stays imported. */
static int import_handles(mb_client *c, const Mb__Frame *const *fr, size_t n, int *fds,
                          struct cframe **out)
{
    int rc = 0;
    size_t got = 0;
    /* The driver serialises imports with maps (stitch.c): a request's
     * imports hold off background slices, and a background thread's
     * imports let a request's calls go first, one handle at a time. */
    stitch_path_enter();
    for (size_t i = 0; i < n; i++) {
        if (i)
            stitch_path_first();
        struct cframe *f = rc == 0 ? calloc(1, sizeof(*f)) : NULL;
        if (!f) {
            close(fds[i]);
            rc = rc ? rc : MB_ENOMEM;
            continue;
        }
        f->id = fr[i]->id;
        f->in_use = true;
        int e = c->be->ops->import_fd(c->be, fds[i], fr[i]->bytes, &f->mem);   /* takes fds[i] */
        if (e != 0) {
            free(f);
            rc = e;
            continue;
        }
        out[got++] = f;
    }
    stitch_path_leave();
    if (rc != 0)
        while (got > 0) {
            struct cframe *f = out[--got];
            c->be->ops->release(c->be, &f->mem);
            free(f);
        }
    return rc;
}

/* Imported frames into the cache's books, in use (c->flock held). On
 * failure none is: they are released. */
static int hold_all(mb_client *c, struct cframe **out, size_t n)
{
    size_t held = 0;
    int rc = 0;
    for (; held < n && (rc = hold(&c->fc, out[held])) == 0; held++) {
        c->fc.n_in_use++;
        c->fst.frames_imported++;
    }
    if (rc != 0) {
        for (size_t i = 0; i < held; i++)
            fcache_forget(c, out[i]);
        for (size_t i = held; i < n; i++) {
            c->be->ops->release(c->be, &out[i]->mem);
            free(out[i]);
        }
    }
    return rc;
}

/* recv_handles, import_handles and hold_all in one, c->flock and
 * c->rpclock held. On failure everything received is dropped and the
 * frames are handed back. */
static int receive_frames(mb_client *c, const Mb__Frame *const *fr, size_t n, struct cframe **out)
{
    int *fds = malloc((n ? n : 1) * sizeof(*fds));
    int rc = fds ? recv_handles(c, fr, n, fds) : MB_ENOMEM;
    if (rc == 0)
        rc = import_handles(c, fr, n, fds, out);
    if (rc == 0)
        rc = hold_all(c, out, n);
    free(fds);
    if (rc != 0) {
        drain_handles(c, fr, n);
        return_reply_frames(c, fr, n, rc);
    }
    return rc;
}

void fcache_refusal(mb_client *c, int rc, char *buf, size_t n)
{
    rpc_lock(c);
    bool said = refused_for_room(rc) && c->refusal[0];
    snprintf(buf, n, "%s", said ? c->refusal : mb_strerror(rc));
    rpc_unlock(c);
}

bool fcache_grant_unlocks(bool on)
{
    bool was = grant_unlocks;
    grant_unlocks = on;
    return was;
}

void fcache_forget(mb_client *c, struct cframe *f)
{
    id_remove(&c->fc, f->id);
    c->fc.n_held--;
    c->fc.n_in_use--;
    c->fc.bytes_held -= f->mem.bytes;
    near_update(&c->fc);
    c->be->ops->release(c->be, &f->mem);
    free(f);
}

/* Did a warm grant of `bytes` (the bytes of a plan's frames) get frames
 * of orders up to max_order holding exactly that, at most max_n of them? */
static bool warm_reply_ok(const mb_client *c, const Mb__GrantReply *g, uint64_t bytes, unsigned max_order,
                          size_t max_n)
{
    uint64_t sum = 0;
    if (g->n_frames == 0 || g->n_frames > max_n)
        return false;
    for (size_t i = 0; i < g->n_frames; i++) {
        int k = mb_frame_order(g->frames[i]->bytes, c->frame_bytes);
        if (k < 0 || (unsigned)k > max_order)
            return false;
        sum += g->frames[i]->bytes;
    }
    return sum == bytes;
}

/* Frames cached past keep_bytes are of no use to a fill that asks for a
 * grant (fills take cached frames first): before asking for `bytes` more,
 * hand back at least that much of them, the longest cached first (at most
 * SWAP_MAX), so that what the process holds does not grow while its cache
 * keeps frames that fit nothing it allocates. The daemon may grant them to
 * anyone and releases them to the driver when nobody takes them. Posted:
 * the daemon handles the return before the grant that follows it. */
#define SWAP_MAX 16
static uint32_t drop_cached(mb_client *c, struct cframe **pp);
static void lower_reported(mb_client *c, size_t gone);

static void swap_out(mb_client *c, uint64_t bytes)
{
    struct frame_cache *fc = &c->fc;
    uint32_t ids[SWAP_MAX];
    size_t k = 0, gone = 0;
    while (k < SWAP_MAX && gone < bytes && fc->bytes_cached > fc->keep_bytes) {
        struct cframe **oldest = NULL;
        struct cframe **lists[2] = { &fc->cached_large, &fc->cached };
        for (int l = 0; l < 2; l++)
            for (struct cframe **pp = lists[l]; *pp; pp = &(*pp)->next_cached)
                if (!oldest || (*pp)->cached_ms < (*oldest)->cached_ms)
                    oldest = pp;
        if (!oldest)
            break;   /* bytes_cached says more is cached than the lists hold */
        gone += (*oldest)->mem.bytes;
        ids[k++] = drop_cached(c, oldest);
    }
    if (!k)
        return;
    send_return(c, ids, k, false);
    lower_reported(c, gone);
    FC_CHECK(fc);
}

static size_t warm_most(size_t n, uint32_t warm_max, uint32_t warm_full_max)
{
    size_t m = warm_max > warm_full_max ? warm_max : warm_full_max;
    return n > m ? n : m;
}

/* Ask the daemon for `n` frames (of `want` orders when large, by the plan
 * or, exact, the exact plan; else order 0) covering `bytes`, after
 * swap_out; import their handles; they arrive in use. With
 * warm_max (large only), the daemon may grant up to warm_max free frames
 * of other orders holding the same bytes instead (no frame made on its
 * path), and up to warm_full_max where making the planned ones would
 * first release free frames: out has room for max(n, warm_max,
 * warm_full_max), *got says how many came. */
static int grant(mb_client *c, uint64_t bytes, bool large, unsigned max_order, bool exact, size_t n,
                 const uint8_t *want, uint32_t warm_max, uint32_t warm_full_max, struct cframe **out,
                 size_t *got)
{
    swap_out(c, bytes);
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Grant g = MB__GRANT__INIT;
    g.bytes = bytes;
    /* A plan capped at order 0 is whole units: a plain grant (max_order 0
     * on the wire means no cap). */
    g.large = large && max_order > 0;
    g.max_order = g.large && max_order < MB_MAX_ORDER ? max_order : 0;
    g.warm_max_frames = g.large ? warm_max : 0;
    g.warm_full_max_frames = g.large && warm_max && warm_full_max > warm_max ? warm_full_max : 0;
    g.exact = g.large && exact;
    req.body_case = MB__REQUEST__BODY_GRANT;
    req.grant = &g;
    /* Unlocked (fcache_grant_unlocks): the frame lock is let go for the
     * round trip, the handles and their import; a daemon found lost is
     * reconnected to with it held. */
    bool unlocked = grant_unlocks;
    Mb__Reply *rep = NULL;
    int rc;
    if (unlocked) {
        fl_unlock(c);
        line_for_grant(c);
        rc = rpc_call_connected(c, &req, &rep);
        if (rc == MB_EUNAVAIL && c->lost && !c->broken) {
            rpc_unlock(c);
            fl_lock(c);
            unlocked = false;
            rpc_lock(c);
            rc = rpc_call(c, &req, &rep);
        }
    } else {
        rpc_lock(c);
        rc = rpc_call(c, &req, &rep);
    }
    int call_rc = rc;
    bool warm = rc == 0 && g.warm_max_frames && rep->body_case == MB__REPLY__BODY_GRANT &&
                warm_reply_ok(c, rep->grant, bytes, max_order, warm_most(n, g.warm_max_frames,
                                                                        g.warm_full_max_frames));
    if (warm)
        n = rep->grant->n_frames;
    else if (rc == 0 && (rep->body_case != MB__REPLY__BODY_GRANT || rep->grant->n_frames != n))
        rc = MB_EPROTO;
    for (size_t i = 0; rc == 0 && !warm && i < n; i++)
        if (rep->grant->frames[i]->bytes != (uint64_t)c->frame_bytes << (want ? want[i] : 0))
            rc = MB_EPROTO;   /* not the frames asked for */
    const Mb__Frame *const *fr = rc == 0 ? (const Mb__Frame *const *)rep->grant->frames : NULL;
    int *fds = rc == 0 ? malloc((n ? n : 1) * sizeof(*fds)) : NULL;
    if (rc == 0)
        rc = fds ? recv_handles(c, fr, n, fds) : MB_ENOMEM;
    if (rc != 0 && rep && rep->body_case == MB__REPLY__BODY_GRANT)
        drain_handles(c, (const Mb__Frame *const *)rep->grant->frames, rep->grant->n_frames);
    if (unlocked)
        c->grants_in_flight++;   /* frames outside the books: no reconnect reports the books */
    rpc_unlock(c);
    uint64_t t0 = mb_now_ns();
    if (rc == 0)
        rc = import_handles(c, fr, n, fds, out);
    uint64_t t1 = mb_now_ns();
    free(fds);
    if (unlocked)
        fl_lock(c);
    c->fst.import_ns += t1 - t0;
    if (refused_for_room(call_rc)) {   /* no room left */
        c->fc.ceiling = c->fc.bytes_held;
        near_update(&c->fc);
    }
    if (rc == 0)
        rc = hold_all(c, out, n);
    if (unlocked) {
        rpc_lock(c);
        c->grants_in_flight--;
        rpc_unlock(c);
    }
    if (rc != 0 && rep && rep->body_case == MB__REPLY__BODY_GRANT)
        /* Granted, but not what was asked for, not received or not
         * imported: hand it back (with the frame lock: a return may have
         * to reconnect). */
        return_reply_frames(c, (const Mb__Frame *const *)rep->grant->frames, rep->grant->n_frames, rc);
    if (rc == 0) {
        c->fc.ceiling = c->fc.bytes_held + rep->grant->room;
        near_update(&c->fc);
        if (got)
            *got = n;
    }
    if (rep)
        mb__reply__free_unpacked(rep, NULL);
    return rc;
}

int fcache_import(mb_client *c, const uint8_t *token, size_t len, struct cframe ***out, size_t *n)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Import im = MB__IMPORT__INIT;
    im.token.data = (uint8_t *)token;
    im.token.len = len;
    req.body_case = MB__REQUEST__BODY_IMPORT;
    req.import = &im;
    Mb__Reply *rep;
    rpc_lock(c);   /* the handles follow the reply on the channel */
    int rc = rpc_call(c, &req, &rep);
    if (rc != 0) {
        rpc_unlock(c);
        return rc;
    }
    size_t k = rep->body_case == MB__REPLY__BODY_IMPORT ? rep->import->n_frames : 0;
    *out = k ? calloc(k, sizeof(**out)) : NULL;
    if (!k)
        rc = MB_EPROTO;
    else if (!*out)
        rc = MB_ENOMEM;
    else
        rc = receive_frames(c, (const Mb__Frame *const *)rep->import->frames, k, *out);
    rpc_unlock(c);
    if (rc != 0 && k && *out) {
        free(*out);
        *out = NULL;
    }
    *n = k;
    mb__reply__free_unpacked(rep, NULL);
    return rc;
}

int fcache_return_ids(mb_client *c, uint32_t *ids, size_t n) { return return_ids(c, ids, n); }

/* The cached frame at *pp, taken off its list and marked in use. */
static struct cframe *unlink_cached(struct frame_cache *fc, struct cframe **pp)
{
    struct cframe *f = *pp;
    *pp = f->next_cached;
    f->next_cached = NULL;
    f->in_use = true;
    fc->n_cached--;
    fc->n_in_use++;
    fc->bytes_cached -= f->mem.bytes;
    fc->last_use_ms = mb_now_ms();
    return f;
}

/* A cached frame of `bytes`, taken; NULL when the cache has none. */
static struct cframe *take_cached(struct frame_cache *fc, size_t bytes, size_t unit)
{
    struct cframe **pp = bytes == unit ? &fc->cached : &fc->cached_large;
    while (*pp && (*pp)->mem.bytes != bytes)
        pp = &(*pp)->next_cached;
    return *pp ? unlink_cached(fc, pp) : NULL;
}

int fcache_take(mb_client *c, size_t n, struct cframe **out)
{
    struct frame_cache *fc = &c->fc;
    size_t i = 0;
    for (; i < n && fc->cached; i++)
        out[i] = take_cached(fc, c->frame_bytes, c->frame_bytes);
    int rc = 0;
    while (rc == 0 && i < n) {
        size_t chunk = n - i < MB_GRANT_MAX_FRAMES ? n - i : MB_GRANT_MAX_FRAMES;
        rc = grant(c, (uint64_t)chunk * c->frame_bytes, false, 0, false, chunk, NULL, 0, 0, out + i, NULL);
        if (rc == 0)
            i += chunk;
    }
    if (rc != 0)
        while (i > 0)
            fcache_put(c, out[--i]);
    fcache_report(c, c->tier_idle);
    FC_CHECK(fc);
    return rc;
}

/* After a large grant failed for memory or quota (and the cache was handed
 * back): the whole plan (n `orders`, exact or not) once more; then, where
 * the plan rounds, the exact plan (bytes in whole units: the plan may round
 * up by 3 %). Order-0 frames only where the exact plan has too many frames
 * for one grant, or the daemon plans none (an older one): they hold the
 * same bytes, so where those were refused they would be too, after the
 * daemon made a first grant's worth of them (256) on its path for
 * nothing. */
static int grant_plan_again(mb_client *c, size_t bytes, unsigned max_order, bool exact,
                            const uint8_t *orders, size_t n, struct cframe ***out, size_t *count)
{
    size_t n0 = bytes / c->frame_bytes + (bytes % c->frame_bytes != 0);
    struct cframe **fr = calloc(n > n0 ? n : n0, sizeof(*fr));
    if (!fr)
        return MB_ENOMEM;
    int rc = grant(c, bytes, true, max_order, exact, n, orders, 0, 0, fr, NULL);
    if (refused_for_room(rc)) {
        uint8_t ex[MB_GRANT_MAX_FRAMES];
        uint64_t planned, exact_bytes;
        mb_frame_plan(bytes, c->frame_bytes, max_order, NULL, 0, &planned);
        size_t ne = mb_frame_plan_exact(bytes, c->frame_bytes, max_order, ex, MB_GRANT_MAX_FRAMES,
                                        &exact_bytes);
        if (ne > MB_GRANT_MAX_FRAMES || !c->exact_plans) {
            n = n0;
            rc = fcache_take(c, n0, fr);
        } else if (!exact && exact_bytes < planned) {
            rc = grant(c, bytes, true, max_order, true, ne, ex, 0, 0, fr, NULL);
            if (rc == 0)
                n = ne;
        }
    }
    if (rc != 0) {
        free(fr);
        return rc;
    }
    *out = fr;
    *count = n;
    return 0;
}

/* Take the cached frame the fill of `left` bytes wants next: the largest
 * no bigger than left, else (with over) the smallest bigger one if it is at
 * most 1/8 larger (it finishes); NULL when none qualifies (the plan does
 * the rest). */
static struct cframe *take_fitting(struct frame_cache *fc, size_t left, bool over)
{
    struct cframe **best = NULL;
    bool best_fits = false;
    struct cframe **lists[2] = { &fc->cached_large, &fc->cached };
    for (int l = 0; l < 2; l++)
        for (struct cframe **pp = lists[l]; *pp; pp = &(*pp)->next_cached) {
            size_t b = (*pp)->mem.bytes;
            bool fits = b <= left;
            if (!best || (fits && (!best_fits || b > (*best)->mem.bytes)) ||
                (!fits && !best_fits && b < (*best)->mem.bytes)) {
                best = pp;
                best_fits = fits;
            }
        }
    if (!best || (!best_fits && (!over || (*best)->mem.bytes - left > left / 8)))
        return NULL;
    return unlink_cached(fc, best);
}

int fcache_take_any(mb_client *c, size_t bytes, unsigned max_order, unsigned warm_full_per, struct cframe ***out,
                    size_t *count)
{
    struct frame_cache *fc = &c->fc;
    size_t n = 0, cap = 16, left = bytes;
    struct cframe **fr = malloc(cap * sizeof(*fr));
    if (!fr)
        return MB_ENOMEM;
    struct cframe *f;
    while (left && (f = take_fitting(fc, left, true)) != NULL) {
        if (n == cap) {
            struct cframe **nf = realloc(fr, (cap *= 2) * sizeof(*fr));
            if (!nf) {
                fcache_put(c, f);
                break;
            }
            fr = nf;
        }
        fr[n++] = f;
        left -= f->mem.bytes < left ? f->mem.bytes : left;
    }
    if (left) {
        /* The rest by the frame plan (cached ones of its orders first). */
        struct cframe **more = NULL;
        size_t m = 0;
        int rc = fcache_take_plan(c, left, max_order, false, warm_full_per, &more, &m);
        struct cframe **nf = rc != 0 ? NULL : m ? realloc(fr, (n + m) * sizeof(*fr)) : fr;
        if (rc == 0 && !nf) {
            for (size_t i = 0; i < m; i++)
                fcache_put(c, more[i]);
            rc = MB_ENOMEM;
        }
        if (rc != 0) {
            free(more);
            while (n)
                fcache_put(c, fr[--n]);
            free(fr);
            return rc;
        }
        fr = nf;
        memcpy(fr + n, more, m * sizeof(*fr));
        n += m;
        free(more);
    }
    *out = fr;
    *count = n;
    FC_CHECK(fc);
    return 0;
}

size_t fcache_take_within(mb_client *c, size_t bytes, struct cframe **out, size_t max_n, size_t *got)
{
    struct frame_cache *fc = &c->fc;
    size_t n = 0, left = bytes;
    struct cframe *f;
    while (n < max_n && left >= c->frame_bytes && fc->n_cached && (f = take_fitting(fc, left, false)) != NULL) {
        out[n++] = f;
        left -= f->mem.bytes;
    }
    *got = bytes - left;
    FC_CHECK(fc);
    return n;
}

size_t fcache_take_cover(mb_client *c, size_t need, size_t room, struct cframe **out, size_t max_n,
                         size_t *got)
{
    struct frame_cache *fc = &c->fc;
    size_t n = 0, have = 0;
    while (n < max_n && have < need && fc->n_cached) {
        /* The smallest frame that covers what is missing within the room,
         * else the largest that fits in it. */
        struct cframe **cover = NULL, **fit = NULL;
        struct cframe **lists[2] = { &fc->cached_large, &fc->cached };
        for (int l = 0; l < 2; l++)
            for (struct cframe **pp = lists[l]; *pp; pp = &(*pp)->next_cached) {
                size_t b = (*pp)->mem.bytes;
                if (b > room - have)
                    continue;
                if (b >= need - have && (!cover || b < (*cover)->mem.bytes))
                    cover = pp;
                if (!fit || b > (*fit)->mem.bytes)
                    fit = pp;
            }
        struct cframe **pp = cover ? cover : fit;
        if (!pp)
            break;
        struct cframe *f = unlink_cached(fc, pp);
        out[n++] = f;
        have += f->mem.bytes;
    }
    *got = have;
    FC_CHECK(fc);
    return n;
}

/* Place frames got[0..g) into the empty slots of out[] whose orders match. */
static void place_frames(mb_client *c, const uint8_t *orders, size_t n, struct cframe **out,
                         struct cframe **got, size_t g)
{
    for (size_t j = 0; j < g; j++)
        for (size_t i = 0; i < n; i++)
            if (!out[i] && got[j]->mem.bytes == (size_t)c->frame_bytes << orders[i]) {
                out[i] = got[j];
                break;
            }
}

int fcache_take_orders(mb_client *c, const uint8_t *orders, size_t n, struct cframe **out)
{
    struct frame_cache *fc = &c->fc;
    size_t missing[MB_ORDERS] = { 0 };
    for (size_t i = 0; i < n; i++) {
        if (orders[i] > MB_MAX_ORDER)
            return MB_EINVAL;
        out[i] = take_cached(fc, (size_t)c->frame_bytes << orders[i], c->frame_bytes);
        missing[orders[i]] += !out[i];
    }
    /* One grant per order missing: the plan of j frames of order k capped
     * at k is those frames (frame_plan.c). */
    int rc = 0;
    struct cframe *got[MB_GRANT_MAX_FRAMES];
    uint8_t want[MB_GRANT_MAX_FRAMES];
    for (unsigned k = 0; k < MB_ORDERS && rc == 0; k++) {
        while (missing[k] && rc == 0) {
            size_t j = missing[k] < MB_GRANT_MAX_FRAMES ? missing[k] : MB_GRANT_MAX_FRAMES, g = 0;
            memset(want, (int)k, j);
            rc = grant(c, (uint64_t)j * ((uint64_t)c->frame_bytes << k), true, k, false, j, want, 0, 0, got,
                       &g);
            if (rc == 0)
                place_frames(c, orders, n, out, got, g);
            missing[k] -= rc == 0 ? j : 0;
        }
    }
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            if (out[i])
                fcache_put(c, out[i]);
    fcache_report(c, c->tier_idle);
    FC_CHECK(fc);
    return rc;
}

int fcache_take_plan(mb_client *c, size_t bytes, unsigned max_order, bool exact, unsigned warm_full_per,
                     struct cframe ***out, size_t *count)
{
    struct frame_cache *fc = &c->fc;
    /* More than the cache and one grant could hold is refused here, as the
     * daemon would, before the plan's arrays (a frame each) are made. */
    unsigned long long most =
        MB_GRANT_MAX_BYTES(c->frame_bytes, max_order < MB_MAX_ORDER ? max_order : MB_MAX_ORDER) +
        fc->bytes_cached;
    if (bytes > most) {
        mb_log(MB_LOG_ERR, "a request of %zu bytes is more than one grant may hold (%llu bytes "
               "at this frame size) plus the %zu bytes this process caches", bytes,
               most - fc->bytes_cached, (size_t)fc->bytes_cached);
        return MB_EINVAL;
    }
    uint64_t covered;
    size_t (*plan)(uint64_t, size_t, unsigned, uint8_t *, size_t, uint64_t *) =
        exact ? mb_frame_plan_exact : mb_frame_plan;
    size_t n = plan(bytes, c->frame_bytes, max_order, NULL, 0, &covered);
    /* A warm grant may take up to c->warm_per_frame free frames for each
     * planned one, or warm_full_per where the daemon would release free
     * frames to make them (see grant): room for them. */
    size_t per = c->warm_per_frame, full = per && warm_full_per > per ? warm_full_per : 0;
    size_t cap = n * (full > per ? full : per > 1 ? per : 1);
    uint8_t *orders = malloc(n ? n : 1), *missing = malloc(n ? n : 1);
    struct cframe **fr = calloc(cap ? cap : 1, sizeof(*fr));
    if (!orders || !missing || !fr) {
        free(orders);
        free(missing);
        free(fr);
        return MB_ENOMEM;
    }
    plan(bytes, c->frame_bytes, max_order, orders, n, &covered);
    /* The planned orders this process caches; the daemon grants the rest
     * (the plan of a subset of a plan's frames is that subset, the exact
     * plan's too). */
    size_t have = 0, n_missing = 0;
    uint64_t missing_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        struct cframe *f = take_cached(fc, (size_t)c->frame_bytes << orders[i], c->frame_bytes);
        if (f) {
            fr[have++] = f;
        } else {
            missing[n_missing++] = orders[i];
            missing_bytes += (uint64_t)c->frame_bytes << orders[i];
        }
    }
    size_t granted = 0;
    uint32_t warm_max = (uint32_t)(n_missing * per < MB_GRANT_MAX_FRAMES ? n_missing * per : MB_GRANT_MAX_FRAMES);
    uint32_t warm_full = (uint32_t)(n_missing * full < MB_GRANT_MAX_FRAMES ? n_missing * full : MB_GRANT_MAX_FRAMES);
    int rc = n_missing ? grant(c, missing_bytes, true, max_order, exact, n_missing, missing, warm_max,
                               warm_full, fr + have, &granted) : 0;
    free(missing);
    if (rc == 0)
        n = have + granted;
    if (rc != 0)
        while (have > 0)
            fcache_put(c, fr[--have]);
    if (refused_for_room(rc)) {
        /* Out of memory or quota in these sizes: hand back what the cache
         * holds and try again, then the exact plan, then order-0 frames
         * (reusing what remains cached). */
        free(fr);
        fr = NULL;
        if (fc->n_cached)
            fcache_trim(c, 0);
        rc = grant_plan_again(c, bytes, max_order, exact, orders, n, &fr, &n);
    }
    free(orders);
    if (rc != 0) {
        free(fr);
        fcache_report(c, c->tier_idle);
        return rc;
    }
    *out = fr;
    *count = n;
    fcache_report(c, c->tier_idle);
    FC_CHECK(fc);
    return 0;
}

void fcache_put(mb_client *c, struct cframe *f)
{
    struct frame_cache *fc = &c->fc;
    struct cframe **list = f->mem.bytes == c->frame_bytes ? &fc->cached : &fc->cached_large;
    f->in_use = false;
    f->next_cached = *list;
    *list = f;
    fc->n_in_use--;
    fc->n_cached++;
    fc->bytes_cached += f->mem.bytes;
    fc->last_use_ms = f->cached_ms = mb_now_ms();
}

/* The cached frame at *pp leaves the process: unlinked, its handle
 * released; its id is for the return to the daemon. */
static uint32_t drop_cached(mb_client *c, struct cframe **pp)
{
    struct frame_cache *fc = &c->fc;
    struct cframe *f = *pp;
    uint32_t id = f->id;
    *pp = f->next_cached;
    id_remove(fc, id);
    fc->n_cached--;
    fc->n_held--;
    fc->bytes_cached -= f->mem.bytes;
    fc->bytes_held -= f->mem.bytes;
    near_update(fc);
    c->be->ops->release(c->be, &f->mem);
    free(f);
    return id;
}

/* A return of `gone` cached bytes lowered the daemon's view of the cache
 * by as much. */
static void lower_reported(mb_client *c, size_t gone)
{
    if (c->cache_reported != (uint64_t)-1)
        c->cache_reported = c->cache_reported > gone ? c->cache_reported - gone : 0;
}

/* Release the cached frames of a list past the first ones that fit in
 * *keep (which shrinks by what stays) and cached before `before` ms;
 * their ids go to ids[*k]. */
static void trim_list(mb_client *c, struct cframe **pp, size_t *keep, int64_t before, uint32_t *ids,
                      size_t *k)
{
    while (*pp) {
        struct cframe *f = *pp;
        if (f->mem.bytes <= *keep || f->cached_ms >= before) {
            *keep -= f->mem.bytes < *keep ? f->mem.bytes : *keep;
            pp = &f->next_cached;
            continue;
        }
        ids[(*k)++] = drop_cached(c, pp);
    }
}

static int trim_before(mb_client *c, size_t keep_bytes, int64_t cached_before);

int fcache_trim(mb_client *c, size_t keep_bytes)
{
    return trim_before(c, keep_bytes, INT64_MAX);
}

int fcache_trim_stale(mb_client *c, size_t keep_bytes, int64_t age_ms)
{
    return trim_before(c, keep_bytes, mb_now_ms() - age_ms);
}

static int trim_before(mb_client *c, size_t keep_bytes, int64_t cached_before)
{
    struct frame_cache *fc = &c->fc;
    if (fc->bytes_cached <= keep_bytes)
        return 0;
    uint32_t *ids = malloc(fc->n_cached * sizeof(*ids));
    if (!ids)
        return MB_ENOMEM;
    /* Keep the most recently used that fit, large frames first (they save
     * the most mapping work); drop the rest. */
    size_t before = fc->bytes_cached, keep = keep_bytes, k = 0;
    trim_list(c, &fc->cached_large, &keep, cached_before, ids, &k);
    trim_list(c, &fc->cached, &keep, cached_before, ids, &k);
    int rc = k ? return_ids(c, ids, k) : 0;
    free(ids);
    lower_reported(c, before - fc->bytes_cached);
    fcache_report(c, c->tier_idle);
    FC_CHECK(fc);
    return rc;
}

/* Drop every handle (in use or cached); the caller unmapped them. */
void fcache_release_all(mb_client *c)
{
    struct frame_cache *fc = &c->fc;
    for (uint32_t i = 0; i < fc->cap; i++) {
        struct cframe *f = fc->by_id[i];
        if (f) {
            c->be->ops->release(c->be, &f->mem);
            free(f);
        }
    }
    free(fc->by_id);
    memset(fc, 0, sizeof(*fc));
}

bool fcache_is_valid(const struct frame_cache *fc)
{
    uint32_t held = 0, cached = 0, in_use = 0;
    size_t held_bytes = 0, cached_bytes = 0;
    for (uint32_t i = 0; i < fc->cap; i++) {
        const struct cframe *f = fc->by_id[i];
        if (!f)
            continue;
        if (id_find(fc, f->id) != f)
            return false;
        held++;
        held_bytes += f->mem.bytes;
        in_use += f->in_use;
    }
    for (const struct cframe *f = fc->cached; f; f = f->next_cached) {
        if (f->in_use || id_find(fc, f->id) != f || ++cached > held)
            return false;
        cached_bytes += f->mem.bytes;
    }
    for (const struct cframe *f = fc->cached_large; f; f = f->next_cached) {
        if (f->in_use || id_find(fc, f->id) != f || ++cached > held)
            return false;
        cached_bytes += f->mem.bytes;
    }
    /* near follows what is held and the ceiling (near_update at every change) */
    return 2 * held <= fc->cap && held == fc->n_held && cached == fc->n_cached && in_use == fc->n_in_use &&
           fc->n_cached + fc->n_in_use == fc->n_held && held_bytes == fc->bytes_held &&
           cached_bytes == fc->bytes_cached && near_now(fc) == __atomic_load_n(&fc->near, __ATOMIC_RELAXED);
}
