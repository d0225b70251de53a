/* SPDX-License-Identifier: MIT */
/*
 * store_part.c -- what the partition layer (server/part/) keeps in the
 * lock table's own keyspace, under the table's fence:
 *
 *   P part  hash; field "gone":  "<n> <partition> <floor> <slots>"
 *                 field "moved": the locks move n carried (below)
 *                 field "took":  "<partition>:<n> ..." the last move of
 *                                each partition whose locks this one
 *                                imported
 *                 field "map":   the partition map's text, a copy
 *
 * the slots this partition's move n gives away, written before the
 * partition map says so (part.c tells why that order), with the locks
 * they held; the moves of others whose locks came here; and the newest
 * map the partition's active read, so that a map Redis lost is written
 * back by the partition's next start even when no daemon of the
 * namespace ran through the loss. Each write is one call of
 * dlock_apply_v11 (store_batch.c) with the fence, so a deposed active
 * cannot write it, and in the link's pipeline behind every batch sent
 * before it; with [persistence] min_replicas_ack a WAIT follows, and the
 * write is done only once the replicas have it, as a grant is. The record
 * is read by every load, so a daemon that takes over knows what its
 * predecessor gave away and took. The values are the partition layer's
 * text: the store neither parses nor checks them, but for the locks.
 * One write at a time.
 *
 * The locks a move carries ("moved"): one text, a header and each lock's
 * record (record.h) as this table holds it when the move is written:
 *
 *   dlock-moved 1 <n> <from> <to> <count>
 *   L <name> <bytes>
 *   <record: that many bytes>
 *   L ...
 *
 * each record followed by a LF. Written in the same call as "gone", so
 * Redis never holds the one without the other. The receiving partition
 * reads it from the giver's keyspace (part.c), restores the locks as a
 * load would (dl_store_import: each lease with its owner, token and
 * proof, for its whole TTL from the import; each waiter a placeholder),
 * and writes them into its own buckets in one call with its "took", so
 * that a take-over or a restart never imports a move twice.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/slot.h"
#include "server/clock.h"
#include "server/log.h"
#include "server/store/record.h"
#include "server/store/store_load.h"
#include "server/store/store_private.h"

#define MOVED_MAGIC "dlock-moved 1"

const char *dl_store_part_gone(const struct dl_store *st)
{
	return st->part.gone;
}

const char *dl_store_part_map(const struct dl_store *st)
{
	return st->part.map ? st->part.map : "";
}

const char *dl_store_part_took(const struct dl_store *st)
{
	return st->part.took;
}

unsigned dl_store_part_gen(const struct dl_store *st)
{
	return st->part.gen;
}

unsigned dl_store_part_loads(const struct dl_store *st)
{
	return st->part.loads;
}

static const char *const fields[] = {"gone", "map", "took", "moved"};

size_t dl_store_part_moved_len(const struct dl_store *st)
{
	return st->part.moved_len;
}

/* ---- one write ------------------------------------------------------------
 */

/* The arguments of one apply call, built up: its keys and its ops. */
struct call {
	size_t n, cap;	  /* ops */
	const char **key; /* [cap] */
	size_t *klen;	  /* [cap] */
	const char **op;  /* [3 * cap]: S|D, field, value */
	size_t *oplen;	  /* [3 * cap] */
};

static void call_free(struct call *k)
{
	free(k->key);
	free(k->klen);
	free(k->op);
	free(k->oplen);
}

static int call_add(struct call *k, const char *key, size_t klen,
		    const char *op, const char *field, size_t flen,
		    const char *value, size_t vlen)
{
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 8;
		const char **a = realloc(k->key, cap * sizeof(*a)), **c;
		size_t *b, *d;

		if (a)
			k->key = a;
		if ((b = realloc(k->klen, cap * sizeof(*b))) != NULL)
			k->klen = b;
		if ((c = realloc(k->op, 3 * cap * sizeof(*c))) != NULL)
			k->op = c;
		if ((d = realloc(k->oplen, 3 * cap * sizeof(*d))) != NULL)
			k->oplen = d;
		if (!a || !b || !c || !d)
			return DL_ENOMEM;
		k->cap = cap;
	}
	k->key[k->n] = key;
	k->klen[k->n] = klen;
	k->op[3 * k->n] = op;
	k->oplen[3 * k->n] = 1;
	k->op[3 * k->n + 1] = field;
	k->oplen[3 * k->n + 1] = flen;
	k->op[3 * k->n + 2] = value;
	k->oplen[3 * k->n + 2] = vlen;
	k->n++;
	return 0;
}

static int call_field(struct call *k, struct dl_store *st, enum dl_part_field f,
		      const char *value, size_t len)
{
	return call_add(k, st->keys.part, strlen(st->keys.part), "S", fields[f],
			strlen(fields[f]), value, len);
}

/* Send the call, and a WAIT behind it when replicas must have it. */
static int call_send(struct dl_store *st, struct call *k,
		     void (*done)(int ok, void *arg), void *arg)
{
	size_t argc = 3 + 4 + k->n + 3 + 3 * k->n, i, j = 0;
	const char **argv = malloc(argc * sizeof(*argv));
	size_t *lens = malloc(argc * sizeof(*lens));
	char nkeys[24];
	int r;

	if (!argv || !lens) {
		free(argv);
		free(lens);
		return DL_ENOMEM;
	}
	snprintf(nkeys, sizeof(nkeys), "%zu", 4 + k->n);
	argv[j++] = "FCALL";
	argv[j++] = DL_STORE_APPLY_FN;
	argv[j++] = nkeys;
	argv[j++] = st->keys.fence;
	argv[j++] = st->keys.token;
	argv[j++] = st->keys.gen;
	argv[j++] = st->keys.leader;
	for (i = 0; i < j; i++)
		lens[i] = strlen(argv[i]);
	for (i = 0; i < k->n; i++) {
		lens[j] = k->klen[i];
		argv[j++] = k->key[i];
	}
	argv[j] = st->fence;
	lens[j] = strlen(st->fence);
	j++;
	argv[j] = ""; /* no token mark */
	lens[j++] = 0;
	argv[j] = st->lead.instance;
	lens[j] = strlen(st->lead.instance);
	j++;
	for (i = 0; i < 3 * k->n; i++) {
		lens[j] = k->oplen[i];
		argv[j++] = k->op[i];
	}
	/* set first: a failed link answers at once (dl__part_reply) */
	st->part.done = done;
	st->part.arg = arg;
	/* epoch 2: a WAIT follows, whose reply is the write's (store_link.c) */
	r = dl__batch_send(st, BATCH_PART,
			   st->cfg->min_replicas_ack ? PART_WAITED : PART_SENT,
			   (int)argc, argv, lens);
	free(argv);
	free(lens);
	if (r) {
		st->part.done = NULL;
		return r;
	}
	if (st->cfg->min_replicas_ack &&
	    dl__send_wait(st, BATCH_PART, PART_SENT) != 0)
		/* the call is on its way, its answer will not come: the
		 * link goes, and the write is not known done */
		dl__link_fail(st, "cannot queue a WAIT");
	return 0;
}

static int can_write(const struct dl_store *st)
{
	return !st->part.done && st->link == LINK_UP && st->lead.active;
}

int dl_store_part_write(struct dl_store *st, enum dl_part_field field,
			const char *value, void (*done)(int ok, void *arg),
			void *arg)
{
	struct call k = {0};
	size_t n = strlen(value);
	int r;

	if (!can_write(st))
		return DL_EUNAVAILABLE;
	if (((field == DL_PART_GONE || field == DL_PART_TOOK) &&
	     n >= DL_STORE_PART_MAX) ||
	    n >= DL_MAP_COPY_MAX || (field == DL_PART_MOVED && n))
		return DL_EBADARG; /* "moved" is only ever cleared so */
	if (!(st->part.sending = strdup(value)))
		return DL_ENOMEM;
	st->part.field = field;
	st->part.sending_moved = 0; /* "moved" stays as it is */
	r = call_field(&k, st, field, st->part.sending, n);
	if (r == 0)
		r = call_send(st, &k, done, arg);
	call_free(&k);
	if (r) {
		free(st->part.sending);
		st->part.sending = NULL;
	}
	return r;
}

/* ---- a move's locks ---------------------------------------------------- */

struct moving {
	struct dl_store *st;
	const uint8_t *slots;
	int64_t wall_off;
	struct dl_buf *text, rec;
	size_t n;
	int err;
};

static void moving_cb(const struct dl_lock *lk, void *arg)
{
	struct moving *m = arg;

	if (m->err || (!lk->listed && !lk->delaying) ||
	    !m->slots[dl_key_slot(lk->name, lk->hn.len)])
		return;
	if ((m->err = dl_record_format(m->st->tab, lk, m->wall_off, &m->rec)))
		return;
	if (dl_buf_printf(m->text, "L %.*s %zu\n", (int)lk->hn.len, lk->name,
			  m->rec.len) ||
	    dl_buf_add(m->text, m->rec.p, m->rec.len) ||
	    dl_buf_add(m->text, "\n", 1)) {
		m->err = DL_ENOMEM;
		return;
	}
	if (++m->n > DL_MOVE_LOCKS_MAX || m->text->len > DL_MOVE_TEXT_MAX)
		m->err = DL_ELIMIT;
}

int dl_store_part_move(struct dl_store *st, const char *gone,
		       const uint8_t *slots, const char *from, const char *to,
		       uint64_t n, size_t *nlocks,
		       void (*done)(int ok, void *arg), void *arg)
{
	struct dl_buf head = {0}, text = {0};
	struct moving m = {.st = st, .slots = slots, .text = &text};
	struct call k = {0};
	size_t cursor = 0, glen = strlen(gone);
	int r;

	*nlocks = 0;
	if (!can_write(st))
		return DL_EUNAVAILABLE;
	if (glen >= DL_STORE_PART_MAX)
		return DL_EBADARG;
	m.wall_off = dl__store_wall_offset();
	dl_locktab_pin(st->tab, 1);
	while (!m.err &&
	       !dl_locktab_walk(st->tab, &cursor, 4096, moving_cb, &m))
		;
	dl_locktab_pin(st->tab, 0);
	free(m.rec.p);
	r = m.err;
	if (!r && (dl_buf_printf(&head, MOVED_MAGIC " %llu %s %s %zu\n",
				 (unsigned long long)n, from, to, m.n) ||
		   dl_buf_add(&head, text.p, text.len) ||
		   !(st->part.sending = strdup(gone))))
		r = DL_ENOMEM;
	if (!r) {
		st->part.field = DL_PART_GONE;
		st->part.sending_moved = head.len;
		r = call_field(&k, st, DL_PART_GONE, st->part.sending, glen);
	}
	if (!r)
		r = call_add(&k, st->keys.part, strlen(st->keys.part), "S",
			     "moved", 5, head.p, head.len);
	if (!r)
		r = call_send(st, &k, done, arg);
	call_free(&k);
	free(head.p);
	free(text.p);
	if (r) {
		free(st->part.sending);
		st->part.sending = NULL;
		return r;
	}
	*nlocks = m.n;
	return 0;
}

/* ---- importing another partition's move --------------------------------- */

/* A holder of a record whose owner is bound to another key here (the
 * owner's id said HELLO with another key at this partition first): the
 * longest such lease's TTL, or 0. */
struct bound {
	struct dl_locktab *t;
	int conflict;	/* a holder's owner is bound to another key here */
	uint64_t ttl;	/* the longest TTL of all its holders */
	uint64_t token; /* ... and the largest token */
};

static int bound_cb(const struct dl_record_item *it, void *arg)
{
	struct bound *b = arg;

	if (it->kind != 'H')
		return 0;
	if (it->has_proof &&
	    dl_locktab_proof_conflicts(b->t, it->owner, it->proof))
		b->conflict = 1;
	/* every holder's: a shared one beside it believes as long (found
	 * in review: held for the conflicting one's TTL only, a longer
	 * shared lease was still believed when the lock was granted) */
	if (it->ttl_ms > b->ttl)
		b->ttl = it->ttl_ms;
	if (it->token > b->token)
		b->token = it->token;
	return 0;
}

/* The next "L <name> <bytes>\n<record>\n" of text from *at: 1 and the
 * two, 0 at the end, -1 if it does not parse. */
static int next_lock(const char *text, size_t len, size_t *at,
		     struct dl_str *name, struct dl_str *rec)
{
	const char *p = text + *at, *end = text + len, *sp, *nl;
	unsigned long long n = 0;

	if (p >= end)
		return 0;
	if (end - p < 2 || p[0] != 'L' || p[1] != ' ')
		return -1;
	p += 2;
	if (!(nl = memchr(p, '\n', (size_t)(end - p))) ||
	    !(sp = memchr(p, ' ', (size_t)(nl - p))) || sp == p ||
	    (size_t)(sp - p) > DL_NAME_MAX)
		return -1;
	*name = (struct dl_str){p, (size_t)(sp - p)};
	for (p = sp + 1; p < nl; p++) {
		if (*p < '0' || *p > '9' || n > DL_MOVE_TEXT_MAX)
			return -1;
		n = n * 10 + (unsigned long long)(*p - '0');
	}
	p = nl + 1;
	if (n >= (unsigned long long)(end - p) || p[n] != '\n')
		return -1;
	*rec = (struct dl_str){p, (size_t)n};
	*at = (size_t)(p + n + 1 - text);
	return 1;
}

int dl_store_import(struct dl_store *st, const char *text, size_t len,
		    const char *took, void (*done)(int ok, void *arg),
		    void *arg, char *why, size_t whylen)
{
	char err[256] = "";
	struct load_ctx x = {.st = st,
			     .err = err,
			     .errlen = sizeof(err),
			     .skip_bound_waiters = 1};
	struct dl_buf names = {0}, out = {0}, one = {0};
	struct call k = {0};
	struct dl_str name, rec;
	const char *nl = memchr(text, '\n', len);
	size_t at, off, n = 0, *end = NULL, klen, tlen = strlen(took);
	int64_t wall_off;
	int r = 0, more = 0;

	why[0] = '\0';
	if (!can_write(st)) {
		snprintf(why, whylen, "not the active with its link up");
		return DL_EUNAVAILABLE;
	}
	if (!nl || strncmp(text, MOVED_MAGIC " ", sizeof(MOVED_MAGIC)) != 0 ||
	    tlen >= DL_STORE_PART_MAX) {
		snprintf(why, whylen, "not a record of moved locks");
		return DL_EPROTO;
	}
	x.now_mono = dl_mono_ms();
	x.now_wall = dl_wall_ms();
	/* restore each lock as a load would, over whatever an earlier try
	 * left of it (this partition served none of them since: part.c) */
	at = (size_t)(nl + 1 - text);
	while (!r && (more = next_lock(text, len, &at, &name, &rec)) == 1) {
		redisReply v = {.type = REDIS_REPLY_STRING,
				.str = (char *)rec.p,
				.len = rec.len};

		struct bound b = {.t = st->tab};
		const char *bwhy;

		dl_locktab_extract(st->tab, name);
		x.bucket = dl_store_bucket(name.p, name.len);
		(void)dl_record_parse(rec.p, rec.len, bound_cb, &b, &bwhy);
		if (b.conflict && b.ttl) {
			/* A holder's owner is another key's here: its lease
			 * cannot be restored to it, and nobody else may have
			 * the lock while its holder may believe in it. Held
			 * by nobody for that lease's TTL -- not max_ttl, as
			 * for a record that cannot be read (found from
			 * outside: an id that said HELLO here first, with
			 * its own key, kept the lock a day). */
			uint64_t ttl = b.ttl > DL_TTL_STORE_MAX
					       ? DL_TTL_STORE_MAX
					       : b.ttl;

			dl_error(
				"partition: imported lock %.*s: its holder's owner is bound to another key here; held by nobody for its lease's TTL (%llu ms)",
				(int)name.len, name.p, (unsigned long long)ttl);
			dl_locktab_raise_token(st->tab, b.token);
			r = dl_locktab_quarantine(st->tab, name, (uint32_t)ttl,
						  dl_mono_ms() + ttl);
		} else {
			r = dl__load_record(&x, name, &v);
		}
		if (!r && dl__load_add_name(&names, name))
			r = DL_ENOMEM;
		n++;
	}
	/* the moved tokens are this table's last ones too, before any
	 * quarantine takes one and before the giver's next move names a
	 * floor (found in review: raised only by a routed request, so a
	 * move on at once could floor the next partition below them) */
	dl_locktab_raise_token(st->tab, x.max_token);
	if (!r && more < 0) {
		snprintf(why, whylen,
			 "the record of moved locks does not parse at byte %zu",
			 at);
		r = DL_EPROTO;
	}
	if (!r)
		r = dl__load_quarantine(&x);
	if (r) {
		if (!why[0])
			snprintf(why, whylen, "%s",
				 err[0] ? err : dl_strerror(r));
		goto out;
	}
	/* each lock's record as this table now holds it (a wait that ended
	 * meanwhile is not there; an unreadable one is held), into this
	 * keyspace in one call with "took" */
	if (!(end = malloc((n + 1) * sizeof(*end)))) {
		r = DL_ENOMEM;
		goto out;
	}
	wall_off = dl__store_wall_offset();
	n = 0;
	for (off = 0; !r && off < names.len; off += name.len + 1) {
		const struct dl_lock *lk;

		name = (struct dl_str){names.p + off, strlen(names.p + off)};
		lk = dl_locktab_find(st->tab, name);
		if (lk && (lk->listed || lk->delaying) &&
		    ((r = dl_record_format(st->tab, lk, wall_off, &one)) ||
		     dl_buf_add(&out, one.p, one.len)))
			r = r ? r : DL_ENOMEM;
		end[n++] = out.len;
	}
	n = 0;
	for (off = 0, at = 0; !r && off < names.len; off += name.len + 1) {
		const char *key;

		name = (struct dl_str){names.p + off, strlen(names.p + off)};
		key = dl__rec_key(st, dl_store_bucket(name.p, name.len), &klen);
		r = end[n] > at ? call_add(&k, key, klen, "S", name.p, name.len,
					   out.p + at, end[n] - at)
				: call_add(&k, key, klen, "D", name.p, name.len,
					   "", 0);
		at = end[n++];
	}
	if (!r && !(st->part.sending = strdup(took)))
		r = DL_ENOMEM;
	if (!r) {
		st->part.field = DL_PART_TOOK;
		r = call_field(&k, st, DL_PART_TOOK, st->part.sending, tlen);
	}
	if (!r)
		r = call_send(st, &k, done, arg);
	if (r) {
		free(st->part.sending);
		st->part.sending = NULL;
		snprintf(why, whylen, "%s", dl_strerror(r));
	} else {
		dl_info("partition: %zu locks imported, %zu leases and %zu places among them",
			n, x.leases, x.waiters);
	}
out:
	free(end);
	free(names.p);
	free(out.p);
	free(one.p);
	free(x.bad_names.p);
	free(x.changed_names.p);
	call_free(&k);
	return r;
}

void dl__part_reply(struct dl_store *st, int ok)
{
	void (*done)(int ok, void *arg) = st->part.done;
	char *v = st->part.sending;

	if (!done)
		return;
	st->part.done = NULL;
	st->part.sending = NULL;
	if (ok && st->part.field == DL_PART_GONE) {
		snprintf(st->part.gone, sizeof(st->part.gone), "%s", v);
		/* a move without locks leaves the last one's "moved" */
		if (st->part.sending_moved)
			st->part.moved_len = st->part.sending_moved;
		st->part.gen++;
	} else if (ok && st->part.field == DL_PART_MOVED) {
		st->part.moved_len = 0;
	} else if (ok && st->part.field == DL_PART_TOOK) {
		snprintf(st->part.took, sizeof(st->part.took), "%s", v);
		st->part.gen++;
	} else if (ok) {
		free(st->part.map);
		st->part.map = v;
		v = NULL;
	}
	free(v);
	done(ok, st->part.arg);
}

void dl__part_free(struct dl_store *st)
{
	free(st->part.map);
	free(st->part.sending);
	st->part.map = st->part.sending = NULL;
}

int dl__part_load(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	redisReply *r;
	size_t i;
	int rc = 0;

	st->part.gone[0] = '\0';
	st->part.took[0] = '\0';
	st->part.moved_len = 0;
	free(st->part.map);
	st->part.map = NULL;
	st->part.gen++;
	st->part.loads++;
	/* HGETALL: a right the daemon's ACL user has already (HMGET is
	 * not: found by make check's ACL test) */
	if (!(r = DL__LOAD_RUN(x, &rc, 0, "HGETALL", st->keys.part)))
		return rc;
	for (i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements;
	     i += 2) {
		redisReply *f = r->element[i], *v = r->element[i + 1];
		char *into = NULL;

		if (f->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue;
		if (strcmp(f->str, "gone") == 0)
			into = st->part.gone;
		else if (strcmp(f->str, "took") == 0)
			into = st->part.took;
		else if (strcmp(f->str, "map") == 0)
			st->part.map = strndup(v->str, v->len);
		else if (strcmp(f->str, "moved") == 0)
			st->part.moved_len = v->len;
		if (into && v->len < DL_STORE_PART_MAX)
			memcpy(into, v->str, v->len + 1);
		else if (into)
			dl_error(
				"redis: %s %s: %zu bytes, more than the partition's record can be; ignoring it",
				st->keys.part, f->str, v->len);
	}
	freeReplyObject(r);
	return 0;
}
