/* SPDX-License-Identifier: MIT */
/*
 * store_batch.h -- the write path shared by the link and the
 * loader (store_batch.c): batches of records for the Redis functions, the
 * function library, the key layout, and the token mark. Private to the
 * store's files (store_private.h).
 */
#ifndef DL_SERVER_STORE_BATCH_H
#define DL_SERVER_STORE_BATCH_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "server/store/bucket.h"
#include "server/buf.h"
#include "server/locktab/locktab.h"
#include "server/store/store_tuning.h"

struct dl_store;

/* One item of a write batch, its bytes in wb.text. For the apply
 * function: a lock's write, op 'S' (its record) or 'D' (deleted), in
 * bucket `bucket`. For the replace function (store_batch.c): 'B' starts
 * bucket `bucket`, its entry count in v; 'E' is one entry of it (n = the
 * name, v = the record); 'K' is another key to delete, named by n. */
struct wlock {
	size_t noff, nlen; /* the name, or the key of a 'K' */
	size_t voff, vlen; /* the record, or the count of a 'B' / 'K' */
	uint32_t bucket;
	char op;
};

/* A batch of writes being built for one FCALL (store_batch.c). */
struct wbatch {
	struct dl_buf text; /* names, records and counts, back to back */
	struct wlock *locks;
	size_t nlocks, cap;
	size_t nentries;   /* of them, lock records ('S', 'E') */
	size_t nkeys;	   /* of them, Redis keys (all but 'E') */
	const char **argv; /* the FCALL, built by dl__wb_argv() */
	size_t *lens;
	size_t argv_cap;
	char numkeys[24];
	char token[24];
};

/* The table's locks that have a record (a holder or a waiter), grouped
 * by bucket (store_batch.c): the order of a re-sync and of a migration,
 * bucket after bucket. Pointers into the table: valid until a lock
 * leaves it, which a re-sync rules out by pinning the table
 * (dl_locktab_pin) for as long as it keeps them. */
struct bucket_index {
	struct bucket_list {
		const struct dl_lock **v;
		size_t n, cap;
	} b[DL_STORE_BUCKETS];
	size_t n; /* locks in all */
	int err;  /* DL_ENOMEM: a lock could not be added */
};

/* The keyspace's Redis keys, named once from the prefix (store.c). */
struct store_keys {
	char *token;	 /* <prefix>token */
	char *fence;	 /* <prefix>fence */
	char *leader;	 /* <prefix>leader */
	char *gen;	 /* <prefix>gen: the write generation (seen.h) */
	char *closed;	 /* <prefix>closed: no grants while it lives
			    (store_horizon.c) */
	char *horizon;	 /* <prefix>horizon: the active's reservation */
	char *standbys;	 /* <prefix>standbys: what each standby counted */
	char *base;	 /* <prefix>base: what Redis held at the last take */
	char *proofkey;	 /* <prefix>proofkey: the grants' proofs' key */
	char *challenge; /* <prefix>challenge: a lapsed active asks its peers
			    (store_attest.c) */
	char *answers;	 /* <prefix>answers: the peers' answers */
	char *cluster;	 /* <prefix>cluster: the id (store_cluster.c) */
	char *run;	 /* <prefix>run: the Redis process of the last take
			    (store_horizon.c) */
	char *part;	 /* <prefix>part: the partition's record
			    (store_part.c) */
	char *rec;	 /* <prefix>rec:0 NUL <prefix>rec:1 NUL ...: the
			    buckets of layout 2 (dl__rec_key) */
	uint32_t rec_off[DL_STORE_BUCKETS + 1]; /* bucket b's key at
						   rec + rec_off[b] */
	/* Layout 1, read only to migrate from it (store_load.c). */
	char *names;	   /* <prefix>locks: its marker */
	char *lock_prefix; /* <prefix>lock: */
	size_t lock_prefix_len;
};

/* The write path's scratch and its token mark (store_batch.c). */
struct store_writes {
	struct wbatch wb;    /* the batch being built */
	struct dl_buf val;   /* a record */
	uint64_t token_mark; /* the token mark sent on this link (0: none
				yet) */
};

/* The Redis function library that applies every write and holds the
 * leadership's function (FUNCTION LOAD): its text. */
const char *dl__store_library(void);
/* Its leadership function's source (store_lead.c). */
extern const char dl__lua_lead[];
/* Room for the library's text (about 7 KB). */
#define DL_STORE_LIBRARY_MAX 16384
#define DL_STORE_LIBRARY     "dlock_v11"
#define DL_STORE_APPLY_FN    "dlock_apply_v11"
#define DL_STORE_REPLACE_FN  "dlock_replace_v11"
#define DL_STORE_LEAD_FN     "dlock_lead_v11"

/* The store layout this build writes (store.c): its number ends the
 * writer fence, "<epoch>/2" (store_lead.c says why). */
#define DL_STORE_LAYOUT "2"

/* How far ahead of the last token issued the stored token mark is set
 * (store_batch.c): a batch writes the mark only when a grant passes it,
 * once per this many grants. A restart may skip up to this many tokens,
 * a millisecond's worth of dl_token_floor()'s time floor. */
#define DL_TOKEN_RESERVE 1000000
/* How far above the stored mark a start that cannot prove Redis holds
 * the latest one resumes (store_load.c resume_tokens): a minute of the
 * clock floor, 6 x 10^10 tokens, more than any daemon tells in a window of
 * writes Redis may lose. */
#define DL_TOKEN_JUMP (60000ULL * DL_TOKEN_PER_MS)

/* What Redis's counters may say, read not trusted (dl__plausible): a token
 * mark more than this far ahead of the clock's floor (unix ms *
 * DL_TOKEN_PER_MS) is not one a daemon wrote -- a daemon's clock that far
 * ahead is a fault of its own -- but a SET of a tenant that would exhaust
 * the token space (2^64 is the year 2554 of the floor). */
#define DL_TOKEN_AHEAD_MAX_MS (24ULL * 3600 * 1000)
/* An epoch is raised by one per take: more than DL_EPOCH_JUMP_MAX above
 * the largest this daemon saw is not one a take made. Nor is one above
 * DL_EPOCH_MAX, which the leadership function refuses outright: its Lua
 * numbers print exactly to 14 digits only (tostring of 10^14 is
 * "1e+14"), and a fence written that way would be no fence at all. A
 * plain literal: the function's source uses it too. */
#define DL_EPOCH_JUMP_MAX 1000000ULL
#define DL_EPOCH_MAX	  10000000000000

/* The token mark and epoch Redis holds, before they are used: 0, or
 * DL_EBADARG with why (logged) when one could not have been written by a
 * daemon and [persistence] accept_token_jump is not set. */
int dl__plausible(struct dl_store *st, uint64_t mark, uint64_t epoch, char *why,
		  size_t len);

/* Every key of the keyspace `prefix` names (struct store_keys): 0, or
 * DL_ENOMEM (dl__keys_free frees what was made). */
int dl__keys_init(struct store_keys *k, const char *prefix);
void dl__keys_free(struct store_keys *k);
/* Bucket b's key, <prefix>rec:<b> (NUL-terminated), and its length. */
const char *dl__rec_key(const struct dl_store *st, uint32_t b, size_t *len);

void dl__wb_reset(struct wbatch *wb);
void dl__wb_free(struct wbatch *wb);
/* Add the write of lock `name` in its present state, for the apply
 * function: a delete when lk is NULL or has neither holders nor waiters,
 * else its record. A batch names each lock at most once (the functions
 * group writes by bucket). Returns 0 or DL_ENOMEM. */
int dl__wb_lock(struct dl_store *st, struct dl_str name,
		const struct dl_lock *lk, int64_t wall_off);
/* The FCALL of what was added, checked against `fence`; when the table's
 * last token has passed st->token_mark (0 after a link change) it also
 * raises the stored token mark DL_TOKEN_RESERVE past it. The arrays live
 * in st->wb until its next change. */
int dl__wb_argv(struct dl_store *st, const char *fence, int *argc,
		const char ***argv, const size_t **lens);

/* The replace function's items: a whole bucket (every entry in the index),
 * or another key to delete (`key` copied). */
int dl__wb_bucket(struct dl_store *st, const struct bucket_index *bi,
		  uint32_t b, int64_t wall_off);
int dl__wb_key(struct dl_store *st, const char *key, size_t len);
/* Add whole buckets from *b on until the batch holds
 * DL_STORE_RESYNC_CHUNK records or every bucket is in; *b moves past
 * them. */
int dl__wb_buckets(struct dl_store *st, const struct bucket_index *bi,
		   uint32_t *b, int64_t wall_off);
/* The FCALL of the replace function for what was added (dl__wb_argv's
 * rules for the fence and the token mark). */
int dl__wb_replace_argv(struct dl_store *st, const char *fence, int *argc,
			const char ***argv, const size_t **lens);

/* Group the table's locks that have holders or waiters by bucket, in one
 * go. 0 or DL_ENOMEM; free with dl__bucket_index_free() either way. */
int dl__bucket_index(struct dl_store *st, struct bucket_index *bi);
/* The same a lock at a time, into an index that starts zeroed (a
 * dl_lock_cb, arg the index; a failure sets bi->err). */
void dl__bucket_index_add(const struct dl_lock *lk, void *arg);
void dl__bucket_index_free(struct bucket_index *bi);

/* unix ms - monotonic ms, to write deadlines that mean something to the
 * next process (record.h). */
int64_t dl__store_wall_offset(void);

/* The first error in a reply (arrays searched), or NULL. */
const char *dl__store_reply_error(const redisReply *r);
/* 1 if an error reply means "Redis is not ready", to wait for: loading,
 * busy with a script, a replica, a master without its replicas; in a
 * cluster, a slot that moved or is moving (MOVED, ASK, TRYAGAIN: the next
 * link asks the cluster again) or a cluster that is down. */
int dl__store_not_ready(const char *err);

#endif /* DL_SERVER_STORE_BATCH_H */
