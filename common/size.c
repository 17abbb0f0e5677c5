/* size.c: parsing and printing byte sizes with binary suffixes. */
#include "size.h"

#include <ctype.h>
#include <stdio.h>
#include <strings.h>

#include <moonbright/status.h>

int mb_parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return MB_EINVAL;
    uint64_t v = 0;
    const char *p = s;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return MB_EINVAL;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: break;
    }
    if (shift && (strcasecmp(p, "ib") == 0 || strcasecmp(p, "b") == 0))
        p += (p[0] && (p[0] == 'i' || p[0] == 'I')) ? 2 : 1;
    else if (!shift && strcasecmp(p, "b") == 0)
        p++;
    if (*p != '\0')
        return MB_EINVAL;
    if (shift && v > (UINT64_MAX >> shift))
        return MB_EINVAL;
    *out = v << shift;
    return 0;
}

const char *mb_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    unsigned u = 0;
    double v = (double)bytes;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0 || v == (double)(uint64_t)v)
        snprintf(buf, len, "%.0f %s", v, units[u]);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}
