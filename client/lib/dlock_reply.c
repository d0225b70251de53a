/* SPDX-License-Identifier: MIT */
/*
 * dlock_reply.c -- libdlock's replies and events (dlock_private.h).
 *
 * Runs on the background thread, with c->mu held, for each line the
 * reader (dlock_io.c) splits off the socket. A line that starts with "*"
 * is an event; any other line is the reply to the oldest request on the
 * FIFO (the server answers in order), whose id= tag it must carry; a
 * mismatch means the stream is out of step and the reader drops the
 * connection. The n lines after "OK STATS n" are the STATS body.
 *
 * Replies complete requests (dlock__req_finish) and keep the lease records
 * true: a grant makes a handle, a confirmation moves the local deadline,
 * NO NOT_HOLDER and * EXPIRED lose the lease; a failed renewal and
 * * EXPIRING put it at risk. What a request given up by
 * its caller still brings is cleaned up here: a grant is UNLOCKed, a
 * QUEUED is CANCELled. The requests by (name, token) of
 * dlock_unlock_token() and dlock_refresh_token() concern leases without a
 * record and touch none: their replies only carry an outcome.
 */
#include "client/lib/dlock_private.h"
#include "proto/desc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- replies ------------------------------------------------------------- */

static int arg_i64(const struct dl_reply *r, int i, int64_t *out)
{
	uint64_t v;

	if (dl_reply_u64(r, i, &v) < 0 || v > (uint64_t)INT64_MAX)
		return -1;
	*out = (int64_t)v;
	return 0;
}

static int is(const struct dl_reply *r, enum dl_reply_kind kind,
	      const char *word)
{
	size_t n = strlen(word);

	return r->kind == kind && r->word.len == n &&
	       memcmp(r->word.p, word, n) == 0;
}

/* Whether a grant came too late to be used: the deadline it gives the
 * lease, counted from when the request was sent, is already inside the
 * lost guard. It happens when the server held the reply through a
 * take-over or a stall of Redis. Handed out, such a lease would be
 * declared lost by the next timer pass while dlock_acquire() said
 * success: the caller would act as the holder of a lease it was told,
 * one instant later, it does not have. */
static int too_late(struct dlock_client *c, const struct dlock__req *q,
		    uint64_t token, int64_t ms)
{
	const struct dlock__lease *l = dlock__lease_find(c, q->name, token);
	int64_t ttl = q->ttl;

	if (l && atomic_load(&l->ttl) > ttl)
		ttl = atomic_load(&l->ttl); /* a reentry keeps the longer */
	return dlock__now() >=
	       q->sent_at + ms - dlock__slack(ms) - dlock__guard(c, ttl);
}

/* holds= of a GRANTED line: the lease's holds with this one, or 0 when
 * the server does not say (one from before it did). */
static uint64_t grant_holds(const struct dl_reply *r)
{
	struct dl_str v;
	uint64_t n;

	if (dl_reply_kv(r, "holds", &v) < 0 || dl_parse_u64(v.p, v.len, &n) < 0)
		return 0;
	return n;
}

/* The holds of lease (name, token) this client had at the server when it
 * executed the request whose reply (or event) is being read: the handles
 * of its lease, and the holds it is giving back or confirming in requests
 * still on the FIFO -- written after that request, since replies come in
 * order, so the server had not read them yet. A hold whose UNLOCK was
 * answered is gone at both ends. */
static uint64_t own_holds(struct dlock_client *c, const char *name,
			  uint64_t token)
{
	const struct dlock__lease *l = dlock__lease_find(c, name, token);
	const struct dlock__req *q;
	uint64_t n = l ? (uint64_t)l->nhandles : 0;

	for (q = c->rq.fifo; q; q = q->next)
		if ((q->op == DLOCK__UNLOCK || q->op == DLOCK__CONFIRM) &&
		    q->token == token && strcmp(q->name, name) == 0)
			n++;
	return n;
}

/* A grant of a lease with more holds than this client's and this one:
 * another client of our owner id holds it (a process that shares the id
 * and its key), and believes it holds it alone. It is no lock for us:
 * give back exactly this hold (an UNLOCK of a "last hold" would go on
 * while answered HELD and release the other's too) and fail the acquire.
 * Waiting would not help: the server never queues an owner behind
 * itself, it would only grant again. A lost reply's hold that a LOCK sent
 * again after a reconnect re-entered looks the same and is refused too;
 * it ends at its TTL. Returns 1 when refused (q is finished). */
static int held_elsewhere(struct dlock_client *c, struct dlock__req *q,
			  uint64_t token, uint64_t holds)
{
	uint64_t mine;

	if (holds == 0 || holds <= (mine = own_holds(c, q->name, token)) + 1)
		return 0;
	dlock__internal(c, DLOCK__UNLOCK, q->name, token, 0);
	snprintf(q->err, sizeof(q->err),
		 "%s is held by owner %s in another process: its lease %" PRIu64
		 " has %" PRIu64 " holds, %" PRIu64
		 " of them this client's; the new one was given back",
		 q->name, c->owner, token, holds, mine + 1);
	dlock__req_finish(c, q,
			  q->abandoned ? DLOCK_ETIMEDOUT : DLOCK_EHELDBYOWNER);
	return 1;
}

/* A grant or confirmation of (q->name, token) for ms, holds (0: not
 * said) that no server may give: token 0, holds past DL_REENTRY_MAX, or a
 * lease longer than asked -- the TTL of q, or of the lease this client
 * holds already under that token (a reentry keeps the longer). A client
 * must survive a hostile or broken server: such a line fails q with
 * DLOCK_EPROTO and drops the connection (c->conn.insane). */
static int insane(struct dlock_client *c, const struct dlock__req *q,
		  uint64_t token, int64_t ms, uint64_t holds, int reentry)
{
	const struct dlock__lease *l = dlock__lease_find(c, q->name, token);
	int64_t most = q->ttl;

	/* a REFRESH sets the lease to its TTL; a LOCK of a lease this
	 * client holds keeps the longer */
	if (reentry && l && atomic_load(&l->ttl) > most)
		most = atomic_load(&l->ttl);
	if (token != 0 && holds <= DL_REENTRY_MAX && (most <= 0 || ms <= most))
		return 0;
	c->conn.insane = 1;
	dlock__why(c, c->addr.addr_i,
		   "it granted %s token %" PRIu64 " for %" PRId64
		   " ms with %" PRIu64 " holds, asked for %" PRId64
		   " ms: no server may, dropped",
		   q->name, token, ms, holds, most);
	return 1;
}

/* A grant, a confirmation or a wait's end for q's lock must name it, and
 * a holds= it gives must count at least this hold: 0, or 1 and the server
 * is dropped (c->conn.insane; found from outside: "OK GRANTED zzz" answering
 * LOCK k was taken for a lease of k, "holds=0" believed, and "* TIMEOUT
 * other" ended the wait for k). */
static int not_of(struct dlock_client *c, const struct dlock__req *q,
		  const struct dl_reply *r)
{
	struct dl_str v;

	if (r->argc >= 1 && r->argv[0].len == strlen(q->name) &&
	    memcmp(r->argv[0].p, q->name, r->argv[0].len) == 0 &&
	    (dl_reply_kv(r, "holds", &v) < 0 || grant_holds(r) > 0))
		return 0;
	c->conn.insane = 1;
	dlock__why(
		c, c->addr.addr_i,
		"it answered a request for %s with \"%.*s\" (another lock, or holds=0): no server may, dropped",
		q->name, (int)(r->argc ? r->argv[0].len : 0),
		r->argc ? r->argv[0].p : "");
	return 1;
}

/* OK GRANTED / OK REFRESHED for a LOCK or its confirmation. */
static void granted(struct dlock_client *c, struct dlock__req *q,
		    uint64_t token, int64_t ms, const struct dl_reply *r)
{
	struct dlock__lease *l;
	int err;

	if (q->abandoned) {
		dlock__cleanup_grant(c, q->name, token);
		dlock__req_finish(c, q, DLOCK_ETIMEDOUT);
		return;
	}
	if (too_late(c, q, token, ms)) {
		/* give it back; ask again while the wait lasts (the server
		 * grants it anew, counted from the new request) */
		dlock__cleanup_grant(c, q->name, token);
		if (q->wait < 0 ||
		    (q->wait > 0 && q->wait_end > dlock__now())) {
			q->op = DLOCK__LOCK;
			/* a new request, with an id of its own: the one given
			 * back must not be found as its grant (found by
			 * review) */
			q->reqid = dlock__request_id(q);
			q->waiters = 0;
			q->deadline = dlock__now() + c->opt.request_timeout_ms;
			if ((err = dlock__req_write(c, q)) < 0)
				dlock__req_finish(c, q, err);
			return;
		}
		dlock__req_finish(c, q, DLOCK_ETIMEDOUT);
		return;
	}
	err = dlock__lease_grant(c, q, token, ms, q->sent_at);
	if (err < 0) {
		dlock__cleanup_grant(c, q->name, token);
	} else if ((l = dlock__lease_find(c, q->name, token)) != NULL) {
		dlock__lease_proof(l, r);
		if (q->waiters) /* told while its grant was confirmed */
			dlock__lease_waiting(c, l, q->waiters);
	}
	dlock__req_finish(c, q, err);
}

/* OK QUEUED for a LOCK (or a multi-lock): it waits for its event; one
 * given up leaves the queue (CANCEL of its name, the first for a
 * multi-lock). */
static void queued(struct dlock_client *c, struct dlock__req *q)
{
	if (q->abandoned) {
		c->conn.crossing++; /* its grant may cross the CANCEL */
		dlock__internal(c, DLOCK__CANCEL, q->name, 0, 0);
		dlock__req_finish(c, q, DLOCK_ETIMEDOUT);
		return;
	}
	q->where = DLOCK__WAITING;
	q->next = c->rq.waiting;
	c->rq.waiting = q;
	q->deadline = q->wait < 0 ? DLOCK__NEVER : q->wait_end;
	if (q->deadline != DLOCK__NEVER)
		q->deadline += c->opt.request_timeout_ms;
	pthread_cond_signal(&q->cv);
}

static int reply_lock(struct dlock_client *c, struct dlock__req *q,
		      const struct dl_reply *r)
{
	uint64_t token;
	int64_t ms;
	int err;

	if (is(r, DL_REPLY_OK, "GRANTED")) {
		if (dl_reply_u64(r, 1, &token) < 0 || arg_i64(r, 2, &ms) < 0 ||
		    not_of(c, q, r)) {
			dlock__req_finish(c, q, DLOCK_EPROTO);
			return 1;
		}
		/* another client's lease may be longer than we asked */
		if (held_elsewhere(c, q, token, grant_holds(r)))
			return 1;
		/* Any reentry (holds 2 or more) keeps the longer deadline:
		 * its other hold may be one this client gave up and is giving
		 * back (found from outside: a wait cancelled, then a LOCK with
		 * a shorter TTL, was taken for a broken server and the
		 * connection dropped). Counted with the TTL asked, the lease
		 * never counts on more than it asked, whatever a server says.
		 */
		if (grant_holds(r) >= 2 && q->ttl > 0 && ms > q->ttl) {
			const struct dlock__lease *l =
				dlock__lease_find(c, q->name, token);
			int64_t most = l && atomic_load(&l->ttl) > q->ttl
					       ? atomic_load(&l->ttl)
					       : q->ttl;

			if (ms > most)
				ms = most;
		}
		if (insane(c, q, token, ms, grant_holds(r), 1)) {
			dlock__cleanup_grant(c, q->name, token);
			dlock__req_finish(c, q, DLOCK_EPROTO);
			return 1;
		}
		granted(c, q, token, ms, r);
	} else if (is(r, DL_REPLY_OK, "QUEUED")) {
		queued(c, q);
	} else if (is(r, DL_REPLY_NO, "ALREADY_WAITING") && !q->abandoned &&
		   q->retries < 3) {
		/* a LOCK of ours that was given up still waits: the CANCEL
		 * of its clean-up went out before this reply came in */
		q->retries++;
		if ((err = dlock__req_write(c, q)) < 0)
			dlock__req_finish(c, q, err);
	} else {
		dlock__req_finish(c, q, dlock__reply_error(q, r));
	}
	return 1;
}

static int reply_confirm(struct dlock_client *c, struct dlock__req *q,
			 const struct dl_reply *r)
{
	int64_t ms, now = dlock__now();
	int err;

	if (is(r, DL_REPLY_OK, "REFRESHED")) {
		if (arg_i64(r, 1, &ms) < 0 || not_of(c, q, r) ||
		    insane(c, q, q->token, ms, grant_holds(r), 0)) {
			dlock__cleanup_grant(c, q->name, q->token);
			dlock__req_finish(c, q, DLOCK_EPROTO);
			return 1;
		}
		granted(c, q, q->token, ms, r);
	} else if (is(r, DL_REPLY_NO, "NOT_HOLDER") && !q->abandoned &&
		   (q->wait < 0 || q->wait_end > now)) {
		/* expired before we could confirm it: queue again, a new
		 * request */
		q->op = DLOCK__LOCK;
		q->reqid = dlock__request_id(q);
		q->waiters = 0;
		if ((err = dlock__req_write(c, q)) < 0)
			dlock__req_finish(c, q, err);
	} else if (is(r, DL_REPLY_NO, "NOT_HOLDER")) {
		dlock__req_finish(c, q, DLOCK_ETIMEDOUT);
	} else {
		err = dlock__reply_error(q, r);
		dlock__cleanup_grant(c, q->name, q->token);
		dlock__req_finish(c, q, err);
	}
	return 1;
}

static int reply_unlock(struct dlock_client *c, struct dlock__req *q,
			const struct dl_reply *r)
{
	struct dlock__lease *l = dlock__lease_find(c, q->name, q->token);
	int held = l && l->nhandles > 0 && !l->unlocking;
	int err;

	if (is(r, DL_REPLY_OK, "HELD") && q->last_hold && !held &&
	    !dlock__name_acquiring(c, q->name)) {
		/* holds we lost track of (a LOCK sent again after a
		 * reconnect was granted twice, or another client of our
		 * owner's hold that it has not given back yet): give them
		 * back */
		if (q->retries < 3)
			q->retries++;
		if ((err = dlock__req_write(c, q)) < 0)
			dlock__req_finish(c, q, err);
		return 1;
	}
	if (is(r, DL_REPLY_OK, "RELEASED") || is(r, DL_REPLY_OK, "HELD")) {
		if (held && is(r, DL_REPLY_OK, "RELEASED"))
			dlock__lease_lose(c, l, DLOCK_LOST_REJECTED);
		dlock__req_finish(c, q, 0);
		return 1;
	}
	err = dlock__reply_error(q, r);
	if (err == DLOCK_ENOTHOLDER && held && !l->dead) {
		/* One hold of a lease this client still holds, given back to
		 * a server that does not know the lease: Redis may have
		 * forgotten it (grants closed after a loss), and then the
		 * lease is the holder's to reclaim, with the holds left
		 * (nhandles: this one is given back either way). A renewal
		 * written after this UNLOCK decides, as for any renewal
		 * refused: reclaimed, or lost. One in flight already was
		 * written after it (replies come in the order of the
		 * writes). Found by the fault campaign: the library declared
		 * the lease lost at once, while its other hold was held and
		 * its reclaim was on its way. */
		if (!l->refreshing && dlock__lease_renew(c, l) < 0)
			dlock__lease_lose(c, l, DLOCK_LOST_REJECTED);
		err = 0;
	} else if (err == DLOCK_ENOTHOLDER && q->last_hold &&
		   (q->resent || q->retries)) {
		/* released before the connection dropped; or, giving back
		 * holds we lost track of, by another client of our owner
		 * giving back its own first (a race: the lease is gone, as
		 * asked) */
		err = 0;
	}
	dlock__req_finish(c, q, err);
	return 1;
}

void dlock__lease_proof(struct dlock__lease *l, const struct dl_reply *r)
{
	struct dl_str p;
	uint64_t until = 0;

	if (dl_reply_kv(r, "proof", &p) != 0 || p.len != DL_PROOF_LEN ||
	    !dlock__kv_u64(r, "until", UINT64_MAX, &until) || !until)
		return;
	memcpy(l->proof, p.p, DL_PROOF_LEN);
	l->proof[DL_PROOF_LEN] = '\0';
	l->until = until;
}

/* A renewal the server refused as NOT_HOLDER: it does not know the
 * lease. If Redis forgot it (grants closed after a loss), the lease is
 * asked for again with the proof its last grant or refresh gave (RECLAIM,
 * PROTOCOL.md): 1 if that went out, 0 if the lease is lost. Only while
 * this client still counts on it, and once per renewal. */
static int reclaim(struct dlock_client *c, struct dlock__req *q)
{
	struct dlock__lease *l = q->lease;

	if (q->op != DLOCK__RENEW || !l->proof[0] || l->dead || l->unlocking ||
	    l->nhandles == 0 || atomic_load(&l->deadline) <= dlock__now())
		return 0;
	q->op = DLOCK__RECLAIM;
	if (dlock__req_write(c, q) < 0) {
		q->op = DLOCK__RENEW;
		return 0;
	}
	l->refreshing = 1;
	return 1;
}

static int reply_refresh(struct dlock_client *c, struct dlock__req *q,
			 const struct dl_reply *r)
{
	struct dlock__lease *l = q->lease;
	int64_t ms;
	int err;

	if (atomic_load(&l->c) != c) {
		/* the lease went to another partition's connection while
		 * this was on its way (dlock__lease_move): its record is that
		 * one's now, and this answer only ends the request */
		dlock__req_finish(
			c, q,
			r->kind == DL_REPLY_OK ? 0 : dlock__reply_error(q, r));
		return 1;
	}
	if (q->op == DLOCK__RENEW || q->op == DLOCK__RECLAIM)
		l->refreshing = 0;
	if (((is(r, DL_REPLY_OK, "REFRESHED") && arg_i64(r, 1, &ms) == 0) ||
	     (is(r, DL_REPLY_OK, "RECLAIMED") && arg_i64(r, 2, &ms) == 0))) {
		if (insane(c, q, q->token, ms, 0, 0)) {
			dlock__req_finish(c, q, DLOCK_EPROTO);
			return 1;
		}
		if (!l->dead && !l->unlocking)
			dlock__lease_proof(l, r);
		/* a new value (dlock_proclaim): the server has it */
		if (q->value[0] && q->op == DLOCK__REFRESH)
			memcpy(l->value, q->value, sizeof(l->value));
		if (!l->dead && !l->unlocking) {
			/* ms is what remains as the reply is sent, less than
			 * the TTL by the time it waited for Redis: renewals
			 * go on asking for the TTL itself, or every wait
			 * would shorten the lease a little more. */
			atomic_store(&l->ttl, q->ttl > 0 ? q->ttl : ms);
			dlock__lease_confirm(c, l, q, q->sent_at, ms);
		}
		dlock__req_finish(c, q, 0);
		return 1;
	}
	err = dlock__reply_error(q, r);
	if (err == DLOCK_ENOTHOLDER && reclaim(c, q))
		return 1;
	if (err == DLOCK_ENOTHOLDER) {
		if (!l->dead && !l->unlocking && l->nhandles > 0)
			dlock__lease_lose(c, l, DLOCK_LOST_REJECTED);
	} else if (err == DLOCK_EMOVED &&
		   (q->op == DLOCK__RENEW || q->op == DLOCK__RECLAIM) &&
		   !l->dead && !l->unlocking && l->nhandles > 0 &&
		   dlock__move_later(c, l, q->err) == 0) {
		/* its slot went to another partition, and the lease with it
		 * (same token): the router moves it to that partition's
		 * connection, which renews it at once. Neither lost nor at
		 * risk. */
	} else if (q->op == DLOCK__RENEW || q->op == DLOCK__RECLAIM) {
		/* UNAVAILABLE and the like: try again soon; the guard says
		 * when it is too late, and the application hears of the
		 * risk now */
		int64_t retry = atomic_load(&l->ttl) / 10;

		l->renew_at =
			dlock__now() + (retry > DLOCK__RENEW_RETRY_MIN_MS
						? retry
						: DLOCK__RENEW_RETRY_MIN_MS);
		dlock__lease_risk(c, l);
	}
	dlock__req_finish(c, q, err);
	return 1;
}

int dlock__kv_u64(const struct dl_reply *r, const char *key, uint64_t max,
		  uint64_t *out)
{
	struct dl_str v;
	uint64_t n;

	if (dl_reply_kv(r, key, &v) < 0 || dl_parse_u64(v.p, v.len, &n) < 0 ||
	    n > max)
		return 0;
	*out = n;
	return 1;
}

static void reply_status(struct dlock__req *q, const struct dl_reply *r)
{
	struct dl_str state, owner;
	struct dlock_status *st = &q->status;
	uint64_t n;

	memset(st, 0, sizeof(*st));
	if (dl_reply_kv(r, "state", &state) < 0) {
		q->rc = DLOCK_EPROTO;
		return;
	}
	st->held = state.len == 4 && memcmp(state.p, "held", 4) == 0;
	if (dlock__kv_u64(r, "token", UINT64_MAX, &n))
		st->token = n;
	if (dlock__kv_u64(r, "ttl_ms", INT64_MAX, &n))
		st->ttl_ms = (int64_t)n;
	if (dlock__kv_u64(r, "count", UINT32_MAX, &n))
		st->count = (uint32_t)n;
	if (dlock__kv_u64(r, "waiters", UINT32_MAX, &n))
		st->waiters = (uint32_t)n;
	if (st->held && dl_reply_kv(r, "owner", &owner) == 0 &&
	    owner.len < sizeof(st->owner))
		memcpy(st->owner, owner.p, owner.len);
	dlock__status_extra(r, st);
	q->rc = 0;
}

void dlock__status_extra(const struct dl_reply *r, struct dlock_status *st)
{
	struct dl_str v;
	uint64_t n;

	st->limit = 1;
	if (dl_reply_kv(r, "mode", &v) == 0 && v.len < sizeof(st->mode) &&
	    !(v.len == 1 && v.p[0] == '-')) {
		memcpy(st->mode, v.p, v.len);
		st->mode[v.len] = '\0';
	}
	if (dlock__kv_u64(r, "limit", UINT32_MAX, &n) && n >= 1)
		st->limit = (uint32_t)n;
	if (dlock__kv_u64(r, "holders", UINT32_MAX, &n))
		st->holders = (uint32_t)n;
	if (dlock__kv_u64(r, "waiters", UINT32_MAX, &n))
		st->waiters = (uint32_t)n;
	/* STATUS only; a server without lock-delays leaves them 0 */
	if (dlock__kv_u64(r, "delay_ms", INT64_MAX, &n))
		st->delay_ms = (int64_t)n;
	if (dlock__kv_u64(r, "delay_left_ms", INT64_MAX, &n))
		st->delay_left_ms = (int64_t)n;
	if (dlock__kv_u64(r, "closed_ms", INT64_MAX, &n))
		st->closed_ms = (int64_t)n;
	if (dl_reply_kv(r, "value", &v) == 0 && v.len <= DL_VALUE_MAX)
		dl_desc_decode(v.p, v.len, st->value, sizeof(st->value));
}

/* Room in q->stats for `need` more bytes, grown by doubling from `first`;
 * 0 when it cannot grow (the line is then left out). */
static int stats_room(struct dlock__req *q, size_t need, size_t first)
{
	size_t cap;
	char *p;

	if (q->stats_len + need <= q->stats_cap)
		return 1;
	cap = q->stats_cap ? q->stats_cap * 2 : first;
	while (cap < q->stats_len + need)
		cap *= 2;
	if (!(p = realloc(q->stats, cap)))
		return 0;
	q->stats = p;
	q->stats_cap = cap;
	return 1;
}

static void lockall_body(struct dlock_client *c, struct dlock__req *q);

/* A line of a STATS body, "key value", kept as "key\0value\0"; or of a
 * LOCKS, HOLDERS or multi-lock's body, kept whole ("line\0"). */
static void stats_line(struct dlock_client *c, const char *line, size_t len)
{
	struct dlock__req *q = c->rq.stats_req;
	const char *sp = memchr(line, ' ', len);
	size_t need = len + 2;
	size_t most = q->op == DLOCK__MAP ? DLOCK__MAP_MAX : DLOCK__STATS_MAX;

	if ((q->op == DLOCK__LOCKS || q->op == DLOCK__HOLDERS ||
	     q->op == DLOCK__LOCKALL || q->op == DLOCK__MAP) &&
	    sp && q->stats_len + need <= most) {
		if (stats_room(q, need, 4096)) {
			memcpy(q->stats + q->stats_len, line, len);
			q->stats[q->stats_len + len] = '\0';
			q->stats_len += len + 1;
			q->stats_n++;
		}
		sp = NULL; /* kept */
	}
	if (sp && q->stats_len + need <= DLOCK__STATS_MAX &&
	    stats_room(q, need, 2048)) {
		size_t k = (size_t)(sp - line);

		memcpy(q->stats + q->stats_len, line, k);
		q->stats[q->stats_len + k] = '\0';
		memcpy(q->stats + q->stats_len + k + 1, sp + 1, len - k - 1);
		q->stats[q->stats_len + len] = '\0';
		q->stats_len += len + 1;
		q->stats_n++;
	}
	if (--c->rq.stats_left == 0) {
		c->rq.stats_req = NULL;
		if (q->op == DLOCK__LOCKALL)
			lockall_body(c, q);
		else
			dlock__req_finish(c, q, 0);
	}
}

/* ---- the reply of each request type ------------------------------------- */

/*
 * A handler reads the reply to its request type (reply_lock and the
 * others above, which take every reply, are handlers too). It finishes q and
 * returns 1, or returns 0 when the reply is not one it takes (a NO, an
 * ERR, or an OK of another word): reply() then fails q with the error
 * the reply names (dlock__reply_error). The table below maps each request
 * type to its handler, as server/cmd.c maps verbs.
 */
typedef int (*reply_fn)(struct dlock_client *c, struct dlock__req *q,
			const struct dl_reply *r);

/* dlock_unlock_token(): no lease record to keep true, just the outcome
 * (the holds left). */
static int on_unlock_token(struct dlock_client *c, struct dlock__req *q,
			   const struct dl_reply *r)
{
	uint64_t n;

	if (is(r, DL_REPLY_OK, "RELEASED")) {
		q->r_value = 0;
		dlock__req_finish(c, q, 0);
		return 1;
	}
	if (!is(r, DL_REPLY_OK, "HELD"))
		return 0;
	if (dl_reply_u64(r, 1, &n) < 0 || n == 0 || n > UINT32_MAX) {
		dlock__req_finish(c, q, DLOCK_EPROTO);
		return 1;
	}
	q->r_value = n;
	dlock__req_finish(c, q, 0);
	return 1;
}

/* dlock_refresh_token(): the TTL granted. */
static int on_refresh_token(struct dlock_client *c, struct dlock__req *q,
			    const struct dl_reply *r)
{
	int64_t ms;

	if (!is(r, DL_REPLY_OK, "REFRESHED"))
		return 0;
	if (arg_i64(r, 1, &ms) < 0) {
		dlock__req_finish(c, q, DLOCK_EPROTO);
		return 1;
	}
	q->r_value = (uint64_t)ms;
	dlock__req_finish(c, q, 0);
	return 1;
}

/* HELLO's version= is 0.4.0 or later: the server takes request ids (LOCK
 * req=); a server of 0.3 would refuse every LOCK that carried one. */
static int takes_req(const struct dl_reply *r)
{
	struct dl_str v;
	uint64_t major = 0, minor = 0;
	size_t i = 0;

	if (dl_reply_kv(r, "version", &v) < 0)
		return 0;
	while (i < v.len && v.p[i] >= '0' && v.p[i] <= '9' && major < 1000)
		major = major * 10 + (uint64_t)(v.p[i++] - '0');
	if (i == 0 || i >= v.len || v.p[i++] != '.')
		return 0;
	while (i < v.len && v.p[i] >= '0' && v.p[i] <= '9' && minor < 1000)
		minor = minor * 10 + (uint64_t)(v.p[i++] - '0');
	return major > 0 || minor >= 4;
}

static int on_hello(struct dlock_client *c, struct dlock__req *q,
		    const struct dl_reply *r)
{
	struct dl_str v;
	uint64_t n;

	if (r->kind != DL_REPLY_OK)
		return 0;
	if (dl_reply_kv(r, "default_ttl_ms", &v) == 0 &&
	    dl_parse_u64(v.p, v.len, &n) == 0 && n > 0 &&
	    n <= DL_DURATION_MAX_MS)
		c->hello.default_ttl = (int64_t)n;
	/* the secret of our owner, to present on every reconnect */
	if (dl_reply_kv(r, "key", &v) == 0 &&
	    dl_check_owner_secret(v.p, v.len) == 0) {
		memcpy(c->owner_key, v.p, v.len);
		c->owner_key[v.len] = '\0';
	}
	/* AUTH is required and was not given: the server says so, and
	 * (since 0.3) tells no owner to an unauthenticated connection; a
	 * user without a secret may be known by its uid (unix socket), and
	 * then has an owner */
	c->hello.auth_required = dl_reply_kv(r, "auth", &v) == 0 &&
				 v.len == 8 &&
				 memcmp(v.p, "required", 8) == 0 &&
				 (dl_reply_kv(r, "owner", &v) != 0 ||
				  (!c->password && !c->user));
	if (dl_reply_kv(r, "role", &v) == 0 && v.len == 7 &&
	    memcmp(v.p, "standby", 7) == 0)
		atomic_store(&c->hello.role, DLOCK__ROLE_STANDBY);
	else if (dl_reply_kv(r, "role", &v) == 0 && v.len == 6 &&
		 memcmp(v.p, "active", 6) == 0)
		atomic_store(&c->hello.role, DLOCK__ROLE_ACTIVE);
	else
		atomic_store(&c->hello.role, DLOCK__ROLE_UNKNOWN);
	c->hello.takes_req = takes_req(r);
	c->conn.backoff = DLOCK__BACKOFF_MIN_MS; /* a good connection */
	c->addr.failed_i = -1;
	dlock__req_finish(c, q, 0);
	return 1;
}

/* A server that does not know descriptions (dlockd 0.3) refuses them:
 * say nothing more, fail nothing. */
static int on_describe(struct dlock_client *c, struct dlock__req *q,
		       const struct dl_reply *r)
{
	if (r->kind != DL_REPLY_OK)
		c->desc.refused = 1;
	dlock__req_finish(c, q, 0);
	return 1;
}

static int on_check(struct dlock_client *c, struct dlock__req *q,
		    const struct dl_reply *r)
{
	int64_t ms;

	if (is(r, DL_REPLY_OK, "VALID") && arg_i64(r, 2, &ms) == 0) {
		q->r_value = (uint64_t)ms;
		dlock__req_finish(c, q, 0);
		return 1;
	}
	if (is(r, DL_REPLY_NO, "STALE"))
		dl_reply_u64(r, 1, &q->r_value); /* the holder's token */
	return 0;
}

static int on_break(struct dlock_client *c, struct dlock__req *q,
		    const struct dl_reply *r)
{
	if (is(r, DL_REPLY_OK, "BROKEN")) {
		dlock__req_finish(c, q, 0);
		return 1;
	}
	if (is(r, DL_REPLY_NO, "STALE"))
		dl_reply_u64(r, 1, &q->r_value); /* the holder's token */
	return 0;
}

static int on_status(struct dlock_client *c, struct dlock__req *q,
		     const struct dl_reply *r)
{
	if (!is(r, DL_REPLY_OK, "STATUS"))
		return 0;
	reply_status(q, r);
	dlock__req_finish(c, q, q->rc);
	return 1;
}

/* A reply whose n body lines follow (stats_line() keeps them). */
static void expect_body(struct dlock_client *c, struct dlock__req *q,
			uint64_t n)
{
	if (n > DLOCK__BODY_LINES_MAX) {
		c->conn.insane = 1;
		dlock__why(c, c->addr.addr_i,
			   "it announced a reply of %" PRIu64
			   " lines, more than any server sends: dropped",
			   n);
		dlock__req_finish(c, q, DLOCK_EPROTO);
		return;
	}
	if (n == 0) {
		dlock__req_finish(c, q, 0);
		return;
	}
	c->rq.stats_req = q;
	c->rq.stats_left = n;
}

/* OK HOLDERS <name> <n> holders= waiters= mode= limit= more= */
static int on_holders(struct dlock_client *c, struct dlock__req *q,
		      const struct dl_reply *r)
{
	struct dl_str v;
	uint64_t n;

	if (!is(r, DL_REPLY_OK, "HOLDERS"))
		return 0;
	memset(&q->status, 0, sizeof(q->status));
	dlock__status_extra(r, &q->status);
	q->status.held = q->status.holders > 0;
	if (dl_reply_u64(r, 1, &n) < 0 || dl_reply_kv(r, "more", &v) < 0 ||
	    dl_parse_u64(v.p, v.len, &q->r_value) < 0)
		dlock__req_finish(c, q, DLOCK_EPROTO);
	else
		expect_body(c, q, n);
	return 1;
}

/* OK LOCKS <n> more=<m> */
static int on_locks(struct dlock_client *c, struct dlock__req *q,
		    const struct dl_reply *r)
{
	struct dl_str v;
	uint64_t n;

	if (!is(r, DL_REPLY_OK, "LOCKS"))
		return 0;
	if (dl_reply_kv(r, "more", &v) < 0 ||
	    dl_parse_u64(v.p, v.len, &q->r_value) < 0 ||
	    dl_reply_u64(r, 0, &n) < 0)
		dlock__req_finish(c, q, DLOCK_EPROTO);
	else
		expect_body(c, q, n);
	return 1;
}

/* OK STATS <n> */
static int on_stats(struct dlock_client *c, struct dlock__req *q,
		    const struct dl_reply *r)
{
	uint64_t n;

	if (!is(r, DL_REPLY_OK, "STATS"))
		return 0;
	if (dl_reply_u64(r, 0, &n) < 0)
		dlock__req_finish(c, q, DLOCK_EPROTO);
	else
		expect_body(c, q, n);
	return 1;
}

/* OK MAP <epoch> <n>: the epoch, then n body lines (part, slots) */
static int on_map(struct dlock_client *c, struct dlock__req *q,
		  const struct dl_reply *r)
{
	uint64_t n;

	if (!is(r, DL_REPLY_OK, "MAP"))
		return 0;
	if (dl_reply_u64(r, 0, &q->r_value) < 0 || dl_reply_u64(r, 1, &n) < 0)
		dlock__req_finish(c, q, DLOCK_EPROTO);
	else
		expect_body(c, q, n);
	return 1;
}

/* OK PARTITION epoch=<e> [to=<partition>]: the words, for the caller */
static int on_partition(struct dlock_client *c, struct dlock__req *q,
			const struct dl_reply *r)
{
	size_t n = r->rest.len < sizeof(q->after) - 1 ? r->rest.len
						      : sizeof(q->after) - 1;

	if (!is(r, DL_REPLY_OK, "PARTITION"))
		return 0;
	memcpy(q->after, r->rest.p, n);
	q->after[n] = '\0';
	dlock__req_finish(c, q, 0);
	return 1;
}

/* AUTH, PING, CANCEL: any OK. */
static int on_ok(struct dlock_client *c, struct dlock__req *q,
		 const struct dl_reply *r)
{
	if (r->kind != DL_REPLY_OK)
		return 0;
	dlock__req_finish(c, q, 0);
	return 1;
}

/* ---- multi-locks -------------------------------------------------------- */

/*
 * A multi-lock (dlock_acquire_all) is one LOCKALL request: OK LOCKED
 * <first> <n> and its n body lines grant every name at once, counted
 * from when the request was sent; OK QUEUED makes it wait like a LOCK,
 * and its end is an event: * LOCKED with the same body (then each grant
 * is confirmed with a REFRESH, MCONFIRM, one after the other, as a "*
 * GRANTED" is), * TIMEOUT, or * FAILED <first> <what a LOCK would have
 * been answered>. Its grants stay the request's until the caller has
 * their handles: any other end gives them back (dlock__req_finish).
 */

static int str_is(struct dl_str w, const char *s)
{
	return w.len == strlen(s) && memcmp(w.p, s, w.len) == 0;
}

static int wait_left(const struct dlock__req *q)
{
	return q->wait < 0 || (q->wait > 0 && q->wait_end > dlock__now());
}

/* The grants came too late, or one ended before it was confirmed: give
 * them back and ask again while the wait lasts, as a new request (the
 * grants given back must not be found as its own). */
static void lockall_again(struct dlock_client *c, struct dlock__req *q)
{
	int err;

	dlock__multi_giveback(c, q);
	if (!wait_left(q) || q->abandoned) {
		dlock__req_finish(c, q, DLOCK_ETIMEDOUT);
		return;
	}
	q->op = DLOCK__LOCKALL;
	q->reqid = dlock__request_id(q);
	q->multi->from_event = 0;
	q->multi->ci = 0;
	q->deadline = dlock__now() + c->opt.request_timeout_ms;
	if ((err = dlock__req_write(c, q)) < 0)
		dlock__req_finish(c, q, err);
}

static void multi_proof(struct dlock__multi *m, int i, const struct dl_reply *r)
{
	struct dl_str p;
	uint64_t until = 0;

	if (dl_reply_kv(r, "proof", &p) != 0 || p.len != DL_PROOF_LEN ||
	    !dlock__kv_u64(r, "until", UINT64_MAX, &until) || !until)
		return;
	memcpy(m->proof[i], p.p, DL_PROOF_LEN);
	m->proof[i][DL_PROOF_LEN] = '\0';
	m->until[i] = until;
}

/* Undo a handle lockall_done made (out of memory for the next). */
static void handle_drop(struct dlock_client *c, dlock_lease *h)
{
	struct dlock__lease *l = h->l;
	dlock_lease **pp;

	for (pp = &l->handles; *pp && *pp != h; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = h->next;
	if (--l->nhandles == 0) {
		l->dead = 1;
		dlock__lease_unlink(c, l);
	}
	dlock__lease_unref(l);
	free(h);
}

/* Every grant is known, with the moment it counts from: the caller's
 * lease records and handles, or given back. */
static void lockall_done(struct dlock_client *c, struct dlock__req *q)
{
	struct dlock__multi *m = q->multi;
	int64_t now = dlock__now();
	int i, j, err = 0;

	if (q->abandoned || m->absorb) {
		dlock__req_finish(c, q, DLOCK_ETIMEDOUT); /* gives back */
		return;
	}
	for (i = 0; i < m->n; i++) {
		if (now >= m->sent[i] + m->ms[i] - dlock__slack(m->ms[i]) -
				   dlock__guard(c, q->ttl)) {
			lockall_again(c, q); /* too late: see too_late() */
			return;
		}
	}
	for (i = 0; i < m->n && err == 0; i++) {
		/* dlock__lease_grant makes the lease of q->name */
		snprintf(q->name, sizeof(q->name), "%s", m->names[i]);
		err = dlock__lease_grant(c, q, m->tokens[i], m->ms[i],
					 m->sent[i]);
		if (err == 0) {
			m->handles[i] = q->handle;
			if (m->proof[i][0]) {
				memcpy(q->handle->l->proof, m->proof[i],
				       sizeof(m->proof[i]));
				q->handle->l->until = m->until[i];
			}
		}
	}
	snprintf(q->name, sizeof(q->name), "%s", m->names[0]);
	q->handle = NULL;
	if (err < 0) {
		for (j = 0; j < i - 1; j++)
			handle_drop(c, m->handles[j]);
		dlock__req_finish(c, q, err); /* gives them back */
		return;
	}
	m->handed = 1;
	dlock__req_finish(c, q, 0);
}

/* The server said what no server may of a multi-lock: drop it. */
static void lockall_insane(struct dlock_client *c, struct dlock__req *q,
			   const char *what)
{
	c->conn.insane = 1;
	dlock__why(c, c->addr.addr_i,
		   "it answered the multi-lock of %s with %s: no server may, "
		   "dropped",
		   q->name, what);
	dlock__req_finish(c, q, DLOCK_EPROTO);
}

/* The n lines of OK LOCKED or * LOCKED are in q->stats: "granted <name>
 * <token> <ttl_ms> holds=1 [proof= until=]", in byte order of the
 * names. */
static void lockall_body(struct dlock_client *c, struct dlock__req *q)
{
	struct dlock__multi *m = q->multi;
	const char *p = q->stats;
	struct dl_reply r;
	struct dl_str v;
	uint64_t token;
	int64_t ms;
	size_t k;
	int i, err;

	if (q->stats_n != (uint64_t)m->n) {
		lockall_insane(c, q, "a body that is not its grants");
		return;
	}
	for (i = 0; i < m->n; i++, p += k + 1) {
		k = strlen(p);
		if (dl_parse_body(p, k, &r) < 0 || !str_is(r.word, "granted") ||
		    r.argc < 3 || r.argv[0].len > DL_NAME_MAX ||
		    dl_reply_u64(&r, 1, &token) < 0 || token == 0 ||
		    arg_i64(&r, 2, &ms) < 0 || (q->ttl > 0 && ms > q->ttl) ||
		    (dl_reply_kv(&r, "holds", &v) == 0 && grant_holds(&r) != 1))
			break;
		if (m->absorb) {
			memcpy(m->names[i], r.argv[0].p, r.argv[0].len);
			m->names[i][r.argv[0].len] = '\0';
		} else if (!str_is(r.argv[0], m->names[i])) {
			break;
		}
		m->tokens[i] = token;
		m->ms[i] = ms;
		m->sent[i] = q->sent_at;
		m->proof[i][0] = '\0';
		multi_proof(m, i, &r);
		m->ngrants = i + 1;
	}
	q->stats_len = 0;
	q->stats_n = 0;
	if (i < m->n) {
		lockall_insane(c, q, "a grant it did not ask for");
		return;
	}
	if (!m->from_event || q->abandoned || m->absorb) {
		lockall_done(c, q);
		return;
	}
	/* * LOCKED: the TTLs started before the event reached us */
	m->ci = 0;
	q->op = DLOCK__MCONFIRM;
	q->deadline = dlock__now() + c->opt.request_timeout_ms;
	if ((err = dlock__req_write(c, q)) < 0)
		dlock__req_finish(c, q, err);
}

static int reply_lockall(struct dlock_client *c, struct dlock__req *q,
			 const struct dl_reply *r)
{
	uint64_t n;
	int err;

	if (is(r, DL_REPLY_OK, "LOCKED")) {
		if (dl_reply_u64(r, 1, &n) < 0 || n != (uint64_t)q->multi->n ||
		    not_of(c, q, r)) {
			lockall_insane(c, q, "another count or name");
			return 1;
		}
		q->multi->from_event = 0;
		expect_body(c, q, n);
	} else if (is(r, DL_REPLY_OK, "QUEUED")) {
		queued(c, q);
	} else if (!q->abandoned && q->retries < 3 &&
		   (is(r, DL_REPLY_NO, "ALREADY_WAITING") ||
		    (is(r, DL_REPLY_ERR, "LIMIT") &&
		     memmem(r->rest.p, r->rest.len, "multi-lock", 10)))) {
		/* a multi-lock of ours that was given up still waits: the
		 * CANCEL of its clean-up went out before this reply came in
		 * (the client sends one multi-lock at a time) */
		q->retries++;
		if ((err = dlock__req_write(c, q)) < 0)
			dlock__req_finish(c, q, err);
	} else {
		dlock__req_finish(c, q, dlock__reply_error(q, r));
	}
	return 1;
}

static int reply_mconfirm(struct dlock_client *c, struct dlock__req *q,
			  const struct dl_reply *r)
{
	struct dlock__multi *m = q->multi;
	int64_t ms;
	int err;

	if (is(r, DL_REPLY_OK, "REFRESHED")) {
		if (arg_i64(r, 1, &ms) < 0 || r->argc < 1 ||
		    !str_is(r->argv[0], m->names[m->ci]) ||
		    (q->ttl > 0 && ms > q->ttl)) {
			lockall_insane(c, q, "a confirmation of another lease");
			return 1;
		}
		m->ms[m->ci] = ms;
		m->sent[m->ci] = q->sent_at;
		multi_proof(m, m->ci, r);
		if (q->abandoned) {
			dlock__req_finish(c, q, DLOCK_ETIMEDOUT);
		} else if (++m->ci < m->n) {
			/* each confirm has the request timeout of its own:
			 * one for the chain gave up on 64 names at an 80 ms
			 * round trip, a wait=inf included (found by review) */
			q->deadline = dlock__now() + c->opt.request_timeout_ms;
			if ((err = dlock__req_write(c, q)) < 0)
				dlock__req_finish(c, q, err);
		} else {
			lockall_done(c, q);
		}
	} else if (is(r, DL_REPLY_NO, "NOT_HOLDER")) {
		/* one expired before we could confirm it: all back, and
		 * queue again */
		lockall_again(c, q);
	} else {
		dlock__req_finish(c, q, dlock__reply_error(q, r));
	}
	return 1;
}

/* * LOCKED <first> <n>: the n grant lines follow (lockall_body). One
 * nobody waits for crossed the CANCEL of a multi-lock given up: its body
 * is read by an internal request that gives the grants back. */
static struct dlock__req *waiting_take(struct dlock_client *c,
				       struct dl_str tag);

static void lockall_event(struct dlock_client *c, const struct dl_reply *r,
			  const char *name)
{
	struct dlock__req *q = waiting_take(c, r->tag);
	uint64_t n;

	if (dl_reply_u64(r, 1, &n) < 0 || n < 2 || n > DL_MULTI_MAX ||
	    (q && (!q->multi || n != (uint64_t)q->multi->n))) {
		c->conn.insane = 1;
		dlock__why(c, c->addr.addr_i,
			   "it granted the multi-lock of %s with a count "
			   "not its own: dropped",
			   name);
		if (q)
			dlock__req_finish(c, q, DLOCK_EPROTO);
		return;
	}
	if (!q) {
		if (!c->conn.crossing ||
		    !(q = dlock__req_new(DLOCK__LOCKALL, name, 1)) ||
		    !(q->multi = calloc(1, sizeof(*q->multi)))) {
			dlock__req_free(q);
			c->conn.insane = 1;
			dlock__why(c, c->addr.addr_i,
				   "it granted %s, which nobody waits for: "
				   "dropped",
				   name);
			return;
		}
		c->conn.crossing--;
		q->multi->n = (int)n;
		q->multi->absorb = 1;
	} else if (not_of(c, q, r)) {
		dlock__req_finish(c, q, DLOCK_EPROTO);
		return;
	}
	q->multi->from_event = 1;
	q->where = DLOCK__SENT; /* a caller that gives up now: abandoned */
	c->rq.stats_req = q;
	c->rq.stats_left = n;
}

/* The reply column of DLOCK__OPS (dlock_private.h). */
static const reply_fn replies[] = {
#define X(op, verb, args, reply) [DLOCK__##op] = reply,
	DLOCK__OPS(X)
#undef X
};

static void reply(struct dlock_client *c, struct dlock__req *q,
		  const struct dl_reply *r)
{
	if ((size_t)q->op < sizeof(replies) / sizeof(replies[0]) &&
	    replies[q->op] && replies[q->op](c, q, r))
		return;
	/* NO or ERR (an unexpected OK word is DLOCK_EPROTO) */
	dlock__req_finish(c, q, dlock__reply_error(q, r));
}

/* ---- events -------------------------------------------------------------- */

static struct dlock__req *waiting_take(struct dlock_client *c,
				       struct dl_str tag)
{
	struct dlock__req *q, *prev = NULL;

	if (tag.len == 0)
		return NULL;
	for (q = c->rq.waiting; q; prev = q, q = q->next) {
		if (strlen(q->tag) != tag.len || memcmp(q->tag, tag.p, tag.len))
			continue;
		if (prev)
			prev->next = q->next;
		else
			c->rq.waiting = q->next;
		q->next = NULL;
		q->where = DLOCK__NOWHERE;
		return q;
	}
	return NULL;
}

/* A waiting LOCK's * MOVED: its NO MOVED line, for the router to read
 * (dlock_last_error()). */
static void moved_event(struct dlock_client *c, struct dlock__req *q,
			const struct dl_reply *r)
{
	const char *to = r->argc >= 2 ? r->argv[1].p : "";
	size_t n = r->argc >= 2 ? (size_t)(r->rest.p + r->rest.len - to) : 0;

	if (not_of(c, q, r)) {
		dlock__req_finish(c, q, DLOCK_EPROTO);
		return;
	}
	snprintf(q->err, sizeof(q->err), "NO MOVED %.*s", (int)n, to);
	dlock__req_finish(c, q, DLOCK_EMOVED);
}

static void event(struct dlock_client *c, const struct dl_reply *r)
{
	char name[DL_NAME_MAX + 1];
	struct dlock__req *q;
	struct dlock__lease *l;
	uint64_t token, holds;
	int err;

	struct dl_str v;

	if (is(r, DL_REPLY_EVENT, "BYE")) {
		/* not-active: the server stepped down and names the
		 * active; the reconnect goes there. */
		if (dl_reply_kv(r, "active", &v) == 0)
			dlock__hint(c, v);
		return;
	}
	if (dlock__watch_event(c, r))
		return;
	if (r->argc < 1 || r->argv[0].len > DL_NAME_MAX)
		return; /* something newer than us */
	memcpy(name, r->argv[0].p, r->argv[0].len);
	name[r->argv[0].len] = '\0';
	if (is(r, DL_REPLY_EVENT, "GRANTED")) {
		if (dl_reply_u64(r, 1, &token) < 0)
			return;
		holds = grant_holds(r);
		if (!(q = waiting_take(c, r->tag))) {
			/* nobody waits: a grant that crossed the CANCEL of a
			 * wait given up, or one nobody asked for */
			if (!c->conn.crossing) {
				c->conn.insane = 1;
				dlock__why(
					c, c->addr.addr_i,
					"it granted %s, which nobody waits for: dropped",
					name);
				return;
			}
			c->conn.crossing--;
			/* give it back, exactly one hold if the lease is
			 * another client's too (held_elsewhere) */
			if (holds > own_holds(c, name, token) + 1)
				dlock__internal(c, DLOCK__UNLOCK, name, token,
						0);
			else
				dlock__cleanup_grant(c, name, token);
			return;
		}
		if (not_of(c, q, r)) {
			dlock__req_finish(c, q, DLOCK_EPROTO);
			return;
		}
		if (held_elsewhere(c, q, token, holds))
			return;
		/* The TTL started when the server granted it, before this
		 * line reached us: confirm with a REFRESH and count the local
		 * deadline from when that was sent. */
		q->token = token;
		q->op = DLOCK__CONFIRM;
		q->deadline = dlock__now() + c->opt.request_timeout_ms;
		if ((err = dlock__req_write(c, q)) < 0) {
			dlock__cleanup_grant(c, name, token);
			dlock__req_finish(c, q, err);
		}
	} else if (is(r, DL_REPLY_EVENT, "TIMEOUT")) {
		if ((q = waiting_take(c, r->tag)) != NULL)
			dlock__req_finish(c, q,
					  not_of(c, q, r) ? DLOCK_EPROTO
							  : DLOCK_ETIMEDOUT);
	} else if (is(r, DL_REPLY_EVENT, "MOVED")) {
		/* * MOVED <name> <partition> <addrs>|- <epoch>: the name went
		 * to another partition while this LOCK waited, and its place
		 * in the queue with it. It ends as a LOCK answered NO MOVED,
		 * which the router sends on (dlock_route.c). */
		if ((q = waiting_take(c, r->tag)) != NULL)
			moved_event(c, q, r);
	} else if (is(r, DL_REPLY_EVENT, "LOCKED")) {
		lockall_event(c, r, name);
	} else if (is(r, DL_REPLY_EVENT, "FAILED")) {
		/* a multi-lock ended without its locks, none held */
		if ((q = waiting_take(c, r->tag)) != NULL)
			dlock__req_finish(c, q,
					  not_of(c, q, r) || !q->multi
						  ? DLOCK_EPROTO
						  : dlock__failed_error(q, r));
	} else if (is(r, DL_REPLY_EVENT, "EXPIRED")) {
		if (dl_reply_u64(r, 1, &token) < 0)
			return;
		l = dlock__lease_find(c, name, token);
		if (l && !l->dead && !l->unlocking && l->nhandles > 0) {
			struct dl_str by;

			if (dl_reply_kv(r, "broken_by", &by) == 0 &&
			    by.len < sizeof(l->broken_by))
				snprintf(l->broken_by, sizeof(l->broken_by),
					 "%.*s", (int)by.len, by.p);
			dlock__lease_lose(c, l, DLOCK_LOST_EXPIRED);
		}
	} else if (is(r, DL_REPLY_EVENT, "EXPIRING")) {
		/* the lease's warning (LOCK warn=): not refreshed in time */
		if (dl_reply_u64(r, 1, &token) < 0)
			return;
		if ((l = dlock__lease_find(c, name, token)) != NULL)
			dlock__lease_risk(c, l);
	} else if (is(r, DL_REPLY_EVENT, "WAITING")) {
		/* others wait (LOCK notify=waiters): * WAITING <name> <n>
		 * token=<t>; one for a lease we do not hold (given back
		 * meanwhile) is nothing */
		uint64_t n;

		if (dl_reply_u64(r, 1, &n) < 0 ||
		    !dlock__kv_u64(r, "token", UINT64_MAX, &token) || n == 0)
			return;
		if (n > UINT32_MAX)
			n = UINT32_MAX;
		if ((l = dlock__lease_find(c, name, token)) != NULL) {
			dlock__lease_waiting(c, l, (uint32_t)n);
			return;
		}
		/* a waiter's grant, told right after its * GRANTED: the
		 * lease is ours once its CONFIRM is answered */
		for (q = c->rq.fifo; q; q = q->next)
			if (q->op == DLOCK__CONFIRM && q->token == token &&
			    strcmp(q->name, name) == 0)
				q->waiters = (uint32_t)n;
	}
}

/* A standby's answer (its HELLO, or ERR NOT_ACTIVE): note where the
 * active is; the connection is dropped and nothing sent on it counts
 * (unless options.standby_ok: then it is an answer like any other). */
static int standby_reply(struct dlock_client *c, const struct dlock__req *q,
			 const struct dl_reply *r)
{
	struct dl_str v;

	size_t n;

	if (c->opt.standby_ok)
		return 0; /* a health check: the standby's answers are ours */
	if (is(r, DL_REPLY_ERR, "NOT_ACTIVE")) {
		/* ERR NOT_ACTIVE active=<host:port> <text> */
		v = r->rest;
		if (v.len > 7 && memcmp(v.p, "active=", 7) == 0) {
			v.p += 7;
			v.len -= 7;
			for (n = 0; n < v.len && v.p[n] != ' '; n++)
				;
			v.len = n;
		} else {
			v.len = 0;
		}
	} else if (q->op == DLOCK__HELLO && r->kind == DL_REPLY_OK &&
		   dl_reply_kv(r, "role", &v) == 0 && v.len == 7 &&
		   memcmp(v.p, "standby", 7) == 0) {
		if (dl_reply_kv(r, "active", &v) != 0)
			v.len = 0;
	} else {
		return 0;
	}
	c->addr.standby = 1;
	dlock__hint(c, v);
	if (v.len && !(v.len == 1 && v.p[0] == '-'))
		dlock__why(c, c->addr.addr_i, "a standby (the active: %.*s)",
			   (int)v.len, v.p);
	else
		dlock__why(c, c->addr.addr_i,
			   "a standby, and no active is known");
	return 1;
}

/* Who the client is connected to, for a message. */
static const char *here(const struct dlock_client *c, char *buf, size_t len)
{
	if (c->addr.names[c->addr.addr_i][0])
		return c->addr.names[c->addr.addr_i];
	if (c->opt.unix_path)
		return c->opt.unix_path;
	snprintf(buf, len, "%s:%d", c->opt.host ? c->opt.host : "?",
		 c->opt.port);
	return buf;
}

/* HELLO names the server's cluster: the first id met is the client's
 * (unless options.cluster set it); a server that names another is of
 * another lock table, and is refused like a standby, before anything
 * else is sent to it (on a reconnect the client is in state DLOCK__GREETING:
 * nothing was sent behind HELLO, and dlock__io_hello_ok runs only once this
 * check has passed). But the server the id was learnt from, naming a new
 * one, restarted as another lock table (a memory-only daemon, a new
 * keyspace): there is no other table to fail over to, and the leases it
 * does not know are refused there (REFRESH: NOT_HOLDER); its new id is
 * the client's. 1: refused. */
static int cluster_reply(struct dlock_client *c, const struct dlock__req *q,
			 const struct dl_reply *r)
{
	char buf[DLOCK__SERVER_NAME_MAX];
	const char *at;
	struct dl_str v;

	if (q->op != DLOCK__HELLO || r->kind != DL_REPLY_OK ||
	    dl_reply_kv(r, "cluster", &v) != 0 || (v.len == 1 && v.p[0] == '-'))
		return 0; /* 0.3 and before, or a standby that does not know */
	at = here(c, buf, sizeof(buf));
	if (!c->hello.cluster[0] && v.len == DL_CLUSTER_ID_LEN) {
		memcpy(c->hello.cluster, v.p, v.len);
		c->hello.cluster[v.len] = '\0';
		snprintf(c->hello.cluster_from, sizeof(c->hello.cluster_from),
			 "%s", at);
	}
	if (!c->opt.cluster && v.len == DL_CLUSTER_ID_LEN &&
	    strcmp(at, c->hello.cluster_from) == 0) {
		memcpy(c->hello.cluster, v.p, v.len);
		c->hello.cluster[v.len] = '\0';
	}
	if (v.len == strlen(c->hello.cluster) &&
	    memcmp(v.p, c->hello.cluster, v.len) == 0) {
		c->hello.cluster_refused = 0;
		return 0;
	}
	c->hello.cluster_refused++;
	c->addr.standby = 1; /* to the next server */
	c->addr.hint_i = -1;
	if (c->hello.cluster_from[0])
		dlock__why(
			c, c->addr.addr_i,
			"servers %s and %s are two clusters (ids %s, %.*s): check their redis URL, db and prefix",
			c->hello.cluster_from, at, c->hello.cluster,
			(int)(v.len > 64 ? 64 : v.len), v.p);
	else
		dlock__why(
			c, c->addr.addr_i,
			"server %s is of cluster %.*s, not %s (the cluster asked for): check its redis URL, db and prefix",
			at, (int)(v.len > 64 ? 64 : v.len), v.p,
			c->hello.cluster);
	return 1;
}

int dlock__line_in(struct dlock_client *c, char *line, size_t len)
{
	struct dl_reply r;
	struct dlock__req *q;

	if (c->rq.stats_req) {
		stats_line(c, line, len);
		if (c->conn.insane) {
			c->conn.insane = 0;
			return -1; /* a multi-lock's body no server may send */
		}
		return 0;
	}
	if (dl_parse_reply(line, len, &r) < 0)
		return -1;
	if (r.kind == DL_REPLY_EVENT) {
		event(c, &r);
		if (c->conn.insane) {
			c->conn.insane = 0;
			return -1; /* as for a reply, below */
		}
		return 0;
	}
	if (!(q = c->rq.fifo))
		return -1; /* a reply to nothing */
	if (r.tag.len &&
	    (strlen(q->tag) != r.tag.len || memcmp(q->tag, r.tag.p, r.tag.len)))
		return -1;
	if (standby_reply(c, q, &r))
		return -1; /* to the active: drop, reconnect there */
	if (cluster_reply(c, q, &r))
		return -1; /* another cluster: drop, to the next */
	dlock__list_pop(&c->rq.fifo, &c->rq.fifo_tail); /* q, the oldest */
	if (q->op == DLOCK__HELLO && c->conn.state == DLOCK__GREETING) {
		/* a reconnect's: nothing else was sent behind it (dlock_io.c)
		 */
		if (r.kind != DL_REPLY_OK) {
			/* NO DENIED <owner> need=key: the owner's id is
			 * another client's here; drop, try again later */
			dlock__req_finish(c, q, dlock__reply_error(q, &r));
			c->conn.refused = 1;
			return -1;
		}
		reply(c, q, &r);
		dlock__io_hello_ok(c);
		return 0;
	}
	reply(c, q, &r);
	if (c->conn.insane) {
		c->conn.insane = 0;
		return -1; /* a server that says what none may: drop it */
	}
	return 0;
}
