/* SPDX-License-Identifier: MIT */
/*
 * locktab_ops.c -- the lock table's requests (LOCK, UNLOCK, REFRESH, CHECK,
 * CANCEL, STATUS) and the rebuilding of state loaded from the store, on top
 * of the objects and queues of locktab.c. See locktab.h for the model.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "proto/desc.h"
#include "server/locktab/locktab.h"
#include "server/locktab/locktab_private.h"
#include "server/users.h"

/* ---- requests
 * ----------------------------------------------------------------------------
 */

/* ms a TRYLOCK of this mode would have to wait at least: until the first
 * holder goes when one leaving makes room (a permit, or the exclusive
 * holder a shared request waits for), until the last one goes for an
 * exclusive request on a lock held shared; with no holder, the grace of
 * the placeholder at the head. */
static uint64_t holders_busy_for(const struct dl_lock *lk, int shared,
				 uint64_t now)
{
	const struct dl_lease *l;
	uint64_t first = UINT64_MAX, last = 0, r;

	for (l = lk->holders; l; l = l->next) {
		r = dl__remaining(l, now);
		first = r < first ? r : first;
		last = r > last ? r : last;
	}
	if (lk->holders)
		return !shared && lk->holders->shared ? last : first;
	if (lk->qhead && dl_wheel_pending(&lk->qhead->timer))
		return lk->qhead->timer.expires > now
			       ? lk->qhead->timer.expires - now
			       : 0;
	return 0;
}

/* ms until the lock could be granted: its holders', the grants closed
 * (dl_locktab_close_grants) or the lock's delay, whichever is later. */
static uint64_t busy_for(const struct dl_locktab *t, const struct dl_lock *lk,
			 int shared, uint64_t now)
{
	uint64_t h = holders_busy_for(lk, shared, now);
	uint64_t c = dl__closed(t, now) ? t->closed_until - now : 0;
	uint64_t d = dl__delay_left(t, lk, now);

	h = h > c ? h : c;
	return h > d ? h : d;
}

/* Nobody new may come in now: grants closed, or the lock in its delay. */
static int barred(const struct dl_locktab *t, const struct dl_lock *lk,
		  uint64_t now)
{
	return dl__closed(t, now) || dl__delay_left(t, lk, now) != 0;
}

static struct dl_waiter *session_waiter(const struct dl_session *s,
					const struct dl_lock *lk)
{
	struct dl_waiter *w;

	for (w = s->waiters; w; w = w->snext)
		if (w->lock == lk)
			return w;
	return NULL;
}

static struct dl_waiter *placeholder_of(const struct dl_locktab *t,
					const struct dl_lock *lk,
					const struct dl_owner *o)
{
	struct dl_waiter *w;

	if (!t->placeholders)
		return NULL;
	for (w = lk->qhead; w; w = w->qnext)
		if (!w->sess && w->owner == o)
			return w;
	return NULL;
}

/* res describes a grant (fresh or reentrant) of lease l, ttl_ms left. */
static int granted(struct dl_result *res, const struct dl_lease *l,
		   uint64_t ttl_ms)
{
	res->outcome = DL_GRANTED;
	res->durable = 1;
	res->token = l->token;
	res->value = ttl_ms;
	res->deadline = l->timer.expires;
	res->ttl_ms = l->ttl_ms;
	res->holds = l->count;
	return 0;
}

/* Side objects a request may need, allocated before anything changes so
 * that a grant never fails half-way. */
struct spares {
	struct dl_warn *warn;	  /* the lease's warning */
	struct dl_delay *delay;	  /* the lock's delay */
	struct dl_notify *notify; /* its news of waiters */
	struct dl_value *value;	  /* its value */
};

/* A lease this request was granted or re-entered: what the request asks
 * of it beside the hold (a warning, news of waiters) and its id. Not a
 * value: a new lease has it from its grant, and a reentry leaves the
 * lease's as it is -- another process of the owner, whose reentry its
 * client gives back as not its own, must not change what the leader
 * says (found from outside: a refused candidate's value replaced the
 * leader's); REFRESH value= changes it. */
static void lease_asks(struct dl_locktab *t, struct dl_lease *l,
		       const struct dl_acquire *a, struct spares *sp)
{
	if (a->has_warn)
		dl__warn_set(t, l, a->warn_ms, &sp->warn);
	if (a->notify)
		dl__notify_set(t, l, &sp->notify);
	dl__lease_set_req(l, a->req);
	t->replying = l;
}

/* w, a waiter, is to give its lease the value of *spare, if any. */
static void waiter_value(struct dl_waiter *w, struct dl_value **spare)
{
	if (!*spare)
		return;
	free(w->value);
	w->value = *spare;
	*spare = NULL;
}

/* A wait of o for lk, on another session, made by this request (its id,
 * in its mode): a connection its client gave up for dead and sent the
 * request again from another (locktab.h, Request ids). Only a request
 * that waits takes a wait over: a TRYLOCK with the id is a TRYLOCK
 * (found from outside: it answered OK QUEUED, then * TIMEOUT, and the
 * wait it took was gone). */
static struct dl_waiter *retried_wait(const struct dl_lock *lk,
				      const struct dl_owner *o,
				      const struct dl_session *s,
				      const struct dl_acquire *a)
{
	const struct dl_session *os;
	struct dl_waiter *w;

	/* Every LOCK of the clients carries an id: the owner's other
	 * sessions' waits are looked at (few, mostly none), never the
	 * lock's queue (up to max_waiters_per_lock long). */
	if (!a->req || !a->wait_ms || !o->nwaiters)
		return NULL;
	for (os = o->sessions; os; os = os->onext)
		for (w = os != s ? os->waiters : NULL; w; w = w->snext)
			if (w->lock == lk && w->req == a->req &&
			    w->shared == (a->shared ? 1 : 0))
				return w;
	return NULL;
}

/* w, a wait its owner's session s asks for again (a place taken over or
 * claimed), waits on s with what request a asks now: its TTL, tag,
 * warning, news of waiters, value, and a wait counted from now. */
static void waiter_asks(struct dl_locktab *t, struct dl_session *s,
			struct dl_waiter *w, const struct dl_acquire *a,
			uint32_t ttl, uint64_t now, struct spares *sp)
{
	dl__waiter_attach(w, s);
	dl__waiter_set(w, ttl, a->tag);
	w->has_warn = a->has_warn ? 1 : 0;
	w->warn_ms = a->warn_ms;
	w->req = a->req;
	w->notify = a->notify ? 1 : 0;
	waiter_value(w, &sp->value);
	w->wait_deadline = dl__deadline_after(now, a->wait_ms);
	if (w->wait_deadline == UINT64_MAX)
		dl_wheel_del(&t->wheel, &w->timer);
	else
		dl_wheel_add(&t->wheel, &w->timer, w->wait_deadline);
}

/* s takes over w, its owner's wait on another session: the same place,
 * with what the request asks now. */
static int take_wait(struct dl_locktab *t, struct dl_session *s,
		     struct dl_waiter *w, const struct dl_acquire *a,
		     uint32_t ttl, uint64_t now, struct spares *sp,
		     struct dl_result *res)
{
	struct dl_session *old = w->sess;

	if (w->sprev)
		w->sprev->snext = w->snext;
	else
		old->waiters = w->snext;
	if (w->snext)
		w->snext->sprev = w->sprev;
	waiter_asks(t, s, w, a, ttl, now, sp);
	t->st.retries++;
	dl__mark_dirty(t, w->lock);
	res->outcome = DL_QUEUED;
	res->value = dl__waiter_position(w);
	return 0;
}

/* The wait would close a cycle (dl__deadlock_check said so). */
static void deadlock(struct dl_locktab *t, struct dl_result *res)
{
	t->st.deadlocks++;
	res->outcome = DL_DEADLOCK;
	res->value = t->cycle.len;
}

/* The owner claims its restored place in the queue. */
static int claim_placeholder(struct dl_locktab *t, struct dl_session *s,
			     struct dl_waiter *w, const struct dl_acquire *a,
			     uint32_t ttl, uint64_t now, struct spares *sp,
			     struct dl_result *res)
{
	struct dl_lock *lk = w->lock;
	struct dl_lease *l;

	if (w == lk->qhead && dl__has_room(lk, a->shared) &&
	    !barred(t, lk, now)) {
		if (dl__tokens_exhausted(t))
			return DL_ELIMIT;
		if (!(l = dl__lease_alloc(a->tag, s->desc, a->req)))
			return DL_ENOMEM;
		dl__hist_add(&t->st.wait, 0);
		dl__waiter_free(t, w);
		dl__lease_grant(t, l, lk, s->owner, ttl, now, a->shared,
				&sp->value);
		lease_asks(t, l, a, sp);
		dl__delay_ask(t, lk, a->delay_ms, 0, &sp->delay);
		/* shared waiters right behind it may come in with it */
		dl__serve(t, lk, now);
		/* and if others wait behind, it hears of them after its
		 * reply */
		dl__notify_holders(t, lk, now, 1);
		return granted(res, l, ttl);
	}
	if (a->wait_ms == 0) {
		res->outcome = DL_BUSY;
		res->value = busy_for(t, lk, a->shared, now);
		dl__waiter_free(t, w);
		dl__serve(t, lk, now);
		return 0;
	}
	if (dl__deadlock_check(t, lk, s, a->shared, w, a->walk_budget)) {
		/* its owner is back and asks, but may not wait: the place
		 * goes, as for a TRYLOCK */
		deadlock(t, res);
		dl__waiter_free(t, w);
		dl__serve(t, lk, now);
		return 0;
	}
	t->placeholders--;
	waiter_asks(t, s, w, a, ttl, now, sp);
	w->shared = a->shared ? 1 : 0;
	dl__delay_ask(t, lk, a->delay_ms, 0, &sp->delay);
	dl__mark_dirty(t, lk);
	/* its owner is back and waits: a restored holder that asked hears
	 * of it (it was told nothing since the restore) */
	dl__notify_holders(t, lk, now, 0);
	res->outcome = DL_QUEUED;
	res->value = dl__waiter_position(w);
	return 0;
}

/* dl_locktab_acquire, its arguments checked; sp: side objects allocated
 * ahead (NULL where none was asked), each taken by the call that needs
 * it. */
static int acquire(struct dl_locktab *t, struct dl_session *s,
		   const struct dl_acquire *a, struct spares *sp,
		   struct dl_result *res)
{
	struct dl_owner *o = s->owner;
	uint32_t limit = a->limit ? a->limit : 1;
	struct dl_lock *lk;
	struct dl_lease *l;
	struct dl_waiter *w;
	uint64_t now;
	uint32_t ttl;
	int fresh;

	/* the table's bound on locks: only a new name would pass it */
	if (t->limits.max_locks && t->st.locks >= t->limits.max_locks &&
	    !dl__lock_find(t, a->name))
		return DL_ELIMIT;
	ttl = (uint32_t)a->ttl_ms;
	now = dl__now_ms(t);
	if (!(lk = dl__lock_get(t, a->name)))
		return DL_ENOMEM;
	dl__reap(t, lk, now);
	/* free: its delay, if it has one, is this request's to set */
	fresh = !lk->holders && !lk->qhead && !dl__delay_left(t, lk, now);
	/* The limit belongs to the lock while it lives: the request that
	 * finds it empty sets it (an empty lock may linger until the store
	 * has seen it go). */
	if (!lk->holders && !lk->qhead)
		lk->limit = (uint16_t)limit;
	else if (lk->limit != limit) {
		res->outcome = DL_LIMIT_MISMATCH;
		res->value = lk->limit;
		return 0;
	}

	/* 1. This very request, sent again: its wait on another session
	 * (before the owner's lease: the owner may have been granted the
	 * lock through another request meanwhile, and this one, a future
	 * reentry, still waits -- found from outside: it was answered as a
	 * reentry, and the wait left behind was granted later too) ... */
	if (!session_waiter(s, lk) && (w = retried_wait(lk, o, s, a)) != NULL)
		return take_wait(t, s, w, a, ttl, now, sp, res);
	/* ... or its grant (its id is the lease's, in the lease's mode or a
	 * weaker one: its grant again, no hold added); or, the owner
	 * holding it already, a reentry, in the mode it holds. */
	if ((l = dl__holder_of(lk, o)) != NULL) {
		if (a->req && dl_lease_req(l) == a->req &&
		    !(l->shared && !a->shared)) {
			l->restored = 0; /* its holder knows it */
			dl__lease_extend(t, l, ttl, now);
			lease_asks(t, l, a, sp);
			dl__delay_ask(t, lk, a->delay_ms, 0, &sp->delay);
			dl__notify_holders(t, lk, now, 1);
			t->st.retries++;
			res->retry = 1;
			return granted(res, l, dl__remaining(l, now));
		}
		if (l->shared && !a->shared) {
			res->outcome = DL_UPGRADE_DEADLOCK;
			res->token = l->token;
			return 0;
		}
		if (l->count >= DL_REENTRY_MAX)
			return DL_ELIMIT;
		dl__lease_reenter(t, l, ttl, now);
		lease_asks(t, l, a, sp);
		dl__delay_ask(t, lk, a->delay_ms, 0, &sp->delay);
		dl__notify_holders(t, lk, now, 1);
		res->reentry = 1;
		return granted(res, l, dl__remaining(l, now));
	}
	/* 2. This session waits for it already; or its owner is back for a
	 * place a restore kept (a placeholder). */
	if ((w = session_waiter(s, lk)) != NULL) {
		res->outcome = DL_ALREADY_WAITING;
		res->value = dl__waiter_position(w);
		return 0;
	}
	if ((w = placeholder_of(t, lk, o)) != NULL)
		return claim_placeholder(t, s, w, a, ttl, now, sp, res);

	/* 3. Room now, nobody queued, no delay running: granted. */
	if (!lk->qhead && dl__has_room(lk, a->shared) && !barred(t, lk, now)) {
		int full = dl__owner_full(t, o) || dl__account_full(s, o, 0) ||
			   dl__tokens_exhausted(t);

		if (full || !(l = dl__lease_alloc(a->tag, s->desc, a->req))) {
			dl__lock_drop_if_unused(t, lk);
			return full ? DL_ELIMIT : DL_ENOMEM;
		}
		dl__lease_grant(t, l, lk, o, ttl, now, a->shared, &sp->value);
		lease_asks(t, l, a, sp);
		dl__delay_ask(t, lk, a->delay_ms, fresh, &sp->delay);
		dl__hist_add(&t->st.wait, 0);
		return granted(res, l, ttl);
	}
	/* 4. Busy: a TRYLOCK is told for how long at least... */
	if (a->wait_ms == 0) {
		res->outcome = DL_BUSY;
		res->value = busy_for(t, lk, a->shared, now);
		return 0;
	}
	/* 5. ... a LOCK queues, within the limits, unless its wait would
	 * close a cycle of owners. */
	if (lk->nwaiters >= t->limits.max_waiters || dl__owner_full(t, o) ||
	    dl__account_full(s, o, 1))
		return DL_ELIMIT;
	if (dl__deadlock_check(t, lk, s, a->shared, NULL, a->walk_budget)) {
		deadlock(t, res);
		return 0;
	}
	w = dl__waiter_new(t, lk, o, s, ttl,
			   dl__deadline_after(now, a->wait_ms), a->tag,
			   a->shared);
	if (!w)
		return DL_ENOMEM;
	w->has_warn = a->has_warn ? 1 : 0;
	w->warn_ms = a->warn_ms;
	w->req = a->req;
	w->notify = a->notify ? 1 : 0;
	waiter_value(w, &sp->value);
	dl__delay_ask(t, lk, a->delay_ms, fresh, &sp->delay);
	dl__notify_holders(t, lk, now, 0);
	res->outcome = DL_QUEUED;
	res->value = lk->nwaiters;
	return 0;
}

int dl_locktab_acquire(struct dl_locktab *t, struct dl_session *s,
		       const struct dl_acquire *a, struct dl_result *res)
{
	uint32_t limit = a->limit ? a->limit : 1;
	struct spares sp = {NULL, NULL, NULL, NULL};
	int err, nomem = 0;

	memset(res, 0, sizeof(*res));
	if (a->ttl_ms == 0 || a->ttl_ms > DL_TTL_STORE_MAX ||
	    a->value.len > DL_VALUE_MAX)
		return DL_EBADARG;
	if (a->tag.len > DL_TAG_MAX || limit > DL_LIMIT_MAX ||
	    (a->shared && limit > 1))
		return DL_EBADARG;
	/* the warning comes before the end: a reentry's TTL only grows */
	if (a->warn_ms >= a->ttl_ms || a->delay_ms > DL_LOCK_DELAY_MAX_MS)
		return DL_EBADARG;
	if (t->suspended)
		return DL_EUNAVAILABLE;
	if ((a->warn_ms && !(sp.warn = dl__warn_alloc())) ||
	    (a->delay_ms && !(sp.delay = dl__delay_alloc())) ||
	    (a->notify && !(sp.notify = dl__notify_alloc())) ||
	    (sp.value = dl__value_new(a->value, &nomem), nomem)) {
		free(sp.warn);
		free(sp.delay);
		free(sp.notify);
		return DL_ENOMEM;
	}
	t->replying = NULL;
	t->reply_tell = 0;
	err = acquire(t, s, a, &sp, res);
	if (err == 0 && res->outcome == DL_GRANTED && t->reply_tell)
		res->tell = 1;
	t->replying = NULL;
	t->reply_tell = 0;
	free(sp.warn);
	free(sp.delay);
	free(sp.notify);
	free(sp.value);
	return err;
}

/* The lock, its overdue holders reaped; NULL if it does not exist. */
static struct dl_lock *lock_now(struct dl_locktab *t, struct dl_str name,
				uint64_t now)
{
	struct dl_lock *lk = dl__lock_find(t, name);

	if (lk)
		dl__reap(t, lk, now);
	return lk;
}

int dl_locktab_release(struct dl_locktab *t, struct dl_session *s,
		       struct dl_str name, uint64_t token,
		       struct dl_result *res)
{
	uint64_t now = dl__now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;

	memset(res, 0, sizeof(*res));
	if (!l || l->owner != s->owner) {
		res->outcome = DL_NOT_HOLDER;
		return 0;
	}
	if (t->suspended)
		return DL_EUNAVAILABLE;
	/* A release whose write is lost (a crash before Redis has it) can
	 * let nobody else in: the lease is restored and lives out its TTL.
	 * So unless durable_release asks otherwise, its reply need not wait,
	 * and its write waits for a batch that goes anyway (locktab.h). A
	 * waiter it serves is granted durably all the same (dl__serve). */
	res->durable = t->limits.durable_release;
	res->token = token;
	if (l->count > 1) {
		l->count--;
		/* the hold its last id made may be the one given back: sent
		 * again, that request is a reentry to make, never a retry
		 * answered with none added (found by review: a client that
		 * gives a grant back and asks again with its id) */
		dl__lease_forget_req(l);
		res->outcome = DL_HELD;
		res->value = l->count;
	} else {
		dl__changed(t, DL_CHANGE_RELEASED, l, lk->nholders - 1u,
			    DL_STR_NULL);
		dl__lease_remove(t, l);
		t->st.releases++;
		dl__serve(t, lk, now);
		res->outcome = DL_RELEASED;
	}
	if (res->durable)
		dl__mark_urgent(t, lk);
	else
		dl__mark_dirty(t, lk);
	return 0;
}

int dl_locktab_refresh(struct dl_locktab *t, struct dl_session *s,
		       struct dl_str name, uint64_t token, uint64_t ttl_ms,
		       struct dl_result *res)
{
	return dl_locktab_refresh_warn(t, s, name, token, ttl_ms, -1, res);
}

int dl_locktab_refresh_warn(struct dl_locktab *t, struct dl_session *s,
			    struct dl_str name, uint64_t token, uint64_t ttl_ms,
			    int64_t warn_ms, struct dl_result *res)
{
	uint64_t now = dl__now_ms(t);
	struct dl_warn *spare = NULL;
	struct dl_lock *lk;
	struct dl_lease *l;
	uint32_t ttl, warn;

	memset(res, 0, sizeof(*res));
	if (ttl_ms > DL_TTL_STORE_MAX || warn_ms > (int64_t)DL_TTL_STORE_MAX)
		return DL_EBADARG;
	lk = lock_now(t, name, now);
	l = lk ? dl__holder_by_token(lk, token) : NULL;
	if (!l || l->owner != s->owner) {
		res->outcome = DL_NOT_HOLDER;
		return 0;
	}
	if (t->suspended)
		return DL_EUNAVAILABLE;
	ttl = ttl_ms ? (uint32_t)ttl_ms : l->ttl_ms;
	warn = warn_ms < 0 ? dl__warn_ms(t, l) : (uint32_t)warn_ms;
	if (warn >= ttl)
		return DL_EBADARG;
	if (warn && !l->has_warn && !(spare = dl__warn_alloc()))
		return DL_ENOMEM;
	/* The warning counts from the deadline the lease has: a shorter
	 * one, applied later (below), arms it again. */
	if (warn_ms >= 0)
		dl__warn_set(t, l, warn, &spare);
	free(spare);
	t->st.refreshes++;
	l->restored = 0; /* its holder knows it: a reentry may extend it */
	dl__mark_urgent(t, lk);
	res->outcome = DL_REFRESHED;
	res->durable = 1;
	res->token = token;
	res->value = ttl;
	res->ttl_ms = ttl;
	res->deadline = now + ttl;
	if (now + ttl < l->timer.expires) {
		/* A shorter lease takes effect once it is durable
		 * (dl_locktab_shorten, locktab.h): until then the holder may
		 * still count on the deadline it was told, and a refusal
		 * (Redis lost) must leave it that. */
		res->shorten = 1;
		res->from_deadline = l->timer.expires;
		return 0;
	}
	l->ttl_ms = ttl;
	dl_wheel_add(&t->wheel, &l->timer, now + ttl);
	dl__horizon_lease(t, l);
	dl__warn_arm(t, l);
	return 0;
}

int dl_locktab_shorten(struct dl_locktab *t, struct dl_str name, uint64_t token,
		       uint64_t from_deadline, uint64_t deadline,
		       uint32_t ttl_ms)
{
	struct dl_lock *lk = dl__lock_find(t, name);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;

	/* Gone, or moved since (a later refresh or reentry supersedes it:
	 * its reply stated its own deadline). */
	if (!l || l->timer.expires != from_deadline ||
	    deadline >= from_deadline)
		return 0;
	l->ttl_ms = ttl_ms;
	/* A deadline already past fires at the next run of the timers:
	 * nothing is reaped, and no event sent, from here. */
	dl_wheel_add(&t->wheel, &l->timer, deadline);
	dl__warn_arm(t, l);
	dl__mark_dirty(t, lk);
	return 1;
}

int dl_locktab_check(struct dl_locktab *t, struct dl_str name, uint64_t token,
		     struct dl_result *res)
{
	uint64_t now = dl__now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;

	memset(res, 0, sizeof(*res));
	if (l) {
		res->outcome = DL_VALID;
		res->token = token;
		res->value = dl__remaining(l, now);
	} else {
		res->outcome = DL_STALE;
		res->token = lk && lk->holders ? lk->holders->token : 0;
	}
	return 0;
}

int dl_locktab_break(struct dl_locktab *t, struct dl_str name, uint64_t token,
		     struct dl_str by, char prev[DL_OWNER_KEY_MAX + 1],
		     struct dl_result *res)
{
	uint64_t now = dl__now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;

	memset(res, 0, sizeof(*res));
	if (!l) {
		res->outcome = DL_STALE;
		res->token = lk && lk->holders ? lk->holders->token : 0;
		return 0;
	}
	if (t->suspended)
		return DL_EUNAVAILABLE;
	res->durable = 1;
	res->token = token;
	res->outcome = DL_BROKEN;
	t->st.breaks++;
	if (prev) {
		memcpy(prev, l->owner->id, l->owner->hn.len);
		prev[l->owner->hn.len] = '\0';
	}
	dl__lease_end(t, l, now, by);
	dl__mark_urgent(t, lk);
	return 0;
}

/* Lease h of lk can hold beside a lease of this mode and limit. */
static int fits(const struct dl_lock *lk, const struct dl_lease *h, int shared,
		uint32_t limit)
{
	int exclusive = !shared && limit == 1;

	return !exclusive && !!h->shared == !!shared && lk->limit == limit;
}

int dl_locktab_reclaim(struct dl_locktab *t, struct dl_session *s,
		       const struct dl_acquire *a, uint64_t token,
		       uint32_t holds, struct dl_result *res, const char **why)
{
	static const char by[] = DL_USER_RECLAIMED;
	uint64_t now = dl__now_ms(t);
	struct dl_lock *lk = lock_now(t, a->name, now);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;
	uint32_t limit = a->limit ? a->limit : 1, beside = 0, room;
	struct spares sp = {NULL, NULL, NULL, NULL};
	struct dl_lease *h, *next;
	int shared = a->shared, nomem = 0;

	memset(res, 0, sizeof(*res));
	if (!s->owner || a->ttl_ms == 0 || a->ttl_ms > DL_TTL_STORE_MAX ||
	    limit > DL_LIMIT_MAX || (shared && limit > 1) ||
	    a->warn_ms >= a->ttl_ms || a->delay_ms > DL_LOCK_DELAY_MAX_MS ||
	    holds == 0 || holds > DL_REENTRY_MAX || a->value.len > DL_VALUE_MAX)
		return DL_EBADARG;
	/* 1. A lease the table knows: a refresh. */
	if (l) {
		/* known: its holder confirms it, as a REFRESH would (and its
		 * reply is a refresh's: kept if Redis is lost meanwhile) */
		if (dl_locktab_refresh_warn(
			    t, s, a->name, token, (uint32_t)a->ttl_ms,
			    a->has_warn ? (int64_t)a->warn_ms : -1, res) == 0 &&
		    res->outcome == DL_REFRESHED) {
			res->outcome = DL_RECLAIMED;
			res->known = 1;
			res->token = token;
			res->holds = l->count;
		}
		return 0;
	}
	/* 2. Unknown: refused unless grants are closed after a loss and
	 * the lock can take it back (each refusal says why). */
	res->outcome = DL_NOT_HOLDER;
	*why = "grants are open: a lease not reclaimed by then has ended";
	if (!dl__closed(t, now))
		return 0;
	if (t->suspended)
		return DL_EUNAVAILABLE;
	if (lk) {
		*why = "this owner holds another lease of the lock";
		if (dl__holder_of(lk, s->owner))
			return 0; /* one lease of an owner per lock */
		/* Holders that cannot hold beside this lease (another mode or
		 * limit, or an exclusive lease on either side) ended before
		 * the later of the two was granted -- a lock is granted only
		 * when that leaves it consistent -- so the lower token is the
		 * one whose owner let it go. Found from outside: a released
		 * shared lease replayed first kept out the exclusive lease
		 * granted after it. */
		*why = "a later lease that cannot hold beside it holds the "
		       "lock";
		for (h = lk->holders; h; h = h->next) {
			if (fits(lk, h, shared, limit))
				beside++;
			else if (h->token > token)
				return 0;
		}
		/* Requests queued meanwhile were let in under the lock's
		 * limit: a lease of another one is not changed under them
		 * (found from outside: a permit of a semaphore reclaimed past
		 * two queued exclusive LOCKs made them permits too) */
		*why = "requests are queued under another limit";
		if (lk->qhead && lk->limit != limit)
			return 0;
		/* the same mode, full: which of them ended is not known */
		*why = "the lock is full";
		room = shared ? DL_SHARED_MAX : limit;
		if (beside >= room)
			return 0;
	}
	/* 3. Restored, with its token: what cannot hold beside it goes. */
	if (dl__account_full(s, s->owner, 0))
		return DL_ELIMIT;
	if ((a->warn_ms && !(sp.warn = dl__warn_alloc())) ||
	    (a->delay_ms && !(sp.delay = dl__delay_alloc())) ||
	    (sp.value = dl__value_new(a->value, &nomem), nomem) ||
	    !(l = dl__lease_alloc(a->tag, s->desc, 0))) {
		free(sp.warn);
		free(sp.delay);
		free(sp.value);
		return DL_ENOMEM;
	}
	if (!lk && !(lk = dl__lock_get(t, a->name))) {
		dl__lease_free(l);
		free(sp.warn);
		free(sp.delay);
		free(sp.value);
		return DL_ENOMEM;
	}
	for (h = lk->holders; h; h = next) {
		next = h->next;
		if (!fits(lk, h, shared, limit))
			dl__lease_drop(t, h,
				       (struct dl_str){by, sizeof(by) - 1});
	}
	if (!lk->holders && !lk->qhead)
		lk->limit = (uint16_t)limit;
	/* with the holds its holder counts (its reentries), the warning it
	 * asked for, and at least the lock's delay it asked for: what the
	 * lost record said (found from outside: a reclaim that dropped the
	 * delay let the next holder in at once after this one expired) */
	dl__lease_link(t, l, lk, s->owner, token, holds, (uint32_t)a->ttl_ms,
		       now + a->ttl_ms, now, shared);
	if (a->warn_ms)
		dl__warn_set(t, l, a->warn_ms, &sp.warn);
	dl__value_give(t, l, &sp.value);
	dl__delay_ask(t, lk, a->delay_ms, 0, &sp.delay);
	free(sp.warn);
	free(sp.delay);
	dl_locktab_raise_token(t, token);
	t->st.reclaims++;
	dl__mark_urgent(t, lk);
	dl__changed(t, DL_CHANGE_GRANTED, l, lk->nholders, DL_STR_NULL);
	*why = NULL;
	res->outcome = DL_RECLAIMED;
	res->durable = 1;
	res->token = token;
	res->value = a->ttl_ms;
	res->ttl_ms = (uint32_t)a->ttl_ms;
	res->deadline = now + a->ttl_ms;
	res->holds = holds;
	return 0;
}

int dl_locktab_lease_mode(const struct dl_locktab *t, struct dl_str name,
			  uint64_t token, int *shared, uint32_t *limit)
{
	const struct dl_lock *lk = dl__lock_find(t, name);
	const struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;

	if (!l)
		return -1;
	*shared = l->shared;
	*limit = lk->limit;
	return 0;
}

uint64_t dl_locktab_remaining(struct dl_locktab *t, struct dl_str name,
			      uint64_t token)
{
	struct dl_lock *lk = dl__lock_find(t, name);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;

	return l ? dl__remaining(l, dl__now_ms(t)) : 0;
}

int dl_locktab_cancel(struct dl_locktab *t, struct dl_session *s,
		      struct dl_str name, struct dl_result *res)
{
	uint64_t now = dl__now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);
	struct dl_waiter *w = lk ? session_waiter(s, lk) : NULL;

	memset(res, 0, sizeof(*res));
	if (!w) {
		res->outcome = DL_NOT_QUEUED;
		return 0;
	}
	dl__waiter_free(t, w);
	t->st.cancels++;
	dl__serve(t, lk, now);
	res->outcome = DL_CANCELLED;
	return 0;
}

static void lock_status(const struct dl_locktab *t, const struct dl_lock *lk,
			uint64_t now, struct dl_lock_status *st)
{
	const struct dl_lease *l = lk->holders;

	st->holders = lk->nholders;
	st->waiters = lk->nwaiters;
	/* a lock emptied but not yet dropped (the store has to see it) no
	 * longer has a limit: the next request sets it */
	st->limit = lk->holders || lk->qhead ? lk->limit : 1;
	if (l) {
		st->held = 1;
		st->shared = l->shared;
		st->token = l->token;
		st->remaining = dl__remaining(l, now);
		st->count = l->count;
		st->owner = dl_owner_id(l->owner);
		st->desc = dl_lease_desc(l);
		st->value = dl_locktab_lease_value(t, l);
		st->held_ms = dl_lease_held_ms(l, now);
	}
}

void dl_locktab_status(struct dl_locktab *t, struct dl_str name,
		       struct dl_lock_status *st)
{
	uint64_t now = dl__now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);

	memset(st, 0, sizeof(*st));
	st->limit = 1;
	if (!lk)
		return;
	lock_status(t, lk, now, st);
	st->delay_ms = dl_locktab_lock_delay(t, lk, NULL);
	st->delay_left = dl__delay_left(t, lk, now);
}

int dl_locktab_members(struct dl_locktab *t, struct dl_str name,
		       void (*cb)(const struct dl_member *m, void *arg),
		       void *arg)
{
	/* No reaping here: HOLDERS sent a header counting what
	 * dl_locktab_status() left, and the lines must match it (a lease past
	 * its deadline since shows ttl_ms=0) */
	uint64_t now = dl__now_ms(t);
	struct dl_lock *lk = dl__lock_find(t, name);
	const struct dl_lease *l;
	const struct dl_waiter *w;
	struct dl_member m;
	uint32_t pos = 0;

	if (!lk || (!lk->holders && !lk->qhead))
		return -1;
	for (l = lk->holders; l; l = l->next) {
		memset(&m, 0, sizeof(m));
		m.shared = l->shared;
		m.owner = dl_owner_id(l->owner);
		m.token = l->token;
		m.remaining = dl__remaining(l, now);
		m.count = l->count;
		m.held_ms = dl_lease_held_ms(l, now);
		m.desc = dl_lease_desc(l);
		m.value = dl_locktab_lease_value(t, l);
		cb(&m, arg);
	}
	for (w = lk->qhead; w; w = w->qnext) {
		memset(&m, 0, sizeof(m));
		m.waiter = 1;
		m.shared = w->shared;
		m.placeholder = !w->sess;
		m.owner = dl_owner_id(w->owner);
		m.position = ++pos;
		m.desc = w->sess ? w->sess->desc : NULL;
		m.remaining = !dl_wheel_pending(&w->timer) ? UINT64_MAX
			      : w->timer.expires > now ? w->timer.expires - now
						       : 0;
		cb(&m, arg);
	}
	return 0;
}

void dl_locktab_lock_status(struct dl_locktab *t, const struct dl_lock *lk,
			    struct dl_lock_status *st)
{
	uint64_t now = dl__now_ms(t);

	memset(st, 0, sizeof(*st));
	lock_status(t, lk, now, st);
	st->delay_ms = dl_locktab_lock_delay(t, lk, NULL);
	st->delay_left = dl__delay_left(t, lk, now);
}

/* ---- listing ---------------------------------------------------------------
 *
 * By name, a page is a walk of the index (locktab_index.c): the names under
 * each prefix listed, after `after`, in order, the rest counted. By
 * waiters, every listed lock under the prefixes goes through heap[], a
 * max-heap of the best `limit` seen so far by `before` (its root is the
 * worst of them, the one a better lock replaces); at the end it is sorted
 * in place: popping the root to the back leaves the array in ascending
 * order. */

struct list_run {
	const struct dl_lock **heap;
	size_t n, limit;
	uint64_t matched;
};

static int str_cmp(struct dl_str a, struct dl_str b)
{
	size_t n = a.len < b.len ? a.len : b.len;
	int c = n ? memcmp(a.p, b.p, n) : 0;

	if (c)
		return c;
	return (a.len > b.len) - (a.len < b.len);
}

static int name_cmp(const struct dl_lock *a, const struct dl_lock *b)
{
	return str_cmp((struct dl_str){a->name, a->hn.len},
		       (struct dl_str){b->name, b->hn.len});
}

/* a comes before b in the page's order: most waiters, then by name */
static int before(const struct dl_lock *a, const struct dl_lock *b)
{
	if (a->nwaiters != b->nwaiters)
		return a->nwaiters > b->nwaiters;
	return name_cmp(a, b) < 0;
}

static void sift_down(struct list_run *r, size_t i, size_t n)
{
	for (;;) {
		size_t c = 2 * i + 1, m = i;
		const struct dl_lock *x;

		if (c < n && before(r->heap[m], r->heap[c]))
			m = c;
		if (c + 1 < n && before(r->heap[m], r->heap[c + 1]))
			m = c + 1;
		if (m == i)
			return;
		x = r->heap[i];
		r->heap[i] = r->heap[m];
		r->heap[m] = x;
		i = m;
	}
}

static void waiters_cb(const struct dl_lock *lk, void *arg)
{
	struct list_run *r = arg;
	size_t i;

	if (lk->nwaiters == 0)
		return;
	r->matched++;
	if (r->n < r->limit) {
		/* sift up */
		i = r->n++;
		r->heap[i] = lk;
		while (i > 0 && before(r->heap[(i - 1) / 2], r->heap[i])) {
			const struct dl_lock *x = r->heap[i];

			r->heap[i] = r->heap[(i - 1) / 2];
			r->heap[(i - 1) / 2] = x;
			i = (i - 1) / 2;
		}
	} else if (r->limit > 0 && before(lk, r->heap[0])) {
		r->heap[0] = lk;
		sift_down(r, 0, r->n);
	}
}

static int by_name(const void *a, const void *b)
{
	return str_cmp(*(const struct dl_str *)a, *(const struct dl_str *)b);
}

static int begins(struct dl_str s, struct dl_str prefix)
{
	/* no memcmp of a null prefix (len 0, p NULL): undefined */
	return prefix.len == 0 ||
	       (s.len >= prefix.len && !memcmp(s.p, prefix.p, prefix.len));
}

/* The prefixes to walk, into out[] (room for filter->n, at least 1): the
 * names under `prefix` that are under one of the filter's, as prefixes
 * in byte order, none under another (their subtrees are then disjoint
 * and in order). */
static size_t walk_prefixes(struct dl_str prefix,
			    const struct dl_list_filter *filter,
			    struct dl_str *out)
{
	size_t i, n = 0, k;

	if (!filter) {
		out[0] = prefix;
		return 1;
	}
	for (i = 0; i < filter->n; i++) {
		if (begins(prefix, filter->prefixes[i])) {
			out[0] = prefix; /* all of it */
			return 1;
		}
		if (begins(filter->prefixes[i], prefix))
			out[n++] = filter->prefixes[i];
	}
	qsort(out, n, sizeof(*out), by_name);
	for (i = k = 0; i < n; i++)
		if (k == 0 || !begins(out[i], out[k - 1]))
			out[k++] = out[i];
	return k;
}

size_t dl_locktab_list(struct dl_locktab *t, enum dl_list_order order,
		       struct dl_str prefix, struct dl_str after, size_t limit,
		       const struct dl_list_filter *filter,
		       const struct dl_lock **page, uint64_t *more)
{
	struct dl_str one, *pre = &one;
	struct list_run r = {page, 0, limit, 0};
	struct dl_index_walk w = {.page = page, .limit = limit};
	size_t i, np, end;

	*more = 0;
	if (filter && filter->n > 1 &&
	    !(pre = malloc(filter->n * sizeof(*pre))))
		return 0;
	np = walk_prefixes(prefix, filter, pre);
	if (order == DL_LIST_BY_NAME) {
		for (i = 0; i < np; i++)
			dl__index_walk(t, pre[i], after, &w);
		if (pre != &one)
			free(pre);
		*more = w.more;
		return w.n;
	}
	w.each = waiters_cb;
	w.arg = &r;
	for (i = 0; i < np; i++)
		dl__index_walk(t, pre[i], DL_STR_NULL, &w);
	if (pre != &one)
		free(pre);
	for (end = r.n; end > 1; end--) {
		const struct dl_lock *x = page[0];

		page[0] = page[end - 1];
		page[end - 1] = x;
		sift_down(&r, 0, end - 1);
	}
	*more = r.matched - r.n;
	return r.n;
}

/* ---- recovery ----------------------------------------------------------- */

static int restore_args(struct dl_str name, struct dl_str owner, uint32_t ttl,
			struct dl_str tag, int shared, uint32_t limit)
{
	if (dl_check_name(name.p, name.len) || dl_owner_key_check(owner) ||
	    ttl == 0 || (tag.len && dl_check_tag(tag.p, tag.len)) ||
	    limit == 0 || limit > DL_LIMIT_MAX || (shared && limit > 1))
		return DL_EBADARG;
	return 0;
}

/* A restored lock takes the limit of its record; every item of one lock
 * must agree with it. */
static int restore_limit(struct dl_lock *lk, uint32_t limit)
{
	if (!lk->holders && !lk->qhead)
		lk->limit = (uint16_t)limit;
	return lk->limit == limit ? 0 : DL_EBADARG;
}

int dl_locktab_restore_lease(struct dl_locktab *t, struct dl_str name,
			     struct dl_str owner, uint64_t token,
			     uint32_t count, uint32_t ttl_ms, uint64_t deadline,
			     struct dl_str tag, int shared, uint32_t limit,
			     struct dl_desc *desc, uint64_t held_ms,
			     uint64_t req)
{
	struct dl_lock *lk;
	struct dl_owner *o;
	struct dl_lease *l;
	uint64_t now;

	if (restore_args(name, owner, ttl_ms, tag, shared, limit) ||
	    count == 0 || count > DL_REENTRY_MAX)
		return DL_EBADARG;
	if (!(lk = dl__lock_get(t, name)))
		return DL_ENOMEM;
	if (restore_limit(lk, limit)) {
		dl__lock_drop_if_unused(t, lk);
		return DL_EBADARG;
	}
	if (!(o = dl__owner_get(t, owner)) ||
	    !(l = dl__lease_alloc(tag, desc, req))) {
		if (o)
			dl__owner_put(t, o);
		dl__lock_drop_if_unused(t, lk);
		return DL_ENOMEM;
	}
	/* Holders are restored before waiters (record order), so room is
	 * judged among holders only. A token is one lease's: two holders
	 * with one token is a damaged record. */
	if (dl__holder_of(lk, o) || dl__holder_by_token(lk, token) ||
	    !dl__has_room(lk, shared)) {
		dl__lease_free(l);
		dl__owner_put(t, o);
		dl__lock_drop_if_unused(t, lk);
		return DL_EBADARG;
	}
	/* The hold time goes on from what the record says (0: from now; a
	 * clock younger than the hold, a machine booted since, cuts it). */
	now = dl__now_ms(t);
	dl__lease_link(t, l, lk, o, token, count, ttl_ms, deadline,
		       held_ms < now ? now - held_ms : 0, shared);
	l->restored = 1;
	dl_locktab_raise_token(t, token);
	return 0;
}

int dl_locktab_restore_value(struct dl_locktab *t, struct dl_str name,
			     uint64_t token, struct dl_str value)
{
	struct dl_lock *lk = dl__lock_find(t, name);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;
	struct dl_value *v;
	int nomem = 0;

	if (!l || dl_desc_check(value.p, value.len, DL_VALUE_MAX))
		return DL_EBADARG;
	if (!(v = dl__value_new(value, &nomem)))
		return DL_ENOMEM;
	dl__value_restore(t, l, &v);
	return 0;
}

int dl_locktab_set_value(struct dl_locktab *t, struct dl_session *s,
			 struct dl_str name, uint64_t token,
			 struct dl_str value, struct dl_result *res)
{
	uint64_t now = dl__now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;
	struct dl_value *v;
	int nomem = 0;

	memset(res, 0, sizeof(*res));
	if (!value.len || value.len > DL_VALUE_MAX)
		return DL_EBADARG;
	if (!l || l->owner != s->owner) {
		res->outcome = DL_NOT_HOLDER;
		return 0;
	}
	if (t->suspended)
		return DL_EUNAVAILABLE;
	if (!(v = dl__value_new(value, &nomem)))
		return DL_ENOMEM;
	if (dl__value_give(t, l, &v))
		dl__changed(t, DL_CHANGE_VALUE, l, lk->nholders, DL_STR_NULL);
	dl__mark_urgent(t, lk);
	res->outcome = DL_REFRESHED;
	res->durable = 1;
	res->token = token;
	return 0;
}

int dl_locktab_restore_notify(struct dl_locktab *t, struct dl_str name,
			      uint64_t token)
{
	struct dl_lock *lk = dl__lock_find(t, name);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;
	struct dl_notify *n;

	if (!l)
		return DL_EBADARG;
	if (!(n = dl__notify_alloc()))
		return DL_ENOMEM;
	dl__notify_restore(t, l, &n);
	free(n);
	return 0;
}

int dl_locktab_restore_warn(struct dl_locktab *t, struct dl_str name,
			    uint64_t token, uint32_t warn_ms)
{
	struct dl_lock *lk = dl__lock_find(t, name);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;
	struct dl_warn *w;

	if (!l || warn_ms >= l->ttl_ms)
		return DL_EBADARG;
	if (!(w = dl__warn_alloc()))
		return DL_ENOMEM;
	dl__warn_set(t, l, warn_ms, &w);
	free(w);
	return 0;
}

int dl_locktab_restore_waiter(struct dl_locktab *t, struct dl_str name,
			      struct dl_str owner, uint32_t ttl_ms,
			      uint64_t wait_deadline, uint64_t grace_deadline,
			      struct dl_str tag, int shared, uint32_t limit)
{
	struct dl_lock *lk;
	struct dl_owner *o;
	struct dl_waiter *w;
	int dirty;

	if (restore_args(name, owner, ttl_ms, tag, shared, limit))
		return DL_EBADARG;
	if (!(lk = dl__lock_get(t, name)))
		return DL_ENOMEM;
	if (restore_limit(lk, limit)) {
		dl__lock_drop_if_unused(t, lk);
		return DL_EBADARG;
	}
	if (!(o = dl__owner_get(t, owner))) {
		dl__lock_drop_if_unused(t, lk);
		return DL_ENOMEM;
	}
	dirty = lk->dirty;
	w = dl__waiter_new(t, lk, o, NULL, ttl_ms,
			   wait_deadline < grace_deadline ? wait_deadline
							  : grace_deadline,
			   tag, shared);
	if (!w) {
		dl__owner_put(t, o);
		dl__lock_drop_if_unused(t, lk);
		return DL_ENOMEM;
	}
	/* The stored deadline, not the grace, is the waiter's own. */
	w->wait_deadline = wait_deadline;
	/* What was loaded is what Redis holds: nothing to write back. */
	if (!dirty) {
		assert(t->dirty[t->ndirty - 1] == lk);
		lk->dirty = 0;
		t->ndirty--;
	}
	return 0;
}

/* dl_locktab_revoke's second half: the session waits again where it was
 * served, with the lease's value (taken from it: *v, or NULL; *v is NULL
 * once the waiter has it). */
static int requeue_waiter(struct dl_locktab *t, struct dl_session *s,
			  struct dl_str name, uint64_t token,
			  const struct dl_requeue *requeue, struct dl_value **v)
{
	struct dl_lock *lk;
	struct dl_waiter *w;
	uint32_t lim;

	/* A closed session waits for nothing: its client left while the
	 * grant waited for Redis, and the withdrawal is all there is to do
	 * (found from outside: it was queued again with no owner, and the
	 * daemon crashed). */
	if (!requeue || !s->owner)
		return 0;
	if (requeue->owner_gen != s->owner_gen)
		return DL_EBADARG; /* it waited as another owner */
	/* its lease ended meanwhile (expired while Redis was away): the
	 * value it was granted with comes from the grant's line (found by
	 * the fault campaign: the waiter was granted again with none) */
	if (!*v && requeue->value.len) {
		int nomem = 0;

		*v = dl__value_new(requeue->value, &nomem);
	}
	if (!(lk = dl__lock_get(t, name)))
		return DL_ENOMEM;
	if (session_waiter(s, lk))
		return 0;
	lim = requeue->limit ? requeue->limit : 1;
	if (!lk->holders && !lk->qhead) {
		lk->limit = (uint16_t)lim;
	} else if (lk->limit != lim) {
		/* While the grant was out, the lock was freed (the lease
		 * expired) and taken with another limit: the waiter cannot
		 * wait in it, its LOCK would be refused now (a shared
		 * waiter in a semaphore is no state at all). */
		return DL_ELIMIT;
	}
	w = dl__waiter_new(t, lk, s->owner, s, requeue->ttl_ms,
			   requeue->wait_deadline, requeue->tag,
			   requeue->shared);
	if (!w) {
		dl__lock_drop_if_unused(t, lk);
		return DL_ENOMEM;
	}
	w->has_warn = requeue->has_warn ? 1 : 0;
	w->warn_ms = requeue->warn_ms;
	w->req = requeue->req;
	w->notify = requeue->notify ? 1 : 0;
	w->value = *v;
	*v = NULL;
	dl__waiter_requeue(lk, w, token);
	return 0;
}

int dl_locktab_revoke(struct dl_locktab *t, struct dl_session *s,
		      struct dl_str name, uint64_t token, int reentry,
		      const struct dl_requeue *requeue)
{
	uint64_t now = dl__now_ms(t);
	struct dl_lock *lk = dl__lock_find(t, name);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;
	struct dl_value *v = NULL;
	int err;

	if (l && reentry != DL_REVOKE_RETRY) {
		t->st.revokes++;
		if (reentry) {
			/* never the lease itself (locktab.h) */
			if (l->count > 1) {
				l->count--;
				dl__mark_dirty(t, lk);
			}
			/* nor the id of that reentry: sent again, it is a
			 * reentry to make, not one made (found from outside:
			 * it was answered with no hold added, and the lock
			 * was released one UNLOCK early) */
			dl__lease_forget_req(l);
			dl__mark_dirty(t, lk);
		} else {
			dl__changed(t, DL_CHANGE_WITHDRAWN, l,
				    lk->nholders - 1u, DL_STR_NULL);
			/* its value goes with the waiter put back */
			v = dl__value_take(t, l);
			dl__lease_remove(t, l);
			dl__serve(t, lk, now);
		}
	}
	err = requeue_waiter(t, s, name, token, requeue, &v);
	free(v);
	return err;
}

int dl_locktab_quarantine(struct dl_locktab *t, struct dl_str name,
			  uint32_t ttl_ms, uint64_t deadline)
{
	struct dl_str id = DL_STR_LIT(DL_QUARANTINE_OWNER);
	struct dl_lock *lk;
	struct dl_owner *o;
	struct dl_lease *l;

	if (dl_check_name(name.p, name.len) || ttl_ms == 0)
		return DL_EBADARG;
	if (dl__tokens_exhausted(t))
		return DL_ELIMIT;
	if (!(lk = dl__lock_get(t, name)))
		return DL_ENOMEM;
	if (lk->holders) { /* one quarantine per lock is enough */
		return 0;
	}
	if (!(o = dl__owner_get(t, id)) ||
	    !(l = dl__lease_alloc(DL_STR_NULL, NULL, 0))) {
		if (o)
			dl__owner_put(t, o);
		dl__lock_drop_if_unused(t, lk);
		return DL_ENOMEM;
	}
	dl__lease_link(t, l, lk, o, dl__token_next(t), 1, ttl_ms, deadline,
		       dl__now_ms(t), 0);
	return 0;
}

uint64_t dl_token_floor(uint64_t stored_last, uint64_t unix_ms)
{
	uint64_t floor = unix_ms > UINT64_MAX / DL_TOKEN_PER_MS
				 ? UINT64_MAX / 2
				 : unix_ms * DL_TOKEN_PER_MS;

	return stored_last > floor ? stored_last : floor;
}

void dl_locktab_raise_token(struct dl_locktab *t, uint64_t last)
{
	if (last > t->last_token)
		t->last_token = last;
}

uint64_t dl_locktab_last_token(const struct dl_locktab *t)
{
	return t->last_token;
}

const struct dl_lock *dl_locktab_find(struct dl_locktab *t, struct dl_str name)
{
	return dl__lock_find(t, name);
}

uint64_t dl_lease_held_ms(const struct dl_lease *l, uint64_t now)
{
	return now > l->granted_at ? now - l->granted_at : 0;
}

const struct dl_locktab_stats *dl_locktab_stats(const struct dl_locktab *t)
{
	return &t->st;
}
