/* SPDX-License-Identifier: MIT */
/*
 * store_horizon.h -- the lease horizon's reservation, the standbys that
 * must know it, and the closure after a loss (store_horizon.c). Private
 * to the store's files (store_private.h).
 */
#ifndef DL_SERVER_STORE_HORIZON_H
#define DL_SERVER_STORE_HORIZON_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "server/config.h"
#include "server/store/seen.h"

struct dl_store;

/* The longest a daemon of a cluster (node_id) that restarts without a
 * state file that bounds what was told waits before it serves, for every
 * standby Redis lists to look once (every DL_LEADER_LOOK_MS, reconnecting
 * within DL_STORE_BACKOFF_MAX_MS) and report a loss it saw; it ends as
 * soon as each has. */
#define DL_STANDBY_REPORT_MS 2000
/* How far past what the table needs a reservation runs; it is raised
 * when less than half of that is left. The closure after a loss is at
 * most the longest lease (and delay) told plus this. */
#define DL_HORIZON_AHEAD_MS 4000
/* While a raise waits for the standbys to pass it back, the active reads
 * their answers this often. */
#define DL_HORIZON_POLL_MS 100
/* Standbys counted at most (the leadership function refuses more: their
 * looks go on, but their knowledge bounds nothing). A plain literal: the
 * function's source uses it too. */
#define DL_STANDBYS_MAX 32
/* Room for a closure's value in Redis: "<instance> <n> <ms> <why>". */
#define DL_HZ_VALUE_MAX (64 + DL_SEEN_WHY_MAX)

/* A standby as the active counts it (from P standbys). */
struct hz_standby {
	char inst[DL_NODE_ID_MAX + 1]; /* its node id */
	char echo[40];	  /* the horizon it passed back: "<inst>:<n>" */
	uint64_t count;	  /* its looks, as last read */
	uint64_t changed; /* monotonic: when that count last moved */
	uint64_t wait_n;  /* a raise of this process it must pass back */
	int present;	  /* in the last read of the hash */
	int dropped;	  /* stopped looking: not counted, its field deleted,
			     until it looks again */
	uint64_t report_count; /* its looks when a report wait began */
	int reported;	       /* it looked since: it would have told */
};

struct store_horizon {
	/* The active: its reservation. */
	uint64_t n;	       /* raises made by this process */
	uint64_t reserved;     /* monotonic end of the last raise made */
	uint64_t reserved_max; /* ... of the latest this process ever made:
				  no lease it told ends later (its answer to
				  a lapsed peer's challenge, store_attest.c) */
	uint64_t usable;       /* ... of the last one durable everywhere */
	uint64_t pend_n;       /* a raise not yet durable everywhere */
	uint64_t pend_until;   /* its end */
	uint64_t sent_n;       /* the raise the renew in flight carries */
	int pend_acked;	       /* Redis has pend_n */
	uint64_t pending;      /* an epoch whose commit waits (0: none) */
	uint64_t poll_at;      /* monotonic: the next read while waiting */
	struct hz_standby sby[DL_STANDBYS_MAX];
	unsigned nsby;
	/* The leadership function's arguments (dl__hz_args). */
	char hold_arg[DL_HZ_VALUE_MAX];
	/* A take whose closure the peers' answers bounded: the closure if a
	 * take since voided them (max_ttl), and the one if Redis did not go
	 * back (the peers' leases only: the table's are in Redis). */
	char void_arg[DL_HZ_VALUE_MAX];
	char peers_arg[DL_HZ_VALUE_MAX];
	char keep_arg[DL_HZ_VALUE_MAX];
	char raise_arg[64];
	char echo_arg[40];
	char drop_arg[DL_STANDBYS_MAX * (DL_NODE_ID_MAX + 1) + 1];
	/* A standby: what it read. */
	char value[64];			    /* the last P horizon counted */
	char closed_value[DL_HZ_VALUE_MAX]; /* the last P closed counted */
	char echo[40];			    /* "<inst>:<n>" of value */
	uint64_t prev_send;		    /* the previous look's send time */
	int registered;			    /* its field was in P standbys */
	int vouches;	   /* counted by an active it saw lead, no gap since
			      (dl__hz_vouches) */
	int missed;	   /* ... and then a gap: it may have missed leases */
	int loss_latched;  /* a look found Redis went back ... */
	int loss_provable; /* ... and its knowledge bounds that */
	uint64_t closes;   /* closure values made (their n) */
	/* a standby: the other standbys its last look listed, with their
	 * looks and when it saw that count move, for those it starts with
	 * if it becomes the active (dl__hz_role): one that has not looked
	 * for drop_ms is not waited for (found from outside: the field of
	 * a dead former active, left from its own standby days, held every
	 * change 4 s after each later fail-over) */
	struct hz_peer {
		char inst[DL_NODE_ID_MAX + 1];
		uint64_t count;
		uint64_t changed; /* monotonic */
	} peers[DL_STANDBYS_MAX];
	unsigned npeers;
	int own_field; /* the active: its field, from when it was a standby,
			  is still in P standbys (the next renewal drops it) */
	int relook;    /* look again at once: a new value to
			  pass back */
	/* A restarted active that can prove nothing waits for the standbys
	 * to report a loss they saw (store_load.c). */
	uint64_t report_until; /* monotonic; 0: not waiting */
	int report_found;      /* a report came: load again */
	unsigned report_reads; /* reads of the standbys since it began */
	/* The Redis process the last connection reached (dl__run_id_of;
	 * 0: not known). The state file's `run` stays the last one this
	 * daemon was sure of until it is sure of this one. */
	uint64_t run;
	/* ... and how often its data was replaced in place by then
	 * (dl__meddled_of): P run records it with the process. */
	uint64_t meddled;
	/* Not the active: Redis is another process than this daemon was
	 * sure of, and nobody has taken the leadership there since
	 * (dl__hz_redis_run) ... */
	int unsure;
	/* ... and when it found that, it had looked without a gap since an
	 * active counted it (dl__hz_vouches): what it counted bounds every
	 * lease told; else nothing does. */
	int unsure_vouched;
};

/* The commit of `epoch` (store.c): 1 if it may go now -- the state file
 * holds the marks sent, and the reservation covers the table's horizon
 * everywhere it must -- else 0: it is remembered, a raise started, and
 * dl__commit called once it is durable. */
int dl__hz_gate(struct dl_store *st, uint64_t epoch);
/* The store's tick, for the active: a raise before it is needed, a read
 * of the standbys while one waits. 1 if a renewal should go now. */
int dl__hz_tick(struct dl_store *st);
/* The horizon's and the closure's arguments of a leadership call in
 * `mode` (enum lead_mode), into st->hz's *_arg. */
void dl__hz_args(struct dl_store *st, int mode);
/* A leadership reply (the whole array) to a call in `mode`, sent at
 * sent_ms: the closure and the horizon it shows, the standbys. */
void dl__hz_reply(struct dl_store *st, int mode, const redisReply *r,
		  uint64_t sent_ms, int ok);
/* A report wait may end: the standbys were read since it began, and each
 * listed then has looked since (it would have reported a loss). */
int dl__hz_reports_in(const struct dl_store *st);
/* The link is gone: a raise in flight is not known to have landed. */
void dl__hz_link_lost(struct dl_store *st);
/* A connection (the link's, or the loader's) reached the Redis process
 * `run` (dl__run_id_of; 0: not known), whose data was replaced in place
 * `meddled` times by then (dl__meddled_of). */
void dl__hz_redis_run(struct dl_store *st, uint64_t run, uint64_t meddled);
/* The active's link wrote its whole table after its take: P run says on
 * which Redis process (the loader writes it too, store_load.c). */
void dl__hz_took_on_run(struct dl_store *st);
/* P run's value for this daemon's Redis process: "%016llx %llu", the
 * process (dl__run_id_of) and how often its data had been replaced in
 * place (dl__meddled_of). A reader of the process alone compares the
 * first 16 characters (dl__hz_same_run). */
#define DL_HZ_RUN_TEXT 40
void dl__hz_run_value(const struct dl_store *st, char out[DL_HZ_RUN_TEXT]);
/* P run's value v (len bytes) names the process this daemon reaches
 * (with `meddled`: and no replacement of its data since it was
 * written; a value of a daemon before the count never says so). */
int dl__hz_same_run(const struct dl_store *st, const char *v, size_t len,
		    int meddled);
/* With a standby's look while it is unsure: read P run. 0, or
 * DL_EUNAVAILABLE (not queued). */
int dl__hz_unsure_send(struct dl_store *st);
/* This daemon became the active, or stopped being it. */
void dl__hz_role(struct dl_store *st, int active);
/* What this node knows of the leases told covers every one that may
 * still be believed (its answer's `known`, store_attest.c): 1 for the
 * active's own; a standby's counted by an active it saw lead with no gap
 * in its looks since; a process that has not looked yet, its state
 * file's if that proves. -1: a standby that was counted and then had a
 * gap -- it knows it may have missed leases; 0: it knows nothing. */
int dl__hz_vouches(const struct dl_store *st);
/* This daemon's state file bounds every lease told before it started (a
 * standalone daemon's file; another's whose lead is its epoch). */
int dl__hz_file_proves(const struct dl_store *st);
/* A take that did not keep its table (kept 0) while grants are closed:
 * they stay closed until the lease horizon it knows (state file, looks,
 * P horizon), if that is later. Leases reclaimed during the closure
 * outlive it, and the take loads no record (store_load.c): found from
 * outside, a restart or a take-over during the closure granted a lock
 * whose reclaimed lease had 49 s left. Their holders reclaim them again. */
void dl__hz_took(struct dl_store *st, int kept);
/* After a take: the closure in force (seen.v.closed) as ms left, 0 if
 * none; a new one is written to the state file at once. */
uint64_t dl__hz_closure_left(struct dl_store *st);

#endif /* DL_SERVER_STORE_HORIZON_H */
