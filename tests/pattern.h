/* pattern.h: the byte pattern the allocator model checks write into blocks:
 * every byte of blocks up to `full` bytes, the first and last `edge` bytes
 * of larger ones (sparse host memory stays uncommitted). */
#ifndef MB_TEST_PATTERN_H
#define MB_TEST_PATTERN_H

#include <stddef.h>
#include <stdint.h>

static inline unsigned char pattern_byte(uint64_t seed, size_t i)
{
    return (unsigned char)(seed + i * 131);
}

static inline void pattern_fill(uintptr_t p, size_t n, uint64_t seed, size_t full, size_t edge)
{
    unsigned char *b = (unsigned char *)p;
    if (n <= full) {
        for (size_t i = 0; i < n; i++)
            b[i] = pattern_byte(seed, i);
    } else {
        for (size_t i = 0; i < edge; i++) {
            b[i] = pattern_byte(seed, i);
            b[n - edge + i] = pattern_byte(seed, n - edge + i);
        }
    }
}

/* The first offset (or, for large blocks, edge index) that does not hold
 * the pattern; -1 when all of it does. */
static inline long pattern_check(uintptr_t p, size_t n, uint64_t seed, size_t full, size_t edge)
{
    const unsigned char *b = (const unsigned char *)p;
    if (n <= full) {
        for (size_t i = 0; i < n; i++)
            if (b[i] != pattern_byte(seed, i))
                return (long)i;
    } else {
        for (size_t i = 0; i < edge; i++)
            if (b[i] != pattern_byte(seed, i) || b[n - edge + i] != pattern_byte(seed, n - edge + i))
                return (long)i;
    }
    return -1;
}

#endif
