/* SPDX-License-Identifier: MIT */
/*
 * store_migrate.c -- a Redis still in store layout 1: read it, and move it
 * to layout 2 before the daemon serves (called by store_load.c, after the
 * leadership is taken).
 *
 * Layout 1, under the prefix P: one string per lock, P lock:<name>, its
 * record (record.h, unchanged in layout 2), and P locks, the set of the
 * names with a record. Since the name set exists (09c527b), a record whose
 * name is not in it has never been loaded; so layout 1 is there exactly
 * when P locks exists (empty sets do not exist in Redis), and while it
 * exists it is what holds the leases, whatever the buckets of layout 2
 * hold. It is read as before: SMEMBERS (a SCAN of P lock:* if P locks is
 * not a set), then MGETs of DL_STORE_LOAD_BATCH records, restored by the
 * rules of store_load.c (bad names ignored, unreadable records held, waits
 * that ended while down dropped).
 *
 * Then, still before serving, every write fenced (a daemon that loses the
 * leadership meanwhile is refused, and fails its load):
 *
 *   1. every bucket of layout 2 is replaced by the table's locks in it
 *      (dlock_replace_v11: DEL, then HSET; a bucket without locks is only
 *      deleted), whole buckets, DL_STORE_RESYNC_CHUNK records per call. A
 *      migration that crashed earlier may have left buckets behind: each
 *      one is deleted by this step, none is trusted;
 *   2. one call deletes P locks: from its reply on, layout 2 is what
 *      holds the leases;
 *   3. the records of layout 1, P lock:<name> of every name read, are
 *      deleted, DL_STORE_LOAD_BATCH per call.
 *
 * A crash anywhere loses no lease. Redis applies the calls of one
 * connection in order, each atomically, and what it persists (AOF, a
 * replica's stream) is a prefix of them; so a restart finds one of these:
 *
 *   - P locks exists (a crash before step 2 was applied): layout 1 is
 *     untouched -- nothing is written to it before step 2 -- and the next
 *     load reads it and migrates again, replacing every bucket that step
 *     1 had written (whatever they hold) in its own step 1;
 *   - P locks is gone (step 2 applied): step 1 was applied before it, so
 *     every bucket holds what the table held, which is what layout 1 held
 *     as restored: every lease, with its token, and the waiters;
 *   - step 3 cut short: some P lock:<name> keys stay; nothing reads them
 *     (P locks is gone), they only take memory (delete them by hand:
 *     redis-cli --scan --pattern 'dlock:lock:*' | xargs redis-cli del).
 *
 * What is written is the table, not layout 1's bytes: a lease comes back
 * as the restore made it (lasting its TTL from this load, which the next
 * restart will do again), a wait that ended is gone, and an unreadable
 * record becomes its quarantine (DL_QUARANTINE_OWNER, which no record can
 * name: read back, it is unreadable again, and held again). No daemon of
 * layout 1 can interfere: the take that preceded the load set the fence
 * to "<epoch>/2", which they cannot use (store_lead.c), so none of them
 * can write layout 1 again, nor become active on a Redis that has
 * layout 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/clock.h"
#include "server/log.h"
#include "server/store/store_private.h"

#define RUN(x, rc, ...) DL__LOAD_RUN((x), (rc), 0, __VA_ARGS__)

/* The names of the locks of layout 1. */
struct layout1 {
	struct dl_str *v;
	size_t n, cap;
	redisReply *reply;  /* SMEMBERS: v points into it */
	struct dl_buf text; /* SCAN: the names, NUL-separated */
	struct dl_buf nil;  /* names MGET found no string for, NUL-separated:
			       asked their TYPE once no MGET is in flight */
};

void dl__layout1_free(struct load_ctx *x)
{
	struct layout1 *nm = x->l1;

	if (!nm)
		return;
	x->l1 = NULL;
	free(nm->v);
	free(nm->text.p);
	free(nm->nil.p);
	if (nm->reply)
		freeReplyObject(nm->reply);
	free(nm);
}

static int names_add(struct layout1 *nm, const char *p, size_t len)
{
	struct dl_str *v;
	size_t cap;

	if (nm->n == nm->cap) {
		cap = nm->cap ? nm->cap * 2 : 1024;
		if (!(v = realloc(nm->v, cap * sizeof(*v))))
			return DL_ENOMEM;
		nm->v = v;
		nm->cap = cap;
	}
	nm->v[nm->n++] = (struct dl_str){p, len};
	return 0;
}

int dl__layout1_find(struct load_ctx *x)
{
	redisReply *r;
	int rc = 0, yes;

	if (!(r = RUN(x, &rc, "EXISTS", x->st->keys.names)))
		return rc;
	yes = r->type == REDIS_REPLY_INTEGER && r->integer > 0;
	freeReplyObject(r);
	if (yes && !(x->l1 = calloc(1, sizeof(*x->l1))))
		return DL_ENOMEM;
	return 0;
}

/* MGET gives nil for a missing key and for one that is not a string. A
 * name without a record is dropped (its name goes with the set); a key of
 * another type is an unreadable record. Asked only once every MGET is
 * read: a blocking command takes the first reply on the connection, and
 * with MGETs in flight that is one of theirs (the load then failed and
 * was retried forever, found with 12,000 names). */
static int load_missing(struct load_ctx *x, struct dl_str name)
{
	const char *argv[2] = {"TYPE", NULL};
	size_t lens[2] = {4, 0};
	redisReply *r;
	int rc = 0, none;

	x->st->writes.val.len = 0;
	if (dl_buf_add(&x->st->writes.val, x->st->keys.lock_prefix,
		       x->st->keys.lock_prefix_len) ||
	    dl_buf_add(&x->st->writes.val, name.p, name.len))
		return DL_ENOMEM;
	argv[1] = x->st->writes.val.p;
	lens[1] = x->st->writes.val.len;
	if (!(r = dl__load_run(x, &rc, 0, 2, argv, lens)))
		return rc;
	none = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "none") == 0;
	freeReplyObject(r);
	if (none)
		return 0;
	x->now_mono = dl_mono_ms();
	x->now_wall = dl_wall_ms();
	return dl__load_unreadable(x, name, "", 0, "not a string");
}

/* The names set aside by load_key1(). */
static int load_nils(struct load_ctx *x)
{
	const struct dl_buf *b = &x->l1->nil;
	struct dl_str name;
	size_t i;
	int rc = 0;

	for (i = 0; i < b->len && !rc; i += name.len + 1) {
		name.p = b->p + i;
		name.len = strlen(name.p);
		rc = load_missing(x, name);
	}
	return rc;
}

static int load_key1(struct load_ctx *x, struct dl_str name,
		     const redisReply *val)
{
	if (dl_check_name(name.p, name.len)) {
		dl_warn("redis: %s holds \"%.*s\", not a lock name; ignored",
			x->st->keys.names, (int)(name.len > 64 ? 64 : name.len),
			name.p);
		x->ignored++;
		return 0;
	}
	if (val->type != REDIS_REPLY_STRING)
		return dl__load_add_name(&x->l1->nil, name);
	return dl__load_record(x, name, val);
}

/* MGET the records of names[from, from + n) (queued, not read). */
static int send_mget(struct load_ctx *x, const struct layout1 *nm, size_t from,
		     size_t n, struct dl_buf *keys, const char **argv,
		     size_t *lens)
{
	struct dl_store *st = x->st;
	size_t i, off;

	keys->len = 0;
	for (i = 0; i < n; i++) {
		if (dl_buf_add(keys, st->keys.lock_prefix,
			       st->keys.lock_prefix_len) ||
		    dl_buf_add(keys, nm->v[from + i].p, nm->v[from + i].len))
			return DL_ENOMEM;
	}
	argv[0] = "MGET";
	lens[0] = 4;
	for (i = 0, off = 0; i < n; i++) {
		lens[i + 1] = st->keys.lock_prefix_len + nm->v[from + i].len;
		argv[i + 1] = keys->p + off;
		off += lens[i + 1];
	}
	return redisAppendCommandArgv(x->c, (int)n + 1, argv, lens) == REDIS_OK
		       ? 0
		       : DL_ENOMEM;
}

/* Read one MGET reply and restore its k records. */
static int read_mget(struct load_ctx *x, const struct layout1 *nm, size_t from,
		     size_t k)
{
	redisReply *v = NULL; /* hiredis leaves it untouched on failure */
	size_t i;
	int rc = 0;

	if (redisGetReply(x->c, (void **)&v) != REDIS_OK || !v ||
	    v->type != REDIS_REPLY_ARRAY || v->elements != k) {
		rc = dl__load_err(x, DL_EUNAVAILABLE, "MGET: %s",
				  v && v->type == REDIS_REPLY_ERROR
					  ? v->str
					  : x->c->errstr);
		if (v)
			freeReplyObject(v);
		return rc;
	}
	x->now_mono = dl_mono_ms(); /* R, for the records just read */
	x->now_wall = dl_wall_ms();
	for (i = 0; i < k && !rc; i++) {
		dl__load_prefetch(
			x,
			i + DL__LOAD_PREFETCH < k
				? nm->v[from + i + DL__LOAD_PREFETCH]
				: DL_STR_NULL,
			i + DL__LOAD_PREFETCH / 2 < k
				? nm->v[from + i + DL__LOAD_PREFETCH / 2]
				: DL_STR_NULL);
		rc = load_key1(x, nm->v[from + i], v->element[i]);
	}
	freeReplyObject(v);
	return rc;
}

static int load_records(struct load_ctx *x, const struct layout1 *nm)
{
	const size_t B = DL_STORE_LOAD_BATCH, n = nm->n;
	const char **argv = malloc((B + 1) * sizeof(*argv));
	size_t *lens = malloc((B + 1) * sizeof(*lens));
	struct dl_buf keys = {0};
	size_t batches = (n + B - 1) / B, sent = 0, got = 0, from;
	int rc = argv && lens ? 0 : DL_ENOMEM;

	dl_locktab_reserve(x->st->tab, n);
	while (!rc && got < batches) {
		/* Nothing in flight: the leadership's turn, if due. */
		if (sent == got)
			rc = dl__load_keep_lead(x);
		/* Keep DL_STORE_LOAD_WINDOW MGETs ahead of the parsing, but
		 * let the window empty when the leadership is due. */
		while (!rc && sent < batches &&
		       sent - got < DL_STORE_LOAD_WINDOW &&
		       (sent == got || !dl__load_lead_due(x))) {
			from = sent * B;
			rc = send_mget(x, nm, from, n - from < B ? n - from : B,
				       &keys, argv, lens);
			sent++;
		}
		from = got * B;
		if (!rc)
			rc = read_mget(x, nm, from,
				       n - from < B ? n - from : B);
		got++;
	}
	/* Replies still in flight are dropped with the context. */
	free(keys.p);
	free(argv);
	free(lens);
	return rc;
}

/* One SCAN page: add the names of the record keys it found. */
static int scan_page(struct load_ctx *x, struct layout1 *nm, char *cursor,
		     const char *match)
{
	size_t plen = x->st->keys.lock_prefix_len, i;
	redisReply *r, *keys;
	int rc = 0;

	if (!(r = RUN(x, &rc, "SCAN", cursor, "MATCH", match, "COUNT", "1000")))
		return rc;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		return dl__load_err(x, DL_EUNAVAILABLE,
				    "SCAN: unexpected reply");
	}
	snprintf(cursor, 24, "%s", r->element[0]->str);
	keys = r->element[1];
	for (i = 0; i < keys->elements && !rc; i++) {
		if (keys->element[i]->type != REDIS_REPLY_STRING ||
		    keys->element[i]->len <= plen)
			continue;
		rc = dl__load_add_name(
			&nm->text,
			(struct dl_str){keys->element[i]->str + plen,
					keys->element[i]->len - plen});
	}
	freeReplyObject(r);
	return rc;
}

/* The record keys, by SCAN, when the name set is damaged. */
static int scan_names(struct load_ctx *x, struct layout1 *nm)
{
	char cursor[24] = "0", *match;
	size_t i;
	int rc = 0;

	if (!(match = malloc(x->st->keys.lock_prefix_len + 2)))
		return DL_ENOMEM;
	memcpy(match, x->st->keys.lock_prefix, x->st->keys.lock_prefix_len);
	memcpy(match + x->st->keys.lock_prefix_len, "*", 2);
	do
		rc = scan_page(x, nm, cursor, match);
	while (!rc && strcmp(cursor, "0") != 0);
	free(match);
	for (i = 0; i < nm->text.len && !rc; i += strlen(nm->text.p + i) + 1)
		rc = names_add(nm, nm->text.p + i, strlen(nm->text.p + i));
	return rc;
}

/* The names of every stored lock: SMEMBERS of the name set, or, if that
 * key is not a set (damaged by hand), a SCAN of the record keys. */
static int read_names(struct load_ctx *x, struct layout1 *nm)
{
	redisReply *r;
	size_t i;
	int rc = 0;

	if (!(r = RUN(x, &rc, "SMEMBERS", x->st->keys.names))) {
		if (!strstr(x->err, "WRONGTYPE"))
			return rc;
		dl_error(
			"redis: %s is not a set; finding the records with SCAN",
			x->st->keys.names);
		return scan_names(x, nm);
	}
	nm->reply = r;
	for (i = 0; i < r->elements && !rc; i++)
		if (r->element[i]->type == REDIS_REPLY_STRING)
			rc = names_add(nm, r->element[i]->str,
				       r->element[i]->len);
	return rc;
}

/* Records written by the first dlockd 0.1 (before fenced writes) carry a
 * Redis expiry (deadline + 60 s): one could vanish between this read and
 * the end of the migration, and a crash there would lose its lease (the
 * next load reads layout 1 again). So the migration first removes every
 * expiry; it costs a PERSIST per lock, once. */
static int persist_all(struct load_ctx *x, const struct layout1 *nm)
{
	struct dl_store *st = x->st;
	const char *argv[2] = {"PERSIST", NULL};
	size_t lens[2] = {7, 0}, i, n;
	redisReply *r;
	int rc = 0;

	for (i = 0; i < nm->n; i += n) {
		for (n = 0; n < DL_STORE_LOAD_BATCH && i + n < nm->n; n++) {
			st->writes.val.len = 0;
			if (dl_buf_add(&st->writes.val, st->keys.lock_prefix,
				       st->keys.lock_prefix_len) ||
			    dl_buf_add(&st->writes.val, nm->v[i + n].p,
				       nm->v[i + n].len))
				return DL_ENOMEM;
			argv[1] = st->writes.val.p;
			lens[1] = st->writes.val.len;
			if (redisAppendCommandArgv(x->c, 2, argv, lens) !=
			    REDIS_OK)
				return DL_ENOMEM;
		}
		while (n-- > 0 && !rc) {
			r = NULL;
			if (redisGetReply(x->c, (void **)&r) != REDIS_OK || !r)
				rc = dl__load_err(x, DL_EUNAVAILABLE,
						  "PERSIST: %s", x->c->errstr);
			if (r)
				freeReplyObject(r);
		}
		if (rc || (rc = dl__load_keep_lead(x)) != 0)
			return rc;
	}
	return 0;
}

int dl__layout1_load(struct load_ctx *x)
{
	int rc;

	dl_notice(
		"redis: %s exists: this Redis holds store layout 1; loading it, then migrating it to layout 2 before serving",
		x->st->keys.names);
	if ((rc = read_names(x, x->l1)) || (rc = persist_all(x, x->l1)) ||
	    (rc = load_records(x, x->l1)))
		return rc;
	return load_nils(x);
}

/* ---- the migration ------------------------------------------------------ */

/* The replace call built in st->writes.wb, fenced; then the leadership, if
 * due. */
static int replace(struct load_ctx *x, size_t *calls)
{
	const char **argv;
	const size_t *lens;
	redisReply *r;
	int argc, rc;

	rc = dl__wb_replace_argv(x->st, x->fence, &argc, &argv, &lens);
	dl__wb_reset(&x->st->writes.wb);
	if (rc)
		return rc;
	if (!(r = dl__load_run(x, &rc, 0, argc, argv, lens)))
		return rc;
	freeReplyObject(r);
	(*calls)++;
	return dl__load_keep_lead(x);
}

/* Step 1 (top comment): every bucket, from the table. */
static int write_buckets(struct load_ctx *x, size_t *locks, size_t *calls)
{
	struct dl_store *st = x->st;
	int64_t off = dl__store_wall_offset();
	struct bucket_index *bi = malloc(sizeof(*bi)); /* 24 KiB */
	uint32_t b = 0;
	int rc;

	if (!bi)
		return DL_ENOMEM;
	if ((rc = dl__bucket_index(st, bi)) == 0)
		*locks = bi->n;
	while (!rc && b < DL_STORE_BUCKETS) {
		dl__wb_reset(&st->writes.wb);
		rc = dl__wb_buckets(st, bi, &b, off);
		if (!rc)
			rc = replace(x, calls);
	}
	dl__wb_reset(&st->writes.wb);
	dl__bucket_index_free(bi);
	free(bi);
	return rc;
}

/* Step 3: the records of layout 1. */
static int delete_records(struct load_ctx *x, size_t *calls)
{
	struct dl_store *st = x->st;
	const struct layout1 *nm = x->l1;
	size_t i, n;
	int rc = 0;

	for (i = 0; !rc && i < nm->n; i += n) {
		dl__wb_reset(&st->writes.wb);
		for (n = 0; !rc && n < DL_STORE_LOAD_BATCH && i + n < nm->n;
		     n++) {
			st->writes.val.len = 0;
			if (dl_buf_add(&st->writes.val, st->keys.lock_prefix,
				       st->keys.lock_prefix_len) ||
			    dl_buf_add(&st->writes.val, nm->v[i + n].p,
				       nm->v[i + n].len))
				rc = DL_ENOMEM;
			else
				rc = dl__wb_key(st, st->writes.val.p,
						st->writes.val.len);
		}
		if (!rc)
			rc = replace(x, calls);
	}
	dl__wb_reset(&st->writes.wb);
	return rc;
}

int dl__layout1_migrate(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	size_t locks = 0, calls = 0;
	uint64_t t0 = dl_mono_ms();
	int rc;

	if ((rc = write_buckets(x, &locks, &calls)) != 0)
		return rc;
	dl__wb_reset(&st->writes.wb);
	if ((rc = dl__wb_key(st, st->keys.names, strlen(st->keys.names))) ||
	    (rc = replace(x, &calls)))
		return rc;
	dl_notice(
		"redis: migrated to store layout 2: %zu locks (of %zu names in layout 1) written to %srec:0..%u in %zu calls; %s deleted, layout 1 is no longer read",
		locks, x->l1->n, dl_config_store_prefix(st->cfg),
		(unsigned)DL_STORE_BUCKETS - 1, calls, st->keys.names);
	calls = 0;
	if ((rc = delete_records(x, &calls)) != 0)
		return rc;
	dl_notice(
		"redis: migration done in %llu ms: %zu records of layout 1 (%s<name>) deleted in %zu calls",
		(unsigned long long)(dl_mono_ms() - t0), x->l1->n,
		st->keys.lock_prefix, calls);
	return 0;
}
