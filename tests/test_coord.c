/* SPDX-License-Identifier: MIT */
/*
 * test_coord.c -- coordination beyond a mutex, over the wire, in the
 * suite's persistence mode (DL_TEST_PERSIST=none|redis, tests/harness.h):
 *
 *   - a request sent again after a drop (LOCK ... req=<n>) gets its own
 *     grant back, or its own place in the queue, instead of one more hold
 *     that its client would take for another process's (before req=, a
 *     LOCK whose reply a drop lost was answered as a reentry, and the
 *     clients failed it as "held by another process of this owner" for
 *     up to a TTL);
 *   - a holder that asks (LOCK ... notify=waiters) is told that others
 *     wait (* WAITING <name> <n> token=<t>), after its grant;
 *   - both kept across a kill -9 and a restart (Redis only).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/harness.h"

static struct h_daemon d;
static struct h_redis r;

static void start(void)
{
	h_suite_start(&d, &r, NULL);
}

static void stop(void)
{
	h_suite_stop(&d, &r);
}

TestSuite(coord, .init = start, .fini = stop, .timeout = 60);

/* The line must be "OK GRANTED <name> <tok> <ms> holds=<holds> ...". */
static void expect_grant(const char *l, const char *name, uint64_t tok,
			 uint64_t holds)
{
	char want[300];

	snprintf(want, sizeof(want), "OK GRANTED %s %llu ", name,
		 (unsigned long long)tok);
	cr_assert(strncmp(l, want, strlen(want)) == 0, "got \"%s\", want %s", l,
		  want);
	cr_assert_eq(h_kv_u64(l, "holds"), holds, "holds in \"%s\"", l);
}

/* ---- request ids --------------------------------------------------------- */

Test(coord, a_lock_sent_again_after_a_drop_gets_its_own_grant_back)
{
	struct h_client *a1 = h_hello(d.port, "a"), *a2, *o;
	uint64_t tok;
	char *l;

	tok = h_lock(a1, "x", "ttl=10s req=77");
	h_close(a1); /* the reply was lost with the connection */
	a2 = h_hello(d.port, "a");
	expect_grant(h_call(a2, "LOCK x ttl=10s req=77"), "x", tok, 1);
	/* one hold: one UNLOCK frees the lock for the others */
	cr_assert_str_eq(h_call(a2, "UNLOCK x %llu", (unsigned long long)tok),
			 "OK RELEASED x");
	o = h_hello(d.port, "o");
	h_lock(o, "x", "ttl=10s");
	/* without an id it is a reentry, as it always was */
	tok = h_lock(a2, "y", "ttl=10s");
	expect_grant(h_call(a2, "LOCK y ttl=10s"), "y", tok, 2);
	l = h_call(a2, "STATS");
	while (strncmp(l, "retries ", 8) != 0)
		l = h_line(a2);
	cr_assert_str_eq(l, "retries 1");
	h_close(a2);
	h_close(o);
}

Test(coord, a_trylock_sent_again_finds_its_grant_and_others_do_not)
{
	struct h_client *a = h_hello(d.port, "a"), *b = h_hello(d.port, "b");
	uint64_t tok = h_lock(a, "x", "ttl=10s req=5");
	char *l;

	/* b's request 5 is b's own: busy */
	l = h_call(b, "TRYLOCK x ttl=10s req=5");
	cr_assert(h_starts(l, "NO BUSY x "), "got \"%s\"", l);
	expect_grant(h_call(a, "TRYLOCK x ttl=10s req=5"), "x", tok, 1);
	h_close(a);
	h_close(b);
}

Test(coord, a_wait_sent_again_from_a_new_connection_keeps_its_place)
{
	struct h_client *b = h_hello(d.port, "b"), *c = h_hello(d.port, "c");
	struct h_client *a1 = h_hello(d.port, "a"), *a2;
	struct h_client *e = h_hello(d.port, "e");
	uint64_t tb, tc, ta;
	char *l;

	tb = h_lock(b, "x", "ttl=30s");
	cr_assert_str_eq(h_call(c, "LOCK x ttl=30s"), "OK QUEUED x 1");
	cr_assert_str_eq(h_call(a1, "LOCK x ttl=30s req=9"), "OK QUEUED x 2");
	cr_assert_str_eq(h_call(e, "LOCK x ttl=30s"), "OK QUEUED x 3");
	/* a1 is given up for dead, not closed: the same request from a2 */
	a2 = h_hello(d.port, "a");
	cr_assert_str_eq(h_call(a2, "LOCK x ttl=30s req=9"), "OK QUEUED x 2");
	cr_assert_str_eq(h_call(a1, "CANCEL x"), "NO NOT_QUEUED x");
	h_call(b, "UNLOCK x %llu", (unsigned long long)tb);
	l = h_expect_prefix(c, "* GRANTED x ");
	tc = h_arg_u64(l, 1);
	h_call(c, "UNLOCK x %llu", (unsigned long long)tc);
	l = h_expect_prefix(a2, "* GRANTED x ");
	ta = h_arg_u64(l, 1);
	h_expect_silence(a1, 100);
	/* and the grant keeps the id */
	expect_grant(h_call(a2, "LOCK x ttl=30s req=9"), "x", ta, 1);
	h_close(a1);
	h_close(a2);
	h_close(b);
	h_close(c);
	h_close(e);
}

/* ---- told that others wait ------------------------------------------------
 */

Test(coord, a_holder_that_asked_is_told_when_someone_queues)
{
	struct h_client *h = h_hello(d.port, "h"), *w = h_hello(d.port, "w");
	struct h_client *v = h_hello(d.port, "v");
	uint64_t tok = h_lock(h, "x", "ttl=30s notify=waiters");
	char want[100];

	h_expect_silence(h, 50);
	cr_assert_str_eq(h_call(w, "LOCK x ttl=30s"), "OK QUEUED x 1");
	snprintf(want, sizeof(want), "* WAITING x 1 token=%llu",
		 (unsigned long long)tok);
	h_expect(h, "%s", want);
	cr_assert_str_eq(h_call(v, "LOCK x ttl=30s"), "OK QUEUED x 2");
	snprintf(want, sizeof(want), "* WAITING x 2 token=%llu",
		 (unsigned long long)tok);
	h_expect(h, "%s", want);
	/* a TRYLOCK does not wait: nobody is told of it */
	h_call(v, "TRYLOCK y");
	h_close(h);
	h_close(w);
	h_close(v);
}

Test(coord, a_reentry_that_asks_is_told_after_its_reply)
{
	struct h_client *h = h_hello(d.port, "h"), *w = h_hello(d.port, "w");
	uint64_t tok = h_lock(h, "x", "ttl=30s");
	char want[100];

	cr_assert_str_eq(h_call(w, "LOCK x ttl=30s"), "OK QUEUED x 1");
	h_expect_silence(h, 50);
	expect_grant(h_call(h, "LOCK x ttl=30s notify=waiters"), "x", tok, 2);
	snprintf(want, sizeof(want), "* WAITING x 1 token=%llu",
		 (unsigned long long)tok);
	h_expect(h, "%s", want);
	h_close(h);
	h_close(w);
}

Test(coord, a_waiter_granted_with_others_behind_is_told_after_its_grant)
{
	struct h_client *g = h_hello(d.port, "g"), *w1 = h_hello(d.port, "w1");
	struct h_client *w2 = h_hello(d.port, "w2");
	uint64_t tg = h_lock(g, "x", "ttl=30s"), t1;
	char want[100], *l;

	cr_assert_str_eq(h_call(w1, "LOCK x ttl=30s notify=waiters"),
			 "OK QUEUED x 1");
	cr_assert_str_eq(h_call(w2, "LOCK x ttl=30s"), "OK QUEUED x 2");
	h_call(g, "UNLOCK x %llu", (unsigned long long)tg);
	l = h_expect_prefix(w1, "* GRANTED x ");
	t1 = h_arg_u64(l, 1);
	snprintf(want, sizeof(want), "* WAITING x 1 token=%llu",
		 (unsigned long long)t1);
	h_expect(w1, "%s", want);
	h_close(g);
	h_close(w1);
	h_close(w2);
}

Test(coord, notify_takes_waiters_only)
{
	struct h_client *h = h_hello(d.port, "h");
	char *l = h_call(h, "LOCK x notify=all");

	cr_assert(h_starts(l, "ERR BAD_ARG notify malformed: 'all'"),
		  "got \"%s\"", l);
	l = h_call(h, "LOCK x req=-1");
	cr_assert(h_starts(l, "ERR BAD_ARG req malformed"), "got \"%s\"", l);
	l = h_call(h, "UNLOCK x 1 req=1");
	cr_assert(h_starts(l, "ERR BAD_ARG option not valid for this command"),
		  "got \"%s\"", l);
	h_close(h);
}

/* ---- across a restart ------------------------------------------------------
 */

Test(coord, a_request_id_and_news_of_waiters_survive_a_kill9)
{
	struct h_client *a, *a2, *w;
	uint64_t tok;
	char want[100];

	if (!h_suite_redis())
		cr_skip_test("needs Redis (DL_TEST_PERSIST=redis)");
	a = h_hello(d.port, "a");
	tok = h_lock(a, "x", "ttl=30s req=123 notify=waiters");
	h_daemon_kill9(&d);
	h_close(a);
	h_daemon_restart(&d);
	/* the client sends its request again to the daemon it finds */
	a2 = h_hello(d.port, "a");
	expect_grant(h_call(a2, "LOCK x ttl=30s req=123"), "x", tok, 1);
	w = h_hello(d.port, "w");
	cr_assert_str_eq(h_call(w, "LOCK x ttl=30s"), "OK QUEUED x 1");
	snprintf(want, sizeof(want), "* WAITING x 1 token=%llu",
		 (unsigned long long)tok);
	h_expect(a2, "%s", want);
	h_close(a2);
	h_close(w);
}

/* ---- values: an election's leader and what it says --------------------- */

Test(coord, a_leader_says_its_value_and_its_followers_see_it_change)
{
	struct h_client *a = h_hello(d.port, "a"), *b = h_hello(d.port, "b");
	struct h_client *w = h_hello(d.port, "w");
	uint64_t ta, tb;
	char want[200], *l;

	cr_assert_str_eq(h_call(w, "WATCH leader"),
			 "OK WATCHING leader holders=0");
	ta = h_lock(a, "leader", "ttl=30s value=10.0.0.1:80");
	snprintf(want, sizeof(want),
		 "* WATCH leader granted a %llu holders=1 value=10.0.0.1:80",
		 (unsigned long long)ta);
	h_expect(w, "%s", want);
	l = h_call(w, "STATUS leader");
	cr_assert_str_eq(h_kv(l, "value"), "10.0.0.1:80");
	/* a follower queues with the value it will say */
	cr_assert_str_eq(h_call(b, "LOCK leader ttl=30s value=10.0.0.2:80"),
			 "OK QUEUED leader 1");
	/* the leader proclaims another value */
	l = h_call(a, "REFRESH leader %llu value=10.0.0.9:80",
		   (unsigned long long)ta);
	cr_assert(h_starts(l, "OK REFRESHED leader "), "%s", l);
	snprintf(want, sizeof(want),
		 "* WATCH leader value a %llu holders=1 value=10.0.0.9:80",
		 (unsigned long long)ta);
	h_expect(w, "%s", want);
	l = h_call(w, "HOLDERS leader");
	cr_assert(h_starts(l, "OK HOLDERS leader 2 "), "%s", l);
	l = h_line(w);
	cr_assert(strstr(l, " value=10.0.0.9:80") != NULL, "%s", l);
	h_line(w); /* the waiter */
	/* it resigns: the next is leader, with its own value */
	h_call(a, "UNLOCK leader %llu", (unsigned long long)ta);
	h_expect_prefix(w, "* WATCH leader released a ");
	l = h_expect_prefix(b, "* GRANTED leader ");
	tb = h_arg_u64(l, 1);
	cr_assert_gt(tb, ta, "the term grows");
	snprintf(want, sizeof(want),
		 "* WATCH leader granted b %llu holders=1 value=10.0.0.2:80",
		 (unsigned long long)tb);
	h_expect(w, "%s", want);
	/* another owner cannot change it */
	l = h_call(a, "REFRESH leader %llu value=me", (unsigned long long)tb);
	cr_assert_str_eq(l, "NO NOT_HOLDER leader");
	l = h_call(a, "LOCK x value=a%%0Ab");
	cr_assert(h_starts(l, "ERR BAD_ARG value "), "%s", l);
	h_close(a);
	h_close(b);
	h_close(w);
}

Test(coord, a_leaders_value_survives_a_kill9)
{
	struct h_client *a, *c;
	uint64_t tok;
	char *l;

	if (!h_suite_redis())
		cr_skip_test("needs Redis (DL_TEST_PERSIST=redis)");
	a = h_hello(d.port, "a");
	tok = h_lock(a, "leader", "ttl=30s value=host-a:7000");
	l = h_call(a, "REFRESH leader %llu value=host-a:7001",
		   (unsigned long long)tok);
	cr_assert(h_starts(l, "OK REFRESHED leader "), "%s", l);
	h_daemon_kill9(&d);
	h_close(a);
	h_daemon_restart(&d);
	c = h_hello(d.port, "c");
	l = h_call(c, "STATUS leader");
	cr_assert_eq(h_kv_u64(l, "token"), tok, "%s", l);
	cr_assert_str_eq(h_kv(l, "value"), "host-a:7001");
	h_close(c);
}
