/* mbtest_client.c: the client program integration tests start as separate
 * processes. Exit codes: 0 success, 10 pattern corrupted, 20+n when a call
 * failed with status -n, 2 usage.
 *
 *   mbtest_client pattern BYTES SEED [TENANT]   alloc, write every word, verify, free
 *   mbtest_client hold BYTES SEED [TENANT]      alloc + write, print "ready", verify on
 *                                               each line read from stdin, exit at EOF
 *   mbtest_client alloc BYTES [TENANT]          one allocation, report the status
 */
#include <stdbool.h>
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

static void fill(uint64_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = word(seed, i);
}

static size_t check(const uint64_t *p, size_t n, uint64_t seed)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += p[i] != word(seed, i);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *cmd = argv[1];
    size_t bytes = strtoull(argv[2], NULL, 0);
    bool has_seed = strcmp(cmd, "alloc") != 0;
    uint64_t seed = has_seed && argc > 3 ? strtoull(argv[3], NULL, 0) : 0;
    const char *tenant = argc > (has_seed ? 4 : 3) ? argv[has_seed ? 4 : 3] : NULL;
    mb_client *c;
    int rc = mb_open(&c, tenant);
    if (rc != 0) {
        printf("open: %s\n", mb_strerror(rc));
        return 20 - rc;
    }
    void *p;
    rc = mb_malloc(c, bytes, &p);
    printf("alloc: %s\n", mb_strerror(rc));
    fflush(stdout);
    if (rc != 0) {
        mb_close(c);
        return 20 - rc;
    }
    int out = 0;
    if (strcmp(cmd, "pattern") == 0) {
        fill(p, bytes / 8, seed);
        out = check(p, bytes / 8, seed) ? 10 : 0;
        if ((rc = mb_free(c, p)) != 0)
            out = 20 - rc;
    } else if (strcmp(cmd, "hold") == 0) {
        fill(p, bytes / 8, seed);
        printf("ready\n");
        fflush(stdout);
        char line[64];
        while (fgets(line, sizeof(line), stdin)) {
            size_t bad = check(p, bytes / 8, seed);
            printf("%s\n", bad ? "corrupt" : "intact");
            fflush(stdout);
            if (bad)
                out = 10;
        }
        mb_free(c, p);
    } else if (strcmp(cmd, "alloc") == 0) {
        mb_free(c, p);
    } else {
        out = 2;
    }
    mb_close(c);
    return out;
}
