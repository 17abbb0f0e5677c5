/* mbtest_cacher.c: a tenant that keeps a cache, for the elastic reclaim
 * test: it allocates TOTAL bytes in two blocks, writes a pattern into the
 * first (KEEP bytes), frees the second so its frames sit in libmbclient's
 * cache, prints "ready", then on each line of stdin verifies the pattern
 * and prints "intact cached=N" or "corrupt cached=N" (N from mb_stats).
 * Exits at end of input. Exit codes: 0, 10 corrupt, 20+n on status -n.
 *
 *   mbtest_cacher TOTAL KEEP SEED [TENANT]     (set MOONBRIGHT_CACHE >= TOTAL)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

static uint64_t word(uint64_t seed, size_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + i;
    x ^= x >> 31;
    return x * 0xbf58476d1ce4e5b9ull;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    size_t total = strtoull(argv[1], NULL, 0), keep = strtoull(argv[2], NULL, 0);
    uint64_t seed = strtoull(argv[3], NULL, 0);
    if (keep == 0 || keep >= total)
        return 2;
    mb_client *c;
    int rc = mb_open(&c, argc > 4 ? argv[4] : NULL);
    if (rc != 0) {
        printf("open: %s\n", mb_strerror(rc));
        return 20 - rc;
    }
    uint64_t *p;
    void *spare;
    if ((rc = mb_malloc(c, keep, (void **)&p)) != 0 || (rc = mb_malloc(c, total - keep, &spare)) != 0) {
        printf("alloc: %s\n", mb_strerror(rc));
        mb_close(c);
        return 20 - rc;
    }
    for (size_t i = 0; i < keep / 8; i++)
        p[i] = word(seed, i);
    if ((rc = mb_free(c, spare)) != 0) {
        printf("free: %s\n", mb_strerror(rc));
        mb_close(c);
        return 20 - rc;
    }
    printf("ready\n");
    fflush(stdout);
    int out = 0;
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        size_t bad = 0;
        for (size_t i = 0; i < keep / 8; i++)
            bad += p[i] != word(seed, i);
        mb_client_stats st;
        memset(&st, 0, sizeof(st));
        mb_stats(c, &st);
        printf("%s cached=%zu\n", bad ? "corrupt" : "intact", st.bytes_cached);
        fflush(stdout);
        if (bad)
            out = 10;
    }
    mb_free(c, p);
    mb_close(c);
    return out;
}
