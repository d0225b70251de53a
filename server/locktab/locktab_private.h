/* SPDX-License-Identifier: MIT */
/*
 * locktab_private.h -- what locktab.c (objects, queues, expiry) and
 * locktab_ops.c (requests, recovery) share; not an interface for anything
 * else. Every function here keeps the invariants of locktab.h when it
 * returns; callers hold no other locks (there are none: one loop).
 */
#ifndef DL_SERVER_LOCKTAB_PRIVATE_H
#define DL_SERVER_LOCKTAB_PRIVATE_H

#include "server/locktab/htab.h"
#include "server/locktab/locktab.h"

enum {
	DL__TIMED_LEASE = 0, /* two bits (struct dl_lease) */
	DL__TIMED_WAITER = 1,
	DL__TIMED_WARN = 2,
	DL__TIMED_DELAY = 3,
};

/* What leases, waiters and side objects with a timer have in common, for
 * the timer callback. */
struct dl_timed {
	struct dl_wheel_entry timer;
	unsigned kind : 2;
};

/*
 * Side objects (locktab_side.c): state that few leases or locks have
 * lives beside them, not in their structs (locktab.h, Memory: a field
 * every lease paid for would cost a bigger malloc chunk each), in a hash
 * of the table keyed by the address of the lease or lock it belongs to.
 * A bit of that struct says whether it has one.
 */
struct dl__side {
	struct dl_hnode hn;
	char key[sizeof(void *)]; /* the address of its lease or lock */
};

struct dl_locktab {
	struct dl_locktab_hooks hooks;
	struct dl_locktab_limits limits;
	uint64_t seed;
	uint64_t last_token;
	/* tokens this table gives are = token_res modulo token_mod (0: any):
	 * partitions of one namespace give disjoint ones (part.c) */
	uint64_t token_mod, token_res;
	int suspended;	       /* grants suspended (store down) */
	const uint8_t *frozen; /* slots whose queues are not served
				  (locktab_move.c); NULL: none */
	uint64_t closed_until; /* no new lease before (monotonic ms):
				  dl_locktab_close_grants */
	uint64_t horizon;      /* the latest deadline + delay ever set
				  (monotonic ms): dl_locktab_horizon */
	size_t placeholders;   /* restored waiters not yet claimed */
	struct dl_htab locks;
	void *idx; /* the locks by name (locktab_index.c); NULL: none */
	struct dl_htab owners;
	struct dl_htab accounts; /* a few: one per user with owners */
	struct dl_htab warns;	 /* struct dl_warn, by lease (side objects) */
	struct dl_htab delays;	 /* struct dl_delay, by lock (side objects) */
	struct dl_htab notifies; /* struct dl_notify, by lease (side objects) */
	struct dl_htab values;	 /* struct dl_value, by lease (side objects) */
	/* a grant made by the request being executed: its own news of
	 * waiters waits for its reply (dl_locktab_tell_waiting) */
	const struct dl_lease *replying;
	int reply_tell;		/* ... and it has some */
	struct dl_lock **dirty; /* capacity >= number of locks */
	size_t ndirty;
	size_t dirty_cap;
	size_t nurgent;	 /* dirty locks with lk->urgent */
	int owner_new;	 /* an owner was created since the last full drain */
	unsigned pinned; /* dl_locktab_pin: no lock may leave the table */
	struct dl_locktab_stats st;
	struct dl_wheel wheel;
	struct dl_walk *walk;  /* a deadlock check's scratch, made on the
				  first (locktab_cycle.c) */
	struct dl_cycle cycle; /* the last DL_DEADLOCK's */
	int no_deadlock_check; /* dl_locktab_deadlock_check(t, 0) */
};

uint64_t dl__now_ms(const struct dl_locktab *t);
/* The horizon (dl_locktab_horizon) reaches at least `end`. */
static inline void dl__horizon_note(struct dl_locktab *t, uint64_t end)
{
	if (end > t->horizon)
		t->horizon = end;
}
/* ... the end of lease l, and of the delay that may follow it. */
void dl__horizon_lease(struct dl_locktab *t, const struct dl_lease *l);
/* ... the end of every holder of lk, and of lk's delay after it. */
void dl__horizon_lock(struct dl_locktab *t, const struct dl_lock *lk);
/* No new lease may be granted at `now` (dl_locktab_close_grants). */
static inline int dl__closed(const struct dl_locktab *t, uint64_t now)
{
	return now < t->closed_until;
}
/* Tell the change hook (locktab.h) about lease l of its lock, which has
 * `holders` holders once the change is made. */
void dl__changed(struct dl_locktab *t, enum dl_change_kind kind,
		 const struct dl_lease *l, uint32_t holders, struct dl_str by);
void dl__mark_dirty(struct dl_locktab *t, struct dl_lock *lk);
/* Dirty with a change a durable result waits for (locktab.h). */
void dl__mark_urgent(struct dl_locktab *t, struct dl_lock *lk);
void dl__hist_add(struct dl_hist *h, uint64_t ms);
struct dl_owner *dl__owner_get(struct dl_locktab *t, struct dl_str id);
void dl__owner_put(struct dl_locktab *t, struct dl_owner *o);
int dl__owner_full(const struct dl_locktab *t, const struct dl_owner *o);
/* A delay charged to a is over (struct dl_account, ndelays): a may go. */
void dl__account_uncharge(struct dl_locktab *t, struct dl_account *a);
/* o's account is at the session's quota: for one more lease or waiter,
 * or (queue) one more waiter. */
int dl__account_full(const struct dl_session *s, const struct dl_owner *o,
		     int queue);
struct dl_lock *dl__lock_find(const struct dl_locktab *t, struct dl_str name);
struct dl_lock *dl__lock_get(struct dl_locktab *t, struct dl_str name);
void dl__lock_drop_if_unused(struct dl_locktab *t, struct dl_lock *lk);
struct dl_lease *dl__holder_of(const struct dl_lock *lk,
			       const struct dl_owner *o);
struct dl_lease *dl__holder_by_token(const struct dl_lock *lk, uint64_t token);
/* A lease not yet linked, with its tag, its holder's description (a
 * reference is taken; NULL: none) and its request id (0: none, and no
 * room for one). */
struct dl_lease *dl__lease_alloc(struct dl_str tag, struct dl_desc *desc,
				 uint64_t req);
/* A grant or reentry with request id req (0: none, the lease keeps the
 * one it has): the lease keeps it, if it has room (dl__lease_alloc). */
void dl__lease_set_req(struct dl_lease *l, uint64_t req);
/* The lease keeps no request id (its last reentry was withdrawn). */
void dl__lease_forget_req(struct dl_lease *l);
/* Free a lease that is not (or no longer) linked. */
void dl__lease_free(struct dl_lease *l);
/* Attach the allocated lease l to lk as a holder for owner o, with the
 * given token, hold count and deadline (the fallible part, allocation,
 * is done); no dirty mark, no grant counted. */
void dl__lease_link(struct dl_locktab *t, struct dl_lease *l,
		    struct dl_lock *lk, struct dl_owner *o, uint64_t token,
		    uint32_t count, uint32_t ttl, uint64_t deadline,
		    uint64_t now, int shared);
/* A new grant: a lease with the next token, counted and marked dirty;
 * with the value *value (taken; NULL or *value NULL: none) before its
 * watchers hear of it. */
void dl__lease_grant(struct dl_locktab *t, struct dl_lease *l,
		     struct dl_lock *lk, struct dl_owner *o, uint32_t ttl,
		     uint64_t now, int shared, struct dl_value **value);
/* lk can take one more holder of this mode (reentries aside). */
int dl__has_room(const struct dl_lock *lk, int shared);
void dl__lease_remove(struct dl_locktab *t, struct dl_lease *l);
void dl__lease_reenter(struct dl_locktab *t, struct dl_lease *l, uint32_t ttl,
		       uint64_t now);
/* l lasts at least ttl from now (a reentry's, a retry's), made durable. */
void dl__lease_extend(struct dl_locktab *t, struct dl_lease *l, uint32_t ttl,
		      uint64_t now);
uint64_t dl__deadline_after(uint64_t now, uint64_t ms);
int dl__tokens_exhausted(const struct dl_locktab *t);
/* The next token to give (last_token raised to it): the smallest above
 * last_token in this table's residue class. */
uint64_t dl__token_next(struct dl_locktab *t);
uint64_t dl__remaining(const struct dl_lease *l, uint64_t now);
uint64_t dl__waiter_position(const struct dl_waiter *w);
void dl__waiter_free(struct dl_locktab *t, struct dl_waiter *w);
void dl__waiter_attach(struct dl_waiter *w, struct dl_session *s);
void dl__waiter_set(struct dl_waiter *w, uint32_t ttl, struct dl_str tag);
struct dl_waiter *dl__waiter_new(struct dl_locktab *t, struct dl_lock *lk,
				 struct dl_owner *o, struct dl_session *s,
				 uint32_t ttl, uint64_t timer_at,
				 struct dl_str tag, int shared);
void dl__waiter_to_head(struct dl_lock *lk, struct dl_waiter *w);
/* A withdrawn grant's waiter, back in its place (locktab.c). */
void dl__waiter_requeue(struct dl_lock *lk, struct dl_waiter *w,
			uint64_t token);
void dl__serve(struct dl_locktab *t, struct dl_lock *lk, uint64_t now);
/* Serve every lock that has a queue (grants resumed, or thawed). */
void dl__serve_queued(struct dl_locktab *t, uint64_t now);
/* lk's slot is frozen: its queue is not served (locktab_move.c). */
int dl__frozen(const struct dl_locktab *t, const struct dl_lock *lk);
void dl__reap(struct dl_locktab *t, struct dl_lock *lk, uint64_t now);
/* The deadlock check (locktab_cycle.c): 1 if session s waiting for lk
 * in `shared` mode would close a cycle (t->cycle then says which), 0 if
 * not or if the walk gave up. `claim` is the restored place in lk's queue
 * that s's owner claims, or NULL for a new wait at the tail. `budget`
 * (NULL: none) caps the walk's steps, and is debited by them. */
int dl__deadlock_check(struct dl_locktab *t, struct dl_lock *lk,
		       const struct dl_session *s, int shared,
		       const struct dl_waiter *claim, uint32_t *budget);
void dl__walk_free(struct dl_walk *k);

/* End lease l now as if it had expired (its owner is told), then serve
 * the queue. */
void dl__lease_end(struct dl_locktab *t, struct dl_lease *l, uint64_t now,
		   struct dl_str by);
/* ... without the delay and the queue: its owner is told, it is gone. */
void dl__lease_drop(struct dl_locktab *t, struct dl_lease *l, struct dl_str by);
/* Pass ev (its name set from lk) to the event hook. */
void dl__emit_ev(struct dl_locktab *t, struct dl_session *s,
		 struct dl_event *ev, const struct dl_lock *lk);

/* ---- locktab_side.c ----------------------------------------------------- */

struct dl__side *dl__side_find(const struct dl_locktab *t,
			       const struct dl_htab *h, const void *of);
void dl__side_insert(const struct dl_locktab *t, struct dl_htab *h,
		     struct dl__side *sd, const void *of);

/*
 * A lease's warning (LOCK ... warn=): * EXPIRING goes to its owner's
 * sessions when warn_ms of its lease remain, unrefreshed. The warning has
 * a wheel entry of its own, at deadline - warn_ms: the lease's entry, at
 * the deadline, is never moved for it, so a warning cannot make an expiry
 * early or late. Each change of the deadline (a grant, a reentry or
 * refresh that moves it, a shortening, a restore) arms it again
 * (dl__warn_arm); it fires once per deadline. A lease with warn_ms 0 has
 * none.
 */
struct dl_warn {
	struct dl_wheel_entry timer; /* at the lease's deadline - warn_ms */
	unsigned kind : 2;	     /* DL__TIMED_WARN */
	uint32_t warn_ms;
	struct dl_lease *lease;
	struct dl__side side; /* keyed by the lease */
};

/* The fallible half of setting a warning, made before anything changes;
 * dl__warn_set takes it, or it is given back with free(). */
struct dl_warn *dl__warn_alloc(void);
/* Give l the warning warn_ms (0: none), using *spare if it has none yet
 * (*spare is then NULL), and arm it. */
void dl__warn_set(struct dl_locktab *t, struct dl_lease *l, uint32_t warn_ms,
		  struct dl_warn **spare);
/* Its deadline moved: arm l's warning (if any) for it. */
void dl__warn_arm(struct dl_locktab *t, struct dl_lease *l);
/* l ends: its warning goes with it. */
void dl__warn_drop(struct dl_locktab *t, struct dl_lease *l);
/* l's warn_ms, 0 if none. */
uint32_t dl__warn_ms(const struct dl_locktab *t, const struct dl_lease *l);
/* The warning's timer fired: tell the owner. */
void dl__warn_fire(struct dl_locktab *t, struct dl_warn *w, uint64_t now);

/*
 * Being told of waiters (LOCK notify=waiters, locktab.h): struct
 * dl_notify, one per lease that asked, found only on locks with
 * lk->notify (set when one is added, cleared when the lock has no
 * holder). It keeps what the lease was last told, for the rule of
 * dl__notify_holders.
 */
struct dl_notify {
	struct dl_lease *lease;
	uint32_t told;	      /* the waiters it was last told of, 0: never */
	uint64_t told_at;     /* monotonic ms, when */
	struct dl__side side; /* keyed by the lease */
};
struct dl_notify *dl__notify_alloc(void);

/* A lease's value (LOCK, REFRESH value=, locktab.h): struct dl_value,
 * one per lease that has one, found only on locks with lk->valued. */
struct dl_value {
	struct dl_lease *lease;
	uint8_t len;
	char v[DL_VALUE_MAX];
	struct dl__side side; /* keyed by the lease */
};
/* A value not given to a lease yet (NULL for len 0, or out of memory:
 * *nomem set). */
struct dl_value *dl__value_new(struct dl_str v, int *nomem);
/* l, linked, gets *v (taken; *v NULL: nothing changes); the value it had
 * is freed. 1 if l's value changed. */
int dl__value_give(struct dl_locktab *t, struct dl_lease *l,
		   struct dl_value **v);
struct dl_value *dl__value_of(const struct dl_locktab *t,
			      const struct dl_lease *l);
/* dl__value_give for a lease restored from its record (not dirty). */
void dl__value_restore(struct dl_locktab *t, struct dl_lease *l,
		       struct dl_value **v);
/* l's value, taken from it (NULL: none): it goes on to a waiter put
 * back (dl_locktab_revoke). */
struct dl_value *dl__value_take(struct dl_locktab *t, struct dl_lease *l);
/* l asks to be told (taking *spare if it has no object yet). */
void dl__notify_set(struct dl_locktab *t, struct dl_lease *l,
		    struct dl_notify **spare);
struct dl_notify *dl__notify_of(const struct dl_locktab *t,
				const struct dl_lease *l);
/* The same for a lease restored from its record: the record says it
 * already, so the lock is not made dirty. */
void dl__notify_restore(struct dl_locktab *t, struct dl_lease *l,
			struct dl_notify **spare);
/* l ends: its object goes with it. */
void dl__notify_drop(struct dl_locktab *t, struct dl_lease *l);
/* Waiters came (a request queued, or a grant left some behind): tell
 * each holder of lk that asked, by the rule of locktab.h; `fresh` tells
 * only the ones never told (after a grant). */
void dl__notify_holders(struct dl_locktab *t, struct dl_lock *lk, uint64_t now,
			int fresh);
/*
 * A lock's delay (LOCK delay=, locktab.h): after one of its leases ends
 * without a release (dl__lease_end: an expiry, a BREAK), nobody new is
 * let in for delay_ms; lk->delaying says it is running, and its wheel
 * entry, pending meanwhile, fires at its end, when the queue is served.
 * A lock in its delay is not empty (dl_lock_empty): it keeps its record
 * and its place in the table until the delay is over.
 */
struct dl_delay {
	struct dl_wheel_entry timer; /* the end of the delay it is in */
	unsigned kind : 2;	     /* DL__TIMED_DELAY */
	uint32_t delay_ms;
	struct dl_lock *lock;
	/* the account charged while it runs (NULL: none, a delay restored
	 * from the store): that of the lease whose end started it */
	struct dl_account *acct;
	struct dl__side side; /* keyed by the lock */
};

struct dl_delay *dl__delay_alloc(void);

/*
 * The index (locktab_index.c): every lock of the table by name, in byte
 * order, each node counting the listed locks below it (lk->listed). A
 * lock enters it when it enters the table (DL_ENOMEM: it does not enter
 * the table either) and leaves with it.
 */
int dl__index_insert(struct dl_locktab *t, struct dl_lock *lk);
void dl__index_remove(struct dl_locktab *t, struct dl_lock *lk);
/* lk has a holder or a waiter (listed), or neither any more. */
void dl__index_listed(struct dl_locktab *t, struct dl_lock *lk, int listed);
void dl__index_free_all(struct dl_locktab *t);
/* A walk of the listed locks whose names begin with a prefix: each to
 * each(lk, arg), in no promised order; or, each NULL, those after a name
 * in byte order into page[] up to limit, `more` counting the others. */
struct dl_index_walk {
	void (*each)(const struct dl_lock *lk, void *arg);
	void *arg;
	const struct dl_lock **page;
	size_t n, limit;
	uint64_t more;
};
void dl__index_walk(const struct dl_locktab *t, struct dl_str prefix,
		    struct dl_str after, struct dl_index_walk *w);
/* What is wrong with the index of a table of `locks` locks, NULL if
 * nothing (dl_locktab_verify). */
const char *dl__index_check(const struct dl_locktab *t, uint64_t locks);
/* The listed locks are those with a holder or a waiter: say so after a
 * change of either. */
void dl__lock_relisted(struct dl_locktab *t, struct dl_lock *lk);
/* A request admitted or queued asked for a delay of ms: a lock that was
 * free (`fresh`: no holder, no waiter, no delay running when the request
 * came) gets exactly that (0: none), another one at least that. *spare:
 * from dl__delay_alloc(), taken if the lock has no delay yet. */
void dl__delay_ask(struct dl_locktab *t, struct dl_lock *lk, uint32_t ms,
		   int fresh, struct dl_delay **spare);
/* One of lk's leases, of account a, ended without a release, now: its
 * delay (if any) runs from now (or on, if it already runs longer). A run
 * that starts is charged to a (struct dl_account, ndelays); one that
 * goes on stays with the account it was charged to. */
void dl__delay_start(struct dl_locktab *t, struct dl_lock *lk, uint64_t now,
		     struct dl_account *a);
/* ms left of the delay lk is in, 0 if none. */
uint64_t dl__delay_left(const struct dl_locktab *t, const struct dl_lock *lk,
			uint64_t now);
/* The delay's timer fired: it is over, the queue moves. */
void dl__delay_fire(struct dl_locktab *t, struct dl_delay *d, uint64_t now);
/* lk leaves the table: its delay goes with it. */
void dl__delay_drop(struct dl_locktab *t, struct dl_lock *lk);
/* lk's delay, NULL if none (tests of invariants). */
struct dl_delay *dl__delay_of(const struct dl_locktab *t,
			      const struct dl_lock *lk);

/* Free every side object (the table is being emptied; the wheel is
 * dropped or made again by the caller). */
void dl__side_free_all(struct dl_locktab *t);

#endif /* DL_SERVER_LOCKTAB_PRIVATE_H */
