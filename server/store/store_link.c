/* SPDX-License-Identifier: MIT */
/*
 * store_link.c -- the async link to Redis: the write batches, and the
 * state machine that brings the link up (store.c owns the timer that
 * times it out, and the store's life cycle).
 *
 * Writes. Once per loop iteration dl_store_flush() drains the lock table's
 * dirty set into one batch: an FCALL of dlock_apply_v11 with each lock in
 * its final state, and the token mark when due (store_batch.c). Its reply
 * commits the epoch. Each batch is one round trip, and only one is in
 * flight: what changes meanwhile waits for its reply and goes as the next
 * batch (group commit), so a busy daemon sends fewer, larger batches.
 * Changes no reply waits for are written lazily (see dl_store_flush).
 *
 * The link. A state machine over one hiredis async context on the
 * daemon's loop (hiredis's libuv adapter):
 *
 *   DOWN --connect--> CONNECTING --fence taken--> SYNCING --> UP
 *     ^                                                        |
 *     +-- error, not ready, fenced, or a reply late by redis_timeout
 *
 * CONNECTING sends AUTH, SELECT, FUNCTION LOAD REPLACE (the library is
 * the daemon's, so a Redis restarted empty or upgraded gets it back) and
 * the leadership's take, which raises P fence. SYNCING rewrites the full
 * state: every bucket is replaced whole (dlock_replace_v11: DEL, then HSET
 * of the table's locks in it; a bucket without locks is deleted), a few
 * buckets per call, so that a lock of the table is never missing from
 * Redis, not even between two calls, and a record of a lock that ended
 * while Redis was away goes with its bucket. The table is indexed by
 * bucket when the take is answered; each call is formatted as it goes
 * (store_resync.c says why that is safe), DL_STORE_RESYNC_WINDOW of them
 * in flight, with the leadership renewed between
 * them (a re-sync of 10^6 locks outlasts the leadership's margin: queued
 * behind it, a renewal came too late, the link was dropped as not
 * leading, and the re-sync began again, forever). The last call's reply
 * commits every epoch closed so far (their batches may have been lost,
 * the rewrite covers them). While not UP the dirty set is not drained, so
 * nothing that changes during the rewrite is missed: it is written once
 * the link is up. The first connection after dl_store_load() skips the
 * rewrite: Redis holds what was loaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/clock.h"
#include "server/log.h"
#include "server/store/store_private.h"
#include "server/store/store_uv.h"

/* ---- the async link ----------------------------------------------------- */

/* Every epoch up to `epoch` is in Redis. Its replies go out once the
 * lease horizon they need is durable outside Redis too (store_horizon.c):
 * else the gate keeps the epoch and commits it when it is. */
static void commit(struct dl_store *st, uint64_t epoch)
{
	if (epoch <= st->committed || !dl__hz_gate(st, epoch))
		return;
	st->committed = epoch;
	st->hooks.committed(epoch, st->hooks.ctx);
}

void dl__commit(struct dl_store *st, uint64_t epoch)
{
	commit(st, epoch);
}

static void set_link(struct dl_store *st, enum link l)
{
	int was_up = st->link == LINK_UP;

	st->link = l;
	st->link_since_ms = uv_now(st->loop);
	if (st->lead.active && was_up != (l == LINK_UP))
		st->hooks.availability(l == LINK_UP, st->hooks.ctx);
	if (st->opening && (l == LINK_UP || l == LINK_DOWN)) {
		st->opening = 0;
		if (st->hooks.opened)
			st->hooks.opened(st->hooks.ctx);
	}
}

/* Lose the link: refuse changes, free the context, retry with backoff.
 * Safe inside hiredis callbacks (redisAsyncFree defers itself there). */
void dl__link_fail(struct dl_store *st, const char *why)
{
	redisAsyncContext *ac = st->ac;

	if (st->link == LINK_DOWN)
		return;
	dl__find_cancel(st);
	if (st->link == LINK_UP && st->lead.active)
		dl_warn("redis: %s; persistence down, refusing changes", why);
	else
		dl_info("redis: %s", why);
	st->ac = NULL;
	st->synced = 0;
	dl__resync_free(st);
	st->writes.token_mark =
		0; /* its batches may be lost: see store_batch.c */
	st->lead.busy = 0;
	dl__attest_reset(st);
	dl__hz_link_lost(st);
	st->replicas_short = 0; /* the next link re-syncs, and WAITs */
	st->st.failures++;
	set_link(st, LINK_DOWN);
	st->retry_at_ms = uv_now(st->loop) + st->backoff_ms;
	st->backoff_ms = st->backoff_ms * 2 > DL_STORE_BACKOFF_MAX_MS
				 ? DL_STORE_BACKOFF_MAX_MS
				 : st->backoff_ms * 2;
	/* An active whose leadership still holds tries again soon: back
	 * before its lease lapses it keeps its table and its clients (found
	 * from outside: Redis down 2 s, the backoff took the next try past
	 * the lapse, and a loss found then closed grants for a day) */
	if (st->lead.active && dl_mono_ms() < st->lead.leader.until_ms &&
	    st->backoff_ms > DL_STORE_BACKOFF_LEADING_MS)
		st->backoff_ms = DL_STORE_BACKOFF_LEADING_MS;
	if (ac)
		redisAsyncFree(ac); /* pending callbacks get NULL replies */
}

/* A reply said no: say why in the terms an operator can act on. */
static void link_refused(struct dl_store *st, const char *what, const char *err)
{
	char why[256];

	if (strncmp(err, "FENCED", 6) == 0)
		dl_warn("redis: %s refused: another writer took the store over (%s)",
			what, err);
	snprintf(why, sizeof(why), "%s failed: %s%s", what, err,
		 dl__store_not_ready(err) ? " (not ready, waiting)" : "");
	dl__link_fail(st, why);
}

static void on_batch(redisAsyncContext *ac, void *reply, void *priv);

/* A batch whose command hiredis has queued: linked in, in send order. */
static void batch_link(struct dl_store *st, struct batch *b)
{
	if (st->tail)
		st->tail->next = b;
	else
		st->head = b;
	st->tail = b;
	st->st.backlog++;
}

static struct batch *batch_new(struct dl_store *st, enum batch_kind kind,
			       uint64_t epoch)
{
	struct batch *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->st = st;
	b->kind = kind;
	b->epoch = epoch;
	b->sent_us = dl_mono_us();
	b->sent_ms = dl_mono_ms();
	return b;
}

/* Send a command whose reply ends a batch, and only once it is queued
 * link the batch in (hiredis registers no callback for a command it
 * refuses, so a refused batch is simply freed). */
int dl__batch_send(struct dl_store *st, enum batch_kind kind, uint64_t epoch,
		   int argc, const char **argv, const size_t *lens)
{
	struct batch *b = batch_new(st, kind, epoch);

	if (!b)
		return DL_ENOMEM;
	if (redisAsyncCommandArgv(st->ac, on_batch, b, argc, argv, lens) !=
	    REDIS_OK) {
		free(b);
		return DL_EUNAVAILABLE;
	}
	batch_link(st, b);
	return 0;
}

/* The batch built in st->writes.wb, as an FCALL ending a batch of `kind`. */
static int wb_send(struct dl_store *st, enum batch_kind kind, uint64_t epoch)
{
	const char **argv;
	const size_t *lens;
	int argc, r;

	r = dl__wb_argv(st, st->fence, &argc, &argv, &lens);
	if (r == 0)
		r = dl__batch_send(st, kind, epoch, argc, argv, lens);
	if (r)
		st->writes.token_mark =
			0; /* not sent: the next batch carries one */
	dl__wb_reset(&st->writes.wb);
	return r;
}

/* The reply for the oldest batch arrived (or the link died: r NULL). */
static void batch_pop(struct dl_store *st, struct batch *b)
{
	uint64_t us;

	/* Replies come in send order, so b is the head. */
	st->head = b->next;
	if (!st->head)
		st->tail = NULL;
	st->st.backlog--;
	us = dl_mono_us() - b->sent_us;
	st->st.latency_us_sum += us;
	if (us > st->st.latency_us_max)
		st->st.latency_us_max = us;
	st->st.round_trips++;
	st->last_reply_ms = uv_now(st->loop);
	free(b);
}

void dl__link_up(struct dl_store *st, const char *how)
{
	dl__sentinel_subscribe(st);
	dl_notice("redis: connected%s", how);
	st->synced = 1;
	st->backoff_ms = DL_STORE_BACKOFF_MIN_MS;
	set_link(st, LINK_UP);
	/* Every epoch closed so far is in Redis: the load or the re-sync
	 * wrote the whole table. */
	commit(st, st->epoch - 1);
	dl__hz_took_on_run(st);
}

/* min_replicas_ack: WAIT <n> <half of redis_timeout> after a batch. */
int dl__send_wait(struct dl_store *st, enum batch_kind kind, uint64_t epoch)
{
	char n[24], ms[24];
	const char *argv[3] = {"WAIT", n, ms};
	size_t lens[3] = {4, 0, 0};

	lens[1] = dl_u64_to_dec(st->cfg->min_replicas_ack, n);
	lens[2] = dl_u64_to_dec(st->cfg->redis_timeout_ms / 2 + 1, ms);
	st->st.replica_waits++;
	return dl__batch_send(st, kind, epoch, 3, argv, lens);
}

/* The replicas' answer. Enough: the batch (and all before it) is durable.
 * Too few: its replies stay held -- an applied grant is never turned into
 * an error, its client could not know the outcome -- and changes are
 * refused until a WAIT succeeds; the link stays, and asks again. */
static void on_wait(struct dl_store *st, enum batch_kind kind, uint64_t epoch,
		    const redisReply *r)
{
	uint64_t want = st->cfg->min_replicas_ack;

	if (r->type == REDIS_REPLY_INTEGER && (uint64_t)r->integer >= want) {
		if (st->replicas_short)
			dl_notice(
				"redis: %lld replicas acknowledge again; accepting changes",
				r->integer);
		st->replicas_short = 0;
		if (kind == BATCH_RESYNC_WAIT)
			dl__resynced(st);
		else
			commit(st, epoch);
		return;
	}
	st->st.replica_shortfalls++;
	if (!st->replicas_short)
		dl_warn("redis: only %lld of %llu replicas acknowledged a write; holding its replies and refusing changes until they do",
			r->type == REDIS_REPLY_INTEGER ? r->integer : -1LL,
			(unsigned long long)want);
	st->replicas_short = 1;
	if (dl__send_wait(st, kind, epoch))
		dl__link_fail(st, "cannot queue a WAIT");
}

/* The reply that ends a write of the partition's record: the call's, or
 * the WAIT's behind it (store_part.c). */
static int part_ok(const struct dl_store *st, const redisAsyncContext *ac,
		   const redisReply *r)
{
	if (!r || ac != st->ac || dl__store_reply_error(r))
		return 0;
	if (!st->cfg->min_replicas_ack)
		return 1;
	return r->type == REDIS_REPLY_INTEGER &&
	       (uint64_t)r->integer >= st->cfg->min_replicas_ack;
}

static void on_batch(redisAsyncContext *ac, void *reply, void *priv)
{
	struct batch *b = priv;
	struct dl_store *st = b->st;
	enum batch_kind kind = b->kind;
	uint64_t epoch = b->epoch, sent_ms = b->sent_ms;
	const char *err;
	char why[256];

	batch_pop(st, b);
	if (kind == BATCH_PART && epoch != PART_WAITED)
		dl__part_reply(st, part_ok(st, ac, reply));
	else if (kind == BATCH_PART &&
		 (!reply || ac != st->ac || dl__store_reply_error(reply)))
		/* the call failed, or its link did (the WAIT behind it may
		 * never have been queued: found in review, the record's
		 * writes then stayed "under way" for good); the WAIT's own
		 * answer, if it comes, finds no write waiting */
		dl__part_reply(st, 0);
	if (!reply || ac != st->ac)
		return; /* the link died; link_fail has run or will */
	if (kind == BATCH_CONFIG) {
		/* an error: CONFIG renamed away, the settings unknown */
		if (!dl__store_reply_error(reply) &&
		    dl__config_check(st, reply, why, sizeof(why)) != 0)
			dl__link_fail(st, why);
		return;
	}
	if ((err = dl__store_reply_error(reply)) != NULL) {
		link_refused(st,
			     kind == BATCH_PING ? "PING"
			     : kind == BATCH_RENEW || kind == BATCH_LOOK
				     ? "leadership"
				     : "write",
			     err);
		return;
	}
	if ((kind == BATCH_EPOCH || kind == BATCH_RESYNC ||
	     kind == BATCH_RESYNC_PART ||
	     (kind == BATCH_PART &&
	      (epoch == PART_WAITED || !st->cfg->min_replicas_ack))) &&
	    ((redisReply *)reply)->type == REDIS_REPLY_INTEGER)
		dl_seen_note(&st->lead.seen, 0,
			     (uint64_t)((redisReply *)reply)->integer);
	if (kind == BATCH_RESYNC_PART) {
		st->resync.inflight--;
		if (dl__resync_pump(st))
			dl__link_fail(st, "re-sync failed");
	} else if (kind == BATCH_RENEW || kind == BATCH_LOOK) {
		dl__lead_on_reply(st, kind, reply, sent_ms);
	} else if (kind == BATCH_WAIT || kind == BATCH_RESYNC_WAIT) {
		on_wait(st, kind, epoch, reply);
	} else if (st->cfg->min_replicas_ack &&
		   (kind == BATCH_RESYNC || kind == BATCH_EPOCH)) {
		/* Durable when the replicas have it too: the WAIT that
		 * follows in the pipeline says so. */
	} else if (kind == BATCH_RESYNC) {
		dl__resynced(st);
	} else if (kind == BATCH_EPOCH) {
		commit(st, epoch);
	}
}

static int send_argv(struct dl_store *st, redisCallbackFn *fn, void *priv,
		     int argc, const char **argv, const size_t *lens)
{
	if (redisAsyncCommandArgv(st->ac, fn, priv, argc, argv, lens) !=
	    REDIS_OK)
		return DL_EUNAVAILABLE;
	return 0;
}

struct drain_ctx {
	struct dl_store *st;
	int64_t off;
	int err;
};

static void drain_cb(const struct dl_lock *lk, void *arg)
{
	struct drain_ctx *x = arg;

	if (x->err)
		return;
	x->err = dl__wb_lock(x->st, dl_lock_name(lk), lk, x->off);
	x->st->st.writes++;
}

static void on_lazy(uv_timer_t *t)
{
	struct dl_store *st = t->data;

	st->lazy_on = 0;
	st->lazy_due = 1;
}

/*
 * Lazy writes. A change that no held reply waits for (a release under
 * durable_release = no, an expiry, a waiter joining or leaving) is not
 * worth a batch of its own: it stays dirty for up to DL_STORE_LAZY_MS and
 * goes with the next batch that has to go anyway -- or alone when that
 * time is up. A lock released and taken again meanwhile is then written
 * once, in its final state, instead of a delete and a set: under load
 * that halves what Redis does per lock+unlock pair. What a lazy write
 * risks is documented with durable_release: a crash before it is sent
 * leaves the lock busy until the lease's TTL after the restart, never two
 * holders.
 */
static void memory_mark(struct dl_store *st)
{
	struct dl_seen *seen = &st->lead.seen;
	uint64_t last = dl_locktab_last_token(st->tab);

	if (!seen->path[0] || last <= seen->v.mark)
		return;
	dl_seen_note_mark(seen, last > UINT64_MAX - DL_TOKEN_RESERVE
					? UINT64_MAX
					: last + DL_TOKEN_RESERVE);
	(void)dl_seen_save(seen, dl_mono_ms(), 1);
}

void dl_store_flush(struct dl_store *st, int all)
{
	struct drain_ctx x = {st, dl__store_wall_offset(), 0};
	size_t dirty, urgent;

	if (!st->redis) {
		/* Memory only: what is drained is as durable as it gets, but
		 * for the token mark, which the state file keeps ahead of
		 * every token told, so that a restart after the clock was set
		 * back goes on above it (seen.h). */
		dl_locktab_drain_dirty(st->tab, NULL, NULL);
		memory_mark(st);
		commit(st, st->epoch++);
		return;
	}
	dirty = dl_locktab_dirty_count(st->tab);
	if (st->link != LINK_UP || !st->lead.active || dirty == 0)
		goto out;
	/* Group commit: while a batch is in flight the next one grows. */
	if (st->st.backlog >= DL_STORE_INFLIGHT_MAX)
		goto out;
	urgent = dl_locktab_urgent_count(st->tab);
	if (all || st->lazy_due || dirty - urgent >= DL_STORE_LAZY_MAX)
		dl_locktab_drain_dirty(st->tab, drain_cb, &x);
	else if (urgent)
		dl_locktab_drain_urgent(st->tab, drain_cb, &x);
	else
		goto lazy;
	st->lazy_due = 0;
	if (x.err || wb_send(st, BATCH_EPOCH, st->epoch) ||
	    (st->cfg->min_replicas_ack &&
	     dl__send_wait(st, BATCH_WAIT, st->epoch))) {
		/* The drained changes are lost with the link; the re-sync
		 * after reconnecting rewrites everything. */
		dl__wb_reset(&st->writes.wb);
		dl__link_fail(st, "cannot queue a write");
		return;
	}
	st->st.batches++;
	st->epoch++;
lazy:
	/* What stays dirty goes within DL_STORE_LAZY_MS, also while urgent
	 * batches keep going without it. */
	if (dl_locktab_dirty_count(st->tab) == 0) {
		if (st->lazy_on) {
			st->lazy_on = 0;
			uv_timer_stop(&st->lazy);
		}
	} else if (!st->lazy_on) {
		st->lazy_on = 1;
		uv_timer_start(&st->lazy, on_lazy, DL_STORE_LAZY_MS, 0);
	}
out:
	dl_store_push(st);
}

/* ---- connecting and re-syncing ---------------------------------------- */

static void on_handshake(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	const char *err;

	if (!reply || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if ((err = dl__store_reply_error(reply)) != NULL)
		link_refused(st, "handshake", err);
}

static void on_role(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	redisReply *r = reply;
	char why[320];

	if (!r || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if (r->type == REDIS_REPLY_ERROR) {
		link_refused(st, "ROLE", r->str);
		return;
	}
	if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, "master") == 0)
		return;
	snprintf(why, sizeof(why), "%s:%d is not a primary (ROLE %s)",
		 st->find.primary_host, st->find.primary_port,
		 r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
				 r->element[0]->type == REDIS_REPLY_STRING
			 ? r->element[0]->str
			 : "?");
	dl__link_fail(st, why);
}

/* INFO server persistence replication commandstats, then CONFIG GET appendfsync
 * (store_durable.c): kept until the second reply decides; which Redis
 * process this is, and which history (store_horizon.c). */
static void on_info(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	redisReply *r = reply;
	const char *aof;

	if (!r || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if (r->type == REDIS_REPLY_ERROR) {
		link_refused(st, "INFO", r->str);
		return;
	}
	if (r->type == REDIS_REPLY_STRING)
		dl__hz_redis_run(st, dl__run_id_of(r->str),
				 dl__meddled_of(r->str));
	aof = r->type == REDIS_REPLY_STRING ? strstr(r->str, "aof_enabled:")
					    : NULL;
	if (aof && strstr(r->str, "loading:1"))
		aof = NULL; /* not known until it has loaded */
	snprintf(st->dur.aof_info, sizeof(st->dur.aof_info), "%.14s",
		 aof ? aof : "");
}

static int send_rest(struct dl_store *st);

/* The rest of the handshake goes only once Redis is known to persist:
 * sent in the same pipeline, the leadership's take would run on a Redis
 * the daemon then refuses, and raise the epoch behind its back. */
static void on_fsync(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	char why[200];

	if (!reply || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if (dl__durability_check(st,
				 dl__durability_of(st->dur.aof_info[0]
							   ? st->dur.aof_info
							   : NULL,
						   reply),
				 why, sizeof(why)) != 0 ||
	    dl__eviction_check(st, reply, why, sizeof(why)) != 0)
		dl__link_fail(st, why);
	else if (send_rest(st))
		dl__link_fail(st, "cannot queue a command");
}

/* The leadership function answered the handshake: as the active, this
 * connection took the leadership again (a new epoch, which fences every
 * older connection); as a standby, it looked at who holds it. */
static void on_take(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	redisReply *r = reply;
	struct lead_reply lr;
	char who[512];

	if (!r || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if (dl__store_reply_error(r)) {
		link_refused(st, "leadership", dl__store_reply_error(r));
		return;
	}
	dl__attest_reset(st); /* the take presented its proof, if any */
	if (dl__lead_reply(st, st->lead.active ? LEAD_TAKE : LEAD_LOOK, r,
			   st->lead.sent_ms, &lr) != 0) {
		dl__link_fail(st,
			      "leadership: not a reply of " DL_STORE_LEAD_FN);
		return;
	}
	if (!st->lead.active) {
		st->backoff_ms = DL_STORE_BACKOFF_MIN_MS;
		set_link(st, LINK_UP);
		dl__sentinel_subscribe(st);
		dl__lead_describe(st, who, sizeof(who));
		dl_info("redis: connected as a standby; the active daemon is %s",
			who);
		if (!st->lead.leader.epoch && dl__lead_lapse_wait(st, &lr)) {
			/* found by the fault campaign: the look of a new link
			 * took over a Redis restarted from an older copy at
			 * once, and deposed the active that was writing its
			 * table back */
		} else if (!st->lead.leader.epoch) {
			st->lead.next_ms =
				dl_mono_ms() + st->cfg->leader_lease_ms / 3;
			st->hooks.role(DL_STORE_LAPSED, st->hooks.ctx);
		} else {
			st->lead.lapse_wait_until = 0;
			dl__lead_next_look(st, &lr);
		}
		return;
	}
	if (!lr.ok) {
		dl__lead_depose(st, DL_STORE_DEPOSED,
				"another daemon holds it");
		return;
	}
	if (!lr.kept) {
		/* Taken again, but somebody may have written since (or this
		 * daemon's leadership lapsed): the table is stale. */
		if (lr.behind) {
			st->st.went_back++;
			dl_error(
				"redis: WENT BACK: it holds less than this daemon saw (epoch %llu, write generation %llu), and this daemon cannot vouch for its table (its leadership lapsed, or another took over): it loads afresh, and no new lease is granted until every lease granted before may have ended",
				(unsigned long long)lr.saw_epoch,
				(unsigned long long)lr.saw_gen);
		}
		dl__lead_depose(
			st, DL_STORE_STALE,
			"its table is not kept: another daemon may have written meanwhile");
		return;
	}
	if (dl__lead_took(st, &lr, who, sizeof(who))) {
		dl__link_fail(st, who);
		return;
	}
	/* the take (its epoch and this process: lead, leadinst) in the state
	 * file before anything is served under it, as the load's take is: a
	 * kill -9 within the file's save period lost it (seen.h) */
	(void)dl_seen_save(&st->lead.seen, dl_mono_ms(), 1);
	if (dl__cluster_claim(st)) {
		dl__link_fail(st, "cannot queue a command");
		return;
	}
	if (lr.behind)
		st->synced = 0; /* what Redis has is not the table */
	dl__fence_format(st->fence, sizeof(st->fence), lr.epoch);
	st->lead.next_ms = st->lead.sent_ms + st->cfg->leader_lease_ms / 3;
	if (st->synced) {
		dl__link_up(st, "");
		return;
	}
	set_link(st, LINK_SYNCING);
	dl__resync_start(st);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct dl_store *st = ac->data;

	if (ac != st->ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees the context after this callback. */
		st->ac = NULL;
		dl__link_fail(st,
			      ac->errstr[0] ? ac->errstr : "connect failed");
	}
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct dl_store *st = ac->data;

	(void)status;
	if (ac != st->ac)
		return; /* we freed it */
	st->ac = NULL;	/* hiredis frees it */
	dl__link_fail(st, ac->errstr[0] ? ac->errstr : "connection closed");
}

/* Lazy write interest (store_uv.h): what the loop iteration queued goes
 * out now, in one write. */
void dl_store_push(struct dl_store *st)
{
	if (st->ac)
		dl__uv_push(st->ac);
}

/* AUTH, SELECT, the function library, then the leadership (on_take). */
int dl__link_send_lead(struct dl_store *st, enum lead_mode mode,
		       redisCallbackFn *fn)
{
	const char *argv[LEAD_ARGC];
	size_t lens[LEAD_ARGC];
	int argc = dl__lead_argv(st, mode, st->fence, argv, lens);

	st->lead.sent_ms = dl_mono_ms();
	return send_argv(st, fn, st, argc, argv, lens);
}

static int send_handshake(struct dl_store *st)
{
	const struct dl_redis_addr *a = &st->addr;
	const char *argv[5];
	size_t lens[5];
	char db[24];

	if (a->password) {
		int n = 0;

		argv[n] = "AUTH";
		lens[n++] = 4;
		if (a->user) {
			argv[n] = a->user;
			lens[n++] = strlen(a->user);
		}
		argv[n] = a->password;
		lens[n++] = strlen(a->password);
		if (send_argv(st, on_handshake, st, n, argv, lens))
			return DL_EUNAVAILABLE;
	}
	argv[0] = "SELECT";
	argv[1] = db;
	lens[0] = 6;
	lens[1] = dl_u64_to_dec((uint64_t)a->db, db);
	if (send_argv(st, on_handshake, st, 2, argv, lens))
		return DL_EUNAVAILABLE;
	/* A primary, not a replica (that Sentinel may still name). */
	argv[0] = "ROLE";
	lens[0] = 4;
	if (send_argv(st, on_role, st, 1, argv, lens))
		return DL_EUNAVAILABLE;
	/* What a grant acknowledged on this primary survives. */
	argv[0] = "INFO";
	argv[1] = "server";
	argv[2] = "persistence";
	argv[3] = "replication";
	argv[4] = "commandstats";
	lens[0] = 4;
	lens[1] = 6;
	lens[2] = 11;
	lens[3] = 11;
	lens[4] = 12;
	st->dur.aof_info[0] = '\0';
	if (send_argv(st, on_info, st, 5, argv, lens))
		return DL_EUNAVAILABLE;
	argv[0] = "CONFIG";
	argv[1] = "GET";
	argv[2] = "appendfsync";
	argv[3] = "maxmemory-policy";
	lens[0] = 6;
	lens[1] = 3;
	lens[2] = 11;
	lens[3] = 16;
	if (send_argv(st, on_fsync, st, 4, argv, lens))
		return DL_EUNAVAILABLE;
	return 0;
}

/* The cluster id, read before the leadership is taken or looked at
 * (store_cluster.c): the keyspace of another cluster is refused. */
static void on_cluster(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	char why[600];

	if (!reply || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if (dl__store_reply_error(reply)) {
		link_refused(st, "GET cluster", dl__store_reply_error(reply));
		return;
	}
	if (dl__cluster_found(st, reply, why, sizeof(why)))
		dl__link_fail(st,
			      "cluster mismatch: not serving this keyspace");
	else if (dl__attest_begin(st))
		; /* the take waits for the peers (store_attest.c) */
	else if (dl__link_send_lead(st, st->lead.active ? LEAD_TAKE : LEAD_LOOK,
				    on_take))
		dl__link_fail(st, "cannot queue a command");
}

int dl__store_take(struct dl_store *st)
{
	return dl__link_send_lead(st, st->lead.active ? LEAD_TAKE : LEAD_LOOK,
				  on_take);
}

static int send_rest(struct dl_store *st)
{
	const char *argv[4];
	size_t lens[4];

	/* CLIENT LIST tells which daemon a connection is: dlockd:<node>. */
	argv[0] = "CLIENT";
	argv[1] = "SETNAME";
	argv[2] = st->lead.client_name;
	lens[0] = 6;
	lens[1] = 7;
	lens[2] = strlen(st->lead.client_name);
	if (send_argv(st, on_handshake, st, 3, argv, lens))
		return DL_EUNAVAILABLE;
	argv[0] = "FUNCTION";
	argv[1] = "LOAD";
	argv[2] = "REPLACE";
	argv[3] = dl__store_library();
	lens[0] = 8;
	lens[1] = 4;
	lens[2] = 7;
	lens[3] = strlen(argv[3]);
	if (send_argv(st, on_handshake, st, 4, argv, lens))
		return DL_EUNAVAILABLE;
	return dl__cluster_send_get(st, on_cluster);
}

void dl__link_open(struct dl_store *st, const char *ip, int port)
{
	redisAsyncContext *ac;

	ac = ip ? redisAsyncConnect(ip, port)
		: redisAsyncConnectUnix(st->addr.path);
	if (!ac || ac->err) {
		if (ac)
			redisAsyncFree(ac);
		dl__link_fail(st, "cannot create a connection");
		return;
	}
	ac->data = st;
	st->ac = ac;
	st->writes.token_mark = 0;
	if (dl__uv_attach(ac, st->loop, 1) != 0) {
		dl__link_fail(st, "cannot attach to the loop");
		return;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	if (send_handshake(st))
		dl__link_fail(st, "cannot queue a command");
}

/* A new connection: find the primary first (store_find.c). */
void dl__link_connect(struct dl_store *st)
{
	set_link(st, LINK_CONNECTING);
	st->st.reconnects++;
	dl__find_primary(st);
}
