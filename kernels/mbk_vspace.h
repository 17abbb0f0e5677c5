/* mbk_vspace.h: C entry points of the vspace kernels (kernels/mbk_vspace.cu,
 * library mbkernels): the PTE kernel that writes page-table entries, table
 * read-back, and the consumers and helpers the tests and bench_vspace use
 * (paged gather, pattern fill/check through a table, compare, spin, events).
 *
 * Every function returns 0 or a negative mb_status (MB_EINVAL on bad
 * arguments, MB_EBACKEND on a CUDA error, logged to stderr). stream is a
 * cudaStream_t / CUstream (NULL: the legacy default stream); pointers and
 * uint64_t addresses are device addresses of the current device. */
#ifndef MB_KERNELS_VSPACE_H
#define MB_KERNELS_VSPACE_H

#include <stddef.h>
#include <stdint.h>

#include <moonbright/vspace.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One run of entry writes: ((uint64_t *)dst)[i] = value + (i << step_shift)
 * for i < count, where step_shift 0 means a constant value (not a step of
 * 1: entries are page addresses, pages are at least 64 KiB). Runs of one
 * call must not overlap: they are written by different blocks in any order. */
struct mbk_pte_run {
    uint64_t dst;
    uint64_t value;
    uint32_t count;         /* 1 .. MB_VSPACE_FANOUT */
    uint32_t step_shift;
};

/* Runs passed in one launch's parameters (no copy, no staging buffer). */
#define MBK_PTE_RUNS_PER_LAUNCH 1024

/* Enqueue the writes on stream: ceil(n / MBK_PTE_RUNS_PER_LAUNCH) launches,
 * the runs travelling in the kernel parameters (the call returns once they
 * are enqueued; runs[] may be reused at once). */
int mbk_pte_write(const struct mbk_pte_run *runs, size_t n, void *stream);

/* Launch every kernel of this file once (no memory touched) and wait:
 * the first launch of a kernel must not happen while a stream is gated. */
int mbk_vspace_warm(void);

/* Copy bytes of device memory at src to host dst after the work on stream,
 * and wait for it. */
int mbk_read(void *dst, uint64_t src, size_t bytes, void *stream);
/* Copy host src to device dst on stream (src pinned or not), asynchronous
 * when src is pinned; waits otherwise. */
int mbk_write(uint64_t dst, const void *src, size_t bytes, void *stream);

/* Gather nrows rows of row_bytes (a multiple of 16): dst row i = the bytes
 * at offset rows[i] * row_bytes of the paged object t (rows: device array).
 * The _contig form reads the same rows from one buffer src. */
int mbk_vspace_gather(struct mb_vspace_dev t, const uint64_t *rows, size_t nrows,
                      size_t row_bytes, void *dst, void *stream);
int mbk_contig_gather(const void *src, const uint64_t *rows, size_t nrows, size_t row_bytes,
                      void *dst, void *stream);

/* Write / check the pattern of mbkernels.h (P(seed, offset ...)) through
 * the table: bytes [offset, offset + bytes) of the object. check waits and
 * counts mismatching bytes. offset and bytes multiples of 8. */
int mbk_vspace_fill_pattern(struct mb_vspace_dev t, uint64_t offset, size_t bytes, uint32_t seed,
                            void *stream);
int mbk_vspace_check_pattern(struct mb_vspace_dev t, uint64_t offset, size_t bytes, uint32_t seed,
                             void *stream, unsigned long long *mismatches);

/* Test kernels (kernels/mbk_test.cu, library mbkernels_test: never part of
 * libmbclient). Count differing bytes of two device buffers (waits). */
int mbk_compare(const void *a, const void *b, size_t bytes, void *stream,
                unsigned long long *mismatches);

/* A one-thread kernel that spins for ns nanoseconds of GPU time. */
int mbk_spin(uint64_t ns, void *stream);
/* Launch the test kernels once (before any stream is gated; see
 * mbk_vspace_warm). */
int mbk_test_warm(void);

/* Device malloc/free (cudaMalloc) and pinned host memory, for benchmarks. */
int mbk_dev_alloc(size_t bytes, void **p);
void mbk_dev_free(void *p);
int mbk_host_alloc(size_t bytes, void **p);
void mbk_host_free(void *p);

/* Timing events. */
int mbk_event_create(void **ev);
void mbk_event_destroy(void *ev);
int mbk_event_record(void *ev, void *stream);
int mbk_event_sync(void *ev);
/* 1 when complete, 0 while pending, < 0 on error. */
int mbk_event_query(void *ev);
int mbk_event_elapsed_ms(void *start, void *end, float *ms);

#ifdef __cplusplus
}
#endif
#endif
