/* mbbench.c: the benchmark tool's entry point and shared plumbing: command
 * dispatch, common options, summaries, the JSON writer, the daemon status
 * probe, worker spawning. Each subcommand lives in its own mbbench_*.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <moonbright/mbclient.h>

#include "fdpass.h"
#include "mbbench.h"
#include "size.h"
#include "wire.h"

struct bench_opts bench_opt = { .device = 0 };

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

long bench_self_status(int status_fd, const char *key)
{
    int fd = status_fd >= 0 ? status_fd : open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    char buf[4096];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
    if (fd >= 0 && status_fd < 0)
        close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *p = strstr(buf, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

int bench_common_opt(int c, const char *arg)
{
    switch (c) {
    case OPT_JSON: bench_opt.json = true; return 1;
    case OPT_QUICK: bench_opt.quick = true; return 1;
    case OPT_QUIET: bench_opt.quiet = true; return 1;
    case OPT_RUNTIME_DIR:
        bench_opt.runtime_dir = arg;
        setenv("MOONBRIGHT_RUNTIME_DIR", arg, 1);
        return 1;
    case OPT_DEVICE: {
        char *end;
        long d = strtol(arg, &end, 10);
        if (*arg == 0 || *end || d < 0 || d > 255) {
            fprintf(stderr, "mbbench: bad --device '%s'\n", arg);
            return MB_EINVAL;
        }
        bench_opt.device = (int)d;
        setenv("MOONBRIGHT_DEVICE", arg, 1);
        return 1;
    }
    default: return 0;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void bench_summarize(uint64_t *v, size_t n, struct bench_summary *out)
{
    memset(out, 0, sizeof(*out));
    if (n == 0)
        return;
    qsort(v, n, sizeof(*v), cmp_u64);
    long double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    out->n = n;
    out->mean = (double)(sum / n);
    out->min = v[0];
    out->max = v[n - 1];
    /* Nearest rank: the smallest sample with at least q of the samples at or below it. */
    out->p50 = v[(n * 50 + 99) / 100 - 1];
    out->p99 = v[(n * 99 + 99) / 100 - 1];
}

int bench_reserve(void **v, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : first;
    void *nv = realloc(*v, nc * elem);
    if (!nv)
        return MB_ENOMEM;
    *v = nv;
    *cap = nc;
    return 0;
}

int bench_vec_push(struct bench_vec *b, uint64_t x)
{
    void *v = b->v;
    int rc = bench_reserve(&v, &b->cap, b->n, sizeof(*b->v), 1024);
    b->v = v;
    if (rc)
        return rc;
    b->v[b->n++] = x;
    return 0;
}

void bench_vec_free(struct bench_vec *b)
{
    free(b->v);
    memset(b, 0, sizeof(*b));
}

/* ---- JSON writer ---- */

void jw_init(struct jw *w, FILE *f)
{
    memset(w, 0, sizeof(*w));
    w->f = f;
    w->first[0] = true;
}

static void jw_quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void jw_key(struct jw *w, const char *key)
{
    if (!w->first[w->depth])
        fputc(',', w->f);
    w->first[w->depth] = false;
    if (key) {
        jw_quoted(w->f, key);
        fputc(':', w->f);
    }
}

static void jw_open(struct jw *w, const char *key, char ch)
{
    jw_key(w, key);
    fputc(ch, w->f);
    if (w->depth < 31)
        w->depth++;
    w->first[w->depth] = true;
}

void jw_obj(struct jw *w, const char *key) { jw_open(w, key, '{'); }
void jw_arr(struct jw *w, const char *key) { jw_open(w, key, '['); }

void jw_end(struct jw *w, char close)
{
    fputc(close, w->f);
    if (w->depth > 0)
        w->depth--;
    if (w->depth == 0 && close == '}')
        fputc('\n', w->f);
}

void jw_str(struct jw *w, const char *key, const char *v)
{
    jw_key(w, key);
    jw_quoted(w->f, v ? v : "");
}

void jw_u64(struct jw *w, const char *key, uint64_t v)
{
    jw_key(w, key);
    fprintf(w->f, "%llu", (unsigned long long)v);
}

void jw_i64(struct jw *w, const char *key, int64_t v)
{
    jw_key(w, key);
    fprintf(w->f, "%lld", (long long)v);
}

void jw_dbl(struct jw *w, const char *key, double v)
{
    jw_key(w, key);
    if (v != v || v > 1e300 || v < -1e300)
        fputs("null", w->f);     /* JSON has no NaN or infinity */
    else
        fprintf(w->f, "%.6g", v);
}

void jw_bool(struct jw *w, const char *key, bool v)
{
    jw_key(w, key);
    fputs(v ? "true" : "false", w->f);
}

void jw_null(struct jw *w, const char *key)
{
    jw_key(w, key);
    fputs("null", w->f);
}

void jw_summary(struct jw *w, const char *key, const struct bench_summary *s)
{
    jw_obj(w, key);
    jw_u64(w, "n", s->n);
    jw_dbl(w, "mean", s->mean);
    jw_u64(w, "min", s->min);
    jw_u64(w, "p50", s->p50);
    jw_u64(w, "p99", s->p99);
    jw_u64(w, "max", s->max);
    jw_end(w, '}');
}

void jw_ok(struct jw *w, int err)
{
    jw_bool(w, "ok", err == 0);
    if (err)
        jw_str(w, "error", mb_strerror(err));
}

void jw_skipped(struct jw *w, const char *what, const char *why)
{
    char note[320];
    snprintf(note, sizeof(note), "%s rows skipped: %s", what, why);
    jw_str(w, NULL, note);
}

void jw_alloc_free(struct jw *w, const struct bench_summary *alloc, const struct bench_summary *free_,
                   const struct bench_summary *pair)
{
    jw_summary(w, "alloc_ns", alloc);
    jw_summary(w, "free_ns", free_);
    jw_summary(w, "pair_ns", pair);
}

static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                p += 1 + (p[1] == ' ');
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, len, "%s", p);
            }
            break;
        }
    }
    fclose(f);
}

void jw_header(struct jw *w, const char *bench)
{
    char date[64], model[256];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
    cpu_model(model, sizeof(model));
    struct utsname u;
    if (uname(&u) != 0)
        memset(&u, 0, sizeof(u));
    jw_obj(w, NULL);
    jw_str(w, "bench", bench);
    jw_str(w, "tool", "mbbench");
    jw_str(w, "date", date);
    jw_obj(w, "host");
    jw_str(w, "hostname", u.nodename);
    jw_str(w, "kernel", u.release);
    jw_str(w, "cpu", model);
    jw_i64(w, "cpus", sysconf(_SC_NPROCESSORS_ONLN));
    jw_end(w, '}');
    jw_str(w, "runtime_dir", mb_default_runtime_dir());
    jw_i64(w, "device", bench_opt.device);
    jw_bool(w, "quick", bench_opt.quick);
    /* The host backend's emulated driver costs, when this process has them
     * (common/host_costs.c): its figures are host figures all the same. */
    const char *costs = getenv("MOONBRIGHT_HOST_COSTS");
    if (costs)
        jw_str(w, "host_costs", costs);
    else
        jw_null(w, "host_costs");
}

/* ---- the daemon's status ---- */

struct bench_daemon {
    void *zctx, *dealer;
    uint64_t next_id;
};

int bench_daemon_open(struct bench_daemon **out)
{
    char ep[300], path[256];
    const char *dir = mb_default_runtime_dir();
    if (mb_ctl_endpoint(ep, sizeof(ep), dir, bench_opt.device) != 0 ||
        mb_chan_path(path, sizeof(path), dir, bench_opt.device) != 0)
        return MB_EINVAL;
    if (access(path, F_OK) != 0)
        return MB_EUNAVAIL;
    struct bench_daemon *d = calloc(1, sizeof(*d));
    if (!d)
        return MB_ENOMEM;
    d->zctx = zmq_ctx_new();
    d->dealer = d->zctx ? zmq_socket(d->zctx, ZMQ_DEALER) : NULL;
    int zero = 0;
    if (!d->dealer || zmq_setsockopt(d->dealer, ZMQ_LINGER, &zero, sizeof(zero)) != 0 ||
        zmq_connect(d->dealer, ep) != 0) {
        bench_daemon_close(d);
        return MB_EUNAVAIL;
    }
    *out = d;
    return 0;
}

int bench_daemon_status(struct bench_daemon *d, struct bench_dstatus *out)
{
    if (!d || !out)
        return MB_EINVAL;
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Status st = MB__STATUS__INIT;
    req.body_case = MB__REQUEST__BODY_STATUS;
    req.status = &st;
    req.id = ++d->next_id;
    Mb__Reply *rep;
    int rc = mb_wire_send_request(d->dealer, &req);
    if (rc == 0)
        rc = mb_wire_recv_reply(d->dealer, req.id, 5000, &rep, NULL, NULL);
    if (rc != 0)
        return rc;
    if (rep->code != 0 || rep->body_case != MB__REPLY__BODY_STATUS) {
        rc = rep->code < 0 && rep->code >= MB_STATUS_MIN ? rep->code : MB_EPROTO;
        mb__reply__free_unpacked(rep, NULL);
        return rc;
    }
    const Mb__StatusReply *s = rep->status;
    memset(out, 0, sizeof(*out));
    snprintf(out->backend, sizeof(out->backend), "%s", s->backend ? s->backend : "");
    out->frame_bytes = s->frame_bytes;
    out->budget_bytes = s->budget_bytes;
    out->bytes_granted = s->bytes_granted;
    out->bytes_free = s->bytes_free;
    out->requests = s->requests;
    out->grant_creates = s->grant_creates;
    out->reexports = s->reexports;
    out->exported_ahead = s->exported_ahead;
    out->made_ahead = s->made_ahead;
    out->frames_total = s->frames_total;
    out->frames_free = s->frames_free;
    out->frames_granted = s->frames_granted;
    out->descriptors = s->descriptors;
    out->sessions = (uint32_t)s->n_sessions;
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

uint64_t bench_daemon_wait_idle(int timeout_ms)
{
    struct bench_daemon *d;
    struct bench_dstatus ds;
    if (bench_daemon_open(&d) != 0)
        return 0;
    uint64_t free_bytes = 0;
    for (int waited = 0;; waited += 250) {
        if (bench_daemon_status(d, &ds) != 0) {
            free_bytes = 0;
            break;
        }
        free_bytes = ds.bytes_free;
        if (free_bytes == 0 || waited >= timeout_ms)
            break;
        if (waited % 2000 == 0)
            bench_progress(true, "waiting for moonbrightd to release %llu MiB of free frames",
                           (unsigned long long)(free_bytes >> 20));
        struct timespec ts = { 0, 250 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    bench_daemon_close(d);
    return free_bytes;
}

void bench_daemon_close(struct bench_daemon *d)
{
    if (!d)
        return;
    if (d->dealer)
        zmq_close(d->dealer);
    if (d->zctx)
        zmq_ctx_term(d->zctx);
    free(d);
}

/* ---- small helpers ---- */

void bench_progress(bool force, const char *fmt, ...)
{
    static uint64_t last;
    if (bench_opt.quiet)
        return;
    uint64_t now = bench_now_ns();
    if (!force && now - last < 1000000000u)
        return;
    last = now;
    va_list ap;
    va_start(ap, fmt);
    fputs("mbbench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void bench_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int bench_parse_sizes(const char *s, uint64_t *out, int max)
{
    int n = 0;
    char buf[64];
    while (*s) {
        size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof(buf) || n == max)
            return MB_EINVAL;
        memcpy(buf, s, len);
        buf[len] = 0;
        if (mb_parse_size(buf, &out[n]) != 0 || out[n] == 0)
            return MB_EINVAL;
        n++;
        s += len + (s[len] == ',');
    }
    return n ? n : MB_EINVAL;
}

const char *bench_fmt_size(uint64_t bytes, char *buf, size_t len)
{
    return mb_format_size(bytes, buf, len);
}

pid_t bench_spawn(char *const argv[], int keep_fd1, int keep_fd2)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* Child: the descriptors named survive exec; everything else keeps its flags. */
    if (keep_fd1 >= 0)
        fcntl(keep_fd1, F_SETFD, 0);
    if (keep_fd2 >= 0)
        fcntl(keep_fd2, F_SETFD, 0);
    execv(bench_opt.self, argv);
    fprintf(stderr, "mbbench: failed to start worker %s: %s\n", bench_opt.self, strerror(errno));
    _exit(127);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mbbench SUBCOMMAND [options]\n"
            "\n"
            "Benchmarks MoonBright against the allocators a user would pick instead.\n"
            "Needs a running moonbrightd (see --runtime-dir).\n"
            "\n"
            "subcommands:\n"
            "  latency            alloc+free pair latency per size: mb_malloc, mb_malloc_async,\n"
            "                     cuMemAlloc, cuMemAllocAsync (with a GPU), malloc (host backend)\n"
            "  grant              how fast frames become a usable pointer: re-grant, first grant,\n"
            "                     with and without large frames, cuMemAlloc, in-process create+map\n"
            "  rpc                daemon round trips with 1, 4, 16, 64 client processes\n"
            "  replay TRACE       LLM KV-cache replay of a request trace (Azure CSV or JSONL)\n"
            "  threads            pairs per second from threads sharing one client, and\n"
            "                     streams destroyed under it\n"
            "  tenants            tenants with alternating peaks against static partitioning\n"
            "  trims              bursts, frees and trims: memory held and address space used,\n"
            "                     with the heap's holes filled again and without\n"
            "  fdtable            what growing a descriptor table costs in a process with\n"
            "                     threads, fresh and grown ahead (needs no daemon)\n"
            "\n"
            "Every subcommand takes:\n" BENCH_COMMON_HELP
            "\n"
            "mbbench SUBCOMMAND --help lists its own options.\n");
}

int main(int argc, char **argv)
{
    static char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = 0;
        bench_opt.self = self;
    } else {
        bench_opt.self = argv[0];
    }
    const char *dev = getenv("MOONBRIGHT_DEVICE");
    if (dev && *dev)
        bench_opt.device = atoi(dev);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {
        { "latency", bench_latency },     { "grant", bench_grant },
        { "rpc", bench_rpc },
        { "replay", bench_replay },       { "tenants", bench_tenants },
        { "threads", bench_threads },     { "trims", bench_trims },
        { "fdtable", bench_fdtable },
        { "rpc-worker", bench_rpc_worker }, { "tenants-worker", bench_tenants_worker },
    };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (strcmp(argv[1], cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "mbbench: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
