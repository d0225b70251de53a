/* SPDX-License-Identifier: MIT */
/*
 * store_lead.h -- the leadership of a keyspace (store_lead.c):
 * which daemon may write, its epoch (the writer fence), and what this
 * daemon saw Redis hold. Private to the store's files (store_private.h).
 */
#ifndef DL_SERVER_STORE_LEAD_H
#define DL_SERVER_STORE_LEAD_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "server/config.h"
#include "server/store/seen.h"
#include "server/store/store.h"

struct dl_store;

/* The leadership (store_lead.c owns it; store.c's link sends its calls):
 * whether this daemon is the active one, who it is, and what it saw of
 * Redis, to notice when Redis went back. */
struct store_lead {
	int active; /* this daemon is the active one: it may write */
	char node[DL_NODE_ID_MAX + 1];
	char self_addr[DL_ADVERTISE_MAX + 1];
	char lease_arg[24]; /* leader_lease in ms, decimal */
	char client_name[8 + DL_NODE_ID_MAX + 1]; /* dlockd:<node> */
	char instance[17];	   /* random, this process's: in the record */
	char leader_inst[17];	   /* a standby: the instance of the active
				      it last saw on a Redis not behind */
	struct dl_leader leader;   /* the active as last seen (or this one) */
	struct dl_seen seen;	   /* what Redis was seen to hold (seen.h) */
	char seen_arg[2][24];	   /* its epoch and gen: for the leadership
				      function's arguments */
	uint64_t went_back;	   /* times Redis was found behind it */
	uint64_t next_ms;	   /* next renewal (active) or look (standby) */
	int busy;		   /* a renewal or look awaits its reply */
	uint64_t lapse_wait_until; /* mono: a standby waits before taking
				      over a Redis that went back */
	uint64_t sent_ms;	   /* when the last take or look was sent */
};

enum lead_mode { LEAD_LOOK, LEAD_RENEW, LEAD_TAKE, LEAD_START, LEAD_RESIGN };

struct lead_reply {
	int ok;		/* taken or renewed (else st->leader is the holder) */
	int behind;	/* Redis holds less than st->seen (seen.h) */
	int lagged;	/* renew: Redis went back under this daemon (its
			   record or fence lost, nobody else took since):
			   take it again with the table kept (behind is
			   set too) */
	uint64_t epoch; /* ok: this daemon's epoch, the fence */
	int kept;	/* take: nobody else wrote since `mine` */
	int64_t pttl;	/* not ok: the holder's lease left, ms (< 0: none) */
	uint64_t gen;	/* Redis's write generation */
	int64_t closed_ms; /* take: no grants for this long (the closure
			      in force: P closed, the file, a standby's
			      memory), or 0 */
	uint64_t mark;	   /* the stored token mark (0: none) */
	uint64_t saw_epoch, saw_gen; /* st->seen before this reply */
};

#define LEAD_ARGC 34 /* FCALL, its name, numkeys, 11 keys, 20 arguments */
/* Node id and address of this daemon (config, or derived). */
void dl__lead_identity(struct dl_store *st);
/* The FCALL of the leadership function in `mode`, for the fence `mine`
 * ("<epoch>/2"; NULL or "" when none); LEAD_ARGC arguments. */
int dl__lead_argv(struct dl_store *st, enum lead_mode mode, const char *mine,
		  const char **argv, size_t *lens);
/* Read its reply to a call in `mode` (sent at sent_ms) into `out` and
 * st->leader, and what it says of the horizon and the closure into st->hz
 * (store_horizon.c). DL_EPROTO if it is not one. */
int dl__lead_reply(struct dl_store *st, enum lead_mode mode,
		   const redisReply *r, uint64_t sent_ms,
		   struct lead_reply *out);
/* Until when a renewal (or take) sent at sent_ms confirms leadership. */
uint64_t dl__lead_until(const struct dl_store *st, uint64_t sent_ms);
/* The writer fence of `epoch`: "<epoch>/" DL_STORE_LAYOUT. */
void dl__fence_format(char *buf, size_t len, uint64_t epoch);
/* "node N at A (epoch E, lease ends in T ms)" or "nobody". */
int dl__lead_describe(const struct dl_store *st, char *buf, size_t len);
/* What a take (ok) learned besides the leadership: Redis went back
 * (logged, counted), grants closed (lr->closed_ms, the closed hook: the
 * closure in force, now also in the state file), and for a take that
 * kept the table, the stored token mark to go on above. DL_EBADARG with
 * why when the mark or the epoch cannot be trusted (dl__plausible): the
 * daemon must not serve on them. */
int dl__lead_took(struct dl_store *st, struct lead_reply *lr, char *why,
		  size_t len);

#endif /* DL_SERVER_STORE_LEAD_H */
