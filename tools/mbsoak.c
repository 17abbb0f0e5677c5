/* mbsoak.c: a soak of the whole service: N client processes allocate,
 * write, verify, free, share and import at random against a running
 * moonbrightd while the soak kills clients with SIGKILL and starts new ones;
 * it checks the daemon's books every second and, at the end, that every
 * pattern held and every frame came back.
 *
 *   mbsoak [--clients N] [--seconds S] [--kill-ms MS] [--seed X] [--json]
 *   (the daemon: $MOONBRIGHT_RUNTIME_DIR, $MOONBRIGHT_DEVICE)
 * Exit 0: no corruption, books balanced throughout, nothing leaked. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <moonbright/mbclient.h>

#include "fdpass.h"
#include "wire.h"

#define MAXLIVE 64
#define EXIT_CORRUPT 10

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t word(uint64_t seed, size_t i) { return (seed + i) * 0x9e3779b97f4a7c15ull; }

/* Pattern at a few spots of a block (all of a small one): enough to catch
 * a frame handed to two owners or a scrub landing on live data. */
static size_t pattern(uint64_t *p, size_t bytes, uint64_t seed, bool check)
{
    size_t n = bytes / 8, bad = 0;
    size_t step = n > 4096 ? n / 1024 : 1;
    for (size_t i = 0; i < n; i += step) {
        if (check)
            bad += p[i] != word(seed, i);
        else
            p[i] = word(seed, i);
    }
    return bad;
}

struct block {
    void *p;
    size_t bytes;
    uint64_t seed;
    bool imported;
};

/* One worker: random operations until killed (or its op budget is spent). */
static int worker(int id, const char *dir, uint64_t seed)
{
    rng_state = seed | 1;
    char tenant[32];
    snprintf(tenant, sizeof(tenant), "soak-%d", id % 3);
    mb_client *c;
    const char *faults = getenv("MOONBRIGHT_FAULTS");
    bool lenient = faults && *faults;
    int rc = mb_open(&c, tenant);
    for (int tries = 0; lenient && rc != 0 && tries < 10; tries++)
        rc = mb_open(&c, tenant);   /* a lost hello is a clear error: try again */
    if (rc != 0) {
        fprintf(stderr, "mbsoak worker %d: %s\n", id, mb_strerror(rc));
        return 20 - rc;
    }
    bool host = strcmp(mb_backend_name(c), "host") == 0;
    /* Under fault injection any clear error is an acceptable answer; only
     * corruption or a crash is a failure. */
    struct block live[MAXLIVE];
    size_t n = 0;
    for (unsigned long op = 0;; op++) {
        uint64_t r = rnd() % 100;
        if (n < MAXLIVE && r < 45) {
            static const size_t sizes[] = { 1000, 70000, 3u << 20, 12u << 20, 40u << 20 };
            struct block b = { .bytes = sizes[rnd() % 5] + rnd() % 4096, .seed = rnd() };
            rc = mb_malloc(c, b.bytes, &b.p);
            if (rc == MB_ENOMEM || rc == MB_EQUOTA || (lenient && rc < 0))
                continue;   /* the budget is shared: a refusal is fine, a crash is not */
            if (rc != 0) {
                fprintf(stderr, "mbsoak worker %d: alloc: %s\n", id, mb_strerror(rc));
                return 20 - rc;
            }
            if (host)
                pattern(b.p, b.bytes, b.seed, false);
            live[n++] = b;
        } else if (n && r < 80) {
            size_t i = rnd() % n;
            if (host && pattern(live[i].p, live[i].bytes, live[i].seed, true)) {
                fprintf(stderr, "mbsoak worker %d: pattern of a %zu-byte block corrupted\n", id,
                        live[i].bytes);
                return EXIT_CORRUPT;
            }
            if ((rc = mb_free(c, live[i].p)) != 0 && !lenient) {
                fprintf(stderr, "mbsoak worker %d: free: %s\n", id, mb_strerror(rc));
                return 20 - rc;
            }
            live[i] = live[--n];
        } else if (n && r < 90) {
            /* Share a range of its own: leave a token file for another worker. */
            size_t i = rnd() % n;
            mb_share_token t;
            if (live[i].imported || live[i].bytes < (9u << 20) || mb_export(c, live[i].p, &t) != 0)
                continue;
            char path[300], tmp[310];
            snprintf(path, sizeof(path), "%s/soak-token-%d-%lu", dir, id, op);
            snprintf(tmp, sizeof(tmp), "%s.tmp", path);
            FILE *f = fopen(tmp, "w");
            if (!f)
                continue;
            fwrite(&t, sizeof(t), 1, f);
            fprintf(f, " %zu %llu\n", live[i].bytes, (unsigned long long)live[i].seed);
            fclose(f);
            rename(tmp, path);
        } else if (n < MAXLIVE) {
            /* Import whatever token another worker left. */
            char cmd[400];
            snprintf(cmd, sizeof(cmd), "ls %s 2>/dev/null | grep '^soak-token-' | grep -v '\\.tmp$' | head -1", dir);
            FILE *ls = popen(cmd, "r");
            char name[256] = "";
            if (!ls)
                continue;
            if (!fgets(name, sizeof(name), ls))
                name[0] = '\0';
            pclose(ls);
            name[strcspn(name, "\n")] = '\0';
            if (!*name)
                continue;
            char path[600];
            snprintf(path, sizeof(path), "%s/%s", dir, name);
            FILE *f = fopen(path, "r");
            if (!f)
                continue;
            mb_share_token t;
            size_t bytes = 0;
            unsigned long long s = 0;
            bool ok = fread(&t, sizeof(t), 1, f) == 1 && fscanf(f, " %zu %llu", &bytes, &s) == 2;
            fclose(f);
            if (unlink(path) != 0 || !ok)
                continue;   /* another worker took it first */
            struct block b = { .imported = true, .seed = s };
            size_t got = 0;
            if (mb_import(c, &t, &b.p, &got) != 0)
                continue;   /* revoked (the exporter freed it or died): fine */
            b.bytes = bytes;
            /* The exporter may free or die at any time: the memory stays. */
            if (host && pattern(b.p, b.bytes, b.seed, true)) {
                /* The exporter may have rewritten nothing: a mismatch here
                 * means the frames are not the exporter's. */
                fprintf(stderr, "mbsoak worker %d: imported block does not hold the exporter's pattern\n", id);
                return EXIT_CORRUPT;
            }
            live[n++] = b;
        }
    }
}

/* ---- the parent ---- */

struct books {
    uint32_t total, free_, granted, sessions;
};

static int status_once(void *dealer, uint64_t *id, struct books *b)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Status st = MB__STATUS__INIT;
    req.body_case = MB__REQUEST__BODY_STATUS;
    req.status = &st;
    req.id = ++*id;
    Mb__Reply *rep;
    int rc = mb_wire_send_request(dealer, &req);
    if (rc == 0)
        rc = mb_wire_recv_reply(dealer, req.id, 2000, &rep, NULL, NULL);
    if (rc != 0)
        return rc;
    if (rep->body_case != MB__REPLY__BODY_STATUS) {
        mb__reply__free_unpacked(rep, NULL);
        return MB_EPROTO;
    }
    b->total = rep->status->frames_total;
    b->free_ = rep->status->frames_free;
    b->granted = rep->status->frames_granted;
    b->sessions = (uint32_t)rep->status->n_sessions;
    mb__reply__free_unpacked(rep, NULL);
    return 0;
}

/* Under fault injection a status message may be lost: ask up to 5 times. */
static int status(void *dealer, uint64_t *id, struct books *b)
{
    int rc = MB_EUNAVAIL;
    for (int i = 0; i < 5 && rc != 0; i++)
        rc = status_once(dealer, id, b);
    return rc;
}

static pid_t spawn(const char *self, int id, uint64_t seed)
{
    char ids[16], seeds[32];
    snprintf(ids, sizeof(ids), "%d", id);
    snprintf(seeds, sizeof(seeds), "%llu", (unsigned long long)seed);
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, "--worker", ids, "--seed", seeds, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    int clients = 4, seconds = 30, kill_ms = 700, worker_id = -1;
    uint64_t seed = 12345;
    bool json = false;
    static const struct option lo[] = {
        { "clients", required_argument, 0, 'c' }, { "seconds", required_argument, 0, 's' },
        { "kill-ms", required_argument, 0, 'k' }, { "seed", required_argument, 0, 'S' },
        { "worker", required_argument, 0, 'w' },  { "json", no_argument, 0, 'j' },
        { "help", no_argument, 0, 'h' },          { 0, 0, 0, 0 },
    };
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'c': clients = atoi(optarg); break;
        case 's': seconds = atoi(optarg); break;
        case 'k': kill_ms = atoi(optarg); break;
        case 'S': seed = strtoull(optarg, NULL, 0); break;
        case 'w': worker_id = atoi(optarg); break;
        case 'j': json = true; break;
        case 'h':
            printf("usage: mbsoak [--clients N] [--seconds S] [--kill-ms MS (0: no kills)] [--seed X] [--json]\n");
            return 0;
        default: return 2;
        }
    }
    if (clients < 1 || clients > 256 || seconds < 1 || kill_ms < 0) {
        fprintf(stderr, "mbsoak: bad arguments (clients 1-256, seconds >= 1, kill-ms >= 0)\n");
        return 2;
    }
    const char *dir = mb_default_runtime_dir();
    if (worker_id >= 0)
        return worker(worker_id, dir, seed);

    char ep[300];
    mb_ctl_endpoint(ep, sizeof(ep), dir, 0);
    void *zctx = zmq_ctx_new(), *dealer = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof(zero));
    uint64_t req_id = 0;
    struct books b0;
    if (zmq_connect(dealer, ep) != 0 || status(dealer, &req_id, &b0) != 0) {
        fprintf(stderr, "mbsoak: moonbrightd is not answering at %s\n", ep);
        return 3;
    }
    rng_state = seed | 1;
    pid_t *pids = calloc((size_t)clients, sizeof(*pids));
    int next_id = 0;
    for (int i = 0; i < clients; i++)
        pids[i] = spawn("/proc/self/exe", next_id++, rnd());
    unsigned long kills = 0, checks = 0, unbalanced = 0, respawns = 0;
    int failures = 0;
    long elapsed = 0, since_kill = 0;
    while (elapsed < seconds * 1000L) {
        sleep_ms(100);
        elapsed += 100;
        since_kill += 100;
        for (int i = 0; i < clients; i++) {   /* a worker that exited by itself failed */
            int st;
            if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                fprintf(stderr, "mbsoak: worker pid %d exited (%d)\n", (int)pids[i],
                        WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
                failures++;
                pids[i] = spawn("/proc/self/exe", next_id++, rnd());
                respawns++;
            }
        }
        if (kill_ms && since_kill >= kill_ms) {
            int i = (int)(rnd() % (uint64_t)clients);
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = spawn("/proc/self/exe", next_id++, rnd());
            kills++;
            since_kill = 0;
        }
        if (elapsed % 1000 == 0) {
            struct books b;
            if (status(dealer, &req_id, &b) != 0) {
                fprintf(stderr, "mbsoak: the daemon stopped answering\n");
                failures++;
                break;
            }
            checks++;
            if (b.free_ + b.granted != b.total)
                unbalanced++;
            fprintf(stderr, "mbsoak: %lds: frames %u total, %u free, %u granted; %lu kills\n",
                    elapsed / 1000, b.total, b.free_, b.granted, kills);
        }
    }
    for (int i = 0; i < clients; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
    /* Every session is gone: every frame must be back. */
    struct books end = { 0 };
    int tries = 0;
    while (status(dealer, &req_id, &end) == 0 && (end.granted || end.sessions) && tries++ < 100)
        sleep_ms(50);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -f %s/soak-token-*", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "mbsoak: failed to remove leftover tokens\n");
    bool leak = end.granted != 0 || end.free_ + end.granted != end.total;
    bool ok = failures == 0 && unbalanced == 0 && !leak;
    if (json)
        printf("{\"tool\":\"mbsoak\",\"clients\":%d,\"seconds\":%d,\"kills\":%lu,\"respawns\":%lu,"
               "\"worker_failures\":%d,\"book_checks\":%lu,\"unbalanced\":%lu,\"frames_total\":%u,"
               "\"frames_granted_at_end\":%u,\"ok\":%s}\n", clients, seconds, kills, respawns, failures,
               checks, unbalanced, end.total, end.granted, ok ? "true" : "false");
    else
        printf("mbsoak: %d clients, %d s, %lu kills, %d worker failures, %lu book checks (%lu "
               "unbalanced), at the end %u of %u frames granted: %s\n", clients, seconds, kills,
               failures, checks, unbalanced, end.granted, end.total, ok ? "PASS" : "FAIL");
    zmq_close(dealer);
    zmq_ctx_term(zctx);
    free(pids);
    return ok ? 0 : 1;
}
