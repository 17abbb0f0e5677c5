/* mbk_vspace.cu: the vspace kernels of mbk_vspace.h: the PTE kernel that
 * writes page-table entries from runs passed in its parameters, and the
 * consumers that translate through a table (paged gather, pattern fill and
 * check), with the small helpers the GPU tests and bench_vspace need
 * (compare and spin, which only tests use, are in mbk_test.cu). */
#include "mbk_vspace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include <moonbright/status.h>

#include "mb_vspace.cuh"

namespace {

/* Runs of one launch, by value in the kernel's parameter space (CUDA 12.1+
 * allows 32 764 bytes on sm_70 and later). Small maps use the small form:
 * a launch's cost grows with its parameter bytes. */
template <int N> struct run_batch {
    struct mbk_pte_run r[N];
};
const int kSmallRuns = 16;
const int kPteThreads = 128;

/* Entry i of a run (mbk_vspace.h): written by the kernel and by the stream
 * memory operations alike. */
__host__ __device__ inline uint64_t run_entry(const struct mbk_pte_run &r, uint32_t i)
{
    return r.value + (r.step_shift ? (uint64_t)i << r.step_shift : 0ull);
}

template <int N> __global__ void pte_kernel(const __grid_constant__ run_batch<N> b, int n)
{
    if ((int)blockIdx.x >= n)
        return;
    const struct mbk_pte_run &r = b.r[blockIdx.x];
    unsigned long long *dst = (unsigned long long *)r.dst;
    for (uint32_t i = threadIdx.x; i < r.count; i += blockDim.x)
        dst[i] = run_entry(r, i);
}

int cuda_fail(cudaError_t err, const char *what)
{
    fprintf(stderr, "mbkernels: failed to %s: %s\n", what, cudaGetErrorString(err));
    return MB_EBACKEND;
}

int launched(const char *what)
{
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? 0 : cuda_fail(err, what);
}

/* Small writes (at most kMemOpsMax entries in all, the common growth by a
 * page or two) go as stream memory operations instead: one
 * cuStreamBatchMemOp of 64-bit writes, ordered on the stream like the
 * kernel, costs the host less than a launch. The driver's entry point is
 * looked up once through the runtime (the library does not link libcuda);
 * MOONBRIGHT_PTE_MEMOPS=0 turns the path off, and the first failure of it
 * turns it off for the process (the kernel does every write then). */
typedef CUresult (*batch_memop_fn)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);
const int kMemOpsMax = 8;
batch_memop_fn g_memops;      /* NULL: off */
bool g_memops_looked;

batch_memop_fn memops(void)
{
    /* Looked up once; a race only repeats an idempotent lookup. */
    if (__atomic_load_n(&g_memops_looked, __ATOMIC_ACQUIRE))
        return __atomic_load_n(&g_memops, __ATOMIC_ACQUIRE);
    void *fn = nullptr;
    const char *env = getenv("MOONBRIGHT_PTE_MEMOPS");
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (!(env && env[0] == '0') &&
        (cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", &fn, 12000, cudaEnableDefault, &q) !=
             cudaSuccess ||
         q != cudaDriverEntryPointSuccess))
        fn = nullptr;
    __atomic_store_n(&g_memops, (batch_memop_fn)fn, __ATOMIC_RELEASE);
    __atomic_store_n(&g_memops_looked, true, __ATOMIC_RELEASE);
    return (batch_memop_fn)fn;
}

/* 1 written, 0 not taken (too many entries, or the path is off or failed). */
int pte_memops(const struct mbk_pte_run *runs, size_t n, cudaStream_t s)
{
    size_t total = 0;
    for (size_t i = 0; i < n && total <= (size_t)kMemOpsMax; i++)
        total += runs[i].count;
    batch_memop_fn fn = total && total <= (size_t)kMemOpsMax ? memops() : nullptr;
    if (!fn)
        return 0;
    CUstreamBatchMemOpParams op[kMemOpsMax];
    memset(op, 0, sizeof(op));
    unsigned k = 0;
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < runs[i].count; j++, k++) {
            op[k].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
            op[k].writeValue.address = (CUdeviceptr)(runs[i].dst + 8ull * j);
            op[k].writeValue.value64 = run_entry(runs[i], j);
        }
    CUresult r = fn((CUstream)s, k, op, 0);
    if (r == CUDA_SUCCESS)
        return 1;
    fprintf(stderr, "mbkernels: stream memory operations failed (CUresult %d): page-table writes "
                    "use the kernel from now on\n", (int)r);
    __atomic_store_n(&g_memops, (batch_memop_fn)nullptr, __ATOMIC_RELEASE);
    return 0;
}

template <int N> int pte_launch(const struct mbk_pte_run *runs, int n, cudaStream_t s)
{
    run_batch<N> b;
    if (n > 0)
        memcpy(b.r, runs, (size_t)n * sizeof(runs[0]));
    pte_kernel<N><<<n > 0 ? n : 1, kPteThreads, 0, s>>>(b, n);
    return launched("launch the PTE kernel");
}

/* ---- consumers ---- */

/* The pattern of mbk_fill.cu: byte i is byte (i % 8) of splitmix(seed, i / 8). */
__device__ __forceinline__ uint64_t pattern_word(uint32_t seed, uint64_t w)
{
    uint64_t z = w * 0x9E3779B97F4A7C15ull + (uint64_t)seed * 0xD1B54A32D192ED03ull +
                 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct paged_src {
    struct mb_vspace_dev t;
    __device__ const char *at(uint64_t off, uint64_t &page, const char *&base) const
    {
        uint64_t p = off >> t.page_shift;
        if (p != page) {
            page = p;
            base = (const char *)(uintptr_t)mb_vspace_entry(&t, p);
        }
        return base + (off & (((uint64_t)1 << t.page_shift) - 1));
    }
};

struct contig_src {
    const char *src;
    __device__ const char *at(uint64_t off, uint64_t &, const char *&) const { return src + off; }
};

/* Each block copies one tile of kGatherVec * blockDim 16-byte vectors, each
 * thread kGatherVec of them (loads first, then stores). Consecutive vectors
 * of a thread lie kGatherThreads apart, so its translation is reused while
 * they stay in one page. */
const int kGatherThreads = 256;
const int kGatherVec = 8;

template <class Src>
__global__ void gather_kernel(Src s, const uint64_t *rows, uint64_t vec_per_row, uint64_t total,
                              uint64_t row_bytes, uint4 *dst)
{
    uint64_t first = (uint64_t)blockIdx.x * kGatherThreads * kGatherVec + threadIdx.x;
    uint64_t page = ~0ull;
    const char *base = nullptr;
    uint4 v[kGatherVec];
#pragma unroll
    for (int k = 0; k < kGatherVec; k++) {
        uint64_t i = first + (uint64_t)k * kGatherThreads;
        if (i < total) {
            uint64_t r = i / vec_per_row, c = i - r * vec_per_row;
            v[k] = *(const uint4 *)s.at(rows[r] * row_bytes + c * 16, page, base);
        }
    }
#pragma unroll
    for (int k = 0; k < kGatherVec; k++) {
        uint64_t i = first + (uint64_t)k * kGatherThreads;
        if (i < total)
            dst[i] = v[k];
    }
}

template <class Src>
int gather(Src s, const uint64_t *rows, size_t nrows, size_t row_bytes, void *dst, void *stream)
{
    if (!rows || !dst || row_bytes == 0 || row_bytes % 16)
        return MB_EINVAL;
    uint64_t vec = row_bytes / 16, total = vec * nrows;
    if (total == 0)
        return 0;
    uint64_t per_block = (uint64_t)kGatherThreads * kGatherVec;
    uint64_t blocks = (total + per_block - 1) / per_block;
    if (blocks > 0x7fffffffull)
        return MB_EINVAL;
    gather_kernel<Src><<<(unsigned)blocks, kGatherThreads, 0, (cudaStream_t)stream>>>(
        s, rows, vec, total, row_bytes, (uint4 *)dst);
    return launched("launch the gather kernel");
}

const int kThreads = 256;
const int kMaxBlocks = 4096;

int blocks_for(uint64_t units)
{
    uint64_t b = (units + kThreads - 1) / kThreads;
    return b < 1 ? 1 : b > (uint64_t)kMaxBlocks ? kMaxBlocks : (int)b;
}

__global__ void vfill_kernel(struct mb_vspace_dev t, uint64_t offset, uint64_t words, uint32_t seed)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        uint64_t off = offset + i * 8;
        *(uint64_t *)mb_vspace_translate(&t, off) = pattern_word(seed, off >> 3);
    }
}

__global__ void vcheck_kernel(struct mb_vspace_dev t, uint64_t offset, uint64_t words,
                              uint32_t seed, unsigned long long *bad)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long n = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        uint64_t off = offset + i * 8;
        uint64_t e = mb_vspace_entry(&t, off >> t.page_shift);
        if (e == MB_VSPACE_INVALID) {
            n += 8;   /* an unmapped page reads as all wrong, without faulting */
            continue;
        }
        uint64_t got = *(const uint64_t *)mb_vspace_translate(&t, off);
        uint64_t x = got ^ pattern_word(seed, off >> 3);
        for (int k = 0; k < 8; k++)
            n += ((x >> (8 * k)) & 0xff) != 0;
    }
    if (n)
        atomicAdd(bad, n);
}

/* Run a counting kernel that adds into one device counter; wait; fetch it. */
template <class Launch> int count(void *stream, unsigned long long *out, Launch launch)
{
    cudaStream_t s = (cudaStream_t)stream;
    unsigned long long *dev = nullptr;
    cudaError_t err = cudaMallocAsync((void **)&dev, sizeof(*dev), s);
    if (err != cudaSuccess)
        return cuda_fail(err, "allocate a counter");
    err = cudaMemsetAsync(dev, 0, sizeof(*dev), s);
    if (err == cudaSuccess) {
        launch(dev, s);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(out, dev, sizeof(*dev), cudaMemcpyDeviceToHost, s);
    cudaFreeAsync(dev, s);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(s);
    return err == cudaSuccess ? 0 : cuda_fail(err, "count on the device");
}

} // namespace

extern "C" int mbk_pte_write(const struct mbk_pte_run *runs, size_t n, void *stream)
{
    if (n && !runs)
        return MB_EINVAL;
    cudaStream_t s = (cudaStream_t)stream;
    if (pte_memops(runs, n, s))
        return 0;
    for (size_t i = 0; i < n;) {
        size_t k = n - i;
        int rc;
        if (k <= (size_t)kSmallRuns) {
            rc = pte_launch<kSmallRuns>(runs + i, (int)k, s);
        } else {
            if (k > MBK_PTE_RUNS_PER_LAUNCH)
                k = MBK_PTE_RUNS_PER_LAUNCH;
            rc = pte_launch<MBK_PTE_RUNS_PER_LAUNCH>(runs + i, (int)k, s);
        }
        if (rc)
            return rc;
        i += k;
    }
    return 0;
}

extern "C" int mbk_vspace_warm(void)
{
    cudaStream_t s = nullptr;
    cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (err != cudaSuccess)
        return cuda_fail(err, "create the warm-up stream");
    int rc = pte_launch<kSmallRuns>(nullptr, 0, s);
    if (!rc)
        rc = pte_launch<MBK_PTE_RUNS_PER_LAUNCH>(nullptr, 0, s);
    struct mb_vspace_dev t = { 0, 0, 16, 1 };
    if (!rc) {
        gather_kernel<paged_src><<<1, kGatherThreads, 0, s>>>(paged_src{ t }, nullptr, 1, 0, 16,
                                                              nullptr);
        gather_kernel<contig_src><<<1, kGatherThreads, 0, s>>>(contig_src{ nullptr }, nullptr, 1,
                                                               0, 16, nullptr);
        vfill_kernel<<<1, 32, 0, s>>>(t, 0, 0, 0);
        vcheck_kernel<<<1, 32, 0, s>>>(t, 0, 0, 0, nullptr);
        rc = launched("launch the vspace kernels once");
    }
    err = cudaStreamSynchronize(s);
    if (!rc && err != cudaSuccess)
        rc = cuda_fail(err, "wait for the warm-up launches");
    cudaStreamDestroy(s);
    return rc;
}

extern "C" int mbk_read(void *dst, uint64_t src, size_t bytes, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t err = cudaMemcpyAsync(dst, (const void *)(uintptr_t)src, bytes,
                                      cudaMemcpyDeviceToHost, s);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(s);
    return err == cudaSuccess ? 0 : cuda_fail(err, "read device memory");
}

extern "C" int mbk_write(uint64_t dst, const void *src, size_t bytes, void *stream)
{
    cudaError_t err = cudaMemcpyAsync((void *)(uintptr_t)dst, src, bytes, cudaMemcpyHostToDevice,
                                      (cudaStream_t)stream);
    return err == cudaSuccess ? 0 : cuda_fail(err, "write device memory");
}

extern "C" int mbk_vspace_gather(struct mb_vspace_dev t, const uint64_t *rows, size_t nrows,
                                 size_t row_bytes, void *dst, void *stream)
{
    return gather(paged_src{ t }, rows, nrows, row_bytes, dst, stream);
}

extern "C" int mbk_contig_gather(const void *src, const uint64_t *rows, size_t nrows,
                                 size_t row_bytes, void *dst, void *stream)
{
    if (!src)
        return MB_EINVAL;
    return gather(contig_src{ (const char *)src }, rows, nrows, row_bytes, dst, stream);
}

extern "C" int mbk_vspace_fill_pattern(struct mb_vspace_dev t, uint64_t offset, size_t bytes,
                                       uint32_t seed, void *stream)
{
    if (offset % 8 || bytes % 8)
        return MB_EINVAL;
    uint64_t words = bytes / 8;
    if (!words)
        return 0;
    vfill_kernel<<<blocks_for(words), kThreads, 0, (cudaStream_t)stream>>>(t, offset, words, seed);
    return launched("launch the paged fill kernel");
}

extern "C" int mbk_vspace_check_pattern(struct mb_vspace_dev t, uint64_t offset, size_t bytes,
                                        uint32_t seed, void *stream,
                                        unsigned long long *mismatches)
{
    if (offset % 8 || bytes % 8 || !mismatches)
        return MB_EINVAL;
    uint64_t words = bytes / 8;
    *mismatches = 0;
    if (!words)
        return 0;
    return count(stream, mismatches, [&](unsigned long long *dev, cudaStream_t s) {
        vcheck_kernel<<<blocks_for(words), kThreads, 0, s>>>(t, offset, words, seed, dev);
    });
}

extern "C" int mbk_dev_alloc(size_t bytes, void **p)
{
    cudaError_t err = cudaMalloc(p, bytes);
    return err == cudaSuccess ? 0 : cuda_fail(err, "allocate device memory");
}

extern "C" void mbk_dev_free(void *p) { cudaFree(p); }

extern "C" int mbk_host_alloc(size_t bytes, void **p)
{
    cudaError_t err = cudaMallocHost(p, bytes);
    return err == cudaSuccess ? 0 : cuda_fail(err, "allocate pinned host memory");
}

extern "C" void mbk_host_free(void *p) { cudaFreeHost(p); }

extern "C" int mbk_event_create(void **ev)
{
    cudaEvent_t e;
    cudaError_t err = cudaEventCreate(&e);
    if (err != cudaSuccess)
        return cuda_fail(err, "create an event");
    *ev = e;
    return 0;
}

extern "C" void mbk_event_destroy(void *ev)
{
    if (ev)
        cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" int mbk_event_record(void *ev, void *stream)
{
    cudaError_t err = cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream);
    return err == cudaSuccess ? 0 : cuda_fail(err, "record an event");
}

extern "C" int mbk_event_sync(void *ev)
{
    cudaError_t err = cudaEventSynchronize((cudaEvent_t)ev);
    return err == cudaSuccess ? 0 : cuda_fail(err, "wait for an event");
}

extern "C" int mbk_event_query(void *ev)
{
    cudaError_t err = cudaEventQuery((cudaEvent_t)ev);
    if (err == cudaSuccess)
        return 1;
    if (err == cudaErrorNotReady) {
        cudaGetLastError();
        return 0;
    }
    return cuda_fail(err, "query an event");
}

extern "C" int mbk_event_elapsed_ms(void *start, void *end, float *ms)
{
    cudaError_t err = cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end);
    return err == cudaSuccess ? 0 : cuda_fail(err, "time events");
}
