/* main.c: moonbrightd's start-up and shut-down: options, the runtime
 * directory and its lock, the backend, the sockets, tenants from the
 * config, readiness (sd-daemon READY=1 only once all of that is done) and
 * STOPPING=1 on every exit path. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

#include <moonbright/status.h>

#include "daemon.h"
#include "log.h"
#include "config.h"
#include "size.h"

struct options {
    int device;
    const char *config;          /* --config, else the default path */
    bool foreground;
    int64_t drain_timeout_ms;    /* --drain-timeout */
    int64_t reclaim_timeout_ms;  /* --reclaim-timeout */
    const char *state_dir;       /* --state-dir: the journal */
    const char *config_read;     /* the file settings came from; NULL: none */
    /* Command-line settings, applied over the file with mb_config_set. */
    const char *keys[16], *values[16];
    int n;
};

static void usage(FILE *f)
{
    fprintf(f,
        "usage: moonbrightd [options]\n"
        "  --device N          GPU ordinal to serve (default 0)\n"
        "  --config FILE       configuration file (default " MB_CONFIG_DEFAULT_PATH ",\n"
        "                      used when present)\n"
        "  --backend KIND      auto, cuda or host (default auto: cuda when a GPU is usable)\n"
        "  --runtime-dir DIR   sockets live here (default $MOONBRIGHT_RUNTIME_DIR, else /run/moonbright)\n"
        "  --budget SIZE       most bytes of frames to create (default: the device's memory;\n"
        "                      host backend: half of physical memory)\n"
        "  --frame-size SIZE   bytes per frame (default 2M; a multiple of the device granularity)\n"
        "  --reserve SIZE      frames created ahead of demand at least (default 0; the\n"
        "                      reserve grows to what recent grants took)\n"
        "  --reserve-idle MS   free frames nobody took for MS are released to the driver,\n"
        "                      down to the reserve's target (default 5000; 0 keeps them)\n"
        "  --device-headroom SIZE  device memory free frames leave to other processes: below\n"
        "                      it free frames go back to the driver (default 0: off)\n"
        "  --no-scrub          do not zero frames between tenants (single-tenant hosts)\n"
        "  --foreground        stay in the foreground (systemd uses this)\n"
        "  --drain-timeout S   on SIGTERM, wait at most S seconds (default 10; may be\n"
        "                      fractional) for sessions to end; a second SIGTERM exits at once\n"
        "  --state-dir DIR     where the state journal lives (default $STATE_DIRECTORY,\n"
        "                      else the runtime directory); it lets clients that outlive\n"
        "                      a daemon report their frames to the next one\n"
        "  --reclaim-timeout MS  how long a grant waits for reclaimed frames (default 2000;\n"
        "                      0: never wait, answer MB_ENOMEM at once)\n"
        "  --log-level LEVEL   err, warn, info or debug (default info)\n"
        "  --help, --version\n"
        "Command-line settings override the file. SIZE takes K, M, G or T suffixes.\n");
}

static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longs[] = {
        { "device", required_argument, 0, 'd' },      { "config", required_argument, 0, 'c' },
        { "backend", required_argument, 0, 'b' },     { "runtime-dir", required_argument, 0, 'r' },
        { "budget", required_argument, 0, 'B' },      { "frame-size", required_argument, 0, 'f' },
        { "reserve", required_argument, 0, 'R' },     { "log-level", required_argument, 0, 'l' },
        { "no-scrub", no_argument, 0, 'S' },          { "foreground", no_argument, 0, 'F' },
        { "help", no_argument, 0, 'h' },              { "version", no_argument, 0, 'V' },
        { "drain-timeout", required_argument, 0, 'D' },
        { "reclaim-timeout", required_argument, 0, 'T' },
        { "state-dir", required_argument, 0, 'J' },
        { "reserve-idle", required_argument, 0, 'I' },
        { "device-headroom", required_argument, 0, 'H' },
        { 0, 0, 0, 0 },
    };
    int c, idx;
    while ((c = getopt_long(argc, argv, "", longs, &idx)) != -1) {
        char *end;
        switch (c) {
        case 'd':
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || v < 0 || v > 255) {
                mb_log(MB_LOG_ERR, "bad device '%s' (expected 0-255)", optarg);
                return 2;
            }
            o->device = (int)v;
            break;
        case 'c': o->config = optarg; break;
        case 'D': {
            errno = 0;
            double sec = strtod(optarg, &end);
            if (errno || *end || end == optarg || !(sec >= 0 && sec <= 86400)) {
                mb_log(MB_LOG_ERR, "bad drain timeout '%s' (expected 0-86400 seconds)", optarg);
                return 2;
            }
            o->drain_timeout_ms = (int64_t)(sec * 1000);
            break;
        }
        case 'T': {
            errno = 0;
            long ms = strtol(optarg, &end, 10);
            if (errno || *end || end == optarg || ms < 0 || ms > 600000) {
                mb_log(MB_LOG_ERR, "bad reclaim timeout '%s' (expected 0-600000 ms)", optarg);
                return 2;
            }
            o->reclaim_timeout_ms = ms;
            break;
        }
        case 'b': case 'r': case 'B': case 'f': case 'R': case 'l': case 'I': case 'H':
            if (o->n < 16) {
                o->keys[o->n] = longs[idx].name;
                o->values[o->n++] = optarg;
            }
            break;
        case 'S':
            if (o->n < 16) {
                o->keys[o->n] = "scrub";
                o->values[o->n++] = "off";
            }
            break;
        case 'F': o->foreground = true; break;
        case 'J': o->state_dir = optarg; break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf("moonbrightd %s\n", MB_VERSION); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        mb_log(MB_LOG_ERR, "unexpected argument '%s'", argv[optind]);
        return 2;
    }
    return 0;
}

/* The file (the default one only when present), then the command line. */
static int load_config(struct options *o, struct mb_config *cfg)
{
    char err[512];
    const char *path = o->config ? o->config : MB_CONFIG_DEFAULT_PATH;
    int rc = mb_config_load(path, cfg, err, sizeof(err));
    if (rc == 0)
        o->config_read = path;
    if (rc == MB_ENOENT && !o->config) {
        /* no default file: the defaults, then the command line */
    } else if (rc == MB_ENOENT) {
        mb_log(MB_LOG_ERR, "config file %s does not exist", path);
        return 2;
    } else if (rc != 0) {
        mb_log(MB_LOG_ERR, "%s", err);
        return 2;
    }
    for (int i = 0; i < o->n; i++) {
        if (mb_config_set(cfg, o->keys[i], o->values[i], err, sizeof(err)) != 0) {
            mb_log(MB_LOG_ERR, "--%s: %s", o->keys[i], err);
            return 2;
        }
    }
    if (mb_config_check(cfg, err, sizeof(err)) != 0) {
        mb_log(MB_LOG_ERR, "%s", err);
        return 2;
    }
    mb_log_set_level(cfg->log_level);
    return 0;
}

static const char *user_name(uid_t uid, char *buf, size_t len)
{
    struct passwd pw, *res = NULL;
    char tmp[1024];
    if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &res) == 0 && res)
        snprintf(buf, len, "%s", res->pw_name);
    else
        snprintf(buf, len, "no user name");
    return buf;
}

/* The runtime and state directories hold the sockets, the lock and the
 * journal. A directory another user owns or may write into lets that user
 * plant a symbolic link the daemon would follow (a root daemon truncating
 * any file) or replace its sockets: refuse it, naming path and owner. */
static int check_private_dir(const char *what, const char *path)
{
    struct stat st;
    char name[64];
    if (lstat(path, &st) != 0) {
        mb_log(MB_LOG_ERR, "failed to inspect the %s directory %s: %s", what, path, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
        mb_log(MB_LOG_ERR, "refusing the %s directory %s: it is %s, not a directory", what, path,
               S_ISLNK(st.st_mode) ? "a symbolic link" : "another kind of file");
        return -1;
    }
    if (st.st_uid != geteuid()) {
        mb_log(MB_LOG_ERR, "refusing the %s directory %s: it is owned by uid %u (%s), not by the "
               "daemon's uid %u; remove it or give it to uid %u", what, path, (unsigned)st.st_uid,
               user_name(st.st_uid, name, sizeof(name)), (unsigned)geteuid(), (unsigned)geteuid());
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        mb_log(MB_LOG_ERR, "refusing the %s directory %s: other users may write into it (mode %04o, "
               "owner uid %u); make it writable by its owner only", what, path,
               (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
        return -1;
    }
    return 0;
}

/* A file the daemon opens in its directories must not be a symbolic link
 * (opening it with O_NOFOLLOW fails the same way, with a vaguer message). */
static int check_not_link(const char *what, const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        mb_log(MB_LOG_ERR, "refusing the %s %s: it is %s, not a regular file; remove it", what, path,
               S_ISLNK(st.st_mode) ? "a symbolic link" : "another kind of file");
        return -1;
    }
    return 0;
}

/* The runtime directory (created when missing) and the state directory. */
static int check_dirs(const char *runtime_dir, const char *state_dir)
{
    if (mkdir(runtime_dir, 0755) != 0 && errno != EEXIST) {
        mb_log(MB_LOG_ERR, "failed to create runtime directory %s: %s", runtime_dir, strerror(errno));
        return -1;
    }
    if (check_private_dir("runtime", runtime_dir) != 0)
        return -1;
    if (state_dir && strcmp(state_dir, runtime_dir) != 0 && check_private_dir("state", state_dir) != 0)
        return -1;
    return 0;
}

/* One daemon per device and runtime directory: an flock on gpuN.lock. */
static int take_lock(struct daemon *d)
{
    snprintf(d->lock_path, sizeof(d->lock_path), "%s/gpu%d.lock", d->runtime_dir, d->device);
    if (check_not_link("lock file", d->lock_path) != 0)
        return -1;
    d->lock_fd = open(d->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (d->lock_fd < 0) {
        mb_log(MB_LOG_ERR, "failed to open %s: %s", d->lock_path, strerror(errno));
        return -1;
    }
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char buf[32] = "";
        ssize_t n = pread(d->lock_fd, buf, sizeof(buf) - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        mb_log(MB_LOG_ERR, "another moonbrightd (pid %s) already serves device %d in %s; not starting",
               *buf ? buf : "?", d->device, d->runtime_dir);
        close(d->lock_fd);
        d->lock_fd = -1;
        return -1;
    }
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(d->lock_fd, 0) != 0 || pwrite(d->lock_fd, pid, (size_t)len, 0) != len)
        mb_log(MB_LOG_WARN, "failed to write pid to %s", d->lock_path);
    return 0;
}

/* A listening AF_UNIX socket at path, open to every local user (access is
 * decided per request: sessions, admin uids). */
static int listen_unix(const char *path, int type)
{
    struct sockaddr_un sa;
    if (mb_chan_sockaddr(&sa, path) != 0) {
        mb_log(MB_LOG_ERR, "failed to bind %s: path too long", path);
        return -1;
    }
    int fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 128) != 0) {
        mb_log(MB_LOG_ERR, "failed to bind %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    chmod(path, 0666);
    return fd;
}

static int bind_sockets(struct daemon *d)
{
    char ep[300];
    if (mb_ctl_endpoint(ep, sizeof(ep), d->runtime_dir, d->device) != 0 ||
        mb_chan_path(d->chan_path, sizeof(d->chan_path), d->runtime_dir, d->device) != 0) {
        mb_log(MB_LOG_ERR, "runtime directory path too long: %s", d->runtime_dir);
        return -1;
    }
    snprintf(d->ctl_path, sizeof(d->ctl_path), "%s/gpu%d.ctl", d->runtime_dir, d->device);
    unlink(d->ctl_path);   /* stale from a crashed daemon: we hold the lock */
    unlink(d->chan_path);
    /* The control socket speaks ZMTP itself (zmtp.c says why). */
    if ((d->ctl_listen = listen_unix(d->ctl_path, SOCK_STREAM)) < 0 ||
        (d->chan_listen = listen_unix(d->chan_path, SOCK_SEQPACKET)) < 0)
        return -1;
    return 0;
}

/* Descriptors: frames take one each; connections of both channels share
 * the rest but `headroom` for the daemon's own files; one uid may hold a
 * quarter of the connections at most (sessions and control connections
 * together), and a few handle channels waiting for hello; the last few
 * connections are kept for administrators, so that one can always look
 * and act. A spare descriptor is kept to refuse connections cleanly at
 * the limit. */
static void set_fd_limits(struct daemon *d, unsigned long fd_limit)
{
    unsigned long reserve = fd_limit >= 65536 ? 16384
                          : fd_limit > 8192 ? fd_limit / 8 : fd_limit > 2048 ? 1024 : fd_limit / 2;
    d->pool.max_frames = (uint32_t)(fd_limit - reserve);
    unsigned long conns = reserve > 96 ? reserve - 64 : reserve / 2;
    d->conn_cap = (uint32_t)conns;
    d->conn_admin = d->conn_cap / 16 < 16 ? d->conn_cap / 16 : 16;
    d->uid_conn_cap = d->conn_cap / 4 > 1 ? d->conn_cap / 4 : 1;
    d->uid_pending_cap = d->conn_cap / 16 < 32 ? (d->conn_cap / 16 ? d->conn_cap / 16 : 1) : 32;
    d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static int open_signals(struct daemon *d)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    d->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return d->sigfd < 0 ? -1 : 0;
}

/* Without a budget in the file or on the command line: the device's memory;
 * on the host backend half of physical memory (frames are shared memory
 * the rest of the machine also needs), or all of an emulated device's
 * ($MOONBRIGHT_HOST_MEMORY). A budget above the device's memory is a cap
 * the device reaches first: said at start. Then the checks that need it. */
static int resolve_budget(struct daemon *d)
{
    uint64_t total = d->be->total_bytes;
    if (d->cfg.budget == 0) {
        uint64_t budget = total;
        if (budget == 0) {
            budget = 8ull << 30;
            mb_log(MB_LOG_WARN, "the %s backend did not report its memory; budget %s "
                   "(set --budget or budget = in the config)", d->be->name, "8 GiB");
        } else if (d->be->total_shared) {
            budget /= 2;
        }
        d->cfg.budget = budget < d->cfg.frame_size ? d->cfg.frame_size : budget;
    } else if (total && d->cfg.budget > total) {
        char b[32], t[32];
        mb_log(MB_LOG_WARN, "the budget (%s) is above the %s memory (%s): the device fills "
               "first, and grants then make room by releasing free frames",
               mb_format_size(d->cfg.budget, b, sizeof(b)), d->be->total_shared ? "host's" : "device's",
               mb_format_size(total, t, sizeof(t)));
    }
    char err[512];
    if (mb_config_check(&d->cfg, err, sizeof(err)) != 0) {
        mb_log(MB_LOG_ERR, "%s", err);
        return -1;
    }
    return 0;
}

/* Once serving in the background, let go of the inherited stdio: a pipe or
 * terminal on stderr would otherwise stay open as long as the daemon runs
 * (`moonbrightd ... 2>&1 | grep ...` would never end). A regular file on
 * stderr is a log file the caller chose and stays; anything else gives way
 * to syslog (the journal on systemd hosts). */
static void detach_stdio(void)
{
    struct stat st;
    bool keep_stderr = fstat(2, &st) == 0 && S_ISREG(st.st_mode);
    if (!keep_stderr) {
        mb_log(MB_LOG_INFO, "serving in the background; logging to syslog from now on");
        mb_log_to_syslog();
    }
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        return;
    dup2(devnull, 0);
    dup2(devnull, 1);
    if (!keep_stderr)
        dup2(devnull, 2);
    close(devnull);
}

/* Without --foreground: fork, and let the parent exit once the child is
 * serving (or report why it could not start). */
static int daemonize(int *ready_fd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid > 0) {
        close(p[1]);
        char c = 0;
        ssize_t n = read(p[0], &c, 1);
        _exit(n == 1 && c == 'R' ? 0 : 1);
    }
    close(p[0]);
    setsid();
    *ready_fd = p[1];
    return 0;
}

static void cleanup(struct daemon *d)
{
    while (d->pending)
        pending_drop_session(d, d->pending->session);
    if (d->pool.frames)
        frame_pool_forget_free(&d->pool);
    while (d->sessions)
        session_close(d, d->sessions);
    while (d->withdrawn)
        withdrawn_release(d, d->withdrawn);
    while (d->tenants) {
        struct tenant *t = d->tenants;
        d->tenants = t->next;
        free(t);
    }
    while (d->ctl)
        ctl_free(d, d->ctl);
    if (d->ctl_listen >= 0) {
        close(d->ctl_listen);
        unlink(d->ctl_path);
    }
    if (d->chan_listen >= 0) {
        close(d->chan_listen);
        unlink(d->chan_path);
    }
    if (d->spare_fd >= 0)
        close(d->spare_fd);
    if (d->pool.frames)
        frame_pool_destroy(&d->pool);
    shares_destroy(d);
    mb_backend_close(d->be);
    mb_config_free(&d->cfg);
    if (d->sigfd >= 0)
        close(d->sigfd);
    if (d->lock_fd >= 0)
        close(d->lock_fd);
}

/* Every exit after start-up began tells systemd it is stopping. */
static int stop(int rc)
{
    sd_notify(0, "STOPPING=1");
    return rc;
}

/* Tenants named in the config exist from the start, so their min is kept
 * available before their first session and `tenants` lists them. */
static int add_config_tenants(struct daemon *d)
{
    for (size_t i = 0; i < d->cfg.n_tenants; i++)
        if (!tenant_get(d, d->cfg.tenants[i].name)) {
            mb_log(MB_LOG_ERR, "failed to set up tenant %s: out of memory", d->cfg.tenants[i].name);
            return MB_ENOMEM;
        }
    return 0;
}

/* An environment switch set to "0" (diagnostics: A/B runs); on by default. */
static bool env_off(const char *name)
{
    return mb_env_long(name, 1, 0, 1) == 0;
}

/* Descriptors the table is grown for at start-up (8 bytes each). */
#define FD_TABLE_AHEAD 131072ul

int main(int argc, char **argv)
{
    mb_log_set_ident("moonbrightd");
    struct options o = { .device = 0, .drain_timeout_ms = 10000, .reclaim_timeout_ms = 2000 };
    int rc = parse_options(argc, argv, &o);
    if (rc)
        return stop(rc);
    struct daemon d = { .device = o.device, .chan_listen = -1, .ctl_listen = -1, .spare_fd = -1,
                        .sigfd = -1, .lock_fd = -1,
                        .drain_timeout_ms = o.drain_timeout_ms,
                        .reclaim_timeout_ms = o.reclaim_timeout_ms };
    mb_config_defaults(&d.cfg);
    if ((rc = load_config(&o, &d.cfg)) != 0) {
        mb_config_free(&d.cfg);
        return stop(rc);
    }
    const struct mb_config *cfg = &d.cfg;
    d.runtime_dir = cfg->runtime_dir ? cfg->runtime_dir : mb_default_runtime_dir();
    int ready_fd = -1;

    const char *state_env = getenv("STATE_DIRECTORY");
    const char *state_dir = o.state_dir ? o.state_dir : state_env && *state_env ? state_env : NULL;
    if (check_dirs(d.runtime_dir, state_dir) != 0) {
        mb_config_free(&d.cfg);
        return stop(1);
    }
    if (take_lock(&d) != 0) {
        mb_config_free(&d.cfg);
        return stop(1);
    }
    if (!o.foreground && daemonize(&ready_fd) != 0) {
        mb_log(MB_LOG_ERR, "failed to go to the background: %s", strerror(errno));
        close(d.lock_fd);
        mb_config_free(&d.cfg);
        return stop(1);
    }
    if (!o.foreground) {
        /* The child inherited the locked file: it now records its own pid. */
        char pid[32];
        int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
        if (ftruncate(d.lock_fd, 0) != 0 || pwrite(d.lock_fd, pid, (size_t)len, 0) != len)
            mb_log(MB_LOG_WARN, "failed to write pid to %s", d.lock_path);
    }
    unsigned long fd_limit = mb_raise_fd_limit(true);
    /* Every free frame keeps a descriptor (every frame, on the host backend):
     * grow the table for them now, before
     * the backend starts threads, rather than in the exports of grants
     * (each growth, in a process with threads, waits for an RCU grace
     * period). Capped at FD_TABLE_AHEAD (1 MiB of table); beyond it the
     * table grows as it must. */
    if (!env_off("MOONBRIGHTD_FD_TABLE_AHEAD"))
        mb_fd_table_reserve(fd_limit < FD_TABLE_AHEAD ? fd_limit : FD_TABLE_AHEAD);
    rc = 1;
    if (open_signals(&d) != 0) {
        mb_log(MB_LOG_ERR, "failed to set up signals: %s", strerror(errno));
        goto out;
    }
    if (mb_backend_open(cfg->backend, o.device, &d.be) != 0) {
        mb_log(MB_LOG_ERR, "failed to open the %s backend for device %d", cfg->backend, o.device);
        goto out;
    }
    if (resolve_budget(&d) != 0)
        goto out;
    /* Grants slower than this many microseconds are logged with their path. */
    long slow_us = mb_env_long("MOONBRIGHTD_SLOW_GRANT_US", 0, 0, 60000000);
    if (slow_us > 0)
        d.slow_grant_ns = (uint64_t)slow_us * 1000;
    /* One small exported frame held for the daemon's life (outside the
     * budget): with it, a frame created after every other was released
     * exports in tens of microseconds instead of most of a millisecond. */
    if (d.be->ops->keep_exports_warm && !env_off("MOONBRIGHTD_EXPORT_ANCHOR") &&
        d.be->ops->keep_exports_warm(d.be) != 0)
        mb_log(MB_LOG_WARN, "failed to keep an exported frame open; first exports will be slower");
    if (cfg->frame_size % d.be->granularity) {
        mb_log(MB_LOG_ERR, "bad frame size %llu: must be a multiple of %zu (%s granularity)",
               (unsigned long long)cfg->frame_size, d.be->granularity, d.be->name);
        goto out;
    }
    if (frame_pool_init(&d.pool, d.be, cfg->frame_size, cfg->budget - cfg->budget % cfg->frame_size) != 0)
        goto out;
    d.pool.export_ahead = !env_off("MOONBRIGHTD_EXPORT_AHEAD");
    d.pool.unexport = d.be->ops->unexport && !env_off("MOONBRIGHTD_UNEXPORT");
    d.pool.keep_granted = !env_off("MOONBRIGHTD_KEEP_GRANTED");
    {
        const char *sd = o.state_dir ? o.state_dir : getenv("STATE_DIRECTORY");
        char journal[300];
        snprintf(journal, sizeof(journal), "%s/gpu%d.journal", sd && *sd ? sd : d.runtime_dir, d.device);
        if (check_not_link("state journal", journal) != 0 ||
            frame_pool_open_journal(&d.pool, journal) != 0)
            goto out;
    }
    /* Each frame holds a descriptor; connections have their own share, so
     * running out of frames never means running out of descriptors. Large
     * allocations get frames of up to 2^MB_MAX_ORDER units, so the limit
     * binds only when many small frames are live: say so where one-unit
     * frames alone could not fill the budget, and warn only where not even
     * the largest frames could. */
    set_fd_limits(&d, fd_limit);
    /* Slots for as many frames as the descriptor table is grown for, so
     * that no grant waits while the frame table doubles. */
    if (frame_pool_reserve_slots(&d.pool, d.pool.next_unused + (d.pool.max_frames < FD_TABLE_AHEAD
                                                                    ? d.pool.max_frames
                                                                    : (uint32_t)FD_TABLE_AHEAD)) != 0)
        mb_log(MB_LOG_WARN, "failed to make the frame table's slots ahead; it grows as frames are made");
    {
        uint64_t unit_cover = (uint64_t)d.pool.max_frames * cfg->frame_size;
        if (unit_cover >= d.pool.budget_bytes)
            ;
        else if (unit_cover << MB_MAX_ORDER < d.pool.budget_bytes)
            mb_log(MB_LOG_WARN, "the descriptor limit (%lu) allows %u frames, too few for the "
                   "budget even as the largest frames; raise LimitNOFILE (ulimit -n) or use a "
                   "larger --frame-size", fd_limit, d.pool.max_frames);
        else
            mb_log(MB_LOG_INFO, "the descriptor limit (%lu) allows %u frames: the budget is "
                   "reachable with large frames, not with one-unit frames alone", fd_limit,
                   d.pool.max_frames);
    }
    d.pool.scrub = cfg->scrub;
    d.pool.idle_ms = cfg->reserve_idle_ms;
    d.pool.headroom = cfg->device_headroom;
    /* The workers run even without a configured reserve: its target
     * follows recent grants (frame_pool_tick). */
    if (frame_pool_prefill(&d.pool, cfg->reserve) != 0)
        mb_log(MB_LOG_WARN, "failed to create the %llu-byte reserve; continuing",
               (unsigned long long)cfg->reserve);
    if (add_config_tenants(&d) != 0 || bind_sockets(&d) != 0)
        goto out;
    d.started_ms = mb_now_ms();
    char a[32], b[32], id[MB_UUID_STR];
    mb_uuid_str(d.be->uuid, id);
    mb_log(MB_LOG_INFO, "serving device %d (%s backend, %s) in %s: %s frames, budget %s, scrub %s, "
           "config %s", d.device, d.be->name, id, d.runtime_dir,
           mb_format_size(cfg->frame_size, a, sizeof(a)),
           mb_format_size(d.pool.budget_bytes, b, sizeof(b)), cfg->scrub ? "on" : "off",
           o.config_read ? o.config_read : "none (no " MB_CONFIG_DEFAULT_PATH ")");
    /* The control socket listens: a request sent now is answered once the loop
     * turns, so READY=1 means the control socket answers. */
    snprintf(d.last_status, sizeof(d.last_status), "serving device %d (%s backend)", d.device,
             d.be->name);
    sd_notifyf(0, "READY=1\nSTATUS=%s\nMAINPID=%d", d.last_status, (int)getpid());
    if (ready_fd >= 0) {
        if (write(ready_fd, "R", 1) != 1)
            mb_log(MB_LOG_WARN, "failed to tell the parent we are ready");
        close(ready_fd);
        ready_fd = -1;
        detach_stdio();
    }
    rc = daemon_serve(&d) == 0 ? 0 : 1;
out:
    sd_notify(0, "STOPPING=1\nSTATUS=stopping");
    cleanup(&d);
    if (ready_fd >= 0)
        close(ready_fd);
    mb_log(MB_LOG_INFO, "stopped");
    return rc;
}
