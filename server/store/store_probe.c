/* SPDX-License-Identifier: MIT */
/*
 * store_probe.c -- --check-config's look at the Redis the configuration
 * names: the step a newcomer takes before the first start, so it says
 * what that start would refuse, without changing anything in Redis.
 *
 * Blocking (hiredis's blocking API, redis_timeout per call), read-only:
 * AUTH, SELECT, ROLE, INFO persistence, CONFIG GET appendfsync
 * maxmemory-policy, and two permission checks for the ACL user (FUNCTION
 * LIST, EXISTS of a key under the prefix: NOPERM if the user may not).
 * A Redis that cannot be reached is reported and not held against the
 * configuration (it may simply not run yet); one the daemon would refuse
 * (no AOF, an evicting policy, a wrong password, a user without the
 * rights, a replica) is.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/log.h"
#include "server/store/store_private.h"

/* One blocking call: its reply, or NULL with *err set (a reply error is
 * returned as the reply). */
static redisReply *call(redisContext *c, char *err, size_t len, const char *fmt,
			...)
{
	redisReply *r;
	va_list ap;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (!r)
		snprintf(err, len, "%s", c->errstr[0] ? c->errstr : "no reply");
	return r;
}

/* NOPERM and other refusals, as the operator needs them said. */
static int refused(redisReply *r, const char *what, char *why, size_t len)
{
	if (r->type != REDIS_REPLY_ERROR)
		return 0;
	snprintf(why, len, "%s refused: %s", what, r->str);
	return 1;
}

static int probe(struct dl_store *st, redisContext *c, char *why, size_t len)
{
	const struct dl_redis_addr *a = &st->addr;
	redisReply *r, *info;
	int d;

	if (a->password) {
		r = a->user ? call(c, why, len, "AUTH %s %s", a->user,
				   a->password)
			    : call(c, why, len, "AUTH %s", a->password);
		if (!r)
			return DL_EUNAVAILABLE;
		if (refused(r, "AUTH", why, len)) {
			freeReplyObject(r);
			return DL_EBADARG;
		}
		freeReplyObject(r);
	}
	if (!(r = call(c, why, len, "SELECT %d", a->db)))
		return DL_EUNAVAILABLE;
	if (refused(r, "SELECT", why, len)) {
		freeReplyObject(r);
		return DL_EBADARG;
	}
	freeReplyObject(r);
	if (!(r = call(c, why, len, "ROLE")))
		return DL_EUNAVAILABLE;
	if (r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(r->element[0]->str, "master") != 0) {
		snprintf(why, len, "not a primary (ROLE %s)",
			 r->type == REDIS_REPLY_ARRAY && r->elements &&
					 r->element[0]->type ==
						 REDIS_REPLY_STRING
				 ? r->element[0]->str
				 : "?");
		freeReplyObject(r);
		return DL_EBADARG;
	}
	freeReplyObject(r);
	/* the rights the daemon's user needs: functions, and its keys */
	if (!(r = call(c, why, len, "FUNCTION LIST LIBRARYNAME %s",
		       DL_STORE_LIBRARY)))
		return DL_EUNAVAILABLE;
	if (refused(r, "FUNCTION LIST (the user needs FUNCTION and FCALL)", why,
		    len)) {
		freeReplyObject(r);
		return DL_EBADARG;
	}
	freeReplyObject(r);
	if (!(r = call(c, why, len, "EXISTS %s", st->keys.cluster)))
		return DL_EUNAVAILABLE;
	if (refused(r, "a read of the prefix's keys", why, len)) {
		freeReplyObject(r);
		return DL_EBADARG;
	}
	freeReplyObject(r);
	/* what an acknowledged grant survives (store_durable.c) */
	if (!(info = call(c, why, len, "INFO persistence")))
		return DL_EUNAVAILABLE;
	if (!(r = call(c, why, len,
		       "CONFIG GET appendfsync maxmemory-policy"))) {
		freeReplyObject(info);
		return DL_EUNAVAILABLE;
	}
	d = dl__durability_of(
		info->type == REDIS_REPLY_STRING ? info->str : NULL, r);
	freeReplyObject(info);
	if (d == DL_DUR_UNKNOWN) {
		snprintf(why, len, "still loading its data: not checked");
		freeReplyObject(r);
		return DL_EUNAVAILABLE;
	}
	if (dl__durability_check(st, d, why, len) != 0 ||
	    dl__eviction_check(st, r, why, len) != 0) {
		freeReplyObject(r);
		return DL_EBADARG;
	}
	freeReplyObject(r);
	snprintf(why, len, "%s", dl_store_durability(st));
	return 0;
}

int dl_store_probe(const struct dl_config *cfg, char *out, size_t len)
{
	static const struct dl_store_hooks none;
	struct dl_store *st;
	uint64_t t = cfg->redis_timeout_ms;
	struct timeval tv = {(time_t)(t / 1000),
			     (suseconds_t)(t % 1000) * 1000};
	redisContext *c;
	char host[256];
	int port, rc;

	if (cfg->persist != DL_PERSIST_REDIS) {
		snprintf(out, len, "persist = none: no Redis to check");
		return 0;
	}
	if (!(st = dl_store_new(NULL, cfg, NULL, &none))) {
		snprintf(out, len, "out of memory");
		return DL_ENOMEM;
	}
	if (!st->addr.path &&
	    dl__find_primary_sync(st, host, sizeof(host), &port, out, len)) {
		dl_store_free(st);
		return DL_EUNAVAILABLE;
	}
	c = st->addr.path ? redisConnectUnixWithTimeout(st->addr.path, tv)
			  : redisConnectWithTimeout(host, port, tv);
	if (!c || c->err) {
		snprintf(out, len, "not reachable (%s): not checked",
			 c ? c->errstr : "out of memory");
		redisFree(c);
		dl_store_free(st);
		return DL_EUNAVAILABLE;
	}
	redisSetTimeout(c, tv);
	rc = probe(st, c, out, len);
	redisFree(c);
	dl_store_free(st);
	return rc;
}
