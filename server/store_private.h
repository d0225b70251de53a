/*
 * store_private.h -- what store.c and store_load.c share; not an interface
 * for anything else.
 */
#ifndef DL_SERVER_STORE_PRIVATE_H
#define DL_SERVER_STORE_PRIVATE_H

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "server/record.h"
#include "server/store.h"

enum link { LINK_DOWN, LINK_CONNECTING, LINK_SYNCING, LINK_UP };

enum batch_kind { BATCH_EPOCH, BATCH_RESYNC, BATCH_PING };

/* One awaited reply (the EXEC of a pipeline, the end of a re-sync, a
 * PING); kept in send order, which is reply order. */
struct batch {
	struct batch *next;
	struct dl_store *st;
	enum batch_kind kind;
	uint64_t epoch; /* committed by this reply (EPOCH, RESYNC) */
	uint64_t sent_us;
};

struct dl_store {
	uv_loop_t *loop;
	const struct dl_config *cfg;
	struct dl_locktab *tab;
	struct dl_store_hooks hooks;
	int redis; /* persist = redis */
	struct dl_redis_addr addr;
	uint64_t epoch;	    /* open epoch */
	uint64_t committed; /* last durable epoch */

	redisAsyncContext *ac; /* NULL while DOWN */
	enum link link;
	int synced;		/* Redis holds the table: skip a re-sync */
	uint64_t link_since_ms; /* when the link entered its state */
	uint64_t retry_at_ms;	/* DOWN: next connect attempt */
	uint64_t backoff_ms;
	uint64_t last_reply_ms;
	size_t synced_locks;
	char resync_err[128]; /* first error reply of the running re-sync */
	struct batch *head, *tail; /* awaited replies, oldest first */

	uv_timer_t timer; /* DL_STORE_TICK_MS: reconnects, timeouts, pings */
	int timer_on;
	void (*stop_done)(void *arg);
	void *stop_arg;

	struct dl_buf key;	/* scratch: "<prefix>lock:<name>" */
	struct dl_buf val;	/* scratch: a record */
	char *token_key;	/* <prefix>token */
	char *names_key;	/* <prefix>locks */
	size_t lock_prefix_len; /* strlen(prefix) + strlen("lock:") */
	struct dl_store_stats st;
};

uint64_t dl__store_wall_ms(void);
/* Where commands go: the async link (store.c) or the blocking context of
 * the start-up load (store_load.c). 0 or a negative DL_E* code. */
typedef int (*dl__store_emit)(void *sink, int argc, const char **argv,
			      const size_t *lens);

/* Emit the commands that store lock `name` in its present state: for a
 * lock gone or empty (lk NULL or without holders and waiters), DEL of its
 * key and SREM from the name set; otherwise SET of its record (with PX
 * when nobody waits) and, unless lk->stored says it is there already or
 * `force`, SADD to the name set. Returns the number of commands emitted,
 * or a negative DL_E* code. */
int dl__store_lock_cmds(struct dl_store *st, struct dl_str name,
			const struct dl_lock *lk, int64_t off, int force,
			dl__store_emit emit, void *sink);
/* The first error in a reply (arrays searched), or NULL. */
const char *dl__store_reply_error(const redisReply *r);

#endif /* DL_SERVER_STORE_PRIVATE_H */
