/* SPDX-License-Identifier: MIT */
/*
 * dlock_admin.c -- `dlock admin` (dlock_cli.h): a partitioned service's
 * map, and the administrator's changes to it (PROTOCOL.md, MAP and
 * PARTITION; libdlock's dlock_map and dlock_partition).
 *
 *   dlock admin map [--json]                     the map, as the daemon
 *                                                reached knows it
 *   dlock admin partition init                   the first map
 *   dlock admin partition move <slots> <part>    give slots away
 *   dlock admin partition addrs <part> <addrs>   a partition's addresses
 *
 * A move is the business of the partition that has the slots: dlock
 * reads the map from the daemon it reaches, and sends the move to the
 * daemons the map lists for that partition (libdlock finds their active
 * one, as for any --servers list). The others go to the daemon reached.
 * What the server says (OK PARTITION epoch=<e> [to=<p>]) is printed
 * without its OK PARTITION; a refusal is reported as every command's.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/cli/dlock_cli.h"
#include "proto/proto.h"

/* Partitions a map may list (the server's bound). */
#define ADMIN_PARTS_MAX 64

struct part_copy {
	char *id, *addrs, *slots;
	uint64_t floor;
};

struct parts {
	struct part_copy v[ADMIN_PARTS_MAX];
	int n;
	int nomem;
};

static void on_part(const struct dlock_map_part *p, void *arg)
{
	struct parts *ps = arg;
	struct part_copy *c;

	if (ps->n == ADMIN_PARTS_MAX)
		return;
	c = &ps->v[ps->n++];
	c->id = strdup(p->id);
	c->addrs = strdup(p->addrs);
	c->slots = strdup(p->slots);
	c->floor = p->floor;
	if (!c->id || !c->addrs || !c->slots)
		ps->nomem = 1;
}

static void parts_free(struct parts *ps)
{
	int i;

	for (i = 0; i < ps->n; i++) {
		free(ps->v[i].id);
		free(ps->v[i].addrs);
		free(ps->v[i].slots);
	}
	ps->n = 0;
}

/* The map of the daemon c reached, into ps (to parts_free); 0 or an exit
 * code (reported). */
static int read_map(const struct cli *cl, dlock_client *c, uint64_t *epoch,
		    struct parts *ps)
{
	struct dl_cli_retry retry;
	int rc;

	dl_cli_retry_init(&retry, cl, 0);
	for (;;) {
		parts_free(ps);
		if ((rc = dlock_map(c, epoch, on_part, ps)) == 0 ||
		    !dl_cli_retry(&retry, rc))
			break;
	}
	if (rc == 0 && ps->nomem) {
		dl_cli_msg("out of memory");
		return EXIT_SOFTWARE;
	}
	return rc ? dl_cli_fail(rc, "map") : 0;
}

/* "a,b" as a JSON list of strings. */
static void json_list(const char *s)
{
	const char *end;
	char one[DL_LINE_MAX];
	size_t n;
	int first = 1;

	fputc('[', stdout);
	for (; *s; s = *end ? end + 1 : end) {
		end = strchr(s, ',');
		if (!end)
			end = s + strlen(s);
		n = (size_t)(end - s);
		if (n == 0 || n >= sizeof(one))
			continue;
		memcpy(one, s, n);
		one[n] = '\0';
		fputs(first ? "" : ", ", stdout);
		dl_cli_json_str(stdout, one);
		first = 0;
	}
	fputc(']', stdout);
}

static int admin_map(const struct cli *cl)
{
	struct parts *ps = calloc(1, sizeof(*ps));
	dlock_client *c;
	uint64_t epoch = 0;
	int rc, i;

	if (!ps) {
		dl_cli_msg("out of memory");
		return EXIT_SOFTWARE;
	}
	if ((rc = dl_cli_simple_connect(cl, &c)) != 0) {
		free(ps);
		return rc;
	}
	if ((rc = read_map(cl, c, &epoch, ps)) == 0 && cl->json) {
		printf("{\"epoch\": %" PRIu64 ", \"partitions\": [", epoch);
		for (i = 0; i < ps->n; i++) {
			fputs(i ? ", {\"id\": " : "{\"id\": ", stdout);
			dl_cli_json_str(stdout, ps->v[i].id);
			fputs(", \"addrs\": ", stdout);
			json_list(ps->v[i].addrs);
			printf(", \"floor\": \"%" PRIu64 "\", \"slots\": ",
			       ps->v[i].floor);
			dl_cli_json_str(stdout, ps->v[i].slots);
			fputc('}', stdout);
		}
		fputs("]}\n", stdout);
	} else if (rc == 0) {
		printf("epoch=%" PRIu64 "\n", epoch);
		for (i = 0; i < ps->n; i++)
			printf("%s addrs=%s floor=%" PRIu64 " slots=%s\n",
			       ps->v[i].id,
			       ps->v[i].addrs[0] ? ps->v[i].addrs : "-",
			       ps->v[i].floor,
			       ps->v[i].slots[0] ? ps->v[i].slots : "-");
	}
	parts_free(ps);
	free(ps);
	dlock_close(c);
	return rc;
}

/* 1 if the ranges "a-b,c,..." hold slot s. */
static int has_slot(const char *ranges, unsigned long s)
{
	unsigned long a, b;
	char *end;

	while (*ranges) {
		a = strtoul(ranges, &end, 10);
		b = a;
		if (end == ranges)
			return 0;
		if (*end == '-')
			b = strtoul(end + 1, &end, 10);
		if (s >= a && s <= b)
			return 1;
		ranges = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return 0;
	}
	return 0;
}

/* PARTITION <command> on c; print the server's words. */
static int send_partition(dlock_client *c, const char *command)
{
	char reply[DL_LINE_MAX];
	int rc = dlock_partition(c, command, reply, sizeof(reply));

	if (rc != 0)
		return dl_cli_fail(rc, "partition");
	printf("%s\n", reply);
	return 0;
}

/* The addresses of the partition that has the first slot of `slots`, by
 * the map of the daemon c reached, into buf ("" when the map does not
 * say: the move then goes to that daemon, which answers for itself). 0 or
 * an exit code. */
static int owner_addrs(const struct cli *cl, dlock_client *c, const char *slots,
		       char *buf, size_t cap)
{
	struct parts *ps = calloc(1, sizeof(*ps));
	unsigned long first = strtoul(slots, NULL, 10);
	uint64_t epoch = 0;
	int rc, i;

	buf[0] = '\0';
	if (!ps) {
		dl_cli_msg("out of memory");
		return EXIT_SOFTWARE;
	}
	if ((rc = read_map(cl, c, &epoch, ps)) == 0)
		for (i = 0; i < ps->n; i++)
			if (ps->v[i].addrs[0] &&
			    has_slot(ps->v[i].slots, first)) {
				snprintf(buf, cap, "%s", ps->v[i].addrs);
				break;
			}
	parts_free(ps);
	free(ps);
	return rc;
}

static int admin_move(const struct cli *cl, const char *slots, const char *to)
{
	char command[DL_LINE_MAX], addrs[DL_LINE_MAX];
	struct dlock_options o;
	dlock_client *c, *owner;
	int rc;

	if (slots[0] < '0' || slots[0] > '9')
		return dl_cli_usage_error(cl,
					  "bad slots '%s' (0-99,200,300-310: "
					  "slots 0 to 16383)",
					  slots);
	snprintf(command, sizeof(command), "MOVE %s %s", slots, to);
	if ((rc = dl_cli_simple_connect(cl, &c)) != 0)
		return rc;
	if ((rc = owner_addrs(cl, c, slots, addrs, sizeof(addrs))) != 0 ||
	    !addrs[0]) {
		if (rc == 0)
			rc = send_partition(c, command);
		dlock_close(c);
		return rc;
	}
	dlock_close(c);
	/* to the daemons of the partition that has the slots: the active
	 * one among them (a standby's NOT_ACTIVE sends libdlock on) */
	dl_cli_conn_options(cl, &o);
	o.servers = addrs;
	o.host = NULL;
	o.unix_path = NULL;
	o.cluster = NULL; /* that partition's, whatever DLOCK_CLUSTER says */
	if ((rc = dl_cli_connect(cl, &o, &owner)) != 0)
		return rc;
	rc = send_partition(owner, command);
	dlock_close(owner);
	return rc;
}

int dl_cli_admin(struct cli *cl)
{
	const char *w0 = cl->npos > 0 ? cl->pos[0] : "";
	const char *w1 = cl->npos > 1 ? cl->pos[1] : "";
	char command[DL_LINE_MAX];
	dlock_client *c;
	int rc;

	if (strcmp(w0, "map") == 0 && cl->npos == 1)
		return admin_map(cl);
	if (strcmp(w0, "partition") != 0 ||
	    !((strcmp(w1, "init") == 0 && cl->npos == 2) ||
	      (strcmp(w1, "move") == 0 && cl->npos == 4) ||
	      (strcmp(w1, "addrs") == 0 && cl->npos == 4)))
		return dl_cli_usage_error(cl, "admin: map, partition init, "
					      "partition move <slots> "
					      "<partition> or partition addrs "
					      "<partition> <host:port,...>");
	if (cl->json)
		return dl_cli_usage_error(cl, "--json is for admin map");
	if (strcmp(w1, "move") == 0)
		return admin_move(cl, cl->pos[2], cl->pos[3]);
	if (strcmp(w1, "init") == 0)
		snprintf(command, sizeof(command), "INIT");
	else
		snprintf(command, sizeof(command), "ADDRS %s %s", cl->pos[2],
			 cl->pos[3]);
	if ((rc = dl_cli_simple_connect(cl, &c)) != 0)
		return rc;
	rc = send_partition(c, command);
	dlock_close(c);
	return rc;
}
