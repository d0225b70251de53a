/* SPDX-License-Identifier: MIT */
/*
 * store_private.h -- what the store's files share (store.c,
 * store_attest.c, store_batch.c, store_call.c, store_cluster.c,
 * store_durable.c, store_find.c, store_horizon.c, store_lead.c,
 * store_load.c, store_migrate.c, store_restart.c, store_resync.c):
 * struct dl_store and the link's calls that the other files make
 * (dl__*). Not an interface for anything else.
 *
 * The struct is the link to Redis (store_link.c: the connection, its
 * state, the queue of awaited replies; store.c: the timers) and one part
 * per concern,
 * each declared and owned by its file's header: the key names and the
 * write scratch (store_batch.h), the re-sync (store_resync.h), the
 * leadership and what Redis was seen to hold (store_lead.h), finding the
 * primary (store_find.h), Redis's durability (store_durable.h), the lease
 * horizon and the closure (store_horizon.h), the peers' attestation
 * (store_attest.h). A file writes its own part; others read it, or call
 * the part's dl__ functions.
 */
#ifndef DL_SERVER_STORE_PRIVATE_H
#define DL_SERVER_STORE_PRIVATE_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "server/store/bucket.h"
#include "server/store/record.h"
#include "server/store/store.h"
#include "server/store/store_attest.h"
#include "server/store/store_batch.h"
#include "server/store/store_durable.h"
#include "server/store/store_find.h"
#include "server/store/store_horizon.h"
#include "server/store/store_lead.h"
#include "server/store/store_load.h"
#include "server/store/store_resync.h"
#include "server/store/store_tuning.h"

enum link { LINK_DOWN, LINK_CONNECTING, LINK_SYNCING, LINK_UP };

enum batch_kind {
	BATCH_EPOCH,	   /* the writes of one flush: commits its epoch */
	BATCH_RESYNC_PART, /* a chunk of a re-sync */
	BATCH_RESYNC,	   /* the last chunk: commits every closed epoch */
	BATCH_PING,	   /* keep-alive of an idle link */
	BATCH_RENEW,	   /* the active renews its leadership */
	BATCH_LOOK,	   /* a standby looks at the leadership */
	BATCH_WAIT,	   /* WAIT for replicas: commits its epoch */
	BATCH_RESYNC_WAIT, /* WAIT after a re-sync: brings the link up */
	BATCH_CONFIG,	   /* the running check of Redis's configuration */
	BATCH_PART,	   /* the partition layer's record (store_part.c) */
};
/* A BATCH_PART's epoch: its reply is the write's (the call, or the WAIT
 * behind it), or a WAIT follows the call (store_part.c). */
#define PART_SENT   0
#define PART_WAITED 2

/* One awaited reply; kept in send order, which is reply order. */
struct batch {
	struct batch *next;
	struct dl_store *st;
	enum batch_kind kind;
	uint64_t epoch; /* committed by this reply (EPOCH, RESYNC) */
	uint64_t sent_us;
	uint64_t sent_ms; /* monotonic (clock.h), for leadership deadlines */
	size_t records;	  /* a re-sync call's records: Redis is given
			     DL_STORE_RECORD_US more per record to answer */
};

/* The store: the link to Redis and its batches (store.c), and the parts
 * the other files own, each in its header. */
struct dl_store {
	uv_loop_t *loop;
	const struct dl_config *cfg;
	struct dl_locktab *tab;
	struct dl_store_hooks hooks;
	int redis; /* persist = redis */
	struct dl_redis_addr addr;
	uint64_t epoch;	    /* open epoch */
	uint64_t committed; /* last durable epoch */
	struct dl_store_stats st;
	int stopping; /* dl_store_stop() called: no reconnects */
	void (*stop_done)(void *arg);
	void *stop_arg;

	/* The link (store.c). */
	redisAsyncContext *ac; /* NULL while DOWN */
	enum link link;
	int synced; /* Redis holds the table: skip a re-sync */
	size_t synced_locks;
	char fence[24];		/* this link's writer fence (decimal) */
	uint64_t link_since_ms; /* when the link entered its state */
	int opening; /* the first link after a take-over: dl_store_opening */
	uint64_t retry_at_ms; /* DOWN: next connect attempt */
	uint64_t backoff_ms;
	uint64_t last_reply_ms;
	int replicas_short;	   /* a WAIT fell short: changes refused */
	int cluster_absent;	   /* Redis held no id at the last read
				      (store_cluster.c) */
	struct batch *head, *tail; /* awaited replies, oldest first */

	uv_timer_t timer; /* DL_STORE_TICK_MS: reconnects, timeouts, pings */
	int timer_on;	  /* both timers are initialised */
	uv_timer_t lazy;  /* DL_STORE_LAZY_MS: lazy writes wait no longer */
	uv_idle_t walk;	  /* a re-sync's steps of indexing the table */
	int lazy_on;	  /* it runs */
	int lazy_due;	  /* it ran out: write every dirty lock */
	int handles_open; /* closing: handles not yet closed */

	/* The parts, each owned by its file. */
	struct store_keys keys;	    /* store_batch.h */
	struct store_writes writes; /* store_batch.h */
	struct resync resync;	    /* store_resync.h: SYNCING's chunks */
	struct store_lead lead;	    /* store_lead.h */
	struct store_find find;	    /* store_find.h */
	struct store_durable dur;   /* store_durable.h */
	struct store_horizon hz;    /* store_horizon.h */
	struct store_attest attest; /* store_attest.h */
	struct {		    /* store_part.c */
		char gone[DL_STORE_PART_MAX];	 /* as last read or written */
		char took[DL_STORE_PART_MAX];	 /* ... */
		size_t moved_len;		 /* ... bytes of "moved" */
		size_t sending_moved;		 /* ... of the write's */
		char *map;			 /* the map's copy, or NULL */
		char *sending;			 /* the write under way */
		enum dl_part_field field;	 /* ... of this field */
		void (*done)(int ok, void *arg); /* it, when one is */
		void *arg;
		unsigned gen;	/* raised by each load and write */
		unsigned loads; /* raised by each load */
	} part;
};

/* ---- store_part.c ---- */

/* The reply to the partition record's write (NULL reply or error: 0). */
void dl__part_reply(struct dl_store *st, int ok);
/* A load reads the record (a take-over learns what was given away). */
int dl__part_load(struct load_ctx *x);
/* At the store's end. */
void dl__part_free(struct dl_store *st);

/* ---- store_link.c: the link, for store.c and store_find.c ---- */

/* Lose the link (see store_link.c). */
void dl__link_fail(struct dl_store *st, const char *why);
/* A new connection: CONNECTING, and the primary found first
 * (store_find.c), which then opens it. */
void dl__link_connect(struct dl_store *st);
/* Connect to ip:port (NULL: the unix socket) and start the handshake. */
void dl__link_open(struct dl_store *st, const char *ip, int port);
/* Send the leadership's command in `mode` (store_lead.c builds it), its
 * reply to fn. 0, or an error: the link is to be failed. */
int dl__link_send_lead(struct dl_store *st, enum lead_mode mode,
		       redisCallbackFn *fn);

/* ---- store_link.c, for store_resync.c ---- */

/* Send a command whose reply ends a batch of `kind` (store_link.c). 0, or
 * DL_ENOMEM / DL_EUNAVAILABLE: the link is to be failed. */
int dl__batch_send(struct dl_store *st, enum batch_kind kind, uint64_t epoch,
		   int argc, const char **argv, const size_t *lens);
/* min_replicas_ack: the WAIT after a batch. */
int dl__send_wait(struct dl_store *st, enum batch_kind kind, uint64_t epoch);
/* The link is up: changes are accepted, the epochs so far committed. */
void dl__link_up(struct dl_store *st, const char *how);

/* ---- store_link.c, for store_horizon.c ---- */

/* Every epoch up to `epoch` is durable (if the horizon is: the gate is
 * asked again). */
void dl__commit(struct dl_store *st, uint64_t epoch);
/* A renewal of the leadership now, unless one awaits its reply (whose
 * handler sends the next when due). */
void dl__lead_send(struct dl_store *st);

/* ---- store_lead.c: the leadership's timing on the link ---- */

/* This daemon is not the active one any more: the link fails, the server steps
 * down (hook) with `ev`, and the log says `how` and who leads. */
void dl__lead_depose(struct dl_store *st, enum dl_store_role_event ev,
		     const char *how);
/* A renewal's or a look's reply (batch kind BATCH_RENEW or BATCH_LOOK). */
void dl__lead_on_reply(struct dl_store *st, enum batch_kind kind,
		       const redisReply *r, uint64_t sent_ms);
/* When to look at the leadership again: right after the holder's lease
 * would end, at most a third of a lease from now, or at once to pass a
 * new horizon back (store_horizon.c). */
void dl__lead_next_look(struct dl_store *st, const struct lead_reply *lr);
/* The leadership's turn on the link: renew it (the active) or look at it
 * (a standby) when due, one request at a time. */
void dl__lead_tick(struct dl_store *st);
/* A standby that found the leadership free on a Redis that went back
 * waits one lease for the active to write its table back (or while it
 * vouched for a lapsed active's challenge): 1 while it waits. */
int dl__lead_lapse_wait(struct dl_store *st, const struct lead_reply *lr);
/* ---- store_link.c, for store_attest.c ---- */

/* Take the leadership on the link now (the handshake's last step). 0 or
 * DL_EUNAVAILABLE: the link is to be failed. */
int dl__store_take(struct dl_store *st);

/* ---- store_cluster.c: the cluster id ---- */

/* persist = none: a random id for this process. 0 or an error. */
int dl__cluster_init(struct dl_store *st);
/* 1 if s (len bytes) is a cluster id a daemon could have written. */
int dl__cluster_id_valid(const char *s, size_t len);
/* The reply to a GET (or SET NX GET) of the id: nil (absent, noted),
 * the id this daemon knows, or one it adopts when it knows none; 0. Any
 * other: DL_EBADARG, logged, with why. */
int dl__cluster_found(struct dl_store *st, const redisReply *r, char *why,
		      size_t len);
/* The load: read the id before the take; write it (SET NX) after a take
 * that found none. */
int dl__cluster_load_read(struct load_ctx *x);
int dl__cluster_load_claim(struct load_ctx *x);
/* The link: GET the id (fn NULL: a standby's poll, a mismatch fails the
 * link); after a take that found none, write it. 0 or DL_EUNAVAILABLE. */
int dl__cluster_send_get(struct dl_store *st, redisCallbackFn *fn);
int dl__cluster_claim(struct dl_store *st);

#endif /* DL_SERVER_STORE_PRIVATE_H */
