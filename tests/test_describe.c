/* SPDX-License-Identifier: MIT */
/*
 * test_describe.c -- who holds a lock: the description a client gives of
 * itself in HELLO (host=, pid=, cmd=), shown with the holder's hold time
 * by STATUS, HOLDERS, LOCKS and NO BUSY. The real daemon over TCP, in the
 * suite's persistence mode (DL_TEST_PERSIST, see tests/harness.h); what
 * survives a restart or a take-over is in test_persist and test_ha, what
 * a user may see in test_access.
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

TestSuite(describe, .init = start, .fini = stop, .timeout = 60);

#define DEPLOY "host=web3 pid=4242 cmd=make%20deploy"

/* The value of the word key=<value> in any line, a reply's or a body's
 * (static buffer); asserts it is there. */
static const char *kv(const char *line, const char *key)
{
	static char out[DL_LINE_MAX + 1];
	size_t n = strlen(key);
	const char *p = line, *e;

	while ((p = strstr(p, key)) != NULL &&
	       !((p == line || p[-1] == ' ') && p[n] == '='))
		p += n;
	cr_assert(p != NULL, "no %s= in \"%s\"", key, line);
	p += n + 1;
	e = strchr(p, ' ');
	n = e ? (size_t)(e - p) : strlen(p);
	memcpy(out, p, n);
	out[n] = '\0';
	return out;
}

static uint64_t kv_u64(const char *line, const char *key)
{
	return strtoull(kv(line, key), NULL, 10);
}

/* The line says what DEPLOY says, with a hold time in [lo, hi] ms. */
static void expect_deploy(const char *l, uint64_t lo, uint64_t hi)
{
	uint64_t held = kv_u64(l, "held_ms");

	cr_assert_str_eq(kv(l, "host"), "web3", "in \"%s\"", l);
	cr_assert_eq(kv_u64(l, "pid"), 4242, "in \"%s\"", l);
	cr_assert_str_eq(kv(l, "cmd"), "make%20deploy", "in \"%s\"", l);
	cr_assert(held >= lo && held <= hi, "held_ms %llu not in [%llu, %llu]",
		  (unsigned long long)held, (unsigned long long)lo,
		  (unsigned long long)hi);
}

/* No description at all on the line. */
static void expect_undescribed(const char *l)
{
	cr_assert(!h_has_kv(l, "host") && !h_has_kv(l, "pid") &&
			  !h_has_kv(l, "cmd"),
		  "a description in \"%s\"", l);
}

Test(describe, status_holders_and_locks_show_the_holder_and_its_hold_time)
{
	struct h_client *a = h_hello_desc(d.port, "deploy-7", DEPLOY);
	struct h_client *b = h_hello(d.port, "b");
	uint64_t t0 = h_now_ms(), el;
	char *l;

	h_lock(a, "x", "ttl=30s");
	h_sleep_ms(300);
	l = h_call(b, "STATUS x");
	el = h_now_ms() - t0;
	cr_assert(h_starts(l, "OK STATUS x state=held "), "%s", l);
	cr_assert_str_eq(h_kv(l, "owner"), "deploy-7");
	expect_deploy(l, 290, el);

	h_send(b, "HOLDERS x");
	h_expect_prefix(b, "OK HOLDERS x 1 ");
	l = h_line(b);
	cr_assert(h_starts(l, "holder deploy-7 token="), "%s", l);
	expect_deploy(l, 290, h_now_ms() - t0);

	h_send(b, "LOCKS x");
	h_expect(b, "OK LOCKS 1 more=0");
	l = h_line(b);
	cr_assert(h_starts(l, "x state=held "), "%s", l);
	expect_deploy(l, 290, h_now_ms() - t0);
	h_close(a);
	h_close(b);
}

/* The busy answer keeps its words first (a client of 0.3 reads the
 * name and the ms where they were), then names the holder. */
Test(describe, no_busy_names_the_holder_after_its_old_words)
{
	struct h_client *a = h_hello_desc(d.port, "deploy-7", DEPLOY);
	struct h_client *b = h_hello(d.port, "b");
	uint64_t t0 = h_now_ms(), ms;
	char *l;

	h_lock(a, "x", "ttl=30s");
	l = h_call(b, "TRYLOCK x id=t1");
	cr_assert(h_starts(l, "NO BUSY x "), "%s", l);
	ms = h_arg_u64(l, 1);
	cr_assert(ms > 0 && ms <= 30000, "%s", l);
	cr_assert(strstr(l, " owner=deploy-7 ") != NULL, "%s", l);
	expect_deploy(l, 0, h_now_ms() - t0);
	cr_assert(strstr(l, " id=t1") == l + strlen(l) - 6, "tag last: %s", l);
	l = h_call(b, "LOCK x wait=0");
	cr_assert(h_starts(l, "NO BUSY x "), "%s", l);
	cr_assert_str_eq(h_kv(l, "owner"), "deploy-7");
	h_close(a);
	h_close(b);
}

/* A lease shows the description its holder had when it was granted: a
 * later HELLO describes the leases granted after it, and a lease keeps
 * its description after its connection is gone. */
Test(describe, a_lease_keeps_the_description_it_was_granted_with)
{
	struct h_client *a = h_hello_desc(d.port, "w", DEPLOY);
	struct h_client *b = h_hello(d.port, "b");
	char *l;

	h_lock(a, "first", "ttl=30s");
	l = h_call(a, "HELLO host=web4 cmd=make%%20test");
	cr_assert(h_starts(l, "OK HELLO "), "%s", l);
	h_lock(a, "second", "ttl=30s");
	h_close(a);
	h_sleep_ms(50);
	expect_deploy(h_call(b, "STATUS first"), 0, 60000);
	l = h_call(b, "STATUS second");
	cr_assert_str_eq(h_kv(l, "host"), "web4", "in \"%s\"", l);
	cr_assert_str_eq(h_kv(l, "cmd"), "make%20test", "in \"%s\"", l);
	cr_assert(!h_has_kv(l, "pid"), "a part not said is not shown: %s", l);
	h_close(b);
}

/* A waiter shows its connection's description; granted, it is the
 * holder's. A holder that said nothing (a client of 0.3) shows none, but
 * its hold time. */
Test(describe, a_waiter_shows_its_description_and_keeps_it_once_granted)
{
	struct h_client *a = h_hello(d.port, "old");
	struct h_client *w = h_hello_desc(d.port, "next", DEPLOY);
	uint64_t t;
	char *l;

	t = h_lock(a, "x", "ttl=30s");
	l = h_call(a, "STATUS x");
	expect_undescribed(l);
	cr_assert(h_has_kv(l, "held_ms"), "%s", l);
	h_send(w, "LOCK x ttl=30s id=w1");
	h_expect(w, "OK QUEUED x 1 id=w1");
	h_send(a, "HOLDERS x");
	h_expect_prefix(a, "OK HOLDERS x 2 ");
	l = h_line(a);
	cr_assert(h_starts(l, "holder old "), "%s", l);
	expect_undescribed(l);
	l = h_line(a);
	cr_assert(h_starts(l, "waiter next position=1 "), "%s", l);
	cr_assert_str_eq(kv(l, "cmd"), "make%20deploy", "in \"%s\"", l);
	cr_assert(!h_has_kv(l, "held_ms"), "%s", l);
	h_send(a, "UNLOCK x %llu", (unsigned long long)t);
	h_expect(a, "OK RELEASED x");
	h_expect_prefix(w, "* GRANTED x ");
	expect_deploy(h_call(a, "STATUS x"), 0, 5000);
	h_close(a);
	h_close(w);
}

/* What breaks the rule is refused with the rule, and changes nothing:
 * the connection keeps the description it had. */
Test(describe, a_bad_or_long_description_is_refused_and_changes_nothing)
{
	struct h_client *a = h_hello_desc(d.port, "w", DEPLOY);
	char cmd[DL_DESC_CMD_MAX + 2];
	struct dl_reply rp;
	char *l;

	l = h_call(a, "HELLO host=web3%%0Aevil");
	cr_assert(h_starts(l, "ERR BAD_ARG host malformed: "), "%s", l);
	cr_assert(strstr(l, "%20") != NULL, "the rule is said: %s", l);
	/* as every reply, one a client can read (DL_REPLY_ARGS_MAX words) */
	cr_assert_eq(dl_parse_reply(l, strlen(l), &rp), 0, "%s", l);
	l = h_call(a, "HELLO cmd=rm%%0D%%0A");
	cr_assert(h_starts(l, "ERR BAD_ARG cmd malformed: "), "%s", l);
	cr_assert_eq(dl_parse_reply(l, strlen(l), &rp), 0, "%s", l);
	l = h_call(a, "HELLO pid=0");
	cr_assert(h_starts(l, "ERR BAD_ARG pid malformed: "), "%s", l);
	cr_assert_eq(dl_parse_reply(l, strlen(l), &rp), 0, "%s", l);
	memset(cmd, 'c', DL_DESC_CMD_MAX + 1);
	cmd[DL_DESC_CMD_MAX + 1] = '\0';
	l = h_call(a, "HELLO cmd=%s", cmd);
	cr_assert_str_eq(l,
			 "ERR BAD_ARG cmd out of range: 129 bytes, at most 128 "
			 "(escapes counted as sent)");
	cmd[DL_DESC_CMD_MAX] = '\0';
	l = h_call(a, "HELLO owner=w key=%s cmd=%s", h_owner_key("w"), cmd);
	cr_assert(h_starts(l, "OK HELLO "), "%s", l);
	/* a client of 0.3 reads at most 24 words after OK HELLO */
	cr_assert_eq(dl_parse_reply(l, strlen(l), &rp), 0, "%s", l);
	h_lock(a, "x", "ttl=30s");
	l = h_call(a, "STATUS x");
	cr_assert_str_eq(h_kv(l, "cmd"), cmd, "in \"%s\"", l);
	cr_assert(!h_has_kv(l, "host"), "%s", l);
	/* a HELLO that describes nothing keeps the description */
	cr_assert(h_starts(h_call(a, "HELLO"), "OK HELLO "));
	h_lock(a, "y", "ttl=30s");
	l = h_call(a, "STATUS y");
	cr_assert_str_eq(h_kv(l, "cmd"), cmd, "in \"%s\"", l);
	h_close(a);
}
