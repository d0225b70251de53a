/*
 * conn.h -- one client connection: bounded input, held output, life cycle.
 *
 * Owns its libuv stream handle (embedded), its input line buffer and its
 * two output buffers, and the lock-table session. It is freed only in the
 * stream's close callback; code that decides to end a connection marks it
 * (dl_conn_end) and the server's check phase finishes the job, so a
 * connection is never freed inside one of its own callbacks nor inside a
 * lock-table call.
 *
 * Output: replies and events are appended to `out`. A durable reply also
 * sets a hold: bytes from `hold_off` on may not be written before epoch
 * `hold_epoch` commits (later durable replies raise the epoch; one hold per
 * connection suffices because epochs commit in order). Writable bytes are
 * tried with uv_try_write() in the check phase; what the kernel does not
 * take moves to `wout` and goes through uv_write(). The sum of both is
 * bounded by max_output: past it the connection is closed, so a client that
 * never reads costs a bounded amount of memory.
 */
#ifndef DL_SERVER_CONN_H
#define DL_SERVER_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/proto.h"
#include "server/locktab.h"

struct dl_server;

struct dl_obuf {
	char *p;
	size_t len;
	size_t cap;
};

enum dl_conn_end { DL_END_NONE = 0, DL_END_GRACEFUL, DL_END_ABORT };

struct dl_delayed; /* a reply held back on purpose (conn.c) */

struct dl_conn {
	union {
		uv_handle_t handle;
		uv_stream_t stream;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} u;
	uv_write_t wreq;
	struct dl_server *srv;
	struct dl_session sess;
	struct dl_conn *next, *prev; /* srv->conns */
	struct dl_conn *wnext;	     /* srv->writeq */
	struct dl_conn *hnext;	     /* srv->held */
	struct dl_conn *enext;	     /* srv->endq */
	uint64_t id;
	struct dl_obuf out;	    /* pending output */
	struct dl_obuf wout;	    /* output handed to uv_write */
	size_t hold_off;	    /* out[hold_off..] waits for hold_epoch */
	uint64_t hold_epoch;	    /* 0: nothing held */
	struct dl_delayed *delayed; /* input paused until it is sent */
	unsigned authed : 1;
	unsigned writing : 1; /* a uv_write is in flight */
	unsigned in_writeq : 1;
	unsigned in_held : 1;
	unsigned in_endq : 1;
	unsigned ended : 1;    /* session closed, reading stopped */
	unsigned shutting : 1; /* uv_shutdown called, close follows */
	unsigned closing : 1;  /* uv_close called */
	unsigned end : 2;      /* enum dl_conn_end */
	char peer[64];	       /* for logs: "127.0.0.1:5000" or "unix" */
	struct dl_linebuf in;
};

/* Accept one pending connection on `listener`. */
void dl_conn_accept(struct dl_server *srv, uv_stream_t *listener);

/* Queue a line (with its CRLF) for the client. durable: hold it (and what
 * follows) until the open epoch commits. */
void dl_conn_send(struct dl_conn *c, const char *line, size_t len, int durable);

/* Send `line` after ms, reading nothing from the connection meanwhile, so
 * that later requests keep their order (a failed AUTH is answered this
 * way, to slow down guessing). */
void dl_conn_send_delayed(struct dl_conn *c, const char *line, size_t len,
			  uint64_t ms);

/* End the connection after the current request: GRACEFUL writes what is
 * queued first, ABORT drops it. Safe anywhere, including event hooks. */
void dl_conn_end(struct dl_conn *c, enum dl_conn_end how, const char *why);

/* The epoch committed: release a hold at or below it. */
void dl_conn_release(struct dl_conn *c, uint64_t durable);
/* Write what may be written now (check phase). */
void dl_conn_flush(struct dl_conn *c);
/* Finish ending: close the session, then the handle once output is out. */
void dl_conn_finish_end(struct dl_conn *c);
/* 1 once ending needs no more check-phase work (closing or closed). */
int dl_conn_done(const struct dl_conn *c);

#endif /* DL_SERVER_CONN_H */
