/* SPDX-License-Identifier: MIT */
/*
 * dlock_watch.c -- libdlock's watches (dlock.h, "watching").
 *
 * Owns the client's list of watched patterns (c->w.watches: what the server
 * answered OK WATCHING to, in that order) and the queue of events not yet
 * taken (c->w.wq). Both are under c->mu like the rest of the client.
 *
 * A pattern is on the list from its OK WATCHING until dlock_unwatch() (or
 * a refusal after a reconnect): that is what the server watches for this
 * client while connected, so on every new connection the thread asks for
 * each again (dlock__watch_resume, after HELLO), and each answer is queued
 * as a RESUMED event -- the only place where events may have gone unseen
 * without an OVERFLOW, which is why it is an event at all.
 *
 * Events are kept only while a listed pattern matches their lock: one of
 * a pattern just unwatched is dropped. The queue holds at most
 * DLOCK_WATCH_QUEUE_MAX; past that events are counted (c->w.missed) and
 * an OVERFLOW event stands where they were missing, as the server does
 * for a connection that does not read.
 *
 * A router's watches are its legs' (dlock_route.c): a name's at its
 * partition, a prefix's at every partition (dlock_span.c). Each leg
 * keeps its own list and watches again after its own reconnects; its
 * events go to the router's queue, where dlock_watch_next() takes them.
 */
#include "client/lib/dlock_private.h"
#include "proto/desc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A watched pattern. */
struct dlock__watch {
	struct dlock__watch *next;
	size_t len; /* of the name or prefix (the '*' not counted) */
	int prefix;
	char pat[DL_NAME_MAX + 1]; /* as given (a prefix with its star) */
};

/* A queued event. */
struct dlock__wev {
	struct dlock__wev *next;
	struct dlock_watch_event ev;
};

static const char *const kind_words[] = {
	[DLOCK_WATCH_GRANTED] = "granted",
	[DLOCK_WATCH_RELEASED] = "released",
	[DLOCK_WATCH_EXPIRED] = "expired",
	[DLOCK_WATCH_BROKEN] = "broken",
	[DLOCK_WATCH_WITHDRAWN] = "withdrawn",
	[DLOCK_WATCH_VALUE] = "value",
};

static void copy_str(char *dst, size_t cap, struct dl_str s)
{
	size_t n = s.len < cap - 1 ? s.len : cap - 1;

	if (n)
		memcpy(dst, s.p, n);
	dst[n] = '\0';
}

static struct dlock__watch *watch_find(struct dlock_client *c, const char *pat,
				       struct dlock__watch ***link)
{
	struct dlock__watch **pp, *w;

	for (pp = &c->w.watches; (w = *pp) != NULL; pp = &w->next)
		if (strcmp(w->pat, pat) == 0) {
			if (link)
				*link = pp;
			return w;
		}
	return NULL;
}

/* A listed pattern matches `name`. */
static int watched(const struct dlock_client *c, struct dl_str name)
{
	const struct dlock__watch *w;

	for (w = c->w.watches; w; w = w->next) {
		if (w->prefix ? name.len >= w->len &&
					!memcmp(name.p, w->pat, w->len)
			      : name.len == w->len &&
					!memcmp(name.p, w->pat, w->len))
			return 1;
	}
	return 0;
}

/* Append ev, or count it missed; an OVERFLOW goes first if some were.
 * A leg's events go to its router's queue, where dlock_watch_next()
 * takes them (c->mu, then the router's: never the other way round). */
static void push(struct dlock_client *c, const struct dlock_watch_event *ev)
{
	struct dlock__wev *e;
	int notice = c->w.missed > 0;

	if (c->parent) {
		pthread_mutex_lock(&c->parent->mu);
		push(c->parent, ev);
		pthread_mutex_unlock(&c->parent->mu);
		return;
	}

	if (c->w.wq_n + (size_t)notice >= DLOCK_WATCH_QUEUE_MAX) {
		c->w.missed +=
			ev->kind == DLOCK_WATCH_OVERFLOW ? ev->missed : 1;
		return;
	}
	if (notice) {
		struct dlock_watch_event o;

		memset(&o, 0, sizeof(o));
		o.kind = DLOCK_WATCH_OVERFLOW;
		o.missed = c->w.missed;
		c->w.missed = 0;
		push(c, &o);
	}
	if (!(e = malloc(sizeof(*e)))) {
		c->w.missed +=
			ev->kind == DLOCK_WATCH_OVERFLOW ? ev->missed : 1;
		return;
	}
	e->ev = *ev;
	e->next = NULL;
	if (c->w.wq_tail)
		c->w.wq_tail->next = e;
	else
		c->w.wq = e;
	c->w.wq_tail = e;
	c->w.wq_n++;
	pthread_cond_broadcast(&c->w.cv);
}

/* "* WATCH <name> <what> <owner> <token> holders=<n> [user=<u>]
 * [broken_by=<u>]", or "* WATCH-OVERFLOW <n>". */
int dlock__watch_event(struct dlock_client *c, const struct dl_reply *r)
{
	struct dlock_watch_event ev;
	struct dl_str v;
	uint64_t n;
	size_t k;

	memset(&ev, 0, sizeof(ev));
	if (r->word.len == 14 && !memcmp(r->word.p, "WATCH-OVERFLOW", 14)) {
		if (dl_reply_u64(r, 0, &ev.missed) < 0)
			return 1;
		ev.kind = DLOCK_WATCH_OVERFLOW;
		push(c, &ev);
		return 1;
	}
	if (r->word.len != 5 || memcmp(r->word.p, "WATCH", 5))
		return 0;
	if (r->argc < 4 || r->argv[0].len > DL_NAME_MAX ||
	    !watched(c, r->argv[0]) || dl_reply_u64(r, 3, &ev.token) < 0 ||
	    dl_reply_kv(r, "holders", &v) < 0 ||
	    dl_parse_u64(v.p, v.len, &n) < 0)
		return 1; /* not ours any more, or newer than us */
	for (k = 1; k < sizeof(kind_words) / sizeof(kind_words[0]); k++)
		if (kind_words[k] && strlen(kind_words[k]) == r->argv[1].len &&
		    !memcmp(kind_words[k], r->argv[1].p, r->argv[1].len))
			ev.kind = (enum dlock_watch_kind)k;
	if (!ev.kind)
		return 1;
	ev.holders = (int64_t)n;
	copy_str(ev.name, sizeof(ev.name), r->argv[0]);
	copy_str(ev.owner, sizeof(ev.owner), r->argv[2]);
	if (dl_reply_kv(r, "user", &v) == 0)
		copy_str(ev.user, sizeof(ev.user), v);
	if (dl_reply_kv(r, "broken_by", &v) == 0)
		copy_str(ev.broken_by, sizeof(ev.broken_by), v);
	if (dl_reply_kv(r, "value", &v) == 0 && v.len <= DL_VALUE_MAX)
		dl_desc_decode(v.p, v.len, ev.value, sizeof(ev.value));
	push(c, &ev);
	return 1;
}

/* "OK WATCHING <pattern> [holders=<n>]": n, or -1. */
static int64_t reply_holders(const struct dl_reply *r)
{
	struct dl_str v;
	uint64_t n;

	if (dl_reply_kv(r, "holders", &v) < 0 ||
	    dl_parse_u64(v.p, v.len, &n) < 0)
		return -1;
	return (int64_t)n;
}

static int list_add(struct dlock_client *c, const char *pat)
{
	struct dlock__watch *w, **pp;
	size_t len = strlen(pat);

	if (watch_find(c, pat, NULL))
		return 0;
	if (!(w = calloc(1, sizeof(*w))))
		return DLOCK_ENOMEM;
	memcpy(w->pat, pat, len + 1);
	w->prefix = len > 0 && pat[len - 1] == '*';
	w->len = len - (size_t)w->prefix;
	for (pp = &c->w.watches; *pp; pp = &(*pp)->next)
		; /* at the end: watched again in the same order */
	*pp = w;
	return 0;
}

static void list_remove(struct dlock_client *c, const char *pat)
{
	struct dlock__watch **pp, *w = watch_find(c, pat, &pp);

	if (w) {
		*pp = w->next;
		free(w);
	}
}

int dlock__watch_reply(struct dlock_client *c, struct dlock__req *q,
		       const struct dl_reply *r)
{
	struct dlock_watch_event ev;
	int err = 0;

	if (q->op == DLOCK__UNWATCH) {
		/* NO NOT_WATCHING: it was not watched -- unless this is
		 * the UNWATCH sent again after a reconnect, on a connection
		 * that never watched it */
		if (r->kind == DL_REPLY_OK && r->word.len == 9 &&
		    !memcmp(r->word.p, "UNWATCHED", 9))
			err = 0;
		else if ((err = dlock__reply_error(q, r)) == DLOCK_ESERVER &&
			 r->kind == DL_REPLY_NO)
			err = q->resent ? 0 : DLOCK_EINVAL;
		dlock__req_finish(c, q, err);
		return 1;
	}
	if (r->kind == DL_REPLY_OK && r->word.len == 8 &&
	    !memcmp(r->word.p, "WATCHING", 8)) {
		q->r_value = (uint64_t)reply_holders(r);
		err = q->internal ? 0 : list_add(c, q->name);
	} else {
		err = dlock__reply_error(q, r);
	}
	if (q->internal) {
		/* watching again after a reconnect: say how it went */
		memset(&ev, 0, sizeof(ev));
		snprintf(ev.name, sizeof(ev.name), "%s", q->name);
		if (err == 0) {
			ev.kind = DLOCK_WATCH_RESUMED;
			ev.holders = (int64_t)q->r_value;
		} else {
			ev.kind = DLOCK_WATCH_REFUSED;
			ev.error = err;
			list_remove(c, q->name);
		}
		push(c, &ev);
	}
	dlock__req_finish(c, q, err);
	return 1;
}

void dlock__watch_resume(struct dlock_client *c)
{
	struct dlock__watch *w;
	struct dlock__req *q;

	for (w = c->w.watches; w; w = w->next) {
		if (!(q = dlock__req_new(DLOCK__WATCH, w->pat, 1)))
			continue;
		if (dlock__req_write(c, q) < 0)
			dlock__req_free(q);
	}
}

void dlock__watch_free(struct dlock_client *c)
{
	struct dlock__watch *w;
	struct dlock__wev *e;

	while ((w = c->w.watches) != NULL) {
		c->w.watches = w->next;
		free(w);
	}
	while ((e = c->w.wq) != NULL) {
		c->w.wq = e->next;
		free(e);
	}
	c->w.wq_tail = NULL;
	c->w.wq_n = 0;
}

/* ---- the public calls ---------------------------------------------------- */

/* A pattern: a name, or a prefix and '*' ("*" alone too). */
static int bad_pattern(const char *pat)
{
	return !pat || dl_check_name(pat, strlen(pat)) < 0;
}

int dlock__watch_at(struct dlock_client *c, enum dlock__op op, const char *pat,
		    int64_t *holders)
{
	struct dlock__req *q;
	int err;

	dlock__last_error_clear();
	if (!c || bad_pattern(pat))
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	if (op == DLOCK__UNWATCH)
		list_remove(c, pat);
	if (!(q = dlock__req_new(op, pat, 0))) {
		dlock__leave(c);
		return DLOCK_ENOMEM;
	}
	q->deadline = dlock__now() + c->opt.request_timeout_ms;
	err = dlock__call(c, &q);
	if (q && err == 0 && holders)
		*holders = (int64_t)q->r_value;
	dlock__req_free(q);
	dlock__leave(c);
	return err;
}

int dlock__watching(struct dlock_client *c, const char *pat)
{
	int yes;

	pthread_mutex_lock(&c->mu);
	yes = watch_find(c, pat, NULL) != NULL;
	pthread_mutex_unlock(&c->mu);
	return yes;
}

/* A lock's name is routed to its partition, a prefix watched on every
 * partition (dlock_span.c): the events come to this client's queue. */
static int call(struct dlock_client *c, enum dlock__op op, const char *pat,
		int64_t *holders)
{
	struct dlock__hop hop = {0};
	size_t n = pat ? strlen(pat) : 0;
	int err;

	if (n && pat[n - 1] == '*' && c && atomic_load(&c->rt)) {
		dlock__last_error_clear();
		if (bad_pattern(pat))
			return DLOCK_EINVAL;
		return dlock__span_watch(c, op, pat, holders);
	}
	while (dlock__route(c, n && pat[n - 1] != '*' ? pat : NULL, &hop, &err))
		err = dlock__watch_at(hop.leg, op, pat, holders);
	return err;
}

int dlock_watch(dlock_client *c, const char *pattern, int64_t *holders)
{
	return call(c, DLOCK__WATCH, pattern, holders);
}

int dlock_unwatch(dlock_client *c, const char *pattern)
{
	return call(c, DLOCK__UNWATCH, pattern, NULL);
}

int dlock_watch_next(dlock_client *c, struct dlock_watch_event *ev,
		     int64_t wait_ms)
{
	int64_t deadline;
	struct dlock__wev *e;
	int err;

	dlock__last_error_clear();
	if (!c || !ev || wait_ms < DLOCK_WAIT_FOREVER)
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	deadline = wait_ms < 0 ? DLOCK__NEVER : dlock__now() + wait_ms;
	while (!c->w.wq && !c->w.missed && !c->closing) {
		if (dlock__cond_wait(&c->w.cv, &c->mu, deadline) == ETIMEDOUT &&
		    dlock__now() >= deadline)
			break;
	}
	if (c->closing) {
		err = DLOCK_ECANCELED;
	} else if ((e = c->w.wq) != NULL) {
		c->w.wq = e->next;
		if (!c->w.wq)
			c->w.wq_tail = NULL;
		c->w.wq_n--;
		*ev = e->ev;
		free(e);
	} else if (c->w.missed) {
		memset(ev, 0, sizeof(*ev));
		ev->kind = DLOCK_WATCH_OVERFLOW;
		ev->missed = c->w.missed;
		c->w.missed = 0;
	} else {
		err = DLOCK_ETIMEDOUT;
	}
	dlock__leave(c);
	return err;
}
