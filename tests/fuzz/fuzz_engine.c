/* SPDX-License-Identifier: MIT */
/*
 * fuzz_engine.c -- libFuzzer target: request streams through the codec,
 * the dispatch (server/cmd.c), the lock table and the wheel, with no
 * sockets and a fake clock.
 *
 * Real parts: cmd.c, locktab*.c, htab.c, wheel.c, stats.c, config.c,
 * log.c, watch.c and watchreg.c (the lock table's change hook goes to
 * dl_watch_change(), as in server.c), the store in persist=none mode (store*.c,
 * record.c, buf.c) and the codec, and the held-line queue (held.c) with its TTL
 * rewrite. Not linked: conn.c, conn_budget.c and server.c (sockets, the
 * output budget, the loop). In their place
 * this file implements the part of server/conn.h that cmd.c calls, on the same
 * queue and with the same contract: a durable line and every line after
 * it on the same connection are held until the store commits (the epoch
 * it was sent in), released with their TTLs rewritten, and
 * dl_conn_withdraw_held() passes each held line through the callback as
 * conn.c does. The lock table's hooks are a clock the input moves and an
 * event hook that goes to dl_cmd_event(), as server.c does.
 *
 * The input is a program: each byte picks an operation, the next bytes its
 * arguments --
 *   a request from a small grammar (verbs, a few lock names and owners,
 *   TTLs and waits from small sets, tokens taken from the grants the fake
 *   clients received, so that UNLOCK and REFRESH hit real leases); a raw
 *   line from the input; moving the clock and running the due timers in a
 *   random budget; a commit of the store (what is held goes out);
 *   persistence going down (grants suspended, holds broken) and up; a
 *   connection closing and another taking its place.
 *
 * After every operation: the lock table's invariants (dl_locktab_verify)
 * hold; every line a client received parses as a reply or event; every
 * request was answered exactly once (a STATS reply with its n lines) once
 * its held lines are out; a GRANTED line (reply or event) is, when it
 * reaches its client, the valid holder of its lock (CHECK says so) unless
 * it says 0 ms are left; per lock, the tokens delivered grow (a reentry
 * keeps the same one). Any violation aborts.
 *
 *   make fuzz FUZZ_SECONDS=600     (all targets; crashes in build/fuzz/)
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "tests/fuzz/fuzz_input.h"
#include "server/access.h"
#include "server/cmd.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/server.h"
#include "server/watch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NCONN  6
#define NLOCKS 4
#define NTOKEN 16

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "fuzz_engine: " __VA_ARGS__);          \
			fprintf(stderr, "\n");                                 \
			abort();                                               \
		}                                                              \
	} while (0)

/* ---- the fake connections ---------------------------------------------- */

struct fconn {
	struct dl_conn c;    /* what cmd.c sees */
	int open;	     /* a session is attached */
	int ended;	     /* dl_conn_end was called */
	uint64_t sent;	     /* requests that want a reply */
	uint64_t answered;   /* replies received */
	uint64_t stats_left; /* STATS body lines still to come */
};

static struct dl_server srv;
static struct fconn conns[NCONN];
static uint64_t fake_now;
static uint64_t tokens[NTOKEN]; /* tokens seen in grants */
static size_t ntokens;
static uint64_t last_token[NLOCKS]; /* per lock, the last delivered */
/* Tokens an UNLOCK or REFRESH named, each once. A set, not a ring: a ring
 * of 16 let 18 REFRESHes of one token push out the UNLOCK of another, and
 * the owner's own release of a reentry it had pipelined was then reported
 * as a grant delivered for a lease that is not valid (a false alarm of
 * this harness, found by the fuzzer itself). Past TOUCHED_MAX tokens every
 * token counts as touched: the check is skipped, never wrong. */
#define TOUCHED_MAX 1024
static uint64_t touched[TOUCHED_MAX];
static size_t ntouched;
static const char *const names[NLOCKS] = {"n0", "n1", "n2", "n3"};
static int trace; /* FUZZ_TRACE set: print what happens (to replay a crash) */

static struct fconn *fconn_of(struct dl_conn *c)
{
	return (struct fconn *)((char *)c - offsetof(struct fconn, c));
}

static int lock_index(struct dl_str name)
{
	int i;

	for (i = 0; i < NLOCKS; i++)
		if (name.len == 2 && memcmp(name.p, names[i], 2) == 0)
			return i;
	return -1;
}

static int was_touched(uint64_t token)
{
	size_t i;

	if (ntouched > TOUCHED_MAX)
		return 1;
	for (i = 0; i < ntouched; i++)
		if (touched[i] == token)
			return 1;
	return 0;
}

static void touch(uint64_t token)
{
	if (was_touched(token))
		return;
	if (ntouched < TOUCHED_MAX)
		touched[ntouched] = token;
	ntouched++;
}

/* A GRANTED line reaching its client, `line` its description: while its
 * deadline is ahead, its lease is the lock's valid holder -- unless its
 * owner released or refreshed it meanwhile through another connection
 * (the owner's doing; conn.c then states what truly remains) -- and the
 * tokens of a lock grow (a reentry keeps its). */
static void check_grant(const struct dl_reply *r, const struct dl_line *line)
{
	struct dl_result res;
	uint64_t token, ttl, holds;
	struct dl_str v;
	int k;

	CHECK(r->argc >= 3 && dl_reply_u64(r, 1, &token) == 0 &&
		      dl_reply_u64(r, 2, &ttl) == 0,
	      "a GRANTED line without token and ttl");
	CHECK(dl_reply_kv(r, "holds", &v) == 0 &&
		      dl_parse_u64(v.p, v.len, &holds) == 0 && holds >= 1,
	      "a GRANTED line without its holds");
	if (ntokens < NTOKEN)
		tokens[ntokens++] = token;
	else
		tokens[token % NTOKEN] = token;
	if (!line || ttl == 0 || fake_now >= line->deadline ||
	    was_touched(token))
		return;
	dl_locktab_check(srv.tab, r->argv[0], token, &res);
	CHECK(res.outcome == DL_VALID,
	      "a grant delivered for a lease that is not valid");
	/* n0, n1 are exclusive locks: one holder at a time, so a lock's
	 * grants come in token order. n2 is shared too and n3 a semaphore,
	 * where an older holder may re-enter after a newer one came in:
	 * their holders are checked by dl_locktab_verify instead. */
	if ((k = lock_index(r->argv[0])) >= 0 && k < 2) {
		CHECK(token >= last_token[k], "tokens of a lock go back");
		last_token[k] = token;
	}
}

/* A line reaches the client (text with its CRLF; line: its description,
 * NULL when not known). */
static void deliver(struct fconn *f, const char *text, size_t len,
		    const struct dl_line *line)
{
	struct dl_reply r;

	CHECK(len >= 2 && text[len - 2] == '\r' && text[len - 1] == '\n',
	      "a line without CRLF");
	if (trace)
		fprintf(stderr, "  conn %d <- %.*s\n", (int)(f - conns),
			(int)len - 2, text);
	if (f->stats_left) {
		f->stats_left--;
		return;
	}
	CHECK(dl_parse_reply(text, len - 2, &r) == 0,
	      "an unparsable line: %.*s", (int)len, text);
	if (r.word.len == 7 && memcmp(r.word.p, "GRANTED", 7) == 0)
		check_grant(&r, line);
	/* a multi-lock's block: its granted lines follow, whole */
	if (r.word.len == 6 && memcmp(r.word.p, "LOCKED", 6) == 0)
		CHECK(dl_reply_u64(&r, 1, &f->stats_left) == 0 &&
			      f->stats_left >= 2,
		      "LOCKED count");
	if (r.kind == DL_REPLY_EVENT)
		return;
	f->answered++;
	if (r.word.len == 5 && memcmp(r.word.p, "STATS", 5) == 0 &&
	    r.kind == DL_REPLY_OK)
		CHECK(dl_reply_u64(&r, 0, &f->stats_left) == 0, "STATS count");
	if (r.word.len == 7 && memcmp(r.word.p, "HOLDERS", 7) == 0 &&
	    r.kind == DL_REPLY_OK)
		CHECK(dl_reply_u64(&r, 1, &f->stats_left) == 0,
		      "HOLDERS count");
}

/* Held lines whose epoch committed go out, in order, their TTL rewritten
 * (the queue and the rewrite are conn.c's: server/held.c). */
static void release(struct fconn *f, uint64_t durable)
{
	struct dl_conn *c = &f->c;
	struct dl_buf out = {0};
	size_t i, n = dl_heldq_covered(&c->held, durable);

	for (i = 0; i < n; i++)
		dl_cmd_released(c, &c->held.v[i].line,
				dl_heldq_text(&c->held, i));
	for (i = 0; i < n; i++) {
		out.len = 0;
		CHECK(dl_heldq_emit(&c->held, i, srv.tab, fake_now, &out) == 0,
		      "out of memory");
		deliver(f, out.p, out.len, &c->held.v[i].line);
	}
	free(out.p);
	dl_heldq_drop(&c->held, n);
}

void dl_conn_send(struct dl_conn *c, const char *text, size_t len,
		  const struct dl_line *line)
{
	static const struct dl_line reply = {.kind = DL_LINE_REPLY};
	struct fconn *f = fconn_of(c);

	if (f->ended == 2)
		return; /* aborted: nothing more goes out */
	if (!line)
		line = &reply;
	if (!line->durable && c->held.n == 0) {
		deliver(f, text, len, line);
		return;
	}
	CHECK(dl_heldq_add(&c->held, text, len, line,
			   dl_store_epoch(srv.store)) == 0,
	      "out of memory");
}

/* Nothing here is left unread but what is held. */
size_t dl_conn_unread(const struct dl_conn *c)
{
	return c->held.text.len;
}

/* No output budget here: nothing is counted (c->counted stays 0). */
void dl_conn_share_move(const struct dl_conn *c, struct dl_user *from,
			struct dl_user *to)
{
	(void)c;
	(void)from;
	(void)to;
}

/* No kernel queue: there is no socket. */
size_t dl_conn_queued(struct dl_conn *c)
{
	return dl_conn_unread(c);
}

void dl_conn_send_delayed(struct dl_conn *c, const char *line, size_t len,
			  uint64_t ms, int last)
{
	(void)ms;
	dl_conn_send(c, line, len, NULL);
	if (last)
		dl_conn_end(c, DL_END_GRACEFUL, "last");
}

/* The world has no Redis, so no take-over's link is ever awaited
 * (dl_store_opening): nothing is parked. */
int dl_conn_park(struct dl_conn *c, const char *line, size_t len)
{
	(void)c;
	(void)line;
	(void)len;
	return DL_ENOMEM;
}

/* The world's daemon serves no partition: PARTITION is refused before
 * anything is awaited. */
void dl_conn_await(struct dl_conn *c)
{
	c->awaiting = 1;
}

void dl_conn_answered(struct dl_conn *c)
{
	c->awaiting = 0;
}

void dl_conn_end(struct dl_conn *c, enum dl_conn_end how, const char *why)
{
	struct fconn *f = fconn_of(c);

	(void)why;
	if (how == DL_END_ABORT)
		f->ended = 2;
	else if (!f->ended)
		f->ended = 1;
}

static int deliver_held(void *ctx, const char *text, size_t len,
			const struct dl_line *line)
{
	deliver(ctx, text, len, line);
	return 0;
}

void dl_conn_withdraw_held(struct dl_conn *c, dl_held_fn fn)
{
	dl_heldq_withdraw(&c->held, c, fn, deliver_held, fconn_of(c));
}

/* ---- hooks and set-up ---------------------------------------------------- */

static uint64_t tab_now(void *ctx)
{
	(void)ctx;
	return fake_now;
}

static void tab_event(struct dl_session *s, const struct dl_event *ev,
		      void *ctx)
{
	(void)ctx;
	dl_cmd_event(s->data, ev);
}

static void tab_change(const struct dl_change *ch, void *ctx)
{
	(void)ctx;
	dl_watch_change(&srv, ch);
}

static void committed(uint64_t epoch, void *ctx)
{
	int i;

	(void)ctx;
	for (i = 0; i < NCONN; i++)
		if (conns[i].open)
			release(&conns[i], epoch);
}

static void availability(int up, void *ctx)
{
	(void)up;
	(void)ctx;
}

/* A connection as the daemon accepts it: nothing is configured, so it
 * is the default user (access.h) from the start. */
static void conn_open(struct fconn *f, int k)
{
	const char *why = NULL;

	dl_heldq_free(&f->c.held);
	memset(f, 0, sizeof(*f));
	f->c.srv = &srv;
	f->c.id = (uint64_t)k + 1;
	snprintf(f->c.peer, sizeof(f->c.peer), "fuzz");
	snprintf(f->c.addr, sizeof(f->c.addr), "fuzz");
	CHECK(dl_access_accept(&f->c, &why) == 0 && f->c.authed, "session");
	f->open = 1;
}

static void conn_close(struct fconn *f)
{
	if (!f->open)
		return;
	dl_access_conn_end(&f->c);
	dl_watch_conn_end(&f->c);
	dl_cmd_multi_end(&f->c);
	dl_session_close(srv.tab, &f->c.sess);
	f->open = 0;
}

static void world_open(void)
{
	struct dl_locktab_hooks th = {tab_now, tab_event, NULL, tab_change};
	struct dl_store_hooks sh = {committed, availability, NULL,
				    NULL,      NULL,	     NULL};
	struct dl_locktab_limits lim = {8, 16, 0, 0};
	int k;

	memset(&srv, 0, sizeof(srv));
	dl_log_level = -1; /* quiet */
	dl_config_defaults(&srv.cfg);
	srv.cfg.persist = DL_PERSIST_NONE;
	srv.loop = uv_default_loop();
	fake_now = 1000000;
	ntokens = ntouched = 0;
	memset(last_token, 0, sizeof(last_token));
	srv.tab = dl_locktab_new(&th, &lim, 10, 0x5eed);
	srv.store = dl_store_new(srv.loop, &srv.cfg, srv.tab, &sh);
	CHECK(srv.tab && srv.store &&
		      dl_access_new(&srv.cfg, 0x5eed, &srv.access, NULL, 0) ==
			      0 &&
		      dl_watch_init(&srv, 0x5eed) == 0,
	      "set-up");
	dl_locktab_raise_token(srv.tab, dl_token_floor(0, 1795000000000ULL));
	for (k = 0; k < NCONN; k++)
		conn_open(&conns[k], k);
}

static void world_close(void)
{
	int k;

	for (k = 0; k < NCONN; k++) {
		conn_close(&conns[k]);
		dl_heldq_free(&conns[k].c.held);
		memset(&conns[k], 0, sizeof(conns[k]));
	}
	dl_watch_free(&srv);
	dl_store_free(srv.store);
	dl_access_free(srv.access);
	dl_locktab_free(srv.tab);
	dl_config_free(&srv.cfg);
}

/* ---- the program ------------------------------------------------------- */

static const char *pick(struct input *in, const char *const *v, size_t n)
{
	return v[next(in) % n];
}

/* A request of the grammar into line (NUL-terminated). */
static size_t grammar(struct input *in, char *line, size_t cap)
{
	static const char *const verbs[] = {
		"LOCK",	   "LOCK",  "TRYLOCK", "UNLOCK", "UNLOCK",
		"REFRESH", "CHECK", "CANCEL",  "STATUS", "HELLO",
		"PING",	   "STATS", "HOLDERS", "WATCH",	 "UNWATCH"};
	/* n2 a read/write lock, n3 a semaphore of 2 (with now and then a
	 * request that does not match it) */
	static const char *const modes[] = {"", " mode=shared",
					    " mode=exclusive"};
	static const char *const limits[] = {" limit=2", " limit=2", " limit=2",
					     "", " mode=shared"};
	static const char *const ttls[] = {"",	      " ttl=1",	 " ttl=10",
					   " ttl=50", " ttl=1s", " ttl=0"};
	static const char *const waits[] = {"", " wait=0", " wait=5",
					    " wait=50", " wait=inf"};
	/* request ids (a few, so that they meet again) and news of
	 * waiters */
	static const char *const extras[] = {"",
					     "",
					     " req=1",
					     " req=2",
					     " notify=waiters",
					     " req=1 notify=waiters",
					     " value=a",
					     " value=b%20c notify=waiters"};
	static const char *const owners[] = {"o1", "o2", "o3"};
	/* who the client says it is: its leases carry it (records v3) */
	static const char *const descs[] = {
		"", " host=web3 pid=4242 cmd=make%20deploy", " cmd=x%25",
		" host=h%0A"};
	const char *verb = pick(in, verbs, sizeof(verbs) / sizeof(verbs[0]));
	size_t ni = next(in) % NLOCKS;
	const char *name = names[ni];
	uint64_t token = ntokens ? tokens[next(in) % ntokens] : next(in);
	const char *tag = next(in) % 4 == 0 ? " id=t" : "";

	/* several locks at once (cmd_multi.c), now and then */
	if ((strcmp(verb, "LOCK") == 0 || strcmp(verb, "TRYLOCK") == 0) &&
	    next(in) % 4 == 0)
		return (size_t)snprintf(
			line, cap, "%s %s %s%s%s%s%s%s", verb, name,
			names[(next(in) % 3 + 1 + ni) % NLOCKS],
			next(in) % 2 ? " n0" : "", pick(in, ttls, 6),
			verb[0] == 'L' ? pick(in, waits, 5) : "",
			next(in) % 3 == 0 ? " req=1" : "", tag);
	if (strcmp(verb, "LOCK") == 0 || strcmp(verb, "TRYLOCK") == 0)
		return (size_t)snprintf(line, cap, "%s %s%s%s%s%s%s", verb,
					name, pick(in, ttls, 6),
					verb[0] == 'L' ? pick(in, waits, 5)
						       : "",
					name == names[2]   ? pick(in, modes, 3)
					: name == names[3] ? pick(in, limits, 5)
							   : "",
					pick(in, extras, 8), tag);
	if (strcmp(verb, "UNLOCK") == 0 || strcmp(verb, "REFRESH") == 0)
		touch(token);
	if (strcmp(verb, "UNLOCK") == 0 || strcmp(verb, "CHECK") == 0)
		return (size_t)snprintf(line, cap, "%s %s %llu%s", verb, name,
					(unsigned long long)token, tag);
	if (strcmp(verb, "REFRESH") == 0)
		return (size_t)snprintf(
			line, cap, "REFRESH %s %llu%s%s%s", name,
			(unsigned long long)token, pick(in, ttls, 6),
			next(in) % 4 == 0 ? " value=v" : "", tag);
	if (strcmp(verb, "HELLO") == 0)
		return (size_t)snprintf(line, cap, "HELLO owner=%s%s%s",
					pick(in, owners, 3), pick(in, descs, 4),
					tag);
	if (strcmp(verb, "PING") == 0 || strcmp(verb, "STATS") == 0)
		return (size_t)snprintf(line, cap, "%s%s", verb, tag);
	if (strcmp(verb, "WATCH") == 0 || strcmp(verb, "UNWATCH") == 0)
		return (size_t)snprintf(line, cap, "%s %s%s", verb,
					next(in) % 3 == 0   ? "*"
					: next(in) % 2 == 0 ? "n*"
							    : name,
					tag);
	return (size_t)snprintf(line, cap, "%s %s%s", verb, name, tag);
}

/* A raw line from the input: up to its first LF (or 200 bytes). */
static size_t raw(struct input *in, char *line, size_t cap)
{
	size_t n = 0, max = next(in) % 200;

	while (n < max && n + 1 < cap && in->n && *in->p != '\n')
		line[n++] = (char)next(in);
	line[n] = '\0';
	return n;
}

static void request(struct fconn *f, char *line, size_t len)
{
	size_t i;
	int blank = 1;

	if (!f->open || f->ended)
		return;
	for (i = 0; i < len; i++)
		if (line[i] != ' ' && line[i] != '\t')
			blank = 0;
	if (len > DL_LINE_MAX)
		return; /* linebuf refuses it before dispatch */
	f->sent += !blank;
	if (trace)
		fprintf(stderr, "conn %d -> %.*s\n", (int)(f - conns), (int)len,
			line);
	dl_cmd_execute(&f->c, line, len);
}

static void step(struct input *in)
{
	char line[DL_LINE_MAX + 64];
	struct fconn *f = &conns[next(in) % NCONN];
	unsigned op = next(in) % 12;
	size_t len;

	if (op <= 5) {
		len = grammar(in, line, sizeof(line));
		request(f, line, len);
	} else if (op == 6) {
		len = raw(in, line, sizeof(line));
		request(f, line, len);
	} else if (op == 7) {
		fake_now += (uint64_t)next(in) * 7;
		if (trace)
			fprintf(stderr, "clock %llu\n",
				(unsigned long long)fake_now);
		dl_locktab_run_timers(srv.tab, 1 + next(in) % 8);
	} else if (op == 8) {
		if (trace)
			fprintf(stderr, "commit\n");
		dl_store_flush(srv.store, 1); /* commits: held lines go out */
	} else if (op == 9) {
		if (trace)
			fprintf(stderr, "persistence down\n");
		dl_locktab_suspend_grants(srv.tab, 1);
		for (int k = 0; k < NCONN; k++)
			if (conns[k].open)
				dl_cmd_break_hold(&conns[k].c);
	} else if (op == 10) {
		if (trace)
			fprintf(stderr, "persistence up\n");
		dl_locktab_suspend_grants(srv.tab, 0);
	} else {
		if (trace)
			fprintf(stderr, "conn %d closes\n", (int)(f - conns));
		conn_close(f);
		conn_open(f, (int)(f - conns));
	}
}

/* After every step: what must always hold. */
static void check_world(void)
{
	char why[256];
	int k;

	CHECK(dl_locktab_verify(srv.tab, why, sizeof(why)) == 0, "%s", why);
	for (k = 0; k < NCONN; k++) {
		struct fconn *f = &conns[k];
		uint64_t held = 0;
		size_t i;

		if (!f->open || f->ended)
			continue;
		for (i = 0; i < f->c.held.n; i++)
			held++;
		CHECK(f->answered <= f->sent, "more replies than requests");
		CHECK(held || f->answered == f->sent,
		      "a request without a reply (%llu sent, %llu answered)",
		      (unsigned long long)f->sent,
		      (unsigned long long)f->answered);
		CHECK(f->answered + held >= f->sent,
		      "a request without a reply (%llu sent, %llu answered, "
		      "%llu lines held)",
		      (unsigned long long)f->sent,
		      (unsigned long long)f->answered,
		      (unsigned long long)held);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = {data, size};

	trace = getenv("FUZZ_TRACE") != NULL;
	world_open();
	while (in.n > 0) {
		step(&in);
		dl_cmd_multi_run(&srv); /* as the flush point does */
		check_world();
	}
	dl_store_flush(srv.store, 1);
	check_world();
	world_close();
	return 0;
}
