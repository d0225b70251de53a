/* SPDX-License-Identifier: MIT */
/*
 * dlock_cmds.c -- the one-step commands of dlock(1): lock, trylock, unlock,
 * refresh, check, status, stats, ping (dlock_cli.h).
 *
 * Each connects with the options of the command line (dl_cli_simple_connect:
 * no renewal), makes one or two libdlock calls, prints the result on stdout
 * -- one value per line, for scripts, except the human view of stats -- and
 * closes. A call refused because the server cannot act now (UNAVAILABLE:
 * a take-over, Redis down) is made again within --server-timeout
 * (dl_cli_retry).
 * Failures are reported with dl_cli_fail(), so that their exit codes are
 * those of every other command.
 *
 * Leases outlive these commands: `lock` leaves the lease held at the server
 * (not renewed) and prints its token; `unlock` and `refresh`, run later
 * from another process with the same owner id, act on it by (name, token)
 * with dlock_unlock_token() and dlock_refresh_token(), which need no lease
 * handle. A fresh client has none, so they are never refused for having
 * one.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/cli/dlock_cli.h"
#include "proto/desc.h"
#include "proto/proto.h"

/* ---- lock, trylock ------------------------------------------------------- */

/* lock a b c: all at once or none (dlock_acquire_all), one line "<name>
 * <token>" per lock, in the order given. */
static int lock_all(struct cli *cl, uint64_t wait)
{
	const char *names[DL_MULTI_MAX];
	dlock_lease *out[DL_MULTI_MAX];
	struct dlock_options o;
	dlock_client *c;
	size_t i, n = 0;
	int rc;

	names[n++] = cl->pos[0];
	for (i = 0; i < (size_t)cl->nmore; i++)
		names[n++] = cl->more[i];
	dl_cli_conn_options(cl, &o);
	o.reconnect = wait != 0; /* as for one lock, below */
	if ((rc = dl_cli_connect(cl, &o, &c)) != 0)
		return rc;
	if ((rc = dl_cli_acquire_all(c, cl, names, n, wait, out)) == 0) {
		for (i = 0; i < n; i++)
			printf("%s %" PRIu64 "\n", names[i],
			       dlock_lease_token(out[i]));
		if (!cl->owner_key)
			dl_cli_msg("%zu locks are held by owner %s for %" PRId64
				   " ms (not renewed); release each with: "
				   "DLOCK_OWNER=%s=%s dlock unlock <name> "
				   "<token>",
				   n, dlock_owner(c), dlock_lease_ttl(out[0]),
				   dlock_owner(c), dlock_owner_key(c));
		if (fflush(stdout) != 0) {
			dl_cli_msg("writing the tokens: %s", strerror(errno));
			rc = EXIT_SOFTWARE;
		}
	}
	dlock_close(c); /* leaves the leases held: they expire at the server */
	if (rc == EXIT_TEMPFAIL && (cl->seen & OPTB(OPT_CONFLICT_EXIT)))
		rc = cl->conflict_exit;
	return rc;
}

int dl_cli_lock(struct cli *cl)
{
	const char *name = cl->pos[0];
	struct dlock_options o;
	dlock_client *c;
	dlock_lease *l;
	uint64_t wait = strcmp(cl->sub->name, "trylock") == 0 ? 0 : cl->wait_ms;
	char w[DL_DURATION_TEXT_MAX], t[DL_DURATION_TEXT_MAX];
	int rc;

	if (cl->warn_ms && cl->warn_ms >= cl->ttl_ms)
		return dl_cli_usage_error(cl,
					  "--warn %s must be less than the "
					  "lease's --ttl (%s)",
					  dl_format_duration(cl->warn_ms, w),
					  dl_format_duration(cl->ttl_ms, t));
	if (cl->nmore > 0)
		return lock_all(cl, wait);
	dl_cli_conn_options(cl, &o);
	/* A waiter keeps its place across drops; a TRYLOCK is not sent
	 * again (one whose grant a drop hid would be granted again as a
	 * reentry, which libdlock refuses as another process's lease). A
	 * lease this owner holds already, from an earlier `dlock lock` or
	 * another process, is refused: exit 75 (dl_cli_acquire). */
	o.reconnect = wait != 0;
	if ((rc = dl_cli_connect(cl, &o, &c)) != 0)
		return rc;
	if ((rc = dl_cli_acquire(c, cl, name, wait, &l)) == 0) {
		printf("%" PRIu64 "\n", dlock_lease_token(l));
		/* the owner and its key: the lease's only proof of owner */
		if (!cl->owner_key)
			dl_cli_msg("%s is held by owner %s for %" PRId64
				   " ms (not renewed); release it with: "
				   "DLOCK_OWNER=%s=%s dlock unlock %s %" PRIu64,
				   name, dlock_owner(c), dlock_lease_ttl(l),
				   dlock_owner(c), dlock_owner_key(c), name,
				   dlock_lease_token(l));
		if (fflush(stdout) != 0) {
			dl_cli_msg("writing the token: %s", strerror(errno));
			rc = EXIT_SOFTWARE;
		}
	}
	dlock_close(c); /* leaves the lease held: it expires at the server */
	if (rc == EXIT_TEMPFAIL && (cl->seen & OPTB(OPT_CONFLICT_EXIT)))
		rc = cl->conflict_exit; /* -E, as flock -E */
	return rc;
}

/* ---- unlock, refresh: a lease by (name, token) -------------------------- */

static int parse_token(const struct cli *cl, uint64_t *token)
{
	if (dl_parse_u64(cl->pos[1], strlen(cl->pos[1]), token) != 0)
		return dl_cli_usage_error(
			cl, "bad token '%s' (a decimal number)", cl->pos[1]);
	return 0;
}

/* Why `verb` failed, and its exit code. */
static int token_failed(const struct cli *cl, int err, const char *verb)
{
	char what[DL_NAME_MAX + 32];

	if (err == DLOCK_ENOTHOLDER) {
		dl_cli_msg(
			"%s %s: not the holder: %s%s holds no lease %s of it "
			"(wrong owner or token, or it expired)%s",
			verb, cl->pos[0],
			cl->owner ? "owner " : "a new random owner",
			cl->owner ? cl->owner : "", cl->pos[1],
			cl->owner ? "" : "; give the holder's --owner");
		return EXIT_REFUSED;
	}
	snprintf(what, sizeof(what), "%s %s", verb, cl->pos[0]);
	return dl_cli_fail(err, what);
}

int dl_cli_unlock(struct cli *cl)
{
	struct dl_cli_retry retry;
	dlock_client *c;
	uint64_t token;
	uint32_t left = 0;
	int rc;

	if ((rc = parse_token(cl, &token)) != 0)
		return rc;
	if ((rc = dl_cli_simple_connect(cl, &c)) != 0)
		return rc;
	dl_cli_retry_init(&retry, cl, 0);
	while ((rc = dlock_unlock_token(c, cl->pos[0], token, &left)) != 0 &&
	       dl_cli_retry(&retry, rc))
		;
	if (rc != 0)
		rc = token_failed(cl, rc, "unlock");
	else if (left > 0)
		dl_cli_msg("%s is still held: %" PRIu32
			   " reentrant hold%s left",
			   cl->pos[0], left, left == 1 ? "" : "s");
	dlock_close(c);
	return rc;
}

int dl_cli_refresh(struct cli *cl)
{
	/* without --ttl, the lease's last TTL (the server keeps it) */
	int64_t ttl = cl->seen & OPTB(OPT_TTL) ? (int64_t)cl->ttl_ms : 0;
	int64_t granted = 0;
	struct dl_cli_retry retry;
	dlock_client *c;
	uint64_t token;
	int rc;

	if ((rc = parse_token(cl, &token)) != 0)
		return rc;
	if ((rc = dl_cli_simple_connect(cl, &c)) != 0)
		return rc;
	dl_cli_retry_init(&retry, cl, 0);
	while ((rc = dlock_refresh_token(c, cl->pos[0], token, ttl,
					 &granted)) != 0 &&
	       dl_cli_retry(&retry, rc))
		;
	ttl = granted;
	if (rc == 0)
		printf("%" PRId64 "\n", ttl);
	else
		rc = token_failed(cl, rc, "refresh");
	dlock_close(c);
	return rc;
}

/* ---- check, status, ping ------------------------------------------------- */

int dl_cli_check(struct cli *cl)
{
	struct dl_cli_retry retry;
	dlock_client *c;
	uint64_t token, current = 0;
	int64_t remaining = 0;
	int rc;

	if ((rc = parse_token(cl, &token)) != 0)
		return rc;
	if ((rc = dl_cli_simple_connect(cl, &c)) != 0)
		return rc;
	dl_cli_retry_init(&retry, cl, 0);
	while ((rc = dlock_check(c, cl->pos[0], token, &remaining, &current)) !=
		       0 &&
	       dl_cli_retry(&retry, rc))
		;
	if (rc == 0)
		printf("%" PRId64 "\n", remaining);
	else if (rc == DLOCK_ESTALE)
		printf("%" PRIu64 "\n", current);
	else
		rc = dl_cli_fail(rc, "check");
	dlock_close(c);
	return rc == DLOCK_ESTALE ? EXIT_REFUSED : rc;
}

int dl_cli_break(struct cli *cl)
{
	struct dl_cli_retry retry;
	dlock_client *c;
	uint64_t token, current = 0;
	int rc;

	if ((rc = parse_token(cl, &token)) != 0)
		return rc;
	if (!cl->reason)
		return dl_cli_usage_error(cl, "--reason is required: say why "
					      "(it is audited)");
	if (!cl->reason[0] || strlen(cl->reason) > DL_REASON_MAX ||
	    strpbrk(cl->reason, " \t\r\n"))
		return dl_cli_usage_error(
			cl, "--reason: 1 to %d printable bytes, no space",
			DL_REASON_MAX);
	if ((rc = dl_cli_simple_connect(cl, &c)) != 0)
		return rc;
	dl_cli_retry_init(&retry, cl, 0);
	while ((rc = dlock_break_reason(c, cl->pos[0], token, cl->reason,
					&current)) != 0 &&
	       dl_cli_retry(&retry, rc))
		;
	if (rc == 0) {
		dl_cli_msg("broke the lease %" PRIu64 " of %s", token,
			   cl->pos[0]);
	} else if (rc == DLOCK_ESTALE) {
		printf("%" PRIu64 "\n", current);
		dl_cli_msg("%s: %" PRIu64
			   " holds nothing (the holder's token is "
			   "printed, 0 if free)",
			   cl->pos[0], token);
	} else {
		rc = dl_cli_fail(rc, "break");
	}
	dlock_close(c);
	return rc == DLOCK_ESTALE ? EXIT_REFUSED : rc;
}

/* status: the holders and waiters, collected for printing after the
 * status lines */
struct member {
	struct dlock_holder h; /* its strings point to the copies below */
	char owner[DL_OWNER_MAX + 1];
	char user[DL_USER_MAX + 1];
	char host[DL_DESC_HOST_MAX + 1];
	char cmd[DL_DESC_CMD_MAX + 1];
};

struct members {
	struct member *v;
	size_t n, cap;
};

static void member_cb(const struct dlock_holder *h, void *arg)
{
	struct members *m = arg;
	struct member *e;

	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 16;
		struct member *v = realloc(m->v, cap * sizeof(*v));

		if (!v)
			return;
		m->v = v;
		m->cap = cap;
	}
	e = &m->v[m->n++];
	e->h = *h;
	snprintf(e->owner, sizeof(e->owner), "%s", h->owner);
	snprintf(e->user, sizeof(e->user), "%s", h->user);
	snprintf(e->host, sizeof(e->host), "%s", h->host);
	snprintf(e->cmd, sizeof(e->cmd), "%s", h->cmd);
	e->h.owner = e->owner;
	e->h.user = e->user;
	e->h.host = e->host;
	e->h.cmd = e->cmd;
}

/* A description's text for a person (stdout a terminal): as it is,
 * single-quoted as a shell would quote it when it has a space or a quote.
 * The server's descriptions are printable ASCII only (proto/desc.h), so
 * nothing here can drive the terminal. */
static void print_quoted(const char *key, const char *s)
{
	printf(" %s=", key);
	if (!s[strcspn(s, " '\"\\$`")]) {
		fputs(s, stdout);
		return;
	}
	putchar('\'');
	for (; *s; s++)
		if (*s == '\'')
			fputs("'\\''", stdout);
		else
			putchar(*s);
	putchar('\'');
}

/* Who it is, in the text view: key=value words as the wire has them (a
 * space is %20), so that each value stays one word for scripts; on a
 * terminal, as it was said, quoted (print_quoted). */
static void print_desc(const struct dlock_holder *h)
{
	char v[DL_DESC_CMD_MAX + 1];
	size_t n;

	if (isatty(STDOUT_FILENO)) {
		if (!h->waiter && h->held_ms >= 0)
			printf(" held_ms=%" PRId64, h->held_ms);
		if (h->user[0])
			printf(" user=%s", h->user);
		if (h->host[0])
			print_quoted("host", h->host);
		if (h->pid)
			printf(" pid=%" PRIu32, h->pid);
		if (h->cmd[0])
			print_quoted("cmd", h->cmd);
		return;
	}

	if (!h->waiter && h->held_ms >= 0)
		printf(" held_ms=%" PRId64, h->held_ms);
	if (h->user[0])
		printf(" user=%s", h->user);
	if (h->host[0]) {
		n = dl_desc_encode(h->host, strlen(h->host), v,
				   DL_DESC_CMD_MAX);
		printf(" host=%.*s", (int)n, v);
	}
	if (h->pid)
		printf(" pid=%" PRIu32, h->pid);
	if (h->cmd[0]) {
		n = dl_desc_encode(h->cmd, strlen(h->cmd), v, DL_DESC_CMD_MAX);
		printf(" cmd=%.*s", (int)n, v);
	}
}

static void print_member_json(const struct dlock_holder *h)
{
	fputs("{\"owner\": ", stdout);
	dl_cli_json_str(stdout, h->owner);
	if (h->waiter) {
		printf(", \"position\": %" PRIu32 ", \"wait_ms\": ",
		       h->position);
		if (h->wait_ms < 0)
			fputs("null", stdout);
		else
			printf("%" PRId64, h->wait_ms);
		printf(", \"restored\": %s", h->restored ? "true" : "false");
	} else {
		printf(", \"token\": \"%" PRIu64 "\", \"ttl_ms\": %" PRId64
		       ", \"count\": %" PRIu32,
		       h->token, h->ttl_ms, h->count);
	}
	printf(", \"mode\": \"%s\"", h->shared ? "shared" : "exclusive");
	if (!h->waiter && h->held_ms >= 0)
		printf(", \"held_ms\": %" PRId64, h->held_ms);
	fputs(", \"user\": ", stdout);
	dl_cli_json_str_or_null(stdout, h->user);
	fputs(", \"host\": ", stdout);
	dl_cli_json_str_or_null(stdout, h->host);
	fputs(", \"pid\": ", stdout);
	if (h->pid)
		printf("%" PRIu32, h->pid);
	else
		fputs("null", stdout);
	fputs(", \"cmd\": ", stdout);
	dl_cli_json_str_or_null(stdout, h->cmd);
	fputs("}", stdout);
}

static void print_member(const struct dlock_holder *h)
{
	if (h->waiter) {
		printf("waiter owner=%s position=%" PRIu32, h->owner,
		       h->position);
		if (h->wait_ms < 0)
			fputs(" wait_ms=inf", stdout);
		else
			printf(" wait_ms=%" PRId64, h->wait_ms);
	} else {
		printf("holder owner=%s token=%" PRIu64 " ttl_ms=%" PRId64
		       " count=%" PRIu32,
		       h->owner, h->token, h->ttl_ms, h->count);
	}
	printf(" mode=%s%s", h->shared ? "shared" : "exclusive",
	       h->restored ? " restored" : "");
	print_desc(h);
	putchar('\n');
}

/* A value as the wire says it (one word: a space is %20), between pre
 * and post. */
static void print_value(const char *pre, const char *v, const char *post)
{
	char w[DL_VALUE_MAX + 1];

	w[dl_desc_encode(v, strlen(v), w, DL_VALUE_MAX)] = '\0';
	printf("%s%s%s", pre, w, post);
}

int dl_cli_leader(struct cli *cl)
{
	struct dlock_status st;
	struct dl_cli_retry retry;
	dlock_client *c;
	int rc;

	if ((rc = dl_cli_simple_connect(cl, &c)) != 0)
		return rc;
	dl_cli_retry_init(&retry, cl, 0);
	while ((rc = dlock_status(c, cl->pos[0], &st)) != 0 &&
	       dl_cli_retry(&retry, rc))
		;
	dlock_close(c);
	if (rc != 0)
		return dl_cli_fail(rc, "leader");
	if (cl->json) {
		fputs("{\"name\": ", stdout);
		dl_cli_json_str(stdout, cl->pos[0]);
		fputs(", \"leader\": ", stdout);
		dl_cli_json_str_or_null(stdout, st.held ? st.owner : "");
		if (st.held)
			printf(", \"term\": \"%" PRIu64 "\"", st.token);
		else
			fputs(", \"term\": null", stdout);
		fputs(", \"value\": ", stdout);
		dl_cli_json_str_or_null(stdout, st.held ? st.value : "");
		fputs("}\n", stdout);
	} else if (st.held) {
		printf("%s\n", st.value);
	}
	if (!st.held) {
		if (!cl->json)
			dl_cli_msg("%s has no leader", cl->pos[0]);
		return 1;
	}
	return 0;
}

int dl_cli_status(struct cli *cl)
{
	struct members m = {0};
	struct dl_cli_retry retry;
	struct dlock_status st;
	dlock_client *c;
	size_t i;
	int rc, first;

	if ((rc = dl_cli_simple_connect(cl, &c)) != 0)
		return rc;
	dl_cli_retry_init(&retry, cl, 0);
	while ((rc = dlock_status(c, cl->pos[0], &st)) != 0 &&
	       dl_cli_retry(&retry, rc))
		;
	while (rc == 0 &&
	       (rc = dlock_holders(c, cl->pos[0], member_cb, &m, NULL, NULL)) !=
		       0 &&
	       dl_cli_retry(&retry, rc))
		;
	if (rc == 0 && cl->json) {
		fputs("{\"name\": ", stdout);
		dl_cli_json_str(stdout, cl->pos[0]);
		printf(", \"state\": \"%s\", \"token\": \"%" PRIu64 "\""
		       ", \"ttl_ms\": %" PRId64 ", \"count\": %" PRIu32
		       ", \"owner\": ",
		       st.held ? "held" : "free", st.token, st.ttl_ms,
		       st.count);
		dl_cli_json_str_or_null(stdout, st.owner);
		printf(", \"waiters\": %" PRIu32 ", \"mode\": ", st.waiters);
		dl_cli_json_str_or_null(stdout, st.mode);
		printf(", \"limit\": %" PRIu32 ", \"holders\": %" PRIu32,
		       st.limit, st.holders);
		if (st.delay_ms) /* a lock with a lock-delay */
			printf(", \"delay_ms\": %" PRId64
			       ", \"delay_left_ms\": %" PRId64,
			       st.delay_ms, st.delay_left_ms);
		if (st.closed_ms) /* grants closed: Redis forgot */
			printf(", \"closed_ms\": %" PRId64, st.closed_ms);
		if (st.value[0]) { /* the first holder's: a leader's */
			fputs(", \"value\": ", stdout);
			dl_cli_json_str(stdout, st.value);
		}
		fputs(", \"holders_list\": [", stdout);
		for (i = 0, first = 1; i < m.n; i++)
			if (!m.v[i].h.waiter) {
				fputs(first ? "" : ", ", stdout);
				print_member_json(&m.v[i].h);
				first = 0;
			}
		fputs("], \"queue\": [", stdout);
		for (i = 0, first = 1; i < m.n; i++)
			if (m.v[i].h.waiter) {
				fputs(first ? "" : ", ", stdout);
				print_member_json(&m.v[i].h);
				first = 0;
			}
		fputs("], \"cluster\": ", stdout);
		dl_cli_json_str_or_null(stdout, dlock_cluster(c));
		fputs("}\n", stdout);
	} else if (rc == 0) {
		printf("name=%s\nstate=%s\ntoken=%" PRIu64 "\nttl_ms=%" PRId64
		       "\ncount=%" PRIu32 "\nowner=%s\nwaiters=%" PRIu32
		       "\nmode=%s\nlimit=%" PRIu32 "\nholders=%" PRIu32
		       "\ncluster=%s\n",
		       cl->pos[0], st.held ? "held" : "free", st.token,
		       st.ttl_ms, st.count, st.owner[0] ? st.owner : "-",
		       st.waiters, st.mode[0] ? st.mode : "-", st.limit,
		       st.holders,
		       dlock_cluster(c)[0] ? dlock_cluster(c) : "-");
		if (st.delay_ms)
			printf("delay_ms=%" PRId64 "\ndelay_left_ms=%" PRId64
			       "\n",
			       st.delay_ms, st.delay_left_ms);
		if (st.closed_ms)
			printf("closed_ms=%" PRId64 "\n", st.closed_ms);
		if (st.value[0])
			print_value("value=", st.value, "\n");
		for (i = 0; i < m.n; i++)
			print_member(&m.v[i].h);
	} else {
		rc = dl_cli_fail(rc, "status");
	}
	free(m.v);
	dlock_close(c);
	return rc;
}

/* ping and stats ask the daemon they are given, whatever its role: a
 * health check may ask a standby directly (it answers both). Given a
 * cluster (--servers), they ask its active daemon, as every command. */
static int health_connect(const struct cli *cl, dlock_client **c)
{
	struct dlock_options o;
	int rc;

	dl_cli_conn_options(cl, &o);
	o.standby_ok = !cl->servers;
	if ((rc = dl_cli_connect(cl, &o, c)) == 0 &&
	    strcmp(dlock_server_role(*c), "standby") == 0 && !cl->json &&
	    !cl->raw)
		dl_cli_msg("%s is a standby: the active daemon serves the "
			   "locks",
			   dl_cli_where(cl));
	return rc;
}

int dl_cli_ping(struct cli *cl)
{
	struct timespec t0, t1;
	dlock_client *c;
	int rc;

	if ((rc = health_connect(cl, &c)) != 0)
		return rc;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = dlock_ping(c);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc == 0)
		printf("%.3f ms\ncluster=%s\n",
		       (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
			       (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
		       dlock_cluster(c)[0] ? dlock_cluster(c) : "-");
	else
		rc = dl_cli_fail(rc, "ping");
	dlock_close(c);
	return rc;
}

/* ---- stats --------------------------------------------------------------- */

enum stat_fmt { SF_NUM, SF_MS, SF_US, SF_BOOL, SF_ROLE, SF_CLOSED };

/* How the human view shows the keys it knows (every key of this version's
 * server/stats.c); a key it does not know goes under "Other", as sent. */
static const struct stat_row {
	const char *key;
	const char *section;
	const char *label;
	enum stat_fmt fmt;
} stat_rows[] = {
	{"uptime_ms", "Server", "uptime", SF_MS},
	{"role_active", "Server", "role", SF_ROLE},
	{"commands", "Server", "commands", SF_NUM},
	{"leader_epoch", "Cluster", "leadership epoch", SF_NUM},
	{"partition_map_epoch", "Cluster", "partition map epoch", SF_NUM},
	{"partition_slots", "Cluster", "partition's slots", SF_NUM},
	{"partition_locks_moved_out", "Cluster",
	 "locks moved to other partitions", SF_NUM},
	{"partition_locks_imported", "Cluster",
	 "locks imported from other partitions", SF_NUM},
	{"leader_lease_left_ms", "Cluster", "leadership left", SF_MS},
	{"leader_renewals", "Cluster", "renewals", SF_NUM},
	{"leader_takeovers", "Cluster", "take-overs", SF_NUM},
	{"leader_depositions", "Cluster", "depositions", SF_NUM},
	{"connections", "Connections", "open", SF_NUM},
	{"connections_total", "Connections", "accepted", SF_NUM},
	{"connections_rejected", "Connections", "rejected (limit)", SF_NUM},
	{"connections_evicted", "Connections",
	 "closed (unauthenticated, for a new one)", SF_NUM},
	{"output_overflows", "Connections", "closed (unread output)", SF_NUM},
	{"output_budget_closes", "Connections", "closed (output budget)",
	 SF_NUM},
	{"output_buffered_bytes", "Connections", "unread output (bytes)",
	 SF_NUM},
	{"request_timeouts", "Connections", "closed (request too slow)",
	 SF_NUM},
	{"idle_timeouts", "Connections", "closed (idle)", SF_NUM},
	{"auth_timeouts", "Connections", "closed (no AUTH in time)", SF_NUM},
	{"auth_failures", "Connections", "failed AUTH", SF_NUM},
	{"owner_denials", "Connections", "owner refused (no key)", SF_NUM},
	{"tls_handshakes", "Connections", "TLS handshakes", SF_NUM},
	{"tls_failures", "Connections", "TLS failures", SF_NUM},
	{"watches", "Connections", "watches (WATCH)", SF_NUM},
	{"watch_events", "Connections", "watch events sent", SF_NUM},
	{"watch_events_dropped", "Connections", "watch events dropped (unread)",
	 SF_NUM},
	{"watch_events_capped", "Connections",
	 "watch events dropped (user's budget)", SF_NUM},
	{"locks", "Locks", "locks", SF_NUM},
	{"leases", "Locks", "leases held", SF_NUM},
	{"waiters", "Locks", "waiting", SF_NUM},
	{"owners", "Locks", "owners", SF_NUM},
	{"grants", "Locks", "grants", SF_NUM},
	{"reentries", "Locks", "reentries", SF_NUM},
	{"releases", "Locks", "releases", SF_NUM},
	{"expiries", "Locks", "expiries", SF_NUM},
	{"breaks", "Locks", "broken (BREAK)", SF_NUM},
	{"timeouts", "Locks", "wait timeouts", SF_NUM},
	{"refreshes", "Locks", "refreshes", SF_NUM},
	{"cancels", "Locks", "cancels", SF_NUM},
	{"revokes", "Locks", "grants withdrawn", SF_NUM},
	{"multi_locks", "Locks", "multi-locks granted", SF_NUM},
	{"deadlocks", "Locks", "refused: would deadlock", SF_NUM},
	{"deadlock_walks_capped", "Locks", "deadlock checks capped", SF_NUM},
	{"retries", "Locks", "requests sent again", SF_NUM},
	{"last_token", "Locks", "last token", SF_NUM},
	{"wait_ms_count", "Locks", "grants timed", SF_NUM},
	{"wait_ms_sum", "Locks", "total wait", SF_MS},
	{"hold_ms_count", "Locks", "leases ended", SF_NUM},
	{"hold_ms_sum", "Locks", "total hold", SF_MS},
	{"contended_locks_1", "Contention", "locks with 1 waiter", SF_NUM},
	{"contended_locks_2_5", "Contention", "with 2 to 5", SF_NUM},
	{"contended_locks_6_10", "Contention", "with 6 to 10", SF_NUM},
	{"contended_locks_11_100", "Contention", "with 11 to 100", SF_NUM},
	{"contended_locks_101_1000", "Contention", "with 101 to 1000", SF_NUM},
	{"contended_locks_over_1000", "Contention", "with over 1000", SF_NUM},
	{"store_available", "Persistence", "available", SF_BOOL},
	{"store_batches", "Persistence", "batches", SF_NUM},
	{"store_writes", "Persistence", "writes", SF_NUM},
	{"store_round_trips", "Persistence", "round trips", SF_NUM},
	{"store_latency_us_avg", "Persistence", "latency avg", SF_US},
	{"store_latency_us_max", "Persistence", "latency max", SF_US},
	{"store_backlog", "Persistence", "backlog", SF_NUM},
	{"store_reconnects", "Persistence", "reconnects", SF_NUM},
	{"store_failures", "Persistence", "failures", SF_NUM},
	{"store_replica_waits", "Persistence", "replica WAITs", SF_NUM},
	{"store_replica_shortfalls", "Persistence", "replicas short", SF_NUM},
	{"store_failover_holds", "Persistence", "Sentinel fail-overs", SF_NUM},
	{"redis_aof", "Persistence", "Redis AOF on", SF_BOOL},
	{"redis_fsync_always", "Persistence", "Redis fsync always", SF_BOOL},
	{"redis_evicting", "Persistence", "Redis may evict", SF_BOOL},
	{"redis_nondurable_allowed", "Persistence", "non-durable allowed",
	 SF_BOOL},
	{"redis_went_back", "Persistence", "Redis went back", SF_NUM},
	{"peers_attested", "Persistence", "lapses the peers vouched for",
	 SF_NUM},
	{"peers_bounded", "Persistence", "lapses they bounded", SF_NUM},
	{"peers_unattested", "Persistence", "lapses they could not", SF_NUM},
	{"grants_closed_ms", "Persistence", "grants closed for", SF_MS},
	{"grants_closed_bound", "Persistence", "grants closed", SF_CLOSED},
	{"reclaims", "Persistence", "leases reclaimed", SF_NUM},
	{"reclaims_refused", "Persistence", "reclaims refused", SF_NUM},
	{"lease_horizon_ms", "Persistence", "lease horizon", SF_MS},
	{"standbys_counted", "Cluster", "standbys counted", SF_NUM},
	{"standbys_dropped", "Cluster", "standbys dropped", SF_NUM},
};

#define NSTAT_ROWS (sizeof(stat_rows) / sizeof(stat_rows[0]))

static const char *const stat_sections[] = {
	"Server",     "Cluster",     "Connections", "Locks",
	"Contention", "Persistence", "Errors",	    "Other",
};

/* Bytes of a partition's id kept (dlockd's are at most 32). */
#define STAT_PART_MAX 64

struct stat_kv {
	char *key, *value;
	const char *section;
	char label[DL_STATS_LINE_MAX];
	enum stat_fmt fmt;
	char part[STAT_PART_MAX + 1]; /* --all: its partition ("" none) */
};

struct stat_list {
	struct stat_kv *kv;
	size_t n, cap;
	int raw;
	int json; /* how many printed so far, plus one */
	int nomem;
	int opened;		      /* --all --json: a partition's object */
	char part[STAT_PART_MAX + 1]; /* --all --json: which */
};

/* --all: the partition as printed ("-": a service without partitions) */
static const char *part_word(const char *partition)
{
	return partition[0] ? partition : "-";
}

/* --all --json: {"<partition>": {...}, ...}, an object per partition */
static void json_part(struct stat_list *sl, const char *partition)
{
	if (sl->opened && strcmp(sl->part, partition) == 0)
		return;
	fputs(sl->opened ? "}, " : "{", stdout);
	dl_cli_json_str(stdout, part_word(partition));
	fputs(": ", stdout);
	snprintf(sl->part, sizeof(sl->part), "%s", partition);
	sl->opened = 1;
	sl->json = 1; /* the next key opens the partition's object */
}

static void on_stat(const char *key, const char *value, void *arg);

static void on_part_stat(const char *partition, const char *key,
			 const char *value, void *arg)
{
	struct stat_list *sl = arg;

	if (sl->raw) {
		printf("%s %s %s\n", part_word(partition), key, value);
		return;
	}
	if (sl->json)
		json_part(sl, partition);
	on_stat(key, value, arg);
	if (!sl->json && !sl->nomem)
		snprintf(sl->kv[sl->n - 1].part, sizeof(sl->kv[0].part), "%s",
			 partition);
}

static void on_stat(const char *key, const char *value, void *arg)
{
	struct stat_list *sl = arg;
	struct stat_kv *kv, *grown;
	size_t i;

	if (sl->raw) {
		printf("%s %s\n", key, value);
		return;
	}
	if (sl->json) {
		/* values are decimal numbers (PROTOCOL.md, STATS); one past
		 * 2^53 (a token) is a string: JSON readers keep numbers as
		 * doubles, and jq 1.6 rounded 1795629885420000014 to
		 * ...000000 */
		fputs(sl->json++ == 1 ? "{" : ", ", stdout);
		dl_cli_json_str(stdout, key);
		if (!value[0] || strspn(value, "0123456789") != strlen(value))
			fputs(": null", stdout);
		else if (strlen(value) > 15)
			printf(": \"%s\"", value);
		else
			printf(": %s", value);
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
	case SF_ROLE:
		snprintf(out, cap, "%s", v ? "active" : "standby");
		break;
	case SF_CLOSED:
		snprintf(out, cap, "%s",
			 v == 0	  ? "no"
			 : v == 1 ? "until the lease horizon (Redis went back)"
				  : "for max_ttl (Redis went back; nothing "
				    "bounds the leases told)");
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

/* The human view of kv[from..to) (one daemon's): its sections in order,
 * each under its name, the labels aligned across all of them. */
static void stats_human(const struct stat_list *sl, size_t from, size_t to,
			size_t width, int *sections)
{
	char value[64];
	size_t i, k;
	int any;

	for (k = 0; k < sizeof(stat_sections) / sizeof(*stat_sections); k++) {
		any = 0;
		for (i = from; i < to; i++) {
			if (strcmp(sl->kv[i].section, stat_sections[k]) != 0)
				continue;
			if (!any++)
				printf("%s%s\n", (*sections)++ ? "\n" : "",
				       stat_sections[k]);
			stat_value(&sl->kv[i], value, sizeof(value));
			printf("  %-*s  %s\n", (int)width, sl->kv[i].label,
			       value);
		}
	}
}

/* stats --all, for people: each partition's daemon under "Partition <id>"
 * (none when the service has no partitions). */
static void stats_human_all(const struct stat_list *sl, size_t width)
{
	size_t from, to;
	int sections = 0;

	for (from = 0; from < sl->n; from = to) {
		for (to = from + 1;
		     to < sl->n &&
		     strcmp(sl->kv[to].part, sl->kv[from].part) == 0;
		     to++)
			;
		if (sl->kv[from].part[0]) {
			printf("%sPartition %s\n", sections ? "\n" : "",
			       sl->kv[from].part);
			sections = 0;
			printf("\n");
		}
		stats_human(sl, from, to, width, &sections);
	}
}

int dl_cli_stats(struct cli *cl)
{
	struct stat_list sl = {.raw = cl->raw, .json = cl->json};
	dlock_client *c;
	size_t i, width = 0;
	int rc, sections = 0;

	/* --all asks the service (the active daemon of each partition);
	 * without, the daemon given, whatever its role */
	rc = cl->all ? dl_cli_simple_connect(cl, &c) : health_connect(cl, &c);
	if (rc != 0)
		return rc;
	if (cl->all)
		rc = dlock_stats_all(c, on_part_stat, &sl);
	else
		rc = dlock_stats(c, on_stat, &sl);
	dlock_close(c);
	if (rc != 0) {
		rc = dl_cli_fail(rc, "stats");
	} else if (sl.nomem) {
		dl_cli_msg("stats: out of memory");
		rc = EXIT_SOFTWARE;
	} else if (sl.json && cl->all) {
		fputs(!sl.opened ? "{}\n" : "}}\n", stdout);
	} else if (sl.json) {
		fputs(sl.json == 1 ? "{}\n" : "}\n", stdout);
	} else if (!sl.raw) {
		for (i = 0; i < sl.n; i++)
			if (strlen(sl.kv[i].label) > width)
				width = strlen(sl.kv[i].label);
		if (cl->all)
			stats_human_all(&sl, width);
		else
			stats_human(&sl, 0, sl.n, width, &sections);
	}
	for (i = 0; i < sl.n; i++) {
		free(sl.kv[i].key);
		free(sl.kv[i].value);
	}
	free(sl.kv);
	return rc;
}

/* ---- list ---------------------------------------------------------------- */

void dl_cli_json_str(FILE *f, const char *s)
{
	/* names and owners are printable ASCII: only " and \ need escapes;
	 * anything else is escaped anyway, to stay valid JSON */
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20 || ch > 0x7e)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

void dl_cli_json_str_or_null(FILE *f, const char *s)
{
	if (s[0])
		dl_cli_json_str(f, s);
	else
		fputs("null", f);
}

/* A page of LOCKS at most, in a row. */
#define LIST_PAGE DL_LOCKS_PAGE_MAX
/* --by-waiters without --max */
#define LIST_TOP 10
/* A listing refused because the last one was just made (ERR LIMIT): try
 * again this often, at most this many times. */
#define LIST_RETRY_MS	 50
#define LIST_RETRY_TIMES 200

struct list_run {
	const struct cli *cl;
	uint64_t shown;
	char last[DL_NAME_MAX + 1];
};

static void ttl_text(int64_t ms, char *out, size_t cap)
{
	if (ms >= 3600000)
		snprintf(out, cap, "%" PRId64 "h%02" PRId64 "m", ms / 3600000,
			 ms / 60000 % 60);
	else if (ms >= 60000)
		snprintf(out, cap, "%" PRId64 "m%02" PRId64 "s", ms / 60000,
			 ms / 1000 % 60);
	else
		snprintf(out, cap, "%" PRId64 ".%03" PRId64 "s", ms / 1000,
			 ms % 1000);
}

static void on_lock(const char *name, const struct dlock_status *st, void *arg)
{
	struct list_run *lr = arg;
	char ttl[32], mode[24];

	snprintf(lr->last, sizeof(lr->last), "%s", name);
	if (lr->cl->json) {
		fputs(lr->shown ? ",\n  {\"name\": " : "\n  {\"name\": ",
		      stdout);
		dl_cli_json_str(stdout, name);
		printf(", \"state\": \"%s\", \"owner\": ",
		       st->held ? "held" : "free");
		dl_cli_json_str_or_null(stdout, st->owner);
		printf(", \"token\": \"%" PRIu64 "\", \"ttl_ms\": %" PRId64
		       ", \"count\": %" PRIu32 ", \"waiters\": %" PRIu32
		       ", \"mode\": ",
		       st->token, st->ttl_ms, st->count, st->waiters);
		dl_cli_json_str_or_null(stdout, st->mode);
		printf(", \"limit\": %" PRIu32 ", \"holders\": %" PRIu32 "}",
		       st->limit, st->holders);
	} else {
		/* MODE: the holders' (a semaphore with its limit); owner,
		 * token and TTL are the first holder's, HOLDERS says how
		 * many there are */
		if (!lr->shown)
			printf("%-24s %-5s %-9s %-24s %-20s %10s %7s %7s\n",
			       "NAME", "STATE", "MODE", "OWNER", "TOKEN", "TTL",
			       "HOLDERS", "WAITERS");
		ttl_text(st->ttl_ms, ttl, sizeof(ttl));
		if (strcmp(st->mode, "semaphore") == 0)
			snprintf(mode, sizeof(mode), "sem/%" PRIu32, st->limit);
		else
			snprintf(mode, sizeof(mode), "%s",
				 st->mode[0] ? st->mode : "-");
		printf("%-24s %-5s %-9s %-24s %-20" PRIu64 " %10s %7" PRIu32
		       " %7" PRIu32 "\n",
		       name, st->held ? "held" : "free", mode,
		       st->owner[0] ? st->owner : "-", st->token,
		       st->held ? ttl : "-", st->holders, st->waiters);
	}
	lr->shown++;
}

int dl_cli_list(struct cli *cl)
{
	struct list_run lr = {.cl = cl};
	const char *prefix = cl->npos ? cl->pos[0] : NULL;
	uint64_t want = cl->max		 ? cl->max
			: cl->by_waiters ? LIST_TOP
					 : UINT64_MAX;
	uint64_t more = 0;
	struct dl_cli_retry retry;
	dlock_client *c;
	unsigned page;
	int rc, tries = 0;

	if ((rc = dl_cli_simple_connect(cl, &c)) != 0)
		return rc;
	if (cl->json)
		fputs("{\"locks\": [", stdout);
	dl_cli_retry_init(&retry, cl, 0);
	for (;;) {
		page = want - lr.shown < LIST_PAGE ? (unsigned)(want - lr.shown)
						   : LIST_PAGE;
		rc = dlock_locks(c, prefix, lr.shown ? lr.last : NULL, page,
				 cl->by_waiters, on_lock, &lr, &more);
		if (rc == DLOCK_ELIMIT && ++tries < LIST_RETRY_TIMES) {
			/* the server spaces listings by what they cost */
			struct timespec ts = {0, LIST_RETRY_MS * 1000000L};

			nanosleep(&ts, NULL);
			continue;
		}
		if (dl_cli_retry(&retry, rc))
			continue;
		if (rc != 0 || more == 0 || lr.shown >= want || cl->by_waiters)
			break;
		tries = 0;
	}
	dlock_close(c);
	if (rc != 0) {
		if (cl->json)
			fputs("]}\n", stdout);
		return dl_cli_fail(rc, "list");
	}
	if (cl->json)
		printf("%s], \"more\": %" PRIu64 "}\n", lr.shown ? "\n" : "",
		       more);
	else if (more)
		dl_cli_msg("%" PRIu64 " more not listed (--max)", more);
	return 0;
}
