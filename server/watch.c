/* SPDX-License-Identifier: MIT */
/*
 * watch.c -- WATCH and UNWATCH (see watch.h).
 *
 * The registry (watchreg.c) finds the watchers of a name; this module
 * says what they are told and when. A connection's watch state is
 * made by its first WATCH and lives until the connection ends, so a
 * connection that never watches costs one NULL pointer.
 */
#include "server/watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/access.h"
#include "server/cmd.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/server.h"
#include "server/watchreg.h"

struct dl_watches {
	struct dl_watchreg *reg;
	uint64_t sent, dropped, capped; /* events, for STATS */
};

/* A connection's watches (dl_conn.watch). */
struct dl_conn_watch {
	struct dl_watcher w;
	struct dl_conn *c;
	uint64_t dropped;   /* events missed since the last notice */
	uint64_t looked_ms; /* uv_now: when dropping, last looked at */
};

/* ms between two looks at a dropping watcher's unread output (watch.h). */
#define WATCH_LOOK_MS 10

/* A change being handed to its watchers: its line, made for the first
 * of them. */
struct watch_event {
	struct dl_server *srv;
	const struct dl_change *ch;
	struct dl_line line;
	int len; /* 0: not formatted yet */
	char buf[DL_REPLY_MAX];
};

static const char *const kinds[] = {
	[DL_CHANGE_GRANTED] = "granted",     [DL_CHANGE_RELEASED] = "released",
	[DL_CHANGE_EXPIRED] = "expired",     [DL_CHANGE_BROKEN] = "broken",
	[DL_CHANGE_WITHDRAWN] = "withdrawn", [DL_CHANGE_VALUE] = "value",
};

int dl_watch_init(struct dl_server *srv, uint64_t seed)
{
	struct dl_watches *ws = calloc(1, sizeof(*ws));

	if (!ws || !(ws->reg = dl_watchreg_new(seed, DL_WATCHES_MAX))) {
		free(ws);
		return DL_ENOMEM;
	}
	srv->watch = ws;
	return 0;
}

void dl_watch_free(struct dl_server *srv)
{
	if (!srv->watch)
		return;
	dl_watchreg_free(srv->watch->reg);
	free(srv->watch);
	srv->watch = NULL;
}

void dl_watch_stats(const struct dl_server *srv, struct dl_watch_stats *st)
{
	const struct dl_watches *ws = srv->watch;

	memset(st, 0, sizeof(*st));
	if (!ws)
		return;
	st->watches = dl_watchreg_count(ws->reg);
	st->sent = ws->sent;
	st->dropped = ws->dropped;
	st->capped = ws->capped;
}

/* ---- the budget --------------------------------------------------------- */

/* Unread bytes past which c's watch events are dropped (watch.h). */
static size_t budget(const struct dl_conn *c)
{
	size_t quarter = (size_t)(c->srv->cfg.max_output / 4);

	return quarter < DL_WATCH_UNREAD_MAX ? quarter : DL_WATCH_UNREAD_MAX;
}

/* Room for `len` more bytes of events on c. */
static int room(struct dl_conn *c, size_t len)
{
	const struct dl_server *srv = c->srv;

	return dl_conn_queued(c) + len <= budget(c) &&
	       srv->out_unread <= srv->cfg.max_output_total;
}

/* Tell cw how many events it missed, if it has read enough since: 1 if
 * it was told (it gets events again). */
static int overflow_notice(struct dl_conn_watch *cw)
{
	struct dl_conn *c = cw->c;
	const struct dl_server *srv = c->srv;
	struct dl_line line = {.kind = DL_LINE_EVENT};
	char buf[64];
	struct dl_fmt f;
	int n;

	if (dl_conn_queued(c) > budget(c) / 2 ||
	    srv->out_unread > srv->cfg.max_output_total / 4 * 3)
		return 0;
	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "* WATCH-OVERFLOW");
	dl_fmt_u64(&f, cw->dropped);
	n = dl_fmt_end(&f, DL_STR_NULL);
	cw->dropped = 0;
	if (n > 0)
		dl_conn_send(c, buf, (size_t)n, &line);
	return 1;
}

void dl_watch_drained(struct dl_conn *c)
{
	if (c->watch && c->watch->dropped && !c->end)
		overflow_notice(c->watch);
}

/* ---- events ------------------------------------------------------------- */

/* "* WATCH <name> <what> <owner> <token> holders=<n> [user=<user>]
 * [broken_by=<user>]". The owner is shown as STATUS shows it: its id,
 * and the user it belongs to when that is not the default user (the
 * quarantine's reserved owner as it is). */
static void format_event(struct watch_event *ev)
{
	const struct dl_change *ch = ev->ch;
	struct dl_str user = dl_owner_key_account(ch->owner), id = ch->owner;
	struct dl_fmt f;

	if (user.len &&
	    !(ch->owner.len == sizeof(DL_QUARANTINE_OWNER) - 1 &&
	      !memcmp(ch->owner.p, DL_QUARANTINE_OWNER, ch->owner.len)))
		id = dl_owner_key_id(ch->owner);
	else
		user.len = 0;
	dl_fmt_init(&f, ev->buf, sizeof(ev->buf));
	dl_fmt_word(&f, "* WATCH");
	dl_fmt_str(&f, ch->name);
	dl_fmt_word(&f, kinds[ch->kind]);
	dl_fmt_str(&f, id);
	dl_fmt_u64(&f, ch->token);
	dl_fmt_kv_u64(&f, "holders", ch->holders);
	if (user.len)
		dl_fmt_kv_str(&f, "user", user);
	if (ch->by.len)
		dl_fmt_kv_str(&f, "broken_by", ch->by);
	if (ch->value.len)
		dl_fmt_kv_str(&f, "value", ch->value);
	ev->len = dl_fmt_end(&f, DL_STR_NULL);
	ev->line.kind = DL_LINE_EVENT;
	/* a grant, or a new value, is news once Redis has it, as for its
	 * holder */
	ev->line.durable =
		ch->kind == DL_CHANGE_GRANTED || ch->kind == DL_CHANGE_VALUE;
}

/* Events c's user may still be handed now (max_watch_events_per_user):
 * its bucket, refilled once empty for the time since it last was, up to
 * the rate. UINT32_MAX for no budget (the default user, or 0). */
static uint32_t events_left(struct dl_conn *c)
{
	uint64_t cap = c->srv->cfg.max_watch_events_per_user, now, left;
	struct dl_user_rt *rt;

	if (!cap || !c->user || !c->user->name[0])
		return UINT32_MAX;
	rt = &c->user->rt;
	if (rt->events_left)
		return rt->events_left;
	now = uv_now(c->srv->loop);
	if (!rt->events_at_ms || now - rt->events_at_ms >= 1000)
		left = cap;
	else
		left = (now - rt->events_at_ms) * cap / 1000;
	if (left) {
		rt->events_left = (uint32_t)(left < cap ? left : cap);
		rt->events_at_ms = now;
	}
	return rt->events_left;
}

/* A dropping watcher takes events again (1) if it was not looked at for
 * WATCH_LOOK_MS, its user's budget has some, and it has read enough
 * (overflow_notice). */
static int look(struct dl_conn_watch *cw)
{
	uint64_t now = uv_now(cw->c->srv->loop);

	if (now - cw->looked_ms < WATCH_LOOK_MS)
		return 0;
	cw->looked_ms = now;
	return events_left(cw->c) && overflow_notice(cw);
}

static void deliver(struct dl_watcher *w, void *arg)
{
	struct dl_conn_watch *cw =
		(struct dl_conn_watch *)((char *)w -
					 offsetof(struct dl_conn_watch, w));
	struct watch_event *ev = arg;
	struct dl_watches *ws = ev->srv->watch;
	struct dl_conn *c = cw->c;

	ev->srv->work++; /* paid by the turn of whoever made the change */
	if (c->end)
		return;
	if (ev->len == 0)
		format_event(ev);
	if (ev->len < 0)
		return; /* cannot happen: a name and an owner fit */
	if (cw->dropped && !look(cw))
		goto drop;
	if (!events_left(c) || !room(c, (size_t)ev->len))
		goto drop;
	ws->sent++;
	if (events_left(c) != UINT32_MAX)
		c->user->rt.events_left--;
	dl_conn_send(c, ev->buf, (size_t)ev->len, &ev->line);
	return;
drop:
	if (cw->dropped++ == 0) {
		cw->looked_ms = uv_now(c->srv->loop);
		dl_info("conn %llu %s: watch events dropped: the client does "
			"not read them or its user's budget is spent",
			(unsigned long long)c->id, c->peer);
	}
	ws->dropped++;
	if (!events_left(c))
		ws->capped++; /* its user's budget is spent */
}

void dl_watch_change(struct dl_server *srv, const struct dl_change *ch)
{
	struct watch_event ev;

	if (!srv->watch || dl_watchreg_count(srv->watch->reg) == 0)
		return;
	ev.srv = srv;
	ev.ch = ch;
	ev.len = 0;
	memset(&ev.line, 0, sizeof(ev.line));
	dl_watchreg_match(srv->watch->reg, ch->name, deliver, &ev);
}

/* ---- the verbs ---------------------------------------------------------- */

/* The request's pattern as it was written: the name, or prefix and '*'. */
static struct dl_str pattern(const struct dl_request *rq, char *buf)
{
	if (rq->name.len)
		memcpy(buf, rq->name.p, rq->name.len);
	if (rq->prefix)
		buf[rq->name.len] = '*';
	return (struct dl_str){buf, rq->name.len + rq->prefix};
}

static void send_line(struct dl_conn *c, struct dl_fmt *f, struct dl_str tag)
{
	int n = dl_fmt_end(f, tag);

	if (n > 0)
		dl_conn_send(c, f->buf, (size_t)n, NULL);
	else
		dl_conn_error(c, DL_EINTERNAL, "reply too long", tag);
}

/* "OK WATCHING <name> holders=<n>" (the lock's holders now: 0 when it is
 * free), or "OK WATCHING <prefix>*". The status is read before the watch
 * is made: reading it reaps an overdue lease, and its `expired` is then
 * news from before the reply, which already counts it. */
void dl_watch_cmd(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_server *srv = c->srv;
	char pat[DL_NAME_MAX + 1], buf[DL_REPLY_MAX], why[DL_WHY_MAX];
	struct dl_str p = pattern(rq, pat);
	struct dl_lock_status st;
	struct dl_conn_watch *cw;
	uint64_t quota, left, n, own;
	struct dl_fmt f;
	int rc;

	dl_fmt_init(&f, buf, sizeof(buf));
	if (!dl_access_may(c, DL_RIGHT_READ, rq->name)) {
		srv->st.errors[-DL_EDENIED]++;
		dl_fmt_word(&f, "NO DENIED");
		dl_fmt_str(&f, p);
		dl_fmt_word(&f, "need=read");
		send_line(c, &f, rq->tag);
		return;
	}
	if (!c->watch && (c->watch = calloc(1, sizeof(*c->watch))) != NULL)
		c->watch->c = c;
	if (!c->watch) {
		dl_conn_error(c, DL_EINTERNAL, "out of memory", rq->tag);
		return;
	}
	cw = c->watch;
	if (!rq->prefix)
		dl_locktab_status(srv->tab, rq->name, &st);
	/* the connection's own bound, or less: what its user has left */
	n = cw->w.n;
	own = DL_WATCHES_PER_CONN_MAX;
	quota = dl_access_quota(c, DL_QUOTA_WATCHES);
	left = quota > c->user->rt.watches ? quota - c->user->rt.watches : 0;
	if (quota && n + left < own)
		own = n + left;
	rc = dl_watchreg_add(srv->watch->reg, &cw->w, rq->name, rq->prefix,
			     (uint32_t)own);
	if (rc == DL_ELIMIT) {
		if (quota && c->user->rt.watches >= quota)
			snprintf(why, sizeof(why),
				 "limit reached: user %s has %u watches, at "
				 "most %llu (%s)",
				 dl_access_user(c),
				 (unsigned)c->user->rt.watches,
				 (unsigned long long)quota,
				 c->user->quota[DL_QUOTA_WATCHES]
					 ? "its watches="
					 : "max_watches_per_user");
		else if (cw->w.n >= DL_WATCHES_PER_CONN_MAX)
			snprintf(why, sizeof(why),
				 "limit reached: this connection watches %u "
				 "names and prefixes, at most %d",
				 (unsigned)cw->w.n, DL_WATCHES_PER_CONN_MAX);
		else
			snprintf(why, sizeof(why),
				 "limit reached: this daemon has %zu watches, "
				 "at most %d",
				 dl_watchreg_count(srv->watch->reg),
				 DL_WATCHES_MAX);
		dl_conn_error(c, DL_ELIMIT, why, rq->tag);
		return;
	}
	if (rc < 0) {
		dl_conn_error(c, DL_EINTERNAL, dl_strerror(rc), rq->tag);
		return;
	}
	c->user->rt.watches += (uint32_t)(cw->w.n - n);
	dl_fmt_word(&f, "OK WATCHING");
	dl_fmt_str(&f, p);
	if (!rq->prefix)
		dl_fmt_kv_u64(&f, "holders", st.holders);
	send_line(c, &f, rq->tag);
}

/* "OK UNWATCHED <pattern>" or "NO NOT_WATCHING <pattern>". */
void dl_unwatch_cmd(struct dl_conn *c, const struct dl_request *rq)
{
	char pat[DL_NAME_MAX + 1], buf[DL_REPLY_MAX];
	struct dl_str p = pattern(rq, pat);
	struct dl_fmt f;
	int gone =
		c->watch && dl_watchreg_remove(c->srv->watch->reg, &c->watch->w,
					       rq->name, rq->prefix);

	if (gone && c->user)
		c->user->rt.watches--;
	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, gone ? "OK UNWATCHED" : "NO NOT_WATCHING");
	dl_fmt_str(&f, p);
	send_line(c, &f, rq->tag);
}

size_t dl_watch_conn_count(const struct dl_conn *c)
{
	return c->watch ? c->watch->w.n : 0;
}

void dl_watch_conn_end(struct dl_conn *c)
{
	if (!c->watch)
		return;
	if (c->user)
		c->user->rt.watches -= (uint32_t)c->watch->w.n;
	if (c->srv->watch)
		dl_watchreg_leave(c->srv->watch->reg, &c->watch->w);
	free(c->watch);
	c->watch = NULL;
}
