/* sessions.c: the session table (one per client process, opened on the
 * handle channel, bound to a ZeroMQ identity by hello) and the tenant names
 * sessions run under. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <moonbright/mbclient.h>

#include "daemon.h"
#include "log.h"

struct session *session_open(struct daemon *d, int chan)
{
    struct session *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (mb_chan_peer(chan, &s->pid, &s->uid, &s->gid) != 0 ||
        getrandom(s->token, sizeof(s->token), 0) != (ssize_t)sizeof(s->token)) {
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

/* End a session: every frame it held goes back to the pool. */
void session_close(struct daemon *d, struct session *s)
{
    uint32_t n = frame_pool_reclaim(&d->pool, s->id);
    if (s->tenant)
        s->tenant->bytes -= (uint64_t)s->frames * d->pool.frame_bytes;
    if (n != s->frames)
        mb_log(MB_LOG_ERR, "session %llu: books disagree (%u frames reclaimed, %u recorded)",
               (unsigned long long)s->id, n, s->frames);
    mb_log(n ? MB_LOG_INFO : MB_LOG_DEBUG, "session %llu (pid %d, tenant %s) ended; %u frames reclaimed",
           (unsigned long long)s->id, (int)s->pid, s->tenant ? s->tenant->name : "-", n);
    for (struct session **pp = &d->sessions; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    close(s->chan);
    d->n_sessions--;
    d->count.sessions_closed++;
    free(s);
}

struct session *session_by_ident(struct daemon *d, const void *ident, size_t len)
{
    for (struct session *s = d->sessions; s; s = s->next)
        if (s->bound && s->ident_len == len && memcmp(s->ident, ident, len) == 0)
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

struct tenant *tenant_get(struct daemon *d, const char *name)
{
    for (struct tenant *t = d->tenants; t; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    struct tenant *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->id = ++d->n_tenants;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->next = d->tenants;
    d->tenants = t;
    return t;
}

struct tenant *tenant_by_id(struct daemon *d, uint32_t id)
{
    for (struct tenant *t = d->tenants; t; t = t->next)
        if (t->id == id)
            return t;
    return NULL;
}
