/* SPDX-License-Identifier: MIT */
/*
 * cmd.c -- request dispatch (see cmd.h).
 *
 * A table maps each verb to its handler, to whether it changes lock
 * state (such requests are refused with ERR UNAVAILABLE while persistence
 * is down, before the lock table is touched), and to the right a user
 * needs for it (on the request's lock name; access.h says who has which).
 * Handlers format their reply into a stack buffer of DL_REPLY_MAX bytes,
 * which the longest reply fits.
 */
#include "server/cmd.h"
#include "server/cmd_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/access.h"
#include "server/clock.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/part/part.h"
#include "server/proof.h"
#include "server/server.h"
#include "server/stats.h"
#include "server/watch.h"

/* Append the lock's name to r, noting where it is in `line`. */
static void fmt_name(struct reply *r, struct dl_line *line, struct dl_str name)
{
	size_t at = r->f.len + (r->f.len > 0);

	dl_fmt_str(&r->f, name);
	line->name_off = (uint16_t)at;
	line->name_len = (uint8_t)name.len;
}

/* Append a lease's TTL to r, noting where it is in `line` (the connection
 * rewrites it with what remains when the line is finally sent). */
static void fmt_ttl(struct reply *r, struct dl_line *line, uint64_t ttl)
{
	size_t at = r->f.len + (r->f.len > 0);

	dl_fmt_u64(&r->f, ttl);
	line->ttl_off = (uint16_t)at;
	line->ttl_len = (uint8_t)(r->f.len - at);
}

/* The binding of owner o (its proof, locktab.h) in hex into buf
 * (2 * DL_OWNER_PROOF_LEN bytes): empty if it has none. */
static struct dl_str owner_bind(const struct dl_owner *o, char *buf)
{
	static const char hexd[] = "0123456789abcdef";
	const uint8_t *p = dl_owner_proof(o);
	int i;

	if (!p)
		return (struct dl_str){buf, 0};
	for (i = 0; i < DL_OWNER_PROOF_LEN; i++) {
		buf[2 * i] = hexd[p[i] >> 4];
		buf[2 * i + 1] = hexd[p[i] & 15];
	}
	return (struct dl_str){buf, 2 * DL_OWNER_PROOF_LEN};
}

/* The inputs of lease token's proof (server/proof.h), ending at the
 * monotonic `deadline`: 0, or -1 when there is none to give (memory only,
 * no key yet, no such lease). */
static int proof_in(struct dl_conn *c, struct dl_str name, uint64_t token,
		    uint64_t deadline, struct dl_proof_in *in, char *bind)
{
	const char *cluster = dl_store_cluster(c->srv->store);
	uint64_t now = dl_mono_ms();
	uint32_t limit;
	int shared;

	if (!c->sess.owner || dl_locktab_lease_mode(c->srv->tab, name, token,
						    &shared, &limit) != 0)
		return -1;
	*in = (struct dl_proof_in){
		.cluster = {cluster, strlen(cluster)},
		.name = name,
		.owner = dl_owner_id(c->sess.owner),
		.bind = owner_bind(c->sess.owner, bind),
		.token = token,
		.shared = shared,
		.limit = limit,
		.until = dl_wall_ms() + (deadline > now ? deadline - now : 0),
	};
	return 0;
}

/* proof= and until= of a lease just told: what lets its holder reclaim it
 * should Redis forget it (server/proof.h). Nothing with persist = none:
 * there, nothing outlives the process anyway. */
static void fmt_proof(struct dl_conn *c, struct reply *r, struct dl_str name,
		      uint64_t token, uint64_t deadline)
{
	const unsigned char *key = dl_store_proof_key(c->srv->store, 0);
	char hex[DL_PROOF_HEX + 1], bind[2 * DL_OWNER_PROOF_LEN];
	struct dl_proof_in in;

	if (!key || proof_in(c, name, token, deadline, &in, bind) != 0)
		return;
	dl_proof_make(key, &in, hex);
	dl_fmt_kv_str(&r->f, "proof", (struct dl_str){hex, DL_PROOF_HEX});
	dl_fmt_kv_u64(&r->f, "until", in.until);
}

/* NO BUSY names the lock's first holder (STATUS's) after its numbers --
 * owner=<id> [user=<user>] held_ms=<ms> and its description -- when
 * there is one, then delay_left_ms=<ms> when the lock is in its
 * lock-delay, if the user may read the lock: a user sees who holds only
 * what it could see with STATUS. */
static void fmt_busy_holder(struct dl_conn *c, struct dl_fmt *f,
			    struct dl_str name)
{
	struct dl_lock_status st;
	const char *why;
	uint64_t closed = dl_store_closed_ms(c->srv->store, &why);

	/* busy because grants are closed (Redis went back): for how long;
	 * the daemon's state, not the lock's, so said to anyone */
	if (closed)
		dl_fmt_kv_u64(f, "closed_ms", closed);
	if (!dl_access_may(c, DL_RIGHT_READ, name))
		return;
	dl_locktab_status(c->srv->tab, name, &st);
	if (st.held) {
		dl__cmd_fmt_owner(f, 1, st.owner);
		dl_fmt_kv_u64(f, "held_ms", st.held_ms);
		dl__cmd_fmt_desc(f, st.desc);
	}
	/* busy for its lock-delay: how long that still lasts */
	if (st.delay_left)
		dl_fmt_kv_u64(f, "delay_left_ms", st.delay_left);
}

/* NO DEADLOCK's cycle (dl_locktab_cycle): how many owners are in it,
 * then each one after the requester (and its user) with the lock it waits
 * for. The user sees only what it may read: a lock it may not read is
 * "-", and so is an owner between two such locks (HOLDERS of a lock it
 * may read shows that lock's holders and waiters anyway); more=<n>
 * counts the owners not named (DL_CYCLE_SHOW_MAX). */
static void fmt_cycle(struct dl_fmt *f, struct dl_conn *c)
{
	const struct dl_cycle *cy = dl_locktab_cycle(c->srv->tab);
	int before = dl_access_readable(cy->hop[0].lock, c), after;
	uint32_t i;

	dl_fmt_u64(f, cy->len);
	for (i = 1; i < cy->shown; i++) {
		after = dl_access_readable(cy->hop[i].lock, c);
		if (before || after)
			dl__cmd_fmt_owner(f, 0, cy->hop[i].owner);
		else
			dl_fmt_word(f, "-");
		if (after)
			dl_fmt_str(f, cy->hop[i].lock);
		else
			dl_fmt_word(f, "-");
		before = after;
	}
	if (cy->shown < cy->len)
		dl_fmt_kv_u64(f, "more", cy->len - cy->shown);
}

/* A user's quota that a LOCK ran into, or 0 (why says which). */
static int quota_error(struct dl_conn *c, char *why, size_t len)
{
	const struct dl_session *s = &c->sess;
	const struct dl_account *a = s->owner ? s->owner->acct : NULL;
	const struct dl_user *u = c->user;
	uint64_t used;
	char src[48];

	if (!a || !u)
		return 0;
	used = (uint64_t)a->nleases + a->nwaiters + a->ndelays;
	if (s->max_locks && used >= s->max_locks) {
		snprintf(src, sizeof(src),
			 u->quota[DL_QUOTA_LOCKS] ? "locks=%u on its line"
						  : "max_locks_per_user",
			 (unsigned)s->max_locks);
		snprintf(why, len,
			 "limit reached: user %s holds, waits for or keeps "
			 "in their delay %llu locks, at most %u (%s)",
			 dl_user_name(u), (unsigned long long)used,
			 (unsigned)s->max_locks, src);
	} else if (s->max_waits && a->nwaiters >= s->max_waits) {
		snprintf(src, sizeof(src),
			 u->quota[DL_QUOTA_WAITS] ? "waits=%u on its line"
						  : "max_waits_per_user",
			 (unsigned)s->max_waits);
		snprintf(why, len,
			 "limit reached: user %s waits for %u locks, at most "
			 "%u (%s)",
			 dl_user_name(u), (unsigned)a->nwaiters,
			 (unsigned)s->max_waits, src);
	} else {
		return 0;
	}
	return 1;
}

/* Which limit a LOCK ran into, found after the fact: the table said
 * DL_ELIMIT and nothing changed since. */
static void limit_error(struct dl_conn *c, struct dl_str name,
			struct dl_str tag)
{
	const struct dl_config *cfg = &c->srv->cfg;
	const struct dl_owner *o = c->sess.owner;
	uint64_t locks = dl_locktab_stats(c->srv->tab)->locks;
	struct dl_lock_status st;
	char why[DL_WHY_MAX];

	dl_locktab_status(c->srv->tab, name, &st);
	if (locks >= cfg->max_locks && !dl_locktab_find(c->srv->tab, name))
		snprintf(why, sizeof(why),
			 "limit reached: this daemon has %llu locks, at most "
			 "%llu (max_locks)",
			 (unsigned long long)locks,
			 (unsigned long long)cfg->max_locks);
	else if (st.held && st.count >= DL_REENTRY_MAX)
		snprintf(
			why, sizeof(why),
			"limit reached: %u holds of one lease (reentries), at most %u",
			(unsigned)st.count, (unsigned)DL_REENTRY_MAX);
	else if (st.waiters >= cfg->max_waiters)
		snprintf(
			why, sizeof(why),
			"limit reached: %u waiters on this lock, at most %llu (max_waiters_per_lock)",
			(unsigned)st.waiters,
			(unsigned long long)cfg->max_waiters);
	else if (o &&
		 (uint64_t)o->nleases + o->nwaiters >= cfg->max_locks_per_owner)
		snprintf(
			why, sizeof(why),
			"limit reached: this owner holds or waits for %u locks, at most %llu (max_locks_per_owner)",
			(unsigned)(o->nleases + o->nwaiters),
			(unsigned long long)cfg->max_locks_per_owner);
	else if (quota_error(c, why, sizeof(why)))
		;
	else
		snprintf(why, sizeof(why),
			 "limit reached: fencing tokens exhausted");
	dl_conn_error(c, DL_ELIMIT, why, tag);
}

/* A lock-table call failed: the reply for its code. */
static void table_error(struct dl_conn *c, int err, struct dl_str tag)
{
	switch (err) {
	case DL_ELIMIT:
		dl_conn_error(
			c, err,
			"limit reached (waiters per lock, locks per owner or reentries)",
			tag);
		break;
	case DL_EUNAVAILABLE:
		dl_conn_error(c, err, "persistence is down, try again", tag);
		break;
	case DL_EBADARG:
		dl_conn_error(c, err, "bad argument", tag);
		break;
	default:
		dl_error("lock table: %s", dl_strerror(err));
		dl_conn_error(c, DL_EINTERNAL, dl_strerror(err), tag);
	}
}

/* The outcome of a lock-table call, in its wire form. */
static void result_reply(struct dl_conn *c, struct dl_str name,
			 const struct dl_result *res, struct dl_str tag)
{
	static const char *const heads[] = {
		[DL_GRANTED] = "OK GRANTED",
		[DL_QUEUED] = "OK QUEUED",
		[DL_BUSY] = "NO BUSY",
		[DL_RELEASED] = "OK RELEASED",
		[DL_HELD] = "OK HELD",
		[DL_NOT_HOLDER] = "NO NOT_HOLDER",
		[DL_REFRESHED] = "OK REFRESHED",
		[DL_VALID] = "OK VALID",
		[DL_STALE] = "NO STALE",
		[DL_CANCELLED] = "OK CANCELLED",
		[DL_NOT_QUEUED] = "NO NOT_QUEUED",
		[DL_ALREADY_WAITING] = "NO ALREADY_WAITING",
		[DL_BROKEN] = "OK BROKEN",
		[DL_LIMIT_MISMATCH] = "NO LIMIT_MISMATCH",
		[DL_UPGRADE_DEADLOCK] = "NO UPGRADE_DEADLOCK",
		[DL_DEADLOCK] = "NO DEADLOCK",
		[DL_RECLAIMED] = "OK RECLAIMED",
	};
	struct dl_line line = {.durable = res->durable,
			       .reentry = res->reentry,
			       .retry = res->retry,
			       .token = res->token,
			       .deadline = res->deadline,
			       .owner_gen = c->sess.owner_gen};
	struct reply r;

	dl__cmd_reply_begin(&r, heads[res->outcome]);
	fmt_name(&r, &line, name);
	switch (res->outcome) {
	case DL_GRANTED:
	case DL_RECLAIMED:
		line.kind = DL_LINE_GRANTED;
		if (res->known) { /* a refresh (dl_locktab_reclaim) */
			line.kind = DL_LINE_REFRESHED;
			line.shorten = res->shorten;
			line.from_deadline = res->from_deadline;
			line.asked_ttl_ms = res->ttl_ms;
		}
		dl_fmt_u64(&r.f, res->token);
		fmt_ttl(&r, &line, res->value);
		dl_fmt_kv_u64(&r.f, "holds", res->holds);
		fmt_proof(c, &r, name, res->token, res->deadline);
		break;
	case DL_REFRESHED:
		line.kind = DL_LINE_REFRESHED;
		line.shorten = res->shorten;
		line.from_deadline = res->from_deadline;
		line.asked_ttl_ms = res->ttl_ms;
		fmt_ttl(&r, &line, res->value);
		fmt_proof(c, &r, name, res->token, res->deadline);
		break;
	case DL_VALID:
		dl_fmt_u64(&r.f, res->token);
		dl_fmt_u64(&r.f, res->value);
		break;
	case DL_STALE:
	case DL_BROKEN:
		dl_fmt_u64(&r.f, res->token);
		break;
	case DL_BUSY:
		dl_fmt_u64(&r.f, res->value);
		fmt_busy_holder(c, &r.f, name);
		break;
	case DL_QUEUED:
	case DL_HELD:
	case DL_ALREADY_WAITING:
	case DL_LIMIT_MISMATCH:
		dl_fmt_u64(&r.f, res->value);
		break;
	case DL_UPGRADE_DEADLOCK:
		dl_fmt_u64(&r.f, res->token);
		break;
	case DL_DEADLOCK:
		fmt_cycle(&r.f, c);
		break;
	default:
		break;
	}
	dl__cmd_reply_send(c, &r, tag, &line);
}

/* For cmd_multi.c (cmd_private.h): the pieces of a grant's reply. */
void dl__cmd_fmt_name(struct reply *r, struct dl_line *line, struct dl_str name)
{
	fmt_name(r, line, name);
}

void dl__cmd_fmt_ttl(struct reply *r, struct dl_line *line, uint64_t ttl)
{
	fmt_ttl(r, line, ttl);
}

void dl__cmd_fmt_proof(struct dl_conn *c, struct reply *r, struct dl_str name,
		       uint64_t token, uint64_t deadline)
{
	fmt_proof(c, r, name, token, deadline);
}

void dl__cmd_fmt_cycle(struct dl_fmt *f, struct dl_conn *c)
{
	fmt_cycle(f, c);
}

void dl__cmd_result_reply(struct dl_conn *c, struct dl_str name,
			  const struct dl_result *res, struct dl_str tag)
{
	result_reply(c, name, res, tag);
}

void dl__cmd_table_error(struct dl_conn *c, int err, struct dl_str name,
			 struct dl_str tag)
{
	if (err == DL_ELIMIT)
		limit_error(c, name, tag);
	else
		table_error(c, err, tag);
}

static int check_ttl(struct dl_conn *c, const struct dl_request *rq)
{
	char asked[DL_DURATION_TEXT_MAX], max[DL_DURATION_TEXT_MAX];
	char why[DL_WHY_MAX];

	if (rq->has_ttl && rq->ttl_ms > c->srv->cfg.max_ttl_ms) {
		snprintf(why, sizeof(why),
			 "ttl out of range: %s, at most %s (max_ttl)",
			 dl_format_duration(rq->ttl_ms, asked),
			 dl_format_duration(c->srv->cfg.max_ttl_ms, max));
		dl_conn_error(c, DL_EBADARG, why, rq->tag);
		return -1;
	}
	return 0;
}

/* A warning must come before the end: warn= below the lease's TTL (a
 * LOCK's, given or the default; the codec checked a ttl= given with it). */
static int check_warn(struct dl_conn *c, const struct dl_request *rq,
		      uint64_t ttl)
{
	char warn[DL_DURATION_TEXT_MAX], t[DL_DURATION_TEXT_MAX];
	char why[DL_WHY_MAX];

	if (rq->has_warn && rq->warn_ms && rq->warn_ms >= ttl) {
		snprintf(
			why, sizeof(why),
			"warn out of range: %s, less than the ttl (%s): it is "
			"how much of the lease remains when * EXPIRING is sent",
			dl_format_duration(rq->warn_ms, warn),
			dl_format_duration(ttl, t));
		dl_conn_error(c, DL_EBADARG, why, rq->tag);
		return -1;
	}
	return 0;
}

/* The budget of deadlock-check steps of c's user (struct dl_acquire's
 * walk_budget), refilled for the time since its last use at
 * max_deadlock_steps_per_user a second, up to that; NULL for the default
 * user (no users file: every client at once, as for its quotas). */
static uint32_t *walk_budget(struct dl_conn *c)
{
	uint64_t cap = c->srv->cfg.max_deadlock_steps_per_user;
	uint64_t now = dl_mono_ms(), left;
	struct dl_user_rt *rt;

	if (!c->user || !c->user->name[0])
		return NULL;
	rt = &c->user->rt;
	left = rt->walk_left;
	if (!rt->walk_at_ms || now - rt->walk_at_ms >= 1000)
		left = cap;
	else
		left += (now - rt->walk_at_ms) * cap / 1000;
	rt->walk_left = (uint32_t)(left < cap ? left : cap);
	rt->walk_at_ms = now;
	return &rt->walk_left;
}

uint32_t *dl__cmd_walk_budget(struct dl_conn *c)
{
	return walk_budget(c);
}

int dl__cmd_check_ttl(struct dl_conn *c, const struct dl_request *rq)
{
	return check_ttl(c, rq);
}

/* ---- handlers ----------------------------------------------------------- */

static void cmd_lock(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_server *srv = c->srv;
	struct dl_result res;
	uint64_t ttl = rq->has_ttl ? rq->ttl_ms : srv->cfg.default_ttl_ms;
	uint64_t wait = rq->has_wait ? rq->wait_ms : DL_WAIT_INF;
	int err;

	struct dl_acquire a = {.name = rq->name,
			       .ttl_ms = ttl,
			       .wait_ms = wait,
			       .tag = rq->tag,
			       .limit = rq->has_limit ? (uint32_t)rq->limit : 1,
			       .shared = rq->shared,
			       .has_warn = rq->has_warn,
			       .warn_ms = (uint32_t)rq->warn_ms,
			       .delay_ms = (uint32_t)rq->delay_ms,
			       .req = rq->req,
			       .notify = rq->notify_waiters,
			       .value = rq->value,
			       /* a TRYLOCK never waits, so never walks: no
				* clock read for it */
			       .walk_budget = wait ? walk_budget(c) : NULL};

	if (rq->nnames > 1) {
		dl__cmd_multi_lock(c, rq);
		return;
	}
	if (rq->req && dl__cmd_multi_req_in_use(c, rq->req)) {
		dl_conn_error(c, DL_EBADARG,
			      "req= of a multi-lock of this owner in progress: "
			      "an id is one request's",
			      rq->tag);
		return;
	}
	if (check_ttl(c, rq) || check_warn(c, rq, ttl))
		return;
	err = dl_locktab_acquire(srv->tab, &c->sess, &a, &res);
	if (err == DL_ELIMIT)
		limit_error(c, rq->name, rq->tag);
	else if (err)
		table_error(c, err, rq->tag);
	else
		result_reply(c, rq->name, &res, rq->tag);
	/* news of waiters for the lease just granted, after its grant */
	if (!err && res.tell)
		dl_locktab_tell_waiting(srv->tab, rq->name, res.token);
}

static void cmd_unlock(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_result res;
	int err = dl_locktab_release(c->srv->tab, &c->sess, rq->name, rq->token,
				     &res);

	if (err)
		table_error(c, err, rq->tag);
	else
		result_reply(c, rq->name, &res, rq->tag);
}

/* REFRESH value=: the lease, refreshed, says this value from now on (its
 * watchers are told); what the refresh answered stands. */
static int value_of(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_result res;

	return dl_locktab_set_value(c->srv->tab, &c->sess, rq->name, rq->token,
				    rq->value, &res);
}

static void cmd_refresh(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_result res;
	int err;

	if (check_ttl(c, rq) ||
	    (rq->has_warn && rq->has_ttl && check_warn(c, rq, rq->ttl_ms)))
		return;
	err = dl_locktab_refresh_warn(c->srv->tab, &c->sess, rq->name,
				      rq->token, rq->has_ttl ? rq->ttl_ms : 0,
				      rq->has_warn ? (int64_t)rq->warn_ms : -1,
				      &res);
	if (err == DL_EBADARG)
		/* the lease's warning and its TTL, one of them its own */
		dl_conn_error(c, err,
			      "warn out of range: the lease's warning must be "
			      "less than its ttl (REFRESH warn=0 drops it)",
			      rq->tag);
	else if (err)
		table_error(c, err, rq->tag);
	else if (rq->value.len && res.outcome == DL_REFRESHED &&
		 (err = value_of(c, rq)) != 0)
		table_error(c, err, rq->tag);
	else
		result_reply(c, rq->name, &res, rq->tag);
}

/* A RECLAIM refused (its proof is not ours, its lease has ended, the lock
 * cannot take it): counted, told NO NOT_HOLDER, and logged -- the first of
 * every DL_RECLAIM_LOG_MS, with how many before it were not, so that a flood of
 * them cannot flood the log. */
static void reclaim_refused(struct dl_conn *c, const struct dl_request *rq,
			    struct dl_str owner, const char *why)
{
	struct dl_server *srv = c->srv;
	struct dl_result res = {.outcome = DL_NOT_HOLDER};
	uint64_t now = dl_mono_ms();
	char d[DL_DURATION_TEXT_MAX];

	srv->st.reclaims_refused++;
	if (srv->reclaim_log_at &&
	    now - srv->reclaim_log_at < DL_RECLAIM_LOG_MS) {
		srv->reclaim_log_held++;
	} else {
		dl_notice("conn %llu %s: RECLAIM %.*s %llu by %.*s refused: %s"
			  "%s%llu%s%s",
			  (unsigned long long)c->id, c->peer, (int)rq->name.len,
			  rq->name.p, (unsigned long long)rq->token,
			  (int)owner.len, owner.p, why,
			  srv->reclaim_log_held ? " (and " : "",
			  (unsigned long long)srv->reclaim_log_held,
			  srv->reclaim_log_held ? " more in the last " : "",
			  srv->reclaim_log_held
				  ? dl_format_duration(
					    now - srv->reclaim_log_at, d)
				  : "");
		srv->reclaim_log_at = now;
		srv->reclaim_log_held = 0;
	}
	result_reply(c, rq->name, &res, rq->tag);
}

/*
 * RECLAIM (docs/design.md, "Reclaim"): a holder keeps a lease the table
 * does not know -- Redis forgot it, and grants are closed until every
 * lease told before may have ended -- by showing the proof its last
 * grant or refresh gave. A proof that is not this keyspace's (under its
 * key or the one before), or whose `until` has passed by more than
 * max_clock_skew (the clocks of the daemon that made it and this one),
 * is refused as NO NOT_HOLDER, as is a claim the lock cannot take
 * (dl_locktab_reclaim). Every refusal is logged (reclaim_refused): a
 * refused proof is a forgery, a replay or a bug, a refused claim a lease
 * its holder loses.
 */
static void cmd_reclaim(struct dl_conn *c, const struct dl_request *rq)
{
	const unsigned char *key = dl_store_proof_key(c->srv->store, 0);
	const unsigned char *old = dl_store_proof_key(c->srv->store, 1);
	const char *cluster = dl_store_cluster(c->srv->store);
	char bind[2 * DL_OWNER_PROOF_LEN];
	uint32_t limit = rq->has_limit ? (uint32_t)rq->limit : 1;
	uint64_t ttl = rq->has_ttl ? rq->ttl_ms : c->srv->cfg.default_ttl_ms;
	struct dl_acquire a = {.name = rq->name,
			       .ttl_ms = ttl,
			       .tag = rq->tag,
			       .limit = limit,
			       .shared = rq->shared,
			       .has_warn = rq->has_warn,
			       .warn_ms = (uint32_t)rq->warn_ms,
			       .delay_ms = (uint32_t)rq->delay_ms,
			       .value = rq->value};
	struct dl_proof_in in = {
		.cluster = {cluster, strlen(cluster)},
		.name = rq->name,
		.token = rq->token,
		.shared = rq->shared,
		.limit = limit,
		.until = rq->until,
	};
	struct dl_result res = {.outcome = DL_NOT_HOLDER};
	const char *why = NULL;
	int err;

	if (!rq->proof.len || !rq->has_until) {
		dl_conn_error(c, DL_EBADARG,
			      "RECLAIM needs proof= and until= (what the "
			      "lease's last grant or refresh said)",
			      rq->tag);
		return;
	}
	if (check_ttl(c, rq) || check_warn(c, rq, ttl))
		return;
	if (!c->sess.owner || !key) {
		result_reply(c, rq->name, &res, rq->tag);
		return;
	}
	in.owner = dl_owner_id(c->sess.owner);
	in.bind = owner_bind(c->sess.owner, bind);
	if (!dl_proof_check(key, &in, rq->proof) &&
	    !(old && dl_proof_check(old, &in, rq->proof))) {
		reclaim_refused(c, rq, in.owner,
				"not a proof of this cluster's for this owner");
		return;
	}
	if (rq->until + c->srv->cfg.max_clock_skew_ms < dl_wall_ms()) {
		reclaim_refused(c, rq, in.owner, "its lease has ended");
		return;
	}
	err = dl_locktab_reclaim(c->srv->tab, &c->sess, &a, rq->token,
				 rq->holds ? (uint32_t)rq->holds : 1, &res,
				 &why);
	if (err == DL_ELIMIT) {
		limit_error(c, rq->name, rq->tag);
		return;
	}
	if (err) {
		table_error(c, err, rq->tag);
		return;
	}
	if (res.outcome == DL_NOT_HOLDER) {
		reclaim_refused(c, rq, in.owner, why ? why : "not held");
		return;
	}
	if (res.outcome == DL_RECLAIMED && !res.known)
		dl_notice(
			"conn %llu: RECLAIMED %.*s %llu by %.*s: its lease again, for %llu ms",
			(unsigned long long)c->id, (int)rq->name.len,
			rq->name.p, (unsigned long long)rq->token,
			(int)in.owner.len, in.owner.p, (unsigned long long)ttl);
	result_reply(c, rq->name, &res, rq->tag);
}

static void cmd_check(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_result res;

	dl_locktab_check(c->srv->tab, rq->name, rq->token, &res);
	result_reply(c, rq->name, &res, rq->tag);
}

/* BREAK is audited: who (user and peer), whose lease, which, and why,
 * one line at notice level; its holder is told who broke it. */
static void cmd_break(struct dl_conn *c, const struct dl_request *rq)
{
	const char *by = dl_access_user(c);
	char prev[DL_OWNER_KEY_MAX + 1];
	struct dl_str id, user;
	struct dl_result res;
	int err = dl_locktab_break(c->srv->tab, rq->name, rq->token,
				   (struct dl_str){by, strlen(by)}, prev, &res);

	if (err) {
		table_error(c, err, rq->tag);
		return;
	}
	if (res.outcome == DL_BROKEN) {
		id = dl_owner_key_id((struct dl_str){prev, strlen(prev)});
		user = dl_owner_key_account(
			(struct dl_str){prev, strlen(prev)});
		dl_notice("audit: BREAK name=%.*s token=%llu user=%s peer=%s "
			  "owner=%.*s owner_user=%.*s reason=%.*s",
			  (int)rq->name.len, rq->name.p,
			  (unsigned long long)rq->token, by, c->peer,
			  (int)id.len, id.p, user.len ? (int)user.len : 7,
			  user.len ? user.p : DL_USER_DEFAULT,
			  (int)rq->reason.len, rq->reason.p);
	}
	result_reply(c, rq->name, &res, rq->tag);
}

static void cmd_cancel(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_result res;

	if (dl__cmd_multi_cancel(c, rq))
		return;
	dl_locktab_cancel(c->srv->tab, &c->sess, rq->name, &res);
	result_reply(c, rq->name, &res, rq->tag);
}

/* The active's address, "-" when none is known (dl_store_active_addr). */
static struct dl_str active_addr(const struct dl_server *srv)
{
	const char *a = dl_store_active_addr(srv->store);

	return (struct dl_str){a, strlen(a)};
}

/* A standby executes nothing that reads or changes locks: it has no
 * state. The first word of the text is active=<host:port> (or
 * active=-), for clients to follow. */
static void not_active(struct dl_conn *c, struct dl_str tag)
{
	struct reply r;

	c->srv->st.errors[-DL_ENOTACTIVE]++;
	dl__cmd_reply_begin(&r, "ERR NOT_ACTIVE");
	dl_fmt_kv_str(&r.f, "active", active_addr(c->srv));
	dl_fmt_word(&r.f, "this dlockd is a standby; ask the active one");
	dl__cmd_reply_send(c, &r, tag, NULL);
}

/* Before AUTH (when AUTH is needed), HELLO tells nothing about the
 * server but its version, and names no owner: the connection has none. */
static void hello_unauthenticated(struct dl_conn *c,
				  const struct dl_request *rq)
{
	struct reply r;

	if (rq->owner.len || rq->owner_secret.len || rq->has_desc) {
		dl_conn_error(c, DL_ENOAUTH,
			      "AUTH first: an owner is named, and described, "
			      "once authenticated",
			      rq->tag);
		return;
	}
	dl__cmd_reply_begin(&r, "OK HELLO");
	dl_fmt_kv_str(&r.f, "version", DL_STR_LIT(DL_VERSION));
	dl_fmt_kv_str(&r.f, "auth", DL_STR_LIT("required"));
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
}

/* HELLO host= pid= cmd=: the connection's description from now on (the
 * parts not given are not said), for the leases it is granted from now
 * on. 0, or -1 once the reply (an error) is sent. */
static int set_desc(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_desc *d;
	int err = dl_desc_new(rq->desc_host, rq->desc_pid, rq->desc_cmd, &d);

	if (err) {
		dl_conn_error(c, err == DL_ENOMEM ? DL_EINTERNAL : err,
			      err == DL_ENOMEM ? "out of memory"
					       : "bad description",
			      rq->tag);
		return -1;
	}
	dl_session_set_desc(&c->sess, d);
	dl_desc_unref(d);
	return 0;
}

static void cmd_hello(struct dl_conn *c, const struct dl_request *rq)
{
	const struct dl_config *cfg = &c->srv->cfg;
	char kbuf[DL_OWNER_KEY_MAX + 1];
	struct dl_str k, named = {NULL, 0};
	struct reply r;
	int err;

	if (!c->authed) {
		hello_unauthenticated(c, rq);
		return;
	}
	if (rq->owner_secret.len && !rq->owner.len) {
		dl_conn_error(c, DL_EBADFORMAT,
			      "key= goes with owner=", rq->tag);
		return;
	}
	if (rq->owner.len && c->multi) {
		/* between two of its steps it waits for nothing, but what
		 * it took is its owner's */
		dl_conn_error(c, DL_EBADARG,
			      "cannot change owner while waiting for a lock",
			      rq->tag);
		return;
	}
	if (rq->owner.len && !dl_store_active(c->srv->store)) {
		/* A standby binds no owner: it acts for nobody (its sessions
		 * end at a take-over), and an id bound here refused the same
		 * client back a moment later, before this daemon saw its
		 * first connection end. The id is checked, and said back
		 * without a key. */
		err = dl_access_owner_key(c, rq->owner, kbuf, &k);
		if (err) {
			table_error(c, err, rq->tag);
			return;
		}
		named = rq->owner;
	} else if (rq->owner.len) {
		err = dl_access_prove_owner(c, rq->owner, rq->owner_secret);
		if (err == DL_EDENIED) {
			/* "NO DENIED <id> need=key": the owner is someone's */
			c->srv->st.errors[-DL_EDENIED]++;
			c->srv->st.owner_denials++;
			dl__cmd_reply_begin(&r, "NO DENIED");
			dl_fmt_str(&r.f, rq->owner);
			dl_fmt_word(&r.f, "need=key");
			dl__cmd_reply_send(c, &r, rq->tag, NULL);
			return;
		}
		if (err == DL_EBADARG) {
			dl_conn_error(
				c, err,
				"cannot change owner while waiting for a lock",
				rq->tag);
			return;
		}
		if (err) {
			table_error(c, err, rq->tag);
			return;
		}
	}
	if (rq->has_desc && set_desc(c, rq))
		return;
	dl__cmd_reply_begin(&r, "OK HELLO");
	dl_fmt_kv_str(&r.f, "version", DL_STR_LIT(DL_VERSION));
	dl_fmt_kv_str(&r.f, "owner",
		      named.len ? named
				: dl_owner_key_id(dl_session_owner(&c->sess)));
	if (c->owner_secret[0] && !named.len)
		dl_fmt_kv_str(&r.f, "key",
			      (struct dl_str){c->owner_secret,
					      strlen(c->owner_secret)});
	dl_fmt_kv_str(
		&r.f, "user",
		(struct dl_str){dl_access_user(c), strlen(dl_access_user(c))});
	dl_fmt_kv_str(&r.f, "auth",
		      cfg->password[0] || cfg->users_file[0]
			      ? DL_STR_LIT("required")
			      : DL_STR_LIT("none"));
	dl_fmt_kv_str(&r.f, "persist",
		      cfg->persist == DL_PERSIST_REDIS ? DL_STR_LIT("redis")
						       : DL_STR_LIT("none"));
	dl_fmt_kv_str(
		&r.f, "durability",
		(struct dl_str){dl_store_durability(c->srv->store),
				strlen(dl_store_durability(c->srv->store))});
	dl_fmt_kv_u64(&r.f, "max_line", DL_LINE_MAX);
	dl_fmt_kv_u64(&r.f, "max_name", DL_NAME_MAX);
	dl_fmt_kv_u64(&r.f, "max_tag", DL_TAG_MAX);
	dl_fmt_kv_u64(&r.f, "max_owner", DL_OWNER_MAX);
	dl_fmt_kv_u64(&r.f, "default_ttl_ms", cfg->default_ttl_ms);
	dl_fmt_kv_u64(&r.f, "max_ttl_ms", cfg->max_ttl_ms);
	dl_fmt_kv_u64(&r.f, "max_waiters", cfg->max_waiters);
	dl_fmt_kv_u64(&r.f, "max_locks_per_owner", cfg->max_locks_per_owner);
	dl_fmt_kv_u64(&r.f, "max_connections", cfg->max_connections);
	dl_fmt_kv_u64(&r.f, "max_output", cfg->max_output);
	dl_fmt_kv_u64(&r.f, "max_output_total", cfg->max_output_total);
	dl_fmt_kv_u64(&r.f, "tick_ms", cfg->tick_ms);
	dl_fmt_kv_str(&r.f, "role",
		      dl_store_active(c->srv->store) ? DL_STR_LIT("active")
						     : DL_STR_LIT("standby"));
	dl_fmt_kv_str(&r.f, "node",
		      (struct dl_str){dl_store_node(c->srv->store),
				      strlen(dl_store_node(c->srv->store))});
	dl_fmt_kv_str(&r.f, "active", active_addr(c->srv));
	dl_fmt_kv_u64(&r.f, "epoch", dl_store_leader(c->srv->store)->epoch);
	/* the 24th word: a 0.3 client takes more for a protocol error
	 * (DL_REPLY_ARGS_MAX), so HELLO can say nothing more */
	dl_fmt_kv_str(&r.f, "cluster",
		      (struct dl_str){dl_store_cluster(c->srv->store),
				      strlen(dl_store_cluster(c->srv->store))});
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
}

/* AUTH: access.c decides (secrets compared in constant time). A failure
 * is answered late (auth_delay), the last allowed one then closes. */
static void cmd_auth(struct dl_conn *c, const struct dl_request *rq)
{
	char why[DL_WHY_MAX];
	struct reply r;
	int n, err = dl_access_auth(c, rq->user, rq->arg, why, sizeof(why));

	if (err == 0) {
		dl__cmd_reply_begin(&r, "OK AUTH");
		if (rq->user.len)
			dl_fmt_kv_str(&r.f, "user", rq->user);
		dl__cmd_reply_send(c, &r, rq->tag, NULL);
		return;
	}
	if (err != DL_EDENIED) {
		dl_conn_error(c, err, why, rq->tag);
		return;
	}
	dl__cmd_reply_begin(&r, "NO AUTH_FAILED");
	n = dl_fmt_end(&r.f, rq->tag);
	if (n > 0)
		dl_conn_send_delayed(c, r.buf, (size_t)n,
				     c->srv->cfg.auth_delay_ms,
				     dl_access_guessing(c));
}

static void cmd_ping(struct dl_conn *c, const struct dl_request *rq)
{
	struct reply r;

	dl__cmd_reply_begin(&r, "OK PONG");
	if (rq->arg.len)
		dl_fmt_str(&r.f, rq->arg);
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
}

static void cmd_quit(struct dl_conn *c, const struct dl_request *rq)
{
	struct reply r;

	dl__cmd_reply_begin(&r, "OK BYE");
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
	dl_conn_end(c, DL_END_GRACEFUL, "QUIT");
}

/* ---- dispatch ----------------------------------------------------------- */

enum {
	OPEN = 1,    /* allowed before AUTH */
	CHANGES = 2, /* changes lock state: refused while persistence is down */
	ACTIVE = 4,  /* reads or changes lock state: the active daemon's */
	NAMED = 8,   /* about rq->name: the partition's that serves it */
};

/* The right a verb needs (users.h); ANYONE: any authenticated user (LOCKS
 * lists what its user may read). */
#define ANYONE DL_RIGHT_COUNT_
#define LOCK_R DL_RIGHT_LOCK
#define READ_R DL_RIGHT_READ

static const struct {
	void (*fn)(struct dl_conn *c, const struct dl_request *rq);
	unsigned flags;
	enum dl_right right; /* on rq->name */
} verbs[DL_VERB_COUNT_] = {
	[DL_VERB_LOCK] = {cmd_lock, CHANGES | ACTIVE | NAMED, LOCK_R},
	[DL_VERB_TRYLOCK] = {cmd_lock, CHANGES | ACTIVE | NAMED, LOCK_R},
	[DL_VERB_UNLOCK] = {cmd_unlock, CHANGES | ACTIVE | NAMED, LOCK_R},
	[DL_VERB_REFRESH] = {cmd_refresh, CHANGES | ACTIVE | NAMED, LOCK_R},
	[DL_VERB_RECLAIM] = {cmd_reclaim, CHANGES | ACTIVE | NAMED, LOCK_R},
	[DL_VERB_CHECK] = {cmd_check, ACTIVE | NAMED, READ_R},
	[DL_VERB_CANCEL] = {cmd_cancel, ACTIVE | NAMED, LOCK_R},
	[DL_VERB_STATUS] = {dl__cmd_status, ACTIVE | NAMED, READ_R},
	[DL_VERB_HELLO] = {cmd_hello, OPEN, ANYONE},
	[DL_VERB_AUTH] = {cmd_auth, OPEN, ANYONE},
	[DL_VERB_STATS] = {dl__cmd_stats, 0, DL_RIGHT_ADMIN},
	[DL_VERB_PING] = {cmd_ping, OPEN, ANYONE},
	[DL_VERB_QUIT] = {cmd_quit, OPEN, ANYONE},
	[DL_VERB_LOCKS] = {dl__cmd_locks, ACTIVE, ANYONE},
	[DL_VERB_HELP] = {dl__cmd_help, OPEN, ANYONE},
	[DL_VERB_BREAK] = {cmd_break, CHANGES | ACTIVE | NAMED, DL_RIGHT_BREAK},
	[DL_VERB_HOLDERS] = {dl__cmd_holders, ACTIVE | NAMED, READ_R},
	/* WATCH checks the read right itself, on a name or a prefix; a
	 * prefix may span partitions: each tells of its own names */
	[DL_VERB_WATCH] = {dl_watch_cmd, ACTIVE | NAMED, ANYONE},
	[DL_VERB_UNWATCH] = {dl_unwatch_cmd, ACTIVE, ANYONE},
	[DL_VERB_MAP] = {dl__cmd_map, 0, ANYONE},
	[DL_VERB_PARTITION] = {dl__cmd_partition, ACTIVE, DL_RIGHT_ADMIN},
};

/* The partition of every name of rq (NAMED verbs): 0 to go on. A
 * multi-lock's names must share one; a WATCH of a prefix is every
 * partition's. */
static int route(struct dl_conn *c, const struct dl_request *rq)
{
	const struct dl_map_part *first, *to;
	enum dl_route r0;
	int i;

	if (!c->srv->part || (rq->verb == DL_VERB_WATCH && rq->prefix))
		return 0;
	if (rq->nnames > 1) {
		r0 = dl_part_route(c->srv->part, rq->name, &first);
		for (i = 0; i < rq->nnames - 1; i++)
			if (dl_part_route(c->srv->part, rq->more[i], &to) !=
				    r0 ||
			    to != first) {
				dl_conn_error(
					c, DL_EBADARG,
					"the names are in several partitions: a multi-lock's names must share one (put them under one {tag})",
					rq->tag);
				return -1;
			}
	}
	return dl__cmd_route(c, rq->name, rq->tag);
}

/* "NO DENIED <name> need=<right>" ("-" for a right on the daemon). */
void dl__cmd_denied(struct dl_conn *c, enum dl_right right, struct dl_str name,
		    struct dl_str tag)
{
	static const char *const needs[] = {"need=lock", "need=read",
					    "need=break", "need=admin"};
	struct reply r;

	c->srv->st.errors[-DL_EDENIED]++;
	dl__cmd_reply_begin(&r, "NO DENIED");
	if (right == DL_RIGHT_ADMIN || !name.len)
		dl_fmt_word(&r.f, "-");
	else
		dl_fmt_str(&r.f, name);
	dl_fmt_word(&r.f, needs[right]);
	dl__cmd_reply_send(c, &r, tag, NULL);
}

void dl_cmd_execute(struct dl_conn *c, char *line, size_t len)
{
	struct dl_request rq;
	const char *why = NULL;
	int err;

	err = dl_parse_request(line, len, &rq, &why);
	if (!c->authed && ++c->unauth_requests > DL_UNAUTH_REQUESTS_MAX) {
		char text[DL_WHY_MAX];

		snprintf(text, sizeof(text),
			 "limit reached: %d requests before AUTH, closing",
			 DL_UNAUTH_REQUESTS_MAX);
		dl_conn_error(c, DL_ELIMIT, text, err ? DL_STR_NULL : rq.tag);
		dl_conn_end(c, DL_END_GRACEFUL,
			    "too many requests before AUTH");
		return;
	}
	if (err) {
		dl_debug("conn %llu: bad request: %s",
			 (unsigned long long)c->id, why);
		dl_conn_error(c, err, why ? why : dl_strerror(err), rq.tag);
		return;
	}
	if (rq.verb == DL_VERB_NONE)
		return;
	c->srv->st.commands++;
	dl_debug("conn %llu: %s %.*s", (unsigned long long)c->id,
		 dl_verb_name(rq.verb), (int)rq.name.len,
		 rq.name.p ? rq.name.p : "");
	if (!c->authed && !(verbs[rq.verb].flags & OPEN)) {
		dl_conn_error(c, DL_ENOAUTH, "AUTH required", rq.tag);
		return;
	}
	if (verbs[rq.verb].right != ANYONE &&
	    !dl_access_may(c, verbs[rq.verb].right, rq.name)) {
		dl__cmd_denied(c, verbs[rq.verb].right, rq.name, rq.tag);
		return;
	}
	if ((verbs[rq.verb].flags & ACTIVE) &&
	    !dl_store_active(c->srv->store)) {
		not_active(c, rq.tag);
		return;
	}
	if ((verbs[rq.verb].flags & NAMED) && route(c, &rq))
		return;
	if ((verbs[rq.verb].flags & ACTIVE) &&
	    !dl_store_leading(c->srv->store)) {
		dl_conn_error(
			c, DL_EUNAVAILABLE,
			"leadership not confirmed (Redis unreachable?), try again",
			rq.tag);
		return;
	}
	if ((verbs[rq.verb].flags & CHANGES) &&
	    !dl_store_available(c->srv->store)) {
		/* just took over, the link a moment away: held, not refused
		 * (executed again once it is up or failed) */
		if (dl_store_opening(c->srv->store) &&
		    dl_conn_park(c, line, len) == 0)
			return;
		dl_conn_error(c, DL_EUNAVAILABLE,
			      "persistence is down, try again", rq.tag);
		return;
	}
	verbs[rq.verb].fn(c, &rq);
}

void dl_cmd_event(struct dl_conn *c, const struct dl_event *ev)
{
	static const char *const heads[] = {
		[DL_EVENT_GRANTED] = "* GRANTED",
		[DL_EVENT_TIMEOUT] = "* TIMEOUT",
		[DL_EVENT_EXPIRED] = "* EXPIRED",
		[DL_EVENT_EXPIRING] = "* EXPIRING",
		[DL_EVENT_WAITING] = "* WAITING",
		[DL_EVENT_MOVED] = "* MOVED",
	};
	struct dl_line line = {.kind = DL_LINE_EVENT,
			       .durable = ev->durable,
			       .reentry = ev->reentry,
			       .notify = ev->notify,
			       .req = ev->req,
			       .token = ev->token,
			       .deadline = ev->deadline,
			       .wait_deadline = ev->wait_deadline,
			       .asked_ttl_ms = ev->asked_ttl_ms,
			       .warn_ms = ev->asked_warn_ms,
			       .has_warn = ev->asked_warn,
			       .shared = ev->shared,
			       .limit = (uint16_t)ev->limit,
			       .owner_gen = c->sess.owner_gen};
	struct reply r;

	if (c->multi && dl__cmd_multi_event(c, ev))
		return; /* a step of a multi-lock: not the client's yet */
	dl__cmd_reply_begin(&r, heads[ev->type]);
	fmt_name(&r, &line, ev->name);
	if (ev->type == DL_EVENT_GRANTED) {
		line.kind = DL_LINE_GRANTED_EVENT;
		dl_fmt_u64(&r.f, ev->token);
		fmt_ttl(&r, &line, ev->ttl_ms);
		dl_fmt_kv_u64(&r.f, "holds", ev->holds);
		fmt_proof(c, &r, ev->name, ev->token, ev->deadline);
		if (ev->value.len) { /* said, and kept for a withdrawal */
			line.value_off = (uint16_t)(r.f.len + 7);
			line.value_len = (uint8_t)ev->value.len;
			dl_fmt_kv_str(&r.f, "value", ev->value);
		}
	} else if (ev->type == DL_EVENT_EXPIRED) {
		dl_fmt_u64(&r.f, ev->token);
		if (ev->by.len)
			dl_fmt_kv_str(&r.f, "broken_by", ev->by);
	} else if (ev->type == DL_EVENT_EXPIRING) {
		/* what remains, rewritten if the line waits (conn.h) */
		dl_fmt_u64(&r.f, ev->token);
		fmt_ttl(&r, &line, ev->ttl_ms);
	} else if (ev->type == DL_EVENT_WAITING) {
		line.waiting = 1;
		dl_fmt_u64(&r.f, ev->holds);
		dl_fmt_kv_u64(&r.f, "token", ev->token);
	} else if (ev->type == DL_EVENT_MOVED) {
		dl__cmd_fmt_moved(c, &r.f, ev->name);
	}
	dl__cmd_reply_send(c, &r, ev->tag, &line);
}

/*
 * Persistence went down with lines of c still waiting for it (conn.h).
 * A grant that never became durable is withdrawn: the lock table takes the
 * hold back (and puts a served waiter back at the head of its queue), the
 * LOCK is answered ERR UNAVAILABLE and a * GRANTED event is not sent -- the
 * client goes on waiting and is granted again once Redis is back. A
 * REFRESH is answered ERR UNAVAILABLE and the lease keeps at least the
 * deadline it had: one that moved it later leaves it later (the client,
 * not told of the new one, believes in less), one that would move it
 * earlier was never applied (dl_locktab_refresh). Releases
 * and everything else go out as they are: a release that Redis may not
 * have recorded can only keep a lock busy after a crash, never let two
 * owners in.
 */
static size_t break_line(struct dl_conn *c, const struct dl_line *line,
			 const char *text, size_t len, char *buf)
{
	/* the name and the tag where the line was formatted (reply_send) */
	struct dl_str name = {text + line->name_off, line->name_len};
	struct dl_str tag = {line->tag_len ? text + line->tag_off : NULL,
			     line->tag_len};
	struct dl_fmt f;
	int n, err;

	(void)len;
	if (line->multi || line->member)
		return dl__cmd_multi_break(c, line, name, tag, buf);
	/* News of waiters: maybe for a grant withdrawn on this connection
	 * or another one, later in this walk (found from outside: a waiter
	 * heard of waiters for a grant taken back, never told). Dropped,
	 * and told again once every withdrawal is done, if its lease is
	 * still there (server.c, break_holds). */
	if (line->waiting) {
		struct dl_server *srv = c->srv;

		if (srv->nretell < DL_RETELL_MAX) {
			srv->retell[srv->nretell].len = (uint8_t)name.len;
			memcpy(srv->retell[srv->nretell].name, name.p,
			       name.len);
			srv->retell[srv->nretell++].token = line->token;
		}
		return 0;
	}
	if (line->kind != DL_LINE_GRANTED &&
	    line->kind != DL_LINE_GRANTED_EVENT &&
	    line->kind != DL_LINE_REFRESHED)
		return DL_HELD_KEEP;
	if (line->kind != DL_LINE_REFRESHED) {
		struct dl_requeue rq = {
			.owner_gen = line->owner_gen,
			.req = line->req,
			.notify = line->notify,
			.value = {line->value_len ? text + line->value_off
						  : NULL,
				  line->value_len},
			.ttl_ms = line->asked_ttl_ms,
			.warn_ms = line->warn_ms,
			.has_warn = line->has_warn,
			.wait_deadline = line->wait_deadline,
			.tag = tag,
			.shared = line->shared,
			.limit = line->limit};

		err = dl_locktab_revoke(
			c->srv->tab, &c->sess, name, line->token,
			line->retry	? DL_REVOKE_RETRY
			: line->reentry ? DL_REVOKE_REENTRY
					: DL_REVOKE_NEW,
			line->kind == DL_LINE_GRANTED_EVENT ? &rq : NULL);
		if (line->kind == DL_LINE_GRANTED_EVENT && err == 0)
			return 0; /* waiting again */
		if (line->kind == DL_LINE_GRANTED_EVENT) {
			dl_fmt_init(&f, buf, DL_REPLY_MAX);
			dl_fmt_word(&f, "* TIMEOUT");
			dl_fmt_str(&f, name);
			n = dl_fmt_end(&f, tag);
			return n > 0 ? (size_t)n : 0;
		}
	}
	c->srv->st.errors[-DL_EUNAVAILABLE]++;
	dl_fmt_init(&f, buf, DL_REPLY_MAX);
	dl_fmt_word(&f, "ERR");
	dl_fmt_word(&f, dl_err_word(DL_EUNAVAILABLE));
	dl_fmt_word(
		&f,
		line->kind == DL_LINE_GRANTED
			? "persistence went down before the grant was recorded, try again"
			: "persistence went down before the refresh was recorded, try again");
	n = dl_fmt_end(&f, tag);
	return n > 0 ? (size_t)n : 0;
}

void dl_cmd_released(struct dl_conn *c, const struct dl_line *line,
		     const char *text)
{
	if (line->kind == DL_LINE_REFRESHED && line->shorten)
		dl_locktab_shorten(
			c->srv->tab,
			(struct dl_str){text + line->name_off, line->name_len},
			line->token, line->from_deadline, line->deadline,
			line->asked_ttl_ms);
}

void dl_cmd_break_hold(struct dl_conn *c)
{
	dl_conn_withdraw_held(c, break_line);
}
