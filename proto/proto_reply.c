/* SPDX-License-Identifier: MIT */
/*
 * proto_reply.c -- the dlockd wire codec's other half (proto.c has the
 * requests): replies, formatting and line splitting.
 *
 * Owns nothing, as proto.c: memory the caller passes in, no I/O, no
 * allocation, no global state.
 *
 * Reply lines (dl_parse_reply) are split as requests are (dl_next_word);
 * the kind is the exact-case first word, and a last word "id=..." after
 * the reply word is the echoed tag.
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
#include <assert.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "proto/proto.h"

_Static_assert(DL_INBUF_SIZE > DL_LINE_MAX + 2,
	       "the input buffer must hold a maximal line and its CRLF");
_Static_assert(DL_INBUF_SIZE < DL_LINE_DISCARD_MAX,
	       "a buffered line must not reach the discard limit");

/* ---- replies ------------------------------------------------------------- */

int dl_parse_reply(const char *line, size_t len, struct dl_reply *r)
{
	struct dl_str w[DL_REPLY_ARGS_MAX + 1]; /* room for a trailing tag */
	struct dl_str first;
	const char *end;
	size_t i = 0;
	int n = 0;

	memset(r, 0, sizeof(*r));
	/* a server says nothing but printable ASCII and blanks (what it
	 * quotes of a client is made so): another control byte -- a bare
	 * CR hiding a second line in the first, a NUL -- or a byte above
	 * 0x7e is not a reply (found from outside: such lines were
	 * believed) */
	for (i = 0; i < len; i++)
		if (((unsigned char)line[i] < 0x20 && line[i] != '\t') ||
		    (unsigned char)line[i] > 0x7e)
			return DL_EPROTO;
	i = 0;
	first = dl_next_word(line, len, &i);
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
	r->word = dl_next_word(line, len, &i);
	if (r->word.len == 0)
		return DL_EPROTO;

	end = line + len; /* where rest stops: the tag or the line's end */
	for (;;) {
		struct dl_str a = dl_next_word(line, len, &i);

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

int dl_parse_body(const char *line, size_t len, struct dl_reply *r)
{
	struct dl_str a;
	size_t i = 0;

	memset(r, 0, sizeof(*r));
	if (len > 0 && memchr(line, '\0', len))
		return DL_EPROTO;
	r->kind = DL_REPLY_BODY;
	r->word = dl_next_word(line, len, &i);
	if (r->word.len == 0)
		return DL_EPROTO;
	while (r->argc < DL_REPLY_ARGS_MAX &&
	       (a = dl_next_word(line, len, &i)).len > 0)
		r->argv[r->argc++] = a;
	r->rest.p = r->argc ? r->argv[0].p : line + len;
	if (r->argc)
		r->rest.len = (size_t)(r->argv[r->argc - 1].p +
				       r->argv[r->argc - 1].len - r->argv[0].p);
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
