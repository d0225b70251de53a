/* SPDX-License-Identifier: MIT */
/*
 * rcluster.h -- a Redis Cluster of real redis-server processes on
 * 127.0.0.1 for integration tests (on harness.h's h_redis).
 *
 * Every node's port and cluster bus port come from h_free_port; its data
 * and nodes.conf live in its own directory. Nodes time each other out
 * after 1 s (cluster-node-timeout 1000), replicas never migrate and are
 * always fit to fail over (cluster-replica-validity-factor 0), and the
 * cluster serves what it covers (cluster-require-full-coverage no).
 *
 * Every wait polls (20 ms apart) with a deadline of 20 s; on timeout it
 * prints each node's CLUSTER INFO and CLUSTER NODES and fails the test.
 * A node killed with h_redis_kill9 (pid 0) is skipped by all of them; one
 * stopped with SIGSTOP is not (each look at it then waits out a 5 s
 * timeout, and a wait that needs its word fails).
 */
#ifndef DL_TESTS_RCLUSTER_H
#define DL_TESTS_RCLUSTER_H

#include "tests/harness.h"

#define H_RCLUSTER_MAX	 9
#define H_RCLUSTER_SLOTS 16384

struct h_rcluster {
	int n;		/* nodes */
	int nprimaries; /* nodes 0..nprimaries-1 start as primaries, the
			   rest as replicas (replica k follows primary
			   k % nprimaries) */
	struct h_redis node[H_RCLUSTER_MAX];
	int bus[H_RCLUSTER_MAX];	/* each node's cluster bus port */
	char seeds[512];		/* "127.0.0.1:p0,127.0.0.1:p1,..." */
	char id[H_RCLUSTER_MAX][41];	/* each node's cluster node ID */
	char busarg[H_RCLUSTER_MAX][8]; /* bus[i] as text, for its argv */
};

/* Start `primaries` primaries with `replicas` replicas each (appendfsync
 * as h_redis_start), slots split evenly (CLUSTER ADDSLOTSRANGE), nodes
 * joined with CLUSTER MEET, replicas by CLUSTER REPLICATE <primary id>;
 * returns once every node reports cluster_state:ok and its CLUSTER SLOTS
 * shows the whole slot map with every replica, and each replica is in
 * sync (master_link_status:up). */
void h_rcluster_start(struct h_rcluster *c, int primaries, int replicas,
		      const char *appendfsync);
/* Stop every node by PID, rm -rf their directories (a zeroed or half
 * started cluster too). */
void h_rcluster_cleanup(struct h_rcluster *c);
/* The node index that serves `slot` as primary now, per CLUSTER SLOTS
 * asked of the first live node (which may name a node just killed, until
 * a fail-over); -1 if none. */
int h_rcluster_primary_of(struct h_rcluster *c, int slot);
/* A live replica of the primary of `slot` (the lowest node index), per
 * the same CLUSTER SLOTS, or -1. */
int h_rcluster_replica_of(struct h_rcluster *c, int slot);
/* CLUSTER FAILOVER on node `replica` (a manual, safe fail-over: the
 * replica catches up first); returns once every live node's CLUSTER
 * SLOTS shows it as the primary of all its former primary's slots, with
 * the former primary and that primary's other live replicas as its
 * replicas, each of them in sync with it (master_link_status:up). */
void h_rcluster_failover(struct h_rcluster *c, int replica);
/* The same with CLUSTER FAILOVER TAKEOVER, for when the primary is dead
 * (after h_redis_kill9 of it). If the cluster's own fail-over made the
 * replica primary first, only the wait remains. */
void h_rcluster_takeover(struct h_rcluster *c, int replica);
/* Move `slot` with all its keys to primary node `to` as redis-cli
 * --cluster reshard does: CLUSTER SETSLOT <slot> IMPORTING on the target,
 * MIGRATING on the source, CLUSTER GETKEYSINSLOT + MIGRATE ... KEYS (10
 * keys at a time) until none is left, then CLUSTER SETSLOT <slot> NODE
 * <target> on the target, the source and every other live primary.
 * Returns once every live node's CLUSTER SLOTS says `to` owns it. pause_ms
 * > 0: sleep that long between two batches of keys. */
void h_rcluster_move_slot(struct h_rcluster *c, int slot, int to, int pause_ms);
/* The slot of a key: CLUSTER KEYSLOT asked of a live node. */
int h_rcluster_keyslot(struct h_rcluster *c, const char *key);
/* redis-cli against node i (h_redis_cli: the arguments go through sh;
 * static result). */
const char *h_rcluster_cli(struct h_rcluster *c, int i, const char *cmd);

#endif /* DL_TESTS_RCLUSTER_H */
