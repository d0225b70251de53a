/* SPDX-License-Identifier: MIT */
/*
 * dlock_follow.c -- a lease follows its slot: a router's lease moved from
 * one partition's leg to another's when a request about it is answered
 * NO MOVED (dlock.h, "Partitions"; PROTOCOL.md, "Partitions").
 *
 * A PARTITION MOVE carries the slots' locks to their new partition: same
 * owner, token and proof (PROTOCOL.md, Partitions). A request about a
 * lease the old partition gave away is answered NO MOVED, and the lease
 * goes where its name went: MAP read again if need be, then the lease
 * moved to the connection of the name's partition (dlock__lease_move,
 * made if need be), where every later request about it goes -- the
 * caller's unlock, refresh and value change, which send theirs again
 * there (dlock.c, through dlock__lease_follow), and the renewals.
 *
 * A renewal is the leg's thread's, which may not block (it holds its
 * mu, and making a connection takes a while): it hands the lease to the
 * router's mover (dlock__move_later), a thread started at the first
 * move, and stops renewing it meanwhile (l->moving; the guard still
 * watches its deadline). The mover moves it and the new connection
 * renews it at once; one it could not move is renewed again by its leg
 * after the usual pause, told MOVED again, handed over again, until the
 * lease's deadline (lost as any lease not renewed in time). While the
 * partitions hand the locks over, renewals are answered ERR UNAVAILABLE
 * and retried as always.
 *
 * Ownership. This file decides when a lease moves, and owns the mover
 * (struct dlock__mover, dlock_private.h): its queue, its lock, its
 * thread. Nothing else of the router is touched here: where a lease's
 * name goes now -- the map, read again if need be, and the leg, made if
 * need be -- is dlock_route.c's answer (dlock__lease_home), which comes
 * with that leg counted on the router's users, so that dlock_close frees
 * no leg under a move; the move itself, the lease off one client's list
 * and onto the other's, is dlock_req.c's (dlock__lease_move). The mover
 * is a part of the router (rt->mover), which sets it up, halts and stops
 * it in dlock_close, and tears it down with these calls; no other file
 * reads its fields.
 *   - The queue (moves, tail), started and stop: under the mover's mu.
 *   - A struct dlock__move is the queue's until the mover takes it off,
 *     then the mover's, freed once made. It holds a reference to its
 *     lease (l->refs), taken when it is queued, dropped once made or
 *     dropped.
 *   - l->moving, as every field of a lease, under the mu of the client
 *     that holds it (l->c): set by that client's thread when it queues
 *     the lease (dlock__move_later, under its mu; a lease already on its
 *     way is not queued twice); cleared by the move (dlock__lease_move),
 *     or, when the lease is still the same client's, by the mover after
 *     a move it could not make (move_one) and by dlock_close for one it
 *     did not make (dlock__mover_stop).
 *
 * Lock order. The library's: the router's rt->mu, then a leg's mu, then
 * the router client's mu (dlock_route.c); the mover's mu is the last of
 * all: a client's thread (a leg's, or the router's own) takes it under its
 * own mu (dlock__move_later), and nothing is taken under it (the mover
 * lets it go before each move). Two clients' mu are held together only to
 * move a lease from one to the other (dlock__lease_move, with no other
 * lock held): legs by address, the router's own client last. The mover
 * holds no lock while it asks where a lease goes (which may read MAP or
 * connect a leg), and takes the mu of the lease's old client alone
 * afterwards. A caller of dlock__lease_follow holds no lock: it blocks as
 * the mover does.
 *
 * Closing. dlock_close (dlock__router_close) halts the mover first: no
 * move is queued after, and its thread is woken to stop. Then the legs
 * are canceled, so that a call the mover makes in one ends
 * (DLOCK_ECANCELED); then the mover is stopped: its thread joined, the
 * moves it did not make dropped (l->moving cleared, the reference
 * given back) -- all before the router waits for its users and closes
 * the legs.
 */
#include "client/lib/dlock_private.h"

#include <stdio.h>
#include <stdlib.h>

/* A lease whose renewal was told MOVED, for the mover (a reference). */
struct dlock__move {
	struct dlock__move *next;
	struct dlock__lease *l;
	struct dlock_client *from; /* the client whose renewal was told */
	char moved[DLOCK__ERR_MAX];
};

/* ---- a lease moves ------------------------------------------------------- */

/* Lease l, told `moved` through from, goes to its name's partition's
 * client: 0 (moved, or to be tried again where it is: where the MOVED
 * sent it when the map could not be read), 1 when the map names from
 * still (its daemon has not read the newest map yet), or why no
 * connection could be had. */
static int rehome(struct dlock_client *c, struct dlock__lease *l,
		  struct dlock_client *from, const char *moved, int unlocking)
{
	struct dlock_client *to;
	int used, err;

	if ((err = dlock__lease_home(c, l->name, from, moved, &to, &used)) != 0)
		return err;
	if (to != from)
		dlock__lease_move(l, from, to, unlocking);
	dlock__router_unuse(c, used);
	return 0;
}

int dlock__lease_follow(struct dlock_client *c, struct dlock__lease *l,
			struct dlock_client *from, struct dlock__hop *hop,
			int *err, int unlocking)
{
	char moved[DLOCK__ERR_MAX];
	int e;

	if (!atomic_load(&c->rt))
		return 0;
	if (*err == DLOCK_EUNAVAILABLE)
		return (hop->moves || hop->settle_end) && dlock__settle(c, hop);
	if (*err != DLOCK_EMOVED || hop->moves >= DLOCK__MOVES_MAX)
		return 0;
	snprintf(moved, sizeof(moved), "%s", dlock_last_error());
	if ((e = rehome(c, l, from, moved, unlocking)) < 0) {
		*err = e;
		return 0;
	}
	if (e == 1)
		return dlock__settle(c, hop);
	hop->moves++;
	return 1;
}

/* ---- the mover ----------------------------------------------------------- */

void dlock__mover_init(struct dlock__mover *mv)
{
	pthread_mutex_init(&mv->mu, NULL);
	pthread_cond_init(&mv->cv, NULL);
}

void dlock__mover_destroy(struct dlock__mover *mv)
{
	pthread_cond_destroy(&mv->cv);
	pthread_mutex_destroy(&mv->mu);
}

/* One move for a renewal; a lease left where it was is renewed there
 * again after the usual pause (and is at risk if no connection to its
 * partition could be had). */
static void move_one(struct dlock_client *c, struct dlock__move *m)
{
	struct dlock__lease *l = m->l;
	int64_t retry;
	int err = rehome(c, l, m->from, m->moved, 0);

	pthread_mutex_lock(&m->from->mu);
	if (atomic_load(&l->c) == m->from && l->moving) {
		l->moving = 0;
		retry = atomic_load(&l->ttl) / 10;
		l->renew_at =
			dlock__now() + (retry > DLOCK__RENEW_RETRY_MIN_MS
						? retry
						: DLOCK__RENEW_RETRY_MIN_MS);
		if (err < 0)
			dlock__lease_risk(m->from, l);
		dlock__wake(m->from);
	}
	pthread_mutex_unlock(&m->from->mu);
	dlock__lease_unref(l);
}

static void *mover_main(void *arg)
{
	struct dlock_client *c = arg;
	struct dlock__mover *mv = dlock__router_mover(c);
	struct dlock__move *m;

	pthread_mutex_lock(&mv->mu);
	for (;;) {
		while (!mv->moves && !mv->stop)
			pthread_cond_wait(&mv->cv, &mv->mu);
		if (mv->stop)
			break;
		m = mv->moves;
		if (!(mv->moves = m->next))
			mv->tail = NULL;
		pthread_mutex_unlock(&mv->mu);
		move_one(c, m);
		free(m);
		pthread_mutex_lock(&mv->mu);
	}
	pthread_mutex_unlock(&mv->mu);
	return NULL;
}

int dlock__move_later(struct dlock_client *from, struct dlock__lease *l,
		      const char *moved)
{
	struct dlock_client *c = from->parent ? from->parent : from;
	struct dlock__mover *mv = dlock__router_mover(c);
	struct dlock__move *m;
	int err = 0;

	if (!mv)
		return DLOCK_EMOVED; /* no map: nowhere to go */
	if (l->moving)
		return 0; /* on its way already */
	if (!(m = calloc(1, sizeof(*m))))
		return DLOCK_ENOMEM;
	m->l = l;
	m->from = from;
	snprintf(m->moved, sizeof(m->moved), "%s", moved);
	pthread_mutex_lock(&mv->mu);
	if (mv->stop)
		err = DLOCK_ECANCELED;
	else if (!mv->started &&
		 pthread_create(&mv->thread, NULL, mover_main, c) != 0)
		err = DLOCK_ENOMEM;
	if (err == 0) {
		mv->started = 1;
		l->refs++; /* the move's */
		l->moving = 1;
		if (mv->tail)
			mv->tail->next = m;
		else
			mv->moves = m;
		mv->tail = m;
		pthread_cond_signal(&mv->cv);
	}
	pthread_mutex_unlock(&mv->mu);
	if (err < 0)
		free(m);
	return err;
}

void dlock__mover_halt(struct dlock__mover *mv)
{
	pthread_mutex_lock(&mv->mu);
	mv->stop = 1;
	pthread_cond_broadcast(&mv->cv);
	pthread_mutex_unlock(&mv->mu);
}

/* The mover's calls in the legs end, canceled: its thread returns. The
 * queue is read without mu: nothing is queued once halted. */
void dlock__mover_stop(struct dlock__mover *mv)
{
	struct dlock__move *m;

	if (mv->started)
		pthread_join(mv->thread, NULL);
	while ((m = mv->moves) != NULL) {
		mv->moves = m->next;
		pthread_mutex_lock(&m->from->mu);
		if (atomic_load(&m->l->c) == m->from)
			m->l->moving = 0;
		pthread_mutex_unlock(&m->from->mu);
		dlock__lease_unref(m->l);
		free(m);
	}
	mv->tail = NULL;
}
