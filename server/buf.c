/* SPDX-License-Identifier: MIT */
/*
 * buf.c -- growable byte buffers (see buf.h).
 */
#include "server/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

int dl_buf_reserve(struct dl_buf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 256;
	char *p;

	if (b->len + more <= b->cap)
		return 0;
	while (cap < b->len + more)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return DL_ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int dl_buf_add(struct dl_buf *b, const char *p, size_t n)
{
	if (n == 0) /* nothing to copy, maybe nowhere yet (p NULL) */
		return 0;
	if (dl_buf_reserve(b, n))
		return DL_ENOMEM;
	memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

int dl_buf_printf(struct dl_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || dl_buf_reserve(b, (size_t)n + 1))
		return DL_ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}
