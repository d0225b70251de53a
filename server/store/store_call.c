/* SPDX-License-Identifier: MIT */
/*
 * store_call.c -- one call on the blocking connection a start or a
 * take-over loads with (struct load_ctx, store_load.h), and why an
 * attempt fails.
 *
 * The loader (store_load.c), the restart round (store_restart.c), the
 * cluster id (store_cluster.c) and the migration (store_migrate.c) all
 * talk to Redis through these, and these through nothing of theirs: a
 * reply that is an error is "not ready" (DL_EUNAVAILABLE, the start
 * retries) unless the caller says an error is the operator's to fix
 * (DL_EBADARG). Owns nothing; the connection is the load's.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/store_private.h"

int dl__load_err(struct load_ctx *x, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(x->err, x->errlen, fmt, ap);
	va_end(ap);
	return rc;
}

redisReply *dl__load_run(struct load_ctx *x, int *rc, int fatal_errors,
			 int argc, const char **argv, const size_t *lens)
{
	redisReply *r = redisCommandArgv(x->c, argc, argv, lens);
	const char *e;

	if (!r) {
		*rc = dl__load_err(x, DL_EUNAVAILABLE, "%s: %s", argv[0],
				   x->c->errstr[0] ? x->c->errstr : "no reply");
		return NULL;
	}
	if ((e = dl__store_reply_error(r)) != NULL) {
		*rc = dl__load_err(x,
				   fatal_errors && !dl__store_not_ready(e)
					   ? DL_EBADARG
					   : DL_EUNAVAILABLE,
				   "%s: %s", argv[0], e);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

redisReply *dl__load_runv(struct load_ctx *x, int *rc, int fatal_errors,
			  const char **argv)
{
	size_t lens[DL__LOAD_ARGS_MAX];
	int n;

	for (n = 0; argv[n]; n++)
		if (n == DL__LOAD_ARGS_MAX)
			abort(); /* a call with more words: a build error */
		else
			lens[n] = strlen(argv[n]);
	return dl__load_run(x, rc, fatal_errors, n, argv, lens);
}
