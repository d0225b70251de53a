/* SPDX-License-Identifier: MIT */
/*
 * cmd_multi.c -- several locks at once: LOCK <name> <name> ... is granted
 * all or none.
 *
 * Design: ordered acquisition, done by the server for the client. The
 * names are taken in byte order, one after the other, each by an ordinary
 * acquire of the lock table (its FIFO queue, its deadlock check, its
 * persistence of a queue place, its request id), holding those taken
 * while it waits for the next. Two multi-locks never wait for each other
 * in a cycle: each waits only for a name above all it holds. Against
 * single LOCKs every wait goes through the table's deadlock check like
 * any other, and a refusal ends the multi-lock. Nothing in the lock table
 * knows of multi-locks: a step's lease is an ordinary lease of the
 * connection's owner, its wait an ordinary waiter.
 *
 * The client hears only the end. Events of a step (its grant, its wait's
 * timeout, the end of a lease taken earlier) are kept from it
 * (dl__cmd_multi_event) and acted on at the next flush point
 * (dl_cmd_multi_run), since the event hook may not call the table. The
 * leases taken while it waits are kept alive (renew_due, at a third of
 * their TTL) and given back if it fails, times out, is cancelled or the
 * connection ends; all of them are refreshed to the TTL asked when the
 * last is granted, and then told in one block:
 *
 *   OK LOCKED <first> <n>         (or * LOCKED, after OK QUEUED)
 *   granted <name> <token> <ttl_ms> holds=1 [proof=<hex> until=<ms>]
 *   ...
 *
 * The block is durable: its header waits for the epoch of the last
 * change, and the lines behind it with it (held.h), so the client sees
 * all n grants once Redis has them all. Withdrawn (Redis declared lost
 * first), every line's lease ends and the header becomes an ERR
 * UNAVAILABLE (or * FAILED) in place of the block (dl__cmd_multi_break).
 *
 * Ownership: a connection has at most one multi-lock in progress
 * (c->multi), on srv->multis while it lives and on srv->multi_todo while
 * a step waits to be run; this file allocates and frees it.
 */
#include <stdlib.h>
#include <string.h>

#include "server/cmd.h"
#include "server/cmd_private.h"
#include "server/clock.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/part/part.h"
#include "server/server.h"

enum multi_state {
	M_WAITING, /* a step's request waits in a queue */
	M_STEP,	   /* its wait was granted: take the next name */
	M_TIMEOUT, /* its wait ran out */
	M_LOST,	   /* a lease it took ended (broken, expired) */
	M_HELD,	   /* its wait was granted as a reentry: its owner came
		      to hold the lock meanwhile */
	M_MOVED,   /* the name it waited for went to another partition
		      (PARTITION MOVE; its place waits there) */
};

struct dl_multi {
	struct dl_conn *c;
	struct dl_multi *next, *prev; /* srv->multis */
	struct dl_multi *tnext;	      /* srv->multi_todo */
	unsigned on_todo : 1;
	unsigned queued : 1;  /* a waiter of it is in name i's queue */
	unsigned durable : 1; /* a grant or refresh of it was durable */
	unsigned state : 3;   /* enum multi_state */
	uint8_t n, i;	      /* names; the next one to take */
	uint8_t lost;	      /* M_LOST: which */
	uint64_t ttl_ms;
	uint64_t wait_deadline; /* monotonic; UINT64_MAX: inf */
	uint64_t req;
	uint64_t renewed_at;	      /* when its leases were last refreshed */
	uint8_t retry[DL_MULTI_MAX];  /* lease i was a retry's (req=) */
	uint64_t token[DL_MULTI_MAX]; /* of the leases taken */
	uint64_t deadline[DL_MULTI_MAX];
	uint16_t off[DL_MULTI_MAX]; /* names[]: name i's offset */
	uint8_t len[DL_MULTI_MAX];
	uint8_t tag_len;
	char tag[DL_TAG_MAX];
	char names[DL_LINE_MAX];
};

static struct dl_str name_of(const struct dl_multi *m, unsigned i)
{
	return (struct dl_str){m->names + m->off[i], m->len[i]};
}

static struct dl_str tag_of(const struct dl_multi *m)
{
	return (struct dl_str){m->tag_len ? m->tag : NULL, m->tag_len};
}

static int str_eq(struct dl_str a, struct dl_str b)
{
	return a.len == b.len && memcmp(a.p, b.p, a.len) == 0;
}

static int by_name(const void *a, const void *b)
{
	const struct dl_str *x = a, *y = b;
	size_t l = x->len < y->len ? x->len : y->len;
	int d = memcmp(x->p, y->p, l);

	return d ? d : (x->len > y->len) - (x->len < y->len);
}

static void arm_renewals(struct dl_server *srv);

static void multi_free(struct dl_multi *m)
{
	struct dl_server *srv = m->c->srv;
	struct dl_multi **pp;

	if (m->on_todo)
		for (pp = &srv->multi_todo; *pp; pp = &(*pp)->tnext)
			if (*pp == m) {
				*pp = m->tnext;
				break;
			}
	if (m->prev)
		m->prev->next = m->next;
	else
		srv->multis = m->next;
	if (m->next)
		m->next->prev = m->prev;
	m->c->multi = NULL;
	free(m);
	arm_renewals(srv);
}

/* Give back every lease taken, one hold each (the client never heard of
 * them; one that ended meanwhile is NOT_HOLDER, harmless: tokens are
 * never reused). */
static void give_back(struct dl_multi *m)
{
	struct dl_conn *c = m->c;
	struct dl_result res;
	unsigned j;

	/* and its wait, still queued when it ends otherwise (found from
	 * outside: after a BREAK of a lease it took, the wait stayed, and
	 * was granted later to a client told that nothing was held) */
	if (m->queued)
		dl_locktab_cancel(c->srv->tab, &c->sess, name_of(m, m->i),
				  &res);
	m->queued = 0;
	for (j = 0; j < m->i; j++)
		(void)dl_locktab_release(c->srv->tab, &c->sess, name_of(m, j),
					 m->token[j], &res);
	m->i = 0;
}

static uint64_t wait_left(const struct dl_multi *m, uint64_t now)
{
	if (m->wait_deadline == UINT64_MAX)
		return DL_WAIT_INF;
	return m->wait_deadline > now ? m->wait_deadline - now : 0;
}

/* The multi-lock ended without its locks, after OK QUEUED: one event. */
static void end_event(struct dl_multi *m, const char *word, struct dl_str at,
		      int err, int cycle)
{
	struct dl_conn *c = m->c;
	struct dl_line line = {.kind = DL_LINE_EVENT};
	struct reply r;

	give_back(m);
	if (!word) {
		dl__cmd_reply_begin(&r, "* TIMEOUT");
		dl_fmt_str(&r.f, name_of(m, 0));
	} else {
		dl__cmd_reply_begin(&r, "* FAILED");
		dl_fmt_str(&r.f, name_of(m, 0));
		dl_fmt_word(&r.f, word);
		dl_fmt_str(&r.f, at);
		if (cycle)
			dl__cmd_fmt_cycle(&r.f, c);
		if (err)
			dl_fmt_word(&r.f, dl_strerror(err));
	}
	dl__cmd_reply_send(c, &r, tag_of(m), &line);
	multi_free(m);
}

/* The holds of lease `token` of `name`: 1 for a lease it took; a retry's
 * (req=) as they are, as a single LOCK's retry says them (another client
 * of the owner may have re-entered it). */
static uint64_t holds_of(struct dl_conn *c, struct dl_str name, uint64_t token)
{
	struct dl_lock_status st;

	dl_locktab_status(c->srv->tab, name, &st);
	return st.held && st.token == token && st.count ? st.count : 1;
}

/* Every name taken: refresh the earlier leases to the TTL asked, then
 * the block. */
static void granted_all(struct dl_multi *m, int replying)
{
	struct dl_conn *c = m->c;
	struct dl_line head = {.kind = replying ? DL_LINE_REPLY : DL_LINE_EVENT,
			       .multi = 1,
			       .owner_gen = c->sess.owner_gen};
	struct dl_result res;
	struct reply r;
	uint64_t now = dl_mono_ms();
	unsigned j;
	int err;

	for (j = 0; j + 1 < m->n; j++) {
		/* taken just now (all at once, or renewed a moment ago): a
		 * refresh would only cost a write. One that ended since is
		 * known by its event (M_LOST), before this runs. */
		if (m->deadline[j] + m->ttl_ms / 10 >= now + m->ttl_ms)
			continue;
		err = dl_locktab_refresh(c->srv->tab, &c->sess, name_of(m, j),
					 m->token[j], m->ttl_ms, &res);
		if (err || res.outcome != DL_REFRESHED) {
			/* it ended meanwhile (a BREAK), or Redis is down */
			if (!replying) {
				end_event(m, err ? dl_err_word(err) : "EXPIRED",
					  name_of(m, j), err, 0);
				return;
			}
			give_back(m);
			if (err)
				dl__cmd_table_error(c, err, name_of(m, j),
						    tag_of(m));
			else
				dl_conn_error(c, DL_EUNAVAILABLE,
					      "a lock it took ended before the "
					      "last was granted, try again",
					      tag_of(m));
			multi_free(m);
			return;
		}
		m->durable |= res.durable;
		m->deadline[j] = res.shorten ? res.from_deadline : res.deadline;
	}
	head.durable = m->durable;
	dl__cmd_reply_begin(&r, replying ? "OK LOCKED" : "* LOCKED");
	dl__cmd_fmt_name(&r, &head, name_of(m, 0));
	dl_fmt_u64(&r.f, m->n);
	dl__cmd_reply_send(c, &r, tag_of(m), &head);
	for (j = 0; j < m->n; j++) {
		struct dl_line line = {.kind = DL_LINE_GRANTED,
				       .member = 1,
				       .retry = m->retry[j],
				       .durable = m->durable,
				       .token = m->token[j],
				       .deadline = m->deadline[j],
				       .owner_gen = c->sess.owner_gen};

		dl__cmd_reply_begin(&r, "granted");
		dl__cmd_fmt_name(&r, &line, name_of(m, j));
		dl_fmt_u64(&r.f, m->token[j]);
		dl__cmd_fmt_ttl(&r, &line,
				m->deadline[j] > now ? m->deadline[j] - now
						     : 0);
		dl_fmt_kv_u64(&r.f, "holds",
			      holds_of(c, name_of(m, j), m->token[j]));
		dl__cmd_fmt_proof(c, &r, name_of(m, j), m->token[j],
				  m->deadline[j]);
		dl__cmd_reply_send(c, &r, DL_STR_NULL, &line);
	}
	c->srv->st.multi_locks++;
	multi_free(m);
}

/* The owner of c holds `name` (a lease not overdue), other than one of
 * this request's own grants asked again (its req=): *token says which.
 * Checked before the acquire, which would re-enter it -- and extend it
 * to this request's TTL (found from outside: a refused multi-lock of
 * ttl=24h left a 2 s lease with a day to live). */
static int held_by_owner(struct dl_conn *c, struct dl_str name, uint64_t req,
			 uint64_t *token)
{
	const struct dl_lock *lk = dl_locktab_find(c->srv->tab, name);
	const struct dl_lease *l;

	for (l = lk ? lk->holders : NULL; l; l = l->next)
		if (l->owner == c->sess.owner) {
			if ((req && dl_lease_req(l) == req) ||
			    !dl_locktab_remaining(c->srv->tab, name, l->token))
				return 0;
			*token = l->token;
			return 1;
		}
	return 0;
}

static void refuse_held(struct dl_multi *m, struct dl_str name, uint64_t token,
			int replying)
{
	struct reply r;

	give_back(m);
	if (!replying) {
		end_event(m, "ALREADY_HELD", name, 0, 0);
		return;
	}
	dl__cmd_reply_begin(&r, "NO ALREADY_HELD");
	dl_fmt_str(&r.f, name);
	dl_fmt_u64(&r.f, token);
	dl__cmd_reply_send(m->c, &r, tag_of(m), NULL);
	multi_free(m);
}

/* The name is this daemon's partition's now (or there are none). */
static int here(struct dl_server *srv, struct dl_str name)
{
	const struct dl_map_part *to;

	return !srv->part ||
	       dl_part_route(srv->part, name, &to) == DL_ROUTE_HERE;
}

/* Take the names from m->i on, until one must wait or all are taken.
 * `replying`: the LOCK is being answered (its reply says how it went);
 * otherwise it was answered OK QUEUED and an event says it. */
static void step(struct dl_multi *m, int replying)
{
	struct dl_conn *c = m->c;
	struct dl_server *srv = c->srv;
	struct dl_result res;
	struct reply r;
	int err;

	while (m->i < m->n) {
		uint64_t now = dl_mono_ms(), held;
		struct dl_str name = name_of(m, m->i);
		struct dl_acquire a = {.name = name,
				       .ttl_ms = m->ttl_ms,
				       .wait_ms = wait_left(m, now),
				       .tag = tag_of(m),
				       .limit = 1,
				       .req = m->req,
				       .walk_budget = dl__cmd_walk_budget(c)};

		if (held_by_owner(c, name, m->req, &held)) {
			refuse_held(m, name, held, replying);
			return;
		}
		if (!here(srv, name)) {
			/* found in review: the names after the one waited for
			 * are in no queue yet, so a PARTITION MOVE of their
			 * slots found no lock there; taken now, a name the
			 * other partition serves would have two holders */
			if (replying) {
				dl_conn_error(
					c, DL_EUNAVAILABLE,
					"a name's slot moved to another partition, try again",
					tag_of(m));
				give_back(m);
				multi_free(m);
			} else {
				end_event(m, "UNAVAILABLE", name,
					  DL_EUNAVAILABLE, 0);
			}
			return;
		}
		err = dl_locktab_acquire(srv->tab, &c->sess, &a, &res);
		if (!err && res.outcome == DL_GRANTED && res.reentry &&
		    !res.retry) {
			/* its owner held it after all (not seen above): give
			 * the hold back */
			uint64_t token = res.token;

			(void)dl_locktab_release(srv->tab, &c->sess, name,
						 token, &res);
			refuse_held(m, name, token, replying);
			return;
		}
		if (!err && res.outcome == DL_GRANTED) {
			m->token[m->i] = res.token;
			m->deadline[m->i] = res.deadline;
			m->retry[m->i] = res.retry;
			m->durable |= res.durable;
			if (m->i++ == 0)
				m->renewed_at = now;
			continue;
		}
		if (!err && res.outcome == DL_QUEUED) {
			m->state = M_WAITING;
			m->queued = 1;
			arm_renewals(srv);
			if (!replying)
				return;
			{
				struct dl_line line = {.kind = DL_LINE_REPLY,
						       .durable = res.durable};

				dl__cmd_reply_begin(&r, "OK QUEUED");
				dl_fmt_str(&r.f, name_of(m, 0));
				dl_fmt_u64(&r.f, res.value);
				dl_fmt_kv_str(&r.f, "at", name);
				dl__cmd_reply_send(c, &r, tag_of(m), &line);
			}
			return;
		}
		/* refused: nothing may be kept */
		if (replying) {
			/* said first: a quota's reply counts what the owner
			 * holds, these leases included (found from outside:
			 * given back first, it said "tokens exhausted") */
			if (err)
				dl__cmd_table_error(c, err, name, tag_of(m));
			else
				dl__cmd_result_reply(c, name, &res, tag_of(m));
			give_back(m);
			multi_free(m);
		} else if (err) {
			end_event(m, dl_err_word(err), name, err, 0);
		} else if (res.outcome == DL_BUSY) {
			end_event(m, NULL, name, 0, 0); /* no wait left */
		} else {
			static const char *const words[] = {
				[DL_ALREADY_WAITING] = "ALREADY_WAITING",
				[DL_LIMIT_MISMATCH] = "LIMIT_MISMATCH",
				[DL_UPGRADE_DEADLOCK] = "UPGRADE_DEADLOCK",
				[DL_DEADLOCK] = "DEADLOCK",
			};
			const char *w =
				res.outcome < sizeof(words) / sizeof(words[0]) &&
						words[res.outcome]
					? words[res.outcome]
					: "REFUSED";

			end_event(m, w, name, 0, res.outcome == DL_DEADLOCK);
		}
		return;
	}
	granted_all(m, replying);
}

/* The same request (its owner, req= and names) sent again on another
 * connection, while the first still waits there: the new one takes over
 * its leases (retries) and its wait (the table moves a wait sent again),
 * and the old one ends, its client told nothing more -- as a single
 * LOCK's wait taken over (found from outside: the old connection kept a
 * multi-lock that could never end, and refused every later one). */
static struct dl_conn *supersede(struct dl_multi *m, char *waited,
				 size_t *waited_len)
{
	struct dl_multi *o;
	struct dl_conn *oc;
	unsigned j;

	*waited_len = 0;
	if (!m->req)
		return NULL;
	for (o = m->c->srv->multis; o; o = o->next) {
		if (o == m || o->req != m->req || o->n != m->n ||
		    o->c->sess.owner != m->c->sess.owner)
			continue;
		for (j = 0; j < m->n; j++)
			if (!str_eq(name_of(o, j), name_of(m, j)))
				break;
		if (j == m->n) {
			oc = o->c;
			if (o->queued) {
				*waited_len = o->len[o->i];
				memcpy(waited, name_of(o, o->i).p, *waited_len);
			}
			multi_free(o); /* its leases and wait are m's now */
			return oc;
		}
	}
	return NULL;
}

/* ... and if m did not take that wait over (it ended first), it leaves
 * the old connection's queue: nobody waits there any more. */
static void superseded_wait(struct dl_conn *oc, const char *waited, size_t len)
{
	struct dl_str name = {waited, len};
	struct dl_waiter *w;
	struct dl_result res;

	for (w = oc->sess.waiters; w; w = w->snext)
		if (str_eq(dl_lock_name(w->lock), name)) {
			dl_locktab_cancel(oc->srv->tab, &oc->sess, name, &res);
			return;
		}
}

/* req, of c's owner, is the id of a multi-lock in progress other than
 * this one sent again (the same names, from another connection: it takes
 * that one over, supersede). Its leases answer a request with their id
 * as a retry, and its wait is taken over by one: a single LOCK, or a
 * multi-lock of other names, with it would share leases that the first
 * gives back when it ends (found by review: the first then never ended,
 * its wait taken). names: sorted; n 0 for a single LOCK. */
static int req_in_use(struct dl_conn *c, uint64_t req,
		      const struct dl_str *names, unsigned n)
{
	const struct dl_multi *o;
	unsigned j;

	if (!req)
		return 0;
	for (o = c->srv->multis; o; o = o->next) {
		if (o->req != req || o->c->sess.owner != c->sess.owner)
			continue;
		if (o->c == c || o->n != n)
			return 1;
		for (j = 0; j < n; j++)
			if (!str_eq(name_of(o, j), names[j]))
				return 1;
	}
	return 0;
}

int dl__cmd_multi_req_in_use(struct dl_conn *c, uint64_t req)
{
	return c->srv->multis && req_in_use(c, req, NULL, 0);
}

void dl__cmd_multi_lock(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_server *srv = c->srv;
	struct dl_str names[DL_MULTI_MAX];
	char waited[DL_NAME_MAX];
	size_t waited_len;
	struct dl_conn *oc;
	struct dl_multi *m;
	size_t at = 0;
	unsigned j;

	if (c->multi) {
		dl_conn_error(c, DL_ELIMIT,
			      "one multi-lock at a time per connection",
			      rq->tag);
		return;
	}
	if (dl__cmd_check_ttl(c, rq))
		return;
	names[0] = rq->name;
	for (j = 1; j < rq->nnames; j++)
		names[j] = rq->more[j - 1];
	qsort(names, rq->nnames, sizeof(names[0]), by_name);
	/* every name, not the first alone (found by review: a user with
	 * lock= on pay/ took secret/x as a second name) */
	for (j = 0; j < rq->nnames; j++)
		if (!dl_access_may(c, DL_RIGHT_LOCK, names[j])) {
			dl__cmd_denied(c, DL_RIGHT_LOCK, names[j], rq->tag);
			return;
		}
	if (req_in_use(c, rq->req, names, rq->nnames)) {
		dl_conn_error(c, DL_EBADARG,
			      "req= of a multi-lock of this owner in progress "
			      "with other names: an id is one request's",
			      rq->tag);
		return;
	}
	if (!(m = calloc(1, sizeof(*m)))) {
		dl_conn_error(c, DL_EINTERNAL, "out of memory", rq->tag);
		return;
	}
	for (j = 0; j < rq->nnames; j++) {
		/* they came in one line: they fit in one */
		memcpy(m->names + at, names[j].p, names[j].len);
		m->off[j] = (uint16_t)at;
		m->len[j] = (uint8_t)names[j].len;
		at += names[j].len;
	}
	m->c = c;
	m->n = rq->nnames;
	m->ttl_ms = rq->has_ttl ? rq->ttl_ms : srv->cfg.default_ttl_ms;
	m->wait_deadline = !rq->has_wait || rq->wait_ms == DL_WAIT_INF
				   ? UINT64_MAX
				   : dl_mono_ms() + rq->wait_ms;
	m->req = rq->req;
	m->tag_len = (uint8_t)rq->tag.len;
	memcpy(m->tag, rq->tag.p ? rq->tag.p : "", rq->tag.len);
	m->next = srv->multis;
	if (m->next)
		m->next->prev = m;
	srv->multis = m;
	c->multi = m;
	/* a name its owner holds refuses it before anything is taken */
	for (j = 0; j < m->n; j++) {
		uint64_t held;

		if (held_by_owner(c, name_of(m, j), m->req, &held)) {
			refuse_held(m, name_of(m, j), held, 1);
			return;
		}
	}
	oc = supersede(m, waited, &waited_len);
	step(m, 1);
	if (oc && waited_len && !oc->multi)
		superseded_wait(oc, waited, waited_len);
}

int dl__cmd_multi_cancel(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_multi *m = c->multi;
	struct dl_result res;
	struct reply r;

	if (!m)
		return 0;
	memset(&res, 0, sizeof(res));
	if (!str_eq(rq->name, name_of(m, 0))) {
		unsigned j;

		/* another of its names: its wait is the multi-lock's, which
		 * only CANCEL <first> ends (found from outside: a CANCEL of
		 * the name it waited for left it holding the others, for
		 * ever) */
		for (j = 1; j < m->n; j++)
			if (str_eq(rq->name, name_of(m, j))) {
				res.outcome = DL_NOT_QUEUED;
				dl__cmd_result_reply(c, rq->name, &res,
						     rq->tag);
				return 1;
			}
		return 0;
	}
	/* a wait still queued leaves its queue; a wait granted is counted
	 * in m->i already (dl__cmd_multi_event), and goes back with the
	 * rest */
	give_back(m);
	multi_free(m);
	dl__cmd_reply_begin(&r, "OK CANCELLED");
	dl_fmt_str(&r.f, rq->name);
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
	return 1;
}

static void todo(struct dl_multi *m, enum multi_state st)
{
	struct dl_server *srv = m->c->srv;

	m->state = st;
	if (!m->on_todo) {
		m->on_todo = 1;
		m->tnext = srv->multi_todo;
		srv->multi_todo = m;
	}
}

int dl__cmd_multi_event(struct dl_conn *c, const struct dl_event *ev)
{
	struct dl_multi *m = c->multi;
	unsigned j;

	/* its wait's end, whatever else happened meanwhile (found by
	 * review: a grant that came after a BREAK of a lease it took, in the
	 * same turn, went to the client, and the lease stayed) */
	if (m->queued && m->i < m->n && str_eq(ev->name, name_of(m, m->i)) &&
	    (ev->type == DL_EVENT_GRANTED || ev->type == DL_EVENT_TIMEOUT ||
	     ev->type == DL_EVENT_MOVED) &&
	    m->state != M_WAITING) {
		m->queued = 0;
		if (ev->type == DL_EVENT_GRANTED)
			m->token[m->i++] =
				ev->token; /* given back with the rest */
		return 1;
	}
	if (m->state == M_WAITING && m->queued && m->i < m->n &&
	    str_eq(ev->name, name_of(m, m->i))) {
		if (ev->type == DL_EVENT_GRANTED ||
		    ev->type == DL_EVENT_TIMEOUT || ev->type == DL_EVENT_MOVED)
			m->queued = 0; /* its waiter is gone */
		if (ev->type == DL_EVENT_GRANTED) {
			m->token[m->i] = ev->token;
			m->deadline[m->i] = ev->deadline;
			m->retry[m->i] = 0;
			m->durable |= ev->durable;
			if (ev->reentry) {
				/* its owner came to hold it meanwhile: the
				 * hold goes back with the rest */
				m->lost = m->i++;
				todo(m, M_HELD);
				return 1;
			}
			if (m->i++ == 0)
				m->renewed_at = dl_mono_ms();
			todo(m, M_STEP);
			return 1;
		}
		if (ev->type == DL_EVENT_TIMEOUT) {
			todo(m, M_TIMEOUT);
			return 1;
		}
		if (ev->type == DL_EVENT_MOVED) {
			todo(m, M_MOVED);
			return 1;
		}
	}
	for (j = 0; j < m->i; j++)
		if (str_eq(ev->name, name_of(m, j)) &&
		    ev->token == m->token[j]) {
			if (ev->type == DL_EVENT_EXPIRED &&
			    m->state != M_LOST && m->state != M_HELD) {
				m->lost = (uint8_t)j;
				todo(m, M_LOST);
			}
			return 1; /* nothing of it is the client's yet */
		}
	return 0;
}

/* Run the steps that events made due (the flush point, server.c). */
void dl_cmd_multi_run(struct dl_server *srv)
{
	struct dl_multi *m;

	while ((m = srv->multi_todo) != NULL) {
		srv->multi_todo = m->tnext;
		m->on_todo = 0;
		switch (m->state) {
		case M_STEP:
			step(m, 0);
			break;
		case M_TIMEOUT:
			end_event(m, NULL, name_of(m, m->i), 0, 0);
			break;
		case M_LOST:
			end_event(m, "EXPIRED", name_of(m, m->lost), 0, 0);
			break;
		case M_HELD:
			end_event(m, "ALREADY_HELD", name_of(m, m->lost), 0, 0);
			break;
		case M_MOVED:
			end_event(m, "MOVED", name_of(m, m->i), 0, 0);
			break;
		default:
			break;
		}
	}
}

/* ---- keeping the leases taken alive while it waits ----------------------- */

/* A waiting multi-lock's leases are refreshed at a third of their TTL,
 * and no more often than this: a TTL of a few ms would make the timer
 * spin and write a refresh each turn (found by review). A lease with a
 * TTL under three times this may end while the multi-lock waits: it
 * fails, * FAILED ... EXPIRED. */
#define DL_MULTI_RENEW_MIN_MS 100

static uint64_t renew_every(const struct dl_multi *m)
{
	return m->ttl_ms / 3 > DL_MULTI_RENEW_MIN_MS ? m->ttl_ms / 3
						     : DL_MULTI_RENEW_MIN_MS;
}

static void on_renew(uv_timer_t *h)
{
	struct dl_server *srv = h->data;
	uint64_t now = dl_mono_ms();
	struct dl_multi *m;
	struct dl_result res;
	unsigned j;

	for (m = srv->multis; m; m = m->next) {
		if (m->state != M_WAITING || !m->i ||
		    now - m->renewed_at < renew_every(m))
			continue;
		m->renewed_at = now;
		for (j = 0; j < m->i; j++)
			if (dl_locktab_refresh(srv->tab, &m->c->sess,
					       name_of(m, j), m->token[j],
					       m->ttl_ms, &res) == 0 &&
			    res.outcome == DL_REFRESHED)
				m->deadline[j] = res.shorten ? res.from_deadline
							     : res.deadline;
	}
	arm_renewals(srv);
}

/* The renewal timer runs while a multi-lock waits holding leases, at the
 * next third of a TTL. */
static void arm_renewals(struct dl_server *srv)
{
	uint64_t now = dl_mono_ms(), next = UINT64_MAX, due;
	struct dl_multi *m;

	if (!srv->multi_timer.loop)
		return; /* no loop (the engine fuzzer): nothing renews */
	for (m = srv->multis; m; m = m->next) {
		if (m->state != M_WAITING || !m->i)
			continue;
		due = m->renewed_at + renew_every(m);
		if (due < next)
			next = due;
	}
	if (next == UINT64_MAX) {
		uv_timer_stop(&srv->multi_timer);
		return;
	}
	uv_timer_start(&srv->multi_timer, on_renew, next > now ? next - now : 0,
		       0);
}

void dl_cmd_multi_init(struct dl_server *srv)
{
	uv_timer_init(srv->loop, &srv->multi_timer);
	srv->multi_timer.data = srv;
}

void dl_cmd_multi_end(struct dl_conn *c)
{
	if (!c->multi)
		return;
	give_back(c->multi);
	multi_free(c->multi);
}

/* ---- withdrawal --------------------------------------------------------- */

size_t dl__cmd_multi_break(struct dl_conn *c, const struct dl_line *line,
			   struct dl_str name, struct dl_str tag, char *buf)
{
	static const char why[] =
		"persistence went down before the grant was recorded, try again";
	struct dl_fmt f;
	int n;

	if (line->member) {
		(void)dl_locktab_revoke(
			c->srv->tab, &c->sess, name, line->token,
			line->retry ? DL_REVOKE_RETRY : DL_REVOKE_NEW, NULL);
		return 0; /* its header says it */
	}
	c->srv->st.errors[-DL_EUNAVAILABLE]++;
	dl_fmt_init(&f, buf, DL_REPLY_MAX);
	if (line->kind == DL_LINE_EVENT) {
		dl_fmt_word(&f, "* FAILED");
		dl_fmt_str(&f, name);
		dl_fmt_word(&f, dl_err_word(DL_EUNAVAILABLE));
		dl_fmt_str(&f, name);
	} else {
		dl_fmt_word(&f, "ERR");
		dl_fmt_word(&f, dl_err_word(DL_EUNAVAILABLE));
	}
	dl_fmt_word(&f, why);
	n = dl_fmt_end(&f, tag);
	return n > 0 ? (size_t)n : 0;
}
