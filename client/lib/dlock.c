/* SPDX-License-Identifier: MIT */
/*
 * dlock.c -- libdlock, the C client of dlockd (dlock.h): the public calls.
 *
 * The library is ten files around one struct dlock_client:
 * dlock.c (this file: argument checks, thread exclusion, results),
 * dlock_ask.c (the calls that ask rather than lock, and those on a lease
 * by its name and token), dlock_req.c (requests and lease records), dlock_io.c
 * (the background thread: connection, reader, timers), dlock_reply.c (replies
 * and events), dlock_tls.c (the transport), dlock_watch.c (watches),
 * dlock_desc.c (descriptions), dlock_err.c (the thread's last error
 * text) and dlock_route.c (a partitioned service: a client of each
 * partition, and the calls routed to them). dlock_private.h holds the
 * shared structures.
 *
 * Threads. One mutex, c->mu, protects the whole client. A calling thread
 * takes it, formats its request with the proto codec, appends the bytes to
 * the output buffer, pushes them to the non-blocking socket (what the
 * kernel does not take is left to the background thread), puts the
 * request on the FIFO of requests awaiting a reply, and waits on the
 * request's own condition variable, with a deadline (request_timeout_ms;
 * for a queued LOCK, its wait plus that much; nothing for wait forever).
 * The background thread is the only reader of the socket: it splits lines
 * (dl_linebuf), reads them (dl_parse_reply), gives each reply to the oldest
 * request on the FIFO, routes events by their id= tag, and wakes the
 * caller. Its poll() timeout also drives lease renewal, lost-lease guards
 * and reconnects; a self-pipe wakes it. It releases the mutex only in
 * poll() and while it calls on_lost, so that callback may use the lease
 * accessors (atomics, no lock) and the application's own locks.
 *
 * Ownership.
 *   - dlock_client: the caller's from dlock_connect() to dlock_close().
 *     dlock_close() must not race with other calls on the client: the
 *     application stops its threads first. Threads still blocked in a call
 *     (waiting for a reply or a lock) are woken with DLOCK_ECANCELED, and
 *     close waits until they have left, but a call that starts after close
 *     began uses freed memory.
 *   - dlock_lease handle: the caller's from a successful dlock_lock() until
 *     dlock_unlock() (which always frees it) or dlock_close() (which frees
 *     the handles left). Its name is valid as long as the handle.
 *   - a request: the caller's until written; then on the list that holds it
 *     (unsent, FIFO, waiting); the caller frees it once it is done. If the
 *     caller gives up (timeout), the background thread frees it when its
 *     reply arrives, and cleans up after it: a LOCK granted to nobody is
 *     UNLOCKed, a queued one CANCELled.
 *   - a lease record (struct dlock__lease) is reference-counted: the list,
 *     each handle, each request in flight about it.
 *
 * Locks and threads of one client. The server knows one owner per client,
 * so it would grant a lock held by one thread to another thread of the
 * same client as a reentry. The library therefore keeps mutual exclusion
 * between the threads of a client itself: a thread that asks for a name
 * held (or being acquired) by another thread of the client waits locally,
 * within its wait_ms (wait_ms 0: DLOCK_EBUSY), and sends its LOCK once the
 * other thread has unlocked its last handle. Local waiters queue in
 * arrival order, each on its own condition variable, and a name that
 * frees wakes only the first of its waiters (no thundering herd inside
 * the process either). Reentrancy is per thread: the thread that acquired
 * a lease may lock the name again, at once, and the server grants it as a
 * reentry (same token, one more hold, one more handle). A handle passed
 * to another thread may be unlocked there, but that thread cannot
 * re-enter it. Each handle of a lost lease gets its own on_lost call.
 *
 * Deadlines. A grant answered at once ("OK GRANTED n t ttl") counts from
 * the moment the LOCK was sent: deadline = send time + ttl - slack, with
 * slack = 2 ms + ttl/1000 for the server's ms rounding and the difference
 * of clock rates. A grant that comes as "* GRANTED" started at the server
 * before the event reached us, at a time we cannot know: the thread sends
 * a REFRESH at once and counts from that REFRESH's send time; the caller
 * returns when it is confirmed. Renewals and dlock_refresh() count from
 * their own send times. A lease is lost when the server says so
 * (* EXPIRED, NO NOT_HOLDER) or when now >= deadline - lost_guard without
 * a confirmed refresh: the guard fires on the thread's own timer, so
 * on_lost runs before the local deadline even if the server is frozen.
 * With renew off the guard still holds: the application then refreshes
 * (dlock_refresh) before deadline - lost_guard, or loses the lease.
 *
 * Owner ids. The server knows one holder per owner id, whatever the
 * connection, and grants a second LOCK of the id as a reentry. A grant
 * states the lease's holds (holds=): one with more than this client's
 * own and the new one is another client's lease (a process sharing the
 * id and key), which the reply code gives back, one hold, failing the
 * acquire with DLOCK_EHELDBYOWNER (dlock.h, options.owner). Reusing an id
 * across reconnects keeps a client's leases; across processes it lets
 * dlock_unlock_token() and dlock_refresh_token() reach a lease another
 * process took. Those two make no lease record: the lease stays the other
 * process's to renew, and on_lost never hears of it.
 */
#include "client/lib/dlock_private.h"
#include "proto/desc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <sys/random.h>
#include <unistd.h>

#define DLOCK__OWNER_PREFIX "dlock-"
#define DLOCK__PASSWORD_MAX 512 /* AUTH <secret> must fit a request line */

/* ---- small things -------------------------------------------------------- */

const char *dlock_strerror(int err)
{
	static const char *const texts[] = {
		"success",
		"lock is held by another owner",
		"timed out",
		"not the holder of this lease",
		"token does not hold the lock",
		"lease was lost",
		"cannot connect to dlockd",
		"connection closed",
		"authentication failed",
		"server persistence unavailable, try later",
		"server limit reached",
		"invalid argument",
		"protocol error",
		"out of memory",
		"server error",
		"client is closing",
		"the lock lives with another limit",
		"exclusive asked while holding shared: it would wait for itself",
		"TLS failed: the server's certificate or name was not "
		"accepted, or it refused ours",
		"permission denied",
		"waiting would deadlock: a cycle of owners waiting for "
		"each other",
		"held by this owner in another process (a shared owner "
		"id): not granted",
		"the server is of another cluster (another lock table)",
		"the name's partition could not be found: moved again and "
		"again (the partition map is changing)",
	};

	if (err <= 0 && -err < (int)(sizeof(texts) / sizeof(texts[0])))
		return texts[-err];
	return "unknown error";
}

int64_t dlock_now_ms(void)
{
	return dlock__now();
}

void dlock_options_init(struct dlock_options *o)
{
	memset(o, 0, sizeof(*o));
	o->host = DLOCK__DEFAULT_HOST;
	o->port = DL_DEFAULT_PORT;
	o->connect_timeout_ms = 2000;
	o->request_timeout_ms = 5000;
	o->reconnect = 1;
	o->renew = 1;
	o->describe = DLOCK_DESCRIBE_NAME;
}

const char *dlock_owner(const dlock_client *c)
{
	return c ? c->owner : "";
}

const char *dlock_owner_key(const dlock_client *c)
{
	return c ? c->owner_key : "";
}

const char *dlock_server_role(const dlock_client *c)
{
	switch (c ? atomic_load(&((dlock_client *)c)->hello.role)
		  : DLOCK__ROLE_UNKNOWN) {
	case DLOCK__ROLE_ACTIVE:
		return "active";
	case DLOCK__ROLE_STANDBY:
		return "standby";
	default:
		return "";
	}
}

const char *dlock_cluster(const dlock_client *c)
{
	return c ? c->hello.cluster : "";
}

/* A calling thread enters (takes c->mu) and leaves (releases it). */
static int enter(struct dlock_client *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		pthread_mutex_unlock(&c->mu);
		return DLOCK_ECANCELED;
	}
	c->ncallers++;
	return 0;
}

static void leave(struct dlock_client *c)
{
	if (--c->ncallers == 0 && c->closing)
		pthread_cond_broadcast(&c->idle_cv);
	pthread_mutex_unlock(&c->mu);
}

int dlock__enter(struct dlock_client *c)
{
	return enter(c);
}

void dlock__leave(struct dlock_client *c)
{
	leave(c);
}

int dlock__hold(struct dlock_client *c)
{
	int err = enter(c);

	if (err == 0)
		pthread_mutex_unlock(&c->mu);
	return err;
}

void dlock__unhold(struct dlock_client *c)
{
	pthread_mutex_lock(&c->mu);
	leave(c);
}

struct dlock_client *dlock__lease_client(struct dlock_client *c,
					 const dlock_lease *h)
{
	struct dlock_client *lc = c && h ? atomic_load(&h->l->c) : NULL;

	if (lc && lc != c && lc->parent == c)
		return lc;
	return c;
}

/* Enter the client that holds h's lease (c, or its leg), which a move to
 * another partition may change until its mu is held. NULL with *err
 * (DLOCK_ECANCELED) once closing. */
static struct dlock_client *enter_lease(struct dlock_client *c,
					const dlock_lease *h, int *err)
{
	struct dlock_client *lc;

	for (;;) {
		lc = dlock__lease_client(c, h);
		if ((*err = enter(lc)) < 0)
			return NULL;
		if (dlock__lease_client(c, h) == lc)
			return lc;
		leave(lc);
	}
}

/* ---- connect and close --------------------------------------------------- */

static int check_options(const struct dlock_options *o)
{
	const char *p;

	if (o->connect_timeout_ms <= 0 || o->request_timeout_ms <= 0 ||
	    o->lost_guard_ms < 0)
		return DLOCK_EINVAL;
	if (!o->servers && !o->unix_path && (o->port <= 0 || o->port > 65535))
		return DLOCK_EINVAL;
	if (o->servers && !o->servers[0])
		return DLOCK_EINVAL;
	if (o->owner_key &&
	    dl_check_owner_secret(o->owner_key, strlen(o->owner_key)) < 0)
		return DLOCK_EINVAL;
	if (o->owner && dl_check_owner(o->owner, strlen(o->owner)) < 0)
		return DLOCK_EINVAL;
	if (o->cluster &&
	    (strlen(o->cluster) != DL_CLUSTER_ID_LEN ||
	     strspn(o->cluster, "0123456789abcdef") != DL_CLUSTER_ID_LEN))
		return DLOCK_EINVAL;
	/* a client certificate goes with its key */
	if (!(o->tls_cert && o->tls_cert[0]) != !(o->tls_key && o->tls_key[0]))
		return DLOCK_EINVAL;
	if (o->user && dl_check_user(o->user, strlen(o->user)) < 0)
		return DLOCK_EINVAL;
	if (o->desc_pid < 0)
		return DLOCK_EINVAL;
	if (o->password) {
		if (strlen(o->password) > DLOCK__PASSWORD_MAX)
			return DLOCK_EINVAL;
		for (p = o->password; *p; p++) {
			unsigned char ch = (unsigned char)*p;

			if (ch < 0x21 || ch > 0x7e)
				return DLOCK_EINVAL; /* one word on the wire */
		}
	}
	return 0;
}

/* 64 random bits, never 0: an acquire's request id (LOCK req=), the same
 * on every write of it, so that one sent again after a drop finds its
 * grant (dlock.h). */
uint64_t dlock__request_id(const void *salt)
{
	uint64_t x;

	if (getrandom(&x, sizeof(x), 0) != (ssize_t)sizeof(x))
		x = (uint64_t)dlock__now() * 0x9e3779b97f4a7c15u ^
		    (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)salt;
	return x ? x : 1;
}

static void random_owner(char *out, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char b[8];
	char *p = out;
	size_t i;

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
		uint64_t x = (uint64_t)dlock__now() * 0x9e3779b97f4a7c15u ^
			     (uint64_t)getpid() ^ (uint64_t)(uintptr_t)out;

		for (i = 0; i < sizeof(b); i++, x >>= 8)
			b[i] = (unsigned char)x;
	}
	p += snprintf(out, n, "%s", DLOCK__OWNER_PREFIX);
	for (i = 0; i < sizeof(b); i++) {
		*p++ = hex[b[i] >> 4];
		*p++ = hex[b[i] & 15];
	}
	*p = '\0';
}

static char *dup_or_null(const char *s, int *fail)
{
	char *d;

	if (!s || !s[0])
		return NULL;
	if (!(d = strdup(s)))
		*fail = 1;
	return d;
}

/* Free the requests still held by the client: callers get `err`. */
static void cancel_list(struct dlock_client *c, struct dlock__req *q, int err)
{
	struct dlock__req *next;

	for (; q; q = next) {
		next = q->next;
		q->next = NULL;
		dlock__req_finish(c, q, err);
	}
}

static void client_free(struct dlock_client *c)
{
	struct dlock__lease *l, *ln;
	dlock_lease *h, *hn;

	for (l = c->ls.leases; l; l = ln) {
		ln = l->next;
		for (h = l->handles; h; h = hn) {
			hn = h->next;
			free(h);
		}
		free(l);
	}
	dlock__io_close(c);
	dlock__tls_free(c->conn.tls);
	if (c->wake[0] >= 0)
		close(c->wake[0]);
	if (c->wake[1] >= 0)
		close(c->wake[1]);
	if (c->timer >= 0)
		close(c->timer);
	dlock__watch_free(c);
	pthread_cond_destroy(&c->w.cv);
	pthread_cond_destroy(&c->idle_cv);
	pthread_mutex_destroy(&c->mu);
	free(c->conn.out);
	free(c->host);
	free(c->unix_path);
	free(c->password);
	free(c->user);
	free(c->addr.servers);
	free(c->tls_ca);
	free(c->tls_cert);
	free(c->tls_key);
	free(c->tls_server_name);
	free(c);
}

void dlock__cancel(struct dlock_client *c)
{
	struct dlock__lwait *w;

	pthread_mutex_lock(&c->mu);
	c->closing = 1;
	if (c->rq.stats_req) {
		c->rq.stats_req->next = NULL;
		cancel_list(c, c->rq.stats_req, DLOCK_ECANCELED);
		c->rq.stats_req = NULL;
	}
	cancel_list(c, c->rq.fifo, DLOCK_ECANCELED);
	cancel_list(c, c->rq.unsent, DLOCK_ECANCELED);
	cancel_list(c, c->rq.waiting, DLOCK_ECANCELED);
	c->rq.fifo = c->rq.fifo_tail = c->rq.unsent = c->rq.unsent_tail = NULL;
	c->rq.waiting = NULL;
	for (w = c->lwait; w; w = w->next)
		pthread_cond_signal(&w->cv);
	pthread_cond_broadcast(&c->w.cv);
	pthread_mutex_unlock(&c->mu);
}

void dlock_close(dlock_client *c)
{
	if (!c)
		return;
	dlock__cancel(c);
	/* the legs first: their callers (routed calls) leave with
	 * DLOCK_ECANCELED, and their threads stop sending watch events
	 * here */
	dlock__router_close(c);
	if (c->thread_started) {
		dlock__wake(c);
		pthread_join(c->thread, NULL);
	}
	pthread_mutex_lock(&c->mu);
	while (c->ncallers > 0)
		pthread_cond_wait(&c->idle_cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	dlock__router_free(c);
	client_free(c);
}

/* AUTH and HELLO on the first connection, within the connect timeout. */
static int handshake(struct dlock_client *c, int64_t deadline)
{
	struct dlock__req *q;
	int err = 0;

	pthread_mutex_lock(&c->mu);
	if (c->password) {
		if (!(q = dlock__req_new(DLOCK__AUTH, NULL, 0))) {
			err = DLOCK_ENOMEM;
			goto out;
		}
		q->deadline = deadline;
		err = dlock__call(c, &q);
		dlock__req_free(q);
		if (err < 0)
			goto out;
	}
	if (!(q = dlock__req_new(DLOCK__HELLO, NULL, 0))) {
		err = DLOCK_ENOMEM;
		goto out;
	}
	q->deadline = deadline;
	err = dlock__call(c, &q);
	dlock__req_free(q);
	if (err == 0 && c->hello.auth_required)
		err = DLOCK_EAUTH;
	/* who we are: a refusal fails nothing (dlock_desc.c) */
	if (err == 0 && dlock__describing(c)) {
		if (!(q = dlock__req_new(DLOCK__DESCRIBE, NULL, 0))) {
			err = DLOCK_ENOMEM;
			goto out;
		}
		q->deadline = deadline;
		err = dlock__call(c, &q);
		dlock__req_free(q);
	}
	c->conn.initial = 0;
out:
	if (err == DLOCK_ETIMEDOUT)
		dlock__why(c, c->addr.addr_i,
			   "accepted the connection but did not "
			   "answer in time");
	pthread_mutex_unlock(&c->mu);
	return err == DLOCK_ETIMEDOUT ? DLOCK_ECONNECT : err;
}

/* Sleep *pause ms (DLOCK__REDIRECT_MS if 0), never past deadline; the next
 * pause is twice as long, up to DLOCK__REDIRECT_MAX_MS. */
static void pause_before_asking_again(int64_t *pause, int64_t deadline)
{
	int64_t ms = *pause ? *pause : DLOCK__REDIRECT_MS;

	*pause = ms * 2 < DLOCK__REDIRECT_MAX_MS ? ms * 2
						 : DLOCK__REDIRECT_MAX_MS;
	if (ms > deadline - dlock__now())
		ms = deadline - dlock__now();
	if (ms > 0)
		usleep((useconds_t)ms * 1000);
}

/* The server answered as a standby: connect to the active it named, or to
 * the next server, to say HELLO again, while the connect timeout lasts.
 * Only the first move to a named active is made at once: back at a
 * standby (it named itself or nobody, or the active it names does not
 * answer: it died, and a take-over is under way), the client pauses, the
 * pause doubling. 1 when connected again, 0 if the handshake failed for
 * another reason, DLOCK_ECONNECT when time is up. */
static int redirect(struct dlock_client *c, int64_t deadline)
{
	int hint, from, err, named;

	pthread_mutex_lock(&c->mu);
	hint = c->addr.hint_i;
	from = c->addr.addr_i;
	if (!c->addr.standby || c->conn.state != DLOCK__DEAD) {
		pthread_mutex_unlock(&c->mu);
		return 0;
	}
	if (c->hello.cluster_refused >= c->addr.naddrs) {
		pthread_mutex_unlock(&c->mu);
		return DLOCK_ECLUSTER; /* every server: another cluster */
	}
	c->addr.standby = 0;
	c->addr.hint_i = -1;
	named = hint >= 0 && hint != from;
	c->addr.addr_i = named ? hint : (from + 1) % c->addr.naddrs;
	if (named && c->addr.redirect_pause == 0) {
		c->addr.redirect_pause = DLOCK__REDIRECT_MS;
	} else {
		pthread_mutex_unlock(&c->mu);
		pause_before_asking_again(&c->addr.redirect_pause, deadline);
		pthread_mutex_lock(&c->mu);
	}
	/* The thread sleeps while the state is DEAD; the connect is made
	 * under the lock, as nothing else runs yet. */
	if ((err = dlock__connect_sync(c, deadline)) == 0) {
		c->conn.state = DLOCK__UP;
		c->conn.initial = 1;
		dl_linebuf_init(&c->conn.lb);
		c->conn.out_off = c->conn.out_len = 0;
	}
	pthread_mutex_unlock(&c->mu);
	if (err < 0)
		return err;
	dlock__wake(c);
	return 1;
}

/* A leg says what its router says of itself; a client that may become
 * a router keeps the names of the TLS files, which dlock_connect only
 * borrowed, for the legs it makes later. */
static void keep_for_legs(struct dlock_client *c, const struct dlock_options *o,
			  struct dlock_client *parent, int *fail)
{
	if (parent) {
		c->desc = parent->desc;
		c->parent = parent;
		return;
	}
	c->tls_ca = dup_or_null(o->tls_ca, fail);
	c->tls_cert = dup_or_null(o->tls_cert, fail);
	c->tls_key = dup_or_null(o->tls_key, fail);
	c->tls_server_name = dup_or_null(o->tls_server_name, fail);
}

/* connect_from gives up on c: the thread's dlock_last_error() says why
 * it could not connect, and c is freed (closed, once its thread runs). */
static int connect_failed(struct dlock_client *c, int err)
{
	if (err == DLOCK_ECONNECT || err == DLOCK_ECLUSTER) {
		pthread_mutex_lock(&c->mu);
		dlock__why_report(c);
		pthread_mutex_unlock(&c->mu);
	}
	if (c->thread_started)
		dlock_close(c);
	else
		client_free(c);
	return err;
}

/* One attempt of dlock_connect: a client that starts with server
 * `first` (options.servers) and must have said HELLO within its share of
 * the time left, when servers are left to try after this one (`tried`
 * were before it). *at is the server the handshake was tried on, *naddrs
 * how many addresses there are. */
static int connect_from(const struct dlock_options *o,
			struct dlock_client *parent, int first, int tried,
			int64_t deadline, int *at, int *naddrs,
			dlock_client **out)
{
	struct dlock_client *c;
	int64_t hs_deadline = deadline;
	int err, r, fail = 0;

	*at = -1;
	*naddrs = 1;
	if (!(c = calloc(1, sizeof(*c))))
		return DLOCK_ENOMEM;
	c->conn.fd = c->wake[0] = c->wake[1] = -1;
	/* without it (an old kernel), the thread sleeps in steps */
	c->timer = timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC);
	pthread_mutex_init(&c->mu, NULL);
	dlock__cond_init(&c->idle_cv);
	dlock__cond_init(&c->w.cv);
	c->opt = *o;
	c->host = dup_or_null(o->host ? o->host : DLOCK__DEFAULT_HOST, &fail);
	c->unix_path = dup_or_null(o->unix_path, &fail);
	c->password = dup_or_null(o->password, &fail);
	c->user = dup_or_null(o->user, &fail);
	c->addr.servers = dup_or_null(o->servers, &fail);
	c->opt.servers = c->addr.servers;
	c->addr.failed_i = c->addr.hint_i = -1;
	c->opt.host = c->host;
	c->opt.unix_path = c->unix_path;
	c->opt.password = c->password;
	c->opt.user = c->user;
	c->opt.owner = c->owner;
	if (o->owner)
		snprintf(c->owner, sizeof(c->owner), "%s", o->owner);
	else
		random_owner(c->owner, sizeof(c->owner));
	if (o->owner_key)
		snprintf(c->owner_key, sizeof(c->owner_key), "%s",
			 o->owner_key);
	dlock__describe(c, o);
	c->opt.desc_host = c->opt.desc_cmd = NULL; /* borrowed: not kept */
	keep_for_legs(c, o, parent, &fail);
	if (o->cluster)
		snprintf(c->hello.cluster, sizeof(c->hello.cluster), "%s",
			 o->cluster);
	c->opt.cluster = o->cluster ? c->hello.cluster : NULL;
	c->hello.default_ttl = DL_DEFAULT_TTL_MS;
	c->conn.backoff = DLOCK__BACKOFF_MIN_MS;
	dl_linebuf_init(&c->conn.lb);
	if (fail || (!c->host && !c->unix_path) ||
	    pipe2(c->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
		client_free(c);
		return DLOCK_ENOMEM;
	}
	err = dlock__resolve(c);
	*naddrs = c->addr.naddrs; /* 0: no name resolves */
	if (err < 0 || (err = dlock__tls_new(c, o)) < 0)
		return connect_failed(c, err);
	c->addr.addr_i = first % c->addr.naddrs;
	if (c->addr.naddrs > tried + 1)
		hs_deadline = dlock__now() + (deadline - dlock__now()) /
						     (c->addr.naddrs - tried);
	if ((err = dlock__connect_sync(c, deadline)) < 0)
		return connect_failed(c, err);
	*at = c->addr.addr_i;
	c->conn.state = DLOCK__UP;
	c->conn.initial = 1;
	if (pthread_create(&c->thread, NULL, dlock__thread_main, c) != 0) {
		client_free(c);
		return DLOCK_ENOMEM;
	}
	c->thread_started = 1;
	while ((err = handshake(c, hs_deadline)) < 0) {
		*at = c->addr.addr_i;
		if ((r = redirect(c, deadline)) <= 0)
			return connect_failed(c, r < 0 ? r : err);
	}
	*out = c;
	return 0;
}

/* dlock_connect of a client, or of a leg of router `parent`. */
static int connect_opts(const struct dlock_options *o,
			struct dlock_client *parent, dlock_client **out)
{
	int64_t deadline, pause = 0;
	int err, at, n, tried = 0, first = 0;

	if ((err = check_options(o)) < 0)
		return err;
	deadline = dlock__now() + o->connect_timeout_ms;
	/* A server that accepts the connection and never answers (stopped,
	 * hung) must not use up the whole connect timeout when others are
	 * listed: each server's handshake gets an equal share of the time
	 * left, and one that times out is passed over for the next. A
	 * refused connection costs nothing (dlock__connect_sync goes on).
	 * When no server of a cluster serves (all refuse, or the standbys
	 * name an active that does not answer), a take-over is under way:
	 * the list is tried again after a pause, while time is left. One
	 * server that refuses is an answer: it is given at once. */
	for (;;) {
		err = connect_from(o, parent, first, tried, deadline, &at, &n,
				   out);
		if (err != DLOCK_ECONNECT || n == 0 || dlock__now() >= deadline)
			return err;
		if (at >= 0 && ++tried < n) {
			first = at + 1;
			continue;
		}
		if (!o->servers)
			return err;
		pause_before_asking_again(&pause, deadline);
		if (dlock__now() >= deadline)
			return err; /* dlock_last_error(): the last try's */
		first = tried = 0;
	}
}

int dlock_connect(const struct dlock_options *o, dlock_client **out)
{
	struct dlock_options def;
	int err;

	dlock__last_error_clear();
	if (!out)
		return DLOCK_EINVAL;
	*out = NULL;
	if (!o) {
		dlock_options_init(&def);
		o = &def;
	}
	if ((err = connect_opts(o, NULL, out)) < 0)
		return err;
	/* a partitioned service: this client routes (dlock_route.c) */
	dlock__router_start(*out);
	dlock__last_error_clear();
	return 0;
}

int dlock__leg_connect(struct dlock_client *c, const char *servers,
		       struct dlock_client **out)
{
	char key[DL_OWNER_SECRET_MAX + 1];
	struct dlock_options o = c->opt;

	pthread_mutex_lock(&c->mu);
	snprintf(key, sizeof(key), "%s", c->owner_key);
	pthread_mutex_unlock(&c->mu);
	o.servers = servers;
	o.unix_path = NULL;
	o.owner = c->owner;
	/* the key the first connection proved or was given: one owner in
	 * every partition */
	o.owner_key = key[0] ? key : NULL;
	o.cluster = NULL; /* each partition is a cluster of its own */
	o.tls_ca = c->tls_ca;
	o.tls_cert = c->tls_cert;
	o.tls_key = c->tls_key;
	o.tls_server_name = c->tls_server_name;
	o.desc_host = o.desc_cmd = NULL; /* the router's is copied */
	*out = NULL;
	return connect_opts(&o, c, out);
}

/* ---- locking ------------------------------------------------------------- */

/* Another thread of this client holds `name`, is unlocking it, or is
 * acquiring it: the calling thread must wait its turn. */
static int name_busy(const struct dlock_client *c, const char *name,
		     pthread_t self)
{
	const struct dlock__lease *l;

	for (l = c->ls.leases; l; l = l->next) {
		if (strcmp(l->name, name) != 0)
			continue;
		if (l->unlocking ||
		    (l->nhandles > 0 && !pthread_equal(l->holder, self)))
			return 1;
	}
	return dlock__name_acquiring(c, name);
}

/* Another thread waits for `name` ahead of w (FIFO among local waiters). */
static int queued_ahead(const struct dlock_client *c, const char *name,
			const struct dlock__lwait *w)
{
	const struct dlock__lwait *p;

	for (p = c->lwait; p && p != w; p = p->next)
		if (strcmp(p->name, name) == 0)
			return 1;
	return 0;
}

/* Wait, in arrival order, until no other thread of the client holds or
 * acquires `name`: 0, DLOCK_EBUSY (wait_ms 0), DLOCK_ETIMEDOUT or
 * DLOCK_ECANCELED. Only the first waiter for a name is woken when it
 * frees (dlock__name_wake): no herd. */
static int wait_turn(struct dlock_client *c, const char *name, int64_t wait_ms,
		     int64_t wait_end)
{
	pthread_t self = pthread_self();
	struct dlock__lwait me = {.name = name}, **pp;
	const struct dlock__lease *l;
	int err = 0;

	for (l = c->ls.leases; l; l = l->next)
		if (l->nhandles > 0 && !l->unlocking &&
		    pthread_equal(l->holder, self) &&
		    strcmp(l->name, name) == 0)
			return 0; /* a reentry: the others wait for us */
	if (!name_busy(c, name, self) && !queued_ahead(c, name, NULL))
		return 0;
	if (wait_ms == 0)
		return DLOCK_EBUSY;
	dlock__cond_init(&me.cv);
	for (pp = &c->lwait; *pp; pp = &(*pp)->next)
		;
	*pp = &me;
	while (name_busy(c, name, self) || queued_ahead(c, name, &me)) {
		if (c->closing) {
			err = DLOCK_ECANCELED;
			break;
		}
		if (dlock__cond_wait(&me.cv, &c->mu, wait_end) == ETIMEDOUT &&
		    dlock__now() >= wait_end) {
			err = DLOCK_ETIMEDOUT;
			break;
		}
	}
	for (pp = &c->lwait; *pp != &me; pp = &(*pp)->next)
		;
	*pp = me.next;
	pthread_cond_destroy(&me.cv);
	if (err && !name_busy(c, name, self))
		dlock__name_wake(c, name); /* pass on a turn we may have had */
	return err;
}

static void acq_add(struct dlock_client *c, struct dlock__req *q)
{
	q->aprev = NULL;
	q->anext = c->rq.acquiring;
	if (c->rq.acquiring)
		c->rq.acquiring->aprev = q;
	c->rq.acquiring = q;
	q->in_acq = 1;
}

void dlock_lock_options_init(struct dlock_lock_options *o)
{
	memset(o, 0, sizeof(*o));
	o->wait_ms = DLOCK_WAIT_FOREVER;
	o->mode = DLOCK_EXCLUSIVE;
}

int dlock_lock(dlock_client *c, const char *name, int64_t ttl_ms,
	       int64_t wait_ms, dlock_lease **out)
{
	struct dlock_lock_options o;

	dlock_lock_options_init(&o);
	o.ttl_ms = ttl_ms;
	o.wait_ms = wait_ms;
	return dlock_acquire(c, name, &o, out);
}

/* One try of an acquire that began at `start` with request id *reqid
 * (the id its last write carried comes back in it): a try that follows
 * a MOVED waits only what is left of the wait, with the same id, so that
 * the partition the name went to finds the grant or the place in the
 * queue the first one had. */
static int acquire_at(dlock_client *c, const char *name,
		      const struct dlock_lock_options *o, dlock_lease **out,
		      int64_t start, uint64_t *reqid)
{
	pthread_t self = pthread_self();
	struct dlock__req *q;
	int64_t now, wait_end, ttl_ms, wait_ms;
	int err;

	dlock__last_error_clear();
	if (out)
		*out = NULL;
	if (!c || !out || !o || dlock__bad_name(name))
		return DLOCK_EINVAL;
	ttl_ms = o->ttl_ms;
	wait_ms = o->wait_ms;
	if (dlock__bad_ms(ttl_ms) ||
	    (wait_ms != DLOCK_WAIT_FOREVER && dlock__bad_ms(wait_ms)) ||
	    (o->mode != DLOCK_EXCLUSIVE && o->mode != DLOCK_SHARED) ||
	    o->limit > DL_LIMIT_MAX ||
	    (o->mode == DLOCK_SHARED && o->limit > 1) ||
	    dlock__bad_ms(o->warn_ms) ||
	    (o->warn_ms && ttl_ms && o->warn_ms >= ttl_ms) ||
	    dlock__bad_ms(o->delay_ms) || o->delay_ms > DL_LOCK_DELAY_MAX_MS)
		return DLOCK_EINVAL;
	if ((err = enter(c)) < 0)
		return err;
	wait_end = wait_ms < 0 ? DLOCK__NEVER : start + wait_ms;
	if ((err = wait_turn(c, name, wait_ms, wait_end)) < 0)
		goto out;
	if (!(q = dlock__req_new(DLOCK__LOCK, name, 0))) {
		dlock__name_wake(c, name); /* our turn, unused */
		err = DLOCK_ENOMEM;
		goto out;
	}
	now = dlock__now();
	q->ttl = ttl_ms ? ttl_ms : c->hello.default_ttl;
	q->shared = o->mode == DLOCK_SHARED;
	q->limit = o->limit;
	q->warn = o->warn_ms;
	q->delay = o->delay_ms;
	q->notify = o->notify_waiters ? 1 : 0;
	q->reqid = *reqid;
	if (o->value && o->value[0])
		q->value[dl_desc_encode(o->value, strlen(o->value), q->value,
					DL_VALUE_MAX)] = '\0';
	if (wait_ms <= 0)
		q->wait = wait_ms < 0 ? -1 : 0;
	else
		q->wait = wait_end > now ? wait_end - now : 1;
	q->thread = self;
	q->deadline = now + c->opt.request_timeout_ms;
	acq_add(c, q);
	err = dlock__call(c, &q);
	if (q) {
		if (err == 0)
			*out = q->handle;
		*reqid = q->reqid;
		dlock__acq_remove(c, q);
		dlock__req_free(q);
	}
out:
	leave(c);
	return err;
}

int dlock_acquire(dlock_client *c, const char *name,
		  const struct dlock_lock_options *o, dlock_lease **out)
{
	struct dlock__hop hop = {0};
	int64_t start = dlock__now();
	uint64_t reqid = dlock__request_id(&hop);
	int err;

	while (dlock__route(c, name, &hop, &err))
		err = acquire_at(hop.leg, name, o, out, start, &reqid);
	return err;
}

int dlock_trylock(dlock_client *c, const char *name, int64_t ttl_ms,
		  dlock_lease **out)
{
	return dlock_lock(c, name, ttl_ms, 0, out);
}

/* ---- several locks at once ----------------------------------------------- */

void dlock_lock_all_options_init(struct dlock_lock_all_options *o)
{
	memset(o, 0, sizeof(*o));
	o->wait_ms = DLOCK_WAIT_FOREVER;
}

/* The calling thread may send a multi-lock of these names now: it holds
 * none of them through another thread, none is being acquired by another
 * thread, and no other multi-lock of the client is in progress (the
 * server takes one per connection; the name "" stands for that turn,
 * dlock__name_acquiring). */
static int turn_free(const struct dlock_client *c, const char *name,
		     pthread_t self)
{
	const struct dlock__lease *l;

	for (l = c->ls.leases; l; l = l->next)
		if (l->nhandles > 0 && !l->unlocking &&
		    pthread_equal(l->holder, self) &&
		    strcmp(l->name, name) == 0)
			return 1; /* ours: the server answers ALREADY_HELD */
	return !name_busy(c, name, self) && !queued_ahead(c, name, NULL);
}

/* Wait until every name and the client's multi-lock turn are free for
 * this thread (wait_turn on each, again until one pass waits for none). */
static int wait_turns(struct dlock_client *c, const struct dlock__multi *m,
		      int64_t wait_ms, int64_t wait_end)
{
	pthread_t self = pthread_self();
	int i, waited, err;

	do {
		waited = 0;
		for (i = -1; i < m->n; i++) {
			const char *name = i < 0 ? "" : m->names[i];

			if (turn_free(c, name, self))
				continue;
			waited = 1;
			if ((err = wait_turn(c, name, wait_ms, wait_end)) < 0)
				return err;
		}
	} while (waited);
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	const char *const *x = a, *const *y = b;

	return strcmp(*x, *y);
}

/* The names, checked (2..DLOCK_MULTI_MAX, valid, distinct), into m in
 * byte order, with the caller's index of each; and the LOCK line must
 * fit the protocol's with the longest ttl= wait= req= id=. */
static int multi_names(struct dlock__multi *m, const char *const names[],
		       size_t n)
{
	const char *sorted[DLOCK_MULTI_MAX];
	size_t i, j, line = sizeof("TRYLOCK") - 1;

	if (n < 2 || n > DLOCK_MULTI_MAX)
		return DLOCK_EINVAL;
	for (i = 0; i < n; i++) {
		if (dlock__bad_name(names[i]))
			return DLOCK_EINVAL;
		sorted[i] = names[i];
		line += 1 + strlen(names[i]);
	}
	/* " ttl=" " wait=" " req=" " id=r" and their numbers */
	if (line + 5 + 20 + 6 + 20 + 5 + 20 + 5 + 20 > DL_LINE_MAX)
		return DLOCK_EINVAL;
	qsort(sorted, n, sizeof(sorted[0]), cmp_name);
	for (i = 0; i < n; i++) {
		if (i > 0 && strcmp(sorted[i - 1], sorted[i]) == 0)
			return DLOCK_EINVAL; /* a name twice */
		snprintf(m->names[i], sizeof(m->names[i]), "%s", sorted[i]);
		for (j = 0; j < n; j++)
			if (names[j] == sorted[i])
				m->idx[i] = (int)j;
	}
	m->n = (int)n;
	return 0;
}

_Static_assert(DLOCK_MULTI_MAX == DL_MULTI_MAX, "dlock.h's multi-lock bound");

static int acquire_all_at(dlock_client *c, const char *const names[], size_t n,
			  const struct dlock_lock_all_options *o,
			  dlock_lease *out[], int64_t start, uint64_t *reqid)
{
	struct dlock__multi *m;
	struct dlock__req *q;
	int64_t now, wait_end, ttl_ms, wait_ms;
	size_t i;
	int err;

	dlock__last_error_clear();
	for (i = 0; out && i < n && i <= DLOCK_MULTI_MAX; i++)
		out[i] = NULL;
	if (!c || !out || !o || !names || n == 0)
		return DLOCK_EINVAL;
	ttl_ms = o->ttl_ms;
	wait_ms = o->wait_ms;
	if (dlock__bad_ms(ttl_ms) ||
	    (wait_ms != DLOCK_WAIT_FOREVER && dlock__bad_ms(wait_ms)))
		return DLOCK_EINVAL;
	if (n == 1) {
		/* one name is the ordinary LOCK */
		struct dlock_lock_options lo;

		dlock_lock_options_init(&lo);
		lo.ttl_ms = ttl_ms;
		lo.wait_ms = wait_ms;
		return acquire_at(c, names[0], &lo, &out[0], start, reqid);
	}
	if (!(m = calloc(1, sizeof(*m))))
		return DLOCK_ENOMEM;
	if ((err = multi_names(m, names, n)) < 0) {
		free(m);
		return err;
	}
	if ((err = enter(c)) < 0) {
		free(m);
		return err;
	}
	wait_end = wait_ms < 0 ? DLOCK__NEVER : start + wait_ms;
	if ((err = wait_turns(c, m, wait_ms, wait_end)) < 0) {
		free(m);
		goto out;
	}
	if (!(q = dlock__req_new(DLOCK__LOCKALL, m->names[0], 0))) {
		free(m);
		err = DLOCK_ENOMEM;
		goto out;
	}
	q->multi = m;
	now = dlock__now();
	q->ttl = ttl_ms ? ttl_ms : c->hello.default_ttl;
	q->reqid = *reqid;
	if (wait_ms <= 0)
		q->wait = wait_ms < 0 ? -1 : 0;
	else
		q->wait = wait_end > now ? wait_end - now : 1;
	q->thread = pthread_self();
	q->deadline = now + c->opt.request_timeout_ms;
	acq_add(c, q);
	err = dlock__call(c, &q);
	if (q) {
		if (err == 0)
			for (i = 0; i < n; i++)
				out[m->idx[i]] = m->handles[i];
		*reqid = q->reqid;
		dlock__acq_remove(c, q);
		dlock__req_free(q);
	}
out:
	leave(c);
	return err;
}

/* A multi-lock goes to the partition of its first name: its names must
 * share one (the server refuses others, ERR BAD_ARG). */
int dlock_acquire_all(dlock_client *c, const char *const names[], size_t n,
		      const struct dlock_lock_all_options *o,
		      dlock_lease *out[])
{
	struct dlock__hop hop = {0};
	const char *first = names && n > 0 ? names[0] : NULL;
	int64_t start = dlock__now();
	uint64_t reqid = dlock__request_id(&hop);
	int err;

	while (dlock__route(c, first, &hop, &err))
		err = acquire_all_at(hop.leg, names, n, o, out, start, &reqid);
	return err;
}

int dlock_release_all(dlock_client *c, dlock_lease *leases[], size_t n)
{
	char why[DLOCK__ERR_MAX] = "";
	size_t i;
	int err, first = 0;

	dlock__last_error_clear();
	if (!c || (!leases && n > 0))
		return DLOCK_EINVAL;
	for (i = 0; i < n; i++) {
		if (!leases[i])
			continue;
		err = dlock_unlock(c, leases[i]);
		leases[i] = NULL;
		if (err < 0 && first == 0) {
			first = err;
			snprintf(why, sizeof(why), "%s", dlock_last_error());
		}
	}
	dlock__last_error_set(why); /* the first failure's */
	return first;
}

/* UNLOCK of one hold of lease l, through its client lc (mu held). */
static int unlock_at(struct dlock_client *lc, struct dlock__lease *l, int last)
{
	struct dlock__req *q = dlock__req_new(DLOCK__UNLOCK, l->name, 0);
	int err;

	if (!q)
		return DLOCK_ENOMEM;
	q->token = l->token;
	q->last_hold = last ? 1 : 0;
	q->deadline = dlock__now() + lc->opt.request_timeout_ms;
	err = dlock__call(lc, &q);
	dlock__req_free(q);
	return err;
}

/* Enter the client that holds l now, closing or not: a call that left
 * its client's mu for the lease's move (dlock__lease_follow) ends
 * there. */
static struct dlock_client *lock_lease(struct dlock__lease *l)
{
	struct dlock_client *lc;

	for (;;) {
		lc = atomic_load(&l->c);
		pthread_mutex_lock(&lc->mu);
		if (atomic_load(&l->c) == lc) {
			lc->ncallers++;
			return lc;
		}
		pthread_mutex_unlock(&lc->mu);
	}
}

int dlock_unlock(dlock_client *c, dlock_lease *h)
{
	struct dlock__hop hop = {0};
	struct dlock__lease *l;
	struct dlock_client *lc;
	dlock_lease **pp;
	int err, last, used, again;

	dlock__last_error_clear();
	if (!h)
		return 0;
	if (!c)
		return DLOCK_EINVAL;
	if ((err = dlock__router_use(c, &used)) < 0)
		return err; /* dlock_close frees the handle */
	for (;;) {
		/* a router's lease: its leg's */
		if (!(lc = enter_lease(c, h, &err))) {
			dlock__router_unuse(c, used);
			return err;
		}
		while (lc->ls.cb_handle == h)
			pthread_cond_wait(&lc->idle_cv, &lc->mu);
		if (dlock__lease_client(c, h) == lc)
			break;
		leave(lc); /* it moved meanwhile */
	}
	if (h->notify) {
		h->notify = 0;
		lc->ls.notify_count--;
	}
	if (h->risk_notify) {
		h->risk_notify = 0;
		lc->ls.risk_count--;
	}
	if (h->contended_notify) {
		h->contended_notify = 0;
		lc->ls.contended_count--;
	}
	l = h->l;
	for (pp = &l->handles; *pp && *pp != h; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = h->next;
	l->nhandles--;
	last = l->nhandles == 0;
	if (last)
		l->unlocking = 1; /* no renewal, no guard; others still wait */
	/* its partition gave the name away: the lease follows it, and the
	 * UNLOCK goes there */
	while (((err = unlock_at(lc, l, last)) == DLOCK_EMOVED ||
		err == DLOCK_EUNAVAILABLE) &&
	       used) {
		leave(lc);
		again = dlock__lease_follow(c, l, lc, &hop, &err, 1);
		lc = lock_lease(l);
		if (!again)
			break;
		dlock__last_error_clear();
	}
	if (last) {
		l->unlocking = 0;
		l->dead = 1;
		dlock__lease_unlink(lc, l);
	}
	dlock__lease_unref(l); /* the handle's */
	free(h);
	leave(lc);
	dlock__router_unuse(c, used);
	return err;
}

/* REFRESH of h's lease through its client lc (mu held). */
static int refresh_at(struct dlock_client *lc, dlock_lease *h, int64_t ttl_ms,
		      const char *value)
{
	struct dlock__lease *l = h->l;
	struct dlock__req *q;
	int err;

	if (atomic_load(&h->lost))
		return DLOCK_ELOST;
	if (!(q = dlock__req_new(DLOCK__REFRESH, l->name, 0)))
		return DLOCK_ENOMEM;
	q->token = l->token;
	q->ttl = ttl_ms ? ttl_ms : atomic_load(&l->ttl);
	if (value)
		q->value[dl_desc_encode(value, strlen(value), q->value,
					DL_VALUE_MAX)] = '\0';
	q->lease = l;
	l->refs++;
	q->deadline = dlock__now() + lc->opt.request_timeout_ms;
	err = dlock__call(lc, &q);
	dlock__req_free(q);
	return err;
}

/* REFRESH of h's lease for ttl_ms (0: its TTL), with a new value (NULL:
 * none): dlock_refresh and dlock_proclaim. One told MOVED moves the
 * lease to its name's partition and is sent again there. */
static int refresh(dlock_client *c, dlock_lease *h, int64_t ttl_ms,
		   const char *value)
{
	struct dlock__hop hop = {0};
	struct dlock_client *lc;
	int err, used;

	if ((err = dlock__router_use(c, &used)) < 0)
		return err;
	while ((lc = enter_lease(c, h, &err)) != NULL) {
		err = refresh_at(lc, h, ttl_ms, value);
		leave(lc);
		if (!used || !dlock__lease_follow(c, h->l, lc, &hop, &err, 0))
			break;
		dlock__last_error_clear();
	}
	dlock__router_unuse(c, used);
	return err;
}

int dlock_refresh(dlock_client *c, dlock_lease *h, int64_t ttl_ms)
{
	dlock__last_error_clear();
	if (!c || !h || dlock__bad_ms(ttl_ms))
		return DLOCK_EINVAL;
	return refresh(c, h, ttl_ms, NULL);
}

_Static_assert(DLOCK_VALUE_MAX == DL_VALUE_MAX, "dlock.h's value limit");

int dlock_proclaim(dlock_client *c, dlock_lease *h, const char *value)
{
	dlock__last_error_clear();
	if (!c || !h || !value || !value[0])
		return DLOCK_EINVAL;
	return refresh(c, h, 0, value);
}

/* ---- lease handles ------------------------------------------------------- */

const char *dlock_lease_name(const dlock_lease *h)
{
	return h ? h->l->name : NULL;
}

uint64_t dlock_lease_token(const dlock_lease *h)
{
	return h ? h->l->token : 0;
}

int64_t dlock_lease_ttl(const dlock_lease *h)
{
	return h ? atomic_load(&h->l->ttl) : 0;
}

int64_t dlock_lease_deadline(const dlock_lease *h)
{
	return h ? atomic_load(&h->l->deadline) : 0;
}

const char *dlock_lease_broken_by(const dlock_lease *h)
{
	if (!h || !atomic_load(&((dlock_lease *)h)->lost))
		return "";
	return h->l->broken_by;
}

uint32_t dlock_lease_waiters(const dlock_lease *h)
{
	return h ? atomic_load(&h->l->waiters) : 0;
}

int dlock_lease_valid(const dlock_lease *h)
{
	if (!h || atomic_load(&((dlock_lease *)h)->lost))
		return 0;
	return dlock__now() < atomic_load(&h->l->deadline);
}
