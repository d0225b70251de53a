/* SPDX-License-Identifier: MIT */
/*
 * fuzz_client.c -- libFuzzer target: libdlock's handling of what the
 * server says (client/lib/dlock_reply.c, dlock__line_in), on a client built in
 * memory: no thread, a connection to /dev/null (writes of clean-ups and
 * renewals go nowhere).
 *
 * The client starts with leases (each with handles, as a caller's grants
 * leave them) and, in its FIFO, requests of every kind, as written on the
 * wire: LOCKs of callers that gave up (their grant or queue place must be
 * cleaned up), renewals and confirmations of the leases, UNLOCK, REFRESH,
 * CHECK, CANCEL, STATUS, STATS, PING. The input is then a stream of
 * lines, most made from a grammar so that they get deep -- a reply word
 * (right or wrong for the request at the head), with its values and the
 * head's id= tag (or another), or an event about a known lease or lock --
 * and some raw bytes; more requests join the FIFO as the input says.
 *
 * After every line: no crash, no undefined behaviour, and the client's
 * records stay true: requests on the FIFO are "sent" and those on the
 * waiting list "waiting", none of them done; every lease on the list is
 * linked, counts its handles right, and has at least as many references;
 * notify_count is the number of handles whose on_lost is due; a lease
 * never counts on more than a REFRESH of it on the FIFO (written, not yet
 * answered) may have left it (it can shorten the lease), nor on more than
 * its TTL from now, whatever the server said. A line the
 * client refuses (-1: the stream is out of step) ends the case, as the
 * reader would drop the connection. At the end everything is freed (LSan
 * reports a leak).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/lib/dlock_private.h"
#include "tests/fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NLEASE 3
#define NKEEP  64 /* caller requests and lease records kept track of */

#define CHECK(cond, what)                                                      \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_client: %s\n", what);            \
			abort();                                               \
		}                                                              \
	} while (0)

static const char *const names[] = {"a", "b", "c"};
static uint64_t tokens[NLEASE] = {
	1795000000000000001ULL, 1795000000000000002ULL, 1795000000000000003ULL};

/* The fuzzer is the callers: the requests it waits for (freed once done,
 * their handles kept) and every lease record a handle of it points at. */
static struct dlock__req *calls[NKEEP];
static size_t ncalls;
static struct dlock__lease *records[NKEEP * 2];
static size_t nrecords;

static void keep_record(struct dlock__lease *l)
{
	size_t i;

	for (i = 0; i < nrecords; i++)
		if (records[i] == l)
			return;
	CHECK(nrecords < NKEEP * 2, "too many lease records");
	records[nrecords++] = l;
}

/* Callers whose call is over: keep the handle a grant gave them. */
static void harvest(void)
{
	size_t i, k = 0;

	for (i = 0; i < ncalls; i++) {
		if (!calls[i]->done) {
			calls[k++] = calls[i];
			continue;
		}
		if (calls[i]->rc == 0 && calls[i]->handle)
			keep_record(calls[i]->handle->l);
		dlock__req_free(calls[i]);
	}
	ncalls = k;
}

static struct dlock_client *client_new(void)
{
	struct dlock_client *c = calloc(1, sizeof(*c));

	CHECK(c, "out of memory");
	pthread_mutex_init(&c->mu, NULL);
	dlock__cond_init(&c->idle_cv);
	dlock_options_init(&c->opt);
	c->opt.owner = c->owner;
	snprintf(c->owner, sizeof(c->owner), "fz");
	c->conn.fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	CHECK(c->conn.fd >= 0 && pipe2(c->wake, O_NONBLOCK | O_CLOEXEC) == 0,
	      "set-up");
	c->timer = -1;
	c->conn.state = DLOCK__UP;
	c->hello.default_ttl = 30000;
	dl_linebuf_init(&c->conn.lb);
	return c;
}

/* A lease of `name` with `holds` handles, as grants to a caller make it. */
static void lease_new(struct dlock_client *c, int i, int holds)
{
	struct dlock__req *q = dlock__req_new(DLOCK__LOCK, names[i], 0);

	CHECK(q, "out of memory");
	q->ttl = 3000;
	while (holds-- > 0)
		CHECK(dlock__lease_grant(c, q, tokens[i], 3000, dlock__now()) ==
			      0,
		      "grant");
	dlock__req_free(q);
}

/* Put a request on the FIFO: internal (renewals, clean-ups), given up by
 * its caller (the client frees it when its outcome comes), or a LOCK whose
 * caller waits (its grant, or its confirmation after * GRANTED, makes a
 * handle). */
static void request(struct dlock_client *c, struct input *in)
{
	static const enum dlock__op ops[] = {
		DLOCK__LOCK,	      DLOCK__LOCK,    DLOCK__LOCK,
		DLOCK__UNLOCK,	      DLOCK__REFRESH, DLOCK__RENEW,
		DLOCK__CHECK,	      DLOCK__CANCEL,  DLOCK__STATUS,
		DLOCK__STATS,	      DLOCK__PING,    DLOCK__UNLOCK_TOKEN,
		DLOCK__REFRESH_TOKEN, DLOCK__LOCKS,   DLOCK__BREAK};
	enum dlock__op op = ops[next(in) % (sizeof(ops) / sizeof(ops[0]))];
	int i = (int)(next(in) % NLEASE), internal;
	struct dlock__lease *l = dlock__lease_find(c, names[i], tokens[i]);
	struct dlock__req *q;

	int caller = op == DLOCK__LOCK && next(in) % 2 && ncalls < NKEEP;

	internal = op == DLOCK__RENEW || op == DLOCK__CANCEL;
	if ((op == DLOCK__UNLOCK || op == DLOCK__REFRESH ||
	     op == DLOCK__RENEW) &&
	    !l)
		op = DLOCK__PING; /* these need a lease record */
	if (!(q = dlock__req_new(op, names[i], internal)))
		return;
	q->abandoned = !internal && !caller;
	q->token = tokens[i];
	q->ttl = (int64_t)(next(in) % 4) * 1000;
	q->wait = next(in) % 2 ? -1 : 500;
	q->wait_end = q->wait < 0 ? DLOCK__NEVER : dlock__now() + q->wait;
	q->last_hold = next(in) % 2;
	if (l && (op == DLOCK__UNLOCK || op == DLOCK__REFRESH ||
		  op == DLOCK__RENEW)) {
		q->lease = l;
		l->refs++;
		if (op == DLOCK__RENEW)
			l->refreshing = 1;
	}
	if (dlock__req_write(c, q) != 0)
		dlock__req_free(q);
	else if (caller)
		calls[ncalls++] = q;
}

/* A line of the grammar, or raw bytes, into buf; returns its length. */
static size_t line_of(struct dlock_client *c, struct input *in, char *buf,
		      size_t cap)
{
	static const char *const words[] = {
		"OK GRANTED",	  "OK QUEUED",
		"NO BUSY",	  "OK RELEASED",
		"OK HELD",	  "NO NOT_HOLDER",
		"OK REFRESHED",	  "OK VALID",
		"NO STALE",	  "OK CANCELLED",
		"NO NOT_QUEUED",  "OK PONG",
		"OK STATS 2",	  "ERR UNAVAILABLE x",
		"ERR LIMIT x",	  "NO ALREADY_WAITING",
		"OK STATUS",	  "* GRANTED",
		"* TIMEOUT",	  "* EXPIRED",
		"* BYE shutdown", "k v"};
	unsigned k = next(in), i = next(in) % NLEASE;
	const char *tag = c->rq.fifo ? c->rq.fifo->tag : "r1";
	char holds[16] = "";
	size_t n = 0;

	if (k % 8 == 7) { /* raw */
		while (n < cap - 1 && in->n && *in->p != '\n' && n < 120)
			buf[n++] = (char)next(in);
		buf[n] = '\0';
		return n;
	}
	if (next(in) % 8 == 0)
		tag = "r999"; /* out of step */
	if (k % 24 == 16)     /* STATUS */
		return (size_t)snprintf(
			buf, cap,
			"OK STATUS %s state=held token=%llu ttl_ms=%u count=%u "
			"owner=fz waiters=%u id=%s",
			names[i], (unsigned long long)tokens[i], next(in) * 13,
			next(in) % 3, next(in) % 3, tag);
	/* a grant's holds= (the lease's count), absent as from an older
	 * server: 1 is ours alone, more may be another client's too */
	if (next(in) % 2 == 0)
		snprintf(holds, sizeof(holds), " holds=%u", next(in) % 4);
	return (size_t)snprintf(
		buf, cap, "%s %s %llu %u%s id=%s",
		words[k % (sizeof(words) / sizeof(words[0]))], names[i],
		(unsigned long long)(next(in) % 4 ? tokens[i] : next(in)),
		next(in) * 97, holds, tag);
}

/* The client's records are true (see the top comment). */
static void check_client(struct dlock_client *c)
{
	struct dlock__req *q;
	struct dlock__lease *l;
	dlock_lease *h;
	int n, notify = 0;

	for (q = c->rq.fifo; q; q = q->next)
		CHECK(q->where == DLOCK__SENT && !q->done, "a FIFO request");
	for (q = c->rq.waiting; q; q = q->next)
		CHECK(q->where == DLOCK__WAITING && !q->done,
		      "a waiting request");
	for (q = c->rq.fifo; q; q = q->next)
		if (q->lease && q->ttl > 0 && !q->lease->dead &&
		    (q->op == DLOCK__REFRESH || q->op == DLOCK__RENEW ||
		     q->op == DLOCK__RECLAIM))
			CHECK(atomic_load(&q->lease->deadline) <=
				      q->sent_at + q->ttl -
					      dlock__slack(q->ttl),
			      "a lease counts on more than a REFRESH in "
			      "flight may leave it");
	for (l = c->ls.leases; l; l = l->next) {
		CHECK(l->linked, "a listed lease not linked");
		/* whatever the server says, never a lease longer than asked */
		CHECK(l->dead || atomic_load(&l->ttl) <= 0 ||
			      atomic_load(&l->deadline) <=
				      dlock__now() + atomic_load(&l->ttl),
		      "a lease counts on more than its TTL");
		for (n = 0, h = l->handles; h; h = h->next, n++)
			notify += h->notify;
		CHECK(n == l->nhandles, "handle count");
		CHECK(l->refs >= l->nhandles + 1, "lease references");
	}
	CHECK(notify == c->ls.notify_count, "notify count");
}

static void free_list(struct dlock__req *q)
{
	struct dlock__req *n;

	for (; q; q = n) {
		n = q->next;
		dlock__req_free(q);
	}
}

/* Everything the client holds; lease records after the requests (which
 * hold references to them). */
static void client_free(struct dlock_client *c)
{
	struct dlock__lease *l;
	dlock_lease *h, *hn;
	size_t i;

	harvest();
	free_list(c->rq.fifo);
	free_list(c->rq.waiting);
	free_list(c->rq.unsent);
	if (c->rq.stats_req)
		dlock__req_free(c->rq.stats_req);
	ncalls = 0; /* those not done were on the lists */
	for (l = c->ls.leases; l; l = l->next)
		keep_record(l);
	for (i = 0; i < nrecords; i++) {
		for (h = records[i]->handles; h; h = hn) {
			hn = h->next;
			free(h);
		}
		free(records[i]);
	}
	nrecords = 0;
	close(c->conn.fd);
	close(c->wake[0]);
	close(c->wake[1]);
	pthread_cond_destroy(&c->idle_cv);
	pthread_mutex_destroy(&c->mu);
	free(c->conn.out);
	free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = {data, size};
	struct dlock_client *c = client_new();
	char line[DL_LINE_MAX + 1];
	size_t i, len;

	for (i = 0; i < NLEASE; i++) {
		lease_new(c, (int)i, 1 + (int)(i % 2));
		keep_record(dlock__lease_find(c, names[i], tokens[i]));
	}
	for (i = 0; i < 6; i++)
		request(c, &in);
	pthread_mutex_lock(&c->mu);
	while (in.n > 0) {
		if (next(&in) % 4 == 0)
			request(c, &in);
		len = line_of(c, &in, line, sizeof(line));
		if (dlock__line_in(c, line, len) < 0)
			break; /* the reader drops the connection */
		check_client(c);
		harvest();
	}
	pthread_mutex_unlock(&c->mu);
	client_free(c);
	return 0;
}
