/* SPDX-License-Identifier: MIT */
/*
 * metrics.c -- the Prometheus endpoint (see metrics.h).
 *
 * One GET needs no HTTP library: read until the blank line that ends the
 * request head (at most DL_METRICS_REQUEST_MAX bytes), look at the request
 * line, write the whole response with Connection: close, close. Each
 * connection owns two handles (its TCP stream and its timeout timer) and is
 * freed when the second one's close callback runs. The listener struct is
 * freed when it and every connection are closed.
 *
 * With TLS (the daemon's context, tls.h) the stream's bytes go through the
 * connection's TLS state: ciphertext in, the request's plaintext out of
 * it; the handshake's records and the sealed response (with close_notify)
 * are written as they come, each write its own request (struct mwrite).
 *
 * Slots: at most DL_METRICS_CONNS_MAX connections at once. When a new one
 * finds them all taken, the oldest connection still waiting for its
 * request is closed to make room (a scraper sends its request as soon as
 * it is connected; one that has said nothing since is the one to go), so
 * idle or slow sockets can delay a scrape by nothing; only connections
 * being answered (a response on its way) are never cut.
 */
#include "server/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "server/buf.h"
#include "server/config.h"
#include "server/log.h"
#include "server/server.h"
#include "server/stats.h"
#include "server/tls.h"

struct mconn;

struct dl_metrics {
	struct dl_server *srv;
	uv_tcp_t listener;
	int listening;
	int stopping;
	struct mconn *conns;
	size_t nconns;
};

struct mconn {
	uv_tcp_t tcp;
	uv_timer_t timer;
	struct dl_metrics *m;
	struct mconn *next, *prev; /* m->conns, newest first */
	struct dl_tls_conn *tls;   /* NULL: plain HTTP */
	int handles;		   /* handles not yet closed */
	unsigned answering : 1;	   /* the response is on its way */
	size_t len;
	struct dl_buf resp;
	char req[DL_METRICS_REQUEST_MAX];
};

/* One write in flight: its request and its bytes. */
struct mwrite {
	uv_write_t req;
	struct mconn *c;
	int last; /* close the connection once written */
	char data[];
};

static void maybe_free(struct dl_metrics *m)
{
	if (m->stopping && !m->listening && !m->conns)
		free(m);
}

static void on_mconn_closed(uv_handle_t *h)
{
	struct mconn *c = h->data;
	struct dl_metrics *m = c->m;

	if (--c->handles > 0)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		m->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	m->nconns--;
	free(c->resp.p);
	dl_tls_conn_free(c->tls);
	free(c);
	maybe_free(m);
}

static void mconn_close(struct mconn *c)
{
	if (uv_is_closing((uv_handle_t *)&c->tcp))
		return;
	uv_close((uv_handle_t *)&c->tcp, on_mconn_closed);
	uv_close((uv_handle_t *)&c->timer, on_mconn_closed);
}

/* ---- the page ----------------------------------------------------------- */

struct page {
	struct dl_buf b;
	const char *family; /* the labelled family last written */
};

/*
 * A STATS key as a Prometheus name: base units as the last word (a value
 * in ms or us becomes seconds: uptime_ms -> uptime_seconds,
 * store_latency_us_max -> store_latency_max_seconds) and counters ending
 * in _total exactly once (connections_total stays connections_total).
 * *scale turns the value into the unit of the name.
 */
static void metric_name(const struct dl_stat *s, char *out, size_t cap,
			double *scale)
{
	static const struct {
		const char *from, *to;
		double scale;
	} units[] = {
		{"_ms", "_seconds", 1e-3},
		{"_us_avg", "_avg_seconds", 1e-6},
		{"_us_max", "_max_seconds", 1e-6},
	};
	size_t n = strlen(s->name), i, k;
	int total = s->kind == DL_STAT_COUNTER &&
		    !(n >= 6 && strcmp(s->name + n - 6, "_total") == 0);

	*scale = 1;
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		k = strlen(units[i].from);
		if (n > k && strcmp(s->name + n - k, units[i].from) == 0) {
			snprintf(out, cap, "%.*s%s%s", (int)(n - k), s->name,
				 units[i].to, total ? "_total" : "");
			*scale = units[i].scale;
			return;
		}
	}
	snprintf(out, cap, "%s%s", s->name, total ? "_total" : "");
}

static void emit_stat(const struct dl_stat *s, void *arg)
{
	struct page *pg = arg;
	struct dl_buf *b = &pg->b;
	char name[96], value[32];
	double scale;

	if (s->stats_only)
		return;
	metric_name(s, name, sizeof(name), &scale);
	if (scale == 1)
		snprintf(value, sizeof(value), "%llu",
			 (unsigned long long)s->value);
	else
		snprintf(value, sizeof(value), "%.6f",
			 (double)s->value * scale);
	/* A labelled family gets its HELP/TYPE once, before its first
	 * series (the series of a family come one after another). */
	if (!s->label || !pg->family || strcmp(pg->family, s->name) != 0) {
		pg->family = s->label ? s->name : NULL;
		dl_buf_printf(b, "# HELP dlockd_%s %s\n", name, s->help);
		dl_buf_printf(b, "# TYPE dlockd_%s %s\n", name,
			      s->kind == DL_STAT_COUNTER ? "counter" : "gauge");
	}
	if (s->label)
		dl_buf_printf(b, "dlockd_%s{%s=\"%s\"} %s\n", name,
			      s->label_key, s->label, value);
	else
		dl_buf_printf(b, "dlockd_%s %s\n", name, value);
}

static void emit_hist(struct dl_buf *b, const char *name, const char *help,
		      const struct dl_hist *h)
{
	uint64_t cum = 0;
	size_t i;

	dl_buf_printf(b, "# HELP dlockd_%s_seconds %s\n", name, help);
	dl_buf_printf(b, "# TYPE dlockd_%s_seconds histogram\n", name);
	for (i = 0; i < DL_HIST_BUCKETS; i++) {
		cum += h->bucket[i];
		if (i < DL_HIST_BUCKETS - 1)
			dl_buf_printf(
				b, "dlockd_%s_seconds_bucket{le=\"%g\"} %llu\n",
				name, (double)dl_hist_bounds_ms[i] / 1000,
				(unsigned long long)cum);
		else
			dl_buf_printf(
				b,
				"dlockd_%s_seconds_bucket{le=\"+Inf\"} %llu\n",
				name, (unsigned long long)cum);
	}
	dl_buf_printf(b, "dlockd_%s_seconds_sum %.3f\n", name,
		      (double)h->sum_ms / 1000);
	dl_buf_printf(b, "dlockd_%s_seconds_count %llu\n", name,
		      (unsigned long long)h->count);
}

static void respond(struct mconn *c, int status, const char *reason,
		    const struct dl_buf *body)
{
	size_t blen = body ? body->len : 0;

	dl_buf_printf(
		&c->resp,
		"HTTP/1.1 %d %s\r\n"
		"Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
		"Content-Length: %zu\r\n"
		"Connection: close\r\n\r\n",
		status, reason, blen);
	if (body)
		dl_buf_add(&c->resp, body->p, body->len);
}

static void on_written(uv_write_t *req, int status)
{
	struct mwrite *w = req->data;

	if (w->last || status < 0)
		mconn_close(w->c);
	free(w);
}

/* Write n bytes (copied); `last`: then close. */
static void mconn_write(struct mconn *c, const char *p, size_t n, int last)
{
	struct mwrite *w;
	uv_buf_t b;

	if (n == 0) {
		if (last)
			mconn_close(c);
		return;
	}
	if (!(w = malloc(sizeof(*w) + n))) {
		mconn_close(c);
		return;
	}
	w->c = c;
	w->last = last;
	memcpy(w->data, p, n);
	w->req.data = w;
	b = uv_buf_init(w->data, (unsigned)n);
	if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
		free(w);
		mconn_close(c);
	}
}

/* TLS: send what the handshake (or an alert) has for the peer. */
static void tls_flush(struct mconn *c, int last)
{
	struct dl_buf b = {0};

	if (dl_tls_take(c->tls, &b) != 0)
		mconn_close(c);
	else
		mconn_write(c, b.p, b.len, last);
	free(b.p);
}

static void answer(struct mconn *c)
{
	const struct dl_locktab_stats *t = dl_locktab_stats(c->m->srv->tab);
	struct page pg = {{0}, NULL};

	c->answering = 1;
	uv_read_stop((uv_stream_t *)&c->tcp);
	if (strncmp(c->req, "GET ", 4) != 0) {
		respond(c, 405, "Method Not Allowed", NULL);
	} else if (strncmp(c->req + 4, "/metrics ", 9) != 0 &&
		   strncmp(c->req + 4, "/metrics?", 9) != 0) {
		respond(c, 404, "Not Found", NULL);
	} else {
		dl_stats_collect(c->m->srv, emit_stat, &pg);
		emit_hist(
			&pg.b, "wait",
			"Seconds from LOCK to grant (0 when granted at once).",
			&t->wait);
		emit_hist(&pg.b, "hold",
			  "Seconds from grant to release or expiry.", &t->hold);
		respond(c, 200, "OK", &pg.b);
		free(pg.b.p);
	}
	if (!c->resp.p) { /* out of memory: nothing to say */
		mconn_close(c);
		return;
	}
	if (c->tls) { /* the response, then close_notify, sealed */
		if (dl_tls_write(c->tls, c->resp.p, c->resp.len) != 0) {
			mconn_close(c);
			return;
		}
		dl_tls_shutdown(c->tls);
		tls_flush(c, 1);
		return;
	}
	mconn_write(c, c->resp.p, c->resp.len, 1);
}

/* ---- connections -------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct mconn *c = h->data;

	(void)suggested;
	if (c->tls) {
		buf->base = dl_tls_rbuf(&buf->len);
		return;
	}
	buf->base = c->req + c->len;
	buf->len = sizeof(c->req) - 1 - c->len;
}

/* n more bytes of request in req: answer once its head is complete. */
static void got_request(struct mconn *c, size_t n)
{
	c->len += n;
	c->req[c->len] = '\0';
	if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n"))
		answer(c);
	else if (c->len == sizeof(c->req) - 1)
		mconn_close(c); /* no request of ours is that long */
}

/* TLS: ciphertext in, the request's plaintext out (the handshake's
 * records go back as they come). */
static void tls_read(struct mconn *c, const char *p, size_t n)
{
	size_t got;

	if (dl_tls_feed(c->tls, p, n) != 0) {
		mconn_close(c);
		return;
	}
	while (!c->answering && !uv_is_closing((uv_handle_t *)&c->tcp)) {
		if (dl_tls_read(c->tls, c->req + c->len,
				sizeof(c->req) - 1 - c->len, &got) != 0) {
			dl_info("metrics: TLS: %s", dl_tls_error(c->tls));
			tls_flush(c, 1); /* its alert, then close */
			return;
		}
		if (got == 0)
			break;
		got_request(c, got);
	}
	if (!c->answering && !uv_is_closing((uv_handle_t *)&c->tcp) &&
	    dl_tls_pending(c->tls))
		tls_flush(c, 0);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct mconn *c = s->data;

	if (n < 0) {
		mconn_close(c);
		return;
	}
	if (c->tls)
		tls_read(c, buf->base, (size_t)n);
	else
		got_request(c, (size_t)n);
}

static void on_timeout(uv_timer_t *t)
{
	mconn_close(t->data);
}

/* All slots taken: close the oldest connection still waiting for its
 * request; 0 if every one is being answered. */
static int evict_oldest(struct dl_metrics *m)
{
	struct mconn *c, *old = NULL;

	for (c = m->conns; c; c = c->next)
		if (!c->answering && !uv_is_closing((uv_handle_t *)&c->tcp))
			old = c;
	if (!old)
		return 0;
	dl_info("metrics: %d connections open, closing the oldest that sent no request",
		DL_METRICS_CONNS_MAX);
	mconn_close(old);
	return 1;
}

/* Connections not yet closing. */
static size_t open_conns(const struct dl_metrics *m)
{
	const struct mconn *c;
	size_t n = 0;

	for (c = m->conns; c; c = c->next)
		n += !uv_is_closing((const uv_handle_t *)&c->tcp);
	return n;
}

static void on_connection(uv_stream_t *l, int status)
{
	struct dl_metrics *m = l->data;
	struct dl_tls *tls = m->srv->tls;
	int full;
	struct mconn *c;

	if (status < 0)
		return;
	full = open_conns(m) >= DL_METRICS_CONNS_MAX && !evict_oldest(m);
	if (!(c = calloc(1, sizeof(*c))))
		return;
	c->m = m;
	c->handles = 2;
	uv_tcp_init(l->loop, &c->tcp);
	uv_timer_init(l->loop, &c->timer);
	c->tcp.data = c;
	c->timer.data = c;
	c->next = m->conns;
	if (m->conns)
		m->conns->prev = c;
	m->conns = c;
	m->nconns++;
	if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0 || full ||
	    (tls && dl_tls_conn_new(tls, uv_now(l->loop), &c->tls) != 0)) {
		mconn_close(c);
		return;
	}
	uv_timer_start(&c->timer, on_timeout, DL_METRICS_TIMEOUT_MS, 0);
	uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ---- listener ----------------------------------------------------------- */

int dl_metrics_start(struct dl_server *srv, struct dl_metrics **out)
{
	struct dl_metrics *m;
	struct sockaddr_storage ss;
	char host[256];
	int port, r;

	*out = NULL;
	if (!srv->cfg.metrics[0])
		return 0;
	if (dl_hostport_parse(srv->cfg.metrics, host, sizeof(host), &port))
		return UV_EINVAL;
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
	    uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
		return UV_EINVAL;
	if (!(m = calloc(1, sizeof(*m))))
		return UV_ENOMEM;
	m->srv = srv;
	uv_tcp_init(srv->loop, &m->listener);
	m->listener.data = m;
	m->listening = 1;
	r = uv_tcp_bind(&m->listener, (struct sockaddr *)&ss, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&m->listener, 16, on_connection);
	if (r != 0) {
		m->stopping = 1;
		dl_metrics_stop(m);
		return r;
	}
	dl_notice("metrics on %s://%s/metrics", srv->tls ? "https" : "http",
		  srv->cfg.metrics);
	*out = m;
	return 0;
}

static void on_listener_closed(uv_handle_t *h)
{
	struct dl_metrics *m = h->data;

	m->listening = 0;
	maybe_free(m);
}

void dl_metrics_stop(struct dl_metrics *m)
{
	struct mconn *c;

	if (!m)
		return;
	m->stopping = 1;
	for (c = m->conns; c; c = c->next)
		mconn_close(c);
	uv_close((uv_handle_t *)&m->listener, on_listener_closed);
}
