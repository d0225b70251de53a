/* SPDX-License-Identifier: MIT */
/*
 * test_route.c -- libdlock and dlock(1) against a partitioned service:
 * one real Redis and three real daemons, partitions p0, p1 and p2 (the
 * map: p0 0-5460, p1 5461-10922, p2 10923-16383), and clients that know
 * only p0's daemon (PROTOCOL.md, Partitions; client/lib/dlock_route.c):
 *
 *   - each name goes to its partition, and its lease stays there:
 *     tokens, refresh, check and unlock through the lease;
 *   - a multi-lock under one {tag} is granted by its partition, one
 *     across partitions refused with the server's BAD_ARG;
 *   - MOVED is followed once the map changed under the client, and a
 *     client that met no map at first becomes a router on a MOVED;
 *   - a daemon without partitions: MAP says 0, the client routes
 *     nothing;
 *   - the slot function's vectors (Redis's CLUSTER KEYSLOT);
 *   - dlock admin map and dlock admin partition move;
 *   - a PARTITION MOVE carries the slot's locks: a lease follows its name
 *     (its renewals, refresh, value, unlock) with its token, and a
 *     waiter its place in the queue;
 *   - what spans partitions (client/lib/dlock_span.c): dlock_locks()
 *     lists every partition's locks, merged and paged; dlock_stats_all()
 *     every partition's STATS; a prefix watch sees every partition; a
 *     partition that cannot be reached fails them; dlock list and dlock
 *     stats --all show them.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/lib/dlock.h"
#include "proto/slot.h"
#include "tests/harness.h"

#define NPARTS	3
#define OUT_MAX 65536 /* dlock stats --all of three daemons */

static struct h_redis r;
static struct h_daemon d[NPARTS];

static void start(void)
{
	h_parts_start(d, NPARTS, &r);
}

static void stop(void)
{
	h_parts_stop(d, NPARTS, &r);
}

TestSuite(route, .init = start, .fini = stop, .timeout = 90);

/* The map daemon i serves (h_map_wait). */
static const char *map_of(int i, uint64_t epoch, const char *needle)
{
	return h_map_wait(d[i].port, epoch, needle);
}

/* "OK PARTITION epoch=<e> to=<p>" from daemon i: e */
static uint64_t move_slots(int i, const char *slots, const char *to)
{
	struct h_client *c = h_connect(d[i].port);
	char *l = h_call(c, "PARTITION MOVE %s %s", slots, to);
	uint64_t e;

	cr_assert(h_starts(l, "OK PARTITION epoch="), "%s", l);
	e = h_kv_u64(l, "epoch");
	h_close(c);
	return e;
}

/* The map made (PARTITION INIT on p0, by the caller), every daemon
 * registered, then p1 and p2 given their thirds: the map's epoch once
 * every daemon serves it. */
static uint64_t spread(void)
{
	char part[80];
	uint64_t e;
	int i, k;

	for (k = 0; k < NPARTS; k++) {
		snprintf(part, sizeof(part), "part p%d addrs=127.0.0.1:%d ", k,
			 d[k].port);
		map_of(0, 1, part);
	}
	move_slots(0, "5461-10922", "p1");
	e = move_slots(0, "10923-16383", "p2");
	for (i = 0; i < NPARTS; i++)
		map_of(i, e, "slots p2 10923-16383");
	return e;
}

/* The spec's service: p0 0-5460, p1 5461-10922, p2 10923-16383. */
static uint64_t partitioned(void)
{
	struct h_client *c = h_connect(d[0].port);

	cr_assert_str_eq(h_call(c, "PARTITION INIT"), "OK PARTITION epoch=1");
	h_close(c);
	return spread();
}

/* A client whose server list is p0's daemon only. */
static dlock_client *client(void)
{
	struct dlock_options o;
	char servers[64];
	dlock_client *c;
	int err;

	snprintf(servers, sizeof(servers), "127.0.0.1:%d", d[0].port);
	dlock_options_init(&o);
	o.servers = servers;
	err = dlock_connect(&o, &c);
	cr_assert_eq(err, 0, "connect: %s (%s)", dlock_strerror(err),
		     dlock_last_error());
	return c;
}

/* STATUS <name> on daemon i: the lease's line (held, token, owner), or
 * that daemon's NO MOVED to partition `to`. */
static void expect_held_on(int i, const char *name, uint64_t token,
			   const char *owner)
{
	struct h_client *raw = h_connect(d[i].port);

	h_expect_held(raw, name, owner, token);
	h_close(raw);
}

static void expect_moved(int i, const char *name, int to)
{
	struct h_client *raw = h_connect(d[i].port);
	char want[32];
	char *l = h_call(raw, "STATUS %s", name);

	snprintf(want, sizeof(want), "NO MOVED p%d ", to);
	cr_assert(h_starts(l, want), "daemon p%d, STATUS %s: %s", i, name, l);
	h_close(raw);
}

static void expect_free_on(int i, const char *name)
{
	struct h_client *raw = h_connect(d[i].port);

	h_expect_status(raw, name, "free", 0, NULL, H_ANY_WAITERS);
	h_close(raw);
}

Test(route, each_name_goes_to_its_partition_and_its_lease_stays_there)
{
	static const char *const names[NPARTS] = {"bar", "qux", "foo"};
	uint64_t epoch = partitioned(), token, cur;
	dlock_client *c = client();
	dlock_lease *l[NPARTS];
	struct dlock_status st;
	int64_t left;
	int i, k;

	cr_assert_eq(dlock_map_epoch(c), epoch);
	for (i = 0; i < NPARTS; i++) {
		cr_assert_eq(dlock_lock(c, names[i], 30000, 0, &l[i]), 0,
			     "%s: %s", names[i], dlock_last_error());
		token = dlock_lease_token(l[i]);
		cr_assert(token > 0);
		expect_held_on(i, names[i], token, dlock_owner(c));
		for (k = 0; k < NPARTS; k++)
			if (k != i)
				expect_moved(k, names[i], i);
		/* the questions go where the lease is */
		cr_assert_eq(dlock_status(c, names[i], &st), 0);
		cr_assert(st.held && st.token == token);
		cr_assert_eq(dlock_check(c, names[i], token, &left, &cur), 0);
		cr_assert(left > 0);
	}
	/* the lease's own calls go through its partition's connection */
	for (i = 0; i < NPARTS; i++) {
		cr_assert_eq(dlock_refresh(c, l[i], 20000), 0, "%s: %s",
			     names[i], dlock_last_error());
		cr_assert(dlock_lease_valid(l[i]));
		cr_assert_eq(dlock_unlock(c, l[i]), 0, "%s: %s", names[i],
			     dlock_last_error());
		expect_free_on(i, names[i]);
	}
	/* tokens of one partition grow; the receivers' stay above p0's */
	cr_assert_eq(dlock_lock(c, "qux", 30000, 0, &l[0]), 0);
	token = dlock_lease_token(l[0]);
	cr_assert_eq(dlock_unlock(c, l[0]), 0);
	cr_assert_eq(dlock_lock(c, "qux", 30000, 0, &l[0]), 0);
	cr_assert_gt(dlock_lease_token(l[0]), token);
	cr_assert_eq(dlock_unlock(c, l[0]), 0);
	dlock_close(c);
}

Test(route, a_tagged_multi_lock_is_its_partitions_one_across_is_refused)
{
	const char *tagged[2] = {"{qux}a", "{qux}b"};
	const char *across[2] = {"bar", "qux"};
	dlock_lease *out[2];
	struct dlock_lock_all_options o;
	dlock_client *c;
	int err;

	partitioned();
	c = client();
	dlock_lock_all_options_init(&o);
	o.ttl_ms = 30000;
	o.wait_ms = 0;
	cr_assert_eq(dlock_acquire_all(c, tagged, 2, &o, out), 0, "%s",
		     dlock_last_error());
	expect_held_on(1, "{qux}a", dlock_lease_token(out[0]), dlock_owner(c));
	expect_held_on(1, "{qux}b", dlock_lease_token(out[1]), dlock_owner(c));
	cr_assert_eq(dlock_release_all(c, out, 2), 0);
	expect_free_on(1, "{qux}a");
	err = dlock_acquire_all(c, across, 2, &o, out);
	cr_assert_eq(err, DLOCK_EINVAL, "%s (%s)", dlock_strerror(err),
		     dlock_last_error());
	cr_assert(strstr(dlock_last_error(), "BAD_ARG") &&
			  strstr(dlock_last_error(), "several partitions"),
		  "%s", dlock_last_error());
	cr_assert(out[0] == NULL && out[1] == NULL);
	dlock_close(c);
}

Test(route, moved_is_followed_after_the_map_changed)
{
	uint64_t epoch = partitioned(), e;
	dlock_client *c = client();
	struct dlock_status st;
	dlock_lease *l;

	/* the client routes foo to p2, and has its connection there */
	cr_assert_eq(dlock_status(c, "foo", &st), 0, "%s", dlock_last_error());
	cr_assert(!st.held);
	cr_assert_eq(dlock_map_epoch(c), epoch);
	/* p2 gives foo's slot to p1 */
	cr_assert_eq(dl_key_slot("foo", 3), 12182u);
	e = move_slots(2, "12182", "p1");
	cr_assert_gt(e, epoch);
	map_of(1, e, "slots p1 5461-10922,12182");
	map_of(2, e, NULL);
	cr_assert_eq(dlock_lock(c, "foo", 30000, 0, &l), 0, "%s",
		     dlock_last_error());
	cr_assert_eq(dlock_map_epoch(c), e);
	expect_held_on(1, "foo", dlock_lease_token(l), dlock_owner(c));
	expect_moved(2, "foo", 1);
	cr_assert_eq(dlock_unlock(c, l), 0);
	expect_free_on(1, "foo");
	dlock_close(c);
}

Test(route, a_client_that_met_no_map_routes_on_the_first_moved)
{
	dlock_client *c;
	dlock_lease *l;
	uint64_t epoch;

	/* no map yet: MAP says 0, the client routes nothing */
	c = client();
	cr_assert_eq(dlock_map_epoch(c), 0);
	epoch = partitioned();
	cr_assert_eq(dlock_lock(c, "qux", 30000, 0, &l), 0, "%s",
		     dlock_last_error());
	cr_assert_eq(dlock_map_epoch(c), epoch);
	expect_held_on(1, "qux", dlock_lease_token(l), dlock_owner(c));
	cr_assert_eq(dlock_unlock(c, l), 0);
	expect_free_on(1, "qux");
	dlock_close(c);
}

/* Threads of one router: the legs are made once, whoever asks first. */
struct worker {
	dlock_client *c;
	int id;
	int failed;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	char name[32];
	dlock_lease *l;
	int i;

	for (i = 0; i < 30; i++) {
		snprintf(name, sizeof(name), "w%d-%d", w->id, i);
		if (dlock_lock(w->c, name, 30000, 5000, &l) != 0 ||
		    dlock_unlock(w->c, l) != 0)
			w->failed++;
	}
	return NULL;
}

Test(route, threads_share_the_partitions_connections)
{
	struct worker w[4];
	pthread_t t[4];
	dlock_client *c;
	int i;

	partitioned();
	c = client();
	for (i = 0; i < 4; i++) {
		w[i] = (struct worker){.c = c, .id = i};
		cr_assert_eq(pthread_create(&t[i], NULL, work, &w[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(w[i].failed, 0, "worker %d", i);
	}
	dlock_close(c);
}

static void *wait_qux(void *arg)
{
	struct worker *w = arg;
	dlock_lease *l;

	w->failed = dlock_lock(w->c, "qux", 30000, DLOCK_WAIT_FOREVER, &l);
	return NULL;
}

Test(route, close_ends_a_call_that_waits_in_a_partition)
{
	struct h_client *raw;
	struct worker w;
	pthread_t t;

	partitioned();
	raw = h_connect(d[1].port);
	h_lock(raw, "qux", "ttl=30000");
	w = (struct worker){.c = client()};
	cr_assert_eq(pthread_create(&t, NULL, wait_qux, &w), 0);
	/* it waits in p1's queue */
	for (uint64_t end = h_now_ms() + 5000;;) {
		const char *l = h_call(raw, "STATUS qux");

		if (h_kv_u64(l, "waiters") == 1)
			break;
		cr_assert(h_now_ms() < end, "%s", l);
		h_sleep_ms(20);
	}
	dlock_close(w.c);
	pthread_join(t, NULL);
	cr_assert_eq(w.failed, DLOCK_ECANCELED, "%s", dlock_strerror(w.failed));
	h_close(raw);
}

/* on_lost: who it was called with, and for which lease */
struct lost {
	dlock_client *c;
	const dlock_lease *lease;
	_Atomic int n;
};

static void on_lost(dlock_client *c, const dlock_lease *lease,
		    enum dlock_lost_reason why, void *arg)
{
	struct lost *lo = arg;

	(void)why;
	lo->c = c;
	lo->lease = lease;
	atomic_fetch_add(&lo->n, 1);
}

Test(route, watches_and_callbacks_of_a_partition_come_to_the_client)
{
	struct dlock_watch_event ev;
	struct dlock_options o;
	struct h_client *raw;
	struct lost lo = {0};
	char servers[64];
	dlock_client *c;
	dlock_lease *l;
	int64_t holders = -1;
	uint64_t end;

	partitioned();
	snprintf(servers, sizeof(servers), "127.0.0.1:%d", d[0].port);
	dlock_options_init(&o);
	o.servers = servers;
	o.on_lost = on_lost;
	o.arg = &lo;
	cr_assert_eq(dlock_connect(&o, &c), 0, "%s", dlock_last_error());
	/* a name's watch is its partition's (qux: p1) */
	cr_assert_eq(dlock_watch(c, "qux", &holders), 0, "%s",
		     dlock_last_error());
	cr_assert_eq(holders, 0);
	raw = h_connect(d[1].port);
	h_lock(raw, "qux", "ttl=30000");
	cr_assert_eq(dlock_watch_next(c, &ev, 5000), 0);
	cr_assert_eq(ev.kind, DLOCK_WATCH_GRANTED);
	cr_assert_str_eq(ev.name, "qux");
	h_close(raw); /* its lease stays, until its TTL */
	cr_assert_eq(dlock_unwatch(c, "qux"), 0, "%s", dlock_last_error());
	/* a lease of p2 broken there: on_lost gets this client */
	cr_assert_eq(dlock_lock(c, "foo", 30000, 0, &l), 0, "%s",
		     dlock_last_error());
	raw = h_connect(d[2].port);
	cr_assert(h_starts(h_call(raw, "BREAK foo %" PRIu64 " reason=test",
				  dlock_lease_token(l)),
			   "OK"),
		  "%s", raw->line);
	h_close(raw);
	for (end = h_now_ms() + 5000; !atomic_load(&lo.n);) {
		cr_assert(h_now_ms() < end, "on_lost was not called");
		h_sleep_ms(10);
	}
	cr_assert(lo.c == c, "on_lost got another client than the one made");
	cr_assert(lo.lease == l);
	cr_assert(!dlock_lease_valid(l));
	cr_assert_str_neq(dlock_lease_broken_by(l), "");
	dlock_unlock(c, l);
	dlock_close(c);
}

/* ---- a move carries the slot's locks ------------------------------------- */

/* bar (and {bar}...) is p0's: slot 5061 */
#define BAR_SLOT "5061"

/* Daemon i holds `name` for lease `token`: once the move that brings it
 * there is done (the partition answers UNAVAILABLE while it takes the
 * locks over). */
static void wait_held_on(int i, const char *name, uint64_t token,
			 const char *owner)
{
	struct h_client *raw = h_connect(d[i].port);
	uint64_t end = h_now_ms() + 15000;
	const char *l;

	for (;;) {
		l = h_call(raw, "STATUS %s", name);
		if (h_starts(l, "OK STATUS") && h_kv_u64(l, "token") == token)
			break;
		cr_assert(h_now_ms() < end, "daemon p%d, STATUS %s: %s", i,
			  name, l);
		h_sleep_ms(20);
	}
	h_close(raw);
	expect_held_on(i, name, token, owner);
}

/* p0 gives bar's slot to p1: the map's new epoch, once p1 serves it. */
static uint64_t move_bar(uint64_t epoch)
{
	uint64_t e;

	cr_assert_eq(dl_key_slot("bar", 3), 5061u);
	e = move_slots(0, BAR_SLOT, "p1");
	cr_assert_gt(e, epoch);
	map_of(1, e, NULL);
	return e;
}

static dlock_client *client_with(struct dlock_options *o)
{
	char servers[64];
	dlock_client *c;
	int err;

	snprintf(servers, sizeof(servers), "127.0.0.1:%d", d[0].port);
	o->servers = servers;
	err = dlock_connect(o, &c);
	cr_assert_eq(err, 0, "connect: %s (%s)", dlock_strerror(err),
		     dlock_last_error());
	return c;
}

static void count_lost(dlock_client *c, const dlock_lease *lease,
		       enum dlock_lost_reason why, void *arg)
{
	(void)c, (void)lease, (void)why;
	atomic_fetch_add((_Atomic int *)arg, 1);
}

Test(route, a_renewed_lease_survives_a_move_of_its_slot_with_its_token)
{
	uint64_t epoch = partitioned(), token;
	struct dlock_options o;
	dlock_client *c, *other = client();
	dlock_lease *l, *l2;
	_Atomic int lost = 0;
	int err;

	dlock_options_init(&o);
	o.on_lost = count_lost;
	o.arg = &lost;
	c = client_with(&o);
	/* 4 s: a move on a loaded machine (make check runs three suites
	 * at once, sanitized) may keep renewals waiting a second or two */
	cr_assert_eq(dlock_lock(c, "bar", 4000, 0, &l), 0, "%s",
		     dlock_last_error());
	token = dlock_lease_token(l);
	expect_held_on(0, "bar", token, dlock_owner(c));
	move_bar(epoch);
	wait_held_on(1, "bar", token, dlock_owner(c));
	expect_moved(0, "bar", 1);
	/* two TTLs: only renewals that go to p1 keep it */
	h_sleep_ms(8000);
	cr_assert_eq(atomic_load(&lost), 0, "on_lost was called");
	cr_assert(dlock_lease_valid(l));
	expect_held_on(1, "bar", token, dlock_owner(c));
	err = dlock_trylock(other, "bar", 2000, &l2);
	cr_assert_eq(err, DLOCK_EBUSY, "%s (%s)", dlock_strerror(err),
		     dlock_last_error());
	cr_assert_eq(dlock_refresh(c, l, 2000), 0, "%s", dlock_last_error());
	cr_assert_eq(dlock_unlock(c, l), 0, "%s", dlock_last_error());
	expect_free_on(1, "bar");
	cr_assert_eq(dlock_trylock(other, "bar", 2000, &l2), 0, "%s",
		     dlock_last_error());
	cr_assert_gt(dlock_lease_token(l2), token);
	cr_assert_eq(dlock_unlock(other, l2), 0);
	cr_assert_eq(atomic_load(&lost), 0, "on_lost was called");
	dlock_close(other);
	dlock_close(c);
}

Test(route, refresh_value_and_unlock_of_a_lease_follow_its_moved_slot)
{
	uint64_t epoch = partitioned(), t1, t2;
	struct dlock_options o;
	struct dlock_status st;
	dlock_lease *l1, *l2;
	dlock_client *c;

	/* no renewal: the caller's own calls are the first told MOVED */
	dlock_options_init(&o);
	o.renew = 0;
	c = client_with(&o);
	cr_assert_eq(dlock_lock(c, "bar", 30000, 0, &l1), 0, "%s",
		     dlock_last_error());
	cr_assert_eq(dlock_lock(c, "{bar}v", 30000, 0, &l2), 0, "%s",
		     dlock_last_error());
	t1 = dlock_lease_token(l1);
	t2 = dlock_lease_token(l2);
	move_bar(epoch);
	wait_held_on(1, "bar", t1, dlock_owner(c));
	wait_held_on(1, "{bar}v", t2, dlock_owner(c));
	/* a value change, then a refresh, of the lease p0 gave away */
	cr_assert_eq(dlock_proclaim(c, l1, "moved"), 0, "%s",
		     dlock_last_error());
	cr_assert_eq(dlock_refresh(c, l1, 20000), 0, "%s", dlock_last_error());
	cr_assert_eq(dlock_status(c, "bar", &st), 0, "%s", dlock_last_error());
	cr_assert(st.held);
	cr_assert_eq(st.token, t1);
	cr_assert_str_eq(st.value, "moved");
	cr_assert(dlock_lease_valid(l1));
	/* an unlock of the other */
	cr_assert_eq(dlock_unlock(c, l2), 0, "%s", dlock_last_error());
	expect_free_on(1, "{bar}v");
	cr_assert_eq(dlock_unlock(c, l1), 0, "%s", dlock_last_error());
	expect_free_on(1, "bar");
	dlock_close(c);
}

struct waiter {
	dlock_client *c;
	dlock_lease *l;
	int err;
};

static void *wait_bar(void *arg)
{
	struct waiter *w = arg;

	w->err = dlock_lock(w->c, "bar", 30000, 60000, &w->l);
	return NULL;
}

Test(route, a_waiter_follows_its_name_and_is_granted_after_the_holder)
{
	uint64_t epoch = partitioned(), token;
	struct waiter w = {.c = client()};
	dlock_client *a = client();
	struct h_client *raw;
	dlock_lease *l;
	pthread_t t;

	cr_assert_eq(dlock_lock(a, "bar", 30000, 0, &l), 0, "%s",
		     dlock_last_error());
	token = dlock_lease_token(l);
	cr_assert_eq(pthread_create(&t, NULL, wait_bar, &w), 0);
	/* it waits in p0's queue */
	raw = h_connect(d[0].port);
	for (uint64_t end = h_now_ms() + 5000;;) {
		const char *line = h_call(raw, "STATUS bar");

		if (h_kv_u64(line, "waiters") == 1)
			break;
		cr_assert(h_now_ms() < end, "%s", line);
		h_sleep_ms(20);
	}
	h_close(raw);
	move_bar(epoch);
	wait_held_on(1, "bar", token, dlock_owner(a));
	/* the holder's unlock goes to p1 through its lease, and the wait
	 * went there too */
	cr_assert_eq(dlock_unlock(a, l), 0, "%s", dlock_last_error());
	pthread_join(t, NULL);
	cr_assert_eq(w.err, 0, "%s", dlock_strerror(w.err));
	cr_assert_gt(dlock_lease_token(w.l), token);
	expect_held_on(1, "bar", dlock_lease_token(w.l), dlock_owner(w.c));
	cr_assert_eq(dlock_unlock(w.c, w.l), 0, "%s", dlock_last_error());
	expect_free_on(1, "bar");
	dlock_close(a);
	dlock_close(w.c);
}

/* ---- what spans partitions ---------------------------------------------- */

/* span/a .. span/l: each partition has some (span_names asserts it) */
#define SPAN_N 12

/* The partition of a name by the spec's map (partitioned()). */
static int part_of(const char *name)
{
	unsigned s = dl_key_slot(name, strlen(name));

	return s <= 5460 ? 0 : s <= 10922 ? 1 : 2;
}

/* span/a .. span/l, in byte order; at least two in each partition. */
static void span_names(char names[SPAN_N][16])
{
	int i, in[NPARTS] = {0};

	for (i = 0; i < SPAN_N; i++) {
		snprintf(names[i], 16, "span/%c", 'a' + i);
		in[part_of(names[i])]++;
	}
	for (i = 0; i < NPARTS; i++)
		cr_assert_geq(in[i], 2, "partition p%d has %d of the names", i,
			      in[i]);
}

/* c takes every name of span_names: their tokens into token[]. */
static void hold_span(dlock_client *c, char names[SPAN_N][16],
		      uint64_t token[SPAN_N], dlock_lease *l[SPAN_N])
{
	int i;

	span_names(names);
	for (i = 0; i < SPAN_N; i++) {
		cr_assert_eq(dlock_lock(c, names[i], 60000, 0, &l[i]), 0,
			     "%s: %s", names[i], dlock_last_error());
		token[i] = dlock_lease_token(l[i]);
	}
}

/* What dlock_locks gave, in the order given. */
struct listing {
	int n;
	char name[SPAN_N + 4][DL_NAME_MAX + 1];
	struct dlock_status st[SPAN_N + 4];
};

static void on_listed(const char *name, const struct dlock_status *st,
		      void *arg)
{
	struct listing *ls = arg;

	cr_assert_lt(ls->n, SPAN_N + 4, "more locks given than exist");
	snprintf(ls->name[ls->n], sizeof(ls->name[0]), "%s", name);
	ls->st[ls->n++] = *st;
}

Test(route, locks_lists_every_partitions_locks_in_order_and_pages_each_once)
{
	char names[SPAN_N][16];
	uint64_t token[SPAN_N], more = 99;
	struct listing all = {0}, page;
	dlock_client *holder, *lister;
	dlock_lease *l[SPAN_N], *other;
	int i, k, seen, pages;

	partitioned();
	holder = client();
	lister = client(); /* knows p0's daemon only */
	hold_span(holder, names, token, l);
	/* a lock outside the prefix is not listed */
	cr_assert_eq(dlock_lock(holder, "other", 60000, 0, &other), 0);
	cr_assert_eq(dlock_locks(lister, "span/", NULL, 0, 0, on_listed, &all,
				 &more),
		     0, "%s", dlock_last_error());
	cr_assert_eq(all.n, SPAN_N);
	cr_assert_eq(more, 0);
	for (i = 0; i < SPAN_N; i++) {
		cr_assert_str_eq(all.name[i], names[i]);
		cr_assert(all.st[i].held, "%s", names[i]);
		cr_assert_eq(all.st[i].token, token[i], "%s", names[i]);
		cr_assert_str_eq(all.st[i].owner, dlock_owner(holder));
	}
	/* pages of 5: each name once, in order, more counting the rest */
	for (seen = 0, pages = 0; seen < SPAN_N; pages++) {
		memset(&page, 0, sizeof(page));
		cr_assert_eq(dlock_locks(lister, "span/",
					 seen ? names[seen - 1] : NULL, 5, 0,
					 on_listed, &page, &more),
			     0, "%s", dlock_last_error());
		k = SPAN_N - seen < 5 ? SPAN_N - seen : 5;
		cr_assert_eq(page.n, k, "page %d", pages);
		for (i = 0; i < page.n; i++)
			cr_assert_str_eq(page.name[i], names[seen + i]);
		seen += page.n;
		cr_assert_eq(more, (uint64_t)(SPAN_N - seen), "page %d", pages);
	}
	cr_assert_eq(pages, 3);
	/* the server's default page (100) holds them all */
	memset(&page, 0, sizeof(page));
	cr_assert_eq(
		dlock_locks(lister, NULL, NULL, 0, 0, on_listed, &page, &more),
		0);
	cr_assert_eq(page.n, SPAN_N + 1);
	cr_assert_str_eq(page.name[0], "other");
	cr_assert_eq(more, 0);
	dlock_close(lister);
	dlock_close(holder);
}

Test(route, locks_by_waiters_merges_the_partitions_most_waited_for_first)
{
	struct h_client *w[3];
	struct listing ls = {0};
	dlock_client *holder, *lister;
	dlock_lease *l[2];
	uint64_t more = 99;
	int i;

	partitioned();
	holder = client();
	lister = client();
	cr_assert_eq(part_of("span/b"), 1);
	cr_assert_eq(part_of("span/c"), 2);
	cr_assert_eq(dlock_lock(holder, "span/b", 60000, 0, &l[0]), 0);
	cr_assert_eq(dlock_lock(holder, "span/c", 60000, 0, &l[1]), 0);
	/* two wait for span/c (p2), one for span/b (p1) */
	for (i = 0; i < 3; i++) {
		w[i] = h_connect(d[i < 2 ? 2 : 1].port);
		cr_assert(h_starts(h_call(w[i], "LOCK %s ttl=30000 wait=60000",
					  i < 2 ? "span/c" : "span/b"),
				   "OK QUEUED"),
			  "%s", w[i]->line);
	}
	cr_assert_eq(
		dlock_locks(lister, NULL, NULL, 10, 1, on_listed, &ls, &more),
		0, "%s", dlock_last_error());
	cr_assert_eq(ls.n, 2);
	cr_assert_str_eq(ls.name[0], "span/c");
	cr_assert_eq(ls.st[0].waiters, 2);
	cr_assert_str_eq(ls.name[1], "span/b");
	cr_assert_eq(ls.st[1].waiters, 1);
	cr_assert_eq(more, 0);
	/* the first only: more counts the other */
	memset(&ls, 0, sizeof(ls));
	cr_assert_eq(
		dlock_locks(lister, NULL, NULL, 1, 1, on_listed, &ls, &more), 0,
		"%s", dlock_last_error());
	cr_assert_eq(ls.n, 1);
	cr_assert_str_eq(ls.name[0], "span/c");
	cr_assert_eq(more, 1);
	for (i = 0; i < 3; i++)
		h_close(w[i]);
	dlock_close(lister);
	dlock_close(holder);
}

/* What dlock_stats_all gave: partition_slots of each partition, and
 * the lines of each. */
struct all_stats {
	char part[NPARTS + 1][8];
	uint64_t slots[NPARTS + 1];
	int lines[NPARTS + 1];
	int n;
};

static void on_part_stat(const char *partition, const char *key,
			 const char *value, void *arg)
{
	struct all_stats *as = arg;
	int k;

	for (k = 0; k < as->n; k++)
		if (strcmp(as->part[k], partition) == 0)
			break;
	if (k == as->n) {
		cr_assert_lt(as->n, NPARTS + 1, "a fourth partition: %s",
			     partition);
		cr_assert_lt(strlen(partition), sizeof(as->part[0]));
		strcpy(as->part[as->n++], partition);
	}
	as->lines[k]++;
	if (strcmp(key, "partition_slots") == 0)
		as->slots[k] = strtoull(value, NULL, 10);
}

Test(route, stats_all_gives_every_partitions_daemon)
{
	static const uint64_t slots[NPARTS] = {5461, 5462, 5461};
	struct all_stats as = {0};
	char id[8];
	dlock_client *c;
	int k;

	partitioned();
	c = client();
	cr_assert_eq(dlock_stats_all(c, on_part_stat, &as), 0, "%s",
		     dlock_last_error());
	cr_assert_eq(as.n, NPARTS);
	for (k = 0; k < NPARTS; k++) {
		snprintf(id, sizeof(id), "p%d", k);
		cr_assert_str_eq(as.part[k], id);
		cr_assert_gt(as.lines[k], 10, "%s", id);
		/* each partition's own daemon said it */
		cr_assert_eq(as.slots[k], slots[k], "%s", id);
	}
	cr_assert_eq(dlock_stats_all(NULL, on_part_stat, &as), DLOCK_EINVAL);
	cr_assert_eq(dlock_stats_all(c, NULL, &as), DLOCK_EINVAL);
	dlock_close(c);
}

static int next_event(dlock_client *c, struct dlock_watch_event *ev)
{
	int err = dlock_watch_next(c, ev, 10000);

	cr_assert_eq(err, 0, "%s", dlock_strerror(err));
	return ev->kind;
}

Test(route, a_prefix_watch_sees_a_grant_on_every_partition)
{
	static const char *const names[NPARTS] = {"span/a", "span/b", "span/c"};
	static const char *const late[NPARTS] = {"span/d", "span/f", "span/g"};
	struct dlock_watch_event ev;
	struct h_client *raw[NPARTS];
	int seen[NPARTS] = {0}, i, k;
	int64_t holders = 0;
	dlock_client *c;

	partitioned();
	c = client();
	cr_assert_eq(dlock_watch(c, "span/*", &holders), 0, "%s",
		     dlock_last_error());
	cr_assert_eq(holders, -1);
	/* watching again changes nothing */
	cr_assert_eq(dlock_watch(c, "span/*", NULL), 0, "%s",
		     dlock_last_error());
	for (i = 0; i < NPARTS; i++) {
		cr_assert_eq(part_of(names[i]), i);
		raw[i] = h_connect(d[i].port);
		h_lock(raw[i], names[i], "ttl=60000");
	}
	for (k = 0; k < NPARTS; k++) {
		cr_assert_eq(next_event(c, &ev), DLOCK_WATCH_GRANTED);
		for (i = 0; i < NPARTS; i++)
			if (strcmp(ev.name, names[i]) == 0)
				seen[i]++;
	}
	for (i = 0; i < NPARTS; i++)
		cr_assert_eq(seen[i], 1, "%s", names[i]);
	/* unwatched at every partition: a later grant is not told, the
	 * next event is of a name watched since */
	cr_assert_eq(dlock_unwatch(c, "span/*"), 0, "%s", dlock_last_error());
	cr_assert_eq(dlock_unwatch(c, "span/*"), DLOCK_EINVAL);
	for (i = 0; i < NPARTS; i++) {
		cr_assert_eq(part_of(late[i]), i);
		h_lock(raw[i], late[i], "ttl=60000");
	}
	cr_assert_eq(dlock_watch(c, "qux", NULL), 0, "%s", dlock_last_error());
	h_lock(raw[1], "qux", "ttl=60000");
	cr_assert_eq(next_event(c, &ev), DLOCK_WATCH_GRANTED);
	cr_assert_str_eq(ev.name, "qux");
	for (i = 0; i < NPARTS; i++)
		h_close(raw[i]);
	dlock_close(c);
}

static void never_listed(const char *name, const struct dlock_status *st,
			 void *arg)
{
	(void)st, (void)arg;
	cr_assert_fail("listed %s", name);
}

static void never_stat(const char *partition, const char *key,
		       const char *value, void *arg)
{
	(void)value, (void)arg;
	cr_assert_fail("given %s %s", partition, key);
}

Test(route, a_partition_that_cannot_be_reached_fails_what_spans_them)
{
	struct h_client *raw;
	dlock_client *c;
	uint64_t more;
	int err, i;

	partitioned();
	c = client();
	h_daemon_kill9(&d[2]);
	err = dlock_locks(c, NULL, NULL, 0, 0, never_listed, NULL, &more);
	cr_assert_eq(err, DLOCK_ECONNECT, "%s (%s)", dlock_strerror(err),
		     dlock_last_error());
	err = dlock_stats_all(c, never_stat, NULL);
	cr_assert_eq(err, DLOCK_ECONNECT, "%s (%s)", dlock_strerror(err),
		     dlock_last_error());
	/* all or none: p0 and p1 were watched, and are no more */
	err = dlock_watch(c, "span/*", NULL);
	cr_assert_eq(err, DLOCK_ECONNECT, "%s (%s)", dlock_strerror(err),
		     dlock_last_error());
	for (i = 0; i < 2; i++) {
		raw = h_connect(d[i].port);
		cr_assert_eq(h_stats_value(raw, "watches"), 0, "p%d", i);
		h_close(raw);
	}
	cr_assert_eq(dlock_unwatch(c, "span/*"), DLOCK_EINVAL);
	dlock_close(c);
}

/* ---- dlock(1) ------------------------------------------------------------ */

struct result {
	int status;
	char out[OUT_MAX];
	char err[OUT_MAX];
};

static void slurp(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f) {
		n = fread(buf, 1, cap - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
}

/* dlock <args...> (NULL-terminated), with DLOCK_PORT at p0's daemon. */
static void dlock(struct result *res, ...)
{
	const char *bin = getenv("DLOCK") ? getenv("DLOCK") : "build/dlock";
	char out[H_PATH_MAX], err[H_PATH_MAX], port[16];
	const char *argv[24];
	int n = 0, st, fd;
	va_list ap;
	pid_t pid;

	argv[n++] = bin;
	va_start(ap, res);
	while (n < 23 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	argv[n] = NULL;
	snprintf(out, sizeof(out), "%s/dlock.out", d[0].dir);
	snprintf(err, sizeof(err), "%s/dlock.err", d[0].dir);
	snprintf(port, sizeof(port), "%d", d[0].port);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		setenv("DLOCK_PORT", port, 1);
		unsetenv("DLOCK_SERVERS");
		unsetenv("DLOCK_HOST");
		unsetenv("DLOCK_SOCKET");
		unsetenv("DLOCK_OWNER");
		fd = open("/dev/null", O_RDONLY);
		dup2(fd, 0);
		fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 1);
		fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 2);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	cr_assert(waitpid(pid, &st, 0) == pid);
	res->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	slurp(out, res->out, sizeof(res->out));
	slurp(err, res->err, sizeof(res->err));
}

Test(route, dlock_admin_map_and_partition_move)
{
	struct result res;
	char want[160];
	uint64_t epoch;

	/* not partitioned yet */
	dlock(&res, "admin", "map", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	cr_assert_str_eq(res.out, "epoch=0\n");
	dlock(&res, "admin", "partition", "init", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	cr_assert_str_eq(res.out, "epoch=1\n");
	dlock(&res, "admin", "partition", "init", NULL);
	cr_assert_eq(res.status, 64, "%d: %s", res.status, res.err);
	cr_assert(strstr(res.err, "a partition map exists already"), "%s",
		  res.err);
	epoch = spread();
	dlock(&res, "admin", "map", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	snprintf(want, sizeof(want), "epoch=%" PRIu64 "\n", epoch);
	cr_assert(h_starts(res.out, want), "%s", res.out);
	snprintf(want, sizeof(want),
		 "\np1 addrs=127.0.0.1:%d floor=", d[1].port);
	cr_assert(strstr(res.out, want), "%s", res.out);
	cr_assert(strstr(res.out, " slots=5461-10922\n"), "%s", res.out);
	cr_assert(strstr(res.out, " slots=0-5460\n"), "%s", res.out);
	dlock(&res, "admin", "map", "--json", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	snprintf(want, sizeof(want),
		 "{\"id\": \"p2\", \"addrs\": [\"127.0.0.1:%d\"], \"floor\": ",
		 d[2].port);
	cr_assert(strstr(res.out, want), "%s", res.out);
	cr_assert(strstr(res.out, "\"slots\": \"10923-16383\"}"), "%s",
		  res.out);
	/* foo's slot is p2's: dlock asks p0's daemon (DLOCK_PORT) for the
	 * map, and sends the move to p2's */
	dlock(&res, "admin", "partition", "move", "12182", "p1", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	/* then locks=<n>, from a daemon whose moves carry the locks */
	snprintf(want, sizeof(want), "epoch=%" PRIu64 " to=p1", epoch + 1);
	cr_assert(h_starts(res.out, want) && strchr(res.out, '\n'), "%s",
		  res.out);
	map_of(0, epoch + 1, "slots p1 5461-10922,12182");
	/* slots of no partition: the daemon reached answers for itself */
	dlock(&res, "admin", "partition", "move", "99999", "p1", NULL);
	cr_assert_eq(res.status, 64, "%d: %s", res.status, res.err);
	cr_assert(strstr(res.err, "BAD_ARG"), "%s", res.err);
	/* and names go where the map says, through dlock too */
	dlock(&res, "lock", "foo", "--ttl", "30s", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	{
		struct h_client *raw = h_connect(d[1].port);

		h_expect_status(raw, "foo", "held", strtoull(res.out, NULL, 10),
				NULL, H_ANY_WAITERS);
		h_close(raw);
	}
	dlock(&res, "admin", "partition", "bogus", NULL);
	cr_assert_eq(res.status, 64, "%s", res.err);
}

Test(route, dlock_list_and_stats_all_show_every_partition)
{
	char names[SPAN_N][16], want[64];
	uint64_t token[SPAN_N];
	dlock_lease *l[SPAN_N];
	struct result res;
	const char *at, *p;
	dlock_client *holder;
	int i;

	partitioned();
	holder = client();
	hold_span(holder, names, token, l);
	/* dlock list asks p0's daemon (DLOCK_PORT), and lists them all */
	dlock(&res, "list", "span/", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	for (i = 0, at = res.out; i < SPAN_N; i++, at = p + 1) {
		snprintf(want, sizeof(want), "\n%s ", names[i]);
		p = strstr(at, want);
		cr_assert(p, "%s is not listed after the one before:\n%s",
			  names[i], res.out);
		snprintf(want, sizeof(want), " %" PRIu64 " ", token[i]);
		cr_assert(strstr(p, want), "%s: %s", names[i], p);
	}
	/* its pages are dlock_locks's: --max 5 of 12 */
	dlock(&res, "list", "span/", "--max", "5", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	cr_assert(strstr(res.out, "\nspan/e ") && !strstr(res.out, "span/f"),
		  "%s", res.out);
	cr_assert(strstr(res.err, "7 more not listed"), "%s", res.err);
	/* stats --all: every partition's daemon, each saying its slots */
	dlock(&res, "stats", "--all", "--raw", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	cr_assert(strstr(res.out, "p0 partition_slots 5461\n"), "%s", res.out);
	cr_assert(strstr(res.out, "p1 partition_slots 5462\n"), "%s", res.out);
	cr_assert(strstr(res.out, "p2 partition_slots 5461\n"), "%s", res.out);
	dlock(&res, "stats", "--all", "--json", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	cr_assert(h_starts(res.out, "{\"p0\": {\""), "%s", res.out);
	p = strstr(res.out, "}, \"p1\": {\"");
	cr_assert(p && strstr(p, "\"partition_slots\": 5462, "), "%s", res.out);
	p = strstr(res.out, "}, \"p2\": {\"");
	cr_assert(p && strstr(p, "}}\n") && !strchr(p, '\n')[1], "%s", res.out);
	dlock(&res, "stats", "--all", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	cr_assert(h_starts(res.out, "Partition p0\n\nServer\n"), "%s", res.out);
	cr_assert(strstr(res.out, "\n\nPartition p1\n\nServer\n"), "%s",
		  res.out);
	cr_assert(strstr(res.out, "\n\nPartition p2\n\nServer\n"), "%s",
		  res.out);
	/* without --all: the daemon reached, as ever */
	dlock(&res, "stats", "--raw", NULL);
	cr_assert_eq(res.status, 0, "%s", res.err);
	cr_assert(h_starts(res.out, "uptime_ms ") &&
			  strstr(res.out, "\npartition_slots 5461\n"),
		  "%s", res.out);
	dlock_close(holder);
}

/* ---- a daemon without partitions ---------------------------------------- */

static struct h_daemon plain;

static void start_plain(void)
{
	h_daemon_start(&plain, "--persist", "none", NULL);
}

static void stop_plain(void)
{
	cr_assert_eq(h_daemon_stop(&plain), 0);
	h_daemon_cleanup(&plain);
}

TestSuite(unpartitioned, .init = start_plain, .fini = stop_plain,
	  .timeout = 30);

static void count_part(const struct dlock_map_part *p, void *arg)
{
	(void)p;
	++*(int *)arg;
}

Test(unpartitioned, map_says_0_and_the_client_routes_nothing)
{
	struct dlock_options o;
	dlock_client *c;
	dlock_lease *l;
	uint64_t epoch = 7;
	int parts = 0;

	dlock_options_init(&o);
	o.port = plain.port;
	cr_assert_eq(dlock_connect(&o, &c), 0, "%s", dlock_last_error());
	cr_assert_eq(dlock_map_epoch(c), 0);
	cr_assert_eq(dlock_map(c, &epoch, count_part, &parts), 0);
	cr_assert_eq(epoch, 0);
	cr_assert_eq(parts, 0);
	cr_assert_eq(dlock_lock(c, "foo", 30000, 0, &l), 0);
	cr_assert_eq(dlock_unlock(c, l), 0);
	/* the daemon serves no partition: PARTITION is its to refuse */
	cr_assert_eq(dlock_partition(c, "INIT", NULL, 0), DLOCK_EINVAL);
	cr_assert(strstr(dlock_last_error(), "serves no partition"), "%s",
		  dlock_last_error());
	cr_assert_eq(dlock_partition(c, "MOVE  1 p1", NULL, 0), DLOCK_EINVAL);
	cr_assert_str_eq(dlock_last_error(), "");
	cr_assert_str_eq(dlock_strerror(DLOCK_EMOVED),
			 "the name's partition could not be found: moved "
			 "again and again (the partition map is changing)");
	dlock_close(c);
}

static void count_stat(const char *key, const char *value, void *arg)
{
	(void)key, (void)value;
	++*(int *)arg;
}

Test(unpartitioned, stats_all_gives_the_one_daemon_as_partition_nothing)
{
	struct dlock_options o;
	struct all_stats as = {0};
	dlock_client *c;
	int lines = 0;

	dlock_options_init(&o);
	o.port = plain.port;
	cr_assert_eq(dlock_connect(&o, &c), 0, "%s", dlock_last_error());
	cr_assert_eq(dlock_stats(c, count_stat, &lines), 0);
	cr_assert_eq(dlock_stats_all(c, on_part_stat, &as), 0, "%s",
		     dlock_last_error());
	cr_assert_eq(as.n, 1);
	cr_assert_str_eq(as.part[0], "");
	cr_assert_eq(as.lines[0], lines);
	dlock_close(c);
}

/* ---- the slot function --------------------------------------------------- */

Test(slot, redis_cluster_keyslot_vectors)
{
	static const struct {
		const char *key;
		unsigned slot;
	} v[] = {
		{"123456789", 12739},
		{"foo", 12182},
		{"bar", 5061},
		{"hello", 866},
		{"somekey", 11058},
		{"foo{hash_tag}", 2515},
		{"{user1000}.following", 3443},
		{"a{}b", 13694},
		{"{}{x}", 3257},
		{"x{y}{z}", 12222},
		{"{", 4092},
		{"qux", 9995},
	};
	size_t i;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		cr_assert_eq(dl_key_slot(v[i].key, strlen(v[i].key)), v[i].slot,
			     "%s", v[i].key);
}
