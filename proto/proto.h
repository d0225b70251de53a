/* SPDX-License-Identifier: MIT */
/*
 * proto.h -- the dlockd wire codec, shared by the server and libdlock.
 *
 * This module does no I/O and allocates nothing. It turns bytes into lines
 * (dl_linebuf), lines into requests (dl_parse_request) or replies
 * (dl_parse_reply), and values into lines (dl_fmt). proto/PROTOCOL.md is the
 * normative description of what these functions accept and produce; the
 * tests in tests/test_proto.c hold them to it.
 *
 * Borrowing: every struct dl_str a parser fills in points into the line the
 * caller passed (parsers never write to it). It is valid as long as that
 * line is: for dl_linebuf lines, until the next call of any dl_linebuf
 * function on that buffer.
 */
#ifndef DL_PROTO_PROTO_H
#define DL_PROTO_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "proto/limits.h"

/* ---- errors ------------------------------------------------------------ */

/*
 * 0 is success; failures are these negative codes. One list says all there
 * is to say about each (as libuv's UV_ERRNO_MAP does), and generates the
 * enum, dl_strerror(), dl_err_word(), dl_err_wire() and the stats labels:
 *
 *   X(name, value, wire, word, label, text)
 *
 * `wire` is the code a client is told, by its `word` after ERR; `label`
 * names it in STATS (errors_<label>) and in the metrics. The first nine
 * are their own wire codes; the others are internal, and a client sees
 * them as the wire code they name (an out-of-range number is a BAD_ARG,
 * an allocation failure an INTERNAL), counted there too. DENIED is a
 * wire word of its own, said in a NO reply ("NO DENIED <name> ...", a
 * user without the right), and counted with the errors.
 */
#define DL_ERR_MAP(X)                                                          \
	X(BADFORMAT, -1, BADFORMAT, "BAD_FORMAT", "bad_format",                \
	  "malformed request")                                                 \
	X(UNKNOWNCMD, -2, UNKNOWNCMD, "UNKNOWN_COMMAND", "unknown_command",    \
	  "unknown command")                                                   \
	X(LINETOOLONG, -3, LINETOOLONG, "LINE_TOO_LONG", "line_too_long",      \
	  "request line too long")                                             \
	X(BADARG, -4, BADARG, "BAD_ARG", "bad_arg", "bad argument")            \
	X(NOAUTH, -5, NOAUTH, "NOAUTH", "noauth", "authentication required")   \
	X(LIMIT, -6, LIMIT, "LIMIT", "limit", "limit reached")                 \
	X(UNAVAILABLE, -7, UNAVAILABLE, "UNAVAILABLE", "unavailable",          \
	  "persistence unavailable")                                           \
	X(INTERNAL, -8, INTERNAL, "INTERNAL", "internal", "internal error")    \
	X(NOTACTIVE, -9, NOTACTIVE, "NOT_ACTIVE", "not_active",                \
	  "not the active daemon")                                             \
	X(NOMEM, -10, INTERNAL, "INTERNAL", "internal", "out of memory")       \
	X(PROTO, -11, INTERNAL, "INTERNAL", "internal",                        \
	  "protocol error from peer")                                          \
	X(NOSPC, -12, INTERNAL, "INTERNAL", "internal",                        \
	  "line does not fit its buffer")                                      \
	X(RANGE, -13, BADARG, "BAD_ARG", "bad_arg", "number out of range")     \
	X(DENIED, -14, DENIED, "DENIED", "denied", "permission denied")        \
	X(MOVED, -15, MOVED, "MOVED", "moved",                                 \
	  "the name is another partition's")

#define DL__ERR_ENUM(name, value, wire, word, label, text) DL_E##name = value,
#define DL__ERR_ONE(name, value, wire, word, label, text)  +1
enum { DL_ERR_MAP(DL__ERR_ENUM) };
/* The codes are -1 .. -DL_ERR_COUNT_. */
enum { DL_ERR_COUNT_ = 0 DL_ERR_MAP(DL__ERR_ONE) };

/* Human-readable text for a DL_E* code ("unknown error" otherwise). */
const char *dl_strerror(int err);

/* Wire word for a DL_E* code ("BAD_FORMAT", ...); "INTERNAL" for a value
 * that is not a code. */
const char *dl_err_word(int err);

/* The code a client is told for err (itself for the wire codes);
 * DL_EINTERNAL for a value that is not a code. */
int dl_err_wire(int err);

/* Its label in STATS and the metrics ("bad_arg", ...). */
const char *dl_err_label(int err);

/* ---- strings ----------------------------------------------------------- */

/* A borrowed byte range; not NUL-terminated unless a parser says so. */
struct dl_str {
	const char *p;
	size_t len;
};

#define DL_STR_NULL   ((struct dl_str){NULL, 0})
#define DL_STR_LIT(s) ((struct dl_str){(s), sizeof(s) - 1})

/* ---- scalar parsers (strict; used by the request parser, the config and
 *      the dlock command line) -------------------------------------------- */

/* Decimal u64: digits only (leading zeros allowed), no sign, no space;
 * a value past UINT64_MAX is DL_EBADARG. */
int dl_parse_u64(const char *s, size_t len, uint64_t *out);

/* Duration: a decimal number with an optional unit, "ms" (the default),
 * "s", "m" or "h"; the result in ms must not exceed DL_DURATION_MAX_MS.
 * DL_EBADARG when malformed, DL_ERANGE when well formed but too large.
 * "inf" is not a duration (see dl_parse_wait). */
int dl_parse_duration(const char *s, size_t len, uint64_t *ms);

/* Write ms as the largest unit that states it exactly ("24h", "90s",
 * "1500ms"; "0ms") into buf; returns buf. */
#define DL_DURATION_TEXT_MAX 24
char *dl_format_duration(uint64_t ms, char buf[DL_DURATION_TEXT_MAX]);

/* A wait: a duration, or "inf" for DL_WAIT_INF. */
#define DL_WAIT_INF UINT64_MAX
int dl_parse_wait(const char *s, size_t len, uint64_t *ms);

/* 0 if s is a valid user name (1..DL_USER_MAX bytes of letters, digits
 * and . _ -), DL_EBADARG or DL_ERANGE otherwise. */
int dl_check_user(const char *s, size_t len);

/* 0 if s is a valid owner secret, HELLO key= (DL_OWNER_SECRET_MIN..
 * DL_OWNER_SECRET_MAX bytes of
 * letters, digits, - and _), DL_EBADARG or DL_ERANGE otherwise. */
int dl_check_owner_secret(const char *s, size_t len);

/* 0 if s is a valid lock name (1..DL_NAME_MAX bytes, 0x21..0x7e except
 * '='), DL_EBADARG for other bytes, DL_ERANGE for a valid one that is too
 * long. Owner ids follow the same rule with
 * DL_OWNER_MAX, tags with DL_TAG_MAX. */
int dl_check_name(const char *s, size_t len);
int dl_check_owner(const char *s, size_t len);
int dl_check_tag(const char *s, size_t len);

/* ---- requests ---------------------------------------------------------- */

enum dl_verb {
	DL_VERB_NONE = 0, /* an empty or blank line: no request, no reply */
	DL_VERB_LOCK,
	DL_VERB_TRYLOCK,
	DL_VERB_UNLOCK,
	DL_VERB_REFRESH,
	DL_VERB_CHECK,
	DL_VERB_CANCEL,
	DL_VERB_STATUS,
	DL_VERB_HELLO,
	DL_VERB_AUTH,
	DL_VERB_STATS,
	DL_VERB_PING,
	DL_VERB_QUIT,
	DL_VERB_LOCKS,
	DL_VERB_HELP,
	DL_VERB_BREAK,
	DL_VERB_HOLDERS,
	DL_VERB_WATCH,
	DL_VERB_UNWATCH,
	DL_VERB_RECLAIM,
	DL_VERB_MAP,
	DL_VERB_PARTITION,
	DL_VERB_COUNT_
};

/* Upper-case name of a verb ("LOCK"), "" for DL_VERB_NONE. */
const char *dl_verb_name(enum dl_verb v);

/* The verb's syntax ("UNLOCK <name> <token> [id=<tag>]") and a line on
 * what it does; "" for DL_VERB_NONE. HELP sends them. */
const char *dl_verb_usage(enum dl_verb v);
const char *dl_verb_summary(enum dl_verb v);

/* The verb named by w (any case), DL_VERB_NONE if none. */
enum dl_verb dl_find_verb(struct dl_str w);

/* Bytes of the explanation dl_parse_request writes into a request. */
#define DL_WHY_MAX 320

struct dl_request {
	enum dl_verb verb;
	struct dl_str name; /* LOCK TRYLOCK UNLOCK REFRESH CHECK CANCEL STATUS
			       HOLDERS BREAK; the prefix of LOCKS (len 0 when
			       absent); WATCH UNWATCH: the name, or the prefix
			       without its '*' when `prefix` */
	uint64_t token;	    /* UNLOCK REFRESH CHECK */
	uint64_t ttl_ms;    /* ttl=, when has_ttl */
	uint64_t wait_ms;   /* wait=, when has_wait; may be DL_WAIT_INF */
	unsigned has_ttl : 1;
	unsigned has_wait : 1;
	unsigned has_warn : 1;
	unsigned has_delay : 1;
	uint64_t warn_ms;  /* LOCK TRYLOCK REFRESH RECLAIM warn=, when has_warn
			      (0: none) */
	uint64_t delay_ms; /* LOCK TRYLOCK RECLAIM delay=, when has_delay (0:
			      none; at most DL_LOCK_DELAY_MAX_MS) */
	struct dl_str tag; /* id=<tag>; len 0 when absent */
	struct dl_str owner;	    /* HELLO owner=; len 0 when absent */
	struct dl_str owner_secret; /* HELLO key=; len 0 when absent */
	/* HELLO host= pid= cmd= (proto/desc.h): the client's description
	 * of itself; has_desc when any of them was given */
	struct dl_str desc_host, desc_cmd; /* len 0 when absent */
	uint32_t desc_pid;		   /* 0 when absent */
	unsigned has_desc : 1;
	struct dl_str arg;    /* AUTH secret, PING text, HELP verb (len 0 when
				 absent) */
	struct dl_str user;   /* AUTH <user> <secret>: the user (len 0 in the
				 one-word form, AUTH <password>) */
	struct dl_str reason; /* BREAK reason=<text> (required there) */
	struct dl_str after;  /* LOCKS after=<name>; len 0 when absent */
	uint64_t limit;	      /* LOCKS limit= (page length), LOCK TRYLOCK
				 limit= (holders at once), when has_limit */
	unsigned has_limit : 1;
	unsigned by_waiters : 1; /* LOCKS by=waiters */
	unsigned shared : 1;	 /* LOCK TRYLOCK mode=shared */
	unsigned prefix : 1;	 /* WATCH UNWATCH: the word ended in '*' */
	unsigned has_until : 1;	 /* RECLAIM until=, when given */
	uint64_t until;		 /* RECLAIM until= (unix ms) */
	struct dl_str proof;	 /* RECLAIM proof= (hex); len 0 when absent */
	uint64_t holds;		 /* RECLAIM holds= (1..DL_REENTRY_MAX), 0
				    when absent */
	uint64_t req;		 /* LOCK TRYLOCK req= (a request id), 0 when
				    absent */
	unsigned notify_waiters : 1; /* LOCK TRYLOCK notify=waiters */
	struct dl_str value; /* LOCK TRYLOCK REFRESH RECLAIM value= (a text
				value, proto/desc.h); len 0 when absent */
	struct dl_str words[DL_WORDS_MAX]; /* PARTITION's words */
	uint8_t nwords;
	uint8_t nnames;	      /* LOCK TRYLOCK: 0 for a single lock (name);
				 2..DL_MULTI_MAX for a multi-lock, whose names are
				 name, then more[0 .. nnames - 2] */
	char why[DL_WHY_MAX]; /* the explanation of a failed parse */
	/* not cleared by the parser: read only below nnames */
	struct dl_str more[DL_MULTI_MAX - 1];
};

/* Parse one request line (line ending already removed; the line may
 * contain anything, NUL bytes included). Returns 0 and fills *req, or a
 * negative DL_E* code with *why set to an explanation for a person: which
 * argument or option, malformed or out of range, and the accepted form or
 * the limit. It lives in req->why (printable ASCII only: the offending
 * word is quoted with other bytes shown as '?'). Even on
 * failure req->tag is set when the line carried a valid id= so the error
 * reply can echo it. TRYLOCK is reported as itself; its wait is 0. */
int dl_parse_request(const char *line, size_t len, struct dl_request *req,
		     const char **why);

/* ---- replies (the client side) ------------------------------------------ */

enum dl_reply_kind {
	DL_REPLY_OK,	/* "OK <WORD> ..." */
	DL_REPLY_NO,	/* "NO <REASON> ..." */
	DL_REPLY_ERR,	/* "ERR <CODE> <free text>" */
	DL_REPLY_EVENT, /* "* <EVENT> ..." */
	DL_REPLY_BODY,	/* a body line (dl_parse_body): "<first> <words>" */
};

#define DL_REPLY_ARGS_MAX 24

struct dl_reply {
	enum dl_reply_kind kind;
	struct dl_str word; /* GRANTED, BUSY, BAD_ARG, EXPIRED, ... */
	int argc;	    /* words after `word`, the id= tag excluded */
	struct dl_str argv[DL_REPLY_ARGS_MAX];
	struct dl_str tag;  /* the echoed id=, len 0 when absent */
	struct dl_str rest; /* everything after `word`, tag excluded (the
			       text of ERR and of PONG) */
};

/* The next word of s[*i..len) (words are split on runs of spaces and
 * tabs), *i moved past it; len 0 at the end. */
struct dl_str dl_next_word(const char *s, size_t len, size_t *i);

/* Split a reply or event line (ending removed). DL_EPROTO when it is not
 * one. A trailing " id=<tag>" is the echoed tag. */
int dl_parse_reply(const char *line, size_t len, struct dl_reply *r);

/* Split a body line of a multi-line reply (LOCKS, HOLDERS, STATS):
 * its first word in r->word (a lock name, "holder", "waiter", a
 * statistic), the words after it in argv, kind DL_REPLY_BODY; no tag. A
 * line of more than DL_REPLY_ARGS_MAX words keeps the first ones (a later
 * server's added keys come last). DL_EPROTO for an empty line or one with
 * a NUL in it. */
int dl_parse_body(const char *line, size_t len, struct dl_reply *r);

/* argv[i] as a u64 (DL_EPROTO when missing or not a number). */
int dl_reply_u64(const struct dl_reply *r, int i, uint64_t *out);

/* The value of "key=value" among argv; DL_EPROTO when absent. */
int dl_reply_kv(const struct dl_reply *r, const char *key, struct dl_str *out);

/* ---- formatting --------------------------------------------------------- */

/* A line under construction in a caller's buffer. Words are separated by
 * one space; dl_fmt_end() appends the tag and the line ending. Overflow is
 * sticky and reported by dl_fmt_end(). */
struct dl_fmt {
	char *buf;
	size_t cap;
	size_t len;
	int overflow;
};

void dl_fmt_init(struct dl_fmt *f, char *buf, size_t cap);
void dl_fmt_word(struct dl_fmt *f, const char *word);
void dl_fmt_str(struct dl_fmt *f, struct dl_str s);
void dl_fmt_u64(struct dl_fmt *f, uint64_t v);
void dl_fmt_kv_u64(struct dl_fmt *f, const char *key, uint64_t v);
void dl_fmt_kv_str(struct dl_fmt *f, const char *key, struct dl_str v);
/* Appends " id=<tag>" when tag.len > 0, then CRLF. Returns the line's
 * length, or DL_ENOSPC if it did not fit (the buffer then holds garbage). */
int dl_fmt_end(struct dl_fmt *f, struct dl_str tag);

/* Append the decimal form of v to buf (at least 21 bytes); returns the
 * number of digits written (no NUL). */
size_t dl_u64_to_dec(uint64_t v, char *buf);

/* ---- line splitting ----------------------------------------------------- */

/* Bytes of input buffered per connection: one maximal line with its CRLF,
 * plus room so that small pipelined requests are read in one go. */
#define DL_INBUF_SIZE 4096

/*
 * Splits a byte stream into lines, enforcing DL_LINE_MAX and
 * DL_LINE_DISCARD_MAX. The owner reads directly into dl_linebuf_space()
 * (libuv alloc_cb, or read(2)), reports the count with dl_linebuf_commit(),
 * then calls dl_linebuf_next() until it returns DL_LB_NONE -- or
 * DL_LB_OVERFLOW, which is final: the caller closes the connection. The
 * owner must drain the buffer (next() until NONE) before asking for space
 * again; space() moves unconsumed bytes.
 */
struct dl_linebuf {
	size_t start;	/* first unconsumed byte */
	size_t len;	/* bytes held, from 0 */
	size_t discard; /* bytes of an over-long line dropped so far; 0 when
			   not discarding */
	char buf[DL_INBUF_SIZE];
};

enum dl_lb_result {
	DL_LB_NONE = 0,	    /* need more bytes */
	DL_LB_LINE = 1,	    /* *line, *len: a complete line, ending removed,
			       NUL-terminated in place */
	DL_LB_TOOLONG = 2,  /* an over-long line ended: answer
			       LINE_TOO_LONG, carry on */
	DL_LB_OVERFLOW = 3, /* DL_LINE_DISCARD_MAX bytes without a LF:
			       close the connection */
};

void dl_linebuf_init(struct dl_linebuf *lb);
/* Free space to read into; never less than 1 byte. */
char *dl_linebuf_space(struct dl_linebuf *lb, size_t *avail);
void dl_linebuf_commit(struct dl_linebuf *lb, size_t n);
/* The returned line lives until the next call of any dl_linebuf function. */
enum dl_lb_result dl_linebuf_next(struct dl_linebuf *lb, char **line,
				  size_t *len);

#endif /* DL_PROTO_PROTO_H */
