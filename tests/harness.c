/* SPDX-License-Identifier: MIT */
/*
 * harness.c -- processes and clients for integration tests (harness.h).
 */
#include "tests/harness.h"

#include "server/store/bucket.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- time ---------------------------------------------------------------- */

uint64_t h_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void h_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- processes ---------------------------------------------------------- */

/* A port from [H_PORT_LO, H_PORT_LO + H_PORT_SPAN), below the kernel's
 * ephemeral range (32768 and up): a port from that range, handed out by
 * bind(0), may become the local port of some process's outgoing
 * connection while its server is down for a restart, and the server then
 * cannot bind it again (CI: a Redis restarted from an older AOF "did not
 * start"). Random per process, since criterion forks each test from one
 * parent; a port something holds now is skipped. */
#define H_PORT_LO   20000
#define H_PORT_SPAN 12000

int h_free_port(void)
{
	static pid_t seeded;
	static uint64_t x;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct timespec ts;
	int fd, i, port;

	if (seeded != getpid()) {
		seeded = getpid();
		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)seeded * 0x9e3779b97f4a7c15ULL ^
		    (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32);
		x |= 1;
	}
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (i = 0; i < 1000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		port = H_PORT_LO + (int)(x % H_PORT_SPAN);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert(fd >= 0, "socket: %s", strerror(errno));
		sa.sin_port = htons((uint16_t)port);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(fd);
			return port;
		}
		close(fd);
	}
	cr_assert_fail("no free port in [%d, %d)", H_PORT_LO,
		       H_PORT_LO + H_PORT_SPAN);
	return -1;
}

static void make_dir(char *dir, const char *what)
{
	snprintf(dir, H_DIR_MAX, "/tmp/dlockd-test-%s-XXXXXX", what);
	cr_assert(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void rm_dir(const char *dir)
{
	if (dir[0])
		nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* fork + exec with stdout/stderr appended to `log` and `env` (NAME=value,
 * n of them) added to the environment; the child dies with the test
 * process. */
static pid_t spawn_env(const char *const argv[], const char *log,
		       const char *const *env, int n)
{
	pid_t parent = getpid();
	pid_t pid;
	int fd, i;

	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid > 0)
		return pid;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	for (i = 0; i < n; i++)
		putenv((char *)env[i]);
	fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
	execvp(argv[0], (char *const *)argv);
	fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

static pid_t spawn(const char *const argv[], const char *log)
{
	return spawn_env(argv, log, NULL, 0);
}

/* Wait up to ms for pid; returns its exit status (128+sig if killed), or
 * -1 on timeout. */
static int wait_exit(pid_t pid, int ms)
{
	uint64_t end = h_now_ms() + (uint64_t)ms;
	int st;
	pid_t r;

	for (;;) {
		r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st)
					     : 128 + WTERMSIG(st);
		if (r < 0 || h_now_ms() > end)
			return -1;
		h_sleep_ms(5);
	}
}

static int tcp_connect_to(const char *host, int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd < 0)
		return -1;
	sa.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		close(fd);
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int tcp_connect(int port)
{
	return tcp_connect_to("127.0.0.1", port);
}

/* To 127.0.0.1:port from address src, port 0. */
static int tcp_connect_from(const char *src, int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET}, me = sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd < 0)
		return -1;
	sa.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr) != 1 ||
	    inet_pton(AF_INET, src, &me.sin_addr) != 1 ||
	    bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void print_file(const char *path)
{
	char buf[4096];
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	fprintf(stderr, "---- %s ----\n", path);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fprintf(stderr, "---- end of %s ----\n", path);
	fclose(f);
}

/* ---- redis -------------------------------------------------------------- */

/* 1 when redis answers PING with +PONG, or (loading_ok) with anything,
 * -LOADING included. */
/* 1 if process `pid` holds a socket listening on TCP `port` (in its own
 * network namespace: /proc/<pid>/net/tcp). With suites run several tests
 * at a time, a port h_free_port handed out may be taken by another test
 * before this one's server binds it (or while it restarts): a connection
 * that answers is then another test's server, and the test goes on
 * against it (found under make check: --check-config reported another
 * test's Redis). */
static int pid_listens(pid_t pid, int port)
{
	static const char *const tables[] = {"tcp", "tcp6"};
	char path[64], line[512], link[64], want[64];
	unsigned long inodes[16], ino;
	unsigned lport, st;
	size_t n = 0, i, t;
	struct dirent *e;
	DIR *dir;
	FILE *f;

	for (t = 0; t < 2; t++) {
		snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid,
			 tables[t]);
		if (!(f = fopen(path, "r")))
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line,
				   " %*d: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x "
				   "%x %*s %*s %*s %*s %*s %lu",
				   &lport, &st, &ino) == 3 &&
			    (int)lport == port && st == 0x0A &&
			    n < sizeof(inodes) / sizeof(inodes[0]))
				inodes[n++] = ino;
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	if (!n || !(dir = opendir(path)))
		return 0;
	while ((e = readdir(dir)) != NULL) {
		char fdpath[sizeof(path) + sizeof(e->d_name) + 2];
		ssize_t l;

		snprintf(fdpath, sizeof(fdpath), "%s/%s", path, e->d_name);
		if ((l = readlink(fdpath, link, sizeof(link) - 1)) <= 0)
			continue;
		link[l] = '\0';
		for (i = 0; i < n; i++) {
			snprintf(want, sizeof(want), "socket:[%lu]", inodes[i]);
			if (strcmp(link, want) == 0) {
				closedir(dir);
				return 1;
			}
		}
	}
	closedir(dir);
	return 0;
}

static int redis_answers(const struct h_redis *r, int loading_ok)
{
	char buf[16];
	int fd = tcp_connect_to(r->host, r->port);
	ssize_t n;
	struct pollfd p;

	if (fd < 0)
		return 0;
	n = send(fd, "PING\r\n", 6, MSG_NOSIGNAL);
	p = (struct pollfd){.fd = fd, .events = POLLIN};
	if (n == 6 && poll(&p, 1, 1000) == 1) {
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		return n >= 5 && (memcmp(buf, "+PONG", 5) == 0 ||
				  (loading_ok && buf[0] == '-'));
	}
	close(fd);
	return 0;
}

static void redis_spawn(struct h_redis *r, const char *fsync)
{
	char port[16], log[H_PATH_MAX + 16];
	const char *argv[64] = {0};
	const char *base[] = {"redis-server",
			      "--port",
			      port,
			      "--bind",
			      r->host,
			      "--unixsocket",
			      r->sock,
			      "--unixsocketperm",
			      "700",
			      "--dir",
			      r->dir,
			      "--appendonly",
			      "yes",
			      "--appendfsync",
			      fsync,
			      "--save",
			      "",
			      "--daemonize",
			      "no",
			      "--protected-mode",
			      "no"};
	uint64_t end = h_now_ms() + 10000;
	size_t i, n = 0;

	if (r->netns) {
		argv[n++] = "ip";
		argv[n++] = "netns";
		argv[n++] = "exec";
		argv[n++] = r->netns;
	}
	for (i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		argv[n++] = base[i];
	for (i = 0; i < (size_t)r->nextra; i++)
		argv[n++] = r->extra[i];
	snprintf(port, sizeof(port), "%d", r->port);
	snprintf(log, sizeof(log), "%s/redis.log", r->dir);
	r->pid = spawn(argv, log);
	while (!redis_answers(r, r->loading_ok) ||
	       (!r->netns && !pid_listens(r->pid, r->port))) {
		if (h_now_ms() > end || wait_exit(r->pid, 0) >= 0) {
			print_file(log);
			cr_assert_fail("redis-server did not start");
		}
		h_sleep_ms(10);
	}
}

static char redis_fsync[16];

/* 1 if one of r's extra arguments is `port`. */
static int redis_port_in_extra(const struct h_redis *r, int port)
{
	char s[16];
	int i;

	snprintf(s, sizeof(s), "%d", port);
	for (i = 0; i < r->nextra; i++)
		if (strcmp(r->extra[i], s) == 0)
			return 1;
	return 0;
}

static void redis_start(struct h_redis *r, const char *appendfsync,
			const char *ns, const char *host,
			const char *const *extra, int nextra)
{
	int i;

	memset(r, 0, sizeof(*r));
	cr_assert(nextra >= 0 &&
		  (size_t)nextra <= sizeof(r->extra) / sizeof(r->extra[0]));
	for (i = 0; i < nextra; i++)
		r->extra[r->nextra++] = extra[i];
	make_dir(r->dir, "redis");
	r->netns = ns;
	snprintf(r->host, sizeof(r->host), "%s", host ? host : "127.0.0.1");
	if (ns)
		r->port = 6379;
	else
		do
			r->port = h_free_port();
		while (redis_port_in_extra(r, r->port));
	snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
	snprintf(r->url, sizeof(r->url), "redis://%s:%d/0", r->host, r->port);
	snprintf(redis_fsync, sizeof(redis_fsync), "%s",
		 appendfsync ? appendfsync : "always");
	redis_spawn(r, redis_fsync);
}

void h_redis_start_in(struct h_redis *r, const char *appendfsync,
		      const char *ns, const char *host)
{
	redis_start(r, appendfsync, ns, host, NULL, 0);
}

void h_redis_start(struct h_redis *r, const char *appendfsync)
{
	redis_start(r, appendfsync, NULL, NULL, NULL, 0);
}

void h_redis_start_with(struct h_redis *r, const char *appendfsync,
			const char *const *extra, int nextra)
{
	redis_start(r, appendfsync, NULL, NULL, extra, nextra);
}

void h_redis_restart(struct h_redis *r)
{
	redis_spawn(r, redis_fsync);
}

void h_redis_stop(struct h_redis *r)
{
	if (r->pid <= 0)
		return;
	kill(r->pid, SIGTERM);
	if (wait_exit(r->pid, 10000) < 0) {
		kill(r->pid, SIGKILL);
		wait_exit(r->pid, 10000);
	}
	r->pid = 0;
}

void h_redis_kill9(struct h_redis *r)
{
	if (r->pid <= 0)
		return;
	kill(r->pid, SIGKILL);
	wait_exit(r->pid, 10000);
	r->pid = 0;
}

const char *h_redis_cli(const struct h_redis *r, const char *cmd)
{
	static char out[65536];
	char line[1024];
	size_t n = 0, k;
	FILE *p;

	snprintf(line, sizeof(line), "redis-cli -h %s -p %d %s 2>&1", r->host,
		 r->port, cmd);
	p = popen(line, "r");
	cr_assert(p != NULL);
	while (n < sizeof(out) - 1 &&
	       (k = fread(out + n, 1, sizeof(out) - 1 - n, p)) > 0)
		n += k;
	out[n] = '\0';
	pclose(p);
	return out;
}

void h_redis_cleanup(struct h_redis *r)
{
	h_redis_stop(r);
	rm_dir(r->dir);
}

void h_redis_start_replica(struct h_redis *r, const struct h_redis *primary)
{
	memset(r, 0, sizeof(*r));
	make_dir(r->dir, "replica");
	snprintf(r->host, sizeof(r->host), "127.0.0.1");
	r->port = h_free_port();
	snprintf(r->sock, sizeof(r->sock), "%s/redis.sock", r->dir);
	snprintf(r->url, sizeof(r->url), "redis://%s:%d/0", r->host, r->port);
	snprintf(r->replicaof, sizeof(r->replicaof), "%d", primary->port);
	r->extra[r->nextra++] = "--replicaof";
	r->extra[r->nextra++] = "127.0.0.1";
	r->extra[r->nextra++] = r->replicaof;
	redis_spawn(r, "always");
}

void h_sentinel_start(struct h_sentinel *s, const char *master,
		      const struct h_redis *primary)
{
	char conf[H_PATH_MAX], log[H_PATH_MAX];
	const char *argv[3] = {"redis-sentinel", conf, NULL};
	uint64_t end = h_now_ms() + 10000;
	struct h_redis probe;
	FILE *f;

	memset(s, 0, sizeof(*s));
	make_dir(s->dir, "sentinel");
	s->port = h_free_port();
	snprintf(conf, sizeof(conf), "%s/sentinel.conf", s->dir);
	snprintf(log, sizeof(log), "%s/sentinel.log", s->dir);
	f = fopen(conf, "w");
	cr_assert(f != NULL);
	fprintf(f,
		"port %d\nbind 127.0.0.1\ndir %s\nprotected-mode no\n"
		"sentinel monitor %s 127.0.0.1 %d 2\n"
		"sentinel down-after-milliseconds %s 1000\n"
		"sentinel failover-timeout %s 3000\n"
		"sentinel parallel-syncs %s 1\n",
		s->port, s->dir, master, primary->port, master, master, master);
	fclose(f);
	s->pid = spawn(argv, log);
	memset(&probe, 0, sizeof(probe));
	snprintf(probe.host, sizeof(probe.host), "127.0.0.1");
	probe.port = s->port;
	while (!redis_answers(&probe, 0)) {
		if (h_now_ms() > end || wait_exit(s->pid, 0) >= 0) {
			print_file(log);
			cr_assert_fail("redis-sentinel did not start");
		}
		h_sleep_ms(10);
	}
}

void h_sentinel_stop(struct h_sentinel *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		if (wait_exit(s->pid, 10000) < 0) {
			kill(s->pid, SIGKILL);
			wait_exit(s->pid, 10000);
		}
		s->pid = 0;
	}
	if (s->dir[0])
		rm_dir(s->dir);
	s->dir[0] = '\0';
}

/* ---- dlockd ------------------------------------------------------------- */

static const char *daemon_path(void)
{
	const char *p = getenv("DLOCKD");

	return p && p[0] ? p : "build/dlockd";
}

/* A copy of the daemon binary in d->dir, for another user to run (the
 * build tree may sit under a directory only root can enter). */
static const char *daemon_copy(struct h_daemon *d)
{
	static char path[H_PATH_MAX];
	char buf[65536];
	ssize_t n;
	int in, out;

	snprintf(path, sizeof(path), "%s/dlockd.bin", d->dir);
	in = open(daemon_path(), O_RDONLY | O_CLOEXEC);
	out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	cr_assert(in >= 0 && out >= 0, "copy %s to %s", daemon_path(), path);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		cr_assert_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
	return path;
}

static void daemon_exec(struct h_daemon *d)
{
	const char *argv[H_ARGS_MAX + 12];
	char port[16], reuid[64], regid[64];
	int i, n = 0;

	snprintf(port, sizeof(port), "%d", d->port);
	if (d->user) {
		/* its files are the harness's: let it read them */
		chmod(d->dir, 0755);
		chmod(d->conf, 0644);
		snprintf(reuid, sizeof(reuid), "--reuid=%s", d->user);
		snprintf(regid, sizeof(regid), "--regid=%s", d->user);
		argv[n++] = "setpriv";
		argv[n++] = reuid;
		argv[n++] = regid;
		argv[n++] = "--clear-groups";
		argv[n++] = daemon_copy(d);
	} else {
		argv[n++] = daemon_path();
	}
	argv[n++] = "--port";
	argv[n++] = port;
	for (i = 0; i < d->nargs; i++)
		argv[n++] = d->args[i];
	argv[n] = NULL;
	d->pid = spawn_env(argv, d->log, d->env, d->nenv);
}

int h_daemon_listening(struct h_daemon *d, int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;
	int fd, st;

	for (;;) {
		fd = tcp_connect(d->port);
		if (fd >= 0) {
			close(fd);
			if (pid_listens(d->pid, d->port))
				return 1;
		}
		st = wait_exit(d->pid, 0);
		if (st >= 0) {
			fprintf(stderr, "dlockd exited with status %d\n", st);
			print_file(d->log);
			d->pid = 0;
			return 0;
		}
		if (h_now_ms() > end)
			return 0;
		h_sleep_ms(5);
	}
}

static void daemon_spawn(struct h_daemon *d)
{
	daemon_exec(d);
	if (!h_daemon_listening(d, 15000)) {
		print_file(d->log);
		cr_assert_fail("dlockd did not start");
	}
}

/* The daemon's directory, log, config path and port, on first use. */
static void daemon_dirs(struct h_daemon *d)
{
	if (d->dir[0])
		return;
	make_dir(d->dir, "dlockd");
	snprintf(d->log, sizeof(d->log), "%s/dlockd.log", d->dir);
	snprintf(d->conf, sizeof(d->conf), "%s/dlockd.conf", d->dir);
	d->port = h_free_port();
}

void h_daemon_start(struct h_daemon *d, ...)
{
	const char *a;
	va_list ap;

	daemon_dirs(d);
	d->nargs = 0;
	va_start(ap, d);
	while ((a = va_arg(ap, const char *)) != NULL) {
		cr_assert(d->nargs < H_ARGS_MAX);
		d->args[d->nargs++] = a;
	}
	va_end(ap);
	daemon_spawn(d);
}

void h_daemon_start_nowait(struct h_daemon *d, ...)
{
	const char *a;
	va_list ap;

	daemon_dirs(d);
	d->nargs = 0;
	va_start(ap, d);
	while ((a = va_arg(ap, const char *)) != NULL) {
		cr_assert(d->nargs < H_ARGS_MAX);
		d->args[d->nargs++] = a;
	}
	va_end(ap);
	daemon_exec(d);
}

void h_daemon_restart(struct h_daemon *d)
{
	daemon_spawn(d);
}

void h_daemon_restart_nowait(struct h_daemon *d)
{
	daemon_exec(d);
}

int h_daemon_stop(struct h_daemon *d)
{
	if (d->pid <= 0)
		return 0;
	kill(d->pid, SIGTERM);
	return h_daemon_wait(d, 0, 20000);
}

void h_daemon_kill9(struct h_daemon *d)
{
	if (d->pid <= 0)
		return;
	kill(d->pid, SIGKILL);
	wait_exit(d->pid, 10000);
	d->pid = 0;
}

int h_daemon_alive(struct h_daemon *d)
{
	int st;

	if (d->pid <= 0)
		return 0;
	st = wait_exit(d->pid, 0);
	if (st < 0)
		return 1;
	fprintf(stderr, "dlockd exited with status %d\n", st);
	print_file(d->log);
	d->pid = 0;
	return 0;
}

void h_daemon_signal(struct h_daemon *d, int sig)
{
	cr_assert(d->pid > 0);
	kill(d->pid, sig);
}

int h_daemon_wait(struct h_daemon *d, int expect, int timeout_ms)
{
	int st;

	if (d->pid <= 0)
		return 0;
	st = wait_exit(d->pid, timeout_ms);
	if (st < 0) {
		kill(d->pid, SIGKILL);
		wait_exit(d->pid, 10000);
	}
	d->pid = 0;
	if (st != expect)
		print_file(d->log);
	return st;
}

void h_daemon_cleanup(struct h_daemon *d)
{
	h_daemon_kill9(d);
	rm_dir(d->dir);
}

void h_daemon_write_conf(struct h_daemon *d, const char *text)
{
	FILE *f;

	daemon_dirs(d);
	f = fopen(d->conf, "w");
	cr_assert(f != NULL);
	fputs(text, f);
	fclose(f);
}

const char *h_daemon_write_file(struct h_daemon *d, const char *name,
				const char *text)
{
	static char path[H_PATH_MAX];
	int fd;

	daemon_dirs(d);
	snprintf(path, sizeof(path), "%s/%s", d->dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

void h_daemon_start_redis(struct h_daemon *d, const struct h_redis *r,
			  const char *conf)
{
	h_daemon_write_conf(d, conf ? conf : "");
	h_daemon_start(d, "-c", d->conf, "--persist", "redis", "--redis",
		       r->url, NULL);
}

void h_part_start(struct h_daemon *d, const struct h_redis *r,
		  const char *prefix, const char *id, const char *more)
{
	char conf[1024];

	snprintf(conf, sizeof(conf),
		 "[persistence]\nredis_prefix = %s\n%s\n[partition]\nid = %s\n",
		 prefix, more ? more : "", id);
	h_daemon_start_redis(d, r, conf);
}

void h_parts_start(struct h_daemon *d, int n, struct h_redis *r)
{
	char id[16];
	int i;

	h_redis_start(r, "always");
	for (i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "p%d", i);
		h_part_start(&d[i], r, "t:", id, NULL);
	}
}

void h_parts_stop(struct h_daemon *d, int n, struct h_redis *r)
{
	int i;

	for (i = 0; i < n; i++)
		h_daemon_cleanup(&d[i]);
	h_redis_cleanup(r);
}

const char *h_map_wait(int port, uint64_t epoch, const char *needle)
{
	static char text[8192];
	struct h_client *c = h_connect(port);
	uint64_t end = h_now_ms() + 15000, e, n, k;
	size_t len;
	char *l;

	for (;;) {
		l = h_call(c, "MAP");
		cr_assert(h_starts(l, "OK MAP "), "%s", l);
		e = h_arg_u64(l, 0);
		n = h_arg_u64(l, 1);
		len = (size_t)snprintf(text, sizeof(text), "%s", l);
		for (k = 0; k < n && len < sizeof(text); k++)
			len += (size_t)snprintf(text + len, sizeof(text) - len,
						"\n%s", h_line(c));
		if (e >= epoch && (!needle || strstr(text, needle)))
			break;
		cr_assert(h_now_ms() < end,
			  "port %d: no map of epoch %llu with \"%s\"; the "
			  "last:\n%s",
			  port, (unsigned long long)epoch, needle ? needle : "",
			  text);
		h_sleep_ms(50);
	}
	h_close(c);
	return text;
}

int h_starts(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

void h_daemon_print_log(const struct h_daemon *d)
{
	print_file(d->log);
}

int h_daemon_log_has(const struct h_daemon *d, const char *needle)
{
	char buf[1 << 16];
	size_t n;
	FILE *f = fopen(d->log, "r");
	int found = 0;

	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	found = strstr(buf, needle) != NULL;
	fclose(f);
	return found;
}

int h_daemon_log_wait(const struct h_daemon *d, const char *needle,
		      int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;

	while (!h_daemon_log_has(d, needle)) {
		if (h_now_ms() > end)
			return 0;
		h_sleep_ms(10);
	}
	return 1;
}

int h_suite_redis(void)
{
	const char *m = getenv("DL_TEST_PERSIST");

	return m && strcmp(m, "redis") == 0;
}

void h_suite_start(struct h_daemon *d, struct h_redis *r, ...)
{
	const char *a;
	va_list ap;

	daemon_dirs(d);
	d->nargs = 0;
	if (h_suite_redis()) {
		h_redis_start(r, "always");
		d->args[d->nargs++] = "--persist";
		d->args[d->nargs++] = "redis";
		d->args[d->nargs++] = "--redis";
		d->args[d->nargs++] = r->url;
	} else {
		d->args[d->nargs++] = "--persist";
		d->args[d->nargs++] = "none";
	}
	va_start(ap, r);
	while ((a = va_arg(ap, const char *)) != NULL) {
		cr_assert(d->nargs < H_ARGS_MAX);
		d->args[d->nargs++] = a;
	}
	va_end(ap);
	daemon_spawn(d);
}

void h_suite_stop(struct h_daemon *d, struct h_redis *r)
{
	int st = h_daemon_stop(d);

	h_daemon_cleanup(d);
	if (r->pid)
		h_redis_cleanup(r);
	cr_assert_eq(st, 0, "dlockd exited with status %d", st);
}

/* ---- clients ------------------------------------------------------------ */

struct h_client *h_try_connect(int port)
{
	struct h_client *c;
	int fd = tcp_connect(port);

	if (fd < 0)
		return NULL;
	c = calloc(1, sizeof(*c));
	cr_assert(c != NULL);
	c->fd = fd;
	dl_linebuf_init(&c->lb);
	return c;
}

struct h_client *h_try_connect_from(const char *src, int port)
{
	struct h_client *c;
	int fd = tcp_connect_from(src, port);

	if (fd < 0)
		return NULL;
	c = calloc(1, sizeof(*c));
	cr_assert(c != NULL);
	c->fd = fd;
	dl_linebuf_init(&c->lb);
	return c;
}

struct h_client *h_connect_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct h_client *c;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	uint64_t t0 = h_now_ms();
	int rc;

	cr_assert(fd >= 0 && strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	/* A daemon is started once its TCP port answers; its unix socket
	 * may be bound a moment later (seen on a loaded machine: ENOENT). */
	while ((rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa))) != 0 &&
	       (errno == ENOENT || errno == ECONNREFUSED) &&
	       h_now_ms() - t0 < 5000)
		h_sleep_ms(10);
	cr_assert(rc == 0, "connect %s: %s", path, strerror(errno));
	c = calloc(1, sizeof(*c));
	cr_assert(c != NULL);
	c->fd = fd;
	dl_linebuf_init(&c->lb);
	return c;
}

struct h_client *h_connect(int port)
{
	struct h_client *c = h_try_connect(port);

	cr_assert(c != NULL, "connect to port %d: %s", port, strerror(errno));
	return c;
}

void h_close(struct h_client *c)
{
	if (!c)
		return;
	close(c->fd);
	free(c);
}

int h_send_raw(struct h_client *c, const void *p, size_t n)
{
	const char *b = p;
	ssize_t k;

	while (n) {
		k = send(c->fd, b, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

ssize_t h_send_within(struct h_client *c, const void *p, size_t n,
		      int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;
	struct pollfd pf = {.fd = c->fd, .events = POLLOUT};
	const char *b = p;
	size_t sent = 0;
	ssize_t k;
	int64_t left;

	while (sent < n) {
		k = send(c->fd, b + sent, n - sent,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			sent += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			return -1;
		left = (int64_t)(end - h_now_ms());
		if (left <= 0)
			break;
		if (poll(&pf, 1, (int)left) < 0 && errno != EINTR)
			return -1;
		if (pf.revents & (POLLERR | POLLHUP))
			return -1;
	}
	return (ssize_t)sent;
}

void h_send(struct h_client *c, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 2, fmt, ap);
	va_end(ap);
	cr_assert(n >= 0 && (size_t)n < sizeof(buf) - 2);
	buf[n++] = '\r';
	buf[n++] = '\n';
	cr_assert(h_send_raw(c, buf, (size_t)n) == 0, "send failed: %s",
		  strerror(errno));
}

char *h_read(struct h_client *c, int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	enum dl_lb_result r;
	char *line, *space;
	size_t len, avail;
	ssize_t n;
	int64_t left;

	for (;;) {
		r = dl_linebuf_next(&c->lb, &line, &len);
		if (r == DL_LB_LINE) {
			memcpy(c->line, line, len + 1);
			return c->line;
		}
		if (r == DL_LB_OVERFLOW)
			return NULL; /* the server never sends one */
		if (r == DL_LB_TOOLONG)
			continue;
		left = (int64_t)(end - h_now_ms());
		if (left < 0 || poll(&p, 1, (int)left) <= 0)
			return NULL;
		space = dl_linebuf_space(&c->lb, &avail);
		n = read(c->fd, space, avail);
		if (n <= 0)
			return NULL;
		dl_linebuf_commit(&c->lb, (size_t)n);
	}
}

char *h_line(struct h_client *c)
{
	char *l = h_read(c, 5000);

	cr_assert(l != NULL, "no line from the server within 5 s");
	return l;
}

static void vformat(char *buf, size_t n, const char *fmt, va_list ap)
{
	int k = vsnprintf(buf, n, fmt, ap);

	cr_assert(k >= 0 && (size_t)k < n);
}

void h_expect(struct h_client *c, const char *fmt, ...)
{
	char want[4096];
	va_list ap;

	va_start(ap, fmt);
	vformat(want, sizeof(want), fmt, ap);
	va_end(ap);
	cr_assert_str_eq(h_line(c), want);
}

char *h_expect_prefix(struct h_client *c, const char *fmt, ...)
{
	char want[4096];
	char *l;
	va_list ap;

	va_start(ap, fmt);
	vformat(want, sizeof(want), fmt, ap);
	va_end(ap);
	l = h_line(c);
	cr_assert(strncmp(l, want, strlen(want)) == 0,
		  "expected a line starting with \"%s\", got \"%s\"", want, l);
	return l;
}

char *h_call(struct h_client *c, const char *fmt, ...)
{
	char req[4096];
	va_list ap;

	va_start(ap, fmt);
	vformat(req, sizeof(req), fmt, ap);
	va_end(ap);
	h_send(c, "%s", req);
	return h_line(c);
}

void h_expect_silence(struct h_client *c, int ms)
{
	char *l = h_read(c, ms);

	cr_assert(l == NULL, "expected nothing, got \"%s\"", l);
}

int h_wait_closed(struct h_client *c, int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	char buf[65536];
	ssize_t n;
	int64_t left;

	for (;;) {
		left = (int64_t)(end - h_now_ms());
		if (left < 0 || poll(&p, 1, (int)left) <= 0)
			return 0;
		n = read(c->fd, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			return 1;
	}
}

int h_poll_any(struct h_client *const *cs, int n, int timeout_ms)
{
	struct pollfd *p = calloc((size_t)n, sizeof(*p));
	int i, k, found = -1;

	cr_assert(p != NULL);
	for (i = 0; i < n && found < 0; i++) {
		if (cs[i]->lb.len > cs[i]->lb.start)
			found = i; /* bytes already buffered */
		p[i] = (struct pollfd){.fd = cs[i]->fd, .events = POLLIN};
	}
	if (found < 0) {
		do
			k = poll(p, (nfds_t)n, timeout_ms);
		while (k < 0 && errno == EINTR);
		for (i = 0; k > 0 && i < n && found < 0; i++)
			if (p[i].revents)
				found = i;
	}
	free(p);
	return found;
}

uint64_t h_arg_u64(const char *line, int i)
{
	struct dl_reply r;
	uint64_t v = 0;

	cr_assert(dl_parse_reply(line, strlen(line), &r) == 0,
		  "not a reply: \"%s\"", line);
	cr_assert(dl_reply_u64(&r, i, &v) == 0,
		  "argument %d of \"%s\" is not a number", i, line);
	return v;
}

const char *h_kv(const char *line, const char *key)
{
	static char out[DL_LINE_MAX + 1];
	struct dl_reply rp;
	struct dl_str v;

	cr_assert(dl_parse_reply(line, strlen(line), &rp) == 0,
		  "not a reply: \"%s\"", line);
	cr_assert(dl_reply_kv(&rp, key, &v) == 0, "no %s= in \"%s\"", key,
		  line);
	memcpy(out, v.p, v.len);
	out[v.len] = '\0';
	return out;
}

uint64_t h_kv_u64(const char *line, const char *key)
{
	const char *v = h_kv(line, key);
	uint64_t n;

	cr_assert(dl_parse_u64(v, strlen(v), &n) == 0,
		  "%s=%s in \"%s\" is not a number", key, v, line);
	return n;
}

const char *h_expect_status(struct h_client *c, const char *name,
			    const char *state, uint64_t token,
			    const char *owner, uint64_t waiters)
{
	char head[300];
	char *l = h_call(c, "STATUS %s", name);

	snprintf(head, sizeof(head), "OK STATUS %s ", name);
	cr_assert(strncmp(l, head, strlen(head)) == 0, "STATUS %s: \"%s\"",
		  name, l);
	cr_assert_str_eq(h_kv(l, "state"), state, "in \"%s\"", l);
	if (token)
		cr_assert_eq(h_kv_u64(l, "token"), token, "in \"%s\"", l);
	if (owner)
		cr_assert_str_eq(h_kv(l, "owner"), owner, "in \"%s\"", l);
	if (waiters != H_ANY_WAITERS)
		cr_assert_eq(h_kv_u64(l, "waiters"), waiters, "in \"%s\"", l);
	return l;
}

void h_expect_held(struct h_client *c, const char *name, const char *owner,
		   uint64_t token)
{
	h_expect_status(c, name, "held", token, owner, H_ANY_WAITERS);
}

uint64_t h_lock(struct h_client *c, const char *name, const char *opts)
{
	char *l = h_call(c, "LOCK %s %s", name, opts ? opts : "");
	char want[512];

	snprintf(want, sizeof(want), "OK GRANTED %s ", name);
	cr_assert(strncmp(l, want, strlen(want)) == 0,
		  "LOCK %s: expected GRANTED, got \"%s\"", name, l);
	return h_arg_u64(l, 1);
}

uint64_t h_check_ttl(const char *line, int i, uint64_t asked, uint64_t since_ms)
{
	uint64_t ttl = h_arg_u64(line, i), spent = h_now_ms() - since_ms;

	cr_assert(ttl <= asked, "TTL %llu above the %llu asked in \"%s\"",
		  (unsigned long long)ttl, (unsigned long long)asked, line);
	cr_assert(ttl + spent + 1 >= asked,
		  "TTL %llu in \"%s\": less than the %llu asked minus the %llu "
		  "ms since the request",
		  (unsigned long long)ttl, line, (unsigned long long)asked,
		  (unsigned long long)spent);
	return ttl;
}

char *h_call_ttl(struct h_client *c, const char *prefix, int i, uint64_t asked,
		 const char *fmt, ...)
{
	uint64_t t0 = h_now_ms();
	char req[DL_LINE_MAX + 1];
	va_list ap;
	char *l;

	va_start(ap, fmt);
	vsnprintf(req, sizeof(req), fmt, ap);
	va_end(ap);
	l = h_call(c, "%s", req);
	cr_assert(strncmp(l, prefix, strlen(prefix)) == 0,
		  "%s: expected \"%s...\", got \"%s\"", req, prefix, l);
	h_check_ttl(l, i, asked, t0);
	return l;
}

/* ---- added for test_persist --------------------------------------------- */

const char *h_owner_key(const char *owner)
{
	static char key[32];
	uint64_t h = 14695981039346656037ULL; /* FNV-1a 64 */
	const char *p;

	for (p = owner; *p; p++) {
		h ^= (unsigned char)*p;
		h *= 1099511628211ULL;
	}
	snprintf(key, sizeof(key), "testkey-%016llx", (unsigned long long)h);
	return key;
}

struct h_client *h_hello(int port, const char *owner)
{
	struct h_client *c = h_connect(port);
	char *l = h_call(c, "HELLO owner=%s key=%s", owner, h_owner_key(owner));

	cr_assert(strncmp(l, "OK HELLO ", 9) == 0, "HELLO: \"%s\"", l);
	return c;
}

struct h_client *h_hello_desc(int port, const char *owner, const char *desc)
{
	struct h_client *c = h_connect(port);
	char *l = h_call(c, "HELLO owner=%s key=%s %s", owner,
			 h_owner_key(owner), desc);

	cr_assert(strncmp(l, "OK HELLO ", 9) == 0, "HELLO: \"%s\"", l);
	return c;
}

void h_described_holders(struct h_client *c, const char *name, int n)
{
	char cmd[129], owner[32], want[300], *l;
	int i;

	memset(cmd, 'c', sizeof(cmd) - 1);
	cmd[sizeof(cmd) - 1] = '\0';
	snprintf(want, sizeof(want), "OK GRANTED %s ", name);
	for (i = 0; i < n; i++) {
		snprintf(owner, sizeof(owner), "o%d", i);
		l = h_call(c, "HELLO owner=%s key=%s host=h%d pid=%d cmd=%s",
			   owner, h_owner_key(owner), i, i + 1, cmd);
		cr_assert(strncmp(l, "OK HELLO", 8) == 0, "%s", l);
		l = h_call(c, "LOCK %s mode=shared ttl=120s", name);
		cr_assert(strncmp(l, want, strlen(want)) == 0, "%s", l);
	}
}

int h_has_kv(const char *line, const char *key)
{
	size_t n = strlen(key);
	const char *p = line;

	while ((p = strstr(p, key)) != NULL) {
		if ((p == line || p[-1] == ' ') && p[n] == '=')
			return 1;
		p += n;
	}
	return 0;
}

uint64_t h_wait_free(struct h_client *c, const char *name, int max_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)max_ms;
	char *l;

	for (;;) {
		l = h_call(c, "STATUS %s", name);
		if (strcmp(h_kv(l, "state"), "free") == 0)
			return h_now_ms();
		cr_assert(h_now_ms() < end,
			  "%s still held after %d ms: "
			  "\"%s\"",
			  name, max_ms, l);
		h_sleep_ms(10);
	}
}

uint64_t h_wait_stat(struct h_client *c, const char *key, uint64_t want,
		     int max_ms)
{
	uint64_t t0 = h_now_ms(), got;

	while ((got = h_stats_value(c, key)) != want) {
		cr_assert(h_now_ms() - t0 < (uint64_t)max_ms,
			  "%s=%llu after %d ms, want %llu", key,
			  (unsigned long long)got, max_ms,
			  (unsigned long long)want);
		h_sleep_ms(10);
	}
	return h_now_ms() - t0;
}

uint64_t h_wait_available(struct h_client *c, uint64_t want, int max_ms)
{
	return h_wait_stat(c, "store_available", want, max_ms);
}

uint64_t h_stats_reply(struct h_client *c, const char *key, int timeout_ms)
{
	char *l = h_read(c, timeout_ms);
	uint64_t n, i, v = 0;
	size_t klen = strlen(key);
	int found = 0;

	cr_assert(l && strncmp(l, "OK STATS ", 9) == 0, "STATS: \"%s\"",
		  l ? l : "(nothing)");
	n = h_arg_u64(l, 0);
	for (i = 0; i < n; i++) {
		l = h_line(c);
		if (strncmp(l, key, klen) == 0 && l[klen] == ' ') {
			cr_assert(dl_parse_u64(l + klen + 1,
					       strlen(l + klen + 1), &v) == 0,
				  "STATS line \"%s\"", l);
			found = 1;
		}
	}
	cr_assert(found, "STATS has no %s", key);
	return v;
}

uint64_t h_stats_value(struct h_client *c, const char *key)
{
	h_send(c, "STATS");
	return h_stats_reply(c, key, 5000);
}

int h_redis_wait(const struct h_redis *r, const char *cmd, const char *needle,
		 int want, int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		if ((strstr(h_redis_cli(r, cmd), needle) != NULL) ==
		    (want != 0))
			return 1;
		if (h_now_ms() > end)
			return 0;
		h_sleep_ms(20);
	}
}

/* ---- the daemon's keys in Redis ------------------------------------------ */

const char *h_rec_key(const char *name)
{
	static char key[64];

	snprintf(key, sizeof(key), "dlock:rec:%u",
		 (unsigned)dl_store_bucket(name, strlen(name)));
	return key;
}

const char *h_rec_cmd(const char *verb, const char *name)
{
	static char cmd[512];

	snprintf(cmd, sizeof(cmd), "%s %s %s", verb, h_rec_key(name), name);
	return cmd;
}

const char *h_rec_get(const struct h_redis *r, const char *name)
{
	return h_redis_cli(r, h_rec_cmd("HGET", name));
}

void h_rec_plant(const struct h_redis *r, const char *name, const char *text)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd),
		 "printf '%s' | redis-cli -h %s -p %d -x HSET %s %s >/dev/null",
		 text, r->host, r->port, h_rec_key(name), name);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}
