/* fuzz_config.c: libFuzzer target over moonbrightd's configuration input:
 * the file parser (mb_config_parse_string), the command-line setter
 * (mb_config_set) and the size parser (mb_parse_size). The first byte
 * picks which; the rest is the text (cut at its first NUL, as a file read
 * into a string would be). Must never crash or leak, and must keep the
 * promises of config.h and size.h:
 *   - accepted text gives a configuration whose invariants hold (checked
 *     by config_holds below) and that mb_config_check accepts;
 *   - refused text gives MB_EINVAL with a one-line reason and leaves the
 *     defaults;
 *   - a size parsed is the value its digits and suffix say, and a refused
 *     one leaves the output untouched. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moonbright/mbclient.h>

#include "config.h"
#include "log.h"
#include "size.h"

#define FAIL(...) do { fprintf(stderr, "fuzz_config: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > MB_CONFIG_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || strchr("._-:@+", s[i])))
            return false;
    return true;
}

static void policy_holds(const struct mb_config_policy *p, bool tenant)
{
    if (p->min > p->max)
        FAIL("policy %s/%u: min %llu > max %llu", p->name, (unsigned)p->uid,
             (unsigned long long)p->min, (unsigned long long)p->max);
    if (tenant && !name_ok(p->name))
        FAIL("tenant name '%s' outside 1-63 of [A-Za-z0-9._-:@+]", p->name);
    if (!tenant && p->name[0])
        FAIL("uid policy %u carries a name", (unsigned)p->uid);
    if (!tenant && p->n_bound_uids)
        FAIL("uid policy %u binds uids", (unsigned)p->uid);
    if (p->n_bound_uids && !p->bound_uids)
        FAIL("tenant %s: %zu bound uids and no array", p->name, p->n_bound_uids);
    for (size_t i = 0; i < p->n_bound_uids; i++)
        for (size_t j = i + 1; j < p->n_bound_uids; j++)
            if (p->bound_uids[i] == p->bound_uids[j])
                FAIL("tenant %s: uid %u bound twice", p->name, (unsigned)p->bound_uids[i]);
}

/* config.h's invariants of an accepted configuration. */
static void config_holds(const struct mb_config *c)
{
    if (strcmp(c->backend, "auto") && strcmp(c->backend, "cuda") && strcmp(c->backend, "host"))
        FAIL("backend '%s'", c->backend);
    if (c->frame_size == 0 || c->frame_size % 4096)
        FAIL("frame_size %llu", (unsigned long long)c->frame_size);
    if (c->budget && c->budget < c->frame_size)
        FAIL("budget %llu below one frame", (unsigned long long)c->budget);
    if (c->budget && c->reserve > c->budget)
        FAIL("reserve above the budget");
    if (c->reserve_idle_ms < 0 || c->reserve_idle_ms > 86400000)
        FAIL("reserve_idle_ms %lld", (long long)c->reserve_idle_ms);
    if (c->log_level < MB_LOG_ERR || c->log_level > MB_LOG_DEBUG)
        FAIL("log_level %d", c->log_level);
    if (c->n_admin_uids && !c->admin_uids)
        FAIL("admin uids without an array");
    if (c->n_devices > MB_CONFIG_MAX_DEVICES || (c->devices_all && c->n_devices))
        FAIL("devices: all %d, %zu listed", c->devices_all, c->n_devices);
    for (size_t i = 0; i < c->n_devices; i++)
        if (c->devices[i] < 0)
            FAIL("device %d", c->devices[i]);
    uint64_t mins = 0;
    for (size_t i = 0; i < c->n_tenants; i++) {
        policy_holds(&c->tenants[i], true);
        mins += c->tenants[i].min;
        for (size_t j = i + 1; j < c->n_tenants; j++)
            if (!strcmp(c->tenants[i].name, c->tenants[j].name))
                FAIL("tenant %s given twice", c->tenants[i].name);
        if (mb_config_tenant(c, c->tenants[i].name) != &c->tenants[i])
            FAIL("tenant %s not found by name", c->tenants[i].name);
    }
    for (size_t i = 0; i < c->n_uids; i++) {
        policy_holds(&c->uids[i], false);
        mins += c->uids[i].min;
        for (size_t j = i + 1; j < c->n_uids; j++)
            if (c->uids[i].uid == c->uids[j].uid)
                FAIL("uid %u given twice", (unsigned)c->uids[i].uid);
    }
    if (c->budget && mins > c->budget)
        FAIL("guarantees %llu above the budget %llu", (unsigned long long)mins,
             (unsigned long long)c->budget);
    char err[256] = "";
    if (mb_config_check(c, err, sizeof(err)) != 0)
        FAIL("accepted, then refused by mb_config_check: %s", err);
}

/* Refused: a reason of one line, and the defaults left. */
static void refused_holds(int rc, const char *err, const struct mb_config *c)
{
    if (rc != MB_EINVAL)
        FAIL("refused with %d, not MB_EINVAL", rc);
    if (!err[0] || strchr(err, '\n'))
        FAIL("reason '%s' is empty or more than a line", err);
    struct mb_config d;
    mb_config_defaults(&d);
    if (strcmp(c->backend, d.backend) || c->budget != d.budget || c->frame_size != d.frame_size ||
        c->reserve != d.reserve || c->n_tenants || c->n_uids || c->n_admin_uids || c->runtime_dir)
        FAIL("refused, and the defaults not left");
}

/* What a size's text says it is, the slow way; false if it is no size. */
static bool size_by_hand(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    unsigned shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: break;
    }
    if (shift) {
        p++;
        if ((p[0] == 'i' || p[0] == 'I') && (p[1] == 'b' || p[1] == 'B'))
            p += 2;
        else if (p[0] == 'b' || p[0] == 'B')
            p++;
    } else if (*p == 'b' || *p == 'B') {
        p++;   /* "4096B" */
    }
    if (*p || (shift && v > (UINT64_MAX >> shift)))
        return false;
    *out = v << shift;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    char err[256] = "";
    struct mb_config c;
    int rc;
    switch (data[0] % 3) {
    case 0:   /* a whole file */
        rc = mb_config_parse_string(text, "fuzz.conf", &c, err, sizeof(err));
        if (rc == 0)
            config_holds(&c);
        else
            refused_holds(rc, err, &c);
        mb_config_free(&c);
        break;
    case 1: { /* one command-line override: KEY '=' VALUE */
        mb_config_defaults(&c);
        char *eq = strchr(text, '=');
        if (eq) {
            *eq = '\0';
            rc = mb_config_set(&c, text, eq + 1, err, sizeof(err));
            if (rc != 0 && (rc != MB_EINVAL || !err[0]))
                FAIL("mb_config_set refused with %d, reason '%s'", rc, err);
            if (rc == 0 && mb_config_check(&c, err, sizeof(err)) == 0)
                config_holds(&c);
        }
        mb_config_free(&c);
        break;
    }
    default: { /* a size */
        uint64_t got = 0x5a5a5a5a5a5a5a5aull, want = 0;
        rc = mb_parse_size(text, &got);
        bool ok = size_by_hand(text, &want);
        if (rc == 0 && (!ok || got != want))
            FAIL("size '%s' parsed as %llu", text, (unsigned long long)got);
        if (rc != 0 && got != 0x5a5a5a5a5a5a5a5aull)
            FAIL("size '%s' refused, and its output written", text);
        if (rc != 0 && ok)
            FAIL("size '%s' (%llu) refused", text, (unsigned long long)want);
        break;
    }
    }
    free(text);
    return 0;
}
