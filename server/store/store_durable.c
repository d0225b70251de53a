/* SPDX-License-Identifier: MIT */
/*
 * store_durable.c -- what an acknowledged grant survives, read from Redis.
 *
 * dlockd acknowledges a change once Redis has it. What "has" is worth is
 * Redis's persistence, so it is read, not assumed, at every connection
 * (the loader's at start and at a take-over, the link's after every
 * reconnect and fail-over):
 *
 *   INFO server persistence replication
 *                            aof_enabled:1 or 0 (and run_id and
 *                            master_replid: which Redis process this is,
 *                            and which history, store_horizon.c)
 *   CONFIG GET appendfsync   always, everysec or no (CONFIG may have been
 *                            renamed away: the policy is then unknown)
 *
 * RDB snapshots do not count: a restart of Redis loses what came after
 * the last one, every lease granted since. Without AOF the daemon refuses
 * to start, and a running daemon refuses changes, unless the operator
 * said allow_nondurable_redis = yes; the level is logged when it changes
 * and shown in HELLO, STATS and the metrics.
 *
 * Eviction is the other way Redis drops what it acknowledged: with a
 * maxmemory-policy other than noeviction, a Redis that reaches maxmemory
 * deletes keys -- the daemon's records, its leadership and fence among
 * them (found from outside, on the shared cache Redis many teams put
 * their locks on: allkeys-lru evicted every lease, and the lock was
 * granted again). So the policy is read with appendfsync, at every
 * connection, and again every DL_STORE_CONFIG_MS on the link with
 * appendonly and appendfsync (dl__config_check: a CONFIG SET while the
 * daemon runs), and anything
 * but noeviction is refused like a Redis without AOF, unless
 * allow_evicting_redis = yes. maxmemory 0 does not make a policy safe: it
 * is one CONFIG SET away from evicting.
 */
#include <stdio.h>
#include <string.h>

#include "server/log.h"
#include "server/store/store_private.h"

const char *dl_durability_name(int d)
{
	static const char *const names[] = {
		[DL_DUR_UNKNOWN] = "unknown",	[DL_DUR_NONE] = "none",
		[DL_DUR_AOF] = "aof",		[DL_DUR_OS] = "os",
		[DL_DUR_EVERYSEC] = "everysec", [DL_DUR_ALWAYS] = "always",
	};

	return d >= 0 && d <= DL_DUR_ALWAYS ? names[d] : "unknown";
}

/* The first 16 hex digits after `key` in INFO's text, or 0. */
static uint64_t hex16_after(const char *info, const char *key)
{
	const char *p = info ? strstr(info, key) : NULL;
	uint64_t v = 0;
	int i, d;

	if (!p)
		return 0;
	for (p += strlen(key), i = 0; i < 16; i++, p++) {
		if (*p >= '0' && *p <= '9')
			d = *p - '0';
		else if (*p >= 'a' && *p <= 'f')
			d = *p - 'a' + 10;
		else
			return 0;
		v = v << 4 | (uint64_t)d;
	}
	return v;
}

uint64_t dl__run_id_of(const char *info)
{
	uint64_t run = hex16_after(info, "run_id:"), v;

	if (!run)
		return 0;
	/* a process demoted to a replica, resynced from an older copy and
	 * promoted again keeps its run_id, not its replication id (found
	 * from outside: x granted again 2.3 s into a 40 s lease) */
	v = run ^ hex16_after(info, "\nmaster_replid:");
	return v ? v : 1;
}

uint64_t dl__meddled_of(const char *info)
{
	static const char *const cmds[] = {
		"flushall",	  "flushdb", "restore",
		"restore-asking", "swapdb",  "debug",
	};
	char key[48];
	const char *p;
	uint64_t n = 0, v;
	size_t i;

	for (i = 0; info && i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		snprintf(key, sizeof(key), "\ncmdstat_%s:calls=", cmds[i]);
		if (!(p = strstr(info, key)))
			continue;
		for (p += strlen(key), v = 0; *p >= '0' && *p <= '9'; p++)
			v = v * 10 + (uint64_t)(*p - '0');
		n += v;
	}
	return n;
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

const char *dl__config_value(const redisReply *r, const char *name)
{
	size_t i;

	if (!r || r->type != REDIS_REPLY_ARRAY)
		return NULL;
	for (i = 0; i + 1 < r->elements; i += 2)
		if (r->element[i]->type == REDIS_REPLY_STRING &&
		    r->element[i + 1]->type == REDIS_REPLY_STRING &&
		    strcmp(r->element[i]->str, name) == 0)
			return r->element[i + 1]->str;
	return NULL;
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
	if (!(v = dl__config_value(fsync, "appendfsync")))
		return DL_DUR_AOF;
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
		snprintf(why, len,
			 "LOADING: Redis's persistence not known yet");
		return DL_EUNAVAILABLE;
	}
	st->st.redis_aof = d >= DL_DUR_AOF;
	st->st.redis_fsync_always = d == DL_DUR_ALWAYS;
	if (d != st->dur.level) {
		st->dur.level = d;
		if (d == DL_DUR_ALWAYS)
			dl_notice("redis: %s", means(d));
		else if (d == DL_DUR_NONE && !allowed)
			dl_error(
				"redis: %s. Refusing to serve: set appendonly yes and appendfsync always in redis.conf (or CONFIG SET appendonly yes), or allow_nondurable_redis = yes in [persistence] to accept the loss",
				means(d));
		else if (d == DL_DUR_NONE)
			dl_error(
				"redis: %s. Serving anyway: allow_nondurable_redis = yes",
				means(d));
		else
			dl_warn("redis: %s", means(d));
	}
	if (d == DL_DUR_NONE && !allowed) {
		snprintf(
			why, len,
			"Redis does not persist (appendonly no) and allow_nondurable_redis is not set");
		return DL_EBADARG;
	}
	return 0;
}

const char *dl_store_durability(const struct dl_store *st)
{
	return st->redis ? dl_durability_name(st->dur.level) : "none";
}

int dl__eviction_check(struct dl_store *st, const redisReply *config, char *why,
		       size_t len)
{
	const char *policy = dl__config_value(config, "maxmemory-policy");
	int allowed = st->cfg->allow_evicting_redis != 0;
	int evicts = policy && strcmp(policy, "noeviction") != 0;

	/* CONFIG renamed away: not known, as for appendfsync */
	if (!policy)
		return 0;
	st->st.redis_evicting = evicts;
	if (strcmp(policy, st->dur.evict_policy) != 0) {
		snprintf(st->dur.evict_policy, sizeof(st->dur.evict_policy),
			 "%s", policy);
		if (evicts && !allowed)
			dl_error(
				"redis: maxmemory-policy %s may evict the daemon's keys (its leases, leadership and fence): a lock would be granted again while its holder still believes in it. Refusing to serve: set maxmemory-policy noeviction in redis.conf (or CONFIG SET maxmemory-policy noeviction), or allow_evicting_redis = yes in [persistence] to accept the loss",
				policy);
		else if (evicts)
			dl_error(
				"redis: maxmemory-policy %s may evict the daemon's keys. Serving anyway: allow_evicting_redis = yes",
				policy);
		else if (st->dur.evict_policy[0])
			dl_info("redis: maxmemory-policy %s", policy);
	}
	if (evicts && !allowed) {
		snprintf(
			why, len,
			"Redis may evict keys (maxmemory-policy %s) and allow_evicting_redis is not set",
			policy);
		return DL_EBADARG;
	}
	return 0;
}

int dl__config_check(struct dl_store *st, const redisReply *config, char *why,
		     size_t len)
{
	const char *aof = dl__config_value(config, "appendonly");
	const char *fsync = dl__config_value(config, "appendfsync");
	int d;

	if (aof && strcmp(aof, "no") == 0 && !st->cfg->allow_nondurable_redis) {
		dl__durability_check(st, DL_DUR_NONE, why, len);
		return DL_EBADARG;
	}
	/* appendfsync changed by a CONFIG SET (found from outside: HELLO
	 * went on saying always after CONFIG SET appendfsync no): the
	 * level is logged, and HELLO, STATS and the metrics say it */
	if (aof && strcmp(aof, "yes") == 0 && fsync) {
		d = strcmp(fsync, "always") == 0     ? DL_DUR_ALWAYS
		    : strcmp(fsync, "everysec") == 0 ? DL_DUR_EVERYSEC
		    : strcmp(fsync, "no") == 0	     ? DL_DUR_OS
						     : DL_DUR_AOF;
		if (dl__durability_check(st, d, why, len) != 0)
			return DL_EBADARG;
	}
	return dl__eviction_check(st, config, why, len);
}
