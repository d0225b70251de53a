/* SPDX-License-Identifier: MIT */
/*
 * part_move.c -- moving slots with their locks (part.c's top comment
 * says the steps): the giver's side -- PARTITION MOVE, the record of the
 * move with its slots' locks, the freeze of those slots and the
 * extraction of their locks once the map has the move -- and the
 * receiver's -- reading the giver's record, importing its locks before
 * it serves their slots, and what it does when Redis lost that record.
 * The state is struct dl_part's (part_private.h), which part.c owns; this
 * file writes only the fields of a move (carry, move_n, moving, frozen,
 * note_epoch, ...) and of an import (awaiting, incoming, importing,
 * take_*, lost_since, ...).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/buf.h"
#include "server/locktab/locktab.h"
#include "server/log.h"
#include "server/part/part_private.h"

char dl__part_move_record[DL_STORE_PART_MAX];

static void on_noted(int ok, void *arg);
static void next_awaited(struct dl_part *p);

/* The record of this partition's last move, as the store has it now,
 * says its locks have not all left yet (locks=). */
static int own_locks_leaving(struct dl_part *p)
{
	if (p->gone_gen != dl_store_part_gen(p->st)) {
		dl__part_read_gone(p);
		dl__part_refreeze(p); /* its slots, frozen at once */
	}
	return p->gone_n && p->gone_locks;
}
static void took_with(const struct dl_part *p, const char *from, uint64_t n,
		      char *took, size_t cap);
static void lost_record(struct dl_part *p, struct job *j);

/* TAKE: the giver's record, from the shard of its keyspace (another slot
 * than the map's: a connection of its own, for this job). */
void dl__part_work_take(struct dl_part *p, struct job *j)
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
	c = dl__part_connect_slot(p, dl_key_slot(key, strlen(key)), j->why,
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

/* ---- moving locks ------------------------------------------------------ */

/* The slots whose locks must not change: a move's under way (step 1),
 * and those the record gave away with locks while the map does not have
 * the move yet, or does and the table may still hold them (extracted
 * below). Set in the table only while one is. */
void dl__part_refreeze(struct dl_part *p)
{
	int any = 0;
	unsigned s;

	/* until the record says its locks are gone (locks= cleared, once
	 * their extraction is durable), whoever the map gives the slots to
	 * now (found in review: given back before the extraction ran, a
	 * slot thawed and a waiter was granted a lock then extracted) */
	for (s = 0; s < DL_SLOTS; s++) {
		p->frozen[s] = p->moving[s] ||
			       (p->gone_n && p->gone_locks && p->gone[s]);
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

	/* every lock of the record's slots: until its locks= is cleared
	 * this partition serves none of them, whoever has them now */
	if (g->err || !g->p->gone[s])
		return;
	if (dl_buf_add(&g->names, lk->name, lk->hn.len) ||
	    dl_buf_add(&g->names, "", 1))
		g->err = DL_ENOMEM;
}

/* Step 5: the map has the move, so the locks it carried leave the table
 * (each waiter told * MOVED: its place is at the receiver). Once per
 * record and map; again after a load (a take-over, a restart: the table
 * read back what the last extraction had not deleted yet). Once the
 * deletions are durable the record's locks= goes (gone_locks_done): the
 * slots thaw, and may be served again if they come back. */
void dl__part_extract_gone(struct dl_part *p)
{
	struct gone_walk g = {.p = p};
	size_t cursor = 0, off, n = 0;

	(void)own_locks_leaving(p); /* the record as the store has it */

	/* not while a reply stating one of their leases may wait for its
	 * epoch: it says what remains of the lease as the table has it
	 * (held.c), and one extracted would be told 0 while it lives on at
	 * the receiver (found from outside: a grant a few ms before the
	 * move was told ttl_ms 0) */
	if (p->note_epoch && dl_store_committed(p->st) < p->note_epoch &&
	    !dl_store_idle(p->st))
		return;
	if (!p->gone_n || !p->gone_locks || p->self < 0 ||
	    dl__part_pending(p, p->map) || !dl_store_active(p->st) ||
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
	p->extracted_n = p->gone_n;
	p->extracted_loads = dl_store_part_loads(p->st); /* of this table */
	p->extracted_epoch = dl_store_epoch(p->st);	 /* their deletions */
	if (n)
		dl_notice(
			"partition %s: %zu locks of move %llu left for partition %s",
			p->id, n, (unsigned long long)p->gone_n, p->gone_to);
}

static void on_let_go(int ok, void *arg)
{
	struct dl_part *p = arg;

	if (ok) {
		dl__part_read_gone(p);
		dl__part_refreeze(p);
	}
}

void dl__part_gone_locks_done(struct dl_part *p)
{
	char text[DL_STORE_PART_MAX];
	const char *g = dl_store_part_gone(p->st), *lk;

	if (!p->gone_n || !p->gone_locks || p->extracted_n != p->gone_n ||
	    p->extracted_loads != dl_store_part_loads(p->st) ||
	    p->ask != ASK_NONE || p->copying || p->importing ||
	    !dl_store_active(p->st) ||
	    (dl_store_committed(p->st) < p->extracted_epoch &&
	     !dl_store_idle(p->st)) ||
	    !(lk = strstr(g, " locks=")) || (size_t)(lk - g) >= sizeof(text))
		return;
	memcpy(text, g, (size_t)(lk - g));
	text[lk - g] = '\0';
	(void)dl_store_part_write(p->st, DL_PART_GONE, text, on_let_go, p);
}

/* The last move of partition `id` whose locks this one imported (its
 * "took" record: "<id>:<n> ..."), 0: none. */
uint64_t dl__part_took_of(const struct dl_part *p, const char *id)
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
int dl__part_awaiting(struct dl_part *p)
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
		    dl__part_took_of(p, mp->id) >= mp->gave)
			continue;
		/* the one to read next: from await_from on, round the map
		 * (found in review: one giver's shard down held every other
		 * move to here) */
		if (!p->awaiting || (p->awaiting - 1 < (int)p->await_from &&
				     i >= p->await_from))
			p->awaiting = (int)i + 1;
		/* its slots (a map without pslots=: all of them) */
		if (!mp->pend_slots[0] ||
		    dl_slots_parse(mp->pend_slots, strlen(mp->pend_slots),
				   p->incoming) < 0)
			memset(p->incoming, 1, DL_SLOTS);
	}
	return p->awaiting;
}

/* The awaited move read next is the one after this one's line. */
static void next_awaited(struct dl_part *p)
{
	if (p->awaiting)
		p->await_from = (unsigned)p->awaiting % DL_PARTS_MAX;
	p->await_gen = p->gen - 1; /* computed again */
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
	dl__part_next_job(p); /* the map without pend= (wanted) */
}

/* The record of a move to this partition, read (j): import its locks. */
void dl__part_on_take(struct dl_part *p, struct job *j)
{
	char took[DL_STORE_PART_MAX], why[300], to[DL_PART_ID_MAX + 1];
	unsigned long long n = 0, hn = 0, count = 0;
	char hfrom[DL_PART_ID_MAX + 1], hto[DL_PART_ID_MAX + 1];
	int k = 0, r;

	p->take_ms = uv_now(p->loop);
	if (own_locks_leaving(p)) /* a load since it was queued */
		return;
	if (dl__part_awaiting(p) == 0 ||
	    strcmp(p->map->part[p->awaiting - 1].id, j->from) != 0 ||
	    p->map->part[p->awaiting - 1].gave != j->n)
		return; /* the map moved on meanwhile */
	if (j->err) {
		next_awaited(p);
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
	if (r == DL_EPROTO) {
		/* its text does not parse: as lost (bounded by max_ttl) */
		dl_error(
			"partition %s: the locks of move %llu of partition %s: %s",
			p->id, (unsigned long long)j->n, j->from, why);
		lost_record(p, j);
		return;
	}
	if (r) {
		next_awaited(p);
		if (!p->take_said)
			dl_error(
				"partition %s: importing the locks of move %llu of partition %s: %s",
				p->id, (unsigned long long)j->n, j->from, why);
		p->take_said = 1;
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
		dl__part_next_job(p);
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
	next_awaited(p);
	char took[DL_STORE_PART_MAX];
	uint64_t now = uv_now(p->loop);

	if (!p->take_said)
		dl_error(
			"partition %s: the map says move %llu of partition %s brought locks here, but its record says \"%.60s\" (Redis lost it?); the move's slots are not served for max_ttl (%llu ms) unless it comes back",
			p->id, (unsigned long long)j->n, j->from,
			j->gone ? j->gone : "(none)",
			(unsigned long long)p->cfg->max_ttl_ms);
	p->take_said = 1;
	/* since when this move's record is lost (found in review: kept
	 * across another move awaited meanwhile) */
	if (p->lost_n != j->n || strcmp(p->lost_from, j->from) != 0) {
		p->lost_since = 0;
		p->lost_n = j->n;
		snprintf(p->lost_from, sizeof(p->lost_from), "%s", j->from);
	}
	if (!p->lost_since)
		p->lost_since = now ? now : 1;
	if (now - p->lost_since < p->cfg->max_ttl_ms)
		return;
	took_with(p, j->from, j->n, took, sizeof(took));
	if (dl_store_part_write(p->st, DL_PART_TOOK, took, on_given_up, p) == 0)
		p->importing = 1;
}

/* Step 4: read the record of a move to this partition not imported. */
int dl__part_take(struct dl_part *p)
{
	const struct dl_map_part *mp;

	/* not before this partition's own last move let its locks go:
	 * those slots may be the ones coming back -- by the record as the
	 * store has it now (found from outside: right after a take-over
	 * the parse was the standby's, without locks=, so the new active
	 * imported the slots coming back, then its extraction of its own
	 * older move deleted the leases just imported) */
	if (!dl__part_awaiting(p) || p->importing || p->job ||
	    own_locks_leaving(p) || !dl_store_active(p->st) ||
	    (p->take_ms && uv_now(p->loop) - p->take_ms < DL_MAP_POLL_MS))
		return 0;
	mp = &p->map->part[p->awaiting - 1];
	if (dl__part_queue(p, JOB_TAKE, NULL, NULL) != 0)
		return 0;
	snprintf(p->job->from, sizeof(p->job->from), "%s", mp->id);
	p->job->n = mp->gave;
	uv_queue_work(p->loop, &p->job->req, dl__part_work,
		      dl__part_after_work);
	return 1;
}

/* Step 2: the move's record, with the locks of its slots if it carries
 * them (as the table holds them now: frozen, they only lessen since the
 * move began). */
int dl__part_send_note(struct dl_part *p)
{
	size_t nlocks;

	/* replies about those locks from before the record (a grant whose
	 * reply waits for Redis) are in this epoch or an earlier one */
	p->note_epoch = dl_store_epoch(p->st);

	if (!p->carry)
		return dl_store_part_write(p->st, DL_PART_GONE,
					   dl__part_move_record, on_noted, p);
	return dl_store_part_move(p->st, dl__part_move_record, p->moving, p->id,
				  p->to, p->move_n, &nlocks, on_noted, p);
}

/* A move given up before its record was known written: its slots are
 * served again, its command told why. */
static void abandon(struct dl_part *p, const char *why)
{
	memset(p->moving, 0, DL_SLOTS);
	p->carry = 0;
	p->note_again = 0;
	dl__part_refreeze(p);
	dl__part_finish(p, DL_EUNAVAILABLE, why);
}

void dl__part_resend_note(struct dl_part *p)
{
	int r;

	if (dl_store_part_loads(p->st) != p->move_loads) {
		/* A load since (a take-over, by this daemon or another):
		 * the record it read says whether the move landed, and a
		 * write of it now could overwrite a newer move's (found in
		 * review: a deposed active that took the partition back
		 * sent its stale move over the one its successor made). */
		dl__part_read_gone(p);
		if (strcmp(dl_store_part_gone(p->st), dl__part_move_record) ==
		    0) {
			p->note_again = 0;
			on_noted(1, p);
		} else {
			abandon(p,
				"the move was not recorded before this daemon lost the partition: see MAP");
		}
		return;
	}
	r = dl__part_send_note(p);
	if (r == 0)
		p->note_again = 0;
	else if (r == DL_ELIMIT || r == DL_EBADARG)
		/* it cannot be sent at all (found in review: a record too
		 * big, deferred behind a copy of the map, was tried again
		 * for good and its slots stayed unserved) */
		abandon(p,
			r == DL_ELIMIT
				? "limit reached: the locks of those slots are more than a move carries (DL_MOVE_TEXT_MAX): move fewer slots at once"
				: "the move's record cannot be written");
	/* else the link, or another write of the record: at the next tick */
}

static void on_cleared(int ok, void *arg)
{
	(void)ok;
	(void)arg;
}

/* The locks of the last move, once imported by their receiver (the map
 * says no pend= for it), leave the record: every load reads it. */
void dl__part_clear_moved(struct dl_part *p)
{
	int i;

	if (!dl_store_part_moved_len(p->st) || p->ask != ASK_NONE ||
	    p->copying || p->importing || !dl_store_active(p->st) ||
	    !p->map->epoch || (i = dl__part_own_index(p->map, p)) < 0 ||
	    dl__part_pending(p, p->map) || p->map->part[i].pend[0] ||
	    p->fresh != dl_store_part_loads(p->st))
		return;
	(void)dl_store_part_write(p->st, DL_PART_MOVED, "", on_cleared, p);
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
	dl__part_read_gone(p);
	memset(p->moving, 0, DL_SLOTS); /* the record keeps them unserved */
	p->carry = 0;
	dl__part_refreeze(p); /* ... and frozen, if it carried locks */
	p->ask = ASK_MOVE_MAP;
	dl__part_next_job(p);
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
	dl__part_refreeze(p);
}

int dl_part_move(struct dl_part *p, const uint8_t *set, const char *to,
		 size_t tolen, dl_part_done done, void *arg, char *why,
		 size_t whylen)
{
	char *gone = dl__part_move_record;
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
	if (!p->map->epoch || (i = dl__part_own_index(p->map, p)) < 0) {
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
		dl__part_read_gone(p);
	if (dl__part_pending(p, p->map)) {
		snprintf(
			why, whylen,
			"limit reached: move %llu of this partition is not in the map yet",
			(unsigned long long)p->gone_n);
		return DL_ELIMIT;
	}
	if (dl__part_awaiting(p)) {
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
	if (p->gone_n && p->gone_locks) {
		snprintf(
			why, whylen,
			"limit reached: the locks of move %llu are still leaving this partition, try again",
			(unsigned long long)p->gone_n);
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
	dl__part_refreeze(p);
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
	n = (size_t)snprintf(gone, sizeof(dl__part_move_record),
			     "%llu %.*s %llu ", (unsigned long long)move_n,
			     (int)tolen, to,
			     (unsigned long long)dl_locktab_last_token(p->tab));
	r = dl_map_ranges(m, i, gone + n, sizeof(dl__part_move_record) - n);
	free(m);
	n = strlen(gone);
	if (r == 0 && b.n &&
	    (size_t)snprintf(gone + n, sizeof(dl__part_move_record) - n,
			     " locks=%zu",
			     b.n) >= sizeof(dl__part_move_record) - n)
		r = -1;
	if (r != 0) {
		unmove(p);
		snprintf(why, whylen, "too many ranges of slots at once");
		return DL_EBADARG;
	}
	snprintf(p->to, sizeof(p->to), "%.*s", (int)tolen, to);
	p->move_n = move_n;
	p->move_loads = dl_store_part_loads(p->st);
	/* the record goes behind a copy of the map being written (found by
	 * make check: refused then, a MOVE right after a map change failed
	 * with "try again"); on_copied sends it */
	if (p->copying) {
		p->note_again = 1;
	} else if ((r = dl__part_send_note(p)) != 0) {
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
