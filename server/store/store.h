/* SPDX-License-Identifier: MIT */
/*
 * store.h -- persistence of the lock table, and the durability clock.
 *
 * The store is the only module that talks to Redis (store.c and the
 * store_*.c beside it, store_private.h); with persist=none it keeps the
 * same interface and persists nothing.
 *
 * Durability is counted in epochs. The open epoch (dl_store_epoch) collects
 * every change the lock table makes; dl_store_flush(), called once per loop
 * iteration, closes it when it can: the urgent dirty locks (those a held
 * reply waits for) are drained and written as one batch -- one call of the
 * daemon's Redis function -- and a new epoch opens. A batch goes only when
 * the previous one is answered (group commit: DL_STORE_INFLIGHT_MAX), and
 * changes nobody waits for ride with a later batch (lazy writes, store.c).
 * When Redis acknowledges a batch, the committed hook reports its epoch as
 * durable; epochs commit in order. A reply that depends on a change is held
 * by the connection layer until the epoch that was open when the change was
 * made has committed.
 *
 * When Redis is unreachable the store says so (dl_store_available() == 0,
 * availability hook): the lock table's grants are suspended and requests
 * that change state are refused. Epochs whose write did not complete stay
 * uncommitted; when Redis returns, the store rewrites the full state and
 * then commits every epoch up to the latest.
 */
#ifndef DL_SERVER_STORE_H
#define DL_SERVER_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/limits.h"
#include "server/config.h"
#include "server/locktab/locktab.h"

struct dl_store;

/* What the store learned about the leadership (store_lead.c). */
enum dl_store_role_event {
	/* Another daemon holds the leadership, or took it and moved the
	 * state on: this one is a standby now, its table is stale. */
	DL_STORE_DEPOSED,
	/* A standby saw the leadership free: time to take over. */
	DL_STORE_LAPSED,
	/* This daemon took its leadership again, but another wrote since:
	 * its table is stale; step down and take over (load) at once. */
	DL_STORE_STALE,
};

struct dl_store_hooks {
	/* Every epoch <= `epoch` is durable. */
	void (*committed)(uint64_t epoch, void *ctx);
	/* Persistence went down (0) or came back (1). */
	void (*availability)(int up, void *ctx);
	/* The role changed, or should: the hook is called from a Redis
	 * reply, and must defer what it does about it (the server runs a
	 * take-over from a timer: dl_store_take_over frees the link). */
	void (*role)(enum dl_store_role_event ev, void *ctx);
	/* Redis went back and this daemon cannot vouch for its state (or
	 * another daemon found so): grant no new lease for `ms`
	 * (dl_locktab_close_grants), for the reason `why` (the lease
	 * horizon, or max_ttl when nothing bounds it). Called from a take's
	 * reply or from dl_store_load. */
	void (*closed)(uint64_t ms, const char *why, void *ctx);
	/* The first link after a take-over is up, or failed: the requests
	 * held for it (dl_store_opening) go on. */
	void (*opened)(void *ctx);
	void *ctx;
};

/* The active daemon as last seen in Redis (or this one). */
struct dl_leader {
	uint64_t epoch; /* 0: unknown */
	char node[DL_NODE_ID_MAX + 1];
	char addr[DL_ADVERTISE_MAX + 1];
	uint64_t until_ms; /* monotonic: when its lease ends, as last seen */
};

struct dl_store_stats {
	uint64_t batches;     /* pipelines sent */
	uint64_t writes;      /* lock records written */
	uint64_t round_trips; /* Redis replies awaited (one per pipeline) */
	uint64_t latency_us_sum;
	uint64_t latency_us_max;
	uint64_t backlog; /* pipelines sent, not acknowledged */
	uint64_t reconnects;
	uint64_t failures;	     /* writes that failed or timed out */
	uint64_t takeovers;	     /* leaderships taken (start-up included) */
	uint64_t depositions;	     /* leaderships lost to another daemon */
	uint64_t renewals;	     /* leadership renewals confirmed */
	uint64_t replica_waits;	     /* WAITs sent (min_replicas_ack) */
	uint64_t replica_shortfalls; /* WAITs answered with too few */
	uint64_t failover_holds;     /* Sentinel failovers waited out */
	uint64_t redis_aof;	     /* 1: Redis has AOF on (last read) */
	uint64_t redis_fsync_always; /* 1: and fsyncs every write */
	uint64_t redis_evicting;     /* 1: its maxmemory-policy may evict */
	uint64_t went_back; /* takes that found Redis behind what was seen */
	uint64_t standbys_dropped; /* standbys no longer counted for the
				      horizon: they stopped looking */
	uint64_t attests_proved;   /* lapses after which every peer vouched
				      that nobody led: the table kept */
	uint64_t attests_bounded;  /* ... after which one could not, but
				      every peer bounded what it told: the
				      table dropped, the closure bounded */
	uint64_t attests_failed;   /* ... after which one bounded nothing */
};

/* The store borrows cfg, loop and tab for its life. */
struct dl_store *dl_store_new(uv_loop_t *loop, const struct dl_config *cfg,
			      struct dl_locktab *tab,
			      const struct dl_store_hooks *hooks);
void dl_store_free(struct dl_store *st);

/* The partition's record (store_part.c): the slots it gave away, as the
 * partition layer wrote it ("" none), and its copy of the partition map
 * ("" none), as of the last load or write. */
const char *dl_store_part_gone(const struct dl_store *st);
const char *dl_store_part_map(const struct dl_store *st);
/* Raised whenever the record may have changed (a load, a write). */
unsigned dl_store_part_gen(const struct dl_store *st);
/* Raised by each load (a start, a take-over): the partition layer then
 * reads the map again before it serves. */
unsigned dl_store_part_loads(const struct dl_store *st);
/* The moves of other partitions whose locks this one imported, as the
 * partition layer wrote it ("" none). */
const char *dl_store_part_took(const struct dl_store *st);
/* Bytes of the locks the last move carried, still in the record (0:
 * none, or cleared once imported: DL_PART_MOVED ""). */
size_t dl_store_part_moved_len(const struct dl_store *st);
enum dl_part_field { DL_PART_GONE, DL_PART_MAP, DL_PART_TOOK, DL_PART_MOVED };
/* Write one field of it, fenced, behind every batch sent so far:
 * done(1) once Redis holds it, done(0) if it was refused or the link
 * failed. DL_EUNAVAILABLE when not the active with its link up, or a
 * write is under way. */
int dl_store_part_write(struct dl_store *st, enum dl_part_field field,
			const char *value, void (*done)(int ok, void *arg),
			void *arg);

/* Move n of this partition: write "gone" (the partition layer's text)
 * and the records of every lock of the table in `slots` (DL_SLOTS bytes,
 * nonzero: given away), from partition `from` to `to`, in one fenced
 * call, as dl_store_part_write does; *nlocks says how many. DL_ELIMIT
 * past DL_MOVE_LOCKS_MAX locks or DL_MOVE_TEXT_MAX bytes of them. The
 * caller keeps those locks from changing until they leave the table
 * (dl_locktab_freeze, dl_locktab_extract). */
int dl_store_part_move(struct dl_store *st, const char *gone,
		       const uint8_t *slots, const char *from, const char *to,
		       uint64_t n, size_t *nlocks,
		       void (*done)(int ok, void *arg), void *arg);
/* Import the locks of another partition's move (the "moved" text it
 * wrote, len bytes): each restored as a load restores it, over whatever
 * the table holds of that name, then written into this keyspace in one
 * fenced call with "took" = `took`, done as dl_store_part_write. The
 * caller serves none of those names until done(1). DL_EPROTO with why
 * for a text that does not parse; DL_EUNAVAILABLE, DL_ENOMEM. */
int dl_store_import(struct dl_store *st, const char *text, size_t len,
		    const char *took, void (*done)(int ok, void *arg),
		    void *arg, char *why, size_t whylen);

/* Blocking, for a thread of its own (it touches no store): the host and
 * port of the Redis primary that serves `slot` in a cluster, that the
 * Sentinels name, or the configured host (a unix socket: nothing to
 * find, host ""). *seed is the seed asked first, then the one that
 * answered. 0, or DL_EUNAVAILABLE with err set. */
int dl_store_primary_sync(const struct dl_redis_addr *a, unsigned slot,
			  uint64_t timeout_ms, int *seed, char *host,
			  size_t hostlen, int *port, char *err, size_t errlen);

/* Take the leadership and load leases, queues and the token high-water
 * mark into the table, blocking (nothing else runs meanwhile). `start`:
 * this process is starting, and may take over a leadership recorded
 * under its own node id (its previous run). Returns 0 (this daemon is
 * the active one), DL_ENOTACTIVE (another holds the leadership:
 * dl_store_leader() says who), DL_EUNAVAILABLE (Redis not reachable or
 * not ready: try again) or another error (configuration). `err` explains
 * a failure, in DL_STORE_ERR_MAX bytes. */
#define DL_STORE_ERR_MAX 512
int dl_store_load(struct dl_store *st, uint64_t unix_ms, int start, char *err,
		  size_t errlen);

/* --check-config: look at the Redis cfg names, read-only and blocking
 * (store_probe.c). 0 and what it holds to (its persistence) in out;
 * DL_EUNAVAILABLE: not reachable or not ready, not checked (out says);
 * DL_EBADARG: one the daemon would refuse to serve on (out says why). */
int dl_store_probe(const struct dl_config *cfg, char *out, size_t len);

/* Connect the async link used while serving: as the active after a
 * successful load, else as a standby watching the leadership. */
int dl_store_start(struct dl_store *st);
/* A standby becomes the active: drops its link, then dl_store_load()
 * (one attempt, `start` as there) and reconnects in its new role. */
int dl_store_take_over(struct dl_store *st, int start, char *err,
		       size_t errlen);

/* 1 if this daemon is the active one and its leadership is confirmed
 * now (always, with persist = none): what it says about locks is true. */
int dl_store_leading(const struct dl_store *st);
/* 1 if this daemon is the active one (always, with persist = none). */
int dl_store_active(const struct dl_store *st);
/* The active daemon as last known; epoch 0 if none is known. */
const struct dl_leader *dl_store_leader(const struct dl_store *st);
/* Where clients should go: this daemon's address if it is the active
 * one, else the active's as last known -- "-" when none is known, or the
 * leadership last seen names this daemon (a take-over that has not
 * finished loading: this one is not serving). */
const char *dl_store_active_addr(const struct dl_store *st);
/* This daemon's node id and address, as recorded in the leadership. */
const char *dl_store_node(const struct dl_store *st);
const char *dl_store_addr(const struct dl_store *st);

/* The cluster id (store_cluster.c): 32 hex digits, or "-" while this
 * daemon does not know it (a standby that has not read it yet). */
const char *dl_store_cluster(const struct dl_store *st);

/* The open epoch: a change made now is durable when it commits. */
uint64_t dl_store_epoch(const struct dl_store *st);
/* Every epoch up to this one has committed. */
uint64_t dl_store_committed(const struct dl_store *st);
/* Close the open epoch: write what changed, once per loop iteration.
 * Changes no reply waits for may wait for a later batch (store.c, lazy
 * writes) unless `all`. Ends with dl_store_push(). */
void dl_store_flush(struct dl_store *st, int all);
/* Write what the Redis link has buffered (store.c, write interest); once
 * per loop iteration, also when nothing is flushed. */
void dl_store_push(struct dl_store *st);
/* 1 if changes can be persisted now (leading, and the link is up). */
int dl_store_available(const struct dl_store *st);
/* 1 while this daemon has just taken the leadership over (the table is
 * loaded, the leadership confirmed) and its link to Redis is being made:
 * a change asked now is better held than refused, as the link is up a
 * few milliseconds later, or fails (hooks.opened, either way). Clients
 * that followed the take-over re-send their waits at once and used to
 * meet ERR UNAVAILABLE in that gap. */
int dl_store_opening(const struct dl_store *st);
/* The lease horizon this daemon reserved, and that is durable, as ms
 * from now (0: none or passed); the closure in force, ms left (0: none),
 * and why. */
uint64_t dl_store_horizon_ms(const struct dl_store *st);
uint64_t dl_store_closed_ms(const struct dl_store *st, const char **why);
/* Why grants are closed: 0 they are not, 1 until the lease horizon, 2 for
 * max_ttl (nothing bounds the leases told: store_horizon.c). */
int dl_store_closed_bound(const struct dl_store *st);
/* The keyspace's proof key (server/proof.h) as bytes: the current one
 * (old 0) or the one before it (old 1); NULL if there is none. */
const unsigned char *dl_store_proof_key(const struct dl_store *st, int old);
/* Standbys the active counts for the horizon (0 for a standby). */
uint64_t dl_store_standbys(const struct dl_store *st);
/* 1 if every closed epoch has committed (used when draining). */
int dl_store_idle(const struct dl_store *st);
/* Stop: disconnect, close handles. `done` runs when they are closed. */
void dl_store_stop(struct dl_store *st, void (*done)(void *arg), void *arg);

const struct dl_store_stats *dl_store_stats(const struct dl_store *st);
const char *dl_store_backend(const struct dl_store *st);
/* Redis's persistence as last read: "always", "everysec", "os" (AOF,
 * appendfsync no), "aof" (policy unknown), "none" (no AOF: a restart of
 * Redis loses every lease), "unknown" (not read yet); "none" without
 * Redis. */
const char *dl_store_durability(const struct dl_store *st);
const char *dl_durability_name(int d);

#endif /* DL_SERVER_STORE_H */
