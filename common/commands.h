/* commands.h: the command table (commands.def) as data, for the daemon's
 * dispatch and mbctl alike. */
#ifndef MB_COMMANDS_H
#define MB_COMMANDS_H

#include "moonbright.pb-c.h"

enum {
    MB_CMD_SESSION = 1u << 0,   /* needs a bound session */
    MB_CMD_CLI = 1u << 1,       /* offered by mbctl */
    MB_CMD_ADMIN = 1u << 2,     /* needs a bound session of an admin uid */
    MB_CMD_JSON = 1u << 3,      /* mbctl offers --json */
    MB_CMD_VIEW = 1u << 4,      /* mbctl only: built from other requests */
};

enum mb_cmd_id {
#define MB_COMMAND(name, body, flags, usage, summary) MB_CMD_##name,
#include "commands.def"
#undef MB_COMMAND
    MB_CMD_COUNT
};

/* mbctl's views (MB_VIEW rows): commands built from other requests. */
enum mb_view_id {
#define MB_COMMAND(name, body, flags, usage, summary)
#define MB_VIEW(name, flags, usage, summary) MB_VIEW_##name,
#include "commands.def"
#undef MB_COMMAND
    MB_VIEW_COUNT
};

struct mb_command {
    const char *name;
    int body;              /* Mb__Request__BodyCase == Mb__Reply__BodyCase; 0 for a view */
    unsigned flags;
    const char *usage;
    const char *summary;
};

extern const struct mb_command mb_commands[MB_CMD_COUNT];
extern const struct mb_command mb_views[MB_VIEW_COUNT];   /* body 0, MB_CMD_VIEW */

/* The command for a request body, or -1 when the body is unknown or unset. */
int mb_command_by_body(int body);
/* The command named `name`, or -1. */
int mb_command_by_name(const char *name);

#endif
