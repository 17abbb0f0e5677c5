/* mbbench_grant.c: `mbbench grant`: how fast a range of frames becomes a
 * usable pointer, per size, side by side:
 *   re-grant       mb_malloc of a size this process freed before: its frames
 *                  are cached here, so no round trip, only map + access
 *   first grant    the process holds no frames (mb_trim(0) after every free,
 *                  untimed): a grant round trip, descriptors on the handle
 *                  channel, import, map, access; the daemon's frames are free
 *   ... order-0    the same with large frames off (MOONBRIGHT_LARGE_FRAMES=0):
 *                  one frame per unit, as before the frame plan
 *   cuMemAlloc     cuMemAlloc + cuMemFree
 *   in-process     create + reserve + map + set access in this process
 *                  (the daemon's backend, no daemon), and the reverse
 * The very first allocation of each size (frames created on the request
 * path) is reported on its own as `cold`. Allocations go through
 * mb_malloc_growable(size, size): the stitched path plain mb_malloc takes
 * above the pool's range, here for 2 MiB too. */
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "backend.h"
#include "mbbench.h"

enum kind { K_REGRANT, K_FIRST, K_REGRANT0, K_FIRST0, K_CU, K_INPROC, K_COUNT };
static const char *const kind_name[K_COUNT] = {
    "mb re-grant", "mb first grant", "mb re-grant order-0", "mb first grant order-0",
    "cuMemAlloc", "in-process create+map",
};

struct row {
    enum kind kind;
    uint64_t size;
    int err;
    uint64_t cold_ns;            /* first allocation of the size (mb rows) */
    struct bench_summary alloc, free, pair;
};

struct grant_ctx {
    mb_client *c, *c0;           /* large frames on, off */
    struct bench_cuda *cu;
    mb_backend *be;              /* in-process baseline */
};

/* One alloc (timed), one free (timed). */
static int one_mb(mb_client *c, uint64_t size, bool trim, uint64_t *a, uint64_t *f)
{
    void *p;
    uint64_t t0 = bench_now_ns();
    int rc = mb_malloc_growable(c, size, size, &p);
    uint64_t t1 = bench_now_ns();
    if (rc != 0)
        return rc;
    rc = mb_free(c, p);
    uint64_t t2 = bench_now_ns();
    *a = t1 - t0;
    *f = t2 - t1;
    if (rc == 0 && trim)
        rc = mb_trim(c, 0);
    return rc;
}

static int one_cu(struct bench_cuda *cu, uint64_t size, uint64_t *a, uint64_t *f)
{
    bench_cuptr p;
    uint64_t t0 = bench_now_ns();
    int r = cu->cuMemAlloc(&p, size);
    uint64_t t1 = bench_now_ns();
    if (r != 0)
        return MB_ENOMEM;
    r = cu->cuMemFree(p);
    *a = t1 - t0;
    *f = bench_now_ns() - t1;
    return r ? MB_EDEVICE : 0;
}

static int one_inproc(mb_backend *be, uint64_t size, uint64_t *a, uint64_t *f)
{
    struct mb_mem m = MB_MEM_INIT;
    void *va = NULL;
    size_t g = be->granularity;
    size_t bytes = (size + g - 1) / g * g;
    uint64_t t0 = bench_now_ns();
    int rc = be->ops->create(be, bytes, &m);
    if (rc == 0 && (rc = be->ops->reserve(be, bytes, &va)) == 0 &&
        (rc = be->ops->map(be, va, &m)) == 0)
        rc = be->ops->set_access(be, va, bytes);
    uint64_t t1 = bench_now_ns();
    if (rc == 0)
        rc = be->ops->unmap(be, va, bytes);
    if (va)
        be->ops->free_va(be, va, bytes);
    be->ops->release(be, &m);
    *a = t1 - t0;
    *f = bench_now_ns() - t1;
    return rc;
}

static void run_row(struct grant_ctx *x, struct row *r, size_t n)
{
    struct bench_vec va = { 0 }, vf = { 0 }, vp = { 0 };
    mb_client *c = r->kind == K_REGRANT0 || r->kind == K_FIRST0 ? x->c0 : x->c;
    bool trim = r->kind == K_FIRST || r->kind == K_FIRST0;
    bool mb = r->kind < K_CU;
    uint64_t a = 0, f = 0;
    if (mb) {
        /* Start from nothing cached, so the first one is the cold one. */
        mb_trim(c, 0);
        r->err = one_mb(c, r->size, trim, &a, &f);
        r->cold_ns = a;
    }
    for (size_t i = 0; r->err == 0 && i < n; i++) {
        r->err = mb ? one_mb(c, r->size, trim, &a, &f)
                : r->kind == K_CU ? one_cu(x->cu, r->size, &a, &f)
                : one_inproc(x->be, r->size, &a, &f);
        if (r->err == 0 && (bench_vec_push(&va, a) || bench_vec_push(&vf, f) ||
                            bench_vec_push(&vp, a + f)))
            r->err = MB_ENOMEM;
    }
    if (mb)
        mb_trim(c, 0);   /* leave the budget to the next row */
    bench_summarize(va.v, va.n, &r->alloc);
    bench_summarize(vf.v, vf.n, &r->free);
    bench_summarize(vp.v, vp.n, &r->pair);
    bench_vec_free(&va);
    bench_vec_free(&vf);
    bench_vec_free(&vp);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mbbench grant [options]\n"
               "\n"
               "How fast a range of frames becomes a usable pointer: re-grant (frames cached\n"
               "in this process), first grant (a round trip and imports), both also with large\n"
               "frames off, against cuMemAlloc and create+map+set-access done in-process.\n"
               "\n"
               "  --sizes LIST        sizes (default 2M,64M,1G)\n"
               "  --count N           timed allocations per row (default 200; 1 GiB: 50)\n"
               "  --no-cuda           leave out the cuMemAlloc row\n" BENCH_COMMON_HELP);
}

int bench_grant(int argc, char **argv)
{
    static const struct option longopts[] = {
        BENCH_COMMON_LONGOPTS,
        { "sizes", required_argument, 0, 's' },
        { "count", required_argument, 0, 'n' },
        { "no-cuda", no_argument, 0, 'C' },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    uint64_t sizes[16] = { (uint64_t)2 << 20, (uint64_t)64 << 20, (uint64_t)1 << 30 };
    int nsizes = 3;
    long count = -1;
    bool no_cuda = false;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int h = bench_common_opt(opt, optarg);
        if (h > 0)
            continue;
        if (h < 0)
            return 2;
        switch (opt) {
        case 's':
            nsizes = bench_parse_sizes(optarg, sizes, 16);
            if (nsizes <= 0) {
                fprintf(stderr, "mbbench grant: bad --sizes '%s'\n", optarg);
                return 2;
            }
            break;
        case 'n':
            count = strtol(optarg, NULL, 10);
            if (count <= 0 || count > 1000000) {
                fprintf(stderr, "mbbench grant: bad --count '%s' (1 to 1000000)\n", optarg);
                return 2;
            }
            break;
        case 'C':
            no_cuda = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    bench_raise_nofile();
    struct grant_ctx x = { 0 };
    int rc = mb_open(&x.c, "mbbench-grant");
    if (rc == 0) {
        setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);
        rc = mb_open(&x.c0, "mbbench-grant");
        unsetenv("MOONBRIGHT_LARGE_FRAMES");
    }
    if (rc != 0) {
        fprintf(stderr, "mbbench grant: failed to open a session: %s\n", mb_strerror(rc));
        mb_close(x.c);
        return 1;
    }
    const char *backend = mb_backend_name(x.c);
    char why[160] = "skipped (--no-cuda)";
    if (!no_cuda && bench_cuda_open(bench_opt.device, &x.cu, why, sizeof(why)) != 0)
        x.cu = NULL;
    char why_be[160] = "";
    if (mb_backend_open(backend, bench_opt.device, &x.be) != 0) {
        snprintf(why_be, sizeof(why_be), "in-process rows skipped: the %s backend did not open", backend);
        x.be = NULL;
    }
    mb_client_stats st;
    mb_stats(x.c, &st);

    struct row rows[16 * K_COUNT];
    size_t nrows = 0;
    for (int s = 0; s < nsizes; s++) {
        long n = count > 0 ? count : bench_opt.quick ? 5 : sizes[s] >= ((uint64_t)1 << 30) ? 50 : 200;
        for (int k = 0; k < K_COUNT; k++) {
            if ((k == K_CU && !x.cu) || (k == K_INPROC && !x.be))
                continue;
            struct row *r = &rows[nrows++];
            memset(r, 0, sizeof(*r));
            r->kind = (enum kind)k;
            r->size = sizes[s];
            char b[32];
            bench_progress(true, "grant: %s %s, %ld allocations", kind_name[k],
                           bench_fmt_size(sizes[s], b, sizeof(b)), n);
            run_row(&x, r, (size_t)n);
            if (r->err)
                fprintf(stderr, "mbbench grant: %s of %llu bytes failed: %s\n", kind_name[k],
                        (unsigned long long)sizes[s], mb_strerror(r->err));
        }
    }

    if (bench_opt.json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_header(&w, "grant");
        jw_str(&w, "backend", backend);
        jw_u64(&w, "frame_bytes", st.frame_bytes);
        jw_str(&w, "unit", "ns");
        jw_arr(&w, "rows");
        for (size_t i = 0; i < nrows; i++) {
            struct row *r = &rows[i];
            jw_obj(&w, NULL);
            jw_str(&w, "allocator", kind_name[r->kind]);
            jw_u64(&w, "size", r->size);
            jw_ok(&w, r->err);
            if (r->kind < K_CU)
                jw_u64(&w, "cold_ns", r->cold_ns);
            jw_alloc_free(&w, &r->alloc, &r->free, &r->pair);
            jw_end(&w, '}');
        }
        jw_end(&w, ']');
        jw_arr(&w, "notes");
        if (!x.cu)
            jw_skipped(&w, "cuMemAlloc", why);
        if (why_be[0])
            jw_str(&w, NULL, why_be);
        jw_end(&w, ']');
        jw_end(&w, '}');
    } else {
        printf("mbbench grant: %s backend, %s frames; alloc = until the pointer is usable; times in us\n",
               backend, bench_fmt_size(st.frame_bytes, (char[32]){ 0 }, 32));
        printf("%-6s %-24s %9s %9s %9s %9s %9s %9s\n", "SIZE", "ALLOCATOR", "ALLOC p50", "ALLOC p99",
               "FREE p50", "FREE p99", "PAIR p50", "COLD");
        for (size_t i = 0; i < nrows; i++) {
            struct row *r = &rows[i];
            char b[32];
            bench_fmt_size(r->size, b, sizeof(b));
            if (r->err) {
                printf("%-6s %-24s failed: %s\n", b, kind_name[r->kind], mb_strerror(r->err));
                continue;
            }
            char cold[32] = "-";
            if (r->kind < K_CU)
                snprintf(cold, sizeof(cold), "%.1f", r->cold_ns / 1e3);
            printf("%-6s %-24s %9.1f %9.1f %9.1f %9.1f %9.1f %9s\n", b, kind_name[r->kind],
                   r->alloc.p50 / 1e3, r->alloc.p99 / 1e3, r->free.p50 / 1e3, r->free.p99 / 1e3,
                   r->pair.p50 / 1e3, cold);
        }
        if (!x.cu)
            printf("note: cuMemAlloc rows skipped: %s\n", why);
        if (why_be[0])
            printf("note: %s\n", why_be);
    }
    int failed = 0;
    for (size_t i = 0; i < nrows; i++)
        failed |= rows[i].err != 0;
    /* The clients first: their background threads may still use the context. */
    mb_close(x.c0);
    mb_close(x.c);
    mb_backend_close(x.be);
    bench_cuda_close(x.cu);
    return failed ? 1 : 0;
}
