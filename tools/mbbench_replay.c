/* mbbench_replay.c: `mbbench replay TRACE`: the LLM KV-cache replay protocol
 * over a request trace (Azure CSV or Mooncake-style JSONL), through
 * MoonBright (realloc, grow in place, vspace pages) and the baselines (malloc
 * on the host backend, cuMemAllocAsync on a GPU); peak live and reserved
 * bytes, latency (mean, p50, p99, max) and the calls that waited on the
 * driver. */
#include <ctype.h>
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <moonbright/mbclient.h>
#include <moonbright/vspace.h>

#include "mbbench.h"
#include "size.h"

/* Grow in place may be missing from an older libmbclient: the strategy is
 * then skipped with a note instead of failing to link or start. */
#pragma weak mb_malloc_growable
#pragma weak mb_grow
#pragma weak mb_malloc_growable_async
#pragma weak mb_grow_async

/* ---- the trace ---- */

struct request {
    double t;               /* arrival, seconds from the first request */
    uint32_t context, generated;
};

static int parse_timestamp(const char *s, double *out)
{
    int Y, M, D, h, m;
    double sec;
    char *end;
    if (sscanf(s, "%d-%d-%d %d:%d:%lf", &Y, &M, &D, &h, &m, &sec) == 6 ||
        sscanf(s, "%d-%d-%dT%d:%d:%lf", &Y, &M, &D, &h, &m, &sec) == 6) {
        struct tm tm = { .tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h, .tm_min = m };
        *out = (double)timegm(&tm) + sec;
        return 0;
    }
    double v = strtod(s, &end);
    if (end == s)
        return MB_EINVAL;
    *out = v;
    return 0;
}

/* The names each field goes by (case-insensitive): the Azure LLM traces'
 * columns, BurstGPT's, Mooncake's JSON keys and the common alternatives. */
static const char *const TS_NAMES[] = { "TIMESTAMP", "arrival_time", "time", NULL };
static const char *const CTX_NAMES[] = { "ContextTokens", "input_length", "Request tokens", "input_tokens",
                                         "prompt_tokens", "context_tokens", NULL };
static const char *const GEN_NAMES[] = { "GeneratedTokens", "output_length", "Response tokens",
                                         "output_tokens", "completion_tokens", "generated_tokens", NULL };

/* Index of name among the comma-separated header fields, or -1. */
static int csv_col(const char *hdr, const char *name)
{
    int i = 0;
    for (const char *p = hdr;; i++) {
        size_t len = strcspn(p, ",\r\n");
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        if (len == strlen(name) && strncasecmp(p, name, len) == 0)
            return i;
        p += strcspn(p, ",\r\n");
        if (*p != ',')
            return -1;
        p++;
    }
}

/* Index of the first of names among the header fields, or -1. */
static int csv_col_any(const char *hdr, const char *const *names)
{
    int i = -1;
    for (; *names && i < 0; names++)
        i = csv_col(hdr, *names);
    return i;
}

/* The number after "key": in a JSON object line, times scale (a quoted date
 * is seconds, unscaled); MB_ENOENT when absent. */
static int json_num(const char *line, const char *key, double scale, double *out)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\"", key);
    const char *p = strcasestr(line, pat);
    if (!p)
        return MB_ENOENT;
    p += strlen(pat);
    while (isspace((unsigned char)*p))
        p++;
    if (*p++ != ':')
        return MB_EINVAL;
    while (isspace((unsigned char)*p))
        p++;
    char *end;
    if (*p == '"') {   /* a quoted timestamp */
        char buf[64];
        size_t len = strcspn(p + 1, "\"");
        if (len >= sizeof(buf))
            return MB_EINVAL;
        memcpy(buf, p + 1, len);
        buf[len] = 0;
        if (strchr(buf, ':'))
            return parse_timestamp(buf, out);
        p++;   /* a quoted number */
    }
    *out = strtod(p, &end) * scale;
    return end == p ? MB_EINVAL : 0;
}

/* The number under the first of names present in a JSON object line. */
static int json_num_any(const char *line, const char *const *names, double scale, double *out)
{
    int rc = MB_ENOENT;
    for (; *names && rc == MB_ENOENT; names++)
        rc = json_num(line, *names, scale, out);
    return rc;
}

static int cmp_req(const void *a, const void *b)
{
    const struct request *x = a, *y = b;
    return x->t < y->t ? -1 : x->t > y->t;
}

/* The next line holding data (blank lines and comments, such as an
 * attribution line, skipped), from its first non-space character; NULL
 * at the end. */
static char *data_line(FILE *f, char **line, size_t *cap, size_t *lineno)
{
    while (getline(line, cap, f) >= 0) {
        ++*lineno;
        char *p = *line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p && *p != '#')
            return p;
    }
    return NULL;
}

static FILE *open_trace(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fprintf(stderr, "mbbench replay: cannot open %s: %s\n", path, strerror(errno));
    return f;
}

/* Read the first max requests (0: all). JSONL timestamps are milliseconds
 * (Mooncake) unless ts_scale says otherwise; CSV timestamps are dates or seconds. */
static int load_trace(const char *path, size_t max, double jsonl_ts_scale, struct request **out,
                      size_t *n_out, const char **format)
{
    FILE *f = open_trace(path);
    if (!f)
        return MB_ENOENT;
    char *line = NULL;
    size_t n = 0, cap = 0, lcap = 0, lineno = 0;
    struct request *v = NULL;
    int cts = -1, cctx = -1, cgen = -1;
    bool jsonl = false, first = true;
    int rc = 0;
    char *p;
    while ((max == 0 || n < max) && (p = data_line(f, &line, &lcap, &lineno))) {
        if (first) {
            first = false;
            jsonl = *p == '{';
            if (!jsonl) {
                cts = csv_col_any(p, TS_NAMES);
                cctx = csv_col_any(p, CTX_NAMES);
                cgen = csv_col_any(p, GEN_NAMES);
                if (cts < 0 || cctx < 0 || cgen < 0) {
                    fprintf(stderr, "mbbench replay: %s:%zu: expected a CSV header with "
                                    "TIMESTAMP,ContextTokens,GeneratedTokens (or another name "
                                    "for each, as mbbench replay --help lists) or JSON lines\n",
                            path, lineno);
                    rc = MB_EINVAL;
                    break;
                }
                continue;
            }
        }
        struct request r = { 0 };
        double ts, ctx, gen;
        if (jsonl) {
            if (json_num_any(p, TS_NAMES, jsonl_ts_scale, &ts) || json_num_any(p, CTX_NAMES, 1, &ctx) ||
                json_num_any(p, GEN_NAMES, 1, &gen)) {
                fprintf(stderr, "mbbench replay: %s:%zu: expected timestamp, input_length, output_length "
                                "(or another name for each, as mbbench replay --help lists)\n",
                        path, lineno);
                rc = MB_EINVAL;
                break;
            }
        } else {
            char *fld[64] = { 0 };
            int nf = 0;
            for (char *s = p; nf < 64;) {
                fld[nf++] = s;
                s += strcspn(s, ",\r\n");
                if (*s != ',') {
                    *s = 0;
                    break;
                }
                *s++ = 0;
            }
            char *e1 = NULL, *e2 = NULL;
            if (cts >= nf || cctx >= nf || cgen >= nf || parse_timestamp(fld[cts], &ts) != 0 ||
                (ctx = strtod(fld[cctx], &e1), e1 == fld[cctx]) ||
                (gen = strtod(fld[cgen], &e2), e2 == fld[cgen])) {
                fprintf(stderr, "mbbench replay: %s:%zu: malformed row\n", path, lineno);
                rc = MB_EINVAL;
                break;
            }
        }
        if (ctx < 0 || gen < 0 || ctx > 1e8 || gen > 1e8) {
            fprintf(stderr, "mbbench replay: %s:%zu: token counts out of range\n", path, lineno);
            rc = MB_EINVAL;
            break;
        }
        r.t = ts;
        r.context = (uint32_t)ctx;
        r.generated = (uint32_t)gen;
        void *nv = v;
        rc = bench_reserve(&nv, &cap, n, sizeof(*v), 4096);
        v = nv;
        if (rc)
            break;
        v[n++] = r;
    }
    free(line);
    fclose(f);
    if (rc == 0 && n == 0) {
        fprintf(stderr, "mbbench replay: %s holds no requests\n", path);
        rc = MB_EINVAL;
    }
    if (rc != 0) {
        free(v);
        return rc;
    }
    qsort(v, n, sizeof(*v), cmp_req);
    double t0 = v[0].t;
    for (size_t i = 0; i < n; i++)
        v[i].t -= t0;
    *out = v;
    *n_out = n;
    *format = jsonl ? "jsonl" : "csv";
    return 0;
}

/* ---- the protocol, as a list of operations every strategy replays ---- */

enum op_type { OP_ALLOC, OP_RESIZE, OP_FREE, OP_STEP_END };
struct op {
    uint32_t type;
    uint32_t req;           /* OP_STEP_END: the step */
    uint64_t bytes;         /* OP_ALLOC, OP_RESIZE: the new size */
};
struct protocol {
    struct op *ops;
    size_t n_ops, cap;
    uint64_t *final_bytes;  /* per request: its largest buffer (grow's reservation) */
    size_t n_req;
    uint32_t steps;
    uint64_t allocs, resizes;
};

static int push_op(struct protocol *p, uint32_t type, uint32_t req, uint64_t bytes)
{
    void *v = p->ops;
    int rc = bench_reserve(&v, &p->cap, p->n_ops, sizeof(*p->ops), 65536);
    p->ops = v;
    if (rc)
        return rc;
    p->ops[p->n_ops++] = (struct op){ type, req, bytes };
    return 0;
}

/* One decode step covers step_s seconds of trace time (20 ms x compression).
 * In each step: requests arriving in it allocate their context (rounded up
 * to blocks); every active request, the new ones included, generates one
 * token and, when that crosses a block boundary, gets the next block's size;
 * requests that generated all their tokens free at the end of the step. */
static int build_protocol(const struct request *rq, size_t n, double step_s, uint64_t bpt,
                          uint32_t block, struct protocol *p)
{
    memset(p, 0, sizeof(*p));
    p->n_req = n;
    p->final_bytes = calloc(n, sizeof(uint64_t));
    uint32_t *active = calloc(n, sizeof(uint32_t));
    uint32_t *tokens = calloc(n, sizeof(uint32_t)), *done = calloc(n, sizeof(uint32_t));
    uint32_t *cap = calloc(n, sizeof(uint32_t));
    int rc = p->final_bytes && active && tokens && done && cap ? 0 : MB_ENOMEM;
    size_t next = 0, n_active = 0;
    for (uint32_t step = 0; rc == 0 && (next < n || n_active > 0); step++) {
        double end = (step + 1) * step_s;
        while (rc == 0 && next < n && rq[next].t < end) {
            uint32_t i = (uint32_t)next++;
            uint32_t ctx = rq[i].context ? rq[i].context : 1;
            cap[i] = (ctx + block - 1) / block * block;
            tokens[i] = rq[i].context;
            uint64_t last = (uint64_t)rq[i].context + rq[i].generated;
            last = last > cap[i] ? last : cap[i];
            p->final_bytes[i] = (last + block - 1) / block * block * bpt;
            rc = push_op(p, OP_ALLOC, i, (uint64_t)cap[i] * bpt);
            p->allocs++;
            active[n_active++] = i;
        }
        for (size_t k = 0; rc == 0 && k < n_active; k++) {
            uint32_t i = active[k];
            if (done[i] >= rq[i].generated)
                continue;
            tokens[i]++;
            done[i]++;
            if (tokens[i] > cap[i]) {
                cap[i] += block;
                rc = push_op(p, OP_RESIZE, i, (uint64_t)cap[i] * bpt);
                p->resizes++;
            }
        }
        for (size_t k = 0; rc == 0 && k < n_active;) {
            uint32_t i = active[k];
            if (done[i] >= rq[i].generated) {
                rc = push_op(p, OP_FREE, i, 0);
                active[k] = active[--n_active];
            } else {
                k++;
            }
        }
        if (rc == 0)
            rc = push_op(p, OP_STEP_END, step, 0);
        p->steps = step + 1;
    }
    free(active);
    free(tokens);
    free(done);
    free(cap);
    return rc;
}

/* ---- tensor lifetimes: a training iteration, replayed ---- */

/* One tensor of a lifetimes trace (`start_op end_op bytes` per line, e.g.
 * ../shared/data/alexnet_train_lifetimes.log): live from op start to op
 * end, inclusive. */
struct tensor {
    uint32_t start, end;
    uint64_t bytes;
};

/* The first data line holds three unsigned integers and nothing else. */
static bool is_lifetimes(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    char *p = data_line(f, &line, &cap, &lineno);
    unsigned long a, b, c;
    int used = 0;
    bool yes = p && sscanf(p, "%lu %lu %lu %n", &a, &b, &c, &used) == 3 && p[used] == 0;
    free(line);
    fclose(f);
    return yes;
}

static int load_lifetimes(const char *path, struct tensor **out, size_t *n_out)
{
    FILE *f = open_trace(path);
    if (!f)
        return MB_ENOENT;
    char *line = NULL;
    size_t n = 0, cap = 0, lcap = 0, lineno = 0;
    struct tensor *v = NULL;
    int rc = 0;
    char *p;
    while ((p = data_line(f, &line, &lcap, &lineno))) {
        unsigned long long a, b, c;
        int used = 0;
        if (sscanf(p, "%llu %llu %llu %n", &a, &b, &c, &used) != 3 || p[used] != 0 || b < a ||
            b > 10000000 || c == 0 || c > (1ull << 40)) {
            fprintf(stderr, "mbbench replay: %s:%zu: expected 'start_op end_op bytes' with start <= end "
                            "<= 10000000 and 0 < bytes <= 1 TiB\n", path, lineno);
            rc = MB_EINVAL;
            break;
        }
        void *nv = v;
        rc = bench_reserve(&nv, &cap, n, sizeof(*v), 256);
        v = nv;
        if (rc)
            break;
        v[n++] = (struct tensor){ (uint32_t)a, (uint32_t)b, c };
    }
    free(line);
    fclose(f);
    if (rc == 0 && n == 0) {
        fprintf(stderr, "mbbench replay: %s holds no tensors\n", path);
        rc = MB_EINVAL;
    }
    if (rc != 0) {
        free(v);
        return rc;
    }
    *out = v;
    *n_out = n;
    return 0;
}

/* The tensors of t[0..n) by op, in trace order within each: by[at[op] ..
 * at[op + 1]) index the tensors whose start (or end, with ends) is op
 * (a counting sort: linear in tensors and ops). */
static int by_op(const struct tensor *t, size_t n, uint32_t ops, bool ends, uint32_t **by_out, size_t **at_out)
{
    size_t *at = calloc((size_t)ops + 2, sizeof(*at));
    uint32_t *by = malloc(n * sizeof(*by));
    if (!at || !by) {
        free(at);
        free(by);
        return MB_ENOMEM;
    }
    for (size_t k = 0; k < n; k++)
        at[(ends ? t[k].end : t[k].start) + 2]++;
    for (uint32_t op = 0; op < ops; op++)
        at[op + 2] += at[op + 1];
    /* at[op + 1] is op's start while its tensors are placed, its end after */
    for (size_t k = 0; k < n; k++)
        by[at[(ends ? t[k].end : t[k].start) + 1]++] = (uint32_t)k;
    *by_out = by;
    *at_out = at;
    return 0;
}

/* iterations of the trace, one after the other: one step per op; in each,
 * the tensors that start there are allocated, then those that end there
 * freed. Request k of iteration i is i * n + k. */
static int build_lifetimes(const struct tensor *t, size_t n, uint32_t iterations, struct protocol *p)
{
    memset(p, 0, sizeof(*p));
    uint32_t ops = 0;
    for (size_t k = 0; k < n; k++)
        ops = t[k].end + 1 > ops ? t[k].end + 1 : ops;
    if ((uint64_t)n * iterations > UINT32_MAX || (uint64_t)ops * iterations > UINT32_MAX)
        return MB_EINVAL;
    uint32_t *starts = NULL, *ends = NULL;
    size_t *s_at = NULL, *e_at = NULL;
    int rc = by_op(t, n, ops, false, &starts, &s_at);
    if (rc == 0)
        rc = by_op(t, n, ops, true, &ends, &e_at);
    p->n_req = n * iterations;
    p->final_bytes = rc == 0 ? calloc(p->n_req, sizeof(uint64_t)) : NULL;
    if (rc == 0 && !p->final_bytes)
        rc = MB_ENOMEM;
    for (uint32_t it = 0; rc == 0 && it < iterations; it++) {
        for (uint32_t op = 0; rc == 0 && op < ops; op++) {
            for (size_t j = s_at[op]; rc == 0 && j < s_at[op + 1]; j++) {
                uint32_t k = starts[j], req = (uint32_t)(it * n + k);
                p->final_bytes[req] = t[k].bytes;
                rc = push_op(p, OP_ALLOC, req, t[k].bytes);
                p->allocs++;
            }
            for (size_t j = e_at[op]; rc == 0 && j < e_at[op + 1]; j++)
                rc = push_op(p, OP_FREE, (uint32_t)(it * n + ends[j]), 0);
            if (rc == 0)
                rc = push_op(p, OP_STEP_END, p->steps, 0);
            p->steps++;
        }
    }
    free(starts);
    free(ends);
    free(s_at);
    free(e_at);
    return rc;
}

/* ---- strategies ---- */

enum strat_kind { S_REALLOC, S_GROW, S_GROW_ASYNC, S_VSPACE, S_MALLOC, S_CUDA, S_COUNT };
static const char *const strat_name[S_COUNT] = { "realloc", "grow", "grow_async", "vspace",
                                                 "malloc", "cudaMallocAsync" };
static const char *const strat_what[S_COUNT] = {
    "mb_malloc new + mb_free old",
    "mb_malloc_growable(max = final size) + mb_grow",
    "mb_malloc_growable_async + mb_grow_async on the legacy default stream (mappings past the "
    "tail are the mapper thread's, the stream waits for them)",
    "mb_vspace_create(max = final size) + mb_vspace_map_async of the pages a resize adds (host time of the call)",
    "libc malloc new + free old (host reference, untouched)",
    "cuMemAllocAsync/cuMemFreeAsync, default pool, release threshold max",
};

/* MoonBright's strategies, and those of them that grow in place. */
static bool is_mb(enum strat_kind k)
{
    return k == S_REALLOC || k == S_GROW || k == S_GROW_ASYNC || k == S_VSPACE;
}
static bool is_grow(enum strat_kind k) { return k == S_GROW || k == S_GROW_ASYNC; }

struct series {
    uint32_t *step;
    uint64_t *live, *reserved, *daemon;
    size_t n;
};

struct strat_result {
    enum strat_kind kind;
    bool ran;
    int err;                    /* what stopped it, 0 if it ran to the end */
    char note[200];
    uint32_t failed_step;
    uint64_t peak_live, peak_reserved, peak_daemon, peak_daemon_total;
    uint32_t peak_daemon_frames; /* frames (handles) granted, step-end samples */
    uint32_t peak_daemon_fds;    /* exported descriptors the daemon holds, step-end samples */
    uint64_t n_alloc, n_free;
    bool waits_known;           /* driver_waits means something for this strategy */
    uint64_t driver_waits;      /* allocations and resizes that waited on the driver */
    uint64_t grow_queued;       /* MoonBright: growable calls that left their mapping to the
                                 * mapper thread (grow_async) */
    uint64_t close_passes;      /* MoonBright: growable allocations that passed over a
                                 * freed range holding too much (mb_stats grow_close_passes) */
    uint64_t daemon_requests;   /* MoonBright: round trips to the daemon */
    bool creates_known;
    uint64_t grant_creates;     /* MoonBright: frames the daemon created on grant paths meanwhile */
    uint64_t reexports;         /* MoonBright: frames it exported again to pass them on */
    uint64_t exported_ahead;    /* MoonBright: returned frames its workers exported again */
    uint64_t made_ahead;        /* MoonBright: fresh frames its workers made and exported */
    mb_client_stats at_peak;    /* MoonBright: the client's figures when reserved peaked */
    mb_client_stats delta;      /* MoonBright: the heap's counters over the run */
    struct bench_summary alloc, free;
    double background_busy_s;   /* the client's background thread at work (mb_stats) */
    double daemon_wait_s, import_s;   /* waiting for the daemon's replies, importing (all threads) */
    uint64_t first_alloc_ns;     /* the strategy's first allocation (cold caches) */
    uint64_t prepare_ns;         /* vspace: mb_vspace_prepare before the replay (not timed with it) */
    size_t prepared_pages;       /* vspace: the pages it readied (0: --cold) */
    uint64_t alloc_max_after_first_ns;  /* the slowest of all the others */
    double alloc_total_s, free_total_s, wall_s;
    struct series s;
};

struct replay_ctx {
    enum strat_kind kind;
    mb_client *c;
    struct bench_cuda *cu;
    struct bench_daemon *d;
    void **ptr;
    uint64_t *bytes;
    mb_client_stats st;         /* MoonBright: the figures reserved_now last read */
};

static uint64_t reserved_now(struct replay_ctx *x)
{
    switch (x->kind) {
    case S_REALLOC:
    case S_GROW:
    case S_GROW_ASYNC:
    case S_VSPACE:
        return mb_stats(x->c, &x->st) == 0 ? x->st.bytes_granted : 0;
    case S_MALLOC: {
        struct mallinfo2 mi = mallinfo2();
        return mi.arena + mi.hblkhd;   /* heap plus mmapped chunks: what malloc holds from the OS */
    }
    case S_CUDA: {
        uint64_t v = 0;
        x->cu->cuMemPoolGetAttribute(x->cu->pool, BENCH_POOL_RESERVED_CURRENT, &v);
        return v;
    }
    default: return 0;
    }
}

/* Whether the reserved bytes grew past *before (then updated): the call
 * just timed waited on the driver or the daemon. */
static bool reserved_grew(struct replay_ctx *x, uint64_t *before)
{
    uint64_t now = reserved_now(x);
    bool grew = now > *before;
    *before = now;
    return grew;
}

/* What each strategy counts as a wait on the driver. */
static const char *const waits_what[S_COUNT] = {
    "allocations during which the process's granted bytes grew (a daemon grant, import and map)",
    "mb_malloc_growable and mb_grow calls that mapped before returning (mb_stats grow_waits)",
    "calls that mapped before returning (grow_waits; those that left it to the mapper are "
    "grow_queued)",
    "maps that found too few free pages and mapped an extent first (mb_stats vspace_refill_waits)",
    "allocations during which malloc's arena grew (brk or mmap)",
    "allocations during which the pool's reserved memory grew (cuMemCreate and map in the driver)",
};

/* vspace pages: the largest power of two from 64 KiB to 2 MiB that is at
 * most one block (16 tokens of 128 KiB: 2 MiB) and divides the daemon's
 * unit; --vspace-page overrides. A block need not be whole pages: a resize
 * maps the pages its new size reaches past the old one, maybe none. */
static uint64_t g_vpage = (uint64_t)2 << 20;
static size_t vpages(uint64_t bytes) { return (size_t)((bytes + g_vpage - 1) / g_vpage); }

static uint64_t pick_vspace_page(uint64_t block_bytes, uint64_t frame_bytes)
{
    uint64_t page = MB_VSPACE_MAX_PAGE;
    while (page > MB_VSPACE_MIN_PAGE && (page > block_bytes || (frame_bytes && frame_bytes % page)))
        page >>= 1;
    return page;
}

static int s_alloc(struct replay_ctx *x, uint32_t req, uint64_t bytes, uint64_t max, void **p)
{
    bench_cuptr d = 0;
    switch (x->kind) {
    case S_VSPACE: {
        mb_vspace *v;
        int r = mb_vspace_create(x->c, vpages(max) * g_vpage, g_vpage, &v);
        if (r == 0 && (r = mb_vspace_map_async(v, 0, vpages(bytes), NULL)) != 0)
            mb_vspace_destroy(v);
        *p = r == 0 ? v : NULL;
        return r;
    }
    case S_REALLOC: return mb_malloc(x->c, bytes, p);
    case S_GROW: return mb_malloc_growable(x->c, bytes, max, p);
    case S_GROW_ASYNC: return mb_malloc_growable_async(x->c, bytes, max, NULL, p);
    case S_MALLOC:
        *p = malloc(bytes);
        return *p ? 0 : MB_ENOMEM;
    case S_CUDA: {
        int r = x->cu->cuMemAllocAsync(&d, bytes, NULL);
        *p = (void *)(uintptr_t)d;
        return r == 2 ? MB_ENOMEM : r ? MB_EBACKEND : 0;
    }
    default: return MB_EINVAL;
    }
}

static int s_free(struct replay_ctx *x, void *p)
{
    switch (x->kind) {
    case S_REALLOC:
    case S_GROW:
    case S_GROW_ASYNC: return mb_free(x->c, p);
    case S_VSPACE: mb_vspace_destroy(p); return 0;
    case S_MALLOC: free(p); return 0;
    case S_CUDA: return x->cu->cuMemFreeAsync((bench_cuptr)(uintptr_t)p, NULL) ? MB_EBACKEND : 0;
    default: return MB_EINVAL;
    }
}

static int series_init(struct series *s, size_t n)
{
    s->step = calloc(n, sizeof(*s->step));
    s->live = calloc(n, sizeof(*s->live));
    s->reserved = calloc(n, sizeof(*s->reserved));
    s->daemon = calloc(n, sizeof(*s->daemon));
    s->n = 0;
    return s->step && s->live && s->reserved && s->daemon ? 0 : MB_ENOMEM;
}

static void series_free(struct series *s)
{
    free(s->step);
    free(s->live);
    free(s->reserved);
    free(s->daemon);
    memset(s, 0, sizeof(*s));
}

struct replay_cfg {
    const struct protocol *p;
    uint32_t bucket;            /* steps per series point */
    uint32_t daemon_every;      /* steps between daemon samples */
    uint64_t slow_ns;           /* report operations slower than this on stderr (0: none) */
    uint64_t pace_ns;           /* a decode step lasts at least this long on the wall clock (0: none) */
    bool cold;                  /* vspace: no mb_vspace_prepare first */
};

/* --slow-us: one line on stderr for an operation slower than the limit,
 * with what it waited on (MoonBright's counters before and after it). */
static void report_slow(const struct replay_ctx *x, const struct replay_cfg *cfg, const char *what,
                        uint64_t bytes, uint64_t ns, const mb_client_stats *a)
{
    mb_client_stats b;
    if (!cfg->slow_ns || ns <= cfg->slow_ns || !x->c || mb_stats(x->c, &b) != 0)
        return;
    fprintf(stderr, "mbbench replay: %s: %s of %llu MiB took %.1f us: %llu pool refill waits, "
                    "%llu grow waits, %llu daemon round trips (%llu us), %llu handles imported "
                    "(%llu us)\n",
            strat_name[x->kind], what, (unsigned long long)(bytes >> 20), ns / 1e3,
            (unsigned long long)(b.vspace_refill_waits - a->vspace_refill_waits),
            (unsigned long long)(b.grow_waits - a->grow_waits),
            (unsigned long long)(b.daemon_requests - a->daemon_requests),
            (unsigned long long)(b.daemon_wait_us - a->daemon_wait_us),
            (unsigned long long)(b.frames_imported - a->frames_imported),
            (unsigned long long)(b.import_us - a->import_us));
}

static int run_strategy(struct replay_ctx *x, const struct replay_cfg *cfg, struct strat_result *r)
{
    const struct protocol *p = cfg->p;
    struct bench_vec va = { 0 }, vf = { 0 };
    int rc = series_init(&r->s, p->steps / cfg->bucket + 2);
    uint64_t live = 0, step_live = 0, step_res = 0, step_daemon = 0;
    uint64_t t_start = bench_now_ns(), t_step = t_start;
    struct bench_dstatus ds, ds0;   /* ds0: the daemon's counters before the run */
    mb_client_stats st0 = { 0 }, st1 = { 0 };
    bool mb = is_mb(x->kind);
    bool creates_known = mb && x->d && bench_daemon_status(x->d, &ds0) == 0;
    if (mb)
        mb_stats(x->c, &st0);
    /* Realloc, malloc, cudaMallocAsync: an allocation during which the
     * reserved bytes grew waited on the driver (or the daemon). */
    bool by_reserved = x->kind == S_REALLOC || x->kind == S_MALLOC || x->kind == S_CUDA;
    uint64_t res_before = by_reserved ? reserved_now(x) : 0;
    bool slow = mb && cfg->slow_ns;
    mb_client_stats st_op;
    for (size_t i = 0; rc == 0 && i < p->n_ops; i++) {
        const struct op *o = &p->ops[i];
        uint64_t t0, t1;
        void *np;
        switch (o->type) {
        case OP_ALLOC:
            if (slow)
                mb_stats(x->c, &st_op);
            t0 = bench_now_ns();
            rc = s_alloc(x, o->req, o->bytes, p->final_bytes[o->req], &np);
            t1 = bench_now_ns();
            if (rc != 0)
                break;
            if (slow)
                report_slow(x, cfg, "allocation", o->bytes, t1 - t0, &st_op);
            bench_vec_push(&va, t1 - t0);
            if (by_reserved)
                r->driver_waits += reserved_grew(x, &res_before);
            x->ptr[o->req] = np;
            x->bytes[o->req] = o->bytes;
            live += o->bytes;
            break;
        case OP_RESIZE:
            if (is_grow(x->kind) || x->kind == S_VSPACE) {
                if (slow)
                    mb_stats(x->c, &st_op);
                t0 = bench_now_ns();
                if (x->kind == S_GROW)
                    rc = mb_grow(x->c, x->ptr[o->req], o->bytes);
                else if (x->kind == S_GROW_ASYNC)
                    rc = mb_grow_async(x->c, x->ptr[o->req], o->bytes, NULL);
                else
                    rc = mb_vspace_map_async(x->ptr[o->req], vpages(x->bytes[o->req]),
                                             vpages(o->bytes) - vpages(x->bytes[o->req]), NULL);
                t1 = bench_now_ns();
                if (slow && rc == 0)
                    report_slow(x, cfg, "resize", o->bytes, t1 - t0, &st_op);
                if (rc != 0)
                    break;
                bench_vec_push(&va, t1 - t0);
                live += o->bytes - x->bytes[o->req];
                x->bytes[o->req] = o->bytes;
                break;
            }
            /* The realloc pattern: the larger buffer first, then the old one goes. */
            if (slow)
                mb_stats(x->c, &st_op);
            t0 = bench_now_ns();
            rc = s_alloc(x, o->req, o->bytes, o->bytes, &np);
            t1 = bench_now_ns();
            if (rc != 0)
                break;
            if (slow)
                report_slow(x, cfg, "larger buffer", o->bytes, t1 - t0, &st_op);
            bench_vec_push(&va, t1 - t0);
            if (by_reserved)
                r->driver_waits += reserved_grew(x, &res_before);
            live += o->bytes;
            step_live = live > step_live ? live : step_live;
            if (live > r->peak_live)
                r->peak_live = live;
            uint64_t res = reserved_now(x);
            step_res = res > step_res ? res : step_res;
            if (res > r->peak_reserved) {
                r->peak_reserved = res;
                r->at_peak = x->st;
            }
            t0 = bench_now_ns();
            rc = s_free(x, x->ptr[o->req]);
            t1 = bench_now_ns();
            bench_vec_push(&vf, t1 - t0);
            if (by_reserved)
                res_before = reserved_now(x);
            live -= x->bytes[o->req];
            x->ptr[o->req] = np;
            x->bytes[o->req] = o->bytes;
            break;
        case OP_FREE:
            t0 = bench_now_ns();
            rc = s_free(x, x->ptr[o->req]);
            t1 = bench_now_ns();
            bench_vec_push(&vf, t1 - t0);
            if (by_reserved)
                res_before = reserved_now(x);
            live -= x->bytes[o->req];
            x->ptr[o->req] = NULL;
            x->bytes[o->req] = 0;
            break;
        case OP_STEP_END: {
            uint32_t step = o->req;
            /* Steps without operations still hold memory: sample them too. */
            uint64_t res_end = reserved_now(x);
            step_res = res_end > step_res ? res_end : step_res;
            step_live = live > step_live ? live : step_live;
            if (x->d && step % cfg->daemon_every == 0 && bench_daemon_status(x->d, &ds) == 0) {
                /* Sampled after the step's frees; the client-side peak is exact. */
                step_daemon = ds.bytes_granted > step_daemon ? ds.bytes_granted : step_daemon;
                if (ds.frames_granted > r->peak_daemon_frames)
                    r->peak_daemon_frames = ds.frames_granted;
                if (ds.descriptors > r->peak_daemon_fds)
                    r->peak_daemon_fds = ds.descriptors;
                uint64_t total = ds.bytes_granted + ds.bytes_free;   /* frames of every order */
                r->peak_daemon_total = total > r->peak_daemon_total ? total : r->peak_daemon_total;
            }
            if (step_daemon > r->peak_daemon)
                r->peak_daemon = step_daemon;
            if ((step + 1) % cfg->bucket == 0 || step + 1 == p->steps) {
                struct series *s = &r->s;
                s->step[s->n] = step;
                s->live[s->n] = step_live;
                s->reserved[s->n] = step_res;
                s->daemon[s->n] = step_daemon;
                s->n++;
                step_live = step_res = step_daemon = 0;
            }
            bench_progress(false, "replay %s: step %u of %u, %.2f GiB live", strat_name[x->kind],
                           step + 1, p->steps, live / 1073741824.0);
            if (cfg->pace_ns) {
                /* --pace-us: the rest of the step passes idle, as between a
                 * server's decode steps; background threads work meanwhile. */
                t_step += cfg->pace_ns;
                uint64_t now = bench_now_ns();
                if (now < t_step) {
                    struct timespec ts = { (time_t)((t_step - now) / 1000000000u),
                                           (long)((t_step - now) % 1000000000u) };
                    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                        ;
                } else {
                    t_step = now;   /* the step ran over: the next one starts now */
                }
            }
            continue;
        }
        }
        if (rc != 0) {
            r->failed_step = 0;
            for (size_t k = i; k < p->n_ops; k++)
                if (p->ops[k].type == OP_STEP_END) {
                    r->failed_step = p->ops[k].req;
                    break;
                }
            break;
        }
        step_live = live > step_live ? live : step_live;
        if (live > r->peak_live)
            r->peak_live = live;
        uint64_t res = reserved_now(x);
        step_res = res > step_res ? res : step_res;
        if (res > r->peak_reserved) {
            r->peak_reserved = res;
            r->at_peak = x->st;
        }
    }
    if (x->kind == S_CUDA) {
        uint64_t high = 0;
        x->cu->cuStreamSynchronize(NULL);
        if (x->cu->cuMemPoolGetAttribute(x->cu->pool, BENCH_POOL_RESERVED_HIGH, &high) == 0 &&
            high > r->peak_reserved)
            r->peak_reserved = high;
    }
    r->wall_s = (bench_now_ns() - t_start) / 1e9;
    r->err = rc;
    r->waits_known = true;
    if (creates_known && bench_daemon_status(x->d, &ds) == 0) {
        r->creates_known = true;
        r->grant_creates = ds.grant_creates - ds0.grant_creates;
        r->reexports = ds.reexports - ds0.reexports;
        r->exported_ahead = ds.exported_ahead - ds0.exported_ahead;
        r->made_ahead = ds.made_ahead - ds0.made_ahead;
    }
    if (mb && mb_stats(x->c, &st1) == 0) {
        r->daemon_requests = st1.daemon_requests - st0.daemon_requests;
        r->delta.heap_hits = st1.heap_hits - st0.heap_hits;
        r->delta.heap_grants = st1.heap_grants - st0.heap_grants;
        r->delta.stitches = st1.stitches - st0.stitches;
        r->delta.heap_punches = st1.heap_punches - st0.heap_punches;
        r->delta.heap_extends = st1.heap_extends - st0.heap_extends;
        r->delta.heap_fills = st1.heap_fills - st0.heap_fills;
        r->delta.unmaps = st1.unmaps - st0.unmaps;
        r->background_busy_s = (st1.background_busy_us - st0.background_busy_us) / 1e6;
        r->daemon_wait_s = (st1.daemon_wait_us - st0.daemon_wait_us) / 1e6;
        r->import_s = (st1.import_us - st0.import_us) / 1e6;
        if (is_grow(x->kind))
            r->driver_waits = st1.grow_waits - st0.grow_waits;
        else if (x->kind == S_VSPACE)
            r->driver_waits = st1.vspace_refill_waits - st0.vspace_refill_waits;
        r->grow_queued = st1.grow_queued - st0.grow_queued;
        r->close_passes = st1.grow_close_passes - st0.grow_close_passes;
    }
    r->n_alloc = va.n;
    r->n_free = vf.n;
    double sa = 0, sf = 0;
    for (size_t i = 0; i < va.n; i++)
        sa += va.v[i];
    for (size_t i = 0; i < vf.n; i++)
        sf += vf.v[i];
    r->alloc_total_s = sa / 1e9;
    r->free_total_s = sf / 1e9;
    r->first_alloc_ns = va.n ? va.v[0] : 0;   /* (call order, before the sort) */
    for (size_t i = 1; i < va.n; i++)
        if (va.v[i] > r->alloc_max_after_first_ns)
            r->alloc_max_after_first_ns = va.v[i];
    bench_summarize(va.v, va.n, &r->alloc);
    bench_summarize(vf.v, vf.n, &r->free);
    bench_vec_free(&va);
    bench_vec_free(&vf);
    /* Whatever is still live (a failed run) goes back. */
    for (size_t i = 0; i < p->n_req; i++)
        if (x->ptr[i]) {
            s_free(x, x->ptr[i]);
            x->ptr[i] = NULL;
            x->bytes[i] = 0;
        }
    return rc;
}

static int run_one(enum strat_kind k, const struct replay_cfg *cfg, struct strat_result *r)
{
    memset(r, 0, sizeof(*r));
    r->kind = k;
    struct replay_ctx x = { .kind = k };
    x.ptr = calloc(cfg->p->n_req, sizeof(*x.ptr));
    x.bytes = calloc(cfg->p->n_req, sizeof(*x.bytes));
    if (!x.ptr || !x.bytes) {
        free(x.ptr);
        free(x.bytes);
        return MB_ENOMEM;
    }
    int rc = 0;
    if (is_mb(k)) {
        if (k == S_GROW && (!mb_malloc_growable || !mb_grow)) {
            snprintf(r->note, sizeof(r->note), "skipped: this libmbclient has no mb_malloc_growable/mb_grow");
            rc = 1;
        } else if (k == S_GROW_ASYNC && (!mb_malloc_growable_async || !mb_grow_async)) {
            snprintf(r->note, sizeof(r->note),
                     "skipped: this libmbclient has no mb_malloc_growable_async/mb_grow_async");
            rc = 1;
        } else if ((rc = mb_open(&x.c, "mbbench-replay")) != 0) {
            snprintf(r->note, sizeof(r->note), "failed to open a session: %s", mb_strerror(rc));
        } else if (bench_daemon_open(&x.d) != 0) {
            x.d = NULL;
        }
        /* A KV-cache server readies its page pool at start: as many pages
         * as the first request takes, before the replay's clock runs. */
        for (size_t i = 0; rc == 0 && k == S_VSPACE && !cfg->cold && i < cfg->p->n_ops; i++) {
            if (cfg->p->ops[i].type != OP_ALLOC)
                continue;
            r->prepared_pages = vpages(cfg->p->ops[i].bytes);
            uint64_t t0 = bench_now_ns();
            if ((rc = mb_vspace_prepare(x.c, g_vpage, r->prepared_pages)) != 0)
                snprintf(r->note, sizeof(r->note), "failed to prepare %zu pages: %s", r->prepared_pages,
                         mb_strerror(rc));
            r->prepare_ns = bench_now_ns() - t0;
            break;
        }
    } else if (k == S_CUDA) {
        char why[160];
        if (bench_cuda_open(bench_opt.device, &x.cu, why, sizeof(why)) != 0) {
            snprintf(r->note, sizeof(r->note), "skipped: %s", why);
            rc = 1;
        } else {
            uint64_t zero = 0;
            x.cu->cuMemPoolTrimTo(x.cu->pool, 0);
            x.cu->cuMemPoolSetAttribute(x.cu->pool, BENCH_POOL_RESERVED_HIGH, &zero);
            x.cu->cuMemPoolSetAttribute(x.cu->pool, BENCH_POOL_USED_HIGH, &zero);
        }
    } else if (k == S_MALLOC) {
        malloc_trim(0);
    }
    if (rc == 0) {
        r->ran = true;
        bench_progress(true, "replay %s: %zu operations over %u steps", strat_name[k], cfg->p->n_ops,
                       cfg->p->steps);
        rc = run_strategy(&x, cfg, r);
        if (rc != 0)
            snprintf(r->note, sizeof(r->note), "stopped at step %u: %s", r->failed_step, mb_strerror(rc));
    }
    bench_daemon_close(x.d);
    mb_close(x.c);
    bench_cuda_close(x.cu);
    if (k == S_MALLOC)
        malloc_trim(0);
    free(x.ptr);
    free(x.bytes);
    return rc;
}

/* The names TS_NAMES, CTX_NAMES and GEN_NAMES take, for the usage text:
 * each list's names by commas, the lists by semicolons, lines wrapped at
 * 96 columns under the options' descriptions. */
static void usage_names(FILE *f)
{
    const char *const *lists[] = { TS_NAMES, CTX_NAMES, GEN_NAMES };
    const int indent = 22, width = 96;
    int col = fprintf(f, "%*s", indent, "");
    for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++)
        for (const char *const *n = lists[l]; *n; n++) {
            bool quoted = strchr(*n, ' ') != NULL, last = !n[1] && l + 1 == sizeof(lists) / sizeof(lists[0]);
            const char *sep = last ? "" : n[1] ? "," : ";";
            int len = (int)strlen(*n) + 2 * quoted + (int)strlen(sep);
            if (col > indent && col + 1 + len > width)
                col = fprintf(f, "\n%*s", indent, "") - 1;
            else if (col > indent)
                col += fprintf(f, " ");
            col += fprintf(f, quoted ? "'%s'%s" : "%s%s", *n, sep);
        }
    fprintf(f, "\n");
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mbbench replay TRACE [options]\n"
               "  TRACE               Azure CSV (TIMESTAMP,ContextTokens,GeneratedTokens) or JSON lines\n"
               "                      (timestamp in ms, input_length, output_length): a KV cache per\n"
               "                      request; or tensor lifetimes (start_op end_op bytes per line, as\n"
               "                      in alexnet_train_lifetimes.log): a training iteration, repeated.\n"
               "                      Names taken for the fields (CSV columns or JSON keys, any case;\n"
               "                      BurstGPT's are 'Request tokens' and 'Response tokens'):\n");
    usage_names(f);
    fprintf(f, "  --requests N        the first N requests (default 3000; 0 = all; --quick 40)\n"
               "  --iterations N      lifetimes traces: iterations replayed (default 50; --quick 3)\n"
               "  --compression F     trace time per decode step = 20 ms x F (default 8)\n"
               "  --step-ms MS        decode step (default 20)\n"
               "  --token-bytes SIZE  KV bytes per token (default 128K)\n"
               "  --block-tokens N    tokens per KV block (default 16)\n"
               "  --strategies LIST   realloc,grow,grow_async,vspace,malloc,cudaMallocAsync\n"
               "                      (default: realloc, grow, vspace, and malloc on the host\n"
               "                      backend or grow_async and cudaMallocAsync with a GPU;\n"
               "                      lifetimes traces: no grow, grow_async, vspace)\n"
               "  --jsonl-ts-unit U   s or ms for JSONL timestamps (default ms)\n"
               "  --daemon-every N    sample the daemon's status every N steps (default 1)\n"
               "  --points N          at most N points in the --json memory series (default 2000)\n"
               "  --vspace-page SIZE  vspace page size, a power of two from 64K to 2M (default: the\n"
               "                      largest that is at most one block and divides the frame unit)\n"
               "  --slow-us N         MoonBright strategies: report each allocation or resize slower\n"
               "                      than N us on stderr, with the waits and round trips it made\n"
               "  --pace-us N         each decode step lasts at least N us on the wall clock: what\n"
               "                      is left of it passes idle, as between a server's decode\n"
               "                      steps (default 0: steps back to back; latencies never\n"
               "                      include the idle time, total_s does)\n"
               "  --cold              vspace: no mb_vspace_prepare of the first request's pages\n"
               "                      before the replay (by default it runs, untimed, as a server\n"
               "                      would at start; its time is in the JSON's prepare_ns)\n"
               BENCH_COMMON_HELP);
}

static int parse_strategies(const char *s, bool *on)
{
    memset(on, 0, S_COUNT * sizeof(*on));
    while (*s) {
        size_t len = strcspn(s, ",");
        int k = -1;
        for (int i = 0; i < S_COUNT; i++)
            if (strlen(strat_name[i]) == len && strncasecmp(s, strat_name[i], len) == 0)
                k = i;
        if (k < 0 && len == 4 && strncasecmp(s, "cuda", 4) == 0)
            k = S_CUDA;
        if (k < 0)
            return MB_EINVAL;
        on[k] = true;
        s += len + (s[len] == ',');
    }
    return 0;
}

static void print_json(const char *trace, const char *format, size_t nreq, uint32_t iterations,
                       double comp, double step_ms, uint64_t pace_us,
                       uint64_t bpt, uint32_t block, const struct protocol *p, uint64_t frame_bytes,
                       const char *backend, const struct strat_result *res, int nres)
{
    struct jw w;
    jw_init(&w, stdout);
    jw_header(&w, "replay");
    jw_str(&w, "backend", backend);
    jw_u64(&w, "frame_bytes", frame_bytes);
    jw_str(&w, "trace", trace);
    jw_str(&w, "format", format);
    jw_u64(&w, "requests", nreq);     /* lifetimes: tensors per iteration */
    jw_u64(&w, "iterations", iterations);   /* lifetimes traces; 0 otherwise */
    jw_dbl(&w, "compression", comp);
    jw_dbl(&w, "step_ms", step_ms);
    jw_dbl(&w, "trace_s_per_step", step_ms * comp / 1000.0);
    jw_u64(&w, "pace_us", pace_us);
    jw_u64(&w, "bytes_per_token", bpt);
    jw_u64(&w, "block_tokens", block);
    jw_u64(&w, "steps", p->steps);
    jw_u64(&w, "allocations", p->allocs);
    jw_u64(&w, "resizes", p->resizes);
    jw_str(&w, "unit", "ns");
    jw_arr(&w, "strategies");
    for (int i = 0; i < nres; i++) {
        const struct strat_result *r = &res[i];
        bool mb = is_mb(r->kind);
        jw_obj(&w, NULL);
        jw_str(&w, "strategy", strat_name[r->kind]);
        jw_str(&w, "source", "mbbench");
        jw_str(&w, "what", strat_what[r->kind]);
        jw_bool(&w, "ran", r->ran);
        jw_bool(&w, "ok", r->ran && r->err == 0);
        jw_str(&w, "note", r->note);
        jw_u64(&w, "peak_live_bytes", r->peak_live);
        jw_u64(&w, "peak_reserved_bytes", r->peak_reserved);
        jw_dbl(&w, "reserved_over_live", r->peak_live ? (double)r->peak_reserved / r->peak_live : 0);
        if (mb) {
            jw_u64(&w, "peak_daemon_granted_bytes", r->peak_daemon);
            jw_dbl(&w, "daemon_over_live", r->peak_live ? (double)r->peak_daemon / r->peak_live : 0);
            jw_u64(&w, "peak_daemon_created_bytes", r->peak_daemon_total);
            jw_u64(&w, "peak_daemon_frames", r->peak_daemon_frames);
            jw_u64(&w, "peak_daemon_descriptors", r->peak_daemon_fds);
        } else {
            jw_null(&w, "peak_daemon_frames");
            jw_null(&w, "peak_daemon_descriptors");
            jw_null(&w, "peak_daemon_granted_bytes");
            jw_null(&w, "daemon_over_live");
            jw_null(&w, "peak_daemon_created_bytes");
        }
        jw_u64(&w, "allocations", r->n_alloc);
        jw_u64(&w, "frees", r->n_free);
        if (r->ran && r->waits_known)
            jw_u64(&w, "driver_waits", r->driver_waits);
        else
            jw_null(&w, "driver_waits");
        jw_str(&w, "driver_waits_what", waits_what[r->kind]);
        if (mb)
            jw_u64(&w, "grow_queued", r->grow_queued);
        else
            jw_null(&w, "grow_queued");
        if (mb)
            jw_u64(&w, "close_passes", r->close_passes);
        else
            jw_null(&w, "close_passes");
        if (mb)
            jw_u64(&w, "daemon_requests", r->daemon_requests);
        else
            jw_null(&w, "daemon_requests");
        if (r->creates_known) {
            jw_u64(&w, "daemon_grant_creates", r->grant_creates);
            jw_u64(&w, "daemon_reexports", r->reexports);
            jw_u64(&w, "daemon_exported_ahead", r->exported_ahead);
            jw_u64(&w, "daemon_made_ahead", r->made_ahead);
        } else {
            jw_null(&w, "daemon_grant_creates");
            jw_null(&w, "daemon_reexports");
            jw_null(&w, "daemon_exported_ahead");
            jw_null(&w, "daemon_made_ahead");
        }
        if (mb) {
            /* Where the reserved bytes were when they peaked. */
            const mb_client_stats *k = &r->at_peak;
            jw_obj(&w, "at_peak");
            jw_u64(&w, "live", k->bytes_live);
            jw_u64(&w, "mapped", k->bytes_mapped);
            jw_u64(&w, "cached", k->bytes_cached);
            jw_u64(&w, "idle", k->bytes_idle);
            jw_u64(&w, "grow_ahead", k->grow_mapped_ahead);
            jw_u64(&w, "vspace_free", k->vspace_free_bytes);
            jw_u64(&w, "heap_live", k->pool_live);
            jw_u64(&w, "heap_mapped", k->pool_mapped);
            jw_end(&w, '}');
            /* The heap's counters over the run (mb_stats). */
            k = &r->delta;
            jw_obj(&w, "heap");
            jw_u64(&w, "hits", k->heap_hits);
            jw_u64(&w, "grants", k->heap_grants);
            jw_u64(&w, "stitches", k->stitches);
            jw_u64(&w, "punched_frames", k->heap_punches);
            jw_u64(&w, "extends", k->heap_extends);
            jw_u64(&w, "fills", k->heap_fills);
            jw_u64(&w, "unmaps", k->unmaps);
            jw_end(&w, '}');
        }
        if (r->kind == S_VSPACE) {
            jw_u64(&w, "vspace_page_bytes", g_vpage);
            jw_u64(&w, "prepared_pages", r->prepared_pages);
            jw_u64(&w, "prepare_ns", r->prepare_ns);
        }
        jw_summary(&w, "alloc_ns", &r->alloc);
        jw_u64(&w, "first_alloc_ns", r->first_alloc_ns);
        jw_u64(&w, "alloc_max_after_first_ns", r->alloc_max_after_first_ns);
        jw_summary(&w, "free_ns", &r->free);
        jw_dbl(&w, "alloc_total_s", r->alloc_total_s);
        jw_dbl(&w, "free_total_s", r->free_total_s);
        jw_dbl(&w, "total_s", r->wall_s);
        if (mb) {
            jw_dbl(&w, "background_busy_s", r->background_busy_s);
            jw_dbl(&w, "daemon_wait_s", r->daemon_wait_s);
            jw_dbl(&w, "import_s", r->import_s);
        }
        jw_obj(&w, "series");
        jw_arr(&w, "step");
        for (size_t k = 0; k < r->s.n; k++)
            jw_u64(&w, NULL, r->s.step[k]);
        jw_end(&w, ']');
        jw_arr(&w, "live_bytes");
        for (size_t k = 0; k < r->s.n; k++)
            jw_u64(&w, NULL, r->s.live[k]);
        jw_end(&w, ']');
        jw_arr(&w, "reserved_bytes");
        for (size_t k = 0; k < r->s.n; k++)
            jw_u64(&w, NULL, r->s.reserved[k]);
        jw_end(&w, ']');
        jw_arr(&w, "daemon_bytes");
        for (size_t k = 0; mb && k < r->s.n; k++)
            jw_u64(&w, NULL, r->s.daemon[k]);
        jw_end(&w, ']');
        jw_end(&w, '}');
        jw_end(&w, '}');
    }
    jw_end(&w, ']');
    jw_arr(&w, "notes");
    jw_str(&w, NULL, "series: per point, the largest value over its steps; daemon bytes are sampled "
                     "at step ends, client reserved bytes after every operation");
    jw_str(&w, NULL, "memory is never touched; PyTorch rows come from tools/bench_torch.py replay");
    jw_end(&w, ']');
    jw_end(&w, '}');
}

int bench_replay(int argc, char **argv)
{
    enum { OPT_REQ = OPT_FIRST_OWN, OPT_COMP, OPT_STEP, OPT_TOK, OPT_BLOCK, OPT_STRAT, OPT_TSU,
           OPT_DEVERY, OPT_POINTS, OPT_VPAGE, OPT_SLOW, OPT_COLD, OPT_ITER,
           OPT_PACE };
    static const struct option lo[] = {
        BENCH_COMMON_LONGOPTS,
        { "requests", required_argument, 0, OPT_REQ },
        { "compression", required_argument, 0, OPT_COMP },
        { "step-ms", required_argument, 0, OPT_STEP },
        { "token-bytes", required_argument, 0, OPT_TOK },
        { "block-tokens", required_argument, 0, OPT_BLOCK },
        { "strategies", required_argument, 0, OPT_STRAT },
        { "jsonl-ts-unit", required_argument, 0, OPT_TSU },
        { "daemon-every", required_argument, 0, OPT_DEVERY },
        { "points", required_argument, 0, OPT_POINTS },
        { "vspace-page", required_argument, 0, OPT_VPAGE },
        { "slow-us", required_argument, 0, OPT_SLOW },
        { "cold", no_argument, 0, OPT_COLD },
        { "pace-us", required_argument, 0, OPT_PACE },
        { "iterations", required_argument, 0, OPT_ITER },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    long nreq = -1, block = 16, devery = 1, points = 2000, slow_us = 0, iters = -1, pace_us = 0;
    bool cold = false;
    double comp = 8, step_ms = 20, ts_scale = 1e-3;
    uint64_t bpt = 128 * 1024, vpage = 0;
    bool on[S_COUNT], explicit_strat = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        int h = bench_common_opt(c, optarg);
        if (h < 0)
            return 2;
        if (h)
            continue;
        char *end = NULL;
        switch (c) {
        case OPT_REQ: nreq = strtol(optarg, &end, 10); if (*end || nreq < 0) goto bad; break;
        case OPT_COMP: comp = strtod(optarg, &end); if (*end || !(comp > 0)) goto bad; break;
        case OPT_STEP: step_ms = strtod(optarg, &end); if (*end || !(step_ms > 0)) goto bad; break;
        case OPT_TOK: if (mb_parse_size(optarg, &bpt) != 0 || bpt == 0) goto bad; break;
        case OPT_BLOCK: block = strtol(optarg, &end, 10); if (*end || block < 1 || block > 1 << 20) goto bad; break;
        case OPT_STRAT: if (parse_strategies(optarg, on) != 0) goto bad; explicit_strat = true; break;
        case OPT_TSU:
            if (strcmp(optarg, "ms") == 0) ts_scale = 1e-3;
            else if (strcmp(optarg, "s") == 0) ts_scale = 1;
            else goto bad;
            break;
        case OPT_DEVERY: devery = strtol(optarg, &end, 10); if (*end || devery < 1) goto bad; break;
        case OPT_POINTS: points = strtol(optarg, &end, 10); if (*end || points < 1) goto bad; break;
        case OPT_SLOW: slow_us = strtol(optarg, &end, 10); if (*end || slow_us < 1) goto bad; break;
        case OPT_COLD: cold = true; break;
        case OPT_PACE: pace_us = strtol(optarg, &end, 10); if (*end || pace_us < 0 || pace_us > 10000000) goto bad; break;
        case OPT_ITER: iters = strtol(optarg, &end, 10); if (*end || iters < 1 || iters > 100000) goto bad; break;
        case OPT_VPAGE:
            if (mb_parse_size(optarg, &vpage) != 0 || vpage < MB_VSPACE_MIN_PAGE ||
                vpage > MB_VSPACE_MAX_PAGE || (vpage & (vpage - 1)))
                goto bad;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        continue;
    bad:
        fprintf(stderr, "mbbench replay: bad value '%s'\n", optarg);
        return 2;
    }
    if (optind + 1 != argc) {
        usage(stderr);
        return 2;
    }
    const char *trace = argv[optind];
    if (nreq < 0)
        nreq = bench_opt.quick ? 40 : 3000;
    bench_raise_nofile();

    size_t n;
    const char *format;
    struct protocol p;
    double step_s = step_ms / 1000.0 * comp;
    bool lifetimes = is_lifetimes(trace);
    if (iters < 0)
        iters = bench_opt.quick ? 3 : 50;
    if (lifetimes) {
        struct tensor *tv;
        size_t nt;
        if (load_lifetimes(trace, &tv, &nt) != 0)
            return 1;
        int rc = build_lifetimes(tv, nt, (uint32_t)iters, &p);
        free(tv);
        if (rc != 0) {
            fprintf(stderr, "mbbench replay: %s building the protocol\n",
                    rc == MB_ENOMEM ? "out of memory" : "too many operations");
            return 1;
        }
        n = nt;
        format = "lifetimes";
    } else {
        struct request *rq;
        if (load_trace(trace, (size_t)nreq, ts_scale, &rq, &n, &format) != 0)
            return 1;
        if (build_protocol(rq, n, step_s, bpt, (uint32_t)block, &p) != 0) {
            fprintf(stderr, "mbbench replay: out of memory building the protocol\n");
            free(rq);
            return 1;
        }
        free(rq);
    }

    /* Which backend: ask the daemon (no session needed). */
    char backend[16] = "none";
    uint64_t frame_bytes = 0;
    struct bench_daemon *d;
    struct bench_dstatus ds;
    if (bench_daemon_open(&d) == 0) {
        if (bench_daemon_status(d, &ds) == 0) {
            snprintf(backend, sizeof(backend), "%s", ds.backend);
            frame_bytes = ds.frame_bytes;
        }
        bench_daemon_close(d);
    }
    g_vpage = vpage ? vpage : pick_vspace_page(bpt * (uint64_t)block, frame_bytes);
    if (!explicit_strat) {
        on[S_REALLOC] = true;
        on[S_GROW] = on[S_VSPACE] = !lifetimes;   /* nothing grows in a training iteration */
        /* On the host backend it is grow: nothing gates a stream there. */
        on[S_GROW_ASYNC] = !lifetimes && strcmp(backend, "host") != 0;
        on[S_MALLOC] = strcmp(backend, "host") == 0;
        on[S_CUDA] = strcmp(backend, "host") != 0;
    }
    struct replay_cfg cfg = { .p = &p, .daemon_every = (uint32_t)devery, .cold = cold,
                              .slow_ns = (uint64_t)slow_us * 1000, .pace_ns = (uint64_t)pace_us * 1000 };
    cfg.bucket = (uint32_t)((p.steps + points - 1) / points);
    if (cfg.bucket == 0)
        cfg.bucket = 1;
    struct strat_result res[S_COUNT];
    int nres = 0, failed = 0;
    bool any_mb = false;   /* MoonBright strategies run too (before cudaMallocAsync) */
    for (int k = 0; k < S_COUNT; k++)
        any_mb |= on[k] && is_mb(k);
    for (int k = 0; k < S_COUNT; k++) {
        if (!on[k])
            continue;
        if (k == S_CUDA && any_mb) {
            /* The baseline runs with no idle MoonBright memory held. */
            uint64_t left = bench_daemon_wait_idle(30000);
            if (left)
                bench_progress(true, "replay: moonbrightd still holds %llu MiB of free frames",
                               (unsigned long long)(left >> 20));
        }
        int rc = run_one((enum strat_kind)k, &cfg, &res[nres]);
        if (rc < 0) {
            fprintf(stderr, "mbbench replay: %s: %s\n", strat_name[k], res[nres].note);
            failed = 1;
        } else if (rc > 0) {
            bench_progress(true, "replay %s: %s", strat_name[k], res[nres].note);
        }
        nres++;
    }

    if (bench_opt.json) {
        print_json(trace, format, n, lifetimes ? (uint32_t)iters : 0, comp, step_ms, (uint64_t)pace_us, bpt,
                   (uint32_t)block, &p, frame_bytes, backend, res, nres);
    } else {
        char a[32], b[32], e[32];
        if (lifetimes)
            printf("mbbench replay: %s, %zu tensors (lifetimes) x %ld iterations, one step per op "
                   "(%u steps), %s backend\n", trace, n, iters, p.steps, backend);
        else
            printf("mbbench replay: %s, %zu requests (%s), %u steps of %.0f ms x %.3g = %.3f s of trace, "
                   "%s per token, %ld-token blocks, %s backend\n",
                   trace, n, format, p.steps, step_ms, comp, step_s, bench_fmt_size(bpt, a, sizeof(a)),
                   block, backend);
        if (pace_us)
            printf("paced: each decode step lasts at least %ld us on the wall clock\n", pace_us);
        printf("%llu allocations on arrival, %llu block-boundary resizes; vspace pages of %s; latency in us;\n"
               "FRAMES: most frames (handles) granted at a step end; max>1st: the slowest allocation\n"
               "after the first (cold) one; WAITS: allocations and resizes that waited on the driver\n"
               "(see --json for each strategy's definition)\n",
               (unsigned long long)p.allocs, (unsigned long long)p.resizes,
               bench_fmt_size(g_vpage, a, sizeof(a)));
        printf("%-16s %11s %13s %6s %13s %6s %7s %9s %8s %8s %9s %9s %8s %8s %8s\n", "STRATEGY", "PEAK LIVE",
               "PEAK RESERVED", "RATIO", "DAEMON PEAK", "RATIO", "FRAMES", "ALLOC avg", "p50", "p99", "max",
               "max>1st", "WAITS", "FREE avg", "TOTAL s");
        for (int i = 0; i < nres; i++) {
            const struct strat_result *r = &res[i];
            if (!r->ran) {
                printf("%-16s %s\n", strat_name[r->kind], r->note);
                continue;
            }
            bool mb = is_mb(r->kind);
            char dr[16] = "-";
            if (mb && r->peak_live)
                snprintf(dr, sizeof(dr), "%.3f", (double)r->peak_daemon / r->peak_live);
            char wt[24] = "-", fr[16] = "-";
            if (mb)
                snprintf(fr, sizeof(fr), "%u", r->peak_daemon_frames);
            if (r->waits_known)
                snprintf(wt, sizeof(wt), "%llu", (unsigned long long)r->driver_waits);
            printf("%-16s %11s %13s %6.3f %13s %6s %7s %9.2f %8.2f %8.2f %9.1f %9.1f %8s %8.2f %8.2f%s%s\n",
                   strat_name[r->kind], bench_fmt_size(r->peak_live, a, sizeof(a)),
                   bench_fmt_size(r->peak_reserved, b, sizeof(b)),
                   r->peak_live ? (double)r->peak_reserved / r->peak_live : 0,
                   mb ? bench_fmt_size(r->peak_daemon, e, sizeof(e)) : "-", dr, fr, r->alloc.mean / 1e3,
                   r->alloc.p50 / 1e3, r->alloc.p99 / 1e3, r->alloc.max / 1e3,
                   r->alloc_max_after_first_ns / 1e3, wt, r->free.mean / 1e3, r->wall_s,
                   r->err ? "  " : "", r->err ? r->note : "");
        }
        for (int i = 0; i < nres; i++)
            if (res[i].ran && res[i].close_passes)
                printf("note: %s: %llu growable allocations passed over a freed range whose "
                       "frames would hold more than one tail past their size (mb_stats "
                       "grow_close_passes)\n",
                       strat_name[res[i].kind], (unsigned long long)res[i].close_passes);
        for (int i = 0; i < nres; i++)
            if (res[i].ran && res[i].kind == S_VSPACE && res[i].prepared_pages)
                printf("note: vspace readied %zu pages with mb_vspace_prepare before the replay "
                       "(%.2f ms, not in its times; --cold skips it)\n",
                       res[i].prepared_pages, res[i].prepare_ns / 1e6);
        printf("note: PyTorch rows come from tools/bench_torch.py replay (GPU host)\n");
    }
    for (int i = 0; i < nres; i++)
        series_free(&res[i].s);
    free(p.ops);
    free(p.final_bytes);
    return failed;
}
