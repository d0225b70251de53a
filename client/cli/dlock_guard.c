/* SPDX-License-Identifier: MIT */
/*
 * dlock_guard.c -- the guard of `dlock run` (dlock_cli.h), and the process
 * tree walks that dlock and the guard share.
 *
 * Why a guard. dlock holds the lease and renews it; if dlock itself dies
 * (kill -9, the OOM killer) or stops (SIGSTOP, a hung machine thread),
 * nothing renews the lease, and the command it ran must be gone before the
 * lease could pass to someone else. A process cannot act after its own
 * kill -9, so a second one does: dlock forks the guard, which re-executes
 * dlock (`dlock --run-guard ...`: a fresh, single-threaded process, free to
 * call anything) and runs the command as its own child:
 *
 *     dlock ── guard (leader of a new process group, child subreaper)
 *                └── command ── its children, grandchildren, ...
 *
 * The guard is a dead man's switch. dlock writes it the lease's local
 * deadline whenever a renewal moves it ("D <ms>"), and "S <ms>" when the
 * lease is lost (stop now, SIGKILL at <ms>). The guard stops the command's
 * whole tree -- SIGTERM, then SIGKILL after the grace, never later than
 * the deadline minus the kill margin --
 *   - when dlock says so;
 *   - when its pipe from dlock reads end-of-file: dlock is dead;
 *   - when the deadline minus the margin comes and dlock has not moved it
 *     (dlock stopped or hung: nobody renews the lease).
 * Its clock is CLOCK_BOOTTIME (dlock_now_ms()), which counts a suspend;
 * its waits are cut in steps of GUARD_STEP_MS, since poll() sleeps on a
 * clock that stops while the machine is suspended: after a resume it acts
 * within one step.
 *
 * Which processes are covered. The guard is a child subreaper
 * (PR_SET_CHILD_SUBREAPER): a descendant whose parent exits is reparented
 * to it, not to init, so every process the command starts stays in the
 * guard's tree -- including ones that double-fork, call setsid() or leave
 * the process group, like daemons. Stopping walks that tree in /proc
 * (parent links) and signals every process in it, again until none is
 * left. Not covered: processes that are not descendants -- work handed to
 * another service (systemd-run, at, a job queue, a container runtime) --
 * and a descendant that another subreaper below the guard adopts, which
 * the walk still finds only while that subreaper lives. dlock is a
 * subreaper too, so if the guard itself is killed, what it leaves is
 * reparented to dlock, which stops it the same way.
 *
 * When the command exits by itself, what it left running (`cmd &`) is
 * stopped the same way before the guard exits, and dlock releases the
 * lock only then: a leftover process would otherwise run unfenced.
 *
 * The guard ignores the signals dlock passes on to the process group (the
 * command gets them) and exits with the command's status (128 + N for
 * signal N). It talks with dlock over a socket (dlock_cli.h).
 *
 * Job control: the guard does not stay stopped, since a stopped guard could
 * not act on the deadline. It does not stop with the command (Ctrl-Z, a
 * SIGSTOP): it tells dlock (T, and C when the command is continued), and on
 * a terminal dlock stops itself so that the shell sees the job stopped (M,
 * then R when it runs again). If the command runs again while dlock is so
 * stopped, the guard continues dlock -- at every turn until R, since its
 * SIGCONT may come before dlock's SIGSTOP. Someone may stop the guard itself
 * (a SIGSTOP to it, or to the command's process group): dlock, its parent,
 * sees it and continues it at once; and if dlock is stopped too, the guard's
 * alarm (set_alarm) continues it when it must act. So whatever is stopped
 * and continued -- the command, dlock, the guard, in any order, with a
 * terminal or without -- the guard acts on the deadline, and a stopped
 * command is killed too (SIGTERM, then SIGCONT so that it can act on it,
 * then SIGKILL, which needs nothing). When it stops the tree on its own
 * clock it tells dlock (L), which then exits 76, the lease lost, rather than
 * with the killed command's 128 + N. Not covered: a guard stopped by a
 * debugger (ptrace), which SIGCONT does not resume; and a stop of dlock in
 * the instant between its continuation and its R, which the guard takes
 * for the mirrored one and undoes (dlock then runs on and renews: the
 * lease stays fenced).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/cli/dlock_cli.h"

/* The longest the guard sleeps (see the clock, above). */
#define GUARD_STEP_MS 100
/* How often a tree still alive after SIGKILL is looked at again, and for
 * how long (a process in uninterruptible sleep dies when it wakes up). */
#define TREE_POLL_MS	  10
#define TREE_KILL_WAIT_MS 1000

/* ---- process trees ----------------------------------------------------- */

struct procs {
	pid_t *pid, *ppid;
	char *state;
	size_t n, cap;
};

static int procs_add(struct procs *p, pid_t pid, pid_t ppid, char state)
{
	size_t cap;
	void *a, *b, *c;

	if (p->n == p->cap) {
		cap = p->cap ? p->cap * 2 : 256;
		a = realloc(p->pid, cap * sizeof(*p->pid));
		if (a)
			p->pid = a;
		b = realloc(p->ppid, cap * sizeof(*p->ppid));
		if (b)
			p->ppid = b;
		c = realloc(p->state, cap);
		if (c)
			p->state = c;
		if (!a || !b || !c)
			return -1;
		p->cap = cap;
	}
	p->pid[p->n] = pid;
	p->ppid[p->n] = ppid;
	p->state[p->n++] = state;
	return 0;
}

/* Every process of the machine with its parent, from /proc. */
static int procs_read(struct procs *p)
{
	char path[sizeof(((struct dirent *)0)->d_name) + 16], buf[512], *q,
		state;
	struct dirent *e;
	int fd, ppid;
	ssize_t n;
	DIR *dir;

	p->n = 0;
	if (!(dir = opendir("/proc")))
		return -1;
	while ((e = readdir(dir))) {
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
		/* "pid (comm) state ppid ...": comm may hold ')' */
		if (!(q = strrchr(buf, ')')) ||
		    sscanf(q + 1, " %c %d", &state, &ppid) != 2)
			continue;
		if (procs_add(p, (pid_t)atoi(e->d_name), (pid_t)ppid, state)) {
			closedir(dir);
			return -1;
		}
	}
	closedir(dir);
	return 0;
}

/* Signal every live descendant of root (root itself excluded); returns
 * how many there were. sig 0 only counts them. */
int dl_cli_tree_signal(pid_t root, int sig)
{
	struct procs p = {0};
	unsigned char *in;
	size_t i, live = 0;
	int grew = 1;

	if (procs_read(&p) || !(in = calloc(p.n + 1, 1))) {
		free(p.pid);
		free(p.ppid);
		free(p.state);
		return 1; /* cannot tell: assume something lives */
	}
	while (grew) { /* mark descendants until nothing changes */
		grew = 0;
		for (i = 0; i < p.n; i++) {
			size_t j;

			if (in[i])
				continue;
			if (p.ppid[i] == root) {
				in[i] = grew = 1;
				continue;
			}
			for (j = 0; j < p.n; j++)
				if (in[j] && p.pid[j] == p.ppid[i]) {
					in[i] = grew = 1;
					break;
				}
		}
	}
	for (i = 0; i < p.n; i++) {
		if (!in[i] || p.state[i] == 'Z' || p.state[i] == 'X')
			continue;
		live++;
		if (sig)
			kill(p.pid[i], sig);
	}
	free(in);
	free(p.pid);
	free(p.ppid);
	free(p.state);
	return (int)live;
}

/* ---- the guard ----------------------------------------------------------- */

/* Signals dlock passes on to the group, and the terminal's job control:
 * the guard ignores them, the command gets them with its dispositions. */
static const int shielded[] = {SIGTERM, SIGINT,	 SIGHUP,  SIGQUIT, SIGUSR1,
			       SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU};
#define NSHIELD (sizeof(shielded) / sizeof(shielded[0]))

struct guard {
	int ctl;	  /* with dlock (dlock_cli.h); EOF: dlock died */
	int chld[2];	  /* self-pipe written on SIGCHLD */
	pid_t dlock;	  /* our parent, while it lives */
	pid_t cmd;	  /* the command */
	int cmd_stopped;  /* ... is stopped (Ctrl-Z, SIGSTOP) */
	int mirrored;	  /* dlock stopped itself with it (M, until R) */
	int status;	  /* its exit status, once it exited */
	int exited;	  /* ... and that it did */
	int64_t deadline; /* the lease's local deadline (dlock_now_ms) */
	int64_t grace;	  /* SIGTERM to SIGKILL */
	int64_t margin;	  /* SIGKILL at the latest this before deadline */
	int stopping;	  /* SIGTERM sent to the tree */
	int killed;	  /* SIGKILL sent */
	int lapsed;	  /* we stopped the tree on our own clock */
	int64_t kill_at;  /* when stopping: time of SIGKILL */
	timer_t alarm;	  /* SIGCONT at the next time to act */
	int has_alarm;	  /* ... it was created */
	int64_t alarm_at; /* ... and is set for then (0: not set) */
	char buf[128];	  /* a partial line from ctl */
	size_t len;
	struct sigaction orig[NSIG];
};

static int chld_wfd = -1;

/* SIGCHLD and SIGCONT: a turn of the loop is due. */
static void on_wake(int sig)
{
	int saved = errno;
	char b = 0;

	(void)sig;
	(void)!write(chld_wfd, &b, 1);
	errno = saved;
}

static int64_t last_kill(const struct guard *g)
{
	return g->deadline == INT64_MAX ? INT64_MAX : g->deadline - g->margin;
}

/* Stop the tree: SIGTERM now, SIGKILL at `at` (at once if it is due). */
static void stop_tree(struct guard *g, int64_t at)
{
	int64_t now = dlock_now_ms();

	if (at > last_kill(g))
		at = last_kill(g);
	if (g->stopping && at >= g->kill_at)
		return;
	g->kill_at = at;
	if (!g->stopping) {
		g->stopping = 1;
		dl_cli_tree_signal(getpid(), SIGTERM);
		dl_cli_tree_signal(getpid(), SIGCONT); /* a stopped one too */
	}
	if (now >= g->kill_at && !g->killed) {
		g->killed = 1;
		dl_cli_tree_signal(getpid(), SIGKILL);
	}
}

/* Tell dlock one event (a letter; dlock_cli.h). A dlock that is gone
 * cannot read it: no SIGPIPE. */
static void tell_dlock(struct guard *g, char what)
{
	char line[2] = {what, '\n'};

	if (g->ctl >= 0)
		(void)!send(g->ctl, line, sizeof(line),
			    MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* One line from dlock. */
static void ctl_line(struct guard *g, const char *line)
{
	long long v;

	if (line[0] == 'M' || line[0] == 'R') {
		g->mirrored = line[0] == 'M';
		return;
	}
	if (sscanf(line + 1, " %lld", &v) != 1)
		return;
	if (line[0] == 'D' && !g->stopping)
		g->deadline = v;
	else if (line[0] == 'S')
		stop_tree(g, v);
}

/* Read what dlock wrote; EOF means dlock is gone. */
static void ctl_read(struct guard *g)
{
	ssize_t n = read(g->ctl, g->buf + g->len, sizeof(g->buf) - 1 - g->len);
	char *nl;

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		close(g->ctl);
		g->ctl = -1;
		stop_tree(g, dlock_now_ms() + g->grace); /* dlock died */
		return;
	}
	if (n < 0)
		return; /* nothing more now */
	g->len += (size_t)n;
	g->buf[g->len] = '\0';
	while ((nl = strchr(g->buf, '\n'))) {
		*nl = '\0';
		ctl_line(g, g->buf);
		g->len -= (size_t)(nl + 1 - g->buf);
		memmove(g->buf, nl + 1, g->len + 1);
	}
	if (g->len == sizeof(g->buf) - 1)
		g->len = 0; /* not a line of ours */
}

#ifndef DL_PLANT_STOP_MIRROR
/* Reap children: the command (its stop, continue or end), and orphans.
 * Its stop and continue go to dlock, which mirrors them on a terminal;
 * the guard itself never stops with it. */
static void reap(struct guard *g)
{
	pid_t p;
	int st;

	while ((p = waitpid(-1, &st, WNOHANG | WUNTRACED | WCONTINUED)) > 0) {
		if (p != g->cmd)
			continue; /* an orphan we adopted */
		if (WIFSTOPPED(st)) {
			g->cmd_stopped = 1;
			tell_dlock(g, 'T');
		} else if (WIFCONTINUED(st)) {
			g->cmd_stopped = 0;
			tell_dlock(g, 'C');
		} else {
			if (g->cmd_stopped) /* killed while stopped */
				tell_dlock(g, 'C');
			g->cmd_stopped = 0; /* gone: nothing to mirror */
			g->exited = 1;
			g->status = WIFEXITED(st)
					    ? WEXITSTATUS(st)
					    : EXIT_SIGNAL_BASE + WTERMSIG(st);
		}
	}
}
#else
/* A planted bug for the fault campaign's self-test (tests/faults), never
 * in a real build: the guard of old, which stopped itself with the
 * command, with a terminal or without, and stayed stopped when the
 * command was continued -- no longer watching the lease (it has no alarm,
 * and dlock does not continue it). */
static void reap(struct guard *g)
{
	pid_t p;
	int st;

	while ((p = waitpid(-1, &st, WNOHANG | WUNTRACED)) > 0) {
		if (p != g->cmd)
			continue;
		if (WIFSTOPPED(st)) {
			kill(getpid(), SIGSTOP);
		} else {
			g->exited = 1;
			g->status = WIFEXITED(st)
					    ? WEXITSTATUS(st)
					    : EXIT_SIGNAL_BASE + WTERMSIG(st);
		}
	}
}
#endif

/* The command, with the dispositions dlock started with. */
static void spawn_command(struct guard *g, char **argv, int errfd)
{
	int err;
	size_t i;

	if ((g->cmd = fork()) != 0)
		return;
	for (i = 0; i < NSHIELD; i++)
		sigaction(shielded[i], &g->orig[shielded[i]], NULL);
	signal(SIGCHLD, SIG_DFL);
	signal(SIGCONT, SIG_DFL);
	execvp(argv[0], argv);
	err = errno;
	(void)!write(errfd, &err, sizeof(err));
	_exit(err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
}

/* The alarm: SIGCONT to ourselves when the next action is due -- the
 * deadline minus the margin, or when stopping the time of SIGKILL -- on
 * CLOCK_BOOTTIME, absolute. A stopped guard (a SIGSTOP to it, or to the
 * command's process group) could not act; SIGCONT continues a process
 * whoever sends it, the kernel's timer too, so it wakes when it must act
 * even if dlock, which otherwise continues it at once, is stopped as well.
 * The guard handles SIGCONT rather than leave it to its default action (to
 * be ignored), so that each one is a turn of the loop. Timers are not
 * inherited across fork(): the command knows nothing of it. */
static void set_alarm(struct guard *g)
{
	struct itimerspec its = {{0, 0}, {0, 0}};
	int64_t at = g->killed ? 0 : g->stopping ? g->kill_at : last_kill(g);

	if (!g->has_alarm || at == g->alarm_at)
		return;
	if (at != INT64_MAX && at > 0) {
		its.it_value.tv_sec = (time_t)(at / 1000);
		its.it_value.tv_nsec = (long)(at % 1000) * 1000000;
	} else {
		at = 0; /* nothing to do: disarmed */
	}
	if (timer_settime(g->alarm, TIMER_ABSTIME, &its, NULL) == 0)
		g->alarm_at = at;
}

static void setup(struct guard *g)
{
	struct sigevent ev = {0};
	struct sigaction ign = {.sa_handler = SIG_IGN};
	struct sigaction sa = {.sa_handler = on_wake,
			       .sa_flags = SA_RESTART | SA_NOCLDSTOP};
	size_t i;

	prctl(PR_SET_CHILD_SUBREAPER, 1);
	sigemptyset(&ign.sa_mask);
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < NSHIELD; i++) {
		sigaction(shielded[i], NULL, &g->orig[shielded[i]]);
		sigaction(shielded[i], &ign, NULL);
	}
	if (pipe2(g->chld, O_CLOEXEC | O_NONBLOCK) == 0) {
		chld_wfd = g->chld[1];
		sa.sa_flags &= ~SA_NOCLDSTOP; /* see the command stop */
		sigaction(SIGCHLD, &sa, NULL);
	}
	sigaction(SIGCONT, &sa, NULL); /* see set_alarm */
	fcntl(g->ctl, F_SETFD, FD_CLOEXEC);
	fcntl(g->ctl, F_SETFL, O_NONBLOCK);
#ifndef DL_PLANT_STOP_MIRROR
	ev.sigev_notify = SIGEV_SIGNAL;
	ev.sigev_signo = SIGCONT;
	if (timer_create(CLOCK_BOOTTIME, &ev, &g->alarm) == 0)
		g->has_alarm = 1;
	else
		dl_cli_msg(
			"the guard has no alarm (%s): if it is stopped, only "
			"dlock continues it",
			strerror(errno));
#else
	(void)ev;
#endif
}

/* Sleep until something may need doing, at most one step. */
static void wait_event(struct guard *g)
{
	struct pollfd p[2] = {{.fd = g->chld[0], .events = POLLIN},
			      {.fd = g->ctl, .events = POLLIN}};
	int64_t now = dlock_now_ms(), next = GUARD_STEP_MS, t;
	char b[64];

	t = (g->stopping ? g->kill_at : last_kill(g)) - now;
	if (!g->killed && t < next)
		next = t < 1 ? 1 : t;
	if (g->killed || (g->exited && g->stopping))
		next = TREE_POLL_MS;
	if (poll(p, g->ctl >= 0 ? 2 : 1, (int)next) > 0) {
		while (read(g->chld[0], b, sizeof(b)) > 0)
			;
		if (g->ctl >= 0 && p[1].revents)
			ctl_read(g);
	}
}

/* One turn: act on the clock, the command's end and what is left. */
static int turn(struct guard *g)
{
	int64_t now;

	if (g->ctl >= 0)
		ctl_read(g); /* what dlock sent while we were stopped, first */
	reap(g);
	now = dlock_now_ms();
	/* dlock stopped itself with the command, which runs again: so must
	 * dlock (again and again: a SIGCONT may come before its SIGSTOP) */
	if (g->mirrored && !g->cmd_stopped && getppid() == g->dlock)
		kill(g->dlock, SIGCONT);
	if (!g->killed && now >= last_kill(g)) {
		if (!g->stopping && !g->lapsed) {
			g->lapsed = 1; /* nobody moved the deadline */
			tell_dlock(g, 'L');
		}
		stop_tree(g, now);
	}
	if (g->stopping && !g->killed && now >= g->kill_at) {
		g->killed = 1;
		dl_cli_tree_signal(getpid(), SIGKILL);
	} else if (g->killed) {
		dl_cli_tree_signal(getpid(), SIGKILL); /* forks race kills */
	}
	if (!g->exited)
		return 0;
	if (dl_cli_tree_signal(getpid(), 0) == 0)
		return 1; /* the command and everything it started are gone */
	if (g->killed && now >= g->kill_at + TREE_KILL_WAIT_MS) {
		dl_cli_msg("processes of the command survive SIGKILL");
		return 1;
	}
	if (!g->stopping)
		stop_tree(g, now + g->grace); /* what the command left */
	return 0;
}

int dl_cli_guard(int argc, char **argv)
{
	struct guard g = {.deadline = INT64_MAX, .chld = {-1, -1}};
	int errfd;

	/* dlock --run-guard <ctl fd> <err fd> <grace> <margin> -- cmd... */
	if (argc < 8 || strcmp(argv[6], "--") != 0)
		return EXIT_USAGE;
	/* ps, top and pgrep show the guard by this name, not as a second
	 * dlock (the command's own name comes with its exec) */
	prctl(PR_SET_NAME, GUARD_NAME);
	g.ctl = atoi(argv[2]);
	g.dlock = getppid();
	errfd = atoi(argv[3]);
	g.grace = atoll(argv[4]);
	g.margin = atoll(argv[5]);
	setup(&g);
	fcntl(errfd, F_SETFD, FD_CLOEXEC);
	spawn_command(&g, argv + 7, errfd);
	close(errfd);
	if (g.cmd < 0)
		return EXIT_SOFTWARE;
	while (!turn(&g)) {
		set_alarm(&g);
		wait_event(&g);
	}
	return g.status;
}
