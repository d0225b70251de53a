/* SPDX-License-Identifier: MIT */
/*
 * watch.h -- WATCH and UNWATCH: news of other owners' locks for clients
 * that do not want them.
 *
 * Owns the daemon's watch registry (watchreg.h) and each connection's
 * watch state (dl_conn.watch, made by its first WATCH, freed when the
 * connection ends). Watches are connection state: never persisted, gone
 * with the connection (a client watches again after a reconnect or a
 * take-over).
 *
 * Events. Every change of a lock's holders that the lock table reports
 * (its change hook, locktab.h) is formatted once,
 *
 *   * WATCH <name> <what> <owner> <token> holders=<n> [user=<user>]
 *     [broken_by=<user>]
 *
 * <what> being granted, released, expired, broken or withdrawn, and sent
 * to each connection with a watch that matches the name, once per
 * connection whatever the number of its watches that match. A `granted`
 * line is held until Redis has the grant, like the holder's own
 * * GRANTED, so a watcher never learns of a grant before its holder could
 * (a grant persistence never recorded is followed by `withdrawn`); the
 * others go out at once, as the release they report is answered.
 *
 * Shares. A connection has at most DL_WATCHES_PER_CONN_MAX watches, its
 * user at most its watches= quota (access.h dl_access_quota; counted in
 * the user's runtime fields, struct dl_user_rt), the daemon
 * DL_WATCHES_MAX: one user cannot take every other user's watches.
 *
 * Budget. A watcher that does not read must cost neither memory nor
 * other clients: an event is dropped, and counted, while the watcher's
 * unread output -- the daemon's buffers and the kernel's send queue
 * (dl_conn_queued): found from outside, 990 watchers that never read
 * took 1.07 GB of the host's TCP memory with nothing dropped, the kernel
 * holding it all -- is at DL_WATCH_UNREAD_MAX (or a quarter of max_output)
 * or all clients' is over max_output_total. Once dropping, every event
 * to that connection is, until it has read down to half of its budget:
 * then it is told "* WATCH-OVERFLOW <n>", n the events it missed, and
 * gets events again -- so the gap is exactly where the notice is. Events
 * never close a watcher's connection (the events of its own leases
 * still do, conn.h). A dropping watcher is looked at again at most every
 * WATCH_LOOK_MS, and when its output is written (dl_watch_drained): an
 * event then costs it a comparison, where a look is a system call
 * (900 watchers that do not read made a lock and its release cost 321 µs
 * of the daemon, found from outside).
 *
 * This module writes protocol text, as cmd.c does: the verbs' replies
 * and the events.
 */
#ifndef DL_SERVER_WATCH_H
#define DL_SERVER_WATCH_H

#include <stdint.h>

#include "proto/proto.h"
#include "server/locktab/locktab.h"

struct dl_server;
struct dl_conn;

/* srv->watch, the daemon's registry (`seed` randomises its hash tables):
 * 0 or DL_ENOMEM. */
int dl_watch_init(struct dl_server *srv, uint64_t seed);
/* Frees it (the connections have ended). */
void dl_watch_free(struct dl_server *srv);

/* WATCH and UNWATCH (cmd.c's verb table): the request is parsed and the
 * connection authenticated; WATCH checks the read right itself. */
void dl_watch_cmd(struct dl_conn *c, const struct dl_request *rq);
void dl_unwatch_cmd(struct dl_conn *c, const struct dl_request *rq);

/* The lock table's change hook (server.c): tell the watchers. */
void dl_watch_change(struct dl_server *srv, const struct dl_change *ch);

/* c wrote output (conn.c, check phase), the server's output budget woke
 * it, or the sweep came (server.c: the kernel's queue drains unseen): say
 * how many events it missed, if it has room again. */
void dl_watch_drained(struct dl_conn *c);
/* c ends: its watches go (conn.c, with its session, before its user's
 * count of connections: they are given back to the user). */
void dl_watch_conn_end(struct dl_conn *c);
/* c's watches (its user counts them, access.c gives them back when it
 * revokes a session). */
size_t dl_watch_conn_count(const struct dl_conn *c);

/* Watches of all connections, and events sent and dropped (STATS). */
struct dl_watch_stats {
	uint64_t watches, sent, dropped;
	uint64_t capped; /* of the dropped: over their user's budget */
};
void dl_watch_stats(const struct dl_server *srv, struct dl_watch_stats *st);

#endif /* DL_SERVER_WATCH_H */
