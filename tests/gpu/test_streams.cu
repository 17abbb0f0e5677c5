/* test_streams.cu: stream-ordered reuse on the GPU through a real daemon.
 * A long kernel on stream A uses a block that is then freed on A: later
 * allocations on A may reuse it at once, allocations on stream B must not
 * get it (nor any byte of it) until the kernel is done, and B's writes to
 * what it gets never disturb the kernel's block. Also a stitched allocation
 * across frame boundaries written and read by kernels. Exit 0 pass, 1 fail.
 * Run under with_daemon.sh (which skips without a GPU). */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include <moonbright/mbclient.h>

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #x); exit(1); } } while (0)
#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

/* Write a pattern, spin for `cycles`, then count words that changed. */
__global__ void hold_block(uint32_t *p, size_t n, long long cycles, unsigned long long *bad)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t k = i; k < n; k += (size_t)gridDim.x * blockDim.x)
        p[k] = (uint32_t)(k * 2654435761u);
    long long t0 = clock64();
    while (clock64() - t0 < cycles)
        ;
    for (size_t k = i; k < n; k += (size_t)gridDim.x * blockDim.x)
        if (p[k] != (uint32_t)(k * 2654435761u))
            atomicAdd(bad, 1ull);
}

__global__ void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x)
        p[k] = (uint8_t)((k * 131u) ^ seed);
}

__global__ void verify(const uint8_t *p, size_t n, uint32_t seed, unsigned long long *bad)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x)
        if (p[k] != (uint8_t)((k * 131u) ^ seed))
            atomicAdd(bad, 1ull);
}

static bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    const char *x = (const char *)a, *y = (const char *)b;
    return x < y + bn && y < x + an;
}

int main()
{
    mb_client *c;
    int rc = mb_open(&c, "streams");
    if (rc) {
        fprintf(stderr, "FAIL: mb_open: %s\n", mb_strerror(rc));
        return 1;
    }
    CHECK(strcmp(mb_backend_name(c), "cuda") == 0);
    CU(cudaSetDevice(0));
    cudaStream_t A, B;
    CU(cudaStreamCreateWithFlags(&A, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&B, cudaStreamNonBlocking));
    unsigned long long *bad;
    CU(cudaMallocHost(&bad, 2 * sizeof(*bad)));
    bad[0] = bad[1] = 0;
    /* Warm the kernels first. */
    hold_block<<<1, 32, 0, A>>>((uint32_t *)nullptr, 0, 0, bad + 1);
    CU(cudaStreamSynchronize(A));

    /* 1 MiB: slab objects through the thread cache; 64 MiB: the heap. */
    const size_t sizes[2] = { 1u << 20, (size_t)64 << 20 };
    for (int si = 0; si < 2; si++) {
    const size_t blk = sizes[si];
    const int nq = si == 0 ? 48 : 8;
    bad[0] = 0;
    void *p;
    CHECK(mb_malloc_async(c, blk, A, &p) == 0);
    long long cycles = 2000000000ll / 10;   /* ~0.1-0.2 s at GPU clocks */
    hold_block<<<64, 256, 0, A>>>((uint32_t *)p, blk / 4, cycles, bad);
    CU(cudaGetLastError());
    CHECK(mb_free_async(c, p, A) == 0);

    /* Same stream: reuse at once is correct by stream order. */
    void *r;
    CHECK(mb_malloc_async(c, blk, A, &r) == 0);
    printf("%zu KiB same-stream reuse: %s\n", blk >> 10, r == p ? "yes" : "no");
    CHECK(r == p);

    /* Other stream while the kernel runs: never the same bytes. */
    void *q[48];
    for (int i = 0; i < nq; i++) {
        CHECK(mb_malloc_async(c, blk, B, &q[i]) == 0);
        CHECK(!overlaps(q[i], blk, p, blk));
        CU(cudaMemsetAsync(q[i], 0xff, blk, B));
    }
    CHECK(cudaStreamQuery(A) == cudaErrorNotReady);   /* the test really overlapped */
    CU(cudaStreamSynchronize(A));
    CU(cudaStreamSynchronize(B));
    printf("%zu KiB kernel block words disturbed: %llu\n", blk >> 10, bad[0]);
    CHECK(bad[0] == 0);
    CHECK(mb_free_async(c, r, A) == 0);
    for (int i = 0; i < nq; i++)
        CHECK(mb_free_async(c, q[i], B) == 0);
    }

    /* A stitched allocation across frame boundaries, every byte written and
     * read back by kernels. */
    size_t big = (size_t)(64u << 20) + 4096 + 17;
    uint8_t *s;
    CHECK(mb_malloc(c, big, (void **)&s) == 0);
    fill<<<264, 256>>>(s, big, 0x5a);
    verify<<<264, 256>>>(s, big, 0x5a, bad + 1);
    CU(cudaDeviceSynchronize());
    printf("stitched %zu bytes: %llu bytes wrong\n", big, bad[1]);
    CHECK(bad[1] == 0);
    CHECK(mb_free(c, s) == 0);
    mb_client_stats st;
    CHECK(mb_stats(c, &st) == 0);
    printf("pool mapped %zu, slab mapped %zu, granted %zu, %llu daemon round trips\n",
           st.pool_mapped, st.slab_mapped, st.bytes_granted, (unsigned long long)st.daemon_requests);
    mb_close(c);
    printf("PASS\n");
    return 0;
}
