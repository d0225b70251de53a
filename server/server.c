/* SPDX-License-Identifier: MIT */
/*
 * server.c -- the daemon's skeleton (see server.h for the loop phases).
 *
 * Start-up (dl_server_init) is the only code here allowed to exit the
 * process; once the loop runs, failures cost a connection or a log line.
 *
 * Shutdown (SIGTERM/SIGINT) drains in two steps so that a restart finds
 * what it would find after a crash, queues included:
 *   1. stop accepting and reading, tell every client "* BYE shutdown",
 *      let the store commit what is pending and the replies it held go out;
 *   2. then close every connection without persisting the queue changes
 *      that closing causes (the store is no longer flushed), so waiters are
 *      restored as placeholders for their owners by the next start.
 * Step 1 is bounded by redis_timeout plus one second.
 */
#include "server/server.h"

#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/access.h"
#include "server/clock.h"
#include "server/cmd.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/part/part.h"
#include "server/store/store_tuning.h"
#include "server/tls.h"
#include "server/watch.h"

static void fatal(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
static void fatal(int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dl_error("%s", msg);
	dl_notify("STATUS=start-up failed");
	exit(code);
}

/* ---- hooks from the lock table and the store ---------------------------- */

/* The table's clock: read per request (clock.h says why not uv_now()). */
static uint64_t tab_now(void *ctx)
{
	(void)ctx;
	return dl_mono_ms();
}

static void tab_event(struct dl_session *s, const struct dl_event *ev,
		      void *ctx)
{
	(void)ctx;
	dl_cmd_event(s->data, ev);
}

static void tab_change(const struct dl_change *ch, void *ctx)
{
	dl_watch_change(ctx, ch);
}

void dl__server_committed(uint64_t epoch, void *ctx)
{
	struct dl_server *srv = ctx;
	struct dl_conn **pp = &srv->held, *c;

	srv->durable = epoch;
	while ((c = *pp) != NULL) {
		dl_conn_send_held(c, epoch);
		if (!dl_conn_holding(c)) {
			*pp = c->hnext;
			c->in_held = 0;
		} else {
			pp = &c->hnext;
		}
	}
}

/* Persistence is lost: grants are suspended first (so that withdrawing a
 * grant serves nobody else), then every connection's held lines go out,
 * its grants that never became durable withdrawn (cmd.c). */
static void break_holds(struct dl_server *srv)
{
	struct dl_conn *c;

	unsigned i;

	srv->nretell = 0;
	while ((c = srv->held) != NULL) {
		srv->held = c->hnext;
		c->in_held = 0;
		dl_cmd_break_hold(c);
	}
	/* the news of waiters dropped above, for the leases still held */
	for (i = 0; i < srv->nretell; i++)
		if (i == 0 || srv->retell[i].token != srv->retell[i - 1].token)
			dl_locktab_tell_waiting(
				srv->tab,
				(struct dl_str){srv->retell[i].name,
						srv->retell[i].len},
				srv->retell[i].token);
	srv->nretell = 0;
}

static void store_availability(int up, void *ctx)
{
	struct dl_server *srv = ctx;

	dl_locktab_suspend_grants(srv->tab, !up);
	if (!up)
		break_holds(srv);
	dl_notify(up ? "STATUS=serving"
		     : "STATUS=persistence down, refusing changes");
}

static void store_opened(void *ctx)
{
	dl_conn_unpark_all(ctx);
}

/* Redis went back (store_horizon.c): no new lease for ms. The window is
 * the server's, kept across take-overs (a new table is closed again); the
 * store keeps it too, in the state file and in Redis. */
static void store_closed(uint64_t ms, const char *why, void *ctx)
{
	struct dl_server *srv = ctx;
	uint64_t until = dl_mono_ms() + ms;

	if (until > srv->closed_until)
		srv->closed_until = until;
	dl_locktab_close_grants(srv->tab, srv->closed_until);
	dl_notice("grants closed for %llu ms (%s)", (unsigned long long)ms,
		  why);
	dl_notify("STATUS=Redis went back: grants closed");
}

/* The window ended (the sweep's check): queues move again. */
static void reopen_grants(struct dl_server *srv)
{
	if (!srv->closed_until || dl_mono_ms() < srv->closed_until)
		return;
	srv->closed_until = 0;
	dl_locktab_close_grants(srv->tab, 0);
	dl_notice(
		"grants open again: every lease granted before Redis went back has ended");
	dl_notify("STATUS=serving");
}

/* ---- roles ----------------------------------------------------------------
 *
 * The store learns about the leadership from Redis replies (store_lead.c)
 * and tells through store_role(); what that calls for is done from a
 * timer callback, outside hiredis: a take-over replaces the store's link.
 */

static size_t process_ends(struct dl_server *srv);
static void arm_wheel(struct dl_server *srv);

/* Say goodbye to every client and close its session (the table can only
 * be reset without sessions). Replies already made go out first. */
static void close_clients(struct dl_server *srv, const char *why)
{
	struct dl_conn *c;

	for (c = srv->conns; c; c = c->next) {
		if (c->end)
			continue;
		dl_conn_bye(c, why);
		dl_conn_end(c, DL_END_GRACEFUL, why);
	}
	process_ends(srv);
}

/* No longer the active one: nothing this daemon holds is true any more.
 * Grants are suspended and held lines broken (the store's availability
 * report did both if the link was up), clients are told and closed, and
 * the table emptied: a standby keeps no state. */
static void step_down(struct dl_server *srv)
{
	char why[32 + DL_ADVERTISE_MAX];

	snprintf(why, sizeof(why), "not-active active=%s",
		 dl_store_active_addr(srv->store));
	dl_locktab_suspend_grants(srv->tab, 1);
	break_holds(srv);
	close_clients(srv, why);
	dl_locktab_reset(srv->tab);
	dl_notify("STATUS=standby");
}

/* Files of secrets others may read: warned of at start and at each
 * reload (a file of the wrong mode is an operator's slip: it is used all
 * the same, as refusing would stop a daemon that ran). password_file and
 * redis_password_file hold secrets as they are; users_file holds their
 * SHA-256, which a guessable secret does not survive. */
static void secret_modes_check(const struct dl_config *cfg)
{
	const struct {
		const char *what, *path;
	} f[] = {{"password_file", cfg->password_file},
		 {"redis_password_file", cfg->redis_password_file},
		 {"users_file", cfg->users_file}};
	struct stat sb;
	size_t i;

	for (i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i].path[0] && stat(f[i].path, &sb) == 0 &&
		    (sb.st_mode & (S_IRWXG | S_IRWXO)))
			dl_warn("%s %s: mode %04o lets %s read it: chmod %s",
				f[i].what, f[i].path,
				(unsigned)(sb.st_mode & 07777),
				(sb.st_mode & S_IRWXO) ? "every user"
						       : "its group",
				(sb.st_mode & S_IRWXO)
					? "600"
					: "600, unless that group must");
}

/* The state file's directory (seen.h): made if it is missing (a daemon
 * started by hand, not by systemd's StateDirectory=); without one, say
 * once what this daemon will not notice. */
static void state_dir_check(const struct dl_config *cfg)
{
	const char *dir = cfg->state_dir;

	if (!dir[0]) {
		if (cfg->persist == DL_PERSIST_REDIS)
			dl_warn("no state_dir: a restart will not notice that Redis went back (lost writes) while this daemon was down, cannot bound how long grants stay closed after a loss it finds (max_ttl), and starts its tokens max_clock_skew ahead; set [persistence] state_dir");
		else
			dl_info("no state_dir: a restart after the clock was set back may tell tokens below earlier ones");
		return;
	}
	if (mkdir(dir, 0700) == 0)
		dl_notice("state_dir %s made", dir);
	else if (errno != EEXIST)
		dl_warn("state_dir %s: cannot make it: %s (nothing is kept there)",
			dir, strerror(errno));
	else if (access(dir, W_OK) != 0)
		dl_warn("state_dir %s: not writable by this daemon: %s", dir,
			strerror(errno));
}

static void take_over(struct dl_server *srv, int start)
{
	uint64_t t0 = dl_mono_ms();
	char err[DL_STORE_ERR_MAX];
	int r;

	if (srv->draining || dl_store_active(srv->store))
		return;
	/* Sessions of a standby's clients hold nothing, but the load
	 * starts from an empty table: they are closed, and reconnect. */
	close_clients(srv, "takeover");
	r = dl_store_take_over(srv->store, start, err, sizeof(err));
	if (r == 0) {
		dl_notice("took over the leadership in %llu ms",
			  (unsigned long long)(dl_mono_ms() - t0));
		arm_wheel(srv);
	} else if (r == DL_ENOTACTIVE) {
		dl_info("take-over: %s", err);
	} else {
		dl_warn("take-over failed: %s", err);
	}
}

static void on_role_timer(uv_timer_t *t)
{
	struct dl_server *srv = t->data;
	enum dl_store_role_event ev = srv->role_event;

	switch (ev) {
	case DL_STORE_DEPOSED:
		step_down(srv);
		break;
	case DL_STORE_STALE:
		step_down(srv);
		take_over(srv, 1);
		break;
	case DL_STORE_LAPSED:
		take_over(srv, 0);
		break;
	}
}

static void store_role(enum dl_store_role_event ev, void *ctx)
{
	struct dl_server *srv = ctx;

	/* A deposition cannot wait: changes stop now (the store has
	 * already refused them), the goodbye comes from the timer. */
	if (ev != DL_STORE_LAPSED)
		dl_locktab_suspend_grants(srv->tab, 1);
	if (uv_is_active((uv_handle_t *)&srv->role_timer) &&
	    srv->role_event != DL_STORE_LAPSED && ev == DL_STORE_LAPSED)
		return; /* a step-down is due first */
	srv->role_event = ev;
	uv_timer_start(&srv->role_timer, on_role_timer, 0, 0);
}

static struct dl_locktab_limits tab_limits(const struct dl_config *cfg)
{
	struct dl_locktab_limits l = {
		.max_waiters = (uint32_t)cfg->max_waiters,
		.max_locks_per_owner = (uint32_t)cfg->max_locks_per_owner,
		.durable_release = cfg->durable_release != 0,
		.max_locks = (uint32_t)cfg->max_locks,
	};
	return l;
}

/* ---- the loop's phases -------------------------------------------------- */

static void on_wheel(uv_timer_t *t);
static void on_reap_idle(uv_idle_t *h);

/*
 * Deadlines run from one uv_timer while the next is in the future, and
 * from an idle handle while some are due: one budget (DL_REAP_BUDGET) per
 * loop iteration, the loop polling for I/O without blocking in between and
 * the check and prepare phases writing each budget's events out. A 0 ms
 * timer re-armed from its own callback would not do: libuv 1.44 runs it
 * again in the same pass (libuv issue #4245), reaping everything before
 * any I/O.
 */
static void arm_wheel(struct dl_server *srv)
{
	int64_t ms = dl_locktab_timeout(srv->tab);

	if (ms == 0) {
		uv_timer_stop(&srv->wheel_timer);
		uv_idle_start(&srv->reap_idle, on_reap_idle);
		return;
	}
	uv_idle_stop(&srv->reap_idle);
	if (ms < 0)
		uv_timer_stop(&srv->wheel_timer);
	else
		uv_timer_start(&srv->wheel_timer, on_wheel, (uint64_t)ms, 0);
}

/* Deadlines fired between two looks at the work they made. */
#define REAP_CHUNK 64

/* At most DL_REAP_BUDGET deadlines, and at most the work of that many
 * without watchers: a deadline costs what a request does in a turn and
 * each event it hands to a watcher one unit more (conn.h, Turns), so an
 * expiry that 150 watchers hear of does not cost the other clients 150
 * times what it did. */
static void reap(struct dl_server *srv)
{
	uint64_t start = srv->work;
	size_t fired = 0, n;

	do {
		n = dl_locktab_run_timers(srv->tab, REAP_CHUNK);
		fired += n;
		srv->work += n * DL_TURN_REQUEST;
	} while (n == REAP_CHUNK && fired < DL_REAP_BUDGET &&
		 srv->work - start <
			 (uint64_t)DL_REAP_BUDGET * DL_TURN_REQUEST);
	arm_wheel(srv);
}

static void on_wheel(uv_timer_t *t)
{
	reap(t->data);
}

static void on_reap_idle(uv_idle_t *h)
{
	reap(h->data);
}

/* Work through the end queue; returns how many sessions it closed. */
static size_t process_ends(struct dl_server *srv)
{
	struct dl_conn **pp = &srv->endq, *c;
	size_t closed = 0;

	while ((c = *pp) != NULL) {
		closed += !c->ended;
		dl_conn_finish_end(c);
		if (dl_conn_done(c)) {
			*pp = c->enext;
			c->in_endq = 0;
		} else {
			pp = &c->enext;
		}
	}
	return closed;
}

static void flush_writes(struct dl_server *srv)
{
	struct dl_conn *c;

	while ((c = srv->writeq) != NULL) {
		srv->writeq = c->wnext;
		dl_conn_flush(c);
	}
}

static void drain_finish(struct dl_server *srv);

static int drain_done(const struct dl_server *srv)
{
	const struct dl_conn *c;

	if (!dl_store_idle(srv->store))
		return 0;
	for (c = srv->conns; c; c = c->next)
		if (dl_conn_pending(c))
			return 0;
	return 1;
}

/* The flush point, run after the poll (check) and before it (prepare). */
static void flush_phase(struct dl_server *srv)
{
	size_t closed;
	int round;

	/* Ending a session can change the table (its waiters leave, the
	 * next one may be granted), and writing can end a connection or
	 * finish one that was draining: repeat until both settle. */
	for (round = 0; round < 4; round++) {
		dl_cmd_multi_run(srv); /* steps its events made due */
		closed = process_ends(srv);
		if (round > 0 && !closed && !srv->writeq)
			break;
		if (srv->draining < 2)
			dl_store_flush(srv->store, srv->draining != 0);
		else
			dl_store_push(srv->store);
		flush_writes(srv);
	}
	if (srv->budget_wake)
		dl_conn_budget_wake(srv);
	arm_wheel(srv);
	if (srv->draining == 1 && drain_done(srv))
		drain_finish(srv);
}

static void on_check(uv_check_t *h)
{
	struct dl_server *srv = h->data;

	srv->iter++; /* a user's share of turns is per iteration (conn.h) */
	flush_phase(srv);
}

static void on_prepare(uv_prepare_t *h)
{
	flush_phase(h->data);
}

/* ---- listeners ---------------------------------------------------------- */

/*
 * At most DL_ACCEPTS_PER_ITER connections are accepted per loop iteration
 * and listener: found from outside, a burst of 5,000 connects was accepted
 * in one go and kept every client waiting 106 ms. A connection left
 * unaccepted stays in the kernel's backlog, and libuv stops watching its
 * listener until uv_accept() is called: the accept idle handle calls it
 * at the next iteration, after the other clients' I/O.
 */
static void on_accept_idle(uv_idle_t *h);

static void on_connection(uv_stream_t *listener, int status)
{
	struct dl_server *srv = listener->data;
	unsigned bit = listener == (uv_stream_t *)&srv->tcp ? 1 : 2;

	if (status < 0) {
		dl_warn("accept: %s", uv_strerror(status));
		return;
	}
	if (srv->accept_iter != srv->iter) {
		srv->accept_iter = srv->iter;
		srv->accepts[0] = srv->accepts[1] = 0;
	}
	if (srv->accepts[bit - 1] >= DL_ACCEPTS_PER_ITER) {
		srv->accept_wait |= bit;
		uv_idle_start(&srv->accept_idle, on_accept_idle);
		return;
	}
	srv->accepts[bit - 1]++;
	dl_conn_accept(srv, listener);
}

static void on_accept_idle(uv_idle_t *h)
{
	struct dl_server *srv = h->data;
	unsigned wait = srv->accept_wait;

	srv->accept_wait = 0;
	uv_idle_stop(h);
	if ((wait & 1) && !uv_is_closing((uv_handle_t *)&srv->tcp))
		on_connection((uv_stream_t *)&srv->tcp, 0);
	if ((wait & 2) && !uv_is_closing((uv_handle_t *)&srv->unix_listener))
		on_connection((uv_stream_t *)&srv->unix_listener, 0);
}

static void listen_tcp(struct dl_server *srv)
{
	const struct dl_config *cfg = &srv->cfg;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
	struct addrinfo *ai = NULL;
	char port[8];
	int r;

	snprintf(port, sizeof(port), "%u", (unsigned)cfg->port);
	r = getaddrinfo(cfg->bind, port, &hints, &ai);
	if (r != 0 || !ai)
		fatal(DL_EXIT_LISTEN, "cannot listen on %s:%s: %s", cfg->bind,
		      port, gai_strerror(r));
	uv_tcp_init(srv->loop, &srv->tcp);
	srv->tcp.data = srv;
	srv->tcp_on = 1;
	r = uv_tcp_bind(&srv->tcp, ai->ai_addr, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&srv->tcp, DL_LISTEN_BACKLOG,
			      on_connection);
	freeaddrinfo(ai);
	if (r != 0)
		fatal(DL_EXIT_LISTEN, "cannot listen on %s:%s: %s", cfg->bind,
		      port, uv_strerror(r));
	dl_notice("listening on %s:%s", cfg->bind, port);
}

static void listen_unix(struct dl_server *srv)
{
	const char *path = srv->cfg.unix_socket;
	struct stat sb;
	int r;

	/* A socket left by a previous run is removed; anything else at
	 * that path is not ours to delete. */
	if (lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode))
		unlink(path);
	uv_pipe_init(srv->loop, &srv->unix_listener, 0);
	srv->unix_listener.data = srv;
	srv->unix_on = 1;
	r = uv_pipe_bind(&srv->unix_listener, path);
	if (r == 0) {
		if (chmod(path, 0660) != 0)
			dl_warn("chmod %s: %s", path, strerror(errno));
		r = uv_listen((uv_stream_t *)&srv->unix_listener,
			      DL_LISTEN_BACKLOG, on_connection);
	}
	if (r != 0)
		fatal(DL_EXIT_LISTEN, "cannot listen on %s: %s", path,
		      uv_strerror(r));
	dl_notice("listening on %s", path);
}

/* ---- signals ------------------------------------------------------------ */

static void on_signal(uv_signal_t *h, int signum)
{
	struct dl_server *srv = h->data;

	if (!srv->ready) {
		/* Start-up is not done: a stop ends it, a reload has nothing
		 * to do yet (the configuration was just read). */
		if (signum != SIGHUP)
			srv->stop_signal = signum;
		return;
	}
	if (signum == SIGHUP) {
		dl_server_reload(srv);
		return;
	}
	if (srv->draining) {
		dl_notice("%s again: closing now", strsignal(signum));
		drain_finish(srv);
		return;
	}
	dl_notice("%s: shutting down", strsignal(signum));
	dl_server_shutdown(srv, "shutdown");
}

static void start_signal(struct dl_server *srv, uv_signal_t *h, int signum)
{
	uv_signal_init(srv->loop, h);
	h->data = srv;
	uv_signal_start(h, on_signal, signum);
	uv_unref((uv_handle_t *)h);
}

/* ---- systemd watchdog --------------------------------------------------- */

/* Pings come from the loop itself: a loop that stops turning stops them,
 * and systemd restarts the daemon. */
static void on_watchdog(uv_timer_t *t)
{
	(void)t;
	dl_notify("WATCHDOG=1");
}

static void start_watchdog(struct dl_server *srv)
{
	uint64_t us = dl_notify_watchdog_usec();
	uint64_t ms = us / 2000; /* twice per interval, as sd_notify(3) asks */

	uv_timer_init(srv->loop, &srv->watchdog);
	uv_unref((uv_handle_t *)&srv->watchdog);
	if (!us)
		return;
	if (ms == 0)
		ms = 1;
	uv_timer_start(&srv->watchdog, on_watchdog, ms, ms);
	dl_info("systemd watchdog: pinging every %llu ms",
		(unsigned long long)ms);
}

/* ---- start
 * ------------------------------------------------------------------------------
 */

static void raise_nofile(const struct dl_config *cfg)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < cfg->max_connections + 32)
		dl_warn("open files limit %llu is below max_connections + 32 (%llu): raise LimitNOFILE",
			(unsigned long long)rl.rlim_cur,
			(unsigned long long)cfg->max_connections + 32);
}

static uint64_t random_u64(void)
{
	uint64_t v;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
		v = uv_hrtime() ^ ((uint64_t)getpid() << 32);
	return v;
}

static void on_nap(uv_timer_t *t)
{
	(void)t;
}

/* Sleep ms in the loop, so that a stop signal is seen (start-up only). */
static void nap(struct dl_server *srv, uint64_t ms)
{
	uv_timer_start(&srv->drain_timer, on_nap, ms, 0);
	uv_ref((uv_handle_t *)&srv->drain_timer);
	while (uv_is_active((uv_handle_t *)&srv->drain_timer) &&
	       !srv->stop_signal)
		uv_run(srv->loop, UV_RUN_ONCE);
	uv_timer_stop(&srv->drain_timer);
	uv_unref((uv_handle_t *)&srv->drain_timer);
}

static void stop_during_start(struct dl_server *srv)
{
	/* Nothing was served and nothing changed: just go. */
	dl_notice("%s during start-up: exiting", strsignal(srv->stop_signal));
	exit(0);
}

/* Tell systemd that start-up goes on (it would otherwise kill a daemon
 * that waits for Redis longer than TimeoutStartSec). */
static void still_starting(const char *why)
{
	char msg[DL_STORE_ERR_MAX + 64];

	snprintf(msg, sizeof(msg),
		 "EXTEND_TIMEOUT_USEC=%llu\nSTATUS=waiting for redis: %s",
		 (unsigned long long)DL_STORE_BACKOFF_MAX_MS * 10 * 1000, why);
	dl_notify(msg);
}

/*
 * Load the state from Redis before anything is served. Redis unreachable
 * or not ready (loading its data, a replica, busy) is waited for, as long
 * as it takes: a lock server that exits when Redis is slow to start would
 * be restarted into the same wait, and one that serves without its state
 * could grant a lock that someone holds. Only a configuration error (a
 * wrong password, a Redis without functions) ends the start.
 */
static void load_state(struct dl_server *srv)
{
	uint64_t backoff = DL_STORE_BACKOFF_MIN_MS, since = dl_mono_ms();
	uint64_t logged = 0;
	char err[DL_STORE_ERR_MAX];
	int r;

	for (;;) {
		r = dl_store_load(srv->store, dl_wall_ms(), 1, err,
				  sizeof(err));
		if (r == 0)
			return;
		if (r == DL_ENOTACTIVE && !srv->cfg.node_id[0])
			fatal(DL_EXIT_ACTIVE,
			      "%s. Two dlockd on one Redis and prefix must not both write: stop the other one, or give both a [cluster] node_id to run this one as its standby",
			      err);
		if (r == DL_ENOTACTIVE) {
			dl_notice("%s; starting as a standby", err);
			return;
		}
		if (r != DL_EUNAVAILABLE)
			fatal(DL_EXIT_STORE, "cannot load state: %s", err);
		if (dl_mono_ms() - logged >= DL_STORE_WAIT_LOG_MS) {
			dl_warn("redis not ready (%s); waiting, nothing is served until the state is loaded (%llu s so far)",
				err,
				(unsigned long long)(dl_mono_ms() - since) /
					1000);
			logged = dl_mono_ms();
		}
		still_starting(err);
		nap(srv, backoff);
		if (srv->stop_signal)
			stop_during_start(srv);
		backoff = backoff * 2 > DL_STORE_BACKOFF_MAX_MS
				  ? DL_STORE_BACKOFF_MAX_MS
				  : backoff * 2;
	}
}

/* The async link to Redis is up before the first client arrives, so that
 * nobody is refused for a link still being opened; again as long as it
 * takes. */
static void wait_for_store(struct dl_server *srv)
{
	uint64_t logged = dl_mono_ms();

	if (dl_store_start(srv->store) != 0)
		fatal(DL_EXIT_STORE, "cannot start the store");
	uv_ref((uv_handle_t *)&srv->check); /* keeps the loop turning */
	while (dl_store_active(srv->store) && !dl_store_available(srv->store) &&
	       !srv->stop_signal) {
		uv_run(srv->loop, UV_RUN_ONCE);
		if (dl_mono_ms() - logged >= DL_STORE_WAIT_LOG_MS) {
			dl_warn("redis: still no working connection; waiting");
			still_starting("connecting");
			logged = dl_mono_ms();
		}
	}
	uv_unref((uv_handle_t *)&srv->check);
	if (srv->stop_signal)
		stop_during_start(srv);
}

/* Request and idle timeouts: every connection, every DL_SWEEP_MS; and a
 * watcher that missed events is told so once the kernel's queue to it has
 * drained (the daemon hears nothing of that). */
static void on_sweep(uv_timer_t *t)
{
	struct dl_server *srv = t->data;
	uint64_t now = uv_now(srv->loop);
	struct dl_conn *c, *next;

	if (srv->draining)
		return;
	reopen_grants(srv);
	for (c = srv->conns; c; c = next) {
		next = c->next;
		if (!dl_conn_sweep(c, now))
			dl_watch_drained(c);
	}
	dl_access_tick(srv, now, 0);
}

/* A handle of the server's own, just initialized: it points back at srv,
 * and does not keep the loop alive (the listeners and connections do). */
static void own_handle(struct dl_server *srv, uv_handle_t *h)
{
	h->data = srv;
	uv_unref(h);
}

static void init_handles(struct dl_server *srv)
{
	uv_loop_t *loop = srv->loop;

	uv_timer_init(loop, &srv->wheel_timer);
	own_handle(srv, (uv_handle_t *)&srv->wheel_timer);
	uv_idle_init(loop, &srv->reap_idle);
	own_handle(srv, (uv_handle_t *)&srv->reap_idle);
	uv_idle_init(loop, &srv->turn_idle);
	own_handle(srv, (uv_handle_t *)&srv->turn_idle);
	uv_idle_init(loop, &srv->accept_idle);
	own_handle(srv, (uv_handle_t *)&srv->accept_idle);
	srv->yielded_tail = &srv->yielded;
	srv->ywait_tail = &srv->yielded;
	uv_timer_init(loop, &srv->drain_timer);
	own_handle(srv, (uv_handle_t *)&srv->drain_timer);
	uv_timer_init(loop, &srv->role_timer);
	own_handle(srv, (uv_handle_t *)&srv->role_timer);
	uv_timer_init(loop, &srv->sweep_timer);
	own_handle(srv, (uv_handle_t *)&srv->sweep_timer);
	uv_timer_start(&srv->sweep_timer, on_sweep, DL_SWEEP_MS, DL_SWEEP_MS);
	dl_cmd_multi_init(srv);
	own_handle(srv, (uv_handle_t *)&srv->multi_timer);
	uv_check_init(loop, &srv->check);
	own_handle(srv, (uv_handle_t *)&srv->check);
	uv_check_start(&srv->check, on_check);
	uv_prepare_init(loop, &srv->prepare);
	own_handle(srv, (uv_handle_t *)&srv->prepare);
	uv_prepare_start(&srv->prepare, on_prepare);
	start_signal(srv, &srv->sig_term, SIGTERM);
	start_signal(srv, &srv->sig_int, SIGINT);
	start_signal(srv, &srv->sig_hup, SIGHUP);
}

/* TLS on the TCP port and the metrics page: the files must load, or the
 * daemon does not start (a daemon that fell back to plaintext would hand
 * its clients' traffic to the network). */
static void start_tls(struct dl_server *srv)
{
	char err[DL_CONFIG_ERR_MAX], cert[320];

	if (dl_tls_new(&srv->cfg, &srv->tls, err, sizeof(err)) != 0)
		fatal(DL_EXIT_CONFIG, "TLS: %s", err);
	dl_tls_describe_cert(srv->tls, cert, sizeof(cert));
	dl_notice("TLS: certificate %s, %s; client certificates %s",
		  srv->cfg.tls_cert, cert,
		  srv->cfg.tls_verify_clients ? "required"
		  : srv->cfg.tls_ca[0]	      ? "verified when given"
					      : "not asked for");
}

void dl_server_init(struct dl_server *srv, uv_loop_t *loop)
{
	struct dl_locktab_hooks th = {tab_now, tab_event, srv, tab_change};
	struct dl_store_hooks sh = {dl__server_committed, store_availability,
				    store_role,		  store_closed,
				    store_opened,	  srv};
	struct dl_locktab_limits lim = tab_limits(&srv->cfg);
	char err[DL_CONFIG_ERR_MAX];
	int r;

	srv->loop = loop;
	srv->start_ms = uv_now(loop);
	signal(SIGPIPE, SIG_IGN);
	raise_nofile(&srv->cfg);
	snprintf(srv->nonce, sizeof(srv->nonce), "%016llx",
		 (unsigned long long)random_u64());

	srv->tab = dl_locktab_new(&th, &lim, srv->cfg.tick_ms, random_u64());
	if (!srv->tab || dl_watch_init(srv, random_u64()) != 0)
		fatal(DL_EXIT_OTHER, "out of memory");
	if ((r = dl_access_new(&srv->cfg, random_u64(), &srv->access, err,
			       sizeof(err))) != 0)
		fatal(r == DL_ENOMEM ? DL_EXIT_OTHER : DL_EXIT_CONFIG, "%s",
		      r == DL_ENOMEM ? "out of memory" : err);
	state_dir_check(&srv->cfg);
	secret_modes_check(&srv->cfg);
	srv->store = dl_store_new(loop, &srv->cfg, srv->tab, &sh);
	if (!srv->store)
		fatal(DL_EXIT_OTHER, "out of memory");
	if (srv->cfg.partition[0] &&
	    (!(srv->part =
		       dl_part_new(loop, &srv->cfg, srv->store, srv->tab)) ||
	     dl_part_start(srv->part) != 0))
		fatal(DL_EXIT_OTHER, "cannot start the partition map");
	init_handles(srv);
	if (dl_tls_enabled(&srv->cfg))
		start_tls(srv);
	load_state(srv);
	if (srv->cfg.persist == DL_PERSIST_NONE)
		dl_warn("persist = none: locks live in memory only; a restart loses every lease and queue");
	wait_for_store(srv);

	/* The metrics page first: a client that finds the lock port open
	 * finds the page open too (found in CI: a scrape right after the
	 * port answered was refused, the page's listen not yet made). */
	if ((r = dl_metrics_start(srv, &srv->metrics)) != 0)
		fatal(DL_EXIT_LISTEN, "cannot serve metrics on %s: %s",
		      srv->cfg.metrics, uv_strerror(r));
	if (srv->cfg.port)
		listen_tcp(srv);
	if (srv->cfg.unix_socket[0])
		listen_unix(srv);
	start_watchdog(srv);
	arm_wheel(srv);
	dl_notice("dlockd %s ready (persist=%s, %s, last token %llu)",
		  DL_VERSION, dl_store_backend(srv->store),
		  dl_store_active(srv->store) ? "active" : "standby",
		  (unsigned long long)dl_locktab_last_token(srv->tab));
	dl_notify(dl_store_active(srv->store) ? "READY=1\nSTATUS=serving"
					      : "READY=1\nSTATUS=standby");
	srv->ready = 1;
}

/* ---- stop
 * ------------------------------------------------------------------------------
 */

static void close_listeners(struct dl_server *srv)
{
	if (srv->tcp_on) {
		srv->tcp_on = 0;
		uv_close((uv_handle_t *)&srv->tcp, NULL);
	}
	if (srv->unix_on) {
		srv->unix_on = 0;
		uv_close((uv_handle_t *)&srv->unix_listener, NULL);
		unlink(srv->cfg.unix_socket);
	}
}

static void on_drain_timeout(uv_timer_t *t)
{
	struct dl_server *srv = t->data;

	dl_warn("shutdown: pending writes did not finish in time");
	drain_finish(srv);
}

void dl_server_shutdown(struct dl_server *srv, const char *why)
{
	struct dl_conn *c;

	if (srv->draining)
		return;
	srv->draining = 1;
	dl_notify("STOPPING=1");
	close_listeners(srv);
	for (c = srv->conns; c; c = c->next) {
		uv_read_stop(&c->u.stream);
		dl_conn_bye(c, why);
	}
	/* Referenced: the loop must live until the drain ends, even with
	 * no client stream left active. */
	uv_ref((uv_handle_t *)&srv->drain_timer);
	uv_timer_start(&srv->drain_timer, on_drain_timeout,
		       srv->cfg.redis_timeout_ms + 1000, 0);
}

static void on_store_stopped(void *arg)
{
	struct dl_server *srv = arg;

	dl_notice("stopped");
	(void)srv;
}

/* Step 2 of the drain: close everything; the loop then ends by itself. */
static void drain_finish(struct dl_server *srv)
{
	struct dl_conn *c;

	if (srv->draining == 2)
		return;
	srv->draining = 2;
	close_listeners(srv);
	for (c = srv->conns; c; c = c->next) {
		/* Best effort for what the kernel takes now -- only what may
		 * be written: a reply whose write Redis never acknowledged is
		 * never sent. */
		dl_conn_flush(c);
		dl_conn_end(c, DL_END_ABORT, "shutdown");
	}
	process_ends(srv);
	dl_access_tick(srv, uv_now(srv->loop), 1);
	dl_metrics_stop(srv->metrics);
	srv->metrics = NULL;
	dl_tls_free(srv->tls); /* open connections keep what they use */
	srv->tls = NULL;
	uv_close((uv_handle_t *)&srv->wheel_timer, NULL);
	uv_close((uv_handle_t *)&srv->reap_idle, NULL);
	uv_close((uv_handle_t *)&srv->turn_idle, NULL);
	uv_close((uv_handle_t *)&srv->accept_idle, NULL);
	uv_close((uv_handle_t *)&srv->drain_timer, NULL);
	uv_close((uv_handle_t *)&srv->role_timer, NULL);
	uv_close((uv_handle_t *)&srv->sweep_timer, NULL);
	uv_close((uv_handle_t *)&srv->multi_timer, NULL);
	uv_close((uv_handle_t *)&srv->watchdog, NULL);
	uv_close((uv_handle_t *)&srv->check, NULL);
	uv_close((uv_handle_t *)&srv->prepare, NULL);
	uv_close((uv_handle_t *)&srv->sig_term, NULL);
	uv_close((uv_handle_t *)&srv->sig_int, NULL);
	uv_close((uv_handle_t *)&srv->sig_hup, NULL);
	dl_part_close(srv->part);
	dl_store_stop(srv->store, on_store_stopped, srv);
}

/* ---- reload
 * ------------------------------------------------------------------------------
 */

static void report_change(const char *section, const char *key, int live,
			  void *arg)
{
	(void)arg;
	if (live)
		dl_notice("reload: [%s] %s changed, applied", section, key);
	else
		dl_warn("reload: [%s] %s changed, needs a restart to apply",
			section, key);
}

/* Certificates are read again at every reload, changed paths or not (a
 * renewed certificate usually keeps its file name): new connections get
 * the new ones. Files that do not load leave the old ones in use. TLS
 * itself is turned on or off only by a restart. */
static void reload_tls(struct dl_server *srv)
{
	char err[DL_CONFIG_ERR_MAX], cert[320];

	if (!srv->tls) {
		if (dl_tls_enabled(&srv->cfg))
			dl_warn("reload: [tls] cert is set, but TLS starts only with a restart: the TCP port stays plaintext");
		return;
	}
	if (!dl_tls_enabled(&srv->cfg)) {
		dl_warn("reload: [tls] cert is empty, but TLS stops only with a restart: keeping the certificate loaded before");
		return;
	}
	if (dl_tls_reload(srv->tls, &srv->cfg, err, sizeof(err)) != 0) {
		dl_error(
			"reload: TLS: %s; keeping the certificate loaded before",
			err);
		return;
	}
	dl_tls_describe_cert(srv->tls, cert, sizeof(cert));
	dl_notice("reload: TLS certificate %s loaded, %s", srv->cfg.tls_cert,
		  cert);
}

void dl_server_reload(struct dl_server *srv)
{
	struct dl_config next;
	struct dl_locktab_limits lim;
	char err[DL_CONFIG_ERR_MAX];

	if (dl_config_load(&next, srv->config_path, srv->ov, srv->nov, err,
			   sizeof(err)) != 0) {
		dl_error("reload failed, configuration unchanged: %s", err);
		dl_config_free(&next);
		return;
	}
	dl_access_reload(srv, &next);
	secret_modes_check(&next);
	if (dl_config_diff(&srv->cfg, &next, report_change, NULL) == 0)
		dl_notice("reload: no change");
	if (dl_config_apply_live(&srv->cfg, &next) != 0)
		dl_error(
			"reload: out of memory, configuration may be partly applied");
	dl_config_free(&next);
	dl_log_level = (int)srv->cfg.log_level;
	lim = tab_limits(&srv->cfg);
	dl_locktab_set_limits(srv->tab, &lim);
	reload_tls(srv);
}
