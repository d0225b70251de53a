/* SPDX-License-Identifier: MIT */
/*
 * locktab_side.c -- the lock table's side objects: state that few leases
 * or locks have, kept beside them (locktab_private.h).
 *
 * Owns: the side objects, in hashes of the table keyed by the address of
 * the lease or lock each belongs to (struct dl__side). A lease or lock has
 * a bit that says it has one, so that the others never look them up.
 *
 * Why beside and not inside: a held lease is one 72-byte allocation and a
 * lock one of 40 bytes plus its name (locktab.h, Memory); a field for a
 * feature few use would move every one of them to a bigger malloc chunk.
 * A side object costs only those that have one: an allocation and a hash
 * entry.
 *
 * Warnings (LOCK ... warn=): struct dl_warn, one per lease that asked for
 * one, with a wheel entry of its own at the lease's deadline less warn_ms.
 * Invariants: l->has_warn iff a warning of l is in t->warns; its lease's
 * entry is never moved for it (the expiry is exactly as without one); it
 * is armed (pending) from each change of the lease's deadline until it
 * fires, and fires at most once per deadline; it goes when the lease goes
 * (dl__lease_remove), so nothing is said about a released lease.
 *
 * Delays (LOCK ... delay=, Chubby's lock-delay): struct dl_delay, one per
 * lock that has one. Invariants: lk->has_delay iff a delay of lk is in
 * t->delays; lk->delaying iff its timer is pending, at the end of the
 * delay; while it runs, the lock grants nobody new (dl__serve, acquire)
 * and is not empty; it goes when the lock leaves the table (lock_free).
 * Only an end the holder did not ask for starts it (dl__lease_end); a
 * release, or a grant withdrawn before its holder heard of it, does not.
 * A running delay is charged to the account of the lease whose end
 * started it (d->acct, the account's ndelays): a lock kept busy counts
 * against that user's quota of locks until the delay is over, or a user
 * could fill the table with locks nobody holds.
 *
 * Being told of waiters (LOCK ... notify=waiters): struct dl_notify, one
 * per lease that asked, with what it was last told. Invariants: one is
 * in t->notifies only while its lease holds, and only on a lock with
 * lk->notify (so a lock without it looks nothing up); it goes when the
 * lease goes (dl__lease_remove).
 *
 * Values (LOCK, REFRESH ... value=): struct dl_value, one per lease that
 * has one. Invariants as news of waiters': only on a lock with
 * lk->valued, gone with the lease; a waiter may own one (w->value) that
 * is given to its lease at the grant, so that a grant never allocates.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "server/locktab/locktab.h"
#include "server/locktab/locktab_private.h"

_Static_assert(offsetof(struct dl__side, key) == sizeof(struct dl_hnode),
	       "a side object's key must follow its hash node");

/* ---- side objects ------------------------------------------------------- */

struct dl__side *dl__side_find(const struct dl_locktab *t,
			       const struct dl_htab *h, const void *of)
{
	struct dl_str k = {(const char *)&of, sizeof(of)};
	struct dl_hnode *n =
		dl_htab_find(h, dl_hash_bytes(t->seed, k.p, k.len), k);

	return n ? (struct dl__side *)((char *)n -
				       offsetof(struct dl__side, hn))
		 : NULL;
}

void dl__side_insert(const struct dl_locktab *t, struct dl_htab *h,
		     struct dl__side *sd, const void *of)
{
	memcpy(sd->key, &of, sizeof(of));
	sd->hn.hash = dl_hash_bytes(t->seed, sd->key, sizeof(sd->key));
	sd->hn.len = (uint8_t)sizeof(sd->key);
	dl_htab_insert(h, &sd->hn);
}

/* Free every object of h: each is `off` bytes before its node. */
static void free_side(struct dl_htab *h, size_t off)
{
	struct dl_hnode *n, *next;
	size_t i;

	for (i = 0; i < dl_htab_slots(h); i++) {
		for (n = *dl_htab_slot(h, i); n; n = next) {
			next = n->next;
			free((char *)n - off);
		}
		*dl_htab_slot(h, i) = NULL;
	}
	h->n = 0;
}

void dl__side_free_all(struct dl_locktab *t)
{
	free_side(&t->warns, offsetof(struct dl_warn, side) +
				     offsetof(struct dl__side, hn));
	free_side(&t->delays, offsetof(struct dl_delay, side) +
				      offsetof(struct dl__side, hn));
	free_side(&t->notifies, offsetof(struct dl_notify, side) +
					offsetof(struct dl__side, hn));
	free_side(&t->values, offsetof(struct dl_value, side) +
				      offsetof(struct dl__side, hn));
}

/* ---- warnings ----------------------------------------------------------- */

static struct dl_warn *warn_of(const struct dl_locktab *t,
			       const struct dl_lease *l)
{
	struct dl__side *sd;

	if (!l->has_warn || !(sd = dl__side_find(t, &t->warns, l)))
		return NULL;
	return (struct dl_warn *)((char *)sd - offsetof(struct dl_warn, side));
}

struct dl_warn *dl__warn_alloc(void)
{
	struct dl_warn *w = calloc(1, sizeof(*w));

	if (w)
		w->kind = DL__TIMED_WARN;
	return w;
}

void dl__warn_arm(struct dl_locktab *t, struct dl_lease *l)
{
	struct dl_warn *w = warn_of(t, l);
	uint64_t deadline = l->timer.expires;

	if (!w)
		return;
	/* a deadline closer than warn_ms (a shortening) warns at once */
	dl_wheel_add(&t->wheel, &w->timer,
		     deadline > w->warn_ms ? deadline - w->warn_ms : 0);
}

void dl__warn_drop(struct dl_locktab *t, struct dl_lease *l)
{
	struct dl_warn *w = warn_of(t, l);

	l->has_warn = 0;
	if (!w)
		return;
	dl_wheel_del(&t->wheel, &w->timer);
	dl_htab_remove(&t->warns, &w->side.hn);
	free(w);
}

void dl__warn_set(struct dl_locktab *t, struct dl_lease *l, uint32_t warn_ms,
		  struct dl_warn **spare)
{
	struct dl_warn *w = warn_of(t, l);

	if (warn_ms == 0) {
		dl__warn_drop(t, l);
		return;
	}
	if (!w) {
		w = *spare;
		*spare = NULL;
		w->lease = l;
		dl__side_insert(t, &t->warns, &w->side, l);
		l->has_warn = 1;
	}
	w->warn_ms = warn_ms;
	dl__warn_arm(t, l);
}

uint32_t dl__warn_ms(const struct dl_locktab *t, const struct dl_lease *l)
{
	const struct dl_warn *w = warn_of(t, l);

	return w ? w->warn_ms : 0;
}

uint32_t dl_locktab_lease_warn(const struct dl_locktab *t,
			       const struct dl_lease *l)
{
	return dl__warn_ms(t, l);
}

void dl__warn_fire(struct dl_locktab *t, struct dl_warn *w, uint64_t now)
{
	struct dl_lease *l = w->lease;
	struct dl_session *s;
	struct dl_event ev;
	uint64_t left = dl__remaining(l, now);

	/* Due in the same tick as its expiry, which the wheel fired first
	 * or fires next: * EXPIRED says it all. */
	if (left == 0)
		return;
	for (s = l->owner->sessions; s; s = s->onext) {
		memset(&ev, 0, sizeof(ev));
		ev.type = DL_EVENT_EXPIRING;
		ev.token = l->token;
		ev.ttl_ms = left;
		ev.deadline = l->timer.expires;
		ev.tag = dl_lease_tag(l);
		dl__emit_ev(t, s, &ev, l->lock);
	}
}

/* ---- delays ------------------------------------------------------------- */

struct dl_delay *dl__delay_of(const struct dl_locktab *t,
			      const struct dl_lock *lk)
{
	struct dl__side *sd;

	if (!lk->has_delay || !(sd = dl__side_find(t, &t->delays, lk)))
		return NULL;
	return (struct dl_delay *)((char *)sd -
				   offsetof(struct dl_delay, side));
}

struct dl_delay *dl__delay_alloc(void)
{
	struct dl_delay *d = calloc(1, sizeof(*d));

	if (d)
		d->kind = DL__TIMED_DELAY;
	return d;
}

void dl__delay_drop(struct dl_locktab *t, struct dl_lock *lk)
{
	struct dl_delay *d = dl__delay_of(t, lk);

	lk->has_delay = 0;
	lk->delaying = 0;
	if (!d)
		return;
	if (d->acct)
		dl__account_uncharge(t, d->acct);
	dl_wheel_del(&t->wheel, &d->timer);
	dl_htab_remove(&t->delays, &d->side.hn);
	free(d);
}

void dl__delay_ask(struct dl_locktab *t, struct dl_lock *lk, uint32_t ms,
		   int fresh, struct dl_delay **spare)
{
	struct dl_delay *d = dl__delay_of(t, lk);

	if (fresh && ms == 0 && d) {
		dl__delay_drop(t, lk);
		dl__mark_dirty(t, lk);
		return;
	}
	if (ms == 0 || (d && d->delay_ms >= ms && !fresh))
		return;
	if (!d) {
		d = *spare;
		*spare = NULL;
		d->lock = lk;
		dl__side_insert(t, &t->delays, &d->side, lk);
		lk->has_delay = 1;
	}
	if (d->delay_ms != ms) {
		d->delay_ms = ms;
		dl__horizon_lock(t, lk); /* a longer delay after them */
		dl__mark_dirty(t, lk);
	}
}

void dl__delay_start(struct dl_locktab *t, struct dl_lock *lk, uint64_t now,
		     struct dl_account *a)
{
	struct dl_delay *d = dl__delay_of(t, lk);
	uint64_t end;

	if (!d)
		return;
	end = dl__deadline_after(now, d->delay_ms);
	if (!lk->delaying || end > d->timer.expires)
		dl_wheel_add(&t->wheel, &d->timer, end);
	if (!lk->delaying && !d->acct) {
		d->acct = a;
		a->ndelays++;
	}
	dl__horizon_note(t, end);
	lk->delaying = 1;
	dl__mark_dirty(t, lk);
}

uint64_t dl__delay_left(const struct dl_locktab *t, const struct dl_lock *lk,
			uint64_t now)
{
	const struct dl_delay *d;

	if (!lk->delaying || !(d = dl__delay_of(t, lk)))
		return 0;
	return d->timer.expires > now ? d->timer.expires - now : 0;
}

void dl__delay_fire(struct dl_locktab *t, struct dl_delay *d, uint64_t now)
{
	struct dl_lock *lk = d->lock;

	/* over: the record loses its end (or the lock, if empty, its
	 * record), lazily -- a crash before that restores the delay whole,
	 * which only keeps the lock busy longer */
	lk->delaying = 0;
	if (d->acct) {
		dl__account_uncharge(t, d->acct);
		d->acct = NULL;
	}
	dl__mark_dirty(t, lk);
	dl__serve(t, lk, now);
}

uint32_t dl_locktab_lock_delay(const struct dl_locktab *t,
			       const struct dl_lock *lk, uint64_t *end)
{
	const struct dl_delay *d = dl__delay_of(t, lk);

	if (end)
		*end = d && lk->delaying ? d->timer.expires : 0;
	return d ? d->delay_ms : 0;
}

int dl_locktab_restore_delay(struct dl_locktab *t, struct dl_str name,
			     uint32_t delay_ms, int running, uint32_t limit)
{
	struct dl_delay *d;
	struct dl_lock *lk;
	uint64_t now = dl__now_ms(t);

	if (dl_check_name(name.p, name.len) || delay_ms == 0 ||
	    delay_ms > DL_LOCK_DELAY_MAX_MS || limit == 0 ||
	    limit > DL_LIMIT_MAX)
		return DL_EBADARG;
	if (!(d = dl__delay_alloc()))
		return DL_ENOMEM;
	if (!(lk = dl__lock_get(t, name))) {
		free(d);
		return DL_ENOMEM;
	}
	/* the record's first item: the lock is new, or a damaged record
	 * names it twice */
	if (lk->holders || lk->qhead || lk->has_delay) {
		free(d);
		return DL_EBADARG;
	}
	/* as its record says: nothing to write back */
	lk->limit = (uint16_t)limit;
	d->lock = lk;
	d->delay_ms = delay_ms;
	dl__side_insert(t, &t->delays, &d->side, lk);
	lk->has_delay = 1;
	if (running) {
		dl_wheel_add(&t->wheel, &d->timer,
			     dl__deadline_after(now, delay_ms));
		dl__horizon_note(t, d->timer.expires);
		lk->delaying = 1;
	}
	return 0;
}

/* ---- being told of waiters ---------------------------------------------- */

/* At most one news of waiters a second per lease, past the doublings of
 * the queue (locktab.h): what one client's queued requests can make
 * another's connection read. */
#define NOTIFY_QUIET_MS 1000

struct dl_notify *dl__notify_of(const struct dl_locktab *t,
				const struct dl_lease *l)
{
	struct dl__side *sd;

	if (!l->lock->notify || !(sd = dl__side_find(t, &t->notifies, l)))
		return NULL;
	return (struct dl_notify *)((char *)sd -
				    offsetof(struct dl_notify, side));
}

struct dl_notify *dl__notify_alloc(void)
{
	return calloc(1, sizeof(struct dl_notify));
}

/* l asks for news of waiters (taking *spare); 1 if it did not before. */
static int notify_attach(struct dl_locktab *t, struct dl_lease *l,
			 struct dl_notify **spare)
{
	struct dl_notify *n;

	if (dl__notify_of(t, l) || !*spare)
		return 0;
	n = *spare;
	*spare = NULL;
	n->lease = l;
	dl__side_insert(t, &t->notifies, &n->side, l);
	l->lock->notify = 1;
	return 1;
}

void dl__notify_set(struct dl_locktab *t, struct dl_lease *l,
		    struct dl_notify **spare)
{
	if (notify_attach(t, l, spare))
		dl__mark_dirty(t, l->lock); /* its record says so */
}

void dl__notify_restore(struct dl_locktab *t, struct dl_lease *l,
			struct dl_notify **spare)
{
	notify_attach(t, l, spare); /* what Redis holds: not dirty */
}

void dl__notify_drop(struct dl_locktab *t, struct dl_lease *l)
{
	struct dl_notify *n = dl__notify_of(t, l);

	if (!n)
		return;
	dl_htab_remove(&t->notifies, &n->side.hn);
	free(n);
}

int dl_locktab_lease_notify(const struct dl_locktab *t,
			    const struct dl_lease *l)
{
	return dl__notify_of(t, l) != NULL;
}

/* Tell n's lease (and every session of its owner) how many wait. */
static void notify_tell(struct dl_locktab *t, struct dl_notify *n, uint64_t now)
{
	struct dl_lease *l = n->lease;
	struct dl_session *s;
	struct dl_event ev;

	n->told = l->lock->nwaiters;
	n->told_at = now;
	for (s = l->owner->sessions; s; s = s->onext) {
		memset(&ev, 0, sizeof(ev));
		ev.type = DL_EVENT_WAITING;
		/* after its grant is durable, as the grant's own line (found
		 * from outside: the owner's other connections heard of
		 * waiters for a grant Redis had not recorded yet) */
		ev.durable = 1;
		ev.token = l->token;
		ev.holds = n->told;
		ev.tag = dl_lease_tag(l);
		dl__emit_ev(t, s, &ev, l->lock);
	}
}

void dl__notify_holders(struct dl_locktab *t, struct dl_lock *lk, uint64_t now,
			int fresh)
{
	uint32_t waiters = lk->nwaiters;
	struct dl_notify *n;
	struct dl_lease *l;

	if (!lk->notify || !waiters)
		return;
	for (l = lk->holders; l; l = l->next) {
		if (!(n = dl__notify_of(t, l)))
			continue;
		if (n->told && (fresh || (waiters < 2 * (uint64_t)n->told &&
					  now - n->told_at < NOTIFY_QUIET_MS)))
			continue;
		if (l == t->replying) {
			/* its grant's reply is not out yet: after it */
			t->reply_tell = 1;
			continue;
		}
		notify_tell(t, n, now);
	}
}

void dl_locktab_tell_waiting(struct dl_locktab *t, struct dl_str name,
			     uint64_t token)
{
	struct dl_lock *lk = dl__lock_find(t, name);
	struct dl_lease *l = lk ? dl__holder_by_token(lk, token) : NULL;
	struct dl_notify *n = l ? dl__notify_of(t, l) : NULL;

	if (n && lk->nwaiters)
		notify_tell(t, n, dl__now_ms(t));
}

/* ---- values ---------------------------------------------------------------
 */

struct dl_value *dl__value_new(struct dl_str v, int *nomem)
{
	struct dl_value *x;

	if (!v.len || v.len > DL_VALUE_MAX)
		return NULL;
	if (!(x = calloc(1, sizeof(*x)))) {
		*nomem = 1;
		return NULL;
	}
	x->len = (uint8_t)v.len;
	memcpy(x->v, v.p, v.len);
	return x;
}

struct dl_value *dl__value_of(const struct dl_locktab *t,
			      const struct dl_lease *l)
{
	struct dl__side *sd;

	if (!l->lock->valued || !(sd = dl__side_find(t, &t->values, l)))
		return NULL;
	return (struct dl_value *)((char *)sd -
				   offsetof(struct dl_value, side));
}

struct dl_value *dl__value_take(struct dl_locktab *t, struct dl_lease *l)
{
	struct dl_value *x = dl__value_of(t, l);

	if (x)
		dl_htab_remove(&t->values, &x->side.hn);
	return x;
}

/* l gets *v (taken): 1 if its value changed, -1 if *v was NULL. */
static int value_attach(struct dl_locktab *t, struct dl_lease *l,
			struct dl_value **v)
{
	struct dl_value *old, *x = v ? *v : NULL;
	int same;

	if (!x)
		return -1;
	*v = NULL;
	old = dl__value_take(t, l);
	same = old && old->len == x->len && !memcmp(old->v, x->v, x->len);
	free(old);
	x->lease = l;
	dl__side_insert(t, &t->values, &x->side, l);
	l->lock->valued = 1;
	return !same;
}

int dl__value_give(struct dl_locktab *t, struct dl_lease *l,
		   struct dl_value **v)
{
	int changed = value_attach(t, l, v);

	if (changed < 0)
		return 0;
	dl__mark_dirty(t, l->lock); /* its record says it */
	return changed;
}

void dl__value_restore(struct dl_locktab *t, struct dl_lease *l,
		       struct dl_value **v)
{
	value_attach(t, l, v); /* what Redis holds: not dirty */
}

struct dl_str dl_locktab_lease_value(const struct dl_locktab *t,
				     const struct dl_lease *l)
{
	const struct dl_value *x = dl__value_of(t, l);

	return x ? (struct dl_str){x->v, x->len} : DL_STR_NULL;
}
