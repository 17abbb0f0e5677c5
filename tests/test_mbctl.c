/* test_mbctl.c: every mbctl command against a running moonbrightd, with
 * --json parsed and checked against what the test set up; Prometheus text
 * from metrics; top's refreshes and q; --help for every command; exit codes
 * for usage errors and for a daemon that is not running or was killed;
 * options after the command word; the wording of counts and refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "commands.h"
#include "harness.h"

#define FRAME (64u << 10)

static int ctl(const struct mbt_daemon *d, char *buf, size_t len, const char *const *args)
{
    const char *argv[32] = { MB_CTL_BIN, "--runtime-dir", d->dir };
    int n = 3;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return mbt_run(d, argv, buf, len, true);
}

static void every_command_json(void **state)
{
    static const char *const extra[] = { "--frame-size", "64K", "--budget", "8M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session a;
    assert_int_equal(mbt_session_open(&d, "alpha", &a), 0);
    assert_int_equal(mbt_session_grant(&a, 3 * FRAME), 0);
    assert_int_equal(mbt_session_cache(&a, FRAME), 0);
    int rc;

    const char *st[] = { "status", NULL };
    struct json *j = mbt_ctl_json(&d, &rc, st);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "frames_granted"), 3);
    assert_int_equal((int)json_num(j, "bytes_granted"), 3 * FRAME);
    assert_int_equal((int)json_num(j, "budget_bytes"), 8 << 20);
    assert_int_equal(json_get(j, "draining")->num, 0);
    const struct json *s = json_get(j, "tenants");
    assert_int_equal(s->n, 1);
    assert_string_equal(json_get(&s->kids[0], "name")->str, "alpha");
    assert_int_equal((int)json_num(&s->kids[0], "session"), (int)a.id);
    assert_int_equal((int)json_num(&s->kids[0], "cached"), FRAME);
    json_free(j);

    const char *tn[] = { "tenants", NULL };
    j = mbt_ctl_json(&d, &rc, tn);
    assert_non_null(j);
    const struct json *t = json_get(j, "tenants");
    assert_int_equal(t->n, 1);
    assert_string_equal(json_get(&t->kids[0], "name")->str, "alpha");
    assert_int_equal((int)json_num(&t->kids[0], "sessions"), 1);
    assert_int_equal((int)json_num(&t->kids[0], "bytes"), 3 * FRAME);
    assert_int_equal((int)json_num(&t->kids[0], "room"), (8 << 20) - 3 * FRAME);   /* the budget's */
    assert_int_equal(json_get(&t->kids[0], "max")->type, JSON_NULL);
    assert_int_equal((int)json_num(&t->kids[0], "min"), 0);
    assert_int_equal((int)json_num(&t->kids[0], "cached"), FRAME);
    json_free(j);

    const char *fr[] = { "frames", NULL };
    j = mbt_ctl_json(&d, &rc, fr);
    assert_non_null(j);
    const struct json *f = json_get(j, "frames");
    int granted = 0;
    for (size_t i = 0; i < f->n; i++) {
        assert_int_equal((int)json_num(&f->kids[i], "bytes"), FRAME);
        if (strcmp(json_get(&f->kids[i], "state")->str, "granted") == 0) {
            granted++;
            assert_int_equal((int)json_num(&f->kids[i], "session"), (int)a.id);
            assert_string_equal(json_get(&f->kids[i], "tenant")->str, "alpha");
        }
    }
    assert_int_equal(granted, 3);
    json_free(j);

    const char *q[] = { "quota", "beta", "1M", NULL };
    j = mbt_ctl_json(&d, &rc, q);
    assert_non_null(j);
    assert_string_equal(json_get(j, "tenant")->str, "beta");
    assert_int_equal(json_get(j, "previous_max")->type, JSON_NULL);
    assert_int_equal((int)json_num(j, "max"), 1 << 20);
    json_free(j);

    const char *rcl[] = { "reclaim", NULL };
    j = mbt_ctl_json(&d, &rc, rcl);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "sessions"), 1);
    assert_int_equal((int)json_num(j, "cached"), FRAME);
    json_free(j);
    int kind;
    uint64_t bytes;
    assert_int_equal(mbt_session_notice(&a, 10000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__RECLAIM);

    const char *dr[] = { "drain", NULL };
    j = mbt_ctl_json(&d, &rc, dr);
    assert_non_null(j);
    assert_int_equal(json_get(j, "draining")->num, 1);
    json_free(j);
    assert_int_equal(mbt_session_notice(&a, 10000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__DRAINING);
    assert_int_equal(mbt_session_grant(&a, FRAME), MB_EBUSY);
    const char *undr[] = { "drain", "off", NULL };
    j = mbt_ctl_json(&d, &rc, undr);
    assert_non_null(j);
    assert_int_equal(json_get(j, "draining")->num, 0);
    json_free(j);
    assert_int_equal(mbt_session_grant(&a, FRAME), 0);

    const char *me[] = { "metrics", NULL };
    j = mbt_ctl_json(&d, &rc, me);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "frames_granted"), 4);
    const struct json *cmds = json_get(j, "commands");
    bool saw_grant = false;
    for (size_t i = 0; i < cmds->n; i++) {
        const struct json *c = &cmds->kids[i];
        const struct json *b = json_get(c, "buckets");
        assert_true(b->n > 0);
        /* Cumulative buckets never decrease and never pass the count. */
        for (size_t k = 1; k < b->n; k++)
            assert_true(json_num(&b->kids[k], "count") >= json_num(&b->kids[k - 1], "count"));
        assert_true(json_num(&b->kids[b->n - 1], "count") <= json_num(c, "count"));
        if (strcmp(json_get(c, "name")->str, "grant") == 0) {
            saw_grant = true;
            assert_int_equal((int)json_num(c, "count"), 3);   /* one refused while draining */
            assert_int_equal((int)json_num(c, "errors"), 1);
        }
    }
    assert_true(saw_grant);
    json_free(j);

    const char *ki[] = { "kill", "999", NULL };
    assert_null(mbt_ctl_json(&d, &rc, ki));
    assert_int_equal(rc, 1);
    char sid[32];
    snprintf(sid, sizeof(sid), "%llu", (unsigned long long)a.id);
    const char *ka[] = { "kill", sid, NULL };
    j = mbt_ctl_json(&d, &rc, ka);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "session"), (int)a.id);
    assert_int_equal((int)json_num(j, "frames"), 4);
    json_free(j);
    assert_int_equal(mbt_session_notice(&a, 10000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__KILLED);
    mbt_session_close(&a);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static void text_metrics_and_top(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, NULL), 0);
    struct mbt_session a;
    assert_int_equal(mbt_session_open(&d, "gamma", &a), 0);
    assert_int_equal(mbt_session_grant(&a, 1), 0);
    static char buf[1 << 18];
    const char *me[] = { "metrics", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), me), 0);
    static const char *const want[] = {
        "# TYPE moonbright_frames gauge\n",
        "moonbright_frames{device=\"0\",state=\"granted\"} 1\n",
        "moonbright_sessions{device=\"0\"} 1\n",
        "moonbright_tenant_bytes{device=\"0\",tenant=\"gamma\"} 2097152\n",
        "moonbright_requests_total{device=\"0\",command=\"grant\"} 1\n",
        "# TYPE moonbright_request_duration_seconds histogram\n",
        "moonbright_request_duration_seconds_bucket{device=\"0\",command=\"grant\",le=\"+Inf\"} 1\n",
        "moonbright_request_duration_seconds_count{device=\"0\",command=\"grant\"} 1\n",
        "moonbright_refused_total{device=\"0\",reason=\"permission\"} 0\n",
        "moonbright_malformed_total{device=\"0\"} 0\n",
        "moonbright_scrubs_total{device=\"0\"} ",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (!strstr(buf, want[i]))
            fail_msg("metrics lacks: %s", want[i]);
    }
    /* Every line is a comment or "name{labels} value". */
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        assert_true(strncmp(line, "moonbright_", 11) == 0);
        char *sp = strrchr(line, ' ');
        assert_non_null(sp);
        char *end;
        strtod(sp + 1, &end);
        assert_true(*end == '\0');
    }
    const char *top[] = { "top", "-n", "2", "--interval", "20", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), top), 0);
    int frames = 0;
    for (char *p = buf; (p = strstr(p, "mbctl top,")); p++)
        frames++;
    assert_int_equal(frames, 2);
    assert_non_null(strstr(buf, "gamma"));
    const char *once[] = { "top", "--once", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), once), 0);
    assert_non_null(strstr(buf, "TENANT"));
    const char *human[] = { "tenants", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), human), 0);
    assert_non_null(strstr(buf, "gamma"));
    assert_non_null(strstr(buf, "unlimited"));
    const char *fr[] = { "frames", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), fr), 0);
    assert_non_null(strstr(buf, "granted"));
    mbt_session_close(&a);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static void help_usage_and_no_daemon(void **state)
{
    struct mbt_daemon none = { .dir = "/tmp/mbtest-no-such-dir" };
    static char buf[8192];
    const char *const names[] = { "status", "tenants", "frames", "quota", "reclaim", "drain", "kill",
                                  "metrics", "top" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *help[] = { names[i], "--help", NULL };
        assert_int_equal(ctl(&none, buf, sizeof(buf), help), 0);
        assert_non_null(strstr(buf, "usage: mbctl"));
        assert_non_null(strstr(buf, names[i]));
        /* `mbctl help COMMAND` says the same */
        static char again[8192];
        const char *help2[] = { "help", names[i], NULL };
        assert_int_equal(ctl(&none, again, sizeof(again), help2), 0);
        assert_string_equal(again, buf);
    }
    const char *help_bad[] = { "help", "nothing", NULL };
    assert_int_equal(ctl(&none, buf, sizeof(buf), help_bad), 2);
    assert_non_null(strstr(buf, "unknown command 'nothing'"));
    /* The top-level help lists every command of the table. */
    const char *top_help[] = { "--help", NULL }, *top_help2[] = { "help", NULL };
    assert_int_equal(ctl(&none, buf, sizeof(buf), top_help2), 0);
    assert_non_null(strstr(buf, "usage: mbctl"));
    assert_int_equal(ctl(&none, buf, sizeof(buf), top_help), 0);
    for (int i = 0; i < MB_CMD_COUNT; i++)
        if (mb_commands[i].flags & MB_CMD_CLI)
            assert_non_null(strstr(buf, mb_commands[i].name));
    /* Every command without a daemon: a clear error and exit 3. */
    const char *const runs[][4] = {
        { "status" }, { "tenants" }, { "frames" }, { "quota", "x", "1G" }, { "reclaim" }, { "drain" },
        { "kill", "1" }, { "metrics" }, { "top", "--once" },
    };
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        assert_int_equal(ctl(&none, buf, sizeof(buf), runs[i]), 3);
        assert_non_null(strstr(buf, "not running"));
    }
    /* Usage errors: exit 2, before any daemon is needed. */
    const char *const bad[][4] = {
        { "quota", "x" }, { "quota", "x", "lots" }, { "kill", "abc" }, { "kill", "-1" },
        { "kill", "18446744073709551616" }, { "drain", "sideways" }, { "top", "-n", "0" },
        { "status", "extra" }, { "frobnicate" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(ctl(&none, buf, sizeof(buf), bad[i]), 2);
}

/* After SIGKILL the sockets stay behind: mbctl reads the lock file's pid
 * and says the daemon is not running at once (an hour's --timeout would
 * otherwise be waited out). */
static void stale_runtime_dir(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, NULL), 0);
    pid_t pid = d.pid;
    assert_int_equal(kill(pid, SIGKILL), 0);
    /* Dead but not yet reaped: /proc says Z. */
    char stat_path[64], st[256] = "";
    snprintf(stat_path, sizeof(stat_path), "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(stat_path, "r");
        assert_non_null(f);
        assert_non_null(fgets(st, sizeof(st), f));
        fclose(f);
        if (strstr(st, ") Z "))
            break;
        usleep(10000);
    }
    assert_non_null(strstr(st, ") Z "));
    char sock[200];
    snprintf(sock, sizeof(sock), "%s/gpu0.fds", d.dir);
    assert_int_equal(access(sock, F_OK), 0);   /* the stale socket is there */

    static char buf[4096];
    char want[128];
    snprintf(want, sizeof(want), "moonbrightd (pid %d) is not running", (int)pid);
    const char *const runs[][4] = { { "status" }, { "top", "--once" }, { "kill", "1" } };
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        const char *argv[16] = { MB_CTL_BIN, "--runtime-dir", d.dir, "--timeout", "3600000" };
        int n = 5;
        for (int k = 0; k < 4 && runs[i][k]; k++)
            argv[n++] = runs[i][k];
        argv[n] = NULL;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(mbt_run(&d, argv, buf, sizeof(buf), true), 3);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (!strstr(buf, want))
            fail_msg("mbctl %s said '%s', not '%s'", runs[i][0], buf, want);
        /* Sanity only: an answer at all proves the hour-long timeout was
         * not waited out; this bound is far from any machine's speed. */
        assert_true(t1.tv_sec - t0.tv_sec < 60);
    }
    assert_int_equal(mbt_daemon_wait(&d, 5000), 128 + SIGKILL);
}

/* top quits on q (from a pipe here; a terminal is read key by key). */
static void top_quits_on_q(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, NULL), 0);
    const char *argv[] = { MB_CTL_BIN, "--runtime-dir", d.dir, "top", "--interval", "50", NULL };
    int out, in;
    pid_t pid = mbt_spawn(&d, argv, &out, &in);
    assert_true(pid > 0);
    char line[512];
    bool drawn = false;
    while (!drawn && mbt_read_line(out, line, sizeof(line), 10000) >= 0)
        drawn = strstr(line, "mbctl top,") && strstr(line, "q quits");
    assert_true(drawn);
    assert_int_equal(write(in, "q", 1), 1);
    /* Drain what it still prints, until it exits and closes its output. */
    while (mbt_read_line(out, line, sizeof(line), 10000) >= 0)
        ;
    assert_int_equal(mbt_wait(pid), 0);
    close(in);
    close(out);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Options after the command word; plurals; what kill says of an unknown
 * id; drain's help matches its arguments. */
static void options_anywhere_and_wording(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, NULL), 0);
    struct mbt_session a;
    assert_int_equal(mbt_session_open(&d, "solo", &a), 0);
    assert_int_equal(mbt_session_grant(&a, 2u << 20), 0);
    assert_int_equal(mbt_session_cache(&a, 2u << 20), 0);   /* so reclaim asks it */
    /* The runner's environment points elsewhere: only the option finds d. */
    struct mbt_daemon none = { .dir = "/tmp/mbtest-no-such-dir" };
    static char buf[1 << 16];
    const char *after[] = { MB_CTL_BIN, "status", "--json", "--runtime-dir", d.dir, NULL };
    assert_int_equal(mbt_run(&none, after, buf, sizeof(buf), false), 0);
    struct json *j = json_parse(buf);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "device"), 0);
    json_free(j);
    char eq[200];
    snprintf(eq, sizeof(eq), "--runtime-dir=%s", d.dir);
    const char *after_eq[] = { MB_CTL_BIN, "--timeout", "5000", "tenants", eq, "--device", "0", NULL };
    assert_int_equal(mbt_run(&none, after_eq, buf, sizeof(buf), true), 0);
    assert_non_null(strstr(buf, "solo"));
    const char *bad_dev[] = { MB_CTL_BIN, "status", "--device", "nine", NULL };
    assert_int_equal(mbt_run(&none, bad_dev, buf, sizeof(buf), true), 2);
    assert_non_null(strstr(buf, "bad device 'nine'"));
    const char *no_val[] = { MB_CTL_BIN, "status", "--runtime-dir", NULL };
    assert_int_equal(mbt_run(&none, no_val, buf, sizeof(buf), true), 2);

    const char *rcl[] = { "reclaim", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), rcl), 0);
    if (!strstr(buf, "asked 1 session to"))
        fail_msg("reclaim said: %s", buf);
    const char *dr[] = { "drain", "on", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), dr), 0);
    if (!strstr(buf, "2 sessions open"))   /* solo and mbctl's own */
        fail_msg("drain said: %s", buf);
    const char *undr[] = { "drain", "off", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), undr), 0);
    const char *ki[] = { "kill", "999", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), ki), 1);
    if (!strstr(buf, "no session 999") || strstr(buf, "pointer"))
        fail_msg("kill 999 said: %s", buf);
    const char *help[] = { "drain", "--help", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), help), 0);
    assert_non_null(strstr(buf, "drain [on|off]"));
    mbt_session_close(&a);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A list too long for one message (4 000 tenants of 60-character names,
 * about 290 KiB) is cut to fit: mbctl lists the first and says how many
 * it left out, in text and in JSON, and the daemon serves on. */
static void long_lists_cut_to_fit(void **state)
{
    (void)state;
    char conf[] = "/tmp/mbtest-conf.XXXXXX";
    int fd = mkstemp(conf);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    for (int i = 0; i < 4000; i++)
        fprintf(f, "[tenant t%059d]\nmax = 1G\n", i);
    fclose(f);
    const char *extra[] = { "--frame-size", "64K", "--budget", "8M", "--config", conf, NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    int rc;
    const char *tn[] = { "tenants", NULL };
    struct json *j = mbt_ctl_json(&d, &rc, tn);
    assert_non_null(j);
    assert_int_equal(rc, 0);
    size_t listed = json_get(j, "tenants")->n;
    double omitted = json_num(j, "omitted");
    printf("  %zu tenants listed, %.0f left out\n", listed, omitted);
    assert_true(listed > 1000 && omitted > 0);
    assert_int_equal((int)listed + (int)omitted, 4000);
    json_free(j);
    static char buf[1 << 20];
    assert_int_equal(ctl(&d, buf, sizeof(buf), tn), 0);
    char want[96];
    snprintf(want, sizeof(want), "(%.0f more tenants not listed: the reply's size limit)", omitted);
    assert_non_null(strstr(buf, want));
    const char *st[] = { "status", NULL };
    assert_int_equal(ctl(&d, buf, sizeof(buf), st), 0);
    assert_true(mbt_daemon_alive(&d));
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_command_json),
        cmocka_unit_test(text_metrics_and_top),
        cmocka_unit_test(help_usage_and_no_daemon),
        cmocka_unit_test(stale_runtime_dir),
        cmocka_unit_test(top_quits_on_q),
        cmocka_unit_test(options_anywhere_and_wording),
        cmocka_unit_test(long_lists_cut_to_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
