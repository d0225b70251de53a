/* SPDX-License-Identifier: MIT */
/*
 * test_users.c -- the users file, grants and secrets (server/users.c),
 * without a daemon.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/users.h"

static struct dl_str S(const char *s) {
	return (struct dl_str){s, strlen(s)};
}

static struct dl_users *
parse_ok(const char *text)
{
	struct dl_users *u = NULL;
	char err[256] = "";
	int r = dl_users_parse(text, strlen(text), "users", &u, err,
			       sizeof(err));

	cr_assert_eq(r, 0, "parse failed: %s", err);
	return u;
}

/* The error of parsing text (static buffer); asserts it failed. */
static const char *parse_err(const char *text)
{
	static char err[256];
	struct dl_users *u = NULL;

	err[0] = '\0';
	cr_assert_eq(dl_users_parse(text, strlen(text), "users", &u, err,
				    sizeof(err)),
		     DL_EBADARG, "accepted: %s", text);
	cr_assert_null(u);
	return err;
}

static char hashline[DL_SECRET_HASH_TEXT + 1];

static const char *hash_of(const char *secret)
{
	cr_assert_eq(dl_secret_hash_text(S(secret), hashline), 0);
	return hashline;
}

Test(users, a_line_gives_a_secret_grants_and_quotas)
{
	char text[512];
	struct dl_users *u;
	struct dl_user *p, *out;

	snprintf(text, sizeof(text),
		 "# who may do what\n"
		 "\n"
		 "   # indented comment\n"
		 "payments %s lock=pay/,shared/ read=* locks=10 waits=2 "
		 "conns=3 watches=4\r\n",
		 hash_of("s3cret"));
	u = parse_ok(text);
	cr_assert_eq(u->n, 1);
	p = dl_users_find(u, S("payments"));
	cr_assert_not_null(p);
	cr_assert_eq(p->line, 4);
	cr_assert_eq(p->quota[DL_QUOTA_LOCKS], 10);
	cr_assert_eq(p->quota[DL_QUOTA_WAITS], 2);
	cr_assert_eq(p->quota[DL_QUOTA_CONNS], 3);
	cr_assert_eq(p->quota[DL_QUOTA_WATCHES], 4);
	cr_assert(dl_user_may(u, p, DL_RIGHT_LOCK, S("pay/x")));
	cr_assert(dl_user_may(u, p, DL_RIGHT_LOCK, S("shared/")));
	cr_assert_not(dl_user_may(u, p, DL_RIGHT_LOCK, S("pa")));
	cr_assert_not(dl_user_may(u, p, DL_RIGHT_LOCK, S("ci/x")));
	cr_assert(dl_user_may(u, p, DL_RIGHT_READ, S("anything")));
	cr_assert_not(dl_user_may(u, p, DL_RIGHT_BREAK, S("pay/x")));
	cr_assert_not(dl_user_may(u, p, DL_RIGHT_ADMIN, S("")));
	cr_assert_eq(dl_users_check(u, S("payments"), S("s3cret"), &out), 0);
	cr_assert_eq(out, p);
	cr_assert_null(dl_users_find(u, S("pay")));
	dl_users_free(u);
}

/* Default deny: a user with a secret and no grant may do nothing. */
Test(users, nothing_is_allowed_that_is_not_granted)
{
	char text[256];
	struct dl_users *u;
	struct dl_user *p;
	int r;

	snprintf(text, sizeof(text), "nobody %s\n", hash_of("x"));
	u = parse_ok(text);
	p = dl_users_find(u, S("nobody"));
	for (r = 0; r < DL_RIGHT_COUNT_; r++)
		cr_assert_not(dl_user_may(u, p, (enum dl_right)r, S("a")));
	dl_users_free(u);
}

Test(users, the_secret_must_match_its_hash_exactly)
{
	char text[256];
	struct dl_users *u;
	struct dl_user *out = (struct dl_user *)1;

	snprintf(text, sizeof(text), "ci %s lock=ci/\nops uid=0 admin\n",
		 hash_of("0123456789abcdef"));
	u = parse_ok(text);
	cr_assert_eq(dl_users_check(u, S("ci"), S("0123456789abcdef"), &out),
		     0);
	cr_assert_eq(dl_users_check(u, S("ci"), S("0123456789abcdeF"), &out),
		     DL_EDENIED);
	cr_assert_null(out);
	cr_assert_eq(dl_users_check(u, S("ci"), S("0123456789abcde"), &out),
		     DL_EDENIED);
	cr_assert_eq(dl_users_check(u, S("ci"), S("0123456789abcdef0"), &out),
		     DL_EDENIED);
	cr_assert_eq(dl_users_check(u, S("nope"), S("0123456789abcdef"), &out),
		     DL_EDENIED);
	/* a user known by its uid only has no secret to give */
	cr_assert_eq(dl_users_check(u, S("ops"), S(""), &out), DL_EDENIED);
	cr_assert_eq(dl_users_by_uid(u, 0), dl_users_find(u, S("ops")));
	cr_assert_null(dl_users_by_uid(u, 4242));
	dl_users_free(u);
}

Test(users, uid_takes_a_number_or_a_login)
{
	struct dl_users *u = parse_ok("a uid=root\nb uid=1234\n");

	cr_assert_eq(dl_users_find(u, S("a"))->uid, 0);
	cr_assert_eq(dl_users_find(u, S("b"))->uid, 1234);
	dl_users_free(u);
	cr_assert(strstr(parse_err("a uid=no-such-login-here\n"),
			 "users:1: uid=no-such-login-here: no such login"),
		  "%s", parse_err("a uid=no-such-login-here\n"));
}

/* Every mistake is an error naming the file and line, and never quotes
 * a word it did not understand (it may be a pasted secret). */
Test(users, a_bad_line_is_an_error_with_file_and_line)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"ok uid=1\nbad!name uid=2\n", "users:2: a line starts with"},
		{"a uid=1 lock=\n", "users:1: lock=: a prefix"},
		{"a uid=1 lock=x,,y\n", "users:1: lock=: a prefix"},
		{"a uid=1 read=jobs*\n", "users:1: read=: a prefix"},
		{"a uid=1 lock=x lock=y\n", "users:1: lock= given twice"},
		{"a uid=1 locks=0\n", "users:1: locks=: a number from 1"},
		{"a uid=1 conns=x\n", "users:1: conns=: a number from 1"},
		{"a uid=1 watches=-1\n", "users:1: watches=: a number from 1"},
		{"a uid=1 watches=2 watches=3\n",
		 "users:1: watches= given twice"},
		{"a sha256:abc\n", "users:1: sha256: expected 64 hex"},
		{"a lock=*\n", "users:1: user 'a' has neither"},
		{"a uid=1\n\n# c\na uid=2\n", "users:4: user 'a' given twice"},
		{"a uid=7\nb uid=7\n", "users:2: uid 7 given to two users"},
		{"dlockd uid=1\n",
		 "users:1: the user name 'dlockd' is reserved"},
		{"default uid=1\n", "users:1: the user name 'default' is"},
		{"reclaimed uid=1\n", "users:1: the user name 'reclaimed' is"},
		{"a uid=1 admin admin\n", "users:1: admin given twice"},
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *e = parse_err(cases[i].text);

		cr_assert(strstr(e, cases[i].want), "%s -> %s", cases[i].text,
			  e);
	}
	/* the secret itself where its hash goes: not quoted */
	cr_assert(strstr(parse_err("a uid=1 hunter2hunter2\n"),
			 "users:1: word 3 not understood"));
	cr_assert_null(
		strstr(parse_err("a uid=1 hunter2hunter2\n"), "hunter2"));
}

/* A reload keeps a session whose user can still do all it could:
 * the same or shorter prefixes, every right kept. */
Test(users, covers_tells_whether_rights_were_taken_away)
{
	struct dl_users *a = parse_ok("u uid=1 lock=pay/x,ci/ read=* admin\n"
				      "v uid=2 lock=*\n");
	struct dl_users *b = parse_ok("u uid=1 lock=pay/,ci/,more/ read=* "
				      "admin break=a\n"
				      "v uid=2 lock=a\n");
	struct dl_users *c = parse_ok("u uid=1 lock=pay/x read=* admin\n");
	struct dl_users *d = parse_ok("u uid=1 lock=pay/,ci/ read=x\n");
	struct dl_user *ua = dl_users_find(a, S("u"));

	cr_assert(dl_user_covers(b, dl_users_find(b, S("u")), a, ua));
	cr_assert_not(dl_user_covers(c, dl_users_find(c, S("u")), a, ua));
	cr_assert_not(dl_user_covers(d, dl_users_find(d, S("u")), a, ua));
	cr_assert_not(dl_user_covers(b, dl_users_find(b, S("v")), a,
				     dl_users_find(a, S("v"))));
	cr_assert(dl_user_covers(a, dl_users_find(a, S("v")), b,
				 dl_users_find(b, S("v"))));
	dl_users_free(a);
	dl_users_free(b);
	dl_users_free(c);
	dl_users_free(d);
}

Test(users, a_reload_carries_runtime_counts_by_name)
{
	struct dl_users *a = parse_ok("u uid=1\nv uid=2\n");
	struct dl_users *b = parse_ok("w uid=3\nu uid=1\n");

	dl_users_find(a, S("u"))->rt.conns = 4;
	dl_users_find(a, S("v"))->rt.conns = 9;
	dl_users_carry(b, a);
	cr_assert_eq(dl_users_find(b, S("u"))->rt.conns, 4);
	cr_assert_eq(dl_users_find(b, S("w"))->rt.conns, 0);
	dl_users_free(a);
	dl_users_free(b);
}

Test(users, the_default_user_may_do_everything)
{
	struct dl_user d;
	int r;

	dl_user_default(&d);
	for (r = 0; r < DL_RIGHT_COUNT_; r++)
		cr_assert(dl_user_may(NULL, &d, (enum dl_right)r, S("x")));
	cr_assert_str_eq(dl_user_name(&d), "default");
}

Test(users, new_secrets_are_random_hex_with_their_hash_line)
{
	char s1[DL_SECRET_TEXT + 1], s2[DL_SECRET_TEXT + 1];
	char h1[DL_SECRET_HASH_TEXT + 1], h2[DL_SECRET_HASH_TEXT + 1];
	size_t i;

	cr_assert_eq(dl_secret_new(s1, h1), 0);
	cr_assert_eq(dl_secret_new(s2, h2), 0);
	cr_assert_eq(strlen(s1), 64);
	cr_assert_eq(strlen(h1), 71);
	cr_assert_str_neq(s1, s2);
	for (i = 0; i < 64; i++)
		cr_assert(strchr("0123456789abcdef", s1[i]));
	cr_assert_str_eq(hash_of(s1), h1);
	/* the well-known SHA-256 of "abc" */
	cr_assert_str_eq(
		hash_of("abc"),
		"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

Test(users, secret_equal_compares_whole_values)
{
	cr_assert(dl_secret_equal(S("s3cret"), S("s3cret")));
	cr_assert_not(dl_secret_equal(S("s3cret"), S("s3cre")));
	cr_assert_not(dl_secret_equal(S("s3cret"), S("s3crett")));
	cr_assert_not(dl_secret_equal(S(""), S("x")));
}
