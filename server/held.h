/* SPDX-License-Identifier: MIT */
/*
 * held.h -- the lines of one connection that wait for durability: the
 * middle of a durable reply's life, shared by conn.c and the engine fuzzer
 * (tests/fuzz/fuzz_engine.c), which link the same queue.
 *
 * The life of a durable reply, in one place:
 *
 *   1. read: conn.c cuts a request line and hands it to cmd.c;
 *   2. grant: cmd.c asks the lock table (locktab*.c), which changes the
 *      lease at once, marks the lock dirty for the store, and answers;
 *      cmd.c formats the reply and describes it in a struct dl_line:
 *      durable, where its TTL, lock name and request tag sit in the text,
 *      and what it takes to withdraw it (token, owner generation, the
 *      waiter's TTL and deadline for a * GRANTED);
 *   3. hold: dl_conn_send() puts a durable line, and every line after it
 *      on that connection, on the connection's dl_heldq, each with the
 *      store epoch it waits for (dl_store_epoch: the open one; a
 *      non-durable line waits for the line before it), so replies stay
 *      in order;
 *   4. batch: the store writes the epoch's dirty locks to Redis in one
 *      function call (store_batch.c) and, when Redis answers (and
 *      min_replicas_ack replicas have it), commits the epoch: the server
 *      calls dl_conn_send_held() on every holding connection;
 *   5. release: the lines whose epoch committed leave the queue in order,
 *      dl_cmd_released() first (a shortening REFRESH takes effect now),
 *      then each is copied out with its TTL field rewritten to what
 *      remains of the lease now (dl_heldq_emit): a reply that waited never
 *      promises more than the lease has left;
 *   6. or withdrawal: when persistence goes down, dl_conn_withdraw_held()
 *      takes every held line (dl_heldq_withdraw) through cmd.c's break_line,
 *      which revokes grants that never became durable (re-queuing a
 *      served waiter) by the name and tag the dl_line points at, and
 *      answers ERR UNAVAILABLE in their place.
 *
 * The queue owns its text and array; nothing here knows sockets or the
 * loop. Offsets in a dl_line are within the line's own text.
 */
#ifndef DL_SERVER_HELD_H
#define DL_SERVER_HELD_H

#include <stddef.h>
#include <stdint.h>

#include "server/buf.h"
#include "server/locktab/locktab.h"

/* An output buffer keeps this much room once everything in it is gone
 * (conn.c's buffers and the held text): a connection that is busy again
 * does not reallocate, one that spikes gives the memory back. It is out
 * of every count of unread output (a connection's fixed cost, three
 * buffers at most), so it is small: 1,000 connections of one user that
 * each once sent a long listing keep 48 MB at most. */
#define DL_OUT_KEEP (16 * 1024)

/* What a line is, for the output rules (conn.h). */
enum dl_line_kind {
	DL_LINE_REPLY = 0,     /* a reply: bounded by backpressure */
	DL_LINE_EVENT,	       /* an event: counts against max_output */
	DL_LINE_GRANTED,       /* OK GRANTED: TTL rewritten, withdrawable */
	DL_LINE_GRANTED_EVENT, /* * GRANTED: the same; its waiter re-queued */
	DL_LINE_REFRESHED,     /* OK REFRESHED: TTL rewritten, withdrawable */
};

/* A line's description; the lease fields matter for GRANTED, GRANTED_EVENT
 * and REFRESHED lines only. */
struct dl_line {
	enum dl_line_kind kind;
	unsigned durable : 1;  /* hold until the open epoch commits */
	unsigned shared : 1;   /* GRANTED_EVENT: the mode the waiter asked */
	unsigned reentry : 1;  /* GRANTED*: a reentry (dl_locktab_revoke) */
	unsigned shorten : 1;  /* REFRESHED: applied when sent (below) */
	unsigned has_warn : 1; /* GRANTED_EVENT: the waiter asked warn= */
	unsigned retry : 1;    /* GRANTED*: a retry's grant (req=): no hold
				  to withdraw */
	unsigned notify : 1;   /* GRANTED_EVENT: it asked notify=waiters */
	unsigned waiting : 1;  /* * WAITING: dropped if its lease is gone
				  when the line is withdrawn */
	unsigned multi : 1;    /* OK LOCKED / * LOCKED: a multi-lock's
				  header (withdrawn: cmd_multi.c) */
	unsigned member : 1;   /* one of its granted lines: its lease ends
				  if withdrawn (with retry: kept) */
	uint16_t limit;	       /* GRANTED_EVENT: the lock's limit */
	uint8_t ttl_len;       /* the TTL field: its length ... */
	uint16_t ttl_off;      /* ... and offset in the line */
	uint16_t name_off;     /* the lock's name: its offset ... */
	uint8_t name_len;      /* ... and length (255 at most) */
	uint16_t tag_off;      /* the request's id= value: its offset ... */
	uint8_t tag_len;       /* ... and length (0: none) */
	uint32_t asked_ttl_ms; /* GRANTED_EVENT: the TTL the waiter asked;
				  REFRESHED: the new TTL */
	uint32_t owner_gen;    /* GRANTED*: the session's (dl_locktab_revoke) */
	uint32_t warn_ms;      /* GRANTED_EVENT: the warning it asked */
	uint64_t token;	       /* the lease's */
	uint64_t deadline;     /* the lease's deadline, monotonic ms */
	uint64_t wait_deadline; /* GRANTED_EVENT: the waiter's */
	uint64_t from_deadline; /* REFRESHED with shorten: the lease's before */
	uint64_t req;		/* GRANTED_EVENT: the waiter's req= */
	uint16_t value_off;	/* GRANTED_EVENT: its value= in the line: its
				   offset ... */
	uint8_t value_len;	/* ... and length (0: none) */
};

/* A held line: its description, its epoch, its bytes in the queue's text. */
struct dl_held {
	struct dl_line line;
	uint64_t epoch;
	size_t off, len;
};

/* A connection's held lines, oldest first. Zeroed is empty. */
struct dl_heldq {
	struct dl_buf text; /* the bytes of the lines, back to back */
	struct dl_held *v;
	size_t n, cap;
};

/* Append a line: a durable one waits for `open_epoch`, any other for the
 * line before it (there must be one: a non-durable line is held only
 * behind a held line). 0 or DL_ENOMEM (nothing added). */
int dl_heldq_add(struct dl_heldq *q, const char *text, size_t len,
		 const struct dl_line *line, uint64_t open_epoch);
/* How many lines, from the oldest, wait for an epoch <= durable. */
size_t dl_heldq_covered(const struct dl_heldq *q, uint64_t durable);
/* Line i's text. */
const char *dl_heldq_text(const struct dl_heldq *q, size_t i);
/* Append line i to out, its TTL field (if it states one) replaced by
 * what remains of its lease at now. 0 or DL_ENOMEM. */
int dl_heldq_emit(const struct dl_heldq *q, size_t i, struct dl_locktab *tab,
		  uint64_t now, struct dl_buf *out);
/* Forget the n oldest lines (sent or replaced). */
void dl_heldq_drop(struct dl_heldq *q, size_t n);
/* Withdrawal (persistence went down). fn sees each line of connection c
 * and either returns DL_HELD_KEEP (send it as it is) or writes what to
 * send instead into buf (DL_REPLY_MAX bytes) and returns its length (0:
 * nothing). */
struct dl_conn;
#define DL_HELD_KEEP ((size_t)-1)
typedef size_t (*dl_held_fn)(struct dl_conn *c, const struct dl_line *line,
			     const char *text, size_t len, char *buf);
/* Where each line goes after fn: its text (the line's own, or fn's
 * replacement, then line is NULL); nonzero stops the walk. */
typedef int (*dl_held_out)(void *ctx, const char *text, size_t len,
			   const struct dl_line *line);
/* Every line of q moved out first (fn may cause new lines on c, which
 * then go out before the one fn returns: the walk is over a taken copy),
 * then walked in order through fn and out; q is left empty. */
void dl_heldq_withdraw(struct dl_heldq *q, struct dl_conn *c, dl_held_fn fn,
		       dl_held_out out, void *ctx);
/* The memory the queue holds (its allocations). */
size_t dl_heldq_memory(const struct dl_heldq *q);
void dl_heldq_free(struct dl_heldq *q);

#endif /* DL_SERVER_HELD_H */
