/*
 * store.c -- persistence (see store.h). This file holds the epoch clock and
 * the memory-only backend; the Redis backend is added with persistence.
 */
#include "server/store.h"

#include <stdlib.h>
#include <string.h>

struct dl_store {
	uv_loop_t *loop;
	const struct dl_config *cfg;
	struct dl_locktab *tab;
	struct dl_store_hooks hooks;
	uint64_t epoch;     /* open epoch */
	uint64_t committed; /* last durable epoch */
	struct dl_store_stats st;
};

struct dl_store *dl_store_new(uv_loop_t *loop, const struct dl_config *cfg,
			      struct dl_locktab *tab,
			      const struct dl_store_hooks *hooks)
{
	struct dl_store *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->loop = loop;
	st->cfg = cfg;
	st->tab = tab;
	st->hooks = *hooks;
	st->epoch = 1;
	return st;
}

void dl_store_free(struct dl_store *st)
{
	free(st);
}

int dl_store_load(struct dl_store *st, uint64_t unix_ms, char *err,
		  size_t errlen)
{
	(void)err;
	(void)errlen;
	dl_locktab_raise_token(st->tab, dl_token_floor(0, unix_ms));
	return 0;
}

int dl_store_start(struct dl_store *st)
{
	(void)st;
	return 0;
}

uint64_t dl_store_epoch(const struct dl_store *st)
{
	return st->epoch;
}

void dl_store_flush(struct dl_store *st)
{
	uint64_t e = st->epoch;

	/* Memory only: what is drained is as durable as it will ever be. */
	dl_locktab_drain_dirty(st->tab, NULL, NULL);
	st->epoch++;
	st->committed = e;
	st->hooks.committed(e, st->hooks.ctx);
}

int dl_store_available(const struct dl_store *st)
{
	(void)st;
	return 1;
}

int dl_store_idle(const struct dl_store *st)
{
	return st->committed + 1 == st->epoch;
}

void dl_store_stop(struct dl_store *st, void (*done)(void *arg), void *arg)
{
	(void)st;
	done(arg);
}

const struct dl_store_stats *dl_store_stats(const struct dl_store *st)
{
	return &st->st;
}

const char *dl_store_backend(const struct dl_store *st)
{
	(void)st;
	return "none";
}
