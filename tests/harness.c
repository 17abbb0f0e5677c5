/* harness.c: starting and stopping a real moonbrightd, spawning client
 * programs as separate processes, reading mbctl --json, and raw protocol
 * sessions. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <moonbright/mbclient.h>

#include "fdpass.h"
#include "wire.h"

void mbt_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

long mbt_proc_number(pid_t pid, const char *file, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && v < 0 && fgets(line, sizeof(line), f))
        if (strncmp(line, key, strlen(key)) == 0)
            v = strtol(line + strlen(key), NULL, 10);
    if (f)
        fclose(f);
    return v;
}

pid_t mbt_spawn(const struct mbt_daemon *d, const char *const *argv, int *out_fd, int *in_fd)
{
    int p[2] = { -1, -1 }, q[2] = { -1, -1 };
    if ((out_fd && pipe2(p, O_CLOEXEC) != 0) || (in_fd && pipe2(q, O_CLOEXEC) != 0))
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

#ifdef MB_CLIENT_BIN
pid_t mbt_spawn_holder(const struct mbt_daemon *d, const char *bytes, const char *seed,
                       const char *tenant, int *out_fd, int *in_fd)
{
    const char *argv[] = { MB_CLIENT_BIN, "hold", bytes, seed, tenant, NULL };
    pid_t pid = mbt_spawn(d, argv, out_fd, in_fd);
    char a[128] = "", b[128] = "";
    if (pid > 0 && (mbt_read_line(*out_fd, a, sizeof(a), 10000) < 0 || strcmp(a, "alloc: success") != 0 ||
                    mbt_read_line(*out_fd, b, sizeof(b), 10000) < 0 || strcmp(b, "ready") != 0)) {
        fprintf(stderr, "holder: expected 'alloc: success' and 'ready', got '%s' and '%s'\n", a, b);
        kill(pid, SIGKILL);
        mbt_wait(pid);
        return -1;
    }
    return pid;
}
#endif

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
    if (pipe2(p, O_CLOEXEC) != 0)
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
    /* Read the rest (dropped) so a long output never ends in SIGPIPE. */
    char rest[4096];
    while ((r = read(p[0], rest, sizeof(rest))) > 0)
        ;
    close(p[0]);
    return mbt_wait(pid);
}

struct json *mbt_status(const struct mbt_daemon *d)
{
    char buf[65536];
    char dev[16];
    snprintf(dev, sizeof(dev), "%d", d->device);
    const char *argv[] = { MB_CTL_BIN, "--runtime-dir", d->dir, "--device", dev, "status", "--json", NULL };
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
    return mbt_daemon_start_env(d, extra, NULL);
}

/* Wait until the daemon answers status: up to 10 s, for sanitizer builds. */
static int wait_ready(const struct mbt_daemon *d)
{
    for (int i = 0; i < 200; i++) {   /* up to 10 s, for sanitizer builds */
        struct json *j = mbt_status(d);
        if (j) {
            json_free(j);
            return 0;
        }
        if (!mbt_daemon_alive(d))
            return -1;
        mbt_sleep_ms(50);
    }
    return -1;
}

int mbt_daemon_start_env(struct mbt_daemon *d, const char *const *extra, const char *const *env)
{
    if (mbt_daemon_spawn_env(d, extra, env) != 0)
        return -1;
    return wait_ready(d);
}

static int spawn_in_dir(struct mbt_daemon *d, const char *const *extra, const char *const *env);

int mbt_daemon_spawn_env(struct mbt_daemon *d, const char *const *extra, const char *const *env)
{
    snprintf(d->dir, sizeof(d->dir), "/tmp/mbtest.XXXXXX");
    d->device = 0;
    d->shares_dir = false;
    if (!mkdtemp(d->dir))
        return -1;
    chmod(d->dir, 0755);   /* tests run some clients under another uid */
    return spawn_in_dir(d, extra, env);
}

int mbt_daemon_start_beside(struct mbt_daemon *d, const struct mbt_daemon *first, int device,
                            const char *const *extra)
{
    char dev[16];
    snprintf(dev, sizeof(dev), "%d", device);
    const char *args[24] = { "--device", dev };
    int n = 2;
    for (int i = 0; extra && extra[i] && n < 23; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    snprintf(d->dir, sizeof(d->dir), "%s", first->dir);
    d->device = device;
    d->shares_dir = true;
    if (spawn_in_dir(d, args, NULL) != 0)
        return -1;
    return wait_ready(d);
}

int mbt_daemon_restart(struct mbt_daemon *d, const char *const *extra)
{
    if (d->pid > 0) {
        mbt_wait(d->pid);
        track(0, d->pid);
    }
    if (spawn_in_dir(d, extra, NULL) != 0)
        return -1;
    return wait_ready(d);
}

static int spawn_in_dir(struct mbt_daemon *d, const char *const *extra, const char *const *env)
{
    const char *argv[32] = { MB_DAEMON_BIN, "--foreground", "--backend", "host", "--runtime-dir",
                             d->dir, "--log-level", "warn" };
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t parent = getpid();
    d->pid = fork();
    if (d->pid == 0) {
        /* A test that dies (an assertion, a sanitizer's halt) takes its
         * daemon along, rather than leaving it holding the test's output
         * open until ctest's timeout. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        setenv("MOONBRIGHT_RUNTIME_DIR", d->dir, 1);
        for (int i = 0; env && env[i]; i++) {
            char buf[512];
            snprintf(buf, sizeof(buf), "%s", env[i]);
            char *eq = strchr(buf, '=');
            if (!eq)
                continue;
            *eq = '\0';
            if (strcmp(buf, "MBT_NOFILE") == 0) {
                struct rlimit l = { (rlim_t)atol(eq + 1), (rlim_t)atol(eq + 1) };
                if (setrlimit(RLIMIT_NOFILE, &l) != 0)
                    _exit(126);
                continue;
            }
            if (strcmp(eq + 1, "self") == 0)
                snprintf(eq + 1, sizeof(buf) - (size_t)(eq + 1 - buf), "%d", (int)getpid());
            setenv(buf, eq + 1, 1);
        }
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        close(in);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    track(d->pid, 0);
    return d->pid > 0 ? 0 : -1;
}

int mbt_daemon_wait(struct mbt_daemon *d, int timeout_ms)
{
    if (d->pid <= 0)
        return -1;
    int st;
    for (int waited = 0;; waited += 20) {
        pid_t r = waitpid(d->pid, &st, WNOHANG);
        if (r == d->pid)
            break;
        if (r < 0 || waited >= timeout_ms)
            return -1;
        mbt_sleep_ms(20);
    }
    track(0, d->pid);
    d->pid = 0;
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "failed to remove %s\n", d->dir);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int mbt_daemon_stop(struct mbt_daemon *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    int rc = mbt_wait(d->pid);
    track(0, d->pid);
    d->pid = 0;
    if (d->shares_dir)
        return rc;
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "failed to remove %s\n", d->dir);
    return rc;
}

struct json *mbt_ctl_json(const struct mbt_daemon *d, int *rc, const char *const *args)
{
    static char buf[1 << 20];
    char dev[16];
    snprintf(dev, sizeof(dev), "%d", d->device);
    const char *argv[32] = { MB_CTL_BIN, "--runtime-dir", d->dir, "--device", dev };
    int n = 5;
    for (int i = 0; args[i] && n < 30; i++)
        argv[n++] = args[i];
    argv[n++] = "--json";
    argv[n] = NULL;
    int r = mbt_run(d, argv, buf, sizeof(buf), false);
    if (rc)
        *rc = r;
    return r == 0 ? json_parse(buf) : NULL;
}

bool mbt_can_setpriv(void)
{
    if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0)
        return false;
    int st = system("/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null");
    return st == 0;
}

int mbt_session_open(const struct mbt_daemon *d, const char *tenant, struct mbt_session *s)
{
    memset(s, 0, sizeof(*s));
    s->chan = -1;
    char ep[300];
    if (mb_ctl_endpoint(ep, sizeof(ep), d->dir, 0) != 0)
        return MB_EINVAL;
    struct mb_chan_msg w;
    int rc = mb_chan_open(d->dir, 0, 5000, &s->chan, &w);
    if (rc != 0)
        return rc;
    s->zctx = zmq_ctx_new();
    s->dealer = zmq_socket(s->zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s->dealer, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(s->dealer, ep) != 0)
        return MB_EUNAVAIL;
    Mb__Request req;
    Mb__Hello h;
    mb_wire_hello(&req, &h, w.token, tenant);
    Mb__Reply *rep;
    rc = mbt_session_call(s, &req, &rep);
    if (rc == 1)
        return MB_EUNAVAIL;
    if (rc == 0)
        s->id = rep->hello->session_id;
    mb__reply__free_unpacked(rep, NULL);
    return rc;
}

void mbt_session_close(struct mbt_session *s)
{
    if (s->dealer)
        zmq_close(s->dealer);
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    if (s->chan >= 0)
        close(s->chan);
    memset(s, 0, sizeof(*s));
    s->chan = -1;
}

int mbt_session_call(struct mbt_session *s, Mb__Request *req, Mb__Reply **out)
{
    req->id = ++s->next_id;
    Mb__Reply *rep;
    if (mb_wire_send_request(s->dealer, req) != 0 ||
        mb_wire_recv_reply(s->dealer, req->id, 10000, &rep, NULL, NULL) != 0)
        return 1;
    int code = rep->code;
    if (out)
        *out = rep;
    else
        mb__reply__free_unpacked(rep, NULL);
    return code;
}

static int session_grant(struct mbt_session *s, uint64_t bytes, bool large, uint32_t warm_max,
                         uint64_t *sizes, size_t *n_sizes)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Grant g = MB__GRANT__INIT;
    g.bytes = bytes;
    g.large = large;
    g.warm_max_frames = warm_max;
    req.body_case = MB__REQUEST__BODY_GRANT;
    req.grant = &g;
    Mb__Reply *rep;
    int code = mbt_session_call(s, &req, &rep);
    if (code == 1)
        return code;
    if (code != 0) {
        mb__reply__free_unpacked(rep, NULL);
        return code;
    }
    size_t want = rep->grant->n_frames, got = 0;
    s->last_room = rep->grant->room;
    for (size_t i = 0; i < want && s->n_frames < sizeof(s->frame_ids) / sizeof(s->frame_ids[0]); i++)
        s->frame_ids[s->n_frames++] = rep->grant->frames[i]->id;
    for (size_t i = 0; sizes && i < want && i < *n_sizes; i++)
        sizes[i] = rep->grant->frames[i]->bytes;
    if (n_sizes)
        *n_sizes = want;
    mb__reply__free_unpacked(rep, NULL);
    while (got < want) {   /* the descriptors came first, on the channel */
        struct mb_chan_msg m;
        int fds[MB_CHAN_MAX_FDS];
        if (mb_chan_recv(s->chan, &m, fds, 5000) != 0)
            return MB_EPROTO;
        for (uint32_t i = 0; i < m.count; i++)
            close(fds[i]);
        got += m.count;
    }
    return 0;
}

int mbt_session_grant(struct mbt_session *s, uint64_t bytes) { return session_grant(s, bytes, false, 0, NULL, NULL); }

int mbt_session_grant_large(struct mbt_session *s, uint64_t bytes)
{
    return session_grant(s, bytes, true, 0, NULL, NULL);
}

int mbt_session_grant_warm(struct mbt_session *s, uint64_t bytes, uint32_t warm_max, uint64_t *sizes,
                           size_t *n_sizes)
{
    return session_grant(s, bytes, true, warm_max, sizes, n_sizes);
}

int mbt_session_return(struct mbt_session *s, const uint32_t *ids, size_t n)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Return r = MB__RETURN__INIT;
    r.ids = (uint32_t *)ids;
    r.n_ids = n;
    req.body_case = MB__REQUEST__BODY_RET;
    req.ret = &r;
    int code = mbt_session_call(s, &req, NULL);
    if (code != 0)
        return code;
    uint32_t gone[1024];
    size_t ng = n < 1024 ? n : 1024;
    memcpy(gone, ids, ng * sizeof(*gone));
    for (size_t i = 0; i < ng; i++)
        for (size_t j = 0; j < s->n_frames; j++)
            if (s->frame_ids[j] == gone[i]) {
                s->frame_ids[j] = s->frame_ids[--s->n_frames];
                break;
            }
    return 0;
}

static int send_cache(struct mbt_session *s, uint64_t bytes, bool answer)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Cache c = MB__CACHE__INIT;
    c.bytes = bytes;
    c.answers_notice = answer;
    req.body_case = MB__REQUEST__BODY_CACHE;
    req.cache = &c;
    return mbt_session_call(s, &req, NULL);
}

int mbt_session_cache(struct mbt_session *s, uint64_t bytes) { return send_cache(s, bytes, false); }

int mbt_session_answer(struct mbt_session *s, uint64_t bytes) { return send_cache(s, bytes, true); }

static void take_notice(void *ctx, const Mb__Reply *r)
{
    int *kb = ctx;
    if (r->body_case == MB__REPLY__BODY_NOTICE && kb[0] < 0) {
        kb[0] = (int)r->notice->kind;
        memcpy(&kb[1], &r->notice->bytes, sizeof(uint64_t));
    }
}

int mbt_session_notice(struct mbt_session *s, int timeout_ms, int *kind, uint64_t *bytes)
{
    int kb[3] = { -1, 0, 0 };
    Mb__Reply *rep = NULL;
    /* Wait for a reply to an id never used: only notices are taken. */
    int64_t deadline = mb_now_ms() + timeout_ms;
    while (kb[0] < 0 && mb_now_ms() < deadline) {
        if (mb_wire_recv_reply(s->dealer, UINT64_MAX, 50, &rep, take_notice, kb) == 0)
            mb__reply__free_unpacked(rep, NULL);
    }
    if (kb[0] < 0)
        return -1;
    *kind = kb[0];
    memcpy(bytes, &kb[1], sizeof(uint64_t));
    return 0;
}

void mbt_write_config(char *path, size_t len, const char *text)
{
    snprintf(path, len, "/tmp/mbtest-conf.XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        fprintf(stderr, "failed to write a test config: %s\n", strerror(errno));
        abort();
    }
    close(fd);
    chmod(path, 0644);
}

double mbt_tenant_num(const struct mbt_daemon *d, const char *name, const char *key)
{
    const char *args[] = { "tenants", NULL };
    struct json *j = mbt_ctl_json(d, NULL, args);
    const struct json *t = j ? json_get(j, "tenants") : NULL;
    double v = -1;
    for (size_t i = 0; t && i < t->n; i++) {
        const struct json *n = json_get(&t->kids[i], "name");
        if (n && n->str && strcmp(n->str, name) == 0)
            v = json_num(&t->kids[i], key);
    }
    json_free(j);
    return v;
}

double mbt_status_num(const struct mbt_daemon *d, const char *key)
{
    struct json *j = mbt_status(d);
    if (!j)
        return -1;
    double v = json_num(j, key);
    json_free(j);
    return v;
}

double mbt_status_wait(const struct mbt_daemon *d, const char *key, double want, int timeout_ms)
{
    double v = mbt_status_num(d, key);
    for (int waited = 0; v != want && waited < timeout_ms; waited += 20) {
        mbt_sleep_ms(20);
        v = mbt_status_num(d, key);
    }
    return v;
}
