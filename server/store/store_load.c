/* SPDX-License-Identifier: MIT */
/*
 * store_load.c -- reading the lock table back from Redis at start-up and
 * at a take-over.
 *
 * Runs before the daemon serves, with hiredis's blocking API: nothing
 * else needs the loop yet. One call is one attempt; the caller retries
 * (server.c) while Redis is unreachable or not ready, and every attempt
 * starts from an empty table, so a load cut short leaves nothing behind.
 *
 * Steps: connect, AUTH, SELECT, FUNCTION LOAD (the library,
 * store_batch.c), the leadership's take (store_lead.c: a new epoch, the
 * writer fence "<epoch>/2", which also bars daemons of layout 1 from here
 * on), GET of the token high-water mark, then the records. In layout 2
 * (store.c) they are the fields of DL_STORE_BUCKETS hashes: HLEN of each
 * to size the table, then HGETALL of each, DL_STORE_LOAD_WINDOW in
 * flight, so that Redis builds the next reply while the daemon parses
 * one; every few hundred milliseconds the window is let empty and the
 * leadership renewed (a blocking call reads the oldest reply), so that a
 * long load does not let a standby take over. A Redis still in layout 1
 * (its name set P locks exists) is read the old way and migrated to
 * layout 2 before anything is served: store_migrate.c.
 *
 * The restore rule (docs/design.md, "Restore"). A restored lease lasts
 * until R + its TTL, R being the moment its record is read. Its holder counted
 * its lease from a request it sent before the daemon stopped, so before
 * R: the lease never ends sooner than the holder may believe, however long
 * the daemon was down or waited for Redis, and whatever the wall clock did
 * meanwhile (the stored deadline, wall-clock time, is not used). The cost:
 * a lock whose holder died stays busy up to one TTL after a restart.
 * Waiters come back as placeholders that keep their place for
 * restore_grace from R; a waiter whose stored wait deadline has passed is
 * dropped (that only decides when a wait ends, never who holds a lock),
 * and its lock written back.
 *
 * Not ready is not broken. LOADING, BUSY, READONLY, MASTERDOWN (and a
 * connection that fails or times out) make the attempt fail as
 * DL_EUNAVAILABLE, to be retried; only what an operator must fix (a wrong
 * password, a missing database, a Redis without functions) is fatal. A
 * record that cannot be read does not stop the start and does not free
 * its lock: the lock is held by DL_QUARANTINE_OWNER for max_ttl (no lease
 * can have been granted for longer), logged with its key and content. A
 * field whose name is not a lock name, or is not in its name's bucket,
 * was not written by dlockd: it is logged and ignored (and goes at the
 * next re-sync). A bucket that is not a hash is neither: its locks cannot
 * be known, and serving without them could grant a held lock again, so
 * the load fails as not ready, saying which key, and waits for an
 * operator to remove it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/clock.h"
#include "server/log.h"
#include "server/store/store_private.h"

/* Bytes of an unreadable record shown in the log. */
#define SHOW_MAX 160

void dl__load_prefetch(const struct load_ctx *x, struct dl_str far,
		       struct dl_str near)
{
	/* Two cache misses per new lock, overlapped (locktab.h). */
	if (far.len)
		dl_locktab_prefetch(x->st->tab, far, 0);
	if (near.len)
		dl_locktab_prefetch(x->st->tab, near, 1);
}

/* Field j of an HGETALL reply of n elements, if it is one. */
static struct dl_str field_at(redisReply *const *e, size_t n, size_t j)
{
	return j < n && e[j]->type == REDIS_REPLY_STRING
		       ? (struct dl_str){e[j]->str, e[j]->len}
		       : DL_STR_NULL;
}

int dl__load_add_name(struct dl_buf *b, struct dl_str name)
{
	if (dl_buf_add(b, name.p, name.len) || dl_buf_add(b, "", 1))
		return DL_ENOMEM;
	return 0;
}

/* ---- commands (one call: store_call.c) --------------------------------- */

#define RUN DL__LOAD_RUN

/* What an acknowledged grant survives (store_durable.c): without AOF,
 * and without allow_nondurable_redis, or with a maxmemory-policy that
 * may evict keys, and without allow_evicting_redis, the start ends here
 * (a configuration error an operator must fix, not a wait). */
static int check_durable(struct load_ctx *x)
{
	redisReply *info, *fsync;
	char why[200];
	int rc = 0, d;

	if (!(info = RUN(x, &rc, 0, "INFO", "server", "persistence",
			 "replication", "commandstats")))
		return rc;
	/* compared once the state file is bound (load) */
	x->run = dl__run_id_of(info->type == REDIS_REPLY_STRING ? info->str
								: NULL);
	x->meddled = dl__meddled_of(info->type == REDIS_REPLY_STRING ? info->str
								     : NULL);
	/* CONFIG may be renamed away: an error is an unknown policy */
	fsync = redisCommand(x->c, "CONFIG GET appendfsync maxmemory-policy");
	if (!fsync && x->c->err) {
		freeReplyObject(info);
		return dl__load_err(x, DL_EUNAVAILABLE, "CONFIG GET: %s",
				    x->c->errstr);
	}
	d = dl__durability_of(
		info->type == REDIS_REPLY_STRING ? info->str : NULL, fsync);
	freeReplyObject(info);
	if ((rc = dl__durability_check(x->st, d, why, sizeof(why))) != 0 ||
	    (rc = dl__eviction_check(x->st, fsync, why, sizeof(why))) != 0) {
		freeReplyObject(fsync);
		return dl__load_err(x, rc, "%s", why);
	}
	freeReplyObject(fsync);
	return 0;
}

static int connect_redis(struct load_ctx *x)
{
	const struct dl_redis_addr *a = &x->st->addr;
	uint64_t t = x->st->cfg->redis_timeout_ms;
	struct timeval tv = {(time_t)(t / 1000),
			     (suseconds_t)(t % 1000) * 1000};
	char db[24], host[256];
	redisReply *r;
	int rc = 0, port;

	if (!a->path && dl__find_primary_sync(x->st, host, sizeof(host), &port,
					      x->err, x->errlen) != 0)
		return DL_EUNAVAILABLE;
	x->c = a->path ? redisConnectUnixWithTimeout(a->path, tv)
		       : redisConnectWithTimeout(host, port, tv);
	if (!x->c || x->c->err)
		return dl__load_err(x, DL_EUNAVAILABLE, "%s",
				    x->c ? x->c->errstr : "out of memory");
	redisSetTimeout(x->c, tv);
	if (a->password && a->user) {
		if (!(r = RUN(x, &rc, 1, "AUTH", a->user, a->password)))
			return rc;
		freeReplyObject(r);
	} else if (a->password) {
		if (!(r = RUN(x, &rc, 1, "AUTH", a->password)))
			return rc;
		freeReplyObject(r);
	}
	snprintf(db, sizeof(db), "%d", a->db);
	if (!(r = RUN(x, &rc, 1, "SELECT", db)))
		return rc;
	freeReplyObject(r);
	if (!(r = RUN(x, &rc, 0, "ROLE")))
		return rc;
	if (r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(r->element[0]->str, "master") != 0) {
		freeReplyObject(r);
		return dl__load_err(x, DL_EUNAVAILABLE,
				    "%s:%d is not a primary (a replica?)",
				    a->path ? a->path : host,
				    a->path ? 0 : port);
	}
	freeReplyObject(r);
	if ((rc = check_durable(x)) != 0)
		return rc;
	if (!(r = RUN(x, &rc, 0, "CLIENT", "SETNAME", x->st->lead.client_name)))
		return rc;
	freeReplyObject(r);
	if (!(r = RUN(x, &rc, 1, "FUNCTION", "LOAD", "REPLACE",
		      dl__store_library()))) {
		if (rc == DL_EBADARG && strstr(x->err, "unknown command"))
			dl__load_err(
				x, rc,
				"Redis has no FUNCTION command: dlockd needs Redis 7.0 or later");
		return rc;
	}
	freeReplyObject(r);
	return 0;
}

/* The leadership (store_lead.c): taken, this daemon is the writer and
 * the fence "<epoch>/2" is its own; held by another, the load stops
 * there. */
static int take_lead(struct load_ctx *x, int start, char *fence, size_t len)
{
	struct dl_store *st = x->st;
	const char *argv[LEAD_ARGC];
	size_t lens[LEAD_ARGC];
	struct lead_reply lr;
	uint64_t sent = dl_mono_ms();
	redisReply *r;
	char who[512];
	int argc, rc = 0;

	argc = dl__lead_argv(st, start ? LEAD_START : LEAD_TAKE, NULL, argv,
			     lens);
	if (!(r = dl__load_run(x, &rc, 0, argc, argv, lens)))
		return rc;
	rc = dl__lead_reply(st, start ? LEAD_START : LEAD_TAKE, r, sent, &lr);
	freeReplyObject(r);
	if (rc)
		return dl__load_err(
			x, DL_EUNAVAILABLE,
			"%s: not a reply of the leadership function",
			st->keys.leader);
	if (!lr.ok) {
		dl__lead_describe(st, who, sizeof(who));
		return dl__load_err(
			x, DL_ENOTACTIVE,
			"another dlockd is active on this Redis and prefix: %s",
			who);
	}
	if (dl__lead_took(st, &lr, who, sizeof(who)))
		return dl__load_err(x, DL_EBADARG, "%s", who);
	x->closed_ms = lr.closed_ms;
	x->behind = lr.behind;
	dl__fence_format(fence, len, lr.epoch);
	x->lead_sent = sent;
	return 0;
}

int dl__load_lead_due(const struct load_ctx *x)
{
	return dl_mono_ms() - x->lead_sent >= x->st->cfg->leader_lease_ms / 3;
}

/* A big load can outlast a third of the leadership lease: renew it on
 * the way, as the active does (a standby would take over otherwise). */
int dl__load_keep_lead(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	const char *argv[LEAD_ARGC];
	size_t lens[LEAD_ARGC];
	struct lead_reply lr;
	uint64_t sent = dl_mono_ms();
	redisReply *r;
	int argc, rc = 0;

	if (!dl__load_lead_due(x))
		return 0;
	argc = dl__lead_argv(st, LEAD_RENEW, x->fence, argv, lens);
	if (!(r = dl__load_run(x, &rc, 0, argc, argv, lens)))
		return rc;
	rc = dl__lead_reply(st, LEAD_RENEW, r, sent, &lr);
	freeReplyObject(r);
	if (rc || !lr.ok)
		return dl__load_err(x, rc ? DL_EUNAVAILABLE : DL_ENOTACTIVE,
				    "leadership lost while loading");
	x->lead_sent = sent;
	return 0;
}

/* The stored token high-water mark; one that cannot be read is logged and
 * counts as 0 (the time floor and the records' tokens still hold). */
static int read_token(struct load_ctx *x, uint64_t *stored)
{
	redisReply *r;
	int rc = 0;

	*stored = 0;
	if (!(r = RUN(x, &rc, 0, "GET", x->st->keys.token))) {
		if (rc != DL_EUNAVAILABLE || !strstr(x->err, "WRONGTYPE"))
			return rc;
		dl_error(
			"redis: %s is not a string; ignoring it (tokens resume above the clock and the records)",
			x->st->keys.token);
		return 0;
	}
	if (r->type == REDIS_REPLY_STRING &&
	    dl_parse_u64(r->str, r->len, stored) != 0)
		dl_error("redis: %s holds \"%.*s\", not a token; ignoring it",
			 x->st->keys.token, (int)(r->len > 40 ? 40 : r->len),
			 r->str);
	freeReplyObject(r);
	return 0;
}

/* ---- records ------------------------------------------------------------ */

/* First pass over a record: everything restore would refuse. */
static int check_item(const struct dl_record_item *it, void *arg)
{
	struct load_ctx *x = arg;

	if (it->kind == 'D') /* the parser checked its range */
		return 0;
	if (it->ttl_ms == 0 || it->ttl_ms > DL_TTL_STORE_MAX)
		return DL_EPROTO;
	/* One owner, two keys: no daemon writes that (one binding per
	 * owner, and the drain after a new binding carries the old one's
	 * last changes: locktab.c, drain), but a crash of an older daemon,
	 * or a hand in Redis, may leave it. Which key is the owner's cannot
	 * be told, so the later record is held unreadable -- the lock stays
	 * busy, nobody holds it by this -- and the load goes on. */
	if (it->has_proof &&
	    dl_locktab_proof_conflicts(x->st->tab, it->owner, it->proof)) {
		if (it->kind == 'W' && x->skip_bound_waiters)
			return 0; /* left out (load_item) */
		x->why =
			"its owner is bound to another key by an earlier record";
		return DL_EPROTO;
	}
	if (it->kind != 'H')
		return 0;
	if (it->count == 0 || it->count > DL_REENTRY_MAX || it->token == 0 ||
	    it->warn_ms >= it->ttl_ms)
		return DL_EPROTO;
	/* holders the lock can have at once: one mode, within the limit */
	if (x->holders++ == 0)
		x->holders_shared = it->shared;
	if (it->shared != x->holders_shared ||
	    x->holders > (int)(it->shared ? DL_SHARED_MAX : it->limit))
		return DL_EPROTO;
	return 0;
}

static uint64_t restored_deadline(const struct load_ctx *x,
				  const struct dl_record_item *it)
{
#ifdef DL_PLANT_WALL_RESTORE
	/* A planted bug for the fault campaign's self-test (tests/faults):
	 * trusts the wall clock, as dlockd once did. Never in a real build. */
	return it->deadline > x->now_wall
		       ? x->now_mono + (it->deadline - x->now_wall)
		       : x->now_mono;
#else
	return x->now_mono + it->ttl_ms;
#endif
}

/* The item's owner is bound to the proof its record carries (locktab.h,
 * Identity). A proof that differs from the owner's was refused by the
 * check pass (check_item); one record naming an owner twice is refused by
 * the restore. */
static int bind_proof(struct dl_locktab *t, const struct dl_record_item *it)
{
	if (!it->has_proof)
		return 0;
	return dl_locktab_bind_proof(t, it->owner, it->proof) ? DL_EPROTO : 0;
}

/* A restored holder's lease: with its description, and its hold time
 * from the wall-clock time it was granted (for people: a clock stepped
 * meanwhile makes it wrong, never the lease; one in the future counts as
 * now). */
static int load_lease(struct load_ctx *x, const struct dl_record_item *it)
{
	struct dl_desc *d;
	uint64_t held = it->since && it->since < x->now_wall
				? x->now_wall - it->since
				: 0;
	int r = dl_desc_new(it->host, it->pid, it->cmd, &d);

	if (r)
		return r;
	if (it->token > x->max_token)
		x->max_token = it->token;
	r = dl_locktab_restore_lease(x->st->tab, x->name, it->owner, it->token,
				     (uint32_t)it->count, (uint32_t)it->ttl_ms,
				     restored_deadline(x, it), it->tag,
				     it->shared, it->limit, d, held, it->req);
	dl_desc_unref(d);
	x->leases += r == 0;
	/* its warning too: a restored lease warns as it did */
	if (r == 0 && it->warn_ms)
		r = dl_locktab_restore_warn(x->st->tab, x->name, it->token,
					    (uint32_t)it->warn_ms);
	/* says what it said */
	if (r == 0 && it->value.len)
		r = dl_locktab_restore_value(x->st->tab, x->name, it->token,
					     it->value);
	/* and is told of waiters, if it asked */
	if (r == 0 && it->notify)
		r = dl_locktab_restore_notify(x->st->tab, x->name, it->token);
	return r ? r : bind_proof(x->st->tab, it);
}

/* Second pass: restore each item. */
static int load_item(const struct dl_record_item *it, void *arg)
{
	struct load_ctx *x = arg;
	struct dl_locktab *t = x->st->tab;
	uint64_t wait, grace = x->now_mono + x->st->cfg->restore_grace_ms;
	int r;

	/* the lock's delay, first: a running one honoured whole from now */
	if (it->kind == 'D')
		return dl_locktab_restore_delay(t, x->name,
						(uint32_t)it->ttl_ms,
						it->delay_running, it->limit);
	if (it->kind == 'H')
		return load_lease(x, it);
	if ((it->deadline != UINT64_MAX && it->deadline <= x->now_wall) ||
	    (x->skip_bound_waiters && it->has_proof &&
	     dl_locktab_proof_conflicts(t, it->owner, it->proof))) {
		/* its wait ended while we were down; or, imported, its
		 * owner is another key's here (the waiter hears * MOVED
		 * and is refused here: it holds nothing) */
		x->changed = 1;
		x->dropped++;
		return 0;
	}
	wait = it->deadline == UINT64_MAX
		       ? UINT64_MAX
		       : x->now_mono + (it->deadline - x->now_wall);
	r = dl_locktab_restore_waiter(t, x->name, it->owner,
				      (uint32_t)it->ttl_ms, wait, grace,
				      it->tag, it->shared, it->limit);
	x->waiters += r == 0;
	return r ? r : bind_proof(t, it);
}

/* Where a record lives, for the log: "P lock:<name>" (layout 1) or
 * "P rec:<b> <name>" (its bucket and field). */
static void where(const struct load_ctx *x, struct dl_str name, char *buf,
		  size_t len)
{
	size_t kl;

	if (x->l1)
		snprintf(buf, len, "%s%.*s", x->st->keys.lock_prefix,
			 (int)name.len, name.p);
	else
		snprintf(buf, len, "%s %.*s",
			 dl__rec_key(x->st, x->bucket, &kl), (int)name.len,
			 name.p);
}

/* A record that cannot be read: log it whole enough to debug, and hold
 * its lock (after the load, once tokens are raised). */
int dl__load_unreadable(struct load_ctx *x, struct dl_str name,
			const char *text, size_t len, const char *why)
{
	char show[SHOW_MAX + 1], at[DL_NAME_MAX + 64];
	size_t i, n = len < SHOW_MAX ? len : SHOW_MAX;

	for (i = 0; i < n; i++)
		show[i] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '.';
	show[n] = '\0';
	where(x, name, at, sizeof(at));
	dl_error(
		"redis: %s: record unreadable (%s): \"%s\"%s; the lock stays held for max_ttl (%llu ms), never freed by this",
		at, why, show, len > n ? "..." : "",
		(unsigned long long)x->st->cfg->max_ttl_ms);
	x->unreadable++;
	return dl__load_add_name(&x->bad_names, name);
}

int dl__load_record(struct load_ctx *x, struct dl_str name,
		    const redisReply *val)
{
	const char *why = NULL;
	int r;

	if (val->type != REDIS_REPLY_STRING)
		return dl__load_unreadable(x, name, "", 0, "not a string");
	x->name = name;
	x->changed = 0;
	x->holders = 0;
	x->why = NULL;
	r = dl_record_parse(val->str, val->len, check_item, x, &why);
	if (r == DL_EPROTO)
		return dl__load_unreadable(x, name, val->str, val->len,
					   x->why ? x->why
					   : why  ? why
						  : "a value out of range");
	if (r == 0)
		r = dl_record_parse(val->str, val->len, load_item, x, &why);
	if (r)
		return dl__load_err(x, r, "restoring %.*s: %s", (int)name.len,
				    name.p, dl_strerror(r));
	if (x->changed)
		return dl__load_add_name(&x->changed_names, name);
	return 0;
}

/* ---- layout 2: the buckets ---------------------------------------------- */

static int bucket_refused(struct load_ctx *x, uint32_t b, const char *e);

/* HLEN of every bucket: how many locks to size the table for, and which
 * buckets to read (the leadership is held: nobody else writes). */
static int count_records(struct load_ctx *x, uint32_t *len, size_t *total)
{
	const char *argv[2] = {"HLEN", NULL};
	size_t lens[2] = {4, 0};
	redisReply *r;
	uint32_t b;
	int rc = 0;

	*total = 0;
	for (b = 0; b < DL_STORE_BUCKETS; b++) {
		argv[1] = dl__rec_key(x->st, b, &lens[1]);
		if (redisAppendCommandArgv(x->c, 2, argv, lens) != REDIS_OK)
			return DL_ENOMEM;
	}
	for (b = 0; b < DL_STORE_BUCKETS; b++) {
		r = NULL;
		if (redisGetReply(x->c, (void **)&r) != REDIS_OK || !r)
			return dl__load_err(x, DL_EUNAVAILABLE, "HLEN: %s",
					    x->c->errstr);
		len[b] = 0;
		if (r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
			len[b] = r->integer > UINT32_MAX ? UINT32_MAX
							 : (uint32_t)r->integer;
			*total += (size_t)r->integer;
		} else if (r->type == REDIS_REPLY_ERROR && !rc)
			rc = bucket_refused(x, b, r->str);
		freeReplyObject(r);
	}
	return rc;
}

static int send_hgetall(struct load_ctx *x, uint32_t b)
{
	const char *argv[2] = {"HGETALL", NULL};
	size_t lens[2] = {7, 0};

	argv[1] = dl__rec_key(x->st, b, &lens[1]);
	return redisAppendCommandArgv(x->c, 2, argv, lens) == REDIS_OK
		       ? 0
		       : DL_ENOMEM;
}

/* A bucket HGETALL refused: not ready (wait), or not a hash (see the top
 * comment: wait too, until an operator has looked). */
static int bucket_refused(struct load_ctx *x, uint32_t b, const char *e)
{
	size_t kl;
	const char *key = dl__rec_key(x->st, b, &kl);

	if (strncmp(e, "WRONGTYPE", 9) == 0) {
		dl_error(
			"redis: %s is not a hash: it was not written by dlockd, and the locks it should hold are unknown; nothing is served until it is removed or renamed (the locks of its bucket are then free)",
			key);
		return dl__load_err(x, DL_EUNAVAILABLE,
				    "%s is not a hash of lock records", key);
	}
	return dl__load_err(x, DL_EUNAVAILABLE, "%s: %s", key, e);
}

/* A field of bucket b that dlockd did not write: 0 if it is a lock's. */
static int foreign_field(struct load_ctx *x, uint32_t b, struct dl_str name)
{
	size_t kl;
	const char *key = dl__rec_key(x->st, b, &kl);
	int len = (int)(name.len > 64 ? 64 : name.len);

	if (dl_check_name(name.p, name.len)) {
		dl_warn("redis: %s holds \"%.*s\", not a lock name; ignored",
			key, len, name.p);
	} else if (dl_store_bucket(name.p, name.len) != b) {
		dl_warn("redis: %s holds %.*s, whose bucket is %u: not written by dlockd; ignored",
			key, len, name.p,
			(unsigned)dl_store_bucket(name.p, name.len));
	} else {
		return 0;
	}
	x->ignored++;
	return 1;
}

/* Read bucket b's HGETALL and restore its records. */
static int read_bucket(struct load_ctx *x, uint32_t b)
{
	redisReply *v = NULL; /* hiredis leaves it untouched on failure */
	redisReply **e;
	size_t i, n;
	int rc = 0;

	if (redisGetReply(x->c, (void **)&v) != REDIS_OK || !v)
		return dl__load_err(x, DL_EUNAVAILABLE, "HGETALL: %s",
				    x->c->errstr);
	if (v->type == REDIS_REPLY_ERROR)
		rc = bucket_refused(x, b, v->str);
	else if (v->type != REDIS_REPLY_ARRAY || v->elements % 2)
		rc = dl__load_err(x, DL_EUNAVAILABLE,
				  "HGETALL: not a reply of field-value pairs");
	x->now_mono = dl_mono_ms(); /* R, for the records just read */
	x->now_wall = dl_wall_ms();
	x->bucket = b;
	e = v->element;
	n = rc ? 0 : v->elements;
	for (i = 0; i < n && !rc; i += 2) {
		/* fields and values alternate: a record is 2 elements */
		dl__load_prefetch(x, field_at(e, n, i + 2 * DL__LOAD_PREFETCH),
				  field_at(e, n, i + DL__LOAD_PREFETCH));
		if (e[i]->type != REDIS_REPLY_STRING ||
		    foreign_field(x, b, (struct dl_str){e[i]->str, e[i]->len}))
			continue;
		rc = dl__load_record(x, (struct dl_str){e[i]->str, e[i]->len},
				     e[i + 1]);
	}
	freeReplyObject(v);
	return rc;
}

/* Every bucket that has records, DL_STORE_LOAD_WINDOW HGETALLs in
 * flight; the window is let empty when the leadership is due for
 * renewal. */
static int load_buckets(struct load_ctx *x)
{
	uint32_t len[DL_STORE_BUCKETS], todo[DL_STORE_BUCKETS];
	uint32_t b, n = 0, sent = 0, got = 0;
	size_t total;
	int rc;

	if ((rc = count_records(x, len, &total)) != 0)
		return rc;
	for (b = 0; b < DL_STORE_BUCKETS; b++)
		if (len[b])
			todo[n++] = b;
	dl_locktab_reserve(x->st->tab, total);
	while (!rc && got < n) {
		if (sent == got)
			rc = dl__load_keep_lead(x);
		while (!rc && sent < n && sent - got < DL_STORE_LOAD_WINDOW &&
		       (sent == got || !dl__load_lead_due(x)))
			rc = send_hgetall(x, todo[sent++]);
		if (!rc)
			rc = read_bucket(x, todo[got++]);
	}
	/* Replies still in flight are dropped with the context. */
	return rc;
}

/* ---- the load ----------------------------------------------------------- */

/* Write back what changed while loading (waits that ended), through the
 * fenced write function. */
static int write_back(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	const struct dl_buf *b = &x->changed_names;
	const char **argv;
	const size_t *lens;
	struct dl_str name;
	redisReply *r;
	size_t i;
	int argc, rc = 0;

	if (b->len == 0)
		return 0;
	dl__wb_reset(&st->writes.wb);
	for (i = 0; i < b->len && !rc; i += name.len + 1) {
		name.p = b->p + i;
		name.len = strlen(name.p);
		rc = dl__wb_lock(st, name, dl_locktab_find(st->tab, name),
				 dl__store_wall_offset());
	}
	if (!rc)
		rc = dl__wb_argv(st, x->fence, &argc, &argv, &lens);
	if (!rc && (r = dl__load_run(x, &rc, 0, argc, argv, lens)) != NULL)
		freeReplyObject(r);
	dl__wb_reset(&st->writes.wb);
	return rc;
}

/* Hold the locks whose record could not be read (see the top comment). */
int dl__load_quarantine(struct load_ctx *x)
{
	const struct dl_buf *b = &x->bad_names;
	uint64_t ttl = x->st->cfg->max_ttl_ms;
	struct dl_str name;
	size_t i;
	int rc = 0;

	if (ttl > DL_TTL_STORE_MAX)
		ttl = DL_TTL_STORE_MAX;
	for (i = 0; i < b->len && !rc; i += name.len + 1) {
		name.p = b->p + i;
		name.len = strlen(name.p);
		rc = dl_locktab_quarantine(x->st->tab, name, (uint32_t)ttl,
					   dl_mono_ms() + ttl);
	}
	/* Not holding it would free a lock somebody may hold: the start
	 * fails, saying why (it used to fail with no message at all). */
	if (rc == DL_ELIMIT)
		return dl__load_err(
			x, DL_EBADARG,
			"cannot hold the lock %.*s, whose record is unreadable: no fencing token is left (a stored token is at the maximum, %llu); remove that record or the one with the largest token",
			(int)name.len, name.p, (unsigned long long)UINT64_MAX);
	if (rc)
		return dl__load_err(x, rc, "cannot hold the lock %.*s: %s",
				    (int)name.len, name.p, dl_strerror(rc));
	return 0;
}

/*
 * The clock floor of a start that cannot see the last mark. A Redis that
 * went back lost the token mark, and this daemon's own (seen.h) covers
 * only what it saw: another daemon may have issued tokens it never saw
 * (it was down, or the loss came before its next look) on a wall clock
 * ahead of this one's. Found by the fault campaign: a daemon whose clock
 * was a minute behind its peer's took over a flushed Redis after the peer
 * had granted on it, and resumed 10 s worth of tokens below the peer's.
 * So such a start goes max_clock_skew past its own clock: above anything
 * a daemon whose clock is no more than that ahead can have issued. The
 * same for a Redis with no mark at all (a new keyspace, or one emptied
 * where no state file saw it): the cost is a jump of the time part, which
 * has room for centuries (DL_TOKEN_PER_MS).
 */
static uint64_t skewed(const struct dl_store *st, uint64_t unix_ms)
{
	return unix_ms + st->cfg->max_clock_skew_ms;
}

/*
 * Where tokens resume: above the stored mark `redis_mark`, the records'
 * tokens, the mark this daemon saw or sent (the state file keeps it, and
 * has it before a token above it is told: a Redis that went back lost it)
 * and the clock's floor. A start that may follow a loss it cannot see the
 * size of -- Redis went back, holds no mark, or this daemon read no state
 * file and so could not notice one -- takes the floor max_clock_skew past
 * its clock (skewed: a peer's clock may have run that far ahead, and this
 * daemon's own tokens ran that far ahead of the clock since the keyspace
 * began), and when even that is not above the marks it knows, goes
 * DL_TOKEN_JUMP above them: the clock cannot lift it (set back, or tokens
 * that ran further ahead), and a minute of the token space is more than a
 * daemon tells in any window of writes Redis may lose. Found from
 * outside: a daemon started without a state file, on a keyspace whose
 * tokens ran max_clock_skew ahead of the clock, lost its last second of
 * writes (and the marks they raised) and, seeing no loss, resumed just
 * above the older mark: it told tokens it had told before.
 */
static void resume_tokens(struct load_ctx *x, uint64_t redis_mark,
			  uint64_t unix_ms)
{
	struct dl_store *st = x->st;
	const struct dl_seen *seen = &st->lead.seen;
	uint64_t stored = redis_mark, skew;
	/* no state_dir, or one that was used (a daemon wrote there) but has
	 * no file of this keyspace any more (removed, or one that could not
	 * be written and was): nothing outside Redis says what was told
	 * (found from outside: a state_dir whose file was gone resumed below
	 * a token told after an earlier loss). A directory never used is a
	 * node's first start: it saw nothing to lose. */
	int risky = x->behind || x->closed_ms > 0 || !redis_mark ||
		    !seen->dir[0] ||
		    (!seen->has_file && (seen->dir_used || seen->removed));

	if (x->max_token > stored)
		stored = x->max_token;
	if (seen->v.mark > stored)
		stored = seen->v.mark;
	skew = dl_token_floor(0, skewed(st, unix_ms));
	dl_locktab_raise_token(
		st->tab,
		dl_token_floor(stored, risky ? skewed(st, unix_ms) : unix_ms));
	if (risky && stored >= skew)
		dl_locktab_raise_token(st->tab,
				       stored > UINT64_MAX - DL_TOKEN_JUMP
					       ? UINT64_MAX
					       : stored + DL_TOKEN_JUMP);
}

/* The take is whole in Redis (its table written back, or grants closed
 * in P closed): P run names the Redis process it was made on, for the
 * standbys that reconnected to it (store_horizon.c, dl__hz_redis_run). A
 * failure leaves them unsure, which only closes longer. */
static void note_run(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	redisReply *r;
	char v[DL_HZ_RUN_TEXT];
	int rc = 0;

	if (!st->hz.run)
		return;
	dl__hz_run_value(st, v);
	if ((r = RUN(x, &rc, 0, "SET", st->keys.run, v)))
		freeReplyObject(r);
}

static int load(struct load_ctx *x, uint64_t unix_ms, int start)
{
	struct dl_store *st = x->st;
	uint64_t stored;
	char fence[24], why[400];
	int rc;

	x->fence = fence;
	st->writes.token_mark = 0; /* a new connection (store_batch.c) */
	if ((rc = connect_redis(x)) || (rc = dl__cluster_load_read(x)))
		return rc;
	/* with the state file bound: what a restart knew of Redis is there */
	dl__hz_redis_run(st, x->run, x->meddled);
	if ((start && (rc = dl__attest_restart(x))) ||
	    (rc = take_lead(x, start, fence, sizeof(fence))) ||
	    (rc = dl__cluster_load_claim(x)) || (rc = read_token(x, &stored)) ||
	    (rc = dl__part_load(x)))
		return rc;
	if (x->closed_ms > 0) {
		/* Redis went back (this take found it, or another daemon did
		 * and grants are still closed): a record it holds may be of a
		 * lease that ended since, and was granted to another owner
		 * whose lease Redis lost. Restored, its holder could be
		 * confirmed while the other still believes in its own. So
		 * nothing is loaded: every lock is busy until grants reopen
		 * (as long as any lease may last), clients that ask about a
		 * lease are told it is gone, and the first re-sync deletes
		 * the records (st->synced stays 0). */
		dl_warn("redis: its records are not loaded: grants are closed because Redis went back, and what it holds cannot be vouched for; the re-sync deletes them");
		resume_tokens(x, stored, unix_ms);
		snprintf(st->fence, sizeof(st->fence), "%s", fence);
		st->lead.leader.until_ms = dl__lead_until(st, x->lead_sent);
		note_run(x);
		return 0;
	}
	if ((rc = dl__layout1_find(x)))
		return rc;
	if ((rc = x->l1 ? dl__layout1_load(x) : load_buckets(x)) != 0)
		return rc;
	if (dl__plausible(st, x->max_token, 0, why, sizeof(why)))
		return dl__load_err(x, DL_EBADARG, "a record's token: %s", why);
	resume_tokens(x, stored, unix_ms);
	if ((rc = dl__load_quarantine(x)) || (rc = dl__load_keep_lead(x)) ||
	    (rc = x->l1 ? dl__layout1_migrate(x) : write_back(x)))
		return rc;
	/* The async link takes the leadership again with this epoch: kept,
	 * as nobody else can have written. */
	snprintf(st->fence, sizeof(st->fence), "%s", fence);
	st->lead.leader.until_ms = dl__lead_until(st, x->lead_sent);
	note_run(x);
	return 0;
}

int dl_store_load(struct dl_store *st, uint64_t unix_ms, int start, char *err,
		  size_t errlen)
{
	struct load_ctx x = {.st = st, .err = err, .errlen = errlen};
	uint64_t t0 = dl_mono_ms();
	int rc;

	dl_locktab_reset(st->tab);
	if (!st->redis) {
		/* above the clock, and the mark the state file kept */
		dl_locktab_raise_token(
			st->tab, dl_token_floor(st->lead.seen.v.mark, unix_ms));
		return 0;
	}
	rc = load(&x, unix_ms, start);
	if (start)
		dl__attest_reset(st); /* the take presented its proof, if any */
	redisFree(x.c);
	dl__layout1_free(&x);
	free(x.changed_names.p);
	free(x.bad_names.p);
	if (rc) {
		dl_locktab_reset(st->tab);
		return rc;
	}
	st->synced = x.closed_ms <= 0;
	st->lead.active = 1;
	dl__hz_role(st, 1);
	/* A restart of a cluster's node that can prove nothing of what was
	 * told before it: a standby may have seen Redis go back where this
	 * daemon cannot tell. It serves once they had time to say so (a
	 * report makes it load again, with grants closed: store.c). Found
	 * from outside: nodes a and b, no state dir; a and Redis killed,
	 * Redis restored from a copy, a restarted: a took its leadership
	 * back at once and granted bob a lock alice held, though b had seen
	 * the lost writes. */
	if (start && st->cfg->node_id[0] && x.closed_ms <= 0 &&
	    !dl__hz_file_proves(st))
		st->hz.report_until = dl_mono_ms() + DL_STANDBY_REPORT_MS;
	st->st.takeovers++;
	(void)dl_seen_save(&st->lead.seen, dl_mono_ms(), 1);
	dl_notice(
		"redis: this daemon is the active one (node %s at %s, epoch %llu, fence %s)",
		st->lead.node, st->lead.self_addr,
		(unsigned long long)st->lead.leader.epoch, st->fence);
	dl_notice(
		"loaded %zu leases and %zu waiters from redis in %llu ms (%zu waits ended while down, %zu unreadable records held, %zu foreign fields ignored); restored leases last their TTL from now; tokens resume after %llu",
		x.leases, x.waiters, (unsigned long long)(dl_mono_ms() - t0),
		x.dropped, x.unreadable, x.ignored,
		(unsigned long long)dl_locktab_last_token(st->tab));
	return 0;
}
