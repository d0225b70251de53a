/* SPDX-License-Identifier: MIT */
/*
 * proto.c -- the dlockd wire codec: errors, scalars and requests (the
 * rest of the codec is proto_reply.c).
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
 * Replies, formatting and line splitting are in proto_reply.c.
 */
#include "proto/proto.h"

#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "proto/desc.h"

/* ---- errors -------------------------------------------------------------- */

/* One case per code, returning one of its columns (see DL_ERR_MAP). */
#define CASE_TEXT(name, value, wire, word, label, text)                        \
	case DL_E##name:                                                       \
		return text;
#define CASE_WORD(name, value, wire, word, label, text)                        \
	case DL_E##name:                                                       \
		return word;
#define CASE_LABEL(name, value, wire, word, label, text)                       \
	case DL_E##name:                                                       \
		return label;
#define CASE_WIRE(name, value, wire, word, label, text)                        \
	case DL_E##name:                                                       \
		return DL_E##wire;

const char *dl_strerror(int err)
{
	switch (err) {
		DL_ERR_MAP(CASE_TEXT)
	}
	return "unknown error";
}

const char *dl_err_word(int err)
{
	switch (err) {
		DL_ERR_MAP(CASE_WORD)
	}
	return "INTERNAL";
}

const char *dl_err_label(int err)
{
	switch (err) {
		DL_ERR_MAP(CASE_LABEL)
	}
	return "internal";
}

int dl_err_wire(int err)
{
	switch (err) {
		DL_ERR_MAP(CASE_WIRE)
	}
	return DL_EINTERNAL;
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
		if (v > (UINT64_MAX - d) / 10) {
			/* the rest must still be digits to be "a number" */
			while (++i < len)
				if (!is_digit(s[i]))
					return DL_EBADARG;
			return DL_ERANGE;
		}
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
	if (n == 0)
		return DL_EBADARG;
	if (n == len || (len - n == 2 && s[n] == 'm' && s[n + 1] == 's'))
		scale = 1;
	else if (len - n == 1 && s[n] == 's')
		scale = 1000;
	else if (len - n == 1 && s[n] == 'm')
		scale = 60000;
	else if (len - n == 1 && s[n] == 'h')
		scale = 3600000;
	else
		return DL_EBADARG;
	if (dl_parse_u64(s, n, &v) < 0 || v > DL_DURATION_MAX_MS / scale)
		return DL_ERANGE;
	*ms = v * scale;
	return 0;
}

char *dl_format_duration(uint64_t ms, char buf[DL_DURATION_TEXT_MAX])
{
	static const struct {
		uint64_t ms;
		const char *unit;
	} units[] = {{3600000, "h"}, {60000, "m"}, {1000, "s"}};
	size_t i;
	char *p = buf + DL_DURATION_TEXT_MAX;

	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (ms != 0 && ms % units[i].ms == 0)
			break;
	/* digits from the right, then the unit */
	*--p = '\0';
	if (i < sizeof(units) / sizeof(units[0])) {
		*--p = units[i].unit[0];
		ms /= units[i].ms;
	} else {
		*--p = 's';
		*--p = 'm';
	}
	do {
		*--p = (char)('0' + ms % 10);
		ms /= 10;
	} while (ms);
	memmove(buf, p, (size_t)(buf + DL_DURATION_TEXT_MAX - p));
	return buf;
}

int dl_parse_wait(const char *s, size_t len, uint64_t *ms)
{
	if (len == 3 && memcmp(s, "inf", 3) == 0) {
		*ms = DL_WAIT_INF;
		return 0;
	}
	return dl_parse_duration(s, len, ms);
}

/* Names, owners and tags: printable ASCII without space or '=' (else
 * DL_EBADARG), at most max bytes (else DL_ERANGE). */
static int check_word(const char *s, size_t len, size_t max)
{
	size_t i;

	if (len == 0)
		return DL_EBADARG;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x21 || c > 0x7e || c == '=')
			return DL_EBADARG;
	}
	return len > max ? DL_ERANGE : 0;
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

int dl_check_user(const char *s, size_t len)
{
	size_t i;

	if (len == 0)
		return DL_EBADARG;
	for (i = 0; i < len; i++) {
		char c = s[i];

		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') &&
		    !is_digit(c) && c != '.' && c != '_' && c != '-')
			return DL_EBADARG;
	}
	return len > DL_USER_MAX ? DL_ERANGE : 0;
}

int dl_check_owner_secret(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++) {
		char c = s[i];

		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') &&
		    !is_digit(c) && c != '_' && c != '-')
			return DL_EBADARG;
	}
	if (len < DL_OWNER_SECRET_MIN)
		return DL_EBADARG;
	return len > DL_OWNER_SECRET_MAX ? DL_ERANGE : 0;
}

/* ---- requests ------------------------------------------------------------ */

/* What a positional word of a verb is. */
enum pos_kind {
	POS_NAME = 1,
	POS_TOKEN,
	POS_SECRET,
	POS_TEXT,
	POS_PREFIX,
	POS_PATTERN, /* a name, or a prefix and '*' (WATCH) */
	POS_WORD,    /* printable ASCII, in req->words (PARTITION) */
};

/* Options, as bits of verb_def.opts and of the "seen" set. */
enum {
	OPT_TTL = 1,
	OPT_WAIT = 2,
	OPT_ID = 4,
	OPT_OWNER = 8,
	OPT_LIMIT = 16,
	OPT_AFTER = 32,
	OPT_BY = 64,
	OPT_MODE = 128,
	OPT_REASON = 256,
	OPT_KEY = 512,
	OPT_HOST = 1024,
	OPT_PID = 2048,
	OPT_CMD = 4096,
	OPT_WARN = 8192,
	OPT_DELAY = 16384,
	OPT_PROOF = 32768,
	OPT_UNTIL = 65536,
	OPT_HOLDS = 131072,
	OPT_REQ = 262144,
	OPT_NOTIFY = 524288,
	OPT_VALUE = 1048576,
};

/* The table HELP prints and the errors quote: the syntax of each verb is
 * written once, here. */
struct verb_def {
	const char *name; /* upper case */
	unsigned char len;
	unsigned char min_pos; /* positional words required */
	unsigned char max_pos; /* positional words allowed */
	unsigned char pos[3];  /* enum pos_kind of each */
	unsigned opts;	       /* OPT_* allowed */
	const char *usage;     /* its syntax */
	const char *summary;   /* what it does, one line */
};

#define VERB(v, n, mn, mx, p0, p1, o, u, s)                                    \
	[v] = {n, sizeof(n) - 1, mn, mx, {p0, p1, 0}, o, n u, s}
#define VERB3(v, n, mn, mx, p0, p1, p2, o, u, s)                               \
	[v] = {n, sizeof(n) - 1, mn, mx, {p0, p1, p2}, o, n u, s}

static const struct verb_def verb_defs[DL_VERB_COUNT_] = {
	[DL_VERB_NONE] = {"", 0, 0, 0, {0, 0, 0}, 0, "", ""},
	VERB(DL_VERB_LOCK, "LOCK", 1, 1, POS_NAME, 0,
	     OPT_TTL | OPT_WAIT | OPT_MODE | OPT_LIMIT | OPT_WARN | OPT_DELAY |
		     OPT_REQ | OPT_NOTIFY | OPT_VALUE | OPT_ID,
	     " <name> [<name> ...] [ttl=<duration>] [wait=<duration>|inf] "
	     "[mode=exclusive|shared] [limit=<n>] [warn=<duration>] "
	     "[delay=<duration>] [req=<n>] [notify=waiters] [value=<text>] "
	     "[id=<tag>]",
	     "take a lease, or queue for it (OK QUEUED, then * GRANTED); "
	     "several names: all or none (OK LOCKED)"),
	VERB(DL_VERB_TRYLOCK, "TRYLOCK", 1, 1, POS_NAME, 0,
	     OPT_TTL | OPT_MODE | OPT_LIMIT | OPT_WARN | OPT_DELAY | OPT_REQ |
		     OPT_NOTIFY | OPT_VALUE | OPT_ID,
	     " <name> [<name> ...] [ttl=<duration>] [mode=exclusive|shared] "
	     "[limit=<n>] [warn=<duration>] [delay=<duration>] [req=<n>] "
	     "[notify=waiters] [value=<text>] [id=<tag>]",
	     "take a lease now or answer NO BUSY; several names: all or none"),
	VERB(DL_VERB_UNLOCK, "UNLOCK", 2, 2, POS_NAME, POS_TOKEN, OPT_ID,
	     " <name> <token> [id=<tag>]", "release a lease you hold"),
	VERB(DL_VERB_REFRESH, "REFRESH", 2, 2, POS_NAME, POS_TOKEN,
	     OPT_TTL | OPT_WARN | OPT_VALUE | OPT_ID,
	     " <name> <token> [ttl=<duration>] [warn=<duration>] "
	     "[value=<text>] [id=<tag>]",
	     "extend a lease you hold"),
	VERB(DL_VERB_CHECK, "CHECK", 2, 2, POS_NAME, POS_TOKEN, OPT_ID,
	     " <name> <token> [id=<tag>]",
	     "is this token's lease still valid, and for how long"),
	VERB(DL_VERB_CANCEL, "CANCEL", 1, 1, POS_NAME, 0, OPT_ID,
	     " <name> [id=<tag>]", "give up waiting for a lock"),
	VERB(DL_VERB_STATUS, "STATUS", 1, 1, POS_NAME, 0, OPT_ID,
	     " <name> [id=<tag>]", "who holds a lock, and how many wait"),
	VERB(DL_VERB_HELLO, "HELLO", 0, 0, 0, 0,
	     OPT_OWNER | OPT_KEY | OPT_HOST | OPT_PID | OPT_CMD | OPT_ID,
	     " [owner=<id> [key=<key>]] [host=<host>] [pid=<pid>] "
	     "[cmd=<command>] [id=<tag>]",
	     "name your owner id, with its key to resume its leases; say who "
	     "you are (host, pid, command: a space is %20); server limits"),
	VERB(DL_VERB_AUTH, "AUTH", 1, 2, POS_SECRET, POS_SECRET, OPT_ID,
	     " [<user>] <password> [id=<tag>]",
	     "authenticate: a user and its secret, or the server's password"),
	VERB(DL_VERB_STATS, "STATS", 0, 0, 0, 0, OPT_ID, " [id=<tag>]",
	     "the server's counters (multi-line)"),
	VERB(DL_VERB_PING, "PING", 0, 1, POS_TEXT, 0, OPT_ID,
	     " [<word>] [id=<tag>]", "answer PONG"),
	VERB(DL_VERB_QUIT, "QUIT", 0, 0, 0, 0, OPT_ID, " [id=<tag>]",
	     "close the connection (leases stay until their TTL)"),
	VERB(DL_VERB_LOCKS, "LOCKS", 0, 1, POS_PREFIX, 0,
	     OPT_LIMIT | OPT_AFTER | OPT_BY | OPT_ID,
	     " [<prefix>] [limit=<n>] [after=<name>] [by=name|waiters] "
	     "[id=<tag>]",
	     "list locks by name a page at a time, or the most waited for "
	     "(multi-line)"),
	VERB(DL_VERB_BREAK, "BREAK", 2, 2, POS_NAME, POS_TOKEN,
	     OPT_REASON | OPT_ID, " <name> <token> reason=<text> [id=<tag>]",
	     "end another owner's lease now (an operator's tool: its holder "
	     "gets * EXPIRED broken_by=<you>; the reason is audited)"),
	VERB(DL_VERB_HELP, "HELP", 0, 1, POS_TEXT, 0, OPT_ID,
	     " [<command>] [id=<tag>]",
	     "this list, or one command (multi-line)"),
	VERB(DL_VERB_HOLDERS, "HOLDERS", 1, 1, POS_NAME, 0, OPT_ID,
	     " <name> [id=<tag>]",
	     "each holder of a lock and each waiter, in order (multi-line)"),
	VERB(DL_VERB_WATCH, "WATCH", 1, 1, POS_PATTERN, 0, OPT_ID,
	     " <name>|<prefix>* [id=<tag>]",
	     "be told (* WATCH ...) when a lock, or any lock whose name "
	     "starts with <prefix>, is granted, released, expires or is "
	     "broken, without taking it"),
	VERB(DL_VERB_UNWATCH, "UNWATCH", 1, 1, POS_PATTERN, 0, OPT_ID,
	     " <name>|<prefix>* [id=<tag>]", "stop a WATCH"),
	VERB(DL_VERB_RECLAIM, "RECLAIM", 2, 2, POS_NAME, POS_TOKEN,
	     OPT_PROOF | OPT_UNTIL | OPT_TTL | OPT_MODE | OPT_LIMIT |
		     OPT_HOLDS | OPT_WARN | OPT_DELAY | OPT_VALUE | OPT_ID,
	     " <name> <token> proof=<hex> until=<ms> [ttl=<duration>] "
	     "[mode=exclusive|shared] [limit=<n>] [holds=<n>] "
	     "[warn=<duration>] [delay=<duration>] [value=<text>] [id=<tag>]",
	     "keep a lease the server no longer knows (Redis forgot it): "
	     "the proof and until its last grant or refresh gave"),
	VERB(DL_VERB_MAP, "MAP", 0, 0, 0, 0, OPT_ID, " [id=<tag>]",
	     "the partition map: which partition serves which names, and "
	     "where (multi-line)"),
	VERB3(DL_VERB_PARTITION, "PARTITION", 1, 3, POS_WORD, POS_WORD,
	      POS_WORD, OPT_ID,
	      " INIT | MOVE <slots> <partition> | ADDRS <partition> "
	      "<host:port,...> [id=<tag>]",
	      "change the partition map (an admin's): create it, give "
	      "slots to another partition, set a partition's addresses"),
};

static const char *const opt_names[] = {
	"ttl",	 "wait",   "id",    "owner", "limit", "after",	"by",
	"mode",	 "reason", "key",   "host",  "pid",   "cmd",	"warn",
	"delay", "proof",  "until", "holds", "req",   "notify", "value"};

const char *dl_verb_name(enum dl_verb v)
{
	if ((unsigned)v >= DL_VERB_COUNT_)
		return "";
	return verb_defs[v].name;
}

const char *dl_verb_usage(enum dl_verb v)
{
	if ((unsigned)v >= DL_VERB_COUNT_)
		return "";
	return verb_defs[v].usage;
}

const char *dl_verb_summary(enum dl_verb v)
{
	if ((unsigned)v >= DL_VERB_COUNT_)
		return "";
	return verb_defs[v].summary;
}

enum dl_verb dl_find_verb(struct dl_str w)
{
	int v;

	for (v = DL_VERB_NONE + 1; v < DL_VERB_COUNT_; v++)
		if (ci_eq(w.p, w.len, verb_defs[v].name, verb_defs[v].len))
			return (enum dl_verb)v;
	return DL_VERB_NONE;
}

/* The option's index in opt_names[] (its bit is 1 << index), or -1. */
static int find_opt(const char *k, size_t n)
{
	size_t i;
	char up[8];

	for (i = 0; i < sizeof(opt_names) / sizeof(opt_names[0]); i++) {
		size_t j, m = strlen(opt_names[i]);

		for (j = 0; j < m; j++)
			up[j] = (char)(opt_names[i][j] - 'a' + 'A');
		if (ci_eq(k, n, up, m))
			return (int)i;
	}
	return -1;
}

struct dl_str dl_next_word(const char *s, size_t len, size_t *i)
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
		struct dl_str w = dl_next_word(line, len, &i);

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

/* ---- explanations ---------------------------------------------------------
 *
 * An error names what was wrong and what is accepted. The text goes back to
 * the client in an ERR line, so whatever it quotes from the request is
 * shown as printable ASCII only (other bytes as '?') and cut at
 * QUOTE_MAX bytes: a reply can never carry a CR or a control byte. */

#define QUOTE_MAX 40
#define STR_(x)	  #x
#define XSTR(x)	  STR_(x)

struct why {
	char *p;
	size_t len, cap;
};

static void why_add(struct why *w, const char *s, size_t n)
{
	if (n > w->cap - 1 - w->len)
		n = w->cap - 1 - w->len;
	memcpy(w->p + w->len, s, n);
	w->len += n;
	w->p[w->len] = '\0';
}

static void why_str(struct why *w, const char *s)
{
	why_add(w, s, strlen(s));
}

static void why_u64(struct why *w, uint64_t v)
{
	char b[24], *p = b + sizeof(b);

	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	why_add(w, p, (size_t)(b + sizeof(b) - p));
}

static void why_quote(struct why *w, const char *s, size_t n)
{
	size_t i;

	why_str(w, "'");
	for (i = 0; i < n && i < QUOTE_MAX; i++) {
		unsigned char c = (unsigned char)s[i];
		char o = c >= 0x20 && c <= 0x7e ? (char)c : '?';

		why_add(w, &o, 1);
	}
	why_str(w, i < n ? "...'" : "'");
}

static int fail(const char **why, struct dl_request *req, int err,
		const char *text)
{
	if (why) {
		if (text && text != req->why) {
			struct why w = {req->why, 0, sizeof(req->why)};

			why_str(&w, text);
		}
		*why = req->why;
	}
	return err == DL_ERANGE ? DL_EBADARG : err;
}

/* "<what>: " then the usage of the verb, for an argument that is missing,
 * one too many, or an option the verb does not take. */
static int fail_usage(const char **why, struct dl_request *req, int err,
		      const struct verb_def *def, const char *what,
		      struct dl_str quoted)
{
	struct why w = {req->why, 0, sizeof(req->why)};

	why_str(&w, what);
	/* whatever follows AUTH may be a piece of the password */
	if (quoted.p && req->verb != DL_VERB_AUTH) {
		why_str(&w, " ");
		why_quote(&w, quoted.p, quoted.len);
	}
	why_str(&w, "; usage: ");
	why_str(&w, def->usage);
	return fail(why, req, err, req->why);
}

/* A word the checks of a name, owner or tag refused: too long, or bytes
 * outside printable ASCII (or '='). */
static int fail_word(const char **why, struct dl_request *req, int err,
		     const char *what, struct dl_str v, size_t max)
{
	struct why w = {req->why, 0, sizeof(req->why)};

	why_str(&w, what);
	if (err == DL_ERANGE) {
		why_str(&w, " out of range: ");
		why_u64(&w, v.len);
		why_str(&w, " bytes, at most ");
		why_u64(&w, max);
	} else {
		why_str(&w, " malformed: ");
		why_quote(&w, v.p, v.len);
		why_str(&w, ", 1 to ");
		why_u64(&w, max);
		why_str(&w, " bytes of printable ASCII without space or '='");
	}
	return fail(why, req, err, req->why);
}

/* A description's text value (host=, cmd=) the rule refused. */
static int fail_desc(const char **why, struct dl_request *req, int err,
		     const char *what, struct dl_str v, size_t max)
{
	struct why w = {req->why, 0, sizeof(req->why)};

	why_str(&w, what);
	if (err == DL_ERANGE) {
		why_str(&w, " out of range: ");
		why_u64(&w, v.len);
		why_str(&w, " bytes, at most ");
		why_u64(&w, max);
		why_str(&w, " (escapes counted as sent)");
	} else {
		why_str(&w, " malformed: ");
		why_quote(&w, v.p, v.len);
		/* short: a reply has at most DL_REPLY_ARGS_MAX words after
		 * its second, or clients take it for a protocol error */
		why_str(&w, ", 1 to ");
		why_u64(&w, max);
		why_str(&w, " bytes of printable ASCII, no space; %XX (hex) is "
			    "a printable byte: %20 a space");
	}
	return fail(why, req, err, req->why);
}

/* A duration option (ttl=, wait=) that did not parse. */
static int fail_duration(const char **why, struct dl_request *req, int err,
			 const char *opt, struct dl_str v, int inf_too)
{
	struct why w = {req->why, 0, sizeof(req->why)};
	char max[DL_DURATION_TEXT_MAX];

	why_str(&w, opt);
	if (err == DL_ERANGE) {
		why_str(&w, " out of range: ");
		why_quote(&w, v.p, v.len);
		why_str(&w, ", at most ");
		why_str(&w, dl_format_duration(DL_DURATION_MAX_MS, max));
	} else {
		why_str(&w, " malformed: ");
		why_quote(&w, v.p, v.len);
		why_str(&w, inf_too ? ", takes inf or a duration"
				    : ", takes a duration");
		why_str(&w, ": a number and a unit, ms (default), s, m or h, "
			    "e.g. 30s");
	}
	return fail(why, req, err, req->why);
}

static int printable(struct dl_str w);

/*
 * The value of each option, checked and stored in req: one function per
 * option, in opt_names[] order (opt_value[] below). Each returns 0, or
 * the request's failure (fail*(), which sets *why).
 */
typedef int (*opt_fn)(struct dl_request *req, struct dl_str val,
		      const char **why);

static int opt_ttl(struct dl_request *req, struct dl_str val, const char **why)
{
	int err = dl_parse_duration(val.p, val.len, &req->ttl_ms);

	if (err < 0)
		return fail_duration(why, req, err, "ttl", val, 0);
	if (req->ttl_ms == 0)
		return fail(why, req, DL_EBADARG,
			    "ttl out of range: '0', at least 1ms");
	req->has_ttl = 1;
	return 0;
}

static int opt_wait(struct dl_request *req, struct dl_str val, const char **why)
{
	int err = dl_parse_wait(val.p, val.len, &req->wait_ms);

	if (err < 0)
		return fail_duration(why, req, err, "wait", val, 1);
	req->has_wait = 1;
	return 0;
}

/* 0 is none: a REFRESH drops the lease's warning with it */
static int opt_warn(struct dl_request *req, struct dl_str val, const char **why)
{
	int err = dl_parse_duration(val.p, val.len, &req->warn_ms);

	if (err < 0)
		return fail_duration(why, req, err, "warn", val, 0);
	req->has_warn = 1;
	return 0;
}

/* the lock's delay after an involuntary end; 0 is none */
static int opt_delay(struct dl_request *req, struct dl_str val,
		     const char **why)
{
	char max[DL_DURATION_TEXT_MAX];
	struct why m = {req->why, 0, sizeof(req->why)};
	int err = dl_parse_duration(val.p, val.len, &req->delay_ms);

	if (err == DL_EBADARG)
		return fail_duration(why, req, err, "delay", val, 0);
	if (err < 0 || req->delay_ms > DL_LOCK_DELAY_MAX_MS) {
		why_str(&m, "delay out of range: ");
		why_quote(&m, val.p, val.len);
		why_str(&m, ", at most ");
		why_str(&m, dl_format_duration(DL_LOCK_DELAY_MAX_MS, max));
		why_str(&m, " (a lock's delay)");
		return fail(why, req, DL_EBADARG, req->why);
	}
	req->has_delay = 1;
	return 0;
}

static int opt_id(struct dl_request *req, struct dl_str val, const char **why)
{
	int err = dl_check_tag(val.p, val.len);

	if (err < 0)
		return fail_word(why, req, err, "id", val, DL_TAG_MAX);
	req->tag = val;
	return 0;
}

static int opt_owner(struct dl_request *req, struct dl_str val,
		     const char **why)
{
	int err = dl_check_owner(val.p, val.len);

	if (err < 0)
		return fail_word(why, req, err, "owner", val, DL_OWNER_MAX);
	req->owner = val;
	return 0;
}

/* LOCKS: a page's length; LOCK, TRYLOCK: holders at once */
static int opt_limit(struct dl_request *req, struct dl_str val,
		     const char **why)
{
	uint64_t max =
		req->verb == DL_VERB_LOCKS ? DL_LOCKS_PAGE_MAX : DL_LIMIT_MAX;
	int err = dl_parse_u64(val.p, val.len, &req->limit);

	if (err < 0 || req->limit == 0 || req->limit > max) {
		struct why m = {req->why, 0, sizeof(req->why)};

		why_str(&m, err == DL_EBADARG ? "limit malformed: "
					      : "limit out of range: ");
		why_quote(&m, val.p, val.len);
		why_str(&m, ", a number from 1 to ");
		why_u64(&m, max);
		return fail(why, req, DL_EBADARG, req->why);
	}
	req->has_limit = 1;
	return 0;
}

static int opt_mode(struct dl_request *req, struct dl_str val, const char **why)
{
	struct why m = {req->why, 0, sizeof(req->why)};

	if (ci_eq(val.p, val.len, "SHARED", 6)) {
		req->shared = 1;
	} else if (!ci_eq(val.p, val.len, "EXCLUSIVE", 9)) {
		why_str(&m, "mode malformed: ");
		why_quote(&m, val.p, val.len);
		why_str(&m, ", takes exclusive or shared");
		return fail(why, req, DL_EBADARG, req->why);
	}
	return 0;
}

static int opt_after(struct dl_request *req, struct dl_str val,
		     const char **why)
{
	int err = dl_check_name(val.p, val.len);

	if (err < 0)
		return fail_word(why, req, err, "after", val, DL_NAME_MAX);
	req->after = val;
	return 0;
}

static int opt_key(struct dl_request *req, struct dl_str val, const char **why)
{
	struct why m = {req->why, 0, sizeof(req->why)};

	if (dl_check_owner_secret(val.p, val.len) < 0) {
		why_str(&m, "key malformed: ");
		why_u64(&m, DL_OWNER_SECRET_MIN);
		why_str(&m, " to ");
		why_u64(&m, DL_OWNER_SECRET_MAX);
		why_str(&m, " letters, digits, - or _");
		return fail(why, req, DL_EBADARG, req->why);
	}
	req->owner_secret = val;
	return 0;
}

/* host= and cmd=: shown to others, written to Redis (proto/desc.h's
 * rule) */
static int opt_desc(struct dl_request *req, struct dl_str val, const char **why,
		    const char *key, size_t max, struct dl_str *out)
{
	int err = dl_desc_check(val.p, val.len, max);

	if (err < 0)
		return fail_desc(why, req, err, key, val, max);
	*out = val;
	req->has_desc = 1;
	return 0;
}

static int opt_host(struct dl_request *req, struct dl_str val, const char **why)
{
	return opt_desc(req, val, why, "host", DL_DESC_HOST_MAX,
			&req->desc_host);
}

static int opt_cmd(struct dl_request *req, struct dl_str val, const char **why)
{
	return opt_desc(req, val, why, "cmd", DL_DESC_CMD_MAX, &req->desc_cmd);
}

/* value=: the lease's, shown with it (a text value, as a description) */
static int opt_lease_value(struct dl_request *req, struct dl_str val,
			   const char **why)
{
	int err = dl_desc_check(val.p, val.len, DL_VALUE_MAX);

	if (err < 0)
		return fail_desc(why, req, err, "value", val, DL_VALUE_MAX);
	req->value = val;
	return 0;
}

static int opt_pid(struct dl_request *req, struct dl_str val, const char **why)
{
	uint64_t pid;
	int err = dl_parse_u64(val.p, val.len, &pid);

	if (err < 0 || pid == 0 || pid > DL_DESC_PID_MAX) {
		struct why m = {req->why, 0, sizeof(req->why)};

		why_str(&m, "pid malformed: ");
		why_quote(&m, val.p, val.len);
		why_str(&m, ", a process id from 1 to ");
		why_u64(&m, DL_DESC_PID_MAX);
		return fail(why, req, DL_EBADARG, req->why);
	}
	req->desc_pid = (uint32_t)pid;
	req->has_desc = 1;
	return 0;
}

/* goes to the audit log: printable, bounded */
static int opt_reason(struct dl_request *req, struct dl_str val,
		      const char **why)
{
	struct why m = {req->why, 0, sizeof(req->why)};

	if (!printable(val) || val.len > DL_REASON_MAX) {
		why_str(&m, "reason malformed: 1 to ");
		why_u64(&m, DL_REASON_MAX);
		why_str(&m, " bytes of printable ASCII without space");
		return fail(why, req, DL_EBADARG, req->why);
	}
	req->reason = val;
	return 0;
}

/* A grant's proof (server/proof.h): 32 hex digits. */
static int opt_proof(struct dl_request *req, struct dl_str val,
		     const char **why)
{
	size_t i;

	for (i = 0; i < val.len; i++)
		if (!((val.p[i] >= '0' && val.p[i] <= '9') ||
		      (val.p[i] >= 'a' && val.p[i] <= 'f')))
			break;
	if (val.len != DL_PROOF_LEN || i != val.len)
		return fail(why, req, DL_EBADARG,
			    "proof malformed: 32 hex digits (a grant's "
			    "proof=)");
	req->proof = val;
	return 0;
}

/* The lease's end a grant stated (unix ms). */
static int opt_until(struct dl_request *req, struct dl_str val,
		     const char **why)
{
	if (dl_parse_u64(val.p, val.len, &req->until) < 0 || req->until == 0)
		return fail(why, req, DL_EBADARG,
			    "until malformed: a time in unix ms (a grant's "
			    "until=)");
	req->has_until = 1;
	return 0;
}

/* The holds of a lease its holder counts (its reentries + 1). */
static int opt_holds(struct dl_request *req, struct dl_str val,
		     const char **why)
{
	struct why m = {req->why, 0, sizeof(req->why)};

	if (dl_parse_u64(val.p, val.len, &req->holds) < 0 || req->holds == 0 ||
	    req->holds > DL_REENTRY_MAX) {
		why_str(&m, "holds malformed: ");
		why_quote(&m, val.p, val.len);
		why_str(&m, ", a number from 1 to ");
		why_u64(&m, DL_REENTRY_MAX);
		why_str(&m, " (the lease's holds=)");
		return fail(why, req, DL_EBADARG, req->why);
	}
	return 0;
}

/* A request id (LOCK, TRYLOCK): the same number on a request sent again
 * after a drop, so that the grant it may have had is found (locktab.h). */
static int opt_req(struct dl_request *req, struct dl_str val, const char **why)
{
	struct why m = {req->why, 0, sizeof(req->why)};

	if (dl_parse_u64(val.p, val.len, &req->req) < 0 || req->req == 0) {
		why_str(&m, "req malformed: ");
		why_quote(&m, val.p, val.len);
		why_str(&m,
			", a number from 1 to 18446744073709551615 (one per "
			"request, the same when it is sent again)");
		return fail(why, req, DL_EBADARG, req->why);
	}
	return 0;
}

/* notify=waiters: the holder is told when others wait (* WAITING) */
static int opt_notify(struct dl_request *req, struct dl_str val,
		      const char **why)
{
	struct why m = {req->why, 0, sizeof(req->why)};

	if (!ci_eq(val.p, val.len, "WAITERS", 7)) {
		why_str(&m, "notify malformed: ");
		why_quote(&m, val.p, val.len);
		why_str(&m, ", takes waiters");
		return fail(why, req, DL_EBADARG, req->why);
	}
	req->notify_waiters = 1;
	return 0;
}

static int opt_by(struct dl_request *req, struct dl_str val, const char **why)
{
	struct why m = {req->why, 0, sizeof(req->why)};

	if (ci_eq(val.p, val.len, "WAITERS", 7)) {
		req->by_waiters = 1;
	} else if (!ci_eq(val.p, val.len, "NAME", 4)) {
		why_str(&m, "by malformed: ");
		why_quote(&m, val.p, val.len);
		why_str(&m, ", takes name or waiters");
		return fail(why, req, DL_EBADARG, req->why);
	}
	return 0;
}

/* In opt_names[] order: option 1 << i is opt_value[i]. */
static const opt_fn opt_value[] = {
	opt_ttl, opt_wait,   opt_id,	      opt_owner, opt_limit, opt_after,
	opt_by,	 opt_mode,   opt_reason,      opt_key,	 opt_host,  opt_pid,
	opt_cmd, opt_warn,   opt_delay,	      opt_proof, opt_until, opt_holds,
	opt_req, opt_notify, opt_lease_value,
};

_Static_assert(sizeof(opt_value) / sizeof(opt_value[0]) ==
		       sizeof(opt_names) / sizeof(opt_names[0]),
	       "one value parser per option name");

static int parse_option(struct dl_str w, const char *eq,
			const struct verb_def *def, unsigned *seen,
			struct dl_request *req, const char **why)
{
	const char *v = eq + 1;
	struct dl_str val = {v, (size_t)(w.p + w.len - v)};
	struct dl_str key = {w.p, (size_t)(eq - w.p)};
	int i = find_opt(key.p, key.len), opt = i < 0 ? 0 : 1 << i;

	if (!(opt & def->opts))
		return fail_usage(why, req, DL_EBADARG, def,
				  opt ? "option not valid for this command:"
				      : "unknown option:",
				  key);
	if (*seen & (unsigned)opt)
		return fail_usage(why, req, DL_EBADARG, def,
				  "option given twice:", key);
	*seen |= (unsigned)opt;
	if (val.len == 0)
		return fail_usage(why, req, DL_EBADARG, def,
				  "option without a value:", key);
	return opt_value[i](req, val, why);
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
	int err;

	switch (kind) {
	case POS_NAME:
	case POS_PREFIX:
	case POS_PATTERN:
		err = dl_check_name(w.p, w.len);
		if (err < 0)
			return fail_word(why, req, err,
					 kind == POS_PREFIX ? "prefix" : "name",
					 w, DL_NAME_MAX);
		req->name = w;
		/* "<prefix>*": every name that starts with <prefix> */
		if (kind == POS_PATTERN && w.p[w.len - 1] == '*') {
			req->name.len--;
			req->prefix = 1;
		}
		break;
	case POS_TOKEN:
		err = dl_parse_u64(w.p, w.len, &req->token);
		if (err < 0) {
			struct why m = {req->why, 0, sizeof(req->why)};

			why_str(&m, err == DL_ERANGE ? "token out of range: "
						     : "token malformed: ");
			why_quote(&m, w.p, w.len);
			why_str(&m, ", the decimal number GRANTED gave");
			return fail(why, req, DL_EBADARG, req->why);
		}
		break;
	case POS_WORD:
		if (!printable(w) || req->nwords == DL_WORDS_MAX) {
			struct why m = {req->why, 0, sizeof(req->why)};

			why_str(&m, "word malformed: ");
			why_quote(&m, w.p, w.len);
			why_str(&m, ", printable ASCII only");
			return fail(why, req, DL_EBADARG, req->why);
		}
		req->words[req->nwords++] = w;
		break;
	case POS_TEXT:
		/* PING's and HELP's word is echoed back: only printable
		 * ASCII, so that a reply can never carry a CR or a control
		 * byte. */
		if (!printable(w)) {
			struct why m = {req->why, 0, sizeof(req->why)};

			why_str(&m, "word malformed: ");
			why_quote(&m, w.p, w.len);
			why_str(&m, ", printable ASCII only");
			return fail(why, req, DL_EBADARG, req->why);
		}
		req->arg = w;
		break;
	default: /* POS_SECRET: never echoed, any non-blank bytes; of two,
		    the first is the user */
		if (req->arg.len)
			req->user = req->arg;
		req->arg = w;
		break;
	}
	return 0;
}

static const char *const pos_names[] = {
	[POS_NAME] = "missing the lock name",
	[POS_TOKEN] = "missing the token",
	[POS_SECRET] = "missing the password",
	[POS_TEXT] = "missing the word",
	[POS_PREFIX] = "missing the prefix",
	[POS_PATTERN] = "missing the lock name, or a prefix and '*'",
	[POS_WORD] = "missing a word: INIT, MOVE or ADDRS",
};

/* What a multi-lock may ask besides its names. */
#define MULTI_OPTS (OPT_TTL | OPT_WAIT | OPT_REQ | OPT_ID)

/* One more name of a multi-lock (LOCK <name> <name> ...): valid, and not
 * one given before. */
static int parse_more(struct dl_str w, struct dl_request *req, const char **why)
{
	unsigned i;
	int err;

	if (req->nnames == 0)
		req->nnames = 1;
	if (req->nnames == DL_MULTI_MAX)
		return fail(why, req, DL_EBADARG,
			    "too many names: a multi-lock takes at most " XSTR(
				    DL_MULTI_MAX));
	err = dl_check_name(w.p, w.len);
	if (err < 0)
		return fail_word(why, req, err, "name", w, DL_NAME_MAX);
	for (i = 0; i < req->nnames; i++) {
		struct dl_str o = i ? req->more[i - 1] : req->name;

		if (o.len == w.len && memcmp(o.p, w.p, w.len) == 0) {
			struct why m = {req->why, 0, sizeof(req->why)};

			why_str(&m, "name given twice: ");
			why_quote(&m, w.p, w.len);
			return fail(why, req, DL_EBADARG, req->why);
		}
	}
	req->more[req->nnames++ - 1] = w;
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

	memset(req, 0, offsetof(struct dl_request, why));
	req->why[0] = '\0';
	if (len > 0 && memchr(line, '\0', len))
		return fail(why, req, DL_EBADFORMAT, "NUL byte in request");
	n = split_request(line, len, words, req);
	if (n == 0)
		return 0;
	req->verb = dl_find_verb(words[0]);
	if (n > DL_ARGS_MAX && req->verb == DL_VERB_NONE)
		return fail(why, req, DL_EBADARG,
			    "too many words, a request has at most " XSTR(
				    DL_ARGS_MAX));
	if (req->verb == DL_VERB_NONE) {
		struct why w = {req->why, 0, sizeof(req->why)};

		why_str(&w, "unknown command ");
		why_quote(&w, words[0].p, words[0].len);
		why_str(&w, "; HELP lists the commands");
		return fail(why, req, DL_EUNKNOWNCMD, req->why);
	}
	def = &verb_defs[req->verb];
	if (n > DL_ARGS_MAX)
		return fail_usage(why, req, DL_EBADARG, def,
				  "too many arguments", DL_STR_NULL);

	for (i = 1; i < n; i++) {
		struct dl_str w = words[i];
		const char *eq = memchr(w.p, '=', w.len);

		if (eq && !(req->verb == DL_VERB_AUTH && i == 1)) {
			err = parse_option(w, eq, def, &seen, req, why);
		} else if (npos >= 1 && (req->verb == DL_VERB_LOCK ||
					 req->verb == DL_VERB_TRYLOCK)) {
			err = parse_more(w, req, why); /* a multi-lock */
		} else if (npos >= def->max_pos) {
			err = fail_usage(why, req, DL_EBADARG, def,
					 "one argument too many:", w);
		} else {
			err = parse_positional(w, def->pos[npos], req, why);
			npos++;
		}
		if (err < 0)
			return err;
	}
	if (req->shared && req->has_limit && req->limit > 1)
		return fail(why, req, DL_EBADARG,
			    "mode=shared is for a lock (limit 1); the holders "
			    "of a semaphore (limit=<n>) each take a permit");
	if (req->has_warn && req->has_ttl && req->warn_ms &&
	    req->warn_ms >= req->ttl_ms)
		return fail(why, req, DL_EBADARG,
			    "warn must be less than ttl: it is how much of the "
			    "lease remains when * EXPIRING is sent");
	if (req->by_waiters && req->after.len)
		return fail(why, req, DL_EBADARG,
			    "after= pages by name; by=waiters lists the first "
			    "limit= locks only");
	if (npos < def->min_pos)
		return fail_usage(why, req, DL_EBADFORMAT, def,
				  pos_names[def->pos[npos]], DL_STR_NULL);
	/* never quoted: a password typed in the wrong place */
	if (req->user.len && dl_check_user(req->user.p, req->user.len))
		return fail(why, req, DL_EBADARG,
			    "user malformed: 1 to " XSTR(
				    DL_USER_MAX) " letters, digits and . _ -");
	if (req->verb == DL_VERB_BREAK && !req->reason.len)
		return fail_usage(why, req, DL_EBADFORMAT, def,
				  "missing reason=<text> (why the lease is "
				  "broken: it is audited)",
				  DL_STR_NULL);
	if (req->nnames > 1 && (seen & ~MULTI_OPTS))
		return fail(why, req, DL_EBADARG,
			    "several names take ttl=, wait=, req= and id= "
			    "only: a multi-lock takes every lock exclusive, "
			    "as it finds it");
	if (req->verb == DL_VERB_TRYLOCK) {
		req->wait_ms = 0;
		req->has_wait = 1;
	}
	return 0;
}
