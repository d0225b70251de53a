/* SPDX-License-Identifier: MIT */
/*
 * watch.c -- make bench-watch: what a change of a lock costs the daemon's
 * loop to find its watchers (server/watchreg.c), with N watchers of other
 * names and M watched prefixes around, against what a scan of every
 * watch would cost. Each watch has a watcher of its own, as if each were
 * a connection. The names of the events are taken in turn from 1024, so
 * that no lookup is answered by a warm cache line alone.
 *
 *   watch [events]    (default 1000000 per row)
 *
 * One line per case: the watches in the registry, what the event's name
 * matches, and ns per event (the lookup and the hand-over of each match;
 * formatting the line, once per event, and writing it to each watcher's
 * connection come on top).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/watchreg.h"

#define NAMES 1024

static struct dl_watchreg *reg;
static struct dl_watcher *ws;
static size_t nws;
static char names[NAMES][DL_NAME_MAX + 1];
static volatile size_t sink;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_match(struct dl_watcher *w, void *arg)
{
	(void)arg;
	sink += w->n;
}

/* A fresh registry with room for n watches, one watcher each. */
static void fresh(size_t n)
{
	size_t i;

	for (i = 0; reg && i < nws; i++)
		dl_watchreg_leave(reg, &ws[i]);
	dl_watchreg_free(reg);
	free(ws);
	reg = dl_watchreg_new(0x5eed, n + 1);
	ws = calloc(n + 1, sizeof(*ws));
	nws = 0;
	if (!reg || !ws) {
		fputs("watch: out of memory\n", stderr);
		exit(1);
	}
}

static void add(const char *key, int prefix)
{
	struct dl_str k = {key, strlen(key)};

	if (dl_watchreg_add(reg, &ws[nws++], k, prefix, 1) != 0) {
		fputs("watch: cannot add\n", stderr);
		exit(1);
	}
}

/* ns per event for the names fmt % i (i < NAMES), padded with '-' to
 * `pad` bytes. */
static double per_event(const char *fmt, size_t pad, size_t events)
{
	uint64_t t0;
	size_t i, len;

	for (i = 0; i < NAMES; i++) {
		len = (size_t)snprintf(names[i], sizeof(names[i]), fmt, i);
		if (len < pad) {
			memset(names[i] + len, '-', pad - len);
			names[i][pad] = '\0';
		}
	}
	t0 = now_ns();
	for (i = 0; i < events; i++) {
		const char *n = names[i % NAMES];

		dl_watchreg_match(reg, (struct dl_str){n, strlen(n)}, on_match,
				  NULL);
	}
	return (double)(now_ns() - t0) / (double)events;
}

static void row(const char *what, size_t watches, const char *event, double ns)
{
	printf("watch case=%-22s watches=%-7zu event=%-18s ns_per_event=%.0f\n",
	       what, watches, event, ns);
}

/* Exact names: N watchers of other names, an event on none of them or
 * on one. */
static void exact(size_t n, size_t events)
{
	char key[64];
	size_t i;

	fresh(n);
	for (i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "jobs/nightly-%zu", i);
		add(key, 0);
	}
	row("names", n, "unwatched-name",
	    per_event("other/name-%zu", 0, events));
	if (n >= NAMES)
		row("names", n, "watched-name",
		    per_event("jobs/nightly-%zu", 0, events));
}

/* M prefixes of `lens` distinct lengths (the same length when 1), an
 * event under none of them or under one; with `scan`, the same event
 * checked against every prefix instead. */
static void prefixes(size_t m, size_t lens, size_t events)
{
	char key[300], what[32];
	size_t i, len;

	fresh(m);
	for (i = 0; i < m; i++) {
		/* "p<i>/" padded with '-' to its length: 8 + i % lens */
		len = 8 + i % lens;
		snprintf(key, sizeof(key), "p%06zu/", i);
		memset(key + 8, '-', len > 8 ? len - 8 : 0);
		key[len] = '\0';
		add(key, 1);
	}
	snprintf(what, sizeof(what), "prefixes,lengths=%zu", lens);
	/* names as long as the longest prefix: every length is looked up */
	row(what, m, "under-none", per_event("q%06zu/", 8 + lens, events));
	row(what, m, "under-one", per_event("p%06zu/", 8 + lens, events));
}

/* What matching costs without an index: every watched prefix compared
 * with the name (as a list of watches per connection would be walked). */
static void scan(size_t m, size_t events)
{
	char(*pfx)[24] = malloc(m * sizeof(*pfx));
	uint64_t t0;
	size_t i, j, hits = 0;

	if (!pfx)
		exit(1);
	for (i = 0; i < m; i++)
		snprintf(pfx[i], sizeof(pfx[i]), "p%06zu/", i);
	for (i = 0; i < NAMES; i++)
		snprintf(names[i], sizeof(names[i]), "q%06zu/x", i);
	t0 = now_ns();
	for (i = 0; i < events; i++) {
		const char *n = names[i % NAMES];

		for (j = 0; j < m; j++)
			hits += strncmp(n, pfx[j], 8) == 0;
	}
	sink += hits;
	row("scan-every-prefix", m, "under-none",
	    (double)(now_ns() - t0) / (double)events);
	free(pfx);
}

int main(int argc, char **argv)
{
	size_t events = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
	size_t ns[] = {0, 1000, 100000}, ms[] = {10, 1000, 100000};
	size_t lens[] = {1, 16, 64, 247};
	size_t i;

	if (events == 0)
		events = 1;
	for (i = 0; i < 3; i++)
		exact(ns[i], events);
	for (i = 0; i < 3; i++)
		prefixes(ms[i], 1, events);
	for (i = 0; i < 4; i++)
		prefixes(1000, lens[i], events);
	for (i = 0; i < 3; i++)
		scan(ms[i], ms[i] >= 100000 ? events / 100 : events);
	fresh(0);
	dl_watchreg_free(reg);
	free(ws);
	return 0;
}
