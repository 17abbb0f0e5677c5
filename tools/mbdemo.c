/* mbdemo.c: a short workload against a running moonbrightd: allocate
 * stitched buffers of several sizes, write and verify a pattern across
 * frame boundaries (host backend), free them, and report what happened. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

int main(int argc, char **argv)
{
    const char *tenant = argc > 1 ? argv[1] : "demo";
    mb_client *c;
    int rc = mb_open(&c, tenant);
    if (rc != 0) {
        fprintf(stderr, "mbdemo: failed to open a session: %s\n", mb_strerror(rc));
        return 1;
    }
    bool host = strcmp(mb_backend_name(c), "host") == 0;
    mb_client_stats st;
    mb_stats(c, &st);
    printf("mbdemo: session open (tenant %s, %s backend, %zu-byte frames)\n", tenant,
           mb_backend_name(c), st.frame_bytes);
    static const size_t sizes[] = { 4096, 3u << 20, 64u << 20, 5u << 20, 256u << 20 };
    void *p[5];
    size_t n = sizeof(sizes) / sizeof(sizes[0]);
    for (size_t i = 0; i < n; i++) {
        if ((rc = mb_malloc(c, sizes[i], &p[i])) != 0) {
            fprintf(stderr, "mbdemo: failed to allocate %zu bytes: %s\n", sizes[i], mb_strerror(rc));
            mb_close(c);
            return 1;
        }
        if (host) {
            uint64_t *w = p[i];
            for (size_t k = 0; k < sizes[i] / 8; k += 509)
                w[k] = k * 0x9e3779b97f4a7c15ull + i;
        }
    }
    size_t bad = 0;
    for (size_t i = 0; host && i < n; i++) {
        const uint64_t *w = p[i];
        for (size_t k = 0; k < sizes[i] / 8; k += 509)
            bad += w[k] != k * 0x9e3779b97f4a7c15ull + i;
    }
    mb_stats(c, &st);
    printf("mbdemo: %zu buffers live, %zu MiB mapped, %zu MiB held from the daemon, %llu round trips\n",
           n, st.bytes_mapped >> 20, st.bytes_granted >> 20, (unsigned long long)st.daemon_requests);
    if (host)
        printf("mbdemo: pattern across frame boundaries: %s (%zu mismatches)\n",
               bad ? "CORRUPT" : "intact", bad);
    for (size_t i = 0; i < n; i++)
        mb_free(c, p[i]);
    /* A second round reuses the process's cached frames: no daemon trip. */
    unsigned long long before = st.daemon_requests;
    void *q;
    if (mb_malloc(c, 64u << 20, &q) == 0)
        mb_free(c, q);
    mb_stats(c, &st);
    printf("mbdemo: re-allocating 64 MiB from cached frames took %llu round trips\n",
           (unsigned long long)(st.daemon_requests - before));
    mb_close(c);
    return bad ? 1 : 0;
}
