/* SPDX-License-Identifier: MIT */
/*
 * dlock_watchcmd.c -- `dlock watch` and `dlock wait-free` (dlock_cli.h):
 * observers of locks, through libdlock's watches (dlock.h).
 *
 * Both connect with reconnects on, so that a drop or a fail-over to
 * another daemon of --servers is followed: libdlock watches again on the
 * new connection and says so (a RESUMED event). What changed while the
 * client was away is not known, which `dlock watch` prints as such and
 * `wait-free` settles by the state the new watch reports.
 *
 * wait-free never polls: one WATCH, then it sleeps until an event says
 * the lock has no holder left, or --timeout runs out.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "client/cli/dlock_cli.h"
#include "proto/desc.h"

/* `dlock watch` stops after a signal within this (its wait for events
 * is this long at most). */
#define WATCH_STOP_MS 200

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static const char *const kinds[] = {
	[DLOCK_WATCH_GRANTED] = "granted",
	[DLOCK_WATCH_RELEASED] = "released",
	[DLOCK_WATCH_EXPIRED] = "expired",
	[DLOCK_WATCH_BROKEN] = "broken",
	[DLOCK_WATCH_WITHDRAWN] = "withdrawn",
	[DLOCK_WATCH_OVERFLOW] = "overflow",
	[DLOCK_WATCH_RESUMED] = "resumed",
	[DLOCK_WATCH_REFUSED] = "refused",
	[DLOCK_WATCH_VALUE] = "value",
};

/* One event on stdout: "<what> <name> <owner> <token> holders=<n>
 * [user=<u>] [broken_by=<u>]", "overflow missed=<n>", "resumed <pattern>
 * [holders=<n>]"; or one JSON object (tokens as strings: they pass 2^53). */
static void print_event(const struct dlock_watch_event *ev, int json)
{
	const char *what = kinds[ev->kind];

	if (json) {
		printf("{\"event\": \"%s\"", what);
		if (ev->kind == DLOCK_WATCH_OVERFLOW) {
			printf(", \"missed\": %" PRIu64 "}\n", ev->missed);
			return;
		}
		fputs(ev->kind == DLOCK_WATCH_RESUMED ? ", \"pattern\": "
						      : ", \"name\": ",
		      stdout);
		dl_cli_json_str(stdout, ev->name);
		if (ev->kind == DLOCK_WATCH_RESUMED) {
			if (ev->holders >= 0)
				printf(", \"holders\": %" PRId64, ev->holders);
			fputs("}\n", stdout);
			return;
		}
		fputs(", \"owner\": ", stdout);
		dl_cli_json_str(stdout, ev->owner);
		printf(", \"token\": \"%" PRIu64 "\", \"holders\": %" PRId64,
		       ev->token, ev->holders);
		if (ev->user[0]) {
			fputs(", \"user\": ", stdout);
			dl_cli_json_str(stdout, ev->user);
		}
		if (ev->broken_by[0]) {
			fputs(", \"broken_by\": ", stdout);
			dl_cli_json_str(stdout, ev->broken_by);
		}
		if (ev->value[0]) {
			fputs(", \"value\": ", stdout);
			dl_cli_json_str(stdout, ev->value);
		}
		fputs("}\n", stdout);
		return;
	}
	if (ev->kind == DLOCK_WATCH_OVERFLOW) {
		printf("overflow missed=%" PRIu64 "\n", ev->missed);
		return;
	}
	if (ev->kind == DLOCK_WATCH_RESUMED) {
		printf("resumed %s", ev->name);
		if (ev->holders >= 0)
			printf(" holders=%" PRId64, ev->holders);
		putchar('\n');
		return;
	}
	printf("%s %s %s %" PRIu64 " holders=%" PRId64, what, ev->name,
	       ev->owner, ev->token, ev->holders);
	if (ev->user[0])
		printf(" user=%s", ev->user);
	if (ev->broken_by[0])
		printf(" broken_by=%s", ev->broken_by);
	if (ev->value[0]) { /* one word, as the wire says it */
		char w[DLOCK_VALUE_MAX + 1];

		w[dl_desc_encode(ev->value, strlen(ev->value), w,
				 DLOCK_VALUE_MAX)] = '\0';
		printf(" value=%s", w);
	}
	putchar('\n');
}

/* Connect with reconnects (the watch follows a fail-over). */
static int connect_following(const struct cli *cl, dlock_client **c)
{
	struct dlock_options o;

	dl_cli_conn_options(cl, &o);
	o.reconnect = 1;
	return dl_cli_connect(cl, &o, c);
}

int dl_cli_watch(struct cli *cl)
{
	struct dlock_watch_event ev;
	struct sigaction sa;
	dlock_client *c;
	int rc;

	if ((rc = connect_following(cl, &c)) != 0)
		return rc;
	if ((rc = dlock_watch(c, cl->pos[0], NULL)) != 0) {
		rc = dl_cli_fail(rc, "watch");
		dlock_close(c);
		return rc;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	while (!stop) {
		rc = dlock_watch_next(c, &ev, WATCH_STOP_MS);
		if (rc == DLOCK_ETIMEDOUT) {
			rc = 0;
			continue;
		}
		if (rc != 0)
			break;
		if (ev.kind == DLOCK_WATCH_REFUSED) {
			dl_cli_msg("watch %s: %s after a reconnect", ev.name,
				   dlock_strerror(ev.error));
			rc = ev.error;
			break;
		}
		print_event(&ev, cl->json);
		/* a reader at the other end of a pipe sees each at once */
		if (fflush(stdout) != 0) {
			rc = 0; /* the reader left: done */
			break;
		}
	}
	dlock_close(c);
	return rc == 0 ? EXIT_OK : dl_cli_fail(rc, "watch");
}

/* An event that leaves the lock without a holder (or a state, on
 * resuming, that has none). */
static int frees(const struct dlock_watch_event *ev)
{
	return ev->holders == 0 && ev->kind != DLOCK_WATCH_OVERFLOW &&
	       ev->kind != DLOCK_WATCH_REFUSED;
}

int dl_cli_wait_free(struct cli *cl)
{
	const char *name = cl->pos[0];
	size_t len = strlen(name);
	struct dlock_watch_event ev;
	struct dlock_status st;
	int64_t holders = -1, deadline = -1, left;
	dlock_client *c;
	int rc, timed_out = 0;

	if (len > 0 && name[len - 1] == '*')
		return dl_cli_usage_error(cl, "wait-free takes a lock name, "
					      "not a prefix");
	if (cl->timeout_ms > 0)
		deadline = dlock_now_ms() + cl->timeout_ms;
	if ((rc = connect_following(cl, &c)) != 0)
		return rc;
	rc = dlock_watch(c, name, &holders);
	while (rc == 0 && holders != 0) {
		left = DLOCK_WAIT_FOREVER;
		if (deadline >= 0 && (left = deadline - dlock_now_ms()) <= 0) {
			timed_out = 1;
			break;
		}
		if ((rc = dlock_watch_next(c, &ev, left)) != 0) {
			timed_out = rc == DLOCK_ETIMEDOUT;
			break;
		}
		if (ev.kind == DLOCK_WATCH_REFUSED) {
			rc = ev.error;
		} else if (ev.kind == DLOCK_WATCH_OVERFLOW) {
			/* events were lost: ask */
			if ((rc = dlock_status(c, name, &st)) == 0)
				holders = st.holders;
		} else if (frees(&ev)) {
			holders = 0;
		}
	}
	dlock_close(c);
	if (timed_out) {
		dl_cli_msg("wait-free %s: still held after --timeout", name);
		return EXIT_TEMPFAIL;
	}
	return rc == 0 ? EXIT_OK : dl_cli_fail(rc, "wait-free");
}
