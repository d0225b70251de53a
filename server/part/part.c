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
 *      waiter is told * MOVED (its place waits at the receiver); once
 *      those deletions are durable it writes the record again without
 *      locks=, and only then do the slots thaw (and serve, should they
 *      have come back meanwhile).
 * A partition makes no move while its line says pend= (the record holds
 * the last move's locks only) or its record still says locks=, and
 * imports nothing while its own record says locks=. A move whose record
 * was not known written when a load came (a take-over) is not sent again:
 * the record that load read says whether it landed (part_move.c). A take-over
 * at either end reads the record and goes on from where it is. What a lease
 * costs here is time: the receiver restores it for its whole TTL, as a
 * take-over does.
 *
 * What is not done yet: a map that Redis forgot entirely is written back
 * only by a daemon that knew it, and a daemon that never read a map
 * serves nothing until one exists (PARTITION INIT creates the first).
 * A giver's record that Redis lost before the receiver imported it leaves
 * the move's slots unserved (said in the log) until an operator acts.
 */
#include "server/part/part_private.h"

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
redisContext *dl__part_connect_slot(struct dl_part *p, unsigned slot, char *why,
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
	p->c = dl__part_connect_slot(p, p->slot, j->why, sizeof(j->why));
	return p->c ? 0 : -1;
}

void dl__part_work(uv_work_t *req)
{
	struct job *j = req->data;
	struct dl_part *p = j->p;
	redisReply *r;

	if (j->kind == JOB_TAKE) {
		dl__part_work_take(p, j);
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
void dl__part_read_gone(struct dl_part *p)
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
void dl__part_finish(struct dl_part *p, int err, const char *text)
{
	p->ask = ASK_NONE;
	answer(p, err, text);
}

int dl__part_own_index(const struct dl_map *m, const struct dl_part *p)
{
	return dl_map_find(m, p->id, strlen(p->id));
}

/* The record's move is not in map m yet (m's gave= of this partition is
 * below its number). */
int dl__part_pending(const struct dl_part *p, const struct dl_map *m)
{
	int i;

	if (!p->gone_n || !m->epoch)
		return 0;
	i = dl__part_own_index(m, p);
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

static void say_map(struct dl_part *p)
{
	int i = dl__part_own_index(p->map, p);
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
	/* the active's table only (found from outside: a paused active,
	 * resumed after its successor's move, raised it a moment before
	 * it stepped down) */
	dl_locktab_pin(p->tab, 1);
	while (dl_store_active(p->st) &&
	       !dl_locktab_walk(p->tab, &cursor, 4096, stray_cb, &x))
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
		dl__part_read_gone(
			p); /* a load since: its record, not the last one's */
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
	if (dl_store_active(p->st) && dl__part_pending(p, m) &&
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
		    dl__part_took_of(p, n->part[t].id) >= n->part[t].gave) {
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
			dl__part_finish(p, 0, reply);
		else
			dl__part_finish(p, DL_EBADARG,
					"a partition map exists already");
	} else if (p->ask == ASK_MOVE_MAP && !dl__part_pending(p, p->map)) {
		/* the move is in the map: this write, or one that completed
		 * it (another active of the partition) */
		snprintf(reply, sizeof(reply), "epoch=%llu to=%s locks=%llu",
			 (unsigned long long)p->map->epoch, p->gone_to,
			 (unsigned long long)p->gone_locks);
		dl__part_finish(p, 0, reply);
	}
}

int dl__part_queue(struct dl_part *p, enum job_kind kind, const char *old,
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

static void on_copied(int ok, void *arg)
{
	struct dl_part *p = arg;

	p->copying = 0;
	if (ok)
		p->copy_epoch = p->pending_copy;
	if (p->ask == ASK_MOVE_NOTE && p->note_again)
		dl__part_resend_note(p);
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
		if (dl__part_queue(p, JOB_CAS, text ? text : "", p->text) == 0)
			uv_queue_work(p->loop, &p->job->req, dl__part_work,
				      dl__part_after_work);
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
	dl__part_refreeze(p);
	dl__part_extract_gone(p);
	asked(p, ours);
	if (wanted(p, p->map, out, sizeof(out))) {
		if (dl__part_queue(p, JOB_CAS, p->text ? p->text : "", out) ==
		    0)
			uv_queue_work(p->loop, &p->job->req, dl__part_work,
				      dl__part_after_work);
		return;
	}
	if (p->ask == ASK_ADDRS) {
		char reply[80];

		snprintf(reply, sizeof(reply), "epoch=%llu",
			 (unsigned long long)p->map->epoch);
		dl__part_finish(p, 0, reply);
	}
}

void dl__part_after_work(uv_work_t *req, int status)
{
	struct job *j = req->data;
	struct dl_part *p = j->p;

	(void)status;
	p->job = NULL;
	if (!p->closing) {
		if (j->err && j->kind == JOB_TAKE) {
			dl__part_on_take(p, j); /* says it */
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
				dl__part_on_take(p, j);
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

void dl__part_next_job(struct dl_part *p)
{
	if (p->job || p->closing || dl__part_take(p))
		return;
	if (dl__part_queue(p, JOB_GET, NULL, NULL) == 0)
		uv_queue_work(p->loop, &p->job->req, dl__part_work,
			      dl__part_after_work);
}

static void on_tick(uv_timer_t *t)
{
	struct dl_part *p = t->data;
	uint64_t now = uv_now(p->loop);

	dl__part_read_gone(p);
	load_seen(p);
	dl__part_refreeze(p);
	dl__part_extract_gone(p);
	dl__part_gone_locks_done(p);
	copy_map(p);
	dl__part_clear_moved(p);
	if (p->ask == ASK_MOVE_NOTE && p->note_again)
		dl__part_resend_note(p);
	if (p->ask == ASK_MOVE_NOTE || p->ask == ASK_MOVE_MAP) {
		if (p->done && now - p->asked_ms > DL_MAP_ASK_MS)
			answer(p, DL_EUNAVAILABLE,
			       "the move is under way: this daemon completes it, and MAP will show it");
	} else if (p->ask != ASK_NONE && now - p->asked_ms > DL_MAP_ASK_MS) {
		dl__part_finish(
			p, DL_EUNAVAILABLE,
			"the map could not be written in time, try again");
	}
	dl__part_next_job(p);
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
	dl__part_finish(p, DL_EUNAVAILABLE, "shutting down");
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
		dl__part_next_job(
			p); /* read it now rather than at the next tick */
		return DL_ROUTE_UNKNOWN;
	}
	o = p->map->owner[slot]; /* after load_seen: the map it may adopt */
	if (p->gone_gen != dl_store_part_gen(p->st)) {
		dl__part_read_gone(p); /* a load or a write since */
		dl__part_refreeze(p);
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
			dl__part_next_job(p);
		}
		*to = mp;
		return DL_ROUTE_AWAY;
	}
	/* a record whose locks have not left yet keeps its slots too, if
	 * they came back meanwhile (dl__part_refreeze) */
	if (p->moving[slot] ||
	    (p->gone[slot] &&
	     (dl__part_pending(p, p->map) || (p->gone_n && p->gone_locks))))
		return DL_ROUTE_MOVING;
	if (dl__part_awaiting(p) && p->incoming[slot]) {
		dl__part_next_job(
			p); /* its import, now rather than at the next tick */
		return DL_ROUTE_IMPORTING;
	}
	if (dl_locktab_last_token(p->tab) < mp->floor)
		dl_locktab_raise_token(p->tab, mp->floor);
	return DL_ROUTE_HERE;
}

const struct dl_map_part *dl_part_owner_of(const struct dl_part *p,
					   struct dl_str name)
{
	uint16_t o = p->map->owner[dl_key_slot(name.p, name.len)];

	if (!p->map->epoch || o == DL_MAP_NOBODY || (int)o == p->self)
		return NULL;
	return &p->map->part[o];
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
	int i = dl__part_own_index(p->map, p);
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
	dl__part_next_job(p);
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

int dl_part_busy(const struct dl_part *p)
{
	return p->ask != ASK_NONE;
}
