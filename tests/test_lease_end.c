/* SPDX-License-Identifier: MIT */
/*
 * test_lease_end.c -- how a lease ends, over the wire: the warning before
 * its end (LOCK ... warn=, * EXPIRING) and the lock's delay after an end
 * its holder did not ask for (LOCK ... delay=), in the suite's
 * persistence mode (DL_TEST_PERSIST=none|redis, see tests/harness.h).
 *
 * Timing: as in test_server.c, a deadline is checked as "not before" with
 * EARLY_MS of slack (from the client's send time, before the server's
 * clock started) and "within" with LATE_MS.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/harness.h"

#define EARLY_MS 5
#define LATE_MS	 500

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

TestSuite(lease_end, .init = start, .fini = stop, .timeout = 60);

/* ms left until `at` (0 if passed), for h_read(). */
static int ms_until(uint64_t at)
{
	uint64_t now = h_now_ms();

	return at > now ? (int)(at - now) : 0;
}

/* The next line of c must be "* EXPIRING <name> <tok> <ms>", within
 * `by`; returns when it came (h_now_ms), after checking that the ms it
 * states is more than 0 and at most `warn`. */
static uint64_t expect_expiring(struct h_client *c, const char *name,
				uint64_t tok, uint64_t warn, uint64_t by)
{
	char want[300];
	uint64_t at, ms;
	char *l = h_read(c, ms_until(by + LATE_MS));

	at = h_now_ms();
	cr_assert(l != NULL, "no * EXPIRING %s within %d ms of its time", name,
		  LATE_MS);
	snprintf(want, sizeof(want), "* EXPIRING %s %llu ", name,
		 (unsigned long long)tok);
	cr_assert(strncmp(l, want, strlen(want)) == 0, "got \"%s\"", l);
	ms = h_arg_u64(l, 2);
	cr_assert(ms > 0 && ms <= warn, "EXPIRING states %llu ms, warn %llu",
		  (unsigned long long)ms, (unsigned long long)warn);
	return at;
}

/* ---- warnings ----------------------------------------------------------- */

Test(lease_end, expiring_is_sent_when_warn_of_the_lease_remains_not_before)
{
	struct h_client *a = h_hello(d.port, "warned"),
			*a2 = h_hello(d.port, "warned");
	uint64_t t0, tok, at;
	char *l;

	t0 = h_now_ms();
	tok = h_lock(a, "w", "ttl=1200 warn=500 id=w1");
	/* every connection of the owner is told, with the grant's tag */
	at = expect_expiring(a, "w", tok, 500, t0 + 700);
	cr_assert_geq(at - t0, 700 - EARLY_MS,
		      "EXPIRING %llu ms after the grant, ttl 1200, warn 500",
		      (unsigned long long)(at - t0));
	cr_assert(strstr(a->line, " id=w1") != NULL, "no tag: \"%s\"", a->line);
	expect_expiring(a2, "w", tok, 500, t0 + 700);
	/* then, unrefreshed, the end */
	l = h_read(a, ms_until(t0 + 1200 + LATE_MS));
	cr_assert(l != NULL, "no * EXPIRED");
	cr_assert(strncmp(l, "* EXPIRED w ", 12) == 0, "got \"%s\"", l);
	cr_assert_geq(h_now_ms() - t0, 1200 - EARLY_MS, "expired early");
	h_close(a);
	h_close(a2);
}

Test(lease_end, a_refresh_arms_the_warning_again)
{
	struct h_client *a = h_connect(d.port);
	uint64_t t0, t1, tok, at;

	t0 = h_now_ms();
	tok = h_lock(a, "rw", "ttl=900 warn=300");
	h_sleep_ms(300);
	/* refreshed before its warning: none is due until 600 ms from here */
	t1 = h_now_ms();
	h_call_ttl(a, "OK REFRESHED rw ", 1, 900, "REFRESH rw %llu",
		   (unsigned long long)tok);
	at = expect_expiring(a, "rw", tok, 300, t1 + 600);
	cr_assert_geq(at - t1, 600 - EARLY_MS,
		      "EXPIRING %llu ms after the refresh, ttl 900, warn 300",
		      (unsigned long long)(at - t1));
	cr_assert_geq(at - t0, 900 - EARLY_MS, "warned by the first deadline");
	/* warned once per deadline; a refresh after the warning arms it
	 * again */
	t1 = h_now_ms();
	h_call_ttl(a, "OK REFRESHED rw ", 1, 900, "REFRESH rw %llu",
		   (unsigned long long)tok);
	at = expect_expiring(a, "rw", tok, 300, t1 + 600);
	cr_assert_geq(at - t1, 600 - EARLY_MS, "second warning early");
	h_send(a, "UNLOCK rw %llu", (unsigned long long)tok);
	h_expect(a, "OK RELEASED rw");
	h_close(a);
}

Test(lease_end, a_released_lease_sends_no_warning)
{
	struct h_client *a = h_connect(d.port);
	uint64_t tok = h_lock(a, "rel", "ttl=600 warn=400");

	h_send(a, "UNLOCK rel %llu", (unsigned long long)tok);
	h_expect(a, "OK RELEASED rel");
	/* nothing at 200 ms (the warning) nor at 600 ms (the end) */
	h_expect_silence(a, 800);
	h_close(a);
}

Test(lease_end, refresh_warn_sets_replaces_and_drops_the_warning)
{
	struct h_client *a = h_connect(d.port);
	uint64_t t1, tok, at;
	char *l;

	/* granted without one, given one by REFRESH */
	tok = h_lock(a, "rf", "ttl=800");
	t1 = h_now_ms();
	h_call_ttl(a, "OK REFRESHED rf ", 1, 800, "REFRESH rf %llu warn=300",
		   (unsigned long long)tok);
	at = expect_expiring(a, "rf", tok, 300, t1 + 500);
	cr_assert_geq(at - t1, 500 - EARLY_MS, "warned early");
	/* warn=0 drops it: the lease runs out with no warning first */
	h_call_ttl(a, "OK REFRESHED rf ", 1, 800, "REFRESH rf %llu warn=0",
		   (unsigned long long)tok);
	l = h_read(a, 800 + LATE_MS);
	cr_assert(l && h_starts(l, "* EXPIRED rf "), "got \"%s\"", l);
	h_close(a);
}

Test(lease_end, a_waiter_granted_later_gets_the_warning_it_asked_for)
{
	struct h_client *a = h_connect(d.port), *b = h_connect(d.port);
	uint64_t t1, tok, tok2, at;
	char *l;

	tok = h_lock(a, "qw", "ttl=5s");
	cr_assert_str_eq(h_call(b, "LOCK qw ttl=800 warn=300"),
			 "OK QUEUED qw 1");
	h_send(a, "UNLOCK qw %llu", (unsigned long long)tok);
	h_expect(a, "OK RELEASED qw");
	t1 = h_now_ms();
	l = h_read(b, 5000);
	cr_assert(l && h_starts(l, "* GRANTED qw "), "got \"%s\"", l);
	tok2 = h_arg_u64(l, 1);
	at = expect_expiring(b, "qw", tok2, 300, t1 + 500);
	cr_assert_geq(at - t1, 500 - EARLY_MS, "warned early");
	h_close(a);
	h_close(b);
}

Test(lease_end, a_warning_not_below_the_ttl_is_bad_arg)
{
	struct h_client *a = h_connect(d.port);
	uint64_t tok;

	cr_assert_str_eq(h_call(a, "LOCK b ttl=1s warn=1s"),
			 "ERR BAD_ARG warn must be less than ttl: it is how "
			 "much of the lease remains when * EXPIRING is sent");
	/* against the default TTL (30 s) */
	cr_assert_str_eq(h_call(a, "TRYLOCK b warn=30s"),
			 "ERR BAD_ARG warn out of range: 30s, less than the "
			 "ttl (30s): it is how much of the lease remains when "
			 "* EXPIRING is sent");
	cr_assert(h_starts(h_call(a, "LOCK b warn=1x"),
			   "ERR BAD_ARG warn malformed: '1x'"),
		  "got \"%s\"", a->line);
	/* a REFRESH below the lease's warning, or a warning above its TTL */
	tok = h_lock(a, "b", "ttl=2s warn=1s");
	cr_assert_str_eq(
		h_call(a, "REFRESH b %llu ttl=1s", (unsigned long long)tok),
		"ERR BAD_ARG warn out of range: the lease's warning "
		"must be less than its ttl (REFRESH warn=0 drops it)");
	cr_assert(h_starts(h_call(a, "REFRESH b %llu warn=2s",
				  (unsigned long long)tok),
			   "ERR BAD_ARG warn out of range"),
		  "got \"%s\"", a->line);
	/* the refusals changed nothing: the lease keeps its TTL and warning */
	h_call_ttl(a, "OK REFRESHED b ", 1, 2000, "REFRESH b %llu",
		   (unsigned long long)tok);
	/* both at once: ttl=500ms with warn=0 is fine */
	h_call_ttl(a, "OK REFRESHED b ", 1, 500,
		   "REFRESH b %llu ttl=500 "
		   "warn=0",
		   (unsigned long long)tok);
	h_close(a);
}

/* ---- lock-delay --------------------------------------------------------- */

/* The next line of c must be "* GRANTED <name> ..." within `by`; returns
 * when it came. */
static uint64_t expect_granted(struct h_client *c, const char *name,
			       uint64_t by)
{
	char want[300];
	char *l = h_read(c, ms_until(by + LATE_MS));

	cr_assert(l != NULL, "no * GRANTED %s within %d ms of its time", name,
		  LATE_MS);
	snprintf(want, sizeof(want), "* GRANTED %s ", name);
	cr_assert(h_starts(l, want), "got \"%s\"", l);
	return h_now_ms();
}

/* After an expiry, nobody gets the lock for its delay: a TRYLOCK is BUSY
 * (for about the delay), STATUS shows it running, and the waiter queued
 * meanwhile keeps its place and is granted when the delay ends. */
Test(lease_end, after_an_expiry_nobody_gets_the_lock_for_its_delay)
{
	struct h_client *a = h_connect(d.port), *b = h_connect(d.port),
			*c = h_connect(d.port);
	uint64_t t0, at;
	char *l;

	t0 = h_now_ms();
	h_lock(a, "ld", "ttl=300 delay=1s");
	cr_assert_str_eq(h_call(b, "LOCK ld ttl=5s"), "OK QUEUED ld 1");
	l = h_read(a, 300 + LATE_MS);
	cr_assert(l && h_starts(l, "* EXPIRED ld "), "got \"%s\"", l);
	/* The delay ends 1 s after the lease, which ended 300 ms after t0
	 * at the soonest: what is left of it is at most 1000, and at least
	 * 1300 less the time since t0 (a fixed floor of 500 charged the
	 * * EXPIRED's delivery and two round trips to it). */
	l = h_call(c, "TRYLOCK ld");
	cr_assert(h_starts(l, "NO BUSY ld "), "got \"%s\"", l);
	cr_assert(h_arg_u64(l, 1) <= 1000 &&
			  h_arg_u64(l, 1) + (h_now_ms() - t0) + EARLY_MS >=
				  1300,
		  "BUSY for %llu ms, %llu ms after the lock: ttl 300 ms, delay "
		  "1 s",
		  (unsigned long long)h_arg_u64(l, 1),
		  (unsigned long long)(h_now_ms() - t0));
	l = h_call(c, "STATUS ld");
	cr_assert(strstr(l, " state=free ") && strstr(l, " waiters=1 ") &&
			  h_kv_u64(l, "delay_ms") == 1000 &&
			  h_kv_u64(l, "delay_left_ms") <= 1000 &&
			  h_kv_u64(l, "delay_left_ms") + (h_now_ms() - t0) +
					  EARLY_MS >=
				  1300,
		  "got \"%s\", %llu ms after the lock", l,
		  (unsigned long long)(h_now_ms() - t0));
	at = expect_granted(b, "ld", t0 + 1300);
	cr_assert_geq(at - t0, 1300 - EARLY_MS,
		      "granted %llu ms after the lock: ttl 300 ms, delay 1 s",
		      (unsigned long long)(at - t0));
	l = h_call(c, "STATUS ld");
	cr_assert(h_kv_u64(l, "delay_left_ms") == 0, "got \"%s\"", l);
	h_close(a);
	h_close(b);
	h_close(c);
}

/* A release by the holder is not an involuntary end: the waiter gets the
 * lock at once. */
Test(lease_end, a_release_frees_a_lock_with_a_delay_at_once)
{
	struct h_client *a = h_connect(d.port), *b = h_connect(d.port);
	uint64_t tok = h_lock(a, "lr", "ttl=5s delay=1m"), t0;

	cr_assert_str_eq(h_call(b, "LOCK lr"), "OK QUEUED lr 1");
	t0 = h_now_ms();
	h_send(a, "UNLOCK lr %llu", (unsigned long long)tok);
	h_expect(a, "OK RELEASED lr");
	expect_granted(b, "lr", t0);
	h_close(a);
	h_close(b);
}

/* BREAK ends a lease against its holder's will: the delay runs. */
Test(lease_end, a_broken_lease_starts_the_delay)
{
	struct h_client *a = h_connect(d.port), *b = h_connect(d.port),
			*op = h_connect(d.port);
	uint64_t tok = h_lock(a, "lb", "ttl=1m delay=800"), t0, at;
	char *l;

	cr_assert_str_eq(h_call(b, "LOCK lb"), "OK QUEUED lb 1");
	t0 = h_now_ms();
	l = h_call(op, "BREAK lb %llu reason=test", (unsigned long long)tok);
	cr_assert(h_starts(l, "OK BROKEN lb "), "got \"%s\"", l);
	l = h_call(op, "TRYLOCK lb");
	cr_assert(h_starts(l, "NO BUSY lb "), "got \"%s\"", l);
	at = expect_granted(b, "lb", t0 + 800);
	cr_assert_geq(at - t0, 800 - EARLY_MS, "granted %llu ms after BREAK",
		      (unsigned long long)(at - t0));
	h_close(a);
	h_close(b);
	h_close(op);
}

/* Two waiters queued through the delay are granted in their order. */
Test(lease_end, waiters_are_granted_in_order_when_the_delay_ends)
{
	struct h_client *a = h_connect(d.port), *b = h_connect(d.port),
			*c = h_connect(d.port);
	uint64_t t0, tok;
	char *l;

	t0 = h_now_ms();
	h_lock(a, "lq", "ttl=200 delay=600");
	cr_assert_str_eq(h_call(b, "LOCK lq"), "OK QUEUED lq 1");
	l = h_read(a, 200 + LATE_MS);
	cr_assert(l && h_starts(l, "* EXPIRED lq "), "got \"%s\"", l);
	cr_assert_str_eq(h_call(c, "LOCK lq"), "OK QUEUED lq 2");
	expect_granted(b, "lq", t0 + 800);
	tok = h_arg_u64(b->line, 1);
	h_expect_silence(c, 100);
	h_send(b, "UNLOCK lq %llu", (unsigned long long)tok);
	h_expect(b, "OK RELEASED lq");
	expect_granted(c, "lq", h_now_ms());
	h_close(a);
	h_close(b);
	h_close(c);
}

Test(lease_end, a_delay_above_the_maximum_is_bad_arg)
{
	struct h_client *a = h_connect(d.port);

	cr_assert_str_eq(h_call(a, "LOCK x delay=2m"),
			 "ERR BAD_ARG delay out of range: '2m', at most 1m (a "
			 "lock's delay)");
	cr_assert(h_starts(h_call(a, "TRYLOCK x delay=soon"),
			   "ERR BAD_ARG delay malformed: 'soon'"),
		  "got \"%s\"", a->line);
	h_close(a);
}
