/*
 * store_load.c -- reading the lock table back from Redis at start-up.
 *
 * Runs before the daemon listens, with hiredis's blocking API: nothing
 * else needs the loop yet, and a plain loop of SCAN + MGET is the fastest
 * way to read a million keys. Leases whose wall-clock deadline passed while
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
	int changed;      /* the current key lost items: write it back */
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

static redisContext *sync_connect(struct dl_store *st, char *err,
				  size_t errlen)
{
	const struct dl_redis_addr *a = &st->addr;
	uint64_t t = st->cfg->redis_timeout_ms;
	struct timeval tv = { (time_t)(t / 1000), (suseconds_t)(t % 1000) * 1000 };
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
			r = a->password ? redisCommand(c, "AUTH %s",
						       a->password)
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
			set_err(err, errlen, "%s",
				r ? r->str : c->errstr);
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

/* Write back the keys whose content changed while loading. */
static int sync_write_back(struct dl_store *st, redisContext *c,
			   const struct dl_buf *names, int64_t off)
{
	const char *argv[5];
	size_t lens[5], i, n = 0;
	struct dl_str name;
	char px[24];
	redisReply *r;
	int argc, bad = 0;

	for (i = 0; i < names->len; i += name.len + 1) {
		name.p = names->p + i;
		name.len = strlen(name.p);
		argc = dl__store_lock_cmd(st, name, dl_locktab_find(st->tab, name), off,
				argv, lens, px);
		if (argc < 0 || redisAppendCommandArgv(c, argc, argv, lens))
			return DL_ENOMEM;
		n++;
	}
	while (n--) {
		if (redisGetReply(c, (void **)&r) != REDIS_OK)
			return DL_EUNAVAILABLE;
		bad |= dl__store_reply_error(r) != NULL;
		freeReplyObject(r);
	}
	return bad ? DL_EUNAVAILABLE : 0;
}

/* Restore one key's record; its name is key minus the lock prefix. */
static int load_key(struct load_ctx *x, const redisReply *key,
		    const redisReply *val, struct dl_buf *changed, char *err,
		    size_t errlen)
{
	const char *why = NULL;
	int r;

	if (key->type != REDIS_REPLY_STRING ||
	    key->len <= x->st->lock_prefix_len ||
	    val->type != REDIS_REPLY_STRING)
		return 0; /* gone since SCAN saw it */
	x->name.p = key->str + x->st->lock_prefix_len;
	x->name.len = key->len - x->st->lock_prefix_len;
	if (dl_locktab_find(x->st->tab, x->name))
		return 0; /* SCAN may return a key twice */
	x->changed = 0;
	r = dl_record_parse(val->str, val->len, load_item, x, &why);
	if (r) {
		set_err(err, errlen, "key %s: %s", key->str,
			why ? why : dl_strerror(r));
		return r;
	}
	if (x->changed && (dl_buf_add(changed, x->name.p, x->name.len) ||
			   dl_buf_add(changed, "", 1)))
		return DL_ENOMEM;
	return 0;
}

static int load_all(struct dl_store *st, redisContext *c,
		    struct load_ctx *x, struct dl_buf *changed, char *err,
		    size_t errlen)
{
	char cursor[32] = "0", count[24];
	char *pat = dl__store_scan_pattern(st);
	const char **argv = NULL;
	size_t *lens = NULL, i, n;
	redisReply *r = NULL, *v = NULL, *keys;
	int rc = 0;

	if (!pat)
		return DL_ENOMEM;
	count[dl_u64_to_dec(DL_STORE_SCAN_COUNT, count)] = '\0';
	do {
		r = redisCommand(c, "SCAN %s MATCH %s COUNT %s", cursor, pat,
				 count);
		if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
			set_err(err, errlen, "SCAN failed: %s",
				r && r->type == REDIS_REPLY_ERROR ? r->str
								  : c->errstr);
			rc = DL_EUNAVAILABLE;
			break;
		}
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		keys = r->element[1];
		n = keys->elements;
		if (n) {
			argv = realloc(argv, (n + 1) * sizeof(*argv));
			lens = realloc(lens, (n + 1) * sizeof(*lens));
			if (!argv || !lens) {
				rc = DL_ENOMEM;
				break;
			}
			argv[0] = "MGET";
			lens[0] = 4;
			for (i = 0; i < n; i++) {
				argv[i + 1] = keys->element[i]->str;
				lens[i + 1] = keys->element[i]->len;
			}
			v = redisCommandArgv(c, (int)n + 1, argv, lens);
			if (!v || v->type != REDIS_REPLY_ARRAY ||
			    v->elements != n) {
				set_err(err, errlen, "MGET failed: %s",
					c->errstr);
				rc = DL_EUNAVAILABLE;
				break;
			}
			for (i = 0; i < n && !rc; i++)
				rc = load_key(x, keys->element[i],
					      v->element[i], changed, err,
					      errlen);
			freeReplyObject(v);
			v = NULL;
		}
		freeReplyObject(r);
		r = NULL;
	} while (!rc && strcmp(cursor, "0") != 0);
	freeReplyObject(r);
	freeReplyObject(v);
	free(argv);
	free(lens);
	free(pat);
	return rc;
}

int dl_store_load(struct dl_store *st, uint64_t unix_ms, char *err,
		  size_t errlen)
{
	struct load_ctx x = { .st = st };
	struct dl_buf changed = { 0 };
	uint64_t stored = 0, t0;
	redisContext *c;
	redisReply *r;
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
				   (int64_t)x.now_wall - (int64_t)x.now_mono))
		set_err(err, errlen, "cannot write back expired leases: %s",
			c->errstr), rc = DL_EUNAVAILABLE;
	free(changed.p);
	redisFree(c);
	if (rc)
		return rc;
	dl_locktab_raise_token(st->tab,
			       dl_token_floor(stored > x.max_token ? stored
								   : x.max_token,
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
