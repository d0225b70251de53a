/*
 * store.h -- persistence of the lock table, and the durability clock.
 *
 * The store is the only module that talks to Redis (store_redis.c); with
 * persist=none it keeps the same interface and persists nothing.
 *
 * Durability is counted in epochs. The open epoch (dl_store_epoch) collects
 * every change the lock table makes; once per loop iteration
 * dl_store_flush() closes it: the dirty locks are drained and written as one
 * pipeline (MULTI/EXEC) and a new epoch opens. When Redis acknowledges that
 * write, the committed hook reports the epoch as durable; epochs commit in
 * order. A reply that depends on a change is held by the connection layer
 * until the epoch that was open when the change was made has committed.
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

#include "server/config.h"
#include "server/locktab.h"

struct dl_store;

struct dl_store_hooks {
	/* Every epoch <= `epoch` is durable. */
	void (*committed)(uint64_t epoch, void *ctx);
	/* Persistence went down (0) or came back (1). */
	void (*availability)(int up, void *ctx);
	void *ctx;
};

struct dl_store_stats {
	uint64_t batches;     /* pipelines sent */
	uint64_t writes;      /* lock records written */
	uint64_t round_trips; /* Redis replies awaited (one per pipeline) */
	uint64_t latency_us_sum;
	uint64_t latency_us_max;
	uint64_t backlog; /* pipelines sent, not acknowledged */
	uint64_t reconnects;
	uint64_t failures; /* writes that failed or timed out */
};

/* The store borrows cfg, loop and tab for its life. */
struct dl_store *dl_store_new(uv_loop_t *loop, const struct dl_config *cfg,
			      struct dl_locktab *tab,
			      const struct dl_store_hooks *hooks);
void dl_store_free(struct dl_store *st);

/* Before serving: load leases, queues and the token high-water mark into
 * the table, blocking (nothing else runs yet). `err` explains a failure. */
int dl_store_load(struct dl_store *st, uint64_t unix_ms, char *err,
		  size_t errlen);

/* Connect the async link used while serving. */
int dl_store_start(struct dl_store *st);

/* The open epoch: a change made now is durable when it commits. */
uint64_t dl_store_epoch(const struct dl_store *st);
/* Close the open epoch: write what changed. Once per loop iteration. */
void dl_store_flush(struct dl_store *st);
/* 1 if changes can be persisted now. */
int dl_store_available(const struct dl_store *st);
/* 1 if every closed epoch has committed (used when draining). */
int dl_store_idle(const struct dl_store *st);
/* Stop: disconnect, close handles. `done` runs when they are closed. */
void dl_store_stop(struct dl_store *st, void (*done)(void *arg), void *arg);

const struct dl_store_stats *dl_store_stats(const struct dl_store *st);
const char *dl_store_backend(const struct dl_store *st);

#endif /* DL_SERVER_STORE_H */
