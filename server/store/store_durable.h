/* SPDX-License-Identifier: MIT */
/*
 * store_durable.h -- the store's view of Redis's own durability
 * (store_durable.c): AOF and its fsync policy, the eviction policy, read
 * at every connection and every DL_STORE_CONFIG_MS while the link runs.
 * Private to the store's files (store_private.h).
 */
#ifndef DL_SERVER_STORE_DURABLE_H
#define DL_SERVER_STORE_DURABLE_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

struct dl_store;

enum dl_durability {
	DL_DUR_UNKNOWN,	 /* not read yet */
	DL_DUR_NONE,	 /* no AOF: a restart loses every lease */
	DL_DUR_AOF,	 /* AOF, fsync policy unknown */
	DL_DUR_OS,	 /* appendfsync no */
	DL_DUR_EVERYSEC, /* appendfsync everysec */
	DL_DUR_ALWAYS,	 /* appendfsync always */
};

/* What the link last read of Redis's persistence and memory policy
 * (store_durable.c writes it; store.c's link and the running check read
 * it). */
struct store_durable {
	int level;		/* enum dl_durability, last read */
	char evict_policy[24];	/* maxmemory-policy, last read */
	uint64_t next_check_ms; /* next dl__config_check (mono) */
	char aof_info[32];	/* the link's INFO persistence, cut */
};

/* The level from INFO persistence's text and CONFIG GET appendfsync's
 * reply (NULL or an error: unknown policy). */
int dl__durability_of(const char *info, const redisReply *fsync);
/* The Redis process that wrote INFO's text, and the history of its
 * data: its run_id (INFO server) and its master_replid (INFO
 * replication), the first 16 hex digits of each, combined (never 0), or
 * 0 if it does not say. A restart, another server (a promoted replica),
 * or the same process resynced as a replica and promoted again has
 * another. */
uint64_t dl__run_id_of(const char *info);
/* How many commands that may replace or empty data in place -- FLUSHALL,
 * FLUSHDB, RESTORE, SWAPDB, DEBUG -- this Redis process has run (INFO
 * commandstats: their calls, summed), or 0: a backup put back into a
 * running Redis keeps its run_id and its replication id, not this count
 * (store_restart.c, since_take). Every call counts, on any database and
 * whatever the subcommand (DEBUG SLEEP too): each only makes a start
 * without a state file wait and close, never take. CONFIG RESETSTAT sets
 * the count back: a restore followed by a reset is not seen. */
uint64_t dl__meddled_of(const char *info);
/* Record it (logged when it changes). DL_EBADARG with why when the daemon
 * must not serve on it (no AOF, not allowed), DL_EUNAVAILABLE when it is
 * not known yet (Redis loading): try again. */
int dl__durability_check(struct dl_store *st, int d, char *why, size_t len);
/* The value of `name` in a CONFIG GET reply, or NULL. */
const char *dl__config_value(const redisReply *r, const char *name);
/* maxmemory-policy in a CONFIG GET reply: DL_EBADARG with why when it may
 * evict keys and allow_evicting_redis is not set (logged when it
 * changes); 0 otherwise, or when the reply does not say. */
int dl__eviction_check(struct dl_store *st, const redisReply *config, char *why,
		       size_t len);
/* The running link's check (CONFIG GET appendonly maxmemory-policy, every
 * DL_STORE_CONFIG_MS): AOF turned off or an evicting policy, refused as
 * at a connection. */
int dl__config_check(struct dl_store *st, const redisReply *config, char *why,
		     size_t len);

#endif /* DL_SERVER_STORE_DURABLE_H */
