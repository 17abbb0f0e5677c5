/* mbbench_trims.c: `mbbench trims`: a server between bursts. Each cycle
 * allocates a burst of heap blocks, frees them but for a few kept for some
 * cycles (a long-lived object now and then), and trims, as the idle policy
 * does when the heap is quiet. Trims leave holes inside arenas that live
 * blocks keep; the heap fills them again on later misses. Run twice in one
 * invocation, one client after the other on the same sequence: holes filled
 * (the default) and $MOONBRIGHT_HEAP_FILL=0 (misses extend arenas past their
 * holes). Reported: the bytes the client held at the largest burst, held
 * after the last trim against live, the address space the process reserved
 * meanwhile, the heap's extends, fills and unmaps, allocation latency and
 * the time allocations spent on daemon round trips (the slowest one's
 * too). */
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "mbbench.h"

#define MAX_KEEP 64

struct trims_cfg {
    int cycles, burst, keep_pct, keep_cycles;
    uint64_t min_size, max_size, seed;
};

struct trims_row {
    bool fill;
    int err, cycle;                  /* the error and the cycle it stopped at */
    uint64_t peak_granted, live_end, held_end, vm_growth;
    uint64_t extends, fills, unmaps;
    struct bench_summary alloc;
    /* the slowest allocation: its cycle, and its time waiting for the
     * daemon's replies and importing handles (every thread's, so the
     * background thread's round trips meanwhile count too) */
    uint64_t slow_ns, slow_daemon_us, slow_import_us;
    uint64_t daemon_us, import_us, requests;   /* over every allocation */
    int slow_cycle;
    bool slow_filled, slow_extended;
};

/* A row's name in the table and the JSON. */
static const char *row_name(const struct trims_row *r)
{
    return r->fill ? "holes filled" : "MOONBRIGHT_HEAP_FILL=0";
}

/* Seconds all of a row's allocations took. */
static double alloc_total_s(const struct trims_row *r) { return r->alloc.mean * (double)r->alloc.n / 1e9; }

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The process's virtual size (address space reserved, whatever backs it). */
static uint64_t vm_bytes(void)
{
    long kb = bench_self_status(-1, "VmSize:");
    return kb > 0 ? (uint64_t)kb << 10 : 0;
}

static void run_one(const struct trims_cfg *k, bool fill, struct trims_row *r)
{
    memset(r, 0, sizeof(*r));
    r->fill = fill;
    setenv("MOONBRIGHT_HEAP_FILL", fill ? "1" : "0", 1);
    mb_client *c;
    r->err = mb_open(&c, fill ? "trims-fill" : "trims-no-fill");
    unsetenv("MOONBRIGHT_HEAP_FILL");
    if (r->err)
        return;
    struct { void *p; int until; } keep[MAX_KEEP];
    int nkeep = 0;
    void **burst = calloc((size_t)k->burst, sizeof(*burst));
    struct bench_vec lat = { 0 };
    uint64_t s = k->seed ? k->seed : 1, vm0 = vm_bytes();
    mb_client_stats st0, st;
    mb_stats(c, &st0);
    if (!burst)
        r->err = MB_ENOMEM;
    for (int cy = 0; cy < k->cycles && !r->err; cy++) {
        r->cycle = cy;
        for (int i = 0; i < k->burst && !r->err; i++) {
            uint64_t size = k->min_size + rnd(&s) % (k->max_size - k->min_size + 1);
            mb_client_stats a, b;
            mb_stats(c, &a);
            uint64_t t0 = bench_now_ns();
            r->err = mb_malloc(c, size, &burst[i]);
            uint64_t dt = bench_now_ns() - t0;
            if (!r->err)
                r->err = bench_vec_push(&lat, dt);
            else
                burst[i] = NULL;
            mb_stats(c, &b);
            r->daemon_us += b.daemon_wait_us - a.daemon_wait_us;
            r->import_us += b.import_us - a.import_us;
            r->requests += b.daemon_requests - a.daemon_requests;
            if (!r->err && dt > r->slow_ns) {
                r->slow_ns = dt;
                r->slow_cycle = cy;
                r->slow_daemon_us = b.daemon_wait_us - a.daemon_wait_us;
                r->slow_import_us = b.import_us - a.import_us;
                r->slow_filled = b.heap_fills > a.heap_fills;
                r->slow_extended = b.heap_extends > a.heap_extends;
            }
        }
        mb_stats(c, &st);
        if (st.bytes_granted > r->peak_granted)
            r->peak_granted = st.bytes_granted;
        for (int i = 0; i < k->burst; i++) {
            if (!burst[i])
                continue;
            if (nkeep < MAX_KEEP && (int)(rnd(&s) % 100) < k->keep_pct) {
                keep[nkeep].p = burst[i];
                keep[nkeep++].until = cy + 1 + (int)(rnd(&s) % (uint64_t)k->keep_cycles);
            } else {
                mb_free(c, burst[i]);
            }
            burst[i] = NULL;
        }
        for (int i = 0; i < nkeep;)
            if (keep[i].until <= cy) {
                mb_free(c, keep[i].p);
                keep[i] = keep[--nkeep];
            } else {
                i++;
            }
        mb_trim(c, 0);
        bench_progress(false, "trims (%s): cycle %d of %d", fill ? "fill" : "no fill", cy + 1, k->cycles);
    }
    mb_stats(c, &st);
    r->live_end = st.bytes_live;
    r->held_end = st.bytes_granted;
    uint64_t vm1 = vm_bytes();
    r->vm_growth = vm1 > vm0 ? vm1 - vm0 : 0;
    r->extends = st.heap_extends - st0.heap_extends;
    r->fills = st.heap_fills - st0.heap_fills;
    r->unmaps = st.unmaps - st0.unmaps;
    bench_summarize(lat.v, lat.n, &r->alloc);
    bench_vec_free(&lat);
    for (int i = 0; i < nkeep; i++)
        mb_free(c, keep[i].p);
    free(burst);
    mb_close(c);
}

static int parse_u64(const char *arg, const char *what, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *e;
    unsigned long long v = strtoull(arg, &e, 10);
    if (e == arg || *e || v < lo || v > hi) {
        fprintf(stderr, "mbbench trims: bad %s '%s' (%llu..%llu)\n", what, arg, (unsigned long long)lo,
                (unsigned long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int bench_trims(int argc, char **argv)
{
    enum { OPT_CYCLES = OPT_FIRST_OWN, OPT_BURST, OPT_SIZES, OPT_KEEP, OPT_KEEP_CYCLES, OPT_SEED };
    static const struct option lo[] = {
        BENCH_COMMON_LONGOPTS,
        { "cycles", required_argument, 0, OPT_CYCLES }, { "burst", required_argument, 0, OPT_BURST },
        { "sizes", required_argument, 0, OPT_SIZES },   { "keep", required_argument, 0, OPT_KEEP },
        { "keep-cycles", required_argument, 0, OPT_KEEP_CYCLES },
        { "seed", required_argument, 0, OPT_SEED },     { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    struct trims_cfg k = { .cycles = 200, .burst = 40, .keep_pct = 5, .keep_cycles = 8,
                           .min_size = 9 << 20, .max_size = 209 << 20, .seed = 1 };
    bool cycles_set = false;
    uint64_t v;
    optind = 1;
    for (int o; (o = getopt_long(argc, argv, "h", lo, NULL)) != -1;) {
        int r = bench_common_opt(o, optarg);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        switch (o) {
        case OPT_CYCLES:
            if (parse_u64(optarg, "--cycles", 1, 1000000, &v))
                return 2;
            k.cycles = (int)v;
            cycles_set = true;
            break;
        case OPT_BURST:
            if (parse_u64(optarg, "--burst", 1, 100000, &v))
                return 2;
            k.burst = (int)v;
            break;
        case OPT_KEEP:
            if (parse_u64(optarg, "--keep", 0, 100, &v))
                return 2;
            k.keep_pct = (int)v;
            break;
        case OPT_KEEP_CYCLES:
            if (parse_u64(optarg, "--keep-cycles", 1, 1000000, &v))
                return 2;
            k.keep_cycles = (int)v;
            break;
        case OPT_SEED:
            if (parse_u64(optarg, "--seed", 0, UINT64_MAX, &k.seed))
                return 2;
            break;
        case OPT_SIZES: {
            uint64_t sz[2];
            if (bench_parse_sizes(optarg, sz, 2) != 2 || sz[0] == 0 || sz[0] > sz[1]) {
                fprintf(stderr, "mbbench trims: bad --sizes '%s' (MIN,MAX, e.g. 9M,209M)\n", optarg);
                return 2;
            }
            k.min_size = sz[0];
            k.max_size = sz[1];
            break;
        }
        case 'h':
            printf("usage: mbbench trims [options]\n"
                   "  --cycles N          bursts, each followed by frees and a trim (default 200;\n"
                   "                      --quick 10)\n"
                   "  --burst N           allocations per burst (default 40)\n"
                   "  --sizes MIN,MAX     their sizes, uniform (default 9M,209M)\n"
                   "  --keep PCT          blocks kept alive for more cycles (default 5)\n"
                   "  --keep-cycles N     ... for 1 to N more (default 8)\n"
                   "  --seed N            the sequence (default 1; both runs get the same)\n" BENCH_COMMON_HELP);
            return 0;
        default:
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mbbench trims: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (bench_opt.quick && !cycles_set)
        k.cycles = 10;
    if (bench_opt.runtime_dir)
        setenv("MOONBRIGHT_RUNTIME_DIR", bench_opt.runtime_dir, 1);
    struct trims_row rows[2];
    run_one(&k, true, &rows[0]);
    run_one(&k, false, &rows[1]);
    bench_progress(true, "trims: done");
    int failed = rows[0].err || rows[1].err;
    if (bench_opt.json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_header(&w, "trims");
        jw_u64(&w, "cycles", (uint64_t)k.cycles);
        jw_u64(&w, "burst", (uint64_t)k.burst);
        jw_u64(&w, "min_size", k.min_size);
        jw_u64(&w, "max_size", k.max_size);
        jw_u64(&w, "keep_pct", (uint64_t)k.keep_pct);
        jw_u64(&w, "keep_cycles", (uint64_t)k.keep_cycles);
        jw_u64(&w, "seed", k.seed);
        jw_arr(&w, "rows");
        for (int i = 0; i < 2; i++) {
            const struct trims_row *r = &rows[i];
            jw_obj(&w, NULL);
            jw_str(&w, "heap", row_name(r));
            jw_ok(&w, r->err);
            if (r->err)
                jw_u64(&w, "stopped_at_cycle", (uint64_t)r->cycle);
            jw_u64(&w, "peak_granted_bytes", r->peak_granted);
            jw_u64(&w, "live_end_bytes", r->live_end);
            jw_u64(&w, "held_end_bytes", r->held_end);
            jw_dbl(&w, "held_over_live_end", r->live_end ? (double)r->held_end / (double)r->live_end : 0);
            jw_u64(&w, "address_space_growth_bytes", r->vm_growth);
            jw_u64(&w, "heap_extends", r->extends);
            jw_u64(&w, "heap_fills", r->fills);
            jw_u64(&w, "unmaps", r->unmaps);
            jw_summary(&w, "alloc_ns", &r->alloc);
            jw_u64(&w, "alloc_daemon_requests", r->requests);
            jw_dbl(&w, "alloc_daemon_wait_s", (double)r->daemon_us / 1e6);
            jw_dbl(&w, "alloc_import_s", (double)r->import_us / 1e6);
            jw_dbl(&w, "alloc_total_s", alloc_total_s(r));
            jw_obj(&w, "slowest_alloc");
            jw_u64(&w, "ns", r->slow_ns);
            jw_u64(&w, "cycle", (uint64_t)r->slow_cycle);
            jw_u64(&w, "daemon_wait_us", r->slow_daemon_us);
            jw_u64(&w, "import_us", r->slow_import_us);
            jw_bool(&w, "filled", r->slow_filled);
            jw_bool(&w, "extended", r->slow_extended);
            jw_end(&w, '}');
            jw_end(&w, '}');
        }
        jw_end(&w, ']');
        jw_end(&w, '}');
        printf("\n");
    } else {
        char a[32], b[32], d[32];
        printf("mbbench trims: %d cycles of %d allocations of %s-%s, %d%% kept 1-%d cycles, a trim after each\n",
               k.cycles, k.burst, bench_fmt_size(k.min_size, a, sizeof(a)),
               bench_fmt_size(k.max_size, b, sizeof(b)), k.keep_pct, k.keep_cycles);
        printf("| heap | peak held | held after the last trim / live | address space growth | extends | fills | unmaps | alloc mean us | p99 | max |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < 2; i++) {
            const struct trims_row *r = &rows[i];
            if (r->err) {
                printf("| %s | failed at cycle %d: %s |\n", row_name(r), r->cycle, mb_strerror(r->err));
                continue;
            }
            printf("| %s | %s | %.3f | %s | %llu | %llu | %llu | %.1f | %.1f | %.1f |\n", row_name(r),
                   bench_fmt_size(r->peak_granted, a, sizeof(a)),
                   r->live_end ? (double)r->held_end / (double)r->live_end : 0,
                   bench_fmt_size(r->vm_growth, d, sizeof(d)), (unsigned long long)r->extends,
                   (unsigned long long)r->fills, (unsigned long long)r->unmaps, r->alloc.mean / 1e3,
                   r->alloc.p99 / 1e3, r->alloc.max / 1e3);
        }
        for (int i = 0; i < 2; i++) {
            const struct trims_row *r = &rows[i];
            if (r->err)
                continue;
            const char *what = r->slow_filled     ? "filled a hole"
                               : r->slow_extended ? "extended an arena"
                                                  : "neither filled nor extended";
            printf("%s: allocations took %.2f s in all, %.2f s of it waiting for %llu daemon replies, "
                   "%.2f s importing handles\n",
                   row_name(r), alloc_total_s(r), r->daemon_us / 1e6, (unsigned long long)r->requests,
                   r->import_us / 1e6);
            printf("%s: the slowest allocation (cycle %d, %s) took %.2f ms: %.2f ms waiting for the "
                   "daemon, %.2f ms importing handles\n",
                   row_name(r), r->slow_cycle, what, r->slow_ns / 1e6, r->slow_daemon_us / 1e3,
                   r->slow_import_us / 1e3);
        }
    }
    return failed ? 1 : 0;
}
