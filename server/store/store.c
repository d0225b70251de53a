/* SPDX-License-Identifier: MIT */
/*
 * store.c -- persistence (see store.h for the epoch model).
 *
 * Key layout 2, under the configured prefix P (default "dlock:"):
 *
 *   P rec:<b>      for b in 0 .. DL_STORE_BUCKETS - 1: a hash, field = a
 *                  lock's name, value = its record (record.h): holders and
 *                  queue. b is the name's bucket (bucket.h: FNV-1a 32 of
 *                  the name, mod 1024). A lock without holders or waiters
 *                  has no field, a bucket without locks no key.
 *   P token        a mark at or above every fencing token issued (a
 *                  decimal string; reserved ahead, see store_batch.c)
 *   P fence        the writer fence, "<epoch>/2" (store_lead.c): the
 *                  connection that raised it last is the only one whose
 *                  writes apply, and daemons of layout 1 are kept out.
 *   P leader       the leadership (store_lead.c).
 *
 * Why buckets. Layout 1 kept one string per lock, P lock:<name>, and the
 * names in a set, P locks; a start-up read the set, then every record by
 * MGET: at 10^6 leases that cost Redis 1.3 s of its own time (SMEMBERS
 * 0.27 s, MGETs 1.0 s; make bench's restart, INFO commandstats), more
 * than the target for the whole restart. 1024 hashes of a thousand fields
 * come back by HGETALL in a fifth of that (store_load.c), need no name
 * set, and are small enough to be rewritten whole at a re-sync. The
 * loader migrates a Redis of layout 1 once (store_migrate.c says how, and
 * why a crash at any point loses no lease).
 *
 * The write batches and the link that carries them: store_link.c. The
 * start-up load: store_load.c. This file: the store's life cycle, what
 * the server asks of it, and its timer (the link's timeouts, the
 * leadership's turns).
 */
#include "server/store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/slot.h"
#include "server/clock.h"
#include "server/log.h"
#include "server/store/store_private.h"

/* ---- life cycle --------------------------------------------------------- */

/* The state file (seen.h) of this keyspace: chosen by the cluster id
 * Redis holds, else by the Redis's address made canonical (every address
 * its host resolves to: found from outside, an address as written missed
 * the same Redis named another way, localhost for 127.0.0.1). With
 * persist = none, the file of the token mark alone. */
static void seen_init(struct dl_store *st)
{
	char where[DL_SEEN_ID_MAX];

	if (!st->redis) {
		dl_seen_init(&st->lead.seen, st->cfg->state_dir, NULL, 0, "");
		return;
	}
	dl_seen_where(where, sizeof(where), &st->addr);
	dl_seen_init(&st->lead.seen, st->cfg->state_dir, where, st->addr.db,
		     dl_config_store_prefix(st->cfg));
}

struct dl_store *dl_store_new(uv_loop_t *loop, const struct dl_config *cfg,
			      struct dl_locktab *tab,
			      const struct dl_store_hooks *hooks)
{
	struct dl_store *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->loop = loop;
	st->cfg = cfg;
	st->tab = tab;
	st->hooks = *hooks;
	st->epoch = 1;
	st->redis = cfg->persist == DL_PERSIST_REDIS;
	st->backoff_ms = DL_STORE_BACKOFF_MIN_MS;
	if (dl__keys_init(&st->keys, dl_config_store_prefix(cfg)))
		goto fail;
	/* Without Redis there is nobody to share the table with. */
	st->lead.active = !st->redis;
	dl__lead_identity(st);
	if (dl__attest_init(st))
		goto fail;
	if (st->redis && dl_redis_url_parse(cfg->redis, &st->addr) != 0)
		goto fail;
	/* A cluster's shard: the one serving the prefix's tag */
	st->find.slot = dl_key_slot(dl_config_store_prefix(cfg),
				    strlen(dl_config_store_prefix(cfg)));
	seen_init(st);
	if (dl__cluster_init(st))
		goto fail;
	/* the password kept out of the URL (redis_password_file) */
	if (st->redis && !st->addr.password && cfg->redis_password[0] &&
	    !(st->addr.password = strdup(cfg->redis_password)))
		goto fail;
	return st;
fail:
	dl_store_free(st);
	return NULL;
}

void dl_store_free(struct dl_store *st)
{
	struct batch *b;

	if (!st)
		return;
	while ((b = st->head) != NULL) {
		st->head = b->next;
		free(b);
	}
	dl_redis_addr_free(&st->addr);
	dl__resync_free(st);
	dl__wb_free(&st->writes.wb);
	free(st->writes.val.p);
	dl__keys_free(&st->keys);
	dl__part_free(st);
	free(st);
}

uint64_t dl_store_epoch(const struct dl_store *st)
{
	return st->epoch;
}

uint64_t dl_store_committed(const struct dl_store *st)
{
	return st->committed;
}

int dl_store_available(const struct dl_store *st)
{
	if (st->replicas_short || st->hz.report_until)
		return 0;
	/* An active past its own leadership deadline may have been replaced
	 * already: it answers nothing about locks until a renewal confirms
	 * it (the store's timer notices within DL_STORE_TICK_MS; this check
	 * covers the requests read before, after a pause of the process). */
	return dl_store_leading(st) && (!st->redis || st->link == LINK_UP);
}

int dl_store_opening(const struct dl_store *st)
{
	return st->opening && st->lead.active && dl_store_leading(st);
}

int dl_store_leading(const struct dl_store *st)
{
	return !st->redis ||
	       (st->lead.active && dl_mono_ms() < st->lead.leader.until_ms);
}

int dl_store_active(const struct dl_store *st)
{
	return st->lead.active;
}

const struct dl_leader *dl_store_leader(const struct dl_store *st)
{
	return &st->lead.leader;
}

const char *dl_store_active_addr(const struct dl_store *st)
{
	const struct dl_leader *l = &st->lead.leader;

	if (dl_store_active(st))
		return dl_store_addr(st);
	if (!l->epoch || strcmp(l->node, dl_store_node(st)) == 0)
		return "-";
	return l->addr;
}

const char *dl_store_node(const struct dl_store *st)
{
	return st->lead.node;
}

const char *dl_store_addr(const struct dl_store *st)
{
	return st->lead.self_addr;
}

int dl_store_idle(const struct dl_store *st)
{
	if (!st->lead.active)
		return 1; /* a standby writes nothing */
	return st->committed + 1 == st->epoch &&
	       (!st->redis || dl_locktab_dirty_count(st->tab) == 0);
}

const struct dl_store_stats *dl_store_stats(const struct dl_store *st)
{
	return &st->st;
}

const char *dl_store_backend(const struct dl_store *st)
{
	return st->redis ? "redis" : "none";
}

uint64_t dl_store_horizon_ms(const struct dl_store *st)
{
	uint64_t now = dl_mono_ms(), h = st->hz.usable;

	return h > now ? h - now : 0;
}

int dl_store_closed_bound(const struct dl_store *st)
{
	const char *why;

	if (!dl_store_closed_ms(st, &why))
		return 0;
	/* the reason a closer wrote (store_horizon.c bound_ms), perhaps
	 * another daemon: its words are all there is */
	return strstr(why, "max_ttl") ? 2 : 1;
}

const unsigned char *dl_store_proof_key(const struct dl_store *st, int old)
{
	/* parsed once per key (seen.h keeps the hex) */
	static unsigned char key[2][DL_PROOF_KEY_LEN];
	static char hex[2][DL_PROOF_KEY_HEX + 1];
	const char *h =
		old ? st->lead.seen.v.proofkey_old : st->lead.seen.v.proofkey;

	if (!st->redis || !h[0])
		return NULL;
	if (strcmp(hex[old], h) != 0) {
		if (dl_proof_key_parse(h, key[old]) != 0)
			return NULL;
		snprintf(hex[old], sizeof(hex[old]), "%s", h);
	}
	return key[old];
}

uint64_t dl_store_standbys(const struct dl_store *st)
{
	return st->lead.active ? st->hz.nsby : 0;
}

uint64_t dl_store_closed_ms(const struct dl_store *st, const char **why)
{
	uint64_t now = dl_mono_ms(), c = st->lead.seen.v.closed;

	*why = c > now ? st->lead.seen.v.why : "";
	return c > now ? c - now : 0;
}

/* How much longer than redis_timeout Redis may take to answer the oldest
 * call of a re-sync awaited: a whole bucket goes in one call, and a call
 * of many records takes it longer (found from outside: a call of 10^6
 * records, all in one bucket, took Redis 2-2.8 s; timed out at 2 s, the
 * re-sync began again, forever, refusing changes all along). Only while
 * SYNCING, when every request that changes state is refused anyway: a
 * write batch keeps redis_timeout as the longest a request waits. */
static uint64_t reply_allowance_ms(const struct dl_store *st)
{
	return st->head
		       ? (uint64_t)st->head->records * DL_STORE_RECORD_US / 1000
		       : 0;
}

/* How long Redis has owed the link an answer at loop time `now`, while
 * the link comes up: since its last reply, or since the oldest call
 * awaited was sent if that came later. The daemon's own time formatting
 * a call is not Redis's silence (a re-sync's call of 120,000 records
 * took the loop a while to format under load before it was sent, and was
 * timed out although Redis answered within the allowance: found by CI).
 * The send time is read from the precise clock, the loop's from the
 * coarse one, which may be a few ms behind: no wrap below zero. */
static uint64_t silent_ms(const struct dl_store *st, uint64_t now)
{
	uint64_t since = st->last_reply_ms > st->link_since_ms
				 ? st->last_reply_ms
				 : st->link_since_ms;

	if (st->head && st->head->sent_us / 1000 > since)
		since = st->head->sent_us / 1000;
	return now > since ? now - since : 0;
}

/* A restarted active's wait for the standbys' reports (store_load.c):
 * it reads their closures every DL_HORIZON_POLL_MS; a report loads the
 * table again, with grants closed (its records are of a Redis that went
 * back). 1 while it waits. */
static int report_wait(struct dl_store *st)
{
	struct store_horizon *hz = &st->hz;

	if (hz->report_found) {
		hz->report_found = 0;
		hz->report_until = 0;
		dl__lead_depose(st, DL_STORE_STALE,
				"a standby saw Redis go back: loading again");
		return 1;
	}
	if (!hz->report_until)
		return 0;
	if (dl_mono_ms() >= hz->report_until && !dl__hz_reports_in(st))
		/* paused, cut off or gone: what it may have seen is not known
		 * (docs/ha.md: run the nodes with a state_dir) */
		dl_warn("redis: a standby Redis lists did not look within %d ms of this restart: a loss it saw would not be known; serving",
			DL_STANDBY_REPORT_MS);
	if (dl_mono_ms() >= hz->report_until || dl__hz_reports_in(st)) {
		hz->report_until = 0;
		st->hooks.availability(1, st->hooks.ctx);
		return 0;
	}
	if (!st->lead.busy && dl_mono_ms() >= hz->poll_at) {
		hz->poll_at = dl_mono_ms() + DL_HORIZON_POLL_MS;
		dl__lead_send(st);
	}
	return 1;
}

static void on_tick(uv_timer_t *t)
{
	struct dl_store *st = t->data;
	uint64_t now = uv_now(st->loop);
	const char *ping = "PING";
	size_t plen = 4;
	int hz_due;

	(void)dl_seen_save(&st->lead.seen, dl_mono_ms(), 0);
	switch (st->link) {
	case LINK_DOWN:
		if (st->stopping)
			break;
		dl__sentinel_subscribe(st); /* to hear that a failover ended */
		if (now >= st->retry_at_ms && dl__sentinel_allows_link(st))
			dl__link_connect(st);
		break;
	case LINK_CONNECTING:
	case LINK_SYNCING:
		/* A re-sync of a big table may take a while; only silence
		 * counts against it. It keeps the leadership meanwhile. */
		if (silent_ms(st, now) >
		    st->cfg->redis_timeout_ms + reply_allowance_ms(st)) {
			char why[160];

			snprintf(
				why, sizeof(why),
				"timed out %s (no reply for %llu ms to a call of %zu records, %llu ms allowed)",
				st->link == LINK_SYNCING ? "re-syncing"
							 : "connecting",
				(unsigned long long)silent_ms(st, now),
				st->head ? st->head->records : (size_t)0,
				(unsigned long long)(st->cfg->redis_timeout_ms +
						     reply_allowance_ms(st)));
			dl__link_fail(st, why);
		} else if (st->link == LINK_SYNCING)
			dl__lead_tick(st);
		else
			dl__attest_tick(st);
		break;
	case LINK_UP:
		dl__sentinel_subscribe(
			st); /* again, if the subscription was lost */
		if (report_wait(st))
			break;
		hz_due = dl__hz_tick(st);
		if (st->head && (dl_mono_us() - st->head->sent_us) / 1000 >
					st->cfg->redis_timeout_ms) {
			dl__link_fail(st, "no reply within redis_timeout");
		} else if (st->lead.active &&
			   dl_mono_ms() >= st->lead.leader.until_ms) {
			/* Not renewed in time: a standby may take over any
			 * moment now. The next connection's take decides. */
			dl__link_fail(
				st,
				"leadership not confirmed within its lease");
		} else if (!st->lead.busy &&
			   (dl_mono_ms() >= st->lead.next_ms || hz_due)) {
			dl__lead_send(st);
		} else if (!st->head &&
			   now - st->last_reply_ms >= DL_STORE_PING_MS) {
			if (dl__batch_send(st, BATCH_PING, 0, 1, &ping, &plen))
				dl__link_fail(st, "cannot queue a PING");
		}
		break;
	}
}

int dl_store_take_over(struct dl_store *st, int start, char *err, size_t errlen)
{
	redisAsyncContext *ac = st->ac;
	int r;

	dl__find_cancel(st);
	if (ac) {
		/* The standby's link: nothing of it is needed any more. */
		st->ac = NULL;
		st->link = LINK_DOWN;
		redisAsyncFree(ac);
	}
	st->lead.busy = 0;
	r = dl_store_load(st, dl_wall_ms(), start, err, errlen);
	/* The load blocked the loop: its cached time is stale by that long,
	 * and the new link's timeout counts from it (a load longer than
	 * redis_timeout timed the link out at once, and the table was
	 * re-synced for nothing). */
	uv_update_time(st->loop);
	st->opening = r == 0 && st->lead.active;
	dl__link_connect(st);
	return r;
}

int dl_store_start(struct dl_store *st)
{
	if (!st->redis)
		return 0;
	uv_timer_init(st->loop, &st->timer);
	st->timer.data = st;
	st->timer_on = 1;
	uv_timer_start(&st->timer, on_tick, DL_STORE_TICK_MS, DL_STORE_TICK_MS);
	uv_unref((uv_handle_t *)&st->timer);
	uv_timer_init(st->loop, &st->lazy);
	st->lazy.data = st;
	uv_idle_init(st->loop, &st->walk);
	st->walk.data = st;
	uv_update_time(st->loop); /* after the load: see dl_store_take_over */
	st->last_reply_ms = uv_now(st->loop);
	dl__link_connect(st);
	return 0;
}

/* Both timers and the walk's handle closed: the store is done. */
static void on_handle_closed(uv_handle_t *h)
{
	struct dl_store *st = h->data;

	if (--st->handles_open == 0)
		st->stop_done(st->stop_arg);
}

static void stop_now(struct dl_store *st)
{
	redisAsyncContext *ac = st->ac;

	dl__find_stop(st);
	if (ac) {
		st->ac = NULL;
		st->link =
			LINK_DOWN; /* no availability report on the way out */
		redisAsyncFree(ac);
	}
	dl__resync_free(st); /* before its idle handle closes */
	if (st->timer_on) {
		st->timer_on = 0;
		st->lazy_on = 0;
		st->handles_open = 3;
		uv_close((uv_handle_t *)&st->timer, on_handle_closed);
		uv_close((uv_handle_t *)&st->lazy, on_handle_closed);
		uv_close((uv_handle_t *)&st->walk, on_handle_closed);
	} else {
		st->stop_done(st->stop_arg);
	}
}

/* The leadership is given back (or the link failed meanwhile). */
static void on_resigned(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;

	if (reply && ac == st->ac && !dl__store_reply_error(reply))
		dl_notice(
			"redis: leadership given up: a standby may take over at once");
	if (st->timer_on || st->ac)
		stop_now(st);
}

void dl_store_stop(struct dl_store *st, void (*done)(void *arg), void *arg)
{
	st->stop_done = done;
	st->stop_arg = arg;
	st->stopping = 1;
	/* An active whose batches are all answered hands the leadership
	 * over; the timer's timeout ends the wait if Redis does not answer.
	 * Locks still dirty here are not waited for: the drain wrote what
	 * clients were told (dl_store_idle), so what is left comes from
	 * closing the connections -- their waiters leaving, a grant nobody
	 * will be told of -- or, when the drain timed out, releases, whose
	 * loss only keeps a lock busy (docs/guide.md, "Why a release does not
	 * wait for Redis"). Redis keeps the state as after a crash, and a
	 * standby takes over at once instead of after the lease (found from
	 * outside: a waiter queued at SIGTERM cost a takeover of the whole
	 * lease). */
	if (st->lead.active && st->link == LINK_UP &&
	    st->committed + 1 == st->epoch) {
		st->lead.active = 0;
		/* given up: a standby may take over at once (seen.h) */
		dl_seen_note_leading(&st->lead.seen, 0);
		(void)dl_seen_save(&st->lead.seen, dl_mono_ms(), 1);
		if (dl__link_send_lead(st, LEAD_RESIGN, on_resigned) == 0) {
			/* the server's flush phase has ended: write now */
			dl_store_push(st);
			return;
		}
	}
	stop_now(st);
}
