/* SPDX-License-Identifier: MIT */
/*
 * part.c -- this daemon's share of the partition map (part.h).
 *
 * Reading and writing the map. The map key is in its own slot, so in a
 * Redis Cluster it may be on another shard than the lock table: it has a
 * connection of its own, used with hiredis's blocking API on libuv's
 * thread pool, one job at a time (a GET, or a compare-and-set). The job
 * touches only itself, the connection, and what never changes after
 * dl_part_new (the address, the key); the loop thread looks at the
 * connection only when no job is under way. A failed call drops the
 * connection; the next job finds the primary again (the store's finder,
 * dl_store_primary_sync: CLUSTER SLOTS, Sentinel, or the one address).
 *
 * Every change is a compare-and-set of the whole text (an EVAL: the map
 * is written only if Redis still holds the text the change was made
 * from) that raises the epoch by one; a daemon adopts a map only when
 * its epoch is above the one it knows, and writes back the one it knows
 * when Redis holds an older one (Redis went back).
 *
 * Who serves a name, safely. A slot must never be served by two
 * partitions, not even for a moment. It leaves a partition only by that
 * partition's active (PARTITION MOVE), in this order:
 *   1. the active stops serving the slots (requests get ERR UNAVAILABLE,
 *      "moving"), and checks that its table holds no lock in them;
 *   2. it writes, under its table's fence, that move n gives them away
 *      (store_part.c: "<n> <to> <floor> <slots>", n one more than the
 *      map's gave= of the partition): a deposed active cannot, and a
 *      daemon that takes the partition over reads it before it serves;
 *   3. it writes the map with the slots given to the other partition, its
 *      own gave= raised to n, and the other's token floor raised to this
 *      table's last token.
 * Move n is "pending" while the map's gave= of the partition is below n.
 * A daemon serves a slot only if the newest map it read gives it to its
 * partition and no pending move of its table's record gives it away; the
 * receiving partition serves it only from a map that says so, which is
 * written after step 2. If the map write fails, or another change of the
 * map gets in first, the record keeps the slots unserved, and the active
 * writes the move again from the map it reads next. A move completed and
 * then undone (the slots given back later) is not mistaken for a pending
 * one: gave= only grows. Tokens of the names that moved stay above their
 * old ones: the receiver raises its counter to the floor before it serves
 * them (dl_part_route).
 *
 * Moving slots that hold locks. The locks go along, with the slots:
 *   1. besides not serving the slots, the giver freezes them: no waiter
 *      of theirs is served (dl_locktab_freeze), so no lease is granted
 *      there that the record would not carry;
 *   2. the record of move n is written with the records of the slots'
 *      locks (store_part.c, "moved"), and says locks=<count>;
 *   3. the map gives the slots away with the giver's gave=n and
 *      pend=<receiver>: the receiver has the locks to import;
 *   4. the receiver serves none of its slots while a line of the map says
 *      pend=<itself> for a move it has not imported (its "took" record,
 *      store_part.c), reads the giver's record, restores the locks (each
 *      lease with its owner, token and proof for its whole TTL; each
 *      waiter a placeholder its owner claims) and writes them into its own
 *      keyspace with "took" in one fenced call; then it serves, and writes
 *      the map without the pend=;
 *   5. the giver, once the map has the move, extracts the locks from its
 *      table: their holders hear nothing (their leases live at the
 *      receiver: a client follows NO MOVED with the same token), each
 *      waiter is told * MOVED (its place waits at the receiver).
 * A partition makes no move while its line says pend= (the record holds
 * the last move's locks only). A take-over at either end reads the record
 * and goes on from where it is. What a lease costs here is time: the
 * receiver restores it for its whole TTL, as a take-over does.
 *
 * What is not done yet: a map that Redis forgot entirely is written back
 * only by a daemon that knew it, and a daemon that never read a map
 * serves nothing until one exists (PARTITION INIT creates the first).
 * A giver's record that Redis lost before the receiver imported it leaves
 * the move's slots unserved (said in the log) until an operator acts.
 */
#include "server/part/part.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"
#include "server/locktab/locktab.h"
#include "server/log.h"
#include "server/store/store.h"

/* Compare-and-set: KEYS[1] becomes ARGV[2] if it holds ARGV[1] ("" for
 * none); 1, or the text it holds. */
static const char cas_script[] =
	"local cur = redis.call('GET', KEYS[1]) or ''\n"
	"if cur == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return 1 "
	"end\n"
	"return cur\n";

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
	uint8_t *frozen;     /* [DL_SLOTS]: the table serves no queue there */
	int frozen_on;	     /* ... and frozen is set in the table */

	/* a move to this partition whose locks are not imported yet */
	int awaiting;	    /* the giver's line + 1; 0: none */
	unsigned await_gen; /* p->gen and the store's part gen it is of */
	unsigned await_sgen;
	int importing;	       /* its import is being written */
	uint64_t take_ms;      /* when a read of its record last failed */
	uint64_t lost_since;   /* its record was found lost (0: no) */
	uint8_t *incoming;     /* [DL_SLOTS]: the slots of the moves awaited */
	int take_said;	       /* the failure was said */
	uint64_t kick_ms;      /* a read asked by a MOVED answered */
	uint64_t locks_out;    /* locks extracted by moves (STATS) */
	uint64_t locks_in;     /* ... imported */
	uint64_t import_count; /* the import under way's */
	unsigned extract_gen;  /* p->gen and the store's part gen of the */
	unsigned extract_sgen; /* last extraction (extract_gone) */

	/* a change asked by a command */
	enum ask ask;
	dl_part_done done;
	void *arg;
	char to[DL_PART_ID_MAX + 1];
	char addrs[DL_PART_ADDRS_LEN];
	uint64_t asked_ms;
};

static void next_job(struct dl_part *p);
static void on_noted(int ok, void *arg);
static int queue(struct dl_part *p, enum job_kind kind, const char *old,
		 const char *new);
static void after_work(uv_work_t *req, int status);
static int pending(const struct dl_part *p, const struct dl_map *m);
static void took_with(const struct dl_part *p, const char *from, uint64_t n,
		      char *took, size_t cap);
struct job;
static void lost_record(struct dl_part *p, struct job *j);

/* The record of the move under way (one at a time), sent again until
 * Redis is known to hold it. */
static char move_record[DL_STORE_PART_MAX];

/* ---- the worker (libuv's thread pool) ----------------------------------- */

static void drop(struct dl_part *p)
{
	redisFree(p->c);
	p->c = NULL;
}

/* A call failed (r: its error reply, or NULL): why, and the connection
 * dropped (the next job finds the primary again). */
static void failed(struct dl_part *p, struct job *j, redisReply *r)
{
	snprintf(j->why, sizeof(j->why), "%s",
		 r		   ? r->str
		 : p->c->errstr[0] ? p->c->errstr
				   : "no reply");
	freeReplyObject(r);
	drop(p);
}

/* A connection to the primary that serves `slot`, authenticated and on
 * the configured database: NULL with why set. */
static redisContext *connect_slot(struct dl_part *p, unsigned slot, char *why,
				  size_t whylen)
{
	struct timeval tv = {(time_t)(p->timeout_ms / 1000),
			     (suseconds_t)(p->timeout_ms % 1000) * 1000};
	char host[256], err[256];
	redisReply *r = NULL;
	redisContext *c;
	int port = 0;

	if (!p->addr.path &&
	    dl_store_primary_sync(&p->addr, slot, p->timeout_ms, &p->seed, host,
				  sizeof(host), &port, err, sizeof(err)) != 0) {
		snprintf(why, whylen, "%s", err);
		return NULL;
	}
	c = p->addr.path ? redisConnectUnixWithTimeout(p->addr.path, tv)
			 : redisConnectWithTimeout(host, port, tv);
	if (!c || c->err) {
		snprintf(why, whylen, "connect: %s",
			 c ? c->errstr : "out of memory");
		redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	if (p->addr.password)
		r = p->addr.user ? redisCommand(c, "AUTH %s %s", p->addr.user,
						p->addr.password)
				 : redisCommand(c, "AUTH %s", p->addr.password);
	if (p->addr.password && (!r || r->type == REDIS_REPLY_ERROR))
		goto fail;
	freeReplyObject(r);
	r = NULL;
	if (!p->addr.cluster) {
		r = redisCommand(c, "SELECT %d", p->addr.db);
		if (!r || r->type == REDIS_REPLY_ERROR)
			goto fail;
		freeReplyObject(r);
	}
	return c;
fail:
	snprintf(why, whylen, "%s",
		 r		? r->str
		 : c->errstr[0] ? c->errstr
				: "no reply");
	freeReplyObject(r);
	redisFree(c);
	return NULL;
}

static int work_connect(struct dl_part *p, struct job *j)
{
	if (p->c)
		return 0;
	p->c = connect_slot(p, p->slot, j->why, sizeof(j->why));
	return p->c ? 0 : -1;
}

/* TAKE: the giver's record, from the shard of its keyspace (another slot
 * than the map's: a connection of its own, for this job). */
static void work_take(struct dl_part *p, struct job *j)
{
	size_t i, klen = strlen(p->cfg->redis_prefix) + DL_PART_ID_MAX + 16;
	char *key = malloc(klen);
	redisContext *c;
	redisReply *r;

	j->err = DL_EUNAVAILABLE;
	if (!key) {
		snprintf(j->why, sizeof(j->why), "out of memory");
		return;
	}
	/* the giver's store prefix (dl_config_store_prefix) and "part" */
	snprintf(key, klen, "%s{%s}:part", p->cfg->redis_prefix, j->from);
	c = connect_slot(p, dl_key_slot(key, strlen(key)), j->why,
			 sizeof(j->why));
	if (!c) {
		free(key);
		return;
	}
	r = redisCommand(c, "HGETALL %s", key);
	if (!r || r->type != REDIS_REPLY_ARRAY) {
		snprintf(j->why, sizeof(j->why), "HGETALL %s: %s", key,
			 r && r->type == REDIS_REPLY_ERROR ? r->str
			 : c->errstr[0]			   ? c->errstr
							   : "no reply");
		freeReplyObject(r);
		redisFree(c);
		free(key);
		return;
	}
	free(key);
	j->err = 0;
	for (i = 0; i + 1 < r->elements; i += 2) {
		redisReply *f = r->element[i], *v = r->element[i + 1];

		if (f->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue;
		if (strcmp(f->str, "gone") == 0 && !j->gone &&
		    !(j->gone = strndup(v->str, v->len)))
			j->err = DL_ENOMEM;
		if (strcmp(f->str, "moved") == 0 && !j->text) {
			if (!(j->text = malloc(v->len + 1))) {
				j->err = DL_ENOMEM;
				continue;
			}
			memcpy(j->text, v->str, v->len + 1);
			j->len = v->len;
		}
	}
	if (j->err)
		snprintf(j->why, sizeof(j->why), "out of memory");
	freeReplyObject(r);
	redisFree(c);
}

static void work(uv_work_t *req)
{
	struct job *j = req->data;
	struct dl_part *p = j->p;
	redisReply *r;

	if (j->kind == JOB_TAKE) {
		work_take(p, j);
		return;
	}
	if (work_connect(p, j) != 0) {
		j->err = DL_EUNAVAILABLE;
		return;
	}
	r = j->kind == JOB_GET
		    ? redisCommand(p->c, "GET %s", p->key)
		    : redisCommand(p->c, "EVAL %s 1 %s %s %s", cas_script,
				   p->key, j->old, j->new);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		failed(p, j, r);
		j->err = DL_EUNAVAILABLE;
		return;
	}
	if (r->type == REDIS_REPLY_INTEGER && j->kind == JOB_CAS) {
		j->swapped = 1;
	} else if (r->type == REDIS_REPLY_STRING && r->len == 0) {
		/* a refused CAS on a missing key: none */
	} else if (r->type == REDIS_REPLY_STRING) {
		j->text = malloc(r->len + 1);
		if (j->text) {
			memcpy(j->text, r->str, r->len + 1);
			j->len = r->len;
		} else {
			j->err = DL_ENOMEM;
		}
	} else if (r->type != REDIS_REPLY_NIL) {
		snprintf(j->why, sizeof(j->why), "unexpected reply");
		j->err = DL_EUNAVAILABLE;
	}
	freeReplyObject(r);
}

/* ---- what the loop does with the answers --------------------------------- */

/* Parse the record of slots given away, if it changed. */
static void read_gone(struct dl_part *p)
{
	const char *s = dl_store_part_gone(p->st), *sp, *lk;
	unsigned long long e, f;
	uint64_t locks = 0;
	char to[DL_PART_ID_MAX + 1];
	int n = 0;

	p->gone_gen = dl_store_part_gen(p->st);
	p->gone_n = 0;
	p->gone_locks = 0;
	if (!s[0])
		return;
	if (sscanf(s, "%llu %32s %llu %n", &e, to, &f, &n) != 3 || !n ||
	    !dl_map_id_valid(to, strlen(to))) {
		dl_error(
			"partition: the record of slots given away does not parse (\"%.60s\"); ignoring it",
			s);
		return;
	}
	sp = s + n;
	lk = strstr(sp, " locks=");
	memset(p->gone, 0, DL_SLOTS);
	if (dl_slots_parse(sp, lk ? (size_t)(lk - sp) : strlen(sp), p->gone) <
		    0 ||
	    (lk && dl_parse_u64(lk + 7, strlen(lk + 7), &locks))) {
		dl_error(
			"partition: the record of slots given away names bad slots; ignoring it");
		return;
	}
	p->gone_locks = locks;
	p->gone_n = e;
	p->gone_floor = f;
	snprintf(p->gone_to, sizeof(p->gone_to), "%s", to);
}

/* Tell the command's connection how it went (once). */
static void answer(struct dl_part *p, int err, const char *text)
{
	dl_part_done done = p->done;
	void *arg = p->arg;

	p->done = NULL;
	if (done)
		done(err, text, arg);
}

/* The change asked is over. A move's slots stay unserved (p->moving)
 * until its record is known written, which on_noted says: never cleared
 * here (found in review: a record whose reply the link lost, or that
 * outlived the answer's time limit, still landed, and a later load
 * completed the move after the slots had been served again). */
static void finish(struct dl_part *p, int err, const char *text)
{
	p->ask = ASK_NONE;
	answer(p, err, text);
}

static int own_index(const struct dl_map *m, const struct dl_part *p)
{
	return dl_map_find(m, p->id, strlen(p->id));
}

/* The record's move is not in map m yet (m's gave= of this partition is
 * below its number). */
static int pending(const struct dl_part *p, const struct dl_map *m)
{
	int i;

	if (!p->gone_n || !m->epoch)
		return 0;
	i = own_index(m, p);
	return i < 0 || m->part[i].gave < p->gone_n;
}

/* Locks of the table in slots a map does not give this partition. */
struct strays {
	const struct dl_map *m;
	int self;
	const uint8_t *leaving; /* the record's slots, if it carried locks */
	size_t n;
	char first[DL_NAME_MAX + 1];
};

static void stray_cb(const struct dl_lock *lk, void *arg)
{
	struct strays *x = arg;
	unsigned s = dl_key_slot(lk->name, lk->hn.len);

	/* a move's locks wait here for their extraction: not strays */
	if ((!lk->listed && !lk->delaying) ||
	    x->m->owner[s] == (uint16_t)x->self ||
	    (x->leaving && x->leaving[s]))
		return;
	if (!x->n++)
		snprintf(x->first, sizeof(x->first), "%.*s", (int)lk->hn.len,
			 lk->name);
}

/* ---- moving locks ------------------------------------------------------ */

/* The slots whose locks must not change: a move's under way (step 1),
 * and those the record gave away with locks while the map does not have
 * the move yet, or does and the table may still hold them (extracted
 * below). Set in the table only while one is. */
static void refreeze(struct dl_part *p)
{
	const struct dl_map *m = p->map;
	int pend = pending(p, m), any = 0;
	unsigned s;

	for (s = 0; s < DL_SLOTS; s++) {
		p->frozen[s] = p->moving[s] ||
			       (p->gone_n && p->gone_locks && p->gone[s] &&
				(pend || p->self < 0 ||
				 m->owner[s] != (uint16_t)p->self));
		any |= p->frozen[s];
	}
	if (any != p->frozen_on || any) {
		dl_locktab_freeze(p->tab, any ? p->frozen : NULL);
		p->frozen_on = any;
	}
}

struct gone_walk {
	const struct dl_part *p;
	struct dl_buf names; /* NUL-separated */
	int err;
};

static void gone_cb(const struct dl_lock *lk, void *arg)
{
	struct gone_walk *g = arg;
	unsigned s = dl_key_slot(lk->name, lk->hn.len);

	if (g->err || !g->p->gone[s] ||
	    g->p->map->owner[s] == (uint16_t)g->p->self)
		return;
	if (dl_buf_add(&g->names, lk->name, lk->hn.len) ||
	    dl_buf_add(&g->names, "", 1))
		g->err = DL_ENOMEM;
}

/* Step 5: the map has the move, so the locks it carried leave the table
 * (each waiter told * MOVED: its place is at the receiver). Once per
 * record and map; again after a load (a take-over, a restart: the table
 * read back what the last extraction had not deleted yet). */
static void extract_gone(struct dl_part *p)
{
	struct gone_walk g = {.p = p};
	size_t cursor = 0, off, n = 0;

	/* not while a reply stating one of their leases may wait for its
	 * epoch: it says what remains of the lease as the table has it
	 * (held.c), and one extracted would be told 0 while it lives on at
	 * the receiver (found from outside: a grant a few ms before the
	 * move was told ttl_ms 0) */
	if (p->note_epoch && dl_store_committed(p->st) < p->note_epoch &&
	    !dl_store_idle(p->st))
		return;
	if (!p->gone_n || !p->gone_locks || p->self < 0 || pending(p, p->map) ||
	    !dl_store_active(p->st) ||
	    (p->extract_gen == p->gen &&
	     p->extract_sgen == dl_store_part_gen(p->st)))
		return;
	dl_locktab_pin(p->tab, 1);
	while (!dl_locktab_walk(p->tab, &cursor, 4096, gone_cb, &g))
		;
	dl_locktab_pin(p->tab, 0);
	if (g.err) {
		free(g.names.p);
		return; /* tried again at the next tick */
	}
	for (off = 0; off < g.names.len; off += strlen(g.names.p + off) + 1)
		n += (size_t)dl_locktab_extract(
			p->tab, (struct dl_str){g.names.p + off,
						strlen(g.names.p + off)});
	free(g.names.p);
	p->locks_out += n;
	p->extract_gen = p->gen;
	p->extract_sgen = dl_store_part_gen(p->st);
	if (n)
		dl_notice(
			"partition %s: %zu locks of move %llu left for partition %s",
			p->id, n, (unsigned long long)p->gone_n, p->gone_to);
}

/* The last move of partition `id` whose locks this one imported (its
 * "took" record: "<id>:<n> ..."), 0: none. */
static uint64_t took_of(const struct dl_part *p, const char *id)
{
	const char *t = dl_store_part_took(p->st);
	size_t len = strlen(id);
	uint64_t n;

	while (*t) {
		const char *sp = strchr(t, ' '), *end = sp ? sp : t + strlen(t);

		if ((size_t)(end - t) > len + 1 && memcmp(t, id, len) == 0 &&
		    t[len] == ':' &&
		    dl_parse_u64(t + len + 1, (size_t)(end - t) - len - 1,
				 &n) == 0)
			return n;
		t = sp ? sp + 1 : end;
	}
	return 0;
}

/* A move to this partition whose locks it has not imported: the giver's
 * line + 1, or 0. The slots of every such move (the map's pslots=) are
 * not served meanwhile (p->incoming); the others are. */
static int awaiting(struct dl_part *p)
{
	unsigned i;

	if (p->await_gen == p->gen && p->await_sgen == dl_store_part_gen(p->st))
		return p->awaiting;
	p->await_gen = p->gen;
	p->await_sgen = dl_store_part_gen(p->st);
	p->awaiting = 0;
	memset(p->incoming, 0, DL_SLOTS);
	for (i = 0; i < p->map->n && p->map->epoch; i++) {
		const struct dl_map_part *mp = &p->map->part[i];

		if (strcmp(mp->pend, p->id) != 0 || !mp->gave ||
		    took_of(p, mp->id) >= mp->gave)
			continue;
		if (!p->awaiting)
			p->awaiting = (int)i + 1;
		/* its slots (a map without pslots=: all of them) */
		if (!mp->pend_slots[0] ||
		    dl_slots_parse(mp->pend_slots, strlen(mp->pend_slots),
				   p->incoming) < 0)
			memset(p->incoming, 1, DL_SLOTS);
	}
	return p->awaiting;
}

static void on_imported(int ok, void *arg)
{
	struct dl_part *p = arg;

	p->importing = 0;
	if (!ok) {
		dl_warn("partition %s: the imported locks could not be written; trying again",
			p->id);
		p->take_ms = uv_now(p->loop);
		return;
	}
	p->locks_in += p->import_count;
	dl_notice("partition %s: imported %llu locks moved here; took %s",
		  p->id, (unsigned long long)p->import_count,
		  dl_store_part_took(p->st));
	next_job(p); /* the map without pend= (wanted) */
}

/* The record of a move to this partition, read (j): import its locks. */
static void on_take(struct dl_part *p, struct job *j)
{
	char took[DL_STORE_PART_MAX], why[300], to[DL_PART_ID_MAX + 1];
	unsigned long long n = 0, hn = 0, count = 0;
	char hfrom[DL_PART_ID_MAX + 1], hto[DL_PART_ID_MAX + 1];
	int k = 0, r;

	p->take_ms = uv_now(p->loop);
	if (awaiting(p) == 0 ||
	    strcmp(p->map->part[p->awaiting - 1].id, j->from) != 0 ||
	    p->map->part[p->awaiting - 1].gave != j->n)
		return; /* the map moved on meanwhile */
	if (j->err) {
		if (!p->take_said)
			dl_warn("partition %s: reading move %llu of partition %s: %s; its slots are not served until it is read",
				p->id, (unsigned long long)j->n, j->from,
				j->why);
		p->take_said = 1;
		return;
	}
	/* its record is of this move, to here; its locks too */
	if (!j->gone || sscanf(j->gone, "%llu %32s", &n, to) != 2 ||
	    n != j->n || strcmp(to, p->id) != 0 || !j->text ||
	    sscanf(j->text, "dlock-moved 1 %llu %32s %32s %llu%n", &hn, hfrom,
		   hto, &count, &k) != 4 ||
	    !k || hn != j->n || strcmp(hfrom, j->from) != 0 ||
	    strcmp(hto, p->id) != 0) {
		lost_record(p, j);
		return;
	}
	p->lost_since = 0;
	took_with(p, j->from, j->n, took, sizeof(took));
	r = dl_store_import(p->st, j->text, j->len, took, on_imported, p, why,
			    sizeof(why));
	if (r == DL_EUNAVAILABLE)
		return; /* another write of the record, or the link: again */
	if (r) {
		dl_error(
			"partition %s: importing the locks of move %llu of partition %s: %s",
			p->id, (unsigned long long)j->n, j->from, why);
		return;
	}
	p->take_said = 0;
	p->importing = 1;
	p->import_count = count;
}

/* "took" with move n of partition `from`: the others' entries, then
 * this one. */
static void took_with(const struct dl_part *p, const char *from, uint64_t n,
		      char *took, size_t cap)
{
	const char *t = dl_store_part_took(p->st);
	size_t len = 0, flen = strlen(from);

	took[0] = '\0';
	while (*t) {
		const char *sp = strchr(t, ' '), *end = sp ? sp : t + strlen(t);

		if (!((size_t)(end - t) > flen && memcmp(t, from, flen) == 0 &&
		      t[flen] == ':') &&
		    len + (size_t)(end - t) + 2 < cap) {
			memcpy(took + len, t, (size_t)(end - t));
			len += (size_t)(end - t);
			took[len++] = ' ';
			took[len] = '\0';
		}
		t = sp ? sp + 1 : end;
	}
	snprintf(took + len, cap - len, "%s:%llu", from, (unsigned long long)n);
}

static void on_given_up(int ok, void *arg)
{
	struct dl_part *p = arg;

	p->importing = 0;
	if (ok) {
		dl_warn("partition %s: the slots of a move whose record was lost are served again, max_ttl after the loss was seen; took %s",
			p->id, dl_store_part_took(p->st));
		p->lost_since = 0;
		next_job(p);
	}
}

/* The record of a move to here is not in the giver's keyspace: Redis
 * lost it (a FLUSHALL, a key deleted, a fail-over to a replica that
 * missed it). Its locks cannot be known. The move's slots (the map's
 * pslots=, the others are served) stay unserved until every lease of
 * them has surely ended -- its holder could not refresh it since the
 * move, and no lease is longer than max_ttl -- then this partition
 * serves them as empty (found from outside: the whole receiving
 * partition stopped, for good). A restart waits again, from its start. */
static void lost_record(struct dl_part *p, struct job *j)
{
	char took[DL_STORE_PART_MAX];
	uint64_t now = uv_now(p->loop);

	if (!p->take_said)
		dl_error(
			"partition %s: the map says move %llu of partition %s brought locks here, but its record says \"%.60s\" (Redis lost it?); the move's slots are not served for max_ttl (%llu ms) unless it comes back",
			p->id, (unsigned long long)j->n, j->from,
			j->gone ? j->gone : "(none)",
			(unsigned long long)p->cfg->max_ttl_ms);
	p->take_said = 1;
	if (!p->lost_since)
		p->lost_since = now ? now : 1;
	if (now - p->lost_since < p->cfg->max_ttl_ms)
		return;
	took_with(p, j->from, j->n, took, sizeof(took));
	if (dl_store_part_write(p->st, DL_PART_TOOK, took, on_given_up, p) == 0)
		p->importing = 1;
}

/* Step 4: read the record of a move to this partition not imported. */
static int take(struct dl_part *p)
{
	const struct dl_map_part *mp;

	if (!awaiting(p) || p->importing || p->job || !dl_store_active(p->st) ||
	    (p->take_ms && uv_now(p->loop) - p->take_ms < DL_MAP_POLL_MS))
		return 0;
	mp = &p->map->part[p->awaiting - 1];
	if (queue(p, JOB_TAKE, NULL, NULL) != 0)
		return 0;
	snprintf(p->job->from, sizeof(p->job->from), "%s", mp->id);
	p->job->n = mp->gave;
	uv_queue_work(p->loop, &p->job->req, work, after_work);
	return 1;
}

static void say_map(struct dl_part *p)
{
	int i = own_index(p->map, p);
	struct strays x = {.m = p->map,
			   .self = i,
			   .leaving =
				   p->gone_n && p->gone_locks ? p->gone : NULL};
	size_t cursor = 0;
	unsigned s, n = 0;

	p->gen++;
	p->self = i; /* the route's compare, per request */
	/* tokens of this partition: its own class modulo DL_PARTS_MAX (its
	 * place in the map, which never changes: lines are only added) */
	if (i >= 0)
		dl_locktab_token_stride(p->tab, DL_PARTS_MAX, (uint64_t)i);
	for (s = 0; i >= 0 && s < DL_SLOTS; s++)
		n += p->map->owner[s] == (uint16_t)i;
	dl_notice(
		"partition %s: map epoch %llu, %u partitions; this one serves %u of %u slots",
		p->id, (unsigned long long)p->map->epoch, p->map->n, n,
		DL_SLOTS);
	/* A move takes no slot that holds a lock: a map that does is one
	 * written by hand, or one Redis and the copies lost (found from
	 * outside: both deleted by hand, an older map written back, and two
	 * partitions granted one name). Said loudly: the leases stay, and
	 * whoever holds them may be told another partition serves them. */
	dl_locktab_pin(p->tab, 1);
	while (!dl_locktab_walk(p->tab, &cursor, 4096, stray_cb, &x))
		;
	dl_locktab_pin(p->tab, 0);
	if (x.n)
		dl_error(
			"partition %s: map epoch %llu gives other partitions the slots of %zu locks this table holds or queues (%s is one): a map changed by hand, or lost with this partition's copy? Those names may now be granted twice",
			p->id, (unsigned long long)p->map->epoch, x.n, x.first);
}

/* The change this daemon wants made to map m (NULL: none): the text of
 * the map after it, epoch raised, into out. */
static int wanted(struct dl_part *p, const struct dl_map *m, char *out,
		  size_t cap)
{
	struct dl_map *n = malloc(sizeof(*n));
	const char *self = dl_store_addr(p->st);
	int i, t, change = 0;
	unsigned s;

	if (!n)
		return 0;
	if (p->gone_gen != dl_store_part_gen(p->st))
		read_gone(p); /* a load since: its record, not the last one's */
	memcpy(n, m, sizeof(*n));
	if (p->ask == ASK_INIT && m->epoch == 0) {
		/* the first map: this partition serves every slot */
		i = dl_map_add(n, p->id, strlen(p->id));
		for (s = 0; i >= 0 && s < DL_SLOTS; s++)
			n->owner[s] = (uint16_t)i;
		change = i >= 0;
	}
	if (m->epoch == 0 && !change) {
		free(n);
		return 0; /* no map: nothing to add to */
	}
	/* slots given away (step 3), by this table's record */
	if (dl_store_active(p->st) && pending(p, m) &&
	    (i = dl_map_add(n, p->id, strlen(p->id))) >= 0 &&
	    (t = dl_map_add(n, p->gone_to, strlen(p->gone_to))) >= 0) {
		for (s = 0; s < DL_SLOTS; s++)
			if (p->gone[s] && n->owner[s] == (uint16_t)i)
				n->owner[s] = (uint16_t)t;
		/* the giver's last token, should it have granted since the
		 * record: the receiver's tokens stay above (defensive) */
		if (n->part[t].floor < p->gone_floor)
			n->part[t].floor = p->gone_floor;
		if (n->part[t].floor < dl_locktab_last_token(p->tab))
			n->part[t].floor = dl_locktab_last_token(p->tab);
		n->part[i].gave = p->gone_n;
		/* the receiver imports the locks the move carried, and
		 * serves their slots only then */
		snprintf(n->part[i].pend, sizeof(n->part[i].pend), "%s",
			 p->gone_locks ? p->gone_to : "");
		if (!p->gone_locks ||
		    dl_set_ranges(p->gone, n->part[i].pend_slots,
				  sizeof(n->part[i].pend_slots)) != 0)
			n->part[i].pend_slots[0] = '\0'; /* all of them */
		change = 1;
	}
	/* moves whose locks this partition imported: no longer pending */
	for (t = 0; dl_store_active(p->st) && t < (int)n->n; t++)
		if (strcmp(n->part[t].pend, p->id) == 0 &&
		    took_of(p, n->part[t].id) >= n->part[t].gave) {
			n->part[t].pend[0] = '\0';
			n->part[t].pend_slots[0] = '\0';
			change = 1;
		}
	/* this daemon's address in its partition's line */
	i = dl_map_add(n, p->id, strlen(p->id));
	if (i < 0 && !p->full_said) {
		dl_error(
			"partition %s: the map names %d partitions already, its most: this one is not added, and serves nothing",
			p->id, DL_PARTS_MAX);
		p->full_said = 1;
	}
	if (i >= 0 && self[0] && self[0] != '-' &&
	    dl_map_add_addr(n, i, self) > 0)
		change = 1;
	if (p->ask == ASK_ADDRS &&
	    (i = dl_map_find(n, p->to, strlen(p->to))) >= 0 &&
	    strcmp(n->part[i].addrs, p->addrs) != 0) {
		snprintf(n->part[i].addrs, sizeof(n->part[i].addrs), "%s",
			 p->addrs);
		change = 1;
	}
	if (change) {
		n->epoch = m->epoch + 1;
		if (!dl_map_format(n, out, cap))
			change = 0;
	}
	free(n);
	return change;
}

/* A change asked by a command, against the map now known (`ours`: this
 * daemon's write made it). */
static void asked(struct dl_part *p, int ours)
{
	char reply[120];

	if (p->ask == ASK_INIT && p->map->epoch) {
		snprintf(reply, sizeof(reply), "epoch=%llu",
			 (unsigned long long)p->map->epoch);
		if (ours)
			finish(p, 0, reply);
		else
			finish(p, DL_EBADARG, "a partition map exists already");
	} else if (p->ask == ASK_MOVE_MAP && !pending(p, p->map)) {
		/* the move is in the map: this write, or one that completed
		 * it (another active of the partition) */
		snprintf(reply, sizeof(reply), "epoch=%llu to=%s locks=%llu",
			 (unsigned long long)p->map->epoch, p->gone_to,
			 (unsigned long long)p->gone_locks);
		finish(p, 0, reply);
	}
}

static int queue(struct dl_part *p, enum job_kind kind, const char *old,
		 const char *new)
{
	struct job *j;

	if (p->job) /* one at a time: the worker's connection is one */
		return DL_ELIMIT;
	if (!(j = calloc(1, sizeof(*j))))
		return DL_ENOMEM;
	j->p = p;
	j->kind = kind;
	j->loads = dl_store_part_loads(p->st);
	j->req.data = j;
	if (kind == JOB_CAS &&
	    (!(j->old = strdup(old)) || !(j->new = strdup(new)))) {
		free(j->old);
		free(j);
		return DL_ENOMEM;
	}
	p->job = j;
	return 0;
}

static void after_work(uv_work_t *req, int status);

/* After a load (a start, a take-over): the copy of the map the
 * partition's keyspace holds is known, if newer than the one in memory.
 * Served from only after a read of the map (dl_part_route), and written
 * back if Redis lost the map (consider). A copy lags the map at worst:
 * its gave= below a pending move keeps that move's slots unserved, and
 * slots received after it are not served until the map says so. */
static void load_seen(struct dl_part *p)
{
	const char *copy = dl_store_part_map(p->st);
	struct dl_map *m;
	char why[200];

	if (p->copy_loads == dl_store_part_loads(p->st))
		return;
	p->copy_loads = dl_store_part_loads(p->st);
	if (!copy[0] || !(m = malloc(sizeof(*m))))
		return;
	if (dl_map_parse(m, copy, strlen(copy), why, sizeof(why)) != 0) {
		dl_error(
			"partition %s: the copy of the map in its keyspace does not parse: %s",
			p->id, why);
	} else {
		p->copy_epoch = m->epoch;
		if (m->epoch > p->map->epoch) {
			memcpy(p->map, m, sizeof(*m));
			free(p->text);
			p->text = strdup(copy);
			p->known_epoch = m->epoch;
			dl_notice(
				"partition %s: the copy of map epoch %llu from its keyspace",
				p->id, (unsigned long long)m->epoch);
			/* its token class too: the map read next may be this
			 * one, then not adopted again (found in review: a
			 * restart granted tokens of no class) */
			say_map(p);
		}
	}
	free(m);
}

/* Step 2: the move's record, with the locks of its slots if it carries
 * them (as the table holds them now: frozen, they only lessen since the
 * move began). */
static int send_note(struct dl_part *p)
{
	size_t nlocks;

	/* replies about those locks from before the record (a grant whose
	 * reply waits for Redis) are in this epoch or an earlier one */
	p->note_epoch = dl_store_epoch(p->st);

	if (!p->carry)
		return dl_store_part_write(p->st, DL_PART_GONE, move_record,
					   on_noted, p);
	return dl_store_part_move(p->st, move_record, p->moving, p->id, p->to,
				  p->move_n, &nlocks, on_noted, p);
}

static void on_copied(int ok, void *arg)
{
	struct dl_part *p = arg;

	p->copying = 0;
	if (ok)
		p->copy_epoch = p->pending_copy;
	if (p->ask == ASK_MOVE_NOTE && p->note_again && send_note(p) == 0)
		p->note_again = 0;
}

static void on_cleared(int ok, void *arg)
{
	(void)ok;
	(void)arg;
}

/* The locks of the last move, once imported by their receiver (the map
 * says no pend= for it), leave the record: every load reads it. */
static void clear_moved(struct dl_part *p)
{
	int i;

	if (!dl_store_part_moved_len(p->st) || p->ask != ASK_NONE ||
	    p->copying || p->importing || !dl_store_active(p->st) ||
	    !p->map->epoch || (i = own_index(p->map, p)) < 0 ||
	    pending(p, p->map) || p->map->part[i].pend[0] ||
	    p->fresh != dl_store_part_loads(p->st))
		return;
	(void)dl_store_part_write(p->st, DL_PART_MOVED, "", on_cleared, p);
}

/* The active keeps a copy of the newest map in its keyspace. */
static void copy_map(struct dl_part *p)
{
	if (p->copying || p->ask != ASK_NONE || !p->text ||
	    p->map->epoch <= p->copy_epoch || !dl_store_active(p->st))
		return;
	p->pending_copy = p->map->epoch;
	if (dl_store_part_write(p->st, DL_PART_MAP, p->text, on_copied, p) == 0)
		p->copying = 1;
}

/* Decide on the text Redis holds (NULL: none): adopt it, write back the
 * one known, or write the change wanted. */
static void consider(struct dl_part *p, const char *text, size_t len, int ours,
		     unsigned loads)
{
	static char out[DL_MAP_TEXT_MAX];
	struct dl_map *m = malloc(sizeof(*m));
	char why[200];

	if (!m)
		return;
	dl_map_init(m);
	if (text && dl_map_parse(m, text, len, why, sizeof(why)) != 0) {
		dl_error(
			"partition %s: %s holds a map that does not parse: %s; keeping epoch %llu",
			p->id, p->key, why, (unsigned long long)p->map->epoch);
		free(m);
		return;
	}
	if (m->epoch < p->known_epoch && p->text) {
		/* Redis went back: the newest map goes back in */
		dl_warn("partition %s: %s holds map epoch %llu, older than %llu known here: writing it back",
			p->id, p->key, (unsigned long long)m->epoch,
			(unsigned long long)p->known_epoch);
		if (queue(p, JOB_CAS, text ? text : "", p->text) == 0)
			uv_queue_work(p->loop, &p->job->req, work, after_work);
		free(m);
		return;
	}
	if (m->epoch == p->map->epoch && m->epoch && p->text &&
	    (strlen(p->text) != len || memcmp(p->text, text, len) != 0))
		/* two maps of one epoch: Redis went back and another change
		 * was made from the older one. Redis's is the one every
		 * other daemon reads: it is taken. */
		dl_error(
			"partition %s: %s holds another map of epoch %llu than the one read before; taking Redis's",
			p->id, p->key, (unsigned long long)m->epoch);
	if (m->epoch > p->map->epoch ||
	    (m->epoch == p->map->epoch && m->epoch && p->text &&
	     (strlen(p->text) != len || memcmp(p->text, text, len) != 0))) {
		memcpy(p->map, m, sizeof(*m));
		free(p->text);
		p->text = strndup(text, len);
		p->known_epoch = m->epoch;
		say_map(p);
	}
	free(m);
	/* served from since this read: Redis holds this map or an older
	 * one of equal epoch (found in review: marked fresh by a read that
	 * found an older map, a restart served from its newer copy while
	 * the others read the older one until the write-back) */
	p->fresh = loads;
	refreeze(p);
	extract_gone(p);
	asked(p, ours);
	if (wanted(p, p->map, out, sizeof(out))) {
		if (queue(p, JOB_CAS, p->text ? p->text : "", out) == 0)
			uv_queue_work(p->loop, &p->job->req, work, after_work);
		return;
	}
	if (p->ask == ASK_ADDRS) {
		char reply[80];

		snprintf(reply, sizeof(reply), "epoch=%llu",
			 (unsigned long long)p->map->epoch);
		finish(p, 0, reply);
	}
}

static void after_work(uv_work_t *req, int status)
{
	struct job *j = req->data;
	struct dl_part *p = j->p;

	(void)status;
	p->job = NULL;
	if (!p->closing) {
		if (j->err && j->kind == JOB_TAKE) {
			on_take(p, j); /* says it */
		} else if (j->err) {
			if (!p->failing)
				dl_warn("partition %s: the map at %s: %s",
					p->id, p->key, j->why);
			p->failing = 1;
		} else {
			if (p->failing)
				dl_notice("partition %s: the map is read again",
					  p->id);
			p->failing = 0;
			if (j->kind == JOB_TAKE)
				on_take(p, j);
			else if (j->kind == JOB_CAS && j->swapped)
				consider(p, j->new, strlen(j->new), 1,
					 j->loads);
			else
				consider(p, j->text, j->len, 0, j->loads);
		}
	}
	free(j->old);
	free(j->new);
	free(j->text);
	free(j->gone);
	free(j);
}

static void next_job(struct dl_part *p)
{
	if (p->job || p->closing || take(p))
		return;
	if (queue(p, JOB_GET, NULL, NULL) == 0)
		uv_queue_work(p->loop, &p->job->req, work, after_work);
}

static void on_tick(uv_timer_t *t)
{
	struct dl_part *p = t->data;
	uint64_t now = uv_now(p->loop);

	read_gone(p);
	load_seen(p);
	refreeze(p);
	extract_gone(p);
	copy_map(p);
	clear_moved(p);
	if (p->ask == ASK_MOVE_NOTE && p->note_again && send_note(p) == 0)
		p->note_again = 0;
	if (p->ask == ASK_MOVE_NOTE || p->ask == ASK_MOVE_MAP) {
		if (p->done && now - p->asked_ms > DL_MAP_ASK_MS)
			answer(p, DL_EUNAVAILABLE,
			       "the move is under way: this daemon completes it, and MAP will show it");
	} else if (p->ask != ASK_NONE && now - p->asked_ms > DL_MAP_ASK_MS) {
		finish(p, DL_EUNAVAILABLE,
		       "the map could not be written in time, try again");
	}
	next_job(p);
}

/* ---- the interface ------------------------------------------------------- */

struct dl_part *dl_part_new(uv_loop_t *loop, const struct dl_config *cfg,
			    struct dl_store *st, struct dl_locktab *tab)
{
	struct dl_part *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->loop = loop;
	p->cfg = cfg;
	p->st = st;
	p->tab = tab;
	snprintf(p->id, sizeof(p->id), "%s", cfg->partition);
	p->timeout_ms = cfg->redis_timeout_ms;
	p->key = malloc(strlen(cfg->redis_prefix) + 6);
	if (p->key)
		sprintf(p->key, "%s{map}", cfg->redis_prefix);
	p->map = malloc(sizeof(*p->map));
	p->gone = calloc(1, DL_SLOTS);
	p->moving = calloc(1, DL_SLOTS);
	p->frozen = calloc(1, DL_SLOTS);
	p->incoming = calloc(1, DL_SLOTS);
	if (!p->key || !p->map || !p->gone || !p->moving || !p->frozen ||
	    !p->incoming || dl_redis_url_parse(cfg->redis, &p->addr) != 0) {
		dl_part_free(p);
		return NULL;
	}
	if (!p->addr.password && cfg->redis_password[0] &&
	    !(p->addr.password = strdup(cfg->redis_password))) {
		dl_part_free(p);
		return NULL;
	}
	p->slot = dl_key_slot(p->key, strlen(p->key));
	dl_map_init(p->map);
	p->self = -1;
	return p;
}

int dl_part_start(struct dl_part *p)
{
	int e;

	if ((e = uv_timer_init(p->loop, &p->timer)) != 0)
		return e;
	p->timer.data = p;
	p->timer_on = 1;
	dl_notice("partition %s: the map is %s", p->id, p->key);
	return uv_timer_start(&p->timer, on_tick, 0, DL_MAP_POLL_MS);
}

void dl_part_close(struct dl_part *p)
{
	if (!p || p->closing)
		return;
	p->closing = 1;
	if (p->frozen_on) /* the table keeps no pointer into p */
		dl_locktab_freeze(p->tab, NULL);
	p->frozen_on = 0;
	finish(p, DL_EUNAVAILABLE, "shutting down");
	if (p->timer_on)
		uv_close((uv_handle_t *)&p->timer, NULL);
}

void dl_part_free(struct dl_part *p)
{
	if (!p)
		return;
	redisFree(p->c);
	dl_redis_addr_free(&p->addr);
	free(p->key);
	free(p->map);
	free(p->text);
	free(p->gone);
	free(p->moving);
	free(p->frozen);
	free(p->incoming);
	free(p);
}

enum dl_route dl_part_route(struct dl_part *p, struct dl_str name,
			    const struct dl_map_part **to)
{
	unsigned slot = dl_key_slot(name.p, name.len);
	const struct dl_map_part *mp;
	uint16_t o;

	*to = NULL;
	/* a map read since this daemon's last load (a start, a take-over):
	 * the map it knew may be older than moves its predecessor made
	 * (found from outside: a standby paused across two moves took over
	 * while the map's shard was down, and served the first move's slot
	 * from its old map; the record holds the last move only) */
	load_seen(p);
	if (p->map->epoch == 0 || p->fresh != dl_store_part_loads(p->st)) {
		next_job(p); /* read it now rather than at the next tick */
		return DL_ROUTE_UNKNOWN;
	}
	o = p->map->owner[slot]; /* after load_seen: the map it may adopt */
	if (p->gone_gen != dl_store_part_gen(p->st)) {
		read_gone(p); /* a load or a write since */
		refreeze(p);
	}
	if (o == DL_MAP_NOBODY)
		return DL_ROUTE_NOBODY;
	mp = &p->map->part[o];
	if (o != p->self) {
		/* the map may have just given it here (a client sent by the
		 * giver, which knew first): read it now rather than at the
		 * next tick, at most every DL_MAP_KICK_MS */
		if (uv_now(p->loop) - p->kick_ms >= DL_MAP_KICK_MS) {
			p->kick_ms = uv_now(p->loop);
			next_job(p);
		}
		*to = mp;
		return DL_ROUTE_AWAY;
	}
	if (p->moving[slot] || (p->gone[slot] && pending(p, p->map)))
		return DL_ROUTE_MOVING;
	if (awaiting(p) && p->incoming[slot]) {
		next_job(p); /* its import, now rather than at the next tick */
		return DL_ROUTE_IMPORTING;
	}
	if (dl_locktab_last_token(p->tab) < mp->floor)
		dl_locktab_raise_token(p->tab, mp->floor);
	return DL_ROUTE_HERE;
}

const struct dl_map *dl_part_map(const struct dl_part *p)
{
	return p->map;
}

const char *dl_part_id(const struct dl_part *p)
{
	return p->id;
}

unsigned dl_part_map_gen(const struct dl_part *p)
{
	return p->gen;
}

uint64_t dl_part_locks_out(const struct dl_part *p)
{
	return p->locks_out;
}

uint64_t dl_part_locks_in(const struct dl_part *p)
{
	return p->locks_in;
}

unsigned dl_part_slots(const struct dl_part *p)
{
	int i = own_index(p->map, p);
	unsigned s, n = 0;

	for (s = 0; i >= 0 && s < DL_SLOTS; s++)
		n += p->map->owner[s] == (uint16_t)i;
	return n;
}

static int ask(struct dl_part *p, enum ask a, dl_part_done done, void *arg,
	       char *why, size_t whylen)
{
	if (p->ask != ASK_NONE) {
		snprintf(why, whylen,
			 "limit reached: a change of the map is under way");
		return DL_ELIMIT;
	}
	p->ask = a;
	p->done = done;
	p->arg = arg;
	p->asked_ms = uv_now(p->loop);
	next_job(p);
	return 0;
}

int dl_part_init_map(struct dl_part *p, dl_part_done done, void *arg, char *why,
		     size_t whylen)
{
	if (p->map->epoch) {
		snprintf(why, whylen,
			 "a partition map exists already (epoch %llu)",
			 (unsigned long long)p->map->epoch);
		return DL_EBADARG;
	}
	return ask(p, ASK_INIT, done, arg, why, whylen);
}

int dl_part_set_addrs(struct dl_part *p, const char *id, size_t idlen,
		      const char *addrs, size_t len, dl_part_done done,
		      void *arg, char *why, size_t whylen)
{
	struct dl_map *m;
	char list[DL_PART_ADDRS_LEN + 1];
	int i, r;

	if (!p->map->epoch || (i = dl_map_find(p->map, id, idlen)) < 0) {
		snprintf(why, whylen, "no partition %.*s in the map",
			 (int)(idlen > 40 ? 40 : idlen), id);
		return DL_EBADARG;
	}
	if (len >= sizeof(list)) {
		snprintf(why, whylen, "too many addresses");
		return DL_EBADARG;
	}
	/* each address valid, at most DL_PART_ADDRS_MAX: checked on a copy */
	if (!(m = malloc(sizeof(*m))))
		return DL_ENOMEM;
	memcpy(m, p->map, sizeof(*m));
	m->part[i].addrs[0] = '\0';
	memcpy(list, addrs, len);
	list[len] = '\0';
	r = 0;
	if (!(len == 1 && addrs[0] == '-')) {
		char *save = NULL, *a;

		for (a = strtok_r(list, ",", &save); a && r >= 0;
		     a = strtok_r(NULL, ",", &save))
			r = dl_map_add_addr(m, i, a);
	}
	if (r < 0) {
		free(m);
		snprintf(why, whylen,
			 "addresses: up to %d host:port, comma separated, or -",
			 DL_PART_ADDRS_MAX);
		return DL_EBADARG;
	}
	snprintf(p->to, sizeof(p->to), "%s", m->part[i].id);
	snprintf(p->addrs, sizeof(p->addrs), "%s", m->part[i].addrs);
	free(m);
	return ask(p, ASK_ADDRS, done, arg, why, whylen);
}

/* Step 2 answered. */
static void on_noted(int ok, void *arg)
{
	struct dl_part *p = arg;

	if (p->ask != ASK_MOVE_NOTE)
		return;
	if (!ok) {
		/* written or not, nobody knows: the slots stay unserved and
		 * the same record goes again (a write of it is idempotent) */
		p->note_again = 1;
		return;
	}
	read_gone(p);
	memset(p->moving, 0, DL_SLOTS); /* the record keeps them unserved */
	p->carry = 0;
	refreeze(p); /* ... and frozen, if it carried locks */
	p->ask = ASK_MOVE_MAP;
	next_job(p);
}

struct busy {
	const uint8_t *set;
	size_t n;
	char first[DL_NAME_MAX + 1];
};

static void busy_cb(const struct dl_lock *lk, void *arg)
{
	struct busy *b = arg;

	if ((!lk->listed && !lk->delaying) ||
	    !b->set[dl_key_slot(lk->name, lk->hn.len)])
		return;
	if (!b->n++)
		snprintf(b->first, sizeof(b->first), "%.*s", (int)lk->hn.len,
			 lk->name);
}

/* A move refused before its record went: its slots served again. */
static void unmove(struct dl_part *p)
{
	memset(p->moving, 0, DL_SLOTS);
	p->carry = 0;
	refreeze(p);
}

int dl_part_move(struct dl_part *p, const uint8_t *set, const char *to,
		 size_t tolen, dl_part_done done, void *arg, char *why,
		 size_t whylen)
{
	char *gone = move_record;
	struct dl_map *m;
	struct busy b = {.set = set};
	uint64_t move_n;
	size_t cursor = 0, n;
	int i, r;
	unsigned s;

	if (!dl_map_id_valid(to, tolen)) {
		snprintf(why, whylen, "bad partition id");
		return DL_EBADARG;
	}
	if (p->ask != ASK_NONE) {
		snprintf(why, whylen,
			 "limit reached: a change of the map is under way");
		return DL_ELIMIT;
	}
	if (!p->map->epoch || (i = own_index(p->map, p)) < 0) {
		snprintf(why, whylen,
			 "this daemon knows no map that names its partition");
		return DL_EBADARG;
	}
	for (s = 0; s < DL_SLOTS; s++)
		if (set[s] && p->map->owner[s] != (uint16_t)i) {
			snprintf(
				why, whylen,
				"slot %u is not this partition's (map epoch %llu)",
				s, (unsigned long long)p->map->epoch);
			return DL_EBADARG;
		}
	if (tolen == strlen(p->id) && memcmp(to, p->id, tolen) == 0) {
		snprintf(why, whylen, "the slots are this partition's already");
		return DL_EBADARG;
	}
	if (dl_map_find(p->map, to, tolen) < 0) {
		/* its names would be sent where nobody answers */
		snprintf(
			why, whylen,
			"no partition %.*s in the map: start its daemons first (each adds itself)",
			(int)tolen, to);
		return DL_EBADARG;
	}
	if (p->gone_gen != dl_store_part_gen(p->st))
		read_gone(p);
	if (pending(p, p->map)) {
		snprintf(
			why, whylen,
			"limit reached: move %llu of this partition is not in the map yet",
			(unsigned long long)p->gone_n);
		return DL_ELIMIT;
	}
	if (awaiting(p)) {
		/* its slots' locks are not all here yet: a move of them now
		 * would leave the ones still to come behind */
		snprintf(
			why, whylen,
			"limit reached: this partition has not imported the locks of move %llu of partition %s yet",
			(unsigned long long)p->map->part[p->awaiting - 1].gave,
			p->map->part[p->awaiting - 1].id);
		return DL_ELIMIT;
	}
	if (p->map->part[i].pend[0]) {
		/* the record holds one move's locks: the last one's first */
		snprintf(
			why, whylen,
			"limit reached: partition %s has not imported the locks of move %llu of this one yet",
			p->map->part[i].pend,
			(unsigned long long)p->map->part[i].gave);
		return DL_ELIMIT;
	}
	/* step 1: nothing of them served from now on, their queues frozen
	 * (the record carries what they hold) */
	dl_locktab_pin(p->tab, 1);
	while (!dl_locktab_walk(p->tab, &cursor, 4096, busy_cb, &b))
		;
	dl_locktab_pin(p->tab, 0);
	if (b.n > DL_MOVE_LOCKS_MAX) {
		snprintf(
			why, whylen,
			"limit reached: %zu locks in those slots, a move carries at most %d: move fewer slots at once",
			b.n, DL_MOVE_LOCKS_MAX);
		return DL_ELIMIT;
	}
	if (b.n) {
		/* the map says the slots awaiting the import (pslots=) */
		char rs[DL_PEND_SLOTS_MAX];

		if (dl_set_ranges(set, rs, sizeof(rs)) != 0) {
			snprintf(
				why, whylen,
				"limit reached: a move with locks names its slots in at most %d bytes of ranges: move fewer ranges at once",
				DL_PEND_SLOTS_MAX - 1);
			return DL_ELIMIT;
		}
	}
	memcpy(p->moving, set, DL_SLOTS);
	p->carry = b.n > 0;
	refreeze(p);
	/* step 2: the record, under the fence: move n, one past every move
	 * the map or the record knows */
	move_n = (p->map->part[i].gave > p->gone_n ? p->map->part[i].gave
						   : p->gone_n) +
		 1;
	if (!(m = malloc(sizeof(*m)))) {
		unmove(p);
		return DL_ENOMEM;
	}
	dl_map_init(m);
	i = dl_map_add(m, "x", 1);
	for (s = 0; s < DL_SLOTS; s++)
		if (set[s])
			m->owner[s] = (uint16_t)i;
	n = (size_t)snprintf(gone, sizeof(move_record), "%llu %.*s %llu ",
			     (unsigned long long)move_n, (int)tolen, to,
			     (unsigned long long)dl_locktab_last_token(p->tab));
	r = dl_map_ranges(m, i, gone + n, sizeof(move_record) - n);
	free(m);
	n = strlen(gone);
	if (r == 0 && b.n &&
	    (size_t)snprintf(gone + n, sizeof(move_record) - n, " locks=%zu",
			     b.n) >= sizeof(move_record) - n)
		r = -1;
	if (r != 0) {
		unmove(p);
		snprintf(why, whylen, "too many ranges of slots at once");
		return DL_EBADARG;
	}
	snprintf(p->to, sizeof(p->to), "%.*s", (int)tolen, to);
	p->move_n = move_n;
	/* the record goes behind a copy of the map being written (found by
	 * make check: refused then, a MOVE right after a map change failed
	 * with "try again"); on_copied sends it */
	if (p->copying) {
		p->note_again = 1;
	} else if ((r = send_note(p)) != 0) {
		unmove(p);
		snprintf(
			why, whylen,
			r == DL_ELIMIT
				? "limit reached: the locks of those slots are more than a move carries (DL_MOVE_TEXT_MAX): move fewer slots at once"
				: "persistence is down, try again");
		return r;
	}
	p->ask = ASK_MOVE_NOTE;
	p->done = done;
	p->arg = arg;
	p->asked_ms = uv_now(p->loop);
	return 0;
}

int dl_part_busy(const struct dl_part *p)
{
	return p->ask != ASK_NONE;
}
