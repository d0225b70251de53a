/* SPDX-License-Identifier: MIT */
/*
 * locktab_move.c -- locks leaving this table for another partition's
 * (server/part/part.c, PARTITION MOVE of slots that hold locks).
 *
 * A move records the slots' locks as they are (dl_record_format), and the
 * receiving partition restores them from that record. Between the two the
 * giver must not make its copy go stale in a way that matters: a lease it
 * granted after the record would be held twice (its grantee told, the
 * receiver ignorant of it). So the slots are *frozen* first: no waiter of
 * theirs is served (dl__serve), while everything that only lessens a lock
 * -- an expiry, a wait running out, a withdrawn grant -- may still happen:
 * the receiver then keeps a lease or a place nobody holds until its TTL or
 * grace ends, which costs time, never safety. Requests about their names
 * are refused before they reach the table (the route says "moving").
 *
 * Once the move is known durable and in the map, the giver *extracts* the
 * locks: they leave the table without a word to their holders (whose
 * leases live on at the receiver, same token) and each waiter still
 * attached to a connection is told DL_EVENT_MOVED (its place waits at the
 * receiver for its owner). The lock is left empty and dirty, so the next
 * drain deletes its record here.
 */
#include <string.h>

#include "proto/slot.h"
#include "server/locktab/locktab_private.h"

void dl_locktab_freeze(struct dl_locktab *t, const uint8_t *slots)
{
	const uint8_t *was = t->frozen;

	t->frozen = slots;
	/* thawed (nothing moved after all): the queues that could move */
	if (was && !slots && !t->suspended && t->st.waiters)
		dl__serve_queued(t, dl__now_ms(t));
}

int dl__frozen(const struct dl_locktab *t, const struct dl_lock *lk)
{
	return t->frozen && t->frozen[dl_key_slot(lk->name, lk->hn.len)];
}

int dl_locktab_extract(struct dl_locktab *t, struct dl_str name)
{
	struct dl_lock *lk = dl__lock_find(t, name);
	struct dl_waiter *w;
	struct dl_session *s;
	struct dl_event ev;
	char tag[DL_TAG_MAX];

	if (!lk)
		return 0;
	while ((w = lk->qhead) != NULL) {
		s = w->sess;
		memset(&ev, 0, sizeof(ev));
		ev.type = DL_EVENT_MOVED;
		ev.req = w->req;
		ev.shared = w->shared;
		ev.tag = (struct dl_str){tag, w->tag_len};
		memcpy(tag, w->tag, w->tag_len);
		dl__waiter_free(t, w);
		if (s)
			dl__emit_ev(t, s, &ev, lk);
	}
	while (lk->holders)
		dl__lease_remove(t, lk->holders);
	if (lk->has_delay)
		dl__delay_drop(t, lk);
	dl__lock_relisted(t, lk);
	dl__mark_dirty(t, lk);
	return 1;
}
