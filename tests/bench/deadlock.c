/* SPDX-License-Identifier: MIT */
/*
 * deadlock.c -- make bench-deadlock: what the deadlock check costs a LOCK
 * that would wait, on the lock table alone (no sockets, no store), as
 * dlockd runs it on its only loop.
 *
 *   deadlock [REPS]    (default 2000)
 *
 * Each row is a ring of owners o0 .. o(n-1), oi holding Li and waiting
 * for L(i+1) but the last, which asks for L0 (closing the ring) REPS
 * times; with the check off the same LOCK is timed too, and CANCELled
 * after each time when it queues. The rows:
 *
 *   - no cycle: the one holder of L0 waits for nothing (the common
 *     case); or one more owner, holding nothing, waits at the end of a
 *     chain (the walk follows it all), up to the longest the walk sees;
 *   - rings, refused (NO DEADLOCK changes nothing: the same LOCK again
 *     costs the same walk), up to the largest the walk sees whole;
 *   - one owner more (the walk gives up at DL_DEADLOCK_WALK_MAX: the
 *     worst case, the LOCK waits), and a far larger ring.
 *
 * Prints per row: the outcome (refused or waits; capped when the walk
 * gave up), the median and longest LOCK with the check, and without it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/locktab/locktab.h"

#define TICK 10
/* The longest chain and ring the walk sees whole: each owner costs it
 * four steps (its session, its waiter, the lock's holder, and the next
 * owner's session); found by trial, one more and it gives up. */
#define CHAIN_MAX (DL_DEADLOCK_WALK_MAX / 4)
#define RING_MAX  (DL_DEADLOCK_WALK_MAX / 4)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t fake_now(void *ctx)
{
	(void)ctx;
	return 1000000;
}

static void on_event(struct dl_session *s, const struct dl_event *ev, void *ctx)
{
	(void)s;
	(void)ev;
	(void)ctx;
}

static struct dl_str str(const char *s)
{
	return (struct dl_str){s, strlen(s)};
}

static void die(const char *what, int n)
{
	fprintf(stderr, "deadlock: %s (%d)\n", what, n);
	exit(1);
}

/* A ring of n owners (ring = 0: a chain, nobody waits): all but the last
 * wait. Returns the table; ss[] gets the sessions. */
static struct dl_locktab *ring(struct dl_session *ss, int n)
{
	struct dl_locktab_hooks hooks = {fake_now, on_event, NULL, NULL};
	struct dl_locktab_limits lim = {1000000, 1000000, 0, 0};
	struct dl_locktab *t = dl_locktab_new(&hooks, &lim, TICK, 42);
	struct dl_acquire a = {.ttl_ms = 600000, .wait_ms = DL_WAIT_INF};
	char owner[32], name[32];
	struct dl_result r;
	int i;

	if (!t)
		die("no table", 0);
	for (i = 0; i < n; i++) {
		snprintf(owner, sizeof(owner), "owner-%d", i);
		snprintf(name, sizeof(name), "lock-%d", i);
		if (dl_session_init(t, &ss[i], str(owner), NULL))
			die("session", i);
		a.name = str(name);
		if (dl_locktab_acquire(t, &ss[i], &a, &r) ||
		    r.outcome != DL_GRANTED)
			die("grant", i);
	}
	for (i = 0; i + 1 < n; i++) {
		snprintf(name, sizeof(name), "lock-%d", i + 1);
		a.name = str(name);
		if (dl_locktab_acquire(t, &ss[i], &a, &r) ||
		    r.outcome != DL_QUEUED)
			die("queue", i);
	}
	return t;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* ns per LOCK of lock-0 by s: the median, and the longest (*max); its
 * outcome in *out. One LOCK first, untimed: the table's first check
 * allocates the walk's memory. The median, as the machine is shared:
 * the longest is mostly other processes. */
static uint64_t time_lock(struct dl_locktab *t, struct dl_session *s, int reps,
			  int *out, uint64_t *max)
{
	struct dl_acquire a = {.name = str("lock-0"),
			       .ttl_ms = 600000,
			       .wait_ms = DL_WAIT_INF};
	uint64_t *ns = malloc((size_t)reps * sizeof(*ns)), t0, med;
	struct dl_result r, c;
	int i;

	if (!ns)
		die("no memory", reps);
	for (i = -1; i < reps; i++) {
		t0 = now_ns();
		if (dl_locktab_acquire(t, s, &a, &r))
			die("lock", i);
		if (i >= 0)
			ns[i] = now_ns() - t0;
		*out = r.outcome;
		if (r.outcome == DL_QUEUED)
			dl_locktab_cancel(t, s, a.name, &c);
	}
	qsort(ns, (size_t)reps, sizeof(*ns), cmp_u64);
	med = ns[reps / 2];
	*max = ns[reps - 1];
	free(ns);
	return med;
}

/* closing: the last owner of the chain asks (a ring); else one more
 * owner, holding nothing, waits at the chain's end (no cycle). */
static void row(const char *what, int n, int closing, int reps)
{
	struct dl_session *ss = calloc((size_t)n + 1, sizeof(*ss));
	struct dl_session *asker = &ss[closing ? n - 1 : n];
	struct dl_locktab *t;
	uint64_t capped, max, max_off, on, off;
	int out, out_off, i;

	if (!ss)
		die("no memory", n);
	t = ring(ss, n);
	if (!closing && dl_session_init(t, asker, str("asker"), NULL))
		die("session", n);
	on = time_lock(t, asker, reps, &out, &max);
	capped = dl_locktab_stats(t)->walks_capped;
	dl_locktab_deadlock_check(t, 0);
	off = time_lock(t, asker, reps, &out_off, &max_off);
	if (out_off != DL_QUEUED)
		die("without the check, the LOCK did not wait", n);
	printf("%-26s %6d owners  %-7s %s  with %6.1f us (max %6.1f)  "
	       "without %4.1f us (max %6.1f)\n",
	       what, n, out == DL_DEADLOCK ? "refused" : "waits",
	       capped ? "capped" : "      ", (double)on / 1e3,
	       (double)max / 1e3, (double)off / 1e3, (double)max_off / 1e3);
	for (i = 0; i < n + !closing; i++)
		dl_session_close(t, &ss[i]);
	dl_locktab_free(t);
	free(ss);
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 2000;

	if (reps <= 0)
		die("REPS must be a positive number", reps);
	printf("deadlock check, DL_DEADLOCK_WALK_MAX %d steps, %d LOCKs a "
	       "row\n",
	       DL_DEADLOCK_WALK_MAX, reps);
	row("no cycle, holder free", 1, 0, reps);
	row("no cycle, chain", 100, 0, reps);
	row("no cycle, longest chain", CHAIN_MAX, 0, reps);
	row("no cycle, chain past cap", CHAIN_MAX + 1, 0, reps);
	row("ring, refused", 2, 1, reps);
	row("ring, refused", 10, 1, reps);
	row("ring, refused", 100, 1, reps);
	row("largest ring seen whole", RING_MAX, 1, reps);
	row("ring past the cap", RING_MAX + 1, 1, reps);
	row("ring past the cap", 100000, 1, reps);
	return 0;
}
