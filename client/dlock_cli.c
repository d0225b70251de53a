/*
 * dlock_cli.c -- dlock(1), the command-line client of dlockd, on libdlock.
 *
 * One process per invocation: parse the command line (options may come
 * anywhere before a `run` command's own words), connect with libdlock, do
 * one thing, exit with a code from the table below. Durations are read by
 * the protocol's codec (dl_parse_duration, dl_parse_wait), so "250", "250ms",
 * "30s", "5m" and "inf" mean on the command line what they mean on the wire.
 *
 * `dlock run` is the part with invariants. It holds a lease while a command
 * runs in a process group of its own, and promises: the command is never
 * running once its lease could have passed to someone else. libdlock
 * renews the lease and, when it can no longer confirm it, calls on_lost
 * `lost_guard` ms before the local deadline (dlock_lease_deadline); we set
 * lost_guard = grace + KILL_MARGIN, so there is room for SIGTERM, the grace
 * period, then SIGKILL at deadline - KILL_MARGIN. The main loop also checks
 * the deadline itself (a little after the guard), so a late callback cannot
 * break the promise. A lost lease is never released: the server dropped it,
 * or did not confirm it and expires it within guard ms anyway.
 *
 * `dlock unlock` and `dlock refresh` act on a token that another process
 * got; libdlock has no call for that, so they speak the protocol through
 * the codec themselves (see "unlock, refresh" below).
 *
 * Threads and signals: on_lost runs on libdlock's thread and signal
 * handlers run anywhere; both only set a flag and write one byte to a
 * non-blocking self-pipe. Everything else -- waitpid, killpg, messages --
 * happens in the main loop, which polls that pipe. The signals dlock
 * handles are blocked while libdlock starts its thread, so they are always
 * delivered to the main thread. Between fork and exec the child calls only
 * async-signal-safe functions: the environment, the candidate paths of the
 * program and the shell fallback are all built before fork().
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/dlock.h"
#include "proto/proto.h"

#ifndef DL_VERSION
#define DL_VERSION DLOCK_VERSION
#endif

/* ---- exit codes (dlock(1), EXIT STATUS; values from sysexits.h) ---------- */

enum {
	EXIT_OK = 0,
	EXIT_REFUSED = 1,	/* the server said no: NOT_HOLDER, STALE */
	EXIT_USAGE = 64,	/* EX_USAGE: bad command line */
	EXIT_UNAVAILABLE = 69,	/* EX_UNAVAILABLE: cannot reach the server, or
				   its persistence is down */
	EXIT_SOFTWARE = 70,	/* EX_SOFTWARE: anything else */
	EXIT_TEMPFAIL = 75,	/* EX_TEMPFAIL: lock busy, wait timed out */
	EXIT_LOST = 76,		/* run: the lease was lost, command stopped */
	EXIT_NOPERM = 77,	/* EX_NOPERM: AUTH failed or missing */
	EXIT_CANNOT_EXEC = 126, /* run: the command is not executable */
	EXIT_NOT_FOUND = 127,	/* run: the command was not found */
	EXIT_SIGNAL_BASE = 128, /* run: command killed by signal N: 128+N */
};

/* ---- limits and defaults ------------------------------------------------- */

/* Lease of run/lock/trylock when --ttl is not given. */
#define DEFAULT_TTL_MS 30000
/* run: longest default grace between SIGTERM and SIGKILL; the default is
 * min(this, ttl / 4). */
#define DEFAULT_GRACE_MAX_MS 5000
/* run: SIGKILL goes out this long before the lease's local deadline, for
 * the kernel to end the process group and for our own scheduling delays;
 * at most ttl / 10 for very short leases. */
#define KILL_MARGIN_MS 200
/* run: how often to look whether a killed process group is gone, and for
 * how long after SIGKILL (a process in uninterruptible sleep dies only when
 * it wakes up; dlock then warns and exits without it). */
#define GROUP_POLL_MS	   10
#define GROUP_KILL_WAIT_MS 1000
/* Longest password read from --password-file (the protocol's line limit
 * bounds it anyway). */
#define PASSWORD_MAX DL_LINE_MAX
/* The search path when the environment has none (as execvp(3)). */
#define PATH_DEFAULT "/usr/local/bin:/usr/bin:/bin"

/* ---- the command line ---------------------------------------------------- */

enum opt_id {
	OPT_HOST,
	OPT_PORT,
	OPT_SOCKET,
	OPT_PASSWORD,
	OPT_PASSWORD_FILE,
	OPT_OWNER,
	OPT_TIMEOUT,
	OPT_TTL,
	OPT_WAIT,
	OPT_GRACE,
	OPT_RAW,
	OPT_HELP,
	OPT_VERSION,
	OPT_COUNT_
};

#define OPTB(o) (1u << (o))
/* Accepted by every command. */
#define CONN_OPTS                                                              \
	(OPTB(OPT_HOST) | OPTB(OPT_PORT) | OPTB(OPT_SOCKET) |                  \
	 OPTB(OPT_PASSWORD) | OPTB(OPT_PASSWORD_FILE) | OPTB(OPT_OWNER) |      \
	 OPTB(OPT_TIMEOUT) | OPTB(OPT_HELP) | OPTB(OPT_VERSION))

static const struct {
	const char *name;
	int has_arg;
} options[OPT_COUNT_] = {
	[OPT_HOST] = {"host", 1},
	[OPT_PORT] = {"port", 1},
	[OPT_SOCKET] = {"socket", 1},
	[OPT_PASSWORD] = {"password", 1},
	[OPT_PASSWORD_FILE] = {"password-file", 1},
	[OPT_OWNER] = {"owner", 1},
	[OPT_TIMEOUT] = {"timeout", 1},
	[OPT_TTL] = {"ttl", 1},
	[OPT_WAIT] = {"wait", 1},
	[OPT_GRACE] = {"grace", 1},
	[OPT_RAW] = {"raw", 0},
	[OPT_HELP] = {"help", 0},
	[OPT_VERSION] = {"version", 0},
};

struct cli;

struct subcmd {
	const char *name;
	int (*fn)(struct cli *cl);
	int npos;	   /* positional words after the command name */
	unsigned opts;	   /* options beyond CONN_OPTS */
	const char *usage; /* after "dlock " */
	const char *help;  /* what it does, its options, its exit codes */
};

struct cli {
	const struct subcmd *sub;
	const char *pos[2]; /* positional words (borrowed from argv) */
	int npos;
	char **command;	  /* run: the command and its arguments */
	unsigned seen;	  /* OPTB() of the options given */
	const char *host; /* borrowed from argv or the environment */
	int port;
	const char *socket; /* unix socket path, NULL for TCP */
	char *password;	    /* owned; NULL for none */
	const char *owner;  /* NULL: libdlock picks a random one */
	int timeout_ms;	    /* 0: libdlock's defaults */
	uint64_t ttl_ms;
	uint64_t wait_ms; /* DL_WAIT_INF for inf */
	uint64_t grace_ms;
	int raw;
};

/* ---- messages ------------------------------------------------------------ */

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void msg(const char *fmt, ...)
{
	va_list ap;

	fputs("dlock: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* The exit code for a libdlock error. */
static int exit_for(int err)
{
	switch (err) {
	case DLOCK_OK:
		return EXIT_OK;
	case DLOCK_EBUSY:
	case DLOCK_ELIMIT:
		return EXIT_TEMPFAIL;
	case DLOCK_ENOTHOLDER:
	case DLOCK_ESTALE:
		return EXIT_REFUSED;
	case DLOCK_ELOST:
		return EXIT_LOST;
	case DLOCK_ETIMEDOUT:
	case DLOCK_ECONNECT:
	case DLOCK_ECLOSED:
	case DLOCK_EUNAVAILABLE:
		return EXIT_UNAVAILABLE;
	case DLOCK_EAUTH:
		return EXIT_NOPERM;
	case DLOCK_EINVAL:
		return EXIT_USAGE;
	default:
		return EXIT_SOFTWARE;
	}
}

/* Report a libdlock error about `what` (with the server's words, if any)
 * and return its exit code. */
static int fail(int err, const char *what)
{
	const char *server = dlock_last_error();

	if (server && server[0])
		msg("%s: %s (%s)", what, dlock_strerror(err), server);
	else
		msg("%s: %s", what, dlock_strerror(err));
	return exit_for(err);
}

/* ---- help ---------------------------------------------------------------- */

static const char conn_help[] =
	"Connection options (every command):\n"
	"  --host H            server host (DLOCK_HOST; 127.0.0.1)\n"
	"  --port P            server TCP port (DLOCK_PORT; 7420)\n"
	"  --socket PATH       unix socket instead of TCP (DLOCK_SOCKET)\n"
	"  --password P        password (DLOCK_PASSWORD); visible in ps(1):\n"
	"  --password-file F   prefer this, the first line of F\n"
	"  --owner ID          owner id (DLOCK_OWNER; default: random, new\n"
	"                      for each invocation)\n"
	"  --timeout D         connect and request timeout (5s)\n"
	"Durations: a bare number is milliseconds; ms, s, m suffixes\n"
	"(250, 250ms, 30s, 5m); waits also take inf.\n";

static const char exit_help[] =
	"Exit status:\n"
	"  0    done (run: the command's own status, 128+N if killed by\n"
	"       signal N)\n"
	"  1    refused: not the holder (unlock, refresh), stale (check)\n"
	"  64   usage error\n"
	"  69   cannot reach the server, or it cannot persist (UNAVAILABLE)\n"
	"  70   internal or unexpected error\n"
	"  75   could not get the lock: busy with --wait 0, the wait timed\n"
	"       out, a server limit was reached, or (run) this owner id\n"
	"       holds it in another process\n"
	"  76   run: the lease was lost and the command was stopped\n"
	"  77   authentication failed or required\n"
	"  126  run: the command could not be executed\n"
	"  127  run: the command was not found\n";

static int cmd_run(struct cli *cl);
static int cmd_lock(struct cli *cl);
static int cmd_unlock(struct cli *cl);
static int cmd_refresh(struct cli *cl);
static int cmd_check(struct cli *cl);
static int cmd_status(struct cli *cl);
static int cmd_stats(struct cli *cl);
static int cmd_ping(struct cli *cl);

static const struct subcmd subcmds[] = {
	{"run", cmd_run, 1, OPTB(OPT_TTL) | OPTB(OPT_WAIT) | OPTB(OPT_GRACE),
	 "run <name> [--ttl D] [--wait D|inf] [--grace D] [--] <command> "
	 "[args...]",
	 "Take the lock (waiting up to --wait, default inf), run the command\n"
	 "in a process group of its own with DLOCK_NAME, DLOCK_TOKEN (the\n"
	 "fencing token) and DLOCK_OWNER in its environment, renew the lease\n"
	 "(--ttl, default 30s) while it runs, release the lock when it exits\n"
	 "and exit with its status. Signals TERM, INT, HUP, QUIT, USR1, USR2\n"
	 "and TSTP are passed on to the command. If the lease is lost, the\n"
	 "command gets SIGTERM, then SIGKILL --grace later (default: the\n"
	 "smaller of 5s and ttl/4), always before the lease could pass to\n"
	 "another holder; dlock then exits 76.\n"},
	{"lock", cmd_lock, 1, OPTB(OPT_TTL) | OPTB(OPT_WAIT),
	 "lock <name> [--ttl D] [--wait D|inf]",
	 "Take the lock (waiting up to --wait, default inf), print its\n"
	 "fencing token and exit. The lease is NOT renewed: it ends when its\n"
	 "TTL (--ttl, default 30s) runs out, unless `dlock unlock` or\n"
	 "`dlock refresh` with the same --owner come first. Without --owner,\n"
	 "the random owner id is printed on stderr.\n"},
	{"trylock", cmd_lock, 1, OPTB(OPT_TTL), "trylock <name> [--ttl D]",
	 "As `dlock lock --wait 0`: take the lock if it is free, else exit\n"
	 "75 at once.\n"},
	{"unlock", cmd_unlock, 2, 0, "unlock <name> <token>",
	 "Release one hold of the lease <token> of <name>. Only its owner\n"
	 "may: give the same --owner (or DLOCK_OWNER) as the `dlock lock`\n"
	 "that took it. Exit 1 if this owner holds no such lease (wrong\n"
	 "owner or token, or it expired). A reentrant lease still held\n"
	 "after this is reported on stderr.\n"},
	{"refresh", cmd_refresh, 2, OPTB(OPT_TTL),
	 "refresh <name> <token> [--ttl D]",
	 "Extend the lease <token> of <name> to now + --ttl (default: its\n"
	 "last TTL) and print the new TTL in ms. Same --owner as for unlock;\n"
	 "exit 1 if this owner holds no such lease.\n"},
	{"check", cmd_check, 2, 0, "check <name> <token>",
	 "Does <token> hold <name> now? Exit 0 and print the lease's\n"
	 "remaining ms if it does; exit 1 and print the current holder's\n"
	 "token (0 if the lock is free) if it does not. Any owner may ask.\n"},
	{"status", cmd_status, 1, 0, "status <name>",
	 "Print the lock's state, one key=value per line: name, state\n"
	 "(free or held), token, ttl_ms (remaining), count (reentrant\n"
	 "holds), owner (- when free), waiters.\n"},
	{"stats", cmd_stats, 0, OPTB(OPT_RAW), "stats [--raw]",
	 "Print the server's counters for people, grouped and aligned. With\n"
	 "--raw, print the server's `key value` lines as they come, for\n"
	 "scripts.\n"},
	{"ping", cmd_ping, 0, 0, "ping",
	 "Send PING and print the round trip time in milliseconds.\n"},
};

#define NSUBCMDS (sizeof(subcmds) / sizeof(subcmds[0]))

static void usage_all(FILE *f)
{
	size_t i;

	fputs("Usage: dlock [options] <command> [args...]\n"
	      "\n"
	      "The command-line client of the dlockd lock server.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (i = 0; i < NSUBCMDS; i++)
		fprintf(f, "  dlock %s\n", subcmds[i].usage);
	fputs("  dlock help [<command>]   dlock --version\n\n", f);
	fputs(conn_help, f);
	fputs("\n", f);
	fputs(exit_help, f);
	fputs("\nSee dlock(1); `dlock <command> --help` for one command.\n", f);
}

static void usage_sub(const struct subcmd *s, FILE *f)
{
	fprintf(f, "Usage: dlock %s\n\n%s\n", s->usage, s->help);
	fputs(conn_help, f);
	fputs("\n", f);
	fputs(exit_help, f);
}

/* A usage error: one line of why, the command's synopsis, exit 64. */
static int usage_error(const struct cli *cl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int usage_error(const struct cli *cl, const char *fmt, ...)
{
	va_list ap;

	fputs("dlock: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (cl->sub)
		fprintf(stderr, "Usage: dlock %s\n", cl->sub->usage);
	else
		fputs("Usage: dlock [options] <command> [args...]\n", stderr);
	fputs("Try 'dlock --help' for more information.\n", stderr);
	return EXIT_USAGE;
}

static const struct subcmd *find_sub(const char *name)
{
	size_t i;

	for (i = 0; i < NSUBCMDS; i++)
		if (strcmp(subcmds[i].name, name) == 0)
			return &subcmds[i];
	return NULL;
}

/* ---- values -------------------------------------------------------------- */

static int parse_dur(struct cli *cl, const char *opt, const char *v,
		     uint64_t *ms)
{
	if (dl_parse_duration(v, strlen(v), ms) != 0)
		return usage_error(cl,
				   "--%s: bad duration '%s' (a number of ms, "
				   "or with ms, s or m)",
				   opt, v);
	return 0;
}

static int parse_port(struct cli *cl, const char *from, const char *v)
{
	uint64_t p;

	if (dl_parse_u64(v, strlen(v), &p) != 0 || p < 1 || p > 65535)
		return usage_error(cl, "%s: bad port '%s'", from, v);
	cl->port = (int)p;
	return 0;
}

static int read_password_file(struct cli *cl, const char *path)
{
	char buf[PASSWORD_MAX + 2];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return usage_error(cl, "--password-file %s: %s", path,
				   strerror(errno));
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	n = strcspn(buf, "\r\n");
	buf[n] = '\0';
	if (n == 0 || n > PASSWORD_MAX)
		return usage_error(cl, "--password-file %s: %s", path,
				   n ? "password too long"
				     : "no password on the first line");
	free(cl->password);
	cl->password = strdup(buf);
	memset(buf, 0, sizeof(buf));
	if (!cl->password) {
		msg("out of memory");
		return EXIT_SOFTWARE;
	}
	return 0;
}

static int set_option(struct cli *cl, enum opt_id id, char *v)
{
	uint64_t ms;
	int rc;

	cl->seen |= OPTB(id);
	switch (id) {
	case OPT_HOST:
		cl->host = v;
		return 0;
	case OPT_PORT:
		return parse_port(cl, "--port", v);
	case OPT_SOCKET:
		cl->socket = v;
		return 0;
	case OPT_PASSWORD:
		free(cl->password);
		cl->password = strdup(v);
		if (!cl->password) {
			msg("out of memory");
			return EXIT_SOFTWARE;
		}
		/* Out of ps(1) from now on (it was visible until here). */
		memset(v, '*', strlen(v));
		return 0;
	case OPT_PASSWORD_FILE:
		return read_password_file(cl, v);
	case OPT_OWNER:
		if (dl_check_owner(v, strlen(v)) != 0)
			return usage_error(cl,
					   "--owner: bad owner id '%s' (1-%d "
					   "printable bytes, no space or '=')",
					   v, DL_OWNER_MAX);
		cl->owner = v;
		return 0;
	case OPT_TIMEOUT:
		if ((rc = parse_dur(cl, "timeout", v, &ms)) != 0)
			return rc;
		if (ms == 0 || ms > INT_MAX)
			return usage_error(cl, "--timeout: out of range");
		cl->timeout_ms = (int)ms;
		return 0;
	case OPT_TTL:
		if ((rc = parse_dur(cl, "ttl", v, &cl->ttl_ms)) != 0)
			return rc;
		if (cl->ttl_ms == 0)
			return usage_error(cl, "--ttl must be positive");
		return 0;
	case OPT_WAIT:
		if (dl_parse_wait(v, strlen(v), &cl->wait_ms) != 0)
			return usage_error(cl,
					   "--wait: bad wait '%s' (a "
					   "duration or inf)",
					   v);
		return 0;
	case OPT_GRACE:
		return parse_dur(cl, "grace", v, &cl->grace_ms);
	case OPT_RAW:
		cl->raw = 1;
		return 0;
	default:
		return 0;
	}
}

/* One option word at argv[*i] (and its value, maybe argv[*i + 1]). */
static int parse_option(struct cli *cl, int argc, char **argv, int *i)
{
	char *a = argv[*i], *eq, *v = NULL;
	size_t len;
	int id;

	if (strcmp(a, "-h") == 0)
		return set_option(cl, OPT_HELP, NULL);
	if (strcmp(a, "-v") == 0)
		return set_option(cl, OPT_VERSION, NULL);
	if (a[1] != '-')
		return usage_error(cl, "unknown option '%s'", a);
	a += 2;
	eq = strchr(a, '=');
	len = eq ? (size_t)(eq - a) : strlen(a);
	for (id = 0; id < OPT_COUNT_; id++)
		if (strlen(options[id].name) == len &&
		    memcmp(options[id].name, a, len) == 0)
			break;
	if (id == OPT_COUNT_)
		return usage_error(cl, "unknown option '%s'", argv[*i]);
	if (options[id].has_arg) {
		if (eq)
			v = eq + 1;
		else if (*i + 1 < argc)
			v = argv[++*i];
		else
			return usage_error(cl, "option --%s needs a value",
					   options[id].name);
	} else if (eq) {
		return usage_error(cl, "option --%s takes no value",
				   options[id].name);
	}
	return set_option(cl, (enum opt_id)id, v);
}

/* Defaults from the environment for what the command line left out. */
static int apply_env(struct cli *cl)
{
	const char *v;
	int rc;

	/* A host or port given on the command line means TCP, even if
	 * DLOCK_SOCKET is set; --socket always wins. */
	if (!(cl->seen & OPTB(OPT_SOCKET)) &&
	    !(cl->seen & (OPTB(OPT_HOST) | OPTB(OPT_PORT))) &&
	    (v = getenv("DLOCK_SOCKET")) && v[0])
		cl->socket = v;
	if (!(cl->seen & OPTB(OPT_HOST)))
		cl->host = (v = getenv("DLOCK_HOST")) && v[0] ? v : "127.0.0.1";
	if (!(cl->seen & OPTB(OPT_PORT))) {
		cl->port = DL_DEFAULT_PORT;
		if ((v = getenv("DLOCK_PORT")) && v[0] &&
		    (rc = parse_port(cl, "DLOCK_PORT", v)) != 0)
			return rc;
	}
	if (!(cl->seen & (OPTB(OPT_PASSWORD) | OPTB(OPT_PASSWORD_FILE))) &&
	    (v = getenv("DLOCK_PASSWORD")) && v[0]) {
		cl->password = strdup(v);
		if (!cl->password) {
			msg("out of memory");
			return EXIT_SOFTWARE;
		}
	}
	if (!(cl->seen & OPTB(OPT_OWNER)) && (v = getenv("DLOCK_OWNER")) &&
	    v[0]) {
		if (dl_check_owner(v, strlen(v)) != 0)
			return usage_error(cl, "DLOCK_OWNER: bad owner id '%s'",
					   v);
		cl->owner = v;
	}
	return 0;
}

/* Returns 0 to go on, or an exit code (help and version are exit 0, with
 * *done set). */
static int parse_args(struct cli *cl, int argc, char **argv, int *done)
{
	int i, rc, only_pos = 0, run;
	unsigned bad;

	for (i = 1; i < argc; i++) {
		char *a = argv[i];
		int is_opt = !only_pos && a[0] == '-' && a[1] != '\0';

		run = cl->sub && cl->sub->fn == cmd_run;
		if (run && cl->npos == 1 && !is_opt) {
			/* the command starts here (after --, or at the
			 * first word that is not an option) */
			cl->command = &argv[i];
			break;
		}
		if (is_opt && strcmp(a, "--") == 0) {
			if (run && cl->npos == 1) {
				cl->command = &argv[i + 1];
				break;
			}
			only_pos = 1;
			continue;
		}
		if (is_opt) {
			if ((rc = parse_option(cl, argc, argv, &i)) != 0)
				return rc;
			continue;
		}
		if (!cl->sub) {
			if (strcmp(a, "help") == 0) {
				cl->seen |= OPTB(OPT_HELP);
				if (i + 1 < argc &&
				    !(cl->sub = find_sub(argv[i + 1])))
					return usage_error(cl,
							   "unknown command "
							   "'%s'",
							   argv[i + 1]);
				break;
			}
			if (!(cl->sub = find_sub(a)))
				return usage_error(cl, "unknown command '%s'",
						   a);
			continue;
		}
		if (cl->npos >= cl->sub->npos)
			return usage_error(cl, "unexpected argument '%s'", a);
		cl->pos[cl->npos++] = a;
	}

	if (cl->seen & OPTB(OPT_HELP)) {
		if (cl->sub)
			usage_sub(cl->sub, stdout);
		else
			usage_all(stdout);
		*done = 1;
		return 0;
	}
	if (cl->seen & OPTB(OPT_VERSION)) {
		printf("dlock %s (libdlock %s)\n", DL_VERSION, DLOCK_VERSION);
		*done = 1;
		return 0;
	}
	if (!cl->sub)
		return usage_error(cl, "no command given");
	bad = cl->seen & ~(CONN_OPTS | cl->sub->opts);
	for (i = 0; i < OPT_COUNT_; i++)
		if (bad & OPTB(i))
			return usage_error(cl,
					   "option --%s does not apply to "
					   "'%s'",
					   options[i].name, cl->sub->name);
	if (cl->npos < cl->sub->npos)
		return usage_error(cl, "missing %s",
				   cl->npos == 0 ? "lock name" : "token");
	if (cl->sub->fn == cmd_run && (!cl->command || !cl->command[0]))
		return usage_error(cl, "missing the command to run");
	if (cl->sub->npos > 0 &&
	    dl_check_name(cl->pos[0], strlen(cl->pos[0])) != 0)
		return usage_error(cl,
				   "bad lock name '%s' (1-%d printable bytes, "
				   "no space or '=')",
				   cl->pos[0], DL_NAME_MAX);
	return apply_env(cl);
}

static int parse_token(struct cli *cl, uint64_t *token)
{
	if (dl_parse_u64(cl->pos[1], strlen(cl->pos[1]), token) != 0)
		return usage_error(cl, "bad token '%s' (a decimal number)",
				   cl->pos[1]);
	return 0;
}

/* ---- connecting ---------------------------------------------------------- */

static const char *where(const struct cli *cl)
{
	static char buf[300];

	if (cl->socket)
		return cl->socket;
	snprintf(buf, sizeof(buf), "%s%s%s:%d",
		 strchr(cl->host, ':') ? "[" : "", cl->host,
		 strchr(cl->host, ':') ? "]" : "", cl->port);
	return buf;
}

static void conn_options(const struct cli *cl, struct dlock_options *o)
{
	dlock_options_init(o);
	o->host = cl->host;
	o->port = cl->port;
	o->unix_path = cl->socket;
	o->password = cl->password;
	o->owner = cl->owner;
	o->reconnect = 0;
	o->renew = 0;
	if (cl->timeout_ms > 0) {
		o->connect_timeout_ms = cl->timeout_ms;
		o->request_timeout_ms = cl->timeout_ms;
	}
}

static int connect_or_fail(const struct cli *cl, struct dlock_options *o,
			   dlock_client **c)
{
	char what[400];
	int rc = dlock_connect(o, c);

	if (rc == 0)
		return 0;
	snprintf(what, sizeof(what), "cannot connect to %s", where(cl));
	return fail(rc, what);
}

/* One-shot commands: connect without renewal or reconnects. */
static int simple_connect(const struct cli *cl, dlock_client **c)
{
	struct dlock_options o;

	conn_options(cl, &o);
	return connect_or_fail(cl, &o, c);
}

/* Take `name`; report why not. wait_ms is DL_WAIT_INF or a duration. */
static int acquire(dlock_client *c, const char *name, uint64_t ttl_ms,
		   uint64_t wait_ms, dlock_lease **l)
{
	int64_t t0 = dlock_now_ms();
	int64_t wait =
		wait_ms == DL_WAIT_INF ? DLOCK_WAIT_FOREVER : (int64_t)wait_ms;
	char what[300];
	int rc;

	if (wait == 0)
		rc = dlock_trylock(c, name, (int64_t)ttl_ms, l);
	else
		rc = dlock_lock(c, name, (int64_t)ttl_ms, wait, l);
	if (rc == 0)
		return 0;
	if (rc == DLOCK_EBUSY) {
		msg("%s is held by another owner", name);
		return EXIT_TEMPFAIL;
	}
	/* DLOCK_ETIMEDOUT is the wait running out, or no reply in time:
	 * only the first when the wait was finite and has passed. */
	if (rc == DLOCK_ETIMEDOUT && wait > 0 && dlock_now_ms() - t0 >= wait) {
		msg("timed out waiting for %s", name);
		return EXIT_TEMPFAIL;
	}
	snprintf(what, sizeof(what), "cannot lock %s", name);
	return fail(rc, what);
}

/* ---- lock, trylock ------------------------------------------------------- */

static int cmd_lock(struct cli *cl)
{
	const char *name = cl->pos[0];
	struct dlock_options o;
	dlock_client *c;
	dlock_lease *l;
	uint64_t wait = strcmp(cl->sub->name, "trylock") == 0 ? 0 : cl->wait_ms;
	int rc;

	conn_options(cl, &o);
	o.reconnect = wait != 0; /* a waiter keeps its place across drops */
	if ((rc = connect_or_fail(cl, &o, &c)) != 0)
		return rc;
	if ((rc = acquire(c, name, cl->ttl_ms, wait, &l)) == 0) {
		printf("%" PRIu64 "\n", dlock_lease_token(l));
		if (!cl->owner)
			msg("%s is held by owner %s for %" PRId64
			    " ms (not renewed); release it with: dlock "
			    "unlock --owner %s %s %" PRIu64,
			    name, dlock_owner(c), dlock_lease_ttl(l),
			    dlock_owner(c), name, dlock_lease_token(l));
		if (fflush(stdout) != 0) {
			msg("writing the token: %s", strerror(errno));
			rc = EXIT_SOFTWARE;
		}
	}
	dlock_close(c); /* leaves the lease held: it expires at the server */
	return rc;
}

/* ---- unlock, refresh: the protocol without libdlock ---------------------- */

/*
 * libdlock releases and refreshes only through lease handles, and only
 * dlock_lock() makes those: it has no call that acts on a (name, token)
 * pair that another process obtained. Until it has one, these two commands
 * speak the protocol themselves, with the same codec (proto/proto.h) and
 * the same options: connect, AUTH, HELLO owner=, the request.
 */

struct raw {
	int fd;
	int timeout_ms;
	int64_t deadline; /* of the current exchange, dlock_now_ms() */
	struct dl_linebuf lb;
	char err[DL_REPLY_MAX]; /* the last NO/ERR line */
};

static int raw_wait(struct raw *r, short events)
{
	struct pollfd p = {.fd = r->fd, .events = events};
	int64_t left;
	int n;

	for (;;) {
		left = r->deadline - dlock_now_ms();
		if (left <= 0)
			return DLOCK_ETIMEDOUT;
		n = poll(&p, 1, (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return DLOCK_ECLOSED;
	}
}

static int raw_connect_fd(struct raw *r, const struct sockaddr *sa,
			  socklen_t len, int family)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int err = 0;
	socklen_t elen = sizeof(err);

	if (fd < 0)
		return -1;
	r->fd = fd;
	if (connect(fd, sa, len) == 0)
		return 0;
	if (errno == EINPROGRESS && raw_wait(r, POLLOUT) == 0 &&
	    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0)
		return 0;
	close(fd);
	r->fd = -1;
	return -1;
}

static int raw_open(const struct cli *cl, struct raw *r)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	char port[16];

	r->fd = -1;
	r->timeout_ms = cl->timeout_ms > 0 ? cl->timeout_ms : 5000;
	r->deadline = dlock_now_ms() + r->timeout_ms;
	r->err[0] = '\0';
	dl_linebuf_init(&r->lb);
	if (cl->socket) {
		struct sockaddr_un sa_un = {.sun_family = AF_UNIX};

		if (strlen(cl->socket) >= sizeof(sa_un.sun_path))
			return DLOCK_EINVAL;
		strcpy(sa_un.sun_path, cl->socket);
		return raw_connect_fd(r, (struct sockaddr *)&sa_un,
				      sizeof(sa_un), AF_UNIX)
			       ? DLOCK_ECONNECT
			       : 0;
	}
	snprintf(port, sizeof(port), "%d", cl->port);
	if (getaddrinfo(cl->host, port, &hints, &res) != 0)
		return DLOCK_ECONNECT;
	for (ai = res; ai; ai = ai->ai_next)
		if (raw_connect_fd(r, ai->ai_addr, ai->ai_addrlen,
				   ai->ai_family) == 0)
			break;
	freeaddrinfo(res);
	return r->fd >= 0 ? 0 : DLOCK_ECONNECT;
}

/* Send one request line and read its reply (events are skipped). The
 * reply borrows from r->lb until the next call. */
static int raw_call(struct raw *r, const char *line, struct dl_reply *rep)
{
	size_t len = strlen(line), off = 0;
	char *l, *space;
	size_t n, avail;
	ssize_t k;
	int rc;

	r->deadline = dlock_now_ms() + r->timeout_ms;
	while (off < len) {
		k = send(r->fd, line + off, len - off, MSG_NOSIGNAL);
		if (k > 0) {
			off += (size_t)k;
			continue;
		}
		if (k < 0 && errno != EAGAIN && errno != EINTR)
			return DLOCK_ECLOSED;
		if ((rc = raw_wait(r, POLLOUT)) != 0)
			return rc;
	}
	for (;;) {
		switch (dl_linebuf_next(&r->lb, &l, &n)) {
		case DL_LB_LINE:
			if (n > 0 && l[0] == '*')
				continue;
			if (dl_parse_reply(l, n, rep) != 0)
				return DLOCK_EPROTO;
			if (rep->kind != DL_REPLY_OK)
				snprintf(r->err, sizeof(r->err), "%.*s", (int)n,
					 l);
			return 0;
		case DL_LB_TOOLONG:
		case DL_LB_OVERFLOW:
			return DLOCK_EPROTO;
		case DL_LB_NONE:
			break;
		}
		if ((rc = raw_wait(r, POLLIN)) != 0)
			return rc;
		space = dl_linebuf_space(&r->lb, &avail);
		k = recv(r->fd, space, avail, 0);
		if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
			return DLOCK_ECLOSED;
		if (k > 0)
			dl_linebuf_commit(&r->lb, (size_t)k);
	}
}

static int word_is(struct dl_str w, const char *s)
{
	return w.len == strlen(s) && memcmp(w.p, s, w.len) == 0;
}

/* A libdlock-style code for a reply that is not the expected OK. */
static int raw_refusal(const struct dl_reply *rep)
{
	if (rep->kind == DL_REPLY_NO)
		return word_is(rep->word, "AUTH_FAILED") ? DLOCK_EAUTH
							 : DLOCK_ENOTHOLDER;
	if (rep->kind != DL_REPLY_ERR)
		return DLOCK_EPROTO;
	if (word_is(rep->word, "NOAUTH"))
		return DLOCK_EAUTH;
	if (word_is(rep->word, "UNAVAILABLE"))
		return DLOCK_EUNAVAILABLE;
	if (word_is(rep->word, "BAD_ARG") || word_is(rep->word, "BAD_FORMAT"))
		return DLOCK_EINVAL;
	if (word_is(rep->word, "LIMIT"))
		return DLOCK_ELIMIT;
	return DLOCK_ESERVER;
}

/* Connect, AUTH, HELLO owner= (when owner is not NULL); then send `req`
 * (no line ending) and leave its reply in *rep. Reports failures; returns
 * 0 or an exit code. */
static int raw_request(const struct cli *cl, const char *owner, struct raw *r,
		       const char *req, struct dl_reply *rep)
{
	char line[DL_LINE_MAX + 3];
	int rc;

	if ((rc = raw_open(cl, r)) != 0) {
		msg("cannot connect to %s: %s", where(cl), dlock_strerror(rc));
		return exit_for(rc);
	}
	if (cl->password) {
		snprintf(line, sizeof(line), "AUTH %s\r\n", cl->password);
		rc = raw_call(r, line, rep);
		memset(line, 0, sizeof(line));
		if (rc == 0 &&
		    !(rep->kind == DL_REPLY_OK && word_is(rep->word, "AUTH")))
			rc = rep->kind == DL_REPLY_NO ? DLOCK_EAUTH
						      : raw_refusal(rep);
		if (rc != 0)
			goto failed;
	}
	if (owner) {
		snprintf(line, sizeof(line), "HELLO owner=%s\r\n", owner);
		if ((rc = raw_call(r, line, rep)) == 0 &&
		    !(rep->kind == DL_REPLY_OK && word_is(rep->word, "HELLO")))
			rc = raw_refusal(rep);
		if (rc != 0)
			goto failed;
	}
	snprintf(line, sizeof(line), "%s\r\n", req);
	if ((rc = raw_call(r, line, rep)) == 0)
		return 0;
failed:
	if (r->err[0])
		msg("%s: %s (%s)", where(cl), dlock_strerror(rc), r->err);
	else
		msg("%s: %s", where(cl), dlock_strerror(rc));
	return exit_for(rc);
}

static void raw_close(struct raw *r)
{
	if (r->fd >= 0) {
		(void)!send(r->fd, "QUIT\r\n", 6, MSG_NOSIGNAL);
		close(r->fd);
	}
}

static int raw_done(struct cli *cl, struct raw *r, const struct dl_reply *rep,
		    const char *verb)
{
	int err = raw_refusal(rep);

	if (err == DLOCK_ENOTHOLDER)
		msg("%s %s: not the holder: %s%s holds no lease %s of it "
		    "(wrong owner or token, or it expired)%s",
		    verb, cl->pos[0],
		    cl->owner ? "owner " : "a new random owner",
		    cl->owner ? cl->owner : "", cl->pos[1],
		    cl->owner ? "" : "; give the holder's --owner");
	else
		msg("%s %s: %s (%s)", verb, cl->pos[0], dlock_strerror(err),
		    r->err);
	raw_close(r);
	return exit_for(err);
}

static int cmd_unlock(struct cli *cl)
{
	char req[DL_LINE_MAX];
	struct dl_reply rep;
	struct raw r;
	uint64_t token, held;
	int rc;

	if ((rc = parse_token(cl, &token)) != 0)
		return rc;
	snprintf(req, sizeof(req), "UNLOCK %s %" PRIu64, cl->pos[0], token);
	if ((rc = raw_request(cl, cl->owner, &r, req, &rep)) != 0) {
		raw_close(&r);
		return rc;
	}
	if (rep.kind == DL_REPLY_OK && word_is(rep.word, "RELEASED")) {
		raw_close(&r);
		return EXIT_OK;
	}
	if (rep.kind == DL_REPLY_OK && word_is(rep.word, "HELD") &&
	    dl_reply_u64(&rep, 1, &held) == 0) {
		msg("%s is still held: %" PRIu64 " reentrant hold%s left",
		    cl->pos[0], held, held == 1 ? "" : "s");
		raw_close(&r);
		return EXIT_OK;
	}
	return raw_done(cl, &r, &rep, "unlock");
}

static int cmd_refresh(struct cli *cl)
{
	char req[DL_LINE_MAX];
	struct dl_reply rep;
	struct raw r;
	uint64_t token, ttl;
	int rc, n;

	if ((rc = parse_token(cl, &token)) != 0)
		return rc;
	n = snprintf(req, sizeof(req), "REFRESH %s %" PRIu64, cl->pos[0],
		     token);
	if (cl->seen & OPTB(OPT_TTL))
		snprintf(req + n, sizeof(req) - (size_t)n, " ttl=%" PRIu64,
			 cl->ttl_ms);
	if ((rc = raw_request(cl, cl->owner, &r, req, &rep)) != 0) {
		raw_close(&r);
		return rc;
	}
	if (rep.kind == DL_REPLY_OK && word_is(rep.word, "REFRESHED") &&
	    dl_reply_u64(&rep, 1, &ttl) == 0) {
		printf("%" PRIu64 "\n", ttl);
		raw_close(&r);
		return EXIT_OK;
	}
	return raw_done(cl, &r, &rep, "refresh");
}

/* ---- check, status, ping ------------------------------------------------- */

static int cmd_check(struct cli *cl)
{
	dlock_client *c;
	uint64_t token, current = 0;
	int64_t remaining = 0;
	int rc;

	if ((rc = parse_token(cl, &token)) != 0)
		return rc;
	if ((rc = simple_connect(cl, &c)) != 0)
		return rc;
	rc = dlock_check(c, cl->pos[0], token, &remaining, &current);
	if (rc == 0)
		printf("%" PRId64 "\n", remaining);
	else if (rc == DLOCK_ESTALE)
		printf("%" PRIu64 "\n", current);
	else
		rc = fail(rc, "check");
	dlock_close(c);
	return rc == DLOCK_ESTALE ? EXIT_REFUSED : rc;
}

static int cmd_status(struct cli *cl)
{
	struct dlock_status st;
	dlock_client *c;
	int rc;

	if ((rc = simple_connect(cl, &c)) != 0)
		return rc;
	rc = dlock_status(c, cl->pos[0], &st);
	if (rc == 0)
		printf("name=%s\nstate=%s\ntoken=%" PRIu64 "\nttl_ms=%" PRId64
		       "\ncount=%" PRIu32 "\nowner=%s\nwaiters=%" PRIu32 "\n",
		       cl->pos[0], st.held ? "held" : "free", st.token,
		       st.ttl_ms, st.count, st.owner[0] ? st.owner : "-",
		       st.waiters);
	else
		rc = fail(rc, "status");
	dlock_close(c);
	return rc;
}

static int cmd_ping(struct cli *cl)
{
	struct timespec t0, t1;
	dlock_client *c;
	int rc;

	if ((rc = simple_connect(cl, &c)) != 0)
		return rc;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = dlock_ping(c);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc == 0)
		printf("%.3f ms\n",
		       (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
			       (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	else
		rc = fail(rc, "ping");
	dlock_close(c);
	return rc;
}

/* ---- stats --------------------------------------------------------------- */

enum stat_fmt { SF_NUM, SF_MS, SF_US, SF_BOOL };

/* How the human view shows the keys it knows; others go under "Other". */
static const struct stat_row {
	const char *key;
	const char *section;
	const char *label;
	enum stat_fmt fmt;
} stat_rows[] = {
	{"uptime_ms", "Server", "uptime", SF_MS},
	{"commands", "Server", "commands", SF_NUM},
	{"connections", "Connections", "open", SF_NUM},
	{"connections_total", "Connections", "accepted", SF_NUM},
	{"connections_rejected", "Connections", "rejected (limit)", SF_NUM},
	{"output_overflows", "Connections", "closed (unread output)", SF_NUM},
	{"auth_failures", "Connections", "failed AUTH", SF_NUM},
	{"locks", "Locks", "locks", SF_NUM},
	{"leases", "Locks", "leases held", SF_NUM},
	{"waiters", "Locks", "waiting", SF_NUM},
	{"owners", "Locks", "owners", SF_NUM},
	{"grants", "Locks", "grants", SF_NUM},
	{"reentries", "Locks", "reentries", SF_NUM},
	{"releases", "Locks", "releases", SF_NUM},
	{"expiries", "Locks", "expiries", SF_NUM},
	{"timeouts", "Locks", "wait timeouts", SF_NUM},
	{"refreshes", "Locks", "refreshes", SF_NUM},
	{"cancels", "Locks", "cancels", SF_NUM},
	{"last_token", "Locks", "last token", SF_NUM},
	{"wait_ms_count", "Locks", "grants timed", SF_NUM},
	{"wait_ms_sum", "Locks", "total wait", SF_MS},
	{"hold_ms_count", "Locks", "leases ended", SF_NUM},
	{"hold_ms_sum", "Locks", "total hold", SF_MS},
	{"store_available", "Persistence", "available", SF_BOOL},
	{"store_batches", "Persistence", "batches", SF_NUM},
	{"store_writes", "Persistence", "writes", SF_NUM},
	{"store_round_trips", "Persistence", "round trips", SF_NUM},
	{"store_latency_us_avg", "Persistence", "latency avg", SF_US},
	{"store_latency_us_max", "Persistence", "latency max", SF_US},
	{"store_backlog", "Persistence", "backlog", SF_NUM},
	{"store_reconnects", "Persistence", "reconnects", SF_NUM},
	{"store_failures", "Persistence", "failures", SF_NUM},
};

#define NSTAT_ROWS (sizeof(stat_rows) / sizeof(stat_rows[0]))

static const char *const stat_sections[] = {
	"Server", "Connections", "Locks", "Persistence", "Errors", "Other",
};

struct stat_kv {
	char *key, *value;
	const char *section;
	char label[DL_STATS_LINE_MAX];
	enum stat_fmt fmt;
};

struct stat_list {
	struct stat_kv *kv;
	size_t n, cap;
	int raw;
	int nomem;
};

static void on_stat(const char *key, const char *value, void *arg)
{
	struct stat_list *sl = arg;
	struct stat_kv *kv, *grown;
	size_t i;

	if (sl->raw) {
		printf("%s %s\n", key, value);
		return;
	}
	if (sl->n == sl->cap) {
		sl->cap = sl->cap ? sl->cap * 2 : 64;
		grown = realloc(sl->kv, sl->cap * sizeof(*sl->kv));
		if (!grown) {
			sl->nomem = 1;
			sl->cap = sl->n;
			return;
		}
		sl->kv = grown;
	}
	kv = &sl->kv[sl->n];
	kv->key = strdup(key);
	kv->value = strdup(value);
	if (!kv->key || !kv->value) {
		free(kv->key);
		free(kv->value);
		sl->nomem = 1;
		return;
	}
	sl->n++;
	kv->section = "Other";
	kv->fmt = SF_NUM;
	snprintf(kv->label, sizeof(kv->label), "%s", key);
	for (i = 0; i < NSTAT_ROWS; i++)
		if (strcmp(stat_rows[i].key, key) == 0) {
			kv->section = stat_rows[i].section;
			kv->fmt = stat_rows[i].fmt;
			snprintf(kv->label, sizeof(kv->label), "%s",
				 stat_rows[i].label);
			return;
		}
	if (strncmp(key, "errors_", 7) == 0) {
		kv->section = "Errors";
		snprintf(kv->label, sizeof(kv->label), "%s", key + 7);
	}
}

/* The value as people read it; falls back to the server's text. */
static void stat_value(const struct stat_kv *kv, char *out, size_t cap)
{
	uint64_t v, s;

	if (dl_parse_u64(kv->value, strlen(kv->value), &v) != 0) {
		snprintf(out, cap, "%s", kv->value);
		return;
	}
	switch (kv->fmt) {
	case SF_BOOL:
		snprintf(out, cap, "%s", v ? "yes" : "no");
		break;
	case SF_US:
		snprintf(out, cap, "%.3f ms", (double)v / 1000.0);
		break;
	case SF_MS:
		s = v / 1000;
		if (s < 60)
			snprintf(out, cap, "%.1f s", (double)v / 1000.0);
		else if (s < 86400)
			snprintf(out, cap,
				 "%" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s",
				 s / 3600, s / 60 % 60, s % 60);
		else
			snprintf(out, cap,
				 "%" PRIu64 "d %" PRIu64 "h %02" PRIu64 "m",
				 s / 86400, s / 3600 % 24, s / 60 % 60);
		break;
	default:
		snprintf(out, cap, "%s", kv->value);
		break;
	}
}

static int cmd_stats(struct cli *cl)
{
	struct stat_list sl = {.raw = cl->raw};
	char value[64];
	dlock_client *c;
	size_t i, k, width = 0;
	int rc, any, sections = 0;

	if ((rc = simple_connect(cl, &c)) != 0)
		return rc;
	rc = dlock_stats(c, on_stat, &sl);
	dlock_close(c);
	if (rc != 0) {
		rc = fail(rc, "stats");
	} else if (sl.nomem) {
		msg("stats: out of memory");
		rc = EXIT_SOFTWARE;
	} else if (!sl.raw) {
		for (i = 0; i < sl.n; i++)
			if (strlen(sl.kv[i].label) > width)
				width = strlen(sl.kv[i].label);
		for (k = 0; k < sizeof(stat_sections) / sizeof(*stat_sections);
		     k++) {
			any = 0;
			for (i = 0; i < sl.n; i++) {
				if (strcmp(sl.kv[i].section,
					   stat_sections[k]) != 0)
					continue;
				if (!any++)
					printf("%s%s\n", sections++ ? "\n" : "",
					       stat_sections[k]);
				stat_value(&sl.kv[i], value, sizeof(value));
				printf("  %-*s  %s\n", (int)width,
				       sl.kv[i].label, value);
			}
		}
	}
	for (i = 0; i < sl.n; i++) {
		free(sl.kv[i].key);
		free(sl.kv[i].value);
	}
	free(sl.kv);
	return rc;
}

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
	msg("lease on %s lost (%s): stopping the command", r->cl->pos[0],
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
			msg("processes of the command survive SIGKILL");
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
 * shared): both commands would run at once. Refuse, and give back the hold
 * we got without libdlock: its dlock_unlock() of a client's last handle,
 * answered HELD, unlocks again (taking the extra hold for one of its own
 * lost in a reconnect) and would release the other process's lease too.
 * Returns 1 when refused. */
static int shared_owner(struct cli *cl, dlock_client *c, dlock_lease *l)
{
	char req[DL_LINE_MAX];
	struct dlock_status st;
	struct dl_reply rep;
	struct raw r;

	if (!cl->owner || dlock_status(c, cl->pos[0], &st) != 0 ||
	    st.count <= 1)
		return 0;
	msg("%s is already held by owner %s in another process (a shared "
	    "owner id); not running the command",
	    cl->pos[0], dlock_owner(c));
	snprintf(req, sizeof(req), "UNLOCK %s %" PRIu64, cl->pos[0],
		 dlock_lease_token(l));
	if (raw_request(cl, dlock_owner(c), &r, req, &rep) == 0 &&
	    rep.kind != DL_REPLY_OK)
		msg("giving back the extra hold: %s", r.err);
	raw_close(&r);
	return 1;
}

static int cmd_run(struct cli *cl)
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
		return usage_error(cl,
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
		msg("cannot set up the command: out of memory or files");
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
	conn_options(cl, &o);
	o.reconnect = 1;
	o.renew = 1;
	o.lost_guard_ms = (int)r.guard_ms;
	o.on_lost = on_lost;
	block_signals(&old);
	rc = connect_or_fail(cl, &o, &r.c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		goto out;
	if ((rc = acquire(r.c, cl->pos[0], cl->ttl_ms, cl->wait_ms, &r.l)))
		goto out;
	install_handlers();
	if (shared_owner(cl, r.c, r.l)) {
		r.l = NULL; /* given back; dlock_close() frees the handle */
		rc = EXIT_TEMPFAIL;
		goto out;
	}
	sp.envp = child_env(cl, dlock_owner(r.c), dlock_lease_token(r.l));
	if (!sp.envp || pipe2(errpipe, O_CLOEXEC)) {
		msg("cannot set up the command: out of memory or files");
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
		msg("fork: %s", strerror(err));
		rc = EXIT_SOFTWARE;
		goto out;
	}
	while ((n = read(errpipe[0], &err, sizeof(err))) < 0 && errno == EINTR)
		;
	close(errpipe[0]);
	if (n == (ssize_t)sizeof(err)) {
		msg("cannot run %s: %s", cl->command[0], strerror(err));
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
			msg("releasing %s: %s (the lease expires by itself)",
			    cl->pos[0], dlock_strerror(err));
	}
	dlock_close(r.c);
	free_strv(sp.paths);
	free_strv(sp.envp);
	free(sp.sh_argv);
	return rc;
}

/* ---- main ---------------------------------------------------------------- */

int main(int argc, char **argv)
{
	struct cli cl = {.ttl_ms = DEFAULT_TTL_MS, .wait_ms = DL_WAIT_INF};
	int done = 0, rc;

	rc = parse_args(&cl, argc, argv, &done);
	if (rc == 0 && !done)
		rc = cl.sub->fn(&cl);
	if (cl.password) {
		memset(cl.password, 0, strlen(cl.password));
		free(cl.password);
	}
	if (fflush(stdout) != 0 && rc == 0) {
		msg("write error: %s", strerror(errno));
		rc = EXIT_SOFTWARE;
	}
	return rc;
}
