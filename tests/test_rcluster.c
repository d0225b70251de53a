/* SPDX-License-Identifier: MIT */
/*
 * test_rcluster.c -- the harness's Redis Cluster (rcluster.h) does what
 * it says: a key under a hash tag stays readable through a manual
 * fail-over, a slot move and a takeover after kill -9 of its primary.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "tests/rcluster.h"

#define KEY	"{rc}k"
#define NKEYS	25 /* more keys in the slot: three MIGRATE batches */
#define WAIT_MS 10000

static struct h_rcluster c;

static void fini(void)
{
	h_rcluster_cleanup(&c);
}

TestSuite(rcluster, .fini = fini, .timeout = 120);

/* Poll redis-cli <cmd> on node i until it prints `want` (a line). */
static void expect_cli(int i, const char *cmd, const char *want)
{
	uint64_t end = h_now_ms() + WAIT_MS;
	char line[128];
	const char *out;

	snprintf(line, sizeof(line), "%s\n", want);
	while (strcmp(out = h_rcluster_cli(&c, i, cmd), line) != 0) {
		cr_assert(h_now_ms() < end, "node %d: %s: %s, not %s", i, cmd,
			  out, want);
		h_sleep_ms(20);
	}
}

Test(rcluster, a_key_survives_failover_move_and_takeover)
{
	char cmd[1024], count[64], nkeys[16];
	size_t off;
	int slot, p, r, to, s, i;

	h_rcluster_start(&c, 3, 1, "always");
	cr_assert_eq(c.n, 6);
	cr_assert(strlen(c.seeds) > 0);

	slot = h_rcluster_keyslot(&c, KEY);
	cr_assert(slot >= 0 && slot < H_RCLUSTER_SLOTS);
	p = h_rcluster_primary_of(&c, slot);
	r = h_rcluster_replica_of(&c, slot);
	cr_assert(p >= 0 && p < 3, "primary of slot %d: %d", slot, p);
	cr_assert(r >= 3 && r % 3 == p, "replica of slot %d: %d", slot, r);
	off = (size_t)snprintf(cmd, sizeof(cmd), "MSET '%s' v1", KEY);
	for (i = 1; i < NKEYS; i++)
		off += (size_t)snprintf(cmd + off, sizeof(cmd) - off,
					" '{rc}k%d' x", i);
	expect_cli(p, cmd, "OK");
	snprintf(count, sizeof(count), "CLUSTER COUNTKEYSINSLOT %d", slot);
	snprintf(nkeys, sizeof(nkeys), "%d", NKEYS);

	/* A manual fail-over: the replica serves the key, the former
	 * primary follows it. */
	h_rcluster_failover(&c, r);
	cr_assert_eq(h_rcluster_primary_of(&c, slot), r);
	cr_assert_eq(h_rcluster_replica_of(&c, slot), p);
	expect_cli(r, "GET '" KEY "'", "v1");

	/* The slot to another primary, keys and all. */
	to = -1;
	for (s = 0; s < H_RCLUSTER_SLOTS && to < 0; s += 5000)
		if (h_rcluster_primary_of(&c, s) != r)
			to = h_rcluster_primary_of(&c, s);
	cr_assert(to >= 0 && to != r);
	h_rcluster_move_slot(&c, slot, to, 0);
	cr_assert_eq(h_rcluster_primary_of(&c, slot), to);
	expect_cli(to, "GET '" KEY "'", "v1");
	expect_cli(to, count, nkeys);
	expect_cli(r, count, "0");
	cr_assert(strstr(h_rcluster_cli(&c, r, "GET '" KEY "'"), "MOVED"));

	/* kill -9 of its primary, a takeover by its replica once that has
	 * every key. */
	r = h_rcluster_replica_of(&c, slot);
	cr_assert(r >= 0 && r != to);
	expect_cli(r, count, nkeys);
	h_redis_kill9(&c.node[to]);
	h_rcluster_takeover(&c, r);
	cr_assert_eq(h_rcluster_primary_of(&c, slot), r);
	expect_cli(r, "GET '" KEY "'", "v1");
	expect_cli(r, count, nkeys);
}

/* ---- dlockd on a Redis Cluster ------------------------------------------
 *
 * The store's shard is the one serving the slot of its prefix's tag; it
 * is found again through a manual fail-over, a kill -9 of its primary and
 * a migration of its slot, and every lease is kept through each (the
 * daemon rewrites its table to the primary it finds). */

#define PREFIX "t:{a}:"

static struct h_daemon d;

static void cluster_start(void)
{
	h_rcluster_start(&c, 3, 1, "always");
}

static void cluster_stop(void)
{
	h_daemon_cleanup(&d);
	h_rcluster_cleanup(&c);
}

TestSuite(store_cluster, .init = cluster_start, .fini = cluster_stop,
	  .timeout = 120);

/* A daemon on the cluster, given every node but the shard's as seeds (it
 * must ask for the primary, not be told). */
static void daemon_start(const char *prefix, const char *more)
{
	char url[600], conf[1024];
	int slot = h_rcluster_keyslot(&c, prefix), p, i;
	size_t n = 0;

	p = h_rcluster_primary_of(&c, slot);
	n = (size_t)snprintf(url, sizeof(url), "redis-cluster://");
	for (i = 0; i < c.n; i++)
		if (i != p)
			n += (size_t)snprintf(
				url + n, sizeof(url) - n, "%s127.0.0.1:%d",
				n > 16 ? "," : "", c.node[i].port);
	snprintf(conf, sizeof(conf),
		 "[persistence]\npersist = redis\nredis = %s\n"
		 "redis_prefix = %s\n%s",
		 url, prefix, more ? more : "");
	h_daemon_write_conf(&d, conf);
	h_daemon_start(&d, "-c", d.conf, NULL);
}

/* Until `cmd` on daemon d answers a line starting with `want`. */
static char *until_ok(struct h_client *cl, const char *cmd, const char *want)
{
	uint64_t end = h_now_ms() + 15000;
	char *l;

	for (;;) {
		l = h_call(cl, "%s", cmd);
		if (h_starts(l, want))
			return l;
		cr_assert(h_now_ms() < end, "%s: %s", cmd, l);
		h_sleep_ms(50);
	}
}

/* The lease `tok` of `name` is held, as STATUS says. */
static void held(struct h_client *cl, const char *name, uint64_t tok)
{
	char cmd[64], *l;

	snprintf(cmd, sizeof(cmd), "STATUS %s", name);
	l = until_ok(cl, cmd, "OK STATUS");
	cr_assert(strstr(l, "state=held"), "%s", l);
	cr_assert_eq(h_kv_u64(l, "token"), tok, "%s", l);
}

/* The shard's primary holds the table: its fence key is there. */
static void table_on(int node)
{
	expect_cli(node, "EXISTS '" PREFIX "fence'", "1");
}

Test(store_cluster, a_daemon_serves_from_the_shard_of_its_prefix)
{
	int slot = h_rcluster_keyslot(&c, PREFIX), p, i;
	struct h_client *cl;

	daemon_start(PREFIX, NULL);
	p = h_rcluster_primary_of(&c, slot);
	cl = h_connect(d.port);
	h_lock(cl, "x", "ttl=30s");
	table_on(p);
	for (i = 0; i < 3; i++)
		if (i != p)
			cr_assert(strstr(h_rcluster_cli(&c, i,
							"EXISTS '" PREFIX
							"fence'"),
					 "MOVED") != NULL);
	h_close(cl);
}

/* Leases taken before a change of the shard's primary are held after it,
 * and the next change is served by the new primary. */
static void through(void (*change)(int p, int r))
{
	int slot = h_rcluster_keyslot(&c, PREFIX), p, r;
	struct h_client *cl;
	uint64_t x, y;

	daemon_start(PREFIX, NULL);
	p = h_rcluster_primary_of(&c, slot);
	r = h_rcluster_replica_of(&c, slot);
	cl = h_connect(d.port);
	x = h_lock(cl, "x", "ttl=60s");
	change(p, r);
	/* changes come back: a new lease, above the old tokens */
	y = h_arg_u64(until_ok(cl, "LOCK y ttl=60s", "OK GRANTED"), 1);
	cr_assert(y > x);
	held(cl, "x", x);
	table_on(h_rcluster_primary_of(&c, slot));
	/* the new primary holds both records: a restart finds them */
	h_daemon_kill9(&d);
	h_daemon_restart(&d);
	h_close(cl);
	cl = h_connect(d.port);
	held(cl, "x", x);
	held(cl, "y", y);
	h_close(cl);
}

static void manual_failover(int p, int r)
{
	(void)p;
	h_rcluster_failover(&c, r);
}

static void primary_killed(int p, int r)
{
	h_redis_kill9(&c.node[p]);
	h_rcluster_takeover(&c, r);
}

static void slot_moved(int p, int r)
{
	int to = (p + 1) % 3;

	(void)r;
	h_rcluster_move_slot(&c, h_rcluster_keyslot(&c, PREFIX), to, 100);
}

Test(store_cluster, a_manual_fail_over_keeps_every_lease)
{
	through(manual_failover);
}

Test(store_cluster, a_killed_primary_is_replaced_and_every_lease_kept)
{
	through(primary_killed);
}

Test(store_cluster, a_slot_migration_keeps_every_lease)
{
	through(slot_moved);
}

Test(store_cluster, a_prefix_without_a_tag_is_refused)
{
	char conf[256];

	snprintf(conf, sizeof(conf),
		 "[persistence]\npersist = redis\n"
		 "redis = redis-cluster://127.0.0.1:%d\nredis_prefix = t:\n",
		 c.node[0].port);
	h_daemon_write_conf(&d, conf);
	h_daemon_start_nowait(&d, "-c", d.conf, NULL);
	cr_assert_eq(h_daemon_wait(&d, 3, 10000), 3);
	cr_assert(h_daemon_log_has(&d, "holds no hash tag"));
}

/* A replica promoted without the last writes (stopped, its link cut,
 * while they were made): the daemon, which lived through it, writes its whole
 * table to the new primary, so a restart of the daemon finds every lease
 * it acknowledged. */
Test(store_cluster, a_new_primary_that_lacks_writes_gets_the_table_back)
{
	int slot = h_rcluster_keyslot(&c, PREFIX), p, r;
	struct h_client *cl;
	uint64_t x, z;

	daemon_start(PREFIX, NULL);
	p = h_rcluster_primary_of(&c, slot);
	r = h_rcluster_replica_of(&c, slot);
	cl = h_connect(d.port);
	x = h_lock(cl, "x", "ttl=60s");
	kill(c.node[r].pid, SIGSTOP);
	/* the replica's link cut, so nothing after it reaches it */
	expect_cli(p, "CLIENT KILL TYPE replica", "1");
	z = h_lock(cl, "z", "ttl=60s"); /* on the primary only */
	h_redis_kill9(&c.node[p]);
	kill(c.node[r].pid, SIGCONT);
	h_rcluster_takeover(&c, r);
	until_ok(cl, "LOCK y ttl=60s", "OK GRANTED");
	held(cl, "x", x);
	held(cl, "z", z);
	h_daemon_kill9(&d);
	h_daemon_restart(&d);
	h_close(cl);
	cl = h_connect(d.port);
	held(cl, "x", x);
	held(cl, "z", z);
	h_close(cl);
}
