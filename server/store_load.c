/* SPDX-License-Identifier: MIT */
/*
 * store_load.c -- reading the lock table back from Redis at start-up.
 *
 * Runs before the daemon listens, with hiredis's blocking API: nothing
 * else needs the loop yet. One call is one attempt; the caller retries
 * (server.c) while Redis is unreachable or not ready, and every attempt
 * starts from an empty table, so a load cut short leaves nothing behind.
 *
 * Steps: connect, AUTH, SELECT, FUNCTION LOAD (the write function,
 * store_batch.c), INCR of the writer fence, GET of the token high-water
 * mark, the names (SMEMBERS of the name set; a SCAN of the record keys if
 * that key is not a set), then the records by MGETs of DL_STORE_LOAD_BATCH
 * keys, DL_STORE_LOAD_WINDOW in flight so that Redis builds the next reply
 * while the daemon parses one.
 *
 * The restore rule (DESIGN.md section 5). A restored lease lasts until
 * R + its TTL, R being the moment its record is read. Its holder counted
 * its lease from a request it sent before the daemon stopped, so before
 * R: the lease never ends sooner than the holder may believe, however long
 * the daemon was down or waited for Redis, and whatever the wall clock did
 * meanwhile (the stored deadline, wall-clock time, is not used). The cost:
 * a lock whose holder died stays busy up to one TTL after a restart.
 * Waiters come back as placeholders that keep their place for
 * restore_grace from R; a waiter whose stored wait deadline has passed is
 * dropped (that only decides when a wait ends, never who holds a lock).
 *
 * Not ready is not broken. LOADING, BUSY, READONLY, MASTERDOWN (and a
 * connection that fails or times out) make the attempt fail as
 * DL_EUNAVAILABLE, to be retried; only what an operator must fix (a wrong
 * password, a missing database, a Redis without functions) is fatal. A
 * record that cannot be read does not stop the start and does not free
 * its lock: the lock is held by DL_QUARANTINE_OWNER for max_ttl (no lease
 * can have been granted for longer), logged with its key and content.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/clock.h"
#include "server/log.h"
#include "server/store_private.h"

/* Bytes of an unreadable record shown in the log. */
#define SHOW_MAX 160

/* How many names ahead of the restore the lock table's buckets are
 * prefetched (read_mget). */
#define LOAD_PREFETCH 16

struct load_ctx {
	struct dl_store *st;
	redisContext *c;
	struct dl_str name;
	uint64_t now_mono, now_wall;
	int changed; /* the current lock lost items: write it back */
	int holders;	    /* check pass: H lines seen ... */
	int holders_shared; /* ... and their mode */
	size_t leases, waiters, dropped, unreadable;
	uint64_t max_token;
	struct dl_buf changed_names; /* NUL-separated */
	struct dl_buf bad_names;     /* NUL-separated: to quarantine */
	char *err;
	size_t errlen;
	const char *fence; /* the epoch taken */
	uint64_t lead_sent; /* when the leadership was last confirmed */
};

static int set_err(struct load_ctx *x, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int set_err(struct load_ctx *x, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(x->err, x->errlen, fmt, ap);
	va_end(ap);
	return rc;
}

static int add_name(struct dl_buf *b, struct dl_str name)
{
	if (dl_buf_add(b, name.p, name.len) || dl_buf_add(b, "", 1))
		return DL_ENOMEM;
	return 0;
}

/* ---- commands -------------------------------------------------------------
 */

/* Run a command; NULL with x->err set when there is no usable reply.
 * `fatal_errors`: an error reply that is not "not ready" is a
 * configuration problem, not a transient one (*rc tells). */
static redisReply *run(struct load_ctx *x, int *rc, int fatal_errors, int argc,
		       const char **argv, const size_t *lens)
{
	redisReply *r = redisCommandArgv(x->c, argc, argv, lens);
	const char *e;

	if (!r) {
		*rc = set_err(x, DL_EUNAVAILABLE, "%s: %s", argv[0],
			      x->c->errstr[0] ? x->c->errstr : "no reply");
		return NULL;
	}
	if ((e = dl__store_reply_error(r)) != NULL) {
		*rc = set_err(x,
			      fatal_errors && !dl__store_not_ready(e)
				      ? DL_EBADARG
				      : DL_EUNAVAILABLE,
			      "%s: %s", argv[0], e);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

#define RUN(x, rc, fatal, ...)                                                 \
	run_v((x), (rc), (fatal), (const char *[]){__VA_ARGS__, NULL})

/* run() with NUL-terminated string arguments. */
static redisReply *run_v(struct load_ctx *x, int *rc, int fatal_errors,
			 const char **argv)
{
	size_t lens[8];
	int n;

	for (n = 0; argv[n]; n++)
		lens[n] = strlen(argv[n]);
	return run(x, rc, fatal_errors, n, argv, lens);
}

/* What an acknowledged grant survives (store_durable.c): without AOF,
 * and without allow_nondurable_redis, the start ends here (a
 * configuration error an operator must fix, not a wait). */
static int check_durable(struct load_ctx *x)
{
	redisReply *info, *fsync;
	char why[200];
	int rc = 0, d;

	if (!(info = RUN(x, &rc, 0, "INFO", "persistence")))
		return rc;
	/* CONFIG may be renamed away: an error is an unknown policy */
	fsync = redisCommand(x->c, "CONFIG GET appendfsync");
	if (!fsync && x->c->err) {
		freeReplyObject(info);
		return set_err(x, DL_EUNAVAILABLE, "CONFIG GET: %s",
			       x->c->errstr);
	}
	d = dl__durability_of(info->type == REDIS_REPLY_STRING ? info->str
							       : NULL,
			      fsync);
	freeReplyObject(info);
	freeReplyObject(fsync);
	if ((rc = dl__durability_check(x->st, d, why, sizeof(why))) != 0)
		return set_err(x, rc, "%s", why);
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

	if (!a->path &&
	    dl__find_primary_sync(x->st, host, sizeof(host), &port, x->err,
				  x->errlen) != 0)
		return DL_EUNAVAILABLE;
	x->c = a->path ? redisConnectUnixWithTimeout(a->path, tv)
		       : redisConnectWithTimeout(host, port, tv);
	if (!x->c || x->c->err)
		return set_err(x, DL_EUNAVAILABLE, "%s",
			       x->c ? x->c->errstr : "out of memory");
	redisSetTimeout(x->c, tv);
	if (a->password) {
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
		return set_err(x, DL_EUNAVAILABLE,
			       "%s:%d is not a primary (a replica?)",
			       a->path ? a->path : host, a->path ? 0 : port);
	}
	freeReplyObject(r);
	if ((rc = check_durable(x)) != 0)
		return rc;
	if (!(r = RUN(x, &rc, 0, "CLIENT", "SETNAME", x->st->client_name)))
		return rc;
	freeReplyObject(r);
	if (!(r = RUN(x, &rc, 1, "FUNCTION", "LOAD", "REPLACE",
		      dl__store_library))) {
		if (rc == DL_EBADARG && strstr(x->err, "unknown command"))
			set_err(x, rc,
				"Redis has no FUNCTION command: dlockd needs Redis 7.0 or later");
		return rc;
	}
	freeReplyObject(r);
	return 0;
}

/* The leadership (store_lead.c): taken, this daemon is the writer and
 * the epoch is its fence; held by another, the load stops there. */
static int take_lead(struct load_ctx *x, int start, char *fence, size_t len)
{
	struct dl_store *st = x->st;
	const char *argv[LEAD_ARGC];
	size_t lens[LEAD_ARGC];
	struct lead_reply lr;
	uint64_t sent = dl_mono_ms();
	redisReply *r;
	char who[320];
	int argc, rc = 0;

	argc = dl__lead_argv(st, start ? LEAD_START : LEAD_TAKE, NULL, argv,
			     lens);
	if (!(r = run(x, &rc, 0, argc, argv, lens)))
		return rc;
	rc = dl__lead_reply(st, r, sent, &lr);
	freeReplyObject(r);
	if (rc)
		return set_err(x, DL_EUNAVAILABLE,
			       "%s: not a reply of the leadership function",
			       st->leader_key);
	if (!lr.ok) {
		dl__lead_describe(st, who, sizeof(who));
		return set_err(x, DL_ENOTACTIVE,
			       "another dlockd is active on this Redis and prefix: %s",
			       who);
	}
	snprintf(fence, len, "%llu", (unsigned long long)lr.epoch);
	if (lr.epoch == 1) /* kept over retries, until persist_all() */
		st->upgrade = 1;
	x->lead_sent = sent;
	return 0;
}

/* A big load can outlast a third of the leadership lease: renew it on
 * the way, as the active does (a standby would take over otherwise). */
static int keep_lead(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	const char *argv[LEAD_ARGC];
	size_t lens[LEAD_ARGC];
	struct lead_reply lr;
	uint64_t sent = dl_mono_ms();
	redisReply *r;
	int argc, rc = 0;

	if (sent - x->lead_sent < st->cfg->leader_lease_ms / 3)
		return 0;
	argc = dl__lead_argv(st, LEAD_RENEW, x->fence, argv, lens);
	if (!(r = run(x, &rc, 0, argc, argv, lens)))
		return rc;
	rc = dl__lead_reply(st, r, sent, &lr);
	freeReplyObject(r);
	if (rc || !lr.ok)
		return set_err(x, rc ? DL_EUNAVAILABLE : DL_ENOTACTIVE,
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
	if (!(r = RUN(x, &rc, 0, "GET", x->st->token_key))) {
		if (rc != DL_EUNAVAILABLE || !strstr(x->err, "WRONGTYPE"))
			return rc;
		dl_error(
			"redis: %s is not a string; ignoring it (tokens resume above the clock and the records)",
			x->st->token_key);
		return 0;
	}
	if (r->type == REDIS_REPLY_STRING &&
	    dl_parse_u64(r->str, r->len, stored) != 0)
		dl_error("redis: %s holds \"%.*s\", not a token; ignoring it",
			 x->st->token_key, (int)(r->len > 40 ? 40 : r->len),
			 r->str);
	freeReplyObject(r);
	return 0;
}

/* ---- records --------------------------------------------------------------
 */

/* First pass over a record: everything restore would refuse. */
static int check_item(const struct dl_record_item *it, void *arg)
{
	struct load_ctx *x = arg;

	if (it->ttl_ms == 0 || it->ttl_ms > DL_TTL_STORE_MAX)
		return DL_EPROTO;
	if (it->kind != 'H')
		return 0;
	if (it->count == 0 || it->count > DL_REENTRY_MAX || it->token == 0)
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

/* Second pass: restore each item. */
static int load_item(const struct dl_record_item *it, void *arg)
{
	struct load_ctx *x = arg;
	struct dl_locktab *t = x->st->tab;
	uint64_t wait, grace = x->now_mono + x->st->cfg->restore_grace_ms;
	int r;

	if (it->kind == 'H') {
		if (it->token > x->max_token)
			x->max_token = it->token;
		r = dl_locktab_restore_lease(t, x->name, it->owner, it->token,
					     (uint32_t)it->count,
					     (uint32_t)it->ttl_ms,
					     restored_deadline(x, it), it->tag,
					     it->shared, it->limit);
		x->leases += r == 0;
		return r;
	}
	if (it->deadline != UINT64_MAX && it->deadline <= x->now_wall) {
		x->changed = 1; /* its wait ended while we were down */
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
	return r;
}

/* A record that cannot be read: log it whole enough to debug, and hold
 * its lock (after the load, once tokens are raised). */
static int unreadable(struct load_ctx *x, struct dl_str name, const char *text,
		      size_t len, const char *why)
{
	char show[SHOW_MAX + 1];
	size_t i, n = len < SHOW_MAX ? len : SHOW_MAX;

	for (i = 0; i < n; i++)
		show[i] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '.';
	show[n] = '\0';
	dl_error(
		"redis: %s%.*s: record unreadable (%s): \"%s\"%s; the lock stays held for max_ttl (%llu ms), never freed by this",
		x->st->lock_prefix, (int)name.len, name.p, why, show,
		len > n ? "..." : "",
		(unsigned long long)x->st->cfg->max_ttl_ms);
	x->unreadable++;
	return add_name(&x->bad_names, name);
}

/* MGET gives nil for a missing key and for one that is not a string. */
static int load_missing(struct load_ctx *x, struct dl_str name)
{
	const char *argv[2] = {"TYPE", x->st->val.p};
	size_t lens[2] = {4, 0};
	redisReply *r;
	int rc = 0, none;

	x->st->val.len = 0;
	if (dl_buf_add(&x->st->val, x->st->lock_prefix,
		       x->st->lock_prefix_len) ||
	    dl_buf_add(&x->st->val, name.p, name.len) ||
	    dl_buf_add(&x->st->val, "", 1))
		return DL_ENOMEM;
	argv[1] = x->st->val.p;
	lens[1] = x->st->val.len - 1;
	if (!(r = run(x, &rc, 0, 2, argv, lens)))
		return rc;
	none = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "none") == 0;
	freeReplyObject(r);
	if (none) /* a name without a record: drop the name */
		return add_name(&x->changed_names, name);
	return unreadable(x, name, "", 0, "not a string");
}

static int load_key(struct load_ctx *x, struct dl_str name,
		    const redisReply *val)
{
	const char *why = NULL;
	int r;

	if (dl_check_name(name.p, name.len)) {
		dl_warn("redis: %s holds \"%.*s\", not a lock name; ignored",
			x->st->names_key, (int)(name.len > 64 ? 64 : name.len),
			name.p);
		return 0;
	}
	if (val->type != REDIS_REPLY_STRING)
		return load_missing(x, name);
	x->name = name;
	x->changed = 0;
	x->holders = 0;
	r = dl_record_parse(val->str, val->len, check_item, x, &why);
	if (r == DL_EPROTO)
		return unreadable(x, name, val->str, val->len,
				  why ? why : "a value out of range");
	if (r == 0)
		r = dl_record_parse(val->str, val->len, load_item, x, &why);
	if (r)
		return set_err(x, r, "restoring %.*s: %s", (int)name.len,
			       name.p, dl_strerror(r));
	if (x->changed)
		return add_name(&x->changed_names, name);
	return 0;
}

/* ---- names and records ----------------------------------------------------
 */

/* The names of the stored locks. */
struct names {
	struct dl_str *v;
	size_t n, cap;
	redisReply *reply;  /* SMEMBERS: v points into it */
	struct dl_buf text; /* SCAN: the names, NUL-separated */
};

static void names_free(struct names *nm)
{
	free(nm->v);
	free(nm->text.p);
	if (nm->reply)
		freeReplyObject(nm->reply);
}

static int names_add(struct names *nm, const char *p, size_t len)
{
	struct dl_str *v;
	size_t cap;

	if (nm->n == nm->cap) {
		cap = nm->cap ? nm->cap * 2 : 1024;
		if (!(v = realloc(nm->v, cap * sizeof(*v))))
			return DL_ENOMEM;
		nm->v = v;
		nm->cap = cap;
	}
	nm->v[nm->n++] = (struct dl_str){p, len};
	return 0;
}

/* MGET the records of names[from, from + n) (queued, not read). */
static int send_mget(struct load_ctx *x, const struct names *nm, size_t from,
		     size_t n, struct dl_buf *keys, const char **argv,
		     size_t *lens)
{
	struct dl_store *st = x->st;
	size_t i, off;

	keys->len = 0;
	for (i = 0; i < n; i++) {
		if (dl_buf_add(keys, st->lock_prefix, st->lock_prefix_len) ||
		    dl_buf_add(keys, nm->v[from + i].p, nm->v[from + i].len))
			return DL_ENOMEM;
	}
	argv[0] = "MGET";
	lens[0] = 4;
	for (i = 0, off = 0; i < n; i++) {
		lens[i + 1] = st->lock_prefix_len + nm->v[from + i].len;
		argv[i + 1] = keys->p + off;
		off += lens[i + 1];
	}
	return redisAppendCommandArgv(x->c, (int)n + 1, argv, lens) == REDIS_OK
		       ? 0
		       : DL_ENOMEM;
}

/* Read one MGET reply and restore its k records. */
static int read_mget(struct load_ctx *x, const struct names *nm, size_t from,
		     size_t k)
{
	redisReply *v = NULL; /* hiredis leaves it untouched on failure */
	size_t i;
	int rc = 0;

	if (redisGetReply(x->c, (void **)&v) != REDIS_OK || !v ||
	    v->type != REDIS_REPLY_ARRAY || v->elements != k) {
		rc = set_err(x, DL_EUNAVAILABLE, "MGET: %s",
			     v && v->type == REDIS_REPLY_ERROR ? v->str
							       : x->c->errstr);
		if (v)
			freeReplyObject(v);
		return rc;
	}
	x->now_mono = dl_mono_ms(); /* R, for the records just read */
	x->now_wall = dl_wall_ms();
	for (i = 0; i < k && !rc; i++) {
		/* Two cache misses per new lock, overlapped (locktab.h). */
		if (i + LOAD_PREFETCH < k)
			dl_locktab_prefetch(x->st->tab,
					    nm->v[from + i + LOAD_PREFETCH], 0);
		if (i + LOAD_PREFETCH / 2 < k)
			dl_locktab_prefetch(
				x->st->tab, nm->v[from + i + LOAD_PREFETCH / 2],
				1);
		rc = load_key(x, nm->v[from + i], v->element[i]);
	}
	freeReplyObject(v);
	return rc;
}

static int load_records(struct load_ctx *x, const struct names *nm)
{
	const size_t B = DL_STORE_LOAD_BATCH, n = nm->n;
	const char **argv = malloc((B + 1) * sizeof(*argv));
	size_t *lens = malloc((B + 1) * sizeof(*lens));
	struct dl_buf keys = {0};
	size_t batches = (n + B - 1) / B, sent = 0, got = 0, from;
	int rc = argv && lens ? 0 : DL_ENOMEM;

	dl_locktab_reserve(x->st->tab, n);
	while (!rc && got < batches) {
		/* Nothing in flight: the leadership's turn, if due. */
		if (sent == got)
			rc = keep_lead(x);
		/* Keep DL_STORE_LOAD_WINDOW MGETs ahead of the parsing. */
		while (!rc && sent < batches &&
		       sent - got < DL_STORE_LOAD_WINDOW) {
			from = sent * B;
			rc = send_mget(x, nm, from, n - from < B ? n - from : B,
				       &keys, argv, lens);
			sent++;
		}
		from = got * B;
		if (!rc)
			rc = read_mget(x, nm, from,
				       n - from < B ? n - from : B);
		got++;
	}
	/* Replies still in flight are dropped with the context. */
	free(keys.p);
	free(argv);
	free(lens);
	return rc;
}

/* One SCAN page: add the names of the record keys it found. */
static int scan_page(struct load_ctx *x, struct names *nm, char *cursor,
		     const char *match)
{
	size_t plen = x->st->lock_prefix_len, i;
	redisReply *r, *keys;
	int rc = 0;

	if (!(r = RUN(x, &rc, 0, "SCAN", cursor, "MATCH", match, "COUNT",
		      "1000")))
		return rc;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		return set_err(x, DL_EUNAVAILABLE, "SCAN: unexpected reply");
	}
	snprintf(cursor, 24, "%s", r->element[0]->str);
	keys = r->element[1];
	for (i = 0; i < keys->elements && !rc; i++) {
		if (keys->element[i]->type != REDIS_REPLY_STRING ||
		    keys->element[i]->len <= plen)
			continue;
		rc = add_name(&nm->text,
			      (struct dl_str){keys->element[i]->str + plen,
					      keys->element[i]->len - plen});
	}
	freeReplyObject(r);
	return rc;
}

/* The record keys, by SCAN, when the name set is damaged. */
static int scan_names(struct load_ctx *x, struct names *nm)
{
	char cursor[24] = "0", *match;
	size_t i;
	int rc = 0;

	if (!(match = malloc(x->st->lock_prefix_len + 2)))
		return DL_ENOMEM;
	memcpy(match, x->st->lock_prefix, x->st->lock_prefix_len);
	memcpy(match + x->st->lock_prefix_len, "*", 2);
	do
		rc = scan_page(x, nm, cursor, match);
	while (!rc && strcmp(cursor, "0") != 0);
	free(match);
	for (i = 0; i < nm->text.len && !rc; i += strlen(nm->text.p + i) + 1)
		rc = names_add(nm, nm->text.p + i, strlen(nm->text.p + i));
	return rc;
}

/* The names of every stored lock: SMEMBERS of the name set, or, if that
 * key is not a set (damaged by hand), a SCAN of the record keys. */
static int read_names(struct load_ctx *x, struct names *nm)
{
	redisReply *r;
	size_t i;
	int rc = 0;

	if (!(r = RUN(x, &rc, 0, "SMEMBERS", x->st->names_key))) {
		if (!strstr(x->err, "WRONGTYPE"))
			return rc;
		dl_error(
			"redis: %s is not a set; finding the records with SCAN",
			x->st->names_key);
		return scan_names(x, nm);
	}
	nm->reply = r;
	for (i = 0; i < r->elements && !rc; i++)
		if (r->element[i]->type == REDIS_REPLY_STRING)
			rc = names_add(nm, r->element[i]->str,
				       r->element[i]->len);
	return rc;
}

/* Records written by dlockd 0.1 carry a Redis expiry (deadline + 60 s):
 * a lease restored for its TTL from now could outlive its key. The first
 * start with fenced writes (the fence did not exist) removes them. */
static int persist_all(struct load_ctx *x, const struct names *nm)
{
	struct dl_store *st = x->st;
	const char *argv[2] = {"PERSIST", NULL};
	size_t lens[2] = {7, 0}, i, n;
	redisReply *r;
	int rc = 0;

	for (i = 0; i < nm->n; i += n) {
		for (n = 0; n < DL_STORE_LOAD_BATCH && i + n < nm->n; n++) {
			st->val.len = 0;
			if (dl_buf_add(&st->val, st->lock_prefix,
				       st->lock_prefix_len) ||
			    dl_buf_add(&st->val, nm->v[i + n].p,
				       nm->v[i + n].len))
				return DL_ENOMEM;
			argv[1] = st->val.p;
			lens[1] = st->val.len;
			if (redisAppendCommandArgv(x->c, 2, argv, lens) !=
			    REDIS_OK)
				return DL_ENOMEM;
		}
		while (n-- > 0 && !rc) {
			r = NULL;
			if (redisGetReply(x->c, (void **)&r) != REDIS_OK || !r)
				rc = set_err(x, DL_EUNAVAILABLE, "PERSIST: %s",
					     x->c->errstr);
			if (r)
				freeReplyObject(r);
		}
		if (rc)
			return rc;
	}
	if (nm->n)
		dl_notice(
			"redis: first start with fenced writes: expiries removed from %zu records",
			nm->n);
	st->upgrade = 0;
	return 0;
}

/* ---- the load ------------------------------------------------------------
 */

/* Write back what changed while loading (waits that ended, names without
 * a record), through the fenced write function. */
static int write_back(struct load_ctx *x, const char *fence)
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
	dl__wb_reset(&st->wb);
	for (i = 0; i < b->len && !rc; i += name.len + 1) {
		name.p = b->p + i;
		name.len = strlen(name.p);
		rc = dl__wb_lock(st, name, dl_locktab_find(st->tab, name), 0,
				 dl__store_wall_offset());
	}
	if (!rc)
		rc = dl__wb_argv(st, fence, &argc, &argv, &lens);
	if (!rc && (r = run(x, &rc, 0, argc, argv, lens)) != NULL)
		freeReplyObject(r);
	dl__wb_reset(&st->wb);
	return rc;
}

/* Hold the locks whose record could not be read (see the top comment). */
static int quarantine(struct load_ctx *x)
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
	return rc;
}

static int load(struct load_ctx *x, uint64_t unix_ms, int start)
{
	struct dl_store *st = x->st;
	struct names nm = {0};
	uint64_t stored;
	char fence[24];
	int rc;

	x->fence = fence;
	if ((rc = connect_redis(x)) ||
	    (rc = take_lead(x, start, fence, sizeof(fence))) ||
	    (rc = read_token(x, &stored)) || (rc = read_names(x, &nm)) ||
	    (rc = load_records(x, &nm)) ||
	    (st->upgrade && (rc = persist_all(x, &nm)))) {
		names_free(&nm);
		return rc;
	}
	names_free(&nm);
	dl_locktab_raise_token(
		st->tab,
		dl_token_floor(stored > x->max_token ? stored : x->max_token,
			       unix_ms));
	if ((rc = quarantine(x)) || (rc = keep_lead(x)) ||
	    (rc = write_back(x, fence)))
		return rc;
	/* The async link takes the leadership again with this epoch: kept,
	 * as nobody else can have written. */
	snprintf(st->fence, sizeof(st->fence), "%s", fence);
	st->leader.until_ms = dl__lead_until(st, x->lead_sent);
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
		dl_locktab_raise_token(st->tab, dl_token_floor(0, unix_ms));
		return 0;
	}
	rc = load(&x, unix_ms, start);
	redisFree(x.c);
	free(x.changed_names.p);
	free(x.bad_names.p);
	if (rc) {
		dl_locktab_reset(st->tab);
		return rc;
	}
	st->synced = 1;
	st->active = 1;
	st->st.takeovers++;
	dl_notice("redis: this daemon is the active one (node %s at %s, epoch %s)",
		  st->node, st->self_addr, st->fence);
	dl_notice(
		"loaded %zu leases and %zu waiters from redis in %llu ms (%zu waits ended while down, %zu unreadable records held); restored leases last their TTL from now; tokens resume after %llu",
		x.leases, x.waiters, (unsigned long long)(dl_mono_ms() - t0),
		x.dropped, x.unreadable,
		(unsigned long long)dl_locktab_last_token(st->tab));
	return 0;
}
