/* SPDX-License-Identifier: MIT */
/*
 * dlock_child.c -- what the guard of `dlock run` is started with: its
 * argument vector and its environment (dlock_cli.h).
 *
 * Both are built in dlock before fork(), since between fork and exec the
 * child may only call async-signal-safe functions (dlock_run.c), and both
 * are plain malloc'd NULL-terminated vectors, freed with
 * dl_cli_strv_free(). The environment is dlock's own without any DLOCK_*
 * variable it sets, then the lease's and the server's: the command sees
 * one DLOCK_NAME, never an inherited one.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/cli/dlock_cli.h"

void dl_cli_strv_free(char **v)
{
	size_t i;

	if (!v)
		return;
	for (i = 0; v[i]; i++)
		free(v[i]);
	free(v);
}

/* Ours (set again below), and the secrets: the command gets the lock,
 * not the credentials that took it. */
static int env_skip(const char *e)
{
	static const char *const ours[] = {
		"DLOCK_NAME=",	  "DLOCK_TOKEN=",    "DLOCK_OWNER=",
		"DLOCK_HOST=",	  "DLOCK_PORT=",     "DLOCK_SOCKET=",
		"DLOCK_SERVERS=", "DLOCK_PASSWORD=", "DLOCK_SECRET="};
	size_t i;

	for (i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (strncmp(e, ours[i], strlen(ours[i])) == 0)
			return 1;
	return 0;
}

/* malloc'd printf, NULL when out of memory. */
static char *str_printf(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static char *str_printf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}

char **dl_cli_child_env(const struct cli *cl, const char *owner, uint64_t token)
{
	size_t n = 0, k = 0, i;
	char **v;

	while (environ[n])
		n++;
	v = calloc(n + 7, sizeof(*v));
	if (!v)
		return NULL;
	for (i = 0; i < n; i++)
		if (!env_skip(environ[i]) && !(v[k++] = strdup(environ[i])))
			goto nomem;
	if (!(v[k++] = str_printf("DLOCK_NAME=%s", cl->pos[0])) ||
	    !(v[k++] = str_printf("DLOCK_TOKEN=%" PRIu64, token)) ||
	    !(v[k++] = str_printf("DLOCK_OWNER=%s", owner)))
		goto nomem;
	/* how many waited when it started: news after that is a signal */
	if (cl->waited_signal &&
	    !(v[k++] = str_printf("DLOCK_WAITERS=%u",
				  (unsigned)cl->waiters_at_start)))
		goto nomem;
	if (cl->servers) {
		if (!(v[k++] = str_printf("DLOCK_SERVERS=%s", cl->servers)))
			goto nomem;
	} else if (cl->socket) {
		if (!(v[k++] = str_printf("DLOCK_SOCKET=%s", cl->socket)))
			goto nomem;
	} else if (!(v[k++] = str_printf("DLOCK_HOST=%s", cl->host)) ||
		   !(v[k++] = str_printf("DLOCK_PORT=%d", cl->port))) {
		goto nomem;
	}
	return v;
nomem:
	v[k - 1] = NULL;
	dl_cli_strv_free(v);
	return NULL;
}

char **dl_cli_guard_argv(const struct cli *cl, int ctl, int err, int64_t grace,
			 int64_t margin)
{
	size_t argc, i;
	char **v;

	for (argc = 0; cl->command[argc]; argc++)
		;
	if (!(v = calloc(argc + 8, sizeof(*v))))
		return NULL;
	if (!(v[0] = strdup("dlock")) || !(v[1] = strdup("--run-guard")) ||
	    !(v[2] = str_printf("%d", ctl)) ||
	    !(v[3] = str_printf("%d", err)) ||
	    !(v[4] = str_printf("%" PRId64, grace)) ||
	    !(v[5] = str_printf("%" PRId64, margin)) || !(v[6] = strdup("--")))
		goto nomem;
	for (i = 0; i < argc; i++)
		if (!(v[7 + i] = strdup(cl->command[i])))
			goto nomem;
	return v;
nomem:
	dl_cli_strv_free(v);
	return NULL;
}
