/*
 * locktab.c -- the lock table (see locktab.h for the model).
 *
 * Layout, chosen for a million held leases in little memory:
 *   - locks and owners live in two chained hash tables whose nodes are
 *     embedded in the objects, the key bytes right after the node;
 *   - a lease is one 72-byte allocation holding its wheel entry (whose
 *     `expires` is the lease deadline: no second copy), a lock is 48 bytes
 *     plus its name;
 *   - the dirty set is an array of lock pointers, reserved when a lock is
 *     created (one slot per lock), so marking a lock dirty cannot fail in
 *     the middle of a state change.
 *
 * Leases and waiters share the wheel; the wheel entry is followed in both
 * structs by the same `kind` bit-field, which tells the timer callback what
 * expired (the common-initial-sequence rule, as libuv does for handles).
 *
 * Failure atomicity: every allocation an operation needs is made before
 * the operation changes anything, so an operation either happens entirely
 * or returns DL_ENOMEM having changed nothing.
 */
#include "server/locktab.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

enum { DL__TIMED_LEASE = 1, DL__TIMED_WAITER = 2 };

/* What leases and waiters have in common, for the timer callback. */
struct dl_timed {
	struct dl_wheel_entry timer;
	unsigned kind : 8;
};

_Static_assert(offsetof(struct dl_lock, name) ==
		       offsetof(struct dl_lock, hn) + sizeof(struct dl_hnode),
	       "lock name must follow its hash node");
_Static_assert(offsetof(struct dl_owner, id) ==
		       offsetof(struct dl_owner, hn) + sizeof(struct dl_hnode),
	       "owner id must follow its hash node");

const uint64_t dl_hist_bounds_ms[DL_HIST_BUCKETS - 1] = {
	1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 60000, 300000,
};

static void hist_add(struct dl_hist *h, uint64_t ms)
{
	size_t i = 0;

	while (i < DL_HIST_BUCKETS - 1 && ms > dl_hist_bounds_ms[i])
		i++;
	h->bucket[i]++;
	h->count++;
	h->sum_ms += ms;
}

/* ---- hash tables ------------------------------------------------------- */

struct htab {
	struct dl_hnode **b;
	size_t mask; /* buckets - 1 */
	size_t n;
};

#define HTAB_MIN 64

static const char *hkey(const struct dl_hnode *n)
{
	return (const char *)(n + 1);
}

/* A seeded multiply-xorshift hash: names come from clients, so the seed is
 * random per process and chains cannot be lengthened on purpose without
 * knowing it. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 32;
	x *= 0xd6e8feb86659fd93ULL;
	x ^= x >> 32;
	x *= 0xd6e8feb86659fd93ULL;
	x ^= x >> 32;
	return x;
}

static uint32_t hash_bytes(uint64_t seed, const char *p, size_t n)
{
	uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ULL);
	uint64_t w;

	while (n >= 8) {
		memcpy(&w, p, 8);
		h = mix64(h ^ w);
		p += 8;
		n -= 8;
	}
	w = 0;
	memcpy(&w, p, n);
	h = mix64(h ^ w ^ ((uint64_t)n << 56));
	return (uint32_t)h;
}

static int htab_init(struct htab *h)
{
	h->b = calloc(HTAB_MIN, sizeof(*h->b));
	h->mask = HTAB_MIN - 1;
	h->n = 0;
	return h->b ? 0 : DL_ENOMEM;
}

static struct dl_hnode *htab_find(const struct htab *h, uint32_t hash,
				  struct dl_str key)
{
	struct dl_hnode *n;

	for (n = h->b[hash & h->mask]; n; n = n->next)
		if (n->hash == hash && n->len == key.len &&
		    memcmp(hkey(n), key.p, key.len) == 0)
			return n;
	return NULL;
}

/* Rehash into 2^k >= buckets. A failed grow is not an error: the table
 * works, with longer chains. */
static void htab_resize(struct htab *h, size_t buckets)
{
	struct dl_hnode **nb, *e, *next;
	size_t i, nmask = h->mask;

	while (nmask + 1 < buckets)
		nmask = (nmask << 1) | 1;
	if (nmask == h->mask || !(nb = calloc(nmask + 1, sizeof(*nb))))
		return;
	for (i = 0; i <= h->mask; i++) {
		for (e = h->b[i]; e; e = next) {
			next = e->next;
			e->next = nb[e->hash & nmask];
			nb[e->hash & nmask] = e;
		}
	}
	free(h->b);
	h->b = nb;
	h->mask = nmask;
}

/* Doubles the bucket array past a load of 1. */
static void htab_insert(struct htab *h, struct dl_hnode *n)
{
	if (h->n >= h->mask + 1)
		htab_resize(h, (h->mask + 1) * 2);
	n->next = h->b[n->hash & h->mask];
	h->b[n->hash & h->mask] = n;
	h->n++;
}

static void htab_remove(struct htab *h, struct dl_hnode *n)
{
	struct dl_hnode **pp = &h->b[n->hash & h->mask];

	while (*pp != n)
		pp = &(*pp)->next;
	*pp = n->next;
	h->n--;
}

/* ---- the table -------------------------------------------------------------
 */

struct dl_locktab {
	struct dl_locktab_hooks hooks;
	struct dl_locktab_limits limits;
	uint64_t seed;
	uint64_t last_token;
	uint16_t max_holders; /* 1 until shared locks exist */
	int suspended;	      /* grants suspended (store down) */
	size_t placeholders;  /* restored waiters not yet claimed */
	struct htab locks;
	struct htab owners;
	struct dl_lock **dirty; /* capacity >= number of locks */
	size_t ndirty;
	size_t dirty_cap;
	struct dl_locktab_stats st;
	struct dl_wheel wheel;
};

static uint64_t now_ms(const struct dl_locktab *t)
{
	return t->hooks.now(t->hooks.ctx);
}

static void emit(struct dl_locktab *t, struct dl_session *s,
		 enum dl_event_type type, int durable, const struct dl_lock *lk,
		 uint64_t token, uint64_t ttl, struct dl_str tag)
{
	struct dl_event ev = {
		.type = type,
		.durable = durable ? 1 : 0,
		.name = {lk->name, lk->hn.len},
		.token = token,
		.ttl_ms = ttl,
		.tag = tag,
	};

	if (t->hooks.event)
		t->hooks.event(s, &ev, t->hooks.ctx);
}

static void mark_dirty(struct dl_locktab *t, struct dl_lock *lk)
{
	if (lk->dirty)
		return;
	assert(t->ndirty < t->dirty_cap);
	lk->dirty = 1;
	t->dirty[t->ndirty++] = lk;
}

/* ---- owners ----------------------------------------------------------------
 */

static struct dl_owner *owner_get(struct dl_locktab *t, struct dl_str id)
{
	uint32_t h = hash_bytes(t->seed, id.p, id.len);
	struct dl_hnode *n = htab_find(&t->owners, h, id);
	struct dl_owner *o;

	if (n)
		return (struct dl_owner *)((char *)n -
					   offsetof(struct dl_owner, hn));
	o = calloc(1, sizeof(*o) + id.len + 1);
	if (!o)
		return NULL;
	o->hn.hash = h;
	o->hn.len = (uint8_t)id.len;
	memcpy(o->id, id.p, id.len);
	htab_insert(&t->owners, &o->hn);
	t->st.owners++;
	return o;
}

/* Free the owner once nothing refers to it. */
static void owner_put(struct dl_locktab *t, struct dl_owner *o)
{
	if (o->sessions || o->nleases || o->nwaiters)
		return;
	htab_remove(&t->owners, &o->hn);
	t->st.owners--;
	free(o);
}

static int owner_full(const struct dl_locktab *t, const struct dl_owner *o)
{
	return (uint64_t)o->nleases + o->nwaiters >=
	       t->limits.max_locks_per_owner;
}

/* ---- locks -----------------------------------------------------------------
 */

static struct dl_lock *lock_find(const struct dl_locktab *t, struct dl_str name)
{
	uint32_t h = hash_bytes(t->seed, name.p, name.len);
	struct dl_hnode *n = htab_find(&t->locks, h, name);

	return n ? (struct dl_lock *)((char *)n - offsetof(struct dl_lock, hn))
		 : NULL;
}

static struct dl_lock *lock_get(struct dl_locktab *t, struct dl_str name)
{
	struct dl_lock *lk = lock_find(t, name);
	struct dl_lock **nd;
	size_t cap;

	if (lk)
		return lk;
	if (t->st.locks + 1 > t->dirty_cap) {
		cap = t->dirty_cap ? t->dirty_cap * 2 : 64;
		nd = realloc(t->dirty, cap * sizeof(*nd));
		if (!nd)
			return NULL;
		t->dirty = nd;
		t->dirty_cap = cap;
	}
	lk = calloc(1, sizeof(*lk) + name.len + 1);
	if (!lk)
		return NULL;
	lk->hn.hash = hash_bytes(t->seed, name.p, name.len);
	lk->hn.len = (uint8_t)name.len;
	memcpy(lk->name, name.p, name.len);
	htab_insert(&t->locks, &lk->hn);
	t->st.locks++;
	return lk;
}

static int lock_empty(const struct dl_lock *lk)
{
	return !lk->holders && !lk->qhead;
}

static void lock_free(struct dl_locktab *t, struct dl_lock *lk)
{
	htab_remove(&t->locks, &lk->hn);
	t->st.locks--;
	free(lk);
}

/* A lock created for a request that then changed nothing. */
static void lock_drop_if_unused(struct dl_locktab *t, struct dl_lock *lk)
{
	if (lock_empty(lk) && !lk->dirty)
		lock_free(t, lk);
}

/* ---- leases
 * ------------------------------------------------------------------ */

static struct dl_lease *holder_of(const struct dl_lock *lk,
				  const struct dl_owner *o)
{
	struct dl_lease *l;

	for (l = lk->holders; l; l = l->next)
		if (l->owner == o)
			return l;
	return NULL;
}

static struct dl_lease *holder_by_token(const struct dl_lock *lk,
					uint64_t token)
{
	struct dl_lease *l;

	for (l = lk->holders; l; l = l->next)
		if (l->token == token)
			return l;
	return NULL;
}

static char *dup_tag(struct dl_str tag)
{
	char *s;

	if (!tag.len)
		return NULL;
	s = malloc(tag.len + 1);
	if (s) {
		memcpy(s, tag.p, tag.len);
		s[tag.len] = '\0';
	}
	return s;
}

/* Allocate a lease (not yet linked): the fallible half of a grant. */
static struct dl_lease *lease_alloc(struct dl_str tag)
{
	struct dl_lease *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	if (tag.len && !(l->tag = dup_tag(tag))) {
		free(l);
		return NULL;
	}
	return l;
}

/* The infallible half: link l as a new holder of lk with a new token. */
static void lease_grant(struct dl_locktab *t, struct dl_lease *l,
			struct dl_lock *lk, struct dl_owner *o, uint32_t ttl,
			uint64_t now)
{
	struct dl_lease **pp = &lk->holders;

	while (*pp)
		pp = &(*pp)->next;
	*pp = l;
	l->kind = DL__TIMED_LEASE;
	l->count = 1;
	l->ttl_ms = ttl;
	l->lock = lk;
	l->owner = o;
	l->token = ++t->last_token;
	l->granted_at = now;
	lk->nholders++;
	o->nleases++;
	dl_wheel_add(&t->wheel, &l->timer, now + ttl);
	t->st.leases++;
	t->st.grants++;
	mark_dirty(t, lk);
}

static void lease_remove(struct dl_locktab *t, struct dl_lease *l)
{
	struct dl_lock *lk = l->lock;
	struct dl_lease **pp = &lk->holders;
	uint64_t now = now_ms(t);

	hist_add(&t->st.hold, now > l->granted_at ? now - l->granted_at : 0);
	while (*pp != l)
		pp = &(*pp)->next;
	*pp = l->next;
	lk->nholders--;
	dl_wheel_del(&t->wheel, &l->timer);
	l->owner->nleases--;
	owner_put(t, l->owner);
	t->st.leases--;
	mark_dirty(t, lk);
	free(l->tag);
	free(l);
}

/* Reentry: one more hold, the deadline pushed to now + ttl if later. */
static void lease_reenter(struct dl_locktab *t, struct dl_lease *l,
			  uint32_t ttl, uint64_t now)
{
	l->count++;
	l->ttl_ms = ttl;
	if (now + ttl > l->timer.expires)
		dl_wheel_add(&t->wheel, &l->timer, now + ttl);
	t->st.reentries++;
	mark_dirty(t, l->lock);
}

/* now + ms, where a sum past the clock's range means "never". */
static uint64_t deadline_after(uint64_t now, uint64_t ms)
{
	return ms >= UINT64_MAX - now ? UINT64_MAX : now + ms;
}

/* No token left to give: the counter is at its maximum. Unreachable from
 * the time-based floor, but a stored value could put it there, and a
 * token must never wrap to an old value. */
static int tokens_exhausted(const struct dl_locktab *t)
{
	return t->last_token == UINT64_MAX;
}

static uint64_t remaining(const struct dl_lease *l, uint64_t now)
{
	return l->timer.expires > now ? l->timer.expires - now : 0;
}

/* ---- waiters
 * ----------------------------------------------------------------- */

static uint64_t waiter_position(const struct dl_waiter *w)
{
	uint64_t pos = 1;

	while ((w = w->qprev) != NULL)
		pos++;
	return pos;
}

static void waiter_free(struct dl_locktab *t, struct dl_waiter *w)
{
	struct dl_lock *lk = w->lock;
	struct dl_session *s = w->sess;

	if (w->qprev)
		w->qprev->qnext = w->qnext;
	else
		lk->qhead = w->qnext;
	if (w->qnext)
		w->qnext->qprev = w->qprev;
	else
		lk->qtail = w->qprev;
	if (s) {
		if (w->sprev)
			w->sprev->snext = w->snext;
		else
			s->waiters = w->snext;
		if (w->snext)
			w->snext->sprev = w->sprev;
	} else {
		t->placeholders--;
	}
	dl_wheel_del(&t->wheel, &w->timer);
	lk->nwaiters--;
	w->owner->nwaiters--;
	owner_put(t, w->owner);
	t->st.waiters--;
	mark_dirty(t, lk);
	free(w);
}

static void waiter_attach(struct dl_waiter *w, struct dl_session *s)
{
	w->sess = s;
	w->sprev = NULL;
	w->snext = s->waiters;
	if (s->waiters)
		s->waiters->sprev = w;
	s->waiters = w;
}

static void waiter_set(struct dl_waiter *w, uint32_t ttl, struct dl_str tag)
{
	w->ttl_ms = ttl;
	w->tag_len = (uint8_t)tag.len;
	if (tag.len)
		memcpy(w->tag, tag.p, tag.len);
}

static struct dl_str waiter_tag(const struct dl_waiter *w)
{
	return (struct dl_str){w->tag, w->tag_len};
}

/* Append a waiter to lk's queue. `s` NULL makes a placeholder. */
static struct dl_waiter *waiter_new(struct dl_locktab *t, struct dl_lock *lk,
				    struct dl_owner *o, struct dl_session *s,
				    uint32_t ttl, uint64_t timer_at,
				    struct dl_str tag)
{
	struct dl_waiter *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->kind = DL__TIMED_WAITER;
	w->lock = lk;
	w->owner = o;
	w->queued_at = now_ms(t);
	waiter_set(w, ttl, tag);
	w->qprev = lk->qtail;
	if (lk->qtail)
		lk->qtail->qnext = w;
	else
		lk->qhead = w;
	lk->qtail = w;
	if (s)
		waiter_attach(w, s);
	else
		t->placeholders++;
	if (timer_at != UINT64_MAX)
		dl_wheel_add(&t->wheel, &w->timer, timer_at);
	w->wait_deadline = timer_at;
	lk->nwaiters++;
	o->nwaiters++;
	t->st.waiters++;
	mark_dirty(t, lk);
	return w;
}

/*
 * Grant the lock to waiters from the head of its queue while it has room.
 * Only the head is ever considered: this is the "watch your predecessor"
 * rule, done here, so a release wakes exactly one waiter. A placeholder at
 * the head keeps its place (nobody behind it is served) until its owner
 * claims it or its grace ends.
 */
static void serve(struct dl_locktab *t, struct dl_lock *lk, uint64_t now)
{
	struct dl_waiter *w;
	struct dl_lease *l;
	struct dl_session *s;
	uint32_t ttl;
	char tag[DL_TAG_MAX];
	size_t tag_len;

	while (!t->suspended && (w = lk->qhead) != NULL && w->sess) {
		l = holder_of(lk, w->owner);
		if (!l && lk->nholders >= t->max_holders)
			return;
		s = w->sess;
		ttl = w->ttl_ms;
		tag_len = w->tag_len;
		memcpy(tag, w->tag, tag_len);
		hist_add(&t->st.wait,
			 now > w->queued_at ? now - w->queued_at : 0);
		if (l) {
			lease_reenter(t, l, ttl, now);
		} else if (!tokens_exhausted(t) &&
			   (l = lease_alloc(waiter_tag(w))) != NULL) {
			lease_grant(t, l, lk, w->owner, ttl, now);
		} else {
			/* Out of memory or of tokens: the waiter cannot be
			 * served, so it is told it timed out rather than
			 * left to hang at the head of the queue. */
			waiter_free(t, w);
			t->st.timeouts++;
			emit(t, s, DL_EVENT_TIMEOUT, 0, lk, 0, 0,
			     (struct dl_str){tag, tag_len});
			continue;
		}
		waiter_free(t, w);
		emit(t, s, DL_EVENT_GRANTED, 1, lk, l->token, remaining(l, now),
		     (struct dl_str){tag, tag_len});
	}
}

/* ---- expiry
 * -------------------------------------------------------------------- */

static void lease_expire(struct dl_locktab *t, struct dl_lease *l, uint64_t now)
{
	struct dl_lock *lk = l->lock;
	struct dl_session *s, *next;
	uint64_t token = l->token;
	char tag[DL_TAG_MAX];
	size_t tag_len = l->tag ? strlen(l->tag) : 0;

	if (tag_len)
		memcpy(tag, l->tag, tag_len);
	/* Tell first: removing the lease may free its owner. */
	for (s = l->owner->sessions; s; s = next) {
		next = s->onext;
		emit(t, s, DL_EVENT_EXPIRED, 0, lk, token, 0,
		     (struct dl_str){tag, tag_len});
	}
	t->st.expiries++;
	lease_remove(t, l);
	serve(t, lk, now);
}

/* Expire the lock's holders whose deadline has passed (lazy expiry, so
 * that nothing reports a dead lease as valid between two wheel ticks). */
static void reap(struct dl_locktab *t, struct dl_lock *lk, uint64_t now)
{
	struct dl_lease *l;

again:
	for (l = lk->holders; l; l = l->next) {
		if (l->timer.expires <= now) {
			lease_expire(t, l, now);
			goto again;
		}
	}
}

static void waiter_timeout(struct dl_locktab *t, struct dl_waiter *w,
			   uint64_t now)
{
	struct dl_lock *lk = w->lock;
	struct dl_session *s = w->sess;
	char tag[DL_TAG_MAX];
	size_t tag_len = w->tag_len;

	memcpy(tag, w->tag, tag_len);
	waiter_free(t, w);
	if (s) {
		t->st.timeouts++;
		emit(t, s, DL_EVENT_TIMEOUT, 0, lk, 0, 0,
		     (struct dl_str){tag, tag_len});
	}
	serve(t, lk, now);
}

struct timer_run {
	struct dl_locktab *t;
	uint64_t now;
};

static void on_timer(struct dl_wheel_entry *e, void *arg)
{
	struct timer_run *r = arg;
	struct dl_timed *td = (struct dl_timed *)e;

	if (td->kind == DL__TIMED_LEASE)
		lease_expire(r->t, (struct dl_lease *)e, r->now);
	else
		waiter_timeout(r->t, (struct dl_waiter *)e, r->now);
}

size_t dl_locktab_run_timers(struct dl_locktab *t, size_t budget)
{
	struct timer_run r = {t, now_ms(t)};

	return dl_wheel_run(&t->wheel, r.now, budget, on_timer, &r);
}

int64_t dl_locktab_timeout(struct dl_locktab *t)
{
	return dl_wheel_timeout(&t->wheel, now_ms(t));
}

/* ---- life cycle
 * ------------------------------------------------------------------ */

struct dl_locktab *dl_locktab_new(const struct dl_locktab_hooks *hooks,
				  const struct dl_locktab_limits *limits,
				  uint64_t tick_ms, uint64_t hash_seed)
{
	struct dl_locktab *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->hooks = *hooks;
	t->limits = *limits;
	t->seed = hash_seed;
	t->max_holders = 1;
	if (htab_init(&t->locks) || htab_init(&t->owners)) {
		free(t->locks.b);
		free(t);
		return NULL;
	}
	dl_wheel_init(&t->wheel, tick_ms, now_ms(t));
	return t;
}

void dl_locktab_set_limits(struct dl_locktab *t,
			   const struct dl_locktab_limits *limits)
{
	t->limits = *limits;
}

void dl_locktab_free(struct dl_locktab *t)
{
	struct dl_hnode *n, *next;
	struct dl_lock *lk;
	struct dl_lease *l, *ln;
	struct dl_waiter *w, *wn;
	size_t i;

	if (!t)
		return;
	for (i = 0; i <= t->locks.mask; i++) {
		for (n = t->locks.b[i]; n; n = next) {
			next = n->next;
			lk = (struct dl_lock *)((char *)n -
						offsetof(struct dl_lock, hn));
			for (l = lk->holders; l; l = ln) {
				ln = l->next;
				free(l->tag);
				free(l);
			}
			for (w = lk->qhead; w; w = wn) {
				wn = w->qnext;
				free(w);
			}
			free(lk);
		}
	}
	for (i = 0; i <= t->owners.mask; i++) {
		for (n = t->owners.b[i]; n; n = next) {
			next = n->next;
			free((char *)n - offsetof(struct dl_owner, hn));
		}
	}
	free(t->locks.b);
	free(t->owners.b);
	free(t->dirty);
	free(t);
}

/* ---- sessions
 * ------------------------------------------------------------------------ */

static void session_link(struct dl_session *s, struct dl_owner *o)
{
	s->owner = o;
	s->oprev = NULL;
	s->onext = o->sessions;
	if (o->sessions)
		o->sessions->oprev = s;
	o->sessions = s;
}

static void session_unlink(struct dl_locktab *t, struct dl_session *s)
{
	struct dl_owner *o = s->owner;

	if (s->oprev)
		s->oprev->onext = s->onext;
	else
		o->sessions = s->onext;
	if (s->onext)
		s->onext->oprev = s->oprev;
	s->owner = NULL;
	owner_put(t, o);
}

int dl_session_init(struct dl_locktab *t, struct dl_session *s,
		    struct dl_str id, void *data)
{
	struct dl_owner *o;

	memset(s, 0, sizeof(*s));
	s->data = data;
	if (dl_check_owner(id.p, id.len))
		return DL_EBADARG;
	if (!(o = owner_get(t, id)))
		return DL_ENOMEM;
	session_link(s, o);
	return 0;
}

int dl_session_set_owner(struct dl_locktab *t, struct dl_session *s,
			 struct dl_str id)
{
	struct dl_owner *o;

	if (dl_check_owner(id.p, id.len))
		return DL_EBADARG;
	if (s->waiters)
		return DL_EBADARG;
	if (!(o = owner_get(t, id)))
		return DL_ENOMEM;
	if (o == s->owner)
		return 0;
	session_unlink(t, s);
	session_link(s, o);
	return 0;
}

void dl_session_close(struct dl_locktab *t, struct dl_session *s)
{
	struct dl_lock *lk;
	uint64_t now = now_ms(t);

	if (!s->owner)
		return;
	while (s->waiters) {
		lk = s->waiters->lock;
		waiter_free(t, s->waiters);
		serve(t, lk, now);
	}
	session_unlink(t, s);
}

struct dl_str dl_session_owner(const struct dl_session *s)
{
	return dl_owner_id(s->owner);
}

/* ---- requests
 * ----------------------------------------------------------------------------
 */

/* ms a TRYLOCK would have to wait at least: the earliest holder deadline,
 * or the grace of the placeholder at the head. */
static uint64_t busy_for(const struct dl_lock *lk, uint64_t now)
{
	const struct dl_lease *l;
	uint64_t best = UINT64_MAX;

	for (l = lk->holders; l; l = l->next)
		if (remaining(l, now) < best)
			best = remaining(l, now);
	if (best == UINT64_MAX && lk->qhead &&
	    dl_wheel_pending(&lk->qhead->timer))
		best = lk->qhead->timer.expires > now
			       ? lk->qhead->timer.expires - now
			       : 0;
	return best == UINT64_MAX ? 0 : best;
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

/* The owner claims its restored place in the queue. */
static int claim_placeholder(struct dl_locktab *t, struct dl_session *s,
			     struct dl_waiter *w, uint32_t ttl,
			     uint64_t wait_ms, struct dl_str tag, uint64_t now,
			     struct dl_result *res)
{
	struct dl_lock *lk = w->lock;
	struct dl_lease *l;

	if (w == lk->qhead && lk->nholders < t->max_holders) {
		if (tokens_exhausted(t))
			return DL_ELIMIT;
		if (!(l = lease_alloc(tag)))
			return DL_ENOMEM;
		hist_add(&t->st.wait, 0);
		waiter_free(t, w);
		lease_grant(t, l, lk, s->owner, ttl, now);
		res->outcome = DL_GRANTED;
		res->durable = 1;
		res->token = l->token;
		res->value = ttl;
		return 0;
	}
	if (wait_ms == 0) {
		res->outcome = DL_BUSY;
		res->value = busy_for(lk, now);
		waiter_free(t, w);
		serve(t, lk, now);
		return 0;
	}
	t->placeholders--;
	waiter_attach(w, s);
	waiter_set(w, ttl, tag);
	w->wait_deadline = deadline_after(now, wait_ms);
	if (w->wait_deadline == UINT64_MAX)
		dl_wheel_del(&t->wheel, &w->timer);
	else
		dl_wheel_add(&t->wheel, &w->timer, w->wait_deadline);
	mark_dirty(t, lk);
	res->outcome = DL_QUEUED;
	res->value = waiter_position(w);
	return 0;
}

int dl_locktab_acquire(struct dl_locktab *t, struct dl_session *s,
		       struct dl_str name, uint64_t ttl_ms, uint64_t wait_ms,
		       struct dl_str tag, struct dl_result *res)
{
	struct dl_owner *o = s->owner;
	struct dl_lock *lk;
	struct dl_lease *l;
	struct dl_waiter *w;
	uint64_t now;
	uint32_t ttl;

	memset(res, 0, sizeof(*res));
	if (ttl_ms == 0 || ttl_ms > DL_TTL_STORE_MAX)
		return DL_EBADARG;
	if (tag.len > DL_TAG_MAX)
		return DL_EBADARG;
	if (t->suspended)
		return DL_EUNAVAILABLE;
	ttl = (uint32_t)ttl_ms;
	now = now_ms(t);
	if (!(lk = lock_get(t, name)))
		return DL_ENOMEM;
	reap(t, lk, now);

	if ((l = holder_of(lk, o)) != NULL) {
		if (l->count >= DL_REENTRY_MAX)
			return DL_ELIMIT;
		lease_reenter(t, l, ttl, now);
		res->outcome = DL_GRANTED;
		res->durable = 1;
		res->token = l->token;
		res->value = remaining(l, now);
		return 0;
	}
	if ((w = session_waiter(s, lk)) != NULL) {
		res->outcome = DL_ALREADY_WAITING;
		res->value = waiter_position(w);
		return 0;
	}
	if ((w = placeholder_of(t, lk, o)) != NULL)
		return claim_placeholder(t, s, w, ttl, wait_ms, tag, now, res);

	if (lk->nholders < t->max_holders && !lk->qhead) {
		if (owner_full(t, o) || tokens_exhausted(t) ||
		    !(l = lease_alloc(tag))) {
			lock_drop_if_unused(t, lk);
			return owner_full(t, o) || tokens_exhausted(t)
				       ? DL_ELIMIT
				       : DL_ENOMEM;
		}
		lease_grant(t, l, lk, o, ttl, now);
		hist_add(&t->st.wait, 0);
		res->outcome = DL_GRANTED;
		res->durable = 1;
		res->token = l->token;
		res->value = ttl;
		return 0;
	}
	if (wait_ms == 0) {
		res->outcome = DL_BUSY;
		res->value = busy_for(lk, now);
		return 0;
	}
	if (lk->nwaiters >= t->limits.max_waiters || owner_full(t, o))
		return DL_ELIMIT;
	w = waiter_new(t, lk, o, s, ttl, deadline_after(now, wait_ms), tag);
	if (!w)
		return DL_ENOMEM;
	res->outcome = DL_QUEUED;
	res->value = lk->nwaiters;
	return 0;
}

/* The lock, its overdue holders reaped; NULL if it does not exist. */
static struct dl_lock *lock_now(struct dl_locktab *t, struct dl_str name,
				uint64_t now)
{
	struct dl_lock *lk = lock_find(t, name);

	if (lk)
		reap(t, lk, now);
	return lk;
}

int dl_locktab_release(struct dl_locktab *t, struct dl_session *s,
		       struct dl_str name, uint64_t token,
		       struct dl_result *res)
{
	uint64_t now = now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);
	struct dl_lease *l = lk ? holder_by_token(lk, token) : NULL;

	memset(res, 0, sizeof(*res));
	if (!l || l->owner != s->owner) {
		res->outcome = DL_NOT_HOLDER;
		return 0;
	}
	if (t->suspended)
		return DL_EUNAVAILABLE;
	res->durable = 1;
	res->token = token;
	if (l->count > 1) {
		l->count--;
		mark_dirty(t, lk);
		res->outcome = DL_HELD;
		res->value = l->count;
		return 0;
	}
	lease_remove(t, l);
	t->st.releases++;
	serve(t, lk, now);
	res->outcome = DL_RELEASED;
	return 0;
}

int dl_locktab_refresh(struct dl_locktab *t, struct dl_session *s,
		       struct dl_str name, uint64_t token, uint64_t ttl_ms,
		       struct dl_result *res)
{
	uint64_t now = now_ms(t);
	struct dl_lock *lk;
	struct dl_lease *l;

	memset(res, 0, sizeof(*res));
	if (ttl_ms > DL_TTL_STORE_MAX)
		return DL_EBADARG;
	lk = lock_now(t, name, now);
	l = lk ? holder_by_token(lk, token) : NULL;
	if (!l || l->owner != s->owner) {
		res->outcome = DL_NOT_HOLDER;
		return 0;
	}
	if (t->suspended)
		return DL_EUNAVAILABLE;
	if (ttl_ms)
		l->ttl_ms = (uint32_t)ttl_ms;
	dl_wheel_add(&t->wheel, &l->timer, now + l->ttl_ms);
	t->st.refreshes++;
	mark_dirty(t, lk);
	res->outcome = DL_REFRESHED;
	res->durable = 1;
	res->token = token;
	res->value = l->ttl_ms;
	return 0;
}

int dl_locktab_check(struct dl_locktab *t, struct dl_str name, uint64_t token,
		     struct dl_result *res)
{
	uint64_t now = now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);
	struct dl_lease *l = lk ? holder_by_token(lk, token) : NULL;

	memset(res, 0, sizeof(*res));
	if (l) {
		res->outcome = DL_VALID;
		res->token = token;
		res->value = remaining(l, now);
	} else {
		res->outcome = DL_STALE;
		res->token = lk && lk->holders ? lk->holders->token : 0;
	}
	return 0;
}

int dl_locktab_cancel(struct dl_locktab *t, struct dl_session *s,
		      struct dl_str name, struct dl_result *res)
{
	uint64_t now = now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);
	struct dl_waiter *w = lk ? session_waiter(s, lk) : NULL;

	memset(res, 0, sizeof(*res));
	if (!w) {
		res->outcome = DL_NOT_QUEUED;
		return 0;
	}
	waiter_free(t, w);
	t->st.cancels++;
	serve(t, lk, now);
	res->outcome = DL_CANCELLED;
	return 0;
}

void dl_locktab_status(struct dl_locktab *t, struct dl_str name,
		       struct dl_lock_status *st)
{
	uint64_t now = now_ms(t);
	struct dl_lock *lk = lock_now(t, name, now);
	const struct dl_lease *l = lk ? lk->holders : NULL;

	memset(st, 0, sizeof(*st));
	if (!lk)
		return;
	st->holders = lk->nholders;
	st->waiters = lk->nwaiters;
	if (l) {
		st->held = 1;
		st->token = l->token;
		st->remaining = remaining(l, now);
		st->count = l->count;
		st->owner = dl_owner_id(l->owner);
	}
}

/* ---- persistence hooks
 * ------------------------------------------------------------- */

size_t dl_locktab_drain_dirty(struct dl_locktab *t, dl_lock_cb cb, void *arg)
{
	size_t i, n = t->ndirty;
	struct dl_lock *lk;

	for (i = 0; i < n; i++) {
		lk = t->dirty[i];
		lk->dirty = 0;
		if (cb)
			cb(lk, arg);
		if (lock_empty(lk))
			lock_free(t, lk);
	}
	t->ndirty = 0;
	return n;
}

size_t dl_locktab_dirty_count(const struct dl_locktab *t)
{
	return t->ndirty;
}

void dl_locktab_foreach(struct dl_locktab *t, dl_lock_cb cb, void *arg)
{
	struct dl_hnode *n, *next;
	size_t i;

	for (i = 0; i <= t->locks.mask; i++) {
		for (n = t->locks.b[i]; n; n = next) {
			next = n->next;
			cb((struct dl_lock *)((char *)n -
					      offsetof(struct dl_lock, hn)),
			   arg);
		}
	}
}

static void serve_cb(const struct dl_lock *lk, void *arg)
{
	struct timer_run *r = arg;

	serve(r->t, (struct dl_lock *)lk, r->now);
}

void dl_locktab_suspend_grants(struct dl_locktab *t, int suspended)
{
	struct timer_run r = {t, now_ms(t)};

	t->suspended = suspended;
	/* Only queues can move; with none, skip the walk of every lock
	 * (a million of them after a restore). */
	if (!suspended && t->st.waiters)
		dl_locktab_foreach(t, serve_cb, &r);
}

void dl_locktab_reserve(struct dl_locktab *t, size_t n)
{
	struct dl_lock **nd;

	htab_resize(&t->locks, n);
	if (n > t->dirty_cap && (nd = realloc(t->dirty, n * sizeof(*nd)))) {
		t->dirty = nd;
		t->dirty_cap = n;
	}
}

/* ---- recovery
 * ------------------------------------------------------------------ */

static int restore_args(struct dl_str name, struct dl_str owner, uint32_t ttl,
			struct dl_str tag)
{
	if (dl_check_name(name.p, name.len) ||
	    dl_check_owner(owner.p, owner.len) || ttl == 0 ||
	    (tag.len && dl_check_tag(tag.p, tag.len)))
		return DL_EBADARG;
	return 0;
}

int dl_locktab_restore_lease(struct dl_locktab *t, struct dl_str name,
			     struct dl_str owner, uint64_t token,
			     uint32_t count, uint32_t ttl_ms, uint64_t deadline,
			     struct dl_str tag)
{
	struct dl_lock *lk;
	struct dl_owner *o;
	struct dl_lease *l, **pp;

	if (restore_args(name, owner, ttl_ms, tag) || count == 0 ||
	    count > DL_REENTRY_MAX)
		return DL_EBADARG;
	if (!(lk = lock_get(t, name)))
		return DL_ENOMEM;
	if (!(o = owner_get(t, owner)) || !(l = lease_alloc(tag))) {
		if (o)
			owner_put(t, o);
		lock_drop_if_unused(t, lk);
		return DL_ENOMEM;
	}
	if (holder_of(lk, o) || lk->nholders >= t->max_holders) {
		free(l->tag);
		free(l);
		owner_put(t, o);
		lock_drop_if_unused(t, lk);
		return DL_EBADARG;
	}
	for (pp = &lk->holders; *pp; pp = &(*pp)->next)
		;
	*pp = l;
	l->kind = DL__TIMED_LEASE;
	l->count = count;
	l->ttl_ms = ttl_ms;
	l->lock = lk;
	l->owner = o;
	l->token = token;
	l->granted_at = now_ms(t); /* the real time is not stored */
	lk->nholders++;
	o->nleases++;
	dl_wheel_add(&t->wheel, &l->timer, deadline);
	t->st.leases++;
	dl_locktab_raise_token(t, token);
	return 0;
}

int dl_locktab_restore_waiter(struct dl_locktab *t, struct dl_str name,
			      struct dl_str owner, uint32_t ttl_ms,
			      uint64_t wait_deadline, uint64_t grace_deadline,
			      struct dl_str tag)
{
	struct dl_lock *lk;
	struct dl_owner *o;
	struct dl_waiter *w;
	int dirty;

	if (restore_args(name, owner, ttl_ms, tag))
		return DL_EBADARG;
	if (!(lk = lock_get(t, name)))
		return DL_ENOMEM;
	if (!(o = owner_get(t, owner))) {
		lock_drop_if_unused(t, lk);
		return DL_ENOMEM;
	}
	dirty = lk->dirty;
	w = waiter_new(t, lk, o, NULL, ttl_ms,
		       wait_deadline < grace_deadline ? wait_deadline
						      : grace_deadline,
		       tag);
	if (!w) {
		owner_put(t, o);
		lock_drop_if_unused(t, lk);
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
	return lock_find(t, name);
}

struct dl_str dl_lock_name(const struct dl_lock *lk)
{
	return (struct dl_str){lk->name, lk->hn.len};
}

struct dl_str dl_owner_id(const struct dl_owner *o)
{
	return (struct dl_str){o->id, o->hn.len};
}

const struct dl_locktab_stats *dl_locktab_stats(const struct dl_locktab *t)
{
	return &t->st;
}
