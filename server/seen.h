/* SPDX-License-Identifier: MIT */
/*
 * seen.h -- what this daemon has seen Redis hold, to notice when Redis
 * went back.
 *
 * Redis may forget what it acknowledged, without a word: FLUSHALL, an
 * eviction, a restart from an older AOF or snapshot, a replica promoted
 * without the last writes, an empty Redis put in place of the old one.
 * A daemon that then loads what Redis has and grants on it gives a lock
 * to a second owner. Two numbers only ever grow in a Redis that keeps
 * what it acknowledged (store_batch.c):
 *
 *   epoch  the writer fence, raised by every take of the leadership;
 *   gen    the write generation, raised by every write function call and
 *          every take.
 *
 * The store notes the largest of each it has read in any reply (its own
 * writes, renewals, a standby's looks) and hands them to every take of
 * the leadership, whose function compares them with what Redis holds
 * (store_lead.c): a Redis at an older epoch, or at the same epoch with a
 * lower generation, went back. (The generation counts within an epoch:
 * an active daemon that wrote its table back to a Redis that forgot
 * starts a new epoch, above every one seen, with a generation that may
 * be below what a standby saw before -- found by the fault campaign: the
 * standby then took the rewritten Redis for one that went back.)
 *
 * A third number is kept for the tokens: the largest token mark seen
 * (read in a reply, or sent by this daemon). Tokens never go backwards
 * because a start goes above the stored mark and above the clock; a Redis
 * that went back lost the mark, and a daemon whose wall clock ran ahead
 * (its tokens are ahead of the clock's floor) may have issued tokens above
 * what the next daemon's clock gives. So a start also goes above the mark
 * it saw (store_load.c).
 *
 * They are also kept in a small file in state_dir, one per keyspace
 * (dlockd.state for the default one; dl_seen_init), so that a restarted
 * daemon remembers them:
 *
 *   dlockd-state 1
 *   redis <the Redis it describes: address or Sentinel master, db, prefix>
 *   epoch <n>
 *   gen <n>
 *   mark <n>
 *   cluster <id>        (when known: store_cluster.c)
 *
 * rewritten (a new file renamed over the old one) at most every
 * DL_SEEN_SAVE_MS, and at once, with an fsync, when the epoch, the mark or
 * the cluster id changes (rare: a take, a link, a million grants); never
 * lower than what the file held (two nodes of one keyspace may share the
 * directory).
 * A file that describes another Redis, or that cannot be read, is
 * ignored with a warning: what it says is not about this Redis. Blocking
 * file I/O on the loop, rare and small.
 *
 * Owns nothing but its path; a struct embedded in the store.
 */
#ifndef DL_SERVER_SEEN_H
#define DL_SERVER_SEEN_H

#include <stddef.h>
#include <stdint.h>

#include "proto/limits.h"

/* The longest the file lags what the daemon saw (the epoch and the mark
 * excepted: written at once). A Redis that went back by less than this
 * (plus a store tick) while the daemon crashed is not noticed at its
 * restart. Found by the fault campaign at 1000 ms: Redis restarted from a
 * copy of its AOF taken a second before the daemon's kill -9 was not
 * noticed, and a released lease came back with its token, below one
 * issued after it. A write of a few dozen bytes and a rename (no fsync:
 * a crash of the process keeps the page cache) ten times a second while
 * writes go on. */
#define DL_SEEN_SAVE_MS 100
/* Room for the Redis description in the file. */
#define DL_SEEN_ID_MAX 512

struct dl_seen {
	uint64_t epoch, gen, mark;		     /* the largest seen */
	uint64_t saved_epoch, saved_gen, saved_mark; /* the file's */
	uint64_t saved_ms;	 /* monotonic: when it was written */
	char path[4096];	 /* "" : no file */
	char id[DL_SEEN_ID_MAX]; /* the Redis it describes */
	char cluster[DL_CLUSTER_ID_LEN + 1]; /* its cluster id; "" unknown */
	char saved_cluster[DL_CLUSTER_ID_LEN + 1]; /* the file's */
};

/* Set up s for the keyspace (Redis database db, key prefix) and read its
 * file in dir if there is one (dir NULL or "": no file): dlockd.state for
 * database 0 and the prefix "dlock:", else dlockd.<db>.<prefix>.state
 * (the prefix %-escaped but for letters, digits, - and _); a
 * dlockd.state of an earlier version that describes this keyspace is
 * read in its absence. Never fails: a file that cannot be read or
 * describes another Redis is logged and ignored. */
void dl_seen_init(struct dl_seen *s, const char *dir, int db,
		  const char *prefix);
/* Raise what was seen (0: nothing new of that one). */
void dl_seen_note(struct dl_seen *s, uint64_t epoch, uint64_t gen);
void dl_seen_note_mark(struct dl_seen *s, uint64_t mark);
/* The cluster id this Redis holds (a valid id: store_cluster.c). */
void dl_seen_note_cluster(struct dl_seen *s, const char *id);
/* Write the file if what was seen changed: at once when the epoch, the
 * mark or the cluster id did,
 * else once DL_SEEN_SAVE_MS have passed since the last write (now_ms,
 * monotonic). A failure is logged (once per kind) and retried later. */
void dl_seen_save(struct dl_seen *s, uint64_t now_ms);

#endif /* DL_SERVER_SEEN_H */
