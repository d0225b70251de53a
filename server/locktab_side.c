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
 */
#include <stdlib.h>
#include <string.h>

#include "server/locktab.h"
#include "server/locktab_private.h"

_Static_assert(offsetof(struct dl__side, key) == sizeof(struct dl_hnode),
	       "a side object's key must follow its hash node");

/* ---- side objects ----------------------------------------------------------
 */

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
	free_side(&t->warns,
		  offsetof(struct dl_warn, side) + offsetof(struct dl__side, hn));
}

/* ---- warnings --------------------------------------------------------------
 */

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
