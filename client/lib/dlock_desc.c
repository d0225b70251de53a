/* SPDX-License-Identifier: MIT */
/*
 * dlock_desc.c -- who the client says it is, and who a holder said it is
 * (dlock_private.h).
 *
 * Saying: at dlock_connect the options become the texts HELLO sends
 * (host=, pid=, cmd=), encoded once by proto/desc.c's rule -- bytes a
 * person cannot read become '?', a space %20 -- and cut to the
 * protocol's limits, so that the server never refuses what this client
 * says about itself. They are sent in a HELLO of their own after the
 * HELLO of the owner (dlock_io.c, dlock.c): a server that does not know
 * descriptions refuses that one alone, and nothing that depends on the
 * owner is in the way.
 *
 * Reading: HOLDERS lines and a NO BUSY carry the holder's words, decoded
 * here in place for the application. dlock_busy_holder() reads the
 * thread's last NO BUSY, kept as its dlock_last_error().
 */
#include "client/lib/dlock_private.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/desc.h"

/* Bytes of /proc/self/cmdline read: far more than the description keeps
 * (DL_DESC_CMD_MAX), so that a cut is a cut of the words. */
#define CMDLINE_READ 4096

/* The command line, its arguments joined by spaces, into buf (NUL
 * terminated); the program's name if it cannot be read. */
static void command_line(char *buf, size_t cap)
{
	ssize_t n = 0, r;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t i;

	if (fd >= 0) {
		while ((size_t)n < cap - 1 &&
		       ((r = read(fd, buf + n, cap - 1 - (size_t)n)) > 0 ||
			(r < 0 && errno == EINTR)))
			n += r > 0 ? r : 0;
		close(fd);
	}
	while (n > 0 && buf[n - 1] == '\0')
		n--;
	for (i = 0; i < n; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[n] = '\0';
	if (n == 0 && program_invocation_short_name)
		snprintf(buf, cap, "%s", program_invocation_short_name);
}

void dlock__describe(struct dlock_client *c, const struct dlock_options *o)
{
	char buf[CMDLINE_READ];
	const char *s;
	size_t n;

	c->desc.host[0] = c->desc.cmd[0] = '\0';
	c->desc.pid = 0;
	if (!o->describe)
		return;
	s = o->desc_host;
	if (!s) {
		if (gethostname(buf, sizeof(buf)) != 0)
			buf[0] = '\0';
		buf[sizeof(buf) - 1] = '\0';
		s = buf;
	}
	n = dl_desc_encode(s, strlen(s), c->desc.host, DL_DESC_HOST_MAX);
	c->desc.host[n] = '\0';
	c->desc.pid =
		o->desc_pid > 0 ? (uint32_t)o->desc_pid : (uint32_t)getpid();
	/* the program's name by default: its arguments may hold a secret,
	 * and every user who may read the lock would read it */
	s = o->desc_cmd;
	if (!s && o->describe == DLOCK_DESCRIBE_FULL) {
		command_line(buf, sizeof(buf));
		s = buf;
	} else if (!s) {
		s = program_invocation_short_name
			    ? program_invocation_short_name
			    : "";
	}
	n = dl_desc_encode(s, strlen(s), c->desc.cmd, DL_DESC_CMD_MAX);
	c->desc.cmd[n] = '\0';
}

int dlock__describing(const struct dlock_client *c)
{
	return !c->desc.refused &&
	       (c->desc.host[0] || c->desc.pid || c->desc.cmd[0]);
}

int dlock__holder_word(struct dlock_holder *h, const char *key, char *value)
{
	uint64_t v;

	if (strcmp(key, "host") == 0) {
		dl_desc_decode(value, strlen(value), value, strlen(value) + 1);
		h->host = value;
	} else if (strcmp(key, "cmd") == 0) {
		dl_desc_decode(value, strlen(value), value, strlen(value) + 1);
		h->cmd = value;
	} else if (strcmp(key, "pid") == 0) {
		if (dl_parse_u64(value, strlen(value), &v) == 0 &&
		    v <= DL_DESC_PID_MAX)
			h->pid = (uint32_t)v;
	} else if (strcmp(key, "held_ms") == 0) {
		if (dl_parse_u64(value, strlen(value), &v) == 0 &&
		    v <= INT64_MAX)
			h->held_ms = (int64_t)v;
	} else if (strcmp(key, "user") == 0) {
		h->user = value;
	} else if (strcmp(key, "value") == 0) {
		dl_desc_decode(value, strlen(value), value, strlen(value) + 1);
		h->value = value;
	} else {
		return 0;
	}
	return 1;
}

int dlock_busy_holder(struct dlock_holder *h)
{
	/* the thread's last NO BUSY, taken apart here */
	static _Thread_local char line[DLOCK__ERR_MAX];
	char *w, *save = NULL, *eq;
	int i;

	if (!h)
		return DLOCK_EINVAL;
	memset(h, 0, sizeof(*h));
	h->host = h->cmd = h->user = "";
	h->held_ms = -1;
	snprintf(line, sizeof(line), "%s", dlock_last_error());
	/* NO BUSY <name> <ms> owner=<id> ... */
	for (i = 0, w = strtok_r(line, " ", &save); w;
	     i++, w = strtok_r(NULL, " ", &save)) {
		if ((i == 0 && strcmp(w, "NO") != 0) ||
		    (i == 1 && strcmp(w, "BUSY") != 0))
			return DLOCK_EINVAL;
		if (i == 3) {
			uint64_t ms;

			if (dl_parse_u64(w, strlen(w), &ms) == 0 &&
			    ms <= INT64_MAX)
				h->ttl_ms = (int64_t)ms;
		}
		if (i < 4 || !(eq = strchr(w, '=')))
			continue;
		*eq++ = '\0';
		if (strcmp(w, "owner") == 0)
			h->owner = eq;
		else
			dlock__holder_word(h, w, eq);
	}
	return h->owner ? 0 : DLOCK_EINVAL;
}
