/* SPDX-License-Identifier: MIT */
/*
 * locktab_wait.c -- the lock table's wait queues (see locktab.h for the
 * model): a waiter's life (new, attached to a session, moved to the head
 * or requeued, freed) and serving a lock's queue in FIFO order when it
 * may grant (dl__serve).
 *
 * A waiter is one allocation holding its wheel entry, the wait's deadline
 * (locktab.c's timer callback ends it), its lock's queue links and its
 * session's (none for a placeholder restored from Redis, which keeps its
 * place until its owner claims it). It owns nothing else; the lock owns its
 * queue, the session its list of waiters. Failure atomicity as in locktab.c:
 * dl__serve allocates what a grant needs before it changes anything, and a
 * waiter that cannot be served is told it timed out rather than left at the
 * head of the queue.
 */
#include "server/locktab/locktab.h"
#include "server/locktab/locktab_private.h"

#include <stdlib.h>
#include <string.h>

uint64_t dl__waiter_position(const struct dl_waiter *w)
{
	const struct dl_waiter *p;
	uint64_t pos = 1;

	for (p = w->lock->qhead; p != w; p = p->qnext)
		pos++;
	return pos;
}

void dl__waiter_free(struct dl_locktab *t, struct dl_waiter *w)
{
	struct dl_lock *lk = w->lock;
	struct dl_session *s = w->sess;

	/* qnext ends in NULL, qprev is circular (locktab.h) */
	if (w == lk->qhead) {
		lk->qhead = w->qnext;
		if (w->qnext)
			w->qnext->qprev = w->qprev; /* the tail */
		else
			dl__lock_relisted(t, lk);
	} else {
		w->qprev->qnext = w->qnext;
		(w->qnext ? w->qnext : lk->qhead)->qprev = w->qprev;
	}
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
	free(w->value);
	dl_wheel_del(&t->wheel, &w->timer);
	t->st.contended[dl_queue_bucket(lk->nwaiters)]--;
	lk->nwaiters--;
	if (lk->nwaiters)
		t->st.contended[dl_queue_bucket(lk->nwaiters)]++;
	w->owner->nwaiters--;
	w->owner->acct->nwaiters--;
	dl__owner_put(t, w->owner);
	t->st.waiters--;
	dl__mark_dirty(t, lk);
	free(w);
}

void dl__waiter_attach(struct dl_waiter *w, struct dl_session *s)
{
	w->sess = s;
	w->sprev = NULL;
	w->snext = s->waiters;
	if (s->waiters)
		s->waiters->sprev = w;
	s->waiters = w;
}

void dl__waiter_set(struct dl_waiter *w, uint32_t ttl, struct dl_str tag)
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
struct dl_waiter *dl__waiter_new(struct dl_locktab *t, struct dl_lock *lk,
				 struct dl_owner *o, struct dl_session *s,
				 uint32_t ttl, uint64_t timer_at,
				 struct dl_str tag, int shared)
{
	struct dl_waiter *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->kind = DL__TIMED_WAITER;
	w->shared = shared ? 1 : 0;
	w->lock = lk;
	w->owner = o;
	w->queued_at = dl__now_ms(t);
	dl__waiter_set(w, ttl, tag);
	if (lk->qhead) {
		w->qprev = lk->qhead->qprev; /* the tail */
		w->qprev->qnext = w;
		lk->qhead->qprev = w;
	} else {
		w->qprev = w;
		lk->qhead = w;
		dl__lock_relisted(t, lk);
	}
	if (s)
		dl__waiter_attach(w, s);
	else
		t->placeholders++;
	if (timer_at != UINT64_MAX)
		dl_wheel_add(&t->wheel, &w->timer, timer_at);
	w->wait_deadline = timer_at;
	if (lk->nwaiters)
		t->st.contended[dl_queue_bucket(lk->nwaiters)]--;
	lk->nwaiters++;
	t->st.contended[dl_queue_bucket(lk->nwaiters)]++;
	o->nwaiters++;
	o->acct->nwaiters++;
	t->st.waiters++;
	dl__mark_dirty(t, lk);
	return w;
}

/* Move w, just appended, to the head of its lock's queue. */
void dl__waiter_to_head(struct dl_lock *lk, struct dl_waiter *w)
{
	struct dl_waiter *tail;

	if (lk->qhead == w)
		return;
	/* unlink: w is not the head, so the queue keeps its head */
	w->qprev->qnext = w->qnext;
	(w->qnext ? w->qnext : lk->qhead)->qprev = w->qprev;
	/* and put it first: the tail is the old head's qprev */
	tail = lk->qhead->qprev;
	w->qprev = tail;
	w->qnext = lk->qhead;
	lk->qhead->qprev = w;
	lk->qhead = w;
}

/*
 * Put w, a waiter whose grant of `token` was withdrawn, back where it was
 * served from: at the head, behind the waiters put back before it that
 * were served before it (smaller tokens: grants are served in queue
 * order). Withdrawals come in the order of the connections that held
 * them, not of service: pushed to the head one by one, two waiters served
 * in turn came back the other way round, and the later one was granted
 * first (found from outside).
 */
void dl__waiter_requeue(struct dl_lock *lk, struct dl_waiter *w, uint64_t token)
{
	struct dl_waiter *p = NULL, *n;

	dl__waiter_to_head(lk, w);
	w->served = token;
	for (n = w->qnext; n && n->served && n->served < token; n = n->qnext)
		p = n;
	if (!p)
		return;
	/* unlink the head w (the new head keeps the tail as its qprev) */
	lk->qhead = w->qnext;
	lk->qhead->qprev = w->qprev;
	/* and put it after p */
	w->qprev = p;
	w->qnext = p->qnext;
	if (p->qnext)
		p->qnext->qprev = w;
	else
		lk->qhead->qprev = w; /* w is the tail */
	p->qnext = w;
}

/*
 * Grant the lock to waiters from the head of its queue while the head can
 * be admitted. Only the head is ever considered: this is the "watch your
 * predecessor" rule, done here, so a release wakes exactly the waiters
 * that can now hold -- one exclusive waiter, a run of consecutive shared
 * ones (each admitted because the one before was), or one per freed
 * permit -- and nobody behind a waiter that has to go on waiting (strict
 * FIFO across modes: a shared request never overtakes a queued exclusive
 * one). A placeholder at the head keeps its place (nobody behind it is
 * served) until its owner claims it or its grace ends.
 */
void dl__serve(struct dl_locktab *t, struct dl_lock *lk, uint64_t now)
{
	struct dl_waiter *w;
	struct dl_lease *l;
	struct dl_session *s;
	struct dl_event ev;
	struct dl_warn *spare;
	struct dl_notify *nspare;
	char tag[DL_TAG_MAX];
	int nomem, served = 0;

	if (dl__frozen(t, lk)) /* its slot is moving (locktab_move.c) */
		return;
	while (!t->suspended && (w = lk->qhead) != NULL && w->sess) {
		l = dl__holder_of(lk, w->owner);
		if (!l && (!dl__has_room(lk, w->shared) || dl__closed(t, now) ||
			   dl__delay_left(t, lk, now)))
			break;
		s = w->sess;
		memset(&ev, 0, sizeof(ev));
		ev.asked_ttl_ms = w->ttl_ms;
		ev.wait_deadline = w->wait_deadline;
		ev.tag = (struct dl_str){tag, w->tag_len};
		memcpy(tag, w->tag, w->tag_len);
		dl__hist_add(&t->st.wait,
			     now > w->queued_at ? now - w->queued_at : 0);
		ev.shared = w->shared;
		ev.limit = lk->limit;
		ev.asked_warn = w->has_warn;
		ev.asked_warn_ms = w->warn_ms;
		ev.req = w->req;
		ev.notify = w->notify;
		/* side objects to add are allocated first (failure
		 * atomicity) */
		spare = NULL;
		nspare = NULL;
		nomem = (w->has_warn && w->warn_ms && !(l && l->has_warn) &&
			 !(spare = dl__warn_alloc())) ||
			(w->notify && !(nspare = dl__notify_alloc()));
		if (!nomem && l && l->count < DL_REENTRY_MAX &&
		    !(l->shared && !w->shared)) {
			dl__lease_reenter(t, l, w->ttl_ms, now);
			ev.reentry = 1;
		} else if (!nomem && !l && !dl__tokens_exhausted(t) &&
			   (l = dl__lease_alloc(waiter_tag(w), s->desc,
						w->req)) != NULL) {
			dl__lease_grant(t, l, lk, w->owner, w->ttl_ms, now,
					w->shared, &w->value);
		} else {
			free(spare);
			free(nspare);
			/* The owner took the lock through another session
			 * while this request waited, and a reentry would go
			 * past DL_REENTRY_MAX or upgrade its shared lease
			 * (it would wait for itself); or out of memory or of
			 * tokens: the waiter cannot be served, so it is told
			 * it timed out rather than left to hang at the head
			 * of the queue. The hold count never wraps. */
			dl__waiter_free(t, w);
			t->st.timeouts++;
			ev.type = DL_EVENT_TIMEOUT;
			dl__emit_ev(t, s, &ev, lk);
			continue;
		}
		if (w->has_warn)
			dl__warn_set(t, l, w->warn_ms, &spare);
		free(spare);
		if (w->notify)
			dl__notify_set(t, l, &nspare);
		free(nspare);
		/* a reentry leaves the lease's value as it is (lease_asks,
		 * locktab_ops.c); the waiter's goes with it */
		dl__lease_set_req(l, w->req);
		dl__waiter_free(t, w);
		served = 1;
		ev.type = DL_EVENT_GRANTED;
		ev.durable = 1;
		ev.token = l->token;
		ev.ttl_ms = dl__remaining(l, now);
		ev.deadline = l->timer.expires;
		ev.holds = l->count;
		if (!ev.reentry)
			ev.value = dl_locktab_lease_value(t, l);
		dl__emit_ev(t, s, &ev, lk);
	}
	/* the ones just granted that asked hear of those left behind, after
	 * their * GRANTED */
	if (served)
		dl__notify_holders(t, lk, now, 1);
}
