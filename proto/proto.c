/*
 * proto.c -- the dlockd wire codec: scalars, requests, replies, formatting
 * and line splitting.
 *
 * Owns nothing. Every function works on memory the caller passes in; there
 * is no I/O, no allocation and no global state beyond constant tables, so
 * the server and libdlock link the same object and the fuzzer can drive it
 * directly.
 *
 * Parsing is done in one left-to-right pass over the bytes, never through
 * the C library's number parsers: they skip blanks, accept signs and depend
 * on the locale, and the protocol accepts none of that. Numbers are
 * accumulated digit by digit with an overflow check before each step
 * (beanstalkd's read_u64, OpenBSD's strtonum).
 *
 * Request lines (dl_parse_request):
 *
 *   - a NUL byte anywhere is BAD_FORMAT, checked before anything else;
 *   - words are split on runs of spaces and tabs; a blank line is no
 *     request (DL_VERB_NONE) and gets no reply;
 *   - a first pass over all the words counts them and picks out the first
 *     valid id=<tag>, so that even a rejected request echoes its tag. The
 *     word after AUTH is skipped there: it is the secret, whatever it looks
 *     like, and must never be echoed back as a tag;
 *   - the verb is looked up by length, then compared case-insensitively;
 *   - the remaining words are checked left to right against the verb's
 *     entry in verb_defs[] (positional kinds, allowed options) and the first
 *     fault is returned; a missing positional is only known at the end.
 *
 * Every *why is a static English phrase: an error reply never echoes input.
 *
 * Reply lines (dl_parse_reply) are split the same way; the kind is the
 * exact-case first word, and a last word "id=..." after the reply word is
 * the echoed tag.
 *
 * Line splitting (dl_linebuf): lines are cut at LF with one CR before it
 * stripped, NUL-terminated in place. A partial line that can no longer fit
 * DL_LINE_MAX (more than DL_LINE_MAX + 1 bytes, the 1 being a CR) switches
 * to discard mode: its bytes are counted and dropped until the LF, which
 * yields DL_LB_TOOLONG. A line that reaches DL_LINE_DISCARD_MAX bytes
 * without a LF yields DL_LB_OVERFLOW, for good. Both outcomes depend only
 * on the byte stream, never on how reads chunked it: when the LF shows up
 * in discard mode, the bytes before it are counted before deciding between
 * TOOLONG and OVERFLOW.
 */
#include "proto/proto.h"

#include <assert.h>
#include <limits.h>
#include <string.h>

_Static_assert(DL_INBUF_SIZE > DL_LINE_MAX + 2,
	       "the input buffer must hold a maximal line and its CRLF");
_Static_assert(DL_INBUF_SIZE < DL_LINE_DISCARD_MAX,
	       "a buffered line must not reach the discard limit");

/* ---- errors -------------------------------------------------------------- */

static const char *const err_texts[DL_ERR_COUNT_] = {
	"malformed request",
	"unknown command",
	"request line too long",
	"bad argument",
	"authentication required",
	"limit reached",
	"persistence unavailable",
	"internal error",
	"not the active daemon",
	"out of memory",
	"protocol error from peer",
	"line does not fit its buffer",
};

static const char *const err_words[] = {
	"BAD_FORMAT", "UNKNOWN_COMMAND", "LINE_TOO_LONG", "BAD_ARG",
	"NOAUTH",     "LIMIT",		 "UNAVAILABLE",	  "INTERNAL",
	"NOT_ACTIVE",
};

const char *dl_strerror(int err)
{
	if (err < 0 && err >= -DL_ERR_COUNT_)
		return err_texts[-err - 1];
	return "unknown error";
}

const char *dl_err_word(int err)
{
	if (err < 0 && err >= DL_ENOTACTIVE)
		return err_words[-err - 1];
	return "INTERNAL";
}

/* ---- scalars ------------------------------------------------------------- */

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* s[0..n) equals the literal up (upper case), ignoring ASCII case. */
static int ci_eq(const char *s, size_t n, const char *up, size_t upn)
{
	size_t i;

	if (n != upn)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i], u = up[i];

		if (c != u && !(u >= 'A' && u <= 'Z' && c == (char)(u | 0x20)))
			return 0;
	}
	return 1;
}

int dl_parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (len == 0)
		return DL_EBADARG;
	for (i = 0; i < len; i++) {
		unsigned d;

		if (!is_digit(s[i]))
			return DL_EBADARG;
		d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return DL_EBADARG;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int dl_parse_duration(const char *s, size_t len, uint64_t *ms)
{
	uint64_t v, scale;
	size_t n = 0;

	while (n < len && is_digit(s[n]))
		n++;
	if (n == 0 || dl_parse_u64(s, n, &v) < 0)
		return DL_EBADARG;
	if (n == len || (len - n == 2 && s[n] == 'm' && s[n + 1] == 's'))
		scale = 1;
	else if (len - n == 1 && s[n] == 's')
		scale = 1000;
	else if (len - n == 1 && s[n] == 'm')
		scale = 60000;
	else
		return DL_EBADARG;
	if (v > DL_DURATION_MAX_MS / scale)
		return DL_EBADARG;
	*ms = v * scale;
	return 0;
}

int dl_parse_wait(const char *s, size_t len, uint64_t *ms)
{
	if (len == 3 && memcmp(s, "inf", 3) == 0) {
		*ms = DL_WAIT_INF;
		return 0;
	}
	return dl_parse_duration(s, len, ms);
}

/* Names, owners and tags: printable ASCII without space or '='. */
static int check_word(const char *s, size_t len, size_t max)
{
	size_t i;

	if (len == 0 || len > max)
		return DL_EBADARG;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x21 || c > 0x7e || c == '=')
			return DL_EBADARG;
	}
	return 0;
}

int dl_check_name(const char *s, size_t len)
{
	return check_word(s, len, DL_NAME_MAX);
}

int dl_check_owner(const char *s, size_t len)
{
	return check_word(s, len, DL_OWNER_MAX);
}

int dl_check_tag(const char *s, size_t len)
{
	return check_word(s, len, DL_TAG_MAX);
}

/* ---- requests ------------------------------------------------------------ */

/* What a positional word of a verb is. */
enum pos_kind { POS_NAME = 1, POS_TOKEN, POS_SECRET, POS_TEXT };

/* Options, as bits of verb_def.opts and of the "seen" set. */
enum { OPT_TTL = 1, OPT_WAIT = 2, OPT_ID = 4, OPT_OWNER = 8 };

struct verb_def {
	const char *name; /* upper case */
	unsigned char len;
	unsigned char min_pos; /* positional words required */
	unsigned char max_pos; /* positional words allowed */
	unsigned char pos[2];  /* enum pos_kind of each */
	unsigned char opts;    /* OPT_* allowed */
};

#define VERB(v, n, mn, mx, p0, p1, o)                                          \
	[v] = {n, sizeof(n) - 1, mn, mx, {p0, p1}, o}

static const struct verb_def verb_defs[DL_VERB_COUNT_] = {
	[DL_VERB_NONE] = {"", 0, 0, 0, {0, 0}, 0},
	VERB(DL_VERB_LOCK, "LOCK", 1, 1, POS_NAME, 0,
	     OPT_TTL | OPT_WAIT | OPT_ID),
	VERB(DL_VERB_TRYLOCK, "TRYLOCK", 1, 1, POS_NAME, 0, OPT_TTL | OPT_ID),
	VERB(DL_VERB_UNLOCK, "UNLOCK", 2, 2, POS_NAME, POS_TOKEN, OPT_ID),
	VERB(DL_VERB_REFRESH, "REFRESH", 2, 2, POS_NAME, POS_TOKEN,
	     OPT_TTL | OPT_ID),
	VERB(DL_VERB_CHECK, "CHECK", 2, 2, POS_NAME, POS_TOKEN, OPT_ID),
	VERB(DL_VERB_CANCEL, "CANCEL", 1, 1, POS_NAME, 0, OPT_ID),
	VERB(DL_VERB_STATUS, "STATUS", 1, 1, POS_NAME, 0, OPT_ID),
	VERB(DL_VERB_HELLO, "HELLO", 0, 0, 0, 0, OPT_OWNER | OPT_ID),
	VERB(DL_VERB_AUTH, "AUTH", 1, 1, POS_SECRET, 0, OPT_ID),
	VERB(DL_VERB_STATS, "STATS", 0, 0, 0, 0, OPT_ID),
	VERB(DL_VERB_PING, "PING", 0, 1, POS_TEXT, 0, OPT_ID),
	VERB(DL_VERB_QUIT, "QUIT", 0, 0, 0, 0, OPT_ID),
};

const char *dl_verb_name(enum dl_verb v)
{
	if ((unsigned)v >= DL_VERB_COUNT_)
		return "";
	return verb_defs[v].name;
}

static enum dl_verb find_verb(struct dl_str w)
{
	int v;

	for (v = DL_VERB_NONE + 1; v < DL_VERB_COUNT_; v++)
		if (ci_eq(w.p, w.len, verb_defs[v].name, verb_defs[v].len))
			return (enum dl_verb)v;
	return DL_VERB_NONE;
}

static int find_opt(const char *k, size_t n)
{
	if (ci_eq(k, n, "TTL", 3))
		return OPT_TTL;
	if (ci_eq(k, n, "WAIT", 4))
		return OPT_WAIT;
	if (ci_eq(k, n, "ID", 2))
		return OPT_ID;
	if (ci_eq(k, n, "OWNER", 5))
		return OPT_OWNER;
	return 0;
}

/* The next word of s[*i..len), or len 0 at the end. */
static struct dl_str next_word(const char *s, size_t len, size_t *i)
{
	struct dl_str w;
	size_t j = *i;

	while (j < len && is_blank(s[j]))
		j++;
	w.p = s + j;
	while (j < len && !is_blank(s[j]))
		j++;
	w.len = (size_t)(s + j - w.p);
	*i = j;
	return w;
}

/* First pass: store up to DL_ARGS_MAX words, count them all, and set
 * req->tag from the first valid id= (not the AUTH secret). */
static size_t split_request(const char *line, size_t len, struct dl_str *words,
			    struct dl_request *req)
{
	size_t i = 0, n = 0;
	int auth = 0;

	for (;;) {
		struct dl_str w = next_word(line, len, &i);

		if (w.len == 0)
			return n;
		if (n < DL_ARGS_MAX)
			words[n] = w;
		if (n == 0)
			auth = ci_eq(w.p, w.len, "AUTH", 4);
		if (req->tag.len == 0 && !(auth && n == 1) && w.len > 3 &&
		    ci_eq(w.p, 3, "ID=", 3) &&
		    dl_check_tag(w.p + 3, w.len - 3) == 0)
			req->tag = (struct dl_str){w.p + 3, w.len - 3};
		n++;
	}
}

static int fail(const char **why, const char *text, int err)
{
	if (why)
		*why = text;
	return err;
}

static int parse_option(struct dl_str w, const char *eq, unsigned allowed,
			unsigned *seen, struct dl_request *req,
			const char **why)
{
	const char *v = eq + 1;
	size_t vlen = (size_t)(w.p + w.len - v);
	int opt = find_opt(w.p, (size_t)(eq - w.p));

	if (!(opt & allowed))
		return fail(why, "unknown option", DL_EBADARG);
	if (*seen & (unsigned)opt)
		return fail(why, "duplicate option", DL_EBADARG);
	*seen |= (unsigned)opt;
	if (vlen == 0)
		return fail(why, "empty option value", DL_EBADARG);
	switch (opt) {
	case OPT_TTL:
		if (dl_parse_duration(v, vlen, &req->ttl_ms) < 0 ||
		    req->ttl_ms == 0)
			return fail(why, "bad ttl", DL_EBADARG);
		req->has_ttl = 1;
		break;
	case OPT_WAIT:
		if (dl_parse_wait(v, vlen, &req->wait_ms) < 0)
			return fail(why, "bad wait", DL_EBADARG);
		req->has_wait = 1;
		break;
	case OPT_ID:
		if (dl_check_tag(v, vlen) < 0)
			return fail(why, "bad id", DL_EBADARG);
		req->tag = (struct dl_str){v, vlen};
		break;
	default: /* OPT_OWNER */
		if (dl_check_owner(v, vlen) < 0)
			return fail(why, "bad owner", DL_EBADARG);
		req->owner = (struct dl_str){v, vlen};
		break;
	}
	return 0;
}

static int printable(struct dl_str w)
{
	size_t i;

	for (i = 0; i < w.len; i++)
		if ((unsigned char)w.p[i] < 0x21 ||
		    (unsigned char)w.p[i] > 0x7e)
			return 0;
	return 1;
}

static int parse_positional(struct dl_str w, int kind, struct dl_request *req,
			    const char **why)
{
	switch (kind) {
	case POS_NAME:
		if (dl_check_name(w.p, w.len) < 0)
			return fail(why, "bad name", DL_EBADARG);
		req->name = w;
		break;
	case POS_TOKEN:
		if (dl_parse_u64(w.p, w.len, &req->token) < 0)
			return fail(why, "bad token", DL_EBADARG);
		break;
	case POS_TEXT:
		/* PING's word is echoed back: only printable ASCII, so that
		 * a reply can never carry a CR or a control byte. */
		if (!printable(w))
			return fail(why, "bad text", DL_EBADARG);
		req->arg = w;
		break;
	default: /* POS_SECRET: never echoed, any non-blank bytes */
		req->arg = w;
		break;
	}
	return 0;
}

int dl_parse_request(const char *line, size_t len, struct dl_request *req,
		     const char **why)
{
	struct dl_str words[DL_ARGS_MAX];
	const struct verb_def *def;
	unsigned seen = 0, npos = 0;
	size_t n, i;
	int err;

	memset(req, 0, sizeof(*req));
	if (len > 0 && memchr(line, '\0', len))
		return fail(why, "NUL byte in request", DL_EBADFORMAT);
	n = split_request(line, len, words, req);
	if (n == 0)
		return 0;
	if (n > DL_ARGS_MAX)
		return fail(why, "too many arguments", DL_EBADARG);
	req->verb = find_verb(words[0]);
	if (req->verb == DL_VERB_NONE)
		return fail(why, "unknown command", DL_EUNKNOWNCMD);
	def = &verb_defs[req->verb];

	for (i = 1; i < n; i++) {
		struct dl_str w = words[i];
		const char *eq = memchr(w.p, '=', w.len);

		if (eq && !(req->verb == DL_VERB_AUTH && i == 1)) {
			err = parse_option(w, eq, def->opts, &seen, req, why);
		} else if (npos >= def->max_pos) {
			err = fail(why, "too many arguments", DL_EBADARG);
		} else {
			err = parse_positional(w, def->pos[npos], req, why);
			npos++;
		}
		if (err < 0)
			return err;
	}
	if (npos < def->min_pos)
		return fail(why, "missing argument", DL_EBADFORMAT);
	if (req->verb == DL_VERB_TRYLOCK) {
		req->wait_ms = 0;
		req->has_wait = 1;
	}
	return 0;
}

/* ---- replies ------------------------------------------------------------- */

int dl_parse_reply(const char *line, size_t len, struct dl_reply *r)
{
	struct dl_str w[DL_REPLY_ARGS_MAX + 1]; /* room for a trailing tag */
	struct dl_str first;
	const char *end;
	size_t i = 0;
	int n = 0;

	memset(r, 0, sizeof(*r));
	if (len > 0 && memchr(line, '\0', len))
		return DL_EPROTO;
	first = next_word(line, len, &i);
	if (first.len == 2 && memcmp(first.p, "OK", 2) == 0)
		r->kind = DL_REPLY_OK;
	else if (first.len == 2 && memcmp(first.p, "NO", 2) == 0)
		r->kind = DL_REPLY_NO;
	else if (first.len == 3 && memcmp(first.p, "ERR", 3) == 0)
		r->kind = DL_REPLY_ERR;
	else if (first.len == 1 && first.p[0] == '*')
		r->kind = DL_REPLY_EVENT;
	else
		return DL_EPROTO;
	r->word = next_word(line, len, &i);
	if (r->word.len == 0)
		return DL_EPROTO;

	end = line + len; /* where rest stops: the tag or the line's end */
	for (;;) {
		struct dl_str a = next_word(line, len, &i);

		if (a.len == 0)
			break;
		if (n == DL_REPLY_ARGS_MAX + 1)
			return DL_EPROTO;
		w[n++] = a;
	}
	if (n > 0 && w[n - 1].len >= 3 && memcmp(w[n - 1].p, "id=", 3) == 0) {
		n--;
		r->tag = (struct dl_str){w[n].p + 3, w[n].len - 3};
		end = w[n].p;
	}
	if (n > DL_REPLY_ARGS_MAX)
		return DL_EPROTO;
	r->argc = n;
	memcpy(r->argv, w, (size_t)n * sizeof(w[0]));
	if (n > 0) {
		r->rest.p = w[0].p;
		r->rest.len = (size_t)(w[n - 1].p + w[n - 1].len - w[0].p);
	} else {
		r->rest.p = end;
	}
	return 0;
}

int dl_reply_u64(const struct dl_reply *r, int i, uint64_t *out)
{
	if (i < 0 || i >= r->argc)
		return DL_EPROTO;
	if (dl_parse_u64(r->argv[i].p, r->argv[i].len, out) < 0)
		return DL_EPROTO;
	return 0;
}

int dl_reply_kv(const struct dl_reply *r, const char *key, struct dl_str *out)
{
	size_t klen = strlen(key);
	int i;

	for (i = 0; i < r->argc; i++) {
		const struct dl_str *a = &r->argv[i];

		if (a->len > klen && a->p[klen] == '=' &&
		    memcmp(a->p, key, klen) == 0) {
			out->p = a->p + klen + 1;
			out->len = a->len - klen - 1;
			return 0;
		}
	}
	return DL_EPROTO;
}

/* ---- formatting ---------------------------------------------------------- */

static const char digit_pairs[201] = "00010203040506070809"
				     "10111213141516171819"
				     "20212223242526272829"
				     "30313233343536373839"
				     "40414243444546474849"
				     "50515253545556575859"
				     "60616263646566676869"
				     "70717273747576777879"
				     "80818283848586878889"
				     "90919293949596979899";

size_t dl_u64_to_dec(uint64_t v, char *buf)
{
	char tmp[20]; /* UINT64_MAX has 20 digits */
	char *p = tmp + sizeof(tmp);
	size_t n;

	while (v >= 100) {
		const char *d = &digit_pairs[(v % 100) * 2];

		v /= 100;
		*--p = d[1];
		*--p = d[0];
	}
	if (v >= 10) {
		*--p = digit_pairs[v * 2 + 1];
		*--p = digit_pairs[v * 2];
	} else {
		*--p = (char)('0' + v);
	}
	n = (size_t)(tmp + sizeof(tmp) - p);
	memcpy(buf, p, n);
	return n;
}

void dl_fmt_init(struct dl_fmt *f, char *buf, size_t cap)
{
	f->buf = buf;
	f->cap = cap;
	f->len = 0;
	f->overflow = 0;
}

static void fmt_raw(struct dl_fmt *f, const char *s, size_t n)
{
	if (f->overflow)
		return;
	if (n > f->cap - f->len) {
		f->overflow = 1;
		return;
	}
	if (n > 0)
		memcpy(f->buf + f->len, s, n);
	f->len += n;
}

/* The space before every word but the first. */
static void fmt_sep(struct dl_fmt *f)
{
	if (f->len > 0)
		fmt_raw(f, " ", 1);
}

void dl_fmt_word(struct dl_fmt *f, const char *word)
{
	fmt_sep(f);
	fmt_raw(f, word, strlen(word));
}

void dl_fmt_str(struct dl_fmt *f, struct dl_str s)
{
	fmt_sep(f);
	fmt_raw(f, s.p, s.len);
}

void dl_fmt_u64(struct dl_fmt *f, uint64_t v)
{
	char d[21];

	fmt_sep(f);
	fmt_raw(f, d, dl_u64_to_dec(v, d));
}

void dl_fmt_kv_u64(struct dl_fmt *f, const char *key, uint64_t v)
{
	char d[21];

	fmt_sep(f);
	fmt_raw(f, key, strlen(key));
	fmt_raw(f, "=", 1);
	fmt_raw(f, d, dl_u64_to_dec(v, d));
}

void dl_fmt_kv_str(struct dl_fmt *f, const char *key, struct dl_str v)
{
	fmt_sep(f);
	fmt_raw(f, key, strlen(key));
	fmt_raw(f, "=", 1);
	fmt_raw(f, v.p, v.len);
}

int dl_fmt_end(struct dl_fmt *f, struct dl_str tag)
{
	if (tag.len > 0) {
		fmt_raw(f, " id=", 4);
		fmt_raw(f, tag.p, tag.len);
	}
	fmt_raw(f, "\r\n", 2);
	if (f->overflow || f->len > (size_t)INT_MAX)
		return DL_ENOSPC;
	if (f->len < f->cap)
		f->buf[f->len] = '\0';
	return (int)f->len;
}

/* ---- line splitting ------------------------------------------------------ */

void dl_linebuf_init(struct dl_linebuf *lb)
{
	lb->start = 0;
	lb->len = 0;
	lb->discard = 0;
}

static void lb_compact(struct dl_linebuf *lb)
{
	if (lb->start == 0)
		return;
	memmove(lb->buf, lb->buf + lb->start, lb->len - lb->start);
	lb->len -= lb->start;
	lb->start = 0;
}

/* Drop everything held (discard mode keeps only a count). */
static void lb_drop(struct dl_linebuf *lb)
{
	lb->start = 0;
	lb->len = 0;
}

char *dl_linebuf_space(struct dl_linebuf *lb, size_t *avail)
{
	lb_compact(lb);
	/* next() leaves at most DL_LINE_MAX + 1 bytes when it says NONE */
	assert(lb->len < DL_INBUF_SIZE);
	*avail = DL_INBUF_SIZE - lb->len;
	return lb->buf + lb->len;
}

void dl_linebuf_commit(struct dl_linebuf *lb, size_t n)
{
	assert(n <= DL_INBUF_SIZE - lb->len);
	lb->len += n;
}

enum dl_lb_result dl_linebuf_next(struct dl_linebuf *lb, char **line,
				  size_t *len)
{
	char *p = lb->buf + lb->start;
	size_t n = lb->len - lb->start;
	char *lf;
	size_t l;

	if (lb->discard >= DL_LINE_DISCARD_MAX) {
		lb_drop(lb);
		return DL_LB_OVERFLOW;
	}
	lf = n > 0 ? memchr(p, '\n', n) : NULL;
	if (lb->discard > 0) {
		if (lf == NULL) {
			lb->discard += n;
			lb_drop(lb);
			return lb->discard >= DL_LINE_DISCARD_MAX
				       ? DL_LB_OVERFLOW
				       : DL_LB_NONE;
		}
		/* the bytes before the LF count, whatever the chunking */
		l = (size_t)(lf - p);
		lb->start += l + 1;
		if (lb->discard + l >= DL_LINE_DISCARD_MAX) {
			lb->discard = DL_LINE_DISCARD_MAX;
			lb_drop(lb);
			return DL_LB_OVERFLOW;
		}
		lb->discard = 0;
		return DL_LB_TOOLONG;
	}
	if (lf == NULL) {
		if (n > DL_LINE_MAX + 1) {
			/* cannot become a valid line, even with a CR */
			lb->discard = n;
			lb_drop(lb);
			return DL_LB_NONE;
		}
		lb_compact(lb);
		return DL_LB_NONE;
	}
	l = (size_t)(lf - p);
	lb->start += l + 1;
	if (l > 0 && p[l - 1] == '\r')
		l--;
	if (l > DL_LINE_MAX)
		return DL_LB_TOOLONG;
	p[l] = '\0';
	*line = p;
	*len = l;
	return DL_LB_LINE;
}
