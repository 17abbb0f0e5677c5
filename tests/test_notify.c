/* test_notify.c: moonbrightd and the sd-daemon protocol, with a real
 * NOTIFY_SOCKET (a datagram socket this test owns): READY=1 once the control
 * socket answers, WATCHDOG=1 from the loop, STATUS= lines, STOPPING=1 on
 * SIGTERM; the SIGTERM drain (no grants, DRAINING notice, exit when
 * sessions end or the drain timeout passes; a second SIGTERM exits at once). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "harness.h"

struct notify {
    int fd;
    char path[108];
    char env[128];
    int ready, watchdog, status, stopping;
    long mainpid;
};

static void notify_open(struct notify *n)
{
    memset(n, 0, sizeof(*n));
    snprintf(n->path, sizeof(n->path), "/tmp/mbtest-notify.%d.%ld", (int)getpid(), random());
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(n->fd >= 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", n->path);
    unlink(n->path);
    assert_int_equal(bind(n->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    snprintf(n->env, sizeof(n->env), "NOTIFY_SOCKET=%s", n->path);
}

static void notify_close(struct notify *n)
{
    close(n->fd);
    unlink(n->path);
}

/* Read datagrams until `*counter` reaches `want` or timeout_ms passes
 * without any datagram. Returns the counter. */
static int notify_until(struct notify *n, int *counter, int want, int timeout_ms)
{
    while (*counter < want) {
        struct pollfd p = { n->fd, POLLIN, 0 };
        if (poll(&p, 1, timeout_ms) <= 0)
            break;
        char buf[1024];
        ssize_t len = recv(n->fd, buf, sizeof(buf) - 1, 0);
        if (len <= 0)
            break;
        buf[len] = '\0';
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
            n->ready += strcmp(line, "READY=1") == 0;
            n->watchdog += strcmp(line, "WATCHDOG=1") == 0;
            n->stopping += strcmp(line, "STOPPING=1") == 0;
            n->status += strncmp(line, "STATUS=", 7) == 0;
            if (strncmp(line, "MAINPID=", 8) == 0)
                n->mainpid = atol(line + 8);
        }
    }
    return *counter;
}

static int ctl_status_rc(const struct mbt_daemon *d)
{
    char buf[8192];
    const char *argv[] = { MB_CTL_BIN, "--runtime-dir", d->dir, "status", NULL };
    return mbt_run(d, argv, buf, sizeof(buf), false);
}

static void ready_watchdog_stopping(void **state)
{
    struct notify n;
    notify_open(&n);
    const char *env[] = { n.env, "WATCHDOG_USEC=200000", "WATCHDOG_PID=self", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_spawn_env(&d, NULL, env), 0);
    assert_int_equal(notify_until(&n, &n.ready, 1, 10000), 1);
    assert_int_equal(n.mainpid, d.pid);
    /* READY=1 came after the sockets were bound: the control socket answers. */
    assert_int_equal(ctl_status_rc(&d), 0);
    assert_true(n.status >= 1);
    /* The loop keeps sending WATCHDOG=1. */
    assert_int_equal(notify_until(&n, &n.watchdog, 5, 10000), 5);
    assert_int_equal(ctl_status_rc(&d), 0);
    assert_int_equal(notify_until(&n, &n.watchdog, 8, 10000), 8);
    kill(d.pid, SIGTERM);
    assert_int_equal(notify_until(&n, &n.stopping, 1, 10000), 1);
    assert_int_equal(mbt_daemon_wait(&d, 20000), 0);
    assert_int_equal(n.ready, 1);
    notify_close(&n);
}

static void watchdog_for_another_pid_is_off(void **state)
{
    struct notify n;
    notify_open(&n);
    const char *env[] = { n.env, "WATCHDOG_USEC=100000", "WATCHDOG_PID=1", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_spawn_env(&d, NULL, env), 0);
    assert_int_equal(notify_until(&n, &n.ready, 1, 10000), 1);
    assert_int_equal(ctl_status_rc(&d), 0);
    kill(d.pid, SIGTERM);
    assert_int_equal(notify_until(&n, &n.stopping, 1, 10000), 1);
    assert_int_equal(mbt_daemon_wait(&d, 20000), 0);
    assert_int_equal(n.watchdog, 0);
    notify_close(&n);
}

static void sigterm_drains_then_exits(void **state)
{
    struct notify n;
    notify_open(&n);
    const char *env[] = { n.env, NULL };
    const char *extra[] = { "--frame-size", "64K", "--budget", "8M", "--drain-timeout", "120", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start_env(&d, extra, env), 0);
    const char *hold[] = { MB_CLIENT_BIN, "hold", "262144", "8", "stayer", NULL };
    int out, in;
    pid_t holder = mbt_spawn(&d, hold, &out, &in);
    char line[128];
    assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
    assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "ready");
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "watcher", &s), 0);

    kill(d.pid, SIGTERM);
    assert_int_equal(notify_until(&n, &n.stopping, 1, 10000), 1);
    int kind;
    uint64_t bytes;
    assert_int_equal(mbt_session_notice(&s, 10000, &kind, &bytes), 0);
    assert_int_equal(kind, MB__NOTICE__KIND__DRAINING);
    /* Still answering, but granting nothing. */
    struct json *j = mbt_status(&d);
    assert_non_null(j);
    assert_int_equal(json_get(j, "draining")->num, 1);
    json_free(j);
    assert_int_equal(mbt_session_grant(&s, 65536), MB_EBUSY);
    char buf[512];
    const char *more[] = { MB_CLIENT_BIN, "alloc", "65536", NULL };
    assert_int_equal(mbt_run(&d, more, buf, sizeof(buf), false), 20 - MB_EBUSY);
    assert_true(mbt_daemon_alive(&d));
    /* The holder's memory is intact; once every session ends, it exits. */
    assert_int_equal(write(in, "check\n", 6), 6);
    assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "intact");
    close(in);
    assert_int_equal(mbt_wait(holder), 0);
    close(out);
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_wait(&d, 30000), 0);
    notify_close(&n);
}

static void second_sigterm_and_drain_timeout(void **state)
{
    const char *hold[] = { MB_CLIENT_BIN, "hold", "65536", "8", "stayer", NULL };
    const char *timeouts[] = { "600", "0.2" };
    for (int round = 0; round < 2; round++) {
        const char *extra[] = { "--drain-timeout", timeouts[round], NULL };
        struct mbt_daemon d;
        assert_int_equal(mbt_daemon_start(&d, extra), 0);   /* no NOTIFY_SOCKET: quietly */
        int out, in;
        pid_t holder = mbt_spawn(&d, hold, &out, &in);
        char line[128];
        assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
        assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
        assert_string_equal(line, "ready");
        kill(d.pid, SIGTERM);
        if (round == 0) {
            /* Draining with a session that stays: a second SIGTERM ends it. */
            struct json *j = NULL;
            for (int i = 0; i < 100 && !(j && json_get(j, "draining")->num == 1); i++) {
                json_free(j);
                j = mbt_status(&d);
            }
            assert_non_null(j);
            assert_int_equal(json_get(j, "draining")->num, 1);
            json_free(j);
            kill(d.pid, SIGTERM);
        }
        assert_int_equal(mbt_daemon_wait(&d, 30000), 0);
        close(in);
        mbt_wait(holder);
        close(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ready_watchdog_stopping),
        cmocka_unit_test(watchdog_for_another_pid_is_off),
        cmocka_unit_test(sigterm_drains_then_exits),
        cmocka_unit_test(second_sigterm_and_drain_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
