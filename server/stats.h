/* SPDX-License-Identifier: MIT */
/*
 * stats.h -- every number the daemon reports, in one list.
 *
 * STATS (cmd.c) and the Prometheus page (metrics.c) both read the daemon's
 * counters through dl_stats_collect(), so a counter added here appears in
 * both, with the same name. A stat is a counter (only grows) or a gauge;
 * a stat with a label value is one series of a labelled family (the
 * errors by code): STATS shows it as "<name>_<label>", Prometheus as
 * "dlockd_<name>_total{<label_key>="<label>"}".
 */
#ifndef DL_SERVER_STATS_H
#define DL_SERVER_STATS_H

#include <stdint.h>

struct dl_server;

enum dl_stat_kind { DL_STAT_COUNTER, DL_STAT_GAUGE };

struct dl_stat {
	const char *name;
	uint64_t value;
	enum dl_stat_kind kind;
	const char *help;	 /* one line, for Prometheus # HELP: in the
				    metric's unit (a key in ms or us is
				    a metric in seconds) */
	const char *label_key;	 /* NULL, or e.g. "code" */
	const char *label;	 /* the label's value */
	unsigned stats_only : 1; /* Prometheus has it as a histogram */
};

typedef void (*dl_stat_fn)(const struct dl_stat *s, void *arg);

/* Calls fn for every stat, in a fixed order. */
void dl_stats_collect(struct dl_server *srv, dl_stat_fn fn, void *arg);

#endif /* DL_SERVER_STATS_H */
