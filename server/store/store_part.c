/* SPDX-License-Identifier: MIT */
/*
 * store_part.c -- what the partition layer (server/part/) keeps in the
 * lock table's own keyspace, under the table's fence:
 *
 *   P part  hash; field "gone": "<n> <partition> <floor> <slots>"
 *                 field "map": the partition map's text, a copy
 *
 * the slots this partition's move n gives away, written before the
 * partition map says so (part.c tells why that order), and the newest
 * map the partition's active read, so that a map Redis lost is written
 * back by the partition's next start even when no daemon of the
 * namespace ran through the loss. A write through
 * dlock_apply_v11 (store_batch.c) with the fence, so a deposed active
 * cannot write it, and in the link's pipeline behind every batch sent
 * before it; read by every load, so a daemon that takes over knows what
 * its predecessor gave away even when the map does not say so yet.
 * The value is the partition layer's text: the store neither parses nor
 * checks it. One write at a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/log.h"
#include "server/store/store_private.h"

const char *dl_store_part_gone(const struct dl_store *st)
{
	return st->part.gone;
}

const char *dl_store_part_map(const struct dl_store *st)
{
	return st->part.map ? st->part.map : "";
}

unsigned dl_store_part_gen(const struct dl_store *st)
{
	return st->part.gen;
}

unsigned dl_store_part_loads(const struct dl_store *st)
{
	return st->part.loads;
}

static const char *const fields[] = {"gone", "map"};

int dl_store_part_write(struct dl_store *st, enum dl_part_field field,
			const char *value, void (*done)(int ok, void *arg),
			void *arg)
{
	const char *argv[14];
	size_t lens[14], i, n = strlen(value);
	int r;

	if (st->part.done || st->link != LINK_UP || !st->lead.active)
		return DL_EUNAVAILABLE;
	if ((field == DL_PART_GONE && n >= sizeof(st->part.gone)) ||
	    n >= DL_MAP_COPY_MAX)
		return DL_EBADARG;
	if (!(st->part.sending = strdup(value)))
		return DL_ENOMEM;
	argv[0] = "FCALL";
	argv[1] = DL_STORE_APPLY_FN;
	argv[2] = "5";
	argv[3] = st->keys.fence;
	argv[4] = st->keys.token;
	argv[5] = st->keys.gen;
	argv[6] = st->keys.leader;
	argv[7] = st->keys.part;
	argv[8] = st->fence;
	argv[9] = ""; /* no token mark */
	argv[10] = st->lead.instance;
	argv[11] = "S"; /* the record: set, field, value */
	argv[12] = fields[field];
	argv[13] = st->part.sending;
	for (i = 0; i < 14; i++)
		lens[i] = strlen(argv[i]);
	r = dl__batch_send(st, BATCH_PART, 0, 14, argv, lens);
	if (r) {
		free(st->part.sending);
		st->part.sending = NULL;
		return r;
	}
	st->part.field = field;
	st->part.done = done;
	st->part.arg = arg;
	return 0;
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

		if (f->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING)
			continue;
		if (strcmp(f->str, "gone") == 0 &&
		    v->len < sizeof(st->part.gone))
			memcpy(st->part.gone, v->str, v->len + 1);
		else if (strcmp(f->str, "gone") == 0)
			dl_error(
				"redis: %s gone: %zu bytes, more than a record of slots given away can be; ignoring it",
				st->keys.part, v->len);
		else if (strcmp(f->str, "map") == 0)
			st->part.map = strndup(v->str, v->len);
	}
	freeReplyObject(r);
	return 0;
}
