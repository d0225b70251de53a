/* SPDX-License-Identifier: MIT */
/*
 * record.h -- the text a lock is stored as in Redis, both ways.
 *
 * One value per lock, a field of its bucket hash (store.c, store layout
 * 2), readable with redis-cli HGET <prefix>rec:<b> <name>. Version 1, an
 * exclusive lock (limit 1, every holder and waiter exclusive):
 *
 *   dlock1
 *   H <token> <deadline_unix_ms> <count> <ttl_ms> <owner> [id=<tag>]
 *   W <ttl_ms> <wait_deadline_unix_ms|inf> <owner> [id=<tag>]
 *
 * Version 2, any lock: the lock's limit on the first line, and each
 * holder's and waiter's mode (x exclusive, s shared) before its owner:
 *
 *   dlock2 limit=<n>
 *   H <token> <deadline_unix_ms> <count> <ttl_ms> <x|s> <owner> [id=<tag>]
 *   W <ttl_ms> <wait_deadline_unix_ms|inf> <x|s> <owner> [id=<tag>]
 *
 * In either version the owner may be followed by k=<32 hex digits>, its
 * proof (locktab.h, Identity: a hash of the owner's secret, never the
 * secret), so that a restart or a take-over binds the owner again; a
 * daemon from before owner secrets reads such a line as unreadable (held,
 * never freed).
 *
 * An H line's owner (and proof) may then be followed by warn=<ms>: the
 * lease's warning (LOCK warn=), below its TTL, written only for a lease
 * that has one, so that a restored lease still warns. Daemons of 0.3 and
 * before read a line with a word they do not know as unreadable: such a
 * daemon (a downgrade, or an older standby taking over) holds that lock
 * for max_ttl under its reserved owner and logs the record -- nobody,
 * the lease's holder included, can use the lock meanwhile; nothing is
 * granted twice. No encoding would do better: those daemons read every
 * word of an H line strictly, and a lease they read without its warning
 * would never warn. Locks without a warning are written as before.
 *
 * A lock with a delay (LOCK delay=) is written in version 2, its first
 * line then ending with the delay, and "running" when the lock was in it
 * (the record of a lock with neither holder nor waiter lives for that):
 *
 *   dlock2 limit=<n> delay=<ms> [running]
 *
 * A restore honours a running delay whole, from the moment it reads it,
 * as it does a lease's TTL: no wall-clock time is trusted. Daemons of 0.3
 * and before read such a first line as unreadable (the lock held for
 * max_ttl, as above).
 *
 * the first line a version, then one H line per holder in grant order and
 * one W line per waiter in queue order, separated by LF. Deadlines are wall
 * clock (unix ms) so that they mean something to the next process: the
 * daemon's monotonic clock does not survive it.
 *
 * <owner> is the owner's key (locktab.h): its id, or <user>=<id> for an
 * owner of a user of the users file, so that the same id under two users
 * stays two owners across a restart. A record written before users
 * existed has plain ids: their owners are the default user's (the one
 * every client is without a users file). A daemon of version 0.2 reads a
 * <user>=<id> owner as an unreadable record: it holds the lock (never
 * frees it) until the record's leases could have ended.
 *
 * Both are read. A lock is written in version 1 when version 1 can say
 * it: a daemon from before version 2 (of the same store layout: daemons
 * of layout 1 cannot be active on layout 2, store_lead.c) then reads every
 * plain lock as it always did, and holds -- never frees -- a shared lock
 * or a semaphore it cannot read (its unreadable-record rule). No I/O
 * here.
 */
#ifndef DL_SERVER_RECORD_H
#define DL_SERVER_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "server/buf.h"
#include "server/locktab.h"

#define DL_RECORD_MAGIC	 "dlock1"
#define DL_RECORD_MAGIC2 "dlock2"

/* Serialize lk, a lock of t, into b (replacing its content). wall_off
 * converts the table's monotonic ms to unix ms (unix = mono + wall_off). */
int dl_record_format(const struct dl_locktab *t, const struct dl_lock *lk,
		     int64_t wall_off, struct dl_buf *b);

struct dl_record_item {
	char kind;	   /* 'H' holder, 'W' waiter, 'D' the lock's delay */
	uint8_t shared;	   /* its mode (version 2; 0 in version 1) */
	uint32_t limit;	   /* the lock's (1 in version 1) */
	uint64_t token;	   /* H */
	uint64_t deadline; /* unix ms; UINT64_MAX for a W with inf */
	uint64_t count;	   /* H */
	uint64_t ttl_ms;   /* H, W; D: the delay, ms */
	uint8_t delay_running; /* D: the lock was in its delay */
	struct dl_str owner;
	struct dl_str tag;
	uint8_t has_proof; /* k= was there: the owner's proof */
	uint8_t proof[DL_OWNER_PROOF_LEN];
	uint64_t warn_ms; /* H: warn=, 0 when absent */
};

/* Parse a record, calling cb for each item in order (a D item, if the
 * lock has a delay, first: it has no owner). DL_EPROTO if the
 * text is not a valid record (*why says where), or what cb returned if it
 * failed. `text` is not modified. */
int dl_record_parse(const char *text, size_t len,
		    int (*cb)(const struct dl_record_item *it, void *arg),
		    void *arg, const char **why);

#endif /* DL_SERVER_RECORD_H */
