/* SPDX-License-Identifier: MIT */
/*
 * fuzz_proto.c -- libFuzzer target for the wire codec.
 *
 * Input: byte 0 holds flags, bytes 0..3 seed the chunking, byte 1 a repeat
 * count; the whole input is the byte stream. When flags 0xc0 are set the
 * stream is the input repeated up to 256 times (at most 192 KiB), so that
 * DL_LB_OVERFLOW (64 KiB without a LF) is reachable with small inputs;
 * with 0x20 too, LFs are kept only in the last copy, which makes very long
 * lines that do end. Only the lines of about the first copy are parsed:
 * the others are the same lines again.
 *
 * The stream is split three ways and the three results must agree:
 *   1. a dl_linebuf fed in chunks whose sizes come from the seed;
 *   2. a dl_linebuf fed as much as it will take per read;
 *   3. a direct model of the rules (cut at LF, strip one CR, > DL_LINE_MAX
 *      is too long, DL_LINE_DISCARD_MAX bytes without LF is the end).
 *
 * Every line of run 1 goes through dl_parse_request, dl_parse_reply and the
 * scalar parsers; the results are checked against their contracts (strings
 * inside the line, names that pass dl_check_name, static reasons on
 * failure, ...) and formatted back with dl_fmt_*, which must parse to the
 * same request or reply. The raw input also goes through the description
 * encoder (proto/desc.h), which must make a valid value of any bytes. A
 * violation calls abort().
 *
 * Build and run (from the top of the tree):
 *   clang -std=c11 -D_GNU_SOURCE -I. -g -O1 \
 *     -fsanitize=fuzzer,address,undefined \
 *     tests/fuzz/fuzz_proto.c proto/proto.c proto/desc.c -o build/fuzz_proto
 *   build/fuzz_proto -max_total_time=60
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/desc.h"
#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			abort();                                               \
	} while (0)

/* ---- the stream ---------------------------------------------------------- */

struct stream {
	const uint8_t *data;
	size_t size;  /* bytes of one copy */
	size_t total; /* bytes of the stream: copies, the last maybe cut */
	int lf_last;  /* LFs are 'x' but in the last `size` bytes */
};

static uint8_t stream_at(const struct stream *s, size_t off)
{
	uint8_t b = s->data[off % s->size];

	if (b == '\n' && s->lf_last && off < s->total - s->size)
		b = 'x';
	return b;
}

static void stream_copy(const struct stream *s, size_t off, char *dst, size_t n)
{
	size_t i;

	if (s->lf_last) {
		for (i = 0; i < n; i++)
			dst[i] = (char)stream_at(s, off + i);
		return;
	}
	while (n > 0) {
		size_t at = off % s->size;
		size_t k = s->size - at < n ? s->size - at : n;

		memcpy(dst, s->data + at, k);
		dst += k;
		off += k;
		n -= k;
	}
}

/* ---- event digest: what a splitter produced, in order -------------------- */

struct digest {
	uint64_t h;
	size_t events;
};

static void digest_init(struct digest *d)
{
	d->h = 14695981039346656037ULL;
	d->events = 0;
}

static void digest_bytes(struct digest *d, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++) {
		d->h ^= b[i];
		d->h *= 1099511628211ULL;
	}
}

static void digest_event(struct digest *d, enum dl_lb_result kind,
			 const char *line, size_t len)
{
	unsigned char k = (unsigned char)kind;

	d->events++;
	digest_bytes(d, &k, 1);
	digest_bytes(d, &len, sizeof(len));
	if (line)
		digest_bytes(d, line, len);
}

/* ---- checks on one request ----------------------------------------------- */

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static void check_within(struct dl_str s, const char *line, size_t len)
{
	if (s.len == 0)
		return;
	CHECK(s.p != NULL);
	CHECK(s.p >= line && s.p + s.len <= line + len);
}

static int str_same(struct dl_str a, struct dl_str b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static int has_name(enum dl_verb v)
{
	return (v >= DL_VERB_LOCK && v <= DL_VERB_STATUS) ||
	       v == DL_VERB_BREAK || v == DL_VERB_HOLDERS ||
	       v == DL_VERB_RECLAIM;
}

/* LOCKS: its prefix, in r.name, may be absent; WATCH, UNWATCH: "*" is
 * the empty prefix */
static int may_have_name(enum dl_verb v)
{
	return has_name(v) || v == DL_VERB_LOCKS || v == DL_VERB_WATCH ||
	       v == DL_VERB_UNWATCH;
}

static int has_token(enum dl_verb v)
{
	return v == DL_VERB_UNLOCK || v == DL_VERB_REFRESH ||
	       v == DL_VERB_CHECK || v == DL_VERB_BREAK || v == DL_VERB_RECLAIM;
}

/* the verbs that take or restore a lease: mode=, limit=, delay= */
static int takes_lease(enum dl_verb v)
{
	return v == DL_VERB_LOCK || v == DL_VERB_TRYLOCK ||
	       v == DL_VERB_RECLAIM;
}

/* Format r as a canonical request line; the result must parse to r. */
static void request_round_trip(const struct dl_request *r)
{
	char buf[4096];
	struct dl_fmt f;
	struct dl_request r2;
	const char *why = NULL;
	int n;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, dl_verb_name(r->verb));
	if (r->prefix) {
		dl_fmt_str(&f, r->name);
		/* the '*' right after the prefix, no space */
		if (f.len < sizeof(buf))
			buf[f.len++] = '*';
	} else if (has_name(r->verb) || r->name.len > 0) {
		dl_fmt_str(&f, r->name);
	}
	if (has_token(r->verb))
		dl_fmt_u64(&f, r->token);
	if (r->user.len > 0)
		dl_fmt_str(&f, r->user);
	if (r->arg.len > 0)
		dl_fmt_str(&f, r->arg);
	if (r->has_ttl)
		dl_fmt_kv_u64(&f, "ttl", r->ttl_ms);
	if (r->has_wait && r->verb != DL_VERB_TRYLOCK) {
		if (r->wait_ms == DL_WAIT_INF)
			dl_fmt_kv_str(&f, "wait", DL_STR_LIT("inf"));
		else
			dl_fmt_kv_u64(&f, "wait", r->wait_ms);
	}
	if (r->owner.len > 0)
		dl_fmt_kv_str(&f, "owner", r->owner);
	if (r->has_limit)
		dl_fmt_kv_u64(&f, "limit", r->limit);
	if (r->after.len > 0)
		dl_fmt_kv_str(&f, "after", r->after);
	if (r->by_waiters)
		dl_fmt_word(&f, "by=waiters");
	if (r->shared)
		dl_fmt_word(&f, "mode=shared");
	if (r->desc_host.len > 0)
		dl_fmt_kv_str(&f, "host", r->desc_host);
	if (r->desc_pid)
		dl_fmt_kv_u64(&f, "pid", r->desc_pid);
	if (r->desc_cmd.len > 0)
		dl_fmt_kv_str(&f, "cmd", r->desc_cmd);
	if (r->owner_secret.len > 0)
		dl_fmt_kv_str(&f, "key", r->owner_secret);
	if (r->reason.len > 0)
		dl_fmt_kv_str(&f, "reason", r->reason);
	if (r->has_warn)
		dl_fmt_kv_u64(&f, "warn", r->warn_ms);
	if (r->has_delay)
		dl_fmt_kv_u64(&f, "delay", r->delay_ms);
	if (r->proof.len > 0)
		dl_fmt_kv_str(&f, "proof", r->proof);
	if (r->has_until)
		dl_fmt_kv_u64(&f, "until", r->until);
	if (r->holds)
		dl_fmt_kv_u64(&f, "holds", r->holds);
	if (r->req)
		dl_fmt_kv_u64(&f, "req", r->req);
	if (r->notify_waiters)
		dl_fmt_word(&f, "notify=waiters");
	if (r->value.len > 0)
		dl_fmt_kv_str(&f, "value", r->value);
	n = dl_fmt_end(&f, r->tag);
	CHECK(n >= 2);
	CHECK(buf[n - 2] == '\r' && buf[n - 1] == '\n' && buf[n] == '\0');

	CHECK(dl_parse_request(buf, (size_t)n - 2, &r2, &why) == 0);
	CHECK(r2.verb == r->verb);
	CHECK(str_same(r2.name, r->name));
	CHECK(r2.token == r->token);
	CHECK(r2.has_ttl == r->has_ttl && r2.ttl_ms == r->ttl_ms);
	CHECK(r2.has_wait == r->has_wait && r2.wait_ms == r->wait_ms);
	CHECK(str_same(r2.tag, r->tag));
	CHECK(str_same(r2.owner, r->owner));
	CHECK(str_same(r2.arg, r->arg));
	CHECK(r2.has_limit == r->has_limit && r2.limit == r->limit);
	CHECK(str_same(r2.after, r->after));
	CHECK(r2.by_waiters == r->by_waiters);
	CHECK(r2.shared == r->shared);
	CHECK(r2.prefix == r->prefix);
	CHECK(r2.has_desc == r->has_desc);
	CHECK(str_same(r2.desc_host, r->desc_host));
	CHECK(str_same(r2.desc_cmd, r->desc_cmd));
	CHECK(r2.desc_pid == r->desc_pid);
	CHECK(str_same(r2.owner_secret, r->owner_secret));
	CHECK(str_same(r2.user, r->user));
	CHECK(str_same(r2.reason, r->reason));
	CHECK(r2.has_warn == r->has_warn && r2.warn_ms == r->warn_ms);
	CHECK(r2.has_delay == r->has_delay && r2.delay_ms == r->delay_ms);
	CHECK(str_same(r2.proof, r->proof));
	CHECK(r2.has_until == r->has_until && r2.until == r->until);
	CHECK(r2.holds == r->holds);
	CHECK(r2.req == r->req);
	CHECK(r2.notify_waiters == r->notify_waiters);
	CHECK(str_same(r2.value, r->value));
}

static void check_request(const char *line, size_t len)
{
	struct dl_request r;
	const char *why = NULL;
	int rc = dl_parse_request(line, len, &r, &why);
	size_t i;

	CHECK(rc == 0 || rc == DL_EBADFORMAT || rc == DL_EUNKNOWNCMD ||
	      rc == DL_EBADARG);
	check_within(r.tag, line, len);
	if (r.tag.len > 0)
		CHECK(dl_check_tag(r.tag.p, r.tag.len) == 0);
	if (memchr(line, '\0', len)) {
		CHECK(rc == DL_EBADFORMAT);
		CHECK(r.tag.len == 0);
	}
	if (rc < 0) {
		CHECK(why != NULL && why[0] != '\0');
		/* the request's own buffer, never a pointer into the input;
		 * printable ASCII only (it goes back in an ERR line) */
		CHECK(why == r.why);
		for (i = 0; why[i]; i++)
			CHECK(why[i] >= 0x20 && why[i] <= 0x7e);
		return;
	}

	CHECK((unsigned)r.verb < DL_VERB_COUNT_);
	if (r.verb == DL_VERB_NONE) {
		for (i = 0; i < len; i++)
			CHECK(is_blank(line[i]));
		return;
	}
	check_within(r.name, line, len);
	check_within(r.owner, line, len);
	check_within(r.arg, line, len);
	if (has_name(r.verb) || (may_have_name(r.verb) && r.name.len))
		CHECK(dl_check_name(r.name.p, r.name.len) == 0);
	else
		CHECK(r.name.len == 0);
	check_within(r.after, line, len);
	if (r.after.len)
		CHECK(r.verb == DL_VERB_LOCKS && !r.by_waiters &&
		      dl_check_name(r.after.p, r.after.len) == 0);
	if (r.has_limit && r.verb == DL_VERB_LOCKS)
		CHECK(r.limit >= 1 && r.limit <= DL_LOCKS_PAGE_MAX);
	else if (r.has_limit)
		CHECK(takes_lease(r.verb) && r.limit >= 1 &&
		      r.limit <= DL_LIMIT_MAX);
	if (r.shared)
		CHECK(takes_lease(r.verb) && (!r.has_limit || r.limit == 1));
	if (r.has_delay)
		CHECK(takes_lease(r.verb) &&
		      r.delay_ms <= DL_LOCK_DELAY_MAX_MS);
	else
		CHECK(r.delay_ms == 0);
	if (r.has_warn)
		CHECK((takes_lease(r.verb) || r.verb == DL_VERB_REFRESH) &&
		      (!r.has_ttl || r.warn_ms == 0 || r.warn_ms < r.ttl_ms));
	else
		CHECK(r.warn_ms == 0);
	/* what only RECLAIM carries: a grant's proof, until and holds */
	check_within(r.proof, line, len);
	if (r.proof.len > 0) {
		CHECK(r.verb == DL_VERB_RECLAIM && r.proof.len == DL_PROOF_LEN);
		for (i = 0; i < r.proof.len; i++)
			CHECK((r.proof.p[i] >= '0' && r.proof.p[i] <= '9') ||
			      (r.proof.p[i] >= 'a' && r.proof.p[i] <= 'f'));
	}
	if (r.has_until)
		CHECK(r.verb == DL_VERB_RECLAIM && r.until > 0);
	else
		CHECK(r.until == 0);
	if (r.holds)
		CHECK(r.verb == DL_VERB_RECLAIM && r.holds <= DL_REENTRY_MAX);
	/* BREAK's audited reason, HELLO's key, AUTH's user */
	check_within(r.reason, line, len);
	if (r.verb == DL_VERB_BREAK)
		CHECK(r.reason.len > 0 && r.reason.len <= DL_REASON_MAX);
	else
		CHECK(r.reason.len == 0);
	for (i = 0; i < r.reason.len; i++)
		CHECK(r.reason.p[i] > 0x20 && r.reason.p[i] < 0x7f);
	check_within(r.owner_secret, line, len);
	if (r.owner_secret.len > 0)
		CHECK(r.verb == DL_VERB_HELLO &&
		      dl_check_owner_secret(r.owner_secret.p,
					    r.owner_secret.len) == 0);
	check_within(r.user, line, len);
	if (r.user.len > 0)
		CHECK(r.verb == DL_VERB_AUTH &&
		      dl_check_user(r.user.p, r.user.len) == 0);
	if (r.by_waiters)
		CHECK(r.verb == DL_VERB_LOCKS);
	if (!has_token(r.verb))
		CHECK(r.token == 0);
	if (r.owner.len > 0) {
		CHECK(r.verb == DL_VERB_HELLO);
		CHECK(dl_check_owner(r.owner.p, r.owner.len) == 0);
	}
	/* a description: only HELLO's, and only what the rule lets through
	 * (it goes into replies, records and logs as it came) */
	check_within(r.desc_host, line, len);
	check_within(r.desc_cmd, line, len);
	if (r.has_desc) {
		CHECK(r.verb == DL_VERB_HELLO);
		CHECK(r.desc_host.len > 0 || r.desc_cmd.len > 0 ||
		      r.desc_pid > 0);
		if (r.desc_host.len > 0)
			CHECK(dl_desc_check(r.desc_host.p, r.desc_host.len,
					    DL_DESC_HOST_MAX) == 0);
		if (r.desc_cmd.len > 0)
			CHECK(dl_desc_check(r.desc_cmd.p, r.desc_cmd.len,
					    DL_DESC_CMD_MAX) == 0);
		CHECK(r.desc_pid <= DL_DESC_PID_MAX);
	} else {
		CHECK(r.desc_host.len == 0 && r.desc_cmd.len == 0 &&
		      r.desc_pid == 0);
	}
	if (r.has_ttl)
		CHECK(r.ttl_ms >= 1 && r.ttl_ms <= DL_DURATION_MAX_MS);
	else
		CHECK(r.ttl_ms == 0);
	if (r.has_wait)
		CHECK(r.wait_ms <= DL_DURATION_MAX_MS ||
		      r.wait_ms == DL_WAIT_INF);
	if (r.verb == DL_VERB_TRYLOCK)
		CHECK(r.has_wait && r.wait_ms == 0);
	if (r.verb == DL_VERB_AUTH)
		CHECK(r.arg.len > 0);
	else if (r.verb != DL_VERB_PING && r.verb != DL_VERB_HELP)
		CHECK(r.arg.len == 0);
	for (i = 0; i < r.arg.len; i++)
		CHECK(!is_blank(r.arg.p[i]) && r.arg.p[i] != '\0');
	request_round_trip(&r);
}

/* ---- checks on one reply ------------------------------------------------- */

static const char *const kind_words[] = {"OK", "NO", "ERR", "*"};

static void check_word(struct dl_str w, const char *line, size_t len)
{
	size_t i;

	CHECK(w.len > 0);
	check_within(w, line, len);
	for (i = 0; i < w.len; i++)
		CHECK(!is_blank(w.p[i]));
}

static void reply_round_trip(const struct dl_reply *r)
{
	char buf[4096];
	struct dl_fmt f;
	struct dl_reply r2;
	int n, i;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, kind_words[r->kind]);
	dl_fmt_str(&f, r->word);
	for (i = 0; i < r->argc; i++)
		dl_fmt_str(&f, r->argv[i]);
	n = dl_fmt_end(&f, r->tag);
	CHECK(n >= 2);
	CHECK(buf[n] == '\0');

	CHECK(dl_parse_reply(buf, (size_t)n - 2, &r2) == 0);
	CHECK(r2.kind == r->kind);
	CHECK(str_same(r2.word, r->word));
	CHECK(r2.argc == r->argc);
	for (i = 0; i < r->argc; i++)
		CHECK(str_same(r2.argv[i], r->argv[i]));
	CHECK(str_same(r2.tag, r->tag));
	CHECK(r2.rest.len <= r->rest.len);
}

static void check_reply(const char *line, size_t len)
{
	struct dl_reply r;
	int rc = dl_parse_reply(line, len, &r);
	int i;

	CHECK(rc == 0 || rc == DL_EPROTO);
	if (rc < 0)
		return;
	CHECK(!memchr(line, '\0', len));
	CHECK((unsigned)r.kind <= DL_REPLY_EVENT);
	check_word(r.word, line, len);
	CHECK(r.argc >= 0 && r.argc <= DL_REPLY_ARGS_MAX);
	for (i = 0; i < r.argc; i++) {
		struct dl_str v;
		uint64_t u;
		const char *eq;

		check_word(r.argv[i], line, len);
		CHECK(r.argv[i].p > r.word.p);
		if (i > 0)
			CHECK(r.argv[i].p > r.argv[i - 1].p);
		if (dl_reply_u64(&r, i, &u) == 0)
			CHECK(dl_parse_u64(r.argv[i].p, r.argv[i].len, &u) ==
			      0);
		eq = memchr(r.argv[i].p, '=', r.argv[i].len);
		if (eq && eq > r.argv[i].p) {
			char key[DL_LINE_MAX + 1];
			size_t klen = (size_t)(eq - r.argv[i].p);

			memcpy(key, r.argv[i].p, klen);
			key[klen] = '\0';
			CHECK(dl_reply_kv(&r, key, &v) == 0);
			check_within(v, line, len);
			CHECK(v.p[-1] == '=');
		}
	}
	if (r.argc > 0) {
		const struct dl_str *last = &r.argv[r.argc - 1];

		/* without a tag, the last word cannot look like one */
		if (r.tag.p == NULL)
			CHECK(!(last->len >= 3 &&
				memcmp(last->p, "id=", 3) == 0));
		CHECK(r.rest.p == r.argv[0].p);
		CHECK(r.rest.p + r.rest.len == last->p + last->len);
	} else {
		CHECK(r.rest.len == 0);
	}
	check_within(r.rest, line, len);
	check_within(r.tag, line, len);
	if (r.tag.p)
		CHECK(r.tag.p >= line + 3 &&
		      memcmp(r.tag.p - 3, "id=", 3) == 0);
	/* an empty tag ("id=" alone) cannot be written back: skip those */
	if (!(r.tag.p && r.tag.len == 0))
		reply_round_trip(&r);
}

/* ---- checks on the scalar parsers ---------------------------------------- */

/* Any bytes become a valid description (what a client sends): decoded
 * it is the input with what is not printable as '?', cut only where the
 * next byte's encoding would pass the limit. */
static void check_desc(const char *s, size_t len)
{
	static const size_t maxes[] = {DL_DESC_HOST_MAX, DL_DESC_CMD_MAX};
	char enc[DL_DESC_CMD_MAX], dec[DL_DESC_CMD_MAX + 1];
	size_t k, n, m, i;

	for (k = 0; k < 2; k++) {
		n = dl_desc_encode(s, len, enc, maxes[k]);
		CHECK(n <= maxes[k]);
		CHECK((n == 0) == (len == 0));
		if (n > 0)
			CHECK(dl_desc_check(enc, n, maxes[k]) == 0);
		m = dl_desc_decode(enc, n, dec, sizeof(dec));
		CHECK(m <= len && dec[m] == '\0');
		for (i = 0; i < m; i++)
			CHECK(dec[i] ==
			      (s[i] >= 0x20 && s[i] <= 0x7e ? s[i] : '?'));
		if (m < len)
			CHECK(n + (s[m] == ' ' || s[m] == '%' ? 3 : 1) >
			      maxes[k]);
	}
}

static void check_scalars(const char *s, size_t len)
{
	uint64_t v, w;
	char dec[21];
	size_t n, z = 0;

	if (dl_parse_u64(s, len, &v) == 0) {
		while (z + 1 < len && s[z] == '0')
			z++;
		n = dl_u64_to_dec(v, dec);
		CHECK(n == len - z && memcmp(dec, s + z, n) == 0);
	}
	if (dl_parse_duration(s, len, &v) == 0) {
		CHECK(v <= DL_DURATION_MAX_MS);
		CHECK(dl_parse_wait(s, len, &w) == 0 && w == v);
	}
	if (dl_parse_wait(s, len, &w) == 0 && w == DL_WAIT_INF)
		CHECK(len == 3 && memcmp(s, "inf", 3) == 0);
	if (dl_check_name(s, len) == 0)
		CHECK(len >= 1 && len <= DL_NAME_MAX && !memchr(s, '=', len) &&
		      !memchr(s, ' ', len));
	if (dl_check_tag(s, len) == 0)
		CHECK(dl_check_owner(s, len) == 0 &&
		      dl_check_name(s, len) == 0);
}

static void check_line(const char *line, size_t len)
{
	const char *sp;

	CHECK(len <= DL_LINE_MAX);
	CHECK(line[len] == '\0');
	CHECK(memchr(line, '\n', len) == NULL);
	check_request(line, len);
	check_reply(line, len);
	check_scalars(line, len);
	sp = memchr(line, ' ', len);
	if (sp)
		check_scalars(line, (size_t)(sp - line));
}

/* ---- the three splitters ------------------------------------------------- */

static uint32_t rng_next(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

/* Feed the stream to a dl_linebuf; seed 0 means as much as fits per read.
 * With check set, every line is put through the parsers. */
static void run_linebuf(const struct stream *s, uint32_t seed, int check,
			struct digest *d)
{
	static struct dl_linebuf lb;
	size_t off = 0;

	dl_linebuf_init(&lb);
	digest_init(d);
	while (off < s->total) {
		size_t avail, k;
		char *space = dl_linebuf_space(&lb, &avail);

		CHECK(avail >= 1 && avail <= DL_INBUF_SIZE);
		k = avail;
		if (seed != 0) {
			uint32_t x = rng_next(&seed);

			switch (x & 3) {
			case 0:
				k = 1 + (x >> 2) % 8;
				break;
			case 1:
				k = 1 + (x >> 2) % 128;
				break;
			case 2:
				k = 1 + (x >> 2) % 2048;
				break;
			default:
				break;
			}
		}
		if (k > avail)
			k = avail;
		if (k > s->total - off)
			k = s->total - off;
		stream_copy(s, off, space, k);
		dl_linebuf_commit(&lb, k);
		off += k;
		for (;;) {
			char *line = NULL;
			size_t len = 0;
			enum dl_lb_result res =
				dl_linebuf_next(&lb, &line, &len);

			if (res == DL_LB_NONE)
				break;
			CHECK(res == DL_LB_LINE || res == DL_LB_TOOLONG ||
			      res == DL_LB_OVERFLOW);
			if (res == DL_LB_LINE) {
				CHECK(line >= lb.buf &&
				      line + len < lb.buf + DL_INBUF_SIZE);
				digest_event(d, res, line, len);
				if (check && off <= s->size + DL_INBUF_SIZE)
					check_line(line, len);
				continue;
			}
			digest_event(d, res, NULL, 0);
			if (res == DL_LB_OVERFLOW) {
				CHECK(dl_linebuf_next(&lb, &line, &len) ==
				      DL_LB_OVERFLOW);
				return;
			}
		}
	}
}

/* The rules, applied directly to the whole stream. */
static void run_model(const struct stream *s, struct digest *d)
{
	static char line[DL_LINE_MAX + 2];
	size_t start = 0, i;

	digest_init(d);
	for (i = 0; i < s->total; i++) {
		size_t l;

		if (i - start >= DL_LINE_DISCARD_MAX) {
			digest_event(d, DL_LB_OVERFLOW, NULL, 0);
			return;
		}
		if (stream_at(s, i) != '\n')
			continue;
		l = i - start;
		if (l > 0 && stream_at(s, i - 1) == '\r')
			l--;
		if (l > DL_LINE_MAX) {
			digest_event(d, DL_LB_TOOLONG, NULL, 0);
		} else {
			stream_copy(s, start, line, l);
			digest_event(d, DL_LB_LINE, line, l);
		}
		start = i + 1;
	}
	if (s->total - start >= DL_LINE_DISCARD_MAX)
		digest_event(d, DL_LB_OVERFLOW, NULL, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stream s;
	struct digest chunked, whole, model;
	uint32_t seed = 0x9e3779b9u;
	size_t i;

	if (size == 0)
		return 0;
	for (i = 0; i < 4 && i < size; i++)
		seed = seed * 31 + data[i];
	if (seed == 0)
		seed = 1;
	s.data = data;
	s.size = size;
	s.total = size;
	s.lf_last = 0;
	if (size >= 2 && (data[0] & 0xc0) == 0xc0) {
		s.total = size * (1 + (size_t)data[1]);
		if (s.total > 3 * DL_LINE_DISCARD_MAX)
			s.total = 3 * DL_LINE_DISCARD_MAX;
		s.lf_last = data[0] & 0x20;
	}

	run_linebuf(&s, seed, 1, &chunked);
	run_linebuf(&s, 0, 0, &whole);
	run_model(&s, &model);
	CHECK(chunked.events == whole.events && chunked.h == whole.h);
	CHECK(chunked.events == model.events && chunked.h == model.h);

	/* the raw input as one line too (may exceed DL_LINE_MAX, hold NULs) */
	if (size <= DL_LINE_MAX) {
		char buf[DL_LINE_MAX + 1];

		memcpy(buf, data, size);
		buf[size] = '\0';
		check_request(buf, size);
		check_reply(buf, size);
		check_scalars(buf, size);
		check_desc(buf, size);
	}
	return 0;
}
