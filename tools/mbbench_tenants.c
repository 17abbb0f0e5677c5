/* mbbench_tenants.c: `mbbench tenants`: two or more tenant processes (this
 * program re-executed as `tenants-worker`) take turns at a demand peak and
 * trim after it, so the daemon moves frames between them; time for the
 * starving tenant's first 64 frames, and memory needed against static
 * partitioning (the sum of each tenant's own peak). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moonbright/mbclient.h>

#include "fdpass.h"
#include "mbbench.h"

#define STARVE_FRAMES 64

/* ---- worker: commands on stdin, one reply line each on stdout ---- */

int bench_tenants_worker(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "mbbench tenants-worker: internal command (NAME BASE PEAK)\n");
        return 2;
    }
    const char *name = argv[1];
    size_t base = strtoull(argv[2], NULL, 10), peak = strtoull(argv[3], NULL, 10);
    bench_raise_nofile();
    mb_client *c;
    int rc = mb_open(&c, name);
    if (rc != 0) {
        printf("err %d\n", rc);
        return 1;
    }
    mb_client_stats st;
    mb_stats(c, &st);
    size_t fb = st.frame_bytes, chunk = STARVE_FRAMES * fb;
    size_t nbuf = (peak + chunk - 1) / chunk;
    void **bufs = calloc(nbuf ? nbuf : 1, sizeof(*bufs));
    void *basep = NULL;
    if (!bufs || (base && (rc = mb_malloc(c, base, &basep)) != 0)) {
        printf("err %d\n", rc ? rc : MB_ENOMEM);
        free(bufs);
        mb_close(c);
        return 1;
    }
    printf("ready %zu\n", fb);
    fflush(stdout);
    char cmd[64];
    size_t held = 0;
    while (fgets(cmd, sizeof(cmd), stdin)) {
        if (strncmp(cmd, "peak", 4) == 0) {
            /* The first 64 frames are the starving tenant's urgent need; the rest follow. */
            uint64_t t0 = bench_now_ns(), t_first = 0;
            size_t left = peak;
            rc = 0;
            for (held = 0; rc == 0 && left > 0; held++) {
                size_t want = left < chunk ? left : chunk;
                rc = mb_malloc(c, want, &bufs[held]);
                if (rc != 0)
                    break;
                if (held == 0)
                    t_first = bench_now_ns() - t0;
                left -= want;
            }
            uint64_t t_all = bench_now_ns() - t0;
            mb_stats(c, &st);
            if (rc != 0)
                printf("err %d\n", rc);
            else
                printf("ok %llu %llu %llu\n", (unsigned long long)t_first, (unsigned long long)t_all,
                       (unsigned long long)st.bytes_granted);
        } else if (strncmp(cmd, "release", 7) == 0) {
            uint64_t t0 = bench_now_ns();
            rc = 0;
            for (size_t i = 0; i < held; i++) {
                int e = mb_free(c, bufs[i]);
                rc = rc ? rc : e;
            }
            held = 0;
            int e = mb_trim(c, 0);
            rc = rc ? rc : e;
            uint64_t t = bench_now_ns() - t0;
            mb_stats(c, &st);
            if (rc != 0)
                printf("err %d\n", rc);
            else
                printf("ok %llu %llu\n", (unsigned long long)t, (unsigned long long)st.bytes_granted);
        } else {
            break;   /* "quit" or anything else */
        }
        fflush(stdout);
    }
    for (size_t i = 0; i < held; i++)
        mb_free(c, bufs[i]);
    free(bufs);
    if (basep)
        mb_free(c, basep);
    mb_close(c);
    return 0;
}

/* ---- parent ---- */

struct tenant {
    pid_t pid;
    FILE *to, *from;
    uint64_t own_peak;          /* largest bytes_granted it reported */
};

struct round {
    int tenant;
    int err;
    uint64_t first_ns, peak_ns, release_ns;
    uint64_t daemon_at_peak, daemon_created;
};

static int start_tenant(struct tenant *t, int i, uint64_t base, uint64_t peak)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        return MB_ESYS;
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return MB_ESYS;
    }
    fflush(NULL);
    t->pid = fork();
    if (t->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        char name[32], b[32], p[32];
        snprintf(name, sizeof(name), "mbbench-t%d", i);
        snprintf(b, sizeof(b), "%llu", (unsigned long long)base);
        snprintf(p, sizeof(p), "%llu", (unsigned long long)peak);
        char *args[] = { "mbbench", "tenants-worker", name, b, p, NULL };
        execv(bench_opt.self, args);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (t->pid < 0) {
        close(in[1]);
        close(out[0]);
        return MB_ESYS;
    }
    t->to = fdopen(in[1], "w");
    t->from = fdopen(out[0], "r");
    return t->to && t->from ? 0 : MB_ESYS;
}

/* Send a command and read the reply's numbers; the reply's status is returned. */
static int ask(struct tenant *t, const char *cmd, uint64_t *v, int nv)
{
    if (fprintf(t->to, "%s\n", cmd) < 0 || fflush(t->to) != 0)
        return MB_EUNAVAIL;
    char line[256];
    if (!fgets(line, sizeof(line), t->from))
        return MB_EUNAVAIL;
    if (strncmp(line, "ok", 2) != 0) {
        int e = MB_EPROTO;
        sscanf(line, "err %d", &e);
        return e;
    }
    char *p = line + 2;
    for (int i = 0; i < nv; i++)
        v[i] = strtoull(p, &p, 10);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mbbench tenants [options]\n"
               "  --tenants N         tenant processes (default 2)\n"
               "  --rounds R          peaks, taken in turn (default 8; --quick 4)\n"
               "  --peak SIZE         each tenant's demand at its peak (default 1G; --quick 256M)\n"
               "  --base SIZE         each tenant's steady allocation (default 64M; --quick 16M)\n"
               BENCH_COMMON_HELP);
}

int bench_tenants(int argc, char **argv)
{
    enum { OPT_TEN = OPT_FIRST_OWN, OPT_ROUNDS, OPT_PEAK, OPT_BASE };
    static const struct option lo[] = {
        BENCH_COMMON_LONGOPTS,
        { "tenants", required_argument, 0, OPT_TEN },
        { "rounds", required_argument, 0, OPT_ROUNDS },
        { "peak", required_argument, 0, OPT_PEAK },
        { "base", required_argument, 0, OPT_BASE },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    long ntenants = 2, rounds = -1;
    uint64_t peak = 0, base = UINT64_MAX, v[4];
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        int h = bench_common_opt(c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        char *end;
        switch (c) {
        case OPT_TEN:
            ntenants = strtol(optarg, &end, 10);
            if (*end || ntenants < 2 || ntenants > 64)
                goto bad;
            break;
        case OPT_ROUNDS:
            rounds = strtol(optarg, &end, 10);
            if (*end || rounds < 1 || rounds > 100000)
                goto bad;
            break;
        case OPT_PEAK: if (bench_parse_sizes(optarg, v, 1) != 1) goto bad; peak = v[0]; break;
        case OPT_BASE:
            if (strcmp(optarg, "0") == 0)
                base = 0;
            else if (bench_parse_sizes(optarg, v, 1) != 1)
                goto bad;
            else
                base = v[0];
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        continue;
    bad:
        fprintf(stderr, "mbbench tenants: bad value '%s'\n", optarg);
        return 2;
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (rounds < 0)
        rounds = bench_opt.quick ? 4 : 8;
    if (peak == 0)
        peak = bench_opt.quick ? 256u << 20 : 1u << 30;
    if (base == UINT64_MAX)
        base = bench_opt.quick ? 16u << 20 : 64u << 20;
    signal(SIGPIPE, SIG_IGN);

    struct bench_daemon *d;
    struct bench_dstatus ds0, ds;
    int rc = bench_daemon_open(&d);
    if (rc == 0 && (rc = bench_daemon_status(d, &ds0)) != 0)
        bench_daemon_close(d);
    if (rc != 0) {
        fprintf(stderr, "mbbench tenants: the daemon does not answer in %s: %s\n",
                mb_default_runtime_dir(), mb_strerror(rc));
        return 1;
    }
    if (peak < STARVE_FRAMES * ds0.frame_bytes)
        peak = STARVE_FRAMES * ds0.frame_bytes;

    struct tenant *t = calloc((size_t)ntenants, sizeof(*t));
    struct round *rd = calloc((size_t)rounds, sizeof(*rd));
    int started = 0, failed = 0;
    for (; t && rd && started < ntenants; started++) {
        if (start_tenant(&t[started], started, base, peak) != 0)
            break;
        char line[128];
        if (!fgets(line, sizeof(line), t[started].from) || strncmp(line, "ready", 5) != 0) {
            fprintf(stderr, "mbbench tenants: tenant %d did not start: %s", started, line);
            started++;
            failed = 1;
            break;
        }
    }
    uint64_t peak_daemon = 0, baseline_daemon = 0;
    if (!failed && started == ntenants && bench_daemon_status(d, &ds) == 0)
        baseline_daemon = ds.bytes_granted;
    for (long r = 0; !failed && started == ntenants && r < rounds; r++) {
        struct round *x = &rd[r];
        x->tenant = (int)(r % ntenants);
        struct tenant *tt = &t[x->tenant];
        bench_progress(true, "tenants: round %ld of %ld, tenant %d peaks", r + 1, rounds, x->tenant);
        if ((x->err = ask(tt, "peak", v, 3)) != 0) {
            fprintf(stderr, "mbbench tenants: tenant %d failed at its peak: %s\n", x->tenant,
                    mb_strerror(x->err));
            failed = 1;
            break;
        }
        x->first_ns = v[0];
        x->peak_ns = v[1];
        tt->own_peak = v[2] > tt->own_peak ? v[2] : tt->own_peak;
        if (bench_daemon_status(d, &ds) == 0) {
            x->daemon_at_peak = ds.bytes_granted;
            x->daemon_created = (uint64_t)ds.frames_total * ds.frame_bytes;
            peak_daemon = ds.bytes_granted > peak_daemon ? ds.bytes_granted : peak_daemon;
        }
        if ((x->err = ask(tt, "release", v, 2)) != 0) {
            fprintf(stderr, "mbbench tenants: tenant %d failed to release: %s\n", x->tenant,
                    mb_strerror(x->err));
            failed = 1;
            break;
        }
        x->release_ns = v[0];
    }
    for (int i = 0; i < started; i++) {
        if (t[i].to) {
            fprintf(t[i].to, "quit\n");
            fclose(t[i].to);
        }
        if (t[i].from)
            fclose(t[i].from);
        int st;
        while (waitpid(t[i].pid, &st, 0) < 0 && errno == EINTR)
            ;
    }
    bench_daemon_close(d);

    uint64_t static_bytes = 0;
    for (int i = 0; i < ntenants && t; i++)
        static_bytes += t[i].own_peak;
    uint64_t *first = calloc((size_t)rounds + 1, sizeof(uint64_t));
    uint64_t *later = calloc((size_t)rounds + 1, sizeof(uint64_t));
    size_t nfirst = 0, nlater = 0;
    for (long r = 0; first && later && r < rounds; r++) {
        if (rd[r].first_ns == 0)
            continue;
        first[nfirst++] = rd[r].first_ns;
        if (r >= ntenants)          /* after every tenant peaked once: frames come from another tenant */
            later[nlater++] = rd[r].first_ns;
    }
    struct bench_summary sf, sl;
    bench_summarize(first, nfirst, &sf);
    bench_summarize(later, nlater, &sl);

    if (bench_opt.json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_header(&w, "tenants");
        jw_str(&w, "backend", ds0.backend);
        jw_u64(&w, "frame_bytes", ds0.frame_bytes);
        jw_u64(&w, "budget_bytes", ds0.budget_bytes);
        jw_i64(&w, "tenants", ntenants);
        jw_i64(&w, "rounds", rounds);
        jw_u64(&w, "peak_bytes", peak);
        jw_u64(&w, "base_bytes", base);
        jw_u64(&w, "starve_frames", STARVE_FRAMES);
        jw_bool(&w, "ok", !failed);
        jw_summary(&w, "starve_alloc_ns", &sf);
        jw_summary(&w, "starve_alloc_moved_ns", &sl);
        jw_u64(&w, "daemon_granted_before_bytes", baseline_daemon);
        jw_u64(&w, "peak_daemon_granted_bytes", peak_daemon);
        jw_u64(&w, "static_partition_bytes", static_bytes);
        jw_dbl(&w, "shared_over_static", static_bytes ? (double)peak_daemon / static_bytes : 0);
        jw_arr(&w, "rounds_detail");
        for (long r = 0; r < rounds; r++) {
            jw_obj(&w, NULL);
            jw_i64(&w, "tenant", rd[r].tenant);
            jw_i64(&w, "err", rd[r].err);
            jw_u64(&w, "starve_alloc_ns", rd[r].first_ns);
            jw_u64(&w, "peak_alloc_ns", rd[r].peak_ns);
            jw_u64(&w, "release_ns", rd[r].release_ns);
            jw_u64(&w, "daemon_granted_bytes", rd[r].daemon_at_peak);
            jw_u64(&w, "daemon_created_bytes", rd[r].daemon_created);
            jw_end(&w, '}');
        }
        jw_end(&w, ']');
        jw_end(&w, '}');
    } else {
        char a[32], b[32], e[32];
        printf("mbbench tenants: %ld tenants, %ld rounds, peak %s and base %s each, %s backend (budget %s)\n",
               ntenants, rounds, bench_fmt_size(peak, a, sizeof(a)), bench_fmt_size(base, b, sizeof(b)),
               ds0.backend, bench_fmt_size(ds0.budget_bytes, e, sizeof(e)));
        printf("%-6s %-7s %14s %14s %12s %14s\n", "ROUND", "TENANT", "64 FRAMES ms", "WHOLE PEAK ms",
               "RELEASE ms", "DAEMON GRANTED");
        for (long r = 0; r < rounds; r++)
            printf("%-6ld %-7d %14.3f %14.3f %12.3f %14s\n", r + 1, rd[r].tenant, rd[r].first_ns / 1e6,
                   rd[r].peak_ns / 1e6, rd[r].release_ns / 1e6,
                   bench_fmt_size(rd[r].daemon_at_peak, a, sizeof(a)));
        printf("64 frames to the starving tenant: p50 %.3f ms, max %.3f ms (frames moved from another "
               "tenant: p50 %.3f ms, max %.3f ms)\n",
               sf.p50 / 1e6, sf.max / 1e6, sl.p50 / 1e6, sl.max / 1e6);
        printf("memory needed: shared %s (daemon peak) vs static partitioning %s: %.3f\n",
               bench_fmt_size(peak_daemon, a, sizeof(a)), bench_fmt_size(static_bytes, b, sizeof(b)),
               static_bytes ? (double)peak_daemon / static_bytes : 0);
    }
    free(first);
    free(later);
    free(t);
    free(rd);
    return failed;
}
