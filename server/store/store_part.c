/* SPDX-License-Identifier: MIT */
/*
 * store_part.c -- what the partition layer (server/part/) keeps in the
 * lock table's own keyspace, under the table's fence:
 *
 *   P part  hash; field "gone": "<n> <partition> <floor> <slots>"
 *
 * the slots this partition's move n gives away, written before the
 * partition map says so (part.c tells why that order). A write through
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

unsigned dl_store_part_gen(const struct dl_store *st)
{
	return st->part.gen;
}

unsigned dl_store_part_loads(const struct dl_store *st)
{
	return st->part.loads;
}

int dl_store_part_write(struct dl_store *st, const char *gone,
			void (*done)(int ok, void *arg), void *arg)
{
	const char *argv[] = {"FCALL",
			      DL_STORE_APPLY_FN,
			      "5",
			      st->keys.fence,
			      st->keys.token,
			      st->keys.gen,
			      st->keys.leader,
			      st->keys.part,
			      st->fence,
			      "", /* no token mark */
			      st->lead.instance,
			      "S", /* the record: set, field, value */
			      "gone",
			      st->part.sending};
	size_t lens[sizeof(argv) / sizeof(argv[0])], i;
	int r;

	if (st->part.done || st->link != LINK_UP || !st->lead.active)
		return DL_EUNAVAILABLE;
	if (strlen(gone) >= sizeof(st->part.sending))
		return DL_EBADARG;
	snprintf(st->part.sending, sizeof(st->part.sending), "%s", gone);
	for (i = 0; i < sizeof(argv) / sizeof(argv[0]); i++)
		lens[i] = strlen(argv[i]);
	r = dl__batch_send(st, BATCH_PART, 0, (int)i, argv, lens);
	if (r)
		return r;
	st->part.done = done;
	st->part.arg = arg;
	return 0;
}

void dl__part_reply(struct dl_store *st, int ok)
{
	void (*done)(int ok, void *arg) = st->part.done;

	if (!done)
		return;
	st->part.done = NULL;
	if (ok) {
		snprintf(st->part.gone, sizeof(st->part.gone), "%s",
			 st->part.sending);
		st->part.gen++;
	}
	done(ok, st->part.arg);
}

int dl__part_load(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	redisReply *r;
	int rc = 0;

	st->part.gone[0] = '\0';
	st->part.gen++;
	st->part.loads++;
	if (!(r = DL__LOAD_RUN(x, &rc, 0, "HGET", st->keys.part, "gone")))
		return rc;
	if (r->type == REDIS_REPLY_STRING && r->len < sizeof(st->part.gone))
		memcpy(st->part.gone, r->str, r->len + 1);
	else if (r->type == REDIS_REPLY_STRING)
		dl_error(
			"redis: %s gone: %zu bytes, more than a record of slots given away can be; ignoring it",
			st->keys.part, r->len);
	freeReplyObject(r);
	return 0;
}
