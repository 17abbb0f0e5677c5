/* mbbench_fdtable.c: `mbbench fdtable`: what growing a descriptor table
 * costs on this host. The kernel grows a process's table inside the call
 * that makes a descriptor past its size (doubling it), and in a process
 * with threads it waits there for an RCU grace period first. The daemon
 * keeps a descriptor per frame and makes them in exports, on grant paths,
 * so it grows its table at start-up (mb_fd_table_reserve). Each row runs in
 * a fresh child process with a second thread (as the daemon has): it makes
 * --fds descriptors one by one (memfds, as the host backend's frames) and
 * times each, apart the calls that grew the table (read from FDSize in
 * /proc/self/status) from the rest; one row as a fresh process is, one
 * with the table grown ahead. Needs no daemon. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdpass.h"
#include "mbbench.h"

struct fdt_row {
    uint64_t growths;               /* calls that grew the table */
    uint64_t grow_max_ns, grow_sum_ns;
    uint64_t other_max_ns, other_sum_ns, others;
    uint64_t fdsize_start, fdsize_end;
    int err;                        /* errno of the first failure (0: none) */
};

static void *idle_thread(void *arg)
{
    for (;;)
        pause();
    return arg;
}

/* The child's work: a second thread, the table grown ahead or not, then
 * n descriptors. The row goes back through the pipe. */
static void child(int out, int n, bool ahead)
{
    struct fdt_row r = { 0 };
    pthread_t t;
    if (pthread_create(&t, NULL, idle_thread, NULL) != 0)
        r.err = EAGAIN;
    if (ahead && !r.err && mb_fd_table_reserve((unsigned long)n + 64) != 0)
        r.err = EMFILE;
    /* Opened once: opening it at each read would make a descriptor too,
     * and grow the table there rather than in the call timed. */
    int status_fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (status_fd < 0 && !r.err)
        r.err = errno;
    long size = bench_self_status(status_fd, "FDSize:");
    r.fdsize_start = size > 0 ? (uint64_t)size : 0;
    for (int i = 0; i < n && !r.err; i++) {
        uint64_t t0 = bench_now_ns();
        int fd = memfd_create("mbbench-fdtable", MFD_CLOEXEC);
        uint64_t dt = bench_now_ns() - t0;
        if (fd < 0) {
            r.err = errno;
            break;
        }
        long now = bench_self_status(status_fd, "FDSize:");
        if (now != size) {
            r.growths++;
            r.grow_sum_ns += dt;
            r.grow_max_ns = dt > r.grow_max_ns ? dt : r.grow_max_ns;
            size = now;
        } else {
            r.others++;
            r.other_sum_ns += dt;
            r.other_max_ns = dt > r.other_max_ns ? dt : r.other_max_ns;
        }
    }
    r.fdsize_end = size > 0 ? (uint64_t)size : 0;
    ssize_t w = write(out, &r, sizeof(r));
    _exit(w == (ssize_t)sizeof(r) ? 0 : 1);
}

static int run_row(int n, bool ahead, struct fdt_row *r)
{
    int p[2];
    if (pipe(p) != 0)
        return errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return e;
    }
    if (pid == 0) {
        close(p[0]);
        child(p[1], n, ahead);
    }
    close(p[1]);
    ssize_t got = read(p[0], r, sizeof(*r));
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (got != (ssize_t)sizeof(*r))
        return EPROTO;
    return r->err;
}

int bench_fdtable(int argc, char **argv)
{
    int n = 8192, rounds = 3;
    enum { OPT_FDS = OPT_FIRST_OWN, OPT_ROUNDS };
    static const struct option longopts[] = {
        BENCH_COMMON_LONGOPTS,
        { "fds", required_argument, 0, OPT_FDS },
        { "rounds", required_argument, 0, OPT_ROUNDS },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int common = bench_common_opt(c, optarg);
        if (common < 0)
            return 2;
        if (common)
            continue;
        char *end = NULL;
        switch (c) {
        case OPT_FDS:
        case OPT_ROUNDS: {
            long v = strtol(optarg, &end, 10);
            if (!end || *end || v < 1 || v > (c == OPT_FDS ? 1 << 20 : 100)) {
                fprintf(stderr, "mbbench fdtable: bad --%s '%s'\n", c == OPT_FDS ? "fds" : "rounds", optarg);
                return 2;
            }
            *(c == OPT_FDS ? &n : &rounds) = (int)v;
            break;
        }
        case 'h':
            printf("usage: mbbench fdtable [--fds N] [--rounds R] [--json] [--quick]\n"
                   "What growing the descriptor table costs in a process with threads: N\n"
                   "descriptors (8192) made one by one in a fresh process, R rounds (3), with\n"
                   "the table as a fresh process has it and grown ahead (as moonbrightd does).\n"
                   "Needs no daemon.\n");
            return 0;
        default:
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mbbench fdtable: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (bench_opt.quick) {
        n = n > 2048 ? 2048 : n;
        rounds = 1;
    }
    mb_raise_fd_limit(false);   /* the soft limit may be under --fds */
    struct fdt_row rows[2][100];
    int failed = 0;
    for (int k = 0; k < rounds; k++)
        for (int a = 0; a < 2; a++) {
            int e = run_row(n, a == 1, &rows[a][k]);
            if (e) {
                fprintf(stderr, "mbbench fdtable: round %d (%s) failed: %s\n", k + 1,
                        a ? "grown ahead" : "fresh", strerror(e));
                failed = 1;
            }
        }
    static const char *const name[2] = { "fresh table", "grown ahead" };
    if (bench_opt.json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_header(&w, "fdtable");
        jw_u64(&w, "fds", (uint64_t)n);
        jw_arr(&w, "rows");
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < rounds; k++) {
                const struct fdt_row *r = &rows[a][k];
                jw_obj(&w, NULL);
                jw_str(&w, "table", name[a]);
                jw_u64(&w, "round", (uint64_t)k + 1);
                jw_ok(&w, r->err);
                jw_u64(&w, "fdsize_start", r->fdsize_start);
                jw_u64(&w, "fdsize_end", r->fdsize_end);
                jw_u64(&w, "growths", r->growths);
                jw_u64(&w, "growth_max_ns", r->grow_max_ns);
                jw_u64(&w, "growth_mean_ns", r->growths ? r->grow_sum_ns / r->growths : 0);
                jw_u64(&w, "other_max_ns", r->other_max_ns);
                jw_u64(&w, "other_mean_ns", r->others ? r->other_sum_ns / r->others : 0);
                jw_end(&w, '}');
            }
        jw_end(&w, ']');
        jw_end(&w, '}');
        printf("\n");
    } else {
        printf("mbbench fdtable: %d descriptors made one by one in a process with two threads\n", n);
        printf("| table | round | FDSize at start | calls that grew it | their mean us | their max us | other calls' mean us | max us |\n");
        printf("|---|---|---|---|---|---|---|---|\n");
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < rounds; k++) {
                const struct fdt_row *r = &rows[a][k];
                if (r->err) {
                    printf("| %s | %d | failed: %s |\n", name[a], k + 1, strerror(r->err));
                    continue;
                }
                printf("| %s | %d | %llu | %llu | %.1f | %.1f | %.2f | %.1f |\n", name[a], k + 1,
                       (unsigned long long)r->fdsize_start, (unsigned long long)r->growths,
                       r->growths ? r->grow_sum_ns / r->growths / 1e3 : 0.0, r->grow_max_ns / 1e3,
                       r->others ? r->other_sum_ns / r->others / 1e3 : 0.0, r->other_max_ns / 1e3);
            }
    }
    return failed;
}
