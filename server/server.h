/* SPDX-License-Identifier: MIT */
/*
 * server.h -- the daemon: listeners, the loop's phases, signals, reload.
 *
 * One struct dl_server per process, owning the loop's handles, the lock
 * table, the store and every connection. The loop runs these phases:
 *
 *   timers  the wheel timer fires due lease and wait deadlines; while
 *   idle    more are due, an idle handle takes DL_REAP_BUDGET of them per
 *           iteration, so I/O is served and output written in between;
 *   poll    connections read requests and execute them (conn.c, cmd.c);
 *           replies and events are appended to per-connection buffers;
 *   check   after the poll: connections that are ending drop their
 *           waiters, the store closes the epoch (one pipeline for all the
 *           changes of the phase), replies whose epoch is durable are
 *           written (one write per connection), the wheel timer is re-armed;
 *   prepare the same, right before the loop polls: output made by timers
 *           (expiries, wait timeouts, delayed AUTH replies, the store's
 *           link changes) goes out before the loop sleeps, not at the next
 *           wake-up. Both are no-ops when nothing is pending.
 *
 * Data flows one way: socket -> codec -> cmd -> lock table -> store, and
 * back as replies released by the store's commits.
 */
#ifndef DL_SERVER_SERVER_H
#define DL_SERVER_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "proto/proto.h"
#include "server/config.h"
#include "server/locktab/locktab.h"
#include "server/store/store.h"

struct dl_conn;
struct dl_metrics;
struct dl_tls;
struct dl_access;
struct dl_watches;

/* dlockd's exit statuses (dlockd(8), EXIT STATUS): main.c's for the
 * command line, server.c's for start-up. */
#define DL_EXIT_OTHER  1 /* out of memory, or another failure */
#define DL_EXIT_USAGE  2 /* a bad command line */
#define DL_EXIT_CONFIG 3 /* a bad configuration (also --check-config) */
#define DL_EXIT_LISTEN 4 /* cannot listen */
#define DL_EXIT_STORE  5 /* cannot load the state from Redis */
#define DL_EXIT_ACTIVE 6 /* another daemon is active, and no [cluster] */

struct dl_server_stats {
	uint64_t connections_total;    /* accepted since start */
	uint64_t connections_rejected; /* over max_connections */
	uint64_t connections_evicted;  /* not authenticated, the oldest, for a
					  new one at max_unauth_connections */
	uint64_t output_overflows;     /* closed at max_output */
	uint64_t commands;	       /* requests executed */
	uint64_t errors[DL_ERR_COUNT_ + 1]; /* ERR replies by -code */
	uint64_t auth_failures;
	uint64_t request_timeouts;     /* closed: a line not ended in time */
	uint64_t idle_timeouts;	       /* closed: no request in idle_timeout */
	uint64_t owner_denials;	       /* HELLO owner= without its key */
	uint64_t tls_handshakes;       /* TLS handshakes done */
	uint64_t tls_failures;	       /* TLS errors and handshake timeouts */
	uint64_t auth_timeouts;	       /* closed: not authenticated in time */
	uint64_t output_budget_closes; /* closed: over max_output_total */
	uint64_t reclaims_refused;     /* RECLAIMs with a proof that is not
					  the cluster's, or ended */
	uint64_t multi_locks;	       /* multi-locks granted (cmd_multi.c) */
};

#define DL_RETELL_MAX 64

struct dl_multi;

struct dl_part;

struct dl_server {
	uv_loop_t *loop;
	struct dl_config cfg;
	const char *config_path;      /* NULL: defaults and flags only */
	const struct dl_override *ov; /* command-line overrides */
	size_t nov;
	struct dl_locktab *tab;
	struct dl_store *store;
	struct dl_part *part;	  /* [partition] id: the map (part/part.h) */
	struct dl_access *access; /* users, and who each connection is */
	struct dl_watches *watch; /* WATCHes of all connections (watch.h) */

	uv_tcp_t tcp;
	uv_pipe_t unix_listener;
	uv_timer_t wheel_timer;
	uv_idle_t reap_idle; /* reaping while deadlines are due (server.c) */
	uv_check_t check;
	uv_prepare_t prepare;
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t drain_timer; /* bounds a shutdown's wait for Redis */
	uv_timer_t sweep_timer; /* request and idle timeouts (conn.c) */
	/* multi-locks in progress, those with a step to run, and the timer
	 * that keeps their leases alive while they wait (cmd_multi.c) */
	struct dl_multi *multis, *multi_todo;
	uv_timer_t multi_timer;
	uv_timer_t role_timer; /* acts on what the store learned (server.c) */
	enum dl_store_role_event role_event;
	uv_timer_t watchdog; /* sd_notify WATCHDOG=1, when asked */
	struct dl_metrics *metrics;
	struct dl_tls *tls; /* NULL: the TCP port speaks plaintext */
	unsigned tcp_on : 1, unix_on : 1;
	int draining;	 /* 0 serving, 1 draining, 2 closing down */
	int ready;	 /* start-up done: signals act */
	int stop_signal; /* a stop asked for during start-up */

	struct dl_conn *conns; /* every live connection */
	size_t nconns;
	size_t out_unread;	 /* memory of their unread output (conn.h) */
	int budget_wake;	 /* it fell under the budget: resume (conn.c) */
	struct dl_conn *writeq;	 /* connections with bytes to write */
	struct dl_conn *held;	 /* connections holding replies for an epoch */
	struct dl_conn *endq;	 /* connections to end in the check phase */
	struct dl_conn *parked;	 /* connections with a request for the store's
				    first link after a take-over (conn.c) */
	struct dl_conn *yielded; /* connections waiting for their next turn,
				    in order (conn.h, Turns) */
	struct dl_conn **yielded_tail;
	struct dl_conn **ywait_tail; /* ... the end of those that wait for
					their user's share, first */
	uint64_t iter;		     /* loop iterations (the check phase) */
	uint64_t accept_iter; /* the iteration accepts[] counts (server.c) */
	unsigned accepts[2];  /* accepted in it: TCP, unix socket */
	unsigned accept_wait; /* listeners with one left for the next: 1 TCP,
				 2 unix socket */
	uv_idle_t accept_idle;
	uint64_t work;		 /* units of work done for requests (conn.h) */
	uv_idle_t turn_idle;	 /* gives yielded connections their turns */
	uint64_t durable;	 /* last committed epoch */
	uint64_t closed_until;	 /* mono ms: no new lease before (Redis went
				    back: store_closed, server.c) */
	uint64_t reclaim_log_at; /* mono ms: a refused RECLAIM last logged */
	uint64_t reclaim_log_held; /* refused since, not logged (cmd.c) */
	/* News of waiters held when persistence was lost (cmd.c,
	 * break_line): dropped with the held lines, whatever grant they were
	 * about, and told again once every connection's grants that never
	 * became durable are withdrawn -- to the leases still there. Past
	 * DL_RETELL_MAX, a lease hears at its next waiter. */
	struct {
		uint8_t len;
		char name[DL_NAME_MAX];
		uint64_t token;
	} retell[DL_RETELL_MAX];
	unsigned nretell;

	uint64_t conn_seq;
	char nonce[17];	   /* random hex, makes default owner ids unique */
	uint64_t start_ms; /* uv_now() at start-up (the same clock as
			      dl_mono_ms(), clock.h): uptime's origin */
	struct dl_server_stats st;
	int exit_code;
};

/* Loads the configuration, the state, and listens. Exits the process with
 * a message on failure (start-up only). */
void dl_server_init(struct dl_server *srv, uv_loop_t *loop);
/* Stop accepting, tell clients * BYE, flush the store, close. */
void dl_server_shutdown(struct dl_server *srv, const char *why);
/* Re-read the configuration; apply what can change live. */
void dl_server_reload(struct dl_server *srv);

/* Called by the store when `epoch` is durable: release held replies. */
void dl__server_committed(uint64_t epoch, void *ctx);

#endif /* DL_SERVER_SERVER_H */
