/* SPDX-License-Identifier: MIT */
/*
 * locktab_verify.c -- a full check of the lock table's invariants, for
 * tests and fuzzers (dl_locktab_verify in locktab.h). It walks every lock,
 * lease, waiter and owner: O(size of the table), never on the daemon's
 * request path.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "server/locktab/locktab.h"
#include "server/locktab/locktab_private.h"

struct verify {
	const struct dl_locktab *t;
	uint64_t leases, waiters, locks, placeholders, timed, dirty, urgent;
	uint64_t warns;	   /* leases with a warning */
	uint64_t notifies; /* leases told of waiters */
	uint64_t values;   /* leases with a value */
	uint64_t delays;   /* locks with a delay */
	uint64_t charged;  /* delays charged to an account */
	uint64_t contended[DL_QUEUE_BUCKETS];
	char *why;
	size_t whylen;
};

static int fail(struct verify *v, const struct dl_lock *lk, const char *what)
{
	snprintf(v->why, v->whylen, "lock %.*s: %s", (int)lk->hn.len, lk->name,
		 what);
	return -1;
}

/* A lease's warning (locktab_side.c): there iff its bit says so, its own,
 * armed at most once. */
static int verify_warn(struct verify *v, const struct dl_lease *l)
{
	const struct dl__side *sd = dl__side_find(v->t, &v->t->warns, l);
	const struct dl_warn *w =
		sd ? (const struct dl_warn *)((const char *)sd -
					      offsetof(struct dl_warn, side))
		   : NULL;

	if (!w != !l->has_warn)
		return fail(v, l->lock, "a lease's warning bit is wrong");
	if (w &&
	    (w->lease != l || w->warn_ms == 0 || w->kind != DL__TIMED_WARN))
		return fail(v, l->lock, "a warning is not its lease's");
	if (w)
		v->warns++;
	v->timed += w && dl_wheel_pending(&w->timer);
	return 0;
}

/* A lease's news of waiters (locktab_side.c): its own, on a lock that
 * says it may have some. The lookup is by address, so it is made
 * whatever lk->notify says: one on a lock without it would never be
 * found, nor freed with its lease. */
static int verify_notify(struct verify *v, const struct dl_lease *l)
{
	const struct dl__side *sd = dl__side_find(v->t, &v->t->notifies, l);
	const struct dl_notify *n =
		sd ? (const struct dl_notify *)((const char *)sd -
						offsetof(struct dl_notify,
							 side))
		   : NULL;

	if (!n)
		return 0;
	if (n->lease != l || !l->lock->notify)
		return fail(v, l->lock, "news of waiters not its lease's");
	v->notifies++;
	return 0;
}

/* A lease's value: its own, on a lock that says it may have some (the
 * lookup by address whatever lk->valued says, as for news of waiters). */
static int verify_value(struct verify *v, const struct dl_lease *l)
{
	const struct dl__side *sd = dl__side_find(v->t, &v->t->values, l);
	const struct dl_value *x =
		sd ? (const struct dl_value *)((const char *)sd -
					       offsetof(struct dl_value, side))
		   : NULL;

	if (!x)
		return 0;
	if (x->lease != l || !l->lock->valued || x->len == 0 ||
	    x->len > DL_VALUE_MAX)
		return fail(v, l->lock, "a value not its lease's");
	v->values++;
	return 0;
}

static int verify_holders(struct verify *v, const struct dl_lock *lk)
{
	const struct dl_lease *l, *m;
	uint32_t n = 0;

	for (l = lk->holders; l; l = l->next, n++) {
		if (l->lock != lk)
			return fail(v, lk, "a holder points at another lock");
		if (l->count < 1)
			return fail(v, lk, "hold count 0");
		if (l->token == 0 || l->token > v->t->last_token)
			return fail(v, lk, "token 0 or above the last issued");
		if (!dl_wheel_pending(&l->timer))
			return fail(v, lk, "a lease without a deadline");
		if (l->ttl_ms == 0)
			return fail(v, lk, "a lease with TTL 0");
		for (m = l->next; m; m = m->next)
			if (m->owner == l->owner || m->token == l->token)
				return fail(v, lk,
					    "two leases of one owner or token");
		if (l->shared != lk->holders->shared)
			return fail(v, lk, "holders of both modes at once");
		if (verify_warn(v, l) || verify_notify(v, l) ||
		    verify_value(v, l))
			return -1;
		v->timed++;
	}
	if (!lk->holders && (lk->notify || lk->valued))
		return fail(v, lk,
			    "news of waiters or values on a lock nobody holds");
	if (lk->limit < 1 ||
	    (lk->holders && lk->holders->shared && lk->limit != 1))
		return fail(v, lk,
			    "limit out of range, or shared with a limit");
	if (n != lk->nholders ||
	    n > (lk->holders && lk->holders->shared ? DL_SHARED_MAX
						    : lk->limit))
		return fail(v, lk, "holder count wrong or over the maximum");
	v->leases += n;
	return 0;
}

static int verify_queue(struct verify *v, const struct dl_lock *lk)
{
	const struct dl_waiter *w, *prev = NULL;
	uint32_t n = 0;

	for (w = lk->qhead; w; prev = w, w = w->qnext, n++) {
		if (w->lock != lk || (w != lk->qhead && w->qprev != prev))
			return fail(v, lk, "queue links broken");
		if (w->ttl_ms == 0)
			return fail(v, lk, "a waiter asking for TTL 0");
		if (w->shared && lk->limit != 1)
			return fail(v, lk, "a shared waiter on a semaphore");
		if (dl_wheel_pending(&w->timer) !=
		    (w->wait_deadline != UINT64_MAX || !w->sess))
			return fail(
				v, lk,
				"a waiter's timer does not match its deadline");
		v->timed += dl_wheel_pending(&w->timer);
		v->placeholders += !w->sess;
	}
	if ((lk->qhead && lk->qhead->qprev != prev) || n != lk->nwaiters)
		return fail(v, lk, "queue tail or count wrong");
	v->waiters += n;
	if (n)
		v->contended[dl_queue_bucket((uint32_t)n)]++;
	return 0;
}

/* Nobody that could be served waits: a lock with room for its head's mode
 * (or whose head's owner holds it, a reentry) has an empty queue or a
 * placeholder at its head, unless grants are suspended or its slot is
 * frozen. */
static int verify_served(struct verify *v, const struct dl_lock *lk)
{
	const struct dl_waiter *w = lk->qhead;
	const struct dl_lease *l;

	if (v->t->suspended || v->t->closed_until || lk->delaying || !w ||
	    !w->sess || dl__frozen(v->t, lk))
		return 0;
	l = dl__holder_of(lk, w->owner);
	if (!l && dl__has_room(lk, w->shared))
		return fail(v, lk, "room free and a live waiter at the head");
	if (l && l->count < DL_REENTRY_MAX && !(l->shared && !w->shared))
		return fail(v, lk, "the head waits for a lock its owner holds");
	return 0;
}

/* A lock's delay (locktab_side.c): there iff its bit says so, its own;
 * its timer pending iff the lock is in it. */
static int verify_delay(struct verify *v, const struct dl_lock *lk)
{
	const struct dl_delay *d = dl__delay_of(v->t, lk);

	if (lk->has_delay != (dl__side_find(v->t, &v->t->delays, lk) != NULL))
		return fail(v, lk, "a lock's delay bit is wrong");
	if (d &&
	    (d->lock != lk || d->delay_ms == 0 ||
	     d->delay_ms > DL_LOCK_DELAY_MAX_MS || d->kind != DL__TIMED_DELAY))
		return fail(v, lk, "a delay is not its lock's");
	if (lk->delaying && !d)
		return fail(v, lk, "in a delay it does not have");
	if (d && dl_wheel_pending(&d->timer) != lk->delaying)
		return fail(v, lk, "a delay's timer does not match its state");
	if (d && d->acct && !lk->delaying)
		return fail(v, lk, "a delay not running is charged");
	v->charged += d && d->acct;
	v->delays += d != NULL;
	v->timed += lk->delaying;
	return 0;
}

static int verify_lock(struct verify *v, const struct dl_lock *lk)
{
	v->locks++;
	v->dirty += lk->dirty;
	v->urgent += lk->urgent;
	if (!lk->holders && !lk->qhead && !lk->delaying && !lk->dirty)
		return fail(v, lk, "empty and not waiting for the store");
	if (verify_delay(v, lk))
		return -1;
	if (lk->urgent && !lk->dirty)
		return fail(v, lk, "urgent but not dirty");
	if (verify_holders(v, lk) || verify_queue(v, lk))
		return -1;
	return verify_served(v, lk);
}

/* Accounts: their counts add up to their owners' (the owners' add up to
 * the table's) and to the delays charged, and none is empty. */
static int verify_accounts(struct verify *v, uint64_t owners)
{
	const struct dl_htab *h = &v->t->accounts;
	const struct dl_account *a;
	const struct dl_hnode *n;
	uint64_t leases = 0, waiters = 0, in = 0, charged = 0;
	size_t i;

	for (i = 0; i < dl_htab_slots(h); i++)
		for (n = *dl_htab_slot(h, i); n; n = n->next) {
			a = (const struct dl_account
				     *)((const char *)n -
					offsetof(struct dl_account, hn));
			leases += a->nleases;
			waiters += a->nwaiters;
			in += a->nowners;
			charged += a->ndelays;
			if (!a->nowners && !a->ndelays) {
				snprintf(v->why, v->whylen,
					 "account %.*s: nothing refers to it",
					 (int)a->hn.len, a->name);
				return -1;
			}
		}
	if (leases != v->leases || waiters != v->waiters || in != owners ||
	    charged != v->charged) {
		snprintf(v->why, v->whylen, "account counts do not add up");
		return -1;
	}
	return 0;
}

/* Owners: their counts add up to the leases and waiters found. */
static int verify_owners(struct verify *v)
{
	const struct dl_htab *h = &v->t->owners;
	const struct dl_owner *o;
	const struct dl_hnode *n;
	uint64_t leases = 0, waiters = 0, owners = 0;
	size_t i;

	for (i = 0; i < dl_htab_slots(h); i++)
		for (n = *dl_htab_slot(h, i); n; n = n->next) {
			o = (const struct dl_owner *)((const char *)n -
						      offsetof(struct dl_owner,
							       hn));
			leases += o->nleases;
			waiters += o->nwaiters;
			owners++;
			if (!o->sessions && !o->nleases && !o->nwaiters) {
				snprintf(v->why, v->whylen,
					 "owner %.*s: nothing refers to it",
					 (int)o->hn.len, o->id);
				return -1;
			}
			if (o->walk) { /* a deadlock check's, left over */
				snprintf(v->why, v->whylen,
					 "owner %.*s: marked by a walk",
					 (int)o->hn.len, o->id);
				return -1;
			}
		}
	if (leases != v->leases || waiters != v->waiters ||
	    owners != v->t->st.owners) {
		snprintf(v->why, v->whylen, "owner counts do not add up");
		return -1;
	}
	return verify_accounts(v, owners);
}

int dl_locktab_verify(const struct dl_locktab *t, char *why, size_t whylen)
{
	struct verify v = {.t = t, .why = why, .whylen = whylen};
	const struct dl_hnode *n;
	const char *bad;
	size_t i;

	for (i = 0; i < dl_htab_slots(&t->locks); i++)
		for (n = *dl_htab_slot(&t->locks, i); n; n = n->next)
			if (verify_lock(&v, (const struct dl_lock
						     *)((const char *)n -
							offsetof(struct dl_lock,
								 hn))))
				return -1;
	if (v.locks != t->st.locks || v.leases != t->st.leases ||
	    v.waiters != t->st.waiters || v.placeholders != t->placeholders ||
	    v.dirty != t->ndirty || v.urgent != t->nurgent ||
	    v.timed != dl_wheel_count(&t->wheel) || v.warns != t->warns.n ||
	    v.delays != t->delays.n || v.notifies != t->notifies.n ||
	    v.values != t->values.n ||
	    memcmp(v.contended, t->st.contended, sizeof(v.contended)) != 0) {
		snprintf(
			why, whylen,
			"totals do not add up (locks, leases, waiters, placeholders, dirty or urgent set, wheel, warnings, delays or contended locks)");
		return -1;
	}
	if ((bad = dl__index_check(t, v.locks)) != NULL) {
		snprintf(why, whylen, "index: %s", bad);
		return -1;
	}
	return verify_owners(&v);
}
