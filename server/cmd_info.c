/* SPDX-License-Identifier: MIT */
/*
 * cmd_info.c -- the verbs that read and change nothing: STATUS, HOLDERS,
 * STATS, LOCKS and HELP (cmd.c dispatches them; cmd_private.h declares
 * what the two files share: the reply buffer and the owner's and
 * description's words).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/access.h"
#include "server/clock.h"
#include "server/cmd_private.h"
#include "server/conn.h"
#include "server/server.h"
#include "server/stats.h"

/* The mode a lock is held in: "exclusive", "shared", "semaphore" (the
 * holders of a lock with limit > 1 each hold a permit), "-" when free. */
static struct dl_str status_mode(const struct dl_lock_status *st)
{
	if (!st->held)
		return DL_STR_LIT("-");
	if (st->limit > 1)
		return DL_STR_LIT("semaphore");
	return st->shared ? DL_STR_LIT("shared") : DL_STR_LIT("exclusive");
}

void dl__cmd_status(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_lock_status st;
	struct reply r;
	const char *why;
	uint64_t closed;

	dl_locktab_status(c->srv->tab, rq->name, &st);
	dl__cmd_reply_begin(&r, "OK STATUS");
	dl_fmt_str(&r.f, rq->name);
	dl_fmt_word(&r.f, st.held ? "state=held" : "state=free");
	dl_fmt_kv_u64(&r.f, "token", st.token);
	dl_fmt_kv_u64(&r.f, "ttl_ms", st.remaining);
	dl_fmt_kv_u64(&r.f, "count", st.count);
	dl__cmd_fmt_owner(&r.f, 1, st.held ? st.owner : DL_STR_NULL);
	dl_fmt_kv_u64(&r.f, "waiters", st.waiters);
	dl_fmt_kv_str(&r.f, "mode", status_mode(&st));
	dl_fmt_kv_u64(&r.f, "limit", st.limit);
	dl_fmt_kv_u64(&r.f, "holders", st.holders);
	dl_fmt_kv_u64(&r.f, "held_ms", st.held_ms);
	dl__cmd_fmt_desc(&r.f, st.desc);
	/* the lock's delay, and what is left of it if it runs */
	dl_fmt_kv_u64(&r.f, "delay_ms", st.delay_ms);
	dl_fmt_kv_u64(&r.f, "delay_left_ms", st.delay_left);
	/* a free lock nobody may take yet: grants are closed after Redis
	 * went back (docs/design.md) */
	closed = dl_store_closed_ms(c->srv->store, &why);
	if (closed)
		dl_fmt_kv_u64(&r.f, "closed_ms", closed);
	/* what the first holder says of its lease (an elected leader's
	 * address): last, it is the longest */
	if (st.value.len)
		dl_fmt_kv_str(&r.f, "value", st.value);
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
}

/* HOLDERS: "OK HOLDERS <name> holders=<h> waiters=<w> mode=<m> limit=<n>
 * more=<k>", then one line per holder in grant order
 *   holder <owner> token=<t> ttl_ms=<ms> count=<c> mode=<m> held_ms=<ms>
 *          [host=<h>] [pid=<p>] [cmd=<c>]
 * then one per waiter in queue order
 *   waiter <owner> position=<p> wait_ms=<ms>|inf mode=<m> [restored]
 *          [host=<h>] [pid=<p>] [cmd=<c>]
 * at most DL_HOLDERS_LIST_MAX of each; more= counts those left out. */
struct member_lines {
	struct dl_conn *c;
	uint32_t holders, waiters; /* listed so far */
	uint64_t more;
};

static void member_line(const struct dl_member *m, void *arg)
{
	struct member_lines *x = arg;
	struct reply r;

	if ((m->waiter ? x->waiters : x->holders) >= DL_HOLDERS_LIST_MAX) {
		x->more++;
		return;
	}
	if (m->waiter)
		x->waiters++;
	else
		x->holders++;
	dl__cmd_reply_begin(&r, m->waiter ? "waiter" : "holder");
	dl__cmd_fmt_owner(&r.f, 0, m->owner);
	if (m->waiter) {
		dl_fmt_kv_u64(&r.f, "position", m->position);
		if (m->remaining == UINT64_MAX)
			dl_fmt_word(&r.f, "wait_ms=inf");
		else
			dl_fmt_kv_u64(&r.f, "wait_ms", m->remaining);
	} else {
		dl_fmt_kv_u64(&r.f, "token", m->token);
		dl_fmt_kv_u64(&r.f, "ttl_ms", m->remaining);
		dl_fmt_kv_u64(&r.f, "count", m->count);
	}
	dl_fmt_word(&r.f, m->shared ? "mode=shared" : "mode=exclusive");
	if (!m->waiter)
		dl_fmt_kv_u64(&r.f, "held_ms", m->held_ms);
	if (m->placeholder)
		dl_fmt_word(&r.f, "restored");
	dl__cmd_fmt_desc(&r.f, m->desc);
	if (m->value.len)
		dl_fmt_kv_str(&r.f, "value", m->value);
	dl__cmd_reply_send(x->c, &r, DL_STR_NULL, NULL);
}

void dl__cmd_holders(struct dl_conn *c, const struct dl_request *rq)
{
	struct member_lines x = {c, 0, 0, 0};
	struct dl_lock_status st;
	struct reply r;
	uint32_t listed;

	dl_locktab_status(c->srv->tab, rq->name, &st);
	listed = (st.holders < DL_HOLDERS_LIST_MAX ? st.holders
						   : DL_HOLDERS_LIST_MAX) +
		 (st.waiters < DL_HOLDERS_LIST_MAX ? st.waiters
						   : DL_HOLDERS_LIST_MAX);
	dl__cmd_reply_begin(&r, "OK HOLDERS");
	dl_fmt_str(&r.f, rq->name);
	dl_fmt_u64(&r.f, listed);
	dl_fmt_kv_u64(&r.f, "holders", st.holders);
	dl_fmt_kv_u64(&r.f, "waiters", st.waiters);
	dl_fmt_kv_str(&r.f, "mode", status_mode(&st));
	dl_fmt_kv_u64(&r.f, "limit", st.limit);
	dl_fmt_kv_u64(&r.f, "more", st.holders + st.waiters - listed);
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
	/* dl_locktab_status reaped the lock; the walk does not reap, so
	 * it lists exactly the lines the header counts */
	dl_locktab_members(c->srv->tab, rq->name, member_line, &x);
}

/* STATS lines are collected first: the header carries their count. */
struct stat_lines {
	size_t n;
	char line[DL_STATS_MAX][DL_STATS_LINE_MAX];
	int len[DL_STATS_MAX];
};

static void stat_line(const struct dl_stat *s, void *arg)
{
	struct stat_lines *x = arg;
	char key[64];
	struct dl_fmt f;
	int n;

	if (x->n == DL_STATS_MAX)
		return;
	snprintf(key, sizeof(key), "%s%s%s", s->name, s->label ? "_" : "",
		 s->label ? s->label : "");
	dl_fmt_init(&f, x->line[x->n], DL_STATS_LINE_MAX);
	dl_fmt_word(&f, key);
	dl_fmt_u64(&f, s->value);
	n = dl_fmt_end(&f, DL_STR_NULL);
	if (n > 0)
		x->len[x->n++] = n;
}

void dl__cmd_stats(struct dl_conn *c, const struct dl_request *rq)
{
	struct stat_lines *x = malloc(sizeof(*x));
	struct reply r;
	size_t i;

	if (!x) {
		dl_conn_error(c, DL_EINTERNAL, "out of memory", rq->tag);
		return;
	}
	x->n = 0;
	dl_stats_collect(c->srv, stat_line, x);
	dl__cmd_reply_begin(&r, "OK STATS");
	dl_fmt_u64(&r.f, x->n);
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
	for (i = 0; i < x->n; i++)
		dl_conn_send(c, x->line[i], (size_t)x->len[i], NULL);
	free(x);
}

/* LOCKS: "OK LOCKS <n> more=<m>", then n lines, one per lock, in the
 * order of the page (see dl_locktab_list): the locks the user may read,
 * walked under the prefixes it may read only. A page by name costs its
 * locks (the table's index); one by waiters a walk of the locks under the
 * prefix, which costs the loop its time: after a listing of T ms the same
 * user's next one waits until 2T later (each user its own: one cannot
 * deny listings to another); and a user who may read no name under the
 * prefix is answered without a walk (found from outside: four users who
 * could read none of 100,000 locks listed them in turn, and another
 * user's PING p50 went from 0.02 to 4.86 ms). */
void dl__cmd_locks(struct dl_conn *c, const struct dl_request *rq)
{
	struct dl_locktab *tab = c->srv->tab;
	size_t limit = rq->has_limit ? rq->limit : DL_LOCKS_PAGE_DEFAULT;
	struct dl_list_filter keep;
	struct dl_user_rt *rt = &c->user->rt;
	int all;
	const struct dl_lock **page;
	struct dl_lock_status st;
	struct reply r;
	uint64_t more, t0_us = dl_mono_us(), took_us;
	char why[DL_WHY_MAX];
	size_t i, n;

	if (!dl_access_may_some(c, DL_RIGHT_READ, rq->name)) {
		dl__cmd_reply_begin(&r, "OK LOCKS");
		dl_fmt_u64(&r.f, 0);
		dl_fmt_kv_u64(&r.f, "more", 0);
		dl__cmd_reply_send(c, &r, rq->tag, NULL);
		return;
	}
	if (t0_us < rt->locks_next_us) {
		snprintf(
			why, sizeof(why),
			"limit reached: a listing costs this server %llu.%03llu ms (%llu locks); the next one in %llu ms",
			(unsigned long long)(rt->locks_last_us / 1000),
			(unsigned long long)(rt->locks_last_us % 1000),
			(unsigned long long)dl_locktab_stats(tab)->locks,
			(unsigned long long)((rt->locks_next_us - t0_us + 999) /
					     1000));
		dl_conn_error(c, DL_ELIMIT, why, rq->tag);
		return;
	}
	page = malloc(limit * sizeof(*page));
	if (!page) {
		dl_conn_error(c, DL_EINTERNAL, "out of memory", rq->tag);
		return;
	}
	/* no filter when every name under the prefix is readable; else the
	 * prefixes the user may read */
	all = dl_access_may(c, DL_RIGHT_READ, rq->name);
	if (!all)
		keep.n = dl_access_prefixes(c, DL_RIGHT_READ, &keep.prefixes);
	n = dl_locktab_list(
		tab, rq->by_waiters ? DL_LIST_BY_WAITERS : DL_LIST_BY_NAME,
		rq->name, rq->after, limit, all ? NULL : &keep, page, &more);
	took_us = dl_mono_us() - t0_us;
	/* only a walk (by waiters) spaces the next listing: a page by name
	 * costs its own locks, bounded by DL_LOCKS_PAGE_MAX, whatever the
	 * table holds. In microseconds: an index walk of 100,000 locks took
	 * under one ms and, rounded to 0, spaced nothing. */
	if (rq->by_waiters) {
		rt->locks_last_us = took_us;
		rt->locks_next_us =
			took_us < DL_LOCKS_GAP_MIN_US
				? 0
				: dl_mono_us() + DL_LOCKS_GAP_FACTOR * took_us;
	}
	dl__cmd_reply_begin(&r, "OK LOCKS");
	dl_fmt_u64(&r.f, n);
	dl_fmt_kv_u64(&r.f, "more", more);
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
	for (i = 0; i < n; i++) {
		dl_locktab_lock_status(tab, page[i], &st);
		dl_fmt_init(&r.f, r.buf, sizeof(r.buf));
		dl_fmt_str(&r.f,
			   (struct dl_str){page[i]->name, page[i]->hn.len});
		dl_fmt_word(&r.f, st.held ? "state=held" : "state=free");
		dl_fmt_kv_str(&r.f, "mode", status_mode(&st));
		dl__cmd_fmt_owner(&r.f, 1, st.held ? st.owner : DL_STR_NULL);
		dl_fmt_kv_u64(&r.f, "token", st.token);
		dl_fmt_kv_u64(&r.f, "ttl_ms", st.remaining);
		dl_fmt_kv_u64(&r.f, "count", st.count);
		dl_fmt_kv_u64(&r.f, "holders", st.holders);
		dl_fmt_kv_u64(&r.f, "waiters", st.waiters);
		dl_fmt_kv_u64(&r.f, "limit", st.limit);
		dl_fmt_kv_u64(&r.f, "held_ms", st.held_ms);
		dl__cmd_fmt_desc(&r.f, st.desc);
		dl__cmd_reply_send(c, &r, DL_STR_NULL, NULL);
	}
	free(page);
}

/* HELP: "OK HELP <n>", then n lines of text: every verb's syntax and
 * how durations are written, or one verb's syntax, what it does and its
 * options with this server's limits. */
#define HELP_NOTES 12 /* LOCK has 10: what it does and 9 options */
/* The next note's room: the last one is written over rather than past
 * the array, should an option be added and this bound not. */
#define NOTE (note[n < HELP_NOTES ? n++ : HELP_NOTES - 1])

void dl__cmd_help(struct dl_conn *c, const struct dl_request *rq)
{
	const struct dl_config *cfg = &c->srv->cfg;
	char note[HELP_NOTES][DL_REPLY_MAX / 4];
	char d1[DL_DURATION_TEXT_MAX], d2[DL_DURATION_TEXT_MAX];
	enum dl_verb v = DL_VERB_NONE, first = DL_VERB_NONE + 1, end;
	const char *u;
	struct reply r;
	size_t n = 0, i;

	if (rq->arg.len && (v = dl_find_verb(rq->arg)) == DL_VERB_NONE) {
		dl_conn_error(c, DL_EBADARG,
			      "unknown command; HELP lists the commands",
			      rq->tag);
		return;
	}
	end = v == DL_VERB_NONE ? DL_VERB_COUNT_ : v + 1;
	if (v != DL_VERB_NONE)
		first = v;
	u = v == DL_VERB_NONE ? " ttl= wait= mode= limit=" : dl_verb_usage(v);
	if (v != DL_VERB_NONE)
		snprintf(NOTE, sizeof(note[0]), "%s", dl_verb_summary(v));
	if (strstr(u, "ttl="))
		snprintf(NOTE, sizeof(note[0]),
			 "ttl: the lease, a duration: 500ms, 30s, 2m, 1h (a "
			 "bare number is ms); default %s, at most %s",
			 dl_format_duration(cfg->default_ttl_ms, d1),
			 dl_format_duration(cfg->max_ttl_ms, d2));
	if (strstr(u, "wait="))
		snprintf(NOTE, sizeof(note[0]),
			 "wait: how long to queue, a duration or inf (the "
			 "default); TRYLOCK does not queue");
	if (strstr(u, "mode="))
		snprintf(NOTE, sizeof(note[0]),
			 "mode: exclusive (the default), the only holder; or "
			 "shared, with other shared holders; first come, "
			 "first served across both");
	if (strstr(u, "limit=") && v != DL_VERB_LOCKS)
		snprintf(NOTE, sizeof(note[0]),
			 "limit (LOCK, TRYLOCK): holders at once, 1 (a lock, "
			 "the default) to %d (a semaphore); set by the "
			 "request that finds the lock free, another one is "
			 "NO LIMIT_MISMATCH",
			 DL_LIMIT_MAX);
	if (strstr(u, "warn="))
		snprintf(NOTE, sizeof(note[0]),
			 "warn: how much of the lease remains when * EXPIRING "
			 "<name> <token> <ms> is sent, unless refreshed "
			 "before; below the ttl, 0 for none (REFRESH keeps the "
			 "lease's warning without one)");
	if (strstr(u, "delay="))
		snprintf(
			NOTE, sizeof(note[0]),
			"delay: the lock's lock-delay, at most %s: after a "
			"lease ends without UNLOCK (it expires, or is broken), "
			"nobody gets the lock for that long; waiters keep "
			"their place",
			dl_format_duration(DL_LOCK_DELAY_MAX_MS, d1));
	if (strstr(u, "req="))
		snprintf(NOTE, sizeof(note[0]),
			 "req: a number of your own for this request, sent "
			 "again with it after a drop: a grant it had is given "
			 "back (same token and holds), not taken twice");
	if (strstr(u, "value="))
		snprintf(NOTE, sizeof(note[0]),
			 "value: what the lease says to whoever looks at the "
			 "lock (STATUS, WATCH), up to %d bytes of text: an "
			 "elected leader's address",
			 DL_VALUE_MAX);
	if (strstr(u, "notify="))
		snprintf(
			NOTE, sizeof(note[0]),
			"notify=waiters: * WAITING <name> <n> token=<t> when others "
			"queue behind your lease (at its grant if some do; "
			"then as the queue doubles, or a second later)");
	if (strstr(u, "limit=") && (v == DL_VERB_LOCKS || v == DL_VERB_NONE))
		snprintf(NOTE, sizeof(note[0]),
			 "limit (LOCKS): locks per page, 1 to %d (default "
			 "%d); after=<the page's last name> for the next page",
			 DL_LOCKS_PAGE_MAX, DL_LOCKS_PAGE_DEFAULT);
	if (v == DL_VERB_NONE)
		snprintf(NOTE, sizeof(note[0]),
			 "HELP <command> for one; the protocol: PROTOCOL.md "
			 "(man dlockd)");
	dl__cmd_reply_begin(&r, "OK HELP");
	dl_fmt_u64(&r.f, (uint64_t)(end - first) + n);
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
	for (i = first; i < end; i++) {
		dl_fmt_init(&r.f, r.buf, sizeof(r.buf));
		dl_fmt_word(&r.f, dl_verb_usage((enum dl_verb)i));
		dl__cmd_reply_send(c, &r, DL_STR_NULL, NULL);
	}
	for (i = 0; i < n; i++) {
		dl_fmt_init(&r.f, r.buf, sizeof(r.buf));
		dl_fmt_word(&r.f, note[i]);
		dl__cmd_reply_send(c, &r, DL_STR_NULL, NULL);
	}
}
