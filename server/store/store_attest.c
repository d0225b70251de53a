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
 * <epoch> <took>", from what this process saw itself -- a standby in each
 * look (the leadership function, store_lead.c), another lapsed active in
 * its own round (two actives, when one was paused past a take-over):
 *
 *   instance, epoch  the last leadership record of another process it
 *          saw in a look, on a Redis that had not gone back;
 *   took   1 if this process ever took the leadership: the order in
 *          which it saw things is not the order in which they happened
 *          when Redis came back from two different copies in turn, so a
 *          process that led never vouches.
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
 * A node that vouched for a challenge takes no leadership (a standby's
 * take-over, a lapsed active's take) while it may still stand: for the
 * challenge's life and one more lease from each look or read that saw it
 * (dl__attest_defers). A take of it would void the proof anyway; the
 * deferral lets the challenger's take come first.
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

static int vouches(struct dl_store *st, const char *inst, uint64_t epoch)
{
	char why[200];

	return vouch("", dl__attest_answer(st), inst, epoch, why, sizeof(why));
}

/* The challenges standing (HGETALL P challenge): arm the deferral for
 * each this node vouches for; with `answer`, also answer each (a lapsed
 * active in its round: a standby answers in its look). 0, or
 * DL_EUNAVAILABLE (the link is to be failed). */
static int challenges(struct dl_store *st, const redisReply *chs, int answer)
{
	struct store_attest *a = &st->attest;
	const char *argv[4];
	size_t lens[4], j;
	char v[80], nonce[17], inst[17];
	unsigned long long epoch;
	int any = 0;

	if (!chs || chs->type != REDIS_REPLY_ARRAY)
		return 0;
	for (j = 0; j + 1 < chs->elements; j += 2) {
		const redisReply *k = chs->element[j], *e = chs->element[j + 1];

		if (k->type != REDIS_REPLY_STRING ||
		    e->type != REDIS_REPLY_STRING || e->len >= sizeof(v) ||
		    (k->len == strlen(st->lead.node) &&
		     memcmp(k->str, st->lead.node, k->len) == 0))
			continue;
		memcpy(v, e->str, e->len);
		v[e->len] = '\0';
		if (sscanf(v, "%16s %llu %16s", nonce, &epoch, inst) != 3)
			continue;
		if (vouches(st, inst, epoch))
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

/* Peer p's answer v: 1 it vouches, -1 it does not (why says so). */
static int judge(const struct store_attest *a, const char *peer,
		 const redisReply *v, char *why, size_t len)
{
	char buf[80], who[8 + DL_NODE_ID_MAX];

	snprintf(who, sizeof(who), "peer %s", peer);
	if (v->type != REDIS_REPLY_STRING || v->len >= sizeof(buf)) {
		snprintf(why, len, "%s answered what is not an answer", who);
		return -1;
	}
	memcpy(buf, v->str, v->len);
	buf[v->len] = '\0';
	return vouch(who, buf, a->instance, a->epoch, why, len) ? 1 : -1;
}

/* The round's outcome: the take now, or (refused, silent) once no
 * challenge this node vouched for may stand. */
static void decide(struct dl_store *st, int ok, const char *why)
{
	struct store_attest *a = &st->attest;

	if (ok) {
		a->round = ATTEST_PROVED;
		st->st.attests_proved++;
		dl_notice(
			"redis: peers attest that nobody led since epoch %" PRIu64
			": taking the leadership again with the table kept",
			a->epoch);
	} else {
		a->round = ATTEST_BLIND;
		st->st.attests_failed++;
		dl_warn("redis: peers cannot attest that nobody led since epoch %" PRIu64
			": %s; taking the leadership without the table",
			a->epoch, why);
	}
}

/* Every peer's answer to this round in the HGETALL reply r: 1 all vouch,
 * 0 not all answered yet, -1 one refuses (why). */
static int all_vouch(const struct store_attest *a, const redisReply *r,
		     char *why, size_t len)
{
	size_t j, nl = strlen(a->nonce);
	int i, n = 0;

	if (r->type != REDIS_REPLY_ARRAY)
		return 0;
	for (i = 0; i < a->npeers; i++)
		for (j = 0; j + 1 < r->elements; j += 2) {
			const redisReply *k = r->element[j];

			if (k->type != REDIS_REPLY_STRING || k->len <= nl ||
			    memcmp(k->str, a->nonce, nl) != 0 ||
			    k->str[nl] != ':' ||
			    strcmp(k->str + nl + 1, a->peers[i]) != 0)
				continue;
			if (judge(a, a->peers[i], r->element[j + 1], why, len) <
			    0)
				return -1;
			n++;
			break;
		}
	return n == a->npeers;
}

/* HGETALL P answers: fields "<nonce>:<node>". */
static void on_answers(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	struct store_attest *a = &st->attest;
	const redisReply *r = reply;
	char why[256] = "";
	size_t j, nl = strlen(a->nonce);
	int v;

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
	if ((v = all_vouch(a, r, why, sizeof(why))) < 0) {
		decide(st, 0, why);
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
			decide(st, 0, why);
			return;
		}
	}
	if (v > 0)
		decide(st, 1, "");
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
		decide(st, 0, why);
	}
	if (a->round == ATTEST_PROVED ||
	    (a->round == ATTEST_BLIND && !dl__attest_defers(st))) {
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
	return st->attest.round == ATTEST_PROVED ? st->attest.nonce : "";
}

const char *dl__attest_answer(struct dl_store *st)
{
	struct store_attest *a = &st->attest;

	snprintf(a->answer, sizeof(a->answer), "%s %" PRIu64 " %d",
		 a->seen_inst[0] ? a->seen_inst : "-", a->seen_epoch, a->took);
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
