/*
 * store_load.c -- reading the lock table back from Redis at start-up.
 *
 * Runs before the daemon listens, with hiredis's blocking API: nothing
 * else needs the loop yet. The names come from the name set (one
 * SMEMBERS), the records from MGETs of DL_STORE_LOAD_BATCH keys, of which
 * DL_STORE_LOAD_WINDOW are kept in flight: Redis builds the next reply
 * while the daemon parses this one, so the load costs about the larger of
 * the two, not their sum. Leases whose wall-clock deadline passed while
 * the daemon was down are dropped (and their keys rewritten); waiters come
 * back as placeholders that keep their place for restore_grace. A record
 * that cannot be read stops the start: skipping it could grant a lock that
 * someone holds.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/log.h"
#include "server/store_private.h"

struct load_ctx {
	struct dl_store *st;
	struct dl_str name;
	uint64_t now_mono, now_wall;
	int changed; /* the current key lost items: write it back */
	size_t leases, waiters, dropped;
	uint64_t max_token;
};

static int load_item(const struct dl_record_item *it, void *arg)
{
	struct load_ctx *x = arg;
	struct dl_locktab *t = x->st->tab;
	uint64_t wait, grace = x->now_mono + x->st->cfg->restore_grace_ms;
	int r;

	if (it->ttl_ms == 0 || it->ttl_ms > DL_TTL_STORE_MAX)
		return DL_EPROTO;
	if (it->kind == 'H') {
		if (it->token > x->max_token)
			x->max_token = it->token;
		if (it->deadline <= x->now_wall) {
			x->changed = 1; /* expired while we were down */
			x->dropped++;
			return 0;
		}
		r = dl_locktab_restore_lease(
			t, x->name, it->owner, it->token, (uint32_t)it->count,
			(uint32_t)it->ttl_ms,
			x->now_mono + (it->deadline - x->now_wall), it->tag);
		x->leases += r == 0;
		return r == DL_EBADARG ? DL_EPROTO : r;
	}
	if (it->deadline != UINT64_MAX && it->deadline <= x->now_wall) {
		x->changed = 1;
		x->dropped++;
		return 0;
	}
	wait = it->deadline == UINT64_MAX
		       ? UINT64_MAX
		       : x->now_mono + (it->deadline - x->now_wall);
	r = dl_locktab_restore_waiter(t, x->name, it->owner,
				      (uint32_t)it->ttl_ms, wait, grace,
				      it->tag);
	x->waiters += r == 0;
	return r == DL_EBADARG ? DL_EPROTO : r;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* A reply is an error; LOADING (Redis reading its AOF) is transient. */
static int sync_check(redisReply *r, int *transient)
{
	*transient = r && r->type == REDIS_REPLY_ERROR &&
		     strncmp(r->str, "LOADING", 7) == 0;
	return !r || dl__store_reply_error(r) != NULL;
}

static redisContext *sync_connect(struct dl_store *st, char *err, size_t errlen)
{
	const struct dl_redis_addr *a = &st->addr;
	uint64_t t = st->cfg->redis_timeout_ms;
	struct timeval tv = {(time_t)(t / 1000),
			     (suseconds_t)(t % 1000) * 1000};
	uint64_t end = uv_hrtime() / 1000000 + DL_STORE_STARTUP_WAIT_MS;
	uint64_t backoff = DL_STORE_BACKOFF_MIN_MS;
	redisContext *c;
	redisReply *r;
	int transient, failed, logged = 0;

	for (;;) {
		c = a->path ? redisConnectUnixWithTimeout(a->path, tv)
			    : redisConnectWithTimeout(a->host, a->port, tv);
		transient = 1;
		if (c && !c->err) {
			redisSetTimeout(c, tv);
			r = a->password
				    ? redisCommand(c, "AUTH %s", a->password)
				    : NULL;
			failed = a->password && sync_check(r, &transient);
			if (!failed) {
				freeReplyObject(r);
				r = redisCommand(c, "SELECT %d", a->db);
				failed = sync_check(r, &transient);
			}
			if (!failed) {
				freeReplyObject(r);
				return c;
			}
			set_err(err, errlen, "%s", r ? r->str : c->errstr);
			freeReplyObject(r);
			if (!transient) {
				redisFree(c);
				return NULL; /* e.g. a wrong password */
			}
		} else {
			set_err(err, errlen, "%s",
				c ? c->errstr : "out of memory");
		}
		redisFree(c);
		if (uv_hrtime() / 1000000 + backoff > end)
			return NULL;
		if (!logged++)
			dl_warn("redis: %s; retrying for up to %d s", err,
				DL_STORE_STARTUP_WAIT_MS / 1000);
		uv_sleep((unsigned)backoff);
		backoff = backoff * 2 > DL_STORE_BACKOFF_MAX_MS
				  ? DL_STORE_BACKOFF_MAX_MS
				  : backoff * 2;
	}
}

static int emit_sync(void *sink, int argc, const char **argv,
		     const size_t *lens)
{
	return redisAppendCommandArgv(sink, argc, argv, lens) == REDIS_OK
		       ? 0
		       : DL_ENOMEM;
}

/* Write back the locks whose content changed while loading (an expired
 * lease dropped, a name without a record). */
static int sync_write_back(struct dl_store *st, redisContext *c,
			   const struct dl_buf *names, int64_t off, char *why,
			   size_t whylen)
{
	struct dl_str name;
	redisReply *r;
	size_t i, n = 0;
	int k;

	for (i = 0; i < names->len; i += name.len + 1) {
		name.p = names->p + i;
		name.len = strlen(name.p);
		k = dl__store_lock_cmds(st, name,
					dl_locktab_find(st->tab, name), off, 0,
					emit_sync, c);
		if (k < 0)
			return k;
		n += (size_t)k;
	}
	why[0] = '\0';
	while (n--) {
		r = NULL;
		if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
			snprintf(why, whylen, "%s", c->errstr);
			return DL_EUNAVAILABLE;
		}
		if (!why[0] && dl__store_reply_error(r))
			snprintf(why, whylen, "%s", dl__store_reply_error(r));
		freeReplyObject(r);
	}
	return why[0] ? DL_EUNAVAILABLE : 0;
}

static int note_changed(struct dl_buf *changed, struct dl_str name)
{
	if (dl_buf_add(changed, name.p, name.len) || dl_buf_add(changed, "", 1))
		return DL_ENOMEM;
	return 0;
}

/* Restore one lock from its record. */
static int load_key(struct load_ctx *x, struct dl_str name,
		    const redisReply *val, struct dl_buf *changed, char *err,
		    size_t errlen)
{
	const struct dl_lock *lk;
	const char *why = NULL;
	int r;

	if (val->type != REDIS_REPLY_STRING) /* a name without a record */
		return note_changed(changed, name);
	/* Set members are unique: no lock of this name exists yet. */
	x->name = name;
	x->changed = 0;
	r = dl_record_parse(val->str, val->len, load_item, x, &why);
	if (r) {
		set_err(err, errlen, "key %s%.*s: %s", x->st->key.p,
			(int)name.len, name.p, why ? why : dl_strerror(r));
		return r;
	}
	/* Its name is in the set: no SADD needed when it is next written.
	 * `stored` is the store's bit (locktab.h). */
	if ((lk = dl_locktab_find(x->st->tab, name)) != NULL)
		((struct dl_lock *)lk)->stored = 1;
	return x->changed ? note_changed(changed, name) : 0;
}

/* MGET the records of names[from, from + n) (queued, not read). */
static int send_mget(struct dl_store *st, redisContext *c,
		     const redisReply *names, size_t from, size_t n,
		     struct dl_buf *keys, const char **argv, size_t *lens)
{
	size_t i, off;

	keys->len = 0;
	for (i = 0; i < n; i++) {
		if (dl_buf_add(keys, st->key.p, st->lock_prefix_len) ||
		    dl_buf_add(keys, names->element[from + i]->str,
			       names->element[from + i]->len))
			return DL_ENOMEM;
	}
	argv[0] = "MGET";
	lens[0] = 4;
	for (i = 0, off = 0; i < n; i++) {
		lens[i + 1] =
			st->lock_prefix_len + names->element[from + i]->len;
		argv[i + 1] = keys->p + off;
		off += lens[i + 1];
	}
	return redisAppendCommandArgv(c, (int)n + 1, argv, lens) == REDIS_OK
		       ? 0
		       : DL_ENOMEM;
}

static int load_all(struct dl_store *st, redisContext *c, struct load_ctx *x,
		    struct dl_buf *changed, char *err, size_t errlen)
{
	const size_t B = DL_STORE_LOAD_BATCH;
	const char **argv = malloc((B + 1) * sizeof(*argv));
	size_t *lens = malloc((B + 1) * sizeof(*lens));
	struct dl_buf keys = {0};
	redisReply *names, *v;
	size_t n, batches, sent = 0, got = 0, i, from, k;
	int rc = 0;

	names = redisCommand(c, "SMEMBERS %s", st->names_key);
	if (!argv || !lens || !names || names->type != REDIS_REPLY_ARRAY) {
		set_err(err, errlen, "SMEMBERS %s failed: %s", st->names_key,
			names && names->type == REDIS_REPLY_ERROR ? names->str
								  : c->errstr);
		rc = argv && lens ? DL_EUNAVAILABLE : DL_ENOMEM;
		goto out;
	}
	n = names->elements;
	dl_locktab_reserve(st->tab, n);
	for (i = 0; i < n; i++)
		if (names->element[i]->type != REDIS_REPLY_STRING) {
			set_err(err, errlen, "%s: not a set of names",
				st->names_key);
			rc = DL_EPROTO;
			goto out;
		}
	batches = (n + B - 1) / B;
	while (!rc && got < batches) {
		/* Keep DL_STORE_LOAD_WINDOW MGETs ahead of the parsing. */
		while (sent < batches && sent - got < DL_STORE_LOAD_WINDOW) {
			from = sent * B;
			rc = send_mget(st, c, names, from,
				       n - from < B ? n - from : B, &keys, argv,
				       lens);
			if (rc)
				goto out;
			sent++;
		}
		from = got * B;
		k = n - from < B ? n - from : B;
		/* hiredis leaves v untouched when it fails: reset it. */
		v = NULL;
		if (redisGetReply(c, (void **)&v) != REDIS_OK || !v ||
		    v->type != REDIS_REPLY_ARRAY || v->elements != k) {
			set_err(err, errlen, "MGET failed: %s",
				v && v->type == REDIS_REPLY_ERROR ? v->str
								  : c->errstr);
			if (v)
				freeReplyObject(v);
			rc = DL_EUNAVAILABLE;
			goto out;
		}
		for (i = 0; i < k && !rc; i++)
			rc = load_key(
				x,
				(struct dl_str){names->element[from + i]->str,
						names->element[from + i]->len},
				v->element[i], changed, err, errlen);
		freeReplyObject(v);
		got++;
	}
out:
	/* Replies still in flight are dropped with the context. */
	if (names)
		freeReplyObject(names);
	free(keys.p);
	free(argv);
	free(lens);
	return rc;
}

int dl_store_load(struct dl_store *st, uint64_t unix_ms, char *err,
		  size_t errlen)
{
	struct load_ctx x = {.st = st};
	struct dl_buf changed = {0};
	uint64_t stored = 0, t0;
	redisContext *c;
	redisReply *r;
	char why[128];
	int rc;

	if (!st->redis) {
		dl_locktab_raise_token(st->tab, dl_token_floor(0, unix_ms));
		return 0;
	}
	uv_update_time(st->loop);
	t0 = uv_now(st->loop);
	if (!(c = sync_connect(st, err, errlen)))
		return DL_EUNAVAILABLE;
	r = redisCommand(c, "GET %s", st->token_key);
	if (!r || (r->type != REDIS_REPLY_NIL &&
		   (r->type != REDIS_REPLY_STRING ||
		    dl_parse_u64(r->str, r->len, &stored)))) {
		set_err(err, errlen, "%s: not a token", st->token_key);
		freeReplyObject(r);
		redisFree(c);
		return DL_EPROTO;
	}
	freeReplyObject(r);
	x.now_mono = uv_now(st->loop);
	x.now_wall = dl__store_wall_ms();
	rc = load_all(st, c, &x, &changed, err, errlen);
	if (!rc && sync_write_back(st, c, &changed,
				   (int64_t)x.now_wall - (int64_t)x.now_mono,
				   why, sizeof(why))) {
		set_err(err, errlen, "cannot write back expired leases: %s",
			why);
		rc = DL_EUNAVAILABLE;
	}
	free(changed.p);
	redisFree(c);
	if (rc)
		return rc;
	dl_locktab_raise_token(
		st->tab,
		dl_token_floor(stored > x.max_token ? stored : x.max_token,
			       unix_ms));
	st->synced = 1;
	uv_update_time(st->loop);
	dl_notice("loaded %zu leases and %zu waiters from redis in %llu ms "
		  "(%zu expired while down); tokens resume after %llu",
		  x.leases, x.waiters,
		  (unsigned long long)(uv_now(st->loop) - t0), x.dropped,
		  (unsigned long long)dl_locktab_last_token(st->tab));
	return 0;
}
