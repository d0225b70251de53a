/* SPDX-License-Identifier: MIT */
/*
 * conn_budget.h -- the output budget's books and the users' turns
 * (conn.h, "A budget for all of them" and "Turns"): what each connection,
 * each user of the users file and the whole daemon hold unread, and who
 * is over. conn.c asks and acts (it pauses, and closes the connection
 * named here); conn_budget.c keeps the counts and chooses.
 */
#ifndef DL_SERVER_CONN_BUDGET_H
#define DL_SERVER_CONN_BUDGET_H

#include <stdint.h>

#include "server/conn.h"

struct dl_server;
struct dl_user;

/* All connections' unread output is over max_output_total. */
int dl__conn_over_budget(const struct dl_server *srv);
/* The user of the users file whose share c's output counts in, or NULL
 * (the default user is every client at once; before AUTH, nobody's). */
struct dl_user *dl__conn_sharer(const struct dl_conn *c);
/* c's user has had its turn's work in this loop iteration. */
int dl__conn_turn_spent(const struct dl_conn *c);
/* Count `work` against c's user's turn. */
void dl__conn_turn_charge(const struct dl_conn *c, uint64_t work);
/* c's user holds more than its share of the budget. */
int dl__conn_user_over(const struct dl_conn *c);
/* Bring the daemon's count (and c's user's) up to date with c's
 * buffers; wakes the paused connections when the sum falls back. */
void dl__conn_account(struct dl_conn *c);
/* The connection to close while over the budget (with `of`, over that
 * user's share: one of its connections), counted and logged; NULL when
 * none holds any output. The caller ends it. */
struct dl_conn *dl__conn_biggest(struct dl_server *srv,
				 const struct dl_user *of);

#endif /* DL_SERVER_CONN_BUDGET_H */
