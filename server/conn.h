/* SPDX-License-Identifier: MIT */
/*
 * conn.h -- one client connection: bounded input, held output, life cycle.
 *
 * Owns its libuv stream handle (embedded), its input line buffer, its
 * output buffers and the lock-table session. It is freed only in the
 * stream's close callback; code that decides to end a connection marks it
 * (dl_conn_end) and the server's check phase finishes the job, so a
 * connection is never freed inside one of its own callbacks nor inside a
 * lock-table call.
 *
 * Output. A line goes to one of two places:
 *   out   bytes that may be written now: tried with uv_try_write() in the
 *         check phase; what the kernel does not take moves to `wout` and
 *         goes through uv_write();
 *   held  lines waiting for durability: a durable reply or event and every
 *         line after it (replies stay in order). Each held line records
 *         the store epoch it waits for; when the store commits an epoch,
 *         the held lines up to it move to `out` (dl_conn_send_held). A line
 *         that states a lease's TTL (GRANTED, REFRESHED, * EXPIRING) is
 *         rewritten then with the TTL that remains at that moment -- of the
 *         deadline it
 *         stated, and of the lease as it is now (a later REFRESH of the
 *         same owner may have shortened it) -- so a reply that waited for
 *         Redis never promises more than the lease has left (0 if it ended
 *         meanwhile; its * EXPIRED follows). When persistence goes
 *         down, dl_conn_withdraw_held() hands every held line to a callback
 *         (cmd.c) that withdraws the grants that never became durable, and
 *         the lines go out at once: no request waits for Redis longer than
 *         the store takes to declare it lost (redis_timeout). A held line
 *         knows where its lock's name and its request's tag are in its
 *         text (struct dl_line, set where it is formatted: cmd.c), so its
 *         withdrawal parses nothing. A REFRESH
 *         that shortens a lease changes the lease only when its reply is
 *         released (dl_locktab_shorten): withdrawn, it changed nothing.
 *         The queue itself, and the whole path of a durable reply from
 *         request to release or withdrawal, are in held.h.
 *
 * Backpressure. While the bytes the client has not read (out, wout and
 * held) exceed half of max_output, the connection's input is neither read
 * nor executed: a client that pipelines faster than it reads is slowed
 * down, never disconnected, and its replies stay within max_output plus
 * one request's reply. Events cannot be throttled that way (expiries,
 * grants of queued requests): an event that would take the unread bytes
 * past max_output closes the connection, so a client that never reads
 * costs a bounded amount of memory.
 *
 * The kernel's part. What the kernel takes of a connection's output is
 * out of these counts; its send buffer is capped (CONN_SNDBUF, 64 KiB),
 * so that a client that does not read leaves its bytes in the daemon's
 * buffers, where they are counted, not megabytes in the kernel's.
 *
 * A budget for all of them. max_output bounds one connection, not the
 * sum: 200 connections pipelining without reading held 149 MB (found from
 * outside). The memory of every connection's unread output -- its
 * buffers as allocated, while it has unread bytes -- is summed up
 * (srv->out_unread, kept by each change of a connection's buffers), and
 * while the sum is above max_output_total, a connection with any unread
 * output executes no request (paused as above): replies stop growing
 * while a client that reads all it is sent goes on. Paused connections
 * resume once the sum is back under three quarters of the budget (the
 * check phase wakes them, dl_conn_budget_wake). An event that comes while
 * the sum is over the budget closes the connection with the most unread
 * output (a scan of the connections, made only then), for the events of
 * a client that never reads cannot be paused either; so does a request
 * of a connection with nothing unread (it cannot be paused for its own
 * output, and one reply each from a thousand connections that never read
 * passed the budget five times). The budget is thus exceeded by at most
 * one reply.
 *
 * Shares of it. Each user of the users file has its connections' part of
 * the sum (rt.out_unread, moved with the connection when its user
 * changes) and may hold max_output_per_user of it (a quarter of the
 * budget by default): past that, its connections are paused and its
 * requests and events close its own connection with the most, as above.
 * Over the whole budget, the connection closed is one of the user (or,
 * for the default user and before AUTH, the connection alone) holding
 * the most: one user's clients that never read neither take the budget
 * nor get another user's connections closed.
 *
 * Parked input. A change read while the daemon, having just taken the
 * leadership over, is still making its link to Redis (dl_store_opening)
 * is copied and parked (dl_conn_park): the connection reads nothing more
 * until the link is up or failed, then the line is executed as any other
 * (dl_conn_unpark_all, from the store's opened hook) and input resumes.
 * At most one line a connection, for at most the link's connect timeout.
 *
 * Turns. One read callback may hold thousands of pipelined requests, and
 * one request may hand an event to thousands of watchers: executed at
 * once, one client's burst kept every other client waiting (found from
 * outside: 150 watchers that do not read and two connections pipelining
 * 500 LOCKs each, another user's PING p99 260 ms). A connection executes
 * requests for DL_TURN_WORK units of work at most (a request is
 * DL_TURN_REQUEST, an event handed to a watcher or dropped for it one
 * more, DL_TURN_BYTES of output one more: srv->work), then
 * yields: it stops reading, joins srv->yielded, and the server's turn
 * handle (an idle handle, so the loop polls without blocking in between)
 * gives it its next turn, after every other connection's I/O of that
 * iteration (on_turn). The connections of one user of the users file
 * share one turn's work per loop iteration (srv->iter, the user's
 * rt.turn_work): past it, another of them yields before its first
 * request, and waits ahead of those that had a turn, so that each has
 * one in turn -- 50 connections of one user pipelining long listings
 * were 50 turns ahead of another user's PING. The default user (no users
 * file) and connections before AUTH have no such share.
 *
 * TLS. A connection on the TCP port of a daemon with a certificate has a
 * TLS state (tls.h) between its stream and the rest: ciphertext read is
 * fed to it and the plaintext it gives goes into the line buffer `in`;
 * `out` holds plaintext until the write (write_out), which seals it into
 * ciphertext in place, so `wout` and what uv_write holds are ciphertext.
 * The unread bytes count both, and what TLS holds before it is taken
 * (dl_tls_pending): backpressure and max_output see the TLS overhead as
 * output. Lines sent before the handshake is done are dropped (nobody can
 * read them yet); a handshake not done within [tls] handshake_timeout, or
 * a TLS error, closes the connection.
 */
#ifndef DL_SERVER_CONN_H
#define DL_SERVER_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/proto.h"
#include "server/buf.h"
#include "server/held.h"
#include "server/locktab/locktab.h"
#include "server/tls.h"

/* Units of work a connection's turn may take (Turns above), and what a
 * request costs in them (an event handed to a watcher costs one): 256
 * requests, about half a millisecond on the 2-core test VM, or a few
 * thousand events. */
#define DL_TURN_WORK	(256 * DL_TURN_REQUEST)
#define DL_TURN_REQUEST 8
/* ... and output costs one unit per this many bytes (a 300 KB HOLDERS,
 * more than a turn: found from outside, 50 connections pipelining them
 * raised another user's PING p99 from 0.5 to 8.7 ms). */
#define DL_TURN_BYTES 64

struct dl_server;
struct dl_user;
struct dl_conn_watch;

enum dl_conn_end { DL_END_NONE = 0, DL_END_GRACEFUL, DL_END_ABORT };

struct dl_delayed; /* a reply held back on purpose (conn.c) */
struct dl_parked;  /* a request waiting for the store (conn.c) */

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
	struct dl_conn *pnext;	     /* srv->parked */
	uint64_t id;
	struct dl_buf out;	    /* writable output */
	struct dl_buf wout;	    /* output handed to uv_write */
	struct dl_heldq held;	    /* lines waiting for durability */
	struct dl_delayed *delayed; /* input paused until it is sent */
	struct dl_parked *parked;   /* input paused until it is executed */
	unsigned authed : 1;
	unsigned paused : 1;   /* input paused: too much output unread */
	unsigned awaiting : 1; /* input paused: a reply that waits for a
				  change made elsewhere (dl_conn_await) */
	unsigned writing : 1;  /* a uv_write is in flight */
	unsigned in_writeq : 1;
	unsigned in_held : 1;
	unsigned in_endq : 1;
	unsigned ended : 1;	 /* session closed, reading stopped */
	unsigned shutting : 1;	 /* uv_shutdown called, close follows */
	unsigned closing : 1;	 /* uv_close called */
	unsigned end : 2;	 /* enum dl_conn_end */
	unsigned tls_open : 1;	 /* the TLS handshake is done (and logged) */
	struct dl_tls_conn *tls; /* NULL: plain (unix socket, no [tls]) */
	struct dl_conn_watch *watch; /* its WATCHes (watch.h); NULL: none */
	struct dl_multi *multi;	     /* its multi-lock in progress
					(cmd_multi.c); NULL: none */
	/* for logs: "127.0.0.1:5000" or "unix"; with a verified client
	 * certificate, " cert=<its name>" (dl_tls_peer_name) after it */
	char peer[64 + 6 + DL_TLS_NAME_MAX];
	char owner_secret[DL_OWNER_SECRET_MAX + 1]; /* proves its owner:
							 HELLO says it */
	/* who it is (access.c): */
	char addr[48];	       /* the peer's address: "127.0.0.1", "unix" */
	struct dl_user *user;  /* NULL until authenticated */
	unsigned auth_how : 3; /* enum dl_auth_how */
	unsigned auth_failures : 3;
	uint8_t unauth_requests; /* made before AUTH (DL_UNAUTH_REQUESTS_MAX) */
	unsigned unauth_counted : 1;	/* in the unauthenticated counts */
	struct dl_conn *unext, *uprev;	/* ... and their list, oldest first
					   (access.c) */
	unsigned end_after_delayed : 1; /* the delayed reply is the last */
	uint64_t accepted_ms;		/* uv_now at accept */
	size_t counted; /* its unread bytes in srv->out_unread */
	/* the kernel's send queue as last read (dl_conn_queued), valid in
	 * loop time kq_ms until the daemon writes to the socket again */
	size_t kq;
	uint64_t kq_ms;
	unsigned kq_valid : 1;
	unsigned yielded : 1;  /* on srv->yielded, waiting for its turn */
	struct dl_conn *ynext; /* srv->yielded */
	uint64_t turn_at;      /* srv->work when its turn began */
	uint64_t ended_ms;     /* uv_now when it began to end (dl_conn_end) */
	/* uv_now ms: when the unfinished request line began (0: none), and
	 * of the last request (the connection's start before any); checked
	 * by the server's sweep (dl_conn_sweep) */
	uint64_t partial_since, active_ms;
	struct dl_linebuf in;
};

/* Close c if it broke request_timeout or idle_timeout at `now` (uv_now);
 * 1 if it did. Called for every connection every DL_SWEEP_MS. */
int dl_conn_sweep(struct dl_conn *c, uint64_t now);

/* Accept one pending connection on `listener`. */
void dl_conn_accept(struct dl_server *srv, uv_stream_t *listener);

/* Queue a line (with its CRLF) for the client. `line` describes it (NULL:
 * a reply that needs no durability); the text is copied. */
void dl_conn_send(struct dl_conn *c, const char *text, size_t len,
		  const struct dl_line *line);
/* Reply "ERR <CODE> <why>" (with the request's tag, if any), counted in
 * the daemon's errors as the word the client is told. */
void dl_conn_error(struct dl_conn *c, int err, const char *why,
		   struct dl_str tag);
/* Send "* BYE <reason>". */
void dl_conn_bye(struct dl_conn *c, const char *reason);
/* c's user changes (access.c: a login, the end, a revoked session): its
 * unread output leaves `from`'s share of the budget for `to`'s (either
 * NULL; the default user has no share). */
void dl_conn_share_move(const struct dl_conn *c, struct dl_user *from,
			struct dl_user *to);

/* Execute `line` (a request that changes state) once the store's first
 * link after a take-over is up or failed (dl_store_opening), reading
 * nothing from the connection meanwhile, so that later requests keep
 * their order. The line is copied. DL_ENOMEM: not parked (answer it now). */
int dl_conn_park(struct dl_conn *c, const char *line, size_t len);
/* The store's link is up or failed: execute every parked request (each
 * is answered as the store now allows) and read again. */
void dl_conn_unpark_all(struct dl_server *srv);

/* Read nothing from the connection until dl_conn_answered: the reply of
 * the request just executed comes later (PARTITION waits for Redis), and
 * later requests keep their order. */
void dl_conn_await(struct dl_conn *c);
void dl_conn_answered(struct dl_conn *c);

/* Send `line` after ms, reading nothing from the connection meanwhile, so
 * that later requests keep their order (a failed AUTH is answered this
 * way, to slow down guessing). `last`: then end the connection (the
 * guesser's last try). */
void dl_conn_send_delayed(struct dl_conn *c, const char *line, size_t len,
			  uint64_t ms, int last);

/* End the connection after the current request: GRACEFUL writes what is
 * queued first, ABORT drops it. Safe anywhere, including event hooks. */
void dl_conn_end(struct dl_conn *c, enum dl_conn_end how, const char *why);

/* Every epoch <= durable is committed: send the held lines it covers. */
void dl_conn_send_held(struct dl_conn *c, uint64_t durable);

/* Persistence went down: every held line, in order, goes through fn
 * (held.h, dl_heldq_withdraw); then it is all writable. fn may call into
 * the lock table; a line the table's hooks send on this connection
 * meanwhile goes out before the one fn returns. */
void dl_conn_withdraw_held(struct dl_conn *c, dl_held_fn fn);

/* 1 while lines wait for durability. */
int dl_conn_holding(const struct dl_conn *c);
/* Bytes of output the client has not read yet, held lines included. */
size_t dl_conn_unread(const struct dl_conn *c);
/* ... and what the kernel still holds of what was written (its send
 * queue, SIOCOUTQ): where a client that does not read leaves the bytes,
 * since a socket takes megabytes before the daemon sees anything unread.
 * The system call is made at most once per loop time (ms) and write: an
 * event fanned out to 150 watchers that do not read made 150 of them,
 * 93 % of the daemon's time (found from outside). Between two writes the
 * queue only shrinks as the client reads, and bytes libuv moves to the
 * kernel meanwhile are still counted unread (wout) until their write
 * completes: a value read earlier is never less than the truth. */
size_t dl_conn_queued(struct dl_conn *c);
/* 1 while any output is not yet written (held lines included). */
int dl_conn_pending(const struct dl_conn *c);

/* Write what may be written now (check phase). */
void dl_conn_flush(struct dl_conn *c);
/* The unread output of all connections fell back under the budget:
 * resume the connections it paused (check phase). */
void dl_conn_budget_wake(struct dl_server *srv);
/* Finish ending: close the session, then the handle once output is out. */
void dl_conn_finish_end(struct dl_conn *c);
/* 1 once ending needs no more check-phase work (closing or closed). */
int dl_conn_done(const struct dl_conn *c);

#endif /* DL_SERVER_CONN_H */
