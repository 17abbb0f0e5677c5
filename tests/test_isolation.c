/* test_isolation.c: tenants attacking each other through a real moonbrightd,
 * the attacker a raw protocol session in a child process running as uid
 * 65534: descriptors kept after a return, tenant names chosen to dodge the
 * scrub, duplicate ids and token floods in Share, Reattach of frames it never
 * held, quota dodged through its own imports, false cache reports, quotas
 * lowered while a grant waits, kills that cannot watch the process, and the
 * warm reserve following demand and releasing idle frames. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "fdpass.h"
#include "harness.h"
#include "wire.h"

#define FRAME (64u << 10)
#define SECRET "ROOT-SECRET-0123456789"
#define ATTACKER 65534

static double metric(const struct mbt_daemon *d, const char *key)
{
    const char *m[] = { "metrics", NULL };
    struct json *j = mbt_ctl_json(d, NULL, m);
    assert_non_null(j);
    double v = json_num(j, key);
    json_free(j);
    return v;
}

/* ---- raw sessions that keep what they were granted mapped --------------- */

struct mapped {
    uint32_t id;
    size_t bytes;
    uint8_t *map;                /* kept after the frame is returned */
};

struct party {
    struct mbt_session s[2];
    struct mapped m[256];
    size_t n;
};

/* Grant `bytes` on session k, map every frame and keep it; the ids are
 * written to ids (space-separated) when not NULL. Returns the reply code. */
static int grant_mapped(struct party *p, int k, uint64_t bytes, char *ids, size_t len)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Grant g = MB__GRANT__INIT;
    g.bytes = bytes;
    req.body_case = MB__REQUEST__BODY_GRANT;
    req.grant = &g;
    Mb__Reply *rep;
    struct mbt_session *s = &p->s[k];
    int code = mbt_session_call(s, &req, &rep);
    if (code != 0) {
        if (code != 1)
            mb__reply__free_unpacked(rep, NULL);
        return code;
    }
    size_t want = rep->grant->n_frames, got = 0, first = p->n;
    for (size_t i = 0; i < want && p->n < 256; i++) {
        p->m[p->n].id = rep->grant->frames[i]->id;
        p->m[p->n++].bytes = rep->grant->frames[i]->bytes;
        s->frame_ids[s->n_frames++] = rep->grant->frames[i]->id;
    }
    mb__reply__free_unpacked(rep, NULL);
    while (got < want) {
        struct mb_chan_msg m;
        int fds[MB_CHAN_MAX_FDS];
        if (mb_chan_recv(s->chan, &m, fds, 5000) != 0)
            return MB_EPROTO;
        for (uint32_t i = 0; i < m.count; i++) {
            for (size_t j = first; j < p->n; j++)
                if (p->m[j].id == m.ids[i] && !p->m[j].map) {
                    void *a = mmap(NULL, p->m[j].bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
                    p->m[j].map = a == MAP_FAILED ? NULL : a;
                }
            close(fds[i]);   /* the mapping keeps the memory */
        }
        got += m.count;
    }
    if (ids) {
        ids[0] = '\0';
        for (size_t j = first; j < p->n; j++)
            snprintf(ids + strlen(ids), len - strlen(ids), "%s%u", j > first ? " " : "", p->m[j].id);
    }
    return 0;
}

/* Mapped frames whose memory holds SECRET, and those not all zero. */
static void scan(const struct party *p, int *secret, int *nonzero)
{
    *secret = *nonzero = 0;
    for (size_t j = 0; j < p->n; j++) {
        if (!p->m[j].map)
            continue;
        *secret += memmem(p->m[j].map, p->m[j].bytes, SECRET, strlen(SECRET)) != NULL;
        bool nz = false;
        for (size_t b = 0; b < p->m[j].bytes && !nz; b += 8)
            nz = *(const uint64_t *)(p->m[j].map + b) != 0;
        *nonzero += nz;
    }
}

static int call_share(struct mbt_session *s, const uint32_t *ids, size_t n, char *tok_hex, char *err,
                      size_t errlen)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Share sh = MB__SHARE__INIT;
    sh.ids = (uint32_t *)ids;
    sh.n_ids = n;
    req.body_case = MB__REQUEST__BODY_SHARE;
    req.share = &sh;
    Mb__Reply *rep;
    int code = mbt_session_call(s, &req, &rep);
    if (code == 1)
        return code;
    if (err)
        snprintf(err, errlen, "%s", rep->error ? rep->error : "");
    if (code == 0 && tok_hex)
        for (size_t i = 0; i < rep->share->token.len && i < 32; i++)
            sprintf(tok_hex + 2 * i, "%02x", rep->share->token.data[i]);
    mb__reply__free_unpacked(rep, NULL);
    return code;
}

/* Import a token (hex); the descriptors are read and closed. */
static int call_import(struct mbt_session *s, const char *tok_hex)
{
    uint8_t tok[32];
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(tok_hex + 2 * i, "%2x", &v) != 1)
            return MB_EINVAL;
        tok[i] = (uint8_t)v;
    }
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Import im = MB__IMPORT__INIT;
    im.token.data = tok;
    im.token.len = sizeof(tok);
    req.body_case = MB__REQUEST__BODY_IMPORT;
    req.import = &im;
    Mb__Reply *rep;
    int code = mbt_session_call(s, &req, &rep);
    if (code == 1)
        return code;
    size_t want = code == 0 ? rep->import->n_frames : 0, got = 0;
    mb__reply__free_unpacked(rep, NULL);
    while (got < want) {
        struct mb_chan_msg m;
        int fds[MB_CHAN_MAX_FDS];
        if (mb_chan_recv(s->chan, &m, fds, 5000) != 0)
            return MB_EPROTO;
        for (uint32_t i = 0; i < m.count; i++)
            close(fds[i]);
        got += m.count;
    }
    return code;
}

/* Reattach "id:bytes[:i]" items; *adopted and the refused count back. */
static int call_reattach(struct mbt_session *s, char **items, int n, uint32_t *adopted,
                         uint32_t *refused)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Reattach ra = MB__REATTACH__INIT;
    Mb__Frame f[64], *fp[64];
    for (int i = 0; i < n && i < 64; i++) {
        mb__frame__init(&f[i]);
        unsigned long id, bytes;
        char imp = 0;
        if (sscanf(items[i], "%lu:%lu:%c", &id, &bytes, &imp) < 2)
            return MB_EINVAL;
        f[i].id = (uint32_t)id;
        f[i].bytes = bytes;
        f[i].imported = imp == 'i';
        fp[i] = &f[i];
    }
    ra.frames = fp;
    ra.n_frames = (size_t)n;
    req.body_case = MB__REQUEST__BODY_REATTACH;
    req.reattach = &ra;
    Mb__Reply *rep;
    int code = mbt_session_call(s, &req, &rep);
    if (code == 1)
        return code;
    if (code == 0) {
        *adopted = rep->reattach->adopted;
        *refused = (uint32_t)rep->reattach->n_refused;
    }
    mb__reply__free_unpacked(rep, NULL);
    return code;
}

/* ---- the attacker: a child process under another uid -------------------- */

struct attacker {
    pid_t pid;
    FILE *to, *from;
};

/* One command per line, one answer line ("CODE rest..."). */
static void attacker_loop(const struct mbt_daemon *d, FILE *in, FILE *out)
{
    static struct party p;
    char line[4096];
    while (fgets(line, sizeof(line), in)) {
        line[strcspn(line, "\n")] = '\0';
        char *argv[80];
        int argc = 0;
        for (char *t = strtok(line, " "); t && argc < 80; t = strtok(NULL, " "))
            argv[argc++] = t;
        if (argc == 0)
            continue;
        int k = argc > 1 ? atoi(argv[1]) & 1 : 0;
        char rest[2048] = "";
        int code = MB_EINVAL;
        if (strcmp(argv[0], "open") == 0 && argc == 3) {
            code = mbt_session_open(d, argv[2], &p.s[k]);
        } else if (strcmp(argv[0], "close") == 0) {
            mbt_session_close(&p.s[k]);
            code = 0;
        } else if (strcmp(argv[0], "grant") == 0 && argc == 3) {
            code = grant_mapped(&p, k, strtoull(argv[2], NULL, 10), rest, sizeof(rest));
        } else if (strcmp(argv[0], "return") == 0) {
            code = mbt_session_return(&p.s[k], p.s[k].frame_ids, p.s[k].n_frames);
        } else if (strcmp(argv[0], "scan") == 0) {
            int secret, nonzero;
            scan(&p, &secret, &nonzero);
            snprintf(rest, sizeof(rest), "%d %d", secret, nonzero);
            code = 0;
        } else if (strcmp(argv[0], "cache") == 0 && argc == 3) {
            code = mbt_session_cache(&p.s[k], strtoull(argv[2], NULL, 10));
        } else if (strcmp(argv[0], "share") == 0 && argc >= 3) {
            uint32_t ids[70000];
            size_t n = 0;
            /* "share K ID xN": the same id N times */
            if (argc == 4 && argv[3][0] == 'x') {
                for (long r = atol(argv[3] + 1); r > 0 && n < 70000; r--)
                    ids[n++] = (uint32_t)atol(argv[2]);
            } else {
                for (int i = 2; i < argc; i++)
                    ids[n++] = (uint32_t)atol(argv[i]);
            }
            char err[512] = "";
            code = call_share(&p.s[k], ids, n, rest, err, sizeof(err));
            if (code != 0)
                snprintf(rest, sizeof(rest), "%s", err);
        } else if (strcmp(argv[0], "import") == 0 && argc == 3) {
            code = call_import(&p.s[k], argv[2]);
        } else if (strcmp(argv[0], "reattach") == 0 && argc >= 3) {
            uint32_t adopted = 0, refused = 0;
            code = call_reattach(&p.s[k], argv + 2, argc - 2, &adopted, &refused);
            snprintf(rest, sizeof(rest), "%u %u", adopted, refused);
        } else if (strcmp(argv[0], "notice") == 0) {
            int kind;
            uint64_t bytes;
            code = mbt_session_notice(&p.s[k], 5000, &kind, &bytes) == 0 ? 0 : 1;
            snprintf(rest, sizeof(rest), "%d %llu", code ? -1 : kind, (unsigned long long)bytes);
        } else if (strcmp(argv[0], "quit") == 0) {
            break;
        }
        fprintf(out, "%d %s\n", code, rest);
        fflush(out);
    }
}

static void attacker_start(const struct mbt_daemon *d, struct attacker *a)
{
    int down[2], up[2];
    assert_int_equal(pipe(down), 0);
    assert_int_equal(pipe(up), 0);
    a->pid = fork();
    assert_true(a->pid >= 0);
    if (a->pid == 0) {
        close(down[1]);
        close(up[0]);
        if (setgroups(0, NULL) != 0 || setresgid(ATTACKER, ATTACKER, ATTACKER) != 0 ||
            setresuid(ATTACKER, ATTACKER, ATTACKER) != 0)
            _exit(3);
        FILE *in = fdopen(down[0], "r"), *out = fdopen(up[1], "w");
        attacker_loop(d, in, out);
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    a->to = fdopen(down[1], "w");
    a->from = fdopen(up[0], "r");
}

/* Send one command; returns its code, the rest of the answer in rest. */
static int att(struct attacker *a, char *rest, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(a->to, fmt, ap);
    va_end(ap);
    fputc('\n', a->to);
    fflush(a->to);
    char line[4096];
    if (!fgets(line, sizeof(line), a->from))
        return 1000;
    line[strcspn(line, "\n")] = '\0';
    char *sp = strchr(line, ' ');
    if (rest)
        snprintf(rest, len, "%s", sp ? sp + 1 : "");
    return atoi(line);
}

static void attacker_stop(struct attacker *a)
{
    fprintf(a->to, "quit\n");
    fclose(a->to);
    fclose(a->from);
    assert_int_equal(mbt_wait(a->pid), 0);
}

/* ---- 13.1, 13.2: frames never move between uids ------------------------- */

/* The attacker keeps its frames mapped after returning them; root's next
 * grant (the budget is full of the returned frames) must get fresh frames,
 * so the attacker's mappings never see root's data. */
static void retained_descriptor_never_sees_another_uid(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    const char *extra[] = { "--frame-size", "64K", "--budget", "256K", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct attacker a;
    attacker_start(&d, &a);
    char ids[512], rest[512];
    assert_int_equal(att(&a, NULL, 0, "open 0 eve"), 0);
    assert_int_equal(att(&a, ids, sizeof(ids), "grant 0 %u", 4 * FRAME), 0);
    assert_int_equal(att(&a, NULL, 0, "return 0"), 0);

    static struct party root;
    memset(&root, 0, sizeof(root));
    assert_int_equal(mbt_session_open(&d, "prod", &root.s[0]), 0);
    char rids[512];
    assert_int_equal(grant_mapped(&root, 0, 4 * FRAME, rids, sizeof(rids)), 0);
    unsigned e[4];
    assert_int_equal(sscanf(ids, "%u %u %u %u", &e[0], &e[1], &e[2], &e[3]), 4);
    for (size_t j = 0; j < root.n; j++) {
        assert_non_null(root.m[j].map);
        memcpy(root.m[j].map + 100, SECRET, strlen(SECRET));
        for (int k = 0; k < 4; k++)
            assert_int_not_equal(root.m[j].id, e[k]);   /* none of the attacker's frames */
    }
    assert_int_equal(att(&a, rest, sizeof(rest), "scan"), 0);
    int secret = -1, nonzero = -1;
    assert_int_equal(sscanf(rest, "%d %d", &secret, &nonzero), 2);
    assert_int_equal(secret, 0);
    /* The attacker's frames were released to make room, and counted. */
    assert_int_equal((int)mbt_status_num(&d, "released_isolation"), 4);
    assert_int_equal((int)metric(&d, "released_isolation"), 4);
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 4);
    attacker_stop(&a);
    mbt_session_close(&root.s[0]);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Root's tenant "prod" frees memory holding a secret; another uid naming
 * itself "prod" gets zeroed, fresh frames, never root's. */
static void tenant_name_does_not_skip_the_scrub(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    const char *extra[] = { "--frame-size", "64K", "--budget", "256K", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    static struct party root;
    memset(&root, 0, sizeof(root));
    assert_int_equal(mbt_session_open(&d, "prod", &root.s[0]), 0);
    assert_int_equal(grant_mapped(&root, 0, 4 * FRAME, NULL, 0), 0);
    for (size_t j = 0; j < root.n; j++)
        memset(root.m[j].map, 0x5a, root.m[j].bytes);
    assert_int_equal(mbt_session_return(&root.s[0], root.s[0].frame_ids, root.s[0].n_frames), 0);
    for (size_t j = 0; j < root.n; j++)
        munmap(root.m[j].map, root.m[j].bytes);

    struct attacker a;
    attacker_start(&d, &a);
    char rest[512];
    assert_int_equal(att(&a, NULL, 0, "open 0 prod"), 0);
    assert_int_equal(att(&a, NULL, 0, "grant 0 %u", 4 * FRAME), 0);
    assert_int_equal(att(&a, rest, sizeof(rest), "scan"), 0);
    int secret = -1, nonzero = -1;
    assert_int_equal(sscanf(rest, "%d %d", &secret, &nonzero), 2);
    assert_int_equal(nonzero, 0);
    assert_int_equal((int)mbt_status_num(&d, "released_isolation"), 4);
    attacker_stop(&a);
    mbt_session_close(&root.s[0]);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* ---- 13.4: Share ------------------------------------------------------- */

static void share_refuses_duplicates_and_caps_tokens(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    const char *extra[] = { "--frame-size", "64K", "--budget", "4M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct attacker a;
    attacker_start(&d, &a);
    char ids[512], rest[1024];
    assert_int_equal(att(&a, NULL, 0, "open 0 eve"), 0);
    assert_int_equal(att(&a, ids, sizeof(ids), "grant 0 %u", 2 * FRAME), 0);
    unsigned id1, id2;
    assert_int_equal(sscanf(ids, "%u %u", &id1, &id2), 2);
    /* One frame named 65 536 times, or twice among others: refused. */
    assert_int_equal(att(&a, rest, sizeof(rest), "share 0 %u x65536", id1), MB_EINVAL);
    assert_non_null(strstr(rest, "more than once"));
    assert_int_equal(att(&a, rest, sizeof(rest), "share 0 %u %u %u", id1, id2, id1), MB_EINVAL);
    /* Tokens: 64 per session, then a clear refusal. */
    for (int i = 0; i < 64; i++)
        assert_int_equal(att(&a, NULL, 0, "share 0 %u %u", id1, id2), 0);
    assert_int_equal(att(&a, rest, sizeof(rest), "share 0 %u", id1), MB_ELIMIT);
    assert_non_null(strstr(rest, "unredeemed share tokens"));
    /* Holds: another session imports one; the daemon serves on. */
    assert_int_equal(att(&a, NULL, 0, "return 0"), 0);   /* revokes the tokens */
    assert_int_equal(att(&a, ids, sizeof(ids), "grant 0 %u", 2 * FRAME), 0);
    assert_int_equal(sscanf(ids, "%u %u", &id1, &id2), 2);
    char tok[128];
    assert_int_equal(att(&a, tok, sizeof(tok), "share 0 %u %u", id1, id2), 0);
    assert_int_equal(att(&a, NULL, 0, "open 1 eve2"), 0);
    assert_int_equal(att(&a, NULL, 0, "import 1 %s", tok), 0);
    assert_int_equal(att(&a, NULL, 0, "return 0"), 0);
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 2);   /* the importer holds them */
    assert_int_equal(att(&a, NULL, 0, "close 1"), 0);
    assert_int_equal((int)mbt_status_wait(&d, "frames_granted", 0, 2000), 0);
    attacker_stop(&a);
    assert_true(mbt_daemon_alive(&d));
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* ---- 13.5: Reattach needs the journal's word ----------------------------- */

static void reattach_only_by_the_uid_that_held(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    char conf[64];
    mbt_write_config(conf, sizeof(conf), "[uid 65534]\nmax = 192K\n");
    const char *extra[] = { "--frame-size", "64K", "--budget", "1M", "--config", conf, NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    static struct party root;
    memset(&root, 0, sizeof(root));
    assert_int_equal(mbt_session_open(&d, "prod", &root.s[0]), 0);
    char rids[256], eids[256], rest[256];
    assert_int_equal(grant_mapped(&root, 0, 4 * FRAME, rids, sizeof(rids)), 0);
    struct attacker a;
    attacker_start(&d, &a);
    assert_int_equal(att(&a, NULL, 0, "open 0 eve"), 0);
    assert_int_equal(att(&a, eids, sizeof(eids), "grant 0 %u", 2 * FRAME), 0);
    unsigned r[4], e[2];
    assert_int_equal(sscanf(rids, "%u %u %u %u", &r[0], &r[1], &r[2], &r[3]), 4);
    assert_int_equal(sscanf(eids, "%u %u", &e[0], &e[1]), 2);
    /* Root shares one frame with the attacker's uid, which imports it. */
    char tok[128];
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Share sh = MB__SHARE__INIT;
    uint32_t shared = r[3];
    sh.ids = &shared;
    sh.n_ids = 1;
    sh.restrict_uid = true;
    sh.uid = ATTACKER;
    req.body_case = MB__REQUEST__BODY_SHARE;
    req.share = &sh;
    Mb__Reply *rep;
    assert_int_equal(mbt_session_call(&root.s[0], &req, &rep), 0);
    for (size_t i = 0; i < 32; i++)
        sprintf(tok + 2 * i, "%02x", rep->share->token.data[i]);
    mb__reply__free_unpacked(rep, NULL);
    assert_int_equal(att(&a, NULL, 0, "import 0 %s", tok), 0);

    /* The daemon dies; clients keep their memory. It comes back with the
     * uid's max lowered below what the attacker holds. */
    kill(d.pid, SIGKILL);
    mbt_write_config(conf, sizeof(conf), "[uid 65534]\nmax = 64K\n");
    const char *again[] = { "--frame-size", "64K", "--budget", "1M", "--config", conf, NULL };
    assert_int_equal(mbt_daemon_restart(&d, again), 0);
    mbt_session_close(&root.s[0]);
    att(&a, NULL, 0, "close 0");
    assert_int_equal(att(&a, NULL, 0, "open 0 eve"), 0);
    /* Root's frames, a frame never handed out, and imports of them: refused. */
    assert_int_equal(att(&a, rest, sizeof(rest), "reattach 0 %u:%u %u:%u %u:%u:i %u:%u", r[0], FRAME,
                         r[1], FRAME, r[2], FRAME, 40, FRAME), 0);
    assert_string_equal(rest, "0 4");
    /* Its own frames: accepted, charged over its quota: it cannot grow. */
    assert_int_equal(att(&a, rest, sizeof(rest), "reattach 0 %u:%u %u:%u", e[0], FRAME, e[1], FRAME), 0);
    assert_string_equal(rest, "2 0");
    /* The frame root shared with it: accepted as an import, not as its own. */
    assert_int_equal(att(&a, rest, sizeof(rest), "reattach 0 %u:%u", r[3], FRAME), 0);
    assert_string_equal(rest, "0 1");
    assert_int_equal(att(&a, rest, sizeof(rest), "reattach 0 %u:%u:i", r[3], FRAME), 0);
    assert_string_equal(rest, "1 0");
    assert_int_equal(att(&a, NULL, 0, "grant 0 %u", FRAME), MB_EQUOTA);
    /* The owner's report is accepted: nothing of its was booked by another. */
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "prod", &s), 0);
    char items[4][32];
    char *ip[4];
    for (int i = 0; i < 4; i++) {
        snprintf(items[i], sizeof(items[i]), "%u:%u", r[i], FRAME);
        ip[i] = items[i];
    }
    uint32_t adopted = 0, refused = 0;
    assert_int_equal(call_reattach(&s, ip, 4, &adopted, &refused), 0);
    assert_int_equal(adopted, 4);
    assert_int_equal(refused, 0);
    assert_int_equal((int)mbt_status_num(&d, "bytes_granted"), 6 * FRAME);
    attacker_stop(&a);
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

/* A clean stop ends the daemon's sessions, but their processes live on:
 * the next daemon still books what they report. */
static void reattach_after_a_clean_stop(void **state)
{
    const char *extra[] = { "--frame-size", "64K", "--budget", "1M", "--drain-timeout", "0", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "prod", &s), 0);
    assert_int_equal(mbt_session_grant(&s, 2 * FRAME), 0);
    uint32_t ids[2] = { s.frame_ids[0], s.frame_ids[1] };
    kill(d.pid, SIGTERM);
    assert_int_equal(mbt_daemon_restart(&d, extra), 0);
    mbt_session_close(&s);
    assert_int_equal(mbt_session_open(&d, "prod", &s), 0);
    char items[2][32];
    char *ip[2];
    for (int i = 0; i < 2; i++) {
        snprintf(items[i], sizeof(items[i]), "%u:%u", ids[i], FRAME);
        ip[i] = items[i];
    }
    uint32_t adopted = 0, refused = 0;
    assert_int_equal(call_reattach(&s, ip, 2, &adopted, &refused), 0);
    assert_int_equal(adopted, 2);
    assert_int_equal(refused, 0);
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* ---- 13.6: imports are charged to the importer -------------------------- */

static void self_import_is_charged(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    char conf[64];
    mbt_write_config(conf, sizeof(conf), "[uid 65534]\nmax = 512K\n");
    const char *extra[] = { "--frame-size", "64K", "--budget", "4M", "--config", conf, NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct attacker a;
    attacker_start(&d, &a);
    char ids[256], tok[128];
    assert_int_equal(att(&a, NULL, 0, "open 0 eve"), 0);
    assert_int_equal(att(&a, NULL, 0, "open 1 eve"), 0);
    assert_int_equal(att(&a, ids, sizeof(ids), "grant 0 %u", 4 * FRAME), 0);
    unsigned e[4];
    assert_int_equal(sscanf(ids, "%u %u %u %u", &e[0], &e[1], &e[2], &e[3]), 4);
    assert_int_equal(att(&a, tok, sizeof(tok), "share 0 %u %u %u %u", e[0], e[1], e[2], e[3]), 0);
    assert_int_equal(att(&a, NULL, 0, "import 1 %s", tok), 0);
    /* Both sessions are charged: the uid is at its 512K. */
    assert_int_equal(att(&a, NULL, 0, "grant 0 %u", FRAME), MB_EQUOTA);
    /* The exporter returns them; the importer still holds (and pays for)
     * them, so the uid can take back only what was returned. */
    assert_int_equal(att(&a, NULL, 0, "return 0"), 0);
    assert_int_equal(att(&a, NULL, 0, "grant 0 %u", 4 * FRAME), 0);
    assert_int_equal(att(&a, NULL, 0, "grant 0 %u", FRAME), MB_EQUOTA);
    /* A share the importer cannot pay for is refused. */
    assert_int_equal(att(&a, ids, sizeof(ids), "return 0"), 0);
    assert_int_equal(att(&a, ids, sizeof(ids), "grant 0 %u", 4 * FRAME), 0);
    assert_int_equal(sscanf(ids, "%u %u %u %u", &e[0], &e[1], &e[2], &e[3]), 4);
    assert_int_equal(att(&a, tok, sizeof(tok), "share 0 %u", e[0]), 0);
    assert_int_equal(att(&a, NULL, 0, "import 1 %s", tok), MB_EQUOTA);
    attacker_stop(&a);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

/* ---- 13.11: false cache reports ----------------------------------------- */

/* The attacker claims a huge cache (clamped to what it holds) and ignores
 * the notice; the honest session with less cached is asked next and the
 * waiting grant succeeds. */
static void ignored_notice_asks_the_next_session(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    const char *extra[] = { "--frame-size", "64K", "--budget", "512K", "--reclaim-timeout", "1000",
                            NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct attacker a;
    attacker_start(&d, &a);
    assert_int_equal(att(&a, NULL, 0, "open 0 eve"), 0);
    assert_int_equal(att(&a, NULL, 0, "grant 0 %u", 4 * FRAME), 0);
    assert_int_equal(att(&a, NULL, 0, "cache 0 %llu", 1ull << 40), 0);
    struct json *j = mbt_status(&d);
    const struct json *t = json_get(j, "tenants");
    for (size_t i = 0; i < t->n; i++)
        if ((int)json_num(&t->kids[i], "uid") == ATTACKER)
            assert_int_equal((int)json_num(&t->kids[i], "cached"), 4 * FRAME);
    json_free(j);
    struct mbt_session h;
    assert_int_equal(mbt_session_open(&d, "honest", &h), 0);
    assert_int_equal(mbt_session_grant(&h, 4 * FRAME), 0);
    assert_int_equal(mbt_session_cache(&h, 2 * FRAME), 0);
    char size[32];
    snprintf(size, sizeof(size), "%u", FRAME);
    const char *b_argv[] = { MB_CLIENT_BIN, "alloc", size, "needy", NULL };
    pid_t b = mbt_spawn(&d, b_argv, NULL, NULL);
    int kind;
    uint64_t bytes;
    assert_int_equal(mbt_session_notice(&h, 10000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__RECLAIM);
    assert_int_equal(mbt_session_return(&h, h.frame_ids, 1), 0);
    assert_int_equal(mbt_wait(b), 0);
    assert_true(metric(&d, "reclaim_ignored") >= 1);
    attacker_stop(&a);
    mbt_session_close(&h);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static double cached_of(const struct mbt_daemon *d, const char *tenant)
{
    struct json *j = mbt_status(d);
    const struct json *t = json_get(j, "tenants");
    double c = -1;
    for (size_t i = 0; t && i < t->n; i++)
        if (strcmp(json_get(&t->kids[i], "name")->str, tenant) == 0)
            c = json_num(&t->kids[i], "cached");
    json_free(j);
    return c;
}

/* Frames the attacker shared with its own second session free nothing when
 * returned: its cache report cannot count them, and returning them does
 * not answer a notice. */
static void cache_report_counts_only_what_would_come_free(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    const char *extra[] = { "--frame-size", "64K", "--budget", "4M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct attacker a;
    attacker_start(&d, &a);
    char ids[256], tok[128];
    assert_int_equal(att(&a, NULL, 0, "open 0 eve-a"), 0);
    assert_int_equal(att(&a, NULL, 0, "open 1 eve-b"), 0);
    assert_int_equal(att(&a, ids, sizeof(ids), "grant 0 %u", 4 * FRAME), 0);
    unsigned e[4];
    assert_int_equal(sscanf(ids, "%u %u %u %u", &e[0], &e[1], &e[2], &e[3]), 4);
    assert_int_equal(att(&a, tok, sizeof(tok), "share 0 %u %u", e[0], e[1]), 0);
    assert_int_equal(att(&a, NULL, 0, "import 1 %s", tok), 0);
    assert_int_equal(att(&a, NULL, 0, "cache 0 %u", 4 * FRAME), 0);
    assert_int_equal((int)cached_of(&d, "eve-a"), 2 * FRAME);
    /* The importer lets go: they would come free now. */
    assert_int_equal(att(&a, NULL, 0, "close 1"), 0);
    double c = 0;
    for (int i = 0; i < 100 && c != 4 * FRAME; i++) {   /* once the daemon saw it go */
        assert_int_equal(att(&a, NULL, 0, "cache 0 %u", 4 * FRAME), 0);
        if ((c = cached_of(&d, "eve-a")) != 4 * FRAME)
            mbt_sleep_ms(20);
    }
    assert_int_equal((int)c, 4 * FRAME);
    attacker_stop(&a);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* ---- deferred grants and quotas ----------------------------------------- */

/* A grant waits for reclaim; meanwhile the tenant's max is lowered. When
 * frames come back, the waiting grant is refused for quota, not granted. */
static void deferred_grant_checks_quota_again(void **state)
{
    char conf[64];
    mbt_write_config(conf, sizeof(conf), "[tenant capped]\nmax = 256K\n");
    const char *extra[] = { "--frame-size", "64K", "--budget", "512K", "--reclaim-timeout", "10000",
                            "--config", conf, NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session c, x;
    assert_int_equal(mbt_session_open(&d, "capped", &c), 0);
    assert_int_equal(mbt_session_open(&d, "cachey", &x), 0);
    assert_int_equal(mbt_session_grant(&c, 2 * FRAME), 0);
    assert_int_equal(mbt_session_grant(&x, 6 * FRAME), 0);
    assert_int_equal(mbt_session_cache(&x, 6 * FRAME), 0);
    char size[32], buf[256];
    snprintf(size, sizeof(size), "%u", 2 * FRAME);
    const char *b_argv[] = { MB_CLIENT_BIN, "alloc", size, "capped", NULL };
    pid_t b = mbt_spawn(&d, b_argv, NULL, NULL);
    int kind;
    uint64_t bytes;
    assert_int_equal(mbt_session_notice(&x, 10000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__RECLAIM);
    const char *lower[] = { "quota", "capped", "128K", NULL };
    struct json *j = mbt_ctl_json(&d, NULL, lower);
    assert_non_null(j);
    json_free(j);
    assert_int_equal(mbt_session_return(&x, x.frame_ids, 4), 0);
    assert_int_equal(mbt_wait(b), 20 - MB_EQUOTA);
    (void)buf;
    double held, max;
    const char *tn[] = { "tenants", NULL };
    j = mbt_ctl_json(&d, NULL, tn);
    const struct json *t = json_get(j, "tenants");
    held = max = -1;
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(json_get(&t->kids[i], "name")->str, "capped") == 0) {
            held = json_num(&t->kids[i], "bytes");
            max = json_num(&t->kids[i], "max");
        }
    json_free(j);
    assert_int_equal((int)max, 128 << 10);
    assert_int_equal((int)held, 2 * FRAME);   /* nothing was added past the max */
    mbt_session_close(&c);
    mbt_session_close(&x);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

/* ---- stray frames of a grant whose reply was not awaited ---------------- */

/* A client gave up on a grant: its descriptors were never read. It hands
 * the frames back by id with Return; the books balance. */
static void stray_grant_frames_handed_back_by_id(void **state)
{
    const char *extra[] = { "--frame-size", "64K", "--budget", "1M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "late", &s), 0);
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Grant g = MB__GRANT__INIT;
    g.bytes = 3 * FRAME;
    req.body_case = MB__REQUEST__BODY_GRANT;
    req.grant = &g;
    Mb__Reply *rep;
    assert_int_equal(mbt_session_call(&s, &req, &rep), 0);
    uint32_t ids[3];
    assert_int_equal(rep->grant->n_frames, 3);
    for (int i = 0; i < 3; i++)
        ids[i] = rep->grant->frames[i]->id;
    mb__reply__free_unpacked(rep, NULL);
    assert_int_equal(mbt_session_return(&s, ids, 3), 0);
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 0);
    assert_int_equal(mbt_session_grant(&s, FRAME), 0);   /* the session carries on */
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* ---- kill without a pidfd ------------------------------------------------ */

static void kill_without_pidfd_keeps_frames_withdrawn(void **state)
{
#ifndef MB_DEBUG
    skip();   /* fault injection is compiled into debug builds only */
#endif
    const char *extra[] = { "--frame-size", "64K", "--budget", "4M", NULL };
    const char *env[] = { "MOONBRIGHT_FAULTS=pidfd=1", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start_env(&d, extra, env), 0);
    int out, in;
    char size[32];
    snprintf(size, sizeof(size), "%u", 4 * FRAME);
    pid_t victim = mbt_spawn_holder(&d, size, "5", "doomed", &out, &in);
    assert_true(victim > 0);
    struct json *j = mbt_status(&d);
    const struct json *t = json_get(j, "tenants");
    double sess = -1;
    for (size_t i = 0; i < t->n; i++)
        if ((pid_t)json_num(&t->kids[i], "pid") == victim)
            sess = json_num(&t->kids[i], "session");
    json_free(j);
    char id[32];
    snprintf(id, sizeof(id), "%.0f", sess);
    const char *k[] = { "kill", id, NULL };
    int rc;
    j = mbt_ctl_json(&d, &rc, k);
    assert_int_equal(rc, 0);
    json_free(j);
    /* Still running, still mapping: nobody else may get its frames. */
    mbt_sleep_ms(600);
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 4);
    close(in);
    mbt_wait(victim);
    close(out);
    assert_int_equal((int)mbt_status_wait(&d, "frames_granted", 0, 10000), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* ---- the warm reserve follows demand ------------------------------------ */

static void reserve_follows_demand_and_releases_idle_frames(void **state)
{
    const char *extra[] = { "--frame-size", "64K", "--budget", "16M", "--reserve-idle", "1500", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "steady", &s), 0);
    assert_int_equal(mbt_session_grant(&s, 32 * FRAME), 0);
    /* Demand raised the target; the workers make frames ahead of the next grant. */
    double target = 0, free_bytes = 0;
    for (int i = 0; i < 100 && (target < 32 * FRAME || free_bytes < 32 * FRAME); i++) {
        target = mbt_status_num(&d, "reserve_target");
        free_bytes = mbt_status_num(&d, "bytes_free");
        if (target < 32 * FRAME || free_bytes < 32 * FRAME)
            mbt_sleep_ms(20);
    }
    assert_true(target >= 32 * FRAME);
    assert_true(free_bytes >= 32 * FRAME);
    assert_int_equal(mbt_session_return(&s, s.frame_ids, s.n_frames), 0);
    /* Load stops: the target falls back to the configured reserve (0) and
     * the free frames go back to the driver. */
    struct json *j = NULL;
    for (int i = 0; i < 300; i++) {
        json_free(j);
        j = mbt_status(&d);
        if (json_num(j, "bytes_free") == 0 && json_num(j, "reserve_target") == 0)
            break;
        mbt_sleep_ms(50);
    }
    assert_int_equal((int)json_num(j, "reserve_target"), 0);
    assert_int_equal((int)json_num(j, "bytes_free"), 0);
    assert_int_equal((int)json_num(j, "bytes_granted"), 0);
    assert_int_equal((int)json_num(j, "frames_total"), 0);
    assert_true(json_num(j, "released_idle") >= 64);
    json_free(j);
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A request that had to create a large frame itself asks the reserve for a
 * spare of that order. With the budget full the spare waits; once the load
 * stops and the idle frames go back to the driver, the spare must not be
 * made in the budget that frees (nobody asked for that order since). */
static void idle_release_leaves_no_spare_behind(void **state)
{
    const char *extra[] = { "--frame-size", "64K", "--budget", "512K", "--reserve-idle", "500", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "spare", &s), 0);
    assert_int_equal(mbt_session_grant_large(&s, 8 * FRAME), 0);
    assert_int_equal(s.n_frames, 1);   /* one order-3 frame: the whole budget */
    assert_int_equal(mbt_session_return(&s, s.frame_ids, s.n_frames), 0);
    struct json *j = NULL;
    int i = 0;
    for (; i < 300; i++) {
        json_free(j);
        j = mbt_status(&d);
        if (json_num(j, "frames_total") == 0 && json_num(j, "released_idle") >= 1)
            break;
        mbt_sleep_ms(50);
    }
    assert_true(i < 300);
    json_free(j);
    /* Several ticks and an idle period later, still nothing was made. */
    for (i = 0; i < 20; i++) {
        mbt_sleep_ms(50);
        assert_int_equal((int)mbt_status_num(&d, "frames_total"), 0);
    }
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Frames made and released to the driver over and over (grants, then the
 * idle policy) reuse the frame table's slots: the table follows the most
 * frames held at once, not every frame made; an id of a frame that ended
 * names nothing, though its slot holds a frame again. */
static void ended_frames_slots_reused(void **state)
{
    const char *extra[] = { "--frame-size", "64K", "--budget", "4M", "--reserve-idle", "300", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "cycles", &s), 0);
    uint32_t stale[32];
    double released = 0;
    for (int cycle = 0; cycle < 6; cycle++) {
        assert_int_equal(mbt_session_grant(&s, 32 * FRAME), 0);
        assert_int_equal(s.n_frames, 32);
        if (cycle == 0)
            memcpy(stale, s.frame_ids, sizeof(stale));
        else   /* ended frames' ids are refused, and nothing changes */
            assert_int_not_equal(mbt_session_return(&s, stale, 1), 0);
        assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 32);
        assert_int_equal(mbt_session_return(&s, s.frame_ids, s.n_frames), 0);
        int i = 0;
        for (; i < 200 && mbt_status_num(&d, "frames_total") != 0; i++)
            mbt_sleep_ms(50);
        assert_true(i < 200);   /* all released to the driver */
    }
    struct json *j = mbt_status(&d);
    released = json_num(j, "released_idle");
    assert_true(released >= 6 * 32);
    /* At most the budget's 64 frames were held at once. */
    assert_true(json_num(j, "frame_slots") >= 32);
    assert_true(json_num(j, "frame_slots") <= 64);
    json_free(j);
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

int main(void)
{
    setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(retained_descriptor_never_sees_another_uid),
        cmocka_unit_test(ended_frames_slots_reused),
        cmocka_unit_test(tenant_name_does_not_skip_the_scrub),
        cmocka_unit_test(share_refuses_duplicates_and_caps_tokens),
        cmocka_unit_test(reattach_only_by_the_uid_that_held),
        cmocka_unit_test(reattach_after_a_clean_stop),
        cmocka_unit_test(self_import_is_charged),
        cmocka_unit_test(ignored_notice_asks_the_next_session),
        cmocka_unit_test(cache_report_counts_only_what_would_come_free),
        cmocka_unit_test(deferred_grant_checks_quota_again),
        cmocka_unit_test(stray_grant_frames_handed_back_by_id),
        cmocka_unit_test(kill_without_pidfd_keeps_frames_withdrawn),
        cmocka_unit_test(reserve_follows_demand_and_releases_idle_frames),
        cmocka_unit_test(idle_release_leaves_no_spare_behind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
