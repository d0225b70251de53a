/* SPDX-License-Identifier: MIT */
/*
 * log.h -- one line per event on stderr, fit for journald.
 *
 * Under systemd (JOURNAL_STREAM set, or forced with dl_log_init) each line
 * starts with the sd-daemon priority prefix "<3>".."<7>" and carries no
 * timestamp (the journal adds one); otherwise it starts with an ISO-8601
 * UTC timestamp and a level letter. Lines are written with one write(2),
 * so they do not interleave. Levels below the current one cost a compare.
 */
#ifndef DL_SERVER_LOG_H
#define DL_SERVER_LOG_H

enum dl_log_level {
	DL_LOG_ERROR = 0,
	DL_LOG_WARN,
	DL_LOG_NOTICE, /* the default: start, stop, reloads, peers refused */
	DL_LOG_INFO,   /* connections, persistence state changes */
	DL_LOG_DEBUG,  /* every request */
};

extern int dl_log_level;

/* journald < 0: detect from JOURNAL_STREAM; 0/1: force off/on. */
void dl_log_init(int level, int journald);
/* "error".."debug" -> level, -1 if unknown. */
int dl_log_parse_level(const char *s);
const char *dl_log_level_name(int level);

void dl_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define dl_log_at(lvl, ...)                                                    \
	do {                                                                   \
		if ((lvl) <= dl_log_level)                                     \
			dl_log((lvl), __VA_ARGS__);                            \
	} while (0)
#define dl_error(...)  dl_log_at(DL_LOG_ERROR, __VA_ARGS__)
#define dl_warn(...)   dl_log_at(DL_LOG_WARN, __VA_ARGS__)
#define dl_notice(...) dl_log_at(DL_LOG_NOTICE, __VA_ARGS__)
#define dl_info(...)   dl_log_at(DL_LOG_INFO, __VA_ARGS__)
#define dl_debug(...)  dl_log_at(DL_LOG_DEBUG, __VA_ARGS__)

#endif /* DL_SERVER_LOG_H */
