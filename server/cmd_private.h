/* SPDX-License-Identifier: MIT */
/*
 * cmd_private.h -- what cmd.c and cmd_info.c share: a reply formatted in
 * a stack buffer the longest reply fits, the words that name an owner and
 * what a holder said of itself, and the read-only verbs' handlers (their
 * table is cmd.c's).
 */
#ifndef DL_SERVER_CMD_PRIVATE_H
#define DL_SERVER_CMD_PRIVATE_H

#include "proto/proto.h"
#include "server/conn.h"
#include "server/locktab/locktab.h"

struct reply {
	struct dl_fmt f;
	char buf[DL_REPLY_MAX];
};

/* The reply's first word. */
struct dl_fmt *dl__cmd_reply_begin(struct reply *r, const char *head);
/* Its tag, and off to the connection (`line`: a grant's, which a BREAK
 * may withdraw; NULL for any other reply). */
void dl__cmd_reply_send(struct dl_conn *c, struct reply *r, struct dl_str tag,
			const struct dl_line *line);
/* owner=<id> [user=<name>] (kv), or the bare id. */
void dl__cmd_fmt_owner(struct dl_fmt *f, int kv, struct dl_str key);
/* host= pid= cmd=, each when said. */
void dl__cmd_fmt_desc(struct dl_fmt *f, const struct dl_desc *d);

/* cmd_info.c */
void dl__cmd_status(struct dl_conn *c, const struct dl_request *rq);
void dl__cmd_holders(struct dl_conn *c, const struct dl_request *rq);
void dl__cmd_stats(struct dl_conn *c, const struct dl_request *rq);
void dl__cmd_locks(struct dl_conn *c, const struct dl_request *rq);
void dl__cmd_help(struct dl_conn *c, const struct dl_request *rq);

#endif /* DL_SERVER_CMD_PRIVATE_H */
