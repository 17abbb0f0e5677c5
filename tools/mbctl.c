/* mbctl.c: the command line to inspect and administer moonbrightd. Its
 * commands, usage and help come from common/commands.def, the table the
 * daemon dispatches on. Exit codes: 0 success, 1 the daemon refused,
 * 2 usage error, 3 the daemon is not running or did not answer. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include <moonbright/mbclient.h>

#include "commands.h"
#include "fdpass.h"
#include "log.h"
#include "size.h"
#include "wire.h"

enum { EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_NODAEMON = 3 };

struct ctl {
    const char *runtime_dir;
    int device;
    int timeout_ms;
    bool json;
    void *zctx, *dealer;
};

typedef int cli_fn(struct ctl *ctl, int argc, char **argv);

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
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

static int ctl_connect(struct ctl *ctl)
{
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
    ctl->zctx = zmq_ctx_new();
    ctl->dealer = zmq_socket(ctl->zctx, ZMQ_DEALER);
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
}

/* One request, one reply; maps failures to exit codes. */
static int ctl_call(struct ctl *ctl, Mb__Request *req, Mb__Reply **rep)
{
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    req->id = 1;
    if (mb_wire_send_request(ctl->dealer, req) != 0 ||
        mb_wire_recv_reply(ctl->dealer, 1, ctl->timeout_ms, rep, NULL, NULL) != 0) {
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
    return 0;
}

static int cli_status(struct ctl *ctl, int argc, char **argv)
{
    if (argc > 1) {
        fprintf(stderr, "mbctl: status takes no arguments besides --json\n");
        return EXIT_USAGE;
    }
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Status st = MB__STATUS__INIT;
    req.body_case = MB__REQUEST__BODY_STATUS;
    req.status = &st;
    Mb__Reply *rep;
    int rc = ctl_call(ctl, &req, &rep);
    if (rc)
        return rc;
    if (rep->body_case != MB__REPLY__BODY_STATUS) {
        fprintf(stderr, "mbctl: unexpected reply from moonbrightd\n");
        mb__reply__free_unpacked(rep, NULL);
        return EXIT_REFUSED;
    }
    const Mb__StatusReply *s = rep->status;
    if (ctl->json) {
        printf("{\"backend\":");
        json_str(s->backend);
        printf(",\"device\":%u,\"pid\":%u,\"uptime_ms\":%llu,\"frame_bytes\":%llu,"
               "\"budget_bytes\":%llu,\"frames_total\":%u,\"frames_free\":%u,\"frames_granted\":%u,"
               "\"bytes_free\":%llu,\"bytes_granted\":%llu,\"requests\":%llu,\"malformed\":%llu,"
               "\"refused\":%llu,\"tenants\":[",
               s->device, s->pid, (unsigned long long)s->uptime_ms,
               (unsigned long long)s->frame_bytes, (unsigned long long)s->budget_bytes,
               s->frames_total, s->frames_free, s->frames_granted,
               (unsigned long long)s->bytes_free, (unsigned long long)s->bytes_granted,
               (unsigned long long)s->requests, (unsigned long long)s->malformed,
               (unsigned long long)s->refused);
        for (size_t i = 0; i < s->n_sessions; i++) {
            const Mb__SessionInfo *si = s->sessions[i];
            printf("%s{\"session\":%llu,\"pid\":%u,\"uid\":%u,\"name\":", i ? "," : "",
                   (unsigned long long)si->id, si->pid, si->uid);
            json_str(si->tenant);
            printf(",\"frames\":%u,\"bytes\":%llu}", si->frames, (unsigned long long)si->bytes);
        }
        printf("]}\n");
    } else {
        char a[32], b[32], f[32];
        printf("moonbrightd pid %u, device %u, %s backend, up %llu s\n", s->pid, s->device,
               s->backend, (unsigned long long)(s->uptime_ms / 1000));
        printf("frames   %u total (%s each): %u free, %u granted\n", s->frames_total,
               mb_format_size(s->frame_bytes, f, sizeof(f)), s->frames_free, s->frames_granted);
        printf("budget   %s, %s granted\n", mb_format_size(s->budget_bytes, a, sizeof(a)),
               mb_format_size(s->bytes_granted, b, sizeof(b)));
        printf("requests %llu served, %llu malformed, %llu refused\n",
               (unsigned long long)s->requests, (unsigned long long)s->malformed,
               (unsigned long long)s->refused);
        printf("\n%-8s %-8s %-6s %-20s %8s %12s\n", "SESSION", "PID", "UID", "TENANT", "FRAMES", "BYTES");
        for (size_t i = 0; i < s->n_sessions; i++) {
            const Mb__SessionInfo *si = s->sessions[i];
            printf("%-8llu %-8u %-6u %-20s %8u %12s\n", (unsigned long long)si->id, si->pid,
                   si->uid, si->tenant, si->frames, mb_format_size(si->bytes, a, sizeof(a)));
        }
        if (s->n_sessions == 0)
            printf("(no sessions)\n");
    }
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

/* mbctl's runners for the table's MB_CMD_CLI rows. */
static cli_fn *const cli_fns[MB_CMD_COUNT] = {
    [MB_CMD_status] = cli_status,
};

static void usage(FILE *f)
{
    fprintf(f, "usage: mbctl [--runtime-dir DIR] [--device N] [--timeout MS] COMMAND [ARGS]\n\ncommands:\n");
    for (int i = 0; i < MB_CMD_COUNT; i++)
        if (mb_commands[i].flags & MB_CMD_CLI)
            fprintf(f, "  %-8s %-24s %s\n", mb_commands[i].name, mb_commands[i].usage,
                    mb_commands[i].summary);
    fprintf(f, "\n'mbctl COMMAND --help' describes one command. Exit codes: 0 success, 1 refused,\n"
               "2 usage error, 3 moonbrightd not running or not answering.\n");
}

int main(int argc, char **argv)
{
    mb_log_set_ident("mbctl");
    mb_log_set_level(MB_LOG_ERR);
    struct ctl ctl = { .runtime_dir = mb_default_runtime_dir(), .timeout_ms = 3000 };
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
        char *end;
        switch (c) {
        case 'r': ctl.runtime_dir = optarg; break;
        case 'd':
            ctl.device = (int)strtol(optarg, &end, 10);
            if (*end || end == optarg || ctl.device < 0 || ctl.device > 255) {
                fprintf(stderr, "mbctl: bad device '%s' (expected 0-255)\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 't':
            ctl.timeout_ms = (int)strtol(optarg, &end, 10);
            if (*end || end == optarg || ctl.timeout_ms <= 0) {
                fprintf(stderr, "mbctl: bad timeout '%s' (milliseconds > 0)\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    int cmd = mb_command_by_name(argv[optind]);
    if (cmd < 0 || !(mb_commands[cmd].flags & MB_CMD_CLI) || !cli_fns[cmd]) {
        fprintf(stderr, "mbctl: unknown command '%s'\n", argv[optind]);
        usage(stderr);
        return EXIT_USAGE;
    }
    /* Common flags after the command word: --json and --help. */
    int cargc = 0;
    char **cargv = calloc((size_t)(argc - optind + 1), sizeof(*cargv));
    for (int i = optind; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            ctl.json = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: mbctl %s %s\n  %s\n", mb_commands[cmd].name, mb_commands[cmd].usage,
                   mb_commands[cmd].summary);
            free(cargv);
            return 0;
        } else {
            cargv[cargc++] = argv[i];
        }
    }
    int rc = cli_fns[cmd](&ctl, cargc, cargv);
    free(cargv);
    ctl_close(&ctl);
    return rc;
}
