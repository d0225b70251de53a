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
 * Version 3, a lock with a holder that described itself (HELLO host=
 * pid= cmd=, locktab_desc.h): version 2, and after a holder's owner (and its k=
 * and id=, below) when it was granted and what it said:
 *
 *   dlock3 limit=<n>
 *   H <token> <deadline> <count> <ttl_ms> <x|s> <owner> [k=] [id=]
 *     since=<unix_ms> [host=<host>] [pid=<pid>] [cmd=<cmd>]
 *   W <ttl_ms> <wait_deadline_unix_ms|inf> <x|s> <owner> [k=] [id=]
 *
 * (one line each). The values are as on the wire, already checked
 * (proto/desc.h: printable, no space), and checked again when read.
 * since= is written for every holder of such a record, described or
 * not; waiters keep no description (theirs is their connection's).
 *
 * In every version the owner may be followed by k=<32 hex digits>, its
 * proof (locktab.h, Identity: a hash of the owner's secret, never the
 * secret), so that a restart or a take-over binds the owner again; a
 * daemon from before owner secrets reads such a line as unreadable (held,
 * never freed).
 *
 * Words a later version adds. Versions 1 and 2 take no word they do not
 * know, and daemons up to 0.3 read every other version as unreadable:
 * they hold such a lock for max_ttl and never free it (their
 * unreadable-record rule). So from version 3 on, a key=<value> word after
 * the owner that this daemon does not know is skipped, not refused: a
 * later daemon may add what an older one can do without (a description,
 * a time) in version 3, and what a daemon must understand to keep a lock
 * safe (who may act on it, who holds it) comes with a new version, which
 * an older daemon holds as unreadable.
 *
 * A holder's line in version 3 may say warn=<ms>: the lease's warning
 * (LOCK warn=), below its TTL, so that a restored lease still warns. A
 * lock with such a holder is written in version 3 (since= and all). A
 * daemon that does not know warn= skips it (below): the lease is kept,
 * safely, and only its warning is lost.
 *
 * A holder's line in version 3 may also say req=<n>, the request id of
 * the lease's last grant or reentry that carried one (LOCK req=), so that
 * a request sent again to the next daemon after a take-over finds its
 * grant; notify=waiters when the lease asked to be told of waiters; and
 * value=<text>, the lease's value (LOCK value=: an elected leader's
 * address, shown to its followers).
 * A daemon that skips them keeps the lease, safely: a retry is then a
 * reentry, which the clients give back, and the holder hears of no
 * waiter.
 *
 * Version 4, a lock with a delay (LOCK delay=): version 3, its first line
 * then saying the delay, and "running" when the lock was in it (the
 * record of a lock with neither holder nor waiter lives for that):
 *
 *   dlock4 limit=<n> delay=<ms> [running]
 *   H ... (as version 3)
 *   W ... (as version 3)
 *
 * The delay is what a daemon must understand to keep the lock safe -- one
 * that skipped it would grant during the delay -- so it is a version, not
 * a skippable word: a daemon that reads at most version 3 reads a
 * version-4 record as unreadable and holds the lock for max_ttl (never
 * granting it meanwhile). Version 4 is written only for a lock with a delay; a
 * lock without one is written as before. A restore honours a running delay
 * whole, from the moment it reads it, as it does a lease's TTL: no
 * wall-clock time is trusted.
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
 * All four are read. A lock is written in the oldest version that can
 * say it: version 1 when it can, so that a daemon from before version 2
 * (of the same store layout: daemons of layout 1 cannot be active on
 * layout 2, store_lead.c) reads every plain lock as it always did,
 * version 3 only for a lock with a described holder or a warning, and
 * version 4 only for a lock with a delay. A daemon that cannot
 * read a record holds the lock -- never frees it -- until max_ttl: a 0.3
 * daemon (a standby left behind in a rolling upgrade, or a downgrade)
 * holds every lock a described client holds or with a warning, and a
 * daemon that reads at most version 3 every lock with a delay. No I/O
 * here.
 */
#ifndef DL_SERVER_RECORD_H
#define DL_SERVER_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "server/buf.h"
#include "server/locktab/locktab.h"

#define DL_RECORD_MAGIC	 "dlock1"
#define DL_RECORD_MAGIC2 "dlock2"
#define DL_RECORD_MAGIC3 "dlock3"
#define DL_RECORD_MAGIC4 "dlock4"

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
	/* version 3, H: what its holder said of itself (len 0, pid 0: not
	 * said), and since when it holds (unix ms; 0: not said) */
	struct dl_str host, cmd;
	uint32_t pid;
	uint64_t since;
	uint64_t warn_ms;    /* H: warn=, 0 when absent */
	uint64_t req;	     /* H: req=, 0 when absent */
	uint8_t notify;	     /* H: notify=waiters */
	struct dl_str value; /* H: value= (len 0: none) */
};

/* Parse a record, calling cb for each item in order (a D item, if the
 * lock has a delay, first: it has no owner). DL_EPROTO if the
 * text is not a valid record (*why says where), or what cb returned if it
 * failed. `text` is not modified. */
int dl_record_parse(const char *text, size_t len,
		    int (*cb)(const struct dl_record_item *it, void *arg),
		    void *arg, const char **why);

#endif /* DL_SERVER_RECORD_H */
