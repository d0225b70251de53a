/* SPDX-License-Identifier: MIT */
/*
 * conn_budget.c -- the output budget's books and the users' turns
 * (conn_budget.h; the model is conn.h's).
 */
#include "server/conn_budget.h"

#include "server/log.h"
#include "server/server.h"
#include "server/tls.h"
#include "server/users.h"

/* Bytes the client has not read yet, held ones included (with TLS, the
 * ciphertext it has not taken yet too). */
size_t dl_conn_unread(const struct dl_conn *c)
{
	return c->out.len + c->wout.len + c->held.text.len +
	       (c->tls ? dl_tls_pending(c->tls) : 0);
}

/* The budget of all connections' unread output (conn.h). */
int dl__conn_over_budget(const struct dl_server *srv)
{
	return srv->out_unread > srv->cfg.max_output_total;
}

/* The memory c's unread output takes: its buffers as allocated (twice
 * their bytes, at worst), while it has any. Buffers a connection keeps
 * once everything is written (DL_OUT_KEEP) are not counted: they are its
 * fixed cost, like its input buffer. A connection being thrown away
 * counts nothing: its bytes are never sent. */
static size_t held_memory(const struct dl_conn *c)
{
	if (c->end == DL_END_ABORT || c->closing || dl_conn_unread(c) == 0)
		return 0;
	return c->out.cap + c->wout.cap + dl_heldq_memory(&c->held);
}

struct dl_user *dl__conn_sharer(const struct dl_conn *c)
{
	return c->user && c->user->name[0] ? c->user : NULL;
}

/* c's user has had its share of this loop iteration (conn.h, Turns: a
 * user of the users file, as for its share of the output budget). */
int dl__conn_turn_spent(const struct dl_conn *c)
{
	const struct dl_user *u = dl__conn_sharer(c);

	return u && u->rt.turn_iter == c->srv->iter &&
	       u->rt.turn_work >= DL_TURN_WORK;
}

void dl__conn_turn_charge(const struct dl_conn *c, uint64_t work)
{
	struct dl_user *u = dl__conn_sharer(c);

	if (!u)
		return;
	if (u->rt.turn_iter != c->srv->iter) {
		u->rt.turn_iter = c->srv->iter;
		u->rt.turn_work = 0;
	}
	u->rt.turn_work += work;
}

/* What the budget charges c's party with: its user's bytes, else its
 * own. */
static uint64_t party_bytes(const struct dl_conn *c)
{
	const struct dl_user *u = dl__conn_sharer(c);

	return u ? u->rt.out_unread : c->counted;
}

static uint64_t user_share(const struct dl_server *srv)
{
	return srv->cfg.max_output_per_user
		       ? srv->cfg.max_output_per_user
		       : srv->cfg.max_output_total / DL_OUTPUT_USER_SHARE;
}

int dl__conn_user_over(const struct dl_conn *c)
{
	const struct dl_user *u = dl__conn_sharer(c);

	return u && u->rt.out_unread > user_share(c->srv);
}

void dl_conn_share_move(const struct dl_conn *c, struct dl_user *from,
			struct dl_user *to)
{
	if (from && from->name[0])
		from->rt.out_unread -= c->counted;
	if (to && to->name[0])
		to->rt.out_unread += c->counted;
}

/* Bring srv->out_unread (and c's user's part of it) up to date with c's
 * buffers. */
void dl__conn_account(struct dl_conn *c)
{
	struct dl_server *srv = c->srv;
	struct dl_user *u = dl__conn_sharer(c);
	size_t now = held_memory(c);
	int was_over = srv->out_unread > srv->cfg.max_output_total / 4 * 3;

	srv->out_unread = srv->out_unread - c->counted + now;
	if (u)
		u->rt.out_unread = u->rt.out_unread - c->counted + now;
	c->counted = now;
	if (was_over && srv->out_unread <= srv->cfg.max_output_total / 4 * 3)
		srv->budget_wake = 1;
}

struct dl_conn *dl__conn_biggest(struct dl_server *srv,
				 const struct dl_user *of)
{
	struct dl_conn *c, *big = NULL;

	for (c = srv->conns; c; c = c->next) {
		if (c->end == DL_END_ABORT || c->closing || c->counted == 0 ||
		    (of && dl__conn_sharer(c) != of))
			continue;
		if (!big || party_bytes(c) > party_bytes(big) ||
		    (party_bytes(c) == party_bytes(big) &&
		     c->counted > big->counted))
			big = c;
	}
	if (!big)
		return NULL;
	srv->st.output_budget_closes++;
	if (of)
		dl_notice("conn %llu %s: %zu bytes unread, the most of user "
			  "%s's, who hold more than max_output_per_user "
			  "(%llu), closing",
			  (unsigned long long)big->id, big->peer, big->counted,
			  of->name, (unsigned long long)user_share(srv));
	else
		dl_notice("conn %llu %s: %zu bytes unread, the most of the "
			  "client holding the most while connections hold "
			  "more than max_output_total (%llu), closing",
			  (unsigned long long)big->id, big->peer, big->counted,
			  (unsigned long long)srv->cfg.max_output_total);
	return big;
}
