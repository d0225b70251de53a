/* SPDX-License-Identifier: MIT */
/*
 * watchreg.h -- who watches which lock names: exact names and name
 * prefixes, each with the watchers that asked for it.
 *
 * Knows no sockets and no protocol: a watcher is a struct the caller
 * embeds (a connection's, server/watch.c) and gets back from
 * dl_watchreg_match(). The registry owns the keys and subscriptions it
 * allocates; the caller owns its watchers, and must take each one out
 * (dl_watchreg_leave) before it frees it.
 *
 * Cost. A change of a lock is matched against the registry once, however
 * many watchers there are:
 *   - exact names: one lookup of the name in a hash table;
 *   - prefixes: one lookup per distinct prefix LENGTH that is watched (a
 *     bit per length, 0..DL_NAME_MAX - 1), of the name's first bytes of
 *     that length, in a second hash table. A hundred watchers of "jobs/"
 *     and one of "ci/" cost two lookups, not a hundred and one compares:
 *     the cost of an event grows with the lengths in use (at most 255),
 *     never with the number of connections or prefixes.
 * Then each matching watcher is handed over once (a mark per match stops
 * a watcher of both "jobs/a" and "jobs/" from getting it twice).
 * tests/bench/watch.c measures it.
 *
 * Bounded: at most `max` subscriptions in all (dl_watchreg_new), and
 * as many as the caller says for each watcher (dl_watchreg_add).
 *
 * Not thread-safe (the daemon's one loop).
 */
#ifndef DL_SERVER_WATCHREG_H
#define DL_SERVER_WATCHREG_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

struct dl_watchreg;
struct dl_wsub;

/* A watcher: embedded by the caller, zeroed before its first watch. Its
 * fields are the registry's, read-only outside. */
struct dl_watcher {
	struct dl_wsub *subs; /* its watches, newest first */
	uint32_t n;	      /* how many */
	uint64_t mark;	      /* the last match that handed it over */
};

/* NULL on out of memory. `seed` randomises the hash tables (names come
 * from clients); `max` bounds the subscriptions of all watchers. */
struct dl_watchreg *dl_watchreg_new(uint64_t seed, size_t max);
/* Frees the registry and whatever watches are left (their watchers are
 * not touched: they must not be used with it again). NULL: a no-op. */
void dl_watchreg_free(struct dl_watchreg *r);

/* w watches `key`: the name itself, or with `prefix` every name that
 * starts with it (len 0: every name). 0 when added, 1 when w watched it
 * already (nothing changes), DL_ELIMIT when w has `own_max` watches or
 * the registry `max` (w->n tells which), DL_EBADARG for a key longer
 * than DL_NAME_MAX, DL_ENOMEM. key is copied. */
int dl_watchreg_add(struct dl_watchreg *r, struct dl_watcher *w,
		    struct dl_str key, int prefix, uint32_t own_max);
/* w stops watching `key` (as added): 1 if it did, 0 if it did not. */
int dl_watchreg_remove(struct dl_watchreg *r, struct dl_watcher *w,
		       struct dl_str key, int prefix);
/* w stops watching everything. */
void dl_watchreg_leave(struct dl_watchreg *r, struct dl_watcher *w);

/* Subscriptions of all watchers. */
size_t dl_watchreg_count(const struct dl_watchreg *r);

/* fn(w, arg) once for each watcher with a watch that `name` matches,
 * in no particular order; returns how many. fn must not add or remove
 * watches. */
typedef void (*dl_watch_fn)(struct dl_watcher *w, void *arg);
size_t dl_watchreg_match(struct dl_watchreg *r, struct dl_str name,
			 dl_watch_fn fn, void *arg);

#endif /* DL_SERVER_WATCHREG_H */
