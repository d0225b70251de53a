/* SPDX-License-Identifier: MIT */
/*
 * test_watch.c -- WATCH and UNWATCH over the wire: what a watcher is told
 * about other owners' locks, the bounds of a connection's watches and of
 * its unread events, and who may watch what. The real daemon, in the
 * suite's persistence mode (DL_TEST_PERSIST=none|redis, tests/harness.h).
 *
 * Every test starts its daemon with the configuration it needs.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

static struct h_daemon d;
static struct h_redis r;

/* The clients of a test, closed by its end (stop). */
#define CLIENTS_MAX 24
static struct h_client *clients[CLIENTS_MAX];
static int nclients;

static struct h_client *kept(struct h_client *c)
{
	cr_assert_lt(nclients, CLIENTS_MAX);
	clients[nclients++] = c;
	return c;
}

/* Close c now (it is not closed again). */
static void drop(struct h_client *c)
{
	int i;

	for (i = 0; i < nclients; i++)
		if (clients[i] == c)
			clients[i] = clients[--nclients];
	h_close(c);
}

/* A new connection to d. */
static struct h_client *conn(void)
{
	return kept(h_connect(d.port));
}

static void stop(void)
{
	while (nclients > 0)
		h_close(clients[--nclients]);
	if (d.pid)
		h_suite_stop(&d, &r);
	else if (d.dir[0])
		h_daemon_cleanup(&d);
}

TestSuite(watch, .fini = stop, .timeout = 90);

/* ---- helpers ------------------------------------------------------------- */

/* Start d with `conf` as its configuration file (NULL: none). */
static void start(const char *conf)
{
	if (conf) {
		h_daemon_write_conf(&d, conf);
		h_suite_start(&d, &r, "-c", d.conf, NULL);
	} else {
		h_suite_start(&d, &r, NULL);
	}
}

/* A client that says HELLO owner=<owner> (NULL: an anonymous owner). */
static struct h_client *client(const char *owner)
{
	return kept(owner ? h_hello(d.port, owner) : h_connect(d.port));
}

/* A new connection watching `pattern`. */
static struct h_client *watcher(const char *pattern)
{
	struct h_client *c = conn();

	h_send(c, "WATCH %s", pattern);
	h_expect_prefix(c, "OK WATCHING %s", pattern);
	return c;
}

/* The next line of c is the event "* WATCH <name> <what> <owner> <token>
 * holders=<n>" (token 0: not compared); returns the line. */
static char *expect_event(struct h_client *c, const char *name,
			  const char *what, const char *owner, uint64_t token,
			  unsigned holders)
{
	char head[512];
	char *l = h_read(c, 5000);

	snprintf(head, sizeof(head), "* WATCH %s %s %s ", name, what, owner);
	cr_assert(l != NULL, "no event, want \"%s\"", head);
	cr_assert(h_starts(l, head), "got \"%s\", want \"%s...\"", l, head);
	if (token)
		cr_assert_eq(h_arg_u64(l, 3), token, "in \"%s\"", l);
	cr_assert_eq(h_kv_u64(l, "holders"), holders, "in \"%s\"", l);
	return l;
}

/* "OK GRANTED <name> <token> <ttl>": the token. */
static uint64_t take(struct h_client *c, const char *fmt, const char *name)
{
	char *l = h_call(c, fmt, name);

	cr_assert(h_starts(l, "OK GRANTED "), "got \"%s\"", l);
	return h_arg_u64(l, 1);
}

/* ---- what a watcher is told ---------------------------------------------- */

Test(watch, a_watcher_of_a_name_hears_its_grants_releases_expiries_and_breaks)
{
	struct h_client *a, *b, *w, *o;
	uint64_t t1, t2, t3;
	char *l;

	start(NULL);
	a = client("alice");
	b = client("bob");
	o = client(NULL);
	w = conn();
	cr_assert_str_eq(h_call(w, "WATCH job id=w1"),
			 "OK WATCHING job holders=0 id=w1");
	t1 = take(a, "LOCK %s ttl=30s", "job");
	expect_event(w, "job", "granted", "alice", t1, 1);
	/* a queued waiter's grant follows the release that lets it in */
	cr_assert(h_starts(h_call(b, "LOCK job ttl=200ms"), "OK QUEUED job 1"));
	cr_assert(h_starts(h_call(a, "LOCK job"), "OK GRANTED job "));
	cr_assert_str_eq(h_call(a, "UNLOCK job %llu", (unsigned long long)t1),
			 "OK HELD job 1");
	h_expect_silence(w, 100); /* a reentry and its undoing: no change */
	cr_assert_str_eq(h_call(a, "UNLOCK job %llu", (unsigned long long)t1),
			 "OK RELEASED job");
	expect_event(w, "job", "released", "alice", t1, 0);
	l = expect_event(w, "job", "granted", "bob", 0, 1);
	t2 = h_arg_u64(l, 3);
	cr_assert_gt(t2, t1);
	l = h_read(b, 5000);
	cr_assert(l && h_starts(l, "* GRANTED job "), "got \"%s\"", l);
	/* bob does not refresh */
	expect_event(w, "job", "expired", "bob", t2, 0);
	t3 = take(a, "LOCK %s ttl=30s", "job");
	expect_event(w, "job", "granted", "alice", t3, 1);
	l = h_call(o, "BREAK job %llu reason=stuck", (unsigned long long)t3);
	cr_assert(h_starts(l, "OK BROKEN job "), "got \"%s\"", l);
	l = expect_event(w, "job", "broken", "alice", t3, 0);
	cr_assert_str_eq(h_kv(l, "broken_by"), "default", "in \"%s\"", l);
	h_expect_prefix(a, "* EXPIRED job %llu broken_by=default",
			(unsigned long long)t3);
	/* other names are not news */
	take(a, "LOCK %s", "jobs");
	h_expect_silence(w, 200);
}

Test(watch, a_watch_says_whether_the_lock_is_free_when_it_begins)
{
	struct h_client *a, *w;

	start(NULL);
	a = client("alice");
	take(a, "LOCK %s mode=shared", "rw");
	take(client("bob"), "LOCK %s mode=shared", "rw");
	w = conn();
	cr_assert_str_eq(h_call(w, "WATCH rw"), "OK WATCHING rw holders=2");
	cr_assert_str_eq(h_call(w, "WATCH free"), "OK WATCHING free holders=0");
	cr_assert_str_eq(h_call(w, "WATCH r*"), "OK WATCHING r*");
	/* watching again what one watches is no second watch */
	cr_assert_str_eq(h_call(w, "WATCH rw"), "OK WATCHING rw holders=2");
	take(a, "LOCK %s", "rx");
	expect_event(w, "rx", "granted", "alice", 0, 1);
	h_expect_silence(w, 100);
}

Test(watch, a_prefix_watch_hears_every_name_under_it_and_a_star_every_name)
{
	struct h_client *a, *wp, *wall, *wother;

	start(NULL);
	a = client("alice");
	wp = watcher("jobs/*");
	wall = watcher("*");
	wother = watcher("ci/*");
	take(a, "LOCK %s", "jobs/nightly");
	expect_event(wp, "jobs/nightly", "granted", "alice", 0, 1);
	expect_event(wall, "jobs/nightly", "granted", "alice", 0, 1);
	take(a, "LOCK %s", "jobs/");
	expect_event(wp, "jobs/", "granted", "alice", 0, 1);
	expect_event(wall, "jobs/", "granted", "alice", 0, 1);
	take(a, "LOCK %s", "jobs");
	expect_event(wall, "jobs", "granted", "alice", 0, 1);
	h_expect_silence(wp, 100);
	h_expect_silence(wother, 100);
}

Test(watch, a_connection_whose_watches_overlap_hears_each_change_once)
{
	struct h_client *a, *w;

	start(NULL);
	a = client("alice");
	w = conn();
	h_call(w, "WATCH jobs/a");
	h_call(w, "WATCH jobs/*");
	h_call(w, "WATCH j*");
	h_call(w, "WATCH *");
	take(a, "LOCK %s", "jobs/a");
	expect_event(w, "jobs/a", "granted", "alice", 0, 1);
	h_expect_silence(w, 200);
}

Test(watch, shared_holders_and_permits_are_one_event_each)
{
	struct h_client *a, *b, *c, *w;
	uint64_t ta, tb;

	start(NULL);
	a = client("a");
	b = client("b");
	c = client("c");
	w = watcher("s*");
	ta = take(a, "LOCK %s limit=3", "sem");
	tb = take(b, "LOCK %s limit=3", "sem");
	take(c, "LOCK %s limit=3", "sem");
	expect_event(w, "sem", "granted", "a", ta, 1);
	expect_event(w, "sem", "granted", "b", tb, 2);
	expect_event(w, "sem", "granted", "c", 0, 3);
	cr_assert_str_eq(h_call(b, "UNLOCK sem %llu", (unsigned long long)tb),
			 "OK RELEASED sem");
	expect_event(w, "sem", "released", "b", tb, 2);
	take(a, "LOCK %s mode=shared", "shr");
	take(b, "LOCK %s mode=shared", "shr");
	expect_event(w, "shr", "granted", "a", 0, 1);
	expect_event(w, "shr", "granted", "b", 0, 2);
}

Test(watch, unwatch_ends_a_watch_and_a_closed_connection_ends_all_of_its)
{
	struct h_client *a, *w, *p;
	uint64_t end;

	start(NULL);
	a = client("alice");
	p = conn();
	w = watcher("x");
	h_call(w, "WATCH y*");
	cr_assert_eq(h_stats_value(p, "watches"), 2);
	cr_assert_str_eq(h_call(w, "UNWATCH x id=u"), "OK UNWATCHED x id=u");
	cr_assert_str_eq(h_call(w, "UNWATCH x"), "NO NOT_WATCHING x");
	cr_assert_str_eq(h_call(w, "UNWATCH y"), "NO NOT_WATCHING y");
	take(a, "LOCK %s", "x");
	take(a, "LOCK %s", "yy");
	expect_event(w, "yy", "granted", "alice", 0, 1);
	h_expect_silence(w, 100);
	cr_assert_str_eq(h_call(w, "UNWATCH y*"), "OK UNWATCHED y*");
	h_call(w, "WATCH z");
	h_call(w, "WATCH z*");
	drop(w);
	end = h_now_ms() + 5000;
	while (h_stats_value(p, "watches") != 0) {
		cr_assert_lt(h_now_ms(), end,
			     "the closed watcher's watches "
			     "stayed");
		h_sleep_ms(20);
	}
	take(a, "LOCK %s", "z");
	cr_assert(h_daemon_alive(&d));
}

/* A grant persistence never recorded is withdrawn, and its watchers are
 * told so; also on the holder's own connection, which watches the lock
 * and holds the grant's reply when Redis is declared lost (the daemon
 * crashed there once: the event was sent while that connection's held
 * lines were being walked). Redis mode only: Redis hangs (SIGSTOP). */
Test(watch, a_grant_redis_never_recorded_is_withdrawn_for_its_watchers_too)
{
	struct h_client *a, *w, *m;
	uint64_t tok;
	char *l;

	if (!h_suite_redis())
		cr_skip_test("needs Redis (DL_TEST_PERSIST=redis)");
	start("[persistence]\nredis_timeout = 1s\n");
	a = client("alice");
	m = client("m");
	w = watcher("z");
	cr_assert_str_eq(h_call(a, "WATCH z"), "OK WATCHING z holders=0");
	take(m, "LOCK %s", "warm");
	kill(r.pid, SIGSTOP);
	h_send(a, "LOCK z ttl=60s");
	h_wait_available(m, 0, 1000 + 1000 + 3000);
	/* the holder: the news, its withdrawal, then the refusal */
	l = h_read(a, 3000);
	cr_assert(l && h_starts(l, "* WATCH z granted alice "), "got \"%s\"",
		  l ? l : "(nothing)");
	tok = h_arg_u64(l, 3);
	expect_event(a, "z", "withdrawn", "alice", tok, 0);
	l = h_read(a, 3000);
	cr_assert(l && h_starts(l, "ERR UNAVAILABLE "), "got \"%s\"",
		  l ? l : "(nothing)");
	/* another watcher */
	expect_event(w, "z", "granted", "alice", tok, 1);
	expect_event(w, "z", "withdrawn", "alice", tok, 0);
	cr_assert(h_daemon_alive(&d), "dlockd died withdrawing the grant");
	kill(r.pid, SIGCONT);
	h_wait_available(m, 1, 10000);
}

/* ---- bounds -------------------------------------------------------------- */

Test(watch, a_connection_watches_at_most_its_bound_and_is_told_so)
{
	struct h_client *w;
	char buf[64], *l;
	int i;

	start(NULL);
	w = conn();
	for (i = 0; i < DL_WATCHES_PER_CONN_MAX; i++) {
		snprintf(buf, sizeof(buf), "WATCH n%d%s\r\n", i,
			 i % 2 ? "*" : "");
		cr_assert_eq(h_send_raw(w, buf, strlen(buf)), 0);
	}
	for (i = 0; i < DL_WATCHES_PER_CONN_MAX; i++)
		cr_assert(h_starts(h_line(w), "OK WATCHING n"));
	l = h_call(w, "WATCH one-more");
	cr_assert(h_starts(l, "ERR LIMIT "), "got \"%s\"", l);
	cr_assert(strstr(l, "256") != NULL, "the bound is not said: \"%s\"", l);
	/* one it has is no more; one given back makes room */
	cr_assert_str_eq(h_call(w, "WATCH n1*"), "OK WATCHING n1*");
	cr_assert_str_eq(h_call(w, "UNWATCH n0"), "OK UNWATCHED n0");
	cr_assert_str_eq(h_call(w, "WATCH one-more"),
			 "OK WATCHING one-more holders=0");
}

Test(watch, bad_watch_requests_get_an_error_and_the_connection_lives)
{
	char line[DL_NAME_MAX + 32], *l;
	struct h_client *w;

	start(NULL);
	w = conn();
	l = h_call(w, "WATCH");
	cr_assert(h_starts(l, "ERR BAD_FORMAT "), "got \"%s\"", l);
	l = h_call(w, "UNWATCH");
	cr_assert(h_starts(l, "ERR BAD_FORMAT "), "got \"%s\"", l);
	l = h_call(w, "WATCH a b");
	cr_assert(h_starts(l, "ERR BAD_ARG "), "got \"%s\"", l);
	l = h_call(w, "WATCH a wait=5s");
	cr_assert(h_starts(l, "ERR BAD_ARG "), "got \"%s\"", l);
	memset(line, 'p', DL_NAME_MAX);
	line[DL_NAME_MAX] = '*';
	line[DL_NAME_MAX + 1] = '\0';
	l = h_call(w, "WATCH %s", line);
	cr_assert(h_starts(l, "ERR BAD_ARG "), "got \"%s\"", l);
	cr_assert_eq(h_stats_value(w, "watches"), 0);
	cr_assert_str_eq(h_call(w, "PING"), "OK PONG");
	cr_assert(h_daemon_alive(&d));
}

/* A reader of every event, on a thread of its own: counts the events
 * and what overflow notices say it missed, up to the event on `last`. */
struct reader {
	struct h_client *c;
	const char *last;
	uint64_t events, missed;
	atomic_int done;
};

static void *reader_run(void *arg)
{
	struct reader *rd = arg;
	char want[64];
	char *l;

	snprintf(want, sizeof(want), "* WATCH %s ", rd->last);
	while ((l = h_read(rd->c, 20000)) != NULL) {
		if (h_starts(l, "* WATCH-OVERFLOW "))
			rd->missed += strtoull(l + 17, NULL, 10);
		else if (h_starts(l, "* WATCH "))
			rd->events++;
		if (h_starts(l, want))
			break;
	}
	atomic_store(&rd->done, 1);
	return NULL;
}

/* A watcher that does not read loses events, is told how many once it
 * reads, and is neither closed nor a cost to anyone else: the holder is
 * served at its pace and a watcher that reads gets everything. The lazy
 * watcher is on the unix socket, whose buffers the kernel does not grow
 * (on loopback TCP it takes in megabytes before the daemon sees anything
 * unread); 12000 events (~900 KiB) are well past them. */
Test(watch, a_watcher_that_does_not_read_loses_events_and_is_told_how_many)
{
	enum { N = 6000 };
	static struct reader rd;
	struct h_client *g, *lazy, *p;
	char conf[512], sock[H_PATH_MAX + 16], *l;
	uint64_t got = 0, missed = 0, tok;
	pthread_t th;
	int i;

	h_daemon_write_conf(&d, ""); /* makes d.dir */
	snprintf(sock, sizeof(sock), "%s/dlockd.sock", d.dir);
	snprintf(conf, sizeof(conf),
		 "[server]\nunix_socket = %s\n[limits]\nmax_output = 65536\n",
		 sock);
	start(conf);
	g = client("gen");
	p = conn();
	lazy = kept(h_connect_unix(sock));
	cr_assert_str_eq(h_call(lazy, "WATCH *"), "OK WATCHING *");
	memset(&rd, 0, sizeof(rd));
	rd.c = watcher("w*");
	rd.last = "wdone";
	cr_assert_eq(pthread_create(&th, NULL, reader_run, &rd), 0);
	for (i = 0; i < N; i++) {
		tok = take(g, "LOCK %s", "w");
		l = h_call(g, "UNLOCK w %llu", (unsigned long long)tok);
		cr_assert_str_eq(l, "OK RELEASED w");
	}
	take(g, "LOCK %s", "wdone");
	pthread_join(th, NULL);
	/* the reader heard every change, or was told what it missed */
	cr_assert_eq(rd.events + rd.missed, 2 * N + 1,
		     "reader: %llu events, %llu missed",
		     (unsigned long long)rd.events,
		     (unsigned long long)rd.missed);
	cr_assert_gt(h_stats_value(p, "watch_events_dropped"), 0);
	cr_assert_eq(h_stats_value(p, "output_overflows"), 0);
	/* the lazy watcher reads now: what was queued, then the notice */
	while ((l = h_read(lazy, 2000)) != NULL && h_starts(l, "* WATCH "))
		got++;
	cr_assert(l && h_starts(l, "* WATCH-OVERFLOW "), "got \"%s\"",
		  l ? l : "(nothing)");
	missed = strtoull(l + 17, NULL, 10);
	cr_assert_gt(got, 0);
	cr_assert_gt(missed, 0);
	cr_assert_eq(got + missed, 2 * N + 1, "%llu events and %llu missed",
		     (unsigned long long)got, (unsigned long long)missed);
	/* and it hears the next change, on a connection still open */
	take(g, "LOCK %s", "after");
	expect_event(lazy, "after", "granted", "gen", 0, 1);
	cr_assert_str_eq(h_call(lazy, "PING"), "OK PONG");
}

/* The same watcher on loopback TCP, where the kernel's send queue takes
 * megabytes before the daemon sees anything unread: found from outside,
 * 990 such watchers took 1.07 GB of the host's TCP memory and nothing
 * was dropped. The bytes the kernel holds count as unread (SIOCOUTQ): the
 * events are dropped there as on the unix socket, and the watcher is
 * told how many once it reads. */
Test(watch, a_tcp_watcher_that_does_not_read_is_counted_in_the_kernel_too)
{
	enum { N = 6000 }; /* ~900 KiB of events */
	struct h_client *g, *lazy, *p;
	uint64_t got = 0, missed = 0, tok;
	char *l;
	int i;

	start("");
	g = client("gen");
	p = conn();
	lazy = conn();
	cr_assert_str_eq(h_call(lazy, "WATCH w"), "OK WATCHING w holders=0");
	for (i = 0; i < N; i++) {
		tok = take(g, "LOCK %s", "w");
		l = h_call(g, "UNLOCK w %llu", (unsigned long long)tok);
		cr_assert_str_eq(l, "OK RELEASED w");
	}
	cr_assert_gt(h_stats_value(p, "watch_events_dropped"), 0,
		     "nothing dropped: the kernel held it all");
	/* reading now: events and notices of what was missed, which add up
	 * to every change (a last one, so that a notice due is sent) */
	take(g, "LOCK %s", "w");
	while (got + missed < 2 * N + 1 && (l = h_read(lazy, 5000)) != NULL) {
		if (h_starts(l, "* WATCH-OVERFLOW "))
			missed += strtoull(l + 17, NULL, 10);
		else if (h_starts(l, "* WATCH w "))
			got++;
	}
	cr_assert_gt(missed, 0);
	cr_assert_eq(got + missed, 2 * N + 1, "%llu events and %llu missed",
		     (unsigned long long)got, (unsigned long long)missed);
	cr_assert_str_eq(h_call(lazy, "PING"), "OK PONG");
}

/* ---- who may watch what -------------------------------------------------- */

/* The users of test_access.c: app may read app/ and shared/ only. */
#define OPS_SECRET "ops-secret-5f1c0b2a9e7d4c36"
#define OPS_HASH                                                               \
	"sha256:b50a4b454e448e794ba22b21891c408e13e4a6df3182a275e6d0eb4b1dbc8f3d"
#define APP_SECRET "app-secret-8d2e4f6a1b3c5d7e"
#define APP_HASH                                                               \
	"sha256:541ec7c9d1036f5553195d86ce23d116235e3910d32d2b913b4698297e5f8ec4"

static struct h_client *login(const char *user, const char *secret)
{
	struct h_client *c = conn();
	char want[64];

	snprintf(want, sizeof(want), "OK AUTH user=%s", user);
	cr_assert_str_eq(h_call(c, "AUTH %s %s", user, secret), want);
	return c;
}

Test(watch, a_user_watches_only_names_it_may_read)
{
	struct h_client *app, *ops, *all;
	char conf[512], *l;
	const char *path;

	path = h_daemon_write_file(&d, "users",
				   "ops " OPS_HASH " lock=* read=* admin\n"
				   "app " APP_HASH " lock=app/ read=app/\n");
	snprintf(conf, sizeof(conf), "[server]\nusers_file = %s\n", path);
	start(conf);
	app = login("app", APP_SECRET);
	ops = login("ops", OPS_SECRET);
	all = login("ops", OPS_SECRET);
	cr_assert_str_eq(h_call(app, "WATCH app/x"),
			 "OK WATCHING app/x holders=0");
	cr_assert_str_eq(h_call(app, "WATCH app/*"), "OK WATCHING app/*");
	cr_assert_str_eq(h_call(app, "WATCH app/batch/*"),
			 "OK WATCHING app/batch/*");
	cr_assert_str_eq(h_call(app, "WATCH other"),
			 "NO DENIED other need=read");
	cr_assert_str_eq(h_call(app, "WATCH ap*"), "NO DENIED ap* need=read");
	cr_assert_str_eq(h_call(app, "WATCH *"), "NO DENIED * need=read");
	cr_assert_str_eq(h_call(all, "WATCH *"), "OK WATCHING *");
	/* before AUTH nobody watches anything */
	cr_assert(h_starts(h_call(conn(), "WATCH app/x"), "ERR NOAUTH "));
	/* app hears its names, not the others */
	take(ops, "LOCK %s", "other");
	take(ops, "LOCK %s", "app/x");
	h_expect_prefix(all, "* WATCH other granted ");
	h_expect_prefix(all, "* WATCH app/x granted ");
	l = h_read(app, 5000);
	cr_assert(l && h_starts(l, "* WATCH app/x granted "), "got \"%s\"",
		  l ? l : "(nothing)");
	cr_assert_str_eq(h_kv(l, "user"), "ops", "in \"%s\"", l);
	h_expect_silence(app, 100);
}

Test(watch, the_owner_of_a_users_lease_is_shown_with_its_user)
{
	struct h_client *app, *w;
	char conf[512], *l;
	const char *path;

	path = h_daemon_write_file(&d, "users",
				   "ops " OPS_HASH " lock=* read=* admin\n"
				   "app " APP_HASH " lock=app/ read=app/\n");
	snprintf(conf, sizeof(conf), "[server]\nusers_file = %s\n", path);
	start(conf);
	app = login("app", APP_SECRET);
	w = login("ops", OPS_SECRET);
	h_call(w, "WATCH app/*");
	cr_assert(h_starts(h_call(app, "HELLO owner=worker-1"), "OK HELLO "));
	take(app, "LOCK %s", "app/x");
	l = expect_event(w, "app/x", "granted", "worker-1", 0, 1);
	cr_assert_str_eq(h_kv(l, "user"), "app", "in \"%s\"", l);
}

/* The watchers of one user are handed at most max_watch_events_per_user
 * events a second; the rest are missed and told as any missed events
 * (* WATCH-OVERFLOW), so each watcher still accounts for every change.
 * Found from outside: one user's UNLOCK granted 990 shared readers, each
 * grant an event to 990 of its own watchers, and the daemon was deaf to
 * everyone for 270 to 500 ms every 1.1 s. */
Test(watch, a_users_watchers_get_at_most_its_budget_of_events)
{
	enum { W = 10, N = 60, BUDGET = 100 };
	struct h_client *ops, *w[W];
	char conf[512], buf[N * 32], *l;
	uint64_t got[W] = {0}, missed[W] = {0}, sum = 0;
	const char *path;
	size_t len = 0;
	int i;

	path = h_daemon_write_file(&d, "users",
				   "ops " OPS_HASH " lock=* read=* admin\n"
				   "app " APP_HASH " lock=app/ read=app/\n");
	snprintf(conf, sizeof(conf),
		 "[server]\nusers_file = %s\n[limits]\n"
		 "max_watch_events_per_user = %d\n",
		 path, BUDGET);
	start(conf);
	ops = login("ops", OPS_SECRET);
	for (i = 0; i < W; i++) {
		w[i] = login("app", APP_SECRET);
		cr_assert_str_eq(h_call(w[i], "WATCH app/*"),
				 "OK WATCHING app/*");
	}
	for (i = 0; i < N; i++)
		len += (size_t)sprintf(buf + len, "LOCK app/k%d ttl=30s\n", i);
	cr_assert_eq(h_send_raw(ops, buf, len), 0);
	for (i = 0; i < N; i++)
		cr_assert(h_starts(h_line(ops), "OK GRANTED app/k"));
	for (i = 0; i < W; i++) {
		while (got[i] + missed[i] < N && (l = h_read(w[i], 5000))) {
			if (h_starts(l, "* WATCH-OVERFLOW "))
				missed[i] += strtoull(l + 17, NULL, 10);
			else if (h_starts(l, "* WATCH app/k"))
				got[i]++;
		}
		cr_assert_eq(got[i] + missed[i], N,
			     "watcher %d: %llu events, %llu missed", i,
			     (unsigned long long)got[i],
			     (unsigned long long)missed[i]);
		sum += got[i];
	}
	/* the budget, and what a second refills of it while this ran */
	cr_assert_leq(sum, 2 * BUDGET, "%llu events handed out",
		      (unsigned long long)sum);
	cr_assert_geq(h_stats_value(ops, "watch_events_capped"),
		      W * N - 2 * BUDGET);
}
