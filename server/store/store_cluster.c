/* SPDX-License-Identifier: MIT */
/*
 * store_cluster.c -- the cluster id: which lock table a daemon serves.
 *
 * Daemons that share one Redis keyspace (address, db, key prefix) share
 * one lock table; daemons on two keyspaces are two clusters, whatever
 * their clients' server lists say. A typo in one node's URL (db 1 for
 * db 0) or prefix made each node the active of its own empty table, and
 * a client that listed both failed over from one into the other: two
 * holders of one lock, nothing logged. So each keyspace is named:
 *
 *   P cluster  32 hex digits, 128 random bits
 *
 * written once, with SET NX, by the first daemon that takes the
 * leadership of a keyspace that has none. Every daemon, active or
 * standby, reads it before it takes or looks at the leadership, keeps it
 * (st->lead.seen, which names its state file by it: seen.h; the first
 * read chooses that file) and names it in HELLO
 * (cluster=); clients refuse a server whose id is not the one they met
 * first (PROTOCOL.md). With persist = none each process is a cluster of
 * its own: a random id per process.
 *
 * Invariants:
 *   - a daemon that knows id X never serves as the active of a keyspace
 *     that holds another id: it refuses, logging why, until an operator
 *     resolves it. It does not adopt the other id: its clients may hold
 *     leases of X that the other table knows nothing of, and a client
 *     that met X only trusts X (the only way to another id is a
 *     restart that forgot X, which is the operator's call);
 *   - a keyspace that lost its id (FLUSHALL, an older copy: Redis went
 *     back) gets the active's known id again when the active takes the
 *     leadership on its next link and writes its table back (store.c,
 *     on_take), so the id survives what the table survives;
 *   - only a daemon that holds the leadership writes the id; a standby
 *     that does not know it yet asks again with each look, and says
 *     cluster=- until it knows;
 *   - a start that knows no id (no state file), on a Redis that lost it,
 *     takes the one its peers name in their answers when its restart
 *     round bounds or closes (store_restart.c): they and their clients
 *     trust that id, and the take's closure covers what was lost.
 */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "server/log.h"
#include "server/store/store_private.h"

const char *dl_store_cluster(const struct dl_store *st)
{
	return st->lead.seen.v.cluster[0] ? st->lead.seen.v.cluster : "-";
}

int dl__cluster_id_valid(const char *s, size_t len)
{
	size_t i;

	if (len != DL_CLUSTER_ID_LEN)
		return 0;
	for (i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

/* A new id for this daemon's cluster, if it knows none. */
static int make_id(struct dl_store *st)
{
	unsigned char r[DL_CLUSTER_ID_LEN / 2];
	char id[DL_CLUSTER_ID_LEN + 1];
	size_t i;

	if (st->lead.seen.v.cluster[0])
		return 0;
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return DL_EUNAVAILABLE;
	for (i = 0; i < sizeof(r); i++)
		snprintf(id + 2 * i, 3, "%02x", r[i]);
	dl_seen_note_cluster(&st->lead.seen, id);
	/* refused: a state file of this Redis knows another id */
	return st->lead.seen.v.cluster[0] ? 0 : DL_EBADARG;
}

int dl__cluster_init(struct dl_store *st)
{
	return st->redis ? 0 : make_id(st);
}

int dl__cluster_found(struct dl_store *st, const redisReply *r, char *why,
		      size_t len)
{
	int knew = st->lead.seen.v.cluster[0] != 0, rc;

	if (r->type == REDIS_REPLY_NIL) {
		st->cluster_absent = 1;
		/* Redis lost it (or never had one): this Redis's state file,
		 * if any, says which it was (seen.h) */
		if ((rc = dl_seen_bind(&st->lead.seen, NULL, why, len)) != 0)
			dl_error("redis: %s", why);
		return rc;
	}
	st->cluster_absent = 0;
	if (r->type != REDIS_REPLY_STRING) {
		snprintf(why, len, "%s: not a string", st->keys.cluster);
		return DL_EBADARG;
	}
	if (!dl__cluster_id_valid(r->str, r->len)) {
		snprintf(why, len, "%s holds %.40s%s: not a cluster id",
			 st->keys.cluster, r->str, r->len > 40 ? "..." : "");
		dl_error("redis: %s", why);
		return DL_EBADARG;
	}
	if ((rc = dl_seen_bind(&st->lead.seen, r->str, why, len)) != 0) {
		dl_error("redis: %s", why);
		return rc;
	}
	if (!knew)
		dl_notice("redis: cluster %s", st->lead.seen.v.cluster);
	return 0;
}

/* ---- the start-up load (blocking, store_load.c) ------------------------ */

int dl__cluster_load_read(struct load_ctx *x)
{
	const char *argv[] = {"GET", x->st->keys.cluster};
	size_t lens[] = {3, strlen(x->st->keys.cluster)};
	char why[600];
	redisReply *r;
	int rc = 0;

	if (!(r = dl__load_run(x, &rc, 0, 2, argv, lens)))
		return rc;
	rc = dl__cluster_found(x->st, r, why, sizeof(why));
	freeReplyObject(r);
	return rc ? dl__load_err(x, rc, "%s", why) : 0;
}

/* SET <key> <id> NX GET: the id written unless one is there, and the one
 * there if so (the load's and the link's claim). */
#define CLAIM_ARGC 5
static void claim_argv(const struct dl_store *st, const char **argv,
		       size_t *lens)
{
	argv[0] = "SET";
	argv[1] = st->keys.cluster;
	argv[2] = st->lead.seen.v.cluster;
	argv[3] = "NX";
	argv[4] = "GET";
	lens[0] = 3;
	lens[1] = strlen(argv[1]);
	lens[2] = DL_CLUSTER_ID_LEN;
	lens[3] = 2;
	lens[4] = 3;
}

int dl__cluster_load_claim(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	const char *argv[CLAIM_ARGC];
	size_t lens[CLAIM_ARGC];
	char why[600];
	redisReply *r;
	int rc = 0;

	if (!st->cluster_absent)
		return 0;
	if ((rc = make_id(st)) != 0)
		return dl__load_err(x, rc, "cannot make a cluster id");
	claim_argv(st, argv, lens);
	if (!(r = dl__load_run(x, &rc, 0, CLAIM_ARGC, argv, lens)))
		return rc;
	if (r->type == REDIS_REPLY_NIL)
		dl_notice("redis: cluster %s (written to %s)",
			  st->lead.seen.v.cluster, st->keys.cluster);
	else
		rc = dl__cluster_found(st, r, why, sizeof(why));
	st->cluster_absent = 0;
	freeReplyObject(r);
	return rc ? dl__load_err(x, rc, "%s", why) : 0;
}

/* ---- the async link (store.c) ------------------------------------------ */

/* The reply to the id's SET NX GET after a take: nil (written) or the id
 * somebody wrote first. */
static void on_claim(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	redisReply *r = reply;
	char why[600];

	if (!r || ac != st->ac)
		return;
	if (r->type == REDIS_REPLY_ERROR) {
		dl__link_fail(st, "writing the cluster id failed");
		return;
	}
	if (r->type == REDIS_REPLY_NIL) {
		dl_notice("redis: cluster %s (written to %s)",
			  st->lead.seen.v.cluster, st->keys.cluster);
		return;
	}
	if (dl__cluster_found(st, r, why, sizeof(why)))
		dl__link_fail(st, "cluster mismatch");
}

int dl__cluster_claim(struct dl_store *st)
{
	const char *argv[CLAIM_ARGC];
	size_t lens[CLAIM_ARGC];

	if (!st->cluster_absent)
		return 0;
	st->cluster_absent = 0;
	if (make_id(st))
		return DL_EUNAVAILABLE;
	claim_argv(st, argv, lens);
	if (redisAsyncCommandArgv(st->ac, on_claim, st, CLAIM_ARGC, argv,
				  lens) != REDIS_OK)
		return DL_EUNAVAILABLE;
	return 0;
}

/* A standby's GET of the id, sent with a look while it does not know it. */
static void on_poll(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	char why[600];

	if (!reply || ac != st->ac)
		return;
	if (((redisReply *)reply)->type == REDIS_REPLY_ERROR)
		return; /* the look's reply says what is wrong */
	if (dl__cluster_found(st, reply, why, sizeof(why)))
		dl__link_fail(st, "cluster mismatch");
}

int dl__cluster_send_get(struct dl_store *st, redisCallbackFn *fn)
{
	const char *argv[] = {"GET", st->keys.cluster};
	size_t lens[] = {3, strlen(st->keys.cluster)};

	if (redisAsyncCommandArgv(st->ac, fn ? fn : on_poll, st, 2, argv,
				  lens) != REDIS_OK)
		return DL_EUNAVAILABLE;
	return 0;
}
