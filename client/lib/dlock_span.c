/* SPDX-License-Identifier: MIT */
/*
 * dlock_span.c -- what spans the partitions of a partitioned service
 * (dlock.h, "Partitions"): LOCKS, STATS and WATCH <prefix>*, which each
 * daemon answers for its own partition only (PROTOCOL.md, Partitions).
 * The client gathers.
 *
 * A spanning call holds the router (dlock__hold: dlock_close waits for
 * it), has MAP read again (a partition the map gained since is asked
 * too: dlock__span_parts) and asks each partition that serves a slot,
 * one after the other in the router's order, through its leg (made on
 * first use, as for any routed call, and counted on the router's users
 * while it is used: dlock__span_leg). A partition that cannot be
 * reached, or refuses, fails the call with its error (and its text in
 * dlock_last_error()), as a routed call would: the caller is then given
 * nothing.
 *
 *  - LOCKS: each partition is asked for the page the caller asked for
 *    (prefix, after, limit, order). Each page is sorted -- by name in
 *    byte order, or most waiters first and ties by name -- and holds the
 *    first `limit` of its partition, so the first `limit` of their union,
 *    merged, are the first `limit` of the service. *more is what the
 *    partitions said matched (listed or more), less what was given. A
 *    prefix that holds a whole {tag} is one slot's: only its partition
 *    is asked.
 *  - STATS (dlock_stats_all): every partition's lines, gathered before
 *    the first is given, with the partition's id.
 *  - WATCH <prefix>*: the prefix watched on every partition's leg. A
 *    leg's events, and its RESUMED after a reconnect, go to the router's
 *    queue already (dlock_watch.c, push), each from the one partition
 *    that has its lock. All or none: when a partition refuses, those
 *    this call made watch it stop again. UNWATCH goes to every leg that
 *    watches the prefix (a partition that has lost its slots too), and
 *    to the router's own connection if it watched it before the client
 *    routed.
 *
 * No lock is held across a leg's call; the pages are the calling
 * thread's own, and the caller's callbacks run after the legs are left.
 */
#include "client/lib/dlock_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The partitions one call asks. */
struct span {
	struct dlock_client *c;
	int n;
	struct dlock__span_part part[DLOCK__PARTS_MAX];
};

static int span_begin(struct dlock_client *c, const char *prefix, int every,
		      struct span *sp)
{
	int err;

	if ((err = dlock__hold(c)) < 0)
		return err;
	sp->c = c;
	sp->n = dlock__span_parts(c, prefix, every, sp->part);
	return 0;
}

static void span_end(struct span *sp)
{
	dlock__unhold(sp->c);
}

/* Partition k's leg (made if need be), or NULL with *err. */
static struct dlock_client *span_leg(struct span *sp, int k, int *err)
{
	struct dlock_client *leg =
		dlock__span_leg(sp->c, sp->part[k].i, 1, err);

	if (!leg && *err == 0)
		*err = DLOCK_ECANCELED;
	return leg;
}

/* ---- LOCKS --------------------------------------------------------------- */

struct lock_row {
	char *name;
	struct dlock_status st;
};

/* One partition's page. */
struct page {
	struct lock_row *row;
	size_t n, cap;
	size_t at; /* the next row to merge */
	uint64_t more;
	int nomem;
};

static void on_row(const char *name, const struct dlock_status *st, void *arg)
{
	struct page *pg = arg;
	struct lock_row *grown;
	size_t cap;

	if (pg->nomem)
		return;
	if (pg->n == pg->cap) {
		cap = pg->cap ? pg->cap * 2 : 64;
		if (!(grown = realloc(pg->row, cap * sizeof(*grown)))) {
			pg->nomem = 1;
			return;
		}
		pg->row = grown;
		pg->cap = cap;
	}
	if (!(pg->row[pg->n].name = strdup(name))) {
		pg->nomem = 1;
		return;
	}
	pg->row[pg->n].st = *st;
	pg->n++;
}

static void pages_free(struct page *pg, int n)
{
	size_t i;
	int k;

	for (k = 0; pg && k < n; k++) {
		for (i = 0; i < pg[k].n; i++)
			free(pg[k].row[i].name);
		free(pg[k].row);
	}
	free(pg);
}

/* a goes before b: by name in byte order (strcmp compares bytes as
 * unsigned), or most waiters first, ties by name (the server's orders) */
static int before(const struct lock_row *a, const struct lock_row *b,
		  int by_waiters)
{
	if (by_waiters && a->st.waiters != b->st.waiters)
		return a->st.waiters > b->st.waiters;
	return strcmp(a->name, b->name) < 0;
}

/* The partition whose next row goes first, or -1 when all are given. */
static int first_of(const struct page *pg, int n, int by_waiters)
{
	int k, best = -1;

	for (k = 0; k < n; k++)
		if (pg[k].at < pg[k].n &&
		    (best < 0 ||
		     before(&pg[k].row[pg[k].at], &pg[best].row[pg[best].at],
			    by_waiters)))
			best = k;
	return best;
}

int dlock__span_locks(struct dlock_client *c, const char *prefix,
		      const char *after, unsigned limit, int by_waiters,
		      void (*cb)(const char *name,
				 const struct dlock_status *st, void *arg),
		      void *arg, uint64_t *more)
{
	uint64_t total = 0, given = 0, want;
	const struct lock_row *row;
	struct dlock_client *leg;
	struct page *pg = NULL;
	struct span sp;
	int k, err;

	if ((err = span_begin(c, prefix, 0, &sp)) < 0)
		return err;
	if (sp.n && !(pg = calloc((size_t)sp.n, sizeof(*pg))))
		err = DLOCK_ENOMEM;
	for (k = 0; err == 0 && k < sp.n; k++) {
		if (!(leg = span_leg(&sp, k, &err)))
			break;
		err = dlock__locks_at(leg, prefix, after, limit, by_waiters,
				      on_row, &pg[k], &pg[k].more);
		dlock__router_unuse(c, 1);
		if (err == 0 && pg[k].nomem)
			err = DLOCK_ENOMEM;
		total += pg[k].n + pg[k].more;
	}
	span_end(&sp);
	if (err == 0) {
		want = limit ? limit : DL_LOCKS_PAGE_DEFAULT;
		for (;
		     given < want && (k = first_of(pg, sp.n, by_waiters)) >= 0;
		     given++) {
			row = &pg[k].row[pg[k].at++];
			cb(row->name, &row->st, arg);
		}
		if (more)
			*more = total - given;
	}
	pages_free(pg, sp.n);
	return err;
}

/* ---- STATS --------------------------------------------------------------- */

/* One partition's STATS: "key\0value\0" n times. */
struct stats_buf {
	char *p;
	size_t len, cap;
	uint64_t n;
	int nomem;
};

static void on_stat(const char *key, const char *value, void *arg)
{
	struct stats_buf *b = arg;
	size_t kl = strlen(key) + 1, vl = strlen(value) + 1, cap;
	char *grown;

	if (b->nomem)
		return;
	if (b->len + kl + vl > b->cap) {
		cap = b->cap ? b->cap * 2 : 4096;
		while (cap < b->len + kl + vl)
			cap *= 2;
		if (!(grown = realloc(b->p, cap))) {
			b->nomem = 1;
			return;
		}
		b->p = grown;
		b->cap = cap;
	}
	memcpy(b->p + b->len, key, kl);
	memcpy(b->p + b->len + kl, value, vl);
	b->len += kl + vl;
	b->n++;
}

/* A client that routes nothing: its one daemon, partition "". */
struct relay {
	void (*cb)(const char *partition, const char *key, const char *value,
		   void *arg);
	void *arg;
};

static void relay(const char *key, const char *value, void *arg)
{
	const struct relay *r = arg;

	r->cb("", key, value, r->arg);
}

int dlock_stats_all(dlock_client *c,
		    void (*cb)(const char *partition, const char *key,
			       const char *value, void *arg),
		    void *arg)
{
	struct relay r = {cb, arg};
	struct stats_buf *b = NULL;
	struct dlock_client *leg;
	const char *p, *v;
	struct span sp;
	uint64_t i;
	int k, err;

	dlock__last_error_clear();
	if (!c || !cb)
		return DLOCK_EINVAL;
	if (!atomic_load(&c->rt))
		return dlock_stats(c, relay, &r);
	if ((err = span_begin(c, NULL, 0, &sp)) < 0)
		return err;
	if (sp.n && !(b = calloc((size_t)sp.n, sizeof(*b))))
		err = DLOCK_ENOMEM;
	for (k = 0; err == 0 && k < sp.n; k++) {
		if (!(leg = span_leg(&sp, k, &err)))
			break;
		err = dlock_stats(leg, on_stat, &b[k]);
		dlock__router_unuse(c, 1);
		if (err == 0 && b[k].nomem)
			err = DLOCK_ENOMEM;
	}
	span_end(&sp);
	for (k = 0; err == 0 && k < sp.n; k++)
		for (i = 0, p = b[k].p; i < b[k].n;
		     i++, p = v + strlen(v) + 1) {
			v = p + strlen(p) + 1;
			cb(sp.part[k].id, p, v, arg);
		}
	for (k = 0; b && k < sp.n; k++)
		free(b[k].p);
	free(b);
	return err;
}

/* ---- WATCH <prefix>* ----------------------------------------------------- */

/* Stop watching pat where this call began to: its refusal's text stays
 * the caller's dlock_last_error(). */
static void unwatch_added(struct dlock_client *const *leg,
			  const unsigned char *added, int n, const char *pat)
{
	char why[DLOCK__ERR_MAX];
	int k;

	snprintf(why, sizeof(why), "%s", dlock_last_error());
	for (k = 0; k < n; k++)
		if (added[k])
			(void)dlock__watch_at(leg[k], DLOCK__UNWATCH, pat,
					      NULL);
	dlock__last_error_set(why);
}

static int watch_every(struct span *sp, const char *pat, int64_t *holders)
{
	struct dlock_client *leg[DLOCK__PARTS_MAX] = {0};
	unsigned char added[DLOCK__PARTS_MAX] = {0};
	int k, err = 0;

	for (k = 0; k < sp->n; k++) {
		if (!(leg[k] = span_leg(sp, k, &err)))
			break;
		if (dlock__watching(leg[k], pat))
			continue; /* watched there already */
		if ((err = dlock__watch_at(leg[k], DLOCK__WATCH, pat, NULL)) <
		    0)
			break;
		added[k] = 1;
	}
	if (err < 0)
		unwatch_added(leg, added, sp->n, pat);
	else if (holders)
		*holders = -1;
	for (k = 0; k < sp->n; k++)
		if (leg[k])
			dlock__router_unuse(sp->c, 1);
	return err;
}

static int unwatch_every(struct span *sp, const char *pat)
{
	char why[DLOCK__ERR_MAX] = "";
	struct dlock_client *leg;
	int k, e, err = 0, any = 0;

	if (dlock__watching(sp->c, pat)) {
		/* watched before the client routed */
		any = 1;
		if ((err = dlock__watch_at(sp->c, DLOCK__UNWATCH, pat, NULL)) <
		    0)
			snprintf(why, sizeof(why), "%s", dlock_last_error());
	}
	for (k = 0; k < sp->n; k++) {
		/* a leg never made watches nothing */
		leg = dlock__span_leg(sp->c, sp->part[k].i, 0, &e);
		if (!leg) {
			if (e < 0)
				return e; /* closing */
			continue;
		}
		if (dlock__watching(leg, pat)) {
			any = 1;
			e = dlock__watch_at(leg, DLOCK__UNWATCH, pat, NULL);
			if (e < 0 && err == 0) {
				err = e;
				snprintf(why, sizeof(why), "%s",
					 dlock_last_error());
			}
		}
		dlock__router_unuse(sp->c, 1);
	}
	dlock__last_error_set(why);
	return any ? err : DLOCK_EINVAL;
}

int dlock__span_watch(struct dlock_client *c, enum dlock__op op,
		      const char *pat, int64_t *holders)
{
	struct span sp;
	int err;

	/* UNWATCH: every partition known, served or not (one that lost its
	 * slots may still watch) */
	if ((err = span_begin(c, NULL, op == DLOCK__UNWATCH, &sp)) < 0)
		return err;
	if (op == DLOCK__WATCH)
		err = watch_every(&sp, pat, holders);
	else
		err = unwatch_every(&sp, pat);
	span_end(&sp);
	return err;
}
