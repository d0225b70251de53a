/* SPDX-License-Identifier: MIT */
/*
 * test_proto.c -- unit tests of the wire codec (proto/proto.c,
 * proto/proto_reply.c).
 *
 * Each test names the behaviour it proves. Requests are parsed from
 * literal lines; the line splitter is driven through its real interface
 * (space, commit, next) with several chunkings of the same stream, and the
 * formatter is checked by parsing what it wrote.
 */
#include <criterion/criterion.h>

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/desc.h"
#include "proto/proto.h"
#include "proto/slot.h"

/* ---- helpers ------------------------------------------------------------- */

/* A NUL-terminated copy of s, from a small ring so that several can be
 * used in one assert. */
static const char *cstr(struct dl_str s)
{
	static char ring[4][DL_INBUF_SIZE];
	static int next;
	char *b = ring[next++ % 4];

	cr_assert_lt(s.len, sizeof(ring[0]));
	if (s.len > 0)
		memcpy(b, s.p, s.len);
	b[s.len] = '\0';
	return b;
}

static int parse(const char *line, struct dl_request *r, const char **why)
{
	*why = NULL;
	return dl_parse_request(line, strlen(line), r, why);
}

/* A parse expected to fail with err; checks that why is set. */
static void expect_err(const char *line, int err)
{
	struct dl_request r;
	const char *why;
	int rc = parse(line, &r, &why);

	cr_assert_eq(rc, err, "\"%s\": got %d (%s), want %d", line, rc,
		     why ? why : "(null)", err);
	cr_assert_not_null(why, "\"%s\": why not set", line);
	cr_assert_gt(strlen(why), 0);
}

static void expect_ok(const char *line, struct dl_request *r)
{
	const char *why;
	int rc = parse(line, r, &why);

	cr_assert_eq(rc, 0, "\"%s\": got %d (%s)", line, rc,
		     why ? why : "(null)");
}

/* n copies of c, NUL-terminated, from a small ring of static buffers */
static char *rep(char c, size_t n)
{
	static char ring[4][DL_LINE_MAX + 1];
	static int next;
	char *b = ring[next++ % 4];

	cr_assert_lt(n, sizeof(ring[0]));
	memset(b, c, n);
	b[n] = '\0';
	return b;
}

/* every struct dl_str of r lies within line[0..len] */
static void assert_within(const struct dl_request *r, const char *line,
			  size_t len)
{
	const struct dl_str *s[] = {&r->name, &r->tag, &r->owner, &r->arg};
	size_t i;

	for (i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
		if (s[i]->len == 0)
			continue;
		cr_assert(s[i]->p >= line && s[i]->p + s[i]->len <= line + len,
			  "field %zu points outside the line", i);
	}
}

/* ---- scalars ------------------------------------------------------------- */

Test(proto, u64_accepts_digits_and_leading_zeros)
{
	uint64_t v = 1;

	cr_assert_eq(dl_parse_u64("0", 1, &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(dl_parse_u64("007", 3, &v), 0);
	cr_assert_eq(v, 7);
	cr_assert_eq(dl_parse_u64("18446744073709551615", 20, &v), 0);
	cr_assert_eq(v, UINT64_MAX);
	cr_assert_eq(dl_parse_u64("0018446744073709551615", 22, &v), 0);
	cr_assert_eq(v, UINT64_MAX);
}

Test(proto, u64_rejects_overflow_sign_space_and_empty)
{
	static const char *const bad[] = {
		"18446744073709551616",
		"99999999999999999999",
		"184467440737095516150",
		"",
		"-1",
		"+1",
		" 1",
		"1 ",
		"1a",
		"0x10",
		"1.0",
	};
	uint64_t v = 42;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = dl_parse_u64(bad[i], strlen(bad[i]), &v);

		/* the first three are numbers, too large */
		cr_assert_eq(rc, i < 3 ? DL_ERANGE : DL_EBADARG,
			     "\"%s\": got %d", bad[i], rc);
	}
	cr_assert_eq(v, 42, "a failed parse must not write *out");
}

Test(proto, duration_units_scale_to_ms)
{
	static const struct {
		const char *s;
		uint64_t ms;
	} ok[] = {
		{"0", 0},
		{"0s", 0},
		{"10", 10},
		{"10ms", 10},
		{"3s", 3000},
		{"2m", 120000},
		{"007s", 7000},
		{"1000000000000", DL_DURATION_MAX_MS},
		{"1000000000s", DL_DURATION_MAX_MS},
		{"16666666m", 16666666ULL * 60000},
		{"1h", 3600000},
		{"24h", 86400000},
		{"277777h", 277777ULL * 3600000},
	};
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t ms = 1;
		int rc = dl_parse_duration(ok[i].s, strlen(ok[i].s), &ms);

		cr_assert_eq(rc, 0, "\"%s\": got %d", ok[i].s, rc);
		cr_assert_eq(ms, ok[i].ms, "\"%s\": %" PRIu64 " != %" PRIu64,
			     ok[i].s, ms, ok[i].ms);
	}
}

Test(proto, duration_rejects_junk_negative_and_overflow)
{
	static const char *const bad[] = {
		"inf", "",    "-1", "+1", "1H", "1d", "1hh", "1.5s", "1 s",
		" 1",  "1MS", "1S", "1M", "s",	"ms", "1sm", "1mss",
	};
	/* well formed, too large: out of range, not malformed */
	static const char *const big[] = {
		"1000000000001",
		"1000000001s",
		"16666667m",
		"277778h",
		"18446744073709551615s",
		"18446744073709551616",
		"18446744073709551615m",
		"99999999999999999999999h",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t ms;
		int rc = dl_parse_duration(bad[i], strlen(bad[i]), &ms);

		cr_assert_eq(rc, DL_EBADARG, "\"%s\": got %d", bad[i], rc);
	}
	for (i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		uint64_t ms;
		int rc = dl_parse_duration(big[i], strlen(big[i]), &ms);

		cr_assert_eq(rc, DL_ERANGE, "\"%s\": got %d", big[i], rc);
	}
}

Test(proto, wait_accepts_inf_and_durations)
{
	uint64_t ms = 1;

	cr_assert_eq(dl_parse_wait("inf", 3, &ms), 0);
	cr_assert_eq(ms, DL_WAIT_INF);
	cr_assert_eq(dl_parse_wait("0", 1, &ms), 0);
	cr_assert_eq(ms, 0);
	cr_assert_eq(dl_parse_wait("5s", 2, &ms), 0);
	cr_assert_eq(ms, 5000);
	cr_assert_eq(dl_parse_wait("INF", 3, &ms), DL_EBADARG);
	cr_assert_eq(dl_parse_wait("infinity", 8, &ms), DL_EBADARG);
	cr_assert_eq(dl_parse_wait("-1", 2, &ms), DL_EBADARG);
}

Test(proto, name_owner_tag_limits_and_alphabet)
{
	char *n255 = rep('n', DL_NAME_MAX), *n256 = rep('n', DL_NAME_MAX + 1);

	cr_assert_eq(dl_check_name(n255, strlen(n255)), 0);
	cr_assert_eq(dl_check_name(n256, strlen(n256)), DL_ERANGE);
	cr_assert_eq(dl_check_name("", 0), DL_EBADARG);
	cr_assert_eq(dl_check_name("!~/:a.b-c_", 10), 0);
	cr_assert_eq(dl_check_name("a=b", 3), DL_EBADARG);
	cr_assert_eq(dl_check_name("a b", 3), DL_EBADARG);
	cr_assert_eq(dl_check_name("a\x1f", 2), DL_EBADARG);
	cr_assert_eq(dl_check_name("a\x7f", 2), DL_EBADARG);
	cr_assert_eq(dl_check_name("a\x80", 2), DL_EBADARG);
	cr_assert_eq(dl_check_name("a\0", 2), DL_EBADARG);
	cr_assert_eq(dl_check_owner(n255, DL_OWNER_MAX), 0);
	cr_assert_eq(dl_check_owner(n255, DL_OWNER_MAX + 1), DL_ERANGE);
	cr_assert_eq(dl_check_tag(n255, DL_TAG_MAX), 0);
	cr_assert_eq(dl_check_tag(n255, DL_TAG_MAX + 1), DL_ERANGE);
	cr_assert_eq(dl_check_tag("a=", 2), DL_EBADARG);
}

/* ---- requests: every verb ------------------------------------------------ */

Test(proto, lock_with_all_options)
{
	struct dl_request r;
	const char *line = "LOCK jobs/42 ttl=5s wait=inf id=t1";

	expect_ok(line, &r);
	cr_assert_eq(r.verb, DL_VERB_LOCK);
	cr_assert_str_eq(cstr(r.name), "jobs/42");
	cr_assert_eq(r.has_ttl, 1);
	cr_assert_eq(r.ttl_ms, 5000);
	cr_assert_eq(r.has_wait, 1);
	cr_assert_eq(r.wait_ms, DL_WAIT_INF);
	cr_assert_str_eq(cstr(r.tag), "t1");
	cr_assert_eq(r.owner.len, 0);
	cr_assert_eq(r.arg.len, 0);
	assert_within(&r, line, strlen(line));
}

/* RECLAIM (server/proof.h): proof= is 32 lower-case hex digits, until= a
 * unix ms; both are checked by the codec, their presence by the verb. */
Test(proto, reclaim_takes_a_proof_and_an_until)
{
	struct dl_request r;
	const char *line = "RECLAIM jobs/42 7 proof=0123456789abcdef0123456789"
			   "abcdef until=1795920000000 ttl=5s limit=3 id=t1";

	expect_ok(line, &r);
	cr_assert_eq(r.verb, DL_VERB_RECLAIM);
	cr_assert_str_eq(cstr(r.name), "jobs/42");
	cr_assert_eq(r.token, 7);
	cr_assert_str_eq(cstr(r.proof), "0123456789abcdef0123456789abcdef");
	cr_assert_eq(r.has_until, 1);
	cr_assert_eq(r.until, 1795920000000ULL);
	cr_assert_eq(r.ttl_ms, 5000);
	cr_assert_eq(r.shared, 0);
	cr_assert_eq(r.limit, 3);
	assert_within(&r, line, strlen(line));
	expect_ok("RECLAIM x 7 proof=0123456789abcdef0123456789abcdef "
		  "until=5 mode=shared",
		  &r);
	cr_assert_eq(r.shared, 1);
	cr_assert_eq(r.holds, 0);
	/* what the lost record held: holds, warning, lock delay */
	expect_ok("RECLAIM x 7 proof=0123456789abcdef0123456789abcdef "
		  "until=5 holds=3 warn=1s delay=2s",
		  &r);
	cr_assert_eq(r.holds, 3);
	cr_assert_eq(r.warn_ms, 1000);
	cr_assert_eq(r.delay_ms, 2000);
	expect_err("RECLAIM x 7 proof=0123456789abcdef0123456789abcdef "
		   "until=5 holds=0",
		   DL_EBADARG);
	expect_err("RECLAIM x 7 proof=0123456789abcdef0123456789abcdef "
		   "until=5 holds=16777216",
		   DL_EBADARG);
	expect_err("LOCK x holds=2", DL_EBADARG);
	expect_err("RECLAIM x 7 proof=0123 until=5", DL_EBADARG);
	expect_err("RECLAIM x 7 proof=0123456789ABCDEF0123456789abcdef until=5",
		   DL_EBADARG);
	expect_err("RECLAIM x 7 proof=0123456789abcdef0123456789abcdef until=0",
		   DL_EBADARG);
	expect_err("RECLAIM x 7 until=x", DL_EBADARG);
	expect_err("LOCK x proof=0123456789abcdef0123456789abcdef", DL_EBADARG);
}

Test(proto, lock_without_options_has_no_ttl_or_wait)
{
	struct dl_request r;

	expect_ok("LOCK a", &r);
	cr_assert_eq(r.verb, DL_VERB_LOCK);
	cr_assert_str_eq(cstr(r.name), "a");
	cr_assert_eq(r.has_ttl, 0);
	cr_assert_eq(r.has_wait, 0);
	cr_assert_eq(r.tag.len, 0);
	expect_ok("LOCK a wait=0", &r);
	cr_assert_eq(r.has_wait, 1);
	cr_assert_eq(r.wait_ms, 0);
	expect_ok("LOCK a wait=250", &r);
	cr_assert_eq(r.wait_ms, 250);
}

Test(proto, trylock_reports_itself_with_wait_zero)
{
	struct dl_request r;

	expect_ok("TRYLOCK a ttl=2m id=z", &r);
	cr_assert_eq(r.verb, DL_VERB_TRYLOCK);
	cr_assert_str_eq(cstr(r.name), "a");
	cr_assert_eq(r.ttl_ms, 120000);
	cr_assert_eq(r.has_wait, 1);
	cr_assert_eq(r.wait_ms, 0);
	cr_assert_str_eq(cstr(r.tag), "z");
	expect_err("TRYLOCK a wait=5", DL_EBADARG);
}

Test(proto, warn_is_a_duration_below_the_ttl_on_lock_and_refresh)
{
	struct dl_request r;

	expect_ok("LOCK a ttl=30s warn=5s", &r);
	cr_assert_eq(r.has_warn, 1);
	cr_assert_eq(r.warn_ms, 5000);
	expect_ok("TRYLOCK a warn=250", &r);
	cr_assert_eq(r.warn_ms, 250);
	expect_ok("LOCK a", &r);
	cr_assert_eq(r.has_warn, 0);
	/* 0 is none (REFRESH drops the lease's warning with it) */
	expect_ok("REFRESH a 7 warn=0", &r);
	cr_assert_eq(r.has_warn, 1);
	cr_assert_eq(r.warn_ms, 0);
	expect_ok("REFRESH a 7 ttl=1s warn=0", &r);
	/* not below the ttl given with it; the default is the server's */
	expect_err("LOCK a ttl=5s warn=5s", DL_EBADARG);
	expect_err("REFRESH a 7 ttl=1s warn=2s", DL_EBADARG);
	expect_err("LOCK a warn=-1s", DL_EBADARG);
	expect_err("CHECK a 7 warn=1s", DL_EBADARG);
}

Test(proto, delay_is_a_bounded_duration_on_lock_and_trylock)
{
	struct dl_request r;
	const char *why;

	expect_ok("LOCK a delay=5s", &r);
	cr_assert_eq(r.has_delay, 1);
	cr_assert_eq(r.delay_ms, 5000);
	expect_ok("TRYLOCK a delay=1m", &r);
	cr_assert_eq(r.delay_ms, DL_LOCK_DELAY_MAX_MS);
	expect_ok("LOCK a ttl=1s wait=2s mode=shared warn=500 delay=0 id=x",
		  &r);
	cr_assert_eq(r.delay_ms, 0);
	cr_assert_eq(parse("LOCK a delay=61s", &r, &why), DL_EBADARG);
	cr_assert_str_eq(why, "delay out of range: '61s', at most 1m (a "
			      "lock's delay)");
	expect_err("LOCK a delay=soon", DL_EBADARG);
	expect_err("REFRESH a 7 delay=1s", DL_EBADARG);
	expect_err("UNLOCK a 7 delay=1s", DL_EBADARG);
}

Test(proto, unlock_refresh_check_take_name_and_token)
{
	struct dl_request r;

	expect_ok("UNLOCK a 123 id=x", &r);
	cr_assert_eq(r.verb, DL_VERB_UNLOCK);
	cr_assert_str_eq(cstr(r.name), "a");
	cr_assert_eq(r.token, 123);
	cr_assert_str_eq(cstr(r.tag), "x");

	expect_ok("REFRESH b 18446744073709551615 ttl=100ms", &r);
	cr_assert_eq(r.verb, DL_VERB_REFRESH);
	cr_assert_str_eq(cstr(r.name), "b");
	cr_assert_eq(r.token, UINT64_MAX);
	cr_assert_eq(r.has_ttl, 1);
	cr_assert_eq(r.ttl_ms, 100);

	expect_ok("CHECK c 0", &r);
	cr_assert_eq(r.verb, DL_VERB_CHECK);
	cr_assert_str_eq(cstr(r.name), "c");
	cr_assert_eq(r.token, 0);

	expect_err("UNLOCK a 1 ttl=5", DL_EBADARG);
	expect_err("CHECK a 1 wait=5", DL_EBADARG);
	expect_err("REFRESH a 1 wait=5", DL_EBADARG);
}

Test(proto, cancel_and_status_take_a_name)
{
	struct dl_request r;

	expect_ok("CANCEL q id=c1", &r);
	cr_assert_eq(r.verb, DL_VERB_CANCEL);
	cr_assert_str_eq(cstr(r.name), "q");
	cr_assert_str_eq(cstr(r.tag), "c1");
	expect_ok("STATUS q", &r);
	cr_assert_eq(r.verb, DL_VERB_STATUS);
	cr_assert_str_eq(cstr(r.name), "q");
	expect_err("CANCEL q ttl=1", DL_EBADARG);
	expect_err("STATUS q 1", DL_EBADARG);
}

Test(proto, hello_with_and_without_owner)
{
	struct dl_request r;

	expect_ok("HELLO", &r);
	cr_assert_eq(r.verb, DL_VERB_HELLO);
	cr_assert_eq(r.owner.len, 0);
	expect_ok("HELLO owner=worker-7 id=h", &r);
	cr_assert_str_eq(cstr(r.owner), "worker-7");
	cr_assert_str_eq(cstr(r.tag), "h");
	expect_err("HELLO me", DL_EBADARG);
	expect_err("HELLO owner=a=b", DL_EBADARG);
}

Test(proto, auth_stats_ping_quit)
{
	struct dl_request r;

	expect_ok("AUTH s3cret id=a", &r);
	cr_assert_eq(r.verb, DL_VERB_AUTH);
	cr_assert_str_eq(cstr(r.arg), "s3cret");
	cr_assert_str_eq(cstr(r.tag), "a");
	expect_ok("STATS", &r);
	cr_assert_eq(r.verb, DL_VERB_STATS);
	expect_ok("PING", &r);
	cr_assert_eq(r.verb, DL_VERB_PING);
	cr_assert_eq(r.arg.len, 0);
	expect_ok("PING hello id=p", &r);
	cr_assert_str_eq(cstr(r.arg), "hello");
	cr_assert_str_eq(cstr(r.tag), "p");
	expect_ok("QUIT id=bye", &r);
	cr_assert_eq(r.verb, DL_VERB_QUIT);
	cr_assert_str_eq(cstr(r.tag), "bye");
	expect_err("STATS all", DL_EBADARG);
	expect_err("QUIT now", DL_EBADARG);
	expect_err("PING a b", DL_EBADARG);
	expect_err("PING a=b", DL_EBADARG);
}

Test(proto, auth_secret_may_contain_equals_and_look_like_an_id)
{
	struct dl_request r;

	expect_ok("AUTH pa=ss=word id=q", &r);
	cr_assert_str_eq(cstr(r.arg), "pa=ss=word");
	cr_assert_str_eq(cstr(r.tag), "q");
	/* the secret is never taken for a tag, so never echoed */
	expect_ok("AUTH id=hunter2", &r);
	cr_assert_str_eq(cstr(r.arg), "id=hunter2");
	cr_assert_eq(r.tag.len, 0);
	cr_assert_eq(parse("AUTH id=hunter2 extra", &r, &(const char *){0}),
		     DL_EBADARG);
	cr_assert_eq(r.tag.len, 0);
	expect_err("AUTH", DL_EBADFORMAT);
	expect_err("AUTH a b c", DL_EBADARG);
	expect_err("AUTH a ttl=5", DL_EBADARG);
}

/* AUTH <user> <secret>: two words, the user's name checked; the secret is
 * any word without '=' (a word with one is an option, as id=). */
Test(proto, auth_with_a_user_takes_the_user_and_its_secret)
{
	struct dl_request r;
	const char *why;

	expect_ok("AUTH payments 0f3a9c id=t", &r);
	cr_assert_str_eq(cstr(r.user), "payments");
	cr_assert_str_eq(cstr(r.arg), "0f3a9c");
	cr_assert_str_eq(cstr(r.tag), "t");
	expect_ok("AUTH s3cret", &r);
	cr_assert_eq(r.user.len, 0);
	cr_assert_str_eq(cstr(r.arg), "s3cret");
	/* a bad user name is refused without quoting it (it may be a
	 * password typed in the wrong place) */
	cr_assert_eq(parse("AUTH hunter2! secret", &r, &why), DL_EBADARG);
	cr_assert_null(strstr(why, "hunter2"), "%s", why);
	cr_assert(strstr(why, "user malformed"), "%s", why);
	expect_err("AUTH a2345678901234567890123456789012x s", DL_EBADARG);
	expect_ok("AUTH a2345678901234567890123456789012 s", &r);
	cr_assert_eq(parse("AUTH alice pa=ss", &r, &why), DL_EBADARG);
	cr_assert_null(strchr(why, '\''), "%s", why);
}

/* BREAK says why: reason= is required, printable and bounded. */
Test(proto, break_requires_a_printable_bounded_reason)
{
	char line[DL_REASON_MAX + 64];
	struct dl_request r;
	const char *why;

	expect_ok("BREAK a 7 reason=INC-42:stuck id=b", &r);
	cr_assert_eq(r.verb, DL_VERB_BREAK);
	cr_assert_str_eq(cstr(r.reason), "INC-42:stuck");
	cr_assert_eq(r.token, 7);
	cr_assert_eq(parse("BREAK a 7", &r, &why), DL_EBADFORMAT);
	cr_assert(strstr(why, "missing reason="), "%s", why);
	expect_err("BREAK a 7 reason=", DL_EBADARG);
	expect_err("BREAK a 7 reason=a\x01b", DL_EBADARG);
	expect_err("LOCK a reason=x", DL_EBADARG);
	snprintf(line, sizeof(line), "BREAK a 7 reason=%0*d", DL_REASON_MAX, 0);
	expect_ok(line, &r);
	snprintf(line, sizeof(line), "BREAK a 7 reason=%0*d", DL_REASON_MAX + 1,
		 0);
	expect_err(line, DL_EBADARG);
}

Test(proto, verbs_and_option_keys_are_case_insensitive)
{
	static const char *const lines[] = {
		"lock a",      "LoCk a",    "trylock a", "unlock a 1",
		"refresh a 1", "check a 1", "cancel a",	 "status a",
		"hello",       "auth x",    "stats",	 "ping",
		"quit",
	};
	struct dl_request r;
	size_t i;

	for (i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		expect_ok(lines[i], &r);
		cr_assert_eq(r.verb,
			     (enum dl_verb)(DL_VERB_LOCK + (i ? i - 1 : 0)),
			     "\"%s\": verb %d", lines[i], r.verb);
	}
	expect_ok("lock a TTL=5 Wait=inf ID=x", &r);
	cr_assert_eq(r.ttl_ms, 5);
	cr_assert_eq(r.wait_ms, DL_WAIT_INF);
	cr_assert_str_eq(cstr(r.tag), "x");
	expect_ok("hello OWNER=o", &r);
	cr_assert_str_eq(cstr(r.owner), "o");
}

Test(proto, names_are_case_sensitive)
{
	struct dl_request r;

	expect_ok("lock MyLock", &r);
	cr_assert_str_eq(cstr(r.name), "MyLock");
}

Test(proto, blanks_separate_words)
{
	struct dl_request r;

	expect_ok("  \tLOCK\t\t a  ttl=5 \t ", &r);
	cr_assert_eq(r.verb, DL_VERB_LOCK);
	cr_assert_str_eq(cstr(r.name), "a");
	cr_assert_eq(r.ttl_ms, 5);
}

Test(proto, blank_line_is_no_request)
{
	static const char *const lines[] = {"", " ", "\t \t  "};
	struct dl_request r;
	size_t i;

	for (i = 0; i < 3; i++) {
		expect_ok(lines[i], &r);
		cr_assert_eq(r.verb, DL_VERB_NONE);
	}
}

Test(proto, verb_names_are_upper_case)
{
	cr_assert_str_eq(dl_verb_name(DL_VERB_NONE), "");
	cr_assert_str_eq(dl_verb_name(DL_VERB_LOCK), "LOCK");
	cr_assert_str_eq(dl_verb_name(DL_VERB_TRYLOCK), "TRYLOCK");
	cr_assert_str_eq(dl_verb_name(DL_VERB_QUIT), "QUIT");
	cr_assert_str_eq(dl_verb_name(DL_VERB_COUNT_), "");
}

Test(proto, every_verb_name_parses_back_to_its_verb)
{
	int v;

	for (v = DL_VERB_LOCK; v < DL_VERB_COUNT_; v++) {
		struct dl_request r;
		const char *why;
		const char *name = dl_verb_name((enum dl_verb)v);

		dl_parse_request(name, strlen(name), &r, &why);
		cr_assert_eq(r.verb, (enum dl_verb)v, "%s: %d", name, r.verb);
	}
}

/* ---- requests: errors ---------------------------------------------------- */

Test(proto, missing_argument_is_bad_format)
{
	expect_err("LOCK", DL_EBADFORMAT);
	expect_err("LOCK ttl=5", DL_EBADFORMAT);
	expect_err("UNLOCK a", DL_EBADFORMAT);
	expect_err("REFRESH a id=x", DL_EBADFORMAT);
	expect_err("CHECK", DL_EBADFORMAT);
	expect_err("CANCEL", DL_EBADFORMAT);
	expect_err("STATUS", DL_EBADFORMAT);
}

Test(proto, nul_byte_is_bad_format_before_anything_else)
{
	static const char line[] = "LOCK a\0b id=t";
	static const char junk[] = "\0FOO";
	struct dl_request r;
	const char *why = NULL;

	cr_assert_eq(dl_parse_request(line, sizeof(line) - 1, &r, &why),
		     DL_EBADFORMAT);
	cr_assert_str_eq(why, "NUL byte in request");
	cr_assert_eq(dl_parse_request(junk, sizeof(junk) - 1, &r, &why),
		     DL_EBADFORMAT);
	cr_assert_eq(dl_parse_request("\0", 1, &r, &why), DL_EBADFORMAT);
}

Test(proto, unknown_verb_is_unknown_command)
{
	expect_err("FOO a", DL_EUNKNOWNCMD);
	expect_err("LOCKSS a", DL_EUNKNOWNCMD);
	expect_err("LOC a", DL_EUNKNOWNCMD);
	expect_err("ttl=5", DL_EUNKNOWNCMD);
	expect_err("\x01LOCK a", DL_EUNKNOWNCMD);
}

Test(proto, bad_number_is_bad_arg)
{
	expect_err("UNLOCK a 12x", DL_EBADARG);
	expect_err("UNLOCK a -1", DL_EBADARG);
	expect_err("LOCK a ttl=five", DL_EBADARG);
	expect_err("LOCK a wait=1.5s", DL_EBADARG);
}

Test(proto, u64_overflow_token_is_bad_arg)
{
	expect_err("CHECK a 18446744073709551616", DL_EBADARG);
}

Test(proto, negative_duration_is_bad_arg)
{
	expect_err("LOCK a ttl=-5", DL_EBADARG);
	expect_err("LOCK a wait=-1", DL_EBADARG);
}

Test(proto, overflowing_duration_is_bad_arg)
{
	expect_err("LOCK a ttl=18446744073709551615s", DL_EBADARG);
	expect_err("LOCK a wait=18446744073709551616", DL_EBADARG);
	expect_err("LOCK a ttl=1000000000001", DL_EBADARG);
}

Test(proto, unknown_or_disallowed_option_is_bad_arg)
{
	expect_err("LOCK a foo=1", DL_EBADARG);
	expect_err("LOCK a =1", DL_EBADARG);
	expect_err("LOCK a owner=me", DL_EBADARG);
	expect_err("HELLO ttl=5", DL_EBADARG);
	expect_err("UNLOCK a 1 ttl", DL_EBADARG); /* a third positional */
}

Test(proto, duplicate_option_is_bad_arg)
{
	expect_err("LOCK a ttl=1 ttl=2", DL_EBADARG);
	expect_err("LOCK a TTL=1 ttl=1", DL_EBADARG);
	expect_err("LOCK a id=x id=y", DL_EBADARG);
}

Test(proto, empty_option_value_is_bad_arg)
{
	expect_err("LOCK a ttl=", DL_EBADARG);
	expect_err("LOCK a id=", DL_EBADARG);
	expect_err("HELLO owner=", DL_EBADARG);
}

Test(proto, ttl_zero_is_bad_arg)
{
	expect_err("LOCK a ttl=0", DL_EBADARG);
	expect_err("REFRESH a 1 ttl=0s", DL_EBADARG);
}

Test(proto, name_of_256_bytes_is_bad_arg_255_is_accepted)
{
	char line[DL_NAME_MAX + 16];
	struct dl_request r;

	snprintf(line, sizeof(line), "LOCK %s", rep('x', DL_NAME_MAX + 1));
	expect_err(line, DL_EBADARG);
	snprintf(line, sizeof(line), "LOCK %s", rep('x', DL_NAME_MAX));
	expect_ok(line, &r);
	cr_assert_eq(r.name.len, DL_NAME_MAX);
	cr_assert_eq(r.name.p, line + 5);
}

Test(proto, name_with_control_byte_is_bad_arg)
{
	expect_err("LOCK a\x01z", DL_EBADARG);
	expect_err("LOCK a\rz", DL_EBADARG);
	expect_err("LOCK \x7f", DL_EBADARG);
	expect_err("LOCK caf\xc3\xa9", DL_EBADARG);
}

Test(proto, tag_of_33_bytes_is_bad_arg_32_is_accepted)
{
	char line[64];
	struct dl_request r;

	snprintf(line, sizeof(line), "PING id=%s", rep('t', DL_TAG_MAX + 1));
	expect_err(line, DL_EBADARG);
	parse(line, &r, &(const char *){0});
	cr_assert_eq(r.tag.len, 0, "an invalid tag is not echoed");
	snprintf(line, sizeof(line), "PING id=%s", rep('t', DL_TAG_MAX));
	expect_ok(line, &r);
	cr_assert_eq(r.tag.len, DL_TAG_MAX);
}

Test(proto, owner_of_65_bytes_is_bad_arg_64_is_accepted)
{
	char line[96];
	struct dl_request r;

	snprintf(line, sizeof(line), "HELLO owner=%s",
		 rep('o', DL_OWNER_MAX + 1));
	expect_err(line, DL_EBADARG);
	snprintf(line, sizeof(line), "HELLO owner=%s", rep('o', DL_OWNER_MAX));
	expect_ok(line, &r);
	cr_assert_eq(r.owner.len, DL_OWNER_MAX);
}

Test(proto, too_many_words_is_bad_arg)
{
	struct dl_request r;

	char line[DL_LINE_MAX];
	size_t n;
	int i;

	/* more than DL_ARGS_MAX words (a multi-lock's most: LOCK, 64 names
	 * and four options) is refused before the verb is looked at */
	n = (size_t)snprintf(line, sizeof(line), "FOO");
	for (i = 1; i < DL_ARGS_MAX; i++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %d", i);
	expect_err(line, DL_EUNKNOWNCMD);
	snprintf(line + n, sizeof(line) - n, " x");
	expect_err(line, DL_EBADARG);
	expect_err("PING a b c d e f g", DL_EBADARG);
	expect_err("UNLOCK a 1 2", DL_EBADARG);
	/* several names: a multi-lock, up to DL_MULTI_MAX */
	expect_ok("LOCK a b", &r);
	cr_assert_eq(r.nnames, 2);
	cr_assert(r.more[0].len == 1 && r.more[0].p[0] == 'b');
	n = (size_t)snprintf(line, sizeof(line), "LOCK");
	for (i = 0; i < DL_MULTI_MAX; i++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, " n%d", i);
	snprintf(line + n, sizeof(line) - n, " ttl=1 wait=1 req=9 id=x");
	expect_ok(line, &r);
	cr_assert_eq(r.nnames, DL_MULTI_MAX);
	snprintf(line + n, sizeof(line) - n, " n%d", DL_MULTI_MAX);
	expect_err(line, DL_EBADARG);
	expect_ok("LOCK a", &r);
	cr_assert_eq(r.nnames, 0, "one name: a single lock");
	/* the longest: a RECLAIM with everything it takes */
	expect_ok("RECLAIM a 7 proof=00112233445566778899aabbccddeeff "
		  "until=1 ttl=1 mode=exclusive limit=2 holds=2 warn=0 "
		  "delay=1 value=v id=x",
		  &r);
	expect_ok("REFRESH a 1 ttl=5 id=x", &r);
	/* the longest request there is */
	expect_ok("LOCK a ttl=1 wait=1 mode=exclusive limit=1 warn=0 "
		  "delay=1 req=18446744073709551615 notify=WAITERS "
		  "value=10.0.0.7:8080 id=x",
		  &r);
	cr_assert_eq(r.value.len, 13);
	cr_assert_eq(r.req, UINT64_MAX);
	cr_assert(r.notify_waiters);
	expect_ok("TRYLOCK a req=7 notify=waiters", &r);
	cr_assert_eq(r.req, 7);
	expect_err("UNLOCK a 1 req=7", DL_EBADARG);
	expect_err("LOCK a value=a%0Ab", DL_EBADARG); /* a line break */
	expect_ok("REFRESH a 1 value=leader%20one", &r);
	cr_assert_eq(r.value.len, 12);
}

Test(proto, first_error_from_the_left_wins)
{
	struct dl_request r;
	const char *why;

	cr_assert_eq(parse("LOCK a foo=1 ttl=0", &r, &why), DL_EBADARG);
	cr_assert(strstr(why, "unknown option: 'foo'"), "%s", why);
	cr_assert_eq(parse("LOCK a ttl=0 foo=1", &r, &why), DL_EBADARG);
	cr_assert_str_eq(why, "ttl out of range: '0', at least 1ms");
	cr_assert_eq(parse("UNLOCK a\x01 x", &r, &why), DL_EBADARG);
	cr_assert(strstr(why, "name malformed: 'a?'"), "%s", why);
	cr_assert_eq(parse("UNLOCK a x", &r, &why), DL_EBADARG);
	cr_assert(strstr(why, "token malformed: 'x'"), "%s", why);
	/* missing is only known at the end, after every word was checked */
	cr_assert_eq(parse("UNLOCK a ttl=1", &r, &why), DL_EBADARG);
	cr_assert(strstr(why, "option not valid for this command: 'ttl'"), "%s",
		  why);
	cr_assert_eq(parse("UNLOCK a id=x", &r, &why), DL_EBADFORMAT);
	cr_assert_str_eq(why, "missing the token; usage: UNLOCK <name> "
			      "<token> [id=<tag>]");
}

/* Every error names the argument, says malformed or out of range, and
 * gives the accepted form or the limit. */
Test(proto, errors_say_what_and_how)
{
	static const struct {
		const char *line;
		int err;
		const char *why;
	} cases[] = {
		{"LOCK", DL_EBADFORMAT,
		 "missing the lock name; usage: LOCK <name> [<name> ...] "
		 "[ttl=<duration>] "
		 "[wait=<duration>|inf] [mode=exclusive|shared] [limit=<n>] "
		 "[warn=<duration>] [delay=<duration>] [req=<n>] "
		 "[notify=waiters] [value=<text>] [id=<tag>]"},
		{"LOCK foo timeout=5s", DL_EBADARG,
		 "unknown option: 'timeout'; usage: LOCK <name> "
		 "[<name> ...] [ttl=<duration>] [wait=<duration>|inf] "
		 "[mode=exclusive|shared] [limit=<n>] [warn=<duration>] "
		 "[delay=<duration>] [req=<n>] [notify=waiters] "
		 "[value=<text>] [id=<tag>]"},
		{"LOCK foo ttl=10x", DL_EBADARG,
		 "ttl malformed: '10x', takes a duration: a number and a unit, "
		 "ms (default), s, m or h, e.g. 30s"},
		{"LOCK foo ttl=1000000000001", DL_EBADARG,
		 "ttl out of range: '1000000000001', at most 1000000000s"},
		{"LOCK foo wait=forever", DL_EBADARG,
		 "wait malformed: 'forever', takes inf or a duration: a number "
		 "and a unit, ms (default), s, m or h, e.g. 30s"},
		{"LOCK foo id=" /* 33 bytes */
		 "123456789012345678901234567890123",
		 DL_EBADARG, "id out of range: 33 bytes, at most 32"},
		{"HELLO owner=a=b", DL_EBADARG,
		 "owner malformed: 'a=b', 1 to 64 bytes of printable ASCII "
		 "without space or '='"},
		{"UNLOCK a 18446744073709551616", DL_EBADARG,
		 "token out of range: '18446744073709551616', the decimal "
		 "number GRANTED gave"},
		{"helo", DL_EUNKNOWNCMD,
		 "unknown command 'helo'; HELP lists the commands"},
		{"LOCKS limit=1001", DL_EBADARG,
		 "limit out of range: '1001', a number from 1 to 1000"},
		{"LOCKS by=size", DL_EBADARG,
		 "by malformed: 'size', takes name or waiters"},
		{"LOCKS by=waiters after=a", DL_EBADARG,
		 "after= pages by name; by=waiters lists the first limit= locks "
		 "only"},
		{"PING a b", DL_EBADARG,
		 "one argument too many: 'b'; usage: PING [<word>] [id=<tag>]"},
		{"LOCK a ttl=1s ttl=2s", DL_EBADARG,
		 "option given twice: 'ttl'; usage: LOCK <name> "
		 "[<name> ...] [ttl=<duration>] [wait=<duration>|inf] "
		 "[mode=exclusive|shared] [limit=<n>] [warn=<duration>] "
		 "[delay=<duration>] [req=<n>] [notify=waiters] "
		 "[value=<text>] [id=<tag>]"},
		{"LOCK a ttl=", DL_EBADARG,
		 "option without a value: 'ttl'; usage: LOCK <name> "
		 "[<name> ...] [ttl=<duration>] [wait=<duration>|inf] "
		 "[mode=exclusive|shared] [limit=<n>] [warn=<duration>] "
		 "[delay=<duration>] [req=<n>] [notify=waiters] "
		 "[value=<text>] [id=<tag>]"},
		{"LOCK a b mode=shared", DL_EBADARG,
		 "several names take ttl=, wait=, req= and id= only: a "
		 "multi-lock takes every lock exclusive, as it finds it"},
		{"LOCK a b a", DL_EBADARG, "name given twice: 'a'"},
		{"LOCK a req=0", DL_EBADARG,
		 "req malformed: '0', a number from 1 to 18446744073709551615 "
		 "(one per request, the same when it is sent again)"},
		{"LOCK a notify=holders", DL_EBADARG,
		 "notify malformed: 'holders', takes waiters"},
		{"LOCK a ttl=2s warn=2s", DL_EBADARG,
		 "warn must be less than ttl: it is how much of the lease "
		 "remains when * EXPIRING is sent"},
		{"REFRESH a 1 warn=soon", DL_EBADARG,
		 "warn malformed: 'soon', takes a duration: a number and a "
		 "unit, ms (default), s, m or h, e.g. 30s"},
		{"UNLOCK a 1 warn=1s", DL_EBADARG,
		 "option not valid for this command: 'warn'; usage: UNLOCK "
		 "<name> <token> [id=<tag>]"},
		{"LOCK a mode=read", DL_EBADARG,
		 "mode malformed: 'read', takes exclusive or shared"},
		{"LOCK a limit=0", DL_EBADARG,
		 "limit out of range: '0', a number from 1 to 1024"},
		{"TRYLOCK a limit=1025", DL_EBADARG,
		 "limit out of range: '1025', a number from 1 to 1024"},
		{"LOCK a mode=shared limit=3", DL_EBADARG,
		 "mode=shared is for a lock (limit 1); the holders of a "
		 "semaphore (limit=<n>) each take a permit"},
		{"UNLOCK a 1 mode=shared", DL_EBADARG,
		 "option not valid for this command: 'mode'; usage: UNLOCK "
		 "<name> <token> [id=<tag>]"},
	};
	char line[DL_NAME_MAX + 16];
	struct dl_request r;
	const char *why;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc;

		why = NULL;
		rc = parse(cases[i].line, &r, &why);
		cr_assert_eq(rc, cases[i].err, "%s: %d", cases[i].line, rc);
		cr_assert_str_eq(why, cases[i].why, "%s", cases[i].line);
	}
	memcpy(line, "LOCK ", 5);
	memset(line + 5, 'a', DL_NAME_MAX + 1);
	line[5 + DL_NAME_MAX + 1] = '\0';
	cr_assert_eq(parse(line, &r, &why), DL_EBADARG);
	cr_assert_str_eq(why, "name out of range: 256 bytes, at most 255");
}

/* What an error quotes of the request is printable ASCII (other bytes as
 * '?'), at most 40 bytes, and never anything that followed AUTH. */
Test(proto, why_quotes_safely_and_never_the_secret)
{
	static const char *const lines[] = {
		"zz\x01\x7f\xff a",
		"LOCK a\x02\x1b[31m",
		"AUTH secret more of it",
		"AUTH secret more of it and more than eight words in all",
		"LOCK a ttl=" /* long */
		"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
	};
	struct dl_request r;
	const char *why;
	size_t i, j;

	for (i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		why = NULL;
		cr_assert_lt(parse(lines[i], &r, &why), 0, "%s", lines[i]);
		cr_assert_not_null(why);
		for (j = 0; why[j]; j++)
			cr_assert(why[j] >= 0x20 && why[j] <= 0x7e,
				  "byte %zu of \"%s\"", j, why);
		cr_assert_null(strstr(why, "more"), "why: %s", why);
		cr_assert_null(strstr(why, "secret"), "why: %s", why);
		cr_assert_lt(strlen(why), DL_WHY_MAX);
	}
	cr_assert_lt(parse(lines[4], &r, &why), 0);
	cr_assert(strstr(why, "'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz...'"),
		  "%s", why);
}

/* An ERR line with any of these texts is a valid reply for a client:
 * under DL_REPLY_ARGS_MAX words, no tag look-alike at its end. */
Test(proto, error_texts_parse_as_replies)
{
	static const char *const lines[] = {
		"LOCK",		 "LOCK a ttl=1x",    "LOCK a wait=x",
		"LOCKS limit=x", "LOCK a b c a",     "LOCK a b value=v",
		"FOO",		 "HELLO owner=\x01", "LOCK a ttl=0",
		"REFRESH a",	 "LOCKS by=x",	     "LOCKS after=a by=waiters",
	};
	size_t i;

	for (i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		struct dl_request r;
		struct dl_reply rep;
		const char *why;
		char buf[DL_REPLY_MAX];
		struct dl_fmt f;
		int rc = parse(lines[i], &r, &why), n;

		cr_assert_lt(rc, 0);
		dl_fmt_init(&f, buf, sizeof(buf));
		dl_fmt_word(&f, "ERR");
		dl_fmt_word(&f, dl_err_word(rc));
		dl_fmt_word(&f, why);
		n = dl_fmt_end(&f, DL_STR_NULL);
		cr_assert_gt(n, 2);
		cr_assert_eq(dl_parse_reply(buf, (size_t)n - 2, &rep), 0, "%s",
			     buf);
		cr_assert_eq(rep.tag.len, 0, "%s", buf);
	}
}

Test(proto, help_and_locks_requests)
{
	struct dl_request r;
	const char *why;

	cr_assert_eq(parse("help", &r, &why), 0);
	cr_assert_eq(r.verb, DL_VERB_HELP);
	cr_assert_eq(parse("HELP lock", &r, &why), 0);
	cr_assert_eq(r.arg.len, 4);
	cr_assert_eq(parse("LOCKS", &r, &why), 0);
	cr_assert_eq(r.verb, DL_VERB_LOCKS);
	cr_assert_eq(r.name.len, 0);
	cr_assert_eq(r.has_limit, 0);
	cr_assert_eq(parse("locks job/ limit=10 after=job/3 by=name", &r, &why),
		     0);
	cr_assert_eq(r.name.len, 4);
	cr_assert_eq(r.limit, 10);
	cr_assert_eq(r.after.len, 5);
	cr_assert_eq(r.by_waiters, 0);
	cr_assert_eq(parse("LOCKS by=WAITERS limit=5", &r, &why), 0);
	cr_assert_eq(r.by_waiters, 1);
}

Test(proto, durations_are_formatted_in_their_largest_exact_unit)
{
	char b[DL_DURATION_TEXT_MAX];

	cr_assert_str_eq(dl_format_duration(0, b), "0ms");
	cr_assert_str_eq(dl_format_duration(1500, b), "1500ms");
	cr_assert_str_eq(dl_format_duration(90000, b), "90s");
	cr_assert_str_eq(dl_format_duration(120000, b), "2m");
	cr_assert_str_eq(dl_format_duration(86400000, b), "24h");
	cr_assert_str_eq(dl_format_duration(UINT64_MAX, b),
			 "18446744073709551615ms");
}

Test(proto, tag_is_echoed_on_errors)
{
	static const struct {
		const char *line;
		int err;
	} cases[] = {
		{"FOO id=abc", DL_EUNKNOWNCMD},
		{"LOCK id=abc", DL_EBADFORMAT},
		{"LOCK a ttl=0 id=abc", DL_EBADARG},
		{"LOCK a wait=x ID=abc", DL_EBADARG},
		{"LOCK a b c d e f g h a id=abc", DL_EBADARG},
		{"id=abc", DL_EUNKNOWNCMD},
		{"PING id=abc id=other", DL_EBADARG},
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct dl_request r;
		const char *why;
		int rc = parse(cases[i].line, &r, &why);

		cr_assert_eq(rc, cases[i].err, "\"%s\": %d", cases[i].line, rc);
		cr_assert_str_eq(cstr(r.tag), "abc", "\"%s\"", cases[i].line);
	}
}

Test(proto, invalid_id_is_skipped_by_the_tag_prescan)
{
	struct dl_request r;
	const char *why;

	cr_assert_eq(parse("LOCK id=a=b id=good", &r, &why), DL_EBADARG);
	cr_assert_str_eq(cstr(r.tag), "good");
}

Test(proto, parsed_strings_point_into_the_line)
{
	static const char *const lines[] = {
		"LOCK a ttl=1 wait=2 id=3",
		"HELLO owner=me id=x",
		"AUTH s=t id=y",
		"PING pong",
		"UNLOCK n 5",
	};
	size_t i;

	for (i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		struct dl_request r;

		expect_ok(lines[i], &r);
		assert_within(&r, lines[i], strlen(lines[i]));
	}
}

/* ---- errors -------------------------------------------------------------- */

Test(proto, error_words_and_texts)
{
	static const char *const words[] = {
		"BAD_FORMAT", "UNKNOWN_COMMAND", "LINE_TOO_LONG", "BAD_ARG",
		"NOAUTH",     "LIMIT",		 "UNAVAILABLE",	  "INTERNAL",
		"NOT_ACTIVE", "INTERNAL",	 "INTERNAL",	  "INTERNAL",
		"BAD_ARG", /* DL_ERANGE */
		"DENIED",     "MOVED",
	};
	int e;

	char low[32];
	size_t i;
	int f;

	for (e = -1; e >= -DL_ERR_COUNT_; e--) {
		cr_assert_str_eq(dl_err_word(e), words[-e - 1], "code %d", e);
		cr_assert_str_neq(dl_strerror(e), "unknown error", "code %d",
				  e);
		/* the map is consistent: a code says its wire code's word and
		 * label, a wire code is its own, and the label is the word in
		 * lower case */
		cr_assert_str_eq(dl_err_word(e), dl_err_word(dl_err_wire(e)));
		cr_assert_str_eq(dl_err_label(e), dl_err_label(dl_err_wire(e)));
		cr_assert_eq(dl_err_wire(dl_err_wire(e)), dl_err_wire(e));
		for (i = 0; dl_err_word(e)[i] && i < sizeof(low) - 1; i++)
			low[i] =
				(char)tolower((unsigned char)dl_err_word(e)[i]);
		low[i] = '\0';
		cr_assert_str_eq(dl_err_label(e), low, "code %d", e);
		/* two wire codes never share a word */
		for (f = -1; f > e; f--)
			if (dl_err_wire(f) == f && dl_err_wire(e) == e)
				cr_assert_str_neq(dl_err_word(f),
						  dl_err_word(e));
	}
	cr_assert_eq(dl_err_wire(DL_ERANGE), DL_EBADARG);
	cr_assert_eq(dl_err_wire(DL_ENOMEM), DL_EINTERNAL);
	cr_assert_eq(dl_err_wire(DL_ENOTACTIVE), DL_ENOTACTIVE);
	cr_assert_eq(dl_err_wire(-99), DL_EINTERNAL);
	cr_assert_str_eq(dl_err_word(DL_EBADARG), "BAD_ARG");
	cr_assert_str_eq(dl_err_word(DL_ENOMEM), "INTERNAL");
	cr_assert_str_eq(dl_err_word(-99), "INTERNAL");
	cr_assert_str_eq(dl_strerror(-99), "unknown error");
	cr_assert_str_eq(dl_strerror(1), "unknown error");
	cr_assert_str_neq(dl_strerror(DL_ENOSPC), dl_strerror(DL_EPROTO));
	cr_assert_str_neq(dl_strerror(DL_ENOMEM), dl_strerror(DL_EINTERNAL));
}

/* ---- formatting and replies ---------------------------------------------- */

/* Formats into buf, checks the CRLF, and parses it back (CRLF removed). */
static void end_and_parse(struct dl_fmt *f, struct dl_str tag, const char *want,
			  struct dl_reply *r)
{
	int n = dl_fmt_end(f, tag);

	cr_assert_gt(n, 1, "dl_fmt_end: %d", n);
	cr_assert_str_eq(f->buf, want);
	cr_assert_eq((size_t)n, strlen(want));
	cr_assert_eq(dl_parse_reply(f->buf, (size_t)n - 2, r), 0, "\"%s\"",
		     want);
}

Test(proto, granted_reply_round_trip)
{
	char buf[DL_REPLY_MAX];
	struct dl_fmt f;
	struct dl_reply r;
	uint64_t v;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "OK");
	dl_fmt_word(&f, "GRANTED");
	dl_fmt_str(&f, DL_STR_LIT("a"));
	dl_fmt_u64(&f, 7);
	dl_fmt_u64(&f, 3000);
	end_and_parse(&f, DL_STR_LIT("x"), "OK GRANTED a 7 3000 id=x\r\n", &r);
	cr_assert_eq(r.kind, DL_REPLY_OK);
	cr_assert_str_eq(cstr(r.word), "GRANTED");
	cr_assert_eq(r.argc, 3);
	cr_assert_str_eq(cstr(r.argv[0]), "a");
	cr_assert_eq(dl_reply_u64(&r, 1, &v), 0);
	cr_assert_eq(v, 7);
	cr_assert_eq(dl_reply_u64(&r, 2, &v), 0);
	cr_assert_eq(v, 3000);
	cr_assert_eq(dl_reply_u64(&r, 0, &v), DL_EPROTO);
	cr_assert_eq(dl_reply_u64(&r, 3, &v), DL_EPROTO);
	cr_assert_eq(dl_reply_u64(&r, -1, &v), DL_EPROTO);
	cr_assert_str_eq(cstr(r.tag), "x");
	cr_assert_str_eq(cstr(r.rest), "a 7 3000");
}

Test(proto, err_reply_round_trip_keeps_free_text)
{
	char buf[DL_REPLY_MAX];
	struct dl_fmt f;
	struct dl_reply r;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "ERR");
	dl_fmt_word(&f, dl_err_word(DL_EBADARG));
	dl_fmt_word(&f, "bad ttl");
	end_and_parse(&f, DL_STR_LIT("q"), "ERR BAD_ARG bad ttl id=q\r\n", &r);
	cr_assert_eq(r.kind, DL_REPLY_ERR);
	cr_assert_str_eq(cstr(r.word), "BAD_ARG");
	cr_assert_eq(r.argc, 2);
	cr_assert_str_eq(cstr(r.rest), "bad ttl");
	cr_assert_str_eq(cstr(r.tag), "q");
}

Test(proto, event_reply_round_trip)
{
	char buf[DL_REPLY_MAX];
	struct dl_fmt f;
	struct dl_reply r;
	uint64_t v;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "*");
	dl_fmt_word(&f, "EXPIRED");
	dl_fmt_str(&f, DL_STR_LIT("a"));
	dl_fmt_u64(&f, 9);
	end_and_parse(&f, DL_STR_NULL, "* EXPIRED a 9\r\n", &r);
	cr_assert_eq(r.kind, DL_REPLY_EVENT);
	cr_assert_str_eq(cstr(r.word), "EXPIRED");
	cr_assert_eq(r.argc, 2);
	cr_assert_eq(dl_reply_u64(&r, 1, &v), 0);
	cr_assert_eq(v, 9);
	cr_assert_eq(r.tag.len, 0);
}

Test(proto, pong_reply_round_trip_with_and_without_text)
{
	char buf[DL_REPLY_MAX];
	struct dl_fmt f;
	struct dl_reply r;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "OK");
	dl_fmt_word(&f, "PONG");
	end_and_parse(&f, DL_STR_NULL, "OK PONG\r\n", &r);
	cr_assert_eq(r.kind, DL_REPLY_OK);
	cr_assert_str_eq(cstr(r.word), "PONG");
	cr_assert_eq(r.argc, 0);
	cr_assert_eq(r.rest.len, 0);
	cr_assert_eq(r.tag.len, 0);

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "OK");
	dl_fmt_word(&f, "PONG");
	dl_fmt_str(&f, DL_STR_LIT("hello"));
	end_and_parse(&f, DL_STR_LIT("p"), "OK PONG hello id=p\r\n", &r);
	cr_assert_str_eq(cstr(r.rest), "hello");
	cr_assert_str_eq(cstr(r.tag), "p");
}

Test(proto, busy_reply_round_trip)
{
	char buf[DL_REPLY_MAX];
	struct dl_fmt f;
	struct dl_reply r;
	uint64_t v;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "NO");
	dl_fmt_word(&f, "BUSY");
	dl_fmt_str(&f, DL_STR_LIT("a"));
	dl_fmt_u64(&f, 120);
	end_and_parse(&f, DL_STR_NULL, "NO BUSY a 120\r\n", &r);
	cr_assert_eq(r.kind, DL_REPLY_NO);
	cr_assert_str_eq(cstr(r.word), "BUSY");
	cr_assert_eq(dl_reply_u64(&r, 1, &v), 0);
	cr_assert_eq(v, 120);
}

Test(proto, status_reply_key_value_words)
{
	char buf[DL_REPLY_MAX];
	struct dl_fmt f;
	struct dl_reply r;
	struct dl_str v;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "OK");
	dl_fmt_word(&f, "STATUS");
	dl_fmt_str(&f, DL_STR_LIT("a"));
	dl_fmt_kv_str(&f, "state", DL_STR_LIT("held"));
	dl_fmt_kv_u64(&f, "token", 17000000000000000001ULL);
	dl_fmt_kv_u64(&f, "ttl_ms", 0);
	dl_fmt_kv_u64(&f, "count", 2);
	dl_fmt_kv_str(&f, "owner", DL_STR_LIT("me"));
	dl_fmt_kv_u64(&f, "waiters", 3);
	end_and_parse(&f, DL_STR_LIT("s"),
		      "OK STATUS a state=held token=17000000000000000001 "
		      "ttl_ms=0 count=2 owner=me waiters=3 id=s\r\n",
		      &r);
	cr_assert_eq(r.argc, 7);
	cr_assert_eq(dl_reply_kv(&r, "state", &v), 0);
	cr_assert_str_eq(cstr(v), "held");
	cr_assert_eq(dl_reply_kv(&r, "token", &v), 0);
	cr_assert_str_eq(cstr(v), "17000000000000000001");
	cr_assert_eq(dl_reply_kv(&r, "owner", &v), 0);
	cr_assert_str_eq(cstr(v), "me");
	cr_assert_eq(dl_reply_kv(&r, "waiters", &v), 0);
	cr_assert_str_eq(cstr(v), "3");
	cr_assert_eq(dl_reply_kv(&r, "stat", &v), DL_EPROTO);
	cr_assert_eq(dl_reply_kv(&r, "STATE", &v), DL_EPROTO);
	cr_assert_eq(dl_reply_kv(&r, "id", &v), DL_EPROTO,
		     "the tag is not among argv");
}

Test(proto, reply_rest_trims_blanks_and_the_tag)
{
	static const char line[] = "ERR  BAD_ARG \t some  text \t id=q  ";
	struct dl_reply r;

	cr_assert_eq(dl_parse_reply(line, sizeof(line) - 1, &r), 0);
	cr_assert_str_eq(cstr(r.word), "BAD_ARG");
	cr_assert_str_eq(cstr(r.rest), "some  text");
	cr_assert_str_eq(cstr(r.tag), "q");
	cr_assert_eq(r.argc, 2);
}

/* Body lines (LOCKS, HOLDERS): the first word is whatever the line is
 * about, even a name that looks like a reply word or carries '='; a last
 * id= is a key like any other, not a tag; too many words keep the first. */
Test(proto, body_lines_split_into_a_first_word_and_keys)
{
	static const char line[] = "OK state=held owner=a-b token=7 id=x";
	char many[2048];
	struct dl_reply r;
	struct dl_str v;
	size_t k = 0;
	int i;

	cr_assert_eq(dl_parse_body(line, sizeof(line) - 1, &r), 0);
	cr_assert_eq(r.kind, DL_REPLY_BODY);
	cr_assert_str_eq(cstr(r.word), "OK");
	cr_assert_eq(r.argc, 4);
	cr_assert_eq(dl_reply_kv(&r, "owner", &v), 0);
	cr_assert_str_eq(cstr(v), "a-b");
	cr_assert_eq(dl_reply_kv(&r, "id", &v), 0);
	cr_assert_str_eq(cstr(v), "x");
	cr_assert_eq(r.tag.len, 0);

	k += (size_t)snprintf(many, sizeof(many), "holder o");
	for (i = 0; i < 40; i++)
		k += (size_t)snprintf(many + k, sizeof(many) - k, " k%d=%d", i,
				      i);
	cr_assert_eq(dl_parse_body(many, k, &r), 0);
	cr_assert_eq(r.argc, DL_REPLY_ARGS_MAX);
	cr_assert_eq(dl_reply_kv(&r, "k0", &v), 0);
	cr_assert_neq(dl_reply_kv(&r, "k39", &v), 0);

	cr_assert_neq(dl_parse_body("  ", 2, &r), 0);
	cr_assert_neq(dl_parse_body("a\0b", 3, &r), 0);
}

Test(proto, reply_id_only_counts_as_tag_when_last)
{
	static const char line[] = "OK PONG id=a b";
	struct dl_reply r;

	cr_assert_eq(dl_parse_reply(line, sizeof(line) - 1, &r), 0);
	cr_assert_eq(r.tag.len, 0);
	cr_assert_eq(r.argc, 2);
	cr_assert_str_eq(cstr(r.rest), "id=a b");
	cr_assert_eq(dl_parse_reply("OK id=x", 7, &r), 0);
	cr_assert_str_eq(cstr(r.word), "id=x");
	cr_assert_eq(r.tag.len, 0);
}

Test(proto, non_replies_are_eproto)
{
	static const char *const bad[] = {
		"",	 "   ",	 "OK",	  "OK  ", "ok GRANTED", "OKAY GRANTED",
		"HELLO", "** X", "+OK X", "ERR",
	};
	struct dl_reply r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(dl_parse_reply(bad[i], strlen(bad[i]), &r),
			     DL_EPROTO, "\"%s\"", bad[i]);
	cr_assert_eq(dl_parse_reply("OK A\0B", 6, &r), DL_EPROTO);
}

Test(proto, reply_with_too_many_words_is_eproto)
{
	char line[512];
	struct dl_reply r;
	size_t n;
	int i;

	n = (size_t)sprintf(line, "OK STATS");
	for (i = 0; i < DL_REPLY_ARGS_MAX; i++)
		n += (size_t)sprintf(line + n, " %d", i);
	cr_assert_eq(dl_parse_reply(line, n, &r), 0);
	cr_assert_eq(r.argc, DL_REPLY_ARGS_MAX);
	n += (size_t)sprintf(line + n, " id=t");
	cr_assert_eq(dl_parse_reply(line, n, &r), 0, "the tag is not counted");
	cr_assert_eq(r.argc, DL_REPLY_ARGS_MAX);
	cr_assert_str_eq(cstr(r.tag), "t");
	n += (size_t)sprintf(line + n, " x");
	cr_assert_eq(dl_parse_reply(line, n, &r), DL_EPROTO);
}

Test(proto, fmt_overflow_is_enospc_and_sticky)
{
	char buf[8];
	struct dl_fmt f;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "OK");
	dl_fmt_word(&f, "GRANTED");
	dl_fmt_word(&f, "a"); /* would fit on its own; overflow is sticky */
	cr_assert_eq(dl_fmt_end(&f, DL_STR_NULL), DL_ENOSPC);

	dl_fmt_init(&f, buf, 4);
	dl_fmt_word(&f, "OK");
	cr_assert_eq(dl_fmt_end(&f, DL_STR_LIT("t")), DL_ENOSPC,
		     "the tag must fit too");

	dl_fmt_init(&f, buf, 3);
	dl_fmt_word(&f, "OK");
	cr_assert_eq(dl_fmt_end(&f, DL_STR_NULL), DL_ENOSPC,
		     "the CRLF must fit too");
}

Test(proto, fmt_exact_fit_returns_length_without_nul)
{
	char buf[5] = "#####";
	struct dl_fmt f;

	dl_fmt_init(&f, buf, 4);
	dl_fmt_word(&f, "OK");
	cr_assert_eq(dl_fmt_end(&f, DL_STR_NULL), 4);
	cr_assert_eq(memcmp(buf, "OK\r\n#", 5), 0, "wrote past the end");

	dl_fmt_init(&f, buf, 5);
	dl_fmt_word(&f, "OK");
	cr_assert_eq(dl_fmt_end(&f, DL_STR_NULL), 4);
	cr_assert_str_eq(buf, "OK\r\n");
}

Test(proto, u64_to_dec_matches_printf)
{
	static const uint64_t vals[] = {
		0,
		1,
		9,
		10,
		11,
		99,
		100,
		101,
		999,
		1000,
		12345,
		4294967295ULL,
		4294967296ULL,
		9999999999999999999ULL,
		10000000000000000000ULL,
		UINT64_MAX,
	};
	size_t i;

	for (i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		char got[21], want[32];
		size_t n = dl_u64_to_dec(vals[i], got);

		got[n] = '\0';
		snprintf(want, sizeof(want), "%" PRIu64, vals[i]);
		cr_assert_str_eq(got, want);
	}
}

/* ---- line splitting ------------------------------------------------------ */

/* What the splitter produced, in order: one entry per non-NONE result. */
struct lb_event {
	enum dl_lb_result kind;
	size_t len;
	char *line; /* a copy, for DL_LB_LINE */
};

struct lb_log {
	struct lb_event ev[4096];
	size_t n;
};

static void lb_log_free(struct lb_log *log)
{
	size_t i;

	for (i = 0; i < log->n; i++)
		free(log->ev[i].line);
	log->n = 0;
}

/* Feed data to a fresh splitter, `chunk` bytes per read at most, draining
 * lines after each read as the server does; stops at DL_LB_OVERFLOW. */
static void lb_feed(const char *data, size_t n, size_t chunk,
		    struct lb_log *log)
{
	static struct dl_linebuf lb;
	size_t off = 0;

	dl_linebuf_init(&lb);
	log->n = 0;
	while (off < n) {
		size_t avail, k;
		char *space = dl_linebuf_space(&lb, &avail);
		enum dl_lb_result res;

		cr_assert_geq(avail, 1);
		k = n - off < chunk ? n - off : chunk;
		k = k < avail ? k : avail;
		memcpy(space, data + off, k);
		dl_linebuf_commit(&lb, k);
		off += k;
		for (;;) {
			char *line;
			size_t len;
			struct lb_event *e;

			res = dl_linebuf_next(&lb, &line, &len);
			if (res == DL_LB_NONE)
				break;
			cr_assert_lt(log->n, 4096);
			e = &log->ev[log->n++];
			e->kind = res;
			e->len = 0;
			e->line = NULL;
			if (res == DL_LB_LINE) {
				cr_assert_leq(len, DL_LINE_MAX);
				cr_assert_eq(line[len], '\0');
				e->len = len;
				e->line = malloc(len + 1);
				memcpy(e->line, line, len + 1);
			}
			if (res == DL_LB_OVERFLOW) {
				/* sticky: it never recovers */
				cr_assert_eq(dl_linebuf_next(&lb, &line, &len),
					     DL_LB_OVERFLOW);
				return;
			}
		}
	}
}

static void assert_same_log(const struct lb_log *a, const struct lb_log *b,
			    size_t chunk)
{
	size_t i;

	cr_assert_eq(a->n, b->n, "chunk %zu: %zu events vs %zu", chunk, a->n,
		     b->n);
	for (i = 0; i < a->n; i++) {
		cr_assert_eq(a->ev[i].kind, b->ev[i].kind,
			     "chunk %zu, event %zu", chunk, i);
		cr_assert_eq(a->ev[i].len, b->ev[i].len, "chunk %zu, event %zu",
			     chunk, i);
		if (a->ev[i].line)
			cr_assert_eq(memcmp(a->ev[i].line, b->ev[i].line,
					    a->ev[i].len),
				     0, "chunk %zu, event %zu", chunk, i);
	}
}

static struct lb_log log_a, log_b;

/* A line of n bytes of c followed by the ending `end` */
static size_t put_line(char *buf, char c, size_t n, const char *end)
{
	memset(buf, c, n);
	memcpy(buf + n, end, strlen(end));
	return n + strlen(end);
}

Test(proto, linebuf_1024_byte_line_accepted_1025_too_long)
{
	static const char *const ends[] = {"\n", "\r\n"};
	static char data[8192];
	size_t i;

	for (i = 0; i < 2; i++) {
		size_t n = 0;

		n += put_line(data + n, 'a', DL_LINE_MAX, ends[i]);
		n += put_line(data + n, 'b', DL_LINE_MAX + 1, ends[i]);
		n += put_line(data + n, 'c', 1, ends[i]);
		lb_feed(data, n, n, &log_a);
		cr_assert_eq(log_a.n, 3);
		cr_assert_eq(log_a.ev[0].kind, DL_LB_LINE);
		cr_assert_eq(log_a.ev[0].len, DL_LINE_MAX);
		cr_assert_eq(log_a.ev[1].kind, DL_LB_TOOLONG);
		cr_assert_eq(log_a.ev[2].kind, DL_LB_LINE);
		cr_assert_str_eq(log_a.ev[2].line, "c");
		lb_log_free(&log_a);
	}
}

Test(proto, linebuf_crlf_and_lf_give_identical_lines)
{
	static const char lf[] = "LOCK a\nPING x\n\nQUIT\n";
	static const char crlf[] = "LOCK a\r\nPING x\r\n\r\nQUIT\r\n";

	lb_feed(lf, sizeof(lf) - 1, 4096, &log_a);
	lb_feed(crlf, sizeof(crlf) - 1, 4096, &log_b);
	assert_same_log(&log_a, &log_b, 4096);
	cr_assert_eq(log_a.n, 4);
	cr_assert_str_eq(log_a.ev[0].line, "LOCK a");
	cr_assert_str_eq(log_a.ev[2].line, "");
	lb_log_free(&log_a);
	lb_log_free(&log_b);
}

Test(proto, linebuf_strips_only_one_cr)
{
	static const char data[] = "a\r\r\nb\rc\n";

	lb_feed(data, sizeof(data) - 1, 4096, &log_a);
	cr_assert_eq(log_a.n, 2);
	cr_assert_str_eq(log_a.ev[0].line, "a\r");
	cr_assert_str_eq(log_a.ev[1].line, "b\rc");
	lb_log_free(&log_a);
}

Test(proto, linebuf_many_lines_in_one_read)
{
	static char data[DL_INBUF_SIZE];
	size_t n = 0, i;

	for (i = 0; i < 300; i++)
		n += (size_t)sprintf(data + n, "PING %zu\n", i);
	cr_assert_leq(n, sizeof(data));
	lb_feed(data, n, sizeof(data), &log_a);
	cr_assert_eq(log_a.n, 300);
	for (i = 0; i < 300; i++) {
		struct dl_request r;
		const char *why;
		char want[16];

		cr_assert_eq(log_a.ev[i].kind, DL_LB_LINE);
		cr_assert_eq(dl_parse_request(log_a.ev[i].line, log_a.ev[i].len,
					      &r, &why),
			     0);
		sprintf(want, "%zu", i);
		cr_assert_str_eq(cstr(r.arg), want);
	}
	lb_log_free(&log_a);
}

Test(proto, linebuf_3000_byte_line_too_long_then_next_line_parses)
{
	static char data[4000];
	static const size_t chunks[] = {1, 100, 4096};
	size_t n = 0, c;

	n += put_line(data, 'x', 3000, "\r\n");
	n += put_line(data + n, 'y', 0, "LOCK a ttl=1s\n");
	for (c = 0; c < 3; c++) {
		struct dl_request r;
		const char *why;

		lb_feed(data, n, chunks[c], &log_a);
		cr_assert_eq(log_a.n, 2, "chunk %zu", chunks[c]);
		cr_assert_eq(log_a.ev[0].kind, DL_LB_TOOLONG);
		cr_assert_eq(log_a.ev[1].kind, DL_LB_LINE);
		cr_assert_eq(dl_parse_request(log_a.ev[1].line, log_a.ev[1].len,
					      &r, &why),
			     0);
		cr_assert_eq(r.ttl_ms, 1000);
		lb_log_free(&log_a);
	}
}

Test(proto, linebuf_200k_without_lf_overflows)
{
	static const size_t chunks[] = {1, 4096};
	size_t n = 200 * 1024, c;
	char *data = malloc(n);

	cr_assert_not_null(data);
	memset(data, 'z', n);

	for (c = 0; c < 2; c++) {
		lb_feed(data, n, chunks[c], &log_a);
		cr_assert_eq(log_a.n, 1, "chunk %zu", chunks[c]);
		cr_assert_eq(log_a.ev[0].kind, DL_LB_OVERFLOW);
	}
	free(data);
}

Test(proto, linebuf_discard_limit_is_chunking_independent)
{
	static const size_t chunks[] = {1, 7, 1000, 4096};
	char *data = malloc(DL_LINE_DISCARD_MAX + 16);
	size_t c;

	cr_assert_not_null(data);
	for (c = 0; c < 4; c++) {
		/* one byte short of the limit: still just too long */
		size_t n =
			put_line(data, 'q', DL_LINE_DISCARD_MAX - 1, "\nA\n");

		lb_feed(data, n, chunks[c], &log_a);
		cr_assert_eq(log_a.n, 2, "chunk %zu", chunks[c]);
		cr_assert_eq(log_a.ev[0].kind, DL_LB_TOOLONG);
		cr_assert_str_eq(log_a.ev[1].line, "A");
		lb_log_free(&log_a);

		/* the limit itself, even with the LF in the same read */
		n = put_line(data, 'q', DL_LINE_DISCARD_MAX, "\nA\n");
		lb_feed(data, n, chunks[c], &log_a);
		cr_assert_eq(log_a.n, 1, "chunk %zu", chunks[c]);
		cr_assert_eq(log_a.ev[0].kind, DL_LB_OVERFLOW, "chunk %zu: %d",
			     chunks[c], log_a.ev[0].kind);
	}
	free(data);
}

Test(proto, linebuf_chunked_feeding_is_equivalent)
{
	static char data[32768];
	static const size_t chunks[] = {1, 2, 3, 7, 64, 1000, 1025, 1026, 4095};
	size_t n = 0, c;

	n += put_line(data + n, 'a', 0, "PING one\r\n");
	n += put_line(data + n, 'b', DL_LINE_MAX, "\n");
	n += put_line(data + n, 'c', DL_LINE_MAX, "\r\n");
	n += put_line(data + n, 'd', DL_LINE_MAX + 1, "\n");
	n += put_line(data + n, 'e', DL_LINE_MAX + 1, "\r\n");
	n += put_line(data + n, 'f', DL_LINE_MAX + 2, "\n");
	n += put_line(data + n, 'g', 0, "\n\r\n\n");
	n += put_line(data + n, 'h', 5000, "\n");
	n += put_line(data + n, 'i', 3, "\r\r\n");
	n += put_line(data + n, 'j', 9000, "\r\n");
	for (c = 0; c < 200; c++)
		n += (size_t)sprintf(data + n, "LOCK l%zu\n", c);
	n += put_line(data + n, 'k', 17, ""); /* unterminated tail */
	cr_assert_lt(n, sizeof(data));

	lb_feed(data, n, SIZE_MAX, &log_a);
	cr_assert_eq(log_a.n, 1 + 2 + 3 + 3 + 1 + 1 + 1 + 200);
	for (c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		lb_feed(data, n, chunks[c], &log_b);
		assert_same_log(&log_a, &log_b, chunks[c]);
		lb_log_free(&log_b);
	}
	lb_log_free(&log_a);
}

Test(proto, linebuf_passes_nul_bytes_to_the_parser)
{
	static const char data[] = "LOCK a\0b\nPING\n";
	struct dl_request r;
	const char *why;

	lb_feed(data, sizeof(data) - 1, 4096, &log_a);
	cr_assert_eq(log_a.n, 2);
	cr_assert_eq(log_a.ev[0].len, 8);
	cr_assert_eq(
		dl_parse_request(log_a.ev[0].line, log_a.ev[0].len, &r, &why),
		DL_EBADFORMAT);
	cr_assert_eq(
		dl_parse_request(log_a.ev[1].line, log_a.ev[1].len, &r, &why),
		0);
	lb_log_free(&log_a);
}

Test(proto, linebuf_space_is_never_empty_after_draining)
{
	struct dl_linebuf lb;
	size_t avail, i;
	char *line;
	size_t len;

	dl_linebuf_init(&lb);
	for (i = 0; i < 10000; i++) {
		char *p = dl_linebuf_space(&lb, &avail);

		cr_assert_geq(avail, 1);
		p[0] = (i % 3000 == 2999) ? '\n' : 'w';
		dl_linebuf_commit(&lb, 1);
		while (dl_linebuf_next(&lb, &line, &len) != DL_LB_NONE)
			;
	}
	dl_linebuf_space(&lb, &avail);
	cr_assert_geq(avail, DL_INBUF_SIZE - DL_LINE_MAX - 1);
}

Test(proto, ping_text_with_control_bytes_is_bad_arg_so_it_is_never_echoed)
{
	struct dl_request req;
	const char *why = NULL;
	const char line[] = "PING a\rb\x01";

	cr_assert_eq(dl_parse_request(line, sizeof(line) - 1, &req, &why),
		     DL_EBADARG);
	cr_assert(why != NULL);
	cr_assert_eq(dl_parse_request("PING ok!", 8, &req, &why), 0);
	cr_assert_eq(req.arg.len, 3);
}

Test(proto, lock_takes_a_mode_and_a_limit)
{
	struct dl_request r;
	const char *why;

	cr_assert_eq(parse("LOCK a mode=shared ttl=5s", &r, &why), 0);
	cr_assert(r.shared);
	cr_assert(!r.has_limit);
	cr_assert_eq(parse("LOCK a MODE=Exclusive", &r, &why), 0);
	cr_assert(!r.shared);
	cr_assert_eq(parse("TRYLOCK a limit=1024 id=t", &r, &why), 0);
	cr_assert(r.has_limit);
	cr_assert_eq(r.limit, 1024);
	cr_assert_eq(r.wait_ms, 0);
	cr_assert_eq(parse("LOCK a mode=shared limit=1 wait=inf ttl=1s id=x",
			   &r, &why),
		     0);
	cr_assert(r.shared);
	cr_assert_eq(r.limit, 1);
	/* LOCKS keeps its own range for limit= */
	cr_assert_eq(parse("LOCKS limit=1001", &r, &why), DL_EBADARG);
	cr_assert_eq(parse("HOLDERS a id=q", &r, &why), 0);
	cr_assert_eq(r.verb, DL_VERB_HOLDERS);
	cr_assert_eq(r.name.len, 1);
	cr_assert_eq(parse("HOLDERS", &r, &why), DL_EBADFORMAT);
}

Test(proto, watch_takes_a_name_or_a_prefix_ending_in_a_star)
{
	struct dl_request r;

	expect_ok("WATCH jobs/nightly id=w1", &r);
	cr_assert_eq(r.verb, DL_VERB_WATCH);
	cr_assert_str_eq(cstr(r.name), "jobs/nightly");
	cr_assert(!r.prefix);
	cr_assert_str_eq(cstr(r.tag), "w1");
	expect_ok("watch jobs/*", &r);
	cr_assert_str_eq(cstr(r.name), "jobs/");
	cr_assert(r.prefix);
	/* "*" alone: every name */
	expect_ok("WATCH *", &r);
	cr_assert_eq(r.name.len, 0);
	cr_assert(r.prefix);
	/* only the last '*' makes a prefix: "a**" watches names from "a*" */
	expect_ok("UNWATCH a**", &r);
	cr_assert_eq(r.verb, DL_VERB_UNWATCH);
	cr_assert_str_eq(cstr(r.name), "a*");
	cr_assert(r.prefix);
	expect_ok("UNWATCH a*b", &r);
	cr_assert_str_eq(cstr(r.name), "a*b");
	cr_assert(!r.prefix);
	expect_err("WATCH", DL_EBADFORMAT);
	expect_err("UNWATCH", DL_EBADFORMAT);
	expect_err("WATCH a b", DL_EBADARG);
	expect_err("WATCH a ttl=5s", DL_EBADARG);
	expect_err("WATCH a\x01*", DL_EBADARG);
}

Test(proto, a_watch_pattern_is_at_most_a_name_long)
{
	char line[DL_LINE_MAX];
	struct dl_request r;

	snprintf(line, sizeof(line), "WATCH %s*", rep('p', DL_NAME_MAX - 1));
	expect_ok(line, &r);
	cr_assert_eq(r.name.len, DL_NAME_MAX - 1);
	snprintf(line, sizeof(line), "WATCH %s*", rep('p', DL_NAME_MAX));
	expect_err(line, DL_EBADARG);
}

/* ---- a client's description (HELLO host= pid= cmd=, proto/desc.h) ---- */

Test(proto, hello_carries_a_description_whose_spaces_are_escaped)
{
	struct dl_request r;

	expect_ok("HELLO owner=deploy-7 host=web3 pid=4242 cmd=make%20deploy "
		  "id=h",
		  &r);
	cr_assert(r.has_desc);
	cr_assert_str_eq(cstr(r.owner), "deploy-7");
	cr_assert_str_eq(cstr(r.desc_host), "web3");
	cr_assert_eq(r.desc_pid, 4242);
	cr_assert_str_eq(cstr(r.desc_cmd), "make%20deploy");
	cr_assert_str_eq(cstr(r.tag), "h");
	expect_ok("HELLO cmd=a=b%25", &r);
	cr_assert(r.has_desc);
	cr_assert_eq(r.desc_host.len, 0);
	cr_assert_eq(r.desc_pid, 0);
	cr_assert_str_eq(cstr(r.desc_cmd), "a=b%25");
	expect_ok("HELLO owner=x", &r);
	cr_assert(!r.has_desc);
	/* only HELLO takes them */
	expect_err("LOCK a host=web3", DL_EBADARG);
}

Test(proto, a_description_with_a_control_byte_or_a_bad_escape_is_bad_arg)
{
	static const char *const bad[] = {
		"HELLO host=a%0Ab",	 /* an escaped line break */
		"HELLO cmd=rm%0D",	 /* an escaped CR */
		"HELLO cmd=a%7F",	 /* DEL */
		"HELLO cmd=%C3%A9",	 /* UTF-8, even escaped */
		"HELLO cmd=50%",	 /* a '%' that escapes nothing */
		"HELLO cmd=50%2",	 /* half an escape */
		"HELLO cmd=%zz",	 /* not hex */
		"HELLO host=\x01",	 /* a control byte as it is */
		"HELLO cmd=caf\xc3\xa9", /* a byte above 0x7e */
		"HELLO pid=0",		 "HELLO pid=-1", "HELLO pid=2147483648",
		"HELLO pid=12ab",	 "HELLO host=",	 "HELLO host=a host=b",
	};
	struct dl_request r;
	const char *why;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_err(bad[i], DL_EBADARG);
	parse("HELLO host=a%0Ab", &r, &why);
	cr_assert(strstr(why, "host malformed") != NULL, "%s", why);
	cr_assert(strstr(why, "%20") != NULL, "says how: %s", why);
	cr_assert(!strpbrk(why, "\r\n"), "%s", why);
	expect_ok("HELLO pid=2147483647 cmd=%7E%20%21", &r);
	cr_assert_eq(r.desc_pid, 2147483647);
}

Test(proto, a_description_past_its_limit_is_bad_arg_at_the_limit_accepted)
{
	char line[DL_LINE_MAX];
	struct dl_request r;
	const char *why;

	snprintf(line, sizeof(line), "HELLO host=%s",
		 rep('h', DL_DESC_HOST_MAX + 1));
	expect_err(line, DL_EBADARG);
	parse(line, &r, &why);
	cr_assert(strstr(why, "host out of range: 65 bytes, at most 64"), "%s",
		  why);
	snprintf(line, sizeof(line), "HELLO host=%s",
		 rep('h', DL_DESC_HOST_MAX));
	expect_ok(line, &r);
	snprintf(line, sizeof(line), "HELLO cmd=%s",
		 rep('c', DL_DESC_CMD_MAX + 1));
	expect_err(line, DL_EBADARG);
	snprintf(line, sizeof(line), "HELLO cmd=%s", rep('c', DL_DESC_CMD_MAX));
	expect_ok(line, &r);
	/* escapes count as sent: 43 escaped spaces are 129 bytes */
	line[0] = '\0';
	strcat(line, "HELLO cmd=");
	for (int i = 0; i < 43; i++)
		strcat(line, "%20");
	expect_err(line, DL_EBADARG);
	/* the longest HELLO fits a line */
	snprintf(line, sizeof(line), "HELLO owner=%s key=%s host=%s pid=%d ",
		 rep('o', DL_OWNER_MAX), rep('k', DL_OWNER_SECRET_MAX),
		 rep('h', DL_DESC_HOST_MAX), DL_DESC_PID_MAX);
	snprintf(line + strlen(line), sizeof(line) - strlen(line),
		 "cmd=%s id=%s", rep('c', DL_DESC_CMD_MAX),
		 rep('t', DL_TAG_MAX));
	cr_assert_lt(strlen(line), DL_LINE_MAX);
	expect_ok(line, &r);
	cr_assert_eq(r.desc_cmd.len, DL_DESC_CMD_MAX);
}

Test(proto, encode_escapes_spaces_replaces_the_unsayable_and_cuts_whole)
{
	char out[DL_DESC_CMD_MAX], text[DL_DESC_CMD_MAX + 1];
	size_t n;

	n = dl_desc_encode("make deploy 100%", 16, out, sizeof(out));
	cr_assert_eq(n, 22);
	cr_assert_eq(memcmp(out, "make%20deploy%20100%25", n), 0);
	cr_assert_eq(dl_desc_check(out, n, DL_DESC_CMD_MAX), 0);
	dl_desc_decode(out, n, text, sizeof(text));
	cr_assert_str_eq(text, "make deploy 100%");
	/* a line break, a tab, UTF-8: '?' each, never sent as they are */
	n = dl_desc_encode("a\nb\tc\xc3\xa9", 7, out, sizeof(out));
	cr_assert_eq(n, 7);
	cr_assert_eq(memcmp(out, "a?b?c??", n), 0);
	cr_assert_eq(dl_desc_check(out, n, DL_DESC_CMD_MAX), 0);
	/* cut at max, never inside an escape */
	n = dl_desc_encode("ab cd", 5, out, 4);
	cr_assert_eq(n, 2, "\"ab%%2\" would be half an escape: %zu", n);
	n = dl_desc_encode("ab cd", 5, out, 5);
	cr_assert_eq(n, 5);
	cr_assert_eq(memcmp(out, "ab%20", 5), 0);
	cr_assert_eq(dl_desc_encode("", 0, out, sizeof(out)), 0);
	/* decoding what a server should never send shows it safely */
	dl_desc_decode("a\x1b[2Jb%0A", 9, text, sizeof(text));
	cr_assert_str_eq(text, "a?[2Jb%0A");
	dl_desc_decode("abcdef", 6, text, 4);
	cr_assert_str_eq(text, "abc");
}

/* Each figure is what Redis 7.0's CLUSTER KEYSLOT answered for the key. */
Test(proto, key_slot_is_redis_clusters)
{
	static const struct {
		const char *key;
		unsigned slot;
	} k[] = {
		{"123456789", 12739},
		{"foo", 12182},
		{"bar", 5061},
		{"hello", 866},
		{"somekey", 11058},
		{"foo{hash_tag}", 2515},
		{"{user1000}.following", 3443},
		{"a{}b", 13694},    /* an empty tag is no tag */
		{"{}{x}", 3257},    /* nor is a later one */
		{"x{y}{z}", 12222}, /* the first tag counts */
		{"{", 4092},
		{"dlock:{orders}:lock:7", 105},
	};
	size_t i;

	for (i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		cr_expect_eq(dl_key_slot(k[i].key, strlen(k[i].key)), k[i].slot,
			     "%s", k[i].key);
	cr_expect_eq(dl_key_slot("dlock:{orders}:x", 16),
		     dl_key_slot("orders", 6));
}

Test(proto, hash_tag_is_the_first_braces_with_bytes_between)
{
	size_t off = 99, n = 99;

	cr_assert(dl_hash_tag("a{bc}d", 6, &off, &n));
	cr_expect_eq(off, 2);
	cr_expect_eq(n, 2);
	cr_expect(!dl_hash_tag("a{}b{c}", 7, &off, &n));
	cr_expect(!dl_hash_tag("abc}", 4, &off, &n));
	cr_expect(!dl_hash_tag("{abc", 4, &off, &n));
	cr_expect(!dl_hash_tag("a{b}", 2, &off, &n)); /* only len bytes */
}

Test(proto, map_and_partition_parse)
{
	struct dl_request r;
	const char *why;

	cr_assert_eq(parse("MAP id=t", &r, &why), 0);
	cr_assert_eq(r.verb, DL_VERB_MAP);
	cr_assert_eq(parse("MAP x", &r, &why), DL_EBADARG);
	cr_assert_eq(parse("PARTITION MOVE 0-99,200 p1", &r, &why), 0);
	cr_assert_eq(r.verb, DL_VERB_PARTITION);
	cr_assert_eq(r.nwords, 3);
	cr_assert_str_eq(cstr(r.words[1]), "0-99,200");
	cr_assert_str_eq(cstr(r.words[2]), "p1");
	cr_assert_eq(parse("PARTITION INIT", &r, &why), 0);
	cr_assert_eq(r.nwords, 1);
	cr_assert_eq(parse("PARTITION", &r, &why), DL_EBADFORMAT);
	cr_assert_eq(parse("PARTITION a b c d", &r, &why), DL_EBADARG);
	cr_assert_eq(parse("PARTITION MOVE \x01 p", &r, &why), DL_EBADARG);
}
