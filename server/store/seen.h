/* SPDX-License-Identifier: MIT */
/*
 * seen.h -- what this daemon knows of a keyspace outside Redis: what it
 * saw Redis hold (to notice that Redis went back), how long a lease it
 * told of may still be believed (the horizon), and any closure in force.
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
 * Besides those:
 *
 *   mark     the largest token mark seen or sent: tokens never go below
 *            it, whatever Redis lost (store_load.c);
 *   leadinst the process (its instance, store_lead.c) that took it:
 *            what a restart would ask its peers about (docs/design.md,
 *            "The peers' attestation": not asked yet);
 *   lead     the largest epoch a daemon writing this file took itself:
 *            when it equals `epoch`, nobody else took the leadership
 *            after the last take made from this file's directory, so
 *            the horizon below bounds every lease told (docs/design.md,
 *            "A Redis that forgets");
 *   horizon  the lease horizon this daemon reserved (as the active, made
 *            durable here before a reply that needs it is released:
 *            store_horizon.c) or read (as a standby);
 *   leading  until when this daemon's leadership was last confirmed (0
 *            once it resigned or stepped down): a restart on the same
 *            boot before that end knows nobody else can have taken over
 *            since, so its horizon bounds every lease told;
 *   closed   the end of a closure in force, and why;
 *   run      the last Redis process this daemon was sure of (its run_id
 *            and replication id: dl__run_id_of; 0: not known): a
 *            restart that finds another cannot take `gen` for all Redis
 *            held (store_horizon.c, dl__hz_redis_run);
 *   proofkey the keyspace's proof key (proof.h), and the one before it:
 *            the file is the daemon's and 0600, in a 0700 directory.
 *
 * The horizon and the closure are ends on the monotonic clock in memory,
 * and remaining times in the file, stamped with the boot id and
 * CLOCK_BOOTTIME of the write: a reader on the same boot subtracts the
 * exact time since (a wall-clock step changes nothing), a reader after a
 * reboot counts the downtime as zero (it can only close longer). No wall
 * clock decides how long a closure lasts.
 *
 * The file, in state_dir, belongs to one keyspace of one Redis: it is
 * named by the keyspace's cluster id, dlockd.<cluster>.state, and says
 * which Redis it was written for (its address made canonical: every
 * address its host name resolves to, a socket's real path, a Sentinel
 * master's name) and which database and prefix:
 *
 *   dlockd-state 2
 *   redis tcp:127.0.0.1:6379,tcp:[::1]:6379
 *   keyspace db=0 prefix=dlock:
 *   cluster <32 hex digits>
 *   epoch <n>
 *   gen <n>
 *   mark <n>
 *   lead <n>
 *   leadinst <n>
 *   boot <boot id> <CLOCK_BOOTTIME ms>
 *   horizon <ms remaining>
 *   leading <ms remaining>
 *   closed <ms remaining> <why>
 *   run <n>
 *   proofkey <64 hex digits> [<the one before>]
 *
 * Which file is this keyspace's is decided when Redis's cluster id is
 * first read (dl_seen_bind): the file of that id; with no id in Redis
 * (FLUSHALL, a new Redis), a file written for this address and keyspace
 * (its id goes back to Redis); a file for this address and keyspace that
 * names another id than Redis holds is a CLUSTER MISMATCH. So two
 * daemons on two Redis servers sharing a state_dir never read each
 * other's file (found from outside: the second adopted the first's id and
 * marks, and each closed the other for a day). Files of the first
 * version (dlockd.state, dlockd.<db>.<prefix>.state: no address) are read
 * for their keyspace when no file of this version matches, and removed
 * once merged into one.
 *
 * Written (a new file renamed over the old one, under a lock: several
 * daemons of one keyspace may share the directory, and merge, never
 * lower, what the others wrote), with an fsync of the file and the
 * directory, at once when the epoch, the mark, the lead, the cluster id,
 * the horizon or the closure changed, else at most every DL_SEEN_SAVE_MS
 * while the generation grows.
 * A file that cannot be written is removed rather than left stale: a
 * stale horizon would later be taken for a bound.
 *
 * Owns nothing but its paths; a struct embedded in the store.
 */
#ifndef DL_SERVER_SEEN_H
#define DL_SERVER_SEEN_H

#include <stddef.h>
#include <stdint.h>

#include "proto/limits.h"
#include "server/config.h"
#include "server/proof.h"

/* The longest the file lags what the daemon saw of the generation (the
 * rest is written at once). A Redis that went back by less than this
 * (plus a store tick) while the daemon crashed is not noticed at its
 * restart by the generation: only by its `run` (a restarted Redis is
 * another process: store_horizon.c, dl__hz_redis_run; found from outside,
 * a restart granted x again 0.1 s into a 5 s lease lost that way). Found
 * by the fault campaign at 1000 ms: Redis restarted from a
 * copy of its AOF taken a second before the daemon's kill -9 was not
 * noticed, and a released lease came back with its token, below one
 * issued after it. A write of a few hundred bytes, an fsync and a rename
 * ten times a second while writes go on. */
#define DL_SEEN_SAVE_MS 100
/* Room for the Redis description (its canonical addresses). */
#define DL_SEEN_ID_MAX 512
/* Room for why a closure is in force. */
#define DL_SEEN_WHY_MAX 200
/* State files of one directory looked at when choosing this keyspace's. */
#define DL_SEEN_FILES_MAX 64

struct dl_seen_vals {
	uint64_t epoch, gen, mark, lead;
	uint64_t leadinst; /* the instance (store_lead.c, a 64-bit random
			      number) of the process that took `lead` */
	uint64_t horizon;  /* monotonic end (0: none) */
	uint64_t leading;  /* the end of this daemon's leadership as last
			      confirmed (monotonic; 0: not leading) */
	uint64_t closed;   /* monotonic end (0: none) */
	uint64_t run;	   /* the Redis process last known (0: none) */
	char why[DL_SEEN_WHY_MAX];
	char cluster[DL_CLUSTER_ID_LEN + 1]; /* "" : not known */
	/* the keyspace's proof key (proof.h), hex, and the one before it
	 * (proofs made under it are still checked); "" : none */
	char proofkey[DL_PROOF_KEY_HEX + 1];
	char proofkey_old[DL_PROOF_KEY_HEX + 1];
};

struct dl_seen {
	struct dl_seen_vals v;	   /* what this daemon knows */
	struct dl_seen_vals saved; /* what the file holds since its last
				      write or read */
	struct dl_seen_vals file;  /* what the file held when bound */
	int has_file;		   /* bound to a file that existed */
	int dir_used;	   /* the directory was written by a daemon before (its
			      lock file is there) */
	uint64_t saved_ms; /* monotonic: when it was last written */
	int bound;	   /* the keyspace's file is chosen */
	int memory;	   /* persist = none: dlockd.memory.state */
	int failed;	   /* the last write failed and the file could
			      not be removed: nothing is durable */
	int removed;	   /* ... and it was removed: a restart knows
			      nothing */
	char dir[4096];	   /* "" : no state_dir */
	char path[4096];   /* "" : no file (yet) */
	char legacy[4096]; /* a version-1 file merged in: removed at
			      the first write */
	char where[DL_SEEN_ID_MAX];    /* the Redis, canonical */
	char keyspace[DL_SEEN_ID_MAX]; /* "db=<n> prefix=<p>" */
};

/* Set s up for the keyspace (Redis database db, key prefix) of the Redis
 * `where` (canonical: dl_seen_where) in dir (NULL or "": no file). The
 * file is chosen later (dl_seen_bind), once Redis's cluster id is known.
 * where NULL: memory only (persist = none): the file dlockd.memory.state
 * keeps the token mark, and is read now. Never fails. */
void dl_seen_init(struct dl_seen *s, const char *dir, const char *where, int db,
		  const char *prefix);
/* The canonical description of a Redis for the file: "unix:<real path>",
 * "sentinel:<master>", "cluster:<host>:<port>,..." for each seed node of
 * a Redis Cluster (a file matches when one seed is shared), or
 * "tcp:<addr>:<port>,..." for every address the host resolves to
 * (blocking: called once, at start). */
void dl_seen_where(char *out, size_t len, const struct dl_redis_addr *a);
/* Choose the keyspace's file now that Redis's cluster id is read (NULL:
 * Redis holds none) and merge what it holds into s->v; afterwards (and
 * at once, if s already knows an id) only check that Redis's id is the
 * known one. 0, or DL_EBADARG and why (a CLUSTER MISMATCH: this daemon,
 * or a file of this Redis and keyspace, knows another id). */
int dl_seen_bind(struct dl_seen *s, const char *redis_id, char *why,
		 size_t len);
/* The cluster id this daemon is of from now on (a new one it wrote, or
 * the one Redis held): names the file. */
void dl_seen_note_cluster(struct dl_seen *s, const char *id);
/* Raise what was seen (0: nothing new of that one). */
void dl_seen_note(struct dl_seen *s, uint64_t epoch, uint64_t gen);
void dl_seen_note_mark(struct dl_seen *s, uint64_t mark);
/* This daemon's process `inst` took the leadership at `epoch`. */
void dl_seen_note_lead(struct dl_seen *s, uint64_t epoch, uint64_t inst);
/* The Redis process (dl__run_id_of) this daemon knows from now on. */
void dl_seen_note_run(struct dl_seen *s, uint64_t run);
/* The horizon reaches the monotonic `end`. */
void dl_seen_note_horizon(struct dl_seen *s, uint64_t end);
/* The proof key Redis holds (hex): the one this daemon knows from now on
 * (a different one it knew is kept as the one before). */
void dl_seen_note_proofkey(struct dl_seen *s, const char *hex);
/* A closure until the monotonic `end` (0: none), for `why`. */
void dl_seen_note_closed(struct dl_seen *s, uint64_t end, const char *why);
/* Write the file (fsynced) if what is known changed: at once when
 * anything but the generation did, or `sync`; else once DL_SEEN_SAVE_MS
 * have passed since the last write (now_ms, monotonic). 0 when the file
 * (or its absence) is as durable as asked, DL_EUNAVAILABLE while it
 * cannot be made so (logged once; retried at the next call). */
int dl_seen_save(struct dl_seen *s, uint64_t now_ms, int sync);
/* The horizon and the token mark a restart would find (the file's, or,
 * without a file, everything known: nothing outside Redis to wait for). */
uint64_t dl_seen_durable_horizon(const struct dl_seen *s);
uint64_t dl_seen_durable_mark(const struct dl_seen *s);
/* This daemon's leadership is confirmed until the monotonic `until` (0:
 * it is not the active one any more). */
void dl_seen_note_leading(struct dl_seen *s, uint64_t until);
/* The file holds a bound of every lease told: its lead is its epoch (the
 * last take from its directory was the last take it saw), and that
 * leadership had not lapsed by now (same boot: nobody else can have
 * taken over since). */
int dl_seen_file_proves(const struct dl_seen *s);

/* ---- for the tests (test_seen.c) -------------------------------------- */

/* The remaining time stamped with (boot, boottime) as a remaining time on
 * this machine now (now_boot: its CLOCK_BOOTTIME ms). */
uint64_t dl__seen_remaining(uint64_t left, const char *boot, uint64_t boottime,
			    const char *now_boot_id, uint64_t now_boot);
/* This machine's boot id ("" if unknown) and CLOCK_BOOTTIME in ms. */
const char *dl__seen_boot_id(void);
uint64_t dl__seen_boottime_ms(void);

#endif /* DL_SERVER_SEEN_H */
