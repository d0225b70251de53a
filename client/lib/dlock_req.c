/* SPDX-License-Identifier: MIT */
/*
 * dlock_req.c -- libdlock's requests and lease records (dlock_private.h).
 *
 * A request is formatted with the proto codec (dl_fmt_*) at the moment it
 * is written, so that a LOCK written again after a reconnect carries the
 * wait that remains and a fresh id= tag. Written bytes go to c->conn.out and
 * are pushed to the non-blocking socket at once by the writing thread;
 * what the kernel does not take is left for the background thread, which
 * polls for POLLOUT. No thread ever blocks in send() holding the lock.
 *
 * Every function here runs with c->mu held.
 */
#include "client/lib/dlock_private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- time ---------------------------------------------------------------- */

/* CLOCK_BOOTTIME: unlike CLOCK_MONOTONIC it goes on while the machine is
 * suspended, as the server's clock and the lease do. */
int64_t dlock__now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dlock__slack(int64_t ttl_ms)
{
	return 2 + ttl_ms / 1000;
}

int64_t dlock__guard(const struct dlock_client *c, int64_t ttl_ms)
{
	int64_t g = ttl_ms / 10;

	if (c->opt.lost_guard_ms > 0)
		return c->opt.lost_guard_ms;
	return g > DLOCK__GUARD_MIN_MS ? g : DLOCK__GUARD_MIN_MS;
}

void dlock__cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}

/* glibc's condition variables wait on CLOCK_REALTIME or CLOCK_MONOTONIC
 * only, and the latter stops during a suspend: wait in steps of at most
 * DLOCK__CLOCK_STEP_MS on it, and judge the deadline on dlock__now(). A step
 * that ends early returns 0, like a spurious wake-up: callers loop. */
int dlock__cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline)
{
	struct timespec ts;
	int64_t left, ns;
	int rc;

	if (deadline == DLOCK__NEVER)
		return pthread_cond_wait(cv, mu);
	left = deadline - dlock__now();
	if (left <= 0)
		return ETIMEDOUT;
	if (left > DLOCK__CLOCK_STEP_MS)
		left = DLOCK__CLOCK_STEP_MS;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ns = ts.tv_nsec + (left % 1000) * 1000000;
	ts.tv_sec += (time_t)(left / 1000 + ns / 1000000000);
	ts.tv_nsec = (long)(ns % 1000000000);
	rc = pthread_cond_timedwait(cv, mu, &ts);
	if (rc == ETIMEDOUT && dlock__now() < deadline)
		return 0;
	return rc;
}

void dlock__wake(struct dlock_client *c)
{
	char b = 1;
	ssize_t n;

	do
		n = write(c->wake[1], &b, 1);
	while (n < 0 && errno == EINTR);
	/* EAGAIN: the pipe is full, the thread is awake anyway */
}

/* ---- requests ------------------------------------------------------------ */

struct dlock__req *dlock__req_new(enum dlock__op op, const char *name,
				  int internal)
{
	struct dlock__req *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->op = op;
	q->internal = internal ? 1 : 0;
	q->deadline = DLOCK__NEVER;
	q->wait_end = DLOCK__NEVER;
	if (name)
		snprintf(q->name, sizeof(q->name), "%s", name);
	if (!internal)
		dlock__cond_init(&q->cv);
	return q;
}

void dlock__req_free(struct dlock__req *q)
{
	if (!q)
		return;
	if (q->lease)
		dlock__lease_unref(q->lease);
	if (!q->internal)
		pthread_cond_destroy(&q->cv);
	free(q->stats);
	free(q->multi);
	free(q);
}

void dlock__flush(struct dlock_client *c)
{
	ssize_t n;

	if (c->conn.tls) {
		dlock__tls_flush(c);
		return;
	}
	while (c->conn.fd >= 0 && c->conn.out_off < c->conn.out_len) {
		n = send(c->conn.fd, c->conn.out + c->conn.out_off,
			 c->conn.out_len - c->conn.out_off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			c->conn.out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		c->conn.wfail = 1; /* the thread sees it and disconnects */
		break;
	}
	if (c->conn.out_off == c->conn.out_len)
		c->conn.out_off = c->conn.out_len = 0;
}

static int out_append(struct dlock_client *c, const char *p, size_t n)
{
	if (c->conn.out_off > 0 && c->conn.out_off == c->conn.out_len)
		c->conn.out_off = c->conn.out_len = 0;
	if (c->conn.out_len + n > c->conn.out_cap) {
		size_t cap = c->conn.out_cap ? c->conn.out_cap : 4096;
		char *np;

		while (cap < c->conn.out_len + n)
			cap *= 2;
		np = realloc(c->conn.out, cap);
		if (!np)
			return DLOCK_ENOMEM;
		c->conn.out = np;
		c->conn.out_cap = cap;
	}
	memcpy(c->conn.out + c->conn.out_len, p, n);
	c->conn.out_len += n;
	return 0;
}

static struct dl_str str_of(const char *s)
{
	return (struct dl_str){s, strlen(s)};
}

/* ---- each operation's arguments (the args column of DLOCK__OPS) -----------
 */

typedef void args_fn(struct dlock_client *c, struct dlock__req *q, int64_t now,
		     struct dl_fmt *f);

static void args_auth(struct dlock_client *c, struct dlock__req *q, int64_t now,
		      struct dl_fmt *f)
{
	(void)q, (void)now;
	if (c->user)
		dl_fmt_word(f, c->user);
	dl_fmt_word(f, c->password);
}

static void args_hello(struct dlock_client *c, struct dlock__req *q,
		       int64_t now, struct dl_fmt *f)
{
	(void)q, (void)now;
	dl_fmt_kv_str(f, "owner", str_of(c->owner));
	if (c->owner_key[0])
		dl_fmt_kv_str(f, "key", str_of(c->owner_key));
}

static void args_describe(struct dlock_client *c, struct dlock__req *q,
			  int64_t now, struct dl_fmt *f)
{
	(void)q, (void)now;
	if (c->desc.host[0])
		dl_fmt_kv_str(f, "host", str_of(c->desc.host));
	if (c->desc.pid)
		dl_fmt_kv_u64(f, "pid", c->desc.pid);
	if (c->desc.cmd[0])
		dl_fmt_kv_str(f, "cmd", str_of(c->desc.cmd));
}

static void args_lock(struct dlock_client *c, struct dlock__req *q, int64_t now,
		      struct dl_fmt *f)
{
	dl_fmt_word(f, q->name);
	dl_fmt_kv_u64(f, "ttl", (uint64_t)q->ttl);
	if (q->wait < 0) {
		dl_fmt_kv_str(f, "wait", DL_STR_LIT("inf"));
	} else if (q->wait > 0) {
		if (q->wait_end == DLOCK__NEVER)
			q->wait_end = now + q->wait;
		dl_fmt_kv_u64(
			f, "wait",
			(uint64_t)(q->wait_end > now ? q->wait_end - now : 1));
	}
	if (q->shared)
		dl_fmt_word(f, "mode=shared");
	if (q->limit > 1)
		dl_fmt_kv_u64(f, "limit", q->limit);
	if (q->warn > 0)
		dl_fmt_kv_u64(f, "warn", (uint64_t)q->warn);
	if (q->delay > 0)
		dl_fmt_kv_u64(f, "delay", (uint64_t)q->delay);
	if (q->reqid && c->hello.takes_req)
		dl_fmt_kv_u64(f, "req", q->reqid);
	if (q->notify)
		dl_fmt_word(f, "notify=waiters");
	if (q->value[0])
		dl_fmt_kv_str(f, "value", str_of(q->value));
}

/* LOCK <name> <name> ... of a multi-lock: only ttl= wait= req= go with
 * several names (every lock is taken exclusive). */
static void args_lockall(struct dlock_client *c, struct dlock__req *q,
			 int64_t now, struct dl_fmt *f)
{
	int i;

	for (i = 0; i < q->multi->n; i++)
		dl_fmt_word(f, q->multi->names[i]);
	dl_fmt_kv_u64(f, "ttl", (uint64_t)q->ttl);
	if (q->wait < 0) {
		dl_fmt_kv_str(f, "wait", DL_STR_LIT("inf"));
	} else if (q->wait > 0) {
		if (q->wait_end == DLOCK__NEVER)
			q->wait_end = now + q->wait;
		dl_fmt_kv_u64(
			f, "wait",
			(uint64_t)(q->wait_end > now ? q->wait_end - now : 1));
	}
	if (q->reqid && c->hello.takes_req)
		dl_fmt_kv_u64(f, "req", q->reqid);
}

/* REFRESH of the multi-lock's grant being confirmed (MCONFIRM). */
static void args_mconfirm(struct dlock_client *c, struct dlock__req *q,
			  int64_t now, struct dl_fmt *f)
{
	const struct dlock__multi *m = q->multi;

	(void)c, (void)now;
	dl_fmt_word(f, m->names[m->ci]);
	dl_fmt_u64(f, m->tokens[m->ci]);
	dl_fmt_kv_u64(f, "ttl", (uint64_t)q->ttl);
}

static void args_reclaim(struct dlock_client *c, struct dlock__req *q,
			 int64_t now, struct dl_fmt *f)
{
	const struct dlock__lease *l = q->lease;

	(void)c, (void)now;
	dl_fmt_word(f, q->name);
	dl_fmt_u64(f, q->token);
	dl_fmt_kv_str(f, "proof", str_of(l->proof));
	dl_fmt_kv_u64(f, "until", l->until);
	dl_fmt_kv_u64(f, "ttl", (uint64_t)q->ttl);
	if (l->shared)
		dl_fmt_word(f, "mode=shared");
	if (l->limit > 1)
		dl_fmt_kv_u64(f, "limit", l->limit);
	/* what the lost record said: the holds this client counts, the
	 * warning and the lock delay it asked for */
	if (l->nhandles > 1)
		dl_fmt_kv_u64(f, "holds", (uint64_t)l->nhandles);
	if (l->warn > 0 && l->warn < q->ttl)
		dl_fmt_kv_u64(f, "warn", (uint64_t)l->warn);
	if (l->delay > 0)
		dl_fmt_kv_u64(f, "delay", (uint64_t)l->delay);
	if (l->value[0])
		dl_fmt_kv_str(f, "value", str_of(l->value));
}

/* CONFIRM, REFRESH, RENEW */
static void args_refresh(struct dlock_client *c, struct dlock__req *q,
			 int64_t now, struct dl_fmt *f)
{
	(void)c, (void)now;
	dl_fmt_word(f, q->name);
	dl_fmt_u64(f, q->token);
	dl_fmt_kv_u64(f, "ttl", (uint64_t)q->ttl);
	if (q->value[0])
		dl_fmt_kv_str(f, "value", str_of(q->value));
}

static void args_refresh_token(struct dlock_client *c, struct dlock__req *q,
			       int64_t now, struct dl_fmt *f)
{
	(void)c, (void)now;
	dl_fmt_word(f, q->name);
	dl_fmt_u64(f, q->token);
	if (q->ttl > 0)
		dl_fmt_kv_u64(f, "ttl", (uint64_t)q->ttl);
}

/* UNLOCK, UNLOCK_TOKEN, CHECK */
static void args_token(struct dlock_client *c, struct dlock__req *q,
		       int64_t now, struct dl_fmt *f)
{
	(void)c, (void)now;
	dl_fmt_word(f, q->name);
	dl_fmt_u64(f, q->token);
}

static void args_break(struct dlock_client *c, struct dlock__req *q,
		       int64_t now, struct dl_fmt *f)
{
	(void)c, (void)now;
	dl_fmt_word(f, q->name);
	dl_fmt_u64(f, q->token);
	dl_fmt_kv_str(f, "reason", str_of(q->after));
}

/* CANCEL, STATUS, HOLDERS, WATCH, UNWATCH */
static void args_name(struct dlock_client *c, struct dlock__req *q, int64_t now,
		      struct dl_fmt *f)
{
	(void)c, (void)now;
	dl_fmt_word(f, q->name);
}

static void args_none(struct dlock_client *c, struct dlock__req *q, int64_t now,
		      struct dl_fmt *f)
{
	(void)c, (void)q, (void)now, (void)f;
}

/* PARTITION <words>: q->stats holds them, "w\0w\0" (dlock_partition) */
static void args_partition(struct dlock_client *c, struct dlock__req *q,
			   int64_t now, struct dl_fmt *f)
{
	const char *w = q->stats;
	uint64_t i;

	(void)c, (void)now;
	for (i = 0; w && i < q->stats_n; i++, w += strlen(w) + 1)
		dl_fmt_word(f, w);
}

static void args_locks(struct dlock_client *c, struct dlock__req *q,
		       int64_t now, struct dl_fmt *f)
{
	(void)c, (void)now;
	if (q->name[0])
		dl_fmt_word(f, q->name);
	if (q->limit)
		dl_fmt_kv_u64(f, "limit", q->limit);
	if (q->after[0])
		dl_fmt_kv_str(f, "after", str_of(q->after));
	if (q->by_waiters)
		dl_fmt_word(f, "by=waiters");
}

/* The verb and args columns of DLOCK__OPS (dlock_private.h); the verb's
 * name is the codec's (dl_verb_name). */
static const struct {
	enum dl_verb verb;
	args_fn *args;
} ops[] = {
#define X(op, verb, args, reply) [DLOCK__##op] = {DL_VERB_##verb, args},
	DLOCK__OPS(X)
#undef X
};

/* The request's line, with a new tag. */
static int format(struct dlock_client *c, struct dlock__req *q, int64_t now,
		  struct dl_fmt *f)
{
	c->rq.seq++;
	snprintf(q->tag, sizeof(q->tag), "r%llu",
		 (unsigned long long)c->rq.seq);
	dl_fmt_word(f, dl_verb_name((q->op == DLOCK__LOCK ||
				     q->op == DLOCK__LOCKALL) &&
						    q->wait == 0
					    ? DL_VERB_TRYLOCK
					    : ops[q->op].verb));
	ops[q->op].args(c, q, now, f);
	return dl_fmt_end(f, str_of(q->tag));
}

int dlock__req_write(struct dlock_client *c, struct dlock__req *q)
{
	char line[DL_LINE_MAX + 8];
	struct dl_fmt f;
	int64_t now = dlock__now();
	int n, err;

	dl_fmt_init(&f, line, sizeof(line));
	n = format(c, q, now, &f);
	if (n < 0)
		return DLOCK_EINVAL; /* cannot happen: arguments were checked */
	if ((err = out_append(c, line, (size_t)n)) < 0)
		return err;
	q->sent_at = now;
	q->where = DLOCK__SENT;
	/* A REFRESH that shortens the lease may take effect even if its
	 * reply never arrives (a server that crashed after recording it):
	 * the lease counts on the shorter deadline from the moment it is sent
	 * (PROTOCOL.md, REFRESH). */
	if ((q->op == DLOCK__REFRESH || q->op == DLOCK__RENEW) && q->lease &&
	    atomic_load(&q->lease->c) == c && q->ttl > 0 &&
	    now + q->ttl - dlock__slack(q->ttl) <
		    atomic_load(&q->lease->deadline))
		atomic_store(&q->lease->deadline,
			     now + q->ttl - dlock__slack(q->ttl));
	dlock__list_append(&c->rq.fifo, &c->rq.fifo_tail, q);
	dlock__flush(c);
	if (dlock__io_pending(c) || c->conn.wfail)
		dlock__wake(
			c); /* the thread polls for POLLOUT, or disconnects */
	return 0;
}

static void unsent_push(struct dlock_client *c, struct dlock__req *q)
{
	q->where = DLOCK__UNSENT;
	dlock__list_append(&c->rq.unsent, &c->rq.unsent_tail, q);
}

int dlock__req_submit(struct dlock_client *c, struct dlock__req *q)
{
	if (c->closing)
		return DLOCK_ECANCELED;
	switch (c->conn.state) {
	case DLOCK__UP:
		return dlock__req_write(c, q);
	case DLOCK__DOWN:
	case DLOCK__CONNECTING:
	case DLOCK__HANDSHAKE:
	case DLOCK__GREETING: /* sent once HELLO is answered OK */
		unsent_push(c, q);
		return 0;
	default:
		/* dlock_connect's handshake: TLS may have ended the
		 * connection before this request was written (a TLS 1.3
		 * server refuses a client certificate after the client's
		 * side of the handshake is done) */
		if (c->conn.initial && dlock__tls_failed(c)) {
			snprintf(q->err, sizeof(q->err), "%s",
				 dlock__tls_error(c));
			return DLOCK_ETLS;
		}
		return DLOCK_ECLOSED;
	}
}

void dlock__acq_remove(struct dlock_client *c, struct dlock__req *q)
{
	if (!q->in_acq)
		return;
	if (q->aprev)
		q->aprev->anext = q->anext;
	else
		c->rq.acquiring = q->anext;
	if (q->anext)
		q->anext->aprev = q->aprev;
	q->anext = q->aprev = NULL;
	q->in_acq = 0;
	if (q->multi) {
		int i;

		for (i = 0; i < q->multi->n; i++)
			dlock__name_wake(c, q->multi->names[i]);
		dlock__name_wake(c, ""); /* the multi-lock turn */
	} else {
		dlock__name_wake(c, q->name);
	}
}

void dlock__name_wake(struct dlock_client *c, const char *name)
{
	struct dlock__lwait *w;

	for (w = c->lwait; w; w = w->next) {
		if (strcmp(w->name, name) == 0) {
			pthread_cond_signal(&w->cv);
			return;
		}
	}
}

int dlock__name_acquiring(const struct dlock_client *c, const char *name)
{
	const struct dlock__req *q;

	int i;

	for (q = c->rq.acquiring; q; q = q->anext) {
		if (q->multi && !name[0])
			return 1; /* the client's multi-lock turn: one at a time
				   */
		if (!q->multi && strcmp(q->name, name) == 0)
			return 1;
		for (i = 0; q->multi && i < q->multi->n; i++)
			if (strcmp(q->multi->names[i], name) == 0)
				return 1;
	}
	return 0;
}

void dlock__list_append(struct dlock__req **head, struct dlock__req **tail,
			struct dlock__req *q)
{
	q->next = NULL;
	if (*tail)
		(*tail)->next = q;
	else
		*head = q;
	*tail = q;
}

struct dlock__req *dlock__list_pop(struct dlock__req **head,
				   struct dlock__req **tail)
{
	struct dlock__req *q = *head;

	if (!q)
		return NULL;
	*head = q->next;
	if (!*head && tail)
		*tail = NULL;
	q->next = NULL;
	return q;
}

void dlock__list_prepend(struct dlock__req **head, struct dlock__req **tail,
			 struct dlock__req *first, struct dlock__req *last)
{
	if (!first)
		return;
	last->next = *head;
	if (!*head)
		*tail = last;
	*head = first;
}

void dlock__list_remove(struct dlock__req **head, struct dlock__req **tail,
			struct dlock__req *q)
{
	struct dlock__req *p, *prev = NULL;

	for (p = *head; p && p != q; p = p->next)
		prev = p;
	if (!p)
		return;
	if (prev)
		prev->next = q->next;
	else
		*head = q->next;
	if (tail && *tail == q)
		*tail = prev;
	q->next = NULL;
}

/* The caller stops waiting for q (timeout). Returns 1 if q was freed
 * here, 0 if the background thread now owns it. */
static int abandon(struct dlock_client *c, struct dlock__req *q)
{
	switch (q->where) {
	case DLOCK__UNSENT:
		if (q->op == DLOCK__UNLOCK && q->last_hold) {
			/* still release the lease once connected */
			pthread_cond_destroy(&q->cv);
			q->internal = 1;
			return 0;
		}
		dlock__list_remove(&c->rq.unsent, &c->rq.unsent_tail, q);
		/* a multi-lock's grants read before a drop (its confirms
		 * unsent): given back, their UNLOCKs kept for the next
		 * connection (found by review: they were dropped, and the
		 * leases held until their TTL) */
		if (q->multi && !q->multi->handed && q->multi->ngrants)
			dlock__multi_giveback(c, q);
		break;
	case DLOCK__WAITING:
		dlock__list_remove(&c->rq.waiting, NULL, q);
		/* leave the queue; a grant that crosses the CANCEL comes as a
		 * "* GRANTED" nobody waits for and is released */
		if (c->conn.state == DLOCK__UP) {
			c->conn.crossing++; /* dlock_private.h */
			dlock__internal(c, DLOCK__CANCEL, q->name, 0, 0);
		}
		break;
	case DLOCK__SENT:
		/* Its reply will be cleaned up. It stops excluding the other
		 * threads now: a LOCK they send meanwhile is granted as a
		 * reentry of whatever this one gets (which the clean-up
		 * undoes), or meets its queued self: ALREADY_WAITING, sent
		 * again behind the clean-up's CANCEL. */
		q->abandoned = 1;
		dlock__acq_remove(c, q);
		return 0;
	case DLOCK__NOWHERE:
		break;
	}
	dlock__acq_remove(c, q);
	dlock__req_free(q);
	return 1;
}

int dlock__call(struct dlock_client *c, struct dlock__req **qp)
{
	struct dlock__req *q = *qp;
	int err = dlock__req_submit(c, q);

	if (err < 0) {
		if (q->err[0])
			dlock__last_error_set(q->err);
		return err;
	}
	while (!q->done) {
		if (dlock__cond_wait(&q->cv, &c->mu, q->deadline) ==
			    ETIMEDOUT &&
		    !q->done && dlock__now() >= q->deadline) {
			abandon(c, q);
			*qp = NULL;
			return DLOCK_ETIMEDOUT;
		}
	}
	if (q->err[0])
		dlock__last_error_set(q->err);
	return q->rc;
}

void dlock__req_finish(struct dlock_client *c, struct dlock__req *q, int rc)
{
	q->where = DLOCK__NOWHERE;
	if (q->op == DLOCK__LOCK || q->op == DLOCK__CONFIRM ||
	    q->op == DLOCK__LOCKALL || q->op == DLOCK__MCONFIRM)
		dlock__acq_remove(c, q);
	/* a multi-lock's grants that no caller will have */
	if (q->multi && !q->multi->handed &&
	    (rc < 0 || q->internal || q->abandoned))
		dlock__multi_giveback(c, q);
	if (q->internal || q->abandoned) {
		dlock__req_free(q);
		return;
	}
	q->rc = rc;
	q->done = 1;
	pthread_cond_signal(&q->cv);
}

void dlock__internal(struct dlock_client *c, enum dlock__op op,
		     const char *name, uint64_t token, int last_hold)
{
	struct dlock__req *q = dlock__req_new(op, name, 1);

	if (!q)
		return; /* the lease expires at the server */
	q->token = token;
	q->last_hold = last_hold ? 1 : 0;
	if (c->conn.state == DLOCK__UP) {
		if (dlock__req_write(c, q) < 0)
			dlock__req_free(q);
	} else if (op == DLOCK__UNLOCK && c->conn.state != DLOCK__DEAD) {
		unsent_push(c, q);
	} else {
		dlock__req_free(q);
	}
}

/* ---- errors -------------------------------------------------------------- */

static int word_is(struct dl_str w, const char *s)
{
	size_t n = strlen(s);

	return w.len == n && memcmp(w.p, s, n) == 0;
}

struct word_err {
	const char *word;
	int err;
};

static const struct word_err no_map[] = {
	{"BUSY", DLOCK_EBUSY},
	{"NOT_HOLDER", DLOCK_ENOTHOLDER},
	{"STALE", DLOCK_ESTALE},
	{"AUTH_FAILED", DLOCK_EAUTH},
	{"LIMIT_MISMATCH", DLOCK_EMISMATCH},
	{"UPGRADE_DEADLOCK", DLOCK_EDEADLK},
	{"DEADLOCK", DLOCK_ECYCLE},
	{"DENIED", DLOCK_EDENIED},
	/* a multi-lock takes new leases only: the owner holds one */
	{"ALREADY_HELD", DLOCK_EHELDBYOWNER},
	/* another partition serves the name: not executed (a router
	 * follows it, dlock_route.c) */
	{"MOVED", DLOCK_EMOVED},
};
static const struct word_err err_map[] = {
	{"NOAUTH", DLOCK_EAUTH},
	{"UNAVAILABLE", DLOCK_EUNAVAILABLE},
	/* A standby: the request was not executed; try the active
	 * (dlock_error() shows its address). */
	{"NOT_ACTIVE", DLOCK_EUNAVAILABLE},
	{"LIMIT", DLOCK_ELIMIT},
	{"BAD_ARG", DLOCK_EINVAL},
	{"BAD_FORMAT", DLOCK_EINVAL},
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The code of `word` in map (n entries), or 0. */
static int map_word(const struct word_err *map, size_t n, struct dl_str word)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (word_is(word, map[i].word))
			return map[i].err;
	return 0;
}

int dlock__reply_error(struct dlock__req *q, const struct dl_reply *r)
{
	int err;

	if (r->kind != DL_REPLY_NO && r->kind != DL_REPLY_ERR)
		return DLOCK_EPROTO;
	snprintf(q->err, sizeof(q->err), "%s %.*s%s%.*s",
		 r->kind == DL_REPLY_NO ? "NO" : "ERR", (int)r->word.len,
		 r->word.p, r->rest.len ? " " : "", (int)r->rest.len,
		 r->rest.p);
	err = r->kind == DL_REPLY_NO
		      ? map_word(no_map, N_OF(no_map), r->word)
		      : map_word(err_map, N_OF(err_map), r->word);
	return err ? err : DLOCK_ESERVER;
}

int dlock__failed_error(struct dlock__req *q, const struct dl_reply *r)
{
	struct dl_str word = r->argc >= 2 ? r->argv[1] : (struct dl_str){"", 0};
	const char *rest = word.len ? word.p + word.len : "";
	size_t rest_len = 0;
	int err, no = 1;

	/* what follows the word, up to the end of rest (the tag is not in
	 * it) */
	if (word.len)
		rest_len = (size_t)(r->rest.p + r->rest.len - rest);
	if ((err = map_word(no_map, N_OF(no_map), word)) == 0) {
		if ((err = map_word(err_map, N_OF(err_map), word)) != 0)
			no = 0;
		else if (word_is(word, "EXPIRED"))
			err = DLOCK_ELOST; /* a lock it had was broken */
		else
			err = DLOCK_ESERVER;
	}
	snprintf(q->err, sizeof(q->err), "%s %.*s%.*s", no ? "NO" : "ERR",
		 (int)word.len, word.p, (int)rest_len, rest);
	return err;
}

/* ---- leases -------------------------------------------------------------- */

struct dlock__lease *dlock__lease_find(struct dlock_client *c, const char *name,
				       uint64_t token)
{
	struct dlock__lease *l;

	for (l = c->ls.leases; l; l = l->next)
		if (l->token == token && strcmp(l->name, name) == 0)
			return l;
	return NULL;
}

void dlock__lease_confirm(struct dlock_client *c, struct dlock__lease *l,
			  const struct dlock__req *q, int64_t sent_at,
			  int64_t ms)
{
	int64_t d, cap, ttl = atomic_load(&l->ttl);
	const struct dlock__req *r;

	/* never more than the lease's TTL as this client knows it, whatever
	 * the server says (found by fuzz_client: a confirmation of a
	 * reentry asked with no TTL was answered with more than the
	 * lease's, and counted on): less is safe, the lease is renewed
	 * sooner */
	if (ttl > 0 && ms > ttl)
		ms = ttl;
	d = sent_at + ms - dlock__slack(ms);

	/* The server counts the lease from when it read the request, which
	 * is after sent_at: the deadline below is never later than the
	 * server's, give or take its ms rounding and the difference of the
	 * two clocks' rates, which the slack covers. */
	/* ... but a REFRESH of the lease written after q (c->rq.fifo is in the
	 * order of the writes; the server answers in it) may have shortened
	 * it already: until its reply, the lease counts on the shorter end,
	 * as from the moment it was written (dlock__req_write). Found by the
	 * fault campaign: a reentry to 3 s was answered while the renewal of
	 * its 300 ms lease, written after it, was in flight; the client
	 * counted on 3 s, closed, and the lock went to another owner 300 ms
	 * later. */
	for (r = c->rq.fifo; r; r = r->next) {
		if (r == q || r->lease != l || r->ttl <= 0 ||
		    (r->op != DLOCK__REFRESH && r->op != DLOCK__RENEW &&
		     r->op != DLOCK__RECLAIM))
			continue;
		cap = r->sent_at + r->ttl - dlock__slack(r->ttl);
		if (cap < d)
			d = cap;
	}
	atomic_store(&l->deadline, d);
	l->renew_at = sent_at + atomic_load(&l->ttl) / 3;
	l->at_risk = 0;
}

int dlock__lease_grant(struct dlock_client *c, struct dlock__req *q,
		       uint64_t token, int64_t ms, int64_t sent_at)
{
	struct dlock__lease *l = dlock__lease_find(c, q->name, token);
	dlock_lease *h = calloc(1, sizeof(*h));
	int reentry = l != NULL;

	if (!h)
		return DLOCK_ENOMEM;
	if (!l) {
		if (!(l = calloc(1, sizeof(*l)))) {
			free(h);
			return DLOCK_ENOMEM;
		}
		snprintf(l->name, sizeof(l->name), "%s", q->name);
		l->c = c;
		l->token = token;
		l->shared = q->shared;
		l->limit = q->limit ? q->limit : 1;
		l->refs = 1; /* the list's */
		l->linked = 1;
		l->next = c->ls.leases;
		if (c->ls.leases)
			c->ls.leases->prev = l;
		c->ls.leases = l;
	}
	if (l->dead && !l->unlocking) {
		/* a lease we had given up on was still there: the server
		 * granted this hold on it; the old handles stay lost */
		l->dead = 0;
	}
	l->holder = q->thread;
	/* A reentry never shortens the lease, at the server nor here: it is
	 * renewed with the longer of the two TTLs (PROTOCOL.md, Semantics). */
	if (!reentry || q->ttl > atomic_load(&l->ttl))
		atomic_store(&l->ttl, q->ttl);
	/* as the server keeps them: a warn= given replaces the lease's, a
	 * delay only grows while the lease is held */
	if (q->warn > 0)
		l->warn = q->warn;
	if (q->delay > l->delay)
		l->delay = q->delay;
	if (!reentry) /* a new lease's value; a reentry keeps the lease's,
			 as the server does */
		memcpy(l->value, q->value, sizeof(l->value));
	dlock__lease_confirm(c, l, q, sent_at, ms);
	h->l = l;
	h->next = l->handles;
	l->handles = h;
	l->nhandles++;
	l->refs++;
	q->handle = h;
	q->token = token;
	return 0;
}

int dlock__lease_renew(struct dlock_client *c, struct dlock__lease *l)
{
	struct dlock__req *q = dlock__req_new(DLOCK__RENEW, l->name, 1);

	if (!q)
		return DLOCK_ENOMEM;
	q->token = l->token;
	q->ttl = atomic_load(&l->ttl);
	q->lease = l;
	l->refs++;
	if (dlock__req_write(c, q) < 0) {
		dlock__req_free(q);
		return DLOCK_ECLOSED;
	}
	l->refreshing = 1;
	return 0;
}

void dlock__lease_risk(struct dlock_client *c, struct dlock__lease *l)
{
	dlock_lease *h;

	if (l->at_risk || l->dead || l->unlocking || l->nhandles == 0)
		return;
	l->at_risk = 1;
	for (h = l->handles; h; h = h->next) {
		if (atomic_load(&h->lost) || h->risk_notify)
			continue;
		h->risk_notify = 1;
		c->ls.risk_count++;
	}
}

void dlock__lease_waiting(struct dlock_client *c, struct dlock__lease *l,
			  uint32_t waiters)
{
	dlock_lease *h;

	if (l->dead || l->unlocking || l->nhandles == 0)
		return;
	atomic_store(&l->waiters, waiters);
	for (h = l->handles; h; h = h->next) {
		if (atomic_load(&h->lost) || h->contended_notify)
			continue;
		h->contended_notify = 1;
		c->ls.contended_count++;
	}
}

void dlock__lease_lose(struct dlock_client *c, struct dlock__lease *l,
		       enum dlock_lost_reason why)
{
	dlock_lease *h;

	l->dead = 1;
	for (h = l->handles; h; h = h->next) {
		if (atomic_load(&h->lost))
			continue;
		h->why = why;
		atomic_store(&h->lost, 1);
		h->notify = 1;
		c->ls.notify_count++;
	}
}

void dlock__lease_unlink(struct dlock_client *c, struct dlock__lease *l)
{
	if (!l->linked)
		return;
	if (l->prev)
		l->prev->next = l->next;
	else
		c->ls.leases = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->next = l->prev = NULL;
	l->linked = 0;
	dlock__name_wake(c, l->name);
	dlock__lease_unref(l);
}

void dlock__lease_unref(struct dlock__lease *l)
{
	if (atomic_fetch_sub(&l->refs, 1) == 1)
		free(l);
}

/* ---- a lease moves to another partition's client ------------------------ */

/* The two clients' mu, in the library's order: legs by address, a
 * router's own client after its leg (a leg's thread takes its router's
 * mu under its own: dlock_watch.c). */
static void lock_two(struct dlock_client *a, struct dlock_client *b)
{
	struct dlock_client *t;

	if (!a->parent || (b->parent && (uintptr_t)b < (uintptr_t)a)) {
		t = a;
		a = b;
		b = t;
	}
	pthread_mutex_lock(&a->mu);
	pthread_mutex_lock(&b->mu);
}

static void unlock_two(struct dlock_client *a, struct dlock_client *b)
{
	pthread_mutex_unlock(&a->mu);
	pthread_mutex_unlock(&b->mu);
}

/* A callback of c's thread is running about one of l's handles (c->mu
 * released meanwhile): the handle must stay c's until it returns. */
static int in_callback(const struct dlock_client *c,
		       const struct dlock__lease *l)
{
	const dlock_lease *h;

	for (h = l->handles; h && c->ls.cb_handle; h = h->next)
		if (h == c->ls.cb_handle)
			return 1;
	return 0;
}

/* A handle's callback still to come is counted by the client whose
 * thread will call it. */
static void move_counts(struct dlock__lease *l, struct dlock_client *from,
			struct dlock_client *to)
{
	dlock_lease *h;

	for (h = l->handles; h; h = h->next) {
		if (h->notify) {
			from->ls.notify_count--;
			to->ls.notify_count++;
		}
		if (h->risk_notify) {
			from->ls.risk_count--;
			to->ls.risk_count++;
		}
		if (h->contended_notify) {
			from->ls.contended_count--;
			to->ls.contended_count++;
		}
	}
}

void dlock__lease_move(struct dlock__lease *l, struct dlock_client *from,
		       struct dlock_client *to, int unlocking)
{
	for (;;) {
		lock_two(from, to);
		if (atomic_load(&l->c) != from || !l->linked ||
		    (!unlocking &&
		     (l->dead || l->unlocking || l->nhandles == 0))) {
			unlock_two(from, to);
			return;
		}
		if (!in_callback(from, l))
			break;
		unlock_two(from, to);
		pthread_mutex_lock(&from->mu);
		while (atomic_load(&l->c) == from && in_callback(from, l))
			pthread_cond_wait(&from->idle_cv, &from->mu);
		pthread_mutex_unlock(&from->mu);
	}
	/* off from's list, the list's reference kept for to's */
	if (l->prev)
		l->prev->next = l->next;
	else
		from->ls.leases = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->prev = NULL;
	l->next = to->ls.leases;
	if (to->ls.leases)
		to->ls.leases->prev = l;
	to->ls.leases = l;
	move_counts(l, from, to);
	atomic_store(&l->c, to);
	/* a renewal still in flight on from ends there without it
	 * (dlock_reply.c); to renews it now */
	l->moving = 0;
	l->refreshing = 0;
	l->renew_at = dlock__now();
	/* a thread of from waiting for the name finds it free there: its
	 * LOCK is told MOVED, and follows the name (wait_turn would
	 * otherwise wait for a release from never hears of) */
	dlock__name_wake(from, l->name);
	unlock_two(from, to);
	dlock__wake(to);
}

void dlock__multi_giveback(struct dlock_client *c, struct dlock__req *q)
{
	struct dlock__multi *m = q->multi;
	int i;

	for (i = 0; i < m->ngrants; i++)
		dlock__cleanup_grant(c, m->names[i], m->tokens[i]);
	m->ngrants = 0;
}

void dlock__cleanup_grant(struct dlock_client *c, const char *name,
			  uint64_t token)
{
	struct dlock__lease *l = dlock__lease_find(c, name, token);

	/* A hold on a lease we keep is undone by one UNLOCK; a lease of its
	 * own is released entirely (last_hold: UNLOCK until RELEASED). */
	dlock__internal(c, DLOCK__UNLOCK, name, token, !(l && l->nhandles > 0));
}
