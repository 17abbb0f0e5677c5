/* harness.c: starting and stopping a real moonbrightd, spawning client
 * programs as separate processes, reading mbctl --json. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

pid_t mbt_spawn(const struct mbt_daemon *d, const char *const *argv, int *out_fd, int *in_fd)
{
    int p[2] = { -1, -1 }, q[2] = { -1, -1 };
    if ((out_fd && pipe(p) != 0) || (in_fd && pipe(q) != 0))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        setenv("MOONBRIGHT_RUNTIME_DIR", d->dir, 1);
        if (out_fd) {
            dup2(p[1], 1);
            close(p[0]);
            close(p[1]);
        }
        int in = in_fd ? q[0] : open("/dev/null", O_RDONLY);
        dup2(in, 0);
        close(in);
        if (in_fd)
            close(q[1]);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "failed to exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (out_fd) {
        close(p[1]);
        *out_fd = p[0];
    }
    if (in_fd) {
        close(q[0]);
        *in_fd = q[1];
    }
    return pid;
}

int mbt_wait(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int mbt_read_line(int fd, char *buf, size_t len, int timeout_ms)
{
    size_t n = 0;
    while (n + 1 < len) {
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, timeout_ms) <= 0)
            return -1;
        ssize_t r = read(fd, buf + n, 1);
        if (r <= 0)
            return -1;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = '\0';
    return (int)n;
}

int mbt_run(const struct mbt_daemon *d, const char *const *argv, char *buf, size_t len, bool want_err)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        setenv("MOONBRIGHT_RUNTIME_DIR", d->dir, 1);
        dup2(p[1], 1);
        int err = want_err ? p[1] : open("/dev/null", O_WRONLY);
        dup2(err, 2);
        close(p[0]);
        close(p[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(p[0], buf + n, len - 1 - n)) > 0 && n + 1 < len)
        n += (size_t)r;
    buf[n] = '\0';
    close(p[0]);
    return mbt_wait(pid);
}

struct json *mbt_status(const struct mbt_daemon *d)
{
    char buf[65536];
    const char *argv[] = { MB_CTL_BIN, "--runtime-dir", d->dir, "status", "--json", NULL };
    if (mbt_run(d, argv, buf, sizeof(buf), false) != 0)
        return NULL;
    return json_parse(buf);
}

static pid_t running[16];

static void kill_running(void)
{
    for (size_t i = 0; i < sizeof(running) / sizeof(running[0]); i++)
        if (running[i] > 0)
            kill(running[i], SIGKILL);
}

static void track(pid_t pid, pid_t replace)
{
    static bool registered;
    if (!registered)
        registered = atexit(kill_running) == 0;
    for (size_t i = 0; i < sizeof(running) / sizeof(running[0]); i++)
        if (running[i] == replace) {
            running[i] = pid;
            return;
        }
}

bool mbt_daemon_alive(const struct mbt_daemon *d)
{
    return d->pid > 0 && waitpid(d->pid, NULL, WNOHANG) == 0;
}

int mbt_daemon_start(struct mbt_daemon *d, const char *const *extra)
{
    snprintf(d->dir, sizeof(d->dir), "/tmp/mbtest.XXXXXX");
    if (!mkdtemp(d->dir))
        return -1;
    const char *argv[32] = { MB_DAEMON_BIN, "--foreground", "--backend", "host", "--runtime-dir",
                             d->dir, "--log-level", "warn" };
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    d->pid = mbt_spawn(d, argv, NULL, NULL);
    track(d->pid, 0);
    for (int i = 0; i < 200; i++) {   /* up to 10 s, for sanitizer builds */
        struct json *j = mbt_status(d);
        if (j) {
            json_free(j);
            return 0;
        }
        if (!mbt_daemon_alive(d))
            return -1;
        sleep_ms(50);
    }
    return -1;
}

int mbt_daemon_stop(struct mbt_daemon *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    int rc = mbt_wait(d->pid);
    track(0, d->pid);
    d->pid = 0;
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "failed to remove %s\n", d->dir);
    return rc;
}
