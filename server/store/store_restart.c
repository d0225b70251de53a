/* SPDX-License-Identifier: MIT */
/*
 * store_restart.c -- the restart round: a start that nobody leads, and
 * whose state file proves nothing, asks its peers what they told before
 * it takes the leadership.
 *
 * Why. A daemon that starts knows only what its state file kept: a start
 * whose file proves nothing (no file, or a leadership that may have lapsed
 * before it came back) cannot see a loss that happened while it was down,
 * nor bound the leases told that Redis may have lost. Its peers can: a
 * standby counted the active's reservations in its looks, a lapsed active
 * knows what it told, and a node that kept its state file knows what its
 * own processes told. So, with `[cluster] peers` named, such a start
 * writes a challenge as a lapsed active does (store_attest.c: "<nonce> 0
 * <instance>"; it held no epoch, so nobody vouches), answers the others'
 * challenges meanwhile, and reads the answers every DL_ATTEST_POLL_MS for
 * DL_STANDBY_REPORT_MS:
 *
 *   every peer's `known` a number   the take closes until the latest
 *          (ATTEST_BOUNDED, restart_bounded), with this node's own file's
 *          horizon; tokens resume above the answers' marks;
 *   a start whose own file existed  needs of each peer only `own`, what
 *          that peer's node told (a whole cluster after a power cut);
 *   a start without its file        on the Redis process of the last take
 *          (P run) takes as before; else closes for max_ttl when an answer
 *          shows that its node ran before, and waits for a silent peer up
 *          to DL_RESTART_AWAIT_MS (since_take, restart_ran,
 *          restart_silent) -- on a Redis that holds no take too, then
 *          takes as a first start;
 *   otherwise                       as a start that proves nothing, with
 *          a warning.
 *
 * A lapsed peer's challenge of a node whose id sorts first makes the start
 * let it take first (DL_EUNAVAILABLE: the start tries again).
 *
 * The round runs on the start's blocking connection (struct load_ctx,
 * store_load.c), before its take. It shares st->attest with the lapsed
 * active's round (store_attest.c): the nonce, the challenge's text and
 * life, the outcome the take reads (dl__attest_proof, _bound, _blind).
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

		if (!dl__attest_other_challenge(st, k, e, nonce))
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
		if (dl__attest_sorts_first(k->str, k->len, st->lead.node)) {
			a->defer_until = dl_mono_ms() + DL_STANDBY_REPORT_MS +
					 2 * st->cfg->leader_lease_ms;
			first = 1;
		}
	}
	return first;
}

/* A peer's answer names the cluster id it knows (its 9th word, "-" for
 * none): kept when every peer that names one names the same, the other
 * kept too for the log. 1 if it names one: only a node that led writes
 * an id, so a peer that knows one knows that the cluster ran (found
 * from outside: both nodes' state_dirs emptied, Redis flushed while b
 * waited for a; a, whose id sorts first, tallied b's blank answer as a
 * first start's, took without closing, and granted x again 20-25 s into
 * alice's 120 s lease, 3 of 3 runs -- b's answer named the id). */
static int restart_peer_cluster(struct store_attest *a, const char *id)
{
	if (!dl__cluster_id_valid(id, strlen(id)))
		return 0;
	if (!a->peers_cluster[0])
		memcpy(a->peers_cluster, id, DL_CLUSTER_ID_LEN + 1);
	else if (strcmp(a->peers_cluster, id) != 0)
		memcpy(a->peers_cluster_other, id, DL_CLUSTER_ID_LEN + 1);
	return 1;
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
 * looks knew of. So when a peer answers `known` "-" and any answer shows
 * that the cluster ran before -- a peer's numeric `own` (its node kept a
 * state file, or it ran long), or an answer of an older version, without
 * `own` (a rolling upgrade: found by review) -- the start has nothing to
 * bound its own node's leases with: -2, in why (found from outside: a
 * whole cluster cut off its power, Redis back without alice's lease, one
 * node's state_dir emptied; that node took first, knowing nothing, and x
 * was granted again 1.9-5 s into her 40 s lease, 10 runs of 16). An
 * answer that bounds nothing at all gives such a start -2 too. *mark is
 * the largest token of every answer. */
static int restart_tally(struct store_attest *a, const redisReply *r,
			 int own_file, uint64_t max_ms, uint64_t *end,
			 uint64_t *mark, char *why, size_t len)
{
	size_t j, nl = strlen(a->nonce);
	unsigned long long e, left, age, m, known;
	char i[24], kw[24], ow[24], cl[DL_CLUSTER_ID_LEN + 2],
		buf[sizeof(a->answer)];
	int p, n = 0, took, words, own, named, ran = 0, blank = 0;

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
			words = sscanf(
				buf,
				"%23s %llu %d %llu %llu %llu %23s %23s %33s", i,
				&e, &took, &left, &age, &m, kw, ow, cl);
			if (words < 7)
				goto nothing;
			if (m > *mark)
				*mark = m;
			own = words >= 8 && ow[0] >= '0' && ow[0] <= '9';
			named = words == 9 && restart_peer_cluster(a, cl);
			ran |= own || words == 7 || named;
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
			return own_file ? -1 : -2;
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

	/* a start that awaits a silent peer asks again with the same nonce:
	 * an answer that came between its rounds still counts (a peer
	 * started meanwhile answers once, then defers to a node whose id
	 * sorts first, and asks nothing for seconds) */
	if (!a->await_since || !a->nonce[0]) {
		if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(rnd))
			return 1;
		snprintf(a->nonce, sizeof(a->nonce), "%016" PRIx64, rnd);
	}
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
	READ_AWAIT,   /* no state file, Redis not the process of the last
		       * take (or holding none), and a peer silent: try
		       * again */
	READ_LEADS,   /* another node took meanwhile */
	READ_DEFER,   /* a lapsed peer that sorts first asks */
	READ_FAILED,  /* the connection: *rc */
};

enum since_take {
	SINCE_FAILED,	 /* the connection: *rc */
	SINCE_KEPT,	 /* Redis is the process the last take was made on,
			    its data never replaced since */
	SINCE_UNLED,	 /* no take recorded, and no cluster id seen by this
			    process: a first start (or a flush before it
			    looked) */
	SINCE_RESTARTED, /* another process, data replaced in place, or no
			    take recorded */
};

/* What became of Redis since the last take, for a start without its
 * state file. P run is the process every take was made on, written once
 * its table or closure is whole there, and how often that process's data
 * had been replaced in place then (dl__meddled_of). When it names this
 * connection's process (its run_id and replication id, which change with
 * a restart, a promotion or a resync) and the same count, Redis lost
 * nothing told since, and its leases and closures are there to load. A
 * backup put back into the running process (FLUSHALL and RESTORE, DEBUG
 * LOADAOF) brings an older P run of the very process, but the count has
 * grown (found from outside: a backup restored so while every daemon was
 * down, the emptied node took as before and granted x again). A FLUSHALL
 * alone takes P run with it, and P fence, which every take raises. */
static enum since_take since_take(struct load_ctx *x, int *rc)
{
	struct dl_store *st = x->st;
	redisReply *r;
	int same, led;

	if (!(r = DL__LOAD_RUN(x, rc, 0, "GET", st->keys.run)))
		return SINCE_FAILED;
	same = r->type == REDIS_REPLY_STRING &&
	       dl__hz_same_run(st, r->str, r->len, 1);
	freeReplyObject(r);
	if (same)
		return SINCE_KEPT;
	if (!(r = DL__LOAD_RUN(x, rc, 0, "GET", st->keys.fence)))
		return SINCE_FAILED;
	led = r->type == REDIS_REPLY_STRING;
	freeReplyObject(r);
	/* A cluster id this process read from Redis (a start without its
	 * state file knows none otherwise: the take claims one after the
	 * round) says a cluster ran there too, even once the keyspace is
	 * flushed: found from outside, a FLUSHALL while an emptied node
	 * waited for its silent peer turned the wait's end from a closure
	 * for max_ttl into a first start's take, and x was granted again
	 * 64 s into alice's 120 s lease (3 of 3 runs). */
	led |= st->lead.seen.v.cluster[0] != 0;
	return led ? SINCE_RESTARTED : SINCE_UNLED;
}

/* A start without its state file, in a cluster that ran before
 * (restart_tally's -2), or one whose answers show nothing (-1):
 * READ_KEPT on the Redis process of the last take; `unled` on a Redis
 * that holds no take and no id this process saw (the answers' verdict:
 * READ_BLIND when they showed the cluster ran, else a first start's
 * READ_NOTHING); else READ_BLIND. */
static enum restart_read restart_ran(struct load_ctx *x, int *rc,
				     enum restart_read unled)
{
	switch (since_take(x, rc)) {
	case SINCE_FAILED:
		return READ_FAILED;
	case SINCE_KEPT:
		return READ_KEPT;
	case SINCE_UNLED:
		return unled;
	default:
		return READ_BLIND;
	}
}

/* Not every peer answered within the wait. A start with its state file
 * goes on as a start that proves nothing: READ_NOTHING. One without, on
 * the Redis process of the last take, lost nothing: READ_KEPT. One
 * without, on a Redis that restarted since, cannot know what its own
 * node's earlier process told, nor what the silent peer did: it tries
 * again for DL_RESTART_AWAIT_MS (READ_AWAIT), then takes with grants
 * closed for max_ttl (READ_BLIND). Found by a test: a lapsed active slow
 * to reconnect to the restarted Redis answered after the start's 2 s,
 * and the start, emptied, granted x again in alice's lease.
 *
 * One without, on a keyspace that holds no take at all, is a cluster's
 * first start -- or a start on a Redis that lost everything (a FLUSHALL,
 * an empty data directory), whose peers, with their state files, would
 * answer that the cluster ran. It too waits for them up to
 * DL_RESTART_AWAIT_MS, then takes as a first start: READ_NOTHING (found
 * from outside: every node down, Redis flushed, the emptied node started
 * first and its peers 25 s later; it took at once and granted x again in
 * alice's lease, 4 of 4 runs). A cluster whose nodes start together
 * loses nothing: every peer answers within the round. */
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
		st->attest.await_unled = 1;
		break;
	default:
		st->attest.await_unled = 0;
		break;
	}
	if (!st->attest.await_since)
		st->attest.await_since = now;
	if (now - st->attest.await_since < DL_RESTART_AWAIT_MS)
		return READ_AWAIT;
	snprintf(why + n, len - n, " in %d s of tries",
		 DL_RESTART_AWAIT_MS / 1000);
	return st->attest.await_unled ? READ_NOTHING : READ_BLIND;
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
	st->attest.peers_cluster[0] = '\0';
	st->attest.peers_cluster_other[0] = '\0';
	v = restart_tally(&st->attest, r, st->lead.seen.has_file,
			  st->cfg->max_ttl_ms + DL_LOCK_DELAY_MAX_MS, end, mark,
			  why, len);
	freeReplyObject(r);
	if (v == -2)
		return restart_ran(x, rc, READ_BLIND);
	/* every answer blank for both words and naming no id: a first start
	 * -- unless Redis says the cluster ran (found from outside: nodes
	 * without state_dir, Redis back from a copy without P cluster, or
	 * with it deleted; the start took as one that proves nothing and x
	 * was granted again 2.4-2.7 s into alice's 40 s lease, 6 of 6) */
	if (v == -1 && !st->lead.seen.has_file)
		return restart_ran(x, rc, READ_NOTHING);
	if (v)
		return v < 0 ? READ_NOTHING : READ_BOUNDED;
	if (dl_mono_ms() < st->attest.until_ms)
		return READ_WAIT;
	snprintf(why, len, "not every peer answered within %d ms",
		 DL_STANDBY_REPORT_MS);
	return restart_silent(x, why, len, rc);
}

/* A silent peer awaited (READ_AWAIT): the start fails as not ready, and
 * the message says why and for how much longer. */
static int restart_await(struct load_ctx *x, const char *why)
{
	const struct store_attest *a = &x->st->attest;
	uint64_t left = a->await_since + DL_RESTART_AWAIT_MS, t = dl_mono_ms();

	left = left > t ? left - t : 0;
	return dl__load_err(
		x, DL_EUNAVAILABLE,
		"this daemon has no state file, and Redis %s: only its peers know what this node told before, and %s; asking again (for %llu s more at most, then %s)",
		a->await_unled
			? "holds no take (a cluster's first start, or Redis lost its data)"
			: "restarted or had its data replaced since the last take",
		why, (unsigned long long)(left / 1000),
		a->await_unled ? "taking as a first start"
			       : "grants close for max_ttl");
}

/* A take after answers that show the cluster ran, on a Redis that lost
 * its id, by a start that knows none (no state file): the id its peers
 * named, so that they (whose state files know it) and the clients that
 * met it keep the cluster whole -- the take closes grants for what may
 * have been told. It made a new one, which every peer then refused as
 * another cluster's until an operator removed its state file (found by
 * the fault campaign: Redis flushed under a replaced node, the other
 * node never served again). */
static void restart_adopt_cluster(struct dl_store *st)
{
	const struct store_attest *a = &st->attest;

	if (!st->cluster_absent || st->lead.seen.v.cluster[0] ||
	    !a->peers_cluster[0])
		return;
	if (a->peers_cluster_other[0]) {
		dl_warn("redis: Redis holds no cluster id, nor does this daemon know one, and its peers name two (%s and %s): making a new one, which they will refuse (is a peer's state file of another cluster?)",
			a->peers_cluster, a->peers_cluster_other);
		return;
	}
	dl_notice(
		"redis: Redis holds no cluster id, nor does this daemon know one: taking %s, the one its peers named",
		a->peers_cluster);
	dl_seen_note_cluster(&st->lead.seen, a->peers_cluster);
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
	if (other) {
		a->await_since = 0;
		return 0; /* the take finds it held: this daemon is a standby */
	}
	if (now < a->defer_until)
		return dl__load_err(
			x, DL_EUNAVAILABLE,
			"a peer whose node id sorts first asks whether anyone led (a lapsed active, or a start): letting it take first (%llu ms more at most)",
			(unsigned long long)(a->defer_until - now));
	if ((rc = restart_ask(x)) != 0)
		return rc < 0 ? rc : 0;
	if (!a->await_since) /* not again at each round of a wait */
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
		restart_adopt_cluster(st);
		return 0;
	case READ_BLIND:
		restart_adopt_cluster(st);
		a->round = ATTEST_BLIND;
		st->st.attests_failed++;
		if (mark <=
		    (dl_wall_ms() + DL_TOKEN_AHEAD_MAX_MS) * DL_TOKEN_PER_MS)
			dl_seen_note_mark(&st->lead.seen, mark);
		dl_warn("redis: this daemon has no state file, Redis is not the process the last take was made on, or its data was replaced or flushed since (it may lack writes), and %s: nothing bounds the leases an earlier process of this node told: taking the leadership, grants closed for max_ttl (keep each node's state_dir; start a replaced node while its peers run)",
			why);
		return 0;
	case READ_AWAIT:
		return restart_done(x, restart_await(x, why));
	case READ_KEPT:
		restart_adopt_cluster(st);
		dl_notice(
			"redis: this daemon has no state file, but Redis is the process the last take was made on, its data never replaced since: it lost nothing told since; taking the leadership");
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
				"a peer whose node id sorts first asks whether anyone led (a lapsed active, or a start): letting it take first"));
	case READ_LEADS:
		return restart_done(x, 0);
	default:
		return restart_done(x, rc);
	}
}
