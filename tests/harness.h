/* harness.h: integration-test plumbing: a real moonbrightd in a private
 * runtime directory, client programs started as separate processes,
 * mbctl's JSON read back, and raw sessions that speak the protocol directly
 * (to send what libmbclient never would, and to see notices). */
#ifndef MB_TEST_HARNESS_H
#define MB_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "json.h"
#include "moonbright.pb-c.h"

struct mbt_daemon {
    pid_t pid;
    char dir[128];
    int device;        /* its --device (mbctl is pointed at it) */
    bool shares_dir;   /* started beside another daemon: its stop leaves the directory */
};

/* Start moonbrightd --foreground --backend host in a fresh directory with
 * extra arguments (NULL-terminated); waits until status answers. */
int mbt_daemon_start(struct mbt_daemon *d, const char *const *extra);
/* The same with extra environment ("NAME=value", NULL-terminated) for the
 * daemon; "WATCHDOG_PID=self" becomes the daemon's own pid, and
 * "MBT_NOFILE=N" is no variable: it sets the daemon's descriptor limit
 * (soft and hard) to N. */
int mbt_daemon_start_env(struct mbt_daemon *d, const char *const *extra, const char *const *env);
/* Start it without waiting for it to answer (the notify test waits for
 * READY=1 instead). */
int mbt_daemon_spawn_env(struct mbt_daemon *d, const char *const *extra, const char *const *env);
/* Start another daemon, for device index `device`, in first's directory
 * (a multi-GPU host's layout); stop it before first. */
int mbt_daemon_start_beside(struct mbt_daemon *d, const struct mbt_daemon *first, int device,
                            const char *const *extra);
/* Wait up to timeout_ms for the daemon to exit by itself; then clean up as
 * mbt_daemon_stop does. Returns its exit status, or -1 if still running. */
int mbt_daemon_wait(struct mbt_daemon *d, int timeout_ms);
/* Daemons still running at exit (a failed test) are killed then. */
/* Start moonbrightd again in d's directory (after it died), with extra
 * arguments; waits until status answers. */
int mbt_daemon_restart(struct mbt_daemon *d, const char *const *extra);
/* SIGTERM and wait; returns the daemon's exit status (or -1). */
int mbt_daemon_stop(struct mbt_daemon *d);
bool mbt_daemon_alive(const struct mbt_daemon *d);

/* Start a program with MOONBRIGHT_RUNTIME_DIR set; stdout to a pipe
 * (*out_fd) when out_fd is not NULL, stdin from a pipe (*in_fd, the write
 * end) when in_fd is not NULL, else /dev/null. */
pid_t mbt_spawn(const struct mbt_daemon *d, const char *const *argv, int *out_fd, int *in_fd);
/* `mbtest_client hold BYTES SEED TENANT`, once it holds its range (it said
 * "alloc: success" and "ready"); -1 otherwise (the client is killed).
 * Only where MB_CLIENT_BIN is defined. */
pid_t mbt_spawn_holder(const struct mbt_daemon *d, const char *bytes, const char *seed,
                       const char *tenant, int *out_fd, int *in_fd);
/* Wait for a child; returns its exit code, or 128+signal. */
int mbt_wait(pid_t pid);
/* Run to completion, capturing stdout (and stderr when want_err, else
 * stderr goes to /dev/null) into buf. */
int mbt_run(const struct mbt_daemon *d, const char *const *argv, char *buf, size_t len, bool want_err);
/* Read one line from fd (blocking, up to timeout_ms). */
int mbt_read_line(int fd, char *buf, size_t len, int timeout_ms);

/* mbctl status --json, parsed; NULL when mbctl failed. */
struct json *mbt_status(const struct mbt_daemon *d);
/* One number of the status (-1 when the daemon did not answer). */
double mbt_status_num(const struct mbt_daemon *d, const char *key);
/* Poll the status until key reads want (up to timeout_ms, every 20 ms);
 * returns the last value seen. */
double mbt_status_wait(const struct mbt_daemon *d, const char *key, double want, int timeout_ms);
/* One number of tenant `name` in mbctl tenants --json (-1 when the daemon
 * did not answer or lists no such tenant). */
double mbt_tenant_num(const struct mbt_daemon *d, const char *name, const char *key);
/* A config file holding text in a fresh temporary path (mode 0644); the
 * caller unlinks it. Aborts when it cannot be written. */
void mbt_write_config(char *path, size_t len, const char *text);
void mbt_sleep_ms(int ms);
/* The number after `key` at the start of a line of /proc/PID/FILE (as
 * "VmRSS:" in status, "Max open files" in limits); -1 when there is none. */
long mbt_proc_number(pid_t pid, const char *file, const char *key);
/* Wait up to ms for cond (an expression, evaluated again every 50 ms);
 * true when it held. */
#define WAIT_FOR(ms, cond)                                        \
    ({                                                            \
        bool ok_ = false;                                         \
        for (int w_ = 0; w_ < (ms) / 50 && !(ok_ = (cond)); w_++) \
            mbt_sleep_ms(50);                                     \
        ok_ || (cond);                                            \
    })
/* mbctl ARGS... --json, parsed (NULL when mbctl failed or printed no JSON);
 * *rc gets mbctl's exit code when rc is not NULL. */
struct json *mbt_ctl_json(const struct mbt_daemon *d, int *rc, const char *const *args);
/* Whether this process can run programs as uid 65534 (setpriv, root). */
bool mbt_can_setpriv(void);

/* A raw session: handle channel, welcome token, hello, then requests. */
struct mbt_session {
    int chan;
    void *zctx, *dealer;
    uint64_t id;                 /* session id from the daemon */
    uint64_t next_id;
    uint32_t frame_ids[1024];    /* frames granted and not returned */
    size_t n_frames;
    uint64_t last_room;          /* GrantReply.room of the latest grant */
};
/* 0 or a negative mb_status (the hello reply's code). */
int mbt_session_open(const struct mbt_daemon *d, const char *tenant, struct mbt_session *s);
void mbt_session_close(struct mbt_session *s);
/* Send req, wait for its reply (notices are skipped); returns the reply's
 * code, or 1 when no reply came. *out (may be NULL) gets the reply. */
int mbt_session_call(struct mbt_session *s, Mb__Request *req, Mb__Reply **out);
/* Grant `bytes`; the frame ids join s->frame_ids and their descriptors are
 * read from the channel and closed. Returns the reply's code. */
int mbt_session_grant(struct mbt_session *s, uint64_t bytes);
/* The same in the frame plan's large frames (Grant.large). */
int mbt_session_grant_large(struct mbt_session *s, uint64_t bytes);
/* A large grant that may take free frames of other sizes (Grant.warm_max_frames);
 * sizes[0..*n_sizes) gets the granted frames' bytes (*n_sizes: room in, count out). */
int mbt_session_grant_warm(struct mbt_session *s, uint64_t bytes, uint32_t warm_max, uint64_t *sizes,
                           size_t *n_sizes);
/* Return frames by id; returns the reply's code. Returned ids leave
 * s->frame_ids. */
int mbt_session_return(struct mbt_session *s, const uint32_t *ids, size_t n);
/* Report cached bytes (Cache); returns the reply's code. */
int mbt_session_cache(struct mbt_session *s, uint64_t bytes);
/* The same, marked as the answer to a RECLAIM notice (Cache.answers_notice). */
int mbt_session_answer(struct mbt_session *s, uint64_t bytes);
/* Wait for a notice; 0 and *kind, *bytes set, or -1 after timeout_ms. */
int mbt_session_notice(struct mbt_session *s, int timeout_ms, int *kind, uint64_t *bytes);

#endif
