/* SPDX-License-Identifier: MIT */
/*
 * dlock_cli.h -- the modules of dlock(1), the command-line client of dlockd.
 * Private to the command: nothing here is installed or part of libdlock.
 *
 *   dlock_cli.c   main(): the command line and the environment, help,
 *                 the command table;
 *   dlock_clicore.c  what every command shares: messages and exit
 *                 codes, connecting, retrying, acquiring, and what is
 *                 said of a busy lock;
 *   dlock_cmds.c  the one-step commands: lock, trylock, unlock, refresh,
 *                 check, status, stats, ping;
 *   dlock_watchcmd.c  `dlock watch` and `dlock wait-free`: observers of
 *                 locks (libdlock's watches);
 *   dlock_admin.c `dlock admin`: a partitioned service's map, and its
 *                 changes;
 *   dlock_run.c   `dlock run`: the command's process, signals, and what
 *                 happens when the lease is lost;
 *   dlock_guard.c the guard process between dlock and the command: the
 *                 command's tree never outlives the lease, even if dlock
 *                 dies;
 *   dlock_child.c the guard's argument vector and environment.
 *
 * A command is a function that takes the parsed command line and returns
 * the process's exit code (the table below, which dlock(1) documents). It
 * reaches the server only through libdlock (client/lib/dlock.h): the protocol
 * codec (proto/proto.h) reads command-line values -- durations, names,
 * tokens -- so that they mean what they mean on the wire, but the command
 * never formats a request or reads a reply itself.
 *
 * Ownership: main() owns the struct cli for the whole run; the commands
 * only read it. Its strings are borrowed from argv or the environment,
 * except `password`, which main() wipes and frees.
 */
#ifndef DL_CLIENT_DLOCK_CLI_H
#define DL_CLIENT_DLOCK_CLI_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "client/lib/dlock.h"
#include "proto/limits.h"

/* ---- exit codes (dlock(1), EXIT STATUS; values from sysexits.h) ---------- */

enum {
	EXIT_OK = 0,
	EXIT_REFUSED = 1,	/* the server said no: NOT_HOLDER, STALE */
	EXIT_USAGE = 64,	/* EX_USAGE: bad command line */
	EXIT_MISMATCH = 65,	/* EX_DATAERR: the lock is in use with another
				   --limit (LIMIT_MISMATCH) */
	EXIT_UNAVAILABLE = 69,	/* EX_UNAVAILABLE: cannot reach the server, or
				   its persistence is down, or a partitioned
				   service kept sending the name elsewhere
				   (MOVED) */
	EXIT_SOFTWARE = 70,	/* EX_SOFTWARE: anything else */
	EXIT_TEMPFAIL = 75,	/* EX_TEMPFAIL: lock busy, wait timed out */
	EXIT_LOST = 76,		/* run: the lease was lost, command stopped */
	EXIT_TIMEOUT = 124,	/* run: --timeout ran out, command stopped
				   (as timeout(1)) */
	EXIT_NOPERM = 77,	/* EX_NOPERM: AUTH failed or missing */
	EXIT_CLUSTER = 78,	/* EX_CONFIG: the servers listed are two
				   clusters (their HELLO names two ids), or
				   not DLOCK_CLUSTER's */
	EXIT_DEADLOCK = 79,	/* waiting would deadlock (NO DEADLOCK): past
				   sysexits' 64..78, so it means nothing
				   else */
	EXIT_CANNOT_EXEC = 126, /* run: the command is not executable */
	EXIT_NOT_FOUND = 127,	/* run: the command was not found */
	EXIT_SIGNAL_BASE = 128, /* run: command killed by signal N: 128+N */
};

/* Lease of run/lock/trylock when --ttl is not given. */
#define DEFAULT_TTL_MS 30000
/* --server-timeout when not given: how long a command waits for a server
 * that cannot serve now -- to connect (a take-over included), for each
 * reply, and through refusals (UNAVAILABLE). */
#define DEFAULT_TIMEOUT_MS 5000
/* The pause before a request refused with UNAVAILABLE is sent again: this,
 * doubled each time up to RETRY_MAX_MS. */
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 1000
/* The shortest lease `dlock run` takes: it is renewed every ttl/3 and the
 * command is stopped a grace before its end; below this the renewals
 * have no time to come back and the command would be stopped at once. */
#define RUN_TTL_MIN_MS 500

/* ---- the command line ---------------------------------------------------- */

enum opt_id {
	OPT_HOST,
	OPT_SERVERS,
	OPT_PORT,
	OPT_SOCKET,
	OPT_PASSWORD,
	OPT_PASSWORD_FILE,
	OPT_OWNER,
	OPT_TLS,
	OPT_TLS_CA,
	OPT_TLS_CERT,
	OPT_TLS_KEY,
	OPT_TLS_SERVER_NAME,
	OPT_TIMEOUT,
	OPT_SERVER_TIMEOUT,
	OPT_TTL,
	OPT_WAIT,
	OPT_GRACE,
	OPT_RAW,
	OPT_JSON,
	OPT_LIMIT,
	OPT_MAX,
	OPT_BY_WAITERS,
	OPT_CONFLICT_EXIT,
	OPT_SHARED,
	OPT_USER,
	OPT_SECRET_FILE,
	OPT_REASON,
	OPT_WARN,
	OPT_DELAY,
	OPT_OWNER_KEY_FILE,
	OPT_DESCRIBE,
	OPT_WAITED_SIGNAL,
	OPT_VALUE,
	OPT_ALL,
	OPT_HELP,
	OPT_VERSION,
	OPT_COUNT_
};

#define OPTB(o) (UINT64_C(1) << (o))

struct cli;

struct subcmd {
	const char *name;
	int (*fn)(struct cli *cl);
	int npos;	   /* positional words after the command name */
	uint64_t opts;	   /* options beyond the connection options */
	const char *usage; /* after "dlock " */
	const char *help;  /* what it does, its options, its exit codes */
	int pos_optional;  /* the positional words may be left out */
};

struct cli {
	const struct subcmd *sub;
	const char *pos[4]; /* positional words (borrowed from argv; admin
			       takes four) */
	int npos;
	/* lock, trylock: the names after the first (several locks at once,
	 * all or none), borrowed from argv */
	const char *more[DL_MULTI_MAX - 1];
	int nmore;
	char **command;	     /* run: the command and its arguments */
	uint64_t seen;	     /* OPTB() of the options given */
	const char *host;    /* borrowed from argv or the environment */
	const char *servers; /* "h1:p1,h2:p2": a cluster, NULL: host */
	int port;
	const char *socket; /* unix socket path, NULL for TCP */
	char *password;	    /* owned; NULL for none (with user: its secret) */
	const char *user;   /* a user of the server's users file, or NULL */
	const char *reason; /* break --reason */
	const char *owner;  /* NULL: libdlock picks a random one */
	const char *owner_key; /* the owner's key (owner_key_buf), or NULL */
	const char *owner_key_file; /* --owner-key-file, or NULL */
	char owner_key_buf[DL_OWNER_SECRET_MAX + 1];
	int describe; /* --describe: DLOCK_DESCRIBE_* (NAME by default) */
	const char *cluster; /* DLOCK_CLUSTER: the id to insist on, or NULL */
	char owner_buf[DL_OWNER_MAX + 1]; /* the id part of --owner */
	int tls;			  /* --tls: TLS with the system's CAs */
	const char *tls_ca, *tls_cert, *tls_key; /* PEM files, or NULL */
	const char *tls_server_name; /* the name the server's certificate
					must carry, NULL: the host's */
	int server_timeout_ms; /* --server-timeout; 0: DEFAULT_TIMEOUT_MS */
	int timeout_ms;	       /* run --timeout: the command's time limit,
				  0: none */
	uint64_t ttl_ms;
	uint64_t wait_ms;  /* DL_WAIT_INF for inf */
	uint64_t warn_ms;  /* lock --warn: 0 for none */
	uint64_t delay_ms; /* lock, run --delay: 0 for none */
	int waited_signal; /* run --signal-when-waited: the signal the
			      command gets when others wait (0: none) */
	const char *value; /* lock, run, elect --value: the lease's value
			      (NULL: none) */
	uint32_t waiters_at_start; /* run --signal-when-waited: what the
				      command is told in DLOCK_WAITERS */
	uint64_t grace_ms;
	int raw;
	int json;	   /* --json: one JSON object on stdout */
	uint64_t limit;	   /* lock, run --limit: the holders at once (0: a
			      lock, n: a semaphore) */
	uint64_t max;	   /* list --max: 0 for all */
	int shared;	   /* lock, run --shared */
	int by_waiters;	   /* list --by-waiters */
	int all;	   /* stats --all: every partition's daemon */
	int conflict_exit; /* -E: exit code when the lock is not taken, or
			      0 for EXIT_TEMPFAIL */
};

/* ---- dlock_cli.c: what the commands share -------------------------------- */

/* "dlock: <message>" on stderr. */
void dl_cli_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Report a libdlock error about `what` (with the server's words, if any)
 * and return its exit code. */
int dl_cli_fail(int err, const char *what);

/* A usage error: one line of why, the command's synopsis; returns
 * EXIT_USAGE. */
int dl_cli_usage_error(const struct cli *cl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* libdlock options for the command line: no renewal; reconnects on (a
 * drop is ridden through within --server-timeout; the caller changes what it
 * needs). The strings are borrowed from cl. */
void dl_cli_conn_options(const struct cli *cl, struct dlock_options *o);

/* The server the command line names: the --servers list, the socket, or
 * host:port (a static buffer). */
const char *dl_cli_where(const struct cli *cl);

/* Connect with o; report a failure. 0, or an exit code. On success *c is
 * the caller's, to dlock_close(). */
int dl_cli_connect(const struct cli *cl, const struct dlock_options *o,
		   dlock_client **c);

/* dl_cli_connect() with dl_cli_conn_options(): for one-shot commands. */
int dl_cli_simple_connect(const struct cli *cl, dlock_client **c);

/*
 * Riding through a take-over or a restart. Connecting is libdlock's
 * (dlock_connect follows a cluster's take-over within --server-timeout),
 * and so
 * is a dropped connection (reads and refreshes are sent again once it is
 * made again). What is left is the answer UNAVAILABLE: a new active whose
 * leadership or link to Redis is not confirmed yet, a daemon whose Redis
 * is down. Such a request was not executed: it is sent again after a
 * pause (RETRY_MIN_MS, doubling), until --server-timeout has passed since
 * the
 * first refusal -- for lock and run, or until the --wait ends if that is
 * later.
 */
struct dl_cli_retry {
	int64_t until;	  /* give up past it (dlock_now_ms()); 0: no refusal
			     yet */
	int64_t wait_end; /* lock: the end of its --wait, or 0 */
	int64_t pause;	  /* the next pause, ms */
	int patience_ms;  /* --server-timeout */
};

/* For a command of cl; wait_end: see above (0 for none). */
void dl_cli_retry_init(struct dl_cli_retry *r, const struct cli *cl,
		       int64_t wait_end);
/* 1 after the pause when the outcome `err` is worth another try and there
 * is time for it; 0 (the caller reports err). */
int dl_cli_retry(struct dl_cli_retry *r, int err);

/* Take `name` (wait_ms: a duration, or DL_WAIT_INF) in the mode and with
 * the limit of cl (--shared, --limit); report why not. 0, or an exit
 * code. On success *l is the caller's lease handle. */
int dl_cli_acquire(dlock_client *c, const struct cli *cl, const char *name,
		   uint64_t wait_ms, dlock_lease **l);

/* Take the n locks of `names` at once, all or none (dlock_acquire_all),
 * with cl's --ttl, waiting wait_ms; report why not. 0, or an exit code.
 * On success out[i] is the lease of names[i]. */
int dl_cli_acquire_all(dlock_client *c, const struct cli *cl,
		       const char *const names[], size_t n, uint64_t wait_ms,
		       dlock_lease *out[]);

/* ---- the commands (dlock_cmds.c, dlock_run.c): return an exit code ------- */

int dl_cli_lock(struct cli *cl); /* lock and trylock */
int dl_cli_unlock(struct cli *cl);
int dl_cli_refresh(struct cli *cl);
int dl_cli_check(struct cli *cl);
int dl_cli_status(struct cli *cl);
int dl_cli_leader(struct cli *cl);
int dl_cli_stats(struct cli *cl);
int dl_cli_list(struct cli *cl);
int dl_cli_break(struct cli *cl);

/* Who holds it (dlock_cmds.c). What dlock says of itself in HELLO:
 * "dlock <command> <name>", or for run the command it runs, never its
 * options (a secret may be one); static buffer. */
const char *dl_cli_desc_cmd(const struct cli *cl);
/* "<name> is held by deploy-7 on web3 (pid 4242, make deploy) for
 * 3m12s" when the server named the holder of a busy lock (dlock.h,
 * dlock_busy_holder), else "held by another owner"; no_permit: a
 * semaphore. */
void dl_cli_busy_msg(const char *name, int no_permit);

/* JSON output (dlock_cmds.c): a string with its quotes and escapes. */
void dl_cli_json_str(FILE *f, const char *s);
/* The same, or null for "" (a free lock's owner and mode). */
void dl_cli_json_str_or_null(FILE *f, const char *s);
int dl_cli_ping(struct cli *cl);
int dl_cli_run(struct cli *cl);
int dl_cli_watch(struct cli *cl);     /* dlock_watchcmd.c */
int dl_cli_wait_free(struct cli *cl); /* dlock_watchcmd.c */
int dl_cli_admin(struct cli *cl);     /* dlock_admin.c */

/* ---- dlock_guard.c: the guard of `dlock run` ---------------------------- */

/* `dlock --run-guard <ctl fd> <err fd> <grace ms> <margin ms> -- cmd...`,
 * run by dlock_run.c only; returns the command's exit status. ctl is a
 * stream socket with dlock, one line per message (times in dlock_now_ms):
 *   dlock to guard   "D <ms>"  the lease's local deadline is now <ms>
 *                    "S <ms>"  stop the command's tree; SIGKILL at <ms>
 *                    "M 0"     dlock stops itself with the command
 *                    "R 0"     dlock runs again
 *   guard to dlock   "T"       the command stopped
 *                    "C"       it was continued (or died stopped)
 *                    "L"       the deadline came unmoved: the guard stops
 *                              the tree (the lease is lost)
 * End of file: the other side is gone (dlock died: the guard stops the
 * tree). */
int dl_cli_guard(int argc, char **argv);
/* The guard's process name (PR_SET_NAME: /proc/<pid>/comm, what ps and
 * pgrep show; at most 15 bytes). */
#define GUARD_NAME "dlock-guard"
/* Send sig to every live descendant of root (root excluded; 0: none, only
 * count); returns how many there were (1 if /proc cannot be read). */
int dl_cli_tree_signal(pid_t root, int sig);

/* ---- dlock_child.c: what the guard is started with ---------------------- */

/* `dlock --run-guard <ctl> <err> <grace> <margin> -- <cl->command...>`:
 * the fds and times as text, then the command. NULL when out of memory;
 * the caller frees it with dl_cli_strv_free(). */
char **dl_cli_guard_argv(const struct cli *cl, int ctl, int err, int64_t grace,
			 int64_t margin);
/* environ without the DLOCK_* variables dlock sets, then those: the lock
 * (DLOCK_NAME, DLOCK_TOKEN, DLOCK_OWNER) and where to reach the server
 * (DLOCK_SERVERS, DLOCK_SOCKET, or DLOCK_HOST and DLOCK_PORT), so that
 * `dlock check "$DLOCK_NAME" "$DLOCK_TOKEN"` works in the command.
 * `owner` is "<id>=<key>": the command may act on the lease. No secret
 * is passed on (DLOCK_PASSWORD and DLOCK_SECRET are removed). NULL when out of
 * memory; freed with dl_cli_strv_free(). */
char **dl_cli_child_env(const struct cli *cl, const char *owner,
			uint64_t token);
/* Free a NULL-terminated vector of malloc'd strings, and the vector;
 * NULL is a no-op. */
void dl_cli_strv_free(char **v);

#endif /* DL_CLIENT_DLOCK_CLI_H */
