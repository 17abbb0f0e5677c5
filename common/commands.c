/* commands.c: the command table's rows as data and lookups by body case and
 * by name. */
#include "commands.h"

#include <string.h>

const struct mb_command mb_commands[MB_CMD_COUNT] = {
#define MB_COMMAND(n, b, f, u, s) [MB_CMD_##n] = { #n, MB__REQUEST__BODY_##b, (f), (u), (s) },
#include "commands.def"
#undef MB_COMMAND
};

const struct mb_command mb_views[MB_VIEW_COUNT] = {
#define MB_COMMAND(n, b, f, u, s)
#define MB_VIEW(n, f, u, s) [MB_VIEW_##n] = { #n, 0, (f) | MB_CMD_VIEW, (u), (s) },
#include "commands.def"
#undef MB_COMMAND
};

/* Request and reply bodies share field numbers; check it at compile time. */
#define MB_COMMAND(n, b, f, u, s) \
    _Static_assert((int)MB__REQUEST__BODY_##b == (int)MB__REPLY__BODY_##b, "body numbers of " #n " differ");
#include "commands.def"
#undef MB_COMMAND

int mb_command_by_body(int body)
{
    if (body == 0)
        return -1;
    for (int i = 0; i < MB_CMD_COUNT; i++)
        if (mb_commands[i].body == body)
            return i;
    return -1;
}

int mb_command_by_name(const char *name)
{
    for (int i = 0; name && i < MB_CMD_COUNT; i++)
        if (strcmp(mb_commands[i].name, name) == 0)
            return i;
    return -1;
}
