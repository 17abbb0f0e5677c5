/* mbbench_latency.c: `mbbench latency`: alloc+free pair latency per size
 * through mb_malloc/mb_free and mb_malloc_async/mb_free_async, side by side
 * with cuMemAlloc, cuMemAllocAsync (GPU) and malloc (host backend). */
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "mbbench.h"

enum alloc_kind { K_MB, K_MB_ASYNC, K_MALLOC, K_CU, K_CU_ASYNC, K_COUNT };
static const char *const kind_name[K_COUNT] = {
    "mb_malloc", "mb_malloc_async", "malloc", "cuMemAlloc", "cuMemAllocAsync",
};

struct row {
    enum alloc_kind kind;
    uint64_t size;
    const char *tier;
    int err;                    /* 0, or the failure that stopped the row */
    struct bench_summary pair, alloc, free;
};

struct lat_ctx {
    mb_client *c;
    struct bench_cuda *cu;
};

static int do_alloc(struct lat_ctx *x, enum alloc_kind k, size_t size, void **p)
{
    bench_cuptr d = 0;
    int r;
    switch (k) {
    case K_MB: return mb_malloc(x->c, size, p);
    case K_MB_ASYNC: return mb_malloc_async(x->c, size, NULL, p);
    case K_MALLOC:
        *p = malloc(size);
        return *p ? 0 : MB_ENOMEM;
    case K_CU:
        r = x->cu->cuMemAlloc(&d, size);
        *p = (void *)(uintptr_t)d;
        return r ? MB_EBACKEND : 0;
    case K_CU_ASYNC:
        r = x->cu->cuMemAllocAsync(&d, size, NULL);
        *p = (void *)(uintptr_t)d;
        return r ? MB_EBACKEND : 0;
    default: return MB_EINVAL;
    }
}

static int do_free(struct lat_ctx *x, enum alloc_kind k, void *p)
{
    switch (k) {
    case K_MB: return mb_free(x->c, p);
    case K_MB_ASYNC: return mb_free_async(x->c, p, NULL);
    case K_MALLOC: free(p); return 0;
    case K_CU: return x->cu->cuMemFree((bench_cuptr)(uintptr_t)p) ? MB_EBACKEND : 0;
    case K_CU_ASYNC: return x->cu->cuMemFreeAsync((bench_cuptr)(uintptr_t)p, NULL) ? MB_EBACKEND : 0;
    default: return MB_EINVAL;
    }
}

/* Which tier served an allocation of this size: the stats counter that moved. */
static const char *tier_of(struct lat_ctx *x, enum alloc_kind k, size_t size)
{
    if (k != K_MB && k != K_MB_ASYNC)
        return k == K_MALLOC ? "libc" : "driver";
    mb_client_stats a, b;
    void *p;
    if (mb_stats(x->c, &a) != 0 || do_alloc(x, k, size, &p) != 0)
        return "?";
    mb_stats(x->c, &b);
    do_free(x, k, p);
    if (b.slab_live > a.slab_live)
        return "slab";
    if (b.pool_live > a.pool_live)
        return "pool";
    if (b.stitch_live > a.stitch_live)
        return "stitch";
    return "?";
}

static int run_row(struct lat_ctx *x, struct row *r, size_t pairs, size_t warm)
{
    uint64_t *pair = malloc(pairs * sizeof(*pair));
    uint64_t *al = malloc(pairs * sizeof(*al));
    uint64_t *fr = malloc(pairs * sizeof(*fr));
    int rc = pair && al && fr ? 0 : MB_ENOMEM;
    r->tier = tier_of(x, r->kind, r->size);
    for (size_t i = 0; rc == 0 && i < warm + pairs; i++) {
        void *p;
        uint64_t t0 = bench_now_ns();
        rc = do_alloc(x, r->kind, r->size, &p);
        uint64_t t1 = bench_now_ns();
        if (rc != 0)
            break;
        rc = do_free(x, r->kind, p);
        uint64_t t2 = bench_now_ns();
        if (i >= warm) {
            pair[i - warm] = t2 - t0;
            al[i - warm] = t1 - t0;
            fr[i - warm] = t2 - t1;
        }
    }
    if (r->kind == K_CU_ASYNC)
        x->cu->cuStreamSynchronize(NULL);
    r->err = rc;
    if (rc == 0) {
        bench_summarize(pair, pairs, &r->pair);
        bench_summarize(al, pairs, &r->alloc);
        bench_summarize(fr, pairs, &r->free);
    }
    free(pair);
    free(al);
    free(fr);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mbbench latency [options]\n"
               "  --sizes LIST        sizes (default 256,4K,64K,2M,64M)\n"
               "  --pairs N           measured alloc+free pairs per row (default 10000; --quick 50)\n"
               "  --no-cuda           skip the cuMemAlloc/cuMemAllocAsync rows\n" BENCH_COMMON_HELP);
}

int bench_latency(int argc, char **argv)
{
    enum { OPT_SIZES = OPT_FIRST_OWN, OPT_PAIRS, OPT_NO_CUDA };
    static const struct option lo[] = {
        BENCH_COMMON_LONGOPTS,
        { "sizes", required_argument, 0, OPT_SIZES },
        { "pairs", required_argument, 0, OPT_PAIRS },
        { "no-cuda", no_argument, 0, OPT_NO_CUDA },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    uint64_t sizes[32] = { 256, 4096, 65536, 2u << 20, 64u << 20 };
    int nsizes = 5;
    long pairs = -1;
    bool no_cuda = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        int h = bench_common_opt(c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        switch (c) {
        case OPT_SIZES:
            if ((nsizes = bench_parse_sizes(optarg, sizes, 32)) < 0) {
                fprintf(stderr, "mbbench latency: bad --sizes '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_PAIRS:
            pairs = strtol(optarg, NULL, 10);
            if (pairs < 1 || pairs > 100000000) {
                fprintf(stderr, "mbbench latency: bad --pairs '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_NO_CUDA: no_cuda = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (pairs < 0)
        pairs = bench_opt.quick ? 50 : 10000;
    size_t warm = (size_t)pairs / 10 > 5 ? (size_t)pairs / 10 : 5;
    bench_raise_nofile();

    struct lat_ctx x = { 0 };
    int rc = mb_open(&x.c, "mbbench-latency");
    if (rc != 0) {
        fprintf(stderr, "mbbench latency: failed to open a session: %s\n", mb_strerror(rc));
        return 1;
    }
    const char *backend = mb_backend_name(x.c);
    bool host = strcmp(backend, "host") == 0;
    char why[160] = "skipped (--no-cuda)";
    if (!no_cuda && bench_cuda_open(bench_opt.device, &x.cu, why, sizeof(why)) != 0)
        x.cu = NULL;
    mb_client_stats st;
    mb_stats(x.c, &st);

    struct row rows[32 * K_COUNT];
    size_t nrows = 0;
    for (int s = 0; s < nsizes; s++)
        for (int k = 0; k < K_COUNT; k++) {
            if (k == K_MALLOC && !host)
                continue;
            if ((k == K_CU || k == K_CU_ASYNC) && !x.cu)
                continue;
            struct row *r = &rows[nrows++];
            memset(r, 0, sizeof(*r));
            r->kind = (enum alloc_kind)k;
            r->size = sizes[s];
            char b[32];
            bench_progress(false, "latency: %s %s, %ld pairs", kind_name[k],
                           bench_fmt_size(sizes[s], b, sizeof(b)), pairs);
            if (run_row(&x, r, (size_t)pairs, warm) != 0)
                fprintf(stderr, "mbbench latency: %s of %llu bytes failed: %s\n", kind_name[k],
                        (unsigned long long)sizes[s], mb_strerror(r->err));
        }
    mb_client_stats end;
    mb_stats(x.c, &end);

    if (bench_opt.json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_header(&w, "latency");
        jw_str(&w, "backend", backend);
        jw_u64(&w, "frame_bytes", st.frame_bytes);
        jw_u64(&w, "pairs", (uint64_t)pairs);
        jw_u64(&w, "warmup_pairs", warm);
        jw_u64(&w, "daemon_requests", end.daemon_requests);
        jw_str(&w, "unit", "ns");
        jw_arr(&w, "rows");
        for (size_t i = 0; i < nrows; i++) {
            struct row *r = &rows[i];
            jw_obj(&w, NULL);
            jw_str(&w, "allocator", kind_name[r->kind]);
            jw_str(&w, "source", "mbbench");
            jw_str(&w, "tier", r->tier);
            jw_u64(&w, "size", r->size);
            jw_ok(&w, r->err);
            jw_alloc_free(&w, &r->alloc, &r->free, &r->pair);
            jw_end(&w, '}');
        }
        jw_end(&w, ']');
        jw_arr(&w, "notes");
        if (!x.cu)
            jw_skipped(&w, "cuMemAlloc/cuMemAllocAsync", why);
        if (host)
            jw_str(&w, NULL, "host backend: malloc/free is a reference point; memory is never touched");
        jw_end(&w, ']');
        jw_end(&w, '}');
    } else {
        printf("mbbench latency: %s backend, %ld alloc+free pairs per row (after %zu warm-up), times in us\n",
               backend, pairs, warm);
        printf("%-10s %-17s %-7s %9s %9s %9s %9s %9s\n", "SIZE", "ALLOCATOR", "TIER", "PAIR p50",
               "PAIR p99", "PAIR mean", "ALLOC p50", "FREE p50");
        for (size_t i = 0; i < nrows; i++) {
            struct row *r = &rows[i];
            char b[32];
            bench_fmt_size(r->size, b, sizeof(b));
            if (r->err) {
                printf("%-10s %-17s %-7s failed: %s\n", b, kind_name[r->kind], r->tier, mb_strerror(r->err));
                continue;
            }
            printf("%-10s %-17s %-7s %9.2f %9.2f %9.2f %9.2f %9.2f\n", b, kind_name[r->kind], r->tier,
                   r->pair.p50 / 1e3, r->pair.p99 / 1e3, r->pair.mean / 1e3, r->alloc.p50 / 1e3,
                   r->free.p50 / 1e3);
        }
        if (!x.cu)
            printf("note: cuMemAlloc/cuMemAllocAsync rows skipped: %s\n", why);
        printf("note: PyTorch rows come from tools/bench_torch.py latency (GPU host)\n");
    }
    mb_close(x.c);   /* first: its background thread may still use the context */
    bench_cuda_close(x.cu);
    return 0;
}
