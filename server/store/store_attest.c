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
 * The round. The lapsed active writes a challenge, P challenge = "<nonce>
 * <epoch> <node>" (a fresh random nonce, the epoch it last held), with a
 * life of DL_STANDBY_REPORT_MS plus one leader_lease, then reads P answers
 * every DL_ATTEST_POLL_MS for DL_STANDBY_REPORT_MS at most. Each node's
 * look (the leadership function, store_lead.c) answers a challenge that
 * stands: HSET P answers <node> "<nonce> <max> <since>", from what the
 * node kept outside Redis:
 *
 *   max    the highest epoch it took (its state file's lead, and this
 *          process's takes) or saw held by anyone in a look;
 *   since  from which epoch on its knowledge of its own takes is whole:
 *          0 when its state file existed before this process (the file
 *          records every take made from its directory, made durable
 *          before the take serves), else the first epoch this process saw
 *          held or took (it was alive since, and remembers), or "-" when
 *          it has seen none (it started during the lapse: its previous
 *          run may have led).
 *
 * A peer vouches when its answer carries this round's nonce, max is not
 * above the challenged epoch and since is not above it either. When every
 * peer vouches, the take presents the nonce (`proof`), and the function
 * counts it as held -- only while that very challenge still stands in
 * Redis, so a Redis that went back again since the answers (losing the
 * challenge) proves nothing -- and the table is kept and written back,
 * clients and all, as a standalone daemon's is. Any refusal, a node
 * answering that peers does not name (a daemon the operator forgot: it
 * may have led), or silence past the wait, and the take goes on as
 * before: the table is dropped, grants closed for what can be bounded.
 *
 * A node that answered defers any take of its own for the challenge's
 * life and one more lease (dl__attest_defers), so that it cannot lead
 * between its answer and the challenger's take: the challenger's take
 * checks the challenge is still there, and the challenge outlives none of
 * the answers' deferrals.
 *
 * What it assumes: `peers` lists every other daemon that can take the
 * leadership of this keyspace (docs/ha.md). A daemon it does not list
 * that leads and loses its take with Redis between two looks of every
 * peer is not seen.
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

static void on_set(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;

	if (!reply || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if (dl__store_reply_error(reply))
		dl__link_fail(st, "challenge: SET failed");
}

int dl__attest_begin(struct dl_store *st)
{
	struct store_attest *a = &st->attest;
	const char *argv[6];
	size_t lens[6];
	uint64_t rnd, now = dl_mono_ms();

	if (!st->lead.active || !a->npeers || !fence_epoch(st) ||
	    now < st->lead.leader.until_ms)
		return 0;
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		return 0; /* no proof without a nonce nobody can guess */
	snprintf(a->nonce, sizeof(a->nonce), "%016" PRIx64, rnd);
	a->epoch = fence_epoch(st);
	snprintf(a->set_arg, sizeof(a->set_arg), "%s %" PRIu64 " %.24s",
		 a->nonce, a->epoch, st->lead.node);
	snprintf(a->px_arg, sizeof(a->px_arg), "%" PRIu64,
		 (uint64_t)DL_STANDBY_REPORT_MS + st->cfg->leader_lease_ms);
	argv[0] = "SET";
	argv[1] = st->keys.challenge;
	argv[2] = a->set_arg;
	argv[3] = "PX";
	argv[4] = a->px_arg;
	for (int i = 0; i < 5; i++)
		lens[i] = strlen(argv[i]);
	if (redisAsyncCommandArgv(st->ac, on_set, st, 5, argv, lens) !=
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

/* Peer p's answer v: 1 it vouches, 0 none of this round yet, -1 it does
 * not (why says so). */
static int judge(const struct store_attest *a, const char *peer,
		 const redisReply *v, char *why, size_t len)
{
	char buf[80], nonce[17], since[24];
	unsigned long long max, s;

	if (!v || v->type != REDIS_REPLY_STRING || v->len >= sizeof(buf))
		return 0;
	memcpy(buf, v->str, v->len);
	buf[v->len] = '\0';
	if (sscanf(buf, "%16s %llu %23s", nonce, &max, since) != 3 ||
	    strcmp(nonce, a->nonce) != 0)
		return 0;
	if (max > a->epoch) {
		snprintf(why, len, "peer %s took or saw epoch %llu", peer, max);
		return -1;
	}
	if (strcmp(since, "-") == 0 ||
	    (s = strtoull(since, NULL, 10)) > a->epoch) {
		snprintf(
			why, len,
			"peer %s cannot vouch for what it did before it started (no state file, and it saw no leadership since epoch %" PRIu64
			")",
			peer, a->epoch);
		return -1;
	}
	return 1;
}

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
		a->round = ATTEST_NONE;
		st->st.attests_failed++;
		dl_warn("redis: peers cannot attest that nobody led since epoch %" PRIu64
			": %s; taking the leadership without the table",
			a->epoch, why);
	}
	if (dl__store_take(st))
		dl__link_fail(st, "cannot queue a command");
}

static void on_answers(redisAsyncContext *ac, void *reply, void *priv)
{
	struct dl_store *st = priv;
	struct store_attest *a = &st->attest;
	const redisReply *r = reply;
	char why[256] = "";
	int i, vouched = 0, v;
	size_t j;

	if (!r || ac != st->ac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	a->polling = 0;
	if (a->round != ATTEST_ASKING)
		return;
	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2) {
		dl__link_fail(st, "challenge: not an answer of HGETALL");
		return;
	}
	for (j = 0; j + 1 < r->elements; j += 2) {
		const redisReply *k = r->element[j];

		if (k->type == REDIS_REPLY_STRING &&
		    !is_peer(a, k->str, k->len) &&
		    (k->len != strlen(st->lead.node) ||
		     memcmp(k->str, st->lead.node, k->len) != 0)) {
			snprintf(
				why, sizeof(why),
				"node %.*s answered, and [cluster] peers does not name it (it may have led unseen: list every node)",
				(int)(k->len > 64 ? 64 : k->len), k->str);
			decide(st, 0, why);
			return;
		}
	}
	for (i = 0; i < a->npeers; i++) {
		const redisReply *ans = NULL;

		for (j = 0; j + 1 < r->elements; j += 2)
			if (r->element[j]->type == REDIS_REPLY_STRING &&
			    strcmp(r->element[j]->str, a->peers[i]) == 0)
				ans = r->element[j + 1];
		v = judge(a, a->peers[i], ans, why, sizeof(why));
		if (v < 0) {
			decide(st, 0, why);
			return;
		}
		vouched += v;
	}
	if (vouched == a->npeers)
		decide(st, 1, "");
}

void dl__attest_tick(struct dl_store *st)
{
	struct store_attest *a = &st->attest;
	static const char *argv[2] = {"HGETALL", NULL};
	size_t lens[2] = {7, 0};
	char why[160];
	uint64_t now = dl_mono_ms();
	int i;

	if (a->round != ATTEST_ASKING || !st->ac || a->polling)
		return;
	if (now >= a->until_ms) {
		snprintf(why, sizeof(why), "no answer within %d ms from peer",
			 DL_STANDBY_REPORT_MS);
		for (i = 0; i < a->npeers; i++)
			snprintf(why + strlen(why), sizeof(why) - strlen(why),
				 "%s %s", i ? "," : "", a->peers[i]);
		snprintf(why + strlen(why), sizeof(why) - strlen(why),
			 " (or not from all)");
		decide(st, 0, why);
		return;
	}
	if (now < a->poll_at)
		return;
	a->poll_at = now + DL_ATTEST_POLL_MS;
	argv[1] = st->keys.answers;
	lens[1] = strlen(argv[1]);
	if (redisAsyncCommandArgv(st->ac, on_answers, st, 2, argv, lens) !=
	    REDIS_OK) {
		dl__link_fail(st, "cannot queue a command");
		return;
	}
	a->polling = 1;
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
	const struct dl_seen *s = &st->lead.seen;
	uint64_t max = s->v.lead > a->saw_max ? s->v.lead : a->saw_max;

	if (s->has_file && !s->failed && !s->removed)
		snprintf(a->answer, sizeof(a->answer), "%" PRIu64 " 0", max);
	else if (a->since)
		snprintf(a->answer, sizeof(a->answer), "%" PRIu64 " %" PRIu64,
			 max, a->since);
	else
		snprintf(a->answer, sizeof(a->answer), "%" PRIu64 " -", max);
	return a->answer;
}

void dl__attest_saw(struct dl_store *st, uint64_t epoch, int took)
{
	struct store_attest *a = &st->attest;

	(void)took;
	if (!epoch)
		return;
	if (!a->since)
		a->since = epoch;
	if (epoch > a->saw_max)
		a->saw_max = epoch;
}

void dl__attest_challenge_seen(struct dl_store *st, const redisReply *e)
{
	if (e->type == REDIS_REPLY_STRING && e->len > 0)
		st->attest.defer_until = dl_mono_ms() + DL_STANDBY_REPORT_MS +
					 2 * st->cfg->leader_lease_ms;
}

int dl__attest_defers(const struct dl_store *st)
{
	return dl_mono_ms() < st->attest.defer_until;
}
