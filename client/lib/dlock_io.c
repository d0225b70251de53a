/* SPDX-License-Identifier: MIT */
/*
 * dlock_io.c -- libdlock's background thread (dlock_private.h).
 *
 * The thread is the only reader of the socket. It loops on poll() over the
 * socket, the self-pipe and a CLOCK_BOOTTIME timer (sleep_until) set to
 * the nearest of: a lease's renewal, a renewal overdue (the lease is at
 * risk), a lease's lost guard, a reconnect attempt, the end of a connect
 * in progress. Around poll() it holds c->mu, and it releases it only in
 * poll() and while calling on_at_risk and on_lost.
 *
 * Lines: dl_linebuf splits them and dlock__line_in (dlock_reply.c) handles
 * each; a line it cannot place (not protocol, a reply to nothing, a tag out
 * of step) drops the connection, which is then made again.
 *
 * Connect and reconnect are non-blocking (a lease's guard must fire on
 * time even while the daemon does not answer); with TLS the handshake
 * follows the connect (state HANDSHAKE), within the same connect timeout,
 * and the socket is read and written through dlock_tls.c.
 *
 * After a drop the thread decides the fate of each request whose reply
 * was lost: reads (PING,
 * CHECK, STATUS, STATS), REFRESH, and LOCK (with the wait that remains) are
 * written again on the new connection; the UNLOCK of a lease's last hold
 * too (NOT_HOLDER then means it was released before the drop); an UNLOCK of
 * a reentrant hold is not (a second one could release the lease), nor one
 * by token (dlock_unlock_token: it may be one hold of several), and fails
 * with DLOCK_ECLOSED. A LOCK whose GRANTED was lost is sent again with its
 * request id (req=, to a server of 0.4.0 or later), and the server gives
 * it the grant it made, or its place in the queue. To a server without
 * request ids it is granted as a reentry: the hold it counts too many is
 * given back when the lease's last handle is unlocked (UNLOCK answered
 * HELD: unlock again; see options.owner in dlock.h for why that gives back
 * only this client's holds).
 * The new connection starts with AUTH and HELLO owner=<same owner>
 * key=<its key> (state DLOCK__GREETING), and only once HELLO is answered OK
 * by a server of the client's cluster (dlock_reply.c, cluster_reply)
 * sends a REFRESH of every lease still within its local deadline, a WATCH
 * of every watched pattern (dlock_watch.c), then the requests kept and
 * those made meanwhile. A server that forgot the
 * owner (a restart, a take-over, when it held nothing) may have given its
 * id to another client since; HELLO is then refused (NO DENIED), and
 * whatever followed it would run as the connection's own anonymous
 * owner: a LOCK granted to nobody this client can be again, a REFRESH
 * answered NOT_HOLDER. So a refused HELLO drops the connection, and the
 * next attempt comes after the reconnect pause, as after a failed
 * connect: the client waits for its id as it waits for a server that is
 * down, and its leases' guards say when it is too late.
 */
#include "client/lib/dlock_private.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- why an address could not be used ------------------------------------ */

/* "Connection refused" reads "connection refused" after a colon. */
static void lower_first(char *s)
{
	if (isupper((unsigned char)s[0]) && islower((unsigned char)s[1]))
		s[0] = (char)tolower((unsigned char)s[0]);
}

void dlock__why(struct dlock_client *c, int i, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->addr.why[i], sizeof(c->addr.why[i]), fmt, ap);
	va_end(ap);
	lower_first(c->addr.why[i]);
}

static void why_errno(struct dlock_client *c, int i, int e)
{
	char buf[128];

	dlock__why(c, i, "%s", strerror_r(e, buf, sizeof(buf)));
}

void dlock__why_report(const struct dlock_client *c)
{
	char out[DLOCK__ERR_MAX],
		one[DLOCK__SERVER_NAME_MAX + DLOCK__WHY_MAX + 2];
	size_t n;
	int i;

	snprintf(out, sizeof(out), "%s", c->addr.unresolved);
	for (i = 0; i < c->addr.naddrs; i++) {
		if (!c->addr.why[i][0])
			continue;
		snprintf(one, sizeof(one), "%s%s%s", c->addr.names[i],
			 c->addr.names[i][0] ? ": " : "", c->addr.why[i]);
		if (strstr(out, one))
			continue; /* one name's IPv4 and IPv6 addresses */
		n = strlen(out);
		snprintf(out + n, sizeof(out) - n, "%s%s", n ? "; " : "", one);
	}
	if (out[0])
		dlock__last_error_set(out);
}

/* ---- addresses and connecting -------------------------------------------- */

/* A host name that does not resolve (name: the server's entry, or "" for
 * the one host of the options). */
static void note_unresolved(struct dlock_client *c, const char *name, int gai)
{
	char text[DLOCK__WHY_MAX];
	size_t n = strlen(c->addr.unresolved);

	snprintf(text, sizeof(text), "%s",
		 gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
	lower_first(text);
	snprintf(c->addr.unresolved + n, sizeof(c->addr.unresolved) - n,
		 "%s%s%scannot resolve the host name: %s", n ? "; " : "", name,
		 name[0] ? ": " : "", text);
}

/* Add the addresses of host:port (name: the server's entry, or ""). */
static int resolve_one(struct dlock_client *c, const char *host,
		       const char *port, const char *name)
{
	struct addrinfo hints, *res, *ai;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if ((rc = getaddrinfo(host, port, &hints, &res)) != 0) {
		note_unresolved(c, name, rc);
		return DLOCK_ECONNECT;
	}
	for (ai = res; ai && c->addr.naddrs < DLOCK__ADDRS_MAX;
	     ai = ai->ai_next) {
		if (ai->ai_addrlen > sizeof(c->addr.addrs[0]))
			continue;
		memcpy(&c->addr.addrs[c->addr.naddrs], ai->ai_addr,
		       ai->ai_addrlen);
		c->addr.addrlens[c->addr.naddrs] = ai->ai_addrlen;
		snprintf(c->addr.names[c->addr.naddrs],
			 sizeof(c->addr.names[0]), "%s", name);
		c->addr.naddrs++;
	}
	freeaddrinfo(res);
	return 0;
}

/* options.servers: every entry's addresses, in the order given. A name
 * that does not resolve now is skipped (the others may be enough). */
static int resolve_servers(struct dlock_client *c)
{
	char entry[DLOCK__SERVER_NAME_MAX], host[DLOCK__SERVER_NAME_MAX],
		*colon;
	const char *p = c->addr.servers, *end;
	size_t n;
	int count = 0;

	while (*p) {
		end = strchr(p, ',');
		n = end ? (size_t)(end - p) : strlen(p);
		if (n == 0 || n >= sizeof(entry) || ++count > DLOCK_SERVERS_MAX)
			return DLOCK_EINVAL;
		memcpy(entry, p, n);
		entry[n] = '\0';
		colon = strrchr(entry, ':');
		if (!colon || colon == entry || !colon[1])
			return DLOCK_EINVAL;
		memcpy(host, entry, (size_t)(colon - entry));
		host[colon - entry] = '\0';
		if (host[0] == '[' && host[strlen(host) - 1] == ']') {
			memmove(host, host + 1, strlen(host));
			host[strlen(host) - 1] = '\0';
		}
		resolve_one(c, host, colon + 1, entry);
		p = end ? end + 1 : p + n;
	}
	return c->addr.naddrs > 0 ? 0 : DLOCK_ECONNECT;
}

int dlock__resolve(struct dlock_client *c)
{
	char port[16];

	c->addr.naddrs = 0;
	c->addr.hint_i = -1;
	if (c->addr.servers)
		return resolve_servers(c);
	if (c->unix_path) {
		struct sockaddr_un *un =
			(struct sockaddr_un *)&c->addr.addrs[0];

		if (strlen(c->unix_path) >= sizeof(un->sun_path))
			return DLOCK_EINVAL;
		memset(un, 0, sizeof(*un));
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path, c->unix_path, strlen(c->unix_path));
		c->addr.addrlens[0] = sizeof(*un);
		c->addr.naddrs = 1;
		return 0;
	}
	snprintf(port, sizeof(port), "%d", c->opt.port);
	resolve_one(c, c->host, port, "");
	return c->addr.naddrs > 0 ? 0 : DLOCK_ECONNECT;
}

int dlock__readdress(struct dlock_client *c, const char *servers)
{
	struct dlock_client *t = calloc(1, sizeof(*t));
	char cur[DLOCK__SERVER_NAME_MAX];
	char *old = NULL;
	int err = DLOCK_ENOMEM, i;

	/* resolved apart, in a scratch client: names are looked up without
	 * c->mu, and a list that does not resolve changes nothing */
	if (t && (t->addr.servers = strdup(servers)) != NULL)
		err = dlock__resolve(t);
	if (err == 0) {
		pthread_mutex_lock(&c->mu);
		snprintf(cur, sizeof(cur), "%s", c->addr.names[c->addr.addr_i]);
		memcpy(c->addr.addrs, t->addr.addrs, sizeof(c->addr.addrs));
		memcpy(c->addr.addrlens, t->addr.addrlens,
		       sizeof(c->addr.addrlens));
		memcpy(c->addr.names, t->addr.names, sizeof(c->addr.names));
		c->addr.naddrs = t->addr.naddrs;
		old = c->addr.servers;
		c->addr.servers = t->addr.servers;
		c->opt.servers = c->addr.servers;
		t->addr.servers = NULL;
		/* the server it is on, if still listed, is where it goes on */
		c->addr.addr_i = 0;
		for (i = 0; i < c->addr.naddrs; i++)
			if (strcmp(c->addr.names[i], cur) == 0) {
				c->addr.addr_i = i;
				break;
			}
		c->addr.hint_i = c->addr.failed_i = -1;
		memset(c->addr.why, 0, sizeof(c->addr.why));
		c->addr.unresolved[0] = '\0';
		pthread_mutex_unlock(&c->mu);
	}
	free(old);
	if (t)
		free(t->addr.servers);
	free(t);
	return err;
}

void dlock__hint(struct dlock_client *c, struct dl_str active)
{
	int i;

	c->addr.hint_i = -1;
	for (i = 0; i < c->addr.naddrs; i++)
		if (c->addr.names[i][0] &&
		    strlen(c->addr.names[i]) == active.len &&
		    memcmp(c->addr.names[i], active.p, active.len) == 0) {
			c->addr.hint_i = i;
			return;
		}
}

/* Start a non-blocking connect to address i: the socket, or -1 (errno
 * says why); *done says the connect already completed. */
static int connect_start(struct dlock_client *c, int i, int *done)
{
	const struct sockaddr *sa = (const struct sockaddr *)&c->addr.addrs[i];
	int fd = socket(sa->sa_family,
			SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1, e;

	*done = 0;
	if (fd < 0)
		return -1;
	if (sa->sa_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, sa, c->addr.addrlens[i]) == 0) {
		*done = 1;
		return fd;
	}
	if (errno == EINPROGRESS)
		return fd;
	e = errno;
	close(fd);
	errno = e; /* why */
	return -1;
}

/* 0 once connected, else the errno value of the failure. */
static int connect_result(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return errno;
	return err;
}

/* Wait for the TLS handshake on c->conn.fd until deadline (the caller's
 * thread: dlock_connect). Why it failed goes to dlock_last_error(). */
static int tls_sync(struct dlock_client *c, int i, int64_t deadline)
{
	int64_t left;
	int r;

	if ((r = dlock__tls_begin(c, i)) < 0)
		goto out;
	while ((r = dlock__tls_handshake(c)) == 1) {
		struct pollfd p = {.fd = c->conn.fd, .events = POLLIN};

		if (dlock__io_pending(c))
			p.events |= POLLOUT;
		if ((left = deadline - dlock__now()) <= 0) {
			dlock__last_error_set(
				"TLS: handshake not done in time");
			return DLOCK_ECONNECT;
		}
		if (poll(&p, 1, (int)(left > 60000 ? 60000 : left)) < 0 &&
		    errno != EINTR)
			return DLOCK_ECONNECT;
	}
out:
	if (r < 0 && dlock__tls_failed(c))
		dlock__last_error_set(dlock__tls_error(c));
	return r;
}

int dlock__connect_sync(struct dlock_client *c, int64_t deadline)
{
	int k, i, fd, done, r, e, err = DLOCK_ECONNECT;

	for (k = 0; k < c->addr.naddrs; k++) {
		if (dlock__now() >= deadline)
			return err; /* the reasons of the last tries stay */
		i = (c->addr.addr_i + k) % c->addr.naddrs;
		if ((fd = connect_start(c, i, &done)) < 0)
			why_errno(c, i, errno);
		while (fd >= 0 && !done) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int64_t left = deadline - dlock__now();

			if (left <= 0) {
				close(fd);
				dlock__why(c, i,
					   "no answer to the connection "
					   "attempt in time");
				return err; /* out of time */
			}
			r = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
			if (r < 0 && errno != EINTR) {
				why_errno(c, i, errno);
				close(fd);
				fd = -1;
			} else if (r > 0) {
				done = 1;
				if ((e = connect_result(fd)) != 0) {
					why_errno(c, i, e);
					close(fd);
					fd = -1;
				}
			}
		}
		if (fd < 0)
			continue;
		c->addr.why[i][0] = '\0';
		c->conn.fd = fd;
		c->addr.addr_i = i;
		if (!c->conn.tls || (r = tls_sync(c, i, deadline)) == 0)
			return 0;
		/* a server that fails TLS: the next one may not */
		dlock__why(c, i, "%s",
			   dlock__tls_failed(c)
				   ? dlock__tls_error(c)
				   : "TLS: handshake not done in time");
		dlock__io_close(c);
		err = r;
		if (deadline <= dlock__now())
			return err;
	}
	return err;
}

/* ---- connection life cycle ----------------------------------------------- */

static void attempt_failed(struct dlock_client *c, int64_t now)
{
	dlock__io_close(c);
	c->conn.state = DLOCK__DOWN;
	c->addr.failed_i = c->addr.addr_i;
	c->addr.addr_i = (c->addr.addr_i + 1) % c->addr.naddrs;
	c->conn.reconnect_at = now + c->conn.backoff;
	c->conn.backoff *= 2;
	if (c->conn.backoff > DLOCK__BACKOFF_MAX_MS)
		c->conn.backoff = DLOCK__BACKOFF_MAX_MS;
}

/* Write (or fail) a request kept over a reconnect. */
static void rewrite(struct dlock_client *c, struct dlock__req *q, int64_t now)
{
	int err;

	if ((q->op == DLOCK__LOCK || q->op == DLOCK__LOCKALL) && q->wait > 0 &&
	    q->wait_end <= now) {
		dlock__req_finish(c, q, DLOCK_ETIMEDOUT);
		return;
	}
	if ((err = dlock__req_write(c, q)) < 0)
		dlock__req_finish(c, q, err);
}

/* Write one of the connection's own requests (AUTH, HELLO). */
static void greet(struct dlock_client *c, enum dlock__op op)
{
	struct dlock__req *q = dlock__req_new(op, NULL, 1);

	if (q && dlock__req_write(c, q) < 0)
		dlock__req_free(q);
}

static void connected(struct dlock_client *c, int64_t now)
{
	(void)now;
	c->conn.state = DLOCK__GREETING;
	dl_linebuf_init(&c->conn.lb);
	c->conn.out_off = c->conn.out_len = 0;
	c->conn.crossing = 0;
	c->conn.input_more = 0;
	if (c->password)
		greet(c, DLOCK__AUTH);
	greet(c, DLOCK__HELLO);
}

void dlock__io_hello_ok(struct dlock_client *c)
{
	struct dlock__lease *l;
	struct dlock__req *q, *next;
	int64_t now = dlock__now();

	c->conn.state = DLOCK__UP;
	/* who it is, for the owner HELLO just proved */
	if (dlock__describing(c))
		dlock__internal(c, DLOCK__DESCRIBE, NULL, 0, 0);
	for (l = c->ls.leases; l; l = l->next) {
		if (l->dead || l->unlocking || l->nhandles == 0 || l->moving ||
		    atomic_load(&l->deadline) <= now)
			continue;
		dlock__lease_renew(c, l);
	}
	dlock__watch_resume(c);
	q = c->rq.unsent;
	c->rq.unsent = c->rq.unsent_tail = NULL;
	for (; q; q = next) {
		next = q->next;
		q->next = NULL;
		rewrite(c, q, now);
	}
}

/* One step of the TLS handshake (state HANDSHAKE); connected once done. */
static void tls_step(struct dlock_client *c, int64_t now)
{
	int r = dlock__tls_handshake(c);

	if (r == 0)
		connected(c, now);
	else if (r < 0)
		attempt_failed(c, now);
}

/* The socket is connected: TLS first, if the client speaks it. */
static void transport_up(struct dlock_client *c, int64_t now)
{
	if (!c->conn.tls) {
		connected(c, now);
		return;
	}
	if (dlock__tls_begin(c, c->addr.addr_i) < 0) {
		attempt_failed(c, now);
		return;
	}
	c->conn.state = DLOCK__HANDSHAKE;
	tls_step(c, now);
}

static void start_connect(struct dlock_client *c, int64_t now)
{
	int done, fd = connect_start(c, c->addr.addr_i, &done);

	if (fd < 0) {
		attempt_failed(c, now);
		return;
	}
	c->conn.fd = fd;
	c->conn.connect_deadline = now + c->opt.connect_timeout_ms;
	if (done) {
		transport_up(c, now);
		return;
	}
	c->conn.state = DLOCK__CONNECTING;
}

/* The error of a request that a drop ends: during dlock_connect's own
 * handshake the connect failed (with TLS's reason if TLS broke it: a
 * TLS 1.3 server refuses a client certificate after the client's side of
 * the handshake is done), later the connection closed. */
static int drop_error(const struct dlock_client *c, struct dlock__req *q)
{
	if (!c->conn.initial)
		return DLOCK_ECLOSED;
	if (dlock__tls_failed(c)) {
		snprintf(q->err, sizeof(q->err), "%s", dlock__tls_error(c));
		return DLOCK_ETLS;
	}
	return DLOCK_ECONNECT;
}

/* What becomes of a request whose reply was lost with the connection:
 * 1 to write it again, 0 when it was finished here. */
static int keep_over_drop(struct dlock_client *c, struct dlock__req *q)
{
	if (q->internal) {
		switch (q->op) {
		case DLOCK__RENEW:
			/* not a lease that moved to another leg meanwhile:
			 * its bits are that leg's, under its mu (found in
			 * review: a lost update could undo linked or dead) */
			if (atomic_load(&q->lease->c) == c)
				q->lease->refreshing = 0;
			break;
		case DLOCK__UNLOCK:
			if (q->last_hold)
				return 1;
			break;
		default:
			break;
		}
		dlock__req_free(q);
		return 0;
	}
	if (q->abandoned) {
		if (q->op == DLOCK__UNLOCK && q->last_hold) {
			q->abandoned = 0;
			q->internal = 1; /* still release it */
			pthread_cond_destroy(&q->cv);
			return 1;
		}
		dlock__req_finish(c, q, DLOCK_ECLOSED);
		return 0;
	}
	if (c->conn.initial || !c->opt.reconnect) {
		dlock__req_finish(c, q, drop_error(c, q));
		return 0;
	}
	if (c->addr.standby) {
		/* A standby executes nothing: whatever it was, send it
		 * again to the active. */
		if (q->op == DLOCK__AUTH || q->op == DLOCK__HELLO ||
		    q->op == DLOCK__DESCRIBE) {
			dlock__req_finish(c, q, DLOCK_ECLOSED);
			return 0;
		}
		q->resent = 1;
		return 1;
	}
	/* not sent again: done once, a second one would answer that there
	 * is nothing left (BREAK: STALE) for a request that did its job */
	if ((q->op == DLOCK__UNLOCK && !q->last_hold) ||
	    q->op == DLOCK__UNLOCK_TOKEN || q->op == DLOCK__BREAK ||
	    q->op == DLOCK__PARTITION) {
		dlock__req_finish(c, q, DLOCK_ECLOSED);
		return 0;
	}
	if (q->op == DLOCK__AUTH || q->op == DLOCK__HELLO ||
	    q->op == DLOCK__DESCRIBE) {
		dlock__req_finish(c, q, DLOCK_ECLOSED);
		return 0;
	}
	/* a body cut by the drop is read again whole (a multi-lock sent
	 * again with its request id gets back the grants it had) */
	if (q->op == DLOCK__STATS || q->op == DLOCK__LOCKS ||
	    q->op == DLOCK__HOLDERS || q->op == DLOCK__LOCKALL ||
	    q->op == DLOCK__MAP) {
		q->stats_len = 0;
		q->stats_n = 0;
	}
	q->resent = 1;
	return 1;
}

/* Every server of the list named another cluster: what waits to be
 * sent fails now, rather than wait for one that never comes. */
static void fail_unsent(struct dlock_client *c, int err, const char *why)
{
	struct dlock__req *q, *next;

	q = c->rq.unsent;
	c->rq.unsent = c->rq.unsent_tail = NULL;
	for (; q; q = next) {
		next = q->next;
		q->next = NULL;
		snprintf(q->err, sizeof(q->err), "%s", why);
		dlock__req_finish(c, q, err);
	}
}

/* The requests of `list` (linked) whose replies were lost: those to
 * write again are appended to kept, the others finished. */
static void sort_dropped(struct dlock_client *c, struct dlock__req *list,
			 struct dlock__req **kept, struct dlock__req **tail)
{
	struct dlock__req *q, *next;

	for (q = list; q; q = next) {
		next = q->next;
		q->next = NULL;
		q->where = DLOCK__NOWHERE;
		if (!keep_over_drop(c, q))
			continue;
		q->where = DLOCK__UNSENT;
		dlock__list_append(kept, tail, q);
	}
}

static void disconnect(struct dlock_client *c)
{
	struct dlock__req *kept = NULL, *tail = NULL, *stats, *fifo, *waiting;
	struct dlock__req *q, *next;
	int64_t now = dlock__now();

	if (c->conn.initial && !c->addr.standby &&
	    !c->addr.why[c->addr.addr_i][0])
		dlock__why(c, c->addr.addr_i, "%s",
			   dlock__tls_failed(c) ? dlock__tls_error(c)
						: "closed the connection");
	dlock__io_close(c);
	/* not UP while the requests are sorted: what a request ended here
	 * gives back (a multi-lock's grants) waits for the next connection */
	c->conn.state = DLOCK__DOWN;
	c->conn.wfail = 0;
	c->conn.out_off = c->conn.out_len = 0;
	dl_linebuf_init(&c->conn.lb);

	/* in the order they were sent: a STATS being read, the FIFO, then
	 * the queued LOCKs; those kept go before anything queued meanwhile
	 * (nothing, normally) */
	stats = c->rq.stats_req;
	fifo = c->rq.fifo;
	waiting = c->rq.waiting;
	c->rq.stats_req = NULL;
	c->rq.stats_left = 0;
	c->rq.fifo = c->rq.fifo_tail = c->rq.waiting = NULL;
	if (stats) {
		stats->next = NULL;
		sort_dropped(c, stats, &kept, &tail);
	}
	sort_dropped(c, fifo, &kept, &tail);
	sort_dropped(c, waiting, &kept, &tail);
	dlock__list_prepend(&c->rq.unsent, &c->rq.unsent_tail, kept, tail);
	if (c->hello.cluster_refused >= c->addr.naddrs)
		fail_unsent(c, DLOCK_ECLUSTER, c->addr.why[c->addr.addr_i]);
	if (c->conn.initial || !c->opt.reconnect || c->closing) {
		c->conn.state = DLOCK__DEAD;
		for (q = c->rq.unsent; q; q = next) {
			next = q->next;
			dlock__req_finish(c, q, drop_error(c, q));
		}
		c->rq.unsent = c->rq.unsent_tail = NULL;
		return;
	}
	c->conn.state = DLOCK__DOWN;
	c->conn.reconnect_at = now; /* at once; then with backoff */
	if (c->conn.refused) {
		/* its owner is someone else's here for now: a pause, as
		 * after a failed attempt, not a loop of refusals */
		c->conn.refused = 0;
		c->conn.reconnect_at = now + c->conn.backoff;
		c->conn.backoff *= 2;
		if (c->conn.backoff > DLOCK__BACKOFF_MAX_MS)
			c->conn.backoff = DLOCK__BACKOFF_MAX_MS;
	}
	if (c->addr.standby) {
		/* To the active the standby named, at once; to the next
		 * server after a pause when it named itself, the address
		 * that just failed, or nobody. */
		if (c->addr.hint_i >= 0 && c->addr.hint_i != c->addr.addr_i &&
		    c->addr.hint_i != c->addr.failed_i) {
			c->addr.addr_i = c->addr.hint_i;
		} else if (c->addr.hint_i >= 0 &&
			   c->addr.hint_i == c->addr.failed_i) {
			/* The active it names did not answer: it is down,
			 * and this standby may take over soon. Ask it
			 * again, then try that active once more. */
			c->addr.failed_i = -1;
			c->conn.reconnect_at = now + DLOCK__REDIRECT_MS;
		} else {
			c->addr.addr_i = (c->addr.addr_i + 1) % c->addr.naddrs;
			c->conn.reconnect_at = now + DLOCK__REDIRECT_MS;
		}
	} else if (c->addr.hint_i >= 0) {
		c->addr.addr_i =
			c->addr.hint_i; /* * BYE not-active said where */
	}
	c->addr.standby = 0;
	c->addr.hint_i = -1;
}

/* A server that stops answering (stopped, hung, a path that drops its
 * replies) is left for the next of a list of servers (with one there is
 * nowhere to go, and a drop would only lose the replies of requests the
 * server may still carry out, such as a given-up lock's grant, which
 * then outlives the connection as a hold nobody knows): the oldest request
 * written and not answered within request_timeout_ms drops the connection, and
 * the next attempt goes to the next server (a standby that took over, or
 * one that names the active). A LOCK's wait in the queue does not count
 * (its OK QUEUED moved it to c->rq.waiting), nor does the greeting's
 * (connect_deadline), nor a STATS body being read. Found from outside:
 * with the active daemon SIGSTOPped, the clients stayed on it for good
 * -- calls timing out, leases lost at their deadlines -- while the
 * standby had taken over. 1 when the connection is to be dropped. */
static int stalled(struct dlock_client *c, int64_t now)
{
	if (c->addr.naddrs < 2 || c->conn.state != DLOCK__UP || !c->rq.fifo ||
	    c->rq.stats_req ||
	    now < c->rq.fifo->sent_at + c->opt.request_timeout_ms)
		return 0;
	dlock__why(c, c->addr.addr_i, "no reply within %d ms",
		   c->opt.request_timeout_ms);
	c->addr.failed_i = c->addr.addr_i;
	c->addr.addr_i = (c->addr.addr_i + 1) % c->addr.naddrs;
	return 1;
}

/* ---- input --------------------------------------------------------------- */

/* At most DLOCK__READ_TURN reads per wake, then the thread goes round its
 * loop (timers, callbacks) and releases c->mu in poll(): a server that
 * never stops sending -- a stream of events, none a reply -- held it
 * for good, and a dlock_lock() of 3 s had not returned after 40 s (found
 * from outside). */
static void input(struct dlock_client *c)
{
	enum dl_lb_result res;
	char *space, *line;
	size_t avail, len;
	ssize_t n;
	int reads = 0;

	c->conn.input_more = 0;
	for (;;) {
		if (reads++ == DLOCK__READ_TURN) {
			c->conn.input_more = 1;
			return;
		}
		space = dl_linebuf_space(&c->conn.lb, &avail);
		n = dlock__io_read(c, space, avail);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			disconnect(c);
			return;
		}
		dl_linebuf_commit(&c->conn.lb, (size_t)n);
		while ((res = dl_linebuf_next(&c->conn.lb, &line, &len)) !=
		       DL_LB_NONE) {
			if (res != DL_LB_LINE ||
			    dlock__line_in(c, line, len) < 0) {
				disconnect(c);
				return;
			}
		}
		/* TLS may hold more than the socket shows: read to EAGAIN */
		if ((size_t)n < avail && !c->conn.tls)
			return;
	}
}

/* ---- timers: renewal and lost guards ------------------------------------- */

/* Renew what is due, declare lost what can no longer be confirmed in
 * time, and at risk what renewal has not confirmed by half its TTL (a
 * renewal is due at a third: it is a sixth late); returns the next time
 * there is something to do. */
static int64_t timers(struct dlock_client *c, int64_t now)
{
	int64_t next = DLOCK__NEVER, ttl, lost_at, overdue;
	struct dlock__lease *l;

	for (l = c->ls.leases; l; l = l->next) {
		if (l->dead || l->unlocking || l->nhandles == 0)
			continue;
		ttl = atomic_load(&l->ttl);
		lost_at = atomic_load(&l->deadline) - dlock__guard(c, ttl);
		if (now >= lost_at) {
			dlock__lease_lose(c, l, DLOCK_LOST_UNCONFIRMED);
			continue;
		}
		if (lost_at < next)
			next = lost_at;
		if (!c->opt.renew)
			continue;
		overdue = l->renew_at + ttl / 6;
		if (!l->at_risk && now >= overdue)
			dlock__lease_risk(c, l);
		else if (!l->at_risk && overdue < next)
			next = overdue;
		/* moving: its new partition's connection renews it */
		if (l->refreshing || l->moving || c->conn.state != DLOCK__UP)
			continue;
		if (now < l->renew_at) {
			if (l->renew_at < next)
				next = l->renew_at;
			continue;
		}
		dlock__lease_renew(c, l);
	}
	return next;
}

/* Call on_at_risk for every handle that awaits it, without the lock
 * (before deliver_lost: a handle hears of the risk before the loss). */
static void deliver_risk(struct dlock_client *c)
{
	struct dlock__lease *l;
	dlock_lease *h;

	while (c->ls.risk_count > 0 && !c->closing) {
		for (l = c->ls.leases, h = NULL; l && !h; l = l->next)
			for (h = l->handles; h && !h->risk_notify; h = h->next)
				;
		if (!h) {
			c->ls.risk_count = 0;
			return;
		}
		h->risk_notify = 0;
		c->ls.risk_count--;
		if (!c->opt.on_at_risk)
			continue;
		c->ls.cb_handle = h;
		pthread_mutex_unlock(&c->mu);
		c->opt.on_at_risk(c->parent ? c->parent : c, h, c->opt.arg);
		pthread_mutex_lock(&c->mu);
		c->ls.cb_handle = NULL;
		pthread_cond_broadcast(&c->idle_cv);
	}
}

/* Call on_contended for every handle that awaits it, without the lock. */
static void deliver_contended(struct dlock_client *c)
{
	struct dlock__lease *l;
	dlock_lease *h;

	while (c->ls.contended_count > 0 && !c->closing) {
		for (l = c->ls.leases, h = NULL; l && !h; l = l->next)
			for (h = l->handles; h && !h->contended_notify;
			     h = h->next)
				;
		if (!h) {
			c->ls.contended_count = 0;
			return;
		}
		h->contended_notify = 0;
		c->ls.contended_count--;
		if (!c->opt.on_contended || atomic_load(&h->lost))
			continue;
		c->ls.cb_handle = h;
		pthread_mutex_unlock(&c->mu);
		c->opt.on_contended(c->parent ? c->parent : c, h,
				    atomic_load(&h->l->waiters), c->opt.arg);
		pthread_mutex_lock(&c->mu);
		c->ls.cb_handle = NULL;
		pthread_cond_broadcast(&c->idle_cv);
	}
}

/* Call on_lost for every handle that awaits it, without the lock. */
static void deliver_lost(struct dlock_client *c)
{
	struct dlock__lease *l;
	dlock_lease *h;

	while (c->ls.notify_count > 0 && !c->closing) {
		for (l = c->ls.leases, h = NULL; l && !h; l = l->next)
			for (h = l->handles; h && !h->notify; h = h->next)
				;
		if (!h) {
			c->ls.notify_count = 0;
			return;
		}
		h->notify = 0;
		c->ls.notify_count--;
		if (!c->opt.on_lost)
			continue;
		c->ls.cb_handle = h;
		pthread_mutex_unlock(&c->mu);
		c->opt.on_lost(c->parent ? c->parent : c, h, h->why,
			       c->opt.arg);
		pthread_mutex_lock(&c->mu);
		c->ls.cb_handle = NULL;
		pthread_cond_broadcast(&c->idle_cv);
	}
}

/* ---- the loop ------------------------------------------------------------ */

/* Sleep until `next` (dlock__now() ms, DLOCK__NEVER) or an fd is ready. The
 * timer is a CLOCK_BOOTTIME timerfd, so a lease's guard fires on time
 * even across a suspend (poll's own timeout runs on a clock that stops);
 * without one, poll is cut in steps of DLOCK__CLOCK_STEP_MS. */
static int sleep_until(struct dlock_client *c, struct pollfd *p, int nfds,
		       int64_t next)
{
	struct itimerspec its = {{0, 0}, {0, 0}};
	int64_t now = dlock__now(), t;

	t = next == DLOCK__NEVER ? -1 : next > now ? next - now : 0;
	if (t > 60000)
		t = 60000;
	if (c->timer >= 0 && t > 0) {
		its.it_value.tv_sec = (time_t)(next / 1000);
		its.it_value.tv_nsec = (long)(next % 1000) * 1000000L;
		if (t < 60000 && timerfd_settime(c->timer, TFD_TIMER_ABSTIME,
						 &its, NULL) == 0)
			t = -1;
	} else if (c->timer < 0 && (t < 0 || t > DLOCK__CLOCK_STEP_MS)) {
		t = DLOCK__CLOCK_STEP_MS;
	}
	return poll(p, (nfds_t)nfds, (int)t);
}

void *dlock__thread_main(void *arg)
{
	struct dlock_client *c = arg;
	struct pollfd p[3];
	int64_t now, next;
	char buf[64];
	int n;

	pthread_mutex_lock(&c->mu);
	while (!c->closing) {
		now = dlock__now();
		if (c->conn.state == DLOCK__DOWN && now >= c->conn.reconnect_at)
			start_connect(c, now);
		if ((c->conn.state == DLOCK__CONNECTING ||
		     c->conn.state == DLOCK__HANDSHAKE) &&
		    now >= c->conn.connect_deadline)
			attempt_failed(c, now);
		if (c->conn.state == DLOCK__GREETING &&
		    now >= c->conn.connect_deadline) {
			c->conn.refused =
				1; /* no answer: the next attempt waits */
			disconnect(c);
		}
		if (c->conn.wfail)
			disconnect(c);
		if (stalled(c, now))
			disconnect(c);
		next = timers(c, now);
		deliver_contended(c);
		deliver_risk(c);
		deliver_lost(c);
		if (c->closing)
			break;
		if (c->ls.notify_count > 0 || c->ls.risk_count > 0 ||
		    c->ls.contended_count > 0)
			continue;
		if (c->conn.input_more && c->conn.fd >= 0)
			next = now; /* poll only to let the callers in */

		p[0] = (struct pollfd){.fd = c->wake[0], .events = POLLIN};
		p[1] = (struct pollfd){.fd = c->timer, .events = POLLIN};
		p[2] = (struct pollfd){.fd = c->conn.fd, .events = 0};
		if (c->conn.state == DLOCK__DOWN && c->conn.reconnect_at < next)
			next = c->conn.reconnect_at;
		if (c->conn.state == DLOCK__CONNECTING) {
			p[2].events = POLLOUT;
			if (c->conn.connect_deadline < next)
				next = c->conn.connect_deadline;
		} else if (c->conn.state == DLOCK__HANDSHAKE ||
			   c->conn.state == DLOCK__GREETING ||
			   c->conn.state == DLOCK__UP) {
			p[2].events = POLLIN;
			if (dlock__io_pending(c))
				p[2].events |= POLLOUT;
			if ((c->conn.state == DLOCK__HANDSHAKE ||
			     c->conn.state == DLOCK__GREETING) &&
			    c->conn.connect_deadline < next)
				next = c->conn.connect_deadline;
			if (c->addr.naddrs > 1 && c->conn.state == DLOCK__UP &&
			    c->rq.fifo && !c->rq.stats_req &&
			    c->rq.fifo->sent_at + c->opt.request_timeout_ms <
				    next)
				next = c->rq.fifo->sent_at +
				       c->opt.request_timeout_ms;
		}
		pthread_mutex_unlock(&c->mu);
		n = sleep_until(c, p, c->conn.fd >= 0 ? 3 : 2, next);
		pthread_mutex_lock(&c->mu);
		if (c->closing || (n <= 0 && !c->conn.input_more))
			continue;
		if (p[0].revents)
			while (read(c->wake[0], buf, sizeof(buf)) > 0)
				;
		if (p[1].revents)
			(void)!read(c->timer, buf, sizeof(buf));
		if (c->conn.fd < 0 || p[2].fd != c->conn.fd ||
		    (!p[2].revents && !c->conn.input_more))
			continue;
		if (c->conn.state == DLOCK__CONNECTING) {
			if (connect_result(c->conn.fd) == 0)
				transport_up(c, dlock__now());
			else
				attempt_failed(c, dlock__now());
			continue;
		}
		if (c->conn.state == DLOCK__HANDSHAKE) {
			tls_step(c, dlock__now());
			continue;
		}
		if (p[2].revents & POLLOUT)
			dlock__flush(c);
		if ((p[2].revents & (POLLIN | POLLHUP | POLLERR)) ||
		    c->conn.input_more)
			input(c);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}
