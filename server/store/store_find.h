/* SPDX-License-Identifier: MIT */
/*
 * store_find.h -- finding Redis's primary (store_find.c): a
 * unix socket or host:port as configured, or the primary the Sentinels
 * name, and the Sentinels' failover announcements. Private to the
 * store's files (store_private.h).
 */
#ifndef DL_SERVER_STORE_FIND_H
#define DL_SERVER_STORE_FIND_H

#include <hiredis/async.h>
#include <stddef.h>
#include <stdint.h>

#include "server/config.h"

struct dl_store;

/* A subscription to one Sentinel's events (store_find.c). */
struct dl_sentinel_sub {
	struct dl_store *st;
	int i;		      /* its index in the configuration */
	redisAsyncContext *c; /* subscribed, or connecting; NULL */
	void *resolving;      /* a uv_getaddrinfo under way, or NULL */
	uint64_t retry_at_ms; /* uv_now: next attempt when c is NULL */
};

/* Finding the primary (store_find.c owns it): the attempt under way, the
 * Sentinels (or cluster nodes) asked and subscribed to, and the primary
 * they named. */
struct store_find {
	unsigned gen;		/* the current connection attempt */
	void *resolving;	/* a uv_getaddrinfo under way, or NULL */
	redisAsyncContext *sac; /* asking a Sentinel */
	struct dl_sentinel_sub sub[DL_SEEDS_MAX]; /* one per Sentinel */
	uint64_t failover_hold_until; /* uv_now ms: no link before it */
	unsigned slot;		      /* a cluster: the prefix's hash slot */
	int sentinel_i;		      /* the seed to ask next */
	int sentinel_tries;	      /* asked in this round */
	char sentinel_ip[64];	      /* the last one that answered */
	int sentinel_port;
	char primary_host[256]; /* the primary, as named (logs) */
	int primary_port;
};

/* Resolve, ask Sentinel or the cluster, then dl__link_open() (or
 * dl__link_fail()). */
void dl__find_primary(struct dl_store *st);
/* Abandon the attempt under way (a link failure). */
void dl__find_cancel(struct dl_store *st);
/* Subscribe to every Sentinel's failover announcements (Sentinel only;
 * idempotent, call it on every tick: lost subscriptions are made again). */
void dl__sentinel_subscribe(struct dl_store *st);
/* 0 while a failover announced by a Sentinel is being waited out. */
int dl__sentinel_allows_link(struct dl_store *st);
/* Everything, at a stop. */
void dl__find_stop(struct dl_store *st);
/* The primary of `slot` in a CLUSTER SLOTS reply (an empty ip is
 * `asked`'s): 0, or -1 when no range of the reply holds the slot. */
int dl__slots_primary(const redisReply *r, unsigned slot, const char *asked,
		      char *host, size_t hostlen, int *port);
/* Blocking: the primary's host and port (the loader). */
int dl__find_primary_sync(struct dl_store *st, char *host, size_t hostlen,
			  int *port, char *err, size_t errlen);

#endif /* DL_SERVER_STORE_FIND_H */
