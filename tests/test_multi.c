/* SPDX-License-Identifier: MIT */
/*
 * test_multi.c -- several locks at once (LOCK <name> <name> ...), over
 * the wire, in the suite's persistence mode (DL_TEST_PERSIST=none|redis,
 * tests/harness.h): all granted in one block or none held; taken in byte
 * order, each in its FIFO queue, holding the ones taken while it waits
 * (kept alive by the server), and given back when it times out, is
 * cancelled, refused, or its connection ends; two multi-locks never wait
 * for each other in a cycle; a request sent again with its req= gets its
 * leases back.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
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

TestSuite(multi, .init = start, .fini = stop, .timeout = 60);

/* The n lines of a block after its header: "granted <name> <token>
 * <ttl_ms> holds=1 ...", the names as in `names` (byte order), tokens
 * growing; their tokens into tok[], their TTLs into ttl[] (NULL: none). */
static void read_block(struct h_client *c, const char *const *names, unsigned n,
		       uint64_t *tok, uint64_t *ttl)
{
	char name[300];
	uint64_t t, ms;
	unsigned i;
	char *l;

	for (i = 0; i < n; i++) {
		l = h_line(c);
		cr_assert(sscanf(l, "granted %299s %" SCNu64 " %" SCNu64, name,
				 &t, &ms) == 3,
			  "line %u of the block: \"%s\"", i, l);
		cr_assert_str_eq(name, names[i], "line %u: \"%s\"", i, l);
		cr_assert(strstr(l, " holds=1") != NULL, "\"%s\"", l);
		cr_assert(i == 0 || t > tok[i - 1], "tokens grow: \"%s\"", l);
		tok[i] = t;
		if (ttl)
			ttl[i] = ms;
	}
}

static void unlock_all(struct h_client *c, const char *const *names, unsigned n,
		       const uint64_t *tok)
{
	unsigned i;

	for (i = 0; i < n; i++)
		cr_assert(h_starts(
			h_call(c, "UNLOCK %s %" PRIu64, names[i], tok[i]),
			"OK RELEASED"));
}

static void expect_free(struct h_client *c, const char *name)
{
	h_expect_status(c, name, "free", 0, NULL, H_ANY_WAITERS);
}

Test(multi, several_names_are_granted_at_once_in_byte_order)
{
	static const char *const n3[] = {"a", "b", "c"};
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *o = h_hello(d.port, "other");
	uint64_t tok[3], ttl[3];
	unsigned i;

	cr_assert_str_eq(h_call(a, "LOCK c a b ttl=10s id=t1"),
			 "OK LOCKED a 3 id=t1");
	read_block(a, n3, 3, tok, ttl);
	for (i = 0; i < 3; i++) {
		cr_assert(ttl[i] > 0 && ttl[i] <= 10000, "ttl %" PRIu64,
			  ttl[i]);
		h_expect_held(o, n3[i], "alice", tok[i]);
	}
	/* ordinary leases: refreshed and released one by one */
	cr_assert(h_starts(h_call(a, "REFRESH b %" PRIu64 " ttl=20s", tok[1]),
			   "OK REFRESHED b"));
	unlock_all(a, n3, 3, tok);
	for (i = 0; i < 3; i++)
		expect_free(o, n3[i]);
	h_close(a);
	h_close(o);
}

Test(multi, one_busy_name_refuses_them_all_and_nothing_is_held)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");
	char *l;

	h_lock(b, "y", "ttl=10s");
	l = h_call(a, "TRYLOCK x y z");
	cr_assert(h_starts(l, "NO BUSY y "), "\"%s\"", l);
	expect_free(b, "x");
	expect_free(b, "z");
	l = h_call(a, "LOCK x y z wait=0");
	cr_assert(h_starts(l, "NO BUSY y "), "\"%s\"", l);
	expect_free(b, "x");
	h_close(a);
	h_close(b);
}

/* x is taken, y waited for: x stays held (and alive past its TTL) until
 * y comes, and the block then tells both. */
Test(multi, a_wait_keeps_what_it_took_alive_until_all_are_granted)
{
	static const char *const n2[] = {"x", "y"};
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");
	uint64_t ty = h_lock(b, "y", "ttl=30s"), tok[2], ttl[2];
	char *l;

	cr_assert_str_eq(h_call(a, "LOCK y x ttl=1s wait=20s"),
			 "OK QUEUED x 1 at=y");
	l = h_call(b, "TRYLOCK x");
	cr_assert(h_starts(l, "NO BUSY x "), "\"%s\"", l);
	/* past x's TTL, nothing said: the server renews it */
	h_expect_silence(a, 2500);
	h_expect_held(b, "x", "alice", 0);
	cr_assert(h_starts(h_call(b, "UNLOCK y %" PRIu64, ty), "OK RELEASED"));
	h_expect(a, "* LOCKED x 2");
	read_block(a, n2, 2, tok, ttl);
	cr_assert(tok[1] > ty);
	cr_assert(ttl[0] > 0 && ttl[0] <= 1000 && ttl[1] <= 1000);
	unlock_all(a, n2, 2, tok);
	h_close(a);
	h_close(b);
}

Test(multi, a_wait_that_runs_out_gives_back_what_it_took)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");
	const char *l;

	h_lock(b, "y", "ttl=30s");
	cr_assert_str_eq(h_call(a, "LOCK x y wait=2s id=w"),
			 "OK QUEUED x 1 at=y id=w");
	h_expect_held(b, "x", "alice", 0);
	l = h_read(a, 10000);
	cr_assert(l && strcmp(l, "* TIMEOUT x id=w") == 0, "\"%s\"",
		  l ? l : "(nothing)");
	expect_free(b, "x");
	h_expect_status(b, "y", "held", 0, "bob", 0);
	h_close(a);
	h_close(b);
}

Test(multi, cancel_and_a_closed_connection_give_back_what_it_took)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");

	h_lock(b, "y", "ttl=30s");
	cr_assert_str_eq(h_call(a, "LOCK x y"), "OK QUEUED x 1 at=y");
	h_expect_held(b, "x", "alice", 0);
	cr_assert_str_eq(h_call(a, "CANCEL x"), "OK CANCELLED x");
	expect_free(b, "x");
	h_expect_status(b, "y", "held", 0, "bob", 0);
	h_expect_silence(a, 200);
	/* and a connection that ends while it waits */
	cr_assert_str_eq(h_call(a, "LOCK x y"), "OK QUEUED x 1 at=y");
	h_expect_held(b, "x", "alice", 0);
	h_close(a);
	for (uint64_t t0 = h_now_ms();
	     strstr(h_call(b, "STATUS x"), "state=free") == NULL;
	     h_sleep_ms(20))
		cr_assert(h_now_ms() - t0 < 5000, "x never given back");
	h_expect_status(b, "y", "held", 0, "bob", 0);
	h_close(b);
}

/* The usual deadlock of lock ordering: m and n asked in opposite orders
 * by two clients, each while the other waits. The server takes both in
 * byte order, so neither waits for the other. */
Test(multi, two_multi_locks_in_opposite_orders_both_get_them)
{
	static const char *const mn[] = {"m", "n"};
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");
	struct h_client *c = h_hello(d.port, "carol");
	uint64_t tm = h_lock(a, "m", "ttl=30s"), tb[2], tc[2];

	cr_assert_str_eq(h_call(b, "LOCK m n ttl=30s"), "OK QUEUED m 1 at=m");
	cr_assert_str_eq(h_call(c, "LOCK n m ttl=30s"), "OK QUEUED m 2 at=m");
	expect_free(a, "n"); /* nobody took n while waiting for m */
	cr_assert(h_starts(h_call(a, "UNLOCK m %" PRIu64, tm), "OK RELEASED"));
	h_expect(b, "* LOCKED m 2");
	read_block(b, mn, 2, tb, NULL);
	h_expect_silence(c, 100);
	unlock_all(b, mn, 2, tb);
	h_expect(c, "* LOCKED m 2");
	read_block(c, mn, 2, tc, NULL);
	cr_assert(tc[0] > tb[1]);
	unlock_all(c, mn, 2, tc);
	h_close(a);
	h_close(b);
	h_close(c);
}

/* Against single LOCKs each wait is checked: bob holds q, alice holds p
 * and waits for q; bob asking for p and r would close the cycle. */
Test(multi, a_multi_lock_that_would_close_a_cycle_is_refused)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");
	char *l;

	h_lock(a, "p", "ttl=30s");
	h_lock(b, "q", "ttl=30s");
	cr_assert_str_eq(h_call(a, "LOCK q"), "OK QUEUED q 1");
	l = h_call(b, "LOCK r p");
	cr_assert(h_starts(l, "NO DEADLOCK p 2 alice q"), "\"%s\"", l);
	expect_free(b, "r");
	/* a later step's: a0 taken (byte order), then p refused, and a0
	 * given back */
	l = h_call(b, "LOCK p a0");
	cr_assert(h_starts(l, "NO DEADLOCK p 2 alice q"), "\"%s\"", l);
	expect_free(a, "a0");
	h_close(a);
	h_close(b);
}

Test(multi, a_name_its_owner_holds_is_refused_and_its_hold_given_back)
{
	struct h_client *a = h_hello(d.port, "alice");
	uint64_t tx = h_lock(a, "x", "ttl=30s");
	char want[64], *l;

	snprintf(want, sizeof(want), "NO ALREADY_HELD x %" PRIu64, tx);
	l = h_call(a, "LOCK x y");
	cr_assert_str_eq(l, want);
	expect_free(a, "y");
	l = h_call(a, "STATUS x");
	cr_assert_eq(h_kv_u64(l, "count"), 1, "\"%s\"", l);
	/* w is taken first (byte order), then x refuses: w goes back */
	l = h_call(a, "LOCK x w");
	cr_assert_str_eq(l, want);
	expect_free(a, "w");
	h_close(a);
}

Test(multi, what_a_multi_lock_may_ask_is_checked)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");
	char line[1100], *l;
	size_t n;
	int i;

	l = h_call(a, "LOCK x y x");
	cr_assert(h_starts(l, "ERR BAD_ARG name given twice"), "\"%s\"", l);
	l = h_call(a, "LOCK x y mode=shared");
	cr_assert(h_starts(l, "ERR BAD_ARG several names take"), "\"%s\"", l);
	l = h_call(a, "LOCK x y value=v");
	cr_assert(h_starts(l, "ERR BAD_ARG several names take"), "\"%s\"", l);
	n = (size_t)snprintf(line, sizeof(line), "LOCK");
	for (i = 0; i <= 64; i++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " n%d", i);
	l = h_call(a, "%s", line);
	cr_assert(h_starts(l, "ERR BAD_ARG too many names"), "\"%s\"", l);
	/* 64 names: all granted */
	n = (size_t)snprintf(line, sizeof(line), "LOCK");
	for (i = 0; i < 64; i++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " n%02d", i);
	l = h_call(a, "%s", line);
	cr_assert_str_eq(l, "OK LOCKED n00 64");
	for (i = 0; i < 64; i++)
		cr_assert(h_starts(h_line(a), "granted n"));
	/* one at a time per connection */
	h_lock(b, "v", "ttl=30s");
	cr_assert_str_eq(h_call(a, "LOCK u v"), "OK QUEUED u 1 at=v");
	l = h_call(a, "LOCK s t");
	cr_assert(h_starts(l, "ERR LIMIT one multi-lock at a time"), "\"%s\"",
		  l);
	l = h_call(a, "HELLO owner=zed");
	cr_assert(h_starts(l, "ERR BAD_ARG cannot change owner"), "\"%s\"", l);
	h_close(a);
	h_close(b);
}

/* A drop lost the block: sent again with its req=, the request gets the
 * same leases back, no hold added. */
Test(multi, a_multi_lock_sent_again_with_its_id_gets_its_leases_back)
{
	static const char *const xy[] = {"x", "y"};
	struct h_client *a1 = h_hello(d.port, "alice"), *a2;
	uint64_t t1[2], t2[2];

	cr_assert_str_eq(h_call(a1, "LOCK x y ttl=10s req=99"),
			 "OK LOCKED x 2");
	read_block(a1, xy, 2, t1, NULL);
	h_close(a1);
	a2 = h_hello(d.port, "alice");
	cr_assert_str_eq(h_call(a2, "LOCK x y ttl=10s req=99"),
			 "OK LOCKED x 2");
	read_block(a2, xy, 2, t2, NULL);
	cr_assert(t1[0] == t2[0] && t1[1] == t2[1]);
	unlock_all(a2, xy, 2, t2); /* one hold each */
	expect_free(a2, "x");
	expect_free(a2, "y");
	h_close(a2);
}

/* The wait's place and the lease taken are the daemon's state like any:
 * after a kill -9 the request sent again with its id goes on where it
 * was. */
Test(multi, a_multi_lock_goes_on_after_a_kill9_with_its_id)
{
	static const char *const xy[] = {"x", "y"};
	struct h_client *a, *b;
	uint64_t ty, tx0, tok[2];
	const char *l;

	if (!h_suite_redis())
		return;
	a = h_hello(d.port, "alice");
	b = h_hello(d.port, "bob");
	ty = h_lock(b, "y", "ttl=4s");
	cr_assert_str_eq(h_call(a, "LOCK x y ttl=30s req=7"),
			 "OK QUEUED x 1 at=y");
	l = h_expect_status(b, "x", "held", 0, "alice", 0);
	tx0 = h_kv_u64(l, "token");
	/* killed with the connection open: a close it saw first would give
	 * x back (found by review) */
	h_daemon_kill9(&d);
	h_close(a);
	h_close(b);
	h_daemon_restart(&d);
	a = h_hello(d.port, "alice");
	l = h_call(a, "LOCK x y ttl=30s req=7");
	if (h_starts(l, "OK QUEUED"))
		l = h_line(a); /* y's restored lease of 4 s ends */
	cr_assert(h_starts(l, "OK LOCKED x 2") || h_starts(l, "* LOCKED x 2"),
		  "\"%s\"", l);
	read_block(a, xy, 2, tok, NULL);
	cr_assert_eq(tok[0], tx0, "x's lease, taken before the kill");
	cr_assert_gt(tok[1], ty);
	unlock_all(a, xy, 2, tok);
	h_close(a);
}

/* Found from outside: a BREAK of a lease the multi-lock took ended it
 * (* FAILED ... EXPIRED), but its wait stayed queued, and was granted
 * later to a client told that nothing was held. */
Test(multi, a_broken_lease_ends_it_and_its_wait_leaves_the_queue)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");
	struct h_client *o = h_hello(d.port, "oscar");
	uint64_t t3 = h_lock(a, "g3", "ttl=30s"), t1;
	const char *l;

	cr_assert_str_eq(h_call(b, "LOCK g1 g3 ttl=5s"),
			 "OK QUEUED g1 1 at=g3");
	l = h_expect_status(o, "g1", "held", 0, "bob", 0);
	t1 = h_kv_u64(l, "token");
	cr_assert(h_starts(h_call(o, "BREAK g1 %" PRIu64 " reason=test", t1),
			   "OK BROKEN"));
	h_expect(b, "* FAILED g1 EXPIRED g1");
	h_expect_status(o, "g3", "held", t3, "alice", 0);
	cr_assert(h_starts(h_call(a, "UNLOCK g3 %" PRIu64, t3), "OK RELEASED"));
	h_expect_silence(b, 300);
	expect_free(o, "g3");
	h_close(a);
	h_close(b);
	h_close(o);
}

/* Found from outside: CANCEL of the name it waited for (not its first)
 * cancelled that wait alone, and the multi-lock held the others for
 * ever. Only CANCEL <first> ends it. */
Test(multi, only_a_cancel_of_its_first_name_ends_it)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");

	h_lock(a, "k3", "ttl=30s");
	cr_assert_str_eq(h_call(b, "LOCK k1 k3 ttl=1s"),
			 "OK QUEUED k1 1 at=k3");
	cr_assert_str_eq(h_call(b, "CANCEL k3"), "NO NOT_QUEUED k3");
	h_expect_status(a, "k3", "held", 0, "alice", 1);
	cr_assert_str_eq(h_call(b, "CANCEL k1"), "OK CANCELLED k1");
	expect_free(a, "k1");
	h_expect_status(a, "k3", "held", 0, "alice", 0);
	h_close(a);
	h_close(b);
}

/* Found from outside: a multi-lock refused because its owner held one of
 * the names had re-entered that lease first, extending it to its own
 * TTL (a 2 s lease had a day to live). */
Test(multi, a_refusal_leaves_the_held_lease_as_it_was)
{
	struct h_client *a = h_hello(d.port, "alice");
	uint64_t tx = h_lock(a, "xa", "ttl=2s");
	const char *l;

	l = h_call(a, "LOCK xb xa ttl=24h");
	cr_assert(h_starts(l, "NO ALREADY_HELD xa "), "\"%s\"", l);
	l = h_expect_status(a, "xa", "held", tx, "alice", 0);
	cr_assert_leq(h_kv_u64(l, "ttl_ms"), 2000, "\"%s\"", l);
	cr_assert_eq(h_kv_u64(l, "count"), 1, "\"%s\"", l);
	expect_free(a, "xb");
	h_close(a);
}

/* Found from outside: the same request (owner, req=, names) sent on a
 * second connection while the first still waited took the leases and
 * the wait over, and the first connection kept a multi-lock that never
 * ended and refused every later one. It ends, told nothing more, as a
 * single LOCK's wait taken over. */
Test(multi, the_same_request_on_another_connection_takes_it_over)
{
	static const char *const sab[] = {"sa", "sc"};
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b1 = h_hello(d.port, "bob");
	struct h_client *b2 = h_hello(d.port, "bob");
	uint64_t tc = h_lock(a, "sc", "ttl=30s"), tok[2];

	cr_assert_str_eq(h_call(b1, "LOCK sa sc req=9 ttl=30s"),
			 "OK QUEUED sa 1 at=sc");
	cr_assert_str_eq(h_call(b2, "LOCK sa sc req=9 ttl=30s"),
			 "OK QUEUED sa 1 at=sc");
	h_expect_status(a, "sc", "held", tc, "alice", 1);
	cr_assert(h_starts(h_call(a, "UNLOCK sc %" PRIu64, tc), "OK RELEASED"));
	h_expect(b2, "* LOCKED sa 2");
	read_block(b2, sab, 2, tok, NULL);
	h_expect_silence(b1, 200);
	/* the first connection is free for another */
	cr_assert(h_starts(h_call(b1, "LOCK ta tb"), "OK LOCKED ta 2"));
	h_close(a);
	h_close(b1);
	h_close(b2);
}

/* Found by review: a grant of its wait that came in the same turn as the
 * BREAK of a lease it took (one write: BREAK, then the UNLOCK that lets
 * it in) went to the client as a * GRANTED, and the lease stayed. */
Test(multi, a_grant_after_a_break_in_the_same_turn_is_given_back_too)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");
	struct h_client *o = h_hello(d.port, "oscar");
	uint64_t ty = h_lock(b, "y", "ttl=30s"), tx;
	const char *l;

	cr_assert_str_eq(h_call(a, "LOCK x y ttl=60s"), "OK QUEUED x 1 at=y");
	l = h_expect_status(o, "x", "held", 0, "alice", 0);
	tx = h_kv_u64(l, "token");
	h_send(b, "BREAK x %" PRIu64 " reason=test\r\nUNLOCK y %" PRIu64, tx,
	       ty);
	cr_assert(h_starts(h_line(b), "OK BROKEN"));
	cr_assert(h_starts(h_line(b), "OK RELEASED"));
	h_expect(a, "* FAILED x EXPIRED x");
	h_expect_silence(a, 200);
	expect_free(o, "x");
	expect_free(o, "y");
	h_close(a);
	h_close(b);
	h_close(o);
}

/* Found by review: a single LOCK (or another multi-lock) of the owner
 * with the req= of a multi-lock in progress took its wait over, and the
 * multi-lock never ended. An id is one request's: refused. */
Test(multi, the_id_of_a_multi_lock_in_progress_is_its_own)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b1 = h_hello(d.port, "bob");
	struct h_client *b2 = h_hello(d.port, "bob");
	const char *l;

	h_lock(a, "sb", "ttl=30s");
	cr_assert_str_eq(h_call(b1, "LOCK sa sb req=5"),
			 "OK QUEUED sa 1 at=sb");
	l = h_call(b2, "LOCK sb req=5");
	cr_assert(h_starts(l, "ERR BAD_ARG req= of a multi-lock"), "\"%s\"", l);
	l = h_call(b2, "LOCK sa sc sb req=5");
	cr_assert(h_starts(l, "ERR BAD_ARG req= of a multi-lock"), "\"%s\"", l);
	h_expect_status(a, "sb", "held", 0, "alice", 1);
	cr_assert_str_eq(h_call(b1, "CANCEL sa"), "OK CANCELLED sa");
	expect_free(a, "sa");
	h_close(a);
	h_close(b1);
	h_close(b2);
}

/* Found by review: a TTL of a few ms made the renewal timer spin (and
 * write a refresh each turn). Renewals come at most every 100 ms, so
 * such a lease ends while it waits, and the multi-lock with it. */
Test(multi, a_lease_too_short_to_renew_ends_the_multi_lock)
{
	struct h_client *a = h_hello(d.port, "alice");
	struct h_client *b = h_hello(d.port, "bob");
	const char *l;

	h_lock(b, "rb", "ttl=30s");
	cr_assert_str_eq(h_call(a, "LOCK ra rb ttl=30ms"),
			 "OK QUEUED ra 1 at=rb");
	l = h_read(a, 5000);
	cr_assert(l && strcmp(l, "* FAILED ra EXPIRED ra") == 0, "\"%s\"",
		  l ? l : "(nothing)");
	expect_free(b, "ra");
	h_expect_status(b, "rb", "held", 0, "bob", 0);
	h_close(a);
	h_close(b);
}

/* Found from outside: a multi-lock's retry said holds=1 of a lease
 * another client of its owner had re-entered; a single LOCK's retry says
 * the holds as they are (the clients tell a shared lease by them). */
Test(multi, a_retry_says_the_holds_as_they_are)
{
	struct h_client *a1 = h_hello(d.port, "alice");
	struct h_client *a2 = h_hello(d.port, "alice");
	char name[64];
	uint64_t t, ms, holds;
	char *l;

	cr_assert_str_eq(h_call(a1, "LOCK hq2 hq3 req=6"), "OK LOCKED hq2 2");
	h_line(a1);
	h_line(a1);
	l = h_call(a2, "LOCK hq3");
	cr_assert(h_starts(l, "OK GRANTED hq3 "), "\"%s\"", l);
	cr_assert_eq(h_kv_u64(l, "holds"), 2);
	cr_assert_str_eq(h_call(a1, "LOCK hq2 hq3 req=6"), "OK LOCKED hq2 2");
	l = h_line(a1);
	cr_assert(strstr(l, " holds=1") != NULL, "\"%s\"", l);
	l = h_line(a1);
	cr_assert(sscanf(l,
			 "granted %63s %" SCNu64 " %" SCNu64 " holds=%" SCNu64,
			 name, &t, &ms, &holds) == 4,
		  "\"%s\"", l);
	cr_assert_str_eq(name, "hq3");
	cr_assert_eq(holds, 2, "\"%s\"", l);
	h_close(a1);
	h_close(a2);
}
