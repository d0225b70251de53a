/* SPDX-License-Identifier: MIT */
/*
 * netns.h -- a private network for fault tests: a namespace joined to the
 * test's own by a veth pair, and partitions made with nftables drop rules
 * inside it (this kernel has no tc netem: a dropped packet comes later by
 * TCP retransmission, which is how a write on an abandoned connection
 * arrives late).
 *
 * Everything is named after the test's pid, created by h_net_up() and
 * removed by h_net_down() (the namespace's rules go with it). Needs root;
 * h_net_possible() says whether it can work here.
 */
#ifndef DL_TESTS_NETNS_H
#define DL_TESTS_NETNS_H

struct h_net {
	char ns[32];   /* namespace name */
	char veth[32]; /* our end; the other is <veth>p, inside ns */
	char host[32]; /* our address */
	char peer[32]; /* the address inside ns */
	int up;
};

/* 1 when running as root with ip(8) and nft(8) installed. */
int h_net_possible(void);
void h_net_up(struct h_net *n);
void h_net_down(struct h_net *n);
/* Inside ns, drop every packet from `host` whose TCP source port is
 * sport (0: every packet from host): a partition of that connection (or of
 * the whole host). */
void h_net_drop(struct h_net *n, int sport);
/* Remove every drop rule. */
void h_net_heal(struct h_net *n);

#endif /* DL_TESTS_NETNS_H */
