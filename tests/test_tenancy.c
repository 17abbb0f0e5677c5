/* test_tenancy.c: tenants against a real moonbrightd, with clients as
 * separate processes (some under uid 65534 via setpriv) and raw protocol
 * sessions: quotas per tenant and per uid, admin commands refused to
 * non-admins with the victim's memory intact, foreign frame ids refused,
 * kill withdrawing frames until the process exits, the reclaim notice
 * protocol (order, completion, deadline, by hand), and elastic reclaim end
 * to end through libmbclient, and warm grants (free frames of other sizes
 * standing in for a planned frame). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "harness.h"

#define FRAME (64u << 10)
#define NOBODY "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"
/* The tenant object named `name` in tenants --json (copied out), or false. */
static bool tenant_info(const struct mbt_daemon *d, const char *name, double *bytes, double *max,
                        bool *unlimited)
{
    const char *args[] = { "tenants", NULL };
    struct json *j = mbt_ctl_json(d, NULL, args);
    assert_non_null(j);
    const struct json *t = json_get(j, "tenants");
    bool found = false;
    for (size_t i = 0; t && i < t->n; i++) {
        if (strcmp(json_get(&t->kids[i], "name")->str, name) != 0)
            continue;
        found = true;
        *bytes = json_num(&t->kids[i], "bytes");
        const struct json *m = json_get(&t->kids[i], "max");
        *unlimited = m->type == JSON_NULL;
        *max = m->type == JSON_NUM ? m->num : -1;
    }
    json_free(j);
    return found;
}

/* Start `mbtest_client hold` and wait for "ready". */
static pid_t start_holder(const struct mbt_daemon *d, const char *bytes, const char *seed,
                          const char *tenant, int *out, int *in)
{
    pid_t pid = mbt_spawn_holder(d, bytes, seed, tenant, out, in);
    assert_true(pid > 0);
    return pid;
}

static void holder_intact(int out, int in)
{
    char line[128];
    assert_int_equal(write(in, "check\n", 6), 6);
    assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "intact");
}

static void holder_stop(pid_t pid, int out, int in)
{
    close(in);
    assert_int_equal(mbt_wait(pid), 0);
    close(out);
}

static double session_of(const struct mbt_daemon *d, pid_t pid)
{
    struct json *j = mbt_status(d);
    assert_non_null(j);
    const struct json *t = json_get(j, "tenants");
    double id = -1;
    for (size_t i = 0; t && i < t->n; i++)
        if ((pid_t)json_num(&t->kids[i], "pid") == pid)
            id = json_num(&t->kids[i], "session");
    json_free(j);
    return id;
}

/* Quotas are checked against what a tenant holds; raw sessions hold exact
 * amounts (libmbclient may ask for more than one allocation needs). */
static void tenant_quota_and_other_tenant(void **state)
{
    char conf[64];
    mbt_write_config(conf, sizeof(conf), "[tenant capped]\nmax = 40M\n");
    const char *extra[] = { "--frame-size", "1M", "--budget", "128M", "--config", conf, NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);

    struct mbt_session a, s, o;
    assert_int_equal(mbt_session_open(&d, "capped", &a), 0);
    assert_int_equal(mbt_session_grant(&a, 30u << 20), 0);
    assert_int_equal(a.last_room, 10u << 20);   /* the reply says what its quota leaves */
    assert_int_equal(mbt_session_grant(&a, 10u << 20), 0);
    assert_int_equal(a.last_room, 0);
    /* Another tenant's room is the budget's: 128 MiB less the 40 held and
     * its own 8. */
    assert_int_equal(mbt_session_open(&d, "roomy", &o), 0);
    assert_int_equal(mbt_session_grant(&o, 8u << 20), 0);
    assert_int_equal(o.last_room, 80u << 20);
    mbt_session_close(&o);
    /* At its max: one more frame is refused with a message naming the
     * tenant, what it holds and its max. */
    assert_int_equal(mbt_session_open(&d, "capped", &s), 0);
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Grant g = MB__GRANT__INIT;
    g.bytes = 1u << 20;
    req.body_case = MB__REQUEST__BODY_GRANT;
    req.grant = &g;
    Mb__Reply *rep;
    assert_int_equal(mbt_session_call(&s, &req, &rep), MB_EQUOTA);
    assert_non_null(strstr(rep->error, "tenant 'capped'"));
    assert_non_null(strstr(rep->error, "holds 40 MiB"));
    assert_non_null(strstr(rep->error, "max 40 MiB"));
    mb__reply__free_unpacked(rep, NULL);
    /* The library reports the same status. */
    char buf[1024];
    const char *one[] = { MB_CLIENT_BIN, "alloc", "1048576", "capped", NULL };
    assert_int_equal(mbt_run(&d, one, buf, sizeof(buf), true), 20 - MB_EQUOTA);
    /* Once, with the daemon's words: the refusals it recovers from are
     * not warnings. */
    assert_non_null(strstr(buf, "warning: an allocation of 1048576 bytes failed: quota of tenant "
                                "'capped' exceeded"));
    assert_null(strstr(buf, "moonbrightd refused"));
    /* A process that names no tenant (NULL or "") is $MOONBRIGHT_TENANT's. */
    setenv("MOONBRIGHT_TENANT", "capped", 1);
    const char *by_env[] = { MB_CLIENT_BIN, "alloc", "1048576", NULL };
    assert_int_equal(mbt_run(&d, by_env, buf, sizeof(buf), false), 20 - MB_EQUOTA);
    const char *by_empty[] = { MB_CLIENT_BIN, "alloc", "1048576", "", NULL };
    assert_int_equal(mbt_run(&d, by_empty, buf, sizeof(buf), false), 20 - MB_EQUOTA);
    unsetenv("MOONBRIGHT_TENANT");
    /* Another tenant is unaffected. */
    const char *other[] = { MB_CLIENT_BIN, "pattern", "1048576", "9", "other", NULL };
    assert_int_equal(mbt_run(&d, other, buf, sizeof(buf), false), 0);
    assert_true(mbt_status_num(&d, "refused_quota") >= 2);
    assert_true(mbt_status_num(&d, "refused") >= 2);

    /* An administrator raises the quota at run time. */
    const char *raise[] = { "quota", "capped", "80M", NULL };
    int rc;
    struct json *j = mbt_ctl_json(&d, &rc, raise);
    assert_int_equal(rc, 0);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "max"), 80 << 20);
    assert_int_equal((int)json_num(j, "previous_max"), 40 << 20);
    assert_int_equal((int)json_num(j, "bytes"), 40 << 20);
    json_free(j);
    assert_int_equal(mbt_session_grant(&s, 1u << 20), 0);
    assert_int_equal(mbt_run(&d, one, buf, sizeof(buf), false), 0);
    double bytes, max;
    bool unlimited;
    assert_true(tenant_info(&d, "capped", &bytes, &max, &unlimited));
    assert_false(unlimited);
    assert_int_equal((int)max, 80 << 20);
    assert_int_equal((int)bytes, 41 << 20);
    const char *unl[] = { "quota", "capped", "unlimited", NULL };
    j = mbt_ctl_json(&d, &rc, unl);
    assert_int_equal(rc, 0);
    assert_int_equal(json_get(j, "max")->type, JSON_NULL);
    json_free(j);
    mbt_session_close(&s);
    mbt_session_close(&a);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

/* GrantReply.room: the budget's room less other tenants' unmet min (a
 * tenant's own min is no charge against it). */
static void grant_room_counts_others_min(void **state)
{
    (void)state;
    char conf[64];
    mbt_write_config(conf, sizeof(conf), "[tenant guarded]\nmin = 16M\n");
    const char *extra[] = { "--frame-size", "1M", "--budget", "64M", "--config", conf, NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session p, g;
    assert_int_equal(mbt_session_open(&d, "plain", &p), 0);
    assert_int_equal(mbt_session_open(&d, "guarded", &g), 0);
    assert_int_equal(mbt_session_grant(&p, 8u << 20), 0);
    assert_int_equal(p.last_room, 40u << 20);   /* 64 - 8 - guarded's 16 */
    assert_int_equal(mbt_session_grant(&g, 4u << 20), 0);
    assert_int_equal(g.last_room, 52u << 20);   /* 64 - 12: its own min is its to use */
    assert_int_equal(mbt_session_grant(&p, 1u << 20), 0);
    assert_int_equal(p.last_room, 39u << 20);   /* 64 - 13 - the 12 guarded still may take */
    mbt_session_close(&p);
    mbt_session_close(&g);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

static void uid_quota(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    char conf[64];
    mbt_write_config(conf, sizeof(conf), "[uid 65534]\nmax = 40M\n");
    const char *extra[] = { "--frame-size", "1M", "--budget", "128M", "--config", conf, NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    char buf[2048];
    const char *big[] = { NOBODY, MB_CLIENT_BIN, "alloc", "50331648", "anyname", NULL };
    assert_int_equal(mbt_run(&d, big, buf, sizeof(buf), false), 20 - MB_EQUOTA);
    const char *fits[] = { NOBODY, MB_CLIENT_BIN, "pattern", "8388608", "3", "anyname", NULL };
    assert_int_equal(mbt_run(&d, fits, buf, sizeof(buf), false), 0);
    /* Root is not that uid: the same size is fine. */
    const char *root[] = { MB_CLIENT_BIN, "alloc", "50331648", "anyname", NULL };
    assert_int_equal(mbt_run(&d, root, buf, sizeof(buf), false), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

static void non_admin_refused_victim_intact(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    const char *extra[] = { "--frame-size", "64K", "--budget", "4M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    int out, in;
    pid_t victim = start_holder(&d, "524288", "77", "victim", &out, &in);
    char sess[32];
    snprintf(sess, sizeof(sess), "%.0f", session_of(&d, victim));
    const char *const cmds[][4] = {
        { "quota", "victim", "64K", NULL }, { "kill", sess, NULL }, { "drain", NULL },
        { "reclaim", "victim", NULL },
    };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        const char *argv[16] = { NOBODY, MB_CTL_BIN, "--runtime-dir", d.dir };
        int n = 7;
        for (int k = 0; cmds[i][k]; k++)
            argv[n++] = cmds[i][k];
        argv[n] = NULL;
        char buf[1024];
        assert_int_equal(mbt_run(&d, argv, buf, sizeof(buf), true), 1);
        assert_non_null(strstr(buf, "not permitted"));
        assert_non_null(strstr(buf, "administrators"));
    }
    /* Nothing changed, and the refusals were counted. */
    struct json *j = mbt_status(&d);
    assert_non_null(j);
    assert_true(json_num(j, "refused") >= 4);
    assert_int_equal(json_get(j, "draining")->num, 0);
    assert_int_equal((int)json_num(j, "frames_granted"), 8);
    json_free(j);
    double bytes, max;
    bool unlimited;
    assert_true(tenant_info(&d, "victim", &bytes, &max, &unlimited));
    assert_true(unlimited);
    assert_int_equal((int)bytes, 8 * FRAME);
    assert_int_equal((int)session_of(&d, victim), atoi(sess));
    holder_intact(out, in);
    /* Read-only commands are open to everyone. */
    const char *st[] = { NOBODY, MB_CTL_BIN, "--runtime-dir", d.dir, "tenants", NULL };
    char buf[4096];
    assert_int_equal(mbt_run(&d, st, buf, sizeof(buf), false), 0);
    assert_non_null(strstr(buf, "victim"));
    holder_stop(victim, out, in);
    assert_int_equal(mbt_daemon_stop(&d), 0);

    /* A uid in admin_uids may. */
    char conf[64];
    mbt_write_config(conf, sizeof(conf), "admin_uids = 65534\n");
    const char *extra2[] = { "--config", conf, NULL };
    assert_int_equal(mbt_daemon_start(&d, extra2), 0);
    const char *drain[] = { NOBODY, MB_CTL_BIN, "--runtime-dir", d.dir, "drain", NULL };
    assert_int_equal(mbt_run(&d, drain, buf, sizeof(buf), true), 0);
    assert_int_equal(json_get(j = mbt_status(&d), "draining")->num, 1);
    json_free(j);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

static void foreign_frames_refused(void **state)
{
    const char *extra[] = { "--frame-size", "64K", "--budget", "4M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session a, b;
    assert_int_equal(mbt_session_open(&d, "alice", &a), 0);
    assert_int_equal(mbt_session_open(&d, "bob", &b), 0);
    assert_int_equal(mbt_session_grant(&a, 3 * FRAME), 0);
    assert_int_equal(mbt_session_grant(&b, FRAME), 0);
    assert_int_equal(a.n_frames, 3);
    /* Bob returns Alice's frame, alone or among his own: refused, and
     * nothing is returned. */
    assert_int_equal(mbt_session_return(&b, &a.frame_ids[0], 1), MB_EPERM);
    assert_int_equal(mbt_session_grant(&b, FRAME), 0);
    uint32_t mixed[2] = { b.frame_ids[0], a.frame_ids[2] };
    assert_int_equal(mbt_session_return(&b, mixed, 2), MB_EPERM);
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 5);
    uint32_t none = 99999;
    assert_int_equal(mbt_session_return(&b, &none, 1), MB_ENOENT);
    uint32_t twice[2] = { b.frame_ids[0], b.frame_ids[0] };
    assert_int_equal(mbt_session_return(&b, twice, 2), MB_EINVAL);
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 5);
    /* The frame table still shows Alice holding hers. */
    const char *fr[] = { "frames", NULL };
    struct json *j = mbt_ctl_json(&d, NULL, fr);
    assert_non_null(j);
    const struct json *f = json_get(j, "frames");
    int alice = 0;
    for (size_t i = 0; i < f->n; i++)
        if ((uint64_t)json_num(&f->kids[i], "session") == a.id) {
            assert_string_equal(json_get(&f->kids[i], "tenant")->str, "alice");
            assert_string_equal(json_get(&f->kids[i], "state")->str, "granted");
            alice++;
        }
    assert_int_equal(alice, 3);
    json_free(j);
    assert_true(mbt_status_num(&d, "refused") >= 2);
    assert_int_equal(mbt_session_return(&a, a.frame_ids, a.n_frames), 0);
    mbt_session_close(&a);
    mbt_session_close(&b);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static void kill_withdraws_until_exit(void **state)
{
    const char *extra[] = { "--frame-size", "64K", "--budget", "4M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    int out, in;
    pid_t victim = start_holder(&d, "262144", "11", "doomed", &out, &in);
    char sess[32];
    snprintf(sess, sizeof(sess), "%.0f", session_of(&d, victim));
    const char *kill_args[] = { "kill", sess, NULL };
    int rc;
    struct json *j = mbt_ctl_json(&d, &rc, kill_args);
    assert_int_equal(rc, 0);
    assert_int_equal((int)json_num(j, "frames"), 4);
    json_free(j);
    /* Withdrawn: granted to no one while the process may still map them. */
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 4);
    const char *fr[] = { "frames", NULL };
    j = mbt_ctl_json(&d, NULL, fr);
    const struct json *f = json_get(j, "frames");
    int withdrawn = 0;
    for (size_t i = 0; i < f->n; i++)
        withdrawn += strcmp(json_get(&f->kids[i], "state")->str, "withdrawn") == 0;
    assert_int_equal(withdrawn, 4);
    json_free(j);
    assert_true(session_of(&d, victim) < 0);
    holder_intact(out, in);
    /* Killing it again, or a session that never was: no such session. */
    assert_null(mbt_ctl_json(&d, &rc, kill_args));
    assert_int_equal(rc, 1);
    close(in);
    mbt_wait(victim);
    close(out);
    assert_int_equal((int)mbt_status_wait(&d, "frames_granted", 0, 10000), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Warm grants through a real daemon: free frames of a smaller size stand in
 * for the planned one when asked (no frame created on the path, as the
 * status counts), never more of them than asked, and never when not asked. */
static void warm_grant_takes_free_frames(void **state)
{
    const char *extra[] = { "--frame-size", "64K", "--budget", "4M", "--reserve-idle", "0", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session a;
    assert_int_equal(mbt_session_open(&d, "warm", &a), 0);
    /* Two one-unit frames, handed back: free, this uid's. */
    assert_int_equal(mbt_session_grant(&a, 128u << 10), 0);
    assert_int_equal(a.n_frames, 2);
    uint32_t ids[2] = { a.frame_ids[0], a.frame_ids[1] };
    assert_int_equal(mbt_session_return(&a, ids, 2), 0);
    double created = mbt_status_num(&d, "grant_creates");
    assert_true(created >= 2);
    /* 128 KiB planned as one two-unit frame: the two free ones instead. */
    uint64_t sizes[8];
    size_t n = 8;
    assert_int_equal(mbt_session_grant_warm(&a, 128u << 10, 2, sizes, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(sizes[0], 64u << 10);
    assert_int_equal(sizes[1], 64u << 10);
    assert_true(mbt_status_num(&d, "grant_creates") == created);
    assert_int_equal(mbt_session_return(&a, a.frame_ids, a.n_frames), 0);
    /* One frame at most in its place: the planned frame is made. */
    n = 8;
    assert_int_equal(mbt_session_grant_warm(&a, 128u << 10, 1, sizes, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sizes[0], 128u << 10);
    assert_true(mbt_status_num(&d, "grant_creates") == created + 1);
    assert_int_equal(mbt_session_return(&a, a.frame_ids, a.n_frames), 0);
    /* Not asked: the plan's own frame (now free), none of the small ones. */
    n = 8;
    assert_int_equal(mbt_session_grant_warm(&a, 128u << 10, 0, sizes, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sizes[0], 128u << 10);
    assert_true(mbt_status_num(&d, "grant_creates") == created + 1);
    mbt_session_close(&a);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static struct mbt_daemon reclaim_daemon(const char *timeout_ms, const char *conf)
{
    const char *extra[] = { "--frame-size", "64K", "--budget", "512K", "--reclaim-timeout",
                            timeout_ms, conf ? "--config" : NULL, conf, NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    return d;
}

/* Start `mbtest_client alloc` of `frames` frames for tenant "needy", whose
 * grant waits, and take the RECLAIM notice that session a gets for it,
 * asking for `asked` bytes. argv keeps the command, for running it again. */
struct needy {
    char size[32];
    const char *argv[5];
};

static pid_t needy_asks(struct mbt_daemon *d, struct needy *n, unsigned frames,
                        struct mbt_session *a, uint64_t asked)
{
    snprintf(n->size, sizeof(n->size), "%u", frames * FRAME);
    const char *argv[] = { MB_CLIENT_BIN, "alloc", n->size, "needy", NULL };
    memcpy(n->argv, argv, sizeof(argv));
    pid_t b = mbt_spawn(d, n->argv, NULL, NULL);
    int kind;
    uint64_t bytes;
    assert_int_equal(mbt_session_notice(a, 10000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__RECLAIM);
    assert_int_equal(bytes, asked);
    return b;
}

/* The daemon's reclaim counters (mbctl metrics); -1 skips one. */
static void expect_reclaim(struct mbt_daemon *d, int notices, int bytes, int short_, int timeouts,
                           int ignored)
{
    const char *m[] = { "metrics", NULL };
    struct json *j = mbt_ctl_json(d, NULL, m);
    assert_non_null(j);
    const char *key[] = { "reclaim_notices", "reclaim_bytes", "reclaim_short", "reclaim_timeouts",
                          "reclaim_ignored" };
    const int want[] = { notices, bytes, short_, timeouts, ignored };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (want[i] >= 0)
            assert_int_equal((int)json_num(j, key[i]), want[i]);
    json_free(j);
}

static void reclaim_notice_completes_grant(void **state)
{
    struct mbt_daemon d = reclaim_daemon("20000", NULL);
    struct mbt_session a;
    assert_int_equal(mbt_session_open(&d, "cachey", &a), 0);
    assert_int_equal(mbt_session_grant(&a, 6 * FRAME), 0);
    assert_int_equal(mbt_session_cache(&a, 6 * FRAME), 0);
    /* B needs 4 of 8 frames: 2 are free, 2 must come back from A. */
    struct needy n;
    pid_t b = needy_asks(&d, &n, 4, &a, 2 * FRAME);
    assert_int_equal(mbt_session_return(&a, a.frame_ids, 2), 0);
    assert_int_equal(mbt_wait(b), 0);
    assert_int_equal(mbt_session_cache(&a, 4 * FRAME), 0);
    expect_reclaim(&d, 1, 2 * FRAME, 0, 0, -1);
    /* By hand: every session of the tenant is asked for all its cache. */
    const char *rc_args[] = { "reclaim", "cachey", NULL };
    struct json *j = mbt_ctl_json(&d, NULL, rc_args);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "sessions"), 1);
    assert_int_equal((int)json_num(j, "cached"), 4 * FRAME);
    json_free(j);
    int kind;
    uint64_t bytes;
    assert_int_equal(mbt_session_notice(&a, 10000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__RECLAIM);
    assert_int_equal(bytes, 0);
    const char *nobody[] = { "reclaim", "nosuchtenant", NULL };
    int rc;
    assert_null(mbt_ctl_json(&d, &rc, nobody));
    assert_int_equal(rc, 1);
    mbt_session_close(&a);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static void reclaim_deadline_and_order(void **state)
{
    char conf[64];
    mbt_write_config(conf, sizeof(conf), "[tenant guarded]\nmin = 256K\n");
    struct mbt_daemon d = reclaim_daemon("300", conf);
    struct mbt_session g, p;
    assert_int_equal(mbt_session_open(&d, "guarded", &g), 0);
    assert_int_equal(mbt_session_open(&d, "plain", &p), 0);
    assert_int_equal(mbt_session_grant(&g, 4 * FRAME), 0);
    assert_int_equal(mbt_session_grant(&p, 3 * FRAME), 0);
    assert_int_equal(mbt_session_cache(&g, 4 * FRAME), 0);
    assert_int_equal(mbt_session_cache(&p, 2 * FRAME), 0);
    /* One frame short: the tenant above its min is asked first, the guarded
     * one (at its min, with the larger cache) only once the first lets its
     * deadline pass. Nobody answers: MB_ENOMEM at the second deadline. */
    char size[32], buf[1024];
    snprintf(size, sizeof(size), "%u", 2 * FRAME);
    const char *b_argv[] = { MB_CLIENT_BIN, "alloc", size, "needy", NULL };
    assert_int_equal(mbt_run(&d, b_argv, buf, sizeof(buf), false), 20 - MB_ENOMEM);
    int kind;
    uint64_t bytes;
    assert_int_equal(mbt_session_notice(&p, 5000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__RECLAIM);
    assert_int_equal(bytes, FRAME);
    assert_int_equal(mbt_session_notice(&g, 5000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__RECLAIM);
    assert_int_equal(bytes, FRAME);
    const char *m[] = { "metrics", NULL };
    struct json *j = mbt_ctl_json(&d, NULL, m);
    assert_int_equal((int)json_num(j, "reclaim_notices"), 2);
    assert_int_equal((int)json_num(j, "reclaim_timeouts"), 1);
    assert_true(json_num(j, "reclaim_ignored") >= 1);
    json_free(j);
    /* Without cache reports nobody can help: refused at once, no notice. */
    assert_int_equal(mbt_session_cache(&p, 0), 0);
    assert_int_equal(mbt_session_cache(&g, 0), 0);
    assert_int_equal(mbt_run(&d, b_argv, buf, sizeof(buf), false), 20 - MB_ENOMEM);
    j = mbt_ctl_json(&d, NULL, m);
    assert_int_equal((int)json_num(j, "reclaim_notices"), 2);
    json_free(j);
    mbt_session_close(&g);
    mbt_session_close(&p);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

/* A session answers a notice with less than the waiting grant needs: the
 * grant is refused then, not at the 20 s deadline (past the client's 5 s
 * timeout, which would make it MB_EUNAVAIL). One that answers returning
 * nothing while it reports a cache is asked last from then on. */
static void reclaim_answers_end_the_wait(void **state)
{
    struct mbt_daemon d = reclaim_daemon("20000", NULL);
    struct mbt_session a;
    assert_int_equal(mbt_session_open(&d, "cachey", &a), 0);
    assert_int_equal(mbt_session_grant(&a, 6 * FRAME), 0);
    assert_int_equal(mbt_session_cache(&a, 6 * FRAME), 0);
    /* B needs 4 of 8 frames: 2 are free, 2 are asked of A, which returns
     * one and has nothing more. */
    struct needy n;
    pid_t b = needy_asks(&d, &n, 4, &a, 2 * FRAME);
    assert_int_equal(mbt_session_return(&a, a.frame_ids, 1), 0);
    assert_int_equal(mbt_session_answer(&a, 0), 0);
    assert_int_equal(mbt_wait(b), 20 - MB_ENOMEM);
    expect_reclaim(&d, 1, FRAME, 1, 0, 0);
    /* A reports its 5 frames cached again, is asked for the one missing,
     * and answers without returning it. */
    assert_int_equal(mbt_session_cache(&a, 5 * FRAME), 0);
    b = needy_asks(&d, &n, 4, &a, FRAME);
    assert_int_equal(mbt_session_answer(&a, 5 * FRAME), 0);
    assert_int_equal(mbt_wait(b), 20 - MB_ENOMEM);
    expect_reclaim(&d, 2, FRAME, 2, 0, 1);
    /* Its report no longer defers a grant: refused at once, no notice. */
    char buf[1024];
    assert_int_equal(mbt_run(&d, n.argv, buf, sizeof(buf), false), 20 - MB_ENOMEM);
    expect_reclaim(&d, 2, FRAME, 2, 0, 1);
    mbt_session_close(&a);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A session a waiting grant has asked for frames cannot answer while a
 * grant of its own waits: its own grant that does not fit is refused at
 * once instead of queued behind (each would wait for the other until the
 * deadline); it then answers, and the first grant completes. */
static void reclaim_asked_session_not_queued(void **state)
{
    struct mbt_daemon d = reclaim_daemon("20000", NULL);
    struct mbt_session a, c;
    assert_int_equal(mbt_session_open(&d, "cachey", &a), 0);
    assert_int_equal(mbt_session_open(&d, "other", &c), 0);
    assert_int_equal(mbt_session_grant(&a, 5 * FRAME), 0);
    assert_int_equal(mbt_session_cache(&a, 5 * FRAME), 0);
    assert_int_equal(mbt_session_grant(&c, 2 * FRAME), 0);
    assert_int_equal(mbt_session_cache(&c, 2 * FRAME), 0);
    /* 1 frame is free; B needs 4: A, with the larger cache, is asked for 3. */
    struct needy n;
    pid_t b = needy_asks(&d, &n, 4, &a, 3 * FRAME);
    /* A asks for 2 more: C's cache could cover the one missing, but A's
     * grant would wait behind B's, which waits for A. */
    assert_int_equal(mbt_session_grant(&a, 2 * FRAME), MB_ENOMEM);
    assert_int_equal(mbt_session_return(&a, a.frame_ids, 3), 0);
    assert_int_equal(mbt_session_answer(&a, 2 * FRAME), 0);
    assert_int_equal(mbt_wait(b), 0);
    expect_reclaim(&d, 1, 3 * FRAME, -1, 0, 0);
    mbt_session_close(&a);
    mbt_session_close(&c);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A caches most of the budget and idles; B's request succeeds by reclaiming
 * from A; A's live data is untouched. Needs libmbclient to report its cache
 * (Cache) and answer RECLAIM notices: skipped, visibly, until it does. */
static void elastic_reclaim_end_to_end(void **state)
{
    struct mbt_daemon d = reclaim_daemon("5000", NULL);
    char total[32], keep[32];
    snprintf(total, sizeof(total), "%u", 7 * FRAME);
    snprintf(keep, sizeof(keep), "%u", 1 * FRAME);
    const char *a_argv[] = { "/usr/bin/env", "MOONBRIGHT_CACHE=64M", MB_CACHER_BIN, total, keep, "21",
                             "idle", NULL };
    int out, in;
    pid_t a = mbt_spawn(&d, a_argv, &out, &in);
    char line[128];
    assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "ready");
    double cached = 0;
    for (int i = 0; i < 40 && cached <= 0; i++) {   /* a report may follow the free */
        struct json *j = mbt_status(&d);
        const struct json *t = json_get(j, "tenants");
        for (size_t k = 0; t && k < t->n; k++)
            if ((pid_t)json_num(&t->kids[k], "pid") == a)
                cached = json_num(&t->kids[k], "cached");
        json_free(j);
        if (cached <= 0)
            mbt_sleep_ms(50);
    }
    if (cached <= 0) {
        close(in);
        mbt_wait(a);
        close(out);
        mbt_daemon_stop(&d);
        fprintf(stderr, "elastic reclaim end to end: libmbclient does not report its cache yet "
                        "(Cache request); skipped\n");
        skip();
    }
    char need[32], buf[1024];
    snprintf(need, sizeof(need), "%u", 6 * FRAME);
    const char *b_argv[] = { MB_CLIENT_BIN, "pattern", need, "4", "busy", NULL };
    assert_int_equal(mbt_run(&d, b_argv, buf, sizeof(buf), false), 0);
    assert_int_equal(write(in, "check\n", 6), 6);
    assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
    assert_true(strncmp(line, "intact", 6) == 0);
    close(in);
    assert_int_equal(mbt_wait(a), 0);
    close(out);
    assert_true(mbt_status_num(&d, "reclaim_notices") >= 1);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

int main(void)
{
    /* These tests count frames of one unit each (quotas, kills and reclaim
     * in frames); the frame plan's large frames have tests of their own. */
    setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tenant_quota_and_other_tenant),
        cmocka_unit_test(grant_room_counts_others_min),
        cmocka_unit_test(uid_quota),
        cmocka_unit_test(non_admin_refused_victim_intact),
        cmocka_unit_test(foreign_frames_refused),
        cmocka_unit_test(kill_withdraws_until_exit),
        cmocka_unit_test(reclaim_notice_completes_grant),
        cmocka_unit_test(reclaim_deadline_and_order),
        cmocka_unit_test(reclaim_answers_end_the_wait),
        cmocka_unit_test(reclaim_asked_session_not_queued),
        cmocka_unit_test(elastic_reclaim_end_to_end),
        cmocka_unit_test(warm_grant_takes_free_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
