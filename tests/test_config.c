/* test_config.c: unit tests of common/config.c: the documented format, one
 * test per class of error (each must name the file and the right line),
 * command-line overrides, and the shipped tools/moonbrightd.conf. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "config.h"
#include "log.h"

#ifndef MB_SHIPPED_CONFIG
#define MB_SHIPPED_CONFIG "tools/moonbrightd.conf"
#endif

#define GiB (1ull << 30)
#define MiB (1ull << 20)

static const char *example =
    "# /etc/moonbright/moonbrightd.conf\n"
    "backend = host\n"
    "budget = 64G\n"
    "frame_size = 2M\n"
    "reserve = 1G\n"
    "scrub = off\n"
    "watchdog = on\n"
    "log_level = debug\n"
    "admin_uids = 0 1000, root\n"
    "devices = 0 1        # or all\n"
    "runtime_dir = /run/mb-test\n"
    "\n"
    "[tenant llm-serving]\n"
    "max = 40G\n"
    "min = 8G\n"
    "[ tenant  batch ]   # blanks inside the brackets are allowed\n"
    "  min=1G\r\n"
    "[uid 1001]\n"
    "max = 10G\n"
    "[uid root]\n"
    "max = unlimited\n";

static void test_defaults(void **state)
{
    (void)state;
    struct mb_config cfg;
    mb_config_defaults(&cfg);
    assert_string_equal(cfg.backend, "auto");
    assert_int_equal(cfg.budget, 0);   /* unset: the daemon takes the device's memory */
    assert_int_equal(cfg.frame_size, 2 * MiB);
    assert_int_equal(cfg.reserve, 0);
    assert_int_equal(cfg.device_headroom, 0);   /* off: clients ask for room (Room) */
    assert_true(cfg.scrub);
    assert_true(cfg.watchdog);
    assert_int_equal(cfg.log_level, MB_LOG_INFO);
    assert_null(cfg.runtime_dir);
    assert_int_equal(cfg.n_admin_uids, 0);
    assert_true(cfg.devices_all);
    assert_int_equal(cfg.n_tenants, 0);
    assert_int_equal(cfg.n_uids, 0);
    assert_true(mb_config_is_admin(&cfg, 0));
    assert_false(mb_config_is_admin(&cfg, 1000));
    assert_int_equal(mb_config_check(&cfg, NULL, 0), 0);
    mb_config_free(&cfg);
}

static void test_example_values(void **state)
{
    (void)state;
    struct mb_config cfg;
    char err[256] = "";
    int rc = mb_config_parse_string(example, "example.conf", &cfg, err, sizeof(err));
    assert_int_equal(rc, 0);
    assert_string_equal(err, "");
    assert_string_equal(cfg.backend, "host");
    assert_int_equal(cfg.budget, 64 * GiB);
    assert_int_equal(cfg.frame_size, 2 * MiB);
    assert_int_equal(cfg.reserve, 1 * GiB);
    assert_false(cfg.scrub);
    assert_true(cfg.watchdog);
    assert_int_equal(cfg.log_level, MB_LOG_DEBUG);
    assert_string_equal(cfg.runtime_dir, "/run/mb-test");
    assert_int_equal(cfg.n_admin_uids, 2);   /* "root" is uid 0, listed once */
    assert_int_equal(cfg.admin_uids[0], 0);
    assert_int_equal(cfg.admin_uids[1], 1000);
    assert_true(mb_config_is_admin(&cfg, 1000));
    assert_false(mb_config_is_admin(&cfg, 1001));
    assert_false(cfg.devices_all);
    assert_int_equal(cfg.n_devices, 2);
    assert_int_equal(cfg.devices[0], 0);
    assert_int_equal(cfg.devices[1], 1);

    assert_int_equal(cfg.n_tenants, 2);
    const struct mb_config_policy *t = mb_config_tenant(&cfg, "llm-serving");
    assert_non_null(t);
    assert_int_equal(t->max, 40 * GiB);
    assert_int_equal(t->min, 8 * GiB);
    assert_int_equal(t->line, 13);
    t = mb_config_tenant(&cfg, "batch");
    assert_non_null(t);
    assert_int_equal(t->max, MB_CONFIG_UNLIMITED);
    assert_int_equal(t->min, 1 * GiB);
    assert_null(mb_config_tenant(&cfg, "other"));

    assert_int_equal(cfg.n_uids, 2);
    const struct mb_config_policy *u = mb_config_uid(&cfg, 1001);
    assert_non_null(u);
    assert_int_equal(u->max, 10 * GiB);
    assert_int_equal(u->min, 0);
    u = mb_config_uid(&cfg, 0);
    assert_non_null(u);
    assert_int_equal(u->max, MB_CONFIG_UNLIMITED);
    assert_null(mb_config_uid(&cfg, 4242));
    mb_config_free(&cfg);
    assert_int_equal(cfg.n_tenants, 0);
    assert_null(cfg.tenants);
}

static void test_empty_and_comments(void **state)
{
    (void)state;
    struct mb_config cfg;
    char err[256] = "";
    assert_int_equal(mb_config_parse_string("", "e.conf", &cfg, err, sizeof(err)), 0);
    mb_config_free(&cfg);
    assert_int_equal(mb_config_parse_string("\n  # only a comment\n\t\n", "e.conf", &cfg, err,
                                            sizeof(err)), 0);
    assert_string_equal(cfg.backend, "auto");
    mb_config_free(&cfg);
    /* last line without a newline; sizes in other spellings */
    assert_int_equal(mb_config_parse_string("budget = 3GiB\nreserve=512mb", "e.conf", &cfg, err,
                                            sizeof(err)), 0);
    assert_int_equal(cfg.budget, 3 * GiB);
    assert_int_equal(cfg.reserve, 512 * MiB);
    mb_config_free(&cfg);
    /* durations: milliseconds, or with ms or s */
    assert_int_equal(cfg.reserve_idle_ms, 5000);
    const char *idle[][2] = { { "reserve_idle = 2s", "2000" }, { "reserve_idle = 250ms", "250" },
                              { "reserve_idle = 0", "0" }, { "reserve_idle = 1.5s", "1500" } };
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(mb_config_parse_string(idle[i][0], "e.conf", &cfg, err, sizeof(err)), 0);
        assert_int_equal(cfg.reserve_idle_ms, atoi(idle[i][1]));
        mb_config_free(&cfg);
    }
    /* the device's headroom: a size; 0 turns it off */
    assert_int_equal(mb_config_parse_string("device_headroom = 512M", "e.conf", &cfg, err,
                                            sizeof(err)), 0);
    assert_int_equal(cfg.device_headroom, 512 * MiB);
    mb_config_free(&cfg);
    assert_int_equal(mb_config_parse_string("device_headroom = 0", "e.conf", &cfg, err,
                                            sizeof(err)), 0);
    assert_int_equal(cfg.device_headroom, 0);
    mb_config_free(&cfg);
}

/* Parse text that must fail; the message must start with "FILE:LINE: " and
 * contain want. */
static void expect_error(const char *text, int line, const char *want)
{
    struct mb_config cfg;
    char err[512] = "";
    int rc = mb_config_parse_string(text, "/etc/x.conf", &cfg, err, sizeof(err));
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "/etc/x.conf:%d: ", line);
    if (rc != MB_EINVAL || strncmp(err, prefix, strlen(prefix)) != 0 || !strstr(err, want))
        fail_msg("text:\n%s\nrc %d, error \"%s\"; wanted \"%s...%s\"", text, rc, err, prefix, want);
    /* on failure cfg holds the defaults and owns nothing */
    assert_int_equal(cfg.n_tenants, 0);
    assert_null(cfg.tenants);
    assert_null(cfg.runtime_dir);
    assert_string_equal(cfg.backend, "auto");
    mb_config_free(&cfg);
}

static void test_unknown_keys(void **state)
{
    (void)state;
    expect_error("backend = auto\n\n# typo below\nbudgett = 4G\n", 4,
                 "unknown key 'budgett' (did you mean 'budget'?)");
    expect_error("colour = blue\n", 1, "unknown key 'colour'");
    expect_error("[tenant a]\nmax = 1G\nmaxx = 2G\n", 3, "unknown key 'maxx' in [tenant a]");
    expect_error("[tenant a]\nbudget = 2G\n", 2, "global keys go before the first section");
    expect_error("[uid 7]\nscrub = on\n", 2, "unknown key 'scrub' in [uid 7]");
    expect_error("max = 1G\n", 1, "unknown key 'max' (max and min belong in a [tenant");
    expect_error("Budget = 1G\n", 1, "unknown key 'Budget'");
    /* command-line spellings are for mb_config_set only */
    expect_error("frame-size = 2M\n", 1, "unknown key 'frame-size'");
}

/* [tenant NAME] uids = ...: the users bound to a tenant; others may not
 * name it. Tenants without the key (and uid sections) bind nobody. */
static void test_tenant_uids(void **state)
{
    (void)state;
    struct mb_config cfg;
    char err[512] = "";
    const char *text = "[tenant prod]\nmax = 1G\nuids = 1000, 1001 root\n"
                       "[tenant open]\nmax = 1G\n[uid 1002]\nmax = 1G\n";
    assert_int_equal(mb_config_parse_string(text, "t.conf", &cfg, err, sizeof(err)), 0);
    const struct mb_config_policy *prod = mb_config_tenant(&cfg, "prod");
    assert_non_null(prod);
    assert_int_equal(prod->n_bound_uids, 3);
    assert_int_equal(prod->bound_uids[0], 1000);
    assert_int_equal(prod->bound_uids[1], 1001);
    assert_int_equal(prod->bound_uids[2], 0);
    assert_true(mb_config_tenant_allows(prod, 1000));
    assert_true(mb_config_tenant_allows(prod, 0));
    assert_false(mb_config_tenant_allows(prod, 1002));
    assert_false(mb_config_tenant_allows(prod, 65534));
    const struct mb_config_policy *open = mb_config_tenant(&cfg, "open");
    assert_int_equal(open->n_bound_uids, 0);
    assert_true(mb_config_tenant_allows(open, 65534));
    mb_config_free(&cfg);
    assert_null(cfg.tenants);

    expect_error("[tenant a]\nuids =\n", 2, "empty uids (a list of users");
    expect_error("[tenant a]\nuids = , ,\n", 2, "empty uids");
    expect_error("[tenant a]\nuids = 1000 nosuchuser-xyz\n", 2,
                 "unknown user 'nosuchuser-xyz' in uids in [tenant a]");
    expect_error("[tenant a]\nuids = 12x\n", 2, "bad uid '12x' in uids in [tenant a]");
    expect_error("[tenant a]\nuids = 7, 8, 7\n", 2, "uid 7 listed twice in uids in [tenant a]");
    expect_error("[tenant a]\nuids = 7\nmax = 1G\nuids = 8\n", 4,
                 "duplicate key 'uids' in [tenant a] (first on line 2)");
    expect_error("[uid 7]\nuids = 8\n", 2, "key 'uids' in [uid 7]: it binds a tenant to users");
    expect_error("uids = 8\n", 1, "unknown key 'uids' (uids belongs in a [tenant NAME] section)");
    expect_error("[tenant a]\nuid = 8\n", 2, "unknown key 'uid' in [tenant a] (did you mean 'uids'?)");
}

static void test_unknown_sections(void **state)
{
    (void)state;
    expect_error("budget = 1G\n[global]\n", 2, "unknown section [global]");
    expect_error("[group wheel]\n", 1, "unknown section [group wheel]");
    expect_error("\n[]\n", 2, "empty section header");
    expect_error("[tenant]\n", 1, "section [tenant] needs a name");
    expect_error("[uid]\n", 1, "section [uid] needs a user");
    expect_error("[tenant a\n", 1, "lacks a closing ']'");
    expect_error("[tenant two words]\n", 1, "bad tenant name 'two words'");
    expect_error("[tenant a/b]\n", 1, "bad tenant name 'a/b'");
    expect_error("[uid no-such-user-mb]\n", 1, "unknown user 'no-such-user-mb'");
    expect_error("[uid -1]\n", 1, "unknown user '-1'");
    expect_error("[uid 4294967295]\n", 1, "bad uid '4294967295'");
}

static void test_bad_sizes(void **state)
{
    (void)state;
    static const char *junk[] = {
        "lots", "-1", "+1", "1.5G", "10X", "1GG", "1 G", "G", "0x10",
        "99999999999999999999", "17179869184T", "",
    };
    char text[128], want[128];
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        snprintf(text, sizeof(text), "# sizes\nbudget = %s\n", junk[i]);
        snprintf(want, sizeof(want), "bad size '%s' for budget", junk[i]);
        expect_error(text, 2, want);
        snprintf(text, sizeof(text), "[tenant t]\nmin = 1G\nmax = %s\n", junk[i]);
        snprintf(want, sizeof(want), "bad size '%s' for max in [tenant t]", junk[i]);
        expect_error(text, 3, want);
    }
    expect_error("budget = 0\n", 1, "bad size '0' for budget");
    expect_error("reserve = lots\n", 1, "bad size 'lots' for reserve");
    expect_error("reserve_idle = soon\n", 1, "bad duration 'soon' for reserve_idle");
    expect_error("reserve_idle = 5m\n", 1, "bad duration '5m' for reserve_idle");
    expect_error("reserve_idle = -1\n", 1, "bad duration '-1' for reserve_idle");
    expect_error("device_headroom = some\n", 1, "bad size 'some' for device_headroom");
    expect_error("device_headroom = -1G\n", 1, "bad size '-1G' for device_headroom");
    expect_error("frame_size = 6000\n", 1, "bad frame_size '6000': not a non-zero multiple of 4K");
    expect_error("frame_size = 1K\n", 1, "bad frame_size '1K'");
    expect_error("frame_size = 0\n", 1, "bad frame_size '0'");
    expect_error("[uid 5]\nmin = unlimited\n", 2, "bad size 'unlimited' for min in [uid 5]");
}

static void test_bad_values(void **state)
{
    (void)state;
    expect_error("backend = gpu\n", 1, "bad value 'gpu' for backend (auto, cuda or host)");
    expect_error("backend =\n", 1, "bad value '' for backend");
    expect_error("\nscrub = maybe\n", 2, "bad value 'maybe' for scrub (on or off)");
    expect_error("watchdog = 2\n", 1, "bad value '2' for watchdog");
    expect_error("log_level = verbose\n", 1, "bad value 'verbose' for log_level");
    expect_error("runtime_dir = run/mb\n", 1, "bad runtime_dir 'run/mb': not an absolute path");
    expect_error("runtime_dir = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", 1, "bad runtime_dir: longer than");
    expect_error("admin_uids = 0 nobody-mb-x\n", 1, "unknown user 'nobody-mb-x' in admin_uids");
    expect_error("devices = 0 x\n", 1, "bad device 'x' in devices");
    expect_error("devices = 0 1 0\n", 1, "device 0 listed twice in devices");
    expect_error("devices =\n", 1, "empty devices");
    expect_error("devices = -1\n", 1, "bad device '-1'");
    expect_error("backend\n", 1, "expected 'key = value' or '[section]', got 'backend'");
    expect_error(" = 4G\n", 1, "missing key before '='");
}

static void test_duplicates(void **state)
{
    (void)state;
    expect_error("budget = 1G\nscrub = on\nbudget = 2G\n", 3,
                 "duplicate key 'budget' (first on line 1)");
    expect_error("[tenant a]\nmax = 1G\n[tenant b]\nmax = 1G\n\n[tenant a]\n", 6,
                 "duplicate section [tenant a] (first on line 1)");
    expect_error("[uid 0]\n[uid root]\n", 2, "duplicate section [uid root] (uid 0, first on line 1)");
    expect_error("[tenant a]\nmin = 1G\nmin = 1G\n", 3, "duplicate key 'min' in [tenant a]");
}

static void test_min_above_max(void **state)
{
    (void)state;
    /* whichever of the two comes second is the line named */
    expect_error("[tenant a]\nmax = 4G\nmin = 8G\n", 3, "min (8 GiB) is above max (4 GiB) in [tenant a]");
    expect_error("[tenant a]\nmin = 8G\n# c\nmax = 4G\n", 4, "min (8 GiB) is above max (4 GiB)");
    expect_error("[uid 12]\nmin = 2M\nmax = 1M\n", 3, "in [uid 12]");
    /* equal is fine */
    struct mb_config cfg;
    assert_int_equal(mb_config_parse_string("[tenant a]\nmin = 1G\nmax = 1G\n", "x", &cfg, NULL, 0), 0);
    mb_config_free(&cfg);
}

static void test_cross_field(void **state)
{
    (void)state;
    /* the later of the two lines involved is named */
    expect_error("budget = 1G\nreserve = 2G\n", 2, "reserve (2 GiB) is above budget (1 GiB)");
    expect_error("reserve = 2G\nscrub = on\nbudget = 1G\n", 3, "reserve (2 GiB) is above budget");
    expect_error("reserve = 64M\nbudget = 32M\n", 2, "reserve (64 MiB) is above budget (32 MiB)");
    expect_error("budget = 16000000T\n[tenant a]\nmin = 15000000T\n[tenant b]\nmin = 15000000T\n", 5,
                 "guarantees (sum of every min,");
    expect_error("budget = 1M\n", 1, "budget (1 MiB) is smaller than one frame (2 MiB)");
    expect_error("budget = 10G\n[tenant a]\nmin = 6G\n[tenant b]\nmin = 6G\n", 5,
                 "guarantees (sum of every min, 12 GiB) are above budget (10 GiB)");
    expect_error("[uid 1]\nmin = 6G\n[tenant b]\nmin = 6G\n[tenant c]\nbudget = 1G\n", 6,
                 "unknown key 'budget' in [tenant c]");
    /* without a budget the file is checked again once the daemon knows the
     * device's memory */
    struct mb_config cfg;
    char err[256] = "";
    assert_int_equal(mb_config_parse_string("[tenant a]\nmin = 40G\n[tenant b]\nmin = 40G\n", "x",
                                            &cfg, NULL, 0), 0);
    assert_int_equal(cfg.budget, 0);
    cfg.budget = 64 * GiB;
    assert_int_equal(mb_config_check(&cfg, err, sizeof(err)), MB_EINVAL);
    assert_non_null(strstr(err, "are above budget (64 GiB)"));
    mb_config_free(&cfg);
    /* at the limits */
    assert_int_equal(mb_config_parse_string("budget = 32M\n", "x", &cfg, NULL, 0), 0);
    mb_config_free(&cfg);
    assert_int_equal(mb_config_parse_string("budget = 2T\nreserve = 100G\n[tenant a]\nmin = 1T\n"
                                            "[uid 3]\nmin = 1T\n", "x", &cfg, NULL, 0), 0);
    mb_config_free(&cfg);
    assert_int_equal(mb_config_parse_string("frame_size = 6M\nbudget = 6M\n", "x", &cfg, NULL, 0), 0);
    mb_config_free(&cfg);
}

static void test_load_files(void **state)
{
    (void)state;
    struct mb_config cfg;
    char err[512] = "";
    int rc = mb_config_load("/nonexistent/moonbright/x.conf", &cfg, err, sizeof(err));
    assert_int_equal(rc, MB_ENOENT);
    assert_string_equal(err, "/nonexistent/moonbright/x.conf: No such file or directory");
    assert_string_equal(cfg.backend, "auto");
    mb_config_free(&cfg);

    rc = mb_config_load("/", &cfg, err, sizeof(err));
    assert_int_equal(rc, MB_ESYS);
    assert_non_null(strstr(err, "/: failed to read"));
    mb_config_free(&cfg);

    char path[] = "/tmp/mbconfXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char bad[] = "backend = cuda\nbudget = 1G\n\nscrub = on\0junk\n";
    assert_int_equal(write(fd, bad, sizeof(bad) - 1), (ssize_t)(sizeof(bad) - 1));
    close(fd);
    rc = mb_config_load(path, &cfg, err, sizeof(err));
    assert_int_equal(rc, MB_EINVAL);
    char want[128];
    snprintf(want, sizeof(want), "%s:4: NUL byte in line", path);
    assert_string_equal(err, want);
    mb_config_free(&cfg);

    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    static const char good[] = "backend = cuda\r\nbudget = 1G\r\n[tenant x]\r\nmax = 512M\r\n";
    assert_int_equal(write(fd, good, sizeof(good) - 1), (ssize_t)(sizeof(good) - 1));
    close(fd);
    rc = mb_config_load(path, &cfg, err, sizeof(err));
    assert_int_equal(rc, 0);
    assert_string_equal(cfg.backend, "cuda");
    assert_int_equal(mb_config_tenant(&cfg, "x")->max, 512 * MiB);
    mb_config_free(&cfg);
    unlink(path);
}

static void test_long_line(void **state)
{
    (void)state;
    size_t n = 5000;
    char *text = malloc(n + 32);
    assert_non_null(text);
    strcpy(text, "scrub = on\n# ");
    memset(text + strlen(text), 'x', n);
    strcpy(text + 13 + n, "\n");
    expect_error(text, 2, "line longer than 4095 bytes");
    free(text);
}

static void test_shipped_config(void **state)
{
    (void)state;
    struct mb_config cfg, def;
    char err[512] = "";
    int rc = mb_config_load(MB_SHIPPED_CONFIG, &cfg, err, sizeof(err));
    if (rc != 0)
        fail_msg("%s: rc %d: %s", MB_SHIPPED_CONFIG, rc, err);
    /* every line is commented out, so it is exactly the defaults */
    mb_config_defaults(&def);
    assert_memory_equal(&cfg, &def, sizeof(cfg));
    mb_config_free(&cfg);

    /* and uncommenting every "#key = value" line still parses */
    FILE *f = fopen(MB_SHIPPED_CONFIG, "r");
    assert_non_null(f);
    char text[16384] = "", line[512];
    while (fgets(line, sizeof(line), f)) {
        const char *p = line;
        if (p[0] == '#' && p[1] != ' ' && p[1] != '\n' && p[1] != '\0')
            p++;
        assert_true(strlen(text) + strlen(p) < sizeof(text));
        strcat(text, p);
    }
    fclose(f);
    rc = mb_config_parse_string(text, "uncommented", &cfg, err, sizeof(err));
    if (rc != 0)
        fail_msg("uncommented %s: %s", MB_SHIPPED_CONFIG, err);
    assert_non_null(mb_config_tenant(&cfg, "llm-serving"));
    assert_non_null(mb_config_uid(&cfg, 1001));
    mb_config_free(&cfg);
}

static void test_set_overrides(void **state)
{
    (void)state;
    struct mb_config cfg;
    char err[256] = "";
    assert_int_equal(mb_config_parse_string("budget = 8G\nreserve = 1G\n", "x", &cfg, err,
                                            sizeof(err)), 0);
    assert_int_equal(mb_config_set(&cfg, "budget", "16G", err, sizeof(err)), 0);
    assert_int_equal(cfg.budget, 16 * GiB);
    assert_int_equal(mb_config_set(&cfg, "frame-size", "64K", err, sizeof(err)), 0);
    assert_int_equal(cfg.frame_size, 64 * 1024);
    assert_int_equal(mb_config_set(&cfg, "backend", "host", err, sizeof(err)), 0);
    assert_string_equal(cfg.backend, "host");
    assert_int_equal(mb_config_set(&cfg, "runtime-dir", "/tmp/mb", err, sizeof(err)), 0);
    assert_string_equal(cfg.runtime_dir, "/tmp/mb");
    assert_int_equal(mb_config_set(&cfg, "runtime_dir", "/tmp/mb2", err, sizeof(err)), 0);
    assert_string_equal(cfg.runtime_dir, "/tmp/mb2");
    assert_int_equal(mb_config_set(&cfg, "admin_uids", "5,6", err, sizeof(err)), 0);
    assert_int_equal(cfg.n_admin_uids, 2);
    assert_int_equal(mb_config_set(&cfg, "devices", "3", err, sizeof(err)), 0);
    assert_false(cfg.devices_all);
    assert_int_equal(mb_config_set(&cfg, "devices", "all", err, sizeof(err)), 0);
    assert_true(cfg.devices_all);

    /* same validation and messages as the file, without FILE:LINE */
    assert_int_equal(mb_config_set(&cfg, "budget", "lots", err, sizeof(err)), MB_EINVAL);
    assert_string_equal(err, "bad size 'lots' for budget");
    assert_int_equal(cfg.budget, 16 * GiB);   /* unchanged */
    assert_int_equal(mb_config_set(&cfg, "budgett", "1G", err, sizeof(err)), MB_EINVAL);
    assert_string_equal(err, "unknown key 'budgett' (did you mean 'budget'?)");
    assert_int_equal(mb_config_set(&cfg, "max", "1G", err, sizeof(err)), MB_EINVAL);
    assert_int_equal(mb_config_set(&cfg, "admin_uids", "1 nobody-mb-x", err, sizeof(err)), MB_EINVAL);
    assert_int_equal(cfg.n_admin_uids, 2);   /* unchanged */

    /* checks between fields run on demand */
    assert_int_equal(mb_config_check(&cfg, err, sizeof(err)), 0);
    assert_int_equal(mb_config_set(&cfg, "budget", "512M", err, sizeof(err)), 0);
    assert_int_equal(mb_config_check(&cfg, err, sizeof(err)), MB_EINVAL);
    assert_string_equal(err, "reserve (1 GiB) is above budget (512 MiB)");
    assert_int_equal(mb_config_set(&cfg, "reserve", "0", err, sizeof(err)), 0);
    assert_int_equal(mb_config_check(&cfg, err, sizeof(err)), 0);
    mb_config_free(&cfg);
}

static void test_small_err_buffer(void **state)
{
    (void)state;
    struct mb_config cfg;
    char err[8];
    memset(err, 'z', sizeof(err));
    assert_int_equal(mb_config_parse_string("budgett = 1\n", "x", &cfg, err, sizeof(err)), MB_EINVAL);
    assert_int_equal(strlen(err), sizeof(err) - 1);
    mb_config_free(&cfg);
    assert_int_equal(mb_config_parse_string("budgett = 1\n", "x", &cfg, NULL, 0), MB_EINVAL);
    mb_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_example_values),
        cmocka_unit_test(test_empty_and_comments),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_tenant_uids),
        cmocka_unit_test(test_unknown_sections),
        cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_min_above_max),
        cmocka_unit_test(test_cross_field),
        cmocka_unit_test(test_load_files),
        cmocka_unit_test(test_long_line),
        cmocka_unit_test(test_shipped_config),
        cmocka_unit_test(test_set_overrides),
        cmocka_unit_test(test_small_err_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
