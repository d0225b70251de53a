/* SPDX-License-Identifier: MIT */
/*
 * store_load.h -- one attempt of dl_store_load() (store_load.c,
 * store_migrate.c, and the loader's half of store_cluster.c): a blocking
 * connection that takes the leadership, reads the table and restores it.
 * Private to the store's files (store_private.h).
 */
#ifndef DL_SERVER_STORE_LOAD_H
#define DL_SERVER_STORE_LOAD_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "server/buf.h"
#include "server/locktab/locktab.h"

struct dl_store;

struct layout1; /* store_migrate.c: the names of a Redis of layout 1 */

struct load_ctx {
	struct dl_store *st;
	redisContext *c;
	struct dl_str name; /* the lock being restored */
	uint32_t bucket;    /* layout 2: its bucket (for the log) */
	uint64_t now_mono, now_wall;
	int changed;	    /* the current lock lost items: write it back */
	int holders;	    /* check pass: H lines seen ... */
	int holders_shared; /* ... and their mode */
	const char *why;    /* check pass: why the record is unreadable */
	size_t leases, waiters, dropped, unreadable, ignored;
	uint64_t max_token;
	struct dl_buf changed_names; /* NUL-separated */
	struct dl_buf bad_names;     /* NUL-separated: to quarantine */
	char *err;
	size_t errlen;
	const char *fence;  /* the one taken */
	int64_t closed_ms;  /* the take found grants closed (Redis went
			       back): its records are not loaded */
	uint64_t lead_sent; /* when the leadership was last confirmed */
	int behind;	    /* the take found Redis went back */
	uint64_t run;	    /* Redis's process (dl__run_id_of; 0: not known) */
	uint64_t meddled; /* ... its data replaced in place (dl__meddled_of) */
	struct layout1 *l1; /* Redis is in layout 1: its names, to migrate */
	/* an import (store_part.c): a waiter whose owner is bound to
	 * another key here is left out, not the whole record unreadable */
	int skip_bound_waiters;
};

/* ---- store_call.c: one call on x->c ---- */

/* Say why the attempt fails (into x->err); returns rc. */
int dl__load_err(struct load_ctx *x, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A blocking command; NULL with x->err and *rc set when there is no
 * usable reply (`fatal_errors`: an error reply other than "not ready" is
 * a configuration problem, DL_EBADARG; else DL_EUNAVAILABLE). */
redisReply *dl__load_run(struct load_ctx *x, int *rc, int fatal_errors,
			 int argc, const char **argv, const size_t *lens);
/* dl__load_run() with NUL-terminated string arguments, through
 * DL__LOAD_RUN(x, &rc, fatal_errors, "GET", key). */
#define DL__LOAD_ARGS_MAX 8
redisReply *dl__load_runv(struct load_ctx *x, int *rc, int fatal_errors,
			  const char **argv);
#define DL__LOAD_RUN(x, rc, fatal, ...)                                        \
	dl__load_runv((x), (rc), (fatal), (const char *[]){__VA_ARGS__, NULL})
/* Renew the leadership if a third of its lease has passed since it was
 * last confirmed (nothing may be in flight on x->c). */
int dl__load_keep_lead(struct load_ctx *x);
/* 1 when dl__load_keep_lead() would renew. */
int dl__load_lead_due(const struct load_ctx *x);
/* A loader restores names it knows ahead: the lock table's bucket of the
 * name DL__LOAD_PREFETCH records ahead is prefetched, and the first node
 * of the one half as far (dl_locktab_prefetch). Either name may be
 * DL_STR_NULL (past the end, or not a name). */
#define DL__LOAD_PREFETCH 16
void dl__load_prefetch(const struct load_ctx *x, struct dl_str far,
		       struct dl_str near);
/* Restore the record `val` of lock `name` (checks, quarantine, waits
 * ended: see store_load.c). */
int dl__load_record(struct load_ctx *x, struct dl_str name,
		    const redisReply *val);
/* Hold the locks whose record could not be read (x->bad_names), once the
 * token counter has been raised. */
int dl__load_quarantine(struct load_ctx *x);
/* A record that cannot be read: logged, its lock held after the load. */
int dl__load_unreadable(struct load_ctx *x, struct dl_str name,
			const char *text, size_t len, const char *why);
/* Append name and a NUL. */
int dl__load_add_name(struct dl_buf *b, struct dl_str name);

/* store_migrate.c. Is Redis in layout 1 (its marker, P locks, exists)?
 * Then x->l1 is set, and freed by dl__layout1_free(). */
int dl__layout1_find(struct load_ctx *x);
/* Restore every lock of layout 1 into the table (names, then MGETs). */
int dl__layout1_load(struct load_ctx *x);
/* Write the table into layout 2 and retire layout 1 (before serving). */
int dl__layout1_migrate(struct load_ctx *x);
void dl__layout1_free(struct load_ctx *x);

#endif /* DL_SERVER_STORE_LOAD_H */
