/* SPDX-License-Identifier: MIT */
/*
 * desc.c -- text values of a client's description (see desc.h).
 *
 * Three small passes over bytes, shared by the server (which checks what
 * it is sent), libdlock and dlock (which encode what they send, decode
 * what they show). The rule lives in one place, hexval() and
 * escape_ok(), so that what one side makes the other accepts.
 */
#include "proto/desc.h"

#include "proto/proto.h"

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The byte the escape at s[i] (a '%') names, or -1 if it is not a valid
 * escape: two hex digits naming a printable byte, space included. */
static int escape_ok(const char *s, size_t len, size_t i)
{
	int hi, lo, v;

	if (i + 2 >= len)
		return -1;
	hi = hexval(s[i + 1]);
	lo = hexval(s[i + 2]);
	if (hi < 0 || lo < 0)
		return -1;
	v = hi << 4 | lo;
	return v >= 0x20 && v <= 0x7e ? v : -1;
}

int dl_desc_check(const char *s, size_t len, size_t max)
{
	size_t i;

	if (len == 0)
		return DL_EBADARG;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x21 || c > 0x7e)
			return DL_EBADARG;
		if (c == '%') {
			if (escape_ok(s, len, i) < 0)
				return DL_EBADARG;
			i += 2;
		}
	}
	return len > max ? DL_ERANGE : 0;
}

size_t dl_desc_encode(const char *s, size_t len, char *out, size_t max)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t i, n = 0;

	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == ' ' || c == '%') {
			if (max - n < 3)
				break;
			out[n++] = '%';
			out[n++] = hex[c >> 4];
			out[n++] = hex[c & 15];
			continue;
		}
		if (n == max)
			break;
		out[n++] = c > 0x20 && c < 0x7f ? (char)c : '?';
	}
	return n;
}

size_t dl_desc_decode(const char *s, size_t len, char *out, size_t cap)
{
	size_t i, n = 0;
	int v;

	for (i = 0; i < len && n + 1 < cap; i++) {
		if (s[i] == '%' && (v = escape_ok(s, len, i)) >= 0) {
			out[n++] = (char)v;
			i += 2;
		} else {
			/* a peer's bytes go to a terminal: printable only */
			out[n++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
		}
	}
	out[n] = '\0';
	return n;
}
