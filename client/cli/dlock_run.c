/* SPDX-License-Identifier: MIT */
/*
 * dlock_run.c -- `dlock run`: hold a lock while a command runs (dlock_cli.h).
 *
 * The part of dlock with invariants. It holds a lease while a command runs
 * and promises: the command -- and everything it started -- is never
 * running once its lease could have passed to someone else, even if dlock
 * itself is killed or stopped. libdlock renews the lease and, when it can
 * no longer confirm it, calls on_lost `lost_guard` ms before the local
 * deadline (dlock_lease_deadline); we set lost_guard = grace + KILL_MARGIN,
 * so there is room for SIGTERM, the grace period, then SIGKILL at
 * deadline - KILL_MARGIN. The main loop also checks the deadline itself (a
 * little after the guard), so a late callback cannot break the promise. A
 * lost lease is never released: the server dropped it, or did not confirm
 * it and expires it within guard ms anyway.
 *
 * The command runs under a guard process (dlock_guard.c, which says why
 * and what it covers): dlock forks, the child re-executes dlock as the
 * guard (`dlock --run-guard`, a single-threaded process: between fork and
 * exec dlock's child calls only async-signal-safe functions, and
 * /proc/self/exe needs no path search), and the guard runs the command. A
 * socket between them (dlock_cli.h) carries the lease's deadline after
 * each renewal, "stop" when the lease is lost, and job control both ways;
 * its end-of-file tells the guard that dlock died. dlock is a child
 * subreaper as well: if the guard is killed, what it leaves is reparented
 * to dlock, which stops it.
 *
 * Job control. On a terminal, dlock stops when the guard says the command
 * stopped (Ctrl-Z), so that the shell sees the job stopped, and runs again
 * when continued -- by the shell's fg or bg (it then continues the
 * command, and on fg gives it the terminal back) or by the guard (someone
 * else continued the command). Without a terminal dlock never stops with
 * the command: nobody would continue it, and the command's stop is its
 * own business. Nothing renews the lease while dlock is stopped, by job
 * control or by anyone: the guard's deadline covers it, and if the guard
 * had to stop the command (it says L), dlock exits 76 without releasing.
 * A stopped guard could not act on the deadline: dlock continues it at
 * once (and if dlock is stopped too, the guard's alarm wakes it).
 *
 * A grant of a lease that the owner id (given with --owner or inherited
 * through DLOCK_OWNER) holds in another process is refused by libdlock,
 * which tells from the grant's hold count and gives back the one hold it
 * added (DLOCK_EHELDBYOWNER; dlock.h, options.owner): exit 75, the command
 * not run.
 *
 * Threads and signals: on_lost and on_at_risk run on libdlock's thread
 * and signal handlers run anywhere; all only set a flag and write one byte
 * to a non-blocking self-pipe. Everything else -- waitpid, signals to the
 * command, messages -- happens in the main loop, which polls that pipe.
 * The signals dlock handles are blocked while libdlock starts a thread, so
 * they are always delivered to the main thread.
 *
 * Clock: dlock_now_ms(), CLOCK_BOOTTIME, which goes on while the machine
 * is suspended; sleeps are cut in steps (at most STEP_MAX_MS, ttl/10 for
 * short leases) since poll() sleeps on a clock that does not.
 *
 * State: the self-pipe, the pending-signal flags, the lost reason and the
 * dispositions found at start are file-scope statics (signal handlers and
 * on_lost can reach nothing else); everything else lives in dl_cli_run()'s
 * struct runner and struct spawn, freed before it returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/cli/dlock_cli.h"

/* ---- limits ------------------------------------------------------------ */

/* Longest default grace between SIGTERM and SIGKILL; the default is
 * min(this, ttl / 4). */
#define DEFAULT_GRACE_MAX_MS 5000
/* SIGKILL goes out this long before the lease's local deadline, for the
 * kernel to end the processes and for our own scheduling delays; at most
 * ttl / 10 for very short leases. */
#define KILL_MARGIN_MS 200
/* How often to look whether killed processes are gone, and for how long
 * after SIGKILL (a process in uninterruptible sleep dies only when it
 * wakes up; dlock then warns and exits without it). */
#define TREE_POLL_MS	  10
#define TREE_KILL_WAIT_MS 1000
/* The longest the main loop sleeps: it passes each renewed deadline to
 * the guard within this (ttl / 10 for short leases). */
#define STEP_MAX_MS 1000

/* ---- run: signals and the self-pipe -------------------------------------- */

/* Signals passed on to the command's process group. */
static const int fwd_signals[] = {SIGTERM, SIGINT,  SIGHUP, SIGQUIT,
				  SIGUSR1, SIGUSR2, SIGTSTP};
#define NFWD (sizeof(fwd_signals) / sizeof(fwd_signals[0]))
/* Every signal whose disposition run changes, restored in the child. */
static const int touched_signals[] = {SIGTERM, SIGINT,	SIGHUP,	 SIGQUIT,
				      SIGUSR1, SIGUSR2, SIGTSTP, SIGCHLD,
				      SIGTTIN, SIGTTOU, SIGPIPE, SIGCONT};
#define NTOUCHED (sizeof(touched_signals) / sizeof(touched_signals[0]))

static int wake_fd[2] = {-1, -1}; /* the self-pipe */
static volatile sig_atomic_t sig_pending[NSIG];
static atomic_int lost_reason; /* 0, or a dlock_lost_reason */
static atomic_int risks;       /* on_at_risk calls */
static atomic_int waited;      /* on_contended calls */
static int waited_base;	       /* ... before the command started: the news its
				  DLOCK_WAITERS says (no signal for them) */
static struct sigaction orig_action[NSIG]; /* dispositions at start */

static void wake(void)
{
	int saved = errno;
	char b = 0;

	(void)!write(wake_fd[1], &b, 1);
	errno = saved;
}

static void on_signal(int sig)
{
	if (sig > 0 && sig < NSIG)
		sig_pending[sig] = 1;
	wake();
}

static void on_lost(dlock_client *c, const dlock_lease *l,
		    enum dlock_lost_reason why, void *arg)
{
	(void)c;
	(void)l;
	(void)arg;
	atomic_store(&lost_reason, (int)why);
	wake();
}

static void on_at_risk(dlock_client *c, const dlock_lease *l, void *arg)
{
	(void)c;
	(void)l;
	(void)arg;
	atomic_fetch_add(&risks, 1);
	wake();
}

static void on_contended(dlock_client *c, const dlock_lease *l,
			 uint32_t waiters, void *arg)
{
	(void)c;
	(void)l;
	(void)waiters;
	(void)arg;
	atomic_fetch_add(&waited, 1);
	wake();
}

static void block_signals(sigset_t *old)
{
	sigset_t set;
	size_t i;

	sigemptyset(&set);
	for (i = 0; i < NTOUCHED; i++)
		sigaddset(&set, touched_signals[i]);
	pthread_sigmask(SIG_BLOCK, &set, old);
}

/* After the grant: handlers for what we forward and for SIGCHLD; ignore
 * the terminal's stop signals (dlock itself must not stop while the
 * command runs). A signal ignored when dlock started stays ignored. */
static void install_handlers(void)
{
	struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
	struct sigaction ign = {.sa_handler = SIG_IGN};
	size_t i;

	sigemptyset(&sa.sa_mask);
	sigemptyset(&ign.sa_mask);
	for (i = 0; i < NFWD; i++)
		if (orig_action[fwd_signals[i]].sa_handler != SIG_IGN)
			sigaction(fwd_signals[i], &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGCONT, &sa, NULL); /* the shell's fg or bg */
	sigaction(SIGTTIN, &ign, NULL);
	sigaction(SIGTTOU, &ign, NULL);
}

static void save_dispositions(void)
{
	size_t i;

	for (i = 0; i < NTOUCHED; i++)
		sigaction(touched_signals[i], NULL,
			  &orig_action[touched_signals[i]]);
}

/* ---- run: the guard's process ------------------------------------------- */

/* Everything the child needs, built before fork(). */
struct spawn {
	char **argv; /* dlock --run-guard <ctl> <err> <grace> <margin> -- cmd */
	char **envp; /* environ plus DLOCK_* */
	int ctl;     /* the guard's end of the control socket */
	int err;     /* the guard's end of the error pipe */
	int tty;     /* terminal to hand over, or -1 */
	sigset_t mask; /* the signal mask to exec with */
};

/* In the child, between fork and exec: async-signal-safe calls only.
 * Becomes the guard (dlock_guard.c); reports an exec failure on err. */
static void child_exec(const struct spawn *sp)
{
	int e;
	size_t i;

	setpgid(0, 0);
	if (sp->tty >= 0)
		tcsetpgrp(sp->tty, getpid()); /* SIGTTOU is still ignored */
	for (i = 0; i < NTOUCHED; i++)
		sigaction(touched_signals[i], &orig_action[touched_signals[i]],
			  NULL);
	sigprocmask(SIG_SETMASK, &sp->mask, NULL);
	fcntl(sp->ctl, F_SETFD, 0); /* both go through exec */
	fcntl(sp->err, F_SETFD, 0);
	execve("/proc/self/exe", sp->argv, sp->envp);
	e = errno;
	(void)!write(sp->err, &e, sizeof(e));
	_exit(EXIT_CANNOT_EXEC);
}

/* ---- run: the parent ----------------------------------------------------- */

struct runner {
	const struct cli *cl;
	dlock_client *c;
	dlock_lease *l;
	pid_t pid;	 /* the guard: leader of the command's process group */
	int ctl;	 /* our end of the control socket, or -1 */
	int tty;	 /* terminal handed to it, or -1 */
	int cmd_stopped; /* the guard says the command is stopped */
	int exited;	 /* the guard has been reaped */
	int status;    /* its (the command's) exit code (128+N for signal N) */
	int lost;      /* the lease is lost: stopping the command */
	int timed_out; /* --timeout ran out: stopping the command */
	int stopping;  /* lost or timed out: SIGTERM sent, SIGKILL at kill_at */
	int killed;    /* SIGKILL sent */
	int64_t end_at; /* --timeout: when to stop the command, or 0 */
	int64_t grace_ms;
	int64_t margin_ms;
	int64_t guard_ms; /* options.lost_guard_ms */
	int64_t kill_at;  /* when lost: time of SIGKILL (dlock_now_ms) */
	int64_t told;	  /* the deadline the guard knows */
};

/* Tell the guard a line (dlock_cli.h: "D <ms>", "S <ms>", "M", "R"); a
 * guard that is gone cannot read it (EPIPE, no SIGPIPE). */
static void tell_guard(struct runner *r, char what, int64_t ms)
{
	char line[32];
	int n = snprintf(line, sizeof(line), "%c %" PRId64 "\n", what, ms);

	if (r->ctl >= 0)
		(void)!send(r->ctl, line, (size_t)n, MSG_NOSIGNAL);
}

/* Pass a renewed deadline on to the guard. */
static void tell_deadline(struct runner *r)
{
	int64_t d = dlock_lease_deadline(r->l);

	if (d != r->told && !r->lost) {
		tell_guard(r, 'D', d);
		r->told = d;
	}
}

static const char *lost_text(int why)
{
	switch (why) {
	case DLOCK_LOST_EXPIRED:
		return "it expired at the server";
	case DLOCK_LOST_REJECTED:
		return "the server no longer has it";
	case DLOCK_LOST_UNCONFIRMED:
		return "it could not be renewed in time";
	default:
		return "it could not be confirmed in time";
	}
}

/* Stop every process left under dlock (the guard's tree, or what a
 * killed guard left, reparented to dlock, a subreaper). */
static int tree_alive(void)
{
	return dl_cli_tree_signal(getpid(), 0) > 0;
}

/* The lease is gone or about to be: the guard stops the command's tree
 * now (SIGTERM) and kills it when the grace is over, never later than
 * KILL_MARGIN before the local deadline. */
static void start_stopping(struct runner *r, int why)
{
	int64_t now = dlock_now_ms();
	int64_t last = dlock_lease_deadline(r->l) - r->margin_ms;
	int64_t at = now + r->grace_ms < last ? now + r->grace_ms : last;

	if (r->stopping && r->kill_at < at)
		at = r->kill_at; /* already stopping (--timeout): not later */
	r->lost = 1;
	r->stopping = 1;
	r->kill_at = at;
	if (why == DLOCK_LOST_EXPIRED && dlock_lease_broken_by(r->l)[0])
		dl_cli_msg("lease on %s lost (it was broken by %s, dlock "
			   "break): stopping the command",
			   r->cl->pos[0], dlock_lease_broken_by(r->l));
	else
		dl_cli_msg("lease on %s lost (%s): stopping the command",
			   r->cl->pos[0], lost_text(why));
	tell_guard(r, 'S', r->kill_at);
	kill(r->pid, SIGCONT); /* a stopped guard acts on it at once; it
				  continues the command after SIGTERM */
}

/* --timeout ran out: stop the command as for a lost lease (SIGTERM, the
 * grace, SIGKILL), but the lease is still ours and is released after. */
static void stop_timed_out(struct runner *r)
{
	int64_t now = dlock_now_ms();
	int64_t last = dlock_lease_deadline(r->l) - r->margin_ms;

	r->timed_out = 1;
	r->stopping = 1;
	r->kill_at = now + r->grace_ms < last ? now + r->grace_ms : last;
	dl_cli_msg("the command ran for its --timeout (%d ms): stopping it",
		   r->cl->timeout_ms);
	tell_guard(r, 'S', r->kill_at);
	kill(r->pid, SIGCONT);
}

/* At kill_at, whatever the guard did: SIGKILL to everything below dlock
 * (the guard included), again until none is left. */
static void kill_all(struct runner *r)
{
	if (!r->exited)
		killpg(r->pid, SIGKILL);
	dl_cli_tree_signal(getpid(), SIGKILL);
	r->killed = 1;
}

/* When to give the lease up if libdlock has not: a little after its own
 * guard (on_lost is due at deadline - guard_ms), so that normally its
 * callback comes first and says why, and a late one changes nothing. */
static int64_t fallback_at(const struct runner *r)
{
	return dlock_lease_deadline(r->l) - r->guard_ms + r->margin_ms / 2;
}

/* The terminal back to our group, if the command's group has it (not if
 * the shell took it: a background dlock must not take it from the shell;
 * SIGTTOU is ignored). */
static void tty_take_back(struct runner *r)
{
	if (r->tty >= 0 && tcgetpgrp(r->tty) == r->pid)
		tcsetpgrp(r->tty, getpgrp());
}

/* The guard stopped the command on its own clock: the deadline came
 * while we did not run (stopped, or hung). */
static void guard_lapsed(struct runner *r)
{
	if (r->lost)
		return;
	r->lost = 1;
	r->stopping = 1;
	r->kill_at = dlock_now_ms();
	dl_cli_msg("lease on %s lost (dlock did not run to renew it): the "
		   "guard stopped the command",
		   r->cl->pos[0]);
}

/* Read what the guard said (dlock_cli.h): the command stopped (T) or
 * continued (C), the lease lapsed (L); one letter each, then a newline.
 * EOF: the guard is gone. */
static void read_guard(struct runner *r)
{
	char b[64];
	ssize_t n, i;

	while (r->ctl >= 0) {
		n = recv(r->ctl, b, sizeof(b), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			close(r->ctl);
			r->ctl = -1;
			return;
		}
		for (i = 0; i < n; i++)
			if (b[i] == 'T' || b[i] == 'C')
				r->cmd_stopped = b[i] == 'T';
			else if (b[i] == 'L')
				guard_lapsed(r);
	}
}

/* dlock runs again after a stop (the shell's fg or bg, or the guard: the
 * command was continued). On a terminal: unless the lease was lost
 * meanwhile (nobody renews it while we are stopped), give the command the
 * terminal if the shell gave it to us, and continue it. */
static void continued(struct runner *r)
{
	if (r->tty < 0 || r->exited)
		return;
	read_guard(r); /* the guard may have stopped the command: L */
	if (!r->lost &&
	    (!dlock_lease_valid(r->l) || dlock_now_ms() >= fallback_at(r)))
		start_stopping(r, atomic_load(&lost_reason));
	if (tcgetpgrp(r->tty) == getpgrp())
		tcsetpgrp(r->tty, r->pid);
	if (!r->stopping) {
		r->cmd_stopped = 0;
		killpg(r->pid, SIGCONT);
	}
}

/* The command stopped (Ctrl-Z on the terminal it was handed, or any stop
 * signal): stop dlock too, so that the shell sees the job stopped. The
 * guard does not stop: it kills the command if the lease would lapse
 * meanwhile, and continues dlock if the command is continued (M and R
 * tell it when dlock is stopped). Never without a terminal: nobody would
 * continue dlock, and the command's stop is its own business. */
static void mirror_stop(struct runner *r)
{
	tty_take_back(r);
	tell_guard(r, 'M', 0);
	kill(getpid(), SIGSTOP);
	tell_guard(r, 'R', 0);
	continued(r);
}

/* Reap the guard (its stop, its end) and orphans a killed guard left. A
 * stopped guard could not act on the deadline: it is continued at once. */
static void reap(struct runner *r)
{
	int st;
	pid_t p;

	while ((p = waitpid(-1, &st, WNOHANG | WUNTRACED)) != 0) {
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			return;
		if (p != r->pid || r->exited)
			continue;
		if (WIFSTOPPED(st)) {
#ifndef DL_PLANT_STOP_MIRROR /* the campaign's planted bug (dlock_guard.c) */
			kill(r->pid, SIGCONT);
#endif
		} else if (WIFEXITED(st) || WIFSIGNALED(st)) {
			read_guard(r); /* its last words: L? */
			r->exited = 1;
			r->status = WIFEXITED(st)
					    ? WEXITSTATUS(st)
					    : EXIT_SIGNAL_BASE + WTERMSIG(st);
			if (WIFSIGNALED(st) && !r->stopping && tree_alive()) {
				/* the guard was killed: stop what it left */
				dl_cli_msg("the guard of the command died");
				start_stopping(r, 0);
			}
		}
	}
}

/* Pass pending signals on to the command's process group (the guard
 * ignores them). */
static void forward_signals(struct runner *r)
{
	size_t i;

	for (i = 0; i < NFWD; i++)
		if (sig_pending[fwd_signals[i]]) {
			sig_pending[fwd_signals[i]] = 0;
			if (!r->exited)
				killpg(r->pid, fwd_signals[i]);
		}
}

/* The next moment the loop must look, from now. */
static int64_t next_wake(const struct runner *r, int64_t now)
{
	int64_t next, step = (int64_t)r->cl->ttl_ms / 10;

	if (step > STEP_MAX_MS)
		step = STEP_MAX_MS;
	if (step < 1)
		step = 1;
	if (!r->stopping) {
		next = fallback_at(r);
		if (r->end_at && r->end_at < next)
			next = r->end_at;
	} else if (!r->killed) {
		next = r->kill_at;
	} else {
		next = now + TREE_POLL_MS;
	}
	if (r->exited && r->stopping && now + TREE_POLL_MS < next)
		next = now + TREE_POLL_MS;
	return next < now + step ? next : now + step;
}

/* 1 once there is nothing left to wait for. Processes left after the
 * guard is gone (it was killed) are killed at once. */
static int done(struct runner *r, int64_t now)
{
	if (!r->exited)
		return 0;
	if (!tree_alive())
		return 1;
	if (!r->killed) {
		r->kill_at = now;
		kill_all(r);
		return 0;
	}
	if (now >= r->kill_at + TREE_KILL_WAIT_MS) {
		dl_cli_msg("processes of the command survive SIGKILL");
		return 1;
	}
	return 0;
}

/* Wait for the command, forwarding signals, renewing the guard's idea of
 * the deadline and watching the lease. */
static void supervise(struct runner *r)
{
	struct pollfd p[2] = {{.fd = wake_fd[0], .events = POLLIN},
			      {.events = POLLIN}};
	int64_t now, t;
	char buf[64];
	int why, told = 0, signalled = waited_base, news;

	for (;;) {
		while (read(wake_fd[0], buf, sizeof(buf)) > 0)
			;
		read_guard(r);
		forward_signals(r);
		if (sig_pending[SIGCONT]) {
			sig_pending[SIGCONT] = 0;
			continued(r);
		}
		if (r->tty >= 0 && r->cmd_stopped && !r->stopping &&
		    r->ctl >= 0) /* the guard lives to continue us */
			mirror_stop(r);
		reap(r);
		now = dlock_now_ms();
		why = atomic_load(&lost_reason);
		/* said before any loss: a loss is checked after this */
		if (told < atomic_load(&risks) && !r->lost && !r->exited)
			dl_cli_msg("warning: the lease on %s is at risk: the "
				   "server has not confirmed it in time (the "
				   "command is stopped if the lease ends)",
				   r->cl->pos[0]);
		told = atomic_load(&risks);
		/* others wait (--signal-when-waited): the command may let
		 * them in early */
		news = atomic_load(&waited);
		if (signalled < news && !r->stopping && !r->exited) {
			dl_cli_msg("%u waiting for %s: sending the command "
				   "SIG%s",
				   (unsigned)dlock_lease_waiters(r->l),
				   r->cl->pos[0],
				   sigabbrev_np(r->cl->waited_signal)
					   ? sigabbrev_np(r->cl->waited_signal)
					   : "?");
			killpg(r->pid, r->cl->waited_signal);
		}
		signalled = news;
		if (!r->lost && !r->exited &&
		    (why || !dlock_lease_valid(r->l) || now >= fallback_at(r)))
			start_stopping(r, why);
		if (!r->stopping && !r->exited && r->end_at && now >= r->end_at)
			stop_timed_out(r);
		if (r->stopping && !r->killed && now >= r->kill_at)
			kill_all(r);
		else if (r->killed)
			dl_cli_tree_signal(getpid(), SIGKILL);
		tell_deadline(r);
		if (done(r, now))
			return;
		t = next_wake(r, now) - now;
		p[1].fd = r->ctl;
		poll(p, r->ctl >= 0 ? 2 : 1, (int)(t < 1 ? 1 : t));
	}
}

/* Grace, margin and the library's guard, from --ttl and --grace. 0, or a
 * usage error. */
static int timing(struct runner *r, const struct cli *cl)
{
	/* Times: KILL_MARGIN before the deadline, grace before that, and
	 * the library must report a loss grace + margin ahead of it; that
	 * must leave time for the renewal at ttl/3 to be confirmed. */
	if (cl->ttl_ms < RUN_TTL_MIN_MS)
		return dl_cli_usage_error(
			cl,
			"--ttl %" PRIu64 "ms is too short for dlock run: the "
			"lease is renewed every ttl/3 and the command stopped "
			"a grace before its end; give at least %dms",
			cl->ttl_ms, RUN_TTL_MIN_MS);
	r->margin_ms = KILL_MARGIN_MS < cl->ttl_ms / 10
			       ? KILL_MARGIN_MS
			       : (int64_t)cl->ttl_ms / 10;
	if (cl->seen & OPTB(OPT_GRACE))
		r->grace_ms = (int64_t)cl->grace_ms;
	else
		r->grace_ms = DEFAULT_GRACE_MAX_MS < cl->ttl_ms / 4
				      ? DEFAULT_GRACE_MAX_MS
				      : (int64_t)cl->ttl_ms / 4;
	r->guard_ms = r->grace_ms + r->margin_ms;
	if (r->guard_ms < 1)
		r->guard_ms = 1;
	if ((uint64_t)r->guard_ms * 2 >= cl->ttl_ms || r->guard_ms > INT_MAX)
		return dl_cli_usage_error(
			cl,
			"--grace %" PRId64 " ms is too long for --ttl %" PRIu64
			" ms: grace + %" PRId64 " ms must stay under ttl/2",
			r->grace_ms, cl->ttl_ms, r->margin_ms);
	return 0;
}

/* Connect and take the lock, libdlock's thread started with our signals
 * blocked. 0, or an exit code. */
static int take_lock(struct runner *r)
{
	const struct cli *cl = r->cl;
	struct dlock_options o;
	sigset_t old;
	int rc;

	/* Until the grant, signals keep their default actions (a signal
	 * while waiting ends dlock; the server then drops its place in the
	 * queue). */
	save_dispositions();
	signal(SIGPIPE, SIG_IGN);
	dl_cli_conn_options(cl, &o);
	o.reconnect = 1;
	o.renew = 1;
	o.lost_guard_ms = (int)r->guard_ms;
	o.on_lost = on_lost;
	o.on_at_risk = on_at_risk;
	if (cl->waited_signal)
		o.on_contended = on_contended;
	block_signals(&old);
	rc = dl_cli_connect(cl, &o, &r->c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0)
		rc = dl_cli_acquire(r->c, cl, cl->pos[0], cl->wait_ms, &r->l);
	return rc;
}

/* Fork the guard; the control and error pipes are made here. 0, or an
 * exit code (reported). */
static int spawn_guard(struct runner *r, struct spawn *sp, int *errfd)
{
	char owner[DL_OWNER_MAX + 1 + DL_OWNER_SECRET_MAX + 1];
	int ctl[2], errp[2], err;
	sigset_t old;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0)
		goto fail;
	if (pipe2(errp, O_CLOEXEC) != 0) {
		close(ctl[0]);
		close(ctl[1]);
		goto fail;
	}
	sp->ctl = ctl[0];
	sp->err = errp[1];
	r->ctl = ctl[1];
	*errfd = errp[0];
	/* DLOCK_OWNER=<id>=<key>: the command may act on its lease */
	snprintf(owner, sizeof(owner), "%s=%s", dlock_owner(r->c),
		 dlock_owner_key(r->c));
	sp->envp = dl_cli_child_env(r->cl, owner, dlock_lease_token(r->l));
	sp->argv = dl_cli_guard_argv(r->cl, ctl[0], errp[1], r->grace_ms,
				     r->margin_ms);
	if (!sp->envp || !sp->argv) {
		close(ctl[0]);
		close(errp[1]);
		goto fail;
	}
	tell_guard(r, 'D', r->told = dlock_lease_deadline(r->l));
	block_signals(&old);
	sp->mask = old;
	pid = fork();
	if (pid == 0)
		child_exec(sp);
	err = errno;
	if (pid > 0) {
		r->pid = pid;
		setpgid(pid, pid);
		if (r->tty >= 0)
			tcsetpgrp(r->tty, pid);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(ctl[0]);
	close(errp[1]);
	if (pid > 0)
		return 0;
	dl_cli_msg("fork: %s", strerror(err));
	return EXIT_SOFTWARE;
fail:
	dl_cli_msg("cannot set up the command: out of memory or files");
	return EXIT_SOFTWARE;
}

/* The guard, or the command it runs, could not be executed: the errno
 * comes on the error pipe (EOF: both execs worked). 0, or an exit code. */
static int check_exec(struct runner *r, int errfd)
{
	ssize_t n;
	int err;

	while ((n = read(errfd, &err, sizeof(err))) < 0 && errno == EINTR)
		;
	close(errfd);
	if (n != (ssize_t)sizeof(err))
		return 0;
	dl_cli_msg("cannot run %s: %s", r->cl->command[0], strerror(err));
	while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
		;
	r->exited = 1;
	tty_take_back(r);
	return err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
}

int dl_cli_run(struct cli *cl)
{
	struct runner r = {.cl = cl, .pid = -1, .tty = -1, .ctl = -1};
	struct spawn sp = {.tty = -1};
	int rc, err, errfd = -1;

	if ((rc = timing(&r, cl)) != 0)
		return rc;
	if (pipe2(wake_fd, O_CLOEXEC | O_NONBLOCK)) {
		dl_cli_msg("cannot set up the command: out of files");
		return EXIT_SOFTWARE;
	}
	/* Whatever the guard leaves if it is killed comes to us. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if ((rc = take_lock(&r)) != 0) {
		if (rc == EXIT_TEMPFAIL && (cl->seen & OPTB(OPT_CONFLICT_EXIT)))
			rc = cl->conflict_exit; /* -E, as flock -E */
		goto out;
	}
	install_handlers();
	/* --signal-when-waited: the news of waiters that came with the grant
	 * (sent right behind it: a round trip brings it in) goes to the
	 * command in DLOCK_WAITERS, not as a signal it could get before its
	 * handler is set (found by review: it killed the command at start) */
	if (cl->waited_signal) {
		dlock_ping(r.c);
		cl->waiters_at_start = dlock_lease_waiters(r.l);
		waited_base = atomic_load(&waited);
	}
	/* An interactive shell's foreground job: give the command the
	 * terminal, as the shell would have. */
	if (isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp())
		sp.tty = r.tty = STDIN_FILENO;
	if ((rc = spawn_guard(&r, &sp, &errfd)) != 0 ||
	    (rc = check_exec(&r, errfd)) != 0)
		goto out;
	if (cl->timeout_ms > 0)
		r.end_at = dlock_now_ms() + cl->timeout_ms;
	supervise(&r);
	tty_take_back(&r);
	rc = r.lost ? EXIT_LOST : r.timed_out ? EXIT_TIMEOUT : r.status;
out:
	/* A lost lease is not released: the server dropped it already, or
	 * did not confirm it in time and would likely not answer an UNLOCK
	 * either (which would then keep dlock waiting for the request
	 * timeout); at worst it expires guard_ms later. */
	if (r.l && !r.lost) {
		err = dlock_unlock(r.c, r.l);
		if (err != 0 && r.pid > 0)
			dl_cli_msg("releasing %s: %s (the lease expires by "
				   "itself)",
				   cl->pos[0], dlock_strerror(err));
	}
	dlock_close(r.c);
	if (r.ctl >= 0)
		close(r.ctl);
	dl_cli_strv_free(sp.argv);
	dl_cli_strv_free(sp.envp);
	return rc;
}
