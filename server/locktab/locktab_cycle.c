/* SPDX-License-Identifier: MIT */
/*
 * locktab_cycle.c -- the lock table's deadlock check: would this wait
 * close a cycle of owners that wait for each other?
 *
 * dl_locktab_acquire() asks it about a LOCK that is about to wait (a new
 * waiter, or an owner claiming its restored place), before anything
 * changes. It owns the walk's scratch (struct dl_walk, one per table, made
 * on the first check) and the owners' `walk` marks, 0 outside a check.
 *
 * The model. The nodes are owners; what acts is a connection (a session).
 * A connection with a waiting request does nothing else until its waits
 * are granted: it releases nothing and cancels nothing (one thread of
 * control per connection; threads that share a connection share its
 * waits). An owner can release through any of its connections, so it is
 * blocked only when every one of its connections waits, and stuck for
 * ever only when every one of its waits is. A set S of such owners is
 * deadlocked when every wait of each of them cannot be granted before
 * some owner of S acts: then none of them ever acts (lease expiry, wait
 * timeouts, CANCEL, BREAK, a disconnect and a new connection of the same
 * owner aside -- the ways out that this check spares the clients). "Wait
 * x cannot be granted before owner q releases" holds for:
 *
 *   - a holder q of x's lock whose mode excludes x's (exclusive against
 *     anything, shared against exclusive): its lease ends by its release;
 *   - the owner q of the nearest live waiter y ahead of x whose mode
 *     excludes x's (q not x's owner): a queue is served from its head
 *     only, so x comes after y, and once y is granted q holds the lock in
 *     a mode that excludes x's. This is what the FIFO queue adds to the
 *     relation: a reader queued behind a queued writer waits for the
 *     writer, and through it for the readers that hold the lock, though
 *     the lock is held shared and the reader could join them. Waiters
 *     further ahead need no edge of their own: an exclusive y waits for
 *     all of them and for every holder itself, so x reaches them through
 *     q; only behind a shared y (x exclusive), or with no such y, does x
 *     wait for the holders directly;
 *   - a semaphore's waiter needs one permit, and any holder that releases
 *     frees one: x is stuck only when no permit is free and every holder
 *     is in S. (A lock's waiter is stuck when any one of its owners is.)
 *
 * An owner is free (never in S) when a connection of it does not wait,
 * or one of its waits can end with nobody acting: a wait past its
 * deadline (about to time out), a wait for a lock the owner holds already
 * (served as a reentry at the head, or told TIMEOUT for an upgrade), or a
 * wait with no edge. Restored places (placeholders) are no part of the
 * relation either way: their owner may never come back, and their grace
 * ends. Nor are leases past their deadline (about to be reaped). Leaving
 * an edge out, or taking an owner for free, can only miss a deadlock,
 * never invent one: every edge kept is one of the relation's.
 *
 * The check. From the new wait w of owner o, a breadth-first walk
 * collects the owners reachable through the relation and all their
 * waits, within DL_DEADLOCK_WALK_MAX steps (each holder, waiter, session
 * and owner looked at is one); past it the walk gives up, and w waits as
 * it always did. S is then the largest set of those owners all of whose
 * waits are stuck on S, found by removal (start with every owner that is
 * not free, remove those with a wait that is not stuck, and what that
 * unsticks, until nothing goes). w is refused when o is in S and a path
 * from o that starts with w and goes through S comes back to o: w closes
 * that cycle, and every owner on it would be blocked for ever. The path
 * found first (breadth-first: a shortest) is the one reported.
 *
 * Restored state. A restart or a take-over restores leases and places
 * (dl_locktab_restore_*), and a withdrawn grant's waiter goes back to the
 * head of its queue (dl_locktab_revoke): none of these is a new wait, and
 * none is checked. Placeholders are no part of the relation, so they can
 * make no wait look deadlocked; a claim of one is checked like a new wait,
 * at its place: its owner is back and waits.
 *
 * Cost: O(steps), steps <= DL_DEADLOCK_WALK_MAX and the requester's
 * budget (struct dl_acquire, walk_budget); a wait for a lock whose
 * holders wait for nothing ends the walk after a few steps.
 */
#include <stdlib.h>
#include <string.h>

#include "server/locktab/locktab.h"
#include "server/locktab/locktab_private.h"

#define NONE UINT32_MAX

/* An owner the walk reached. */
struct wnode {
	struct dl_owner *o;
	uint32_t wfirst, nwaits; /* its waits: wait[wfirst ..] */
	uint32_t from, via;	 /* the path: reached from node `from` by its
				    wait `via` */
	uint8_t free;		 /* can act: never in S */
	uint8_t in;		 /* in S */
	uint8_t seen;		 /* reached by the path search */
};

/* A wait of a node's owner, and the owners it waits for. */
struct wwait {
	const struct dl_lock *lk;
	uint32_t node;
	uint32_t efirst, nedges; /* edge[efirst ..]: those owners' nodes */
	uint32_t count; /* a lock's: edges into S; a semaphore's: out of S */
	uint8_t sem;	/* stuck only with every holder in S */
	uint8_t stuck;	/* on S */
};

struct dl_walk {
	struct wnode node[DL_DEADLOCK_WALK_MAX];
	struct wwait wait[DL_DEADLOCK_WALK_MAX];
	uint32_t edge[DL_DEADLOCK_WALK_MAX];
	uint32_t rfirst[DL_DEADLOCK_WALK_MAX + 1]; /* the waits into node n: */
	uint32_t rwait[DL_DEADLOCK_WALK_MAX];	   /* rwait[rfirst[n] ..] */
	uint32_t todo[DL_DEADLOCK_WALK_MAX];	   /* a work list */
	uint32_t nnodes, nwaits, nedges, steps;
	uint32_t max;	/* steps this check may take */
	uint32_t into0; /* edges into node 0, the requester */
	int over;	/* the budget is spent: give up */
	uint64_t now;
	const struct dl_waiter *claim; /* the place being claimed: live */
	int claim_shared;	       /* ... in the mode it asks for */
	const struct dl_session *self; /* the requester's: it waits */
};

void dl__walk_free(struct dl_walk *k)
{
	free(k);
}

const struct dl_cycle *dl_locktab_cycle(const struct dl_locktab *t)
{
	return &t->cycle;
}

void dl_locktab_deadlock_check(struct dl_locktab *t, int on)
{
	t->no_deadlock_check = !on;
}

/* One step of the budget; 0 once it is spent. */
static int spend(struct dl_walk *k)
{
	if (k->steps >= k->max)
		k->over = 1;
	else
		k->steps++;
	return !k->over;
}

/* y waits now: a session's, before its deadline, or the place claimed. */
static int live(const struct dl_walk *k, const struct dl_waiter *y)
{
	return y == k->claim || (y->sess && y->wait_deadline > k->now);
}

static int mode_shared(const struct dl_walk *k, const struct dl_waiter *y)
{
	return y == k->claim ? k->claim_shared : y->shared;
}

static const struct dl_waiter *ahead_of(const struct dl_waiter *x)
{
	return x == x->lock->qhead ? NULL : x->qprev;
}

/* o's node, made if new; NONE once the walk is full. */
static uint32_t node_of(struct dl_walk *k, struct dl_owner *o)
{
	struct wnode *n;

	if (o->walk)
		return o->walk - 1;
	if (k->nnodes == DL_DEADLOCK_WALK_MAX) {
		k->over = 1;
		return NONE;
	}
	n = &k->node[k->nnodes];
	memset(n, 0, sizeof(*n));
	n->o = o;
	o->walk = ++k->nnodes;
	return k->nnodes - 1;
}

static void edge_to(struct dl_walk *k, struct dl_owner *o)
{
	uint32_t n = node_of(k, o);

	if (n == NONE)
		return;
	if (k->nedges == DL_DEADLOCK_WALK_MAX) {
		k->over = 1;
		return;
	}
	k->edge[k->nedges++] = n;
	k->into0 += n == 0;
}

/* o holds lk (a lease past its deadline too: the wait it excludes is left
 * out, the safe side). */
static int holds(struct dl_walk *k, const struct dl_lock *lk,
		 const struct dl_owner *o)
{
	const struct dl_lease *l;

	if (!o->nleases)
		return 0;
	for (l = lk->holders; l && spend(k); l = l->next)
		if (l->owner == o)
			return 1;
	return 0;
}

/* A lock's waiter, of owner p in mode `shared`, behind `ahead` (NULL: at
 * the head): edges to the owners it waits for (see the top). */
static void lock_edges(struct dl_walk *k, const struct dl_lock *lk, int shared,
		       const struct dl_owner *p, const struct dl_waiter *ahead)
{
	const struct dl_waiter *y;
	const struct dl_lease *l;

	for (y = ahead; y && spend(k); y = y == lk->qhead ? NULL : y->qprev) {
		if ((mode_shared(k, y) && shared) || !live(k, y) ||
		    y->owner == p || holds(k, lk, y->owner))
			continue;
		edge_to(k, y->owner);
		if (!mode_shared(k, y))
			return; /* it waits for the holders itself */
		break;
	}
	for (l = lk->holders; l && spend(k); l = l->next)
		if (!(l->shared && shared) && l->timer.expires > k->now &&
		    l->owner != p)
			edge_to(k, l->owner);
}

/* A semaphore's waiter: edges to every holder when no permit is free;
 * none (never stuck) when one may come free without them. */
static void sem_edges(struct dl_walk *k, const struct dl_lock *lk,
		      const struct dl_owner *p)
{
	const struct dl_lease *l;
	uint32_t first = k->nedges;

	if (lk->nholders < lk->limit)
		return;
	for (l = lk->holders; l && spend(k); l = l->next) {
		if (l->timer.expires <= k->now || l->owner == p) {
			k->nedges = first;
			return;
		}
		edge_to(k, l->owner);
	}
}

/* One more wait of node n; 0 if it has no edge (it is never stuck). */
static int add_wait(struct dl_walk *k, uint32_t n, const struct dl_lock *lk,
		    int shared, const struct dl_waiter *ahead)
{
	struct wwait *x;

	if (k->nwaits == DL_DEADLOCK_WALK_MAX) {
		k->over = 1;
		return 0;
	}
	x = &k->wait[k->nwaits++];
	memset(x, 0, sizeof(*x));
	x->lk = lk;
	x->node = n;
	x->sem = lk->limit > 1;
	x->efirst = k->nedges;
	if (x->sem)
		sem_edges(k, lk, k->node[n].o);
	else
		lock_edges(k, lk, shared, k->node[n].o, ahead);
	x->nedges = k->nedges - x->efirst;
	return x->nedges > 0;
}

/* Node n's waits: every wait of every connection of its owner, unless
 * the owner is free (see the top), which is found as early as can be,
 * so that a free owner's waits are not followed. */
static void expand(struct dl_walk *k, uint32_t n)
{
	struct wnode *nd = &k->node[n];
	struct dl_owner *p = nd->o;
	const struct dl_session *s;
	const struct dl_waiter *x;

	nd->free = !p->sessions;
	for (s = p->sessions; s && !nd->free && spend(k); s = s->onext)
		nd->free = !s->waiters && s != k->self;
	for (s = p->sessions; s && !nd->free && spend(k); s = s->onext)
		for (x = s->waiters; x && !nd->free && spend(k); x = x->snext)
			nd->free = !live(k, x) ||
				   !add_wait(k, n, x->lock, x->shared,
					     ahead_of(x));
	nd->nwaits = k->nwaits - nd->wfirst;
}

/* The waits into each node, for settle(). */
static void index_edges(struct dl_walk *k)
{
	uint32_t i, e, n;

	memset(k->rfirst, 0, (k->nnodes + 1) * sizeof(k->rfirst[0]));
	for (e = 0; e < k->nedges; e++)
		k->rfirst[k->edge[e] + 1]++;
	for (n = 0; n < k->nnodes; n++) {
		k->rfirst[n + 1] += k->rfirst[n];
		k->todo[n] = k->rfirst[n]; /* where n's next one goes */
	}
	for (i = 0; i < k->nwaits; i++)
		for (e = k->wait[i].efirst;
		     e < k->wait[i].efirst + k->wait[i].nedges; e++)
			k->rwait[k->todo[k->edge[e]]++] = i;
}

/* Find S: every owner that is not free in it, every wait with an edge
 * stuck; then remove the owners with a wait that is not stuck, and
 * unstick the waits that needed them, until nothing changes. */
static void settle(struct dl_walk *k)
{
	uint32_t i, e, n, ntodo = 0;
	struct wwait *x;

	index_edges(k);
	for (n = 0; n < k->nnodes; n++)
		k->node[n].in = !k->node[n].free && k->node[n].nwaits;
	for (i = 0; i < k->nwaits; i++) {
		x = &k->wait[i];
		x->count = x->sem ? 0 : x->nedges;
		x->stuck = x->nedges > 0;
		if (!x->stuck)
			k->node[x->node].in = 0;
	}
	for (n = 0; n < k->nnodes; n++)
		if (!k->node[n].in)
			k->todo[ntodo++] = n;
	while (ntodo) {
		n = k->todo[--ntodo];
		for (e = k->rfirst[n]; e < k->rfirst[n + 1]; e++) {
			x = &k->wait[k->rwait[e]];
			if (!x->stuck || (!x->sem && --x->count))
				continue;
			x->stuck = 0;
			if (k->node[x->node].in) {
				k->node[x->node].in = 0;
				k->todo[ntodo++] = x->node;
			}
		}
	}
}

/* A path from node 0 by its wait 0 (the new one), then through S (whose
 * waits are all stuck), back to node 0: its last node, or NONE.
 * Breadth-first, so a shortest. */
static uint32_t find_cycle(struct dl_walk *k)
{
	uint32_t head = 0, tail = 0, n, i, e, t, w1;
	const struct wwait *x;

	if (!k->node[0].in)
		return NONE;
	for (n = 0; n < k->nnodes; n++)
		k->node[n].seen = 0;
	k->node[0].seen = 1;
	k->todo[tail++] = 0;
	while (head < tail) {
		n = k->todo[head++];
		w1 = n ? k->node[n].wfirst + k->node[n].nwaits : 1;
		for (i = n ? k->node[n].wfirst : 0; i < w1; i++) {
			x = &k->wait[i];
			for (e = x->efirst; e < x->efirst + x->nedges; e++) {
				t = k->edge[e];
				if (!k->node[t].in || (t && k->node[t].seen))
					continue;
				k->node[t].from = n;
				k->node[t].via = i;
				if (t == 0)
					return n;
				k->node[t].seen = 1;
				k->todo[tail++] = t;
			}
		}
	}
	return NONE;
}

/* Keep the cycle that ends at node `last` for dl_locktab_cycle(). */
static void keep_cycle(struct dl_locktab *t, struct dl_walk *k, uint32_t last)
{
	struct dl_cycle *c = &t->cycle;
	uint32_t len = 0, n = last, i, at, next;
	const struct dl_owner *o;

	/* todo[] gets the path backwards: last, ..., node 0 */
	do {
		k->todo[len++] = n;
		n = k->node[n].from;
	} while (k->todo[len - 1] != 0);
	c->len = len;
	c->shown = len < DL_CYCLE_SHOW_MAX ? len : DL_CYCLE_SHOW_MAX;
	for (i = 0; i < c->shown; i++) {
		at = k->todo[len - 1 - i];
		next = i + 1 < len ? k->todo[len - 2 - i] : 0;
		o = k->node[at].o;
		c->hop[i].owner = (struct dl_str){o->id, o->hn.len};
		c->hop[i].lock = dl_lock_name(k->wait[k->node[next].via].lk);
	}
}

int dl__deadlock_check(struct dl_locktab *t, struct dl_lock *lk,
		       const struct dl_session *s, int shared,
		       const struct dl_waiter *claim, uint32_t *budget)
{
	struct dl_walk *k = t->walk;
	uint32_t n, last = NONE, max = DL_DEADLOCK_WALK_MAX;
	int edges;

	if (t->no_deadlock_check)
		return 0;
	if (budget && *budget < max)
		max = *budget;
	if (max == 0) {
		/* the requester's budget is spent: it waits unchecked */
		t->st.walks_capped++;
		return 0;
	}
	if (!k && !(k = t->walk = malloc(sizeof(*k))))
		return 0; /* no room to look: let it wait, as before */
	k->nnodes = k->nwaits = k->nedges = k->steps = k->into0 = 0;
	k->max = max;
	k->over = 0;
	k->now = dl__now_ms(t);
	k->claim = claim;
	k->claim_shared = shared;
	k->self = s;
	node_of(k, s->owner);
	/* a wait for nobody closes nothing: no walk */
	edges = add_wait(k, 0, lk, shared,
			 claim	     ? ahead_of(claim)
			 : lk->qhead ? lk->qhead->qprev
				     : NULL);
	for (n = 0; edges && n < k->nnodes && !k->over; n++) {
		if (n)
			k->node[n].wfirst = k->nwaits;
		expand(k, n);
	}
	if (k->over) {
		t->st.walks_capped++;
	} else if (edges && k->into0) {
		settle(k);
		last = find_cycle(k);
		if (last != NONE)
			keep_cycle(t, k, last);
	}
	for (n = 0; n < k->nnodes; n++)
		k->node[n].o->walk = 0;
	if (budget)
		*budget -= k->steps; /* steps <= max <= *budget */
	return last != NONE;
}
