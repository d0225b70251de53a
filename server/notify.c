/* SPDX-License-Identifier: MIT */
/*
 * notify.c -- sd_notify datagrams (see notify.h).
 */
#include "server/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto/proto.h"

int dl_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	size_t plen;
	socklen_t salen;
	ssize_t n;
	int fd, err = 0;

	if (!path || !path[0])
		return 0;
	plen = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || plen >= sizeof(sa.sun_path))
		return -EINVAL;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, plen);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	n = sendto(fd, state, strlen(state), MSG_NOSIGNAL,
		   (struct sockaddr *)&sa, salen);
	if (n < 0)
		err = -errno;
	close(fd);
	return err;
}

uint64_t dl_notify_watchdog_usec(void)
{
	const char *us = getenv("WATCHDOG_USEC");
	const char *pid = getenv("WATCHDOG_PID");
	uint64_t v, p;

	if (!us || dl_parse_u64(us, strlen(us), &v) != 0)
		return 0;
	if (pid && pid[0]) {
		if (dl_parse_u64(pid, strlen(pid), &p) != 0 ||
		    p != (uint64_t)getpid())
			return 0;
	}
	return v;
}
