/* sessions.c: the session table (one per client process, opened on the
 * handle channel, bound to a ZeroMQ identity by hello, ended by the
 * channel's end of file or by an administrator's kill), the frames of killed
 * sessions kept until their process exits, and the tenants sessions run
 * under with their live policy. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <moonbright/status.h>

#include "daemon.h"
#include "faults.h"
#include "log.h"

struct session *session_open(struct daemon *d, int chan)
{
    struct session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (mb_chan_peer(chan, &s->pid, &s->uid, &s->gid) != 0 ||
        getrandom(s->token, sizeof(s->token), 0) != (ssize_t)sizeof(s->token)) {
        mb_log(MB_LOG_WARN, "failed to open a session: no peer credentials or no randomness");
        free(s);
        return NULL;
    }
    s->id = ++d->next_session_id;
    s->chan = chan;
    s->opened_ms = mb_now_ms();
    struct mb_chan_msg m = { .type = MB_CHAN_WELCOME, .session_id = s->id };
    memcpy(m.token, s->token, sizeof(m.token));
    if (mb_chan_send(chan, &m, NULL) != 0) {
        mb_log(MB_LOG_WARN, "failed to welcome pid %d on the handle channel", (int)s->pid);
        free(s);
        return NULL;
    }
    s->next = d->sessions;
    d->sessions = s;
    d->n_sessions++;
    d->count.sessions_opened++;
    mb_log(MB_LOG_DEBUG, "session %llu opened: pid %d uid %d", (unsigned long long)s->id,
           (int)s->pid, (int)s->uid);
    return s;
}

static void session_unlink(struct daemon *d, struct session *s)
{
    for (struct session **pp = &d->sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    if (s->waiting)
        pending_drop_session(d, s->id);
    struct tenant *t = s->tenant;
    if (t && s->bound) {
        if (s->t_prev)
            s->t_prev->t_next = s->t_next;
        else
            t->sessions = s->t_next;
        if (s->t_next)
            s->t_next->t_prev = s->t_prev;
        t->n_sessions--;
        tenant_release(d, t);
    }
    close(s->chan);
    d->n_sessions--;
    d->count.sessions_closed++;
    free(s);
}

/* End a session: every frame it held goes back to the pool. */
void session_close(struct daemon *d, struct session *s)
{
    shares_revoke_all(d, s->id);
    shares_drop_holds(d, s->id);
    uint64_t bytes;
    uint32_t n = frame_pool_reclaim(&d->pool, s->id, &bytes);
    if (s->tenant)
        s->tenant->bytes -= s->bytes;
    if (n != s->frames || bytes != s->bytes)
        mb_log(MB_LOG_ERR, "session %llu: books disagree (%u frames reclaimed, %u recorded)",
               (unsigned long long)s->id, n, s->frames);
    mb_log(n ? MB_LOG_INFO : MB_LOG_DEBUG, "session %llu (pid %d, tenant %s) ended; %u frames reclaimed",
           (unsigned long long)s->id, (int)s->pid, s->tenant ? s->tenant->name : "-", n);
    session_unlink(d, s);
}

/* A killed session's process may still map its frames: they stay granted
 * to the dead session id (never granted again) until the process exits,
 * which its pidfd reports; then they return to the pool (and are scrubbed
 * before another tenant gets them). */
static int pidfd_open_pid(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* When a process started (field 22 of /proc/PID/stat, clock ticks since
 * boot), so a reused pid is not taken for it; 0 when unknown. *zombie
 * (when not NULL) tells whether it has exited and waits to be reaped. */
static unsigned long long start_time(pid_t pid, bool *zombie)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');   /* the command name may hold spaces */
    unsigned long long t = 0;
    char state = 0;
    if (p && sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                           "%*d %*d %llu", &state, &t) != 2)
        t = 0;
    if (zombie)
        *zombie = state == 'Z' || state == 'X';
    return t;
}

/* Whether a killed session's process (watched without a pidfd) is gone. */
static bool process_gone(const struct withdrawn *w)
{
    if (kill(w->pid, 0) != 0 && errno == ESRCH)
        return true;
    bool zombie = false;
    unsigned long long t = start_time(w->pid, &zombie);
    return zombie || (w->start_time && t && t != w->start_time);
}

void withdrawn_poll(struct daemon *d)
{
    for (struct withdrawn *w = d->withdrawn, *next; w; w = next) {
        next = w->next;
        if (w->pidfd < 0 && process_gone(w))
            withdrawn_release(d, w);
    }
}

uint32_t session_kill(struct daemon *d, struct session *s)
{
    if (s->bound)
        daemon_notice(d, s, MB__NOTICE__KIND__KILLED, 0, 0, "ended by an administrator");
    shares_revoke_all(d, s->id);
    uint32_t n = s->frames;
    /* frames it imported stay held while it may map them */
    bool holds = shares_session_holds(d, s->id);
    struct withdrawn *w = n || holds ? calloc(1, sizeof(*w)) : NULL;
    if (w) {
        w->session = s->id;
        w->frames = n;
        w->bytes = s->bytes;
        w->import_bytes = s->import_bytes;
        w->tenant = s->tenant;
        w->uid = s->uid;
        w->pid = s->pid;
        w->start_time = start_time(s->pid, NULL);
        if (mb_fault(MB_FAULT_PIDFD)) {
            w->pidfd = -1;
            errno = ENOSYS;
        } else {
            w->pidfd = pidfd_open_pid(s->pid);
        }
        if (w->pidfd < 0 && (errno == ESRCH || (kill(s->pid, 0) != 0 && errno == ESRCH))) {
            free(w);   /* the process is gone already: nothing maps the frames */
            w = NULL;
        } else if (w->pidfd < 0) {
            /* Not watchable by pidfd: the frames stay withdrawn, and the
             * poll loop checks the pid until the process is gone. */
            mb_log(MB_LOG_WARN, "failed to open a pidfd for pid %d: %s; its frames stay "
                   "withdrawn until the loop sees it gone", (int)s->pid, strerror(errno));
        }
        if (w && w->tenant)
            w->tenant->n_withdrawn++;
    }
    if ((n || holds) && !w) {
        /* The process is gone already (or there is no memory for the
         * record): frames go back now. */
        session_close(d, s);
        d->count.sessions_killed++;
        return n;
    }
    mb_log(MB_LOG_INFO, "session %llu (pid %d, tenant %s) killed; %u frames withdrawn until it exits",
           (unsigned long long)s->id, (int)s->pid, s->tenant ? s->tenant->name : "-", n);
    if (w) {
        w->next = d->withdrawn;
        d->withdrawn = w;
        d->n_withdrawn++;
    }
    d->count.sessions_killed++;
    session_unlink(d, s);
    return n;
}

void withdrawn_release(struct daemon *d, struct withdrawn *w)
{
    shares_drop_holds(d, w->session);
    uint64_t bytes;
    uint32_t n = frame_pool_reclaim(&d->pool, w->session, &bytes);
    if (w->tenant)
        w->tenant->bytes -= w->bytes;
    if (n != w->frames || bytes != w->bytes)
        mb_log(MB_LOG_ERR, "killed session %llu: books disagree (%u frames reclaimed, %u recorded)",
               (unsigned long long)w->session, n, w->frames);
    mb_log(MB_LOG_INFO, "killed session %llu's process exited; %u frames back in the pool",
           (unsigned long long)w->session, n);
    for (struct withdrawn **pp = &d->withdrawn; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    if (w->pidfd >= 0)
        close(w->pidfd);
    d->n_withdrawn--;
    if (w->tenant) {
        w->tenant->n_withdrawn--;
        tenant_release(d, w->tenant);
    }
    free(w);
}

struct session *session_by_ident(struct daemon *d, const void *ident, size_t len)
{
    for (struct session *s = d->sessions; s; s = s->next)
        if (s->bound && s->ident_len == len && memcmp(s->ident, ident, len) == 0)
            return s;
    return NULL;
}

struct session *session_by_id(struct daemon *d, uint64_t id)
{
    for (struct session *s = d->sessions; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

/* Constant-time comparison: the token is a secret. */
struct session *session_by_token(struct daemon *d, const uint8_t *token)
{
    for (struct session *s = d->sessions; s; s = s->next) {
        uint8_t diff = 0;
        for (size_t i = 0; i < MB_TOKEN_BYTES; i++)
            diff |= (uint8_t)(s->token[i] ^ token[i]);
        if (diff == 0)
            return s;
    }
    return NULL;
}

uint64_t uid_bytes(const struct daemon *d, uid_t uid)
{
    uint64_t n = 0;
    for (const struct session *s = d->sessions; s; s = s->next)
        if (s->uid == uid)
            n += s->bytes + s->import_bytes;
    return n;
}

bool tenant_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(((struct tenant *)0)->name))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-:@+", s[i]))
            return false;
    return true;
}

struct tenant *tenant_find(struct daemon *d, const char *name)
{
    for (struct tenant *t = d->tenants; t; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

struct tenant *tenant_get(struct daemon *d, const char *name)
{
    struct tenant *t = tenant_find(d, name);
    if (t)
        return t;
    if (!(t = calloc(1, sizeof(*t))))
        return NULL;
    t->id = ++d->next_tenant_id;
    snprintf(t->name, sizeof(t->name), "%s", name);
    const struct mb_config_policy *pol = mb_config_tenant(&d->cfg, name);
    t->max = pol ? pol->max : MB_CONFIG_UNLIMITED;
    t->min = pol ? pol->min : 0;
    /* Appended: tenants list in the order they appeared. */
    t->prev = d->tenants_tail;
    if (d->tenants_tail)
        d->tenants_tail->next = t;
    else
        d->tenants = t;
    d->tenants_tail = t;
    d->n_tenants++;
    return t;
}

struct tenant *tenant_attach(struct daemon *d, struct session *s, const char *name)
{
    struct tenant *t = tenant_get(d, name);
    if (!t)
        return NULL;
    s->t_prev = NULL;
    s->t_next = t->sessions;
    if (t->sessions)
        t->sessions->t_prev = s;
    t->sessions = s;
    t->n_sessions++;
    return t;
}

bool tenant_release(struct daemon *d, struct tenant *t)
{
    if (t->n_sessions || t->n_withdrawn || t->bytes || t->max != MB_CONFIG_UNLIMITED || t->min ||
        mb_config_tenant(&d->cfg, t->name))
        return false;
    if (t->prev)
        t->prev->next = t->next;
    else
        d->tenants = t->next;
    if (t->next)
        t->next->prev = t->prev;
    else
        d->tenants_tail = t->prev;
    d->n_tenants--;
    free(t);
    return true;
}

struct tenant *tenant_by_id(struct daemon *d, uint32_t id)
{
    for (struct tenant *t = d->tenants; t; t = t->next)
        if (t->id == id)
            return t;
    return NULL;
}
