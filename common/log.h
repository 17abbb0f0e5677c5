/* log.h: one logging call for daemon, client and tools.
 * Lines go to stderr; under systemd (JOURNAL_STREAM set) they carry the
 * sd-daemon "<N>" priority prefix so journald keeps the level. */
#ifndef MB_LOG_H
#define MB_LOG_H

enum { MB_LOG_ERR = 3, MB_LOG_WARN = 4, MB_LOG_INFO = 6, MB_LOG_DEBUG = 7 };

/* Lines above this level are dropped. Default MB_LOG_INFO for the daemon;
 * libmbclient sets MB_LOG_WARN unless $MOONBRIGHT_LOG says otherwise. */
void mb_log_set_level(int level);
int mb_log_level(void);
/* Name printed before each line ("moonbrightd", "mbclient", ...). */
void mb_log_set_ident(const char *ident);
/* From now on send lines to syslog(3) (facility daemon), not stderr: for a
 * daemon that has detached its stdio. */
void mb_log_to_syslog(void);
/* Parse "err|warn|info|debug" into a level; -1 if unknown. */
int mb_log_parse_level(const char *s);

void mb_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
