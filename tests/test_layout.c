/* SPDX-License-Identifier: MIT */
/*
 * test_layout.c -- store layout 2 (server/store/store.c): lock records in 1024
 * bucket hashes, the migration from layout 1 (server/store/store_migrate.c),
 * the re-sync that replaces buckets whole, and the fence that keeps
 * daemons of layout 1 away (server/store/store_lead.c).
 *
 * Each test starts its own redis-server and dlockd, writes or reads the
 * keys with redis-cli, and would pass on none of the broken versions its
 * comment names (each was tried).
 *
 * Layout 1, as the tests write it: P lock:<name> = the record, and the
 * set P locks of the names. Layout 2: P rec:<b> = { name: record },
 * b = FNV-1a 32 of the name mod 1024 (h_rec_key, server/store/bucket.h).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/store/bucket.h"
#include "tests/harness.h"

static struct h_redis r;
static struct h_daemon d;

static void fini(void)
{
	h_daemon_cleanup(&d);
	h_redis_cleanup(&r);
}

TestSuite(layout, .fini = fini, .timeout = 180);

/* ---- helpers ------------------------------------------------------------ */

static void expect_free(struct h_client *c, const char *name)
{
	char *l = h_call(c, "STATUS %s", name);

	cr_assert_str_eq(h_kv(l, "state"), "free", "in \"%s\"", l);
}

/* A record of layout 1: P lock:<name> (printf escapes), and its name in
 * P locks unless `listed` is 0. */
static void l1_plant(const char *name, const char *text, int listed)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
		 "printf '%s' | redis-cli -h %s -p %d -x SET dlock:lock:%s "
		 ">/dev/null",
		 text, r.host, r.port, name);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	if (listed) {
		snprintf(cmd, sizeof(cmd), "SADD dlock:locks %s", name);
		h_redis_cli(&r, cmd);
	}
}

/* The keys matching a pattern, counted (KEYS: the tests' Redis is
 * small; redis-cli prints one per line, and an empty line for none). */
static int count_keys(const char *pattern)
{
	char cmd[128];
	const char *p, *nl;
	int n = 0;

	snprintf(cmd, sizeof(cmd), "KEYS '%s'", pattern);
	for (p = h_redis_cli(&r, cmd); *p; p = nl + 1) {
		if (!(nl = strchr(p, '\n')))
			return n + 1;
		n += nl > p;
	}
	return n;
}

/* The epoch in P fence, which must be "<epoch>/2". */
static uint64_t fence_epoch(void)
{
	const char *out = h_redis_cli(&r, "GET dlock:fence");
	char *end;
	uint64_t e = strtoull(out, &end, 10);

	cr_assert(e > 0 && strcmp(end, "/2\n") == 0,
		  "fence is not <epoch>/2: \"%s\"", out);
	return e;
}

/* A name of the bucket of `name`, other than it: "<prefix><i>". */
static void bucket_mate(const char *name, const char *prefix, char *out,
			size_t len)
{
	uint32_t b = dl_store_bucket(name, strlen(name));
	int i;

	for (i = 0;; i++) {
		snprintf(out, len, "%s%d", prefix, i);
		if (dl_store_bucket(out, strlen(out)) == b)
			return;
	}
}

/* ---- (a) a Redis of layout 1 is migrated -------------------------------- */

/* Everything layout 1 can hold comes back from it, and then from layout 2
 * after a kill -9: a lease with its token, a lease with a waiter, shared
 * holders (record version 2), an unreadable record (held, never freed), a
 * wait that ended while down (dropped), a name without a record (free).
 * Layout 1's keys are gone, and the first take starts the epoch above the
 * old numeric fence. Fails if the loader does not read layout 1 (every
 * lock free), if it reads it but writes nothing to layout 2 (free after
 * the kill -9), or leaves the name set behind. */
Test(layout, layout_1_is_migrated_with_every_lease_its_token_and_its_queue)
{
	struct h_client *c;
	char *l;

	h_redis_start(&r, "always");
	h_redis_cli(&r, "SET dlock:fence 41");
	l1_plant("l1", "dlock1\\nH 9 0 1 60000 carol", 1);
	l1_plant("q", "dlock1\\nH 11 0 1 60000 dave\\nW 60000 inf erin", 1);
	l1_plant("sh",
		 "dlock2 limit=1\\nH 12 0 1 60000 s r1\\nH 13 0 1 60000 s r2",
		 1);
	l1_plant("bad", "dlock1\\nH 5 0 0 1000 bob", 1);
	l1_plant("ended", "dlock1\\nH 14 0 1 60000 f\\nW 5000 1000 g", 1);
	h_redis_cli(&r, "SADD dlock:locks gone");
	h_daemon_start_redis(&d, &r, NULL);
	cr_assert(h_daemon_log_has(&d, "migrated to store layout 2"));

	c = h_hello(d.port, "m");
	h_expect_status(c, "l1", "held", 9, "carol", 0);
	h_expect_status(c, "q", "held", 11, "dave", 1);
	l = h_call(c, "STATUS sh");
	cr_assert_eq(h_kv_u64(l, "holders"), 2, "in \"%s\"", l);
	cr_assert_str_eq(h_kv(l, "mode"), "shared", "in \"%s\"", l);
	h_expect_status(c, "bad", "held", 0, "dlockd=unreadable", 0);
	h_expect_status(c, "ended", "held", 14, "f", 0);
	expect_free(c, "gone");
	h_close(c);

	/* layout 1 is gone; layout 2 holds every lock */
	cr_assert_str_eq(h_redis_cli(&r, "EXISTS dlock:locks"), "0\n");
	cr_assert_eq(count_keys("dlock:lock:*"), 0, "%s",
		     h_redis_cli(&r, "KEYS 'dlock:lock:*'"));
	cr_assert(strstr(h_rec_get(&r, "l1"), "H 9 "), "\"%s\"",
		  h_rec_get(&r, "l1"));
	cr_assert(strstr(h_rec_get(&r, "q"), "\nW 60000 inf erin"), "\"%s\"",
		  h_rec_get(&r, "q"));
	cr_assert(strstr(h_rec_get(&r, "bad"), "dlockd=unreadable"), "\"%s\"",
		  h_rec_get(&r, "bad"));
	cr_assert_gt(fence_epoch(), 41);

	/* and from layout 2 alone after a crash */
	h_daemon_kill9(&d);
	h_daemon_restart(&d);
	c = h_hello(d.port, "m");
	h_expect_status(c, "l1", "held", 9, "carol", 0);
	h_expect_status(c, "q", "held", 11, "dave", 1);
	l = h_call(c, "STATUS sh");
	cr_assert_eq(h_kv_u64(l, "holders"), 2, "in \"%s\"", l);
	h_expect_status(c, "bad", "held", 0, "dlockd=unreadable", 0);
	h_expect_status(c, "ended", "held", 14, "f", 0);
	expect_free(c, "gone");
	l = h_call(c, "TRYLOCK l1");
	cr_assert(h_starts(l, "NO BUSY l1 "), "\"%s\"", l);
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* A big layout 1 (more records than one MGET reads) with names whose
 * record is gone (0.1's Redis expiries could do that) or is not a string,
 * spread over the MGETs: the migration still restores every lease. The
 * loader used to ask TYPE of such a key while further MGETs were in
 * flight, read an MGET's reply as TYPE's, and then TYPE's as an MGET's:
 * the load failed, and was retried forever (the daemon never started). */
Test(layout, a_big_layout_1_with_missing_records_is_migrated)
{
	struct h_client *c;
	char name[32];
	int i;

	h_redis_start(&r, "always");
	/* 12000 leases big:<i>, and 100 names without a record, one with a
	 * list, in the set */
	h_redis_cli(&r, "EVAL \"for i = 0, 11999 do "
			"redis.call('SET', 'dlock:lock:big:' .. i, "
			"'dlock1\\nH ' .. (i + 100) .. ' 0 1 60000 o') "
			"redis.call('SADD', 'dlock:locks', 'big:' .. i) end "
			"for i = 0, 99 do redis.call('SADD', 'dlock:locks', "
			"'gone:' .. i) end return 1\" 0");
	cr_assert_str_eq(h_redis_cli(&r, "SCARD dlock:locks"), "12100\n");
	h_redis_cli(&r, "DEL dlock:lock:big:7");
	h_redis_cli(&r, "RPUSH dlock:lock:big:7 x");
	h_daemon_start_redis(&d, &r, NULL);
	cr_assert(
		h_daemon_log_has(&d, "migrated to store layout 2: 12000 locks"),
		"no migration of 12000 locks logged");
	c = h_hello(d.port, "m");
	for (i = 0; i < 12000; i += 37) {
		if (i == 7)
			continue;
		snprintf(name, sizeof(name), "big:%d", i);
		h_expect_status(c, name, "held", (uint64_t)i + 100, "o", 0);
	}
	h_expect_status(c, "big:7", "held", 0, "dlockd=unreadable", 0);
	expect_free(c, "gone:0");
	h_close(c);
	cr_assert_eq(count_keys("dlock:lock:*"), 0);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* ---- (b) a migration cut short ------------------------------------------ */

/* A migration that crashed after writing some buckets (here: a bucket
 * claims l1 for mallory with an older token, and l2's bucket holds a lock
 * layout 1 does not have) and before deleting P locks: layout 1 is what
 * holds the leases, exactly. Fails if the loader trusts the buckets while
 * P locks exists (l1 is mallory's), or writes them without emptying them
 * first (ghost stays held after the restart). */
Test(layout, a_migration_cut_before_its_switch_restores_exactly_layout_1)
{
	struct h_client *c;
	char ghost[32];

	h_redis_start(&r, "always");
	h_redis_cli(&r, "SET dlock:fence 12/2"); /* the cut migration's take */
	l1_plant("l1", "dlock1\\nH 9 0 1 60000 carol", 1);
	l1_plant("l2", "dlock1\\nH 10 0 1 60000 carol", 1);
	h_rec_plant(&r, "l1", "dlock1\\nH 5 0 1 60000 mallory");
	bucket_mate("l2", "ghost", ghost, sizeof(ghost));
	h_rec_plant(&r, ghost, "dlock1\\nH 6 0 1 60000 mallory");
	h_daemon_start_redis(&d, &r, NULL);
	c = h_hello(d.port, "m");
	h_expect_status(c, "l1", "held", 9, "carol", 0);
	h_expect_status(c, "l2", "held", 10, "carol", 0);
	expect_free(c, ghost);
	h_close(c);
	cr_assert_str_eq(h_rec_get(&r, ghost), "\n");
	cr_assert(strstr(h_rec_get(&r, "l1"), " carol"), "\"%s\"",
		  h_rec_get(&r, "l1"));
	cr_assert_gt(fence_epoch(), 12);

	h_daemon_kill9(&d);
	h_daemon_restart(&d);
	c = h_hello(d.port, "m");
	h_expect_status(c, "l1", "held", 9, "carol", 0);
	h_expect_status(c, "l2", "held", 10, "carol", 0);
	expect_free(c, ghost);
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* A migration that crashed after deleting P locks, while deleting the
 * old records: layout 2 is what holds the leases, and the records of
 * layout 1 left behind are not read (zombie is not in layout 2: free).
 * Fails if the loader takes a Redis without P locks for layout 1 (it
 * migrates an empty name set over layout 2: l1 is lost). */
Test(layout, a_migration_cut_after_its_switch_uses_layout_2_only)
{
	struct h_client *c;

	h_redis_start(&r, "always");
	h_redis_cli(&r, "SET dlock:fence 12/2");
	h_rec_plant(&r, "l1", "dlock1\\nH 9 0 1 60000 carol");
	l1_plant("l1", "dlock1\\nH 5 0 1 60000 mallory", 0);
	l1_plant("zombie", "dlock1\\nH 6 0 1 60000 mallory", 0);
	h_daemon_start_redis(&d, &r, NULL);
	c = h_hello(d.port, "m");
	h_expect_status(c, "l1", "held", 9, "carol", 0);
	expect_free(c, "zombie");
	h_close(c);
	cr_assert(!h_daemon_log_has(&d, "migrat"));
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* ---- (c) the re-sync replaces buckets whole ----------------------------- */

#define RESYNC_HELD 300

/* The link dies with Redis (SIGSTOP, then CLIENT KILL TYPE normal); a
 * lease expires meanwhile, its delete never sent. The re-sync that
 * follows deletes its record -- its bucket is replaced whole -- and keeps
 * every held lock, in the same bucket too. Then a record planted behind
 * the daemon's back goes at the next re-sync. Fails if the re-sync only
 * writes (the expired lease is restored after kill -9) or drops a bucket
 * it should fill. */
Test(layout, resync_after_a_lost_link_deletes_what_ended_and_keeps_every_lease)
{
	struct h_client *c, *m;
	uint64_t tok[RESYNC_HELD], tmate;
	char name[32], mate[32], ghost[32], cmd[128], want[64], *l;
	int i;

	h_redis_start(&r, "always");
	/* a leadership that outlasts the outage: reads stay served */
	h_daemon_start_redis(&d, &r,
			     "[persistence]\nredis_timeout = 500ms\n"
			     "[cluster]\nleader_lease = 60s\n");
	c = h_hello(d.port, "c");
	m = h_hello(d.port, "m");
	for (i = 0; i < RESYNC_HELD; i++)
		h_send(c, "LOCK h%d ttl=120s", i);
	for (i = 0; i < RESYNC_HELD; i++) {
		l = h_line(c);
		snprintf(want, sizeof(want), "OK GRANTED h%d ", i);
		cr_assert(h_starts(l, want), "\"%s\"", l);
		tok[i] = h_arg_u64(l, 1);
	}
	bucket_mate("gone", "mate", mate, sizeof(mate));
	tmate = h_lock(c, mate, "ttl=120s");
	h_lock(c, "gone", "ttl=3s");
	cr_assert(strstr(h_rec_get(&r, "gone"), " c"));

	kill(r.pid, SIGSTOP);
	h_wait_available(m, 0, 5000);
	h_wait_free(m, "gone", 10000); /* expired, its delete not sent */
	kill(r.pid, SIGCONT);
	h_redis_cli(&r, "CLIENT KILL TYPE normal");
	h_wait_available(m, 1, 10000);
	cr_assert(h_daemon_log_has(&d, "re-synced"));
	cr_assert_str_eq(h_rec_get(&r, "gone"), "\n",
			 "the re-sync kept the record of an expired lease");
	snprintf(want, sizeof(want), "H %llu ", (unsigned long long)tmate);
	cr_assert(strstr(h_rec_get(&r, mate), want), "\"%s\"",
		  h_rec_get(&r, mate));
	for (i = 0; i < RESYNC_HELD; i++) {
		snprintf(name, sizeof(name), "h%d", i);
		snprintf(want, sizeof(want), "H %llu ",
			 (unsigned long long)tok[i]);
		cr_assert(strstr(h_rec_get(&r, name), want),
			  "%s lost by the re-sync: \"%s\"", name,
			  h_rec_get(&r, name));
	}

	/* a record nobody holds, planted in a bucket with a lease */
	bucket_mate(mate, "ghost", ghost, sizeof(ghost));
	snprintf(cmd, sizeof(cmd), "dlock1\\nH 7 0 1 60000 mallory");
	h_rec_plant(&r, ghost, cmd);
	/* and a stale layout 1, as a Redis restored from an AOF older than
	 * the migration has it: a name set saying h0 is free of c (found
	 * from outside: left in place, the next start migrated it over the
	 * buckets and freed every lease granted since) */
	h_redis_cli(&r, "SADD dlock:locks h0 other");
	h_redis_cli(&r, "SET dlock:lock:other \"dlock1\nH 5 0 1 60000 x\"");
	h_redis_cli(&r, "CLIENT KILL TYPE normal");
	cr_assert(h_redis_wait(&r, h_rec_cmd("HEXISTS", ghost), "0", 1, 10000),
		  "the re-sync kept a record the table does not have");
	cr_assert(h_redis_wait(&r, "EXISTS dlock:locks", "0", 1, 10000),
		  "the re-sync left a stale name set of layout 1");
	h_wait_available(m, 1, 10000);

	h_daemon_kill9(&d);
	h_close(c);
	h_close(m);
	h_daemon_restart(&d);
	m = h_hello(d.port, "m");
	expect_free(m, "gone");
	expect_free(m, ghost);
	h_expect_status(m, mate, "held", tmate, "c", 0);
	h_expect_status(m, "h0", "held", tok[0], "c", 0);
	expect_free(m, "other");
	for (i = 0; i < RESYNC_HELD; i += 7) {
		snprintf(name, sizeof(name), "h%d", i);
		h_expect_status(m, name, "held", tok[i], "c", 0);
	}
	h_close(m);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

#define SPREAD	      60000
#define SPREAD_WINDOW 1000

/* A name of bucket b: "<prefix><i>". */
static void bucket_name(uint32_t b, const char *prefix, char *out, size_t len)
{
	int i;

	for (i = 0;; i++) {
		snprintf(out, len, "%s%d", prefix, i);
		if (dl_store_bucket(out, strlen(out)) == b)
			return;
	}
}

/* The re-sync indexes the table a step per loop iteration and formats
 * each call when it sends it, the table pinned meanwhile. Here Redis is
 * stopped right after the re-sync's first call (bucket 0's planted record
 * gone), and while the rest waits a third of the indexed locks expire
 * (changes are refused until the link is up, but leases end on time), so
 * most buckets are formatted after their locks changed. The re-sync must
 * still end, at once (no second link failure), the expired locks must
 * stay in memory until the link is up (under ASan, a lock freed while the
 * re-sync points to it is a use after free), and every change must be in
 * Redis afterwards: after a kill -9 the expired locks are free, the
 * others held with their tokens, and the planted record gone. (Whether a
 * call formatted late leaves an expired lock out cannot be seen from
 * here: the drain after the link is up deletes it either way.) */
Test(layout, a_resync_with_locks_expiring_between_its_calls_loses_nothing,
     .timeout = 300)
{
	static uint64_t tok[SPREAD];
	struct h_client *c, *m, *rc;
	char ghost[32], want[64], *l;
	int i, j, polls = 0;
	uint64_t until;

	h_redis_start(&r, "everysec");
	/* a leadership that outlasts the stop, and 10 s of silence before
	 * the link is given up (the re-sync must not start again) */
	h_daemon_start_redis(&d, &r,
			     "[persistence]\nredis_timeout = 10s\n"
			     "[cluster]\nleader_lease = 60s\n"
			     "[limits]\nmax_locks_per_owner = 100000\n");
	c = h_hello(d.port, "c");
	m = h_hello(d.port, "m");
	for (i = 0; i < SPREAD; i += SPREAD_WINDOW) {
		for (j = i; j < i + SPREAD_WINDOW; j++)
			h_send(c, "LOCK s%d ttl=600s", j);
		for (j = i; j < i + SPREAD_WINDOW; j++) {
			l = h_line(c);
			snprintf(want, sizeof(want), "OK GRANTED s%d ", j);
			cr_assert(h_starts(l, want), "\"%s\"", l);
			tok[j] = h_arg_u64(l, 1);
		}
	}
	bucket_name(0, "ghost", ghost, sizeof(ghost));
	h_rec_plant(&r, ghost, "dlock1\\nH 7 0 1 60000 mallory");
	/* a third of them to end 1.5 s from now */
	for (i = 0; i < SPREAD; i += 3 * SPREAD_WINDOW) {
		for (j = i; j < i + 3 * SPREAD_WINDOW && j < SPREAD; j += 3)
			h_send(c, "REFRESH s%d %llu ttl=1500ms", j,
			       (unsigned long long)tok[j]);
		for (j = i; j < i + 3 * SPREAD_WINDOW && j < SPREAD; j += 3)
			h_expect_prefix(c, "OK REFRESHED s%d ", j);
	}

	h_redis_cli(&r, "CLIENT KILL TYPE normal");
	/* a connection of our own polls Redis for the first call, for as
	 * long as the reconnect and the take of the leadership may take on
	 * a loaded machine (a cap of 100,000 polls, 5 s, once ran out
	 * under ASan beside other work) */
	rc = h_connect(r.port);
	until = h_now_ms() + 60000;
	do {
		l = h_call(rc, "HEXISTS %s %s", h_rec_key(ghost), ghost);
		polls++;
	} while (strcmp(l, ":1") == 0 && h_now_ms() < until);
	kill(r.pid, SIGSTOP);
	cr_assert_str_eq(l, ":0", "the re-sync never wrote bucket 0");
	cr_log_info("bucket 0 replaced after %d polls", polls);
	cr_assert_eq(h_stats_value(m, "store_available"), 0,
		     "the re-sync ended before Redis was stopped: "
		     "this test needs more locks");
	/* new locks meanwhile are refused (and leave nothing behind) */
	for (i = 0; i < 100; i++) {
		l = h_call(m, "LOCK fresh%d ttl=10s", i);
		cr_assert(h_starts(l, "ERR UNAVAILABLE"), "\"%s\"", l);
	}
	h_sleep_ms(2000);
	for (i = 0; i < SPREAD; i += 3000)
		cr_assert_str_eq(h_kv(h_call(m, "STATUS s%d", i), "state"),
				 "free", "s%d did not expire", i);
	kill(r.pid, SIGCONT);

	h_wait_available(m, 1, 60000);
	cr_assert(h_daemon_log_has(&d, "re-synced"));
	cr_assert(!h_daemon_log_has(&d, "re-sync failed"));
	cr_assert_eq(h_stats_value(m, "store_failures"), 1,
		     "the link failed again during the re-sync");
	/* the expiries are lazy writes: gone within DL_STORE_LAZY_MS */
	cr_assert(h_redis_wait(&r, h_rec_cmd("HEXISTS", "s0"), "0", 1, 10000));
	h_close(rc);

	h_daemon_kill9(&d);
	h_close(c);
	h_close(m);
	h_daemon_restart(&d);
	cr_assert(!h_daemon_log_has(&d, "not written by dlockd"));
	m = h_hello(d.port, "m");
	for (i = 0; i < SPREAD; i += SPREAD_WINDOW) {
		for (j = i; j < i + SPREAD_WINDOW; j++)
			h_send(m, "STATUS s%d", j);
		for (j = i; j < i + SPREAD_WINDOW; j++) {
			l = h_line(m);
			if (j % 3 == 0) {
				cr_assert_str_eq(h_kv(l, "state"), "free",
						 "s%d: \"%s\"", j, l);
				continue;
			}
			cr_assert_str_eq(h_kv(l, "state"), "held",
					 "s%d: \"%s\"", j, l);
			cr_assert_eq(h_kv_u64(l, "token"), tok[j],
				     "s%d: \"%s\"", j, l);
		}
	}
	expect_free(m, ghost);
	h_close(m);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

#define CROWD	     120000
#define CROWD_BUCKET 7

/* Found from outside: names chosen to fall into one bucket (FNV-1a has no
 * key) make one re-sync call of all their records -- a bucket is replaced
 * whole, in one call. Here 120,000 of them, and a redis_timeout shorter
 * than Redis takes to apply that call: the call's reply is given more
 * time per record, and the re-sync ends. Fails if it is timed out by
 * redis_timeout alone: the link fails, the re-sync begins again, forever,
 * and changes are refused all along. */
Test(layout, a_resync_of_one_crowded_bucket_ends, .timeout = 300)
{
	static char names[CROWD][16];
	struct h_client *c, *m;
	char want[64], *l;
	uint32_t h;
	int i, j, n;

	for (i = n = 0; n < CROWD; i++) {
		snprintf(names[n], sizeof(names[n]), "c%d", i);
		h = dl_store_bucket(names[n], strlen(names[n]));
		n += h == CROWD_BUCKET;
	}
	h_redis_start(&r, "everysec");
	/* a leadership that outlasts the load and the re-sync: one that
	 * lapsed would not keep its table (store_lead.c), and this test is
	 * about the re-sync */
	h_daemon_start_redis(&d, &r,
			     "[server]\nlog_level = info\n"
			     "[persistence]\nredis_timeout = 150ms\n"
			     "[cluster]\nleader_lease = 60s\n"
			     "[limits]\nmax_locks_per_owner = 200000\n");
	c = h_hello(d.port, "c");
	m = h_hello(d.port, "m");
	for (i = 0; i < CROWD; i += 1000) {
		for (j = i; j < i + 1000; j++)
			h_send(c, "LOCK %s ttl=600s", names[j]);
		for (j = i; j < i + 1000; j++) {
			l = h_line(c);
			snprintf(want, sizeof(want), "OK GRANTED %s ",
				 names[j]);
			cr_assert(h_starts(l, want), "\"%s\"", l);
		}
	}
	cr_assert_eq(atoi(h_redis_cli(&r, "HLEN dlock:rec:7")), CROWD);
	h_redis_cli(&r, "CLIENT KILL TYPE normal");
	h_wait_available(m, 1, 60000);
	cr_assert(h_daemon_log_has(&d, "120000 locks re-synced"));
	/* Not store_failures == 1: under load a step of the handshake may
	 * pass the 150 ms once (the timer runs before the reply waiting in
	 * the socket is read: CI, and here with two cores spinning), which
	 * is not what this test is about. */
	if (h_daemon_log_has(&d, "timed out re-syncing"))
		h_daemon_print_log(&d); /* which call, and when */
	cr_assert(!h_daemon_log_has(&d, "timed out re-syncing"),
		  "the re-sync was timed out and began again");
	cr_assert_eq(atoi(h_redis_cli(&r, "HLEN dlock:rec:7")), CROWD);
	h_close(c);
	h_close(m);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* ---- (d) daemons of layout 1 are kept out -------------------------------- */

/* The library of the daemons of layout 1 (dlock_v4, as main wrote it
 * before layout 2: server/store_batch.c at 8a5d2c6), verbatim in
 * tests/fixtures/layout1_v4.lua: the barrier must hold against the real
 * functions, not a model of them. Tests run from the source tree. */
#define V4_LIBRARY "tests/fixtures/layout1_v4.lua"

/* FUNCTION LOAD REPLACE of the library in file `path`. */
static void load_library(const char *path)
{
	char cmd[H_PATH_MAX + 128];

	snprintf(
		cmd, sizeof(cmd),
		"redis-cli -h %s -p %d -x FUNCTION LOAD REPLACE < %s >/dev/null",
		r.host, r.port, path);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* Once a daemon of layout 2 has taken the leadership, a daemon of
 * layout 1 on the same Redis can neither take it (its lead function
 * fails on the fence "<epoch>/2": tonumber gives nil), nor write (its
 * apply compares the fence string: FENCED), nor raise the fence the way
 * the daemons before functions did (INCR: not an integer); it can still
 * look (its clients are sent to the active). It would see no locks, so
 * it must never be active. Fails if the fence is written as a bare
 * number. */
Test(layout, daemons_of_layout_1_cannot_take_over_a_redis_in_layout_2)
{
	struct h_client *c;
	uint64_t e;
	char cmd[256];
	const char *out;

	h_redis_start(&r, "always");
	load_library(V4_LIBRARY);
	h_daemon_start_redis(&d, &r, NULL);
	c = h_hello(d.port, "c");
	h_lock(c, "x", "ttl=60s");
	h_close(c);
	e = strtoull(h_redis_cli(&r, "GET dlock:fence"), NULL, 10);

	/* a look, while the active holds the leadership */
	out = h_redis_cli(&r, "FCALL dlock_lead_v4 2 dlock:leader dlock:fence "
			      "look 0 old 127.0.0.1:1 4000 0123456789abcdef");
	cr_assert(!strstr(out, "ERR") && strstr(out, "127.0.0.1"),
		  "an old standby cannot look: \"%s\"", out);
	/* the active gives the leadership up (clean stop): free to take */
	cr_assert_eq(h_daemon_stop(&d), 0);
	cr_assert_str_eq(h_redis_cli(&r, "EXISTS dlock:leader"), "0\n");
	out = h_redis_cli(&r, "FCALL dlock_lead_v4 2 dlock:leader dlock:fence "
			      "take 0 old 127.0.0.1:1 4000 0123456789abcdef");
	cr_assert(strstr(out, "ERR") || strstr(out, "rror"),
		  "an old daemon took the leadership: \"%s\"", out);
	out = h_redis_cli(&r, "FCALL dlock_lead_v4 2 dlock:leader dlock:fence "
			      "start 0 old 127.0.0.1:1 4000 0123456789abcdef");
	cr_assert(strstr(out, "ERR") || strstr(out, "rror"),
		  "an old daemon took the leadership at its start: \"%s\"",
		  out);
	/* an old active (renewing with the epoch it had) is refused too */
	snprintf(cmd, sizeof(cmd),
		 "FCALL dlock_lead_v4 2 dlock:leader dlock:fence renew %llu "
		 "old 127.0.0.1:1 4000 0123456789abcdef",
		 (unsigned long long)e);
	out = h_redis_cli(&r, cmd);
	cr_assert(!h_starts(out, "1\n"), "an old active renewed: \"%s\"", out);
	cr_assert_str_eq(h_redis_cli(&r, "EXISTS dlock:leader"), "0\n");
	/* its writes are fenced, with any numeric fence */
	snprintf(cmd, sizeof(cmd),
		 "FCALL dlock_apply_v4 4 dlock:fence dlock:token dlock:locks "
		 "dlock:lock:x %llu '' 11 D ''",
		 (unsigned long long)e);
	out = h_redis_cli(&r, cmd);
	cr_assert(strstr(out, "FENCED"), "an old write applied: \"%s\"", out);
	/* the daemons before functions */
	out = h_redis_cli(&r, "INCR dlock:fence");
	cr_assert(strstr(out, "not an integer"), "INCR: \"%s\"", out);
	cr_assert_eq(fence_epoch(), e, "the old functions moved the fence");

	/* and the daemon of layout 2 comes back with its lock */
	h_daemon_restart(&d);
	c = h_hello(d.port, "m");
	h_expect_status(c, "x", "held", 0, "c", 0);
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* ---- (e) a restart with many locks -------------------------------------- */

#define MANY 5000

/* calls of a Redis command so far (INFO commandstats). */
static long redis_calls(const char *cmd)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof(key), "cmdstat_%s:calls=", cmd);
	p = strstr(h_redis_cli(&r, "INFO commandstats"), key);
	return p ? atol(p + strlen(key)) : 0;
}

/* Every lock of a table spread over the buckets comes back, with its
 * token. The locks are taken while Redis is stopped, so that they go as
 * one batch, of more locks than the apply function groups per bucket
 * (one HSET per bucket). Fails if the loader skips buckets (a window
 * that never refills, a bucket read as another's), if a batch writes a
 * record into the wrong bucket (the loader ignores it, and says so), or
 * if the grouped writes lose some. */
Test(layout, a_restart_restores_locks_spread_over_every_bucket)
{
	static uint64_t tok[MANY];
	struct h_client *c;
	char want[64], *l;
	int i, nb, total = 0;
	long hsets;
	const char *out;

	h_redis_start(&r, "always");
	h_daemon_start_redis(&d, &r, "[limits]\nmax_locks_per_owner = 10000\n");
	c = h_hello(d.port, "c");
	h_lock(c, "warm", "ttl=120s");
	hsets = redis_calls("hset");
	kill(r.pid, SIGSTOP);
	h_send(c, "LOCK first ttl=120s"); /* its batch waits for Redis */
	for (i = 0; i < MANY; i++)
		h_send(c, "LOCK k%d ttl=120s%s", i, i % 10 ? "" : " id=t");
	h_sleep_ms(500);
	kill(r.pid, SIGCONT);
	h_expect_prefix(c, "OK GRANTED first ");
	for (i = 0; i < MANY; i++) {
		l = h_line(c);
		snprintf(want, sizeof(want), "OK GRANTED k%d ", i);
		cr_assert(h_starts(l, want), "\"%s\"", l);
		tok[i] = h_arg_u64(l, 1);
	}
	h_close(c);
	hsets = redis_calls("hset") - hsets;
	cr_log_info("%d locks written with %ld HSETs", MANY + 1, hsets);
	cr_assert_lt(hsets, MANY, "the big batch was not grouped per bucket");
	nb = count_keys("dlock:rec:*");
	cr_assert_gt(nb, 1000, "only %d buckets hold %d locks", nb, MANY);
	for (i = 0; i < DL_STORE_BUCKETS; i++) {
		char cmd[64];

		snprintf(cmd, sizeof(cmd), "HLEN dlock:rec:%d", i);
		out = h_redis_cli(&r, cmd);
		total += atoi(out);
		if (i % 256 == 0)
			cr_log_info("bucket %d: %s", i, out);
	}
	cr_assert_eq(total, MANY + 2);

	h_daemon_kill9(&d);
	h_daemon_restart(&d);
	cr_assert(h_daemon_log_has(&d, "loaded 5002 leases"));
	cr_assert(!h_daemon_log_has(&d, "not written by dlockd"));
	c = h_hello(d.port, "m");
	for (i = 0; i < MANY; i++)
		h_send(c, "STATUS k%d", i);
	for (i = 0; i < MANY; i++) {
		l = h_line(c);
		cr_assert_str_eq(h_kv(l, "state"), "held", "k%d: \"%s\"", i, l);
		cr_assert_eq(h_kv_u64(l, "token"), tok[i], "k%d: \"%s\"", i, l);
	}
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}
