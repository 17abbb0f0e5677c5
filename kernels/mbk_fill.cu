/* mbk_fill.cu: the pattern kernels of mbkernels.h: fill a device range with a
 * position-dependent byte pattern and count the bytes that differ from it (or
 * from one value), so tests can verify every byte of stitched allocations. */
#include "mbkernels.h"

#include <stdio.h>

#include <cuda_runtime.h>

#include <moonbright/status.h>

namespace {

const int kThreads = 256;
const int kMaxBlocks = 4096;

/* splitmix64 of (seed, word index): pattern word w covers positions 8w..8w+7. */
__device__ __forceinline__ uint64_t pattern_word(uint32_t seed, uint64_t w)
{
    uint64_t z = w * 0x9E3779B97F4A7C15ull + (uint64_t)seed * 0xD1B54A32D192ED03ull +
                 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ uint8_t pattern_byte(uint32_t seed, uint64_t pos)
{
    return (uint8_t)(pattern_word(seed, pos >> 3) >> ((pos & 7) * 8));
}

/* The 8 pattern bytes at positions pos .. pos+7, little-endian in a word. */
__device__ __forceinline__ uint64_t pattern_at(uint32_t seed, uint64_t pos)
{
    unsigned s = (unsigned)(pos & 7) * 8;
    uint64_t lo = pattern_word(seed, pos >> 3);
    if (s == 0)
        return lo;
    uint64_t hi = pattern_word(seed, (pos >> 3) + 1);
    return (lo >> s) | (hi << (64 - s));
}

/* Expected content: the pattern from base (value < 0) or a constant byte. */
struct expect {
    uint64_t base;
    uint32_t seed;
    int value;
    __device__ uint64_t word(uint64_t off) const
    {
        return value < 0 ? pattern_at(seed, base + off) : 0x0101010101010101ull * (uint8_t)value;
    }
    __device__ uint8_t byte(uint64_t off) const
    {
        return value < 0 ? pattern_byte(seed, base + off) : (uint8_t)value;
    }
};

/* A range split into an unaligned head, whole 8-byte words, and a tail. */
struct layout {
    size_t head;     /* bytes before the first aligned word */
    size_t words;    /* aligned words */
    size_t tail;     /* bytes after the last aligned word */
};

layout split(const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    size_t head = (size_t)((8 - (a & 7)) & 7);
    if (head >= bytes)
        return layout{ bytes, 0, 0 };
    size_t words = (bytes - head) / 8;
    return layout{ head, words, bytes - head - words * 8 };
}

__global__ void fill_kernel(uint8_t *dst, layout l, expect e)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    uint64_t *w = (uint64_t *)(dst + l.head);
    for (size_t i = tid; i < l.words; i += stride)
        w[i] = e.word(l.head + i * 8);
    size_t edge = l.head + l.tail;
    for (size_t i = tid; i < edge; i += stride) {
        size_t off = i < l.head ? i : l.head + l.words * 8 + (i - l.head);
        dst[off] = e.byte(off);
    }
}

/* Bytes that are non-zero in x, as a mask of their top bits. */
__device__ __forceinline__ uint64_t nonzero_bytes(uint64_t x)
{
    const uint64_t m = 0x7F7F7F7F7F7F7F7Full;
    uint64_t zero = ~(((x & m) + m) | x | m);
    return ~zero & 0x8080808080808080ull;
}

/* out[0] += mismatching bytes; out[1] = min(out[1], first mismatching offset). */
__global__ void check_kernel(const uint8_t *src, layout l, expect e, unsigned long long *out)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned long long bad = 0, first = ~0ull;
    const uint64_t *w = (const uint64_t *)(src + l.head);
    for (size_t i = tid; i < l.words; i += stride) {
        uint64_t nz = nonzero_bytes(w[i] ^ e.word(l.head + i * 8));
        if (nz) {
            bad += (unsigned long long)__popcll(nz);
            unsigned long long off = l.head + i * 8 + (unsigned)((__ffsll(nz) - 1) >> 3);
            first = off < first ? off : first;
        }
    }
    size_t edge = l.head + l.tail;
    for (size_t i = tid; i < edge; i += stride) {
        size_t off = i < l.head ? i : l.head + l.words * 8 + (i - l.head);
        if (src[off] != e.byte(off)) {
            bad++;
            first = off < first ? off : first;
        }
    }
    for (int d = 16; d > 0; d /= 2) {
        bad += __shfl_down_sync(0xffffffffu, bad, d);
        unsigned long long f = __shfl_down_sync(0xffffffffu, first, d);
        first = f < first ? f : first;
    }
    if ((threadIdx.x & 31) == 0 && bad) {
        atomicAdd(&out[0], bad);
        atomicMin(&out[1], first);
    }
}

int grid_for(layout l)
{
    size_t units = l.words > l.head + l.tail ? l.words : l.head + l.tail;
    size_t blocks = (units + kThreads - 1) / kThreads;
    if (blocks < 1)
        blocks = 1;
    return blocks > (size_t)kMaxBlocks ? kMaxBlocks : (int)blocks;
}

int cuda_fail(cudaError_t err, const char *what)
{
    fprintf(stderr, "mbkernels: failed to %s: %s\n", what, cudaGetErrorString(err));
    return MB_EBACKEND;
}

int fill(void *dst, size_t bytes, expect e, void *stream)
{
    if (bytes == 0)
        return 0;
    if (!dst)
        return MB_EINVAL;
    layout l = split(dst, bytes);
    fill_kernel<<<grid_for(l), kThreads, 0, (cudaStream_t)stream>>>((uint8_t *)dst, l, e);
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? 0 : cuda_fail(err, "launch the fill kernel");
}

int check(const void *src, size_t bytes, expect e, void *stream, unsigned long long *mismatches,
          unsigned long long *first_bad)
{
    if (!mismatches || (bytes && !src))
        return MB_EINVAL;
    *mismatches = 0;
    if (first_bad)
        *first_bad = bytes;
    if (bytes == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned long long host[2] = { 0, ~0ull };
    unsigned long long *dev = NULL;
    cudaError_t err = cudaMallocAsync((void **)&dev, sizeof(host), s);
    if (err != cudaSuccess)
        return cuda_fail(err, "allocate the check counters");
    err = cudaMemcpyAsync(dev, host, sizeof(host), cudaMemcpyHostToDevice, s);
    if (err != cudaSuccess) {
        cudaFreeAsync(dev, s);
        return cuda_fail(err, "initialise the check counters");
    }
    layout l = split(src, bytes);
    check_kernel<<<grid_for(l), kThreads, 0, s>>>((const uint8_t *)src, l, e, dev);
    err = cudaGetLastError();
    const char *what = "launch the check kernel";
    if (err == cudaSuccess) {
        what = "read the check result";
        err = cudaMemcpyAsync(host, dev, sizeof(host), cudaMemcpyDeviceToHost, s);
    }
    cudaError_t ferr = cudaFreeAsync(dev, s);
    if (err == cudaSuccess) {
        what = "wait for the check kernel";
        err = cudaStreamSynchronize(s);
    }
    if (err == cudaSuccess && ferr != cudaSuccess) {
        what = "free the check counters";
        err = ferr;
    }
    if (err != cudaSuccess)
        return cuda_fail(err, what);
    *mismatches = host[0];
    if (first_bad)
        *first_bad = host[0] ? host[1] : bytes;
    return 0;
}

} // namespace

extern "C" int mbk_fill_pattern_at(void *dst, size_t bytes, uint64_t base, uint32_t seed, void *stream)
{
    return fill(dst, bytes, expect{ base, seed, -1 }, stream);
}

extern "C" int mbk_fill_pattern(void *dst, size_t bytes, uint32_t seed, void *stream)
{
    return mbk_fill_pattern_at(dst, bytes, 0, seed, stream);
}

extern "C" int mbk_check_pattern(const void *src, size_t bytes, uint64_t base, uint32_t seed,
                                 void *stream, unsigned long long *mismatches,
                                 unsigned long long *first_bad)
{
    return check(src, bytes, expect{ base, seed, -1 }, stream, mismatches, first_bad);
}

extern "C" int mbk_check_value(const void *src, size_t bytes, uint8_t value, void *stream,
                               unsigned long long *mismatches, unsigned long long *first_bad)
{
    return check(src, bytes, expect{ 0, 0, value }, stream, mismatches, first_bad);
}

extern "C" int mbk_stream_create(void **stream)
{
    cudaStream_t s;
    cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (err != cudaSuccess)
        return cuda_fail(err, "create a stream");
    *stream = s;
    return 0;
}

extern "C" void mbk_stream_destroy(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" int mbk_stream_sync(void *stream)
{
    cudaError_t err = cudaStreamSynchronize((cudaStream_t)stream);
    return err == cudaSuccess ? 0 : cuda_fail(err, "synchronize a stream");
}
