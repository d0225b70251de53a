/* SPDX-License-Identifier: MIT */
/*
 * authflood.c -- how fast can one host guess dlockd's password?
 *
 *   authflood <port> [connections=2000] [seconds=5] [source addresses=1]
 *
 * Opens `connections` TCP connections to 127.0.0.1:<port> (from
 * 127.0.0.1, or spread over 127.0.0.1..127.0.0.<n>), and on each sends one
 * wrong `AUTH` at a time, the next as soon as the answer comes; a
 * connection the daemon closes (or refuses) is opened again at once. At
 * the end it prints the answered guesses per second, the connections
 * opened and how many were refused at connect. A measuring tool for
 * docs/security.md, not a test: it asserts nothing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONNS_MAX 20000

struct guesser {
	int fd;
	int src;
	size_t got; /* bytes of the current reply line */
	char buf[512];
};

static struct guesser g[CONNS_MAX];
static int ep, port;
static uint64_t guesses, opened, refused;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void send_guess(struct guesser *x)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "AUTH guess-%llu\r\n",
			 (unsigned long long)(guesses + opened));

	if (send(x->fd, line, (size_t)n, MSG_NOSIGNAL) != n) {
		close(x->fd);
		x->fd = -1;
	}
}

static void open_one(struct guesser *x)
{
	struct sockaddr_in sa = {.sin_family = AF_INET}, me = sa;
	struct epoll_event ev = {.events = EPOLLIN};
	int one = 1;

	x->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	x->got = 0;
	if (x->fd < 0)
		return;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(0x7f000001);
	me.sin_addr.s_addr = htonl(0x7f000001 + (uint32_t)x->src);
	if (bind(x->fd, (struct sockaddr *)&me, sizeof(me)) != 0 ||
	    connect(x->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(x->fd);
		x->fd = -1;
		return;
	}
	setsockopt(x->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	opened++;
	ev.data.ptr = x;
	epoll_ctl(ep, EPOLL_CTL_ADD, x->fd, &ev);
	send_guess(x);
}

/* The bytes that came: each NO AUTH_FAILED is a guess answered. */
static void on_input(struct guesser *x)
{
	ssize_t n = read(x->fd, x->buf + x->got, sizeof(x->buf) - x->got - 1);
	char *eol;

	if (n <= 0) {
		close(x->fd);
		x->fd = -1;
		return;
	}
	x->got += (size_t)n;
	x->buf[x->got] = '\0';
	while ((eol = strchr(x->buf, '\n')) != NULL) {
		*eol = '\0';
		if (strncmp(x->buf, "NO AUTH_FAILED", 14) == 0) {
			guesses++;
			send_guess(x);
		} else if (strncmp(x->buf, "ERR LIMIT", 9) == 0) {
			refused++;
		}
		x->got -= (size_t)(eol + 1 - x->buf);
		memmove(x->buf, eol + 1, x->got + 1);
		if (x->fd < 0)
			return;
	}
}

int main(int argc, char **argv)
{
	struct epoll_event evs[256];
	struct rlimit rl = {65536, 65536};
	int n = argc > 2 ? atoi(argv[2]) : 2000;
	int secs = argc > 3 ? atoi(argv[3]) : 5;
	int srcs = argc > 4 ? atoi(argv[4]) : 1;
	uint64_t end, t0;
	int i, k;

	if (argc < 2 || n <= 0 || n > CONNS_MAX || secs <= 0 || srcs <= 0 ||
	    srcs > 250) {
		fprintf(stderr, "usage: authflood <port> [connections] "
				"[seconds] [source addresses]\n");
		return 2;
	}
	port = atoi(argv[1]);
	setrlimit(RLIMIT_NOFILE, &rl);
	ep = epoll_create1(EPOLL_CLOEXEC);
	for (i = 0; i < n; i++) {
		g[i].src = i % srcs;
		open_one(&g[i]);
	}
	t0 = now_ms();
	end = t0 + (uint64_t)secs * 1000;
	while (now_ms() < end) {
		k = epoll_wait(ep, evs, 256, 10);
		for (i = 0; i < k; i++)
			on_input(evs[i].data.ptr);
		for (i = 0; i < n; i++)
			if (g[i].fd < 0)
				open_one(&g[i]);
	}
	printf("%.0f guesses/s over %d s; %llu connections opened, %llu "
	       "refused at connect\n",
	       (double)guesses * 1000.0 / (double)(now_ms() - t0), secs,
	       (unsigned long long)opened, (unsigned long long)refused);
	return 0;
}
