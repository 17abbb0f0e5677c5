/* mbbench_threads.c: `mbbench threads`: alloc+free pairs from T threads
 * sharing one client, each on a stream of its own, sizes cycling over
 * 256 B, 4 KiB, 64 KiB and 1 MiB with 8 blocks live per thread: total pairs
 * per second through mb_malloc/mb_free, mb_malloc_async/mb_free_async and
 * cuMemAllocAsync/cuMemFreeAsync (same run), and glibc's malloc/free of
 * host memory as the machine's own reference: its threads share nothing
 * (an arena and a cache each), so how it scales is about what the cores
 * allow. Every thread frees on its
 * stream, synchronizes and destroys it when done; the stream-destruction
 * scenario repeats that for rounds of new threads with new streams and then
 * checks that no freed block stayed out of the client's caches. Each row is
 * the median (nearest rank) of --repeat timed runs (one run lasts tens of
 * milliseconds, and single runs on a virtual machine vary by 2x); --json
 * also gives the fastest and slowest. A run lasts from the first thread's
 * start to the last thread's end, as the threads read the clock themselves:
 * a main thread that wakes late from the start barrier (more threads than
 * cores) would otherwise time only part of the run. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "mbbench.h"

#define LIVE 8
#define MAX_THREADS 1024
#define MAX_REPEAT 99
static const size_t g_sizes[4] = { 256, 4096, 64 << 10, 1 << 20 };

enum kind { K_SYNC, K_STREAM, K_CU, K_HOST, K_COUNT };
static const char *const kind_name[K_COUNT] = {
    "mb_malloc/mb_free", "mb_malloc_async/mb_free_async", "cuMemAllocAsync/cuMemFreeAsync",
    "malloc/free (glibc, host memory)",
};

struct shared {
    mb_client *c;
    struct bench_cuda *cu;
    enum kind kind;
    long pairs;
    pthread_barrier_t start;
    int err;                    /* first failure (atomic) */
};

struct cu_streams {             /* stream calls loaded beside bench_cuda's */
    int (*create)(void **s, unsigned flags);
    int (*destroy)(void *s);
    int (*set_ctx)(void *ctx);
};
static struct cu_streams g_cs;

static int make_stream(struct shared *x, void **s, uintptr_t fake)
{
    if (!x->cu) {
        *s = (void *)fake;      /* host backend: any handle orders nothing */
        return 0;
    }
    return g_cs.set_ctx(x->cu->ctx) || g_cs.create(s, 1 /* CU_STREAM_NON_BLOCKING */) ? MB_EBACKEND : 0;
}

static int one_alloc(struct shared *x, void *s, size_t size, void **p)
{
    bench_cuptr d;
    switch (x->kind) {
    case K_SYNC: return mb_malloc(x->c, size, p);
    case K_STREAM: return mb_malloc_async(x->c, size, s, p);
    case K_HOST:
        *p = malloc(size);
        return *p ? 0 : MB_ENOMEM;
    default:
        if (x->cu->cuMemAllocAsync(&d, size, s) != 0)
            return MB_EBACKEND;
        *p = (void *)(uintptr_t)d;
        return 0;
    }
}

static int one_free(struct shared *x, void *s, void *p)
{
    switch (x->kind) {
    case K_SYNC: return mb_free(x->c, p);
    case K_STREAM: return mb_free_async(x->c, p, s);
    case K_HOST: free(p); return 0;
    default: return x->cu->cuMemFreeAsync((bench_cuptr)(uintptr_t)p, s) ? MB_EBACKEND : 0;
    }
}

struct thread_arg {
    struct shared *x;
    uintptr_t id;
    uint64_t t0, t1;            /* this thread's start and end (ns) */
};

static void *worker(void *arg)
{
    struct thread_arg *a = arg;
    struct shared *x = a->x;
    void *s = NULL, *live[LIVE] = { 0 };
    int rc = make_stream(x, &s, 0x1000 * (a->id + 1));
    pthread_barrier_wait(&x->start);
    a->t0 = bench_now_ns();
    for (long i = 0; rc == 0 && i < x->pairs; i++) {
        int k = (int)(i % LIVE);
        if (live[k] && (rc = one_free(x, s, live[k])) != 0)
            break;
        live[k] = NULL;
        rc = one_alloc(x, s, g_sizes[i % 4], &live[k]);
    }
    for (int k = 0; k < LIVE; k++)
        if (live[k]) {
            int e = one_free(x, s, live[k]);
            rc = rc ? rc : e;
        }
    if (x->cu && s) {
        /* The application's side of the contract: its work on the stream
         * is done, then the stream goes (the client never touches it again). */
        x->cu->cuStreamSynchronize(s);
        g_cs.destroy(s);
    }
    a->t1 = bench_now_ns();
    if (rc)
        __atomic_compare_exchange_n(&x->err, &(int){ 0 }, rc, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return NULL;
}

/* T threads, pairs each; returns total pairs per second (0 on failure). */
static double run(struct shared *x, int threads)
{
    pthread_t t[MAX_THREADS];
    struct thread_arg args[MAX_THREADS];
    x->err = 0;
    pthread_barrier_init(&x->start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        args[i] = (struct thread_arg){ .x = x, .id = (uintptr_t)i };
        pthread_create(&t[i], NULL, worker, &args[i]);
    }
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        t0 = args[i].t0 < t0 ? args[i].t0 : t0;
        t1 = args[i].t1 > t1 ? args[i].t1 : t1;
    }
    pthread_barrier_destroy(&x->start);
    if (x->err || t1 <= t0)
        return 0;
    return (double)threads * (double)x->pairs * 1e9 / (double)(t1 - t0);
}

int bench_threads(int argc, char **argv)
{
    enum { OPT_THREADS = OPT_FIRST_OWN, OPT_PAIRS, OPT_ROUNDS, OPT_NO_CUDA, OPT_REPEAT };
    static const struct option lo[] = {
        BENCH_COMMON_LONGOPTS,
        { "threads", required_argument, 0, OPT_THREADS }, { "pairs", required_argument, 0, OPT_PAIRS },
        { "rounds", required_argument, 0, OPT_ROUNDS }, { "no-cuda", no_argument, 0, OPT_NO_CUDA },
        { "repeat", required_argument, 0, OPT_REPEAT }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
    };
    int counts[16] = { 1, 2, 4, 8, 16 }, ncounts = 5, rounds = 10, repeat = 5;
    long pairs = 200000;
    bool no_cuda = false;
    optind = 1;
    for (int o; (o = getopt_long(argc, argv, "h", lo, NULL)) != -1;) {
        int r = bench_common_opt(o, optarg);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        switch (o) {
        case OPT_THREADS: {
            ncounts = 0;
            for (char *s = optarg, *e; *s && ncounts < 16; s = *e ? e + 1 : e) {
                long v = strtol(s, &e, 10);
                if (e == s || v < 1 || v > MAX_THREADS || (*e && *e != ',')) {
                    fprintf(stderr, "mbbench threads: bad --threads '%s' (1..%d, comma-separated)\n",
                            optarg, MAX_THREADS);
                    return 2;
                }
                counts[ncounts++] = (int)v;
            }
            break;
        }
        case OPT_PAIRS:
            if ((pairs = strtol(optarg, NULL, 10)) < 1) {
                fprintf(stderr, "mbbench threads: bad --pairs '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_ROUNDS:
            if ((rounds = atoi(optarg)) < 0) {
                fprintf(stderr, "mbbench threads: bad --rounds '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_NO_CUDA: no_cuda = true; break;
        case OPT_REPEAT: {
            char *e;
            long v = strtol(optarg, &e, 10);
            if (e == optarg || *e || v < 1 || v > MAX_REPEAT) {
                fprintf(stderr, "mbbench threads: bad --repeat '%s' (1..%d)\n", optarg, MAX_REPEAT);
                return 2;
            }
            repeat = (int)v;
            break;
        }
        case 'h':
            printf("usage: mbbench threads [options]\n"
                   "  --threads LIST      thread counts (default 1,2,4,8,16)\n"
                   "  --pairs N           alloc+free pairs per thread (default 200000)\n"
                   "  --rounds R          stream-destruction rounds of the largest count (default 10)\n"
                   "  --repeat N          timed runs per row, the median reported (default 5)\n"
                   "  --no-cuda           skip the cuMemAllocAsync rows\n" BENCH_COMMON_HELP);
            return 0;
        default: return 2;
        }
    }
    if (bench_opt.quick) {
        pairs = pairs > 2000 ? 2000 : pairs;
        rounds = rounds > 2 ? 2 : rounds;
        repeat = repeat > 2 ? 2 : repeat;
    }
    bench_raise_nofile();
    struct shared x = { .pairs = pairs };
    int rc = mb_open(&x.c, "mbbench-threads");
    if (rc != 0) {
        fprintf(stderr, "mbbench threads: failed to open a client: %s\n", mb_strerror(rc));
        return 1;
    }
    /* On the cuda backend the threads' streams are real ones (libcuda),
     * whether or not the cuMemAllocAsync rows run. */
    char why[256] = "--no-cuda";
    bool gpu = strcmp(mb_backend_name(x.c), "cuda") == 0;
    if (gpu && bench_cuda_open(bench_opt.device, &x.cu, why, sizeof(why)) == 0) {
        *(void **)&g_cs.create = bench_cuda_sym(x.cu, "cuStreamCreate");
        *(void **)&g_cs.destroy = bench_cuda_sym(x.cu, "cuStreamDestroy_v2");
        *(void **)&g_cs.set_ctx = bench_cuda_sym(x.cu, "cuCtxSetCurrent");
        if (!g_cs.create || !g_cs.destroy || !g_cs.set_ctx) {
            snprintf(why, sizeof(why), "libcuda lacks the stream calls");
            bench_cuda_close(x.cu);
            x.cu = NULL;
        }
    }
    if (gpu && !x.cu) {
        fprintf(stderr, "mbbench threads: the daemon serves a GPU but no stream can be made: %s\n", why);
        mb_close(x.c);
        return 1;
    }
    bool cuda = gpu && !no_cuda;
    if (!gpu)
        snprintf(why, sizeof(why), "the daemon's backend is %s", mb_backend_name(x.c));
    else if (no_cuda)
        snprintf(why, sizeof(why), "--no-cuda");
    struct jw w;
    jw_init(&w, stdout);
    if (bench_opt.json) {
        jw_header(&w, "threads");
        jw_u64(&w, "pairs_per_thread", (uint64_t)pairs);
        jw_u64(&w, "repeat", (uint64_t)repeat);
        jw_arr(&w, "rows");
    } else {
        printf("# mbbench threads: %ld pairs per thread, sizes 256 B/4 KiB/64 KiB/1 MiB, %d live; "
               "the median of %d timed runs\n"
               "| threads | %s M/s | %s M/s | %s M/s | %s M/s |\n|---|---|---|---|---|\n",
               pairs, LIVE, repeat, kind_name[0], kind_name[1], kind_name[2], kind_name[3]);
    }
    double first[K_COUNT] = { 0 }, last[K_COUNT] = { 0 };
    int fails = 0;
    for (int i = 0; i < ncounts; i++) {
        double r[K_COUNT] = { 0 }, rmin[K_COUNT] = { 0 }, rmax[K_COUNT] = { 0 };
        int err[K_COUNT] = { 0 };
        for (int k = 0; k < K_COUNT; k++) {
            if (k == K_CU && !cuda)
                continue;
            x.kind = (enum kind)k;
            /* A warm-up round of the same shape first, not timed: the
             * timed one measures reuse, not the first grants and maps of
             * the memory its threads hold (alike for every row). */
            long full = x.pairs;
            x.pairs = full / 10 > 0 ? full / 10 : 1;
            run(&x, counts[i]);
            x.pairs = full;
            uint64_t v[MAX_REPEAT];   /* pairs per second */
            int n = 0;
            for (; n < repeat && !x.err; n++)
                v[n] = (uint64_t)run(&x, counts[i]);
            err[k] = x.err;
            fails += x.err != 0;
            if (!x.err) {
                struct bench_summary sm;
                bench_summarize(v, (size_t)n, &sm);
                rmin[k] = (double)sm.min;
                rmax[k] = (double)sm.max;
                r[k] = (double)sm.p50;
            }
            if (i == 0)
                first[k] = r[k];
            last[k] = r[k];
            bench_progress(false, "threads %d %s: %.2f M pairs/s", counts[i], kind_name[k], r[k] / 1e6);
        }
        if (bench_opt.json) {
            for (int k = 0; k < K_COUNT; k++) {
                if (k == K_CU && !cuda)
                    continue;
                jw_obj(&w, NULL);
                jw_u64(&w, "threads", (uint64_t)counts[i]);
                jw_str(&w, "calls", kind_name[k]);
                jw_dbl(&w, "pairs_per_s", r[k]);
                jw_dbl(&w, "pairs_per_s_min", rmin[k]);
                jw_dbl(&w, "pairs_per_s_max", rmax[k]);
                jw_ok(&w, err[k]);
                jw_end(&w, '}');
            }
        } else {
            char cu[32] = "skipped";
            if (cuda)
                snprintf(cu, sizeof(cu), "%.2f", r[K_CU] / 1e6);
            printf("| %d | %.2f | %.2f | %s | %.2f |\n", counts[i], r[K_SYNC] / 1e6, r[K_STREAM] / 1e6, cu,
                   r[K_HOST] / 1e6);
        }
    }
    if (!bench_opt.json && ncounts > 1 && first[K_SYNC] > 0 && first[K_STREAM] > 0 && first[K_HOST] > 0)
        printf("%d threads against %d (medians): mb_malloc/mb_free %.1fx, mb_malloc_async/mb_free_async %.1fx, "
               "glibc malloc/free %.1fx\n",
               counts[ncounts - 1], counts[0], last[K_SYNC] / first[K_SYNC],
               last[K_STREAM] / first[K_STREAM], last[K_HOST] / first[K_HOST]);
    /* Streams destroyed under the client: rounds of new threads, new streams. */
    int tmax = counts[ncounts - 1];
    x.kind = K_STREAM;
    int destroy_err = 0;
    for (int round = 0; round < rounds && !destroy_err; round++) {
        run(&x, tmax);
        destroy_err = x.err;
    }
    mb_client_stats st = { 0 };
    if (destroy_err == 0)
        destroy_err = mb_stats(x.c, &st);
    if (destroy_err == 0 && st.bytes_live != 0)
        destroy_err = MB_EPROTO;   /* memory stranded: freed blocks not back */
    fails += destroy_err != 0;
    if (bench_opt.json) {
        jw_end(&w, ']');
        jw_obj(&w, "stream_destruction");
        jw_u64(&w, "rounds", (uint64_t)rounds);
        jw_u64(&w, "threads", (uint64_t)tmax);
        jw_u64(&w, "bytes_live_after", st.bytes_live);
        jw_u64(&w, "bytes_idle_after", st.bytes_idle);
        jw_u64(&w, "device_syncs", st.device_syncs);
        jw_ok(&w, destroy_err);
        jw_end(&w, '}');
        jw_arr(&w, "notes");
        if (!cuda)
            jw_skipped(&w, "cuMemAllocAsync", why);
        jw_end(&w, ']');
        jw_end(&w, '}');
        printf("\n");
    } else {
        if (!cuda)
            printf("(cuMemAllocAsync rows skipped: %s)\n", why);
        printf("stream destruction: %d rounds of %d threads, new streams each round: %s; "
               "after: %zu bytes live, %zu idle, %llu background device syncs\n",
               rounds, tmax, destroy_err ? mb_strerror(destroy_err) : "ok", st.bytes_live,
               st.bytes_idle, (unsigned long long)st.device_syncs);
    }
    /* The client first: its background thread may still use the context. */
    mb_close(x.c);
    if (x.cu)
        bench_cuda_close(x.cu);
    return fails ? 1 : 0;
}
