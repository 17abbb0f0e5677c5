/* test_devices.c: a host with several devices, one daemon each, in one
 * runtime directory: mb_open_device finds the daemon of this process's
 * device by the device's identity (not by its index), leaves no session
 * with the daemons it asked on the way, and says when none serves it; the
 * framework hook opens one client per device it is asked for; mb_open
 * still takes $MOONBRIGHT_DEVICE's daemon. On the host backend a device's
 * identity is its index; tests/gpu/test_devices.sh checks a GPU's UUID. */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "harness.h"

static struct mbt_daemon g_d0, g_d1;

static int two_daemons(void **state)
{
    (void)state;
    /* The hook's clients stay to the end: a short drain at the stop. */
    const char *const quick[] = { "--drain-timeout", "0.2", NULL };
    if (mbt_daemon_start(&g_d0, quick) != 0 || mbt_daemon_start_beside(&g_d1, &g_d0, 1, quick) != 0)
        return -1;
    setenv("MOONBRIGHT_RUNTIME_DIR", g_d0.dir, 1);
    return 0;
}

static int stop_daemons(void **state)
{
    (void)state;
    int a = mbt_daemon_stop(&g_d1), b = mbt_daemon_stop(&g_d0);
    return a == 0 && b == 0 ? 0 : -1;
}

/* Sessions a daemon holds for tenant `name` (0 when it lists none). */
static int sessions(const struct mbt_daemon *d, const char *name)
{
    double v = mbt_tenant_num(d, name, "sessions");
    return v > 0 ? (int)v : 0;
}

/* Bytes a client's allocation of 64 MiB made its daemon grant. */
static void allocate_on(mb_client *c, void **p)
{
    assert_int_equal(mb_malloc(c, 64u << 20, p), 0);
    memset(*p, 0x5a, 64u << 20);   /* host backend: the process's own memory */
}

/* Each device's client lands on that device's daemon, with
 * $MOONBRIGHT_DEVICE unset and set to the other daemon (asked first, then
 * left without a session). */
static void open_device_finds_its_daemon(void **state)
{
    (void)state;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0)
            unsetenv("MOONBRIGHT_DEVICE");
        else
            setenv("MOONBRIGHT_DEVICE", "0", 1);
        mb_client *c1, *c0;
        assert_int_equal(mb_open_device(&c1, "dev-one", 1), 0);
        assert_int_equal(sessions(&g_d1, "dev-one"), 1);
        assert_int_equal(sessions(&g_d0, "dev-one"), 0);   /* asked first in pass 1: gone */
        void *p1, *p0;
        allocate_on(c1, &p1);
        assert_true(mbt_status_num(&g_d1, "bytes_granted") >= 64 << 20);
        assert_int_equal(mbt_status_num(&g_d0, "bytes_granted"), 0);
        assert_int_equal(mb_open_device(&c0, "dev-zero", 0), 0);
        assert_int_equal(sessions(&g_d0, "dev-zero"), 1);
        assert_int_equal(sessions(&g_d1, "dev-zero"), 0);
        allocate_on(c0, &p0);
        assert_true(mbt_status_num(&g_d0, "bytes_granted") >= 64 << 20);
        assert_int_equal(mb_free(c1, p1), 0);
        assert_int_equal(mb_free(c0, p0), 0);
        mb_close(c1);
        mb_close(c0);
        assert_int_equal(mbt_status_num(&g_d0, "bytes_granted"), 0);
        assert_int_equal(mbt_status_num(&g_d1, "bytes_granted"), 0);
    }
    unsetenv("MOONBRIGHT_DEVICE");
}

/* mb_open takes the daemon $MOONBRIGHT_DEVICE names, as before; that
 * daemon's status names its device. */
static void open_takes_the_named_daemon(void **state)
{
    (void)state;
    setenv("MOONBRIGHT_DEVICE", "1", 1);
    mb_client *c;
    assert_int_equal(mb_open(&c, "named"), 0);
    assert_int_equal(sessions(&g_d1, "named"), 1);
    assert_int_equal(sessions(&g_d0, "named"), 0);
    mb_close(c);
    unsetenv("MOONBRIGHT_DEVICE");
    struct json *j = mbt_status(&g_d1);   /* the identity the hello carried, for people */
    assert_non_null(j);
    const struct json *id = json_get(j, "device_id");
    assert_non_null(id);
    assert_string_equal(id->str, "host device 1");
    json_free(j);
}

/* mbctl devices: a row for each daemon of the directory, with its device's
 * identity and budget. */
static void mbctl_lists_every_daemon(void **state)
{
    (void)state;
    const char *args[] = { "devices", NULL };
    int rc = -1;
    struct json *j = mbt_ctl_json(&g_d0, &rc, args);
    assert_int_equal(rc, 0);
    assert_non_null(j);
    const struct json *d = json_get(j, "devices");
    assert_non_null(d);
    assert_int_equal(d->n, 2);
    for (size_t i = 0; i < 2; i++) {
        char want[32];
        snprintf(want, sizeof(want), "host device %zu", i);
        assert_int_equal((int)json_num(&d->kids[i], "device"), (int)i);
        assert_string_equal(json_get(&d->kids[i], "device_id")->str, want);
        assert_true(json_num(&d->kids[i], "budget_bytes") > 0);
    }
    json_free(j);
}

/* A device no daemon serves, and arguments out of range: an error, and no
 * session left anywhere. */
static void no_daemon_for_the_device(void **state)
{
    (void)state;
    mb_client *c = (mb_client *)1;
    assert_int_equal(mb_open_device(&c, "nobody", 5), MB_EUNAVAIL);
    assert_null(c);
    assert_int_equal(mb_open_device(&c, "nobody", -1), MB_EINVAL);
    assert_int_equal(mb_open_device(&c, "nobody", 256), MB_EINVAL);
    assert_int_equal(mb_open_device(NULL, "nobody", 0), MB_EINVAL);
    assert_int_equal(sessions(&g_d0, "nobody"), 0);
    assert_int_equal(sessions(&g_d1, "nobody"), 0);
}

/* Many threads through the hook at once, on both devices: allocations,
 * streams recorded, frees, and empty_cache from one of them. Every block
 * keeps its contents until freed, and both daemons' books end empty. Run
 * under ThreadSanitizer in CI. After hook_serves_each_device, whose
 * clients (tenant "hooked") it uses. */
#define HOOK_THREADS 8
#define HOOK_OPS 400

static void *hook_worker(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    uint64_t x = id * 0x9e3779b97f4a7c15ull + 1;
    struct held { unsigned char *p; size_t n; int dev; unsigned char tag; } live[8] = { { 0 } };
    long bad = 0;
    for (int op = 0; op < HOOK_OPS; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int k = (int)(x % 8);
        if (live[k].p) {
            for (size_t i = 0; i < live[k].n; i += 4093)
                bad += live[k].p[i] != live[k].tag;
            if (x & 0x100)
                mb_torch_record_stream(live[k].p, (void *)(uintptr_t)(0x100 + (x >> 20) % 4));
            mb_torch_free(live[k].p, (ssize_t)live[k].n, live[k].dev, NULL);
            live[k].p = NULL;
        } else {
            size_t n = (size_t)1 << (10 + (x >> 12) % 14);   /* 1 KiB .. 8 MiB */
            int dev = (int)((x >> 30) & 1);
            unsigned char *p = mb_torch_malloc((ssize_t)n, dev, NULL);
            if (!p)
                return (void *)-1;
            memset(p, (int)(op & 0xff), n);
            live[k] = (struct held){ p, n, dev, (unsigned char)(op & 0xff) };
        }
        if (id == 0 && op % 100 == 99)
            mb_torch_empty_cache();
    }
    for (int k = 0; k < 8; k++)
        if (live[k].p)
            mb_torch_free(live[k].p, (ssize_t)live[k].n, live[k].dev, NULL);
    return (void *)bad;
}

static void hook_from_many_threads(void **state)
{
    (void)state;
    pthread_t t[HOOK_THREADS];   /* (the hook's clients are hook_serves_each_device's) */
    for (uintptr_t i = 0; i < HOOK_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hook_worker, (void *)i), 0);
    for (int i = 0; i < HOOK_THREADS; i++) {
        void *r;
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_int_equal((intptr_t)r, 0);   /* every block kept its bytes; none refused */
    }
    mb_torch_empty_cache();
    assert_int_equal(mbt_tenant_num(&g_d0, "hooked", "bytes"), 0);
    assert_int_equal(mbt_tenant_num(&g_d1, "hooked", "bytes"), 0);
    assert_int_equal(sessions(&g_d0, "hooked"), 1);   /* the same clients all along */
    assert_int_equal(sessions(&g_d1, "hooked"), 1);
}

/* The hook: one client per device, each on its daemon; a device no daemon
 * serves gets NULL; empty_cache gives every device's idle memory back.
 * Last: the hook's clients live until the process ends. */
static void hook_serves_each_device(void **state)
{
    (void)state;
    setenv("MOONBRIGHT_TENANT", "hooked", 1);
    void *a = mb_torch_malloc(1 << 20, 1, NULL);
    assert_non_null(a);
    assert_int_equal(sessions(&g_d1, "hooked"), 1);
    assert_int_equal(sessions(&g_d0, "hooked"), 0);
    void *b = mb_torch_malloc(1 << 20, 0, NULL);
    assert_non_null(b);
    assert_int_equal(sessions(&g_d0, "hooked"), 1);
    assert_null(mb_torch_malloc(1 << 20, 3, NULL));     /* no daemon of device 3 */
    assert_null(mb_torch_malloc(1 << 20, 300, NULL));   /* no such ordinal */
    assert_null(mb_torch_malloc(1 << 20, -1, NULL));
    mb_torch_free(a, 1 << 20, 1, NULL);
    mb_torch_free(b, 1 << 20, 0, NULL);
    void *again = mb_torch_malloc(1 << 20, 1, NULL);   /* the same client, no new session */
    assert_non_null(again);
    assert_int_equal(sessions(&g_d1, "hooked"), 1);
    /* A stream recorded for it (host streams are trivially ordered): its
     * free still gives it back. */
    mb_torch_record_stream(again, (void *)(uintptr_t)0x5);
    mb_torch_free(again, 1 << 20, 1, NULL);
    /* torch.cuda.empty_cache: both daemons get their memory back. */
    assert_true(mbt_tenant_num(&g_d1, "hooked", "bytes") > 0);
    assert_true(mbt_tenant_num(&g_d0, "hooked", "bytes") > 0);
    mb_torch_empty_cache();
    assert_int_equal(mbt_tenant_num(&g_d1, "hooked", "bytes"), 0);
    assert_int_equal(mbt_tenant_num(&g_d0, "hooked", "bytes"), 0);
    void *after = mb_torch_malloc(1 << 20, 0, NULL);   /* and still serve */
    assert_non_null(after);
    mb_torch_free(after, 1 << 20, 0, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(open_device_finds_its_daemon),
                                        cmocka_unit_test(open_takes_the_named_daemon),
                                        cmocka_unit_test(no_daemon_for_the_device),
                                        cmocka_unit_test(mbctl_lists_every_daemon),
                                        cmocka_unit_test(hook_serves_each_device),
                                        cmocka_unit_test(hook_from_many_threads) };
    return cmocka_run_group_tests(tests, two_daemons, stop_daemons);
}
