/* SPDX-License-Identifier: MIT */
/*
 * part_private.h -- what the files of the partition layer share
 * (server/part/): the state of a daemon's share of the map (part.c owns
 * it: the map, its worker, the interface) and the calls between part.c
 * and part_move.c (moving slots with their locks: the giver's record,
 * freeze and extraction, the receiver's import). Nothing outside
 * server/part/ includes it.
 */
#ifndef DL_SERVER_PART_PRIVATE_H
#define DL_SERVER_PART_PRIVATE_H

#include <hiredis/hiredis.h>
#include <stdint.h>
#include <uv.h>

#include "server/part/part.h"
#include "server/store/store.h"

enum job_kind { JOB_GET, JOB_CAS, JOB_TAKE };

struct job {
	uv_work_t req;
	struct dl_part *p;
	enum job_kind kind;
	unsigned loads;	 /* the store's loads when it was queued */
	char *old, *new; /* CAS: the text expected and the one written */
	/* results */
	int err; /* 0, or the call failed (why) */
	char why[256];
	char *text; /* the text Redis holds (GET; a refused CAS) */
	size_t len;
	int swapped; /* CAS: written */
	/* TAKE: the record of move n of partition `from` (its "gone" and
	 * its "moved" in text/len) */
	char from[DL_PART_ID_MAX + 1];
	uint64_t n;
	char *gone;
};

/* What a change asked by a command is waiting for. */
enum ask { ASK_NONE, ASK_INIT, ASK_MOVE_NOTE, ASK_MOVE_MAP, ASK_ADDRS };

struct dl_part {
	uv_loop_t *loop;
	const struct dl_config *cfg;
	struct dl_store *st;
	struct dl_locktab *tab;
	struct dl_redis_addr addr;
	char *key;	     /* <redis_prefix>{map} */
	unsigned slot;	     /* the key's */
	uint64_t timeout_ms; /* redis_timeout, as at the start */
	char id[DL_PART_ID_MAX + 1];
	int seed;	 /* the seed to ask first (worker) */
	redisContext *c; /* the worker's, between jobs */

	uv_timer_t timer;
	int timer_on, closing;
	struct job *job; /* under way */

	struct dl_map *map; /* the newest read; epoch 0: none */
	char *text;	    /* its text as Redis held it */
	uint64_t known_epoch;
	int failing;	       /* the last job failed: said once */
	unsigned fresh;	       /* the store's loads a map read came after */
	unsigned copy_loads;   /* the store's loads its copy was read at */
	uint64_t copy_epoch;   /* the epoch of the copy in the keyspace */
	int copying;	       /* a write of the copy is under way */
	uint64_t pending_copy; /* ... of this epoch */
	int full_said;	       /* the map was full: said once */
	int note_again;	       /* a move's record to send again */
	unsigned gen;	       /* raised by each map adopted (MAP's cache) */
	int self;	       /* this partition's line in the map, or -1 */

	/* the record of slots given away (store_part.c), parsed */
	unsigned gone_gen; /* dl_store_part_gen when parsed */
	uint64_t gone_n;   /* the move's number (0: no record) */
	char gone_to[DL_PART_ID_MAX + 1];
	uint64_t gone_floor;
	uint8_t *gone;	     /* [DL_SLOTS] */
	uint8_t *moving;     /* [DL_SLOTS]: step 1 of a move under way */
	uint64_t gone_locks; /* the record's move carried locks (locks=) */
	int carry;	     /* the move under way carries locks */
	uint64_t move_n;     /* ... its number */
	uint64_t note_epoch; /* the store's open epoch when it was sent */
	unsigned move_loads; /* the store's loads when it was asked */
	uint8_t *frozen;     /* [DL_SLOTS]: the table serves no queue there */
	int frozen_on;	     /* ... and frozen is set in the table */

	/* a move to this partition whose locks are not imported yet */
	int awaiting;	     /* the giver's line + 1; 0: none */
	unsigned await_from; /* the line from which the next is chosen */
	unsigned await_gen;  /* p->gen and the store's part gen it is of */
	unsigned await_sgen;
	int importing;	     /* its import is being written */
	uint64_t take_ms;    /* when a read of its record last failed */
	uint64_t lost_since; /* its record was found lost (0: no) */
	uint64_t lost_n;     /* ... that move's number and giver */
	char lost_from[DL_PART_ID_MAX + 1];
	uint8_t *incoming;     /* [DL_SLOTS]: the slots of the moves awaited */
	int take_said;	       /* the failure was said */
	uint64_t kick_ms;      /* a read asked by a MOVED answered */
	uint64_t locks_out;    /* locks extracted by moves (STATS) */
	uint64_t locks_in;     /* ... imported */
	uint64_t import_count; /* the import under way's */
	uint64_t extracted_n;  /* the move whose locks were extracted */
	uint64_t extracted_epoch; /* ... in this epoch's writes */
	unsigned extracted_loads; /* ... from the table of this load */
	unsigned extract_gen;	  /* p->gen and the store's part gen of the */
	unsigned extract_sgen;	  /* last extraction (extract_gone) */

	/* a change asked by a command */
	enum ask ask;
	dl_part_done done;
	void *arg;
	char to[DL_PART_ID_MAX + 1];
	char addrs[DL_PART_ADDRS_LEN];
	uint64_t asked_ms;
};

/* The record of the move under way (one at a time), sent again until
 * Redis is known to hold it (part_move.c). */
extern char dl__part_move_record[DL_STORE_PART_MAX];

/* ---- part.c ---- */

/* A read of the map now, if no job is under way (a take first). */
void dl__part_next_job(struct dl_part *p);
/* Make p->job: DL_ELIMIT while one is under way, DL_ENOMEM. */
int dl__part_queue(struct dl_part *p, enum job_kind kind, const char *old,
		   const char *new);
/* The worker's body and its answer on the loop (uv_queue_work). */
void dl__part_work(uv_work_t *req);
void dl__part_after_work(uv_work_t *req, int status);
/* On the worker: a connection to the primary that serves `slot`. */
redisContext *dl__part_connect_slot(struct dl_part *p, unsigned slot, char *why,
				    size_t whylen);
/* Move n of the record is not in map m yet. */
int dl__part_pending(const struct dl_part *p, const struct dl_map *m);
/* This partition's line in m, or -1. */
int dl__part_own_index(const struct dl_map *m, const struct dl_part *p);
/* Parse the store's record of slots given away. */
void dl__part_read_gone(struct dl_part *p);
/* The change asked is over: its command is answered (once). */
void dl__part_finish(struct dl_part *p, int err, const char *text);

/* ---- part_move.c ---- */

/* The giver: which slots are frozen (step 1, and a record's until its
 * locks are extracted), the extraction (step 5), the record's locks
 * cleared once imported, and the record sent (step 2). */
void dl__part_refreeze(struct dl_part *p);
void dl__part_extract_gone(struct dl_part *p);
void dl__part_clear_moved(struct dl_part *p);
/* Once the extraction's deletions are durable, the record's locks= goes
 * (a write of "gone" without it): its slots thaw. */
void dl__part_gone_locks_done(struct dl_part *p);
int dl__part_send_note(struct dl_part *p);
/* ... sent again (its last send failed, or waited behind a copy of the
 * map), or given up (a load since, or a record that cannot be). */
void dl__part_resend_note(struct dl_part *p);
/* The receiver: the last move of `id` it imported; a move awaited
 * (its giver's line + 1, or 0; p->incoming its slots); the job that
 * reads the record (worker), its answer (loop), and queueing it. */
uint64_t dl__part_took_of(const struct dl_part *p, const char *id);
int dl__part_awaiting(struct dl_part *p);
void dl__part_work_take(struct dl_part *p, struct job *j);
void dl__part_on_take(struct dl_part *p, struct job *j);
int dl__part_take(struct dl_part *p);

#endif /* DL_SERVER_PART_PRIVATE_H */
