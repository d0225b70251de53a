/* SPDX-License-Identifier: MIT */
/*
 * dlock_ask.c -- libdlock's calls that ask rather than lock (dlock.h):
 * CHECK, STATUS, HOLDERS, LOCKS, PING, STATS and BREAK, and UNLOCK and
 * REFRESH of a lease by its name and token, which this client keeps no
 * record of.
 *
 * Each is one request, made, sent and waited for under the client's
 * mutex (dlock__enter, dlock__leave: dlock.c), its reply copied out to
 * the caller's memory before the request is freed. None makes or changes
 * a lease record: the background thread renews and guards only the
 * leases dlock.c's calls took (dlock.c, "Owner ids").
 */
#include "client/lib/dlock_private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A request about `name` (or none): made, sent, waited for. The caller
 * frees *qp if it is not NULL. */
static int ask(struct dlock_client *c, enum dlock__op op, const char *name,
	       uint64_t token, struct dlock__req **qp)
{
	struct dlock__req *q = dlock__req_new(op, name, 0);

	*qp = q;
	if (!q)
		return DLOCK_ENOMEM;
	q->token = token;
	q->deadline = dlock__now() + c->opt.request_timeout_ms;
	return dlock__call(c, qp);
}

static int check_at(dlock_client *c, const char *name, uint64_t token,
		    int64_t *remaining_ms, uint64_t *current)
{
	struct dlock__req *q;
	int err;

	dlock__last_error_clear();
	if (!c || dlock__bad_name(name))
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	err = ask(c, DLOCK__CHECK, name, token, &q);
	if (q && err == 0 && remaining_ms)
		*remaining_ms = (int64_t)q->r_value;
	if (q && err == DLOCK_ESTALE && current)
		*current = q->r_value;
	dlock__req_free(q);
	dlock__leave(c);
	return err;
}

int dlock_check(dlock_client *c, const char *name, uint64_t token,
		int64_t *remaining_ms, uint64_t *current)
{
	struct dlock__hop hop = {0};
	int err;

	while (dlock__route(c, name, &hop, &err))
		err = check_at(hop.leg, name, token, remaining_ms, current);
	return err;
}

static int status_at(dlock_client *c, const char *name, struct dlock_status *st)
{
	struct dlock__req *q;
	int err;

	dlock__last_error_clear();
	if (!c || !st || dlock__bad_name(name))
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	err = ask(c, DLOCK__STATUS, name, 0, &q);
	if (q && err == 0)
		*st = q->status;
	dlock__req_free(q);
	dlock__leave(c);
	return err;
}

int dlock_status(dlock_client *c, const char *name, struct dlock_status *st)
{
	struct dlock__hop hop = {0};
	int err;

	while (dlock__route(c, name, &hop, &err))
		err = status_at(hop.leg, name, st);
	return err;
}

int dlock_break(dlock_client *c, const char *name, uint64_t token,
		uint64_t *current)
{
	(void)c;
	(void)name;
	(void)token;
	(void)current;
	dlock__last_error_clear();
	return DLOCK_EINVAL; /* a BREAK says why: dlock_break_reason() */
}

static int break_at(dlock_client *c, const char *name, uint64_t token,
		    const char *reason, uint64_t *current)
{
	struct dlock__req *q;
	int err;
	size_t i, n = reason ? strlen(reason) : 0;

	dlock__last_error_clear();
	if (!c || dlock__bad_name(name) || n == 0 || n > DL_REASON_MAX)
		return DLOCK_EINVAL;
	for (i = 0; i < n; i++)
		if ((unsigned char)reason[i] < 0x21 ||
		    (unsigned char)reason[i] > 0x7e)
			return DLOCK_EINVAL; /* one word on the wire */
	if ((err = dlock__enter(c)) < 0)
		return err;
	if (!(q = dlock__req_new(DLOCK__BREAK, name, 0))) {
		dlock__leave(c);
		return DLOCK_ENOMEM;
	}
	memcpy(q->after, reason, n + 1);
	q->token = token;
	q->deadline = dlock__now() + c->opt.request_timeout_ms;
	err = dlock__call(c, &q);
	if (q && err == DLOCK_ESTALE && current)
		*current = q->r_value;
	dlock__req_free(q);
	dlock__leave(c);
	return err;
}

int dlock_break_reason(dlock_client *c, const char *name, uint64_t token,
		       const char *reason, uint64_t *current)
{
	struct dlock__hop hop = {0};
	int err;

	while (dlock__route(c, name, &hop, &err))
		err = break_at(hop.leg, name, token, reason, current);
	return err;
}

int dlock_ping(dlock_client *c)
{
	struct dlock__req *q;
	int err;

	dlock__last_error_clear();
	if (!c)
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	err = ask(c, DLOCK__PING, NULL, 0, &q);
	dlock__req_free(q);
	dlock__leave(c);
	return err;
}

int dlock_stats(dlock_client *c,
		void (*cb)(const char *key, const char *value, void *arg),
		void *arg)
{
	struct dlock__req *q;
	const char *p;
	uint64_t i;
	int err;

	dlock__last_error_clear();
	if (!c || !cb)
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	err = ask(c, DLOCK__STATS, NULL, 0, &q);
	dlock__leave(c);
	if (!q)
		return err;
	/* q is ours now: call back without the client's lock */
	for (i = 0, p = q->stats; err == 0 && i < q->stats_n; i++) {
		const char *v = p + strlen(p) + 1;

		cb(p, v, arg);
		p = v + strlen(v) + 1;
	}
	dlock__req_free(q);
	return err;
}

/* Body lines are split by the codec (dl_parse_body) into words that point
 * into the line, which is the request's own copy: a value the caller gets
 * as a C string is ended in place (the byte after it is a space or the
 * line's end). */
static char *own_str(char *line, struct dl_str v)
{
	char *p = line + (v.p - line);

	p[v.len] = '\0';
	return p;
}

/* key=<text> of a body line into buf, unless absent, "-" or too long. */
static void kv_copy(const struct dl_reply *r, const char *key, char *buf,
		    size_t cap)
{
	struct dl_str v;

	if (dl_reply_kv(r, key, &v) < 0 || v.len >= cap ||
	    (v.len == 1 && v.p[0] == '-'))
		return;
	memcpy(buf, v.p, v.len);
	buf[v.len] = '\0';
}

/* A LOCKS line: "<name> state=held mode=... owner=<id> token=<n>
 * ttl_ms=<n> count=<n> holders=<n> waiters=<n> limit=<n>" (unknown keys
 * ignored). */
static int locks_line(char *line, const char **name, struct dlock_status *st)
{
	struct dl_reply r;
	struct dl_str v;
	uint64_t n;

	memset(st, 0, sizeof(*st));
	if (dl_parse_body(line, strlen(line), &r) < 0)
		return DLOCK_EPROTO;
	st->held = dl_reply_kv(&r, "state", &v) == 0 && v.len == 4 &&
		   memcmp(v.p, "held", 4) == 0;
	kv_copy(&r, "owner", st->owner, sizeof(st->owner));
	kv_copy(&r, "mode", st->mode, sizeof(st->mode));
	if (dlock__kv_u64(&r, "token", UINT64_MAX, &n))
		st->token = n;
	if (dlock__kv_u64(&r, "ttl_ms", INT64_MAX, &n))
		st->ttl_ms = (int64_t)n;
	if (dlock__kv_u64(&r, "count", UINT32_MAX, &n))
		st->count = (uint32_t)n;
	if (dlock__kv_u64(&r, "waiters", UINT32_MAX, &n))
		st->waiters = (uint32_t)n;
	if (dlock__kv_u64(&r, "holders", UINT32_MAX, &n))
		st->holders = (uint32_t)n;
	if (dlock__kv_u64(&r, "limit", UINT32_MAX, &n))
		st->limit = (uint32_t)n;
	*name = own_str(line, r.word);
	return 0;
}

/* The arguments of dlock_locks() the server would refuse. */
static int bad_locks_args(const char *prefix, const char *after, unsigned limit,
			  int by_waiters)
{
	return (prefix && prefix[0] && dlock__bad_name(prefix)) ||
	       (after && after[0] && (dlock__bad_name(after) || by_waiters)) ||
	       limit > DL_LOCKS_PAGE_MAX;
}

int dlock__locks_at(dlock_client *c, const char *prefix, const char *after,
		    unsigned limit, int by_waiters,
		    void (*cb)(const char *name, const struct dlock_status *st,
			       void *arg),
		    void *arg, uint64_t *more)
{
	struct dlock_status st;
	struct dlock__req *q;
	const char *name;
	char *p;
	uint64_t i;
	int err;

	dlock__last_error_clear();
	if (!c || !cb || bad_locks_args(prefix, after, limit, by_waiters))
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	q = dlock__req_new(DLOCK__LOCKS, prefix && prefix[0] ? prefix : NULL,
			   0);
	if (!q) {
		dlock__leave(c);
		return DLOCK_ENOMEM;
	}
	if (after)
		snprintf(q->after, sizeof(q->after), "%s", after);
	q->limit = limit;
	q->by_waiters = by_waiters != 0;
	q->deadline = dlock__now() + c->opt.request_timeout_ms;
	err = dlock__call(c, &q);
	dlock__leave(c);
	if (!q)
		return err;
	if (err == 0 && more)
		*more = q->r_value;
	/* q is ours now: call back without the client's lock */
	for (i = 0, p = q->stats; err == 0 && i < q->stats_n; i++) {
		size_t len = strlen(p);

		if ((err = locks_line(p, &name, &st)) == 0)
			cb(name, &st, arg);
		p += len + 1;
	}
	dlock__req_free(q);
	return err;
}

/* A router asks every partition and merges their pages (dlock_span.c). */
int dlock_locks(dlock_client *c, const char *prefix, const char *after,
		unsigned limit, int by_waiters,
		void (*cb)(const char *name, const struct dlock_status *st,
			   void *arg),
		void *arg, uint64_t *more)
{
	dlock__last_error_clear();
	if (!c || !cb || bad_locks_args(prefix, after, limit, by_waiters))
		return DLOCK_EINVAL;
	if (atomic_load(&c->rt))
		return dlock__span_locks(c, prefix, after, limit, by_waiters,
					 cb, arg, more);
	return dlock__locks_at(c, prefix, after, limit, by_waiters, cb, arg,
			       more);
}

/* "holder <owner> token= ttl_ms= count= mode= held_ms= [user= host= pid=
 * cmd=]" or "waiter <owner> position= wait_ms=<ms>|inf mode= [restored]
 * [user= host= pid= cmd=]" */
static int holders_line(char *line, struct dlock_holder *h)
{
	static const char *const desc[] = {"user", "host",    "pid",
					   "cmd",  "held_ms", "value"};
	struct dl_reply r;
	struct dl_str v;
	uint64_t n;
	size_t i;
	int k;

	memset(h, 0, sizeof(*h));
	h->host = h->cmd = h->user = h->value = "";
	h->held_ms = -1;
	if (dl_parse_body(line, strlen(line), &r) < 0 || r.argc < 1)
		return DLOCK_EPROTO;
	if (r.word.len == 6 && memcmp(r.word.p, "waiter", 6) == 0)
		h->waiter = 1;
	else if (r.word.len != 6 || memcmp(r.word.p, "holder", 6) != 0)
		return DLOCK_EPROTO;
	for (k = 1; k < r.argc; k++)
		if (r.argv[k].len == 8 &&
		    memcmp(r.argv[k].p, "restored", 8) == 0)
			h->restored = 1;
	h->shared = dl_reply_kv(&r, "mode", &v) == 0 && v.len == 6 &&
		    memcmp(v.p, "shared", 6) == 0;
	if (dl_reply_kv(&r, "wait_ms", &v) == 0 && v.len == 3 &&
	    memcmp(v.p, "inf", 3) == 0)
		h->wait_ms = -1;
	else if (dlock__kv_u64(&r, "wait_ms", INT64_MAX, &n))
		h->wait_ms = (int64_t)n;
	if (dlock__kv_u64(&r, "token", UINT64_MAX, &n))
		h->token = n;
	if (dlock__kv_u64(&r, "ttl_ms", INT64_MAX, &n))
		h->ttl_ms = (int64_t)n;
	if (dlock__kv_u64(&r, "count", UINT32_MAX, &n))
		h->count = (uint32_t)n;
	if (dlock__kv_u64(&r, "position", UINT32_MAX, &n))
		h->position = (uint32_t)n;
	/* the strings last: ending them in place cuts the line */
	for (i = 0; i < sizeof(desc) / sizeof(desc[0]); i++)
		if (dl_reply_kv(&r, desc[i], &v) == 0)
			dlock__holder_word(h, desc[i], own_str(line, v));
	h->owner = own_str(line, r.argv[0]);
	return 0;
}

static int holders_at(dlock_client *c, const char *name,
		      void (*cb)(const struct dlock_holder *h, void *arg),
		      void *arg, struct dlock_status *st, uint64_t *more)
{
	struct dlock_holder h;
	struct dlock__req *q;
	char *p;
	uint64_t i;
	int err;

	dlock__last_error_clear();
	if (!c || !cb || dlock__bad_name(name))
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	if (!(q = dlock__req_new(DLOCK__HOLDERS, name, 0))) {
		dlock__leave(c);
		return DLOCK_ENOMEM;
	}
	q->deadline = dlock__now() + c->opt.request_timeout_ms;
	err = dlock__call(c, &q);
	dlock__leave(c);
	if (!q)
		return err;
	if (err == 0 && st)
		*st = q->status;
	if (err == 0 && more)
		*more = q->r_value;
	/* q is ours now: call back without the client's lock */
	for (i = 0, p = q->stats; err == 0 && i < q->stats_n; i++) {
		size_t len = strlen(p);

		if ((err = holders_line(p, &h)) == 0)
			cb(&h, arg);
		p += len + 1;
	}
	dlock__req_free(q);
	return err;
}

int dlock_holders(dlock_client *c, const char *name,
		  void (*cb)(const struct dlock_holder *h, void *arg),
		  void *arg, struct dlock_status *st, uint64_t *more)
{
	struct dlock__hop hop = {0};
	int err;

	while (dlock__route(c, name, &hop, &err))
		err = holders_at(hop.leg, name, cb, arg, st, more);
	return err;
}

/* ---- leases by (name, token) --------------------------------------------- */

/*
 * One UNLOCK or REFRESH of a lease that this client has no handle for (one
 * taken by another process of the same owner id). No record is made or
 * changed: the background thread neither renews nor guards such a lease.
 * A lease the client keeps a record of -- it holds handles for it, lost or
 * not, or is unlocking its last one -- is refused: acting on it behind its
 * handles' back would make the record lie (a released lease still renewed,
 * a refresh undone by the next renewal's TTL).
 */
static int unlock_token_at(dlock_client *c, const char *name, uint64_t token,
			   uint32_t *holds_left)
{
	struct dlock__req *q = NULL;
	int err;

	dlock__last_error_clear();
	if (!c || dlock__bad_name(name))
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	if (dlock__lease_find(c, name, token))
		err = DLOCK_EINVAL;
	else
		err = ask(c, DLOCK__UNLOCK_TOKEN, name, token, &q);
	if (q && err == 0 && holds_left)
		*holds_left = (uint32_t)q->r_value;
	dlock__req_free(q);
	dlock__leave(c);
	return err;
}

int dlock_unlock_token(dlock_client *c, const char *name, uint64_t token,
		       uint32_t *holds_left)
{
	struct dlock__hop hop = {0};
	int err;

	while (dlock__route(c, name, &hop, &err))
		err = unlock_token_at(hop.leg, name, token, holds_left);
	return err;
}

static int refresh_token_at(dlock_client *c, const char *name, uint64_t token,
			    int64_t ttl_ms, int64_t *granted_ttl_ms)
{
	struct dlock__req *q;
	int err;

	dlock__last_error_clear();
	if (!c || dlock__bad_name(name) || dlock__bad_ms(ttl_ms))
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	if (dlock__lease_find(c, name, token)) {
		err = DLOCK_EINVAL;
	} else if (!(q = dlock__req_new(DLOCK__REFRESH_TOKEN, name, 0))) {
		err = DLOCK_ENOMEM;
	} else {
		q->token = token;
		q->ttl = ttl_ms; /* 0: no ttl=, the lease's last TTL */
		q->deadline = dlock__now() + c->opt.request_timeout_ms;
		err = dlock__call(c, &q);
		if (q && err == 0 && granted_ttl_ms)
			*granted_ttl_ms = (int64_t)q->r_value;
		dlock__req_free(q);
	}
	dlock__leave(c);
	return err;
}

int dlock_refresh_token(dlock_client *c, const char *name, uint64_t token,
			int64_t ttl_ms, int64_t *granted_ttl_ms)
{
	struct dlock__hop hop = {0};
	int err;

	while (dlock__route(c, name, &hop, &err))
		err = refresh_token_at(hop.leg, name, token, ttl_ms,
				       granted_ttl_ms);
	return err;
}
