/* config.c: moonbrightd's configuration: defaults, the file parser (global
 * keys, [tenant NAME] and [uid USER] sections), one setter per key shared by
 * the file and command-line overrides, and the checks between fields; and
 * the integer environment variables the library and the daemon read, one
 * way for both (mb_env_long). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <moonbright/status.h>

#include "log.h"
#include "size.h"

#define LINE_MAX_BYTES 4096              /* longest line, including '\0' */
#define FILE_MAX_BYTES (1u << 20)        /* largest config file read */
#define RUNTIME_DIR_MAX 90               /* leaves room for "/gpuN.ctl" in sun_path */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void mb_config_defaults(struct mb_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    strcpy(cfg->backend, "auto");
    cfg->budget = 0;   /* unset: the daemon takes the device's memory once its backend is open */
    cfg->frame_size = 2u << 20;
    cfg->reserve = 0;
    cfg->reserve_idle_ms = 5000;
    cfg->device_headroom = 0;
    cfg->scrub = true;
    cfg->watchdog = true;
    cfg->log_level = MB_LOG_INFO;
    cfg->devices_all = true;
}

void mb_config_free(struct mb_config *cfg)
{
    free(cfg->runtime_dir);
    free(cfg->admin_uids);
    for (size_t i = 0; i < cfg->n_tenants; i++)
        free(cfg->tenants[i].bound_uids);
    free(cfg->tenants);
    free(cfg->uids);
    mb_config_defaults(cfg);
}

/* ---- values ------------------------------------------------------------ */

/* Strict decimal without sign; 0 or MB_EINVAL. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!isdigit((unsigned char)*s))
        return MB_EINVAL;
    uint64_t v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (max - d) / 10)
            return MB_EINVAL;
        v = v * 10 + d;
    }
    if (*s)
        return MB_EINVAL;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    static const char *yes[] = { "on", "yes", "true", "1" };
    static const char *no[] = { "off", "no", "false", "0" };
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return MB_EINVAL;
}

/* A uid as a number or a login name. */
static int parse_user(const char *s, uid_t *out, char *why, size_t whylen)
{
    uint64_t v;
    if (isdigit((unsigned char)*s)) {
        if (parse_u64(s, (uid_t)-2, &v) != 0) {
            set_err(why, whylen, "bad uid '%s'", s);
            return MB_EINVAL;
        }
        *out = (uid_t)v;
        return 0;
    }
    struct passwd pw, *res = NULL;
    char buf[4096];
    int rc = getpwnam_r(s, &pw, buf, sizeof(buf), &res);
    if (rc != 0 || !res) {
        set_err(why, whylen, "unknown user '%s'", s);
        return MB_EINVAL;
    }
    *out = res->pw_uid;
    return 0;
}

static bool valid_tenant_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MB_CONFIG_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._-:@+", *s))
            return false;
    return true;
}

/* ---- global keys ------------------------------------------------------- */

typedef int (*setter_fn)(struct mb_config *cfg, const char *key, const char *v,
                         char *why, size_t whylen);

static int set_backend(struct mb_config *cfg, const char *key, const char *v,
                       char *why, size_t whylen)
{
    if (strcmp(v, "auto") != 0 && strcmp(v, "cuda") != 0 && strcmp(v, "host") != 0) {
        set_err(why, whylen, "bad value '%s' for %s (auto, cuda or host)", v, key);
        return MB_EINVAL;
    }
    strcpy(cfg->backend, v);
    return 0;
}

static int set_budget(struct mb_config *cfg, const char *key, const char *v,
                      char *why, size_t whylen)
{
    uint64_t b;
    if (mb_parse_size(v, &b) != 0 || b == 0) {
        set_err(why, whylen, "bad size '%s' for %s", v, key);
        return MB_EINVAL;
    }
    cfg->budget = b;
    return 0;
}

static int set_frame_size(struct mb_config *cfg, const char *key, const char *v,
                          char *why, size_t whylen)
{
    uint64_t b;
    if (mb_parse_size(v, &b) != 0) {
        set_err(why, whylen, "bad size '%s' for %s", v, key);
        return MB_EINVAL;
    }
    if (b == 0 || b % 4096 != 0) {
        set_err(why, whylen, "bad %s '%s': not a non-zero multiple of 4K", key, v);
        return MB_EINVAL;
    }
    cfg->frame_size = b;
    return 0;
}

/* A size for `key` into *out (any size, 0 included). */
static int size_value(const char *key, const char *v, uint64_t *out, char *why, size_t whylen)
{
    if (mb_parse_size(v, out) != 0) {
        set_err(why, whylen, "bad size '%s' for %s", v, key);
        return MB_EINVAL;
    }
    return 0;
}

static int set_reserve(struct mb_config *cfg, const char *key, const char *v,
                       char *why, size_t whylen)
{
    return size_value(key, v, &cfg->reserve, why, whylen);
}

static int set_device_headroom(struct mb_config *cfg, const char *key, const char *v,
                               char *why, size_t whylen)
{
    return size_value(key, v, &cfg->device_headroom, why, whylen);
}

/* A duration: milliseconds, or a number with an "ms" or "s" suffix. */
static int set_reserve_idle(struct mb_config *cfg, const char *key, const char *v,
                            char *why, size_t whylen)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (strcmp(end, "s") == 0)
        x *= 1000;
    else if (*end && strcmp(end, "ms") != 0)
        end = NULL;
    if (errno || !end || end == v || !(x >= 0 && x <= 86400000)) {
        set_err(why, whylen, "bad duration '%s' for %s (milliseconds, or with ms or s; 0 keeps "
                "idle frames)", v, key);
        return MB_EINVAL;
    }
    cfg->reserve_idle_ms = (int64_t)x;
    return 0;
}

static int set_scrub(struct mb_config *cfg, const char *key, const char *v,
                     char *why, size_t whylen)
{
    if (parse_bool(v, &cfg->scrub) != 0) {
        set_err(why, whylen, "bad value '%s' for %s (on or off)", v, key);
        return MB_EINVAL;
    }
    return 0;
}

static int set_watchdog(struct mb_config *cfg, const char *key, const char *v,
                        char *why, size_t whylen)
{
    if (parse_bool(v, &cfg->watchdog) != 0) {
        set_err(why, whylen, "bad value '%s' for %s (on or off)", v, key);
        return MB_EINVAL;
    }
    return 0;
}

static int set_log_level(struct mb_config *cfg, const char *key, const char *v,
                         char *why, size_t whylen)
{
    int level = mb_log_parse_level(v);
    if (level < 0) {
        set_err(why, whylen, "bad value '%s' for %s (err, warn, info or debug)", v, key);
        return MB_EINVAL;
    }
    cfg->log_level = level;
    return 0;
}

static int set_runtime_dir(struct mb_config *cfg, const char *key, const char *v,
                           char *why, size_t whylen)
{
    if (*v == '\0') {
        free(cfg->runtime_dir);
        cfg->runtime_dir = NULL;
        return 0;
    }
    if (v[0] != '/') {
        set_err(why, whylen, "bad %s '%s': not an absolute path", key, v);
        return MB_EINVAL;
    }
    if (strlen(v) > RUNTIME_DIR_MAX) {
        set_err(why, whylen, "bad %s: longer than %d bytes (socket paths are short)",
                key, RUNTIME_DIR_MAX);
        return MB_EINVAL;
    }
    char *copy = strdup(v);
    if (!copy) {
        set_err(why, whylen, "out of memory");
        return MB_ENOMEM;
    }
    free(cfg->runtime_dir);
    cfg->runtime_dir = copy;
    return 0;
}

/* Split v at blanks and commas; call fn for each word. */
static int for_each_word(const char *v, int (*fn)(void *ctx, const char *word), void *ctx)
{
    char word[256];
    while (*v) {
        while (*v == ',' || isspace((unsigned char)*v))
            v++;
        if (!*v)
            break;
        size_t n = 0;
        while (v[n] && v[n] != ',' && !isspace((unsigned char)v[n]))
            n++;
        if (n >= sizeof(word))
            n = sizeof(word) - 1;   /* too long to be valid; fn rejects it */
        memcpy(word, v, n);
        word[n] = '\0';
        int rc = fn(ctx, word);
        if (rc != 0)
            return rc;
        v += n;
        while (*v && *v != ',' && !isspace((unsigned char)*v))
            v++;
    }
    return 0;
}

struct list_ctx {
    const char *key;
    char *why;
    size_t whylen;
    uid_t *uids;
    size_t n_uids;
    int devices[MB_CONFIG_MAX_DEVICES];
    size_t n_devices;
};

/* Add one user of a list of uids; a repeat is dropped (dup_ok) or refused. */
static int add_uid(struct list_ctx *c, const char *word, bool dup_ok)
{
    uid_t uid;
    if (parse_user(word, &uid, c->why, c->whylen) != 0) {
        size_t n = strlen(c->why);
        snprintf(c->why + n, c->whylen - n, " in %s", c->key);
        return MB_EINVAL;
    }
    for (size_t i = 0; i < c->n_uids; i++)
        if (c->uids[i] == uid) {
            if (dup_ok)
                return 0;
            set_err(c->why, c->whylen, "uid %u listed twice in %s", (unsigned)uid, c->key);
            return MB_EINVAL;
        }
    uid_t *grown = realloc(c->uids, (c->n_uids + 1) * sizeof(*grown));
    if (!grown) {
        set_err(c->why, c->whylen, "out of memory");
        return MB_ENOMEM;
    }
    c->uids = grown;
    c->uids[c->n_uids++] = uid;
    return 0;
}

static int add_admin(void *vctx, const char *word) { return add_uid(vctx, word, true); }
static int add_bound_uid(void *vctx, const char *word) { return add_uid(vctx, word, false); }

static int set_admin_uids(struct mb_config *cfg, const char *key, const char *v,
                          char *why, size_t whylen)
{
    struct list_ctx c = { .key = key, .why = why, .whylen = whylen };
    int rc = for_each_word(v, add_admin, &c);
    if (rc != 0) {
        free(c.uids);
        return rc;
    }
    free(cfg->admin_uids);
    cfg->admin_uids = c.uids;
    cfg->n_admin_uids = c.n_uids;
    return 0;
}

static int add_device(void *vctx, const char *word)
{
    struct list_ctx *c = vctx;
    uint64_t d;
    if (parse_u64(word, 1023, &d) != 0) {
        set_err(c->why, c->whylen, "bad device '%s' in %s (a number, or all)", word, c->key);
        return MB_EINVAL;
    }
    for (size_t i = 0; i < c->n_devices; i++) {
        if (c->devices[i] == (int)d) {
            set_err(c->why, c->whylen, "device %d listed twice in %s", (int)d, c->key);
            return MB_EINVAL;
        }
    }
    if (c->n_devices == MB_CONFIG_MAX_DEVICES) {
        set_err(c->why, c->whylen, "more than %d devices in %s", MB_CONFIG_MAX_DEVICES, c->key);
        return MB_EINVAL;
    }
    c->devices[c->n_devices++] = (int)d;
    return 0;
}

static int set_devices(struct mb_config *cfg, const char *key, const char *v,
                       char *why, size_t whylen)
{
    if (strcmp(v, "all") == 0) {
        cfg->devices_all = true;
        cfg->n_devices = 0;
        return 0;
    }
    struct list_ctx c = { .key = key, .why = why, .whylen = whylen };
    int rc = for_each_word(v, add_device, &c);
    if (rc != 0)
        return rc;
    if (c.n_devices == 0) {
        set_err(why, whylen, "empty %s (a list of device numbers, or all)", key);
        return MB_EINVAL;
    }
    cfg->devices_all = false;
    memcpy(cfg->devices, c.devices, c.n_devices * sizeof(int));
    cfg->n_devices = c.n_devices;
    return 0;
}

static const struct {
    const char *name;
    setter_fn set;
} g_keys[] = {
    { "backend", set_backend },
    { "budget", set_budget },
    { "frame_size", set_frame_size },
    { "reserve", set_reserve },
    { "reserve_idle", set_reserve_idle },
    { "device_headroom", set_device_headroom },
    { "scrub", set_scrub },
    { "watchdog", set_watchdog },
    { "log_level", set_log_level },
    { "runtime_dir", set_runtime_dir },
    { "admin_uids", set_admin_uids },
    { "devices", set_devices },
};
#define N_KEYS (sizeof(g_keys) / sizeof(g_keys[0]))

static const char *g_section_keys[] = { "max", "min", "uids" };

static int find_key(const char *key)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(key, g_keys[i].name) == 0)
            return (int)i;
    return -1;
}

/* Edit distance, for "did you mean"; strings here are short. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 31 || lb > 31)
        return 99;
    size_t d[32][32];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

/* " (did you mean 'x'?)" for the closest of names, or "". */
static const char *suggest(const char *key, const char *const *names, size_t n,
                           char *buf, size_t len)
{
    size_t best = 3;
    const char *pick = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t d = distance(key, names[i]);
        if (d < best) {
            best = d;
            pick = names[i];
        }
    }
    if (!pick)
        return "";
    snprintf(buf, len, " (did you mean '%s'?)", pick);
    return buf;
}

int mb_config_set(struct mb_config *cfg, const char *key, const char *value,
                  char *err, size_t errlen)
{
    char norm[64];
    size_t n = strlen(key);
    if (n >= sizeof(norm)) {
        set_err(err, errlen, "unknown key '%s'", key);
        return MB_EINVAL;
    }
    for (size_t i = 0; i <= n; i++)
        norm[i] = key[i] == '-' ? '_' : key[i];
    int k = find_key(norm);
    if (k < 0) {
        const char *names[N_KEYS];
        char hint[64];
        for (size_t i = 0; i < N_KEYS; i++)
            names[i] = g_keys[i].name;
        set_err(err, errlen, "unknown key '%s'%s", key,
                suggest(norm, names, N_KEYS, hint, sizeof(hint)));
        return MB_EINVAL;
    }
    char why[512];
    int rc = g_keys[k].set(cfg, g_keys[k].name, value ? value : "", why, sizeof(why));
    if (rc != 0)
        set_err(err, errlen, "%s", why);
    return rc;
}

/* ---- checks between fields --------------------------------------------- */

enum { CHECK_OK, CHECK_FRAME, CHECK_RESERVE, CHECK_MIN };

static int check(const struct mb_config *cfg, int *which, char *why, size_t whylen)
{
    char a[32], b[32];
    *which = CHECK_OK;
    if (cfg->budget == 0)   /* not known yet: checked again once it is */
        return 0;
    if (cfg->budget < cfg->frame_size) {
        *which = CHECK_FRAME;
        set_err(why, whylen, "budget (%s) is smaller than one frame (%s)",
                mb_format_size(cfg->budget, a, sizeof(a)),
                mb_format_size(cfg->frame_size, b, sizeof(b)));
        return MB_EINVAL;
    }
    if (cfg->reserve > cfg->budget) {
        *which = CHECK_RESERVE;
        set_err(why, whylen, "reserve (%s) is above budget (%s)",
                mb_format_size(cfg->reserve, a, sizeof(a)),
                mb_format_size(cfg->budget, b, sizeof(b)));
        return MB_EINVAL;
    }
    uint64_t sum = 0;   /* saturates: a min may be near 2^64 */
    for (size_t i = 0; i < cfg->n_tenants + cfg->n_uids; i++) {
        uint64_t m = i < cfg->n_tenants ? cfg->tenants[i].min : cfg->uids[i - cfg->n_tenants].min;
        sum = m > UINT64_MAX - sum ? UINT64_MAX : sum + m;
    }
    if (sum > cfg->budget) {
        *which = CHECK_MIN;
        set_err(why, whylen, "guarantees (sum of every min, %s) are above budget (%s)",
                mb_format_size(sum, a, sizeof(a)), mb_format_size(cfg->budget, b, sizeof(b)));
        return MB_EINVAL;
    }
    return 0;
}

int mb_config_check(const struct mb_config *cfg, char *err, size_t errlen)
{
    int which;
    char why[256];
    int rc = check(cfg, &which, why, sizeof(why));
    if (rc != 0)
        set_err(err, errlen, "%s", why);
    return rc;
}

/* ---- the file ---------------------------------------------------------- */

enum section { SEC_GLOBAL, SEC_TENANT, SEC_UID };

struct parser {
    const char *name;              /* file name for messages */
    int line;                      /* current line, from 1 */
    struct mb_config *cfg;
    enum section sec;
    char sec_label[96];            /* "[tenant foo]" for messages */
    size_t cur_index;              /* the section's policy in tenants[] or uids[] */
    int global_line[N_KEYS];       /* where each global key was set; 0: not */
    int sec_line[3];               /* where max, min, uids were set in this section */
    int last_min_line;
    char *err;
    size_t errlen;
};

static int fail(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct parser *p, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    set_err(p->err, p->errlen, "%s:%d: %s", p->name, p->line, why);
    return MB_EINVAL;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static struct mb_config_policy *add_policy(struct mb_config_policy **arr, size_t *n)
{
    struct mb_config_policy *grown = realloc(*arr, (*n + 1) * sizeof(*grown));
    if (!grown)
        return NULL;
    *arr = grown;
    struct mb_config_policy *pol = &grown[(*n)++];
    memset(pol, 0, sizeof(*pol));
    pol->max = MB_CONFIG_UNLIMITED;
    return pol;
}

static int parse_section(struct parser *p, char *s)
{
    size_t n = strlen(s);
    if (s[n - 1] != ']')
        return fail(p, "section header '%s' lacks a closing ']'", s);
    s[n - 1] = '\0';
    char *inner = trim(s + 1);
    char *kind = inner, *arg = inner;
    while (*arg && !isspace((unsigned char)*arg))
        arg++;
    if (*arg)
        *arg++ = '\0';
    arg = trim(arg);
    struct mb_config *cfg = p->cfg;
    memset(p->sec_line, 0, sizeof(p->sec_line));

    if (strcmp(kind, "tenant") == 0) {
        if (!*arg)
            return fail(p, "section [tenant] needs a name: [tenant NAME]");
        if (!valid_tenant_name(arg))
            return fail(p, "bad tenant name '%s' (up to %d letters, digits or ._-:@+)",
                        arg, MB_CONFIG_NAME_MAX);
        const struct mb_config_policy *old = mb_config_tenant(cfg, arg);
        if (old)
            return fail(p, "duplicate section [tenant %s] (first on line %d)", arg, old->line);
        struct mb_config_policy *pol = add_policy(&cfg->tenants, &cfg->n_tenants);
        if (!pol)
            return fail(p, "out of memory");
        strcpy(pol->name, arg);
        pol->line = p->line;
        p->sec = SEC_TENANT;
        p->cur_index = cfg->n_tenants - 1;
        snprintf(p->sec_label, sizeof(p->sec_label), "[tenant %s]", arg);
        return 0;
    }
    if (strcmp(kind, "uid") == 0) {
        if (!*arg)
            return fail(p, "section [uid] needs a user: [uid NUMBER] or [uid LOGIN]");
        uid_t uid;
        char why[256];
        if (parse_user(arg, &uid, why, sizeof(why)) != 0)
            return fail(p, "%s in [uid %s]", why, arg);
        const struct mb_config_policy *old = mb_config_uid(cfg, uid);
        if (old)
            return fail(p, "duplicate section [uid %s] (uid %u, first on line %d)", arg,
                        (unsigned)uid, old->line);
        struct mb_config_policy *pol = add_policy(&cfg->uids, &cfg->n_uids);
        if (!pol)
            return fail(p, "out of memory");
        pol->uid = uid;
        pol->line = p->line;
        p->sec = SEC_UID;
        p->cur_index = cfg->n_uids - 1;
        snprintf(p->sec_label, sizeof(p->sec_label), "[uid %s]", arg);
        return 0;
    }
    if (!*kind)
        return fail(p, "empty section header '[]'");
    return fail(p, "unknown section [%s%s%s] (tenant or uid)", kind, *arg ? " " : "", arg);
}

/* uids = USER, ... in a [tenant NAME] section: the users bound to it. */
static int parse_tenant_uids(struct parser *p, struct mb_config_policy *pol, const char *v)
{
    char why[300];
    struct list_ctx c = { .key = "uids", .why = why, .whylen = sizeof(why) };
    int rc = for_each_word(v, add_bound_uid, &c);
    if (rc == 0 && c.n_uids == 0) {
        set_err(why, sizeof(why), "empty uids (a list of users: numbers or login names)");
        rc = MB_EINVAL;
    }
    if (rc != 0) {
        free(c.uids);
        return fail(p, "%s in %s", why, p->sec_label);
    }
    pol->bound_uids = c.uids;
    pol->n_bound_uids = c.n_uids;
    return 0;
}

static int parse_section_key(struct parser *p, const char *key, const char *v)
{
    struct mb_config_policy *pol = p->sec == SEC_TENANT ? &p->cfg->tenants[p->cur_index]
                                                        : &p->cfg->uids[p->cur_index];
    int k = strcmp(key, "max") == 0 ? 0 : strcmp(key, "min") == 0 ? 1
          : strcmp(key, "uids") == 0 ? 2 : -1;
    if (k < 0) {
        char hint[64];
        const char *extra = find_key(key) >= 0 ? " (global keys go before the first section)"
                                               : suggest(key, g_section_keys, 3, hint, sizeof(hint));
        return fail(p, "unknown key '%s' in %s%s", key, p->sec_label, extra);
    }
    if (k == 2 && p->sec != SEC_TENANT)
        return fail(p, "key 'uids' in %s: it binds a tenant to users and belongs in a "
                    "[tenant NAME] section", p->sec_label);
    if (p->sec_line[k])
        return fail(p, "duplicate key '%s' in %s (first on line %d)", key, p->sec_label,
                    p->sec_line[k]);
    if (k == 2) {
        p->sec_line[k] = p->line;
        return parse_tenant_uids(p, pol, v);
    }
    uint64_t b;
    if (k == 0 && strcmp(v, "unlimited") == 0)
        b = MB_CONFIG_UNLIMITED;
    else if (mb_parse_size(v, &b) != 0)
        return fail(p, "bad size '%s' for %s in %s", v, key, p->sec_label);
    p->sec_line[k] = p->line;
    if (k == 0)
        pol->max = b;
    else {
        pol->min = b;
        p->last_min_line = p->line;
    }
    if (pol->min > pol->max) {
        char a[32], c[32];
        return fail(p, "min (%s) is above max (%s) in %s",
                    mb_format_size(pol->min, a, sizeof(a)),
                    mb_format_size(pol->max, c, sizeof(c)), p->sec_label);
    }
    return 0;
}

static int parse_line(struct parser *p, char *raw)
{
    char *hash = strchr(raw, '#');
    if (hash)
        *hash = '\0';
    char *s = trim(raw);
    if (!*s)
        return 0;
    if (*s == '[')
        return parse_section(p, s);
    char *eq = strchr(s, '=');
    if (!eq)
        return fail(p, "expected 'key = value' or '[section]', got '%s'", s);
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    if (!*key)
        return fail(p, "missing key before '='");
    if (p->sec != SEC_GLOBAL)
        return parse_section_key(p, key, value);

    int k = find_key(key);
    if (k < 0) {
        const char *names[N_KEYS];
        char hint[64];
        for (size_t i = 0; i < N_KEYS; i++)
            names[i] = g_keys[i].name;
        const char *extra = strcmp(key, "max") == 0 || strcmp(key, "min") == 0
                                ? " (max and min belong in a [tenant NAME] or [uid USER] section)"
                          : strcmp(key, "uids") == 0 ? " (uids belongs in a [tenant NAME] section)"
                                : suggest(key, names, N_KEYS, hint, sizeof(hint));
        return fail(p, "unknown key '%s'%s", key, extra);
    }
    if (p->global_line[k])
        return fail(p, "duplicate key '%s' (first on line %d)", key, p->global_line[k]);
    char why[512];
    if (g_keys[k].set(p->cfg, g_keys[k].name, value, why, sizeof(why)) != 0)
        return fail(p, "%s", why);
    p->global_line[k] = p->line;
    return 0;
}

static int parse_buffer(const char *text, size_t len, const char *name,
                        struct mb_config *cfg, char *err, size_t errlen)
{
    struct parser p = { .name = name ? name : "(config)", .cfg = cfg, .err = err, .errlen = errlen };
    mb_config_defaults(cfg);
    char line[LINE_MAX_BYTES];
    size_t pos = 0;
    int rc = 0;
    while (pos < len && rc == 0) {
        p.line++;
        const char *start = text + pos;
        const char *nl = memchr(start, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - start) : len - pos;
        pos += n + (nl ? 1 : 0);
        if (memchr(start, '\0', n)) {
            rc = fail(&p, "NUL byte in line");
            break;
        }
        if (n >= sizeof(line)) {
            rc = fail(&p, "line longer than %d bytes", LINE_MAX_BYTES - 1);
            break;
        }
        memcpy(line, start, n);
        line[n] = '\0';
        rc = parse_line(&p, line);
    }
    if (rc == 0) {
        int which;
        char why[256];
        if (check(cfg, &which, why, sizeof(why)) != 0) {
            int kb = find_key("budget"), kf = find_key("frame_size"), kr = find_key("reserve");
            int other = which == CHECK_FRAME ? p.global_line[kf]
                      : which == CHECK_RESERVE ? p.global_line[kr] : p.last_min_line;
            p.line = p.global_line[kb] > other ? p.global_line[kb] : other;
            rc = fail(&p, "%s", why);
        }
    }
    if (rc != 0)
        mb_config_free(cfg);
    return rc;
}

int mb_config_parse_string(const char *text, const char *name, struct mb_config *cfg,
                           char *err, size_t errlen)
{
    return parse_buffer(text ? text : "", text ? strlen(text) : 0, name, cfg, err, errlen);
}

int mb_config_load(const char *path, struct mb_config *cfg, char *err, size_t errlen)
{
    mb_config_defaults(cfg);
    FILE *f = fopen(path, "re");
    if (!f) {
        int e = errno;
        set_err(err, errlen, "%s: %s", path, strerror(e));
        return e == ENOENT ? MB_ENOENT : MB_ESYS;
    }
    char *buf = malloc(FILE_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        set_err(err, errlen, "%s: out of memory", path);
        return MB_ENOMEM;
    }
    size_t len = fread(buf, 1, FILE_MAX_BYTES + 1, f);
    int read_err = ferror(f) ? errno : 0;
    fclose(f);
    int rc;
    if (read_err) {
        set_err(err, errlen, "%s: failed to read: %s", path, strerror(read_err));
        rc = MB_ESYS;
    } else if (len > FILE_MAX_BYTES) {
        set_err(err, errlen, "%s: larger than %u bytes", path, FILE_MAX_BYTES);
        rc = MB_EINVAL;
    } else {
        rc = parse_buffer(buf, len, path, cfg, err, errlen);
    }
    free(buf);
    return rc;
}

/* ---- lookups ----------------------------------------------------------- */

const struct mb_config_policy *mb_config_tenant(const struct mb_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_tenants; i++)
        if (strcmp(cfg->tenants[i].name, name) == 0)
            return &cfg->tenants[i];
    return NULL;
}

const struct mb_config_policy *mb_config_uid(const struct mb_config *cfg, uid_t uid)
{
    for (size_t i = 0; i < cfg->n_uids; i++)
        if (cfg->uids[i].uid == uid)
            return &cfg->uids[i];
    return NULL;
}

bool mb_config_tenant_allows(const struct mb_config_policy *pol, uid_t uid)
{
    if (pol->n_bound_uids == 0)
        return true;
    for (size_t i = 0; i < pol->n_bound_uids; i++)
        if (pol->bound_uids[i] == uid)
            return true;
    return false;
}

bool mb_config_is_admin(const struct mb_config *cfg, uid_t uid)
{
    if (uid == 0)
        return true;
    for (size_t i = 0; i < cfg->n_admin_uids; i++)
        if (cfg->admin_uids[i] == uid)
            return true;
    return false;
}

long mb_env_long(const char *name, long dflt, long lo, long hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end || errno || x < lo || x > hi) {
        mb_log(MB_LOG_WARN, "ignoring %s=%s (expected %ld..%ld)", name, v, lo, hi);
        return dflt;
    }
    return x;
}
