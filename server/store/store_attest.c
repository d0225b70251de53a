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
int dl__attest_sorts_first(const char *s, size_t n, const char *id)
{
	size_t l = strlen(id);
	int c = memcmp(s, id, n < l ? n : l);

	return c < 0 || (c == 0 && n < l);
}

/* A field k, value e of P challenge: another node's challenge, "<nonce>
 * <epoch> <instance>"? 1 and its nonce, else 0. */
int dl__attest_other_challenge(const struct dl_store *st, const redisReply *k,
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

		if (!dl__attest_other_challenge(st, k, e, nonce))
			continue;
		if (a->round == ATTEST_NONE ||
		    dl__attest_sorts_first(k->str, k->len, st->lead.node))
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
 * restart round (store_restart.c): the restarted node knows nothing,
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
		n += snprintf(a->answer + n, sizeof(a->answer) - (size_t)n,
			      " %" PRIu64, known > now ? known - now : 0);
	else if (n > 0 && (size_t)n < sizeof(a->answer))
		n += snprintf(a->answer + n, sizeof(a->answer) - (size_t)n,
			      " -");
	/* `cluster`: the id this node knows ("-": none), for a start that
	 * finds Redis without one (store_restart.c) */
	if (n > 0 && (size_t)n < sizeof(a->answer))
		snprintf(a->answer + n, sizeof(a->answer) - (size_t)n, " %s",
			 seen->v.cluster[0] ? seen->v.cluster : "-");
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
