/* bench_vspace.c: the cost of vspace growth on a GPU: growing a vspace by 1 .. 65536
 * pages with map_async (host and device time) against cuMemMap +
 * cuMemSetAccess of the same bytes in 2 MiB handles and against copying a
 * block table from the host; the stream-ordered slow path's return time and
 * time until dependent work runs, against a synchronous map; the paged
 * gather's bandwidth against the same gather on one contiguous buffer.
 *
 * usage: MOONBRIGHT_RUNTIME_DIR=DIR bench_vspace [growth|slow|gather]...
 * (a moonbrightd --backend cuda serving there): the parts named, in their
 * order (default all three; growth alone takes well under a minute).
 * Prints one table per part. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <moonbright/mbclient.h>
#include <moonbright/vspace.h>

#include "async_map.h"
#include "client.h"
#include "mbk_vspace.h"
#include "mbkernels.h"

#define REPS 7

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_d);
    return v[n / 2];
}

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "bench_vspace: %s failed: %s\n", #x, mb_strerror(rc_));                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static mb_client *g_c;
static void *g_s;
static void *g_e0, *g_e1;

/* cuMemMap + cuMemSetAccess of `bytes` in 2 MiB handles (at most 2048), us. */
static double remap_us(size_t bytes)
{
    mb_backend *be = g_c->be;
    size_t h = (bytes + (2u << 20) - 1) >> 21;
    if (h > 2048)
        h = 2048;
    struct mb_mem *m = calloc(h, sizeof(*m));
    for (size_t i = 0; i < h; i++) {
        m[i].fd = -1;
        CHECK(be->ops->create(be, 2u << 20, &m[i]));
    }
    void *va;
    CHECK(be->ops->reserve(be, h << 21, &va));
    double t0 = now_us();
    for (size_t i = 0; i < h; i++) {
        CHECK(be->ops->map(be, (char *)va + (i << 21), &m[i]));
        CHECK(be->ops->set_access(be, (char *)va + (i << 21), 2u << 20));
    }
    double t = now_us() - t0;
    CHECK(be->ops->unmap(be, va, h << 21));
    be->ops->free_va(be, va, h << 21);
    for (size_t i = 0; i < h; i++)
        be->ops->release(be, &m[i]);
    free(m);
    return t;
}

static void growth(void)
{
    printf("\n## Growing an object (median of %d; warm = pages already in the pool)\n", REPS);
    printf("| page | pages | bytes | map_async host us | device us | cold map host us | "
           "remap 2 MiB handles us | handles | table copy host us | device us |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    const size_t pages[2] = { 64 << 10, 2 << 20 };
    const size_t ns[4] = { 1, 64, 1024, 65536 };
    uint64_t *table_h;
    void *table_d;
    CHECK(mbk_host_alloc(65536 * 8, (void **)&table_h));
    CHECK(mbk_dev_alloc(65536 * 8, &table_d));
    for (int pi = 0; pi < 2; pi++) {
        for (int ni = 0; ni < 4; ni++) {
            size_t pg = pages[pi], n = ns[ni], bytes = pg * n;
            if (bytes > ((size_t)4 << 30))
                continue;
            mb_vspace *v;
            /* Cold: the page pools unmapped (their frames stay cached in
             * the process), so the first map maps an extent. */
            CHECK(mb_trim(g_c, (size_t)-1));
            CHECK(mb_vspace_create(g_c, bytes, pg, &v));
            double t0 = now_us();
            CHECK(mb_vspace_map_async(v, 0, n, g_s));
            double cold = now_us() - t0;
            CHECK(mbk_stream_sync(g_s));
            CHECK(mb_vspace_unmap_async(v, 0, n, g_s));
            CHECK(mbk_stream_sync(g_s));
            double host[REPS], dev[REPS], ch[REPS], cd[REPS];
            for (int r = 0; r < REPS; r++) {
                CHECK(mbk_event_record(g_e0, g_s));
                t0 = now_us();
                CHECK(mb_vspace_map_async(v, 0, n, g_s));
                host[r] = now_us() - t0;
                CHECK(mbk_event_record(g_e1, g_s));
                CHECK(mbk_event_sync(g_e1));
                float ms;
                CHECK(mbk_event_elapsed_ms(g_e0, g_e1, &ms));
                dev[r] = ms * 1e3;
                CHECK(mb_vspace_unmap_async(v, 0, n, g_s));
                CHECK(mbk_stream_sync(g_s));
                for (size_t i = 0; i < n; i++)
                    table_h[i] = 0x10000ull * (i + 1);
                CHECK(mbk_event_record(g_e0, g_s));
                t0 = now_us();
                CHECK(mbk_write((uint64_t)(uintptr_t)table_d, table_h, n * 8, g_s));
                ch[r] = now_us() - t0;
                CHECK(mbk_event_record(g_e1, g_s));
                CHECK(mbk_event_sync(g_e1));
                CHECK(mbk_event_elapsed_ms(g_e0, g_e1, &ms));
                cd[r] = ms * 1e3;
            }
            mb_vspace_destroy(v);
            size_t handles = (bytes + (2u << 20) - 1) >> 21;
            double remap = remap_us(bytes);
            printf("| %zu KiB | %zu | %zu MiB | %.1f | %.1f | %.1f | %.0f%s | %zu | %.1f | %.1f |\n",
                   pg >> 10, n, bytes >> 20, median(host, REPS), median(dev, REPS), cold,
                   remap, handles > 2048 ? " (2048 handles)" : "", handles, median(ch, REPS),
                   median(cd, REPS));
            fflush(stdout);
        }
    }
    mbk_host_free(table_h);
    mbk_dev_free(table_d);
}

static void slow_path(void)
{
    printf("\n## mb_malloc_async slow path (amap_alloc; frames already cached; median of %d)\n",
           REPS);
    printf("| bytes | call returns us | dependent kernel done us | synchronous map us |\n"
           "|---|---|---|---|\n");
    const size_t sizes[3] = { (size_t)2 << 20, (size_t)64 << 20, (size_t)1 << 30 };
    for (int si = 0; si < 3; si++) {
        size_t b = sizes[si];
        double ret[REPS], dep[REPS], syn[REPS];
        struct stitched *s;
        /* Fill the frame cache once. */
        pthread_mutex_lock(&g_c->flock);
        CHECK(stitch_alloc(g_c, b, b, &s));
        CHECK(stitch_free(g_c, s, NULL));
        pthread_mutex_unlock(&g_c->flock);
        for (int r = 0; r < REPS; r++) {
            double t0 = now_us();
            pthread_mutex_lock(&g_c->flock);
            CHECK(amap_alloc(g_c, b, g_s, &s));
            pthread_mutex_unlock(&g_c->flock);
            ret[r] = now_us() - t0;
            CHECK(mbk_spin(0, g_s));
            CHECK(mbk_event_record(g_e1, g_s));
            CHECK(mbk_event_sync(g_e1));
            dep[r] = now_us() - t0;
            bool failed, unmapped;
            amap_settle(g_c, s, &failed, &unmapped);
            CHECK(failed ? MB_EBACKEND : 0);
            pthread_mutex_lock(&g_c->flock);
            CHECK(stitch_free(g_c, s, NULL));   /* the kernel above is done */
            t0 = now_us();
            CHECK(stitch_alloc(g_c, b, b, &s));
            syn[r] = now_us() - t0;
            CHECK(stitch_free(g_c, s, NULL));
            pthread_mutex_unlock(&g_c->flock);
        }
        printf("| %zu MiB | %.1f | %.1f | %.1f |\n", b >> 20, median(ret, REPS),
               median(dep, REPS), median(syn, REPS));
        fflush(stdout);
    }
}

static void gather(void)
{
    const size_t bytes = (size_t)1 << 30;
    const size_t rows_b[2] = { 4 << 10, 32 << 10 };
    printf("\n## Paged gather vs contiguous (1 GiB object, every row once in random order, "
           "median of %d)\n", REPS);
    printf("| page | row | paged GB/s | contiguous GB/s | paged / contiguous |\n"
           "|---|---|---|---|---|\n");
    void *contig, *out, *rows_d;
    CHECK(mb_malloc(g_c, bytes, &contig));
    CHECK(mb_malloc(g_c, bytes, &out));
    CHECK(mb_malloc(g_c, (bytes / (4 << 10)) * 8, &rows_d));
    CHECK(mbk_fill_pattern(contig, bytes, 3, g_s));
    const size_t pages[2] = { 64 << 10, 2 << 20 };
    for (int pi = 0; pi < 2; pi++) {
        mb_vspace *v;
        CHECK(mb_vspace_create(g_c, bytes, pages[pi], &v));
        CHECK(mb_vspace_map_async(v, 0, bytes / pages[pi], g_s));
        struct mb_vspace_dev t = *mb_vspace_device(v);
        CHECK(mbk_vspace_fill_pattern(t, 0, bytes, 3, g_s));
        for (int ri = 0; ri < 2; ri++) {
            size_t row = rows_b[ri], nrows = bytes / row;
            uint64_t *rows = malloc(nrows * 8);
            for (size_t i = 0; i < nrows; i++)
                rows[i] = i;
            srand(7);
            for (size_t i = nrows - 1; i > 0; i--) {
                size_t j = ((size_t)rand() * 65536u + (size_t)rand()) % (i + 1);
                uint64_t x = rows[i];
                rows[i] = rows[j];
                rows[j] = x;
            }
            CHECK(mbk_write((uint64_t)(uintptr_t)rows_d, rows, nrows * 8, g_s));
            CHECK(mbk_stream_sync(g_s));
            free(rows);
            double pt[REPS], ct[REPS];
            for (int r = 0; r < REPS; r++) {
                float ms;
                CHECK(mbk_event_record(g_e0, g_s));
                CHECK(mbk_vspace_gather(t, rows_d, nrows, row, out, g_s));
                CHECK(mbk_event_record(g_e1, g_s));
                CHECK(mbk_event_sync(g_e1));
                CHECK(mbk_event_elapsed_ms(g_e0, g_e1, &ms));
                pt[r] = ms;
                CHECK(mbk_event_record(g_e0, g_s));
                CHECK(mbk_contig_gather(contig, rows_d, nrows, row, out, g_s));
                CHECK(mbk_event_record(g_e1, g_s));
                CHECK(mbk_event_sync(g_e1));
                CHECK(mbk_event_elapsed_ms(g_e0, g_e1, &ms));
                ct[r] = ms;
            }
            /* Bytes read plus bytes written. */
            double p = 2.0 * bytes / (median(pt, REPS) * 1e6);
            double c = 2.0 * bytes / (median(ct, REPS) * 1e6);
            printf("| %zu KiB | %zu KiB | %.0f | %.0f | %.3f |\n", pages[pi] >> 10, row >> 10, p,
                   c, p / c);
            fflush(stdout);
        }
        mb_vspace_destroy(v);
    }
    mb_free(g_c, rows_d);
    mb_free(g_c, out);
    mb_free(g_c, contig);
}

static const struct part {
    const char *name;
    void (*run)(void);
} parts[] = { { "growth", growth }, { "slow", slow_path }, { "gather", gather } };
#define N_PARTS (sizeof(parts) / sizeof(parts[0]))

int main(int argc, char **argv)
{
    bool want[N_PARTS] = { false };
    for (int i = 1; i < argc; i++) {
        size_t k = 0;
        while (k < N_PARTS && strcmp(argv[i], parts[k].name) != 0)
            k++;
        if (k == N_PARTS) {
            fprintf(stderr, "usage: bench_vspace [growth|slow|gather]... (default: all)\n");
            return 2;
        }
        want[k] = true;
    }
    for (size_t k = 0; argc < 2 && k < N_PARTS; k++)
        want[k] = true;
    int rc = mb_open(&g_c, "bench-vspace");
    if (rc != 0) {
        fprintf(stderr, "bench_vspace: no daemon: %s\n", mb_strerror(rc));
        return 1;
    }
    if (strcmp(mb_backend_name(g_c), "cuda") != 0) {
        fprintf(stderr, "bench_vspace: needs the cuda backend (daemon uses %s)\n",
                mb_backend_name(g_c));
        mb_close(g_c);
        return 77;
    }
    CHECK(mbk_stream_create(&g_s));
    CHECK(mbk_event_create(&g_e0));
    CHECK(mbk_event_create(&g_e1));
    CHECK(mbk_test_warm());
    CHECK(mbk_spin(0, g_s));
    CHECK(mbk_stream_sync(g_s));
    printf("# bench_vspace (frame %zu KiB)\n", g_c->frame_bytes >> 10);
    for (size_t k = 0; k < N_PARTS; k++)
        if (want[k])
            parts[k].run();
    amap_close(g_c);
    mbk_event_destroy(g_e0);
    mbk_event_destroy(g_e1);
    mbk_stream_destroy(g_s);
    mb_close(g_c);
    return 0;
}
