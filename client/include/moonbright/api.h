/* moonbright/api.h: MB_API marks the functions libmbclient exports. The
 * library is built with hidden visibility, so everything else in it (the
 * tiers, the wire format, the backends) stays internal. */
#ifndef MOONBRIGHT_API_H
#define MOONBRIGHT_API_H

#if defined(__GNUC__) || defined(__clang__)
#define MB_API __attribute__((visibility("default")))
#else
#define MB_API
#endif

#endif
