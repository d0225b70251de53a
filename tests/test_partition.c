/* SPDX-License-Identifier: MIT */
/*
 * test_partition.c -- a namespace split into partitions (server/part/),
 * over the wire, with real daemons of three partitions on one real Redis
 * (the map and every partition's keys; a Redis Cluster is test_rcluster's):
 *
 *   - the map is made by PARTITION INIT, names every daemon, and is the
 *     same for all of them;
 *   - a name is served by the partition the map gives its slot, others
 *     answer NO MOVED <partition> <addrs> <epoch>;
 *   - PARTITION MOVE gives slots away with the locks of their names:
 *     leases keep their tokens, waiters their places, at the receiver,
 *     whose tokens stay above the giver's;
 *   - slots recorded as given away stay unserved by the giver's next
 *     active even when the map does not say so yet, and it completes
 *     the map;
 *   - a map that Redis lost or took back is written back.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/slot.h"
#include "tests/harness.h"

#define NPARTS 3

static struct h_redis r;
static struct h_daemon d[NPARTS];

static void start(void)
{
	h_parts_start(d, NPARTS, &r);
}

static void stop(void)
{
	h_parts_stop(d, NPARTS, &r);
}

TestSuite(partition, .init = start, .fini = stop, .timeout = 90);

/* The map daemon i serves (h_map_wait). */
static const char *map_of(int i, uint64_t epoch, const char *needle)
{
	return h_map_wait(d[i].port, epoch, needle);
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* "part p<i> addrs=127.0.0.1:<port>" */
static const char *part_line(int i)
{
	static char s[80];

	snprintf(s, sizeof(s), "part p%d addrs=127.0.0.1:%d ", i, d[i].port);
	return s;
}

/* PARTITION INIT on p0, then every daemon knows a map naming all. */
static void init_map(void)
{
	struct h_client *c = h_connect(d[0].port);
	int i, k;

	cr_assert_str_eq(h_call(c, "PARTITION INIT"), "OK PARTITION epoch=1");
	h_close(c);
	for (i = 0; i < NPARTS; i++)
		for (k = 0; k < NPARTS; k++)
			map_of(i, 1, part_line(k));
}

/* A name whose slot is `slot`: "n<k>" for the first k that lands there. */
static const char *name_in(unsigned slot)
{
	static char name[32];
	unsigned k;

	for (k = 0;; k++) {
		snprintf(name, sizeof(name), "n%u", k);
		if (dl_key_slot(name, strlen(name)) == slot)
			return name;
	}
}

/* A name whose slot is in [lo, hi]. */
static const char *name_between(unsigned lo, unsigned hi)
{
	static char name[32];
	unsigned k, s;

	for (k = 0;; k++) {
		snprintf(name, sizeof(name), "m%u", k);
		s = dl_key_slot(name, strlen(name));
		if (s >= lo && s <= hi)
			return name;
	}
}

/* The epoch of map_of's text ("OK MAP <epoch> <n>\n..."). */
static uint64_t epoch_of(const char *map)
{
	return strtoull(map + strlen("OK MAP "), NULL, 10);
}

Test(partition, nothing_is_served_before_the_map_exists)
{
	struct h_client *c = h_connect(d[1].port);

	h_sleep_ms(300); /* its first read of the map is done */
	cr_assert_str_eq(h_call(c, "MAP"), "OK MAP 0 0");
	cr_assert(h_starts(h_call(c, "TRYLOCK x"),
			   "ERR UNAVAILABLE the partition map is not read yet"),
		  "%s", c->line);
	cr_assert(h_starts(h_call(c, "PARTITION MOVE 1 p0"), "ERR BAD_ARG"),
		  "%s", c->line);
	h_close(c);
}

Test(partition, init_makes_one_map_that_names_every_daemon)
{
	struct h_client *c;
	const char *m;

	init_map();
	m = map_of(2, 1, "slots p0 0-16383");
	cr_assert(strstr(m, "slots p1 -") && strstr(m, "slots p2 -"), "%s", m);
	c = h_connect(d[1].port);
	cr_assert(h_starts(h_call(c, "PARTITION INIT"),
			   "ERR BAD_ARG a partition map exists already"),
		  "%s", c->line);
	h_close(c);
	/* the map in Redis is the one served */
	cr_assert(strstr(h_redis_cli(&r, "GET 't:{map}'"), "dlock-map 1\n"),
		  "%s", h_redis_cli(&r, "GET 't:{map}'"));
}

/* "OK PARTITION epoch=<e> to=<p>": e */
static uint64_t moved(struct h_client *c, const char *slots, const char *to)
{
	char *l = h_call(c, "PARTITION MOVE %s %s", slots, to);
	char want[64];

	cr_assert(h_starts(l, "OK PARTITION epoch="), "%s", l);
	snprintf(want, sizeof(want), " to=%s", to);
	cr_assert(strstr(l, want) != NULL, "%s", l);
	return h_kv_u64(l, "epoch");
}

Test(partition, a_name_is_served_by_its_partition_only)
{
	struct h_client *c0, *c1, *c2;
	char want[160];
	uint64_t e, t0, t1;
	const char *in1, *in0;
	char cmd[128];

	/* p0's tokens an hour ahead of the clock (a mark Redis holds, as a
	 * clock stepped back would leave): p1's own would be below them */
	h_daemon_kill9(&d[0]);
	snprintf(cmd, sizeof(cmd), "SET 't:{p0}:token' %" PRIu64,
		 (wall_ms() + 3600000) * 1000000);
	h_redis_cli(&r, cmd);
	h_daemon_restart(&d[0]);
	init_map();
	c0 = h_connect(d[0].port);
	t0 = h_lock(c0, "warm", "ttl=10s");
	cr_assert(t0 > (wall_ms() + 3000000) * 1000000, "%" PRIu64, t0);
	e = moved(c0, "5461-10922", "p1");
	map_of(1, e, "slots p1 5461-10922");
	map_of(2, e, "slots p1 5461-10922");
	in1 = name_between(5461, 10922);
	c1 = h_connect(d[1].port);
	c2 = h_connect(d[2].port);
	/* p0 and p2 send the client to p1, with the map's epoch */
	snprintf(want, sizeof(want), "NO MOVED p1 127.0.0.1:%d %" PRIu64,
		 d[1].port, e);
	cr_assert_str_eq(h_call(c0, "TRYLOCK %s", in1), want);
	cr_assert_str_eq(h_call(c2, "STATUS %s", in1), want);
	cr_assert_str_eq(h_call(c2, "UNLOCK %s 5", in1), want);
	/* p1 grants it, above every token p0 gave (its floor) */
	t1 = h_lock(c1, in1, "ttl=10s");
	cr_assert(t1 > t0, "p1 granted %" PRIu64 ", p0 had %" PRIu64, t1, t0);
	/* and never one p0 gives: each partition its own class mod 64 */
	cr_assert(t0 % 64 != t1 % 64, "%" PRIu64 " and %" PRIu64, t0, t1);
	/* and p0 still serves the rest; p1 sends those to p0 */
	in0 = name_between(0, 5460);
	h_lock(c0, in0, "ttl=10s");
	snprintf(want, sizeof(want), "NO MOVED p0 127.0.0.1:%d %" PRIu64,
		 d[0].port, e);
	cr_assert_str_eq(h_call(c1, "TRYLOCK %s", in0), want);
	/* a WATCH of a prefix is every partition's own */
	cr_assert(h_starts(h_call(c2, "WATCH m*"), "OK WATCHING"), "%s",
		  c2->line);
	h_close(c0);
	h_close(c1);
	h_close(c2);
}

Test(partition, a_multi_lock_stays_in_one_partition)
{
	struct h_client *c0;
	const char *a = name_between(0, 5460);
	char a_copy[32], *l;

	init_map();
	c0 = h_connect(d[0].port);
	moved(c0, "5461-16383", "p1");
	snprintf(a_copy, sizeof(a_copy), "%s", a);
	l = h_call(c0, "LOCK %s %s ttl=5s", a_copy, name_between(5461, 16383));
	cr_assert(h_starts(l, "ERR BAD_ARG the names are in several "
			      "partitions"),
		  "%s", l);
	/* names under one tag share a slot, so a partition */
	l = h_call(c0, "LOCK {%s}.a {%s}.b ttl=5s", a_copy, a_copy);
	cr_assert(h_starts(l, "OK LOCKED"), "%s", l);
	h_close(c0);
}

/* h_call until the answer is not ERR UNAVAILABLE (the receiver of a
 * move imports its locks first, for a moment): that answer. */
static char *call_served(struct h_client *c, const char *cmd)
{
	char *l;
	int i;

	for (i = 0; i < 200; i++) {
		l = h_call(c, "%s", cmd);
		if (!h_starts(l, "ERR UNAVAILABLE"))
			return l;
		h_sleep_ms(50);
	}
	cr_assert_fail("%s: still %s", cmd, l);
	return NULL;
}

Test(partition, a_move_carries_the_leases_and_queues_of_its_slots)
{
	struct h_client *a0, *b0, *a2, *b2, *c2;
	const char *n = name_in(3300);
	char name[32], cmd[96], want[96], *l;
	uint64_t tok, tok2, e;

	init_map();
	snprintf(name, sizeof(name), "%s", n);
	a0 = h_hello(d[0].port, "alice");
	b0 = h_hello(d[0].port, "bob");
	tok = h_lock(a0, name, "ttl=20s");
	h_send(b0, "LOCK %s ttl=20s wait=30s", name);
	cr_assert(h_starts(h_line(b0), "OK QUEUED"), "%s", b0->line);
	/* the slot moves, with its lease and its queue */
	l = h_call(a0, "PARTITION MOVE 3000-3400 p2");
	cr_assert(h_starts(l, "OK PARTITION epoch="), "%s", l);
	cr_assert(strstr(l, " to=p2 locks=1") != NULL, "%s", l);
	e = h_kv_u64(l, "epoch");
	/* the waiter is told where its place went */
	snprintf(want, sizeof(want), "* MOVED %s p2 127.0.0.1:%d ", name,
		 d[2].port);
	cr_assert(h_starts(h_line(b0), want), "%s", b0->line);
	/* the giver sends every request about it there */
	l = h_call(a0, "REFRESH %s %" PRIu64, name, tok);
	cr_assert(h_starts(l, "NO MOVED p2 "), "%s", l);
	map_of(2, e, "slots p2 3000-3400");
	/* the receiver has the lease: its holder refreshes it there, with
	 * its token; nobody else gets it */
	a2 = h_hello(d[2].port, "alice");
	snprintf(cmd, sizeof(cmd), "REFRESH %s %" PRIu64 " ttl=20s", name, tok);
	l = call_served(a2, cmd);
	cr_assert(h_starts(l, "OK REFRESHED"), "%s", l);
	c2 = h_hello(d[2].port, "carol");
	l = h_call(c2, "TRYLOCK %s ttl=2s", name);
	cr_assert(h_starts(l, "NO BUSY"), "%s", l);
	/* the waiter's owner claims its place, ahead of carol */
	h_send(c2, "LOCK %s ttl=5s wait=30s", name);
	cr_assert(h_starts(h_line(c2), "OK QUEUED"), "%s", c2->line);
	b2 = h_hello(d[2].port, "bob");
	h_send(b2, "LOCK %s ttl=20s wait=30s", name);
	l = h_line(b2);
	cr_assert(h_starts(l, "OK QUEUED"), "%s", l);
	cr_assert(strstr(l, " 1") != NULL, "bob's place is first: %s", l);
	/* released at the receiver: bob, then carol, tokens above */
	l = h_call(a2, "UNLOCK %s %" PRIu64, name, tok);
	cr_assert(h_starts(l, "OK RELEASED"), "%s", l);
	l = h_line(b2);
	cr_assert(h_starts(l, "* GRANTED"), "%s", l);
	snprintf(want, sizeof(want), "* GRANTED %s ", name);
	tok2 = strtoull(l + strlen(want), NULL, 10);
	cr_assert_gt(tok2, tok, "%s", l);
	l = h_call(b2, "UNLOCK %s %" PRIu64, name, tok2);
	cr_assert(h_starts(l, "OK RELEASED"), "%s", l);
	l = h_line(c2);
	cr_assert(h_starts(l, "* GRANTED"), "%s", l);
	cr_assert_gt(strtoull(l + strlen(want), NULL, 10), tok2, "%s", l);
	/* the giver kept nothing of it */
	cr_assert(h_starts(h_call(a0, "STATUS %s", name), "NO MOVED p2 "), "%s",
		  a0->line);
	cr_assert_eq(h_stats_value(a0, "partition_locks_moved_out"), 1);
	cr_assert_eq(h_stats_value(a2, "partition_locks_imported"), 1);
	h_close(a0);
	h_close(b0);
	h_close(a2);
	h_close(b2);
	h_close(c2);
}

Test(partition, a_move_waits_for_the_import_of_the_last_one)
{
	struct h_client *a0;
	char name[32], *l;
	int i;

	init_map();
	snprintf(name, sizeof(name), "%s", name_in(3300));
	a0 = h_hello(d[0].port, "alice");
	h_lock(a0, name, "ttl=20s");
	/* p2 stopped: nobody imports move 1's lock */
	h_daemon_stop(&d[2]);
	l = h_call(a0, "PARTITION MOVE 3300 p2");
	cr_assert(h_starts(l, "OK PARTITION"), "%s", l);
	l = h_call(a0, "PARTITION MOVE 100 p1");
	cr_assert(h_starts(l, "ERR LIMIT limit reached: partition p2 has not "
			      "imported the locks of move 1"),
		  "%s", l);
	/* p2 back: it imports, the map says so, and moves go on */
	h_daemon_restart(&d[2]);
	for (i = 0; i < 200; i++) {
		l = h_call(a0, "PARTITION MOVE 100 p1");
		if (!h_starts(l, "ERR LIMIT"))
			break;
		h_sleep_ms(100);
	}
	cr_assert(h_starts(l, "OK PARTITION"), "%s", l);
	cr_assert(strstr(l, " locks=0") != NULL, "%s", l);
	h_close(a0);
}

/* Found from outside: a move's record that Redis lost before the
 * receiver imported it stopped the whole receiving partition, for good.
 * Only the move's slots wait, and only until every lease of them has
 * ended (max_ttl, 3 s here); the receiver's other names are served. */
Test(partition, a_lost_move_record_holds_its_slots_for_max_ttl_only)
{
	struct h_client *a0, *c2, *c3;
	char name[32], other[32], cmd[96], *l;
	uint64_t t0, tok;
	int i;

	h_daemon_stop(&d[2]);
	h_part_start(&d[2], &r, "t:", "p2",
		     "[limits]\nmax_ttl = 3s\ndefault_ttl = 2s");
	init_map();
	snprintf(name, sizeof(name), "%s", name_in(3300));
	snprintf(other, sizeof(other), "%s", name_in(100));
	a0 = h_hello(d[0].port, "alice");
	/* p2 serves slot 100 already; then gets 3300 with a lock, its
	 * record deleted before p2 can import it */
	l = h_call(a0, "PARTITION MOVE 100 p2");
	cr_assert(h_starts(l, "OK PARTITION"), "%s", l);
	map_of(2, h_kv_u64(l, "epoch"), "slots p2 100");
	tok = h_lock(a0, name, "ttl=20s");
	h_daemon_signal(&d[2], SIGSTOP);
	l = h_call(a0, "PARTITION MOVE 3300 p2");
	cr_assert(h_starts(l, "OK PARTITION"), "%s", l);
	cr_assert(strstr(l, "locks=1") != NULL, "%s", l);
	h_redis_cli(&r, "DEL t:{p0}:part");
	h_daemon_signal(&d[2], SIGCONT);
	t0 = h_now_ms();
	c2 = h_hello(d[2].port, "bob");
	/* its own names are served meanwhile */
	c3 = h_hello(d[2].port, "carol");
	snprintf(cmd, sizeof(cmd), "LOCK %s ttl=2s", other);
	l = call_served(c3, cmd);
	cr_assert(h_starts(l, "OK GRANTED"), "%s", l);
	h_close(c3);
	/* the moved one waits: nobody gets it while alice may believe */
	for (i = 0; i < 200; i++) {
		l = h_call(c2, "TRYLOCK %s ttl=2s", name);
		/* NO MOVED: p2 has not read the map of the move yet */
		if (!h_starts(l, "ERR UNAVAILABLE") && !h_starts(l, "NO MOVED"))
			break;
		cr_assert_lt(h_now_ms() - t0, 20000, "still %s", l);
		h_sleep_ms(100);
	}
	cr_assert(h_starts(l, "OK GRANTED"), "%s", l);
	cr_assert_geq(h_now_ms() - t0, 2500,
		      "served after max_ttl (3 s) from when the loss was seen");
	/* "OK GRANTED <name> <token> ...": above alice's */
	cr_assert_gt(strtoull(l + strlen("OK GRANTED ") + strlen(name) + 1,
			      NULL, 10),
		     tok, "%s", l);
	h_close(a0);
	h_close(c2);
}

/* Found from outside: an owner id that said HELLO at the receiver first,
 * with another key, made a whole moved record unreadable -- the holder's
 * lease voided and the lock held for max_ttl (a day). A waiter of such an
 * owner is left out now, and a holder's lock is held by nobody for that
 * lease's TTL only. */
Test(partition, an_owner_bound_elsewhere_costs_only_its_own_place)
{
	struct h_client *a0, *b0, *sq, *a2, *c2;
	char name[32], name2[32], cmd[96], *l;
	uint64_t tok, t0;
	int i;

	init_map();
	snprintf(name, sizeof(name), "%s", name_in(3300));
	snprintf(name2, sizeof(name2), "%s", name_in(3301));
	a0 = h_hello(d[0].port, "alice");
	b0 = h_hello(d[0].port, "bob");
	tok = h_lock(a0, name, "ttl=20s");
	h_send(b0, "LOCK %s ttl=20s wait=30s", name);
	cr_assert(h_starts(h_line(b0), "OK QUEUED"), "%s", b0->line);
	h_lock(b0, name2, "ttl=2s"); /* bob holds this one */
	/* bob's id, another key, at p2 first */
	sq = h_connect(d[2].port);
	l = h_call(sq, "HELLO owner=bob key=squatter-key-0123456789");
	cr_assert(h_starts(l, "OK HELLO"), "%s", l);
	l = h_call(a0, "PARTITION MOVE 3300-3301 p2");
	cr_assert(h_starts(l, "OK PARTITION"), "%s", l);
	cr_assert(strstr(l, "locks=2") != NULL, "%s", l);
	map_of(2, h_kv_u64(l, "epoch"), "slots p2 3300-3301");
	/* alice's lease came along: bob's place did not */
	a2 = h_hello(d[2].port, "alice");
	snprintf(cmd, sizeof(cmd), "REFRESH %s %" PRIu64 " ttl=20s", name, tok);
	l = call_served(a2, cmd);
	cr_assert(h_starts(l, "OK REFRESHED"), "%s", l);
	l = h_call(a2, "STATUS %s", name);
	cr_assert(strstr(l, " waiters=0") != NULL, "%s", l);
	/* bob's lease of name2 is held by nobody, for its TTL only */
	c2 = h_hello(d[2].port, "carol");
	t0 = h_now_ms();
	for (i = 0; i < 200; i++) {
		l = h_call(c2, "TRYLOCK %s ttl=5s", name2);
		if (h_starts(l, "OK GRANTED"))
			break;
		cr_assert(h_starts(l, "NO BUSY") ||
				  h_starts(l, "ERR UNAVAILABLE"),
			  "%s", l);
		cr_assert_lt(h_now_ms() - t0, 15000, "still %s", l);
		h_sleep_ms(100);
	}
	cr_assert(h_starts(l, "OK GRANTED"), "%s", l);
	h_close(a0);
	h_close(b0);
	h_close(sq);
	h_close(a2);
	h_close(c2);
}

Test(partition, not_this_partitions_slots_are_refused)
{
	struct h_client *c1;
	char *l;

	init_map();
	c1 = h_connect(d[1].port);
	l = h_call(c1, "PARTITION MOVE 1-2 p2");
	cr_assert(h_starts(l, "ERR BAD_ARG slot 1 is not this partition's"),
		  "%s", l);
	l = h_call(c1, "PARTITION MOVE 1-2 p/x");
	cr_assert(h_starts(l, "ERR BAD_ARG bad partition id"), "%s", l);
	/* to a partition no daemon has added to the map: nobody would
	 * answer for its names */
	{
		struct h_client *c0 = h_connect(d[0].port);

		l = h_call(c0, "PARTITION MOVE 5462 p9");
		cr_assert(h_starts(l, "ERR BAD_ARG no partition p9 in the map"),
			  "%s", l);
		h_close(c0);
	}
	l = h_call(c1, "PARTITION MOVE 9-2 p2");
	cr_assert(h_starts(l, "ERR BAD_ARG slots:"), "%s", l);
	l = h_call(c1, "PARTITION SPLIT");
	cr_assert(h_starts(l, "ERR BAD_ARG PARTITION INIT"), "%s", l);
	h_close(c1);
}

/* The record of slots given away is written before the map: a daemon
 * killed in between leaves the record alone. Its next start must not
 * serve those slots, and writes the map itself. */
Test(partition, slots_given_away_stay_away_after_a_restart)
{
	struct h_client *c0, *c2;
	const char *m;
	char cmd[160], want[128], name[32];
	uint64_t e;

	init_map();
	m = map_of(0, 3, part_line(2));
	e = epoch_of(m);
	snprintf(name, sizeof(name), "%s", name_between(0, 99));
	h_daemon_kill9(&d[0]);
	/* move 1 of p0 (the map's gave= of p0 is 0) */
	snprintf(cmd, sizeof(cmd), "HSET 't:{p0}:part' gone '1 p2 123 0-99'");
	cr_assert_str_eq(h_redis_cli(&r, cmd), "1\n");
	h_daemon_restart(&d[0]);
	m = map_of(0, e + 1, "slots p2 0-99");
	c0 = h_connect(d[0].port);
	snprintf(want, sizeof(want), "NO MOVED p2 127.0.0.1:%d ", d[2].port);
	cr_assert(h_starts(h_call(c0, "TRYLOCK %s", name), want), "%s",
		  c0->line);
	c2 = h_connect(d[2].port);
	map_of(2, e + 1, "slots p2 0-99");
	h_lock(c2, name, "ttl=5s");
	h_close(c0);
	h_close(c2);
}

Test(partition, a_map_redis_lost_is_written_back)
{
	const char *m;
	uint64_t e;

	init_map();
	m = map_of(0, 3, part_line(2));
	e = epoch_of(m);
	cr_assert_str_eq(h_redis_cli(&r, "DEL 't:{map}'"), "1\n");
	/* a daemon that knew the map puts it back */
	map_of(1, e, part_line(2));
	{
		uint64_t end = h_now_ms() + 10000;

		while (!strstr(h_redis_cli(&r, "GET 't:{map}'"), "dlock-map")) {
			cr_assert(h_now_ms() < end, "the map was not written "
						    "back");
			h_sleep_ms(50);
		}
	}
	/* an older one too */
	h_redis_cli(&r, "SET 't:{map}' \"$(printf 'dlock-map 1\\nepoch "
			"1\\n')\"");
	{
		uint64_t end = h_now_ms() + 10000;
		char want[32];

		snprintf(want, sizeof(want), "epoch %" PRIu64, e);
		while (!strstr(h_redis_cli(&r, "GET 't:{map}'"), want)) {
			cr_assert(h_now_ms() < end, "not written back: %s",
				  h_redis_cli(&r, "GET 't:{map}'"));
			h_sleep_ms(50);
		}
	}
}

/* A partition's slots that take several lines of MAP: the count in its
 * first line is the number of lines that follow (found from outside: a
 * text of exactly twice a line's length was announced one line short,
 * and a client took the last line for a stray reply), and every line is
 * one a client reads (at most DL_LINE_MAX bytes: the harness, as
 * libdlock, drops a longer one). */
Test(partition, map_announces_every_line_it_sends)
{
	struct h_client *c0;
	char cmd[1024], *l;
	size_t n;
	uint64_t lines, k;
	int s, batch;

	init_map();
	c0 = h_connect(d[0].port);
	/* every 4th slot from 1, 100 a request: p0's text is 3840 bytes */
	for (s = 1; s < 1757; s += 4 * batch) {
		n = (size_t)snprintf(cmd, sizeof(cmd), "PARTITION MOVE ");
		for (batch = 0; batch < 100 && s + 4 * batch < 1757; batch++)
			n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, "%s%d",
					      batch ? "," : "", s + 4 * batch);
		snprintf(cmd + n, sizeof(cmd) - n, " p1");
		l = h_call(c0, "%s", cmd);
		cr_assert(h_starts(l, "OK PARTITION"), "%s", l);
	}
	h_send(c0, "MAP");
	h_send(c0, "PING after");
	l = h_line(c0);
	cr_assert(h_starts(l, "OK MAP "), "%s", l);
	lines = h_arg_u64(l, 1);
	cr_assert(lines > 6, "%s", l);
	for (k = 0; k < lines; k++) {
		l = h_line(c0);
		cr_assert(h_starts(l, "part ") || h_starts(l, "slots "),
			  "line %llu: %s", (unsigned long long)k, l);
	}
	cr_assert_str_eq(h_line(c0), "OK PONG after");
	h_close(c0);
}

/* Found from outside: the map lost while every daemon was down, and an
 * operator's PARTITION INIT gave p0 the slots of a lease p1 held. Each
 * partition's active keeps a copy of the map in its keyspace, and a
 * start that finds none in Redis writes its copy back. */
Test(partition, a_map_lost_while_all_were_down_comes_back_from_a_copy)
{
	struct h_client *c0, *c1;
	char want[80], *l;
	uint64_t e;
	int i;

	init_map();
	c0 = h_connect(d[0].port);
	e = moved(c0, "5461-10922", "p1");
	h_close(c0);
	map_of(1, e, "slots p1 5461-10922");
	c1 = h_connect(d[1].port);
	h_lock(c1, "qux", "ttl=60s"); /* slot 9995: p1's */
	h_close(c1);
	/* every active's copy is of that map (written within a second) */
	snprintf(want, sizeof(want), "epoch %" PRIu64, e);
	for (i = 0; i < NPARTS; i++) {
		char cmd[64];
		uint64_t end = h_now_ms() + 10000;

		snprintf(cmd, sizeof(cmd), "HGET 't:{p%d}:part' map", i);
		while (!strstr(h_redis_cli(&r, cmd), want)) {
			cr_assert(h_now_ms() < end, "p%d's copy: %s", i,
				  h_redis_cli(&r, cmd));
			h_sleep_ms(50);
		}
	}
	for (i = 0; i < NPARTS; i++)
		h_daemon_kill9(&d[i]);
	cr_assert_str_eq(h_redis_cli(&r, "DEL 't:{map}'"), "1\n");
	for (i = 0; i < NPARTS; i++)
		h_daemon_restart(&d[i]);
	c0 = h_connect(d[0].port);
	l = h_call(c0, "PARTITION INIT");
	cr_assert(h_starts(l, "ERR BAD_ARG a partition map exists already"),
		  "%s", l);
	snprintf(want, sizeof(want), "NO MOVED p1 127.0.0.1:%d ", d[1].port);
	{
		uint64_t end = h_now_ms() + 10000;

		while (!h_starts(l = h_call(c0, "TRYLOCK qux"), want)) {
			cr_assert(h_now_ms() < end, "%s", l);
			h_sleep_ms(50);
		}
	}
	h_close(c0);
}

/* Found in review: a PARTITION pipelined behind another ran inside the
 * callback that answered the first, which then queued a second job on
 * the map's one connection. Each is answered in order, each change made. */
Test(partition, pipelined_partition_requests_are_answered_in_order)
{
	struct h_client *c = h_connect(d[0].port);
	char *l;

	h_send(c, "PARTITION INIT id=1");
	h_send(c, "PARTITION ADDRS p0 127.0.0.1:%d,127.0.0.1:7 id=2",
	       d[0].port);
	h_send(c, "PING three");
	l = h_line(c);
	cr_assert_str_eq(l, "OK PARTITION epoch=1 id=1");
	l = h_line(c);
	cr_assert(h_starts(l, "OK PARTITION epoch=") && strstr(l, " id=2"),
		  "%s", l);
	cr_assert_str_eq(h_line(c), "OK PONG three");
	h_close(c);
	map_of(0, 1, ",127.0.0.1:7 ");
}

/* Found in review: a multi-lock waiting for its first name had the later
 * names in no queue yet, so a PARTITION MOVE of a later name's slot found
 * no lock there; when the wait ended, the multi-lock took that name on
 * the partition that had given it away. */
Test(partition, a_multi_lock_does_not_take_a_name_moved_while_it_waited)
{
	struct h_client *o, *w, *c1;
	const char *m;
	char *l;
	uint64_t t, e;

	init_map();
	o = h_connect(d[0].port);
	w = h_connect(d[0].port);
	t = h_lock(o, "bar", "ttl=30s");	      /* slot 5061 */
	h_send(w, "LOCK bar hello ttl=30s wait=20s"); /* hello: slot 866 */
	l = h_line(w);
	cr_assert(h_starts(l, "OK QUEUED bar "), "%s", l);
	e = moved(o, "866", "p1");
	m = map_of(1, e, "slots p1 866");
	(void)m;
	l = h_call(o, "UNLOCK bar %" PRIu64, t);
	cr_assert(h_starts(l, "OK RELEASED"), "%s", l);
	l = h_line(w);
	cr_assert(h_starts(l, "* FAILED bar UNAVAILABLE hello"), "%s", l);
	/* nothing of it kept, and hello is p1's to grant */
	cr_assert(h_starts(h_call(o, "STATUS bar"), "OK STATUS bar state=free"),
		  "%s", o->line);
	c1 = h_connect(d[1].port);
	h_lock(c1, "hello", "ttl=5s");
	h_close(c1);
	h_close(o);
	h_close(w);
}

/* The place of partition `id` in the map's text (map_of's): its token
 * class. */
static int place_of(const char *map, const char *id)
{
	char want[16];
	const char *l;
	int k = 0;

	snprintf(want, sizeof(want), "part %s ", id);
	for (l = strstr(map, "\npart "); l; l = strstr(l + 1, "\npart ")) {
		if (strncmp(l + 1, want, strlen(want)) == 0)
			return k;
		k++;
	}
	cr_assert_fail("no %s in %s", id, map);
	return -1;
}

/* Found in review: a restart took the map from its partition's copy,
 * then read the same map from Redis and did not adopt it again, so its
 * tokens lost their partition's class. */
Test(partition, a_restarted_partition_keeps_its_token_class)
{
	struct h_client *c0, *c1;
	const char *m;
	char want[32], cmd[64], name[32];
	uint64_t e, t1, t2;
	int k;

	init_map();
	c0 = h_connect(d[0].port);
	e = moved(c0, "5461-10922", "p1");
	h_close(c0);
	m = map_of(1, e, "slots p1 5461-10922");
	k = place_of(m, "p1");
	snprintf(name, sizeof(name), "%s", name_between(5461, 10922));
	c1 = h_connect(d[1].port);
	t1 = h_lock(c1, name, "ttl=5s");
	cr_assert_eq((int)(t1 % 64), k, "%" PRIu64, t1);
	h_close(c1);
	/* p1's copy of that map, then a restart that reads it */
	snprintf(want, sizeof(want), "epoch %" PRIu64, e);
	snprintf(cmd, sizeof(cmd), "HGET 't:{p1}:part' map");
	{
		uint64_t end = h_now_ms() + 10000;

		while (!strstr(h_redis_cli(&r, cmd), want)) {
			cr_assert(h_now_ms() < end, "%s", h_redis_cli(&r, cmd));
			h_sleep_ms(50);
		}
	}
	h_daemon_kill9(&d[1]);
	h_daemon_restart(&d[1]);
	c1 = h_connect(d[1].port);
	{
		uint64_t end = h_now_ms() + 10000;
		char *l;

		while (!h_starts(l = h_call(c1, "LOCK %sb ttl=5s", name),
				 "OK GRANTED")) {
			cr_assert(h_now_ms() < end, "%s", l);
			h_sleep_ms(50);
		}
		t2 = h_arg_u64(l, 1);
	}
	cr_assert_eq((int)(t2 % 64), k, "%" PRIu64, t2);
	/* and the next (a first token after a restart may fall in the
	 * class by chance: the clock's part is a multiple of 64) */
	t2 = h_lock(c1, "{qux}c", "ttl=5s");
	cr_assert_eq((int)(t2 % 64), k, "%" PRIu64, t2);
	h_close(c1);
}

/* ---- a partition of two daemons ------------------------------------------
 *
 * p0 an active and a standby (nodes a and b, peers, state dirs, 2 s
 * leadership), p1 one daemon, on one Redis. */

static struct h_daemon pa, pb, p1d;

static void ha_start(void)
{
	struct h_daemon *nodes[2] = {&pa, &pb};
	char conf[H_PATH_MAX + 300];
	int i;

	h_redis_start(&r, "always");
	for (i = 0; i < 2; i++) {
		h_daemon_write_conf(nodes[i], "");
		snprintf(conf, sizeof(conf),
			 "[persistence]\nredis_prefix = t:\nstate_dir = %s\n"
			 "[limits]\nmax_ttl = 60s\n"
			 "[cluster]\nnode_id = %s\npeers = %s\n"
			 "[partition]\nid = p0\n",
			 nodes[i]->dir, i ? "b" : "a", i ? "a" : "b");
		h_daemon_write_conf(nodes[i], conf);
		h_daemon_start_nowait(nodes[i], "-c", nodes[i]->conf,
				      "--persist", "redis", "--redis", r.url,
				      "--leader-lease", "2s", NULL);
	}
	h_daemon_start_redis(&p1d, &r,
			     "[persistence]\nredis_prefix = t:\n"
			     "[partition]\nid = p1\n");
}

static void ha_stop(void)
{
	kill(pa.pid, SIGCONT);
	kill(pb.pid, SIGCONT);
	h_daemon_cleanup(&pa);
	h_daemon_cleanup(&pb);
	h_daemon_cleanup(&p1d);
	h_redis_cleanup(&r);
}

TestSuite(partition_ha, .init = ha_start, .fini = ha_stop, .timeout = 120);

/* The node of p0 that is active (within 30 s). */
static struct h_daemon *p0_active(void)
{
	uint64_t end = h_now_ms() + 30000;
	struct h_daemon *nodes[2] = {&pa, &pb};
	struct h_client *c;
	int i, yes;

	for (;;) {
		for (i = 0; i < 2; i++) {
			if (!h_daemon_alive(nodes[i]) ||
			    !(c = h_try_connect(nodes[i]->port)))
				continue;
			yes = strstr(h_call(c, "HELLO"), " role=active ") !=
			      NULL;
			h_close(c);
			if (yes)
				return nodes[i];
		}
		cr_assert(h_now_ms() < end, "no active node of p0");
		h_sleep_ms(50);
	}
}

/* The map made on p0's active, p1 in it: that daemon. */
static struct h_daemon *ha_map(void)
{
	struct h_daemon *a = p0_active();
	struct h_client *c = h_connect(a->port);
	uint64_t end = h_now_ms() + 15000;
	char want[64];
	int n, k, found;
	char *l;

	cr_assert_str_eq(h_call(c, "PARTITION INIT"), "OK PARTITION epoch=1");
	snprintf(want, sizeof(want), "part p1 addrs=127.0.0.1:%d ", p1d.port);
	for (found = 0; !found;) {
		l = h_call(c, "MAP");
		n = (int)h_arg_u64(l, 1);
		for (k = 0; k < n; k++)
			found |= h_starts(h_line(c), want);
		cr_assert(found || h_now_ms() < end, "p1 is not in the map");
		if (!found)
			h_sleep_ms(50);
	}
	h_close(c);
	return a;
}

/* Found from outside: a standby paused across two moves took over while
 * the map could not be read, and served the first move's slot from the
 * map it knew (the partition's record holds the last move only): its
 * grant's token was the one p1 had given. A daemon now reads the map
 * after each load before it serves. */
Test(partition_ha, a_take_over_reads_the_map_before_it_serves)
{
	struct h_daemon *a = ha_map(), *b = a == &pa ? &pb : &pa;
	struct h_client *c, *c1;
	char n1[32], text[4096], cmd[H_PATH_MAX + 64], *l;
	const char *got;

	snprintf(n1, sizeof(n1), "%s", name_in(2121));
	h_daemon_signal(b, SIGSTOP);
	c = h_connect(a->port);
	moved(c, "2121", "p1");
	moved(c, "14378", "p1");
	h_close(c);
	c1 = h_connect(p1d.port);
	{
		uint64_t end = h_now_ms() + 10000;

		while (!h_starts(h_call(c1, "TRYLOCK %s ttl=60s", n1),
				 "OK GRANTED")) {
			cr_assert(h_now_ms() < end, "p1: %s", c1->line);
			h_sleep_ms(50);
		}
	}
	/* the map unreadable (a hash where the text was), p0's active gone,
	 * the standby back */
	got = h_redis_cli(&r, "GET 't:{map}'");
	snprintf(text, sizeof(text), "%s", got);
	h_redis_cli(&r, "DEL 't:{map}'");
	h_redis_cli(&r, "HSET 't:{map}' broken yes");
	h_daemon_kill9(a);
	h_daemon_signal(b, SIGCONT);
	cr_assert(p0_active() == b);
	c = h_connect(b->port);
	l = h_call(c, "TRYLOCK %s ttl=60s", n1);
	cr_assert(h_starts(l, "ERR UNAVAILABLE the partition map is not read "
			      "yet"),
		  "%s", l);
	/* the map back (through a file: it holds newlines): the new active
	 * sends the name to p1 */
	h_redis_cli(&r, "DEL 't:{map}'");
	{
		char path[H_PATH_MAX + 16];
		FILE *f;

		snprintf(path, sizeof(path), "%s/map.txt", b->dir);
		f = fopen(path, "w");
		cr_assert(f != NULL);
		fwrite(text, 1, strlen(text) - 1, f); /* redis-cli's newline */
		fclose(f);
		snprintf(cmd, sizeof(cmd), "-x SET 't:{map}' < %s", path);
		h_redis_cli(&r, cmd);
	}
	{
		uint64_t end = h_now_ms() + 10000;

		while (!h_starts(l = h_call(c, "TRYLOCK %s ttl=60s", n1),
				 "NO MOVED p1 ")) {
			cr_assert(h_now_ms() < end, "%s", l);
			h_sleep_ms(50);
		}
	}
	h_close(c);
	h_close(c1);
}

/* Found from outside: while p0's grants were closed after Redis lost
 * its table, its table held none of the lost leases, a move of their
 * slots passed the "no lock" check, and p1 granted a name whose lease
 * p0 had acknowledged. A move now waits until grants reopen. */
Test(partition_ha, a_move_waits_while_grants_are_closed)
{
	struct h_daemon *a = ha_map(), *b = a == &pa ? &pb : &pa;
	struct h_client *c;
	char n0[32], cmd[64], *l;
	unsigned s;

	snprintf(n0, sizeof(n0), "%s", name_between(0, 5460));
	s = dl_key_slot(n0, strlen(n0));
	c = h_connect(a->port);
	h_lock(c, n0, "ttl=30s");
	h_close(c);
	h_daemon_kill9(a);
	h_daemon_kill9(b);
	/* Redis forgets p0's table */
	h_redis_cli(&r, "EVAL \"for _, k in ipairs(redis.call('KEYS', "
			"'t:{p0}:*')) do redis.call('DEL', k) end\" 0");
	h_daemon_restart_nowait(a);
	h_daemon_restart_nowait(b);
	a = p0_active();
	c = h_connect(a->port);
	{
		uint64_t end = h_now_ms() + 15000;

		while (!h_starts(l = h_call(c, "TRYLOCK %s", n0), "NO BUSY")) {
			cr_assert(h_now_ms() < end, "%s", l);
			h_sleep_ms(50);
		}
	}
	cr_assert(strstr(l, "closed_ms=") != NULL, "%s", l);
	snprintf(cmd, sizeof(cmd), "PARTITION MOVE %u p1", s);
	l = h_call(c, "%s", cmd);
	cr_assert(h_starts(l, "ERR UNAVAILABLE grants are closed"), "%s", l);
	h_close(c);
}
