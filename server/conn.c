/* SPDX-License-Identifier: MIT */
/*
 * conn.c -- client connections (see conn.h for the buffering model).
 */
#include "server/conn.h"

#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "server/access.h"
#include "server/clock.h"
#include "server/cmd.h"
#include "server/conn_budget.h"
#include "server/log.h"
#include "server/server.h"
#include "server/watch.h"

/* Output buffers above this size are given back once they are empty. */
/* Events piling up in one loop iteration are written out from this size
 * on, before the check phase would (the kernel may take them). */
#define OUT_EARLY_WRITE (16 * 1024)
/* The kernel's send buffer of a connection (SO_SNDBUF; Linux doubles it
 * for its bookkeeping): what a client that does not read can leave in the
 * kernel, outside max_output and max_output_total, which count only the
 * daemon's buffers. Left to autotuning, a TCP socket takes up to
 * tcp_wmem's 4 MB: found from outside, 150 connections asking big
 * HOLDERS without reading held 420 MB in the kernel while the daemon
 * stayed at its 64 MiB budget. Replies of a lock service are small; a
 * long listing goes out at the client's pace either way. */
#define CONN_SNDBUF (64 * 1024)

/* An output buffer of c, empty: given back if bigger than c keeps. A
 * connection that has not authenticated keeps none: found from outside,
 * 4,000 of them that each had some output kept 64 KiB buffers out of
 * every count, the daemon at 236 MB for a 64 MiB budget. */
static void buf_trim(const struct dl_conn *c, struct dl_buf *b)
{
	if (b->len == 0 && b->cap > (c->authed ? DL_OUT_KEEP : 0)) {
		free(b->p);
		b->p = NULL;
		b->cap = 0;
	}
}

static void buf_consume(const struct dl_conn *c, struct dl_buf *b, size_t n)
{
	memmove(b->p, b->p + n, b->len - n);
	b->len -= n;
	buf_trim(c, b);
}

static void writeq_add(struct dl_conn *c)
{
	if (c->in_writeq || c->closing)
		return;
	c->in_writeq = 1;
	c->wnext = c->srv->writeq;
	c->srv->writeq = c;
}

static void held_list_add(struct dl_conn *c)
{
	if (c->in_held)
		return;
	c->in_held = 1;
	c->hnext = c->srv->held;
	c->srv->held = c;
}

/* A request read while the store's first link after a take-over was being
 * made (dl_conn_park). Owned by its connection; on srv->parked. */
struct dl_parked {
	size_t len;
	char line[];
};

static void parked_drop(struct dl_conn *c)
{
	struct dl_conn **pp = &c->srv->parked;

	if (!c->parked)
		return;
	while (*pp && *pp != c)
		pp = &(*pp)->pnext;
	if (*pp)
		*pp = c->pnext;
	free(c->parked);
	c->parked = NULL;
}

static void on_turn(uv_idle_t *h);

/* Its turn is over (conn.h, Turns): read nothing more until the next.
 * One that waits for its user's share (`waiting`) goes before those that
 * had a turn, so that each of a user's connections has one in turn. */
static void yield_turn(struct dl_conn *c, int waiting)
{
	struct dl_server *srv = c->srv;
	struct dl_conn **at = waiting ? srv->ywait_tail : srv->yielded_tail;

	c->yielded = 1;
	c->ynext = *at;
	*at = c;
	if (srv->yielded_tail == at)
		srv->yielded_tail = &c->ynext;
	if (waiting)
		srv->ywait_tail = &c->ynext;
	uv_read_stop(&c->u.stream);
	uv_idle_start(&srv->turn_idle, on_turn);
}

static void yielded_drop(struct dl_conn *c)
{
	struct dl_server *srv = c->srv;
	struct dl_conn **pp = &srv->yielded;

	if (!c->yielded)
		return;
	c->yielded = 0;
	while (*pp && *pp != c)
		pp = &(*pp)->ynext;
	if (*pp)
		*pp = c->ynext;
	if (srv->yielded_tail == &c->ynext)
		srv->yielded_tail = pp;
	if (srv->ywait_tail == &c->ynext)
		srv->ywait_tail = pp;
}

static void held_list_remove(struct dl_conn *c)
{
	struct dl_conn **pp = &c->srv->held;

	if (!c->in_held)
		return;
	while (*pp != c)
		pp = &(*pp)->hnext;
	*pp = c->hnext;
	c->in_held = 0;
}

/* An event, or a request, while over the budget: a connection of the
 * party (a user of the users file, else the connection alone) with the
 * most unread output is closed, the one of them with the most (its bytes
 * stop counting at once); with `of`, one of that user's. 0 when no
 * connection holds any. */
static int close_biggest(struct dl_server *srv, const struct dl_user *of)
{
	struct dl_conn *big = dl__conn_biggest(srv, of);

	if (!big)
		return 0;
	dl_conn_end(big, DL_END_ABORT, "output budget");
	return 1;
}

static int budget_close(struct dl_server *srv)
{
	return close_biggest(srv, NULL);
}

struct dl_delayed {
	uv_timer_t timer;
	struct dl_conn *c; /* NULL once the connection is gone */
	size_t len;
	char line[];
};

static void on_delayed_closed(uv_handle_t *h)
{
	free(h->data);
}

static void delayed_cancel(struct dl_conn *c)
{
	struct dl_delayed *d = c->delayed;

	if (!d)
		return;
	c->delayed = NULL;
	d->c = NULL;
	uv_close((uv_handle_t *)&d->timer, on_delayed_closed);
}

/* ---- life cycle --------------------------------------------------------- */

static void on_close(uv_handle_t *h)
{
	struct dl_conn *c = h->data;

	free(c->out.p);
	free(c->wout.p);
	dl_heldq_free(&c->held);
	dl_tls_conn_free(c->tls);
	free(c);
}

static void close_now(struct dl_conn *c)
{
	struct dl_server *srv = c->srv;

	if (c->closing)
		return;
	c->closing = 1;
	held_list_remove(c);
	delayed_cancel(c);
	parked_drop(c);
	yielded_drop(c);
	dl__conn_account(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	srv->nconns--;
	uv_close(&c->u.handle, on_close);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	struct dl_conn *c = req->data;

	(void)status;
	free(req);
	close_now(c);
}

void dl_conn_end(struct dl_conn *c, enum dl_conn_end how, const char *why)
{
	if (how <= c->end)
		return;
	if (!c->end) {
		dl_info("conn %llu %s: closing: %s", (unsigned long long)c->id,
			c->peer, why);
		c->ended_ms = uv_now(c->srv->loop);
	}
	c->end = how;
	/* An aborted connection's output is never sent: its memory goes now,
	 * not when the handle closes after the loop's iteration. The budget
	 * stops counting it at once (held_memory), so other connections fill
	 * it again within the iteration: found from outside, 4,000 clients
	 * that stopped reading took the daemon to 260 MB for a 64 MiB budget,
	 * the closed ones' buffers still held. What uv_write holds (wout) goes
	 * when the write is cancelled by the close. */
	if (how == DL_END_ABORT) {
		free(c->out.p);
		c->out = (struct dl_buf){0};
		if (!c->writing) {
			free(c->wout.p);
			c->wout = (struct dl_buf){0};
		}
	}
	dl__conn_account(c);
	/* No more requests are executed, so no more bytes are read: libuv
	 * would otherwise keep filling the input buffer nobody drains. */
	if (!c->closing)
		uv_read_stop(&c->u.stream);
	if (!c->in_endq) {
		c->in_endq = 1;
		c->enext = c->srv->endq;
		c->srv->endq = c;
	}
}

int dl_conn_holding(const struct dl_conn *c)
{
	return c->held.n > 0;
}

size_t dl_conn_queued(struct dl_conn *c)
{
	uint64_t now = uv_now(c->srv->loop);
	uv_os_fd_t fd;
	int n = 0;

	if (c->closing)
		return dl_conn_unread(c);
	if (!c->kq_valid || c->kq_ms != now) {
		if (uv_fileno(&c->u.handle, &fd) != 0 ||
		    ioctl(fd, SIOCOUTQ, &n) != 0 || n < 0)
			n = 0;
		c->kq = (size_t)n;
		c->kq_ms = now;
		c->kq_valid = 1;
	}
	return dl_conn_unread(c) + c->kq;
}

int dl_conn_pending(const struct dl_conn *c)
{
	return dl_conn_unread(c) > 0 || c->writing || c->delayed;
}

static void write_out(struct dl_conn *c);

/* Close with a reset: what the kernel holds for the client is dropped at
 * once (SO_LINGER 0), not kept for as long as the peer lives -- found from
 * outside, connections closed while their client did not read stayed in
 * the kernel as orphans of ~130 KB each, 667 MB for 5,000. */
static void close_reset(struct dl_conn *c)
{
	struct linger lg = {1, 0};
	uv_os_fd_t fd;

	if (c->u.handle.type == UV_TCP && uv_fileno(&c->u.handle, &fd) == 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close_now(c);
}

/* Check phase: called for every connection in the end queue until it is
 * closed. Returns with the connection either closed or still draining. */
void dl_conn_finish_end(struct dl_conn *c)
{
	uv_shutdown_t *req;

	if (!c->ended) {
		c->ended = 1;
		uv_read_stop(&c->u.stream);
		/* watches first: they are given back to the user */
		dl_watch_conn_end(c);
		dl_access_conn_end(c);
		dl_cmd_multi_end(c); /* before its session: what it took */
		dl_session_close(c->srv->tab, &c->sess);
	}
	if (c->closing)
		return;
	if (c->end == DL_END_ABORT) {
		close_reset(c);
		return;
	}
	if (uv_now(c->srv->loop) - c->ended_ms >= DL_END_DRAIN_MS) {
		dl_info("conn %llu %s: its last output not taken within %d ms, "
			"closing with a reset",
			(unsigned long long)c->id, c->peer, DL_END_DRAIN_MS);
		close_reset(c);
		return;
	}
	if (c->shutting || dl_conn_pending(c))
		return; /* still draining; called again next iteration */
	/* TLS says goodbye (close_notify) before the FIN. */
	if (c->tls && dl_tls_shutdown(c->tls)) {
		write_out(c);
		if (c->closing || dl_conn_pending(c))
			return;
	}
	/* Everything is out: send FIN, then close. */
	req = malloc(sizeof(*req));
	if (req) {
		req->data = c;
		if (uv_shutdown(req, &c->u.stream, on_shutdown) == 0) {
			c->shutting = 1;
			return;
		}
		free(req);
	}
	close_now(c);
}

/* 1 once the connection needs no more check-phase work. */
int dl_conn_done(const struct dl_conn *c)
{
	return c->closing || c->shutting;
}

/* ---- output ------------------------------------------------------------- */

static int is_event(enum dl_line_kind k)
{
	return k == DL_LINE_EVENT || k == DL_LINE_GRANTED_EVENT;
}

static int hold_line(struct dl_conn *c, const char *text, size_t len,
		     const struct dl_line *line)
{
	int err = dl_heldq_add(&c->held, text, len, line,
			       dl_store_epoch(c->srv->store));

	if (err == 0)
		held_list_add(c);
	return err;
}

void dl_conn_send(struct dl_conn *c, const char *text, size_t len,
		  const struct dl_line *line)
{
	static const struct dl_line reply = {.kind = DL_LINE_REPLY};
	struct dl_server *srv = c->srv;
	int err;

	if (!line)
		line = &reply;
#ifdef DL_PLANT_ACK_EARLY
	/* A planted bug for the fault campaign's self-test (tests/faults):
	 * replies go out before Redis has the change. Never in a real build. */
	struct dl_line early = *line;
	early.durable = 0;
	line = &early;
#endif
	if (c->end == DL_END_ABORT || c->closing || c->shutting)
		return;
	if (c->tls && !c->tls_open)
		return; /* nobody can read it before the handshake is done */
	srv->work += len / DL_TURN_BYTES; /* a long listing is a long turn */
	/* A burst of events (a reap budget, a queue served) goes to the
	 * kernel as it grows: the limit is for what the client leaves
	 * unread, not for what one loop iteration produces. */
	if (is_event(line->kind) && c->out.len >= OUT_EARLY_WRITE)
		write_out(c);
	if (is_event(line->kind) && dl__conn_over_budget(srv)) {
		budget_close(srv);
		if (c->end == DL_END_ABORT)
			return;
	}
	if (is_event(line->kind) && dl__conn_user_over(c)) {
		close_biggest(srv, dl__conn_sharer(c));
		if (c->end == DL_END_ABORT)
			return;
	}
	if (is_event(line->kind) &&
	    dl_conn_unread(c) + len > srv->cfg.max_output) {
		srv->st.output_overflows++;
		dl_notice(
			"conn %llu %s: output limit of %llu bytes reached by events, closing (client not reading)",
			(unsigned long long)c->id, c->peer,
			(unsigned long long)srv->cfg.max_output);
		dl_conn_end(c, DL_END_ABORT, "output limit");
		return;
	}
	if (line->durable || c->held.n)
		err = hold_line(c, text, len, line);
	else
		err = dl_buf_add(&c->out, text, len);
	if (err) {
		dl_conn_end(c, DL_END_ABORT, "out of memory");
		return;
	}
	dl__conn_account(c);
	if (!c->held.n)
		writeq_add(c);
}

void dl_conn_send_held(struct dl_conn *c, uint64_t durable)
{
	uint64_t now = dl_mono_ms();
	size_t i, n = dl_heldq_covered(&c->held, durable);

	/* What the released requests left until they were durable is done
	 * first (a shortening REFRESH: dl_cmd_released), so that no line of
	 * them states more than the lease then has left. */
	for (i = 0; i < n; i++)
		dl_cmd_released(c, &c->held.v[i].line,
				dl_heldq_text(&c->held, i));
	for (i = 0; i < n; i++) {
		if (dl_heldq_emit(&c->held, i, c->srv->tab, now, &c->out)) {
			dl_conn_end(c, DL_END_ABORT, "out of memory");
			break;
		}
	}
	dl_heldq_drop(&c->held, i);
	if (i)
		writeq_add(c);
	dl__conn_account(c);
}

/* A withdrawn line (or its replacement) to the writable output. */
static int out_line(void *ctx, const char *text, size_t len,
		    const struct dl_line *line)
{
	struct dl_conn *c = ctx;

	(void)line;
	if (dl_buf_add(&c->out, text, len) == 0)
		return 0;
	dl_conn_end(c, DL_END_ABORT, "out of memory");
	return 1;
}

void dl_conn_withdraw_held(struct dl_conn *c, dl_held_fn fn)
{
	/* The lines leave the connection before the walk: fn calls into the
	 * lock table, whose changes may send an event on this very
	 * connection (a watcher's, watch.h). It goes out before the line
	 * that caused it, and cannot move the lines under the walk. */
	dl_heldq_withdraw(&c->held, c, fn, out_line, c);
	writeq_add(c);
	dl__conn_account(c);
}

static void resume_input(struct dl_conn *c);

static void on_write(uv_write_t *req, int status)
{
	struct dl_conn *c = req->data;

	c->writing = 0;
	c->wout.len = 0;
	buf_trim(c, &c->wout); /* a big listing's buffer is not kept */
	c->kq_valid = 0;       /* wout's bytes are the kernel's now */
	dl__conn_account(c);
	if (status < 0) {
		if (status != UV_ECANCELED)
			dl_conn_end(c, DL_END_ABORT, uv_strerror(status));
		return;
	}
	writeq_add(c);
	resume_input(c);
}

/* Hand what the kernel did not take of out (from byte `taken`) to
 * uv_write(). */
static void write_rest(struct dl_conn *c, size_t taken)
{
	struct dl_buf t;
	uv_buf_t b;
	int r;

	if (taken == 0) {
		t = c->wout; /* wout is empty: swap, no copy */
		c->wout = c->out;
		c->out = t;
	} else {
		if (dl_buf_add(&c->wout, c->out.p + taken,
			       c->out.len - taken)) {
			dl_conn_end(c, DL_END_ABORT, "out of memory");
			return;
		}
		buf_consume(c, &c->out, c->out.len); /* gives a big one back */
	}
	b = uv_buf_init(c->wout.p, (unsigned)c->wout.len);
	c->wreq.data = c;
	r = uv_write(&c->wreq, &c->u.stream, &b, 1, on_write);
	if (r < 0) {
		c->wout.len = 0;
		dl_conn_end(c, DL_END_ABORT, uv_strerror(r));
		return;
	}
	c->writing = 1;
}

/* Hand out's bytes to the kernel (what it does not take, to uv_write). */
static void write_out(struct dl_conn *c)
{
	uv_buf_t b;
	int r;

	if (c->closing || c->shutting || c->writing)
		return;
	/* out's plaintext becomes the ciphertext to send, handshake
	 * records included */
	if (c->tls && dl_tls_seal(c->tls, &c->out) != 0) {
		dl_conn_end(c, DL_END_ABORT, "TLS: cannot encrypt");
		return;
	}
	if (c->out.len == 0)
		return;
	b = uv_buf_init(c->out.p, (unsigned)c->out.len);
	r = uv_try_write(&c->u.stream, &b, 1);
	if (r == UV_EAGAIN || r == UV_ENOSYS)
		r = 0;
	if (r < 0) {
		dl_conn_end(c, DL_END_ABORT, uv_strerror(r));
		return;
	}
	if (r > 0)
		c->kq_valid = 0;
	if ((size_t)r == c->out.len)
		buf_consume(c, &c->out, (size_t)r);
	else
		write_rest(c, (size_t)r); /* the kernel is full */
	dl__conn_account(c);
}

void dl_conn_flush(struct dl_conn *c)
{
	c->in_writeq = 0;
	write_out(c);
	dl_watch_drained(c);
	resume_input(c);
}

/* ---- input -------------------------------------------------------------- */

/* Input waits while this much output is unread, and resumes once half of
 * it is gone (conn.h, backpressure). */
static size_t high_water(const struct dl_conn *c)
{
	return c->srv->cfg.max_output / 2;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct dl_conn *c = h->data;
	size_t avail;

	(void)suggested;
	if (c->tls) { /* ciphertext: dl_tls_feed() copies it at once */
		buf->base = dl_tls_rbuf(&buf->len);
		return;
	}
	buf->base = dl_linebuf_space(&c->in, &avail);
	buf->len = avail;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void tls_pump(struct dl_conn *c);

/* Execute the complete lines buffered, until the connection ends, its
 * input is paused by a delayed reply, too much output is unread, or its
 * turn is over. */
static void process_input(struct dl_conn *c)
{
	enum dl_lb_result r;
	char *line;
	size_t len;
	int lines = 0;

	while (!c->end && !c->delayed && !c->parked && !c->awaiting) {
		if (c->srv->work - c->turn_at >= DL_TURN_WORK) {
			yield_turn(c, 0);
			return;
		}
		if (dl__conn_turn_spent(c)) {
			yield_turn(c, 1);
			return;
		}
		/* Over the budget, a connection with unread output pauses
		 * (below); one with nothing unread would grow the sum by a
		 * reply, and 999 of them asking a 371 KB HOLDERS each
		 * without reading held five times max_output_total (found
		 * from outside): the slowest readers go first, as for an
		 * event. */
		while (dl_conn_unread(c) == 0 && dl__conn_over_budget(c->srv) &&
		       budget_close(c->srv))
			;
		/* the same within a user's share: its clients that never
		 * read cannot take the budget from the others */
		while (dl_conn_unread(c) == 0 && dl__conn_user_over(c) &&
		       close_biggest(c->srv, dl__conn_sharer(c)))
			;
		if (dl_conn_unread(c) > high_water(c) ||
		    (dl_conn_unread(c) > 0 &&
		     (dl__conn_over_budget(c->srv) || dl__conn_user_over(c)))) {
			c->paused = 1;
			uv_read_stop(&c->u.stream);
			return;
		}
		r = dl_linebuf_next(&c->in, &line, &len);
		if (r == DL_LB_NONE) {
			/* all complete lines done: what is left, if
			 * anything, is a line still arriving */
			if (c->in.len > c->in.start || c->in.discard) {
				if (lines || !c->partial_since)
					c->partial_since = uv_now(c->srv->loop);
			} else {
				c->partial_since = 0;
			}
			break;
		}
		lines++;
		c->srv->work += DL_TURN_REQUEST;
		c->active_ms = uv_now(c->srv->loop);
		if (r == DL_LB_LINE) {
			uint64_t w0 = c->srv->work - DL_TURN_REQUEST;

			dl_cmd_execute(c, line, len);
			dl__conn_turn_charge(c, c->srv->work - w0);
		} else if (r == DL_LB_TOOLONG) {
			dl_conn_error(c, DL_ELINETOOLONG,
				      "line longer than 1024 bytes",
				      DL_STR_NULL);
		} else {
			dl_conn_error(c, DL_ELINETOOLONG,
				      "no end of line in 65536 bytes, closing",
				      DL_STR_NULL);
			dl_conn_end(c, DL_END_GRACEFUL, "no end of line");
		}
	}
}

/* Execute what is buffered, then read again unless something stops it.
 * Called when input resumes after the server paused it (unread output, a
 * delayed reply): the pause was the server's doing, so the timeouts of
 * dl_conn_sweep start again from now. */
static void read_more(struct dl_conn *c)
{
	uint64_t now = uv_now(c->srv->loop);

	if (c->yielded)
		return; /* its turn will come (on_turn) */
	c->turn_at = c->srv->work;
	if (c->partial_since)
		c->partial_since = now;
	c->active_ms = now;
	process_input(c);
	if (c->tls) /* what TLS holds already, before reading more */
		tls_pump(c);
	if (!c->end && !c->delayed && !c->parked && !c->awaiting &&
	    !c->paused && !c->yielded &&
	    uv_read_start(&c->u.stream, on_alloc, on_read) != 0)
		dl_conn_end(c, DL_END_ABORT, "cannot read");
}

/* The next turn of each connection that yielded, in the order they did;
 * those that yield again wait for the next iteration. */
static void on_turn(uv_idle_t *h)
{
	struct dl_server *srv = h->data;
	struct dl_conn *c = srv->yielded, *next;

	srv->yielded = NULL;
	srv->yielded_tail = &srv->yielded;
	srv->ywait_tail = &srv->yielded;
	for (; c; c = next) {
		next = c->ynext;
		c->yielded = 0;
		if (!c->end && !c->closing && !srv->draining)
			read_more(c);
	}
	if (!srv->yielded)
		uv_idle_stop(h);
}

/* Output drained: a paused connection reads again below half the high
 * water mark. */
static void resume_input(struct dl_conn *c)
{
	struct dl_server *srv = c->srv;

	if (!c->paused || dl_conn_unread(c) > high_water(c) / 2 || c->end ||
	    srv->draining ||
	    (dl_conn_unread(c) > 0 &&
	     srv->out_unread > srv->cfg.max_output_total / 4 * 3))
		return;
	c->paused = 0;
	read_more(c);
}

void dl_conn_budget_wake(struct dl_server *srv)
{
	struct dl_conn *c, *next;

	srv->budget_wake = 0;
	for (c = srv->conns; c; c = next) {
		next = c->next;
		dl_watch_drained(c);
		resume_input(c);
	}
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct dl_conn *c = s->data;

	if (nread < 0) {
		/* EOF: the client will send nothing more, but may still be
		 * reading (echo CMD | nc): finish the replies, then close. */
		dl_conn_end(c, nread == UV_EOF ? DL_END_GRACEFUL : DL_END_ABORT,
			    nread == UV_EOF ? "peer closed"
					    : uv_strerror((int)nread));
		return;
	}
	if (nread == 0)
		return;
	c->turn_at = c->srv->work;
	if (c->tls) {
		if (dl_tls_feed(c->tls, buf->base, (size_t)nread) != 0)
			dl_conn_end(c, DL_END_ABORT, "out of memory");
		else
			tls_pump(c);
		return;
	}
	dl_linebuf_commit(&c->in, (size_t)nread);
	process_input(c);
}

/* ---- TLS ---------------------------------------------------------------- */

/* The handshake is done: name the peer, if its certificate names it. */
static void tls_opened(struct dl_conn *c)
{
	const char *name = dl_tls_peer_name(c->tls);
	char how[96], why[DL_WHY_MAX];
	size_t n;

	c->tls_open = 1;
	c->srv->st.tls_handshakes++;
	n = strlen(c->peer);
	if (name)
		snprintf(c->peer + n, sizeof(c->peer) - n, " cert=%s", name);
	dl_tls_describe(c->tls, how, sizeof(how));
	dl_info("conn %llu %s: TLS handshake done (%s)",
		(unsigned long long)c->id, c->peer, how);
	/* a verified certificate's name is a user of the users file: the
	 * connection is that user (access.h); else it may still AUTH */
	if (name && !c->authed &&
	    dl_access_login_name(c, name, why, sizeof(why)) == 0)
		dl_info("conn %llu %s: user %s, by its certificate",
			(unsigned long long)c->id, c->peer, name);
}

/* A peer that broke TLS (plaintext on the TLS port, a certificate
 * refused, garbage): its alert goes out, then the connection closes. */
static void tls_failed(struct dl_conn *c)
{
	c->srv->st.tls_failures++;
	dl_notice("conn %llu %s: TLS %s: %s, closing",
		  (unsigned long long)c->id, c->peer,
		  c->tls_open ? "error" : "handshake failed",
		  dl_tls_error(c->tls));
	dl_conn_end(c, DL_END_GRACEFUL, "TLS error");
	writeq_add(c);
}

/* Decrypt what TLS holds into the line buffer and execute it, for as long
 * as the connection takes requests (process_input's conditions); what TLS
 * has to send (its handshake, an alert) is written at the flush point. */
static void tls_pump(struct dl_conn *c)
{
	char *space;
	size_t avail, got;
	int r;

	while (!c->end && !c->delayed && !c->parked && !c->awaiting &&
	       !c->paused && !c->yielded) {
		space = dl_linebuf_space(&c->in, &avail);
		r = dl_tls_read(c->tls, space, avail, &got);
		if (r == DL_EPROTO) {
			tls_failed(c);
			return;
		}
		if (!c->tls_open && dl_tls_state(c->tls) == DL_TLS_OPEN)
			tls_opened(c);
		if (got == 0)
			break;
		dl_linebuf_commit(&c->in, got);
		process_input(c);
	}
	if (dl_tls_pending(c->tls))
		writeq_add(c);
	/* a peer's close after its requests: once they are all done (a
	 * connection that yielded has some left, its next turn comes here) */
	if (dl_tls_peer_closed(c->tls) && !c->end && !c->yielded)
		dl_conn_end(c, DL_END_GRACEFUL, "peer closed");
}

/*
 * Slots held by connections that say nothing useful. One timer checks
 * every connection every DL_SWEEP_MS (server.c): cheaper than a timer per
 * connection, and nothing at all per byte read. A line begun and not
 * ended within request_timeout (a client dripping bytes) gets ERR LIMIT
 * and the connection is closed; a connection without a request for
 * idle_timeout gets * BYE idle and is closed, unless it waits for a lock
 * (its wait is a request in progress). Closing ends the session as any
 * disconnect does: waits are cancelled, leases last until their TTL.
 */
int dl_conn_sweep(struct dl_conn *c, uint64_t now)
{
	const struct dl_config *cfg = &c->srv->cfg;
	char why[160], d[DL_DURATION_TEXT_MAX];

	if (c->end)
		return 0;
	/* also while paused: a connection must not hold an unauthenticated
	 * slot by pipelining without reading */
	if (dl_access_sweep(c, now))
		return 1;
	/* a connection the server holds back (its output, a delayed reply,
	 * the store, its turn) is not the one that is slow */
	if (c->paused || c->delayed || c->parked || c->awaiting || c->yielded)
		return 0;
	if (c->tls && !c->tls_open &&
	    now - dl_tls_since(c->tls) >= cfg->tls_handshake_timeout_ms) {
		c->srv->st.tls_failures++;
		dl_notice(
			"conn %llu %s: TLS handshake not done within %s, closing",
			(unsigned long long)c->id, c->peer,
			dl_format_duration(cfg->tls_handshake_timeout_ms, d));
		dl_conn_end(c, DL_END_ABORT, "TLS handshake timeout");
		return 1;
	}
	if (cfg->request_timeout_ms && c->partial_since &&
	    now - c->partial_since >= cfg->request_timeout_ms) {
		c->srv->st.request_timeouts++;
		snprintf(
			why, sizeof(why),
			"limit reached: request line not ended within %s (request_timeout), closing",
			dl_format_duration(cfg->request_timeout_ms, d));
		dl_notice(
			"conn %llu %s: request line not ended within %s, closing",
			(unsigned long long)c->id, c->peer, d);
		dl_conn_error(c, DL_ELIMIT, why, DL_STR_NULL);
		dl_conn_end(c, DL_END_GRACEFUL, "request timeout");
		return 1;
	}
	if (cfg->idle_timeout_ms && !c->sess.waiters &&
	    now - c->active_ms >= cfg->idle_timeout_ms) {
		c->srv->st.idle_timeouts++;
		dl_notice("conn %llu %s: no request for %s, closing",
			  (unsigned long long)c->id, c->peer,
			  dl_format_duration(cfg->idle_timeout_ms, d));
		dl_conn_bye(c, "idle");
		dl_conn_end(c, DL_END_GRACEFUL, "idle timeout");
		return 1;
	}
	return 0;
}

static void on_delayed(uv_timer_t *t)
{
	struct dl_delayed *d = t->data;
	struct dl_conn *c = d->c;

	c->delayed = NULL;
	uv_close((uv_handle_t *)&d->timer, on_delayed_closed);
	dl_conn_send(c, d->line, d->len, NULL);
	if (c->end_after_delayed) {
		dl_conn_end(c, DL_END_GRACEFUL, "too many failed AUTHs");
		return;
	}
	if (c->srv->draining)
		return; /* shutting down: no further requests */
	read_more(c);
}

void dl_conn_send_delayed(struct dl_conn *c, const char *line, size_t len,
			  uint64_t ms, int last)
{
	struct dl_delayed *d;

	if (ms == 0 || c->delayed || !(d = malloc(sizeof(*d) + len))) {
		dl_conn_send(c, line, len, NULL);
		if (last)
			dl_conn_end(c, DL_END_GRACEFUL,
				    "too many failed AUTHs");
		return;
	}
	c->end_after_delayed = last ? 1 : 0;
	d->c = c;
	d->len = len;
	memcpy(d->line, line, len);
	uv_timer_init(c->srv->loop, &d->timer);
	d->timer.data = d;
	uv_timer_start(&d->timer, on_delayed, ms, 0);
	c->delayed = d;
	uv_read_stop(&c->u.stream);
}

void dl_conn_await(struct dl_conn *c)
{
	c->awaiting = 1;
	uv_read_stop(&c->u.stream);
}

void dl_conn_answered(struct dl_conn *c)
{
	c->awaiting = 0;
	/* its next requests on a later turn, not inside the callback that
	 * answered (found in review: a PARTITION pipelined behind another
	 * ran inside the map's job callback, and two jobs ran at once) */
	if (!c->end && !c->closing && !c->srv->draining && !c->yielded)
		yield_turn(c, 0);
}

int dl_conn_park(struct dl_conn *c, const char *line, size_t len)
{
	struct dl_parked *p;

	if (c->parked || !(p = malloc(sizeof(*p) + len)))
		return DL_ENOMEM;
	p->len = len;
	memcpy(p->line, line, len);
	c->parked = p;
	c->pnext = c->srv->parked;
	c->srv->parked = c;
	uv_read_stop(&c->u.stream);
	return 0;
}

void dl_conn_unpark_all(struct dl_server *srv)
{
	struct dl_conn *c, *next;
	struct dl_parked *p;

	c = srv->parked;
	srv->parked = NULL;
	for (; c; c = next) {
		next = c->pnext;
		p = c->parked;
		c->parked = NULL;
		if (!c->end)
			dl_cmd_execute(c, p->line, p->len);
		free(p);
		if (!c->end && !srv->draining)
			read_more(c);
	}
}

/* c->peer and c->addr; -1 for a TCP peer already gone (reset before it
 * was accepted: it has no address any more, and was logged as "unix"). */
static int peer_name(struct dl_conn *c, int is_tcp)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	char host[48];

	if (!is_tcp) {
		snprintf(c->peer, sizeof(c->peer), "unix");
		snprintf(c->addr, sizeof(c->addr), "unix");
		return 0;
	}
	if (uv_tcp_getpeername(&c->u.tcp, (struct sockaddr *)&ss, &len))
		return -1;
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		uv_ip6_name(a, host, sizeof(host));
		snprintf(c->peer, sizeof(c->peer), "[%s]:%u", host,
			 ntohs(a->sin6_port));
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		uv_ip4_name(a, host, sizeof(host));
		snprintf(c->peer, sizeof(c->peer), "%s:%u", host,
			 ntohs(a->sin_port));
	}
	snprintf(c->addr, sizeof(c->addr), "%s", host);
	return 0;
}

static void on_reject_close(uv_handle_t *h)
{
	free(h->data);
}

/* Answer ERR LIMIT <why> and close: a connection refused at accept
 * (not in plaintext to a client that expects TLS). */
static void refuse(struct dl_conn *c, const char *why)
{
	char line[DL_REPLY_MAX];
	uv_buf_t b;
	int n;

	c->srv->st.connections_rejected++;
	n = snprintf(line, sizeof(line), "ERR LIMIT %s\r\n", why);
	b = uv_buf_init(line, (unsigned)n);
	if (!c->tls && !(c->u.handle.type == UV_TCP && c->srv->tls) &&
	    uv_try_write(&c->u.stream, &b, 1) < 0)
		dl_debug("refused connection: write failed");
	uv_close(&c->u.handle, on_close); /* frees c (and its TLS) */
}

void dl_conn_accept(struct dl_server *srv, uv_stream_t *listener)
{
	struct dl_conn *c = calloc(1, sizeof(*c));
	int is_tcp = listener->type == UV_TCP;
	const char *why = NULL;
	int r;

	if (!c)
		return;
	c->srv = srv;
	c->u.handle.data = c;
	if (is_tcp)
		r = uv_tcp_init(srv->loop, &c->u.tcp);
	else
		r = uv_pipe_init(srv->loop, &c->u.pipe, 0);
	if (r) {
		free(c);
		return;
	}
	if (uv_accept(listener, &c->u.stream) != 0) {
		uv_close(&c->u.handle, on_reject_close);
		return;
	}
	if (srv->nconns >= srv->cfg.max_connections || srv->draining) {
		dl_warn("connection refused: max_connections (%llu) reached",
			(unsigned long long)srv->cfg.max_connections);
		refuse(c, "too many connections");
		return;
	}
	if (is_tcp)
		uv_tcp_nodelay(&c->u.tcp, 1);
	{
		int sndbuf = CONN_SNDBUF;

		(void)uv_send_buffer_size(&c->u.handle, &sndbuf);
	}
	if (peer_name(c, is_tcp) != 0) {
		uv_close(&c->u.handle, on_reject_close);
		return;
	}
	c->id = ++srv->conn_seq;
	c->active_ms = uv_now(srv->loop);
	/* who it is, if it needs to prove nothing (access.h); a refusal
	 * (the caps and the rate of one address) costs no TLS state */
	if (dl_access_accept(c, &why) != 0) {
		dl_info("conn %s refused: %s", c->peer, why);
		refuse(c, why);
		return;
	}
	if (is_tcp && srv->tls &&
	    dl_tls_conn_new(srv->tls, c->active_ms, &c->tls) != 0) {
		dl_access_conn_end(c);
		uv_close(&c->u.handle, on_close); /* frees c and its TLS */
		return;
	}
	dl_linebuf_init(&c->in);
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	srv->nconns++;
	srv->st.connections_total++;
	dl_info("conn %llu %s: connected", (unsigned long long)c->id, c->peer);
	if ((r = uv_read_start(&c->u.stream, on_alloc, on_read)) != 0)
		dl_conn_end(c, DL_END_ABORT, uv_strerror(r));
}
