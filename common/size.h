/* size.h: byte sizes as people write them ("2M", "64KiB", "1g", "4096"). */
#ifndef MB_SIZE_H
#define MB_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Parse a size: decimal digits, optional suffix K/M/G/T (powers of 1024,
 * case-insensitive, optionally followed by "iB" or "B") or a bare "B"
 * ("4096B"). Rejects empty
 * strings, signs, junk, and values that overflow 64 bits: returns
 * MB_EINVAL and leaves *out untouched. */
int mb_parse_size(const char *s, uint64_t *out);
/* Format bytes as "2 MiB", "1.5 GiB" into buf; returns buf. */
const char *mb_format_size(uint64_t bytes, char *buf, size_t len);

#endif
