/* SPDX-License-Identifier: MIT */
/*
 * cmd.h -- request dispatch: one parsed line in, one reply out.
 *
 * With cmd_info.c (the verbs that only read) and watch.c (the WATCH verbs
 * and their events), the only code that
 * writes protocol text on the server side: it parses a line with the
 * codec, applies the gates (AUTH, persistence available, configured
 * limits), calls the lock table, and formats the reply or event through
 * the codec's formatter. Which replies are durable is decided by
 * the lock table (dl_result.durable) and passed on to the connection.
 */
#ifndef DL_SERVER_CMD_H
#define DL_SERVER_CMD_H

#include <stddef.h>

#include "proto/proto.h"
#include "server/locktab/locktab.h"

struct dl_conn;

/* Execute one request line (ending removed, NUL-terminated). */
void dl_cmd_execute(struct dl_conn *c, char *line, size_t len);

/* Send a lock-table event to the connection that owns session data. */
void dl_cmd_event(struct dl_conn *c, const struct dl_event *ev);

/* Persistence went down: withdraw c's grants that are not durable and
 * send what it held (see the comment in cmd.c). */
void dl_cmd_break_hold(struct dl_conn *c);

/* A held line is about to go out (its epoch committed; `text` its
 * bytes), before any line of its release is written: what
 * its request left until it was durable is done now -- a REFRESH that
 * shortens its lease takes effect (dl_locktab_refresh). Changes no held
 * line and sends nothing. */
struct dl_line;
void dl_cmd_released(struct dl_conn *c, const struct dl_line *line,
		     const char *text);

/* Multi-locks (cmd_multi.c): the server's handles made; the steps that
 * events made due, run at the flush point; a connection that ends gives
 * back what its multi-lock in progress took. */
struct dl_server;
void dl_cmd_multi_init(struct dl_server *srv);
void dl_cmd_multi_run(struct dl_server *srv);
void dl_cmd_multi_end(struct dl_conn *c);

#endif /* DL_SERVER_CMD_H */
