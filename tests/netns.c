/* SPDX-License-Identifier: MIT */
/*
 * netns.c -- a private network for fault tests (netns.h).
 */
#include "tests/netns.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Run a shell command; returns its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

int h_net_possible(void)
{
	return geteuid() == 0 &&
	       sh("command -v ip >/dev/null && command -v nft >/dev/null") == 0;
}

void h_net_up(struct h_net *n)
{
	unsigned p = (unsigned)getpid();

	memset(n, 0, sizeof(*n));
	snprintf(n->ns, sizeof(n->ns), "dlt%u", p);
	snprintf(n->veth, sizeof(n->veth), "dlt%u", p % 100000000u);
	snprintf(n->host, sizeof(n->host), "10.%u.%u.1", 100 + p % 100,
		 (p / 100) % 250);
	snprintf(n->peer, sizeof(n->peer), "10.%u.%u.2", 100 + p % 100,
		 (p / 100) % 250);
	cr_assert_eq(
		sh("ip netns add %s && "
		   "ip link add %s type veth peer name %sp && "
		   "ip link set %sp netns %s && "
		   "ip addr add %s/24 dev %s && ip link set %s up && "
		   "ip -n %s addr add %s/24 dev %sp && "
		   "ip -n %s link set %sp up && ip -n %s link set lo up && "
		   "ip netns exec %s nft add table inet dlt && "
		   "ip netns exec %s nft add chain inet dlt in "
		   "'{ type filter hook input priority 0; }'",
		   n->ns, n->veth, n->veth, n->veth, n->ns, n->host, n->veth,
		   n->veth, n->ns, n->peer, n->veth, n->ns, n->veth, n->ns,
		   n->ns, n->ns),
		0, "cannot set up network namespace %s", n->ns);
	n->up = 1;
}

void h_net_down(struct h_net *n)
{
	if (!n->up)
		return;
	sh("ip link del %s 2>/dev/null; ip netns del %s 2>/dev/null", n->veth,
	   n->ns);
	n->up = 0;
}

void h_net_drop(struct h_net *n, int sport)
{
	char port[32] = "";

	if (sport)
		snprintf(port, sizeof(port), "tcp sport %d ", sport);
	cr_assert_eq(sh("ip netns exec %s nft add rule inet dlt in "
			"ip saddr %s %sdrop",
			n->ns, n->host, port),
		     0, "nft drop rule failed");
}

void h_net_heal(struct h_net *n)
{
	cr_assert_eq(sh("ip netns exec %s nft flush chain inet dlt in", n->ns),
		     0, "nft flush failed");
}
