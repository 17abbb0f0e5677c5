/* test_backend_cuda.c: the "cuda" backend on a real GPU: frames exported here
 * and written by a separate process (gpu_importer), read back here across frame
 * boundaries; scrub, memset, events, errors, calls from other threads, an
 * exported frame kept open.
 *
 * usage: test_backend_cuda PATH_TO_gpu_importer. Exits 77 (skipped) when no
 * GPU is usable. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "backend.h"
#include "gpu_chan.h"
#include "log.h"
#include "mbkernels.h"

extern char **environ;

static mb_backend *g_b;
static int g_sock = -1;         /* our end of the importer's socket */
static pid_t g_importer = -1;

/* Start the importer before this process initialises CUDA (a child of a
 * CUDA process may hang in import): it inherits one end of a socketpair. */
static int start_importer(const char *path)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) {
        perror("socketpair");
        return -1;
    }
    fcntl(sv[0], F_SETFD, FD_CLOEXEC);
    char fdarg[16];
    snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
    char *argv[] = { (char *)path, fdarg, NULL };
    int err = posix_spawn(&g_importer, path, NULL, NULL, argv, environ);
    close(sv[1]);
    if (err != 0) {
        fprintf(stderr, "failed to start %s: %s\n", path, strerror(err));
        close(sv[0]);
        return -1;
    }
    g_sock = sv[0];
    return 0;
}

/* Close the socket (the importer exits at end of file) and reap it. */
static int stop_importer(void)
{
    if (g_sock >= 0)
        close(g_sock);
    g_sock = -1;
    if (g_importer <= 0)
        return 0;
    int status = 0;
    for (int i = 0; i < 300; i++) {
        pid_t r = waitpid(g_importer, &status, WNOHANG);
        if (r == g_importer) {
            g_importer = -1;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(100 * 1000);
    }
    kill(g_importer, SIGKILL);
    waitpid(g_importer, &status, 0);
    g_importer = -1;
    return -1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Map mems side by side (in the order given) into a new range. */
static void map_side_by_side(struct mb_mem **mems, int n, void **va, size_t *total)
{
    *total = 0;
    for (int i = 0; i < n; i++)
        *total += mems[i]->bytes;
    assert_int_equal(g_b->ops->reserve(g_b, *total, va), 0);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(g_b->ops->map(g_b, (char *)*va + off, mems[i]), 0);
        off += mems[i]->bytes;
    }
    assert_int_equal(g_b->ops->set_access(g_b, *va, *total), 0);
}

static void unmap_range(void *va, size_t total)
{
    assert_int_equal(g_b->ops->unmap(g_b, va, total), 0);
    g_b->ops->free_va(g_b, va, total);
}

static unsigned long long check(const void *va, size_t bytes, uint64_t base, uint32_t seed)
{
    unsigned long long bad = ~0ull, first = 0;
    assert_int_equal(mbk_check_pattern(va, bytes, base, seed, NULL, &bad, &first), 0);
    if (bad)
        printf("  %llu mismatching bytes in %zu, first at %llu\n", bad, bytes, first);
    return bad;
}

/* Four frames of mixed sizes, exported here, written by the importer through
 * its own side-by-side mapping, read back here in two arrangements. */
static void test_share_across_processes(void **state)
{
    (void)state;
    if (!g_b)
        skip();
    const size_t G = g_b->granularity;
    const size_t sizes[4] = { G, 2 * G, G, G };
    const uint32_t seed = 0x5eed1234u;
    struct mb_mem mems[4];
    struct gpu_msg m = { .op = GPU_OP_IMPORT, .count = 4, .seed = seed };
    int fds[4];
    uint64_t offs[4], off = 0;
    for (int i = 0; i < 4; i++) {
        struct mb_mem init = MB_MEM_INIT;
        mems[i] = init;
        assert_int_equal(g_b->ops->create(g_b, sizes[i], &mems[i]), 0);
        assert_int_equal(g_b->ops->export_fd(g_b, &mems[i]), 0);
        assert_true(mems[i].fd >= 0);
        int fd_again = mems[i].fd;
        assert_int_equal(g_b->ops->export_fd(g_b, &mems[i]), 0);   /* idempotent */
        assert_int_equal(mems[i].fd, fd_again);
        fds[i] = mems[i].fd;
        m.bytes[i] = sizes[i];
        offs[i] = off;
        off += sizes[i];
    }
    double t0 = now_s();
    assert_int_equal(gpu_chan_send(g_sock, &m, fds, 4), 0);
    struct gpu_msg reply;
    int rfds[GPU_CHAN_MAX_FDS];
    assert_int_equal(gpu_chan_recv(g_sock, &reply, rfds, 60000), 0);
    printf("  importer: status %d, %llu mismatches in its own read-back, %.1f ms round trip\n",
           reply.status, (unsigned long long)reply.mismatches, (now_s() - t0) * 1e3);
    assert_int_equal(reply.op, GPU_OP_RESULT);
    assert_int_equal(reply.status, 0);
    assert_int_equal(reply.mismatches, 0);

    /* Same order as the importer: the whole range is one pattern. */
    struct mb_mem *order[4] = { &mems[0], &mems[1], &mems[2], &mems[3] };
    void *va;
    size_t total;
    map_side_by_side(order, 4, &va, &total);
    assert_int_equal(total, (size_t)off);
    assert_int_equal(check(va, total, 0, seed), 0);
    /* A window straddling the boundary between frames 1 and 2, odd edges. */
    size_t b12 = (size_t)offs[2];
    assert_int_equal(check((char *)va + b12 - 4093, 8191, b12 - 4093, seed), 0);
    unmap_range(va, total);

    /* Reverse order: each frame still holds its own part of the pattern. */
    struct mb_mem *rev[4] = { &mems[3], &mems[2], &mems[1], &mems[0] };
    map_side_by_side(rev, 4, &va, &total);
    size_t at = 0;
    for (int i = 3; i >= 0; i--) {
        assert_int_equal(check((char *)va + at, sizes[i], offs[i], seed), 0);
        at += sizes[i];
    }
    unsigned long long bad = 0;
    assert_int_equal(mbk_check_pattern(va, total, 0, seed, NULL, &bad, NULL), 0);
    assert_true(bad > 0);   /* the arrangement is visible: frames are distinct */
    unmap_range(va, total);

    for (int i = 0; i < 4; i++) {
        g_b->ops->release(g_b, &mems[i]);
        assert_int_equal(mems[i].fd, -1);
    }
}

/* Scrub zeroes a frame that holds data; a second scrub reuses the internal
 * mapping; release drops it. */
static void test_scrub(void **state)
{
    (void)state;
    if (!g_b)
        skip();
    const size_t bytes = 2 * g_b->granularity;
    struct mb_mem mem = MB_MEM_INIT;
    assert_int_equal(g_b->ops->create(g_b, bytes, &mem), 0);
    struct mb_mem *one[1] = { &mem };
    void *va;
    size_t total;
    map_side_by_side(one, 1, &va, &total);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(mbk_fill_pattern(va, bytes, 77u + (uint32_t)round, NULL), 0);
        assert_int_equal(mbk_stream_sync(NULL), 0);
        assert_int_equal(check(va, bytes, 0, 77u + (uint32_t)round), 0);
        double t0 = now_s();
        assert_int_equal(g_b->ops->scrub(g_b, &mem), 0);
        printf("  scrub %d of %zu MiB: %.3f ms\n", round, bytes >> 20, (now_s() - t0) * 1e3);
        unsigned long long bad = ~0ull, first = 0;
        assert_int_equal(mbk_check_value(va, bytes, 0, NULL, &bad, &first), 0);
        assert_int_equal(bad, 0);
    }
    unmap_range(va, total);
    g_b->ops->release(g_b, &mem);
}

static int count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        if (fcntl(fd, F_GETFD) != -1)
            n++;
    return n;
}

/* keep_exports_warm holds exactly one exported fd however often it is
 * called; frames exported after it still export and release. */
static void test_keep_exports_warm(void **state)
{
    (void)state;
    if (!g_b)
        skip();
    assert_non_null(g_b->ops->keep_exports_warm);
    int before = count_fds();
    assert_int_equal(g_b->ops->keep_exports_warm(g_b), 0);
    assert_int_equal(count_fds(), before + 1);
    assert_int_equal(g_b->ops->keep_exports_warm(g_b), 0);
    assert_int_equal(count_fds(), before + 1);
    for (int round = 0; round < 3; round++) {
        struct mb_mem mem = MB_MEM_INIT;
        assert_int_equal(g_b->ops->create(g_b, g_b->granularity, &mem), 0);
        double t0 = now_s();
        assert_int_equal(g_b->ops->export_fd(g_b, &mem), 0);
        printf("  export %d with an exported frame held: %.3f ms\n", round, (now_s() - t0) * 1e3);
        assert_true(mem.fd >= 0);
        g_b->ops->release(g_b, &mem);
        assert_int_equal(count_fds(), before + 1);
    }
}

/* A frame whose exported fd was let go of (unexport) and made again
 * (export_fd) is the same memory: the importer writes a pattern through
 * the new fd, and this process reads it through the handle. */
static void test_unexport_export_again(void **state)
{
    (void)state;
    if (!g_b)
        skip();
    const size_t G = g_b->granularity;
    struct mb_mem mem = MB_MEM_INIT;
    assert_int_equal(g_b->ops->create(g_b, G, &mem), 0);
    assert_int_equal(g_b->ops->export_fd(g_b, &mem), 0);
    int before = count_fds();
    assert_non_null(g_b->ops->unexport);
    g_b->ops->unexport(g_b, &mem);
    assert_int_equal(mem.fd, -1);
    assert_int_equal(count_fds(), before - 1);
    assert_int_equal(g_b->ops->export_fd(g_b, &mem), 0);
    assert_true(mem.fd >= 0);
    const uint32_t seed = 0x0e1a5e5u;
    struct gpu_msg m = { .op = GPU_OP_IMPORT, .count = 1, .seed = seed };
    m.bytes[0] = G;
    int fd = mem.fd;
    assert_int_equal(gpu_chan_send(g_sock, &m, &fd, 1), 0);
    struct gpu_msg reply;
    int rfds[GPU_CHAN_MAX_FDS];
    assert_int_equal(gpu_chan_recv(g_sock, &reply, rfds, 60000), 0);
    assert_int_equal(reply.op, GPU_OP_RESULT);
    assert_int_equal(reply.status, 0);
    assert_int_equal(reply.mismatches, 0);
    struct mb_mem *one[1] = { &mem };
    void *va;
    size_t total;
    map_side_by_side(one, 1, &va, &total);
    assert_int_equal(check(va, G, 0, seed), 0);
    unmap_range(va, total);
    g_b->ops->release(g_b, &mem);
}

/* memset ordered on a stream, an event recorded behind it completes, and
 * the memory holds the value. */
static void test_memset_events(void **state)
{
    (void)state;
    if (!g_b)
        skip();
    const size_t bytes = 4 * g_b->granularity;
    struct mb_mem mem = MB_MEM_INIT;
    assert_int_equal(g_b->ops->create(g_b, bytes, &mem), 0);
    struct mb_mem *one[1] = { &mem };
    void *va;
    size_t total;
    map_side_by_side(one, 1, &va, &total);
    void *stream = NULL, *ev = NULL;
    assert_int_equal(mbk_stream_create(&stream), 0);
    assert_int_equal(g_b->ops->event_create(g_b, &ev), 0);

    assert_int_equal(g_b->ops->memset(g_b, va, 0xAB, bytes, stream), 0);
    assert_int_equal(g_b->ops->event_record(g_b, ev, stream), 0);
    int q;
    double t0 = now_s();
    while ((q = g_b->ops->event_query(g_b, ev)) == 0 && now_s() - t0 < 10)
        usleep(50);
    assert_int_equal(q, 1);
    unsigned long long bad = ~0ull;
    assert_int_equal(mbk_check_value(va, bytes, 0xAB, stream, &bad, NULL), 0);
    assert_int_equal(bad, 0);

    /* Pattern then memset of an unaligned middle part, same stream. */
    assert_int_equal(mbk_fill_pattern(va, bytes, 9u, stream), 0);
    assert_int_equal(g_b->ops->memset(g_b, (char *)va + 3, 0, 1000, stream), 0);
    assert_int_equal(g_b->ops->stream_sync(g_b, stream), 0);
    assert_int_equal(mbk_check_pattern(va, bytes, 0, 9u, stream, &bad, NULL), 0);
    assert_true(bad > 0 && bad <= 1000);
    assert_int_equal(check((char *)va + 1003, bytes - 1003, 1003, 9u), 0);
    assert_int_equal(g_b->ops->event_record(g_b, ev, stream), 0);
    assert_int_equal(g_b->ops->stream_sync(g_b, stream), 0);
    assert_int_equal(g_b->ops->event_query(g_b, ev), 1);

    g_b->ops->event_destroy(g_b, ev);
    mbk_stream_destroy(stream);
    unmap_range(va, total);
    g_b->ops->release(g_b, &mem);
}

/* Bad sizes and absurd requests give clear errors, never a crash. */
static void test_errors(void **state)
{
    (void)state;
    if (!g_b)
        skip();
    const size_t G = g_b->granularity;
    struct mb_mem mem = MB_MEM_INIT;
    assert_int_equal(g_b->ops->create(g_b, G + 1, &mem), MB_EINVAL);
    assert_int_equal(g_b->ops->create(g_b, 0, &mem), MB_EINVAL);

    size_t absurd = (size_t)1 << 40;   /* 1 TiB, several times any GPU */
    int rc = g_b->ops->create(g_b, absurd, &mem);
    printf("  create(1 TiB) = %d (%s)\n", rc, mb_strerror(rc));
    assert_true(rc == MB_ENOMEM || rc == MB_EBACKEND);

    void *va = NULL;
    assert_int_equal(g_b->ops->reserve(g_b, G / 2, &va), MB_EINVAL);

    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    rc = g_b->ops->import_fd(g_b, fd, G, &mem);
    printf("  import_fd(/dev/null) = %d (%s)\n", rc, mb_strerror(rc));
    assert_true(rc < 0);
}

/* Every op may come from a thread that never touched CUDA. */
struct thread_result {
    int rc;
    unsigned long long bad;
};

static void *thread_body(void *arg)
{
    struct thread_result *r = arg;
    struct mb_mem mem = MB_MEM_INIT;
    void *va = NULL;
    size_t bytes = g_b->granularity;
    r->bad = ~0ull;
    r->rc = g_b->ops->create(g_b, bytes, &mem);
    if (r->rc == 0)
        r->rc = g_b->ops->reserve(g_b, bytes, &va);
    if (r->rc == 0)
        r->rc = g_b->ops->map(g_b, va, &mem);
    if (r->rc == 0)
        r->rc = g_b->ops->set_access(g_b, va, bytes);
    if (r->rc == 0)
        r->rc = mbk_fill_pattern(va, bytes, 3u, NULL);
    if (r->rc == 0)
        r->rc = g_b->ops->stream_sync(g_b, NULL);
    if (r->rc == 0)
        r->rc = mbk_check_pattern(va, bytes, 0, 3u, NULL, &r->bad, NULL);
    if (r->rc == 0)
        r->rc = g_b->ops->scrub(g_b, &mem);
    if (va) {
        g_b->ops->unmap(g_b, va, bytes);
        g_b->ops->free_va(g_b, va, bytes);
    }
    if (mem.bytes)
        g_b->ops->release(g_b, &mem);
    return NULL;
}

static void test_other_threads(void **state)
{
    (void)state;
    if (!g_b)
        skip();
    pthread_t t[4];
    struct thread_result r[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, thread_body, &r[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].rc, 0);
        assert_int_equal(r[i].bad, 0);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_gpu_importer\n", argv[0]);
        return 2;
    }
    mb_log_set_ident("test_backend_cuda");
    if (start_importer(argv[1]) != 0)
        return 1;
    int rc = mb_backend_cuda_open(0, &g_b);
    if (rc != 0) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            printf("SKIP: no usable GPU: %s\n", dlerror());
        else
            printf("SKIP: no usable GPU: mb_backend_cuda_open(0) = %d (%s), reason logged on stderr\n",
                   rc, mb_strerror(rc));
        fflush(stdout);
        stop_importer();
        return GPU_CHAN_SKIP;
    }
    printf("cuda backend on device 0, granularity %zu KiB\n", g_b->granularity >> 10);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_across_processes),
        cmocka_unit_test(test_scrub),
        cmocka_unit_test(test_memset_events),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_other_threads),
        cmocka_unit_test(test_keep_exports_warm),
        cmocka_unit_test(test_unexport_export_again),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    int importer_rc = stop_importer();
    mb_backend_close(g_b);
    if (importer_rc != 0) {
        fprintf(stderr, "gpu_importer exited with %d\n", importer_rc);
        failed++;
    }
    return failed ? 1 : 0;
}
