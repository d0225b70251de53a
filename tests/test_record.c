/* SPDX-License-Identifier: MIT */
/*
 * test_record.c -- the Redis record of a lock, both ways
 * (server/store/record.h).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <string.h>

#include "server/store/bucket.h"
#include "server/locktab/locktab.h"
#include "server/store/record.h"

static uint64_t clock_ms = 5000;

static uint64_t fake_now(void *ctx)
{
	(void)ctx;
	return clock_ms;
}

static struct dl_locktab *new_tab(void)
{
	struct dl_locktab_hooks h = {fake_now, NULL, NULL, NULL};
	struct dl_locktab_limits lim = {100, 100, 0, 0};

	return dl_locktab_new(&h, &lim, 10, 42);
}

static struct dl_str S(const char *s) {
	return (struct dl_str){s, strlen(s)};
}

struct items {
	int n;
	struct dl_record_item it[8];
	char owners[8][DL_OWNER_KEY_MAX + 1];
	char tags[8][DL_TAG_MAX + 1];
};

/* LOCK "stock" for session s. */
static int acquire(struct dl_locktab *t, struct dl_session *s, uint64_t ttl,
		   uint64_t wait, struct dl_str tag, struct dl_result *res)
{
	struct dl_acquire a = {
		.name = S("stock"), .ttl_ms = ttl, .wait_ms = wait, .tag = tag};

	return dl_locktab_acquire(t, s, &a, res);
}

static int collect(const struct dl_record_item *it, void *arg)
{
	struct items *x = arg;

	cr_assert(x->n < 8);
	x->it[x->n] = *it;
	if (it->owner.len) /* a D item has none */
		memcpy(x->owners[x->n], it->owner.p, it->owner.len);
	x->owners[x->n][it->owner.len] = '\0';
	if (it->tag.len)
		memcpy(x->tags[x->n], it->tag.p, it->tag.len);
	x->tags[x->n][it->tag.len] = '\0';
	x->n++;
	return 0;
}

Test(record, holder_and_waiters_round_trip_with_wall_clock_deadlines)
{
	struct dl_locktab *t = new_tab();
	struct dl_session a, b, c;
	struct dl_result res;
	struct dl_buf buf = {0};
	struct items x = {0};
	const char *why = NULL;
	uint64_t tok;

	dl_session_init(t, &a, S("alice"), NULL);
	dl_session_init(t, &b, S("bob"), NULL);
	dl_session_init(t, &c, S("carol"), NULL);
	cr_assert(eq(int, acquire(t, &a, 30000, 0, S("t1"), &res), 0));
	tok = res.token;
	acquire(t, &a, 1000, 0, DL_STR_NULL, &res);
	acquire(t, &b, 2000, 7000, S("bq"), &res);
	acquire(t, &c, 3000, DL_WAIT_INF, DL_STR_NULL, &res);
	/* wall clock = monotonic + 1_000_000 */
	cr_assert(eq(int,
		     dl_record_format(t, dl_locktab_find(t, S("stock")),
				      1000000, &buf),
		     0));
	cr_assert(
		eq(int, dl_record_parse(buf.p, buf.len, collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 3));
	cr_assert(eq(chr, x.it[0].kind, 'H'));
	cr_assert(eq(u64, x.it[0].token, tok));
	cr_assert(eq(u64, x.it[0].deadline, 5000 + 30000 + 1000000));
	cr_assert(eq(u64, x.it[0].count, 2));
	cr_assert(strcmp(x.owners[0], "alice") == 0,
		  "expected \"%s\", got \"%s\"", "alice", x.owners[0]);
	cr_assert(strcmp(x.tags[0], "t1") == 0, "expected \"%s\", got \"%s\"",
		  "t1", x.tags[0]);
	cr_assert(eq(chr, x.it[1].kind, 'W'));
	cr_assert(eq(u64, x.it[1].ttl_ms, 2000));
	cr_assert(eq(u64, x.it[1].deadline, 5000 + 7000 + 1000000));
	cr_assert(strcmp(x.owners[1], "bob") == 0,
		  "expected \"%s\", got \"%s\"", "bob", x.owners[1]);
	cr_assert(strcmp(x.tags[1], "bq") == 0, "expected \"%s\", got \"%s\"",
		  "bq", x.tags[1]);
	cr_assert(eq(u64, x.it[2].deadline, UINT64_MAX));
	cr_assert(strcmp(x.tags[2], "") == 0, "expected \"%s\", got \"%s\"", "",
		  x.tags[2]);
	free(buf.p);
	dl_session_close(t, &a);
	dl_session_close(t, &b);
	dl_session_close(t, &c);
	dl_locktab_free(t);
}

static int count_items(const struct dl_record_item *it, void *arg)
{
	(void)it;
	(*(int *)arg)++;
	return 0;
}

Test(record, malformed_records_are_rejected_not_half_read)
{
	static const char *const bad[] = {
		"",
		"dlock2\nH 1 2 1 30 a",
		"dlock1\nH 1 2 1 30",		  /* no owner */
		"dlock1\nH x 2 1 30 a",		  /* bad token */
		"dlock1\nH 1 2 1 30 a extra",	  /* junk word */
		"dlock1\nH 1 2 1 30 a id=",	  /* empty tag */
		"dlock1\nW 30 soon a",		  /* bad deadline */
		"dlock1\nX 1",			  /* unknown line */
		"dlock1\nH 1  2 1 30 a",	  /* double space */
		"dlock1\nH 1 2 1 30 a=b=c",	  /* owner with two '=' */
		"dlock1\nH 1 2 1 30 a!=b",	  /* a bad user name */
		"dlock1\n",			  /* empty line */
		"dlock2",			  /* no limit */
		"dlock2 limit=0",		  /* limit 0 */
		"dlock2 limit=1025",		  /* above DL_LIMIT_MAX */
		"dlock2 limit=1\nH 1 2 1 30 a",	  /* no mode */
		"dlock2 limit=1\nH 1 2 1 30 r a", /* bad mode */
		"dlock2 limit=2\nH 1 2 1 30 s a", /* shared in a semaphore */
		"dlock2 limit=1\nW 30 inf a",	  /* waiter without mode */
		"dlock1\nH 1 2 1 30 s a",	  /* v1 has no mode */
		"dlock1\nH 1 2 1 30 a warn=5",	  /* v1 has no warning */
		"dlock2 limit=1\nH 1 2 1 30 x a warn=5", /* nor v2 */
		"dlock3 limit=1\nH 1 2 1 30 x a warn=",	 /* empty warning */
		"dlock3 limit=1\nH 1 2 1 30 x a warn=0", /* a warning of 0 */
		"dlock3 limit=1\nH 1 2 1 30 x a warn=5 warn=6",	  /* twice */
		"dlock3 limit=1\nH 1 2 1 30 x a warn=4294967296", /* > u32 */
		"dlock3 limit=1\nH 1 2 1 30 x a req=0",	      /* an id of 0 */
		"dlock3 limit=1\nH 1 2 1 30 x a req=x",	      /* not a number */
		"dlock3 limit=1\nH 1 2 1 30 x a req=1 req=2", /* twice */
		"dlock3 limit=1\nH 1 2 1 30 x a notify=all",  /* not waiters */
		"dlock3 limit=1\nH 1 2 1 30 x a value=a%0Ab", /* a line break */
		"dlock3 limit=1\nH 1 2 1 30 x a value=a value=b", /* twice */
		"dlock1\nH 1 2 1 30 a req=5",  /* v1 has none */
		"dlock1 delay=5",	       /* v1 has no delay */
		"dlock2 limit=1 delay=5",      /* nor v2: a version 4's */
		"dlock3 limit=1 delay=5",      /* nor v3 */
		"dlock4 limit=1",	       /* v4 without its delay */
		"dlock4 limit=1 delay=0",      /* a delay of 0 */
		"dlock4 limit=1 delay=60001",  /* above the maximum */
		"dlock4 limit=1 delay=5 runs", /* not "running" */
		"dlock4 limit=1 running",      /* running without a delay */
		"dlock4 limit=1 delay=5 running x",	/* a word too many */
		"dlock4 limit=1 delay=5\nH 1 2 1 30 a", /* no mode */
	};
	const char *why;
	size_t i;
	int n;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = 0;
		why = NULL;
		cr_assert(eq(int,
			     dl_record_parse(bad[i], strlen(bad[i]),
					     count_items, &n, &why),
			     DL_EPROTO),
			  "record %zu accepted: \"%s\"", i, bad[i]);
		cr_assert(why != NULL, "no explanation for record %zu", i);
	}
}

Test(record, an_empty_lock_is_just_the_version_line)
{
	const char *rec = "dlock1";
	const char *why;
	int n = 0;

	cr_assert(eq(int,
		     dl_record_parse(rec, strlen(rec), count_items, &n, &why),
		     0));
	cr_assert(eq(int, n, 0));
}

static int acquire_mode(struct dl_locktab *t, struct dl_session *s,
			const char *name, uint64_t wait, int shared,
			uint32_t limit, struct dl_result *res)
{
	struct dl_acquire a = {.name = S(name),
			       .ttl_ms = 1000,
			       .wait_ms = wait,
			       .limit = limit,
			       .shared = (uint8_t)shared};

	return dl_locktab_acquire(t, s, &a, res);
}

/* A shared lock and a semaphore are written as version 2 with their
 * modes and limit; a plain lock stays version 1 (what an older daemon
 * reads). */
Test(record, modes_and_limits_round_trip_in_version_2)
{
	struct dl_locktab *t = new_tab();
	struct dl_session a, b, c;
	struct dl_result res;
	struct dl_buf buf = {0};
	struct items x = {0};
	const char *why = NULL;

	dl_session_init(t, &a, S("alice"), NULL);
	dl_session_init(t, &b, S("bob"), NULL);
	dl_session_init(t, &c, S("carol"), NULL);
	acquire_mode(t, &a, "rw", 0, 1, 1, &res);
	acquire_mode(t, &b, "rw", 0, 1, 1, &res);
	acquire_mode(t, &c, "rw", DL_WAIT_INF, 0, 1, &res);
	cr_assert(eq(int, res.outcome, DL_QUEUED));
	cr_assert(eq(int,
		     dl_record_format(t, dl_locktab_find(t, S("rw")), 0, &buf),
		     0));
	cr_assert(strncmp(buf.p, "dlock2 limit=1\nH ", 17) == 0, "%.*s",
		  (int)buf.len, buf.p);
	cr_assert(
		eq(int, dl_record_parse(buf.p, buf.len, collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 3));
	cr_assert(eq(int, x.it[0].shared, 1));
	cr_assert(eq(int, x.it[1].shared, 1));
	cr_assert(eq(chr, x.it[2].kind, 'W'));
	cr_assert(eq(int, x.it[2].shared, 0));
	cr_assert(eq(u32, x.it[2].limit, 1));
	cr_assert(strcmp(x.owners[2], "carol") == 0);

	acquire_mode(t, &a, "pool", 0, 0, 5, &res);
	cr_assert(
		eq(int,
		   dl_record_format(t, dl_locktab_find(t, S("pool")), 0, &buf),
		   0));
	memset(&x, 0, sizeof(x));
	cr_assert(strncmp(buf.p, "dlock2 limit=5\nH ", 17) == 0, "%.*s",
		  (int)buf.len, buf.p);
	cr_assert(
		eq(int, dl_record_parse(buf.p, buf.len, collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 1));
	cr_assert(eq(u32, x.it[0].limit, 5));
	cr_assert(eq(int, x.it[0].shared, 0));

	acquire_mode(t, &a, "plain", 0, 0, 1, &res);
	cr_assert(
		eq(int,
		   dl_record_format(t, dl_locktab_find(t, S("plain")), 0, &buf),
		   0));
	cr_assert(strncmp(buf.p, "dlock1\nH ", 9) == 0, "%.*s", (int)buf.len,
		  buf.p);
	free(buf.p);
	dl_session_close(t, &a);
	dl_session_close(t, &b);
	dl_session_close(t, &c);
	dl_locktab_free(t);
}

/* An owner of a user is stored with its user, so that a restart keeps
 * the same id under two users apart; a record from before users (plain
 * ids) still reads, its owners the default user's. */
Test(record, owners_keep_their_user_and_plain_owners_still_read)
{
	struct dl_locktab *t = new_tab();
	const char *old = "dlock1\nH 7 99 1 30 worker-1\nW 30 inf bob";
	struct dl_session a, b;
	struct dl_result res;
	struct dl_buf buf = {0};
	struct items x = {0};
	const char *why = NULL;

	dl_session_init(t, &a, S("payments=worker-1"), NULL);
	dl_session_init(t, &b, S("ci=worker-1"), NULL);
	acquire(t, &a, 1000, 0, DL_STR_NULL, &res);
	cr_assert(eq(int, res.outcome, DL_GRANTED));
	acquire(t, &b, 1000, DL_WAIT_INF, DL_STR_NULL, &res);
	cr_assert(eq(int, res.outcome, DL_QUEUED));
	cr_assert(
		eq(int,
		   dl_record_format(t, dl_locktab_find(t, S("stock")), 0, &buf),
		   0));
	cr_assert(
		eq(int, dl_record_parse(buf.p, buf.len, collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 2));
	cr_assert(strcmp(x.owners[0], "payments=worker-1") == 0, "%s",
		  x.owners[0]);
	cr_assert(strcmp(x.owners[1], "ci=worker-1") == 0, "%s", x.owners[1]);
	memset(&x, 0, sizeof(x));
	cr_assert(eq(int, dl_record_parse(old, strlen(old), collect, &x, &why),
		     0));
	cr_assert(strcmp(x.owners[0], "worker-1") == 0);
	cr_assert(eq(int,
		     dl_locktab_restore_lease(t, S("old"), x.it[0].owner, 7, 1,
					      30, 99, DL_STR_NULL, 0, 1, NULL,
					      0, 0),
		     0));
	cr_assert(eq(int,
		     dl_locktab_restore_lease(
			     t, S("new"), S("payments=worker-1"), 8, 1, 30, 99,
			     DL_STR_NULL, 0, 1, NULL, 0, 0),
		     0));
	free(buf.p);
	dl_session_close(t, &a);
	dl_session_close(t, &b);
	dl_locktab_free(t);
}

Test(record, version_1_reads_as_exclusive_with_limit_1)
{
	const char *rec = "dlock1\nH 7 99 1 30 alice id=t\nW 30 inf bob";
	struct items x = {0};
	const char *why;

	cr_assert(eq(int, dl_record_parse(rec, strlen(rec), collect, &x, &why),
		     0));
	cr_assert(eq(int, x.n, 2));
	cr_assert(eq(u32, x.it[0].limit, 1));
	cr_assert(eq(int, x.it[0].shared, 0));
	cr_assert(eq(int, x.it[1].shared, 0));
	cr_assert(strcmp(x.tags[0], "t") == 0);
}

/* Where a record lives in store layout 2 is part of the format: the
 * published FNV-1a 32 vectors, and the bucket is the hash mod 1024 (a
 * change here would strand every stored record in a bucket the loader
 * does not read it from). */
Test(record, a_names_bucket_is_fnv1a_32_of_its_bytes_mod_1024)
{
	cr_assert(eq(u32, dl_fnv1a32("", 0), 0x811c9dc5u));
	cr_assert(eq(u32, dl_fnv1a32("a", 1), 0xe40c292cu));
	cr_assert(eq(u32, dl_fnv1a32("foobar", 6), 0xbf9cf968u));
	cr_assert(eq(u32, dl_store_bucket("a", 1), 0xe40c292cu % 1024));
	cr_assert(eq(u32, dl_store_bucket("foobar", 6), 0xbf9cf968u % 1024));
	cr_assert(eq(u32, DL_STORE_BUCKETS, 1024));
}

/* A lease's warning is written with it, only when it has one, and read
 * back (plain and mode-ful records alike). */
Test(record, a_lease_warning_round_trips_on_its_holder_line)
{
	struct dl_locktab *t = new_tab();
	struct dl_session a, b;
	struct dl_result res;
	struct dl_buf buf = {0};
	struct items x = {0};
	const char *why = NULL;
	uint64_t tok;
	struct dl_acquire w = {.name = S("stock"),
			       .ttl_ms = 30000,
			       .tag = S("t1"),
			       .has_warn = 1,
			       .warn_ms = 5000};

	dl_session_init(t, &a, S("alice"), NULL);
	dl_session_init(t, &b, S("bob"), NULL);
	cr_assert(eq(int, dl_locktab_acquire(t, &a, &w, &res), 0));
	tok = res.token;
	acquire(t, &b, 2000, DL_WAIT_INF, DL_STR_NULL, &res);
	cr_assert(
		eq(int,
		   dl_record_format(t, dl_locktab_find(t, S("stock")), 0, &buf),
		   0));
	/* version 3, where a daemon that does not know warn= skips it */
	cr_assert(buf.len > 17 && memcmp(buf.p, "dlock3 limit=1\nH ", 17) == 0,
		  "record: \"%.*s\"", (int)buf.len, buf.p);
	cr_assert(memmem(buf.p, buf.len,
			 " x alice warn=5000 id=t1 since=", 31) != NULL,
		  "record: \"%.*s\"", (int)buf.len, buf.p);
	cr_assert(
		eq(int, dl_record_parse(buf.p, buf.len, collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 2));
	cr_assert(eq(u64, x.it[0].warn_ms, 5000));
	cr_assert(strcmp(x.tags[0], "t1") == 0, "tag \"%s\"", x.tags[0]);
	cr_assert(eq(u64, x.it[1].warn_ms, 0));
	/* dropped: the record is as before warnings existed */
	cr_assert(
		eq(int,
		   dl_locktab_refresh_warn(t, &a, S("stock"), tok, 0, 0, &res),
		   0));
	cr_assert(eq(int, (int)res.outcome, (int)DL_REFRESHED));
	x.n = 0;
	dl_record_format(t, dl_locktab_find(t, S("stock")), 0, &buf);
	cr_assert(memmem(buf.p, buf.len, "warn=", 5) == NULL && buf.len > 9 &&
			  memcmp(buf.p, "dlock1\nH ", 9) == 0,
		  "record: \"%.*s\"", (int)buf.len, buf.p);
	free(buf.p);
	dl_session_close(t, &a);
	dl_session_close(t, &b);
	dl_locktab_free(t);
}

/* A lease's request id and its news of waiters are words of its holder's
 * line in version 3: read back as written, and gone with them. */
Test(record, a_request_id_and_news_of_waiters_round_trip)
{
	struct dl_locktab *t = new_tab();
	struct dl_session a, b;
	struct dl_result res;
	struct dl_buf buf = {0};
	struct items x = {0};
	const char *why = NULL;
	struct dl_acquire w = {.name = S("stock"),
			       .ttl_ms = 30000,
			       .req = 18446744073709551615ULL,
			       .notify = 1,
			       .value = S("10.0.0.1:80%20a")};

	dl_session_init(t, &a, S("alice"), NULL);
	dl_session_init(t, &b, S("bob"), NULL);
	cr_assert(eq(int, dl_locktab_acquire(t, &a, &w, &res), 0));
	acquire(t, &b, 2000, DL_WAIT_INF, DL_STR_NULL, &res);
	cr_assert(
		eq(int,
		   dl_record_format(t, dl_locktab_find(t, S("stock")), 0, &buf),
		   0));
	cr_assert(buf.len > 17 && memcmp(buf.p, "dlock3 limit=1\nH ", 17) == 0,
		  "record: \"%.*s\"", (int)buf.len, buf.p);
	cr_assert(memmem(buf.p, buf.len,
			 " x alice req=18446744073709551615 notify=waiters "
			 "value=10.0.0.1:80%20a since=",
			 77) != NULL,
		  "record: \"%.*s\"", (int)buf.len, buf.p);
	cr_assert(
		eq(int, dl_record_parse(buf.p, buf.len, collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 2));
	cr_assert(eq(u64, x.it[0].req, 18446744073709551615ULL));
	cr_assert(eq(int, x.it[0].notify, 1));
	cr_assert(eq(sz, x.it[0].value.len, 15));
	cr_assert(eq(int, memcmp(x.it[0].value.p, "10.0.0.1:80%20a", 15), 0));
	cr_assert(eq(u64, x.it[1].req, 0));
	cr_assert(eq(int, x.it[1].notify, 0));
	free(buf.p);
	dl_session_close(t, &a);
	dl_session_close(t, &b);
	dl_locktab_free(t);
}

/* ---- version 3: described holders --------------------------------------- */

/* A lock with a described holder is written in version 3: since= for
 * every holder, the description of those that gave one; read back, it
 * is what was written. Once no described holder is left, the lock is
 * version 1 again (what a daemon of 0.3 reads). */
Test(record, a_described_holder_is_written_in_version_3_and_read_back)
{
	struct dl_locktab *t = new_tab();
	struct dl_session a, b;
	struct dl_result res;
	struct dl_buf buf = {0};
	struct items x = {0};
	struct dl_desc *d;
	const char *why = NULL;
	uint64_t tok;
	char want[128];

	dl_session_init(t, &a, S("deploy-7"), NULL);
	dl_session_init(t, &b, S("bob"), NULL);
	cr_assert(eq(int, dl_desc_new(S("web3"), 4242, S("make%20deploy"), &d),
		     0));
	dl_session_set_desc(&a, d);
	dl_desc_unref(d);
	acquire_mode(t, &b, "pool", 0, 0, 2, &res);
	clock_ms += 100;
	acquire_mode(t, &a, "pool", 0, 0, 2, &res);
	tok = res.token;
	cr_assert(eq(int, res.outcome, DL_GRANTED));
	cr_assert(eq(int,
		     dl_record_format(t, dl_locktab_find(t, S("pool")), 1000000,
				      &buf),
		     0));
	cr_assert(strncmp(buf.p, "dlock3 limit=2\nH ", 17) == 0, "%.*s",
		  (int)buf.len, buf.p);
	snprintf(want, sizeof(want),
		 " x deploy-7 since=%llu host=web3 pid=4242 cmd=make%%20deploy",
		 (unsigned long long)(clock_ms + 1000000));
	cr_assert(buf.len > strlen(want) &&
			  memcmp(buf.p + buf.len - strlen(want), want,
				 strlen(want)) == 0,
		  "%.*s", (int)buf.len, buf.p);
	cr_assert(
		eq(int, dl_record_parse(buf.p, buf.len, collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 2));
	cr_assert(eq(u64, x.it[0].since, clock_ms - 100 + 1000000));
	cr_assert(eq(sz, x.it[0].host.len, 0));
	cr_assert(eq(u64, x.it[1].token, tok));
	cr_assert(eq(u64, x.it[1].since, clock_ms + 1000000));
	cr_assert(eq(u32, x.it[1].pid, 4242));
	cr_assert(x.it[1].host.len == 4 && !memcmp(x.it[1].host.p, "web3", 4));
	cr_assert(x.it[1].cmd.len == 13 &&
		  !memcmp(x.it[1].cmd.p, "make%20deploy", 13));
	/* the described holder leaves: version 1 can say the rest */
	dl_locktab_release(t, &a, S("pool"), tok, &res);
	acquire_mode(t, &b, "plain", 0, 0, 1, &res);
	cr_assert(
		eq(int,
		   dl_record_format(t, dl_locktab_find(t, S("plain")), 0, &buf),
		   0));
	cr_assert(strncmp(buf.p, "dlock1\nH ", 9) == 0, "%.*s", (int)buf.len,
		  buf.p);
	free(buf.p);
	dl_session_close(t, &a);
	dl_session_close(t, &b);
	dl_locktab_free(t);
}

/* A lock's delay is on its first line, in version 4 (which a daemon that
 * reads at most version 3 refuses: it must not grant during the delay),
 * with "running" while it is in it, and read back as a D item before the
 * holders, whose lines are version 3's; a lock in its delay with nobody
 * else has a record of that line alone. */
Test(record, a_lock_delay_round_trips_on_the_first_line)
{
	struct dl_locktab *t = new_tab();
	struct dl_session a;
	struct dl_result res;
	struct dl_buf buf = {0};
	struct items x = {0};
	const char *why = NULL;
	struct dl_acquire d = {
		.name = S("stock"), .ttl_ms = 1000, .delay_ms = 4000};

	dl_session_init(t, &a, S("alice"), NULL);
	cr_assert(eq(int, dl_locktab_acquire(t, &a, &d, &res), 0));
	cr_assert(
		eq(int,
		   dl_record_format(t, dl_locktab_find(t, S("stock")), 0, &buf),
		   0));
	cr_assert(buf.len > 28 && memcmp(buf.p, "dlock4 limit=1 delay=4000\nH ",
					 28) == 0,
		  "record: \"%.*s\"", (int)buf.len, buf.p);
	cr_assert(
		eq(int, dl_record_parse(buf.p, buf.len, collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 2));
	cr_assert(eq(chr, x.it[0].kind, 'D'));
	cr_assert(eq(u64, x.it[0].ttl_ms, 4000));
	cr_assert(eq(int, x.it[0].delay_running, 0));
	cr_assert(eq(chr, x.it[1].kind, 'H'));
	cr_assert(memmem(buf.p, buf.len, " x alice since=", 15) != NULL,
		  "record: \"%.*s\"", (int)buf.len, buf.p);
	/* its lines skip what a later daemon adds, as version 3's do */
	x.n = 0;
	cr_assert(eq(int,
		     dl_record_parse("dlock4 limit=1 delay=5\nH 1 2 1 30 x a "
				     "later=1 warn=7",
				     52, collect, &x, &why),
		     0),
		  "%s", why ? why : "");
	cr_assert(eq(int, x.n, 2));
	cr_assert(eq(u64, x.it[1].warn_ms, 7));
	/* expired: in its delay, nobody holding it */
	clock_ms += 1000 + 20;
	dl_locktab_run_timers(t, SIZE_MAX);
	dl_record_format(t, dl_locktab_find(t, S("stock")), 0, &buf);
	cr_assert(eq(int, (int)buf.len, 33), "record: \"%.*s\"", (int)buf.len,
		  buf.p);
	cr_assert(memcmp(buf.p, "dlock4 limit=1 delay=4000 running", 33) == 0);
	x.n = 0;
	cr_assert(
		eq(int, dl_record_parse(buf.p, buf.len, collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 1));
	cr_assert(eq(int, x.it[0].delay_running, 1));
	free(buf.p);
	dl_session_close(t, &a);
	dl_locktab_free(t);
}

/* From version 3 on a word a later daemon added is skipped (a daemon
 * may do without it: record.h); versions 1 and 2 refuse any word they do
 * not know, as daemons up to 0.3 do. What version 3 does know must be
 * valid: a description that breaks the wire's rule makes the record
 * unreadable, never half read. */
Test(record, version_3_skips_words_it_does_not_know_and_checks_those_it_does)
{
	static const char *const bad[] = {
		"dlock3\nH 1 2 1 30 x a",		     /* no limit */
		"dlock3 limit=1\nH 1 2 1 30 a",		     /* no mode */
		"dlock3 limit=1\nH 1 2 1 30 x a host=a%0Ab", /* escaped LF */
		"dlock3 limit=1\nH 1 2 1 30 x a cmd=a\x01",  /* control byte */
		"dlock3 limit=1\nH 1 2 1 30 x a pid=0",
		"dlock3 limit=1\nH 1 2 1 30 x a pid=2147483648",
		"dlock3 limit=1\nH 1 2 1 30 x a since=0",
		"dlock3 limit=1\nH 1 2 1 30 x a since=1 since=2",
		"dlock3 limit=1\nH 1 2 1 30 x a host=a host=b",
		"dlock3 limit=1\nH 1 2 1 30 x a id=",
		"dlock3 limit=1\nH 1 2 1 30 x a junk", /* not key=value */
		"dlock3 limit=1\nH 1 2 1 30 x a =v",
		"dlock2 limit=1\nH 1 2 1 30 x a later=1", /* v2: refused */
		"dlock1\nH 1 2 1 30 a since=5",		  /* v1: refused */
		"dlock5 limit=1\nH 1 2 1 30 x a",	  /* a later version */
	};
	const char *ok =
		"dlock3 limit=1\nH 7 99 2 30 x alice later=yes "
		"id=t since=5 cmd=run k=0123456789abcdef0123456789abcdef"
		"\nW 30 inf s bob what=ever";
	struct items x = {0};
	const char *why;
	size_t i;
	int n;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = 0;
		cr_assert(eq(int,
			     dl_record_parse(bad[i], strlen(bad[i]),
					     count_items, &n, &why),
			     DL_EPROTO),
			  "record %zu accepted: \"%s\"", i, bad[i]);
	}
	cr_assert(
		eq(int, dl_record_parse(ok, strlen(ok), collect, &x, &why), 0));
	cr_assert(eq(int, x.n, 2));
	cr_assert(strcmp(x.owners[0], "alice") == 0);
	cr_assert(strcmp(x.tags[0], "t") == 0);
	cr_assert(eq(u64, x.it[0].since, 5));
	cr_assert(eq(u64, x.it[0].count, 2));
	cr_assert(x.it[0].cmd.len == 3);
	cr_assert(eq(int, x.it[0].has_proof, 1));
	cr_assert(eq(int, x.it[1].shared, 1));
}
