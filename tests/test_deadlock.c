/* SPDX-License-Identifier: MIT */
/*
 * test_deadlock.c -- NO DEADLOCK over the wire: a LOCK whose wait would
 * close a cycle of owners is refused at once, and names the cycle; one
 * that only looks like one (a semaphore with a holder outside it, a
 * reentry) waits or is granted as before; a cycle too large for the
 * check's cap waits and is counted. Real dlockd, real sockets, one owner
 * per connection.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
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

TestSuite(deadlock, .init = start, .fini = stop, .timeout = 60);

/* Queue c for name (wait forever). */
static void must_queue(struct h_client *c, const char *name, const char *opts)
{
	char *l = h_call(c, "LOCK %s %s", name, opts ? opts : "");
	char want[128];

	snprintf(want, sizeof(want), "OK QUEUED %s ", name);
	cr_assert(strncmp(l, want, strlen(want)) == 0, "LOCK %s: \"%s\"", name,
		  l);
}

Test(deadlock, a_wait_that_closes_a_cycle_of_two_owners_is_refused_at_once)
{
	struct h_client *a = h_hello(d.port, "a"), *b = h_hello(d.port, "b");
	uint64_t before = h_stats_value(a, "deadlocks"), t0, tb;

	h_lock(a, "A", "ttl=30s");
	tb = h_lock(b, "B", "ttl=30s");
	must_queue(a, "B", "ttl=30s");
	/* b would wait 10 s for a, who waits for b */
	t0 = h_now_ms();
	cr_assert_str_eq(h_call(b, "LOCK A ttl=30s wait=10s"),
			 "NO DEADLOCK A 2 a B");
	cr_assert_lt(h_now_ms() - t0, 2000);
	cr_assert_eq(h_stats_value(a, "deadlocks"), before + 1);
	/* nothing changed: b waits for nothing, a still waits for B */
	cr_assert_eq(h_kv_u64(h_call(b, "STATUS A"), "waiters"), 0);
	cr_assert_str_eq(h_call(b, "UNLOCK B %llu", (unsigned long long)tb),
			 "OK RELEASED B");
	h_expect_prefix(a, "* GRANTED B ");
	h_close(a);
	h_close(b);
}

Test(deadlock, a_cycle_of_three_owners_names_each_owner_and_its_lock)
{
	struct h_client *a = h_hello(d.port, "a"), *b = h_hello(d.port, "b"),
			*c = h_hello(d.port, "c");

	h_lock(a, "A", "ttl=30s");
	h_lock(b, "B", "ttl=30s");
	h_lock(c, "C", "ttl=30s");
	must_queue(a, "B", "ttl=30s");
	must_queue(b, "C", "ttl=30s");
	cr_assert_str_eq(h_call(c, "LOCK A ttl=30s id=t1"),
			 "NO DEADLOCK A 3 a B b C id=t1");
	h_close(a);
	h_close(b);
	h_close(c);
}

Test(deadlock,
     a_writer_waiting_for_readers_one_of_which_waits_for_it_is_refused)
{
	struct h_client *r1 = h_hello(d.port, "r1"),
			*r2 = h_hello(d.port, "r2"), *w = h_hello(d.port, "w");

	h_lock(r1, "S", "mode=shared ttl=30s");
	h_lock(r2, "S", "mode=shared ttl=30s");
	h_lock(w, "X", "ttl=30s");
	must_queue(r1, "X", "ttl=30s");
	/* the writer needs every reader out, and r1 waits for it (r2 being
	 * free does not help) */
	cr_assert_str_eq(h_call(w, "LOCK S ttl=30s"), "NO DEADLOCK S 2 r1 X");
	h_close(r1);
	h_close(r2);
	h_close(w);
}

/* Strict FIFO: a reader behind a queued writer waits for that writer. */
Test(deadlock, a_reader_queued_behind_a_writer_can_close_a_cycle_through_it)
{
	struct h_client *p = h_hello(d.port, "p"), *q = h_hello(d.port, "q"),
			*o = h_hello(d.port, "o");

	h_lock(p, "L", "mode=shared ttl=30s");
	h_lock(o, "M", "ttl=30s");
	must_queue(q, "L", "ttl=30s");
	must_queue(p, "M", "ttl=30s");
	cr_assert_str_eq(h_call(o, "LOCK L mode=shared ttl=30s"),
			 "NO DEADLOCK L 3 q L p M");
	h_close(p);
	h_close(q);
	h_close(o);
}

Test(deadlock, a_semaphore_wait_is_no_deadlock_while_a_permit_holder_is_outside)
{
	struct h_client *a = h_hello(d.port, "a"), *b = h_hello(d.port, "b"),
			*c = h_hello(d.port, "c");
	uint64_t tc;

	h_lock(a, "P", "limit=2 ttl=30s");
	tc = h_lock(c, "P", "limit=2 ttl=30s");
	h_lock(b, "X", "ttl=30s");
	must_queue(a, "X", "ttl=30s");
	/* a's permit will not come back while a waits for b; c's may */
	must_queue(b, "P", "limit=2 ttl=30s");
	cr_assert_str_eq(h_call(c, "UNLOCK P %llu", (unsigned long long)tc),
			 "OK RELEASED P");
	h_expect_prefix(b, "* GRANTED P ");
	h_close(a);
	h_close(b);
	h_close(c);
}

Test(deadlock, a_semaphore_wait_is_a_deadlock_when_every_permit_holder_waits)
{
	struct h_client *a = h_hello(d.port, "a"), *b = h_hello(d.port, "b"),
			*c = h_hello(d.port, "c");
	char *l;

	h_lock(a, "P", "limit=2 ttl=30s");
	h_lock(c, "P", "limit=2 ttl=30s");
	h_lock(b, "X", "ttl=30s");
	h_lock(b, "Y", "ttl=30s");
	must_queue(a, "X", "ttl=30s");
	must_queue(c, "Y", "ttl=30s");
	l = h_call(b, "LOCK P limit=2 ttl=30s");
	cr_assert(strcmp(l, "NO DEADLOCK P 2 a X") == 0 ||
			  strcmp(l, "NO DEADLOCK P 2 c Y") == 0,
		  "\"%s\"", l);
	cr_assert_eq(h_kv_u64(h_call(b, "STATUS P"), "waiters"), 0);
	h_close(a);
	h_close(b);
	h_close(c);
}

Test(deadlock, a_reentry_by_an_owner_that_waits_is_granted_not_refused)
{
	struct h_client *a = h_hello(d.port, "a"), *b = h_hello(d.port, "b");
	uint64_t ta = h_lock(a, "A", "ttl=30s"), tb = h_lock(b, "B", "ttl=30s");

	must_queue(a, "B", "ttl=30s");
	/* a waits for b, yet holds A: asking again waits for nobody */
	cr_assert_eq(h_lock(a, "A", "ttl=30s"), ta);
	cr_assert_eq(h_lock(b, "B", "ttl=30s"), tb);
	cr_assert_eq(h_kv_u64(h_call(b, "STATUS A"), "count"), 2);
	cr_assert_str_eq(h_call(b, "LOCK A ttl=30s"), "NO DEADLOCK A 2 a B");
	h_close(a);
	h_close(b);
}

/* a waits for each of CAP_LOCKS locks b holds: looking at each wait and
 * its holder costs the check two steps, more than its cap of 4096 in
 * all (2,000 locks stay under it, and the cycle is refused). */
#define CAP_LOCKS 3000

Test(deadlock, a_cycle_larger_than_the_check_can_see_waits_and_is_counted)
{
	struct h_client *a = h_hello(d.port, "a"), *b = h_hello(d.port, "b"),
			*c = h_hello(d.port, "c");
	uint64_t capped;
	size_t cap = CAP_LOCKS * 40, n = 0;
	char *buf = malloc(cap), *l;
	int i;

	cr_assert(buf);
	for (i = 0; i < CAP_LOCKS; i++)
		n += (size_t)snprintf(buf + n, cap - n, "LOCK k%d ttl=60s\n",
				      i);
	cr_assert_eq(h_send_raw(b, buf, n), 0);
	for (i = 0; i < CAP_LOCKS; i++)
		h_expect_prefix(b, "OK GRANTED k%d ", i);
	h_lock(a, "R", "ttl=60s");
	for (i = n = 0; i < CAP_LOCKS; i++)
		n += (size_t)snprintf(buf + n, cap - n, "LOCK k%d ttl=60s\n",
				      i);
	cr_assert_eq(h_send_raw(a, buf, n), 0);
	for (i = 0; i < CAP_LOCKS; i++)
		h_expect_prefix(a, "OK QUEUED k%d ", i);
	free(buf);
	h_lock(c, "Q", "ttl=60s");
	must_queue(b, "Q", "ttl=60s");
	/* (a's own later LOCKs looked at its earlier waits, past the cap
	 * too: count from here) */
	capped = h_stats_value(c, "deadlock_walks_capped");
	/* c -> a (R) -> b (each k) -> c (Q): a cycle, but one the check
	 * cannot see whole; it lets c wait, as without it */
	l = h_call(c, "LOCK R ttl=60s wait=30s");
	cr_assert_str_eq(l, "OK QUEUED R 1");
	cr_assert_eq(h_stats_value(c, "deadlock_walks_capped"), capped + 1,
		     "capped %llu", (unsigned long long)capped);
	h_close(a);
	h_close(b);
	h_close(c);
}
