/* SPDX-License-Identifier: MIT */
/*
 * store_private.h -- what the store's files share (store.c, store_batch.c,
 * store_cluster.c, store_durable.c, store_find.c, store_lead.c,
 * store_load.c, store_migrate.c, store_resync.c): the one struct dl_store
 * they all read and write, and their internal calls (dl__*). Not an
 * interface for anything else. Splitting the struct by part, each file
 * owning its own, is the next step for this module.
 */
#ifndef DL_SERVER_STORE_PRIVATE_H
#define DL_SERVER_STORE_PRIVATE_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "server/bucket.h"
#include "server/record.h"
#include "server/seen.h"
#include "server/store.h"
#include "server/store_tuning.h"

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
};

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

/* One item of a write batch, its bytes in wb.text. For the apply
 * function: a lock's write, op 'S' (its record) or 'D' (deleted), in
 * bucket `bucket`. For the replace function (store_batch.c): 'B' starts
 * bucket `bucket`, its entry count in v; 'E' is one entry of it (n = the
 * name, v = the record); 'K' is another key to delete, named by n. */
struct wlock {
	size_t noff, nlen; /* the name, or the key of a 'K' */
	size_t voff, vlen; /* the record, or the count of a 'B' / 'K' */
	uint32_t bucket;
	char op;
};

/* A batch of writes being built for one FCALL (store_batch.c). */
struct wbatch {
	struct dl_buf text; /* names, records and counts, back to back */
	struct wlock *locks;
	size_t nlocks, cap;
	size_t nentries;   /* of them, lock records ('S', 'E') */
	size_t nkeys;	   /* of them, Redis keys (all but 'E') */
	const char **argv; /* the FCALL, built by dl__wb_argv() */
	size_t *lens;
	size_t argv_cap;
	char numkeys[24];
	char token[24];
};

/* The table's locks that have a record (a holder or a waiter), grouped
 * by bucket (store_batch.c): the order of a re-sync and of a migration,
 * bucket after bucket. Pointers into the table: valid until a lock
 * leaves it, which a re-sync rules out by pinning the table
 * (dl_locktab_pin) for as long as it keeps them. */
struct bucket_index {
	struct bucket_list {
		const struct dl_lock **v;
		size_t n, cap;
	} b[DL_STORE_BUCKETS];
	size_t n; /* locks in all */
	int err;  /* DL_ENOMEM: a lock could not be added */
};

/* A re-sync under way (store.c): first the table is indexed by bucket, a
 * step per loop iteration; then the calls go, each formatted when it is
 * sent, DL_STORE_RESYNC_WINDOW in flight. */
struct resync {
	struct bucket_index bi;
	int pinned;	 /* the table is pinned for bi (resync_free unpins) */
	int indexing;	 /* walking the table: the idle handle runs */
	size_t cursor;	 /* that walk's (dl_locktab_walk) */
	uint32_t next;	 /* the first bucket not yet sent */
	int last_sent;	 /* the call with the last bucket is sent */
	size_t inflight; /* sent, not answered */
};

/* A subscription to one Sentinel's events (store_find.c). */
struct dl_watch {
	struct dl_store *st;
	int i;			/* its index in the configuration */
	redisAsyncContext *c;	/* subscribed, or connecting; NULL */
	void *resolving;	/* a uv_getaddrinfo under way, or NULL */
	uint64_t retry_at_ms;	/* uv_now: next attempt when c is NULL */
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
	int synced;	/* Redis holds the table: skip a re-sync */
	struct resync resync; /* SYNCING: the chunks not yet answered */
	char fence[24]; /* this link's writer fence (decimal) */
	uint64_t token_mark; /* the token mark sent on this link (0: none yet;
				store_batch.c) */
	uint64_t link_since_ms; /* when the link entered its state */
	int opening; /* the first link after a take-over: dl_store_opening */
	uint64_t retry_at_ms;	/* DOWN: next connect attempt */
	uint64_t backoff_ms;
	uint64_t last_reply_ms;
	size_t synced_locks;
	struct batch *head, *tail; /* awaited replies, oldest first */

	uv_timer_t timer; /* DL_STORE_TICK_MS: reconnects, timeouts, pings */
	int timer_on;	  /* both timers are initialised */
	uv_timer_t lazy;  /* DL_STORE_LAZY_MS: lazy writes wait no longer */
	uv_idle_t walk;	  /* a re-sync's steps of indexing the table */
	int lazy_on;	  /* it runs */
	int lazy_due;	  /* it ran out: write every dirty lock */
	int handles_open; /* closing: handles not yet closed */
	int write_due;	  /* hiredis has bytes to write (dl_store_push) */
	void (*stop_done)(void *arg);
	void *stop_arg;

	struct wbatch wb;  /* scratch: the batch being built */
	struct dl_buf val; /* scratch: a record */
	char *token_key;   /* <prefix>token */
	char *fence_key;   /* <prefix>fence */
	char *leader_key;  /* <prefix>leader */
	char *gen_key;	   /* <prefix>gen: the write generation (seen.h) */
	char *closed_key;  /* <prefix>closed: no grants while it lives
			      (store_lead.c) */
	char *cluster_key; /* <prefix>cluster: the id (store_cluster.c) */
	int cluster_absent; /* Redis held no id at the last read */
	char *rec_keys;	   /* <prefix>rec:0 NUL <prefix>rec:1 NUL ...: the
			      buckets of layout 2 (dl__rec_key) */
	uint32_t rec_off[DL_STORE_BUCKETS + 1]; /* bucket b's key at
						   rec_keys + rec_off[b] */
	/* Layout 1, read only to migrate from it (store_load.c). */
	char *names_key;   /* <prefix>locks: its marker */
	char *lock_prefix; /* <prefix>lock: */
	size_t lock_prefix_len;
	struct dl_store_stats st;

	/* The leadership (store_lead.c). */
	int active; /* this daemon is the active one: it may write */
	char node[DL_NODE_ID_MAX + 1];
	char self_addr[DL_ADVERTISE_MAX + 1];
	char lease_arg[24];	 /* leader_lease in ms, decimal */
	char client_name[8 + DL_NODE_ID_MAX + 1]; /* dlockd:<node> */
	char instance[17]; /* random, this process's: in the record */
	struct dl_leader leader; /* the active as last seen (or this one) */
	struct dl_seen seen;	 /* what Redis was seen to hold (seen.h) */
	char seen_arg[3][24];	 /* its epoch, gen, and max_ttl: for the
				    leadership function's arguments */
	uint64_t went_back;	 /* times Redis was found behind it */
	uint64_t lead_next_ms;	 /* next renewal (active) or look (standby) */
	int lead_busy;		 /* a renewal or look awaits its reply */
	uint64_t lapse_wait_until; /* mono: a standby waits before taking
				      over a Redis that went back */
	int replicas_short;	 /* a WAIT fell short: changes refused */
	uint64_t lead_sent_ms;	 /* when the last take or look was sent */
	int stopping;		 /* dl_store_stop() called: no reconnects */

	/* Finding the primary (store_find.c). */
	unsigned find_gen;	/* the current connection attempt */
	void *resolving;	/* a uv_getaddrinfo under way, or NULL */
	redisAsyncContext *sac; /* asking a Sentinel */
	struct dl_watch watch[DL_SENTINELS_MAX]; /* one per Sentinel */
	uint64_t failover_hold_until; /* uv_now ms: no link before it */
	int durability;		      /* enum dl_durability, last read */
	char evict_policy[24];	      /* maxmemory-policy, last read */
	uint64_t config_next_ms;      /* next dl__config_check (mono) */
	char aof_info[32];	      /* the link's INFO persistence, cut */
	int sentinel_i;		/* the Sentinel to ask next */
	int sentinel_tries;	/* asked in this round */
	char sentinel_ip[64];	/* the last one that answered */
	int sentinel_port;
	char primary_host[256]; /* the primary, as named (logs) */
	int primary_port;
};

/* ---- store_durable.c: Redis's persistence ---- */

enum dl_durability {
	DL_DUR_UNKNOWN,	 /* not read yet */
	DL_DUR_NONE,	 /* no AOF: a restart loses every lease */
	DL_DUR_AOF,	 /* AOF, fsync policy unknown */
	DL_DUR_OS,	 /* appendfsync no */
	DL_DUR_EVERYSEC, /* appendfsync everysec */
	DL_DUR_ALWAYS,	 /* appendfsync always */
};

/* The level from INFO persistence's text and CONFIG GET appendfsync's
 * reply (NULL or an error: unknown policy). */
int dl__durability_of(const char *info, const redisReply *fsync);
/* Record it (logged when it changes). DL_EBADARG with why when the daemon
 * must not serve on it (no AOF, not allowed), DL_EUNAVAILABLE when it is
 * not known yet (Redis loading): try again. */
int dl__durability_check(struct dl_store *st, int d, char *why, size_t len);
/* The value of `name` in a CONFIG GET reply, or NULL. */
const char *dl__config_value(const redisReply *r, const char *name);
/* maxmemory-policy in a CONFIG GET reply: DL_EBADARG with why when it may
 * evict keys and allow_evicting_redis is not set (logged when it
 * changes); 0 otherwise, or when the reply does not say. */
int dl__eviction_check(struct dl_store *st, const redisReply *config,
		       char *why, size_t len);
/* The running link's check (CONFIG GET appendonly maxmemory-policy, every
 * DL_STORE_CONFIG_MS): AOF turned off or an evicting policy, refused as
 * at a connection. */
int dl__config_check(struct dl_store *st, const redisReply *config,
		     char *why, size_t len);

/* ---- store.c, for store_find.c ---- */

/* Lose the link (see store.c). */
void dl__link_fail(struct dl_store *st, const char *why);
/* Connect to ip:port (NULL: the unix socket) and start the handshake. */
void dl__link_open(struct dl_store *st, const char *ip, int port);

/* ---- store.c, for store_resync.c ---- */

/* Send a command whose reply ends a batch of `kind` (store.c). 0, or
 * DL_ENOMEM / DL_EUNAVAILABLE: the link is to be failed. */
int dl__batch_send(struct dl_store *st, enum batch_kind kind, uint64_t epoch,
		   int argc, const char **argv, const size_t *lens);
/* min_replicas_ack: the WAIT after a batch. */
int dl__send_wait(struct dl_store *st, enum batch_kind kind, uint64_t epoch);
/* The link is up: changes are accepted, the epochs so far committed. */
void dl__link_up(struct dl_store *st, const char *how);

/* ---- store_resync.c: the re-sync after a lost link ---- */

/* Begin one (the take answered on a new link): pin and index the table,
 * then send the calls. */
void dl__resync_start(struct dl_store *st);
/* Send the next calls, DL_STORE_RESYNC_WINDOW in flight. 0 or an error:
 * the link is to be failed. */
int dl__resync_pump(struct dl_store *st);
/* Every call is answered: the link comes up. */
void dl__resynced(struct dl_store *st);
/* End it (link lost, stopped, or done): the index goes, the table is
 * unpinned. */
void dl__resync_free(struct dl_store *st);

/* ---- store_find.c: finding the primary ---- */

/* Resolve, ask Sentinel, then dl__link_open() (or dl__link_fail()). */
void dl__find_primary(struct dl_store *st);
/* Abandon the attempt under way (a link failure). */
void dl__find_cancel(struct dl_store *st);
/* Subscribe to every Sentinel's failover announcements (Sentinel only;
 * idempotent, call it on every tick: lost subscriptions are made again). */
void dl__watch_start(struct dl_store *st);
/* 0 while a failover announced by a Sentinel is being waited out. */
int dl__watch_allows_link(struct dl_store *st);
/* Everything, at a stop. */
void dl__find_stop(struct dl_store *st);
/* Blocking: the primary's host and port (the loader). */
int dl__find_primary_sync(struct dl_store *st, char *host, size_t hostlen,
			  int *port, char *err, size_t errlen);

/* ---- store_lead.c: the leadership ---- */

enum lead_mode { LEAD_LOOK, LEAD_RENEW, LEAD_TAKE, LEAD_START, LEAD_RESIGN };

struct lead_reply {
	int ok;		/* taken or renewed (else st->leader is the holder) */
	int behind;	/* Redis holds less than st->seen (seen.h) */
	int lagged;	/* renew: Redis went back under this daemon (its
			   record or fence lost, nobody else took since):
			   take it again with the table kept (behind is
			   set too) */
	uint64_t epoch; /* ok: this daemon's epoch, the fence */
	int kept;	/* take: nobody else wrote since `mine` */
	int64_t pttl;	/* not ok: the holder's lease left, ms (< 0: none) */
	uint64_t gen;	/* Redis's write generation */
	int64_t closed_ms; /* no grants for this long (P closed), or <= 0 */
	uint64_t mark;	   /* the stored token mark (0: none) */
	uint64_t saw_epoch, saw_gen; /* st->seen before this reply */
};

#define LEAD_ARGC 18 /* FCALL, its name, numkeys, 5 keys, 10 arguments */
/* Node id and address of this daemon (config, or derived). */
void dl__lead_identity(struct dl_store *st);
/* The FCALL of the leadership function in `mode`, for the fence `mine`
 * ("<epoch>/2"; NULL or "" when none); LEAD_ARGC arguments. */
int dl__lead_argv(struct dl_store *st, enum lead_mode mode, const char *mine,
		  const char **argv, size_t *lens);
/* Read its reply (sent at sent_ms) into `out` and st->leader. DL_EPROTO
 * if it is not one. */
int dl__lead_reply(struct dl_store *st, const redisReply *r, uint64_t sent_ms,
		   struct lead_reply *out);
/* Until when a renewal (or take) sent at sent_ms confirms leadership. */
uint64_t dl__lead_until(const struct dl_store *st, uint64_t sent_ms);
/* The writer fence of `epoch`: "<epoch>/" DL_STORE_LAYOUT. */
void dl__fence_format(char *buf, size_t len, uint64_t epoch);
/* "node N at A (epoch E, lease ends in T ms)" or "nobody". */
int dl__lead_describe(const struct dl_store *st, char *buf, size_t len);
/* What a take (ok) learned besides the leadership: Redis went back
 * (logged, counted), grants closed (the closed hook), and for a take that
 * kept the table, the stored token mark to go on above. DL_EBADARG with
 * why when the mark or the epoch cannot be trusted (dl__plausible): the
 * daemon must not serve on them. */
int dl__lead_took(struct dl_store *st, const struct lead_reply *lr,
		  char *why, size_t len);

/* ---- store_batch.c: the write path shared by the link and the loader ---- */

/* The Redis function library that applies every write (FUNCTION LOAD). */
extern const char dl__store_library[];
#define DL_STORE_LIBRARY    "dlock_v8"
#define DL_STORE_APPLY_FN   "dlock_apply_v8"
#define DL_STORE_REPLACE_FN "dlock_replace_v8"
#define DL_STORE_LEAD_FN    "dlock_lead_v8"

/* The store layout this build writes (store.c): its number ends the
 * writer fence, "<epoch>/2" (store_lead.c says why). */
#define DL_STORE_LAYOUT "2"

/* How far ahead of the last token issued the stored token mark is set
 * (store_batch.c): a batch writes the mark only when a grant passes it,
 * once per this many grants. A restart may skip up to this many tokens,
 * a millisecond's worth of dl_token_floor()'s time floor. */
#define DL_TOKEN_RESERVE 1000000

/* What Redis's counters may say, read not trusted (dl__plausible): a token
 * mark more than this far ahead of the clock's floor (unix ms *
 * DL_TOKEN_PER_MS) is not one a daemon wrote -- a daemon's clock that far
 * ahead is a fault of its own -- but a SET of a tenant that would exhaust
 * the token space (2^64 is the year 2554 of the floor). */
#define DL_TOKEN_AHEAD_MAX_MS (24ULL * 3600 * 1000)
/* An epoch is raised by one per take: more than DL_EPOCH_JUMP_MAX above
 * the largest this daemon saw is not one a take made. Nor is one above
 * DL_EPOCH_MAX, which the leadership function refuses outright: its Lua
 * numbers print exactly to 14 digits only (tostring of 10^14 is
 * "1e+14"), and a fence written that way would be no fence at all. A
 * plain literal: the function's source uses it too. */
#define DL_EPOCH_JUMP_MAX 1000000ULL
#define DL_EPOCH_MAX	  10000000000000

/* The token mark and epoch Redis holds, before they are used: 0, or
 * DL_EBADARG with why (logged) when one could not have been written by a
 * daemon and [persistence] accept_token_jump is not set. */
int dl__plausible(struct dl_store *st, uint64_t mark, uint64_t epoch,
		  char *why, size_t len);

/* Bucket b's key, <prefix>rec:<b> (NUL-terminated), and its length. */
const char *dl__rec_key(const struct dl_store *st, uint32_t b, size_t *len);

void dl__wb_reset(struct wbatch *wb);
void dl__wb_free(struct wbatch *wb);
/* Add the write of lock `name` in its present state, for the apply
 * function: a delete when lk is NULL or has neither holders nor waiters,
 * else its record. A batch names each lock at most once (the functions
 * group writes by bucket). Returns 0 or DL_ENOMEM. */
int dl__wb_lock(struct dl_store *st, struct dl_str name,
		const struct dl_lock *lk, int64_t wall_off);
/* The FCALL of what was added, checked against `fence`; when the table's
 * last token has passed st->token_mark (0 after a link change) it also
 * raises the stored token mark DL_TOKEN_RESERVE past it. The arrays live
 * in st->wb until its next change. */
int dl__wb_argv(struct dl_store *st, const char *fence, int *argc,
		const char ***argv, const size_t **lens);

/* The replace function's items: a whole bucket (every entry in the index),
 * or another key to delete (`key` copied). */
int dl__wb_bucket(struct dl_store *st, const struct bucket_index *bi,
		  uint32_t b, int64_t wall_off);
int dl__wb_key(struct dl_store *st, const char *key, size_t len);
/* Add whole buckets from *b on until the batch holds
 * DL_STORE_RESYNC_CHUNK records or every bucket is in; *b moves past
 * them. */
int dl__wb_buckets(struct dl_store *st, const struct bucket_index *bi,
		   uint32_t *b, int64_t wall_off);
/* The FCALL of the replace function for what was added (dl__wb_argv's
 * rules for the fence and the token mark). */
int dl__wb_replace_argv(struct dl_store *st, const char *fence, int *argc,
			const char ***argv, const size_t **lens);

/* Group the table's locks that have holders or waiters by bucket, in one
 * go. 0 or DL_ENOMEM; free with dl__bucket_index_free() either way. */
int dl__bucket_index(struct dl_store *st, struct bucket_index *bi);
/* The same a lock at a time, into an index that starts zeroed (a
 * dl_lock_cb, arg the index; a failure sets bi->err). */
void dl__bucket_index_add(const struct dl_lock *lk, void *arg);
void dl__bucket_index_free(struct bucket_index *bi);

/* ---- store_load.c and store_migrate.c: one attempt of dl_store_load() ---- */

struct layout1; /* store_migrate.c: the names of a Redis of layout 1 */

struct load_ctx {
	struct dl_store *st;
	redisContext *c;
	struct dl_str name; /* the lock being restored */
	uint32_t bucket;    /* layout 2: its bucket (for the log) */
	uint64_t now_mono, now_wall;
	int changed;	    /* the current lock lost items: write it back */
	int holders;	    /* check pass: H lines seen ... */
	int holders_shared; /* ... and their mode */
	const char *why;    /* check pass: why the record is unreadable */
	size_t leases, waiters, dropped, unreadable, ignored;
	uint64_t max_token;
	struct dl_buf changed_names; /* NUL-separated */
	struct dl_buf bad_names;     /* NUL-separated: to quarantine */
	char *err;
	size_t errlen;
	const char *fence;  /* the one taken */
	int64_t closed_ms;  /* the take found grants closed (Redis went
			       back): its records are not loaded */
	uint64_t lead_sent; /* when the leadership was last confirmed */
	struct layout1 *l1; /* Redis is in layout 1: its names, to migrate */
};

/* Say why the attempt fails (into x->err); returns rc. */
int dl__load_err(struct load_ctx *x, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A blocking command; NULL with x->err and *rc set when there is no
 * usable reply (`fatal_errors`: an error reply other than "not ready" is
 * a configuration problem, DL_EBADARG; else DL_EUNAVAILABLE). */
redisReply *dl__load_run(struct load_ctx *x, int *rc, int fatal_errors,
			 int argc, const char **argv, const size_t *lens);
/* Renew the leadership if a third of its lease has passed since it was
 * last confirmed (nothing may be in flight on x->c). */
int dl__load_keep_lead(struct load_ctx *x);
/* 1 when dl__load_keep_lead() would renew. */
int dl__load_lead_due(const struct load_ctx *x);
/* A loader restores names it knows ahead: the lock table's bucket of the
 * name DL__LOAD_PREFETCH records ahead is prefetched, and the first node
 * of the one half as far (dl_locktab_prefetch). Either name may be
 * DL_STR_NULL (past the end, or not a name). */
#define DL__LOAD_PREFETCH 16
void dl__load_prefetch(const struct load_ctx *x, struct dl_str far,
		       struct dl_str near);
/* Restore the record `val` of lock `name` (checks, quarantine, waits
 * ended: see store_load.c). */
int dl__load_record(struct load_ctx *x, struct dl_str name,
		    const redisReply *val);
/* A record that cannot be read: logged, its lock held after the load. */
int dl__load_unreadable(struct load_ctx *x, struct dl_str name,
			const char *text, size_t len, const char *why);
/* Append name and a NUL. */
int dl__load_add_name(struct dl_buf *b, struct dl_str name);

/* store_migrate.c. Is Redis in layout 1 (its marker, P locks, exists)?
 * Then x->l1 is set, and freed by dl__layout1_free(). */
int dl__layout1_find(struct load_ctx *x);
/* Restore every lock of layout 1 into the table (names, then MGETs). */
int dl__layout1_load(struct load_ctx *x);
/* Write the table into layout 2 and retire layout 1 (before serving). */
int dl__layout1_migrate(struct load_ctx *x);
void dl__layout1_free(struct load_ctx *x);

/* unix ms - monotonic ms, to write deadlines that mean something to the
 * next process (record.h). */
int64_t dl__store_wall_offset(void);

/* The first error in a reply (arrays searched), or NULL. */
const char *dl__store_reply_error(const redisReply *r);
/* 1 if an error reply means "Redis is not ready", to wait for: loading,
 * busy with a script, a replica, a master without its replicas. */
int dl__store_not_ready(const char *err);

/* ---- store_cluster.c: the cluster id ---- */

/* persist = none: a random id for this process. 0 or an error. */
int dl__cluster_init(struct dl_store *st);
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
