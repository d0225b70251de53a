/* SPDX-License-Identifier: MIT */
/*
 * log.c -- stderr logging (see log.h).
 */
#include "server/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int dl_log_level = DL_LOG_NOTICE;
static int journald;

static const char *const names[] = {"error", "warn", "notice", "info", "debug"};
/* sd-daemon(3) priorities: err, warning, notice, info, debug. */
static const char prio[] = {'3', '4', '5', '6', '7'};
static const char letter[] = {'E', 'W', 'N', 'I', 'D'};

void dl_log_init(int level, int force_journald)
{
	dl_log_level = level;
	journald = force_journald >= 0 ? force_journald
				       : getenv("JOURNAL_STREAM") != NULL;
}

int dl_log_parse_level(const char *s)
{
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(s, names[i]) == 0)
			return (int)i;
	if (strcasecmp(s, "warning") == 0)
		return DL_LOG_WARN;
	return -1;
}

const char *dl_log_level_name(int level)
{
	if (level < 0 || level > DL_LOG_DEBUG)
		return "?";
	return names[level];
}

void dl_log(int level, const char *fmt, ...)
{
	char line[1024];
	size_t n = 0;
	struct timeval tv;
	struct tm tm;
	va_list ap;
	int r;

	if (level < 0)
		level = 0;
	if (level > DL_LOG_DEBUG)
		level = DL_LOG_DEBUG;
	if (journald) {
		line[n++] = '<';
		line[n++] = prio[level];
		line[n++] = '>';
	} else {
		gettimeofday(&tv, NULL);
		gmtime_r(&tv.tv_sec, &tm);
		n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
		r = snprintf(line + n, sizeof(line) - n, ".%03dZ %c ",
			     (int)(tv.tv_usec / 1000), letter[level]);
		n += r > 0 ? (size_t)r : 0;
	}
	va_start(ap, fmt);
	r = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (r > 0)
		n += (size_t)r < sizeof(line) - n - 1 ? (size_t)r
						      : sizeof(line) - n - 2;
	line[n++] = '\n';
	/* One write: lines from one process never interleave. */
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}
