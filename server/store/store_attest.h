/* SPDX-License-Identifier: MIT */
/*
 * store_attest.h -- the store's attestation part (store_attest.c): an
 * active whose leadership lapsed asks its peers whether anyone led
 * meanwhile, and every other node answers from what its process saw;
 * a start that proves nothing asks them what they told (store_restart.c).
 */
#ifndef DL_SERVER_STORE_ATTEST_H
#define DL_SERVER_STORE_ATTEST_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "proto/limits.h"

struct dl_store;
struct load_ctx;

/* How often a lapsed active reads its peers' answers. */
#define DL_ATTEST_POLL_MS 100
/* How long a start without its state file, on a Redis that restarted
 * since the last take, waits for a silent peer before it takes with
 * grants closed for max_ttl (store_restart.c, restart_silent). */
#define DL_RESTART_AWAIT_MS 60000

enum attest_round {
	ATTEST_NONE,	/* no challenge of this process stands */
	ATTEST_ASKING,	/* answers awaited (the link is CONNECTING) */
	ATTEST_BLIND,	/* not every peer vouched or bounded: the take waits
			   only for the challenges this node vouched for to
			   end */
	ATTEST_BOUNDED, /* every peer answered, and what those that did not
			   vouch told bounds the leases told meanwhile: the
			   take (as BLIND's) presents the nonce for that
			   bound */
	ATTEST_PROVED,	/* every peer vouched: the take presents the nonce */
	ATTEST_TAKING,	/* the take is sent: its reply ends the round */
};

struct store_attest {
	char peers[DL_PEERS_MAX][DL_NODE_ID_MAX + 1]; /* [cluster] peers */
	int npeers;
	/* As a lapsed active, the challenger. */
	enum attest_round round;
	char nonce[17];	      /* this round's, hex */
	char instance[17];    /* this process's (the challenge names it) */
	uint64_t epoch;	      /* the epoch challenged: this daemon's last */
	uint64_t since_ms;    /* monotonic: no other node can have taken the
				 leadership before then (its last renewal's
				 send, or earlier) */
	uint64_t bound_until; /* monotonic: BOUNDED, the end of every lease
				 the peers told (0: none) */
	uint64_t peers_mark;  /* the largest token mark the peers' answers
				 name (0: none) */
	uint64_t until_ms;    /* monotonic: answers awaited until then */
	uint64_t valid_until; /* monotonic: the challenge's life on this
				 clock; a proof or bound is presented only
				 before then (the peers defer a lease
				 longer) */
	uint64_t poll_at;     /* monotonic: the next read of the answers */
	int polling;	      /* reads of the answers and the challenges await
				 their replies (0, 1 or 2) */
	/* As any node that answers: what this process saw itself. */
	char seen_inst[17];   /* the last leader's instance it saw ("" none) */
	uint64_t seen_epoch;  /* ... and its epoch */
	int took;	      /* it took the leadership, ever */
	uint64_t started_ms;  /* monotonic: this process's start */
	uint64_t defer_until; /* monotonic: it takes no leadership before
				 then (a challenge stands) */
	uint64_t await_since; /* monotonic: a start without its state file
				 first waited for a silent peer (0: not) */
	int await_unled;      /* ... on a keyspace that holds no take */
	/* The cluster id every answering peer named in the restart round
	 * ("": none, or they differ): a start that knows none, on a Redis
	 * that lost it, takes it (dl__attest_restart). */
	char peers_cluster[DL_CLUSTER_ID_LEN + 1];
	char peers_cluster_other[DL_CLUSTER_ID_LEN + 1]; /* another, named
							    too ("": none) */
	char answer[256]; /* "<instance> <epoch> <took> <bound> <age> <mark>
			     <known> <own> <cluster>" for the look */
	char set_arg[64]; /* the challenge's text */
	char px_arg[24];  /* its life, ms */
	/* "<nonce>:<node>", an answer's field */
	char field[17 + 1 + DL_NODE_ID_MAX + 1];
};

/* [cluster] peers into st->attest. 0, or DL_EBADARG (config.c checked
 * them: not expected). */
int dl__attest_init(struct dl_store *st);
/* The link is connected and the cluster id read: 1 if this daemon is an
 * active whose leadership lapsed and has peers to ask (a round begins:
 * the take waits for it), else 0 (take at once). */
int dl__attest_begin(struct dl_store *st);
/* The restart round (store_load.c, before a start's take, on its blocking
 * connection): a start of a node with peers that nobody leads, and whose
 * state file proves nothing, asks its peers what they told, for
 * DL_STANDBY_REPORT_MS at most. Every peer answering bounds the take's
 * closure (ATTEST_BOUNDED: the take presents the nonce, as a lapsed
 * active's does); a silent one leaves the take as it was, except for a
 * start without a state file on a Redis that is not the process of the
 * last take, or whose data was replaced in place since, which closes for
 * max_ttl (ATTEST_BLIND) when the answers show that its node ran before,
 * and waits for a silent peer (DL_EUNAVAILABLE: rounds again) up to
 * DL_RESTART_AWAIT_MS -- on a keyspace that holds no take too (a first
 * start, or a Redis that lost everything), which then takes as a first
 * start. 0, or an error of the connection, or
 * DL_EUNAVAILABLE while a lapsed peer whose node id sorts first asks, or
 * a silent one is awaited (the start tries again). */
int dl__attest_restart(struct load_ctx *x);
/* The node id (s, n) sorts before `id`: of two nodes that ask, the one
 * that sorts first takes first. */
int dl__attest_sorts_first(const char *s, size_t n, const char *id);
/* A field k, value e of P challenge: another node's challenge, "<nonce>
 * <epoch> <instance>"? 1 and its nonce, else 0. */
int dl__attest_other_challenge(const struct dl_store *st, const redisReply *k,
			       const redisReply *e, char nonce[17]);
/* Every store tick while CONNECTING: read the answers, or give up. */
void dl__attest_tick(struct dl_store *st);
/* The round is over (the take answered, or the link failed). */
void dl__attest_reset(struct dl_store *st);
/* The leadership function's arguments: a take's proof (the nonce, or
 * ""), a look's answer ("<instance> <epoch> <took> <bound> <age>
 * <mark>"). */
const char *dl__attest_proof(const struct dl_store *st);
/* The monotonic end of every lease the peers told while this daemon's
 * leadership lapsed, when their answers bound it (ATTEST_BOUNDED), else
 * 0: the take's closure, if Redis went back (store_horizon.c). */
uint64_t dl__attest_bound(const struct dl_store *st);
/* 1 if the round ended without a proof or a bound (ATTEST_BLIND): a peer
 * may have led unseen, and the take closes for max_ttl, behind or not. */
int dl__attest_blind(const struct dl_store *st);
const char *dl__attest_answer(struct dl_store *st);
/* A reply of the leadership function: the record of another process
 * (instance, epoch) a look saw on a Redis that did not go back; a take by
 * this daemon; the challenges that stand (HGETALL P challenge). */
void dl__attest_saw(struct dl_store *st, const char *inst, uint64_t epoch);
void dl__attest_took(struct dl_store *st);
void dl__attest_challenges(struct dl_store *st, const redisReply *chs);
/* 1 while this node must not take the leadership: it vouched for a
 * challenge that may still stand. */
int dl__attest_defers(const struct dl_store *st);

#endif /* DL_SERVER_STORE_ATTEST_H */
