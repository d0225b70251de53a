/* SPDX-License-Identifier: MIT */
/*
 * dlock_clicore.c -- what every command of dlock(1) shares (dlock_cli.h):
 * its messages and exit statuses, and connecting, retrying and acquiring
 * with libdlock.
 *
 * Errors reach the user in one shape: "dlock: <what>: <libdlock's text>
 * (<the server's words>)", and one table maps libdlock's codes to exit
 * codes (exit_for), so that every command exits alike for the same
 * failure. Connecting starts from the same libdlock options for every
 * command (no renewal, no reconnect; `lock --wait` and `run` change
 * that), and says the same when it fails.
 *
 * Apart from dlock_cli.c (main, the command line) so that the commands
 * (dlock_cmds.c, dlock_run.c, dlock_guard.c, dlock_watchcmd.c) depend on
 * these helpers, and dlock_cli.c on the commands, with no cycle.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/cli/dlock_cli.h"
#include "proto/proto.h"

/* `dlock run`: the command line's subcommand (its table is dlock_cli.c's). */
static int is_run(const struct cli *cl)
{
	return strcmp(cl->sub->name, "run") == 0;
}

/* ---- messages ------------------------------------------------------------ */

static void vmsg(const char *fmt, va_list ap)
{
	fputs("dlock: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void dl_cli_msg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

/* The exit code for a libdlock error. */
static int exit_for(int err)
{
	switch (err) {
	case DLOCK_OK:
		return EXIT_OK;
	case DLOCK_EBUSY:
	case DLOCK_EHELDBYOWNER:
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
	case DLOCK_ETLS:
	case DLOCK_EMOVED:
		return EXIT_UNAVAILABLE;
	case DLOCK_EDENIED:
	case DLOCK_EAUTH:
		return EXIT_NOPERM;
	case DLOCK_EINVAL:
		return EXIT_USAGE;
	case DLOCK_ECYCLE:
		return EXIT_DEADLOCK;
	case DLOCK_ECLUSTER:
		return EXIT_CLUSTER;
	default:
		return EXIT_SOFTWARE;
	}
}

int dl_cli_fail(int err, const char *what)
{
	const char *server = dlock_last_error();

	if (server && server[0])
		dl_cli_msg("%s: %s (%s)", what, dlock_strerror(err), server);
	else
		dl_cli_msg("%s: %s", what, dlock_strerror(err));
	return exit_for(err);
}

int dl_cli_usage_error(const struct cli *cl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	if (cl->sub)
		fprintf(stderr, "Usage: dlock %s\n", cl->sub->usage);
	else
		fputs("Usage: dlock [options] <command> [args...]\n", stderr);
	fputs("Try 'dlock --help' for more information.\n", stderr);
	return EXIT_USAGE;
}

/* ---- connecting ---------------------------------------------------------- */

const char *dl_cli_where(const struct cli *cl)
{
	static char buf[300];

	if (cl->servers)
		return cl->servers;
	if (cl->socket)
		return cl->socket;
	snprintf(buf, sizeof(buf), "%s%s%s:%d",
		 strchr(cl->host, ':') ? "[" : "", cl->host,
		 strchr(cl->host, ':') ? "]" : "", cl->port);
	return buf;
}

/* --server-timeout (for every command: run's --timeout is the command's
 * time limit, dlock_run.c). */
static int patience(const struct cli *cl)
{
	return cl->server_timeout_ms > 0 ? cl->server_timeout_ms
					 : DEFAULT_TIMEOUT_MS;
}

void dl_cli_retry_init(struct dl_cli_retry *r, const struct cli *cl,
		       int64_t wait_end)
{
	r->until = 0;
	r->wait_end = wait_end;
	r->pause = RETRY_MIN_MS;
	r->patience_ms = patience(cl);
}

int dl_cli_retry(struct dl_cli_retry *r, int err)
{
	int64_t now = dlock_now_ms(), ms;
	struct timespec ts;

	/* MOVED again and again: a partition map that is changing, as
	 * passing as UNAVAILABLE */
	if (err != DLOCK_EUNAVAILABLE && err != DLOCK_EMOVED)
		return 0;
	if (r->until == 0)
		r->until = now + r->patience_ms > r->wait_end
				   ? now + r->patience_ms
				   : r->wait_end;
	if (now >= r->until)
		return 0;
	ms = r->pause < r->until - now ? r->pause : r->until - now;
	r->pause = r->pause * 2 < RETRY_MAX_MS ? r->pause * 2 : RETRY_MAX_MS;
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)(ms % 1000) * 1000000L;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	return 1;
}

void dl_cli_conn_options(const struct cli *cl, struct dlock_options *o)
{
	dlock_options_init(o);
	o->host = cl->host;
	o->port = cl->port;
	o->unix_path = cl->socket;
	o->servers = cl->servers;
	o->password = cl->password;
	o->user = cl->user;
	o->owner = cl->owner;
	o->owner_key = cl->owner_key;
	o->cluster = cl->cluster;
	o->tls = cl->tls;
	o->tls_ca = cl->tls_ca;
	o->tls_cert = cl->tls_cert;
	o->tls_key = cl->tls_key;
	o->tls_server_name = cl->tls_server_name;
	/* A drop (a take-over, a restart) is ridden through: reads and
	 * refreshes are sent again on the new connection within the
	 * request's timeout; an unlock or a break whose outcome the drop
	 * hid is not (a second one could undo more), and fails. */
	o->describe = cl->describe;
	o->desc_cmd = dl_cli_desc_cmd(cl); /* never its options */
	o->reconnect = 1;
	o->renew = 0;
	o->connect_timeout_ms = patience(cl);
	o->request_timeout_ms = patience(cl);
	/* who waits that long for the lock may wait as long for a server */
	if ((is_run(cl) || strcmp(cl->sub->name, "lock") == 0) &&
	    cl->wait_ms != DL_WAIT_INF &&
	    cl->wait_ms > (uint64_t)o->connect_timeout_ms)
		o->connect_timeout_ms =
			cl->wait_ms < INT_MAX ? (int)cl->wait_ms : INT_MAX;
}

/* The longest a server of the list may take to say HELLO when its cluster
 * id is checked (a hung one is passed over: the check is of the servers
 * that answer). */
#define CLUSTER_CHECK_MS 1000
/* One entry of a server list: "host:port". */
#define DL__CLI_SERVER_MAX 300

/* A one-shot command has no past: the first server it reaches names the
 * cluster, and a fail-over to a server of another (a typo'd Redis URL,
 * db or prefix on one node) would go unseen. So with a list, every
 * server that answers is asked its id, as an anonymous owner; a list
 * that names two ids is refused (DLOCK_ECLUSTER) before the command
 * runs, saying which servers differ. */
/* Ask `one` ("host:port") as a single server, not as a list of one: a
 * list is tried again after a pause until the connect timeout when every
 * server refuses (a take-over may be under way), and a node that is down
 * cost each one-shot command the whole CLUSTER_CHECK_MS (found by the
 * fault campaign: "back to serving" after a kill -9 went from about 1 s
 * to 2 s). A single server that refuses is an answer at once. */
static void one_server(struct dlock_options *so, const char *one, char *host,
		       size_t len)
{
	const char *colon = strrchr(one, ':');
	size_t n = colon ? (size_t)(colon - one) : 0;
	uint64_t port;

	so->servers = one;
	if (!colon || n == 0 || n >= len ||
	    dl_parse_u64(colon + 1, strlen(colon + 1), &port) != 0 ||
	    port == 0 || port > 65535)
		return; /* left to the list's parser */
	memcpy(host, one, n);
	host[n] = '\0';
	if (n > 2 && host[0] == '[' && host[n - 1] == ']') {
		memmove(host, host + 1, n - 2);
		host[n - 2] = '\0';
	}
	so->servers = NULL;
	so->unix_path = NULL;
	so->host = host;
	so->port = (int)port;
}

static int check_cluster(const struct dlock_options *o, dlock_client *c)
{
	char one[DL__CLI_SERVER_MAX], mine[DL__CLI_SERVER_MAX] = "";
	char host[DL__CLI_SERVER_MAX];
	char other_id[DL_CLUSTER_ID_LEN + 1];
	struct dlock_options so = *o;
	const char *p = o->servers, *end;
	dlock_client *other;
	size_t n;

	if (!p || !strchr(p, ',') || !dlock_cluster(c)[0])
		return 0;
	so.owner = NULL;
	so.owner_key = NULL;
	so.standby_ok = 1;
	so.reconnect = 0;
	so.cluster = NULL;
	if (so.connect_timeout_ms > CLUSTER_CHECK_MS)
		so.connect_timeout_ms = CLUSTER_CHECK_MS;
	for (; *p; p = *end ? end + 1 : end) {
		end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		n = (size_t)(end - p);
		if (n == 0 || n >= sizeof(one))
			continue;
		memcpy(one, p, n);
		one[n] = '\0';
		one_server(&so, one, host, sizeof(host));
		if (dlock_connect(&so, &other) != 0)
			continue; /* down, or busy: only an answer counts */
		snprintf(other_id, sizeof(other_id), "%s",
			 dlock_cluster(other));
		dlock_close(other);
		if (!other_id[0])
			continue; /* a standby that does not know yet */
		if (strcmp(other_id, dlock_cluster(c)) == 0) {
			if (!mine[0])
				snprintf(mine, sizeof(mine), "%s", one);
			continue;
		}
		dl_cli_msg("servers %s and %s are two clusters (ids %s, %s): "
			   "check their redis URL, db and prefix",
			   mine[0] ? mine : "reached first", one,
			   dlock_cluster(c), other_id);
		return DLOCK_ECLUSTER;
	}
	return 0;
}

int dl_cli_connect(const struct cli *cl, const struct dlock_options *o,
		   dlock_client **c)
{
	char what[400];
	int rc = dlock_connect(o, c);

	/* a partitioned service's list may name daemons of every partition,
	 * each partition a cluster of its own */
	if (rc == 0 && dlock_map_epoch(*c) == 0 && check_cluster(o, *c) != 0) {
		dlock_close(*c);
		*c = NULL;
		return EXIT_CLUSTER; /* check_cluster said why */
	}
	if (rc == 0)
		return 0;
	if (rc == DLOCK_ECLUSTER) {
		dl_cli_msg("%s", dlock_last_error());
		return EXIT_CLUSTER;
	}
	if (rc == DLOCK_EAUTH && !cl->password) {
		/* connected: the server wants a password nobody gave */
		dl_cli_msg("%s requires a password: give --password, "
			   "--password-file or DLOCK_PASSWORD (a user: --user "
			   "and --secret-file, or DLOCK_USER and DLOCK_SECRET)",
			   dl_cli_where(cl));
		return EXIT_NOPERM;
	}
	if (rc == DLOCK_EAUTH) {
		dl_cli_msg("%s refused the %s (%s): check them",
			   dl_cli_where(cl),
			   cl->user ? "user or its secret" : "password",
			   dlock_last_error()[0] ? dlock_last_error()
						 : "NO AUTH_FAILED");
		return EXIT_NOPERM;
	}
	if (rc == DLOCK_EDENIED && strstr(dlock_last_error(), "need=key")) {
		/* another client uses this owner id: not ours to act as */
		dl_cli_msg("owner %s is in use by another client, which holds "
			   "its key: give it (--owner %s=KEY, or DLOCK_OWNER), "
			   "or use an owner id of your own",
			   cl->owner ? cl->owner : "?",
			   cl->owner ? cl->owner : "ID");
		return EXIT_NOPERM;
	}
	if (rc == DLOCK_ECONNECT && dlock_last_error()[0]) {
		/* libdlock says why: refused, a name that does not resolve,
		 * no answer in time, a standby (with --servers, server by
		 * server) */
		if (cl->servers)
			dl_cli_msg("cannot connect to an active dlockd: %s",
				   dlock_last_error());
		else if (strncmp(dlock_last_error(), "a standby", 9) == 0)
			/* it answered: it is just not the one that serves
			 * (found by a newcomer: "cannot connect" misled) */
			dl_cli_msg("%s is %s; ask the active one, or list them "
				   "all with --servers",
				   dl_cli_where(cl), dlock_last_error());
		else
			dl_cli_msg("cannot connect to %s: %s", dl_cli_where(cl),
				   dlock_last_error());
		return EXIT_UNAVAILABLE;
	}
	snprintf(what, sizeof(what), "cannot connect to %s", dl_cli_where(cl));
	return dl_cli_fail(rc, what);
}

int dl_cli_simple_connect(const struct cli *cl, dlock_client **c)
{
	struct dlock_options o;

	dl_cli_conn_options(cl, &o);
	return dl_cli_connect(cl, &o, c);
}

/* NO DEADLOCK <name> <n> <owner> [user=<u>] <lock> ... [more=<m>] [id=..]
 * (line) as "me -> name -> owner -> lock ... -> me" into buf: each owner
 * waits for the lock after it, which the next owner holds or is queued
 * ahead for. */
static void cycle_text(char *buf, size_t len, char count[24], const char *me,
		       const char *line)
{
	char words[DL_REPLY_MAX], *w, *save = NULL;
	size_t n = 0;
	int i = 0;

	snprintf(words, sizeof(words), "%s", line);
	snprintf(count, 24, "?");
	n += (size_t)snprintf(buf, len, "%s", me);
	for (w = strtok_r(words, " ", &save); w && n < len;
	     w = strtok_r(NULL, " ", &save), i++) {
		if (i == 3)
			snprintf(count, 24, "%s", w);
		if (i < 2 || i == 3 || !strncmp(w, "id=", 3))
			continue; /* NO DEADLOCK, the count, a tag */
		if (!strncmp(w, "user=", 5))
			n += (size_t)snprintf(buf + n, len - n, " (%s)", w);
		else if (!strncmp(w, "more=", 5))
			n += (size_t)snprintf(buf + n, len - n,
					      " -> ... (%s owners more)",
					      w + 5);
		else
			n += (size_t)snprintf(buf + n, len - n, " -> %s", w);
	}
	if (n < len)
		snprintf(buf + n, len - n, " -> %s", me);
}

/* Why an acquire of `name` failed with rc (wait: the wait asked, ms or
 * DLOCK_WAIT_FOREVER, from t0): said on stderr; its exit code. */
static int acquire_failed(dlock_client *c, const struct cli *cl,
			  const char *name, int rc, int64_t wait, int64_t t0)
{
	char what[DL_NAME_MAX + 64];

	if (rc == DLOCK_EBUSY && wait > 0) {
		dl_cli_msg("timed out waiting for %s", name);
		return EXIT_TEMPFAIL;
	}
	if (rc == DLOCK_EBUSY) {
		dl_cli_busy_msg(name, cl->limit > 1);
		return EXIT_TEMPFAIL;
	}
	if (rc == DLOCK_EMISMATCH) {
		dl_cli_msg("cannot lock %s: it is in use with another --limit "
			   "(%s); give the same --limit as its users",
			   name, dlock_last_error());
		return EXIT_MISMATCH;
	}
	if (rc == DLOCK_EHELDBYOWNER) {
		/* a process that shares our owner id and key holds it: the
		 * library gave back the hold it was granted as a reentry */
		dl_cli_msg("%s is already held by owner %s in another process "
			   "(the same --owner or DLOCK_OWNER, id and key): not "
			   "taken",
			   name, dlock_owner(c));
		return EXIT_TEMPFAIL;
	}
	if (rc == DLOCK_EDEADLK) {
		/* not an error of the server or of dlock: the lock is this
		 * owner's already, shared, and no upgrade exists */
		dl_cli_msg("cannot lock %s exclusive: owner %s holds it shared "
			   "(it would wait for itself); unlock it first",
			   name, dlock_owner(c));
		return EXIT_TEMPFAIL;
	}
	if (rc == DLOCK_ECYCLE) {
		char cycle[DL_REPLY_MAX + 64], count[24];

		cycle_text(cycle, sizeof(cycle), count, dlock_owner(c),
			   dlock_last_error());
		dl_cli_msg("cannot lock %s: waiting would deadlock, a cycle of "
			   "%s owners waiting for each other: %s",
			   name, count, cycle);
		return EXIT_DEADLOCK;
	}
	/* DLOCK_ETIMEDOUT is the wait running out, or no reply in time:
	 * only the first when the wait was finite and has passed. */
	if (rc == DLOCK_ETIMEDOUT && wait > 0 && dlock_now_ms() - t0 >= wait) {
		dl_cli_msg("timed out waiting for %s", name);
		return EXIT_TEMPFAIL;
	}
	snprintf(what, sizeof(what), "cannot lock %s", name);
	return dl_cli_fail(rc, what);
}

int dl_cli_acquire(dlock_client *c, const struct cli *cl, const char *name,
		   uint64_t wait_ms, dlock_lease **l)
{
	int64_t t0 = dlock_now_ms();
	int64_t wait =
		wait_ms == DL_WAIT_INF ? DLOCK_WAIT_FOREVER : (int64_t)wait_ms;
	struct dlock_lock_options lo;
	struct dl_cli_retry retry;
	int rc;

	dlock_lock_options_init(&lo);
	lo.ttl_ms = (int64_t)cl->ttl_ms;
	lo.wait_ms = wait;
	lo.mode = cl->shared ? DLOCK_SHARED : DLOCK_EXCLUSIVE;
	lo.limit = (uint32_t)cl->limit;
	lo.warn_ms = (int64_t)cl->warn_ms;
	lo.delay_ms = (int64_t)cl->delay_ms;
	lo.notify_waiters = cl->waited_signal != 0;
	lo.value = cl->value;
	dl_cli_retry_init(&retry, cl, wait > 0 ? t0 + wait : 0);
	while ((rc = dlock_acquire(c, name, &lo, l)) != 0 &&
	       dl_cli_retry(&retry, rc)) {
		/* what is left of the wait (past its end, a last try) */
		if (wait > 0)
			lo.wait_ms = t0 + wait > dlock_now_ms()
					     ? t0 + wait - dlock_now_ms()
					     : 0;
	}
	if (rc == 0)
		return 0;
	return acquire_failed(c, cl, name, rc, wait, t0);
}

int dl_cli_acquire_all(dlock_client *c, const struct cli *cl,
		       const char *const names[], size_t n, uint64_t wait_ms,
		       dlock_lease *out[])
{
	int64_t t0 = dlock_now_ms();
	int64_t wait =
		wait_ms == DL_WAIT_INF ? DLOCK_WAIT_FOREVER : (int64_t)wait_ms;
	struct dlock_lock_all_options o;
	struct dl_cli_retry retry;
	char name[DL_NAME_MAX + 1];
	int rc;

	dlock_lock_all_options_init(&o);
	o.ttl_ms = (int64_t)cl->ttl_ms;
	o.wait_ms = wait;
	dl_cli_retry_init(&retry, cl, wait > 0 ? t0 + wait : 0);
	while ((rc = dlock_acquire_all(c, names, n, &o, out)) != 0 &&
	       dl_cli_retry(&retry, rc)) {
		if (wait > 0)
			o.wait_ms = t0 + wait > dlock_now_ms()
					    ? t0 + wait - dlock_now_ms()
					    : 0;
	}
	if (rc == 0)
		return 0;
	/* the lock that refused ("NO BUSY b ...", "NO ALREADY_HELD b 7",
	 * "NO DEADLOCK b 2 ...") when the server named one, else the first
	 * (an ERR names none: "ERR UNAVAILABLE persistence ..." is about no
	 * lock "persistence", found by review) */
	if (strncmp(dlock_last_error(), "NO ", 3) != 0 ||
	    sscanf(dlock_last_error(), "%*s %*s %255s", name) != 1 ||
	    dl_check_name(name, strlen(name)) != 0)
		snprintf(name, sizeof(name), "%s", names[0]);
	return acquire_failed(c, cl, name, rc, wait, t0);
}

/* ---- what a command says of a lock ------------------------------------- */

/* A hold time for people: 250ms, 12s, 3m12s, 5h04m, 2d03h. */
static const char *held_text(int64_t ms, char *buf, size_t n)
{
	int64_t s = ms / 1000;

	if (ms < 1000)
		snprintf(buf, n, "%" PRId64 "ms", ms);
	else if (s < 60)
		snprintf(buf, n, "%" PRId64 "s", s);
	else if (s < 3600)
		snprintf(buf, n, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, n, "%" PRId64 "h%02" PRId64 "m", s / 3600,
			 s / 60 % 60);
	else
		snprintf(buf, n, "%" PRId64 "d%02" PRId64 "h", s / 86400,
			 s / 3600 % 24);
	return buf;
}

/* Its command, never its options (--password, --owner <id>=<key> may be
 * among them): `dlock lock x`, or for run the command it runs -- its
 * name, or with --describe full its arguments too (which may hold a
 * secret, and every reader of the lock would see) -- which is what a
 * person looking at a busy lock wants to know. libdlock makes it fit the
 * protocol (dlock.h, options.desc_cmd). */
const char *dl_cli_desc_cmd(const struct cli *cl)
{
	static char buf[1024];
	size_t n = 0;
	char *const *w;
	const char *slash;
	int i;

	buf[0] = '\0';
	if (is_run(cl) && cl->command && cl->describe != DLOCK_DESCRIBE_FULL) {
		slash = strrchr(cl->command[0], '/');
		snprintf(buf, sizeof(buf), "%s",
			 slash ? slash + 1 : cl->command[0]);
		return buf;
	}
	if (is_run(cl) && cl->command) {
		for (w = cl->command; *w && n < sizeof(buf) - 1; w++)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s",
					      n ? " " : "", *w);
		return buf;
	}
	n = (size_t)snprintf(buf, sizeof(buf), "dlock %s", cl->sub->name);
	for (i = 0; i < cl->npos && n < sizeof(buf) - 1; i++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, " %s",
				      cl->pos[i]);
	return buf;
}

/* A NO BUSY's `key`=<ms> (delay_left_ms=: a lock in its lock-delay;
 * closed_ms=: grants closed after Redis forgot -- the server's last word
 * on it), for people, in buf. 0 if the reply does not say. */
static int busy_ms(const char *key, char *buf, size_t n)
{
	const char *p = strstr(dlock_last_error(), key);
	uint64_t ms;
	size_t len;

	if (!p)
		return 0;
	p += strlen(key);
	len = strcspn(p, " ");
	if (dl_parse_u64(p, len, &ms) || ms > INT64_MAX)
		return 0;
	held_text((int64_t)ms, buf, n);
	return 1;
}

void dl_cli_busy_msg(const char *name, int no_permit)
{
	const char *np = no_permit ? " (no permit free)" : "";
	struct dlock_holder h;
	char what[DL_DESC_CMD_MAX + 32], held[32];

	if (busy_ms(" closed_ms=", held, sizeof(held)) &&
	    dlock_busy_holder(&h) != 0) {
		dl_cli_msg("%s: grants are closed for %s (Redis lost leases "
			   "that may still be held; their holders may reclaim "
			   "them)%s",
			   name, held, np);
		return;
	}
	/* a server before descriptions, or a user who may not read it */
	if (dlock_busy_holder(&h) != 0) {
		if (busy_ms(" delay_left_ms=", held, sizeof(held)))
			dl_cli_msg("%s is in its lock-delay for %s%s", name,
				   held, np);
		else
			dl_cli_msg("%s is held by another owner%s", name, np);
		return;
	}
	/* "(pid 4242, make deploy)": what was said */
	what[0] = '\0';
	if (h.pid && h.cmd[0])
		snprintf(what, sizeof(what), " (pid %" PRIu32 ", %s)", h.pid,
			 h.cmd);
	else if (h.pid)
		snprintf(what, sizeof(what), " (pid %" PRIu32 ")", h.pid);
	else if (h.cmd[0])
		snprintf(what, sizeof(what), " (%s)", h.cmd);
	dl_cli_msg(
		"%s is held by %s%s%s%s%s%s%s%s%s", name, h.owner,
		h.user[0] ? " of user " : "", h.user, h.host[0] ? " on " : "",
		h.host, what, h.held_ms >= 0 ? " for " : "",
		h.held_ms >= 0 ? held_text(h.held_ms, held, sizeof(held)) : "",
		np);
}
