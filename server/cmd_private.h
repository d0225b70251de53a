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
#include "server/access.h"
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

/* cmd.c, for cmd_multi.c: the words of a grant (the name and TTL noted
 * in `line`, the proof), a cycle, a result's or a failed call's reply,
 * the user's deadlock-check budget, the max_ttl check of a LOCK. */
void dl__cmd_fmt_name(struct reply *r, struct dl_line *line,
		      struct dl_str name);
void dl__cmd_fmt_ttl(struct reply *r, struct dl_line *line, uint64_t ttl);
void dl__cmd_fmt_proof(struct dl_conn *c, struct reply *r, struct dl_str name,
		       uint64_t token, uint64_t deadline);
void dl__cmd_fmt_cycle(struct dl_fmt *f, struct dl_conn *c);
void dl__cmd_result_reply(struct dl_conn *c, struct dl_str name,
			  const struct dl_result *res, struct dl_str tag);
void dl__cmd_table_error(struct dl_conn *c, int err, struct dl_str name,
			 struct dl_str tag);
uint32_t *dl__cmd_walk_budget(struct dl_conn *c);
/* NO DENIED <name> need=<right>. */
void dl__cmd_denied(struct dl_conn *c, enum dl_right right, struct dl_str name,
		    struct dl_str tag);
int dl__cmd_check_ttl(struct dl_conn *c, const struct dl_request *rq);

/* cmd_part.c: 0 if name is this partition's (or the daemon serves every
 * name); else the client is answered (NO MOVED, ERR UNAVAILABLE) and -1. */
int dl__cmd_route(struct dl_conn *c, struct dl_str name, struct dl_str tag);
/* The words after "* MOVED <name>": where `name` went (cmd_part.c). */
void dl__cmd_fmt_moved(struct dl_conn *c, struct dl_fmt *f, struct dl_str name);
void dl__cmd_map(struct dl_conn *c, const struct dl_request *rq);
void dl__cmd_partition(struct dl_conn *c, const struct dl_request *rq);

/* cmd_multi.c: several locks at once (LOCK <name> <name> ...). */
void dl__cmd_multi_lock(struct dl_conn *c, const struct dl_request *rq);
/* 1 if req= is that of a multi-lock of c's owner in progress: a single
 * LOCK with it is refused (cmd_multi.c, req_in_use). */
int dl__cmd_multi_req_in_use(struct dl_conn *c, uint64_t req);
/* CANCEL of the multi-lock in progress (its first name): 1 if it was. */
int dl__cmd_multi_cancel(struct dl_conn *c, const struct dl_request *rq);
/* An event for c while its multi-lock is in progress: 1 if it was one of
 * the multi-lock's (kept from the client). */
int dl__cmd_multi_event(struct dl_conn *c, const struct dl_event *ev);
/* A held line of a multi-lock's block, withdrawn (break_line). */
size_t dl__cmd_multi_break(struct dl_conn *c, const struct dl_line *line,
			   struct dl_str name, struct dl_str tag, char *buf);

/* cmd_info.c */
void dl__cmd_status(struct dl_conn *c, const struct dl_request *rq);
void dl__cmd_holders(struct dl_conn *c, const struct dl_request *rq);
void dl__cmd_stats(struct dl_conn *c, const struct dl_request *rq);
void dl__cmd_locks(struct dl_conn *c, const struct dl_request *rq);
void dl__cmd_help(struct dl_conn *c, const struct dl_request *rq);

#endif /* DL_SERVER_CMD_PRIVATE_H */
