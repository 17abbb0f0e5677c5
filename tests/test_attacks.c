/* test_attacks.c: a real moonbrightd attacked the way a local user would,
 * the attackers running as another uid (uid 65534 through setpriv, like
 * test_tenancy): chosen ZeroMQ routing ids, connection floods, clients that
 * never read their replies, tenant names bound to other uids, thousands of
 * short-lived tenants, a runtime directory or lock file prepared by someone
 * else; wire-protocol violations on the control socket; and a client
 * reconnected after a restart keeping its tenant. The
 * attacks run in this same program, started again as `test_attacks attack
 * MODE ...` under the other uid. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "fdpass.h"
#include "harness.h"
#include "wire.h"

#define NOBODY "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"

static char self_exe[4096];
/* ---- the attacker (runs as uid 65534) ---------------------------------- */

static void *dealer(void *ctx, const char *ep, const void *id, size_t id_len)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    if (id_len)
        zmq_setsockopt(s, ZMQ_ROUTING_ID, id, id_len);
    if (zmq_connect(s, ep) != 0)
        fprintf(stderr, "attacker: connect: %s\n", zmq_strerror(errno));
    return s;
}

static int send_status(void *s, uint64_t id)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Status st = MB__STATUS__INIT;
    req.id = id;
    req.body_case = MB__REQUEST__BODY_STATUS;
    req.status = &st;
    return mb_wire_send_request(s, &req);
}

/* Peers that name themselves: ids libzmq would generate next (0x00 and a
 * counter that starts at the first draws of an unseeded rand()), the same
 * id twice, then anonymous peers. Every one should be answered. */
static int attack_ids(const char *dir)
{
    void *ctx = zmq_ctx_new();
    zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, 4096);
    char ep[300];
    mb_ctl_endpoint(ep, sizeof(ep), dir, 0);
    uint32_t r[10];
    for (int i = 0; i < 10; i++)
        r[i] = (uint32_t)rand();   /* glibc's sequence before any srand() */
    static void *socks[400];
    int n = 0;
    for (int i = 0; i < 4; i++) {
        uint32_t base = r[i + 1] << 31 | r[i];
        for (uint32_t k = 0; k < 32; k++) {
            uint32_t v = base + k;
            uint8_t id[5] = { 0, (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
            socks[n++] = dealer(ctx, ep, id, sizeof(id));
        }
    }
    socks[n++] = dealer(ctx, ep, "twin", 4);
    socks[n++] = dealer(ctx, ep, "twin", 4);
    for (int i = 0; i < 32; i++)
        socks[n++] = dealer(ctx, ep, NULL, 0);
    for (int i = 0; i < n; i++)
        send_status(socks[i], 1000 + (uint64_t)i);
    int answered = 0;
    int64_t deadline = mb_now_ms() + 20000;
    for (int i = 0; i < n; i++) {
        int64_t left = deadline - mb_now_ms();
        Mb__Reply *rep;
        if (mb_wire_recv_reply(socks[i], 1000 + (uint64_t)i, left > 0 ? (int)left : 0, &rep, NULL,
                               NULL) == 0) {
            answered += rep->code == 0 && rep->body_case == MB__REPLY__BODY_STATUS;
            mb__reply__free_unpacked(rep, NULL);
        }
    }
    printf("answered %d of %d\n", answered, n);
    for (int i = 0; i < n; i++)
        zmq_close(socks[i]);
    zmq_ctx_term(ctx);
    return 0;
}

/* Connect to a listening AF_UNIX socket; the backlog may be full for a
 * moment while the daemon works through a flood. */
static int connect_unix(const char *path, int type)
{
    struct sockaddr_un sa;
    mb_chan_sockaddr(&sa, path);
    for (int tries = 0; tries < 2000; tries++) {
        int fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        close(fd);
        if (errno != EAGAIN)
            return -1;
        mbt_sleep_ms(1);
    }
    return -1;
}

/* Whether the daemon closed fd (end of file after anything it sent). */
static bool closed_by_peer(int fd)
{
    char buf[512];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0)
            continue;
        return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
}

/* Hold n handle-channel connections that never say hello and n control
 * connections that never greet; on "check", report how many the daemon
 * closed. */
static int attack_flood(const char *dir, int n)
{
    char chan[256], ctl[256];
    mb_chan_path(chan, sizeof(chan), dir, 0);
    snprintf(ctl, sizeof(ctl), "%s/gpu0.ctl", dir);
    int *fds = calloc(2 * (size_t)n, sizeof(int));
    int held[2] = { 0, 0 };
    for (int i = 0; i < 2 * n; i++) {
        fds[i] = connect_unix(i < n ? chan : ctl, i < n ? SOCK_SEQPACKET : SOCK_STREAM);
        held[i >= n] += fds[i] >= 0;
    }
    printf("held %d %d\n", held[0], held[1]);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        int closed[2] = { 0, 0 };
        for (int i = 0; i < 2 * n; i++)
            closed[i >= n] += fds[i] >= 0 && closed_by_peer(fds[i]);
        printf("closed %d %d of %d %d\n", closed[0], closed[1], held[0], held[1]);
        fflush(stdout);
    }
    for (int i = 0; i < 2 * n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return 0;
}

/* k connections send m requests for a page of the frame table each and
 * never read a reply; hold them until stdin closes. */
static int attack_noread(const char *dir, int k, int m)
{
    void *ctx = zmq_ctx_new();
    char ep[300];
    mb_ctl_endpoint(ep, sizeof(ep), dir, 0);
    void *socks[64];
    int sent = 0, one = 1, big = 100000, small = 4096, zero = 0;
    for (int i = 0; i < k && i < 64; i++) {
        socks[i] = zmq_socket(ctx, ZMQ_DEALER);
        zmq_setsockopt(socks[i], ZMQ_LINGER, &zero, sizeof(zero));   /* never delivered */
        zmq_setsockopt(socks[i], ZMQ_RCVHWM, &one, sizeof(one));
        zmq_setsockopt(socks[i], ZMQ_RCVBUF, &small, sizeof(small));
        zmq_setsockopt(socks[i], ZMQ_SNDHWM, &big, sizeof(big));
        zmq_connect(socks[i], ep);
    }
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Frames f = MB__FRAMES__INIT;
    f.start = 1;
    f.limit = 1024;
    req.body_case = MB__REQUEST__BODY_FRAMES;
    req.frames = &f;
    for (int j = 0; j < m; j++)
        for (int i = 0; i < k && i < 64; i++) {
            req.id = (uint64_t)j + 1;
            for (int tries = 0; tries < 100; tries++) {
                if (mb_wire_send_request(socks[i], &req) == 0) {
                    sent++;
                    break;
                }
                mbt_sleep_ms(10);
            }
        }
    printf("sent %d\n", sent);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof(line), stdin))
        ;
    for (int i = 0; i < k && i < 64; i++)
        zmq_close(socks[i]);
    zmq_ctx_term(ctx);
    return 0;
}

/* Hello as tenant `name` with the token of a handle channel of our own,
 * or with `stolen` (hex) when given; prints the reply's code and error. */
static int attack_hello(const char *dir, const char *name, const char *stolen)
{
    int chan = -1;
    struct mb_chan_msg w;
    if (stolen) {
        for (int i = 0; i < MB_TOKEN_BYTES; i++)
            if (sscanf(stolen + 2 * i, "%2hhx", &w.token[i]) != 1)
                return 1;
    } else if (mb_chan_open(dir, 0, 5000, &chan, &w) != 0) {
        return 1;
    }
    void *ctx = zmq_ctx_new();
    char ep[300];
    mb_ctl_endpoint(ep, sizeof(ep), dir, 0);
    void *s = dealer(ctx, ep, NULL, 0);
    Mb__Request req;
    Mb__Hello h;
    mb_wire_hello(&req, &h, w.token, name);
    req.id = 1;
    Mb__Reply *rep;
    if (mb_wire_send_request(s, &req) != 0 || mb_wire_recv_reply(s, 1, 10000, &rep, NULL, NULL) != 0)
        return 1;
    printf("hello %d %s\n", rep->code, rep->error ? rep->error : "");
    mb__reply__free_unpacked(rep, NULL);
    zmq_close(s);
    zmq_ctx_term(ctx);
    if (chan >= 0)
        close(chan);
    return 0;
}

/* Up to n sessions that said hello, their control connections closed and
 * their handle channels kept: sessions the daemon keeps; it stops at the
 * first refused (a refused control connection costs a hello's 10 s
 * wait). Reports how many it holds, then holds them until stdin closes. */
static int attack_sessions(const char *dir, int n)
{
    struct mbt_daemon d;
    memset(&d, 0, sizeof(d));
    snprintf(d.dir, sizeof(d.dir), "%s", dir);
    int *chans = calloc((size_t)n, sizeof(int)), held = 0;
    for (int i = 0; i < n; i++) {
        struct mbt_session s;
        bool ok = mbt_session_open(&d, "hoarder", &s) == 0 && s.id != 0;
        if (ok)
            chans[held++] = s.chan;
        else if (s.chan >= 0)
            close(s.chan);
        if (s.dealer)
            zmq_close(s.dealer);
        if (s.zctx)
            zmq_ctx_term(s.zctx);
        if (!ok)
            break;
    }
    printf("held %d\n", held);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof(line), stdin))
        ;
    for (int i = 0; i < held; i++)
        close(chans[i]);
    free(chans);
    return 0;
}

/* A control connection that greets, says READY and then begins a 200 KiB
 * frame it never finishes, a byte a second; on "check", reports whether
 * the daemon closed it. */
static int attack_partial(const char *dir)
{
    char ctl[256];
    snprintf(ctl, sizeof(ctl), "%s/gpu0.ctl", dir);
    int fd = connect_unix(ctl, SOCK_STREAM);
    if (fd < 0)
        return 1;
    static const uint8_t greeting[64] = { 0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0, 'N', 'U', 'L', 'L' };
    static const uint8_t ready[] = { 0x04, 28, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c', 'k', 'e',
                                     't', '-', 'T', 'y', 'p', 'e', 0, 0, 0, 6, 'D', 'E', 'A', 'L', 'E',
                                     'R' };
    static uint8_t part[1 + 8 + 100 * 1024];
    part[0] = 0x02;   /* a long frame of 200 KiB */
    uint64_t size = 200 * 1024;
    for (int i = 0; i < 8; i++)
        part[1 + i] = (uint8_t)(size >> (56 - 8 * i));
    if (write(fd, greeting, sizeof(greeting)) != (ssize_t)sizeof(greeting) ||
        write(fd, ready, sizeof(ready)) != (ssize_t)sizeof(ready))
        return 1;
    size_t off = 0;
    while (off < sizeof(part)) {
        ssize_t w = write(fd, part + off, sizeof(part) - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    printf("begun\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        uint8_t one = 0;
        bool closed = closed_by_peer(fd) || write(fd, &one, 1) != 1;
        printf("%s\n", closed ? "closed" : "open");
        fflush(stdout);
    }
    close(fd);
    return 0;
}

static int attacker_main(int argc, char **argv)
{
    const char *mode = argv[2], *dir = argc > 3 ? argv[3] : "";
    if (strcmp(mode, "ids") == 0)
        return attack_ids(dir);
    if (strcmp(mode, "flood") == 0 && argc > 4)
        return attack_flood(dir, atoi(argv[4]));
    if (strcmp(mode, "noread") == 0 && argc > 5)
        return attack_noread(dir, atoi(argv[4]), atoi(argv[5]));
    if (strcmp(mode, "hello") == 0 && argc > 4)
        return attack_hello(dir, argv[4], argc > 5 ? argv[5] : NULL);
    if (strcmp(mode, "sessions") == 0 && argc > 4)
        return attack_sessions(dir, atoi(argv[4]));
    if (strcmp(mode, "partial") == 0)
        return attack_partial(dir);
    return 2;
}

/* ---- helpers ------------------------------------------------------------ */

/* Attackers and daemons this program started itself; killed at exit so a
 * failed test leaves nothing running. */
static pid_t started[64];
static size_t n_started;

static void kill_started(void)
{
    for (size_t i = 0; i < n_started; i++)
        if (started[i] > 0 && waitpid(started[i], NULL, WNOHANG) == 0)
            kill(started[i], SIGKILL);
}

static void remember(pid_t pid)
{
    if (n_started == 0)
        atexit(kill_started);
    if (n_started < sizeof(started) / sizeof(started[0]))
        started[n_started++] = pid;
}

/* Start the attacker as uid 65534 with stdout and stdin on pipes. */
static pid_t start_attacker(const struct mbt_daemon *d, const char *const *args, int *out, int *in)
{
    const char *argv[16] = { NOBODY, self_exe, "attack" };
    int n = 6;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = mbt_spawn(d, argv, out, in);
    assert_true(pid > 0);
    remember(pid);
    return pid;
}
/* Close the attacker's stdin (it lets go of what it holds and exits) and
 * check that it exited cleanly. */
static void end_attacker(pid_t pid, int in, int out)
{
    close(in);
    assert_int_equal(mbt_wait(pid), 0);
    close(out);
}

/* Status through a raw session (fields mbctl does not print). */
static Mb__Reply *raw_status(struct mbt_session *s)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Status st = MB__STATUS__INIT;
    req.body_case = MB__REQUEST__BODY_STATUS;
    req.status = &st;
    Mb__Reply *rep = NULL;
    assert_int_equal(mbt_session_call(s, &req, &rep), 0);
    return rep;
}

/* Run moonbrightd in `dir` (which the test prepared) with its log in
 * `log`; wait for it to exit. Its exit status, or -1 when it was still
 * running after 10 s (then it is killed). */
static int run_daemon_in(const char *dir, const char *log)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        dup2(fd, 2);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        execl(MB_DAEMON_BIN, MB_DAEMON_BIN, "--foreground", "--backend", "host", "--runtime-dir",
              dir, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        mbt_sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static bool file_has(const char *path, const char *needle)
{
    static char buf[65536];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return strstr(buf, needle) != NULL;
}

static int count_lines_with(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* The daemon with its stderr in `log` (harness daemons log to the test's). */
static void start_logged(struct mbt_daemon *d, const char *log, const char *const *extra)
{
    *d = (struct mbt_daemon){ .device = 0 };
    snprintf(d->dir, sizeof(d->dir), "/tmp/mbtest.XXXXXX");
    assert_non_null(mkdtemp(d->dir));
    chmod(d->dir, 0755);
    const char *argv[24] = { MB_DAEMON_BIN, "--foreground", "--backend", "host", "--runtime-dir",
                             d->dir, "--log-level", "info" };
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 23; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    d->pid = fork();
    if (d->pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        dup2(fd, 2);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    remember(d->pid);
    for (int i = 0; i < 200; i++) {
        struct json *j = mbt_status(d);
        if (j) {
            json_free(j);
            return;
        }
        assert_true(mbt_daemon_alive(d));
        mbt_sleep_ms(50);
    }
    fail_msg("moonbrightd did not answer");
}

/* ---- the tests ---------------------------------------------------------- */

/* Peers choosing their own routing ids (ids the daemon's ZeroMQ library
 * would generate for the next anonymous peers, and one id twice) cannot
 * take the daemon down: every peer is answered under a name the daemon
 * gave it, and a legitimate client works afterwards. */
static void chosen_routing_ids_cannot_crash(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "64M", NULL };
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    int out, in;
    const char *args[] = { "ids", d.dir, NULL };
    pid_t pid = start_attacker(&d, args, &out, &in);
    close(in);
    char line[128];
    assert_true(mbt_read_line(out, line, sizeof(line), 60000) >= 0);
    assert_int_equal(mbt_wait(pid), 0);
    close(out);
    assert_string_equal(line, "answered 162 of 162");
    assert_true(mbt_daemon_alive(&d));
    char buf[1024];
    const char *legit[] = { MB_CLIENT_BIN, "pattern", "1048576", "3", "legit", NULL };
    assert_int_equal(mbt_run(&d, legit, buf, sizeof(buf), false), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A flood of connections from one uid that never say hello (handle
 * channel) or never greet (control socket): the uid's extra connections
 * are refused, the held ones are closed after the hello timeout, the log
 * says so a line a second at most, and a client of another uid is served
 * during and after the flood. */
static void connection_flood_is_bounded(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    char log[] = "/tmp/mbtest-log.XXXXXX";
    int lfd = mkstemp(log);
    assert_true(lfd >= 0);
    close(lfd);
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "64M", NULL };
    start_logged(&d, log, extra);
    int out, in;
    const char *args[] = { "flood", d.dir, "300", NULL };
    pid_t pid = start_attacker(&d, args, &out, &in);
    char line[128];
    assert_true(mbt_read_line(out, line, sizeof(line), 60000) >= 0);
    int held_chan, held_ctl;
    assert_int_equal(sscanf(line, "held %d %d", &held_chan, &held_ctl), 2);
    assert_true(held_chan > 0 && held_ctl > 0);
    /* Served while the flood holds its connections. */
    char buf[1024];
    const char *legit[] = { MB_CLIENT_BIN, "pattern", "1048576", "3", "legit", NULL };
    assert_int_equal(mbt_run(&d, legit, buf, sizeof(buf), false), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "probe", &s), 0);
    Mb__Reply *rep = raw_status(&s);
    assert_true(rep->status->conns_refused > 0);   /* past the uid's caps */
    mb__reply__free_unpacked(rep, NULL);
    /* The hello and handshake timeouts (3 s) close what the flood holds. */
    int closed_chan = 0, closed_ctl = 0, c_held, k_held;
    for (int i = 0; i < 20 && (closed_chan < held_chan || closed_ctl < held_ctl); i++) {
        mbt_sleep_ms(1000);
        assert_int_equal(write(in, "check\n", 6), 6);
        assert_true(mbt_read_line(out, line, sizeof(line), 30000) >= 0);
        assert_int_equal(sscanf(line, "closed %d %d of %d %d", &closed_chan, &closed_ctl, &c_held,
                                &k_held), 4);
    }
    assert_int_equal(closed_chan, held_chan);
    assert_int_equal(closed_ctl, held_ctl);
    end_attacker(pid, in, out);
    rep = raw_status(&s);
    assert_true(rep->status->hello_timeouts > 0);
    mb__reply__free_unpacked(rep, NULL);
    mbt_session_close(&s);
    assert_true(mbt_daemon_alive(&d));
    assert_int_equal(mbt_run(&d, legit, buf, sizeof(buf), false), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    /* Hundreds of refusals and timeouts, a few lines of log. */
    int lines = count_lines_with(log, "refused a ") + count_lines_with(log, "sent no hello") +
                count_lines_with(log, "control connection of");
    assert_true(lines >= 1);
    assert_true(lines <= 40);
    unlink(log);
}

/* The descriptor limit that leaves process pid exactly `room` new
 * descriptors (new ones take the lowest free numbers below the limit). */
static int limit_with_room(pid_t pid, int room)
{
    static bool used[4096];
    memset(used, 0, sizeof(used));
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    for (struct dirent *e; dir && (e = readdir(dir));)
        if (e->d_name[0] != '.' && atoi(e->d_name) < 4096)
            used[atoi(e->d_name)] = true;
    if (dir)
        closedir(dir);
    int n = 0;
    for (int free_below = 0; free_below < room; n++)
        free_below += !used[n];
    return n;
}

/* The daemon out of descriptors (its limit lowered under it, below what
 * its caps assume) while a uid floods both sockets: connections are
 * refused cleanly (the spare descriptor accepts and closes them), the loop
 * does not spin (the log has a line a second at most), nothing aborts, and
 * once the flood's connections are gone a client is served. */
static void descriptor_exhaustion_refuses_cleanly(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    char log[] = "/tmp/mbtest-log.XXXXXX";
    int lfd = mkstemp(log);
    assert_true(lfd >= 0);
    close(lfd);
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "64M", NULL };
    start_logged(&d, log, extra);
    /* Room for a client of 16 frames once the flood is over, not for it. */
    struct rlimit low;
    low.rlim_cur = low.rlim_max = (rlim_t)limit_with_room(d.pid, 32);
    assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &low, NULL), 0);
    int out, in;
    const char *args[] = { "flood", d.dir, "200", NULL };
    pid_t pid = start_attacker(&d, args, &out, &in);
    char line[128];
    assert_true(mbt_read_line(out, line, sizeof(line), 60000) >= 0);
    mbt_sleep_ms(2000);   /* the flood meets the limit for a while */
    assert_true(mbt_daemon_alive(&d));
    end_attacker(pid, in, out);
    assert_true(mbt_daemon_alive(&d));
    mbt_sleep_ms(4500);   /* the flood's connections are closed (hello timeout) */
    char buf[1024];
    const char *legit[] = { MB_CLIENT_BIN, "pattern", "1048576", "3", "legit", NULL };
    assert_int_equal(mbt_run(&d, legit, buf, sizeof(buf), false), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "probe", &s), 0);
    Mb__Reply *rep = raw_status(&s);
    assert_true(rep->status->conns_refused > 0);
    mb__reply__free_unpacked(rep, NULL);
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    assert_true(count_lines_with(log, "out of descriptors") >= 1);
    int lines = count_lines_with(log, "refused a ") + count_lines_with(log, "failed to accept");
    assert_true(lines <= 20);
    unlink(log);
}

/* Connections that ask for large replies and never read them: the daemon
 * stops reading them once their replies back up, so it does not grow with
 * what they ask (RSS measured from /proc, with a wide margin), and it keeps
 * serving others. */
static void unread_replies_do_not_grow_daemon(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "256M", NULL };
    const char *env[] = { "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:quarantine_size_mb=16", NULL };
    assert_int_equal(mbt_daemon_start_env(&d, extra, env), 0);
    /* A full frame table makes every reply ~30 KB. */
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "owner", &s), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(mbt_session_grant(&s, 256u * 65536u), 0);
    long rss0 = mbt_proc_number(d.pid, "status", "VmRSS:");
    assert_true(rss0 > 0);
    int out, in;
    const char *args[] = { "noread", d.dir, "8", "3000", NULL };
    pid_t pid = start_attacker(&d, args, &out, &in);
    char line[128];
    assert_true(mbt_read_line(out, line, sizeof(line), 120000) >= 0);
    int sent = 0;
    assert_int_equal(sscanf(line, "sent %d", &sent), 1);
    assert_true(sent > 8000);
    mbt_sleep_ms(3000);   /* whatever the daemon would take in, it has by now */
    long rss1 = mbt_proc_number(d.pid, "status", "VmRSS:");
    /* Unbounded, 24000 replies of ~30 KB would be ~700 MB. */
    assert_true(rss1 - rss0 < 64 * 1024);
    Mb__Reply *rep = raw_status(&s);
    assert_int_equal((int)rep->status->frames_granted, 1024);
    mb__reply__free_unpacked(rep, NULL);
    char buf[1024];
    const char *legit[] = { MB_CLIENT_BIN, "pattern", "1048576", "3", "legit", NULL };
    assert_int_equal(mbt_run(&d, legit, buf, sizeof(buf), false), 0);
    end_attacker(pid, in, out);
    assert_true(mbt_daemon_alive(&d));
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A tenant bound to uids by the config refuses other uids, with a message
 * saying why; names without a policy fall under the uid's policy; a session
 * token passed to another uid does not let that uid in. */
static void tenant_bound_to_uids(void **state)
{
    if (!mbt_can_setpriv())
        skip();
    char conf[64];
    mbt_write_config(conf, sizeof(conf),
                 "[tenant prod]\nmax = 32M\nmin = 16M\nuids = 0\n[uid 65534]\nmax = 8M\n");
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "1M", "--budget", "64M", "--config", conf, NULL };
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    int out;
    const char *args[] = { "hello", d.dir, "prod", NULL };
    pid_t pid = start_attacker(&d, args, &out, NULL);
    char line[256];
    assert_true(mbt_read_line(out, line, sizeof(line), 30000) >= 0);
    assert_int_equal(mbt_wait(pid), 0);
    close(out);
    char want[64];
    snprintf(want, sizeof(want), "hello %d ", MB_EPERM);
    assert_memory_equal(line, want, strlen(want));
    assert_non_null(strstr(line, "tenant 'prod' is bound to other users"));
    assert_non_null(strstr(line, "uid 65534"));
    /* A token of another uid's handle channel does not make its session. */
    int chan;
    struct mb_chan_msg w;
    assert_int_equal(mb_chan_open(d.dir, 0, 5000, &chan, &w), 0);
    char hex[2 * MB_TOKEN_BYTES + 1];
    for (int i = 0; i < MB_TOKEN_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", w.token[i]);
    const char *steal[] = { "hello", d.dir, "eve-own", hex, NULL };
    pid = start_attacker(&d, steal, &out, NULL);
    assert_true(mbt_read_line(out, line, sizeof(line), 30000) >= 0);
    assert_int_equal(mbt_wait(pid), 0);
    close(out);
    assert_memory_equal(line, want, strlen(want));
    assert_non_null(strstr(line, "the token belongs to a session of uid 0"));
    close(chan);
    /* Through the library: refused at open. */
    char buf[1024];
    const char *eve[] = { NOBODY, MB_CLIENT_BIN, "pattern", "1048576", "3", "prod", NULL };
    assert_int_equal(mbt_run(&d, eve, buf, sizeof(buf), false), 20 - MB_EPERM);
    /* Its own name is fine, under its uid's max. */
    const char *own[] = { NOBODY, MB_CLIENT_BIN, "pattern", "4194304", "3", "eve-own", NULL };
    assert_int_equal(mbt_run(&d, own, buf, sizeof(buf), false), 0);
    const char *big[] = { NOBODY, MB_CLIENT_BIN, "alloc", "16777216", "eve-own", NULL };
    assert_int_equal(mbt_run(&d, big, buf, sizeof(buf), false), 20 - MB_EQUOTA);
    /* The bound uid is served. */
    const char *root[] = { MB_CLIENT_BIN, "pattern", "1048576", "3", "prod", NULL };
    assert_int_equal(mbt_run(&d, root, buf, sizeof(buf), false), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

/* The session's tenant in `tenants --json`: its sessions and cached bytes. */
static bool tenant_row(const struct mbt_daemon *d, const char *name, int *sessions, double *cached)
{
    const char *args[] = { "tenants", NULL };
    struct json *j = mbt_ctl_json(d, NULL, args);
    assert_non_null(j);
    const struct json *t = json_get(j, "tenants");
    bool found = false;
    for (size_t i = 0; t && i < t->n; i++)
        if (strcmp(json_get(&t->kids[i], "name")->str, name) == 0) {
            found = true;
            *sessions = (int)json_num(&t->kids[i], "sessions");
            *cached = json_num(&t->kids[i], "cached");
        }
    json_free(j);
    return found;
}

static uint32_t tenants_known(struct mbt_session *probe)
{
    Mb__Reply *rep = raw_status(probe);
    uint32_t n = rep->status->tenants_known;
    mb__reply__free_unpacked(rep, NULL);
    return n;
}

/* Thousands of one-session tenants that come and go: the daemon frees
 * each when its session ends (the count returns to where it was) and
 * `tenants` stays right for the tenants in use. */
static void short_lived_tenants_are_freed(void **state)
{
    char conf[64];
    mbt_write_config(conf, sizeof(conf), "[tenant prod]\nmax = 32M\n");
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "64M", "--config", conf, NULL };
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session probe;
    assert_int_equal(mbt_session_open(&d, "prod", &probe), 0);
    uint32_t base = tenants_known(&probe);
    assert_int_equal(base, 1);
    void *ctx = zmq_ctx_new();
    char ep[300];
    mb_ctl_endpoint(ep, sizeof(ep), d.dir, 0);
    for (int i = 0; i < 2000; i++) {
        int chan;
        struct mb_chan_msg w;
        assert_int_equal(mb_chan_open(d.dir, 0, 5000, &chan, &w), 0);
        void *s = dealer(ctx, ep, NULL, 0);
        char name[32];
        snprintf(name, sizeof(name), "once%d", i);
        Mb__Request req;
        Mb__Hello h;
        mb_wire_hello(&req, &h, w.token, name);
        req.id = 1;
        Mb__Reply *rep;
        assert_int_equal(mb_wire_send_request(s, &req), 0);
        assert_int_equal(mb_wire_recv_reply(s, 1, 10000, &rep, NULL, NULL), 0);
        assert_int_equal(rep->code, 0);
        mb__reply__free_unpacked(rep, NULL);
        zmq_close(s);
        close(chan);
    }
    zmq_ctx_term(ctx);
    uint32_t now = 0;
    for (int i = 0; i < 100 && (now = tenants_known(&probe)) != base; i++)
        mbt_sleep_ms(100);
    assert_int_equal(now, base);
    /* Sessions in use are counted per tenant, with their cached bytes. */
    struct mbt_session live[3], other[2];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(mbt_session_open(&d, "live", &live[i]), 0);
        assert_int_equal(mbt_session_grant(&live[i], 65536), 0);
        assert_int_equal(mbt_session_cache(&live[i], 65536), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(mbt_session_open(&d, "other", &other[i]), 0);
    int n;
    double cached;
    assert_true(tenant_row(&d, "live", &n, &cached));
    assert_int_equal(n, 3);
    assert_int_equal((int)cached, 3 * 65536);
    assert_true(tenant_row(&d, "other", &n, &cached));
    assert_int_equal(n, 2);
    assert_true(tenant_row(&d, "prod", &n, &cached));
    assert_int_equal(n, 1);
    assert_false(tenant_row(&d, "once7", &n, &cached));
    assert_int_equal(tenants_known(&probe), base + 2);
    for (int i = 0; i < 3; i++)
        mbt_session_close(&live[i]);
    mbt_session_close(&other[0]);
    for (int i = 0; i < 100 && tenants_known(&probe) != base + 1; i++)
        mbt_sleep_ms(100);
    assert_int_equal(tenants_known(&probe), base + 1);   /* "other" has a session left */
    assert_true(tenant_row(&d, "other", &n, &cached));
    assert_int_equal(n, 1);
    assert_false(tenant_row(&d, "live", &n, &cached));
    mbt_session_close(&other[1]);
    mbt_session_close(&probe);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    unlink(conf);
}

/* A client whose daemon restarted reconnects under the tenant it opened
 * with. */
static void reconnect_keeps_tenant(void **state)
{
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "64M", NULL };
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    int out, in;
    pid_t pid = mbt_spawn_holder(&d, "1048576", "11", "keeper", &out, &in);
    assert_true(pid > 0);
    int n;
    double cached;
    assert_true(tenant_row(&d, "keeper", &n, &cached));
    assert_int_equal(n, 1);
    kill(d.pid, SIGKILL);
    assert_int_equal(mbt_daemon_restart(&d, extra), 0);
    /* The client notices and reports its frames, as tenant keeper. */
    bool back = false;
    for (int i = 0; i < 150 && !back; i++) {
        struct json *j = mbt_status(&d);
        const struct json *t = j ? json_get(j, "tenants") : NULL;
        back = t && t->n == 1 && json_num(&t->kids[0], "frames") > 0;
        json_free(j);
        if (!back)
            mbt_sleep_ms(100);
    }
    assert_true(back);
    assert_true(tenant_row(&d, "keeper", &n, &cached));
    assert_int_equal(n, 1);
    assert_false(tenant_row(&d, "default", &n, &cached));
    char line[64];
    assert_int_equal(write(in, "check\n", 6), 6);
    assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "intact");
    end_attacker(pid, in, out);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A runtime directory owned by another uid, or writable by others, is
 * refused with a message naming the path and the owner. */
static void foreign_runtime_dir_refused(void **state)
{
    char dir[] = "/tmp/mbtest.XXXXXX", log[] = "/tmp/mbtest-log.XXXXXX";
    assert_non_null(mkdtemp(dir));
    int lfd = mkstemp(log);
    assert_true(lfd >= 0);
    close(lfd);
    assert_int_equal(chown(dir, 65534, 65534), 0);
    chmod(dir, 0755);
    assert_int_not_equal(run_daemon_in(dir, log), 0);
    assert_true(file_has(log, dir));
    assert_true(file_has(log, "owned by uid 65534"));
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);   /* nothing created in it */
    char lock[160];
    snprintf(lock, sizeof(lock), "%s/gpu0.lock", dir);
    assert_int_not_equal(access(lock, F_OK), 0);
    /* Owned by us but writable by everyone. */
    assert_int_equal(chown(dir, 0, 0), 0);
    chmod(dir, 0777);
    assert_int_not_equal(run_daemon_in(dir, log), 0);
    assert_true(file_has(log, dir));
    assert_true(file_has(log, "other users may write into it"));
    assert_int_not_equal(access(lock, F_OK), 0);
    rmdir(dir);
    unlink(log);
}

/* A lock file (or journal) that is a symbolic link is refused, and the
 * file it points at is left as it was. */
static void symlinked_lock_refused(void **state)
{
    char dir[] = "/tmp/mbtest.XXXXXX", log[] = "/tmp/mbtest-log.XXXXXX";
    char victim[] = "/tmp/mbtest-victim.XXXXXX";
    assert_non_null(mkdtemp(dir));
    chmod(dir, 0755);
    int lfd = mkstemp(log);
    assert_true(lfd >= 0);
    close(lfd);
    int vfd = mkstemp(victim);
    assert_true(vfd >= 0);
    assert_int_equal(write(vfd, "precious\n", 9), 9);
    close(vfd);
    char link[160];
    snprintf(link, sizeof(link), "%s/gpu0.lock", dir);
    assert_int_equal(symlink(victim, link), 0);
    assert_int_not_equal(run_daemon_in(dir, log), 0);
    assert_true(file_has(log, link));
    assert_true(file_has(log, "symbolic link"));
    char buf[32] = "";
    int fd = open(victim, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, buf, sizeof(buf)), 9);
    close(fd);
    assert_memory_equal(buf, "precious\n", 9);
    unlink(link);
    /* The same for the journal. */
    snprintf(link, sizeof(link), "%s/gpu0.journal", dir);
    assert_int_equal(symlink(victim, link), 0);
    assert_int_not_equal(run_daemon_in(dir, log), 0);
    assert_true(file_has(log, link));
    assert_true(file_has(log, "symbolic link"));
    fd = open(victim, O_RDONLY);
    assert_int_equal(read(fd, buf, sizeof(buf)), 9);
    close(fd);
    assert_memory_equal(buf, "precious\n", 9);
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    unlink(victim);
    unlink(log);
}

/* ---- the control socket's wire protocol, byte by byte ------------------ */

static const uint8_t dealer_greeting[64] = {
    0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 1, 'N', 'U', 'L', 'L',
};

/* READY with Socket-Type `type` and an Identity property. */
static size_t ready_cmd(uint8_t *buf, const char *type, const char *identity)
{
    size_t tl = strlen(type), il = strlen(identity), n = 2;
    buf[n++] = 5;
    memcpy(buf + n, "READY", 5);
    n += 5;
    buf[n++] = 11;
    memcpy(buf + n, "Socket-Type", 11);
    n += 11;
    buf[n++] = 0, buf[n++] = 0, buf[n++] = 0, buf[n++] = (uint8_t)tl;
    memcpy(buf + n, type, tl);
    n += tl;
    buf[n++] = 8;
    memcpy(buf + n, "Identity", 8);
    n += 8;
    buf[n++] = 0, buf[n++] = 0, buf[n++] = 0, buf[n++] = (uint8_t)il;
    memcpy(buf + n, identity, il);
    n += il;
    buf[0] = 0x04;
    buf[1] = (uint8_t)(n - 2);
    return n;
}

static bool read_exact(int fd, uint8_t *buf, size_t n, int timeout_ms)
{
    for (size_t got = 0; got < n;) {
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, timeout_ms) <= 0)
            return false;
        ssize_t r = recv(fd, buf + got, n - got, 0);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* Connect, check the daemon's greeting and READY, send `bytes`. */
static int zmtp_open(const struct mbt_daemon *d, const void *bytes, size_t n)
{
    char path[200];
    snprintf(path, sizeof(path), "%s/gpu0.ctl", d->dir);
    int fd = connect_unix(path, SOCK_STREAM);
    assert_true(fd >= 0);
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    uint8_t g[64 + 30];
    assert_true(read_exact(fd, g, sizeof(g), 10000));
    assert_int_equal(g[0], 0xFF);
    assert_int_equal(g[9], 0x7F);
    assert_int_equal(g[10], 3);
    assert_memory_equal(g + 12, "NULL", 4);
    assert_int_equal(g[64], 0x04);
    assert_memory_equal(g + 64 + 3, "READY", 5);
    assert_memory_equal(g + 64 + 24, "ROUTER", 6);
    if (n)
        assert_int_equal(send(fd, bytes, n, MSG_NOSIGNAL), (ssize_t)n);
    return fd;
}

/* The daemon closes the connection (end of file) within a few seconds. */
static bool closed_soon(int fd)
{
    uint8_t b[256];
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, 6000) <= 0)
            return false;
        ssize_t r = recv(fd, b, sizeof(b), 0);
        if (r <= 0)
            return true;
    }
}

/* One reply frame (short or long), unpacked. */
static Mb__Reply *zmtp_reply(int fd)
{
    uint8_t h[9];
    if (!read_exact(fd, h, 2, 10000) || (h[0] & ~3u))
        return NULL;
    size_t size = h[1];
    if (h[0] & 2) {
        if (!read_exact(fd, h + 2, 7, 10000))
            return NULL;
        size = 0;
        for (int i = 1; i < 9; i++)
            size = size << 8 | h[i];
        if (size > (1u << 20))
            return NULL;
    }
    static uint8_t body[1u << 20];
    if (!read_exact(fd, body, size, 10000))
        return NULL;
    return mb__reply__unpack(NULL, size, body);
}

static size_t status_frame(uint8_t *buf, uint64_t id, bool more_first)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Status st = MB__STATUS__INIT;
    req.id = id;
    req.body_case = MB__REQUEST__BODY_STATUS;
    req.status = &st;
    size_t n = 0;
    if (more_first) {
        buf[n++] = 1;
        buf[n++] = 1;
        buf[n++] = 'x';
    }
    size_t len = mb__request__pack(&req, buf + n + 2);
    buf[n] = 0;
    buf[n + 1] = (uint8_t)len;
    return n + 2 + len;
}

/* Wire-protocol violations end the connection (and only it); a request in
 * two parts is answered MB_EPROTO; an Identity the peer announces is
 * ignored and it is answered all the same. */
static void control_protocol_violations(void **state)
{
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "64M", NULL };
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    uint8_t buf[512], junk[64];
    memset(junk, 'j', sizeof(junk));
    int fd = zmtp_open(&d, junk, sizeof(junk));   /* not a greeting */
    assert_true(closed_soon(fd));
    close(fd);
    memcpy(buf, dealer_greeting, 64);
    size_t n = 64 + ready_cmd(buf + 64, "PUB", "");
    fd = zmtp_open(&d, buf, n);                    /* not a DEALER */
    assert_true(closed_soon(fd));
    close(fd);
    n = 64 + ready_cmd(buf + 64, "DEALER", "");
    buf[n++] = 0x08;                               /* reserved flag bit */
    buf[n++] = 0;
    fd = zmtp_open(&d, buf, n);
    assert_true(closed_soon(fd));
    close(fd);
    n = 64 + ready_cmd(buf + 64, "DEALER", "");
    uint8_t longf[9] = { 0x02, 0, 0, 0, 0, 0x40, 0, 0, 0 };   /* a 1 GiB frame */
    memcpy(buf + n, longf, sizeof(longf));
    fd = zmtp_open(&d, buf, n + sizeof(longf));
    assert_true(closed_soon(fd));
    close(fd);
    /* Silent after connecting: closed after the handshake timeout. */
    fd = zmtp_open(&d, NULL, 0);
    assert_true(closed_soon(fd));
    close(fd);
    /* Two parts: MB_EPROTO; then a chosen identity, answered. */
    n = 64 + ready_cmd(buf + 64, "DEALER", "chosen");
    n += status_frame(buf + n, 7, true);
    n += status_frame(buf + n, 8, false);
    fd = zmtp_open(&d, buf, n);
    Mb__Reply *rep = zmtp_reply(fd);
    assert_non_null(rep);
    assert_int_equal(rep->code, MB_EPROTO);
    assert_non_null(strstr(rep->error, "a request is one frame"));
    mb__reply__free_unpacked(rep, NULL);
    rep = zmtp_reply(fd);
    assert_non_null(rep);
    assert_int_equal((int)rep->id, 8);
    assert_int_equal(rep->code, 0);
    assert_int_equal(rep->body_case, MB__REPLY__BODY_STATUS);
    mb__reply__free_unpacked(rep, NULL);
    close(fd);
    assert_true(mbt_daemon_alive(&d));
    char out[1024];
    const char *legit[] = { MB_CLIENT_BIN, "pattern", "1048576", "3", "legit", NULL };
    assert_int_equal(mbt_run(&d, legit, out, sizeof(out), false), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Requests sent back to back whose replies pass the soft cap: the daemon
 * holds the rest while the replies wait, and answers every one, in order,
 * once the client reads. */
static void pipelined_requests_all_answered(void **state)
{
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "256M", NULL };
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "owner", &s), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(mbt_session_grant(&s, 256u * 65536u), 0);
    static uint8_t buf[4096];
    memcpy(buf, dealer_greeting, 64);
    size_t n = 64 + ready_cmd(buf + 64, "DEALER", "");
    for (uint64_t id = 1; id <= 40; id++) {
        Mb__Request req = MB__REQUEST__INIT;
        Mb__Frames f = MB__FRAMES__INIT;
        f.start = 1;
        f.limit = 1024;
        req.id = id;
        req.body_case = MB__REQUEST__BODY_FRAMES;
        req.frames = &f;
        size_t len = mb__request__pack(&req, buf + n + 2);
        buf[n] = 0;
        buf[n + 1] = (uint8_t)len;
        n += 2 + len;
    }
    int fd = zmtp_open(&d, buf, n);
    mbt_sleep_ms(500);   /* the daemon fills the connection and holds the rest */
    for (uint64_t id = 1; id <= 40; id++) {
        Mb__Reply *rep = zmtp_reply(fd);
        assert_non_null(rep);
        assert_int_equal((int)rep->id, (int)id);
        assert_int_equal(rep->code, 0);
        assert_int_equal((int)rep->frames->n_frames, 1024);
        mb__reply__free_unpacked(rep, NULL);
    }
    close(fd);
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* One uid's sessions (hello said, control connections closed, handle
 * channels kept) count against its quarter of the daemon's connections,
 * so that it cannot take them all: root still opens a session and reads
 * the status while the hoarder holds what it got. A daemon whose
 * descriptor limit (512) leaves 192 connections. */
static void sessions_capped_per_uid(void **state)
{
    (void)state;
    if (!mbt_can_setpriv())
        skip();
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "64M", NULL };
    const char *env[] = { "MBT_NOFILE=512", NULL };
    assert_int_equal(mbt_daemon_start_env(&d, extra, env), 0);
    int out, in;
    const char *args[] = { "sessions", d.dir, "250", NULL };
    pid_t pid = start_attacker(&d, args, &out, &in);
    char line[128];
    assert_true(mbt_read_line(out, line, sizeof(line), 120000) >= 0);
    int held = 0;
    assert_int_equal(sscanf(line, "held %d", &held), 1);
    printf("  the hoarder holds %d sessions of the 250 it tried\n", held);
    assert_true(held > 0 && held <= 192 / 4);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "probe", &s), 0);
    Mb__Reply *rep = raw_status(&s);
    assert_true(rep->status->conns_refused > 0);
    mb__reply__free_unpacked(rep, NULL);
    mbt_session_close(&s);
    end_attacker(pid, in, out);
    assert_true(mbt_daemon_alive(&d));
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A frame begun on the control socket and never finished (a byte a second
 * trickling in) is dropped after 10 s, so that peers cannot pin the
 * daemon's input buffers; the daemon serves on. */
static void partial_frames_are_dropped(void **state)
{
    (void)state;
    if (!mbt_can_setpriv())
        skip();
    struct mbt_daemon d;
    const char *extra[] = { "--frame-size", "64K", "--budget", "64M", NULL };
    assert_int_equal(mbt_daemon_start(&d, extra), 0);
    int out, in;
    const char *args[] = { "partial", d.dir, NULL };
    pid_t pid = start_attacker(&d, args, &out, &in);
    char line[64];
    assert_true(mbt_read_line(out, line, sizeof(line), 30000) >= 0);
    assert_string_equal(line, "begun");
    bool closed = false;
    int seconds = 0;
    for (; seconds < 25 && !closed; seconds++) {
        mbt_sleep_ms(1000);
        assert_int_equal(write(in, "check\n", 6), 6);
        assert_true(mbt_read_line(out, line, sizeof(line), 30000) >= 0);
        closed = strcmp(line, "closed") == 0;
        if (seconds < 8)
            assert_false(closed);   /* not before its time */
    }
    printf("  the partial frame's connection closed after %d s\n", seconds);
    assert_true(closed);
    end_attacker(pid, in, out);
    char buf[1024];
    const char *legit[] = { MB_CLIENT_BIN, "pattern", "1048576", "3", "legit", NULL };
    assert_int_equal(mbt_run(&d, legit, buf, sizeof(buf), false), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "attack") == 0)
        return attacker_main(argc, argv);
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    if (n <= 0)
        return 1;
    self_exe[n] = '\0';
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chosen_routing_ids_cannot_crash),
        cmocka_unit_test(connection_flood_is_bounded),
        cmocka_unit_test(descriptor_exhaustion_refuses_cleanly),
        cmocka_unit_test(unread_replies_do_not_grow_daemon),
        cmocka_unit_test(tenant_bound_to_uids),
        cmocka_unit_test(short_lived_tenants_are_freed),
        cmocka_unit_test(reconnect_keeps_tenant),
        cmocka_unit_test(foreign_runtime_dir_refused),
        cmocka_unit_test(symlinked_lock_refused),
        cmocka_unit_test(control_protocol_violations),
        cmocka_unit_test(pipelined_requests_all_answered),
        cmocka_unit_test(sessions_capped_per_uid),
        cmocka_unit_test(partial_frames_are_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
