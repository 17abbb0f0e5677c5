/* mbkernels.h: C entry points of the CUDA kernels in kernels/ (library
 * mbkernels): position-dependent fill and check patterns used by the GPU
 * tests to write and verify every byte of stitched allocations.
 *
 * The pattern is a stream of bytes P(seed, i), i = 0, 1, 2, ...: byte i is
 * byte (i % 8) of a 64-bit mix of (seed, i / 8). A buffer written with
 * base = B holds P(seed, B .. B + bytes - 1), so one range written whole can
 * be checked piecewise (each frame with base = its offset), and a frame
 * mapped at the wrong place reads as mismatches.
 *
 * Every function returns 0 or a negative mb_status (MB_EINVAL on bad
 * arguments, MB_EBACKEND on a CUDA error, logged to stderr). stream is a
 * cudaStream_t / CUstream; NULL is the legacy default stream. Pointers are
 * device addresses in the current device's primary context. */
#ifndef MB_KERNELS_H
#define MB_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Write P(seed, 0 .. bytes-1) to dst, ordered on stream (asynchronous). */
int mbk_fill_pattern(void *dst, size_t bytes, uint32_t seed, void *stream);
/* The same, starting at pattern position base. */
int mbk_fill_pattern_at(void *dst, size_t bytes, uint64_t base, uint32_t seed, void *stream);

/* Compare src with P(seed, base .. base+bytes-1) on stream, wait for the
 * result, store the number of mismatching bytes in *mismatches and, when
 * first_bad is not NULL, the offset of the first one (bytes when none). */
int mbk_check_pattern(const void *src, size_t bytes, uint64_t base, uint32_t seed, void *stream,
                      unsigned long long *mismatches, unsigned long long *first_bad);

/* Count the bytes of src that differ from value (synchronous like check). */
int mbk_check_value(const void *src, size_t bytes, uint8_t value, void *stream,
                    unsigned long long *mismatches, unsigned long long *first_bad);

/* A non-blocking stream of the current device, for tests; destroy frees it. */
int mbk_stream_create(void **stream);
void mbk_stream_destroy(void *stream);
/* Wait for all work on stream. */
int mbk_stream_sync(void *stream);

#ifdef __cplusplus
}
#endif
#endif
