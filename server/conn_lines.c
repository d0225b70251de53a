/* SPDX-License-Identifier: MIT */
/*
 * conn_lines.c -- the lines any module may say on a connection (conn.h):
 * an error reply and * BYE, formatted with the codec and queued with
 * dl_conn_send(). Apart from conn.c so that what formats them (cmd.c,
 * watch.c, access.c, server.c) depends on the connection layer only, and
 * so that the engine fuzzer, which stands in for conn.c, links them as
 * they are.
 */
#include <stdio.h>

#include "proto/proto.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/server.h"

void dl_conn_error(struct dl_conn *c, int err, const char *why,
		   struct dl_str tag)
{
	char buf[DL_REPLY_MAX];
	struct dl_fmt f;
	int n;

	/* counted as what the client is told: a range error is a BAD_ARG */
	c->srv->st.errors[-dl_err_wire(err)]++;
	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "ERR");
	dl_fmt_word(&f, dl_err_word(err));
	dl_fmt_word(&f, why);
	if ((n = dl_fmt_end(&f, tag)) < 0) {
		/* cannot happen with the wire limits (DL_WHY_MAX) */
		dl_error("reply did not fit in %d bytes", DL_REPLY_MAX);
		dl_fmt_init(&f, buf, sizeof(buf));
		dl_fmt_word(&f, "ERR INTERNAL reply too long");
		n = dl_fmt_end(&f, DL_STR_NULL);
	}
	dl_conn_send(c, buf, (size_t)n, NULL);
}

void dl_conn_bye(struct dl_conn *c, const char *reason)
{
	static const struct dl_line event = {.kind = DL_LINE_EVENT};
	char buf[DL_REPLY_MAX];
	struct dl_fmt f;
	int n;

	dl_fmt_init(&f, buf, sizeof(buf));
	dl_fmt_word(&f, "* BYE");
	dl_fmt_word(&f, reason);
	if ((n = dl_fmt_end(&f, DL_STR_NULL)) >= 0)
		dl_conn_send(c, buf, (size_t)n, &event);
}
