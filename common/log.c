/* log.c: the logging sink shared by every MoonBright program: level filter,
 * identity prefix, journald priority prefix when stderr is the journal,
 * syslog once a daemon has let go of its stderr. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

/* The level, the identity and the journal flag are read by every thread
 * that logs (a library's background threads too) while another may set
 * them (each mb_open does): relaxed atomics. Syslog is chosen once, by a
 * daemon before its threads start. */
static int g_level = MB_LOG_INFO;
static const char *g_ident = "moonbright";
static int g_journal = -1;   /* -1 unknown, 0 no, 1 stderr is the journal */
static int g_syslog;         /* 1: lines go to syslog(3), not stderr */

void mb_log_set_level(int level) { __atomic_store_n(&g_level, level, __ATOMIC_RELAXED); }
int mb_log_level(void) { return __atomic_load_n(&g_level, __ATOMIC_RELAXED); }
void mb_log_set_ident(const char *ident) { __atomic_store_n(&g_ident, ident, __ATOMIC_RELAXED); }

void mb_log_to_syslog(void)
{
    openlog(__atomic_load_n(&g_ident, __ATOMIC_RELAXED), LOG_PID | LOG_NDELAY, LOG_DAEMON);
    g_syslog = 1;
}

int mb_log_parse_level(const char *s)
{
    static const struct { const char *name; int level; } names[] = {
        { "err", MB_LOG_ERR }, { "error", MB_LOG_ERR }, { "warn", MB_LOG_WARN },
        { "warning", MB_LOG_WARN }, { "info", MB_LOG_INFO }, { "debug", MB_LOG_DEBUG },
    };
    for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(s, names[i].name) == 0)
            return names[i].level;
    return -1;
}

void mb_log(int level, const char *fmt, ...)
{
    if (level > mb_log_level())
        return;
    int journal = __atomic_load_n(&g_journal, __ATOMIC_RELAXED);
    if (journal < 0) {
        journal = getenv("JOURNAL_STREAM") != NULL;
        __atomic_store_n(&g_journal, journal, __ATOMIC_RELAXED);
    }
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    static const char *tags[8] = { "", "", "", "error: ", "warning: ", "", "", "debug: " };
    if (g_syslog)
        syslog(level, "%s", line);
    else if (journal)
        fprintf(stderr, "<%d>%s\n", level, line);
    else
        fprintf(stderr, "%s: %s%s\n", __atomic_load_n(&g_ident, __ATOMIC_RELAXED), tags[level & 7], line);
}
