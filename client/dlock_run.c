/*
 * dlock_run.c -- `dlock run`: hold a lock while a command runs (dlock_cli.h).
 *
 * The part of dlock with invariants. It holds a lease while a command runs
 * in a process group of its own, and promises: the command is never
 * running once its lease could have passed to someone else. libdlock
 * renews the lease and, when it can no longer confirm it, calls on_lost
 * `lost_guard` ms before the local deadline (dlock_lease_deadline); we set
 * lost_guard = grace + KILL_MARGIN, so there is room for SIGTERM, the grace
 * period, then SIGKILL at deadline - KILL_MARGIN. The main loop also checks
 * the deadline itself (a little after the guard), so a late callback cannot
 * break the promise. A lost lease is never released: the server dropped it,
 * or did not confirm it and expires it within guard ms anyway.
 *
 * A grant that is a reentry (the owner id, given with --owner or inherited
 * through DLOCK_OWNER, holds the lock in another process) is refused, and
 * the one hold it added is given back with dlock_unlock_token() -- never
 * with dlock_unlock(), which could release the other process's holds too
 * (dlock.h, options.owner).
 *
 * Threads and signals: on_lost runs on libdlock's thread and signal
 * handlers run anywhere; both only set a flag and write one byte to a
 * non-blocking self-pipe. Everything else -- waitpid, killpg, messages --
 * happens in the main loop, which polls that pipe. The signals dlock
 * handles are blocked while libdlock starts a thread, so they are always
 * delivered to the main thread. Between fork and exec the child calls only
 * async-signal-safe functions: the environment, the candidate paths of the
 * program and the shell fallback are all built before fork().
 *
 * State: the self-pipe, the pending-signal flags, the lost reason and the
 * dispositions found at start are file-scope statics (signal handlers and
 * on_lost can reach nothing else); everything else lives in dl_cli_run()'s
 * struct runner and struct spawn, freed before it returns.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/dlock_cli.h"

/* ---- limits ------------------------------------------------------------ */

/* Longest default grace between SIGTERM and SIGKILL; the default is
 * min(this, ttl / 4). */
#define DEFAULT_GRACE_MAX_MS 5000
/* SIGKILL goes out this long before the lease's local deadline, for the
 * kernel to end the process group and for our own scheduling delays; at
 * most ttl / 10 for very short leases. */
#define KILL_MARGIN_MS 200
/* How often to look whether a killed process group is gone, and for how
 * long after SIGKILL (a process in uninterruptible sleep dies only when it
 * wakes up; dlock then warns and exits without it). */
#define GROUP_POLL_MS	   10
#define GROUP_KILL_WAIT_MS 1000
/* The search path when the environment has none (as execvp(3)). */
#define PATH_DEFAULT "/usr/local/bin:/usr/bin:/bin"

/* ---- run: signals and the self-pipe -------------------------------------- */

/* Signals passed on to the command's process group. */
static const int fwd_signals[] = {SIGTERM, SIGINT,  SIGHUP, SIGQUIT,
				  SIGUSR1, SIGUSR2, SIGTSTP};
#define NFWD (sizeof(fwd_signals) / sizeof(fwd_signals[0]))
/* Every signal whose disposition run changes, restored in the child. */
static const int touched_signals[] = {SIGTERM, SIGINT,	SIGHUP,	 SIGQUIT,
				      SIGUSR1, SIGUSR2, SIGTSTP, SIGCHLD,
				      SIGTTIN, SIGTTOU, SIGPIPE};
#define NTOUCHED (sizeof(touched_signals) / sizeof(touched_signals[0]))

static int wake_fd[2] = {-1, -1}; /* the self-pipe */
static volatile sig_atomic_t sig_pending[NSIG];
static atomic_int lost_reason;		   /* 0, or a dlock_lost_reason */
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

/* ---- run: the child ------------------------------------------------------ */

/* Everything the child needs, built before fork(). */
struct spawn {
	char **argv;	/* the command */
	char **envp;	/* environ plus DLOCK_* */
	char **paths;	/* execve() candidates, NULL-terminated */
	char **sh_argv; /* ENOEXEC fallback: sh <path> args... */
	int tty;	/* terminal to hand over, or -1 */
	sigset_t mask;	/* the signal mask to exec with */
};

static void free_strv(char **v)
{
	size_t i;

	if (!v)
		return;
	for (i = 0; v[i]; i++)
		free(v[i]);
	free(v);
}

/* The candidates execvp() would try, as full paths. */
static char **exec_paths(const char *file)
{
	const char *path = getenv("PATH"), *p, *end;
	size_t n = 1, k = 0, dlen;
	char **v;

	if (strchr(file, '/')) {
		v = calloc(2, sizeof(*v));
		if (v && !(v[0] = strdup(file))) {
			free(v);
			v = NULL;
		}
		return v;
	}
	if (!path)
		path = PATH_DEFAULT;
	for (p = path; *p; p++)
		n += *p == ':';
	v = calloc(n + 1, sizeof(*v));
	if (!v)
		return NULL;
	for (p = path;; p = end + 1) {
		end = strchr(p, ':');
		if (!end)
			end = p + strlen(p);
		dlen = (size_t)(end - p);
		/* an empty entry is the current directory */
		v[k] = malloc(dlen + strlen(file) + 3);
		if (!v[k]) {
			free_strv(v);
			return NULL;
		}
		sprintf(v[k++], "%.*s/%s", (int)dlen, dlen ? p : ".", file);
		if (!*end)
			break;
	}
	return v;
}

static int env_skip(const char *e)
{
	static const char *const ours[] = {
		"DLOCK_NAME=", "DLOCK_TOKEN=", "DLOCK_OWNER=",
		"DLOCK_HOST=", "DLOCK_PORT=",  "DLOCK_SOCKET="};
	size_t i;

	for (i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (strncmp(e, ours[i], strlen(ours[i])) == 0)
			return 1;
	return 0;
}

/* malloc'd printf, NULL when out of memory. */
static char *str_printf(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static char *str_printf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}

/* environ without our variables, then ours: the lock, and where to reach
 * the server, so that `dlock check "$DLOCK_NAME" "$DLOCK_TOKEN"` works in
 * the command. The password is not added. */
static char **child_env(const struct cli *cl, const char *owner, uint64_t token)
{
	size_t n = 0, k = 0, i;
	char **v;

	while (environ[n])
		n++;
	v = calloc(n + 6, sizeof(*v));
	if (!v)
		return NULL;
	for (i = 0; i < n; i++)
		if (!env_skip(environ[i]) && !(v[k++] = strdup(environ[i])))
			goto nomem;
	if (!(v[k++] = str_printf("DLOCK_NAME=%s", cl->pos[0])) ||
	    !(v[k++] = str_printf("DLOCK_TOKEN=%" PRIu64, token)) ||
	    !(v[k++] = str_printf("DLOCK_OWNER=%s", owner)))
		goto nomem;
	if (cl->socket) {
		if (!(v[k++] = str_printf("DLOCK_SOCKET=%s", cl->socket)))
			goto nomem;
	} else if (!(v[k++] = str_printf("DLOCK_HOST=%s", cl->host)) ||
		   !(v[k++] = str_printf("DLOCK_PORT=%d", cl->port))) {
		goto nomem;
	}
	return v;
nomem:
	v[k - 1] = NULL;
	free_strv(v);
	return NULL;
}

/* In the child, between fork and exec: async-signal-safe calls only.
 * Reports the exec errno on errfd and exits 126 or 127. */
static void child_exec(const struct spawn *sp, int errfd)
{
	int err = ENOENT, e;
	size_t i;

	setpgid(0, 0);
	if (sp->tty >= 0)
		tcsetpgrp(sp->tty, getpid()); /* SIGTTOU is still ignored */
	for (i = 0; i < NTOUCHED; i++)
		sigaction(touched_signals[i], &orig_action[touched_signals[i]],
			  NULL);
	sigprocmask(SIG_SETMASK, &sp->mask, NULL);
	for (i = 0; sp->paths[i]; i++) {
		execve(sp->paths[i], sp->argv, sp->envp);
		e = errno;
		if (e == ENOEXEC) {
			sp->sh_argv[1] = sp->paths[i];
			execve("/bin/sh", sp->sh_argv, sp->envp);
			e = errno;
		}
		if (e == EACCES)
			err = EACCES;
		else if (e != ENOENT && e != ENOTDIR && e != ESTALE)
			err = e;
		if (err != ENOENT && err != EACCES)
			break;
	}
	(void)!write(errfd, &err, sizeof(err));
	_exit(err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
}

/* ---- run: the parent ----------------------------------------------------- */

struct runner {
	const struct cli *cl;
	dlock_client *c;
	dlock_lease *l;
	pid_t pid;  /* the command: leader of its process group */
	int tty;    /* terminal handed to it, or -1 */
	int exited; /* the leader has been reaped */
	int status; /* its exit code (128+N for signal N) */
	int lost;   /* the lease is lost: stopping the command */
	int killed; /* SIGKILL sent */
	int64_t grace_ms;
	int64_t margin_ms;
	int64_t guard_ms; /* options.lost_guard_ms */
	int64_t kill_at;  /* when lost: time of SIGKILL (dlock_now_ms) */
};

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

/* 1 while a process of the command's group is left that is not a
 * zombie. kill(-pgid, 0) alone counts zombies, and an orphan's zombie may
 * never be reaped (some containers' init does not reap), so the group is
 * looked up in /proc when kill() still finds it. */
static int group_alive(const struct runner *r)
{
	char path[sizeof(((struct dirent *)0)->d_name) + 16], buf[512], state;
	struct dirent *e;
	int fd, ppid, pgrp, alive = 0;
	ssize_t n;
	char *p;
	DIR *dir;

	if (kill(-r->pid, 0) != 0 && errno == ESRCH)
		return 0;
	if (!(dir = opendir("/proc")))
		return 1;
	while (!alive && (e = readdir(dir))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		/* "pid (comm) state ppid pgrp ...": comm may hold ')' */
		if ((p = strrchr(buf, ')')) &&
		    sscanf(p + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 &&
		    pgrp == r->pid && state != 'Z' && state != 'X')
			alive = 1;
	}
	closedir(dir);
	return alive;
}

/* The lease is gone or about to be: SIGTERM now, SIGKILL when the grace
 * is over, and never later than KILL_MARGIN before the local deadline. */
static void start_stopping(struct runner *r, int why)
{
	int64_t now = dlock_now_ms();
	int64_t last = dlock_lease_deadline(r->l) - r->margin_ms;

	r->lost = 1;
	r->kill_at = now + r->grace_ms < last ? now + r->grace_ms : last;
	dl_cli_msg("lease on %s lost (%s): stopping the command", r->cl->pos[0],
		   lost_text(why));
	if (r->exited && !group_alive(r))
		return;
	if (r->kill_at > now) {
		killpg(r->pid, SIGTERM);
		killpg(r->pid, SIGCONT); /* a stopped command must see it */
	} else {
		killpg(r->pid, SIGKILL);
		r->killed = 1;
	}
}

/* When to give the lease up if libdlock has not: a little after its own
 * guard (on_lost is due at deadline - guard_ms), so that normally its
 * callback comes first and says why, and a late one changes nothing. */
static int64_t fallback_at(const struct runner *r)
{
	return dlock_lease_deadline(r->l) - r->guard_ms + r->margin_ms / 2;
}

static void tty_take_back(struct runner *r)
{
	if (r->tty >= 0)
		tcsetpgrp(r->tty, getpgrp()); /* SIGTTOU is ignored */
}

/* The command stopped (Ctrl-Z on the terminal it was handed): stop
 * dlock too, so that the shell sees the job stopped; when continued, give
 * the terminal back and continue the command -- unless the lease was lost
 * meanwhile (nobody renews it while we are stopped). */
static void mirror_stop(struct runner *r)
{
	tty_take_back(r);
	kill(getpid(), SIGSTOP);
	if (r->tty >= 0 && tcgetpgrp(r->tty) == getpgrp())
		tcsetpgrp(r->tty, r->pid);
	if (!r->lost &&
	    (!dlock_lease_valid(r->l) || dlock_now_ms() >= fallback_at(r)))
		start_stopping(r, atomic_load(&lost_reason));
	else if (!r->lost)
		killpg(r->pid, SIGCONT);
}

static void reap(struct runner *r)
{
	int st;
	pid_t p;

	while (!r->exited) {
		p = waitpid(r->pid, &st,
			    WNOHANG | (r->tty >= 0 ? WUNTRACED : 0));
		if (p == 0 || (p < 0 && errno != EINTR))
			return;
		if (p < 0)
			continue;
		if (WIFSTOPPED(st)) {
			mirror_stop(r);
		} else if (WIFEXITED(st) || WIFSIGNALED(st)) {
			r->exited = 1;
			r->status = WIFEXITED(st)
					    ? WEXITSTATUS(st)
					    : EXIT_SIGNAL_BASE + WTERMSIG(st);
		}
	}
}

/* Wait for the command, forwarding signals and watching the lease. */
static void supervise(struct runner *r)
{
	char buf[64];
	int64_t now, next, t;
	struct pollfd p = {.fd = wake_fd[0], .events = POLLIN};
	size_t i;
	int why;

	for (;;) {
		while (read(wake_fd[0], buf, sizeof(buf)) > 0)
			;
		for (i = 0; i < NFWD; i++)
			if (sig_pending[fwd_signals[i]]) {
				sig_pending[fwd_signals[i]] = 0;
				if (!r->exited)
					killpg(r->pid, fwd_signals[i]);
			}
		reap(r);
		now = dlock_now_ms();
		why = atomic_load(&lost_reason);
		if (!r->lost && !r->exited &&
		    (why || !dlock_lease_valid(r->l) || now >= fallback_at(r)))
			start_stopping(r, why);
		if (r->lost && !r->killed && now >= r->kill_at) {
			killpg(r->pid, SIGKILL);
			r->killed = 1;
		}
		if (r->exited && (!r->lost || !group_alive(r)))
			return;
		if (r->exited && r->killed &&
		    now >= r->kill_at + GROUP_KILL_WAIT_MS) {
			dl_cli_msg("processes of the command survive SIGKILL");
			return;
		}

		/* sleep until something may need doing */
		if (!r->lost)
			next = fallback_at(r);
		else if (!r->killed)
			next = r->kill_at;
		else
			next = now + GROUP_POLL_MS;
		if (r->exited && r->lost)
			next = now + GROUP_POLL_MS < next ? now + GROUP_POLL_MS
							  : next;
		t = next - now;
		if (t < 1)
			t = 1;
		if (t > 1000)
			t = 1000;
		poll(&p, 1, (int)t);
	}
}

/* A reentrant grant means that another process uses this owner id and
 * holds the lock (random owner ids are unique; only a chosen one can be
 * shared): both commands would run at once. Refuse, and give back the one
 * hold we got. Not with dlock_unlock(): its unlock of a client's last
 * handle, answered HELD, unlocks again (taking the extra hold for one of
 * its own lost in a reconnect) and would release the other process's lease
 * too. Instead dlock_close() forgets our handle, releasing nothing, and a
 * client of the same owner id without a handle gives back exactly one hold
 * with dlock_unlock_token(). Returns 1 when refused; r->c and r->l are then
 * gone. */
static int shared_owner(struct runner *r)
{
	const struct cli *cl = r->cl;
	struct dlock_status st;
	dlock_client *c;
	uint64_t token;
	sigset_t old;
	int rc;

	if (!cl->owner || dlock_status(r->c, cl->pos[0], &st) != 0 ||
	    st.count <= 1)
		return 0;
	dl_cli_msg("%s is already held by owner %s in another process (a "
		   "shared owner id); not running the command",
		   cl->pos[0], cl->owner);
	token = dlock_lease_token(r->l);
	dlock_close(r->c);
	r->c = NULL;
	r->l = NULL;
	block_signals(&old); /* libdlock's thread must not take ours */
	rc = dl_cli_simple_connect(cl, &c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return 1; /* reported; the hold expires with its TTL */
	if ((rc = dlock_unlock_token(c, cl->pos[0], token, NULL)) != 0)
		dl_cli_fail(rc, "giving back the extra hold");
	dlock_close(c);
	return 1;
}

int dl_cli_run(struct cli *cl)
{
	struct runner r = {.cl = cl, .pid = -1, .tty = -1};
	struct spawn sp = {.argv = cl->command, .tty = -1};
	struct dlock_options o;
	sigset_t old;
	pid_t pid;
	int rc, err, errpipe[2];
	ssize_t n;
	size_t i, argc;

	/* Times: KILL_MARGIN before the deadline, grace before that, and
	 * the library must report a loss grace + margin ahead of it; that
	 * must leave time for the renewal at ttl/3 to be confirmed. */
	r.margin_ms = KILL_MARGIN_MS < cl->ttl_ms / 10
			      ? KILL_MARGIN_MS
			      : (int64_t)cl->ttl_ms / 10;
	if (cl->seen & OPTB(OPT_GRACE))
		r.grace_ms = (int64_t)cl->grace_ms;
	else
		r.grace_ms = DEFAULT_GRACE_MAX_MS < cl->ttl_ms / 4
				     ? DEFAULT_GRACE_MAX_MS
				     : (int64_t)cl->ttl_ms / 4;
	r.guard_ms = r.grace_ms + r.margin_ms;
	if (r.guard_ms < 1)
		r.guard_ms = 1;
	if ((uint64_t)r.guard_ms * 2 >= cl->ttl_ms || r.guard_ms > INT_MAX)
		return dl_cli_usage_error(
			cl,
			"--grace %" PRId64 " ms is too long for "
			"--ttl %" PRIu64 " ms: grace + %" PRId64
			" ms must stay under ttl/2",
			r.grace_ms, cl->ttl_ms, r.margin_ms);

	for (argc = 0; cl->command[argc]; argc++)
		;
	sp.paths = exec_paths(cl->command[0]);
	sp.sh_argv = calloc(argc + 2, sizeof(*sp.sh_argv));
	if (!sp.paths || !sp.sh_argv ||
	    pipe2(wake_fd, O_CLOEXEC | O_NONBLOCK)) {
		dl_cli_msg("cannot set up the command: out of memory or files");
		rc = EXIT_SOFTWARE;
		goto out;
	}
	sp.sh_argv[0] = (char *)"sh";
	for (i = 1; i < argc; i++)
		sp.sh_argv[i + 1] = cl->command[i];

	/* libdlock's thread starts with our signals blocked: they all go to
	 * this thread. Until the grant they keep their default actions
	 * (a signal while waiting ends dlock; the server then drops its
	 * place in the queue). */
	save_dispositions();
	signal(SIGPIPE, SIG_IGN);
	dl_cli_conn_options(cl, &o);
	o.reconnect = 1;
	o.renew = 1;
	o.lost_guard_ms = (int)r.guard_ms;
	o.on_lost = on_lost;
	block_signals(&old);
	rc = dl_cli_connect(cl, &o, &r.c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		goto out;
	if ((rc = dl_cli_acquire(r.c, cl->pos[0], cl->ttl_ms, cl->wait_ms,
				 &r.l)))
		goto out;
	install_handlers();
	if (shared_owner(&r)) {
		rc = EXIT_TEMPFAIL;
		goto out;
	}
	sp.envp = child_env(cl, dlock_owner(r.c), dlock_lease_token(r.l));
	if (!sp.envp || pipe2(errpipe, O_CLOEXEC)) {
		dl_cli_msg("cannot set up the command: out of memory or files");
		rc = EXIT_SOFTWARE;
		goto out;
	}
	/* An interactive shell's foreground job: give the command the
	 * terminal, as the shell would have. */
	if (isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp())
		sp.tty = r.tty = STDIN_FILENO;
	sp.mask = old;

	block_signals(NULL);
	pid = fork();
	if (pid == 0) {
		close(errpipe[0]);
		child_exec(&sp, errpipe[1]);
	}
	err = errno;
	if (pid > 0) {
		r.pid = pid;
		setpgid(pid, pid);
		if (r.tty >= 0)
			tcsetpgrp(r.tty, pid);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(errpipe[1]);
	if (pid < 0) {
		close(errpipe[0]);
		dl_cli_msg("fork: %s", strerror(err));
		rc = EXIT_SOFTWARE;
		goto out;
	}
	while ((n = read(errpipe[0], &err, sizeof(err))) < 0 && errno == EINTR)
		;
	close(errpipe[0]);
	if (n == (ssize_t)sizeof(err)) {
		dl_cli_msg("cannot run %s: %s", cl->command[0], strerror(err));
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		tty_take_back(&r);
		rc = err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
		goto out;
	}

	supervise(&r);
	tty_take_back(&r);
	rc = r.lost ? EXIT_LOST : r.status;

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
	free_strv(sp.paths);
	free_strv(sp.envp);
	free(sp.sh_argv);
	return rc;
}
