/* faults.h: fault injection for tests, in debug builds only (MB_DEBUG):
 * $MOONBRIGHT_FAULTS="drop=0.01,dup=0.01,delay=0.01,trunc=0.01,backend=0.01,fds=0.01,seed=N"
 * makes control messages vanish, arrive twice, late (up to 50 ms) or cut
 * short, backend calls (create, export, import, map) fail, and calls that
 * need a new descriptor (create, import, accepting a session) fail as if
 * the process had run out of them (EMFILE), and pidfd_open fail for a
 * killed session (pidfd=1), each with the given probability. Release builds compile the hooks to nothing. */
#ifndef MB_FAULTS_H
#define MB_FAULTS_H

#include <stdbool.h>

enum mb_fault { MB_FAULT_DROP, MB_FAULT_DUP, MB_FAULT_DELAY, MB_FAULT_TRUNC, MB_FAULT_BACKEND,
                MB_FAULT_FDS, MB_FAULT_PIDFD, MB_FAULT_COUNT };

struct mb_backend;
#ifdef MB_DEBUG
/* True when this call should suffer the fault. */
bool mb_fault(enum mb_fault f);
/* Wrap a backend's create/export/import/map with failures, if configured. */
void mb_faults_wrap_backend(struct mb_backend *b);
#else
static inline bool mb_fault(enum mb_fault f) { (void)f; return false; }
static inline void mb_faults_wrap_backend(struct mb_backend *b) { (void)b; }
#endif

#endif
