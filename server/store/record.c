/* SPDX-License-Identifier: MIT */
/*
 * record.c -- lock records for Redis (see record.h).
 *
 * The parser is as strict as the request parser: a record it cannot read
 * fully is never half-restored, since a lease silently dropped is a lock
 * granted twice. The loader logs it with its key and holds the lock as
 * busy for as long as any lease may last (store_load.c, quarantine).
 */
#include "server/store/record.h"

#include <stdlib.h>
#include <string.h>

#include "proto/desc.h"

/* Words on one H or W line: the seven of version 2, k=, id=, the seven
 * of version 3 (warn=, req=, notify=, since=, host=, pid=, cmd=), and
 * room for what a later version adds (record.h). A line with more is
 * unreadable. */
#define WORDS_MAX 24

static void add_u64(struct dl_buf *b, uint64_t v)
{
	b->len += dl_u64_to_dec(v, b->p + b->len);
}

static void add_str(struct dl_buf *b, const char *p, size_t n)
{
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static uint64_t to_wall(uint64_t mono, int64_t off)
{
	int64_t w = (int64_t)mono + off;

	return w < 0 ? 0 : (uint64_t)w;
}

/* Longest H or W line: letter, 4 numbers, mode, owner, proof, warning,
 * tag, separators; and a description with its since=. */
#define LINE_ROOM                                                              \
	(2 + 4 * 21 + 2 + DL_OWNER_KEY_MAX + 3 + 2 * DL_OWNER_PROOF_LEN + 6 +  \
	 21 + 4 + DL_TAG_MAX + 2 + DESC_ROOM + REQ_ROOM)
/* " req=<u64> notify=waiters value=<text>" */
#define REQ_ROOM  (5 + 20 + 15 + 7 + DL_VALUE_MAX)
#define DESC_ROOM (7 + 20 + 6 + DL_DESC_HOST_MAX + 5 + 10 + 5 + DL_DESC_CMD_MAX)

/* Version 1 can say it: an exclusive lock, nobody shared, no delay. */
static int plain(const struct dl_lock *lk)
{
	const struct dl_waiter *w;

	if (lk->limit != 1 || lk->has_delay ||
	    (lk->holders && lk->holders->shared))
		return 0;
	for (w = lk->qhead; w; w = w->qnext)
		if (w->shared)
			return 0;
	return 1;
}

/* The warning a holder's line says (0: none): below its TTL, as a
 * restore wants it -- a shortening applied after a later warn= may leave
 * them crossed (the warning then fired at once). */
static uint32_t line_warn(const struct dl_locktab *t, const struct dl_lease *l)
{
	uint32_t warn = dl_locktab_lease_warn(t, l);

	return warn < l->ttl_ms ? warn : 0;
}

/* Version 3 is needed: a holder described itself, has a warning, a
 * request id or asked to be told of waiters. */
static int keyed(const struct dl_locktab *t, const struct dl_lock *lk)
{
	const struct dl_lease *l;

	for (l = lk->holders; l; l = l->next)
		if (l->has_desc || line_warn(t, l) || dl_lease_req(l) ||
		    dl_locktab_lease_notify(t, l) ||
		    dl_locktab_lease_value(t, l).len)
			return 1;
	return 0;
}

static void add_mode(struct dl_buf *b, int modes, int shared)
{
	if (modes)
		add_str(b, shared ? " s" : " x", 2);
}

static void add_kv(struct dl_buf *b, const char *key, struct dl_str v)
{
	add_str(b, " ", 1);
	add_str(b, key, strlen(key));
	add_str(b, "=", 1);
	add_str(b, v.p, v.len);
}

/* Version 3: since=<unix ms> and the holder's description. */
static void add_desc(struct dl_buf *b, const struct dl_lease *l,
		     int64_t wall_off)
{
	const struct dl_desc *d = dl_lease_desc(l);

	add_str(b, " since=", 7);
	add_u64(b, to_wall(l->granted_at, wall_off));
	if (!d)
		return;
	if (d->host_len)
		add_kv(b, "host", dl_desc_host(d));
	if (d->pid) {
		add_str(b, " pid=", 5);
		add_u64(b, d->pid);
	}
	if (d->cmd_len)
		add_kv(b, "cmd", dl_desc_cmd(d));
}

/* " k=<hex>" when the owner has a proof. */
static void add_proof(struct dl_buf *b, const struct dl_owner *o)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = dl_owner_proof(o);
	char t[3 + 2 * DL_OWNER_PROOF_LEN];
	size_t i;

	if (!p)
		return;
	memcpy(t, " k=", 3);
	for (i = 0; i < DL_OWNER_PROOF_LEN; i++) {
		t[3 + 2 * i] = hex[p[i] >> 4];
		t[4 + 2 * i] = hex[p[i] & 15];
	}
	add_str(b, t, sizeof(t));
}

int dl_record_format(const struct dl_locktab *t, const struct dl_lock *lk,
		     int64_t wall_off, struct dl_buf *b)
{
	const struct dl_lease *l;
	const struct dl_waiter *w;
	struct dl_str o, tg, val;
	uint32_t warn, delay = dl_locktab_lock_delay(t, lk, NULL);
	int v4 = delay != 0, v3 = v4 || keyed(t, lk), v2 = v3 || !plain(lk);

	b->len = 0;
	if (dl_buf_reserve(b, sizeof(DL_RECORD_MAGIC2) + 8 + 21 + 7 + 21 + 8 +
				      (size_t)(lk->nholders + lk->nwaiters) *
					      LINE_ROOM))
		return DL_ENOMEM;
	if (v2) {
		add_str(b,
			v4   ? DL_RECORD_MAGIC4 " limit="
			: v3 ? DL_RECORD_MAGIC3 " limit="
			     : DL_RECORD_MAGIC2 " limit=",
			sizeof(DL_RECORD_MAGIC2 " limit=") - 1);
		add_u64(b, lk->limit);
		if (v4) {
			add_str(b, " delay=", 7);
			add_u64(b, delay);
			if (lk->delaying)
				add_str(b, " running", 8);
		}
	} else {
		add_str(b, DL_RECORD_MAGIC, sizeof(DL_RECORD_MAGIC) - 1);
	}
	for (l = lk->holders; l; l = l->next) {
		add_str(b, "\nH ", 3);
		add_u64(b, l->token);
		add_str(b, " ", 1);
		add_u64(b, to_wall(l->timer.expires, wall_off));
		add_str(b, " ", 1);
		add_u64(b, l->count);
		add_str(b, " ", 1);
		add_u64(b, l->ttl_ms);
		add_mode(b, v2, l->shared);
		add_str(b, " ", 1);
		o = dl_owner_id(l->owner);
		add_str(b, o.p, o.len);
		add_proof(b, l->owner);
		if (v3 && (warn = line_warn(t, l)) != 0) {
			add_str(b, " warn=", 6);
			add_u64(b, warn);
		}
		if (v3 && dl_lease_req(l)) {
			add_str(b, " req=", 5);
			add_u64(b, dl_lease_req(l));
		}
		if (v3 && dl_locktab_lease_notify(t, l))
			add_str(b, " notify=waiters", 15);
		if (v3 && (val = dl_locktab_lease_value(t, l)).len) {
			add_str(b, " value=", 7);
			add_str(b, val.p, val.len);
		}
		tg = dl_lease_tag(l);
		if (tg.len) {
			add_str(b, " id=", 4);
			add_str(b, tg.p, tg.len);
		}
		if (v3)
			add_desc(b, l, wall_off);
	}
	for (w = lk->qhead; w; w = w->qnext) {
		add_str(b, "\nW ", 3);
		add_u64(b, w->ttl_ms);
		add_str(b, " ", 1);
		if (w->wait_deadline == UINT64_MAX)
			add_str(b, "inf", 3);
		else
			add_u64(b, to_wall(w->wait_deadline, wall_off));
		add_mode(b, v2, w->shared);
		add_str(b, " ", 1);
		o = dl_owner_id(w->owner);
		add_str(b, o.p, o.len);
		add_proof(b, w->owner);
		if (w->tag_len) {
			add_str(b, " id=", 4);
			add_str(b, w->tag, w->tag_len);
		}
	}
	return 0;
}

/* Split one line into at most `max` space-separated words. */
static int split(const char *p, const char *end, struct dl_str *w, int max)
{
	int n = 0;
	const char *s;

	while (p < end) {
		if (n == max)
			return -1;
		s = p;
		while (p < end && *p != ' ')
			p++;
		if (p == s)
			return -1; /* empty word: double space */
		w[n++] = (struct dl_str){s, (size_t)(p - s)};
		if (p < end)
			p++;
	}
	return n;
}

static int num(struct dl_str s, uint64_t *v)
{
	return dl_parse_u64(s.p, s.len, v);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* The value of w if it is key=<value>. */
static int kv_of(struct dl_str w, const char *key, struct dl_str *v)
{
	size_t n = strlen(key);

	if (w.len <= n || w.p[n] != '=' || memcmp(w.p, key, n) != 0)
		return 0;
	*v = (struct dl_str){w.p + n + 1, w.len - n - 1};
	return 1;
}

static int proof_of(struct dl_str v, struct dl_record_item *it)
{
	size_t i;
	int hi, lo;

	if (it->has_proof || v.len != 2 * DL_OWNER_PROOF_LEN)
		return -1;
	for (i = 0; i < DL_OWNER_PROOF_LEN; i++) {
		hi = hexval(v.p[2 * i]);
		lo = hexval(v.p[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		it->proof[i] = (uint8_t)(hi << 4 | lo);
	}
	it->has_proof = 1;
	return 0;
}

/* One key=<value> word after the owner, in version 3: a known key once
 * and valid, an unknown one skipped (record.h). */
static int extra_v3(struct dl_str w, struct dl_record_item *it)
{
	struct dl_str v;
	uint64_t n;

	if (kv_of(w, "k", &v))
		return proof_of(v, it);
	if (kv_of(w, "id", &v)) {
		if (it->tag.len || dl_check_tag(v.p, v.len))
			return -1;
		it->tag = v;
		return 0;
	}
	if (it->kind == 'H' && kv_of(w, "warn", &v))
		return it->warn_ms || dl_parse_u64(v.p, v.len, &it->warn_ms) ||
				       it->warn_ms == 0 ||
				       it->warn_ms > UINT32_MAX
			       ? -1
			       : 0;
	if (it->kind == 'H' && kv_of(w, "req", &v))
		return it->req || dl_parse_u64(v.p, v.len, &it->req) ||
				       it->req == 0
			       ? -1
			       : 0;
	if (it->kind == 'H' && kv_of(w, "value", &v)) {
		if (it->value.len || dl_desc_check(v.p, v.len, DL_VALUE_MAX))
			return -1;
		it->value = v;
		return 0;
	}
	if (it->kind == 'H' && kv_of(w, "notify", &v)) {
		if (it->notify || v.len != 7 || memcmp(v.p, "waiters", 7))
			return -1;
		it->notify = 1;
		return 0;
	}
	if (kv_of(w, "since", &v))
		return it->since || dl_parse_u64(v.p, v.len, &it->since) ||
				       it->since == 0
			       ? -1
			       : 0;
	if (kv_of(w, "host", &v)) {
		if (it->host.len || dl_desc_check(v.p, v.len, DL_DESC_HOST_MAX))
			return -1;
		it->host = v;
		return 0;
	}
	if (kv_of(w, "cmd", &v)) {
		if (it->cmd.len || dl_desc_check(v.p, v.len, DL_DESC_CMD_MAX))
			return -1;
		it->cmd = v;
		return 0;
	}
	if (kv_of(w, "pid", &v)) {
		if (it->pid || dl_parse_u64(v.p, v.len, &n) || n == 0 ||
		    n > DL_DESC_PID_MAX)
			return -1;
		it->pid = (uint32_t)n;
		return 0;
	}
	/* a later version's: a key and a value */
	return memchr(w.p, '=', w.len) && w.p[0] != '=' ? 0 : -1;
}

/* What may follow the owner: k=<proof, hex> then id=<tag>, each
 * optional; from version 3 on, also warn= (a holder's), since=, host=,
 * pid=, cmd= and what a later version adds, in any order. */
static int extras_of(const struct dl_str *w, int n, int at,
		     struct dl_record_item *it, int v3)
{
	struct dl_str v;

	it->tag = DL_STR_NULL;
	if (v3) {
		for (; at < n; at++)
			if (extra_v3(w[at], it))
				return -1;
		return 0;
	}
	if (at < n && kv_of(w[at], "k", &v)) {
		if (proof_of(v, it))
			return -1;
		at++;
	}
	if (n == at)
		return 0;
	if (n != at + 1 || !kv_of(w[at], "id", &v) || !v.len)
		return -1;
	it->tag = v;
	return dl_check_tag(it->tag.p, it->tag.len) ? -1 : 0;
}

/* "<key>=<number>" in w, the number within 1..max. */
static int kv_num(struct dl_str w, const char *key, uint64_t max, uint64_t *n)
{
	struct dl_str v;

	return !kv_of(w, key, &v) || dl_parse_u64(v.p, v.len, n) || *n == 0 ||
			       *n > max
		       ? -1
		       : 0;
}

/* The version line: 1; 2 or 3 with the lock's limit; 4 with its limit
 * and its delay (as a 'D' item in *d; kind 0 when it has none). */
static int parse_version(const char *text, const char *eol, int *version,
			 struct dl_record_item *d)
{
	size_t len = (size_t)(eol - text), m = sizeof(DL_RECORD_MAGIC) - 1;
	struct dl_str w[4];
	uint64_t n;
	int nw;

	memset(d, 0, sizeof(*d));
	d->limit = 1;
	*version = 1;
	if (len == m && memcmp(text, DL_RECORD_MAGIC, m) == 0)
		return 0;
	nw = split(text, eol, w, 4);
	if (nw < 2 || w[0].len != m)
		return -1;
	if (memcmp(w[0].p, DL_RECORD_MAGIC2, m) == 0)
		*version = 2;
	else if (memcmp(w[0].p, DL_RECORD_MAGIC3, m) == 0)
		*version = 3;
	else if (memcmp(w[0].p, DL_RECORD_MAGIC4, m) == 0)
		*version = 4;
	else
		return -1;
	if (kv_num(w[1], "limit", DL_LIMIT_MAX, &n))
		return -1;
	d->limit = (uint32_t)n;
	if (*version < 4)
		return nw == 2 ? 0 : -1;
	if (nw < 3 || kv_num(w[2], "delay", DL_LOCK_DELAY_MAX_MS, &d->ttl_ms) ||
	    (nw == 4 && (w[3].len != 7 || memcmp(w[3].p, "running", 7))))
		return -1;
	d->kind = 'D';
	d->delay_running = nw == 4;
	return 0;
}

/* The mode word of a version-2 line. */
static int mode_of(struct dl_str w, uint8_t *shared)
{
	if (w.len != 1 || (w.p[0] != 'x' && w.p[0] != 's'))
		return -1;
	*shared = w.p[0] == 's';
	return 0;
}

int dl_record_parse(const char *text, size_t len,
		    int (*cb)(const struct dl_record_item *it, void *arg),
		    void *arg, const char **why)
{
	const char *p, *end = text + len, *eol;
	struct dl_record_item it, d;
	struct dl_str w[WORDS_MAX];
	uint32_t limit;
	int n, r, v2, v3, o, version;

	*why = "bad version line";
	eol = memchr(text, '\n', len);
	if (!eol)
		eol = end;
	if (parse_version(text, eol, &version, &d))
		return DL_EPROTO;
	limit = d.limit;
	v2 = version >= 2; /* lines have a mode */
	v3 = version >= 3; /* and key=<value> words after the owner */
	*why = NULL;
	if (d.kind && (r = cb(&d, arg)) != 0)
		return r;
	p = eol;
	while (p < end) {
		p++; /* the LF */
		eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		memset(&it, 0, sizeof(it));
		it.limit = limit;
		n = split(p, eol, w, WORDS_MAX);
		*why = "bad holder line";
		if (n >= 6 + v2 && w[0].len == 1 && w[0].p[0] == 'H') {
			it.kind = 'H';
			o = 5 + v2;
			if (num(w[1], &it.token) || num(w[2], &it.deadline) ||
			    num(w[3], &it.count) || num(w[4], &it.ttl_ms) ||
			    (v2 && mode_of(w[5], &it.shared)) ||
			    extras_of(w, n, o + 1, &it, v3))
				return DL_EPROTO;
			it.owner = w[o];
		} else if (n >= 4 + v2 && w[0].len == 1 && w[0].p[0] == 'W') {
			*why = "bad waiter line";
			it.kind = 'W';
			o = 3 + v2;
			if (w[2].len == 3 && memcmp(w[2].p, "inf", 3) == 0)
				it.deadline = UINT64_MAX;
			else if (num(w[2], &it.deadline))
				return DL_EPROTO;
			if (num(w[1], &it.ttl_ms) ||
			    (v2 && mode_of(w[3], &it.shared)) ||
			    extras_of(w, n, o + 1, &it, v3))
				return DL_EPROTO;
			it.owner = w[o];
		} else {
			*why = "unknown line";
			return DL_EPROTO;
		}
		*why = "bad mode";
		if (it.shared && limit != 1)
			return DL_EPROTO;
		*why = "bad owner";
		if (dl_owner_key_check(it.owner))
			return DL_EPROTO;
		*why = NULL;
		if ((r = cb(&it, arg)) != 0)
			return r;
		p = eol;
	}
	*why = NULL;
	return 0;
}
