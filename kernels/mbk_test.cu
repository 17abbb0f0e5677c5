/* mbk_test.cu: kernels only the GPU tests and bench_vspace use (library
 * mbkernels_test, declared in mbk_vspace.h): compare two device buffers,
 * and spin for a span of GPU time to hold a stream busy. Kept out of
 * mbkernels so libmbclient does not carry them. */
#include "mbk_vspace.h"

#include <stdio.h>

#include <cuda_runtime.h>

#include <moonbright/status.h>

namespace {

const int kThreads = 256;
const int kMaxBlocks = 4096;

int blocks_for(uint64_t units)
{
    uint64_t b = (units + kThreads - 1) / kThreads;
    return b < 1 ? 1 : b > (uint64_t)kMaxBlocks ? kMaxBlocks : (int)b;
}

int cuda_fail(cudaError_t err, const char *what)
{
    fprintf(stderr, "mbkernels: failed to %s: %s\n", what, cudaGetErrorString(err));
    return MB_EBACKEND;
}

__global__ void compare_kernel(const uint8_t *a, const uint8_t *b, uint64_t bytes,
                               unsigned long long *bad)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    unsigned long long n = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride)
        n += a[i] != b[i];
    if (n)
        atomicAdd(bad, n);
}

__global__ void spin_kernel(uint64_t ns)
{
    uint64_t t0 = 0, t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

} // namespace

extern "C" int mbk_compare(const void *a, const void *b, size_t bytes, void *stream,
                           unsigned long long *mismatches)
{
    if (!mismatches || (bytes && (!a || !b)))
        return MB_EINVAL;
    *mismatches = 0;
    if (!bytes)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned long long *dev = nullptr;
    cudaError_t err = cudaMallocAsync((void **)&dev, sizeof(*dev), s);
    if (err != cudaSuccess)
        return cuda_fail(err, "allocate a counter");
    err = cudaMemsetAsync(dev, 0, sizeof(*dev), s);
    if (err == cudaSuccess) {
        compare_kernel<<<blocks_for(bytes), kThreads, 0, s>>>((const uint8_t *)a,
                                                              (const uint8_t *)b, bytes, dev);
        err = cudaGetLastError();
    }
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(mismatches, dev, sizeof(*dev), cudaMemcpyDeviceToHost, s);
    cudaFreeAsync(dev, s);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(s);
    return err == cudaSuccess ? 0 : cuda_fail(err, "compare on the device");
}

extern "C" int mbk_test_warm(void)
{
    cudaStream_t s = nullptr;
    cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (err != cudaSuccess)
        return cuda_fail(err, "create the warm-up stream");
    compare_kernel<<<1, 32, 0, s>>>(nullptr, nullptr, 0, nullptr);
    spin_kernel<<<1, 1, 0, s>>>(0);
    err = cudaGetLastError();
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    return err == cudaSuccess ? 0 : cuda_fail(err, "launch the test kernels once");
}

extern "C" int mbk_spin(uint64_t ns, void *stream)
{
    spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(ns);
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? 0 : cuda_fail(err, "launch the spin kernel");
}
