/* SPDX-License-Identifier: MIT */
/*
 * rcluster.c -- a Redis Cluster of real redis-server processes
 * (rcluster.h).
 *
 * The cluster is asked through hiredis (one connection per command, 5 s
 * timeouts); h_rcluster_cli is redis-cli.
 */
#include "tests/rcluster.h"

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define RC_WAIT_MS 20000 /* every wait's deadline */
#define RC_POLL_MS 20	 /* between two looks */
#define RC_IO_MS   5000	 /* a command's connect, send and reply */
/* A manual fail-over not done by then is asked again (Redis gives one up
 * after 5 s). */
#define RC_RETRY_MS   6000
#define RC_BATCH      "10" /* keys per MIGRATE */
#define RC_MIGRATE_MS "10000"
#define RC_ARGS_MAX   32

/* ---- asking a node (hiredis) --------------------------------------------- */

/* Send argv to node i on a connection of its own and read its reply;
 * NULL if the node is dead (pid 0) or does not answer in time. An error
 * reply is a reply. A node gone since its last look may cost a write on
 * a reset socket: the SIGPIPE it raises is dropped. */
static redisReply *rc_argv(const struct h_rcluster *c, int i, int argc,
			   const char *const *argv)
{
	const struct timeval tv = {RC_IO_MS / 1000, (RC_IO_MS % 1000) * 1000};
	const struct timespec now = {0, 0};
	redisContext *ctx;
	redisReply *r;
	sigset_t sigpipe, old;

	if (c->node[i].pid <= 0)
		return NULL;
	ctx = redisConnectWithTimeout(c->node[i].host, c->node[i].port, tv);
	if (!ctx || ctx->err || redisSetTimeout(ctx, tv) != REDIS_OK) {
		redisFree(ctx);
		return NULL;
	}
	sigemptyset(&sigpipe);
	sigaddset(&sigpipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &sigpipe, &old);
	r = redisCommandArgv(ctx, argc, (const char **)argv, NULL);
	if (!sigismember(&old, SIGPIPE)) {
		while (sigtimedwait(&sigpipe, NULL, &now) > 0)
			;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	redisFree(ctx);
	return r;
}

/* The same with the arguments listed, NULL-terminated. */
static redisReply *rc_vcall(const struct h_rcluster *c, int i, va_list ap,
			    const char **argv, int *argc)
{
	const char *s;

	*argc = 0;
	while ((s = va_arg(ap, const char *)) != NULL) {
		cr_assert(*argc < RC_ARGS_MAX);
		argv[(*argc)++] = s;
	}
	return rc_argv(c, i, *argc, argv);
}

static redisReply *rc_call(const struct h_rcluster *c, int i, ...)
{
	const char *argv[RC_ARGS_MAX];
	redisReply *r;
	va_list ap;
	int argc;

	va_start(ap, i);
	r = rc_vcall(c, i, ap, argv, &argc);
	va_end(ap);
	return r;
}

/* The command as text, for a failure message (static). */
static const char *rc_text(int argc, const char *const *argv)
{
	static char s[512];
	size_t n = 0;
	int a;

	s[0] = '\0';
	for (a = 0; a < argc && n < sizeof(s) - 1; a++)
		n += (size_t)snprintf(s + n, sizeof(s) - n, "%s%s",
				      a ? " " : "", argv[a]);
	return s;
}

static void rc_expect(const struct h_rcluster *c, int i, const redisReply *r,
		      int argc, const char *const *argv)
{
	cr_assert(r != NULL, "node %d (port %d): no reply to %s", i,
		  c->node[i].port, rc_text(argc, argv));
	cr_assert(r->type != REDIS_REPLY_ERROR, "node %d (port %d): %s: %s", i,
		  c->node[i].port, rc_text(argc, argv), r->str);
}

/* A command that must not fail (no reply, or an error, fails the test). */
static redisReply *rc_must(const struct h_rcluster *c, int i, ...)
{
	const char *argv[RC_ARGS_MAX];
	redisReply *r;
	va_list ap;
	int argc;

	va_start(ap, i);
	r = rc_vcall(c, i, ap, argv, &argc);
	va_end(ap);
	rc_expect(c, i, r, argc, argv);
	return r;
}

/* The text of a status or bulk reply to a command (INFO, CLUSTER INFO),
 * malloc'd, or NULL. */
static char *rc_text_of(const struct h_rcluster *c, int i, const char *a,
			const char *b)
{
	redisReply *r = rc_call(c, i, a, b, NULL);
	char *s = NULL;

	if (r &&
	    (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)) {
		s = strdup(r->str);
		cr_assert(s != NULL);
	}
	freeReplyObject(r);
	return s;
}

/* ---- what the cluster says ----------------------------------------------- */

static int live(const struct h_rcluster *c, int i)
{
	return i >= 0 && i < c->n && c->node[i].pid > 0;
}

static int node_of_id(const struct h_rcluster *c, const char *id)
{
	int i;

	for (i = 0; i < c->n; i++)
		if (c->id[i][0] && strcmp(c->id[i], id) == 0)
			return i;
	return -1;
}

/* What a node's CLUSTER SLOTS says, per slot: the primary's node index
 * (-1: none, or not one of ours) and its replicas (bit j: node j). */
static signed char rc_own[H_RCLUSTER_SLOTS];
static unsigned short rc_rep[H_RCLUSTER_SLOTS];

/* The node index a CLUSTER SLOTS node entry names ([ip, port, id, ...]). */
static int slots_node(const struct h_rcluster *c, const redisReply *e)
{
	int i;

	if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
	    e->element[1]->type != REDIS_REPLY_INTEGER)
		return -1;
	if (e->elements >= 3 && e->element[2]->type == REDIS_REPLY_STRING)
		return node_of_id(c, e->element[2]->str);
	for (i = 0; i < c->n; i++)
		if (c->node[i].port == e->element[1]->integer)
			return i;
	return -1;
}

/* Read node i's CLUSTER SLOTS into rc_own/rc_rep; 0 if it did not
 * answer. */
static int slots_of(const struct h_rcluster *c, int i)
{
	redisReply *r = rc_call(c, i, "CLUSTER", "SLOTS", NULL);
	const redisReply *e;
	size_t k, j;
	long long s;
	int p, q;

	if (!r || r->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		return 0;
	}
	memset(rc_own, -1, sizeof(rc_own));
	memset(rc_rep, 0, sizeof(rc_rep));
	for (k = 0; k < r->elements; k++) {
		e = r->element[k];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER)
			continue;
		p = slots_node(c, e->element[2]);
		for (s = e->element[0]->integer; s <= e->element[1]->integer;
		     s++) {
			if (s < 0 || s >= H_RCLUSTER_SLOTS)
				continue;
			rc_own[s] = (signed char)p;
			for (j = 3; j < e->elements; j++)
				if ((q = slots_node(c, e->element[j])) >= 0)
					rc_rep[s] |= (unsigned short)(1u << q);
		}
	}
	freeReplyObject(r);
	return 1;
}

/* The first live node's CLUSTER SLOTS (the next if it does not answer);
 * 0 if none answered. */
static int slots_view(const struct h_rcluster *c)
{
	int i;

	for (i = 0; i < c->n; i++)
		if (live(c, i) && slots_of(c, i))
			return 1;
	return 0;
}

/* 1 if node i answers ROLE as a primary. */
static int is_primary(const struct h_rcluster *c, int i)
{
	redisReply *r = rc_call(c, i, "ROLE", NULL);
	int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
		  r->element[0]->type == REDIS_REPLY_STRING &&
		  strcmp(r->element[0]->str, "master") == 0;

	freeReplyObject(r);
	return yes;
}

/* 1 if node i is a replica of node p and in sync with it. */
static int follows(const struct h_rcluster *c, int i, int p)
{
	char want[32], *info = rc_text_of(c, i, "INFO", "replication");
	int yes;

	snprintf(want, sizeof(want), "master_port:%d\r\n", c->node[p].port);
	yes = info && strstr(info, "role:slave\r\n") && strstr(info, want) &&
	      strstr(info, "master_link_status:up\r\n");
	free(info);
	return yes != 0;
}

/* ---- waiting ------------------------------------------------------------- */

/* What the last look that fell short saw (for the failure message). */
static char rc_seen[256];

/* Each node's CLUSTER INFO and CLUSTER NODES, to stderr (through
 * hiredis: a node stopped with SIGSTOP costs its timeout, where redis-cli
 * would wait for ever). */
static void dump(const struct h_rcluster *c)
{
	char *info, *nodes = NULL;
	int i;

	for (i = 0; i < c->n; i++) {
		fprintf(stderr, "== node %d: port %d bus %d pid %d id %s\n", i,
			c->node[i].port, c->bus[i], (int)c->node[i].pid,
			c->id[i]);
		if (!live(c, i))
			continue;
		info = rc_text_of(c, i, "CLUSTER", "INFO");
		if (info)
			nodes = rc_text_of(c, i, "CLUSTER", "NODES");
		fprintf(stderr, "%s%s", info ? info : "(no answer)\n",
			nodes ? nodes : "");
		free(info);
		free(nodes);
		nodes = NULL;
	}
}

/* Poll ok(c, arg) until it holds; `again` (if any) is called every
 * RC_RETRY_MS meanwhile. On timeout, the nodes are dumped and the test
 * fails with `what` and what was last seen. */
static void rc_wait(const struct h_rcluster *c, const char *what,
		    int (*ok)(const struct h_rcluster *, const void *),
		    const void *arg,
		    void (*again)(const struct h_rcluster *, const void *))
{
	uint64_t start = h_now_ms(), retry = start + RC_RETRY_MS;

	rc_seen[0] = '\0';
	while (!ok(c, arg)) {
		if (h_now_ms() > start + RC_WAIT_MS) {
			dump(c);
			cr_assert_fail("rcluster: %s: not within %d ms (%s)",
				       what, RC_WAIT_MS, rc_seen);
		}
		if (again && h_now_ms() > retry) {
			again(c, arg);
			retry = h_now_ms() + RC_RETRY_MS;
		}
		h_sleep_ms(RC_POLL_MS);
	}
}

/* Every node knows every other by its ID (no handshake left). */
static int all_met(const struct h_rcluster *c, const void *arg)
{
	char *nodes;
	int i, j;

	(void)arg;
	for (i = 0; i < c->n; i++) {
		if (!live(c, i))
			continue;
		if (!(nodes = rc_text_of(c, i, "CLUSTER", "NODES"))) {
			snprintf(rc_seen, sizeof(rc_seen), "node %d is silent",
				 i);
			return 0;
		}
		for (j = 0; j < c->n; j++)
			if (!strstr(nodes, c->id[j]) ||
			    strstr(nodes, "handshake")) {
				snprintf(rc_seen, sizeof(rc_seen),
					 "node %d does not know node %d yet", i,
					 j);
				free(nodes);
				return 0;
			}
		free(nodes);
	}
	return 1;
}

/* The shape h_rcluster_start makes: cluster_state:ok everywhere, every
 * node's slot map the planned one with all the replicas, and every
 * replica in sync. */
static int started(const struct h_rcluster *c, const void *arg)
{
	unsigned short want;
	char *info;
	int i, j, k, s, np = c->nprimaries;

	(void)arg;
	for (i = 0; i < c->n; i++) {
		if (!live(c, i))
			continue;
		info = rc_text_of(c, i, "CLUSTER", "INFO");
		if (!info || !strstr(info, "cluster_state:ok\r\n")) {
			snprintf(rc_seen, sizeof(rc_seen),
				 "node %d: not cluster_state:ok", i);
			free(info);
			return 0;
		}
		free(info);
		if (!slots_of(c, i)) {
			snprintf(rc_seen, sizeof(rc_seen),
				 "node %d: no CLUSTER SLOTS", i);
			return 0;
		}
		for (s = 0; s < H_RCLUSTER_SLOTS; s++) {
			k = (int)((long)s * np / H_RCLUSTER_SLOTS);
			want = 0;
			for (j = np; j < c->n; j++)
				if (j % np == k && live(c, j))
					want |= (unsigned short)(1u << j);
			if (rc_own[s] != k || (rc_rep[s] & want) != want) {
				snprintf(rc_seen, sizeof(rc_seen),
					 "node %d: slot %d served by %d with "
					 "replicas %#x, not %d with %#x",
					 i, s, rc_own[s], rc_rep[s], k, want);
				return 0;
			}
		}
		if (i >= np && !follows(c, i, i % np)) {
			snprintf(rc_seen, sizeof(rc_seen),
				 "node %d: not in sync with node %d", i,
				 i % np);
			return 0;
		}
	}
	return 1;
}

/* ---- start and stop ------------------------------------------------------ */

/* Slots [k * 16384 / np, (k + 1) * 16384 / np) go to primary k: so
 * `started` finds slot s's primary as s * np / 16384. */
static int first_slot(int k, int np)
{
	return (int)(((long)k * H_RCLUSTER_SLOTS + np - 1) / np);
}

void h_rcluster_start(struct h_rcluster *c, int primaries, int replicas,
		      const char *appendfsync)
{
	char epoch[16], lo[16], hi[16], port0[16], bus0[16];
	const char *args[24];
	redisReply *r;
	size_t off = 0;
	int i, k, n = primaries * (1 + replicas);

	cr_assert(primaries >= 1 && replicas >= 0 && n <= H_RCLUSTER_MAX,
		  "rcluster: %d primaries with %d replicas each", primaries,
		  replicas);
	memset(c, 0, sizeof(*c));
	c->nprimaries = primaries;
	for (i = 0; i < n; i++) {
		/* The ports of the nodes started so far are bound: this
		 * one's bus port is none of them (and its own port is not
		 * this, h_redis_start_with sees to it). */
		c->bus[i] = h_free_port();
		snprintf(c->busarg[i], sizeof(c->busarg[i]), "%d", c->bus[i]);
		k = 0;
		args[k++] = "--cluster-enabled";
		args[k++] = "yes";
		/* Relative to the node's --dir. */
		args[k++] = "--cluster-config-file";
		args[k++] = "nodes.conf";
		args[k++] = "--cluster-node-timeout";
		args[k++] = "1000";
		args[k++] = "--cluster-port";
		args[k++] = c->busarg[i];
		args[k++] = "--cluster-require-full-coverage";
		args[k++] = "no";
		args[k++] = "--cluster-allow-replica-migration";
		args[k++] = "no";
		args[k++] = "--cluster-replica-validity-factor";
		args[k++] = "0";
		/* A replica's full sync starts at once, not after 5 s. */
		args[k++] = "--repl-diskless-sync-delay";
		args[k++] = "0";
		/* CLUSTER SLOTS lists a replica once its replication offset
		 * is not 0: after the sync of a primary that has taken no
		 * write yet, at its first PING to it (10 s by default). */
		args[k++] = "--repl-ping-replica-period";
		args[k++] = "1";
		c->n = i + 1;
		h_redis_start_with(&c->node[i], appendfsync, args, k);
		off += (size_t)snprintf(c->seeds + off, sizeof(c->seeds) - off,
					"%s127.0.0.1:%d", i ? "," : "",
					c->node[i].port);
	}
	for (i = 0; i < n; i++) {
		r = rc_must(c, i, "CLUSTER", "MYID", NULL);
		cr_assert(r->type == REDIS_REPLY_STRING && r->len == 40);
		memcpy(c->id[i], r->str, 41);
		freeReplyObject(r);
		/* Distinct epochs from the start, as redis-cli --cluster
		 * create sets them. */
		snprintf(epoch, sizeof(epoch), "%d", i + 1);
		freeReplyObject(rc_must(c, i, "CLUSTER", "SET-CONFIG-EPOCH",
					epoch, NULL));
	}
	for (k = 0; k < primaries; k++) {
		snprintf(lo, sizeof(lo), "%d", first_slot(k, primaries));
		snprintf(hi, sizeof(hi), "%d",
			 first_slot(k + 1, primaries) - 1);
		freeReplyObject(rc_must(c, k, "CLUSTER", "ADDSLOTSRANGE", lo,
					hi, NULL));
	}
	snprintf(port0, sizeof(port0), "%d", c->node[0].port);
	snprintf(bus0, sizeof(bus0), "%d", c->bus[0]);
	for (i = 1; i < n; i++)
		freeReplyObject(rc_must(c, i, "CLUSTER", "MEET", "127.0.0.1",
					port0, bus0, NULL));
	rc_wait(c, "nodes meet", all_met, NULL, NULL);
	for (i = primaries; i < n; i++)
		freeReplyObject(rc_must(c, i, "CLUSTER", "REPLICATE",
					c->id[i % primaries], NULL));
	rc_wait(c, "cluster start", started, NULL, NULL);
}

void h_rcluster_cleanup(struct h_rcluster *c)
{
	int i;

	/* Replicas first: a primary's shutdown then waits for none. A node
	 * a test stopped with SIGSTOP is woken up to hear SIGTERM. */
	for (i = c->n - 1; i >= 0; i--) {
		if (c->node[i].pid > 0)
			kill(c->node[i].pid, SIGCONT);
		h_redis_cleanup(&c->node[i]);
	}
	c->n = 0;
}

/* ---- asking -------------------------------------------------------------- */

int h_rcluster_primary_of(struct h_rcluster *c, int slot)
{
	cr_assert(slot >= 0 && slot < H_RCLUSTER_SLOTS);
	if (!slots_view(c))
		return -1;
	return rc_own[slot];
}

int h_rcluster_replica_of(struct h_rcluster *c, int slot)
{
	int j;

	cr_assert(slot >= 0 && slot < H_RCLUSTER_SLOTS);
	if (!slots_view(c))
		return -1;
	for (j = 0; j < c->n; j++)
		if ((rc_rep[slot] & (1u << j)) && live(c, j))
			return j;
	return -1;
}

int h_rcluster_keyslot(struct h_rcluster *c, const char *key)
{
	redisReply *r;
	int i, s;

	for (i = 0; i < c->n; i++) {
		if (!live(c, i))
			continue;
		r = rc_call(c, i, "CLUSTER", "KEYSLOT", key, NULL);
		if (r && r->type == REDIS_REPLY_INTEGER) {
			s = (int)r->integer;
			freeReplyObject(r);
			return s;
		}
		freeReplyObject(r);
	}
	cr_assert_fail("rcluster: no live node answers CLUSTER KEYSLOT");
	return -1;
}

const char *h_rcluster_cli(struct h_rcluster *c, int i, const char *cmd)
{
	cr_assert(i >= 0 && i < c->n, "rcluster: no node %d", i);
	return h_redis_cli(&c->node[i], cmd);
}

/* ---- fail-over ----------------------------------------------------------- */

struct rc_fo {
	int to;			     /* the new primary */
	int takeover;		     /* CLUSTER FAILOVER TAKEOVER */
	unsigned short followers;    /* nodes to follow it */
	char want[H_RCLUSTER_SLOTS]; /* its slots */
};

static int failed_over(const struct h_rcluster *c, const void *arg)
{
	const struct rc_fo *f = arg;
	unsigned short want;
	int i, j, s;

	for (i = 0; i < c->n; i++) {
		if (!live(c, i))
			continue;
		want = 0;
		for (j = 0; j < c->n; j++)
			if ((f->followers & (1u << j)) && live(c, j))
				want |= (unsigned short)(1u << j);
		if (!slots_of(c, i)) {
			snprintf(rc_seen, sizeof(rc_seen),
				 "node %d: no CLUSTER SLOTS", i);
			return 0;
		}
		for (s = 0; s < H_RCLUSTER_SLOTS; s++)
			if (f->want[s] && (rc_own[s] != f->to ||
					   (rc_rep[s] & want) != want)) {
				snprintf(rc_seen, sizeof(rc_seen),
					 "node %d: slot %d served by %d with "
					 "replicas %#x, not %d with %#x",
					 i, s, rc_own[s], rc_rep[s], f->to,
					 want);
				return 0;
			}
		if (((want >> i) & 1) && !follows(c, i, f->to)) {
			snprintf(rc_seen, sizeof(rc_seen),
				 "node %d: not in sync with node %d", i, f->to);
			return 0;
		}
	}
	return 1;
}

/* CLUSTER FAILOVER [TAKEOVER] on f->to; once it is primary (the
 * cluster's own fail-over may have been quicker), nothing to do. */
static void fo_ask(const struct h_rcluster *c, const void *arg)
{
	const struct rc_fo *f = arg;
	const char *argv[3] = {"CLUSTER", "FAILOVER", "TAKEOVER"};
	redisReply *r;

	if (is_primary(c, f->to))
		return;
	r = rc_argv(c, f->to, f->takeover ? 3 : 2, argv);
	if (!r || r->type == REDIS_REPLY_ERROR)
		cr_assert(is_primary(c, f->to), "node %d (port %d): %s: %s",
			  f->to, c->node[f->to].port,
			  rc_text(f->takeover ? 3 : 2, argv),
			  r ? r->str : "no reply");
	freeReplyObject(r);
}

static void rc_failover(struct h_rcluster *c, int replica, int takeover)
{
	static struct rc_fo f;
	int p = -1, s, j;

	cr_assert(live(c, replica), "rcluster: node %d is not running",
		  replica);
	memset(&f, 0, sizeof(f));
	f.to = replica;
	f.takeover = takeover;
	/* The replica's own view: which primary it follows, and so which
	 * slots it is to serve; if it is a primary already (the cluster
	 * failed over by itself), the slots it serves. */
	cr_assert(slots_of(c, replica), "rcluster: node %d: no CLUSTER SLOTS",
		  replica);
	for (s = 0; s < H_RCLUSTER_SLOTS && p < 0; s++)
		if (rc_rep[s] & (1u << replica))
			p = rc_own[s];
	if (p < 0)
		cr_assert(is_primary(c, replica),
			  "rcluster: node %d follows no primary", replica);
	for (s = 0; s < H_RCLUSTER_SLOTS; s++) {
		if (p >= 0 ? rc_own[s] != p : rc_own[s] != replica)
			continue;
		f.want[s] = 1;
		f.followers |= rc_rep[s];
	}
	f.followers &= (unsigned short)~(1u << replica);
	if (p >= 0)
		f.followers |= (unsigned short)(1u << p);
	for (j = 0; j < c->n; j++)
		if (!live(c, j))
			f.followers &= (unsigned short)~(1u << j);
	fo_ask(c, &f);
	rc_wait(c, takeover ? "takeover" : "failover", failed_over, &f,
		takeover ? NULL : fo_ask);
}

void h_rcluster_failover(struct h_rcluster *c, int replica)
{
	rc_failover(c, replica, 0);
}

void h_rcluster_takeover(struct h_rcluster *c, int replica)
{
	rc_failover(c, replica, 1);
}

/* ---- moving a slot ------------------------------------------------------- */

struct rc_move {
	int slot, to;
};

static int moved(const struct h_rcluster *c, const void *arg)
{
	const struct rc_move *m = arg;
	int i;

	for (i = 0; i < c->n; i++) {
		if (!live(c, i))
			continue;
		if (!slots_of(c, i) || rc_own[m->slot] != m->to) {
			snprintf(rc_seen, sizeof(rc_seen),
				 "node %d: slot %d served by %d", i, m->slot,
				 rc_own[m->slot]);
			return 0;
		}
	}
	return 1;
}

void h_rcluster_move_slot(struct h_rcluster *c, int slot, int to, int pause_ms)
{
	const char *argv[RC_ARGS_MAX];
	char s[16], port[16];
	redisReply *keys, *r;
	struct rc_move m = {slot, to};
	int from, argc, i, batches = 0;
	size_t k;

	cr_assert(slot >= 0 && slot < H_RCLUSTER_SLOTS);
	cr_assert(live(c, to) && is_primary(c, to),
		  "rcluster: node %d is no live primary", to);
	from = h_rcluster_primary_of(c, slot);
	cr_assert(from >= 0, "rcluster: slot %d has no primary", slot);
	if (from == to)
		return;
	snprintf(s, sizeof(s), "%d", slot);
	snprintf(port, sizeof(port), "%d", c->node[to].port);
	freeReplyObject(rc_must(c, to, "CLUSTER", "SETSLOT", s, "IMPORTING",
				c->id[from], NULL));
	freeReplyObject(rc_must(c, from, "CLUSTER", "SETSLOT", s, "MIGRATING",
				c->id[to], NULL));
	for (;;) {
		keys = rc_must(c, from, "CLUSTER", "GETKEYSINSLOT", s, RC_BATCH,
			       NULL);
		if (keys->type != REDIS_REPLY_ARRAY || keys->elements == 0) {
			freeReplyObject(keys);
			break;
		}
		if (batches++ && pause_ms > 0)
			h_sleep_ms(pause_ms);
		argc = 0;
		argv[argc++] = "MIGRATE";
		argv[argc++] = c->node[to].host;
		argv[argc++] = port;
		argv[argc++] = "";
		argv[argc++] = "0";
		argv[argc++] = RC_MIGRATE_MS;
		argv[argc++] = "KEYS";
		for (k = 0; k < keys->elements && argc < RC_ARGS_MAX; k++)
			argv[argc++] =
				keys->element[k]->type == REDIS_REPLY_STRING
					? keys->element[k]->str
					: "";
		r = rc_argv(c, from, argc, argv);
		rc_expect(c, from, r, argc, argv);
		freeReplyObject(r);
		freeReplyObject(keys);
	}
	freeReplyObject(rc_must(c, to, "CLUSTER", "SETSLOT", s, "NODE",
				c->id[to], NULL));
	freeReplyObject(rc_must(c, from, "CLUSTER", "SETSLOT", s, "NODE",
				c->id[to], NULL));
	for (i = 0; i < c->n; i++)
		if (i != to && i != from && live(c, i) && is_primary(c, i))
			freeReplyObject(rc_must(c, i, "CLUSTER", "SETSLOT", s,
						"NODE", c->id[to], NULL));
	rc_wait(c, "slot move", moved, &m, NULL);
}
