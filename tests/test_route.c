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
 *     waiter its place in the queue.
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
#define OUT_MAX 8192

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
	cr_assert_eq(dlock_lock(c, "bar", 2000, 0, &l), 0, "%s",
		     dlock_last_error());
	token = dlock_lease_token(l);
	expect_held_on(0, "bar", token, dlock_owner(c));
	move_bar(epoch);
	wait_held_on(1, "bar", token, dlock_owner(c));
	expect_moved(0, "bar", 1);
	/* three TTLs: only renewals that go to p1 keep it */
	h_sleep_ms(6000);
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
