/* SPDX-License-Identifier: MIT */
/*
 * store_durable.c -- what an acknowledged grant survives, read from Redis.
 *
 * dlockd acknowledges a change once Redis has it. What "has" is worth is
 * Redis's persistence, so it is read, not assumed, at every connection
 * (the loader's at start and at a take-over, the link's after every
 * reconnect and fail-over):
 *
 *   INFO persistence         aof_enabled:1 or 0
 *   CONFIG GET appendfsync   always, everysec or no (CONFIG may have been
 *                            renamed away: the policy is then unknown)
 *
 * RDB snapshots do not count: a restart of Redis loses what came after
 * the last one, every lease granted since. Without AOF the daemon refuses
 * to start, and a running daemon refuses changes, unless the operator
 * said allow_nondurable_redis = yes; the level is logged when it changes
 * and shown in HELLO, STATS and the metrics.
 */
#include <stdio.h>
#include <string.h>

#include "server/log.h"
#include "server/store_private.h"

const char *dl_durability_name(int d)
{
	static const char *const names[] = {
		[DL_DUR_UNKNOWN] = "unknown", [DL_DUR_NONE] = "none",
		[DL_DUR_AOF] = "aof",	      [DL_DUR_OS] = "os",
		[DL_DUR_EVERYSEC] = "everysec", [DL_DUR_ALWAYS] = "always",
	};

	return d >= 0 && d <= DL_DUR_ALWAYS ? names[d] : "unknown";
}

/* What an acknowledged grant survives, for the log. */
static const char *means(int d)
{
	switch (d) {
	case DL_DUR_ALWAYS:
		return "AOF, appendfsync always: an acknowledged grant survives a crash of Redis and of its machine";
	case DL_DUR_EVERYSEC:
		return "AOF, appendfsync everysec: an acknowledged grant survives a crash of Redis; a crash of its machine may lose the last second of grants";
	case DL_DUR_OS:
		return "AOF, appendfsync no: an acknowledged grant survives a crash of Redis; a crash of its machine may lose the last 30 s or so of grants (the kernel flushes when it likes)";
	case DL_DUR_AOF:
		return "AOF on, fsync policy unknown (CONFIG GET appendfsync refused): a crash of Redis's machine may lose the last grants";
	default:
		return "no AOF (appendonly no): a restart of Redis loses every lease granted since its last RDB snapshot, and the lock goes to someone else while its holder still believes in it";
	}
}

int dl__durability_of(const char *info, const redisReply *fsync)
{
	const char *aof = info ? strstr(info, "aof_enabled:") : NULL;
	const char *v;

	/* While Redis loads its data it may say aof_enabled:0: not yet */
	if (!aof || strstr(info, "loading:1"))
		return DL_DUR_UNKNOWN;
	if (aof[12] != '1')
		return DL_DUR_NONE;
	if (!fsync || fsync->type != REDIS_REPLY_ARRAY || fsync->elements != 2 ||
	    fsync->element[1]->type != REDIS_REPLY_STRING)
		return DL_DUR_AOF;
	v = fsync->element[1]->str;
	if (strcmp(v, "always") == 0)
		return DL_DUR_ALWAYS;
	if (strcmp(v, "everysec") == 0)
		return DL_DUR_EVERYSEC;
	if (strcmp(v, "no") == 0)
		return DL_DUR_OS;
	return DL_DUR_AOF;
}

int dl__durability_check(struct dl_store *st, int d, char *why, size_t len)
{
	int allowed = st->cfg->allow_nondurable_redis != 0;

	if (d == DL_DUR_UNKNOWN) {
		snprintf(why, len, "LOADING: Redis's persistence not known yet");
		return DL_EUNAVAILABLE;
	}
	st->st.redis_aof = d >= DL_DUR_AOF;
	st->st.redis_fsync_always = d == DL_DUR_ALWAYS;
	if (d != st->durability) {
		st->durability = d;
		if (d == DL_DUR_ALWAYS)
			dl_notice("redis: %s", means(d));
		else if (d == DL_DUR_NONE && !allowed)
			dl_error("redis: %s. Refusing to serve: set appendonly yes and appendfsync always in redis.conf (or CONFIG SET appendonly yes), or allow_nondurable_redis = yes in [persistence] to accept the loss",
				 means(d));
		else if (d == DL_DUR_NONE)
			dl_error("redis: %s. Serving anyway: allow_nondurable_redis = yes",
				 means(d));
		else
			dl_warn("redis: %s", means(d));
	}
	if (d == DL_DUR_NONE && !allowed) {
		snprintf(why, len,
			 "Redis does not persist (appendonly no) and allow_nondurable_redis is not set");
		return DL_EBADARG;
	}
	return 0;
}

const char *dl_store_durability(const struct dl_store *st)
{
	return st->redis ? dl_durability_name(st->durability) : "none";
}
