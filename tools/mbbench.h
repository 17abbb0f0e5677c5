/* mbbench.h: declarations shared by mbbench's files: common options, timing
 * summaries, the JSON writer, the daemon status probe, worker processes and
 * the libcuda baselines loaded with dlopen. */
#ifndef MB_MBBENCH_H
#define MB_MBBENCH_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Options every subcommand takes. */
struct bench_opts {
    bool json;              /* machine output on stdout */
    bool quick;             /* smoke mode: tiny counts, for CI */
    bool quiet;             /* no progress on stderr */
    const char *runtime_dir;
    int device;
    const char *self;       /* this executable, for worker processes */
};
extern struct bench_opts bench_opt;

/* Long options shared by every subcommand; 0x100.. are theirs. */
enum { OPT_JSON = 0x100, OPT_QUICK, OPT_QUIET, OPT_RUNTIME_DIR, OPT_DEVICE, OPT_FIRST_OWN = 0x120 };
#define BENCH_COMMON_LONGOPTS                                                      \
    { "json", no_argument, 0, OPT_JSON }, { "quick", no_argument, 0, OPT_QUICK },  \
    { "quiet", no_argument, 0, OPT_QUIET },                                        \
    { "runtime-dir", required_argument, 0, OPT_RUNTIME_DIR },                      \
    { "device", required_argument, 0, OPT_DEVICE }
/* Handle a common option: 1 handled, 0 not common, negative on a bad value. */
int bench_common_opt(int c, const char *arg);
#define BENCH_COMMON_HELP                                                                  \
    "  --json              machine-readable output on stdout (progress stays on stderr)\n" \
    "  --quick             smoke mode: small counts (what the CI tests run)\n"             \
    "  --quiet             no progress lines on stderr\n"                                  \
    "  --runtime-dir DIR   the daemon's runtime directory ($MOONBRIGHT_RUNTIME_DIR)\n"     \
    "  --device N          device index ($MOONBRIGHT_DEVICE, default 0)\n"

/* Subcommands. argv[0] is the subcommand name. Return a process exit code. */
int bench_latency(int argc, char **argv);
int bench_grant(int argc, char **argv);
int bench_rpc(int argc, char **argv);
int bench_rpc_worker(int argc, char **argv);
int bench_replay(int argc, char **argv);
int bench_tenants(int argc, char **argv);
int bench_tenants_worker(int argc, char **argv);
int bench_threads(int argc, char **argv);
int bench_trims(int argc, char **argv);
int bench_fdtable(int argc, char **argv);

/* Timing. */
uint64_t bench_now_ns(void);
/* The number after `key` ("VmSize:", "FDSize:") in /proc/self/status, read
 * through status_fd (open on that file; each read is fresh), or opened
 * for the call when status_fd < 0 (that makes a descriptor). -1: none. */
long bench_self_status(int status_fd, const char *key);
struct bench_summary {
    size_t n;
    double mean;            /* ns */
    uint64_t min, p50, p99, max;
};
/* Sorts v in place. n == 0 gives an all-zero summary. */
void bench_summarize(uint64_t *v, size_t n, struct bench_summary *out);

/* Room for one more element in the array *v holding n of *cap elements of
 * elem bytes: the capacity doubles, from `first`. MB_ENOMEM leaves it as it was. */
int bench_reserve(void **v, size_t *cap, size_t n, size_t elem, size_t first);

/* Growable sample vector. */
struct bench_vec { uint64_t *v; size_t n, cap; };
int bench_vec_push(struct bench_vec *b, uint64_t x);
void bench_vec_free(struct bench_vec *b);

/* JSON on a stream: objects and arrays nest; key is NULL inside arrays. */
struct jw {
    FILE *f;
    int depth;
    bool first[32];
};
void jw_init(struct jw *w, FILE *f);
void jw_obj(struct jw *w, const char *key);
void jw_arr(struct jw *w, const char *key);
void jw_end(struct jw *w, char close);   /* '}' or ']' */
void jw_str(struct jw *w, const char *key, const char *v);
void jw_u64(struct jw *w, const char *key, uint64_t v);
void jw_i64(struct jw *w, const char *key, int64_t v);
void jw_dbl(struct jw *w, const char *key, double v);
void jw_bool(struct jw *w, const char *key, bool v);
void jw_null(struct jw *w, const char *key);
void jw_summary(struct jw *w, const char *key, const struct bench_summary *s);
/* "ok" (and "error" when err != 0) of one row. */
void jw_ok(struct jw *w, int err);
/* A note in the "notes" array: "WHAT rows skipped: WHY". */
void jw_skipped(struct jw *w, const char *what, const char *why);
/* "alloc_ns", "free_ns" and "pair_ns" summaries of one row. */
void jw_alloc_free(struct jw *w, const struct bench_summary *alloc, const struct bench_summary *free_,
                   const struct bench_summary *pair);
/* "bench", "date", "host" {...}, "runtime_dir", "device": opens the top object. */
void jw_header(struct jw *w, const char *bench);

/* The daemon's status over its control socket (no session, no fork). */
struct bench_dstatus {
    char backend[16];
    uint64_t frame_bytes, budget_bytes, bytes_granted, bytes_free, requests;
    uint64_t grant_creates;      /* frames grants created on their own path, so far */
    uint64_t reexports;          /* frames exported again to be passed on, so far */
    uint64_t exported_ahead;     /* returned frames the daemon's workers exported again */
    uint64_t made_ahead;         /* fresh frames the daemon's workers made (and exported) */
    uint32_t frames_total, frames_free, frames_granted, sessions;
    uint32_t descriptors;   /* exported descriptors the daemon holds (StatusReply) */
};
struct bench_daemon;
int bench_daemon_open(struct bench_daemon **out);
int bench_daemon_status(struct bench_daemon *d, struct bench_dstatus *out);
void bench_daemon_close(struct bench_daemon *d);
/* Before a baseline: wait (at most timeout_ms) until the daemon holds no
 * free frames (its idle reserve goes back to the driver after reserve_idle),
 * so the baseline has the device's memory. Returns the free bytes left. */
uint64_t bench_daemon_wait_idle(int timeout_ms);

/* Progress on stderr, at most one line a second unless force. */
void bench_progress(bool force, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Raise RLIMIT_NOFILE to the hard limit: imported frames are descriptors. */
void bench_raise_nofile(void);
/* Parse a comma-separated list of sizes ("256,4K,2M"); returns the count or
 * a negative mb_status. */
int bench_parse_sizes(const char *s, uint64_t *out, int max);
/* Start `self WORKER args...` with stdin/stdout as given; returns the pid or -1. */
pid_t bench_spawn(char *const argv[], int keep_fd1, int keep_fd2);
const char *bench_fmt_size(uint64_t bytes, char *buf, size_t len);

/* The CUDA driver baselines, through dlopen("libcuda.so.1"): no link-time
 * dependency, so mbbench runs (and skips these rows) without a GPU. */
typedef unsigned long long bench_cuptr;
struct bench_cuda {
    void *lib;
    int dev;
    void *ctx, *pool;
    int (*cuMemAlloc)(bench_cuptr *p, size_t bytes);
    int (*cuMemFree)(bench_cuptr p);
    int (*cuMemAllocAsync)(bench_cuptr *p, size_t bytes, void *stream);
    int (*cuMemFreeAsync)(bench_cuptr p, void *stream);
    int (*cuStreamSynchronize)(void *stream);
    int (*cuMemPoolGetAttribute)(void *pool, int attr, void *value);
    int (*cuMemPoolSetAttribute)(void *pool, int attr, void *value);
    int (*cuMemPoolTrimTo)(void *pool, size_t keep);
    int (*cuDevicePrimaryCtxRelease)(int dev);
};
enum { BENCH_POOL_RELEASE_THRESHOLD = 4, BENCH_POOL_RESERVED_CURRENT = 5,
       BENCH_POOL_RESERVED_HIGH = 6, BENCH_POOL_USED_CURRENT = 7, BENCH_POOL_USED_HIGH = 8 };
/* Open device `device`'s primary context and default pool (release threshold
 * set to the maximum). On failure why says what was missing. */
int bench_cuda_open(int device, struct bench_cuda **out, char *why, size_t why_len);
void bench_cuda_close(struct bench_cuda *cu);
/* Another libcuda symbol (NULL when missing). */
void *bench_cuda_sym(struct bench_cuda *cu, const char *name);

#endif
