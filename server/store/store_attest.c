/* SPDX-License-Identifier: MIT */
/*
 * store_attest.c -- an active whose leadership lapsed asks its peers
 * whether anyone led meanwhile, so that it may keep its table.
 *
 * Why. An active cut off from Redis for longer than its lease (Redis
 * restarting, down, or across a partition) cannot know on its own
 * whether a standby took over while it was away, granted, and had that
 * take lost with Redis (an older copy, a FLUSHALL): the fence and the
 * record Redis shows may then be its own again. So its take drops its
 * table and, if Redis went back, closes grants for as long as it can
 * bound (max_ttl, a day with the shipped configuration, when nothing else
 * bounds it). Yet in the common case nobody led: every other daemon was
 * cut off from the same Redis too. The daemons that could have led are
 * known to the operator: `[cluster] peers` names them, on every node.
 *
 * The round. The lapsed active writes its challenge, HSET P challenge
 * <node> "<nonce> <epoch> <instance>" (a fresh random nonce, the epoch it
 * last held, its process's instance; the hash lives DL_STANDBY_REPORT_MS
 * plus one leader_lease), then reads P answers every DL_ATTEST_POLL_MS
 * for DL_STANDBY_REPORT_MS at most. Every node answers every challenge of
 * another that stands, HSET P answers "<nonce>:<node>" "<instance>
 * <epoch> <took> <bound> <age>", from what this process saw and told
 * itself -- a standby in each look (the leadership function,
 * store_lead.c), another lapsed active in its own round (two actives,
 * when one was paused past a take-over):
 *
 *   instance, epoch  the last leadership record of another process it
 *          saw in a look, on a Redis that had not gone back;
 *   took   1 if this process ever took the leadership: the order in
 *          which it saw things is not the order in which they happened
 *          when Redis came back from two different copies in turn, so a
 *          process that led never vouches;
 *   bound, age  ms until the latest lease this process told (or a
 *          closure it knows) ends, and ms since it started (bounds()).
 *
 * A peer vouches when it names the challenger's own instance and epoch
 * and its process never led: the last leader it saw was the challenger,
 * in the challenged term, and it led nothing itself. Numbers alone
 * cannot say it: once Redis went back, epochs are handed out again from
 * the restored fence, so a take made after the challenger's lapse may
 * carry a smaller epoch than the challenger's (found from outside: a
 * restarted peer vouched "took 4 < 5" for a take of its previous run at
 * 7, and the challenger kept a table it granted over). And a peer's
 * memory is only its process's: a restarted peer, which cannot have seen
 * the challenger hold the challenged epoch (its leadership lapsed), never
 * vouches -- its previous run may have led.
 *
 * When every peer vouches, the take presents the nonce (`proof`), and the
 * function counts it as held only while that very challenge still stands:
 * every take deletes the challenges, so one made by anyone since the
 * answers -- a peer restarted meanwhile, which takes at start without
 * looking -- voids the proof, and so does a Redis that went back again
 * and lost the challenge. The table is then kept and written back,
 * clients and all, as a standalone daemon's is. Any refusal, an answer to
 * this round from a node that peers does not name (a daemon the operator
 * forgot: it may have led), or silence past the wait, and the take goes
 * on as before: the table is dropped, grants closed for what can be
 * bounded.
 *
 * A peer that does not vouch may still bound (ATTEST_BOUNDED): when every
 * peer answered, each vouching or with a process older than the lapse,
 * every lease told since the lapse ends by the latest of their bounds.
 * The take then drops the table, presents the nonce, and closes grants
 * until that end (store_horizon.c bound_ms, bounded_args) -- even if
 * Redis holds all this daemon saw, since a peer's take may be what Redis
 * lost; a take since the answers voids the bound in the function, which
 * closes for max_ttl instead. Its tokens resume above the largest mark
 * the answers name. A round that bounds nothing (ATTEST_BLIND: a peer
 * silent, restarted since the lapse, or not named) closes for max_ttl,
 * behind or not, for the same reason.
 *
 * A node that answered a challenge takes no leadership (a standby's
 * take-over, a lapsed active's take) while it may still stand: for the
 * challenge's life and one more lease from each look or read that saw it
 * (dl__attest_defers; challenges() says why every answer, and which of two
 * lapsed actives defers). A take of it would void the proof, if Redis
 * keeps the void; the deferral lets the challenger's take come first, and
 * the challenger presents its nonce only within the challenge's life on
 * its own clock (valid_until), a lease before the deferrals end.
 *
 * What it assumes (docs/design.md, "The peers' attestation"): `peers`
 * lists every other daemon that can take the leadership of this keyspace,
 * and node ids are unique. A daemon it does not list that leads and loses
 * its take with Redis between two looks of every peer is not seen.
 *
 * Owns nothing but st->attest.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "server/clock.h"
#include "server/log.h"
#include "server/store/store_private.h"

int dl__attest_init(struct dl_store *st)
{
	struct store_attest *a = &st->attest;
	const char *p = st->cfg->peers ? st->cfg->peers : "";
	size_t n;

	a->npeers = 0;
	a->started_ms = dl_mono_ms();
	for (;;) {
		p += strspn(p, " ,\t");
		if (!*p)
			break;
		n = strcspn(p, " ,\t");
		if (a->npeers == DL_PEERS_MAX || n > DL_NODE_ID_MAX)
			return DL_EBADARG;
		memcpy(a->peers[a->npeers], p, n);
		a->peers[a->npeers++][n] = '\0';
		p += n;
	}
	return 0;
}

static uint64_t fence_epoch(const struct dl_store *st)
{
	return strtoull(st->fence, NULL, 10);
}

/* An answer "<instance> <epoch> <took>" vouches that nobody led after
 * the challenger's process `inst` held `epoch`: 1, or 0 and why. */
static int vouch(const char *who, const char *ans, const char *inst,
		 uint64_t epoch, char *why, size_t len)
{
	unsigned long long e;
	char i[24];
	int took;

	if (sscanf(ans, "%23s %llu %d", i, &e, &took) != 3) {
		snprintf(why, len, "%s answered what is not an answer", who);
		return 0;
	}
	if (strcmp(i, inst) != 0 || e != epoch) {
		snprintf(
			why, len,
			"%s last saw another leadership (%s at epoch %llu), or none, in this run",
			who, i, e);
		return 0;
	}
	if (took) {
		snprintf(why, len, "%s took the leadership since", who);
		return 0;
	}
	return 1;
}

/* An answer that does not vouch may still bound what its node told
 * while the challenger's leadership lapsed: its last two words say how
 * long the latest lease its process knows of may still be believed (its
 * own reservations, the horizons it read, a closure in force) and how
 * long that process has run. If it ran since before the lapse (since_ms:
 * no other node can have taken over before then), no earlier process of
 * that node can have led since, and every lease the node told since ends
 * by then. Both are durations, counted from the challenger's read (the
 * answer was written before: it can only count too long), so no clock of
 * another machine is compared with this one. 1 and *end, or 0 and why
 * (appended). Its last word, the largest token its process issued or saw,
 * goes into *mark: the take's tokens resume above it (a peer whose clock
 * ran 60 s ahead had issued tokens above this daemon's floor of clock
 * plus max_clock_skew: found from outside). */
static int bounds(const char *ans, uint64_t since_ms, uint64_t *end,
		  uint64_t *mark, char *why, size_t len)
{
	unsigned long long e, left, age, m;
	uint64_t now = dl_mono_ms(),
		 lapsed = now > since_ms ? now - since_ms : 0;
	size_t n = strlen(why);
	char i[24];
	int took;

	if (sscanf(ans, "%23s %llu %d %llu %llu %llu", i, &e, &took, &left,
		   &age, &m) != 6) {
		snprintf(why + n, len - n,
			 ", and its answer bounds nothing (an older version)");
		return 0;
	}
	if (age < lapsed) {
		snprintf(
			why + n, len - n,
			", and its process has run %llu ms, less than the %llu ms since this daemon's leadership may have lapsed: an earlier one may have led unseen",
			age, (unsigned long long)lapsed);
		return 0;
	}
	*end = now + left;
	*mark = m;
	return 1;
}

/* The node id (s, n) sorts before `id`. */
static int sorts_first(const char *s, size_t n, const char *id)
{
	size_t l = strlen(id);
	int c = memcmp(s, id, n < l ? n : l);

	return c < 0 || (c == 0 && n < l);
}

/* A field k, value e of P challenge: another node's challenge, "<nonce>
 * <epoch> <instance>"? 1 and its nonce, else 0. */
static int other_challenge(const struct dl_store *st, const redisReply *k,
			   const redisReply *e, char nonce[17])
{
	char v[80], inst[17];
	unsigned long long epoch;

	if (k->type != REDIS_REPLY_STRING || e->type != REDIS_REPLY_STRING ||
	    e->len >= sizeof(v) ||
	    (k->len == strlen(st->lead.node) &&
	     memcmp(k->str, st->lead.node, k->len) == 0))
		return 0;
	memcpy(v, e->str, e->len);
	v[e->len] = '\0';
	return sscanf(v, "%16s %llu %16s", nonce, &epoch, inst) == 3;
}

/* The challenges standing (HGETALL P challenge): arm the deferral for
 * each (below); with `answer`, also answer each (a lapsed active in its
 * round: a standby answers in its look). 0, or DL_EUNAVAILABLE (the link
 * is to be failed).
 *
 * A node that answered a challenge takes nothing while it may stand,
 * whatever it answered: a take of its after a bounding answer, lost with
 * Redis while the challenge and answers came back (a replica a moment
 * behind, promoted), let the challenger's proof stand, and its bound did
 * not cover what the take granted (found from outside: two holders). A
 * lapsed active in its own round defers only to a challenger whose node
 * id sorts first, so that of two lapsed actives one takes in time. */
static int challenges(struct dl_store *st, const redisReply *chs, int answer)
{
	struct store_attest *a = &st->attest;
	const char *argv[4];
	size_t lens[4], j;
	char nonce[17];
	int any = 0;

	if (!chs || chs->type != REDIS_REPLY_ARRAY)
		return 0;
	for (j = 0; j + 1 < chs->elements; j += 2) {
		const redisReply *k = chs->element[j], *e = chs->element[j + 1];

		if (!other_challenge(st, k, e, nonce))
			continue;
		if (a->round == ATTEST_NONE ||
		    sorts_first(k->str, k->len, st->lead.node))
			a->defer_until = dl_mono_ms() + DL_STANDBY_REPORT_MS +
					 2 * st->cfg->leader_lease_ms;
		if (!answer)
			continue;
		snprintf(a->field, sizeof(a->field), "%s:%s", nonce,
			 st->lead.node);
		argv[0] = "HSET";
		argv[1] = st->keys.answers;
		argv[2] = a->field;
		argv[3] = dl__attest_answer(st);
		for (int i = 0; i < 4; i++)
			lens[i] = strlen(argv[i]);
		if (redisAsyncCommandArgv(st->ac, NULL, NULL, 4, argv, lens) !=
		    REDIS_OK)
			return DL_EUNAVAILABLE;
		any = 1;
	}
	if (any) {
		argv[0] = "PEXPIRE";
		argv[1] = st->keys.answers;
		argv[2] = a->px_arg;
		for (int i = 0; i < 3; i++)
			lens[i] = strlen(argv[i]);
		if (redisAsyncCommandArgv(st->ac, NULL, NULL, 3, argv, lens) !=
		    REDIS_OK)
			return DL_EUNAVAILABLE;
	}
	return 0;
}

static void on_written(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;

	if (!reply || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if (dl__store_reply_error(reply))
		dl__link_fail(st, "challenge: not written");
}

int dl__attest_begin(struct dl_store *st)
{
	struct store_attest *a = &st->attest;
	const char *argv[4];
	size_t lens[4];
	uint64_t rnd, now = dl_mono_ms();
	int i;

	if (!st->lead.active || !a->npeers || !fence_epoch(st) ||
	    now < st->lead.leader.until_ms)
		return 0;
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		return 0; /* no proof without a nonce nobody can guess */
	snprintf(a->nonce, sizeof(a->nonce), "%016" PRIx64, rnd);
	a->epoch = fence_epoch(st);
	/* its leadership counted from its last renewal's send, less the
	 * margin (dl__lead_until): a whole lease before the end it counted
	 * is no later than that send, and nobody took over before it */
	a->since_ms =
		st->lead.leader.until_ms > st->cfg->leader_lease_ms
			? st->lead.leader.until_ms - st->cfg->leader_lease_ms
			: 0;
	a->bound_until = 0;
	a->peers_mark = 0;
	memcpy(a->instance, st->lead.instance, sizeof(a->instance));
	snprintf(a->set_arg, sizeof(a->set_arg), "%s %" PRIu64 " %s", a->nonce,
		 a->epoch, st->lead.instance);
	snprintf(a->px_arg, sizeof(a->px_arg), "%" PRIu64,
		 (uint64_t)DL_STANDBY_REPORT_MS + st->cfg->leader_lease_ms);
	argv[0] = "HSET";
	argv[1] = st->keys.challenge;
	argv[2] = st->lead.node;
	argv[3] = a->set_arg;
	for (i = 0; i < 4; i++)
		lens[i] = strlen(argv[i]);
	if (redisAsyncCommandArgv(st->ac, on_written, st, 4, argv, lens) !=
	    REDIS_OK)
		return 0;
	argv[0] = "PEXPIRE";
	argv[2] = a->px_arg;
	for (i = 0; i < 3; i++)
		lens[i] = strlen(argv[i]);
	if (redisAsyncCommandArgv(st->ac, on_written, st, 3, argv, lens) !=
	    REDIS_OK)
		return 0;
	a->round = ATTEST_ASKING;
	a->until_ms = now + DL_STANDBY_REPORT_MS;
	a->valid_until = now + DL_STANDBY_REPORT_MS + st->cfg->leader_lease_ms;
	a->poll_at = now + DL_ATTEST_POLL_MS;
	a->polling = 0;
	dl_notice(
		"redis: this daemon's leadership (epoch %" PRIu64
		") lapsed: asking its peers whether anyone led since, to keep its table",
		a->epoch);
	return 1;
}

static int is_peer(const struct store_attest *a, const char *s, size_t n)
{
	for (int i = 0; i < a->npeers; i++)
		if (strlen(a->peers[i]) == n && memcmp(a->peers[i], s, n) == 0)
			return 1;
	return 0;
}

/* Peer p's answer v: ATTEST_PROVED it vouches, ATTEST_BOUNDED it does
 * not but bounds what its node told (*end raised to its end), else
 * ATTEST_BLIND (why says so, in each of the last two). */
static enum attest_round judge(const struct store_attest *a, const char *peer,
			       const redisReply *v, uint64_t *end,
			       uint64_t *mark, char *why, size_t len)
{
	char buf[sizeof(a->answer)], who[8 + DL_NODE_ID_MAX];
	uint64_t e, m;

	snprintf(who, sizeof(who), "peer %s", peer);
	if (v->type != REDIS_REPLY_STRING || v->len >= sizeof(buf)) {
		snprintf(why, len, "%s answered what is not an answer", who);
		return ATTEST_BLIND;
	}
	memcpy(buf, v->str, v->len);
	buf[v->len] = '\0';
	if (vouch(who, buf, a->instance, a->epoch, why, len))
		return ATTEST_PROVED;
	if (!bounds(buf, a->since_ms, &e, &m, why, len))
		return ATTEST_BLIND;
	if (e > *end)
		*end = e;
	if (m > *mark)
		*mark = m;
	return ATTEST_BOUNDED;
}

/* The round's outcome (PROVED, BOUNDED with the end `end`, or BLIND):
 * the take now, or once no challenge this node vouched for may stand. */
static void decide(struct dl_store *st, enum attest_round how, uint64_t end,
		   const char *why)
{
	struct store_attest *a = &st->attest;
	uint64_t now = dl_mono_ms();

	a->round = how;
	if (how == ATTEST_PROVED) {
		st->st.attests_proved++;
		dl_notice(
			"redis: peers attest that nobody led since epoch %" PRIu64
			": taking the leadership again with the table kept",
			a->epoch);
	} else if (how == ATTEST_BOUNDED) {
		a->bound_until = end;
		st->st.attests_bounded++;
		/* tokens go on above the peers' (the load after the take
		 * resumes above the marks this daemon knows), unless the
		 * mark is implausible (dl__plausible's ceiling) */
		if (a->peers_mark <=
		    (dl_wall_ms() + DL_TOKEN_AHEAD_MAX_MS) * DL_TOKEN_PER_MS)
			dl_seen_note_mark(&st->lead.seen, a->peers_mark);
		dl_warn("redis: peers cannot attest that nobody led since epoch %" PRIu64
			": %s; but every lease they told ends within %" PRIu64
			" ms: taking the leadership without the table, grants closed no longer than that if Redis went back",
			a->epoch, why, end > now ? end - now : 0);
	} else {
		st->st.attests_failed++;
		dl_warn("redis: peers cannot attest that nobody led since epoch %" PRIu64
			": %s; taking the leadership without the table, grants closed for max_ttl even if Redis holds all this daemon saw (a peer may have led, and Redis lost that take)",
			a->epoch, why);
	}
}

/* Every peer's answer to this round in the HGETALL reply r (judge):
 * ATTEST_PROVED all vouch, ATTEST_BOUNDED all vouch or bound (*end the
 * latest end, why the first that did not vouch), ATTEST_BLIND one bounds
 * nothing (why), ATTEST_ASKING not all answered yet. */
static enum attest_round tally(const struct store_attest *a,
			       const redisReply *r, uint64_t *end,
			       uint64_t *mark, char *why, size_t len)
{
	size_t j, nl = strlen(a->nonce);
	enum attest_round v, all = ATTEST_PROVED;
	char w[256];
	int i, n = 0;

	if (r->type != REDIS_REPLY_ARRAY)
		return ATTEST_ASKING;
	for (i = 0; i < a->npeers; i++)
		for (j = 0; j + 1 < r->elements; j += 2) {
			const redisReply *k = r->element[j];

			if (k->type != REDIS_REPLY_STRING || k->len <= nl ||
			    memcmp(k->str, a->nonce, nl) != 0 ||
			    k->str[nl] != ':' ||
			    strcmp(k->str + nl + 1, a->peers[i]) != 0)
				continue;
			w[0] = '\0';
			v = judge(a, a->peers[i], r->element[j + 1], end, mark,
				  w, sizeof(w));
			if (v != ATTEST_PROVED && all == ATTEST_PROVED)
				snprintf(why, len, "%s", w);
			if (v == ATTEST_BLIND) {
				snprintf(why, len, "%s", w);
				return ATTEST_BLIND;
			}
			if (v == ATTEST_BOUNDED)
				all = ATTEST_BOUNDED;
			n++;
			break;
		}
	return n == a->npeers ? all : ATTEST_ASKING;
}

/* HGETALL P answers: fields "<nonce>:<node>". */
static void on_answers(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	struct store_attest *a = &st->attest;
	const redisReply *r = reply;
	char why[256] = "";
	size_t j, nl = strlen(a->nonce);
	enum attest_round v;
	uint64_t end = 0, mark = 0;

	if (!r || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	a->polling--;
	if (a->round != ATTEST_ASKING)
		return;
	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2) {
		dl__link_fail(st, "challenge: not an answer of HGETALL");
		return;
	}
	if ((v = tally(a, r, &end, &mark, why, sizeof(why))) == ATTEST_BLIND) {
		decide(st, ATTEST_BLIND, 0, why);
		return;
	}
	for (j = 0; j + 1 < r->elements; j += 2) {
		const redisReply *k = r->element[j];

		if (k->type == REDIS_REPLY_STRING && k->len > nl &&
		    memcmp(k->str, a->nonce, nl) == 0 && k->str[nl] == ':' &&
		    !is_peer(a, k->str + nl + 1, k->len - nl - 1)) {
			snprintf(
				why, sizeof(why),
				"node %.64s answered, and [cluster] peers does not name it (it may have led unseen: list every node)",
				k->str + nl + 1);
			decide(st, ATTEST_BLIND, 0, why);
			return;
		}
	}
	if (v == ATTEST_BOUNDED)
		a->peers_mark = mark;
	if (v != ATTEST_ASKING)
		decide(st, v, end, why);
}

/* HGETALL P challenge, in a round: the others' challenges, answered. */
static void on_challenges(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;

	if (!reply || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	st->attest.polling--;
	if (challenges(st, reply, 1))
		dl__link_fail(st, "cannot queue a command");
}

void dl__attest_tick(struct dl_store *st)
{
	struct store_attest *a = &st->attest;
	const char *argv[2] = {"HGETALL", NULL};
	size_t lens[2] = {7, 0};
	char why[160];
	uint64_t now = dl_mono_ms();
	int i;

	if (a->round == ATTEST_NONE || a->round == ATTEST_TAKING || !st->ac ||
	    a->polling)
		return;
	if (a->round == ATTEST_ASKING && now >= a->until_ms) {
		snprintf(why, sizeof(why), "no answer within %d ms from peer",
			 DL_STANDBY_REPORT_MS);
		for (i = 0; i < a->npeers; i++)
			snprintf(why + strlen(why), sizeof(why) - strlen(why),
				 "%s %s", i ? "," : "", a->peers[i]);
		snprintf(why + strlen(why), sizeof(why) - strlen(why),
			 " (or not from all)");
		decide(st, ATTEST_BLIND, 0, why);
	}
	if ((a->round == ATTEST_PROVED || a->round == ATTEST_BOUNDED) &&
	    now >= a->valid_until) {
		/* Past the challenge's life on this clock (this daemon was
		 * paused, or deferred to another's challenge): the peers that
		 * answered defer only that long, plus a lease, so one may have
		 * taken since, and a Redis that lost that take may still show
		 * the challenge (found from outside). */
		dl_warn("redis: the round for epoch %" PRIu64
			" outlived its challenge: taking as if no peer had answered",
			a->epoch);
		a->round = ATTEST_BLIND;
	}
	if (a->round == ATTEST_PROVED ||
	    ((a->round == ATTEST_BLIND || a->round == ATTEST_BOUNDED) &&
	     !dl__attest_defers(st))) {
		/* one take: a second, sent before the first's reply, would
		 * present a proof the first consumed, and drop the table */
		if (dl__store_take(st))
			dl__link_fail(st, "cannot queue a command");
		else
			a->round = ATTEST_TAKING;
		return;
	}
	if (now < a->poll_at)
		return;
	a->poll_at = now + DL_ATTEST_POLL_MS;
	argv[1] = st->keys.challenge;
	lens[1] = strlen(argv[1]);
	if (redisAsyncCommandArgv(st->ac, on_challenges, st, 2, argv, lens) !=
	    REDIS_OK) {
		dl__link_fail(st, "cannot queue a command");
		return;
	}
	a->polling++;
	if (a->round != ATTEST_ASKING)
		return; /* waiting out a challenge it vouched for */
	argv[1] = st->keys.answers;
	lens[1] = strlen(argv[1]);
	if (redisAsyncCommandArgv(st->ac, on_answers, st, 2, argv, lens) !=
	    REDIS_OK) {
		dl__link_fail(st, "cannot queue a command");
		return;
	}
	a->polling++;
}

void dl__attest_reset(struct dl_store *st)
{
	st->attest.round = ATTEST_NONE;
	st->attest.polling = 0;
}

const char *dl__attest_proof(const struct dl_store *st)
{
	return st->attest.round == ATTEST_PROVED ||
			       st->attest.round == ATTEST_BOUNDED ||
			       st->attest.round == ATTEST_BLIND
		       ? st->attest.nonce
		       : "";
}

int dl__attest_blind(const struct dl_store *st)
{
	return st->attest.round == ATTEST_BLIND;
}

uint64_t dl__attest_bound(const struct dl_store *st)
{
	return st->attest.round == ATTEST_BOUNDED ? st->attest.bound_until : 0;
}

/* The bound (bounds()): the latest end of a lease this process told or
 * knows unbounded -- its own reservations (store_horizon.c: no lease it
 * told ends later), its table's horizon, a closure in force -- in ms from
 * now, and how long this process has run. Not the horizons it read of
 * other processes: their leases are their nodes' to bound (every node
 * answers), and one 24 h lease among them would close every bounded
 * lapse for a day. Those come in the last word, `known`: the latest end
 * of any lease this node knows of -- the bound, the horizons its looks
 * read, and what its state file kept of an earlier process -- for a
 * restart round (dl__attest_restart): the restarted node knows nothing,
 * and a peer that answers and is then paused cannot report a loss
 * later (found from outside: a standby that watched alice's 40 s lease
 * answered 0, was paused, and x was granted again 7 s into it). */
static int own_known(const struct dl_store *st)
{
	return st->lead.seen.has_file ||
	       dl_mono_ms() - st->attest.started_ms >=
		       st->cfg->max_ttl_ms + DL_LOCK_DELAY_MAX_MS;
}

const char *dl__attest_answer(struct dl_store *st)
{
	struct store_attest *a = &st->attest;
	const struct dl_seen *seen = &st->lead.seen;
	uint64_t now = dl_mono_ms(), end = st->hz.reserved_max, mark, known;
	int n, v;

	if (seen->v.closed > end)
		end = seen->v.closed;
	if (dl_locktab_horizon(st->tab) > end)
		end = dl_locktab_horizon(st->tab);
	known = seen->v.horizon > end ? seen->v.horizon : end;
	mark = dl_locktab_last_token(st->tab);
	if (seen->v.mark > mark)
		mark = seen->v.mark;
	n = snprintf(a->answer, sizeof(a->answer),
		     "%s %" PRIu64 " %d %" PRIu64 " %" PRIu64 " %" PRIu64,
		     a->seen_inst[0] ? a->seen_inst : "-", a->seen_epoch,
		     a->took, end > now ? end - now : 0, now - a->started_ms,
		     mark);
	/* "-": it knows nothing; "?": it may have missed leases told
	 * (dl__hz_vouches) */
	v = dl__hz_vouches(st);
	if (n > 0 && (size_t)n < sizeof(a->answer) && v > 0)
		n += snprintf(a->answer + n, sizeof(a->answer) - (size_t)n,
			      " %" PRIu64, known > now ? known - now : 0);
	else if (n > 0 && (size_t)n < sizeof(a->answer))
		n += snprintf(a->answer + n, sizeof(a->answer) - (size_t)n,
			      " %s", v < 0 ? "?" : "-");
	/* `own`: the leases any process of this node told, when it knows
	 * them all -- its state file existed when it started (every lease
	 * is told after a reservation durable there), or it has run longer
	 * than any lease of an earlier process may last (own_known) */
	if (n > 0 && (size_t)n < sizeof(a->answer) && own_known(st))
		snprintf(a->answer + n, sizeof(a->answer) - (size_t)n,
			 " %" PRIu64, known > now ? known - now : 0);
	else if (n > 0 && (size_t)n < sizeof(a->answer))
		snprintf(a->answer + n, sizeof(a->answer) - (size_t)n, " -");
	return a->answer;
}

void dl__attest_saw(struct dl_store *st, const char *inst, uint64_t epoch)
{
	struct store_attest *a = &st->attest;

	if (!epoch || !inst[0])
		return;
	snprintf(a->seen_inst, sizeof(a->seen_inst), "%s", inst);
	a->seen_epoch = epoch;
	/* took stays: what this process sees after its own take need
	 * not have happened after it (found from outside: Redis restored
	 * from an older copy, this node took over and granted there, then
	 * from a newer one holding the challenger's record -- seen later,
	 * held earlier). A process that ever led never vouches. */
}

void dl__attest_took(struct dl_store *st)
{
	st->attest.took = 1;
}

void dl__attest_challenges(struct dl_store *st, const redisReply *chs)
{
	(void)challenges(st, chs, 0);
}

int dl__attest_defers(const struct dl_store *st)
{
	return dl_mono_ms() < st->attest.defer_until;
}

/* ---- the restart round ------------------------------------------------ */

/* The leadership record "<epoch> <node> <addr> <instance>" names another
 * node than this one (none: 0). */
static int led_by_another(const struct dl_store *st, const redisReply *r)
{
	size_t n = strlen(st->lead.node);
	const char *node;

	if (r->type != REDIS_REPLY_STRING ||
	    !(node = memchr(r->str, ' ', r->len)))
		return 0;
	node++;
	return (size_t)(r->str + r->len - node) <= n ||
	       memcmp(node, st->lead.node, n) != 0 || node[n] != ' ';
}

/* The others' challenges (HGETALL P challenge), answered from what this
 * process saw (nothing: it has just started, and so never vouches and,
 * being younger than any lapse, bounds nothing). 1 if one of a node that
 * sorts first stands: this node defers to it (challenges()). */
static int restart_answers(struct load_ctx *x, const redisReply *chs, int *rc)
{
	struct dl_store *st = x->st;
	struct store_attest *a = &st->attest;
	char nonce[17];
	int first = 0;
	redisReply *r;
	size_t j;

	for (j = 0; chs->type == REDIS_REPLY_ARRAY && j + 1 < chs->elements;
	     j += 2) {
		const redisReply *k = chs->element[j], *e = chs->element[j + 1];

		if (!other_challenge(st, k, e, nonce))
			continue;
		snprintf(a->field, sizeof(a->field), "%s:%s", nonce,
			 st->lead.node);
		if (!(r = DL__LOAD_RUN(x, rc, 0, "HSET", st->keys.answers,
				       a->field, dl__attest_answer(st))))
			return -1;
		freeReplyObject(r);
		if (!(r = DL__LOAD_RUN(x, rc, 0, "PEXPIRE", st->keys.answers,
				       a->px_arg)))
			return -1;
		freeReplyObject(r);
		if (sorts_first(k->str, k->len, st->lead.node)) {
			a->defer_until = dl_mono_ms() + DL_STANDBY_REPORT_MS +
					 2 * st->cfg->leader_lease_ms;
			first = 1;
		}
	}
	return first;
}

/* The peers' answers to this restart's challenge (HGETALL P answers):
 * 1 when every peer answered, with *end the latest end of a lease they
 * know of (`known`, dl__attest_answer: what they told, read in their
 * looks, or kept in their state files) and *mark their largest token; 0
 * not yet; -1 an answer that bounds nothing (an older version), in
 * why. A restart whose own state file existed (`own_file`: the leases of
 * its node's earlier processes end by its horizon) needs of each peer
 * only what its own node told (`own`, the 8th word): a whole cluster
 * restarted after a power cut, every peer just started and so knowing
 * nothing it looked at, bounds its closure so (it closed for max_ttl:
 * 24 h with the shipped configuration).
 *
 * A restart without a state file has no such bound for its own node: an
 * earlier process of it may have led and told leases that only a peer's
 * looks knew of. So a peer that answers `known` "-" while its `own` shows
 * that the cluster ran before (its node kept a state file, or it ran long)
 * leaves the start nothing to bound its own node's leases with: -2, in
 * why (found from outside: a whole cluster cut off its power, Redis back
 * without alice's lease, one node's state_dir emptied; that node took
 * first, knowing nothing, and x was granted again 1.9-5 s into her 40 s
 * lease, 10 runs of 16). *mark is the largest token of every answer. */
static int restart_tally(const struct store_attest *a, const redisReply *r,
			 int own_file, uint64_t max_ms, uint64_t *end,
			 uint64_t *mark, char *why, size_t len)
{
	size_t j, nl = strlen(a->nonce);
	unsigned long long e, left, age, m, known;
	char i[24], kw[24], ow[24], buf[sizeof(a->answer)];
	int p, n = 0, took, words, own, ran = 0, blank = 0;

	for (p = 0; p < a->npeers; p++)
		for (j = 0; r->type == REDIS_REPLY_ARRAY && j + 1 < r->elements;
		     j += 2) {
			const redisReply *k = r->element[j],
					 *v = r->element[j + 1];

			if (k->type != REDIS_REPLY_STRING || k->len <= nl ||
			    memcmp(k->str, a->nonce, nl) != 0 ||
			    k->str[nl] != ':' ||
			    strcmp(k->str + nl + 1, a->peers[p]) != 0)
				continue;
			if (v->type != REDIS_REPLY_STRING ||
			    v->len >= sizeof(buf))
				goto nothing;
			memcpy(buf, v->str, v->len);
			buf[v->len] = '\0';
			words = sscanf(buf,
				       "%23s %llu %d %llu %llu %llu %23s %23s",
				       i, &e, &took, &left, &age, &m, kw, ow);
			if (words < 7)
				goto nothing;
			if (m > *mark)
				*mark = m;
			own = words == 8 && ow[0] >= '0' && ow[0] <= '9';
			ran |= own;
			n++;
			if (own_file && own) {
				known = strtoull(ow, NULL, 10);
			} else if (strcmp(kw, "-") == 0) {
				if (!blank)
					snprintf(
						why, len,
						"peer %s knows nothing of the leases told (it has not looked since it started)",
						a->peers[p]);
				if (own_file)
					return -1;
				blank = 1;
				break;
			} else {
				/* "?": a standby that was counted, then had a
				 * gap in its looks: leases may have been told
				 * that nobody alive knows of (found from
				 * outside: x granted again 4 s into a 40 s
				 * lease told while it was paused) */
				known = strcmp(kw, "?") == 0
						? max_ms
						: strtoull(kw, NULL, 10);
			}
			if (dl_mono_ms() + known > *end)
				*end = dl_mono_ms() + known;
			break;
		nothing:
			snprintf(
				why, len,
				"peer %s's answer bounds nothing (an older version?)",
				a->peers[p]);
			return -1;
		}
	/* a start without its file waits for every answer: a later one
	 * may show that the cluster ran before */
	if (blank)
		return ran ? -2 : n == a->npeers ? -1 : 0;
	return n == a->npeers;
}

static int restart_done(struct load_ctx *x, int rc)
{
	struct dl_store *st = x->st;
	redisReply *r;
	int rc2 = 0;

	/* the take deletes it; a start that does not take leaves nobody
	 * deferring to it */
	if (st->attest.round == ATTEST_NONE &&
	    (r = DL__LOAD_RUN(x, &rc2, 0, "HDEL", st->keys.challenge,
			      st->lead.node)))
		freeReplyObject(r);
	return rc;
}

/* The restart's challenge, written: 0, 1 if no nonce could be drawn (no
 * round), or an error of the connection. */
static int restart_ask(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	struct store_attest *a = &st->attest;
	redisReply *r;
	uint64_t rnd;
	int rc = 0;

	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		return 1;
	snprintf(a->nonce, sizeof(a->nonce), "%016" PRIx64, rnd);
	memcpy(a->instance, st->lead.instance, sizeof(a->instance));
	a->epoch = 0;
	snprintf(a->set_arg, sizeof(a->set_arg), "%s 0 %s", a->nonce,
		 st->lead.instance);
	snprintf(a->px_arg, sizeof(a->px_arg), "%" PRIu64,
		 (uint64_t)DL_STANDBY_REPORT_MS + st->cfg->leader_lease_ms);
	if (!(r = DL__LOAD_RUN(x, &rc, 0, "HSET", st->keys.challenge,
			       st->lead.node, a->set_arg)))
		return rc;
	freeReplyObject(r);
	if (!(r = DL__LOAD_RUN(x, &rc, 0, "PEXPIRE", st->keys.challenge,
			       a->px_arg)))
		return restart_done(x, rc);
	freeReplyObject(r);
	a->until_ms = dl_mono_ms() + DL_STANDBY_REPORT_MS;
	return 0;
}

enum restart_read {
	READ_WAIT,    /* not every peer answered yet */
	READ_BOUNDED, /* every peer answered: *end, *mark */
	READ_NOTHING, /* an answer bounds nothing, or silence past the wait */
	READ_BLIND,   /* no state file, the cluster ran before, and Redis
		       * restarted since the last take: nothing bounds what
		       * this node's earlier processes told */
	READ_KEPT,    /* no state file, on the Redis process of the last
		       * take: nothing told since was lost */
	READ_AWAIT,   /* no state file, Redis restarted since the last
		       * take, and a peer silent: try again */
	READ_LEADS,   /* another node took meanwhile */
	READ_DEFER,   /* a lapsed peer that sorts first asks */
	READ_FAILED,  /* the connection: *rc */
};

enum since_take {
	SINCE_FAILED,	 /* the connection: *rc */
	SINCE_KEPT,	 /* Redis is the process the last take was made on */
	SINCE_UNLED,	 /* nobody ever led this keyspace (or it was flushed) */
	SINCE_RESTARTED, /* another process, or no take recorded */
};

/* What became of Redis since the last take, for a start without its
 * state file. P run is the process every take was made on, written once
 * its table or closure is whole there: when it names this connection's
 * process (its run_id and replication id, which change with a restart, a
 * promotion or a resync), Redis lost nothing told since, and its
 * leases and closures are there to load. A FLUSHALL takes P run with it,
 * and P fence, which every take raises. */
static enum since_take since_take(struct load_ctx *x, int *rc)
{
	struct dl_store *st = x->st;
	redisReply *r;
	char v[17];
	int same, led;

	if (!(r = DL__LOAD_RUN(x, rc, 0, "GET", st->keys.run)))
		return SINCE_FAILED;
	dl__hz_run_value(st, v);
	same = st->hz.run && r->type == REDIS_REPLY_STRING && r->len == 16 &&
	       memcmp(r->str, v, 16) == 0;
	freeReplyObject(r);
	if (same)
		return SINCE_KEPT;
	if (!(r = DL__LOAD_RUN(x, rc, 0, "GET", st->keys.fence)))
		return SINCE_FAILED;
	led = r->type == REDIS_REPLY_STRING;
	freeReplyObject(r);
	return led ? SINCE_RESTARTED : SINCE_UNLED;
}

/* A start without its state file, in a cluster that ran before
 * (restart_tally's -2): READ_KEPT on the Redis process of the last take,
 * else READ_BLIND. */
static enum restart_read restart_ran(struct load_ctx *x, int *rc)
{
	switch (since_take(x, rc)) {
	case SINCE_FAILED:
		return READ_FAILED;
	case SINCE_KEPT:
		return READ_KEPT;
	default:
		return READ_BLIND;
	}
}

/* Not every peer answered within the wait. A start with its state file,
 * or on a keyspace nobody led (a cluster's first start, one node after
 * the other), goes on as a start that proves nothing: READ_NOTHING. One
 * without, on the Redis process of the last take, lost nothing:
 * READ_KEPT. One without, on a Redis that restarted since, cannot know
 * what its own node's earlier process told, nor what the silent peer
 * did: it tries again for DL_RESTART_AWAIT_MS (READ_AWAIT), then takes
 * with grants closed for max_ttl (READ_BLIND). Found by a test: a lapsed
 * active slow to reconnect to the restarted Redis answered after the
 * start's 2 s, and the start, emptied, granted x again in alice's
 * lease. */
static enum restart_read restart_silent(struct load_ctx *x, char *why,
					size_t len, int *rc)
{
	struct dl_store *st = x->st;
	uint64_t now = dl_mono_ms();
	size_t n = strlen(why);

	if (st->lead.seen.has_file)
		return READ_NOTHING;
	switch (since_take(x, rc)) {
	case SINCE_FAILED:
		return READ_FAILED;
	case SINCE_KEPT:
		return READ_KEPT;
	case SINCE_UNLED:
		return READ_NOTHING;
	default:
		break;
	}
	if (!st->attest.await_since)
		st->attest.await_since = now;
	if (now - st->attest.await_since < DL_RESTART_AWAIT_MS)
		return READ_AWAIT;
	snprintf(why + n, len - n, " in %d s of tries",
		 DL_RESTART_AWAIT_MS / 1000);
	return READ_BLIND;
}

/* One read of the round: the others' challenges (answered), the
 * leadership, the answers. */
static enum restart_read restart_read(struct load_ctx *x, uint64_t *end,
				      uint64_t *mark, char *why, size_t len,
				      int *rc)
{
	struct dl_store *st = x->st;
	redisReply *r;
	int v;

	if (!(r = DL__LOAD_RUN(x, rc, 0, "HGETALL", st->keys.challenge)))
		return READ_FAILED;
	v = restart_answers(x, r, rc);
	freeReplyObject(r);
	if (v)
		return v < 0 ? READ_FAILED : READ_DEFER;
	if (!(r = DL__LOAD_RUN(x, rc, 0, "GET", st->keys.leader)))
		return READ_FAILED;
	v = led_by_another(st, r);
	freeReplyObject(r);
	if (v)
		return READ_LEADS;
	if (!(r = DL__LOAD_RUN(x, rc, 0, "HGETALL", st->keys.answers)))
		return READ_FAILED;
	*end = *mark = 0;
	v = restart_tally(&st->attest, r, st->lead.seen.has_file,
			  st->cfg->max_ttl_ms + DL_LOCK_DELAY_MAX_MS, end, mark,
			  why, len);
	freeReplyObject(r);
	if (v == -2)
		return restart_ran(x, rc);
	if (v)
		return v < 0 ? READ_NOTHING : READ_BOUNDED;
	if (dl_mono_ms() < st->attest.until_ms)
		return READ_WAIT;
	snprintf(why, len, "not every peer answered within %d ms",
		 DL_STANDBY_REPORT_MS);
	return restart_silent(x, why, len, rc);
}

/* Every peer answered: the take presents the nonce for the bound. */
static void restart_bounded(struct dl_store *st, uint64_t end, uint64_t mark)
{
	struct store_attest *a = &st->attest;
	uint64_t now = dl_mono_ms();

	/* and what this node told itself, by its state file: the peers'
	 * `own` is theirs alone (found from outside: every peer's 0, and
	 * x was granted again 4.4-5.2 s into a 20 s lease this node had told
	 * just before the power cut, its file a write behind Redis) */
	if (st->lead.seen.v.horizon > end)
		end = st->lead.seen.v.horizon;
	if (dl_locktab_horizon(st->tab) > end)
		end = dl_locktab_horizon(st->tab);
	a->round = ATTEST_BOUNDED;
	a->bound_until = end;
	a->peers_mark = mark;
	st->st.attests_bounded++;
	if (mark <= (dl_wall_ms() + DL_TOKEN_AHEAD_MAX_MS) * DL_TOKEN_PER_MS)
		dl_seen_note_mark(&st->lead.seen, mark);
	if (end > now)
		dl_notice(
			"redis: every peer answered; the leases they and this node's state file know of end within %" PRIu64
			" ms: taking the leadership, grants closed until then (Redis may have lost them)",
			end - now);
	else
		dl_notice(
			"redis: every peer answered, and none knows of a lease that may still be believed: taking the leadership");
}

int dl__attest_restart(struct load_ctx *x)
{
	struct dl_store *st = x->st;
	struct store_attest *a = &st->attest;
	struct timespec nap = {0, DL_ATTEST_POLL_MS * 1000000L};
	uint64_t end = 0, mark = 0, now = dl_mono_ms();
	enum restart_read v;
	char why[256] = "";
	redisReply *r;
	int rc = 0, other;

	a->round = ATTEST_NONE;
	/* a process that took already is not starting: a load again after
	 * a loss (store.c, DL_STORE_STALE) goes on as before */
	if (!a->npeers || !st->cfg->node_id[0] || a->took ||
	    dl__hz_file_proves(st))
		return 0;
	if (!(r = DL__LOAD_RUN(x, &rc, 0, "GET", st->keys.leader)))
		return rc;
	other = led_by_another(st, r);
	freeReplyObject(r);
	if (other)
		return 0; /* the take finds it held: this daemon is a standby */
	if (now < a->defer_until)
		return dl__load_err(
			x, DL_EUNAVAILABLE,
			"a lapsed peer asks whether anyone led: letting it take first (%llu ms more at most)",
			(unsigned long long)(a->defer_until - now));
	if ((rc = restart_ask(x)) != 0)
		return rc < 0 ? rc : 0;
	dl_notice(
		"redis: nobody leads, and this start cannot prove what was told before it: asking its peers what they told");
	while ((v = restart_read(x, &end, &mark, why, sizeof(why), &rc)) ==
	       READ_WAIT)
		nanosleep(&nap, NULL);
	if (v != READ_AWAIT && v != READ_FAILED)
		a->await_since = 0;
	switch (v) {
	case READ_BOUNDED:
		restart_bounded(st, end, mark);
		return 0;
	case READ_BLIND:
		a->round = ATTEST_BLIND;
		st->st.attests_failed++;
		if (mark <=
		    (dl_wall_ms() + DL_TOKEN_AHEAD_MAX_MS) * DL_TOKEN_PER_MS)
			dl_seen_note_mark(&st->lead.seen, mark);
		dl_warn("redis: this daemon has no state file, Redis is not the process the last take was made on (it may lack writes), and %s: nothing bounds the leases an earlier process of this node told: taking the leadership, grants closed for max_ttl (keep each node's state_dir; start a replaced node while its peers run)",
			why);
		return 0;
	case READ_AWAIT:
		return restart_done(
			x,
			dl__load_err(
				x, DL_EUNAVAILABLE,
				"this daemon has no state file and Redis restarted since the last take: only its peers know what this node told before, and %s; asking again (for %llu s more at most, then grants close for max_ttl)",
				why,
				(unsigned long long)(a->await_since +
						     DL_RESTART_AWAIT_MS -
						     dl_mono_ms()) /
					1000));
	case READ_KEPT:
		dl_notice(
			"redis: this daemon has no state file, but Redis is the process the last take was made on: it lost nothing told since; taking the leadership");
		return restart_done(x, 0);
	case READ_NOTHING:
		/* as before the round: a loss only a silent peer saw is not
		 * known (docs/design.md) */
		dl_warn("redis: %s: taking as a start that proves nothing (a loss that peer saw is not known)",
			why);
		return restart_done(x, 0);
	case READ_DEFER:
		return restart_done(
			x,
			dl__load_err(
				x, DL_EUNAVAILABLE,
				"a lapsed peer whose node id sorts first asks whether anyone led: letting it take first"));
	case READ_LEADS:
		return restart_done(x, 0);
	default:
		return restart_done(x, rc);
	}
}
