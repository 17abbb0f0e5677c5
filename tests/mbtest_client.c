/* mbtest_client.c: the client program integration tests start as separate
 * processes. Exit codes: 0 success, 10 pattern corrupted, 20+n when a call
 * failed with status -n, 2 usage.
 *
 *   mbtest_client pattern BYTES SEED [TENANT]   alloc, write every word, verify, free
 *   mbtest_client hold BYTES SEED [TENANT]      alloc + write, print "ready", verify on
 *                                               each line read from stdin ("alloc": one
 *                                               more allocation instead), exit at EOF
 *   mbtest_client alloc BYTES [TENANT]          one allocation, report the status
 *   mbtest_client export BYTES SEED [TENANT]     alloc + write, print "token HEX"; at
 *                                               each stdin line free it (first line) and
 *                                               print "freed"; exit at EOF
 *   mbtest_client zeros BYTES [TENANT]          alloc, count non-zero bytes (exit 10 if any)
 *   mbtest_client import HEX SEED                import, print "import: STATUS", verify on
 *                                               each stdin line, free and exit at EOF
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

static int hex_token(const char *hex, mb_share_token *t)
{
    if (strlen(hex) != 2 * sizeof(t->bytes))
        return -1;
    for (size_t i = 0; i < sizeof(t->bytes); i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        t->bytes[i] = (uint8_t)v;
    }
    return 0;
}

static int import_main(int argc, char **argv)
{
    mb_share_token t;
    if (argc < 4 || hex_token(argv[2], &t) != 0)
        return 2;
    uint64_t seed = strtoull(argv[3], NULL, 0);
    mb_client *c;
    int rc = mb_open(&c, argc > 4 ? argv[4] : "importer");
    if (rc != 0)
        return 20 - rc;
    void *p;
    size_t size = 0;
    rc = mb_import(c, &t, &p, &size);
    printf("import: %s\n", mb_strerror(rc));
    fflush(stdout);
    if (rc != 0) {
        mb_close(c);
        return 20 - rc;
    }
    int out = 0;
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        size_t bad = check(p, strtoull(line, NULL, 0) / 8, seed);
        printf("%s\n", bad ? "corrupt" : "intact");
        fflush(stdout);
        if (bad)
            out = 10;
    }
    if ((rc = mb_free(c, p)) != 0)
        out = 20 - rc;
    mb_close(c);
    return out;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *cmd = argv[1];
    if (strcmp(cmd, "import") == 0)
        return import_main(argc, argv);
    size_t bytes = strtoull(argv[2], NULL, 0);
    bool has_seed = strcmp(cmd, "alloc") != 0 && strcmp(cmd, "zeros") != 0;
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
    /* Device memory (cuda backend) is not for the CPU: hold and alloc work
     * there, without touching the bytes. */
    bool touch = strcmp(mb_backend_name(c), "host") == 0;
    if (!touch && strcmp(cmd, "hold") == 0) {
        printf("ready\n");
        fflush(stdout);
        char line[64];
        while (fgets(line, sizeof(line), stdin)) {
            if (strncmp(line, "alloc", 5) == 0) {   /* more work, untouched */
                void *q;
                rc = mb_malloc(c, 3u << 20, &q);
                if (rc == 0)
                    rc = mb_free(c, q);
                printf("alloc: %s\n", mb_strerror(rc));
                fflush(stdout);
            }
        }
        mb_free(c, p);
        mb_close(c);
        return 0;
    }
    if (!touch && strcmp(cmd, "alloc") != 0) {
        mb_free(c, p);
        mb_close(c);
        return 2;
    }
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
            if (strncmp(line, "alloc", 5) == 0) {
                /* More work: a fresh allocation, written, verified, freed. */
                void *q;
                size_t qb = 3u << 20;
                rc = mb_malloc(c, qb, &q);
                if (rc == 0) {
                    fill(q, qb / 8, seed + 7);
                    rc = check(q, qb / 8, seed + 7) ? MB_EPROTO : mb_free(c, q);
                }
                printf("alloc: %s\n", mb_strerror(rc));
                fflush(stdout);
                continue;
            }
            size_t bad = check(p, bytes / 8, seed);
            printf("%s\n", bad ? "corrupt" : "intact");
            fflush(stdout);
            if (bad)
                out = 10;
        }
        mb_free(c, p);
    } else if (strcmp(cmd, "export") == 0) {
        fill(p, bytes / 8, seed);
        mb_share_token t;
        rc = mb_export(c, p, &t);
        if (rc != 0) {
            printf("export: %s\n", mb_strerror(rc));
            out = 20 - rc;
        } else {
            printf("token ");
            for (size_t i = 0; i < sizeof(t.bytes); i++)
                printf("%02x", t.bytes[i]);
            printf("\n");
        }
        fflush(stdout);
        char line[64];
        bool freed = false;
        void *again = NULL;
        while (out == 0 && fgets(line, sizeof(line), stdin)) {
            if (!freed && (rc = mb_free(c, p)) != 0)
                out = 20 - rc;
            /* Allocate and write the same size again: the shared frames
             * must not come back to this process for it. */
            if (!freed && out == 0 && mb_malloc(c, bytes, &again) == 0)
                fill(again, bytes / 8, seed + 1);
            freed = true;
            printf("freed\n");
            fflush(stdout);
        }
        if (again)
            mb_free(c, again);
        if (!freed)
            mb_free(c, p);
    } else if (strcmp(cmd, "zeros") == 0) {
        size_t nz = 0;
        for (size_t i = 0; i < bytes; i++)
            nz += ((const uint8_t *)p)[i] != 0;
        printf("nonzero: %zu\n", nz);
        out = nz ? 10 : 0;
        mb_free(c, p);
    } else if (strcmp(cmd, "alloc") == 0) {
        mb_free(c, p);
    } else {
        out = 2;
    }
    mb_close(c);
    return out;
}
