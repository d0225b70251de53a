/* SPDX-License-Identifier: MIT */
/*
 * outflood.c -- what do clients that pipeline and never read cost dlockd?
 *
 *   outflood <port> <dlockd pid> [connections=200] [seconds=5]
 *
 * Opens `connections` TCP connections to 127.0.0.1:<port>, and on each
 * sends "HELP\r\n" as fast as the kernel takes it, reading nothing, for
 * `seconds`. Prints the daemon's resident memory (VmRSS of
 * /proc/<pid>/status) before and at the end. A measuring tool for
 * docs/operations.md (Limits), not a test: it asserts nothing.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONNS_MAX 10000

static long rss_kb(int pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	static int fd[CONNS_MAX];
	static char buf[65536];
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int port, pid, n, secs, i;
	long before, after;
	uint64_t end, sent = 0;
	size_t k;
	ssize_t w;

	if (argc < 3) {
		fprintf(stderr, "usage: outflood <port> <dlockd pid> "
				"[connections] [seconds]\n");
		return 2;
	}
	port = atoi(argv[1]);
	pid = atoi(argv[2]);
	n = argc > 3 ? atoi(argv[3]) : 200;
	secs = argc > 4 ? atoi(argv[4]) : 5;
	if (n <= 0 || n > CONNS_MAX || secs <= 0)
		return 2;
	for (k = 0; k + 6 <= sizeof(buf); k += 6)
		memcpy(buf + k, "HELP\r\n", 6);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(0x7f000001);
	before = rss_kb(pid);
	for (i = 0; i < n; i++) {
		fd[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (fd[i] < 0 ||
		    connect(fd[i], (struct sockaddr *)&sa, sizeof(sa)) != 0) {
			perror("connect");
			return 1;
		}
		fcntl(fd[i], F_SETFL, O_NONBLOCK);
	}
	end = now_ms() + (uint64_t)secs * 1000;
	while (now_ms() < end) {
		for (i = 0; i < n; i++) {
			w = send(fd[i], buf, k, MSG_NOSIGNAL);
			if (w > 0)
				sent += (uint64_t)w;
		}
		usleep(1000);
	}
	after = rss_kb(pid);
	printf("%d connections, %d s, %.1f MB of HELP sent: dlockd VmRSS "
	       "%.1f MB -> %.1f MB (+%.1f MB)\n",
	       n, secs, (double)sent / 1e6, before / 1024.0, after / 1024.0,
	       (after - before) / 1024.0);
	return 0;
}
