/* host_costs.h: emulated driver costs for the host backend
 * ($MOONBRIGHT_HOST_COSTS; see host_costs.c). */
#ifndef MB_HOST_COSTS_H
#define MB_HOST_COSTS_H

#include "backend.h"

/* Read a costs value into microseconds per call: create, export, import,
 * map (with its access grant), unmap, release. 0 or MB_EINVAL. */
int mb_host_costs_parse(const char *spec, unsigned us[6]);

/* Make b's calls pay the costs of `spec` (MB_EINVAL, logged, when it does
 * not read or differs from what this process applied before). */
int mb_host_costs_apply(mb_backend *b, const char *spec);

#endif
