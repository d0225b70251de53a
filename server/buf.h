/* SPDX-License-Identifier: MIT */
/*
 * buf.h -- a growable byte buffer, for text built in pieces (Redis
 * records, the metrics page). The buffer owns p; free it with free().
 */
#ifndef DL_SERVER_BUF_H
#define DL_SERVER_BUF_H

#include <stddef.h>

struct dl_buf {
	char *p;
	size_t len;
	size_t cap;
};

/* Room for `more` bytes past len; DL_ENOMEM when it cannot grow. */
int dl_buf_reserve(struct dl_buf *b, size_t more);
int dl_buf_add(struct dl_buf *b, const char *p, size_t n);
/* printf into the buffer (appends). */
int dl_buf_printf(struct dl_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* DL_SERVER_BUF_H */
