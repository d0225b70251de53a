/* SPDX-License-Identifier: MIT */
/*
 * dlock_cli.c -- dlock(1), the command-line client of dlockd, on libdlock:
 * main() and the command line (dlock_cli.h lists the modules; what every
 * command shares is dlock_clicore.c's).
 *
 * One process per invocation: parse the command line (options may come
 * anywhere before a `run` command's own words), fill in what it left out
 * from the environment, hand the result to one command (dlock_cmds.c,
 * dlock_run.c), and exit with the code the command returns. Durations are
 * read by the protocol's codec (dl_parse_duration, dl_parse_wait), so
 * "250ms", "30s", "5m", "1h" and "inf" mean on the command line what they
 * mean on the wire; a bare number (ms on the wire) is refused here, where
 * people would read it as seconds.
 *
 * Nothing here outlives a call but struct cli (main's) and the static
 * tables of options and commands.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "client/cli/dlock_cli.h"
#include "proto/desc.h"
#include "proto/proto.h"

#ifndef DL_VERSION
#define DL_VERSION DLOCK_VERSION
#endif

/* Longest password read from --password-file (the protocol's line limit
 * bounds it anyway). */
#define PASSWORD_MAX DL_LINE_MAX

/* ---- the command line ---------------------------------------------------- */

/* Accepted by every command. */
#define CONN_OPTS                                                              \
	(OPTB(OPT_HOST) | OPTB(OPT_SERVERS) | OPTB(OPT_PORT) |                 \
	 OPTB(OPT_SOCKET) | OPTB(OPT_PASSWORD) | OPTB(OPT_PASSWORD_FILE) |     \
	 OPTB(OPT_OWNER) | OPTB(OPT_OWNER_KEY_FILE) | OPTB(OPT_DESCRIBE) |     \
	 OPTB(OPT_TLS) | OPTB(OPT_TLS_CA) | OPTB(OPT_TLS_CERT) |               \
	 OPTB(OPT_TLS_KEY) | OPTB(OPT_TLS_SERVER_NAME) | OPTB(OPT_USER) |      \
	 OPTB(OPT_SECRET_FILE) | OPTB(OPT_SERVER_TIMEOUT) |                    \
	 OPTB(OPT_TIMEOUT) | OPTB(OPT_HELP) | OPTB(OPT_VERSION))

static const struct {
	const char *name;
	int has_arg;
} options[OPT_COUNT_] = {
	[OPT_HOST] = {"host", 1},
	[OPT_SERVERS] = {"servers", 1},
	[OPT_PORT] = {"port", 1},
	[OPT_SOCKET] = {"socket", 1},
	[OPT_PASSWORD] = {"password", 1},
	[OPT_PASSWORD_FILE] = {"password-file", 1},
	[OPT_OWNER] = {"owner", 1},
	[OPT_TLS] = {"tls", 0},
	[OPT_TLS_CA] = {"tls-ca", 1},
	[OPT_TLS_CERT] = {"tls-cert", 1},
	[OPT_TLS_KEY] = {"tls-key", 1},
	[OPT_TLS_SERVER_NAME] = {"tls-server-name", 1},
	[OPT_TIMEOUT] = {"timeout", 1},
	[OPT_SERVER_TIMEOUT] = {"server-timeout", 1},
	[OPT_TTL] = {"ttl", 1},
	[OPT_WAIT] = {"wait", 1},
	[OPT_GRACE] = {"grace", 1},
	[OPT_RAW] = {"raw", 0},
	[OPT_JSON] = {"json", 0},
	[OPT_LIMIT] = {"limit", 1},
	[OPT_MAX] = {"max", 1},
	[OPT_BY_WAITERS] = {"by-waiters", 0},
	[OPT_CONFLICT_EXIT] = {"conflict-exit-code", 1},
	[OPT_SHARED] = {"shared", 0},
	[OPT_USER] = {"user", 1},
	[OPT_SECRET_FILE] = {"secret-file", 1},
	[OPT_REASON] = {"reason", 1},
	[OPT_WARN] = {"warn", 1},
	[OPT_DELAY] = {"delay", 1},
	[OPT_OWNER_KEY_FILE] = {"owner-key-file", 1},
	[OPT_DESCRIBE] = {"describe", 1},
	[OPT_WAITED_SIGNAL] = {"signal-when-waited", 1},
	[OPT_VALUE] = {"value", 1},
	[OPT_ALL] = {"all", 0},
	[OPT_HELP] = {"help", 0},
	[OPT_VERSION] = {"version", 0},
};

/* ---- help ---------------------------------------------------------------- */

static const char conn_help[] =
	"Connection options (every command):\n"
	"  --host H            server host (DLOCK_HOST; 127.0.0.1)\n"
	"  --port P            server TCP port (DLOCK_PORT; 7420)\n"
	"  --servers LIST      the daemons of a cluster, h1:p1,h2:p2,...\n"
	"                      (DLOCK_SERVERS): the active one is found\n"
	"                      and followed over a fail-over\n"
	"  --socket PATH       unix socket instead of TCP (DLOCK_SOCKET)\n"
	"  --password P        password (DLOCK_PASSWORD); visible in ps(1):\n"
	"  --password-file F   prefer this, the first line of F\n"
	"  --user U            a user of the server's users file (DLOCK_USER)\n"
	"  --secret-file F     its secret, the first line of F (or\n"
	"                      DLOCK_SECRET); on the unix socket a user\n"
	"                      known by its uid needs none\n"
	"  --owner ID[=KEY]    owner id and the key that proves it\n"
	"                      (default: random, new for each\n"
	"                      invocation). Without KEY the server makes\n"
	"                      one for a new owner, and refuses an owner\n"
	"                      in use by others. A KEY here is masked in\n"
	"                      ps(1) but visible until then: prefer\n"
	"                      DLOCK_OWNER=ID=KEY or --owner-key-file\n"
	"  --owner-key-file F  the owner's key, the first line of F\n"
	"  --describe M        what the server shows of this command with\n"
	"                      its lease: name (the default: run's\n"
	"                      command name, or `dlock lock <name>`),\n"
	"                      full (run's whole command line, which\n"
	"                      every reader of the lock sees) or none\n"
	"  --tls-ca FILE       TLS, trusting the CAs in FILE (PEM) for the\n"
	"                      server's certificate (DLOCK_TLS_CA)\n"
	"  --tls-cert FILE     client certificate (PEM), for a server that\n"
	"  --tls-key FILE      asks for one, and its key (DLOCK_TLS_CERT,\n"
	"                      DLOCK_TLS_KEY)\n"
	"  --tls               TLS with the system's CAs (DLOCK_TLS=1)\n"
	"  --tls-server-name N the name the server's certificate must carry\n"
	"                      (DLOCK_TLS_SERVER_NAME; default: the host)\n"
	"  --server-timeout D  how long to wait for a server that cannot\n"
	"                      serve now (5s): to connect (a take-over\n"
	"                      included), for each reply, and through\n"
	"                      UNAVAILABLE answers (asked again)\n"
	"Durations need a unit: ms, s, m or h (250ms, 30s, 5m); waits\n"
	"also take inf.\n";

static const char exit_help[] =
	"Exit status:\n"
	"  0    done (run: the command's own status, 128+N if killed by\n"
	"       signal N)\n"
	"  1    refused: not the holder (unlock, refresh), stale (check)\n"
	"  64   usage error\n"
	"  65   the lock is in use with another --limit\n"
	"  69   cannot reach the server, or it cannot persist (UNAVAILABLE),\n"
	"       or a partitioned service kept sending the name on (MOVED)\n"
	"  70   internal or unexpected error\n"
	"  75   could not get the lock: busy with --wait 0, the wait timed\n"
	"       out, a server limit was reached, or this owner id holds it\n"
	"       in another process (run, lock, trylock); wait-free: still\n"
	"       held after --timeout\n"
	"  76   run: the lease was lost and the command was stopped\n"
	"  77   authentication failed or required\n"
	"  78   the servers are two clusters: their HELLO names two ids (or\n"
	"       not DLOCK_CLUSTER's); check their redis URL, db and prefix\n"
	"  79   could not get the lock: waiting would deadlock (a cycle of\n"
	"       owners waiting for each other, printed)\n"
	"  124  run: the command ran for its --timeout and was stopped\n"
	"  126  run: the command could not be executed\n"
	"  127  run: the command was not found\n";

static const struct subcmd subcmds[] = {
	{"run", dl_cli_run, 1,
	 OPTB(OPT_TTL) | OPTB(OPT_WAIT) | OPTB(OPT_GRACE) |
		 OPTB(OPT_CONFLICT_EXIT) | OPTB(OPT_SHARED) | OPTB(OPT_LIMIT) |
		 OPTB(OPT_DELAY) | OPTB(OPT_WAITED_SIGNAL) | OPTB(OPT_VALUE),
	 "run <name> [--ttl D] [--wait D|inf] [--shared|--limit N] "
	 "[--delay D] [--grace D] [--timeout D] [-E N] "
	 "[--signal-when-waited SIG] [--value V] [--] <command> [args...]",
	 "Take the lock (waiting up to --wait, default inf), run the command\n"
	 "in a process group of its own with DLOCK_NAME, DLOCK_TOKEN (the\n"
	 "fencing token) and DLOCK_OWNER in its environment, renew the lease\n"
	 "(--ttl, default 30s) while it runs, release the lock when it exits\n"
	 "and exit with its status. Signals TERM, INT, HUP, QUIT, USR1, USR2\n"
	 "and TSTP are passed on to the command. If the lease is lost, the\n"
	 "command gets SIGTERM, then SIGKILL --grace later (default: the\n"
	 "smaller of 5s and ttl/4), always before the lease could pass to\n"
	 "another holder; dlock then exits 76. --timeout D: stop the command\n"
	 "the same way once it has run for D, release the lock and exit 124\n"
	 "(as timeout(1); the wait for a server is --server-timeout).\n"
	 "-E N (--conflict-exit-code N): exit N instead of\n"
	 "75 when the lock could not be taken (as flock -E). --ttl is at\n"
	 "least 500ms. --shared: hold it with other --shared holders (a\n"
	 "reader); without, alone (a writer); first come, first served\n"
	 "across both. --limit N: a semaphore, N holders at once, each with\n"
	 "its own token; every user of the name must give the same N.\n"
	 "--delay D: the lock's lock-delay, as for lock.\n"
	 "--signal-when-waited SIG (USR1, USR2, HUP, INT, TERM, QUIT):\n"
	 "send SIG to the command when others queue for the lock while it\n"
	 "runs (as the queue doubles, or a second later), so that a job\n"
	 "that can stop early lets them in; DLOCK_WAITERS in its\n"
	 "environment says how many waited when it started.\n"
	 "--value V: what the lease says to whoever looks at the lock\n"
	 "(status, watch): see elect.\n",
	 0},
	{"elect", dl_cli_run, 1,
	 OPTB(OPT_TTL) | OPTB(OPT_WAIT) | OPTB(OPT_GRACE) |
		 OPTB(OPT_CONFLICT_EXIT) | OPTB(OPT_VALUE) |
		 OPTB(OPT_WAITED_SIGNAL),
	 "elect <name> --value V [--ttl D] [--wait D|inf] [--grace D] "
	 "[--timeout D] [-E N] [--signal-when-waited SIG] [--] <command> "
	 "[args...]",
	 "Stand in the election <name>, waiting up to --wait (default inf)\n"
	 "to be its leader, then run the command while leader, as run does:\n"
	 "DLOCK_TOKEN is the term (it grows with every leader: give it to\n"
	 "what the leader writes to), the leadership is renewed while the\n"
	 "command runs and ends with it; if it is lost, the command is\n"
	 "stopped before another can be elected and dlock exits 76. --value\n"
	 "V (required, up to 128 bytes): what the leader says to its\n"
	 "followers, e.g. its address; `dlock leader <name>` prints it,\n"
	 "`dlock watch <name>` follows it.\n",
	 0},
	{"leader", dl_cli_leader, 1, OPTB(OPT_JSON), "leader <name> [--json]",
	 "Print the value of the election's leader (what it gave --value)\n"
	 "and exit 0; exit 1 if it has none (nobody leads). --json: one\n"
	 "object with name, leader (its owner), term (its token) and value.\n",
	 0},
	{"lock", dl_cli_lock, 1,
	 OPTB(OPT_TTL) | OPTB(OPT_WAIT) | OPTB(OPT_CONFLICT_EXIT) |
		 OPTB(OPT_SHARED) | OPTB(OPT_LIMIT) | OPTB(OPT_WARN) |
		 OPTB(OPT_DELAY) | OPTB(OPT_VALUE),
	 "lock <name> [<name>...] [--ttl D] [--wait D|inf] "
	 "[--shared|--limit N] [--warn D] [--delay D] [--value V] [-E N]",
	 "Take the lock (waiting up to --wait, default inf), print its\n"
	 "fencing token and exit. The lease is NOT renewed: it ends when its\n"
	 "TTL (--ttl, default 30s) runs out, unless `dlock unlock` or\n"
	 "`dlock refresh` with the same --owner come first. Without --owner,\n"
	 "the random owner id is printed on stderr. --shared and --limit N\n"
	 "as for run. If the owner holds the lock already (an earlier lock\n"
	 "with this --owner, another process), exit 75 at once. --warn D:\n"
	 "the server sends * EXPIRING to the owner's connections when D of\n"
	 "the lease remain unrefreshed (D below the TTL). --delay D (at\n"
	 "most 1m): the lock's lock-delay: after a lease of it ends without\n"
	 "an unlock (it expired or was broken), nobody gets it for D;\n"
	 "waiters keep their place. Several names (at most 64): all the\n"
	 "locks at once or none, each exclusive with a lease of its own,\n"
	 "printed \"<name> <token>\" one a line in the order given (only\n"
	 "--ttl, --wait and -E go with several).\n",
	 0},
	{"trylock", dl_cli_lock, 1,
	 OPTB(OPT_TTL) | OPTB(OPT_CONFLICT_EXIT) | OPTB(OPT_SHARED) |
		 OPTB(OPT_LIMIT) | OPTB(OPT_WARN) | OPTB(OPT_DELAY),
	 "trylock <name> [<name>...] [--ttl D] [--shared|--limit N] "
	 "[--warn D] [--delay D] [-E N]",
	 "As `dlock lock --wait 0`: take the lock if it is free, else exit\n"
	 "75 at once (N with -E). Several names: all if all are free.\n",
	 0},
	{"unlock", dl_cli_unlock, 2, 0, "unlock <name> <token>",
	 "Release one hold of the lease <token> of <name>. Only its owner\n"
	 "may: give the same --owner (or DLOCK_OWNER) as the `dlock lock`\n"
	 "that took it. Exit 1 if this owner holds no such lease (wrong\n"
	 "owner or token, or it expired). A reentrant lease still held\n"
	 "after this is reported on stderr.\n",
	 0},
	{"refresh", dl_cli_refresh, 2, OPTB(OPT_TTL),
	 "refresh <name> <token> [--ttl D]",
	 "Extend the lease <token> of <name> to now + --ttl (default: its\n"
	 "last TTL) and print the new TTL in ms. Same --owner as for unlock;\n"
	 "exit 1 if this owner holds no such lease.\n",
	 0},
	{"check", dl_cli_check, 2, 0, "check <name> <token>",
	 "Does <token> hold <name> now? Exit 0 and print the lease's\n"
	 "remaining ms if it does; exit 1 and print the current holder's\n"
	 "token (0 if the lock is free) if it does not. Any owner may ask.\n",
	 0},
	{"break", dl_cli_break, 2, OPTB(OPT_REASON),
	 "break <name> <token> --reason TEXT",
	 "End the lease <token> of <name> now, whoever holds it: for a\n"
	 "holder that is gone or stuck (take the token from `dlock status`\n"
	 "or `dlock list`). --reason (required: one word, up to 128\n"
	 "printable bytes, e.g. a ticket) goes to the server's audit log.\n"
	 "Its holder is told the lease expired and by whom (dlock run stops\n"
	 "its command) and the next waiter gets the lock with a larger\n"
	 "fencing token. Exit 1, printing the current holder's token (0 if\n"
	 "free), if <token> holds nothing; 77 without the break right.\n",
	 0},
	{"status", dl_cli_status, 1, OPTB(OPT_JSON), "status <name> [--json]",
	 "Print the lock's state, one key=value per line: name, state\n"
	 "(free or held), token, ttl_ms (remaining), count (reentrant\n"
	 "holds), owner (- when free) -- the first holder's -- waiters,\n"
	 "mode (exclusive, shared, semaphore; - when free), limit, holders,\n"
	 "cluster (the daemon's cluster id, - if it names none), and\n"
	 "delay_ms, delay_left_ms for a lock with a lock-delay, closed_ms\n"
	 "while grants are closed (Redis lost leases: nobody new gets a\n"
	 "lock until then);\n"
	 "then a line per holder, `holder owner=.. token=.. ttl_ms=..\n"
	 "count=.. mode=..`, and per waiter, `waiter owner=.. position=..\n"
	 "wait_ms=..|inf mode=..`. --json: one JSON object with the same\n"
	 "keys (numbers as numbers) and the lists \"holders_list\" and\n"
	 "\"queue\".\n",
	 0},
	{"stats", dl_cli_stats, 0,
	 OPTB(OPT_RAW) | OPTB(OPT_JSON) | OPTB(OPT_ALL),
	 "stats [--all] [--raw|--json]",
	 "Print the server's counters for people, grouped and aligned. With\n"
	 "--raw, print the server's `key value` lines as they come, for\n"
	 "scripts; with --json, one JSON object {\"key\": value, ...}.\n"
	 "--all: the daemons of every partition of a partitioned service\n"
	 "(the active one of each), one after the other, each under\n"
	 "`Partition <id>`; with --raw, lines `<partition> <key> <value>`;\n"
	 "with --json, {\"<partition>\": {\"key\": value, ...}, ...}.\n"
	 "Without partitions: the one daemon, as partition `-`.\n",
	 0},
	{"list", dl_cli_list, 1,
	 OPTB(OPT_MAX) | OPTB(OPT_LIMIT) | OPTB(OPT_BY_WAITERS) |
		 OPTB(OPT_JSON),
	 "list [<prefix>] [--max N] [--by-waiters] [--json]",
	 "List the locks (held, or waited for) whose names start with\n"
	 "<prefix> (all without one), by name: one per line, name, state,\n"
	 "owner, token, remaining TTL, waiters. --max N: the first N only\n"
	 "(default: all, read a page of 1000 at a time). --by-waiters: the\n"
	 "most waited-for locks, most first (--max default 10). --json:\n"
	 "{\"locks\": [{\"name\": ..., \"state\": ..., \"owner\": ..., \"token\":\n"
	 "..., \"ttl_ms\": ..., \"count\": ..., \"waiters\": ...}, ...],\n"
	 "\"more\": N}, where more counts the matching locks not listed.\n"
	 "On a partitioned service: every partition's locks, merged.\n",
	 1},
	{"ping", dl_cli_ping, 0, 0, "ping",
	 "Send PING and print the round trip time in milliseconds, then\n"
	 "cluster=<id>, the daemon's cluster id (- if it names none).\n",
	 0},
	{"watch", dl_cli_watch, 1, OPTB(OPT_JSON),
	 "watch <name>|<prefix>* [--json]",
	 "Print each change of the lock's holders, or of every lock whose\n"
	 "name starts with <prefix> (* alone: all locks), as it happens,\n"
	 "without taking anything, until interrupted (exit 0): a line\n"
	 "`granted|released|expired|broken|withdrawn <name> <owner> <token>\n"
	 "holders=<n> [user=<u>] [broken_by=<u>]`, holders being what is\n"
	 "left after the change. `overflow missed=<n>`: n events were lost\n"
	 "there (this reader was too slow). Over a reconnect or a fail-over\n"
	 "the watch is made again, `resumed <pattern> [holders=<n>]`:\n"
	 "changes in between are not known. --json: one JSON object per\n"
	 "line, {\"event\": ..., \"name\": ..., \"owner\": ..., \"token\":\n"
	 "\"<digits>\", \"holders\": n, ...}. Needs the read right on the\n"
	 "name, or on the whole prefix. On a partitioned service a prefix\n"
	 "is watched at every partition (a `resumed` line for each that\n"
	 "reconnects).\n",
	 0},
	{"wait-free", dl_cli_wait_free, 1, 0, "wait-free <name> [--timeout D]",
	 "Wait until the lock has no holder, without taking it (it may be\n"
	 "taken again at once), and exit 0: for a script that waits for a\n"
	 "job elsewhere to end. One WATCH, no polling; it follows a\n"
	 "fail-over. --timeout D: exit 75 if it is still held after D\n"
	 "(default: wait for ever).\n",
	 0},
	{"admin", dl_cli_admin, 4, OPTB(OPT_JSON),
	 "admin map [--json] | partition init | partition move <slots> "
	 "<partition> | partition addrs <partition> <host:port,...>",
	 "A partitioned service (its names split among partitions, each\n"
	 "its own daemons): `map` prints the partition map the daemon\n"
	 "knows, epoch=<e> then a line per partition, `<id> addrs=<h:p,...>\n"
	 "floor=<token> slots=<ranges>` (- for none); --json: one object,\n"
	 "{\"epoch\": e, \"partitions\": [{\"id\": .., \"addrs\": [..],\n"
	 "\"floor\": \"<digits>\", \"slots\": ..}]}; epoch 0: not partitioned.\n"
	 "`partition init`: the first map, the daemon's partition serving\n"
	 "every slot. `partition move <slots> <partition>` (0-99,200,...):\n"
	 "give the slots to that partition (added to the map if new); sent\n"
	 "to the active daemon of the partition that has them, by the map;\n"
	 "refused while a lock is held in them. `partition addrs <partition>\n"
	 "<host:port,...>`: where clients find that partition's daemons.\n"
	 "Each prints the server's words, epoch=<e> [to=<partition>]. Need\n"
	 "the admin right.\n",
	 1},
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

static const struct subcmd *find_sub(const char *name)
{
	size_t i;

	for (i = 0; i < NSUBCMDS; i++)
		if (strcmp(subcmds[i].name, name) == 0)
			return &subcmds[i];
	return NULL;
}

/* ---- values -------------------------------------------------------------- */

/* On the command line a duration says its unit: `--ttl 30` would be
 * 30 ms on the wire, and people (and etcdctl) mean seconds. A bare number
 * is refused, but 0, which is the same in every unit. */
static int bare_number(const char *v)
{
	return v[0] && strspn(v, "0123456789") == strlen(v) &&
	       strspn(v, "0") != strlen(v);
}

/* A signal run passes on to its command by name (USR1, SIGUSR1; any
 * case) or number; 0 if none. Only those: the guard, leader of the
 * command's process group, is spared them and no other (found by
 * review: --signal-when-waited 26 killed the guard). */
static int signal_of(const char *v)
{
	static const struct {
		const char *name;
		int sig;
	} names[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP},
		     {"INT", SIGINT},	{"TERM", SIGTERM}, {"QUIT", SIGQUIT}};
	uint64_t n = 0;
	size_t i;

	if (strncasecmp(v, "SIG", 3) == 0)
		v += 3;
	if (dl_parse_u64(v, strlen(v), &n) != 0)
		n = 0;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(v, names[i].name) == 0 ||
		    n == (uint64_t)names[i].sig)
			return names[i].sig;
	return 0;
}

static int parse_dur(struct cli *cl, const char *opt, const char *v,
		     uint64_t *ms)
{
	if (bare_number(v))
		return dl_cli_usage_error(
			cl,
			"--%s %s: a duration needs a unit: %ss, %sms, %sm or "
			"%sh",
			opt, v, v, v, v, v);
	if (dl_parse_duration(v, strlen(v), ms) != 0)
		return dl_cli_usage_error(
			cl,
			"--%s: bad duration '%s' (a number and a unit: 500ms, "
			"30s, 2m, 1h)",
			opt, v);
	return 0;
}

static int parse_port(struct cli *cl, const char *from, const char *v)
{
	uint64_t p;

	if (dl_parse_u64(v, strlen(v), &p) != 0 || p < 1 || p > 65535)
		return dl_cli_usage_error(cl, "%s: bad port '%s'", from, v);
	cl->port = (int)p;
	return 0;
}

/* The first line of `path` (its end of line cut) into buf, its length
 * into *n: 0, or the usage error naming `opt` when it cannot be read. */
static int first_line(struct cli *cl, const char *opt, const char *path,
		      char *buf, size_t cap, size_t *n)
{
	FILE *f = fopen(path, "r");

	if (!f)
		return dl_cli_usage_error(cl, "%s %s: %s", opt, path,
					  strerror(errno));
	if (!fgets(buf, (int)cap, f))
		buf[0] = '\0';
	fclose(f);
	*n = strcspn(buf, "\r\n");
	buf[*n] = '\0';
	return 0;
}

static int read_password_file(struct cli *cl, const char *path)
{
	char buf[PASSWORD_MAX + 2];
	size_t n;
	int rc;

	if ((rc = first_line(cl, "--password-file", path, buf, sizeof(buf),
			     &n)) != 0)
		return rc;
	if (n == 0 || n > PASSWORD_MAX)
		return dl_cli_usage_error(cl, "--password-file %s: %s", path,
					  n ? "password too long"
					    : "no password on the first line");
	free(cl->password);
	cl->password = strdup(buf);
	memset(buf, 0, sizeof(buf));
	if (!cl->password) {
		dl_cli_msg("out of memory");
		return EXIT_SOFTWARE;
	}
	return 0;
}

/* --owner / DLOCK_OWNER: <id>[=<key>], the owner id and, after '=' (which
 * no id has), the secret that proves it (dlock.h, options.owner_key):
 * one value carries both, for scripts that lock in one command and unlock
 * in another. */
static int owner_of(struct cli *cl, const char *what, const char *v)
{
	const char *eq = strchr(v, '=');
	size_t n = eq ? (size_t)(eq - v) : strlen(v);

	if (n > DL_OWNER_MAX || dl_check_owner(v, n) != 0)
		return dl_cli_usage_error(
			cl,
			"%s: bad owner id '%.*s' (1-%d printable bytes, no "
			"space or '=')",
			what, (int)n, v, DL_OWNER_MAX);
	if (eq && dl_check_owner_secret(eq + 1, strlen(eq + 1)) != 0)
		return dl_cli_usage_error(
			cl,
			"%s: bad owner key after '=' (%d to %d letters, digits, "
			"- or _)",
			what, DL_OWNER_SECRET_MIN, DL_OWNER_SECRET_MAX);
	snprintf(cl->owner_buf, sizeof(cl->owner_buf), "%.*s", (int)n, v);
	cl->owner = cl->owner_buf;
	cl->owner_key = NULL;
	if (eq) {
		snprintf(cl->owner_key_buf, sizeof(cl->owner_key_buf), "%s",
			 eq + 1);
		cl->owner_key = cl->owner_key_buf;
		/* out of ps(1) from now on, as --password */
		if (strcmp(what, "--owner") == 0)
			memset((char *)eq + 1, '*', strlen(eq + 1));
	}
	return 0;
}

/* --owner-key-file: the key of the owner --owner or DLOCK_OWNER names,
 * the first line of the file (never in argv, nor in the environment). */
static int read_owner_key_file(struct cli *cl)
{
	char buf[DL_OWNER_SECRET_MAX + 3];
	const char *path = cl->owner_key_file;
	size_t n;
	int rc;

	if ((rc = first_line(cl, "--owner-key-file", path, buf, sizeof(buf),
			     &n)) != 0)
		return rc;
	if (!cl->owner)
		return dl_cli_usage_error(cl, "--owner-key-file needs the "
					      "owner id: --owner ID or "
					      "DLOCK_OWNER=ID");
	if (cl->owner_key)
		return dl_cli_usage_error(cl, "--owner-key-file and a key "
					      "after '=' in the owner: give "
					      "one");
	if (dl_check_owner_secret(buf, n) != 0)
		return dl_cli_usage_error(
			cl,
			"--owner-key-file %s: the first line is not a key (%d "
			"to %d letters, digits, - or _)",
			path, DL_OWNER_SECRET_MIN, DL_OWNER_SECRET_MAX);
	memcpy(cl->owner_key_buf, buf, n + 1);
	memset(buf, 0, sizeof(buf));
	cl->owner_key = cl->owner_key_buf;
	return 0;
}

static int set_option(struct cli *cl, enum opt_id id, char *v)
{
	char enc[DL_VALUE_MAX + 4];
	uint64_t ms;
	size_t len;
	int rc;

	cl->seen |= OPTB(id);
	switch (id) {
	case OPT_HOST:
		cl->host = v;
		return 0;
	case OPT_SERVERS:
		cl->servers = v;
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
			dl_cli_msg("out of memory");
			return EXIT_SOFTWARE;
		}
		/* Out of ps(1) from now on (it was visible until here). */
		memset(v, '*', strlen(v));
		return 0;
	case OPT_PASSWORD_FILE:
	case OPT_SECRET_FILE:
		return read_password_file(cl, v);
	case OPT_USER:
		if (dl_check_user(v, strlen(v)) != 0)
			return dl_cli_usage_error(
				cl,
				"--user: bad user name '%s' (1-%d letters, "
				"digits and . _ -)",
				v, DL_USER_MAX);
		cl->user = v;
		return 0;
	case OPT_REASON:
		cl->reason = v;
		return 0;
	case OPT_OWNER:
		return owner_of(cl, "--owner", v);
	case OPT_OWNER_KEY_FILE:
		cl->owner_key_file = v;
		return 0;
	case OPT_DESCRIBE:
		if (strcmp(v, "name") == 0)
			cl->describe = DLOCK_DESCRIBE_NAME;
		else if (strcmp(v, "full") == 0)
			cl->describe = DLOCK_DESCRIBE_FULL;
		else if (strcmp(v, "none") == 0)
			cl->describe = DLOCK_DESCRIBE_NONE;
		else
			return dl_cli_usage_error(cl,
						  "--describe: '%s' is not "
						  "name, full or none",
						  v);
		return 0;
	case OPT_TLS:
		cl->tls = 1;
		return 0;
	case OPT_TLS_CA:
		cl->tls_ca = v;
		return 0;
	case OPT_TLS_CERT:
		cl->tls_cert = v;
		return 0;
	case OPT_TLS_KEY:
		cl->tls_key = v;
		return 0;
	case OPT_TLS_SERVER_NAME:
		cl->tls_server_name = v;
		return 0;
	case OPT_TIMEOUT:
	case OPT_SERVER_TIMEOUT:
		if ((rc = parse_dur(cl, options[id].name, v, &ms)) != 0)
			return rc;
		if (ms == 0 || ms > INT_MAX)
			return dl_cli_usage_error(cl, "--%s: out of range",
						  options[id].name);
		if (id == OPT_TIMEOUT)
			cl->timeout_ms = (int)ms;
		else
			cl->server_timeout_ms = (int)ms;
		return 0;
	case OPT_TTL:
		if ((rc = parse_dur(cl, "ttl", v, &cl->ttl_ms)) != 0)
			return rc;
		if (cl->ttl_ms == 0)
			return dl_cli_usage_error(cl, "--ttl must be positive");
		return 0;
	case OPT_WAIT:
		if (bare_number(v))
			return parse_dur(cl, "wait", v, &cl->wait_ms);
		if (dl_parse_wait(v, strlen(v), &cl->wait_ms) != 0)
			return dl_cli_usage_error(cl,
						  "--wait: bad wait '%s' (a "
						  "duration or inf)",
						  v);
		return 0;
	case OPT_GRACE:
		return parse_dur(cl, "grace", v, &cl->grace_ms);
	case OPT_WARN:
		return parse_dur(cl, "warn", v, &cl->warn_ms);
	case OPT_DELAY:
		if ((rc = parse_dur(cl, "delay", v, &cl->delay_ms)) != 0)
			return rc;
		if (cl->delay_ms > DL_LOCK_DELAY_MAX_MS)
			return dl_cli_usage_error(cl,
						  "--delay: %s is too long, at "
						  "most 1m (a lock's delay)",
						  v);
		return 0;
	case OPT_RAW:
		cl->raw = 1;
		return 0;
	case OPT_JSON:
		cl->json = 1;
		return 0;
	case OPT_BY_WAITERS:
		cl->by_waiters = 1;
		return 0;
	case OPT_ALL:
		cl->all = 1;
		return 0;
	case OPT_CONFLICT_EXIT:
		if (dl_parse_u64(v, strlen(v), &ms) != 0 || ms > 255)
			return dl_cli_usage_error(
				cl, "-E: '%s' is not an exit code (0-255)", v);
		cl->conflict_exit = (int)ms;
		return 0;
	case OPT_LIMIT:
		if (dl_parse_u64(v, strlen(v), &cl->limit) != 0 ||
		    cl->limit == 0)
			return dl_cli_usage_error(
				cl, "--limit: '%s' is not a positive number",
				v);
		return 0;
	case OPT_MAX:
		if (dl_parse_u64(v, strlen(v), &cl->max) != 0 || cl->max == 0)
			return dl_cli_usage_error(
				cl, "--max: '%s' is not a positive number", v);
		return 0;
	case OPT_SHARED:
		cl->shared = 1;
		return 0;
	case OPT_VALUE:
		/* what a follower is to read back exactly: printable ASCII
		 * and spaces only, never a byte made '?' (found from
		 * outside: a tab and UTF-8 were sent mangled, exit 0) */
		for (len = 0; v[len]; len++)
			if (v[len] < ' ' || v[len] > '~')
				return dl_cli_usage_error(
					cl,
					"--value: printable ASCII and spaces "
					"only (it is sent as it is read back)");
		/* as sent: a space is three bytes (%20) */
		if (!v[0] || dl_desc_encode(v, strlen(v), enc, sizeof(enc)) >
				     DL_VALUE_MAX)
			return dl_cli_usage_error(
				cl,
				"--value: 1 to %d bytes as sent (a space or "
				"%% takes three)",
				DL_VALUE_MAX);
		cl->value = v;
		return 0;
	case OPT_WAITED_SIGNAL:
		if ((cl->waited_signal = signal_of(v)) == 0)
			return dl_cli_usage_error(
				cl,
				"--signal-when-waited: '%s' is not one of "
				"USR1, USR2, HUP, INT, TERM, QUIT (or their "
				"numbers)",
				v);
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
	if (strcmp(a, "-E") == 0) {
		if (*i + 1 >= argc)
			return dl_cli_usage_error(cl, "option -E needs a "
						      "value");
		return set_option(cl, OPT_CONFLICT_EXIT, argv[++*i]);
	}
	if (a[1] != '-')
		return dl_cli_usage_error(cl, "unknown option '%s'", a);
	a += 2;
	eq = strchr(a, '=');
	len = eq ? (size_t)(eq - a) : strlen(a);
	for (id = 0; id < OPT_COUNT_; id++)
		if (strlen(options[id].name) == len &&
		    memcmp(options[id].name, a, len) == 0)
			break;
	if (id == OPT_COUNT_)
		return dl_cli_usage_error(cl, "unknown option '%s'", argv[*i]);
	if (options[id].has_arg) {
		if (eq)
			v = eq + 1;
		else if (*i + 1 < argc)
			v = argv[++*i];
		else
			return dl_cli_usage_error(cl,
						  "option --%s needs a value",
						  options[id].name);
	} else if (eq) {
		return dl_cli_usage_error(cl, "option --%s takes no value",
					  options[id].name);
	}
	return set_option(cl, (enum opt_id)id, v);
}

/* $name if set and not empty, else NULL. */
static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] ? v : NULL;
}

/* The TLS options the command line left out, from DLOCK_TLS_*; a
 * certificate needs its key. */
static int apply_tls_env(struct cli *cl)
{
	const char *v;

	if (!(cl->seen & OPTB(OPT_TLS)) && (v = env("DLOCK_TLS")))
		cl->tls = strcmp(v, "0") != 0;
	if (!(cl->seen & OPTB(OPT_TLS_CA)))
		cl->tls_ca = env("DLOCK_TLS_CA");
	if (!(cl->seen & OPTB(OPT_TLS_CERT)))
		cl->tls_cert = env("DLOCK_TLS_CERT");
	if (!(cl->seen & OPTB(OPT_TLS_KEY)))
		cl->tls_key = env("DLOCK_TLS_KEY");
	if (!(cl->seen & OPTB(OPT_TLS_SERVER_NAME)))
		cl->tls_server_name = env("DLOCK_TLS_SERVER_NAME");
	if (!cl->tls_cert != !cl->tls_key)
		return dl_cli_usage_error(
			cl, "--tls-cert and --tls-key (DLOCK_TLS_CERT, "
			    "DLOCK_TLS_KEY) go together");
	return 0;
}

/* Defaults from the environment for what the command line left out. */
static int apply_env(struct cli *cl)
{
	const char *v;
	int rc;

	/* A cluster's list is used unless the command line names one
	 * server (--host, --port or --socket). */
	if (!(cl->seen & (OPTB(OPT_SERVERS) | OPTB(OPT_HOST) | OPTB(OPT_PORT) |
			  OPTB(OPT_SOCKET))) &&
	    (v = getenv("DLOCK_SERVERS")) && v[0])
		cl->servers = v;
	if (cl->seen & (OPTB(OPT_HOST) | OPTB(OPT_PORT) | OPTB(OPT_SOCKET)))
		cl->servers = NULL;
	if ((v = getenv("DLOCK_CLUSTER")) && v[0])
		cl->cluster = v;
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
	if (!(cl->seen & (OPTB(OPT_PASSWORD) | OPTB(OPT_PASSWORD_FILE) |
			  OPTB(OPT_SECRET_FILE))) &&
	    (((v = getenv("DLOCK_SECRET")) && v[0]) ||
	     ((v = getenv("DLOCK_PASSWORD")) && v[0]))) {
		cl->password = strdup(v);
		if (!cl->password) {
			dl_cli_msg("out of memory");
			return EXIT_SOFTWARE;
		}
	}
	if ((rc = apply_tls_env(cl)) != 0)
		return rc;
	if (!(cl->seen & OPTB(OPT_USER)) && (v = getenv("DLOCK_USER")) &&
	    v[0]) {
		if (dl_check_user(v, strlen(v)) != 0)
			return dl_cli_usage_error(
				cl, "DLOCK_USER: bad user name '%s'", v);
		cl->user = v;
	}
	if (!(cl->seen & OPTB(OPT_OWNER)) && (v = getenv("DLOCK_OWNER")) &&
	    v[0] && (rc = owner_of(cl, "DLOCK_OWNER", v)) != 0)
		return rc;
	if (cl->owner_key_file)
		return read_owner_key_file(cl);
	return 0;
}

/* An option word meant one thing for one command and another for
 * another: --timeout (run: the command's time limit; elsewhere the wait
 * for a server) and --limit (lock, run: a semaphore's holders; list: how
 * many to list). Each now has one meaning, and the other its own name
 * (--server-timeout, list --max); the old spelling still works where it
 * did, with a note. */
static void old_spellings(struct cli *cl)
{
	if ((cl->seen & OPTB(OPT_TIMEOUT)) && cl->sub->fn != dl_cli_run &&
	    cl->sub->fn != dl_cli_wait_free) {
		dl_cli_msg("note: --timeout is --server-timeout now (the old "
			   "spelling will go; --timeout is run's time limit)");
		if (!(cl->seen & OPTB(OPT_SERVER_TIMEOUT)))
			cl->server_timeout_ms = cl->timeout_ms;
		cl->timeout_ms = 0;
	}
	if ((cl->seen & OPTB(OPT_LIMIT)) && cl->sub->fn == dl_cli_list) {
		dl_cli_msg("note: list --limit is list --max now (the old "
			   "spelling will go; --limit is a semaphore's size)");
		if (!(cl->seen & OPTB(OPT_MAX)))
			cl->max = cl->limit;
		cl->limit = 0;
	}
}

/* lock a b c: the names after the first are lock names too, each once;
 * only --ttl, --wait and -E go with several (every lock is taken
 * exclusive, all or none). 0, or EXIT_USAGE. */
static int check_more(const struct cli *cl)
{
	const uint64_t single = OPTB(OPT_SHARED) | OPTB(OPT_LIMIT) |
				OPTB(OPT_WARN) | OPTB(OPT_DELAY) |
				OPTB(OPT_VALUE);
	int i, j;

	if (cl->nmore == 0)
		return 0;
	for (i = 0; i < OPT_COUNT_; i++)
		if (cl->seen & single & OPTB(i))
			return dl_cli_usage_error(
				cl,
				"--%s is for one lock: several are taken "
				"exclusive, with --ttl and --wait only",
				options[i].name);
	for (i = 0; i < cl->nmore; i++) {
		if (dl_check_name(cl->more[i], strlen(cl->more[i])) != 0)
			return dl_cli_usage_error(
				cl,
				"bad lock name '%s' (1-%d printable bytes, "
				"no space or '=')",
				cl->more[i], DL_NAME_MAX);
		if (strcmp(cl->more[i], cl->pos[0]) == 0)
			return dl_cli_usage_error(cl, "lock name '%s' twice",
						  cl->more[i]);
		for (j = 0; j < i; j++)
			if (strcmp(cl->more[i], cl->more[j]) == 0)
				return dl_cli_usage_error(
					cl, "lock name '%s' twice",
					cl->more[i]);
	}
	return 0;
}

/* Returns 0 to go on, or an exit code (help and version are exit 0, with
 * *done set). */
static int parse_args(struct cli *cl, int argc, char **argv, int *done)
{
	int i, rc, only_pos = 0, run;
	uint64_t bad;

	for (i = 1; i < argc; i++) {
		char *a = argv[i];
		int is_opt = !only_pos && a[0] == '-' && a[1] != '\0';

		run = cl->sub && cl->sub->fn == dl_cli_run;
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
					return dl_cli_usage_error(
						cl,
						"unknown command "
						"'%s'",
						argv[i + 1]);
				break;
			}
			if (!(cl->sub = find_sub(a)))
				return dl_cli_usage_error(
					cl, "unknown command '%s'", a);
			continue;
		}
		if (cl->npos >= cl->sub->npos && cl->sub->fn == dl_cli_lock &&
		    cl->npos == 1) {
			/* lock a b c: several locks at once */
			if (cl->nmore >= DL_MULTI_MAX - 1)
				return dl_cli_usage_error(
					cl, "at most %d lock names at once",
					DL_MULTI_MAX);
			cl->more[cl->nmore++] = a;
			continue;
		}
		if (cl->npos >= cl->sub->npos)
			return dl_cli_usage_error(
				cl, "unexpected argument '%s'", a);
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
		return dl_cli_usage_error(cl, "no command given");
	bad = cl->seen & ~(CONN_OPTS | cl->sub->opts);
	for (i = 0; i < OPT_COUNT_; i++)
		if (bad & OPTB(i))
			return dl_cli_usage_error(
				cl,
				"option --%s does not apply to "
				"'%s'",
				options[i].name, cl->sub->name);
	if (cl->npos < cl->sub->npos && !cl->sub->pos_optional)
		return dl_cli_usage_error(cl, "missing %s",
					  cl->npos == 0 ? "lock name"
							: "token");
	if (cl->sub->fn == dl_cli_run && (!cl->command || !cl->command[0]))
		return dl_cli_usage_error(cl, "missing the command to run");
	if (strcmp(cl->sub->name, "elect") == 0 && !cl->value)
		return dl_cli_usage_error(
			cl, "elect needs --value: what the leader says to its "
			    "followers (its address, say)");
	old_spellings(cl);
	if (cl->limit > DL_LIMIT_MAX)
		return dl_cli_usage_error(
			cl, "--limit: %" PRIu64 " holders at once, at most %d",
			cl->limit, DL_LIMIT_MAX);
	if (cl->shared && cl->limit > 1)
		return dl_cli_usage_error(
			cl, "--shared is for a lock; the holders of a "
			    "semaphore (--limit N) each take a permit");
	if (cl->npos > 0 && dl_check_name(cl->pos[0], strlen(cl->pos[0])) != 0)
		return dl_cli_usage_error(
			cl,
			"bad lock name '%s' (1-%d printable bytes, "
			"no space or '=')",
			cl->pos[0], DL_NAME_MAX);
	if ((rc = check_more(cl)) != 0)
		return rc;
	return apply_env(cl);
}

/* ---- main ---------------------------------------------------------------- */

int main(int argc, char **argv)
{
	struct cli cl = {.ttl_ms = DEFAULT_TTL_MS,
			 .wait_ms = DL_WAIT_INF,
			 .describe = DLOCK_DESCRIBE_NAME};
	int done = 0, rc;

	/* dlock may hold a secret, a password or an owner key, from its
	 * environment, its arguments or a file. Not dumpable, its memory
	 * and /proc/<pid>/environ are root's only: a command `dlock run`
	 * starts (same uid, which exec makes dumpable again) cannot read
	 * what was kept from its environment out of its parent's. */
	(void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (argc > 1 && strcmp(argv[1], "--run-guard") == 0)
		return dl_cli_guard(argc, argv); /* dlock_run.c started us */
	rc = parse_args(&cl, argc, argv, &done);
	if (rc == 0 && !done)
		rc = cl.sub->fn(&cl);
	if (cl.password) {
		memset(cl.password, 0, strlen(cl.password));
		free(cl.password);
	}
	if (fflush(stdout) != 0 && rc == 0) {
		dl_cli_msg("write error: %s", strerror(errno));
		rc = EXIT_SOFTWARE;
	}
	return rc;
}
