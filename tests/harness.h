/* harness.h: integration-test plumbing: a real moonbrightd in a private
 * runtime directory, client programs started as separate processes, and
 * mbctl's JSON read back. */
#ifndef MB_TEST_HARNESS_H
#define MB_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "json.h"

struct mbt_daemon {
    pid_t pid;
    char dir[128];
};

/* Start moonbrightd --foreground --backend host in a fresh directory with
 * extra arguments (NULL-terminated); waits until status answers. */
int mbt_daemon_start(struct mbt_daemon *d, const char *const *extra);
/* Daemons still running at exit (a failed test) are killed then. */
/* SIGTERM and wait; returns the daemon's exit status (or -1). */
int mbt_daemon_stop(struct mbt_daemon *d);
bool mbt_daemon_alive(const struct mbt_daemon *d);

/* Start a program with MOONBRIGHT_RUNTIME_DIR set; stdout to a pipe
 * (*out_fd) when out_fd is not NULL, stdin from a pipe (*in_fd, the write
 * end) when in_fd is not NULL, else /dev/null. */
pid_t mbt_spawn(const struct mbt_daemon *d, const char *const *argv, int *out_fd, int *in_fd);
/* Wait for a child; returns its exit code, or 128+signal. */
int mbt_wait(pid_t pid);
/* Run to completion, capturing stdout (and stderr when want_err, else
 * stderr goes to /dev/null) into buf. */
int mbt_run(const struct mbt_daemon *d, const char *const *argv, char *buf, size_t len, bool want_err);
/* Read one line from fd (blocking, up to timeout_ms). */
int mbt_read_line(int fd, char *buf, size_t len, int timeout_ms);

/* mbctl status --json, parsed; NULL when mbctl failed. */
struct json *mbt_status(const struct mbt_daemon *d);

#endif
