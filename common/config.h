/* config.h: moonbrightd's configuration file and the values it holds.
 *
 * Format (default file /etc/moonbright/moonbrightd.conf; see also
 * tools/moonbrightd.conf and moonbrightd(8)):
 *
 *   # comment: from '#' to the end of the line, anywhere
 *   key = value                 global settings, before the first section
 *   [tenant NAME]               policy for sessions that name tenant NAME
 *   max = 40G                   (keys of a section follow its header)
 *   min = 8G
 *   uids = 1000, alice          only these users may run under NAME
 *   [uid 1001]                  policy for every session of a user (number
 *   max = 10G                    or login name)
 *
 * One setting per line; blanks around keys, '=' and values are ignored;
 * values are not quoted. Keys are lower case with underscores. A tenant
 * NAME is 1-63 letters, digits or ._-:@+.
 *
 * Global keys (default in brackets):
 *   backend      auto | cuda | host                                 [auto]
 *   budget       most bytes of frames the daemon creates  [device memory]
 *   frame_size   bytes per frame: a multiple of 4K; the daemon also
 *                needs a multiple of its device's granularity       [2M]
 *   reserve      bytes of frames created ahead of demand            [0]
 *   reserve_idle free frames nobody took for this long are released
 *                to the driver, down to the reserve's target:
 *                milliseconds, or with an "ms" or "s" suffix; 0 keeps
 *                them                                               [5s]
 *   device_headroom  device memory free frames leave to other
 *                processes (programs that do not use moonbrightd):
 *                where the device's free memory falls below it, free
 *                frames go back to the driver and the reserve makes no
 *                more; 0 turns it off                               [0]
 *   scrub        zero a frame before another tenant gets it        [on]
 *   watchdog     send WATCHDOG=1 when systemd asks for it           [on]
 *   log_level    err | warn | info | debug                          [info]
 *   runtime_dir  directory of gpuN.ctl and gpuN.fds; empty means
 *                $MOONBRIGHT_RUNTIME_DIR, else /run/moonbright      [empty]
 *   admin_uids   users (numbers or login names) allowed to run admin
 *                commands besides root, which always may; separated
 *                by blanks or commas                                [none]
 *   devices      "all" or a list of device numbers: which GPUs
 *                moonbrightd.service brings up (the daemon ignores it) [all]
 * Section keys ([tenant NAME] and [uid USER]):
 *   max          most bytes the tenant (user) may hold, or "unlimited" [unlimited]
 *   min          bytes kept available for it (asked last in reclaim) [0]
 * and in [tenant NAME] only:
 *   uids         users (numbers or login names, separated by blanks or
 *                commas) allowed to run sessions under NAME; others are
 *                refused. Without it any user may name the tenant. [any]
 *
 * Sizes are bytes with an optional K/M/G/T suffix (powers of 1024, "2M",
 * "2MiB", "2m"; see size.h). Booleans are on/off, yes/no, true/false, 1/0.
 *
 * Rejected, each with "FILE:LINE: reason": unknown keys and sections, a key
 * given twice in one place, a tenant or uid given two sections, a section
 * without a name, bad values, min > max, uids outside a [tenant] section,
 * an empty uids list or a user listed twice in it, a budget smaller than one frame,
 * reserve > budget, and guarantees (sum of every min) above the budget.
 *
 * Every function returns 0 or a negative mb_status; on failure err holds one
 * line naming the problem (no trailing newline). */
#ifndef MB_CONFIG_H
#define MB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef MB_CONFIG_DEFAULT_PATH
#define MB_CONFIG_DEFAULT_PATH "/etc/moonbright/moonbrightd.conf"
#endif

#define MB_CONFIG_UNLIMITED UINT64_MAX   /* max with no limit */
#define MB_CONFIG_NAME_MAX 63            /* longest tenant name, bytes */
#define MB_CONFIG_MAX_DEVICES 64         /* longest "devices =" list */

/* Limits for one tenant or one user. Invariant: min <= max. */
struct mb_config_policy {
    char name[MB_CONFIG_NAME_MAX + 1];  /* tenant name; "" for a uid policy */
    uid_t uid;                          /* uid policy's user; 0 for a tenant */
    uint64_t max;                       /* MB_CONFIG_UNLIMITED if not set */
    uint64_t min;                       /* 0 if not set */
    int line;                           /* line of the section header; 0 if none */
    uid_t *bound_uids;                  /* tenant only: the users allowed to name it
                                         * (n_bound_uids, unique); none: anyone */
    size_t n_bound_uids;
};

struct mb_config {
    char backend[8];        /* "auto", "cuda" or "host" */
    uint64_t budget;        /* >= frame_size; 0: unset, the device's memory */
    uint64_t frame_size;    /* a non-zero multiple of 4096 */
    uint64_t reserve;       /* <= budget; sum of every policy's min <= budget */
    int64_t reserve_idle_ms; /* 0..86400000; 0: idle frames are kept */
    uint64_t device_headroom; /* device bytes free frames leave free; 0: off */
    bool scrub;
    bool watchdog;
    int log_level;          /* MB_LOG_ERR .. MB_LOG_DEBUG (log.h) */
    char *runtime_dir;      /* NULL: $MOONBRIGHT_RUNTIME_DIR, else /run/moonbright */

    uid_t *admin_uids;      /* n_admin_uids entries */
    size_t n_admin_uids;

    bool devices_all;       /* true: every present GPU; else devices[] */
    int devices[MB_CONFIG_MAX_DEVICES];
    size_t n_devices;

    struct mb_config_policy *tenants;   /* n_tenants entries, names unique */
    size_t n_tenants;
    struct mb_config_policy *uids;      /* n_uids entries, uids unique */
    size_t n_uids;
};

/* Fill cfg with the defaults above. cfg need not be initialised; it owns no
 * memory afterwards until loaded or set. */
void mb_config_defaults(struct mb_config *cfg);

/* Read a config file into cfg, starting from the defaults. Returns 0;
 * MB_ENOENT if the file does not exist (cfg holds the defaults, so a missing
 * default file can mean "use defaults"); MB_ESYS if it cannot be read;
 * MB_EINVAL on the first error in it ("FILE:LINE: reason"). On failure cfg
 * holds the defaults. Either way release cfg with mb_config_free(). */
int mb_config_load(const char *path, struct mb_config *cfg, char *err, size_t errlen);

/* The same on text in memory; name stands for the file in messages. */
int mb_config_parse_string(const char *text, const char *name, struct mb_config *cfg,
                           char *err, size_t errlen);

/* Set one global key from strings, with the validation of the file, e.g.
 * for command-line overrides: mb_config_set(cfg, "budget", "32G", ...).
 * '-' in key is read as '_' ("frame-size"). Cross-field checks are left to
 * mb_config_check(). Returns 0 or MB_EINVAL ("bad size 'x' for budget"). */
int mb_config_set(struct mb_config *cfg, const char *key, const char *value,
                  char *err, size_t errlen);

/* Checks between fields (budget >= frame_size, reserve <= budget, sum of
 * min <= budget); the file
 * loaders already ran it. Use it again after mb_config_set(). */
int mb_config_check(const struct mb_config *cfg, char *err, size_t errlen);

/* Release what cfg owns and reset it to the defaults. */
void mb_config_free(struct mb_config *cfg);

/* The policy for a tenant name or a uid; NULL if the file gave none. */
const struct mb_config_policy *mb_config_tenant(const struct mb_config *cfg,
                                                const char *name);
const struct mb_config_policy *mb_config_uid(const struct mb_config *cfg, uid_t uid);
/* Whether uid may run sessions under the tenant of policy pol: true when
 * pol binds no uids or lists uid. */
bool mb_config_tenant_allows(const struct mb_config_policy *pol, uid_t uid);
/* Whether uid may run admin commands: root or one of admin_uids. */
bool mb_config_is_admin(const struct mb_config *cfg, uid_t uid);

/* An integer environment variable of the library or the daemon: dflt when
 * it is unset or empty, and, with a warning naming it, when it is not a
 * whole number from lo to hi. */
long mb_env_long(const char *name, long dflt, long lo, long hi);

#endif
