/* SPDX-License-Identifier: MIT */
/*
 * store_horizon.c -- the lease horizon's reservation, the standbys that
 * must know it, and the closure after Redis went back (docs/design.md,
 * "A Redis that forgets").
 *
 * The lock table keeps its horizon: the latest moment a lease it told of
 * may still be believed, lock-delays included (dl_locktab_horizon). The
 * active keeps a *reservation* at or above it, and no epoch commits (no
 * grant, refresh or re-entry is told) before the reservation that covers
 * the table's horizon is durable everywhere a later daemon looks:
 *
 *   1. the state file (seen.h), fsynced: a restart of this daemon;
 *   2. P horizon in Redis ("<instance> <n> <ms left>", written by a
 *      renewal of the leadership): where the standbys read it;
 *   3. every standby counted: a standby's look writes the horizon it has
 *      counted into P standbys (field: its instance; value: "<the
 *      horizon's instance>:<n> <its looks>"); the renewal that raises P
 *      horizon reads that hash in the same atomic call, and the raise is
 *      usable once every standby it listed has passed it back, or has
 *      stopped looking for 2 x leader_lease of this daemon's clock (it is
 *      then no longer counted, and its field is deleted). A standby that
 *      registers after a raise reads it with the look that registers it.
 *
 * A raise runs DL_HORIZON_AHEAD_MS past the table's horizon, and the
 * store's tick makes the next one while half of that is still left: a
 * steady load never waits for one. A lease longer than any before waits
 * once: an fsync and a round trip, and with standbys about one look.
 *
 * A standby counts a value it has not counted before from the moment it
 * reads it (after it was written: it can only count too long), so no
 * clock of another machine is compared with its own. The same holds for
 * the closure, P closed = "<instance> <n> <ms left> <why>".
 *
 * What a daemon that finds a loss can prove (bound_ms), and so how long it
 * closes: a standalone daemon (no node_id: the only writer by
 * configuration) starting with a state file: the file's horizon; a
 * restart with a state file whose lead is its epoch (nobody took over
 * after the last take made from its directory): the same; a standby
 * whose look before the one that found the loss came less than a
 * leader_lease earlier, and was counted (so the active cannot have
 * dropped it): what it counted; an active whose leadership lapsed, when
 * its peers' answers bound what they told (store_attest.c): its own
 * horizon and theirs; anybody else: max_ttl.
 */
#include "server/store/store_horizon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/clock.h"
#include "server/log.h"
#include "server/store/store_private.h"

static int standalone(const struct dl_store *st)
{
	return !st->cfg->node_id[0];
}

/* The active stops counting a standby whose looks stop this long. */
static uint64_t drop_ms(const struct dl_store *st)
{
	return 2 * st->cfg->leader_lease_ms;
}

/* "<instance> <n> <ms>[ <why>]": 0 and its parts, or -1. */
static int parse_value(const char *s, size_t len, char inst[17], uint64_t *n,
		       uint64_t *ms, const char **why)
{
	char buf[DL_HZ_VALUE_MAX], *p, *q;

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (!(p = strchr(buf, ' ')) || p - buf > 16)
		return -1;
	*p++ = '\0';
	if (!(q = strchr(p, ' ')))
		return -1;
	*q++ = '\0';
	if (dl_parse_u64(p, strlen(p), n))
		return -1;
	p = strchr(q, ' ');
	if (dl_parse_u64(q, p ? (size_t)(p - q) : strlen(q), ms))
		return -1;
	snprintf(inst, 17, "%.16s", buf);
	if (why)
		*why = p ? s + (p + 1 - buf) : "";
	return 0;
}

static const char *str_of(const redisReply *e)
{
	return e->type == REDIS_REPLY_STRING ? e->str : "";
}

/* ---- the active: raising the reservation --------------------------------- */

/* The state file can be neither written nor removed (seen.c): nothing a
 * grant needs is durable. Persistence is down until it can be: the held
 * replies are withdrawn (ERR UNAVAILABLE) and changes refused, as when
 * Redis is away, and the link, reconnecting with backoff, tries again.
 * Found from outside: with the directory made immutable, every grant was
 * held for its whole TTL, then told with 0 ms left. */
static int file_failed(struct dl_store *st)
{
	dl__link_fail(st, "the state file cannot be written");
	return DL_EUNAVAILABLE;
}

/* Make a new reservation durable in the state file, and have the next
 * renewal carry it to Redis and the standbys. */
static int raise_start(struct dl_store *st)
{
	struct store_horizon *hz = &st->hz;
	uint64_t now = dl_mono_ms(), need = dl_locktab_horizon(st->tab), r;

	if (hz->pend_n)
		return 0; /* one at a time: the next covers what came since */
	if (need < now)
		need = now;
	/* DL_HORIZON_AHEAD_MS past the need, but never past what a lease
	 * granted now could need (max_ttl): a closure after a loss never
	 * lasts longer than the longest lease for the margin's sake (a
	 * lease with a delay that goes further waits for its own raise) */
	r = need + DL_HORIZON_AHEAD_MS;
	if (r > now + st->cfg->max_ttl_ms)
		r = need > now + st->cfg->max_ttl_ms
			    ? need
			    : now + st->cfg->max_ttl_ms;
	dl_seen_note_horizon(&st->lead.seen, r);
	if (dl_seen_save(&st->lead.seen, now, 1) != 0)
		return file_failed(st);
	hz->pend_n = ++hz->n;
	hz->pend_until = r;
	hz->pend_acked = 0;
	hz->reserved = hz->pend_until;
	if (r > hz->reserved_max)
		hz->reserved_max = r;
	hz->poll_at = 0;
	return 0;
}

/* The file holds every mark sent, and the reservation covers the table. */
static int covered(struct dl_store *st)
{
	struct dl_seen *seen = &st->lead.seen;
	uint64_t now = dl_mono_ms(), need = dl_locktab_horizon(st->tab);

	if (dl_seen_durable_mark(seen) < seen->v.mark &&
	    dl_seen_save(seen, now, 1) != 0) {
		file_failed(st);
		return 0;
	}
	return need <= now || need <= st->hz.usable;
}

/* A raise is durable everywhere, or a pending commit may go. */
static void progress(struct dl_store *st)
{
	struct store_horizon *hz = &st->hz;
	uint64_t epoch;
	unsigned i;

	if (hz->pend_n && hz->pend_acked) {
		for (i = 0; i < hz->nsby; i++)
			if (hz->sby[i].wait_n)
				break;
		if (i == hz->nsby) {
			hz->usable = hz->pend_until;
			hz->pend_n = 0;
		}
	}
	if (hz->pending && covered(st)) {
		epoch = hz->pending;
		hz->pending = 0;
		dl__commit(st, epoch);
	}
}

int dl__hz_gate(struct dl_store *st, uint64_t epoch)
{
	struct store_horizon *hz = &st->hz;

	if (!st->redis || !st->lead.active)
		return 1;
	if (!hz->pending && covered(st))
		return 1;
	if (epoch > hz->pending)
		hz->pending = epoch;
	if (dl_locktab_horizon(st->tab) > hz->usable && !hz->pend_n &&
	    raise_start(st) == 0)
		dl__lead_send(st); /* now, not at the next tick */
	return 0;
}

/* A standby that passed back `echo` knows this process's raise `n`. */
static int knows(const struct dl_store *st, const char *echo, uint64_t n)
{
	size_t l = strlen(st->lead.instance);
	uint64_t m;

	return strncmp(echo, st->lead.instance, l) == 0 && echo[l] == ':' &&
	       dl_parse_u64(echo + l + 1, strlen(echo + l + 1), &m) == 0 &&
	       m >= n;
}

static struct hz_standby *standby_of(struct store_horizon *hz, const char *inst)
{
	unsigned i;

	for (i = 0; i < hz->nsby; i++)
		if (strcmp(hz->sby[i].inst, inst) == 0)
			return &hz->sby[i];
	return NULL;
}

/* The renewal's read of P standbys: "<inst>", "<echo> <looks>", ... */
static void read_standbys(struct dl_store *st, const redisReply *a, int raised)
{
	struct store_horizon *hz = &st->hz;
	uint64_t now = dl_mono_ms(), count;
	struct hz_standby *s;
	const char *v, *sp;
	unsigned i;
	size_t j;
	int own;

	for (i = 0; i < hz->nsby; i++)
		hz->sby[i].present = 0;
	for (j = 0, own = 0;
	     a->type == REDIS_REPLY_ARRAY && j + 1 < a->elements; j += 2) {
		if (a->element[j]->type != REDIS_REPLY_STRING ||
		    a->element[j]->len > DL_NODE_ID_MAX)
			continue;
		if (strcmp(a->element[j]->str, st->lead.node) == 0) {
			/* this node, from when it was a standby: gone with
			 * the next renewal, or the next active waits for it
			 * once this one is dead */
			own = 1;
			continue;
		}
		v = str_of(a->element[j + 1]);
		if (!(sp = strrchr(v, ' ')) ||
		    dl_parse_u64(sp + 1, strlen(sp + 1), &count))
			continue;
		if (!(s = standby_of(hz, a->element[j]->str))) {
			if (hz->nsby == DL_STANDBYS_MAX)
				continue;
			s = &hz->sby[hz->nsby++];
			memset(s, 0, sizeof(*s));
			snprintf(s->inst, sizeof(s->inst), "%s",
				 a->element[j]->str);
			s->count = count;
			s->changed = now;
			s->report_count = count;
			/* new since a raise landed: it looked after the
			 * raise, and passes it back with its next look */
			if (hz->pend_n && hz->pend_acked)
				s->wait_n = hz->pend_n;
		}
		s->present = 1;
		if (s->dropped && count != s->count)
			s->dropped = 0; /* it looks again */
		if (count != s->report_count)
			s->reported = 1;
		if (count != s->count) {
			s->count = count;
			s->changed = now;
		}
		snprintf(s->echo, sizeof(s->echo), "%.*s", (int)(sp - v), v);
		if (raised && !s->dropped)
			s->wait_n = hz->pend_n;
		if (s->wait_n && knows(st, s->echo, s->wait_n))
			s->wait_n = 0;
	}
	/* Gone from the hash (deleted, or Redis forgot it): still counted
	 * until it stops looking (dl__hz_tick drops it), and waited for by
	 * every raise meanwhile -- its next look writes its field again.
	 * Found from outside: after a DEL of the hash (or a FLUSHALL the
	 * active wrote back), a raise went without the standby, and a
	 * second loss left it with a horizon short of a lease told. */
	for (i = 0; raised && i < hz->nsby; i++)
		if (!hz->sby[i].present && !hz->sby[i].dropped &&
		    !knows(st, hz->sby[i].echo, hz->pend_n))
			hz->sby[i].wait_n = hz->pend_n;
	hz->own_field = own;
}

int dl__hz_tick(struct dl_store *st)
{
	struct store_horizon *hz = &st->hz;
	uint64_t now = dl_mono_ms(), need = dl_locktab_horizon(st->tab);
	unsigned i;

	if (!st->redis || !st->lead.active)
		return 0;
	/* the next raise before the reservation runs short (not when it is
	 * at the max_ttl cap: raise_start) */
	if (!hz->pend_n &&
	    ((need > now && hz->reserved < need + DL_HORIZON_AHEAD_MS / 2 &&
	      hz->reserved < now + st->cfg->max_ttl_ms) ||
	     hz->pending))
		(void)raise_start(st);
	/* a standby that stopped looking is no longer waited for */
	for (i = 0; i < hz->nsby;) {
		struct hz_standby *s = &hz->sby[i];

		if (now - s->changed < drop_ms(st) || s->dropped) {
			i++;
			continue;
		}
		if (s->wait_n)
			dl_warn("redis: standby %s has not looked for %llu ms: no longer counted (a take-over by it closes grants for max_ttl after a loss)",
				s->inst,
				(unsigned long long)(now - s->changed));
		st->st.standbys_dropped++;
		s->wait_n = 0;
		if (s->present) {
			/* its field goes with the next renewals (drop_arg);
			 * a look writes it again, counting it again */
			s->dropped = 1;
			i++;
			continue;
		}
		hz->sby[i] = hz->sby[--hz->nsby];
	}
	progress(st);
	if (!hz->pend_n || now < hz->poll_at)
		return 0;
	hz->poll_at = now + DL_HORIZON_POLL_MS;
	return 1;
}

/* ---- the bound of a closure -------------------------------------------- */

int dl__hz_vouches(const struct dl_store *st)
{
	int gap;

	if (st->lead.active)
		return 1; /* what it told: its reservations, its table */
	if (standalone(st) || !st->hz.prev_send)
		return dl__hz_file_proves(st) ? 1 : 0;
	/* and no gap up to now: the answer rides on the look that ends one,
	 * before its reply is read */
	gap = dl_mono_ms() - st->hz.prev_send >= st->cfg->leader_lease_ms;
	if (st->hz.vouches && !gap)
		return 1;
	return st->hz.missed || st->hz.vouches ? -1 : 0;
}

int dl__hz_file_proves(const struct dl_store *st)
{
	return standalone(st) ? st->lead.seen.has_file
			      : dl_seen_file_proves(&st->lead.seen);
}

/* How long a take that finds Redis went back, and keeps no table, closes
 * grants (module comment); *why says on what ground. */
static uint64_t bound_ms(struct dl_store *st, const char **why)
{
	const struct store_horizon *hz = &st->hz;
	const struct dl_seen *seen = &st->lead.seen;
	uint64_t now = dl_mono_ms(), h = seen->v.horizon,
		 peers = dl__attest_bound(st);
	int proves;

	if (dl_locktab_horizon(st->tab) > h)
		h = dl_locktab_horizon(st->tab);
	/* its leadership lapsed, or it starts: another may have led, unless
	 * its peers' answers bound what they told meanwhile
	 * (store_attest.c); the take then presents the round's nonce, and
	 * a take since the answers voids the bound for void_arg's max_ttl.
	 * A start bounded so closes until then on a Redis that went back
	 * too, with its own file's horizon (h): it closed for max_ttl */
	if (peers) {
		if (peers > h)
			h = peers;
		*why = "until the lease horizon its peers' answers bound";
		goto bounded;
	}
	if (st->lead.active)
		proves = 0;
	else if (standalone(st) || !hz->prev_send)
		proves = dl__hz_file_proves(st);
	else
		proves = hz->loss_latched
				 ? hz->loss_provable
				 : hz->registered &&
					   now - hz->prev_send <
						   st->cfg->leader_lease_ms;
	if (!proves) {
		/* the longest lease, and the longest delay after it */
		*why = "nothing bounds the leases told before: max_ttl";
		return st->cfg->max_ttl_ms + DL_LOCK_DELAY_MAX_MS;
	}
	*why = "until the lease horizon";
bounded:
#ifdef DL_PLANT_SHORT_CLOSE
	/* A planted bug for the fault campaign's self-test (tests/faults):
	 * grants reopen at a tenth of the horizon, before leases told before
	 * may have ended. Never in a real build. */
	return h > now ? (h - now) / 10 : 0;
#endif
	return h > now ? h - now : 0;
}

/* ---- the leadership call's arguments and reply ------------------------- */

/* A take after its peers bounded what they told (store_attest.c): the
 * leadership function closes grants even if Redis holds all this daemon
 * saw -- a peer led, or saw another lead, and Redis may have lost that
 * take unseen -- for as long as the peers' leases may be believed;
 * for max_ttl if a take since their answers voided them. So does a take
 * after a round that bounded nothing (a peer silent, or restarted since
 * the lapse), for max_ttl: found from outside, b took over while a was
 * paused, granted x for 40 s, then was stopped while Redis came back
 * from a copy from before its take; a, holding all it had seen, closed
 * nothing and granted x again. */
static void bounded_args(struct dl_store *st)
{
	struct store_horizon *hz = &st->hz;
	uint64_t now = dl_mono_ms(), end = dl__attest_bound(st),
		 max = st->cfg->max_ttl_ms + DL_LOCK_DELAY_MAX_MS;

	snprintf(
		hz->void_arg, sizeof(hz->void_arg),
		"%s %llu %llu another daemon may have led: a take since its peers answered voids their bound: max_ttl",
		st->lead.instance, (unsigned long long)++hz->closes,
		(unsigned long long)max);
	if (dl__attest_blind(st)) {
		snprintf(
			hz->peers_arg, sizeof(hz->peers_arg),
			"%s %llu %llu another daemon may have led: a peer did not answer, or nothing bounds what it or this node told: max_ttl",
			st->lead.instance, (unsigned long long)++hz->closes,
			(unsigned long long)max);
		return;
	}
	if (end > now)
		snprintf(
			hz->peers_arg, sizeof(hz->peers_arg),
			"%s %llu %llu another daemon may have led: until the end of every lease its peers told or know of",
			st->lead.instance, (unsigned long long)++hz->closes,
			(unsigned long long)(end - now));
}

/* ---- a Redis process this daemon never saw ---------------------------- */

/* A standby counts the horizon and notes Redis's generation in its looks,
 * and a restart finds them in its state file (saved at most every
 * DL_SEEN_SAVE_MS while only the generation grows): what it saw lags what
 * the active wrote by a look, or by a save. A Redis that lost the writes
 * made since -- restarted from an AOF that missed its last second with the
 * active's machine, a replica promoted without them -- holds at least what
 * it saw: the take finds nothing gone back, loads the table, and grants a
 * lease it lost again (x granted again 2.7 s into alice's 40 s lease after
 * a take-over, 0.1 s into a 5 s lease after a restart). Such a Redis is
 * another process (its run_id changed), or has another history: a
 * primary resynced as a replica of a server with older data and promoted
 * again keeps its run_id, not its replication id (dl__run_id_of; found
 * from outside).
 *
 * A daemon that is not the active and reaches such a Redis is unsure
 * until a daemon took the leadership there: every take writes P run, the
 * process it was made on, once its table or closure is whole there
 * (dl__hz_took_on_run, and the loader), and a take either knows all it
 * wrote (the active's own link) or closes for what it cannot know. An
 * unsure take closes whether Redis went back or not (unsure_args): until
 * the horizon it counted if it had looked without a gap up to the new
 * Redis, else for max_ttl. A standby reads P run with each look while
 * unsure. The state file's `run` is the last process the daemon was sure
 * of: a restart while unsure is unsure too (found from outside). The
 * active never is: what it saw is what it wrote. */
static void sure(struct dl_store *st)
{
	st->hz.unsure = 0;
	dl_seen_note_run(&st->lead.seen, st->hz.run);
}

void dl__hz_redis_run(struct dl_store *st, uint64_t run, uint64_t meddled)
{
	struct store_horizon *hz = &st->hz;
	uint64_t known = st->lead.seen.v.run;

	if (!run)
		return; /* INFO refused: not known, as before this check */
	hz->run = run;
	hz->meddled = meddled;
	if (st->lead.active || !known || known == run) {
		sure(st);
		return;
	}
	if (hz->unsure)
		return;
	hz->unsure = 1;
	/* what it counted is a bound only if it was counted up to now: the
	 * looks before this connection, on the Redis that is gone (found
	 * from outside: a standby paused past its count bounded the closure
	 * by the horizon it knew before the pause, and x was granted again
	 * 4.9 s into a 40 s lease) */
	hz->unsure_vouched = dl__hz_vouches(st) > 0;
	dl_notice(
		"redis: another Redis process than this daemon last knew (its run_id or replication id changed: a restart, a replica promoted, or a primary resynced); it may lack writes made since: until a daemon takes the leadership there (dlock:run), a take by this one closes grants until %s",
		hz->unsure_vouched ? "the lease horizon it counted"
				   : "max_ttl (it may have missed leases)");
}

void dl__hz_run_value(const struct dl_store *st, char out[DL_HZ_RUN_TEXT])
{
	snprintf(out, DL_HZ_RUN_TEXT, "%016llx %llu",
		 (unsigned long long)st->hz.run,
		 (unsigned long long)st->hz.meddled);
}

int dl__hz_same_run(const struct dl_store *st, const char *v, size_t len,
		    int meddled)
{
	char mine[DL_HZ_RUN_TEXT];
	size_t n;

	if (!st->hz.run || len < 16)
		return 0;
	dl__hz_run_value(st, mine);
	if (memcmp(v, mine, 16) != 0)
		return 0;
	if (!meddled)
		return len == 16 || v[16] == ' ';
	n = strlen(mine);
	return len == n && memcmp(v, mine, n) == 0;
}

void dl__hz_took_on_run(struct dl_store *st)
{
	char v[DL_HZ_RUN_TEXT];
	const char *argv[] = {"SET", st->keys.run, v};
	size_t lens[] = {3, strlen(st->keys.run), 0};

	if (!st->hz.run)
		return;
	dl__hz_run_value(st, v);
	lens[2] = strlen(v);
	/* no reply needed: a standby that does not read it stays unsure */
	(void)redisAsyncCommandArgv(st->ac, NULL, NULL, 3, argv, lens);
}

static void on_run(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	const redisReply *r = reply;

	if (!r || ac != st->ac || !st->hz.unsure ||
	    r->type != REDIS_REPLY_STRING)
		return;
	if (dl__hz_same_run(st, r->str, r->len, 0)) {
		sure(st);
		dl_info("redis: a daemon took the leadership on the Redis process this daemon now reaches: a take-over is as before");
	}
}

int dl__hz_unsure_send(struct dl_store *st)
{
	const char *argv[] = {"GET", st->keys.run};
	size_t lens[] = {3, strlen(st->keys.run)};

	if (!st->hz.unsure || st->lead.active)
		return 0;
	return redisAsyncCommandArgv(st->ac, on_run, st, 2, argv, lens) ==
			       REDIS_OK
		       ? 0
		       : DL_EUNAVAILABLE;
}

/* arg, a closure's value "<inst> <n> <ms> <why>" ('' none): at least ms,
 * for why. */
static void widen(struct dl_store *st, char *arg, size_t len, uint64_t ms,
		  const char *why)
{
	uint64_t n, have;
	char inst[17];

	if (arg[0] &&
	    parse_value(arg, strlen(arg), inst, &n, &have, NULL) == 0 &&
	    have >= ms)
		return;
	snprintf(arg, len, "%s %llu %llu %s", st->lead.instance,
		 (unsigned long long)++st->hz.closes, (unsigned long long)ms,
		 why);
}

/* A take while unsure: the closure goes in the arguments the function
 * closes with whether Redis went back or not (void and peers). A
 * restart round that bounded, or found nothing to bound with, decided
 * already (bounded_args): its peers' answers cover what they counted. */
static void unsure_args(struct dl_store *st)
{
	struct store_horizon *hz = &st->hz;
	char why[DL_SEEN_WHY_MAX];
	const char *ground;
	uint64_t ms, now = dl_mono_ms(), h = st->lead.seen.v.horizon;

	if (dl__attest_bound(st) || dl__attest_blind(st))
		return;
	if (dl_locktab_horizon(st->tab) > h)
		h = dl_locktab_horizon(st->tab);
	if (hz->unsure_vouched) {
		ground = "until the lease horizon it counted";
		ms = h > now ? h - now : 0;
	} else {
		ground = "nothing bounds the leases told before: max_ttl";
		ms = st->cfg->max_ttl_ms + DL_LOCK_DELAY_MAX_MS;
	}
	if (!ms)
		return;
	snprintf(
		why, sizeof(why),
		"Redis is another process than this daemon knew, and may lack writes made since: %s",
		ground);
	widen(st, hz->void_arg, sizeof(hz->void_arg), ms, why);
	widen(st, hz->peers_arg, sizeof(hz->peers_arg), ms, why);
}

void dl__hz_args(struct dl_store *st, int mode)
{
	struct store_horizon *hz = &st->hz;
	const struct dl_seen *seen = &st->lead.seen;
	uint64_t now = dl_mono_ms(), ms;
	const char *why;
	size_t n = 0;
	unsigned i;

	hz->hold_arg[0] = hz->keep_arg[0] = hz->raise_arg[0] = '\0';
	hz->void_arg[0] = hz->peers_arg[0] = '\0';
	hz->drop_arg[0] = '\0';
	snprintf(hz->echo_arg, sizeof(hz->echo_arg), "%s",
		 hz->echo[0] ? hz->echo : "-");
	if (mode == LEAD_RESIGN)
		return;
	if (mode == LEAD_LOOK) {
		/* used only if this look finds another daemon leading a
		 * Redis that went back (the leadership function) */
		ms = bound_ms(st, &why);
		if (ms)
			snprintf(
				hz->hold_arg, sizeof(hz->hold_arg),
				"%s %llu %llu a standby saw Redis go back under a new active: %s",
				st->lead.instance,
				(unsigned long long)++hz->closes,
				(unsigned long long)ms, why);
		return;
	}
	if (seen->v.closed > now)
		snprintf(hz->keep_arg, sizeof(hz->keep_arg), "%s %llu %llu %s",
			 st->lead.instance, (unsigned long long)++hz->closes,
			 (unsigned long long)(seen->v.closed - now),
			 seen->v.why);
	if (mode == LEAD_TAKE || mode == LEAD_START) {
		ms = bound_ms(st, &why);
		if (ms)
			snprintf(hz->hold_arg, sizeof(hz->hold_arg),
				 "%s %llu %llu Redis went back: %s",
				 st->lead.instance,
				 (unsigned long long)++hz->closes,
				 (unsigned long long)ms, why);
		if (dl__attest_bound(st) || dl__attest_blind(st))
			bounded_args(st);
		if (hz->unsure && !st->lead.active)
			unsure_args(st);
		return;
	}
	/* a renewal: the raise in making, the standbys no longer counted */
	if (hz->pend_n && !hz->pend_acked) {
		snprintf(hz->raise_arg, sizeof(hz->raise_arg), "%s %llu %llu",
			 st->lead.instance, (unsigned long long)hz->pend_n,
			 (unsigned long long)(hz->pend_until > now
						      ? hz->pend_until - now
						      : 0));
		hz->sent_n = hz->pend_n;
	}
	for (i = 0;
	     i < hz->nsby && n + DL_NODE_ID_MAX + 2 < sizeof(hz->drop_arg); i++)
		if (hz->sby[i].dropped)
			n += (size_t)snprintf(hz->drop_arg + n,
					      sizeof(hz->drop_arg) - n, "%s%s",
					      n ? " " : "", hz->sby[i].inst);
	if (hz->own_field && n + DL_NODE_ID_MAX + 2 < sizeof(hz->drop_arg))
		snprintf(hz->drop_arg + n, sizeof(hz->drop_arg) - n, "%s%s",
			 n ? " " : "", st->lead.node);
}

/* A standby's look read P standbys (`a`): the other standbys, each with
 * its looks and when this node saw that count move (first seen: now). */
static void read_peers(struct dl_store *st, const redisReply *a, uint64_t now)
{
	struct store_horizon *hz = &st->hz;
	struct hz_peer was[DL_STANDBYS_MAX];
	unsigned nwas = hz->npeers, i;
	uint64_t count;
	const char *v, *sp;
	size_t j;

	memcpy(was, hz->peers, sizeof(was));
	hz->npeers = 0;
	for (j = 0; a->type == REDIS_REPLY_ARRAY && j + 1 < a->elements;
	     j += 2) {
		struct hz_peer *p;

		if (a->element[j]->type != REDIS_REPLY_STRING ||
		    a->element[j]->len > DL_NODE_ID_MAX ||
		    strcmp(a->element[j]->str, st->lead.node) == 0 ||
		    hz->npeers == DL_STANDBYS_MAX)
			continue;
		v = str_of(a->element[j + 1]);
		if (!(sp = strrchr(v, ' ')) ||
		    dl_parse_u64(sp + 1, strlen(sp + 1), &count))
			count = UINT64_MAX; /* unreadable: a look each time */
		p = &hz->peers[hz->npeers++];
		snprintf(p->inst, sizeof(p->inst), "%s", a->element[j]->str);
		p->count = count;
		p->changed = now;
		for (i = 0; i < nwas; i++)
			if (strcmp(was[i].inst, p->inst) == 0 &&
			    was[i].count == count && count != UINT64_MAX)
				p->changed = was[i].changed;
	}
}

/* A value of P horizon or P closed not counted before: its end from now
 * (it was written earlier: that can only count too long). */
static int count_value(char *last, size_t lastlen, const redisReply *e,
		       uint64_t *end, char inst[17], uint64_t *n,
		       const char **why)
{
	uint64_t ms;

	if (e->type != REDIS_REPLY_STRING || e->len == 0 ||
	    (strlen(last) == e->len && memcmp(last, e->str, e->len) == 0))
		return 0;
	if (parse_value(e->str, e->len, inst, n, &ms, why) != 0)
		return 0;
	snprintf(last, lastlen, "%.*s", (int)e->len, e->str);
	*end = dl_mono_ms() + ms;
	return 1;
}

void dl__hz_reply(struct dl_store *st, int mode, const redisReply *r,
		  uint64_t sent_ms, int ok)
{
	struct store_horizon *hz = &st->hz;
	struct dl_seen *seen = &st->lead.seen;
	uint64_t end, n, now = dl_mono_ms();
	const redisReply *a = r->element[8];
	char inst[17];
	const char *why;
	int behind = r->element[5]->integer == 1, was, raised;
	size_t j;

	if (count_value(hz->closed_value, sizeof(hz->closed_value),
			r->element[4], &end, inst, &n, &why)) {
		dl_seen_note_closed(seen, end, why);
		/* the active: a closure it did not make is a standby's
		 * report that this daemon took a Redis that had lost what the
		 * standby saw: its table came from there, and is loaded again
		 * (store.c report_wait), with grants closed */
		if (st->lead.active && mode == LEAD_RENEW && end > now &&
		    strcmp(inst, st->lead.instance) != 0) {
			hz->report_found = 1;
			st->hooks.closed(end - now, seen->v.why, st->hooks.ctx);
		}
	}
	/* a take: what it finds of the horizon too (a closure in force is
	 * kept until then, dl__hz_took) -- counted even if this daemon never
	 * looked, and from now: too long at most */
	if ((mode == LEAD_TAKE || mode == LEAD_START) && ok) {
		char last[DL_HZ_VALUE_MAX] = "";

		if (count_value(last, sizeof(last), r->element[7], &end, inst,
				&n, NULL))
			dl_seen_note_horizon(seen, end);
	}
	if (mode == LEAD_LOOK) {
		if (count_value(hz->value, sizeof(hz->value), r->element[7],
				&end, inst, &n, NULL)) {
			dl_seen_note_horizon(seen, end);
			snprintf(hz->echo, sizeof(hz->echo), "%s:%llu", inst,
				 (unsigned long long)n);
			hz->relook = 1; /* pass it back at once */
		}
		/* counted, and looking without a gap the active would drop
		 * it for (module comment) */
		was = hz->registered && hz->prev_send &&
		      now - hz->prev_send < st->cfg->leader_lease_ms;
		hz->registered = 0;
		read_peers(st, a, now);
		for (j = 0; a->type == REDIS_REPLY_ARRAY && j < a->elements;
		     j += 2)
			if (a->element[j]->type == REDIS_REPLY_STRING &&
			    strcmp(a->element[j]->str, st->lead.node) == 0)
				hz->registered = 1;
		if (behind && !hz->loss_latched) {
			hz->loss_latched = 1;
			hz->loss_provable = was;
		} else if (!behind) {
			hz->loss_latched = 0;
		}
		/* what its answers may vouch for (dl__hz_vouches): counted by
		 * an active it saw lead, with no gap since -- a gap lets the
		 * active tell leases past what it knows, and a horizon read
		 * after one may be of a Redis that went back (found from
		 * outside: a standby paused past the active's count answered
		 * a restart round "known 0", and x was granted again 4 s
		 * into a 40 s lease) */
		if (!(hz->prev_send &&
		      now - hz->prev_send < st->cfg->leader_lease_ms) ||
		    (hz->loss_latched && !hz->loss_provable)) {
			/* counted before: it knows it may have missed some */
			hz->missed |= hz->vouches;
			hz->vouches = 0;
		} else if (hz->registered &&
			   r->element[1]->type == REDIS_REPLY_STRING &&
			   r->element[1]->len > 0) {
			hz->vouches = 1;
			hz->missed = 0;
		}
		hz->prev_send = sent_ms;
		return;
	}
	if (mode != LEAD_RENEW || !ok || !st->lead.active)
		return;
	raised = hz->sent_n && hz->sent_n == hz->pend_n;
	if (raised)
		hz->pend_acked = 1;
	hz->sent_n = 0;
	read_standbys(st, a, raised);
	if (hz->report_until)
		hz->report_reads++;
	progress(st);
}

int dl__hz_reports_in(const struct dl_store *st)
{
	const struct store_horizon *hz = &st->hz;
	unsigned i;

	if (!hz->report_reads)
		return 0;
	for (i = 0; i < hz->nsby; i++)
		if (!hz->sby[i].reported)
			return 0;
	return 1;
}

void dl__hz_link_lost(struct dl_store *st)
{
	struct store_horizon *hz = &st->hz;

	/* A new link may reach a Redis that forgot (or another primary):
	 * the next commit makes a raise that every standby counted then
	 * must know. */
	hz->sent_n = 0;
	hz->pend_acked = 0;
	hz->usable = 0;
}

void dl__hz_role(struct dl_store *st, int active)
{
	struct store_horizon *hz = &st->hz;
	uint64_t now = dl_mono_ms();
	unsigned i;

	if (active)
		sure(st); /* its take closed for it (unsure_args) */
	hz->usable = hz->reserved = 0;
	hz->pend_n = hz->sent_n = 0;
	hz->pend_acked = 0;
	hz->pending = 0;
	hz->report_until = 0;
	hz->report_found = 0;
	hz->report_reads = 0;
	hz->nsby = 0;
	/* A new active knows the standbys from P standbys, which a Redis
	 * that went back may lack: it starts with those its own looks saw
	 * (each then waited for until it looks or is dropped) */
	for (i = 0; active && i < hz->npeers; i++) {
		struct hz_standby *s = &hz->sby[hz->nsby++];

		memset(s, 0, sizeof(*s));
		memcpy(s->inst, hz->peers[i].inst, sizeof(s->inst));
		/* as long as this node has seen it not look (a Redis that
		 * went back shows another count: that counts as a look) */
		s->changed = hz->peers[i].changed;
		s->count = hz->peers[i].count;
	}
	hz->own_field = 0;
	(void)now;
	hz->npeers = 0;
	hz->prev_send = 0;
	hz->loss_latched = hz->loss_provable = 0;
	hz->registered = 0;
}

void dl__hz_took(struct dl_store *st, int kept)
{
	struct dl_seen *seen = &st->lead.seen;
	uint64_t now = dl_mono_ms(), h = seen->v.horizon;

	if (kept || seen->v.closed <= now)
		return;
	if (dl_locktab_horizon(st->tab) > h)
		h = dl_locktab_horizon(st->tab);
#ifdef DL_PLANT_SHORT_CLOSE
	/* the planted bug of bound_ms, here too: this extension would
	 * otherwise hide it from the fault campaign's self-test */
	h = h > now ? now + (h - now) / 10 : now;
#endif
	if (h > seen->v.closed)
		dl_seen_note_closed(
			seen, h,
			"a take while grants were closed, without the table: "
			"until the lease horizon (leases reclaimed meanwhile)");
}

uint64_t dl__hz_closure_left(struct dl_store *st)
{
	struct dl_seen *seen = &st->lead.seen;
	uint64_t now = dl_mono_ms();

	if (seen->v.closed <= now)
		return 0;
	(void)dl_seen_save(seen, now, 0); /* a new one: at once, fsynced */
	return seen->v.closed - now;
}
