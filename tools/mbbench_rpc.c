/* mbbench_rpc.c: `mbbench rpc`: daemon round trips from 1, 4, 16 and 64
 * concurrent client processes (this program re-executed as `rpc-worker`),
 * started together behind a pipe barrier; p50/p99 per round trip and
 * aggregate requests per second. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <moonbright/mbclient.h>

#include "fdpass.h"
#include "mbbench.h"

/* What a worker writes to its result file: this header, then n samples (ns). */
struct rpc_result {
    int32_t rc;
    uint32_t pad;
    uint64_t start_ns, end_ns, n, requests;
    uint64_t call_bytes;        /* alloc: the size whose mb_malloc and mb_free each take a round trip */
};

/* ---- worker ---- */

static int worker_wait_go(int ready_fd, int go_fd)
{
    char b = 'r';
    if (write(ready_fd, &b, 1) != 1)
        return MB_ESYS;
    close(ready_fd);
    ssize_t n;
    do
        n = read(go_fd, &b, 1);   /* EOF: the parent closed its end, go */
    while (n < 0 && errno == EINTR);
    close(go_fd);
    return 0;
}

int bench_rpc_worker(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "mbbench rpc-worker: internal command (OP CYCLES READY_FD GO_FD OUT)\n");
        return 2;
    }
    const char *op = argv[1];
    long cycles = strtol(argv[2], NULL, 10);
    int ready_fd = atoi(argv[3]), go_fd = atoi(argv[4]);
    const char *out = argv[5];
    bool alloc = strcmp(op, "alloc") == 0;
    size_t per = alloc ? 2 : 1;
    uint64_t *v = calloc((size_t)cycles * per + 1, sizeof(*v));
    struct rpc_result res = { 0 };
    mb_client *c = NULL;
    struct bench_daemon *d = NULL;
    size_t fb = 0;
    int rc = v ? 0 : MB_ENOMEM;
    if (rc == 0 && alloc) {
        rc = mb_open(&c, "mbbench-rpc");
        mb_client_stats st;
        if (rc == 0 && (rc = mb_stats(c, &st)) == 0)
            fb = st.frame_bytes;
    } else if (rc == 0) {
        rc = bench_daemon_open(&d);
    }
    /* Warm up: the first round trips connect sockets and fill caches. For
     * alloc, find the smallest size (from one frame, doubling) that the
     * library serves from the daemon each time: the small-object and pool
     * tiers keep smaller ones in the process. */
    for (int i = 0; rc == 0 && !alloc && i < 10; i++) {
        struct bench_dstatus ds;
        rc = bench_daemon_status(d, &ds);
    }
    for (size_t size = fb; rc == 0 && alloc && res.call_bytes == 0; size *= 2) {
        mb_client_stats a, b;
        mb_stats(c, &a);
        for (int i = 0; rc == 0 && i < 4; i++) {
            void *p;
            if ((rc = mb_malloc(c, size, &p)) == 0 && (rc = mb_free(c, p)) == 0)
                rc = mb_trim(c, 0);
        }
        mb_stats(c, &b);
        if (rc == 0 && b.daemon_requests - a.daemon_requests >= 8)
            res.call_bytes = size;
        else if (size >= ((size_t)1 << 30))
            rc = MB_ENOENT;   /* nothing takes a round trip: cannot measure */
    }
    fb = res.call_bytes;
    mb_client_stats s0 = { 0 }, s1 = { 0 };
    if (c)
        mb_stats(c, &s0);
    if (worker_wait_go(ready_fd, go_fd) != 0 && rc == 0)
        rc = MB_ESYS;
    res.start_ns = bench_now_ns();
    size_t n = 0;
    for (long i = 0; rc == 0 && i < cycles; i++) {
        if (alloc) {
            void *p;
            uint64_t t0 = bench_now_ns();
            rc = mb_malloc(c, fb, &p);
            uint64_t t1 = bench_now_ns();
            if (rc == 0 && (rc = mb_free(c, p)) == 0)
                rc = mb_trim(c, 0);   /* freed memory stays mapped until trimmed */
            uint64_t t2 = bench_now_ns();
            v[n++] = t1 - t0;
            v[n++] = t2 - t1;
        } else {
            struct bench_dstatus ds;
            uint64_t t0 = bench_now_ns();
            rc = bench_daemon_status(d, &ds);
            v[n++] = bench_now_ns() - t0;
        }
    }
    res.end_ns = bench_now_ns();
    if (c) {
        mb_stats(c, &s1);
        res.requests = s1.daemon_requests - s0.daemon_requests;
    } else {
        res.requests = n;
    }
    res.rc = rc;
    res.n = n;
    if (rc != 0)
        fprintf(stderr, "mbbench rpc-worker %d: %s\n", (int)getpid(), mb_strerror(rc));
    FILE *f = fopen(out, "wb");
    int wrc = f && fwrite(&res, sizeof(res), 1, f) == 1 && fwrite(v, sizeof(*v), n, f) == n ? 0 : 1;
    if (f && fclose(f) != 0)
        wrc = 1;
    free(v);
    mb_close(c);
    bench_daemon_close(d);
    return rc || wrc ? 1 : 0;
}

/* ---- parent ---- */

struct rpc_row {
    int clients;
    uint64_t call_bytes;
    int failed;                 /* workers that did not finish */
    uint64_t round_trips, daemon_requests;
    double seconds, rps, daemon_rps, trips_per_call;
    struct bench_summary all, alloc, free;
};

static int read_results(const char *dir, int n, struct rpc_row *row, bool alloc)
{
    struct bench_vec all = { 0 }, va = { 0 }, vf = { 0 };
    uint64_t start = UINT64_MAX, end = 0, reqs = 0, calls = 0;
    for (int i = 0; i < n; i++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/w%d", dir, i);
        FILE *f = fopen(path, "rb");
        struct rpc_result r;
        if (!f || fread(&r, sizeof(r), 1, f) != 1 || r.rc != 0) {
            row->failed++;
            if (f)
                fclose(f);
            continue;
        }
        for (uint64_t k = 0; k < r.n; k++) {
            uint64_t x;
            if (fread(&x, sizeof(x), 1, f) != 1)
                break;
            bench_vec_push(&all, x);
            if (alloc)
                bench_vec_push(k % 2 ? &vf : &va, x);
        }
        fclose(f);
        unlink(path);
        row->call_bytes = r.call_bytes;
        start = r.start_ns < start ? r.start_ns : start;
        end = r.end_ns > end ? r.end_ns : end;
        reqs += r.requests;
        calls += r.n;
    }
    row->round_trips = reqs;
    row->seconds = end > start ? (end - start) / 1e9 : 0;
    row->rps = row->seconds > 0 ? reqs / row->seconds : 0;
    row->trips_per_call = calls ? (double)reqs / calls : 0;
    bench_summarize(all.v, all.n, &row->all);
    bench_summarize(va.v, va.n, &row->alloc);
    bench_summarize(vf.v, vf.n, &row->free);
    bench_vec_free(&all);
    bench_vec_free(&va);
    bench_vec_free(&vf);
    return row->failed ? MB_EUNAVAIL : 0;
}

static int run_clients(const char *dir, const char *op, long cycles, int n, struct rpc_row *row,
                       struct bench_daemon *d)
{
    memset(row, 0, sizeof(*row));
    row->clients = n;
    int ready[2], go[2];
    if (pipe2(ready, O_CLOEXEC) != 0)
        return MB_ESYS;
    if (pipe2(go, O_CLOEXEC) != 0) {
        close(ready[0]);
        close(ready[1]);
        return MB_ESYS;
    }
    pid_t *pids = calloc((size_t)n, sizeof(*pids));
    int started = 0;
    for (; pids && started < n; started++) {
        char cyc[32], rfd[16], gfd[16], out[4200];
        snprintf(cyc, sizeof(cyc), "%ld", cycles);
        snprintf(rfd, sizeof(rfd), "%d", ready[1]);
        snprintf(gfd, sizeof(gfd), "%d", go[0]);
        snprintf(out, sizeof(out), "%s/w%d", dir, started);
        char *args[] = { "mbbench", "rpc-worker", (char *)op, cyc, rfd, gfd, out, NULL };
        pids[started] = bench_spawn(args, ready[1], go[0]);
        if (pids[started] < 0)
            break;
    }
    close(ready[1]);
    close(go[0]);
    /* Barrier: every worker connected and warmed up (or died: EOF). */
    int got = 0;
    while (got < started) {
        struct pollfd p = { .fd = ready[0], .events = POLLIN };
        int pr = poll(&p, 1, 60000);
        char buf[64];
        ssize_t r = pr > 0 ? read(ready[0], buf, sizeof(buf)) : -1;
        if (r <= 0)
            break;
        got += (int)r;
    }
    close(ready[0]);
    struct bench_dstatus s0 = { 0 }, s1 = { 0 };
    bench_daemon_status(d, &s0);
    close(go[1]);   /* go */
    for (int i = 0; i < started; i++) {
        int st;
        while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
            ;
    }
    bench_daemon_status(d, &s1);
    free(pids);
    int rc = read_results(dir, n, row, strcmp(op, "alloc") == 0);
    row->failed += n - started;
    /* The daemon's own count over the same window (includes this probe's two). */
    row->daemon_requests = s1.requests - s0.requests;
    row->daemon_rps = row->seconds > 0 ? row->daemon_requests / row->seconds : 0;
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mbbench rpc [options]\n"
               "  --clients LIST      concurrent client processes (default 1,4,16,64; --quick 1,4)\n"
               "  --cycles K          cycles per client (default 2000; --quick 20)\n"
               "  --op alloc|status   alloc: mb_malloc+mb_free+mb_trim with MOONBRIGHT_CACHE=0 of the smallest\n"
               "                      size (frames, doubling) the library takes from the daemon, so\n"
               "                      each call is one round trip (grant, return); status: the\n"
               "                      daemon's status request, no session (default alloc)\n" BENCH_COMMON_HELP);
}

int bench_rpc(int argc, char **argv)
{
    enum { OPT_CLIENTS = OPT_FIRST_OWN, OPT_CYCLES, OPT_OP };
    static const struct option lo[] = {
        BENCH_COMMON_LONGOPTS,
        { "clients", required_argument, 0, OPT_CLIENTS },
        { "cycles", required_argument, 0, OPT_CYCLES },
        { "op", required_argument, 0, OPT_OP },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    uint64_t clients[16] = { 1, 4, 16, 64 };
    int nclients = -1;
    long cycles = -1;
    const char *op = "alloc";
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        int h = bench_common_opt(c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        switch (c) {
        case OPT_CLIENTS:
            nclients = bench_parse_sizes(optarg, clients, 16);
            for (int i = 0; i < nclients; i++)
                if (clients[i] > 1024)
                    nclients = -2;
            if (nclients < 0) {
                fprintf(stderr, "mbbench rpc: bad --clients '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_CYCLES:
            cycles = strtol(optarg, NULL, 10);
            if (cycles < 1 || cycles > 10000000) {
                fprintf(stderr, "mbbench rpc: bad --cycles '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_OP:
            if (strcmp(optarg, "alloc") && strcmp(optarg, "status")) {
                fprintf(stderr, "mbbench rpc: --op is alloc or status\n");
                return 2;
            }
            op = optarg;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (nclients < 0) {
        nclients = bench_opt.quick ? 2 : 4;
    }
    if (cycles < 0)
        cycles = bench_opt.quick ? 20 : 2000;
    /* Every mb_malloc takes a grant and every mb_free a return: no frame cache. */
    setenv("MOONBRIGHT_CACHE", "0", 1);
    signal(SIGPIPE, SIG_IGN);

    struct bench_daemon *d;
    struct bench_dstatus ds;
    int rc = bench_daemon_open(&d);
    if (rc == 0 && (rc = bench_daemon_status(d, &ds)) != 0)
        bench_daemon_close(d);
    if (rc != 0) {
        fprintf(stderr, "mbbench rpc: the daemon does not answer in %s: %s\n",
                mb_default_runtime_dir(), mb_strerror(rc));
        return 1;
    }
    char dir[] = "/tmp/mbbench-rpc-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mbbench rpc: failed to create a temporary directory: %s\n", strerror(errno));
        bench_daemon_close(d);
        return 1;
    }
    struct rpc_row rows[16];
    int bad = 0;
    for (int i = 0; i < nclients; i++) {
        bench_progress(true, "rpc: %d client%s x %ld cycles (%s)", (int)clients[i],
                       clients[i] == 1 ? "" : "s", cycles, op);
        if (run_clients(dir, op, cycles, (int)clients[i], &rows[i], d) != 0) {
            fprintf(stderr, "mbbench rpc: %d of %d workers failed\n", rows[i].failed, (int)clients[i]);
            bad = 1;
        }
    }
    rmdir(dir);
    bench_daemon_close(d);

    if (bench_opt.json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_header(&w, "rpc");
        jw_str(&w, "backend", ds.backend);
        jw_str(&w, "op", op);
        jw_u64(&w, "frame_bytes", ds.frame_bytes);
        jw_u64(&w, "cycles", (uint64_t)cycles);
        jw_str(&w, "unit", "ns");
        jw_arr(&w, "rows");
        for (int i = 0; i < nclients; i++) {
            struct rpc_row *r = &rows[i];
            jw_obj(&w, NULL);
            jw_i64(&w, "clients", r->clients);
            jw_i64(&w, "failed", r->failed);
            jw_u64(&w, "call_bytes", r->call_bytes);
            jw_u64(&w, "round_trips", r->round_trips);
            jw_dbl(&w, "round_trips_per_call", r->trips_per_call);
            jw_dbl(&w, "seconds", r->seconds);
            jw_dbl(&w, "requests_per_s", r->rps);
            jw_u64(&w, "daemon_requests", r->daemon_requests);
            jw_dbl(&w, "daemon_requests_per_s", r->daemon_rps);
            jw_summary(&w, "round_trip_ns", &r->all);
            if (strcmp(op, "alloc") == 0) {
                jw_summary(&w, "alloc_ns", &r->alloc);
                jw_summary(&w, "free_ns", &r->free);
            }
            jw_end(&w, '}');
        }
        jw_end(&w, ']');
        jw_end(&w, '}');
    } else {
        printf("mbbench rpc: %s backend, op %s, %ld cycles per client, times in us\n", ds.backend, op, cycles);
        if (strcmp(op, "alloc") == 0)
            printf("(a call is mb_malloc(%llu) or mb_free with MOONBRIGHT_CACHE=0: one grant or return each)\n",
                   (unsigned long long)rows[0].call_bytes);
        printf("%-8s %9s %9s %9s %9s %9s %12s %9s\n", "CLIENTS", "CALL p50", "CALL p99", "ALLOC p50",
               "FREE p50", "TRIPS/CALL", "REQUESTS/s", "FAILED");
        for (int i = 0; i < nclients; i++) {
            struct rpc_row *r = &rows[i];
            printf("%-8d %9.2f %9.2f %9.2f %9.2f %9.2f %12.0f %9d\n", r->clients, r->all.p50 / 1e3,
                   r->all.p99 / 1e3, r->alloc.p50 / 1e3, r->free.p50 / 1e3, r->trips_per_call, r->rps,
                   r->failed);
        }
    }
    return bad;
}
