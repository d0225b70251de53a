/* SPDX-License-Identifier: MIT */
/*
 * store_resync.c -- the re-sync: after a lost link, the whole lock table
 * is written into Redis again, each bucket replaced whole (store.c's top
 * comment says when and why; store_batch.c formats the calls). Here: how
 * it keeps the loop serving meanwhile -- the table pinned, indexed a step
 * per loop iteration, each call formatted when it is sent -- and why that
 * is safe (on_walk).
 */
#include <string.h>

#include "server/store/store_private.h"

/* End a re-sync (its link lost, or it is done): its index goes, and with
 * it the pin that kept the indexed locks in the table. */
void dl__resync_free(struct dl_store *st)
{
	struct resync *rs = &st->resync;

	if (rs->indexing)
		uv_idle_stop(&st->walk);
	dl__bucket_index_free(&rs->bi);
	if (rs->pinned)
		dl_locktab_pin(st->tab, 0);
	memset(rs, 0, sizeof(*rs));
}

/*
 * Re-sync (top comment). The table is pinned (dl_locktab_pin): no lock
 * that has a holder or waiter leaves it, nor moves in its hash, until the
 * re-sync ends -- only a drain of the dirty set frees such a lock, and
 * nothing is drained before the link is up. So the table can be indexed
 * by bucket a step per loop iteration (on_walk), and each call formatted
 * when it is sent, from the locks' state of that moment. Done in one go,
 * both blocked the loop for 0.3 s per 10^6 locks, and the formatted calls
 * held the whole table a second time in memory.
 *
 * While SYNCING no lock can gain a holder or a waiter (grants are
 * suspended, requests that change state refused): a lock changes only by
 * losing some (expiries, waiters that time out or leave). One that
 * changed in between is written newer than it was when the re-sync began,
 * which Redis may hold at any time (a change is told only once it is
 * written), and stays dirty: it is written again once the link is up. A
 * lock made meanwhile (a refused request's, gone again) is never in the
 * index. Why that is enough: what must be in Redis when the last call's
 * reply commits the closed epochs is their changes, made before the link
 * was lost, so before the walk: every lock they touched is in the index
 * (or was emptied, and then has no record to write).
 */
static void on_walk(uv_idle_t *h)
{
	struct dl_store *st = h->data;
	struct resync *rs = &st->resync;

	/* Only silence counts against a re-sync (on_tick): Redis is not
	 * silent while nothing is asked of it. */
	if (!st->head)
		st->last_reply_ms = uv_now(st->loop);
	if (!dl_locktab_walk(st->tab, &rs->cursor, DL_STORE_RESYNC_WALK,
			     dl__bucket_index_add, &rs->bi) &&
	    !rs->bi.err)
		return;
	uv_idle_stop(&st->walk);
	rs->indexing = 0;
	if (rs->bi.err) {
		dl__link_fail(st, "re-sync failed: out of memory");
		return;
	}
	st->synced_locks = 0; /* counted as the records go */
	if (dl__resync_pump(st))
		dl__link_fail(st, "re-sync failed");
}

void dl__resync_start(struct dl_store *st)
{
	struct resync *rs = &st->resync;

	dl__resync_free(st);
	dl_locktab_pin(st->tab, 1);
	rs->pinned = 1;
	rs->indexing = 1;
	uv_idle_start(&st->walk, on_walk);
}

/* Format and send the re-sync's next calls, DL_STORE_RESYNC_WINDOW in
 * flight: whole buckets from the index, DL_STORE_RESYNC_CHUNK records or
 * so a call, each lock in its state of now. The last one ends it (its
 * reply, or that of the WAIT after it, brings the link up). */
int dl__resync_pump(struct dl_store *st)
{
	struct resync *rs = &st->resync;
	const char **argv;
	const size_t *lens;
	int argc, r = 0, sent = 0;

	while (!r && !rs->last_sent && rs->inflight < DL_STORE_RESYNC_WINDOW) {
		dl__wb_reset(&st->writes.wb);
		r = dl__wb_buckets(st, &rs->bi, &rs->next,
				   dl__store_wall_offset());
		rs->last_sent = rs->next == DL_STORE_BUCKETS;
		/* The last call, once every bucket holds the table, also
		 * deletes layout 1's name set: it can only be stale here (a
		 * Redis restored from an AOF older than the migration), and
		 * left in place it would make the next start migrate that
		 * stale layout 1 over the buckets, dropping leases granted
		 * since (found from outside). */
		if (!r && rs->last_sent)
			r = dl__wb_key(st, st->keys.names,
				       strlen(st->keys.names));
		if (!r)
			r = dl__wb_replace_argv(st, st->fence, &argc, &argv,
						&lens);
		if (!r)
			r = dl__batch_send(st,
					   rs->last_sent ? BATCH_RESYNC
							 : BATCH_RESYNC_PART,
					   0, argc, argv, lens);
		if (!r) {
			st->tail->records = st->writes.wb.nentries;
			st->synced_locks += st->writes.wb.nentries;
		}
		if (r)
			st->writes.token_mark = 0; /* as wb_send */
		dl__wb_reset(&st->writes.wb);
		if (r)
			break;
		rs->inflight++;
		sent = 1;
		if (rs->last_sent && st->cfg->min_replicas_ack)
			r = dl__send_wait(st, BATCH_RESYNC_WAIT, 0);
	}
	/* Formatting a bucket of many records holds the loop (0.3 s for
	 * 10^6 under load): the replies to the calls sent before it wait in
	 * the socket meanwhile, and the store's tick, which runs before the
	 * socket is read, took that for Redis's silence and timed the
	 * re-sync out (found by CI and under load: 120,000 records in one
	 * bucket, redis_timeout 150 ms). Silence counts from here. */
	if (sent) {
		uv_update_time(st->loop);
		st->last_reply_ms = uv_now(st->loop);
	}
	return r;
}

void dl__resynced(struct dl_store *st)
{
	char how[96];

	dl__resync_free(st); /* every call sent and answered */
	snprintf(how, sizeof(how), ", %zu locks re-synced in %llu ms",
		 st->synced_locks,
		 (unsigned long long)(uv_now(st->loop) - st->link_since_ms));
	dl__link_up(st, how);
}
