/* test_integration.c: a real moonbrightd with separate client processes
 * over ZeroMQ and the handle channel: stitched allocations across frame
 * boundaries, SIGKILL reclamation, budget exhaustion, hostile bytes on both
 * sockets, one daemon per runtime directory, mbctl without a daemon, a
 * daemon restart under clients that hold and share memory, large frames
 * by the frame plan (reuse, scrubbing, re-creation) and by the exact plan
 * near a full budget, granted frames that keep their descriptors, and the
 * library's environment read with warnings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "fdpass.h"
#include "harness.h"
#include "wire.h"

#define FRAME (64u << 10)

static const char *const small_frames[] = { "--frame-size", "64K", "--budget", "64M", NULL };

/* A holder client, asserted to have started. */
static pid_t spawn_holder(struct mbt_daemon *d, const char *size, const char *seed,
                          const char *tenant, int *out, int *in)
{
    pid_t pid = mbt_spawn_holder(d, size, seed, tenant, out, in);
    assert_true(pid > 0);
    return pid;
}

/* The daemon's status says these frames and bytes are granted. */
static void assert_granted(const struct mbt_daemon *d, int frames, uint64_t bytes)
{
    struct json *j = mbt_status(d);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "frames_granted"), frames);
    assert_int_equal((uint64_t)json_num(j, "bytes_granted"), bytes);
    json_free(j);
}

/* Poll status until frames_granted reaches want (up to 10 s); returns the
 * last value seen. */
static int wait_granted(const struct mbt_daemon *d, int want)
{
    return (int)mbt_status_wait(d, "frames_granted", want, 10000);
}

static void three_clients_stitch_and_verify(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, small_frames), 0);
    /* 12.5 MiB + 24 bytes over 64 KiB frames (above the pool's 8 MiB, so a
     * stitched range of its own): 201 frames, the last one partial. */
    char size[32];
    snprintf(size, sizeof(size), "%u", 200 * FRAME + 24);
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        char seed[16], tenant[16];
        snprintf(seed, sizeof(seed), "%d", 1000 + i);
        snprintf(tenant, sizeof(tenant), "tenant%d", i);
        const char *argv[] = { MB_CLIENT_BIN, "pattern", size, seed, tenant, NULL };
        pids[i] = mbt_spawn(&d, argv, NULL, NULL);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(mbt_wait(pids[i]), 0);
    struct json *j = mbt_status(&d);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "frames_granted"), 0);
    assert_true(json_num(j, "frames_total") >= 201);
    assert_int_equal((int)json_num(j, "frames_free"), (int)json_num(j, "frames_total"));
    assert_int_equal((int)json_num(j, "frame_bytes"), FRAME);
    const struct json *backend = json_get(j, "backend");
    assert_non_null(backend);
    assert_string_equal(backend->str, "host");
    assert_int_equal(json_get(j, "tenants")->n, 0);
    json_free(j);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static void sigkill_returns_frames(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, small_frames), 0);
    char size[32];
    snprintf(size, sizeof(size), "%u", 160 * FRAME);   /* stitched: exactly 160 frames */
    int out, in;
    pid_t pid = spawn_holder(&d, size, "7", "victim", &out, &in);
    struct json *j = mbt_status(&d);
    assert_non_null(j);
    assert_int_equal((int)json_num(j, "frames_granted"), 160);
    const struct json *t = json_get(j, "tenants");
    assert_int_equal(t->n, 1);
    assert_string_equal(json_get(&t->kids[0], "name")->str, "victim");
    assert_int_equal((int)json_num(&t->kids[0], "pid"), pid);
    assert_int_equal((int)json_num(&t->kids[0], "frames"), 160);
    json_free(j);

    kill(pid, SIGKILL);
    assert_int_equal(mbt_wait(pid), 128 + SIGKILL);
    close(out);
    close(in);
    assert_int_equal(wait_granted(&d, 0), 0);
    j = mbt_status(&d);
    assert_int_equal((int)json_num(j, "frames_free"), (int)json_num(j, "frames_total"));
    assert_int_equal(json_get(j, "tenants")->n, 0);
    json_free(j);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* How many requests of one command the daemon has served (metrics). */
static double command_count(const struct mbt_daemon *d, const char *name)
{
    const char *args[] = { "metrics", NULL };
    struct json *j = mbt_ctl_json(d, NULL, args);
    assert_non_null(j);
    const struct json *c = json_get(j, "commands");
    double n = -1;
    for (size_t i = 0; c && i < c->n; i++)
        if (strcmp(json_get(&c->kids[i], "name")->str, name) == 0)
            n = json_num(&c->kids[i], "count");
    json_free(j);
    return n;
}

static void budget_exhausted_then_still_serving(void **state)
{
    static const char *const tiny[] = { "--frame-size", "64K", "--budget", "512K", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, tiny), 0);
    char size[32];
    snprintf(size, sizeof(size), "%u", 9 * FRAME);
    const char *big[] = { MB_CLIENT_BIN, "alloc", size, NULL };
    char out[512];
    assert_int_equal(mbt_run(&d, big, out, sizeof(out), false), 20 - MB_ENOMEM);
    assert_non_null(strstr(out, "out of memory"));
    /* With large frames (the default), more than one grant may hold (256
     * frames of the largest order: 8 GiB at 64 KiB) is refused by the
     * library itself, as the daemon would, before it plans a frame for each
     * part of it (2^62 bytes would take gigabytes of plan), and the daemon
     * never hears of it. */
    setenv("MOONBRIGHT_LARGE_FRAMES", "1", 1);
    const char *const sizes[] = { "0", "8590000000", "4611686018427387904" };
    double hellos = command_count(&d, "hello"), grants = command_count(&d, "grant");
    assert_true(hellos >= 1 && grants >= 0);
    for (int i = 0; i < 3; i++) {
        const char *one[] = { MB_CLIENT_BIN, "alloc", sizes[i], NULL };
        int rc = mbt_run(&d, one, out, sizeof(out), false);
        setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);   /* (for the next tests, should this fail) */
        assert_int_equal(rc, 20 - MB_EINVAL);
        assert_non_null(strstr(out, "invalid argument"));
        setenv("MOONBRIGHT_LARGE_FRAMES", "1", 1);
    }
    /* Three clients came (hello) and asked the daemon for nothing. */
    assert_true(command_count(&d, "hello") == hellos + 3);
    assert_true(command_count(&d, "grant") == grants);
    setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);
    /* A holder takes 6 of 8 frames; another asking for 3 is refused... */
    snprintf(size, sizeof(size), "%u", 6 * FRAME);
    const char *hold[] = { MB_CLIENT_BIN, "hold", size, "3", NULL };
    int fd, in;
    pid_t holder = mbt_spawn(&d, hold, &fd, &in);
    char line[64];
    assert_true(mbt_read_line(fd, line, sizeof(line), 10000) >= 0);
    assert_true(mbt_read_line(fd, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "ready");
    snprintf(size, sizeof(size), "%u", 3 * FRAME);
    assert_int_equal(mbt_run(&d, big, out, sizeof(out), false), 20 - MB_ENOMEM);
    /* ...while 2 frames still fit, and the holder's data is untouched. */
    snprintf(size, sizeof(size), "%u", 2 * FRAME);
    const char *fits[] = { MB_CLIENT_BIN, "pattern", size, "9", NULL };
    assert_int_equal(mbt_run(&d, fits, out, sizeof(out), false), 0);
    assert_int_equal(write(in, "check\n", 6), 6);
    assert_true(mbt_read_line(fd, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "intact");
    close(in);   /* end of input: the holder frees and exits */
    assert_int_equal(mbt_wait(holder), 0);
    close(fd);
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 0);
    assert_true(mbt_daemon_alive(&d));
    assert_true(mbt_status_num(&d, "budget_bytes") == 8 * FRAME);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Send raw bytes as a request and return the reply's code (1 = no reply). */
static int raw_request(void *dealer, const void *buf, size_t len, int flags)
{
    if (zmq_send(dealer, buf, len, flags) < 0)
        return 2;
    if (flags & ZMQ_SNDMORE)
        zmq_send(dealer, "x", 1, 0);
    zmq_pollitem_t it = { dealer, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, 2000) <= 0)
        return 1;
    zmq_msg_t m;
    zmq_msg_init(&m);
    zmq_msg_recv(&m, dealer, 0);
    Mb__Reply *r = mb__reply__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    zmq_msg_close(&m);
    if (!r)
        return 3;
    int code = r->code;
    mb__reply__free_unpacked(r, NULL);
    return code;
}

static void hostile_bytes_leave_daemon_serving(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, small_frames), 0);
    char ep[256];
    mb_ctl_endpoint(ep, sizeof(ep), d.dir, 0);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_connect(s, ep), 0);

    static const uint8_t garbage[] = { 0xde, 0xad, 0xbe, 0xef, 0xff, 0x07 };
    assert_int_equal(raw_request(s, garbage, sizeof(garbage), 0), MB_EPROTO);
    /* A valid request, truncated in the middle of its hello token. */
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Hello h = MB__HELLO__INIT;
    uint8_t tok[16] = { 1 };
    h.token.data = tok;
    h.token.len = 16;
    h.version = MB_PROTOCOL_VERSION;
    req.body_case = MB__REQUEST__BODY_HELLO;
    req.hello = &h;
    req.id = 9;
    uint8_t buf[128];
    size_t len = mb__request__pack(&req, buf);
    assert_int_equal(raw_request(s, buf, len - 5, 0), MB_EPROTO);
    /* Two frames where one is expected. */
    assert_int_equal(raw_request(s, buf, len, ZMQ_SNDMORE), MB_EPROTO);
    /* Empty message, and a request with no body. */
    assert_int_equal(raw_request(s, "", 0, 0), MB_EPROTO);
    /* A well-formed hello with a forged token is refused. */
    assert_int_equal(raw_request(s, buf, len, 0), MB_EPERM);
    /* Session commands without a session are refused. */
    Mb__Grant g = MB__GRANT__INIT;
    g.bytes = FRAME;
    req.body_case = MB__REQUEST__BODY_GRANT;
    req.grant = &g;
    len = mb__request__pack(&req, buf);
    assert_int_equal(raw_request(s, buf, len, 0), MB_EPERM);
    zmq_close(s);

    /* Oversized: the daemon drops the peer rather than reading it. */
    void *big_s = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(big_s, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_connect(big_s, ep), 0);
    size_t big_len = 2 * MB_WIRE_MAX_BYTES;
    uint8_t *big = calloc(1, big_len);
    assert_int_equal(raw_request(big_s, big, big_len, 0), 1);
    free(big);
    zmq_close(big_s);
    zmq_ctx_term(ctx);

    /* Junk on the handle channel ends that session only. */
    char path[256];
    mb_chan_path(path, sizeof(path), d.dir, 0);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa;
    assert_int_equal(mb_chan_sockaddr(&sa, path), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(write(fd, "junkjunk", 8), 8);
    close(fd);

    assert_true(mbt_daemon_alive(&d));
    struct json *j = mbt_status(&d);
    assert_non_null(j);
    assert_true(json_num(j, "malformed") >= 4);
    assert_true(json_num(j, "refused") >= 2);
    assert_int_equal((int)json_num(j, "frames_granted"), 0);
    json_free(j);
    /* And it still serves real clients. */
    char size[32];
    snprintf(size, sizeof(size), "%u", 3 * FRAME);
    const char *argv[] = { MB_CLIENT_BIN, "pattern", size, "5", NULL };
    char out[256];
    assert_int_equal(mbt_run(&d, argv, out, sizeof(out), false), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A exports, B imports and reads A's data, A frees (and exits), B still
 * reads, B frees, the frames return; a wrong or replayed token is refused. */
static void sharing_outlives_the_exporter(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, small_frames), 0);
    char size[32];
    unsigned bytes = 160 * FRAME;   /* a range of its own: shareable */
    snprintf(size, sizeof(size), "%u", bytes);
    const char *exp[] = { MB_CLIENT_BIN, "export", size, "77", "exporter", NULL };
    int a_out, a_in;
    pid_t a = mbt_spawn(&d, exp, &a_out, &a_in);
    char line[160], token[160];
    assert_true(mbt_read_line(a_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "alloc: success");
    assert_true(mbt_read_line(a_out, line, sizeof(line), 10000) >= 0);
    assert_int_equal(strncmp(line, "token ", 6), 0);
    snprintf(token, sizeof(token), "%s", line + 6);
    assert_int_equal(strlen(token), 64);

    /* A forged token is refused. */
    char forged[160];
    snprintf(forged, sizeof(forged), "%s", token);
    forged[0] = forged[0] == '0' ? '1' : '0';
    const char *bad[] = { MB_CLIENT_BIN, "import", forged, "77", NULL };
    char out[256];
    assert_int_equal(mbt_run(&d, bad, out, sizeof(out), false), 20 - MB_ENOENT);

    const char *imp[] = { MB_CLIENT_BIN, "import", token, "77", NULL };
    int b_out, b_in;
    pid_t b = mbt_spawn(&d, imp, &b_out, &b_in);
    assert_true(mbt_read_line(b_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "import: success");
    snprintf(line, sizeof(line), "%u\n", bytes);
    assert_int_equal(write(b_in, line, strlen(line)), (ssize_t)strlen(line));
    assert_true(mbt_read_line(b_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "intact");

    /* The same token again is refused: it was used. */
    assert_int_equal(mbt_run(&d, imp, out, sizeof(out), false), 20 - MB_ENOENT);

    /* A frees and exits; B still reads A's data; the frames stay out of the pool. */
    assert_int_equal(write(a_in, "free\n", 5), 5);
    assert_true(mbt_read_line(a_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "freed");
    close(a_in);
    assert_int_equal(mbt_wait(a), 0);
    close(a_out);
    snprintf(line, sizeof(line), "%u\n", bytes);
    assert_int_equal(write(b_in, line, strlen(line)), (ssize_t)strlen(line));
    assert_true(mbt_read_line(b_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "intact");
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 160);

    /* B frees: every frame is back. */
    close(b_in);
    assert_int_equal(mbt_wait(b), 0);
    close(b_out);
    assert_int_equal(wait_granted(&d, 0), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Tenant A writes a pattern into every frame of the budget, frees, exits;
 * tenant B is granted the same frames and reads only zeros. */
static void frames_are_scrubbed_between_tenants(void **state)
{
    static const char *const args[] = { "--frame-size", "64K", "--budget", "10M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, args), 0);
    char size[32];
    snprintf(size, sizeof(size), "%u", 160 * FRAME);   /* the whole budget */
    const char *a[] = { MB_CLIENT_BIN, "pattern", size, "99", "tenant-a", NULL };
    char out[256];
    assert_int_equal(mbt_run(&d, a, out, sizeof(out), false), 0);
    const char *b[] = { MB_CLIENT_BIN, "zeros", size, "tenant-b", NULL };
    assert_int_equal(mbt_run(&d, b, out, sizeof(out), false), 0);
    assert_non_null(strstr(out, "nonzero: 0"));
    struct json *j = mbt_status(&d);
    assert_non_null(j);
    assert_true(json_num(j, "scrubs") >= 160);   /* every frame changed tenant */
    assert_int_equal((int)json_num(j, "frames_total"), 160);
    json_free(j);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* SIGKILL the daemon while three clients hold memory with known patterns;
 * start it again: the clients report what they hold, their patterns are
 * intact, they go on allocating and freeing, and status shows the same
 * holdings as before the kill. */
static void daemon_restart_keeps_clients(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, small_frames), 0);
    char size[32];
    snprintf(size, sizeof(size), "%u", 160 * FRAME);
    int out[3], in[3];
    pid_t pid[3];
    char line[128];
    for (int i = 0; i < 3; i++) {
        char seed[16], tenant[16];
        snprintf(seed, sizeof(seed), "%d", 500 + i);
        snprintf(tenant, sizeof(tenant), "keeper%d", i);
        pid[i] = spawn_holder(&d, size, seed, tenant, &out[i], &in[i]);
    }
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 480);

    kill(d.pid, SIGKILL);
    /* While it is down, what needs the daemon fails clearly, and soon. */
    assert_int_equal(write(in[0], "alloc\n", 6), 6);
    assert_true(mbt_read_line(out[0], line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "alloc: daemon unavailable");
    assert_int_equal(mbt_daemon_restart(&d, small_frames), 0);
    /* The clients notice and report their frames within moments. */
    assert_int_equal(wait_granted(&d, 480), 480);
    struct json *j = mbt_status(&d);
    const struct json *t = json_get(j, "tenants");
    assert_int_equal(t->n, 3);
    for (size_t k = 0; k < t->n; k++)
        assert_int_equal((int)json_num(&t->kids[k], "frames"), 160);
    json_free(j);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(write(in[i], "check\n", 6), 6);
        assert_true(mbt_read_line(out[i], line, sizeof(line), 10000) >= 0);
        assert_string_equal(line, "intact");
        assert_int_equal(write(in[i], "alloc\n", 6), 6);
        assert_true(mbt_read_line(out[i], line, sizeof(line), 10000) >= 0);
        assert_string_equal(line, "alloc: success");
    }
    for (int i = 0; i < 3; i++) {
        close(in[i]);
        assert_int_equal(mbt_wait(pid[i]), 0);
        close(out[i]);
    }
    assert_int_equal(wait_granted(&d, 0), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Send a holder one command and expect its one-line answer. */
static void holder_says(int in, int out, const char *cmd, const char *want)
{
    char line[128];
    assert_int_equal(write(in, cmd, strlen(cmd)), (ssize_t)strlen(cmd));
    assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, want);
}

/* The daemon comes back with another frame size: the client cannot hand it
 * frames of its own size, so it stays without a daemon (its memory intact,
 * calls that need the daemon refused) and reports nothing; once a daemon
 * with its frame size is back it reattaches. */
static void daemon_back_with_other_frames(void **state)
{
    static const char *const other[] = { "--frame-size", "128K", "--budget", "64M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, small_frames), 0);
    char size[32];
    snprintf(size, sizeof(size), "%u", 16 * FRAME);
    int out, in;
    pid_t pid = spawn_holder(&d, size, "77", "steadfast", &out, &in);
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 16);
    kill(d.pid, SIGKILL);
    assert_int_equal(mbt_daemon_restart(&d, other), 0);
    mbt_sleep_ms(1500);   /* reconnection attempts come and are refused */
    holder_says(in, out, "alloc\n", "alloc: daemon unavailable");
    holder_says(in, out, "check\n", "intact");
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 0);
    kill(d.pid, SIGKILL);
    assert_int_equal(mbt_daemon_restart(&d, small_frames), 0);
    assert_int_equal(wait_granted(&d, 16), 16);
    holder_says(in, out, "check\n", "intact");
    close(in);
    assert_int_equal(mbt_wait(pid), 0);
    close(out);
    assert_int_equal(wait_granted(&d, 0), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A shared range across a daemon restart: the exporter reports the frames
 * as its own, the importer reports holds; after the restart the exporter
 * frees (the frames stay booked for the importer, which still reads the
 * data), and once the importer lets go every frame is back. */
static void daemon_restart_keeps_shares(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, small_frames), 0);
    char size[32], line[160], token[160];
    unsigned bytes = 160 * FRAME;   /* a range of its own: shareable */
    snprintf(size, sizeof(size), "%u", bytes);
    const char *exp[] = { MB_CLIENT_BIN, "export", size, "88", "owner", NULL };
    int a_out, a_in;
    pid_t a = mbt_spawn(&d, exp, &a_out, &a_in);
    assert_true(mbt_read_line(a_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "alloc: success");
    assert_true(mbt_read_line(a_out, line, sizeof(line), 10000) >= 0);
    assert_int_equal(strncmp(line, "token ", 6), 0);
    snprintf(token, sizeof(token), "%s", line + 6);
    const char *imp[] = { MB_CLIENT_BIN, "import", token, "88", NULL };
    int b_out, b_in;
    pid_t b = mbt_spawn(&d, imp, &b_out, &b_in);
    assert_true(mbt_read_line(b_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "import: success");
    assert_int_equal((int)mbt_status_num(&d, "frames_granted"), 160);

    kill(d.pid, SIGKILL);
    assert_int_equal(mbt_daemon_restart(&d, small_frames), 0);
    assert_int_equal(wait_granted(&d, 160), 160);   /* both reported, booked once */
    char check[32];
    snprintf(check, sizeof(check), "%u\n", bytes);
    assert_int_equal(write(b_in, check, strlen(check)), (ssize_t)strlen(check));
    assert_true(mbt_read_line(b_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "intact");

    /* The owner frees (and allocates 160 new frames): the shared ones stay
     * booked for the importer, which still reads the owner's data. */
    assert_int_equal(write(a_in, "free\n", 5), 5);
    assert_true(mbt_read_line(a_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "freed");
    assert_int_equal(wait_granted(&d, 320), 320);
    assert_int_equal(write(b_in, check, strlen(check)), (ssize_t)strlen(check));
    assert_true(mbt_read_line(b_out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "intact");
    close(b_in);
    assert_int_equal(mbt_wait(b), 0);
    close(b_out);
    assert_int_equal(wait_granted(&d, 160), 160);   /* the shared frames left the books */
    close(a_in);
    assert_int_equal(mbt_wait(a), 0);
    close(a_out);
    assert_int_equal(wait_granted(&d, 0), 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static void second_daemon_refuses(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, small_frames), 0);
    const char *argv[] = { MB_DAEMON_BIN, "--foreground", "--backend", "host", "--runtime-dir",
                           d.dir, NULL };
    char out[1024];
    assert_int_equal(mbt_run(&d, argv, out, sizeof(out), true), 1);
    assert_non_null(strstr(out, "already serves device 0"));
    assert_true(mbt_daemon_alive(&d));
    assert_true(mbt_status_num(&d, "frames_total") >= 0);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static void bad_options_are_refused(void **state)
{
    struct mbt_daemon d = { .dir = "/tmp" };
    static const char *const bad[][3] = {
        { "--budget", "lots" }, { "--frame-size", "1000" }, { "--backend", "gpu" },
        { "--device", "x" }, { "--log-level", "loud" }, { "--device-headroom", "roomy" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char dir[] = "/tmp/mbtest.XXXXXX";
        assert_non_null(mkdtemp(dir));
        const char *argv[] = { MB_DAEMON_BIN, "--foreground", "--backend", "host", "--runtime-dir",
                               dir, bad[i][0], bad[i][1], NULL };
        char out[1024];
        int rc = mbt_run(&d, argv, out, sizeof(out), true);
        assert_true(rc == 1 || rc == 2);
        assert_non_null(strstr(out, bad[i][1]));   /* the error names the bad value */
        rmdir(dir);
    }
}

/* The library's environment: a value it cannot take is ignored with a
 * warning naming it, and the process still allocates. */
static void bad_environment_warns(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, NULL), 0);
    static const char *const bad[][2] = {
        { "MOONBRIGHT_LOG", "loud" }, { "MOONBRIGHT_IDLE_MS", "soon" }, { "MOONBRIGHT_CACHE", "-5" },
        { "MOONBRIGHT_TIMEOUT_MS", "0" }, { "MOONBRIGHT_DEVICE", "x" }, { "MOONBRIGHT_HEAP_PUNCH", "7" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv(bad[i][0], bad[i][1], 1);
        const char *argv[] = { MB_CLIENT_BIN, "alloc", "3000000", NULL };
        char out[1024], want[128];
        assert_int_equal(mbt_run(&d, argv, out, sizeof(out), true), 0);
        snprintf(want, sizeof(want), "ignoring %s=%s", bad[i][0], bad[i][1]);
        if (!strstr(out, want))
            fail_msg("no '%s' in: %s", want, out);
        unsetenv(bad[i][0]);
    }
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static void config_errors_name_file_and_line(void **state)
{
    static const char *const bad[][2] = {
        { "# ok\nbudget = lots\n", ":2:" },
        { "backend = host\n\nfrobnicate = 1\n", ":3:" },
        { "[tenant a]\nmax = 1G\nmin = 2G\n", ":3:" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char conf[] = "/tmp/mbtest-badconf.XXXXXX", dir[] = "/tmp/mbtest.XXXXXX";
        int fd = mkstemp(conf);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, bad[i][0], strlen(bad[i][0])), (ssize_t)strlen(bad[i][0]));
        close(fd);
        assert_non_null(mkdtemp(dir));
        struct mbt_daemon d = { .dir = "/tmp" };
        const char *argv[] = { MB_DAEMON_BIN, "--foreground", "--backend", "host", "--runtime-dir",
                               dir, "--config", conf, NULL };
        char out[1024];
        assert_int_equal(mbt_run(&d, argv, out, sizeof(out), true), 2);
        char where[96];
        snprintf(where, sizeof(where), "%s%s", conf, bad[i][1]);
        assert_non_null(strstr(out, where));   /* FILE:LINE: reason */
        unlink(conf);
        rmdir(dir);
    }
}

/* Plain allocations above the pool's range get the few large frames of the
 * frame plan: 150 units + 24 bytes -> 128 + 16 + 8 units, three frames. The
 * pattern crosses the boundaries between them intact; another tenant of the
 * same uid gets the same three frames back, scrubbed; and an order-0 request
 * that needs the whole budget re-creates them as small frames instead of
 * failing while they sit free. */
static void large_frames_by_plan(void **state)
{
    static const char *const args[] = { "--frame-size", "64K", "--budget", "10M", NULL };
    setenv("MOONBRIGHT_LARGE_FRAMES", "1", 1);
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, args), 0);
    char size[32], line[128];
    snprintf(size, sizeof(size), "%u", 150 * FRAME + 24);
    int out, in;
    pid_t pid = spawn_holder(&d, size, "31", "big-a", &out, &in);
    assert_granted(&d, 3, 152 * FRAME);
    assert_int_equal(write(in, "check\n", 6), 6);
    assert_true(mbt_read_line(out, line, sizeof(line), 10000) >= 0);
    assert_string_equal(line, "intact");
    kill(pid, SIGKILL);
    mbt_wait(pid);
    close(in);
    close(out);
    assert_int_equal(wait_granted(&d, 0), 0);

    char out2[256];
    const char *b[] = { MB_CLIENT_BIN, "zeros", size, "big-b", NULL };
    assert_int_equal(mbt_run(&d, b, out2, sizeof(out2), false), 0);
    assert_non_null(strstr(out2, "nonzero: 0"));
    struct json *j = mbt_status(&d);
    /* The same three frames (scrubbed: another tenant of the same uid),
     * beside at most one warm spare of each of their orders. */
    assert_true(json_num(j, "frames_total") <= 6);
    assert_true(json_num(j, "scrubs") >= 3);
    json_free(j);

    /* Order-0 frames for the whole budget: the free large frames make room. */
    setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);
    snprintf(size, sizeof(size), "%u", 160 * FRAME);
    const char *c[] = { MB_CLIENT_BIN, "pattern", size, "32", "small-c", NULL };
    assert_int_equal(mbt_run(&d, c, out2, sizeof(out2), false), 0);
    j = mbt_status(&d);
    assert_int_equal((int)json_num(j, "frames_total"), 160);
    assert_int_equal((int)json_num(j, "bytes_free"), 160 * FRAME);
    json_free(j);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* Near a full budget: an allocation whose frame plan rounds past the room
 * left (398 units: the plan takes 400), where its bytes in whole units fit,
 * gets the exact plan's few large frames (256 + 128 + 8 + 4 + 2 units), not
 * one frame per unit (398 of them where the client asks for no exact
 * plan); one too large even then (410 units) fails at once,
 * without the daemon making a grant's worth of order-0 frames first (256,
 * before the rest is refused). */
static void exact_plan_near_the_budget(void **state)
{
    (void)state;
    static const char *const args[] = { "--frame-size", "64K", "--budget", "25472K", NULL };
    setenv("MOONBRIGHT_LARGE_FRAMES", "1", 1);
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, args), 0);
    char size[32], out[256];
    snprintf(size, sizeof(size), "%u", 398 * FRAME);
    int o, in;
    pid_t pid = spawn_holder(&d, size, "33", "exact-a", &o, &in);
    assert_granted(&d, 5, 398 * FRAME);
    close(in);   /* it verifies nothing more and exits */
    assert_int_equal(mbt_wait(pid), 0);
    close(o);
    assert_int_equal(wait_granted(&d, 0), 0);
    /* A client that asks for no exact plan (as with a daemon that plans
     * none) gets order-0 frames there, as before. */
    setenv("MOONBRIGHT_EXACT_PLANS", "0", 1);
    pid = spawn_holder(&d, size, "34", "exact-0", &o, &in);
    unsetenv("MOONBRIGHT_EXACT_PLANS");
    assert_granted(&d, 398, 398 * FRAME);
    close(in);
    assert_int_equal(mbt_wait(pid), 0);
    close(o);
    assert_int_equal(wait_granted(&d, 0), 0);
    double made = mbt_status_num(&d, "frames_total");

    snprintf(size, sizeof(size), "%u", 410 * FRAME);
    const char *b[] = { MB_CLIENT_BIN, "alloc", size, "exact-b", NULL };
    assert_int_equal(mbt_run(&d, b, out, sizeof(out), false), 20 - MB_ENOMEM);
    assert_non_null(strstr(out, "out of memory"));
    assert_true(mbt_status_num(&d, "frames_total") <= made + 8);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);
}

/* A device full below the budget (12 MiB of device under a 64 MiB budget,
 * as when other processes use the GPU, or a budget set above the device):
 * the one-unit frames one client left free make room for the large frames
 * the next client's plan asks for; more than the device fails cleanly. */
static void device_full_below_the_budget(void **state)
{
    (void)state;
    /* (no headroom: the free frames stay until a grant needs their room) */
    static const char *const args[] = { "--frame-size", "64K", "--budget", "64M",
                                        "--device-headroom", "0", NULL };
    static const char *const env[] = { "MOONBRIGHT_HOST_MEMORY=12M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start_env(&d, args, env), 0);
    char size[32], out[256];
    snprintf(size, sizeof(size), "%u", 160 * FRAME);
    setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);
    const char *a[] = { MB_CLIENT_BIN, "alloc", size, "full-a", NULL };
    assert_int_equal(mbt_run(&d, a, out, sizeof(out), false), 0);
    assert_int_equal(wait_granted(&d, 0), 0);
    assert_true(mbt_status_num(&d, "frames_free") >= 160);   /* one-unit frames, free */
    setenv("MOONBRIGHT_LARGE_FRAMES", "1", 1);
    const char *b[] = { MB_CLIENT_BIN, "alloc", size, "full-b", NULL };
    assert_int_equal(mbt_run(&d, b, out, sizeof(out), false), 0);
    assert_non_null(strstr(out, "alloc: success"));
    assert_true(mbt_status_num(&d, "released_device_full") >= 96);   /* 160 units in, 64 free */
    snprintf(size, sizeof(size), "%u", 13u << 20);
    const char *c[] = { MB_CLIENT_BIN, "alloc", size, "full-c", NULL };
    assert_int_equal(mbt_run(&d, c, out, sizeof(out), false), 20 - MB_ENOMEM);
    assert_non_null(strstr(out, "out of memory"));
    assert_true(mbt_daemon_alive(&d));
    assert_true(mbt_status_num(&d, "bytes_free") + mbt_status_num(&d, "bytes_granted") <= 12 << 20);
    assert_int_equal(mbt_daemon_stop(&d), 0);
    setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);
}

/* The device's headroom (--device-headroom 4M on a 12 MiB device): a client
 * may allocate into it, and once the client has gone the free frames it
 * left go back to the driver until 4 MiB of the device is free again (so a
 * new process's context fits); status counts them. */
static void free_frames_leave_the_device_headroom(void **state)
{
    (void)state;
    static const char *const args[] = { "--frame-size", "64K", "--budget", "64M",
                                        "--device-headroom", "4M", NULL };
    static const char *const env[] = { "MOONBRIGHT_HOST_MEMORY=12M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start_env(&d, args, env), 0);
    char size[32], out[256];
    snprintf(size, sizeof(size), "%u", 160 * FRAME);   /* 10 MiB: 2 of the headroom */
    const char *a[] = { MB_CLIENT_BIN, "alloc", size, "head-a", NULL };
    assert_int_equal(mbt_run(&d, a, out, sizeof(out), false), 0);
    assert_non_null(strstr(out, "alloc: success"));
    assert_int_equal(wait_granted(&d, 0), 0);
    double left = 0;
    for (int i = 0; i < 100; i++) {   /* the tick runs four times a second */
        left = mbt_status_num(&d, "bytes_free") + mbt_status_num(&d, "bytes_granted");
        if (left <= 8 << 20)
            break;
        usleep(50000);
    }
    assert_true(left <= 8 << 20);
    assert_true(mbt_status_num(&d, "released_room") >= 32);   /* 2 MiB of 64 KiB frames */
    const char *b[] = { MB_CLIENT_BIN, "alloc", size, "head-b", NULL };
    assert_int_equal(mbt_run(&d, b, out, sizeof(out), false), 0);   /* the headroom again */
    assert_non_null(strstr(out, "alloc: success"));
    assert_true(mbt_daemon_alive(&d));
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static int call_room(struct mbt_session *s, uint64_t bytes, uint32_t *released, uint64_t *device_free)
{
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Room r = MB__ROOM__INIT;
    r.bytes = bytes;
    req.body_case = MB__REQUEST__BODY_ROOM;
    req.room = &r;
    Mb__Reply *rep = NULL;
    int code = mbt_session_call(s, &req, &rep);
    if (code == 0) {
        assert_int_equal(rep->body_case, MB__REPLY__BODY_ROOM);
        *released = rep->room->released;
        *device_free = rep->room->device_free;
    }
    if (rep)
        mb__reply__free_unpacked(rep, NULL);
    return code;
}

/* Room (a process's CUDA context found the device full of free frames,
 * with no headroom set): free frames go back to the driver until the
 * device has the bytes asked for, of any age; granted frames stay; asked
 * for more than the free frames hold, every one goes. */
static void room_releases_free_frames_only(void **state)
{
    (void)state;
    static const char *const args[] = { "--frame-size", "64K", "--budget", "64M", NULL };
    static const char *const env[] = { "MOONBRIGHT_HOST_MEMORY=12M", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start_env(&d, args, env), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "roomer", &s), 0);
    assert_int_equal(mbt_session_grant(&s, 160 * FRAME), 0);   /* 10 MiB */
    assert_int_equal(s.n_frames, 160);
    assert_int_equal(mbt_session_return(&s, s.frame_ids + 16, 144), 0);   /* 16 kept */
    uint32_t released = 0;
    uint64_t device_free = 0;
    assert_int_equal(call_room(&s, 4u << 20, &released, &device_free), 0);
    assert_true(released >= 32);   /* 2 MiB at most was free: 2 MiB or more of frames */
    assert_true(device_free >= 4u << 20);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 16);
    assert_int_equal(call_room(&s, 1ull << 40, &released, &device_free), 0);   /* (capped) */
    assert_true(released > 0);
    assert_true(device_free >= 10u << 20);   /* 12 less the 1 granted, less a frame a
                                              * reserve worker may be making */
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 16);
    assert_true(mbt_status_num(&d, "released_room") >= 32 + released);
    mbt_session_close(&s);
    assert_true(mbt_daemon_alive(&d));
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A Return names at most MB_RETURN_MAX_IDS frames (checking one costs the
 * daemon O(ids)): more is refused before anything is looked at, and
 * nothing changes; the session's frames then return as usual. */
static void return_names_at_most_the_cap(void **state)
{
    (void)state;
    static const char *const args[] = { "--frame-size", "64K", NULL };
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, args), 0);
    struct mbt_session s;
    assert_int_equal(mbt_session_open(&d, "returner", &s), 0);
    assert_int_equal(mbt_session_grant(&s, 4 * FRAME), 0);
    size_t n = MB_RETURN_MAX_IDS + 1;
    uint32_t *ids = calloc(n, sizeof(*ids));
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = s.frame_ids[i % s.n_frames];
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Return r = MB__RETURN__INIT;
    r.ids = ids;
    r.n_ids = n;
    req.body_case = MB__REQUEST__BODY_RET;
    req.ret = &r;
    Mb__Reply *rep = NULL;
    assert_int_equal(mbt_session_call(&s, &req, &rep), MB_EINVAL);
    assert_non_null(rep);
    assert_non_null(strstr(rep->error, "at most 4096 a request"));
    mb__reply__free_unpacked(rep, NULL);
    free(ids);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 4);
    assert_int_equal(mbt_session_return(&s, s.frame_ids, s.n_frames), 0);
    assert_int_equal(mbt_status_num(&d, "frames_granted"), 0);
    mbt_session_close(&s);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A frame passed on keeps the daemon's descriptor while the daemon holds
 * fewer than its cap: returned, it is granted again with no export. With
 * MOONBRIGHTD_KEEP_GRANTED=0 granted frames hold none there. */
static void granted_frames_keep_descriptors(void **state)
{
    (void)state;
    static const char *const off[] = { "MOONBRIGHTD_KEEP_GRANTED=0", NULL };
    for (int keep = 1; keep >= 0; keep--) {
        struct mbt_daemon d;
        assert_int_equal(mbt_daemon_start_env(&d, small_frames, keep ? NULL : off), 0);
        struct mbt_session s;
        assert_int_equal(mbt_session_open(&d, "keeper", &s), 0);
        assert_int_equal(mbt_session_grant(&s, 8 * FRAME), 0);
        assert_int_equal(s.n_frames, 8);
        struct json *j = mbt_status(&d);
        assert_non_null(j);
        int total = (int)json_num(j, "frames_total"), granted = (int)json_num(j, "frames_granted");
        assert_int_equal(granted, 8);
        /* Free frames hold theirs either way (none was returned yet). */
        assert_int_equal((int)json_num(j, "descriptors"), keep ? total : total - granted);
        json_free(j);
        if (keep) {
            uint32_t ids[8];
            memcpy(ids, s.frame_ids, sizeof(ids));
            assert_int_equal(mbt_session_return(&s, ids, 8), 0);
            assert_int_equal(mbt_session_grant(&s, 8 * FRAME), 0);
            j = mbt_status(&d);
            assert_non_null(j);
            assert_int_equal((int)json_num(j, "reexports"), 0);
            assert_int_equal((int)json_num(j, "exported_ahead"), 0);
            assert_int_equal((int)json_num(j, "frames_granted"), 8);
            json_free(j);
        }
        mbt_session_close(&s);
        assert_int_equal(mbt_daemon_stop(&d), 0);
    }
}

/* The daemon grows its descriptor table for its frames at start-up (up to
 * 131072 descriptors, or its limit), not in the exports of grants; this
 * process's table, grown by its client, holds a grant's descriptors; and
 * no descriptor in use was touched doing it. */
static void descriptor_table_grown_ahead(void **state)
{
    (void)state;
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, NULL), 0);
    long limit = mbt_proc_number(d.pid, "limits", "Max open files");
    assert_true(limit > 0);
    long want = limit < 131072 ? limit : 131072;
    assert_true(mbt_proc_number(d.pid, "status", "FDSize:") >= want);
    int probe = dup(2);
    assert_true(probe >= 0);
    assert_int_equal(mb_fd_table_reserve(2048), 0);
    assert_true(mbt_proc_number(getpid(), "status", "FDSize:") >= 2048 ||
                mbt_proc_number(getpid(), "limits", "Max open files") < 2048);
    assert_true(write(probe, "", 0) == 0);   /* still open */
    close(probe);
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

/* A hello of another protocol version: refused with both versions named,
 * the token still unused (the right hello then binds it), daemon serving. */
static void hello_of_another_version_is_refused(void **state)
{
    struct mbt_daemon d;
    assert_int_equal(mbt_daemon_start(&d, NULL), 0);
    struct mbt_session s = { .chan = -1 };
    struct mb_chan_msg w;
    assert_int_equal(mb_chan_open(d.dir, 0, 5000, &s.chan, &w), 0);
    char ep[300];
    assert_int_equal(mb_ctl_endpoint(ep, sizeof(ep), d.dir, 0), 0);
    s.zctx = zmq_ctx_new();
    s.dealer = zmq_socket(s.zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s.dealer, ZMQ_LINGER, &zero, sizeof(zero));
    assert_int_equal(zmq_connect(s.dealer, ep), 0);

    Mb__Request req;
    Mb__Hello h;
    mb_wire_hello(&req, &h, w.token, "old-client");
    h.version = MB_PROTOCOL_VERSION + 1;
    Mb__Reply *rep = NULL;
    assert_int_equal(mbt_session_call(&s, &req, &rep), MB_EPROTO);
    char want[128];
    snprintf(want, sizeof(want), "client speaks protocol version %u, this moonbrightd speaks version %u",
             MB_PROTOCOL_VERSION + 1, MB_PROTOCOL_VERSION);
    assert_non_null(rep->error);
    if (!strstr(rep->error, want))
        fail_msg("error '%s' lacks '%s'", rep->error, want);
    mb__reply__free_unpacked(rep, NULL);
    h.version = 0;   /* a client that never set it */
    assert_int_equal(mbt_session_call(&s, &req, NULL), MB_EPROTO);

    h.version = MB_PROTOCOL_VERSION;
    assert_int_equal(mbt_session_call(&s, &req, &rep), 0);
    assert_int_equal(rep->body_case, MB__REPLY__BODY_HELLO);
    mb__reply__free_unpacked(rep, NULL);
    mbt_session_close(&s);
    assert_true(mbt_daemon_alive(&d));
    assert_int_equal(mbt_daemon_stop(&d), 0);
}

static void mbctl_without_daemon(void **state)
{
    struct mbt_daemon d = { .dir = "/tmp/mbtest-no-such-dir" };
    const char *argv[] = { MB_CTL_BIN, "--runtime-dir", d.dir, "status", NULL };
    char out[1024];
    assert_int_equal(mbt_run(&d, argv, out, sizeof(out), true), 3);
    assert_non_null(strstr(out, "not running"));
    const char *bad[] = { MB_CTL_BIN, "frobnicate", NULL };
    assert_int_equal(mbt_run(&d, bad, out, sizeof(out), true), 2);
    assert_non_null(strstr(out, "unknown command"));
}

int main(void)
{
    /* These tests count frames of one unit each (many frame boundaries per
     * range); large_frames_by_plan turns large frames on for itself. */
    setenv("MOONBRIGHT_LARGE_FRAMES", "0", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(three_clients_stitch_and_verify),
        cmocka_unit_test(sigkill_returns_frames),
        cmocka_unit_test(budget_exhausted_then_still_serving),
        cmocka_unit_test(hostile_bytes_leave_daemon_serving),
        cmocka_unit_test(sharing_outlives_the_exporter),
        cmocka_unit_test(frames_are_scrubbed_between_tenants),
        cmocka_unit_test(daemon_restart_keeps_clients),
        cmocka_unit_test(daemon_back_with_other_frames),
        cmocka_unit_test(daemon_restart_keeps_shares),
        cmocka_unit_test(second_daemon_refuses),
        cmocka_unit_test(bad_options_are_refused),
        cmocka_unit_test(bad_environment_warns),
        cmocka_unit_test(config_errors_name_file_and_line),
        cmocka_unit_test(hello_of_another_version_is_refused),
        cmocka_unit_test(mbctl_without_daemon),
        cmocka_unit_test(large_frames_by_plan),
        cmocka_unit_test(exact_plan_near_the_budget),
        cmocka_unit_test(device_full_below_the_budget),
        cmocka_unit_test(free_frames_leave_the_device_headroom),
        cmocka_unit_test(room_releases_free_frames_only),
        cmocka_unit_test(return_names_at_most_the_cap),
        cmocka_unit_test(granted_frames_keep_descriptors),
        cmocka_unit_test(descriptor_table_grown_ahead),
    };
    if (getenv("MBT_FILTER"))   /* one test or a few: MBT_FILTER='device_full*' */
        cmocka_set_test_filter(getenv("MBT_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
