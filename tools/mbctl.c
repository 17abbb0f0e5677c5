/* mbctl.c: the command line to inspect and administer moonbrightd. Its
 * commands, usage and help come from common/commands.def, the table the
 * daemon dispatches on. Admin commands run in a session of their own (handle
 * channel token, then hello as tenant "mbctl"), so the daemon knows the
 * caller's uid from the socket. Exit codes: 0 success, 1 the daemon
 * refused, 2 usage error, 3 the daemon is not running or did not answer. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <moonbright/mbclient.h>

#include "backend.h"
#include "commands.h"
#include "fdpass.h"
#include "log.h"
#include "nvml.h"
#include "size.h"
#include "wire.h"

enum { EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_NODAEMON = 3 };

#define UNLIMITED UINT64_MAX

struct ctl {
    const char *runtime_dir;
    int device;
    int timeout_ms;
    bool json;
    void *zctx, *dealer;
    int chan;                    /* handle channel while in a session, else -1 */
    uint64_t next_id;
};

typedef int cli_fn(struct ctl *ctl, int argc, char **argv);

/* ---- output helpers ---------------------------------------------------- */

static void json_str(const char *s)
{
    putchar('"');
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* A max as JSON: null when unlimited. */
static void json_max(uint64_t v)
{
    if (v == UNLIMITED)
        printf("null");
    else
        printf("%llu", (unsigned long long)v);
}

/* "1 session", "2 sessions". */
static const char *plural(unsigned long long n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

/* An argument as a whole number from lo to hi, into *out; false when it is
 * not one. A minus sign is refused before strtoull, which would wrap it to a
 * huge number, as it saturates past its range (errno). */
static bool number_arg(const char *s, unsigned long long lo, unsigned long long hi,
                       unsigned long long *out)
{
    const char *t = s + strspn(s, " \t");
    if (*t == '-')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(t, &end, 10);
    if (errno || end == t || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static const char *size_or_unlimited(uint64_t v, char *buf, size_t len)
{
    return v == UNLIMITED ? "unlimited" : mb_format_size(v, buf, len);
}

/* A Prometheus label value: backslash, double quote and newline escaped. */
static void prom_label(const char *s)
{
    for (; s && *s; s++) {
        if (*s == '\\' || *s == '"')
            printf("\\%c", *s);
        else if (*s == '\n')
            printf("\\n");
        else
            putchar(*s);
    }
}

/* ---- talking to the daemon -------------------------------------------- */

/* A daemon killed with SIGKILL leaves its sockets behind, and ZeroMQ would
 * wait the whole timeout for an answer: the lock file names the daemon's
 * pid, so a pid that is gone (or is another program now), with a handle
 * channel that refuses connections, means "not running" at once. 0 when a
 * daemon may be running. */
static int check_lock_pid(const struct ctl *ctl)
{
    char path[300], buf[32] = "";
    snprintf(path, sizeof(path), "%s/gpu%d.lock", ctl->runtime_dir, ctl->device);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    if (end == buf || (*end && *end != '\n') || pid <= 0)
        return 0;   /* empty or being written: let the sockets decide */
    bool gone = kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    if (!gone) {
        /* A dead daemon not yet reaped, or a reused pid: another program. */
        char stat_path[64], st[256] = "";
        snprintf(stat_path, sizeof(stat_path), "/proc/%ld/stat", pid);
        FILE *f = fopen(stat_path, "re");
        if (f) {
            if (fgets(st, sizeof(st), f)) {
                const char *comm = strchr(st, '(');
                const char *close_paren = strrchr(st, ')');
                if (comm && close_paren && close_paren[1] == ' ')
                    gone = strncmp(comm + 1, "moonbrightd", 11) != 0 || close_paren[2] == 'Z' ||
                           close_paren[2] == 'X';
            }
            fclose(f);
        }
    }
    if (!gone)
        return 0;
    /* A daemon in another pid namespace has a pid we cannot see: its
     * handle channel still accepts, a dead daemon's refuses at once. */
    char chan[256];
    if (mb_chan_path(chan, sizeof(chan), ctl->runtime_dir, ctl->device) == 0) {
        struct sockaddr_un sa;
        mb_chan_sockaddr(&sa, chan);
        int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        bool refused = s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
                       errno == ECONNREFUSED;
        if (s >= 0)
            close(s);
        if (!refused)
            return 0;
    }
    fprintf(stderr, "mbctl: moonbrightd (pid %ld) is not running for device %d (stale sockets in %s)\n",
            pid, ctl->device, ctl->runtime_dir);
    return EXIT_NODAEMON;
}

static int ctl_connect(struct ctl *ctl)
{
    if (ctl->dealer)
        return 0;
    char ep[300], path[256];
    if (mb_ctl_endpoint(ep, sizeof(ep), ctl->runtime_dir, ctl->device) != 0 ||
        mb_chan_path(path, sizeof(path), ctl->runtime_dir, ctl->device) != 0) {
        fprintf(stderr, "mbctl: runtime directory path too long\n");
        return EXIT_USAGE;
    }
    /* ZeroMQ connects lazily and would wait for a daemon that never comes:
     * look for the socket first so "not running" is immediate and clear. */
    if (access(path, F_OK) != 0) {
        fprintf(stderr, "mbctl: moonbrightd is not running for device %d (no %s)\n", ctl->device, path);
        return EXIT_NODAEMON;
    }
    int rc = check_lock_pid(ctl);
    if (rc)
        return rc;
    ctl->zctx = zmq_ctx_new();
    ctl->dealer = ctl->zctx ? zmq_socket(ctl->zctx, ZMQ_DEALER) : NULL;
    if (!ctl->dealer) {
        fprintf(stderr, "mbctl: failed to create a ZeroMQ socket: %s\n", zmq_strerror(errno));
        return EXIT_NODAEMON;
    }
    int zero = 0;
    zmq_setsockopt(ctl->dealer, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(ctl->dealer, ep) != 0) {
        fprintf(stderr, "mbctl: failed to connect to %s: %s\n", ep, zmq_strerror(errno));
        return EXIT_NODAEMON;
    }
    return 0;
}

static void ctl_close(struct ctl *ctl)
{
    if (ctl->dealer)
        zmq_close(ctl->dealer);
    if (ctl->zctx)
        zmq_ctx_term(ctl->zctx);
    if (ctl->chan >= 0)
        close(ctl->chan);
    ctl->dealer = ctl->zctx = NULL;
    ctl->chan = -1;
}

/* One request, one reply (notices are ignored); maps failures to exit
 * codes and prints the daemon's error. */
static int ctl_call(struct ctl *ctl, Mb__Request *req, int body, Mb__Reply **rep)
{
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    req->id = ++ctl->next_id;
    if (mb_wire_send_request(ctl->dealer, req) != 0 ||
        mb_wire_recv_reply(ctl->dealer, req->id, ctl->timeout_ms, rep, NULL, NULL) != 0) {
        fprintf(stderr, "mbctl: moonbrightd (device %d, %s) did not answer within %d ms\n",
                ctl->device, ctl->runtime_dir, ctl->timeout_ms);
        return EXIT_NODAEMON;
    }
    if ((*rep)->code != 0) {
        fprintf(stderr, "mbctl: %s: %s\n", mb_strerror((*rep)->code),
                (*rep)->error ? (*rep)->error : "");
        mb__reply__free_unpacked(*rep, NULL);
        return EXIT_REFUSED;
    }
    if ((int)(*rep)->body_case != body) {
        fprintf(stderr, "mbctl: unexpected reply from moonbrightd\n");
        mb__reply__free_unpacked(*rep, NULL);
        return EXIT_REFUSED;
    }
    return 0;
}

/* Open a session, as libmbclient does: connect the handle channel, read
 * the token from the daemon's welcome, present it in hello on ZeroMQ. The
 * daemon takes the caller's uid from the channel (SO_PEERCRED). */
static int ctl_session(struct ctl *ctl)
{
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    struct mb_chan_msg w;
    rc = mb_chan_open(ctl->runtime_dir, ctl->device, ctl->timeout_ms, &ctl->chan, &w);
    if (rc != 0) {
        fprintf(stderr, "mbctl: failed to open a session with moonbrightd (device %d, %s): %s\n",
                ctl->device, ctl->runtime_dir, mb_strerror(rc));
        return EXIT_NODAEMON;
    }
    Mb__Request req;
    Mb__Hello h;
    mb_wire_hello(&req, &h, w.token, "mbctl");
    Mb__Reply *rep;
    if ((rc = ctl_call(ctl, &req, MB__REPLY__BODY_HELLO, &rep)) != 0)
        return rc;
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

static int no_args(const char *cmd, int argc)
{
    if (argc > 1) {
        fprintf(stderr, "mbctl: %s takes no arguments besides --json\n", cmd);
        return EXIT_USAGE;
    }
    return 0;
}

static int get_status(struct ctl *ctl, Mb__Reply **rep)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Status st = MB__STATUS__INIT;
    req.body_case = MB__REQUEST__BODY_STATUS;
    req.status = &st;
    return ctl_call(ctl, &req, MB__REPLY__BODY_STATUS, rep);
}

static int get_tenants(struct ctl *ctl, Mb__Reply **rep)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Tenants t = MB__TENANTS__INIT;
    req.body_case = MB__REQUEST__BODY_TENANTS;
    req.tenants = &t;
    return ctl_call(ctl, &req, MB__REPLY__BODY_TENANTS, rep);
}

/* ---- status ------------------------------------------------------------ */

static void print_sessions(const Mb__StatusReply *s)
{
    char a[32], b[32];
    printf("%-8s %-8s %-6s %-20s %8s %12s %12s\n", "SESSION", "PID", "UID", "TENANT", "FRAMES",
           "BYTES", "CACHED");
    for (size_t i = 0; i < s->n_sessions; i++) {
        const Mb__SessionInfo *si = s->sessions[i];
        printf("%-8llu %-8u %-6u %-20s %8u %12s %12s\n", (unsigned long long)si->id, si->pid,
               si->uid, si->tenant, si->frames, mb_format_size(si->bytes, a, sizeof(a)),
               mb_format_size(si->cached, b, sizeof(b)));
    }
    if (s->n_sessions == 0 && !s->sessions_omitted)
        printf("(no sessions)\n");
    if (s->sessions_omitted)
        printf("(%u more sessions not listed: the reply's size limit)\n", s->sessions_omitted);
}

static void print_status_head(const Mb__StatusReply *s)
{
    char a[32], b[32], f[32];
    printf("moonbrightd pid %u, device %u (%s), %s backend, up %llu s%s\n", s->pid, s->device,
           s->device_id, s->backend, (unsigned long long)(s->uptime_ms / 1000), s->draining ? ", DRAINING" : "");
    char fr[32];
    printf("frames   %u total (%s units and multiples): %u free (%s), %u granted; %u slots "
           "in the frame table\n",
           s->frames_total, mb_format_size(s->frame_bytes, f, sizeof(f)), s->frames_free,
           mb_format_size(s->bytes_free, fr, sizeof(fr)), s->frames_granted, s->frame_slots);
    printf("handles  %u exported descriptors held; %llu fresh frames made ahead; frames exported "
           "again: %llu ahead, %llu on a grant's path; %llu given up for room\n", s->descriptors,
           (unsigned long long)s->made_ahead, (unsigned long long)s->exported_ahead,
           (unsigned long long)s->reexports, (unsigned long long)s->exports_dropped);
    printf("budget   %s, %s granted\n", mb_format_size(s->budget_bytes, a, sizeof(a)),
           mb_format_size(s->bytes_granted, b, sizeof(b)));
    printf("requests %llu served, %llu malformed, %llu refused (%llu over quota), %llu errors\n",
           (unsigned long long)s->requests, (unsigned long long)s->malformed,
           (unsigned long long)s->refused, (unsigned long long)s->refused_quota,
           (unsigned long long)s->errors);
    printf("reclaim  %llu notices sent, %u grants waiting; %llu scrubs\n",
           (unsigned long long)s->reclaim_notices, s->grants_waiting, (unsigned long long)s->scrubs);
    printf("reserve  target %s; released %llu idle frames, %llu frames of one uid so another "
           "got fresh ones, %llu for a device full below the budget, %llu for room on the "
           "device; %llu frames created on grant paths; %llu grants took many free frames "
           "rather than release some\n",
           mb_format_size(s->reserve_target, a, sizeof(a)), (unsigned long long)s->released_idle,
           (unsigned long long)s->released_isolation, (unsigned long long)s->released_device_full,
           (unsigned long long)s->released_room,
           (unsigned long long)s->grant_creates, (unsigned long long)s->warm_full_grants);
}

/* Processes holding more device memory than MoonBright granted them, by
 * NVML (absent on the host backend or without an NVIDIA driver: -1). A
 * descriptor kept after a return keeps its memory alive outside the
 * daemon's books; a CUDA context also takes some memory of its own. */
#define MAX_OVER 256
struct over {
    pid_t pid;
    uint64_t used, granted;
};

static int over_granted(const Mb__StatusReply *s, struct over *out)
{
    struct nvml_proc procs[MAX_OVER];
    if (strcmp(s->backend, "cuda") != 0 || s->sessions_omitted)
        return -1;   /* (not every session listed: what each was granted is not known) */
    int n = nvml_processes(s->device, procs, MAX_OVER), k = 0;
    for (int i = 0; i < n; i++) {
        if ((uint32_t)procs[i].pid == s->pid)
            continue;   /* the daemon holds every frame it created */
        uint64_t granted = 0;
        for (size_t j = 0; j < s->n_sessions; j++)
            if ((pid_t)s->sessions[j]->pid == procs[i].pid)
                granted += s->sessions[j]->bytes + s->sessions[j]->import_bytes;
        if (procs[i].used > granted)
            out[k++] = (struct over){ procs[i].pid, procs[i].used, granted };
    }
    return n < 0 ? -1 : k;
}

static int cli_status(struct ctl *ctl, int argc, char **argv)
{
    int rc = no_args("status", argc);
    Mb__Reply *rep;
    if (rc || (rc = get_status(ctl, &rep)) != 0)
        return rc;
    const Mb__StatusReply *s = rep->status;
    if (ctl->json) {
        printf("{\"backend\":");
        json_str(s->backend);
        printf(",\"device_id\":");
        json_str(s->device_id);
        printf(",\"device\":%u,\"pid\":%u,\"uptime_ms\":%llu,\"frame_bytes\":%llu,"
               "\"budget_bytes\":%llu,\"frames_total\":%u,\"frames_free\":%u,\"frames_granted\":%u,"
               "\"bytes_free\":%llu,\"bytes_granted\":%llu,\"requests\":%llu,\"malformed\":%llu,"
               "\"refused\":%llu,\"refused_quota\":%llu,\"errors\":%llu,\"draining\":%s,"
               "\"scrubs\":%llu,\"reclaim_notices\":%llu,\"grants_waiting\":%u,"
               "\"released_isolation\":%llu,\"released_idle\":%llu,\"reserve_target\":%llu,"
               "\"grant_creates\":%llu,\"released_device_full\":%llu,\"descriptors\":%u,"
               "\"reexports\":%llu,\"exported_ahead\":%llu,\"exports_dropped\":%llu,"
               "\"warm_full_grants\":%llu,\"frame_slots\":%u,\"released_room\":%llu,"
               "\"sessions_omitted\":%u,\"made_ahead\":%llu,\"tenants\":[",
               s->device, s->pid, (unsigned long long)s->uptime_ms,
               (unsigned long long)s->frame_bytes, (unsigned long long)s->budget_bytes,
               s->frames_total, s->frames_free, s->frames_granted,
               (unsigned long long)s->bytes_free, (unsigned long long)s->bytes_granted,
               (unsigned long long)s->requests, (unsigned long long)s->malformed,
               (unsigned long long)s->refused, (unsigned long long)s->refused_quota,
               (unsigned long long)s->errors, s->draining ? "true" : "false",
               (unsigned long long)s->scrubs, (unsigned long long)s->reclaim_notices,
               s->grants_waiting, (unsigned long long)s->released_isolation,
               (unsigned long long)s->released_idle, (unsigned long long)s->reserve_target,
               (unsigned long long)s->grant_creates, (unsigned long long)s->released_device_full,
               s->descriptors, (unsigned long long)s->reexports,
               (unsigned long long)s->exported_ahead, (unsigned long long)s->exports_dropped,
               (unsigned long long)s->warm_full_grants, s->frame_slots,
               (unsigned long long)s->released_room, s->sessions_omitted,
               (unsigned long long)s->made_ahead);
        /* "tenants" lists sessions (each with its tenant's name), as before. */
        for (size_t i = 0; i < s->n_sessions; i++) {
            const Mb__SessionInfo *si = s->sessions[i];
            printf("%s{\"session\":%llu,\"pid\":%u,\"uid\":%u,\"name\":", i ? "," : "",
                   (unsigned long long)si->id, si->pid, si->uid);
            json_str(si->tenant);
            printf(",\"frames\":%u,\"bytes\":%llu,\"import_bytes\":%llu,\"cached\":%llu}",
                   si->frames, (unsigned long long)si->bytes, (unsigned long long)si->import_bytes,
                   (unsigned long long)si->cached);
        }
        printf("]");
        struct over ov[MAX_OVER];
        int n = over_granted(s, ov);
        if (n >= 0) {
            printf(",\"over_granted\":[");
            for (int i = 0; i < n; i++)
                printf("%s{\"pid\":%d,\"device_bytes\":%llu,\"granted\":%llu}", i ? "," : "",
                       (int)ov[i].pid, (unsigned long long)ov[i].used,
                       (unsigned long long)ov[i].granted);
            printf("]");
        }
        printf("}\n");
    } else {
        print_status_head(s);
        printf("\n");
        print_sessions(s);
        struct over ov[MAX_OVER];
        int n = over_granted(s, ov);
        if (n > 0) {
            char a[32], b[32];
            printf("\nprocesses holding more device memory than granted (NVML; a CUDA context "
                   "takes some of its own):\n%-8s %12s %12s\n", "PID", "DEVICE", "GRANTED");
            for (int i = 0; i < n; i++)
                printf("%-8d %12s %12s\n", (int)ov[i].pid, mb_format_size(ov[i].used, a, sizeof(a)),
                       mb_format_size(ov[i].granted, b, sizeof(b)));
        }
    }
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

/* ---- tenants ----------------------------------------------------------- */

static const Mb__ClientCounters no_counters = MB__CLIENT_COUNTERS__INIT;

static void print_tenants(const Mb__TenantsReply *t)
{
    char a[32], b[32], c[32], e[32], f[32], r[32];
    printf("%-24s %8s %12s %12s %12s %12s %12s %12s %10s %8s %8s %8s %8s\n", "TENANT", "SESSIONS",
           "BYTES", "MAX", "ROOM", "MIN", "CACHED", "IDLE", "HEAP HITS", "GRANTS", "STITCHES",
           "UNMAPS", "WAITS");
    for (size_t i = 0; i < t->n_tenants; i++) {
        const Mb__TenantInfo *ti = t->tenants[i];
        const Mb__ClientCounters *k = ti->counters ? ti->counters : &no_counters;
        printf("%-24s %8u %12s %12s %12s %12s %12s %12s %10llu %8llu %8llu %8llu %8llu\n", ti->name,
               ti->sessions, mb_format_size(ti->bytes, a, sizeof(a)),
               size_or_unlimited(ti->max, b, sizeof(b)),
               ti->sessions ? mb_format_size(ti->room, r, sizeof(r)) : "-",
               mb_format_size(ti->min, c, sizeof(c)),
               mb_format_size(ti->cached, e, sizeof(e)), mb_format_size(k->bytes_idle, f, sizeof(f)),
               (unsigned long long)k->heap_hits, (unsigned long long)k->heap_grants,
               (unsigned long long)k->stitches, (unsigned long long)k->unmaps,
               (unsigned long long)(k->refill_waits + k->grow_waits));
    }
    if (t->n_tenants == 0 && !t->omitted)
        printf("(no tenants)\n");
    if (t->omitted)
        printf("(%u more tenants not listed: the reply's size limit)\n", t->omitted);
}

static int cli_tenants(struct ctl *ctl, int argc, char **argv)
{
    int rc = no_args("tenants", argc);
    Mb__Reply *rep;
    if (rc || (rc = get_tenants(ctl, &rep)) != 0)
        return rc;
    const Mb__TenantsReply *t = rep->tenants;
    if (ctl->json) {
        printf("{\"tenants\":[");
        for (size_t i = 0; i < t->n_tenants; i++) {
            const Mb__TenantInfo *ti = t->tenants[i];
            printf("%s{\"name\":", i ? "," : "");
            json_str(ti->name);
            printf(",\"sessions\":%u,\"bytes\":%llu,\"max\":", ti->sessions,
                   (unsigned long long)ti->bytes);
            json_max(ti->max);
            const Mb__ClientCounters *k = ti->counters ? ti->counters : &no_counters;
            printf(",\"room\":%llu", (unsigned long long)ti->room);
            printf(",\"min\":%llu,\"cached\":%llu,\"idle\":%llu,\"heap_hits\":%llu,"
                   "\"heap_grants\":%llu,\"stitches\":%llu,\"unmaps\":%llu,"
                   "\"refill_waits\":%llu,\"grow_waits\":%llu,\"heap_extends\":%llu,"
                   "\"heap_fills\":%llu,\"grow_queued\":%llu}",
                   (unsigned long long)ti->min, (unsigned long long)ti->cached,
                   (unsigned long long)k->bytes_idle, (unsigned long long)k->heap_hits,
                   (unsigned long long)k->heap_grants, (unsigned long long)k->stitches,
                   (unsigned long long)k->unmaps, (unsigned long long)k->refill_waits,
                   (unsigned long long)k->grow_waits, (unsigned long long)k->heap_extends,
                   (unsigned long long)k->heap_fills, (unsigned long long)k->grow_queued);
        }
        printf("],\"omitted\":%u}\n", t->omitted);
    } else {
        print_tenants(t);
    }
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

/* ---- frames ------------------------------------------------------------ */

static int cli_frames(struct ctl *ctl, int argc, char **argv)
{
    int rc = no_args("frames", argc);
    if (rc)
        return rc;
    uint32_t start = 1;
    size_t shown = 0;
    if (ctl->json)
        printf("{\"frames\":[");
    else
        printf("%-8s %10s %-10s %-8s %-20s %-20s\n", "FRAME", "BYTES", "STATE", "SESSION", "TENANT",
               "LAST_TENANT");
    do {
        Mb__Request req = MB__REQUEST__INIT;
        Mb__Frames fr = MB__FRAMES__INIT;
        fr.start = start;
        req.body_case = MB__REQUEST__BODY_FRAMES;
        req.frames = &fr;
        Mb__Reply *rep;
        if ((rc = ctl_call(ctl, &req, MB__REPLY__BODY_FRAMES, &rep)) != 0) {
            if (ctl->json)
                printf("]}\n");
            return rc;
        }
        const Mb__FramesReply *f = rep->frames;
        for (size_t i = 0; i < f->n_frames; i++, shown++) {
            const Mb__FrameInfo *fi = f->frames[i];
            if (ctl->json) {
                printf("%s{\"id\":%u,\"bytes\":%llu,\"state\":", shown ? "," : "", fi->id,
                       (unsigned long long)fi->bytes);
                json_str(fi->state);
                printf(",\"session\":%llu,\"tenant\":", (unsigned long long)fi->session);
                json_str(fi->tenant);
                printf(",\"last_tenant\":");
                json_str(fi->last_tenant);
                printf("}");
            } else {
                char sess[24] = "-";
                if (fi->session)
                    snprintf(sess, sizeof(sess), "%llu", (unsigned long long)fi->session);
                printf("%-8u %10llu %-10s %-8s %-20s %-20s\n", fi->id, (unsigned long long)fi->bytes,
                       fi->state, sess, *fi->tenant ? fi->tenant : "-",
                       *fi->last_tenant ? fi->last_tenant : "-");
            }
        }
        start = f->next;
        mb__reply__free_unpacked(rep, NULL);
    } while (start != 0);
    if (ctl->json)
        printf("]}\n");
    else if (shown == 0)
        printf("(no frames created yet)\n");
    return 0;
}

/* ---- admin commands ---------------------------------------------------- */

static int cli_quota(struct ctl *ctl, int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "mbctl: usage: quota TENANT SIZE|unlimited\n");
        return EXIT_USAGE;
    }
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Quota q = MB__QUOTA__INIT;
    q.tenant = argv[1];
    if (strcmp(argv[2], "unlimited") == 0) {
        q.unlimited = true;
    } else if (mb_parse_size(argv[2], &q.max) != 0) {
        fprintf(stderr, "mbctl: bad size '%s' (bytes with an optional K, M, G or T suffix, or unlimited)\n",
                argv[2]);
        return EXIT_USAGE;
    }
    req.body_case = MB__REQUEST__BODY_QUOTA;
    req.quota = &q;
    Mb__Reply *rep;
    int rc = ctl_session(ctl);
    if (rc || (rc = ctl_call(ctl, &req, MB__REPLY__BODY_QUOTA, &rep)) != 0)
        return rc;
    const Mb__QuotaReply *r = rep->quota;
    if (ctl->json) {
        printf("{\"tenant\":");
        json_str(r->tenant);
        printf(",\"previous_max\":");
        json_max(r->previous_max);
        printf(",\"max\":");
        json_max(r->max);
        printf(",\"bytes\":%llu}\n", (unsigned long long)r->bytes);
    } else {
        char a[32], b[32], c[32];
        printf("tenant %s: max %s (was %s); holds %s\n", r->tenant, size_or_unlimited(r->max, a, sizeof(a)),
               size_or_unlimited(r->previous_max, b, sizeof(b)), mb_format_size(r->bytes, c, sizeof(c)));
    }
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

static int cli_reclaim(struct ctl *ctl, int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "mbctl: usage: reclaim [TENANT]\n");
        return EXIT_USAGE;
    }
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Reclaim r = MB__RECLAIM__INIT;
    r.tenant = argc == 2 ? argv[1] : "";
    req.body_case = MB__REQUEST__BODY_RECLAIM;
    req.reclaim = &r;
    Mb__Reply *rep;
    int rc = ctl_session(ctl);
    if (rc || (rc = ctl_call(ctl, &req, MB__REPLY__BODY_RECLAIM, &rep)) != 0)
        return rc;
    if (ctl->json) {
        printf("{\"sessions\":%u,\"cached\":%llu}\n", rep->reclaim->sessions,
               (unsigned long long)rep->reclaim->cached);
    } else {
        char a[32];
        printf("asked %u %s to return cached frames (%s cached, as last reported)\n",
               rep->reclaim->sessions, plural(rep->reclaim->sessions, "session", "sessions"),
               mb_format_size(rep->reclaim->cached, a, sizeof(a)));
    }
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

static int cli_drain(struct ctl *ctl, int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "off") != 0 && strcmp(argv[1], "on") != 0)) {
        fprintf(stderr, "mbctl: usage: drain [on|off]\n");
        return EXIT_USAGE;
    }
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Drain dr = MB__DRAIN__INIT;
    dr.off = argc == 2 && strcmp(argv[1], "off") == 0;
    req.body_case = MB__REQUEST__BODY_DRAIN;
    req.drain = &dr;
    Mb__Reply *rep;
    int rc = ctl_session(ctl);
    if (rc || (rc = ctl_call(ctl, &req, MB__REPLY__BODY_DRAIN, &rep)) != 0)
        return rc;
    if (ctl->json)
        printf("{\"draining\":%s,\"sessions\":%u}\n", rep->drain->draining ? "true" : "false",
               rep->drain->sessions);
    else
        printf("%s; %u %s open (this one included)\n",
               rep->drain->draining ? "draining: no new frames are granted" : "granting frames",
               rep->drain->sessions, plural(rep->drain->sessions, "session", "sessions"));
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

static int cli_kill(struct ctl *ctl, int argc, char **argv)
{
    unsigned long long id;
    if (argc != 2 || !number_arg(argv[1], 1, ULLONG_MAX, &id)) {
        fprintf(stderr, "mbctl: usage: kill SESSION (a session id from 'mbctl status')\n");
        return EXIT_USAGE;
    }
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Kill k = MB__KILL__INIT;
    k.session = id;
    req.body_case = MB__REQUEST__BODY_KILL;
    req.kill = &k;
    Mb__Reply *rep;
    int rc = ctl_session(ctl);
    if (rc || (rc = ctl_call(ctl, &req, MB__REPLY__BODY_KILL, &rep)) != 0)
        return rc;
    if (ctl->json)
        printf("{\"session\":%llu,\"frames\":%u}\n", (unsigned long long)rep->kill->session,
               rep->kill->frames);
    else
        printf("session %llu ended; %u %s withdrawn until its process exits\n",
               (unsigned long long)rep->kill->session, rep->kill->frames,
               plural(rep->kill->frames, "frame", "frames"));
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

/* ---- metrics ----------------------------------------------------------- */

static void prom_head(const char *name, const char *type, const char *help)
{
    printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_metrics(const Mb__MetricsReply *m, const Mb__TenantsReply *t)
{
    const Mb__StatusReply *s = m->status;
    unsigned dev = s->device;
    prom_head("moonbright_frames", "gauge", "Frames the daemon created, by state.");
    printf("moonbright_frames{device=\"%u\",state=\"free\"} %u\n", dev, s->frames_free);
    printf("moonbright_frames{device=\"%u\",state=\"granted\"} %u\n", dev, s->frames_granted);
    prom_head("moonbright_bytes", "gauge", "Bytes of frames, by state.");
    printf("moonbright_bytes{device=\"%u\",state=\"free\"} %llu\n", dev, (unsigned long long)s->bytes_free);
    printf("moonbright_bytes{device=\"%u\",state=\"granted\"} %llu\n", dev, (unsigned long long)s->bytes_granted);
    prom_head("moonbright_budget_bytes", "gauge", "Most bytes of frames the daemon creates.");
    printf("moonbright_budget_bytes{device=\"%u\"} %llu\n", dev, (unsigned long long)s->budget_bytes);
    prom_head("moonbright_frame_bytes", "gauge", "Bytes per frame.");
    printf("moonbright_frame_bytes{device=\"%u\"} %llu\n", dev, (unsigned long long)s->frame_bytes);
    prom_head("moonbright_sessions", "gauge", "Sessions bound now.");
    printf("moonbright_sessions{device=\"%u\"} %zu\n", dev, s->n_sessions + s->sessions_omitted);
    prom_head("moonbright_sessions_opened_total", "counter", "Sessions opened on the handle channel.");
    printf("moonbright_sessions_opened_total{device=\"%u\"} %llu\n", dev, (unsigned long long)m->sessions_opened);
    prom_head("moonbright_sessions_closed_total", "counter", "Sessions ended.");
    printf("moonbright_sessions_closed_total{device=\"%u\"} %llu\n", dev, (unsigned long long)m->sessions_closed);
    prom_head("moonbright_sessions_killed_total", "counter", "Sessions ended by an administrator.");
    printf("moonbright_sessions_killed_total{device=\"%u\"} %llu\n", dev, (unsigned long long)m->sessions_killed);
    prom_head("moonbright_tenant_bytes", "gauge", "Bytes granted to each tenant's sessions.");
    for (size_t i = 0; t && i < t->n_tenants; i++) {
        printf("moonbright_tenant_bytes{device=\"%u\",tenant=\"", dev);
        prom_label(t->tenants[i]->name);
        printf("\"} %llu\n", (unsigned long long)t->tenants[i]->bytes);
    }
    prom_head("moonbright_requests_total", "counter", "Requests handled, by command.");
    for (size_t i = 0; i < m->n_commands; i++)
        printf("moonbright_requests_total{device=\"%u\",command=\"%s\"} %llu\n", dev,
               m->commands[i]->name, (unsigned long long)m->commands[i]->count);
    prom_head("moonbright_request_errors_total", "counter", "Requests answered with an error, by command.");
    for (size_t i = 0; i < m->n_commands; i++)
        printf("moonbright_request_errors_total{device=\"%u\",command=\"%s\"} %llu\n", dev,
               m->commands[i]->name, (unsigned long long)m->commands[i]->errors);
    prom_head("moonbright_request_duration_seconds", "histogram",
              "Time from a request's arrival to its reply, by command.");
    for (size_t i = 0; i < m->n_commands; i++) {
        const Mb__CommandStats *c = m->commands[i];
        for (size_t b = 0; b < c->n_buckets && b < m->n_bucket_le_us; b++)
            printf("moonbright_request_duration_seconds_bucket{device=\"%u\",command=\"%s\",le=\"%g\"} %llu\n",
                   dev, c->name, (double)m->bucket_le_us[b] / 1e6, (unsigned long long)c->buckets[b]);
        printf("moonbright_request_duration_seconds_bucket{device=\"%u\",command=\"%s\",le=\"+Inf\"} %llu\n",
               dev, c->name, (unsigned long long)c->count);
        printf("moonbright_request_duration_seconds_sum{device=\"%u\",command=\"%s\"} %.6f\n", dev,
               c->name, (double)c->sum_us / 1e6);
        printf("moonbright_request_duration_seconds_count{device=\"%u\",command=\"%s\"} %llu\n", dev,
               c->name, (unsigned long long)c->count);
    }
    prom_head("moonbright_refused_total", "counter", "Requests refused, by reason.");
    printf("moonbright_refused_total{device=\"%u\",reason=\"permission\"} %llu\n", dev,
           (unsigned long long)m->refused_auth);
    printf("moonbright_refused_total{device=\"%u\",reason=\"quota\"} %llu\n", dev,
           (unsigned long long)s->refused_quota);
    prom_head("moonbright_malformed_total", "counter", "Malformed messages dropped or answered.");
    printf("moonbright_malformed_total{device=\"%u\"} %llu\n", dev, (unsigned long long)s->malformed);
    prom_head("moonbright_scrubs_total", "counter", "Frames zeroed before moving to another tenant.");
    printf("moonbright_scrubs_total{device=\"%u\"} %llu\n", dev, (unsigned long long)s->scrubs);
    prom_head("moonbright_released_frames_total", "counter",
              "Free frames released to the driver, by reason (isolation: one uid's frames "
              "released so another uid got fresh ones; idle: above the reserve target; "
              "room: device memory left free, for the daemon's headroom or a client's context).");
    printf("moonbright_released_frames_total{device=\"%u\",reason=\"isolation\"} %llu\n", dev,
           (unsigned long long)s->released_isolation);
    printf("moonbright_released_frames_total{device=\"%u\",reason=\"idle\"} %llu\n", dev,
           (unsigned long long)s->released_idle);
    printf("moonbright_released_frames_total{device=\"%u\",reason=\"room\"} %llu\n", dev,
           (unsigned long long)s->released_room);
    prom_head("moonbright_released_device_full_total", "counter",
              "Free frames released because the driver was out of memory below the budget "
              "(also counted by reason above when another uid held them).");
    printf("moonbright_released_device_full_total{device=\"%u\"} %llu\n", dev,
           (unsigned long long)s->released_device_full);
    prom_head("moonbright_grant_path_creates_total", "counter",
              "Frames grants created on their own path (no free frame of the order asked for).");
    printf("moonbright_grant_path_creates_total{device=\"%u\"} %llu\n", dev,
           (unsigned long long)s->grant_creates);
    prom_head("moonbright_warm_full_grants_total", "counter",
              "Grants that took many free frames (Grant.warm_full_max_frames) because making the "
              "planned ones would first have released free frames.");
    printf("moonbright_warm_full_grants_total{device=\"%u\"} %llu\n", dev,
           (unsigned long long)s->warm_full_grants);
    prom_head("moonbright_reserve_target_bytes", "gauge", "Bytes the warm reserve keeps ready now.");
    printf("moonbright_reserve_target_bytes{device=\"%u\"} %llu\n", dev,
           (unsigned long long)s->reserve_target);
    prom_head("moonbright_reclaim_notices_total", "counter", "RECLAIM notices sent to sessions.");
    printf("moonbright_reclaim_notices_total{device=\"%u\"} %llu\n", dev, (unsigned long long)s->reclaim_notices);
    prom_head("moonbright_reclaim_bytes_total", "counter", "Bytes returned while a grant waited.");
    printf("moonbright_reclaim_bytes_total{device=\"%u\"} %llu\n", dev, (unsigned long long)m->reclaim_bytes);
    prom_head("moonbright_reclaim_timeouts_total", "counter", "Waiting grants that ran out of time.");
    printf("moonbright_reclaim_timeouts_total{device=\"%u\"} %llu\n", dev, (unsigned long long)m->reclaim_timeouts);
    prom_head("moonbright_reclaim_short_total", "counter",
              "Waiting grants refused before their deadline: every session asked had answered.");
    printf("moonbright_reclaim_short_total{device=\"%u\"} %llu\n", dev, (unsigned long long)m->reclaim_short);
    prom_head("moonbright_reclaim_ignored_total", "counter",
              "RECLAIM notices that passed their deadline without a return, or were answered "
              "returning nothing by a session that reports a cache.");
    printf("moonbright_reclaim_ignored_total{device=\"%u\"} %llu\n", dev,
           (unsigned long long)m->reclaim_ignored);
    prom_head("moonbright_grants_waiting", "gauge", "Grants waiting for reclaimed frames.");
    printf("moonbright_grants_waiting{device=\"%u\"} %u\n", dev, s->grants_waiting);
    prom_head("moonbright_draining", "gauge", "1 while grants are refused (drain).");
    printf("moonbright_draining{device=\"%u\"} %d\n", dev, s->draining ? 1 : 0);
    prom_head("moonbright_uptime_seconds", "gauge", "Seconds since the daemon started serving.");
    printf("moonbright_uptime_seconds{device=\"%u\"} %.3f\n", dev, (double)s->uptime_ms / 1e3);
}

static void json_metrics(const Mb__MetricsReply *m)
{
    const Mb__StatusReply *s = m->status;
    printf("{\"device\":%u,\"frames_free\":%u,\"frames_granted\":%u,\"bytes_free\":%llu,"
           "\"bytes_granted\":%llu,\"budget_bytes\":%llu,\"sessions\":%zu,\"sessions_opened\":%llu,"
           "\"sessions_closed\":%llu,\"sessions_killed\":%llu,\"refused_permission\":%llu,"
           "\"refused_quota\":%llu,\"malformed\":%llu,\"scrubs\":%llu,\"reclaim_notices\":%llu,"
           "\"reclaim_bytes\":%llu,\"reclaim_timeouts\":%llu,\"released_isolation\":%llu,"
           "\"released_idle\":%llu,\"reclaim_ignored\":%llu,\"reclaim_short\":%llu,\"commands\":[",
           s->device, s->frames_free, s->frames_granted, (unsigned long long)s->bytes_free,
           (unsigned long long)s->bytes_granted, (unsigned long long)s->budget_bytes,
           s->n_sessions + s->sessions_omitted, (unsigned long long)m->sessions_opened, (unsigned long long)m->sessions_closed,
           (unsigned long long)m->sessions_killed, (unsigned long long)m->refused_auth,
           (unsigned long long)s->refused_quota, (unsigned long long)s->malformed,
           (unsigned long long)s->scrubs, (unsigned long long)s->reclaim_notices,
           (unsigned long long)m->reclaim_bytes, (unsigned long long)m->reclaim_timeouts,
           (unsigned long long)s->released_isolation, (unsigned long long)s->released_idle,
           (unsigned long long)m->reclaim_ignored, (unsigned long long)m->reclaim_short);
    for (size_t i = 0; i < m->n_commands; i++) {
        const Mb__CommandStats *c = m->commands[i];
        printf("%s{\"name\":", i ? "," : "");
        json_str(c->name);
        printf(",\"count\":%llu,\"errors\":%llu,\"sum_us\":%llu,\"buckets\":[",
               (unsigned long long)c->count, (unsigned long long)c->errors,
               (unsigned long long)c->sum_us);
        for (size_t b = 0; b < c->n_buckets && b < m->n_bucket_le_us; b++)
            printf("%s{\"le_us\":%llu,\"count\":%llu}", b ? "," : "",
                   (unsigned long long)m->bucket_le_us[b], (unsigned long long)c->buckets[b]);
        printf("]}");
    }
    printf("]}\n");
}

static int cli_metrics(struct ctl *ctl, int argc, char **argv)
{
    int rc = no_args("metrics", argc);
    if (rc)
        return rc;
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Metrics mt = MB__METRICS__INIT;
    req.body_case = MB__REQUEST__BODY_METRICS;
    req.metrics = &mt;
    Mb__Reply *rep, *trep = NULL;
    if ((rc = ctl_call(ctl, &req, MB__REPLY__BODY_METRICS, &rep)) != 0)
        return rc;
    if (ctl->json) {
        json_metrics(rep->metrics);
    } else {
        if ((rc = get_tenants(ctl, &trep)) != 0) {
            mb__reply__free_unpacked(rep, NULL);
            return rc;
        }
        prom_metrics(rep->metrics, trep->tenants);
        mb__reply__free_unpacked(trep, NULL);
    }
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

/* ---- top --------------------------------------------------------------- */

/* top reads keys from a terminal without waiting for Enter or echoing;
 * the terminal's settings come back on every exit. */
static struct termios g_saved_tty;
static bool g_tty_raw;

static void tty_restore(void)
{
    if (g_tty_raw)
        tcsetattr(0, TCSANOW, &g_saved_tty);
    g_tty_raw = false;
}

static void tty_restore_and_die(int sig)
{
    tty_restore();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void tty_keys(void)
{
    struct termios t;
    if (!isatty(0) || tcgetattr(0, &g_saved_tty) != 0)
        return;
    t = g_saved_tty;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(0, TCSANOW, &t) != 0)
        return;
    g_tty_raw = true;
    atexit(tty_restore);
    signal(SIGINT, tty_restore_and_die);
    signal(SIGTERM, tty_restore_and_die);
}

/* Wait ms milliseconds, or less when q arrives on standard input (a
 * terminal or a pipe). True when the user asked to quit. */
static bool wait_or_quit(int ms, bool *stdin_open)
{
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = ms - ((now.tv_sec - start.tv_sec) * 1000L + (now.tv_nsec - start.tv_nsec) / 1000000L);
        if (left <= 0)
            return false;
        struct pollfd p = { 0, POLLIN, 0 };
        int n = poll(&p, *stdin_open ? 1 : 0, (int)left);
        if (n < 0 && errno != EINTR)
            return false;
        if (n <= 0)
            continue;
        char key[64];
        ssize_t got = read(0, key, sizeof(key));
        if (got <= 0) {
            *stdin_open = false;   /* end of input: keep refreshing */
            continue;
        }
        for (ssize_t i = 0; i < got; i++)
            if (key[i] == 'q' || key[i] == 'Q')
                return true;
    }
}

static int cli_top(struct ctl *ctl, int argc, char **argv)
{
    long count = -1, interval = 1000;
    for (int i = 1; i < argc; i++) {
        unsigned long long v;
        if (strcmp(argv[i], "--once") == 0) {
            count = 1;
        } else if ((strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--count") == 0) && i + 1 < argc) {
            if (!number_arg(argv[++i], 1, LONG_MAX, &v)) {
                fprintf(stderr, "mbctl: bad count '%s' (a number > 0)\n", argv[i]);
                return EXIT_USAGE;
            }
            count = (long)v;
        } else if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc) {
            if (!number_arg(argv[++i], 10, 3600000, &v)) {
                fprintf(stderr, "mbctl: bad interval '%s' (milliseconds, 10 or more)\n", argv[i]);
                return EXIT_USAGE;
            }
            interval = (long)v;
        } else {
            fprintf(stderr, "mbctl: usage: top [--once] [-n COUNT] [--interval MS]\n");
            return EXIT_USAGE;
        }
    }
    bool tty = isatty(1), stdin_open = true;
    if (tty)
        tty_keys();
    for (long shown = 0; count < 0 || shown < count; shown++) {
        if (shown && wait_or_quit((int)interval, &stdin_open))
            break;
        Mb__Reply *srep, *trep;
        int rc = get_status(ctl, &srep);
        if (rc)
            return rc;
        if ((rc = get_tenants(ctl, &trep)) != 0) {
            mb__reply__free_unpacked(srep, NULL);
            return rc;
        }
        if (tty)
            printf("\033[H\033[2J");   /* home, clear */
        else if (shown)
            printf("\n");
        time_t now = time(NULL);
        char when[32];
        strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
        printf("mbctl top, %s (every %ld ms; q quits)\n", when, interval);
        print_status_head(srep->status);
        printf("\n");
        print_tenants(trep->tenants);
        printf("\n");
        print_sessions(srep->status);
        fflush(stdout);
        mb__reply__free_unpacked(srep, NULL);
        mb__reply__free_unpacked(trep, NULL);
    }
    tty_restore();
    return 0;
}

/* ---- the table --------------------------------------------------------- */

/* One row per daemon of this host (its status); a daemon that does not
 * answer gets a row saying so, and the exit status says one did not. */
static int cli_devices(struct ctl *ctl, int argc, char **argv)
{
    (void)argv;
    int rc = no_args("devices", argc), worst = 0;
    if (rc)
        return rc;
    int idx[MB_DEVICE_MAX + 1], n = mb_runtime_devices(ctl->runtime_dir, idx);
    if (ctl->json)
        printf("{\"devices\":[");
    else if (n)
        printf("%-6s  %-40s  %-7s  %10s  %10s  %10s  %8s  %s\n", "DEVICE", "GPU", "BACKEND", "BUDGET",
               "GRANTED", "FREE", "SESSIONS", "PID");
    for (int i = 0; i < n; i++) {
        ctl_close(ctl);
        ctl->device = idx[i];
        Mb__Reply *rep = NULL;
        rc = get_status(ctl, &rep);
        if (rc) {
            worst = rc;
            if (ctl->json)
                printf("%s{\"device\":%d,\"answered\":false}", i ? "," : "", idx[i]);
            else
                printf("%-6d  (no answer)\n", idx[i]);
            continue;
        }
        const Mb__StatusReply *s = rep->status;
        if (ctl->json) {
            printf("%s{\"device\":%u,\"answered\":true,\"device_id\":", i ? "," : "", s->device);
            json_str(s->device_id);
            printf(",\"backend\":");
            json_str(s->backend);
            printf(",\"budget_bytes\":%llu,\"bytes_granted\":%llu,\"bytes_free\":%llu,"
                   "\"sessions\":%zu,\"pid\":%u,\"draining\":%s}",
                   (unsigned long long)s->budget_bytes, (unsigned long long)s->bytes_granted,
                   (unsigned long long)s->bytes_free, s->n_sessions + s->sessions_omitted, s->pid,
                   s->draining ? "true" : "false");
        } else {
            char b[32], g[32], f[32];
            printf("%-6u  %-40s  %-7s  %10s  %10s  %10s  %8zu  %u%s\n", s->device, s->device_id,
                   s->backend, mb_format_size(s->budget_bytes, b, sizeof(b)),
                   mb_format_size(s->bytes_granted, g, sizeof(g)),
                   mb_format_size(s->bytes_free, f, sizeof(f)), s->n_sessions + s->sessions_omitted,
                   s->pid, s->draining ? " DRAINING" : "");
        }
        mb__reply__free_unpacked(rep, NULL);
    }
    if (ctl->json)
        printf("]}\n");
    else if (n == 0)
        printf("(no moonbrightd in %s)\n", ctl->runtime_dir);
    return n == 0 ? EXIT_NODAEMON : worst;
}

/* mbctl's runners for the table's MB_CMD_CLI rows and its views. */
static cli_fn *const cli_fns[MB_CMD_COUNT] = {
    [MB_CMD_status] = cli_status,   [MB_CMD_tenants] = cli_tenants, [MB_CMD_frames] = cli_frames,
    [MB_CMD_quota] = cli_quota,     [MB_CMD_reclaim] = cli_reclaim, [MB_CMD_drain] = cli_drain,
    [MB_CMD_kill] = cli_kill,       [MB_CMD_metrics] = cli_metrics,
};
static cli_fn *const view_fns[MB_VIEW_COUNT] = {
    [MB_VIEW_top] = cli_top,
    [MB_VIEW_devices] = cli_devices,
};

static void usage_row(FILE *f, const struct mb_command *c)
{
    fprintf(f, "  %-8s %-32s %s\n", c->name, c->usage, c->summary);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mbctl [--runtime-dir DIR] [--device N] [--timeout MS] COMMAND [ARGS]\n"
               "(the options may also follow the command)\n\ncommands:\n");
    for (int i = 0; i < MB_CMD_COUNT; i++)
        if (mb_commands[i].flags & MB_CMD_CLI)
            usage_row(f, &mb_commands[i]);
    for (int i = 0; i < MB_VIEW_COUNT; i++)
        usage_row(f, &mb_views[i]);
    fprintf(f, "\n'mbctl COMMAND --help' or 'mbctl help COMMAND' describes one command.\n"
               "Exit codes: 0 success, 1 refused, 2 usage error, 3 moonbrightd not running\n"
               "or not answering.\n");
}

static void command_help(const struct mb_command *c)
{
    printf("usage: mbctl %s %s\n  %s\n", c->name, c->usage, c->summary);
    if (c->flags & MB_CMD_ADMIN)
        printf("  Administrators only: root and the users in admin_uids of moonbrightd.conf;\n"
               "  mbctl opens a session so the daemon knows who asks.\n");
    if (c->flags & MB_CMD_JSON)
        printf("  --json prints one JSON document instead of a table.\n");
    printf("  Exit codes: 0 success, 1 refused by the daemon, 2 usage error, 3 not running.\n");
}

/* The options mbctl takes before or after the command word. */
static int set_option(struct ctl *ctl, int opt, const char *val)
{
    unsigned long long v;
    switch (opt) {
    case 'r': ctl->runtime_dir = val; return 0;
    case 'd':
        if (!number_arg(val, 0, 255, &v)) {
            fprintf(stderr, "mbctl: bad device '%s' (expected 0-255)\n", val);
            return EXIT_USAGE;
        }
        ctl->device = (int)v;
        return 0;
    case 't':
        if (!number_arg(val, 1, 3600000, &v)) {
            fprintf(stderr, "mbctl: bad timeout '%s' (milliseconds, 1 to 3600000)\n", val);
            return EXIT_USAGE;
        }
        ctl->timeout_ms = (int)v;
        return 0;
    }
    return EXIT_USAGE;
}

/* argv[*i] after the command word as one of those options ("--device 1"
 * or "--device=1"): 1 when taken (*i moves past its value), 0 when it is
 * not one, or an exit code. */
static int after_command_option(struct ctl *ctl, int argc, char **argv, int *i)
{
    static const struct { const char *name; int opt; } opts[] = {
        { "--runtime-dir", 'r' }, { "--device", 'd' }, { "--timeout", 't' },
    };
    for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]); k++) {
        size_t len = strlen(opts[k].name);
        if (strncmp(argv[*i], opts[k].name, len) != 0)
            continue;
        const char *val;
        if (argv[*i][len] == '=') {
            val = argv[*i] + len + 1;
        } else if (argv[*i][len] == '\0') {
            if (*i + 1 >= argc) {
                fprintf(stderr, "mbctl: %s needs a value\n", opts[k].name);
                return EXIT_USAGE;
            }
            val = argv[++*i];
        } else {
            continue;
        }
        int rc = set_option(ctl, opts[k].opt, val);
        return rc ? rc : 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    mb_log_set_ident("mbctl");
    mb_log_set_level(MB_LOG_ERR);
    struct ctl ctl = { .runtime_dir = mb_default_runtime_dir(), .timeout_ms = 3000, .chan = -1 };
    const char *dev = getenv("MOONBRIGHT_DEVICE");
    if (dev && *dev)
        ctl.device = atoi(dev);
    static const struct option longs[] = {
        { "runtime-dir", required_argument, 0, 'r' }, { "device", required_argument, 0, 'd' },
        { "timeout", required_argument, 0, 't' },     { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
        switch (c) {
        case 'r': case 'd': case 't':
            if (set_option(&ctl, c, optarg) != 0)
                return EXIT_USAGE;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    /* `mbctl help [COMMAND]`: the same as --help before or after it. */
    bool help = strcmp(argv[optind], "help") == 0;
    if (help && optind + 1 >= argc) {
        usage(stdout);
        return 0;
    }
    if (help)
        optind++;
    const struct mb_command *row = NULL;
    cli_fn *fn = NULL;
    int cmd = mb_command_by_name(argv[optind]);
    if (cmd >= 0 && (mb_commands[cmd].flags & MB_CMD_CLI)) {
        row = &mb_commands[cmd];
        fn = cli_fns[cmd];
    }
    for (int i = 0; !row && i < MB_VIEW_COUNT; i++)
        if (strcmp(mb_views[i].name, argv[optind]) == 0) {
            row = &mb_views[i];
            fn = view_fns[i];
        }
    if (!row || !fn) {
        fprintf(stderr, "mbctl: unknown command '%s'\n", argv[optind]);
        usage(stderr);
        return EXIT_USAGE;
    }
    if (help) {
        command_help(row);
        return 0;
    }
    /* Common flags after the command word: --json, --help, and the options
     * that may also come before it. */
    int cargc = 0;
    char **cargv = calloc((size_t)(argc - optind + 1), sizeof(*cargv));
    if (!cargv) {
        fprintf(stderr, "mbctl: out of memory\n");
        return EXIT_USAGE;
    }
    for (int i = optind; i < argc; i++) {
        int taken = i > optind ? after_command_option(&ctl, argc, argv, &i) : 0;
        if (taken > 1) {
            free(cargv);
            return taken;
        }
        if (taken == 1)
            continue;
        if (strcmp(argv[i], "--json") == 0 && (row->flags & MB_CMD_JSON)) {
            ctl.json = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            command_help(row);
            free(cargv);
            return 0;
        } else {
            cargv[cargc++] = argv[i];
        }
    }
    int rc = fn(&ctl, cargc, cargv);
    free(cargv);
    ctl_close(&ctl);
    return rc;
}
